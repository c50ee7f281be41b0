"""The truncated trigger's host side in numpy: grid index, row blocks, temporal sums, costs.

Pure numpy (no OpenCL): sources sorted into per-level uniform grids for one ``(sigma_x,
kappa)`` (:func:`build_index`), the row blocks of the model-1 kernel (:func:`row_blocks`), the
all-sources temporal sums ``S_n`` that bound the far part (:func:`temporal_sums`), and the
per-row work used to balance MPI rows (:func:`visited_counts`, :func:`truncated_row_cost`).
The kernels that consume these arrays are in ``kernels/truncated.cl``; their launches and the
error bound in :mod:`hawkes_cli.engine.truncated`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..vocab import DEFAULT_TOLERANCE
from .keysort import group_keys, lex_key, stable_argsort
from .times import TimeStructure

#: Time span / sigma_t up to which exact exponential prefixes are used (else chunked bounds).
EXP_SPAN = 600.0
#: Cap of the grid resolution per dimension (keys fit KEY_STRIDE in truncated.cl).
CELLS_PER_DIM = 2**20
#: Stride of the 2D cell key ``ix * KEY_STRIDE + iy`` (KEY_STRIDE in truncated.cl).
KEY_STRIDE = 4194304
#: Rows per block of the row-block kernel (LANES in truncated.cl).
BLOCK_ROWS = 16
#: Smallest per-level cut-off exponent (:func:`level_kappas`).
KAPPA_FLOOR = 1.0
#: Largest cut-off exponent: ``exp(-740)`` underflows, so beyond it nothing more can be gained.
KAPPA_MAX = 740.0
#: Resolution per dimension of the grid that tells which levels are near a row block
#: (:func:`block_levels`).
PRESENCE_CELLS = 512
#: Rows per time bin that an occupied cell of the grouping level holds on average
#: (:func:`grouping_level`): on bench_loglik's cities it picks the level the previous rule
#: did at 1M (6) and one finer at 200k (7); on real-county data level 8 at 200k, where the
#: previous rule fell back to the coarsest (11) and the kernel was 4-5 times slower.
GROUP_ROWS_PER_BIN = 4.0
#: Steps per factor 2 of the lengthscale lattice (:func:`lattice_up`).
LATTICE_STEPS = 16
#: Side of an expansion box in units of its band's kernel lengthscale ``sigma_x / sqrt(ceil_l)``
#: (:func:`build_index`): a source's offset from its box's centre is then at most ``0.71 /
#: sqrt(a)`` per coordinate with ``a = D / (2 sigma_x^2)`` (``sigma_x`` rounded up to the
#: lattice: at most 0.74), where truncated.cl's Hermite series of ``kernels.HERMITE_ORDER``
#: (23) terms per coordinate leaves at most 2.1e-11 of a box's weight per coordinate. At 200k
#: (bench_loglik's cities, model 2, kappa 27.45) side 2 with 23 terms and side 3 with 25 and
#: 30 took 0.156, 0.151 and 0.162 s per trigger pass (one run; 0.27 s without boxes at kappa
#: 28.97). The error must be this small: it is bounded per row, and at 200k model 1 with 25
#: terms of side 3 (3e-8) the boxes' bound alone was 0.018 nats.
BOX_SIDE = 2.0
#: Sources a box must hold to be summed by its Hermite moments rather than pair by pair (its
#: HERMITE_ORDER^2 moments cost about as much per row block as 16 rows' pairs with 150 of
#: them; 256 and 1024 took 0.15 and 0.16 s with boxes of side 3 and 25 terms, kappa 28.97).
EXPAND_MIN = 256

#: Expansion boxes are counted in an array of every possible box when there are at most this
#: many per source (else by sorting the sources' boxes).
DENSE_KEYS_PER_SOURCE = 8


def initial_kappa(tolerance: float, n: int, dmax: float = 1.0) -> float:
    """First guess of the cut-off exponent for ``n`` events and a ``tolerance`` in nats (> 0).

    A row whose rate is mostly its own triggering omits about ``exp(-kappa)`` of it (relative),
    so ``n`` such rows cost about ``n exp(-kappa)`` nats; a level of density up to ``dmax`` is
    cut at ``kappa`` (:func:`level_kappas`) and weighs its terms by up to ``dmax``. The
    truncated backend's :meth:`~hawkes_cli.engine.truncated.TruncatedBackend.calibrate` probes
    around this guess; it also sizes the grid of the MPI row balance. At least
    :data:`KAPPA_FLOOR` (a tolerance above ``n dmax`` nats would give a negative one).
    """
    return max(math.log(max(n, 2) * max(dmax, 1.0) / tolerance), KAPPA_FLOOR)


def lattice_up(value: float) -> float:
    """The smallest power of ``2^(1 / LATTICE_STEPS)`` at or above ``value`` (> 0).

    The grid index, the row blocks and the levels within reach of each block are built for
    ``sigma_x`` and ``sigma_t`` rounded up to this lattice (at most 4.4 % above them): cells
    at least the cut-off radius and a reach at least the kernel's are valid at any smaller
    ``sigma_x``, and a block's time width only decides which rows share it. So the proposals
    of an MCMC chain, which move the lengthscales by a few per cent, mostly reuse them, while
    the terms and the bound use the exact values. A pure function of ``value``: the truncated
    log-likelihood stays a function of the parameters, whatever was evaluated before.
    """
    k = math.ceil(LATTICE_STEPS * math.log2(value))
    # log2 may round either way by an ulp: settle on the smallest point >= value
    while 2.0 ** ((k - 1) / LATTICE_STEPS) >= value:
        k -= 1
    while 2.0 ** (k / LATTICE_STEPS) < value:
        k += 1
    return 2.0 ** (k / LATTICE_STEPS)


def cell_coords(
    x: np.ndarray, y: np.ndarray, x0: float, y0: float, inv_h: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Grid cell of each point, ``floor((x - x0) * inv_h)`` and the same in y, each shape of
    ``x``, int64 (``inv_h`` one value or one per point; the kernel computes the same)."""
    cx = np.floor((x - x0) * inv_h).astype(np.int64)
    cy = np.floor((y - y0) * inv_h).astype(np.int64)
    return cx, cy


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
    if a[-1] <= EXP_SPAN:
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
    h : (L,) float64
        Cell size of each level (coordinate units).
    inv_h : (L,) float64
        ``1 / h``.
    covers_all : bool
        Every non-empty level's cells are at least the data's extent (3 x 3 cells see all).
    band : (L,) int64
        The density level (:func:`source_levels`) of each grid level: the first ``nbase``
        levels are the density levels themselves; level ``nbase + l``, when present, holds
        the *expansion boxes* of density level ``l`` (cells of one density and at least
        :data:`EXPAND_MIN` sources, of side :data:`BOX_SIDE` kernel lengthscales).
    nbase : int
        Number of density levels.
    level : (N,) int64
        Grid level of each source, by event index.
    """

    order: np.ndarray
    cell_key: np.ndarray
    cell_begin: np.ndarray
    level_offset: np.ndarray
    h: np.ndarray
    inv_h: np.ndarray
    covers_all: bool
    band: np.ndarray
    nbase: int
    level: np.ndarray

    @property
    def expanded(self) -> tuple[int, int]:
        """First cell and first sorted position of the expansion levels (``(C, N)`` if none;
        they come after every density level in the sort)."""
        c = int(self.level_offset[min(self.nbase, self.level_offset.size - 1)])
        return c, int(self.cell_begin[c])


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


def level_bands(
    density: np.ndarray | None, level: np.ndarray, nlevels: int
) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest density of each level's sources, each shape (L,), float64 (1 for
    model 1 and for empty levels).

    Every source m of level l has ``floor_l <= D_m <= ceil_l``: ``exp(-d^2 floor_l / (2
    sigma_x^2))`` bounds its spatial factor at distance ``d``, and ``ceil_l`` its weight.
    """
    lo, hi = np.full(nlevels, np.inf), np.full(nlevels, -np.inf)
    if density is not None and level.size:
        d = np.asarray(density, dtype=np.float64)
        np.minimum.at(lo, level, d)
        np.maximum.at(hi, level, d)
    lo[~np.isfinite(lo)] = 1.0
    hi[~np.isfinite(hi)] = 1.0
    return lo, hi


