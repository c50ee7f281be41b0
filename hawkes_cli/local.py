"""Run all chains of a config on this machine: one process per chain (``mpiexec`` per chain
when ``gpus_per_chain > 1``), progress from the chains' progress files, resume when run again.

The chains never outlive the launcher. SIGINT, SIGTERM and SIGHUP (the terminal closing) are
passed on as SIGTERM: the chains commit and exit at their next iteration boundary (a fast start,
or a wait for another chain's, stops at its next evaluation or poll); a second signal kills them
(their last commit stays). The launcher says so at once (:data:`STOPPING_LINE`). If the launcher
dies without a word (SIGKILL), each chain gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``,
Linux) and, as a fallback, sees its parent change (:data:`~hawkes_cli.vocab.LAUNCHER_PID_ENV`).

Progress: every :data:`REFRESH_SECONDS` the chains' records, as the launcher knows them (queued,
starting, ended with an exit code), go to a :class:`Display`
(:class:`hawkes_cli.cli.progress_view.ProgressDisplay`).
"""

from __future__ import annotations

import calendar
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .chain_progress import Progress
from .config import Config
from .errors import HawkesError, UsageError
from .geo import require_polygon_file
from .kernels import check_gpu_use
from .parallel import find_mpiexec
from .rundir import RunDir
from .vocab import (
    EXIT_STOPPED,
    LAUNCHER_PID_ENV,
    PHASE_FAILED,
    PHASE_FINISHED,
    PHASE_PENDING,
    PHASE_STARTING,
    PHASE_STOPPED,
)

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # prctl(2)
#: Seconds between the display's updates.
REFRESH_SECONDS = 1.0
#: Printed at once when the first stop signal arrives.
STOPPING_LINE = "stopping: the chains stop at their next commit; Ctrl-C again kills them"
#: Printed at once when a second stop signal arrives.
KILLING_LINE = "killing the chains: each keeps its last commit"


