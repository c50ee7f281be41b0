"""Rank 0's iteration loop: boundary (pin, stop agreement), location redraw, sampler step,
draw row, commit, progress.

Pair passes. At every iteration boundary the current state's B and E are cached on every rank
(the tiered kind keeps ``n_cheap + 3`` B arrays, so that an iteration's new ``tau_t`` values
never evict the current one; after a truncation tightening drops the cached E, the current one
is recomputed at once).

Truncation cut-off. It adapts (tightens) during the fast start and the warm-up only: from the
first iteration after warm-up (or a resume there) it is fixed on every rank, so the target no
longer changes; a bound above ``engine.tolerance`` is then counted (in the checkpoint and
:class:`ChainOutcome`) and logged, not tightened.

Commits. Every ``commit_every`` iterations (and at the end or a stop) :meth:`_Loop.commit`
makes the buffered draws and a typed :class:`~hawkes_cli.rundir.Checkpoint` durable together
(:meth:`~hawkes_cli.storage.ChainWriter.commit`).

Stopping at convergence (``sampler.stop_when: converged``). After each commit past warm-up
(and before the first iteration of a resumed chain past it), rank 0 asks
:func:`~.converged.run_converged`; between commits it looks for another chain's record every
few seconds (:func:`~.converged.found`). Once the run has converged the chain commits as
finished (``Checkpoint.converged``) and ends, like a chain that ran all its iterations.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from ..distributed import ChainSetup, DistributedLikelihood
from ..engine import profile
from ..posterior import Density, LogPosterior
from ..rundir import Checkpoint, RunDir
from ..sampler import Sampler, SamplerState, StepInfo
from ..start import StartResult
from ..stop import StopFlag
from ..storage import ChainWriter
from ..vocab import PARAM_NAMES, PHASE_FINISHED, PHASE_STOPPED, STOP_CONVERGED, TRIGGER_EXACT
from .converged import LOOK_SECONDS, found, run_converged
from .progress import ProgressWriter

log = logging.getLogger(__name__)

#: The progress note of a chain that ends when the run converges (its ETA is to the cap).
STOP_NOTE = "ends when converged, ETA to the cap"

__all__ = ["ChainOutcome"]


@dataclass(frozen=True)
class ChainOutcome:
    """How a call of :func:`run_chain` ended."""

    chain_id: int
    iteration: int  # next iteration to run (== iterations when finished)
    iterations: int
    draws_committed: int
    stopped: bool  # stopped early on request
    pair_passes: int = 0  # O(N^2) passes this call ran on this rank (background + trigger)
    loop_seconds: float = 0.0  # wall time of this call's iterations (set-up excluded)
    # passes before the first iteration (in pair_passes, in no row): the fast start (chain
    # likelihood; the subsample's apart) and the first evaluation, or a resume's recomputation
    # of the current state. With thin 1, pair_passes - start_passes = this call's rows' sum.
    start_passes: int = 0
    # after warm-up (the truncation cut-off fixed), over the chain's whole life (checkpointed):
    # evaluations whose truncation bound exceeded engine.tolerance, and the largest bound (nats)
    bound_exceedances: int = 0
    worst_bound: float = 0.0
    converged: bool = False  # ended before its iterations: the run converged (stop_when)

    @property
    def finished(self) -> bool:
        return self.converged or self.iteration >= self.iterations


class _Tape:
    """The posterior as a sampler's ``log_density``, keeping each call's :class:`Density` in
    call order, so the new state's parts are those of call ``StepInfo.target_call``."""

    def __init__(self, posterior: LogPosterior) -> None:
        self.posterior = posterior
        self.calls: list[Density] = []

    def __call__(self, theta: np.ndarray) -> float:
        density = self.posterior.evaluate(theta)
        self.calls.append(density)
        return density.log_target

    def after(self, info: StepInfo, current: Density) -> Density:
        """The Density of the state a step ended in (``current`` if it did not move)."""
        return current if info.target_call < 0 else self.calls[info.target_call]


