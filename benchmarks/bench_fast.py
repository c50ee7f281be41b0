"""Fast likelihood (issue 7): truncated trigger + lattice background against the exact kernel.

Data: ``bench_loglik.make_data`` -- US-like clustered events (300 'cities' of Zipf sizes, spread
0.15 degrees, lon/lat degrees), integer days over three years; parameters sigma_x = 0.08
degrees, sigma_t = 20 days (``bench_loglik.PARAMS``). OpenCL float32 on the default device.

For each N and model: seconds per full evaluation (both pair passes, caches cleared; median of
``--repeats``, ``--large-repeats`` above N = 200,000, after a first evaluation that also builds
the spatial index and tightens the cut-off, reported as ``fast_first_seconds``) of the exact
kernel (one evaluation) and of the truncated one at ``--tolerance``, the speed-up, the realised
error bound and the measured error. Exact timings above ``--exact-max`` events are not run
but scaled from the largest measured N by (N / N_measured)^2 (marked ``scaled``). MCMC
iterations per second (block sampler, ``hawkes_cli.runner.run_chain``) at ``--mcmc-n`` with
and without truncation.

    python benchmarks/bench_fast.py --exact-max 1000000   # the table in the issue-7 note

    python benchmarks/bench_fast.py                                   # the issue's table
    python benchmarks/bench_fast.py --sizes 20000 --mcmc-n 5000       # quick

Prints a table and writes JSON (default benchmarks/results/fast.json) and the text table
(same name, .txt).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_loglik import AREA, PARAMS, make_data  # noqa: E402

from hawkes_cli.config import load_config  # noqa: E402
from hawkes_cli.data import save_events  # noqa: E402
from hawkes_cli.engine import make_likelihood  # noqa: E402
from hawkes_cli.runner import run_chain  # noqa: E402

log = logging.getLogger("bench_fast")


def timed(lik, repeats: int) -> tuple[float, float, object]:
    """(median seconds of a full evaluation, first-evaluation seconds, last Evaluation)."""
    t0 = time.perf_counter()
    ev = lik.evaluate(PARAMS)
    first = time.perf_counter() - t0
    secs = []
    for _ in range(repeats):
        lik.clear_cache()
        t0 = time.perf_counter()
        ev = lik.evaluate(PARAMS)
        secs.append(time.perf_counter() - t0)
    return (statistics.median(secs) if secs else first), first, ev


def mcmc(events: Path, work: Path, tolerance: float, iterations: int, model: int) -> dict:
    cfg = {
        "data": {"events": str(events), "area": AREA},
        "model": {"kind": model},
        "sampler": {"kind": "block", "iterations": iterations, "warmup": 0, "seed": 1,
                    "initial": PARAMS.as_dict()},
        "chains": {"count": 1},
        "engine": {"backend": "opencl", "precision": "float32", "tolerance": tolerance},
        "output": {"run_dir": str(work / f"run-{tolerance}"), "commit_every": 1000},
    }  # fmt: skip
    path = work / f"mcmc-{tolerance}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = run_chain(load_config(path), 0)
    return {
        "tolerance": tolerance,
        "iterations": iterations,
        "loop_seconds": out.loop_seconds,
        "iterations_per_second": iterations / out.loop_seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--models", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tolerance", type=float, default=1e-6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--large-repeats",
        type=int,
        default=1,
        help="timed evaluations above N = 200,000 (after the first one)",
    )
    ap.add_argument("--exact-max", type=int, default=200_000)
    ap.add_argument("--mcmc-n", type=int, default=100_000)
    ap.add_argument("--mcmc-iterations", type=int, nargs=2, default=[3, 30],
                    metavar=("EXACT", "TRUNCATED"))  # fmt: skip
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fast.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    rows = []
    exact_ref: dict[int, tuple[int, float]] = {}
    for n in args.sizes:
        data = make_data(n, "days")
        for model in args.models:
            fast = make_likelihood(
                data, model=model, area=AREA, precision="float32", tolerance=args.tolerance
            )
            f_sec, f_first, f_ev = timed(fast, args.repeats if n <= 200_000 else args.large_repeats)
            row = {
                "n": n,
                "model": model,
                "precision": "float32",
                "tolerance": args.tolerance,
                "fast_seconds": f_sec,
                "fast_first_seconds": f_first,
                "path": fast.backend.path,
                "loglik_fast": f_ev.loglik,
                "error_bound": f_ev.error_bound,
                "relative_bound": f_ev.error_bound / abs(f_ev.loglik),
                "tightenings": fast.tightenings,
            }
            del fast
            if n <= args.exact_max:
                exact = make_likelihood(data, model=model, area=AREA, precision="float32")
                e_sec, _, e_ev = timed(exact, 0)
                del exact
                exact_ref[model] = (n, e_sec)
                row |= {
                    "exact_seconds": e_sec,
                    "exact_timing": "measured (one evaluation)",
                    "loglik_exact": e_ev.loglik,
                    "measured_error": abs(f_ev.loglik - e_ev.loglik),
                }
            elif model in exact_ref:
                n0, s0 = exact_ref[model]
                row |= {
                    "exact_seconds": s0 * (n / n0) ** 2,
                    "exact_timing": f"scaled (N/{n0})^2 from the measured N = {n0}",
                }
            if "exact_seconds" in row:
                row["speedup"] = row["exact_seconds"] / row["fast_seconds"]
            rows.append(row)
            log.warning("%s", row)

    mc = []
    if args.mcmc_n:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            events = work / "events.h5"
            save_events(make_data(args.mcmc_n, "days"), events)
            for tol, its in (
                (0.0, args.mcmc_iterations[0]),
                (args.tolerance, args.mcmc_iterations[1]),
            ):
                mc.append({"n": args.mcmc_n, "model": 1} | mcmc(events, work, tol, its, 1))
                log.warning("%s", mc[-1])

    lines = [
        f"{'N':>9} {'model':>5} {'exact s':>10} {'fast s':>8} {'speed-up':>9} "
        f"{'bound':>9} {'rel bound':>9} {'|error|':>9}  exact timing",
    ]
    for r in rows:
        ex = r.get("exact_seconds")
        lines.append(
            f"{r['n']:>9} {r['model']:>5} {ex if ex is None else f'{ex:10.1f}':>10} "
            f"{r['fast_seconds']:8.2f} {r.get('speedup', float('nan')):9.1f} "
            f"{r['error_bound']:9.2e} {r['relative_bound']:9.1e} "
            f"{r.get('measured_error', float('nan')):9.2e}  {r.get('exact_timing', '-')}"
        )
    for m in mc:
        lines.append(
            f"MCMC N={m['n']} model {m['model']} block sampler, tolerance {m['tolerance']:g}: "
            f"{m['iterations_per_second']:.3f} it/s ({m['iterations']} iterations)"
        )
    text = "\n".join(lines)
    print(text)
    result = {
        "benchmark": "fast likelihood (issue 7)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "processor": platform.processor(),
        "params": PARAMS.as_dict(),
        "area": AREA,
        "rows": rows,
        "mcmc": mc,
        "note": "measured_error includes float32 rounding of both engines; error_bound is the "
        "rigorous bound on truncation alone",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    args.out.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
