"""The config's sections as frozen dataclasses; every key is written once, as a field.

A field carries its default and, in its metadata, its validation (:mod:`.spec`); the valid keys
(:data:`KEYS`), the loader (:mod:`.sections`) and the resolved YAML (:meth:`Config.to_mapping`)
are all derived from the fields, in their order.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from ..errors import ConfigError
from ..priors import Prior
from ..vocab import (
    BACKGROUNDS,
    DEFAULT_BACKGROUND,
    DEFAULT_CHAINS,
    DEFAULT_CHAINS_PER_NODE,
    DEFAULT_COMMIT_EVERY,
    DEFAULT_EDGE,
    DEFAULT_ENGINE,
    DEFAULT_EXPENSIVE_MOVE,
    DEFAULT_GPUS_PER_CHAIN,
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_INITIAL_SCALE,
    DEFAULT_ITERATIONS,
    DEFAULT_JUMP_PROB,
    DEFAULT_MODEL,
    DEFAULT_N_CHEAP,
    DEFAULT_N_EXPENSIVE,
    DEFAULT_PRECISION,
    DEFAULT_REQUEUE_BUDGET,
    DEFAULT_RESAMPLE_EVERY,
    DEFAULT_SAMPLER,
    DEFAULT_SEED,
    DEFAULT_SIGNAL_SECONDS,
    DEFAULT_SLURM_TIME,
    DEFAULT_START_SUBSAMPLE,
    DEFAULT_STOP_WHEN,
    DEFAULT_THIN,
    DEFAULT_TOLERANCE,
    DEFAULT_TRIGGER,
    EDGES,
    ENGINES,
    EXPENSIVE_MOVES,
    MODELS,
    PARAM_NAMES,
    PRECISIONS,
    SAMPLER_KINDS,
    STOP_CONVERGED,
    STOP_WHEN,
    TRIGGERS,
)
from .slurm_options import MAX_SIGNAL_SECONDS, slurm_time_seconds
from .spec import choice, integer, number, own_reader, path, spec_of, string

MAX_SEED = 2**63 - 1  # seeds are stored as HDF5 int64 attributes
MAX_DEFAULT_WARMUP = 1000
MAX_N_CHEAP = 1000  # proposals per iteration are stored as int16 in the chain file
MAX_N_EXPENSIVE = 100  # each is a trigger pass
#: Field metadata: the value at which a key added after runs already existed is left out of
#: the resolved config, so that those runs' config hash (and so their resume) is unchanged.
OMIT_WHEN = "omit_when"
#: Largest iteration count (and thin, commit and resample interval): far beyond any run, well
#: inside the int64 of the chain file's attributes and iteration column.
MAX_ITERATIONS = 10**12
#: Most chains of a run, and most GPUs (ranks) of a node: the plan lists every one.
MAX_CHAINS = 10_000

#: ``sampler.initial: auto``: find the posterior mode first, then start each chain
#: over-dispersed around it (:mod:`hawkes_cli.start`).
INITIAL_AUTO = "auto"


def default_warmup(iterations: int) -> int:
    """The warm-up of a config that leaves ``sampler.warmup`` out: ``min(1000, iterations // 10)``.

    A tenth of the run, at most 1000 iterations; always ``< iterations``.
    """
    return min(MAX_DEFAULT_WARMUP, iterations // 10)


def stopping_problem(stop_when: str, chains: int) -> str | None:
    """Why ``sampler.stop_when`` cannot work with ``chains`` chains (None when it can): the
    convergence check needs R-hat, which compares at least two chains."""
    if stop_when == STOP_CONVERGED and chains < 2:
        return (
            f"sampler.stop_when: {STOP_CONVERGED} needs chains.count >= 2 (R-hat compares "
            f"chains), got {chains}; raise chains.count or set stop_when: iterations"
        )
    return None


def placement_problem(gpus_per_chain: int, chains_per_node: int, gpus_per_node: int) -> str | None:
    """Why chains of ``gpus_per_chain`` GPUs, ``chains_per_node`` to a node, do not fit a node.

    Returns
    -------
    str or None
        ``None`` when ``chains_per_node * gpus_per_chain <= gpus_per_node``; otherwise what is
        wrong and the largest value that fits.
    """
    need = chains_per_node * gpus_per_chain
    if need <= gpus_per_node:
        return None
    if gpus_per_chain > gpus_per_node:
        advice = (
            "a chain runs within one node, so chains.gpus_per_chain must be at most "
            f"{gpus_per_node}"
        )
    else:
        advice = f"lower chains.chains_per_node to at most {gpus_per_node // gpus_per_chain}"
    return (
        f"impossible placement: chains.chains_per_node ({chains_per_node}) * "
        f"chains.gpus_per_chain ({gpus_per_chain}) = {need} GPUs per node, more than "
        f"chains.gpus_per_node ({gpus_per_node}); {advice}"
    )


@dataclass(frozen=True)
class DataConfig:
    """Input data.

    Attributes
    ----------
    events
        Events file (CSV or HDF5), absolute. Required.
    area
        Area ``A`` of the study region in coordinate units squared (``rho = 1/A``); ``None``
        takes the events file's ``area`` attribute.
    counties
        Polygons file for location resampling, absolute; ``None`` uses the default county
        source.
    window_end
        End ``T`` of the observation window (time units, normally days); ``None`` takes the last
        event time.
    """

    events: Path = field(metadata=path())
    area: float | None = field(default=None, metadata=number(gt=0))
    counties: Path | None = field(default=None, metadata=path())
    window_end: float | None = field(default=None, metadata=number(gt=0))


@dataclass(frozen=True)
class ModelConfig:
    """Model choice.

    Attributes
    ----------
    kind
        1 (constant trigger lengthscale) or 2 (lengthscale ``sigma_x / sqrt(density)``).
    edge
        One of :data:`~hawkes_cli.vocab.EDGES`: ``"none"`` (the paper's likelihood),
        ``"censored"`` (the compensator counts each event's trigger mass inside the study
        region only; :mod:`hawkes_cli.engine.region`) or ``"renormalized"`` (each event's
        trigger kernel divided by that mass, the compensator whole).
    """

    kind: int = field(default=DEFAULT_MODEL, metadata=choice(MODELS))
    edge: str = field(default=DEFAULT_EDGE, metadata=choice(EDGES) | {OMIT_WHEN: DEFAULT_EDGE})


@dataclass(frozen=True)
class SamplerConfig:
    """MCMC settings (DESIGN section 5).

    Attributes
    ----------
    kind
        One of :data:`~hawkes_cli.vocab.SAMPLER_KINDS`: ``"univariate"`` (random-scan
        single-parameter random walk), ``"block"`` (adaptive Metropolis on all five) or
        ``"tiered"`` (one trigger pass per iteration, many cheap moves).
    iterations
        Total iterations per chain, warm-up included (>= 1).
    warmup
        Warm-up iterations (adaptation on), ``0 <= warmup < iterations``. Left out (``None``),
        it is :func:`default_warmup`, ``min(1000, iterations // 10)``, filled in on
        construction, so an instance always holds an integer.
    thin
        Keep every ``thin``-th draw (>= 1).
    seed
        Base seed (>= 0); chain ``c`` uses ``SeedSequence(seed, spawn_key=(c,))``.
    resample_every
        Redraw event locations inside their counties every this many iterations; 0 keeps
        locations fixed.
    target_accept
        Target acceptance rate in (0, 1); ``None`` uses the sampler's default.
    initial
        :data:`INITIAL_AUTO` (``"auto"``, the default): a fast start before warm-up (the
        posterior mode, searched on a subsample of ``start_subsample`` events, its curvature,
        then each chain's own over-dispersed start around it; see
        :func:`hawkes_cli.start.find_start`). Or starting values (natural scale, > 0) of some or
        all parameters, the others data-scaled defaults, jittered per chain (no fast start).
    initial_scale
        Initial proposal standard deviation on the log scale (> 0); ``tiered``: the prior
        posterior sd when there is no fast start's curvature.
    n_cheap
        ``tiered`` only: cheap-block moves (``mu0``, ``tau_t``, ``xi0``; no trigger pass) per
        iteration, in ``[0, 1000]``.
    n_expensive
        ``tiered`` only: moves of ``sigma_x`` and ``sigma_t`` per iteration, one trigger pass
        each, in ``[1, MAX_N_EXPENSIVE]``; several share one location redraw's cost.
    jump_prob
        ``tiered`` only: probability of the mode-jumping move in an iteration, in [0, 1].
    expensive_move
        ``tiered`` only: one of :data:`~hawkes_cli.vocab.EXPENSIVE_MOVES`, the kind of the
        ``sigma_x``, ``sigma_t`` moves (:class:`hawkes_cli.sampler.tiered.TieredSampler`).
    start_subsample
        ``initial: auto`` only: events (a seeded random subsample, the same for every chain)
        whose scaled log-likelihood the mode search runs on; data sets with no more events are
        searched on the full data (>= 100).
    stop_when
        One of :data:`~hawkes_cli.vocab.STOP_WHEN`: ``"iterations"`` (the default) runs every
        iteration; ``"converged"`` also ends every chain, as finished, at its first commit
        after the run's post-warm-up draws pass ``hawkes-diagnose`` (verdict OK with every
        chain: R-hat and bulk and tail ESS of every parameter; ``iterations`` stays the cap;
        :mod:`hawkes_cli.runner.converged`). Needs at least two chains.
    """

    kind: str = field(default=DEFAULT_SAMPLER, metadata=choice(SAMPLER_KINDS))
    iterations: int = field(
        default=DEFAULT_ITERATIONS, metadata=integer(minimum=1, maximum=MAX_ITERATIONS)
    )
    warmup: int | None = field(default=None, metadata=integer(minimum=0, maximum=MAX_ITERATIONS))
    thin: int = field(default=DEFAULT_THIN, metadata=integer(minimum=1, maximum=MAX_ITERATIONS))
    seed: int = field(default=DEFAULT_SEED, metadata=integer(minimum=0, maximum=MAX_SEED))
    resample_every: int = field(
        default=DEFAULT_RESAMPLE_EVERY, metadata=integer(minimum=0, maximum=MAX_ITERATIONS)
    )
    target_accept: float | None = field(default=None, metadata=number(gt=0, lt=1))
    initial: str | Mapping[str, float] = field(
        default=INITIAL_AUTO, metadata=own_reader("start_values")
    )
    initial_scale: float = field(default=DEFAULT_INITIAL_SCALE, metadata=number(gt=0))
    n_cheap: int = field(default=DEFAULT_N_CHEAP, metadata=integer(minimum=0, maximum=MAX_N_CHEAP))
    n_expensive: int = field(
        default=DEFAULT_N_EXPENSIVE,
        metadata=integer(minimum=1, maximum=MAX_N_EXPENSIVE) | {OMIT_WHEN: DEFAULT_N_EXPENSIVE},
    )
    jump_prob: float = field(default=DEFAULT_JUMP_PROB, metadata=number(ge=0, le=1))
    expensive_move: str = field(
        default=DEFAULT_EXPENSIVE_MOVE,
        metadata=choice(EXPENSIVE_MOVES) | {OMIT_WHEN: DEFAULT_EXPENSIVE_MOVE},
    )
    start_subsample: int = field(
        default=DEFAULT_START_SUBSAMPLE, metadata=integer(minimum=100, maximum=MAX_ITERATIONS)
    )
    stop_when: str = field(
        default=DEFAULT_STOP_WHEN, metadata=choice(STOP_WHEN) | {OMIT_WHEN: DEFAULT_STOP_WHEN}
    )

    def __post_init__(self) -> None:
        if self.warmup is None:
            object.__setattr__(self, "warmup", default_warmup(self.iterations))

    @property
    def fast_start(self) -> bool:
        """Whether chains start with the fast start (``initial: auto``)."""
        return self.initial == INITIAL_AUTO


@dataclass(frozen=True)
class ChainsConfig:
    """How many chains and how they are placed (DESIGN section 6).

    Attributes
    ----------
    count
        Number of chains (>= 1).
    gpus_per_chain
        GPUs, i.e. MPI ranks, per chain (>= 1).
    chains_per_node
        Chains sharing one node job (>= 1); ``chains_per_node * gpus_per_chain`` must not
        exceed ``gpus_per_node``.
    gpus_per_node
        GPUs of one node (>= 1).
    """

    count: int = field(default=DEFAULT_CHAINS, metadata=integer(minimum=1, maximum=MAX_CHAINS))
    gpus_per_chain: int = field(
        default=DEFAULT_GPUS_PER_CHAIN, metadata=integer(minimum=1, maximum=MAX_CHAINS)
    )
    chains_per_node: int = field(
        default=DEFAULT_CHAINS_PER_NODE, metadata=integer(minimum=1, maximum=MAX_CHAINS)
    )
    gpus_per_node: int = field(
        default=DEFAULT_GPUS_PER_NODE, metadata=integer(minimum=1, maximum=MAX_CHAINS)
    )

    def __post_init__(self) -> None:
        problem = placement_problem(self.gpus_per_chain, self.chains_per_node, self.gpus_per_node)
        if problem is not None:  # a config built in code; the loader names the file first
            raise ConfigError(f"chains: {problem}")


@dataclass(frozen=True)
class EngineConfig:
    """Likelihood engine.

    Attributes
    ----------
    backend
        One of :data:`~hawkes_cli.vocab.ENGINES`: ``"opencl"`` or ``"reference"`` (numpy,
        float64).
    precision
        Working precision of the OpenCL kernels, ``"float32"`` or ``"float64"``.
    device
        OpenCL device spec (``"P:D"``, ``"gpu"``, ``"cpu"``, a name fragment) or ``None``.
    tolerance
        Error allowed in the log-likelihood from truncating the trigger, in nats (absolute):
        0 is the exact pair sum; ``T >= MIN_TOLERANCE`` (:data:`~hawkes_cli.vocab.MIN_TOLERANCE`)
        skips pair terms that are provably negligible and guarantees ``|ell~ - ell| <= T`` at
        every evaluation (see :mod:`hawkes_cli.engine.truncated`; the reference backend is
        always exact). The cut-off adapts during warm-up only; after it, a bound above ``T``
        is reported, not tightened. Values in ``(0, MIN_TOLERANCE)`` are refused as old
        relative tolerances (:func:`~hawkes_cli.vocab.tolerance_problem`).
    trigger
        How the trigger is summed when ``tolerance > 0`` (one of
        :data:`~hawkes_cli.vocab.TRIGGERS`): ``"auto"`` times one exact and one truncated pass
        at each chain's start and keeps the faster (:mod:`hawkes_cli.engine.choice`; the
        choice is logged and kept in the chain's checkpoint, so a resume continues with it);
        ``"exact"`` the pair sum (as ``tolerance: 0``); ``"truncated"`` the truncated trigger.
        Left out of the resolved config at ``"auto"``, so runs from before the key keep their
        hash.
    background
        ``"auto"``: the background once per distinct time (exact; cheap on a day lattice);
        ``"pairs"``: force the plain pair sum over all events (OpenCL; to check the former).
    """

    backend: str = field(default=DEFAULT_ENGINE, metadata=choice(ENGINES))
    precision: str = field(default=DEFAULT_PRECISION, metadata=choice(PRECISIONS))
    device: str | None = field(
        default=None, metadata=string(hint=' such as "0:1", "gpu" or a name fragment (quote it)')
    )
    tolerance: float = field(
        default=DEFAULT_TOLERANCE,
        metadata=number(ge=0, hint=" (nats of log-likelihood; 0: exact pair sum)"),
    )
    trigger: str = field(
        default=DEFAULT_TRIGGER, metadata=choice(TRIGGERS) | {OMIT_WHEN: DEFAULT_TRIGGER}
    )
    background: str = field(default=DEFAULT_BACKGROUND, metadata=choice(BACKGROUNDS))


@dataclass(frozen=True)
class OutputConfig:
    """Where a run writes.

    Attributes
    ----------
    run_dir
        Run directory, absolute (the loader's default is ``runs/<yaml stem>`` next to the YAML
        file).
    commit_every
        Iterations between commits of draws and checkpoint (>= 1).
    """

    run_dir: Path = field(metadata=path())
    commit_every: int = field(
        default=DEFAULT_COMMIT_EVERY, metadata=integer(minimum=1, maximum=MAX_ITERATIONS)
    )


@dataclass(frozen=True)
class SlurmConfig:
    """Slurm submission settings.

    Attributes
    ----------
    partition, account, qos
        sbatch ``--partition``, ``--account``, ``--qos``; ``None`` leaves them out.
    time
        Time limit per job, a Slurm ``--time`` value (``[D-]HH:MM:SS``, minutes, ...).
    extra
        Further sbatch options, full option name (without ``--``) -> value as text, e.g.
        ``{"constraint": "a100"}``, or ``True`` for a flag such as ``exclusive``.
    requeue_budget
        How many times a job may requeue itself after preemption or its time limit (>= 0).
    signal_seconds
        Seconds before the time limit at which Slurm sends the warning signal (>= 1, less than
        the time limit).
    """

    partition: str | None = field(default=None, metadata=string())
    time: str = field(default=DEFAULT_SLURM_TIME, metadata=own_reader("slurm_time"))
    account: str | None = field(default=None, metadata=string())
    qos: str | None = field(default=None, metadata=string())
    extra: Mapping[str, str | bool] = field(
        default_factory=dict, metadata=own_reader("sbatch_options")
    )
    requeue_budget: int = field(
        default=DEFAULT_REQUEUE_BUDGET, metadata=integer(minimum=0, maximum=MAX_ITERATIONS)
    )
    signal_seconds: int = field(
        default=DEFAULT_SIGNAL_SECONDS, metadata=integer(minimum=1, maximum=MAX_SIGNAL_SECONDS)
    )

    @property
    def time_seconds(self) -> int:
        """The time limit in seconds."""
        return slurm_time_seconds(self.time)


@dataclass(frozen=True)
class Config:
    """A complete, validated run configuration.

    Attributes
    ----------
    data, model, priors, sampler, chains, engine, output, slurm
        The sections, in the order of :data:`SECTIONS`; ``priors`` maps every name of
        :data:`~hawkes_cli.vocab.PARAM_NAMES` to its :class:`~hawkes_cli.priors.Prior`.
    source
        The YAML file it came from, or ``None``. Not part of equality or of :attr:`sha256`.
    created_in
        Where a run directory was created, when this is its resolved config read at another
        place (the directory was moved or copied; ``output.run_dir`` is then where it is now).
        The run's identity does not move: :meth:`to_yaml` and :attr:`sha256` keep this path,
        so the chain files and the shared start still belong to the run. ``None`` otherwise.
    """

    data: DataConfig
    model: ModelConfig
    priors: Mapping[str, Prior]
    sampler: SamplerConfig
    chains: ChainsConfig
    engine: EngineConfig
    output: OutputConfig
    slurm: SlurmConfig
    source: Path | None = field(default=None, compare=False)
    created_in: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        problem = stopping_problem(self.sampler.stop_when, self.chains.count)
        if problem is not None:  # a config built in code; the loader names the file first
            raise ConfigError(problem)

    def to_mapping(self) -> dict[str, Any]:
        """The fully resolved config in the YAML shape (plain dicts, lists, str, numbers)."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            section = getattr(self, name)
            if name == "priors":
                out[name] = {p: section[p].to_config() for p in PARAM_NAMES}
            else:
                out[name] = {
                    f.name: _plain(f, getattr(section, f.name))
                    for f in dataclasses.fields(section)
                    if OMIT_WHEN not in f.metadata
                    or getattr(section, f.name) != f.metadata[OMIT_WHEN]
                }
        if self.created_in is not None:
            out["output"]["run_dir"] = str(self.created_in)
        return out

    def differences(self, other: Config) -> list[str]:
        """Where ``other`` resolves differently: ``"section.key: mine -> other's"`` per key
        (nested keys dotted; a key only one has shows ``(none)``), in section order."""

        def flat(node: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
            if isinstance(node, Mapping) and node:
                for key, value in node.items():
                    flat(value, f"{prefix}.{key}" if prefix else str(key), out)
            else:
                out[prefix] = node
            return out

        mine, theirs = flat(self.to_mapping(), "", {}), flat(other.to_mapping(), "", {})
        for side in (mine, theirs):  # a key left out at its default (OMIT_WHEN) has that value
            side |= {k: v for k, v in _omitted_defaults().items() if k not in side}
        keys = list(mine) + [k for k in theirs if k not in mine]
        keys.sort(key=lambda k: SECTIONS.index(k.split(".")[0]))  # stable: in-section order kept

        def shown(side: dict[str, Any], k: str) -> Any:
            value = side.get(k, "(none)")
            return "null" if value is None else value

        return [
            f"{k}: {shown(mine, k)} -> {shown(theirs, k)}"
            for k in keys
            if mine.get(k, "(none)") != theirs.get(k, "(none)")
        ]

    def to_yaml(self) -> str:
        """The resolved config as YAML (``yaml.safe_dump``, sections in order)."""
        return yaml.safe_dump(self.to_mapping(), sort_keys=False)

    @property
    def sha256(self) -> str:
        """SHA-256 hex digest of :meth:`to_yaml`: equal for configs that resolve the same."""
        return hashlib.sha256(self.to_yaml().encode("utf-8")).hexdigest()

    @property
    def draws_sha256(self) -> str:
        """:func:`draws_digest` of :meth:`to_yaml`: equal for configs whose chains make the
        same draws (they may differ in :data:`RUN_ONLY_KEYS`)."""
        return draws_digest(self.to_yaml())


def _omitted_defaults() -> dict[str, Any]:
    """``"section.key"`` -> the value at which :meth:`Config.to_mapping` leaves it out."""
    return {
        f"{name}.{f.name}": f.metadata[OMIT_WHEN]
        for name, kind in SECTION_TYPES.items()
        for f in dataclasses.fields(kind)
        if OMIT_WHEN in f.metadata
    }


RUN_ONLY_KEYS: tuple[str, ...] = (
    "output.commit_every",
    "sampler.iterations",
    "sampler.stop_when",
    "slurm",
)
"""Keys (a whole section without a dot) that change how a run is driven but no draw it makes:
a run directory takes a config that differs from its own only there without ``--overwrite``,
and its chains resume (``RunDir.write_config``, ``storage.check_resume``). More
``sampler.iterations`` extend finished chains (each checkpoint records the iterations it ran
for, ``rundir.Checkpoint.iterations``); fewer than a chain has run are refused. A resolved
``sampler.warmup`` that follows the iterations changes with them, and then the draws do: that
is refused."""


def draws_digest(config_yaml: str) -> str:
    """SHA-256 hex digest of a resolved config's YAML (:meth:`Config.to_yaml`, the text a chain
    file records; comment lines allowed) without :data:`RUN_ONLY_KEYS`."""
    mapping = yaml.safe_load(config_yaml) or {}
    for key in RUN_ONLY_KEYS:
        section, _, name = key.partition(".")
        if name:
            (mapping.get(section) or {}).pop(name, None)
        else:
            mapping.pop(section, None)
    return hashlib.sha256(yaml.safe_dump(mapping, sort_keys=False).encode("utf-8")).hexdigest()


def run_only(key: str) -> bool:
    """Whether a dotted config key (``"slurm.time"``) is one of :data:`RUN_ONLY_KEYS`."""
    return any(key == k or key.startswith(k + ".") for k in RUN_ONLY_KEYS)


def same_draws(config_yaml: str, other_yaml: str) -> bool:
    """Whether two resolved configs' YAML texts differ in :data:`RUN_ONLY_KEYS` at most."""
    return draws_digest(config_yaml) == draws_digest(other_yaml)


def _plain(f: dataclasses.Field[Any], value: Any) -> Any:
    """A field's value as plain YAML: paths as text, mappings as dicts (``sampler.initial``
    in parameter order, as floats, or ``auto``)."""
    if isinstance(value, Path):
        return str(value)
    if spec_of(f).kind == "start_values":
        if value == INITIAL_AUTO:
            return INITIAL_AUTO
        return {n: float(value[n]) for n in PARAM_NAMES if n in value}
    if isinstance(value, Mapping):
        return dict(value)
    return value


_HINTS = get_type_hints(Config)

#: Top-level sections, in the order :meth:`Config.to_mapping` writes them.
SECTIONS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name not in ("source", "created_in")
)

#: The dataclass of each section but ``priors``.
SECTION_TYPES: dict[str, type[Any]] = {
    name: _HINTS[name] for name in SECTIONS if dataclasses.is_dataclass(_HINTS[name])
}

#: Valid keys of each section, in the order the resolved YAML writes them.
KEYS: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in dataclasses.fields(SECTION_TYPES[name]))
    if name in SECTION_TYPES
    else PARAM_NAMES
    for name in SECTIONS
}
