"""Coverage of the edge corrections at ~200,000 events: replicated simulations of US geography that
are the model, each fitted by the Laplace approximation of ``benchmarks/bench_edges.py``.

For each seed: ``hawkes-prep simulate --geography us --uniform-background --edge EDGE`` (the
background's constant-rate limit, uniform on the land; ``xi0`` 0.6, ``sigma_t`` 30 days, 700
days; ``sigma_x`` 0.15 degrees for model 1, 0.5 (lengthscale ``0.5 / sqrt(density)``) for model
2), then :func:`bench_edges.laplace` (Newton mode and Hessian sd of the five log-parameters on
the MCMC engine, OpenCL float32) with the matching ``model.edge`` and the constant-limit priors of
``mu0`` and ``tau_t`` (``bench_edges.priors_for``), on the truncated trigger (tolerance 0.01;
``renormalized`` with each source's amplitude in the truncated kernels since 67db7f4; the
100k renormalized results before that ran the exact pair sum). Each replicate's miss of the truth,
``(log mode - log truth) / sd``, is cached as ``<work>/<name>-s<seed>.json`` (a re-run skips done
seeds; the simulated file is deleted after its fit), and the summary over all cached replicates
of the same name is rewritten after each one: per parameter the mean miss with its standard
error, the sd of the misses (~1 if the Laplace sd is right), the coverage of the 95% intervals
(``|miss| <= 1.96``), and ``xi0``'s relative bias (mean of ``log mode - log truth``).
``--poisson-background`` draws each replicate's background count from Poisson(``--n-background``)
(seeded by the replicate's seed) instead of taking it exactly: the model's background is a
Poisson process, and a fixed count takes away variance the Laplace sds count.

Usage::

    python benchmarks/bench_coverage.py --model 1 --edge censored --seeds 101 110 --work /tmp/covg

writes ``benchmarks/results/coverage-<name>.json`` and ``.txt`` (name: ``m<model>-<edge>``, or
``--name``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_edges import CHECKED, laplace, priors_for  # noqa: E402

TRUTH = {"mu0": 0.4, "tau_t": 200.0, "xi0": 0.6, "sigma_t": 30.0}  # mu0, tau_t: unused (limit)
SIGMA_X = {1: 0.15, 2: 0.5}
T_END = 700.0
Z95 = 1.959964


def simulate(out: Path, *, model: int, edge: str, n_background: int, seed: int) -> float:
    """Write one events file; return the seconds it took."""
    exe = shutil.which("hawkes-prep") or str(Path(sys.executable).parent / "hawkes-prep")
    params = {**TRUTH, "sigma_x": SIGMA_X[model]}
    cmd = [exe, "simulate", "--out", str(out), "--model", str(model), "--geography", "us"]
    cmd += ["--uniform-background", "--edge", edge, "--n-background", str(n_background)]
    cmd += ["--t-end", str(T_END), "--seed", str(seed)]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def background_count(mean: int, seed: int, poisson: bool) -> int:
    """The replicate's number of background events: ``mean``, or with ``poisson`` a
    Poisson(``mean``) draw seeded by the replicate's seed (the model's background is a Poisson
    process; the simulator takes the count it is given)."""
    if not poisson:
        return mean
    return int(np.random.default_rng([seed, 7]).poisson(mean))


def replicate(args: argparse.Namespace, seed: int) -> dict:
    """Simulate, fit with the matching edge, delete the file; the replicate's record."""
    from hawkes_cli.data import load_events
    from hawkes_cli.regions import region_for

    events = args.work / f"{args.name}-s{seed}.h5"
    n_bg = background_count(args.n_background, seed, args.poisson_background)
    sim_s = simulate(events, model=args.model, edge=args.edge, n_background=n_bg, seed=seed)
    t0 = time.perf_counter()
    data = load_events(events, need_density=args.model == 2)
    truth = dict(data.attrs["true_params"])
    region = region_for(data)
    priors = priors_for("constant", truth["xi0"], float(data.attrs["t_end"]))
    start = {k: math.exp(priors[k][1][0]) for k in ("mu0", "tau_t")}
    start.update({k: truth[k] for k in CHECKED})
    fit = laplace(data, args.model, region, start, args.steps, priors, edge=args.edge)
    fit_wall = time.perf_counter() - t0
    log_err = {k: math.log(fit["mode"][k]) - math.log(truth[k]) for k in CHECKED}
    rec = {
        "seed": seed,
        "n": data.n,
        "model": args.model,
        "edge": args.edge,
        "n_background": args.n_background,
        "background_count": n_bg,
        "poisson_background": args.poisson_background,
        "truth": truth,
        "attrs": {
            k: data.attrs.get(k)
            for k in ("n_discarded_space", "n_redrawn", "n_discarded_time", "edge")
        },
        "mode": fit["mode"],
        "log_sd": fit["log_sd"],
        "log_error": log_err,
        "miss_sds": {k: log_err[k] / fit["log_sd"][k] for k in CHECKED},
        "max_abs_gradient_at_mode": float(np.max(np.abs(fit["gradient_at_mode"]))),
        "residual_sds": fit["residual_sds"],
        "last_newton_step": fit["newton"][-1]["step"],
        "trigger_passes": fit["trigger_passes"],
        "commit": _commit(),
        "seconds": {"simulate": sim_s, "laplace": fit["seconds"], "load_and_fit": fit_wall},
    }
    events.unlink()
    return rec


