"""Time to a converged posterior: wall time and pair passes until R-hat <= 1.01 and bulk and tail
ESS >= 400 for all five parameters, for each sampler on the same data, same machine, one run.

For each data set and sampler, ``hawkes-run local`` runs 4 chains (one process each, as a user
would) with the config's defaults otherwise (truncated float32 engine, fast start where the
sampler has one). While they run, the committed post-warm-up draws are read every ``--poll``
seconds; the first time all five parameters pass, the wall time (from launch, set-up and fast
start included) and the pair passes spent are recorded. The run goes on until every chain has
``--draws`` post-warm-up draws (the fixed-length comparison: R-hat, ESS and ESS per second of
each parameter) or the wall-time cap, then stops (SIGTERM: the chains commit and exit).

Data sets (``--sets``):

``lattice-5k`` / ``lattice-20k``
    Model 1 simulated with known parameters (xi0 0.6, sigma_x 0.15, sigma_t 14 days) on a
    30 x 30 region over 3 years, times floored to whole days (about 5,000 / 20,000 events).
``us-100k``
    100,000 clustered US-like events (300 cities of Zipf sizes, benchmarks/bench_loglik.py),
    whole days over 3 years, model 1.

    python benchmarks/bench_converge.py                              # all sets, both samplers
    python benchmarks/bench_converge.py --sets lattice-5k --cap 600
    python benchmarks/bench_converge.py --cap-of univariate=300 --cap-of us-100k:univariate=600

Prints a table and writes JSON (default benchmarks/results/converge.json) and a text table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_loglik import AREA, make_data

from hawkes_cli.data import EventData, save_events
from hawkes_cli.errors import StorageError
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.simulate import simulate
from hawkes_cli.storage import read_chain
from hawkes_cli.vocab import PARAM_NAMES

HERE = Path(__file__).resolve().parent
RHAT_MAX = 1.01
ESS_MIN = 400.0
CHAINS = 4
#: Known parameters of the simulated lattice sets (the issue's example data).
TRUTH = Params(mu0=0.5, tau_t=60.0, xi0=0.6, sigma_x=0.15, sigma_t=14.0)
BOUNDS = (0.0, 30.0, 0.0, 30.0)
T_END = 3 * 365.0


def lattice_events(n: int) -> EventData:
    """Model 1 with :data:`TRUTH`, about ``n`` events (a share ``xi0`` triggered), whole days."""
    n_background = round(n * (1 - TRUTH.xi0))
    return simulate(
        TRUTH,
        model=1,
        n_background=n_background,
        t_end=T_END,
        bounds=BOUNDS,
        seed=n,
        integer_days=True,
    )


def make_set(name: str, work: Path) -> tuple[Path, float | None]:
    """Write the events file of a data set; returns (path, area or None for the file's)."""
    path = work / f"{name}.h5"
    if name.startswith("lattice-"):
        n = int(name.split("-")[1].rstrip("k")) * 1000
        data = lattice_events(n)
        area = None
    elif name == "us-100k":
        data = make_data(100_000, "days", seed=1)
        area = AREA
    else:
        raise SystemExit(f"unknown data set {name!r}")
    save_events(data, path)
    return path, area


def write_config(events: Path, area: float | None, sampler: str, run_dir: Path, args) -> Path:
    cfg = {
        "data": {"events": str(events), "area": area},
        "model": {"kind": 1},
        "sampler": {"kind": sampler, "iterations": args.iterations, "warmup": args.warmup,
                    "seed": 1},
        "chains": {"count": CHAINS},
        "output": {"run_dir": str(run_dir), "commit_every": args.commit_every},
    }  # fmt: skip
    path = run_dir.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_post_warmup(run_dir: RunDir) -> list[dict[str, np.ndarray]] | None:
    """Every chain's committed post-warm-up draws (None until every chain has a file)."""
    out = []
    for k in range(CHAINS):
        path = run_dir.chain_path(k)
        if not path.exists():
            return None
        try:
            d = read_chain(path).draws
        except StorageError:
            return None
        keep = d["warmup"] == 0
        out.append({name: np.asarray(v)[keep] for name, v in d.items()})
    return out


def convergence(chains: list[dict[str, np.ndarray]]) -> dict[str, dict[str, float]] | None:
    """R-hat, bulk and tail ESS per parameter over equal-length chains (None if too short)."""
    import arviz as az

    n = min(c["mu0"].size for c in chains)
    if n < 50:
        return None
    out = {}
    for name in PARAM_NAMES:
        m = np.stack([np.log(c[name][:n]) for c in chains])
        out[name] = {
            "rhat": float(az.rhat(m)),
            "ess_bulk": float(az.ess(m, method="bulk")),
            "ess_tail": float(az.ess(m, method="tail")),
        }
    out["_draws_per_chain"] = {"n": n}
    return out


def converged(stats: dict | None) -> bool:
    if stats is None:
        return False
    return all(
        stats[p]["rhat"] <= RHAT_MAX and min(stats[p]["ess_bulk"], stats[p]["ess_tail"]) >= ESS_MIN
        for p in PARAM_NAMES
    )


def pair_passes(run_dir: RunDir) -> int:
    """Pair passes recorded in the chain files (every iteration's, warm-up included)."""
    total = 0
    for k in range(CHAINS):
        try:
            d = read_chain(run_dir.chain_path(k)).draws
        except (StorageError, FileNotFoundError):
            continue
        if "pair_passes" in d:
            total += int(np.sum(d["pair_passes"]))
    return total


def cap_of(args, data: str, sampler: str) -> float:
    """The wall-time cap of one run: ``--cap-of DATA:SAMPLER=S``, ``SAMPLER=S``, or ``--cap``."""
    caps = dict(item.split("=", 1) for item in args.cap_of)
    for key in (f"{data}:{sampler}", sampler):
        if key in caps:
            return float(caps[key])
    return args.cap


def run_one(events: Path, area: float | None, sampler: str, work: Path, args) -> dict:
    """Launch ``hawkes-run local`` and watch it until converged + fixed draws, or the cap."""
    run_dir = work / f"run-{events.stem}-{sampler}"
    config = write_config(events, area, sampler, run_dir, args)
    rd = RunDir(run_dir)
    cap = cap_of(args, events.stem, sampler)
    cmd = [sys.executable, "-m", "hawkes_cli", "run", "local", str(Path(config).resolve())]
    t0 = time.monotonic()
    proc = subprocess.Popen(  # from this checkout (``-m`` reads the working directory first)
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=HERE.parent
    )
    first: dict | None = None
    stats = None
    while True:
        time.sleep(args.poll)
        elapsed = time.monotonic() - t0
        chains = read_post_warmup(rd)
        stats = convergence(chains) if chains else None
        if first is None and converged(stats):
            first = {"seconds": elapsed, "pair_passes": pair_passes(rd),
                     "draws_per_chain": stats["_draws_per_chain"]["n"]}  # fmt: skip
            print(f"    converged after {elapsed:.0f} s ({first['draws_per_chain']} draws/chain)")
        n = stats["_draws_per_chain"]["n"] if stats else 0
        if (first is not None and n >= args.draws) or elapsed > cap or proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
    wall = time.monotonic() - t0
    chains = read_post_warmup(rd) or []
    n_fixed = min(args.draws, min((c["mu0"].size for c in chains), default=0))
    cut = [{k: v[:n_fixed] for k, v in c.items()} for c in chains]
    fixed = convergence(cut) if chains else None
    progress = [rd.read_progress(k).to_json() for k in range(CHAINS)]
    return {
        "sampler": sampler,
        "cap_seconds": cap,
        "converged": first,
        "wall_seconds": wall,
        "fixed_draws_per_chain": n_fixed,
        "fixed": fixed,
        "pair_passes": pair_passes(rd),
        "progress": progress,
        "stderr_tail": (proc.stderr.read() if proc.stderr else "")[-2000:],
    }


def ess_per_second(result: dict) -> float | None:
    """min over parameters of bulk ESS (fixed-length draws) per wall second of the run."""
    fixed = result.get("fixed")
    if not fixed:
        return None
    return min(fixed[p]["ess_bulk"] for p in PARAM_NAMES) / result["wall_seconds"]


def table(rows: list[dict]) -> str:
    lines = [
        f"{'data':<12}{'sampler':<12}{'converged s':>12}{'passes':>10}{'draws/ch':>9}"
        f"{'max R-hat':>10}{'min ESS b/t':>13}{'min ESS/s':>10}"
    ]
    for r in rows:
        conv = r["converged"]
        fixed = r["fixed"] or {}
        rhat = max((fixed[p]["rhat"] for p in PARAM_NAMES), default=float("nan")) if fixed else 0
        eb = min(fixed[p]["ess_bulk"] for p in PARAM_NAMES) if fixed else float("nan")
        et = min(fixed[p]["ess_tail"] for p in PARAM_NAMES) if fixed else float("nan")
        eps = ess_per_second(r)
        conv_s = f"{conv['seconds']:.0f}" if conv else f">{r['wall_seconds']:.0f}"
        lines.append(
            f"{r['data']:<12}{r['sampler']:<12}"
            f"{conv_s:>12}"
            f"{(conv['pair_passes'] if conv else r['pair_passes']):>10}"
            f"{r['fixed_draws_per_chain']:>9}{rhat:>10.3f}{f'{eb:.0f}/{et:.0f}':>13}"
            f"{(f'{eps:.2f}' if eps is not None else '-'):>10}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["lattice-5k", "lattice-20k", "us-100k"])
    ap.add_argument("--samplers", nargs="+", default=["tiered", "univariate"])
    ap.add_argument("--iterations", type=int, default=200_000, help="cap of iterations per chain")
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=2000, help="post-warm-up draws per chain")
    ap.add_argument("--cap", type=float, default=1800.0, help="wall seconds per run at most")
    ap.add_argument(
        "--cap-of",
        action="append",
        default=[],
        metavar="[DATA:]SAMPLER=SECONDS",
        help="cap of one data set's sampler, or of a sampler (repeatable)",
    )
    ap.add_argument("--poll", type=float, default=10.0)
    ap.add_argument("--commit-every", type=int, default=50)
    ap.add_argument("--work", type=Path, default=None, help="keep runs here (default: temp)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "converge.json")
    args = ap.parse_args()
    import tempfile

    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        for name in args.sets:
            events, area = make_set(name, work)
            for sampler in args.samplers:
                print(f"{name} {sampler}: running", flush=True)
                r = run_one(events, area, sampler, work, args) | {"data": name}
                rows.append(r)
                print(table([r]).splitlines()[1], flush=True)
    from hawkes_cli.kernels import list_devices

    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "device": [d.name for d in list_devices()][:1],
        "model": 1,
        "precision": "float32",
        "chains": CHAINS,
        "loadavg_before_after": [load_before, os.getloadavg()],
        "targets": {"rhat_max": RHAT_MAX, "ess_min": ESS_MIN},
        "args": {k: str(v) for k, v in vars(args).items()},
        "truth_lattice": TRUTH.as_dict(),
    }
    text = table(rows)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    args.out.with_suffix(".txt").write_text(text + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
