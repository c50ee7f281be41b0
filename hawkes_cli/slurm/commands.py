"""The Slurm client commands a login node runs: find them, call them, read job states.

``sbatch`` (in :mod:`~hawkes_cli.slurm.jobs`), ``squeue``, ``sacct`` and ``scancel`` each get
:data:`SLURM_TIMEOUT` seconds; a missing command or a silent controller is one clear error.
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import HawkesError
from ..rundir import RunDir

log = logging.getLogger(__name__)

SLURM_TIMEOUT = 60  # seconds for one sbatch/squeue/sacct/scancel call

ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
    }
)
"""Job states of a job that is pending or running (not yet ended)."""


def slurm_command(name: str) -> str:
    """The path of Slurm command ``name``.

    Raises
    ------
    HawkesError
        It is not on ``PATH`` (not a Slurm login node).
    """
    found = shutil.which(name)
    if found is None:
        raise HawkesError(
            f"{name} not found on PATH: run this on a Slurm login node (or bring up the local "
            "test cluster: bash slurm/local-cluster.sh up)"
        )
    return found


def call(cmd: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with captured text output and :data:`SLURM_TIMEOUT` (no check of its exit).

    Raises
    ------
    HawkesError
        The command did not end in time.
    """
    log.debug("running %s", shlex.join(cmd))
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=SLURM_TIMEOUT, cwd=cwd, check=False
        )
    except subprocess.TimeoutExpired:
        raise HawkesError(
            f"{cmd[0]} did not answer within {SLURM_TIMEOUT} s; is the Slurm controller up?"
        ) from None


def _squeue_states(ids: Sequence[str]) -> dict[str, str]:
    """States squeue knows, by ``"<job>_<task>"`` and by raw job id."""
    states: dict[str, str] = {}
    proc = call(["squeue", "--array", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%A|%T"])
    if proc.returncode == 0:
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[2]:
                states[parts[0]] = states[parts[1]] = parts[2].strip()
    return states


def _sacct_states(ids: Sequence[str]) -> dict[str, str]:
    """States from accounting, else from the job-completion log (``sacct --completion``)."""
    states: dict[str, str] = {}
    for fmt, extra in (("JobID,JobIDRaw,State", []), ("JobID,State", ["--completion"])):
        proc = call(["sacct", *extra, "-n", "-P", "-X", "-j", ",".join(ids), "-o", fmt])
        if proc.returncode != 0:
            continue
        found = False
        for line in proc.stdout.splitlines():
            *keys, state = line.strip().split("|")
            if not keys or not state or keys[0].endswith((".batch", ".extern")):
                continue
            for key in keys:  # the later record of a requeued job wins
                states[key] = state.split()[0]  # "CANCELLED by 0" -> CANCELLED
            found = True
        if found:
            break
    return states


def job_states(job_ids: Sequence[str]) -> dict[str, str]:
    """Slurm state of jobs and array tasks.

    Parameters
    ----------
    job_ids
        Array job ids, array tasks (``"<job>_<task>"``) or the raw job ids of array tasks.

    Returns
    -------
    dict
        State by ``"<job>_<task>"`` and by raw job id (array jobs also by ``"<job>"`` when the
        tool reports it that way). Asks ``squeue`` (pending, running and recently ended jobs),
        then ``sacct`` for the rest, then ``sacct --completion`` (the job-completion log, for
        clusters without accounting). Jobs no tool knows are missing; no Slurm gives ``{}``.
    """
    ids = sorted({str(j) for j in job_ids})
    if not ids:
        return {}
    states: dict[str, str] = {}
    if shutil.which("squeue"):
        states.update(_squeue_states(ids))
    missing = [j for j in ids if not any(k == j or k.startswith(f"{j}_") for k in states)]
    if missing and shutil.which("sacct"):
        states.update(_sacct_states(missing))
    return states


def _expand(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split("%")[0].split(","):
        a, _, b = part.partition("-")
        if a.isdigit():
            out.update(range(int(a), int(b) + 1) if b.isdigit() else [int(a)])
    return out


def task_state(states: Mapping[str, str], job_id: str, task: int) -> str | None:
    """The state of array task ``task`` of ``job_id`` from :func:`job_states`' result."""
    key = f"{job_id}_{task}"
    if key in states:
        return states[key]
    for k, v in states.items():  # pending tasks not yet split: "123_[0-3]"
        m = re.fullmatch(rf"{re.escape(job_id)}_\[(.+)\]", k)
        if m and task in _expand(m.group(1)):
            return v
    return states.get(job_id)


def active_jobs(run_dir: Path) -> list[str]:
    """Recorded jobs of the run that Slurm still has pending or running."""
    jobs = [str(j["job_id"]) for j in RunDir(run_dir).read_jobs() if j.get("job_id")]
    if not jobs or not shutil.which("squeue"):
        return []
    states = job_states(jobs)
    active = []
    for j in jobs:
        if any(
            (k == j or k.startswith(f"{j}_")) and v.split()[0] in ACTIVE_STATES
            for k, v in states.items()
        ):
            active.append(j)
    return active
