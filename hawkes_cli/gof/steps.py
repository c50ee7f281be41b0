"""The steps of ``--gof`` after reading the run: each takes the :class:`~.record.GofRun` and
returns it with its results and files added (:func:`.api.run_gof` runs them in order)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np

from ..diagnostics.derived import is_lonlat
from ..model import Params
from ..vocab import EDGE_CENSORED
from . import branching as br
from . import figures, residuals
from .counties import county_counts
from .files import write_counties_gpkg, write_csv, write_events_h5
from .lengthscales import county_lengthscales, write_lengthscales
from .read import county_polygons, likelihood
from .record import GofRun

log = logging.getLogger(__name__)

#: Events above which ``events.h5`` is written beside ``events.csv``.
HDF5_FROM = 200_000
#: Columns of ``counties.csv`` and their formats.
COUNTY_HEADER = ["fips", "observed", "expected", "expected_background", "expected_trigger",
                 "pearson", "share_triggered", "share_triggered_sd"]  # fmt: skip
COUNTY_FORMATS = ["", "%d", "%.6g", "%.6g", "%.6g", "%.4g", "%.4g", "%.3g"]


def locate(run: GofRun) -> GofRun:
    """The county polygons and each event's polygon (first: the counties group the shares)."""
    return replace(run, polygons=county_polygons(run.opts, run.config, run.data, run.area))


def branching(run: GofRun) -> GofRun:
    """Branching probabilities over the picked draws, one pair pass each, with the shares
    triggered by week and by county."""
    lik = likelihood(run)
    week = np.floor(run.data.time / run.per_week).astype(np.int64)
    weeks = np.unique(week)
    groups = {"week": (weeks, np.searchsorted(weeks, week))}
    if run.polygons is not None:
        groups["county"] = (run.polygons.layer.keys, run.polygons.event_polygon)
    acc = br.BranchingAccumulator(run.data.n, groups)
    picked = run.posterior.picked
    for i, p in enumerate(picked):
        B, E = lik.components(p)
        acc.add(br.p_triggered(B, E, p))
        log.info("branching probabilities: draw %d of %d done", i + 1, len(picked))
    return replace(run, branching=acc)


def write_events(run: GofRun) -> GofRun:
    """``events.csv`` (``events.h5`` too for large N) and ``weekly.csv``."""
    data, acc, out = run.data, run.branching, run.out_dir
    assert acc is not None
    p_mean, p_sd = acc.mean, acc.sd
    fips = data.fips if data.fips is not None else np.full(data.n, "")
    files = [
        write_csv(
            out / "events.csv",
            ["time", "x", "y", "fips", "p_triggered", "p_triggered_sd"],
            [data.time, data.x, data.y, fips, p_mean, p_sd],
            ["%.10g", "%.10g", "%.10g", "", "%.6g", "%.3g"],
        )
    ]
    if data.n >= HDF5_FROM:
        files.append(write_events_h5(out / "events.h5", data, p_mean, p_sd))
    ws = acc.shares("week")
    files.append(
        write_csv(
            out / "weekly.csv",
            ["week", "start", "events", "share_triggered", "share_triggered_sd"],
            [ws.keys, ws.keys * run.per_week, ws.events, ws.mean, ws.sd],
            ["%d", "%.10g", "%d", "%.6g", "%.3g"],
        )
    )
    return run.wrote(*files)


def edge_mass(run: GofRun, p: Params) -> np.ndarray | None:
    """Each event's trigger mass inside the study region at ``p`` when the run counts only it
    (``model.edge: censored``), else None (``none``, ``renormalized``: every event's whole
    mass): the compensator the run's likelihood used."""
    if run.config.model.edge != EDGE_CENSORED:
        return None
    from ..engine.edge_mass import EdgeMass
    from ..regions import region_of

    data = run.data
    density = data.density if run.model == 2 else None
    edge = EdgeMass(region_of(run.config, data), data.x, data.y, rows=(0, data.n), density=density)
    return edge.mass(p.sigma_x)[0]


def temporal(run: GofRun) -> GofRun:
    """Time rescaling at the posterior mean: the KS test, ``qq.png`` and ``counts.png``."""
    data, config, mean_p = run.data, run.config, run.posterior.mean
    assert run.branching is not None
    mass = edge_mass(run, mean_p)
    resc = residuals.rescale(data.time, mean_p, run.opts.stream(0), mass=mass)
    summary: dict[str, Any] = residuals.ks_summary(resc)
    window_end = float(data.time[-1]) if config.data.window_end is None else config.data.window_end
    summary["compensator"] = float(
        residuals.ground_compensator(np.array([window_end]), data.time, mean_p, mass=mass)[0]
    )
    summary["edge"] = run.config.model.edge
    summary["parameters"] = mean_p.as_dict()
    summary["draws_branching"] = len(run.posterior.picked)
    summary["draws_retained"] = run.posterior.retained
    summary["share_triggered"] = float(np.mean(run.branching.mean))
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
    qq = figures.qq_plot(
        resc.tau,
        run.out_dir / "qq.png",
        f"Time-rescaling QQ: KS D = {summary['ks_statistic']:.4f}, "
        f"p = {summary['ks_pvalue']:.3g} (N = {data.n})",
    )
    counts = figures.counts_plot(
        resc.cell_times,
        resc.cell_observed,
        resc.cell_expected,
        run.out_dir / "counts.png",
        run.time_unit,
        resc.cell_width,
    )
    return run.wrote(qq, counts, **summary)


def counties(run: GofRun) -> GofRun:
    """County residuals at the posterior mean and the lengthscale of every county (miles for
    lon/lat data, else coordinate units): ``counties.csv``, ``lengthscales.csv`` and
    ``counties.gpkg`` (the polygons with every column of both)."""
    data, polys, acc = run.data, run.polygons, run.branching
    assert polys is not None and acc is not None
    cc = county_counts(
        data.time, data.x, data.y, data.density, run.posterior.mean,
        model=run.model, area=run.area, keys=polys.layer.keys, polygon_area=polys.areas,
        locator=polys.locator, rng=run.opts.stream(1),
        window_end=run.config.data.window_end, samples=run.opts.samples,
        event_polygon=polys.event_polygon, mass=edge_mass(run, run.posterior.mean),
    )  # fmt: skip
    cs = acc.shares("county")
    ls = county_lengthscales(
        polys.layer, run.model, run.posterior.pooled["sigma_x"], data, polys.event_polygon,
        lonlat=is_lonlat(run.crs),
    )  # fmt: skip
    columns = [cc.keys, cc.observed, cc.expected, cc.expected_background, cc.expected_trigger,
               cc.pearson, cs.mean, cs.sd]  # fmt: skip
    files = [
        write_csv(run.out_dir / "counties.csv", COUNTY_HEADER, columns, COUNTY_FORMATS),
        write_lengthscales(run.out_dir, ls),
    ]
    fields = dict(zip(COUNTY_HEADER[1:], columns[1:], strict=True))
    files += write_counties_gpkg(run.out_dir / "counties.gpkg", polys.layer,
                                 {**fields, **ls.columns()})  # fmt: skip
    summary = {
        "polygons": len(polys.layer.keys),
        "outside_observed": cc.outside_observed,
        "outside_expected": cc.outside_expected,
        "expected_in_polygons": float(cc.expected.sum()),
        "pearson_chi2": float(np.nansum(cc.pearson**2)),
        "samples_per_source": run.opts.samples,
        "lengthscale_unit": ls.unit,
    }
    return replace(run, counts=cc, lengthscales=ls).wrote(*files, counties=summary)
