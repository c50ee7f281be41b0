"""``hawkes-diagnose RUN_DIR --gof DIR``: goodness of fit of a run, as files in DIR.

Steps (each a call into one module of this package):

1. read the run (:class:`~hawkes_cli.rundir.RunDir` config, the retained draws through
   :func:`hawkes_cli.diagnostics.load_draws`, the events) and build the chain's own likelihood
   (its engine, precision, truncation tolerance, window);
2. branching probabilities over ``draws`` draws spread evenly over the retained ones, one pair
   pass each (:mod:`.branching`): ``events.csv`` (and ``events.h5`` for large N),
   ``weekly.csv``;
3. temporal residuals at the posterior mean (:mod:`.residuals`): ``gof.json``, ``qq.png``,
   ``counts.png``;
4. county residuals at the posterior mean (:mod:`.counties`): ``counties.csv``; county
   lengthscales in miles (lon/lat data): ``lengthscales.csv``;
5. maps (:mod:`.figures`): ``map_cases.png``, ``map_pearson.png``, ``map_triggered.png``,
   ``map_lengthscale.png`` and, with ``date``, ``map_intensity.png``.

Residuals use one parameter value, the posterior mean of the retained draws (the plug-in fit),
so that their reference laws (Exponential(1) gaps, Poisson counts) hold.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import time as clock
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic
from ..errors import EventsError, UsageError
from ..model import Params
from ..vocab import PARAM_NAMES

log = logging.getLogger(__name__)

#: Draws used for the branching probabilities by default.
DEFAULT_DRAWS = 20
#: Events above which ``events.h5`` is written beside ``events.csv``.
HDF5_FROM = 200_000
#: Pixels along the longer side of the intensity map.
MAP_PIXELS = 900
#: Days per week (the weekly shares, for data in days).
DAYS_PER_WEEK = 7.0


@dataclass(frozen=True)
class GofOptions:
    """What ``--gof`` computes.

    Attributes
    ----------
    burn, thin
        As for ``hawkes-diagnose`` (default burn: the run's warm-up).
    draws
        Posterior draws for the branching probabilities (>= 1; fewer if fewer are retained).
    date
        Time (the data's units) of the conditional-intensity map, or an ISO date when the
        events file records ``origin_date``; None: no intensity map.
    counties
        Polygon file (GEOID key) for the county residuals; default: the config's
        ``data.counties``, else the Census counties for lon/lat data.
    samples
        Kernel points per source for the expected county counts.
    seed
        Seed of the tie-breaking uniforms and the kernel points.
    maps
        Whether to draw the maps.
    """

    burn: int | None = None
    thin: int = 1
    draws: int = DEFAULT_DRAWS
    date: str | None = None
    counties: Path | None = None
    samples: int = 4
    seed: int = 0
    maps: bool = True


def _pick_draws(run_dir: Path, opts: GofOptions) -> tuple[list[Params], Params, dict]:
    """``opts.draws`` parameter draws evenly spaced over the pooled retained draws, the
    posterior mean, and the pooled arrays."""
    from ..diagnostics import DiagnoseOptions, load_draws

    draws = load_draws(run_dir, DiagnoseOptions(burn=opts.burn, thin=opts.thin))
    pooled = {n: np.concatenate(draws.variables[n]) for n in PARAM_NAMES}
    total = pooled[PARAM_NAMES[0]].size
    k = min(opts.draws, total)
    idx = np.unique(np.linspace(0, total - 1, k).round().astype(np.int64))
    picked = [Params(**{n: float(pooled[n][i]) for n in PARAM_NAMES}) for i in idx]
    mean = Params(**{n: float(np.mean(pooled[n])) for n in PARAM_NAMES})
    return picked, mean, pooled


def _likelihood(config: Any, data: Any, area: float) -> Any:
    """The chain's likelihood (serial), with the run's engine settings."""
    from ..engine import make_likelihood

    return make_likelihood(data, **config.likelihood_options(area))


#: Least share of the events that must lie inside the polygons for county outputs: below it
#: the polygons are not in the events' coordinates (e.g. a synthetic box read as lon/lat).
MIN_INSIDE_SHARE = 0.5
#: Most the polygons' total area may exceed the study area (relative): beyond it the
#: background's share per county would count area outside the study region.
MAX_AREA_EXCESS = 0.05


def _county_layer(
    opts: GofOptions, config: Any, data: Any, area: float, crs: str
) -> tuple[Any, Any, Any]:
    """The polygons of the county outputs, their locator and each event's polygon index;
    ``(None, None, None)`` with a WARNING saying why when no polygons describe these events.

    Raises
    ------
    EventsError, UsageError
        Polygons the user named (``--gof-counties``, ``data.counties``) cannot be read.
    """
    from ..counties import read_polygon_layer
    from ..diagnostics import derived
    from . import counties

    path = opts.counties or config.data.counties
    skipped = "county residuals and maps skipped"
    if path is None and not derived.is_lonlat(crs):
        log.warning("no county polygons for coordinates %r: %s; give --gof-counties", crs,
                    skipped)  # fmt: skip
        return None, None, None
    try:
        layer = read_polygon_layer(path)
    except EventsError as exc:
        if path is not None:
            raise
        log.warning("the Census county polygons cannot be read (%s): %s", exc, skipped)
        return None, None, None
    where = path or "the Census counties"
    locator = counties.Locator(layer.geoms)
    event_poly = locator.locate(data.x, data.y)
    inside = float(np.mean(event_poly >= 0)) if data.n else 0.0
    if inside < MIN_INSIDE_SHARE:
        log.warning(
            "only %.1f%% of the events lie inside the %d polygons of %s: the events' "
            "coordinates (crs %r) are not those polygons' (lon/lat degrees for the Census "
            "counties); %s; give --gof-counties with polygons in the events' coordinates",
            100 * inside, layer.keys.size, where, crs or "unset", skipped,
        )  # fmt: skip
        return None, None, None
    covered = float(_areas(layer.geoms).sum())
    if covered > (1 + MAX_AREA_EXCESS) * area:
        log.warning(
            "the polygons of %s cover %.6g square coordinate units, more than the study area "
            "%.6g: their background shares would not add up; %s; give polygons of the study "
            "region or its area (data.area)",
            where, covered, area, skipped,
        )  # fmt: skip
        return None, None, None
    return layer, locator, event_poly


def _csv(path: Path, header: list[str], columns: list[np.ndarray], fmts: list[str]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    cols = [
        [("" if (isinstance(v, float) and math.isnan(v)) else f % v) for v in col.tolist()]
        if f
        else [str(v) for v in col.tolist()]
        for col, f in zip(columns, fmts, strict=True)
    ]
    w.writerows(zip(*cols, strict=True))
    atomic.write_text(path, buf.getvalue(), make_parents=True)
    return path


def _events_h5(path: Path, data: Any, mean: np.ndarray, sd: np.ndarray) -> Path:
    import h5py

    with atomic.replacing(path) as tmp, h5py.File(tmp, "w") as f:
        for name, values in (
            ("time", data.time),
            ("x", data.x),
            ("y", data.y),
            ("p_triggered", mean),
            ("p_triggered_sd", sd),
        ):
            f.create_dataset(name, data=values, compression="gzip", shuffle=True)
        if data.fips is not None:
            f.create_dataset("fips", data=data.fips.astype("S5"), compression="gzip")
    return path


def _date_time(date: str, data: Any) -> float:
    """``--date`` in the data's time units."""
    try:
        return float(date)
    except ValueError:
        pass
    import datetime as dt

    origin = data.attrs.get("origin_date")
    if not origin:
        raise UsageError(
            f"--date {date!r}: give a time in the data's units (e.g. 120); a calendar date "
            f"needs the events file to record origin_date, which {data.source} does not"
        )
    try:
        day = dt.date.fromisoformat(date)
    except ValueError:
        raise UsageError(
            f"--date {date!r} is neither a number nor an ISO date (YYYY-MM-DD)"
        ) from None
    return float((day - dt.date.fromisoformat(str(origin))).days)


#: Every file name ``--gof`` writes: the only names an existing output folder may hold.
GOF_FILES = frozenset(
    {
        "events.csv", "events.h5", "weekly.csv", "qq.png", "counts.png", "counties.csv",
        "counties.gpkg",
        "lengthscales.csv", "map_cases.png", "map_pearson.png", "map_triggered.png",
        "map_lengthscale.png", "map_intensity.png", "gof.json",
    }
)  # fmt: skip


def run_gof(run_dir: Path, out_dir: Path, opts: GofOptions | None = None) -> dict[str, Any]:
    """Compute the goodness-of-fit files of a run (module docstring) into ``out_dir``.

    The files are written into a fresh hidden folder beside ``out_dir`` and swapped in whole
    at the end (:func:`hawkes_cli.atomic.replacing_folder`): an interrupted run leaves the
    previous set as it was, never a mix of two.

    Returns
    -------
    dict
        What ``gof.json`` holds (KS statistics, counts, timings, files written).

    Raises
    ------
    UsageError, ConfigError, EventsError, StorageError
        Not a run directory, no draws, unreadable events or polygons, a bad option, or an
        ``out_dir`` holding files ``--gof`` does not write.
    """
    try:
        with atomic.replacing_folder(out_dir, owns=GOF_FILES.__contains__) as tmp:
            return _write_gof(Path(run_dir), tmp, opts)
    except atomic.ForeignFilesError as exc:
        raise UsageError(
            f"--gof {out_dir}: the folder holds files --gof does not write "
            f"({', '.join(exc.names[:5])}); give a new or empty folder (nothing written)"
        ) from None
    except NotADirectoryError:
        raise UsageError(f"--gof {out_dir}: is a file, not a folder") from None


def _write_gof(run_dir: Path, out_dir: Path, opts: GofOptions | None) -> dict[str, Any]:
    """:func:`run_gof` into ``out_dir`` (a fresh folder)."""
    from ..data import load_events, resolve_area
    from ..diagnostics import derived
    from ..rundir import RunDir
    from . import branching, counties, figures, residuals

    opts = opts or GofOptions()
    if opts.draws < 1:
        raise UsageError(f"--gof-draws must be >= 1, got {opts.draws}")
    if opts.samples < 1:
        raise UsageError(f"--gof-samples must be >= 1, got {opts.samples}")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    timings: dict[str, float] = {}
    t0 = clock.perf_counter()
    config = RunDir(run_dir).load_config()
    model = config.model.kind
    picked, mean_p, pooled = _pick_draws(run_dir, opts)
    data = load_events(config.data.events, need_density=model == 2)
    recorded = RunDir(run_dir).events_digests()
    if recorded and data.digest() not in recorded:
        raise UsageError(
            f"{config.data.events} changed since the chains ran (its content is not what the "
            "chain files record): the goodness of fit would describe other data; restore the "
            "events the chains ran on"
        )
    area = resolve_area(config, data)
    crs = str(data.attrs.get("crs", ""))
    lonlat = derived.is_lonlat(crs)
    unit = str(data.attrs.get("time_unit", "day"))
    timings["read"] = clock.perf_counter() - t0
    written: list[Path] = []
    out_dir.mkdir(parents=True, exist_ok=True)

    # polygons first: events' counties group the shares
    t1 = clock.perf_counter()
    layer, locator, event_poly = _county_layer(opts, config, data, area, crs)
    timings["locate"] = clock.perf_counter() - t1

    # 1. branching probabilities
    t1 = clock.perf_counter()
    lik = _likelihood(config, data, area)
    per_week = DAYS_PER_WEEK if derived.is_days(unit) else 1.0
    week = np.floor(data.time / per_week).astype(np.int64)
    weeks = np.unique(week)
    groups = {"week": (weeks, np.searchsorted(weeks, week))}
    if layer is not None:
        groups["county"] = (layer.keys, event_poly)
    acc = branching.BranchingAccumulator(data.n, groups)
    for i, p in enumerate(picked):
        B, E = lik.components(p)
        acc.add(branching.p_triggered(B, E, p))
        log.info("branching probabilities: draw %d of %d done", i + 1, len(picked))
    p_mean, p_sd = acc.mean, acc.sd
    timings["branching"] = clock.perf_counter() - t1
    t1 = clock.perf_counter()
    fips = data.fips if data.fips is not None else np.full(data.n, "")
    written.append(
        _csv(
            out_dir / "events.csv",
            ["time", "x", "y", "fips", "p_triggered", "p_triggered_sd"],
            [data.time, data.x, data.y, fips, p_mean, p_sd],
            ["%.10g", "%.10g", "%.10g", "", "%.6g", "%.3g"],
        )
    )
    if data.n >= HDF5_FROM:
        written.append(_events_h5(out_dir / "events.h5", data, p_mean, p_sd))
    ws = acc.shares("week")
    written.append(
        _csv(
            out_dir / "weekly.csv",
            ["week", "start", "events", "share_triggered", "share_triggered_sd"],
            [ws.keys, ws.keys * per_week, ws.events, ws.mean, ws.sd],
            ["%d", "%.10g", "%d", "%.6g", "%.3g"],
        )
    )
    timings["write_events"] = clock.perf_counter() - t1

    # 2. temporal residuals
    t1 = clock.perf_counter()
    rng = np.random.default_rng(np.random.SeedSequence(opts.seed))
    tie_rng, kernel_rng = (np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(2))
    resc = residuals.rescale(data.time, mean_p, tie_rng)
    summary: dict[str, Any] = residuals.ks_summary(resc)
    window_end = float(data.time[-1]) if config.data.window_end is None else config.data.window_end
    summary["compensator"] = float(
        residuals.ground_compensator(np.array([window_end]), data.time, mean_p)[0]
    )
    summary["parameters"] = mean_p.as_dict()
    summary["draws_branching"] = len(picked)
    summary["draws_retained"] = int(pooled[PARAM_NAMES[0]].size)
    summary["share_triggered"] = float(np.mean(p_mean))
    summary["engine"] = {
        "backend": config.engine.backend,
        "precision": config.engine.precision,
        "tolerance": config.engine.tolerance,
    }
    summary["tie_breaking"] = (
        "lattice: rescaled time uniform on [Lambda(v), Lambda(v + h)) per event"
        if resc.lattice
        else "none (distinct times)"
    )
    written.append(
        figures.qq_plot(
            resc.tau,
            out_dir / "qq.png",
            f"Time-rescaling QQ: KS D = {summary['ks_statistic']:.4f}, "
            f"p = {summary['ks_pvalue']:.3g} (N = {data.n})",
        )
    )
    written.append(
        figures.counts_plot(
            resc.cell_times, resc.cell_observed, resc.cell_expected, out_dir / "counts.png", unit
        )
    )
    timings["temporal"] = clock.perf_counter() - t1

    # 3. county residuals and lengthscales
    if layer is not None:
        t1 = clock.perf_counter()
        cc = counties.county_counts(
            data.time,
            data.x,
            data.y,
            data.density,
            mean_p,
            model=model,
            area=area,
            keys=layer.keys,
            polygon_area=_areas(layer.geoms),
            locator=locator,
            rng=kernel_rng,
            window_end=config.data.window_end,
            samples=opts.samples,
            event_polygon=event_poly,
        )
        cs = acc.shares("county")
        pearson = cc.pearson
        written.append(
            _csv(
                out_dir / "counties.csv",
                [
                    "fips",
                    "observed",
                    "expected",
                    "expected_background",
                    "expected_trigger",
                    "pearson",
                    "share_triggered",
                    "share_triggered_sd",
                ],
                [
                    cc.keys,
                    cc.observed,
                    cc.expected,
                    cc.expected_background,
                    cc.expected_trigger,
                    pearson,
                    cs.mean,
                    cs.sd,
                ],
                ["", "%d", "%.6g", "%.6g", "%.6g", "%.4g", "%.4g", "%.3g"],
            )
        )
        written += _counties_gpkg(
            out_dir / "counties.gpkg",
            layer,
            {
                "observed": cc.observed.astype(np.int64),
                "expected": cc.expected,
                "pearson": pearson,
                "share_triggered": cs.mean,
            },
        )
        summary["counties"] = {
            "polygons": len(layer.keys),
            "outside_observed": cc.outside_observed,
            "outside_expected": cc.outside_expected,
            "expected_in_polygons": float(cc.expected.sum()),
            "pearson_chi2": float(np.nansum(pearson**2)),
            "samples_per_source": opts.samples,
        }
        timings["counties"] = clock.perf_counter() - t1
        miles = None
        if lonlat:
            miles, lpath = _lengthscales(out_dir, layer, model, pooled["sigma_x"], data, event_poly)
            written.append(lpath)
        if opts.maps:
            t1 = clock.perf_counter()
            base = figures.MapBase(layer.keys, layer.geoms, lonlat, layer.crs)
            written.append(
                base.choropleth(
                    cc.observed.astype(float),
                    out_dir / "map_cases.png",
                    f"Cases per county (N = {data.n})",
                    label="cases",
                    cmap="YlOrRd",
                    log_scale=True,
                )
            )
            written.append(
                base.choropleth(
                    pearson,
                    out_dir / "map_pearson.png",
                    "Pearson residual (observed - expected)/sqrt(expected)",
                    label="Pearson residual",
                    cmap="RdBu_r",
                    centre=0.0,
                )
            )
            written.append(
                base.choropleth(
                    cs.mean,
                    out_dir / "map_triggered.png",
                    "Share of cases triggered (posterior mean)",
                    label="share triggered",
                    cmap="viridis",
                )
            )
            if miles is not None:
                written.append(
                    base.choropleth(
                        miles,
                        out_dir / "map_lengthscale.png",
                        f"Effective spatial lengthscale, model {model}",
                        label="miles (posterior mean)",
                        cmap="cividis",
                        log_scale=model == 2,
                    )
                )
            if opts.date is not None:
                written.append(
                    _intensity_map(
                        base,
                        layer,
                        data,
                        mean_p,
                        model,
                        area,
                        _date_time(opts.date, data),
                        opts.date,
                        out_dir,
                    )
                )
            timings["maps"] = clock.perf_counter() - t1
    timings["total"] = clock.perf_counter() - t0
    summary["seconds"] = {k: round(v, 3) for k, v in timings.items()}
    summary["files"] = [p.name for p in written] + ["gof.json"]
    atomic.write_json(out_dir / "gof.json", summary)
    return summary


def _counties_gpkg(path: Path, layer: Any, fields: dict[str, np.ndarray]) -> list[Path]:
    """``counties.gpkg``: the county polygons with their residuals, for a GIS (QGIS opens it);
    [] with a WARNING where it cannot be written (a core install without pyogrio)."""
    from ..counties import write_polygons

    try:
        with warnings.catch_warnings():  # synthetic coordinates have no reference system
            warnings.filterwarnings("ignore", "'crs' was not provided", UserWarning)
            write_polygons(layer, path, fields)
    except EventsError as exc:
        log.warning("counties.gpkg not written (%s); counties.csv holds the same numbers", exc)
        return []
    return [path]


def _areas(geoms: np.ndarray) -> np.ndarray:
    import shapely

    return shapely.area(np.asarray(geoms, dtype=object)).astype(np.float64)


def _lengthscales(
    out_dir: Path, layer: Any, model: int, sigma_x: np.ndarray, data: Any, event_poly: np.ndarray
) -> tuple[np.ndarray, Path]:
    """Effective lengthscale in miles per polygon (posterior mean and 95% interval over every
    retained draw): latitude of the polygon's centroid, density from the county table (else
    the mean density of its events); ``lengthscales.csv``."""
    import shapely

    from ..counties import load_county_table
    from ..diagnostics.derived import county_factor

    lat = shapely.get_y(shapely.centroid(np.asarray(layer.geoms, dtype=object)))
    k = len(layer.keys)
    density = np.full(k, np.nan)
    if model == 2:
        table = load_county_table()
        row = table.lookup(np.asarray(layer.keys).astype("<U5"))
        density = np.where(row >= 0, table.density[np.maximum(row, 0)], np.nan)
        if data is not None and data.density is not None:
            ok = event_poly >= 0
            sums = np.bincount(event_poly[ok], weights=data.density[ok], minlength=k)
            n = np.bincount(event_poly[ok], minlength=k)
            with np.errstate(invalid="ignore", divide="ignore"):
                density = np.where(np.isnan(density), sums / n, density)
    factor = np.array(
        [
            county_factor(model, float(lat[i]), float(density[i]))
            if model == 1 or density[i] > 0
            else np.nan
            for i in range(k)
        ]
    )
    q = np.quantile(sigma_x, [0.025, 0.975])
    mean = float(np.mean(sigma_x)) * factor
    path = _csv(
        out_dir / "lengthscales.csv",
        ["fips", "latitude", "density", "miles_mean", "miles_q025", "miles_q975"],
        [np.asarray(layer.keys), lat, density, mean, q[0] * factor, q[1] * factor],
        ["", "%.5f", "%.6g", "%.5g", "%.5g", "%.5g"],
    )
    return mean, path


def _intensity_map(
    base: Any,
    layer: Any,
    data: Any,
    p: Params,
    model: int,
    area: float,
    at: float,
    label: str,
    out_dir: Path,
) -> Path:
    """Conditional intensity at time ``at`` averaged over map pixels (events per time unit per
    coordinate unit squared): background ``mu0 rho sum_{t_m != at} phi1`` plus the trigger of
    the events before ``at`` (:func:`hawkes_cli.engine.points.pixel_mean`)."""
    import shapely

    from ..engine.points import pixel_mean
    from .counties import kernel_scale

    t = data.time
    if not (t[0] <= at <= t[-1] + 10 * p.sigma_t):
        raise UsageError(
            f"--date {label!r} = time {at:g} lies outside the data ({t[0]:g}..{t[-1]:g})"
        )
    x0, y0, x1, y1 = shapely.total_bounds(np.asarray(layer.geoms, dtype=object)[base.shown])
    step = max(x1 - x0, y1 - y0) / MAP_PIXELS
    xe = np.arange(x0, x1 + step, step)
    ye = np.arange(y0, y1 + step, step)
    dt = at - t
    bg = p.mu0 / area * float(np.sum(np.where(dt != 0, np.exp(-0.5 * (dt / p.tau_t) ** 2), 0.0)))
    bg /= math.sqrt(2 * math.pi) * p.tau_t
    src = dt > 0
    w = p.xi0 * np.exp(-dt[src] / p.sigma_t) / p.sigma_t
    keep = w > w.max() * 1e-12 if w.size else w > 0
    scale = kernel_scale(p.sigma_x, data.density, model, data.n)[src][keep]
    trig = pixel_mean(data.x[src][keep], data.y[src][keep], scale, w[keep], xe, ye)
    return base.raster(
        xe,
        ye,
        bg + trig,
        out_dir / "map_intensity.png",
        f"Conditional intensity at {label} (time {at:g})",
        label="events per time unit per coordinate unit^2",
    )
