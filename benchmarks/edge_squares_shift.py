"""How far the wide counties' tile squares move a converged run's posterior, in posterior sds.

Counties wider than a tile (San Bernardino, Riverside, Pima, Alaska's boroughs at model 1's
1M lengthscale) read their edge masses from fixed tile squares since 081f454, not from rasters
over each draw's points (the per-event path). The two agree to the rasters' resolution, not
bit for bit, so the likelihood changed. With ``censored`` edges the change is

    d ell(theta) = -xi0 * sum_m dM_m(sigma_x) * (1 - exp(-(T - t_m) / sigma_t))

over the wide counties' cases ``m`` (``dM``: squares' mass minus the per-event path's). To
first order it moves the posterior mean by ``Sigma grad(d ell)`` (``Sigma``: the posterior
covariance of the log parameters, from the run's chains), which this script reports per
parameter in posterior sds, for a few location draws, at the chains' mean. Central
differences in ``log sigma_x`` (``--step``) stay within one mass lattice cell, where both
paths interpolate linearly.

    python benchmarks/edge_squares_shift.py RUN_DIR --draws 3 --out benchmarks/results/NAME
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.config import load_config
from hawkes_cli.data import load_events
from hawkes_cli.diagnostics.api import load_draws
from hawkes_cli.engine.region_groups import EventGroups, GroupedMass
from hawkes_cli.regions import study_region
from hawkes_cli.resample import make_resampler

LOG_PARAMS = ("mu0", "tau_t", "xi0", "sigma_x", "sigma_t")


def posterior(run_dir: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean (5,) and covariance (5, 5) of the log parameters over the retained draws, and
    their count."""
    draws = load_draws(run_dir)
    cols = [np.log(np.concatenate(draws.variables[p])) for p in LOG_PARAMS]
    z = np.stack(cols, axis=1)
    return z.mean(axis=0), np.cov(z, rowvar=False), z.shape[0]


def mass_gap(
    grouped: GroupedMass, region, x: np.ndarray, y: np.ndarray, rows: np.ndarray, s: float
) -> np.ndarray:
    """Squares' mass minus the per-event path's for ``rows`` at lengthscale ``s``, (R,)."""
    new = grouped.mass_error(x, y, s)[0][rows]
    old = region.mass_error(x[rows], y[rows], np.full(rows.size, s))[0]
    return new - old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--step", type=float, default=0.003, help="central difference in log s")
    ap.add_argument("--out", type=Path, required=True, help="results path without suffix")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cfg = load_config(args.run_dir / "config.yaml")
    data = load_events(cfg.data.events)
    polys, codes = make_resampler(cfg, data)
    region = study_region(cfg, data, polys)
    mean, cov, kept = posterior(args.run_dir)
    sd = np.sqrt(np.diag(cov))
    xi0, sx, st = np.exp(mean[2]), np.exp(mean[3]), np.exp(mean[4])
    end = float(data.time[-1] if cfg.data.window_end is None else cfg.data.window_end)
    grouped = GroupedMass(region, EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes))
    level, _ = grouped.levels(sx)
    plan = grouped.plan(level)
    rng = np.random.default_rng(args.seed)
    rows_out = []
    for d in range(args.draws):
        x, y = polys.sample(codes, rng)
        wide_rows, _, missing = plan.assign(x, y)
        rows = np.sort(np.concatenate([wide_rows, missing]))
        gaps = [
            mass_gap(grouped, region, x, y, rows, sx * np.exp(k * args.step)) for k in (-1, 0, 1)
        ]
        u = (end - data.time[rows]) / st
        g = -np.expm1(-u)  # 1 - exp(-(T - t) / sigma_t)
        dell = -xi0 * float(np.sum(gaps[1] * g))
        grad = np.zeros(5)
        grad[2] = dell  # d/d log xi0
        grad[3] = -xi0 * float(np.sum((gaps[2] - gaps[0]) / (2 * args.step) * g))
        grad[4] = -xi0 * float(np.sum(gaps[1] * (-np.exp(-u) * u)))  # dg/dlog st = -u e^-u
        shift = cov @ grad
        rows_out.append({
            "draw": d,
            "wide_cases": int(rows.size),
            "mean_abs_gap": float(np.mean(np.abs(gaps[1]))),
            "max_abs_gap": float(np.max(np.abs(gaps[1]))),
            "sum_gap": float(np.sum(gaps[1])),
            "delta_loglik": dell,
            "grad_log": grad.tolist(),
            "shift_sd": (shift / sd).tolist(),
        })  # fmt: skip
        print(json.dumps(rows_out[-1]), flush=True)
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "run_dir": str(args.run_dir),
        "n_events": int(data.time.size),
        "model": cfg.model.kind,
        "edge": cfg.model.edge,
        "draws_kept": kept,
        "posterior_mean_log": mean.tolist(),
        "posterior_sd_log": sd.tolist(),
        "seconds": time.perf_counter() - t0,
    }
    args.out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "draws": rows_out}, indent=1)
    )
    lines = [
        f"# {meta['date']} on {meta['host']}: {args.run_dir}, {meta['n_events']:,} events, "
        f"model {meta['model']} (edge {meta['edge']}), {kept} retained draws",
        "# the wide counties' tile squares against the per-event path (081f454): first-order "
        "shift of the posterior mean, Sigma grad(d ell), in posterior sds of each log parameter,",
        f"# at the chains' mean (sigma_x {sx:.5g}, sigma_t {st:.4g}, xi0 {xi0:.4g}); "
        f"{args.draws} location draws, seed {args.seed}; {meta['seconds']:.0f} s",
        "draw  cases   mean|dM|  max|dM|   sum dM    d ell nats  "
        + "  ".join(f"{p:>8}" for p in LOG_PARAMS),
    ]
    for r in rows_out:
        lines.append(
            f"{r['draw']:>4}  {r['wide_cases']:>6}  {r['mean_abs_gap']:.2e}  "
            f"{r['max_abs_gap']:.2e}  "
            f"{r['sum_gap']:+.2e}  {r['delta_loglik']:+.3e}  "
            + "  ".join(f"{v:+8.4f}" for v in r["shift_sd"])
        )
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
