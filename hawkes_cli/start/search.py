"""The fast start's searches: Nelder-Mead on a counted log posterior, and the cheap polish.

Pure over callables: ``log_post(theta) -> float`` (log scale; ``-inf``/``nan`` outside the
support). :class:`Counted` counts the calls, caps them (:class:`BudgetExceeded`) and keeps the
best point seen; :func:`nelder_mead` maximises within a call budget; :func:`polish_cheap`
re-optimises the cheap coordinates with the others held.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import optimize

log = logging.getLogger(__name__)

__all__ = ["BudgetExceeded", "Counted", "LogPost", "nelder_mead", "polish_cheap"]

LogPost = Callable[[np.ndarray], float]
"""``theta`` (shape ``(d,)``, log scale) -> log posterior (``-inf``/``nan`` outside)."""

_BAD = 1e300
"""What the minimiser sees for a non-finite log posterior."""


class BudgetExceeded(Exception):
    """The evaluation budget of one objective is spent."""


class Counted:
    """A log posterior with an evaluation counter, an optional cap, and the best point seen."""

    def __init__(self, f: LogPost, limit: int | None) -> None:
        self.f = f
        self.limit = limit
        self.n = 0
        self.best_x: np.ndarray | None = None
        self.best_f = -math.inf

    def left(self) -> int:
        return math.inf if self.limit is None else self.limit - self.n  # type: ignore[return-value]

    def __call__(self, x: np.ndarray) -> float:
        if self.limit is not None and self.n >= self.limit:
            raise BudgetExceeded
        self.n += 1
        value = float(self.f(np.array(x, dtype=float)))
        if not math.isfinite(value):
            return -math.inf
        if value > self.best_f:
            self.best_f, self.best_x = value, np.array(x, dtype=float)
        return value


def nelder_mead(
    f: Counted, x0: np.ndarray, f0: float, step: float, max_evals: int
) -> tuple[np.ndarray, float, bool]:
    """Nelder-Mead maximisation of ``f`` from ``x0`` (value ``f0``), at most ``max_evals`` calls.

    Returns the best point seen, its value, and whether the search met its tolerance.
    """
    d = len(x0)
    limit = min(max_evals, f.left())
    start_n = f.n
    best: list[Any] = [x0, f0]
    if limit < d + 1:
        return x0, f0, False

    def neg(x: np.ndarray) -> float:
        if f.n - start_n >= limit:
            raise BudgetExceeded
        value = f(x)
        if value > best[1]:
            best[0], best[1] = np.array(x, dtype=float), value
        return -value if math.isfinite(value) else _BAD

    simplex = np.vstack([x0, x0 + step * np.eye(d)])
    converged = False
    with contextlib.suppress(BudgetExceeded):
        res = optimize.minimize(
            neg,
            x0,
            method="Nelder-Mead",
            options={
                "initial_simplex": simplex,
                "maxfev": limit,
                "xatol": 1e-2,
                "fatol": 1e-2,
                "adaptive": d > 2,
            },
        )
        converged = bool(res.success)
    return np.asarray(best[0], dtype=float), float(best[1]), converged


def polish_cheap(
    log_post: LogPost,
    x0: np.ndarray,
    f0: float,
    cheap: Sequence[int],
    step: float,
    max_evals: int,
) -> tuple[np.ndarray, float, int]:
    """Nelder-Mead over the coordinates ``cheap`` of ``log_post`` from ``x0``, the others held.

    Returns the best point (full vector), its value, and the calls made.
    """
    idx = np.asarray(sorted(set(int(i) for i in cheap)), dtype=int)
    if idx.size == 0 or np.any((idx < 0) | (idx >= len(x0))):
        raise ValueError(f"cheap coordinates must be in 0..{len(x0) - 1}, got {list(cheap)!r}")

    def embed(z: np.ndarray) -> np.ndarray:
        x = np.array(x0, dtype=float)
        x[idx] = z
        return x

    f = Counted(lambda z: log_post(embed(z)), max_evals)
    z, fz, _ = nelder_mead(f, x0[idx], f0, step, max_evals)
    if fz > f0:
        log.info("start: the cheap coordinates on the full data gained %.4g nats", fz - f0)
        return embed(z), fz, f.n
    return np.array(x0, dtype=float), f0, f.n
