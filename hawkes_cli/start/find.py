"""Fast chain starts: find the posterior mode, its curvature, and over-dispersed chain starts.

Pure over callables (no engine, file or MPI): every function takes ``log_post(theta) -> float``
(log posterior on the log-parameter scale, ``-inf``/``nan`` outside the support) and optionally
a cheaper ``subsample_log_post`` with the same meaning on a subsample of the events. For the
subsample's curvature to stand in for the full one, scale its log-likelihood by ``N / n`` (the
events it drops) before adding the log prior.

:func:`find_start` does, in order:

Tuning knobs (evaluation budgets, step sizes, tolerances) are one :class:`SearchSettings`.

1. **Search** from ``theta0`` and from each of ``tau_starts`` (``theta0`` with coordinate
   ``tau_index`` replaced; log-spaced over the data span is the intended use): Nelder-Mead on
   the subsample log posterior when one is given, else on the full one, each start capped at
   ``max_search_evals`` evaluations.
2. **Merge** the optima closer than ``mode_tol`` (largest coordinate difference), evaluate each
   distinct one on the full log posterior (one call each) and keep the best; all are recorded
   in :attr:`StartResult.modes` (for the tiered sampler's ``jump_modes``).
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
3b. **Block polish** (after a subsample search, with ``cheap`` coordinates given): Newton
   steps on the other, expensive block alone (a 2-d finite-difference Hessian, ``1 + 4 + 4``
   calls), each followed by the cheap polish, until a step is within one posterior sd. The
   5-d Newton steps of 3 can stop far from the mode in the expensive block (at 1,000,000
   events they stopped 94 posterior sds off, ``sigma_t`` at 72 days for 97), and a chain's
   warm-up that starts there learns its proposal shape from the transient. When the block
   moved by more than one sd, 3 runs again at the new point (its Hessian becomes the
   covariance).
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

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .curvature import fd_curvature, regularised_cov
from .result import Mode, StartResult
from .search import BudgetExceeded, Counted, LogPost, nelder_mead, polish_cheap

log = logging.getLogger(__name__)

__all__ = ["SearchSettings", "find_start", "overdispersed_starts"]

_Found = tuple[np.ndarray, float, np.ndarray, bool]
"""A search's optimum, its value, the start it came from, and whether it converged."""


