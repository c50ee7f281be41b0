"""Is a simulation on US geography the model of its edge reading? The complete-data check.

``simulate_with_parents`` keeps each child's parent, so the spatial part of the model can be
fitted without the Hawkes process's uncertainty over who triggered whom: ``sigma_x`` maximising

    sum over children n of  log phi2(x_n - x_m(n); s_m) - [renormalized] log M_m(s_m)

(``s_m = sigma_x`` for model 1, ``sigma_x / sqrt(D_m)`` for model 2; ``M_m`` the mass inside the
study region, by the likelihood's own region). With ``--edge renormalized`` the children of a
source near the coast are drawn from its kernel restricted to the land, so the second term is
needed and the maximum must land on the truth within its sd; a wrong mass, lengthscale or
redraw in the simulator would show here. The maximum is read off a parabola through 9 points
within +-2% of the truth (log scale), its sd from the curvature.

    python benchmarks/check_complete_data.py --model 2 --edge renormalized --seed 101

prints the profile and ``ML log(sigma_x / truth)`` with its sd and z. The same settings as
``bench_coverage.py`` (88,000 background events over 700 days, ``xi0`` 0.6, ``sigma_t`` 30,
``sigma_x`` 0.15 / 0.5): seed 101 gives the same file as its replicate 101.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hawkes_cli.model import Params
from hawkes_cli.regions import region_for
from hawkes_cli.simulate import CountyMap, simulate_with_parents

SIGMA_X = {1: 0.15, 2: 0.5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=int, choices=(1, 2), default=2)
    ap.add_argument("--edge", choices=("censored", "renormalized"), default="renormalized")
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--n-background", type=int, default=88_000)
    args = ap.parse_args()
    sx0 = SIGMA_X[args.model]
    truth = Params(mu0=0.4, tau_t=200.0, xi0=0.6, sigma_x=sx0, sigma_t=30.0)
    data, parent = simulate_with_parents(
        truth, model=args.model, n_background=args.n_background, t_end=700.0, seed=args.seed,
        counties=CountyMap.conus(uniform=True), edge=args.edge,
    )  # fmt: skip
    region = region_for(data)
    kids = np.flatnonzero(parent >= 0)
    m = parent[kids]
    r2 = (data.x[kids] - data.x[m]) ** 2 + (data.y[kids] - data.y[m]) ** 2
    factor = 1.0 / np.sqrt(data.density) if args.model == 2 else np.ones(data.n)
    sources, which = np.unique(m, return_inverse=True)
    f = np.linspace(-0.02, 0.02, 9)
    total = []
    for step in f:
        sx = sx0 * math.exp(step)
        s = sx * factor[m]
        ll = float(np.sum(-r2 / (2 * s * s) - np.log(2 * math.pi * s * s)))
        if args.edge == "renormalized":
            mass = region.mass(data.x[sources], data.y[sources], sx * factor[sources])
            ll -= float(np.sum(np.log(mass[which])))
        total.append(ll)
        print(f"log(sigma_x / truth) {step:+.4f}: {ll:.3f}", flush=True)
    c = np.polyfit(f, np.array(total), 2)
    best, sd = -c[1] / (2 * c[0]), 1.0 / math.sqrt(-2 * c[0])
    print(
        f"ML log(sigma_x / truth) = {best:+.5f}, sd {sd:.5f}, z {best / sd:+.2f} "
        f"({kids.size:,} children of {data.n:,} events, {data.attrs.get('n_redrawn', 0):,} "
        f"redrawn; model {args.model}, edge {args.edge}, seed {args.seed})"
    )


if __name__ == "__main__":
    main()
