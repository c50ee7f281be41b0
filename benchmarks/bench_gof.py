"""Goodness of fit at scale (issue 15): ``hawkes-diagnose RUN_DIR --gof DIR`` end to end.

Data: ``bench_loglik.make_data`` -- US-like clustered events (300 'cities' of Zipf sizes, spread
0.15 degrees, lon/lat degrees, densities log-uniform per city), integer days over three years.
A run directory is made with the default engine settings (OpenCL float32, truncated at
tolerance 1e-6) and one chain file of ``--chain-draws`` draws scattered 2% around
``bench_loglik.PARAMS``; then :func:`hawkes_cli.gof.run_gof` runs with ``--draws`` branching
draws, the Census county polygons (plotly-geo) and a conditional-intensity map.

Reports wall time per step (from ``gof.json``), total wall time and peak resident memory
(``ru_maxrss`` of this process), as a table and JSON (default benchmarks/results/gof.json and
gof.txt); the figures are kept in ``--out`` (default /tmp/hawkes-gof-bench).

    nice -n 15 python benchmarks/bench_gof.py                 # N = 1,000,000, model 2
    nice -n 15 python benchmarks/bench_gof.py --n 50000       # quick
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import resource
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_loglik import AREA, PARAMS, make_data

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.gof import GofOptions, run_gof
from hawkes_cli.rundir import RunDir
from hawkes_cli.storage import DRAW_FIELDS, ChainMeta, ChainWriter
from hawkes_cli.vocab import PARAM_NAMES


def make_run(root: Path, n: int, model: int, chain_draws: int) -> Path:
    data = make_data(n, "days")
    data = data.with_attrs(area=AREA, crs="lonlat", time_unit="day")
    save_events(data, root / "events.h5")
    cfg = {
        "data": {"events": str(root / "events.h5")},
        "model": {"kind": model},
        "sampler": {"iterations": chain_draws, "warmup": 0, "seed": 1},
        "output": {"run_dir": str(root / "run")},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(root / "config.yaml")
    RunDir.of(config).write_config(config, overwrite=True)
    meta = ChainMeta(
        chain_id=0,
        seed=1,
        model=model,
        n_events=n,
        iterations=chain_draws,
        warmup=0,
        thin=1,
        config_yaml=config.to_yaml(),
        config_sha256=config.sha256,
        kernel_sha256="",
        param_names=PARAM_NAMES,
        fields=DRAW_FIELDS,
    )
    rng = np.random.default_rng(1)
    path = RunDir.of(config).chain_path(0)
    if path.parent.exists():  # a previous benchmark's chain
        shutil.rmtree(path.parent)
    writer, _ = ChainWriter.open(path, meta)
    with writer:
        for i in range(chain_draws):
            row = {
                k: v * math.exp(0.02 * rng.standard_normal()) for k, v in PARAMS.as_dict().items()
            }
            row.update(
                iteration=i,
                loglik=0.0,
                logprior=0.0,
                accepted=1,
                warmup=0,
                coordinate=0,
                scale=0.1,
                pair_passes=1,
                n_proposals=1,
                n_accepted=1,
                jump=-1,
            )
            writer.append(row)
        writer.commit({"iteration": chain_draws, "finished": True})
    return config.output.run_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--model", type=int, default=2)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--chain-draws", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("/tmp/hawkes-gof-bench"))
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "gof.json")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run = make_run(args.out, args.n, args.model, args.chain_draws)
    setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    summary = run_gof(run, args.out / "gof", GofOptions(draws=args.draws, date="540"))
    wall = time.perf_counter() - t1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (Linux: KiB)
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "n": args.n,
        "model": args.model,
        "draws": args.draws,
        "setup_seconds": round(setup, 1),
        "gof_seconds": round(wall, 1),
        "peak_rss_gib": round(peak, 2),
        "steps": summary["seconds"],
        "ks_statistic": summary["ks_statistic"],
        "ks_pvalue": summary["ks_pvalue"],
        "share_triggered": summary["share_triggered"],
        "counties": summary.get("counties"),
    }
    lines = [
        f"# bench_gof.py: N={args.n} model {args.model}, {args.draws} branching draws, "
        f"OpenCL float32 truncated (tolerance 1e-6), {result['date']}",
        f"{'step':>14} {'seconds':>9}",
    ]
    lines += [f"{k:>14} {v:9.1f}" for k, v in summary["seconds"].items()]
    lines.append(f"peak resident memory: {peak:.2f} GiB; data set-up {setup:.1f} s (not counted)")
    text = "\n".join(lines)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    args.json.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
