"""HHS facility file -> case table: the paper's data step (DESIGN sections 1 and 4).

Input: the public HHS "COVID-19 Reported Patient Impact and Hospital Capacity by Facility" CSV
(one row per hospital and ``collection_week``; ~1,045,406 rows x 128 columns), in either
spelling of its column names (bulk CSV ``..._18-19_...``, ``80+``, ``ED``; API ``..._18_19_...``,
``80``, ``ed``): columns are selected by :func:`normalise_column`, never by position.

Steps (:func:`prepare_hhs`):

1. Read only the needed columns as text (``pyarrow.csv`` when installed, else the stdlib
   :mod:`csv` module; both give the same text, so the same output).
2. Classify every row; a row is dropped for the first reason that applies, in the order of
   :data:`REASONS` (bad date, duplicate, outside the date window, FIPS problems, count problems).
   ``collection_week`` may be ``YYYY/MM/DD``, ``YYYY-MM-DD`` or ``YYYY-MM-DDT00:00:00.000``.
3. The week's count is the sum of the count columns (default: new confirmed admissions, adult +
   pediatric). ``-999999`` (suppressed, a true value of 1 to 3) is imputed with ``suppressed``
   (default 1.5); a blank column adds 0 (a row with every column blank is dropped). A fractional
   total ``c`` becomes a whole count by unbiased random rounding: ``floor(c) + 1`` with
   probability ``c - floor(c)``, else ``floor(c)`` -- so with the default one suppressed column
   gives 1 or 2 cases, each with probability 1/2 (1.5 in expectation).
4. Each case falls on a uniformly random day of its row's 7-day window: ``collection_week`` to
   ``+6`` days, shifted one day earlier for ``previous_day_*`` columns (admissions reported each
   day are those of the day before). With ``start``/``end`` only days inside ``[start, end]``
   count: a row whose window overlaps by ``k`` days keeps ``Binomial(c, k/7)`` cases, on uniform
   days of the overlap -- the same as expanding every case and dropping those outside.
5. Down-sampling: ``n`` of the ``M`` expanded cases, uniformly without replacement (all of them
   when ``n = 0`` or ``n >= M``). Cases are never materialised: the chosen case indices are mapped
   to rows through the cumulative counts, so memory is O(rows + n).
6. Each case gets its county (FIPS repairs in :func:`hawkes_cli.counties.harmonise_fips`), the
   county's population density (persons per square mile) and an initial location drawn
   uniformly inside the county polygon (:class:`hawkes_cli.geo.PolygonSampler`), or the county
   centroid with ``locations="centroid"`` (no polygon packages needed).

Time is in days since ``origin`` (default: ``start``, else the first day of the earliest kept
row's window); whole days unless ``jitter`` adds a uniform fraction of a day.

Randomness: ``SeedSequence(seed).spawn(4)`` gives independent streams for rounding, window
overlap, down-sampling (+ days, jitter) and locations, so the same file, options and seed give
the same events, whichever CSV engine read the file.

Output: an events file (:func:`hawkes_cli.data.save_events`; HDF5 keeps the metadata listed in
:func:`prepare_hhs` and a ``/dropped`` group with every dropped row), written atomically: a
failure leaves no partial file.
"""

from __future__ import annotations

import csv
import datetime as dt
import difflib
import gzip
import importlib.util
import json
import logging
import math
import operator
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from . import __version__
from .counties import (
    CENSUS_CRS,
    FIPS_CT_UNMAPPED,
    FIPS_MALFORMED,
    FIPS_MISSING,
    SQ_METRES_PER_SQ_MILE,
    TERRITORIES,
    file_sha256,
    harmonise_fips,
    load_county_table,
    load_polygons,
    project_points,
    region_states,
    write_polygons,
)
from .data import HDF5_SUFFIXES, EventData, save_events
from .errors import EventsError, UsageError

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# --------------------------------------------------------------------------------------------
# the file's schema

_ADULT_AGES = ("18-19", "20-29", "30-39", "40-49", "50-59", "60-69", "70-79", "80+", "unknown")