def level_kappas(kappa: float, ceil: np.ndarray) -> np.ndarray:
    """Cut-off exponent of each level, shape (L,): ``kappa + log(ceil_l / max ceil)``, at
    least :data:`KAPPA_FLOOR`.

    A source's omitted term is at most its weight ``D_m`` times ``exp(-kappa_l)`` (times the
    temporal and spatial factors the bound sums), so this gives every level about the same
    absolute error per source: the densest level is cut at ``kappa``, sparser levels -- whose
    radii ``sqrt(2 kappa_l) sigma_x / sqrt(D)`` hold the most sources -- proportionally
    earlier. Model 1 (one level): ``[kappa]``.
    """
    ceil = np.asarray(ceil, dtype=np.float64)
    return np.maximum(kappa + np.log(ceil / ceil.max()), min(KAPPA_FLOOR, kappa))


def build_index(
    x: np.ndarray,
    y: np.ndarray,
    level: np.ndarray,
    nlevels: int,
    r_unit: float,
    sigma_x: float,
    kappa: float | np.ndarray,
    *,
    weight: np.ndarray | None = None,
    ceil: np.ndarray | None = None,
    expand_min: int = 0,
) -> GridIndex:
    """Sort all N sources into the per-level grids of ``(sigma_x, kappa)`` (numpy, O(N log N)).

    Level l has cells of size ``h_l = sqrt(2 kappa_l) sigma_x r_unit 2^l (1 + 1e-6)``
    (coordinate units; at least the extent / 2^20; ``kappa`` is one exponent or one per level,
    see :func:`level_kappas`), so every source's cut-off radius is below its level's cell size
    and a row's 3 x 3 neighbouring cells hold every source within that radius.
    Cell coordinates are ``floor((x - min x) * inv_h)``, computed identically in the kernel.

    With ``expand_min > 0`` (``weight``: each source's density, or ones for model 1;
    ``ceil``: each level's largest, :func:`level_bands`), the sources of level l that share a
    box of side ``BOX_SIDE sigma_x / sqrt(ceil_l)`` with at least ``expand_min`` sources of
    the same density move to level ``L + l``, whose cells are those boxes (see
    :class:`GridIndex`; the kernel sums them by their Hermite moments).
    """
    n = x.size
    x0, y0 = float(x.min()), float(y.min())
    extent = max(float(x.max()) - x0, float(y.max()) - y0, 1e-300)
    kap = np.broadcast_to(np.asarray(kappa, dtype=np.float64), (nlevels,))
    radius = np.sqrt(2.0 * kap) * sigma_x * r_unit * 2.0 ** np.arange(nlevels)
    h = np.maximum(radius * (1.0 + 1e-6), extent / CELLS_PER_DIM)
    band = np.arange(nlevels, dtype=np.int64)
    if expand_min > 0 and weight is not None and ceil is not None and n:
        box = np.maximum(
            BOX_SIDE * sigma_x / np.sqrt(np.asarray(ceil, float)), extent / CELLS_PER_DIM
        )
        level = level + nlevels * _expanded(x, y, x0, y0, level, weight, 1.0 / box, expand_min)
        h = np.concatenate([h, box])
        band = np.concatenate([band, band])
    inv_h = 1.0 / h
    ih = inv_h[level]
    cx, cy = cell_coords(x, y, x0, y0, ih)
    comb = (level.astype(np.int64) << 44) | (cx * KEY_STRIDE + cy)
    order = stable_argsort(lex_key(level, cx, cy))  # = argsort(comb, kind="stable")
    sc = comb[order]
    first = np.flatnonzero(np.concatenate([[True], sc[1:] != sc[:-1]]))
    cell_comb = sc[first]
    cell_level = cell_comb >> 44
    return GridIndex(
        order=order,
        cell_key=cell_comb & ((1 << 44) - 1),
        cell_begin=np.append(first, n).astype(np.int32),
        level_offset=np.searchsorted(cell_level, np.arange(h.size + 1)).astype(np.int32),
        h=h,
        inv_h=inv_h,
        covers_all=bool(np.all(h[np.bincount(level, minlength=h.size) > 0] >= extent)),
        band=band,
        nbase=nlevels,
        level=level,
    )


