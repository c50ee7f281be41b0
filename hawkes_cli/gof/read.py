"""The inputs of ``--gof``: the run (config, retained draws, events) read into a
:class:`~.record.GofRun`, the county polygons that describe its events, the ``--date``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EventsError, UsageError
from ..model import Params
from ..vocab import EDGE_RENORMALIZED, PARAM_NAMES
from .record import GofOptions, GofRun, Polygons, Posterior, parse_date

if TYPE_CHECKING:  # pragma: no cover
    from ..geo import PolygonLayer

log = logging.getLogger(__name__)

#: The ``path`` of the synthetic grid's polygon layer.
GRID = "<synthetic grid>"
#: Least share of the events that must lie inside the polygons for county outputs: below it
#: the polygons are not in the events' coordinates (e.g. a synthetic box read as lon/lat).
MIN_INSIDE_SHARE = 0.5
#: Most the polygons' total area may exceed the study area (relative): beyond it the
#: background's share per county would count area outside the study region.
MAX_AREA_EXCESS = 0.05


def read_run(run_dir: Path, out_dir: Path, opts: GofOptions) -> GofRun:
    """The run's config, retained draws and events (the ones the chains ran on).

    Raises
    ------
    UsageError
        The events file changed since the chains ran (or as :func:`posterior_draws`).
    """
    from ..data import load_events, resolve_area
    from ..rundir import RunDir

    config = RunDir(run_dir).load_config()
    posterior = posterior_draws(run_dir, opts)
    data = load_events(config.data.events, need_density=config.model.kind == 2)
    recorded = RunDir(run_dir).events_digests()
    if recorded and data.digest() not in recorded:
        raise UsageError(
            f"{config.data.events} changed since the chains ran (its content is not what the "
            "chain files record): the goodness of fit would describe other data; restore the "
            "events the chains ran on"
        )
    area = resolve_area(config, data)
    return GofRun(opts, out_dir, config, data, area, posterior)


def posterior_draws(run_dir: Path, opts: GofOptions) -> Posterior:
    """``opts.draws`` parameter draws evenly spaced over the pooled retained draws, the
    posterior mean, and the pooled arrays."""
    from ..diagnostics import DiagnoseOptions, load_draws

    draws = load_draws(run_dir, DiagnoseOptions(burn=opts.burn, thin=opts.thin))
    pooled = {n: np.concatenate(draws.variables[n]) for n in PARAM_NAMES}
    total = pooled[PARAM_NAMES[0]].size
    k = min(opts.draws, total)
    idx = np.unique(np.linspace(0, total - 1, k).round().astype(np.int64))
    picked = tuple(Params(**{n: float(pooled[n][i]) for n in PARAM_NAMES}) for i in idx)
    mean = Params(**{n: float(np.mean(pooled[n])) for n in PARAM_NAMES})
    return Posterior(picked, mean, pooled)


def likelihood(run: GofRun) -> Any:
    """The chain's likelihood (serial), with the run's engine settings and, for
    ``model.edge: renormalized`` (whose rates differ from the paper's), its study region."""
    from ..engine import build_likelihood
    from ..regions import region_of

    config = run.config
    renormalized = config.model.edge == EDGE_RENORMALIZED
    return build_likelihood(
        run.data,
        config.engine,
        model=config.model.kind,
        area=run.area,
        window_end=config.data.window_end,
        region=region_of(config, run.data) if renormalized else None,
        edge=config.model.edge,
    )


def polygon_areas(geoms: np.ndarray) -> np.ndarray:
    """Areas of shapely polygons, (K,) float64, coordinate units squared."""
    import shapely

    return shapely.area(np.asarray(geoms, dtype=object)).astype(np.float64)


def county_polygons(opts: GofOptions, config: Any, data: Any, area: float) -> Polygons | None:
    """The polygons of the county outputs, their locator and each event's polygon index;
    None with a WARNING saying why when no polygons describe these events.

    Raises
    ------
    EventsError, UsageError
        Polygons the user named (``--gof-counties``, ``data.counties``) cannot be read.
    """
    from ..counties import read_polygon_layer
    from ..diagnostics import derived
    from .counties import Locator

    path = opts.counties or config.data.counties
    crs = str(data.attrs.get("crs", ""))
    skipped = "county residuals and county maps skipped"
    layer = grid_layer(data) if path is None else None
    if layer is None and path is None and not derived.is_lonlat(crs):
        log.warning("no county polygons for coordinates %r: %s; give --gof-counties", crs,
                    skipped)  # fmt: skip
        return None
    if layer is None:
        try:
            layer = read_polygon_layer(path)
        except EventsError as exc:
            if path is not None:
                raise
            log.warning("the Census county polygons cannot be read (%s): %s", exc, skipped)
            return None
    where = path or ("the synthetic grid" if layer.path == GRID else "the Census counties")
    locator = Locator(layer.geoms)
    event_poly = locator.locate(data.x, data.y)
    inside = float(np.mean(event_poly >= 0)) if data.n else 0.0
    if inside < MIN_INSIDE_SHARE:
        log.warning(
            "only %.1f%% of the events lie inside the %d polygons of %s: the events' "
            "coordinates (crs %r) are not those polygons' (lon/lat degrees for the Census "
            "counties); %s; give --gof-counties with polygons in the events' coordinates",
            100 * inside, layer.keys.size, where, crs or "unset", skipped,
        )  # fmt: skip
        return None
    areas = polygon_areas(layer.geoms)
    covered = float(areas.sum())
    if covered > (1 + MAX_AREA_EXCESS) * area:
        log.warning(
            "the polygons of %s cover %.6g square coordinate units, more than the study area "
            "%.6g: their background shares would not add up; %s; give polygons of the study "
            "region or its area (data.area)",
            where, covered, area, skipped,
        )  # fmt: skip
        return None
    return Polygons(layer, locator, event_poly, areas)


def grid_layer(data: Any) -> PolygonLayer | None:
    """The cells of simulated data's synthetic grid (events file attributes ``grid_nx``,
    ``grid_ny``, ``bounds``) as polygons keyed by their FIPS codes, as the cut posterior
    draws in them (:func:`hawkes_cli.resample.make_resampler`); None for other data."""
    import shapely

    from ..geo import PolygonLayer
    from ..simulate import DensityGrid

    attrs = data.attrs
    if not all(k in attrs for k in ("grid_nx", "grid_ny", "bounds")):
        return None
    ny, nx = int(attrs["grid_ny"]), int(attrs["grid_nx"])
    cells = DensityGrid(values=np.ones((ny, nx)), bounds=tuple(attrs["bounds"])).polygons()
    keys = np.array([k for k, _ in cells])
    boxes = np.array([shapely.box(x0, y0, x1, y1) for _, (x0, x1, y0, y1) in cells])
    return PolygonLayer(keys=keys, geoms=boxes, fields={}, crs=None, path=GRID)


def date_time(date: str, data: Any) -> float:
    """``--date`` in the data's time units."""
    import datetime as dt

    value = parse_date(date)
    if isinstance(value, float):
        return value
    origin = data.attrs.get("origin_date")
    if not origin:
        raise UsageError(
            f"--date {date!r}: give a time in the data's units (e.g. 120); a calendar date "
            f"needs the events file to record origin_date, which {data.source} does not"
        )
    return float((value - dt.date.fromisoformat(str(origin))).days)
