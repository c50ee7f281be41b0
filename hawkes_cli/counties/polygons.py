"""County polygon files: read (plotly-geo's Census counties by default), as a sampler,
reprojected, written (GeoPackage or shapefile)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import atomic, geo
from ..errors import EventsError, UsageError
from ..geo import PolygonLayer, PolygonSampler, require_pyogrio
from .sources import CENSUS_CRS, PLOTLY_GEO_COUNTIES, plotly_geo_file

#: How to do without pyogrio, for its error message.
NO_PYOGRIO = "without it, use the shipped county table (data/counties.csv) and --locations centroid"


def _with_defaults(
    path: Path | None, crs: str | None, encoding: str | None
) -> tuple[Path, str | None, str | None]:
    """Default to plotly-geo's counties; set its CRS and encoding (no .prj, no .cpg ship)."""
    path = plotly_geo_file() if path is None else Path(path)
    if path.name == f"{PLOTLY_GEO_COUNTIES}.shp":
        crs, encoding = crs or CENSUS_CRS, encoding or "utf-8"
    return path, crs, encoding


def read_polygon_layer(
    path: Path | None = None,
    *,
    key_field: str = "GEOID",
    fields: tuple[str, ...] = (),
    crs: str | None = None,
    encoding: str | None = None,
) -> PolygonLayer:
    """Read county polygons and some attribute fields (needs pyogrio and shapely).

    :func:`hawkes_cli.geo.read_polygon_layer` with plotly-geo's counties as the default file and
    error messages that name the command-line options.

    Parameters
    ----------
    path
        Shapefile / GeoPackage; ``None`` reads plotly-geo's 2016 Census counties (with
        ``crs="EPSG:4269"`` and ``encoding="utf-8"`` unless given).
    key_field
        Field with the 5-digit FIPS code.
    fields
        Further fields to return (e.g. ``NAME``, ``ALAND``).
    crs, encoding
        Reference system and attribute encoding when the file does not declare them.

    Raises
    ------
    EventsError, UsageError
        As in :func:`hawkes_cli.geo.read_polygon_layer`.
    """
    path, crs, encoding = _with_defaults(path, crs, encoding)
    return geo.read_polygon_layer(
        path,
        key_field=key_field,
        fields=fields,
        crs=crs,
        encoding=encoding,
        field_hint="choose them with --key-field / --name-field / --land-field",
        pyogrio_hint=NO_PYOGRIO,
    )


def load_polygons(
    path: Path | None = None,
    *,
    key_field: str = "GEOID",
    crs: str | None = None,
    encoding: str | None = None,
    to_crs: str | None = None,
) -> tuple[Any, PolygonLayer | None]:
    """County polygons as a :class:`~hawkes_cli.geo.PolygonSampler`.

    Parameters
    ----------
    path
        Shapefile / GeoPackage (default: plotly-geo's 2016 Census counties, EPSG:4269).
    key_field, crs, encoding
        As in :func:`read_polygon_layer`.
    to_crs
        Reproject to this reference system first (needs pyproj), e.g. ``"EPSG:5070"``.

    Returns
    -------
    sampler : PolygonSampler
        Keyed by zero-padded FIPS code; its ``crs`` is the coordinates' reference system.
    layer : PolygonLayer or None
        The (reprojected) polygons when ``to_crs`` was given (to write them out), else None.
    """
    layer = read_polygon_layer(path, key_field=key_field, crs=crs, encoding=encoding)
    if to_crs is None:
        return PolygonSampler.from_layer(layer), None
    layer = reproject_layer(layer, to_crs)
    keys = np.char.zfill(layer.keys.astype("<U5"), 5)
    return PolygonSampler.from_layer(replace(layer, keys=keys)), layer


