"""Rank 0's progress record (``chains/chain-XX.progress.json``), rewritten every few seconds."""

from __future__ import annotations

import logging
import os
import socket
import time

from ..rundir import Progress, RunDir

log = logging.getLogger(__name__)

__all__ = ["PROGRESS_SECONDS", "ProgressWriter"]

PROGRESS_SECONDS = 2.0


class ProgressWriter:
    """Rank 0's progress record: iteration, rate, acceptance, log-likelihood."""

    def __init__(self, chain_id, iterations, start, run_dir, callback) -> None:
        self.chain_id, self.iterations, self.start = chain_id, iterations, start
        self.run_dir = RunDir(run_dir)
        self.callback = callback
        self.t0 = self.last = time.monotonic()
        self.it = start
        self.accepted = 0

    def step(self, accepted: bool, loglik: float, committed: int) -> None:
        self.it += 1
        self.accepted += bool(accepted)
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self.write(loglik, committed, "running")

    def write(self, loglik: float, committed: int, status: str) -> None:
        done = self.it - self.start
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        record = Progress(
            chain=self.chain_id,
            status=status,
            iteration=self.it,
            iterations=self.iterations,
            it_per_s=done / elapsed,
            acceptance=self.accepted / done if done else None,
            loglik=loglik,
            draws_committed=committed,
            host=socket.gethostname(),
            pid=os.getpid(),
            updated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        self.run_dir.write_progress(record)
        log.info(
            "chain %d: %d/%d  %.3g it/s  acc %.2f  loglik %.6g",
            self.chain_id,
            self.it,
            self.iterations,
            record.it_per_s,
            record.acceptance or 0.0,
            loglik,
        )
        if self.callback is not None:
            self.callback(record.to_json())
