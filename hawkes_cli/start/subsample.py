"""What the fast start searches on: a seeded subsample of the events, at one seeded location
draw when the run redraws locations.

Both are drawn from the run's seed only (never a chain's streams), so every chain and every rank
of a run searches on the same events at the same places and finds the same mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..data import EventData
from ..engine import Likelihood

if TYPE_CHECKING:
    from ..geo import PolygonSampler

__all__ = ["START_LOCATIONS_KEY", "start_locations", "subsample_events", "subsample_likelihood"]

#: ``spawn_key`` of the fast start's location draw (chains use their number, < 10,000).
START_LOCATIONS_KEY = 2**31 - 1


def subsample_events(data: EventData, n: int, seed: int) -> EventData:
    """``n`` events of ``data`` drawn without replacement, in time order.

    Drawn from the run's root ``SeedSequence(seed)`` (chains use its children), so every chain
    and every rank draws the same subsample.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    idx = np.sort(rng.choice(data.n, size=n, replace=False))

    def pick(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else values[idx]

    return EventData(
        time=data.time[idx],
        x=data.x[idx],
        y=data.y[idx],
        density=pick(data.density),
        fips=pick(data.fips),
        attrs=data.attrs,
        source=f"{data.source} (subsample of {n} events)",
    )


def start_locations(
    polygons: PolygonSampler, codes: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The one location draw the fast start searches on when the run redraws locations.

    Drawn from ``SeedSequence(seed, spawn_key=(START_LOCATIONS_KEY,))``: the same for every
    chain and rank of the run, and apart from every chain's own streams.

    Returns
    -------
    x, y : (N,) float64
        Coordinates (coordinate units), event ``n`` uniform in polygon ``codes[n]``.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(START_LOCATIONS_KEY,)))
    return polygons.sample(codes, rng)


#: Builds this rank's likelihood of some events with the chain's engine settings, given the
#: observation window's end (days; None: the events' last time).
LikelihoodOf = Callable[[EventData, "float | None"], Likelihood]


def subsample_likelihood(
    data: EventData,
    n: int,
    seed: int,
    likelihood_of: LikelihoodOf,
    window_end: float | None,
    locations: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
) -> Likelihood:
    """This rank's share of the likelihood of :func:`subsample_events` (collective over the
    chain's ranks), built by ``likelihood_of`` with the full data's observation window
    (``window_end``, else the full data's last time, not the subsample's); of the events at
    ``locations()`` (the fast start's location draw) when given."""
    if locations is not None:
        data = data.with_locations(*locations())
    window = float(data.time[-1]) if window_end is None else window_end
    return likelihood_of(subsample_events(data, n, seed), window)
