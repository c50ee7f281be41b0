"""Run configuration: YAML -> frozen dataclasses, validated up front.

A config has eight sections (DESIGN section 4); only ``data.events`` is required, everything
else has a default::

    data:     {events: cases.h5, area: null, counties: null, window_end: null}
    model:    {kind: 1}
    priors:   {sigma_x: {lognormal: [0, 1]}}         # others: N(0, 1) on the log scale
    sampler:  {kind: univariate, iterations: 20000, warmup: 1000, thin: 1, seed: 1,
               resample_every: 0, target_accept: null, initial: {}, initial_scale: 0.1}
    chains:   {count: 30, gpus_per_chain: 4, chains_per_node: 2, gpus_per_node: 8}
    engine:   {backend: opencl, precision: float32, device: null, tolerance: 1.0e-6,
               background: auto}
    output:   {run_dir: runs/covid-m1, commit_every: 100}
    slurm:    {partition: gpu, time: "24:00:00", account: null, qos: null, extra: {},
               requeue_budget: 10, signal_seconds: 300}

Rules:

- Relative paths are resolved against the directory of the YAML file (never the current
  directory); ``~`` is expanded. Paths are made absolute without touching the file system
  (files are not checked for existence here; ``hawkes-run validate`` does that).
- A key given as ``null`` takes its default (``data.events`` has none).
- Unknown sections or keys are errors that list the valid ones and suggest the closest.
- Types are strict: a boolean is not an integer, an integer is accepted for a float, a
  quoted number is a string and rejected. Duplicate keys in the YAML are errors.
- Every failure is a :class:`~hawkes_cli.errors.ConfigError` naming the file, the dotted key
  and what is expected.

:meth:`Config.to_yaml` writes the fully resolved config (all defaults filled in, absolute
paths); reading it back gives an equal :class:`Config` with the same :attr:`Config.sha256`.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .model import MODELS, PARAM_NAMES
from .priors import Prior, parse_priors

#: Default ``engine.tolerance``: the truncated trigger with a log-likelihood within 1e-6 relative
#: of the exact pair sum at every evaluation (its cut-off is part of the checkpoint, so resumed
#: chains are bit for bit); 0 asks for the exact pair sum.
DEFAULT_TOLERANCE = 1e-6

log = logging.getLogger(__name__)

SECTIONS: tuple[str, ...] = (
    "data",
    "model",
    "priors",
    "sampler",
    "chains",
    "engine",
    "output",
    "slurm",
)
"""Top-level sections, in the order :meth:`Config.to_mapping` writes them."""

SAMPLER_KINDS: tuple[str, ...] = ("univariate", "block")
BACKENDS: tuple[str, ...] = ("opencl", "reference")
PRECISIONS: tuple[str, ...] = ("float32", "float64")
BACKGROUNDS: tuple[str, ...] = ("auto", "pairs")  # as hawkes_cli.engine.base.BACKGROUNDS

KEYS: dict[str, tuple[str, ...]] = {
    "data": ("events", "area", "counties", "window_end"),
    "model": ("kind",),
    "priors": PARAM_NAMES,
    "sampler": (
        "kind",
        "iterations",
        "warmup",
        "thin",
        "seed",
        "resample_every",
        "target_accept",
        "initial",
        "initial_scale",
    ),
    "chains": ("count", "gpus_per_chain", "chains_per_node", "gpus_per_node"),
    "engine": ("backend", "precision", "device", "tolerance", "background"),
    "output": ("run_dir", "commit_every"),
    "slurm": (
        "partition",
        "time",
        "account",
        "qos",
        "extra",
        "requeue_budget",
        "signal_seconds",
    ),
}
"""Valid keys of each section."""

MAX_SEED = 2**63 - 1  # seeds are stored as HDF5 int64 attributes
MAX_SIGNAL_SECONDS = 65535  # Slurm's limit for --signal=...@sig_time
# sbatch options that have their own key in the slurm section
_SLURM_OWN_OPTIONS = {
    "partition": "partition",
    "time": "time",
    "account": "account",
    "qos": "qos",
    "signal": "signal_seconds",
}
_SBATCH_OPTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# Slurm --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_SLURM_TIME_RE = re.compile(
    r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$"
)


def slurm_time_seconds(text: str) -> int:
    """Seconds of a Slurm ``--time`` value.

    Parameters
    ----------
    text
        ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM`` or ``D-HH:MM:SS`` (a bare number
        is minutes, as in Slurm). Minutes and seconds after a colon must be < 60.

    Returns
    -------
    int
        The time limit in seconds.

    Raises
    ------
    ValueError
        If ``text`` is not one of these forms.
    """
    m = _SLURM_TIME_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a Slurm time: {text!r}")
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "days" in g:
        minutes, seconds = g.get("dm", 0), g.get("ds", 0)
        if minutes >= 60 or seconds >= 60:
            raise ValueError(f"minutes and seconds must be < 60 in {text!r}")
        return ((g["days"] * 24 + g["dh"]) * 60 + minutes) * 60 + seconds
    if "c" in g:  # H:M:S
        if g["b"] >= 60 or g["c"] >= 60:
            raise ValueError(f"minutes and seconds must be < 60 in {text!r}")
        return (g["a"] * 60 + g["b"]) * 60 + g["c"]
    if "b" in g:  # M:S
        if g["b"] >= 60:
            raise ValueError(f"seconds must be < 60 in {text!r}")
        return g["a"] * 60 + g["b"]
    return g["a"] * 60  # minutes


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class DataConfig:
    """Input data.

    Attributes
    ----------
    events
        Events file (CSV or HDF5), absolute.
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

    events: Path
    area: float | None = None
    counties: Path | None = None
    window_end: float | None = None


