"""The chains' own sampler on a Gaussian stand-in of the 1M cut posterior: how wide is the
redraw-then-move scheme, setting by setting?

Issue 42's check at 1M (model 1, ``n_expensive: 4``) found the chains wider than the cut
posterior (``sigma_x`` 1.13, ``xi0`` 1.05). ``toy_cut_scheme.py`` had the scheme in one
dimension; this has it in five, with the code the chains run: :class:`TieredSampler` built
as the runner builds it (``runner/chain.py``), started as a chain starts (an over-dispersed
t draw around the mode, ``start/find.py``), adapted during warm-up, one location redraw per
``resample_every`` iterations recomputing the current state's density before the step
(``runner/loop.py``). Only the posterior is replaced:

- a location draw ``X`` gives the conditional ``p(theta | X) = N(m_X, W)``;
- the draws' modes ``m_X ~ N(0, B)``, so the cut posterior is ``N(0, W + B)`` exactly.

``W`` is the conditional covariance at 1M: the correlations of the fast start's Hessian of a
1M run (``--start``: a run's ``chains/start.json``), scaled to the check's mean within-draw
sds; ``B`` is the covariance of the 50 conditional modes of the 1M check
(``results/cut-1000000-m1-nexp4-k50.json``). The sampler's prior covariance (``init``'s
``cov``) is ``W``, as the real chains take the fast start's curvature at one location draw.

Per setting it reports the chains' pooled sd over the cut sd, per parameter, two ways:

- *as the check reads it*: ``--reps`` replicate runs of 4 chains x (warm-up + ``--draws``)
  iterations, each run's pooled post-warm-up sd over the cut sd; mean and its standard error
  over the replicates (the transient of the over-dispersed start included);
- *stationary*: 4 chains of ``--long`` iterations (warm-up dropped), batch-means se.

    python benchmarks/surrogate_cut_scheme.py --start RUN/chains/start.json

writes ``benchmarks/results/surrogate-cut-scheme.{txt,json}``. Seeded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from hawkes_cli.sampler import make_sampler
from hawkes_cli.vocab import PARAM_NAMES

HERE = Path(__file__).resolve().parent
CHECK = HERE / "results" / "cut-1000000-m1-nexp4-k50.json"
CHEAP = (0, 1, 2)  # mu0, tau_t, xi0: no trigger pass (LogPosterior.cheap)
CHAINS = 4
#: (name, n_expensive, resample_every): the shipped setting, the mission's, more moves, and
#: a redraw every 10 iterations.
SETTINGS = (
    ("shipped", 1, 1),
    ("n_expensive-4", 4, 1),
    ("n_expensive-16", 16, 1),
    ("resample_every-10", 1, 10),
)


def check_moments(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The 1M check's mean within-draw sds (5,) and its modes' covariance (5, 5), log scale."""
    cut = json.loads(path.read_text())["runs"][0]["cut_check"]
    draws = [d for d in cut["draws"] if d["status"] == "ok"]
    modes = np.array([[d["mode"][p] for p in PARAM_NAMES] for d in draws])
    sds = np.array([[d["sd"][p] for p in PARAM_NAMES] for d in draws])
    return sds.mean(axis=0), np.cov(modes, rowvar=False)


def start_covariance(path: Path) -> np.ndarray:
    """The fast start's covariance (5, 5) from a run's ``chains/start.json``."""
    doc = json.loads(path.read_text())
    doc = doc.get("start", doc)
    return np.array(doc["cov"], dtype=float)


