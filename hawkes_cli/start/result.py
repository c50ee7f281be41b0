"""The fast start's result: the mode, its curvature and the modes found, as exact JSON.

:class:`StartResult` is what :func:`~hawkes_cli.start.find.find_start` returns, what the run's
shared start file holds (:mod:`.shared`) and what every checkpoint of a chain that took the fast
start carries (so a resumed chain rebuilds the same sampler without searching again).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["START_SCHEMA", "Mode", "StartResult"]

START_SCHEMA = 1
"""Version of the :meth:`StartResult.to_json` layout."""


@dataclass(frozen=True)
class Mode:
    """A local maximum found by the search.

    Parameters
    ----------
    theta
        Its location (log scale).
    log_post
        Full log posterior there (``nan`` if the budget left it unevaluated).
    log_post_sub
        Subsample log posterior there (``nan`` without a subsample).
    start
        The search start that reached it.
    converged
        Whether the search met its tolerance (not its evaluation cap) there.
    """

    theta: tuple[float, ...]
    log_post: float
    log_post_sub: float
    start: tuple[float, ...]
    converged: bool = True

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types (``nan`` written as ``None``)."""
        return {
            "theta": list(self.theta),
            "log_post": _num_out(self.log_post),
            "log_post_sub": _num_out(self.log_post_sub),
            "start": list(self.start),
            "converged": self.converged,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Mode:
        """Inverse of :meth:`to_json`."""
        return cls(
            theta=tuple(float(x) for x in d["theta"]),
            log_post=_num_in(d["log_post"]),
            log_post_sub=_num_in(d["log_post_sub"]),
            start=tuple(float(x) for x in d["start"]),
            converged=bool(d["converged"]),
        )


def _num_out(x: float) -> float | None:
    return None if math.isnan(x) else x


def _num_in(x: Any) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class StartResult:
    """Where :func:`find_start` ended and what it cost.

    Parameters
    ----------
    theta
        The best mode found (log scale).
    log_post
        Full log posterior at ``theta``.
    cov
        Posterior covariance estimate ``(-H)^-1`` at ``theta`` (regularised), row by row;
        :attr:`cov_matrix` as an array. Give it to ``TieredSampler.init(..., cov=...)``.
    hessian
        Where the curvature came from: ``"full"``, ``"subsample"`` (the full budget ran out)
        or ``"none"`` (``diag(max_sd^2)``).
    n_clipped
        Eigenvalues of ``-H`` raised to ``1 / max_sd^2`` (0 at a clean maximum).
    n_sub_evals, n_full_evals
        Subsample and full log posterior evaluations made.
    n_cheap_evals
        Full evaluations of the cheap-coordinate polish (no trigger pass each; 0 without one).
    seconds
        Wall time of :func:`find_start`.
    modes
        Every distinct optimum found, best first (``modes[0].theta`` is ``theta`` before the
        Newton polish).
    """

    theta: tuple[float, ...]
    log_post: float
    cov: tuple[tuple[float, ...], ...]
    hessian: str
    n_clipped: int
    n_sub_evals: int
    n_full_evals: int
    seconds: float
    modes: tuple[Mode, ...]
    n_cheap_evals: int = 0

    @property
    def cov_matrix(self) -> np.ndarray:
        """:attr:`cov` as a ``(d, d)`` array."""
        return np.array(self.cov, dtype=float)

    @property
    def dim(self) -> int:
        """Number of coordinates ``d``."""
        return len(self.theta)

    def jump_modes(self, within: float = 50.0) -> list[tuple[float, ...]]:
        """This mode and the other converged modes at most ``within`` nats worse, or none when
        there is no other.

        Meant for ``TieredSampler(jump_modes=...)``: its jump draws the cheap block afresh
        around one of them.
        """
        out = [tuple(float(x) for x in self.theta)]
        for m in self.modes[1:]:
            if m.converged and math.isfinite(m.log_post) and m.log_post >= self.log_post - within:
                out.append(tuple(float(x) for x in m.theta))
        return out if len(out) > 1 else []

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only; floats round-trip exactly (``nan`` written as ``None``)."""
        return {
            "schema": START_SCHEMA,
            "theta": list(self.theta),
            "log_post": self.log_post,
            "cov": [list(row) for row in self.cov],
            "hessian": self.hessian,
            "n_clipped": self.n_clipped,
            "n_sub_evals": self.n_sub_evals,
            "n_full_evals": self.n_full_evals,
            "n_cheap_evals": self.n_cheap_evals,
            "seconds": self.seconds,
            "modes": [m.to_json() for m in self.modes],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StartResult:
        """Inverse of :meth:`to_json`.

        Raises
        ------
        ValueError
            Wrong schema or malformed values.
        """
        if d.get("schema") != START_SCHEMA:
            raise ValueError(f"start result schema {d.get('schema')!r} is not {START_SCHEMA}")
        try:
            return cls(
                theta=tuple(float(x) for x in d["theta"]),
                log_post=float(d["log_post"]),
                cov=tuple(tuple(float(x) for x in row) for row in d["cov"]),
                hessian=str(d["hessian"]),
                n_clipped=int(d["n_clipped"]),
                n_sub_evals=int(d["n_sub_evals"]),
                n_full_evals=int(d["n_full_evals"]),
                n_cheap_evals=int(d.get("n_cheap_evals", 0)),  # absent before it existed
                seconds=float(d["seconds"]),
                modes=tuple(Mode.from_json(m) for m in d["modes"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"start result is malformed: {exc}") from exc
