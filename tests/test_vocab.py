"""One vocabulary: the domain's names live in hawkes_cli.vocab and everyone else agrees."""

from __future__ import annotations

from hawkes_cli import vocab
from hawkes_cli.config import Config, EngineConfig, SamplerConfig
from hawkes_cli.counties import REGIONS
from hawkes_cli.errors import Interrupted
from hawkes_cli.model import PARAM_NAMES
from hawkes_cli.prep.columns import COUNT_SETS


def test_defaults_are_among_their_choices():
    assert vocab.DEFAULT_SAMPLER in vocab.SAMPLER_KINDS
    assert vocab.DEFAULT_ENGINE in vocab.ENGINES
    assert vocab.DEFAULT_PRECISION in vocab.PRECISIONS
    assert vocab.DEFAULT_BACKGROUND in vocab.BACKGROUNDS


def test_modules_use_the_vocabulary():
    assert PARAM_NAMES is vocab.PARAM_NAMES
    assert tuple(COUNT_SETS) == vocab.COUNTS
    assert tuple(REGIONS) == vocab.REGION_NAMES
    assert Interrupted.exit_code == vocab.EXIT_STOPPED
    engine, sampler = EngineConfig(), SamplerConfig()
    assert (engine.backend, engine.precision, engine.background, engine.tolerance) == (
        vocab.DEFAULT_ENGINE,
        vocab.DEFAULT_PRECISION,
        vocab.DEFAULT_BACKGROUND,
        vocab.DEFAULT_TOLERANCE,
    )
    assert sampler.kind == vocab.DEFAULT_SAMPLER
    assert Config.__dataclass_fields__  # the config is built from dataclass fields