def _facility_columns() -> tuple[str, ...]:
    """The 128 columns of the final facility file, bulk-CSV spelling, in file order."""
    avg_sum = (
        "total_beds", "all_adult_hospital_beds", "all_adult_hospital_inpatient_beds",
        "inpatient_beds_used", "all_adult_hospital_inpatient_bed_occupied",
        "inpatient_beds_used_covid",
        "total_adult_patients_hospitalized_confirmed_and_suspected_covid",
        "total_adult_patients_hospitalized_confirmed_covid",
        "total_pediatric_patients_hospitalized_confirmed_and_suspected_covid",
        "total_pediatric_patients_hospitalized_confirmed_covid", "inpatient_beds",
        "total_icu_beds", "total_staffed_adult_icu_beds", "icu_beds_used",
        "staffed_adult_icu_bed_occupancy",
        "staffed_icu_adult_patients_confirmed_and_suspected_covid",
        "staffed_icu_adult_patients_confirmed_covid",
        "total_patients_hospitalized_confirmed_influenza",
        "icu_patients_confirmed_influenza",
        "total_patients_hospitalized_confirmed_influenza_and_covid",
    )  # fmt: skip
    cols = [
        "hospital_pk", "collection_week", "state", "ccn", "hospital_name", "address", "city",
        "zip", "hospital_subtype", "fips_code", "is_metro_micro",
    ]  # fmt: skip
    for suffix in ("7_day_avg", "7_day_sum", "7_day_coverage"):
        cols += [f"{c}_{suffix}" for c in avg_sum]
    for kind in ("confirmed", "suspected"):
        cols.append(f"previous_day_admission_adult_covid_{kind}_7_day_sum")
        cols += [f"previous_day_admission_adult_covid_{kind}_{a}_7_day_sum" for a in _ADULT_AGES]
        cols.append(f"previous_day_admission_pediatric_covid_{kind}_7_day_sum")
        cols.append("previous_day_covid_ED_visits_7_day_sum" if kind == "confirmed" else
                    "previous_day_total_ED_visits_7_day_sum")  # fmt: skip
    cols += [
        "previous_day_admission_influenza_confirmed_7_day_sum", "geocoded_hospital_address",
        "hhs_ids", "previous_day_admission_adult_covid_confirmed_7_day_coverage",
        "previous_day_admission_pediatric_covid_confirmed_7_day_coverage",
        "previous_day_admission_adult_covid_suspected_7_day_coverage",
        "previous_day_admission_pediatric_covid_suspected_7_day_coverage",
        "previous_week_personnel_covid_vaccinated_doses_administered_7_day",
        "total_personnel_covid_vaccinated_doses_none_7_day",
        "total_personnel_covid_vaccinated_doses_one_7_day",
        "total_personnel_covid_vaccinated_doses_all_7_day",
        "previous_week_patients_covid_vaccinated_doses_one_7_day",
        "previous_week_patients_covid_vaccinated_doses_all_7_day", "is_corrected",
    ]  # fmt: skip
    for c in ("all_pediatric_inpatient_bed_occupied", "all_pediatric_inpatient_beds"):
        cols += [f"{c}_7_day_avg", f"{c}_7_day_coverage", f"{c}_7_day_sum"]
    cols += [
        f"previous_day_admission_pediatric_covid_confirmed_{a}_7_day_sum"
        for a in ("0_4", "12_17", "5_11", "unknown")
    ]
    for c in (
        "staffed_icu_pediatric_patients_confirmed_covid",
        "staffed_pediatric_icu_bed_occupancy",
        "total_staffed_pediatric_icu_beds",
    ):
        cols += [f"{c}_7_day_avg", f"{c}_7_day_coverage", f"{c}_7_day_sum"]
    return tuple(cols)


#: Header of the final facility file (128 columns, bulk-CSV spelling, file order).
HHS_COLUMNS: tuple[str, ...] = _facility_columns()


def normalise_column(name: str) -> str:
    """The spelling-independent key of a column name.

    Lower case; ``+`` dropped; every run of other non-alphanumeric characters becomes one
    ``_``; no leading or trailing ``_``. Both spellings of a column give the same key, e.g.
    ``..._18-19_7_day_sum`` / ``..._18_19_7_day_sum`` and ``..._80+_...`` / ``..._80_...``.
    """
    text = name.strip().lstrip("\ufeff").lower().replace("+", "")
    return re.sub(r"[^0-9a-z]+", "_", text).strip("_")


def api_spelling(name: str) -> str:
    """The API (JSON / Socrata) spelling of a bulk-CSV column name (``18-19`` -> ``18_19``)."""
    return normalise_column(name)


# --------------------------------------------------------------------------------------------
# options

#: Count column sets: key -> (columns, description for the metadata).
COUNT_SETS: dict[str, tuple[tuple[str, ...], str]] = {
    "admissions": (
        (
            "previous_day_admission_adult_covid_confirmed_7_day_sum",
            "previous_day_admission_pediatric_covid_confirmed_7_day_sum",
        ),
        "new confirmed COVID-19 admissions (adult + pediatric) per week; each admission is "
        "counted once",
    ),
    "census": (
        (
            "total_adult_patients_hospitalized_confirmed_covid_7_day_sum",
            "total_pediatric_patients_hospitalized_confirmed_covid_7_day_sum",
        ),
        "sum over the week's days of hospitalised confirmed COVID-19 patients (patient-days): a "
        "patient staying several days or weeks is counted again -- the paper's double counting",
    ),
}
#: Identifier columns read besides the counts (``zip`` is optional).
ID_COLUMNS = ("hospital_pk", "collection_week", "fips_code", "zip")
#: The suppression marker of the HHS file.
SUPPRESSED_MARKER = -999999.0
ENGINES = ("auto", "pyarrow", "csv")
LOCATIONS = ("polygon", "centroid")


