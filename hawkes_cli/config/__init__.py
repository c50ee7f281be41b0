"""Run configuration: YAML -> frozen dataclasses, validated up front.

A config has eight sections (DESIGN section 4); only ``data.events`` is required, everything
else has a default. An example::

    data:     {events: cases.h5, area: null, counties: null, window_end: null}
    model:    {kind: 1}
    priors:   {sigma_x: {lognormal: [0, 1]}}         # others: N(0, 1) on the log scale
    sampler:  {kind: tiered, iterations: 20000, warmup: 1000, thin: 1, seed: 1,
               resample_every: 0, target_accept: null, initial: auto, initial_scale: 0.1,
               n_cheap: 10, n_expensive: 1, jump_prob: 0.2, start_subsample: 20000}
    chains:   {count: 30, gpus_per_chain: 4, chains_per_node: 2, gpus_per_node: 8}
    engine:   {backend: opencl, precision: float32, device: null, tolerance: 0.05,
               background: auto}
    output:   {run_dir: runs/covid-model1, commit_every: 100}
    slurm:    {partition: gpu, time: "24:00:00", account: null, qos: null, extra: {},
               requeue_budget: 10, signal_seconds: 300}

The keys and their validation are the fields of the section dataclasses in :mod:`.schema`;
their defaults are named in :mod:`hawkes_cli.vocab` (``sampler.warmup`` left out is
``min(1000, iterations // 10)``).

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

Modules: :mod:`.spec` (how a field declares its validation), :mod:`.schema` (the dataclasses,
:data:`SECTIONS`, :data:`KEYS`), :mod:`.slurm_options` (Slurm times and sbatch option names),
:mod:`.reader` (typed getters and error wording), :mod:`.sections` (one section -> its
dataclass) and :mod:`.load` (YAML -> :class:`Config`).
"""

from __future__ import annotations

from .load import config_from_mapping, config_from_yaml_text, load_config
from .schema import (
    INITIAL_AUTO,
    KEYS,
    RUN_ONLY_KEYS,
    SECTIONS,
    ChainsConfig,
    Config,
    DataConfig,
    EngineConfig,
    ModelConfig,
    OutputConfig,
    SamplerConfig,
    SlurmConfig,
    default_warmup,
    draws_digest,
    run_only,
    same_draws,
)
from .slurm_options import slurm_time_seconds

__all__ = [
    "INITIAL_AUTO",
    "KEYS",
    "RUN_ONLY_KEYS",
    "SECTIONS",
    "ChainsConfig",
    "Config",
    "DataConfig",
    "EngineConfig",
    "ModelConfig",
    "OutputConfig",
    "SamplerConfig",
    "SlurmConfig",
    "config_from_mapping",
    "config_from_yaml_text",
    "default_warmup",
    "draws_digest",
    "load_config",
    "run_only",
    "same_draws",
    "slurm_time_seconds",
]
