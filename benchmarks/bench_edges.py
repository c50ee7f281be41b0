"""How far the paper's likelihood misses on simulations of US geography, and whether the censored
edge correction recovers the truth: Laplace approximations of both posteriors on one events file.

For an events file from ``hawkes-prep simulate --geography us --edge censored`` (offspring off
the land dropped: exactly ``model.edge: censored``), and for ``edge`` in (censored, none): the
posterior mode of the five log-parameters by Newton's method (gradient and Hessian by central
differences, on the MCMC engine: OpenCL float32, truncated trigger), the posterior sd from the
Hessian, and for xi0, sigma_x and sigma_t the truth's distance from the mode in posterior sds.
Priors are the runs' (the paper's N(0, 1) on each log-parameter), or with ``--background
constant`` those of the background's constant-rate limit that the simulation draws from
(``tau_t`` ~ LogNormal(log 1e5 days, 0.1), far beyond the window, and ``mu0`` wide around the
value giving the background count; ``benchmarks/bench_sbc.py`` explains why only that limit is a
law to simulate from). A converged MCMC run of the same file (``--run``) is put beside it to
check the Laplace sds.

Usage::

    python benchmarks/bench_edges.py EVENTS --model 1 --name m1 [--run RUN_DIR]

writes ``benchmarks/results/edges-<name>.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CHECKED = ("xi0", "sigma_x", "sigma_t")
STEP = 0.004  # central-difference step in each log-parameter (~1-2 posterior sds at 200k)
CONSTANT_TAU_T = 1e5  # days: the background's constant limit (window 700 days)


def priors_for(background: str, xi0: float, t_end: float) -> dict[str, tuple[str, tuple]]:
    """Each parameter's prior (family, args) for ``--background`` (module docstring)."""
    paper = {k: ("normal", (0.0, 1.0)) for k in ("mu0", "tau_t", *CHECKED)}
    if background == "paper":
        return paper
    # mu0 * N * t_end / (sqrt(2 pi) tau_t) background events, (1 - xi0) N of them
    mu0 = (1.0 - xi0) * math.sqrt(2 * math.pi) * CONSTANT_TAU_T / t_end
    return {
        **paper,
        "mu0": ("lognormal", (math.log(mu0), 1.0)),
        "tau_t": ("lognormal", (math.log(CONSTANT_TAU_T), 0.1)),
    }


