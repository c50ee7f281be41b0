"""How long the next draw's worker thread keeps the main thread from Python (issue 40).

A chain that redraws its locations every iteration builds the next draw's grid index and row
blocks on a worker thread (``hawkes_cli/engine/ahead.py``) while the main thread drives the
iteration's passes. On a GPU the main thread spends that time in the driver's waits, which
release the GIL; each time a wait returns, the main thread needs the GIL back. Where the worker
holds it (its Python steps between numpy calls, and numpy calls that keep it), the main thread
waits, up to the interpreter's switch interval (5 ms) each time. Whether the worker overlaps the
main thread or adds to it is the question the GPU projection in docs/speed.md leaves open; this
measures it here, on any machine, without a GPU.

The main thread imitates the driver's waits: ``time.sleep(WAIT)`` (releases the GIL) then a
few microseconds of Python, over and over. Per wake-up its *delay* is the time from the end of
the sleep to the next Python statement beyond what the same loop takes with no worker running.
The worker builds one draw's index, device arrays and row blocks at the bench chain's lattice
point, each model, the same calls :func:`~hawkes_cli.engine.ahead._build` makes, with the
stage's wall and CPU time.

    python benchmarks/bench_gil.py                       # 1M bench events (bench_iteration's)
    python benchmarks/bench_gil.py --n 200000 --wait 0.0005

Needs two idle cores (the worker and the main thread each need one: measure with nothing else
running). Writes ``benchmarks/results/gil-{name}.{txt,json}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_iteration import START, bench_commit, write_events  # noqa: E402
from bench_pass_shape import KAPPA  # noqa: E402

from hawkes_cli.engine.ahead import IndexInputs, blocks_for, index_for  # noqa: E402
from hawkes_cli.engine.draw_index import BLOCK_WIDTH  # noqa: E402
from hawkes_cli.engine.grid import lattice_up, level_bands, source_levels  # noqa: E402
from hawkes_cli.engine.grid_upload import index_arrays  # noqa: E402


def inputs_for(path: Path, model: int, seed: int) -> tuple[IndexInputs, np.ndarray, np.ndarray]:
    """The truncated backend's fixed index inputs for ``model`` on the events file ``path``
    (as ``engine/truncated.py`` makes them, one rank), and one location draw as a chain makes
    it (each event uniform in its county, ``PolygonSampler.sample``; a chain redraws at its
    first iteration, so its indexes are never of the file's own locations)."""
    from hawkes_cli.data.files import load_events
    from hawkes_cli.regions import polygons_for

    data = load_events(path, need_density=True)
    polys = polygons_for(data)
    codes = polys.codes(data.fips)
    x, y = polys.sample(codes, np.random.default_rng(seed), polys.code_order(codes))
    t, d = data.time, data.density
    n = t.size
    dens = d if model == 2 else None
    level, r_unit = source_levels(dens, n)
    nlevels = int(level.max()) + 1
    ceil = level_bands(dens, level, nlevels)[1]
    w = d if model == 2 else np.ones(n)
    span = float(t[-1] - t[0])
    return IndexInputs(level, nlevels, r_unit, w, ceil, t, span, (0, n)), x, y


def build(inputs: IndexInputs, x: np.ndarray, y: np.ndarray, model: int) -> dict[str, float]:
    """One draw's build, as the worker makes it; wall and thread-CPU seconds per stage."""
    key = (lattice_up(START[model]["sigma_x"]), lattice_up(KAPPA[model]))
    width = BLOCK_WIDTH * lattice_up(START[model]["sigma_t"])
    out: dict[str, float] = {}
    w0, c0 = time.perf_counter(), time.thread_time()
    index = index_for(inputs, x, y, key)
    index_arrays(index, inputs.weight)
    w1, c1 = time.perf_counter(), time.thread_time()
    blocks_for(inputs, index, x, y, width)
    w2, c2 = time.perf_counter(), time.thread_time()
    out.update(index_wall=w1 - w0, index_cpu=c1 - c0, blocks_wall=w2 - w1, blocks_cpu=c2 - c1)
    return out


def wakeups(wait: float, stop: threading.Event, limit: int) -> np.ndarray:
    """The main thread's driver-wait imitation: seconds from each sleep's planned end to the
    Python statement after it, until ``stop`` is set (or ``limit`` wake-ups)."""
    late = []
    while not stop.is_set() and len(late) < limit:
        t0 = time.perf_counter()
        time.sleep(wait)
        late.append(time.perf_counter() - t0 - wait)
    return np.asarray(late)


def measure(work_once: Callable[[], dict], wait: float, reps: int) -> dict:
    """Baseline wake-ups (no worker), ``work_once()`` alone, then on a worker thread with the
    main thread waking beside it (``work_once`` returns a dict of its own figures)."""
    base = wakeups(wait, threading.Event(), 2000)
    alone = [work_once() for _ in range(reps)]
    beside: list[dict] = []
    late: list[np.ndarray] = []
    for _ in range(reps):
        stop = threading.Event()
        result: dict = {}

        def work(result=result, stop=stop) -> None:
            try:
                result.update(work_once())
            finally:  # a failed build must not leave the main thread waking for hours
                stop.set()

        worker = threading.Thread(target=work)
        w0 = time.perf_counter()
        worker.start()
        late.append(wakeups(wait, stop, 10**7))
        worker.join()
        result["span"] = time.perf_counter() - w0
        beside.append(result)
    typical = float(np.median(base))
    delays = [np.clip(v - typical, 0.0, None) for v in late]
    total = [float(d.sum()) for d in delays]
    return {
        "wait_s": wait,
        "baseline_late_median_s": typical,
        "baseline_late_p99_s": float(np.quantile(base, 0.99)),
        "alone": alone,
        "beside": beside,
        "wakeups": [int(v.size) for v in late],
        "delay_total_s": total,
        "delay_per_wakeup_mean_s": [float(d.mean()) for d in delays],
        "delay_p99_s": [float(np.quantile(d, 0.99)) for d in delays],
        "delay_max_s": [float(d.max()) for d in delays],
        "share_held": [t / b["span"] for t, b in zip(total, beside, strict=True)],
    }


def table(meta: dict, rows: list[dict]) -> str:
    ms = 1e3
    lines = [
        f"# bench_gil N={meta['n']:,} on {meta['host']} ({meta['cores']} cores), "
        f"{meta['date']}; main thread: sleep {meta['wait'] * 1e6:.0f} us (GIL released, as in "
        "a driver's wait) then Python, against the worker's build of one draw's index, device "
        "arrays and row blocks (engine/ahead.py's calls) at the bench chain's lattice point, "
        f"for one location draw (each event uniform in its county, seed {meta['seed']}); "
        f"commit {meta['commit']}",
        "# delay = wake-up lateness beyond the no-worker median; held = total delay / the "
        "build's wall span (the share of the build during which the main thread could not run "
        "Python); per rep",
        "model  rep  index s (cpu)  blocks s (cpu)  alone s  beside s  wake-ups  delay ms  "
        "mean us  p99 us  max us  held",
    ]
    if meta.get("note"):
        lines.insert(2, f"# {meta['note']}")
    for r in rows:
        for i, b in enumerate(r["beside"]):
            a = r["alone"][i]
            lines.append(
                f"{r['model']:<5}  {i + 1:<3}  {b['index_wall']:.3f} ({b['index_cpu']:.3f})  "
                f"{b['blocks_wall']:.3f} ({b['blocks_cpu']:.3f})   "
                f"{a['index_wall'] + a['blocks_wall']:.3f}    {b['span']:.3f}     "
                f"{r['wakeups'][i]:<8}  {r['delay_total_s'][i] * ms:7.1f}  "
                f"{r['delay_per_wakeup_mean_s'][i] * 1e6:6.1f}  {r['delay_p99_s'][i] * 1e6:6.0f}  "
                f"{r['delay_max_s'][i] * 1e6:6.0f}  {r['share_held'][i]:.3f}"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hawkes-bench-iteration"))
    ap.add_argument("--events", type=Path, help="events file (default: WORK/events-N.h5)")
    ap.add_argument("--wait", type=float, default=0.001, help="seconds per imitated wait")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1, help="of the location draw")
    ap.add_argument("--name", default="cpu")
    ap.add_argument("--note", default="", help="a line for the table's header")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results")
    args = ap.parse_args()
    events = args.events or args.work / f"events-{args.n}.h5"
    if not events.exists():
        args.work.mkdir(parents=True, exist_ok=True)
        write_events(args.n, events)
    import os

    meta = {
        "n": args.n,
        "host": platform.node(),
        "cores": os.cpu_count(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wait": args.wait,
        "switch_interval_s": sys.getswitchinterval(),
        "events": str(events),
        "seed": args.seed,
        "note": args.note,
        "commit": bench_commit(),
    }
    rows = []
    for model in (1, 2):
        inputs, x, y = inputs_for(events, model, args.seed)
        row = measure(partial(build, inputs, x, y, model), args.wait, args.reps)
        rows.append({"model": model, "n": int(x.size), **row})
        print(table(meta, rows), flush=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"gil-{args.name}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    stem.with_suffix(".txt").write_text(table(meta, rows))


if __name__ == "__main__":
    main()
