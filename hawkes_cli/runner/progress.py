"""Rank 0's progress record (``chains/chain-XX.progress.json``): what the chain is doing.

One :class:`ProgressWriter` per call of :func:`~hawkes_cli.runner.run_chain` follows the chain
through its phases (:data:`~hawkes_cli.rundir.PHASES`): the fast start (the search reports its
evaluations and best log posterior; a chain waiting for another's search says so), the warm-up
and sampling iterations, and how the call ended (finished, stopped, failed). The record is
written at once at every phase change and at most every :data:`PROGRESS_SECONDS` within a
phase; ``hawkes-run local`` renders it (:mod:`hawkes_cli.cli.progress_view`).

The rate (``it_per_s``) is the current loop phase's: sampling iterations since the end of
warm-up, which cost differently from warm-up ones (a tuned step size, a fixed truncation
cut-off), so the ETA to the cap is not an average over both. With ``sampler.stop_when:
converged``, the last convergence check's smallest ESS projects the iteration at which the
run reaches the target ESS (``converge_at``; ESS grows in proportion to the draws after
warm-up).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from ..chain_progress import Progress
from ..diagnostics.verdicts import ESS_WARN
from ..rundir import RunDir
from ..vocab import (
    PHASE_FAILED,
    PHASE_FAST_START,
    PHASE_FINISHED,
    PHASE_SAMPLING,
    PHASE_STOPPED,
    PHASE_WARMUP,
)

log = logging.getLogger(__name__)

__all__ = ["PROGRESS_SECONDS", "ProgressWriter", "projected_iteration"]

PROGRESS_SECONDS = 2.0
_STATUS = {PHASE_FINISHED: "finished", PHASE_STOPPED: "stopped", PHASE_FAILED: "failed"}


def projected_iteration(
    iteration: int, warmup: int, ess: float | None, target: float = ESS_WARN
) -> int | None:
    """The iteration at which the smallest ESS reaches ``target``, projected from ``ess`` at
    ``iteration`` (ESS grows about in proportion to the draws after warm-up, the chains
    advancing together): ``warmup + ceil((iteration - warmup) * target / ess)``. None when
    there is nothing to project from (no draws after warm-up, no finite positive ESS) or the
    ESS is already at the target (then R-hat, not the ESS, holds the run back).
    """
    done = iteration - warmup
    if ess is None or not math.isfinite(ess) or ess <= 0 or ess >= target or done <= 0:
        return None
    return warmup + math.ceil(done * target / ess)


class ProgressWriter:
    """Rank 0's progress record of one chain: phase, iteration, rate, acceptance, fast start.

    Parameters
    ----------
    chain_id
        0-based chain number.
    iterations, warmup
        The chain's iterations (warm-up included) and warm-up iterations.
    run_dir
        The run directory the record goes to.
    callback
        Called with the record (as JSON) at every write, or None.
    clock
        Seconds (monotonic); the elapsed time and the rate are measured with it.
    """

    def __init__(
        self,
        chain_id: int,
        iterations: int,
        warmup: int,
        run_dir: str | Path,
        callback: Callable[[dict], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chain_id, self.iterations, self.warmup = chain_id, iterations, warmup
        self.run_dir = RunDir(run_dir)
        self.callback = callback
        self.clock = clock
        self.t0 = clock()
        self.last = -math.inf
        self.phase: str | None = None
        self.first = self.it = 0
        self.t_loop: float | None = None
        # where the current loop phase's rate is measured from: (phase, iteration, time)
        self.rate_from: tuple[str, int, float] | None = None
        self.converge_at: int | None = None
        self.accepted = 0
        self.loglik: float | None = None
        self.committed = 0
        self.evaluations: int | None = None
        self.best: float | None = None
        self.note: str | None = None

    # ---- the fast start (hawkes_cli.start.chain.StartReport)
    def searching(self, evaluations: int, best: float | None) -> None:
        """The fast start's search: ``evaluations`` so far, the best log posterior seen."""
        self.evaluations, self.best, self.note = evaluations, best, None
        if self._due(PHASE_FAST_START):
            self._write()

    def waiting(self, holder: str, seconds: float) -> None:
        """Waiting ``seconds`` so far for the fast start of ``holder`` (another chain, as its
        lock names it: ``chain 0, pid ... on HOST, since ...``; the note keeps ``chain 0``)."""
        self.note = f"waiting for the fast start of {holder.partition(',')[0]}"
        if self._due(PHASE_FAST_START):
            self._write()

    # ---- the iterations
    def begin(self, first: int, loglik: float, committed: int) -> None:
        """The loop starts at iteration ``first`` (written at once)."""
        self.first = self.it = first
        self.t_loop = self.clock()
        self.rate_from = (self._loop_phase(), first, self.t_loop)
        self.loglik, self.committed = loglik, committed
        self.evaluations = self.best = self.note = None
        self._due(self._loop_phase(), force=True)
        self._write()

    def show_note(self, note: str, ess: float | None = None) -> None:
        """A note for a running chain's line (``stop_when: converged``: its last check);
        written with the next record. ``ess``: the check's smallest bulk or tail ESS, which
        projects the iteration of convergence (:func:`projected_iteration`; None: none)."""
        self.note = note
        self.converge_at = projected_iteration(self.it, self.warmup, ess)

    def step(self, accepted: bool, loglik: float, committed: int) -> None:
        """One iteration done (written at a phase change or every few seconds)."""
        self.it += 1
        self.accepted += bool(accepted)
        self.loglik, self.committed = loglik, committed
        phase = self._loop_phase()
        if self.rate_from is not None and self.rate_from[0] != phase:
            self.rate_from = (phase, self.it, self.clock())  # the end of warm-up
        if self._due(phase):
            self._write()

    def end(self, phase: str, loglik: float | None = None, committed: int | None = None) -> None:
        """How this call ended: :data:`~hawkes_cli.rundir.PHASE_FINISHED`, ``STOPPED`` or
        ``FAILED`` (written at once)."""
        if loglik is not None:
            self.loglik = loglik
        if committed is not None:
            self.committed = committed
        self._due(phase, force=True)
        self._write()

    def _loop_phase(self) -> str:
        return PHASE_WARMUP if self.it < self.warmup else PHASE_SAMPLING

    def _due(self, phase: str, force: bool = False) -> bool:
        """Whether to write now: a new phase, ``force``, or :data:`PROGRESS_SECONDS` since the
        last write; sets the phase."""
        now = self.clock()
        if not (force or phase != self.phase or now - self.last >= PROGRESS_SECONDS):
            return False
        self.phase, self.last = phase, now
        return True

    def record(self) -> Progress:
        """The record as it stands."""
        now = self.clock()
        done = self.it - self.first
        rate = None
        if self.rate_from is not None and self.it > self.rate_from[1]:
            # the current phase's (or, once ended, the last phase's) iterations alone
            _, it0, t0 = self.rate_from
            rate = (self.it - it0) / max(now - t0, 1e-9)
        elif self.t_loop is not None:  # none of this phase yet: the loop's so far
            rate = done / max(now - self.t_loop, 1e-9)
        return Progress(
            chain=self.chain_id,
            status=_STATUS.get(self.phase or "", "running"),
            iteration=self.it,
            iterations=self.iterations,
            it_per_s=rate,
            acceptance=self.accepted / done if done else None,
            loglik=self.loglik,
            draws_committed=self.committed,
            host=socket.gethostname(),
            pid=os.getpid(),
            updated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            phase=self.phase,
            warmup=self.warmup,
            elapsed=now - self.t0,
            evaluations=self.evaluations,
            best_log_post=self.best,
            note=self.note,
            converge_at=self.converge_at,
        )

    def _write(self) -> None:
        record = self.record()
        self.run_dir.write_progress(record)
        self._log(record)
        if self.callback is not None:
            self.callback(record.to_json())

    def _log(self, record: Progress) -> None:
        """The chain log's INFO line of a write (none at the loop's start)."""
        if record.phase == PHASE_FAST_START:
            if record.note is None:
                best = record.best_log_post
                log.info(
                    "chain %d: fast start: %d evaluations, best log posterior %s",
                    self.chain_id,
                    record.evaluations or 0,
                    "-" if best is None else f"{best:.6g}",
                )
        elif self.t_loop is not None and (self.it > self.first or record.status != "running"):
            log.info(
                "chain %d: %d/%d  %.3g it/s  acc %.2f  loglik %.6g",
                self.chain_id,
                self.it,
                self.iterations,
                record.it_per_s,
                record.acceptance or 0.0,
                math.nan if self.loglik is None else self.loglik,
            )
