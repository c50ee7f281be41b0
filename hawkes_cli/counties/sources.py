"""Where the county sources are: plotly-geo's Census polygons, delphi-utils' population files
and the shipped tables (found without importing those packages); checksums and versions for
the provenance; the atomic text writer of the tables."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from .. import atomic
from ..errors import EventsError

#: Reference system of the Census cartographic boundary files (NAD83 lon/lat degrees).
CENSUS_CRS = "EPSG:4269"
#: Base name of the county file inside plotly-geo.
PLOTLY_GEO_COUNTIES = "cb_2016_us_county_500k"
#: File name of the shipped county table and of the Connecticut ZIP crosswalk.
TABLE_NAME = "counties.csv"
CT_ZIP_NAME = "ct_zip_county.csv"


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
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_data", package.parent / "data"):
        if (candidate / TABLE_NAME).exists():
            return candidate
    return package.parent / "data"


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


def package_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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
