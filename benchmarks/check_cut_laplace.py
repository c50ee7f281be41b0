"""Is the cut check's Gaussian (Laplace) reference right for one location draw? Importance
sampling of the exact conditional posterior, against the Laplace sd the check uses.

``hawkes-diagnose --cut-check`` takes each location draw's conditional posterior of the five
log-parameters as the Gaussian of its mode and curvature. Where that posterior is skewed (at
200,000 cases, ``mu0`` and ``tau_t``: skewness +0.39, the likelihood flat in ``tau_t`` far
beyond the window), the curvature at the mode need not give the sd. This script computes the
conditional posterior's sds and skewnesses on one location draw ``k`` of the check without
that assumption:

1. the check's own conditional posterior and location draw
   (:func:`hawkes_cli.cutcheck.conditional_posterior`), its Laplace fit by the check's Newton
   steps (:func:`~hawkes_cli.cutcheck.conditional_laplace`) from the chains' medians;
2. self-normalised importance sampling (:func:`hawkes_cli.cutcheck.importance_sds`, as the
   check itself does on its first draws) from a multivariate Student-t proposal (``--df``
   degrees of freedom, scale ``--scale`` squared times the Laplace covariance), drawn in two
   stages so that trigger passes are few: ``--outer`` values of ``(sigma_x, sigma_t)`` from the
   proposal's marginal, each with ``--inner`` values of ``(mu0, tau_t, xi0)`` from its
   conditional (one trigger pass per outer value, one background pass per inner one); every
   point weighted by the joint densities, so the estimate is exact as the draws grow;
3. Monte Carlo errors by the bootstrap over outer values (their inner points together).

Writes ``benchmarks/results/cut-laplace-<name>.txt`` and ``.json``: per log-parameter the
Laplace sd, the importance-sampling sd (se), their ratio (se), the skewness, and the chains' sd
(MCSE) from the run's draws, with the ratio chains' sd / importance-sampling sd.

    python benchmarks/check_cut_laplace.py /tmp/cut200k/m1-shipped/run-m1 --name 200000-m1

``--reference CHECK.json`` (a ``bench_cut.py`` result of a run on the same events file) serves
a run without post-warm-up draws yet: the Newton steps start at that check's mode of draw
``k`` with steps from the run's fast-start covariance (``RUN/chains/start.json``), and the
chains' sds (MCSE) are that check's.
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

from hawkes_cli.cutcheck import (
    CutSettings,
    chain_start,
    conditional_laplace,
    conditional_posterior,
    importance_sds,
)
from hawkes_cli.diagnostics import DiagnoseOptions, load_draws
from hawkes_cli.diagnostics.cut import mcse_sd
from hawkes_cli.vocab import PARAM_NAMES

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--name", required=True)
    ap.add_argument("--draw", type=int, default=0, help="location draw k of the check")
    ap.add_argument("--outer", type=int, default=150)
    ap.add_argument("--inner", type=int, default=16)
    ap.add_argument("--df", type=float, default=7.0)
    ap.add_argument("--scale", type=float, default=1.2)
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--reference", type=Path, default=None, help="a bench_cut.py JSON")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    t0 = time.perf_counter()

    if args.reference is None:
        logs, start, h = chain_start(load_draws(args.run_dir, DiagnoseOptions()))
        chains = {n: (float(np.std(v, ddof=1)), mcse_sd(v)) for n, v in logs.items()}
    else:
        start, h, chains = reference_start(args.reference, args.run_dir, args.draw)
    settings = CutSettings(
        is_outer=args.outer, is_inner=args.inner, is_df=args.df, is_scale=args.scale
    )
    posterior, locations = conditional_posterior(args.run_dir)
    lik = posterior.likelihood
    lik.set_locations(*locations(args.draw))
    cond, _ = conditional_laplace(posterior, start, h * math.sqrt(settings.fd_drop), settings)
    if not cond.ok:
        raise SystemExit(f"no Laplace fit on draw {args.draw}: {cond.status}")
    mode, cov = np.array(cond.mode), np.array(cond.cov)
    laplace_sd = np.sqrt(np.diag(cov))
    logging.info("Laplace on draw %d: mode %s sd %s", args.draw, mode, laplace_sd)
    passes0 = lik.pair_passes
    sample = importance_sds(posterior, mode, cov, settings, np.random.default_rng(args.seed))
    sd, sd_se = sample.sd, sample.sd_se
    ratio, ratio_se = sd / laplace_sd, sd_se / laplace_sd

    rows = []
    for k, name in enumerate(PARAM_NAMES):
        c_sd, c_se = chains[name]
        rows.append(
            {
                "name": name,
                "laplace_mode": float(mode[k]),
                "laplace_sd": float(laplace_sd[k]),
                "is_sd": float(sd[k]),
                "is_sd_se": float(sd_se[k]),
                "is_over_laplace": float(ratio[k]),
                "is_over_laplace_se": float(ratio_se[k]),
                "is_skewness": float(sample.skewness[k]),
                "chains_sd": c_sd,
                "chains_sd_se": c_se,
                "chains_over_is": c_sd / float(sd[k]),
                "chains_over_is_se": math.hypot(c_se / sd[k], c_sd * sd_se[k] / sd[k] ** 2),
            }
        )
    out = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "run_dir": str(args.run_dir),
        "reference": None if args.reference is None else str(args.reference),
        "draw": args.draw,
        "outer": args.outer,
        "inner": args.inner,
        "df": args.df,
        "scale": args.scale,
        "seed": args.seed,
        "kish_ess": sample.ess,
        "pair_passes": int(lik.pair_passes - passes0),
        "seconds": time.perf_counter() - t0,
        "laplace_status": cond.status,
        "parameters": rows,
    }
    text = format_table(out)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"cut-laplace-{args.name}.txt").write_text(text)
    (args.out / f"cut-laplace-{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")


def reference_start(
    reference: Path, run_dir: Path, k: int
) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[float, float]]]:
    """Without the run's draws: the start (5,) = draw ``k``'s mode in the check ``reference``,
    the steps (5,) ``sqrt(2)`` times the conditional sds of the run's fast-start covariance (as
    :func:`~hawkes_cli.cutcheck.chain_start` takes them from the chains), and that check's
    chains' sd and MCSE per parameter."""
    cut = json.loads(reference.read_text())["runs"][0]["cut_check"]
    start = np.array([cut["draws"][k]["mode"][n] for n in PARAM_NAMES])
    doc = json.loads((run_dir / "chains" / "start.json").read_text())
    cov = np.array(doc["start"]["cov"], dtype=float)
    h = math.sqrt(2.0) / np.sqrt(np.diag(np.linalg.inv(cov)))
    chains = {p["name"]: (p["chains_sd"], p["chains_se"]) for p in cut["parameters"]}
    return start, h, chains


