"""hawkes-diagnose at the paper's scale: 30 chains x 20,000 draws x 5 parameters.

Writes a run directory into a temporary folder (or ``--run-dir``): 30 real chain files through
:class:`hawkes_cli.storage.ChainWriter` (the first 1,000 iterations flagged warm-up, as in the
paper), each parameter an AR(1) random walk on the log scale around the paper's model-1 medians
(autocorrelation like a random-scan Metropolis chain), plus a small lon/lat events file with the
three Table 2 counties. Then it diagnoses the run -- every chain file read, burn-in dropped,
R-hat, bulk/tail ESS, MCSE, quantiles, derived quantities and three county lengthscales, the
terminal table rendered; no plots -- in a fresh child process, so the time includes the
interpreter start and the imports (arviz among them), as a user of ``hawkes-diagnose`` sees it.
Also reports the in-process time of a repeated call (median of ``--repeat``). Target: <= 15 s
end to end.

    python benchmarks/bench_diagnose.py
    python benchmarks/bench_diagnose.py --run-dir /tmp/bench-run --keep   # reuse the files

Prints the figures and writes JSON (default benchmarks/results/diagnose.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.config import config_from_yaml_text
from hawkes_cli.data import EventData, save_events
from hawkes_cli.model import PARAM_NAMES
from hawkes_cli.rundir import RunDir
from hawkes_cli.storage import DRAW_FIELDS, ChainMeta, ChainWriter

HERE = Path(__file__).resolve().parent
CHAINS = 30
DRAWS = 20_000
WARMUP = 1_000
COMMIT_EVERY = 2_000
LIMIT_S = 15.0
COUNTIES = ("36061", "23009", "06037")  # Manhattan, Hancock County ME, Los Angeles
MEDIANS = {"mu0": 0.0019, "tau_t": 176.4, "xi0": 1.001, "sigma_x": 0.0798, "sigma_t": 19.67}


def write_run(run_dir: Path, chains: int = CHAINS, draws: int = DRAWS, seed: int = 0) -> float:
    """Write the events file, the config and the chain files; returns the seconds it took."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    n_ev = 10_000
    fips = rng.choice(np.array([*COUNTIES, "17031", "48201"]), n_ev)
    lat = {"36061": 40.78, "23009": 44.56, "06037": 34.20, "17031": 41.84, "48201": 29.86}
    dens = {"36061": 74211.61, "23009": 34.96, "06037": 2467.79, "17031": 5495.1, "48201": 2711.3}
    events = EventData(
        time=np.sort(rng.uniform(0, 1200, n_ev)),
        x=rng.uniform(-120, -70, n_ev),
        y=np.array([lat[f] for f in fips]) + rng.normal(0, 0.05, n_ev),
        density=np.array([dens[f] for f in fips]),
        fips=fips,
        attrs={"time_unit": "day", "crs": "lonlat"},
    )
    save_events(events, run_dir / "events.h5")
    config = config_from_yaml_text(
        f"data: {{events: events.h5}}\nmodel: {{kind: 1}}\n"
        f"sampler: {{iterations: {draws}, warmup: {WARMUP}}}\nchains: {{count: {chains}}}\n",
        base_dir=run_dir,
        where="bench.yaml",
    )
    RunDir(run_dir).write_config(config, overwrite=True)
    phi, step = 0.9, 0.02  # log-scale AR(1): ESS about 5% of the draws
    for c in range(chains):
        meta = ChainMeta(
            chain_id=c,
            seed=1,
            model=1,
            n_events=n_ev,
            iterations=draws,
            warmup=WARMUP,
            thin=1,
            config_yaml=config.to_yaml(),
            config_sha256=config.sha256,
            kernel_sha256="",
            param_names=PARAM_NAMES,
            fields=DRAW_FIELDS,
        )
        z = np.zeros((len(PARAM_NAMES), draws))
        e = rng.standard_normal((len(PARAM_NAMES), draws)) * step
        for i in range(1, draws):
            z[:, i] = phi * z[:, i - 1] + e[:, i]
        values = np.exp(z) * np.array([MEDIANS[p] for p in PARAM_NAMES])[:, None]
        coordinate = rng.integers(0, len(PARAM_NAMES), draws)
        accepted = rng.uniform(size=draws) < 0.45
        loglik = -1e6 + rng.normal(0, 3, draws)
        path = RunDir(run_dir).chain_path(c)
        writer, _ = ChainWriter.open(path, meta, overwrite=True)
        with writer:
            for i in range(draws):
                row = dict.fromkeys((name for name, _ in DRAW_FIELDS), 0)  # fields not set below
                row.update({p: float(values[j, i]) for j, p in enumerate(PARAM_NAMES)})
                row.update(
                    iteration=i,
                    loglik=float(loglik[i]),
                    logprior=-5.0,
                    accepted=int(accepted[i]),
                    warmup=int(i < WARMUP),
                    coordinate=int(coordinate[i]),
                    scale=0.1,
                )
                writer.append(row)
                if writer.n_pending >= COMMIT_EVERY:
                    writer.commit({"iteration": i + 1})
            writer.commit({"iteration": draws, "finished": True})
    return time.perf_counter() - t0


