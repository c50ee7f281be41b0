"""Fast likelihood (issues 7 and 14): truncated trigger against the exact kernel, with the error
in log-likelihood DIFFERENCES (nats) next to each speed-up.

Data: ``bench_loglik.make_data`` -- US-like clustered events (300 'cities' of Zipf sizes, spread
0.15 degrees, lon/lat degrees, model-2 densities 0.04 to 70,000), integer days over three years
(``--data counties``: ``bench_loglik.make_county_data``, events on the real counties);
centre ``p0 = bench_loglik.PARAMS`` (sigma_x = 0.08 degrees, sigma_t = 20 days). OpenCL on the
default device (``--device``), ``--precision`` float32 for both engines.

Per N in ``--sizes``, model in ``--models`` and tolerance in ``--tolerances`` (default: the one
``--tolerance``, itself defaulting to ``hawkes_cli.vocab.DEFAULT_TOLERANCE``, passed to
``make_likelihood`` unchanged, so in whatever unit the engine takes it):

* exact: seconds of one full evaluation (both pair passes) of a fresh exact likelihood
  (``tolerance=0``) at p0, measured up to ``--exact-max`` events; above it, scaled from the
  largest measured N by (N / N_measured)^2 and marked, with no error columns.
* truncated: the FIRST evaluation of a fresh likelihood (index build, cut-off choice and any
  tightenings), then the median of ``--repeats`` (``--large-repeats`` above N = 200,000)
  evaluations with the caches cleared (``lik.clear_cache()``); speed-up = exact / steady;
  kappa (``lik.backend.kappa``) and ``lik.tightenings``; the realised bound
  (``Evaluation.error_bound``) and the measured |l~(p0) - l(p0)|.
* walk: then the median seconds of an evaluation at each of ``--walk-steps`` proposals of
  sigma_x and sigma_t around p0, 1.7 conditional sds apart (as an MCMC chain proposes them after
  warm-up): every proposal is a new trigger pass, and what the engine builds per lengthscale (grid
  index, row blocks) is paid here, not in the steady figure.
* differences: conditional posterior sd of each parameter in log space (flat prior) from the
  curvature of the truncated log-likelihood at p0 (a likelihood of its own, at the smallest
  tolerance of the run; cached with the exact values, so later runs use the same points), by
  central differences with log-step ``--fd-step``: ``sd_j = 1 / sqrt(-d2 l / d log theta_j^2)``;
  where that curvature is not negative (or not finite) the fallback ``sd_j = 0.01`` (about 1% of
  the value) is used and the row is marked ``sd fallback``. Points: p0 and ``theta_j * exp(+-3
  sd_j)`` for each of the five parameters (11 points). Only sigma_x and sigma_t change the trigger
  E, so the engines give (B, E) at the 5 lengthscale points (``lik.components``; for the exact one
  also B at ``tau_t * exp(+-3 sd)``, a cheap background pass); every point's log-likelihood is
  then taken on the host in float64 from (B, E) with the formula of ``Likelihood._local`` (checked
  against ``lik.loglik(p0)`` to 1e-9 relative, asserted). Reported: max over points of ``|(l~(p) -
  l~(p0)) - (l(p) - l(p0))|``, the parameter (and sign) giving it, and the largest realised bound
  over the points. If the truncated cut-off tightens during the sweep, the sweep is repeated at
  the new cut-off (``sweeps`` > 1 in the JSON) so all points share one kappa.

The exact (B, E) cost about 200 s per evaluation at 1M on the CPU, so they are cached as .npz
under ``--cache`` (default ~/.cache/hawkes-bench), keyed by N, model, precision, a hash of the
data, and (sigma_x, sigma_t) or tau_t; the exact timing and the sd of each (N, model, data) are
cached there too (so every tolerance and every re-run uses the same points and the same exact
values). ``--no-cache`` ignores and does not write it. Each row says whether its exact values
came from the cache (the timing is then the cached one, with its date, if it was taken on the
same OpenCL device; on another device it is measured again).

MCMC iterations per second (block sampler, ``hawkes_cli.runner.run_chain``) at ``--mcmc-n``
(default 0: skipped) with the exact and the truncated engines.

    python benchmarks/bench_fast.py                          # the issue-14 table (200k, 1M)
    python benchmarks/bench_fast.py --tolerances 0.3 0.1 0.03 0.01   # choose a tolerance
    python benchmarks/bench_fast.py --sizes 5000 20000 --out /tmp/fast.json      # quick

Prints a table and writes JSON (default benchmarks/results/fast.json) and the text table
(same name, .txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml
from scipy.special import ndtr

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_loglik import AREA, PARAMS, make_county_data, make_data  # noqa: E402

from hawkes_cli import kernels  # noqa: E402
from hawkes_cli.config import load_config  # noqa: E402
from hawkes_cli.data import EventData, save_events  # noqa: E402
from hawkes_cli.engine import Likelihood, make_likelihood  # noqa: E402
from hawkes_cli.engine.base import LAMBDA_FLOOR  # noqa: E402
from hawkes_cli.model import Params  # noqa: E402
from hawkes_cli.runner import run_chain  # noqa: E402
from hawkes_cli.vocab import DEFAULT_TOLERANCE  # noqa: E402

log = logging.getLogger("bench_fast")

PARAM_ORDER = ("mu0", "xi0", "tau_t", "sigma_x", "sigma_t")
LENGTHSCALES = ("sigma_x", "sigma_t")
SD_FALLBACK = 0.01  # log-space sd where the curvature is not negative (about 1% of the value)
HOST_CHECK_RTOL = 1e-9


# ---------------------------------------------------------------------------- host formula
def host_loglik(p: Params, B: np.ndarray, E: np.ndarray, time: np.ndarray, T: float) -> float:
    """The log-likelihood from per-event (B, E), float64, as ``Likelihood._local``:
    ``sum log max(mu0 B + xi0 E, floor) - sum_n compensator(t_n)``."""
    lam = np.maximum(p.mu0 * B + p.xi0 * E, LAMBDA_FLOOR)
    tu, counts = np.unique(time, return_counts=True)
    comp = p.mu0 * (ndtr((T - tu) / p.tau_t) - ndtr(-tu / p.tau_t)) - p.xi0 * np.expm1(
        -(T - tu) / p.sigma_t
    )
    return float(np.sum(np.log(lam)) - np.dot(comp, counts))


def check_host(value: float, engine_value: float, what: str) -> float:
    rel = abs(value - engine_value) / max(abs(engine_value), 1e-300)
    assert rel <= HOST_CHECK_RTOL, (
        f"host formula {value!r} != {what} lik.loglik(p0) {engine_value!r} (rel {rel:.2e})"
    )
    return rel


# ---------------------------------------------------------------------------- points
def moved(p: Params, name: str, log_step: float) -> Params:
    return dataclasses.replace(p, **{name: getattr(p, name) * math.exp(log_step)})


def conditional_sds(lik: Likelihood, p0: Params, h: float) -> dict[str, dict]:
    """Per parameter: log-space conditional sd from the truncated curvature at p0."""
    l0 = lik.loglik(p0)
    out = {}
    for name in PARAM_ORDER:
        lp, lm = lik.loglik(moved(p0, name, h)), lik.loglik(moved(p0, name, -h))
        d2 = (lp - 2.0 * l0 + lm) / h**2
        ok = math.isfinite(d2) and d2 < 0
        sd = float(f"{1.0 / math.sqrt(-d2):.3g}") if ok else SD_FALLBACK  # 3 digits: stable key
        out[name] = {"sd_log": sd, "d2_log": d2, "fallback": not ok}
    return out


def sweep_points(p0: Params, sds: dict[str, dict]) -> list[tuple[str, Params]]:
    """[("p0", p0), ("mu0+", ...), ("mu0-", ...), ...]: p0 and +-3 sd along each parameter."""
    pts = [("p0", p0)]
    for name in PARAM_ORDER:
        for sign, s in (("+", 1.0), ("-", -1.0)):
            pts.append((name + sign, moved(p0, name, 3.0 * s * sds[name]["sd_log"])))
    return pts


def lengthscale_key(p: Params) -> tuple[float, float]:
    return (p.sigma_x, p.sigma_t)


# ---------------------------------------------------------------------------- cache
class Cache:
    """Exact (B, E), exact timings and sds as files under one directory (or nothing)."""

    def __init__(self, root: Path | None, stem: str) -> None:
        self.root, self.stem = root, stem
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def _path(self, kind: str, key: object, ext: str) -> Path | None:
        if self.root is None:
            return None
        h = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        return self.root / f"{self.stem}-{kind}-{h}.{ext}"

    def load_array(self, kind: str, key: object) -> np.ndarray | None:
        path = self._path(kind, key, "npz")
        if path is None or not path.exists():
            return None
        with np.load(path) as z:
            if str(z["key"]) != repr(key):
                return None
            return np.array(z["value"])

    def save_array(self, kind: str, key: object, value: np.ndarray) -> None:
        path = self._path(kind, key, "npz")
        if path is not None:
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, key=np.array(repr(key)), value=value)
            os.replace(tmp, path)

    def load_json(self, kind: str, key: object) -> dict | None:
        path = self._path(kind, key, "json")
        if path is None or not path.exists():
            return None
        doc = json.loads(path.read_text())
        return doc["value"] if doc.get("key") == repr(key) else None

    def save_json(self, kind: str, key: object, value: dict) -> None:
        path = self._path(kind, key, "json")
        if path is not None:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"key": repr(key), "value": value}, indent=1))
            os.replace(tmp, path)


def data_hash(data: EventData) -> str:
    h = hashlib.sha1()
    for a in (data.time, data.x, data.y, data.density):
        if a is not None:
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()[:12]


# ---------------------------------------------------------------------------- engines
def device_name(lik: Likelihood) -> str | None:
    b = lik.backend
    for obj in (b, getattr(b, "exact", None)):
        info = getattr(obj, "device_info", None) if obj is not None else None
        if info is not None:
            return getattr(info, "name", str(info))
    return None


def kappa_of(lik: Likelihood) -> float | None:
    k = getattr(lik.backend, "kappa", None)
    return None if k is None else float(k)


def timed_truncated(lik: Likelihood, repeats: int) -> dict:
    """First evaluation of a fresh likelihood, then the median of ``repeats`` cleared ones."""
    kappa_start = kappa_of(lik)
    t0 = time.perf_counter()
    ev = lik.evaluate(PARAMS)
    first = time.perf_counter() - t0
    tight_first = lik.tightenings
    secs = []
    for _ in range(repeats):
        lik.clear_cache()
        t0 = time.perf_counter()
        ev = lik.evaluate(PARAMS)
        secs.append(time.perf_counter() - t0)
    steady = statistics.median(secs) if secs else first
    return {
        "fast_seconds": steady,
        "fast_seconds_all": secs,
        "fast_first_seconds": first,
        "first_over_steady": first / steady,
        "kappa_start": kappa_start,
        "kappa": kappa_of(lik),
        "tightenings_first": tight_first,
        "tightenings": lik.tightenings,
        "path": lik.backend.path,
        "loglik_fast": ev.loglik,
        "error_bound": ev.error_bound,
        "relative_bound": ev.error_bound / abs(ev.loglik),
    }


#: Scale of the walk's proposals in conditional sds (2.4 / sqrt(d) with d = 2 is the
#: random-walk optimum for the two lengthscales of the sampler's expensive block).
WALK_SCALE = 1.7


def timed_walk(lik: Likelihood, sds: dict[str, dict], steps: int, seed: int = 1) -> dict:
    """Median seconds of a trigger pass along ``steps`` proposals of an MCMC chain near p0:
    sigma_x and sigma_t each times ``exp(WALK_SCALE sd_log z)``, z standard normal, around p0
    (as a chain after warm-up proposes them; every proposal is a new pass, and whatever the
    engine builds per lengthscale, such as a grid index, is paid here and not in fast s)."""
    rng = np.random.default_rng(seed)
    secs = []
    for _ in range(steps):
        p = PARAMS
        for name in ("sigma_x", "sigma_t"):
            p = moved(p, name, WALK_SCALE * sds[name]["sd_log"] * float(rng.standard_normal()))
        t0 = time.perf_counter()
        lik.evaluate(p)
        secs.append(time.perf_counter() - t0)
    return {"walk_seconds": statistics.median(secs), "walk_seconds_all": secs}


def truncated_sweep(lik: Likelihood, data: EventData, pts, max_sweeps: int = 3) -> dict:
    """Host log-likelihoods and realised bounds of the truncated engine at every point, all at
    one cut-off (the sweep is repeated if it tightened)."""
    T = lik.window_end
    p0 = pts[0][1]
    sweeps = 0
    while True:
        sweeps += 1
        tight0, kappa0 = lik.tightenings, kappa_of(lik)
        B0, E0 = lik.components(p0)
        ll, bounds = {}, {}
        for label, p in pts:
            ev = lik.evaluate(p)  # bound; B and E cached or cheap except at lengthscale points
            bounds[label] = ev.error_bound
            if label[:-1] in LENGTHSCALES or label == "p0":
                B, E = lik.components(p)
            elif label[:-1] == "tau_t":
                B, E = lik.components(p)[0], E0
            else:
                B, E = B0, E0
            ll[label] = host_loglik(p, B, E, data.time, T)
        if lik.tightenings == tight0 or sweeps == max_sweeps:
            break
        log.warning(
            "truncated cut-off tightened during the sweep (kappa %s -> %s); sweeping again",
            kappa0,
            kappa_of(lik),
        )
        lik.clear_cache()
    rel = check_host(ll["p0"], lik.loglik(p0), "truncated")
    return {"ll": ll, "bounds": bounds, "sweeps": sweeps, "host_check_rel": rel}


def exact_values(
    data: EventData, model: int, args, cache: Cache, pts, exact_allowed: bool, device: str | None
) -> dict | None:
    """Exact (float64-finished) host log-likelihoods at every point, from cache or computed
    (with the timing of the first full evaluation at p0); None when neither."""
    p0 = pts[0][1]
    taus = sorted({p.tau_t for _, p in pts})
    lscales = sorted({lengthscale_key(p) for _, p in pts})
    E = {k: cache.load_array("E", k) for k in lscales}
    B = {t: cache.load_array("B", t) for t in taus}
    timing = cache.load_json("timing", (*lengthscale_key(p0), p0.tau_t))
    if timing is not None and device is not None and timing.get("device") != device:
        timing = None  # timed on another device: time it again here
    missing_e = [k for k, v in E.items() if v is None]
    missing_b = [t for t, v in B.items() if v is None]
    need_full = timing is None or B[p0.tau_t] is None or E[lengthscale_key(p0)] is None
    computed = bool(missing_e or missing_b or need_full)
    host_rel = None
    if computed:
        if not exact_allowed and (missing_e or need_full):
            return None
        lik = make_likelihood(
            data,
            model=model,
            area=AREA,
            precision=args.precision,
            device=args.device,
            tolerance=0.0,
        )

        def exact_e(k: tuple[float, float]) -> None:
            t0 = time.perf_counter()
            E[k] = lik.components(dataclasses.replace(p0, sigma_x=k[0], sigma_t=k[1]))[1]
            cache.save_array("E", k, E[k])  # at once: a long run keeps what it has done
            log.warning("exact E at sigma_x, sigma_t = %s: %.1f s", k, time.perf_counter() - t0)

        if need_full or missing_e:
            # warm-up (first launches, lazily built kernels) on another missing point, or on p0
            others = [k for k in missing_e if k != lengthscale_key(p0)]
            if others:
                exact_e(others[0])
            else:
                lik.evaluate(p0)
            lik.clear_cache()
            t0 = time.perf_counter()
            ev = lik.evaluate(p0)
            secs = time.perf_counter() - t0
            timing = {
                "seconds": secs,
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "device": device_name(lik),
                "machine": platform.platform(),
                "loglik": ev.loglik,
            }
            E[lengthscale_key(p0)] = np.array(ev.E)
            B[p0.tau_t] = np.array(ev.B)
            cache.save_array("E", lengthscale_key(p0), E[lengthscale_key(p0)])
            cache.save_json("timing", (*lengthscale_key(p0), p0.tau_t), timing)
            host_rel = check_host(
                host_loglik(p0, ev.B, ev.E, data.time, lik.window_end), ev.loglik, "exact"
            )
        for k in lscales:
            if E[k] is None:
                exact_e(k)
        for t in taus:
            if B[t] is None:
                B[t] = np.asarray(lik.backend.background(t), dtype=np.float64)
        for t in taus:
            cache.save_array("B", t, B[t])
        del lik
    T = float(data.time[-1])  # the window end make_likelihood takes by default
    ll = {}
    for label, p in pts:
        ll[label] = host_loglik(p, B[p.tau_t], E[lengthscale_key(p)], data.time, T)
    return {
        "ll": ll,
        "cached": not computed,
        "timing": timing,
        "host_check_rel": host_rel,
    }


def diff_errors(fast: dict, exact: dict) -> dict:
    f, e = fast["ll"], exact["ll"]
    errs = {k: abs((f[k] - f["p0"]) - (e[k] - e["p0"])) for k in f if k != "p0"}
    worst = max(errs, key=errs.get)
    return {
        "diff_errors": errs,
        "max_diff_error": errs[worst],
        "worst_param": worst if errs[worst] > 0 else "-",
        "max_point_bound": max(fast["bounds"].values()),
    }


# ---------------------------------------------------------------------------- MCMC
def mcmc(events: Path, work: Path, tolerance: float, iterations: int, model: int) -> dict:
    cfg = {
        "data": {"events": str(events), "area": AREA},
        "model": {"kind": model},
        "sampler": {"kind": "block", "iterations": iterations, "warmup": 0, "seed": 1,
                    "initial": PARAMS.as_dict()},
        "chains": {"count": 1},
        "engine": {"backend": "opencl", "precision": "float32", "tolerance": tolerance},
        "output": {"run_dir": str(work / f"run-{tolerance}"), "commit_every": 1000},
    }  # fmt: skip
    path = work / f"mcmc-{tolerance}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = run_chain(load_config(path), 0)
    return {
        "tolerance": tolerance,
        "iterations": iterations,
        "loop_seconds": out.loop_seconds,
        "iterations_per_second": iterations / out.loop_seconds,
    }


# ---------------------------------------------------------------------------- output
def git_state() -> dict:
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=HERE.parent, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


def fmt(value, spec: str, width: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return f"{'-':>{width}}"
    return f"{value:{width}{spec}}"


def table(rows: list[dict], mc: list[dict]) -> str:
    lines = [
        f"{'N':>8} {'model':>5} {'tol':>8} {'exact s':>8} {'fast s':>7} {'speed-up':>8} "
        f"{'walk s':>7} {'first s':>7} {'1st/st':>6} {'kappa':>6} {'tight':>5} {'bound':>8} "
        f"{'|error|':>8} {'max|dErr|':>9} {'worst':>8} {'pt bound':>8}  exact / notes",
    ]
    for r in rows:
        notes = [r.get("exact_timing", "-")]
        if r.get("sd_fallback"):
            notes.append("sd fallback: " + ",".join(r["sd_fallback"]))
        if r.get("sweeps", 1) > 1:
            notes.append(f"{r['sweeps']} sweeps")
        lines.append(
            f"{r['n']:>8} {r['model']:>5} {r['tolerance']:>8.3g} "
            f"{fmt(r.get('exact_seconds'), '.4g', 8)} {r['fast_seconds']:7.3g} "
            f"{fmt(r.get('speedup'), '.1f', 8)} {fmt(r.get('walk_seconds'), '.3g', 7)} "
            f"{r['fast_first_seconds']:7.3g} "
            f"{r['first_over_steady']:6.2f} {fmt(r['kappa'], '.2f', 6)} {r['tightenings']:>5} "
            f"{r['error_bound']:8.2e} {fmt(r.get('measured_error'), '.2e', 8)} "
            f"{fmt(r.get('max_diff_error'), '.2e', 9)} {r.get('worst_param', '-'):>8} "
            f"{fmt(r.get('max_point_bound'), '.2e', 8)}  {'; '.join(notes)}"
        )
    for m in mc:
        lines.append(
            f"MCMC N={m['n']} model {m['model']} block sampler, tolerance {m['tolerance']:g}: "
            f"{m['iterations_per_second']:.3f} it/s ({m['iterations']} iterations)"
        )
    return "\n".join(lines)


COLUMNS = {
    "N": "events",
    "model": "1 or 2",
    "tol": "engine.tolerance passed to make_likelihood",
    "exact s": "seconds of one full evaluation of the exact kernel (tolerance 0) at p0",
    "fast s": "median seconds of a full truncated evaluation (caches cleared)",
    "speed-up": "exact s / fast s",
    "walk s": "median seconds of a truncated evaluation at each of --walk-steps proposals of the "
    "lengthscales around p0 (1.7 conditional sds; timed_walk)",
    "first s": "seconds of the first evaluation of a fresh truncated likelihood",
    "1st/st": "first s / fast s",
    "kappa": "cut-off exponent after the timed evaluations (lik.backend.kappa)",
    "tight": "lik.tightenings after the timed evaluations",
    "bound": "realised error bound at p0 (Evaluation.error_bound, nats)",
    "|error|": "|l~(p0) - l(p0)|, nats (float32 rounding of both engines included)",
    "max|dErr|": "max over the 10 points p0 +- 3 sd of |(l~(p)-l~(p0)) - (l(p)-l(p0))|, nats",
    "worst": "the point giving max|dErr| (parameter and sign)",
    "pt bound": "largest realised bound over the 11 points, nats",
}


# ---------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--models", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="engine.tolerance of the truncated engine (default %(default)g)",
    )
    ap.add_argument(
        "--tolerances",
        type=float,
        nargs="+",
        default=None,
        help="several tolerances, one row each, against the same exact values",
    )
    ap.add_argument("--precision", default="float32", choices=["float32", "float64"])
    ap.add_argument("--device", default=None, help="OpenCL device spec (default: the default)")
    ap.add_argument("--seed", type=int, default=0, help="data seed of bench_loglik.make_data")
    ap.add_argument(
        "--data",
        choices=["cities", "counties"],
        default="cities",
        help="cities: bench_loglik.make_data (the issue-14 table); counties: make_county_data\n"
        "(population-weighted events on the real counties)",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--large-repeats",
        type=int,
        default=1,
        help="timed evaluations above N = 200,000 (after the first one)",
    )
    ap.add_argument(
        "--walk-steps",
        type=int,
        default=8,
        help="proposals of the lengthscales timed after the steady evaluations (walk s)",
    )
    ap.add_argument(
        "--exact-max",
        type=int,
        default=1_000_000,
        help="largest N whose exact values are computed (cached ones always used)",
    )
    ap.add_argument(
        "--fd-step",
        type=float,
        default=0.02,
        help="log-space step of the curvature's central differences",
    )
    ap.add_argument(
        "--sweep-cutoff",
        choices=["adapt", "fixed"],
        default="adapt",
        help="adapt: the cut-off may tighten during the sweep (as in warm-up; the sweep is then\n"
        "repeated so every point shares one kappa); fixed: lik.adapt_cutoff = False after\n"
        "the timed evaluations at p0 (as after warm-up: bounds above the tolerance are\n"
        "counted, not tightened)",
    )
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hawkes-bench")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--mcmc-n", type=int, default=0, help="MCMC events (0: skip the MCMC part)")
    ap.add_argument(
        "--mcmc-iterations", type=int, nargs=2, default=[3, 30], metavar=("EXACT", "TRUNCATED")
    )
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fast.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # ascending: the curvature (sd) comes from the first, i.e. most accurate, tolerance
    tolerances = sorted(args.tolerances or [args.tolerance])

    rows = []
    device = None
    exact_ref: dict[int, tuple[int, float]] = {}
    for n in args.sizes:
        if args.data == "counties":
            data = make_county_data(n, seed=args.seed)
        else:
            data = make_data(n, "days", seed=args.seed)
        dhash = data_hash(data)
        for model in args.models:
            # the exact kernel's fingerprint too: its values and timings change with it
            kfp = kernels.kernel_fingerprint([(args.precision, False)])[:10]
            stem = f"n{n}-m{model}-{args.precision}-d{dhash}-k{kfp}"
            cache = Cache(None if args.no_cache else args.cache.expanduser(), stem)
            sd_key = ("sd", PARAMS.as_dict(), args.fd_step)
            sds = cache.load_json("sd", sd_key)
            sd_cached = sds is not None
            exact = None

            def fresh(tol: float, data: EventData = data, model: int = model) -> Likelihood:
                return make_likelihood(
                    data,
                    model=model,
                    area=AREA,
                    precision=args.precision,
                    device=args.device,
                    tolerance=tol,
                )

            for tol in tolerances:
                if sds is None:
                    # on a likelihood of its own, so that the timed one and its cut-off do not
                    # depend on whether the sds were cached
                    t0 = time.perf_counter()
                    sds = conditional_sds(fresh(tol), PARAMS, args.fd_step)
                    sds["from_tolerance"] = tol
                    log.warning("curvature: %.1f s", time.perf_counter() - t0)
                    cache.save_json("sd", sd_key, sds)
                lik = fresh(tol)
                device = device or device_name(lik)
                reps = args.repeats if n <= 200_000 else args.large_repeats
                row = {"n": n, "model": model, "precision": args.precision, "tolerance": tol}
                row["data"] = args.data
                row |= timed_truncated(lik, reps)
                row |= timed_walk(lik, sds, args.walk_steps)
                sd_tol = sds.get("from_tolerance")
                pts = sweep_points(PARAMS, sds)
                if args.sweep_cutoff == "fixed" and hasattr(lik, "adapt_cutoff"):
                    lik.adapt_cutoff = False
                fast = truncated_sweep(lik, data, pts)
                row |= {
                    "sd_log": {k: sds[k]["sd_log"] for k in PARAM_ORDER},
                    "sd_cached": sd_cached,
                    "sd_from_tolerance": sd_tol,
                    "sd_fallback": [k for k in PARAM_ORDER if sds[k]["fallback"]],
                    "curvature_log": {k: sds[k]["d2_log"] for k in PARAM_ORDER},
                    "points": {lab: p.as_dict() for lab, p in pts},
                    "loglik_fast_points": fast["ll"],
                    "bounds_points": fast["bounds"],
                    "sweeps": fast["sweeps"],
                    "kappa_after_sweep": kappa_of(lik),
                    "tightenings_after_sweep": lik.tightenings,
                    "sweep_cutoff": args.sweep_cutoff,
                    "adapt_cutoff": getattr(lik, "adapt_cutoff", None),
                    "bound_exceedances": getattr(lik, "bound_exceedances", None),
                    "host_check_rel_fast": fast["host_check_rel"],
                }
                del lik
                if exact is None:
                    exact = exact_values(data, model, args, cache, pts, n <= args.exact_max, device)
                if exact is not None:
                    tm = exact["timing"]
                    exact_ref[model] = (n, tm["seconds"])
                    row |= {
                        "exact_seconds": tm["seconds"],
                        "exact_timing": (
                            f"cached ({tm['date'][:10]})"
                            if exact["cached"]
                            else "measured (one evaluation)"
                        ),
                        "exact_cached": exact["cached"],
                        "exact_timing_detail": tm,
                        "loglik_exact": exact["ll"]["p0"],
                        "loglik_exact_points": exact["ll"],
                        "host_check_rel_exact": exact["host_check_rel"],
                        "measured_error": abs(fast["ll"]["p0"] - exact["ll"]["p0"]),
                    }
                    row |= diff_errors(fast, exact)
                elif model in exact_ref:
                    n0, s0 = exact_ref[model]
                    row |= {
                        "exact_seconds": s0 * (n / n0) ** 2,
                        "exact_timing": f"scaled (N/{n0})^2 from the measured N = {n0}",
                    }
                if "exact_seconds" in row:
                    row["speedup"] = row["exact_seconds"] / row["fast_seconds"]
                rows.append(row)
                log.warning(
                    "N=%d model %d tol %g: fast %.3f s, speed-up %s, max diff error %s (%s)",
                    n,
                    model,
                    tol,
                    row["fast_seconds"],
                    row.get("speedup"),
                    row.get("max_diff_error"),
                    row.get("worst_param"),
                )

    mc = []
    if args.mcmc_n:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            events = work / "events.h5"
            save_events(make_data(args.mcmc_n, "days"), events)
            for tol, its in (
                (0.0, args.mcmc_iterations[0]),
                (args.tolerance, args.mcmc_iterations[1]),
            ):
                mc.append({"n": args.mcmc_n, "model": 1} | mcmc(events, work, tol, its, 1))
                log.warning("%s", mc[-1])

    text = table(rows, mc)
    print(text)
    result = {
        "benchmark": "fast likelihood: exact vs truncated, errors in differences (issue 14)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "opencl_device": device,
        "git": git_state(),
        "tolerance": args.tolerance,
        "tolerances": tolerances,
        "precision": args.precision,
        "data_seed": args.seed,
        "params": PARAMS.as_dict(),
        "area": AREA,
        "fd_step_log": args.fd_step,
        "sweep_cutoff": args.sweep_cutoff,
        "sd_fallback_log": SD_FALLBACK,
        "columns": COLUMNS,
        "rows": rows,
        "mcmc": mc,
        "note": "Log-likelihoods at the points are finished on the host in float64 from each "
        "engine's (B, E) (both computed in --precision); measured_error and the difference "
        "errors include the working-precision rounding of both engines; error_bound is the "
        "rigorous bound on truncation alone. Points: theta_j * exp(+-3 sd_j), sd_j the log-space "
        "conditional sd from the truncated curvature at p0 (flat prior).",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    args.out.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