def summarize(recs: list[dict]) -> dict:
    """Per parameter: mean miss, its se, sd of the misses, coverage; xi0's relative bias."""
    out = {}
    n = len(recs)
    for k in CHECKED:
        m = np.array([r["miss_sds"][k] for r in recs])
        e = np.array([r["log_error"][k] for r in recs])
        sd = float(np.std(m, ddof=1)) if n > 1 else float("nan")
        esd = float(np.std(e, ddof=1)) if n > 1 else float("nan")
        out[k] = {
            "misses": m.tolist(),
            "mean_miss": float(m.mean()),
            "se_mean_miss": sd / math.sqrt(n),
            "se_mean_miss_nominal": 1 / math.sqrt(n),
            "sd_miss": sd,
            "covered": int(np.sum(np.abs(m) <= Z95)),
            "n": n,
            "relative_bias_pct": 100 * float(np.expm1(e.mean())),
            "relative_bias_se_pct": 100 * esd / math.sqrt(n),
            "mean_log_sd": float(np.mean([r["log_sd"][k] for r in recs])),
        }
    return out


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _device(cores: int) -> str:
    """A label such as "PoCL on 2-core AMD EPYC" (the first OpenCL platform's first device)."""
    try:
        import pyopencl as cl

        p = cl.get_platforms()[0]
        cpu = p.get_devices()[0].name.removeprefix("pthread-")
    except Exception:  # a label only
        return f"unknown OpenCL device, {cores} cores"
    plat = "PoCL" if "Portable Computing Language" in p.name else p.name
    return f"{plat} on {cores}-core {cpu}"


