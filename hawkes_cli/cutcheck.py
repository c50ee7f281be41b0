"""The cut posterior's reference for ``hawkes-diagnose --cut-check``: independent location draws,
each with the conditional mode and curvature of the log-parameters.

A run that redraws locations (``sampler.resample_every > 0``) estimates the cut posterior, the
average over location draws ``X`` of ``p(theta | X, times)``; its chains approach it only as the
moves per redraw grow (Plummer 2015). The reference here needs no chain: ``K`` location draws
from the run's own location sampler (the polygons and each event's county, as the chains draw
them; seeded by the run's seed apart from every chain's stream and the fast start's), and on
each the Gaussian (Laplace) approximation of the conditional posterior, found by Newton steps
from the chains' posterior medians with the fast start's finite-difference curvature
(:func:`hawkes_cli.start.curvature.fd_curvature`, every draw starting from the steps the chains'
covariance gives, so that each draw's reference depends on that draw alone) on the run's own
log posterior (its config, data, engine, device and priors, built as a chain builds it:
:func:`hawkes_cli.runner.setup.build_chain`). :func:`hawkes_cli.diagnostics.cut.summarise_cut`
turns the draws into the table and the verdict. With ``is_draws > 0`` (``--cut-is-draws``)
the first draws with a Laplace fit are also importance-sampled (:func:`importance_sds`: a
multivariate t around the fit, 100 x 16 points, 100 trigger passes), so that every draw's
Laplace sds are corrected where the conditionals are skewed.

With ``newton_draws < draws`` (the default: 20 of 200) only the first draws get Newton's mode
and curvature; every draw then gets a *linear mode*, one Newton step with the Newton draws' mean
curvature from their mean mode (:func:`linear_mode`: 11 evaluations, 5 trigger passes), whose
spread over the draws is the between-draw sd (:mod:`hawkes_cli.diagnostics.cut`, module notes).

Cost per Newton draw: usually 2-3 Hessians (``1 + 2 d + 2 d (d - 1)`` = 51 evaluations each for the
five log-parameters) and a step between each, up to 8 where the curvature changes along the way.
A trigger pass is needed only where ``sigma_x`` or ``sigma_t`` changes: with the trigger cache
holding every point of a Hessian's stencil, about 9 trigger and 3 background passes per Hessian.
Measured: 120 evaluations and 25 pair passes per draw on 373 events of model 1 (exact float64
engine), 165 and 36 on 2,600 events of model 2 (truncated float32, censored edge).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .diagnostics import DiagnoseOptions, Draws, load_draws
from .diagnostics.cut import (
    DEFAULT_CUT_DRAWS,
    DEFAULT_CUT_IS_DRAWS,
    DEFAULT_CUT_NEWTON_DRAWS,
    STATUS_LINEAR,
    Conditional,
    CutCheck,
    summarise_cut,
)
from .diagnostics.options import MIN_CUT_DRAWS, check_is_draws, check_newton_draws
from .errors import UsageError
from .parallel import SerialComm
from .posterior import LogPosterior
from .rundir import RunDir
from .runner.setup import build_chain
from .start.curvature import fd_curvature
from .start.search import BudgetExceeded, Counted
from .stop import StopFlag
from .vocab import PARAM_NAMES

if TYPE_CHECKING:
    from .geo import PolygonSampler

log = logging.getLogger(__name__)

__all__ = [
    "CUT_LOCATIONS_KEY",
    "CutSettings",
    "ImportanceSample",
    "conditional_laplace",
    "conditional_posterior",
    "cut_locations",
    "importance_sds",
    "run_cut_check",
]

#: ``spawn_key`` of the check's location draws, apart from every chain's (their numbers) and
#: the fast start's (``2**31 - 1``).
CUT_LOCATIONS_KEY = 2**31 - 2
#: ``spawn_key`` of the importance samples (one stream per location draw).
CUT_IS_KEY = 2**31 - 3
#: Bootstrap resamples of an importance sample's outer points, for its sds' errors.
IS_BOOTSTRAP = 200

LogPost = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class CutSettings:
    """The check's numbers.

    Parameters
    ----------
    draws
        Location draws ``K`` (>= 3), each with a linear mode when ``newton_draws < draws``
        (:mod:`hawkes_cli.diagnostics.cut`, module notes).
    newton_draws
        Of those, the first ``J`` with Newton's mode and curvature (>= 3; at most ``draws``:
        ``J = K`` is all Newton, no linear modes).
    fd_drop
        Target fall of the log posterior (nats) over each finite-difference step: 2 nats, a
        step of 2 conditional sds, so that the truncated engine's error (at most
        ``engine.tolerance``, 0.05 nats by default, per evaluation) is at most 5% of a second
        difference.
    tol
        Newton converged when its decrement is below this (conditional sds).
    max_newton
        Hessians per draw at most.
    max_evals
        Log posterior evaluations per draw at most.
    max_sd
        Largest finite-difference step (log scale).
    is_draws
        Location draws (the first ones with a Laplace fit) whose conditional posterior is also
        importance-sampled (:func:`importance_sds`), to correct every draw's Laplace sd where
        the conditional is not Gaussian (0: none).
    is_outer, is_inner
        Points of each importance sample: ``is_outer`` values of ``(sigma_x, sigma_t)`` (a
        trigger pass each), each with ``is_inner`` values of ``(mu0, tau_t, xi0)``.
    is_df, is_scale
        The proposal: a multivariate t with ``is_df`` degrees of freedom and ``is_scale``
        squared times the Laplace covariance.
    """

    draws: int = DEFAULT_CUT_DRAWS
    newton_draws: int = DEFAULT_CUT_NEWTON_DRAWS
    fd_drop: float = 2.0
    tol: float = 0.1
    max_newton: int = 8
    max_evals: int = 500
    max_sd: float = 2.0
    is_draws: int = DEFAULT_CUT_IS_DRAWS
    is_outer: int = 100
    is_inner: int = 16
    is_df: float = 7.0
    is_scale: float = 1.2

    def __post_init__(self) -> None:
        if isinstance(self.draws, bool) or int(self.draws) < MIN_CUT_DRAWS:
            raise UsageError(
                f"--cut-draws must be an integer >= {MIN_CUT_DRAWS}, got {self.draws!r}"
            )
        j = self.newton_draws
        if isinstance(j, bool) or int(j) != j or int(j) < MIN_CUT_DRAWS:
            raise UsageError(f"--cut-newton-draws must be an integer >= {MIN_CUT_DRAWS}, got {j!r}")
        check_newton_draws(j, self.draws)
        if isinstance(self.is_draws, bool) or int(self.is_draws) < 0:
            raise UsageError(f"--cut-is-draws must be an integer >= 0, got {self.is_draws!r}")
        check_is_draws(self.is_draws, self.draws, self.newton_draws)
        for name in ("max_newton", "max_evals", "is_outer", "is_inner"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("fd_drop", "tol", "max_sd", "is_df", "is_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def cut_locations(
    polygons: PolygonSampler, codes: np.ndarray, seed: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Location draw ``k`` of the check: every event uniform in its polygon.

    Drawn from ``SeedSequence(seed, spawn_key=(CUT_LOCATIONS_KEY, k))``: each draw from its own
    stream, so draw ``k`` is the same whatever ``K`` is, and apart from the chains' streams.

    Returns
    -------
    x, y : (N,) float64
        Coordinates (coordinate units).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(CUT_LOCATIONS_KEY, k)))
    return polygons.sample(codes, rng)


def conditional_laplace(
    log_post: LogPost, theta0: np.ndarray, h0: np.ndarray, settings: CutSettings
) -> tuple[Conditional, np.ndarray]:
    """The conditional mode and covariance of ``log_post`` by Newton steps from ``theta0``.

    Each step takes the finite-difference gradient and Hessian
    (:func:`~hawkes_cli.start.curvature.fd_curvature`, steps resized from ``h0`` so that the
    log posterior falls about ``settings.fd_drop`` nats), then: if ``-H`` is not positive
    definite, the draw has no Gaussian reference; if the Newton decrement ``sqrt(g' (-H)^-1 g)``
    is below ``settings.tol`` the mode is the point plus its Newton step and the covariance
    ``(-H)^-1``; else the step is taken and the next Hessian taken there. A step that points
    back against the last one (an overshoot: the curvature changes along the way, and Newton
    would swing about the mode) is halved. A step longer than
    one conditional sd is halved (up to 4 times) until the log posterior rises; a shorter one
    is taken as it is: the central differences over about 2 sds see the posterior's third
    derivative, so near a skewed mode the "mode" of the stencil's quadratic, which Newton finds,
    can sit a little below the largest value (the Gaussian that matches the posterior over the
    stencil, not at one point).

    Parameters
    ----------
    log_post
        The conditional log posterior of the log-parameters (``-inf`` outside the support).
    theta0 : (d,) float
        Start (the chains' medians).
    h0 : (d,) float
        First finite-difference steps.
    settings
        Tolerances and budgets.

    Returns
    -------
    (Conditional, h)
        The draw's Gaussian reference (``pair_passes`` and ``seconds`` left 0 for the caller)
        and the steps last used.
    """
    f = Counted(log_post, int(settings.max_evals))
    x = np.array(theta0, dtype=float)
    h = np.array(h0, dtype=float)
    nan = math.nan

    def failed(status: str, steps: int, dec: float = nan) -> tuple[Conditional, np.ndarray]:
        return Conditional(tuple(x.tolist()), None, status, steps, dec, f.n), h

    last = None
    try:
        fx = f(x)
        if not math.isfinite(fx):
            return failed("log posterior not finite at the chains' medians", 0)
        for step_no in range(1, int(settings.max_newton) + 1):
            grad, hess, h = fd_curvature(f, x, fx, h, settings.fd_drop, settings.max_sd)
            prec = -0.5 * (hess + hess.T)
            if not np.all(np.isfinite(prec)) or np.linalg.eigvalsh(prec)[0] <= 0:
                return failed("Hessian not negative definite", step_no)
            cov = np.linalg.inv(prec)
            step = cov @ grad
            dec = math.sqrt(max(float(grad @ step), 0.0))
            if dec <= settings.tol:
                cov = 0.5 * (cov + cov.T)
                mode = tuple((x + step).tolist())
                out = Conditional(mode, tuple(map(tuple, cov.tolist())), "ok", step_no, dec, f.n)
                return out, h
            if last is not None and float(step @ prec @ last) < 0:  # it swings back: halve
                step = 0.5 * step
            last = step
            x, fx, problem = _step(f, x, fx, step, dec)
            if problem:
                return failed(problem, step_no, dec)
        return failed(f"Newton not converged in {settings.max_newton} steps", step_no, dec)
    except BudgetExceeded:
        return failed(f"Newton not converged in {settings.max_evals} evaluations", 0)


def _step(
    f: Counted, x: np.ndarray, fx: float, step: np.ndarray, dec: float
) -> tuple[np.ndarray, float, str]:
    """``(x + step, its value, "")``: within a conditional sd (``dec <= 1``) as it is, the
    stencil's quadratic trusted; farther, halved until the log posterior rises (4 times at
    most). The third item says why no step was taken ("" when one was)."""
    if dec <= 1.0:
        f1 = f(x + step)
        if not math.isfinite(f1):
            return x, fx, "log posterior not finite at a Newton step"
        return x + step, f1, ""
    for _ in range(4):
        f1 = f(x + step)
        if math.isfinite(f1) and f1 > fx:
            return x + step, f1, ""
        step = step / 2.0
    return x, fx, "Newton step did not raise the log posterior"


def _t_proposal(
    mode: np.ndarray, cov: np.ndarray, settings: CutSettings, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The importance sample's points, drawn in two stages: ``is_outer`` expensive-block values
    from the multivariate t's marginal, each with ``is_inner`` cheap-block values from its
    conditional (a t with ``df + 2`` degrees of freedom). Returns the points
    ``(outer, inner, 5)`` and the joint t's log density at each ``(outer, inner)``."""
    from scipy import stats

    df, e, c = settings.is_df, list(LogPosterior.expensive), list(LogPosterior.cheap)
    outer, inner = int(settings.is_outer), int(settings.is_inner)
    s_ee, s_ce = cov[np.ix_(e, e)], cov[np.ix_(c, e)]
    reg = s_ce @ np.linalg.inv(s_ee)
    s_c = cov[np.ix_(c, c)] - reg @ s_ce.T
    th_e = np.atleast_2d(stats.multivariate_t(mode[e], s_ee, df=df).rvs(outer, random_state=rng))
    pts = np.empty((outer, inner, mode.size))
    for i in range(outer):
        d = th_e[i] - mode[e]
        shape = (df + float(d @ np.linalg.solve(s_ee, d))) / (df + len(e)) * s_c
        cond = stats.multivariate_t(mode[c] + reg @ d, shape, df=df + len(e))
        pts[i][:, e] = th_e[i]
        pts[i][:, c] = np.atleast_2d(cond.rvs(inner, random_state=rng))
    logq = stats.multivariate_t(mode, cov, df=df).logpdf(pts.reshape(-1, mode.size))
    return pts, np.asarray(logq).reshape(outer, inner)


def _weighted_moments(pts: np.ndarray, logw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Self-normalised weighted sd and skewness of each coordinate, each shape (d,)."""
    w = np.exp(logw - logw.max()).ravel()
    w /= w.sum()
    x = pts.reshape(-1, pts.shape[-1])
    c = x - w @ x
    var = w @ c**2
    return np.sqrt(var), (w @ c**3) / var**1.5


@dataclass(frozen=True)
class ImportanceSample:
    """A conditional posterior's moments by importance sampling (log-parameters).

    Attributes
    ----------
    sd, sd_se, skewness : (d,) float
        The sds, their bootstrap standard errors and the skewnesses.
    ess : float
        Kish's effective sample size of the weights.
    """

    sd: np.ndarray
    sd_se: np.ndarray
    skewness: np.ndarray
    ess: float


def importance_sds(
    log_post: LogPost,
    mode: np.ndarray,
    cov: np.ndarray,
    settings: CutSettings,
    rng: np.random.Generator,
) -> ImportanceSample:
    """The sds of the conditional posterior ``log_post`` by self-normalised importance
    sampling, no Gaussian assumed.

    The proposal is a multivariate t around the Laplace fit (``mode``, ``settings.is_scale``
    squared times ``cov``, ``settings.is_df`` degrees of freedom), drawn in two stages
    (:func:`_t_proposal`) so that the points share ``settings.is_outer`` trigger passes; the
    likelihood's caches keep each outer value's pair sums while its inner points are
    evaluated. The standard errors are the bootstrap's over outer values (their inner points
    together).
    """
    pts, logq = _t_proposal(mode, settings.is_scale**2 * cov, settings, rng)
    logp = np.array([[log_post(p) for p in row] for row in pts])
    logw = np.where(np.isfinite(logp), logp - logq, -np.inf)
    if not np.any(np.isfinite(logw)):
        raise UsageError(
            "--cut-is-draws: the conditional posterior is not finite at any of the "
            f"{logw.size} importance points around the Laplace fit; run without "
            "--cut-is-draws, or check the run's priors and data"
        )
    w = np.exp(logw - logw.max())
    sd, skew = _weighted_moments(pts, logw)
    outer = pts.shape[0]
    boot = np.array(
        [
            _weighted_moments(pts[idx], logw[idx])[0]
            for idx in (rng.integers(0, outer, outer) for _ in range(IS_BOOTSTRAP))
        ]
    )
    ess = float(w.sum() ** 2 / (w**2).sum())
    return ImportanceSample(sd, boot.std(axis=0, ddof=1), skew, ess)


def chain_start(draws: Draws) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The chains' log draws ``(chain, draw)`` by name, their medians (the start) and the first
    finite-difference steps ``sqrt(2 fd_drop / P_ii)`` for unit ``fd_drop`` (``P`` the inverse
    of their covariance: the conditional sd of each coordinate given the others)."""
    missing = [n for n in PARAM_NAMES if n not in draws.param_names]
    if missing:
        raise UsageError(
            f"--cut-check needs the parameters {list(PARAM_NAMES)}; the chains lack {missing}"
        )
    logs = {n: np.log(draws.matrix(n)) for n in PARAM_NAMES}
    pooled = np.stack([np.log(np.concatenate(draws.variables[n])) for n in PARAM_NAMES])
    if not np.all(np.isfinite(pooled)):
        raise UsageError("--cut-check: the chains have non-finite draws (see the verdicts)")
    start = np.median(pooled, axis=1)
    cov = np.atleast_2d(np.cov(pooled))
    sd = np.sqrt(np.maximum(np.diag(cov), 1e-12))
    try:
        h = 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))
    except np.linalg.LinAlgError:
        h = sd
    h = np.where(np.isfinite(h) & (h > 0), h, sd)
    return logs, start, math.sqrt(2.0) * h


