"""Tests of hawkes_cli.gof: branching probabilities, time rescaling, county residuals, maps.

Data are simulated with known parents (:func:`hawkes_cli.simulate.simulate_with_parents`) in a
10 x 10 square cut into 4 x 4 grid "counties"; the run directory holds a real config and a chain
file (:class:`~hawkes_cli.storage.ChainWriter`) whose draws scatter around the fitted values;
the likelihood is the float64 reference engine, so no OpenCL is needed.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.special import ndtr

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.engine import make_likelihood
from hawkes_cli.engine.points import pixel_mean
from hawkes_cli.gof import GofOptions, run_gof
from hawkes_cli.gof.branching import BranchingAccumulator, p_triggered
from hawkes_cli.gof.counties import Locator, county_counts
from hawkes_cli.gof.residuals import ground_compensator, ks_summary, rescale
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.simulate import DensityGrid, simulate_with_parents
from hawkes_cli.storage import DRAW_FIELDS, ChainMeta, ChainWriter
from hawkes_cli.vocab import PARAM_NAMES

TRUTH = Params(mu0=0.5, tau_t=20.0, xi0=0.5, sigma_x=0.2, sigma_t=3.0)
GRID = DensityGrid.log_uniform((0.0, 10.0, 0.0, 10.0), nx=4, ny=4, seed=1)


def simulated(seed: int = 3, integer_days: bool = False, n_background: int = 700):
    return simulate_with_parents(TRUTH, model=1, n_background=n_background, t_end=150.0,
                                 seed=seed, grid=GRID, integer_days=integer_days)  # fmt: skip


def profile_fit(data) -> Params:
    """The truth with ``mu0`` and ``xi0`` at their profile maximum (B and E cached: one pass
    each): a fit whose compensator equals N, as at any maximum in the two weights."""
    from scipy.optimize import minimize

    lik = make_likelihood(data, model=1, area=data.attrs["area"], engine="reference")

    def f(w: np.ndarray) -> float:
        return -lik.loglik(replace(TRUTH, mu0=math.exp(w[0]), xi0=math.exp(w[1])))

    res = minimize(f, np.log([TRUTH.mu0, TRUTH.xi0]), method="Nelder-Mead",
                   options={"xatol": 1e-7, "fatol": 1e-9})  # fmt: skip
    return replace(TRUTH, mu0=math.exp(res.x[0]), xi0=math.exp(res.x[1]))


def grid_locator():
    import shapely

    keys = np.array([k for k, _ in GRID.polygons()])
    geoms = np.array([shapely.box(b[0], b[2], b[1], b[3]) for _, b in GRID.polygons()])
    return keys, geoms


# ------------------------------------------------------------------ units


def test_p_triggered_formula_by_hand():
    B = np.array([1.0, 0.0, 2.0, 0.0])
    E = np.array([1.0, 3.0, 0.0, 0.0])
    p = Params(mu0=2.0, tau_t=1.0, xi0=0.5, sigma_x=1.0, sigma_t=1.0)
    # 0.5 / (2 + 0.5), all trigger, all background, nothing (0 by convention)
    np.testing.assert_allclose(p_triggered(B, E, p), [0.2, 1.0, 0.0, 0.0])


def test_accumulator_mean_sd_equal_numpy():
    rng = np.random.default_rng(0)
    draws = rng.uniform(size=(7, 50))
    idx = rng.integers(-1, 3, 50)
    acc = BranchingAccumulator(50, {"g": (np.arange(3), idx)})
    for d in draws:
        acc.add(d)
    np.testing.assert_allclose(acc.mean, draws.mean(0), rtol=1e-12)
    np.testing.assert_allclose(acc.sd, draws.std(0, ddof=1), rtol=1e-10)
    per_draw = np.array([[d[idx == g].mean() for g in range(3)] for d in draws])
    np.testing.assert_allclose(acc.shares("g").mean, per_draw.mean(0), rtol=1e-12)
    np.testing.assert_allclose(acc.shares("g").sd, per_draw.std(0, ddof=1), rtol=1e-10)


def test_components_equal_reference_pair_sums():
    data, _ = simulated(n_background=150)
    lik = make_likelihood(data, model=1, area=data.attrs["area"], engine="reference")
    B, E = lik.components(TRUTH)
    # hand pair sums for a few rows (DESIGN section 2)
    rho = 1.0 / data.attrs["area"]
    for n in (5, data.n // 2, data.n - 1):
        dt = data.time[n] - data.time
        b = rho * np.sum(np.where(dt != 0, np.exp(-0.5 * (dt / TRUTH.tau_t) ** 2), 0.0))
        b /= math.sqrt(2 * math.pi) * TRUTH.tau_t
        r2 = (data.x[n] - data.x) ** 2 + (data.y[n] - data.y) ** 2
        s2 = TRUTH.sigma_x**2
        e = np.sum(np.where(dt > 0, np.exp(-dt / TRUTH.sigma_t - r2 / (2 * s2)), 0.0))
        e /= 2 * math.pi * s2 * TRUTH.sigma_t
        assert B[n] == pytest.approx(b, rel=1e-12)
        assert E[n] == pytest.approx(e, rel=1e-12)


def test_compensator_at_T_is_the_likelihoods():
    data, _ = simulated(n_background=150)
    p = TRUTH
    t, T = data.time, data.time[-1]
    direct = p.mu0 * np.sum(ndtr((T - t) / p.tau_t) - ndtr(-t / p.tau_t)) + p.xi0 * np.sum(
        -np.expm1(-(T - t) / p.sigma_t)
    )
    assert ground_compensator(np.array([T]), t, p)[0] == pytest.approx(direct, rel=1e-12)
    # the FFT path agrees with the exact one to its stated error (h / (2 sqrt(2 pi) tau_t) per
    # event, about 1e-5 of N here)
    import hawkes_cli.gof.residuals as res

    u = np.linspace(0, T, 50)
    exact = ground_compensator(u, t, p)
    old = res.EXACT_DISTINCT
    res.EXACT_DISTINCT = 0
    try:
        fft = ground_compensator(u, t, p)
    finally:
        res.EXACT_DISTINCT = old
    np.testing.assert_allclose(fft, exact, atol=1e-4 * data.n)


def test_pixel_mean_matches_fine_quadrature():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(2, 8, 40), rng.uniform(2, 8, 40)
    s = np.exp(rng.uniform(np.log(0.3), np.log(1.0), 40))
    w = rng.uniform(0, 1, 40)
    xe, ye = np.linspace(0, 10, 41), np.linspace(0, 10, 31)
    got = pixel_mean(x, y, s, w, xe, ye, cut=8.0)
    # midpoint rule on a 10x finer grid, averaged back to the pixels: O(h^2/s^2) ~ 1e-3
    fx = (np.linspace(0, 10, 401)[1:] + np.linspace(0, 10, 401)[:-1]) / 2
    fy = (np.linspace(0, 10, 301)[1:] + np.linspace(0, 10, 301)[:-1]) / 2
    X, Y = np.meshgrid(fx, fy)
    f = np.zeros_like(X)
    for i in range(40):
        f += (
            w[i]
            * np.exp(-((X - x[i]) ** 2 + (Y - y[i]) ** 2) / (2 * s[i] ** 2))
            / (2 * np.pi * s[i] ** 2)
        )
    ref = f.reshape(30, 10, 40, 10).mean(axis=(1, 3))
    np.testing.assert_allclose(got, ref, atol=2e-3 * ref.max())


# ------------------------------------------------------------------ the statistics


def test_p_triggered_separates_and_is_calibrated():
    from scipy.stats import mannwhitneyu

    data, parent = simulated(seed=6)
    fit = profile_fit(data)
    lik = make_likelihood(data, model=1, area=data.attrs["area"], engine="reference")
    B, E = lik.components(fit)
    p = p_triggered(B, E, fit)
    child = parent >= 0
    auc = mannwhitneyu(p[child], p[~child]).statistic / (child.sum() * (~child).sum())
    assert auc > 0.8, auc
    assert abs(p.mean() - child.mean()) < 0.03  # overall: sd of the share ~0.014
    # calibration in quintile bins of p: the share truly triggered is within 4 binomial sds
    # of the bin's mean p (the model's background is a smoother, not the simulator's
    # constant rate, so the fit is close but not exact)
    bins = np.quantile(p, np.linspace(0, 1, 6))
    which = np.clip(np.searchsorted(bins, p, side="right") - 1, 0, 4)
    for b in range(5):
        sel = which == b
        q = p[sel].mean()
        sd = math.sqrt(max(q * (1 - q), 0.01) / sel.sum())
        assert abs(child[sel].mean() - q) < 4 * sd, (b, child[sel].mean(), q)


@pytest.mark.parametrize("integer_days", [False, True])
def test_ks_accepts_the_fit_and_rejects_a_misspecified_one(integer_days):
    data, _ = simulated(seed=3, integer_days=integer_days)
    fit = profile_fit(data)
    good = ks_summary(rescale(data.time, fit, np.random.default_rng(0)))
    # Lambda(T) = N at the fit; on days the window runs one day past the last one
    total = data.n * (1 + integer_days / data.time[-1])
    assert good["rescaled_total"] == pytest.approx(total, rel=0.01)
    assert (good["lattice_spacing"] == 1.0) is integer_days
    assert good["ks_pvalue"] > 0.05, good
    # trigger 30 times too slow (mean delay 90 days of 150): clustering in time smeared out
    bad = ks_summary(rescale(data.time, replace(fit, sigma_t=90.0), np.random.default_rng(0)))
    assert bad["ks_pvalue"] < 1e-4, bad
    # no triggering at all (a Poisson-like process): gaps far from exponential
    none = ks_summary(rescale(data.time, replace(fit, xi0=1e-6, mu0=1.0, tau_t=1e4),
                              np.random.default_rng(0)))  # fmt: skip
    assert none["ks_pvalue"] < 1e-6, none


def test_expected_county_counts_sum_to_the_compensator():
    data, _ = simulated(seed=2)
    keys, geoms = grid_locator()
    import shapely

    loc = Locator(geoms)
    cc = county_counts(data.time, data.x, data.y, None, TRUTH, model=1, area=data.attrs["area"],
                       keys=keys, polygon_area=shapely.area(geoms), locator=loc,
                       rng=np.random.default_rng(0), samples=8)  # fmt: skip
    T = data.time[-1]
    comp = ground_compensator(np.array([T]), data.time, TRUTH)[0]
    assert cc.compensator == pytest.approx(comp, rel=1e-12)
    # exact bookkeeping: counties + outside == compensator
    assert cc.expected.sum() + cc.outside_expected == pytest.approx(comp, rel=1e-12)
    # the grid covers the study square: background all inside; trigger mass leaving the square
    # is the kernels' edge loss, a few percent at sigma_x = 0.2 in a 10 x 10 square
    assert cc.expected_background.sum() == pytest.approx(
        TRUTH.mu0 * np.sum(ndtr((T - data.time) / TRUTH.tau_t) - ndtr(-data.time / TRUTH.tau_t)),
        rel=1e-12,
    )
    assert 0 <= cc.outside_expected < 0.05 * comp
    assert cc.observed.sum() == data.n and cc.outside_observed == 0
    # against an independent per-county value: trigger mass of sources in the box by the exact
    # normal CDF product for the 4x4 boxes
    w = TRUTH.xi0 * -np.expm1(-(T - data.time) / TRUTH.sigma_t)
    exact = np.zeros(len(keys))
    for k, (_, (x0, x1, y0, y1)) in enumerate(GRID.polygons()):
        px = ndtr((x1 - data.x) / TRUTH.sigma_x) - ndtr((x0 - data.x) / TRUTH.sigma_x)
        py = ndtr((y1 - data.y) / TRUTH.sigma_x) - ndtr((y0 - data.y) / TRUTH.sigma_x)
        exact[k] = np.sum(w * px * py)
    # Monte Carlo sd per county ~ sqrt(sum w^2 q (1-q) / 8) < 2 events; 5 sd
    np.testing.assert_allclose(cc.expected_trigger, exact, atol=10.0)


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory: simulated events (on days), grid county polygons, a reference-engine
    config and one chain of 60 draws scattered (1%) around the profile fit."""
    from hawkes_cli.counties import write_polygons
    from hawkes_cli.geo import PolygonLayer

    tmp = tmp_path_factory.mktemp("gof")
    data, _ = simulated(seed=3, integer_days=True)
    save_events(data, tmp / "ev.h5")
    keys, geoms = grid_locator()
    with warnings.catch_warnings():  # synthetic coordinates have no reference system
        warnings.simplefilter("ignore", UserWarning)
        write_polygons(PolygonLayer(keys=keys, geoms=geoms, fields={}, crs=None, path=""),
                       tmp / "grid.gpkg")  # fmt: skip
    return write_run(tmp, data, tmp / "grid.gpkg"), data


