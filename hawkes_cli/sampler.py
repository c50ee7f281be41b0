"""Metropolis-Hastings kernels over a plain log-density callable.

The samplers know no engine, file or MPI: they move a real vector ``theta`` (the log-parameters,
shape ``(d,)``) under a callable ``log_density(theta) -> float`` (log prior + log likelihood, up
to a constant). A returned ``-inf`` or ``nan`` means "outside the support": the proposal is
rejected, never raised.

Two kernels (DESIGN section 5):

``univariate``
    The published random-scan sampler, made correct: each step picks one coordinate ``k``
    uniformly, proposes ``theta_k + scale_k * z`` with ``z ~ N(0, 1)`` and accepts with
    probability ``min(1, exp(new - old))``; one ``log_density`` call per step. While
    ``adapt=True`` (warm-up), every ``adapt_every`` proposals of coordinate ``k`` multiply
    ``scale_k`` by ``clamp(acceptance / target_accept, 0.5, 2)``. With ``adapt=False`` the
    scales are frozen and the step is a valid MH kernel.
``block``
    Adaptive Metropolis (Haario, Saksman & Tamminen 2001; Roberts & Rosenthal 2009): proposal
    ``theta + f * L z`` with ``L L^T = (2.38^2 / d) (S + eps I)``, ``S`` the running (Welford)
    covariance of the states visited while adapting, and ``f`` a global factor adapted by
    Robbins-Monro toward ``target_accept``. Before ``adapt_start`` adapting steps the proposal is
    ``f * diag(initial_scale)``. Frozen when ``adapt=False``; the proposal is symmetric, so the
    plain MH ratio applies.

Reproducibility: all randomness comes from the ``rng`` argument, in a fixed order per step
(univariate: coordinate, normal, uniform; block: ``d`` normals, uniform), always drawn even when
the proposal is rejected early. The next state is a function of ``(state, rng state)`` only, so
restoring :meth:`SamplerState.from_json` and ``rng.bit_generator.state`` resumes a chain
bit-for-bit. :class:`SamplerState` holds only Python floats, ints and tuples (hashable, exact
JSON round trip).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np

log = logging.getLogger(__name__)

SAMPLER_KINDS: tuple[str, ...] = ("univariate", "block")
"""Names accepted by :func:`make_sampler`."""

STATE_SCHEMA = 1
"""Version of the :meth:`SamplerState.to_json` layout."""

LogDensity = Callable[[np.ndarray], float]
"""``theta`` (shape ``(d,)``, log scale) -> log density (float; ``-inf``/``nan`` = reject)."""

_AM_SCALE = 2.38**2
"""Optimal random-walk scaling numerator (Roberts, Gelman & Gilks 1997): ``2.38^2 / d``."""


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
        global proposal factor.
    kind
        ``"univariate"`` or ``"block"``; the sampler that made this state.
    n_steps, n_accepted
        Steps taken and accepted so far (adapting and frozen together).
    n_adapt
        Steps taken with ``adapt=True``.
    proposals, accepts
        ``univariate``: per-coordinate totals over all steps (length ``d``). ``block``: empty.
    window_proposals, window_accepts
        ``univariate``: per-coordinate counts in the current adaptation window. ``block``: empty.
    mean, m2
        ``block``: Welford running mean (length ``d``) and sum of outer products of deviations
        (``d * d``, row-major) of the states visited while adapting. ``univariate``: empty.
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
        n_scales = d if self.kind == "univariate" else 1
        if len(self.scales) != n_scales:
            raise ValueError(
                f"{self.kind} sampler state needs {n_scales} scale(s), got {len(self.scales)}"
            )
        if not all(math.isfinite(s) and s > 0 for s in self.scales):
            raise ValueError(f"proposal scales must be finite and > 0, got {self.scales}")
        if self.kind == "univariate":
            lengths = {
                "proposals": d,
                "accepts": d,
                "window_proposals": d,
                "window_accepts": d,
                "mean": 0,
                "m2": 0,
            }
        else:
            lengths = {
                "proposals": 0,
                "accepts": 0,
                "window_proposals": 0,
                "window_accepts": 0,
                "mean": d if self.n_adapt > 0 else 0,
                "m2": d * d if self.n_adapt > 0 else 0,
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

    @property
    def dim(self) -> int:
        """Number of coordinates ``d``."""
        return len(self.theta)

    @property
    def acceptance_rate(self) -> float:
        """Fraction of all steps accepted so far (``nan`` before the first step)."""
        return self.n_accepted / self.n_steps if self.n_steps else math.nan

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only (str, int, float, lists); floats round-trip exactly.

        Returns
        -------
        dict
            ``{"schema": 1, "kind": ..., "theta": [...], ...}``; feed to :meth:`from_json`.
        """
        out: dict[str, Any] = {"schema": STATE_SCHEMA}
        for f in fields(self):
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
        float_tuples = {"theta", "scales", "mean", "m2"}
        int_tuples = {"proposals", "accepts", "window_proposals", "window_accepts"}
        ints = {"n_steps", "n_accepted", "n_adapt"}
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

    Parameters
    ----------
    accepted
        Whether the proposal was accepted.
    coordinate
        ``univariate``: the coordinate proposed; ``block``: ``-1``.
    proposal_scale
        ``univariate``: the sd used for this proposal; ``block``: the global factor ``f`` used.
    """

    accepted: bool
    coordinate: int
    proposal_scale: float


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


def _check_init(dim: int, theta0: Sequence[float], log_target: float) -> tuple[float, ...]:
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


def _check_state(state: SamplerState, kind: str, dim: int) -> None:
    if state.kind != kind:
        raise ValueError(f"a {state.kind} sampler state was given to the {kind} sampler")
    if state.dim != dim:
        raise ValueError(f"sampler state has {state.dim} coordinates, the sampler expects {dim}")


def _accept(log_new: float, log_old: float, u: float) -> bool:
    """MH decision ``u < exp(new - old)``; ``-inf``/``nan`` ``log_new`` is rejected."""
    if not math.isfinite(log_new):
        return False
    diff = log_new - log_old
    return diff >= 0.0 or u < math.exp(diff)


def _check_common(dim: int, target_accept: float, initial_scale: float) -> None:
    if int(dim) != dim or dim < 1:
        raise ValueError(f"sampler dimension must be a positive integer, got {dim!r}")
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be in (0, 1), got {target_accept!r}")
    if not (math.isfinite(initial_scale) and initial_scale > 0):
        raise ValueError(f"initial_scale must be finite and > 0, got {initial_scale!r}")


class UnivariateSampler:
    """Random-scan one-coordinate Gaussian random walk (the published sampler, made correct).

    Parameters
    ----------
    dim
        Number of coordinates ``d``.
    target_accept
        Acceptance rate the per-coordinate scales are steered to during warm-up.
    adapt_every
        Proposals of a coordinate per adaptation window.
    initial_scale
        Starting proposal sd for every coordinate (log scale).
    """

    kind = "univariate"

    def __init__(
        self,
        dim: int,
        *,
        target_accept: float = 0.44,
        adapt_every: int = 10,
        initial_scale: float = 0.1,
    ) -> None:
        _check_common(dim, target_accept, initial_scale)
        if int(adapt_every) != adapt_every or adapt_every < 1:
            raise ValueError(f"adapt_every must be a positive integer, got {adapt_every!r}")
        self.dim = int(dim)
        self.target_accept = float(target_accept)
        self.adapt_every = int(adapt_every)
        self.initial_scale = float(initial_scale)

    def __repr__(self) -> str:
        return (
            f"UnivariateSampler(dim={self.dim}, target_accept={self.target_accept}, "
            f"adapt_every={self.adapt_every}, initial_scale={self.initial_scale})"
        )

    def init(self, theta0: Sequence[float], log_target: float) -> SamplerState:
        """Starting state; ``ValueError`` if ``theta0`` has the wrong length or is not finite."""
        theta = _check_init(self.dim, theta0, log_target)
        zeros = (0,) * self.dim
        return SamplerState(
            theta=theta,
            log_target=float(log_target),
            scales=(self.initial_scale,) * self.dim,
            kind=self.kind,
            proposals=zeros,
            accepts=zeros,
            window_proposals=zeros,
            window_accepts=zeros,
        )

    def step(
        self,
        state: SamplerState,
        log_density: LogDensity,
        rng: np.random.Generator,
        *,
        adapt: bool,
    ) -> tuple[SamplerState, StepInfo]:
        """Update one uniformly chosen coordinate; exactly one ``log_density`` call.

        Draws from ``rng``, in order: the coordinate (``integers``), one standard normal, one
        uniform.
        """
        _check_state(state, self.kind, self.dim)
        k = int(rng.integers(self.dim))
        z = float(rng.standard_normal())
        u = float(rng.random())
        scale = state.scales[k]

        proposal = np.array(state.theta, dtype=float)
        proposal[k] += scale * z
        log_new = float(log_density(proposal.copy()))
        accepted = _accept(log_new, state.log_target, u)
        if accepted:
            theta = tuple(proposal.tolist())
            log_target = log_new
        else:
            theta, log_target = state.theta, state.log_target

        proposals = list(state.proposals)
        accepts = list(state.accepts)
        proposals[k] += 1
        accepts[k] += accepted
        scales = state.scales
        window_proposals = state.window_proposals
        window_accepts = state.window_accepts
        if adapt:
            wp = list(window_proposals)
            wa = list(window_accepts)
            wp[k] += 1
            wa[k] += accepted
            if wp[k] >= self.adapt_every:
                rate = wa[k] / wp[k]
                factor = min(max(rate / self.target_accept, 0.5), 2.0)
                new_scales = list(scales)
                new_scales[k] = scale * factor
                scales = tuple(new_scales)
                wp[k] = 0
                wa[k] = 0
            window_proposals, window_accepts = tuple(wp), tuple(wa)

        new_state = SamplerState(
            theta=theta,
            log_target=log_target,
            scales=scales,
            kind=self.kind,
            n_steps=state.n_steps + 1,
            n_accepted=state.n_accepted + accepted,
            n_adapt=state.n_adapt + bool(adapt),
            proposals=tuple(proposals),
            accepts=tuple(accepts),
            window_proposals=window_proposals,
            window_accepts=window_accepts,
        )
        return new_state, StepInfo(accepted=accepted, coordinate=k, proposal_scale=scale)


class BlockSampler:
    """Adaptive Metropolis on all coordinates at once.

    Parameters
    ----------
    dim
        Number of coordinates ``d``.
    target_accept
        Acceptance rate the global factor is steered to during warm-up (0.234: Roberts,
        Gelman & Gilks 1997).
    initial_scale
        Proposal sd per coordinate (log scale) before ``adapt_start`` adapting steps.
    adapt_start
        Adapting steps after which the empirical covariance replaces ``diag(initial_scale^2)``.
        At that switch the global factor is reset to 1 (``2.38^2/d`` is already the optimal
        scaling for the empirical covariance) and its Robbins-Monro gain restarts.
    eps
        Ridge added to the empirical covariance, ``S + eps I``, to keep it positive definite.

    Notes
    -----
    The factor ``f`` follows ``log f += gamma_j (alpha - target_accept)`` with
    ``gamma_j = (j + 1)^(-0.6)`` (``j`` = adapting steps in the current phase) and ``alpha`` the
    MH acceptance probability of the step (Andrieu & Thoms 2008).
    """

    kind = "block"
    _GAIN_EXPONENT = 0.6
    _MAX_LOG_FACTOR = math.log(1e6)

    def __init__(
        self,
        dim: int,
        *,
        target_accept: float = 0.234,
        initial_scale: float = 0.1,
        adapt_start: int = 100,
        eps: float = 1e-10,
    ) -> None:
        _check_common(dim, target_accept, initial_scale)
        if int(adapt_start) != adapt_start or adapt_start < 2:
            raise ValueError(f"adapt_start must be an integer >= 2, got {adapt_start!r}")
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be finite and > 0, got {eps!r}")
        self.dim = int(dim)
        self.target_accept = float(target_accept)
        self.initial_scale = float(initial_scale)
        self.adapt_start = int(adapt_start)
        self.eps = float(eps)
        self._chol_key: tuple[int, tuple[float, ...]] | None = None
        self._chol: np.ndarray | None = None

    def __repr__(self) -> str:
        return (
            f"BlockSampler(dim={self.dim}, target_accept={self.target_accept}, "
            f"initial_scale={self.initial_scale}, adapt_start={self.adapt_start}, eps={self.eps})"
        )

    def init(self, theta0: Sequence[float], log_target: float) -> SamplerState:
        """Starting state; ``ValueError`` if ``theta0`` has the wrong length or is not finite."""
        theta = _check_init(self.dim, theta0, log_target)
        return SamplerState(
            theta=theta, log_target=float(log_target), scales=(1.0,), kind=self.kind
        )

    def covariance(self, state: SamplerState) -> np.ndarray:
        """Proposal covariance before the global factor, shape ``(d, d)``.

        ``diag(initial_scale^2)`` until ``adapt_start`` adapting steps, then
        ``(2.38^2 / d) (S + eps I)`` with ``S`` the empirical covariance of the adapting states.
        """
        _check_state(state, self.kind, self.dim)
        if state.n_adapt < self.adapt_start:
            return np.eye(self.dim) * self.initial_scale**2
        m2 = np.asarray(state.m2, dtype=float).reshape(self.dim, self.dim)
        cov = 0.5 * (m2 + m2.T) / (state.n_adapt - 1)
        return (_AM_SCALE / self.dim) * (cov + self.eps * np.eye(self.dim))

    def _cholesky(self, state: SamplerState) -> np.ndarray:
        """Lower Cholesky factor of :meth:`covariance`, cached while the state's moments hold."""
        key = (-1, ()) if state.n_adapt < self.adapt_start else (state.n_adapt, state.m2)
        if self._chol is not None and self._chol_key == key:
            return self._chol
        cov = self.covariance(state)
        jitter = 0.0
        base = float(np.mean(np.diag(cov))) or 1.0
        for _ in range(20):
            try:
                chol = np.linalg.cholesky(cov + jitter * np.eye(self.dim))
                break
            except np.linalg.LinAlgError:
                jitter = base * 1e-12 if jitter == 0.0 else jitter * 10.0
        else:  # pragma: no cover - only for a pathological (non-finite) covariance
            raise ValueError("block sampler: proposal covariance is not positive definite")
        if jitter:
            log.warning("block sampler: added jitter %.3g to the proposal covariance", jitter)
        self._chol_key, self._chol = key, chol
        return chol

    def step(
        self,
        state: SamplerState,
        log_density: LogDensity,
        rng: np.random.Generator,
        *,
        adapt: bool,
    ) -> tuple[SamplerState, StepInfo]:
        """Propose all coordinates jointly; exactly one ``log_density`` call.

        Draws from ``rng``, in order: ``d`` standard normals, one uniform.
        """
        _check_state(state, self.kind, self.dim)
        z = rng.standard_normal(self.dim)
        u = float(rng.random())
        factor = state.scales[0]
        chol = self._cholesky(state)

        current = np.array(state.theta, dtype=float)
        proposal = current + factor * (chol @ z)
        log_new = float(log_density(proposal.copy()))
        accepted = _accept(log_new, state.log_target, u)
        if accepted:
            theta = tuple(proposal.tolist())
            log_target = log_new
        else:
            theta, log_target = state.theta, state.log_target

        scales = state.scales
        n_adapt = state.n_adapt
        mean, m2 = state.mean, state.m2
        if adapt:
            # Robbins-Monro on log f, with the MH acceptance probability as the signal.
            if math.isfinite(log_new):
                alpha = min(1.0, math.exp(min(log_new - state.log_target, 0.0)))
            else:
                alpha = 0.0
            j = n_adapt if n_adapt < self.adapt_start else n_adapt - self.adapt_start
            gain = (j + 1) ** (-self._GAIN_EXPONENT)
            log_f = math.log(factor) + gain * (alpha - self.target_accept)
            log_f = min(max(log_f, -self._MAX_LOG_FACTOR), self._MAX_LOG_FACTOR)

            # Welford update with the state after this step.
            x = np.array(theta, dtype=float)
            n_adapt += 1
            if n_adapt == 1:
                mean_arr = x
                m2_arr = np.zeros((self.dim, self.dim))
            else:
                mean_old = np.asarray(mean, dtype=float)
                delta = x - mean_old
                mean_arr = mean_old + delta / n_adapt
                m2_arr = np.asarray(m2, dtype=float).reshape(self.dim, self.dim) + np.outer(
                    delta, x - mean_arr
                )
            mean, m2 = tuple(mean_arr.tolist()), tuple(m2_arr.reshape(-1).tolist())
            if n_adapt == self.adapt_start:
                log.debug(
                    "block sampler: switching to the empirical covariance after %d steps",
                    n_adapt,
                )
                log_f = 0.0
            scales = (math.exp(log_f),)

        new_state = SamplerState(
            theta=theta,
            log_target=log_target,
            scales=scales,
            kind=self.kind,
            n_steps=state.n_steps + 1,
            n_accepted=state.n_accepted + accepted,
            n_adapt=n_adapt,
            mean=mean,
            m2=m2,
        )
        return new_state, StepInfo(accepted=accepted, coordinate=-1, proposal_scale=factor)


def make_sampler(
    kind: str,
    dim: int,
    *,
    target_accept: float | None = None,
    initial_scale: float = 0.1,
) -> Sampler:
    """Build a sampler by name.

    Parameters
    ----------
    kind
        ``"univariate"`` or ``"block"``.
    dim
        Number of coordinates.
    target_accept
        ``None`` = the kind's default (0.44 univariate, 0.234 block).
    initial_scale
        Starting proposal sd per coordinate (log scale).

    Raises
    ------
    ValueError
        Unknown ``kind`` or bad settings.
    """
    extra = {} if target_accept is None else {"target_accept": float(target_accept)}
    if kind == "univariate":
        return UnivariateSampler(dim, initial_scale=initial_scale, **extra)
    if kind == "block":
        return BlockSampler(dim, initial_scale=initial_scale, **extra)
    raise ValueError(f"unknown sampler kind {kind!r}; valid kinds are {', '.join(SAMPLER_KINDS)}")