def conditional_posterior(
    run_dir: Path,
) -> tuple[LogPosterior, Callable[[int], tuple[np.ndarray, np.ndarray]]]:
    """The run's own log posterior of the log-parameters (its config, data, engine, device and
    priors, built as chain 0 builds it) and the check's location draws for it.

    Returns
    -------
    (LogPosterior, locations)
        ``locations(k)`` is location draw ``k`` (:func:`cut_locations`, the run's seed), to
        pass to ``posterior.likelihood.set_locations``. The likelihood keeps the pair sums of
        every point of a Hessian's stencil: 10 of the trigger, 4 of the background.

    Raises
    ------
    UsageError
        A run with fixed locations (``sampler.resample_every: 0``).
    """
    config = RunDir(run_dir).load_config()
    setup = build_chain(config, 0, SerialComm(), StopFlag())
    stream = setup.rank.locations
    if stream is None:
        raise UsageError(f"{run_dir} keeps every event at its file location: no location draws")
    lik = setup.rank.likelihood
    # every point of a Hessian's stencil keeps its pair sums: 9 (sigma_x, sigma_t), 3 tau_t
    lik.trigger_cache_size = max(lik.trigger_cache_size, 10)
    lik.background_cache_size = max(lik.background_cache_size, 4)
    seed = config.sampler.seed

    def locations(k: int) -> tuple[np.ndarray, np.ndarray]:
        return cut_locations(stream.polygons, stream.codes, seed, k)

    return LogPosterior.from_mapping(lik, config.priors), locations


