"""Fast starts on analytic targets: global mode from far away, curvature, over-dispersion.

The targets are exact Gaussians (and a mixture of two), whose log density a central finite
difference differentiates exactly up to rounding; so the mode and the covariance must come out
to near machine precision, and the tolerances below are rounding-level, not statistical. The
over-dispersion test is statistical; its tolerance is stated with it.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hawkes_cli.sampler import TieredSampler
from hawkes_cli.start import Mode, SearchSettings, StartResult, find_start, overdispersed_starts

MU = np.array([-1.0, 1.5, 0.5, -2.0, 1.0])
SD = np.array([0.3, 0.5, 0.4, 0.2, 0.3])
CORR = np.eye(5)
for (_i, _j), _r in {(0, 1): 0.95, (2, 4): 0.7, (3, 4): -0.4, (0, 3): 0.3, (1, 3): 0.25}.items():
    CORR[_i, _j] = CORR[_j, _i] = _r
COV = CORR * np.outer(SD, SD)
PREC = np.linalg.inv(COV)


def gauss(x: np.ndarray) -> float:
    r = x - MU
    return -0.5 * float(r @ PREC @ r)


def sub_gauss(x: np.ndarray) -> float:
    """A subsample stand-in: mode shifted by 0.2 sd, covariance 1.3 x wider."""
    r = x - MU - 0.2 * SD
    return -0.5 * float(r @ np.linalg.solve(1.3 * COV, r))


def cov_error(cov: np.ndarray, ref: np.ndarray) -> float:
    """Largest entry difference in units of the reference's sds."""
    s = np.sqrt(np.diag(ref))
    return float(np.abs((cov - ref) / np.outer(s, s)).max())


# Two modes in tau_t (coordinate 1), 4.2 log-units apart along the ridge, weights 0.3 / 0.7,
# each with covariance COV / 16 (34 sds apart).
BI_COV = COV / 16
BI_PREC = np.linalg.inv(BI_COV)
SHIFT = 4.2 * BI_COV[:, 1] / BI_COV[1, 1]


def bimodal(x: np.ndarray) -> float:
    a, b = x - MU, x - MU - SHIFT
    la = math.log(0.3) - 0.5 * float(a @ BI_PREC @ a)
    lb = math.log(0.7) - 0.5 * float(b @ BI_PREC @ b)
    m = max(la, lb)
    return m + math.log(math.exp(la - m) + math.exp(lb - m))


TAU_STARTS = MU[1] + np.array([-2.0, 0.0, 2.0, 4.0, 6.0])


def test_far_start_with_subsample_reaches_mode_and_curvature() -> None:
    """10 sds away: the subsample search gets close, the full Newton polish lands exactly."""
    result = find_start(gauss, MU + 3.0, subsample_log_post=sub_gauss, tau_starts=[0.0, 4.0])
    np.testing.assert_allclose(result.theta, MU, atol=1e-6 * SD.min())
    assert abs(result.log_post) < 1e-10
    assert result.hessian == "full" and result.n_clipped == 0
    # a central difference is exact on a quadratic: rounding-level agreement
    assert cov_error(result.cov_matrix, COV) < 1e-6
    # the subsample did the searching; the full posterior only the curvature and polish
    assert result.n_full_evals <= 1 + 1 + 2 * 5 + 2 * 5 * 4 + 2 * 5 + 4  # modes, Hessian, step
    assert result.n_sub_evals > 100
    assert len(result.modes) == 1 and result.modes[0].converged
    assert result.seconds > 0


def test_far_start_without_subsample() -> None:
    result = find_start(gauss, MU + 3.0, settings=SearchSettings(max_full_evals=300))
    np.testing.assert_allclose(result.theta, MU, atol=1e-6 * SD.min())
    assert cov_error(result.cov_matrix, COV) < 1e-6
    assert result.n_full_evals <= 300 and result.n_sub_evals == 0


def test_tau_starts_find_the_global_mode_and_record_both() -> None:
    """Started by the light mode; the tau_t starts find the heavy one, 4.2 log-units away.

    Modes other than the polished one are Nelder-Mead optima (tolerance 0.01 nats, about 0.15
    sd): they are checked to within 0.25 sd.
    """
    bi_sd = SD / 4
    theta0 = MU + 0.5 * bi_sd
    result = find_start(bimodal, theta0, subsample_log_post=bimodal, tau_starts=TAU_STARTS)
    np.testing.assert_allclose(result.theta, MU + SHIFT, atol=1e-6)
    # at a mode 34 sds from the other, the mixture's log density is the heavy Gaussian's
    assert abs(result.log_post - math.log(0.7)) < 1e-9
    assert cov_error(result.cov_matrix, BI_COV) < 1e-5
    assert len(result.modes) == 2
    light = result.modes[1]
    assert np.all(np.abs(np.array(light.theta) - MU) < 0.25 * bi_sd)
    assert light.log_post < result.log_post
    # the other mode, as a jump for the tiered sampler
    best, other = result.jump_modes()
    assert best == tuple(result.theta)
    assert np.all(np.abs(np.array(other) - np.array(best) + SHIFT) < 0.25 * bi_sd)
    TieredSampler(5, jump_modes=result.jump_modes())  # accepted as is


