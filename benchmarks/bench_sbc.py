"""Simulation-based calibration of the edge-corrected likelihoods on a rectangle, at small N.

Each replicate draws (xi0, sigma_x, sigma_t) from the prior below, simulates events from the
model in a 10 x 10 rectangle (``hawkes_cli.simulate``: offspring outside the rectangle are
dropped, i.e. censored; with ``--edge renormalized`` their displacement is redrawn until they
land, the kernel renormalised to the rectangle), fits them with the matching ``model.edge``
(the rectangle's trigger mass in closed form) on the float64 reference engine with the tiered
sampler, and records the rank of each true value among L thinned post-warm-up draws. With a
calibrated posterior the ranks are uniform on 0..L (Talts et al. 2018); a chi-square test over
10 bins gives a p-value per parameter. ``--edge none`` fits the paper's likelihood to censored
simulations instead, for comparison. ``--model 2`` places the events on a fixed 4 x 4 grid of
"counties" with densities log-uniform in [0.25, 4] (``DensityGrid.log_uniform``, seed 7), so
each source's lengthscale ``sigma_x / sqrt(D)`` is 0.5 to 2 times ``sigma_x``.

The model's background (DESIGN 2: ``mu0 * rho * sum_m phi1(t_n - t_m; tau_t)`` over all other
events, later ones included) is a kernel smoother of the data, not a law one can draw events
from, except in its limit ``tau_t >> t_end``, where it is a constant rate in space and time. The
simulation draws exactly that limit: a Poisson number (mean ``--n-background``) of background
events uniform in the rectangle and the window, and every fit gives ``tau_t`` a prior at
``--tau-t`` days (default 10,000, a hundred windows: the smoother is flat to ``(t_end /
tau_t)^2 / 2 = 5e-5``) and ``mu0`` a wide prior around the value that gives the background
count (``mu0 * N * t_end / (sqrt(2 pi) tau_t)`` background events). Then the simulation is the
fitted model and the ranks must be uniform. ``--paper-background`` fits with the paper's N(0, 1)
on ``log tau_t`` and ``log mu0`` instead (``tau_t`` ~ 1 day): the smoother then follows the
clusters in time and takes some of the triggering (that is the run that showed ``xi0`` low).
Only xi0, sigma_x and sigma_t have a truth to rank.

Usage::

    python benchmarks/bench_sbc.py --replicates 120 --workers 16 --out benchmarks/results/sbc

writes ``sbc-<edge>.jsonl`` (one line per replicate, as they finish: a killed run keeps what it
did) and ``sbc-<edge>.json`` / ``.txt`` (the summary).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one process per core: no BLAS threads

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The prior every replicate draws from and every fit uses: LogNormal(log m, s) per parameter.
PRIOR = {"xi0": (0.5, 0.2), "sigma_x": (0.5, 0.25), "sigma_t": (5.0, 0.25)}
PAPER_FREE = {"mu0": (1.0, 1.0), "tau_t": (1.0, 1.0)}  # the paper's N(0, 1) on the log scale
BOUNDS = (0.0, 10.0, 0.0, 10.0)
#: ``--model 2``'s counties: nx, ny, lowest and highest density, seed (DensityGrid.log_uniform).
GRID = (4, 4, 0.25, 4.0, 7)
RANKED = ("xi0", "sigma_x", "sigma_t")
BINS = 10


def replicate(r: int, args: argparse.Namespace) -> dict:
    """One replicate: draw, simulate, fit, rank."""
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.engine.region import RectangleRegion
    from hawkes_cli.model import Params
    from hawkes_cli.posterior import LogPosterior, to_params
    from hawkes_cli.priors import Prior
    from hawkes_cli.sampler import make_sampler
    from hawkes_cli.simulate import DensityGrid, simulate

    rng = np.random.default_rng(np.random.SeedSequence(args.seed, spawn_key=(r,)))
    while True:  # the prior truncated to xi0 < 0.9 (a subcritical process; P(xi0 >= 0.9) ~ 0.2%)
        truth = {k: float(m * math.exp(s * rng.standard_normal())) for k, (m, s) in PRIOR.items()}
        if truth["xi0"] < 0.9:
            break
    free = free_priors(args)
    p = Params(mu0=free["mu0"][0], tau_t=free["tau_t"][0], **truth)
    t0 = time.perf_counter()
    grid = DensityGrid.log_uniform(BOUNDS, *GRID) if args.model == 2 else None
    data = simulate(
        p,
        model=args.model,
        n_background=max(1, int(rng.poisson(args.n_background))),
        t_end=args.t_end,
        bounds=BOUNDS,
        grid=grid,
        seed=int(rng.integers(2**31)),
        edge="renormalized" if args.edge == "renormalized" else "censored",
    )
    region = None if args.edge == "none" else RectangleRegion(BOUNDS)
    area = (BOUNDS[1] - BOUNDS[0]) * (BOUNDS[3] - BOUNDS[2])
    lik = make_likelihood(
        data,
        model=args.model,
        area=area,
        engine="reference",
        window_end=args.t_end,
        region=region,
        edge=args.edge,
    )
    lik.background_cache_size = 16
    lik.trigger_cache_size = 4
    priors = {k: Prior("lognormal", (math.log(m), s)) for k, (m, s) in {**PRIOR, **free}.items()}
    post = LogPosterior.from_mapping(lik, priors)
    sampler = make_sampler("tiered", 5, cheap=post.cheap, n_cheap=10, n_expensive=1)
    theta0 = np.log([p.mu0, p.tau_t, truth["xi0"], truth["sigma_x"], truth["sigma_t"]])
    theta0 = theta0 + 0.05 * rng.standard_normal(5)
    state = sampler.init(theta0, post(theta0))
    keep = []
    for it in range(args.iterations):
        state, _ = sampler.step(state, post, rng, adapt=it < args.warmup)
        if it >= args.warmup:
            keep.append(np.array(state.theta, dtype=np.float64))
    draws = np.array(keep)
    idx = np.linspace(0, len(draws) - 1, args.draws).round().astype(int)
    thinned = draws[idx]
    ranks = {}
    for name in RANKED:
        j = post.names.index(name)
        ranks[name] = int(np.sum(thinned[:, j] < math.log(truth[name])))
    med = to_params(np.median(draws, axis=0)).as_dict()
    return {
        "replicate": r,
        "n": int(data.n),
        "truth": truth,
        "median": {k: med[k] for k in RANKED},
        "ranks": ranks,
        "seconds": time.perf_counter() - t0,
    }


def free_priors(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """The LogNormal(log m, s) priors of the unranked ``mu0`` and ``tau_t`` (module docstring)."""
    if args.paper_background:
        return PAPER_FREE
    # N events, of which n_background are background: mu0 * N * t_end / (sqrt(2 pi) tau_t) of
    # them; N ~ n_background / (1 - E[xi0]) with the prior's median xi0.
    n_total = args.n_background / (1.0 - PRIOR["xi0"][0])
    mu0 = args.n_background * math.sqrt(2 * math.pi) * args.tau_t / (n_total * args.t_end)
    return {"mu0": (mu0, 1.0), "tau_t": (args.tau_t, 0.1)}


def summary(rows: list[dict], draws: int) -> dict:
    """Chi-square uniformity of the ranks (10 bins over 0..draws) per parameter."""
    from scipy.stats import chisquare

    out = {}
    for name in RANKED:
        ranks = np.array([row["ranks"][name] for row in rows])
        counts = np.histogram(ranks, bins=BINS, range=(0, draws + 1))[0]
        stat, p = chisquare(counts)
        rel = [(row["median"][name] - row["truth"][name]) / row["truth"][name] for row in rows]
        out[name] = {
            "bins": counts.tolist(),
            "chi2": float(stat),
            "p": float(p),
            "mean_rank": float(ranks.mean()),
            "median_relative_error": float(np.median(rel)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=100)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=99, help="thinned draws per replicate (L)")
    ap.add_argument("--n-background", type=int, default=150)
    ap.add_argument("--t-end", type=float, default=100.0)
    ap.add_argument("--edge", choices=("censored", "renormalized", "none"), default="censored")
    ap.add_argument("--model", type=int, choices=(1, 2), default=1)
    ap.add_argument("--tau-t", type=float, default=1e4, help="prior median of tau_t (days)")
    ap.add_argument(
        "--paper-background",
        action="store_true",
        help="fit mu0 and tau_t with the paper's N(0, 1) log priors (the earlier runs)",
    )
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sbc")
    ap.add_argument(
        "--summary-only", action="store_true", help="summarise the replicates already in --out"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"sbc-{args.edge}" + ("-m2" if args.model == 2 else "")
    stem += "-paper-background" if args.paper_background else ""
    lines = args.out / f"{stem}.jsonl"
    done = {}
    if lines.exists():
        for text in lines.read_text().splitlines():
            row = json.loads(text)
            done[row["replicate"]] = row
    todo = [] if args.summary_only else [r for r in range(args.replicates) if r not in done]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool, lines.open("a") as sink:
        futures = [pool.submit(replicate, r, args) for r in todo]
        for fut in as_completed(futures):
            try:
                row = fut.result()
            except Exception as exc:  # a replicate that fails is reported, not fatal
                print(f"replicate failed: {exc!r}", file=sys.stderr)
                continue
            done[row["replicate"]] = row
            sink.write(json.dumps(row) + "\n")
            sink.flush()
    rows = [done[r] for r in sorted(done)]
    result = {
        "edge": args.edge,
        "model": args.model,
        "grid": GRID if args.model == 2 else None,
        "replicates": len(rows),
        "events_mean": float(np.mean([r["n"] for r in rows])),
        "iterations": args.iterations,
        "warmup": args.warmup,
        "draws": args.draws,
        "prior": PRIOR,
        "free_prior": free_priors(args),
        "n_background_mean": args.n_background,
        "bounds": BOUNDS,
        "wall_seconds": time.perf_counter() - t0,
        "replicate_seconds_mean": float(np.mean([r["seconds"] for r in rows])),
        "cpus": os.cpu_count(),
        "parameters": summary(rows, args.draws),
    }
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    grid = f", 4 x 4 grid densities {GRID[2]}-{GRID[3]} (seed {GRID[4]})" if args.model == 2 else ""
    text = [
        f"# SBC, model {args.model}, rectangle {BOUNDS}{grid}, edge {args.edge}: "
        f"{len(rows)} replicates, "
        f"~{result['events_mean']:.0f} events each, {args.iterations} iterations "
        f"({args.warmup} warm-up), ranks among {args.draws} draws, {BINS} bins",
        "# fits: mu0, tau_t ~ LogNormal(log m, s): "
        + ", ".join(f"{k} m={m:.4g} s={sd:g}" for k, (m, sd) in result["free_prior"].items())
        + (" (the paper's)" if args.paper_background else " (the background's constant limit)"),
        "parameter  chi2     p       mean rank  median rel. error   bins",
    ]
    for name, s in result["parameters"].items():
        text.append(
            f"{name:<9}  {s['chi2']:6.2f}  {s['p']:.3f}   {s['mean_rank']:6.1f}     "
            f"{s['median_relative_error']:+.4f}            {s['bins']}"
        )
    (args.out / f"{stem}.txt").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
