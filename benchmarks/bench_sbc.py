"""Simulation-based calibration of the censored likelihood on a rectangle, at small N.

Each replicate draws (xi0, sigma_x, sigma_t) from the prior below, simulates events from the
model in a 10 x 10 rectangle (``hawkes_cli.simulate``: offspring outside the rectangle are
dropped, i.e. censored), fits them with ``model.edge: censored`` (the rectangle's trigger mass
in closed form) on the float64 reference engine with the tiered sampler, and records the rank
of each true value among L thinned post-warm-up draws. With a calibrated posterior the ranks
are uniform on 0..L (Talts et al. 2018); a chi-square test over 10 bins gives a p-value per
parameter. ``--edge none`` fits the paper's likelihood instead, for comparison.

The simulation's background is a constant rate (``mu0`` and ``tau_t`` do not generate it), so
only xi0, sigma_x and sigma_t have a truth to rank; mu0 and tau_t get the paper's N(0, 1) prior
on the log scale.

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
FREE = {"mu0": (1.0, 1.0), "tau_t": (1.0, 1.0)}  # the paper's N(0, 1) on the log scale
BOUNDS = (0.0, 10.0, 0.0, 10.0)
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
    from hawkes_cli.simulate import simulate

    rng = np.random.default_rng(np.random.SeedSequence(args.seed, spawn_key=(r,)))
    while True:  # the prior truncated to xi0 < 0.9 (a subcritical process; P(xi0 >= 0.9) ~ 0.2%)
        truth = {k: float(m * math.exp(s * rng.standard_normal())) for k, (m, s) in PRIOR.items()}
        if truth["xi0"] < 0.9:
            break
    p = Params(mu0=0.5, tau_t=30.0, **truth)
    t0 = time.perf_counter()
    data = simulate(
        p,
        model=1,
        n_background=args.n_background,
        t_end=args.t_end,
        bounds=BOUNDS,
        seed=int(rng.integers(2**31)),
    )
    region = RectangleRegion(BOUNDS) if args.edge == "censored" else None
    area = (BOUNDS[1] - BOUNDS[0]) * (BOUNDS[3] - BOUNDS[2])
    lik = make_likelihood(
        data, model=1, area=area, engine="reference", window_end=args.t_end, region=region
    )
    lik.background_cache_size = 16
    lik.trigger_cache_size = 4
    priors = {k: Prior("lognormal", (math.log(m), s)) for k, (m, s) in {**PRIOR, **FREE}.items()}
    post = LogPosterior.from_mapping(lik, priors)
    sampler = make_sampler("tiered", 5, cheap=post.cheap, n_cheap=10, n_expensive=1)
    theta0 = np.log([0.5, 30.0, truth["xi0"], truth["sigma_x"], truth["sigma_t"]])
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
    ap.add_argument("--edge", choices=("censored", "none"), default="censored")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sbc")
    ap.add_argument(
        "--summary-only", action="store_true", help="summarise the replicates already in --out"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = args.out / f"sbc-{args.edge}.jsonl"
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
        "replicates": len(rows),
        "events_mean": float(np.mean([r["n"] for r in rows])),
        "iterations": args.iterations,
        "warmup": args.warmup,
        "draws": args.draws,
        "prior": PRIOR,
        "bounds": BOUNDS,
        "wall_seconds": time.perf_counter() - t0,
        "replicate_seconds_mean": float(np.mean([r["seconds"] for r in rows])),
        "cpus": os.cpu_count(),
        "parameters": summary(rows, args.draws),
    }
    (args.out / f"sbc-{args.edge}.json").write_text(json.dumps(result, indent=1))
    text = [
        f"# SBC, model 1, rectangle {BOUNDS}, edge {args.edge}: {len(rows)} replicates, "
        f"~{result['events_mean']:.0f} events each, {args.iterations} iterations "
        f"({args.warmup} warm-up), ranks among {args.draws} draws, {BINS} bins",
        "parameter  chi2     p       mean rank  median rel. error   bins",
    ]
    for name, s in result["parameters"].items():
        text.append(
            f"{name:<9}  {s['chi2']:6.2f}  {s['p']:.3f}   {s['mean_rank']:6.1f}     "
            f"{s['median_relative_error']:+.4f}            {s['bins']}"
        )
    (args.out / f"sbc-{args.edge}.txt").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
