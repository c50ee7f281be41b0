"""Fast chain starts: find the posterior mode, its curvature, and over-dispersed chain starts.

Pure over callables (no engine, file or MPI): every function takes ``log_post(theta) -> float``
(log posterior on the log-parameter scale, ``-inf``/``nan`` outside the support) and optionally
a cheaper ``subsample_log_post`` with the same meaning on a subsample of the events. For the
subsample's curvature to stand in for the full one, scale its log-likelihood by ``N / n`` (the
events it drops) before adding the log prior.

:func:`find_start` does, in order:

1. **Search** from ``theta0`` and from each of ``tau_starts`` (``theta0`` with coordinate
   ``tau_index`` replaced; log-spaced over the data span is the intended use): Nelder-Mead on
   the subsample log posterior when one is given, else on the full one, each start capped at
   ``max_search_evals`` evaluations.
2. **Merge** the optima closer than ``mode_tol`` (largest coordinate difference), evaluate each
   distinct one on the full log posterior (one call each) and keep the best; all are recorded
   in :attr:`StartResult.modes` (for the tiered sampler's ``jump_vectors``).
2b. **Cheap polish** (after a subsample search, with ``cheap`` coordinates given): Nelder-Mead
   over the best mode's cheap coordinates on the full log posterior, the others held. A
   subsample thins the trigger's sources too, which biases the search's ``xi0`` (and with it
   ``mu0`` and ``tau_t``); on the full data these coordinates cost no trigger pass, so the
   bias goes for a few hundred O(N) evaluations before the curvature is taken.
3. **Curvature and polish**: a central finite-difference Hessian and gradient on the full log
   posterior (``1 + 2 d k + 2 d (d - 1)`` calls, ``k`` the step-sizing rounds, usually 1 when a
   subsample Hessian has sized the steps), each step chosen so that the log posterior drops by
   about ``fd_drop`` nats (robust to the truncated engine's bounded error, at most
   ``engine.tolerance`` nats, and scale-free),
   then Newton steps ``theta + C g`` with ``C = (-H)^-1`` and backtracking; the Hessian is
   recomputed when a step moved more than one posterior sd.
4. **Regularise**: eigenvalues of ``-H`` are raised to at least ``1 / max_sd^2`` so ``C`` is
   positive definite with no posterior sd above ``max_sd`` (a flat or saddle direction gets a
   wide but finite proposal scale); the number raised is recorded.

:func:`overdispersed_starts` then draws chain starts from a multivariate t around the mode,
scaled wider than the curvature, so that between-chain R-hat keeps its meaning.

The full log posterior is called at most ``max_full_evals`` times (searching without a
subsample included); when the budget runs out the best point so far is returned with the
subsample's curvature (or ``diag(max_sd^2)`` without one), as recorded in
:attr:`StartResult.hessian`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

log = logging.getLogger(__name__)

__all__ = ["Mode", "StartResult", "find_start", "overdispersed_starts"]

LogPost = Callable[[np.ndarray], float]
"""``theta`` (shape ``(d,)``, log scale) -> log posterior (``-inf``/``nan`` outside)."""

_BAD = 1e300
"""What the minimiser sees for a non-finite log posterior."""

START_SCHEMA = 1
"""Version of the :meth:`StartResult.to_json` layout."""


class _BudgetExceeded(Exception):
    """The evaluation budget of one objective is spent."""


class _Counted:
    """A log posterior with an evaluation counter, an optional cap, and the best point seen."""

    def __init__(self, f: LogPost, limit: int | None) -> None:
        self.f = f
        self.limit = limit
        self.n = 0
        self.best_x: np.ndarray | None = None
        self.best_f = -math.inf

    def left(self) -> int:
        return math.inf if self.limit is None else self.limit - self.n  # type: ignore[return-value]

    def __call__(self, x: np.ndarray) -> float:
        if self.limit is not None and self.n >= self.limit:
            raise _BudgetExceeded
        self.n += 1
        value = float(self.f(np.array(x, dtype=float)))
        if not math.isfinite(value):
            return -math.inf
        if value > self.best_f:
            self.best_f, self.best_x = value, np.array(x, dtype=float)
        return value


@dataclass(frozen=True)
class Mode:
    """A local maximum found by the search.

    Parameters
    ----------
    theta
        Its location (log scale).
    log_post
        Full log posterior there (``nan`` if the budget left it unevaluated).
    log_post_sub
        Subsample log posterior there (``nan`` without a subsample).
    start
        The search start that reached it.
    converged
        Whether the search met its tolerance (not its evaluation cap) there.
    """

    theta: tuple[float, ...]
    log_post: float
    log_post_sub: float
    start: tuple[float, ...]
    converged: bool = True

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types (``nan`` written as ``None``)."""
        return {
            "theta": list(self.theta),
            "log_post": _num_out(self.log_post),
            "log_post_sub": _num_out(self.log_post_sub),
            "start": list(self.start),
            "converged": self.converged,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Mode:
        """Inverse of :meth:`to_json`."""
        return cls(
            theta=tuple(float(x) for x in d["theta"]),
            log_post=_num_in(d["log_post"]),
            log_post_sub=_num_in(d["log_post_sub"]),
            start=tuple(float(x) for x in d["start"]),
            converged=bool(d["converged"]),
        )


def _num_out(x: float) -> float | None:
    return None if math.isnan(x) else x


def _num_in(x: Any) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class StartResult:
    """Where :func:`find_start` ended and what it cost.

    Parameters
    ----------
    theta
        The best mode found (log scale).
    log_post
        Full log posterior at ``theta``.
    cov
        Posterior covariance estimate ``(-H)^-1`` at ``theta`` (regularised), row by row;
        :attr:`cov_matrix` as an array. Give it to ``TieredSampler.init(..., cov=...)``.
    hessian
        Where the curvature came from: ``"full"``, ``"subsample"`` (the full budget ran out)
        or ``"none"`` (``diag(max_sd^2)``).
    n_clipped
        Eigenvalues of ``-H`` raised to ``1 / max_sd^2`` (0 at a clean maximum).
    n_sub_evals, n_full_evals
        Subsample and full log posterior evaluations made.
    n_cheap_evals
        Full evaluations of the cheap-coordinate polish (no trigger pass each; 0 without one).
    seconds
        Wall time of :func:`find_start`.
    modes
        Every distinct optimum found, best first (``modes[0].theta`` is ``theta`` before the
        Newton polish).
    """

    theta: tuple[float, ...]
    log_post: float
    cov: tuple[tuple[float, ...], ...]
    hessian: str
    n_clipped: int
    n_sub_evals: int
    n_full_evals: int
    seconds: float
    modes: tuple[Mode, ...]
    n_cheap_evals: int = 0

    @property
    def cov_matrix(self) -> np.ndarray:
        """:attr:`cov` as a ``(d, d)`` array."""
        return np.array(self.cov, dtype=float)

    @property
    def dim(self) -> int:
        """Number of coordinates ``d``."""
        return len(self.theta)

    def jump_vectors(self, within: float = 50.0) -> list[tuple[float, ...]]:
        """Differences ``mode - theta`` to the other converged modes at most ``within`` nats worse.

        Meant for ``TieredSampler(jump_vectors=...)``: a jump by one of them lands on another
        mode (only the cheap coordinates are used there).
        """
        out = []
        for m in self.modes[1:]:
            if m.converged and math.isfinite(m.log_post) and m.log_post >= self.log_post - within:
                out.append(tuple((np.array(m.theta) - np.array(self.theta)).tolist()))
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only; floats round-trip exactly (``nan`` written as ``None``)."""
        return {
            "schema": START_SCHEMA,
            "theta": list(self.theta),
            "log_post": self.log_post,
            "cov": [list(row) for row in self.cov],
            "hessian": self.hessian,
            "n_clipped": self.n_clipped,
            "n_sub_evals": self.n_sub_evals,
            "n_full_evals": self.n_full_evals,
            "n_cheap_evals": self.n_cheap_evals,
            "seconds": self.seconds,
            "modes": [m.to_json() for m in self.modes],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StartResult:
        """Inverse of :meth:`to_json`.

        Raises
        ------
        ValueError
            Wrong schema or malformed values.
        """
        if d.get("schema") != START_SCHEMA:
            raise ValueError(f"start result schema {d.get('schema')!r} is not {START_SCHEMA}")
        try:
            return cls(
                theta=tuple(float(x) for x in d["theta"]),
                log_post=float(d["log_post"]),
                cov=tuple(tuple(float(x) for x in row) for row in d["cov"]),
                hessian=str(d["hessian"]),
                n_clipped=int(d["n_clipped"]),
                n_sub_evals=int(d["n_sub_evals"]),
                n_full_evals=int(d["n_full_evals"]),
                n_cheap_evals=int(d.get("n_cheap_evals", 0)),  # absent before it existed
                seconds=float(d["seconds"]),
                modes=tuple(Mode.from_json(m) for m in d["modes"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"start result is malformed: {exc}") from exc


# ---------------------------------------------------------------------------- search


def _search(
    f: _Counted, x0: np.ndarray, f0: float, step: float, max_evals: int
) -> tuple[np.ndarray, float, bool]:
    """Nelder-Mead maximisation of ``f`` from ``x0`` (value ``f0``), at most ``max_evals`` calls.

    Returns the best point seen, its value, and whether the search met its tolerance.
    """
    d = len(x0)
    limit = min(max_evals, f.left())
    start_n = f.n
    best: list[Any] = [x0, f0]
    if limit < d + 1:
        return x0, f0, False

    def neg(x: np.ndarray) -> float:
        if f.n - start_n >= limit:
            raise _BudgetExceeded
        value = f(x)
        if value > best[1]:
            best[0], best[1] = np.array(x, dtype=float), value
        return -value if math.isfinite(value) else _BAD

    simplex = np.vstack([x0, x0 + step * np.eye(d)])
    converged = False
    with contextlib.suppress(_BudgetExceeded):
        res = optimize.minimize(
            neg,
            x0,
            method="Nelder-Mead",
            options={
                "initial_simplex": simplex,
                "maxfev": limit,
                "xatol": 1e-2,
                "fatol": 1e-2,
                "adaptive": d > 2,
            },
        )
        converged = bool(res.success)
    return np.asarray(best[0], dtype=float), float(best[1]), converged


def _polish_cheap(
    log_post: LogPost,
    x0: np.ndarray,
    f0: float,
    cheap: Sequence[int],
    step: float,
    max_evals: int,
) -> tuple[np.ndarray, float, int]:
    """Nelder-Mead over the coordinates ``cheap`` of ``log_post`` from ``x0``, the others held.

    Returns the best point (full vector), its value, and the calls made.
    """
    idx = np.asarray(sorted(set(int(i) for i in cheap)), dtype=int)
    if idx.size == 0 or np.any((idx < 0) | (idx >= len(x0))):
        raise ValueError(f"cheap coordinates must be in 0..{len(x0) - 1}, got {list(cheap)!r}")

    def embed(z: np.ndarray) -> np.ndarray:
        x = np.array(x0, dtype=float)
        x[idx] = z
        return x

    f = _Counted(lambda z: log_post(embed(z)), max_evals)
    z, fz, _ = _search(f, x0[idx], f0, step, max_evals)
    if fz > f0:
        log.info("start: the cheap coordinates on the full data gained %.4g nats", fz - f0)
        return embed(z), fz, f.n
    return np.array(x0, dtype=float), f0, f.n


# ---------------------------------------------------------------------------- curvature


def _fd_curvature(
    f: _Counted, x: np.ndarray, f0: float, h0: np.ndarray, drop: float, max_sd: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Central-difference gradient and Hessian of ``f`` at ``x`` (value ``f0``).

    Each coordinate's step is resized (at most 4 rounds) until the mean drop
    ``f0 - (f(x+h) + f(x-h)) / 2`` is within a factor 4 of ``drop``. Non-finite cross terms
    are set to 0. Raises :class:`_BudgetExceeded` when ``f``'s budget runs out.

    Returns
    -------
    grad, hess, h
    """
    d = len(x)
    h = np.clip(np.asarray(h0, dtype=float), 1e-8, max_sd)
    fp = np.empty(d)
    fm = np.empty(d)
    eye = np.eye(d)
    for i in range(d):
        for _ in range(4):
            fp[i] = f(x + h[i] * eye[i])
            fm[i] = f(x - h[i] * eye[i])
            if not (math.isfinite(fp[i]) and math.isfinite(fm[i])):
                h[i] /= 4.0
                continue
            fall = f0 - 0.5 * (fp[i] + fm[i])
            if fall <= 0:
                if h[i] >= max_sd:
                    break
                h[i] = min(h[i] * 4.0, max_sd)
                continue
            ratio = drop / fall
            if 0.25 <= ratio <= 4.0:
                break
            h[i] = min(h[i] * min(max(math.sqrt(ratio), 1 / 8), 8.0), max_sd)
    hess = np.zeros((d, d))
    grad = np.zeros(d)
    for i in range(d):
        if math.isfinite(fp[i]) and math.isfinite(fm[i]):
            hess[i, i] = (fp[i] + fm[i] - 2.0 * f0) / h[i] ** 2
            grad[i] = (fp[i] - fm[i]) / (2.0 * h[i])
    for i in range(d):
        for j in range(i + 1, d):
            ei, ej = h[i] * eye[i], h[j] * eye[j]
            vals = [f(x + ei + ej), f(x + ei - ej), f(x - ei + ej), f(x - ei - ej)]
            if all(math.isfinite(v) for v in vals):
                hess[i, j] = hess[j, i] = (vals[0] - vals[1] - vals[2] + vals[3]) / (
                    4.0 * h[i] * h[j]
                )
    return grad, hess, h


def _regularised_cov(hess: np.ndarray, max_sd: float) -> tuple[np.ndarray, np.ndarray, int]:
    """``(C, P, n)``: covariance ``C = P^-1`` with ``P = -H`` whose eigenvalues are raised to
    at least ``1 / max_sd^2``; ``n`` = how many were raised."""
    prec = -0.5 * (hess + hess.T)
    vals, vecs = np.linalg.eigh(prec)
    floor = 1.0 / max_sd**2
    clipped = int(np.sum(vals < floor))
    vals = np.maximum(vals, floor)
    cov = (vecs / vals) @ vecs.T
    prec = (vecs * vals) @ vecs.T
    return 0.5 * (cov + cov.T), 0.5 * (prec + prec.T), clipped


# ---------------------------------------------------------------------------- driver


def find_start(
    log_post: LogPost,
    theta0: Sequence[float],
    *,
    subsample_log_post: LogPost | None = None,
    tau_index: int | None = 1,
    tau_starts: Sequence[float] = (),
    max_full_evals: int = 200,
    max_search_evals: int = 600,
    search_step: float = 0.5,
    mode_tol: float = 0.05,
    fd_drop: float = 1.0,
    max_sd: float = 2.0,
    polish_rounds: int = 3,
    cheap: Sequence[int] = (),
    max_cheap_evals: int = 300,
) -> StartResult:
    """Find the best posterior mode, its curvature, and the modes on the way.

    Parameters
    ----------
    log_post
        Full log posterior (log scale).
    theta0
        Default start (log scale), length ``d``.
    subsample_log_post
        Cheaper stand-in for the search (log-likelihood scaled to the full data, see the
        module notes); ``None`` searches on ``log_post``.
    tau_index
        Coordinate that ``tau_starts`` replace (``tau_t``).
    tau_starts
        Values (log scale) of coordinate ``tau_index`` to search from besides ``theta0``.
    max_full_evals
        Cap on ``log_post`` calls.
    max_search_evals
        Cap on calls per search start (subsample, or full without one).
    search_step
        Edge of the initial Nelder-Mead simplex (log scale).
    mode_tol
        Optima whose coordinates all differ by less than this are one mode.
    fd_drop
        Target drop (nats) of the log posterior over a finite-difference step.
    max_sd
        Largest posterior sd (log scale) the covariance may claim; also the largest step.
    polish_rounds
        Newton steps (each recomputing the Hessian if it moved more than one sd).
    cheap
        Coordinates whose change costs the full posterior no trigger pass (``mu0``, ``xi0``,
        and ``tau_t`` on a day lattice). After a subsample search, the best mode's cheap
        coordinates are re-optimised on the full posterior, the others held (step 2b).
    max_cheap_evals
        Cap on the full posterior calls of that polish (counted apart from
        ``max_full_evals``, in :attr:`StartResult.n_cheap_evals`).

    Returns
    -------
    StartResult

    Raises
    ------
    ValueError
        Bad settings, or no finite log posterior at any start.
    """
    t_start = time.perf_counter()
    x0 = np.asarray(theta0, dtype=float).reshape(-1)
    d = len(x0)
    if d == 0 or not np.all(np.isfinite(x0)):
        raise ValueError(f"theta0 must be a non-empty finite vector, got {theta0!r}")
    if len(tau_starts) and (tau_index is None or not 0 <= tau_index < d):
        raise ValueError(f"tau_starts need a tau_index in 0..{d - 1}, got {tau_index!r}")
    if int(max_full_evals) != max_full_evals or max_full_evals < 1:
        raise ValueError(f"max_full_evals must be a positive integer, got {max_full_evals!r}")
    for name, value in (
        ("search_step", search_step),
        ("mode_tol", mode_tol),
        ("fd_drop", fd_drop),
        ("max_sd", max_sd),
    ):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and > 0, got {value!r}")

    full = _Counted(log_post, int(max_full_evals))
    sub = None if subsample_log_post is None else _Counted(subsample_log_post, None)
    search_f = sub if sub is not None else full

    starts = [x0]
    for t in tau_starts:
        s = x0.copy()
        s[tau_index] = float(t)  # type: ignore[index]
        starts.append(s)
    per_start = int(max_search_evals)
    if sub is None:  # keep enough full evaluations for one Hessian and a Newton step
        reserve = 1 + 4 * d + 2 * d * (d - 1) + 4
        per_start = min(per_start, max(int(max_full_evals) - reserve, 0) // len(starts))

    # 1. search from every start
    found: list[tuple[np.ndarray, float, np.ndarray, bool]] = []
    for s in starts:
        try:
            f_s = search_f(s)
        except _BudgetExceeded:
            break
        if not math.isfinite(f_s):
            log.info("start: skipping a start with a non-finite log posterior: %s", s)
            continue
        x, fx, ok = _search(search_f, s, f_s, search_step, per_start)
        if math.isfinite(fx):
            found.append((x, fx, s, ok))
        log.debug("start: search from %s reached %s (%.6g)", s.round(3), x.round(3), fx)
    if not found:
        raise ValueError("find_start: the log posterior is not finite at any start")

    # 2. merge and rank on the full posterior
    found.sort(key=lambda r: -r[1])
    distinct: list[tuple[np.ndarray, float, np.ndarray, bool]] = []
    for x, fx, s, ok in found:
        if all(np.max(np.abs(x - y[0])) >= mode_tol for y in distinct):
            distinct.append((x, fx, s, ok))
    modes = []
    for x, fx, s, ok in distinct:
        if sub is None:
            full_value = fx
        else:
            try:
                full_value = full(x)
            except _BudgetExceeded:
                full_value = math.nan
        modes.append(
            Mode(
                theta=tuple(x.tolist()),
                log_post=full_value,
                log_post_sub=fx if sub is not None else math.nan,
                start=tuple(s.tolist()),
                converged=ok,
            )
        )
    modes.sort(key=lambda m: -m.log_post if math.isfinite(m.log_post) else math.inf)
    best = np.array(modes[0].theta)
    f_best = modes[0].log_post
    if not math.isfinite(f_best):
        raise ValueError("find_start: the full log posterior is not finite at any mode found")

    # 2b. the subsample's bias in the cheap coordinates, removed on the full data for free
    n_cheap = 0
    if sub is not None and len(cheap):
        best, f_best, n_cheap = _polish_cheap(
            log_post, best, f_best, cheap, search_step, int(max_cheap_evals)
        )

    # 3. curvature: size the steps on the subsample, then Hessian and Newton on the full
    h = np.full(d, 0.1)
    cov = np.eye(d) * max_sd**2
    source, clipped = "none", 0
    if sub is not None:
        f_sub = sub(best)
        if math.isfinite(f_sub):
            _, hess_sub, h = _fd_curvature(sub, best, f_sub, h, fd_drop, max_sd)
            cov, _, clipped = _regularised_cov(hess_sub, max_sd)
            source = "subsample"
    try:
        for _ in range(max(int(polish_rounds), 1)):
            grad, hess, h = _fd_curvature(full, best, f_best, h, fd_drop, max_sd)
            cov, prec, clipped = _regularised_cov(hess, max_sd)
            source = "full"
            step = cov @ grad
            moved = False
            for _ in range(4):
                x1 = best + step
                f1 = full(x1)
                if math.isfinite(f1) and f1 > f_best:
                    best, f_best, moved = x1, f1, True
                    break
                step = step / 2.0
            if not moved or float(step @ prec @ step) <= 1.0:
                break
    except _BudgetExceeded:
        log.warning(
            "start: the budget of %d full evaluations ran out; curvature from %s",
            max_full_evals,
            source,
        )
    if full.best_f > f_best and full.best_x is not None:  # a probe beat the polish
        best, f_best = full.best_x, full.best_f

    result = StartResult(
        theta=tuple(best.tolist()),
        log_post=float(f_best),
        cov=tuple(tuple(row) for row in cov.tolist()),
        hessian=source,
        n_clipped=clipped,
        n_sub_evals=0 if sub is None else sub.n,
        n_full_evals=full.n,
        n_cheap_evals=n_cheap,
        seconds=time.perf_counter() - t_start,
        modes=tuple(modes),
    )
    log.info(
        "start: mode %s, log posterior %.6g, %d mode(s), %d full (+ %d cheap) + %d subsample "
        "evaluations, %.1f s",
        np.round(best, 4).tolist(),
        f_best,
        len(modes),
        result.n_full_evals,
        result.n_cheap_evals,
        result.n_sub_evals,
        result.seconds,
    )
    return result


def overdispersed_starts(
    result: StartResult,
    n_chains: int,
    rng: np.random.Generator,
    *,
    scale: float = 2.0,
    df: float = 4.0,
) -> np.ndarray:
    """Chain starts from a multivariate t around the mode, wider than the posterior.

    ``theta + scale * L z / sqrt(w / df)`` with ``L L^T = cov``, ``z ~ N(0, I)``,
    ``w ~ chi2(df)``: every direction is ``scale`` times as wide as the curvature says, with
    heavier tails, so chains start over-dispersed and R-hat can detect non-convergence.

    Parameters
    ----------
    result
        From :func:`find_start`.
    n_chains
        Number of starts.
    rng
        Source of randomness (draws ``n_chains * d`` normals, then ``n_chains`` chi-squares).
    scale
        Width relative to the posterior (> 0).
    df
        Degrees of freedom of the t (> 0; ``inf`` gives a normal).

    Returns
    -------
    numpy.ndarray
        Shape ``(n_chains, d)``, log scale.
    """
    if int(n_chains) != n_chains or n_chains < 1:
        raise ValueError(f"n_chains must be a positive integer, got {n_chains!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    chol = np.linalg.cholesky(result.cov_matrix)
    z = rng.standard_normal((int(n_chains), result.dim))
    w = np.ones(int(n_chains)) if math.isinf(df) else rng.chisquare(df, int(n_chains)) / df
    return np.asarray(result.theta) + scale * (z @ chol.T) / np.sqrt(w)[:, None]
