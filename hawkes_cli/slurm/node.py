"""The batch step of an array task (``hawkes-run node CONFIG --node N``, no MPI).

:func:`launch_node` skips the node when all its chains are finished, else starts every rank of
the node (:mod:`~hawkes_cli.slurm.launch`), forwards Slurm's time-limit warning (SIGUSR1) to
them, and afterwards requeues the job (``scontrol requeue``) when chains stopped early and
``SLURM_RESTART_COUNT`` is below the requeue budget. Starts, requeues and ends go to
``RUN_DIR/slurm/node-NN.json`` through :class:`~hawkes_cli.rundir.RunDir`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ..config import Config, load_config
from ..errors import HawkesError
from ..rundir import RunDir
from ..vocab import EXIT_STOPPED
from .launch import LAUNCHER_ENV, launcher_command, rank_command, resolve_launcher
from .plan import NodePlan, make_plan

log = logging.getLogger(__name__)


def _unfinished(config: Config, node: NodePlan) -> list[int]:
    return [c for c in node.chains if not RunDir.of(config).is_finished(c)]


def _forward_warning(launcher: str, proc: subprocess.Popen, env: Mapping[str, str]) -> None:
    """Pass the time-limit warning (SIGUSR1) on to the ranks.

    Under srun it goes through Slurm (``scancel --signal=USR1 $SLURM_JOB_ID``: every step of
    the job, not the batch step), which delivers it to the tasks through their step daemons
    whatever srun makes of signals; if that fails, srun itself gets it (srun forwards SIGUSR1 to
    its tasks). mpiexec (hydra) forwards it to its processes.
    """
    job = env.get("SLURM_JOB_ID")
    scancel = shutil.which("scancel")
    if launcher == "srun" and job and scancel:
        done = subprocess.run(
            [scancel, "--signal=USR1", job], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode == 0:
            return
        log.warning(
            "scancel --signal=USR1 %s failed (%s); signalling srun", job, done.stderr.strip()
        )
    if proc.poll() is None:
        proc.send_signal(signal.SIGUSR1)


@contextlib.contextmanager
def _noting_signals() -> Iterator[list[int]]:
    """While open, SIGUSR1, SIGTERM and SIGINT are only noted in the list it yields.

    The caller passes the warning (USR1) on. SIGTERM and SIGINT are not passed on: Slurm sends
    SIGTERM to every process of the job itself, and srun answers a SIGTERM of its own by killing
    the step at once.
    """
    got: list[int] = []

    def note(signum, _frame):
        got.append(signum)

    old = {s: signal.signal(s, note) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        yield got
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """The ranks' environment: ``env``, with PoCL's threads per rank set to the CPUs per task."""
    child_env = dict(env)
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit():
        child_env.setdefault("POCL_CPU_MAX_CU_NUM", cpus)  # PoCL threads per rank
    return child_env


def _run_ranks(
    node: NodePlan, cmd: Sequence[str], kind: str, env: Mapping[str, str]
) -> tuple[int, list[int]]:
    """Run the ranks' launcher ``cmd`` to its end, forwarding a warning once.

    Returns
    -------
    (int, list of int)
        The launcher's exit code and the signals this process received meanwhile.
    """
    with _noting_signals() as got:
        log.info(
            "node %d: chains %s, %d rank(s): %s",
            node.index,
            list(node.chains),
            node.n_ranks,
            shlex.join(cmd),
        )
        proc = subprocess.Popen(cmd, env=_rank_env(env))
        forwarded = False
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if signal.SIGUSR1 in got and not forwarded:
                forwarded = True
                log.warning(
                    "node %d: time-limit warning; stopping the chains at their next "
                    "iteration boundary",
                    node.index,
                )
                _forward_warning(kind, proc, env)
    return rc, got


def launch_node(
    config_path: Path,
    node_index: int,
    *,
    launcher: str | None = None,
    verbose: int = 1,
    env: Mapping[str, str] | None = None,
) -> int:
    """The batch step of array task ``node_index``: start its ranks, then requeue if needed.

    Parameters
    ----------
    config_path
        The run's resolved config (``RUN_DIR/config.yaml``).
    node_index
        The array task (``$SLURM_ARRAY_TASK_ID``).
    launcher
        See :func:`~hawkes_cli.slurm.launch.launcher_command`; default ``$HAWKES_LAUNCHER`` or
        ``auto``.
    verbose
        ``-v`` count passed to the ranks.
    env
        The environment (default ``os.environ``).

    Returns
    -------
    int
        0 when the node's chains are finished, or stopped and the job requeued, or the requeue
        budget is spent (clean exit); :data:`EXIT_STOPPED` when stopped by SIGTERM/SIGINT (the
        job is being cancelled, requeued or preempted by Slurm); the ranks' exit code when
        they failed.
    """
    env = dict(os.environ if env is None else env)
    config = load_config(config_path)
    node = make_plan(config).node(node_index)
    rdir = RunDir.of(config)
    restart = int(env.get("SLURM_RESTART_COUNT") or 0)
    job = env.get("SLURM_JOB_ID")
    rdir.record_node_event(
        node.index,
        "start",
        job=job,
        restart=restart,
        array_job=env.get("SLURM_ARRAY_JOB_ID"),
        host=socket.gethostname(),
    )
    if not _unfinished(config, node):
        log.info("node %d: chains %s are all finished; nothing to do", node.index, node.chains)
        rdir.record_node_event(node.index, "finished", job=job)
        return 0
    kind = resolve_launcher(launcher or env.get(LAUNCHER_ENV) or "auto", env)
    cmd = launcher_command(kind, node.n_ranks, rank_command(config_path, node.index, verbose), env)
    rc, got = _run_ranks(node, cmd, kind, env)
    return _after_ranks(config, node, rc, got, restart, job)


def _requeue(config: Config, node: NodePlan, left: list[int], restart: int, job: str) -> int:
    """Requeue job ``job`` for the chains ``left``, unless the requeue budget is spent."""
    rdir = RunDir.of(config)
    budget = config.slurm.requeue_budget
    if restart >= budget:
        rdir.record_node_event(node.index, "budget-spent", job=job, chains=left)
        log.warning(
            "node %d: chains %s stopped before their end and the requeue budget (%d) "
            "is spent; resubmit with `hawkes-run submit` to continue them",
            node.index,
            left,
            budget,
        )
        return 0
    rdir.record_node_event(node.index, "requeue", job=job, restart=restart, chains=left)
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        raise HawkesError("scontrol not found on PATH; cannot requeue the job")
    proc = subprocess.run(
        [scontrol, "requeue", job], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        log.error("node %d: scontrol requeue %s failed: %s", node.index, job, proc.stderr.strip())
        return EXIT_STOPPED
    log.warning(
        "node %d: chains %s stopped at the time-limit warning; requeued job %s (restart %d of %d)",
        node.index,
        left,
        job,
        restart + 1,
        budget,
    )
    return 0


def _after_ranks(
    config: Config, node: NodePlan, rc: int, got: list[int], restart: int, job: str | None
) -> int:
    """The node's exit code once its ranks ended; records the outcome, requeues if due."""
    rdir = RunDir.of(config)
    left = _unfinished(config, node)
    if not left:
        log.info("node %d: chains %s finished", node.index, list(node.chains))
        rdir.record_node_event(node.index, "finished", job=job)
        return 0
    if any(s in (signal.SIGTERM, signal.SIGINT) for s in got):
        rdir.record_node_event(node.index, "stopped", job=job, chains=left)
        log.warning(
            "node %d: stopped by signal with chains %s unfinished; Slurm decides "
            "whether the job comes back (resubmit to resume)",
            node.index,
            left,
        )
        return EXIT_STOPPED
    if rc not in (0, EXIT_STOPPED):
        rdir.record_node_event(node.index, "failed", job=job, rc=rc)
        log.error(
            "node %d: the ranks failed (exit %d) with chains %s unfinished; see the log "
            "above; resubmit to resume them",
            node.index,
            rc,
            left,
        )
        return rc if rc > 0 else 128 - rc
    if not job:
        log.warning(
            "node %d: chains %s stopped; not in a Slurm job, so no requeue", node.index, left
        )
        return EXIT_STOPPED
    return _requeue(config, node, left, restart, job)
