"""Tables 1-2 of two converged MCMC runs side by side: how far the corrections move them.

Reads the posterior tables ``hawkes-diagnose`` printed for each run (``bench_mission.py``
keeps them as ``mission-*-table.txt``): the run with the paper's likelihood (``--before``) and
the run with the corrections (``--after``). For each quantity: both medians and sds, the shift
in % and in posterior sds of each run, and whether the 95% intervals overlap. With
``--laplace`` (``bench_corrected.py``'s JSON) the Laplace mode of the same corrected
likelihood (its fit ``ii``) is put beside the corrected MCMC median, as an independent check.

Usage::

    python benchmarks/tables_mcmc.py --before benchmarks/results/mission-m1-1000000-s4-table.txt \\
        --after RUN/mission-m1-1000000-corrected-table.txt \\
        --laplace benchmarks/results/tables-corrected-m1-1000000.json \\
        --out benchmarks/results/tables-mcmc-m1-1000000
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: Columns of a ``hawkes-diagnose`` posterior row after the quantity's name and unit.
COLUMNS = ("median", "q2_5", "q97_5", "mean", "sd", "rhat", "ess_bulk", "ess_tail", "mcse")


def read_table(path: Path) -> dict[str, dict[str, float]]:
    """The posterior rows of a ``hawkes-diagnose`` table: ``{"name unit": {column: value}}``
    (derived rows too; a name repeated with another unit is told apart by it)."""
    rows: dict[str, dict[str, float]] = {}
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("quantity"):
            inside = True
            continue
        if not inside:
            continue
        if not line.strip() or line.startswith("(median"):
            break
        if line.startswith("derived"):
            continue
        tokens = line.split()
        if len(tokens) <= len(COLUMNS):
            continue
        values = [float(v) for v in tokens[-len(COLUMNS) :]]
        rows[" ".join(tokens[: -len(COLUMNS)])] = dict(zip(COLUMNS, values, strict=True))
    if not rows:
        raise SystemExit(f"error: no posterior table in {path}")
    return rows


def compare(
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    laplace: dict[str, float],
) -> dict[str, dict[str, float | bool | None]]:
    """Per quantity in both tables: medians, sds, shifts and whether the intervals overlap."""
    out: dict[str, dict[str, float | bool | None]] = {}
    seen: set[str] = set()
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            continue
        shift = a["median"] - b["median"]
        base = name.split()[0]
        # the Laplace mode is in the parameter's own unit: its first row (not the derived ones)
        mode = laplace.get(base) if base not in seen else None
        seen.add(base)
        out[name] = {
            "before_median": b["median"],
            "before_sd": b["sd"],
            "after_median": a["median"],
            "after_sd": a["sd"],
            "after_rhat": a["rhat"],
            "after_ess_bulk": a["ess_bulk"],
            "shift_pct": 100.0 * shift / b["median"],
            "shift_before_sds": shift / b["sd"],
            "shift_after_sds": shift / a["sd"],
            "intervals_overlap": bool(a["q2_5"] <= b["q97_5"] and b["q2_5"] <= a["q97_5"]),
            "laplace_mode": mode,
            "after_vs_laplace_sds": None if mode is None else (a["median"] - mode) / a["sd"],
        }
    return out


def render(rows: dict[str, dict], meta: dict) -> str:
    lines = [f"# {meta['title']}", f"# before: {meta['before']}", f"# after:  {meta['after']}"]
    if meta.get("laplace"):
        lines.append(f"# laplace: {meta['laplace']} (fit ii: the same corrected likelihood)")
    lines += [
        "",
        f"{'quantity':<22} {'before med':>11} {'sd':>9} | {'after med':>11} {'sd':>9} "
        f"{'R-hat':>6} {'ESS':>5} | {'shift %':>8} {'bef sds':>8} {'aft sds':>8} overlap"
        f" | {'Laplace ii':>11} {'aft-L sds':>9}",
    ]
    for name, r in rows.items():
        mode = "" if r["laplace_mode"] is None else f"{r['laplace_mode']:>11.5g}"
        vs = "" if r["after_vs_laplace_sds"] is None else f"{r['after_vs_laplace_sds']:>+9.2f}"
        lines.append(
            f"{name:<22} {r['before_median']:>11.5g} {r['before_sd']:>9.3g} | "
            f"{r['after_median']:>11.5g} {r['after_sd']:>9.3g} {r['after_rhat']:>6.3f} "
            f"{r['after_ess_bulk']:>5.0f} | {r['shift_pct']:>+8.2f} {r['shift_before_sds']:>+8.1f} "
            f"{r['shift_after_sds']:>+8.1f} {'yes' if r['intervals_overlap'] else 'no':>7} | "
            f"{mode:>11} {vs:>9}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="table of the paper's likelihood")
    ap.add_argument("--after", type=Path, required=True, help="table with the corrections")
    ap.add_argument("--laplace", type=Path, help="bench_corrected.py JSON (its fit ii)")
    ap.add_argument("--title", default="Tables 1-2, MCMC: the paper's likelihood vs corrected")
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.txt and OUT.json")
    args = ap.parse_args()
    laplace: dict[str, float] = {}
    if args.laplace:
        laplace = json.loads(args.laplace.read_text())["fits"]["ii"]["mode"]
    rows = compare(read_table(args.before), read_table(args.after), laplace)
    meta = {
        "title": args.title,
        "before": str(args.before),
        "after": str(args.after),
        "laplace": str(args.laplace) if args.laplace else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = render(rows, meta)
    args.out.with_suffix(".txt").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
