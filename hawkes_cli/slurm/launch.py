"""How a node job starts its MPI ranks: the launcher names and their command lines.

``srun --mpi=pmi2`` inside a Slurm job (``$HAWKES_SRUN_MPI`` picks another PMI), or the
``mpiexec`` next to this Python (the MPI wheel's) inside the allocation. The batch script names
the launcher (``hawkes-run submit --launcher``); ``$HAWKES_LAUNCHER`` overrides it in the job.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ParallelError, UsageError
from ..parallel import find_mpiexec
from ..vocab import LAUNCHERS

"""Launcher names; ``auto`` is srun inside a Slurm job with srun, else mpiexec."""
SRUN_MPI_ENV = "HAWKES_SRUN_MPI"  # srun --mpi=<this>; default pmi2 (works with the mpich wheel)
LAUNCHER_ENV = "HAWKES_LAUNCHER"


def check_launcher(launcher: str) -> str:
    """``launcher`` if it is one of :data:`LAUNCHERS`.

    Raises
    ------
    UsageError
        Any other name.
    """
    if launcher not in LAUNCHERS:
        raise UsageError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    return launcher


def resolve_launcher(launcher: str, env: Mapping[str, str]) -> str:
    """``srun`` or ``mpiexec`` for ``launcher`` (``auto``: srun inside a Slurm job with srun)."""
    if check_launcher(launcher) == "auto":
        return "srun" if env.get("SLURM_JOB_ID") and shutil.which("srun") else "mpiexec"
    return launcher


def _is_hydra(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "HYDRA" in (out.stdout + out.stderr).upper()


def _srun_command(n_ranks: int, env: Mapping[str, str]) -> list[str]:
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
    return cmd


def _mpiexec_command(n_ranks: int) -> list[str]:
    mpiexec = find_mpiexec("pip install mpich mpi4py, or set HAWKES_LAUNCHER=srun")
    cmd = [mpiexec]
    if _is_hydra(mpiexec):
        cmd += ["-launcher", "fork"]
    return [*cmd, "-n", str(n_ranks)]


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

    Raises
    ------
    ParallelError
        The launcher is not installed.
    """
    if resolve_launcher(launcher, env) == "srun":
        return [*_srun_command(n_ranks, env), *rank_cmd]
    return [*_mpiexec_command(n_ranks), *rank_cmd]


def rank_command(config_path: Path, node_index: int, verbose: int) -> list[str]:
    """The command of one rank of node ``node_index``: ``hawkes-run node ... --ranks``."""
    return [
        sys.executable,
        "-m",
        "hawkes_cli",
        "run",
        *(["-v"] * verbose),
        "node",
        str(config_path),
        "--node",
        str(node_index),
        "--ranks",
    ]
