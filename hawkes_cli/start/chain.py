"""A fresh chain's first state: the run's shared fast start, then the chain's own draw.

With explicit ``sampler.initial`` values a chain starts at them, jittered by its sampler
stream (:func:`first_state`). With ``initial: auto`` (the default) it first takes the run's fast
start (:func:`fast_start`): the first chain of the run directory to get there searches
(:func:`~hawkes_cli.start.find.find_start` on the chain's collective likelihood, on the scaled
log-likelihood of a subsample of ``start_subsample`` events and, when the run redraws
locations, at one seeded location draw; :mod:`.subsample`) and writes ``chains/start.json``;
the others read it (:mod:`.shared`). Each chain then draws its own over-dispersed start around
the mode from its sampler stream (:func:`~hawkes_cli.start.find.overdispersed_starts`, so
R-hat keeps its meaning).

A stop request (the rank's stop flag) ends the search within one evaluation and the wait for
another chain's search within a poll, with :class:`~hawkes_cli.errors.Interrupted`: nothing is
committed before the start is. Both report their progress to a :class:`StartReport` (the
chain's progress record): the evaluations so far and the best log posterior, or whose search
the chain waits for.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import numpy as np

from ..distributed import ChainSetup, DistributedLikelihood
from ..errors import ConfigError, Interrupted
from ..posterior import Density, LogPosterior, ScaledLikelihood, to_params, to_theta
from ..rundir import RunDir
from ..sampler import Sampler, SamplerState
from ..vocab import PARAM_NAMES
from .find import find_start, overdispersed_starts
from .result import StartResult
from .search import LogPost
from .shared import SharedStart, shared_start, start_key

log = logging.getLogger(__name__)

__all__ = ["StartReport", "fast_start", "first_state", "natural", "stop_requested"]

INIT_JITTER = 0.3  # sd of each chain's random start around the initial values, log scale
#: Data whose events outnumber their distinct times this many times over are on a day lattice
#: (a ``tau_t`` change then costs the fast start's cheap-coordinate polish no pair pass).
LATTICE_SHARE = 10
#: Search starts of ``tau_t`` besides the default (log-spaced from 1 day to the data's span).
N_TAU_STARTS = 5
#: Over-dispersed start draws tried (each must have a finite log posterior) before a chain
#: starts at the mode itself.
MAX_START_DRAWS = 20


class StartReport(Protocol):
    """Where the fast start reports its progress (the chain's progress record)."""

    def searching(self, evaluations: int, best: float | None) -> None:
        """The search made ``evaluations`` so far; ``best``: the best log posterior seen."""

    def waiting(self, holder: str, seconds: float) -> None:
        """The chain has waited ``seconds`` for the fast start of ``holder``."""


def natural(theta: Any) -> dict[str, float]:
    """Natural-scale values by name of log-parameters ``theta``, rounded for messages."""
    values = np.exp(np.asarray(theta, dtype=float))
    return {n: float(f"{v:.6g}") for n, v in zip(PARAM_NAMES, values, strict=True)}


def stop_requested(setup: ChainSetup) -> bool:
    """Whether this rank's stop flag is set, read anywhere (not only at a boundary)."""
    stop = setup.rank.stop
    requested = getattr(stop, "requested", None)
    return bool(requested()) if callable(requested) else bool(stop)


def fast_start(
    setup: ChainSetup,
    likelihood: DistributedLikelihood,
    posterior: LogPosterior,
    report: StartReport | None = None,
) -> StartResult:
    """``initial: auto``: the run's shared fast start (:mod:`.shared`).

    The first chain of the run directory to get here searches (:func:`_search`) and writes the
    result; the others wait for it, read it and restore the truncation cut-off the search
    left, so their draws are those of a chain that searched itself. ``report`` hears of the
    search's evaluations, or of the wait.
    """
    config = setup.config

    def compute() -> SharedStart:
        result = _search(setup, likelihood, posterior, _Evaluations(setup, report))
        # the cut-off for the mode, not for where the search passed (it only grows there)
        likelihood.recalibrate(to_params(result.theta))
        return SharedStart(result, setup.rank.truncation_state(), setup.chain_id)

    key = start_key(config.draws_sha256, setup.rank.comm.size, setup.data)
    shared, reused = shared_start(
        RunDir.of(config).start_path,
        key,
        compute,
        chain_id=setup.chain_id,
        should_stop=lambda: stop_requested(setup),
        on_wait=None if report is None else report.waiting,
    )
    if reused:
        likelihood.restore(None, shared.truncation)
        log.info(
            "chain %d: fast start of chain %d reused (its search took %.1f s); mode %s",
            setup.chain_id,
            shared.chain_id,
            shared.result.seconds,
            natural(shared.result.theta),
        )
    return shared.result


class _Evaluations:
    """The search's log posteriors, counted: each call first reads the stop flag (raising
    :class:`Interrupted` once it is set, so a signal stops the fast start within one
    evaluation; nothing is committed before it ends), then tells ``report`` the count and the
    best value so far."""

    def __init__(self, setup: ChainSetup, report: StartReport | None) -> None:
        self.setup, self.report = setup, report
        self.n = 0
        self.best: float | None = None

    def begin(self) -> None:
        """Report the search's start (no evaluation yet)."""
        if self.report is not None:
            self.report.searching(0, None)

    def wrap(self, log_post: LogPost) -> LogPost:
        """``log_post`` (theta -> float), stoppable and counted."""

        def evaluate(theta: np.ndarray) -> float:
            if stop_requested(self.setup):
                raise Interrupted(
                    f"chain {self.setup.chain_id}: stopped during the fast start; nothing was "
                    "committed, run again to resume (the search starts over)"
                )
            value = log_post(theta)
            self.n += 1
            if math.isfinite(value) and (self.best is None or value > self.best):
                self.best = float(value)
            if self.report is not None:
                self.report.searching(self.n, self.best)
            return value

        return evaluate


def _search(
    setup: ChainSetup,
    likelihood: DistributedLikelihood,
    posterior: LogPosterior,
    evaluations: _Evaluations,
) -> StartResult:
    """The posterior mode and its curvature (the same for every chain).

    Searched from :attr:`ChainSetup.initial` and from ``tau_t`` log-spaced from 1 day to the
    data's span, on the log-likelihood of a subsample scaled by ``N / n`` (on the chain's own
    posterior when the data have at most ``start_subsample`` events); curvature and polish on
    the full posterior. Every evaluation is collective (and counted in ``evaluations``).
    """
    config, data, rank = setup.config, setup.data, setup.rank
    n_sub = min(data.n, config.sampler.start_subsample)
    search = posterior
    if n_sub < data.n:
        search = LogPosterior(
            ScaledLikelihood(likelihood.subsample_loglik, data.n / n_sub), posterior.priors
        )
    span = float(data.time[-1] - data.time[0])
    tau_index = PARAM_NAMES.index("tau_t")
    tau_starts = np.log(np.geomspace(1.0, span, N_TAU_STARTS)) if span > 1.0 else ()
    # a tau_t change costs a background pass: O(U^2 + N) on a day lattice, a pair pass else
    lattice = np.unique(data.time).size * LATTICE_SHARE <= data.n
    cheap = tuple(i for i in posterior.cheap if i != tau_index or lattice)
    passes0 = rank.pair_passes, rank.subsample_pair_passes
    # a run that redraws locations searches on one draw of them (so do its subsample's events)
    moved = likelihood.use_search_locations()
    evaluations.begin()
    try:
        result = find_start(
            evaluations.wrap(posterior),
            to_theta(setup.initial),
            subsample_log_post=evaluations.wrap(search),
            tau_index=tau_index,
            tau_starts=tau_starts,
            cheap=cheap,
        )
    except ValueError as exc:
        raise ConfigError(
            f"{config.source}: the fast start (sampler.initial: auto) found no point with a "
            f"finite log posterior ({exc}); set sampler.initial to starting values"
        ) from exc
    finally:
        if search is not posterior:
            likelihood.end_subsample()
        if moved:
            likelihood.use_file_locations()
    where = f"a subsample of {n_sub} events" if search is not posterior else "the full data"
    _log_search(setup, result, where, passes0)
    return result


def _log_search(
    setup: ChainSetup, result: StartResult, where: str, passes0: tuple[int, int]
) -> None:
    """The INFO line of a finished search: its cost and its mode (``passes0``: the chain's
    and the subsample's pair passes before it)."""
    rank = setup.rank
    log.info(
        "chain %d: fast start in %.1f s: search %d evaluations on %s, %d cheap-coordinate and "
        "%d curvature evaluations on the full data; pair passes %d on the subsample, %d on the "
        "full data; %d mode(s), curvature from %s; mode %s, log posterior %.6g",
        setup.chain_id,
        result.seconds,
        result.n_sub_evals,
        where,
        result.n_cheap_evals,
        result.n_full_evals,
        rank.subsample_pair_passes - passes0[1],
        rank.pair_passes - passes0[0],
        len(result.modes),
        result.hessian,
        natural(result.theta),
        result.log_post,
    )


def first_state(
    setup: ChainSetup, posterior: LogPosterior, sampler: Sampler, start: StartResult | None
) -> tuple[SamplerState, Density]:
    """A fresh chain's first state, from the sampler stream.

    Without a fast start: the initial values jittered. With one: an over-dispersed draw
    around the mode (:func:`overdispersed_starts`; redrawn while the log posterior is not
    finite, at most :data:`MAX_START_DRAWS` times, then the mode itself); the tiered sampler
    starts from the mode's covariance.
    """
    if start is None:
        theta0 = to_theta(setup.initial)
        theta0 = theta0 + INIT_JITTER * setup.rng.standard_normal(len(PARAM_NAMES))
        current = posterior.evaluate(theta0)
        if not current.finite:
            raise ConfigError(
                f"{setup.config.source}: the log posterior is not finite at the initial values "
                f"{natural(theta0)}; set sampler.initial"
            )
        return sampler.init(theta0, current.log_target), current
    for _ in range(MAX_START_DRAWS):
        theta0 = overdispersed_starts(start, 1, setup.rng)[0]
        current = posterior.evaluate(theta0)
        if current.finite:
            break
    else:
        log.warning(
            "chain %d: no over-dispersed start with a finite log posterior in %d draws; "
            "starting at the mode",
            setup.chain_id,
            MAX_START_DRAWS,
        )
        theta0 = np.asarray(start.theta, dtype=float)
        current = posterior.evaluate(theta0)
    log.info("chain %d: starting at %s", setup.chain_id, natural(theta0))
    if sampler.kind == "tiered":
        return sampler.init(theta0, current.log_target, cov=start.cov_matrix), current
    return sampler.init(theta0, current.log_target), current
