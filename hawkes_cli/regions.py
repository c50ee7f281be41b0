"""The study region of a run: its polygons (a county file, the synthetic grid, or the package's
counties) and, for the censored edge correction, the region whose trigger mass counts.

Shared by the chains (:mod:`hawkes_cli.resample`, :mod:`hawkes_cli.runner.setup`) and the
diagnosis (:mod:`hawkes_cli.diagnostics.systematic`), so both see the same region.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .config import Config
from .data import EventData
from .errors import ConfigError
from .vocab import EDGE_NONE

if TYPE_CHECKING:
    from .engine.region import Region
    from .geo import PolygonSampler

__all__ = ["run_polygons", "study_region"]


def run_polygons(config: Config, data: EventData) -> PolygonSampler:
    """The run's polygons: ``data.counties``, else the synthetic grid of simulated data, else
    the polygon file recorded in the events file (default: the package's 2016 counties)."""
    from .geo import PolygonSampler
    from .simulate import DensityGrid

    if config.data.counties is None and "grid_nx" in data.attrs and "bounds" in data.attrs:
        nx, ny = int(data.attrs["grid_nx"]), int(data.attrs["grid_ny"])
        grid = DensityGrid(values=np.ones((ny, nx)), bounds=tuple(data.attrs["bounds"]))
        return PolygonSampler.from_grid(grid)
    from .counties import load_polygons

    path = config.data.counties
    if path is None and data.attrs.get("counties"):
        path = Path(data.attrs["counties"])
    if path is None and str(data.attrs.get("crs", "lonlat")) != "lonlat":
        raise ConfigError(
            f"{config.source}: {data.source} is in {data.attrs['crs']}, so the default "
            "lon/lat counties do not fit; set data.counties to polygons in that system "
            "(hawkes-prep hhs --polygons-out)"
        )
    return load_polygons(path)[0]


def study_region(
    config: Config, data: EventData, polygons: PolygonSampler | None = None
) -> Region | None:
    """The study region of the censored edge correction, or None (``model.edge: none``).

    Simulated data in a rectangle (or on a grid, which covers it) without ``data.counties``:
    the rectangle of the events file's ``bounds``. Otherwise the union of the run's polygons
    (as :func:`make_resampler` finds them, or ``polygons`` when already loaded), described
    by its boundary segments.
    """
    if config.model.edge == EDGE_NONE:
        return None
    from .engine.region import BoundaryRegion, RectangleRegion

    synthetic = str(data.attrs.get("crs", "")) == "synthetic"
    if config.data.counties is None and synthetic and "bounds" in data.attrs:
        x0, x1, y0, y1 = (float(v) for v in data.attrs["bounds"])
        return RectangleRegion((x0, x1, y0, y1))
    polys = run_polygons(config, data) if polygons is None else polygons
    return BoundaryRegion.from_triangles(
        polys.triangles, area=float(np.sum(polys.tri_area)), label="the run's county polygons"
    )
