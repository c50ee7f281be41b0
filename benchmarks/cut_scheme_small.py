"""Where does the chains' error against the cut posterior come from? The sampler at one location
draw, the redraw-then-move scheme, and the Gaussian stand-in's prediction of it, all against a
brute force, on the small problem of ``tests/test_cut.py``.

The problem: 373 events of model 1 in 100 synthetic 1 x 1 counties (location uncertainty large
against ``sigma_x`` = 0.5), the exact float64 engine. Three measurements, each with its Monte
Carlo error:

1. **The brute-force cut posterior**: ``--draws`` independent location draws (each event
   uniform in its county), on each the conditional mean and covariance of the five
   log-parameters by self-normalised importance sampling (``tests/test_cut.py``'s numpy
   float64 likelihood, which that test checks against the reference engine); the cut sd is
   ``sqrt(mean within variance + variance of the means)``, its se by the jackknife over draws.
   Its mean conditional covariance ``W`` and the covariance of the conditional means ``B`` are
   the Gaussian stand-in's.
2. **The sampler at one location draw** (``resample_every: 0`` on an events file holding draw
   0's points): the chains' sd against the brute force's conditional sd there (six importance
   samples of ``--outer`` x 50 points, their spread the se). The chains run the real code:
   :func:`hawkes_cli.runner.run_chain`, the tiered sampler, the log posterior and its caches.
3. **The scheme**: the same chains redrawing the locations (``n_expensive: 1`` and 4 with a
   redraw each iteration, a redraw every 10) against the brute-force cut sd; beside them the
   Gaussian stand-in (``surrogate_cut_scheme.py``: the tiered sampler on ``N(m_X, W)``,
   ``m_X ~ N(0, B)``) with this problem's ``W`` and ``B``: what the scheme alone makes of them.

If (2) holds and (3)'s chains agree with the stand-in, the chains' error is the scheme's and
the stand-in predicts it from ``W`` and ``B`` alone (which the 1M check measures).

    python benchmarks/cut_scheme_small.py --work /tmp/cut-scheme-small

writes ``benchmarks/results/cut-scheme-small.{txt,json}``. Seeded; the runs resume (run it
again and finished chains are read back; ``--only`` runs some settings' chains and stops, so two
processes can share the cores before the last call reads them all). About 45 minutes of one
CPU core for the chains with the defaults (4 chains x 15,000 iterations per setting, about
11 ms an iteration), 10 more for the brute force and the stand-in.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.cutcheck import cut_locations
from hawkes_cli.diagnostics import load_draws
from hawkes_cli.diagnostics.cut import jackknife_sds, mcse_sd
from hawkes_cli.vocab import PARAM_NAMES

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: the brute force (``ExactConditional``, ``Proposal``, ``conditional_moments``) and the
#: problem's constants live with the test that checks them against the reference engine
brute = _load("test_cut_brute_force", HERE.parent / "tests" / "test_cut.py")
surrogate = _load("surrogate_cut_scheme", HERE / "surrogate_cut_scheme.py")

#: (name, n_expensive, resample_every), as ``bench_cut.SMALL_SCHEMES``; 0: one location draw
SETTINGS = (
    ("fixed", 1, 0),
    ("shipped", 1, 1),
    ("n_expensive-4", 4, 1),
    ("resample_every-10", 1, 10),
)
WARMUP = 500
SEED = 3  # the runs' sampler seed (the test's)
DRAW0_SEED = 1000  # the fixed run's location draw: cut_locations(..., DRAW0_SEED, 0)


def problem():
    """The test's events and its polygons with each event's polygon code."""
    from hawkes_cli.regions import polygons_for
    from hawkes_cli.simulate import DensityGrid, simulate

    grid = DensityGrid.log_uniform(brute.BOUNDS, 10, 10, 1.0, 10.0, seed=2)
    data = simulate(
        brute.TRUTH,
        model=1,
        n_background=200,
        t_end=brute.T_END,
        bounds=brute.BOUNDS,
        seed=4,
        grid=grid,
    )
    polys = polygons_for(data)
    return data, polys, polys.codes(data.fips)


def run_setting(work: Path, data, setting, iterations: int, chains: int) -> np.ndarray:
    """The real chains of one setting: their post-warm-up log draws ``(chains, draws, 5)``."""
    import yaml

    from hawkes_cli.config import load_config
    from hawkes_cli.data import save_events
    from hawkes_cli.runner import run_chain

    name, n_expensive, every = setting
    work.mkdir(parents=True, exist_ok=True)
    events = work / f"events-{name}.h5"
    if not events.exists():
        save_events(data, events)
    cfg = {
        "data": {"events": str(events), "window_end": brute.T_END},
        "model": {"kind": 1, "edge": "none"},
        "sampler": {
            "kind": "tiered",
            "iterations": iterations,
            "warmup": WARMUP,
            "seed": SEED,
            "resample_every": every,
            "n_expensive": n_expensive,
        },
        "chains": {"count": chains},
        "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
        "output": {"run_dir": str(work / name), "commit_every": 2000},
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    config = load_config(path)
    for chain in range(chains):
        t0 = time.perf_counter()
        run_chain(config, chain)
        print(f"{name}: chain {chain} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    draws = load_draws(Path(config.output.run_dir))
    return np.stack(
        [
            np.stack([np.log(draws.variables[p][c]) for p in PARAM_NAMES], axis=1)
            for c in range(chains)
        ]
    )


def chains_row(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pooled sd (5,) of ``(chains, draws, 5)`` log draws and its MCSE (5,)."""
    pooled = logs.reshape(-1, 5).std(axis=0, ddof=1)
    se = np.array([mcse_sd(logs[:, :, i]) for i in range(5)])
    return pooled, se


