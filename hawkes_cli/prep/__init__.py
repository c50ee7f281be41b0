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
:mod:`.metadata` and a ``/dropped`` group with every dropped row), written atomically: a
failure leaves no partial file.

Modules, each importing only those above it: :mod:`.progress` (stage lines and timings),
:mod:`.columns` (column names, both spellings, header matching), :mod:`.parse` (cell text ->
dates and counts), :mod:`.options` (:class:`HHSOptions`), :mod:`.read` (step 1),
:mod:`.classify` (steps 2-3), :mod:`.cases` (steps 3-5), :mod:`.output` (the events file and
``/dropped``), :mod:`.metadata` (its attributes), :mod:`.pipeline` (:func:`prepare_hhs`, step 6).
"""

from __future__ import annotations

from .cases import CaseDraw, draw_cases, origin_day
from .classify import REASONS, Reason, RowPlan, classify_rows
from .columns import (
    COUNT_SETS,
    HHS_COLUMNS,
    ID_COLUMNS,
    api_spelling,
    match_columns,
    normalise_column,
)
from .options import CSV_READERS, LOCATIONS, HHSOptions, count_columns_for
from .output import read_dropped, write_cases
from .parse import DATE_FORMATS, SUPPRESSED_MARKER, parse_counts, parse_date, parse_days
from .pipeline import PrepResult, prepare_hhs
from .progress import Progress
from .read import FacilityColumns, read_facility_columns, read_header

__all__ = [
    "COUNT_SETS",
    "CSV_READERS",
    "DATE_FORMATS",
    "HHS_COLUMNS",
    "ID_COLUMNS",
    "LOCATIONS",
    "REASONS",
    "SUPPRESSED_MARKER",
    "CaseDraw",
    "FacilityColumns",
    "HHSOptions",
    "PrepResult",
    "Progress",
    "Reason",
    "RowPlan",
    "api_spelling",
    "classify_rows",
    "count_columns_for",
    "draw_cases",
    "match_columns",
    "normalise_column",
    "origin_day",
    "parse_counts",
    "parse_date",
    "parse_days",
    "prepare_hhs",
    "read_dropped",
    "read_facility_columns",
    "read_header",
    "write_cases",
]
