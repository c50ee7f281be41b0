"""Tests of hawkes_cli.simulate: density grid and branching simulation."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.data import load_events, save_events
from hawkes_cli.errors import UsageError
from hawkes_cli.model import Params
from hawkes_cli.simulate import DensityGrid, simulate, simulate_with_parents

P = Params(mu0=0.5, tau_t=10.0, xi0=0.5, sigma_x=0.2, sigma_t=1.0)


# ---------------------------------------------------------------------------- grid


def test_grid_lookup_and_polygons() -> None:
    values = np.arange(1.0, 7.0).reshape(2, 3)  # ny=2, nx=3
    g = DensityGrid(values=values, bounds=(0.0, 3.0, 0.0, 2.0))
    assert (g.nx, g.ny) == (3, 2)
    x = np.array([0.5, 2.5, 3.0, 1.2, 0.0])
    y = np.array([0.5, 1.5, 2.0, 0.1, 1.0])
    density, fips = g.lookup(x, y)
    # cell (iy, ix): (0,0) (1,2) (1,2) edge (0,1) (1,0) -> k = iy*3 + ix
    assert fips.tolist() == ["00000", "00005", "00005", "00001", "00003"]
    assert density.tolist() == [1.0, 6.0, 6.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="outside"):
        g.lookup(np.array([3.5]), np.array([1.0]))
    polys = g.polygons()
    assert [f for f, _ in polys] == [f"{k:05d}" for k in range(6)]
    assert dict(polys)["00005"] == (2.0, 3.0, 1.0, 2.0)
    assert math.isclose(sum((b[1] - b[0]) * (b[3] - b[2]) for _, b in polys), 6.0)
    centres_x = np.array([(b[0] + b[1]) / 2 for _, b in polys])
    centres_y = np.array([(b[2] + b[3]) / 2 for _, b in polys])
    assert g.lookup(centres_x, centres_y)[1].tolist() == [f for f, _ in polys]


def test_grid_log_uniform() -> None:
    a = DensityGrid.log_uniform((0.0, 1.0, 0.0, 1.0), 40, 30, 2.0, 2000.0, seed=3)
    b = DensityGrid.log_uniform((0.0, 1.0, 0.0, 1.0), 40, 30, 2.0, 2000.0, seed=3)
    c = DensityGrid.log_uniform((0.0, 1.0, 0.0, 1.0), 40, 30, 2.0, 2000.0, seed=4)
    assert a.values.shape == (30, 40)
    np.testing.assert_array_equal(a.values, b.values)
    assert not np.array_equal(a.values, c.values)
    assert a.values.min() >= 2.0 and a.values.max() <= 2000.0
    logs = np.log10(a.values)  # uniform on [log10 2, log10 2000]: mean 1.8, sd 3/sqrt(12)
    assert abs(logs.mean() - (math.log10(2) + 1.5)) < 4 * (3 / math.sqrt(12)) / math.sqrt(1200)
    with pytest.raises(UsageError):
        DensityGrid.log_uniform((0.0, 1.0, 0.0, 1.0), 2, 2, 0.0, 10.0)
    with pytest.raises(UsageError):
        DensityGrid(values=np.array([[1.0, -1.0]]))


# ---------------------------------------------------------------------------- basics


def test_reproducible_sorted_and_in_bounds() -> None:
    kw = {"model": 1, "n_background": 500, "t_end": 50.0, "bounds": (-1.0, 2.0, 3.0, 5.0)}
    a = simulate(P, seed=7, **kw)
    b = simulate(P, seed=7, **kw)
    c = simulate(P, seed=8, **kw)
    for col in ("time", "x", "y"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    assert a.n != c.n or not np.array_equal(a.time, c.time)
    assert np.all(np.diff(a.time) >= 0)
    assert a.time.min() >= 0 and a.time.max() < 50.0
    assert a.x.min() >= -1.0 and a.x.max() <= 2.0 and a.y.min() >= 3.0 and a.y.max() <= 5.0
    assert a.density is None and a.fips is None
    at = a.attrs
    assert at["true_params"] == P.as_dict()
    assert at["model"] == 1 and at["area"] == pytest.approx(6.0) and at["seed"] == 7
    assert at["n_background"] == 500 and at["n_background"] + at["n_offspring"] == a.n
    assert at["time_unit"] == "day" and at["crs"] == "synthetic" and at["t_end"] == 50.0


def test_integer_days_floors_the_same_process() -> None:
    kw = {"model": 1, "n_background": 300, "t_end": 20.5, "seed": 1}
    cont = simulate(P, **kw)
    days = simulate(P, integer_days=True, **kw)
    np.testing.assert_array_equal(days.time, np.floor(cont.time))
    assert np.all(days.time == np.round(days.time))
    assert np.unique(days.time).size < days.n  # many ties, as intended
    assert days.time.max() <= 20.0
    assert days.attrs["integer_days"] is True


def test_simulated_events_round_trip_through_hdf5(tmp_path: Path) -> None:
    grid = DensityGrid.log_uniform((0.0, 10.0, 0.0, 10.0), 3, 3, 1.0, 100.0, seed=0)
    d = simulate(P, model=2, n_background=200, t_end=30.0, grid=grid, seed=2)
    save_events(d, tmp_path / "sim.h5")
    back = load_events(tmp_path / "sim.h5", need_density=True)
    np.testing.assert_array_equal(back.x, d.x)
    np.testing.assert_array_equal(back.fips, d.fips)
    assert back.attrs["true_params"] == P.as_dict()
    assert back.attrs["grid_nx"] == 3 and back.attrs["bounds"] == [0.0, 10.0, 0.0, 10.0]


def test_grid_gives_density_and_fips_for_model_1() -> None:
    grid = DensityGrid(values=np.array([[10.0, 20.0]]), bounds=(0.0, 2.0, 0.0, 1.0))
    d = simulate(P, model=1, n_background=100, t_end=10.0, grid=grid)
    left = d.x < 1.0
    assert np.all(d.density[left] == 10.0) and np.all(d.density[~left] == 20.0)
    assert set(d.fips[left]) <= {"00000"} and set(d.fips[~left]) <= {"00001"}


def test_argument_errors(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(UsageError, match="model 2 needs a density grid"):
        simulate(P, model=2, n_background=10, t_end=1.0)
    with pytest.raises(UsageError, match="model must be 1 or 2"):
        simulate(P, model=3, n_background=10, t_end=1.0)
    grid = DensityGrid(values=np.ones((2, 2)), bounds=(0.0, 1.0, 0.0, 1.0))
    with pytest.raises(UsageError, match="differ from the grid's bounds"):
        simulate(P, model=2, n_background=10, t_end=1.0, grid=grid, bounds=(0, 2, 0, 1))
    with pytest.raises(UsageError, match="t_end"):
        simulate(P, model=1, n_background=10, t_end=0.0)
    # an events file holds times up to 1e15: a simulation must not write what it cannot read
    with pytest.raises(UsageError, match=r"t_end \(--t-end\) must be .* <= 1e\+15"):
        simulate(P, model=1, n_background=10, t_end=1e300)
    with pytest.raises(UsageError, match=r"n_background \(--n-background\)"):
        simulate(P, model=1, n_background=0, t_end=1.0)
    hot = Params(mu0=0.1, tau_t=1.0, xi0=1.5, sigma_x=1.0, sigma_t=0.1)
    with (
        caplog.at_level(logging.WARNING, logger="hawkes_cli.simulate"),
        pytest.raises(UsageError, match=r"max_events=5000.*explosive"),
    ):
        simulate(hot, model=1, n_background=100, t_end=100.0, max_events=5000)
    assert any("explosive" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------- statistics


def test_total_count_matches_branching_theory() -> None:
    # Poisson(xi0) offspring: cluster size has mean 1/(1-xi0), variance xi0/(1-xi0)^3 (Borel).
    n_bg, xi0 = 20_000, 0.5
    p = Params(mu0=1 - xi0, tau_t=10.0, xi0=xi0, sigma_x=0.1, sigma_t=0.1)
    d = simulate(p, model=1, n_background=n_bg, t_end=1000.0, bounds=(0, 1000, 0, 1000), seed=11)
    discarded = d.attrs["n_discarded_time"] + d.attrs["n_discarded_space"]
    assert discarded < 0.002 * d.n  # the window and rectangle are large
    mean = n_bg / (1 - xi0)
    sd = math.sqrt(n_bg * xi0 / (1 - xi0) ** 3)
    assert abs(d.n - mean) < 4 * sd, (d.n, mean, sd)


def test_parent_child_delays_and_displacements_model_1() -> None:
    p = Params(mu0=0.7, tau_t=10.0, xi0=0.3, sigma_x=0.5, sigma_t=2.0)
    d, parent = simulate_with_parents(
        p, model=1, n_background=20_000, t_end=1e5, bounds=(0, 1e4, 0, 1e4), seed=5
    )
    bg = parent < 0
    assert int(bg.sum()) == 20_000 and d.attrs["n_offspring"] == int((~bg).sum())
    child = np.flatnonzero(~bg)
    par = parent[child]
    assert np.all(par < child)
    delay = d.time[child] - d.time[par]
    assert np.all(delay >= 0)
    m = child.size
    assert abs(delay.mean() - p.sigma_t) < 4 * p.sigma_t / math.sqrt(m)  # Exp: sd = mean
    disp = np.concatenate([d.x[child] - d.x[par], d.y[child] - d.y[par]])
    assert abs(disp.mean()) < 4 * p.sigma_x / math.sqrt(2 * m)
    assert abs(disp.std() / p.sigma_x - 1) < 4 / math.sqrt(4 * m)  # sd of sample sd ~ s/sqrt(2n)
    children_per_event = np.bincount(par, minlength=d.n)
    assert abs(children_per_event.mean() - p.xi0) < 4 * math.sqrt(p.xi0 / d.n)


def test_model_2_spreads_less_in_dense_cells() -> None:
    # left cell density 1 -> sd sigma_x; right cell density 100 -> sd sigma_x / 10
    grid = DensityGrid(values=np.array([[1.0, 100.0]]), bounds=(0.0, 2000.0, 0.0, 1000.0))
    p = Params(mu0=0.6, tau_t=10.0, xi0=0.4, sigma_x=1.0, sigma_t=1.0)
    d, parent = simulate_with_parents(p, model=2, n_background=20_000, t_end=1e4, grid=grid, seed=9)
    child = np.flatnonzero(parent >= 0)
    par = parent[child]
    disp = np.hypot(d.x[child] - d.x[par], d.y[child] - d.y[par])
    dense = d.density[par] == 100.0
    assert dense.sum() > 1000 and (~dense).sum() > 1000
    # 2-D isotropic normal with sd s: E|v|^2 = 2 s^2
    s_sparse = math.sqrt(np.mean(disp[~dense] ** 2) / 2)
    s_dense = math.sqrt(np.mean(disp[dense] ** 2) / 2)
    assert s_sparse == pytest.approx(1.0, rel=0.05)
    assert s_dense == pytest.approx(0.1, rel=0.05)