def test_full_budget_is_a_hard_cap() -> None:
    calls = 0

    def counted(x: np.ndarray) -> float:
        nonlocal calls
        calls += 1
        return gauss(x)

    result = find_start(
        counted, MU + 1.0, subsample_log_post=sub_gauss, settings=SearchSettings(max_full_evals=20)
    )
    assert calls == result.n_full_evals <= 20
    # no full Hessian fits in 20 calls: the subsample's curvature (1.3 x COV) stands in
    assert result.hessian == "subsample"
    assert cov_error(result.cov_matrix, 1.3 * COV) < 1e-5
    assert np.all(np.abs(result.theta - MU) < SD)


def test_support_edges_and_flat_directions() -> None:
    """-inf outside a box is never chosen; a flat coordinate gets the max_sd cap."""

    def boxed_flat(x: np.ndarray) -> float:
        if x[0] > MU[0] + 0.5:
            return -math.inf
        r = (x - MU)[:4]
        return -0.5 * float(r @ np.linalg.inv(COV[:4, :4]) @ r)  # nothing depends on x[4]

    result = find_start(
        boxed_flat, MU - 1.0, subsample_log_post=boxed_flat, settings=SearchSettings(max_sd=2.0)
    )
    np.testing.assert_allclose(result.theta[:4], MU[:4], atol=1e-5)
    assert result.n_clipped == 1
    cov = result.cov_matrix
    assert abs(cov[4, 4] - 4.0) < 1e-9 and np.allclose(cov[4, :4], 0, atol=1e-9)
    assert cov_error(cov[:4, :4], COV[:4, :4]) < 1e-5
    np.linalg.cholesky(cov)  # positive definite
    with pytest.raises(ValueError, match="not finite at any start"):
        find_start(boxed_flat, MU + 1.0, subsample_log_post=boxed_flat)


def test_start_result_json_round_trip() -> None:
    result = find_start(bimodal, MU, subsample_log_post=bimodal, tau_starts=TAU_STARTS[:3])
    text = json.dumps(result.to_json(), allow_nan=False)
    back = StartResult.from_json(json.loads(text))
    assert back == result
    mode = Mode((0.0, 1.0), math.nan, -2.5, (0.0, 0.0), converged=False)
    assert (
        Mode.from_json(json.loads(json.dumps(mode.to_json(), allow_nan=False))).converged is False
    )
    with pytest.raises(ValueError, match="schema"):
        StartResult.from_json({**result.to_json(), "schema": 7})


def test_overdispersed_starts_cover_the_posterior() -> None:
    """t(4) starts at twice the posterior width: covariance 2^2 * 4/(4-2) = 8 x COV.

    20,000 draws; the sample covariance of a t(4) has infinite fourth moments, so the check on
    it is loose (within 25%, against the 7x gap to an un-inflated start); the quantile
    checks are distribution-free binomial ones (sd 0.0035 at these counts).
    """
    result = StartResult(
        theta=tuple(MU.tolist()),
        log_post=0.0,
        cov=tuple(tuple(r) for r in COV.tolist()),
        hessian="full",
        n_clipped=0,
        n_sub_evals=0,
        n_full_evals=0,
        seconds=0.0,
        modes=(),
    )
    rng = np.random.default_rng(81)
    starts = overdispersed_starts(result, 20000, rng, scale=2.0, df=4.0)
    assert starts.shape == (20000, 5)
    ratio = np.diag(np.cov(starts.T)) / (8.0 * np.diag(COV))
    assert np.all(np.abs(ratio - 1) < 0.25), ratio
    # posterior Mahalanobis radius: a start is "inside the posterior bulk" below chi2_5 90%
    m2 = np.einsum("ij,jk,ik->i", starts - MU, PREC, starts - MU)
    inside = np.mean(m2 < 9.236)
    # over-dispersed (far fewer than 90% inside) yet covering the bulk (many inside)
    assert 0.1 < inside < 0.5, inside
    # and the same law with a normal: exactly 2^2 * chi2_5, P(4 chi2_5 < 9.236) = 0.2054
    normal = overdispersed_starts(result, 20000, rng, scale=2.0, df=math.inf)
    m2n = np.einsum("ij,jk,ik->i", normal - MU, PREC, normal - MU)
    assert abs(np.mean(m2n < 9.236) - 0.2054) < 0.015
    with pytest.raises(ValueError, match="n_chains"):
        overdispersed_starts(result, 0, rng)


