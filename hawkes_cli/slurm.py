"""Slurm: placement plan, batch script from ``slurm/job.sbatch.tmpl``, submit, status, cancel.

A run is one Slurm array job with one array task per node (DESIGN section 6). Node ``k`` holds
chains ``k * chains_per_node`` up to ``chains_per_node`` further ones (the last node may hold
fewer); each chain has ``gpus_per_chain`` MPI ranks; the rank with local rank ``r`` on a node
drives the ``r``-th GPU the job may see. Every array task asks for the same resources:
``--nodes=1 --ntasks=chains_per_node*gpus_per_chain --gres=gpu:<that many>``.

Files under ``RUN_DIR/slurm/``: ``job.sbatch`` (the rendered script), ``plan.json``,
``jobs.json`` (every submission: job id, array, time), ``node-NN.json`` (starts, requeues and
ends of node ``NN``, written by :mod:`hawkes_cli.node`) and ``logs/<job>_<task>.out``.

Quoting: every value that reaches the script goes through :func:`shlex.quote` in shell code and
through :func:`sbatch_quote` in ``#SBATCH`` lines (sbatch reads those itself: double quotes and
backslash escapes, no single quotes); line breaks are refused, so no value can end a line and
inject another.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shlex
import shutil
import string
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from . import atomic
from .config import Config
from .errors import ConfigError, HawkesError, StorageError, UsageError
from .rundir import RunDir, now_utc

log = logging.getLogger(__name__)

TEMPLATE_NAME = "job.sbatch.tmpl"
LAUNCHERS: tuple[str, ...] = ("auto", "srun", "mpiexec")
DEFAULT_CPUS_PER_TASK = 1
SLURM_TIMEOUT = 60  # seconds for one sbatch/squeue/sacct/scancel call

# sbatch options the plan sets itself; slurm.extra may not repeat them
_FIXED_OPTIONS = frozenset(
    {
        "array",
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "gres",
        "gpus",
        "gpus-per-node",
        "gpus-per-task",
        "requeue",
        "no-requeue",
        "signal",
        "open-mode",
        "output",
        "time",
        "partition",
        "account",
        "qos",
        "wrap",
        "parsable",
    }
)
# sbatch options with a default here that slurm.extra may replace
_OVERRIDABLE_OPTIONS = frozenset({"job-name", "cpus-per-task"})
_ACTIVE_STATES = frozenset(
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


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class RankSlot:
    """One MPI rank of a node job.

    Attributes
    ----------
    rank
        Rank in the node's world communicator (= its local rank: one node per array task).
    chain
        The chain it belongs to.
    chain_rank
        Its rank within the chain (0 drives the sampler and writes the chain file).
    gpu
        Index of its GPU among the GPUs the job may see (``CUDA_VISIBLE_DEVICES`` order).
    """

    rank: int
    chain: int
    chain_rank: int
    gpu: int


@dataclass(frozen=True)
class NodePlan:
    """One array task: a node with its chains and ranks.

    Attributes
    ----------
    index
        Array task id (0-based).
    chains
        Chain ids placed here, ascending.
    ranks
        Every rank of the node job, in rank order.
    gpus_per_node
        GPUs of the node (to report idle ones).
    """

    index: int
    chains: tuple[int, ...]
    ranks: tuple[RankSlot, ...]
    gpus_per_node: int

    @property
    def n_ranks(self) -> int:
        """MPI ranks (= GPUs used) on this node."""
        return len(self.ranks)

    @property
    def idle_gpus(self) -> int:
        """GPUs of the node no rank uses."""
        return self.gpus_per_node - self.n_ranks


@dataclass(frozen=True)
class Resources:
    """What each array task asks Slurm for.

    Attributes
    ----------
    array
        ``--array`` range, e.g. ``"0-14"``.
    ntasks
        ``--ntasks``: ranks of a full node.
    gpus
        ``--gres=gpu:<gpus>``.
    cpus_per_task
        ``--cpus-per-task``.
    time
        ``--time``.
    partition, account, qos
        Or ``None`` to leave out.
    signal_seconds
        Warning signal ``--signal=B:USR1@<signal_seconds>``.
    extra
        Further options, name -> value (``""``: a flag without value).
    job_name
        ``--job-name``.
    """

    array: str
    ntasks: int
    gpus: int
    cpus_per_task: int
    time: str
    partition: str | None
    account: str | None
    qos: str | None
    signal_seconds: int
    extra: Mapping[str, str] = field(default_factory=dict)
    job_name: str = "hawkes"
    nodes: int = 1

    def options(self, output: str) -> list[tuple[str, str | None]]:
        """``(option, value)`` pairs in script order (value ``None``: a flag).

        Parameters
        ----------
        output
            The ``--output`` file pattern (``%A``/``%a`` kept; a literal ``%`` doubled).
        """
        opts: list[tuple[str, str | None]] = [
            ("job-name", self.job_name),
            ("array", self.array),
            ("nodes", str(self.nodes)),
            ("ntasks", str(self.ntasks)),
            ("gres", f"gpu:{self.gpus}"),
            ("cpus-per-task", str(self.cpus_per_task)),
            ("time", self.time),
        ]
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            if value is not None:
                opts.append((name, value))
        opts += [
            ("requeue", None),
            ("signal", f"B:USR1@{self.signal_seconds}"),
            ("open-mode", "append"),
            ("output", output),
        ]
        for name, value in self.extra.items():
            key = _option_key(name)
            if key in _OVERRIDABLE_OPTIONS:
                opts = [(k, value if k == key else v) for k, v in opts]
            else:
                opts.append((name, value if value != "" else None))
        return opts


@dataclass(frozen=True)
class Plan:
    """Placement of all chains of a run on Slurm array tasks.

    Attributes
    ----------
    chains, gpus_per_chain, chains_per_node, gpus_per_node
        From the config (``chains_per_node`` capped at ``chains``).
    nodes
        One :class:`NodePlan` per array task.
    resources
        The sbatch request of each array task.
    """

    chains: int
    gpus_per_chain: int
    chains_per_node: int
    gpus_per_node: int
    nodes: tuple[NodePlan, ...]
    resources: Resources

    def node(self, index: int) -> NodePlan:
        """The plan of array task ``index``.

        Raises
        ------
        UsageError
            If there is no such node.
        """
        if not 0 <= index < len(self.nodes):
            raise UsageError(
                f"node {index} is not in the plan (array tasks 0..{len(self.nodes) - 1}); "
                "was the config changed after submitting?"
            )
        return self.nodes[index]

    def node_of_chain(self, chain: int) -> int:
        """Array task that runs ``chain``."""
        return chain // self.chains_per_node

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (``RUN_DIR/slurm/plan.json``)."""
        r = self.resources
        return {
            "chains": self.chains,
            "gpus_per_chain": self.gpus_per_chain,
            "chains_per_node": self.chains_per_node,
            "gpus_per_node": self.gpus_per_node,
            "nodes": [
                {
                    "index": n.index,
                    "chains": list(n.chains),
                    "ranks": [
                        {"rank": s.rank, "chain": s.chain, "chain_rank": s.chain_rank, "gpu": s.gpu}
                        for s in n.ranks
                    ],
                    "idle_gpus": n.idle_gpus,
                }
                for n in self.nodes
            ],
            "resources": {
                "array": r.array,
                "nodes": r.nodes,
                "ntasks": r.ntasks,
                "gres": f"gpu:{r.gpus}",
                "cpus_per_task": r.cpus_per_task,
                "time": r.time,
                "partition": r.partition,
                "account": r.account,
                "qos": r.qos,
                "signal": f"B:USR1@{r.signal_seconds}",
                "extra": dict(r.extra),
            },
        }


