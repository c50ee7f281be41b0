"""Rows -> cases: random rounding, the date window's overlap, down-sampling, case days.

A fractional count ``c`` becomes ``floor(c) + 1`` cases with probability ``c - floor(c)``, else
``floor(c)``; a row whose window overlaps ``[start, end]`` by ``k`` of its 7 days keeps
``Binomial(c, k/7)`` of them; ``n`` of the ``M`` cases are kept uniformly without replacement,
each on a uniform day of its row's window. Cases are never materialised: the chosen case indices
are mapped to rows through the cumulative counts, so memory is O(rows + n).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import EventsError, UsageError
from .classify import RowPlan
from .options import HHSOptions
from .parse import day_of

log = logging.getLogger(__name__)

#: Most cases one facility row (a hospital-week) may hold: far beyond any hospital, far inside
#: float64's exact integers and int64 (the sum over all rows must fit too).
MAX_ROW_CASES = 1e9
#: Most cases kept in one events file (``--n``, or all with ``--n 0``): ~100 bytes each
#: through the pipeline, so about 10 GB at the limit.
MAX_CASES = 100_000_000


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
        From :func:`~hawkes_cli.prep.classify.classify_rows`.
    n
        Cases to keep (0: all).
    streams
        Three generators: rounding, window overlap, down-sampling + days.
    """
    rounding, overlap, sampling = streams
    kept = np.flatnonzero(plan.reason == 0)
    total = plan.total[kept]
    huge = np.flatnonzero(~(total <= MAX_ROW_CASES))
    if huge.size:
        i = int(huge[0])
        raise EventsError(
            f"data row {int(kept[i]) + 1} has {total[i]:g} cases in one week (and {huge.size} "
            f"row(s) have more than {MAX_ROW_CASES:.0e}); a count that large is a damaged "
            "value: fix or remove those rows"
        )
    base = np.floor(total)
    count = (base + (rounding.random(kept.size) < total - base)).astype(np.int64)
    width = (plan.hi[kept] - plan.lo[kept] + 1).astype(np.int64)
    inside = count.copy()
    partial = np.flatnonzero(width < 7)
    if partial.size:
        inside[partial] = overlap.binomial(count[partial], width[partial] / 7.0)
    m_total = int(inside.sum())
    keep = m_total if n == 0 else min(n, m_total)
    if keep > MAX_CASES:
        raise UsageError(
            f"{'--n 0 keeps all' if n == 0 else f'--n {n} keeps'} {keep:,} of the {m_total:,} "
            f"cases, more than {MAX_CASES:,} (each takes memory in every step); give a "
            f"smaller --n (cases drawn at random without replacement)"
        )
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


def origin_day(options: HHSOptions, plan: RowPlan) -> int:
    """Day 0 of the time axis (days since 1970-01-01).

    ``options.origin``, else ``options.start``, else the first day of the earliest kept row's
    window.
    """
    if options.origin is not None:
        return day_of(options.origin)
    if options.start is not None:
        return day_of(options.start)
    return int(plan.lo[plan.reason == 0].min())