def run_cut_check(
    run_dir: Path,
    options: DiagnoseOptions | None = None,
    settings: CutSettings | None = None,
    draws: Draws | None = None,
) -> CutCheck:
    """The cut-posterior check of a run (module notes).

    Parameters
    ----------
    run_dir
        The run directory.
    options
        Burn-in and thinning of the chains' draws; ``options.cut_draws`` sets ``K`` and
        ``options.cut_is_draws`` the importance-sampled draws when ``settings`` is not given.
    settings
        The check's numbers (default :class:`CutSettings` with ``options.cut_draws`` draws).
    draws
        The chains' retained draws when already read (:func:`hawkes_cli.diagnostics.load_draws`).

    Raises
    ------
    UsageError
        No run directory or no retained draws; a run with fixed locations
        (``sampler.resample_every: 0``), whose chains sample one conditional posterior.
    """
    options = options or DiagnoseOptions()
    if settings is None:
        k = options.cut_draws if options.cut_draws is not None else DEFAULT_CUT_DRAWS
        j = options.cut_is_draws if options.cut_is_draws is not None else DEFAULT_CUT_IS_DRAWS
        n = options.cut_newton_draws
        n = n if n is not None else DEFAULT_CUT_NEWTON_DRAWS
        settings = CutSettings(draws=k, newton_draws=n, is_draws=j)
    config = RunDir(run_dir).load_config()
    if config.sampler.resample_every == 0:
        raise UsageError(
            f"--cut-check: {run_dir} keeps every event at its file location "
            "(sampler.resample_every: 0), so its chains sample one conditional posterior, not "
            "the cut posterior; there is nothing to check"
        )
    draws = draws if draws is not None else load_draws(Path(run_dir), options)
    logs, start, h = chain_start(draws)
    h = h * math.sqrt(settings.fd_drop)
    posterior, locations = conditional_posterior(run_dir)
    lik = posterior.likelihood
    log.info(
        "cut check of %s: %d location draws, Newton from the chains' medians %s",
        run_dir,
        settings.draws,
        np.round(np.exp(start), 6).tolist(),
    )
    conditionals = []
    n_newton = min(int(settings.newton_draws), int(settings.draws))
    for k in range(n_newton):
        t0, passes = time.perf_counter(), lik.pair_passes
        lik.set_locations(*locations(k))
        # every draw from the chains' steps: its reference is a function of the draw alone,
        # as the Monte Carlo errors of the between-draw sd assume (not of the draws before)
        cond, _ = conditional_laplace(posterior, start, h, settings)
        if cond.ok and sum(c.is_sd is not None for c in conditionals) < settings.is_draws:
            cond = _with_importance(posterior, cond, settings, config.sampler.seed, k)
        cond = replace(cond, pair_passes=lik.pair_passes - passes, seconds=time.perf_counter() - t0)
        conditionals.append(cond)
        _log_draw(k, settings.draws, cond)
    if n_newton < settings.draws and all(c.ok for c in conditionals):
        try:
            conditionals = _with_linear(posterior, locations, conditionals, int(settings.draws))
        except ValueError as exc:  # keep the Newton draws: their reference stands
            log.warning(
                "cut check: no linear modes (%s); between-draw sd from the Newton draws", exc
            )
    return summarise_cut(
        conditionals,
        logs,
        PARAM_NAMES,
        run_dir=str(run_dir),
        start=dict(zip(PARAM_NAMES, start.tolist(), strict=True)),
        settings={**asdict(settings), "seed": config.sampler.seed, "spawn_key": CUT_LOCATIONS_KEY},
    )


