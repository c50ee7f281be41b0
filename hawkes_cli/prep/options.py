"""Options of ``hawkes-prep hhs`` (:class:`HHSOptions`) and the count columns they select."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass
from typing import Any

from ..counties import region_states
from ..errors import UsageError
from ..vocab import CSV_READERS, LOCATIONS
from .columns import COUNT_SETS, ID_COLUMNS, normalise_column


@dataclass(frozen=True)
class HHSOptions:
    """Options of :func:`~hawkes_cli.prep.prepare_hhs` (stored in the output's metadata).

    Attributes
    ----------
    n
        Cases to keep (down-sampled without replacement); 0 keeps all.
    seed
        Seed of every random choice.
    count
        Key of :data:`~hawkes_cli.prep.columns.COUNT_SETS` (``admissions`` or ``census``).
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
        if self.engine not in CSV_READERS:
            raise UsageError(f"engine must be one of {', '.join(CSV_READERS)}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready copy (dates as ISO text)."""
        out = asdict(self)
        for key in ("start", "end", "origin"):
            out[key] = None if out[key] is None else out[key].isoformat()
        out["columns"] = list(self.columns)
        out["suppressed"] = "drop" if self.suppressed is None else self.suppressed
        return out


def count_columns_for(options: HHSOptions) -> tuple[tuple[str, ...], int, str]:
    """The count columns the options select.

    Returns
    -------
    columns : tuple of str
        Normalised names of the columns summed into the week's count.
    shift : int
        Days from ``collection_week`` to the window's first day: -1 for ``previous_day_*``
        columns (admissions reported each day are those of the day before), else 0.
    description : str
        What the count means (for the metadata).

    Raises
    ------
    UsageError
        Explicit columns mix ``previous_day_*`` columns with others (different windows), or
        name an identifier column (``fips_code``, ...).
    """
    if options.columns:
        names = tuple(dict.fromkeys(normalise_column(c) for c in options.columns))
        ids = [c for c in names if c in ID_COLUMNS]
        if ids:
            raise UsageError(
                f"--column {ids[0]} identifies a row, it is not a count of cases; name count "
                f"columns (e.g. {COUNT_SETS['admissions'][0][0]}), or leave --column out for "
                "--count"
            )
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
