"""How much of a truncated trigger pass is work its cut-off needs, at 1,000,000 events.

For each model at a point near its 1M posterior (``bench_iteration.START``) and the cut-off
its chains calibrate there (``KAPPA``: the kappa in the bench_iteration chains' checkpoints),
on this machine's device, float32, with ``bench_iteration``'s events (real counties,
continuous times):

- **seconds** per pass (the least of ``--reps``; host and kernel together);
- **evaluated**: the pair terms the row-block kernel sums exactly, the ``row_sum`` calls
  (one per row and cell) and the 8-lane chunks they take, counted by the same kernel with
  every ``row_sum`` returning its count instead of its sum (deterministic: a work measure
  that timing noise does not blur);
- **ideal**: on a sample of rows, the sources ``m < n`` inside the cut-off's paraboloid
  ``u + v <= kappa_l`` (``u = (t_n - t_m) / sigma_t``, ``v = |x_n - x_m|^2 w_m / (2
  sigma_x^2)``): the fewest terms any scheme exact to ``exp(-kappa_l)`` per term sums; in
  all, and without the sources the expansion boxes sum by their moments;
- **parts**: seconds with the pair sums, or the ring cells' bounds, switched off in the
  kernel (results wrong, for timing only: the difference is what that part costs).

Each measurement runs in its own process (a changed kernel source needs a new program)::

    python benchmarks/bench_pass_shape.py [--n 1000000] [--name cpu]

writes ``benchmarks/results/pass-shape-<name>.txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_iteration import START, bench_commit, device_name, write_events  # noqa: E402

#: Cut-off exponent per model: what the bench_iteration chains (1M, redraw, tolerance 0.05
#: nats, float32) calibrated at START (checkpoints of 2026-11-29: 17.8 and 24.3).
KAPPA = {1: 17.8, 2: 24.2}
#: Rows sampled for the ideal count (its relative error about 1 / sqrt(rows) of the rows'
#: spread: a few per cent).
IDEAL_ROWS = 1500
#: The kernel line every ``row_sum`` ends with, and what the counting variants return.
_ROW_SUM = (
    "    return rel_sum(s, e, (real)tj, xi, yi, xil, yil, st, sxr, syr, sw, sa, kt, kx, ktl, kxr,\n"
    "                   shift, model2, amp);"
)
_COUNTS = {
    "calls": "1.0",
    "terms": "(double)(e - s)",
    "chunks": "(double)((((e + 7) & ~7) - (s & ~7)) / 8)",
}
#: Kernel edits that switch a part off (timing only).
_PARTS = {
    "no-pairs": [
        (
            "if (s >= er) {\n                        continue;",
            "if (1) {\n                        continue;",
        )
    ],
    "no-ring": [
        (
            "if (hmin(v) >= kappa) { /* ring cell: bound only, each row its own past */\n"
            "                    if (exp_mode) {",
            "if (hmin(v) >= kappa) {\n                    if (0) {",
        )
    ],
}


def edited_source(variant: str) -> str:
    """The truncated kernels' source for ``variant``: ``base``, a count of :data:`_COUNTS`
    (``count-<what>``) or a part switched off (:data:`_PARTS`). Each edit must find its text
    (at least once; every occurrence is replaced)."""
    from hawkes_cli.kernels import truncated_source

    src = truncated_source()
    if variant == "base":
        return src
    if variant.startswith("count-"):
        edits = [
            (_ROW_SUM, f"    return {_COUNTS[variant[6:]]};"),
            # the counts unscaled by the cells' densities, and no Hermite values added
            ("ua.a[j] += cdlo[c] * row_sum(", "ua.a[j] += row_sum("),
            ("ua.v += (val - g * err) * tf;", ""),
        ]
    else:
        edits = _PARTS[variant]
    for old, new in edits:
        if src.count(old) < 1:
            raise SystemExit(f"bench_pass_shape: kernels/truncated.cl changed; update {variant}")
        src = src.replace(old, new)
    return src


def measure(events: Path, model: int, variant: str, reps: int, per_row: Path | None = None) -> dict:
    """One pass setting in this process: seconds per pass (least of ``reps``), and for the
    counting variants the count summed over rows (each row's in ``per_row``, ``.npy``, when
    given)."""
    import h5py

    import hawkes_cli.kernels as kernels
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.times import TimeStructure
    from hawkes_cli.engine.truncated import TruncatedBackend

    src = edited_source(variant)
    kernels.truncated_source = lambda: src
    with h5py.File(events) as f:
        e = f["events"]
        t, x, y, d = (e[k][:] for k in ("time", "x", "y", "density"))
        area = float(e.attrs["area"])
    ev = DeviceEvents(
        Device.select(None), t, x, y, d if model == 2 else None, precision="float32",
        times=TimeStructure.from_times(t),
    )  # fmt: skip
    tr = TruncatedBackend(ev, model=model, area=area, kappa=KAPPA[model])
    sx, st = START[model]["sigma_x"], START[model]["sigma_t"]
    tr.trigger_bounded(sx, st)
    tr.block_pass.collect()  # the pass's per-row buffers (the device's bound reads them there)
    out = {"count": float(tr.block_pass.e.sum())}
    if per_row is not None:
        np.save(per_row, tr.block_pass.e)
    seconds = []
    for r in range(reps):  # lengthscales a hair apart: no cached pass, the same index
        t0 = time.perf_counter()
        tr.trigger_bounded(sx * (1 + 1e-5 * (r + 1)), st)
        seconds.append(time.perf_counter() - t0)
    out["seconds"] = min(seconds)
    return out


def ideal(events: Path, model: int) -> dict:
    """Sources inside the paraboloid ``u + v <= kappa_l`` per row (mean over
    :data:`IDEAL_ROWS` rows) times N: in all, and without the expansion boxes' sources."""
    n = _n_events(events)
    rows = np.sort(np.random.default_rng(1).choice(n, min(IDEAL_ROWS, n), replace=False))
    inside, unboxed = ideal_rows(events, model, rows)
    scale = n / rows.size
    return {"ideal": float(inside.sum()) * scale, "ideal_unboxed": float(unboxed.sum()) * scale}


