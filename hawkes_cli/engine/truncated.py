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

Two cut-offs: a time window ``Tc = kappa * sigma_t`` and a radius ``R_m = sqrt(2 kappa) s_m``.
Sources are sorted into a uniform grid per *level* (model 2: level ``l_m = ceil(log2(
sqrt(D_max / D_m)))``, so ``R_m <= h_l`` for the level's cell size ``h_l``; model 1: one level).

Model 2 (per-row kernel): row n sums exactly every source of the 3 x 3 cells around it (in
every level) with ``t_m >= t_n - Tc``. Every other source is either

(a) in a visited cell but older than ``t_n - Tc``: ``a_nm <= w_m exp(-(t_n - t_m)/sigma_t)``
    (the spatial factor is <= 1); the kernel adds these bounds *exactly* from per-cell prefix
    sums (``tail_n``; when the time span exceeds 600 ``sigma_t`` it uses the cruder
    ``w_m exp(-kappa)``), or
(b) in an unvisited cell, hence at distance ``> h_l >= R_m``: ``a_nm < exp(-kappa) w_m
    exp(-(t_n - t_m)/sigma_t)``, and the sum over all such m is below ``exp(-kappa) S_n`` with
    ``S_n = sum_{m < lo_n} w_m exp(-(t_n - t_m)/sigma_t)`` (O(N), computed on the host).

Model 1 (row-block kernel, ``truncated_blocks`` in ``kernels/truncated.cl``): up to 16 rows of
one cell within 8 ``sigma_t`` share the enumeration of cells and their searches. The same
inequality is used with the distance ``d`` from the row to a cell's (or sub-cell's) rectangle:
every source there has ``a_nm <= exp(-(t_n - t_m)/sigma_t) exp(-d^2 / (2 sigma_x^2))``. A row
sums exactly the sources of cells nearer than ``R`` that are newer than the block's
``min_j (t_j - sigma_t (kappa - d_j^2 / (2 sigma_x^2)))`` (the paraboloid ``u + v <= kappa``
of the ideal cut-off, widened to the block); the older ones of those cells are bounded by
sub-cell (4 x 4 sub-cells in the rows' own cell, 4 strips in the others), cells between ``R``
and ``1.5 R`` by their own distance, and everything farther by ``exp(-2.25 kappa) S_n``.

So the omitted part of ``E_n`` is ``0 <= omega_n <= c (tail_n + ring_n + far_n)`` (times
``1 + 1e-8`` for rounding of the bound itself). The truncated rate ``lam~_n = lambda_n -
xi0 omega_n`` is never above the true one, and::

    |ell - ell~| <= sum_n log(1 + xi0 omega_n / max(lam~_n, 1e-40))         (the realised bound)

which :class:`~hawkes_cli.engine.base.Likelihood` computes for every evaluation (O(N)) and
reduces over ranks. ``tolerance`` is relative: when the realised bound exceeds
``tolerance * |ell~|``, the likelihood asks :meth:`TruncatedBackend.tighten` for a larger
``kappa`` and recomputes ``E`` (collectively), until it holds or nothing is omitted any more.
``kappa`` only grows, so an MCMC run settles after its first evaluations, and it is part of a
chain's checkpoint (:meth:`~hawkes_cli.engine.base.Likelihood.truncation_state`). When the cut-offs
exceed the data (``Tc`` >= time span and every level's cells >= the extent), the exact kernel
runs and the bound is 0 ("pair sum"): huge lengthscales cost no more than the exact engine.
The working-precision rounding (float32) is separate from this bound, as for the exact engine.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .. import kernels
from .opencl import LOG2E, OpenCLBackend

log = logging.getLogger(__name__)

#: Recommended ``engine.tolerance`` when truncation is wanted: relative log-likelihood error.
DEFAULT_TOLERANCE = 1e-6

_PAD = 8  # vector width of the kernel; sorted source arrays are padded by this
_EXP_SPAN = 600.0  # time span / sigma_t up to which exact exponential prefixes are used
_CELLS_PER_DIM = 2**20  # cap of the grid resolution (keys fit KEY_STRIDE in truncated.cl)
_KEY_STRIDE = 4194304
_KAPPA_MAX = 740.0  # exp(-740) underflows: beyond this nothing more can be gained
_TIGHTEN_MARGIN = 0.25  # kappa added beyond the bound's exp(-kappa) prediction
_SAFETY = 1.0 + 1e-8  # rounding of the bound's own arithmetic (prefix sums, exp)
_INDEX_CACHE = 2
_BLOCK_ROWS = 16  # rows per block of the row-block kernel (LANES in truncated.cl)
_BLOCK_WIDTH = 8.0  # longest time span of a row block, in units of sigma_t
_REACH = 1.5  # row blocks bound cells up to this many cut-off radii exactly, beyond by S_n


def initial_kappa(tolerance: float) -> float:
    """Starting cut-off exponent for a relative ``tolerance`` (> 0), dimensionless.

    Each row's bound is about ``exp(-kappa)`` times a local temporal sum, so the realised
    relative bound is about ``C exp(-kappa)``; this start assumes ``C`` near ``e^1.5`` (city-like
    data at the paper's lengthscales) and the likelihood tightens it where ``C`` is larger.
    """
    return math.log(1.0 / tolerance) + 1.5


def temporal_sums(time: np.ndarray, weight: np.ndarray, lo: np.ndarray, sigma_t: float):
    """``S_n = sum_{m < lo_n} w_m exp(-(t_n - t_m) / sigma_t)`` for all events, an upper bound.

    Parameters
    ----------
    time : (N,) float64
        Sorted times (time units).
    weight : (N,) float64
        ``w_m`` (density for model 2, ones for model 1), > 0.
    lo : (N,) int
        First index of each event's tie group.
    sigma_t
        Trigger temporal lengthscale (time units).

    Returns
    -------
    (N,) float64
        ``S_n`` (exact up to rounding) when the span is at most 10^7 ``sigma_t``; beyond, the
        bound ``exp(-(t_n - t_{lo_n - 1}) / sigma_t) * sum_{m < lo_n} w_m``.
    """
    n = time.size
    a = (time - time[0]) / sigma_t
    out = np.zeros(n)
    if n == 0:
        return out
    if a[-1] <= _EXP_SPAN:
        cum = np.concatenate([[0.0], np.cumsum(weight * np.exp(a))])
        return cum[lo] * np.exp(-a)
    chunk = np.floor(a / 500.0).astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], chunk[1:] != chunk[:-1]]))
    if starts.size > 20000:
        cumw = np.concatenate([[0.0], np.cumsum(weight)])
        prev = time[np.maximum(lo - 1, 0)]
        return np.where(lo > 0, cumw[lo] * np.exp(-(time - prev) / sigma_t), 0.0)
    stops = np.append(starts[1:], n)
    carry, base_prev = 0.0, None
    for i0, i1 in zip(starts.tolist(), stops.tolist(), strict=True):
        base = 500.0 * chunk[i0]
        if base_prev is not None:
            carry *= math.exp(base_prev - base)
        cum = np.concatenate([[0.0], np.cumsum(weight[i0:i1] * np.exp(a[i0:i1] - base))])
        out[i0:i1] = (carry + cum[lo[i0:i1] - i0]) * np.exp(-(a[i0:i1] - base))
        carry += cum[-1]
        base_prev = base
    return out


