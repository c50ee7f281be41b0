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
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import atomic, geo
from .data import FrozenAttrs
from .errors import EventsError, UsageError
from .geo import PolygonLayer, PolygonSampler, require_pyogrio
from .vocab import LAND_UNITS, REGION_NAMES

log = logging.getLogger(__name__)

#: Square metres in one square mile (exact: 1 mile = 1609.344 m).
SQ_METRES_PER_SQ_MILE = 2_589_988.110336
#: Reference system of the Census cartographic boundary files (NAD83 lon/lat degrees).
CENSUS_CRS = "EPSG:4269"
#: Base name of the county file inside plotly-geo.
PLOTLY_GEO_COUNTIES = "cb_2016_us_county_500k"
#: File name of the shipped county table and of the Connecticut ZIP crosswalk.
TABLE_NAME = "counties.csv"
CT_ZIP_NAME = "ct_zip_county.csv"

#: USPS abbreviation of each state-level FIPS code (50 states, DC, territories).
STATE_ABBR: dict[str, str] = {
    "01": "AL", "02": "AK", "04": "AZ", "05": "AR", "06": "CA", "08": "CO", "09": "CT",
    "10": "DE", "11": "DC", "12": "FL", "13": "GA", "15": "HI", "16": "ID", "17": "IL",
    "18": "IN", "19": "IA", "20": "KS", "21": "KY", "22": "LA", "23": "ME", "24": "MD",
    "25": "MA", "26": "MI", "27": "MN", "28": "MS", "29": "MO", "30": "MT", "31": "NE",
    "32": "NV", "33": "NH", "34": "NJ", "35": "NM", "36": "NY", "37": "NC", "38": "ND",
    "39": "OH", "40": "OK", "41": "OR", "42": "PA", "44": "RI", "45": "SC", "46": "SD",
    "47": "TN", "48": "TX", "49": "UT", "50": "VT", "51": "VA", "53": "WA", "54": "WV",
    "55": "WI", "56": "WY",
    "60": "AS", "64": "FM", "66": "GU", "68": "MH", "69": "MP", "70": "PW", "72": "PR",
    "74": "UM", "78": "VI",
}  # fmt: skip
#: State-level codes of territories and freely associated states.
TERRITORIES: frozenset[str] = frozenset({"60", "64", "66", "68", "69", "70", "72", "74", "78"})
#: The 50 states and DC.
STATES_AND_DC: frozenset[str] = frozenset(set(STATE_ABBR) - TERRITORIES)
#: Study regions: which state-level codes each one keeps (``None``: every polygon).
REGIONS: dict[str, frozenset[str] | None] = dict(
    zip(REGION_NAMES, (STATES_AND_DC, STATES_AND_DC - {"02", "15"}, None), strict=True)
)
#: County codes in the HHS file that the 2016 polygons know under another code.
FIPS_REMAP: dict[str, str] = {
    "02063": "02261",  # Chugach Census Area      -> Valdez-Cordova (split in 2019)
    "02066": "02261",  # Copper River Census Area -> Valdez-Cordova
    "02270": "02158",  # Wade Hampton             -> Kusilvak (renamed 2015)
    "46113": "46102",  # Shannon County           -> Oglala Lakota (renamed 2015)
    "51515": "51019",  # Bedford city             -> Bedford County (merged 2013)
}
#: Connecticut's planning regions (2022), which replaced its counties as county equivalents.
CT_PLANNING_REGIONS: frozenset[str] = frozenset(f"091{i}0" for i in range(1, 10))

#: Outcome codes of :func:`harmonise_fips`.
FIPS_OK, FIPS_MISSING, FIPS_MALFORMED, FIPS_CT_UNMAPPED = 0, 1, 2, 3

_TABLE_COLUMNS = (
    "fips",
    "name",
    "state",
    "population",
    "aland_m2",
    "land_sq_mi",
    "density",
    "lon",
    "lat",
    "area_deg2",
)


# --------------------------------------------------------------------------------------------
# locating the packaged sources