def overdispersed(chol: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One start as ``start/find.py``'s ``overdispersed_starts`` draws it (scale 2, t with 4
    degrees of freedom), around the origin (the cut posterior's centre)."""
    z = rng.standard_normal(chol.shape[0])
    w = rng.chisquare(4.0)
    return 2.0 * (chol @ z) / math.sqrt(w / 4.0)


def run_chain(
    setting: tuple[str, int, int],
    within: np.ndarray,
    between_chol: np.ndarray,
    iterations: int,
    warmup: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """One chain of the scheme: ``(iterations, 5)`` states after each iteration
    (``resample_every`` 0: one location draw for the whole chain)."""
    _, n_expensive, every = setting
    prec = np.linalg.inv(within)
    w_chol = np.linalg.cholesky(within)
    mode = between_chol @ rng.standard_normal(5)

    def log_density(theta: np.ndarray) -> float:
        r = theta - mode
        return float(-0.5 * r @ prec @ r)

    sampler = make_sampler(
        "tiered",
        5,
        cheap=CHEAP,
        n_cheap=10,
        n_expensive=n_expensive,
        jump_prob=0.2,
        expensive_move="coupled",
        jump_modes=(),
    )
    theta0 = overdispersed(w_chol, rng)
    state = sampler.init(theta0, log_density(theta0), cov=within)
    out = np.empty((iterations, 5))
    for it in range(iterations):
        if every and it > 0 and it % every == 0:
            mode = between_chol @ rng.standard_normal(5)
            state = dataclasses.replace(state, log_target=log_density(np.asarray(state.theta)))
        state, _ = sampler.step(state, log_density, rng, adapt=it < warmup)
        out[it] = state.theta
    return out


def replicate_ratios(setting, within, between, cut_sd, reps, warmup, draws, seed) -> np.ndarray:
    """``(reps, 5)``: each replicate run's pooled post-warm-up sd over the cut sd."""
    chol_b = np.linalg.cholesky(between)
    ratios = np.empty((reps, 5))
    for r in range(reps):
        rng = np.random.default_rng([seed, r])
        kept = np.concatenate(
            [
                run_chain(setting, within, chol_b, warmup + draws, warmup, rng)[warmup:]
                for _ in range(CHAINS)
            ]
        )
        ratios[r] = kept.std(axis=0, ddof=1) / cut_sd
    return ratios


def stationary_ratio(setting, within, between, cut_sd, long, warmup, seed):
    """Long chains' sd over the cut sd (5,) and batch-means se (5,), lag-1 autocorrelation."""
    chol_b = np.linalg.cholesky(between)
    rng = np.random.default_rng([seed, 10**6])
    chains = [run_chain(setting, within, chol_b, long, warmup, rng)[warmup:] for _ in range(CHAINS)]
    kept = np.concatenate(chains)
    batches = np.concatenate([c[: c.shape[0] // 25 * 25].reshape(25, -1, 5) for c in chains])
    bsd = batches.std(axis=1, ddof=1)
    z = [c - c.mean(axis=0) for c in chains]
    lag1 = sum((a[1:] * a[:-1]).sum(axis=0) for a in z) / sum((a * a).sum(axis=0) for a in z)
    return (
        kept.std(axis=0, ddof=1) / cut_sd,
        bsd.std(axis=0, ddof=1) / math.sqrt(bsd.shape[0]) / cut_sd,
        lag1,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=Path, required=True, help="a 1M run's chains/start.json")
    ap.add_argument("--check", type=Path, default=CHECK)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--draws", type=int, default=308)
    ap.add_argument("--long", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--name", default="surrogate-cut-scheme")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args()
    within_sd, between = check_moments(args.check)
    s = start_covariance(args.start)
    corr = s / np.sqrt(np.outer(np.diag(s), np.diag(s)))
    within = corr * np.outer(within_sd, within_sd)
    cut_sd = np.sqrt(np.diag(within + between))
    rows = []
    for k, setting in enumerate(SETTINGS):
        reps = replicate_ratios(
            setting, within, between, cut_sd, args.reps, args.warmup, args.draws, args.seed + k
        )
        ratio, se, lag1 = stationary_ratio(
            setting, within, between, cut_sd, args.long, args.warmup, args.seed + k
        )
        rows.append(
            {
                "setting": setting[0],
                "n_expensive": setting[1],
                "resample_every": setting[2],
                "check_mean": reps.mean(axis=0).tolist(),
                "check_se": (reps.std(axis=0, ddof=1) / math.sqrt(args.reps)).tolist(),
                "check_sd": reps.std(axis=0, ddof=1).tolist(),
                "stationary": ratio.tolist(),
                "stationary_se": se.tolist(),
                "lag1": lag1.tolist(),
            }
        )
        print(setting[0], np.round(reps.mean(axis=0), 3), np.round(ratio, 3), flush=True)
    write(args, within, between, cut_sd, rows)


def sds(names, cov: np.ndarray) -> str:
    """``name sd`` pairs of a covariance's diagonal."""
    return "  ".join(f"{n} {v:.3g}" for n, v in zip(names, np.sqrt(np.diag(cov)), strict=True))


def table(rows: list[dict], keys: tuple[str, str, str], digits: int) -> list[str]:
    """A header and one line per setting: ``mean+-se [third]`` per parameter."""
    lines = [f"{'setting':<18} " + " ".join(f"{n:>22}" for n in PARAM_NAMES)]
    for r in rows:
        cells = [
            f"{m:.3f}+-{e:.3f} [{x:.{digits}f}]"
            for m, e, x in zip(*(r[k] for k in keys), strict=True)
        ]
        lines.append(f"{r['setting']:<18} " + " ".join(f"{c:>22}" for c in cells))
    return lines


def write(args, within, between, cut_sd, rows) -> None:
    """The table and the JSON."""
    names = PARAM_NAMES
    lines = [
        "# surrogate_cut_scheme.py: TieredSampler (the chains' code) on N(m_X, W), m_X ~ N(0, B);",
        f"# W: correlations of {args.start}, sds of the 1M check's mean within-draw sds;",
        f"# B: covariance of the 1M check's 50 modes ({args.check.name});",
        "# cut sd = sqrt(diag(W + B)).",
        "# n_cheap 10, jump_prob 0.2, coupled moves, chains start over-dispersed (t4, 2x),"
        f" warm-up {args.warmup}.",
        "# within sd:  " + sds(names, within),
        "# between sd: " + sds(names, between),
        "",
        f"chains' sd / cut sd as the check reads it: {args.reps} runs of {CHAINS} chains x "
        f"{args.draws} draws after warm-up (mean +- se over runs; run-to-run sd in brackets)",
        *table(rows, ("check_mean", "check_se", "check_sd"), 3),
        "",
        f"stationary: {CHAINS} chains x {args.long:,} iterations (batch-means se; lag-1 "
        "autocorrelation in brackets)",
        *table(rows, ("stationary", "stationary_se", "lag1"), 2),
    ]
    text = "\n".join(lines) + "\n"
    (args.out / f"{args.name}.txt").write_text(text)
    doc = {
        "within": within.tolist(),
        "between": between.tolist(),
        "cut_sd": cut_sd.tolist(),
        "settings": vars(args)
        | {"start": str(args.start), "check": str(args.check), "out": str(args.out)},
        "rows": rows,
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
