"""Fast OpenCL engine: exact day-lattice background and an error-bounded truncated trigger.

Background
----------
``B_n`` depends on ``t_n`` alone, so :class:`~hawkes_cli.engine.opencl.OpenCLBackend` already
evaluates it once per *distinct* time over (distinct time, count) pairs: O(U^2 + N) with U
distinct times, and the tie rule (skip every ``t_m == t_n``) is exactly "skip the own distinct
time". On a day lattice U is the number of days; with continuous times U = N and it *is* the
pair sum, so no switch is needed: both are the same arithmetic on the same terms.

Truncated trigger and its bound
-------------------------------
Write the trigger of row n as ``E_n = c * sum_{m < lo_n} a_nm`` with
``c = 1 / (2 pi sigma_x^2 sigma_t)`` and, with ``w_m = D_m`` (model 2) or 1 (model 1) and
``s_m = sigma_x / sqrt(w_m)``::

    a_nm = w_m * exp(-(t_n - t_m) / sigma_t) * exp(-|x_n - x_m|^2 / (2 s_m^2)).

Levels and cut-offs. Sources are sorted into a uniform grid per *level* (model 1: one level;
model 2: level ``l_m = ceil(log2(sqrt(D_max / D_m)))``, so the densities of a level lie within
a factor 4, between ``floor_l`` and ``ceil_l``). Each level has its own cut-off exponent
``kappa_l = kappa + log(ceil_l / max ceil)`` (at least 1; model 1: ``kappa``): a source's
omitted term is at most its weight times ``exp(-kappa_l)``, so every level omits about the same
per source, and the sparse levels, whose wide kernels hold the most sources, are cut earlier.
The level's radius is ``R_l = sqrt(2 kappa_l) sigma_x / sqrt(floor_l) <= h_l`` (cell size).

Row blocks (``truncated_blocks``, model 1, and ``truncated_blocks2``, model 2, in
``kernels/truncated.cl``): up to 16 rows of one cell within 8 ``sigma_t`` share the enumeration
of cells and their searches, level by level. Rows of dense levels (tiny cells, one or two
rows each) are grouped by the cells of a coarser level (``grid.grouping_level``), and each
block skips the levels with no source within its reach (``grid.block_levels``; such sources
are all in the far part below). With ``d`` the distance from a row to a cell's (or
sub-cell's) rectangle and ``floor_c >= floor_l`` the smallest density of the cell's sources,
every source of the cell has ``a_nm <= w_m exp(-(t_n - t_m) / sigma_t) exp(-d^2 floor_c / (2
sigma_x^2))``. A row sums exactly the sources of cells nearer than ``R_l`` that are newer than
the block's ``min_j (t_j - sigma_t (kappa_l - v_j))``, ``v_j = d_j^2 floor_c / (2 sigma_x^2)``
(the paraboloid ``u + v <= kappa_l`` of the ideal cut-off, widened to the block); the older
ones of those cells are bounded by sub-cell (4 x 4 sub-cells in the rows' own cell, 4 strips
in the others; per-cell prefix sums of ``w_m exp(t_m / sigma_t)``), cells between ``R_l`` and
``1.5 R_l`` by their own distance (``ring_n``), and everything farther by ``far_n = sum_{m <
lo_n} exp(-2.25 kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)`` (O(N) on the host). When the time
span exceeds 600 ``sigma_t``, prefix sums are plain weights and the ring and far parts are
bounded together with ``exp(-kappa_l(m))``.

Expansion boxes. A dense cluster of one density under a wide kernel (a sparse-density city:
at 200k, model 2, most of the kernel's time went to one city's pairs within ``kappa_l
sigma_t``) is summed by moments instead: the sources of level l that share a box of side
``BOX_SIDE`` (2) kernel lengthscales ``sigma_x / sqrt(ceil_l)`` with at least ``EXPAND_MIN``
(256) sources of one density form level ``L + l`` (``grid.build_index``), whose cells are
those boxes. For a row block, a box's sources older than its rows (up to the last of the
prefixes kept every 8 sources) enter through ``HERMITE_ORDER^2`` (23 x 23) Hermite moments
about the box's centre (``cell_moments``; time enters as ``exp(t_m / sigma_t)`` weights, so
*all* older sources are summed and nothing is cut in time), the newer ones pair by pair. The
series' truncation is bounded by Cramer's inequality for Hermite polynomials; E is lowered
by that bound and twice it goes into ``tail_n``, so ``E~_n <= E_n`` still holds (see
``kernels/truncated.cl``). Only with exponential prefixes (the span below 600 ``sigma_t``);
otherwise the boxes are ordinary cells.

The grid index, the row blocks and each block's levels are built for ``sigma_x`` and
``sigma_t`` rounded up to powers of ``2^(1/16)`` (``grid.lattice_up``): cells and reaches a
little larger than needed are valid, and an MCMC chain's proposals, which move the
lengthscales by a few per cent, then mostly reuse them instead of paying the host work
(sorting, blocking) at every trigger pass. The terms, the prefix sums and the bound use the
exact ``sigma_x`` and ``sigma_t``; the result is still a function of the parameters alone.

So the omitted part of ``E_n`` is ``0 <= omega_n <= c (tail_n + ring_n + far_n)`` (times
``1 + 1e-8`` for rounding of the bound itself). The truncated rate ``lam~_n = lambda_n -
xi0 omega_n`` is never above the true one, and::

    |ell - ell~| <= sum_n log(1 + xi0 omega_n / max(lam~_n, 1e-40))         (the realised bound)

which :class:`~hawkes_cli.engine.base.Likelihood` computes for every evaluation (O(N)) and
reduces over ranks. ``tolerance`` is in nats (absolute). Before the first evaluation
:meth:`TruncatedBackend.calibrate` predicts ``kappa`` for this data and model from a probe of
one in 40 row blocks; while the likelihood adapts (fast start and warm-up), a realised
bound above the tolerance makes :meth:`TruncatedBackend.tighten` raise ``kappa`` and ``E`` is
recomputed (collectively); after warm-up the cut-off is fixed and such a bound is reported.
``kappa`` only grows, and it is part of a chain's checkpoint
(:meth:`~hawkes_cli.engine.base.Likelihood.truncation_state`). When the cut-offs exceed the
data (every ``kappa_l sigma_t`` >= time span and every level's cells >= the extent), the exact
kernel runs and the bound is 0 ("pair sum"): huge lengthscales cost no more than the exact
engine. The working-precision rounding (float32) is separate from this bound, as for the
exact engine.

The host side in numpy (grid index, row blocks, ``S_n``, balancing costs) is
:mod:`hawkes_cli.engine.grid`; this module uploads it, launches the kernels on the events of a
:class:`~hawkes_cli.engine.device.DeviceEvents` (shared with the exact backend it holds for B)
and assembles the bound.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kernels
from ..parallel import Comm, SerialComm
from ..vocab import DEFAULT_BACKGROUND, DEFAULT_TOLERANCE
from .base import LAMBDA_FLOOR, BoundedPairBackend
from .device import VEC, DeviceEvents
from .grid import (
    EXP_SPAN,
    EXPAND_MIN,
    LATTICE_STEPS,
    GridIndex,
    block_levels,
    build_index,
    grouping_level,
    initial_kappa,
    lattice_up,
    level_bands,
    level_kappas,
    level_presence,
    row_blocks,
    row_groups,
    source_levels,
    temporal_sums,
)
from .opencl import LOG2E, OpenCLBackend

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_TOLERANCE", "TruncatedBackend", "initial_kappa"]

_PAD = VEC  # vector width of the kernel; sorted source arrays are padded by this
_KAPPA_MAX = 740.0  # exp(-740) underflows: beyond this nothing more can be gained
_TIGHTEN_MARGIN = 0.25  # kappa added beyond the bound's exp(-kappa) prediction
_SAFETY = 1.0 + 1e-8  # rounding of the bound's own arithmetic (prefix sums, exp)
_INDEX_CACHE = 2
_BLOCK_WIDTH = 8.0  # longest time span of a row block, in units of sigma_t
_REACH = 1.5  # row blocks bound cells up to this many cut-off radii exactly, beyond by S_n
_CALIBRATION_TARGET = 0.5  # calibrate() aims at this fraction of the tolerance
_CALIBRATION_LADDER = np.array([-2.0, 0.0])  # probed cut-offs, up to the index's
_CALIBRATION_LEAD = 0.5  # the ladder's index is for the first guess plus this (rounded up)
_CALIBRATION_BLOCKS = 512  # at least this many row blocks in the probe (all if fewer)
_CALIBRATION_SHARE = 40  # and at least one block in this many
_CALIBRATION_STEP = 0.25  # a correction of the probe's kappa below this is not worth an index
_CALIBRATION_NEAR = 3.0  # |log(bound / target)| within which the correction goes half way
#: Rows of each self-check (:meth:`TruncatedBackend.self_check`): 64 x N pairs on the device.
SELF_CHECK_ROWS = 64
#: Working-precision rounding allowed between the truncated and the exact kernel, relative to
#: the exact row: both round every term (float32 ~6e-8 per term, rows accumulated in float64
#: every 512 terms; measured at most 1e-6 in float32 and 1e-13 in float64), so a hundred
#: times that is no false alarm, and a wrong kernel (a missing cell, wrong moments, garbage
#: lanes) is off by far more.
SELF_CHECK_ROUNDING = {"float32": 1e-4, "float64": 1e-9}
_SELF_CHECK_SEED = 0x5E1F  # the check's own stream: it never touches a chain's random numbers
_SELF_CHECK_KEYS = 8  # grid keys remembered as checked


@dataclass(frozen=True)
class _DeviceBlocks:
    """Row blocks on the device: ``rows`` (count x 16 int32, :func:`~hawkes_cli.engine.grid.
    row_blocks`) and ``near`` (count uint64, the levels within reach of each block,
    :func:`~hawkes_cli.engine.grid.block_levels`)."""

    rows: Any
    near: Any
    count: int


def _solve_rows(parts: list, slope: float, target: float, kappa0: float) -> float:
    """The ``kappa`` where ``sum scale * sum_n log1p(r_n exp(-slope (kappa - kappa0)))`` over
    the ranks' ``parts`` (``(scale, r)`` per rank, from :meth:`TruncatedBackend._probe` at
    ``kappa0``) falls to ``target``, by bisection in [1, 740]. Per row, unlike a log-linear
    fit of the sum: where bounds are far above one per row (``log1p`` of a huge ratio falls
    by only ``slope`` per unit of kappa) this still lands near the answer."""

    def bound(kappa: float) -> float:
        f = math.exp(-slope * (kappa - kappa0)) if slope * (kappa - kappa0) < 700 else 0.0
        return sum(sc * float(np.sum(np.log1p(r * f))) for sc, r in parts)

    lo, hi = 1.0, _KAPPA_MAX
    if bound(lo) <= target:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if bound(mid) <= target else (mid, hi)
    return hi


def _solve_ladder(ladder: np.ndarray, bounds: np.ndarray, target: float) -> float:
    """Smallest ``kappa`` where the log-linear interpolation of ``bounds`` (probed at the
    increasing ``ladder``) reaches ``target``; extrapolated with the end slopes (at least 1 per
    unit of kappa, the ``exp(-kappa)`` rule) beyond the ladder."""
    logb = np.log(np.maximum(bounds, 1e-300))
    goal = math.log(target)
    if logb[0] <= goal:  # already met at the bottom: extrapolate down (no lower than 1)
        slope = max((logb[0] - logb[1]) / (ladder[1] - ladder[0]), 1.0)
        return float(max(ladder[0] - (goal - logb[0]) / slope, 1.0))
    for i in range(1, ladder.size):
        if logb[i] <= goal:
            frac = (logb[i - 1] - goal) / max(logb[i - 1] - logb[i], 1e-300)
            return float(ladder[i - 1] + frac * (ladder[i] - ladder[i - 1]))
    slope = max((logb[-2] - logb[-1]) / (ladder[-1] - ladder[-2]), 1.0)
    return float(min(ladder[-1] + (logb[-1] - goal) / slope, _KAPPA_MAX))


class TruncatedBackend(BoundedPairBackend):
    """Pair sums B (exact, per distinct time) and E (truncated, error-bounded) on OpenCL.

    Built on the same :class:`~hawkes_cli.engine.device.DeviceEvents` as the exact backend it
    holds (:attr:`exact`, which computes B, and E when the cut-offs exceed the data).

    Parameters
    ----------
    events, model, area, rows, work_group, background
        As for :class:`~hawkes_cli.engine.opencl.OpenCLBackend`.
    tolerance
        Bound on ``|ell - ell~|`` in nats enforced by the likelihood (> 0).
    kappa
        Cut-off exponent to use as it is; default: calibrated before the first evaluation
        (:meth:`calibrate`, starting from :func:`~hawkes_cli.engine.grid.initial_kappa`).

    Attributes
    ----------
    path : str
        Which computation the last trigger pass took, e.g. ``"background: lattice (1095 days
        for 200000 events); trigger: truncation (kappa 15.8)"``.
    kappa : float
        The current cut-off exponent (dimensionless; only grows, see :meth:`tighten`).
    """

    def __init__(
        self,
        events: DeviceEvents,
        *,
        model: int,
        area: float,
        rows: tuple[int, int] | None = None,
        work_group: int | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        kappa: float | None = None,
        background: str = DEFAULT_BACKGROUND,
    ) -> None:
        import pyopencl as cl

        if not (math.isfinite(tolerance) and tolerance > 0):
            raise ValueError(f"tolerance must be finite and > 0, got {tolerance!r}")
        self.exact = OpenCLBackend(
            events, model=model, area=area, rows=rows, work_group=work_group, background=background
        )
        self.events = events
        self._cl = cl
        self.model = model
        self.precision = events.precision
        self.tolerance = float(tolerance)
        # calibrate() replaces this first guess at the first evaluation unless a kappa is given
        self.calibrated = kappa is not None
        self.row_start, self.row_stop = self.exact.row_start, self.exact.row_stop
        prog = events.program(truncated=True)
        self._k_prefix = cl.Kernel(prog, "cell_prefix")
        self._k_prefix16 = cl.Kernel(prog, "cell_prefix16")
        self._k_moments = cl.Kernel(prog, "cell_moments")
        # row blocks; model 2's kernel weighs and scales each term by its density
        self._k_blocks = cl.Kernel(prog, "truncated_blocks" if model == 1 else "truncated_blocks2")
        self._block_cache: OrderedDict[tuple, tuple[object, int]] = OrderedDict()

        t = events.time
        self._t = t
        n = events.n
        self.n = n
        self._w = np.ones(n) if model == 1 else events.density
        self._lo = events.times.lo
        self._span = float(t[-1] - t[0]) if n else 0.0
        # levels: fixed by the densities (model 2), independent of sigma_x and kappa
        self._level, self._r_unit = source_levels(events.density if model == 2 else None, n)
        self.nlevels = int(self._level.max()) + 1 if n else 1
        if self.nlevels > 40:
            raise ValueError("densities span more than 2^80; model 2 needs D_max / D_min < 2^80")
        self._floor, self._ceil = level_bands(
            events.density if model == 2 else None, self._level, self.nlevels
        )
        if kappa is None:
            kappa = initial_kappa(self.tolerance, n, float(self._ceil.max()))
        self.kappa = float(kappa)

        events.keep_float64_copies()
        self._reset_locations()
        nrows = self.row_stop - self.row_start
        self._e_host = np.empty(nrows)
        self._tail_host = np.empty(nrows)
        self._ring_host = np.empty(nrows)
        self._buf_e = events.output(self._e_host.nbytes)
        self._buf_tail = events.output(self._tail_host.nbytes)
        self._buf_ring = events.output(self._ring_host.nbytes)
        self._s_cache: OrderedDict[tuple[float, float, float], np.ndarray] = OrderedDict()
        self.trigger_path = "none yet"
        self._checked: OrderedDict[tuple, None] = OrderedDict()
        self.self_checks = 0
        self.check_failure: str | None = None

    # ------------------------------------------------------------------ bounded interface
    @property
    def level_kappa(self) -> np.ndarray:
        """Cut-off exponent of each grid level at the current ``kappa``, shape (levels,)
        (:func:`~hawkes_cli.engine.grid.level_kappas`; model 1: ``[kappa]``)."""
        return level_kappas(self.kappa, self._ceil)

    def cutoff_state(self) -> dict[str, float]:
        """The cut-off to checkpoint: ``{"kappa": float}``."""
        return {"kappa": float(self.kappa)}

    def restore_cutoff(self, state: Mapping[str, Any]) -> None:
        """Continue at the cut-off of :meth:`cutoff_state` (no calibration any more)."""
        self.kappa = float(state["kappa"])
        self.calibrated = True

    # ------------------------------------------------------------------ setup
    @property
    def queue(self) -> Any:
        """The command queue every pass enqueues on."""
        return self.events.queue

    @property
    def kernel_fingerprint(self) -> str:
        """SHA-256 of every kernel source and build option compiled (both programs)."""
        return self.events.kernel_fingerprint

    @property
    def path(self) -> str:
        """Which computation each part took (for ``hawkes-run loglik``)."""
        return f"background: {self.exact.background_path}; trigger: {self.trigger_path}"

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Replace all N locations; spatial indices and row blocks are rebuilt on the next
        pass."""
        self.events.set_locations(x, y)
        self._reset_locations()

    def _reset_locations(self) -> None:
        self._x, self._y = self.events.x, self.events.y
        self._x0, self._y0 = float(self._x.min()), float(self._y.min())
        self._presence = level_presence(self._x, self._y, self._level, self.nlevels)
        self._index_cache: OrderedDict[tuple[float, float], tuple[GridIndex, dict]] = OrderedDict()
        self._block_cache.clear()

    def _build_index(self, sigma_x: float, kappa: float | None = None) -> tuple[GridIndex, dict]:
        """The grid index for ``sigma_x`` and the cut-off ``kappa`` (default: the current one)
        and its device buffers, built for both rounded up to the lattice
        (:func:`~hawkes_cli.engine.grid.lattice_up`; cells at least the cut-off radius) and
        cached: every ``sigma_x`` and ``kappa`` of one lattice step share it, so a chain's
        proposals and :meth:`calibrate`'s ladder reuse it."""
        key = (lattice_up(sigma_x), lattice_up(self.kappa if kappa is None else kappa))
        hit = self._index_cache.get(key)
        if hit is not None:
            self._index_cache.move_to_end(key)
            return hit
        index = build_index(
            self._x,
            self._y,
            self._level,
            self.nlevels,
            self._r_unit,
            key[0],
            level_kappas(key[1], self._ceil),
            weight=self._w,
            ceil=self._ceil,
            expand_min=EXPAND_MIN,
        )
        hit = (index, self._upload_index(index))
        self._index_cache[key] = hit
        while len(self._index_cache) > _INDEX_CACHE:
            self._index_cache.popitem(last=False)
        return hit

    def _level_kappas(self, index: GridIndex, b: dict, kappa: float) -> Any:
        """Device buffer of the cut-off exponent of each of ``index``'s grid levels at
        ``kappa`` (kept in ``b``, the index's buffers, for the last ``kappa``)."""
        if b["kl"] is None or b["kl"][0] != kappa:
            b["kl"] = (kappa, self.events.upload(level_kappas(kappa, self._ceil)[index.band]))
        return b["kl"][1]

    def _upload_index(self, index: GridIndex) -> dict:
        real = self.events.real
        o = index.order

        def padded(values: np.ndarray, dtype) -> np.ndarray:
            out = np.zeros(values.size + _PAD, dtype=dtype)
            out[: values.size] = values
            return out

        def per_cell(ufunc) -> np.ndarray:
            if not index.cell_key.size:
                return np.ones(1)
            return ufunc.reduceat(self._w[o], index.cell_begin[:-1])

        # coordinates relative to the corner of the source's cell (in its level's grid), and
        # its 4 x 4 sub-cell
        lev = index.level[o]
        h, ih = index.h[lev], index.inv_h[lev]
        x, y = self._x[o], self._y[o]
        cx = np.floor((x - self._x0) * ih)
        cy = np.floor((y - self._y0) * ih)
        rx, ry = x - (self._x0 + cx * h), y - (self._y0 + cy * h)
        qx = np.clip(np.floor(rx * (4.0 / h)), 0, 3)
        qy = np.clip(np.floor(ry * (4.0 / h)), 0, 3)
        # expansion sources (sorted last): offsets from their box's centre over half the box
        mc0, mk0 = index.expanded
        half = 0.5 * h[mk0:]
        slots = np.diff(index.cell_begin[mc0:]) // kernels.HERMITE_STRIDE + 1
        moff = np.concatenate([[0], np.cumsum(slots)]).astype(np.int32)
        return {
            "st": self.events.upload(padded(self._t[o], real)),
            "sxr": self.events.upload(padded(rx, real)),
            "syr": self.events.upload(padded(ry, real)),
            "sw": self.events.upload(padded(self._w[o], real)),
            "std": self.events.upload(self._t[o]),
            "swd": self.events.upload(self._w[o]),
            "sq": self.events.upload((4 * qx + qy).astype(np.uint8)),
            "ckey": self.events.upload(index.cell_key.astype(np.int64)),
            "cbeg": self.events.upload(index.cell_begin),
            # the smallest and largest density (model 1: weight 1) of each cell's sources;
            # equal when the cell holds one density
            "cdlo": self.events.upload(per_cell(np.minimum)),
            "cdhi": self.events.upload(per_cell(np.maximum)),
            "loff": self.events.upload(index.level_offset),
            "hs": self.events.upload(index.h),
            "dlo": self.events.upload(self._floor[index.band]),
            "kl": None,  # (kappa, buffer): _level_kappas
            "rows": {},  # row blocks on the host by time width: _row_blocks
            "group": {},  # their grouping level by time width: _row_blocks
            "enx": self.events.upload(
                padded(np.clip(rx[mk0:] / half - 1.0, -1.0, 1.0), np.float64)
            ),
            "eny": self.events.upload(
                padded(np.clip(ry[mk0:] / half - 1.0, -1.0, 1.0), np.float64)
            ),
            "mc0": mc0,
            "mk0": mk0,
            "moff": self.events.upload(moff),
            "mom": self.events.output(8 * kernels.HERMITE_ORDER**2 * int(moff[-1]), read=True),
            "pre": self.events.output(8 * (self.n + index.cell_key.size + 1), read=True),
            "pre16": self.events.output(16 * 8 * (self.n + index.cell_key.size + 1), read=True),
            "pre_sigma_t": None,
        }

    def _far(self, sigma_t: float, factor: float, kappa: float) -> np.ndarray:
        """``sum_{m < lo_n} exp(-factor kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)`` for this
        backend's rows at the cut-off ``kappa``, shape (rows,), float64
        (:func:`~hawkes_cli.engine.grid.temporal_sums` with per-source weights; cached by
        ``(sigma_t, kappa, factor)``)."""
        key = (sigma_t, kappa, factor)
        hit = self._s_cache.get(key)
        if hit is None:
            w = self._w * np.exp(-factor * level_kappas(kappa, self._ceil))[self._level]
            s = temporal_sums(self._t, w, self._lo, sigma_t)
            hit = s[self.row_start : self.row_stop]
            self._s_cache[key] = hit
            while len(self._s_cache) > _INDEX_CACHE:
                self._s_cache.popitem(last=False)
        return hit

    # ------------------------------------------------------------------ passes
    def background(self, tau_t: float) -> np.ndarray:
        """B for this backend's rows, float64, shape (rows,) (exact, per distinct time)."""
        return self.exact.background(tau_t)

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """Truncated E for this backend's rows, float64, shape (rows,)."""
        return self.trigger_bounded(sigma_x, sigma_t)[0]

    def exact_cutoffs(self, sigma_x: float, sigma_t: float) -> bool:
        """Whether the cut-offs at the current ``kappa`` omit nothing (the exact kernel runs)."""
        if float(self.level_kappa.min()) * sigma_t < self._span:
            return False
        return self._build_index(sigma_x)[0].covers_all

    def trigger_bounded(self, sigma_x: float, sigma_t: float) -> tuple[np.ndarray, np.ndarray]:
        """Truncated trigger and a rigorous bound on what it omits, for this backend's rows.

        Returns
        -------
        E : (rows,) float64
            ``E~_n`` (<= the exact ``E_n`` up to working-precision rounding).
        omega : (rows,) float64
            ``omega_n >= E_n - E~_n`` (module docstring), 0 on the exact path.
        """
        nrows = self.row_stop - self.row_start
        kappa = self.kappa
        if self.exact_cutoffs(sigma_x, sigma_t):
            self.trigger_path = f"pair sum (cut-offs beyond the data at kappa {kappa:.3g})"
            return self.exact.trigger(sigma_x, sigma_t), np.zeros(nrows)
        self.trigger_path = f"truncation (kappa {kappa:.3g})"
        if nrows == 0:
            return np.empty(0), np.empty(0)
        index, b = self._build_index(sigma_x)
        blocks = self._blocks(index, b, sigma_x, sigma_t)
        kl = self._level_kappas(index, b, kappa)
        e, omega = self._bounded_pass(index, b, blocks, kl, kappa, sigma_x, sigma_t)
        # a new cut-off, grid index or set of row blocks: check it on this device
        key = (lattice_up(sigma_x), lattice_up(kappa), lattice_up(sigma_t), kappa)
        if key in self._checked:
            self._checked.move_to_end(key)
        else:
            self.self_check(e, omega, sigma_x, sigma_t)
            self._checked[key] = None
            while len(self._checked) > _SELF_CHECK_KEYS:
                self._checked.popitem(last=False)
        return e, omega

    def self_check(
        self, e: np.ndarray, omega: np.ndarray, sigma_x: float, sigma_t: float
    ) -> str | None:
        """Compare a random sample of this backend's rows of a truncated pass with the exact
        pair sum on the same device.

        :data:`SELF_CHECK_ROWS` rows (64 x N pairs, on the exact kernel): each must satisfy
        ``E - omega - r E <= E~ <= E (1 + r)`` with ``r`` the working precision's
        :data:`SELF_CHECK_ROUNDING`, and be finite. A device that breaks this computes the
        truncated kernels wrongly (the bound cannot notice: the same code computes it).

        Parameters
        ----------
        e, omega : (rows,) float64
            ``E~`` and its bound from :meth:`trigger_bounded` at these lengthscales.
        sigma_x, sigma_t
            The lengthscales of that pass.

        Returns
        -------
        str or None
            What failed (also kept in :attr:`check_failure`, which
            :class:`~hawkes_cli.engine.base.Likelihood` turns into a
            :class:`~hawkes_cli.errors.DeviceError` on every rank), or None.
        """
        nrows = self.row_stop - self.row_start
        rng = np.random.default_rng([_SELF_CHECK_SEED, self.self_checks])
        self.self_checks += 1
        pick = np.sort(rng.choice(nrows, size=min(SELF_CHECK_ROWS, nrows), replace=False))
        exact = self.exact.trigger_at(pick + self.row_start, sigma_x, sigma_t)
        got, bound = e[pick], omega[pick]
        r = SELF_CHECK_ROUNDING[self.precision]
        below = exact - bound - r * exact - got  # > 0: more omitted than the bound allows
        above = got - exact * (1.0 + r)  # > 0: more than the whole sum
        finite = np.isfinite(got) & np.isfinite(bound) & np.isfinite(exact)
        bad = ~finite | (below > LAMBDA_FLOOR) | (above > LAMBDA_FLOOR)
        if not bad.any():
            log.debug("self-check: %d rows within their bounds", pick.size)
            return None
        k = int(np.argmax(bad))
        row = int(pick[k]) + self.row_start
        info = self.events.device.info
        self.check_failure = (
            f"OpenCL device {info.ident} {info.name!r} ({info.platform}) computes the truncated "
            f"trigger wrongly: {int(bad.sum())} of {pick.size} sampled rows disagree with the "
            f"exact pair sum on the same device beyond their bound (row {row}: "
            f"truncated {got[k]:.6g}, exact {exact[k]:.6g}, bound {bound[k]:.3g}; "
            f"{self.precision}, model {self.model}). Its numbers cannot be trusted: set "
            "engine.tolerance: 0 (the exact kernels) or choose another device (engine.device; "
            "`hawkes-run devices --check` tests each device)"
        )
        log.error("%s", self.check_failure)
        return self.check_failure

    def _bounded_pass(
        self,
        index: GridIndex,
        b: dict,
        blocks: _DeviceBlocks,
        kl: Any,
        kappa: float,
        sigma_x: float,
        sigma_t: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run the row-block kernel on ``blocks`` of ``index`` at the cut-off ``kappa``
        (per-level exponents in the device buffer ``kl``; ``blocks`` made for an index of at
        least this cut-off).

        Returns (E~, omega) for this backend's rows, each shape (rows,), float64; rows in no
        block hold stale values.
        """
        cl = self._cl
        ncells = index.cell_key.size
        exp_mode = self._span / sigma_t <= EXP_SPAN
        t0 = float(self._t[0])
        if b["pre_sigma_t"] != sigma_t:
            for k, extra, out in (
                (self._k_prefix, (), b["pre"]),
                (self._k_prefix16, (b["sq"],), b["pre16"]),
            ):
                k(
                    self.queue,
                    *self._launch(ncells),
                    b["std"],
                    b["swd"],
                    *extra,
                    b["cbeg"],
                    np.int32(ncells),
                    np.float64(t0),
                    np.float64(1.0 / sigma_t),
                    np.int32(exp_mode),
                    out,
                )
            nexp = ncells - b["mc0"]
            if exp_mode and nexp:
                self._k_moments(
                    self.queue,
                    *self._launch(nexp),
                    b["std"],
                    b["swd"],
                    b["enx"],
                    b["eny"],
                    b["cbeg"],
                    b["moff"],
                    np.int32(b["mc0"]),
                    np.int32(nexp),
                    np.int32(b["mk0"]),
                    np.float64(t0),
                    np.float64(1.0 / sigma_t),
                    b["mom"],
                )
            b["pre_sigma_t"] = sigma_t
        ev = self.events
        real = ev.real
        # one block per work-group on CPUs (PoCL schedules work-groups dynamically over the
        # cores, and blocks differ a lot in work); the configured size elsewhere
        wg = self.exact.work_group or (1 if ev.device.info.kind == "cpu" else 64)
        kt, ktl = ev.coefficient(LOG2E / sigma_t)
        kx, kxr = ev.coefficient(LOG2E / (2.0 * sigma_x * sigma_x), relative=True)
        self._k_blocks(
            self.queue,
            (-(-max(blocks.count, 1) // wg) * wg,),
            (wg,),
            ev.buf_td,
            ev.buf_xd,
            ev.buf_yd,
            b["st"],
            b["sxr"],
            b["syr"],
            b["sw"],
            b["std"],
            b["pre"],
            b["pre16"],
            b["mom"],
            b["moff"],
            np.int32(b["mc0"]),
            b["ckey"],
            b["cbeg"],
            b["cdlo"],
            b["cdhi"],
            b["loff"],
            b["hs"],
            b["dlo"],
            np.int32(index.h.size),
            np.int32(self.nlevels),
            np.float64(self._x0),
            np.float64(self._y0),
            blocks.rows,
            np.int32(blocks.count),
            np.int32(self.row_start),
            blocks.near,
            kt,
            kx,
            ktl,
            kxr,
            real(ev.shift),
            kl,
            np.float64(sigma_t),
            np.float64(1.0 / (2.0 * sigma_x * sigma_x)),
            np.float64(t0),
            np.float64(1.0 / sigma_t),
            np.int32(exp_mode),
            self._buf_e,
            self._buf_tail,
            self._buf_ring,
        )
        cl.enqueue_copy(self.queue, self._e_host, self._buf_e)
        cl.enqueue_copy(self.queue, self._tail_host, self._buf_tail)
        cl.enqueue_copy(self.queue, self._ring_host, self._buf_ring)
        norm = 1.0 / (2.0 * math.pi * sigma_x * sigma_x * sigma_t)
        e = self._e_host * (2.0**-ev.shift * norm)
        if exp_mode:  # tail + ring + beyond the reach
            rest = self._ring_host + self._far(sigma_t, _REACH**2, kappa)
        else:  # tail; ring and beyond together
            rest = self._far(sigma_t, 1.0, kappa)
        omega = norm * (self._tail_host + rest) * _SAFETY
        return e, omega

    def _launch(self, items: int) -> tuple[tuple[int], tuple[int] | None]:
        """(global, local) sizes of a one-work-item-per-item launch at the backend's
        work-group size (the implementation's choice when none is set)."""
        g, local = self.exact.launch_size(items)
        return (g,), local

    def _blocks(self, index: GridIndex, b: dict, sigma_x: float, sigma_t: float) -> _DeviceBlocks:
        """Row blocks of this backend's rows for the current index (buffers ``b``) and
        ``sigma_t`` (cached; the same for every ``sigma_x``, ``kappa`` and ``sigma_t`` of one
        lattice step)."""
        kappa = lattice_up(self.kappa)
        key = (lattice_up(sigma_x), kappa, lattice_up(sigma_t))
        hit = self._block_cache.get(key)
        if hit is not None:
            self._block_cache.move_to_end(key)
            return hit
        hit = self._upload_blocks(self._row_blocks(index, b, sigma_t), sigma_x, kappa)
        self._block_cache[key] = hit
        while len(self._block_cache) > _INDEX_CACHE:
            self._block_cache.popitem(last=False)
        return hit

    def _row_blocks(self, index: GridIndex, b: dict, sigma_t: float) -> np.ndarray:
        """This backend's rows in blocks (:func:`~hawkes_cli.engine.grid.row_blocks`; kept
        in ``b``, the index's buffers, so :meth:`calibrate`'s probe and the first evaluation
        share them); rows of dense levels are grouped by the cells of a coarser level
        (:func:`~hawkes_cli.engine.grid.grouping_level`). The blocks span up to 8 ``sigma_t``
        rounded up to the lengthscale lattice (the width only decides which rows share one)."""
        width = _BLOCK_WIDTH * lattice_up(sigma_t)
        rows = b["rows"].get(width)
        if rows is not None:
            return rows
        g = b["group"].get(width)  # kept per width: cheap, and the rows are not
        if g is None:
            g = grouping_level(index, self._x, self._y, self._level, self._span, width)
            b["group"][width] = g
        group = row_groups(index, self._x, self._y, self._level, g) if g > 0 else None
        rows = row_blocks(index, self._t, self.row_start, self.row_stop, width, group)
        b["rows"][width] = rows
        while len(b["rows"]) > _INDEX_CACHE:
            b["rows"].pop(next(iter(b["rows"])))
        return rows

    def _upload_blocks(self, blocks: np.ndarray, sigma_x: float, kappa: float) -> _DeviceBlocks:
        """Upload row blocks with the levels within reach of each, for cut-offs up to
        ``kappa`` and lengthscales up to ``sigma_x`` rounded up to the lattice (the kernel's
        reach per level is ``1.5 R_l``, see the module docstring)."""
        reach = _REACH * np.sqrt(2.0 * level_kappas(kappa, self._ceil) / self._floor)
        reach = reach * lattice_up(sigma_x)
        near = block_levels(self._presence, self._x, self._y, blocks, reach)
        return _DeviceBlocks(self.events.upload(blocks), self.events.upload(near), blocks.shape[0])

    def calibrate(
        self,
        sigma_x: float,
        sigma_t: float,
        base: np.ndarray,
        xi0: float,
        comm: Comm | None = None,
    ) -> float:
        """Choose the starting ``kappa`` for this data and model from a probe (collective).

        The grid index is built for the lattice point above the first guess
        (:func:`~hawkes_cli.engine.grid.initial_kappa` plus 0.5, rounded up by
        :func:`~hawkes_cli.engine.grid.lattice_up`): cells are built for ``kappa`` rounded up
        to that lattice, so every cut-off of one step shares them. A sample of the row blocks
        (one in 40, at least 512 blocks) is evaluated on it at that lattice point and 2 below,
        the realised bound ``sum_n log1p(xi0 omega_n / lambda~_n)`` of the sample is scaled to
        all rows and summed over ranks, and ``kappa`` is set where the log-linear interpolation
        of that curve reaches half the tolerance (per row beyond the top). When that lands in
        the index's step (or within 0.25 below it, where it is raised to the step), the first
        evaluation reuses the index, its row blocks and moments, so it costs little more than a
        steady one. Otherwise one more probe on the index of the chosen cut-off (whose cells bound
        differently) corrects it half way along the curve's local slope. The first full
        evaluation then usually meets the tolerance without tightening.

        Parameters
        ----------
        sigma_x, sigma_t
            Lengthscales of the first evaluation.
        base : (rows,) float64
            ``mu0 * B_n`` of this backend's rows at the first evaluation.
        xi0
            Trigger weight of the first evaluation.
        comm
            The chain's communicator (every rank calls this with its own rows).

        Returns
        -------
        float
            The new ``kappa``.
        """
        comm = comm or SerialComm()
        target = _CALIBRATION_TARGET * self.tolerance
        k0 = initial_kappa(self.tolerance, self.n, float(self._ceil.max()))
        # the ladder's index: cells for the lattice point above the guess (plus a lead), so
        # that the chosen cut-off usually shares it and the first evaluation reuses it; rungs
        # within [1, 740] and distinct (the interpolation divides by their spacing)
        top = lattice_up(min(max(k0 + _CALIBRATION_LEAD, 1.0 - _CALIBRATION_LADDER[0]), 700.0))
        ladder = top + _CALIBRATION_LADDER
        index, b = self._build_index(sigma_x, top)
        probed, ratios = self._probe(index, b, ladder, sigma_x, sigma_t, base, xi0, comm, target)
        bounds = np.array(probed)
        ladder = ladder[: bounds.size]
        logb = np.log(np.maximum(bounds, 1e-300))
        slopes = np.maximum(-np.diff(logb) / np.diff(ladder), 1.0)
        if bounds[-1] > target:  # beyond the ladder: from the top rung's rows
            kappa = _solve_rows(comm.allgather(ratios), float(slopes[-1]), target, top)
        else:
            kappa = _solve_ladder(ladder, bounds, target)
        local = math.nan
        if lattice_up(kappa) < top and lattice_up(kappa + _CALIBRATION_STEP) == top:
            # just below the ladder's cells: a little more kappa is cheaper than another index
            kappa = top * 2.0 ** (-1.0 / LATTICE_STEPS) * (1.0 + 1e-9)
        self.kappa = kappa
        if lattice_up(kappa) != top:
            # another index, whose cells bound differently from the ladder's: probe once more
            # on it (kept for the first evaluation) and correct
            index, b = self._build_index(sigma_x)
            (local,), ratios = self._probe(
                index, b, np.array([kappa]), sigma_x, sigma_t, base, xi0, comm
            )
            i = int(np.clip(np.searchsorted(ladder, kappa), 1, ladder.size - 1))
            fixed = _solve_rows(comm.allgather(ratios), float(slopes[i - 1]), target, kappa)
            if abs(math.log(max(local, 1e-300) / target)) <= _CALIBRATION_NEAR:
                # near: the two probes sample different blocks and per-row bounds are
                # heavy-tailed, so go half way
                fixed = 0.5 * (kappa + fixed)
            if abs(fixed - kappa) > _CALIBRATION_STEP:
                kappa = float(np.clip(fixed, 1.0, _KAPPA_MAX))
        log.info(
            "truncation: probe bounds %s nats at kappa %s%s; kappa -> %.4g",
            np.array2string(bounds, precision=2),
            np.array2string(ladder, precision=3),
            ""
            if math.isnan(local)
            else f", {local:.3g} at kappa {self.kappa:.4g} (cells of {lattice_up(self.kappa):.4g})",
            kappa,
        )
        self.kappa = kappa
        self.calibrated = True
        return kappa

    def _probe(
        self,
        index: GridIndex,
        b: dict,
        ladder: np.ndarray,
        sigma_x: float,
        sigma_t: float,
        base: np.ndarray,
        xi0: float,
        comm: Comm,
        stop_below: float = -math.inf,
    ) -> tuple[list[float], tuple[float, np.ndarray]]:
        """The realised bound (nats, summed over ranks; collective) at the cut-offs of
        ``ladder`` in turn, from the second one on stopping after the first at or below
        ``stop_below``. Each rank estimates its share from every stride-th row block of
        ``index`` (at least :data:`_CALIBRATION_BLOCKS` blocks, at least one in
        :data:`_CALIBRATION_SHARE`) scaled by the stride to all of its rows. Also returns
        this rank's ``(stride, xi0 omega_n / lambda~_n of the sampled rows)`` at the last
        cut-off evaluated.
        """
        rows = self._row_blocks(index, b, sigma_t)
        share = rows.shape[0] // _CALIBRATION_SHARE
        stride = max(1, rows.shape[0] // max(_CALIBRATION_BLOCKS, share))
        sample = np.ascontiguousarray(rows[::stride])
        mine = sample[sample >= 0] - self.row_start
        scale = rows.shape[0] / sample.shape[0] if mine.size else 0.0
        if mine.size:
            blocks = self._upload_blocks(sample, sigma_x, float(ladder.max()))
        out, ratio = [], np.empty(0)
        for kappa in ladder.tolist():
            local = 0.0
            if mine.size:
                kl = self.events.upload(level_kappas(kappa, self._ceil)[index.band])
                e, omega = self._bounded_pass(index, b, blocks, kl, kappa, sigma_x, sigma_t)
                lam = np.maximum(base[mine] + xi0 * e[mine], LAMBDA_FLOOR)
                ratio = xi0 * omega[mine] / lam
                local = scale * float(np.sum(np.log1p(ratio)))
            out.append(comm.allreduce_sum(local))
            if len(out) >= 2 and out[-1] <= stop_below:
                break
        return out, (scale, ratio)

    def tighten(self, excess: float) -> bool:
        """Raise ``kappa`` after a realised bound ``excess`` times over the tolerance (> 1).

        Returns False when ``kappa`` cannot usefully grow any more.
        """
        if self.kappa >= _KAPPA_MAX:
            return False
        # half the exp(-kappa) prediction: the bound often falls faster than exp(-kappa) (the
        # cells grow with kappa), and kappa never comes down again
        step = 0.5 * math.log(max(excess, 1.0)) + _TIGHTEN_MARGIN
        self.kappa = min(self.kappa + step, _KAPPA_MAX)
        log.info("truncation: realised bound %.3g x tolerance; kappa -> %.4g", excess, self.kappa)
        return True
