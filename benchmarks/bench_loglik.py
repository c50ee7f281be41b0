"""Likelihood throughput: pair terms per second (N^2 / seconds per full evaluation).

For each engine x model x precision and each N, one warm-up evaluation, then the median of
``--repeats`` full evaluations (both pair passes; caches cleared), program build excluded.
The published float32 model-1 kernel (benchmarks/published_kernel.cl) is timed in the same run
as the baseline of the speed-up column, and its value is checked against ours through the
relation of DESIGN section 2.

    python benchmarks/bench_loglik.py                      # N = 5,000 20,000 50,000
    python benchmarks/bench_loglik.py --sizes 2000 --repeats 2 --times days

Prints a table and writes JSON (default benchmarks/results/loglik-<times>.json).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.data import EventData
from hawkes_cli.engine import make_likelihood
from hawkes_cli.model import Params

HERE = Path(__file__).resolve().parent
PARAMS = Params(mu0=0.3, tau_t=60.0, xi0=0.7, sigma_x=0.08, sigma_t=20.0)
AREA = 3_532_068.0 / 69.17**2  # US land area in square degrees (about 738)


def make_data(n: int, times: str, seed: int = 0) -> EventData:
    """US-like clustered events: a few hundred 'cities' of Zipf-like sizes, 3 years of days."""
    rng = np.random.default_rng(seed)
    k = 300
    centres = np.column_stack([rng.uniform(-122, -70, k), rng.uniform(26, 48, k)])
    weights = 1.0 / np.arange(1, k + 1)
    city = rng.choice(k, n, p=weights / weights.sum())
    xy = centres[city] + rng.normal(0, 0.15, (n, 2))
    t = rng.uniform(0, 3 * 365, n)
    if times == "days":
        t = np.floor(t)
    order = np.argsort(t, kind="stable")
    density = np.exp(rng.uniform(np.log(0.04), np.log(70_000), k))[city]
    return EventData(
        time=t[order], x=xy[order, 0], y=xy[order, 1], density=density[order], source="bench"
    )


def make_county_data(n: int, seed: int = 0) -> EventData:
    """Events on real US counties (``data/counties.csv``: 2019 populations, land areas,
    centroids): each event's county drawn with probability proportional to its population (50
    states + DC), its location Gaussian about the centroid with sd ``sqrt(area) / 4`` (degrees),
    its density the county's (persons per square mile: 0.04 to 72,000, the dense counties
    being the populous ones, as in the paper's data). Integer days over 3 years: 70 % in three
    national waves (days 150, 480, 800; sd 35 days) shifted per state by up to +-30 days, 30 %
    uniform. Model 2's costliest pattern in :func:`make_data` -- a large city with a sparse
    density -- does not occur here."""
    import csv

    with open(HERE.parent / "data" / "counties.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["state"] not in {"PR", "AS", "GU", "MP", "VI"}]
    rng = np.random.default_rng(seed)
    pop = np.array([float(r["population"]) for r in rows])
    lon = np.array([float(r["lon"]) for r in rows])
    lat = np.array([float(r["lat"]) for r in rows])
    sd = np.sqrt(np.array([float(r["area_deg2"]) for r in rows])) / 4.0
    dens = np.array([float(r["density"]) for r in rows])
    states = sorted({r["state"] for r in rows})
    shift = dict(zip(states, rng.uniform(-30, 30, len(states)), strict=True))
    county_shift = np.array([shift[r["state"]] for r in rows])
    county = rng.choice(pop.size, n, p=pop / pop.sum())
    x = lon[county] + rng.normal(0, sd[county])
    y = lat[county] + rng.normal(0, sd[county])
    wave = rng.random(n) < 0.7
    centre = rng.choice([150.0, 480.0, 800.0], n) + county_shift[county]
    t = np.where(wave, rng.normal(centre, 35.0), rng.uniform(0, 3 * 365, n))
    t = np.floor(np.clip(t, 0, 3 * 365 - 1))
    order = np.argsort(t, kind="stable")
    return EventData(
        time=t[order],
        x=x[order],
        y=y[order],
        density=dens[county][order],
        fips=np.array([r["fips"] for r in rows])[county][order],
        source="bench-counties",
    )


def time_engine(data: EventData, *, engine: str, model: int, precision: str, repeats: int):
    lik = make_likelihood(data, model=model, area=AREA, engine=engine, precision=precision)
    value = lik.loglik(PARAMS)  # warm-up (first-launch compilation on PoCL)
    secs = []
    for _ in range(repeats):
        lik.clear_cache()
        t0 = time.perf_counter()
        value = lik.loglik(PARAMS)
        secs.append(time.perf_counter() - t0)
    return value, statistics.median(secs), lik


def time_published(data: EventData, repeats: int):
    """The published kernel: value (in our convention) and median seconds."""
    import pyopencl as cl

    from hawkes_cli.kernels import select_device

    _, dev = select_device(None)
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx)
    src = (HERE / "published_kernel.cl").read_text()
    prog = cl.Program(ctx, src).build()
    n = data.n
    mf = cl.mem_flags
    loc = np.column_stack([data.x, data.y]).astype(np.float32)
    b_loc = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=loc)
    b_t = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data.time.astype(np.float32))
    out = np.empty(n, np.float32)
    b_out = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
    tau_x_prec = math.sqrt(math.sqrt(2 * math.pi) / AREA)  # rho = tauXprec^2 / sqrt(2 pi)
    p = PARAMS
    args = [
        b_loc, b_t, b_out,
        np.float32(1 / p.sigma_x), np.float32(tau_x_prec), np.float32(1 / p.tau_t),
        np.float32(1 / p.sigma_t), np.float32(p.xi0), np.float32(p.mu0), np.int32(2),
        np.uint32(0), np.uint32(n), np.uint32(n),
    ]  # fmt: skip
    knl = prog.computeLikContribsModel1

    def run() -> float:
        knl(q, (n * 256,), (256,), *args)
        cl.enqueue_copy(q, out, b_out)
        return float(np.sum(out, dtype=np.float64))

    run()
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = run()
        secs.append(time.perf_counter() - t0)
    return total - 0.5 * n * math.log(2 * math.pi), statistics.median(secs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000, 50_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--times", choices=["continuous", "days"], default="continuous")
    ap.add_argument("--reference-max", type=int, default=50_000,
                    help="skip the numpy reference above this N")  # fmt: skip
    ap.add_argument("--no-published", action="store_true", help="skip the published kernel")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or HERE / "results" / f"loglik-{args.times}.json"
    rows = []
    device = None
    header = (
        f"{'N':>7} {'engine':<10}{'model':>5} {'precision':<9}{'seconds':>10} "
        f"{'pair terms/s':>13} {'x published':>11}  rel. diff vs reference"
    )
    print(header)
    for n in args.sizes:
        data = make_data(n, args.times)
        base = None
        if not args.no_published:
            pub_value, pub_secs = time_published(data, max(1, min(args.repeats, 3)))
            base = n * n / pub_secs
            rows.append(
                {"n": n, "engine": "published", "model": 1, "precision": "float32",
                 "seconds": pub_secs, "pair_terms_per_s": base, "loglik": pub_value}
            )  # fmt: skip
            print(f"{n:>7} {'published':<10}{1:>5} {'float32':<9}{pub_secs:>10.4f} {base:>13.3g}")
        refs = {}
        for engine, precision in [("reference", "float64"), ("opencl", "float64"),
                                  ("opencl", "float32")]:  # fmt: skip
            if engine == "reference" and n > args.reference_max:
                continue
            for model in (1, 2):
                reps = 1 if engine == "reference" and n > 10_000 else args.repeats
                value, secs, lik = time_engine(
                    data, engine=engine, model=model, precision=precision, repeats=reps
                )
                if engine == "opencl":
                    device = lik.backend.device_info.name
                if engine == "reference":
                    refs[model] = value
                rate = n * n / secs
                rel = abs(value - refs[model]) / abs(refs[model]) if model in refs else None
                row = {
                    "n": n, "engine": engine, "model": model, "precision": precision,
                    "seconds": secs, "pair_terms_per_s": rate, "loglik": value,
                    "rel_diff_vs_reference": rel,
                    "speedup_vs_published": rate / base if base else None,
                }  # fmt: skip
                if base and model == 1 and engine == "reference":
                    # the published kernel's value, converted to our convention, minus ours
                    row["published_minus_reference"] = pub_value - value
                rows.append(row)
                sp = f"{rate / base:>11.1f}" if base else f"{'':>11}"
                rd = f"{rel:.2e}" if rel is not None else "-"
                print(f"{n:>7} {engine:<10}{model:>5} {precision:<9}{secs:>10.4f} "
                      f"{rate:>13.3g} {sp}  {rd}")  # fmt: skip
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "cpus": __import__("os").cpu_count(),
        "opencl_device": device,
        "times": args.times,
        "params": PARAMS.as_dict(),
        "area": AREA,
        "metric": "pair terms per second = N^2 / seconds per full evaluation",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
