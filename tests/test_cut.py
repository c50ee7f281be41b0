"""``hawkes-diagnose --cut-check`` against a cut posterior computed by brute force.

The problem: about 370 events of model 1 simulated with known parameters in a 10 x 10 square of
100 synthetic counties (cells 1 x 1; trigger sd 0.5). Each location redraw (every event uniform
in its cell) blurs the clusters differently, so the conditional posterior p(theta | X, times)
moves between draws: the between-draw sd of log sigma_x is about 60% of the within-draw one,
and its cut sd 19% above the within-draw sd.

The brute force shares nothing with the check but the location draws: no Newton step, no finite
difference, no Gaussian assumption. For each location draw it computes the conditional mean,
variance and skewness of every log-parameter by self-normalised importance sampling, with the
log-likelihood vectorised over the samples in numpy float64 (checked against the reference
engine, :mod:`hawkes_cli.engine.reference`, to 1e-5 nats). The proposal is a multivariate t
(5 degrees of freedom) drawn in nested form (120 values of (sigma_x, sigma_t), each with 50 of
(mu0, tau_t, xi0) from the t's conditional: one trigger sum per 50 points), fitted by one round
of adaptive importance sampling on 8 other draws and widened 1.3 times; its start (the chains'
mean and covariance, widened 2 times) is a tuning choice that the weights correct for. Every
draw keeps an ESS of the trigger blocks above 25 (median about 60 of 120; the cheap blocks'
is larger).

Tolerances, and why they are what they are (seeded: the numbers are the same on every run):

- The check on the brute force's own location draws (the same seeded draws,
  :func:`hawkes_cli.cutcheck.cut_locations`): the location Monte Carlo error cancels; what is
  left is the Gaussian reference's own error, O(1/N) (at ~370 events a conditional posterior's
  skewness is about 0.2, and a curvature over +-2 sd need not be its variance), and the
  importance sampling error (about 2.5% on a mean of 50 trigger-block variances at an ESS of
  60, less for the cheap block). Measured: within-draw variances +7% (tau_t) and -4% to -1%
  (the others), between-draw variances within 1.2% of the within-draw variance, cut variances
  within 5.5%. So the within-draw and cut variances must agree within 10%, and the
  between-draw variances within 6% of the within-draw variance. A check that left out the
  between-draw variance would be 29% low in sigma_x's cut variance, one with a 15% error in
  the curvature 15% off in every within variance: both fail.
- The chains against the brute-force cut sd (chains that redraw every 10 iterations; with the
  shipped every-iteration scheme and one trigger move per redraw this problem's chains are 4-9%
  too wide, see ``benchmarks/results/cut-small.txt``): both carry Monte Carlo error, the
  chains' MCSE of the sd and the brute force's jackknife se over its 50 location draws; they
  must agree within 3 combined se (a 0.3% chance of failing per parameter when both are right).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace

import numpy as np
import pytest
import yaml
from scipy import special

from hawkes_cli.config import load_config
from hawkes_cli.cutcheck import (
    CutSettings,
    conditional_laplace,
    cut_locations,
    importance_sds,
    run_cut_check,
)
from hawkes_cli.data import save_events
from hawkes_cli.diagnostics import DiagnoseOptions, load_draws
from hawkes_cli.diagnostics.cut import (
    KURTOSIS_LIMIT,
    SKEW_LIMIT,
    Conditional,
    is_factor,
    jackknife_sds,
    mcse_sd,
    summarise_cut,
)
from hawkes_cli.diagnostics.cut_text import format_cut
from hawkes_cli.engine import make_likelihood
from hawkes_cli.errors import UsageError
from hawkes_cli.model import Params
from hawkes_cli.regions import polygons_for
from hawkes_cli.runner import run_chain
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.vocab import PARAM_NAMES

BOUNDS = (0.0, 10.0, 0.0, 10.0)
TRUTH = Params(mu0=0.5, tau_t=30.0, xi0=0.5, sigma_x=0.5, sigma_t=4.0)
T_END = 200.0
AREA = 100.0
K = 50  # location draws of the check (its default)
SEED = 3  # the run's seed: the check's draws are SeedSequence(SEED, spawn_key=(KEY, k))


# --------------------------------------------------------------------------- brute force


class ExactConditional:
    """The log-likelihood of model 1 (no edge correction) at many parameter values at once.

    The background sums depend on ``tau_t`` and the times only: they are computed once on a
    grid of ``log tau_t`` and read by a cubic spline (:meth:`background`; checked against the
    direct sum in :func:`test_brute_force_is_the_reference_engine`, 1e-9 nats); the trigger sums
    once per value of ``(sigma_x, sigma_t)`` at the current locations.
    """

    def __init__(self, t: np.ndarray, window_end: float, area: float, log_tau: np.ndarray):
        from scipy.interpolate import CubicSpline

        t = np.asarray(t, dtype=np.float64)
        self.t, self.window_end, self.rho, self.n = t, float(window_end), 1.0 / area, t.size
        i, j = np.nonzero(t[:, None] != t[None, :])  # the background skips ties
        self.b_row, self.b_dt = i, t[i] - t[j]
        i, j = np.nonzero(t[None, :] < t[:, None])  # strictly earlier sources
        self.e_row, self.e_src, self.e_dt = i, j, t[i] - t[j]
        self.log_tau = np.asarray(log_tau, dtype=np.float64)
        tau = np.exp(self.log_tau)[:, None]
        mass = special.ndtr((self.window_end - t) / tau) - special.ndtr(-t / tau)
        # per grid value: B of every row, then the background's compensator mass (sum over rows)
        table = np.hstack([self.background_sum(tau[:, 0]), mass.sum(axis=1)[:, None]])
        self.spline = CubicSpline(self.log_tau, table, axis=0)

    def background_sum(self, tau: np.ndarray) -> np.ndarray:
        """``B`` (rows) of each ``tau``, summed directly: ``(len(tau), N)``."""
        out = np.empty((tau.size, self.n))
        for k, s in enumerate(tau):
            w = np.exp(-0.5 * (self.b_dt / s) ** 2) * (self.rho / (math.sqrt(2 * math.pi) * s))
            out[k] = np.bincount(self.b_row, weights=w, minlength=self.n)
        return out

    def background(self, log_tau: np.ndarray) -> np.ndarray:
        """``B`` of each ``log tau_t`` (any shape ``S``) by the spline, and last the
        compensator's mass ``sum_n Phi((T - t_n)/tau_t) - Phi(-t_n/tau_t)``: ``S + (N + 1,)``;
        NaN outside the grid."""
        inside = (log_tau >= self.log_tau[0]) & (log_tau <= self.log_tau[-1])
        b = self.spline(np.where(inside, log_tau, self.log_tau[0]))
        b[~inside] = np.nan
        return b

    def trigger(self, x: np.ndarray, y: np.ndarray, e: np.ndarray) -> np.ndarray:
        """``E`` (rows) of each ``(log sigma_x, log sigma_t)`` row of ``e``: ``(M, N)``."""
        sx, st = np.exp(np.atleast_2d(e)).T
        r2 = (x[self.e_row] - x[self.e_src]) ** 2 + (y[self.e_row] - y[self.e_src]) ** 2
        out = np.empty((sx.size, self.n))
        for m in range(sx.size):
            w = np.exp(-self.e_dt / st[m] - r2 / (2 * sx[m] ** 2)) / (
                2 * math.pi * sx[m] ** 2 * st[m]
            )
            out[m] = np.bincount(self.e_row, weights=w, minlength=self.n)
        return out

    def loglik(self, x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Log-likelihoods of ``theta`` ``(M, L, 5)``: row ``m`` shares its trigger block
        ``theta[m, :, 3:]`` (one trigger sum per row), the cheap blocks are free."""
        e = theta[:, 0, 3:]
        assert np.all(theta[..., 3:] == e[:, None, :]), "one trigger block per row"
        trig = self.trigger(x, y, e)  # (M, N)
        mu0, xi0 = np.exp(theta[..., 0]), np.exp(theta[..., 2])
        table = self.background(theta[..., 1])  # (M, L, N + 1)
        lam = mu0[..., None] * table[..., :-1] + xi0[..., None] * trig[:, None, :]
        comp_e = (1.0 - np.exp(-(self.window_end - self.t) / np.exp(e[:, 1])[:, None])).sum(1)
        logs = np.log(np.maximum(lam, 1e-40)).sum(axis=-1)
        out = logs - mu0 * table[..., -1] - xi0 * comp_e[:, None]
        # off the grid (10 posterior sds of log tau_t and more away): no target mass there
        return np.where(np.isnan(out), -np.inf, out)


