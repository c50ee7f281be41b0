"""Statistical checks: chains on simulated data recover the known trigger parameters.

For each sampler and model, one chain on about 2,000 events simulated with known parameters;
the 95% central posterior interval (after warm-up) of xi0, sigma_x and sigma_t must cover the
truth. (mu0 and tau_t have no "true" value: the model's background is a kernel smoother of the
events, not the generating process.) Seeds are fixed, so the checks are deterministic. Every
chain starts with the default fast start (``initial: auto``); the tiered sampler (the default
kind) runs fewer iterations, as each of its iterations moves the expensive block once and the
cheap block ``n_cheap`` times (its adaptation windows end at 50, 150, 350 and 750).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from scipy.optimize import minimize

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.diagnostics.stats import ess_bulk
from hawkes_cli.engine import make_likelihood
from hawkes_cli.model import PARAM_NAMES, Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.storage import read_chain

pytestmark = [pytest.mark.slow, pytest.mark.opencl]

BOUNDS = (0.0, 20.0, 0.0, 20.0)
TRUTH = {
    1: Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0),
    2: Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.5, sigma_t=4.0),
}


#: (iterations, warm-up) per sampler.
LENGTHS = {"univariate": (4000, 1500), "block": (4000, 1500), "tiered": (2000, 750)}


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("sampler", ["univariate", "block", "tiered"])
def test_posterior_intervals_cover_truth(tmp_path, model, sampler):
    truth = TRUTH[model]
    grid = DensityGrid.log_uniform(BOUNDS, 8, 8, 1.0, 100.0, seed=11)
    data = simulate(truth, model=model, n_background=1000, t_end=200.0, bounds=BOUNDS,
                    seed=99 + model, grid=grid)  # fmt: skip
    events = tmp_path / "events.h5"
    save_events(data, events)
    iterations, warmup = LENGTHS[sampler]
    cfg = {
        "data": {"events": str(events), "window_end": 200.0},
        "model": {"kind": model},
        "sampler": {"kind": sampler, "iterations": iterations, "warmup": warmup, "seed": 3},
        "chains": {"count": 1},
        "engine": {"backend": "opencl", "precision": "float64"},
        "output": {"run_dir": str(tmp_path / "run"), "commit_every": 1000},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    config = load_config(path)
    assert run_chain(config, 0).finished
    d = read_chain(RunDir(config.output.run_dir).chain_path(0)).draws
    keep = d["warmup"] == 0
    for name in ("xi0", "sigma_x", "sigma_t"):
        lo, hi = np.quantile(d[name][keep], [0.025, 0.975])
        true = getattr(truth, name)
        assert lo <= true <= hi, f"{name}: truth {true} outside 95% interval [{lo:.4g}, {hi:.4g}]"
        assert hi / lo < 2.0, f"{name}: interval [{lo:.4g}, {hi:.4g}] too wide to mean much"

    # the posterior mode of the same data and priors (N(0, 1) on each log-parameter)
    lik = make_likelihood(data, model=model, area=400.0, engine="opencl", precision="float64",
                          window_end=200.0)  # fmt: skip

    def neg_log_post(theta):
        p = Params(**dict(zip(PARAM_NAMES, np.exp(theta).tolist(), strict=True)))
        return -(lik.loglik(p) - 0.5 * float(np.sum(theta**2)))

    start = np.log([truth.mu0, truth.tau_t, truth.xi0, truth.sigma_x, truth.sigma_t])
    opt = minimize(neg_log_post, start, method="Nelder-Mead",
                   options={"maxiter": 4000, "xatol": 1e-5, "fatol": 1e-6})  # fmt: skip
    mode = dict(zip(PARAM_NAMES, np.exp(opt.x), strict=True))
    for name in ("xi0", "sigma_x", "sigma_t"):
        post = np.log(d[name][keep])
        gap = abs(np.median(post) - np.log(mode[name])) / post.std()
        assert gap < median_allowance(post), (
            f"{name}: median {np.exp(np.median(post)):.4g} vs mode {mode[name]:.4g}, "
            f"{gap:.2f} sd apart (allowed {median_allowance(post):.2f})"
        )


def median_allowance(post: np.ndarray) -> float:
    """How far (in posterior sds) one chain's median of ``post`` (log draws, shape (S,)) may
    lie from the posterior mode: its skew's share, |skewness|/3 (a gamma-like shape's median
    lies that far from its mode), plus 3.5 Monte Carlo errors of the median,
    sqrt(pi/2)/sqrt(ESS) sds (normal posterior; a false failure about once in 2,000 checks)."""
    skew = float(np.mean(((post - post.mean()) / post.std()) ** 3))
    mcse = math.sqrt(math.pi / 2 / ess_bulk(post[None, :]))
    return abs(skew) / 3 + 3.5 * mcse