def _package_dir(module: str, pip_name: str, hint: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise EventsError(f"{pip_name} is not installed ({hint})")
    return Path(next(iter(spec.submodule_search_locations)))


def plotly_geo_file(name: str = PLOTLY_GEO_COUNTIES) -> Path:
    """The ``.shp`` of a Census boundary file inside ``plotly-geo``.

    Raises
    ------
    EventsError
        ``plotly-geo`` is not installed or lacks the file.
    """
    base = _package_dir(
        "_plotly_geo",
        "plotly-geo",
        "pip install plotly-geo==1.0.0, or give a county polygon file with --polygons, or use "
        "--locations centroid",
    )
    path = base / "package_data" / f"{name}.shp"
    if not path.exists():
        raise EventsError(f"{path}: not found in the installed plotly-geo; reinstall plotly-geo")
    return path


def delphi_file(name: str, year: int = 2019) -> Path:
    """A data file of ``delphi-utils`` (e.g. ``fips_pop.csv``), without importing it.

    Raises
    ------
    EventsError
        ``delphi-utils`` is not installed or lacks the file.
    """
    base = _package_dir(
        "delphi_utils",
        "delphi-utils",
        "pip install --no-deps delphi-utils==0.3.24, or give the file with --population",
    )
    path = base / "data" / str(year) / name
    if not path.exists():
        raise EventsError(f"{path}: not found in the installed delphi-utils (version 0.3.24?)")
    return path


def data_dir() -> Path:
    """Where the shipped tables are: ``hawkes_cli/_data`` in a wheel, ``data/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_data", here.parent / "data"):
        if (candidate / TABLE_NAME).exists():
            return candidate
    return here.parent / "data"


def default_table_path() -> Path:
    """The shipped county table (``data/counties.csv``)."""
    return data_dir() / TABLE_NAME


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 8 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# the county table


@dataclass(frozen=True, eq=False)
class CountyTable:
    """One row per county, sorted by FIPS code.

    Attributes
    ----------
    fips : numpy.ndarray, shape (K,), ``<U5``
        Zero-padded county codes, ascending, unique.
    name : numpy.ndarray, shape (K,), str
        County name (Census ``NAME``, no "County" suffix).
    state : numpy.ndarray, shape (K,), ``<U2``
        USPS abbreviation (``""`` if the state code is unknown).
    population : numpy.ndarray, shape (K,), int64
        Persons (Census vintage-2019 estimate).
    aland_m2 : numpy.ndarray, shape (K,), float64
        Land area, square metres (Census ``ALAND``).
    density : numpy.ndarray, shape (K,), float64
        Persons per square mile of land, ``> 0``.
    lon, lat : numpy.ndarray, shape (K,), float64
        Polygon centroid, degrees (NAD83), planar in lon/lat.
    area_deg2 : numpy.ndarray, shape (K,), float64
        Polygon area in degrees squared (lon/lat treated as planar, as the sampler does).
    provenance : Mapping[str, Any]
        Sources, versions and checksums.
    source : str
        Where the table was read from, or ``"<built>"``.
    """

    fips: np.ndarray
    name: np.ndarray
    state: np.ndarray
    population: np.ndarray
    aland_m2: np.ndarray
    density: np.ndarray
    lon: np.ndarray
    lat: np.ndarray
    area_deg2: np.ndarray
    provenance: Mapping[str, Any] = field(default_factory=FrozenAttrs)
    source: str = "<built>"

    def __post_init__(self) -> None:
        fips = np.asarray(self.fips).astype("<U5")
        order = np.argsort(fips, kind="stable")
        k = fips.shape[0]
        arrays: dict[str, np.ndarray] = {"fips": fips[order]}
        for name, dtype in (
            ("name", object),
            ("state", "<U2"),
            ("population", np.int64),
            ("aland_m2", np.float64),
            ("density", np.float64),
            ("lon", np.float64),
            ("lat", np.float64),
            ("area_deg2", np.float64),
        ):
            arr = np.asarray(getattr(self, name)).astype(dtype)
            if arr.shape != (k,):
                raise ValueError(f"CountyTable.{name} has shape {arr.shape}, expected ({k},)")
            arrays[name] = arr[order]
        dup = arrays["fips"][1:][arrays["fips"][1:] == arrays["fips"][:-1]]
        if dup.size:
            raise EventsError(f"county table {self.source}: repeated FIPS codes {list(dup[:5])}")
        bad = ~(np.isfinite(arrays["density"]) & (arrays["density"] > 0))
        if np.any(bad):
            raise EventsError(
                f"county table {self.source}: density must be finite and > 0; not so for "
                f"{list(arrays['fips'][bad][:5])}"
            )
        for name, arr in arrays.items():
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        if not isinstance(self.provenance, FrozenAttrs):
            object.__setattr__(self, "provenance", FrozenAttrs(self.provenance))

    def __len__(self) -> int:
        """Number of counties K."""
        return int(self.fips.shape[0])

    def lookup(self, fips: np.ndarray) -> np.ndarray:
        """Row of each code.

        Parameters
        ----------
        fips : array_like of str, shape (N,)
            Zero-padded codes.

        Returns
        -------
        numpy.ndarray, shape (N,), int64
            Index into the table, ``-1`` where the code is not in it.
        """
        q = np.asarray(fips).astype("<U5")
        if q.size == 0 or len(self) == 0:
            return np.full(q.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.fips, q), len(self) - 1)
        return np.where(self.fips[pos] == q, pos, -1).astype(np.int64)

    def region_mask(self, region: str) -> np.ndarray:
        """Which counties a study region keeps (shape (K,), bool); see :data:`REGIONS`."""
        states = region_states(region)
        if states is None:
            return np.ones(len(self), dtype=bool)
        return np.isin(self.fips.astype("<U2"), sorted(states))

    def write_csv(self, path: Path) -> None:
        """Write the table as UTF-8 CSV, atomically (temporary file + rename).

        Floats are written with ``repr`` so they read back bit for bit.
        """
        buf = io.StringIO(newline="")
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(_TABLE_COLUMNS)
        land_sq_mi = self.aland_m2 / SQ_METRES_PER_SQ_MILE
        for i in range(len(self)):
            writer.writerow(
                [
                    self.fips[i],
                    self.name[i],
                    self.state[i],
                    int(self.population[i]),
                    int(self.aland_m2[i]),
                    f"{land_sq_mi[i]:.3f}",
                    repr(float(self.density[i])),
                    repr(float(self.lon[i])),
                    repr(float(self.lat[i])),
                    repr(float(self.area_deg2[i])),
                ]
            )
        atomic_write_text(Path(path), buf.getvalue())

    @classmethod
    def read_csv(cls, path: Path) -> CountyTable:
        """Read a table written by :meth:`write_csv` (needs no optional package).

        Raises
        ------
        EventsError
            Missing file, missing column or a value that is not a number.
        """
        path = Path(path)
        if not path.exists():
            raise EventsError(
                f"{path}: county table not found; rebuild it with `hawkes-prep counties --out "
                f"{path}` or pass --counties with an existing table"
            )
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows:
            raise EventsError(f"{path}: the county table is empty")
        header = [h.strip() for h in rows[0]]
        missing = [c for c in _TABLE_COLUMNS if c not in header]
        if missing:
            raise EventsError(
                f"{path}: not a county table: missing column(s) {', '.join(missing)}; expected "
                f"{','.join(_TABLE_COLUMNS)} (written by `hawkes-prep counties`)"
            )
        idx = {c: header.index(c) for c in _TABLE_COLUMNS}
        body = [r for r in rows[1:] if r]
        cols = {c: [r[idx[c]] for r in body] for c in _TABLE_COLUMNS}
        numbers: dict[str, np.ndarray] = {}
        for c in ("population", "aland_m2", "density", "lon", "lat", "area_deg2"):
            try:
                numbers[c] = np.array(cols[c], dtype=np.float64)
            except ValueError:
                raise EventsError(f"{path}: column {c!r} holds a non-number") from None
        return cls(
            fips=np.char.zfill(np.array(cols["fips"], dtype="<U5"), 5),
            name=np.array(cols["name"], dtype=object),
            state=np.array(cols["state"], dtype="<U2"),
            population=numbers["population"].astype(np.int64),
            aland_m2=numbers["aland_m2"],
            density=numbers["density"],
            lon=numbers["lon"],
            lat=numbers["lat"],
            area_deg2=numbers["area_deg2"],
            provenance={"table": str(path), "table_sha256": file_sha256(path)},
            source=str(path),
        )


def region_states(region: str) -> frozenset[str] | None:
    """State-level codes a region keeps (``None``: all). Raises UsageError for an unknown one."""
    if region not in REGIONS:
        raise UsageError(f"unknown region {region!r}; choose one of {', '.join(REGIONS)}")
    return REGIONS[region]


def load_county_table(path: Path | None = None) -> CountyTable:
    """The county table at ``path``, or the shipped one (``data/counties.csv``)."""
    table = CountyTable.read_csv(Path(path) if path is not None else default_table_path())
    log.info("county table %s: %d counties", table.source, len(table))
    return table


def atomic_write_text(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (:func:`hawkes_cli.atomic.write_text`).

    Raises
    ------
    EventsError
        The folder is missing or not writable; nothing is left behind.
    """
    try:
        atomic.write_text(path, text)
    except OSError as exc:
        raise EventsError(
            f"{path}: cannot write ({exc.strerror or exc}); check that {path.parent} exists and "
            "is writable"
        ) from None


# --------------------------------------------------------------------------------------------
# building the table from polygons + population


#: How to do without pyogrio, for its error message.
_NO_PYOGRIO = (
    "without it, use the shipped county table (data/counties.csv) and --locations centroid"
)


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
        pyogrio_hint=_NO_PYOGRIO,
    )


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
    try:
        land = np.array([float(v) for v in layer.fields[land_field]], dtype=np.float64)
    except (TypeError, ValueError):
        raise EventsError(f"{layer.path}: field {land_field!r} is not numeric") from None
    aland = land * (SQ_METRES_PER_SQ_MILE if land_units == "sqmi" else 1.0)
    people = np.array([pop.get(k, -1) for k in keys], dtype=np.int64)
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
    keep = (people > 0) & (aland > 0)
    geoms = layer.geoms[keep]
    cent = shapely.centroid(geoms)
    density = people[keep] / (aland[keep] / SQ_METRES_PER_SQ_MILE)
    state = np.array([STATE_ABBR.get(k[:2], "") for k in keys[keep]], dtype="<U2")
    provenance = {
        "polygons": Path(layer.path).name,
        "polygons_sha256": file_sha256(Path(layer.path)),
        "polygons_crs": layer.crs,
        "population": pop_path.name,
        "population_sha256": file_sha256(pop_path),
        "plotly_geo_version": _package_version("plotly-geo") if polygons is None else None,
        "delphi_utils_version": _package_version("delphi-utils") if population is None else None,
        "density": "population / (land area in square miles); 1 sq mi = 2,589,988.110336 m^2",
    }
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
        provenance={k: v for k, v in provenance.items() if v is not None},
    )