def _n_events(events: Path) -> int:
    import h5py

    with h5py.File(events) as f:
        return int(f["events"]["time"].shape[0])


def ideal_rows(events: Path, model: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows``: the sources ``m`` older than it inside its paraboloid, in all and
    without those in expansion boxes (two int64 arrays shaped like ``rows``)."""
    import h5py

    from hawkes_cli.engine.grid import (
        EXPAND_MIN,
        build_index,
        level_bands,
        level_kappas,
        source_levels,
    )

    with h5py.File(events) as f:
        e = f["events"]
        t, x, y, d = (e[k][:] for k in ("time", "x", "y", "density"))
    dens = d if model == 2 else None
    level, r_unit = source_levels(dens, t.size)
    nlevels = int(level.max()) + 1
    ceil = level_bands(dens, level, nlevels)[1]
    kl = level_kappas(KAPPA[model], ceil)
    sx, st = START[model]["sigma_x"], START[model]["sigma_t"]
    w = d if model == 2 else np.ones_like(t)
    index = build_index(
        x, y, level, nlevels, r_unit, sx, kl, weight=w, ceil=ceil, expand_min=EXPAND_MIN
    )
    boxed = index.level >= index.nbase
    k_m = kl[level]
    inside = np.zeros(rows.size, dtype=np.int64)
    unboxed = np.zeros(rows.size, dtype=np.int64)
    for i, n in enumerate(rows):
        u = (t[n] - t[:n]) / st
        m = np.flatnonzero((u > 0) & (u <= k_m[:n]))
        r2 = (x[m] - x[n]) ** 2 + (y[m] - y[n]) ** 2
        hit = u[m] + r2 * w[m] / (2.0 * sx * sx) <= k_m[m]
        inside[i] = np.count_nonzero(hit)
        unboxed[i] = np.count_nonzero(hit & ~boxed[m])
    return inside, unboxed


VARIANTS = ("base", "count-calls", "count-terms", "count-chunks", "no-pairs", "no-ring")


def in_child(
    events: Path, model: int, variant: str, reps: int, per_row: Path | None = None
) -> dict:
    """:func:`measure` in a new process (a new kernel program per variant)."""
    cmd = [sys.executable, __file__, "--events", str(events), "--reps", str(reps)]
    cmd += ["--child", str(model), variant]
    if per_row is not None:
        cmd += ["--per-row", str(per_row)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def table(meta: dict, results: dict) -> str:
    lines = [
        f"# bench_pass_shape N={meta['n']:,} on {meta['device']}, float32, {meta['date']}, "
        f"commit {meta.get('commit') or 'unknown'}",
        "# truncated trigger pass at each model's 1M point and calibrated cut-off "
        "(evaluated = pair terms the kernel sums exactly; ideal = inside u + v <= kappa_l)",
        "model  kappa  pass s  no-pairs s  no-ring s  row_sum calls  evaluated  chunks"
        "     ideal  ideal w/o boxes  evaluated/ideal w/o boxes",
    ]
    for model, r in results.items():
        lines.append(
            f"{model:<5}  {KAPPA[int(model)]:<5}  {r['base']:.3f}   {r['no-pairs']:.3f}       "
            f"{r['no-ring']:.3f}      {r['count-calls']:.3g}       {r['count-terms']:.3g}"
            f"   {r['count-chunks']:.3g}  {r['ideal']:.3g}   {r['ideal_unboxed']:.3g}"
            f"          {r['count-terms'] / r['ideal_unboxed']:.2f}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hawkes-bench-iteration"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--name", default="cpu")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results")
    ap.add_argument("--events", type=Path, help="events file (default: WORK/events-N.h5)")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    ap.add_argument("--per-row", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    events = args.events or args.work / f"events-{args.n}.h5"
    if args.child:
        model, variant = int(args.child[0]), args.child[1]
        print(json.dumps(measure(events, model, variant, args.reps, args.per_row)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    if not events.exists():
        write_events(args.n, events)
    meta = {
        "n": args.n,
        "device": device_name(),
        "host": platform.node(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": bench_commit(),
        "start": START,
        "kappa": KAPPA,
    }
    results: dict[str, dict] = {}
    for model in (1, 2):
        r: dict[str, float] = ideal(events, model)
        for variant in VARIANTS:
            got = in_child(events, model, variant, args.reps)
            r[variant] = got["count"] if variant.startswith("count-") else got["seconds"]
            print(f"model {model} {variant}: {r[variant]:.4g}", file=sys.stderr, flush=True)
        results[str(model)] = r
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"pass-shape-{args.name}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    stem.with_suffix(".txt").write_text(table(meta, results))
    print(table(meta, results))


if __name__ == "__main__":
    main()