def linear_mode(log_post: LogPost, theta0: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, int]:
    """One Newton step from ``theta0`` with the fixed covariance ``cov`` (5, 5):
    ``theta0 + cov g``, ``g`` the central-difference gradient of ``log_post`` at ``theta0`` with
    one sd of ``cov`` per coordinate (exact on a quadratic); and the evaluations it took (11).
    Raises ``ValueError`` where the log posterior is not finite there."""
    h = np.sqrt(np.diag(cov))
    f0 = log_post(theta0)
    grad = np.empty(len(theta0))
    for j, e in enumerate(np.diag(h)):
        grad[j] = (log_post(theta0 + e) - log_post(theta0 - e)) / (2.0 * h[j])
    if not (math.isfinite(f0) and np.all(np.isfinite(grad))):
        raise ValueError(
            "the log posterior is not finite within one conditional sd of the Newton draws' mean "
            "mode"
        )
    return theta0 + cov @ grad, 1 + 2 * len(theta0)


def _with_linear(
    posterior: LogPosterior,
    locations: Callable[[int], tuple[np.ndarray, np.ndarray]],
    newton: list[Conditional],
    draws: int,
) -> list[Conditional]:
    """The Newton draws with their linear modes, and draws ``len(newton)..draws-1`` with a
    linear mode only (:mod:`hawkes_cli.diagnostics.cut`, module notes): one Newton step from
    the Newton draws' mean mode with their mean covariance."""
    lik = posterior.likelihood
    theta0 = np.mean([c.mode for c in newton], axis=0)
    cov = np.mean([c.cov for c in newton], axis=0)
    out = []
    for k in range(draws):
        t0, passes = time.perf_counter(), lik.pair_passes
        lik.set_locations(*locations(k))
        mode, evals = linear_mode(posterior, theta0, cov)
        linear = tuple(mode.tolist())
        spent = {"pair_passes": lik.pair_passes - passes, "seconds": time.perf_counter() - t0}
        if k < len(newton):
            c = newton[k]
            out.append(
                replace(
                    c,
                    linear=linear,
                    evaluations=c.evaluations + evals,
                    pair_passes=c.pair_passes + spent["pair_passes"],
                    seconds=c.seconds + spent["seconds"],
                )
            )
        else:
            out.append(
                Conditional(linear, None, STATUS_LINEAR, evaluations=evals, linear=linear, **spent)
            )
        if (k + 1) % 20 == 0 or k + 1 == draws:
            log.info("cut check: linear modes of %d/%d location draws", k + 1, draws)
    return out


