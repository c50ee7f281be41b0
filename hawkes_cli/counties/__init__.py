"""US counties from real sources: polygons, population, density; FIPS repairs (DESIGN section 4).

Sources (both install from PyPI, no network at run time):

- polygons: the Census 2016 cartographic boundary file ``cb_2016_us_county_500k`` shipped in the
  ``plotly-geo`` package (3233 counties: 50 states, DC, PR, AS, GU, MP, VI). It has no ``.prj``
  (coordinates are NAD83 lon/lat degrees, EPSG:4269) and a UTF-8 ``.dbf`` without a ``.cpg``;
  :func:`load_polygons` sets both. A user-supplied shapefile or GeoPackage works too.
- population: Census vintage-2019 estimates in ``delphi-utils``' ``data/2019/fips_pop.csv``
  (read as a file; ``delphi-utils`` is never imported).

Density is persons per square mile of *land*: ``pop / (ALAND / 2_589_988.110336)``.

:class:`CountyTable` is the small derived table (one row per county: FIPS, name, state, land
area, population, density, centroid, polygon area). :func:`build_county_table` makes it from the
sources; a copy ships in ``data/counties.csv`` (see ``data/COUNTIES.md``) so that
:func:`load_county_table` gives densities without ``plotly-geo``, ``pyogrio`` or
``delphi-utils``.

:func:`harmonise_fips` maps the county codes found in the HHS facility file onto the 2016
polygons (zero-padding, renamed/merged counties, Connecticut planning regions via ZIP code).

Optional packages (``pyogrio``, ``plotly-geo``, ``delphi-utils``, ``pyproj``) are looked up or
imported inside the functions that need them; a missing one is an
:class:`~hawkes_cli.errors.EventsError` (or :class:`~hawkes_cli.errors.UsageError` for a bad
option) that says what to install or which option avoids it.

Modules, each importing only those above it: :mod:`.sources` (where the packaged sources
are), :mod:`.table` (:class:`CountyTable`, regions), :mod:`.fips` (FIPS repairs),
:mod:`.polygons` (county polygon files: read, reproject, write), :mod:`.build`
(:func:`build_county_table`).
"""

from __future__ import annotations

from ..geo import PolygonLayer
from .build import build_county_table, read_population
from .fips import (
    CT_PLANNING_REGIONS,
    FIPS_CT_UNMAPPED,
    FIPS_MALFORMED,
    FIPS_MISSING,
    FIPS_OK,
    FIPS_REMAP,
    FipsResult,
    build_ct_zip_table,
    harmonise_fips,
    load_ct_zip_table,
    write_ct_zip_table,
)
from .polygons import (
    load_polygons,
    project_points,
    read_polygon_layer,
    reproject_layer,
    write_polygons,
)
from .sources import (
    CENSUS_CRS,
    CT_ZIP_NAME,
    PLOTLY_GEO_COUNTIES,
    TABLE_NAME,
    data_dir,
    default_table_path,
    delphi_file,
    file_sha256,
    plotly_geo_file,
)
from .table import (
    REGIONS,
    SQ_METRES_PER_SQ_MILE,
    STATE_ABBR,
    STATES_AND_DC,
    TERRITORIES,
    CountyTable,
    load_county_table,
    region_states,
)

__all__ = [
    "CENSUS_CRS",
    "CT_PLANNING_REGIONS",
    "CT_ZIP_NAME",
    "FIPS_CT_UNMAPPED",
    "FIPS_MALFORMED",
    "FIPS_MISSING",
    "FIPS_OK",
    "FIPS_REMAP",
    "PLOTLY_GEO_COUNTIES",
    "REGIONS",
    "SQ_METRES_PER_SQ_MILE",
    "STATES_AND_DC",
    "STATE_ABBR",
    "TABLE_NAME",
    "TERRITORIES",
    "CountyTable",
    "FipsResult",
    "PolygonLayer",
    "build_county_table",
    "build_ct_zip_table",
    "data_dir",
    "default_table_path",
    "delphi_file",
    "file_sha256",
    "harmonise_fips",
    "load_county_table",
    "load_ct_zip_table",
    "load_polygons",
    "plotly_geo_file",
    "project_points",
    "read_polygon_layer",
    "read_population",
    "region_states",
    "reproject_layer",
    "write_ct_zip_table",
    "write_polygons",
]
