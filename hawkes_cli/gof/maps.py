"""The maps steps of ``--gof``: county choropleths and the conditional-intensity raster.

With county polygons (:func:`maps`) the raster is clipped to them; without (:func:`rectangle_map`:
coordinates no polygons describe) it covers the study rectangle, with axes in the data's
coordinate units, and the county maps are skipped (:func:`~.read.county_polygons` says why).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..diagnostics.derived import is_days, is_lonlat, time_unit_name
from ..errors import UsageError
from .mapping import COORD_AXES, KM_PER_DEGREE, LONLAT_AXES, MapBase
from .read import date_time
from .record import GofRun

log = logging.getLogger(__name__)

#: Pixels along the longer side of the intensity map.
MAP_PIXELS = 900


def maps(run: GofRun) -> GofRun:
    """``map_cases.png``, ``map_pearson.png``, ``map_triggered.png``, ``map_lengthscale.png``
    and, with ``--date``, ``map_intensity.png`` clipped to the polygons."""
    polys, cc, acc, ls = run.polygons, run.counts, run.branching, run.lengthscales
    assert polys is not None and cc is not None and acc is not None and ls is not None
    layer, out = polys.layer, run.out_dir
    base = MapBase(layer.keys, layer.geoms, is_lonlat(run.crs), layer.crs)
    area = "county" if is_lonlat(run.crs) else "cell"
    files = [
        base.choropleth(
            cc.observed.astype(float), out / "map_cases.png",
            f"Cases per {area} (N = {run.data.n:,})",
            label="cases (log scale)", cmap="YlOrRd", scale="counts", missing="no cases",
        ),
        base.choropleth(
            cc.pearson, out / "map_pearson.png",
            f"Pearson residual per {area}: (observed - expected) / sqrt(expected)",
            label="Pearson residual (symmetric log scale, linear within ±2)",
            cmap="RdBu_r", scale="diverging", missing="nothing expected",
        ),
        base.choropleth(
            acc.shares("county").mean, out / "map_triggered.png",
            f"Share of cases triggered per {area} (posterior mean)",
            label="share of cases triggered", cmap="viridis", missing="no cases",
        ),
        base.choropleth(
            ls.mean, out / "map_lengthscale.png",
            f"Effective spatial lengthscale per {area}, model {run.model} (posterior mean)",
            label=f"{ls.unit}" + (" (log scale)" if run.model == 2 else ""), cmap="cividis",
            scale="log" if run.model == 2 else "linear", missing="density unknown",
        ),
    ]  # fmt: skip
    if run.opts.date is not None:
        at = date_time(run.opts.date, run.data)
        files.append(intensity_map(run, base, pixel_grid(run, base), at, run.opts.date))
    return run.wrote(*files)


def rectangle_map(run: GofRun) -> GofRun:
    """``map_intensity.png`` (``--date``) on the study rectangle (:func:`study_rectangle`), for
    events no county polygons describe: every pixel drawn, not projected, axes in the data's
    coordinate units (degrees of longitude and latitude for lon/lat data, whose intensity is
    then per km^2)."""
    import shapely

    assert run.opts.date is not None
    x0, x1, y0, y1 = study_rectangle(run.data)
    log.info("no county polygons: the intensity map covers the rectangle [%g, %g] x [%g, %g]",
             x0, x1, y0, y1)  # fmt: skip
    lonlat = is_lonlat(run.crs)
    box = np.array([shapely.box(x0, y0, x1, y1)])
    base = MapBase(np.array(["rectangle"]), box, False, None,
                   axis_labels=LONLAT_AXES if lonlat else COORD_AXES)  # fmt: skip
    xe, ye = pixel_edges(x0, x1, y0, y1)
    grid = Raster(xe, ye, np.ones((ye.size - 1, xe.size - 1), dtype=bool))
    at = date_time(run.opts.date, run.data)
    return run.wrote(intensity_map(run, base, grid, at, run.opts.date, lonlat=lonlat))


def study_rectangle(data: Any) -> tuple[float, float, float, float]:
    """``(x0, x1, y0, y1)``: the simulated rectangle the events file records (attribute
    ``bounds``, as :func:`hawkes_cli.regions.region_for` reads it), grown to hold every event,
    else the events' bounding box; a side of zero length is widened to 1% of the other (or 1)
    around the events."""
    x, y = np.asarray(data.x, dtype=np.float64), np.asarray(data.y, dtype=np.float64)
    x0, x1, y0, y1 = float(x.min()), float(x.max()), float(y.min()), float(y.max())
    bounds = data.attrs.get("bounds")
    if bounds is not None and len(bounds) == 4:
        b = [float(v) for v in bounds]
        x0, x1, y0, y1 = min(x0, b[0]), max(x1, b[1]), min(y0, b[2]), max(y1, b[3])
    pad = 0.005 * max(x1 - x0, y1 - y0) or 0.5
    if x1 - x0 <= 0:
        x0, x1 = x0 - pad, x1 + pad
    if y1 - y0 <= 0:
        y0, y1 = y0 - pad, y1 + pad
    return x0, x1, y0, y1


@dataclass(frozen=True)
class Raster:
    """A pixel grid over the drawn polygons.

    Attributes
    ----------
    x_edges, y_edges : (NX + 1,), (NY + 1,) float64
        Pixel edges, the events' coordinates.
    inside : (NY, NX) bool
        Whether the pixel's centre lies in a polygon.
    """

    x_edges: np.ndarray
    y_edges: np.ndarray
    inside: np.ndarray

    @property
    def centre_y(self) -> np.ndarray:
        """(NY, 1) y of each pixel row's centre."""
        return (0.5 * (self.y_edges[:-1] + self.y_edges[1:]))[:, None]


