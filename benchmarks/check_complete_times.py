"""Do the simulator's offspring times follow the likelihood's time kernel and compensator? The
complete-data check of ``xi0`` and ``sigma_t``, seed by seed.

``simulate_with_parents`` keeps each child's parent, so the temporal part of the model can be
fitted without the Hawkes process's uncertainty over who triggered whom. Given the parents, the
observed children of source m form a Poisson process of intensity
``xi0 M_m exp(-u / sigma_t) / sigma_t`` in the lag ``u`` on ``[0, T - t_m]`` (``M_m`` its trigger
mass inside the land, censored), so

    l(xi0, sigma_t) = sum over children n of [log xi0 - log sigma_t - (t_n - t_m(n)) / sigma_t]
                    - xi0 sum_m M_m (1 - exp(-(T - t_m) / sigma_t))

is maximised in closed form for ``xi0`` given ``sigma_t`` and numerically in ``sigma_t``; the
sds are the Hessian's. With ~500,000 children at 1M, ``log sigma_t``'s complete-data sd is
about 0.0014, an eighth of the observed-data posterior's (0.0116): a simulator whose delays or
late-child cut disagreed with the compensator by 0.5% would miss by several sds here.

    python benchmarks/check_complete_times.py --seeds 201 212 --n-background 400000

prints per seed the complete-data ``log(ML / truth)`` of both, their sds and misses, and the
mean miss over the seeds. The settings are ``bench_coverage.py``'s (seed s gives the same
events as its replicate s).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hawkes_cli.model import Params
from hawkes_cli.regions import region_for
from hawkes_cli.simulate import CountyMap, simulate_with_parents

T_END = 700.0


def complete_fit(lags: np.ndarray, spans: np.ndarray, mass: np.ndarray) -> dict[str, float]:
    """ML of ``(log xi0, log sigma_t)`` from the children's lags (days, shape (C,)) and every
    source's window ``T - t_m`` and mass (shape (N,)), with the sds from the Hessian."""
    n_kids, total = lags.size, float(lags.sum())

    def profile(log_s: float) -> float:  # -l at the best xi0 for this sigma_t
        s = math.exp(log_s)
        expect = float(np.dot(mass, -np.expm1(-spans / s)))  # children per unit xi0
        xi0 = n_kids / expect
        return -(n_kids * math.log(xi0) - n_kids * log_s - total / s - xi0 * expect)

    best = minimize_scalar(profile, bracket=(math.log(20.0), math.log(40.0)), tol=1e-12)
    log_s = float(best.x)
    s = math.exp(log_s)
    expect = float(np.dot(mass, -np.expm1(-spans / s)))
    xi0 = n_kids / expect
    # Hessian of -l in (a, b) = (log xi0, log sigma_t)
    e = np.exp(-spans / s)
    d1 = -float(np.dot(mass, e * spans / s))  # d expect / d b
    d2 = -float(np.dot(mass, e * (spans / s) * (spans / s - 1.0)))  # d^2 expect / d b^2
    h = np.array(
        [
            [xi0 * expect, xi0 * d1],
            [xi0 * d1, total / s + xi0 * d2],
        ]
    )
    cov = np.linalg.inv(h)
    return {
        "log_xi0": math.log(xi0),
        "log_sigma_t": log_s,
        "sd_xi0": math.sqrt(cov[0, 0]),
        "sd_sigma_t": math.sqrt(cov[1, 1]),
        "children": n_kids,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs=2, default=(201, 212))
    ap.add_argument("--n-background", type=int, default=400_000)
    args = ap.parse_args()
    truth = Params(mu0=0.4, tau_t=200.0, xi0=0.6, sigma_x=0.15, sigma_t=30.0)
    misses = []
    for seed in range(args.seeds[0], args.seeds[1] + 1):
        data, parent = simulate_with_parents(
            truth, model=1, n_background=args.n_background, t_end=T_END, seed=seed,
            counties=CountyMap.conus(uniform=True), edge="censored",
        )  # fmt: skip
        mass = region_for(data).mass(data.x, data.y, truth.sigma_x)
        kids = np.flatnonzero(parent >= 0)
        fit = complete_fit(data.time[kids] - data.time[parent[kids]], T_END - data.time, mass)
        z_xi0 = (fit["log_xi0"] - math.log(truth.xi0)) / fit["sd_xi0"]
        z_st = (fit["log_sigma_t"] - math.log(truth.sigma_t)) / fit["sd_sigma_t"]
        misses.append((z_xi0, z_st))
        print(
            f"seed {seed}: {data.n:,} events, {fit['children']:,} children; "
            f"xi0 {fit['log_xi0'] - math.log(truth.xi0):+.5f} (sd {fit['sd_xi0']:.5f}, "
            f"z {z_xi0:+.2f}); sigma_t {fit['log_sigma_t'] - math.log(truth.sigma_t):+.5f} "
            f"(sd {fit['sd_sigma_t']:.5f}, z {z_st:+.2f})",
            flush=True,
        )
    z = np.array(misses)
    se = 1.0 / math.sqrt(z.shape[0])
    print(
        f"mean miss over {z.shape[0]} seeds (sds, se {se:.2f}): xi0 {z[:, 0].mean():+.2f} "
        f"(sd {z[:, 0].std(ddof=1):.2f}), sigma_t {z[:, 1].mean():+.2f} "
        f"(sd {z[:, 1].std(ddof=1):.2f})"
    )


if __name__ == "__main__":
    main()
