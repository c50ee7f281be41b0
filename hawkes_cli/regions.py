"""The study region of a run: its polygons (a county file, the synthetic grid, or the package's
counties) and, for the censored edge correction, the region whose trigger mass counts.

Shared by the chains (:mod:`hawkes_cli.resample`, :mod:`hawkes_cli.runner.setup`) and the
diagnosis (:mod:`hawkes_cli.diagnostics.systematic`), so both see the same region.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import Config
from .data import EventData
from .errors import ConfigError
from .vocab import EDGE_NONE

if TYPE_CHECKING:
    from .engine.region import Region
    from .geo import PolygonSampler

__all__ = ["polygons_for", "region_for", "region_of", "run_polygons", "study_region"]


def run_polygons(config: Config, data: EventData) -> PolygonSampler:
    """The run's polygons: ``data.counties``, else the synthetic grid of simulated data, else
    the polygon file recorded in the events file (default: the package's 2016 counties)."""
    return polygons_for(data, config.data.counties, where=str(config.source))


def polygons_for(data: EventData, counties: Path | None = None, *, where: str = "") -> Any:
    """The polygons of ``data``: ``counties`` (a polygon file), else the synthetic grid of
    simulated data, else the polygon file recorded in the events file (default: the
    package's 2016 counties); ``where`` names the config for messages."""
    from .geo import PolygonSampler
    from .simulate import DensityGrid

    if counties is None and "grid_nx" in data.attrs and "bounds" in data.attrs:
        nx, ny = int(data.attrs["grid_nx"]), int(data.attrs["grid_ny"])
        grid = DensityGrid(values=np.ones((ny, nx)), bounds=tuple(data.attrs["bounds"]))
        return PolygonSampler.from_grid(grid)
    from .counties import load_polygons

    path = counties
    if path is None and data.attrs.get("counties"):
        path = Path(data.attrs["counties"])
    if path is None and str(data.attrs.get("crs", "lonlat")) != "lonlat":
        raise ConfigError(
            f"{where or data.source}: {data.source} is in {data.attrs['crs']}, so the default "
            "lon/lat counties do not fit; set data.counties to polygons in that system "
            "(hawkes-prep hhs --polygons-out)"
        )
    return load_polygons(path)[0]


def study_region(
    config: Config, data: EventData, polygons: PolygonSampler | None = None
) -> Region | None:
    """The study region of the censored edge correction, or None (``model.edge: none``);
    see :func:`region_of`."""
    if config.model.edge == EDGE_NONE:
        return None
    return region_of(config, data, polygons)


def region_of(config: Config, data: EventData, polygons: PolygonSampler | None = None) -> Region:
    """The run's study region, whatever its ``model.edge``: :func:`region_for` with the run's
    ``data.counties``."""
    return region_for(data, config.data.counties, polygons, where=str(config.source))


def region_for(
    data: EventData,
    counties: Path | None = None,
    polygons: PolygonSampler | None = None,
    *,
    where: str = "",
) -> Region:
    """The study region of ``data``.

    Simulated data in a rectangle (or on a grid, which covers it) without ``counties``: the
    rectangle of the events file's ``bounds``. Otherwise the union of the polygons
    (:func:`polygons_for`, or ``polygons`` when already loaded), described by its boundary
    segments.
    """
    from .engine.region import BoundaryRegion, RectangleRegion

    synthetic = str(data.attrs.get("crs", "")) == "synthetic"
    if counties is None and synthetic and "bounds" in data.attrs:
        x0, x1, y0, y1 = (float(v) for v in data.attrs["bounds"])
        return RectangleRegion((x0, x1, y0, y1))
    polys = polygons_for(data, counties, where=where) if polygons is None else polygons
    return BoundaryRegion.from_triangles(
        polys.triangles, area=float(np.sum(polys.tri_area)), label="the county polygons"
    )
