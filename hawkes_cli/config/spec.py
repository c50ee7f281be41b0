"""How one config key is validated, carried by its dataclass field.

Each field of a section dataclass (:mod:`hawkes_cli.config.schema`) carries its default and,
in ``field(metadata=...)``, a :class:`KeySpec` made by one of the constructors below.
The key's name, default, validation and place in the resolved YAML then all come from that one
field: :data:`~hawkes_cli.config.schema.KEYS` and :meth:`Config.to_mapping` list the fields,
and :mod:`hawkes_cli.config.sections` reads each key by its spec's ``kind``.

Kinds: ``integer``, ``number`` (an integer is accepted), ``choice``, ``string`` (one line),
``path`` (resolved against the YAML file's directory), and three keys with their own reader:
``start_values`` (``sampler.initial``: ``auto`` or starting values by parameter),
``sbatch_options`` (``slurm.extra``) and ``slurm_time`` (``slurm.time``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

#: Metadata key of a field's :class:`KeySpec`.
SPEC = "spec"


@dataclass(frozen=True)
class KeySpec:
    """Validation of one config key.

    Attributes
    ----------
    kind
        How the value is read (see the module docstring).
    minimum, maximum
        Inclusive bounds of an ``integer``.
    gt, ge, lt, le
        Bounds of a ``number``: greater than, greater or equal, less than, less or equal.
    choices
        Valid values of a ``choice`` (strings, or integers such as the model kinds).
    hint
        Text appended to what is expected in an error message.
    """

    kind: str
    minimum: int | None = None
    maximum: int | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    choices: tuple[Any, ...] = ()
    hint: str = ""


def _meta(spec: KeySpec) -> dict[str, KeySpec]:
    return {SPEC: spec}


def integer(*, minimum: int | None = None, maximum: int | None = None) -> dict[str, KeySpec]:
    """An integer key (a boolean is not an integer) within ``[minimum, maximum]``."""
    return _meta(KeySpec("integer", minimum=minimum, maximum=maximum))


def number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    hint: str = "",
) -> dict[str, KeySpec]:
    """A finite number key (an integer is accepted and made a float) within the bounds."""
    return _meta(KeySpec("number", gt=gt, ge=ge, lt=lt, le=le, hint=hint))


def choice(choices: tuple[Any, ...]) -> dict[str, KeySpec]:
    """A key that takes one of ``choices``."""
    return _meta(KeySpec("choice", choices=choices))


def string(*, hint: str = "") -> dict[str, KeySpec]:
    """A non-empty, single-line string key."""
    return _meta(KeySpec("string", hint=hint))


def path() -> dict[str, KeySpec]:
    """A file-path key, resolved against the YAML file's directory."""
    return _meta(KeySpec("path"))


def own_reader(kind: str) -> dict[str, KeySpec]:
    """A key with its own reader: ``start_values``, ``sbatch_options`` or ``slurm_time``."""
    return _meta(KeySpec(kind))


def spec_of(f: dataclasses.Field[Any]) -> KeySpec:
    """The :class:`KeySpec` of a section field."""
    return f.metadata[SPEC]


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (a fresh one for a factory), ``None`` where it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None