def _expanded(
    x: np.ndarray,
    y: np.ndarray,
    x0: float,
    y0: float,
    level: np.ndarray,
    weight: np.ndarray,
    inv_box: np.ndarray,
    expand_min: int,
) -> np.ndarray:
    """Whether each source lies in an expansion box of its level (:func:`build_index`): a
    cell of size ``1 / inv_box[l]`` holding at least ``expand_min`` sources, all of one
    density. Shape (N,), int64 (0 or 1)."""
    cx, cy = cell_coords(x, y, x0, y0, inv_box[level])
    key = lex_key(level, cx, cy)
    span = int(key.max()) + 1 if key.size else 0
    if span <= DENSE_KEYS_PER_SOURCE * key.size:  # few boxes in all: count them in place
        box, count = key, np.bincount(key, minlength=span)
    else:  # by a sort (0.035 s at 1M against 0.005 s)
        _, box, count, _ = group_keys(key)
    w = np.asarray(weight, dtype=np.float64)
    if w.size and w.min() == w.max():  # one density (model 1): every box is of one
        return (count >= expand_min)[box].astype(np.int64)
    lo = np.full(count.size, np.inf)
    hi = np.full(count.size, -np.inf)
    np.minimum.at(lo, box, w)
    np.maximum.at(hi, box, w)
    return ((count >= expand_min) & (lo == hi))[box].astype(np.int64)