def test_curvature_primes_the_tiered_sampler() -> None:
    """With the start's covariance the tiered kernel is well scaled before any adaptation.

    Frozen (adapt=False) from the first step: the expensive move's acceptance is near its
    0.35 target (2.38^2/2 scaling of the exact marginal covariance gives about 0.35 on a
    Gaussian), far from the 0.01 or 0.95 of a badly scaled start. 1,000 steps: binomial sd
    about 0.015 (the chain's autocorrelation at most doubles it).
    """
    result = find_start(gauss, MU + 2.0, subsample_log_post=sub_gauss)
    sampler = TieredSampler(5)
    state = sampler.init(result.theta, result.log_post, cov=result.cov_matrix)
    rng = np.random.default_rng(91)
    accepted = 0
    for _ in range(1000):
        state, info = sampler.step(state, gauss, rng, adapt=False)
        accepted += info.accepted
    assert 0.25 < accepted / 1000 < 0.45, accepted / 1000


def test_cheap_polish_reaches_the_conditional_mode_holding_the_rest() -> None:
    """Step 2b on the Gaussian: from a point 2 sds off in every coordinate, the cheap block
    (0, 2) goes to its conditional mode given the held coordinates, the conditional mean
    ``MU_c + S_ce S_ee^-1 (x_e - MU_e)`` computed here by hand; the held ones do not move.
    Tolerance: Nelder-Mead's xatol (1e-2, log scale) in units of the conditional sds."""
    from hawkes_cli.start.search import polish_cheap

    c, e = [0, 2], [1, 3, 4]
    x0 = MU + 2.0 * SD
    x, fx, n = polish_cheap(gauss, x0, gauss(x0), c, 0.5, 300)
    want = MU[c] + COV[np.ix_(c, e)] @ np.linalg.solve(COV[np.ix_(e, e)], x0[e] - MU[e])
    cond_sd = np.sqrt(np.diag(np.linalg.inv(PREC[np.ix_(c, c)])))
    assert np.all(np.abs(x[c] - want) < 0.05 * cond_sd)
    np.testing.assert_array_equal(x[e], x0[e])
    assert fx > gauss(x0) and 0 < n <= 300


def test_cheap_polish_runs_after_a_subsample_search_only() -> None:
    """With a subsample whose cheap coordinates are biased by 3 sds, find_start polishes them on
    the full posterior (counted apart from the full budget) and still lands on the mode; without
    a subsample (the search was on the full posterior) nothing is polished."""

    def biased(x: np.ndarray) -> float:
        r = x - MU - 3.0 * SD * np.array([1, 0, 1, 0, 0])
        return -0.5 * float(r @ PREC @ r)

    result = find_start(gauss, MU + 1.0, subsample_log_post=biased, cheap=(0, 2))
    assert result.n_cheap_evals > 0
    np.testing.assert_allclose(result.theta, MU, atol=1e-6 * SD.min())
    assert StartResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    plain = find_start(gauss, MU + 1.0, cheap=(0, 2), settings=SearchSettings(max_full_evals=300))
    assert plain.n_cheap_evals == 0
    # a start recorded before the field existed still reads (as 0 cheap evaluations)
    old = result.to_json()
    del old["n_cheap_evals"]
    assert StartResult.from_json(old).n_cheap_evals == 0


def test_block_polish_moves_the_expensive_block_the_5d_polish_left() -> None:
    """Step 3b. The expensive block (3, 4) has quartic walls, ``r^2/2 + r^4/4`` per sd, so one
    Newton step from 8 sds away undershoots (it lands near 5.4 sds). With the 5-d polish held
    to that one step and a subsample biased by 8 sds in the block, the block polish still takes
    the block to the mode, and the curvature is taken again there. Tolerance 0.1 sd: the
    cheap polish is a Nelder-Mead (xatol 1e-2 on the log scale), and its error moves the
    block's conditional mode through the correlations; the unpolished block is more than 1 sd
    off."""
    e = [3, 4]

    def walled(x: np.ndarray) -> float:
        r = (x[e] - MU[e]) / SD[e]
        return gauss(x) - 0.25 * float(np.sum(r**4))

    def biased(x: np.ndarray) -> float:
        return gauss(x - 8.0 * SD * np.array([0, 0, 0, 1, 1]))

    held = SearchSettings(polish_rounds=1)
    result = find_start(walled, MU + 1.0, subsample_log_post=biased, cheap=(0, 1, 2), settings=held)
    assert np.all(np.abs(result.theta - MU) < 0.1 * SD)
    assert result.hessian == "full"
    # the curvature at the mode, on finite-difference steps of about 1 nat: the walls narrow
    # the block, but far less than at the undershot point 5 sds out (0.07 of SD's there)
    block_sd = np.sqrt(np.diag(result.cov_matrix))[e]
    assert np.all((block_sd < SD[e]) & (block_sd > 0.5 * SD[e]))
    # without the cheap block named, there is no block polish, and the block stays off
    plain = find_start(walled, MU + 1.0, subsample_log_post=biased, settings=held)
    assert np.max(np.abs(plain.theta - MU)[e] / SD[e]) > 1.0
