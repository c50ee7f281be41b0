"""A run's Slurm jobs: submit its array job, report per-chain status, cancel it.

``submit`` writes ``RUN_DIR/config.yaml``, the rendered script and the plan, runs
``sbatch --parsable`` for the array tasks with unfinished chains and records the job in
``RUN_DIR/slurm/jobs.json`` (all through :class:`~hawkes_cli.rundir.RunDir`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path

from .. import atomic
from ..config import Config
from ..errors import HawkesError, StorageError
from ..rundir import RunDir, now_utc, shown
from ..storage import writer_holder
from ..vocab import PHASE_FINISHED, PHASE_STOPPED
from .commands import active_jobs, call, job_states, slurm_command, task_state
from .plan import Plan, array_ranges, make_plan
from .script import render_script

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- submit


@dataclass(frozen=True)
class Submission:
    """What :func:`submit` did.

    Attributes
    ----------
    script
        The rendered batch script.
    script_path
        Where it was written (``None`` for a dry run).
    job_id
        The array job id (``None`` for a dry run or when nothing was left to run).
    array
        The array tasks submitted (unfinished nodes only).
    plan
        The placement.
    change
        What the submission changes (or, dry, would change) in the run's ``config.yaml``:
        ``None`` for a new run, ``()`` for none, else the differences (run-only keys).
    """

    script: str
    script_path: Path | None
    job_id: str | None
    array: str
    plan: Plan
    change: tuple[str, ...] | None = None


def unfinished_nodes(config: Config, plan: Plan) -> list[int]:
    """Array tasks with at least one chain not yet finished."""
    run_dir = RunDir.of(config)
    return [n.index for n in plan.nodes if not all(run_dir.is_finished(c) for c in n.chains)]


def _config_change(rdir: RunDir, config: Config) -> tuple[str, ...] | None:
    """Refuse a run with live jobs or of another config (what a submission refuses); else what
    writing ``config`` would change (:meth:`RunDir.config_change`). Writes nothing."""
    active = active_jobs(rdir.root)
    if active:
        raise HawkesError(
            f"run {rdir.root} has job(s) {', '.join(active)} pending or running; wait for them "
            f"or cancel them (hawkes-run cancel {shlex.quote(str(rdir.root))}) before "
            "submitting again"
        )
    return rdir.config_change(config, afresh="remove that run directory to start afresh")


def _restore(path: Path, data: bytes | None) -> None:
    """Put back the file ``path`` held before a failed submission (``None``: remove it)."""
    try:
        if data is None:
            path.unlink(missing_ok=True)
        else:
            atomic.write_bytes(path, data)
    except OSError as exc:  # the submission's own error is the one to report
        log.warning("could not put back %s after the failed submission (%s)", path, exc)


class _MaybeSubmitted(HawkesError):
    """sbatch did not say clearly whether it queued the job (a time-out, an unreadable reply):
    the run's files stay as this submission wrote them."""


def _sbatch(sbatch: str, rdir: RunDir, array: str, plan: Plan) -> str:
    """Submit the written script for array tasks ``array``; the job id. Raises
    :class:`HawkesError` when sbatch refuses the job (nothing queued), :class:`_MaybeSubmitted`
    when it may have queued it."""
    cmd = [sbatch, "--parsable"]
    if array != plan.resources.array:
        cmd.append(f"--array={array}")  # the command line overrides the script's directive
    cmd.append(str(rdir.script_path))
    try:
        proc = call(cmd, cwd=rdir.slurm_dir)
    except HawkesError as exc:
        raise _MaybeSubmitted(f"{exc}; {_MAYBE}") from None
    if proc.returncode != 0:
        raise HawkesError(
            f"sbatch refused the job ({proc.stderr.strip() or f'exit {proc.returncode}'}); "
            f"nothing was submitted and {rdir.root} is as it was (hawkes-run submit --dry-run "
            "prints the script)"
        )
    out = proc.stdout.strip().splitlines()
    job_id = out[-1].split(";")[0].strip() if out else ""
    if not job_id.isdigit():
        raise _MaybeSubmitted(
            f"sbatch --parsable printed {proc.stdout!r}, expected a job id; {_MAYBE}"
        )
    return job_id


_MAYBE = (
    "the job may have been queued: check squeue before submitting again (the run's files are "
    "those of this submission)"
)