@dataclass(frozen=True)
class ModelConfig:
    """Model choice.

    Attributes
    ----------
    kind
        1 (constant trigger lengthscale) or 2 (lengthscale ``sigma_x / sqrt(density)``).
    """

    kind: int = 1


@dataclass(frozen=True)
class SamplerConfig:
    """MCMC settings (DESIGN section 5).

    Attributes
    ----------
    kind
        ``"univariate"`` (random-scan single-parameter random walk) or ``"block"`` (adaptive
        Metropolis on all five).
    iterations
        Total iterations per chain, warm-up included (>= 1).
    warmup
        Warm-up iterations (adaptation on), ``0 <= warmup < iterations``.
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
        Starting values (natural scale, > 0) of some or all parameters; others use the
        sampler's default.
    initial_scale
        Initial proposal standard deviation on the log scale (> 0).
    """

    kind: str = "univariate"
    iterations: int = 20000
    warmup: int = 1000
    thin: int = 1
    seed: int = 1
    resample_every: int = 0
    target_accept: float | None = None
    initial: Mapping[str, float] = field(default_factory=dict)
    initial_scale: float = 0.1


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

    count: int = 4
    gpus_per_chain: int = 1
    chains_per_node: int = 1
    gpus_per_node: int = 8


@dataclass(frozen=True)
class EngineConfig:
    """Likelihood engine.

    Attributes
    ----------
    backend
        ``"opencl"`` or ``"reference"`` (numpy, float64).
    precision
        Working precision of the OpenCL kernels, ``"float32"`` or ``"float64"``.
    device
        OpenCL device spec (``"P:D"``, ``"gpu"``, ``"cpu"``, a name fragment) or ``None``.
    tolerance
        Relative error allowed in the log-likelihood from truncating the trigger, in [0, 1):
        0 is the exact pair sum; ``T > 0`` skips pair terms that are provably negligible and
        guarantees ``|ell~ - ell| <= T |ell~|`` at every evaluation (see
        :mod:`hawkes_cli.engine.truncated`; the reference backend is always exact).
    background
        ``"auto"``: the background once per distinct time (exact; cheap on a day lattice);
        ``"pairs"``: force the plain pair sum over all events (OpenCL; to check the former).
    """

    backend: str = "opencl"
    precision: str = "float32"
    device: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    background: str = "auto"