@dataclass(frozen=True)
class HHSOptions:
    """Options of :func:`prepare_hhs` (stored in the output's metadata).

    Attributes
    ----------
    n
        Cases to keep (down-sampled without replacement); 0 keeps all.
    seed
        Seed of every random choice.
    count
        Key of :data:`COUNT_SETS` (``admissions`` or ``census``).
    columns
        Count columns to sum instead of the ``count`` set (any spelling).
    suppressed
        Value imputed for ``-999999`` (>= 0; fractions become counts by random rounding), or
        ``None`` to drop such rows.
    start, end
        Keep only case days in ``[start, end]`` (inclusive); ``None``: no limit.
    origin
        Day 0 of the time axis; default ``start``, else the first day of the earliest window.
    region
        ``states`` (50 states + DC), ``conus`` (without AK, HI) or ``all`` (every polygon).
    crs
        Projected reference system for ``x``/``y`` (e.g. ``EPSG:5070``, needs pyproj);
        ``None`` keeps lon/lat degrees.
    jitter
        Add a uniform fraction of a day to each time (default: whole days).
    locations
        ``polygon`` (uniform inside the county) or ``centroid`` (the county table's centroid).
    engine
        CSV reader: ``auto`` (pyarrow if installed), ``pyarrow`` or ``csv``.
    """

    n: int = 1_000_000
    seed: int = 0
    count: str = "admissions"
    columns: tuple[str, ...] = ()
    suppressed: float | None = 1.5
    start: dt.date | None = None
    end: dt.date | None = None
    origin: dt.date | None = None
    region: str = "states"
    crs: str | None = None
    jitter: bool = False
    locations: str = "polygon"
    engine: str = "auto"

    def __post_init__(self) -> None:
        if self.n < 0:
            raise UsageError(f"--n must be >= 0 (0 keeps every case), got {self.n}")
        if self.count not in COUNT_SETS:
            raise UsageError(f"unknown count {self.count!r}; choose one of {', '.join(COUNT_SETS)}")
        if self.suppressed is not None and not (
            math.isfinite(self.suppressed) and self.suppressed >= 0
        ):
            raise UsageError(f"--suppressed must be a number >= 0 or 'drop', got {self.suppressed}")
        if self.start and self.end and self.start > self.end:
            raise UsageError(f"--start {self.start} is after --end {self.end}")
        if self.origin and self.start and self.origin > self.start:
            raise UsageError(
                f"--origin {self.origin} is after --start {self.start}: times would be negative"
            )
        region_states(self.region)
        if self.locations not in LOCATIONS:
            raise UsageError(f"locations must be one of {', '.join(LOCATIONS)}")
        if self.engine not in ENGINES:
            raise UsageError(f"engine must be one of {', '.join(ENGINES)}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready copy (dates as ISO text)."""
        out = asdict(self)
        for key in ("start", "end", "origin"):
            out[key] = None if out[key] is None else out[key].isoformat()
        out["columns"] = list(self.columns)
        out["suppressed"] = "drop" if self.suppressed is None else self.suppressed
        return out


def parse_date(text: str) -> dt.date | None:
    """A date in any of the file's formats, or None (see :data:`DATE_FORMATS`)."""
    m = _DATE_RE.fullmatch(text.strip())
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(3)), int(m.group(4)))
    except ValueError:
        return None


#: Accepted ``collection_week`` formats.
DATE_FORMATS = ("YYYY/MM/DD", "YYYY-MM-DD", "YYYY-MM-DDT00:00:00.000")
_DATE_RE = re.compile(r"(\d{4})([-/])(\d{1,2})\2(\d{1,2})(?:[T ]00:00(?::00(?:\.0+)?)?Z?)?")
_EPOCH = dt.date(1970, 1, 1).toordinal()


def _day(d: dt.date) -> int:
    return d.toordinal() - _EPOCH


def _date(day: int) -> dt.date:
    return dt.date.fromordinal(int(day) + _EPOCH)


# --------------------------------------------------------------------------------------------
# reasons rows are dropped for, in order of precedence


@dataclass(frozen=True)
class Reason:
    """Why a row was dropped: a short key (metadata) and a sentence (messages)."""

    key: str
    label: str


REASONS: tuple[Reason, ...] = (
    Reason("bad_date", f"collection_week missing or not a date ({', '.join(DATE_FORMATS)})"),
    Reason("duplicate", "same hospital_pk and collection_week as an earlier row"),
    Reason("outside_window", "none of the week's case days lies in --start/--end"),
    Reason("missing_fips", "fips_code blank"),
    Reason("malformed_fips", "fips_code is not a 1-5 digit county code"),
    Reason("ct_planning_region", "Connecticut planning region (091x0) whose ZIP has no county"),
    Reason("territory_not_in_polygons", "territory whose counties are not in the polygons"),
    Reason("unknown_fips", "no county polygon with this FIPS code"),
    Reason("outside_region", "county outside the study region (--region)"),
    Reason("no_population", "county has a polygon but no population density"),
    Reason("not_reported", "every count column blank (not reported)"),
    Reason("non_numeric", "a count is not a number"),
    Reason("negative", "a count is negative (other than the -999999 suppression marker)"),
    Reason("suppressed", "a count is suppressed (-999999) and --suppressed drop"),
)
_CODE = {r.key: i + 1 for i, r in enumerate(REASONS)}  # 0 = kept


# --------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True, eq=False)
class FacilityColumns:
    """The needed columns of a facility file, as text.

    Attributes
    ----------
    path : str
        The file.
    columns : Mapping[str, numpy.ndarray]
        Normalised name -> shape (R,) array of str (``""`` for blanks), one per data record.
    names : Mapping[str, str]
        Normalised name -> the header's spelling.
    n_rows : int
        Data records R (blank lines skipped).
    engine : str
        ``pyarrow`` or ``csv``.
    """

    path: str
    columns: Mapping[str, np.ndarray]
    names: Mapping[str, str]
    n_rows: int
    engine: str


def _open_text(path: Path) -> IO[str]:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_header(path: Path) -> list[str]:
    """Column names of the first line of a CSV file (gzip allowed).

    Raises
    ------
    EventsError
        Missing, empty or unreadable file.
    """
    if not path.exists():
        raise EventsError(f"{path}: file not found")
    if path.is_dir():
        raise EventsError(f"{path}: is a directory, not the HHS facility CSV file")
    try:
        with _open_text(path) as handle:
            header = next(csv.reader(handle), None)
    except (OSError, UnicodeDecodeError, csv.Error, EOFError) as exc:
        raise EventsError(f"{path}: cannot read as a UTF-8 CSV file ({exc})") from None
    if not header:
        raise EventsError(f"{path}: the file is empty; expected the HHS facility CSV file")
    return header


