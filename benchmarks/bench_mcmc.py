"""MCMC speed: iterations per second and pair passes per iteration for each sampler, and ESS
per minute of sigma_x (the worst-mixing parameter in the paper), univariate versus block.

One chain each, OpenCL float32 on the default device, model 1, simulated data (continuous
times). The ESS run uses ``--ess-n`` events and ``--ess-iterations`` iterations (a third of them
warm-up); ESS is arviz's bulk ESS of the post-warm-up draws.

    python benchmarks/bench_mcmc.py                 # N = 5,000 and 20,000
    python benchmarks/bench_mcmc.py --sizes 2000 --iterations 100 --ess-iterations 600

Prints a table and writes JSON (default benchmarks/results/mcmc.json).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.simulate import simulate
from hawkes_cli.storage import read_chain

HERE = Path(__file__).resolve().parent
TRUTH = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.1, sigma_t=4.0)
BOUNDS = (0.0, 30.0, 0.0, 30.0)


def make_events(n: int, workdir: Path) -> Path:
    data = simulate(TRUTH, model=1, n_background=n // 2, t_end=365.0, bounds=BOUNDS, seed=n)
    path = workdir / f"events-{n}.h5"
    save_events(data, path)
    return path


def run(events: Path, workdir: Path, sampler: str, iterations: int, warmup: int, tag: str):
    cfg = {
        "data": {"events": str(events)},
        "model": {"kind": 1},
        "sampler": {"kind": sampler, "iterations": iterations, "warmup": warmup, "seed": 1,
                    "initial": TRUTH.as_dict()},
        "chains": {"count": 1},
        "engine": {"backend": "opencl", "precision": "float32"},
        "output": {"run_dir": str(workdir / tag), "commit_every": 1000},
    }  # fmt: skip
    path = workdir / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    config = load_config(path)
    out = run_chain(config, 0)
    seconds = out.loop_seconds  # iterations only: data load, device and build excluded
    draws = read_chain(RunDir(config.output.run_dir).chain_path(0)).draws
    return out, seconds, draws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000])
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--ess-n", type=int, default=5_000)
    ap.add_argument("--ess-iterations", type=int, default=3_000)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "mcmc.json")
    args = ap.parse_args()
    import arviz as az

    rows = []
    print(f"{'N':>7} {'sampler':<11}{'it/s':>9} {'pair passes/it':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for n in args.sizes:
            events = make_events(n, work)
            for sampler in ("univariate", "block"):
                out, secs, _ = run(events, work, sampler, args.iterations, 0, f"{sampler}-{n}")
                # the initial evaluation (two passes) is not an iteration
                per_it = (out.pair_passes - 2) / args.iterations
                rate = args.iterations / secs
                rows.append({"kind": "speed", "n": n, "sampler": sampler, "iterations":
                             args.iterations, "seconds": secs, "it_per_s": rate,
                             "pair_passes_per_it": per_it})  # fmt: skip
                print(f"{n:>7} {sampler:<11}{rate:>9.2f} {per_it:>15.3f}")
        events = make_events(args.ess_n, work)
        warm = args.ess_iterations // 3
        print(f"\nESS of sigma_x, N = {args.ess_n}, {args.ess_iterations} iterations ({warm} "
              "warm-up)")  # fmt: skip
        print(f"{'sampler':<11}{'minutes':>9}{'ESS bulk':>10}{'ESS/min':>9}{'acceptance':>11}")
        for sampler in ("univariate", "block"):
            out, secs, d = run(events, work, sampler, args.ess_iterations, warm, f"ess-{sampler}")
            keep = d["warmup"] == 0
            ess = float(az.ess(np.log(d["sigma_x"][keep])[None, :], method="bulk"))
            acc = float(d["accepted"][keep].mean())
            rows.append({"kind": "ess", "n": args.ess_n, "sampler": sampler, "iterations":
                         args.ess_iterations, "warmup": warm, "seconds": secs, "ess_bulk_sigma_x":
                         ess, "ess_per_min": ess / (secs / 60), "acceptance": acc})  # fmt: skip
            print(f"{sampler:<11}{secs / 60:>9.2f}{ess:>10.0f}{ess / (secs / 60):>9.0f}"
                  f"{acc:>11.2f}")  # fmt: skip
    from hawkes_cli.kernels import list_devices

    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": [d.name for d in list_devices()][:1],
        "model": 1,
        "precision": "float32",
        "truth": TRUTH.as_dict(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
