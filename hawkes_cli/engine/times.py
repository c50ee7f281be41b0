"""The tie structure of sorted event times, shared by every engine (DESIGN section 2: the
background skips equal times, the trigger needs strictly earlier ones)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimeStructure:
    """Tie structure of sorted times, shared by all engines.

    Attributes
    ----------
    lo : (N,) int64
        First index of each event's tie group: sources of the trigger are ``m < lo[n]``.
    hi : (N,) int64
        One past the last index of each event's tie group.
    unique : (U,) float64
        Distinct times, ascending.
    counts : (U,) int64
        Events at each distinct time.
    inverse : (N,) int64
        Index into ``unique`` of each event.
    """

    lo: np.ndarray
    hi: np.ndarray
    unique: np.ndarray
    counts: np.ndarray
    inverse: np.ndarray

    @classmethod
    def from_times(cls, time: np.ndarray) -> TimeStructure:
        """Build from times sorted ascending, shape (N,)."""
        time = np.asarray(time, dtype=np.float64)
        if time.size and np.any(np.diff(time) < 0):
            raise ValueError("times must be sorted ascending")
        unique, inverse, counts = np.unique(time, return_inverse=True, return_counts=True)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        lo = starts[inverse]
        hi = lo + counts[inverse]
        return cls(lo=lo, hi=hi, unique=unique, counts=counts, inverse=inverse)

    def row_cost(self) -> np.ndarray:
        """Pair terms each row costs, shape (N,): trigger ``lo[n]`` plus its share of the
        background row of its distinct time (``U / count``)."""
        u = self.unique.size
        return self.lo.astype(np.float64) + u / self.counts[self.inverse] + 1.0