@dataclass(frozen=True)
class SearchSettings:
    """The fast start's budgets and tolerances.

    Parameters
    ----------
    max_full_evals
        Cap on full log posterior calls.
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
    max_cheap_evals
        Cap on the full posterior calls of the cheap polish (step 2b; counted apart from
        ``max_full_evals``, in :attr:`StartResult.n_cheap_evals`).
    block_rounds
        Newton steps of the block polish (step 3b).
    max_block_evals
        Cap on its full posterior calls that move the expensive block (counted in
        :attr:`StartResult.n_full_evals`; its cheap polishes in ``n_cheap_evals``).

    Raises
    ------
    ValueError
        A budget that is not a positive integer, or a step or tolerance not finite and > 0.
    """

    max_full_evals: int = 200
    max_search_evals: int = 600
    search_step: float = 0.5
    mode_tol: float = 0.05
    fd_drop: float = 1.0
    max_sd: float = 2.0
    polish_rounds: int = 3
    max_cheap_evals: int = 300
    block_rounds: int = 8
    max_block_evals: int = 120

    def __post_init__(self) -> None:
        n = self.max_full_evals
        if int(n) != n or n < 1:
            raise ValueError(f"max_full_evals must be a positive integer, got {n!r}")
        for name in ("search_step", "mode_tol", "fd_drop", "max_sd"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def find_start(
    log_post: LogPost,
    theta0: Sequence[float],
    *,
    subsample_log_post: LogPost | None = None,
    tau_index: int | None = 1,
    tau_starts: Sequence[float] = (),
    cheap: Sequence[int] = (),
    settings: SearchSettings | None = None,
) -> StartResult:
    """Find the best posterior mode, its curvature, and the modes on the way (module notes).

    Parameters
    ----------
    log_post
        Full log posterior (log scale).
    theta0
        Default start (log scale), length ``d``.
    subsample_log_post
        Cheaper stand-in for the search (log-likelihood scaled to the full data, see the
        module notes); ``None`` searches on ``log_post``.
    tau_index, tau_starts
        Values (log scale) of coordinate ``tau_index`` (``tau_t``) to search from besides
        ``theta0``.
    cheap
        Coordinates whose change costs the full posterior no trigger pass (``mu0``, ``xi0``,
        and ``tau_t`` on a day lattice). After a subsample search, the best mode's cheap
        coordinates are re-optimised on the full posterior, the others held (step 2b).
    settings
        Budgets, steps and tolerances (default :class:`SearchSettings()`).

    Raises
    ------
    ValueError
        Bad arguments, or no finite log posterior at any start.
    """
    t_start = time.perf_counter()
    starts = _starts(theta0, tau_index, tau_starts)
    d, s = len(starts[0]), settings or SearchSettings()
    full = Counted(log_post, int(s.max_full_evals))
    sub = None if subsample_log_post is None else Counted(subsample_log_post, None)
    per_start = int(s.max_search_evals)
    if sub is None:  # keep enough full evaluations for one Hessian and a Newton step
        reserve = 1 + 4 * d + 2 * d * (d - 1) + 4
        per_start = min(per_start, max(int(s.max_full_evals) - reserve, 0) // len(starts))
    found = _search_starts(sub if sub is not None else full, starts, s.search_step, per_start)
    modes = _rank_modes(found, full, sub, s.mode_tol)
    best, f_best = np.array(modes[0].theta), modes[0].log_post
    if not math.isfinite(f_best):
        raise ValueError("find_start: the full log posterior is not finite at any mode found")
    n_cheap = 0  # 2b. the subsample's bias in the cheap coordinates, removed for free
    if sub is not None and len(cheap):
        best, f_best, n_cheap = polish_cheap(
            log_post, best, f_best, cheap, s.search_step, int(s.max_cheap_evals)
        )
    best, f_best, cov, source, clipped = _curvature(full, sub, best, f_best, s)
    n_block = 0  # 3b. the expensive block, where the 5-d polish stopped short
    if sub is not None and len(cheap):
        best, f_best, n_block, n_more, moved = _polish_block(log_post, best, f_best, cov, cheap, s)
        n_cheap += n_more
        if moved:  # the curvature again, at the new point
            again = Counted(log_post, int(s.max_full_evals))
            best, f_best, cov, source, clipped = _curvature(again, None, best, f_best, s)
            n_block += again.n
    result = StartResult(
        theta=tuple(best.tolist()),
        log_post=float(f_best),
        cov=tuple(tuple(row) for row in cov.tolist()),
        hessian=source,
        n_clipped=clipped,
        n_sub_evals=0 if sub is None else sub.n,
        n_full_evals=full.n + n_block,
        n_cheap_evals=n_cheap,
        seconds=time.perf_counter() - t_start,
        modes=tuple(modes),
    )
    _log_start(result)
    return result


def _log_start(result: StartResult) -> None:
    """The INFO line of a finished start."""
    log.info(
        "start: mode %s, log posterior %.6g, %d mode(s), %d full (+ %d cheap) + %d subsample "
        "evaluations, %.1f s",
        np.round(result.theta, 4).tolist(),
        result.log_post,
        len(result.modes),
        result.n_full_evals,
        result.n_cheap_evals,
        result.n_sub_evals,
        result.seconds,
    )


def _starts(
    theta0: Sequence[float], tau_index: int | None, tau_starts: Sequence[float]
) -> list[np.ndarray]:
    """``theta0``, then ``theta0`` with coordinate ``tau_index`` set to each of ``tau_starts``.

    Raises
    ------
    ValueError
        ``theta0`` empty or not finite, or ``tau_starts`` without a valid ``tau_index``.
    """
    x0 = np.asarray(theta0, dtype=float).reshape(-1)
    d = len(x0)
    if d == 0 or not np.all(np.isfinite(x0)):
        raise ValueError(f"theta0 must be a non-empty finite vector, got {theta0!r}")
    if len(tau_starts) and (tau_index is None or not 0 <= tau_index < d):
        raise ValueError(f"tau_starts need a tau_index in 0..{d - 1}, got {tau_index!r}")
    starts = [x0]
    for t in tau_starts:
        s = x0.copy()
        s[tau_index] = float(t)  # type: ignore[index]
        starts.append(s)
    return starts


def _search_starts(
    f: Counted, starts: list[np.ndarray], step: float, per_start: int
) -> list[_Found]:
    """1. Nelder-Mead from every start (a start with a non-finite value is skipped).

    Raises
    ------
    ValueError
        No start has a finite log posterior.
    """
    found: list[_Found] = []
    for s in starts:
        try:
            f_s = f(s)
        except BudgetExceeded:
            break
        if not math.isfinite(f_s):
            log.info("start: skipping a start with a non-finite log posterior: %s", s)
            continue
        x, fx, ok = nelder_mead(f, s, f_s, step, per_start)
        if math.isfinite(fx):
            found.append((x, fx, s, ok))
        log.debug("start: search from %s reached %s (%.6g)", s.round(3), x.round(3), fx)
    if not found:
        raise ValueError("find_start: the log posterior is not finite at any start")
    return found


def _rank_modes(
    found: list[_Found], full: Counted, sub: Counted | None, mode_tol: float
) -> list[Mode]:
    """2. The distinct optima (merged within ``mode_tol``), each evaluated on the full
    posterior after a subsample search, best first."""
    found = sorted(found, key=lambda r: -r[1])
    distinct: list[_Found] = []
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
            except BudgetExceeded:
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
    return modes


def _curvature(
    full: Counted, sub: Counted | None, best: np.ndarray, f_best: float, s: SearchSettings
) -> tuple[np.ndarray, float, np.ndarray, str, int]:
    """3-4. Steps sized on the subsample, then Hessian and Newton steps on the full posterior.

    Returns
    -------
    (theta, log posterior, covariance, its source, eigenvalues clipped)
    """
    d = len(best)
    h = np.full(d, 0.1)
    cov = np.eye(d) * s.max_sd**2
    source, clipped = "none", 0
    if sub is not None:
        f_sub = sub(best)
        if math.isfinite(f_sub):
            _, hess_sub, h = fd_curvature(sub, best, f_sub, h, s.fd_drop, s.max_sd)
            cov, _, clipped = regularised_cov(hess_sub, s.max_sd)
            source = "subsample"
    try:
        for _ in range(max(int(s.polish_rounds), 1)):
            grad, hess, h = fd_curvature(full, best, f_best, h, s.fd_drop, s.max_sd)
            cov, prec, clipped = regularised_cov(hess, s.max_sd)
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
    except BudgetExceeded:
        log.warning(
            "start: the budget of %d full evaluations ran out; curvature from %s",
            s.max_full_evals,
            source,
        )
    if full.best_f > f_best and full.best_x is not None:  # a probe beat the polish
        best, f_best = full.best_x, full.best_f
    return best, f_best, cov, source, clipped


def _polish_block(
    log_post: LogPost,
    best: np.ndarray,
    f_best: float,
    cov: np.ndarray,
    cheap: Sequence[int],
    s: SearchSettings,
) -> tuple[np.ndarray, float, int, int, bool]:
    """3b. Newton steps on the expensive block, each followed by the cheap polish; ``cov``
    (the 5-d curvature) sizes the first steps and measures the move.

    Returns
    -------
    (theta, log posterior, full calls, cheap-polish calls, whether the block moved by more
    than one posterior sd in all)
    """
    d = len(best)
    e = np.array([i for i in range(d) if i not in set(int(c) for c in cheap)], dtype=int)
    if e.size == 0:
        return best, f_best, 0, 0, False
    full = Counted(log_post, int(s.max_block_evals))
    prec0 = np.linalg.inv(np.asarray(cov)[np.ix_(e, e)])
    origin = best[e].copy()
    h = np.sqrt(np.diag(np.asarray(cov))[e])
    n_cheap = 0
    try:
        for _ in range(int(s.block_rounds)):
            base = best.copy()

            def block(z: np.ndarray, base: np.ndarray = base) -> float:
                x = base.copy()
                x[e] = z
                return full(x)

            grad, hess, h = fd_curvature(
                Counted(block, None), best[e], f_best, h, s.fd_drop, s.max_sd
            )
            cov_e, prec_e, _ = regularised_cov(hess, s.max_sd)
            step = cov_e @ grad
            moved = False
            for _ in range(6):
                f1 = block(best[e] + step)
                if f1 > f_best:
                    best, f_best, moved = base.copy(), f1, True
                    best[e] += step
                    break
                step = step / 2.0
            if not moved:
                break
            best, f_best, k = polish_cheap(
                log_post, best, f_best, cheap, s.search_step, int(s.max_cheap_evals)
            )
            n_cheap += k
            if float(step @ prec_e @ step) <= 1.0:
                break
    except BudgetExceeded:
        log.warning("start: the block polish ran out of its %d evaluations", s.max_block_evals)
    shift = best[e] - origin
    moved_far = float(shift @ prec0 @ shift) > 1.0
    log.info(
        "start: the block polish moved %s by %.3g posterior sd in %d + %d cheap evaluations",
        e.tolist(),
        math.sqrt(float(shift @ prec0 @ shift)),
        full.n,
        n_cheap,
    )
    return best, f_best, full.n, n_cheap, moved_far


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