def pixel_edges(
    x0: float, x1: float, y0: float, y1: float, pixels: int = MAP_PIXELS
) -> tuple[np.ndarray, np.ndarray]:
    """Edges of square pixels, ``pixels`` along the longer side of ``[x0, x1] x [y0, y1]``,
    from ``(x0, y0)`` on, the last covering ``x1`` and ``y1``."""
    step = max(x1 - x0, y1 - y0) / pixels
    nx = max(1, math.ceil((x1 - x0) / step - 1e-9))
    ny = max(1, math.ceil((y1 - y0) / step - 1e-9))
    return x0 + step * np.arange(nx + 1), y0 + step * np.arange(ny + 1)


def pixel_grid(run: GofRun, base: MapBase) -> Raster:
    """:data:`MAP_PIXELS` along the longer side of the drawn polygons' bounds, and which
    pixels lie on them (their centre located in a polygon: the map is clipped to land)."""
    import shapely

    assert run.polygons is not None
    geoms = np.asarray(run.polygons.layer.geoms, dtype=object)[base.shown]
    x0, y0, x1, y1 = (float(v) for v in shapely.total_bounds(geoms))
    xe, ye = pixel_edges(x0, x1, y0, y1)
    cx, cy = np.meshgrid(0.5 * (xe[:-1] + xe[1:]), 0.5 * (ye[:-1] + ye[1:]))
    where = run.polygons.locator.locate(cx.ravel(), cy.ravel()).reshape(cx.shape)
    inside = (where >= 0) & base.shown[np.maximum(where, 0)]
    return Raster(xe, ye, inside)


def intensity_grid(run: GofRun, at: float, x_edges: np.ndarray, y_edges: np.ndarray) -> np.ndarray:
    """Conditional intensity at time ``at`` at the posterior mean, averaged over each pixel,
    (NY, NX) float64, events per time unit per square coordinate unit: background
    ``mu0 rho sum_{t_m != at} phi1(at - t_m; tau_t)`` plus the trigger of the events before
    ``at`` (:func:`hawkes_cli.engine.points.pixel_mean`: each kernel's exact mass in the
    pixel over its area)."""
    from ..engine.points import pixel_mean
    from .counties import kernel_scale

    data, p, area = run.data, run.posterior.mean, run.area
    dt = at - data.time
    bg = p.mu0 / area * float(np.sum(np.where(dt != 0, np.exp(-0.5 * (dt / p.tau_t) ** 2), 0.0)))
    bg /= math.sqrt(2 * math.pi) * p.tau_t
    src = dt > 0
    w = p.xi0 * np.exp(-dt[src] / p.sigma_t) / p.sigma_t
    keep = w > w.max() * 1e-12 if w.size else w > 0
    scale = kernel_scale(p.sigma_x, data.density, run.model, data.n)[src][keep]
    xs, ys = data.x[src][keep], data.y[src][keep]
    return bg + pixel_mean(xs, ys, scale, w[keep], x_edges, y_edges)


def intensity_map(
    run: GofRun,
    base: MapBase,
    grid: Raster,
    at: float,
    label: str,
    *,
    lonlat: bool | None = None,
) -> Path:
    """``map_intensity.png``: :func:`intensity_grid` at time ``at`` on ``grid`` (pixels off
    it blank); per km^2 for lon/lat data (``lonlat``, default ``base.lonlat``; a square degree
    is ``111.195^2 cos(latitude)`` km^2), else per square coordinate unit."""
    t, p = run.data.time, run.posterior.mean
    if not (t[0] <= at <= t[-1] + 10 * p.sigma_t):
        raise UsageError(
            f"--date {label!r} = time {at:g} lies outside the data ({t[0]:g}..{t[-1]:g})"
        )
    values = intensity_grid(run, at, grid.x_edges, grid.y_edges)
    per = "coordinate unit²"
    if base.lonlat if lonlat is None else lonlat:
        values, per = per_km2(values, grid.centre_y), "km²"
    values = np.where(grid.inside, values, np.nan)
    step = time_step(run.time_unit)
    return base.raster(grid.x_edges, grid.y_edges, values, run.out_dir / "map_intensity.png",
                       intensity_title(label, at, step),
                       label=f"events per {step} per {per} (log scale)")  # fmt: skip


def per_km2(values: np.ndarray, latitude: np.ndarray) -> np.ndarray:
    """Densities per square degree of lon/lat at ``latitude`` (degrees, broadcast) as
    densities per km^2: a square degree there is ``111.195^2 cos(latitude)`` km^2 (the 6,371 km
    sphere)."""
    return values / (KM_PER_DEGREE**2 * np.cos(np.radians(latitude)))


def time_step(unit: str) -> str:
    """One of the time unit, as in "events per day": ``day``, ``week`` or the unit less its
    plural ``s``."""
    return "day" if is_days(unit) else time_unit_name(unit).removesuffix("s")


def intensity_title(label: str, at: float, step: str) -> str:
    """``Conditional intensity on day 540``, or ``on 2021-06-24 (day 540)`` for a date."""
    when = f"{step} {at:g}"
    return f"Conditional intensity on {when if _is_number(label) else f'{label} ({when})'}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