def grouping_level(
    index: GridIndex,
    x: np.ndarray,
    y: np.ndarray,
    level: np.ndarray,
    span: float,
    width: float,
) -> int:
    """The level whose cells group the rows of every finer level into row blocks.

    The finest non-empty level ``g`` whose cells, counting only the cells that hold rows,
    hold on average at least :data:`GROUP_ROWS_PER_BIN` rows of levels ``<= g`` per time bin
    of ``width`` (time units; ``span`` is the data's time span); the coarsest non-empty level
    if none does. Model 1 (one level): 0. Rows of a dense level alone would make blocks of
    one or two rows (its cells are tiny), and every block pays for its walk over the cells of
    every level in reach; but a block as wide as a coarse level's cell walks over all the
    dense levels' cells in it (at 200k on real-county data, grouping by the coarsest level
    made the kernel 4-5 times slower than by level 6 or 8).

    Parameters
    ----------
    index
        The grid index (its cell sizes).
    x, y : (N,) float64
        Locations of the rows (all events).
    level : (N,) int64
        Each row's level (:func:`source_levels`).
    span, width
        Time span of the data and of a block (time units).
    """
    bins = max(1.0, span / width) if width > 0 else 1.0
    used = np.flatnonzero(np.diff(index.level_offset[: index.nbase + 1]) > 0)
    if used.size == 0:
        return 0
    x0, y0 = float(x.min()), float(y.min())
    for g in used.tolist():
        mine = level <= g
        cx, cy = cell_coords(x[mine], y[mine], x0, y0, index.inv_h[g])
        ny = int(cy.max()) + 1 if cy.size else 1
        if cx.size and (int(cx.max()) + 1) * ny <= DENSE_KEYS_PER_SOURCE * cx.size:  # count
            cells = np.count_nonzero(np.bincount(cx * ny + cy))
        else:
            cells = np.unique(cx * KEY_STRIDE + cy).size
        if np.count_nonzero(mine) >= GROUP_ROWS_PER_BIN * bins * cells:
            return int(g)
    return int(used[-1])


