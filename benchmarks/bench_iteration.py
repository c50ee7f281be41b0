"""Where an MCMC iteration's seconds go at 1,000,000 events, on this machine's device.

For each model (1, 2) and each location setting (``fixed``: ``resample_every: 0``; ``redraw``:
every iteration, as the shipped configs), one chain of the shipped config
``configs/covid-model{1,2}.yaml`` (tiered, 10 cheap moves and the config's ``n_expensive``
expensive ones per iteration, 4 as shipped since f479c81 and 1 before, ``--n-expensive`` sets
it; OpenCL float32, truncated trigger at 0.05 nats, ``edge: censored``, background ``auto``) runs
as a user runs it (``hawkes-run chain``) with only these changes: the events file, one chain of
one rank, a short warm-up, starting values near the 1M posterior with proposals of a tuned
chain's size (0.3% in log scale; no fast start), and the
environment variable ``HAWKES_PROFILE`` (:mod:`hawkes_cli.engine.profile`), which makes the
chain write per iteration: wall seconds, the main thread's CPU seconds (host work: on a CPU
device the kernels run on the driver's own threads and are not in it), every kernel's device
seconds from OpenCL profiling events (by name), bytes moved each way, blocking reads
(synchronisations), trigger passes, and the host stages' CPU seconds (grid index, row blocks,
location draw, ...). The first ``--skip`` iterations (the cut-off's calibration, first builds)
are left out of the summary.

Data: ``bench_loglik.make_county_data`` (events on the real US counties by population, with
their FIPS codes, so locations can be redrawn in the Census polygons), each whole day plus a
uniform fraction of it (continuous times, as ``hawkes-prep hhs --continuous``).

Usage::

    python benchmarks/bench_iteration.py [--n 1000000] [--iterations 20] [--name cpu]

writes ``benchmarks/results/iteration-<name>.json`` and ``.txt`` (partial results after each
configuration, so a time-out still leaves the finished ones). The commit recorded is ``git``'s,
or ``HAWKES_BENCH_COMMIT`` where set (a copy of the tree on a device machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_loglik import AREA, make_county_data  # noqa: E402

from hawkes_cli.vocab import COVID_N_EXPENSIVE  # noqa: E402

#: Near the 1M posterior of both models (benchmarks/results/mission-m*-1000000-*).
START = {
    1: {"mu0": 0.5, "tau_t": 9000.0, "xi0": 1.07, "sigma_x": 0.046, "sigma_t": 97.0},
    2: {"mu0": 0.5, "tau_t": 9000.0, "xi0": 1.07, "sigma_x": 0.82, "sigma_t": 91.0},
}
SETTINGS = {"fixed": 0, "redraw": 1}


def bench_commit() -> str:
    """The commit a bench's results name: ``HAWKES_BENCH_COMMIT`` where set (a copy of the tree
    on another machine may carry a stale or no ``.git``), else ``git rev-parse --short HEAD``
    (empty outside a checkout)."""
    return (
        os.environ.get("HAWKES_BENCH_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
        ).stdout.strip()
    )


def write_events(n: int, path: Path) -> None:
    """``make_county_data(n)`` with continuous times, as an events file with FIPS codes."""
    from hawkes_cli.data import EventData
    from hawkes_cli.data.hdf5_file import write_hdf5

    days = make_county_data(n)
    rng = np.random.default_rng(7)
    t = days.time + rng.random(days.n)
    order = np.argsort(t, kind="stable")
    data = EventData(
        t[order],
        days.x[order],
        days.y[order],
        days.density[order],
        fips=days.fips[order],
        source="bench-iteration",
        attrs={"crs": "lonlat", "area": AREA},
    )
    write_hdf5(data, str(path))


def shipped_config(model: int) -> dict:
    """``configs/covid-model{model}.yaml`` as a mapping."""
    return yaml.safe_load((HERE.parent / "configs" / f"covid-model{model}.yaml").read_text())


def chain_config(
    model: int,
    setting: str,
    events: Path,
    work: Path,
    iterations: int,
    n_expensive: int | None = None,
) -> Path:
    """The shipped config with only the bench's changes (``n_expensive``: None keeps the
    config's); returns its path."""
    cfg = shipped_config(model)
    cfg["data"]["events"] = str(events)
    cfg["sampler"].update(
        iterations=iterations,
        warmup=2,
        resample_every=SETTINGS[setting],
        initial=START[model],
        initial_scale=0.003,  # a tuned chain's proposals at 1M (no fast start here)
        stop_when="iterations",
    )
    if n_expensive is not None:
        cfg["sampler"]["n_expensive"] = n_expensive
    cfg["chains"].update(count=1, gpus_per_chain=1, chains_per_node=1)
    run = work / f"m{model}-{setting}"
    cfg["output"].update(run_dir=str(run), commit_every=1000)
    path = work / f"m{model}-{setting}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def chain_cutoff(config: Path) -> dict | None:
    """The chain's cut-off state at its last commit (its checkpoint's ``truncation``: the
    calibrated ``kappa``, the trigger ``auto`` chose), or None."""
    run = Path(yaml.safe_load(config.read_text())["output"]["run_dir"])
    try:
        record = json.loads((run / "chains" / "chain-00.ckpt.json").read_text())
    except (OSError, ValueError):
        return None
    return record.get("checkpoint", {}).get("truncation")


