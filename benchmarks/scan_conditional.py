"""Is a run's conditional posterior Gaussian at a location draw? A scan of its log posterior.

Issue 42's cut check takes each location draw's conditional posterior as Gaussian (Newton
steps and a finite-difference Hessian with steps of about 2 conditional sds). This scans the
run's own log posterior (:func:`hawkes_cli.cutcheck.conditional_posterior`: its config, data,
engine and priors) at one of the check's location draws along each named log-parameter through
that draw's conditional mode, the others held there, in steps of a quarter of the draw's
within-draw sd, and reports the curvature of quadratic fits over +-1, 2 and 4 sds, the local
curvature at every point (second differences), the check's 2-sd stencil, and the residuals from
the +-4 sd quadratic: kinks (the edge masses' lattice in ``sigma_x``) or skew would show.

Usage::

    python benchmarks/scan_conditional.py RUN_DIR CUT_JSON [--draw 0]
        [--params sigma_x sigma_t] [--out benchmarks/results/scan-NAME]

``CUT_JSON`` is ``bench_cut.py``'s JSON for the run (its draws' modes and sds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hawkes_cli.cutcheck import conditional_posterior  # noqa: E402
from hawkes_cli.vocab import PARAM_NAMES  # noqa: E402

OFFSETS = np.linspace(-4.0, 4.0, 33)  # within-draw sds


def scan(run: Path, draw: dict, k: int, params: list[str]) -> dict:
    """The log posterior at ``OFFSETS`` along each of ``params`` through ``draw``'s mode."""
    mode = np.array([draw["mode"][n] for n in PARAM_NAMES])
    sd = np.array([draw["sd"][n] for n in PARAM_NAMES])
    t0 = time.perf_counter()
    post, locations = conditional_posterior(run)
    post.likelihood.set_locations(*locations(k))
    out = {"draw": k, "mode": mode.tolist(), "sd": sd.tolist(), "scans": {}}
    for name in params:
        i = PARAM_NAMES.index(name)
        vals = []
        for o in OFFSETS:
            theta = mode.copy()
            theta[i] += o * sd[i]
            vals.append(post(theta))
        out["scans"][name] = vals
    out["seconds"] = time.perf_counter() - t0
    return out


def report(out: dict) -> list[str]:
    """The table lines of :func:`scan`'s result."""
    lines = []
    h = OFFSETS[1] - OFFSETS[0]
    i0, step = int(np.argmin(np.abs(OFFSETS))), int(np.rint(2.0 / h))
    for name, vals in out["scans"].items():
        lp = np.asarray(vals) - max(vals)
        fits = []
        for half in (1.0, 2.0, 4.0):
            m = np.abs(OFFSETS) <= half + 1e-9
            c = np.polyfit(OFFSETS[m], lp[m], 2)
            fits.append(f"+-{half:g} sd: {-2 * c[0]:.4f}, peak {-c[1] / (2 * c[0]):+.3f} sd")
        local = -(lp[2:] - 2 * lp[1:-1] + lp[:-2]) / h**2
        stencil = -(lp[i0 + step] - 2 * lp[i0] + lp[i0 - step]) / 4.0
        res = lp - np.polyval(np.polyfit(OFFSETS, lp, 2), OFFSETS)
        lines += [
            f"{name}: curvature per within-draw sd^2 of quadratic fits: " + "; ".join(fits),
            f"  local (second differences, step 0.25 sd): min {local.min():.3f}, max "
            f"{local.max():.3f}; the check's 2-sd stencil: {stencil:.4f}",
            f"  largest residual from the +-4 sd quadratic: {np.abs(res).max():.4f} nats",
        ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("cut_json", type=Path)
    ap.add_argument("--draw", type=int, default=0)
    ap.add_argument("--params", nargs="+", default=["sigma_x", "sigma_t"])
    ap.add_argument("--out", type=Path, required=True, help="path without suffix")
    args = ap.parse_args()
    check = json.loads(args.cut_json.read_text())["runs"][0]["cut_check"]
    out = scan(args.run, check["draws"][args.draw], args.draw, args.params)
    lines = [
        f"# scan_conditional.py {args.run} draw {args.draw}: the log posterior along each "
        "log-parameter through the draw's conditional mode (others there), 33 points over +-4 "
        f"within-draw sds; {out['seconds']:.0f} s",
        *report(out),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
