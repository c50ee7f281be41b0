"""FIPS repairs: the county codes of the HHS facility file mapped onto the 2016 county
polygons (zero-padding, renamed and merged counties, Connecticut's planning regions through
each row's ZIP code)."""

from __future__ import annotations

import csv
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EventsError
from .sources import CT_ZIP_NAME, atomic_write_text, data_dir, delphi_file

log = logging.getLogger(__name__)

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