def run_chain(config: Path, profile_file: Path, timeout: float) -> dict:
    profile_file.unlink(missing_ok=True)
    env = {**os.environ, "HAWKES_PROFILE": str(profile_file.resolve())}
    t0 = time.perf_counter()
    # run from this checkout: ``-m`` puts the working directory first on the path, so a bench
    # started elsewhere (another worktree) would measure that directory's code
    proc = subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", "-v", "chain", str(config.resolve()),
         "--chain", "0", "--overwrite"],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent,
    )  # fmt: skip
    choice = [x for x in proc.stderr.splitlines() if "engine.trigger auto" in x]
    return {
        "rc": proc.returncode,
        "seconds": time.perf_counter() - t0,
        "trigger_choice": choice[-1].split("engine.trigger auto: ")[-1] if choice else None,
        "stderr": proc.stderr,
    }


def summarise(rows: list[dict], skip: int) -> dict:
    """Medians per iteration over the rows after ``skip``; kernels and stages by name."""
    rows = [r for r in rows if r["iteration"] >= skip]
    if not rows:
        return {"iterations": 0}

    def med(key: str) -> float:
        return statistics.median(float(r.get(key, 0.0)) for r in rows)

    kernels: dict[str, list[float]] = {}
    stages: dict[str, list[float]] = {}
    worker: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r.get("worker_stages", {}).items():
            worker.setdefault(k, [0.0, 0.0])
            worker[k][0] += v["cpu_s"] / len(rows)
            worker[k][1] += v["calls"] / len(rows)
        for k, v in r["kernels"].items():
            kernels.setdefault(k, [0.0, 0.0])
            kernels[k][0] += v["seconds"] / len(rows)
            kernels[k][1] += v["launches"] / len(rows)
        for k, v in r["stages"].items():
            stages.setdefault(k, [0.0, 0.0])
            stages[k][0] += v["cpu_s"] / len(rows)
            stages[k][1] += v["calls"] / len(rows)

    def stage_median(name: str) -> float:
        """Median over the rows (0 where an iteration did not run the stage): a one-off build
        (a new raster level) moves the mean, not this."""
        return statistics.median(float(r["stages"].get(name, {}).get("cpu_s", 0.0)) for r in rows)

    return {
        "iterations": len(rows),
        "wall_s": med("wall_s"),
        "host_cpu_s": med("host_cpu_s"),
        "worker_cpu_s": med("worker_cpu_s"),
        "kernel_s": med("kernel_s"),
        "trigger_passes": med("trigger_passes"),
        "bytes_up": med("bytes_up"),
        "bytes_down": med("bytes_down"),
        "syncs": med("syncs"),
        "uploads": med("uploads"),
        "mean_wall_s": statistics.fmean(float(r["wall_s"]) for r in rows),
        "mean_host_cpu_s": statistics.fmean(float(r["host_cpu_s"]) for r in rows),
        "kernels": {k: {"seconds": v[0], "launches": v[1]} for k, v in sorted(kernels.items())},
        "stages": {
            k: {"cpu_s": v[0], "median_cpu_s": stage_median(k), "calls": v[1]}
            for k, v in sorted(stages.items())
        },
        "worker_stages": {k: {"cpu_s": v[0], "calls": v[1]} for k, v in sorted(worker.items())},
    }


def device_name() -> str:
    from hawkes_cli.kernels import select_device

    try:
        info, _ = select_device(None)
        return f"{info.name} ({info.platform})"
    except Exception as exc:  # a bench reports what it could not do
        return f"unknown ({exc})"


