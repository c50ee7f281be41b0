"""The county table: one row per county (FIPS, name, state, land area, population, density,
centroid, polygon area), its CSV form, and the study regions' state codes."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data import FrozenAttrs
from ..errors import EventsError, UsageError
from ..vocab import REGION_NAMES
from .sources import atomic_write_text, default_table_path, file_sha256

log = logging.getLogger(__name__)

#: Square metres in one square mile (exact: 1 mile = 1609.344 m).
SQ_METRES_PER_SQ_MILE = 2_589_988.110336
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