@dataclass(frozen=True)
class OutputConfig:
    """Where a run writes.

    Attributes
    ----------
    run_dir
        Run directory, absolute (default ``runs/<yaml stem>`` next to the YAML file).
    commit_every
        Iterations between commits of draws and checkpoint (>= 1).
    """

    run_dir: Path
    commit_every: int = 100


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
        Further sbatch options, option name (without ``--``) -> value as text, e.g.
        ``{"constraint": "a100"}``.
    requeue_budget
        How many times a job may requeue itself after preemption or its time limit (>= 0).
    signal_seconds
        Seconds before the time limit at which Slurm sends the warning signal (>= 1, less than
        the time limit).
    """

    partition: str | None = None
    time: str = "24:00:00"
    account: str | None = None
    qos: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    requeue_budget: int = 10
    signal_seconds: int = 300

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
        The sections; ``priors`` maps every name of :data:`~hawkes_cli.model.PARAM_NAMES` to
        its :class:`~hawkes_cli.priors.Prior`.
    source
        The YAML file it came from, or ``None``. Not part of equality or of :attr:`sha256`.
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

    def to_mapping(self) -> dict[str, Any]:
        """The fully resolved config in the YAML shape (plain dicts, lists, str, numbers)."""
        d, s, c, e, o, sl = (
            self.data,
            self.sampler,
            self.chains,
            self.engine,
            self.output,
            self.slurm,
        )
        return {
            "data": {
                "events": str(d.events),
                "area": d.area,
                "counties": None if d.counties is None else str(d.counties),
                "window_end": d.window_end,
            },
            "model": {"kind": self.model.kind},
            "priors": {name: self.priors[name].to_config() for name in PARAM_NAMES},
            "sampler": {
                "kind": s.kind,
                "iterations": s.iterations,
                "warmup": s.warmup,
                "thin": s.thin,
                "seed": s.seed,
                "resample_every": s.resample_every,
                "target_accept": s.target_accept,
                "initial": {n: float(s.initial[n]) for n in PARAM_NAMES if n in s.initial},
                "initial_scale": s.initial_scale,
            },
            "chains": {
                "count": c.count,
                "gpus_per_chain": c.gpus_per_chain,
                "chains_per_node": c.chains_per_node,
                "gpus_per_node": c.gpus_per_node,
            },
            "engine": {
                "backend": e.backend,
                "precision": e.precision,
                "device": e.device,
                "tolerance": e.tolerance,
                "background": e.background,
            },
            "output": {"run_dir": str(o.run_dir), "commit_every": o.commit_every},
            "slurm": {
                "partition": sl.partition,
                "time": sl.time,
                "account": sl.account,
                "qos": sl.qos,
                "extra": dict(sl.extra),
                "requeue_budget": sl.requeue_budget,
                "signal_seconds": sl.signal_seconds,
            },
        }

    def to_yaml(self) -> str:
        """The resolved config as YAML (``yaml.safe_dump``, sections in order)."""
        return yaml.safe_dump(self.to_mapping(), sort_keys=False)

    @property
    def sha256(self) -> str:
        """SHA-256 hex digest of :meth:`to_yaml`: equal for configs that resolve the same."""
        return hashlib.sha256(self.to_yaml().encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- validation

_MISSING = object()


def _describe(value: Any) -> str:
    """A value and its YAML type, for error messages."""
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return f"{text} (a string)"
        return (
            f"{text} (a string; numbers go unquoted, and YAML reads an exponent as a number "
            "only with a dot and a sign: 1.0e+5, not 1e5)"
        )
    if isinstance(value, int):
        return f"{text} (an integer)"
    if isinstance(value, float):
        return f"{text} (a number)"
    if isinstance(value, Mapping):
        return f"{text} (a mapping)"
    if isinstance(value, (list, tuple)):
        return f"{text} (a list)"
    return f"{text} (a {type(value).__name__})"


def _suggest(name: Any, valid: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Section:
    """One section's raw mapping, with typed, range-checked getters."""

    def __init__(self, raw: Any, name: str, where: str) -> None:
        self.name, self.where = name, where
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"{where}: section {name!r} must be a mapping of key: value, "
                f"got {_describe(raw)}; valid keys: {', '.join(KEYS[name])}"
            )
        for key in raw:
            if key not in KEYS[name]:
                raise ConfigError(
                    f"{where}: unknown key '{name}.{key}' in section {name!r}; valid keys: "
                    f"{', '.join(KEYS[name])}{_suggest(key, KEYS[name])}"
                )
        self.raw = raw

    def error(self, key: str, expected: str, value: Any = _MISSING) -> ConfigError:
        got = "" if value is _MISSING else f", got {_describe(value)}"
        return ConfigError(f"{self.where}: {self.name}.{key}: expected {expected}{got}")

    def get(self, key: str) -> Any:
        """The raw value, ``None`` when absent or null."""
        return self.raw.get(key)

    def integer(
        self, key: str, default: int, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self.get(key)
        if value is None:
            return default
        if minimum is not None and maximum is not None:
            expected = f"an integer in [{minimum}, {maximum}]"
        elif minimum is not None:
            expected = f"an integer >= {minimum}"
        else:
            expected = "an integer"
        if not _is_int(value):
            raise self.error(key, expected, value)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise self.error(key, expected, value)
        return int(value)

    def number(
        self,
        key: str,
        default: float | None,
        *,
        gt: float | None = None,
        lt: float | None = None,
    ) -> float | None:
        value = self.get(key)
        if value is None:
            return default
        if gt is not None and lt is not None:
            expected = f"a number in ({gt:g}, {lt:g})"
        elif gt is not None:
            expected = f"a number > {gt:g}"
        else:
            expected = "a finite number"
        if not _is_number(value) or not math.isfinite(value):
            raise self.error(key, expected, value)
        if (gt is not None and value <= gt) or (lt is not None and value >= lt):
            raise self.error(key, expected, value)
        return float(value)

    def string(self, key: str, default: str | None, *, hint: str = "") -> str | None:
        value = self.get(key)
        if value is None:
            return default
        expected = f"a non-empty string{hint}"
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, expected, value)
        if "\n" in value or "\r" in value:
            raise self.error(key, "a single line of text", value)
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(
                f"{self.where}: {self.name}.{key}: expected one of {', '.join(choices)}, "
                f"got {_describe(value)}{_suggest(value, choices)}"
            )
        return value

    def path(self, key: str, base_dir: Path) -> Path | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value.strip():
            raise self.error(
                key, "a file path (absolute, or relative to the YAML file's directory)", value
            )
        return _resolve_path(base_dir, value)


