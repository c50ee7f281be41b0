"""Truncated trigger (issue 7): the measured error is always within the realised bound."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hawkes_cli.data import EventData
from hawkes_cli.engine import make_likelihood
from hawkes_cli.engine.base import Likelihood
from hawkes_cli.engine.grid import (
    GROUP_ROWS_PER_BIN,
    KAPPA_FLOOR,
    LATTICE_STEPS,
    PRESENCE_CELLS,
    block_levels,
    build_index,
    grouping_level,
    lattice_up,
    level_bands,
    level_kappas,
    level_presence,
    row_blocks,
    row_groups,
    source_levels,
    temporal_sums,
    truncated_row_cost,
)
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.model import Params
from hawkes_cli.parallel import partition_rows
from hawkes_cli.vocab import DEFAULT_TOLERANCE

from .conftest import build_backend, make_events

pytestmark = pytest.mark.opencl

AREA = 1150.0

PARAMS = {
    "tiny": Params(mu0=0.4, tau_t=0.01, xi0=0.6, sigma_x=1e-4, sigma_t=0.05),
    "paper": Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.08, sigma_t=6.0),
    "wide": Params(mu0=0.3, tau_t=10.0, xi0=0.7, sigma_x=1.5, sigma_t=30.0),
    "strong": Params(mu0=1e-3, tau_t=3.0, xi0=50.0, sigma_x=0.01, sigma_t=1.0),
    "huge": Params(mu0=0.4, tau_t=5000.0, xi0=0.6, sigma_x=500.0, sigma_t=9000.0),
}


def uniform_events(n: int, seed: int):
    rng = np.random.default_rng(seed)
    t = np.sort(np.floor(rng.uniform(0, 200.0, n)))
    x, y = rng.uniform(-120, -70, n), rng.uniform(25, 48, n)
    d = np.exp(rng.uniform(np.log(0.04), np.log(70000.0), n))
    return t, x, y, d


def city_events(n: int, seed: int):
    """Clustered events (:func:`make_events`) whose density is that of their 1-degree square, as
    a county's is: model 2's cells then mostly hold one density (the kernel's own path for
    them) and some hold several."""
    t, x, y, _ = make_events(n, integer_days=True, seed=seed)
    square = np.floor(x) * 1000.0 + np.floor(y)
    keys, which = np.unique(square, return_inverse=True)
    rng = np.random.default_rng(seed + 1)
    d = np.exp(rng.uniform(np.log(0.04), np.log(70000.0), keys.size))[which]
    return t, x, y, d


def _events(kind: str, n: int, seed: int):
    if kind == "cities":
        return city_events(n, seed)
    if kind == "clustered":
        return make_events(n, integer_days=True, seed=seed)
    if kind == "continuous":
        return make_events(n, integer_days=False, seed=seed)
    return uniform_events(n, seed)


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("kind", ["clustered", "continuous", "uniform", "cities"])
@pytest.mark.parametrize("name", list(PARAMS))
def test_float64_rowwise_bound_and_loglik(kind, name, model):
    """Every row's omitted mass is within omega_n; the log-likelihood within the bound and the
    bound within the tolerance (1e-3 nats), against the float64 reference and the exact OpenCL
    kernel."""
    p = PARAMS[name]
    t, x, y, d = _events(kind, 1500, seed=3)
    ref = Likelihood(ReferenceBackend(t, x, y, d, model=model, area=AREA), t)
    exact = build_backend("opencl", t, x, y, d, model=model, area=AREA, precision="float64")
    # a loose tolerance, so that truncation really omits terms and the bound is exercised
    tr = build_backend(
        "truncated",
        t,
        x,
        y,
        d,
        model=model,
        area=AREA,
        precision="float64",
        tolerance=1e-3,
        kappa=4.0,
    )
    e0 = exact.trigger(p.sigma_x, p.sigma_t)
    e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    assert np.all(omega >= 0)
    # 1e-10 relative: float64 rounding of terms from cell-relative coordinates (see
    # test_rows_split_and_balance); 1.4e-12 was seen with sigma_x = 0.01 ("strong")
    assert np.all(e0 - e <= omega + 1e-10 * e0 + 1e-300)
    assert np.all(e <= e0 * (1 + 1e-10) + 1e-300)

    lik = Likelihood(tr, t)
    ev = lik.evaluate(p)
    truth = ref.loglik(p)
    assert abs(ev.loglik - truth) <= ev.error_bound + 1e-10 * abs(truth)
    assert ev.error_bound <= 1e-3
    assert abs(ev.loglik - Likelihood(exact, t).loglik(p)) <= ev.error_bound + 1e-10 * abs(truth)


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("name", ["tiny", "paper", "wide", "huge"])
def test_float32_within_bound_plus_rounding(name, model):
    p = PARAMS[name]
    t, x, y, d = make_events(2000, integer_days=True, seed=5)
    exact64 = build_backend("opencl", t, x, y, d, model=model, area=AREA, precision="float64")
    tr = build_backend(
        "truncated",
        t,
        x,
        y,
        d,
        model=model,
        area=AREA,
        precision="float32",
        tolerance=1e-3,
        kappa=4.0,
    )
    e0 = exact64.trigger(p.sigma_x, p.sigma_t)
    e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    assert np.all(e0 - e <= omega + 1e-5 * e0 + 1e-300)
    ev = Likelihood(tr, t).evaluate(p)
    truth = Likelihood(exact64, t).loglik(p)
    assert abs(ev.loglik - truth) <= ev.error_bound + 1e-6 * 2000 + 1e-2


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_default_tolerance_is_met_from_the_first_evaluation(model, precision):
    """Through make_likelihood at the default tolerance (nats): the first evaluation (at the
    paper's lengthscales) meets it without tightening (the cut-off is calibrated from a probe),
    and every evaluation, down to tiny and up to huge lengthscales (which may tighten), is
    within its bound of the float64 reference (plus float32 rounding)."""
    t, x, y, d = make_events(3000, integer_days=True, seed=8)
    data = EventData(time=t, x=x, y=y, density=d, source="test")
    fast = make_likelihood(
        data, model=model, area=AREA, precision=precision, tolerance=DEFAULT_TOLERANCE
    )
    exact = make_likelihood(data, model=model, area=AREA, engine="reference")
    assert not fast.backend.calibrated
    for i, p in enumerate([PARAMS["paper"], *PARAMS.values()]):
        ev = fast.evaluate(p)
        if i == 0:
            assert fast.backend.calibrated and fast.tightenings == 0
        truth = exact.loglik(p)
        assert ev.error_bound <= DEFAULT_TOLERANCE
        slack = 1e-10 * abs(truth) if precision == "float64" else 1e-6 * 3000 + 1e-2
        assert abs(ev.loglik - truth) <= ev.error_bound + slack
    assert "truncation" in fast.backend.path or "pair sum" in fast.backend.path
    assert "lattice" in fast.backend.path


def test_huge_lengthscales_take_the_exact_path():
    t, x, y, _ = make_events(1000, integer_days=True, seed=1)
    tr = build_backend("truncated", t, x, y, None, model=1, area=AREA, precision="float64")
    ex = build_backend("opencl", t, x, y, None, model=1, area=AREA, precision="float64")
    e, omega = tr.trigger_bounded(500.0, 9000.0)
    assert "pair sum" in tr.path
    assert np.all(omega == 0)
    np.testing.assert_array_equal(e, ex.trigger(500.0, 9000.0))


def test_tightening_reaches_tolerance():
    """Starting far too loose, the likelihood tightens kappa until the bound holds."""
    t, x, y, d = make_events(1500, integer_days=True, seed=4)
    tr = build_backend(
        "truncated", t, x, y, d, model=2, area=AREA, precision="float64", tolerance=1e-3, kappa=1.0
    )
    lik = Likelihood(tr, t)
    ev = lik.evaluate(PARAMS["paper"])
    assert lik.tightenings >= 1 and tr.kappa > 1.0
    assert ev.error_bound <= 1e-3


@pytest.mark.parametrize("model", [1, 2])
def test_a_tolerance_beyond_the_data_calibrates_to_the_floor(model):
    """A tolerance above n * D_max nats made the first guess of kappa negative; the ladder's
    rungs all clipped to 1 and the calibration divided by their zero spacing (a NaN kappa, and
    a kernel that never finished). Now the cut-off sits at its floor and the bound is finite."""
    t, x, y, d = make_events(800, integer_days=True, seed=8)
    tr = build_backend("truncated", t, x, y, d, model=model, area=AREA, tolerance=1e12)
    ev = Likelihood(tr, t).evaluate(PARAMS["paper"])
    assert tr.kappa == KAPPA_FLOOR
    assert math.isfinite(ev.loglik) and 0 < ev.error_bound <= 1e12


@pytest.mark.parametrize("model", [1, 2])
def test_rows_split_and_balance(model):
    """Rows split over three backends: each row within its bound of the exact sum (both models
    group rows into blocks within a rank's rows, so the exactly summed part may differ from the
    whole backend's, within the bound). The 1e-10 relative slack is float64 rounding: the
    kernels use coordinates relative to a cell corner, so a term exp(-q) with q up to ~60
    differs from the exact kernel's by q times the coordinates' relative rounding (|x| / |dx|
    up to 1e3 times 1e-16)."""
    t, x, y, d = make_events(1234, integer_days=True, seed=2)
    whole = build_backend("truncated", t, x, y, d, model=model, area=AREA, precision="float64")
    exact = build_backend("opencl", t, x, y, d, model=model, area=AREA, precision="float64")
    cost = truncated_row_cost(t, x, y, d, sigma_x=0.1, sigma_t=4.0)
    assert cost.shape == (1234,) and np.all(cost > 0)
    rows = partition_rows(cost, 3)
    parts = [
        build_backend("truncated", t, x, y, d, model=model, area=AREA, precision="float64", rows=r)
        for r in rows
    ]
    e_whole, w_whole = whole.trigger_bounded(0.1, 4.0)
    got = [p.trigger_bounded(0.1, 4.0) for p in parts]
    e_split, w_split = np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])
    e0 = exact.trigger(0.1, 4.0)
    assert np.all(e0 - e_split <= w_split + 1e-10 * e0) and np.all(e_split <= e0 * (1 + 1e-10))
    assert np.all(e0 - e_whole <= w_whole + 1e-10 * e0) and np.all(e_whole <= e0 * (1 + 1e-10))


def test_lattice_up_rounds_up_by_less_than_one_step():
    """At or above the value, below one lattice step above it, lattice points kept, and
    monotone (so nearby lengthscales share one point)."""
    step = 2.0 ** (1.0 / LATTICE_STEPS)
    rng = np.random.default_rng(0)
    values = np.sort(np.exp(rng.uniform(np.log(1e-6), np.log(1e6), 5000)))
    up = np.array([lattice_up(float(v)) for v in values])
    assert np.all(up >= values) and np.all(up < values * step * (1 + 1e-12))
    assert np.all(np.diff(up) >= 0)
    points = [2.0 ** (k / LATTICE_STEPS) for k in range(-320, 321)]
    assert all(lattice_up(v) == v for v in points)
    assert np.unique(up).size < values.size  # neighbours share a point


def test_neighbour_width_is_the_next_lattice_points_within_a_quarter_step():
    """The worker's extra blocks (``draw_index.neighbour_width``) are those of the lattice
    point next to ``sigma_t``'s own, on the side it lies nearer, by hand: the points around
    90 are 2^(104/16) = 90.51 and 2^(105/16) = 94.52."""
    from hawkes_cli.engine.draw_index import BLOCK_WIDTH, neighbour_width

    lo, hi = 2.0 ** (104 / 16), 2.0 ** (105 / 16)
    step = hi / lo
    assert neighbour_width(lo * step**0.1) == BLOCK_WIDTH * lo  # 0.1 steps above lo
    assert neighbour_width(hi * step**-0.1) == pytest.approx(BLOCK_WIDTH * hi * step, rel=1e-15)
    assert neighbour_width(lo * step**0.5) is None  # mid-step: both 0.5 away
    assert neighbour_width(lo * step**0.24) == BLOCK_WIDTH * lo
    assert neighbour_width(lo * step**0.26) is None
    assert lattice_up(hi * step**-0.1) == hi and lattice_up(lo * step**0.1) == hi


def test_neighbour_blocks_are_built_ahead_only_off_the_cpu():
    """On a CPU device (PoCL here) the worker builds the next draw's blocks at the chain's own
    lattice point only; where the device is not the CPU also at ``neighbour_width``'s
    (``DrawIndex.start_ahead``; the worker's builds would take the kernels' cores)."""
    from hawkes_cli.engine.draw_index import BLOCK_WIDTH

    t, x, y, d = make_events(300, integer_days=True, seed=3)
    tr = build_backend("truncated", t, x, y, d, model=1, area=AREA)
    draw = tr._draw
    assert tr.events.device.info.kind == "cpu" and not draw._neighbours

    class Recorder:
        def __init__(self):
            self.calls = []

        def start(self, key, width):
            self.calls.append((key, width))

    lo, hi = 2.0 ** (104 / 16), 2.0 ** (105 / 16)
    sigma_t = lo * (hi / lo) ** 0.1  # 0.1 steps above lo: its neighbour is lo
    draw.ahead = Recorder()
    draw.start_ahead(0.05, sigma_t, 17.0)
    assert [w for _, w in draw.ahead.calls] == [BLOCK_WIDTH * hi]
    draw._neighbours = True  # as on a GPU
    draw.ahead = Recorder()
    draw.start_ahead(0.05, sigma_t, 17.0)
    assert [w for _, w in draw.ahead.calls] == [BLOCK_WIDTH * hi, BLOCK_WIDTH * lo]
    assert draw.ahead.calls[0][0] == draw.ahead.calls[1][0] == (lattice_up(0.05), lattice_up(17.0))


@pytest.mark.parametrize("model", [1, 2])
def test_lengthscales_between_lattice_points(model, monkeypatch):
    """The grid index and row blocks are built for the lengthscales rounded up to the lattice.
    Just above a lattice point (cells and reach nearly one step larger than needed) and just
    below the next one, every row stays within its bound of the exact sum (float64); two
    proposals within one step build one index; and a pass gives the same bits whatever was
    evaluated before (the truncated likelihood is a function of the parameters)."""
    import hawkes_cli.engine.ahead as ahead  # the one home of the index build

    built = []
    monkeypatch.setattr(
        ahead, "build_index", lambda *a, **k: built.append(a[5]) or build_index(*a, **k)
    )
    t, x, y, d = make_events(1500, integer_days=True, seed=9)
    exact = build_backend("opencl", t, x, y, d, model=model, area=AREA, precision="float64")

    def fresh():
        return build_backend(
            "truncated", t, x, y, d, model=model, area=AREA, precision="float64", kappa=6.0
        )

    tr = fresh()
    point_x, point_t = 2.0 ** (-58 / LATTICE_STEPS), 2.0 ** (42 / LATTICE_STEPS)  # 0.081, 6.2
    step = 2.0 ** (1.0 / LATTICE_STEPS)
    passes = {}
    for fx, ft in [(1.0001, 1.0001), (step * 0.9999, step * 0.9999), (1.0001, step * 0.9999)]:
        sx, st = point_x * fx, point_t * ft
        e0 = exact.trigger(sx, st)
        e, omega = tr.trigger_bounded(sx, st)
        assert np.all(e0 - e <= omega + 1e-10 * e0) and np.all(e <= e0 * (1 + 1e-10))
        assert np.any(omega > 0)  # truncated, not the exact path
        passes[(sx, st)] = e.copy()
    assert built == [point_x * step]  # one index for the three proposals
    first = next(iter(passes))
    np.testing.assert_array_equal(tr.trigger_bounded(*first)[0], passes[first])
    np.testing.assert_array_equal(fresh().trigger_bounded(*first)[0], passes[first])


def test_next_draw_built_ahead_at_every_lattice_point_its_passes_reach(monkeypatch):
    """With the next locations announced (``prepare_locations``), the worker builds their grid
    index and row blocks at the lattice point of each pass of the current draw: here the
    first pass's and the one a proposal across a lattice boundary reaches (another index,
    and another block width). After the draw is taken, passes at both points build nothing on
    the main thread and give the bits of a backend built at those locations from scratch."""
    import threading

    import hawkes_cli.engine.ahead as ahead

    threads = []  # the thread of each grid index built (ahead.py is its one home)
    real = ahead.build_index
    monkeypatch.setattr(
        ahead,
        "build_index",
        lambda *a, **k: threads.append(threading.current_thread().name) or real(*a, **k),
    )
    t, x, y, d = make_events(1500, integer_days=True, seed=9)
    rng = np.random.default_rng(4)
    x2, y2 = x + rng.normal(0, 0.05, x.size), y + rng.normal(0, 0.05, y.size)

    def fresh(xs, ys):
        return build_backend(
            "truncated", t, xs, ys, d, model=2, area=AREA, precision="float64", kappa=6.0
        )

    step = 2.0 ** (1.0 / LATTICE_STEPS)
    below = (2.0 ** (-58 / LATTICE_STEPS) * 0.9999, 2.0 ** (42 / LATTICE_STEPS) * 0.9999)
    above = (below[0] * step, below[1] * step)  # the next lattice point of both lengthscales
    tr = fresh(x, y)
    tr.prepare_locations(x2, y2, lambda: None)
    tr.trigger_bounded(*below)
    tr.trigger_bounded(*above)
    tr.trigger_bounded(*below)  # built already: no third build
    tr.set_locations(x2, y2)
    threads.clear()
    for p in (above, below):
        np.testing.assert_array_equal(
            tr.trigger_bounded(*p)[0], fresh(x2, y2).trigger_bounded(*p)[0]
        )
    assert threads.count("MainThread") == 2  # the two fresh backends', none of tr's


def test_last_draws_indexes_are_freed_on_the_worker_after_its_next_build():
    """A new draw retires the last draw's indexes and blocks (tens of 1M-long arrays): freed
    at once when the draw was not built ahead; else kept until the worker's next build and
    freed there, after it, while the main thread waits for the device."""
    import threading

    from hawkes_cli.engine import ahead

    freed: list[str] = []

    class Tracked:
        def __del__(self):
            freed.append(threading.current_thread().name)

    t, x, y, d = make_events(800, integer_days=True, seed=3)
    tr = build_backend("truncated", t, x, y, d, model=1, area=AREA, precision="float64")
    sx, st = 0.3, 5.0
    tr._draw.ahead.retire(Tracked())
    assert freed == ["MainThread"]  # nothing built ahead: freed here and now
    rng = np.random.default_rng(2)
    draws = [(x + rng.normal(0, 0.05, x.size), y + rng.normal(0, 0.05, y.size)) for _ in range(2)]
    tr.prepare_locations(*draws[0], lambda: None)
    tr.trigger_bounded(sx, st)
    tr.set_locations(*draws[0])  # built ahead
    freed.clear()
    tr._draw.ahead.retire(Tracked())
    assert freed == []  # kept for the worker
    tr.prepare_locations(*draws[1], lambda: None)
    tr.trigger_bounded(sx, st)  # starts the next build, then the freeing, on the worker
    ahead.on_worker(lambda: None).result()  # everything queued there is done
    assert len(freed) == 1 and freed[0].startswith("hawkes-ahead")


def _model2_index(n: int, seed: int, kappa: float = 16.0):
    t, x, y, d = make_events(n, integer_days=True, seed=seed)
    level, r_unit = source_levels(d, n)
    nlevels = int(level.max()) + 1
    kl = level_kappas(kappa, level_bands(d, level, nlevels)[1])
    return t, x, y, d, level, build_index(x, y, level, nlevels, r_unit, 0.08, kl)


@pytest.mark.parametrize("grouped", [False, True])
def test_row_blocks_cover_each_row_once_within_one_cell(grouped):
    """Blocks hold each row once, in time order, all of one cell: the rows' own level's cell
    (model 1's single level), or with model 2's grouping the cell of the grouping level for
    rows of finer levels."""
    width = 8.0
    if grouped:
        t, x, y, _, level, index = _model2_index(3000, seed=6)
        g = grouping_level(index, x, y, level, float(t[-1] - t[0]), width)
        assert g > 0  # rows of finer levels are grouped
        cell_of = row_groups(index, x, y, level, g)
        assert np.all(cell_of[level < g] >> 44 == g) and np.all(cell_of >> 44 >= level)
        blocks = row_blocks(index, t, 500, 2500, width, cell_of)
    else:
        t, x, y, _ = make_events(3000, integer_days=True, seed=6)
        index = build_index(x, y, np.zeros(t.size, dtype=np.int64), 1, 1.0, 0.08, 16.0)
        blocks = row_blocks(index, t, 500, 2500, width)
        cell_of = np.empty(t.size, dtype=np.int64)
        cell_of[index.order] = np.repeat(np.arange(index.cell_key.size), np.diff(index.cell_begin))
    assert blocks.shape[1] == 16
    real = blocks[blocks >= 0]
    np.testing.assert_array_equal(np.sort(real), np.arange(500, 2500))  # each row once
    for blk in blocks:
        rows = blk[blk >= 0]
        assert rows.size >= 1 and blk[0] >= 0  # padding only at the end
        assert np.all(blk[blk < 0] == ~blk[0])  # padding copies the first row
        assert np.unique(cell_of[rows]).size == 1  # one cell
        assert np.all(np.diff(t[rows]) >= 0)  # time order
        assert t[rows[-1]] - t[rows[0]] <= width  # sixteen consecutive rows, or one bin
    if grouped:  # fewer, fuller blocks than the rows' own cells give (1697 vs 1988 here)
        assert blocks.shape[0] < 0.9 * row_blocks(index, t, 500, 2500, width).shape[0]


def test_grouping_level_is_not_the_coarsest_when_sparse_levels_hold_few_rows():
    """Real-county data: the sparse levels hold a handful of events, so the previous rule (a
    level's own sources per cell) found no level and grouped every dense row by the coarsest
    level's continent-sized cells (4-5 times slower). The rule counts the rows being grouped:
    here it must pick a level between the densest and the coarsest, and the one it picks must
    hold GROUP_ROWS_PER_BIN rows of the levels at or below it per occupied cell and bin (hand
    count with np.unique), the next finer one not."""
    rng = np.random.default_rng(3)
    n_dense, n_sparse = 6000, 6
    centres = rng.uniform([-120, 30], [-75, 45], (40, 2))
    city = rng.integers(0, 40, n_dense)
    x = np.concatenate(
        [centres[city, 0] + rng.normal(0, 0.1, n_dense), rng.uniform(-120, -75, n_sparse)]
    )
    y = np.concatenate(
        [centres[city, 1] + rng.normal(0, 0.1, n_dense), rng.uniform(30, 45, n_sparse)]
    )
    d = np.concatenate([rng.uniform(500, 5000, n_dense), rng.uniform(0.05, 0.2, n_sparse)])
    level, r_unit = source_levels(d, d.size)
    nlevels = int(level.max()) + 1
    index = build_index(
        x, y, level, nlevels, r_unit, 0.08, level_kappas(20.0, level_bands(d, level, nlevels)[1])
    )
    span, width = 1000.0, 160.0
    g = grouping_level(index, x, y, level, span, width)
    used = np.flatnonzero(np.diff(index.level_offset) > 0)
    assert used[0] < g < used[-1]

    def per_cell(lev: int) -> float:
        mine = level <= lev
        cx = np.floor((x[mine] - x.min()) * index.inv_h[lev]).astype(np.int64)
        cy = np.floor((y[mine] - y.min()) * index.inv_h[lev]).astype(np.int64)
        return mine.sum() / np.unique(np.column_stack([cx, cy]), axis=0).shape[0] / (span / width)

    assert per_cell(g) >= GROUP_ROWS_PER_BIN
    assert all(per_cell(lev) < GROUP_ROWS_PER_BIN for lev in used[used < g])


def test_block_levels_keep_every_level_within_reach():
    """A level is kept for a block whenever one of its sources lies within the reach of one of
    the block's rows (checked pair by pair), and dropped where none lies within the reach plus
    two cells of the presence grid (so a mask of all ones fails)."""
    t, x, y, _, level, index = _model2_index(3000, seed=7)
    nlevels = index.h.size
    blocks = row_blocks(index, t, 0, t.size, 8.0)
    reach = 1.5 * index.h  # the kernel's reach is 1.5 R_l <= 1.5 h_l
    near = block_levels(level_presence(x, y, level, nlevels), x, y, blocks, reach)
    cell = max(np.ptp(x), np.ptp(y)) / PRESENCE_CELLS
    kept = dropped = 0
    for b, blk in enumerate(blocks):
        rows = np.where(blk >= 0, blk, ~blk)
        for lev in range(nlevels):
            src = level == lev
            if not src.any():
                continue
            dx = np.abs(x[rows][:, None] - x[src][None, :])
            dy = np.abs(y[rows][:, None] - y[src][None, :])
            gap = np.maximum(dx, dy).min()
            bit = bool((int(near[b]) >> lev) & 1)
            if gap <= reach[lev]:
                assert bit, (b, lev)
                kept += 1
            elif gap > reach[lev] + 2 * cell:
                assert not bit, (b, lev)
                dropped += 1
    assert kept > 100 and dropped > 1000


def test_temporal_sums_match_direct():
    rng = np.random.default_rng(0)
    t = np.sort(np.floor(rng.uniform(0, 5000, 400)))
    w = rng.uniform(0.1, 3, 400)
    lo = np.searchsorted(t, t, side="left")
    for sigma_t in (1000.0, 3.0, 0.7):  # exact prefixes, then the chunked form
        s = temporal_sums(t, w, lo, sigma_t)
        direct = np.array(
            [np.sum(w[:k] * np.exp(-(t[i] - t[:k]) / sigma_t)) for i, k in enumerate(lo)]
        )
        np.testing.assert_allclose(s, direct, rtol=1e-9, atol=1e-300)


def test_make_likelihood_validates_tolerance():
    from hawkes_cli.errors import UsageError

    t, x, y, d = make_events(50, integer_days=True, seed=1)
    data = EventData(time=t, x=x, y=y, density=d, source="test")
    for bad in (-1.0, math.nan, math.inf, 1e-6):  # 1e-6: an old relative value
        with pytest.raises(UsageError, match="tolerance"):
            make_likelihood(data, model=1, area=AREA, tolerance=bad)


def test_chains_agree_with_exact_engine(tmp_path):
    """Same seed, exact pair sum vs the default tolerance: posterior means agree within Monte
    Carlo error (in practice the chains mostly coincide: the log-likelihoods differ by less than
    the tolerance, in nats, where both sit at the same state)."""
    import yaml

    from hawkes_cli.config import load_config
    from hawkes_cli.data import save_events
    from hawkes_cli.model import PARAM_NAMES
    from hawkes_cli.rundir import RunDir
    from hawkes_cli.runner import run_chain
    from hawkes_cli.simulate import simulate
    from hawkes_cli.storage import read_chain

    truth = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0)
    data = simulate(truth, model=1, n_background=500, t_end=200.0, bounds=(0, 20, 0, 20), seed=9)
    events = tmp_path / "events.h5"
    save_events(data, events)
    out = {}
    for tol in (0.0, DEFAULT_TOLERANCE):
        cfg = {
            "data": {"events": str(events)},
            "model": {"kind": 1},
            "sampler": {"kind": "univariate", "iterations": 400, "warmup": 100, "seed": 3,
                        "initial": truth.as_dict()},
            "chains": {"count": 1},
            "engine": {"backend": "opencl", "precision": "float64", "tolerance": tol},
            "output": {"run_dir": str(tmp_path / f"run-{tol}"), "commit_every": 100},
        }  # fmt: skip
        path = tmp_path / f"c-{tol}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        config = load_config(path)
        run_chain(config, 0)
        out[tol] = read_chain(RunDir(config.output.run_dir).chain_path(0)).draws
    for name in PARAM_NAMES:
        a, b = out[0.0][name][100:], out[DEFAULT_TOLERANCE][name][100:]
        mc_error = np.sqrt(np.var(a) / (a.size / 20) + np.var(b) / (b.size / 20))  # ESS ~ n/20
        assert abs(a.mean() - b.mean()) <= 3 * mc_error + 1e-12, name
    # where both chains sit at the same state, the log-likelihoods agree to the tolerance
    same = np.all([out[0.0][k] == out[DEFAULT_TOLERANCE][k] for k in PARAM_NAMES], axis=0)
    lla, llb = out[0.0]["loglik"][same], out[DEFAULT_TOLERANCE]["loglik"][same]
    assert same.sum() > 0
    assert np.all(np.abs(lla - llb) <= DEFAULT_TOLERANCE + 1e-9)


@pytest.mark.parametrize("model", [1, 2])
def test_only_the_kernels_of_the_model_are_created(model):
    """Both models run row blocks (model 2's kernel weighs and scales terms by density); the
    program holds no per-row truncated kernel any more (truncated_model1/2 are gone)."""
    t, x, y, d = make_events(200, integer_days=True, seed=2)
    tr = build_backend("truncated", t, x, y, d, model=model, area=AREA)
    names = set(tr.events.program(truncated=True).kernel_names.split(";"))
    assert not {"truncated_model1", "truncated_model2"} & names
    assert {"truncated_blocks", "truncated_blocks2", "cell_prefix", "cell_prefix16"} <= names
    want = "truncated_blocks" if model == 1 else "truncated_blocks2"
    assert tr.block_pass.k_blocks.handle.function_name == want


@pytest.mark.parametrize("model", [1, 2])
def test_differences_across_3_sd_agree_with_the_exact_engine(model):
    """What MCMC sees: log-likelihood differences between the centre and points 3 posterior sd
    away (sd from the curvature of the exact log-likelihood in log space, at most 0.1), with the
    cut-off calibrated at the centre and then fixed as after warm-up, agree with the exact
    engine within 0.01 nats (the issue's requirement; float64, so no rounding on either side) -- and
    always within the two bounds. A crude cut-off (kappa 3) must break the 0.01 nats, or this
    check could not fail (differences are robust: at this size even a bound of several nats
    leaves them within a few 1e-3)."""
    t, x, y, d = make_events(3000, integer_days=True, seed=8)
    data = EventData(time=t, x=x, y=y, density=d, source="test")
    p0 = PARAMS["paper"]
    exact = make_likelihood(data, model=model, area=AREA, precision="float64")
    names = ("sigma_x", "sigma_t", "xi0")
    points = []
    for name in names:
        h, v0 = 0.02, getattr(p0, name)
        f = [exact.loglik(replace(p0, **{name: v0 * math.exp(k * h)})) for k in (-1, 0, 1)]
        # p0 is not a mode: where the curvature is flat or positive, 0.1 in log space
        sd = min(1.0 / math.sqrt(max(-(f[0] - 2 * f[1] + f[2]) / h**2, 1e-6)), 0.1)
        points += [replace(p0, **{name: v0 * math.exp(k * 3 * sd)}) for k in (-1, 1)]

    def worst(kappa: float | None) -> tuple[float, float]:
        fast = make_likelihood(
            data, model=model, area=AREA, precision="float64", tolerance=DEFAULT_TOLERANCE
        )
        c = fast.evaluate(p0)  # calibrates
        fast.adapt_cutoff = False  # fixed, as after warm-up
        if kappa is not None:
            fast.backend.kappa = kappa
            fast.clear_cache()
            c = fast.evaluate(p0)
        e0 = exact.loglik(p0)
        errs, slack = [], []
        for q in points:
            ev = fast.evaluate(q)
            errs.append(abs((ev.loglik - c.loglik) - (exact.loglik(q) - e0)))
            slack.append(ev.error_bound + c.error_bound + 1e-9)
        assert np.all(np.array(errs) <= np.array(slack))
        return max(errs), c.error_bound

    err, bound = worst(None)
    assert bound <= DEFAULT_TOLERANCE and err <= 0.01
    loose, _ = worst(3.0)
    assert loose > 0.01


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("kind", ["clustered", "cities"])
def test_rows_with_no_older_source_have_no_bound(kind, model):
    """A row older than every other event omits nothing, so its bound is 0: a row far from a
    cell bounds only the cell's sources older than itself, even when a later row of its block
    starts the exact window after it."""
    p = PARAMS["paper"]
    t, x, y, d = _events(kind, 3000, seed=5)
    tr = build_backend(
        "truncated", t, x, y, d, model=model, area=AREA, precision="float64", kappa=4.0
    )
    e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    first = t == t[0]
    assert first.sum() > 1
    assert np.all(e[first] == 0.0)
    assert np.all(omega[first] == 0.0)


def dense_city_events(n: int, seed: int):
    """Two thirds of the events in one city (sd 0.05 degrees, one density, 0.5 per square
    mile), the rest spread over 5 degrees with densities of 0.04 to 70,000: the city's boxes
    hold far more than EXPAND_MIN sources, so its sources older than a row block are summed
    by their Hermite moments (the built-in data of ``hawkes-run devices --check``)."""
    from hawkes_cli.engine.selfcheck import check_events

    return check_events(n, seed)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("model", [1, 2])
def test_expansion_boxes_within_the_bound(model, precision, monkeypatch):
    """Sources summed by their Hermite series (expansion boxes): every row's error is within
    omega_n and E~ stays below the exact E, at the kernel's order and at order 3, whose
    series error (about 1e-3 of a box's weight) only the series' own bound can cover: a bound
    that left it out, or a series summed wrongly, fails here."""
    from hawkes_cli import kernels

    p = Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.05, sigma_t=10.0)
    t, x, y, d = dense_city_events(3000, seed=11)
    e0 = build_backend("opencl", t, x, y, d, model=model, area=AREA, precision="float64").trigger(
        p.sigma_x, p.sigma_t
    )
    # float32: the pair terms' working-precision rounding (test_float32_within_bound_...)
    rounding = 1e-10 if precision == "float64" else 1e-5
    out = {}
    for order in (kernels.HERMITE_ORDER, 3):
        monkeypatch.setattr(kernels, "HERMITE_ORDER", order)
        tr = build_backend(
            "truncated", t, x, y, d, model=model, area=AREA, precision=precision, kappa=12.0
        )
        e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
        index = tr._draw.index(p.sigma_x, tr.kappa).index
        assert t.size - index.expanded[1] > 1000  # most of the city is in expansion boxes
        assert np.all(omega >= 0)
        assert np.all(e0 - e <= omega + rounding * e0 + 1e-300)
        assert np.all(e <= e0 * (1 + rounding) + 1e-300)
        out[order] = e, omega
    (e12, om12), (e3, om3) = out.values()
    # the same cut-off: only the series differ, and order 3's error is really there
    assert np.max(np.abs(e3 - e12) / np.maximum(e0, 1e-300)) > 1e-4
    # and its bound grew by at least as much as its error did
    assert np.sum(om3 - om12) >= np.sum(np.abs(e3 - e12))


@pytest.mark.parametrize("model", [1, 2])
def test_recalibrate_brings_a_ratcheted_cutoff_down_within_the_tolerance(model):
    """The fast start tightens the cut-off wherever its search passes, and the cut-off only
    grows there; :meth:`Likelihood.recalibrate` at the mode chooses it afresh: lower than a
    ratcheted one, the same as a fresh likelihood's first calibration at that point, and the
    realised bound within the tolerance."""
    p = PARAMS["paper"]
    t, x, y, d = make_events(3000, integer_days=True, seed=5)
    data = EventData(time=t, x=x, y=y, density=d, source="test")
    kw = {"model": model, "area": AREA, "engine": "opencl", "tolerance": 0.05}
    fresh = make_likelihood(data, trigger="truncated", **kw)
    fresh.evaluate(p)
    want = fresh.backend.kappa
    lik = make_likelihood(data, trigger="truncated", **kw)
    lik.evaluate(p)
    lik.backend.kappa = want + 6.0  # as if tightened far from here
    lik.clear_cache()
    lik.recalibrate(p)
    assert lik.backend.kappa == pytest.approx(want)
    assert lik.evaluate(p).error_bound <= 0.05
    lik.adapt_cutoff = False  # after warm-up the cut-off stays
    lik.backend.kappa = want + 6.0
    lik.recalibrate(p)
    assert lik.backend.kappa == want + 6.0
