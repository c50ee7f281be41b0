"""``tiered``: few trigger passes per iteration, many cheap moves, a mode-jumping move."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..vocab import (
    DEFAULT_EXPENSIVE_MOVE,
    DEFAULT_INITIAL_SCALE,
    DEFAULT_JUMP_PROB,
    DEFAULT_N_CHEAP,
    DEFAULT_N_EXPENSIVE,
    EXPENSIVE_MOVES,
)
from .adapt import (
    acceptance_probability,
    adapted_log_factor,
    jittered_cholesky,
    welford_update,
)
from .jumps import check_jumps, log_mixture, mixture_centres
from .moves import AM_SCALE, check_common, check_init, check_state, mh_accept
from .state import LogDensity, SamplerState, StepInfo

log = logging.getLogger(__name__)

__all__ = ["TieredSampler"]


def _default_accept(k: int) -> float:
    """Near-optimal random-walk acceptance for a ``k``-dimensional Gaussian block."""
    return {1: 0.44, 2: 0.35, 3: 0.3, 4: 0.27}.get(k, 0.234)


def _cholesky(cov: np.ndarray, what: str) -> np.ndarray:
    """Lower Cholesky factor of a symmetric ``cov``, with growing jitter if it is not PD."""
    chol, jitter = jittered_cholesky(cov)
    if chol is None:
        raise ValueError(f"tiered sampler: the {what} covariance is not positive definite")
    if jitter:
        log.warning("tiered sampler: added jitter %.3g to the %s covariance", jitter, what)
    return chol


class _TieredParts(NamedTuple):
    """Proposal pieces derived from a tiered state's covariance estimate (cached)."""

    expensive: np.ndarray  # (d, k): increment = f_e * expensive @ z, z ~ N(0, I_k)
    cheap: np.ndarray  # (d, c): cheap increment = f_c * cheap @ z (rows of e exactly 0)
    jump_dir: np.ndarray  # (d,): cheap-block regression on the jump coordinate (1 there, 0 on e)
    reg: np.ndarray  # (c, k): B = S_ce S_ee^-1, the cheap block's regression on the expensive
    conditional: np.ndarray | None  # (d, k), "auto" only: the conditional move's increment
    kappa: float  # "auto" only: min_j (S_e|c)_jj / (S_ee)_jj, the conditional's reach


class _ExpensiveTally(NamedTuple):
    """What a step's expensive moves did: accepted moves, and per kind (coupled, conditional)
    the mean acceptance probability and the number of moves."""

    accepted: int
    alpha: tuple[float, float]
    moves: tuple[int, int]


class _Adaptation(NamedTuple):
    """What a step leaves of the adaptation: the factors, the counts and the moments."""

    scales: tuple[float, ...]
    n_adapt: int
    window: int
    mean: tuple[float, ...]
    m2: tuple[float, ...]
    cov0: tuple[float, ...]


class _Walk:
    """The chain within one step: its point and log density after the moves so far, the
    ``log_density`` calls made and the call whose point it now is (``target_call``)."""

    def __init__(self, theta: np.ndarray, log_target: float, log_density: LogDensity) -> None:
        self.theta = theta
        self.log_target = log_target
        self.calls = 0
        self.target_call = -1
        self._log_density = log_density

    def propose(self, proposal: np.ndarray, u: float, log_q: float = 0.0) -> tuple[float, bool]:
        """One Metropolis-Hastings move to ``proposal`` decided by the uniform ``u``, with
        ``log_q`` = log q(current | proposal) - log q(proposal | current) (0: symmetric): its
        acceptance probability and whether it was accepted (the walk then moved there)."""
        log_new = float(self._log_density(proposal.copy()))
        self.calls += 1
        alpha = acceptance_probability(log_new + log_q, self.log_target)
        accepted = mh_accept(log_new + log_q, self.log_target, u)
        if accepted:
            self.theta, self.log_target, self.target_call = proposal, log_new, self.calls - 1
        return alpha, accepted


