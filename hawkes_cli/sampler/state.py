"""A sampler's state (:class:`SamplerState`, exact JSON), one step's record (:class:`StepInfo`)
and the kernel protocol (:class:`Sampler`): what every kind shares and the checkpoint stores."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..vocab import SAMPLER_KINDS

__all__ = ["STATE_SCHEMA", "LogDensity", "Sampler", "SamplerState", "StepInfo"]

STATE_SCHEMA = 1
"""Version of the :meth:`SamplerState.to_json` layout (the ``tiered`` fields only add keys)."""

LogDensity = Callable[[np.ndarray], float]
"""``theta`` (shape ``(d,)``, log scale) -> log density (float; ``-inf``/``nan`` = reject)."""

_TIERED_ONLY = ("cov0", "window")
"""Fields only the ``tiered`` kind uses; left out of the other kinds' JSON (unchanged layout)."""


@dataclass(frozen=True)
class SamplerState:
    """Everything a sampler needs to continue a chain, as plain JSON-able Python values.

    Parameters
    ----------
    theta
        Current point, log scale, length ``d``.
    log_target
        Log density at ``theta`` (finite). After changing the target outside the sampler (e.g.
        location resampling), replace it with ``dataclasses.replace(state, log_target=...)``.
    scales
        ``univariate``: per-coordinate proposal sd (length ``d``). ``block``: ``(f,)``, the
        global proposal factor. ``tiered``: ``(f_expensive, f_cheap)``, the global factors of
        the expensive and the cheap block moves; with ``expensive_move="auto"``
        ``(f_coupled, f_cheap, f_conditional)`` (a 2-factor state, from before that move
        existed, reads as ``f_conditional = f_coupled``).
    kind
        One of :data:`SAMPLER_KINDS`; the sampler that made this state.
    n_steps, n_accepted
        Steps taken and accepted so far (adapting and frozen together). ``tiered``: a step is
        an iteration and ``n_accepted`` counts the steps in which an expensive move was
        accepted (``accepts[0]`` counts the moves).
    n_adapt
        Steps taken with ``adapt=True``.
    proposals, accepts
        ``univariate``: per-coordinate totals over all steps (length ``d``). ``tiered``: totals
        per move type ``(expensive, cheap, jump)`` (length 3). ``block``: empty.
    window_proposals, window_accepts
        ``univariate``: per-coordinate counts in the current adaptation window. Others: empty.
    mean, m2
        ``block``: Welford running mean (length ``d``) and sum of outer products of deviations
        (``d * d``, row-major) of the states visited while adapting. ``tiered``: the same over
        the states of the current adaptation window (empty when the window is empty).
        ``univariate``: empty.
    cov0
        ``tiered`` only: the prior covariance estimate (``d * d``, row-major) that the current
        window's empirical covariance is blended with: the ``cov`` given to
        :meth:`TieredSampler.init` (or ``diag(initial_scale^2)``), then the blended estimate at
        the end of each adaptation window.
    window
        ``tiered`` only: states in the current adaptation window (the Welford count).
    """

    theta: tuple[float, ...]
    log_target: float
    scales: tuple[float, ...]
    kind: str
    n_steps: int = 0
    n_accepted: int = 0
    n_adapt: int = 0
    proposals: tuple[int, ...] = ()
    accepts: tuple[int, ...] = ()
    window_proposals: tuple[int, ...] = ()
    window_accepts: tuple[int, ...] = ()
    mean: tuple[float, ...] = ()
    m2: tuple[float, ...] = ()
    cov0: tuple[float, ...] = ()
    window: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SAMPLER_KINDS:
            raise ValueError(
                f"unknown sampler kind {self.kind!r} in sampler state; "
                f"valid kinds are {', '.join(SAMPLER_KINDS)}"
            )
        d = len(self.theta)
        if d == 0:
            raise ValueError("sampler state has an empty theta")
        if not all(math.isfinite(x) for x in self.theta):
            raise ValueError(f"sampler state theta must be finite, got {self.theta}")
        if not math.isfinite(self.log_target):
            raise ValueError(
                f"sampler state log_target must be finite, got {self.log_target!r}; "
                "start the chain at a point inside the support"
            )
        # tiered: (f_e, f_c), or (f_e, f_c, f_conditional) with expensive_move "auto"
        n_scales = {"univariate": (d,), "block": (1,), "tiered": (2, 3)}[self.kind]
        if len(self.scales) not in n_scales:
            wanted = " or ".join(str(n) for n in n_scales)
            raise ValueError(
                f"{self.kind} sampler state needs {wanted} scale(s), got {len(self.scales)}"
            )
        if not all(math.isfinite(s) and s > 0 for s in self.scales):
            raise ValueError(f"proposal scales must be finite and > 0, got {self.scales}")
        if self.kind != "tiered" and self.window != 0:
            raise ValueError(f"{self.kind} sampler state field 'window' must be 0")
        if not 0 <= self.window <= self.n_adapt:
            raise ValueError(
                f"inconsistent tiered sampler window {self.window} (n_adapt={self.n_adapt})"
            )
        if self.kind == "univariate":
            lengths = {
                "proposals": d,
                "accepts": d,
                "window_proposals": d,
                "window_accepts": d,
                "mean": 0,
                "m2": 0,
                "cov0": 0,
            }
        elif self.kind == "block":
            lengths = {
                "proposals": 0,
                "accepts": 0,
                "window_proposals": 0,
                "window_accepts": 0,
                "mean": d if self.n_adapt > 0 else 0,
                "m2": d * d if self.n_adapt > 0 else 0,
                "cov0": 0,
            }
        else:
            lengths = {
                "proposals": 3,
                "accepts": 3,
                "window_proposals": 0,
                "window_accepts": 0,
                "mean": d if self.window > 0 else 0,
                "m2": d * d if self.window > 0 else 0,
                "cov0": d * d,
            }
        for name, want in lengths.items():
            got = len(getattr(self, name))
            if got != want:
                raise ValueError(
                    f"{self.kind} sampler state field {name!r} has length {got}, expected {want}"
                )
        if not 0 <= self.n_accepted <= self.n_steps or not 0 <= self.n_adapt <= self.n_steps:
            raise ValueError(
                f"inconsistent sampler counters: n_steps={self.n_steps}, "
                f"n_accepted={self.n_accepted}, n_adapt={self.n_adapt}"
            )
        if self.kind == "tiered":
            if any(not 0 <= a <= p for a, p in zip(self.accepts, self.proposals, strict=True)):
                raise ValueError(
                    f"inconsistent tiered move counts: proposals={self.proposals}, "
                    f"accepts={self.accepts}"
                )
            if not all(math.isfinite(x) for x in self.cov0):
                raise ValueError("tiered sampler state cov0 must be finite")

    @property
    def dim(self) -> int:
        """Number of coordinates ``d``."""
        return len(self.theta)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only (str, int, float, lists); floats round-trip exactly.

        Returns
        -------
        dict
            ``{"schema": 1, "kind": ..., "theta": [...], ...}``; feed to :meth:`from_json`.
            The ``tiered``-only keys (``cov0``, ``window``) appear for that kind only, so the
            other kinds' layout is the one they always had.
        """
        out: dict[str, Any] = {"schema": STATE_SCHEMA}
        for f in fields(self):
            if f.name in _TIERED_ONLY and self.kind != "tiered":
                continue
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SamplerState:
        """Inverse of :meth:`to_json`.

        Raises
        ------
        ValueError
            Wrong schema version, missing or unknown keys, or inconsistent values.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"sampler state must be a JSON object, got {type(d).__name__}")
        schema = d.get("schema")
        if schema != STATE_SCHEMA:
            raise ValueError(
                f"sampler state schema {schema!r} is not supported (expected {STATE_SCHEMA})"
            )
        names = [f.name for f in fields(cls)]
        required = ("theta", "log_target", "scales", "kind")
        missing = [n for n in required if n not in d]
        unknown = sorted(set(d) - set(names) - {"schema"})
        if missing or unknown:
            raise ValueError(
                f"sampler state has missing key(s) {missing} / unknown key(s) {unknown}; "
                f"valid keys are schema, {', '.join(names)}"
            )
        float_tuples = {"theta", "scales", "mean", "m2", "cov0"}
        int_tuples = {"proposals", "accepts", "window_proposals", "window_accepts"}
        ints = {"n_steps", "n_accepted", "n_adapt", "window"}
        kwargs: dict[str, Any] = {}
        try:
            for name in names:
                if name not in d:
                    continue
                value = d[name]
                if name in float_tuples:
                    kwargs[name] = tuple(float(x) for x in value)
                elif name in int_tuples:
                    kwargs[name] = tuple(int(x) for x in value)
                elif name in ints:
                    kwargs[name] = int(value)
                elif name == "log_target":
                    kwargs[name] = float(value)
                else:
                    kwargs[name] = str(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"sampler state has a malformed value: {exc}") from exc
        return cls(**kwargs)


