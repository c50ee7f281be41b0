"""The tiered sampler's ``sigma_x`` mixing must not depend on ``n_cheap`` (issue 41, item 4).

The failure: the coupled expensive move shifts the cheap block along the regression
``B = S_ce S_ee^-1`` of the adapted covariance ``S``. ``B`` amplifies the estimate's errors by
``sd_c / sd_e`` (here ``0.2 / 0.014``); on a curved ``mu0``-``tau_t`` ridge whose cheap moves mix
slowly the warm-up windows give spurious ``c``-``e`` covariances, the coupled proposals leave
the ridge, ``f_e`` shrinks and feeds the next windows the same spurious covariance. Some chains
then barely move ``sigma_x`` (bulk ESS 0.02-0.07 per draw over 3 chains for ``n_cheap`` 1 to
10, against 0.13 on a Gaussian); which chains, depends on the seed and on ``n_cheap``. The
``"auto"`` expensive move (the default) measures the coupled and the conditional moves during
warm-up and keeps the one that steps further (see :class:`TieredSampler`).

The target: the demo posterior's scales and correlations (log ``mu0``, ``tau_t``, ``xi0``,
``sigma_x``, ``sigma_t``) with the ``mu0``-``tau_t`` ridge bent, ``v_1 = u_1 - b (u_0^2 - 1)`` on
the standardised ``u`` and ``v ~ N(0, R)``. The map ``u -> v`` is triangular with unit diagonal
(Jacobian 1), so the density is exact and ``u_3 = v_3``: ``sigma_x``'s marginal is exactly
``N(MEAN[3], SD[3]^2)``, whatever the bend.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hawkes_cli.diagnostics.stats import ess_bulk, rhat
from hawkes_cli.sampler.state import SamplerState
from hawkes_cli.sampler.tiered import TieredSampler

MEAN = np.array([0.15, 5.70, -0.67, -1.61, 1.57])
SD = np.array([0.175, 0.216, 0.024, 0.014, 0.029])
R = np.eye(5)
R[0, 1] = R[1, 0] = 0.989  # the demo's mu0-tau_t ridge
R[2, 3] = R[3, 2] = 0.06
R[2, 4] = R[4, 2] = 0.07
R[3, 4] = R[4, 3] = -0.02
COV = R * np.outer(SD, SD)  # what the fast start's inverse Hessian would give
SIGMA_X = 3

ITERATIONS, WARMUP, CHAINS = 2000, 750, 3  # the demo's warm-up windows: 50, 150, 350, 750

# Tolerances. A 2-coordinate random-walk move steered to acceptance 0.35 gives about 0.13
# bulk ESS per iteration for each coordinate on a Gaussian target (measured: 0.12-0.14 on the
# unbent target, 6 seeds each of n_cheap 1, 2, 4, 10). The bulk ESS of 3 x 1,250 draws at an
# autocorrelation time near 8 has a relative sd near 16% (Geyer window M ~ 3 tau = 24:
# sqrt(2 (2M + 1) / N) = sqrt(2 * 49 / 3750)), so a sampler that mixes sigma_x as on a
# Gaussian measures at least 0.13 * (1 - 3 * 0.16) = 0.07 per draw (3 sds): the floor. The
# fix gives 0.08-0.13 on these seeds (n_cheap 2 the lowest), the coupled-only sampler (the
# code before) 0.020-0.046: it fails at every n_cheap. The mean of sigma_x must lie within 4
# Monte Carlo standard errors (sd / sqrt(ESS)) of the exact one, its sd within 15% of the
# exact one (an sd estimate's relative sd is 1 / sqrt(2 ESS) <= 0.044 at the floor's ESS of
# 262: 15% is 3.4 of them), and R-hat of the 3 chains from 3-sd-dispersed starts at most
# 1.02 (the fix: 1.005-1.013; before: up to 1.033).
MIN_ESS_PER_DRAW = 0.07
MEAN_IN_MCSE = 4.0
SD_REL_TOL = 0.15
MAX_RHAT = 1.02


def log_bent(theta: np.ndarray, bend: float = 1.0) -> float:
    """Log density (up to a constant) of the bent-ridge target."""
    v = (np.asarray(theta, dtype=float) - MEAN) / SD
    v[1] -= bend * (v[0] ** 2 - 1.0)
    return -0.5 * float(v @ np.linalg.solve(R, v))


def _sigma_x_draws(
    n_cheap: int, target: object, cov: np.ndarray, **options: object
) -> tuple[np.ndarray, list[str]]:
    """``CHAINS`` seeded chains from dispersed starts: their post-warm-up sigma_x draws
    ``(CHAINS, ITERATIONS - WARMUP)`` and the expensive move each froze to."""
    draws, moves = [], []
    for chain in range(CHAINS):
        rng = np.random.default_rng([41, n_cheap, chain])
        options = {"expensive_move": "auto", **options}
        sampler = TieredSampler(5, n_cheap=n_cheap, **options)  # type: ignore[arg-type]
        theta = MEAN + 3.0 * SD * rng.standard_normal(5)
        state = sampler.init(theta, target(theta), cov=cov)  # type: ignore[operator]
        kept = []
        for it in range(ITERATIONS):
            state, _ = sampler.step(state, target, rng, adapt=it < WARMUP)  # type: ignore[arg-type]
            if it >= WARMUP:
                kept.append(state.theta[SIGMA_X])
        draws.append(kept)
        moves.append(sampler.frozen_move(state))
    return np.array(draws), moves


def _check_sigma_x(x: np.ndarray, what: str) -> float:
    """Assert the mixing and the law of the sigma_x draws ``x``; their bulk ESS per draw."""
    ess = ess_bulk(x)
    per_draw = ess / x.size
    z = (x - MEAN[SIGMA_X]) / SD[SIGMA_X]
    assert per_draw >= MIN_ESS_PER_DRAW, f"{what}: sigma_x bulk ESS {ess:.0f} of {x.size} draws"
    assert rhat(x) <= MAX_RHAT, f"{what}: sigma_x R-hat {rhat(x):.4f}"
    assert abs(z.mean()) <= MEAN_IN_MCSE / math.sqrt(ess), f"{what}: mean off by {z.mean():.3f} sd"
    assert abs(z.std() - 1.0) <= SD_REL_TOL, f"{what}: sd {z.std():.3f} of the exact one"
    return per_draw


@pytest.mark.parametrize("n_cheap", [1, 2, 4, 10])
def test_sigma_x_mixing_does_not_depend_on_n_cheap(n_cheap: int) -> None:
    """On the bent ridge sigma_x mixes as on a Gaussian for every n_cheap (the default move)."""
    x, _ = _sigma_x_draws(n_cheap, log_bent, COV)
    _check_sigma_x(x, f"n_cheap={n_cheap}")


def test_auto_keeps_the_coupled_move_where_it_pays() -> None:
    """With sigma_x correlated 0.7 with the ridge (a Gaussian), the conditional move alone mixes
    sigma_x at about 0.05 per draw and the coupled one at 0.13: "auto" must keep the coupled."""
    corr = R.copy()
    corr[0, 3] = corr[3, 0] = 0.7
    corr[1, 3] = corr[3, 1] = 0.7 * R[0, 1]
    cov = corr * np.outer(SD, SD)
    precision = np.linalg.inv(cov)

    def log_gauss(theta: np.ndarray) -> float:
        r = np.asarray(theta, dtype=float) - MEAN
        return -0.5 * float(r @ precision @ r)

    x, moves = _sigma_x_draws(4, log_gauss, cov)
    assert moves.count("coupled") >= 2, moves
    _check_sigma_x(x, "correlated Gaussian")


def test_auto_alternates_while_adapting_and_freezes_one_kind() -> None:
    """While adapting, moves alternate coupled / conditional, each kind steering its own factor;
    frozen, the kind follows ``f_e^2 >= kappa f_d^2``."""
    sampler = TieredSampler(5, n_cheap=2, jump_prob=0.0, n_expensive=3, expensive_move="auto")
    rng = np.random.default_rng(3)
    state = sampler.init(MEAN, log_bent(MEAN), cov=COV)
    assert state.scales == (1.0, 1.0, 1.0)
    assert sampler._coupled_moves(state, True) == (True, False, True)
    state, _ = sampler.step(state, log_bent, rng, adapt=True)
    assert sampler._coupled_moves(state, True) == (False, True, False)  # moves 3, 4, 5
    assert state.scales[0] != 1.0 and state.scales[2] != 1.0  # both factors adapted
    kappa = sampler._proposal_parts(state).kappa
    assert 0.0 < kappa <= 1.0
    small_e = SamplerState.from_json({**state.to_json(), "scales": [0.1, 1.0, 1.0]})
    assert sampler.frozen_move(small_e) == "conditional"
    assert sampler._coupled_moves(small_e, False) == (False, False, False)
    assert (
        sampler.frozen_move(SamplerState.from_json({**state.to_json(), "scales": [1.0, 1.0, 1.0]}))
        == "coupled"
    )


def test_two_factor_state_resumes_with_the_coupled_move() -> None:
    """A checkpoint from before "auto" (two factors) is accepted; frozen, it continues with
    the coupled move it was made by (``f_d = f_e`` and ``kappa <= 1``), bit for bit."""
    auto = TieredSampler(5, n_cheap=3, expensive_move="auto")
    coupled = TieredSampler(5, n_cheap=3, expensive_move="coupled")
    old = coupled.init(MEAN, log_bent(MEAN), cov=COV)
    assert len(old.scales) == 2
    assert auto.frozen_move(old) == "coupled"
    a, _ = auto.step(old, log_bent, np.random.default_rng(9), adapt=False)
    b, _ = coupled.step(old, log_bent, np.random.default_rng(9), adapt=False)
    assert a == b
    adapted, _ = auto.step(old, log_bent, np.random.default_rng(9), adapt=True)
    assert len(adapted.scales) == 3  # the conditional factor joins, starting at f_e