def _log_prior(theta: np.ndarray) -> np.ndarray:
    """The run's prior: N(0, 1) on each log-parameter (the default), over the last axis."""
    return -0.5 * np.sum(theta**2, axis=-1)


CHEAP, TRIG = [0, 1, 2], [3, 4]
DF = 5.0  # degrees of freedom of the multivariate t proposal


class Proposal:
    """A multivariate t (``DF``) over the five log-parameters, drawn in nested form: ``m``
    trigger blocks from its marginal, then ``n`` cheap blocks from its conditional given each
    (every point is a draw from the joint t; a trigger block's sum serves its ``n`` points)."""

    def __init__(self, mean: np.ndarray, cov: np.ndarray) -> None:
        self.mean, self.cov = np.asarray(mean, dtype=float), np.asarray(cov, dtype=float)
        s = self.cov
        self.see = s[np.ix_(TRIG, TRIG)]
        self.gain = s[np.ix_(CHEAP, TRIG)] @ np.linalg.inv(self.see)
        self.scc = s[np.ix_(CHEAP, CHEAP)] - self.gain @ s[np.ix_(TRIG, CHEAP)]

    def draw(self, rng: np.random.Generator, m: int, n: int) -> np.ndarray:
        """``(m, n, 5)`` points."""
        mu_e = self.mean[TRIG]
        z = rng.standard_normal((m, 2)) @ np.linalg.cholesky(self.see).T
        e = mu_e + z / np.sqrt(rng.chisquare(DF, m) / DF)[:, None]
        d = e - mu_e
        maha = np.einsum("mi,ij,mj->m", d, np.linalg.inv(self.see), d)
        scale = np.sqrt((DF + maha) / (DF + 2))  # the t's conditional: DF + 2, wider far out
        zc = rng.standard_normal((m, n, 3)) @ np.linalg.cholesky(self.scc).T
        wc = np.sqrt(rng.chisquare(DF + 2, (m, n)) / (DF + 2))
        c = self.mean[CHEAP] + d @ self.gain.T
        theta = np.empty((m, n, 5))
        theta[..., CHEAP] = c[:, None, :] + scale[:, None, None] * zc / wc[..., None]
        theta[..., TRIG] = e[:, None, :]
        return theta

    def logpdf(self, theta: np.ndarray) -> np.ndarray:
        d = theta - self.mean
        chol = np.linalg.cholesky(self.cov)
        z = np.linalg.solve(chol, d.reshape(-1, 5).T)
        q = np.sum(z * z, axis=0).reshape(theta.shape[:-1])
        norm = (
            special.gammaln((DF + 5) / 2) - special.gammaln(DF / 2) - 2.5 * math.log(DF * math.pi)
        )
        return norm - np.log(np.diag(chol)).sum() - (DF + 5) / 2 * np.log1p(q / DF)


