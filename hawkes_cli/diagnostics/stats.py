"""Posterior summaries and convergence statistics: pure functions over arrays.

R-hat, bulk and tail ESS and the MCSE of the mean are those of R's ``posterior`` package
(version 1.4.0; Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021, "Rank-normalization,
folding, and localization: an improved R-hat", the reference implementation), ported line by
line below and checked against values computed by R in ``tests/golden/``
(``tests/test_posterior_reference.py``). arviz 0.22 departs from it in three places:

- the tail ESS's quantile: arviz's (scipy's ``mquantiles``) can fall one ulp below a value
  tied at the quantile, so the indicator ``x <= q`` drops every tied draw (Metropolis chains
  repeat values); R's type-7 quantile returns the tied value itself;
- the folded R-hat's centre: R folds about the median of all draws, arviz about the median of
  the split draws (which differ when the length is odd);
- Geyer's truncation: R stops the initial positive sequence at lag ``n - 5`` of the split
  length ``n``, arviz two lags later for odd ``n``.

arviz-stats 0.8.0 (arviz 1.0's statistics) keeps the last two departures, so the port stays
until a release agrees. Medians, intervals, means and sds are numpy's. Every array is
``(chain, draw)``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .records import Draws, SummaryRow

__all__ = [
    "MIN_DRAWS",
    "Convergence",
    "average_ranks",
    "convergence",
    "ess",
    "ess_bulk",
    "ess_mean",
    "ess_tail",
    "fold_draws",
    "mcse_mean",
    "quantile7",
    "rhat",
    "rows",
    "split_chains",
    "summary",
    "z_scale",
]

MIN_DRAWS = 6
"""Fewest draws per chain for R-hat and ESS (posterior's ESS needs split halves of 3 draws)."""

Convergence = tuple[float, float, float, float]
"""R-hat, bulk ESS, tail ESS, MCSE of the mean."""

_NAN = float("nan")
_EPS = float(np.finfo(np.float64).eps)  # R's .Machine$double.eps


# --------------------------------------------------------------------------- posterior's helpers


def _is_constant(x: np.ndarray) -> bool:
    """posterior's ``is_constant``: ``max - min`` below ``double.eps`` (absolute)."""
    return bool(abs(np.max(x) - np.min(x)) < _EPS)


def _unit_scaled(x: np.ndarray) -> tuple[np.ndarray, int]:
    """``(x * 2**-e, e)`` with the largest ``|x|`` in [0.5, 1): exact (a power of two), so
    sums of squares cannot overflow for draws near 1e308, and R's arithmetic is unchanged."""
    top = float(np.max(np.abs(x))) if x.size else 0.0
    if not (math.isfinite(top) and top > 0):
        return x, 0
    e = math.frexp(top)[1]
    return np.ldexp(x, -e), e


def _sd(x: np.ndarray) -> float:
    """Standard deviation (``ddof=1``) of all finite draws ``x``, without overflow."""
    y, e = _unit_scaled(x)
    return math.ldexp(float(np.std(y, ddof=1)), e)


def _mean(x: np.ndarray) -> float:
    """Mean of all finite draws ``x``, without overflow."""
    y, e = _unit_scaled(x)
    return math.ldexp(float(np.mean(y)), e)


def _return_nan(x: np.ndarray) -> bool:
    """posterior's ``should_return_NA``: a NaN or infinite draw, or constant draws."""
    return not np.all(np.isfinite(x)) or _is_constant(x)


def split_chains(x: np.ndarray) -> np.ndarray:
    """Each chain's first and second half as two chains, ``(2 * chain, draw // 2)``; the middle
    draw of an odd length is dropped, and one draw is left as it is (posterior's
    ``.split_chains``)."""
    n = x.shape[1]
    if n == 1:
        return x
    half = n // 2
    return np.concatenate([x[:, :half], x[:, n - half :]], axis=0)


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of all elements, ties given their average rank (R's ``rank(x,
    ties.method = "average")``; scipy's ``rankdata``, faster); NaN everywhere when one is NaN."""
    flat = np.ravel(x)
    if flat.size == 0:
        return np.zeros(x.shape)
    if np.isnan(flat).any():
        return np.full(x.shape, np.nan)
    order = np.argsort(flat)
    ordered = flat[order]
    new = np.empty(flat.size, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], flat.size)
    ranks = np.empty(flat.size)
    ranks[order] = ((starts + 1 + ends) / 2.0)[np.cumsum(new) - 1]
    return ranks.reshape(x.shape)


def z_scale(x: np.ndarray) -> np.ndarray:
    """Rank-normalised draws: average ranks over all chains, ``qnorm((r - 3/8) / (S + 1/4))``."""
    from scipy.special import ndtri

    return ndtri((average_ranks(x) - 0.375) / (x.size - 0.75 + 1))


