"""The placement plan: which array task (node) runs which chains, which rank drives which GPU.

Node ``k`` holds chains ``k * chains_per_node`` up to ``chains_per_node`` further ones (the last
node may hold fewer); each chain has ``gpus_per_chain`` MPI ranks; the rank with local rank
``r`` on a node drives the ``r``-th GPU the job may see. Every array task asks for the same
resources: ``--nodes=1 --ntasks=chains_per_node*gpus_per_chain --gres=gpu:<that many>``.

This module computes; it reads no file and calls no Slurm command.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import ConfigError, UsageError

DEFAULT_CPUS_PER_TASK = 1

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
        Further options, full name -> value (``True``: a flag without value).
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
    extra: Mapping[str, str | bool] = field(default_factory=dict)
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
            if key in _OVERRIDABLE_OPTIONS and isinstance(value, str):
                opts = [(k, value if k == key else v) for k, v in opts]
            else:
                opts.append((name, None if value is True else str(value)))
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


def _place(count: int, per_node: int, gpus_per_chain: int, gpus_per_node: int) -> list[NodePlan]:
    """``count`` chains, ``per_node`` to a node, rank ``i * g + j`` on GPU ``i * g + j``."""
    g = gpus_per_chain
    nodes = []
    for k in range(-(-count // per_node)):
        chains = tuple(range(k * per_node, min((k + 1) * per_node, count)))
        ranks = tuple(
            RankSlot(rank=i * g + j, chain=c, chain_rank=j, gpu=i * g + j)
            for i, c in enumerate(chains)
            for j in range(g)
        )
        nodes.append(NodePlan(k, chains, ranks, gpus_per_node))
    return nodes


def _extra_options(
    where: str, options: Mapping[str, str | bool]
) -> tuple[int, dict[str, str | bool]]:
    """``slurm.extra`` checked: ``(cpus per task, the other options)``.

    sbatch, like ``getopt_long``, takes any unique prefix of a long option (``--sig`` is
    ``--signal``), so a key that abbreviates an option managed here is refused as well: it
    would silently override the plan.
    """
    extra: dict[str, str | bool] = {}
    managed = _FIXED_OPTIONS | _OVERRIDABLE_OPTIONS
    for name, value in options.items():
        key = _option_key(name)
        if key in _FIXED_OPTIONS:
            raise ConfigError(
                f"{where}: slurm.extra.{name}: --{key} is set by the placement plan (see "
                "`hawkes-run plan`); change the chains/slurm keys instead, or remove it"
            )
        abbreviates = sorted(m for m in managed if m != key and m.startswith(key))
        if abbreviates:
            raise ConfigError(
                f"{where}: slurm.extra.{name}: sbatch reads --{key} as an abbreviation of "
                f"--{' or --'.join(abbreviates)}, which the plan manages; write sbatch options "
                "out in full (see `hawkes-run plan` for the options set)"
            )
        if key in _OVERRIDABLE_OPTIONS and value is True:
            raise ConfigError(
                f"{where}: slurm.extra.{name}: --{key} needs a value, got true (a flag)"
            )
        extra[name] = value
    cpus = DEFAULT_CPUS_PER_TASK
    for name, value in extra.items():
        if _option_key(name) == "cpus-per-task":
            if not isinstance(value, str) or not value.isdigit() or int(value) < 1:
                raise ConfigError(
                    f"{where}: slurm.extra.{name}: expected a whole number >= 1, got {value!r}"
                )
            cpus = int(value)
    return cpus, {k: v for k, v in extra.items() if _option_key(k) != "cpus-per-task"}


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
        An ``slurm.extra`` option that the plan sets itself. (An impossible placement cannot
        reach here: :class:`~hawkes_cli.config.ChainsConfig` refuses it when built.)
    """
    where = str(config.source) if config.source is not None else "config"
    ch, sl = config.chains, config.slurm
    g = ch.gpus_per_chain
    per_node = min(ch.chains_per_node, ch.count)
    nodes = _place(ch.count, per_node, g, ch.gpus_per_node)
    cpus, extra = _extra_options(where, sl.extra)
    resources = Resources(
        array=f"0-{len(nodes) - 1}" if len(nodes) > 1 else "0",
        ntasks=per_node * g,
        gpus=per_node * g,
        cpus_per_task=cpus,
        time=sl.time,
        partition=sl.partition,
        account=sl.account,
        qos=sl.qos,
        signal_seconds=sl.signal_seconds,
        extra=extra,
        job_name=_job_name(config.output.run_dir),
    )
    return Plan(ch.count, g, per_node, ch.gpus_per_node, tuple(nodes), resources)


def array_ranges(values: Sequence[int]) -> str:
    """Array task ids as an ``--array`` value: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
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
        lines.append(f"  task {n.index:>3}: chains {array_ranges(n.chains)}{idle}")
        for c in n.chains:
            slots = [s for s in n.ranks if s.chain == c]
            gpus = ", ".join(f"rank {s.rank} -> GPU {s.gpu}" for s in slots)
            lines.append(f"    chain {c:>3}: {gpus}  (rank {slots[0].rank} drives)")
    lines.append("resources (each array task)")
    for name, value in r.options(output="RUN_DIR/slurm/logs/%A_%a.out"):
        lines.append(f"  --{name}" + ("" if value is None else f"={value}"))
    return "\n".join(lines)