def submit(
    config: Config,
    *,
    dry_run: bool = False,
    launcher: str = "auto",
    python: str | None = None,
) -> Submission:
    """Render, write and submit the run's array job (only nodes with unfinished chains).

    Parameters
    ----------
    config
        The run's configuration (its run directory gets ``config.yaml`` and ``slurm/``).
    dry_run
        Render and check the config against the run's (the refusals of a real submission,
        :attr:`Submission.change`); write nothing, submit nothing.
    launcher
        See :func:`~hawkes_cli.slurm.script.render_script`.
    python
        Interpreter for the job (default: this one).

    Raises
    ------
    HawkesError
        No ``sbatch``, a rejected submission (the run's files are put back as they were and the
        folders it made removed), or jobs of this run still pending or running.
    StorageError
        The run directory holds a run of another config.
    """
    plan = make_plan(config)
    rdir = RunDir.of(config)
    script = render_script(
        config, plan, config_path=rdir.config_path, python=python, launcher=launcher
    )
    if dry_run:
        change = _config_change(rdir, config)
        return Submission(script, None, None, plan.resources.array, plan, change)
    sbatch = slurm_command("sbatch")
    change = _config_change(rdir, config)
    before = {p: p.read_bytes() if p.exists() else None for p in _submit_files(rdir)}
    made = _missing_folders(rdir)
    try:
        rdir.write_config(config, quiet=True)
        rdir.slurm_logs_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(rdir.script_path, script)
        atomic.write_json(rdir.plan_path, plan.to_json())
        pending = unfinished_nodes(config, plan)
        if not pending:
            _announce(rdir, change)
            log.info("all %d chains of %s are finished; nothing to submit", plan.chains, rdir.root)
            return Submission(script, rdir.script_path, None, "", plan, change)
        array = array_ranges(pending)
        job_id = _sbatch(sbatch, rdir, array, plan)
    except _MaybeSubmitted:
        _announce(rdir, change)  # the files stay as this submission wrote them
        raise
    except Exception:
        for path, data in before.items():  # nothing was submitted: the run as it was
            _restore(path, data)
        _remove_empty(made)
        raise
    _announce(rdir, change)  # said once the job holds the changed config
    rdir.record_job(
        {
            "job_id": job_id,
            "array": array,
            "nodes": pending,
            "submitted": now_utc("seconds"),
            "script": rdir.script_path.name,
            "script_sha256": hashlib.sha256(script.encode("utf-8")).hexdigest(),
            "config_sha256": config.sha256,
        },
    )
    log.info("submitted array job %s (tasks %s) for %s", job_id, array, rdir.root)
    return Submission(script, rdir.script_path, job_id, array, plan, change)


def _submit_files(rdir: RunDir) -> tuple[Path, ...]:
    """The files a submission rewrites before ``sbatch`` accepts it."""
    return (rdir.config_path, rdir.script_path, rdir.plan_path)


def _announce(rdir: RunDir, change: tuple[str, ...] | None) -> None:
    """The WARNING of a run-only change of ``config.yaml``, once the submission keeps it."""
    if change:
        log.warning(
            "%s changed: %s (no draw depends on these keys)", rdir.config_path, shown(change)
        )  # fmt: skip (rundir.write_config's words)


def _missing_folders(rdir: RunDir) -> list[Path]:
    """The folders a submission makes that do not exist yet (the run directory and those above
    it included), each after the folders above it."""
    missing: list[Path] = []
    for leaf in (rdir.chains_dir, rdir.logs_dir, rdir.slurm_logs_dir):
        for folder in reversed((leaf, *leaf.parents)):
            if not folder.exists() and folder not in missing:
                missing.append(folder)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a failed submission made, deepest first, where they are still empty
    (a folder something else has written into meanwhile stays)."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


# --------------------------------------------------------------------------- status, cancel


@dataclass(frozen=True)
class ChainStatus:
    """One chain as ``hawkes-run status`` shows it.

    Attributes
    ----------
    chain, node
        Chain id and its array task.
    iteration, iterations
        Iterations done (committed, or the latest progress record while running) / planned.
    draws
        Draws committed.
    requeues
        Times its node job restarted after a requeue.
    last_commit
        Time of the last commit (ISO 8601), or ``None``.
    job
        ``<array job>_<task>`` of the latest submission holding it, or ``None``.
    state
        Slurm state of that job (``None``: unknown or never submitted).
    finished
        The chain's checkpoint says it is complete.
    phase
        What the chain last said it was doing (one of :data:`~hawkes_cli.vocab.PHASES`, from its
        progress record; ``finished`` when its checkpoint says so).
    problem
        Why its chain file does not hold what its checkpoint says (damaged, swapped, another
        config; checked unless the chain is being written), or ``None``.
    """

    chain: int
    node: int
    iteration: int
    iterations: int
    draws: int
    requeues: int
    last_commit: str | None
    job: str | None
    state: str | None
    finished: bool
    phase: str
    problem: str | None = None


