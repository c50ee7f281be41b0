"""``univariate``: the published random-scan Metropolis sampler, made correct."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..vocab import DEFAULT_INITIAL_SCALE
from .moves import check_common, check_init, check_state, mh_accept
from .state import LogDensity, SamplerState, StepInfo

log = logging.getLogger(__name__)

__all__ = ["UnivariateSampler"]


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
        initial_scale: float = DEFAULT_INITIAL_SCALE,
    ) -> None:
        check_common(dim, target_accept, initial_scale)
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
        theta = check_init(self.dim, theta0, log_target)
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
        check_state(state, self.kind, self.dim)
        k = int(rng.integers(self.dim))
        z = float(rng.standard_normal())
        u = float(rng.random())
        scale = state.scales[k]

        proposal = np.array(state.theta, dtype=float)
        proposal[k] += scale * z
        log_new = float(log_density(proposal.copy()))
        accepted = mh_accept(log_new, state.log_target, u)
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
