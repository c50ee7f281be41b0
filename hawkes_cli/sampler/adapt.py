"""Warm-up adaptation shared by the adaptive kernels (``block``, ``tiered``).

The Robbins-Monro step of a global proposal factor, the Welford running covariance of the
states visited while adapting, and a Cholesky factor with growing jitter. Pure functions over
numbers and arrays: no randomness, so a chain's draws depend only on the order of the calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "GAIN_EXPONENT",
    "MAX_LOG_FACTOR",
    "acceptance_probability",
    "adapted_log_factor",
    "jittered_cholesky",
    "welford_update",
]

GAIN_EXPONENT = 0.6
"""Robbins-Monro gain ``(j + 1)^-0.6`` of the ``j``-th adapting step (Andrieu & Thoms 2008)."""

MAX_LOG_FACTOR = math.log(1e6)
"""Bound on ``|log f|`` of an adapted proposal factor ``f``."""


def acceptance_probability(log_new: float, log_old: float) -> float:
    """MH acceptance probability ``min(1, exp(new - old))``, 0 for a non-finite ``log_new``:
    the signal the proposal factors are steered by."""
    if not math.isfinite(log_new):
        return 0.0
    return math.exp(min(log_new - log_old, 0.0))


def adapted_log_factor(factor: float, j: int, alpha: float, target: float) -> float:
    """``log f`` after the ``j``-th adapting step (0-based) of the Robbins-Monro recursion
    ``log f += (j + 1)^-0.6 (alpha - target)``, clamped to ``+-MAX_LOG_FACTOR``.

    Parameters
    ----------
    factor
        The factor ``f`` before the step (> 0).
    j
        Adapting steps taken before this one (in the current phase).
    alpha
        Acceptance probability the step observed (:func:`acceptance_probability`).
    target
        Acceptance rate steered to.
    """
    gain = (j + 1) ** (-GAIN_EXPONENT)
    log_f = math.log(factor) + gain * (alpha - target)
    return min(max(log_f, -MAX_LOG_FACTOR), MAX_LOG_FACTOR)


def welford_update(
    mean: Sequence[float], m2: Sequence[float], x: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Running mean and sum of outer products of deviations after adding state ``x``.

    Parameters
    ----------
    mean, m2
        The running mean (length ``d``) and sum of outer products (``d * d``, row-major) of
        the ``n - 1`` states before ``x`` (ignored when ``n == 1``).
    x : numpy.ndarray, shape (d,)
        The state added.
    n
        Number of states including ``x`` (>= 1).

    Returns
    -------
    mean : numpy.ndarray, shape (d,)
    m2 : numpy.ndarray, shape (d, d)
    """
    d = x.shape[0]
    if n == 1:
        return x.copy(), np.zeros((d, d))
    mean_old = np.asarray(mean, dtype=float)
    delta = x - mean_old
    mean_new = mean_old + delta / n
    return mean_new, np.asarray(m2, dtype=float).reshape(d, d) + np.outer(delta, x - mean_new)


def jittered_cholesky(cov: np.ndarray) -> tuple[np.ndarray | None, float]:
    """Lower Cholesky factor of a symmetric ``cov``, adding ``jitter * I`` until it is PD.

    The jitter starts at ``1e-12`` times the mean diagonal and grows tenfold, 20 tries.

    Returns
    -------
    chol : numpy.ndarray, shape (d, d), or None
        The factor of ``cov + jitter I``; None when no try succeeded.
    jitter : float
        The jitter added (0.0: none was needed).
    """
    n = cov.shape[0]
    base = float(np.mean(np.diag(cov))) or 1.0
    jitter = 0.0
    for _ in range(20):
        try:
            return np.linalg.cholesky(cov + jitter * np.eye(n)), jitter
        except np.linalg.LinAlgError:
            jitter = base * 1e-12 if jitter == 0.0 else jitter * 10.0
    return None, jitter