def row_groups(
    index: GridIndex, x: np.ndarray, y: np.ndarray, level: np.ndarray, group_level: int
) -> np.ndarray:
    """Key of the cell that groups each row into row blocks, shape (N,), int64: the row's
    own level's cell, or the cell of ``group_level`` for rows of finer levels
    (:func:`grouping_level`)."""
    lev = np.maximum(level, group_level).astype(np.int64)
    ih = index.inv_h[lev]
    cx, cy = cell_coords(x, y, float(x.min()), float(y.min()), ih)
    return (lev << 44) | (cx * KEY_STRIDE + cy)


def _cell_key_digits(key: np.ndarray) -> np.ndarray:
    """``(level << 44) | (x cell * KEY_STRIDE + y cell)`` keys repacked by
    :func:`~.keysort.lex_key` (same order, fewer bits to sort)."""
    cell = key & ((1 << 44) - 1)
    return lex_key(key >> 44, cell // KEY_STRIDE, cell % KEY_STRIDE)


def row_blocks(
    index: GridIndex,
    time: np.ndarray,
    row_start: int,
    row_stop: int,
    width: float,
    group: np.ndarray | None = None,
) -> np.ndarray:
    """Group the rows ``[row_start, row_stop)`` into blocks for the row-block kernel.

    A block holds up to ``BLOCK_ROWS`` (16) consecutive rows of one grid cell (of ``index``,
    or with equal ``group`` keys, :func:`row_groups`), in time order; where those would span
    more than ``width`` (time units), the cell's rows are grouped by bins of ``width``
    instead. Unused lanes hold ``~r`` for the block's first row ``r`` (a copy the kernel
    evaluates but does not store).

    Returns
    -------
    (nblocks, 16) int32
        Event index of each lane; blocks of fuller cells first, then by (cell, time).
    """
    if group is None:
        o = index.order
        cell = np.repeat(np.arange(index.cell_key.size), np.diff(index.cell_begin))
        mine = (o >= row_start) & (o < row_stop)
        rows = o[mine]
        cell = cell[mine]
        size_of = np.diff(index.cell_begin)
    else:
        key = group[row_start:row_stop]
        by_key = stable_argsort(_cell_key_digits(key))
        rows = row_start + by_key
        if rows.size:
            cell = np.cumsum(np.concatenate([[False], key[by_key][1:] != key[by_key][:-1]]))
            size_of = np.bincount(cell)
    if rows.size == 0:
        return np.zeros((0, BLOCK_ROWS), dtype=np.int32)
    # consecutive rows of a cell per block; a block spanning more than `width` in time
    # is broken up by bins of `width` instead
    t = time[rows]
    first = np.concatenate([[True], cell[1:] != cell[:-1]])
    run = np.cumsum(first) - 1
    pos = np.arange(rows.size) - np.flatnonzero(first)[run]
    chunk = run.astype(np.float64) * (rows.size + 1.0) + pos // BLOCK_ROWS
    group = _runs_of(chunk)
    span = np.maximum.reduceat(t, group) - np.minimum.reduceat(t, group)
    wide = np.repeat(span > width, np.diff(np.append(group, rows.size)))
    tbin = np.floor((t - time[0]) / width) if width > 0 else pos.astype(np.float64)
    key = np.where(wide, -1.0 - (cell * (tbin.max() + 1.0) + tbin), chunk)
    starts = _runs_of(key)
    lengths = np.diff(np.append(starts, rows.size))
    per_group = -(-lengths // BLOCK_ROWS)
    first_block = np.concatenate([[0], np.cumsum(per_group)[:-1]])
    pos = np.arange(rows.size) - np.repeat(starts, lengths)
    block = np.repeat(first_block, lengths) + pos // BLOCK_ROWS
    out = np.full((int(per_group.sum()), BLOCK_ROWS), -1, dtype=np.int64)
    out[block, pos % BLOCK_ROWS] = rows
    pad = out < 0
    out[pad] = ~np.broadcast_to(out[:, :1], out.shape)[pad]
    # blocks of the fullest cells (the most work) first, so no core is left with them at the end
    size = size_of[cell[starts]]
    heavy_first = np.argsort(-np.repeat(size, per_group), kind="stable")
    return out[heavy_first].astype(np.int32)


@dataclass(frozen=True)
class Presence:
    """Sources of each level counted on a uniform grid over the data's extent.

    Attributes
    ----------
    x0, y0 : float
        Corner of the grid (the smallest coordinates).
    cell : float
        Cell size (coordinate units).
    sat : (L, C + 1, C + 1) int32
        Summed-area table of each level's counts: ``sat[l, i, j]`` sources of level l in the
        cells ``[0, i) x [0, j)``.
    """

    x0: float
    y0: float
    cell: float
    sat: np.ndarray


def level_presence(
    x: np.ndarray, y: np.ndarray, level: np.ndarray, nlevels: int, cells: int = PRESENCE_CELLS
) -> Presence:
    """Count the sources of each level on a ``cells`` x ``cells`` grid (:class:`Presence`,
    used by :func:`block_levels`; independent of the lengthscales, built once per set of
    locations).

    Parameters
    ----------
    x, y : (N,) float64
        Locations of all events (coordinate units), N > 0.
    level : (N,) int
        Grid level of each source (:func:`source_levels`).
    nlevels
        Number of levels.
    cells
        Resolution per dimension.
    """
    x0, y0 = float(x.min()), float(y.min())
    cell = max(float(x.max()) - x0, float(y.max()) - y0, 1e-300) / cells
    gx = np.clip(np.floor((x - x0) / cell), 0, cells - 1).astype(np.int64)
    gy = np.clip(np.floor((y - y0) / cell), 0, cells - 1).astype(np.int64)
    key = (level.astype(np.int64) * cells + gx) * cells + gy
    counts = np.bincount(key, minlength=nlevels * cells * cells).reshape(nlevels, cells, cells)
    sat = np.zeros((nlevels, cells + 1, cells + 1), dtype=np.int32)
    sat[:, 1:, 1:] = counts.cumsum(1).cumsum(2)
    return Presence(x0=x0, y0=y0, cell=cell, sat=sat)


def block_levels(
    presence: Presence, x: np.ndarray, y: np.ndarray, blocks: np.ndarray, reach: np.ndarray
) -> np.ndarray:
    """Which levels have a source within reach of each row block, one bit per level (the host
    reference of the device's ``block_levels``, :class:`.grid_upload.DevicePresence`).

    The row-block kernel skips level l for block b unless bit l of ``out[b]`` is set. A level
    is left out only when none of its sources lies within ``reach[l]`` of the block's rows
    (in each coordinate, so within the box around their bounding box), so it can skip only
    sources that the far bound already covers (those beyond ``1.5 R_l``): the kernel would
    find nothing but cells to bound there, at the cost of a search per column (most of the
    kernel's time on levels of a few dense cities).

    A block's box is widened to whole cells of the ``presence`` grid, so the test can only
    keep a level too many, never drop one too many.

    Parameters
    ----------
    presence
        The sources' counts per level (:func:`level_presence`), L < 64 levels.
    x, y : (N,) float64
        Locations of all events (coordinate units).
    blocks : (B, 16) int
        Row blocks (:func:`row_blocks`; ``~r`` marks a padding copy of row ``r``).
    reach : (L,) float64
        The kernel's reach per level (coordinate units), at least the one it will run with.

    Returns
    -------
    (B,) uint64
    """
    out = np.zeros(blocks.shape[0], dtype=np.uint64)
    if blocks.shape[0] == 0:
        return out
    sat, g = presence.sat, presence.cell
    cells = sat.shape[1] - 1
    rows = np.where(blocks >= 0, blocks, ~blocks)
    bx, by = x[rows], y[rows]
    box = (bx.min(1), bx.max(1), by.min(1), by.max(1))
    # a little more than the kernel's reach, for its own rounding
    pad = np.asarray(reach, dtype=np.float64) * (1.0 + 1e-9) + 1e-12 * g * cells

    def cells_of(v: np.ndarray, v0: float, shift: int) -> np.ndarray:
        return np.clip(np.floor((v - v0) / g) + shift, 0, cells).astype(np.int64)

    for lev in range(sat.shape[0]):
        if sat[lev, -1, -1] == 0:
            continue
        lx = cells_of(box[0] - pad[lev], presence.x0, 0)
        hx = cells_of(box[1] + pad[lev], presence.x0, 1)
        ly = cells_of(box[2] - pad[lev], presence.y0, 0)
        hy = cells_of(box[3] + pad[lev], presence.y0, 1)
        s = sat[lev]
        found = s[hx, hy] - s[lx, hy] - s[hx, ly] + s[lx, ly]
        out |= (found > 0).astype(np.uint64) << np.uint64(lev)
    return out


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
    times: TimeStructure | None = None,
) -> np.ndarray:
    """Work of each row of the truncated trigger at these lengthscales, shape (N,), float64:
    sources visited plus the per-row overhead of the cell searches (host only, no OpenCL).

    Used to balance the MPI row split (:func:`hawkes_cli.engine.build_likelihood`), at the
    starting cut-off of ``tolerance``; ``times`` is the tie structure of ``time`` when already
    built.
    """
    t = np.asarray(time, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    level, r_unit = source_levels(density, t.size)
    nlevels = int(level.max()) + 1
    ceil = level_bands(density, level, nlevels)[1]
    kappa = level_kappas(initial_kappa(tolerance, t.size, float(ceil.max())), ceil)
    index = build_index(x, y, level, nlevels, r_unit, sigma_x, kappa)
    lo = (TimeStructure.from_times(t) if times is None else times).lo
    work = visited_counts(
        t, x, y, lo, level, index, float(x.min()), float(y.min()), kappa * sigma_t
    )
    return work + 30.0 * np.count_nonzero(np.diff(index.level_offset))


def visited_counts(
    time: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    lo: np.ndarray,
    level: np.ndarray,
    index: GridIndex,
    x0: float,
    y0: float,
    tc: float | np.ndarray,
) -> np.ndarray:
    """Sources a per-row search visits for each row, shape (N,), float64: an estimate of the
    row-block kernel's work, for balancing MPI rows (3 x 3 cells per level, ``t_m >= t_n -
    Tc``, ``m < lo_n``; numpy ``searchsorted`` on the sorted (cell, index) and (cell, time)
    keys).
    """
    n = time.size
    o = index.order
    sorted_t = time[o]
    counts = np.zeros(n)
    nlev = index.nbase  # the expansion levels cost a few moments per row, not pairs
    tcs = np.broadcast_to(np.asarray(tc, dtype=np.float64), (nlev,))
    for lev in range(nlev):
        ka, kb = int(index.level_offset[lev]), int(index.level_offset[lev + 1])
        if ka == kb:
            continue
        keys = index.cell_key[ka:kb]
        cx, cy = cell_coords(x, y, x0, y0, index.inv_h[lev])
        for ox in (-1, 0, 1):
            for oy in (-1, 0, 1):
                k = (cx + ox) * KEY_STRIDE + (cy + oy)
                pos = np.searchsorted(keys, k)
                found = (pos < keys.size) & (keys[np.minimum(pos, keys.size - 1)] == k)
                c = ka + np.minimum(pos, keys.size - 1)
                cb = index.cell_begin[c].astype(np.int64)
                ce = index.cell_begin[c + 1].astype(np.int64)
                # e: first position with idx >= lo; s: first with t >= t - tc (in [cb, ce))
                e = _segment_search(o, cb, ce, lo)
                s = _segment_search(sorted_t, cb, e, time - tcs[lev])
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
