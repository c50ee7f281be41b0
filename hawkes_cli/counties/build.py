"""Building the county table from its sources: county polygons (land area, name, centroid)
and a population file."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EventsError, UsageError
from ..geo import PolygonLayer
from ..vocab import LAND_UNITS
from .polygons import read_polygon_layer
from .sources import delphi_file, file_sha256, package_version
from .table import SQ_METRES_PER_SQ_MILE, STATE_ABBR, CountyTable

log = logging.getLogger(__name__)


def read_population(path: Path | None = None) -> dict[str, int]:
    """County population from a ``fips,pop`` CSV (default: delphi-utils' 2019 estimates).

    Returns
    -------
    dict
        Zero-padded FIPS code -> persons.

    Raises
    ------
    EventsError
        delphi-utils missing (when no path is given), unreadable file, missing columns or a value
        that is not a whole number.
    """
    path = Path(path) if path is not None else delphi_file("fips_pop.csv")
    if not path.exists():
        raise EventsError(f"{path}: population file not found")
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        fields = [f.strip().lower() for f in reader.fieldnames or []]
        if "fips" not in fields or "pop" not in fields:
            raise EventsError(
                f"{path}: a population file needs columns 'fips' and 'pop'; found "
                f"{', '.join(fields) or 'none'}"
            )
        out: dict[str, int] = {}
        for line, row in enumerate(reader, start=2):
            row = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
            try:
                out[row["fips"].zfill(5)] = int(float(row["pop"]))
            except ValueError:
                raise EventsError(
                    f"{path}: line {line}: population {row['pop']!r} is not a number"
                ) from None
    return out


def build_county_table(
    polygons: Path | None = None,
    population: Path | None = None,
    *,
    key_field: str = "GEOID",
    name_field: str = "NAME",
    land_field: str = "ALAND",
    land_units: str = "m2",
    crs: str | None = None,
    encoding: str | None = None,
) -> CountyTable:
    """Build the county table from a polygon file and a population file.

    Parameters
    ----------
    polygons
        County polygons in lon/lat degrees (default: plotly-geo's 2016 Census counties).
    population
        ``fips,pop`` CSV (default: delphi-utils' 2019 estimates).
    key_field, name_field, land_field
        Attribute fields with the FIPS code, the name and the land area.
    land_units
        Units of ``land_field``: ``"m2"`` (Census ``ALAND``) or ``"sqmi"`` (``CENSUSAREA``).
    crs, encoding
        For files that do not declare them.

    Returns
    -------
    CountyTable
        Counties with a population and positive land area; the others are left out with a
        WARNING that names them.
    """
    if land_units not in LAND_UNITS:
        raise UsageError(f"land units must be 'm2' or 'sqmi', not {land_units!r}")
    import shapely

    layer = read_polygon_layer(
        polygons, key_field=key_field, fields=(name_field, land_field), crs=crs, encoding=encoding
    )
    pop_path = Path(population) if population is not None else delphi_file("fips_pop.csv")
    pop = read_population(pop_path)
    keys = np.char.zfill(layer.keys.astype("<U5"), 5)
    aland = _land_m2(layer, land_field, land_units)
    people = np.array([pop.get(k, -1) for k in keys], dtype=np.int64)
    keep = _kept(keys, people, aland, pop_path)
    geoms = layer.geoms[keep]
    cent = shapely.centroid(geoms)
    density = people[keep] / (aland[keep] / SQ_METRES_PER_SQ_MILE)
    state = np.array([STATE_ABBR.get(k[:2], "") for k in keys[keep]], dtype="<U2")
    provenance = _provenance(layer, pop_path, polygons is None, population is None)
    log.info("county table: %d counties (of %d polygons)", int(keep.sum()), keys.size)
    return CountyTable(
        fips=keys[keep],
        name=np.array([str(v) for v in layer.fields[name_field][keep]], dtype=object),
        state=state,
        population=people[keep],
        aland_m2=aland[keep],
        density=density,
        lon=shapely.get_x(cent),
        lat=shapely.get_y(cent),
        area_deg2=shapely.area(geoms),
        provenance=provenance,
    )


def _land_m2(layer: PolygonLayer, land_field: str, land_units: str) -> np.ndarray:
    """Land area per polygon in square metres, (K,) float64.

    Raises
    ------
    EventsError
        The field is not numeric.
    """
    try:
        land = np.array([float(v) for v in layer.fields[land_field]], dtype=np.float64)
    except (TypeError, ValueError):
        raise EventsError(f"{layer.path}: field {land_field!r} is not numeric") from None
    return land * (SQ_METRES_PER_SQ_MILE if land_units == "sqmi" else 1.0)


def _kept(keys: np.ndarray, people: np.ndarray, aland: np.ndarray, pop_path: Path) -> np.ndarray:
    """Which polygons have people and land, (K,) bool; a WARNING names the others."""
    no_pop = keys[people <= 0]
    no_land = keys[(people > 0) & ~(aland > 0)]
    if no_pop.size:
        log.warning(
            "%d county polygon(s) have no (or zero) population in %s and are left out (no "
            "density): %s",
            no_pop.size,
            pop_path,
            ", ".join(no_pop[:10]),
        )
    if no_land.size:
        log.warning("%d county polygon(s) have no land area and are left out: %s",
                    no_land.size, ", ".join(no_land[:10]))  # fmt: skip
    return (people > 0) & (aland > 0)


def _provenance(
    layer: PolygonLayer, pop_path: Path, plotly_geo: bool, delphi: bool
) -> dict[str, Any]:
    """Sources of the table, with checksums (and the packages' versions when they were the
    sources)."""
    provenance = {
        "polygons": Path(layer.path).name,
        "polygons_sha256": file_sha256(Path(layer.path)),
        "polygons_crs": layer.crs,
        "population": pop_path.name,
        "population_sha256": file_sha256(pop_path),
        "plotly_geo_version": package_version("plotly-geo") if plotly_geo else None,
        "delphi_utils_version": package_version("delphi-utils") if delphi else None,
        "density": "population / (land area in square miles); 1 sq mi = 2,589,988.110336 m^2",
    }
    return {k: v for k, v in provenance.items() if v is not None}
