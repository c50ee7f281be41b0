"""More location draws for the cut check's between-draw sd, at a fifth of the cost: each draw's
conditional mode from one gradient at a common point (the Newton step with the check's mean
curvature), validated on the check's own draws.

``hawkes-diagnose --cut-check`` finds each location draw's conditional mode by Newton steps,
each with a finite-difference Hessian (about 100 evaluations and 21 trigger passes per draw at
1M). With ``K = 50`` draws the between-draw sd has a ~10% error, the largest part of the check's
error for ``sigma_x``. Here, for location draw ``k`` (the check's own, :func:`hawkes_cli.
cutcheck.cut_locations` with the run's seed):

1. ``W``: the inverse negative finite-difference Hessian at ``theta0`` (the mean of the
   reference check's modes) on location draw 0, cached beside ``--out`` (the reference's JSON
   keeps each draw's sds, not its covariance);
2. the draw's linear mode :func:`hawkes_cli.cutcheck.linear_mode` ``theta0 + W g_k``, ``g_k``
   the central-difference gradient at ``theta0``, one ``W`` sd per coordinate (11 evaluations,
   5 pair passes): the Newton step of a quadratic with that curvature, exact up to a constant
   shift when the conditionals are Gaussian with one covariance.

One JSON line per draw is appended to ``--out`` as it goes (a stopped run keeps what it did).
``--summary`` then prints how the linear modes of the reference's own draws follow its Newton
modes (correlation, sd ratio), the between-draw sds of the reference's, the new and all draws,
and the check (:func:`hawkes_cli.diagnostics.cut.summarise_cut`: the reference's Newton draws
and every linear mode, the between-draw sd by double sampling) against the reference's run
(its chains' sds as recorded) and each ``--chains`` run; ``--name`` writes it to
``benchmarks/results/cut-NAME.{txt,json}``.

    python benchmarks/cut_between_linear.py RUN \\
        --reference benchmarks/results/cut-1000000-m1-nexp4-k50.json \\
        --draws 0:250 --out /tmp/between.jsonl
    python benchmarks/cut_between_linear.py RUN --reference ... --out /tmp/between.jsonl --summary
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.cutcheck import chain_start, conditional_posterior, linear_mode
from hawkes_cli.diagnostics import DiagnoseOptions, load_draws
from hawkes_cli.diagnostics.cut import STATUS_LINEAR, Conditional, summarise_cut
from hawkes_cli.diagnostics.cut_text import format_cut
from hawkes_cli.start.curvature import fd_curvature
from hawkes_cli.start.search import Counted
from hawkes_cli.vocab import PARAM_NAMES

RESULTS = Path(__file__).resolve().parent / "results"


def reference(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``(theta0 (5,), sds (5,), modes (K, 5), check)`` of a ``bench_cut.py`` JSON: the mean
    mode, the mean conditional sds and the Newton modes of its ok draws."""
    cut = json.loads(path.read_text())["runs"][0]["cut_check"]
    ok = [d for d in cut["draws"] if d["status"] == "ok"]
    modes = np.array([[d["mode"][n] for n in PARAM_NAMES] for d in ok])
    sds = np.array([[d["sd"][n] for n in PARAM_NAMES] for d in ok])
    return modes.mean(axis=0), sds.mean(axis=0), modes, cut


def common_covariance(posterior, locations, theta0: np.ndarray, sd: np.ndarray, path: Path):
    """``W`` (5, 5): the inverse negative finite-difference Hessian at ``theta0`` on location
    draw 0 (steps of ~2 nats, as the check's), cached in ``path``."""
    if path.exists():
        return np.array(json.loads(path.read_text())["W"])
    posterior.likelihood.set_locations(*locations(0))
    f = Counted(posterior, 500)
    _, hess, _ = fd_curvature(f, theta0, f(theta0), sd * math.sqrt(2.0), 2.0, 2.0)
    w = np.linalg.inv(-0.5 * (hess + hess.T))
    path.write_text(json.dumps({"theta0": theta0.tolist(), "W": w.tolist()}) + "\n")
    return w


def run(args: argparse.Namespace) -> None:
    theta0, sd, _, _ = reference(args.reference)
    posterior, locations = conditional_posterior(args.run_dir)
    w = common_covariance(posterior, locations, theta0, sd, _w_path(args.out))
    logging.info("common W: sds %s (reference mean %s)", np.sqrt(np.diag(w)), sd)
    lik = posterior.likelihood
    a, b = (int(x) for x in args.draws.split(":"))
    done = {r["k"] for r in _rows(args.out)} if args.out.exists() else set()
    for k in range(a, b):
        if k in done:
            continue
        t0, passes = time.perf_counter(), lik.pair_passes
        lik.set_locations(*locations(k))
        mode, _ = linear_mode(posterior, theta0, w)
        row = {
            "k": k,
            "mode": mode.tolist(),
            "pair_passes": int(lik.pair_passes - passes),
            "seconds": time.perf_counter() - t0,
        }
        with args.out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        logging.info("draw %d: sigma_x %.6f (%.1f s)", k, mode[3], row["seconds"])


def _w_path(out: Path) -> Path:
    return out.with_suffix(".W.json")