def child(run_dir: Path) -> None:
    """Diagnose once in this (fresh) process; print one JSON line."""
    t0 = time.perf_counter()
    from hawkes_cli.diagnostics import DiagnoseOptions, diagnose, format_table

    t_import = time.perf_counter() - t0
    report = diagnose(run_dir, DiagnoseOptions(counties=COUNTIES))
    text = format_table(report)
    total = time.perf_counter() - t0
    sys.stderr.write(text)
    print(
        json.dumps(
            {
                "seconds_in_process": total,
                "seconds_import_module": t_import,
                "chains_used": len(report.used_chains),
                "draws_per_chain": report.common_draws,
                "status": report.status,
                "sigma_x": report.row("sigma_x").as_dict(),
                "table_lines": text.count("\n"),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, default=None, help="Run directory (reused if present).")
    ap.add_argument("--keep", action="store_true", help="Keep the temporary run directory.")
    ap.add_argument("--repeat", type=int, default=3, help="In-process repetitions.")
    ap.add_argument("--out", type=Path, default=None, help="JSON results file.")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return

    tmp = None if args.run_dir is not None else Path(tempfile.mkdtemp(prefix="bench-diagnose-"))
    run_dir = args.run_dir if tmp is None else tmp / "run"
    try:
        if not RunDir(run_dir).chain_path(CHAINS - 1).exists():
            secs = write_run(run_dir)
            size = sum(p.stat().st_size for p in RunDir(run_dir).chains_dir.glob("*.h5"))
            print(f"wrote {CHAINS} chain files x {DRAWS:,} draws ({size / 1e6:.0f} MB) in "
                  f"{secs:.0f} s to {run_dir}")  # fmt: skip
        cmd = [sys.executable, __file__, "--child", str(run_dir)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"diagnose failed\n{proc.stderr}")
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        print(proc.stderr, end="")

        from hawkes_cli.diagnostics import DiagnoseOptions, diagnose, format_table

        options = DiagnoseOptions(counties=COUNTIES)
        diagnose(run_dir, options)  # warm: imports done, files in the page cache
        warm = []
        for _ in range(max(args.repeat, 1)):
            t1 = time.perf_counter()
            format_table(diagnose(run_dir, options))
            warm.append(time.perf_counter() - t1)
    finally:
        if tmp is None or args.keep:
            print(f"run directory kept: {run_dir}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "benchmark": "hawkes-diagnose: 30 chains x 20,000 draws x 5 parameters, table, no plots",
        "chains": CHAINS,
        "draws": DRAWS,
        "warmup": WARMUP,
        "parameters": len(PARAM_NAMES),
        "counties": list(COUNTIES),
        "limit_s": LIMIT_S,
        "wall_s_end_to_end": wall,
        "seconds_in_child": rec["seconds_in_process"],
        "seconds_warm_median": float(np.median(warm)),
        "seconds_warm": warm,
        "within_limit": wall <= LIMIT_S,
        "child": rec,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    print(f"\n{'measure':<44} {'seconds':>8}")
    print(f"{'end to end (fresh python, imports, table)':<44} {wall:>8.2f}")
    print(f"{'  of which inside the child':<44} {rec['seconds_in_process']:>8.2f}")
    print(f"{'in process, warm (median of ' + str(len(warm)) + ')':<44} {np.median(warm):>8.2f}")
    print(f"target <= {LIMIT_S:.0f} s: {'met' if wall <= LIMIT_S else 'MISSED'}")
    out = args.out or HERE / "results" / "diagnose.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