@dataclass(frozen=True)
class GridIndex:
    """Sources sorted into per-level uniform grids for one ``(sigma_x, kappa)``.

    Attributes
    ----------
    order : (N,) int64
        Event index of each sorted source (sorted by level, cell key, index).
    cell_key : (C,) int64
        Key ``ix * 4194304 + iy`` of each non-empty cell, ascending within a level.
    cell_begin : (C + 1,) int32
        First sorted position of each cell.
    level_offset : (L + 1,) int32
        First cell of each level.
    inv_h : (L,) float64
        Inverse cell size of each level (1 / coordinate units).
    covers_all : bool
        Every non-empty level's cells are at least the data's extent (3 x 3 cells see all).
    """

    order: np.ndarray
    cell_key: np.ndarray
    cell_begin: np.ndarray
    level_offset: np.ndarray
    inv_h: np.ndarray
    covers_all: bool


class TruncatedBackend:
    """Pair sums B (exact, per distinct time) and E (truncated, error-bounded) on OpenCL.

    Parameters are those of :class:`~hawkes_cli.engine.opencl.OpenCLBackend`, plus

    tolerance
        Relative bound on ``|ell - ell~| / |ell~|`` enforced by the likelihood (> 0).
    kappa
        Starting cut-off exponent (default :func:`initial_kappa`).
    background
        As for :class:`~hawkes_cli.engine.opencl.OpenCLBackend`.

    Attributes
    ----------
    path : str
        Which computation the last trigger pass took, e.g. ``"background: lattice (1095 days
        for 200000 events); trigger: truncation (kappa 15.8)"``.
    """

    def __init__(
        self,
        time: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        density: np.ndarray | None,
        *,
        model: int,
        area: float,
        precision: str = "float32",
        rows: tuple[int, int] | None = None,
        device: str | None = None,
        local_rank: int = 0,
        work_group: int | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        kappa: float | None = None,
        background: str = "auto",
    ) -> None:
        import pyopencl as cl

        if not (math.isfinite(tolerance) and tolerance > 0):
            raise ValueError(f"tolerance must be finite and > 0, got {tolerance!r}")
        self.exact = OpenCLBackend(
            time,
            x,
            y,
            density,
            model=model,
            area=area,
            precision=precision,
            rows=rows,
            device=device,
            local_rank=local_rank,
            work_group=work_group,
            background=background,
        )
        ex = self.exact
        self._cl = cl
        self.model = model
        self.precision = precision
        self.tolerance = float(tolerance)
        self.kappa = initial_kappa(tolerance) if kappa is None else float(kappa)
        self.row_start, self.row_stop = ex.row_start, ex.row_stop
        self.ctx, self.queue = ex.ctx, ex.queue
        prog = kernels.build_program(self.ctx, precision, truncated=True)
        self._k_prefix = cl.Kernel(prog, "cell_prefix")
        self._k_trunc = cl.Kernel(prog, f"truncated_model{model}")
        self._k_blocks = cl.Kernel(prog, "truncated_blocks") if model == 1 else None
        self._k_prefix16 = cl.Kernel(prog, "cell_prefix16") if model == 1 else None
        self._block_cache: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._real = ex._real
        self._shift = ex._shift

        t = np.asarray(time, dtype=np.float64)
        self._t = t
        n = t.size
        self.n = n
        self._w = np.ones(n) if model == 1 else np.asarray(density, dtype=np.float64)
        self._lo = _lo_of(t).astype(np.int64)
        self._span = float(t[-1] - t[0]) if n else 0.0
        # levels: fixed by the densities (model 2), independent of sigma_x and kappa
        self._level, self._r_unit = source_levels(density if model == 2 else None, n)
        self.nlevels = int(self._level.max()) + 1 if n else 1
        if self.nlevels > 40:
            raise ValueError("densities span more than 2^80; model 2 needs D_max / D_min < 2^80")

        self._buf_td = self._upload(t)
        self.set_locations(x, y)
        nrows = self.row_stop - self.row_start
        self._e_host = np.empty(nrows)
        self._tail_host = np.empty(nrows)
        self._ring_host = np.empty(nrows)
        mf = cl.mem_flags
        self._buf_e = cl.Buffer(self.ctx, mf.WRITE_ONLY, max(8, self._e_host.nbytes))
        self._buf_tail = cl.Buffer(self.ctx, mf.WRITE_ONLY, max(8, self._tail_host.nbytes))
        self._buf_ring = cl.Buffer(self.ctx, mf.WRITE_ONLY, max(8, self._ring_host.nbytes))
        self._s_cache: OrderedDict[float, np.ndarray] = OrderedDict()
        self.trigger_path = "none yet"

    # ------------------------------------------------------------------ setup
    def _upload(self, host: np.ndarray):
        mf = self._cl.mem_flags
        host = np.ascontiguousarray(host)
        if host.nbytes == 0:
            host = np.zeros(1, dtype=host.dtype)
        return self._cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)

    @property
    def path(self) -> str:
        """Which computation each part took (for ``hawkes-run loglik``)."""
        return f"background: {self.exact.background_path}; trigger: {self.trigger_path}"

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Replace all N locations; spatial indices are rebuilt on the next pass."""
        self.exact.set_locations(x, y)
        self._x = np.asarray(x, dtype=np.float64)
        self._y = np.asarray(y, dtype=np.float64)
        self._buf_xd = self._upload(self._x)
        self._buf_yd = self._upload(self._y)
        self._x0, self._y0 = float(self._x.min()), float(self._y.min())
        self._index_cache: OrderedDict[tuple[float, float], tuple[GridIndex, dict]] = OrderedDict()

    def _build_index(self, sigma_x: float) -> tuple[GridIndex, dict]:
        key = (sigma_x, self.kappa)
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
            sigma_x,
            self.kappa,
        )
        bufs = self._upload_index(index)
        self._index_cache[key] = (index, bufs)
        while len(self._index_cache) > _INDEX_CACHE:
            self._index_cache.popitem(last=False)
        return index, bufs

    def _upload_index(self, index: GridIndex) -> dict:
        real = self._real
        o = index.order

        def padded(values: np.ndarray, dtype) -> np.ndarray:
            out = np.zeros(values.size + _PAD, dtype=dtype)
            out[: values.size] = values
            return out

        x, y = self._x[o], self._y[o]
        xh, yh = x.astype(real), y.astype(real)
        bufs = {
            "st": self._upload(padded(self._t[o], real)),
            "sx": self._upload(padded(xh, real)),
            "sy": self._upload(padded(yh, real)),
            "sw": self._upload(padded(self._w[o], real)),
            "std": self._upload(self._t[o]),
            "swd": self._upload(self._w[o]),
            "sidx": self._upload(o.astype(np.int32)),
            "ckey": self._upload(index.cell_key.astype(np.int64)),
            "cbeg": self._upload(index.cell_begin),
            "loff": self._upload(index.level_offset),
            "inv_h": self._upload(index.inv_h),
            "pre": self._cl.Buffer(
                self.ctx, self._cl.mem_flags.READ_WRITE, 8 * (self.n + index.cell_key.size + 1)
            ),
            "pre_sigma_t": None,
        }
        if self.model == 1:  # row blocks: coordinates relative to the source's cell corner
            h = 1.0 / index.inv_h[0]
            cx = np.floor((x - self._x0) * index.inv_h[0])
            cy = np.floor((y - self._y0) * index.inv_h[0])
            rx, ry = x - (self._x0 + cx * h), y - (self._y0 + cy * h)
            bufs["sxr"] = self._upload(padded(rx, real))
            bufs["syr"] = self._upload(padded(ry, real))
            qx = np.clip(np.floor(rx * (4.0 / h)), 0, 3)
            qy = np.clip(np.floor(ry * (4.0 / h)), 0, 3)
            bufs["sq"] = self._upload((4 * qx + qy).astype(np.uint8))
            bufs["pre16"] = self._cl.Buffer(
                self.ctx,
                self._cl.mem_flags.READ_WRITE,
                16 * 8 * (self.n + index.cell_key.size + 1),
            )
        if real is np.float32:
            bufs["sxl"] = self._upload(padded((x - xh).astype(real), real))
            bufs["syl"] = self._upload(padded((y - yh).astype(real), real))
        else:
            bufs["sxl"], bufs["syl"] = bufs["sx"], bufs["sy"]
        return bufs

    def _temporal(self, sigma_t: float) -> np.ndarray:
        hit = self._s_cache.get(sigma_t)
        if hit is None:
            s = temporal_sums(self._t, self._w, self._lo, sigma_t)
            hit = s[self.row_start : self.row_stop]
            self._s_cache[sigma_t] = hit
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
        if self.kappa * sigma_t < self._span:
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
        cl = self._cl
        index, b = self._build_index(sigma_x)
        ncells = index.cell_key.size
        exp_mode = self._span / sigma_t <= _EXP_SPAN
        t0 = float(self._t[0])
        if b["pre_sigma_t"] != sigma_t:
            self._k_prefix(
                self.queue,
                (max(ncells, 1),),
                None,
                b["std"],
                b["swd"],
                b["cbeg"],
                np.int32(ncells),
                np.float64(t0),
                np.float64(1.0 / sigma_t),
                np.int32(exp_mode),
                b["pre"],
            )
            if self._k_prefix16 is not None:
                self._k_prefix16(
                    self.queue,
                    (max(ncells, 1),),
                    None,
                    b["std"],
                    b["swd"],
                    b["sq"],
                    b["cbeg"],
                    np.int32(ncells),
                    np.float64(t0),
                    np.float64(1.0 / sigma_t),
                    np.int32(exp_mode),
                    b["pre16"],
                )
            b["pre_sigma_t"] = sigma_t
        norm = 1.0 / (2.0 * math.pi * sigma_x * sigma_x * sigma_t)
        if self._k_blocks is not None:
            self._run_blocks(index, b, sigma_x, sigma_t, exp_mode, t0)
        else:
            self._run_rows(index, b, sigma_x, sigma_t, exp_mode, t0)
        cl.enqueue_copy(self.queue, self._e_host, self._buf_e)
        cl.enqueue_copy(self.queue, self._tail_host, self._buf_tail)
        cl.enqueue_copy(self.queue, self._ring_host, self._buf_ring)
        e = self._e_host * (2.0**-self._shift * norm)
        s_n = self._temporal(sigma_t)
        if exp_mode and self._k_blocks is not None:  # (a) + ring + beyond the reach
            rest = self._ring_host + math.exp(-(_REACH**2) * kappa) * s_n
        elif exp_mode:  # (a) + (b1) + (b2) of the per-row kernel
            rest = math.exp(-kappa) * self._ring_host + math.exp(-4.0 * kappa) * s_n
        else:  # (a) + (b1 and b2 together)
            rest = math.exp(-kappa) * s_n
        omega = norm * (self._tail_host + rest) * _SAFETY
        return e, omega

    def _run_blocks(self, index: GridIndex, b: dict, sigma_x, sigma_t, exp_mode, t0) -> None:
        """Launch the row-block kernel (model 1) for this backend's rows."""
        kappa = self.kappa
        blocks, nblocks = self._blocks(index, sigma_x, sigma_t)
        real = self._real
        # one block per work-group on CPUs (PoCL schedules work-groups dynamically over the
        # cores, and blocks differ a lot in work); the configured size elsewhere
        wg = self.exact.work_group or (1 if self.exact.device_info.kind == "cpu" else 64)
        self._k_blocks(
            self.queue,
            (-(-max(nblocks, 1) // wg) * wg,),
            (wg,),
            self._buf_td,
            self._buf_xd,
            self._buf_yd,
            b["st"],
            b["sxr"],
            b["syr"],
            b["std"],
            b["pre"],
            b["pre16"],
            b["ckey"],
            b["cbeg"],
            np.int32(index.cell_key.size),
            np.float64(self._x0),
            np.float64(self._y0),
            np.float64(1.0 / index.inv_h[0]),
            blocks,
            np.int32(nblocks),
            np.int32(self.row_start),
            real(LOG2E / sigma_t),
            real(LOG2E / (2.0 * sigma_x * sigma_x)),
            real(self._shift),
            np.float64(kappa),
            np.float64(sigma_t),
            np.float64(1.0 / (2.0 * sigma_x * sigma_x)),
            np.float64(_REACH * math.sqrt(2.0 * kappa) * sigma_x),
            np.float64(t0),
            np.float64(1.0 / sigma_t),
            np.int32(exp_mode),
            self._buf_e,
            self._buf_tail,
            self._buf_ring,
        )

    def _blocks(self, index: GridIndex, sigma_x: float, sigma_t: float):
        """Row blocks of this backend's rows for the current index and ``sigma_t`` (cached)."""
        key = (sigma_x, self.kappa, sigma_t)
        hit = self._block_cache.get(key)
        if hit is not None:
            self._block_cache.move_to_end(key)
            return hit
        blocks = row_blocks(index, self._t, self.row_start, self.row_stop, _BLOCK_WIDTH * sigma_t)
        hit = (self._upload(blocks), blocks.shape[0])
        self._block_cache[key] = hit
        while len(self._block_cache) > _INDEX_CACHE:
            self._block_cache.popitem(last=False)
        return hit

    def _run_rows(self, index: GridIndex, b: dict, sigma_x, sigma_t, exp_mode, t0) -> None:
        """Launch the per-row kernel (model 2: several grid levels)."""
        kappa = self.kappa
        ex = self.exact
        real = self._real
        nrows = self.row_stop - self.row_start
        gsize, lsize = ex._global_size(nrows)
        self._k_trunc(
            self.queue,
            (gsize,),
            lsize,
            ex._buf_t,
            ex._buf_x,
            ex._buf_y,
            ex._buf_xl,
            ex._buf_yl,
            self._buf_td,
            self._buf_xd,
            self._buf_yd,
            ex._buf_lo,
            b["st"],
            b["sx"],
            b["sy"],
            b["sxl"],
            b["syl"],
            b["sw"],
            b["std"],
            b["sidx"],
            b["pre"],
            b["ckey"],
            b["cbeg"],
            b["loff"],
            b["inv_h"],
            np.int32(self.nlevels),
            np.float64(self._x0),
            np.float64(self._y0),
            np.int32(self.row_start),
            np.int32(nrows),
            real(LOG2E / sigma_t),
            real(LOG2E / (2.0 * sigma_x * sigma_x)),
            real(self._shift),
            np.float64(kappa * sigma_t),
            np.float64(t0),
            np.float64(1.0 / sigma_t),
            np.int32(exp_mode),
            np.float64(math.exp(-kappa)),
            self._buf_e,
            self._buf_tail,
            self._buf_ring,
        )

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

    def row_work(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        """Sources each of ALL N rows visits at these lengthscales, shape (N,), float64 (host
        estimate from the grid index, used to balance MPI rows)."""
        index, _ = self._build_index(sigma_x)
        return visited_counts(
            self._t,
            self._x,
            self._y,
            self._lo,
            self._level,
            index,
            self._x0,
            self._y0,
            self.kappa * sigma_t,
        )


def source_levels(density: np.ndarray | None, n: int) -> tuple[np.ndarray, float]:
    """Grid level of each source and the level-0 radius unit.

    Model 2 (``density`` given): ``l_m = ceil(log2(sqrt(D_max / D_m)))``, so the cut-off radius
    ``sqrt(2 kappa) sigma_x / sqrt(D_m) <= sqrt(2 kappa) sigma_x r_unit 2^l_m`` with
    ``r_unit = 1 / sqrt(D_max)``. Model 1 (None): one level, ``r_unit = 1``.

    Returns
    -------
    level : (N,) int64
    r_unit : float
    """
    if density is None:
        return np.zeros(n, dtype=np.int64), 1.0
    w = np.asarray(density, dtype=np.float64)
    dmax = float(w.max())
    level = np.ceil(0.5 * np.log2(dmax / w) - 1e-12).clip(0).astype(np.int64)
    # guard the rounding of log2: the radius must fit the level's cells
    level += (1.0 / np.sqrt(w) > 2.0**level / math.sqrt(dmax)).astype(np.int64)
    return level, 1.0 / math.sqrt(dmax)


def build_index(
    x: np.ndarray,
    y: np.ndarray,
    level: np.ndarray,
    nlevels: int,
    r_unit: float,
    sigma_x: float,
    kappa: float,
) -> GridIndex:
    """Sort all N sources into the per-level grids of ``(sigma_x, kappa)`` (numpy, O(N log N)).

    Level l has cells of size ``h_l = sqrt(2 kappa) sigma_x r_unit 2^l (1 + 1e-6)`` (coordinate
    units; at least the extent / 2^20), so every source's cut-off radius is below its level's
    cell size and a row's 3 x 3 neighbouring cells hold every source within that radius.
    Cell coordinates are ``floor((x - min x) * inv_h)``, computed identically in the kernel.
    """
    n = x.size
    x0, y0 = float(x.min()), float(y.min())
    extent = max(float(x.max()) - x0, float(y.max()) - y0, 1e-300)
    radius = math.sqrt(2.0 * kappa) * sigma_x * r_unit  # level 0
    h = np.array(
        [max(radius * 2.0**lev * (1.0 + 1e-6), extent / _CELLS_PER_DIM) for lev in range(nlevels)]
    )
    inv_h = 1.0 / h
    ih = inv_h[level]
    cx = np.floor((x - x0) * ih).astype(np.int64)
    cy = np.floor((y - y0) * ih).astype(np.int64)
    comb = (level.astype(np.int64) << 44) | (cx * _KEY_STRIDE + cy)
    order = np.argsort(comb, kind="stable")
    sc = comb[order]
    first = np.flatnonzero(np.concatenate([[True], sc[1:] != sc[:-1]]))
    cell_comb = sc[first]
    cell_level = cell_comb >> 44
    return GridIndex(
        order=order,
        cell_key=cell_comb & ((1 << 44) - 1),
        cell_begin=np.append(first, n).astype(np.int32),
        level_offset=np.searchsorted(cell_level, np.arange(nlevels + 1)).astype(np.int32),
        inv_h=inv_h,
        covers_all=bool(np.all(h[np.unique(level)] >= extent)),
    )


def row_blocks(
    index: GridIndex, time: np.ndarray, row_start: int, row_stop: int, width: float
) -> np.ndarray:
    """Group the rows ``[row_start, row_stop)`` into blocks for the row-block kernel.

    A block holds up to ``_BLOCK_ROWS`` (16) consecutive rows of one grid cell, in time order;
    where those would span more than ``width`` (time units), the cell's rows are grouped by
    bins of ``width`` instead. Unused lanes hold ``~r`` for the block's first row ``r`` (a copy
    the kernel evaluates but does not store).

    Returns
    -------
    (nblocks, 16) int32
        Event index of each lane; blocks of fuller cells first, then by (cell, time).
    """
    o = index.order
    cell = np.repeat(np.arange(index.cell_key.size), np.diff(index.cell_begin))
    mine = (o >= row_start) & (o < row_stop)
    rows = o[mine]
    if rows.size == 0:
        return np.zeros((0, _BLOCK_ROWS), dtype=np.int32)
    # consecutive rows of a cell per block; a block spanning more than `width` in time
    # is broken up by bins of `width` instead
    cell = cell[mine]
    t = time[rows]
    first = np.concatenate([[True], cell[1:] != cell[:-1]])
    run = np.cumsum(first) - 1
    pos = np.arange(rows.size) - np.flatnonzero(first)[run]
    chunk = run.astype(np.float64) * (rows.size + 1.0) + pos // _BLOCK_ROWS
    group = _runs_of(chunk)
    span = np.maximum.reduceat(t, group) - np.minimum.reduceat(t, group)
    wide = np.repeat(span > width, np.diff(np.append(group, rows.size)))
    tbin = np.floor((t - time[0]) / width) if width > 0 else pos.astype(np.float64)
    key = np.where(wide, -1.0 - (cell * (tbin.max() + 1.0) + tbin), chunk)
    starts = _runs_of(key)
    lengths = np.diff(np.append(starts, rows.size))
    per_group = -(-lengths // _BLOCK_ROWS)
    first_block = np.concatenate([[0], np.cumsum(per_group)[:-1]])
    pos = np.arange(rows.size) - np.repeat(starts, lengths)
    block = np.repeat(first_block, lengths) + pos // _BLOCK_ROWS
    out = np.full((int(per_group.sum()), _BLOCK_ROWS), -1, dtype=np.int64)
    out[block, pos % _BLOCK_ROWS] = rows
    pad = out < 0
    out[pad] = ~np.broadcast_to(out[:, :1], out.shape)[pad]
    # blocks of the fullest cells (the most work) first, so no core is left with them at the end
    size = np.diff(index.cell_begin)[cell[starts]]
    heavy_first = np.argsort(-np.repeat(size, per_group), kind="stable")
    return out[heavy_first].astype(np.int32)


def _runs_of(key: np.ndarray) -> np.ndarray:
    """Start positions of the runs of equal consecutive values of ``key`` (non-empty)."""
    return np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))


def truncated_row_cost(
    time: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    density: np.ndarray | None,
    *,
    sigma_x: float,
    sigma_t: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> np.ndarray:
    """Work of each row of the truncated trigger at these lengthscales, shape (N,), float64:
    sources visited plus the per-row overhead of the cell searches (host only, no OpenCL).

    Used to balance the MPI row split (:func:`hawkes_cli.engine.make_likelihood`).
    """
    t = np.asarray(time, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    level, r_unit = source_levels(density, t.size)
    nlevels = int(level.max()) + 1
    kappa = initial_kappa(tolerance)
    index = build_index(x, y, level, nlevels, r_unit, sigma_x, kappa)
    lo = _lo_of(t)
    work = visited_counts(
        t, x, y, lo, level, index, float(x.min()), float(y.min()), kappa * sigma_t
    )
    return work + 30.0 * np.count_nonzero(np.diff(index.level_offset))


def _lo_of(time: np.ndarray) -> np.ndarray:
    """First index of each event's tie group (times sorted ascending)."""
    return np.searchsorted(time, time, side="left")


def visited_counts(
    time: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    lo: np.ndarray,
    level: np.ndarray,
    index: GridIndex,
    x0: float,
    y0: float,
    tc: float,
) -> np.ndarray:
    """Number of sources the truncated kernel visits for each row, shape (N,), float64.

    Mirrors the kernel's search (3 x 3 cells per level, ``t_m >= t_n - Tc``, ``m < lo_n``)
    with numpy ``searchsorted`` on the sorted (cell, index) and (cell, time) keys.
    """
    n = time.size
    o = index.order
    sorted_t = time[o]
    counts = np.zeros(n)
    nlev = index.inv_h.size
    for lev in range(nlev):
        ka, kb = int(index.level_offset[lev]), int(index.level_offset[lev + 1])
        if ka == kb:
            continue
        keys = index.cell_key[ka:kb]
        cx = np.floor((x - x0) * index.inv_h[lev]).astype(np.int64)
        cy = np.floor((y - y0) * index.inv_h[lev]).astype(np.int64)
        for ox in (-1, 0, 1):
            for oy in (-1, 0, 1):
                k = (cx + ox) * _KEY_STRIDE + (cy + oy)
                pos = np.searchsorted(keys, k)
                found = (pos < keys.size) & (keys[np.minimum(pos, keys.size - 1)] == k)
                c = ka + np.minimum(pos, keys.size - 1)
                cb = index.cell_begin[c].astype(np.int64)
                ce = index.cell_begin[c + 1].astype(np.int64)
                # e: first position with idx >= lo; s: first with t >= t - tc (in [cb, ce))
                e = _segment_search(o, cb, ce, lo)
                s = _segment_search(sorted_t, cb, e, time - tc)
                counts += np.where(found, e - s, 0)
    return counts


def _segment_search(values: np.ndarray, a: np.ndarray, b: np.ndarray, v: np.ndarray):
    """Vectorised lower_bound of ``v[i]`` in ``values[a[i]:b[i]]`` (each segment sorted)."""
    a = a.copy()
    b = b.copy()
    while True:
        active = a < b
        if not active.any():
            return a
        mid = (a + b) // 2
        midc = np.minimum(mid, values.size - 1)
        less = active & (values[midc] < v)
        a = np.where(less, mid + 1, a)
        b = np.where(active & ~less, mid, b)