class Display(Protocol):
    """Where :func:`run_local` shows the chains (the CLI's ``ProgressDisplay``)."""

    def update(self, records: Sequence[Progress]) -> None:
        """Show one record per chain."""

    def notice(self, text: str) -> None:
        """Show one line of news (a stop)."""

    def clear(self) -> None:
        """Make room for log lines (a chain's failure)."""


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when this process dies (Linux), or, when the
    parent already died before, at once."""

    def preexec() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def error_line(log_file: Path) -> str | None:
    """The last ``error: ...`` line a chain printed to its log (None if there is none)."""
    try:
        with open(log_file, "rb") as fh:
            fh.seek(max(fh.seek(0, os.SEEK_END) - 65536, 0))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    return next((ln.strip() for ln in reversed(lines) if ln.startswith("error: ")), None)


def _mpiexec() -> str:
    return find_mpiexec(
        "gpus_per_chain > 1 needs it: pip install mpich mpi4py, or load the site's MPI module"
    )


@dataclass
class _Child:
    chain_id: int
    proc: subprocess.Popen
    log_file: Path


def chain_command(config_path: Path, chain_id: int, ranks: int, overwrite: bool) -> list[str]:
    """The command line of one chain process (under mpiexec when ``ranks > 1``)."""
    # -v: the chain's log (RUN_DIR/logs) gets its device, rows and progress lines
    cmd = [sys.executable, "-m", "hawkes_cli", "run", "-v", "chain", str(config_path)]
    cmd += ["--chain", str(chain_id)]
    if overwrite:
        cmd.append("--overwrite")
    if ranks > 1:
        cmd = [_mpiexec(), "-n", str(ranks), *cmd]
    return cmd


class _Launcher:
    """The chain processes of one ``run_local`` call: a queue, the running ones, exit codes.

    Parameters
    ----------
    run_dir
        The run directory (chain logs go to its ``logs/``).
    command
        The command line of a chain, by chain id.
    pending
        Chains to run, in order.
    jobs
        Chains at once.
    env
        The chains' environment.
    """

    def __init__(
        self,
        run_dir: RunDir,
        command: Callable[[int], list[str]],
        pending: list[int],
        jobs: int,
        env: dict[str, str],
    ) -> None:
        self.run_dir, self.command, self.jobs, self.env = run_dir, command, jobs, env
        self.queue = list(pending)
        self.running: list[_Child] = []
        self.codes: dict[int, int] = {}
        self.errors: dict[int, str] = {}  # failed chains: their error line
        self.launched: dict[int, tuple[float, float]] = {}  # chain: (wall, monotonic) time
        self.stopping = False
        self.signals_seen = 0

    @property
    def active(self) -> bool:
        """Whether a chain is queued or running."""
        return bool(self.queue or self.running)

    def forward(self, signum: int, _frame: object) -> None:
        """A stop signal: the chains commit and exit (SIGTERM); a second one kills them."""
        self.stopping = True
        self.signals_seen += 1
        how = signal.SIGTERM if self.signals_seen == 1 else signal.SIGKILL
        for child in self.running:
            if child.proc.poll() is None:
                with contextlib.suppress(OSError):
                    child.proc.send_signal(how)

    def launch(self) -> None:
        """Start queued chains while fewer than ``jobs`` run (none once stopping)."""
        while self.queue and len(self.running) < self.jobs and not self.stopping:
            k = self.queue.pop(0)
            log_file = self.run_dir.log_path(k)
            with open(log_file, "ab") as fh:
                proc = subprocess.Popen(
                    self.command(k),
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,  # our signal forwarding decides, not the tty
                    preexec_fn=_die_with_parent(os.getpid()),
                )
            self.running.append(_Child(k, proc, log_file))
            self.launched[k] = (time.time(), time.monotonic())

    def reap(self) -> list[tuple[int, int, Path]]:
        """Record the exit codes of the chains that ended; returns the failures (chain, exit
        code, log file). A chain that a stop signal ended before it could catch signals (its
        start-up: nothing committed) counts as stopped."""
        failed = []
        for child in list(self.running):
            rc = child.proc.poll()
            if rc is None:
                continue
            self.running.remove(child)
            if self.stopping and rc == -signal.SIGTERM:
                rc = EXIT_STOPPED
            self.codes[child.chain_id] = rc
            if rc not in (0, EXIT_STOPPED):
                self.errors[child.chain_id] = error_line(child.log_file) or "no error line"
                failed.append((child.chain_id, rc, child.log_file))
        return failed

    def shown(self, record: Progress) -> Progress:
        """A chain's record as the display shows it: ``pending`` while queued, ``starting``
        until the launched chain writes its first record, ``stopped`` or ``failed`` by its
        exit code, ``finished`` when it was before this call."""
        k = record.chain
        if k in self.codes:
            rc = self.codes[k]
            if rc == EXIT_STOPPED:
                return dataclasses.replace(record, status="stopped", phase=PHASE_STOPPED)
            if rc != 0:
                note = f"exit {rc}: {self.errors[k]}"
                return dataclasses.replace(record, status="failed", phase=PHASE_FAILED, note=note)
            return record
        if k in self.queue:
            return dataclasses.replace(
                record, status="pending", phase=PHASE_PENDING, it_per_s=None, elapsed=None
            )
        if k in self.launched:
            wall, mono = self.launched[k]
            if _written_before(record, wall, self.run_dir.progress_path(k)):
                elapsed = time.monotonic() - mono
                return Progress(
                    k,
                    "pending",
                    record.iteration,
                    record.iterations,
                    phase=PHASE_STARTING,
                    elapsed=elapsed,
                )
            return record
        return dataclasses.replace(record, phase=PHASE_FINISHED)  # finished before this call


def _written_before(record: Progress, wall: float, path: Path | None = None) -> bool:
    """Whether ``record`` was written before the wall time ``wall`` (or has no readable time:
    none written yet). The record keeps whole seconds; its file ``path``, when given and
    there, tells within the second (a failed run's record and a new launch can share one)."""
    try:
        updated = calendar.timegm(time.strptime(str(record.updated), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return True
    if updated == int(wall) and path is not None:
        with contextlib.suppress(OSError):
            return path.stat().st_mtime < wall
    return updated < int(wall)


def _chain_env(jobs: int, ranks: int) -> dict[str, str]:
    """The chains' environment: ``cores / (jobs * ranks)`` PoCL compute units each, and the
    launcher's pid for a chain that is our child."""
    env = dict(os.environ)
    cores = os.cpu_count() or 1
    env.setdefault("POCL_CPU_MAX_CU_NUM", str(max(1, cores // (jobs * ranks))))
    if ranks == 1:  # the chain is our child (under mpiexec, the ranks are mpiexec's)
        env[LAUNCHER_PID_ENV] = str(os.getpid())
    return env


def run_local(
    config: Config,
    *,
    jobs: int | None = None,
    overwrite: bool = False,
    display: Display | None = None,
) -> dict[int, int]:
    """Run every unfinished chain as a local process; return exit codes by chain.

    Parameters
    ----------
    config
        The run's configuration.
    jobs
        Chains at once (default: all). Each gets ``cores / jobs`` PoCL compute units.
    overwrite
        Start every chain afresh.
    display
        Shown every :data:`REFRESH_SECONDS` the chains' records, told of stop signals at once.
    """
    if config.engine.backend == "opencl":  # GPUs given but none listed: refuse, write nothing
        check_gpu_use(config.engine.device)
    if config.data.counties is not None:  # one error now, not one per chain
        require_polygon_file(config.data.counties, "data.counties")
    check_environment()
    run_dir = RunDir.of(config)
    config_path = run_dir.write_config(config, overwrite=overwrite)
    # each finished chain is verified against its file (a damaged one is a StorageError here)
    pending = [k for k in range(config.chains.count) if overwrite or not run_dir.is_finished(k)]
    done = {k: 0 for k in range(config.chains.count) if k not in pending}
    if not pending:
        log.info("all %d chains are finished", config.chains.count)
        return done
    ranks = config.chains.gpus_per_chain
    jobs = max(1, min(jobs or len(pending), len(pending)))
    launcher = _Launcher(
        run_dir,
        lambda k: chain_command(config_path, k, ranks, overwrite),
        pending,
        jobs,
        _chain_env(jobs, ranks),
    )
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, launcher.forward) for s in stop_signals}
    try:
        _watch(launcher, config, display)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    codes = done | launcher.codes
    if launcher.stopping:
        for k in launcher.queue:
            codes[k] = EXIT_STOPPED
    return codes


def check_environment() -> None:
    """The environment variables every chain reads, checked once before anything is
    written (else each chain fails on them): ``HAWKES_DRAW_AHEAD``, ``HAWKES_START_WAIT`` and
    ``HAWKES_PROFILE`` (a file in an existing folder)."""
    from .engine import ahead
    from .engine.profile import PROFILE_ENV
    from .start.shared import wait_limit

    ahead.enabled()
    wait_limit()
    path = os.environ.get(PROFILE_ENV)
    if path and not (Path(path).expanduser().parent.is_dir() and not Path(path).is_dir()):
        raise UsageError(
            f"environment variable {PROFILE_ENV}={path}: not a file in an existing folder; "
            "point it at one, or unset it"
        )


def _watch(launcher: _Launcher, config: Config, display: Display | None) -> None:
    """Launch, reap and show the chains until none is queued or running."""
    last_update, told = -REFRESH_SECONDS, 0
    run_dir, iterations = launcher.run_dir, config.sampler.iterations
    while launcher.active:
        launcher.launch()
        time.sleep(0.2)
        failed = launcher.reap()
        if failed and display is not None:
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                display.clear()
        for chain_id, rc, log_file in failed:
            why = launcher.errors[chain_id]
            log.error("chain %d failed (exit %d): %s; see %s", chain_id, rc, why, log_file)
        if display is None:
            continue
        with contextlib.suppress(OSError):
            while told < min(launcher.signals_seen, 2):
                told += 1
                display.notice(STOPPING_LINE if told == 1 else KILLING_LINE)
            now = time.monotonic()
            if now - last_update >= REFRESH_SECONDS or failed or not launcher.active:
                last_update = now
                records = [run_dir.read_progress(k, iterations) for k in range(config.chains.count)]
                display.update([launcher.shown(r) for r in records])


def summarize(codes: dict[int, int]) -> None:
    """Raise if any chain failed (stopped chains are not failures), with the chains' exit
    code when they all failed with the same one (3: the events, 4: the config, 5: the
    device, ...; else 1)."""
    failed = sorted(k for k, rc in codes.items() if rc not in (0, EXIT_STOPPED))
    if failed:
        err = HawkesError(
            f"{len(failed)} chain(s) failed: {', '.join(map(str, failed))}; see the error "
            "above and the logs in RUN_DIR/logs, fix the cause and run again to resume"
        )
        same = {codes[k] for k in failed}
        if len(same) == 1 and 0 < (code := same.pop()) < 128:
            err.exit_code = code
        raise err
