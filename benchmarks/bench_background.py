"""Background pass at 1M events: day lattice (exact, once per distinct day) vs continuous times
on a binned lattice (engine/binned.py: FFT, with a rigorous per-row bound).

For each ``tau_t``, one background pass B (all rows, float64, on the host):

* ``days``: whole-day times, the existing distinct-time method
  (:func:`hawkes_cli.engine.opencl.distinct_time_sums`, one direct convolution on the day
  grid, expanded to the rows), and :class:`~hawkes_cli.engine.binned.BinnedBackground` on the
  same times (an exact lattice: bound 0), with their largest relative difference;
* ``continuous``: the same events at continuous times (all distinct), BinnedBackground, with
  the realised bound in nats ``sum_n beta_n / B~_n`` (an upper bound on the log-likelihood
  error when ``mu0 B`` is part of ``lambda``, to first order; ``sum -log1p(-beta/B~)`` is the
  exact form) and, on a sample of rows, the realised error against the exact sum over all N
  sources;
* ``pairs``: the exact continuous-time sum, ``distinct_time_sums`` over U = N distinct times
  (U x U terms), measured at ``--pair-n`` and extrapolated quadratically to N (labelled so).

    python benchmarks/bench_background.py                    # N = 1,000,000 over 700 days
    python benchmarks/bench_background.py --n 200000 --taus 5 --repeats 3

Prints a table and writes JSON and text (default benchmarks/results/background.{json,txt}).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import scipy

from hawkes_cli.engine.binned import BinnedBackground
from hawkes_cli.engine.opencl import distinct_time_sums
from hawkes_cli.engine.times import TimeStructure

HERE = Path(__file__).resolve().parent
AREA = 3_532_068.0 / 69.17**2  # US land area in square degrees (about 738), as bench_loglik


def make_times(n: int, span: float, seed: int = 0) -> np.ndarray:
    """Continuous event times over ``span`` days, sorted: 60 % in three waves, 40 % uniform."""
    rng = np.random.default_rng(seed)
    wave = rng.random(n) < 0.6
    centre = rng.choice(np.array([0.2, 0.55, 0.85]) * span, n)
    t = np.where(wave, rng.normal(centre, span / 20), rng.uniform(0, span, n))
    out = (t < 0) | (t >= span)
    t[out] = rng.uniform(0, span, int(out.sum()))  # no pile-up (ties) at the ends
    return np.sort(t)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed(fn, repeats: int) -> tuple[float, float, object]:
    """(first call's seconds, median of ``repeats`` more, last value)."""
    t0 = time.perf_counter()
    value = fn()
    first = time.perf_counter() - t0
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        secs.append(time.perf_counter() - t0)
    return first, statistics.median(secs), value


def day_lattice_pass(ts: TimeStructure, tau: float) -> np.ndarray:
    """The OpenCL engine's host background: once per distinct day, expanded to the rows."""
    sums = distinct_time_sums(ts.unique, ts.counts, tau, 0, ts.unique.size)
    return (1.0 / (AREA * math.sqrt(2.0 * math.pi) * tau)) * sums[ts.inverse]


def exact_rows(t: np.ndarray, rows: np.ndarray, tau: float) -> np.ndarray:
    """The contract's B of a few rows, straight from the formula over all N sources."""
    out = np.empty(rows.size)
    for k, n in enumerate(rows):
        dt = t[n] - t
        e = np.exp(-0.5 * (dt / tau) ** 2)
        e[dt == 0.0] = 0.0
        out[k] = math.fsum(e) / (AREA * math.sqrt(2.0 * math.pi) * tau)
    return out


def pair_sum_seconds(t: np.ndarray, tau: float, block: int = 1000) -> float:
    """Seconds of the exact continuous-time pass (U x U terms, row blocks of ``block``)."""
    ts = TimeStructure.from_times(t)
    u = ts.unique.size
    t0 = time.perf_counter()
    sums = np.concatenate(
        [
            distinct_time_sums(ts.unique, ts.counts, tau, u0, min(u0 + block, u))
            for u0 in range(0, u, block)
        ]
    )
    _ = sums[ts.inverse]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--span", type=float, default=700.0, help="days")
    ap.add_argument("--taus", type=float, nargs="+", default=[0.5, 5.0, 60.0, 200.0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sample-rows", type=int, default=100, help="rows checked exactly")
    ap.add_argument("--pair-n", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "background")
    args = ap.parse_args()

    t = make_times(args.n, args.span)
    days = np.floor(t)
    t0 = time.perf_counter()
    ts_days = TimeStructure.from_times(days)
    ts_cont = TimeStructure.from_times(t)
    setup_ts = time.perf_counter() - t0
    t0 = time.perf_counter()
    bb_days = BinnedBackground(days, area=AREA, rows=(0, args.n), times=ts_days)
    init_days = time.perf_counter() - t0
    t0 = time.perf_counter()
    bb_cont = BinnedBackground(t, area=AREA, rows=(0, args.n), times=ts_cont)
    init_cont = time.perf_counter() - t0
    sample = np.random.default_rng(1).choice(args.n, args.sample_rows, replace=False)

    rows = []
    for tau in args.taus:
        _, s_day, b_day = timed(lambda tau=tau: day_lattice_pass(ts_days, tau), args.repeats)
        f_bd, s_bd, (b_bd, beta_bd) = timed(lambda tau=tau: bb_days.background(tau), args.repeats)
        f_bc, s_bc, (b_bc, beta_bc) = timed(lambda tau=tau: bb_cont.background(tau), args.repeats)
        ratio = beta_bc / b_bc
        exact = exact_rows(t, sample, tau)
        err = np.abs(b_bc[sample] - exact)
        row = {
            "tau_t": tau,
            "days_distinct_time_s": s_day,
            "days_binned_s": s_bd,
            "days_binned_first_s": f_bd,
            "days_binned_max_rel_diff_vs_distinct": float(np.max(np.abs(b_bd - b_day) / b_day)),
            "days_binned_bound_max": float(np.max(beta_bd)),
            "continuous_binned_s": s_bc,
            "continuous_binned_first_s": f_bc,
            "continuous_spacing_days": bb_cont.spacing_for(tau),
            "bound_nats_sum_beta_over_B": float(np.sum(ratio)),
            "bound_nats_sum_neg_log1p": float(np.sum(-np.log1p(-np.minimum(ratio, 0.5)))),
            "bound_rel_median": float(np.median(ratio)),
            "bound_rel_max": float(np.max(ratio)),
            "sample_max_err_over_bound": float(np.max(err / beta_bc[sample])),
            "sample_max_rel_err": float(np.max(err / exact)),
            "sample_within_bound": bool(np.all(err <= beta_bc[sample] + 1e-12 * exact)),
        }
        rows.append(row)
        print(
            f"tau_t={tau:g}: days {s_day:.3f} s (binned {s_bd:.4f} s, max rel diff "
            f"{row['days_binned_max_rel_diff_vs_distinct']:.1e}); continuous binned {s_bc:.3f} s "
            f"(first {f_bc:.3f} s), h=2^{int(math.log2(row['continuous_spacing_days']))}, bound "
            f"{row['bound_nats_sum_beta_over_B']:.3g} nats, sampled err/bound <= "
            f"{row['sample_max_err_over_bound']:.2f}",
            flush=True,
        )

    tau_pair = args.taus[len(args.taus) // 2]
    t_pair = make_times(args.pair_n, args.span, seed=2)
    pair_s = pair_sum_seconds(t_pair, tau_pair)
    pair_extrapolated = pair_s * (args.n / args.pair_n) ** 2
    print(
        f"exact continuous pair sum: {pair_s:.2f} s at U = {args.pair_n} distinct times; "
        f"EXTRAPOLATED (x (N/U)^2) to N = {args.n}: {pair_extrapolated:.0f} s",
        flush=True,
    )
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": f"host CPU: {cpu_name()} ({os.cpu_count()} cores), numpy/scipy.fft (float64)",
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "python": platform.python_version(),
        "n": args.n,
        "span_days": args.span,
        "area": AREA,
        "repeats": args.repeats,
        "metric": "seconds per background pass (all N rows), median of repeats after one "
        "first call (the first call of a tau_t builds that lattice's spectra; of a new "
        "lattice, its O(N) arrays)",
        "distinct_days": int(ts_days.unique.size),
        "distinct_continuous": int(ts_cont.unique.size),
        "binned_days_path": bb_days.path,
        "binned_continuous_path": bb_cont.path,
        "binned_days_init_s": init_days,
        "binned_continuous_init_s": init_cont,
        "time_structures_s": setup_ts,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    pair = {
        "tau_t": tau_pair,
        "measured_n": args.pair_n,
        "measured_s": pair_s,
        "extrapolated_n": args.n,
        "extrapolated_s": pair_extrapolated,
        "note": "EXTRAPOLATION: measured at measured_n distinct times (distinct_time_sums, "
        "U x U terms in row blocks of 1000), scaled by (extrapolated_n / measured_n)^2",
    }
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rows": rows, "exact_pair_sum": pair}, indent=1)
    )
    out.with_suffix(".txt").write_text(table(meta, rows, pair))
    print(table(meta, rows, pair))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.txt')}")


def table(meta: dict, rows: list[dict], pair: dict) -> str:
    lines = [
        f"# bench_background.py: N={meta['n']} over {meta['span_days']:g} days, "
        f"{meta['date']}, {meta['device']}",
        "# seconds per background pass (all rows), median of "
        f"{meta['repeats']} after a first call; days: {meta['distinct_days']} distinct, "
        f"continuous: {meta['distinct_continuous']} distinct",
        f"# binned init (O(N), once): days {meta['binned_days_init_s']:.2f} s, continuous "
        f"{meta['binned_continuous_init_s']:.2f} s; peak RSS {meta['peak_rss_gib']:.2f} GiB",
        f"{'tau_t':>7} {'days exact':>11} {'days binned':>12} {'cont binned':>12} "
        f"{'1st call':>9} {'h (days)':>10} {'bound nats':>11} {'med beta/B':>11} "
        f"{'err/bound':>10}",
    ]
    for r in rows:
        lines.append(
            f"{r['tau_t']:>7g} {r['days_distinct_time_s']:>11.3f} {r['days_binned_s']:>12.4f} "
            f"{r['continuous_binned_s']:>12.3f} {r['continuous_binned_first_s']:>9.3f} "
            f"{'2^' + str(int(math.log2(r['continuous_spacing_days']))):>10} "
            f"{r['bound_nats_sum_beta_over_B']:>11.3g} {r['bound_rel_median']:>11.2g} "
            f"{r['sample_max_err_over_bound']:>10.2f}"
        )
    lines += [
        "# days exact: distinct_time_sums on the day grid (the engines' host path); days "
        "binned: BinnedBackground on the same days (exact lattice, bound 0); max rel diff "
        + ", ".join(f"{r['days_binned_max_rel_diff_vs_distinct']:.1e}" for r in rows),
        "# bound nats: sum_n beta_n / B~_n; err/bound: largest |B~ - B| / beta over "
        "sampled rows (B exact over all N sources)",
        f"# exact continuous pair sum (tau_t={pair['tau_t']:g}): {pair['measured_s']:.2f} s "
        f"measured at U={pair['measured_n']}; EXTRAPOLATED quadratically to "
        f"N={pair['extrapolated_n']}: {pair['extrapolated_s']:.0f} s "
        f"({pair['extrapolated_s'] / 3600:.1f} h)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
