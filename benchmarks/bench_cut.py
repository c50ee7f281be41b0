"""Do the chains sample the cut posterior? ``hawkes-diagnose --cut-check`` on run directories,
as tables.

For each run directory (converged chains that redraw locations, ``sampler.resample_every > 0``)
it runs the check (:func:`hawkes_cli.cutcheck.run_cut_check`: ``--draws`` location draws from
the run's own sampler, the conditional mode and curvature of the log-parameters on each, on the
run's engine and device) and writes one table per run, then a summary of the ratio chains' sd /
cut sd per parameter and setting, to ``benchmarks/results/cut-<name>.txt`` and ``.json``.

    python benchmarks/bench_cut.py RUN_DIR [RUN_DIR ...] --name m1-200000
    python benchmarks/bench_cut.py --small /tmp/cut-small --name small   # makes its own runs

``--small DIR`` builds the problem of ``tests/test_cut.py`` (373 events of model 1 in 100
synthetic 1 x 1 counties, location uncertainty large against sigma_x = 0.5) and runs it with
three schemes, 2 chains x 5,000 iterations each (about 10 minutes on 2 CPU cores; run again
and the chains resume): the shipped one (``n_expensive: 1``, ``resample_every: 1``), four
trigger moves per redraw (``n_expensive: 4``), and a redraw every 10 iterations.

At scale, run it where the run's device is (a GPU job), e.g. for the 200,000-case runs

    srun --gres=gpu:1 python benchmarks/bench_cut.py runs/covid-m1-200k --name m1-200000

(100-250 evaluations and 20-60 pair passes per Newton draw, 11 and 5 per linear mode: about
1,400 pair passes for the default 20 of 200).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.cutcheck import run_cut_check
from hawkes_cli.diagnostics import DiagnoseOptions, diagnose
from hawkes_cli.diagnostics.cut import DEFAULT_CUT_DRAWS, DEFAULT_CUT_NEWTON_DRAWS
from hawkes_cli.diagnostics.cut_text import format_cut
from hawkes_cli.rundir import RunDir

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: The three schemes of ``--small``: name -> sampler settings over the test's config.
SMALL_SCHEMES = {
    "shipped": {"n_expensive": 1, "resample_every": 1},
    "n_expensive-4": {"n_expensive": 4, "resample_every": 1},
    "resample_every-10": {"n_expensive": 1, "resample_every": 10},
}
SMALL_ITERATIONS = 5000
SMALL_WARMUP = 300


def make_small(workdir: Path) -> list[Path]:
    """The test's problem run with :data:`SMALL_SCHEMES` (resumed where already run)."""
    import yaml

    from hawkes_cli.config import load_config
    from hawkes_cli.data import save_events
    from hawkes_cli.model import Params
    from hawkes_cli.runner import run_chain
    from hawkes_cli.simulate import DensityGrid, simulate

    workdir.mkdir(parents=True, exist_ok=True)
    events = workdir / "events.h5"
    if not events.exists():
        bounds = (0.0, 10.0, 0.0, 10.0)
        grid = DensityGrid.log_uniform(bounds, 10, 10, 1.0, 10.0, seed=2)
        truth = Params(mu0=0.5, tau_t=30.0, xi0=0.5, sigma_x=0.5, sigma_t=4.0)
        data = simulate(truth, model=1, n_background=200, t_end=200.0, bounds=bounds, seed=4,
                        grid=grid)  # fmt: skip
        save_events(data, events)
    runs = []
    for name, sampler in SMALL_SCHEMES.items():
        cfg = {
            "data": {"events": str(events), "window_end": 200.0},
            "model": {"kind": 1, "edge": "none"},
            "sampler": {"kind": "tiered", "iterations": SMALL_ITERATIONS, "seed": 3,
                        "warmup": SMALL_WARMUP, **sampler},
            "chains": {"count": 2},
            "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
            "output": {"run_dir": str(workdir / name), "commit_every": 500},
        }  # fmt: skip
        path = workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        config = load_config(path)
        for chain in range(config.chains.count):
            t0 = time.perf_counter()
            run_chain(config, chain)
            print(f"{name}: chain {chain} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        runs.append(Path(config.output.run_dir))
    return runs


def check_run(
    run_dir: Path, draws: int, burn: int | None, is_draws: int = 0, newton: int | None = None
) -> dict:
    """The check of one run and what the run is: its size, scheme and convergence."""
    config = RunDir(run_dir).load_config()
    options = DiagnoseOptions(
        burn=burn, cut_draws=draws, cut_is_draws=is_draws, cut_newton_draws=newton
    )
    report = diagnose(run_dir, options)
    t0 = time.perf_counter()
    cut = run_cut_check(run_dir, options, draws=report.draws)
    sc, eng = config.sampler, config.engine
    setting = {
        "run_dir": str(run_dir),
        "n_events": _n_events(config),
        "model": config.model.kind,
        "edge": config.model.edge,
        "sampler": sc.kind,
        "n_expensive": sc.n_expensive,
        "n_cheap": sc.n_cheap,
        "resample_every": sc.resample_every,
        "chains": len(report.draws.chain_ids),
        "draws_per_chain": report.common_draws,
        "diagnose_status": report.status,
        "engine": f"{eng.backend} {eng.precision} tolerance {eng.tolerance}",
        "device": eng.device,
    }
    return {"setting": setting, "cut": cut, "wall_s": time.perf_counter() - t0}


def _n_events(config) -> int:
    from hawkes_cli.data import load_events

    return load_events(config.data.events, need_density=config.model.kind == 2).n


def _header(s: dict) -> str:
    return (
        f"{s['run_dir']}: {s['n_events']:,} events, model {s['model']} (edge {s['edge']}), "
        f"{s['sampler']} n_expensive {s['n_expensive']} n_cheap {s['n_cheap']} resample_every "
        f"{s['resample_every']}; {s['chains']} chains x {s['draws_per_chain']} draws "
        f"(diagnose: {s['diagnose_status']}); engine {s['engine']}"
    )


def summary(results: list[dict]) -> str:
    """Chains' sd / cut sd (and z) per parameter and run."""
    names = [r.name for r in results[0]["cut"].rows]
    rows = [["run", "n_exp", "every", *names, "verdict"]]
    for res in results:
        s, cut = res["setting"], res["cut"]
        cells = []
        for r in cut.rows:
            if r.status == "not compared" or not np.isfinite(r.ratio):
                cells.append("not compared")
            else:
                cells.append(f"{r.ratio:.3f} ({r.z:+.1f})")
        rows.append([Path(s["run_dir"]).name, str(s["n_expensive"]), str(s["resample_every"]),
                     *cells, cut.verdict])  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "chains' sd / cut sd of each log parameter (z in combined se):\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="run directories to check")
    ap.add_argument("--name", required=True, help="results go to results/cut-NAME.{txt,json}")
    ap.add_argument("--draws", type=int, default=DEFAULT_CUT_DRAWS, help="location draws K")
    ap.add_argument(
        "--newton-draws",
        type=int,
        default=DEFAULT_CUT_NEWTON_DRAWS,
        help="as hawkes-diagnose --cut-newton-draws",
    )
    ap.add_argument("--burn", type=int, default=None, help="as hawkes-diagnose --burn")
    ap.add_argument(
        "--is-draws", type=int, default=0, help="as hawkes-diagnose --cut-is-draws (default 0)"
    )
    ap.add_argument("--small", type=Path, default=None, help="make and check the small runs here")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    runs = list(args.runs) + (make_small(args.small) if args.small else [])
    if not runs:
        ap.error("give run directories, or --small DIR")
    results = [check_run(r, args.draws, args.burn, args.is_draws, args.newton_draws) for r in runs]
    blocks = [f"{_header(r['setting'])}\n{format_cut(r['cut'])}" for r in results]
    text = "\n\n".join([*blocks, summary(results)]) + "\n"
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = {
        "date": stamp,
        "host": platform.node(),
        "python": platform.python_version(),
        "draws": args.draws,
        "newton_draws": args.newton_draws,
        "is_draws": args.is_draws,
        "runs": [
            {"setting": r["setting"], "wall_s": r["wall_s"], "cut_check": r["cut"].as_dict()}
            for r in results
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"cut-{args.name}.txt").write_text(f"# {stamp} on {platform.node()}\n{text}")
    (args.out / f"cut-{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(text)
    print(f"wrote {args.out / f'cut-{args.name}.txt'} and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