class _Loop:
    """Rank 0's iteration loop: boundary (pin, stop agreement), location redraw, sampler step,
    draw row, commit, progress."""

    def __init__(
        self,
        setup: ChainSetup,
        likelihood: DistributedLikelihood,
        posterior: LogPosterior,
        sampler: Sampler,
        writer: ChainWriter,
        stop: StopFlag,
        progress: ProgressWriter,
        start: StartResult | None = None,
    ) -> None:
        self.setup = setup
        self.likelihood = likelihood
        self.posterior = posterior
        self.sampler = sampler
        self.writer = writer
        self.stop = stop
        self.progress = progress
        self.start = None if start is None else start.to_json()
        self.converged = False  # the run converged (stop_when: converged): end at the commit
        self._looked = -math.inf  # when _found_by_another last looked (time.monotonic)

    def run(
        self, state: SamplerState, current: Density, first: int, start_passes: int = 0
    ) -> ChainOutcome:
        """Iterations ``first`` .. the end (or a stop), committing every ``commit_every``.

        ``start_passes``: the pair passes this call ran before (reported in the outcome).
        """
        setup, writer, rank = self.setup, self.writer, self.setup.rank
        cfg, sc = setup.config, setup.config.sampler
        progress = self.progress
        progress.begin(first, current.loglik, writer.n_committed)
        it = first
        stopped = False
        self.converged = self._converged(it)
        t0 = time.perf_counter()
        while it < sc.iterations and not self.converged:
            if self._boundary(it, state):
                stopped = True
                break
            passes, tightenings = rank.pair_passes, rank.tightenings
            trigger_passes = rank.trigger_passes
            profile.iteration_begin()
            redraw = bool(sc.resample_every and it > 0 and it % sc.resample_every == 0)
            if redraw:
                self.likelihood.redraw_locations()
                current = self.posterior.evaluate(state.theta)
                state = dataclasses.replace(state, log_target=current.log_target)
            tape = _Tape(self.posterior)
            state, info = self.sampler.step(state, tape, setup.rng, adapt=it < sc.warmup)
            current = tape.after(info, current)
            if rank.tightenings != tightenings:
                # the tightening dropped the cached E: recompute the current state's now (its
                # value is not used), so every boundary holds the current B and E
                self.posterior.evaluate(state.theta)
            profile.iteration_end(
                it, trigger_passes=rank.trigger_passes - trigger_passes, redraw=redraw
            )
            if it % sc.thin == 0:
                row = self._row(it, state, current, info, rank.pair_passes - passes)
                writer.append(row)
            it += 1
            progress.step(info.accepted, current.loglik, writer.n_committed)
            if writer.n_pending >= cfg.output.commit_every:
                self.commit(state, current, it)
                self.converged = self._converged(it)
            else:
                self.converged = self._found_by_another(it)
        self.commit(state, current, it)
        outcome = ChainOutcome(
            setup.chain_id,
            it,
            sc.iterations,
            writer.n_committed,
            stopped,
            rank.pair_passes,
            time.perf_counter() - t0,
            start_passes,
            rank.bound_exceedances,
            rank.worst_bound,
            self.converged and it < sc.iterations,
        )
        self._report_end(outcome, current)
        return outcome

    def _converged(self, it: int) -> bool:
        """Whether the run has converged, asked with ``it`` iterations done and committed
        (``stop_when: converged`` only, after warm-up; :func:`~.converged.run_converged`);
        the progress record shows the last check."""
        config = self.setup.config
        if config.sampler.stop_when != STOP_CONVERGED:
            return False
        if it <= config.sampler.warmup:
            self.progress.show_note(STOP_NOTE)
            return False
        check = run_converged(RunDir.of(config), config, self.setup.chain_id)
        self.progress.show_note(f"{STOP_NOTE}; {check.summary}", ess=check.smallest_ess)
        return check.converged

    def _found_by_another(self, it: int) -> bool:
        """Between commits: whether another chain found the run converged (its record, looked
        for every :data:`~.converged.LOOK_SECONDS`; ``stop_when: converged``, after
        warm-up)."""
        config = self.setup.config
        if config.sampler.stop_when != STOP_CONVERGED or it <= config.sampler.warmup:
            return False
        now = time.monotonic()
        if now - self._looked < LOOK_SECONDS:
            return False
        self._looked = now
        if found(RunDir.of(config), config) is None:
            return False
        self.progress.show_note(f"{STOP_NOTE}; converged (found by another chain)")
        return True

    def _boundary(self, it: int, state: SamplerState) -> bool:
        """The iteration boundary before iteration ``it``: fix the truncation cut-off at the
        end of warm-up, pin the current state's pair sums, agree on stopping (every rank);
        returns whether to stop."""
        setup, rank = self.setup, self.setup.rank
        if it >= setup.config.sampler.warmup and rank.adapt_cutoff:
            # end of warm-up: the target stays the same from here on (every rank)
            self.likelihood.fix_cutoff()
            cutoff = rank.truncation_state()
            chosen = (cutoff or {}).get("trigger") or {}
            if cutoff is not None and chosen.get("trigger") != TRIGGER_EXACT:
                log.info(
                    "chain %d: warm-up over; truncation cut-off fixed at %s",
                    setup.chain_id,
                    cutoff,
                )
        self.posterior.pin(state.theta)
        return self.likelihood.boundary_stop()

    def _report_end(self, outcome: ChainOutcome, current: Density) -> None:
        """The last progress record and the end's WARNING lines (bounds above the tolerance,
        a stop)."""
        setup = self.setup
        if outcome.bound_exceedances:
            log.warning(
                "chain %d: %d evaluation(s) after warm-up had a truncation bound above "
                "engine.tolerance (%g nats; worst %.3g nats); their log-likelihood error may "
                "exceed the tolerance",
                setup.chain_id,
                outcome.bound_exceedances,
                setup.config.engine.tolerance,
                outcome.worst_bound,
            )
        phase = PHASE_STOPPED if outcome.stopped else PHASE_FINISHED
        self.progress.end(phase, current.loglik, outcome.draws_committed)
        if outcome.stopped:
            log.warning(
                "chain %d: stopped at iteration %d (signal %s); %d draws committed; run again "
                "to resume",
                setup.chain_id,
                outcome.iteration,
                self.stop.signum,
                outcome.draws_committed,
            )

    def _row(
        self, it: int, state: SamplerState, current: Density, info: StepInfo, passes: int
    ) -> dict[str, float | int]:
        """One row of the chain file (natural-scale parameters, then :data:`DRAW_FIELDS`);
        ``passes``: the pair passes of the iteration (rank 0's chain likelihood)."""
        row: dict[str, float | int] = dict(
            zip(PARAM_NAMES, np.exp(state.theta).tolist(), strict=True)
        )
        row.update(
            iteration=it,
            loglik=current.loglik,
            logprior=current.logprior,
            accepted=int(info.accepted),
            warmup=int(it < self.setup.config.sampler.warmup),
            coordinate=info.coordinate,
            scale=info.proposal_scale,
            pair_passes=passes,
            n_proposals=info.n_proposals,
            n_accepted=info.n_accepted,
            jump=int(info.jump_accepted) if info.jump_proposed else -1,
        )
        return row

    def commit(self, state: SamplerState, current: Density, iteration: int) -> None:
        """Make the buffered draws and the checkpoint at ``iteration`` durable together."""
        rank = self.setup.rank
        checkpoint = Checkpoint(
            iteration=iteration,
            sampler=state.to_json(),
            rng=self.setup.rng.bit_generator.state,
            loc_rng=rank.location_state,
            truncation=rank.truncation_state(),
            loglik=current.loglik,
            logprior=current.logprior,
            finished=iteration >= self.setup.config.sampler.iterations or self.converged,
            start=self.start,
            bound_exceedances=rank.bound_exceedances,
            worst_bound=rank.worst_bound,
            converged=self.converged and iteration < self.setup.config.sampler.iterations,
            iterations=self.setup.config.sampler.iterations,
        )
        self.writer.commit(checkpoint.to_json())