def _option_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _job_name(run_dir: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", run_dir.name).strip("-.") or "run"
    return f"hawkes-{name}"[:64]


def make_plan(config: Config) -> Plan:
    """Place the chains of ``config`` on array tasks.

    Parameters
    ----------
    config
        The run's configuration (sections ``chains`` and ``slurm``).

    Returns
    -------
    Plan

    Raises
    ------
    ConfigError
        An impossible placement (more GPUs per node than the node has), or an ``slurm.extra``
        option that the plan sets itself.
    """
    where = str(config.source) if config.source is not None else "config"
    ch, sl = config.chains, config.slurm
    g = ch.gpus_per_chain
    if g > ch.gpus_per_node:
        raise ConfigError(
            f"{where}: chains: impossible plan: a chain needs chains.gpus_per_chain = {g} GPUs "
            f"but a node has chains.gpus_per_node = {ch.gpus_per_node}; a chain runs within one "
            f"node, so lower gpus_per_chain to at most {ch.gpus_per_node}"
        )
    if ch.chains_per_node * g > ch.gpus_per_node:
        raise ConfigError(
            f"{where}: chains: impossible plan: chains.chains_per_node ({ch.chains_per_node}) * "
            f"chains.gpus_per_chain ({g}) = {ch.chains_per_node * g} GPUs per node, more than "
            f"chains.gpus_per_node ({ch.gpus_per_node}); lower chains_per_node to at most "
            f"{ch.gpus_per_node // g}"
        )
    per_node = min(ch.chains_per_node, ch.count)
    n_nodes = -(-ch.count // per_node)
    nodes = []
    for k in range(n_nodes):
        chains = tuple(range(k * per_node, min((k + 1) * per_node, ch.count)))
        ranks = tuple(
            RankSlot(rank=i * g + j, chain=c, chain_rank=j, gpu=i * g + j)
            for i, c in enumerate(chains)
            for j in range(g)
        )
        nodes.append(NodePlan(k, chains, ranks, ch.gpus_per_node))
    extra: dict[str, str] = {}
    for name, value in sl.extra.items():
        key = _option_key(name)
        if key in _FIXED_OPTIONS:
            raise ConfigError(
                f"{where}: slurm.extra.{name}: --{key} is set by the placement plan (see "
                "`hawkes-run plan`); change the chains/slurm keys instead, or remove it"
            )
        extra[name] = value
    cpus = DEFAULT_CPUS_PER_TASK
    for name, value in extra.items():
        if _option_key(name) == "cpus-per-task":
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(
                    f"{where}: slurm.extra.{name}: expected a whole number >= 1, got {value!r}"
                )
            cpus = int(value)
    resources = Resources(
        array=f"0-{n_nodes - 1}" if n_nodes > 1 else "0",
        ntasks=per_node * g,
        gpus=per_node * g,
        cpus_per_task=cpus,
        time=sl.time,
        partition=sl.partition,
        account=sl.account,
        qos=sl.qos,
        signal_seconds=sl.signal_seconds,
        extra={k: v for k, v in extra.items() if _option_key(k) != "cpus-per-task"},
        job_name=_job_name(config.output.run_dir),
    )
    return Plan(ch.count, g, per_node, ch.gpus_per_node, tuple(nodes), resources)


def _ranges(values: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    out: list[str] = []
    vals = sorted(values)
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


def format_plan(plan: Plan) -> str:
    """The plan as text: nodes, chains, rank -> GPU, resources (for ``hawkes-run plan``)."""
    r = plan.resources
    lines = [
        f"chains        {plan.chains} chain(s) x {plan.gpus_per_chain} rank(s) (GPUs) each",
        f"nodes         {len(plan.nodes)} array task(s) (--array={r.array}), "
        f"{plan.chains_per_node} chain(s) per node, {plan.gpus_per_node} GPUs per node",
    ]
    last = plan.nodes[-1]
    if len(last.chains) < plan.chains_per_node:
        lines.append(
            f"last node     task {last.index} holds {len(last.chains)} of "
            f"{plan.chains_per_node} chain(s): {last.n_ranks} rank(s), "
            f"{r.ntasks - last.n_ranks} requested GPU(s) idle there"
        )
    lines.append("placement")
    for n in plan.nodes:
        idle = f"  ({n.idle_gpus} GPU(s) of the node unused)" if n.idle_gpus else ""
        lines.append(f"  task {n.index:>3}: chains {_ranges(n.chains)}{idle}")
        for c in n.chains:
            slots = [s for s in n.ranks if s.chain == c]
            gpus = ", ".join(f"rank {s.rank} -> GPU {s.gpu}" for s in slots)
            lines.append(f"    chain {c:>3}: {gpus}  (rank {slots[0].rank} drives)")
    lines.append("resources (each array task)")
    for name, value in r.options(output="RUN_DIR/slurm/logs/%A_%a.out"):
        lines.append(f"  --{name}" + ("" if value is None else f"={value}"))
    return "\n".join(lines)


# --------------------------------------------------------------------------- rendering


def template_path() -> Path:
    """The batch-script template: packaged (``hawkes_cli/_slurm``) or the checkout's ``slurm/``.

    Raises
    ------
    HawkesError
        If neither exists.
    """
    packaged = resources.files("hawkes_cli").joinpath("_slurm", TEMPLATE_NAME)
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "slurm" / TEMPLATE_NAME
    if checkout.is_file():
        return checkout
    raise HawkesError(
        f"batch-script template {TEMPLATE_NAME} not found in {packaged} nor {checkout}; "
        "reinstall the package (pip install .)"
    )


def _single_line(what: str, value: str) -> str:
    if any(c in value for c in "\n\r\0"):
        raise ConfigError(
            f"{what} {value!r} contains a line break or NUL, which cannot go into a batch "
            "script; rename it"
        )
    return value


def sbatch_quote(value: str) -> str:
    """Quote ``value`` for an ``#SBATCH`` line as sbatch itself parses it.

    sbatch splits those lines at unquoted white space, treats ``"`` as quotes, ``\\`` as an
    escape and an unquoted ``#`` as a comment (single quotes are literal), so anything beyond
    plain characters is put in double quotes with ``"`` and ``\\`` escaped.

    Raises
    ------
    ConfigError
        If ``value`` holds a line break or NUL.
    """
    _single_line("value", value)
    if value and re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sbatch_output(run_dir: Path) -> str:
    logs = str(RunDir(run_dir).slurm_logs_dir)
    return logs.replace("%", "%%") + "/%A_%a.out"


def render_script(
    config: Config,
    plan: Plan,
    *,
    config_path: Path,
    python: str | None = None,
    launcher: str = "auto",
    template: Path | None = None,
) -> str:
    """The batch script of ``plan`` from the template in ``slurm/``.

    Parameters
    ----------
    config
        The run's configuration.
    plan
        Its placement (:func:`make_plan`).
    config_path
        The resolved config the job reads (``RUN_DIR/config.yaml``).
    python
        Interpreter the job runs (default: this one, :data:`sys.executable`).
    launcher
        How the node starts its ranks: ``auto`` (srun inside Slurm, else mpiexec), ``srun`` or
        ``mpiexec``.
    template
        Template file (default :func:`template_path`).

    Returns
    -------
    str
        The script; every value is quoted (see the module docstring).
    """
    if launcher not in LAUNCHERS:
        raise UsageError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    python = python or sys.executable
    _single_line("run directory", str(config.output.run_dir))
    options = plan.resources.options(output=_sbatch_output(config.output.run_dir))
    directives = "\n".join(
        f"#SBATCH --{name}" + ("" if value is None else f"={sbatch_quote(value)}")
        for name, value in options
    )
    r = plan.resources
    summary = (
        f"{plan.chains} chain(s) x {plan.gpus_per_chain} GPU(s) on {len(plan.nodes)} node(s) "
        f"(--array={r.array}), {plan.chains_per_node} chain(s) per node"
    )
    text = (template or template_path()).read_text(encoding="utf-8")
    return string.Template(text).substitute(
        plan_summary=summary,
        signal_seconds=str(config.slurm.signal_seconds),
        requeue_budget=str(config.slurm.requeue_budget),
        directives=directives,
        launcher=shlex.quote(launcher),
        python=shlex.quote(_single_line("interpreter path", python)),
        config=shlex.quote(_single_line("config path", str(config_path))),
    )


# --------------------------------------------------------------------------- files


# --------------------------------------------------------------------------- Slurm commands


def _slurm_cmd(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise HawkesError(
            f"{name} not found on PATH: run this on a Slurm login node (or bring up the local "
            "test cluster: bash slurm/local-cluster.sh up)"
        )
    return found


def _call(cmd: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    log.debug("running %s", shlex.join(cmd))
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=SLURM_TIMEOUT, cwd=cwd, check=False
        )
    except subprocess.TimeoutExpired:
        raise HawkesError(
            f"{cmd[0]} did not answer within {SLURM_TIMEOUT} s; is the Slurm controller up?"
        ) from None


def _job_ids(jobs: list[dict[str, Any]]) -> list[str]:
    return [str(j["job_id"]) for j in jobs if j.get("job_id")]


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
        proc = _call(
            ["squeue", "--array", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%A|%T"]
        )
        if proc.returncode == 0:
            for line in proc.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) == 3 and parts[2]:
                    states[parts[0]] = states[parts[1]] = parts[2].strip()
    missing = [j for j in ids if not any(k == j or k.startswith(f"{j}_") for k in states)]
    if missing and shutil.which("sacct"):
        for fmt, extra in (("JobID,JobIDRaw,State", []), ("JobID,State", ["--completion"])):
            proc = _call(["sacct", *extra, "-n", "-P", "-X", "-j", ",".join(missing), "-o", fmt])
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


def _expand(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split("%")[0].split(","):
        a, _, b = part.partition("-")
        if a.isdigit():
            out.update(range(int(a), int(b) + 1) if b.isdigit() else [int(a)])
    return out


def active_jobs(run_dir: Path) -> list[str]:
    """Recorded jobs of the run that Slurm still has pending or running."""
    jobs = _job_ids(RunDir(run_dir).read_jobs())
    if not jobs or not shutil.which("squeue"):
        return []
    states = job_states(jobs)
    active = []
    for j in jobs:
        if any(
            (k == j or k.startswith(f"{j}_")) and v.split()[0] in _ACTIVE_STATES
            for k, v in states.items()
        ):
            active.append(j)
    return active


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
    """

    script: str
    script_path: Path | None
    job_id: str | None
    array: str
    plan: Plan


def unfinished_nodes(config: Config, plan: Plan) -> list[int]:
    """Array tasks with at least one chain not yet finished."""
    run_dir = RunDir.of(config)
    return [n.index for n in plan.nodes if not all(run_dir.is_finished(c) for c in n.chains)]


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
        Render only: write nothing, submit nothing.
    launcher
        See :func:`render_script`.
    python
        Interpreter for the job (default: this one).

    Raises
    ------
    HawkesError
        No ``sbatch``, a rejected submission, or jobs of this run still pending or running.
    StorageError
        The run directory holds a run of another config.
    """
    plan = make_plan(config)
    rdir = RunDir.of(config)
    run_dir = rdir.root
    config_path = rdir.config_path
    script = render_script(config, plan, config_path=config_path, python=python, launcher=launcher)
    if dry_run:
        return Submission(script, None, None, plan.resources.array, plan)
    sbatch = _slurm_cmd("sbatch")
    try:
        rdir.write_config(config)
    except StorageError as exc:
        if "different config" not in str(exc):
            raise
        raise StorageError(
            f"{run_dir} holds a run of a different config ({config_path}); choose "
            "another output.run_dir, or remove that run directory to start afresh"
        ) from None
    active = active_jobs(run_dir)
    if active:
        raise HawkesError(
            f"run {run_dir} has job(s) {', '.join(active)} pending or running; wait for them or "
            f"cancel them (hawkes-run cancel {shlex.quote(str(run_dir))}) before submitting again"
        )
    sdir = rdir.slurm_dir
    rdir.slurm_logs_dir.mkdir(parents=True, exist_ok=True)
    script_path = rdir.script_path
    atomic.write_text(script_path, script)
    atomic.write_json(rdir.plan_path, plan.to_json())
    pending = unfinished_nodes(config, plan)
    if not pending:
        log.info("all %d chains of %s are finished; nothing to submit", plan.chains, run_dir)
        return Submission(script, script_path, None, "", plan)
    array = _ranges(pending)
    cmd = [sbatch, "--parsable"]
    if array != plan.resources.array:
        cmd.append(f"--array={array}")  # the command line overrides the script's directive
    cmd.append(str(script_path))
    proc = _call(cmd, cwd=sdir)
    if proc.returncode != 0:
        raise HawkesError(
            f"sbatch refused the job ({proc.stderr.strip() or f'exit {proc.returncode}'}); "
            f"script: {script_path}"
        )
    out = proc.stdout.strip().splitlines()
    job_id = out[-1].split(";")[0].strip() if out else ""
    if not job_id.isdigit():
        raise HawkesError(f"sbatch --parsable printed {proc.stdout!r}, expected a job id")
    rdir.record_job(
        {
            "job_id": job_id,
            "array": array,
            "nodes": pending,
            "submitted": now_utc("seconds"),
            "script": script_path.name,
            "script_sha256": hashlib.sha256(script.encode("utf-8")).hexdigest(),
            "config_sha256": config.sha256,
        },
    )
    log.info("submitted array job %s (tasks %s) for %s", job_id, array, run_dir)
    return Submission(script, script_path, job_id, array, plan)


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
    chains = RunDir.of(config)
    plan = make_plan(config)
    jobs = rdir.read_jobs()
    latest: dict[int, tuple[str, str | None]] = {}  # node -> (array task, its raw job id)
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
    states: dict[str, str] = {}
    if query_slurm and latest:
        states = job_states([raw or task.split("_")[0] for task, raw in latest.values()])
    out = []
    for c in range(config.chains.count):
        node = plan.node_of_chain(c)
        side = chains.commit_record(c)
        ckpt = chains.checkpoint(c)
        iteration = ckpt.iteration if ckpt else 0
        prog = chains.read_progress(c)
        if prog.status == "running":
            iteration = max(iteration, int(prog.iteration))
        task, raw = latest.get(node, (None, None))
        state = None
        if task is not None:
            state = states.get(task) or (states.get(raw) if raw else None)
            if state is None:
                state = task_state(states, task.split("_")[0], node)
        out.append(
            ChainStatus(
                chain=c,
                node=node,
                iteration=iteration,
                iterations=config.sampler.iterations,
                draws=int((side or {}).get("draws", 0)),
                requeues=rdir.requeue_count(node),
                last_commit=(side or {}).get("committed_at"),
                job=task,
                state=state,
                finished=bool(ckpt and ckpt.finished),
            )
        )
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
    proc = _call([_slurm_cmd("scancel"), *jobs])
    if proc.returncode != 0:
        raise HawkesError(f"scancel {' '.join(jobs)} failed: {proc.stderr.strip()}")
    log.info("cancelled %s", ", ".join(jobs))
    return jobs