def _latest_tasks(rdir: RunDir, plan: Plan) -> dict[int, tuple[str, str | None]]:
    """Node -> (``<array job>_<task>`` of its latest submission, the raw job id it started as)."""
    jobs = rdir.read_jobs()
    latest: dict[int, tuple[str, str | None]] = {}
    for n in plan.nodes:
        job = next((j for j in reversed(jobs) if n.index in j.get("nodes", [])), None)
        if job is None:
            continue
        starts = [
            e
            for e in rdir.read_node_state(n.index)["events"]
            if e.get("event") == "start" and str(e.get("array_job")) == str(job["job_id"])
        ]
        raw = str(starts[-1]["job"]) if starts and starts[-1].get("job") else None
        latest[n.index] = (f"{job['job_id']}_{n.index}", raw)
    return latest


def _chain_status(
    config: Config,
    rdir: RunDir,
    chain: int,
    node: int,
    task: tuple[str | None, str | None],
    states: dict[str, str],
) -> ChainStatus:
    """One chain's row: its commit record and progress, and its node job's state."""
    chains = rdir  # the directory named, wherever the run was created
    side = chains.commit_record(chain)
    ckpt = chains.checkpoint(chain)
    problem = None
    if writer_holder(chains.chain_path(chain)) is None:  # a chain being written is not checked
        try:
            chains.verified_checkpoint(chain)
        except StorageError as exc:
            problem = str(exc)
    iteration = ckpt.iteration if ckpt else 0
    prog = chains.read_progress(chain)
    if prog.status == "running":
        iteration = max(iteration, int(prog.iteration))
    job, raw = task
    state = None
    if job is not None:
        state = states.get(job) or (states.get(raw) if raw else None)
        if state is None:
            state = task_state(states, job.split("_")[0], node)
    done = bool(ckpt and ckpt.done(config.sampler.iterations, config.sampler.stop_when))
    phase = prog.current_phase()
    if not done and phase == PHASE_FINISHED:  # finished before sampler.iterations was raised
        phase = PHASE_STOPPED
    return ChainStatus(
        chain=chain,
        node=node,
        iteration=iteration,
        iterations=config.sampler.iterations,
        draws=int((side or {}).get("draws", 0)),
        requeues=rdir.requeue_count(node),
        last_commit=(side or {}).get("committed_at"),
        job=job,
        state=state,
        finished=done and problem is None,
        phase=PHASE_FINISHED if done else phase,
        problem=problem,
    )


def run_status(run_dir: Path, *, query_slurm: bool = True) -> list[ChainStatus]:
    """Per-chain progress of a run and the Slurm state of each chain's job.

    Parameters
    ----------
    run_dir
        The run directory.
    query_slurm
        Ask squeue/sacct for job states (skipped when Slurm is not installed).
    """
    rdir = RunDir(run_dir)
    config = rdir.load_config()
    plan = make_plan(config)
    latest = _latest_tasks(rdir, plan)
    states: dict[str, str] = {}
    if query_slurm and latest:
        states = job_states([raw or task.split("_")[0] for task, raw in latest.values()])
    out = []
    for c in range(config.chains.count):
        node = plan.node_of_chain(c)
        task = latest.get(node, (None, None))
        out.append(_chain_status(config, rdir, c, node, task, states))
    return out


def cancel(run_dir: Path) -> list[str]:
    """``scancel`` the run's jobs that are still pending or running; returns their ids.

    Raises
    ------
    HawkesError
        No ``scancel``, or it failed.
    """
    RunDir(run_dir).load_config()  # a run directory at all
    jobs = active_jobs(run_dir)
    if not jobs:
        return []
    proc = call([slurm_command("scancel"), *jobs])
    if proc.returncode != 0:
        raise HawkesError(f"scancel {' '.join(jobs)} failed: {proc.stderr.strip()}")
    log.info("cancelled %s", ", ".join(jobs))
    return jobs