# --------------------------------------------------------------------------------------------
# FIPS repairs


def build_ct_zip_table(path: Path | None = None) -> list[tuple[str, str, float]]:
    """Connecticut ZIP -> county (the county holding most of the ZIP's population).

    Parameters
    ----------
    path
        A ``fips,zip,weight`` crosswalk (default: delphi-utils' 2019 ``zip_fips_table.csv``).

    Returns
    -------
    list of (zip, fips, weight)
        One row per Connecticut ZIP code, sorted by ZIP.
    """
    path = Path(path) if path is not None else delphi_file("zip_fips_table.csv")
    best: dict[str, tuple[str, float]] = {}
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        if not {"fips", "zip", "weight"} <= set(reader.fieldnames or []):
            raise EventsError(f"{path}: a ZIP crosswalk needs columns fips, zip, weight")
        for row in reader:
            fips, zip_code = row["fips"].zfill(5), row["zip"].zfill(5)
            if not fips.startswith("09"):
                continue
            weight = float(row["weight"])
            if zip_code not in best or weight > best[zip_code][1]:
                best[zip_code] = (fips, weight)
    return [(z, f, w) for z, (f, w) in sorted(best.items())]


def write_ct_zip_table(rows: list[tuple[str, str, float]], path: Path) -> None:
    """Write :func:`build_ct_zip_table`'s rows as ``zip,fips,weight`` CSV, atomically."""
    lines = ["zip,fips,weight"] + [f"{z},{f},{w!r}" for z, f, w in rows]
    atomic_write_text(Path(path), "\n".join(lines) + "\n")


