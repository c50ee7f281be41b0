"""The log posterior of the five log-parameters: priors plus likelihood, and what a move costs.

The samplers move ``theta = log(value)`` of the parameters of :data:`~hawkes_cli.vocab.PARAM_NAMES`
(in that order, shape ``(5,)``). :class:`LogPosterior` is their ``log_density``: calling it
gives ``log p(data | theta) + log p(theta)`` (priors on the log scale, Jacobians included), or
``-inf`` outside the support without evaluating the likelihood. :meth:`LogPosterior.evaluate`
gives the same value with its two parts (:class:`Density`), which the chain file records.

Cost of a move (DESIGN section 5). With the current state's pair sums cached
(:meth:`LogPosterior.pin`), a proposal that changes only

* ``mu0`` or ``xi0`` costs no pair pass (O(N));
* ``tau_t`` costs the background pass only (O(U^2 + N) on a day lattice of U distinct times);
* ``sigma_x`` or ``sigma_t`` costs the trigger pass, the expensive O(N^2) one.

:attr:`LogPosterior.cheap` (no trigger pass) and :attr:`LogPosterior.expensive` (a trigger pass)
are the coordinate indices of each kind, derived from :data:`PASS_COST`.

The likelihood may be a :class:`~hawkes_cli.engine.Likelihood` or its distributed proxy
(:class:`~hawkes_cli.distributed.DistributedLikelihood`): anything with ``loglik(Params)`` and
``pin(Params)``. :class:`ScaledLikelihood` is a subsample's log-likelihood scaled to stand in
for the full data's (the fast start's mode search, :mod:`hawkes_cli.start`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from .model import Params
from .priors import Prior, joint_logpdf
from .vocab import PARAM_NAMES

log = logging.getLogger(__name__)

__all__ = [
    "CHEAP",
    "EXPENSIVE",
    "PASS_COST",
    "THETA_LIMIT",
    "Density",
    "LikelihoodLike",
    "LogPosterior",
    "ScaledLikelihood",
    "to_params",
    "to_theta",
]

#: The pair pass a change of each parameter alone costs once the current state's pair sums are
#: cached: ``none`` (O(N)), ``background`` (the B pass) or ``trigger`` (the E pass, O(N^2)).
PASS_COST: Mapping[str, str] = {
    "mu0": "none",
    "tau_t": "background",
    "xi0": "none",
    "sigma_x": "trigger",
    "sigma_t": "trigger",
}

#: Coordinates whose change runs no trigger pass: ``mu0``, ``tau_t``, ``xi0`` = (0, 1, 2).
CHEAP: tuple[int, ...] = tuple(i for i, n in enumerate(PARAM_NAMES) if PASS_COST[n] != "trigger")

#: Coordinates whose change runs the trigger pass: ``sigma_x``, ``sigma_t`` = (3, 4).
EXPENSIVE: tuple[int, ...] = tuple(
    i for i, n in enumerate(PARAM_NAMES) if PASS_COST[n] == "trigger"
)

#: ``|theta_k|`` above this is outside the support (``exp`` would near float64's range).
THETA_LIMIT = 700.0


def to_params(theta: Sequence[float] | np.ndarray) -> Params:
    """Natural-scale parameters of the log-parameters ``theta`` (shape ``(5,)``)."""
    values = np.exp(np.asarray(theta, dtype=np.float64)).tolist()
    return Params(**dict(zip(PARAM_NAMES, values, strict=True)))


def to_theta(values: Mapping[str, float]) -> np.ndarray:
    """Log-parameters, shape ``(5,)``, of natural-scale values given by name (e.g.
    :meth:`Params.as_dict` or the config's ``sampler.initial``)."""
    return np.log([values[name] for name in PARAM_NAMES])


class LikelihoodLike(Protocol):
    """What the posterior needs of a likelihood (collective calls when distributed)."""

    def loglik(self, p: Params) -> float:
        """The log-likelihood at ``p``."""
        ...

    def pin(self, p: Params) -> None:
        """Keep the pair sums of ``p`` (the chain's current state) cached."""
        ...


@dataclass(frozen=True)
class ScaledLikelihood:
    """``factor`` times a log-likelihood: a subsample's, scaled by ``N / n`` so that its
    curvature stands in for the full data's (:func:`hawkes_cli.start.find_start`).

    Parameters
    ----------
    loglik_of
        The log-likelihood of the subsample (e.g.
        :meth:`~hawkes_cli.distributed.DistributedLikelihood.subsample_loglik`; collective).
    factor
        ``N / n`` (> 0).
    """

    loglik_of: Callable[[Params], float]
    factor: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"factor must be finite and > 0, got {self.factor!r}")

    def loglik(self, p: Params) -> float:
        """``factor * loglik_of(p)``."""
        return self.factor * float(self.loglik_of(p))

    def pin(self, p: Params) -> None:
        """Nothing to keep (the mode search pins nothing)."""