def format_table(out: dict) -> str:
    """The report: a header line and one row per log-parameter."""
    lines = [
        f"# {out['date']} on {out['host']}",
        f"{out['run_dir']}: location draw {out['draw']} of the cut check; importance sampling "
        f"of its conditional posterior, {out['outer']} x {out['inner']} points from a "
        f"multivariate t (df {out['df']:g}, scale {out['scale']:g} x the Laplace covariance), "
        f"Kish ESS {out['kish_ess']:.0f}, {out['pair_passes']} pair passes, "
        f"{out['seconds']:.0f} s",
        f"{'log param':10} {'Laplace sd':>10} {'IS sd (se)':>20} {'IS/Laplace':>16} "
        f"{'IS skew':>8} {'chains sd (MCSE)':>20} {'chains/IS':>16}",
    ]
    for r in out["parameters"]:
        cells = [
            f"{r['name']:10}",
            f"{r['laplace_sd']:10.4g}",
            f"{r['is_sd']:.4g} ({r['is_sd_se']:.2g})".rjust(20),
            f"{r['is_over_laplace']:.3f} +- {r['is_over_laplace_se']:.3f}".rjust(16),
            f"{r['is_skewness']:+8.2f}",
            f"{r['chains_sd']:.4g} ({r['chains_sd_se']:.2g})".rjust(20),
            f"{r['chains_over_is']:.3f} +- {r['chains_over_is_se']:.3f}".rjust(16),
        ]
        lines.append(" ".join(cells))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