def _check_blocks(dim: int, cheap: Sequence[int]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``d``, the cheap coordinates (sorted) and the expensive ones; ValueError if unusable."""
    if int(dim) != dim or dim < 2:
        raise ValueError(f"tiered sampler dimension must be an integer >= 2, got {dim!r}")
    d = int(dim)
    cheap_idx = tuple(int(i) for i in cheap)
    if (
        len(set(cheap_idx)) != len(cheap_idx)
        or not cheap_idx
        or len(cheap_idx) >= d
        or any(not 0 <= i < d for i in cheap_idx)
    ):
        raise ValueError(
            f"cheap must list distinct coordinates in 0..{d - 1}, leaving at least one "
            f"expensive coordinate; got {tuple(cheap)!r}"
        )
    cheap_sorted = tuple(sorted(cheap_idx))
    return d, cheap_sorted, tuple(i for i in range(d) if i not in cheap_sorted)


def _check_counts(n_cheap: int, n_expensive: int) -> None:
    """ValueError for an unusable number of cheap or expensive moves per step."""
    if int(n_cheap) != n_cheap or n_cheap < 0:
        raise ValueError(f"n_cheap must be an integer >= 0, got {n_cheap!r}")
    if int(n_expensive) != n_expensive or n_expensive < 1:
        raise ValueError(f"n_expensive must be an integer >= 1, got {n_expensive!r}")


def _check_adaptation(adapt_window: int, prior_weight: float, eps: float) -> None:
    """ValueError for an unusable adaptation setting."""
    if int(adapt_window) != adapt_window or adapt_window < 2:
        raise ValueError(f"adapt_window must be an integer >= 2, got {adapt_window!r}")
    if not (math.isfinite(prior_weight) and prior_weight > 0):
        raise ValueError(f"prior_weight must be finite and > 0, got {prior_weight!r}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")


class TieredSampler:
    """``n_expensive`` trigger passes per iteration, many cheap moves, and a mode-jumping move.

    The coordinates split into the ``cheap`` block ``c`` (default ``(0, 1, 2)`` = ``mu0``,
    ``tau_t``, ``xi0``) and the expensive block ``e`` (the rest: ``sigma_x``, ``sigma_t``). Let
    ``S`` be the current covariance estimate of the target (below), ``S_ee``, ``S_ce``, ``S_cc``
    its blocks, ``B = S_ce S_ee^-1`` and ``S_c|e = S_cc - B S_ec``. One :meth:`step` makes, in
    this order:

    1. **Expensive moves** (``n_expensive`` of them, one ``log_density`` call each, the only
       calls of the step whose expensive coordinates differ from the current state's; each
       starts from where the one before left the chain). ``expensive_move`` chooses the
       increment:

       ``"coupled"`` (:data:`~hawkes_cli.vocab.DEFAULT_EXPENSIVE_MOVE`)
           ``delta_e = f_e L_e z`` with ``L_e L_e^T = (2.38^2 / |e|) S_ee`` and the cheap block
           shifted along its regression on the expensive one, ``delta_c = B delta_e``. On a
           Gaussian target the residual ``theta_c - B theta_e`` is independent of ``theta_e``,
           so this move samples the *marginal* of the expensive block, whatever the
           correlations with the cheap one (the cheap moves then redo the conditional).
       ``"conditional"``
           ``delta_e ~ f_e N(0, (2.38^2/|e|) S_e|c)``, cheap block fixed.
       ``"joint"``
           ``delta ~ f_e N(0, (2.38^2/d) S)`` on all coordinates.
       ``"auto"`` (``sampler.expensive_move: auto``)
           ``"coupled"`` or ``"conditional"``, each with its own factor (``f_e`` and ``f_d``).
           While adapting the expensive moves alternate between the two (move ``k`` of the
           chain, counting ``n_expensive`` per step: coupled when ``k`` is even), each factor
           steered by its own moves' acceptance. After warm-up every expensive move is of the
           one kind that takes the larger steps at the same acceptance rate, measured in the
           marginal scale of the expensive coordinate worst off: ``"coupled"`` when
           ``f_e^2 >= kappa f_d^2``, ``kappa = min_j (S_e|c)_jj / (S_ee)_jj`` (the share of
           ``theta_e[j]``'s variance the conditional move can reach), else ``"conditional"``.
           Why: the coupled move rides on the regression ``B``, which amplifies the
           estimate's errors by ``sd_c / sd_e`` (about 15 for ``tau_t`` on ``sigma_x``). On a
           curved ridge (a non-Gaussian target), whose cheap moves mix slowly, the windowed
           ``S`` picks up spurious ``c``-``e`` covariances (the approach from a dispersed start,
           the slow wander along the ridge); the coupled proposals then leave the ridge, ``f_e``
           shrinks, the expensive block crawls and the next windows see the same spurious
           covariance. Such a chain barely moves ``sigma_x``; which chains it hits depends on
           the seed and on ``n_cheap`` (which changes the whole warm-up path), so it looked
           like a matter of ``n_cheap``. The conditional move needs no ``B``; on a Gaussian
           target with strong ``c``-``e`` correlations the coupled move is the better one and
           is kept. The choice depends on the frozen adaptation only (a state from before
           ``"auto"``, with two factors, reads ``f_d = f_e`` and keeps the coupled move, as
           ``kappa <= 1``), so the kernel after warm-up is fixed; both kinds draw ``|e|``
           normals, so the draw layout of :meth:`step` is that of ``"coupled"``.

       Each increment law is symmetric (``delta`` and ``-delta`` equally likely; ``"coupled"``
       is a symmetric law on a ``|e|``-dimensional subspace), so the plain Metropolis ratio
       ``pi(theta') / pi(theta)`` is the exact MH ratio (translations preserve Lebesgue
       measure; Tierney 1998).
    2. **Cheap moves**: ``n_cheap`` random-walk proposals of the cheap block alone,
       ``delta_c = f_c L_c z`` with ``L_c L_c^T = (2.38^2 / |c|) S_c|e`` (the conditional
       shape, since the expensive block is held fixed). Symmetric, plain ratio. These follow
       the (``mu0``, ``tau_t``) ridge at no trigger-pass cost.
    3. **Mode jump** (with probability ``jump_prob``; one call), of one of two kinds drawn
       uniformly (independently of the state) from those set. *Between modes*, when
       ``jump_modes`` lists two or more (e.g. those :func:`hawkes_cli.start.find_start`
       found): the cheap block is drawn afresh, ``theta_c' = mu_k + f_c L_c z`` with ``k``
       uniform and ``mu_k = m_k,c + B (theta_e - m_k,e)`` (mode ``k``'s cheap block carried
       along the regression to the current expensive block), an independence proposal from the
       equal-weight mixture ``q`` of those Gaussians, accepted with the Hastings ratio
       ``pi(theta') q(theta_c) / (pi(theta) q(theta_c'))``; it lands on the other mode's ridge
       whatever the chain's deviation from the mode it leaves (:mod:`.jumps`). *Along the
       ridge*, when ``jump_range = (a, b)`` and ``jump_index`` are set: ``delta_c = s m v +
       f_c L_c z`` with ``s = +-1`` equally likely, ``m ~ U(a, b)`` and ``v`` the regression
       of the cheap block on coordinate ``jump_index`` under ``S_c|e`` (``v`` is 1 at
       ``jump_index``: a jump of ``m`` in log ``tau_t`` with the compensating shift of ``mu0``
       and ``xi0`` along the learned ridge), a symmetric law, so the plain ratio is exact.

    Each move leaves the target invariant, hence so does their composition (and the random
    choice of doing the jump, drawn independently of the state). Several expensive moves per
    step are such a composition: with the event locations redrawn once per iteration (the
    cut posterior), they buy the slow expensive block more mixing per redraw, whose cost (the
    draw, the grid index, the current state's trigger pass) they share. Everything the proposals
    depend on (``S``, ``f_e``, ``f_c``) changes only while ``adapt=True``.

    Adaptation (warm-up only). ``S`` is the blend ``(n0 S0 + M2) / (n0 + w - 1)`` of a prior
    estimate ``S0`` (``state.cov0``, weight ``n0 = prior_weight``) with the Welford sum of
    outer products ``M2`` of the ``w`` states of the current window (states after each
    iteration), plus ``eps I``. Windows double (Stan-like): they end after ``adapt_window *
    (2^k - 1)`` adapting steps, ``S0`` becomes the blend and the window restarts, so the early
    transient is forgotten. ``S0`` starts as the ``cov`` given to :meth:`init` (e.g. the
    inverse Hessian at the mode) or ``diag(initial_scale^2)``. The factors follow
    Robbins-Monro, ``log f += (n_adapt + 1)^-0.6 (alpha - target)``, with ``alpha`` the mean MH
    acceptance probability over the step's expensive moves (``f_e``; with ``"auto"`` its
    coupled ones for ``f_e`` and its conditional ones for ``f_d``, a factor without moves in
    the step unchanged) or its cheap moves (``f_c``).

    Parameters
    ----------
    dim
        Number of coordinates ``d`` (>= 2).
    cheap
        Indices of the cheap block; the others form the expensive block (both non-empty).
    n_cheap
        Cheap-block moves per step (>= 0).
    n_expensive
        Expensive moves per step (>= 1), each one trigger pass.
    target_accept
        Acceptance rate ``f_e`` is steered to; ``None``: 0.35 for a 2-coordinate block (0.44
        for 1, 0.3 for 3, 0.234 for many; of ``d`` for ``"joint"``).
    cheap_target_accept
        The same for ``f_c`` and the cheap block; ``None`` as above.
    initial_scale
        Prior posterior sd per coordinate when :meth:`init` gets no ``cov``.
    expensive_move
        ``"auto"``, ``"coupled"``, ``"conditional"`` or ``"joint"`` (see above).
    jump_prob
        Probability of the mode-jumping move in a step (0 disables it).
    jump_index
        Coordinate (in ``cheap``) of the regression jump (``tau_t``); ``None`` disables that
        kind of jump.
    jump_range
        ``(a, b)``, ``0 <= a < b``: range of the regression jump's size along ``jump_index``
        (log scale); ``None`` disables that kind of jump.
    jump_modes
        Modes to jump between (none, or two or more), each of length ``d`` (log scale).
    adapt_window
        Length of the first adaptation window (doubling after).
    prior_weight
        Weight ``n0`` (in states) of ``S0`` in the blend.
    eps
        Ridge added to ``S``.
    """

    kind = "tiered"
    EXPENSIVE_MOVES: tuple[str, ...] = EXPENSIVE_MOVES

    def __init__(
        self,
        dim: int,
        *,
        cheap: Sequence[int] = (0, 1, 2),
        n_cheap: int = DEFAULT_N_CHEAP,
        n_expensive: int = DEFAULT_N_EXPENSIVE,
        target_accept: float | None = None,
        cheap_target_accept: float | None = None,
        initial_scale: float = DEFAULT_INITIAL_SCALE,
        expensive_move: str = DEFAULT_EXPENSIVE_MOVE,
        jump_prob: float = DEFAULT_JUMP_PROB,
        jump_index: int | None = 1,
        jump_range: tuple[float, float] | None = (1.0, 6.0),
        jump_modes: Sequence[Sequence[float]] = (),
        adapt_window: int = 50,
        prior_weight: float = 50.0,
        eps: float = 1e-10,
    ) -> None:
        d, self.cheap, self.expensive = _check_blocks(dim, cheap)
        self.dim = d
        if expensive_move not in self.EXPENSIVE_MOVES:
            raise ValueError(
                f"unknown expensive_move {expensive_move!r}; valid choices are "
                f"{', '.join(self.EXPENSIVE_MOVES)}"
            )
        self.expensive_move = expensive_move
        n_moved = d if expensive_move == "joint" else len(self.expensive)
        self.target_accept = (
            _default_accept(n_moved) if target_accept is None else float(target_accept)
        )
        self.cheap_target_accept = (
            _default_accept(len(self.cheap))
            if cheap_target_accept is None
            else float(cheap_target_accept)
        )
        check_common(d, self.target_accept, initial_scale)
        check_common(d, self.cheap_target_accept, initial_scale)
        _check_counts(n_cheap, n_expensive)
        self.jump_range, self.jump_modes = check_jumps(
            d, self.cheap, jump_prob, jump_index, jump_range, jump_modes
        )
        _check_adaptation(adapt_window, prior_weight, eps)
        self.n_cheap = int(n_cheap)
        self.n_expensive = int(n_expensive)
        self.initial_scale = float(initial_scale)
        self.jump_prob = float(jump_prob)
        self.jump_index = None if jump_index is None else int(jump_index)
        self.adapt_window = int(adapt_window)
        self.prior_weight = float(prior_weight)
        self.eps = float(eps)
        self._n_jump_kinds = int(bool(self.jump_modes)) + int(
            self.jump_range is not None and self.jump_index is not None
        )
        self._k_expensive = n_moved
        c = len(self.cheap)
        self.n_normals = n_moved * self.n_expensive + self.n_cheap * c + c
        """Standard normals drawn per step (fixed by the settings)."""
        self.n_uniforms = self.n_expensive + self.n_cheap + 5
        """Uniforms drawn per step (fixed by the settings)."""
        self._c = np.array(self.cheap)
        self._e = np.array(self.expensive)
        self._modes = np.array(self.jump_modes, dtype=float).reshape(-1, d)
        self._parts_key: tuple[Any, ...] | None = None
        self._parts: _TieredParts | None = None

    def __repr__(self) -> str:
        return (
            f"TieredSampler(dim={self.dim}, cheap={self.cheap}, n_cheap={self.n_cheap}, "
            f"n_expensive={self.n_expensive}, "
            f"target_accept={self.target_accept}, "
            f"cheap_target_accept={self.cheap_target_accept}, "
            f"initial_scale={self.initial_scale}, expensive_move={self.expensive_move!r}, "
            f"jump_prob={self.jump_prob}, jump_index={self.jump_index}, "
            f"jump_range={self.jump_range}, jump_modes={len(self.jump_modes)}, "
            f"adapt_window={self.adapt_window}, prior_weight={self.prior_weight}, "
            f"eps={self.eps})"
        )

    # ------------------------------------------------------------------------------ state
    def init(self, theta0: Sequence[float], log_target: float, cov: Any = None) -> SamplerState:
        """Starting state.

        Parameters
        ----------
        theta0
            Starting point (log scale), length ``d``.
        log_target
            Log density at ``theta0`` (finite).
        cov
            Prior estimate of the target's covariance, ``(d, d)`` symmetric positive definite
            (e.g. :attr:`hawkes_cli.start.StartResult.cov`, the inverse Hessian at the mode);
            ``None``: ``diag(initial_scale^2)``. Warm-up starts from it (it is ``state.cov0``).

        Raises
        ------
        ValueError
            Wrong length, non-finite values, or ``cov`` not symmetric positive definite.
        """
        theta = check_init(self.dim, theta0, log_target)
        d = self.dim
        if cov is None:
            cov_arr = np.eye(d) * self.initial_scale**2
        else:
            cov_arr = np.asarray(cov, dtype=float)
            if cov_arr.shape != (d, d) or not np.all(np.isfinite(cov_arr)):
                raise ValueError(f"cov must be a finite ({d}, {d}) matrix, got {cov_arr.shape}")
            if not np.allclose(cov_arr, cov_arr.T, rtol=1e-8, atol=0.0):
                raise ValueError("cov must be symmetric")
            cov_arr = 0.5 * (cov_arr + cov_arr.T)
            try:
                np.linalg.cholesky(cov_arr)
            except np.linalg.LinAlgError as exc:
                raise ValueError("cov must be positive definite") from exc
        return SamplerState(
            theta=theta,
            log_target=float(log_target),
            scales=(1.0, 1.0, 1.0) if self.expensive_move == "auto" else (1.0, 1.0),
            kind=self.kind,
            proposals=(0, 0, 0),
            accepts=(0, 0, 0),
            cov0=tuple(cov_arr.reshape(-1).tolist()),
        )

    def covariance(self, state: SamplerState) -> np.ndarray:
        """The target covariance estimate ``S`` the proposals are built from, ``(d, d)``.

        ``(n0 S0 + M2) / (n0 + w - 1) + eps I`` (see the class notes); frozen after warm-up.
        """
        check_state(state, self.kind, self.dim)
        d = self.dim
        cov0 = np.asarray(state.cov0, dtype=float).reshape(d, d)
        if state.window > 0:
            m2 = np.asarray(state.m2, dtype=float).reshape(d, d)
            cov = (self.prior_weight * cov0 + m2) / (self.prior_weight + state.window - 1)
        else:
            cov = cov0
        return 0.5 * (cov + cov.T) + self.eps * np.eye(d)

    def _proposal_parts(self, state: SamplerState) -> _TieredParts:
        key = (state.window, state.m2, state.cov0)
        if self._parts is not None and self._parts_key == key:
            return self._parts
        cov = self.covariance(state)
        c, e = self._c, self._e
        s_cc, s_ce, s_ee = cov[c][:, c], cov[c][:, e], cov[e][:, e]
        reg = np.linalg.solve(s_ee, s_ce.T).T  # B = S_ce S_ee^-1, shape (c, e)
        s_c_e = s_cc - reg @ s_ce.T
        s_c_e = 0.5 * (s_c_e + s_c_e.T)
        d = self.dim
        conditional, kappa = None, 1.0
        if self.expensive_move == "joint":
            expensive = _cholesky((AM_SCALE / d) * cov, "joint")
        else:
            expensive = np.zeros((d, len(e)))
            if self.expensive_move in ("coupled", "auto"):
                l_e = _cholesky((AM_SCALE / len(e)) * s_ee, "expensive")
                expensive[c, :] = reg @ l_e
                expensive[e, :] = l_e
            if self.expensive_move in ("conditional", "auto"):
                s_e_c = s_ee - s_ce.T @ np.linalg.solve(s_cc, s_ce)
                s_e_c = 0.5 * (s_e_c + s_e_c.T)
                conditional = np.zeros((d, len(e)))
                conditional[e, :] = _cholesky((AM_SCALE / len(e)) * s_e_c, "expensive")
                kappa = float(np.min(np.diag(s_e_c) / np.diag(s_ee)))
            if self.expensive_move == "conditional":
                expensive, conditional = conditional, None
        cheap = np.zeros((d, len(c)))
        cheap[c, :] = _cholesky((AM_SCALE / len(c)) * s_c_e, "cheap")
        jump_dir = np.zeros(d)
        if self.jump_index is not None:
            j = self.cheap.index(self.jump_index)
            jump_dir[c] = s_c_e[:, j] / s_c_e[j, j]
            jump_dir[self.jump_index] = 1.0
        parts = _TieredParts(expensive, cheap, jump_dir, reg, conditional, kappa)
        self._parts_key, self._parts = key, parts
        return parts

    def _factors(self, state: SamplerState) -> tuple[float, float, float]:
        """``(f_e, f_c, f_d)``: the coupled (or only) expensive factor, the cheap one and the
        conditional one of ``"auto"`` (``f_e`` for a 2-factor state)."""
        f_e, f_c = state.scales[0], state.scales[1]
        return f_e, f_c, state.scales[2] if len(state.scales) > 2 else f_e

    def frozen_move(self, state: SamplerState) -> str:
        """The expensive move a frozen (not adapting) step of ``state`` makes: the
        ``expensive_move`` setting, or for ``"auto"`` ``"coupled"`` when ``f_e^2 >= kappa
        f_d^2`` and ``"conditional"`` otherwise (see the class notes)."""
        if self.expensive_move != "auto":
            return self.expensive_move
        f_e, _, f_d = self._factors(state)
        kappa = self._proposal_parts(state).kappa
        return "coupled" if f_e * f_e >= kappa * f_d * f_d else "conditional"

    def _coupled_moves(self, state: SamplerState, adapt: bool) -> tuple[bool, ...]:
        """Per expensive move of the step, whether it is of the coupled kind (``"auto"``: the
        matrix ``parts.expensive`` and factor ``f_e``) or the conditional one
        (``parts.conditional``, ``f_d``); all True for the other settings."""
        n_e = self.n_expensive
        if self.expensive_move != "auto":
            return (True,) * n_e
        if adapt:
            first = state.n_steps * n_e
            return tuple((first + i) % 2 == 0 for i in range(n_e))
        return (self.frozen_move(state) == "coupled",) * n_e

    def _window_ends(self, n_adapt: int) -> bool:
        """Whether an adaptation window ends after ``n_adapt`` adapting steps."""
        q, r = divmod(n_adapt, self.adapt_window)
        return r == 0 and q > 0 and (q + 1) & q == 0

    # ------------------------------------------------------------------------------ step
    def step(
        self,
        state: SamplerState,
        log_density: LogDensity,
        rng: np.random.Generator,
        *,
        adapt: bool,
    ) -> tuple[SamplerState, StepInfo]:
        """One iteration: ``n_expensive`` expensive moves, ``n_cheap`` cheap moves, maybe a
        mode jump.

        ``log_density`` is called ``n_expensive + n_cheap`` times, plus once more when a jump is
        proposed; only the first ``n_expensive`` calls change the expensive coordinates. Draws
        from ``rng``, in order: :attr:`n_normals` standard normals (expensive moves, cheap
        moves, jump noise), then :attr:`n_uniforms` uniforms (expensive accepts, cheap
        accepts, jump: do, sign, kind, size, accept), all of them every step. With
        ``n_expensive=1`` this is the layout of the sampler before the option existed; the
        ``"auto"`` move's kinds draw alike (``|e|`` normals, one uniform), its choice of kind
        (:meth:`frozen_move`, or alternating while ``adapt``) draws nothing.
        ``StepInfo.proposal_scale`` is the factor of the step's first expensive move.
        """
        check_state(state, self.kind, self.dim)
        normals = rng.standard_normal(self.n_normals)
        uniforms = rng.random(self.n_uniforms)
        parts = self._proposal_parts(state)
        coupled = self._coupled_moves(state, adapt)
        walk = _Walk(np.array(state.theta, dtype=float), state.log_target, log_density)
        n_e, n_c = self.n_expensive, self.n_cheap
        cut_e = self._k_expensive * n_e  # normals: expensive | cheap | jump noise
        cut_c = cut_e + n_c * len(self.cheap)
        z_e = normals[:cut_e].reshape(n_e, self._k_expensive)
        z_c = normals[cut_e:cut_c].reshape(n_c, len(self.cheap))
        tally = self._expensive_moves(walk, parts, state, z_e, uniforms, coupled)
        expensive_accepted = tally.accepted
        cheap_accepted, alpha_c = self._cheap_moves(walk, parts, state, z_c, uniforms[n_e:])
        jump_proposed, jump_accepted = self._mode_jump(
            walk, parts, state, normals[cut_c:], uniforms[n_e + n_c :]
        )
        if adapt:
            kept = self._adapt(state, walk.theta, tally, alpha_c)
        else:
            kept = _Adaptation(
                state.scales, state.n_adapt, state.window, state.mean, state.m2, state.cov0
            )
        new_state = SamplerState(
            theta=tuple(walk.theta.tolist()),
            log_target=walk.log_target,
            kind=self.kind,
            n_steps=state.n_steps + 1,
            n_accepted=state.n_accepted + (expensive_accepted > 0),
            proposals=(
                state.proposals[0] + n_e,
                state.proposals[1] + n_c,
                state.proposals[2] + int(jump_proposed),
            ),
            accepts=(
                state.accepts[0] + expensive_accepted,
                state.accepts[1] + cheap_accepted,
                state.accepts[2] + jump_accepted,
            ),
            **kept._asdict(),
        )
        info = StepInfo(
            accepted=expensive_accepted > 0,
            coordinate=-2,
            proposal_scale=self._factors(state)[0 if coupled[0] else 2],
            n_proposals=walk.calls,
            n_accepted=expensive_accepted + cheap_accepted + int(jump_accepted),
            expensive_accepted=expensive_accepted,
            cheap_proposed=n_c,
            cheap_accepted=cheap_accepted,
            jump_proposed=jump_proposed,
            jump_accepted=jump_accepted,
            target_call=walk.target_call,
        )
        return new_state, info

    def _expensive_moves(
        self,
        walk: _Walk,
        parts: _TieredParts,
        state: SamplerState,
        z: np.ndarray,
        uniforms: np.ndarray,
        coupled: tuple[bool, ...],
    ) -> _ExpensiveTally:
        """Step 1: the expensive moves (``z`` shape ``(n_expensive, k)``, one uniform each;
        ``coupled``: per move, its kind, see :meth:`_coupled_moves`).

        Returns the moves accepted and, per kind, the mean acceptance probability and the
        number of moves.
        """
        f_e, _, f_d = self._factors(state)
        moves = (sum(coupled), len(coupled) - sum(coupled))
        accepted, alpha = 0, [0.0, 0.0]
        for i, is_coupled in enumerate(coupled):
            if is_coupled:
                increment = f_e * (parts.expensive @ z[i])
            else:
                increment = f_d * (parts.conditional @ z[i])  # type: ignore[operator]
            a, ok = walk.propose(walk.theta + increment, float(uniforms[i]))
            kind = 0 if is_coupled else 1
            alpha[kind] += a / moves[kind]
            accepted += ok
        return _ExpensiveTally(accepted, (alpha[0], alpha[1]), moves)

    def _cheap_moves(
        self,
        walk: _Walk,
        parts: _TieredParts,
        state: SamplerState,
        z: np.ndarray,
        uniforms: np.ndarray,
    ) -> tuple[int, float]:
        """Step 2: the cheap moves (``z`` shape ``(n_cheap, |c|)``, one uniform each); their
        increments are exactly 0 on the expensive coordinates.

        Returns the moves accepted and the sum of their acceptance probabilities.
        """
        increments = state.scales[1] * (z @ parts.cheap.T)
        accepted, alpha = 0, 0.0
        for i in range(self.n_cheap):
            a, ok = walk.propose(walk.theta + increments[i], float(uniforms[i]))
            alpha += a
            accepted += ok
        return accepted, alpha

    def _mode_jump(
        self,
        walk: _Walk,
        parts: _TieredParts,
        state: SamplerState,
        z: np.ndarray,
        uniforms: np.ndarray,
    ) -> tuple[bool, bool]:
        """Step 3: the mode jump (``z``: its ``|c|`` normals; ``uniforms``: do, sign, kind,
        size, accept). Returns whether it was proposed and whether it was accepted."""
        u_do, u_sign, u_kind, u_size, u_acc = (float(u) for u in uniforms)
        if not (self._n_jump_kinds > 0 and u_do < self.jump_prob):
            return False, False
        pick = min(int(u_kind * self._n_jump_kinds), self._n_jump_kinds - 1)
        theta = walk.theta
        if pick == 0 and self.jump_modes:
            c = self._c
            chol = state.scales[1] * parts.cheap[c]  # the cheap moves' adapted shape
            centres = mixture_centres(self._modes, theta[self._e], parts.reg, c, self._e)
            k = min(int(u_size * len(centres)), len(centres) - 1)
            proposal = theta.copy()
            proposal[c] = centres[k] + chol @ z
            log_q = log_mixture(theta[c], centres, chol) - log_mixture(proposal[c], centres, chol)
            _, accepted = walk.propose(proposal, u_acc, log_q)
            return True, accepted
        lo, hi = self.jump_range  # type: ignore[misc]
        shift = (lo + (hi - lo) * u_size) * parts.jump_dir
        sign = 1.0 if u_sign < 0.5 else -1.0
        noise = state.scales[1] * (parts.cheap @ z)
        _, accepted = walk.propose(theta + (sign * shift + noise), u_acc)
        return True, accepted

    def _adapt(
        self, state: SamplerState, theta: np.ndarray, tally: _ExpensiveTally, alpha_c: float
    ) -> _Adaptation:
        """The factors' Robbins-Monro steps (each expensive factor on the mean acceptance
        probability of its own moves in the step, unchanged without any) and the window's
        Welford update with the step's final ``theta``; at a window's end ``cov0`` becomes the
        blend and the window empties."""
        f_e, f_c, f_d = self._factors(state)
        n_adapt = state.n_adapt
        # "auto" with one expensive move per step adapts each factor every other step: its
        # Robbins-Monro gain counts its own updates, as a factor adapted every step does
        j_e = n_adapt // 2 if self.expensive_move == "auto" and self.n_expensive == 1 else n_adapt
        new_e = []
        for f, a, m in zip((f_e, f_d), tally.alpha, tally.moves, strict=True):
            target = self.target_accept
            new_e.append(math.exp(adapted_log_factor(f, j_e, a, target)) if m else f)
        new_fe, new_fd = new_e
        new_fc = f_c
        if self.n_cheap:
            alpha = alpha_c / self.n_cheap
            new_fc = math.exp(adapted_log_factor(f_c, n_adapt, alpha, self.cheap_target_accept))
        d = self.dim
        window, n_adapt = state.window + 1, n_adapt + 1
        mean_arr, m2_arr = welford_update(state.mean, state.m2, theta, window)
        mean, m2 = tuple(mean_arr.tolist()), tuple(m2_arr.reshape(-1).tolist())
        cov0 = state.cov0
        if self._window_ends(n_adapt):
            blended = (self.prior_weight * np.asarray(cov0, dtype=float).reshape(d, d)) + m2_arr
            blended = blended / (self.prior_weight + window - 1)
            blended = 0.5 * (blended + blended.T)
            log.debug(
                "tiered sampler: adaptation window of %d states ends after %d steps",
                window,
                n_adapt,
            )
            cov0 = tuple(blended.reshape(-1).tolist())
            window, mean, m2 = 0, (), ()
        scales = (new_fe, new_fc, new_fd) if self.expensive_move == "auto" else (new_fe, new_fc)
        return _Adaptation(scales, n_adapt, window, mean, m2, cov0)
