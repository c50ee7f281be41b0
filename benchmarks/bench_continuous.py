"""A background pass and an MCMC iteration at 1,000,000 events: whole days against continuous
times (the same events, each time plus a uniform fraction of its day), and continuous times with
the censored edge correction, in one run on one device.

Data: ``bench_loglik.make_county_data`` (events on the real US counties by population, three
waves over three years, whole days). Engine: the MCMC default (OpenCL float32, truncated trigger
at 0.05 nats, ``engine.background: auto``: the day lattice per distinct time, the continuous
times on a fine time lattice by FFT). Sampler: the shipped tiered kind (10 cheap moves, one
expensive) in this process, started at values near the 1M posterior, proposals frozen
(no adaptation), so every configuration does the same kind of work; the first iteration (the
cut-off calibration) is not timed.

Usage::

    python benchmarks/bench_continuous.py [--n 1000000] [--iterations 4]

writes ``benchmarks/results/continuous.json`` and ``continuous.txt``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_iteration import bench_commit  # noqa: E402
from bench_loglik import make_county_data  # noqa: E402

START = {"mu0": 0.5, "tau_t": 9000.0, "xi0": 1.07, "sigma_x": 0.046, "sigma_t": 97.0}
AREA = 819.7  # the lower 48 states + DC, degrees^2


def measure(data, *, edge: bool, iterations: int, seed: int = 0) -> dict:
    """Seconds of background passes and of tiered iterations on ``data``."""
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.model import Params
    from hawkes_cli.posterior import LogPosterior
    from hawkes_cli.priors import Prior
    from hawkes_cli.regions import region_for
    from hawkes_cli.sampler import make_sampler

    region = None
    t0 = time.perf_counter()
    if edge:
        region = region_for(data)
    region_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    lik = make_likelihood(
        data,
        model=1,
        area=AREA,
        engine="opencl",
        precision="float32",
        tolerance=0.05,
        window_end=float(math.ceil(data.time[-1])),
        region=region,
    )
    lik.background_cache_size = 13
    lik.trigger_cache_size = 2
    build_s = time.perf_counter() - t0
    # background passes: new tau_t each time
    passes = []
    for k in range(3):
        t0 = time.perf_counter()
        lik._background(START["tau_t"] * (1.0 + 0.01 * (k + 1)))
        passes.append(time.perf_counter() - t0)
    priors = {k: Prior("normal", (0.0, 10.0)) for k in START}
    post = LogPosterior.from_mapping(lik, priors)
    theta = np.log([START[k] for k in post.names])
    sampler = make_sampler(  # proposals of the 1M posterior's size (0.1-0.3% in log scale)
        "tiered", 5, cheap=post.cheap, n_cheap=10, n_expensive=1, initial_scale=0.003
    )
    sampler_state = sampler.init(theta, post(theta))
    ev = lik.evaluate(Params(**START))
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    sampler_state, _ = sampler.step(sampler_state, post, rng, adapt=False)  # calibration
    first_s = time.perf_counter() - t0
    bg0, tr0 = lik.background_passes, lik.trigger_passes
    t0 = time.perf_counter()
    for _ in range(iterations):
        sampler_state, _ = sampler.step(sampler_state, post, rng, adapt=False)
    per_it = (time.perf_counter() - t0) / iterations
    return {
        "distinct_times": int(np.unique(data.time).size),
        "edge": "censored" if edge else "none",
        "path": lik.path,
        "region_build_s": region_s,
        "likelihood_build_s": build_s,
        "background_pass_s": passes,
        "first_iteration_s": first_s,
        "iteration_s": per_it,
        "background_passes_per_iteration": (lik.background_passes - bg0) / iterations,
        "trigger_passes_per_iteration": (lik.trigger_passes - tr0) / iterations,
        "background_bound_nats": ev.background_bound,
        "truncation_bound_nats": ev.error_bound,
        "edge_error_nats": ev.edge_error,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "continuous")
    args = ap.parse_args()
    days = make_county_data(args.n)
    rng = np.random.default_rng(7)
    cont_t = days.time + rng.random(days.n)
    order = np.argsort(cont_t, kind="stable")
    from hawkes_cli.data import EventData

    attrs = {"crs": "lonlat"}
    days = EventData(days.time, days.x, days.y, days.density, source="days", attrs=attrs)
    cont = EventData(
        cont_t[order],
        days.x[order],
        days.y[order],
        days.density[order],
        source="continuous",
        attrs=attrs,
    )
    rows = {}
    for name, data, edge in (
        ("days", days, False),
        ("continuous", cont, False),
        ("continuous, censored", cont, True),
    ):
        rows[name] = measure(data, edge=edge, iterations=args.iterations)
        print(name, json.dumps(rows[name]), flush=True)
    commit = bench_commit()
    meta = {
        "n": args.n,
        "iterations_timed": args.iterations,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "commit": commit,
        "start": START,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        f"# bench_continuous N={args.n:,}, model 1, OpenCL float32, tolerance 0.05, tiered "
        f"(10 cheap + 1 expensive), {meta['machine']}, commit {commit}",
        "data                  distinct  bg pass s (min)  iteration s  bg/it  trig/it  "
        "bg bound nats  edge err nats",
    ]
    for name, r in rows.items():
        lines.append(
            f"{name:<21} {r['distinct_times']:>9,}  {min(r['background_pass_s']):>15.3f}  "
            f"{r['iteration_s']:>11.2f}  {r['background_passes_per_iteration']:>5.1f}  "
            f"{r['trigger_passes_per_iteration']:>7.1f}  {r['background_bound_nats']:>13.3g}  "
            f"{r['edge_error_nats']:>13.3g}"
        )
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
