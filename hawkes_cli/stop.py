"""Stopping a chain on a signal: the signal is held, and the chain asks for it where it can stop.

:meth:`StopFlag.install` blocks the stop signals (SIGTERM, SIGINT, SIGHUP and SIGUSR1, Slurm's
warning signal) in the calling thread, and so in every thread it starts from then on: a signal
sent to the process waits, pending, until the chain reads its flag (:meth:`StopFlag.__bool__` at
every iteration boundary, :meth:`StopFlag.requested` between the fast start's evaluations and its
polls of another chain's start lock), which takes it. No handler runs in the middle of other
work, where one did harm: LLVM (PoCL's kernel compiler) deletes its temporary files on SIGTERM
and SIGINT, so a signal during a kernel build or a first kernel launch failed the chain instead
of stopping it. Install it before any thread starts (before numpy is imported: OpenBLAS starts
its threads then), so that no thread can take the signal instead; the handlers stay installed as
a fallback for a thread that still could.

All ranks of a chain agree on stopping at every boundary (a float64 allreduce of their flags,
:meth:`~hawkes_cli.distributed.ChainRank.boundary_stop`), so a signal that reaches any rank stops
the chain at the same place everywhere, after a commit.

This module imports nothing heavy (ground layer), so a command can install the flag first.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from .vocab import LAUNCHER_PID_ENV

log = logging.getLogger(__name__)

__all__ = ["STOP_SIGNALS", "StopFlag"]

#: The signals that stop a chain (SIGUSR1: Slurm's warning before the time limit).
STOP_SIGNALS: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)


class StopFlag:
    """Whether a stop was requested: a stop signal taken (or caught), or the launcher gone.

    Read at iteration boundaries (``bool(flag)``) and between the fast start's evaluations
    (:meth:`requested`); a flag never installed reads false until :meth:`set`.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.signals: tuple[int, ...] = ()
        self.launcher: int | None = None  # the launcher's pid, watched (see install)

    def set(self, signum: int = 0, _frame: Any = None) -> None:
        """Request a stop (also the fallback signal handler: it does nothing else)."""
        self.signum = signum

    def __bool__(self) -> bool:
        if self.signum is None and self.signals:
            taken = signal.sigtimedwait(self.signals, 0)  # a pending stop signal, if any
            if taken is not None:
                self.signum = taken.si_signo
        if self.signum is None and self.launcher is not None and os.getppid() != self.launcher:
            log.warning("the launcher (pid %d) is gone; stopping", self.launcher)
            self.signum = signal.SIGHUP
        return self.signum is not None

    def requested(self) -> bool:
        """Whether a stop was requested, read anywhere (not only at a boundary): the fast start
        polls it between evaluations."""
        return StopFlag.__bool__(self)

    def install(self, signals: tuple[int, ...] | None = None) -> None:
        """Hold ``signals`` (default :data:`STOP_SIGNALS`) for this flag to take, and route
        them to :meth:`set` where a thread that does not hold them receives one.

        A chain started by ``hawkes-run local`` (:data:`LAUNCHER_PID_ENV` set to its pid) also
        stops once its parent is no longer that process: the launcher died, however it died
        (its ``PR_SET_PDEATHSIG`` is the first line of defence, this the fallback).
        """
        self.signals = signals or STOP_SIGNALS
        signal.pthread_sigmask(signal.SIG_BLOCK, self.signals)
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

    def uninstall(self) -> None:
        """Let the signals through again (unblocked; the handlers are left as they are)."""
        if self.signals:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self.signals)
            self.signals = ()
