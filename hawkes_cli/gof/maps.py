"""The maps step of ``--gof``: county choropleths and the conditional-intensity raster."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..diagnostics.derived import is_lonlat
from ..errors import UsageError
from . import figures
from .read import date_time
from .record import GofRun

#: Pixels along the longer side of the intensity map.
MAP_PIXELS = 900


def maps(run: GofRun) -> GofRun:
    """``map_cases.png``, ``map_pearson.png``, ``map_triggered.png``, ``map_lengthscale.png``
    (lon/lat data) and, with ``--date``, ``map_intensity.png``."""
    polys, cc, acc = run.polygons, run.counts, run.branching
    assert polys is not None and cc is not None and acc is not None
    layer, out = polys.layer, run.out_dir
    base = figures.MapBase(layer.keys, layer.geoms, is_lonlat(run.crs), layer.crs)
    files = [
        base.choropleth(
            cc.observed.astype(float),
            out / "map_cases.png",
            f"Cases per county (N = {run.data.n})",
            label="cases",
            cmap="YlOrRd",
            log_scale=True,
        ),
        base.choropleth(
            cc.pearson,
            out / "map_pearson.png",
            "Pearson residual (observed - expected)/sqrt(expected)",
            label="Pearson residual",
            cmap="RdBu_r",
            centre=0.0,
        ),
        base.choropleth(
            acc.shares("county").mean,
            out / "map_triggered.png",
            "Share of cases triggered (posterior mean)",
            label="share triggered",
            cmap="viridis",
        ),
    ]
    if run.lengthscales is not None:
        files.append(
            base.choropleth(
                run.lengthscales,
                out / "map_lengthscale.png",
                f"Effective spatial lengthscale, model {run.model}",
                label="miles (posterior mean)",
                cmap="cividis",
                log_scale=run.model == 2,
            )
        )
    if run.opts.date is not None:
        files.append(intensity_map(run, base, date_time(run.opts.date, run.data), run.opts.date))
    return run.wrote(*files)


def intensity_map(run: GofRun, base: figures.MapBase, at: float, label: str) -> Path:
    """Conditional intensity at time ``at`` averaged over map pixels (events per time unit per
    coordinate unit squared): background ``mu0 rho sum_{t_m != at} phi1`` plus the trigger of
    the events before ``at`` (:func:`hawkes_cli.engine.points.pixel_mean`)."""
    import shapely

    from ..engine.points import pixel_mean
    from .counties import kernel_scale

    data, p, area = run.data, run.posterior.mean, run.area
    assert run.polygons is not None
    t = data.time
    if not (t[0] <= at <= t[-1] + 10 * p.sigma_t):
        raise UsageError(
            f"--date {label!r} = time {at:g} lies outside the data ({t[0]:g}..{t[-1]:g})"
        )
    geoms = np.asarray(run.polygons.layer.geoms, dtype=object)[base.shown]
    x0, y0, x1, y1 = shapely.total_bounds(geoms)
    step = max(x1 - x0, y1 - y0) / MAP_PIXELS
    xe = np.arange(x0, x1 + step, step)
    ye = np.arange(y0, y1 + step, step)
    dt = at - t
    bg = p.mu0 / area * float(np.sum(np.where(dt != 0, np.exp(-0.5 * (dt / p.tau_t) ** 2), 0.0)))
    bg /= math.sqrt(2 * math.pi) * p.tau_t
    src = dt > 0
    w = p.xi0 * np.exp(-dt[src] / p.sigma_t) / p.sigma_t
    keep = w > w.max() * 1e-12 if w.size else w > 0
    scale = kernel_scale(p.sigma_x, data.density, run.model, data.n)[src][keep]
    trig = pixel_mean(data.x[src][keep], data.y[src][keep], scale, w[keep], xe, ye)
    return base.raster(
        xe,
        ye,
        bg + trig,
        run.out_dir / "map_intensity.png",
        f"Conditional intensity at {label} (time {at:g})",
        label="events per time unit per coordinate unit^2",
    )