def match_columns(path: Path, header: Sequence[str], wanted: Sequence[str]) -> dict[str, int]:
    """Position of each wanted column (normalised names), found by normalised name.

    Raises
    ------
    EventsError
        A wanted column is missing (the message suggests close names) or appears twice.
    """
    keys = [normalise_column(h) for h in header]
    out: dict[str, int] = {}
    for name in wanted:
        hits = [i for i, k in enumerate(keys) if k == name]
        if len(hits) > 1:
            raise EventsError(
                f"{path}: column {name!r} appears {len(hits)} times (as "
                f"{', '.join(repr(header[i]) for i in hits)}); keep one"
            )
        if hits:
            out[name] = hits[0]
    missing = [w for w in wanted if w not in out and w != "zip"]
    if not missing:
        return out
    hints = []
    for m in missing:
        close = difflib.get_close_matches(m, keys, n=2, cutoff=0.75)
        hints.append(f"{m!r}" + (f" (closest: {', '.join(close)})" if close else ""))
    if any(m in ID_COLUMNS for m in missing):
        raise EventsError(
            f"{path}: missing column(s) {'; '.join(hints)}; the file has {len(header)} columns "
            f"starting {', '.join(header[:4])} -- is it the HHS 'COVID-19 Reported Patient "
            "Impact and Hospital Capacity by Facility' CSV?"
        )
    raise UsageError(
        f"{path}: no count column {'; '.join(hints)} (names are matched ignoring case and "
        "punctuation, e.g. 18-19 = 18_19); check --column"
    )


def _read_pyarrow(path: Path, width: int, index: dict[str, int], progress: Progress) -> tuple:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [f"c{i}" for i in range(width)]
    chosen = {key: names[i] for key, i in index.items()}
    bad: list[str] = []

    def on_invalid(row: Any) -> str:
        bad.append(f"line {row.number}: " if row.number is not None else "")
        bad[-1] += f"{row.actual_columns} fields: {row.text[:80]!r}"
        return "skip"

    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=16 << 20),
            parse_options=pacsv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=on_invalid
            ),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(chosen.values()),
                column_types={c: pa.string() for c in chosen.values()},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, OSError) as exc:
        raise EventsError(f"{path}: cannot parse the CSV file: {exc}") from None
    progress(f"parsed {table.num_rows:,} rows")
    cols = {}
    for key, col in chosen.items():
        cols[key] = np.asarray(table.column(col).to_numpy(zero_copy_only=False)).astype(str)
    return cols, table.num_rows, bad


def _read_stdlib(path: Path, width: int, index: dict[str, int], progress: Progress) -> tuple:
    keys = list(index)
    getter = operator.itemgetter(*[index[k] for k in keys])
    rows: list[Any] = []
    bad: list[str] = []
    every = 200_000
    try:
        with _open_text(path) as handle:
            reader = csv.reader(handle)
            next(reader, None)
            for row in reader:
                if len(row) != width:
                    if not row:
                        continue  # blank line
                    bad.append(f"line {reader.line_num}: {len(row)} fields: {','.join(row)[:80]!r}")
                    continue
                rows.append(getter(row))
                if len(rows) % every == 0:
                    progress(f"read {len(rows):,} rows")
    except (OSError, UnicodeDecodeError, csv.Error, EOFError) as exc:
        raise EventsError(f"{path}: cannot read the CSV file ({exc})") from None
    if len(keys) == 1:
        rows = [(r,) for r in rows]
    cols = {}
    for j, key in enumerate(keys):
        cols[key] = np.array([r[j] for r in rows], dtype=str) if rows else np.zeros(0, dtype="<U1")
    return cols, len(rows), bad


def read_facility_columns(
    path: Path, wanted: Sequence[str], *, engine: str = "auto", progress: Progress | None = None
) -> FacilityColumns:
    """Read the wanted columns (normalised names) of a facility file as text.

    Parameters
    ----------
    path
        The CSV file (``.csv`` or ``.csv.gz``).
    wanted
        Normalised column names (:func:`normalise_column`); ``zip`` may be absent.
    engine
        ``pyarrow`` (fast, multi-threaded), ``csv`` (stdlib) or ``auto``.
    progress
        Called with a line of text at each milestone.

    Raises
    ------
    EventsError
        Unreadable file, missing columns, or rows whose number of fields differs from the
        header's (the message gives how many and the first).
    """
    path = Path(path)
    say = progress or (lambda msg: None)
    header = read_header(path)
    index = match_columns(path, header, wanted)
    have_arrow = importlib.util.find_spec("pyarrow") is not None
    if engine == "auto":
        engine = "pyarrow" if have_arrow else "csv"
        if not have_arrow:
            log.info("pyarrow not installed: reading with the csv module (slower)")
    if engine == "pyarrow":
        if not have_arrow:
            raise UsageError("--engine pyarrow needs pyarrow (pip install pyarrow)")
        cols, n_rows, bad = _read_pyarrow(path, len(header), index, say)
    else:
        cols, n_rows, bad = _read_stdlib(path, len(header), index, say)
    if bad:
        raise EventsError(
            f"{path}: {len(bad)} row(s) do not have the header's {len(header)} fields (first: "
            f"{bad[0]}); the file is damaged or truncated -- fix or remove those rows"
        )
    return FacilityColumns(
        path=str(path),
        columns=cols,
        names={k: header[i] for k, i in index.items()},
        n_rows=n_rows,
        engine=engine,
    )


# --------------------------------------------------------------------------------------------
# classifying rows

_OK, _BLANK, _SUPP, _NAN, _NEG = 0, 1, 2, 3, 4