def load_ct_zip_table(path: Path | None = None) -> dict[str, str]:
    """Connecticut ZIP -> county code, from the shipped ``data/ct_zip_county.csv``.

    Returns an empty mapping (with a WARNING) when the file is missing.
    """
    path = Path(path) if path is not None else data_dir() / CT_ZIP_NAME
    if not path.exists():
        log.warning("%s not found: Connecticut planning-region codes cannot be mapped", path)
        return {}
    with open(path, encoding="utf-8", newline="") as handle:
        return {r["zip"].zfill(5): r["fips"].zfill(5) for r in csv.DictReader(handle)}


@dataclass(frozen=True)
class FipsResult:
    """Outcome of :func:`harmonise_fips`.

    Attributes
    ----------
    fips : numpy.ndarray, shape (N,), ``<U5``
        Repaired code (``""`` where ``status`` is not :data:`FIPS_OK`).
    status : numpy.ndarray, shape (N,), int8
        :data:`FIPS_OK`, :data:`FIPS_MISSING`, :data:`FIPS_MALFORMED` or
        :data:`FIPS_CT_UNMAPPED`.
    repairs : dict
        How many rows each repair touched: ``zero_padded``, ``remapped`` (``{"old->new": n}``),
        ``ct_zip`` (planning region mapped through the ZIP code).
    """

    fips: np.ndarray
    status: np.ndarray
    repairs: dict[str, Any]