def brute_cut(data, polys, codes, start: np.ndarray, draws: int, outer: int, rng):
    """The brute-force cut posterior: per parameter (within, between, cut) sd and se, with
    ``W``, ``B`` and the importance samples' ESS (min, median)."""
    centre = start[0]
    ex = brute.ExactConditional(
        data.time, brute.T_END, brute.AREA, np.linspace(centre[1] - 5, centre[1] + 5, 241)
    )
    # the proposal: a tuning choice that the weights correct for (one round of adaptation)
    prop = brute.Proposal(centre, 4.0 * start[1])
    res = [
        brute.conditional_moments(ex, prop, *polys.sample(codes, rng), rng, m=outer)
        for _ in range(12)
    ]
    means = np.array([r[0] for r in res])
    prop = brute.Proposal(
        means.mean(axis=0), 1.3**2 * (np.mean([r[1] for r in res], axis=0) + np.cov(means.T))
    )
    res = [
        brute.conditional_moments(
            ex, prop, *cut_locations(polys, codes, DRAW0_SEED + k, 0), rng, m=outer
        )
        for k in range(draws)
    ]
    mu = np.array([r[0] for r in res])
    var = np.array([np.diag(r[1]) for r in res])
    sds = [jackknife_sds(mu[:, i], var[:, i]) for i in range(5)]
    ess = np.array([r[3] for r in res])
    return {
        "within": [s["within"] for s in sds],
        "between": [s["between"] for s in sds],
        "cut": [s["cut"] for s in sds],
        "W": np.mean([r[1] for r in res], axis=0),
        "B": np.cov(mu.T),
        "ess": (float(ess.min()), float(np.median(ess))),
        "ex": ex,
        "proposal": prop,
    }


def brute_conditional(cut: dict, x: np.ndarray, y: np.ndarray, outer: int, rng, reps: int = 6):
    """The conditional sds (5,) at one location draw and their se (5,), by ``reps``
    importance samples."""
    res = [
        brute.conditional_moments(cut["ex"], cut["proposal"], x, y, rng, m=outer)
        for _ in range(reps)
    ]
    sds = np.array([np.sqrt(np.diag(r[1])) for r in res])
    return sds.mean(axis=0), sds.std(axis=0, ddof=1) / math.sqrt(reps)


