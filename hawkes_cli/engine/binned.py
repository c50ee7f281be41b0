"""Background term on a uniform time lattice by FFT, with a rigorous per-row error bound.

The contract (DESIGN section 2) needs, for every row n of events sorted by time (days)::

    B_n = rho * sum_{m : t_m != t_n} phi1(t_n - t_m; tau_t),    rho = 1 / area.

Summed once per distinct time this is O(U^2) pair terms: cheap on a day lattice, a full pair
sum when all N times are distinct. :class:`BinnedBackground` computes an approximation ``B~``
in O(L log L + N) for a lattice of L points, and a bound ``beta_n >= |B~_n - B_n|``.

Lattice
-------
Points ``g_j = t_0 + j h`` (``j = 0 .. L - 1``), ``t_0`` the first event time, ``h = 2^e``
days (a power of two: ``s = (t - t_0) / h`` and its fraction add no rounding to ``t - t_0``), and
``L = floor((t_max - t_0) / h) + 2``, so that ``j + 1 < L`` for every event's cell ``j``.
Default ``h``: the finest power of two of at most ``2^-6`` days whose lattice has at most
:data:`MAX_POINTS` (``2^20``) points; on a huge span ``h`` grows by powers of two (above
``2^-6`` days) until the lattice fits. A pass for a long ``tau_t`` uses a coarser lattice,
``h = 2^floor(log2(tau_t / R_N))`` when that is coarser, ``R_N`` = :func:`resolution_for` (N)
(4096 from about 130,000 events on, down to 128): its error is about ``(h / tau_t)^2 / 6`` of B,
summed over the events a few thousandths of a nat, and its FFT far cheaper (each
lattice's O(N) arrays are built on first use; the last :data:`LEVELS_KEPT` are kept). An
explicit ``spacing`` is used for every ``tau_t``. If every event lies exactly on the default
lattice (whole days, quarter days, any power-of-two grid, offset or not), ``h`` is instead the
coarsest power of two on which they all still lie (a day lattice for whole days), for every
``tau_t``: then nothing is approximated (:attr:`BinnedBackground.exact`) and the bound is
identically 0.

Cost per pass: two real FFTs of length about ``L + min(L, 39 tau_t / h)`` for ``B~``, three
small ones for the bound (on blocks of cells, below), and O(rows) gathers.

Method
------
Write ``s_m = (t_m - t_0) / h = j_m + a_m`` (cell ``j_m``, fraction ``a_m`` in [0, 1)) and
``e(x) = exp(-x^2 / (2 tau_t^2))`` (so ``phi1 = e / (sqrt(2 pi) tau_t)``). Each event puts
weight ``1 - a_m`` on ``j_m`` and ``a_m`` on ``j_m + 1`` (cloud in cell): lattice counts ``C``.
``G'_i = sum_{j != i} C_j e((i - j) h)`` is one linear (zero-padded, not circular) convolution
by real FFT; the kernel is sampled at every lag up to ``L - 1`` except where ``e`` underflows
to 0 in float64 (``|x| > 39 tau_t``), so nothing but float rounding is left out. For row n
(cell ``i``, fraction ``b = a_n``, ``q = b (1 - b)``), with ``c_n`` the events at exactly
``t_n`` (ties, itself included), the lattice sum interpolated back is::

    G~_n = (1 - b) G_i + b G_{i+1},      G = G' + C e(0)  (the full lattice sum, lag 0 included)

Every tie of n sits in n's cell at n's fraction, so its part of ``G~_n`` is exactly
``A_tie = (1 - b)^2 + b^2 + 2 q e(h)`` (what the lattice makes of ``e(0)``). It is removed as
such, not as ``e(0)``, so that no tie enters the error::

    B~_n = rho / (sqrt(2 pi) tau_t) * (G~_n - c_n A_tie)
         = rho / (sqrt(2 pi) tau_t) * ((1 - b) G'_i + b G'_{i+1} - 2 c_n q e(h)
                                       + (1 - b) C_i + b C_{i+1} - c_n ((1 - b)^2 + b^2))

and ``B~_n`` is replaced by ``max(B~_n, 0)`` (``B_n >= 0``, so this never moves it away from
``B_n``). On an exact lattice ``b = 0`` and ``C_i = c_n`` (the events of a lattice point are
ties), so ``B~_n = rho / (sqrt(2 pi) tau_t) G'_i``: the own point's lag 0 is left out of the
kernel, never added and subtracted.

Bound (derivation)
------------------
Let ``F(x, y) = e(h (x - y))`` (so ``e(t_n - t_m) = F(s_n, s_m)``). Expanding the two linear
maps, ``G~_n = sum_m A_nm`` over all m, where ``A_nm = sum_{x in {i, i+1}} sum_{y in {j,
j+1}} u_x w_y F(x, y)`` with ``u = (1 - b, b)``, ``w = (1 - a_m, a_m)``, ``j = j_m``: the
tensor-product linear interpolant of F on the cell ``[i, i+1] x [j, j+1]`` at ``(s_n, s_m)``;
for a tie ``A_nm = A_tie``. Hence, exactly,

    B~_n - B_n = rho / (sqrt(2 pi) tau_t) * sum_{m : t_m != t_n} (A_nm - F(s_n, s_m))

(before the clip, which only helps). Interpolate in y first: at ``x = i`` and ``x = i + 1``
the error of linear interpolation is at most ``a_m (1 - a_m) / 2 * max_y |F_yy|`` (the
classical ``a (1 - a) h^2 f''(xi) / 2``: exact on linear functions, at most ``h^2 / 8 *
max|f''|`` over a cell); interpolating those two values in x carries their convex combination
(no larger) and adds at most ``q / 2 * max_x |F_xx|`` at ``y = s_m``. Both derivatives are
``h^2 e''(h (x - y))`` with ``x - y`` in ``[k - 1, k + 1]``, ``k = i - j_m``, so with
``M_k = max_{|u - k| <= 1} |e''(u h)|``::

    |A_nm - F(s_n, s_m)| <= h^2 / 2 * (a_m (1 - a_m) + q) * M_{i - j_m}.

Summed over the non-ties, with lattice arrays ``P_j = sum_{j_m = j} a_m (1 - a_m)`` and
``N_j = #{m : j_m = j}``, and the lag 0 (n's own cell, where the ties are) taken apart::

    beta_n = rho / (sqrt(2 pi) tau_t) * h^2 / 2
             * ((P *' M)_i + q (N *' M)_i + M_0 ((P_i - c_n q) + q (N_i - c_n)))

(``*'``: linear convolution over lags ``k != 0``), and ``|B~_n - B_n| <= beta_n``.
``|e''(x)| = e(x) |x^2 / tau_t^2 - 1| / tau_t^2`` decreases on ``[0, tau_t]``, increases on
``[tau_t, sqrt(3) tau_t]`` and decreases after it, so its maximum over an interval of ``|x|``
is at an end or at ``sqrt(3) tau_t`` (or 0): ``M_k`` is exact up to rounding.

The bound is evaluated on blocks of ``R = 2^r`` cells, ``R h <= tau_t / BLOCK_RATIO`` (128),
so its FFTs are small: with block sums ``P^R``, ``N^R`` and block ``I`` of cell ``i``, every
cell lag ``k`` between blocks ``I`` and ``J`` lies within ``R - 1`` of ``R (I - J)``, so
``M_k <= M^R_{I-J} = max_{|u - R (I - J)| <= R} |e''(u h)|`` (the same rule of ends and
``sqrt(3) tau_t``) and::

    beta_n = rho / (sqrt(2 pi) tau_t) * h^2 / 2 * ((P^R *' M^R)_I + q (N^R *' M^R)_I
                                                   + M^R_0 (P^R_I + q N^R_I - 2 c_n q))

(``R = 1`` is the formula above; the own block's lag 0 is summed directly, not by FFT, and the
ties, in the own cell, are taken out of it). The bound is 0 where all fractions are 0 (an exact
lattice). Relative to ``B`` it is about ``h^2 / (6 tau_t^2)`` for events spread evenly
(``h = 2^-10``: ``1.6e-7 / tau_t^2``; a coarsened lattice: at most about ``1e-8``), and close
to the realised error where the terms share the sign of ``e''`` (a pair at half-cell fractions
attains it up to the variation of ``e''`` over a cell). When ``tau_t`` is comparable to or
below ``h`` the approximation is poor and the bound, still valid, is large (of order ``B`` or
more): pass a finer ``spacing`` then.

Rounding
--------
As for :attr:`~hawkes_cli.engine.base.Evaluation.error_bound`, float64 rounding is not in the
bound (the bound's own evaluation is inflated by :data:`ROUNDING_SLACK`, relative). ``B~``'s
rounding is absolute: a few ``1e-16`` of ``rho phi1(0)`` times the events near the row (its
ties' lattice share is added and removed again), plus the FFT's, about ``1e-16 * log2(size) *
||C||_2 * ||e||_2`` on every lattice point. It matters only for a row whose ``B`` is many
orders below ``rho phi1(0)``, i.e. an event isolated by many ``tau_t`` from all others: such a
row keeps its absolute accuracy, not its relative one.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.fft as sfft

from .times import TimeStructure

log = logging.getLogger(__name__)

#: Most lattice points of the default spacing (the spacing doubles until the lattice fits).
MAX_POINTS = 2**20
#: Coarsest default spacing exponent on an ordinary span (``2^-6`` days, 22.5 minutes).
DEFAULT_EXPONENT = -6
#: Finest default spacing exponent (only reached on spans below ``2^-10`` days).
FINEST_EXPONENT = -30
#: Most lattice points accepted for an explicit ``spacing`` (memory: a few arrays of this size).
HARD_MAX_POINTS = 2**26
#: ``exp(-u^2 / 2)`` is exactly 0 in float64 beyond ``u = 38.6``: the kernel's reach in
#: ``tau_t``.
UNDERFLOW_REACH = 39.0
#: Default lattices are coarsened for long ``tau_t`` to a spacing of at most ``tau_t /
#: RESOLUTION`` (relative bound about ``1 / (6 RESOLUTION^2)``, 1e-8, for evenly spread events).
RESOLUTION = 4096
#: With fewer events the coarsening goes further, to ``tau_t / R_N`` with ``R_N =
#: sqrt(N / (6 BUDGET_NATS))`` (at least :data:`COARSEST_RESOLUTION`, at most RESOLUTION): the
#: relative bound summed over N events stays near this many nats (about 0.003 nats on the
#: demo's 4,000 events, whose FFTs it makes 4x shorter; a million events keep RESOLUTION).
BUDGET_NATS = 0.005
#: Fewest lattice points per ``tau_t`` whatever N (relative bound about 1e-5).
COARSEST_RESOLUTION = 128
#: Lattices (spacings) kept built: their row arrays take about 50 bytes per row each.
LEVELS_KEPT = 2
#: The bound's blocks: ``2^r`` cells, as many as keep a block within ``tau_t / BLOCK_RATIO``.
BLOCK_RATIO = 128.0
#: Cached data spectra (one per FFT length and block size; tau_t moves slowly in a chain).
SPECTRA_KEPT = 6
#: Relative inflation of the computed bound, for the rounding of its own evaluation.
ROUNDING_SLACK = 1e-9


def _is_power_of_two(h: float) -> bool:
    return math.isfinite(h) and h > 0 and math.frexp(h)[0] == 0.5


def resolution_for(n: int) -> int:
    """Lattice points per ``tau_t`` for ``n`` events: ``sqrt(n / (6 BUDGET_NATS))`` rounded up to
    a power of two, within ``[COARSEST_RESOLUTION, RESOLUTION]``."""
    want = math.sqrt(max(n, 1) / (6.0 * BUDGET_NATS))
    return int(min(RESOLUTION, max(COARSEST_RESOLUTION, 1 << math.ceil(math.log2(want)))))


def _lattice_size(span: float, exponent: int) -> int:
    """Points of a lattice of spacing ``2^exponent`` covering ``span`` (>= 0) with one spare."""
    return math.floor(math.ldexp(span, -exponent)) + 2


def _on_lattice(offset: np.ndarray, t: np.ndarray, t0: float, exponent: int) -> bool:
    """Whether every ``t = t0 + offset`` lies exactly on the lattice ``t0 + j 2^exponent``."""
    s = np.ldexp(offset, -exponent)
    j = np.floor(s)
    return bool(np.array_equal(s, j) and np.array_equal(t0 + np.ldexp(j, exponent), t))


def default_exponent(span: float) -> int:
    """Spacing exponent e (``h = 2^e`` days) of the default lattice for a time span (days).

    The finest ``e <= DEFAULT_EXPONENT`` (and ``>= FINEST_EXPONENT``) with at most
    :data:`MAX_POINTS` points; above ``DEFAULT_EXPONENT`` only when the span needs it.
    """
    e = DEFAULT_EXPONENT
    while _lattice_size(span, e) > MAX_POINTS:
        e += 1
    while e > FINEST_EXPONENT and _lattice_size(span, e - 1) <= MAX_POINTS:
        e -= 1
    return e


def _curvature_max(r0: np.ndarray, r1: np.ndarray, tau: float) -> np.ndarray:
    """``max |e''(r)|`` over ``r`` in ``[r0, r1]`` (``0 <= r0 <= r1``, days), elementwise, for
    ``e(r) = exp(-r^2 / (2 tau^2))`` (see the module: ends and ``sqrt(3) tau``)."""

    def mag(r: np.ndarray) -> np.ndarray:
        z = (r / tau) ** 2
        return np.exp(-0.5 * z) * np.abs(z - 1.0) / (tau * tau)

    out = np.maximum(mag(r0), mag(r1))
    peak = math.sqrt(3.0) * tau
    inside = (r0 <= peak) & (peak <= r1)
    if np.any(inside):
        out[inside] = np.maximum(out[inside], 2.0 * math.exp(-1.5) / (tau * tau))
    return out


@dataclass
class _Level:
    """The lattice of one spacing ``2^exponent`` days and this instance's rows on it.

    ``lattice``: ``C`` (cloud-in-cell counts), and for a bounded lattice ``P`` (sum of
    ``a (1 - a)`` by cell) and ``N`` (events by cell), each (points,) float64. Row arrays,
    (rows,): ``cell`` (int64), ``b``, ``one_minus_b``, ``q = b (1 - b)``, ``extra = (1 - b)
    C_i + b C_{i+1} - c ((1 - b)^2 + b^2)`` and ``tq = 2 c q`` (``c``: the row's ties).
    """

    exponent: int
    points: int
    lattice: dict[str, np.ndarray]
    cell: np.ndarray
    b: np.ndarray
    one_minus_b: np.ndarray
    q: np.ndarray
    extra: np.ndarray
    tq: np.ndarray
    blocks: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def spacing(self) -> float:
        return math.ldexp(1.0, self.exponent)


@dataclass(frozen=True, eq=False)
class LatticePass:
    """One ``tau_t``'s lattice sums (:meth:`BinnedBackground.lattice_pass`): with a level's row
    arrays (:meth:`BinnedBackground.level`) they give every row's ``B~`` and ``beta``.

    Attributes
    ----------
    exponent : int
        The lattice's spacing ``h = 2^exponent`` days (which level's rows).
    exact : bool
        Every event on the lattice: ``B~_n = max(norm conv_i, 0)``, ``beta_n = 0``.
    norm : float
        ``rho / (sqrt(2 pi) tau_t)``.
    conv : (points,) float64
        ``G'`` of the module (the lattice counts convolved with ``e`` off lag 0).
    g1 : float
        ``e(h)``.
    shift, u, v, m0, scale
        The bound (not when ``exact``): blocks of ``2^shift`` cells, its block sums ``u`` and
        ``v`` ((blocks,) float64), ``M^R_0`` and ``h^2 / 2`` inflated by
        :data:`ROUNDING_SLACK`: ``beta_n = max(q v_I + u_I - M^R_0 tq_n, 0) scale norm``.
    """

    exponent: int
    exact: bool
    norm: float
    conv: np.ndarray
    g1: float
    shift: int = 0
    u: np.ndarray = field(default_factory=lambda: np.zeros(1))
    v: np.ndarray = field(default_factory=lambda: np.zeros(1))
    m0: float = 0.0
    scale: float = 0.0


class BinnedBackground:
    """Background ``B`` of rows ``[row_start, row_stop)`` on a time lattice, with its bound.

    Parameters
    ----------
    time : (N,) float64
        All event times, sorted ascending (days).
    area : float
        Study-region area A (coordinate units squared); ``rho = 1 / A``.
    rows : (int, int)
        ``(start, stop)`` rows this instance owns (``0 <= start <= stop <= N``).
    times : TimeStructure
        Tie structure of ``time`` (:meth:`TimeStructure.from_times`).
    spacing : float, optional
        Lattice spacing h in days, a power of two (``2^-k``), used for every ``tau_t``.
        Default: see the module (the finest power of two ``<= 2^-6`` days within
        :data:`MAX_POINTS` points, coarsened for long ``tau_t`` down to ``tau_t /``
        :func:`resolution_for` (N); or the coarsest exact lattice when the times lie on one).

    Attributes
    ----------
    row_start, row_stop : int
        The rows.
    spacing : float
        The finest lattice spacing h (days); :meth:`spacing_for` gives the one a ``tau_t``
        uses.
    exponent : int
        ``log2(spacing)``.
    points : int
        Points L of the finest lattice.
    """

    def __init__(
        self,
        time: np.ndarray,
        *,
        area: float,
        rows: tuple[int, int],
        times: TimeStructure,
        spacing: float | None = None,
    ) -> None:
        t = np.ascontiguousarray(time, dtype=np.float64)
        n = t.size
        if t.ndim != 1:
            raise ValueError("time must be one-dimensional")
        if n and not np.all(np.isfinite(t)):
            raise ValueError("event times must be finite")
        if n and np.any(np.diff(t) < 0):
            raise ValueError("times must be sorted ascending")
        if times.inverse.size != n:
            raise ValueError(f"the tie structure has {times.inverse.size} events, time has {n}")
        if not (math.isfinite(area) and area > 0):
            raise ValueError(f"area must be finite and > 0, got {area!r}")
        r0, r1 = (int(rows[0]), int(rows[1]))
        if not 0 <= r0 <= r1 <= n:
            raise ValueError(f"rows {rows!r} are not within [0, {n}]")
        if spacing is not None and not _is_power_of_two(float(spacing)):
            raise ValueError(f"spacing must be a power of two (days), got {spacing!r}")
        self.row_start, self.row_stop = r0, r1
        self.rho = 1.0 / float(area)
        t0 = float(t[0]) if n else 0.0
        self._span = span = float(t[-1]) - t0 if n else 0.0
        offset = t - t0
        # on a lattice or not is a property of the distinct times: O(U) checks
        tu = np.asarray(times.unique, dtype=np.float64)
        if tu.size and (tu[0] != t0 or tu[-1] != t[-1]):
            raise ValueError("the tie structure is not that of time")
        ou = tu - t0
        if spacing is not None:
            e = math.frexp(float(spacing))[1] - 1
            if _lattice_size(span, e) > HARD_MAX_POINTS:
                raise ValueError(
                    f"spacing {spacing!r} days needs {_lattice_size(span, e)} lattice points "
                    f"for a span of {span:g} days (at most {HARD_MAX_POINTS}); use a coarser one"
                )
            self._exact = _on_lattice(ou, tu, t0, e)
        else:
            e = default_exponent(span)
            self._exact = _on_lattice(ou, tu, t0, e)
            if self._exact:  # coarsest power of two the times still lie on
                top = max(e, math.floor(math.log2(span)) if span > 0 else 0)
                while e < top and _on_lattice(ou, tu, t0, e + 1):
                    e += 1
        self._adaptive = spacing is None and not self._exact
        self.resolution = resolution_for(n)
        self.exponent = e
        self.spacing = math.ldexp(1.0, e)
        self.points = _lattice_size(span, e)
        self._offset = offset  # (N,) days from the first event
        self._ties = times.counts[times.inverse[r0:r1]].astype(np.float64)  # c_n of the rows
        self._levels: dict[int, _Level] = {}
        self._spectra: dict[tuple[str, int, int, int], np.ndarray] = {}
        self._level(e)
        log.debug(
            "binned background: %d events, span %g days, lattice 2^%d days x %d points (%s)",
            n,
            span,
            e,
            self.points,
            "exact" if self._exact else "bounded",
        )

    @property
    def exact(self) -> bool:
        """Whether every event lies on the lattice: ``B~`` is then the exact sum (up to
        rounding) and the bound identically 0."""
        return self._exact

    @property
    def path(self) -> str:
        """Which computation the background takes (for ``hawkes-run loglik``)."""
        kind = "exact" if self._exact else "bounded"
        coarser = f" (coarser for tau_t: at most tau_t/{self.resolution})" if self._adaptive else ""
        return f"background: lattice of 2^{self.exponent} days{coarser}, FFT (float64, {kind})"

    def spacing_for(self, tau_t: float) -> float:
        """The lattice spacing (days) that :meth:`background` uses for ``tau_t`` (days)."""
        return math.ldexp(1.0, self._exponent_for(float(tau_t)))

    def _exponent_for(self, tau: float) -> int:
        if not self._adaptive:
            return self.exponent
        return max(self.exponent, math.floor(math.log2(tau / self.resolution)))

    def _level(self, e: int) -> _Level:
        """The lattice of spacing ``2^e`` (built on first use; the last two are kept)."""
        hit = self._levels.pop(e, None)
        if hit is None:
            hit = self._build_level(e)
        self._levels[e] = hit
        while len(self._levels) > LEVELS_KEPT:
            del self._levels[next(iter(self._levels))]
        return hit

    def _build_level(self, e: int) -> _Level:
        """Everything of one lattice that does not depend on ``tau_t``: O(N)."""
        L = _lattice_size(self._span, e)
        s = np.ldexp(self._offset, -e)
        j = np.floor(s)
        a = s - j  # exact: s >= 0 and floor(s) has no more significant bits
        j = j.astype(np.int64)
        if self._exact:  # every a is 0
            lattice = {"C": np.bincount(j, minlength=L).astype(np.float64)}
        else:
            lattice = {
                "C": np.bincount(j, weights=1.0 - a, minlength=L)
                + np.bincount(j + 1, weights=a, minlength=L),
                "P": np.bincount(j, weights=a * (1.0 - a), minlength=L),
                "N": np.bincount(j, minlength=L).astype(np.float64),
            }
        r0, r1 = self.row_start, self.row_stop
        cell = j[r0:r1].copy()
        b = a[r0:r1].copy()
        one_minus_b = 1.0 - b
        q = b * one_minus_b
        c = self._ties
        counts = lattice["C"]
        # (1 - b) C_i + b C_{i+1} - c ((1 - b)^2 + b^2): lag-0 lattice terms minus the ties'
        extra = one_minus_b * counts[cell] + b * counts[cell + 1]
        extra -= c * (one_minus_b**2 + b * b)
        # 2 c q: the ties' lag-1 part of B (times e(h)) and their part of the bound (times M_0)
        tq = 2.0 * c * q
        return _Level(e, L, lattice, cell, b, one_minus_b, q, extra, tq)

    @staticmethod
    def _fft_size(points: int, reach: int) -> int:
        """FFT length for ``points`` lattice values and a kernel of ``reach`` lags each side:
        at least ``points + reach`` (no wrap-around onto a lattice point), the reach rounded up
        to a power of two (at most ``points``) so that few lengths occur."""
        reach = min(1 << max(reach - 1, 0).bit_length(), points)
        return sfft.next_fast_len(points + reach, real=True)

    def _spectrum(self, key: tuple[str, int, int], values: np.ndarray, size: int) -> np.ndarray:
        """``rfft`` of a lattice array (``key``: name, lattice exponent, block level),
        zero-padded to ``size``; the last :data:`SPECTRA_KEPT` are cached."""
        full = (*key, size)
        hit = self._spectra.pop(full, None)
        if hit is None:
            hit = sfft.rfft(values, n=size)
        self._spectra[full] = hit  # most recent last
        while len(self._spectra) > SPECTRA_KEPT:
            del self._spectra[next(iter(self._spectra))]
        return hit

    @staticmethod
    def _wrapped(kernel: np.ndarray, size: int) -> np.ndarray:
        """Symmetric lags ``kernel[0..K]`` laid out circularly over ``size`` (zeros between)."""
        out = np.zeros(size)
        k = kernel.size - 1
        out[: k + 1] = kernel
        if k:
            out[size - k :] = kernel[:0:-1]
        return out

    def _convolve(
        self, key: tuple[str, int, int], values: np.ndarray, kernel: np.ndarray
    ) -> np.ndarray:
        """Linear convolution of a lattice array with a symmetric kernel (lags 0..K, K below
        the array's length), at the array's points."""
        points = values.size
        size = self._fft_size(points, kernel.size - 1)
        kf = sfft.rfft(self._wrapped(kernel, size))
        kf *= self._spectrum(key, values, size)
        return sfft.irfft(kf, n=size)[:points]

    def background(self, tau_t: float) -> tuple[np.ndarray, np.ndarray]:
        """Approximate ``B`` of the rows and its bound.

        Parameters
        ----------
        tau_t : float
            Temporal lengthscale of the background (days, > 0).

        Returns
        -------
        B : (rows,) float64
            ``B~_n``, approximating ``rho * sum_{t_m != t_n} phi1(t_n - t_m; tau_t)``
            (per coordinate unit squared per day).
        beta : (rows,) float64
            ``beta_n >= |B~_n - B_n|`` (same units; identically 0 when :attr:`exact`);
            float64 rounding excluded.
        """
        nrows = self.row_stop - self.row_start
        lp = self.lattice_pass(tau_t)
        if nrows == 0:
            return np.zeros(0), np.zeros(0)
        lv = self.level(lp.exponent)
        i = lv.cell
        if self._exact:
            B = lp.norm * lp.conv[i]
            np.maximum(B, 0.0, out=B)
            return B, np.zeros(nrows)
        B = lv.one_minus_b * lp.conv[i]
        B += lv.b * lp.conv[i + 1]
        B += lv.extra
        B -= lv.tq * lp.g1
        B *= lp.norm
        np.maximum(B, 0.0, out=B)
        block = i >> lp.shift if lp.shift else i
        beta = lv.q * lp.v[block]
        beta += lp.u[block]
        beta -= lp.m0 * lv.tq
        np.maximum(beta, 0.0, out=beta)
        beta *= lp.scale
        return B, beta * lp.norm

    def level(self, exponent: int) -> _Level:
        """The rows' arrays on the lattice of spacing ``2^exponent`` (:attr:`LatticePass.
        exponent`), built on first use (the last :data:`LEVELS_KEPT` kept)."""
        return self._level(exponent)

    def lattice_pass(self, tau_t: float) -> LatticePass:
        """What :meth:`background` gathers into the rows for ``tau_t`` (days, > 0): the lattice
        sums of ``B~`` and of its bound (FFTs of the lattice, no O(rows) work once the level
        is built). :mod:`.row_sums` gathers the same on a device."""
        tau = float(tau_t)
        if not (math.isfinite(tau) and tau > 0):
            raise ValueError(f"tau_t must be finite and > 0, got {tau_t!r}")
        lv = self._level(self._exponent_for(tau))
        L, h = lv.points, lv.spacing
        norm = self.rho / (math.sqrt(2.0 * math.pi) * tau)
        # lags where e(k h) is not exactly 0 in float64, and none beyond L - 1 (no two
        # lattice points are farther apart)
        reach = int(min(L - 1, math.ceil(UNDERFLOW_REACH * tau / h) + 1))
        g = np.exp(-0.5 * (np.arange(reach + 1, dtype=np.float64) * h / tau) ** 2)
        g[0] = 0.0  # the own lattice point: ties (and on a lattice, the only ones)
        conv = self._convolve(("C", lv.exponent, 0), lv.lattice["C"], g)
        g1 = float(g[1]) if g.size > 1 else 0.0
        if self._exact:
            return LatticePass(lv.exponent, True, norm, conv, g1)
        r, u, v, m0 = self._bound_sums(tau, lv)
        scale = 0.5 * h * h * (1.0 + ROUNDING_SLACK)
        return LatticePass(lv.exponent, False, norm, conv, g1, r, u, v, m0, scale)

    def _bound_sums(self, tau: float, lv: _Level) -> tuple[int, np.ndarray, np.ndarray, float]:
        """``(r, u, v, M^R_0)`` of the bound on blocks of ``R = 2^r`` cells (the module's
        ``beta_n`` is ``h^2 / 2 * (u_I + q v_I - M^R_0 tq_n)`` per ``rho / (sqrt(2 pi)
        tau_t)``, floored at 0): a block pair at block lag D holds cell lags within ``R - 1``
        of ``R D``, so ``M^R_D = max_{|u - R D| <= R} |e''(u h)| >= M_k`` for each of them;
        the ties (in the row's own block) are taken out of the lag-0 term."""
        h = lv.spacing
        r = max(0, math.floor(math.log2(tau / (BLOCK_RATIO * h))))
        r = min(r, max(lv.points - 1, 1).bit_length())
        R = 1 << r
        if r not in lv.blocks:
            lat = lv.lattice
            starts = np.arange(0, lv.points, R)
            while len(lv.blocks) >= LEVELS_KEPT:
                del lv.blocks[next(iter(lv.blocks))]
            lv.blocks[r] = (
                (lat["P"], lat["N"])
                if r == 0
                else (np.add.reduceat(lat["P"], starts), np.add.reduceat(lat["N"], starts))
            )
        p_r, n_r = lv.blocks[r]
        reach = int(min(p_r.size - 1, math.ceil(UNDERFLOW_REACH * tau / (R * h)) + 2))
        d = np.arange(reach + 1, dtype=np.float64) * R
        m = _curvature_max(np.maximum(d - R, 0.0) * h, (d + R) * h, tau)
        m0 = float(m[0])
        m[0] = 0.0  # lag 0 (the own block) summed directly, without the ties
        u = np.maximum(self._convolve(("P", lv.exponent, r), p_r, m), 0.0)
        v = np.maximum(self._convolve(("N", lv.exponent, r), n_r, m), 0.0)
        u += m0 * p_r
        v += m0 * n_r
        return r, u, v, m0
