"""Model parameters: names, validation and parsing.

The five parameters of DESIGN section 2, all strictly positive:

``mu0``      background weight (dimensionless)
``tau_t``    background temporal lengthscale (time units, normally days)
``xi0``      self-excitation weight (dimensionless)
``sigma_x``  trigger spatial lengthscale (coordinate units)
``sigma_t``  trigger temporal lengthscale (time units)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from .errors import UsageError
from .vocab import MODELS, PARAM_NAMES


@dataclass(frozen=True)
class Params:
    """One point in parameter space (natural scale, all > 0)."""

    mu0: float
    tau_t: float
    xi0: float
    sigma_x: float
    sigma_t: float

    def __post_init__(self) -> None:
        for name in PARAM_NAMES:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise UsageError(f"parameter {name} must be a finite number > 0, got {value!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, float]) -> Params:
        """Build from a name -> value mapping; unknown or missing names are errors."""
        unknown = sorted(set(values) - set(PARAM_NAMES))
        if unknown:
            raise UsageError(
                f"unknown parameter(s) {', '.join(unknown)}; valid names are "
                f"{', '.join(PARAM_NAMES)}"
            )
        missing = [n for n in PARAM_NAMES if n not in values]
        if missing:
            raise UsageError(
                f"missing parameter(s) {', '.join(missing)}; give each of "
                f"{', '.join(PARAM_NAMES)} (e.g. --param {missing[0]}=1.0)"
            )
        return cls(**{n: float(values[n]) for n in PARAM_NAMES})

    def as_dict(self) -> dict[str, float]:
        """Name -> value, in :data:`PARAM_NAMES` order."""
        return asdict(self)


def parse_param_items(items: Iterable[str]) -> Params:
    """Parse ``NAME=VALUE`` strings (from ``--param``) into :class:`Params`.

    Raises
    ------
    UsageError
        For a malformed item, a non-numeric value, a repeated, unknown or missing name.
    """
    values: dict[str, float] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE, e.g. --param sigma_x=0.08")
        if name in values:
            raise UsageError(f"--param {name} given twice")
        try:
            values[name] = float(text)
        except ValueError:
            raise UsageError(f"--param {name}={text!r}: value is not a number") from None
    return Params.from_mapping(values)


def check_model(model: int) -> int:
    """Return ``model`` if it is 1 or 2, else raise :class:`UsageError`."""
    if model not in MODELS:
        raise UsageError(f"model must be 1 or 2, got {model!r}")
    return model