def _sd_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sample sd per column and its normal-theory se ``sd / sqrt(2 (n - 1))``."""
    sd = x.std(axis=0, ddof=1)
    return sd, sd / math.sqrt(2.0 * (len(x) - 1))


def conditionals(cut: dict, rows: list[dict]) -> list[Conditional]:
    """The reference check ``cut``'s Newton draws (diagonal covariances: the check reads only
    those) with their linear modes (``rows``), then the linear-only draws, as the check's own
    (:func:`hawkes_cli.cutcheck.run_cut_check`) would hand them to ``summarise_cut``."""
    rows = {r["k"]: r for r in rows}
    out = []
    for k, d in enumerate(cut["draws"]):
        sd = np.array([d["sd"][n] for n in PARAM_NAMES])
        lin = tuple(rows[k]["mode"]) if k in rows else None
        cov = tuple(map(tuple, np.diag(sd**2).tolist()))
        mode = tuple(d["mode"][n] for n in PARAM_NAMES)
        out.append(Conditional(mode, cov, d["status"], linear=lin))
    for k in sorted(rows):
        if k >= len(cut["draws"]):
            x = tuple(rows[k]["mode"])
            out.append(Conditional(x, None, STATUS_LINEAR, linear=x))
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def summary(args: argparse.Namespace) -> tuple[str, dict, list[dict]]:
    """The validation of the linear modes on the reference's draws, the between-draw sds by
    group of draws, and the check (double sampling) against each run's chains; with the
    checks' JSON and the linear rows."""
    _, sd_ref, ref_modes, cut = reference(args.reference)
    rows = _rows(args.out)
    by_k = {r["k"]: np.array(r["mode"]) for r in rows}
    k_ref = len(ref_modes)
    old = [k for k in range(k_ref) if k in by_k]
    lin = np.array([by_k[k] for k in old])
    lines = [f"linear modes at {len(rows)} location draws; reference check K = {k_ref}"]
    lines.append(f"on the reference's {len(old)} Newton draws, linear vs Newton modes:")
    lines.append(f"{'param':8} {'corr':>6} {'sd lin/newton':>14} {'rms diff / within sd':>21}")
    for j, n in enumerate(PARAM_NAMES):
        x, y = lin[:, j], ref_modes[old, j]
        c, r = np.corrcoef(x, y)[0, 1], x.std(ddof=1) / y.std(ddof=1)
        rms = np.sqrt(np.mean((x - y) ** 2)) / sd_ref[j]
        lines.append(f"{n:8} {c:6.3f} {r:14.3f} {rms:21.3f}")
    groups = {
        "reference (Newton)": ref_modes,
        "reference's draws (linear)": lin,
        "new draws (linear)": np.array([by_k[k] for k in sorted(by_k) if k >= k_ref]),
        "all draws (linear)": np.array([by_k[k] for k in sorted(by_k)]),
    }
    lines.append(f"{'between sd (normal se)':32} " + " ".join(f"{n:>20}" for n in PARAM_NAMES))
    for name, m in groups.items():
        if len(m) >= 3:
            sd, se = _sd_se(m)
            cells = [f"{s:.3g} ({e:.2g})".rjust(20) for s, e in zip(sd, se, strict=True)]
            lines.append(f"{name + f' K={len(m)}':32} " + " ".join(cells))
    conds = conditionals(cut, rows)
    ref_chains = {p["name"]: (p["chains_sd"], p["chains_se"]) for p in cut["parameters"]}
    checks = {}
    for run in [None, *args.chains]:
        if run is None:  # the reference's own run: its chains' sds as it recorded them
            fake = {n: np.zeros((1, 4)) for n in PARAM_NAMES}
            check = summarise_cut(conds, fake, PARAM_NAMES, run_dir=cut["run_dir"])
            lines.append(f"\n{cut['run_dir']} (the reference's run; its chains' sd as recorded):")
            rows_out = []
            for r in check.rows:
                c_sd, c_se = ref_chains[r.name]
                z = (c_sd - r.cut_sd) / math.hypot(c_se, r.cut_se)
                rows_out.append({**r.as_dict(), "chains_sd": c_sd, "chains_se": c_se,
                                 "ratio": c_sd / r.cut_sd, "z": z})  # fmt: skip
                lines.append(
                    f"  {r.name:8} cut sd {r.cut_sd:.4g} ({r.cut_se:.2g}) between "
                    f"{r.between_sd:.3g} ({r.between_se:.2g}), chains' sd {c_sd:.4g} ({c_se:.2g})"
                    f": ratio {c_sd / r.cut_sd:.3f}, z {z:+.1f}"
                )
        else:
            logs, _, _ = chain_start(load_draws(run, DiagnoseOptions()))
            check = summarise_cut(conds, logs, PARAM_NAMES, run_dir=str(run))
            lines.append(f"\n{run}:\n{format_cut(check)}")
        doc = check.as_dict()
        doc.pop("draws")  # the draws are the file's "linear" rows and the reference's
        if run is None:
            doc["parameters"] = rows_out
        checks[str(run or cut["run_dir"])] = doc
    return "\n".join(lines) + "\n", checks, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--reference", type=Path, required=True, help="a bench_cut.py JSON")
    ap.add_argument("--draws", default="0:250", help="location draws a:b")
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--chains", type=Path, nargs="*", default=[], help="runs to check (summary)")
    ap.add_argument("--name", default=None, help="summary to results/cut-NAME.{txt,json}")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.summary:
        text, checks, rows = summary(args)
        print(text, end="")
        if args.name:
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            doc = {"date": stamp, "host": platform.node(), "reference": str(args.reference),
                   "linear": rows, "checks": checks}  # fmt: skip
            (RESULTS / f"cut-{args.name}.txt").write_text(f"# {stamp} on {platform.node()}\n{text}")
            (RESULTS / f"cut-{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    else:
        run(args)


if __name__ == "__main__":
    main()
