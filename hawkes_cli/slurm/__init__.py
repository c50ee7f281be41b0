"""Slurm: placement plan, batch script, the run's jobs, and what runs inside each array task.

A run is one Slurm array job with one array task per node (DESIGN section 6).

Modules, imports flowing down the list:

- :mod:`~hawkes_cli.slurm.plan`: chains -> array tasks, ranks -> GPUs, the sbatch request.
- :mod:`~hawkes_cli.slurm.launch`: the launcher names and the srun/mpiexec command lines.
- :mod:`~hawkes_cli.slurm.script`: the batch script from ``slurm/job.sbatch.tmpl``, quoted.
- :mod:`~hawkes_cli.slurm.commands`: squeue/sacct/scancel/sbatch calls and job states.
- :mod:`~hawkes_cli.slurm.jobs`: submit, status and cancel of a run (login node).
- :mod:`~hawkes_cli.slurm.devices`: each rank's device; no two ranks on one GPU.
- :mod:`~hawkes_cli.slurm.ranks`: one MPI rank of a node job (``hawkes-run node --ranks``).
- :mod:`~hawkes_cli.slurm.node`: the batch step of a node job: start the ranks, forward the
  warning signal, requeue (``hawkes-run node``).

Files under ``RUN_DIR/slurm/`` (``job.sbatch``, ``plan.json``, ``jobs.json``, ``node-NN.json``,
``logs/<job>_<task>.out``) are reached only through :class:`hawkes_cli.rundir.RunDir`.
"""

from __future__ import annotations

from ..device_slots import VISIBLE_VARS, DeviceSlot, device_slot, visible_gpus
from .commands import SLURM_TIMEOUT, active_jobs, job_states, task_state
from .devices import DeviceChoice, check_devices, choose_device
from .jobs import ChainStatus, Submission, cancel, run_status, submit, unfinished_nodes
from .launch import LAUNCHER_ENV, LAUNCHERS, SRUN_MPI_ENV, launcher_command, resolve_launcher
from .node import launch_node
from .plan import (
    DEFAULT_CPUS_PER_TASK,
    NodePlan,
    Plan,
    RankSlot,
    Resources,
    array_ranges,
    format_plan,
    make_plan,
)
from .ranks import run_node_ranks
from .script import TEMPLATE_NAME, render_script, sbatch_quote, template_path

__all__ = [
    "DEFAULT_CPUS_PER_TASK",
    "LAUNCHERS",
    "LAUNCHER_ENV",
    "SLURM_TIMEOUT",
    "SRUN_MPI_ENV",
    "TEMPLATE_NAME",
    "VISIBLE_VARS",
    "ChainStatus",
    "DeviceChoice",
    "DeviceSlot",
    "NodePlan",
    "Plan",
    "RankSlot",
    "Resources",
    "Submission",
    "active_jobs",
    "array_ranges",
    "cancel",
    "check_devices",
    "choose_device",
    "device_slot",
    "format_plan",
    "job_states",
    "launch_node",
    "launcher_command",
    "make_plan",
    "render_script",
    "resolve_launcher",
    "run_node_ranks",
    "run_status",
    "sbatch_quote",
    "submit",
    "task_state",
    "template_path",
    "unfinished_nodes",
    "visible_gpus",
]
