"""A chain's progress record, ``RUN_DIR/chains/chain-XX.progress.json``
(:meth:`hawkes_cli.rundir.RunDir.write_progress` writes it, rank 0 every few seconds)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .vocab import PHASE_SAMPLING, PHASE_WARMUP

__all__ = ["Progress"]


@dataclass(frozen=True)
class Progress:
    """A chain's progress record (rank 0 rewrites it every few seconds and at each phase change).

    ``status`` is ``pending`` (nothing written yet), ``running``, ``stopped``, ``finished`` or
    ``failed``; ``phase`` (one of :data:`PHASES`) says what a running chain is doing. Records
    written before phases existed have no ``phase``, ``warmup``, ``elapsed``, ``evaluations``,
    ``best_log_post`` or ``note`` (read as None; :meth:`current_phase` derives one); members
    this version does not know are kept in ``extra``.

    Attributes
    ----------
    iteration, iterations
        The next iteration to run, and the chain's total (warm-up included).
    it_per_s
        Iterations per second of this process's loop in its current phase (warm-up, then
        sampling from the end of warm-up; the loop's so far before the phase's first
        iteration; None before the loop's first).
    acceptance
        Share of this process's iterations that moved (None before its first).
    elapsed
        Seconds since this process began driving the chain (set-up excluded).
    evaluations, best_log_post
        The fast start's log posterior evaluations so far and the best value seen (the
        search's, on the subsample scaled to the full data, then the full posterior's).
    note
        What the phase waits for (e.g. another chain's fast start); for a running chain of
        ``stop_when: converged``, its last convergence check; or None.
    converge_at
        ``stop_when: converged``: the iteration at which the last check's smallest ESS is
        projected to reach its target (ESS in proportion to the draws after warm-up); None
        when not projected.
    """

    chain: int
    status: str
    iteration: int
    iterations: int
    it_per_s: float | None = None
    acceptance: float | None = None
    loglik: float | None = None
    draws_committed: int = 0
    host: str | None = None
    pid: int | None = None
    updated: str | None = None
    phase: str | None = None
    warmup: int | None = None
    elapsed: float | None = None
    evaluations: int | None = None
    best_log_post: float | None = None
    note: str | None = None
    converge_at: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("extra"))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        return cls(
            **{k: data[k] for k in known if k in data},
            extra={k: v for k, v in data.items() if k not in known},
        )

    def current_phase(self) -> str:
        """:attr:`phase`, or for a record without one (written before phases existed) the
        status (``pending``, ``finished``, ``stopped``), or for a running one the warm-up or
        sampling phase where the warm-up length is known, else ``running``."""
        if self.phase:
            return str(self.phase)
        if self.status != "running":
            return str(self.status)
        if self.warmup is None:
            return "running"
        return PHASE_WARMUP if self.iteration < self.warmup else PHASE_SAMPLING
