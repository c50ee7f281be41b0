"""Stopping a chain: signal handlers only set a flag, read at iteration boundaries.

All ranks of a chain agree on stopping at every boundary (a float64 allreduce of their flags,
:meth:`~hawkes_cli.distributed.ChainRank.boundary_stop`), so a signal that reaches any rank stops
the chain at the same place everywhere, after a commit. The fast start polls the flag between
evaluations (:func:`~hawkes_cli.start.chain.stop_requested`).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from ..vocab import LAUNCHER_PID_ENV

log = logging.getLogger(__name__)

__all__ = ["StopFlag"]


class StopFlag:
    """Set by signal handlers (which do nothing else); read at iteration boundaries."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.signals: tuple[int, ...] = ()
        self.launcher: int | None = None  # the launcher's pid, watched (see install)

    def set(self, signum: int = 0, _frame: Any = None) -> None:
        self.signum = signum

    def __bool__(self) -> bool:
        if self.signum is None and self.launcher is not None and os.getppid() != self.launcher:
            log.warning("the launcher (pid %d) is gone; stopping", self.launcher)
            self.signum = signal.SIGHUP
        return self.signum is not None

    def requested(self) -> bool:
        """Whether a stop was requested, read anywhere (not only at a boundary): the fast start
        polls it between evaluations."""
        return StopFlag.__bool__(self)

    def install(self, signals: tuple[int, ...] | None = None) -> None:
        """Route SIGTERM, SIGINT, SIGHUP and SIGUSR1 (Slurm's warning signal) to :meth:`set`.

        A chain started by ``hawkes-run local`` (:data:`LAUNCHER_PID_ENV` set to its pid) also
        stops once its parent is no longer that process: the launcher died, however it died
        (its ``PR_SET_PDEATHSIG`` is the first line of defence, this the fallback).
        """
        self.signals = signals or (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
        for sig in self.signals:
            signal.signal(sig, self.set)
        launcher = os.environ.get(LAUNCHER_PID_ENV, "")
        if launcher.isdigit():
            self.launcher = int(launcher)

    def reinstall(self) -> None:
        """Install again the handlers of :meth:`install` (an OpenCL driver may have taken one:
        PoCL claims SIGUSR1 when it lists devices)."""
        if self.signals:
            self.install(self.signals)
