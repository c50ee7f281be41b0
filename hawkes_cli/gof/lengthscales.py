"""Effective spatial lengthscale per county (``lengthscales.csv``, and columns of
``counties.gpkg``): ``sigma_x`` (model 1) or ``sigma_x / sqrt(density)`` (model 2), in miles
for lon/lat data (the published conversion, :func:`hawkes_cli.diagnostics.county_factor`) and
in the data's coordinate units otherwise (the synthetic grid)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .files import write_csv

#: Unit of the lengthscales of lon/lat data, and of data in other coordinates.
MILES, COORD_UNITS = "miles", "coord units"


@dataclass(frozen=True, eq=False)
class Lengthscales:
    """Lengthscale per polygon over every retained draw of ``sigma_x``.

    Attributes
    ----------
    keys : (K,) str
        Polygon keys.
    unit
        :data:`MILES` or :data:`COORD_UNITS`.
    latitude : (K,) float64 or None
        Latitude of each polygon's centroid (lon/lat data only).
    density : (K,) float64
        Persons per square mile (model 2; NaN for model 1 or where unknown).
    mean, q025, q975 : (K,) float64
        Posterior mean and 2.5%, 97.5% quantiles (NaN where the density is unknown).
    """

    keys: np.ndarray
    unit: str
    latitude: np.ndarray | None
    density: np.ndarray
    mean: np.ndarray
    q025: np.ndarray
    q975: np.ndarray

    @property
    def prefix(self) -> str:
        """Column-name prefix of the values: ``miles`` or ``coord_units``."""
        return self.unit.replace(" ", "_")

    def columns(self) -> Mapping[str, np.ndarray]:
        """The value columns, named with their unit (e.g. ``miles_mean``)."""
        p = self.prefix
        return {f"{p}_mean": self.mean, f"{p}_q025": self.q025, f"{p}_q975": self.q975}


def polygon_density(layer: Any, data: Any, event_poly: np.ndarray, use_table: bool) -> np.ndarray:
    """Population density per polygon (persons per square mile): the county table's when
    ``use_table`` (real counties), else (or where it has none) the mean density of the
    polygon's events; (K,) float64, NaN where neither is known."""
    k = len(layer.keys)
    density = np.full(k, np.nan)
    if use_table:
        from ..counties import load_county_table

        table = load_county_table()
        row = table.lookup(np.asarray(layer.keys).astype("<U5"))
        density = np.where(row >= 0, table.density[np.maximum(row, 0)], np.nan)
    if data is not None and data.density is not None:
        ok = event_poly >= 0
        sums = np.bincount(event_poly[ok], weights=data.density[ok], minlength=k)
        n = np.bincount(event_poly[ok], minlength=k)
        with np.errstate(invalid="ignore", divide="ignore"):
            density = np.where(np.isnan(density), sums / n, density)
    return density


def county_lengthscales(
    layer: Any,
    model: int,
    sigma_x: np.ndarray,
    data: Any,
    event_poly: np.ndarray,
    *,
    lonlat: bool = True,
) -> Lengthscales:
    """The lengthscale of every polygon of ``layer`` (module docstring).

    For lon/lat data the latitude is that of the polygon's centroid and the density comes
    from the county table, else the mean density of the polygon's events; in other
    coordinates the density is the mean of its events' (a synthetic cell's own).
    """
    import shapely

    from ..diagnostics.derived import county_factor

    k = len(layer.keys)
    density = polygon_density(layer, data, event_poly, lonlat) if model == 2 else np.full(k, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_unit = np.where(density > 0, 1.0 / np.sqrt(density), np.nan) if model == 2 else 1.0
    latitude = None
    factor = np.broadcast_to(np.asarray(per_unit, dtype=np.float64), (k,))
    if lonlat:
        latitude = shapely.get_y(shapely.centroid(np.asarray(layer.geoms, dtype=object)))
        factor = np.array(
            [
                county_factor(model, float(latitude[i]), float(density[i]))
                if model == 1 or density[i] > 0
                else np.nan
                for i in range(k)
            ]
        )
    q = np.quantile(sigma_x, [0.025, 0.975])
    return Lengthscales(
        keys=np.asarray(layer.keys),
        unit=MILES if lonlat else COORD_UNITS,
        latitude=latitude,
        density=density,
        mean=float(np.mean(sigma_x)) * factor,
        q025=q[0] * factor,
        q975=q[1] * factor,
    )


def write_lengthscales(out_dir: Path, ls: Lengthscales) -> Path:
    """``lengthscales.csv``: key, latitude (lon/lat data), density, and the posterior mean and
    95% interval in the unit its column names say."""
    table: dict[str, tuple[np.ndarray, str]] = {"fips": (ls.keys, "")}
    if ls.latitude is not None:
        table["latitude"] = (ls.latitude, "%.5f")
    table["density"] = (ls.density, "%.6g")
    table.update({name: (values, "%.5g") for name, values in ls.columns().items()})
    header = list(table)
    columns = [values for values, _ in table.values()]
    fmts = [fmt for _, fmt in table.values()]
    return write_csv(out_dir / "lengthscales.csv", header, columns, fmts)