def _hessian(f, theta: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Gradient, Hessian (central differences) and value of ``f`` at ``theta``."""
    d = theta.size
    f0 = f(theta)
    e = np.eye(d) * h
    plus = np.array([f(theta + e[i]) for i in range(d)])
    minus = np.array([f(theta - e[i]) for i in range(d)])
    grad = (plus - minus) / (2 * h)
    hess = np.empty((d, d))
    for i in range(d):
        hess[i, i] = (plus[i] - 2 * f0 + minus[i]) / h**2
        for j in range(i + 1, d):
            pp = f(theta + e[i] + e[j])
            mm = f(theta - e[i] - e[j])
            hess[i, j] = hess[j, i] = (
                pp - plus[i] - plus[j] + 2 * f0 - minus[i] - minus[j] + mm
            ) / (2 * h**2)
    return grad, hess, f0


def laplace(
    data, model: int, region, start: dict, steps: int, priors: dict, edge: str = "censored"
) -> dict:
    """Mode and sds (log scale) of the posterior with the given region (None: edge none) and
    ``model.edge`` reading ``edge``; the truncated trigger (tolerance 0.01), float32."""
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.posterior import LogPosterior, to_params
    from hawkes_cli.priors import Prior

    lik = make_likelihood(
        data,
        model=model,
        area=float(data.attrs["area"]),
        engine="opencl",
        precision="float32",
        tolerance=0.01,
        window_end=float(data.attrs["t_end"]),
        region=region,
        edge=edge,
        trigger="truncated",
    )
    lik.background_cache_size = 64
    lik.trigger_cache_size = 64
    post = LogPosterior.from_mapping(lik, {k: Prior(*priors[k]) for k in start})
    theta = np.log([start[k] for k in post.names])
    t0 = time.perf_counter()
    trail = []
    for _ in range(steps):
        grad, hess, f0 = _hessian(post, theta, STEP)
        stepv = -np.linalg.solve(hess, grad)
        scale = min(1.0, 0.3 / max(np.max(np.abs(stepv)), 1e-300))  # at most 0.3 in log scale
        theta = theta + scale * stepv
        trail.append({"log_target": f0, "step": float(np.max(np.abs(stepv)))})
    grad, hess, f0 = _hessian(post, theta, STEP)
    cov = np.linalg.inv(-hess)
    sd = np.sqrt(np.diag(cov))
    mode = to_params(theta).as_dict()
    # the Newton step that would follow, in posterior sds: how far the mode is from converged
    residual = -np.linalg.solve(hess, grad) / sd
    return {
        "mode": mode,
        "log_sd": dict(zip(post.names, sd.tolist(), strict=True)),
        "gradient_at_mode": grad.tolist(),
        "residual_sds": dict(zip(post.names, residual.tolist(), strict=True)),
        "newton": trail,
        "seconds": time.perf_counter() - t0,
        "trigger_passes": lik.trigger_passes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("events", type=Path)
    ap.add_argument("--model", type=int, default=1)
    ap.add_argument("--name", required=True)
    ap.add_argument("--run", type=Path, default=None, help="a converged MCMC run of the file")
    ap.add_argument("--steps", type=int, default=3, help="Newton steps")
    ap.add_argument(
        "--background",
        choices=("paper", "constant"),
        default="paper",
        help="priors of mu0 and tau_t: the paper's, or the constant-rate limit (docstring)",
    )
    args = ap.parse_args()
    from hawkes_cli.data import load_events
    from hawkes_cli.regions import region_for

    data = load_events(args.events, need_density=args.model == 2)
    truth = dict(data.attrs["true_params"])
    region = region_for(data)
    t_end = float(data.attrs["t_end"])
    priors = priors_for(args.background, truth["xi0"], t_end)
    if args.background == "paper":
        start = {"mu0": 2.0, "tau_t": 1300.0, **{k: truth[k] for k in CHECKED}}
    else:
        start = {k: math.exp(priors[k][1][0]) for k in ("mu0", "tau_t")}
        start.update({k: truth[k] for k in CHECKED})
    rows = {}
    for edge, reg in (("censored", region), ("none", None)):
        fit = laplace(data, args.model, reg, start, args.steps, priors)
        fit["miss_sds"] = {
            k: (math.log(fit["mode"][k]) - math.log(truth[k])) / fit["log_sd"][k] for k in CHECKED
        }
        rows[edge] = fit
        start = fit["mode"]
        print(edge, json.dumps({k: fit[k] for k in ("mode", "log_sd", "miss_sds")}), flush=True)
    mcmc = None
    if args.run is not None:
        from hawkes_cli.diagnostics import DiagnoseOptions, diagnose

        rep = diagnose(args.run, DiagnoseOptions())
        mcmc = {}
        for k in CHECKED:
            r = rep.row(k)
            mcmc[k] = {
                "median": r.median,
                "q2_5": r.q2_5,
                "q97_5": r.q97_5,
                "sd": r.sd,
                "covers": r.q2_5 <= truth[k] <= r.q97_5,
                "rhat": r.rhat,
                "ess_bulk": r.ess_bulk,
            }
        mcmc["status"] = rep.status
        mcmc["draws_per_chain"] = rep.common_draws
    out = {
        "events": str(args.events),
        "n": data.n,
        "model": args.model,
        "truth": truth,
        "attrs": {k: data.attrs.get(k) for k in ("n_discarded_space", "edge", "geography")},
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "background": args.background,
        "priors": priors,
        "laplace": rows,
        "mcmc": mcmc,
    }
    path = HERE / "results" / f"edges-{args.name}"
    path.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str))
    lines = [
        f"# bench_edges {args.events.name}: N={data.n:,}, model {args.model}, simulated on the "
        f"lower 48 states, offspring off the land dropped "
        f"({data.attrs.get('n_discarded_space')}); OpenCL float32, tolerance 0.01; priors of "
        f"mu0, tau_t: {args.background}"
        + (
            " (the background's constant limit, tau_t ~ 1e5 days)"
            if args.background == "constant"
            else " (N(0, 1) on the log scale)"
        ),
        "Laplace (Newton mode, Hessian sd on the log scale); miss = (log mode - log truth) / sd",
        "parameter  truth      censored: mode  sd(log)  miss   |  none: mode  sd(log)  miss",
    ]
    for k in CHECKED:
        c, n = rows["censored"], rows["none"]
        lines.append(
            f"{k:<9}  {truth[k]:<9.5g}  {c['mode'][k]:>14.5g}  {c['log_sd'][k]:.5f}  "
            f"{c['miss_sds'][k]:+5.1f}  |  {n['mode'][k]:>10.5g}  {n['log_sd'][k]:.5f}  "
            f"{n['miss_sds'][k]:+5.1f}"
        )
    if mcmc is not None:
        lines.append(
            f"MCMC with edge: censored ({args.run}, verdict {mcmc['status']}, "
            f"{mcmc['draws_per_chain']} draws/chain):"
        )
        for k in CHECKED:
            m = mcmc[k]
            lines.append(
                f"  {k:<9} median {m['median']:.5g}  95% [{m['q2_5']:.5g}, {m['q97_5']:.5g}]  "
                f"sd {m['sd']:.3g}  truth {'inside' if m['covers'] else 'OUTSIDE'}  "
                f"R-hat {m['rhat']:.3f}  ESS {m['ess_bulk']:.0f}"
            )
    path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
