"""One vocabulary: the domain's names live in hawkes_cli.vocab and everyone else agrees."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from hawkes_cli import vocab
from hawkes_cli.config import EngineConfig, SamplerConfig, schema
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


def test_config_defaults_are_named_in_vocab():
    """Every default of a config key is a vocab name (or None), never a literal in the schema."""
    source = Path(schema.__file__).read_text()
    literals = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "field":
            for kw in node.keywords:
                literal = isinstance(kw.value, ast.Constant) and kw.value.value is not None
                if kw.arg == "default" and literal:
                    literals.append(f"line {kw.value.lineno}: {kw.value.value!r}")
    assert literals == []
    names = {n for n in vars(vocab) if n.startswith("DEFAULT_")}
    defaults = {
        f"{section.__name__}.{f.name}": f.default
        for section in schema.SECTION_TYPES.values()
        for f in dataclasses.fields(section)
        if f.default not in (None, dataclasses.MISSING)
    }
    assert len(defaults) >= 20, defaults  # the walk found the sections
    by_value = {repr(getattr(vocab, n)) for n in names}
    assert {k: v for k, v in defaults.items() if repr(v) not in by_value} == {}
