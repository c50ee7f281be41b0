"""Branching probabilities: the posterior probability that each event was triggered.

For one parameter draw, with ``lambda_n = mu0 B_n + xi0 E_n`` exactly as the likelihood uses it
(:meth:`hawkes_cli.engine.Likelihood.components`, DESIGN section 2)::

    p_n = xi0 E_n / (mu0 B_n + xi0 E_n)        (0 where lambda_n is 0)

is the probability that event ``n`` descends from an earlier event rather than the background.
:class:`BranchingAccumulator` keeps running sums over draws (Welford), so the posterior mean and
sd over K draws need O(N) memory, and the per-draw shares triggered by week and by county, whose
posterior mean and sd it reports too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Params


def p_triggered(B: np.ndarray, E: np.ndarray, p: Params) -> np.ndarray:
    """``xi0 E / (mu0 B + xi0 E)`` per event, shape (N,), float64 (0 where both are 0)."""
    trig = p.xi0 * np.asarray(E, dtype=np.float64)
    lam = p.mu0 * np.asarray(B, dtype=np.float64) + trig
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(lam > 0, trig / np.where(lam > 0, lam, 1.0), 0.0)


@dataclass(frozen=True)
class GroupShares:
    """Share of events triggered per group (week or county), over draws.

    Attributes
    ----------
    keys : (G,) array
        Group keys (week number, or county code).
    events : (G,) int64
        Events in each group.
    mean, sd : (G,) float64
        Posterior mean and sd of the group's share triggered (mean of ``p_n`` over its events).
    """

    keys: np.ndarray
    events: np.ndarray
    mean: np.ndarray
    sd: np.ndarray


class BranchingAccumulator:
    """Running posterior mean and sd of ``p_n`` and of group shares over draws.

    Parameters
    ----------
    n
        Events N.
    groups
        Name -> (keys (G,), index (N,) int64 into keys, ``-1`` for no group).
    """

    def __init__(self, n: int, groups: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.k = 0
        self._mean = np.zeros(n)
        self._m2 = np.zeros(n)
        self._groups = groups
        self._counts = {
            g: np.bincount(idx[idx >= 0], minlength=len(keys)).astype(np.int64)
            for g, (keys, idx) in groups.items()
        }
        self._shares: dict[str, list[np.ndarray]] = {g: [] for g in groups}

    def add(self, p: np.ndarray) -> None:
        """Add one draw's ``p_n``, shape (N,)."""
        self.k += 1
        delta = p - self._mean
        self._mean += delta / self.k
        self._m2 += delta * (p - self._mean)
        for g, (keys, idx) in self._groups.items():
            ok = idx >= 0
            sums = np.bincount(idx[ok], weights=p[ok], minlength=len(keys))
            with np.errstate(invalid="ignore"):
                self._shares[g].append(sums / self._counts[g])

    @property
    def mean(self) -> np.ndarray:
        """Posterior mean of ``p_n``, shape (N,)."""
        return self._mean.copy()

    @property
    def sd(self) -> np.ndarray:
        """Posterior sd of ``p_n`` over the draws (ddof 1; 0 with one draw), shape (N,)."""
        return np.sqrt(self._m2 / (self.k - 1)) if self.k > 1 else np.zeros_like(self._mean)

    def shares(self, group: str) -> GroupShares:
        """The shares triggered of one grouping."""
        keys, _ = self._groups[group]
        arr = np.vstack(self._shares[group])
        return GroupShares(
            keys=keys,
            events=self._counts[group],
            mean=arr.mean(axis=0),
            sd=arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1]),
        )
