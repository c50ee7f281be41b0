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

from .classify import RowPlan
from .options import HHSOptions
from .parse import day_of

log = logging.getLogger(__name__)


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
