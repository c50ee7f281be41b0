"""How wide the paper's redraw-then-move scheme is against the cut posterior, in a Gaussian toy.

Issue 42's check at 1M found the chains 1.2x wider than the cut posterior in ``sigma_x``; the
candidate cause was the lag between redraws (a few Metropolis moves per location draw). This
toy has that scheme exactly, with nothing else: each iteration draws a location draw's
conditional mode ``m ~ N(0, b^2)``, then makes ``k`` random-walk Metropolis moves of ``theta``
on the conditional ``N(m, s^2)`` with proposals of ``mult`` times the cut sd (a chain tuned to
its whole spread proposes about 2.38 times its sd). The cut posterior is ``N(0, s^2 + b^2)``.
``s`` and ``b`` are the 1M check's within- and between-draw sds of log ``sigma_x`` (0.00227 and
0.00175 from its 50 draws; only their ratio matters). Each setting also reports the chain's
lag-1 autocorrelation and the moves' acceptance rate, to place a real chain's (whose lag-1
autocorrelation of log ``sigma_x`` is measured from its draws) among the settings.

Usage::

    python benchmarks/toy_cut_scheme.py [--iterations 300000]

writes ``benchmarks/results/toy-cut-scheme.{txt,json}``: per ``k`` and ``mult`` the chain's sd
over the cut sd with a batch-means error (100 batches; seeded).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WITHIN, BETWEEN = 0.00227, 0.00175  # the 1M check's sds of log sigma_x (50 draws)
MOVES = (1, 4, 16)
PROPOSALS = (0.5, 1.0, 2.38, 5.0, 10.0)  # times the cut sd


def chain_sd(k: int, mult: float, iterations: int, seed: int) -> dict[str, float]:
    """Chain sd / cut sd and its batch-means standard error, the lag-1 autocorrelation and
    the acceptance rate of one scheme."""
    rng = np.random.default_rng(seed)
    s, b = 1.0, BETWEEN / WITHIN
    cut = float(np.hypot(s, b))
    modes = b * rng.standard_normal(iterations)
    steps = mult * cut * rng.standard_normal((iterations, k))
    logu = np.log(rng.random((iterations, k)))
    theta, out, accepted = 0.0, np.empty(iterations), 0
    for i in range(iterations):
        m = modes[i]
        for j in range(k):
            prop = theta + steps[i, j]
            if logu[i, j] < ((theta - m) ** 2 - (prop - m) ** 2) / (2.0 * s * s):
                theta = prop
                accepted += 1
        out[i] = theta
    kept = out[iterations // 100 :]
    batches = kept[: kept.size // 100 * 100].reshape(100, -1).std(axis=1)
    z = kept - kept.mean()
    return {
        "ratio": float(kept.std() / cut),
        "se": float(batches.std() / np.sqrt(100) / cut),
        "lag1": float(np.dot(z[1:], z[:-1]) / np.dot(z, z)),
        "acceptance": accepted / (iterations * k),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=300_000)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args()
    rows = []
    for k in MOVES:
        for mult in PROPOSALS:
            got = chain_sd(k, mult, args.iterations, seed=1000 * k + int(10 * mult))
            rows.append({"moves": k, "proposal_x_cut_sd": mult, **got})
    lines = [
        "# toy_cut_scheme.py: the redraw-then-k-moves scheme on Gaussian conditionals",
        f"# N(m, s^2), m ~ N(0, b^2), b/s = {BETWEEN}/{WITHIN} (the 1M check's log sigma_x);",
        f"# chain sd over the cut sd sqrt(s^2 + b^2), {args.iterations:,} iterations each,",
        "# batch-means se (100 batches).",
        f"# within/cut = {1 / np.hypot(1, BETWEEN / WITHIN):.3f}: the limit of tiny proposals.",
        "",
        "moves  proposal (x cut sd)  chain sd / cut sd  lag-1 autocorrelation  acceptance",
    ]
    lines += [
        f"{r['moves']:5d}  {r['proposal_x_cut_sd']:19.2f}  {r['ratio']:.3f} +- {r['se']:.3f}  "
        f"{r['lag1']:21.3f}  {r['acceptance']:10.3f}"
        for r in rows
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "toy-cut-scheme.txt").write_text("\n".join(lines) + "\n")
    (args.out / "toy-cut-scheme.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