def write_report(args: argparse.Namespace, recs: list[dict], wall: float) -> None:
    recs = sorted(recs, key=lambda r: r["seed"])
    summ = summarize(recs)
    ns = [r["n"] for r in recs]
    engine = "OpenCL float32, truncated trigger, tolerance 0.01"
    device = f"{_device(args.cores)} ({platform.machine()})"
    fit_s = [r["seconds"]["load_and_fit"] for r in recs]
    sim_s = [r["seconds"]["simulate"] for r in recs]
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = {
        "name": args.name,
        "model": args.model,
        "edge": args.edge,
        "sigma_x": SIGMA_X[args.model],
        "n_background": args.n_background,
        "t_end": T_END,
        "engine": engine,
        "device": device,
        "commit": _commit(),
        "date": today,
        "priors": "background's constant limit (bench_edges.priors_for('constant'))",
        "newton_steps": args.steps,
        "replicates": recs,
        "summary": summ,
        "wall_seconds_this_invocation": wall,
    }
    path = HERE / "results" / f"coverage-{args.name}"
    path.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str))
    sx = "0.15 deg" if args.model == 1 else "0.5 / sqrt(density)"
    lines = [
        f"# bench_coverage {args.name}: {len(recs)} replicates, N {min(ns):,}-{max(ns):,} "
        f"(mean {np.mean(ns):,.0f}), model {args.model} (sigma_x {sx}, xi0 0.6, sigma_t 30 d), "
        f"hawkes-prep simulate --geography us --uniform-background --edge {args.edge} "
        f"--n-background {args.n_background:,}"
        f"{' (each a Poisson draw of that mean)' if args.poisson_background else ''}"
        f" --t-end 700, seeds {recs[0]['seed']}-"
        f"{recs[-1]['seed']}",
        f"# fitted with model.edge: {args.edge}; Laplace (bench_edges.laplace: {args.steps} "
        f"Newton steps, Hessian sd on the log scale), priors of mu0, tau_t: the background's "
        f"constant limit; {engine}; {device}; commit {out['commit']} (replicates': "
        f"{', '.join(sorted({r.get('commit', 'unrecorded') for r in recs}))}); {today}",
        f"# wall per replicate: simulate {np.mean(sim_s):.0f} s, load + fit {np.mean(fit_s):.0f} s"
        f" (min {min(fit_s):.0f}, max {max(fit_s):.0f}); total {sum(sim_s) + sum(fit_s):.0f} s",
        "miss = (log mode - log truth) / sd(log); 95% interval covers when |miss| <= 1.96",
        "seed       N     xi0 mode  sd(log)  | miss: xi0  sigma_x  sigma_t  | next Newton step "
        "(largest of the three, sds; where recorded)",
    ]
    for r in recs:
        m = r["miss_sds"]
        res = r.get("residual_sds")
        lines.append(
            f"{r['seed']:<5} {r['n']:>8,}  {r['mode']['xi0']:.5f}  {r['log_sd']['xi0']:.5f}  |"
            f"      {m['xi0']:+5.2f}    {m['sigma_x']:+5.2f}    {m['sigma_t']:+5.2f}"
            + ("" if res is None else f"  |  {max(abs(res[k]) for k in CHECKED):.3f}")
        )
    lines.append(
        "parameter  mean miss +- se (nominal 1/sqrt(n))  sd of misses  coverage  "
        "relative bias (%) +- se"
    )
    for k in CHECKED:
        s = summ[k]
        lines.append(
            f"{k:<9}  {s['mean_miss']:+6.2f} +- {s['se_mean_miss']:.2f} "
            f"({s['se_mean_miss_nominal']:.2f})"
            f"{'':14}  {s['sd_miss']:6.2f}        {s['covered']}/{s['n']}       "
            f"{s['relative_bias_pct']:+6.2f} +- {s['relative_bias_se_pct']:.2f}"
        )
    path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=int, choices=(1, 2), default=1)
    ap.add_argument("--edge", choices=("censored", "renormalized"), default="censored")
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "LAST"), default=(101, 110))
    ap.add_argument("--n-background", type=int, default=88_000, help="~200,000 events")
    ap.add_argument("--steps", type=int, default=3, help="Newton steps")
    ap.add_argument(
        "--poisson-background",
        action="store_true",
        help="each replicate's background count a Poisson draw of --n-background's mean",
    )
    ap.add_argument("--work", type=Path, required=True, help="replicates' cache and events")
    ap.add_argument("--name", default=None, help="default m<model>-<edge>")
    ap.add_argument("--cores", type=int, default=2, help="for the device label")
    ap.add_argument("--report-only", action="store_true", help="summarize the cache only")
    args = ap.parse_args()
    args.name = args.name or f"m{args.model}-{args.edge}"
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def cached() -> list[dict]:
        recs = [json.loads(p.read_text()) for p in args.work.glob(f"{args.name}-s*.json")]
        return [
            r
            for r in recs
            if (r["model"], r["edge"], r["n_background"])
            == (args.model, args.edge, args.n_background)
            and r.get("poisson_background", False) == args.poisson_background
        ]

    if not args.report_only:
        for seed in range(args.seeds[0], args.seeds[1] + 1):
            cache = args.work / f"{args.name}-s{seed}.json"
            if cache.exists():
                continue
            rec = replicate(args, seed)
            cache.write_text(json.dumps(rec, indent=1, default=str))
            print(f"seed {seed}: N {rec['n']:,} miss {rec['miss_sds']}", flush=True)
            write_report(args, cached(), time.perf_counter() - t0)
    recs = cached()
    if recs:
        write_report(args, recs, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