def write_run(tmp: Path, data, counties: Path | None) -> Path:
    """A run directory in ``tmp`` on the events ``tmp/ev.h5`` (``data``): a reference-engine
    config and one chain of 60 draws scattered (1%) around the profile fit."""
    cfg = {
        "data": {"events": str(tmp / "ev.h5"), "counties": None if counties is None else
                 str(counties)},
        "model": {"kind": 1},
        "sampler": {"iterations": 60, "warmup": 0, "seed": 1},
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(tmp / "run")},
    }  # fmt: skip
    (tmp / "c.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp / "c.yaml")
    RunDir.of(config).write_config(config)
    fit = profile_fit(data)
    rng = np.random.default_rng(7)
    meta = ChainMeta(chain_id=0, seed=1, model=1, n_events=data.n, iterations=60, warmup=0,
                     thin=1, config_yaml=config.to_yaml(), config_sha256=config.sha256,
                     kernel_sha256="", param_names=PARAM_NAMES,
                     fields=DRAW_FIELDS)  # fmt: skip
    writer, _ = ChainWriter.open(RunDir.of(config).chain_path(0), meta)
    with writer:
        for i in range(60):
            row = {n: v * math.exp(0.01 * rng.standard_normal()) for n, v in fit.as_dict().items()}
            row.update(iteration=i, loglik=0.0, logprior=0.0, accepted=1, warmup=0, coordinate=0,
                       scale=0.1, pair_passes=1, n_proposals=1, n_accepted=1, jump=-1)  # fmt: skip
            writer.append(row)
        writer.commit({"iteration": 60, "finished": True})
    return config.output.run_dir


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_run_gof_writes_every_file(run_dir, tmp_path, monkeypatch):
    import h5py

    import hawkes_cli.gof.steps as steps

    monkeypatch.setattr(steps, "HDF5_FROM", 0)  # events.h5 too, as for large N
    run, data = run_dir
    out = tmp_path / "gof"
    summary = run_gof(run, out, GofOptions(draws=5, date="75"))
    on_disk = json.loads((out / "gof.json").read_text())
    assert on_disk["ks_statistic"] == pytest.approx(summary["ks_statistic"])
    assert 0 <= on_disk["ks_pvalue"] <= 1 and on_disk["draws_branching"] == 5
    assert on_disk["ks_pvalue"] > 0.01  # the fit is right (see the KS test above)
    events = read_csv(out / "events.csv")
    assert len(events) == data.n
    np.testing.assert_allclose([float(r["time"]) for r in events], data.time)
    assert [r["fips"] for r in events] == data.fips.tolist()
    p = np.array([float(r["p_triggered"]) for r in events])
    assert np.all((p >= 0) & (p <= 1)) and 0.2 < p.mean() < 0.8
    with h5py.File(out / "events.h5") as f:
        np.testing.assert_allclose(f["p_triggered"][:], p, rtol=1e-5)  # CSV keeps 6 digits
        np.testing.assert_array_equal(f["time"][:], data.time)
    counties = read_csv(out / "counties.csv")
    assert len(counties) == 16
    assert sum(int(r["observed"]) for r in counties) == data.n
    expected = sum(float(r["expected"]) for r in counties)
    c = on_disk["counties"]
    assert expected + c["outside_expected"] == pytest.approx(on_disk["compensator"], rel=1e-4)
    assert_gpkg_holds_the_csvs(out)
    lengths = read_csv(out / "lengthscales.csv")  # synthetic coordinates: coordinate units
    assert [r["fips"] for r in lengths] == [r["fips"] for r in counties]
    sigma_x = on_disk["parameters"]["sigma_x"]  # model 1: sigma_x itself, in every cell
    assert [float(r["coord_units_mean"]) for r in lengths] == pytest.approx([sigma_x] * 16,
                                                                            rel=1e-4)  # fmt: skip
    assert on_disk["counties"]["lengthscale_unit"] == "coord units"
    weekly = read_csv(out / "weekly.csv")
    assert sum(int(r["events"]) for r in weekly) == data.n
    for name in ("qq.png", "counts.png", "map_cases.png", "map_pearson.png",
                 "map_triggered.png", "map_lengthscale.png", "map_intensity.png"):  # fmt: skip
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, name
        assert white_margins(out / name) < 0.03, name  # cropped to what is drawn


def assert_gpkg_holds_the_csvs(out: Path) -> None:
    """``counties.gpkg`` read back with pyogrio (what QGIS opens): its polygons carry every
    column of ``counties.csv`` and ``lengthscales.csv`` with the same values."""
    import pyogrio

    meta, _, geometry, table = pyogrio.raw.read(out / "counties.gpkg")
    columns = dict(zip(meta["fields"], table, strict=True))
    counties = read_csv(out / "counties.csv")
    lengths = read_csv(out / "lengthscales.csv")
    assert columns["GEOID"].tolist() == [r["fips"] for r in counties]
    assert len(geometry) == len(counties) and all(g is not None for g in geometry)
    for rows in (counties, lengths):
        for name in rows[0]:
            if name in ("fips", "latitude", "density"):
                continue
            csv_values = np.array([float(r[name]) if r[name] else np.nan for r in rows])
            np.testing.assert_allclose(columns[name], csv_values, rtol=1e-3, err_msg=name)
    for name in ("pearson", "share_triggered", "share_triggered_sd", "expected"):
        assert name in columns


def white_margins(path: Path) -> float:
    """The largest share of the picture's width or height that is blank border."""
    from matplotlib import image

    rgb = image.imread(str(path))[..., :3]
    ink = np.any(rgb < 0.99, axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    h, w = ink.shape
    return max(rows[0] / h, (h - 1 - rows[-1]) / h, cols[0] / w, (w - 1 - cols[-1]) / w)


def test_cli_gof_and_errors(run_dir, tmp_path):
    run, _ = run_dir
    code = "from hawkes_cli.cli import diagnose_main; diagnose_main()"
    out = tmp_path / "g"
    r = subprocess.run([sys.executable, "-c", code, str(run), "--gof", str(out), "--gof-draws",
                        "2"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr  # 1: convergence verdicts of a fake chain
    assert "goodness of fit: KS D" in r.stderr and (out / "gof.json").is_file()
    r = subprocess.run([sys.executable, "-c", code, str(run), "--date", "3"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr


def test_lengthscales_in_miles_for_every_county(tmp_path):
    import shapely

    from hawkes_cli.counties import load_county_table
    from hawkes_cli.diagnostics import lengthscale_miles
    from hawkes_cli.geo import PolygonLayer
    from hawkes_cli.gof.lengthscales import county_lengthscales, write_lengthscales

    keys = np.array(["36061", "06037"])
    geoms = np.array(
        [shapely.box(-74.05, 40.68, -73.9, 40.88), shapely.box(-118.9, 33.7, -117.6, 34.8)]
    )
    layer = PolygonLayer(keys=keys, geoms=geoms, fields={}, crs="EPSG:4269", path="")
    sigma = np.array([0.04, 0.05, 0.06])
    ls = county_lengthscales(layer, 2, sigma, None, np.zeros(0, dtype=np.int64), lonlat=True)
    path = write_lengthscales(tmp_path, ls)
    rows = read_csv(path)
    table = load_county_table()
    for row, key, geom in zip(rows, keys, geoms, strict=True):
        density = float(table.density[table.lookup(np.array([key]))[0]])
        lat = shapely.centroid(geom).y
        want = lengthscale_miles(sigma.mean(), 2, lat, density)
        assert row["fips"] == key
        assert float(row["miles_mean"]) == pytest.approx(float(want), rel=1e-4)


def test_date_option_in_time_units_or_calendar():
    from hawkes_cli.data import EventData
    from hawkes_cli.errors import UsageError
    from hawkes_cli.gof.read import date_time

    one = np.zeros(1)
    dated = EventData(time=one, x=one, y=one, attrs={"origin_date": "2020-03-01"})
    assert date_time("12.5", dated) == 12.5
    assert date_time("2020-04-01", dated) == 31.0  # March has 31 days
    plain = EventData(time=one, x=one, y=one)
    with pytest.raises(UsageError, match="origin_date"):
        date_time("2020-04-01", plain)
    with pytest.raises(UsageError, match="neither a number nor an ISO date"):
        date_time("April", dated)


_RANKS_SCRIPT = """
import sys
import numpy as np
from hawkes_cli.engine import make_likelihood
from hawkes_cli.parallel import world_comm
from tests.test_gof import TRUTH, simulated

data, _ = simulated(n_background=150)
comm = world_comm(force_mpi=True)
lik = make_likelihood(data, model=1, area=data.attrs["area"], engine="reference", comm=comm)
B, E = lik.components(TRUTH)
if comm.rank == 0:
    np.savez(sys.argv[1], B=B, E=E)
"""


@pytest.mark.mpi
def test_components_gathered_over_three_ranks_equal_serial(tmp_path):
    from tests.conftest import clean_env

    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip(f"no mpiexec next to {sys.executable} (pip install mpich mpi4py)")
    script = tmp_path / "ranks.py"
    script.write_text(_RANKS_SCRIPT)
    out = tmp_path / "be.npz"
    r = subprocess.run([str(mpiexec), "-n", "3", sys.executable, str(script), str(out)],
                       capture_output=True, text=True, timeout=120, env=clean_env(),
                       cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert r.returncode == 0, r.stderr
    data, _ = simulated(n_background=150)
    lik = make_likelihood(data, model=1, area=data.attrs["area"], engine="reference")
    B, E = lik.components(TRUTH)
    got = np.load(out)
    # same rows in the same order; the reference's row blocks start elsewhere on each rank, so
    # numpy's pairwise sums may round differently in the last bit
    np.testing.assert_allclose(got["B"], B, rtol=1e-14, atol=0)
    np.testing.assert_allclose(got["E"], E, rtol=1e-14, atol=0)


def _polygons_file(path: Path, geoms) -> Path:
    from hawkes_cli.counties import write_polygons
    from hawkes_cli.geo import PolygonLayer

    keys, _ = grid_locator()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        write_polygons(PolygonLayer(keys=keys, geoms=np.asarray(geoms), fields={}, crs=None,
                                    path=""), path)  # fmt: skip
    return path


@pytest.mark.parametrize("how", ["elsewhere", "too large"])
def test_polygons_that_do_not_describe_the_events_are_skipped(run_dir, tmp_path, caplog, how):
    """Polygons holding few of the events (coordinates of another system), or covering more
    than the study area: no county files or maps, never a negative expected count; the
    events' own outputs are still written."""
    import shapely

    run, _ = run_dir
    _, geoms = grid_locator()
    if how == "elsewhere":
        moved = shapely.transform(geoms, lambda xy: xy + 1000.0)
        why = "only 0.0% of the events lie inside the 16 polygons"
    else:  # 3x the study square around it: every event inside, 9x the area
        moved = shapely.transform(geoms, lambda xy: 3.0 * xy - 10.0)
        why = "more than the study area"
    polygons = _polygons_file(tmp_path / f"{how.replace(' ', '_')}.gpkg", moved)
    out = tmp_path / "gof"
    summary = run_gof(run, out, GofOptions(draws=2, counties=polygons))
    assert why in caplog.text and "county residuals and county maps skipped" in caplog.text
    assert "counties" not in summary
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.startswith("map_") or n == "counties.csv"], names
    assert {"events.csv", "weekly.csv", "qq.png", "gof.json"} <= set(names)


@pytest.fixture(scope="module")
def rectangle_run(tmp_path_factory):
    """A run on events simulated in the rectangle [0, 10] x [0, 5] without a grid (as
    ``hawkes-prep simulate`` without ``--grid`` or ``--geography us``): no county polygons."""
    tmp = tmp_path_factory.mktemp("rect")
    data, _ = simulate_with_parents(TRUTH, model=1, n_background=300, t_end=150.0, seed=5,
                                    bounds=(0.0, 10.0, 0.0, 5.0))  # fmt: skip
    assert "grid_nx" not in data.attrs and data.attrs["crs"] == "synthetic"
    save_events(data, tmp / "ev.h5")
    return write_run(tmp, data, None), data


def test_intensity_map_on_the_rectangle_without_polygons(rectangle_run, tmp_path, caplog,
                                                         monkeypatch):  # fmt: skip
    """No polygons describe the events: the county outputs and maps are skipped with a
    WARNING, but ``--date`` still draws ``map_intensity.png``, on the study rectangle with axes
    in coordinate units, from pixel means that agree with the formula by hand."""
    from scipy.special import ndtr

    from hawkes_cli.gof import mapping
    from hawkes_cli.gof.maps import intensity_grid, study_rectangle
    from hawkes_cli.gof.read import read_run

    run, data = rectangle_run
    drawn = []
    real_save = mapping.save
    monkeypatch.setattr(
        mapping, "save", lambda fig, path: drawn.append(fig) or real_save(fig, path)
    )
    out = tmp_path / "gof"
    summary = run_gof(run, out, GofOptions(draws=2, date="75"))
    assert "no county polygons" in caplog.text
    assert "county residuals and county maps skipped" in caplog.text
    names = sorted(p.name for p in out.iterdir())
    assert "map_intensity.png" in names and "map_intensity.png" in summary["files"]
    assert not [n for n in names if n.startswith("map_") and n != "map_intensity.png"], names
    assert "counties.csv" not in names and "intensity" in summary["seconds"]
    png = (out / "map_intensity.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    from matplotlib import image

    rgb = image.imread(str(out / "map_intensity.png"))[..., :3]
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 50  # a colour scale, not a blank
    assert white_margins(out / "map_intensity.png") < 0.03
    ax = drawn[-1].axes[0]  # the map (the second axes is its colour bar)
    assert ax.get_xlabel() == "x (coordinate units)" and ax.get_ylabel() == "y (coordinate units)"
    (a, b), (c, d) = ax.get_xlim(), ax.get_ylim()
    assert a < 0 < 10 < b < 10.2 and c < 0 < 5 < d < 5.2  # the rectangle plus a margin
    assert study_rectangle(data) == (0.0, 10.0, 0.0, 5.0)

    # the gridded intensity at two pixels, by hand (DESIGN section 2)
    rec = read_run(Path(run), out, GofOptions(draws=2, date="75"))
    p, at = rec.posterior.mean, 75.0
    xe, ye = np.array([0.0, 2.5, 5.0, 7.5, 10.0]), np.array([0.0, 2.5, 5.0])
    got = intensity_grid(rec, at, xe, ye)
    dt = at - data.time
    bg = (
        p.mu0
        / data.attrs["area"]
        * np.sum(np.where(dt != 0, np.exp(-0.5 * (dt / p.tau_t) ** 2), 0.0))
        / (math.sqrt(2 * math.pi) * p.tau_t)
    )
    src = dt > 0
    w = p.xi0 * np.exp(-dt[src] / p.sigma_t) / p.sigma_t
    for iy, ix in ((0, 1), (1, 3)):
        x0, x1, y0, y1 = xe[ix], xe[ix + 1], ye[iy], ye[iy + 1]
        s, xs, ys = p.sigma_x, data.x[src], data.y[src]
        mass = (ndtr((x1 - xs) / s) - ndtr((x0 - xs) / s)) * (
            ndtr((y1 - ys) / s) - ndtr((y0 - ys) / s)
        )
        want = bg + np.sum(w * mass) / ((x1 - x0) * (y1 - y0))
        assert got[iy, ix] == pytest.approx(want, rel=1e-6)  # kernels cut at 5 sd
    # a tiny pixel around an event: the likelihood's lambda_n = mu0 B_n + xi0 E_n there
    lik = make_likelihood(data, model=1, area=data.attrs["area"], engine="reference")
    B, E = lik.components(p)
    n = int(np.searchsorted(data.time, at))
    h = 1e-4
    tiny = intensity_grid(rec, float(data.time[n]), data.x[n] + np.array([-h, h]),
                          data.y[n] + np.array([-h, h]))  # fmt: skip
    assert tiny[0, 0] == pytest.approx(p.mu0 * B[n] + p.xi0 * E[n], rel=1e-5)
    # lon/lat data no polygons describe: degrees on the axes, events per km^2
    from hawkes_cli.gof.maps import rectangle_map

    lonlat = replace(rec, out_dir=tmp_path, data=replace(data, attrs={**data.attrs,
                     "crs": "lonlat"}))  # fmt: skip
    rectangle_map(lonlat)
    ax, bar = drawn[-1].axes[:2]
    assert ax.get_xlabel() == "longitude (degrees)" and "per km²" in bar.get_ylabel()


def test_maps_without_pyproj_use_a_plain_projection(monkeypatch, caplog):
    """A core install (no pyproj) still draws lon/lat maps, in an equirectangular projection
    true to scale at 38 N, and says so."""
    import shapely

    from hawkes_cli.gof import mapping

    monkeypatch.setitem(sys.modules, "pyproj", None)  # import pyproj -> ImportError
    squares = np.array([shapely.box(-100.0, 38.0, -99.0, 39.0), shapely.box(-90, 30, -89, 31)])
    base = mapping.MapBase(np.array(["20001", "22001"]), squares, True, None)
    assert "pyproj is not installed" in caplog.text
    x, _ = base.transformer.transform(np.array([-100.0, -99.0]), np.array([38.0, 38.0]))
    km_per_degree_at_38 = 111.195 * math.cos(math.radians(38.0))
    assert (x[1] - x[0]) / 1000 == pytest.approx(km_per_degree_at_38, rel=1e-9)
    assert base.bounds[2] > base.bounds[0] and base.bounds[3] > base.bounds[1]


def test_census_polygons_that_cannot_be_read_skip_the_county_outputs(run_dir, tmp_path, caplog,
                                                                     monkeypatch):  # fmt: skip
    """A core install (no pyogrio, no plotly-geo) on lon/lat data: the county outputs are
    skipped with a WARNING, the rest of --gof is written; polygons the user named must be
    readable (an error)."""
    import hawkes_cli.counties as counties_mod
    from hawkes_cli.errors import EventsError
    from hawkes_cli.gof.read import county_polygons

    def missing(path=None, **_):
        raise EventsError("reading polygon files needs pyogrio (pip install pyogrio)")

    monkeypatch.setattr(counties_mod, "read_polygon_layer", missing)
    run, data = run_dir
    cfg = load_config(Path(run) / "config.yaml")
    real = {k: v for k, v in data.attrs.items() if not k.startswith("grid_")}  # no synthetic grid
    lonlat = replace(data, attrs={**real, "crs": "lonlat"})
    no_polygons = replace(cfg, data=replace(cfg.data, counties=None))
    out = county_polygons(GofOptions(), no_polygons, lonlat, 100.0)
    assert out is None and "cannot be read" in caplog.text
    with pytest.raises(EventsError, match="needs pyogrio"):
        county_polygons(GofOptions(), cfg, lonlat, 100.0)


# ------------------------------------------------------------------ figures fit for a paper


def test_qq_points_are_exponential_quantiles_with_order_statistic_bands():
    """Theoretical quantiles ``-log(1 - (i - 1/2)/n)``, the sorted gaps, and the band of the
    smallest and largest of n Exp(1) gaps in closed form: ``-log(1 - U_(1))`` is Exp(n) and
    ``U_(n)`` has cdf ``u^n``."""
    from hawkes_cli.gof.figures import qq_points

    gaps = np.array([0.7, 0.1, 2.5, 0.3, 1.2, 0.05, 0.9, 4.0, 0.2, 0.6])
    n = gaps.size
    qq = qq_points(gaps, points=1000)
    assert qq.rank.tolist() == list(range(1, n + 1))  # few gaps: every one
    i = np.arange(1, n + 1)
    np.testing.assert_allclose(qq.theoretical, -np.log(1 - (i - 0.5) / n), rtol=1e-14)
    np.testing.assert_array_equal(qq.empirical, np.sort(gaps))
    assert qq.lower[0] == pytest.approx(-math.log(0.975) / n, rel=1e-9)
    assert qq.upper[0] == pytest.approx(-math.log(0.025) / n, rel=1e-9)
    assert qq.lower[-1] == pytest.approx(-math.log(1 - 0.025 ** (1 / n)), rel=1e-9)
    assert qq.upper[-1] == pytest.approx(-math.log(1 - 0.975 ** (1 / n)), rel=1e-9)
    assert np.all(qq.lower < qq.theoretical) and np.all(qq.theoretical < qq.upper)


def test_qq_points_thinned_at_a_million_events_and_the_band_holds_the_truth():
    from hawkes_cli.gof.figures import QQ_POINTS, qq_points

    gaps = np.random.default_rng(5).exponential(size=1_000_000)
    qq = qq_points(gaps)
    assert qq.n == 1_000_000 and qq.rank[0] == 1 and qq.rank[-1] == qq.n
    assert 100 < qq.rank.size <= QQ_POINTS + 2  # points apart, not a thick line
    assert np.all(np.diff(qq.theoretical) > 0)
    spacing = np.diff(qq.theoretical)  # even along the axis, but for the last few ranks
    assert np.median(spacing) < 1.5 * qq.theoretical[-1] / QQ_POINTS
    np.testing.assert_array_equal(qq.empirical, np.sort(gaps)[qq.rank - 1])


def test_qq_band_covers_each_order_statistic_95_percent_of_the_time():
    """Pointwise: over replicates of n = 20 Exp(1) gaps, each sorted gap lies in its band in
    95% of them (4000 replicates: within 0.95 +- 0.015)."""
    from hawkes_cli.gof.figures import qq_points

    rng = np.random.default_rng(11)
    band = qq_points(rng.exponential(size=20), points=1000)
    reps = np.sort(rng.exponential(size=(4000, 20)), axis=1)
    covered = ((band.lower <= reps) & (reps <= band.upper)).mean(axis=0)
    assert np.all(np.abs(covered - 0.95) < 0.015), covered


def test_counts_cells_say_what_a_cell_is():
    from hawkes_cli.gof.figures import cell_label

    t = np.repeat(np.arange(10.0), 3)
    r = rescale(t, TRUTH, np.random.default_rng(0))
    assert r.lattice == 1.0 and r.cell_width == 1.0
    assert cell_label(r.cell_width, "day") == "day"
    assert cell_label(7.0, "days") == "7 days" and cell_label(1.0, "week") == "week"
    distinct = rescale(np.sort(np.random.default_rng(1).uniform(0, 5000, 50)), TRUTH,
                       np.random.default_rng(0))  # fmt: skip
    assert distinct.cell_width == np.diff(distinct.cell_times)[0] == 3.0  # ~2000 cells at most


@pytest.mark.parametrize("scale", ["counts", "diverging", "linear", "log"])
def test_colour_norms_cover_the_values(scale):
    """No value saturates: the colour scale spans every value drawn (a diverging one
    symmetric about 0), as for the Pearson residuals of the 1M run (-24 .. 18.8)."""
    from hawkes_cli.gof.mapping import color_norm

    values = {"counts": [0, 1, 7, 30_000, np.nan], "diverging": [-24.0, -1.0, 0.3, 18.8],
              "linear": [0.02, 0.5, 0.97], "log": [0.0011, 0.03, 0.9]}[scale]  # fmt: skip
    norm = color_norm(np.array(values, dtype=float), scale)
    signed = scale in ("diverging", "linear")
    drawn = np.array([v for v in values if np.isfinite(v) and (v > 0 or signed)])
    assert norm.vmin <= drawn.min() and norm.vmax >= drawn.max()
    if scale == "diverging":
        assert norm.vmin == -norm.vmax == -24.0
    if scale == "counts":
        assert norm.vmin == 1.0


def test_log_colour_bars_have_readable_ticks():
    from hawkes_cli.gof.mapping import color_norm, colorbar_ticks

    for lo, hi in ((0.9, 1.6), (0.001, 0.8), (0.00087, 0.86), (1.0, 30_000.0), (1e-6, 0.02)):
        ticks = colorbar_ticks(color_norm(np.array([lo, hi]), "log"), "log")
        assert len(ticks) >= 4 and lo <= min(ticks) and max(ticks) <= hi, (lo, hi, ticks)
    ticks = colorbar_ticks(color_norm(np.array([-24.0, 18.8]), "diverging"), "diverging")
    assert ticks[0] == -ticks[-1] and 0.0 in ticks and max(ticks) <= 24.0


def _map(lonlat: bool = False):
    import shapely

    from hawkes_cli.gof.mapping import MapBase

    keys, geoms = grid_locator()
    if lonlat:
        geoms = shapely.transform(geoms, lambda xy: xy * [1.0, 0.5] + [-100.0, 35.0])
        keys = np.char.add("20", np.char.ljust(keys, 3).astype("<U3"))
    return MapBase(keys, geoms, lonlat, None), geoms


@pytest.mark.parametrize("lonlat", [False, True])
def test_map_axes_span_the_polygons_and_grey_has_a_legend(lonlat):
    import shapely

    from hawkes_cli.gof.mapping import MARGIN

    base, geoms = _map(lonlat)
    values = np.arange(16, dtype=float)  # 0: no cases, grey on a log scale
    _, ax, _ = base.choropleth_figure(values, "t", label="cases", cmap="YlOrRd",
                                        scale="counts", missing="no cases")  # fmt: skip
    x0, y0, x1, y1 = base.bounds
    pad = 1.5 * MARGIN * max(x1 - x0, y1 - y0)
    (a, b), (c, d) = ax.get_xlim(), ax.get_ylim()
    assert x0 - pad <= a <= x0 and x1 <= b <= x1 + pad
    assert y0 - pad <= c <= y0 and y1 <= d <= y1 + pad
    if not lonlat:
        assert (x0, y0, x1, y1) == tuple(shapely.total_bounds(geoms))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["no cases (1)"]
    _, ax2, _ = base.choropleth_figure(values + 1, "t", label="cases", cmap="YlOrRd",
                                          scale="counts", missing="no cases")  # fmt: skip
    assert ax2.get_legend() is None  # nothing grey, no legend


def test_intensity_raster_is_clipped_to_the_polygons_and_per_km2(tmp_path):
    """Pixels off the polygons are blank; a square degree at latitude 60 is half of one at
    the equator, 111.195^2 km^2."""
    from types import SimpleNamespace

    import shapely

    from hawkes_cli.gof.counties import Locator
    from hawkes_cli.gof.mapping import MapBase
    from hawkes_cli.gof.maps import intensity_title, per_km2, pixel_grid, time_step

    keys = np.array(["00000", "00001"])
    geoms = np.array([shapely.box(0, 0, 4, 10), shapely.box(6, 0, 10, 10)])  # a gap between
    base = MapBase(keys, geoms, False, None)
    run = SimpleNamespace(polygons=SimpleNamespace(layer=SimpleNamespace(geoms=geoms),
                                                   locator=Locator(geoms)))  # fmt: skip
    grid = pixel_grid(run, base)
    cx = 0.5 * (grid.x_edges[:-1] + grid.x_edges[1:])
    in_gap = (cx > 4) & (cx < 6)
    assert not grid.inside[:, in_gap].any() and grid.inside[:, (cx < 4) | (cx > 6)].all()
    assert per_km2(np.array([1.0]), np.array([60.0]))[0] == pytest.approx(2 / 111.195**2)
    assert intensity_title("540", 540.0, time_step("day")) == "Conditional intensity on day 540"
    assert intensity_title("2021-06-24", 540.0, "day") == (
        "Conditional intensity on 2021-06-24 (day 540)"
    )


def test_synthetic_grid_gives_the_county_outputs(run_dir):
    """Simulated data whose config names no polygons (``counties: null``, the synthetic grid)
    get their county outputs on the grid's cells, keyed as the events' fips."""
    from hawkes_cli.gof.read import GRID, county_polygons

    run, data = run_dir
    cfg = load_config(Path(run) / "config.yaml")
    no_polygons = replace(cfg, data=replace(cfg.data, counties=None))
    polys = county_polygons(GofOptions(), no_polygons, data, float(data.attrs["area"]))
    assert polys is not None and polys.layer.path == GRID
    keys, geoms = grid_locator()
    assert polys.layer.keys.tolist() == keys.tolist()
    assert np.all(polys.layer.keys[polys.event_polygon] == data.fips)
    np.testing.assert_allclose(polys.areas, [g.area for g in geoms])


def test_lengthscales_in_coordinate_units_off_lon_lat():
    """Model 2 on the synthetic grid: sigma_x / sqrt(density of the cell's events), no miles."""
    import shapely

    from hawkes_cli.geo import PolygonLayer
    from hawkes_cli.gof.lengthscales import COORD_UNITS, county_lengthscales

    keys = np.array(["00000", "00001"])
    layer = PolygonLayer(keys=keys, geoms=np.array([shapely.box(0, 0, 1, 1),
                         shapely.box(1, 0, 2, 1)]), fields={}, crs=None, path="")  # fmt: skip
    data = SimpleData(density=np.array([4.0, 4.0, 100.0]))
    sigma = np.array([0.1, 0.2, 0.3])
    ls = county_lengthscales(layer, 2, sigma, data, np.array([0, 0, 1]), lonlat=False)
    assert ls.unit == COORD_UNITS and ls.latitude is None
    np.testing.assert_allclose(ls.mean, [0.2 / 2, 0.2 / 10])
    assert list(ls.columns()) == ["coord_units_mean", "coord_units_q025", "coord_units_q975"]


class SimpleData:
    def __init__(self, density: np.ndarray) -> None:
        self.density = density
