"""Cell text of the facility file -> numbers: ``collection_week`` dates and weekly counts.

Days are whole days since 1970-01-01 (int64), the time unit of every window in the package.
"""

from __future__ import annotations

import datetime as dt
import math
import re

import numpy as np

#: The suppression marker of the HHS file (a true value of 1 to 3).
SUPPRESSED_MARKER = -999999.0
#: Accepted ``collection_week`` formats.
DATE_FORMATS = ("YYYY/MM/DD", "YYYY-MM-DD", "YYYY-MM-DDT00:00:00.000")
#: Day number of a cell that is not a date.
NO_DAY = -(2**62)

#: Status of a count cell (:func:`parse_counts`).
COUNT_OK, COUNT_BLANK, COUNT_SUPPRESSED, COUNT_NOT_NUMBER, COUNT_NEGATIVE = 0, 1, 2, 3, 4

_DATE_RE = re.compile(r"(\d{4})([-/])(\d{1,2})\2(\d{1,2})(?:[T ]00:00(?::00(?:\.0+)?)?Z?)?")
_EPOCH = dt.date(1970, 1, 1).toordinal()


def day_of(date: dt.date) -> int:
    """Days since 1970-01-01 of ``date``."""
    return date.toordinal() - _EPOCH


def date_of(day: int) -> dt.date:
    """The date ``day`` days after 1970-01-01."""
    return dt.date.fromordinal(int(day) + _EPOCH)


#: Collection weeks outside these years are not dates of this data (a typo or a filler such
#: as 0001-01-01 or 9999-12-31): their rows are dropped as ``bad_date``, which also keeps every
#: case day and its time shift far inside what :mod:`datetime` can represent (years 1-9999).
DATE_YEARS: tuple[int, int] = (1900, 2199)


def parse_date(text: str) -> dt.date | None:
    """A date in any of the file's formats within :data:`DATE_YEARS`, or None (see
    :data:`DATE_FORMATS`)."""
    m = _DATE_RE.fullmatch(text.strip())
    if not m:
        return None
    year = int(m.group(1))
    if not DATE_YEARS[0] <= year <= DATE_YEARS[1]:
        return None
    try:
        return dt.date(year, int(m.group(3)), int(m.group(4)))
    except ValueError:
        return None


def parse_days(text: np.ndarray) -> np.ndarray:
    """``collection_week`` text -> days since 1970-01-01.

    Parameters
    ----------
    text : numpy.ndarray, shape (R,), str

    Returns
    -------
    numpy.ndarray, shape (R,), int64
        The day, or :data:`NO_DAY` (-2**62) where the text is not a date.
    """
    uniq, inv = np.unique(text, return_inverse=True)
    days = np.full(uniq.size, NO_DAY, dtype=np.int64)
    for i, raw in enumerate(uniq.tolist()):
        d = parse_date(raw)
        if d is not None:
            days[i] = day_of(d)
    return days[inv]


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
        0 ok (>= 0), 1 blank, 2 suppressed (``-999999``), 3 not a finite number, 4 negative
        (the ``COUNT_*`` constants).
    """
    uniq, inv = np.unique(text, return_inverse=True)
    vals = np.zeros(uniq.size, dtype=np.float64)
    st = np.zeros(uniq.size, dtype=np.int8)
    for i, raw in enumerate(uniq.tolist()):
        s = raw.strip()
        if not s:
            st[i] = COUNT_BLANK
            continue
        try:
            v = float(s)
        except ValueError:
            st[i] = COUNT_NOT_NUMBER
            continue
        if not math.isfinite(v):
            st[i] = COUNT_NOT_NUMBER
        elif v == SUPPRESSED_MARKER:
            st[i] = COUNT_SUPPRESSED
        elif v < 0:
            st[i] = COUNT_NEGATIVE
        else:
            vals[i] = v
    return vals[inv], st[inv]