@dataclass(frozen=True)
class Density:
    """The log posterior at one point and its parts.

    Attributes
    ----------
    log_target
        ``loglik + logprior``; ``-inf`` outside the support or where the log-likelihood is not
        finite.
    loglik
        The log-likelihood; ``nan`` when it was not evaluated (outside the support).
    logprior
        The log prior of ``theta`` (log scale, Jacobians included); ``nan`` when ``theta``
        itself is outside the support (not finite, or some ``|theta_k| > THETA_LIMIT``).
    """

    log_target: float
    loglik: float
    logprior: float

    @property
    def finite(self) -> bool:
        """Whether the point is inside the support (``log_target`` finite)."""
        return math.isfinite(self.log_target)


_OUTSIDE = Density(-math.inf, math.nan, math.nan)


@dataclass(frozen=True, eq=False)
class LogPosterior:
    """``log p(theta | data)`` up to a constant, on the log scale of the parameters.

    Call it (``posterior(theta) -> float``) as a sampler's ``log_density``; every call with
    ``theta`` inside the support evaluates the likelihood once (collective when distributed).

    Parameters
    ----------
    likelihood
        The log-likelihood (:class:`LikelihoodLike`).
    priors
        One prior per coordinate, in :data:`PARAM_NAMES` order (see :meth:`from_mapping`).
    """

    likelihood: LikelihoodLike
    priors: tuple[Prior, ...]

    names: ClassVar[tuple[str, ...]] = PARAM_NAMES
    cheap: ClassVar[tuple[int, ...]] = CHEAP
    """Coordinates a change of which runs no trigger pass (``mu0``, ``tau_t``, ``xi0``)."""
    expensive: ClassVar[tuple[int, ...]] = EXPENSIVE
    """Coordinates a change of which runs the trigger pass (``sigma_x``, ``sigma_t``)."""

    def __post_init__(self) -> None:
        if len(self.priors) != len(PARAM_NAMES):
            raise ValueError(f"need {len(PARAM_NAMES)} priors, got {len(self.priors)}")
        object.__setattr__(self, "priors", tuple(self.priors))

    @classmethod
    def from_mapping(cls, likelihood: LikelihoodLike, priors: Mapping[str, Prior]) -> LogPosterior:
        """Build from priors by name (the config's ``priors`` section)."""
        return cls(likelihood, tuple(priors[name] for name in PARAM_NAMES))

    def evaluate(self, theta: Sequence[float] | np.ndarray) -> Density:
        """The log posterior at ``theta`` and its parts.

        Parameters
        ----------
        theta : (5,) float
            Log-parameters in :data:`PARAM_NAMES` order.

        Returns
        -------
        Density
            Outside the support (``theta`` not finite, ``|theta_k| > THETA_LIMIT``, or a log
            prior that is not finite) ``log_target`` is ``-inf`` and the likelihood is not
            evaluated.
        """
        theta = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(theta)) or np.any(np.abs(theta) > THETA_LIMIT):
            return _OUTSIDE
        lp = joint_logpdf(self.priors, theta)
        if not math.isfinite(lp):
            return Density(-math.inf, math.nan, lp)
        ll = self.likelihood.loglik(to_params(theta))
        return Density(ll + lp if math.isfinite(ll) else -math.inf, ll, lp)

    def __call__(self, theta: Sequence[float] | np.ndarray) -> float:
        """``evaluate(theta).log_target``: the sampler's ``log_density``."""
        return self.evaluate(theta).log_target

    def pin(self, theta: Sequence[float] | np.ndarray) -> None:
        """Keep the pair sums at ``theta`` (the chain's current state) cached while proposals
        come and go (:meth:`hawkes_cli.engine.Likelihood.pin`)."""
        self.likelihood.pin(to_params(theta))