def _transformer(src: str | None, dst: str) -> Any:
    try:
        import pyproj
    except ImportError:
        raise UsageError(
            f"projecting to {dst} needs pyproj (pip install pyproj); or leave the coordinates "
            "in lon/lat degrees"
        ) from None
    if src is None:
        raise UsageError(f"cannot project to {dst}: the polygons declare no reference system")
    try:
        target = pyproj.CRS.from_user_input(dst)
    except pyproj.exceptions.CRSError as exc:
        raise UsageError(f"unknown reference system {dst!r}: {exc}") from None
    if not target.is_projected:
        raise UsageError(f"{dst} is not a projected reference system (e.g. EPSG:5070)")
    return pyproj.Transformer.from_crs(src, target, always_xy=True)


def reproject_layer(layer: PolygonLayer, to_crs: str) -> PolygonLayer:
    """The layer's polygons in another (projected) reference system (needs pyproj)."""
    import shapely

    tr = _transformer(layer.crs, to_crs)

    def fn(xy: np.ndarray) -> np.ndarray:
        x, y = tr.transform(xy[:, 0], xy[:, 1])
        return np.column_stack([x, y])

    geoms = shapely.transform(layer.geoms, fn)
    return PolygonLayer(
        keys=layer.keys, geoms=geoms, fields=layer.fields, crs=to_crs, path=layer.path
    )


def project_points(
    x: np.ndarray, y: np.ndarray, to_crs: str, src: str = CENSUS_CRS
) -> tuple[np.ndarray, np.ndarray]:
    """Project lon/lat points (degrees) to ``to_crs`` (needs pyproj); shapes (N,) each."""
    tr = _transformer(src, to_crs)
    px, py = tr.transform(np.asarray(x, float), np.asarray(y, float))
    return np.asarray(px, dtype=np.float64), np.asarray(py, dtype=np.float64)


#: The files of a shapefile that :func:`write_polygons` writes.
_SHAPEFILE_PARTS = (".shp", ".shx", ".dbf", ".prj", ".cpg")


def write_polygons(
    layer: PolygonLayer, path: Path, fields: Mapping[str, np.ndarray] | None = None
) -> None:
    """Write polygons (key field ``GEOID``) to a GeoPackage or shapefile, atomically.

    The driver follows the suffix (``.gpkg``, ``.shp``); use it as ``data.counties`` in a
    ``hawkes-run`` config so the cut posterior resamples in the same coordinates.
    ``fields`` adds attribute columns, one value per polygon (e.g. the goodness-of-fit
    residuals, for a GIS).
    """
    path = Path(path)
    pyogrio = require_pyogrio(f"{path}: writing county polygons", NO_PYOGRIO)
    import shapely

    suffix = path.suffix.lower()
    if suffix not in (".gpkg", ".shp"):
        raise UsageError(f"{path}: polygon output must be .gpkg or .shp")
    keys = np.char.zfill(layer.keys.astype("<U5"), 5).astype(object)
    # The driver needs the real suffix, so the file (a shapefile: its parts) is written under its
    # own name in a private folder beside ``path``, then each part replaces its target atomically.
    try:
        with tempfile.TemporaryDirectory(prefix=f".{path.stem}.", dir=path.parent) as folder:
            staged = Path(folder) / f"{path.stem}{suffix}"
            pyogrio.raw.write(
                staged,
                geometry=shapely.to_wkb(layer.geoms),
                field_data=[keys, *(np.asarray(v) for v in (fields or {}).values())],
                fields=["GEOID", *(fields or {})],
                layer="counties" if suffix == ".gpkg" else None,
                geometry_type="MultiPolygon",
                crs=layer.crs,
                promote_to_multi=True,
                encoding="UTF-8",
            )
            if suffix == ".gpkg":
                moves = [(staged, path)]
            else:
                moves = [(staged.with_suffix(e), path.with_suffix(e)) for e in _SHAPEFILE_PARTS]
            for part, target in moves:
                if part.exists():
                    with atomic.replacing(target) as tmp:
                        part.replace(tmp)
    except Exception as exc:
        if isinstance(exc, (EventsError, UsageError)):
            raise
        raise EventsError(f"{path}: cannot write polygons: {exc}") from None