def fold_draws(x: np.ndarray) -> np.ndarray:
    """``|x - median(x)|``, the median of all draws."""
    return np.abs(x - np.median(x))


def quantile7(x: np.ndarray, prob: float) -> float:
    """R's ``quantile(x, prob)`` (type 7) of all draws, exactly as R computes it: a value
    tied at the quantile is returned as it is, not interpolated."""
    flat = np.ravel(x)
    n = flat.size
    index = 1 + max(n - 1, 0) * prob  # 1-based, as in R
    lo, hi = math.floor(index), math.ceil(index)
    part = np.partition(flat, sorted({lo - 1, hi - 1}))
    q = float(part[lo - 1])
    high = float(part[hi - 1])
    if index > lo and high != q:
        h = index - lo
        q = (1 - h) * q + h * high
    return q


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Each row's biased autocovariance at lags ``0 .. n-1`` (posterior's ``autocovariance``:
    FFT on ``2 * nextn(n)`` points, scaled so that lag 0 is the variance times (n-1)/n)."""
    from scipy.fft import irfft, next_fast_len, rfft

    n = x.shape[1]
    size = 2 * next_fast_len(n, real=True)  # R's nextn(n): the next 2, 3, 5-smooth number
    yc = x - x.mean(axis=1, keepdims=True)
    ac = irfft(np.abs(rfft(yc, n=size, axis=1)) ** 2, n=size, axis=1)[:, :n]
    varx = x.var(axis=1, ddof=1)
    out = np.zeros_like(ac)
    live = varx != 0  # a constant chain's autocovariance is 0
    out[live] = ac[live] / ac[live, :1] * (varx[live] * (n - 1) / n)[:, None]
    return out


# --------------------------------------------------------------------------- the statistics


def ess(x: np.ndarray) -> float:
    """posterior's ``.ess``: Geyer's initial monotone sequence estimate over the chains of
    ``x`` as given (not split); NaN with fewer than 3 draws, non-finite or constant draws."""
    n_chains, n = x.shape
    if n < 3 or _return_nan(x):
        return _NAN
    x = _unit_scaled(x)[0]  # ESS is scale-free; no overflow of squares
    acov_means = _autocovariance(x).mean(axis=0).tolist()
    mean_var = acov_means[0] * n / (n - 1)
    var_plus = mean_var * (n - 1) / n
    if n_chains > 1:
        var_plus += float(np.var(x.mean(axis=1), ddof=1))
    # Geyer's initial positive sequence (R's 1-based rho_hat_t[t + 1] is rho[t] here)
    rho = [0.0] * n
    t = 0
    rho_even = 1.0
    rho[0] = rho_even
    rho_odd = 1 - (mean_var - acov_means[1]) / var_plus
    rho[1] = rho_odd
    while t < n - 5 and not math.isnan(rho_even + rho_odd) and rho_even + rho_odd > 0:
        t += 2
        rho_even = 1 - (mean_var - acov_means[t]) / var_plus
        rho_odd = 1 - (mean_var - acov_means[t + 1]) / var_plus
        if rho_even + rho_odd >= 0:
            rho[t] = rho_even
            rho[t + 1] = rho_odd
    max_t = t
    if rho_even > 0:  # the improved estimate's last term
        rho[max_t] = rho_even
    # Geyer's initial monotone sequence
    t = 0
    while t <= max_t - 4:
        t += 2
        if rho[t] + rho[t + 1] > rho[t - 2] + rho[t - 1]:
            rho[t] = (rho[t - 2] + rho[t - 1]) / 2
            rho[t + 1] = rho[t]
    total = n_chains * n
    head = math.fsum(rho[:max_t]) if max_t > 0 else rho[0]  # R: sum(rho_hat_t[1:0]) is rho[0]
    tau_hat = -1 + 2 * head + rho[max_t]
    tau_hat = max(tau_hat, 1 / math.log10(total))  # posterior caps the ESS at S * log10(S)
    return total / tau_hat


def _rhat_basic(x: np.ndarray) -> float:
    """posterior's ``.rhat`` of the chains of ``x`` as given."""
    if _return_nan(x):
        return _NAN
    n = x.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one draw: NaN variances
        chain_mean = x.mean(axis=1)
        chain_var = x.var(axis=1, ddof=1)
        var_between = n * float(np.var(chain_mean, ddof=1))
        var_within = float(np.mean(chain_var))
        if var_within == 0.0:  # every chain constant, not all alike: R's division gives Inf
            return math.inf
        return math.sqrt((var_between / var_within + n - 1) / n)