@dataclass(frozen=True)
class StepInfo:
    """What happened in one step.

    The first three fields are what every kind always reported; the others default so that a
    one-proposal step (``univariate``, ``block``) is fully described by ``accepted`` alone.

    Parameters
    ----------
    accepted
        Whether the proposal was accepted; ``tiered``: whether an expensive move was.
    coordinate
        ``univariate``: the coordinate proposed; ``block``: ``-1``; ``tiered``: ``-2``.
    proposal_scale
        ``univariate``: the sd used for this proposal; ``block``: the global factor ``f`` used;
        ``tiered``: the expensive block's global factor used.
    n_proposals
        ``log_density`` calls made in this step (``1`` except for ``tiered``:
        ``n_expensive + n_cheap + jump_proposed``).
    n_accepted
        Proposals accepted in this step; ``None`` at construction means ``int(accepted)``.
    cheap_proposed, cheap_accepted
        ``tiered``: cheap-block moves proposed and accepted in this step (the jump excluded).
    jump_proposed, jump_accepted
        ``tiered``: whether a mode-jumping move was proposed / accepted in this step.
    expensive_accepted
        ``tiered``: expensive moves accepted in this step; ``None`` at construction means
        ``int(accepted)``.
    target_call
        Index, among this step's ``log_density`` calls (0-based, in call order), of the call
        whose value is the new state's ``log_target``; ``-1`` when the state did not move.
        ``None`` at construction means ``0 if accepted else -1``. A caller that records side
        results of each evaluation (log-likelihood and log-prior apart) takes the new state's
        from this call.
    """

    accepted: bool
    coordinate: int
    proposal_scale: float
    n_proposals: int = 1
    n_accepted: int | None = None
    cheap_proposed: int = 0
    cheap_accepted: int = 0
    jump_proposed: bool = False
    jump_accepted: bool = False
    target_call: int | None = None
    expensive_accepted: int | None = None

    def __post_init__(self) -> None:
        if self.n_accepted is None:
            object.__setattr__(self, "n_accepted", int(self.accepted))
        if self.expensive_accepted is None:
            object.__setattr__(self, "expensive_accepted", int(self.accepted))
        if self.target_call is None:
            object.__setattr__(self, "target_call", 0 if self.accepted else -1)


@runtime_checkable
class Sampler(Protocol):
    """An MH kernel over a log-density callable (see module docstring)."""

    kind: str

    def init(self, theta0: Sequence[float], log_target: float) -> SamplerState:
        """Starting state at ``theta0`` whose log density is ``log_target`` (finite)."""
        ...

    def step(
        self,
        state: SamplerState,
        log_density: LogDensity,
        rng: np.random.Generator,
        *,
        adapt: bool,
    ) -> tuple[SamplerState, StepInfo]:
        """One MH step; adaptation only when ``adapt`` is true."""
        ...
