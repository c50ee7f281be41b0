"""The fast start's curvature: a finite-difference Hessian and gradient, and a regularised
covariance (no posterior sd above ``max_sd``)."""

from __future__ import annotations

import math

import numpy as np

from .search import Counted

__all__ = ["fd_curvature", "regularised_cov"]


def fd_curvature(
    f: Counted, x: np.ndarray, f0: float, h0: np.ndarray, drop: float, max_sd: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Central-difference gradient and Hessian of ``f`` at ``x`` (value ``f0``).

    Each coordinate's step is resized (at most 4 rounds) until the mean drop
    ``f0 - (f(x+h) + f(x-h)) / 2`` is within a factor 4 of ``drop``. Non-finite cross terms
    are set to 0. Raises :class:`BudgetExceeded` when ``f``'s budget runs out.

    Returns
    -------
    grad, hess, h
    """
    d = len(x)
    h = np.clip(np.asarray(h0, dtype=float), 1e-8, max_sd)
    fp = np.empty(d)
    fm = np.empty(d)
    eye = np.eye(d)
    for i in range(d):
        for _ in range(4):
            fp[i] = f(x + h[i] * eye[i])
            fm[i] = f(x - h[i] * eye[i])
            if not (math.isfinite(fp[i]) and math.isfinite(fm[i])):
                h[i] /= 4.0
                continue
            fall = f0 - 0.5 * (fp[i] + fm[i])
            if fall <= 0:
                if h[i] >= max_sd:
                    break
                h[i] = min(h[i] * 4.0, max_sd)
                continue
            ratio = drop / fall
            if 0.25 <= ratio <= 4.0:
                break
            h[i] = min(h[i] * min(max(math.sqrt(ratio), 1 / 8), 8.0), max_sd)
    hess = np.zeros((d, d))
    grad = np.zeros(d)
    for i in range(d):
        if math.isfinite(fp[i]) and math.isfinite(fm[i]):
            hess[i, i] = (fp[i] + fm[i] - 2.0 * f0) / h[i] ** 2
            grad[i] = (fp[i] - fm[i]) / (2.0 * h[i])
    for i in range(d):
        for j in range(i + 1, d):
            ei, ej = h[i] * eye[i], h[j] * eye[j]
            vals = [f(x + ei + ej), f(x + ei - ej), f(x - ei + ej), f(x - ei - ej)]
            if all(math.isfinite(v) for v in vals):
                hess[i, j] = hess[j, i] = (vals[0] - vals[1] - vals[2] + vals[3]) / (
                    4.0 * h[i] * h[j]
                )
    return grad, hess, h


def regularised_cov(hess: np.ndarray, max_sd: float) -> tuple[np.ndarray, np.ndarray, int]:
    """``(C, P, n)``: covariance ``C = P^-1`` with ``P = -H`` whose eigenvalues are raised to
    at least ``1 / max_sd^2``; ``n`` = how many were raised."""
    prec = -0.5 * (hess + hess.T)
    vals, vecs = np.linalg.eigh(prec)
    floor = 1.0 / max_sd**2
    clipped = int(np.sum(vals < floor))
    vals = np.maximum(vals, floor)
    cov = (vecs / vals) @ vecs.T
    prec = (vecs * vals) @ vecs.T
    return 0.5 * (cov + cov.T), 0.5 * (prec + prec.T), clipped
