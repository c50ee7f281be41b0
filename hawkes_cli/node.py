"""Inside a Slurm array task: start the node's ranks, run its chains, requeue after a warning.

Two levels, both behind ``hawkes-run node CONFIG --node N``:

- :func:`launch_node` (the batch step, no MPI): skips the node when all its chains are finished,
  else starts every rank of the node with ``srun --mpi=pmi2`` (or the MPI wheel's ``mpiexec``
  inside the allocation), forwards the warning signal to them, and afterwards requeues the job
  (``scontrol requeue``) when chains stopped early and ``SLURM_RESTART_COUNT`` is below the
  requeue budget. Starts, requeues and ends go to ``RUN_DIR/slurm/node-NN.json``.
- :func:`run_node_ranks` (each MPI rank): checks the world size against the plan, picks its
  device from its local rank among the devices the job may see, refuses GPU sharing within the
  node, splits the world into one communicator per chain and runs
  :func:`~hawkes_cli.runner.run_chain` on it (skipping a finished chain).

Stopping: SIGUSR1 (Slurm's warning, ``--signal=B:USR1@...``), SIGTERM and SIGINT only set the
:class:`~hawkes_cli.runner.StopFlag`; the ranks of a chain agree on it at the next iteration
boundary and commit before they exit, so every committed draw survives and the resumed chain
continues bit for bit.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import Config, load_config
from .errors import HawkesError, ParallelError, UsageError
from .parallel import Comm, MPIComm, SerialComm, world_comm
from .rundir import RunDir
from .runner import StopFlag
from .slurm import LAUNCHERS, NodePlan, make_plan
from .vocab import EXIT_STOPPED

log = logging.getLogger(__name__)

VISIBLE_VARS: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)
"""Environment variables that restrict the GPUs a process may use, in order of precedence."""
SRUN_MPI_ENV = "HAWKES_SRUN_MPI"  # srun --mpi=<this>; default pmi2 (works with the mpich wheel)
LAUNCHER_ENV = "HAWKES_LAUNCHER"


# --------------------------------------------------------------------------- devices


def visible_gpus(env: Mapping[str, str]) -> tuple[str, tuple[str, ...]] | None:
    """The GPUs the job may use, from the first of :data:`VISIBLE_VARS` that is set.

    Returns
    -------
    (variable, ids) or None
        ``ids`` in the variable's order (an empty tuple: no GPU allowed); ``None`` when no
        variable is set (every device may be used).
    """
    for var in VISIBLE_VARS:
        value = env.get(var)
        if value is not None:
            return var, tuple(p.strip() for p in value.split(",") if p.strip())
    return None


@dataclass(frozen=True)
class DeviceSlot:
    """Which of the matching OpenCL devices a rank takes.

    Attributes
    ----------
    local_rank
        The rank on the node.
    slot
        Index among the devices matching ``engine.device`` (for
        :func:`hawkes_cli.kernels.select_device`, which takes ``slot % count``).
    var
        The variable that restricted the visible GPUs, or ``None``.
    visible_id
        The GPU's id in that variable (the physical GPU), or ``None``.
    """

    local_rank: int
    slot: int
    var: str | None = None
    visible_id: str | None = None


def device_slot(local_rank: int, env: Mapping[str, str], n_gpus: int | None = None) -> DeviceSlot:
    """The device slot of the rank with ``local_rank`` on its node.

    Rank ``r`` takes the ``r``-th GPU the job may see. Drivers that honour
    ``CUDA_VISIBLE_DEVICES`` (or ROCm's variables) list only those GPUs, so the slot is ``r``;
    when the OpenCL runtime lists more GPUs (``n_gpus``) than the variable allows, it ignored
    the variable and the slot is the ``r``-th listed id instead.

    Parameters
    ----------
    local_rank
        Rank on the node (>= 0).
    env
        The process environment.
    n_gpus
        GPUs the OpenCL runtime lists (None: unknown).
    """
    vis = visible_gpus(env)
    if vis is None or not vis[1]:
        return DeviceSlot(local_rank, local_rank, vis[0] if vis else None, None)
    var, ids = vis
    visible_id = ids[local_rank % len(ids)] if local_rank < len(ids) else None
    slot = local_rank
    if (
        n_gpus is not None
        and n_gpus > len(ids)
        and visible_id is not None
        and visible_id.isdigit()
        and int(visible_id) < n_gpus
    ):
        slot = int(visible_id)
    return DeviceSlot(local_rank, slot, var, visible_id)


@dataclass(frozen=True)
class DeviceChoice:
    """The device one rank of a node drives (gathered on every rank for the checks).

    Attributes
    ----------
    rank, chain, chain_rank, local_rank
        Where the rank sits.
    ident
        OpenCL ``P:D`` (``"reference"`` for the numpy engine).
    name, kind
        Device name and kind (``gpu``, ``cpu``, ``accelerator``, ``other``).
    var, visible_id
        As in :class:`DeviceSlot`.
    slot
        Index handed to the engine's device selection.
    host
        Host name.
    """

    rank: int
    chain: int
    chain_rank: int
    local_rank: int
    ident: str
    name: str
    kind: str
    var: str | None = None
    visible_id: str | None = None
    slot: int = 0
    host: str = ""

    def describe(self) -> str:
        """One line for the log."""
        where = f" ({self.var} id {self.visible_id})" if self.visible_id is not None else ""
        return (
            f"rank {self.rank} (chain {self.chain} rank {self.chain_rank}, local rank "
            f"{self.local_rank}) on {self.host}: device {self.ident} {self.name!r} "
            f"[{self.kind}]{where}"
        )


def check_devices(choices: Sequence[DeviceChoice]) -> list[str]:
    """Refuse two ranks of a node on one GPU; say where ranks share a CPU device.

    Parameters
    ----------
    choices
        Every rank's choice, in rank order (the same list on every rank).

    Returns
    -------
    list of str
        Notes on shared CPU devices (allowed: PoCL runs each rank on host threads).

    Raises
    ------
    ParallelError
        Two ranks would drive one GPU (same OpenCL device, or the same visible GPU id).
    """
    notes: list[str] = []
    by_device: dict[tuple[str, str], list[DeviceChoice]] = {}
    by_visible: dict[tuple[str, str], list[DeviceChoice]] = {}
    for c in choices:
        by_device.setdefault((c.host, c.ident), []).append(c)
        if c.kind != "cpu" and c.ident != "reference" and c.visible_id is not None:
            by_visible.setdefault((c.host, c.visible_id), []).append(c)
    for (host, ident), group in by_device.items():
        if len(group) < 2:
            continue
        ranks = ", ".join(f"{c.rank} (chain {c.chain})" for c in group)
        first = group[0]
        if first.kind == "cpu" or ident == "reference":
            notes.append(
                f"ranks {ranks} share the CPU device {ident} {first.name!r} on {host}; "
                "allowed for a CPU device (they split its cores)"
            )
            continue
        raise ParallelError(
            _sharing_message(f"{first.kind.upper()} {ident} {first.name!r}", ranks, host, group)
        )
    for (host, vid), group in by_visible.items():
        if len(group) > 1:
            ranks = ", ".join(f"{c.rank} (chain {c.chain})" for c in group)
            raise ParallelError(_sharing_message(f"GPU {group[0].var}={vid}", ranks, host, group))
    return notes


def _sharing_message(what: str, ranks: str, host: str, group: Sequence[DeviceChoice]) -> str:
    vis = group[0].var
    seen = f"; the job may see {vis}={os.environ.get(vis, '')}" if vis else ""
    return (
        f"ranks {ranks} on {host} would share {what}{seen}. Each rank needs its own GPU: "
        "request as many GPUs as ranks (--gres=gpu:N, see `hawkes-run plan`), leave "
        "engine.device null or 'gpu' (a fixed 'P:D' puts every rank on one device), or use "
        "a CPU OpenCL device"
    )


def choose_device(
    config: Config,
    *,
    rank: int,
    chain: int,
    chain_rank: int,
    local_rank: int,
    env: Mapping[str, str],
) -> DeviceChoice:
    """This rank's device: by local rank among the devices it may see (see :func:`device_slot`)."""
    host = socket.gethostname()
    if config.engine.backend != "opencl":
        return DeviceChoice(
            rank,
            chain,
            chain_rank,
            local_rank,
            "reference",
            "numpy float64",
            "cpu",
            slot=local_rank,
            host=host,
        )
    from .kernels import DEVICE_ENV, list_devices, select_device

    spec = config.engine.device if config.engine.device is not None else env.get(DEVICE_ENV)
    n_gpus = None
    if spec in (None, "", "gpu"):
        n_gpus = sum(1 for d in list_devices() if d.kind == "gpu") or None
    ds = device_slot(local_rank, env, n_gpus)
    info, _ = select_device(config.engine.device, ds.slot)
    return DeviceChoice(
        rank,
        chain,
        chain_rank,
        local_rank,
        info.ident,
        info.name,
        info.kind,
        ds.var,
        ds.visible_id,
        ds.slot,
        host,
    )


# --------------------------------------------------------------------------- ranks


def _node_local_rank(world: Comm) -> int:
    if isinstance(world, MPIComm):
        return world.local_rank()
    return 0


def run_node_ranks(config_path: Path, node_index: int, *, stop: StopFlag) -> int:
    """Run this rank's part of node ``node_index``; all ranks of the node call it.

    Returns
    -------
    int
        0 when this rank's chain is finished (or was already), :data:`EXIT_STOPPED` when it
        stopped early on request (after committing).

    Raises
    ------
    ParallelError
        The MPI world differs from the plan, or ranks would share a GPU.
    """
    from .runner import run_chain

    config = load_config(config_path)
    plan = make_plan(config)
    node = plan.node(node_index)
    world = world_comm(force_mpi=node.n_ranks > 1)
    if world.size != node.n_ranks:
        raise ParallelError(
            f"node {node.index} runs chains {list(node.chains)} with "
            f"{plan.gpus_per_chain} rank(s) each, so it needs {node.n_ranks} MPI rank(s), but "
            f"the launcher started {world.size}; start it with `srun --ntasks={node.n_ranks}` "
            f"(or mpiexec -n {node.n_ranks}), as the batch script of `hawkes-run submit` does"
        )
    slot = node.ranks[world.rank]
    lrank = _node_local_rank(world)
    if lrank != world.rank:
        raise ParallelError(
            f"rank {world.rank} of node {node.index} has local rank {lrank}: the ranks of one "
            "node job span several hosts; an array task must run on one node (--nodes=1)"
        )
    choice = choose_device(
        config,
        rank=world.rank,
        chain=slot.chain,
        chain_rank=slot.chain_rank,
        local_rank=lrank,
        env=os.environ,
    )
    # OpenCL drivers may take signals when they load (PoCL installs its own SIGUSR1 handler
    # while it enumerates devices, which choose_device just did): route them to the flag again.
    stop.install()
    choices = world.allgather(choice)
    notes = check_devices(choices)
    log.info("node %d: %s", node.index, choice.describe())
    if world.rank == 0:
        for note in notes:
            log.info("node %d: %s", node.index, note)
    if isinstance(world, MPIComm):
        comm: Comm = world.split(slot.chain, slot.chain_rank, local_rank=choice.slot)
    else:
        comm = SerialComm(local_rank=choice.slot)
    if comm.size != plan.gpus_per_chain or comm.rank != slot.chain_rank:  # pragma: no cover
        raise ParallelError(
            f"chain {slot.chain}: communicator split gave rank {comm.rank} of "
            f"{comm.size}, expected {slot.chain_rank} of {plan.gpus_per_chain}"
        )
    finished = comm.bcast(RunDir.of(config).is_finished(slot.chain) if comm.rank == 0 else None)
    if finished:
        if comm.rank == 0:
            log.info("chain %d is finished; nothing to do", slot.chain)
        return 0
    outcome = run_chain(config, slot.chain, comm=comm, stop=stop)
    done = comm.bcast(outcome.finished if comm.rank == 0 else None)
    if comm.rank == 0:
        log.info(
            "chain %d: %s at iteration %d/%d, %d draws committed",
            slot.chain,
            "finished" if done else "stopped",
            outcome.iteration,
            outcome.iterations,
            outcome.draws_committed,
        )
    return 0 if done else EXIT_STOPPED


# --------------------------------------------------------------------------- launcher


def _is_hydra(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "HYDRA" in (out.stdout + out.stderr).upper()


def resolve_launcher(launcher: str, env: Mapping[str, str]) -> str:
    """``srun`` or ``mpiexec`` for ``launcher`` (``auto``: srun inside a Slurm job with srun)."""
    if launcher not in LAUNCHERS:
        raise UsageError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if launcher == "auto":
        return "srun" if env.get("SLURM_JOB_ID") and shutil.which("srun") else "mpiexec"
    return launcher


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


def launcher_command(
    launcher: str, n_ranks: int, rank_cmd: Sequence[str], env: Mapping[str, str]
) -> list[str]:
    """The command that starts ``n_ranks`` copies of ``rank_cmd`` on this node.

    Parameters
    ----------
    launcher
        ``srun`` (``--mpi=$HAWKES_SRUN_MPI``, default ``pmi2``, which the mpich wheel speaks),
        ``mpiexec`` (next to this Python, else on PATH; hydra gets ``-launcher fork``: all
        ranks on this node), or ``auto`` (srun inside a Slurm job, else mpiexec).
    n_ranks
        Ranks to start.
    rank_cmd
        The command of one rank.
    env
        The environment (Slurm variables).
    """
    launcher = resolve_launcher(launcher, env)
    if launcher == "srun":
        srun = shutil.which("srun")
        if srun is None:
            raise ParallelError("srun not found on PATH; set HAWKES_LAUNCHER=mpiexec")
        cmd = [
            srun,
            f"--mpi={env.get(SRUN_MPI_ENV) or 'pmi2'}",
            f"--ntasks={n_ranks}",
            "--nodes=1",
            "--kill-on-bad-exit=1",
        ]
        cpus = env.get("SLURM_CPUS_PER_TASK", "")
        if cpus.isdigit():
            cmd.append(f"--cpus-per-task={cpus}")  # srun no longer inherits it from sbatch
        return [*cmd, *rank_cmd]
    here = Path(sys.executable).with_name("mpiexec")
    mpiexec = str(here) if here.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        raise ParallelError(
            "mpiexec not found (next to this Python or on PATH); pip install mpich mpi4py, or "
            "set HAWKES_LAUNCHER=srun"
        )
    cmd = [mpiexec]
    if _is_hydra(mpiexec):
        cmd += ["-launcher", "fork"]
    return [*cmd, "-n", str(n_ranks), *rank_cmd]


def _unfinished(config: Config, node: NodePlan) -> list[int]:

    return [c for c in node.chains if not RunDir.of(config).is_finished(c)]


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
        See :func:`launcher_command`; default ``$HAWKES_LAUNCHER`` or ``auto``.
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
    plan = make_plan(config)
    node = plan.node(node_index)
    run_dir = config.output.run_dir
    restart = int(env.get("SLURM_RESTART_COUNT") or 0)
    job = env.get("SLURM_JOB_ID")
    RunDir(run_dir).record_node_event(
        node.index,
        "start",
        job=job,
        restart=restart,
        array_job=env.get("SLURM_ARRAY_JOB_ID"),
        host=socket.gethostname(),
    )
    if not _unfinished(config, node):
        log.info("node %d: chains %s are all finished; nothing to do", node.index, node.chains)
        RunDir(run_dir).record_node_event(node.index, "finished", job=job)
        return 0
    launcher = launcher or env.get(LAUNCHER_ENV) or "auto"
    rank_cmd = [
        sys.executable,
        "-m",
        "hawkes_cli",
        "run",
        *(["-v"] * verbose),
        "node",
        str(config_path),
        "--node",
        str(node.index),
        "--ranks",
    ]
    kind = resolve_launcher(launcher, env)
    cmd = launcher_command(kind, node.n_ranks, rank_cmd, env)
    child_env = dict(env)
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit():
        child_env.setdefault("POCL_CPU_MAX_CU_NUM", cpus)  # PoCL threads per rank
    got: list[int] = []

    def note(signum, _frame):
        # The handler only records: the loop below passes the warning (USR1) on. SIGTERM and
        # SIGINT are not passed on: Slurm sends SIGTERM to every process of the job itself, and
        # srun answers a SIGTERM of its own by killing the step at once.
        got.append(signum)

    old = {s: signal.signal(s, note) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        log.info(
            "node %d: chains %s, %d rank(s): %s",
            node.index,
            list(node.chains),
            node.n_ranks,
            shlex.join(cmd),
        )
        proc = subprocess.Popen(cmd, env=child_env)
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
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return _after_ranks(config, node, rc, got, restart, job)


def _after_ranks(
    config: Config, node: NodePlan, rc: int, got: list[int], restart: int, job: str | None
) -> int:
    run_dir = config.output.run_dir
    left = _unfinished(config, node)
    if not left:
        log.info("node %d: chains %s finished", node.index, list(node.chains))
        RunDir(run_dir).record_node_event(node.index, "finished", job=job)
        return 0
    if any(s in (signal.SIGTERM, signal.SIGINT) for s in got):
        RunDir(run_dir).record_node_event(node.index, "stopped", job=job, chains=left)
        log.warning(
            "node %d: stopped by signal with chains %s unfinished; Slurm decides "
            "whether the job comes back (resubmit to resume)",
            node.index,
            left,
        )
        return EXIT_STOPPED
    if rc not in (0, EXIT_STOPPED):
        RunDir(run_dir).record_node_event(node.index, "failed", job=job, rc=rc)
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
    budget = config.slurm.requeue_budget
    if restart >= budget:
        RunDir(run_dir).record_node_event(node.index, "budget-spent", job=job, chains=left)
        log.warning(
            "node %d: chains %s stopped before their end and the requeue budget (%d) "
            "is spent; resubmit with `hawkes-run submit` to continue them",
            node.index,
            left,
            budget,
        )
        return 0
    RunDir(run_dir).record_node_event(node.index, "requeue", job=job, restart=restart, chains=left)
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
