"""Per-row decisions: which rows of the facility file are kept, and why the others are dropped.

A row is dropped for the first reason that applies, in the order of :data:`REASONS`: bad date,
duplicate, outside the date window, FIPS problems, count problems. Each check below gives a
mask per reason; :func:`classify_rows` applies them in that order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..counties import (
    FIPS_CT_UNMAPPED,
    FIPS_MALFORMED,
    FIPS_MISSING,
    TERRITORIES,
    FipsResult,
    harmonise_fips,
    region_states,
)
from .options import HHSOptions
from .parse import (
    COUNT_BLANK,
    COUNT_NEGATIVE,
    COUNT_NOT_NUMBER,
    COUNT_SUPPRESSED,
    DATE_FORMATS,
    NO_DAY,
    day_of,
    parse_counts,
    parse_days,
)


@dataclass(frozen=True)
class Reason:
    """Why a row was dropped: a short key (metadata) and a sentence (messages)."""

    key: str
    label: str


#: Reasons rows are dropped for, in order of precedence (a row's code is 1 + index here).
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

#: Reason key -> shape (R,) bool mask of the rows it applies to.
Checks = dict[str, np.ndarray]


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

    @property
    def n_kept(self) -> int:
        """Rows kept."""
        return int(np.count_nonzero(self.reason == 0))

    def dropped_counts(self) -> dict[str, int]:
        """Reason key -> rows dropped for it (every reason, in the order of :data:`REASONS`)."""
        return {r.key: int(np.count_nonzero(self.reason == i + 1)) for i, r in enumerate(REASONS)}


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
    day = parse_days(cols["collection_week"])
    lo, hi, date_checks = _check_dates(day, cols["hospital_pk"], shift, options.start, options.end)
    fr = harmonise_fips(cols["fips_code"], cols.get("zip"))
    county_checks = _check_counties(fr, options.region, known, with_density)
    total, imputed, count_checks = _check_counts(cols, count_columns, options.suppressed)
    reason = _first_reason(day.shape[0], {**date_checks, **county_checks, **count_checks})
    return RowPlan(
        reason=reason, fips=fr.fips, total=total, lo=lo, hi=hi, imputed=imputed, repairs=fr.repairs
    )


def _first_reason(n: int, checks: Mapping[str, np.ndarray]) -> np.ndarray:
    """Shape (n,) int8: 0 where no check applies, else the code of the first that does."""
    reason = np.zeros(n, dtype=np.int8)
    for key in sorted(checks, key=_CODE.__getitem__):
        reason[(reason == 0) & checks[key]] = _CODE[key]
    return reason


def _check_dates(
    day: np.ndarray,
    hospital_pk: np.ndarray,
    shift: int,
    start: dt.date | None,
    end: dt.date | None,
) -> tuple[np.ndarray, np.ndarray, Checks]:
    """Each row's case days inside ``[start, end]``, and the date checks.

    Returns
    -------
    lo, hi : numpy.ndarray, shape (R,), int64
        First and last case day (days since 1970-01-01); ``lo > hi`` where none is inside.
    checks
        ``bad_date``, ``duplicate`` (same hospital and week as an earlier row),
        ``outside_window``.
    """
    valid = day != NO_DAY
    _, pk = np.unique(hospital_pk, return_inverse=True)
    key = pk.astype(np.int64) * (1 << 32) + np.where(valid, day, 0)
    first = np.zeros(day.shape[0], dtype=bool)
    first[np.unique(key, return_index=True)[1]] = True
    lo = np.where(valid, day + shift, 0)
    hi = lo + 6
    if start is not None:
        lo = np.maximum(lo, day_of(start))
    if end is not None:
        hi = np.minimum(hi, day_of(end))
    checks = {
        "bad_date": ~valid,
        "duplicate": valid & ~first,
        "outside_window": valid & (lo > hi),
    }
    return lo, hi, checks


def _check_counties(
    fr: FipsResult, region: str, known: np.ndarray, with_density: np.ndarray
) -> Checks:
    """The county checks of the repaired FIPS codes (see :func:`classify_rows`)."""
    fips = fr.fips
    state = fips.astype("<U2")
    present = fips != ""
    present_states = np.unique(np.asarray(known).astype("<U2"))
    territory = np.isin(state, sorted(TERRITORIES)) & ~np.isin(state, present_states)
    checks = {
        "missing_fips": fr.status == FIPS_MISSING,
        "malformed_fips": fr.status == FIPS_MALFORMED,
        "ct_planning_region": fr.status == FIPS_CT_UNMAPPED,
        "territory_not_in_polygons": present & territory,
        "unknown_fips": present & ~np.isin(fips, known),
        "no_population": present & ~np.isin(fips, with_density),
    }
    allowed = region_states(region)
    if allowed is not None:
        checks["outside_region"] = present & ~np.isin(state, sorted(allowed))
    return checks


def _check_counts(
    cols: Mapping[str, np.ndarray], count_columns: Sequence[str], suppressed: float | None
) -> tuple[np.ndarray, np.ndarray, Checks]:
    """Each row's count (sum of the count columns, suppressed values imputed) and the checks.

    Returns
    -------
    total : numpy.ndarray, shape (R,), float64
        The week's count; a blank column adds 0, a suppressed one ``suppressed``.
    imputed : numpy.ndarray, shape (R,), int8
        Suppressed values in the row.
    checks
        ``not_reported`` (every column blank), ``non_numeric``, ``negative``, and with
        ``suppressed=None`` ``suppressed``.
    """
    n = cols["collection_week"].shape[0]
    total = np.zeros(n, dtype=np.float64)
    imputed = np.zeros(n, dtype=np.int8)
    blank_all = np.ones(n, dtype=bool)
    nan_any = np.zeros(n, dtype=bool)
    neg_any = np.zeros(n, dtype=bool)
    supp_any = np.zeros(n, dtype=bool)
    fill = 0.0 if suppressed is None else suppressed
    for name in count_columns:
        vals, st = parse_counts(cols[name])
        blank_all &= st == COUNT_BLANK
        nan_any |= st == COUNT_NOT_NUMBER
        neg_any |= st == COUNT_NEGATIVE
        supp_any |= st == COUNT_SUPPRESSED
        imputed += (st == COUNT_SUPPRESSED).astype(np.int8)
        total += np.where(st == COUNT_SUPPRESSED, fill, vals)
    checks = {"not_reported": blank_all, "non_numeric": nan_any, "negative": neg_any}
    if suppressed is None:
        checks["suppressed"] = supp_any
    return total, imputed, checks