def _with_importance(
    posterior: LogPosterior, cond: Conditional, settings: CutSettings, seed: int, k: int
) -> Conditional:
    """``cond`` with the importance-sampled sds of its conditional posterior (draw ``k``'s
    own stream, apart from the location draws')."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(CUT_IS_KEY, k)))
    mode, cov = np.array(cond.mode), np.array(cond.cov)
    sample = importance_sds(posterior, mode, cov, settings, rng)
    log.info(
        "cut check: draw %d: importance-sampled / Laplace sd %s (Kish ESS %.0f)",
        k + 1,
        np.round(sample.sd / np.sqrt(np.diag(cov)), 3).tolist(),
        sample.ess,
    )
    return replace(
        cond,
        evaluations=cond.evaluations + settings.is_outer * settings.is_inner,
        is_sd=tuple(sample.sd.tolist()),
        is_sd_se=tuple(sample.sd_se.tolist()),
        is_ess=sample.ess,
    )


def _log_draw(k: int, n: int, cond: Conditional) -> None:
    """The INFO line of one location draw."""
    log.info(
        "cut check: draw %d/%d: %s in %d Newton steps (decrement %.3g sd), %d evaluations, "
        "%d pair passes, %.1f s; mode %s",
        k + 1,
        n,
        cond.status,
        cond.newton_steps,
        cond.decrement,
        cond.evaluations,
        cond.pair_passes,
        cond.seconds,
        np.round(np.exp(cond.mode), 5).tolist(),
    )
