"""Priors of the five parameters, as densities of the log-parameter (the sampler's scale).

The samplers move ``theta = log(value)``. A prior given on the natural scale with density
``p(value)`` has, on the log scale, density ``p(exp(theta)) * exp(theta)`` (the Jacobian);
every :meth:`Prior.logpdf` here already includes it, so samplers just add it to the
log-likelihood.

Config forms (one mapping per parameter, one key naming the family):

``{normal: [m, s]}``       theta ~ N(m, s^2)  (default: N(0, 1), the published prior)
``{lognormal: [m, s]}``    value ~ LogNormal(m, s), i.e. the same as ``normal`` on theta
``{gamma: [shape, rate]}`` value ~ Gamma(shape, rate)  (mean shape / rate)
``{halfnormal: [scale]}``  value ~ |N(0, scale^2)|
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .vocab import PARAM_NAMES

FAMILIES: dict[str, int] = {"normal": 2, "lognormal": 2, "gamma": 2, "halfnormal": 1}


@dataclass(frozen=True)
class Prior:
    """A prior of one parameter; ``logpdf(theta)`` is the log density of ``theta = log(value)``.

    Attributes
    ----------
    family
        One of :data:`FAMILIES`.
    args
        The family's numbers, as in the config.
    """

    family: str
    args: tuple[float, ...]

    def logpdf(self, theta: float) -> float:
        """Log density of the log-parameter ``theta`` (Jacobian included)."""
        f, a = self.family, self.args
        if f in ("normal", "lognormal"):  # identical on the log scale
            m, s = a
            z = (theta - m) / s
            return -0.5 * z * z - math.log(s) - 0.5 * math.log(2 * math.pi)
        value = math.exp(theta)
        if f == "gamma":
            k, rate = a
            # Gamma density of value, times the Jacobian d value / d theta = value
            return k * math.log(rate) - math.lgamma(k) + k * theta - rate * value
        (scale,) = a  # halfnormal
        z = value / scale
        return 0.5 * math.log(2 / math.pi) - math.log(scale) - 0.5 * z * z + theta

    def to_config(self) -> dict[str, list[float]]:
        """The mapping form accepted by :func:`parse_prior`."""
        return {self.family: list(self.args)}


DEFAULT_PRIOR = Prior("normal", (0.0, 1.0))


def joint_logpdf(priors: Sequence[Prior], theta: Iterable[float]) -> float:
    """Log density of independent priors at the log-parameters ``theta`` (Jacobians included).

    Parameters
    ----------
    priors
        One prior per coordinate, in :data:`~hawkes_cli.vocab.PARAM_NAMES` order.
    theta : (d,) float
        Log-parameters, same length as ``priors``.

    Returns
    -------
    float
        ``sum_k priors[k].logpdf(theta[k])``, summed left to right (``-inf``, ``inf`` or ``nan``
        are returned as they come; the caller decides what is outside the support).
    """
    return sum(prior.logpdf(float(v)) for prior, v in zip(priors, theta, strict=True))


def parse_prior(param: str, spec: Any, where: str = "config") -> Prior:
    """Parse one parameter's prior from its config mapping.

    Parameters
    ----------
    param
        Parameter name (one of :data:`~hawkes_cli.vocab.PARAM_NAMES`).
    spec
        ``None`` (default N(0, 1) on the log scale) or a one-key mapping such as
        ``{"gamma": [2.0, 1.0]}``.
    where
        Where the spec came from, for error messages (e.g. the YAML file).

    Raises
    ------
    ConfigError
        Unknown parameter or family, wrong number of numbers, non-positive scales.
    """
    key = f"priors.{param}"
    if param not in PARAM_NAMES:
        raise ConfigError(
            f"{where}: unknown parameter {key!r}; valid names are {', '.join(PARAM_NAMES)}"
        )
    if spec is None:
        return DEFAULT_PRIOR
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ConfigError(
            f"{where}: {key} must be one family mapped to its numbers, e.g. "
            f"{{lognormal: [0, 1]}}; families: {', '.join(FAMILIES)}"
        )
    ((family, args),) = spec.items()
    if family not in FAMILIES:
        raise ConfigError(
            f"{where}: {key}: unknown prior family {family!r}; valid: {', '.join(FAMILIES)}"
        )
    if isinstance(args, (int, float)):
        args = [args]
    want = FAMILIES[family]
    if not isinstance(args, (list, tuple)) or len(args) != want:
        raise ConfigError(f"{where}: {key}.{family} needs {want} number(s), got {args!r}")
    # YAML numbers only: a boolean is not 1, a quoted "1" is text
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args):
        raise ConfigError(
            f"{where}: {key}.{family} values must be numbers (unquoted, not true/false), "
            f"got {args!r}"
        )
    nums = tuple(float(v) for v in args)
    if not all(math.isfinite(v) for v in nums):
        raise ConfigError(f"{where}: {key}.{family} values must be finite, got {args!r}")
    positive = nums[1:] if family in ("normal", "lognormal") else nums
    if any(v <= 0 for v in positive):
        raise ConfigError(f"{where}: {key}.{family}: scale/shape/rate must be > 0, got {args!r}")
    return Prior(family, nums)


def parse_priors(specs: Mapping[str, Any] | None, where: str = "config") -> dict[str, Prior]:
    """Priors of all five parameters (defaults for those not given)."""
    specs = specs or {}
    if not isinstance(specs, Mapping):
        raise ConfigError(f"{where}: 'priors' must be a mapping of parameter -> prior")
    for name in specs:
        if name not in PARAM_NAMES:
            parse_prior(str(name), None, where)  # raises the unknown-parameter error
    return {name: parse_prior(name, specs.get(name), where) for name in PARAM_NAMES}
