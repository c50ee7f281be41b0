"""hawkes-prep hhs at the real file's scale: wall time and peak memory.

Writes (once, into a temporary folder, or to ``--file``) a synthetic HHS facility file with the
real schema -- 1,045,406 rows x 128 columns, bulk-CSV header, ~5,334 hospitals x 196 weeks in
real counties (weighted by population), quoted names with commas, ``POINT (lon lat)``
addresses, suppressed values (``-999999`` for 1-3), blanks, a weekday change, and a sprinkling
of the tricky rows the real file has (unpadded / renamed FIPS, territories, bad dates) -- then
runs ``hawkes-prep hhs --n 1000000`` on it in a child process per CSV engine and reports the
child's wall time and peak resident memory (``ru_maxrss``). Target: <= 120 s and < 8 GB.

    python benchmarks/bench_prep.py                      # both engines (pyarrow if installed)
    python benchmarks/bench_prep.py --engines pyarrow --file /tmp/hhs.csv --keep

Prints a table and writes JSON (default benchmarks/results/prep.json).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.counties import load_county_table
from hawkes_cli.prep import HHS_COLUMNS, HHSOptions, normalise_column, prepare_hhs

HERE = Path(__file__).resolve().parent
ROWS = 1_045_406
HOSPITALS = 5_334
FIRST_WEEK = dt.date(2020, 7, 31)  # a Friday
SUNDAY_FROM = dt.date(2023, 1, 1)  # later weeks start on Sundays
WALL_LIMIT_S = 120.0
RSS_LIMIT_GB = 8.0


def _week_dates(n_weeks: int) -> list[str]:
    out, d = [], FIRST_WEEK
    for _ in range(n_weeks):
        out.append(d.strftime("%Y/%m/%d"))
        d += dt.timedelta(days=7)
        if d >= SUNDAY_FROM and d.weekday() != 6:
            d += dt.timedelta(days=(6 - d.weekday()) % 7)
    return out


def write_synthetic(path: Path, rows: int = ROWS, seed: int = 0) -> dict[str, int]:
    """Write the synthetic facility file; returns its size and how many tricky rows it has."""
    rng = np.random.default_rng(seed)
    table = load_county_table()
    p = table.population / table.population.sum()
    county = rng.choice(len(table), HOSPITALS, p=p)  # hospitals where people live
    keys = [normalise_column(c) for c in HHS_COLUMNS]
    i_adult = keys.index("previous_day_admission_adult_covid_confirmed_7_day_sum")
    i_ped = keys.index("previous_day_admission_pediatric_covid_confirmed_7_day_sum")
    i_geo = keys.index("geocoded_hospital_address")
    numbers = np.array(["123.4", "-999999", "", "7", "860", "0", "12.857142857142858", "1",
                        "2456", "35.7"], dtype=object)  # fmt: skip
    # per hospital: identity text around fips_code, and the 117 other numeric columns
    head, mid, tail = [], [], []
    for h in range(HOSPITALS):
        c = county[h]
        f = rng.choice(numbers, size=len(keys))
        f[i_geo] = f'"POINT ({table.lon[c]:.6f} {table.lat[c]:.6f})"'
        head.append(f'{table.state[c]},{h:06d},"ST. {h} MEDICAL CENTER, INC.",{h} MAIN STREET,'
                    f"CITY {h % 97},{rng.integers(1000, 99999):05d},Short Term")  # fmt: skip
        mid.append("true," + ",".join(f[11:i_adult]))
        tail.append((",".join(f[i_adult + 1 : i_ped]), ",".join(f[i_ped + 1 :])))
    n_weeks = -(-rows // HOSPITALS)
    weeks = np.array(_week_dates(n_weeks), dtype=object)
    hosp = np.arange(rows) % HOSPITALS
    week = np.arange(rows) // HOSPITALS
    # weekly admissions: epidemic waves x hospital size; 1-3 suppressed, 2% not reported
    wave = 1.0 + 1.5 * np.sin(np.arange(n_weeks) / 8.0) ** 2
    size = rng.gamma(0.8, 5.0, HOSPITALS)
    counts = []
    for share in (1.0, 0.05):
        v = rng.poisson(share * size[hosp] * wave[week])
        text = v.astype(str).astype(object)
        text[(v >= 1) & (v <= 3)] = "-999999"
        counts.append(text)
    adult, ped = counts
    adult[rng.random(rows) < 0.02] = ""
    fips = table.fips[county].astype(object)[hosp]
    dates = weeks[week]
    pick = rng.random(rows)
    lead0 = np.array([f[0] == "0" for f in fips])
    tricky = {
        "unpadded": (pick < 0.01) & lead0,
        "renamed": (pick > 0.999) & (pick <= 0.9995),
        "territory": (pick > 0.9995) & (pick <= 0.9998),
        "bad_date": pick > 0.99995,
    }
    fips[tricky["unpadded"]] = [f[1:] for f in fips[tricky["unpadded"]]]
    fips[tricky["renamed"]] = "02270"
    fips[tricky["territory"]] = "72001"
    dates[tricky["bad_date"]] = "2021/02/30"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(",".join(HHS_COLUMNS) + "\n")
        block = 100_000
        for start in range(0, rows, block):
            lines = []
            for r in range(start, min(start + block, rows)):
                h = hosp[r]
                t1, t2 = tail[h]
                lines.append(f"{h:06d},{dates[r]},{head[h]},{fips[r]},{mid[h]},{adult[r]},"
                             f"{t1},{ped[r]},{t2}\n")  # fmt: skip
            handle.write("".join(lines))
    return {"bytes": path.stat().st_size, **{k: int(v.sum()) for k, v in tricky.items()}}


def child(args: argparse.Namespace) -> None:
    """Run the step once in this process; print one JSON line with its own measurements."""
    t0 = time.perf_counter()
    res = prepare_hhs(
        Path(args.file),
        Path(args.out),
        HHSOptions(n=args.n, seed=1, engine=args.engine),
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    a = res.attrs
    print(
        json.dumps(
            {
                "engine": a["reader"],
                "seconds_in_process": wall,
                "peak_rss_mb": peak_kb / 1024,
                "stages_s": res.seconds,
                "rows_read": a["rows_read"],
                "rows_kept": a["rows_kept"],
                "dropped": {k: v for k, v in a["dropped"].items() if v},
                "cases_expanded": a["cases_expanded"],
                "cases_kept": a["cases_kept"],
                "out_bytes": Path(args.out).stat().st_size,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", nargs="+", default=None, choices=["pyarrow", "csv"])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--file", type=Path, default=None, help="Synthetic file (reused if present).")
    ap.add_argument("--keep", action="store_true", help="Keep the synthetic file.")
    ap.add_argument("--out", type=Path, default=None, help="JSON results file.")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    engines = args.engines or (
        ["pyarrow", "csv"] if importlib.util.find_spec("pyarrow") else ["csv"]
    )
    with tempfile.TemporaryDirectory(prefix="bench-prep-") as tmp:
        src = args.file or Path(tmp) / "facility.csv"
        if not src.exists():
            t0 = time.perf_counter()
            info = write_synthetic(src, args.rows)
            print(f"wrote {src} ({info['bytes'] / 1e6:.0f} MB, {args.rows:,} rows x 128 "
                  f"columns) in {time.perf_counter() - t0:.0f} s; tricky rows {info}")  # fmt: skip
        else:
            info = {"bytes": src.stat().st_size}
        results = []
        for engine in engines:
            out = Path(tmp) / f"cases-{engine}.h5"
            cmd = [sys.executable, __file__, "--child", "--file", str(src), "--out", str(out),
                   "--n", str(args.n), "--engine", engine]  # fmt: skip
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(f"{engine}: failed\n{proc.stderr}")
            rec = json.loads(proc.stdout.strip().splitlines()[-1])
            rec["wall_s"] = wall  # interpreter start + imports + the whole step
            rec["within_limits"] = wall <= WALL_LIMIT_S and rec["peak_rss_mb"] < RSS_LIMIT_GB * 1024
            results.append(rec)
        if args.keep and args.file is None:
            kept = HERE / "results" / "facility-synthetic.csv"
            os.replace(src, kept)
            print(f"kept the synthetic file as {kept}")

    print(f"\n{'engine':<8} {'wall s':>7} {'peak RSS MB':>12} {'rows':>10} {'expanded':>10} "
          f"{'kept':>9}  stages (s)")  # fmt: skip
    for r in results:
        stages = " ".join(f"{k} {v:.1f}" for k, v in r["stages_s"].items())
        print(f"{r['engine']:<8} {r['wall_s']:>7.1f} {r['peak_rss_mb']:>12.0f} "
              f"{r['rows_read']:>10,} {r['cases_expanded']:>10,} {r['cases_kept']:>9,}  "
              + stages)  # fmt: skip
    report = {
        "benchmark": "hawkes-prep hhs, synthetic facility file at the real file's scale",
        "rows": args.rows,
        "columns": len(HHS_COLUMNS),
        "file_bytes": info["bytes"],
        "n": args.n,
        "limits": {"wall_s": WALL_LIMIT_S, "peak_rss_gb": RSS_LIMIT_GB},
        "results": results,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    out = args.out or HERE / "results" / "prep.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
