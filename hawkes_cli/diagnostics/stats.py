"""Posterior summaries and convergence statistics: pure functions over arrays.

R-hat, ESS and MCSE are arviz's (imported on first use, so importing this module is cheap);
medians, intervals, means and sds are numpy's.
"""

from __future__ import annotations

import warnings

import numpy as np

from .records import Draws, SummaryRow

__all__ = ["MIN_DRAWS", "Convergence", "convergence", "rows", "summary"]

MIN_DRAWS = 4
"""Fewest draws per chain for R-hat, ESS and MCSE (arviz's minimum)."""

Convergence = tuple[float, float, float, float]
"""R-hat, bulk ESS, tail ESS, MCSE of the mean."""

_NAN = float("nan")


def convergence(matrix: np.ndarray) -> Convergence:
    """arviz's rank R-hat, bulk ESS, tail ESS and MCSE of the mean of a (chain, draw) array.

    NaN where arviz cannot compute them (fewer than 4 draws, non-finite draws, R-hat of one
    chain), without arviz's warnings.
    """
    if matrix.shape[1] < MIN_DRAWS or not np.all(np.isfinite(matrix)):
        return _NAN, _NAN, _NAN, _NAN
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rhat = float(az.rhat(matrix, method="rank")) if matrix.shape[0] >= 2 else _NAN
        ess_bulk = float(az.ess(matrix, method="bulk"))
        ess_tail = float(az.ess(matrix, method="tail"))
        mcse = float(az.mcse(matrix, method="mean"))
    return rhat, ess_bulk, ess_tail, mcse


def summary(pooled: np.ndarray) -> tuple[float, float, float, float, float]:
    """Median, 2.5% and 97.5% quantiles, mean and sd (``ddof=1``) of the finite draws."""
    pooled = pooled[np.isfinite(pooled)]
    if pooled.size == 0:
        return _NAN, _NAN, _NAN, _NAN, _NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        median, lo, hi = np.quantile(pooled, [0.5, 0.025, 0.975])
        mean = float(np.mean(pooled))
        sd = float(np.std(pooled, ddof=1)) if pooled.size > 1 else _NAN
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
