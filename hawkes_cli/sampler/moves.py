"""Pieces every MH kernel here uses: argument checks, the MH decision, the AM scaling."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .state import SamplerState

__all__ = ["AM_SCALE", "check_common", "check_init", "check_state", "mh_accept"]

AM_SCALE = 2.38**2
"""Optimal random-walk scaling numerator (Roberts, Gelman & Gilks 1997): ``2.38^2 / d``."""


def check_init(dim: int, theta0: Sequence[float], log_target: float) -> tuple[float, ...]:
    """``theta0`` as a tuple of ``dim`` floats; ValueError if it or ``log_target`` is unusable."""
    theta = tuple(float(x) for x in np.asarray(theta0, dtype=float).reshape(-1))
    if len(theta) != dim:
        raise ValueError(f"theta0 has {len(theta)} coordinates, the sampler expects {dim}")
    if not all(math.isfinite(x) for x in theta):
        raise ValueError(f"theta0 must be finite, got {theta}")
    if not math.isfinite(float(log_target)):
        raise ValueError(
            f"the log density at the starting point is {log_target!r}; start the chain at a "
            "point where the prior and likelihood are finite"
        )
    return theta


def check_state(state: SamplerState, kind: str, dim: int) -> None:
    """ValueError for a state of another kind or dimension than the sampler's."""
    if state.kind != kind:
        raise ValueError(f"a {state.kind} sampler state was given to the {kind} sampler")
    if state.dim != dim:
        raise ValueError(f"sampler state has {state.dim} coordinates, the sampler expects {dim}")


def mh_accept(log_new: float, log_old: float, u: float) -> bool:
    """MH decision ``u < exp(new - old)``; ``-inf``/``nan`` ``log_new`` is rejected."""
    if not math.isfinite(log_new):
        return False
    diff = log_new - log_old
    return diff >= 0.0 or u < math.exp(diff)


def check_common(dim: int, target_accept: float, initial_scale: float) -> None:
    """ValueError for a dimension, target acceptance or initial scale no sampler can use."""
    if int(dim) != dim or dim < 1:
        raise ValueError(f"sampler dimension must be a positive integer, got {dim!r}")
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be in (0, 1), got {target_accept!r}")
    if not (math.isfinite(initial_scale) and initial_scale > 0):
        raise ValueError(f"initial_scale must be finite and > 0, got {initial_scale!r}")
