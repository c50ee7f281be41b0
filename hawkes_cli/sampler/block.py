"""``block``: adaptive Metropolis on all coordinates at once."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from ..vocab import DEFAULT_INITIAL_SCALE
from .adapt import (
    acceptance_probability,
    adapted_log_factor,
    jittered_cholesky,
    welford_update,
)
from .moves import AM_SCALE, check_common, check_init, check_state, mh_accept
from .state import LogDensity, SamplerState, StepInfo

log = logging.getLogger(__name__)

__all__ = ["BlockSampler"]


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

    def __init__(
        self,
        dim: int,
        *,
        target_accept: float = 0.234,
        initial_scale: float = DEFAULT_INITIAL_SCALE,
        adapt_start: int = 100,
        eps: float = 1e-10,
    ) -> None:
        check_common(dim, target_accept, initial_scale)
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
        theta = check_init(self.dim, theta0, log_target)
        return SamplerState(
            theta=theta, log_target=float(log_target), scales=(1.0,), kind=self.kind
        )

    def covariance(self, state: SamplerState) -> np.ndarray:
        """Proposal covariance before the global factor, shape ``(d, d)``.

        ``diag(initial_scale^2)`` until ``adapt_start`` adapting steps, then
        ``(2.38^2 / d) (S + eps I)`` with ``S`` the empirical covariance of the adapting states.
        """
        check_state(state, self.kind, self.dim)
        if state.n_adapt < self.adapt_start:
            return np.eye(self.dim) * self.initial_scale**2
        m2 = np.asarray(state.m2, dtype=float).reshape(self.dim, self.dim)
        cov = 0.5 * (m2 + m2.T) / (state.n_adapt - 1)
        return (AM_SCALE / self.dim) * (cov + self.eps * np.eye(self.dim))

    def _cholesky(self, state: SamplerState) -> np.ndarray:
        """Lower Cholesky factor of :meth:`covariance`, cached while the state's moments hold."""
        key = (-1, ()) if state.n_adapt < self.adapt_start else (state.n_adapt, state.m2)
        if self._chol is not None and self._chol_key == key:
            return self._chol
        chol, jitter = jittered_cholesky(self.covariance(state))
        if chol is None:  # pragma: no cover - only for a pathological (non-finite) covariance
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
        check_state(state, self.kind, self.dim)
        z = rng.standard_normal(self.dim)
        u = float(rng.random())
        factor = state.scales[0]
        chol = self._cholesky(state)

        current = np.array(state.theta, dtype=float)
        proposal = current + factor * (chol @ z)
        log_new = float(log_density(proposal.copy()))
        accepted = mh_accept(log_new, state.log_target, u)
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
            alpha = acceptance_probability(log_new, state.log_target)
            j = n_adapt if n_adapt < self.adapt_start else n_adapt - self.adapt_start
            log_f = adapted_log_factor(factor, j, alpha, self.target_accept)
            # Welford update with the state after this step.
            n_adapt += 1
            mean_arr, m2_arr = welford_update(mean, m2, np.array(theta, dtype=float), n_adapt)
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