def rhat(x: np.ndarray, *, bulk_z: np.ndarray | None = None) -> float:
    """Rank-normalised split R-hat: the larger of the bulk's and the folded draws' (NaN when
    either is). As in R, an infinite draw is just the highest rank; a NaN gives NaN.
    ``bulk_z``: ``z_scale(split_chains(x))`` when already computed."""
    bulk = _rhat_basic(z_scale(split_chains(x)) if bulk_z is None else bulk_z)
    tail = _rhat_basic(z_scale(split_chains(fold_draws(x))))
    return _NAN if math.isnan(bulk) or math.isnan(tail) else max(bulk, tail)


def ess_bulk(x: np.ndarray) -> float:
    """Bulk ESS: the ESS of the rank-normalised split chains (ranks, so infinite draws
    count, as in R; a NaN gives NaN)."""
    return ess(z_scale(split_chains(x)))


def _ess_quantile(x: np.ndarray, prob: float) -> float:
    if _return_nan(x):
        return _NAN
    indicator = (x <= quantile7(x, prob)).astype(np.float64)
    return ess(split_chains(indicator))


def ess_tail(x: np.ndarray) -> float:
    """Tail ESS: the smaller ESS of the indicators of the 5% and 95% quantiles."""
    low, high = _ess_quantile(x, 0.05), _ess_quantile(x, 0.95)
    return _NAN if math.isnan(low) or math.isnan(high) else min(low, high)


def ess_mean(x: np.ndarray) -> float:
    """ESS of the mean: the ESS of the split chains."""
    return ess(split_chains(x))


def mcse_mean(x: np.ndarray) -> float:
    """Monte Carlo standard error of the mean: ``sd(all draws) / sqrt(ess_mean)``."""
    e = ess_mean(x)
    if math.isnan(e) or x.size < 2:
        return _NAN
    return _sd(x) / math.sqrt(e)


def convergence(matrix: np.ndarray) -> Convergence:
    """R-hat, bulk ESS, tail ESS and MCSE of the mean of a ``(chain, draw)`` array, as R's
    ``posterior`` computes them (NaN where it gives NA: too few draws, NaN or constant draws).

    Two choices of the report differ from calling posterior: R-hat is NaN with one chain (its
    split R-hat compares the chain's halves only, and the verdicts say that between-chain
    convergence is not checked), and every statistic is NaN when a draw is infinite (R still
    ranks an infinite draw for R-hat and bulk ESS; the verdicts fail such a chain instead).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.size == 0 or not np.all(np.isfinite(matrix)):
        return _NAN, _NAN, _NAN, _NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bulk_z = z_scale(split_chains(matrix))  # shared by R-hat and bulk ESS
        return (
            rhat(matrix, bulk_z=bulk_z) if matrix.shape[0] >= 2 else _NAN,
            ess(bulk_z),
            ess_tail(matrix),
            mcse_mean(matrix),
        )


def summary(pooled: np.ndarray) -> tuple[float, float, float, float, float]:
    """Median, 2.5% and 97.5% quantiles, mean and sd (``ddof=1``) of the finite draws."""
    pooled = pooled[np.isfinite(pooled)]
    if pooled.size == 0:
        return _NAN, _NAN, _NAN, _NAN, _NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        median, lo, hi = np.quantile(pooled, [0.5, 0.025, 0.975])
        mean = _mean(pooled)
        sd = _sd(pooled) if pooled.size > 1 else _NAN
    return float(median), float(lo), float(hi), mean, sd


def _convergence_of(draws: Draws, name: str, computed: dict[str, Convergence]) -> Convergence:
    """A variable's convergence: its own, or its parameter's for a constant multiple of one."""
    if name not in draws.scale_of:
        return computed[name]
    base, factor = draws.scale_of[name]
    rhat, ess_b, ess_t, mcse = computed[base]
    return rhat, ess_b, ess_t, mcse * abs(factor)


def rows(draws: Draws) -> tuple[list[SummaryRow], list[SummaryRow]]:
    """Summary rows of every variable: the parameters' and the derived quantities'.

    Convergence statistics are computed on the common prefix, once per variable that is not
    a constant multiple of a parameter; summaries use every retained draw.
    """
    computed = {
        name: convergence(draws.matrix(name))
        for name in draws.variables
        if name not in draws.scale_of
    }
    params: list[SummaryRow] = []
    derived: list[SummaryRow] = []
    for name, arrays in draws.variables.items():
        rhat, ess_b, ess_t, mcse = _convergence_of(draws, name, computed)
        median, lo, hi, mean, sd = summary(np.concatenate(arrays))
        row = SummaryRow(
            name=name,
            label=draws.labels[name],
            unit=draws.units[name],
            kind="parameter" if name in draws.param_names else "derived",
            median=median,
            q2_5=lo,
            q97_5=hi,
            mean=mean,
            sd=sd,
            rhat=rhat,
            ess_bulk=ess_b,
            ess_tail=ess_t,
            mcse_mean=mcse,
            checked=name in draws.checked,
        )
        (params if row.kind == "parameter" else derived).append(row)
    return params, derived