def ratio(a: float, a_se: float, b: float, b_se: float) -> tuple[float, float, float]:
    """``a / b``, its se (independent errors) and z of ``a / b - 1``."""
    r = a / b
    se = r * math.hypot(a_se / a, b_se / b)
    return r, se, (r - 1.0) / se


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="events and runs go here")
    ap.add_argument("--iterations", type=int, default=15_000, help="per chain, warm-up included")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=400, help="brute-force location draws")
    ap.add_argument("--outer", type=int, default=300, help="trigger blocks per importance sample")
    ap.add_argument("--long", type=int, default=20_000, help="stand-in chains' iterations")
    ap.add_argument(
        "--only",
        nargs="+",
        default=None,
        choices=[s[0] for s in SETTINGS],
        help="only run these settings' chains, then stop (to share the cores)",
    )
    ap.add_argument("--name", default="cut-scheme-small")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    t_start = time.perf_counter()
    data, polys, codes = problem()
    x0, y0 = cut_locations(polys, codes, DRAW0_SEED, 0)
    runs = {}
    for setting in SETTINGS:
        if args.only and setting[0] not in args.only:
            continue
        d = dataclasses.replace(data, x=x0, y=y0) if setting[2] == 0 else data
        runs[setting[0]] = run_setting(args.work, d, setting, args.iterations, args.chains)
    if args.only:
        return
    rng = np.random.default_rng(11)
    flat = runs["shipped"].reshape(-1, 5)
    t0 = time.perf_counter()
    cut = brute_cut(
        data, polys, codes, (flat.mean(axis=0), np.cov(flat.T)), args.draws, args.outer, rng
    )
    cond_sd, cond_se = brute_conditional(cut, x0, y0, 5 * args.outer, rng)
    brute_s = time.perf_counter() - t0
    cut_sd = np.array([c[0] for c in cut["cut"]])
    cut_se = np.array([c[1] for c in cut["cut"]])
    w_sd = np.sqrt(np.diag(cut["W"]))
    rows = []
    for name, n_exp, every in SETTINGS:
        sd, se = chains_row(runs[name])
        ref, ref_se = (cond_sd, cond_se) if every == 0 else (cut_sd, cut_se)
        real = [ratio(sd[i], se[i], ref[i], ref_se[i]) for i in range(5)]
        if every == 0:  # the stand-in at one draw: N(0, W), its sd over sqrt(diag W)
            s, s_se, _ = surrogate.stationary_ratio(
                (name, n_exp, 0), cut["W"], cut["B"] * 1e-12, w_sd, args.long, WARMUP, 9
            )
        else:
            s, s_se, _ = surrogate.stationary_ratio(
                (name, n_exp, every),
                cut["W"],
                cut["B"],
                np.sqrt(np.diag(cut["W"] + cut["B"])),
                args.long,
                WARMUP,
                5,
            )
        rows.append(
            {
                "setting": name,
                "n_expensive": n_exp,
                "resample_every": every,
                "draws_per_chain": int(runs[name].shape[1]),
                "chains_sd": sd.tolist(),
                "chains_se": se.tolist(),
                "ratio": [r[0] for r in real],
                "ratio_se": [r[1] for r in real],
                "z": [r[2] for r in real],
                "standin": np.asarray(s).tolist(),
                "standin_se": np.asarray(s_se).tolist(),
            }
        )
    doc = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "n_events": int(data.n),
        "brute_force": {
            "draws": args.draws,
            "outer": args.outer,
            "ess_min_median": cut["ess"],
            "within": cut["within"],
            "between": cut["between"],
            "cut": cut["cut"],
            "conditional_draw0": cond_sd.tolist(),
            "conditional_draw0_se": cond_se.tolist(),
            "W": cut["W"].tolist(),
            "B": cut["B"].tolist(),
            "seconds": brute_s,
        },
        "rows": rows,
        "seconds": time.perf_counter() - t_start,
    }
    text = report(doc)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.txt").write_text(text)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)


def report(doc: dict) -> str:
    """The tables of :func:`main`'s document."""
    bf = doc["brute_force"]
    cell = "{:>22}"
    head = f"{'':<20}" + "".join(cell.format(p) for p in PARAM_NAMES)

    def sd_line(label: str, pairs) -> str:
        return f"{label:<20}" + "".join(cell.format(f"{v:.4f} ({e:.4f})") for v, e in pairs)

    lines = [
        f"# cut_scheme_small.py, {doc['date']} on {doc['host']}: {doc['n_events']} events of "
        "model 1 (tests/test_cut.py), exact float64 engine (PoCL), tiered n_cheap 10;",
        f"# brute force: {bf['draws']} location draws x {bf['outer']} x 50 importance points "
        f"(ESS min {bf['ess_min_median'][0]:.0f}, median {bf['ess_min_median'][1]:.0f}), "
        f"{bf['seconds']:.0f} s; whole run {doc['seconds']:.0f} s.",
        "",
        "brute-force sds of the log parameters (se):",
        head,
        sd_line("within a draw", bf["within"]),
        sd_line("between draws", bf["between"]),
        sd_line("cut", bf["cut"]),
        sd_line(
            "draw 0 alone", zip(bf["conditional_draw0"], bf["conditional_draw0_se"], strict=True)
        ),
        "",
        "chains' sd / brute-force sd (se, z): the real chains; below each, the Gaussian stand-in",
        "(the same sampler on N(m_X, W), m_X ~ N(0, B), with the brute force's W and B;",
        "4 chains x 20,000 iterations, batch-means se). 'fixed': one location draw (draw 0),",
        "against its conditional sd; the others against the cut sd.",
        head,
    ]
    for r in doc["rows"]:
        label = f"{r['setting']} ({r['draws_per_chain']})"
        lines.append(
            f"{label:<20}"
            + "".join(
                cell.format(f"{v:.3f}+-{e:.3f} {z:+.1f}")
                for v, e, z in zip(r["ratio"], r["ratio_se"], r["z"], strict=True)
            )
        )
        lines.append(
            f"{'  stand-in':<20}"
            + "".join(
                cell.format(f"{v:.3f}+-{e:.3f}")
                for v, e in zip(r["standin"], r["standin_se"], strict=True)
            )
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