def text(meta: dict, results: dict) -> str:
    lines = [
        f"# bench_iteration N={meta['n']:,}: one chain of the shipped covid configs "
        f"(tiered 10+{meta['n_expensive']}, float32, tolerance 0.05, edge censored, "
        "continuous times), "
        f"{meta['device']}, {meta['machine']}, commit {meta['commit']}",
        "# per iteration, medians over the iterations after the first "
        f"{meta['skip']} (host = main thread's CPU; worker = the thread that builds the next "
        "draw's grid index and row blocks, engine/ahead.py; kernels from OpenCL profiling "
        "events); kernels and host stages: means over those iterations (stages: median beside)",
        "config      its  wall s  host s  worker s  kernel s  trig  MB up  MB down  syncs",
    ]
    for name, r in results.items():
        s = r.get("summary", {})
        if not s.get("iterations"):
            lines.append(f"{name:<11} failed or no iterations (rc {r.get('rc')})")
            continue
        lines.append(
            f"{name:<11} {s['iterations']:>3}  {s['wall_s']:>6.3f}  {s['host_cpu_s']:>6.3f}  "
            f"{s.get('worker_cpu_s', 0.0):>8.3f}  {s['kernel_s']:>8.3f}  "
            f"{s['trigger_passes']:>4.1f}  {s['bytes_up'] / 1e6:>5.1f}  "
            f"{s['bytes_down'] / 1e6:>7.1f}  {s['syncs']:>5.0f}"
        )
    for name, r in results.items():
        s = r.get("summary", {})
        if not s.get("iterations"):
            continue
        lines.append(f"\n{name}: kernels (device s per iteration, launches)")
        for k, v in sorted(s["kernels"].items(), key=lambda kv: -kv[1]["seconds"]):
            lines.append(f"  {k:<22} {v['seconds']:>8.4f}  {v['launches']:>5.1f}")
        lines.append(f"{name}: host stages (main-thread CPU s per iteration: mean, median; calls)")
        for k, v in sorted(s["stages"].items(), key=lambda kv: -kv[1]["cpu_s"]):
            med = v.get("median_cpu_s", float("nan"))
            lines.append(f"  {k:<22} {v['cpu_s']:>8.4f}  {med:>8.4f}  {v['calls']:>5.1f}")
        if s.get("worker_stages"):
            lines.append(f"{name}: worker-thread stages (CPU s per iteration: mean; calls)")
            for k, v in sorted(s["worker_stages"].items(), key=lambda kv: -kv[1]["cpu_s"]):
                lines.append(f"  {k:<22} {v['cpu_s']:>8.4f}            {v['calls']:>5.1f}")
    chosen = [f"  {name}: {r['trigger_choice']}" for name, r in results.items()
              if r.get("trigger_choice")]  # fmt: skip
    kappas = [f"  {name}: kappa {r['cutoff']['kappa']:.4g}" for name, r in results.items()
              if (r.get("cutoff") or {}).get("kappa") is not None]  # fmt: skip
    if kappas:
        lines.append("\nthe cut-off at each chain's last commit (its checkpoint):")
        lines.extend(kappas)
    if chosen:
        lines.append("\nengine.trigger auto at each chain's start (the chain's log):")
        lines.extend(chosen)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    # 20: model 1's start sits 0.1% below a lattice point of sigma_x (0.04604), which its first
    # proposals cross; over 8 iterations that and the end of warm-up dominated the medians
    # (results/iteration-cpu-speculative.txt)
    ap.add_argument("--iterations", type=int, default=20, help="per chain, the skipped included")
    ap.add_argument("--skip", type=int, default=4)
    ap.add_argument("--models", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--work", type=Path, default=Path("/tmp/hawkes-bench-iteration"))
    ap.add_argument("--name", default="cpu", help="results name: iteration-<name>")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per chain")
    ap.add_argument(
        "--n-expensive",
        type=int,
        default=None,
        help=f"expensive moves per iteration (default: the shipped configs', {COVID_N_EXPENSIVE})",
    )
    args = ap.parse_args()
    args.work = args.work.resolve()  # the chains run from this checkout (run_chain)
    args.work.mkdir(parents=True, exist_ok=True)
    events = args.work / f"events-{args.n}.h5"
    if not events.exists():
        write_events(args.n, events)
    commit = bench_commit()
    meta = {
        "n": args.n,
        "iterations": args.iterations,
        "skip": args.skip,
        "device": device_name(),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "commit": commit,
        "start": START,
        "n_expensive": args.n_expensive or COVID_N_EXPENSIVE,  # the configs' (test_config.py)
    }
    results: dict[str, dict] = {}
    out = args.out_dir / f"iteration-{args.name}"
    out.parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for setting in args.settings:
            name = f"m{model}-{setting}"
            config = chain_config(
                model, setting, events, args.work, args.iterations, args.n_expensive
            )
            prof = args.work / f"{name}.jsonl"
            try:
                res = run_chain(config, prof, args.timeout)
            except subprocess.TimeoutExpired:
                res = {"rc": "timeout"}
            rows = [json.loads(x) for x in prof.read_text().splitlines()] if prof.exists() else []
            res["rows"] = rows
            res["summary"] = summarise(rows, args.skip)
            res["cutoff"] = chain_cutoff(config)
            if res.get("rc") != 0:
                print(name, "failed:", str(res.get("stderr", ""))[-2000:], flush=True)
            res.pop("stderr", None)
            results[name] = res
            out.with_suffix(".json").write_text(
                json.dumps({"meta": meta, "results": results}, indent=1)
            )
            out.with_suffix(".txt").write_text(text(meta, results))
            print(text(meta, results).split("\n\n")[0].splitlines()[-1], flush=True)
    failed = [name for name, r in results.items() if r.get("rc") != 0]
    if failed:  # the results stay written; the caller (gpu_node.sh) sees the exit status
        raise SystemExit(f"chains failed: {', '.join(failed)} (see their lines above)")


if __name__ == "__main__":
    main()