def conditional_moments(exact, proposal, x, y, rng, m: int = 120, n: int = 50):
    """Self-normalised importance sampling of one conditional posterior: the mean ``(5,)``,
    covariance ``(5, 5)`` and skewness ``(5,)`` of the log-parameters, and the ESS of the
    trigger blocks (of the ``m``; the cheap blocks' is larger)."""
    theta = proposal.draw(rng, m, n)
    lw = exact.loglik(x, y, theta) + _log_prior(theta) - proposal.logpdf(theta)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    ess = 1.0 / np.sum(w.sum(axis=1) ** 2)
    w, th = w.ravel(), theta.reshape(-1, 5)
    mu = w @ th
    dev = th - mu
    cov = dev.T @ (dev * w[:, None])
    skew = (w @ dev**3) / np.diag(cov) ** 1.5
    return mu, cov, skew, ess


# --------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    """The events, a run of 2 tiered chains that redraw the locations every 10 iterations (and
    4 cheap moves an iteration, to keep the test short), and its cut check with 50 Newton
    draws."""
    tmp = tmp_path_factory.mktemp("cut")
    grid = DensityGrid.log_uniform(BOUNDS, 10, 10, 1.0, 10.0, seed=2)
    data = simulate(TRUTH, model=1, n_background=200, t_end=T_END, bounds=BOUNDS, seed=4, grid=grid)
    save_events(data, tmp / "events.h5")
    cfg = {
        "data": {"events": str(tmp / "events.h5"), "window_end": T_END},
        "model": {"kind": 1, "edge": "none"},
        "sampler": {"kind": "tiered", "iterations": 2000, "warmup": 300, "seed": SEED,
                    "resample_every": 10, "n_cheap": 4},
        "chains": {"count": 2},
        "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
        "output": {"run_dir": str(tmp / "run"), "commit_every": 600},
    }  # fmt: skip
    (tmp / "run.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp / "run.yaml")
    for chain in range(config.chains.count):
        assert run_chain(config, chain).finished
    check = run_cut_check(config.output.run_dir, DiagnoseOptions(cut_draws=K, cut_newton_draws=K))
    draws = load_draws(config.output.run_dir)
    logs = np.stack([np.log(np.concatenate(draws.variables[n])) for n in PARAM_NAMES], axis=1)
    return {"config": config, "data": data, "check": check, "draws": logs}


@pytest.fixture(scope="module")
def exact(problem):
    """The brute force on the check's own 50 location draws: per draw the conditional mean,
    variance and skewness of each log-parameter, and the importance sampling ESS."""
    data, draws = problem["data"], problem["draws"]
    rng = np.random.default_rng(11)
    # the proposal is a tuning choice (importance sampling corrects for it): the chains'
    # mean and covariance widened 2 times, then one round of adaptation on 8 other draws
    proposal = Proposal(draws.mean(axis=0), 4.0 * np.cov(draws.T))
    centre = proposal.mean[1]
    ex = ExactConditional(data.time, T_END, AREA, np.linspace(centre - 5, centre + 5, 241))
    polys = polygons_for(data)
    codes = polys.codes(data.fips)
    res = [conditional_moments(ex, proposal, *polys.sample(codes, rng), rng) for _ in range(8)]
    means = np.array([r[0] for r in res])
    cov = np.mean([r[1] for r in res], axis=0) + np.cov(means.T)
    proposal = Proposal(means.mean(axis=0), 1.3**2 * cov)
    res = [
        conditional_moments(ex, proposal, *cut_locations(polys, codes, SEED, k), rng)
        for k in range(K)
    ]
    return {
        "mean": np.array([r[0] for r in res]),
        "var": np.array([np.diag(r[1]) for r in res]),
        "skew": np.array([r[2] for r in res]),
        "ess": np.array([r[3] for r in res]),
    }


@pytest.mark.opencl
def test_brute_force_is_the_reference_engine(problem):
    """The vectorised log-likelihood (background by the spline) equals the reference engine's
    at other locations and parameters: the brute force computes the run's posterior."""
    data = problem["data"]
    theta0 = np.log([TRUTH.mu0, TRUTH.tau_t, TRUTH.xi0, TRUTH.sigma_x, TRUTH.sigma_t])
    ex = ExactConditional(data.time, T_END, AREA, np.linspace(theta0[1] - 5, theta0[1] + 5, 241))
    lik = make_likelihood(data, model=1, area=AREA, engine="reference", window_end=T_END)
    polys = polygons_for(data)
    x, y = cut_locations(polys, polys.codes(data.fips), SEED, 7)
    lik.set_locations(x, y)
    rng = np.random.default_rng(5)
    theta = np.repeat(theta0 + 0.3 * rng.standard_normal((2, 1, 5)), 3, axis=1)  # (2, 3, 5)
    theta[:, :, CHEAP] += 0.3 * rng.standard_normal((2, 3, 3))
    got = ex.loglik(x, y, theta)
    for m in range(2):
        for c in range(3):
            want = lik.loglik(Params(*np.exp(theta[m, c])))
            assert got[m, c] == pytest.approx(want, rel=0, abs=1e-5)


