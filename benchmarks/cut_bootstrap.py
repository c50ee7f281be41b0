"""Bootstrap the cut check's Monte Carlo error over its location draws (a check of the check).

``hawkes-diagnose --cut-check`` gives the between-draw sd's standard error from normal theory
(``sd / sqrt(2 (K - 1))``). This resamples the K draws' conditional modes and sds with
replacement instead, so a heavy-tailed or skewed spread of modes shows up as a larger error,
and reports the z of the chains' sd against the cut sd with the bootstrap's error (the
importance-sampling factor of the within-draw sds, where the check has one, is held fixed). It also
splits the draws into halves (an F test of their between-draw variances).

    python benchmarks/cut_bootstrap.py benchmarks/results/cut-1000000-m1-nexp4-k50.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a bench_cut.py JSON")
    ap.add_argument("--resamples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    record = json.loads(args.results.read_text())
    print(f"# {args.results.name}: {args.resamples} bootstrap resamples of the location draws")
    print(
        "run       param    K  between sd  se normal  se boot  cut sd  se boot  "
        "chains sd (MCSE)    z boot  halves' between sd  F p"
    )
    for run in record["runs"]:
        check = run["cut_check"]
        ok = [d for d in check["draws"] if d["status"] == "ok"]
        name = Path(run["setting"]["run_dir"]).name
        for par in check["parameters"]:
            p = par["name"]
            m = np.array([d["mode"][p] for d in ok])
            # each draw's Laplace sd times the importance-sampling factor, as the check does
            s = np.array([d["sd"][p] for d in ok]) * float(par.get("is_factor", 1.0) or 1.0)
            k = m.size
            idx = rng.integers(0, k, size=(args.resamples, k))
            between = m[idx].std(axis=1, ddof=1)
            cut = np.sqrt(np.mean(s[idx] ** 2, axis=1) + between**2)
            b = m.std(ddof=1)
            c = float(np.sqrt(np.mean(s**2) + b**2))
            z = (par["chains_sd"] - c) / np.hypot(cut.std(), par["chains_se"])
            h1, h2 = m[: k // 2].var(ddof=1), m[k // 2 :].var(ddof=1)
            f = max(h1, h2) / min(h1, h2)
            p_f = min(1.0, 2 * stats.f.sf(f, k // 2 - 1, k - k // 2 - 1))
            print(
                f"{name:<9} {p:<7} {k:>3}  {b:.3e}   {b / np.sqrt(2 * (k - 1)):.2e}   "
                f"{between.std():.2e}  {c:.2e}  {cut.std():.2e}  "
                f"{par['chains_sd']:.3e} ({par['chains_se']:.1e})  {z:+6.2f}  "
                f"{np.sqrt(h1):.2e} {np.sqrt(h2):.2e}  {p_f:.3f}"
            )


if __name__ == "__main__":
    main()