def _resolve_path(base_dir: Path, value: str) -> Path:
    """``value`` made absolute against ``base_dir`` (``~`` expanded, no file-system access)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = base_dir / p
    return Path(os.path.normpath(p))


def _data(raw: Any, where: str, base_dir: Path) -> DataConfig:
    sec = _Section(raw, "data", where)
    events = sec.path("events", base_dir)
    if events is None:
        raise ConfigError(
            f"{where}: data.events: required; give the events file (CSV or HDF5), absolute or "
            "relative to the YAML file's directory"
        )
    return DataConfig(
        events=events,
        area=sec.number("area", None, gt=0),
        counties=sec.path("counties", base_dir),
        window_end=sec.number("window_end", None, gt=0),
    )


def _model(raw: Any, where: str) -> ModelConfig:
    sec = _Section(raw, "model", where)
    kind = sec.get("kind")
    if kind is None:
        return ModelConfig()
    if not _is_int(kind) or kind not in MODELS:
        raise sec.error("kind", f"one of {', '.join(map(str, MODELS))}", kind)
    return ModelConfig(kind=int(kind))


def _priors(raw: Any, where: str) -> dict[str, Prior]:
    if raw is not None and isinstance(raw, Mapping):
        _Section(raw, "priors", where)  # unknown parameter names, with a suggestion
    return parse_priors(raw, where)


def _initial(sec: _Section) -> dict[str, float]:
    raw = sec.get("initial")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise sec.error("initial", "a mapping of parameter name -> starting value", raw)
    out: dict[str, float] = {}
    for name, value in raw.items():
        if name not in PARAM_NAMES:
            raise ConfigError(
                f"{sec.where}: unknown parameter 'sampler.initial.{name}'; valid names: "
                f"{', '.join(PARAM_NAMES)}{_suggest(name, PARAM_NAMES)}"
            )
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise sec.error(f"initial.{name}", "a number > 0 (natural scale)", value)
        out[name] = float(value)
    return {n: out[n] for n in PARAM_NAMES if n in out}


def _sampler(raw: Any, where: str) -> SamplerConfig:
    sec = _Section(raw, "sampler", where)
    iterations = sec.integer("iterations", SamplerConfig.iterations, minimum=1)
    warmup = sec.integer("warmup", min(1000, iterations // 10), minimum=0)
    if warmup >= iterations:
        raise sec.error(
            "warmup",
            f"an integer >= 0 and < sampler.iterations ({iterations}; iterations count the "
            "warm-up too)",
            warmup,
        )
    initial_scale = sec.number("initial_scale", 0.1, gt=0)
    assert initial_scale is not None  # has a default
    return SamplerConfig(
        kind=sec.choice("kind", SamplerConfig.kind, SAMPLER_KINDS),
        iterations=iterations,
        warmup=warmup,
        thin=sec.integer("thin", 1, minimum=1),
        seed=sec.integer("seed", 1, minimum=0, maximum=MAX_SEED),
        resample_every=sec.integer("resample_every", 0, minimum=0),
        target_accept=sec.number("target_accept", None, gt=0, lt=1),
        initial=_initial(sec),
        initial_scale=initial_scale,
    )


def _chains(raw: Any, where: str) -> ChainsConfig:
    sec = _Section(raw, "chains", where)
    cfg = ChainsConfig(
        count=sec.integer("count", 4, minimum=1),
        gpus_per_chain=sec.integer("gpus_per_chain", 1, minimum=1),
        chains_per_node=sec.integer("chains_per_node", 1, minimum=1),
        gpus_per_node=sec.integer("gpus_per_node", 8, minimum=1),
    )
    need = cfg.chains_per_node * cfg.gpus_per_chain
    if need > cfg.gpus_per_node:
        if cfg.gpus_per_chain > cfg.gpus_per_node:
            advice = (
                f"a chain runs within one node, so chains.gpus_per_chain must be at most "
                f"{cfg.gpus_per_node}"
            )
        else:
            advice = (
                f"lower chains.chains_per_node to at most {cfg.gpus_per_node // cfg.gpus_per_chain}"
            )
        raise ConfigError(
            f"{where}: chains: impossible placement: chains.chains_per_node "
            f"({cfg.chains_per_node}) * chains.gpus_per_chain ({cfg.gpus_per_chain}) = {need} "
            f"GPUs per node, more than chains.gpus_per_node ({cfg.gpus_per_node}); {advice}"
        )
    return cfg


def _engine(raw: Any, where: str) -> EngineConfig:
    sec = _Section(raw, "engine", where)
    return EngineConfig(
        backend=sec.choice("backend", "opencl", BACKENDS),
        precision=sec.choice("precision", "float32", PRECISIONS),
        device=sec.string(
            "device", None, hint=' such as "0:1", "gpu" or a name fragment (quote it)'
        ),
        tolerance=_tolerance(sec),
        background=sec.choice("background", "auto", BACKGROUNDS),
    )


def _tolerance(sec: _Section) -> float:
    value = sec.get("tolerance")
    if value is None:
        return DEFAULT_TOLERANCE
    if not _is_number(value) or not math.isfinite(value) or not 0.0 <= value < 1.0:
        raise sec.error("tolerance", "a number in [0, 1) (0: exact pair sum; e.g. 1e-6)", value)
    return float(value)


def _output(raw: Any, where: str, base_dir: Path, stem: str) -> OutputConfig:
    sec = _Section(raw, "output", where)
    run_dir = sec.path("run_dir", base_dir)
    return OutputConfig(
        run_dir=run_dir if run_dir is not None else _resolve_path(base_dir, f"runs/{stem}"),
        commit_every=sec.integer("commit_every", 100, minimum=1),
    )


def _slurm(raw: Any, where: str) -> SlurmConfig:
    sec = _Section(raw, "slurm", where)
    time_value = sec.get("time")
    if time_value is None:
        time_text = SlurmConfig.time
    else:
        expected = (
            'a quoted Slurm time such as "24:00:00", "1-12:00:00" or "90" (minutes), > 0 '
            "(unquoted, YAML reads 24:00:00 as the number 86400)"
        )
        if not isinstance(time_value, str):
            raise sec.error("time", expected, time_value)
        try:
            seconds = slurm_time_seconds(time_value)
        except ValueError:
            raise sec.error("time", expected, time_value) from None
        if seconds <= 0:
            raise sec.error("time", expected, time_value)
        time_text = time_value.strip()
    signal_seconds = sec.integer("signal_seconds", 300, minimum=1, maximum=MAX_SIGNAL_SECONDS)
    limit = slurm_time_seconds(time_text)
    if signal_seconds >= limit:
        raise sec.error(
            "signal_seconds",
            f"fewer seconds than the time limit slurm.time ({time_text!r} = {limit} s)",
            signal_seconds,
        )
    return SlurmConfig(
        partition=sec.string("partition", None),
        time=time_text,
        account=sec.string("account", None),
        qos=sec.string("qos", None),
        extra=_slurm_extra(sec),
        requeue_budget=sec.integer("requeue_budget", 10, minimum=0),
        signal_seconds=signal_seconds,
    )


def _slurm_extra(sec: _Section) -> dict[str, str]:
    raw = sec.get("extra")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise sec.error(
            "extra", "a mapping of sbatch option -> value, e.g. {constraint: a100}", raw
        )
    out: dict[str, str] = {}
    for option, value in raw.items():
        key = f"extra.{option}"
        if not isinstance(option, str) or not _SBATCH_OPTION_RE.match(option):
            raise ConfigError(
                f"{sec.where}: slurm.{key}: expected an sbatch long option name without the "
                "leading '--' (letters, digits, '-', '_'), e.g. constraint"
            )
        if option in _SLURM_OWN_OPTIONS:
            raise ConfigError(
                f"{sec.where}: slurm.{key}: use slurm.{_SLURM_OWN_OPTIONS[option]} instead of "
                "slurm.extra for this option"
            )
        if not (isinstance(value, str) or _is_number(value)):
            raise sec.error(key, "a string or a number", value)
        text = str(value)
        if "\n" in text or "\r" in text:
            raise sec.error(key, "a single line of text", value)
        out[option] = text
    return out


# --------------------------------------------------------------------------- entry points


def config_from_mapping(
    mapping: Mapping[str, Any],
    *,
    base_dir: Path,
    where: str,
    source: Path | None = None,
) -> Config:
    """Validate a parsed config and fill in every default.

    Parameters
    ----------
    mapping
        The top-level mapping (sections -> mappings), as read from YAML.
    base_dir
        Directory that relative paths are resolved against (made absolute against the
        current directory if it is relative).
    where
        Name of the config's origin for error messages, normally the YAML path.
    source
        The YAML file, recorded in :attr:`Config.source`; its stem names the default run
        directory (``runs/<stem>``). Without it, the stem of ``where`` is used.

    Returns
    -------
    Config

    Raises
    ------
    ConfigError
        For the first problem found, naming ``where`` and the dotted key.
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(
            f"{where}: the top level must be a mapping of sections ({', '.join(SECTIONS)}), "
            f"got {_describe(mapping)}"
        )
    for name in mapping:
        if name not in SECTIONS:
            raise ConfigError(
                f"{where}: unknown section {name!r}; valid sections: {', '.join(SECTIONS)}"
                f"{_suggest(name, SECTIONS)}"
            )
    base_dir = Path(base_dir).expanduser().absolute()
    stem = source.stem if source is not None else (Path(where).stem or "run")
    if "data" not in mapping or mapping["data"] is None:
        raise ConfigError(
            f"{where}: data.events: required; add a 'data' section with the events file, e.g. "
            "data: {events: cases.h5}"
        )
    return Config(
        data=_data(mapping["data"], where, base_dir),
        model=_model(mapping.get("model"), where),
        priors=_priors(mapping.get("priors"), where),
        sampler=_sampler(mapping.get("sampler"), where),
        chains=_chains(mapping.get("chains"), where),
        engine=_engine(mapping.get("engine"), where),
        output=_output(mapping.get("output"), where, base_dir, stem),
        slurm=_slurm(mapping.get("slurm"), where),
        source=source,
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key repeated in one mapping."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = key_node.value
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def config_from_yaml_text(
    text: str, *, base_dir: Path, where: str, source: Path | None = None
) -> Config:
    """Parse and validate YAML text; reads back :meth:`Config.to_yaml` to an equal config.

    Parameters
    ----------
    text
        The YAML document.
    base_dir, where, source
        As in :func:`config_from_mapping`.

    Raises
    ------
    ConfigError
        On a YAML syntax error (with its line and column), an empty document, or any
        validation failure.
    """
    try:
        mapping = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{where}: YAML syntax error{at}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: YAML syntax error: {exc}") from None
    if mapping is None:
        raise ConfigError(
            f"{where}: the config is empty; it needs at least data.events, e.g. "
            "data: {events: cases.h5}"
        )
    return config_from_mapping(mapping, base_dir=base_dir, where=where, source=source)


def load_config(path: str | Path) -> Config:
    """Read, validate and resolve a YAML config file.

    Parameters
    ----------
    path
        The YAML file. Relative paths inside it are resolved against its directory.

    Returns
    -------
    Config
        With :attr:`Config.source` set to the file's absolute path.

    Raises
    ------
    ConfigError
        If the file is missing or unreadable, or its content is invalid.
    """
    where = str(path)
    file = Path(path).expanduser().absolute()
    if not file.exists():
        raise ConfigError(f"{where}: config file not found (looked for {file})")
    if file.is_dir():
        raise ConfigError(f"{where}: is a directory, expected a YAML config file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read config file: {exc.strerror or exc}") from None
    config = config_from_yaml_text(text, base_dir=file.parent, where=where, source=file)
    log.debug("loaded config %s (sha256 %s)", file, config.sha256)
    return config