def _clean_code(text: str) -> tuple[str, int, bool]:
    """One raw FIPS text -> (code, status, was_padded)."""
    t = text.strip()
    if t.endswith(".0"):  # written through a spreadsheet as a float
        t = t[:-2]
    if not t:
        return "", FIPS_MISSING, False
    if not (t.isascii() and t.isdigit() and len(t) <= 5):
        return "", FIPS_MALFORMED, False
    return t.zfill(5), FIPS_OK, len(t) < 5


def harmonise_fips(
    raw: np.ndarray, zips: np.ndarray | None = None, ct_zip: Mapping[str, str] | None = None
) -> FipsResult:
    """Map the county codes of the HHS file onto the 2016 county polygons.

    Zero-pads unpadded integers (``1001`` -> ``01001``; a trailing ``.0`` is dropped), applies
    :data:`FIPS_REMAP`, and maps Connecticut planning regions (``09110``..``09190``) to the old
    counties through each row's ZIP code and ``ct_zip`` (rows whose ZIP is not found get
    :data:`FIPS_CT_UNMAPPED`).

    Parameters
    ----------
    raw : numpy.ndarray, shape (N,), str
        ``fips_code`` as text.
    zips : numpy.ndarray, shape (N,), str, optional
        ``zip`` as text (needed only for Connecticut planning regions).
    ct_zip
        ZIP -> county code (default: :func:`load_ct_zip_table`, loaded only if needed).

    Returns
    -------
    FipsResult
    """
    raw = np.asarray(raw).astype(str)
    uniq, inv = np.unique(raw, return_inverse=True)
    codes = np.empty(uniq.size, dtype="<U5")
    status = np.empty(uniq.size, dtype=np.int8)
    padded = np.zeros(uniq.size, dtype=bool)
    for i, text in enumerate(uniq.tolist()):
        codes[i], status[i], padded[i] = _clean_code(text)
    fips = codes[inv]
    st = status[inv]
    repairs: dict[str, Any] = {"zero_padded": int(np.count_nonzero(padded[inv]))}
    remapped: dict[str, int] = {}
    for old, new in FIPS_REMAP.items():
        hit = fips == old
        if np.any(hit):
            fips[hit] = new
            remapped[f"{old}->{new}"] = int(hit.sum())
    repairs["remapped"] = remapped
    ct = np.isin(fips, sorted(CT_PLANNING_REGIONS))
    n_ct = 0
    if np.any(ct):
        table = ct_zip if ct_zip is not None else load_ct_zip_table()
        rows = np.flatnonzero(ct)
        zz = (
            np.array([""] * rows.size)
            if zips is None
            else np.char.zfill(np.char.strip(np.asarray(zips)[rows].astype(str)), 5)
        )
        mapped = np.array([table.get(z, "") for z in zz.tolist()], dtype="<U5")
        ok = mapped != ""
        fips[rows] = mapped
        st[rows[~ok]] = FIPS_CT_UNMAPPED
        n_ct = int(ok.sum())
    repairs["ct_zip"] = n_ct
    fips[st != FIPS_OK] = ""
    return FipsResult(fips=fips, status=st, repairs=repairs)


# --------------------------------------------------------------------------------------------
# polygons for sampling


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
    pyogrio = require_pyogrio(f"{path}: writing county polygons", _NO_PYOGRIO)
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


__all__ = [
    "CENSUS_CRS",
    "FIPS_REMAP",
    "REGIONS",
    "SQ_METRES_PER_SQ_MILE",
    "CountyTable",
    "FipsResult",
    "PolygonLayer",
    "build_county_table",
    "build_ct_zip_table",
    "default_table_path",
    "harmonise_fips",
    "load_county_table",
    "load_ct_zip_table",
    "load_polygons",
    "read_polygon_layer",
    "write_polygons",
]
