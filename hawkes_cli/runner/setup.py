"""Building one rank of a chain: events, area, likelihood, location stream, random streams.

Random numbers: ``SeedSequence(seed, spawn_key=(chain_id,))`` spawns two streams, one for the
sampler (used by rank 0 only) and one for the cut-posterior location draws (used identically by
every rank, so locations need no broadcast). Both states go into each checkpoint; a resumed
chain continues bit-for-bit, whatever the number of ranks or restarts. The fast start's
subsample and location draw come from the run's seed alone (:mod:`hawkes_cli.start.subsample`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import Config
from ..data import EventData, load_events, resolve_area
from ..distributed import ChainRank, ChainSetup
from ..engine import Likelihood, build_likelihood
from ..engine import ahead as draw_ahead
from ..engine.point_draw import device_point_draw
from ..engine.truncated import TruncatedBackend
from ..parallel import Comm
from ..regions import study_region
from ..resample import LocationStream, make_resampler
from ..start.subsample import LikelihoodOf, start_locations, subsample_likelihood
from ..stop import StopFlag

__all__ = ["build_chain", "default_initial"]


def default_initial(data: EventData, area: float) -> dict[str, float]:
    """Data-scaled starting values (natural scale) for parameters the config leaves open."""
    span = float(data.time[-1] - data.time[0]) or 1.0
    return {
        "mu0": 0.5,
        "tau_t": span / 10.0,
        "xi0": 0.5,
        "sigma_x": math.sqrt(area) / 20.0,
        "sigma_t": span / 100.0,
    }


def build_chain(config: Config, chain_id: int, comm: Comm, stop: StopFlag) -> ChainSetup:
    """Load the data and build this rank's likelihood, location stream and random streams.

    Every rank of the chain calls it (the engine's set-up may be collective).

    Parameters
    ----------
    config
        The run's configuration.
    chain_id
        0-based chain number (seeds ``SeedSequence(seed, spawn_key=(chain_id,))``).
    comm
        The chain's communicator; this rank evaluates its share of the rows.
    stop
        This rank's stop flag (read at iteration boundaries).
    """
    sc = config.sampler
    data = load_events(config.data.events, need_density=config.model.kind == 2)
    area = resolve_area(config, data)
    initial = default_initial(data, area)
    if not sc.fast_start:
        initial |= dict(sc.initial)
    # the truncated trigger's uneven row work is balanced at the initial lengthscales
    balance = (initial["sigma_x"], initial["sigma_t"])
    resampler = make_resampler(config, data)
    region = study_region(config, data, None if resampler is None else resampler[0])

    def likelihood_of(events: EventData, window_end: float | None) -> Likelihood:
        counties = None
        if resampler is not None:  # redrawn in their counties: edge masses planned per county
            polys = resampler[0]
            counties = (polys.triangles, polys.tri_owner, polys.codes(events.fips))
        return build_likelihood(
            events,
            config.engine,
            model=config.model.kind,
            area=area,
            comm=comm,
            window_end=window_end,
            balance=balance,
            region=region,
            edge=config.model.edge,
            counties=counties,
        )

    likelihood = likelihood_of(data, config.data.window_end)
    if sc.kind == "tiered":  # a new tau_t per move: keep the current B; new sigmas: its E
        likelihood.background_cache_size = sc.n_cheap + sc.n_expensive + 2
        likelihood.trigger_cache_size = sc.n_expensive + 1
    search_locations, subsample = _search_inputs(config, data, resampler, likelihood_of)
    mcmc_seq, loc_seq = np.random.SeedSequence(sc.seed, spawn_key=(chain_id,)).spawn(2)
    locations = ahead = None
    if resampler is not None:
        polys, codes = resampler
        device = device_point_draw(likelihood.backend, *polys.draw_tables, codes)
        locations = LocationStream(polys, codes, rng=np.random.default_rng(loc_seq), device=device)
        backend = likelihood.backend
        if sc.resample_every == 1 and isinstance(backend, TruncatedBackend):
            ahead = backend.prepare_locations if draw_ahead.enabled() else None
    rank = ChainRank(
        likelihood,
        comm,
        locations=locations,
        stop=stop,
        subsample=subsample,
        search_locations=search_locations,
        file_locations=(data.x, data.y),
        ahead=ahead,
    )
    return ChainSetup(
        config=config,
        chain_id=chain_id,
        data=data,
        area=area,
        initial=initial,
        rank=rank,
        rng=np.random.default_rng(mcmc_seq),
    )


def _search_inputs(
    config: Config,
    data: EventData,
    resampler: tuple[Any, np.ndarray] | None,
    likelihood_of: LikelihoodOf,
) -> tuple[Callable[[], tuple[np.ndarray, np.ndarray]] | None, Callable[[], Likelihood] | None]:
    """What the fast start searches on, built lazily on every rank: its one location draw
    (when the run redraws locations) and its subsample likelihood (when the data have more
    than ``start_subsample`` events); None where there is none."""
    sc = config.sampler
    search_locations = None
    if sc.fast_start and resampler is not None:
        search_locations = functools.cache(functools.partial(start_locations, *resampler, sc.seed))
    subsample = None
    if sc.fast_start and data.n > sc.start_subsample:
        subsample = functools.partial(
            subsample_likelihood,
            data,
            sc.start_subsample,
            sc.seed,
            likelihood_of,
            config.data.window_end,
            search_locations,
        )
    return search_locations, subsample