def parse_counts(text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Count column text -> values and status.

    Parameters
    ----------
    text : numpy.ndarray, shape (R,), str

    Returns
    -------
    values : numpy.ndarray, shape (R,), float64
        The number (0 unless status is OK).
    status : numpy.ndarray, shape (R,), int8
        0 ok (>= 0), 1 blank, 2 suppressed (``-999999``), 3 not a finite number, 4 negative.
    """
    uniq, inv = np.unique(text, return_inverse=True)
    vals = np.zeros(uniq.size, dtype=np.float64)
    st = np.zeros(uniq.size, dtype=np.int8)
    for i, raw in enumerate(uniq.tolist()):
        s = raw.strip()
        if not s:
            st[i] = _BLANK
            continue
        try:
            v = float(s)
        except ValueError:
            st[i] = _NAN
            continue
        if not math.isfinite(v):
            st[i] = _NAN
        elif v == SUPPRESSED_MARKER:
            st[i] = _SUPP
        elif v < 0:
            st[i] = _NEG
        else:
            vals[i] = v
    return vals[inv], st[inv]


def parse_days(text: np.ndarray) -> np.ndarray:
    """``collection_week`` text -> days since 1970-01-01 (int64; -2**62 where not a date)."""
    uniq, inv = np.unique(text, return_inverse=True)
    days = np.full(uniq.size, _NO_DAY, dtype=np.int64)
    for i, raw in enumerate(uniq.tolist()):
        d = parse_date(raw)
        if d is not None:
            days[i] = _day(d)
    return days[inv]


_NO_DAY = -(2**62)


@dataclass(frozen=True, eq=False)
class RowPlan:
    """Per-row outcome of :func:`classify_rows` (all arrays shape (R,)).

    Attributes
    ----------
    reason : numpy.ndarray, int8
        0 kept, else 1 + index into :data:`REASONS`.
    fips : numpy.ndarray, ``<U5``
        Repaired county code (kept rows).
    total : numpy.ndarray, float64
        Sum of the count columns with imputations (may be fractional), kept rows.
    lo, hi : numpy.ndarray, int64
        First and last case day (days since 1970-01-01) inside the date window.
    imputed : numpy.ndarray, int8
        Number of suppressed values imputed in the row.
    repairs : dict
        FIPS repair counts (:class:`hawkes_cli.counties.FipsResult`).
    """

    reason: np.ndarray
    fips: np.ndarray
    total: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    imputed: np.ndarray
    repairs: dict[str, Any] = field(default_factory=dict)


def classify_rows(
    cols: Mapping[str, np.ndarray],
    count_columns: Sequence[str],
    shift: int,
    options: HHSOptions,
    known: np.ndarray,
    with_density: np.ndarray,
) -> RowPlan:
    """Decide, for every row, whether it is kept and, if not, why (first reason that applies).

    Parameters
    ----------
    cols
        Normalised name -> text column, shape (R,) each.
    count_columns
        Normalised names of the columns summed into the week's count.
    shift
        Days added to ``collection_week`` for the window's first day (-1 for ``previous_day_*``).
    options
        The run's options (suppression, date window, region).
    known : numpy.ndarray of str
        County codes with a polygon (or, for centroid locations, in the county table).
    with_density : numpy.ndarray of str
        County codes that also have a density.
    """
    n = cols["collection_week"].shape[0]
    reason = np.zeros(n, dtype=np.int8)

    def mark(mask: np.ndarray, key: str) -> None:
        reason[(reason == 0) & mask] = _CODE[key]

    day = parse_days(cols["collection_week"])
    mark(day == _NO_DAY, "bad_date")
    valid = day != _NO_DAY
    _, pk = np.unique(cols["hospital_pk"], return_inverse=True)
    key = pk.astype(np.int64) * (1 << 32) + np.where(valid, day, 0)
    first = np.zeros(n, dtype=bool)
    first[np.unique(key, return_index=True)[1]] = True
    mark(valid & ~first, "duplicate")

    lo = np.where(valid, day + shift, 0)
    hi = lo + 6
    if options.start is not None:
        lo = np.maximum(lo, _day(options.start))
    if options.end is not None:
        hi = np.minimum(hi, _day(options.end))
    mark(valid & (lo > hi), "outside_window")

    fr = harmonise_fips(cols["fips_code"], cols.get("zip"))
    mark(fr.status == FIPS_MISSING, "missing_fips")
    mark(fr.status == FIPS_MALFORMED, "malformed_fips")
    mark(fr.status == FIPS_CT_UNMAPPED, "ct_planning_region")
    fips = fr.fips
    state = fips.astype("<U2")
    in_polys = np.isin(fips, known)
    present_states = np.unique(np.asarray(known).astype("<U2"))
    territory = np.isin(state, sorted(TERRITORIES)) & ~np.isin(state, present_states)
    mark((fips != "") & territory, "territory_not_in_polygons")
    mark((fips != "") & ~in_polys, "unknown_fips")
    allowed = region_states(options.region)
    if allowed is not None:
        mark((fips != "") & ~np.isin(state, sorted(allowed)), "outside_region")
    mark((fips != "") & ~np.isin(fips, with_density), "no_population")

    total = np.zeros(n, dtype=np.float64)
    imputed = np.zeros(n, dtype=np.int8)
    blank_all = np.ones(n, dtype=bool)
    nan_any = np.zeros(n, dtype=bool)
    neg_any = np.zeros(n, dtype=bool)
    supp_any = np.zeros(n, dtype=bool)
    fill = 0.0 if options.suppressed is None else options.suppressed
    for name in count_columns:
        vals, st = parse_counts(cols[name])
        blank_all &= st == _BLANK
        nan_any |= st == _NAN
        neg_any |= st == _NEG
        supp_any |= st == _SUPP
        imputed += (st == _SUPP).astype(np.int8)
        total += np.where(st == _SUPP, fill, vals)
    mark(blank_all, "not_reported")
    mark(nan_any, "non_numeric")
    mark(neg_any, "negative")
    if options.suppressed is None:
        mark(supp_any, "suppressed")
    return RowPlan(
        reason=reason, fips=fips, total=total, lo=lo, hi=hi, imputed=imputed, repairs=fr.repairs
    )


# --------------------------------------------------------------------------------------------
# expanding and down-sampling


@dataclass(frozen=True, eq=False)
class CaseDraw:
    """The kept cases (shape (N,) each) and the counts behind them.

    Attributes
    ----------
    row : numpy.ndarray, int64
        Row (data record index, 0-based) of each case.
    day : numpy.ndarray, int64
        Day of each case, days since 1970-01-01.
    counts : dict
        ``cases_expanded`` (whole-day cases of the kept rows), ``cases_in_window`` (M),
        ``cases_outside_window``, ``cases_kept`` (N).
    """

    row: np.ndarray
    day: np.ndarray
    counts: dict[str, int]


def draw_cases(plan: RowPlan, n: int, streams: Sequence[np.random.Generator]) -> CaseDraw:
    """Round the counts, expand them over their days and down-sample without replacement.

    Parameters
    ----------
    plan
        From :func:`classify_rows`.
    n
        Cases to keep (0: all).
    streams
        Three generators: rounding, window overlap, down-sampling + days.
    """
    rounding, overlap, sampling = streams
    kept = np.flatnonzero(plan.reason == 0)
    total = plan.total[kept]
    base = np.floor(total)
    count = (base + (rounding.random(kept.size) < total - base)).astype(np.int64)
    width = (plan.hi[kept] - plan.lo[kept] + 1).astype(np.int64)
    inside = count.copy()
    partial = np.flatnonzero(width < 7)
    if partial.size:
        inside[partial] = overlap.binomial(count[partial], width[partial] / 7.0)
    m_total = int(inside.sum())
    if n == 0 or n >= m_total:
        if n > m_total:
            log.warning("asked for %d cases but only %d exist: keeping all of them", n, m_total)
        chosen = np.arange(m_total, dtype=np.int64)
    else:
        chosen = np.sort(sampling.choice(m_total, size=n, replace=False))
    cum = np.cumsum(inside)
    which = np.searchsorted(cum, chosen, side="right")
    day = plan.lo[kept][which] + sampling.integers(0, width[which])
    counts = {
        "cases_expanded": int(count.sum()),
        "cases_in_window": m_total,
        "cases_outside_window": int(count.sum()) - m_total,
        "cases_kept": int(chosen.size),
    }
    return CaseDraw(row=kept[which], day=day.astype(np.int64), counts=counts)


# --------------------------------------------------------------------------------------------
# the whole step


@dataclass(frozen=True)
class PrepResult:
    """What :func:`prepare_hhs` did (for the CLI summary and the benchmark).

    Attributes
    ----------
    out : str
        The events file written.
    n_events : int
        Events in it.
    attrs : Mapping[str, Any]
        Its metadata.
    seconds : Mapping[str, float]
        Wall time of each stage, seconds.
    """

    out: str
    n_events: int
    attrs: Mapping[str, Any]
    seconds: Mapping[str, float]


class _Clock:
    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.t0 = self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def say(self, msg: str) -> None:
        log.info(msg)
        if self.progress is not None:
            self.progress(f"[{time.perf_counter() - self.t0:7.1f} s] {msg}")

    def lap(self, stage: str, msg: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = now - self.last
        self.last = now
        self.say(msg)


def count_columns_for(options: HHSOptions) -> tuple[tuple[str, ...], int, str]:
    """(normalised count columns, window shift in days, description) for the options.

    Raises
    ------
    UsageError
        Explicit columns mix ``previous_day_*`` columns with others (different windows).
    """
    if options.columns:
        names = tuple(dict.fromkeys(normalise_column(c) for c in options.columns))
        desc = "sum of " + ", ".join(names)
    else:
        names, desc = COUNT_SETS[options.count]
    prev = {c.startswith("previous_day_") for c in names}
    if len(prev) > 1:
        raise UsageError(
            "count columns mix previous_day_* columns (window shifted a day earlier) with "
            "others; run them separately"
        )
    return names, (-1 if prev == {True} else 0), desc


def prepare_hhs(
    source: Path,
    out: Path,
    options: HHSOptions,
    *,
    counties: Path | None = None,
    polygons: Path | None = None,
    key_field: str = "GEOID",
    polygons_out: Path | None = None,
    progress: Progress | None = None,
) -> PrepResult:
    """Turn the HHS facility file into an events file of cases (module docstring: the steps).

    Parameters
    ----------
    source
        The facility CSV (``.csv`` or ``.csv.gz``).
    out
        Events file to write (``.h5`` keeps the metadata and ``/dropped``; ``.csv`` does not).
    options
        See :class:`HHSOptions`.
    counties
        County table (default: the shipped ``data/counties.csv``).
    polygons
        County polygon file (default: plotly-geo's 2016 Census counties).
    key_field
        FIPS field of ``polygons``.
    polygons_out
        Also write the polygons used (in the output's coordinates) to this ``.gpkg``/``.shp``.
    progress
        Called with a line of text at each stage.

    Returns
    -------
    PrepResult

    Notes
    -----
    Metadata of the events (HDF5 attributes of ``/events``): ``time_unit`` (``day``),
    ``origin_date``, ``first_date``, ``last_date``, ``crs`` (``lonlat`` or the EPSG code) and
    ``crs_definition``, ``area`` (study region, coordinate units squared) and
    ``land_area_sq_mi``, ``region``, ``counties`` (polygon file for ``hawkes-run``),
    ``source_file``, ``source_sha256``, ``source_bytes``, ``reader``, ``columns`` (the header's
    spelling of every column read), ``count_kind``, ``count_description``,
    ``window_shift_days``, ``suppressed``, ``options``, ``seed``, ``rows_read``,
    ``rows_kept``, ``rows_dropped``, ``rows_zero``, ``rows_imputed``, ``values_imputed``,
    ``dropped`` (reason -> rows), ``dropped_reasons`` (reason -> sentence), ``fips_repairs``,
    ``cases_expanded``, ``cases_in_window``, ``cases_outside_window``, ``cases_kept``,
    ``county_table`` and its sha256, ``provenance``, ``hawkes_version``.

    Raises
    ------
    EventsError
        Unreadable input, missing columns, damaged rows, no case left, unwritable output.
    UsageError
        Bad options.
    """
    source, out = Path(source), Path(out)
    polygons = None if polygons is None else Path(polygons)
    clock = _Clock(progress)
    if not out.name.lower().endswith((".csv", ".csv.gz", *HDF5_SUFFIXES)):
        raise UsageError(f"{out}: the events file must end in .h5, .hdf5, .csv or .csv.gz")
    if not out.parent.exists():
        raise EventsError(f"{out}: folder {out.parent} does not exist")
    names, shift, description = count_columns_for(options)
    wanted = list(dict.fromkeys([*ID_COLUMNS, *names]))
    header_index = match_columns(source, read_header(source), wanted)  # fail fast
    if "zip" not in header_index:
        log.warning("%s has no 'zip' column: Connecticut planning regions cannot be mapped", source)
        wanted.remove("zip")

    if options.engine == "pyarrow" and importlib.util.find_spec("pyarrow") is None:
        raise UsageError("--engine pyarrow needs pyarrow (pip install pyarrow)")
    table = load_county_table(counties)
    sampler = layer = None
    if options.locations == "polygon":
        clock.say("reading and triangulating county polygons")
        sampler, layer = load_polygons(polygons, key_field=key_field, to_crs=options.crs)
        known = np.array(sampler.keys)
        clock.lap("polygons", f"{len(sampler.keys)} county polygons ready")
    else:
        if polygons is not None:
            raise UsageError("--polygons has no use with --locations centroid")
        known = table.fips
    with_density = table.fips

    clock.say(f"reading {source}")
    raw = read_facility_columns(source, wanted, engine=options.engine, progress=clock.say)
    sha = file_sha256(source)
    clock.lap("read", f"read {raw.n_rows:,} rows with {raw.engine} (sha256 {sha[:12]})")

    plan = classify_rows(raw.columns, names, shift, options, known, with_density)
    dropped = {r.key: int(np.count_nonzero(plan.reason == i + 1)) for i, r in enumerate(REASONS)}
    n_kept_rows = int(np.count_nonzero(plan.reason == 0))
    clock.lap("classify", f"kept {n_kept_rows:,} rows, dropped "
              + (", ".join(f"{k} {v:,}" for k, v in dropped.items() if v) or "none"))  # fmt: skip

    root = np.random.SeedSequence(options.seed)
    streams = [np.random.default_rng(s) for s in root.spawn(4)]
    cases = draw_cases(plan, options.n, streams[:3])
    if cases.row.size == 0:
        raise EventsError(
            f"{source}: no case is left ({raw.n_rows:,} rows read; dropped: "
            + (", ".join(f"{k} {v}" for k, v in dropped.items() if v) or "none")
            + "); check the date window, the region and the count columns"
        )
    origin_day = _origin_day(options, plan)
    t = (cases.day - origin_day).astype(np.float64)
    if options.jitter:
        t += streams[2].random(t.size)
    order = np.argsort(t, kind="stable")
    t, rows = t[order], cases.row[order]
    fips = plan.fips[rows]
    clock.lap("expand", f"{cases.counts['cases_in_window']:,} cases expanded, "
              f"{cases.counts['cases_kept']:,} kept")  # fmt: skip

    density = table.density[table.lookup(fips)]
    region = table.region_mask(options.region)
    if sampler is not None:
        x, y = sampler.sample(sampler.codes(fips), streams[3])
        in_region = np.isin(np.array(sampler.keys), table.fips[region])
        area = float(sampler.area()[in_region].sum())
        crs_label = sampler.crs
    else:
        idx = table.lookup(fips)
        x, y = table.lon[idx].copy(), table.lat[idx].copy()
        area = float(table.area_deg2[region].sum())
        crs_label = CENSUS_CRS
        if options.crs is not None:
            x, y = project_points(x, y, options.crs)
            area = math.nan
            log.warning("centroid locations in %s: no polygons, so no area; set data.area",
                        options.crs)  # fmt: skip
    clock.lap("locate", f"located {t.size:,} cases ({options.locations})")

    if polygons_out is not None:
        if layer is None:
            from .counties import read_polygon_layer

            layer = read_polygon_layer(polygons, key_field=key_field)
        write_polygons(layer, polygons_out)
    counties_file = None
    if polygons_out is not None:
        counties_file = str(Path(polygons_out).resolve())
    elif options.locations == "polygon" and options.crs is None:
        counties_file = _default_polygon_path() if polygons is None else str(polygons.resolve())
    elif options.locations == "polygon":
        log.warning("x/y are in %s: pass --polygons-out FILE.gpkg to keep the projected "
                    "polygons for hawkes-run's location resampling", options.crs)  # fmt: skip
    attrs = {
        "time_unit": "day",
        "origin_date": _date(origin_day).isoformat(),
        "first_date": _date(int(cases.day.min())).isoformat(),
        "last_date": _date(int(cases.day.max())).isoformat(),
        "crs": "lonlat" if options.crs is None else options.crs,
        "crs_definition": (
            f"{crs_label}: x = longitude, y = latitude, degrees"
            if options.crs is None
            else f"{options.crs} (projected from {CENSUS_CRS})"
        ),
        "area": area if math.isfinite(area) else None,
        "land_area_sq_mi": float(table.aland_m2[region].sum() / SQ_METRES_PER_SQ_MILE),
        "region": options.region,
        "counties": counties_file,
        "source_file": str(source.resolve()),
        "source_sha256": sha,
        "source_bytes": source.stat().st_size,
        "reader": raw.engine,
        "columns": dict(raw.names),
        "count_kind": "custom" if options.columns else options.count,
        "count_description": description,
        "window_shift_days": shift,
        "suppressed": "drop" if options.suppressed is None else options.suppressed,
        "options": options.as_dict(),
        "seed": options.seed,
        "rows_read": raw.n_rows,
        "rows_kept": n_kept_rows,
        "rows_dropped": raw.n_rows - n_kept_rows,
        "rows_zero": int(np.count_nonzero((plan.reason == 0) & (plan.total == 0))),
        "rows_imputed": int(np.count_nonzero((plan.reason == 0) & (plan.imputed > 0))),
        "values_imputed": int(plan.imputed[plan.reason == 0].sum()),
        "dropped": dropped,
        "dropped_reasons": {r.key: r.label for r in REASONS},
        "fips_repairs": plan.repairs,
        **cases.counts,
        "county_table": table.source,
        "county_table_sha256": dict(table.provenance).get("table_sha256"),
        "provenance": (
            f"hawkes-prep hhs {__version__}: {source.name} (sha256 {sha[:16]}), "
            f"{raw.n_rows} rows -> {cases.counts['cases_kept']} cases, seed {options.seed}"
        ),
        "hawkes_version": __version__,
    }
    data = EventData(time=t, x=x, y=y, density=density, fips=fips, attrs=attrs, source=str(out))
    write_cases(data, _dropped_table(raw.columns, plan.reason), out)
    clock.lap("write", f"wrote {data.n:,} events to {out}")
    return PrepResult(out=str(out), n_events=data.n, attrs=attrs, seconds=dict(clock.seconds))


def _default_polygon_path() -> str:
    from .counties import plotly_geo_file

    return str(plotly_geo_file())


def _origin_day(options: HHSOptions, plan: RowPlan) -> int:
    if options.origin is not None:
        return _day(options.origin)
    if options.start is not None:
        return _day(options.start)
    return int(plan.lo[plan.reason == 0].min())


def _dropped_table(cols: Mapping[str, np.ndarray], reason: np.ndarray) -> dict[str, np.ndarray]:
    rows = np.flatnonzero(reason != 0)
    return {
        "record": rows.astype(np.int64) + 1,
        "reason": reason[rows].astype(np.uint8),
        "hospital_pk": cols["hospital_pk"][rows],
        "collection_week": cols["collection_week"][rows],
        "fips_code": cols["fips_code"][rows],
    }


def write_cases(data: EventData, dropped: Mapping[str, np.ndarray], out: Path) -> None:
    """Write the events, and for HDF5 a ``/dropped`` group, atomically.

    ``/dropped`` holds one entry per dropped row: ``record`` (1-based data record number;
    the file line is ``record + 1`` when no value spans lines), ``reason`` (1-based index into
    the attribute ``reasons``, a JSON list of ``[key, sentence]``) and the row's
    ``hospital_pk``, ``collection_week`` and ``fips_code`` as written in the file.
    """
    out = Path(out)
    if not out.name.lower().endswith(HDF5_SUFFIXES):
        save_events(data, out)
        return
    import h5py

    tmp = out.with_name(f".{out.stem}.{os.getpid()}.{secrets.token_hex(4)}{out.suffix}")
    try:
        try:
            save_events(data, tmp)
        except EventsError as exc:  # name the file the user asked for, not the temporary one
            raise EventsError(exc.message.replace(str(tmp), str(out))) from None
        with h5py.File(tmp, "a") as f:
            group = f.create_group("dropped")
            group.attrs["reasons"] = json.dumps([[r.key, r.label] for r in REASONS])
            for name, values in dropped.items():
                arr = np.asarray(values)
                if arr.dtype.kind == "U":
                    arr = np.char.encode(arr, "utf-8") if arr.size else arr.astype("S1")
                group.create_dataset(name, data=arr)
        with open(tmp, "rb+") as raw:
            os.fsync(raw.fileno())
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise EventsError(f"{out}: writing failed ({exc}); nothing was written") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_dropped(path: Path) -> dict[str, Any]:
    """The ``/dropped`` group of an events file written by :func:`prepare_hhs`.

    Returns
    -------
    dict
        ``record``, ``reason`` (keys of :data:`REASONS`, as str), ``hospital_pk``,
        ``collection_week``, ``fips_code``: arrays of shape (D,).
    """
    import h5py

    with h5py.File(path, "r") as f:
        if "dropped" not in f:
            raise EventsError(f"{path}: no /dropped group (not written by hawkes-prep hhs?)")
        g = f["dropped"]
        keys = [k for k, _ in json.loads(g.attrs["reasons"])]
        out: dict[str, Any] = {}
        for name in g:
            arr = g[name][()]
            out[name] = np.char.decode(arr, "utf-8") if arr.dtype.kind == "S" else arr
        out["reason"] = np.array([keys[int(i) - 1] for i in out["reason"]], dtype=str)
    return out


__all__ = [
    "COUNT_SETS",
    "HHS_COLUMNS",
    "REASONS",
    "HHSOptions",
    "PrepResult",
    "api_spelling",
    "classify_rows",
    "draw_cases",
    "normalise_column",
    "parse_counts",
    "parse_date",
    "prepare_hhs",
    "read_dropped",
    "read_facility_columns",
]
