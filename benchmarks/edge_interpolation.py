"""How wrong is the censored likelihood's lost trigger mass between the mass lattice's points?
The linear interpolation in ``log sigma_x`` (before) and the cubic (:func:`mass_stencil`, now)
against the exact mass, on county-placed cases, scaled to the 1M posterior.

The censored likelihood adds ``xi0 * sum_m h_m (1 - M_m(sigma_x))`` to the log-likelihood
(``h_m = 1 - exp(-(T - t_m) / sigma_t)``, ``M_m`` source m's trigger mass inside the counties).
:class:`~hawkes_cli.engine.edge_mass.EdgeMass` computes ``M_m`` at lattice points
``2^(k/16)`` and interpolates (model 2: each event's lengthscale is ``sigma_x / sqrt(density)``,
the lattice is in ``sigma_x``). This script takes ``--n`` events of an events file (a seeded
subsample), at the 1M posterior's ``xi0``, ``sigma_t`` and around its ``sigma_x`` (``--model``:
:data:`POSTERIOR`):

- the exact term (``BoundaryRegion.mass_error(exact=True)``: the segment sums, 1e-9 against
  scipy's Owen's T) at ``--points`` values of ``sigma_x`` across the lattice step around the
  posterior's, and its slope and curvature in ``log sigma_x``;
- the same from the exact masses at the lattice points, interpolated linearly between the two
  around (the old way) and by the cubic through the four around (the new way): the error of the
  interpolation alone;
- the engine's own masses (:class:`EdgeMass`: the rasters where they pay, then the cubic;
  model 2's around each event's lengthscale snapped to the lattice, since 2026-12-03 evening,
  the line before), which adds the rasters' error to the interpolation's;
- scaled to 1,000,000 events (the term and its derivatives grow like N), the error in nats,
  the gradient error and what it does to the 1M posterior of ``log sigma_x`` (sd ``--sd``,
  0.00227 at 1M model 1, 0.00272 model 2): a shift of ``gradient error * sd^2`` and a
  curvature off by the curvature error over ``1 / sd^2``.

    python benchmarks/edge_interpolation.py /tmp/hhs/cases-1000000.h5 --n 100000
    python benchmarks/edge_interpolation.py /tmp/hhs/cases-1000000.h5 --model 2 --n 20000 \
        --name edge-interpolation-m2

writes ``benchmarks/results/edge-interpolation.{txt,json}``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hawkes_cli.data import load_events
from hawkes_cli.engine.edge_mass import MASS_STEPS, EdgeMass, mass_lattice, mass_stencil
from hawkes_cli.regions import region_for

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: The 1M posteriors (medians; log sigma_x's sd): model 1's converged ``n_expensive: 1`` run
#: (``docs/cut-posterior.md``), model 2's ``benchmarks/results/mission-m2-1000000-table.txt``
#: (lengthscale ``sigma_x / sqrt(density)``).
POSTERIOR = {1: (1.078, 0.05202, 77.56, 0.00227), 2: (1.070, 0.8237, 91.18, 0.00272)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events", type=Path)
    ap.add_argument("--model", type=int, choices=(1, 2), default=1)
    ap.add_argument("--n", type=int, default=100_000, help="events (a seeded subsample)")
    ap.add_argument("--points", type=int, default=9, help="sigma_x values across the step")
    ap.add_argument("--sd", type=float, default=None, help="default: the model's 1M sd")
    for name in ("xi0", "sigma-x", "sigma-t"):
        ap.add_argument(f"--{name}", type=float, default=None, help="default: the model's 1M")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rasters",
        choices=("engine", "always"),
        default="engine",
        help="the engine's masses: rasters where they pay (as for these events), or always "
        "(as for a chain's 1M events, where they pay everywhere)",
    )
    ap.add_argument("--name", default="edge-interpolation")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = load_events(args.events)
    region = region_for(data)
    rng = np.random.default_rng(args.seed)
    pick = np.sort(rng.choice(data.n, size=min(args.n, data.n), replace=False))
    x, y, t = data.x[pick], data.y[pick], data.time[pick]
    given = (args.xi0, args.sigma_x, args.sigma_t, args.sd)
    xi0, sigma_x, sigma_t, sd = (
        g if g is not None else d for g, d in zip(given, POSTERIOR[args.model], strict=True)
    )
    if args.model == 2 and data.density is None:
        raise SystemExit(f"error: {args.events} has no density column (model 2)")
    # the engine's own masses (the rasters where they pay, at the lattice points, and its
    # stencil); its lengthscales (model 2: sigma_x / sqrt(density)) serve the exact ones too
    density = None if args.model == 1 else data.density[pick]
    edge = EdgeMass(region, x, y, rows=(0, pick.size), density=density)
    if args.rasters == "always":
        object.__setattr__(region, "_raster_pays", lambda *_: True)  # as at 1M
    share = -np.expm1(-(data.time[-1] - t) / sigma_t)
    scale = 1_000_000 / pick.size
    masses: dict[float, np.ndarray] = {}

    def exact(s: float) -> np.ndarray:
        if s not in masses:
            masses[s] = region.mass_error(x, y, edge.lengthscales(s), exact=True)[0]
        return masses[s]

    def term(m: np.ndarray) -> float:
        """``xi0 * sum h (1 - M)`` scaled to 1M events (nats)."""
        return xi0 * float(np.dot(share, 1.0 - m)) * scale

    def linear(s: float) -> np.ndarray:
        lo, hi, w = mass_lattice(s)
        return (1.0 - w) * exact(lo) + w * exact(hi)

    def cubic(s: float) -> np.ndarray:
        points, weights = mass_stencil(s)
        return np.clip(sum(w * exact(p) for p, w in zip(points, weights, strict=True)), 0, 1)

    def engine(s: float) -> np.ndarray:
        return edge.mass(s)[0]

    lo, hi, _ = mass_lattice(sigma_x)
    step = math.log(2.0) / MASS_STEPS
    us = math.log(lo) + step * (np.arange(args.points) + 0.5) / args.points
    h = step / 32  # the derivatives' finite-difference step (log sigma_x): inside the step
    rows = []
    for u in us:
        vals = {}
        for name, f in (("exact", exact), ("linear", linear), ("cubic", cubic), ("engine", engine)):
            a, b, c = (term(f(math.exp(u + d))) for d in (-h, 0.0, h))
            vals[name] = (b, (c - a) / (2 * h), (c - 2 * b + a) / h**2)
        rows.append({"sigma_x": math.exp(u), "t": (u - math.log(lo)) / step, **vals})
    doc = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "events": str(args.events),
        "n": int(pick.size),
        "model": args.model,
        "rasters": args.rasters,
        "xi0": xi0,
        "sigma_t": sigma_t,
        "sd_log_sigma_x": sd,
        "lattice": [lo, hi],
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }
    text = report(doc)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.txt").write_text(text)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)


def report(doc: dict) -> str:
    """The table: per sigma_x the exact term and each interpolation's error (value, slope,
    curvature), and the worst over the step as posterior effects."""
    sd = doc["sd_log_sigma_x"]
    # interpolations of the exact masses, and (since 2026-12-03) the engine's masses
    names = [n for n in ("linear", "cubic", "engine") if n in doc["rows"][0]]
    lines = [
        f"# edge_interpolation.py, {doc['date']} on {doc['host']}: {doc['n']:,} events of "
        f"{doc['events']}, scaled to 1,000,000;",
        f"# model {doc.get('model', 1)}, xi0 {doc['xi0']}, sigma_t {doc['sigma_t']} days, "
        f"sigma_x across the lattice step [{doc['lattice'][0]:.5f}, {doc['lattice'][1]:.5f}]"
        f"{' deg' if doc.get('model', 1) == 1 else ' (lengthscale sigma_x / sqrt(density))'}"
        "; exact masses by the segment "
        f"sums; {doc['seconds']:.0f} s.",
        "# term = xi0 * sum_m h_m (1 - M_m) (nats); slope and curvature in log sigma_x; "
        "errors = interpolated - exact.",
        "",
        f"{'sigma_x':>9} {'t':>5} {'term':>10} {'slope':>10} {'curv':>10}   "
        + "   ".join(f"{n[:3] + ' err':>8} {'slope':>8} {'curv':>9}" for n in names),
    ]
    worst = {name: [0.0, 0.0, 0.0] for name in names}
    for r in doc["rows"]:
        e = r["exact"]
        cells = []
        for name in names:
            d = [a - b for a, b in zip(r[name], e, strict=True)]
            worst[name] = [max(w, abs(v)) for w, v in zip(worst[name], d, strict=True)]
            cells.append(f"{d[0]:8.3f} {d[1]:8.1f} {d[2]:9.0f}")
        lines.append(
            f"{r['sigma_x']:9.5f} {r['t']:5.2f} {e[0]:10.1f} {e[1]:10.0f} {e[2]:10.0f}   "
            + "   ".join(cells)
        )
    lines += [
        "",
        f"worst over the step, as effects on the 1M posterior of log sigma_x (sd {sd}, "
        f"curvature {1 / sd**2:,.0f} per unit^2):",
    ]
    for name, (v, g, c) in worst.items():
        lines.append(
            f"  {name:<7} value {v:.3g} nats, slope {g:.3g} nats/unit (shift {g * sd**2 / sd:.3g}"
            f" posterior sds), curvature {c:.3g} ({c * sd**2:.2%} of the posterior's)"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