@pytest.mark.opencl
def test_the_check_draws_locations_uniformly_in_each_county(problem):
    """Draw k of the check puts every event inside its own 1 x 1 cell, away from the file's
    point, differently for each k and the same whatever K is (its own seed)."""
    data = problem["data"]
    polys = polygons_for(data)
    codes = polys.codes(data.fips)
    cell = codes.astype(int)  # grid cell k = iy * 10 + ix covers [ix, ix + 1] x [iy, iy + 1]
    x0, y0 = cut_locations(polys, codes, SEED, 0)
    x1, _ = cut_locations(polys, codes, SEED, 1)
    for x, y in ((x0, y0),):
        assert np.all((np.floor(x) == cell % 10) & (np.floor(y) == cell // 10))
    assert not np.allclose(x0, data.x) and not np.allclose(x0, x1)
    np.testing.assert_array_equal(cut_locations(polys, codes, SEED, 0)[0], x0)
    # uniform within the cells: the offsets from the cell corner are U(0, 1) in each coordinate
    u = np.concatenate([x0 - cell % 10, y0 - cell // 10])
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / u.size)


@pytest.mark.opencl
def test_the_check_is_the_brute_force_on_the_same_draws(problem, exact):
    """The Gaussian reference against the exact conditional moments of the same 50 draws
    (tolerances: module docstring)."""
    check = problem["check"]
    assert all(c.ok for c in check.conditionals), [c.status for c in check.conditionals]
    assert exact["ess"].min() > 25, exact["ess"].min()  # the brute force is trustworthy
    assert np.abs(exact["skew"]).mean() < 0.3  # moderately Gaussian conditionals
    for i, name in enumerate(PARAM_NAMES):
        row = check.row(name)
        within = float(np.mean(exact["var"][:, i]))
        between = float(np.var(exact["mean"][:, i], ddof=1))
        assert row.within_sd**2 == pytest.approx(within, rel=0.10), name
        assert abs(row.between_sd**2 - between) < 0.06 * within, name
        assert row.cut_sd**2 == pytest.approx(within + between, rel=0.10), name
    # the location uncertainty is no small part of sigma_x's cut variance here
    sx = check.row("sigma_x")
    assert sx.between_sd > 0.5 * sx.within_sd


@pytest.mark.opencl
def test_the_linear_modes_give_the_brute_force_between_draw_sd(problem, exact):
    """The default scheme (Newton on the first 20 draws, a linear mode on all 50) against the
    brute force on the same 50 draws: the double-sampling between-draw variance is the brute
    force's within the Newton reference's own tolerance (6% of the within-draw variance,
    module docstring); its first 20 draws are the all-Newton check's."""
    run = problem["config"].output.run_dir
    lin = run_cut_check(run, DiagnoseOptions(cut_draws=K, cut_newton_draws=20))
    newton = problem["check"]
    assert [c.status for c in lin.conditionals] == ["ok"] * 20 + ["linear"] * (K - 20)
    for got, want in zip(lin.conditionals[:20], newton.conditionals[:20], strict=True):
        assert got.mode == pytest.approx(want.mode, abs=1e-9)
    for i, name in enumerate(PARAM_NAMES):
        row = lin.row(name)
        within = float(np.mean(exact["var"][:, i]))
        between = float(np.var(exact["mean"][:, i], ddof=1))
        assert row.within_sd**2 == pytest.approx(within, rel=0.10), name
        assert row.between_draws == K
        # the Newton reference's tolerance, plus 3 of the double-sampling estimate's own se
        # (at 370 events the proxy's correlation is 0.96: 20 pairs leave a 6% slope error)
        slack = 0.06 * within + 3 * 2 * row.between_sd * row.between_se
        assert abs(row.between_sd**2 - between) < slack, name
        # the proxy follows the exact conditional means (measured 0.95-0.98)
        linear = np.array([c.linear[i] for c in lin.conditionals])
        assert np.corrcoef(linear, exact["mean"][:, i])[0, 1] > 0.9, name
    assert "over all 50 draws" in format_cut(lin)


def test_double_sampling_is_unbiased_with_a_poor_proxy():
    """J = 20 Newton modes, K = 200 linear modes correlated 0.5 with them: the mean variance
    estimate over 4,000 seeded replicates is the true 1 within 1.6% (3 se of that mean: the
    estimate's own sd is about 0.33; measured 0.999). Without the slope-bias correction
    (``E[b^2] = beta^2 + sigma_e^2 / Sxx``) it is about 1.03-1.04, a miss."""
    from hawkes_cli.diagnostics.cut import _double_sampling

    rng = np.random.default_rng(12)
    rho, est = 0.5, []
    for _ in range(4000):
        x = rng.standard_normal(200)
        y = rho * x[:20] + math.sqrt(1 - rho**2) * rng.standard_normal(20)
        est.append(_double_sampling(x, y) ** 2)
    assert abs(np.mean(est) - 1.0) < 0.016, np.mean(est)


@pytest.mark.opencl
def test_a_failed_linear_mode_keeps_the_newton_draws(problem, monkeypatch, caplog):
    """Where a linear mode cannot be computed (a log posterior not finite near the mean mode),
    the check keeps its Newton draws and says so, instead of failing after their cost."""
    import hawkes_cli.cutcheck as cutcheck

    def nowhere(log_post, theta0, cov):
        raise ValueError("the log posterior is not finite")

    monkeypatch.setattr(cutcheck, "linear_mode", nowhere)
    run = problem["config"].output.run_dir
    check = cutcheck.run_cut_check(run, DiagnoseOptions(cut_draws=8, cut_newton_draws=4))
    assert [c.status for c in check.conditionals] == ["ok"] * 4
    assert all(r.between_draws == 4 and math.isnan(r.linear_slope) for r in check.rows)
    assert "no linear modes" in caplog.text
    with pytest.raises(ValueError, match="not finite"):
        cutcheck.linear_mode(lambda t: -math.inf, np.zeros(5), np.eye(5))


def test_the_between_draw_sd_by_double_sampling():
    """Newton draws whose linear modes are their modes shifted: the between-draw sd is that of
    all draws' linear modes; a parameter whose linear modes are twice as spread: half theirs;
    one whose linear modes are noise: about the Newton draws' own (by hand, numpy)."""
    rng = np.random.default_rng(3)
    newton = _conditionals(rng, 20, within=0.1, between=0.05)
    modes = np.array([c.mode for c in newton])
    lin = rng.normal(0.0, 0.05, (60, 5))
    lin[:20] = modes + 0.01  # a constant shift
    lin[:20, 1] = 2.0 * modes[:, 1]  # tau_t: twice the spread
    lin[20:, 1] *= 2.0
    conds = [replace(c, linear=tuple(lin[k])) for k, c in enumerate(newton)]
    conds += [Conditional(tuple(x), None, "linear", linear=tuple(x)) for x in lin[20:]]
    chains = {n: 0.11 * rng.standard_normal((4, 500)) for n in PARAM_NAMES}
    out = summarise_cut(conds, chains, PARAM_NAMES)
    sx, tau = out.row("sigma_x"), out.row("tau_t")
    assert sx.between_draws == 60 and sx.between_sd == pytest.approx(np.std(lin[:, 3], ddof=1))
    assert sx.linear_slope == pytest.approx(1.0) and sx.linear_corr == pytest.approx(1.0)
    assert tau.between_sd == pytest.approx(0.5 * np.std(lin[:, 1], ddof=1))
    assert tau.linear_slope == pytest.approx(0.5)
    assert sx.within_sd == pytest.approx(0.1)
    assert sx.cut_sd == pytest.approx(math.hypot(0.1, sx.between_sd))
    # jackknife se of a between-draw sd of 60 Gaussian draws: about sd / sqrt(2 * 59)
    assert 0.5 < sx.between_se / (sx.between_sd / math.sqrt(118)) < 2.0
    # linear modes unrelated to the modes: the residual carries the Newton draws' variance
    noise = [replace(c, linear=tuple(rng.normal(0.0, 0.05, 5))) for c in newton]
    noise += [Conditional(tuple(x), None, "linear", linear=tuple(x)) for x in lin[20:]]
    out = summarise_cut(noise, chains, PARAM_NAMES)
    for i, name in enumerate(PARAM_NAMES):
        row = out.row(name)
        assert abs(row.linear_corr) < 0.6  # 20 pairs of independent draws
        assert row.between_sd == pytest.approx(np.std(modes[:, i], ddof=1), rel=0.35), name
    assert "double sampling" in format_cut(out)


@pytest.mark.opencl
def test_the_chains_sample_the_cut_posterior(problem, exact):
    """With 10 iterations (10 trigger moves, 40 cheap ones) per location redraw the chains'
    sd of each log-parameter is the brute-force cut sd within 3 combined se."""
    check = problem["check"]
    for i, name in enumerate(PARAM_NAMES):
        sds = jackknife_sds(exact["mean"][:, i], exact["var"][:, i])
        cut_sd, cut_se = sds["cut"]
        row = check.row(name)
        combined = math.hypot(row.chains_se, cut_se)
        assert abs(row.chains_sd - cut_sd) < 3 * combined, (name, row.chains_sd, cut_sd, combined)


@pytest.mark.opencl
def test_the_importance_samples_are_the_brute_force_on_their_draws(problem, exact):
    """A check of 3 draws with ``--cut-is-draws 2``: its importance samples against the brute
    force's conditional sds of the same draws (the check's first draws are the same whatever
    K is), within 4 combined se (the brute force's se from its own ESS, sqrt((kurtosis - 1) /
    (4 ESS)) relative with kurtosis 3); each row's within-draw sd is the Laplace one times the
    factor they give. Without the option, no draw is sampled."""
    assert all(c.is_sd is None for c in problem["check"].conditionals)
    run_dir = problem["config"].output.run_dir
    check = run_cut_check(run_dir, DiagnoseOptions(cut_draws=3, cut_is_draws=2))
    sampled = [k for k, c in enumerate(check.conditionals) if c.is_sd is not None]
    assert sampled == [0, 1]
    for k in sampled:
        c = check.conditionals[k]
        assert c.is_ess > 300, c.is_ess
        # the importance points count among the draw's evaluations
        points = CutSettings().is_outer * CutSettings().is_inner
        assert c.evaluations == problem["check"].conditionals[k].evaluations + points
        for i, name in enumerate(PARAM_NAMES):
            want = math.sqrt(exact["var"][k, i])
            want_se = want * math.sqrt(2.0 / (4.0 * exact["ess"][k]))
            assert abs(c.is_sd[i] - want) < 4 * math.hypot(c.is_sd_se[i], want_se), (k, name)
    for i, name in enumerate(PARAM_NAMES):
        row = check.row(name)
        laplace = math.sqrt(np.mean([c.cov[i][i] for c in check.conditionals]))
        assert row.within_sd == pytest.approx(row.is_factor * laplace, rel=1e-9), name
        assert 0 < row.is_factor_se < 0.1, name


# --------------------------------------------------------------------------- the pieces


def test_importance_sampling_finds_the_sds_of_a_skewed_posterior():
    """Five independent log-gamma coordinates (shapes 2, 4, 30, 3, 8: skewness -0.78 to
    -0.18): the importance-sampled sds are the exact ones (sqrt of the trigamma function) within
    4 se, where the Laplace sd 1 / sqrt(a) is 14% low for shape 2; the skewnesses (the
    tetragamma over trigamma^1.5) are negative, within 0.25 on mu0, tau_t and xi0's places."""
    a = np.array([2.0, 4.0, 30.0, 3.0, 8.0])

    def log_post(y: np.ndarray) -> float:
        return float(np.sum(a * y - np.exp(y)))

    settings = CutSettings(is_outer=400, is_inner=16)
    sample = importance_sds(log_post, np.log(a), np.diag(1.0 / a), settings,
                            np.random.default_rng(3))  # fmt: skip
    sd = np.sqrt(special.polygamma(1, a))
    skew = special.polygamma(2, a) / special.polygamma(1, a) ** 1.5
    assert np.all(np.abs(sample.sd - sd) < 4 * sample.sd_se), (sample.sd, sd, sample.sd_se)
    # 400 outer values: about 1 / sqrt(2 * 400) = 3.5% relative error for sigma_x, sigma_t
    assert np.all(sample.sd_se < 0.05 * sd)
    assert sd[0] * math.sqrt(a[0]) > 1.13  # the Laplace sd is far off here...
    assert abs(sample.sd[0] * math.sqrt(a[0]) - 1) > 0.08  # ...and the sample sees it
    # a third moment from weighted tails is noisier than the sd (about 0.1 for the cheap
    # coordinates' 6,400 points, 0.15+ for the 400 outer values): its sign everywhere, and
    # within 0.25 on the cheap coordinates
    assert np.all(sample.skewness < 0), sample.skewness
    assert np.all(np.abs(sample.skewness - skew)[:3] < 0.25), (sample.skewness, skew)
    assert sample.ess > 0.3 * 400 * 16


def test_importance_sampling_nowhere_finite_is_a_usage_error():
    """A conditional posterior that is -inf at every proposal point gives one clear error, not
    a division by zero or NaN sds."""
    settings = CutSettings(is_outer=4, is_inner=2)
    with pytest.raises(UsageError, match="not finite at any of the 8 importance points"):
        importance_sds(lambda y: -math.inf, np.zeros(5), np.eye(5), settings,
                       np.random.default_rng(0))  # fmt: skip


def test_the_importance_factor_scales_every_draws_laplace_variance():
    """Hand computation: 4 draws of Laplace sd 0.2 (coordinate 0), two importance-sampled
    at sds 0.18 and 0.19 (se 0.004 each): factor sqrt((0.9^2 + 0.95^2) / 2), its se the larger
    of the propagated one and the two ratios' spread, and the within-draw sd 0.2 times it."""
    cov = tuple(tuple(0.04 if i == j else 0.0 for j in range(2)) for i in range(2))
    plain = [Conditional((0.1 * k, 0.0), cov) for k in range(4)]
    sampled = [
        replace(plain[0], is_sd=(0.18, 0.2), is_sd_se=(0.004, 0.004), is_ess=900.0),
        replace(plain[1], is_sd=(0.19, 0.2), is_sd_se=(0.004, 0.004), is_ess=900.0),
    ]
    conds = sampled + plain[2:]
    f, f_se = is_factor(conds, 0)
    q = np.array([0.9**2, 0.95**2])
    assert f == pytest.approx(math.sqrt(q.mean()), rel=1e-12)
    propagated = math.sqrt((2 * 0.9 * 0.02) ** 2 + (2 * 0.95 * 0.02) ** 2) / 2
    assert f_se == pytest.approx(max(propagated, q.std(ddof=1) / math.sqrt(2)) / (2 * f))
    assert is_factor(plain, 0) == (1.0, 0.0)
    chains = {n: np.zeros((2, 10)) + np.arange(10) for n in ("a", "b")}
    check = summarise_cut(conds, chains, ("a", "b"))
    assert check.row("a").within_sd == pytest.approx(0.2 * f, rel=1e-12)
    assert check.row("b").is_factor == pytest.approx(1.0)
    jk = jackknife_sds(np.array([c.mode[0] for c in conds]), np.full(4, 0.04 * f * f))
    assert check.row("a").within_se == pytest.approx(math.hypot(jk["within"][1], 0.2 * f_se))
    assert "importance-sampled" in format_cut(check)


def _gaussian(mean: np.ndarray, cov: np.ndarray):
    prec = np.linalg.inv(cov)
    return lambda th: -0.5 * float((th - mean) @ prec @ (th - mean))


def test_newton_finds_a_gaussian_mode_and_covariance():
    """On a correlated 5-d Gaussian the central differences are exact: from 1.5 sds away, the
    mode and covariance come out to rounding, in two Newton steps."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 5))
    cov = a @ a.T / 5 + 0.05 * np.eye(5)
    mean = rng.standard_normal(5)
    sd = np.sqrt(np.diag(cov))
    cond, _ = conditional_laplace(_gaussian(mean, cov), mean + 1.5 * sd, sd, CutSettings())
    assert cond.ok and cond.newton_steps == 2
    np.testing.assert_allclose(cond.mode, mean, atol=1e-6 * sd.max())
    np.testing.assert_allclose(np.array(cond.cov), cov, rtol=1e-5, atol=1e-7)


def test_newton_refuses_a_saddle_and_a_budget_overrun():
    saddle = lambda th: -0.5 * th[0] ** 2 + 0.5 * th[1] ** 2 - 0.5 * float(th[2:] @ th[2:])  # noqa: E731
    cond, _ = conditional_laplace(saddle, np.full(5, 0.3), np.ones(5), CutSettings())
    assert not cond.ok and cond.status == "Hessian not negative definite" and cond.cov is None
    steep = lambda th: -float(np.sum(np.cosh(3 * th)))  # noqa: E731  not quadratic: many steps
    cond, _ = conditional_laplace(steep, np.full(5, 2.0), np.ones(5), CutSettings(max_evals=60))
    assert not cond.ok and "not converged" in cond.status


def test_newton_settles_on_a_skewed_posterior():
    """log tau ~ log-Gamma(1) (skewness -1.1): the curvature changes along the way, so the
    steps are damped until they settle; the stencil's Gaussian sits near the mean (digamma(1))
    rather than the mode (0), with an sd within 15% of the exact one (sqrt(trigamma(1)))."""

    def f(th):
        rest = th[[0, 2, 3, 4]]
        return th[1] - math.exp(th[1]) - 0.5 * float(rest @ rest) - 0.15 * th[0] * th[1]

    cond, _ = conditional_laplace(f, np.array([0.0, 1.0, 0, 0, 0]), np.ones(5), CutSettings())
    assert cond.ok and cond.newton_steps > 2, cond
    sd = math.sqrt(cond.cov[1][1])
    assert abs(cond.mode[1] - special.digamma(1.0)) < 0.1 * sd
    assert sd == pytest.approx(math.sqrt(special.polygamma(1, 1.0)), rel=0.15)


def test_the_standard_errors_are_the_spread_of_their_estimates():
    """Over 400 replicates the jackknife se of the between and cut sds (K = 50) and the MCSE
    of an AR(1) chain's sd match the spread of the estimates within 15% (the se of an sd of
    400 values is 3.5%; the jackknife's own bias is a few percent)."""
    rng = np.random.default_rng(4)
    est, ses = [], []
    for _ in range(400):
        modes = 0.7 * rng.standard_normal(K)
        variances = rng.gamma(20.0, 1.0 / 20.0, K)  # mean 1, sd 0.22
        s = jackknife_sds(modes, variances)
        est.append([s["between"][0], s["cut"][0]])
        ses.append([s["between"][1], s["cut"][1]])
    np.testing.assert_allclose(np.mean(ses, axis=0), np.std(est, axis=0), rtol=0.15)
    assert abs(np.mean(est, axis=0)[1] - math.sqrt(1 + 0.49)) < 0.01
    rho, n = 0.8, 1000
    e = rng.standard_normal((400, 2, n))
    x = np.empty_like(e)
    x[..., 0] = e[..., 0]
    for t in range(1, n):  # 400 replicates of 2 AR(1) chains, ESS about n (1 - rho) / (1 + rho)
        x[..., t] = rho * x[..., t - 1] + math.sqrt(1 - rho**2) * e[..., t]
    sds = [np.std(r, ddof=1) for r in x]
    assert np.mean([mcse_sd(r) for r in x]) == pytest.approx(np.std(sds), rel=0.15)


def _conditionals(rng, k: int, within: float, between: float) -> list[Conditional]:
    """``k`` Gaussian references: modes N(0, between^2), covariance within^2 I."""
    cov = tuple(map(tuple, (within**2 * np.eye(5)).tolist()))
    return [Conditional(tuple((between * rng.standard_normal(5)).tolist()), cov) for _ in range(k)]


def test_the_verdicts():
    """Chains with the cut sd: OK; 25% narrower (the within-draw sd alone): WARNING; skewed or
    heavy-tailed draws, or a failed draw: not compared."""
    rng = np.random.default_rng(8)
    conds = _conditionals(rng, 200, within=0.1, between=0.07)
    cut_sd = math.hypot(0.1, 0.07)

    def chains(sd):
        return {n: sd * rng.standard_normal((4, 2000)) for n in PARAM_NAMES}

    ok = summarise_cut(conds, chains(cut_sd), PARAM_NAMES)
    assert ok.verdict == "OK" and all(r.status == "ok" for r in ok.rows), ok.message
    assert all(abs(r.ratio - 1) < 0.1 for r in ok.rows)
    narrow = summarise_cut(conds, chains(0.1), PARAM_NAMES)
    assert narrow.verdict == "WARNING" and all(r.status == "warn" for r in narrow.rows)
    assert "differs from the cut posterior" in narrow.message
    skewed = chains(cut_sd)
    skewed["tau_t"] = np.exp(skewed["tau_t"] * 6)  # lognormal: skewness far above the limit
    skewed["mu0"] = rng.standard_t(3, (4, 2000)) * cut_sd  # heavy tails
    out = summarise_cut(conds, skewed, PARAM_NAMES)
    assert out.row("tau_t").status == "not compared" and "skewness" in out.row("tau_t").reason
    assert out.row("mu0").status == "not compared" and "kurtosis" in out.row("mu0").reason
    assert out.verdict == "OK" and abs(out.row("tau_t").skewness) > SKEW_LIMIT
    assert abs(out.row("mu0").excess_kurtosis) > KURTOSIS_LIMIT
    failed = [*conds[:-1], Conditional(conds[-1].mode, None, "Hessian not negative definite")]
    none = summarise_cut(failed, chains(cut_sd), PARAM_NAMES)
    assert none.verdict == "NOT COMPARED" and "1 of 200 location draws" in none.message
    assert json.loads(json.dumps(none.as_dict()))["parameters"][0]["cut_sd"] is None


# --------------------------------------------------------------------------- the command


def _diagnose(capsys, *args: str) -> tuple[int, str, str]:
    """``hawkes-diagnose ARGS`` in this process: (exit code, stdout, stderr)."""
    from hawkes_cli.cli import diagnose_main

    argv = sys.argv
    sys.argv = ["hawkes-diagnose", *args]
    code = 0
    try:
        diagnose_main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.opencl
def test_the_command_prints_the_check_and_its_json(problem, capsys):
    run = str(problem["config"].output.run_dir)
    code, out, err = _diagnose(capsys, run, "--cut-check", "--cut-draws", "4", "--no-systematic")
    assert code == 0, err
    assert "cut posterior check: 4 location draws" in out
    assert "\ncut check: " in out and "log param" in out
    code, out, err = _diagnose(capsys, run, "--cut-check", "--cut-draws", "4", "--json")
    assert code == 0, err
    cut = json.loads(out)["cut_check"]
    assert cut["n_draws"] == 4 and len(cut["draws"]) == 4
    assert [r["name"] for r in cut["parameters"]] == list(PARAM_NAMES)
    # the first 4 draws are those of the 50-draw check (each draw its own seed)
    first = problem["check"].conditionals[0]
    assert cut["draws"][0]["mode"]["sigma_x"] == pytest.approx(first.mode[3], abs=1e-9)


def test_the_command_refuses_what_it_cannot_check(tmp_path, capsys):
    """Fixed locations (resample_every 0: no cut posterior), no draws, and bad options: one
    `error:` line each."""
    data = simulate(TRUTH, model=1, n_background=60, t_end=60.0, bounds=BOUNDS, seed=1)
    save_events(data, tmp_path / "ev.h5")
    cfg = {
        "data": {"events": str(tmp_path / "ev.h5")},
        "model": {"kind": 1, "edge": "none"},
        "sampler": {"kind": "univariate", "iterations": 40, "warmup": 10, "seed": 1,
                    "initial": TRUTH.as_dict()},
        "chains": {"count": 1},
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(tmp_path / "run"), "commit_every": 20},
    }  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp_path / "c.yaml")
    assert run_chain(config, 0).finished
    run = str(config.output.run_dir)
    cases = [
        ((run, "--cut-check"), "keeps every event at its file location"),
        ((run, "--cut-check", "--burn", "1000"), "error: "),
        ((run, "--cut-draws", "5"), "--cut-draws needs --cut-check"),
        ((run, "--cut-check", "--cut-draws", "2"), "--cut-draws must be an integer >= 3"),
        ((run, "--cut-is-draws", "1"), "--cut-is-draws needs --cut-check"),
        ((run, "--cut-check", "--cut-is-draws", "-1"), "--cut-is-draws must be an integer >= 0"),
        ((run, "--cut-check", "--cut-draws", "3", "--cut-is-draws", "5"), "is more than the"),
        ((run, "--cut-newton-draws", "5"), "--cut-newton-draws needs --cut-check"),
        ((run, "--cut-check", "--cut-newton-draws", "1"), "--cut-newton-draws must be an"),
        ((run, "--cut-check", "--cut-newton-draws", "3", "--cut-is-draws", "4"), "Newton draws"),
        ((run, "--cut-check", "--cut-is-draws", "21"), "(--cut-newton-draws 20)"),
        ((run, "--cut-check", "--cut-newton-draws", "3"), "needs 4 Newton draws or more"),
        ((run, "--cut-check", "--csv"), "not CSV"),
    ]
    for args, says in cases:
        code, out, err = _diagnose(capsys, *args, "--no-systematic")
        assert code == 2, (args, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


@pytest.mark.opencl
def test_every_draw_starts_from_the_chains_steps(problem, monkeypatch):
    """A draw whose Newton resized the finite-difference steps does not hand them to the next
    draw: each draw's reference depends on that draw alone (the Monte Carlo errors of the
    between-draw sd assume independent draws). Here the first draw's steps come back tripled;
    the next draws must still start from the chains' steps, and their modes must equal those
    of the 50-draw check, which ran them without that."""
    import hawkes_cli.cutcheck as cutcheck

    seen = []
    real = cutcheck.conditional_laplace

    def resizing(log_post, theta0, h0, settings):
        seen.append(np.array(h0, dtype=float))
        cond, h = real(log_post, theta0, h0, settings)
        return cond, 3.0 * h

    monkeypatch.setattr(cutcheck, "conditional_laplace", resizing)
    run = problem["config"].output.run_dir
    check = cutcheck.run_cut_check(run, DiagnoseOptions(cut_draws=3))
    assert len(seen) == 3
    for h in seen[1:]:
        np.testing.assert_array_equal(h, seen[0])
    for got, want in zip(check.conditionals, problem["check"].conditionals[:3], strict=True):
        assert got.mode == pytest.approx(want.mode, abs=1e-9)
