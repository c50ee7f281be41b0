"""Temporal residuals: the ground process's compensator, time rescaling and the KS test.

The ground process is the model's intensity integrated over space, with the model's R^2
approximation (each trigger kernel integrates to 1 over the plane and the background's
``rho * A`` to 1), i.e. exactly the compensator of the log-likelihood (DESIGN section 2)::

    Lambda(u) = mu0 * sum_m [Phi((u - t_m)/tau_t) - Phi(-t_m/tau_t)]
              + xi0 * sum_{t_m < u} [1 - exp(-(u - t_m)/sigma_t)]

so ``Lambda(T)`` is the likelihood's compensator. Under a correctly specified model the rescaled
times ``Lambda(t_n)`` form a unit-rate Poisson process (time-rescaling theorem), so their gaps are
iid Exponential(1); the KS test compares the gaps with that law (Ogata 1988; Brown et al. 2002).

Ties on a lattice. Times recorded on a lattice of spacing ``h`` (days: ``h = 1``; the times are
taken as floored, as the HHS weeks/days and :func:`hawkes_cli.simulate.simulate`'s
``integer_days`` are) cannot be rescaled one by one. An event recorded at lattice time ``v`` is
taken to have happened at an unknown time in ``[v, v + h)``; its rescaled time is drawn
uniformly on ``[Lambda(v), Lambda(v + h))`` (independently per event, from a seeded generator).
Under the model, given the count of a cell, the rescaled times of its events are exactly iid
uniform on the cell's compensator increment, so this randomisation keeps the unit-rate law and
the test exact. The data are on a lattice when some times tie and every gap between distinct
times is a whole multiple of the smallest one. Otherwise the rescaled time is ``Lambda(t_n)``
itself.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from ..model import Params

log = logging.getLogger(__name__)

#: Distinct times up to which the background compensator is summed exactly (an
#: evaluation-points x distinct-times matrix, in blocks); beyond, through an FFT on a grid.
EXACT_DISTINCT = 20_000
#: Grid points of the FFT path (the error per event is at most ``h / (2 sqrt(2 pi) tau_t)``
#: with ``h = span / FFT_GRID``).
FFT_GRID = 1 << 16
#: Relative tolerance for "every gap is a whole multiple of the smallest".
LATTICE_RTOL = 1e-9
_BLOCK = 4_000_000  # elements of one temporary


@dataclass(frozen=True)
class Rescaled:
    """Rescaled times of the events and how they were made.

    Attributes
    ----------
    tau : (N,) float64
        Rescaled time of each event, in the events' row order.
    total : float
        ``Lambda`` at the end of the rescaled window (``T``, or ``v_last + h`` on a lattice).
    lattice : float or None
        The lattice spacing ``h`` (time units) when ties were broken, else None.
    cell_times : (C,) float64
        Start of each counting cell (lattice: each distinct time; else whole time units).
    cell_observed : (C,) int64
        Events in each cell.
    cell_expected : (C,) float64
        Compensator increment over each cell.
    cell_width : float
        Width of every cell, time units (the lattice spacing, or the whole time units of a
        cell).
    """

    tau: np.ndarray
    total: float
    lattice: float | None
    cell_times: np.ndarray
    cell_observed: np.ndarray
    cell_expected: np.ndarray
    cell_width: float


def lattice_spacing(time: np.ndarray) -> float | None:
    """The spacing ``h`` when sorted ``time`` ties on a lattice (see the module), else None."""
    unique = np.unique(time)
    if unique.size == time.size or unique.size < 2:
        return None if unique.size == time.size else 1.0
    gaps = np.diff(unique)
    h = float(gaps.min())
    ratio = gaps / h
    if np.all(np.abs(ratio - np.round(ratio)) <= LATTICE_RTOL * np.maximum(ratio, 1.0)):
        return h
    return None


def _background_exact(u: np.ndarray, v: np.ndarray, c: np.ndarray, tau: float) -> np.ndarray:
    """``sum_j c_j Phi((u_i - v_j)/tau)`` by blocks of ``u``."""
    out = np.empty(u.size)
    step = max(1, _BLOCK // max(v.size, 1))
    for i in range(0, u.size, step):
        out[i : i + step] = ndtr((u[i : i + step, None] - v[None, :]) / tau) @ c
    return out


def _background_fft(u: np.ndarray, v: np.ndarray, c: np.ndarray, tau: float) -> np.ndarray:
    """As :func:`_background_exact`, with the counts binned on a grid and an FFT convolution."""
    from scipy.signal import fftconvolve

    lo = min(float(u.min()), float(v.min()))
    hi = max(float(u.max()), float(v.max()))
    h = max(hi - lo, 1e-300) / (FFT_GRID - 1)
    grid = lo + h * np.arange(FFT_GRID)
    binned = np.bincount(
        np.clip(np.rint((v - lo) / h).astype(np.int64), 0, FFT_GRID - 1),
        weights=c,
        minlength=FFT_GRID,
    )
    lags = h * np.arange(-(FFT_GRID - 1), FFT_GRID)
    conv = fftconvolve(binned, ndtr(lags / tau), mode="valid")  # value at grid[i]
    return np.interp(u, grid, conv)


def ground_compensator(
    u: np.ndarray,
    time: np.ndarray,
    p: Params,
    *,
    start: float = 0.0,
    mass: np.ndarray | None = None,
) -> np.ndarray:
    """``Lambda(u)`` of the module docstring for sorted evaluation times.

    Parameters
    ----------
    u : (M,) float64
        Evaluation times, ascending (time units).
    time : (N,) float64
        Event times, ascending.
    p
        Parameters.
    start
        Window start (the likelihood's is 0).
    mass : (N,) float64, optional
        Each event's trigger mass inside the study region (``model.edge: censored``): its
        offspring count with this weight; None: the paper's (all 1).

    Returns
    -------
    (M,) float64
        Expected events in ``[start, u_i)``; ``Lambda(T)`` is the likelihood's compensator.
    """
    u = np.asarray(u, dtype=np.float64)
    v, inverse, c = np.unique(
        np.asarray(time, dtype=np.float64), return_inverse=True, return_counts=True
    )
    cf = c.astype(np.float64)
    # each source's weight in the trigger part: 1, or its mass inside the region
    cw = cf if mass is None else np.bincount(inverse, weights=mass, minlength=v.size)
    base = float(ndtr((start - v) / p.tau_t) @ cf)
    if v.size <= EXACT_DISTINCT:
        bg = _background_exact(u, v, cf, p.tau_t)
    else:
        bg = _background_fft(u, v, cf, p.tau_t)
    bg -= base
    # trigger: A_j = sum_{i <= j} c_i exp(-(v_j - v_i)/sigma_t), by recursion over distinct times
    decay = np.exp(-np.diff(v) / p.sigma_t)
    a = np.empty(v.size)
    acc = 0.0
    for j in range(v.size):  # O(U); U is days (or N for continuous times)
        acc = acc * (decay[j - 1] if j else 0.0) + cw[j]
        a[j] = acc
    j = np.searchsorted(v, u, side="left") - 1  # last distinct time strictly before u
    before = np.where(j >= 0, np.cumsum(cw)[np.maximum(j, 0)], 0.0)
    tail = np.where(
        j >= 0, a[np.maximum(j, 0)] * np.exp(-(u - v[np.maximum(j, 0)]) / p.sigma_t), 0.0
    )
    return p.mu0 * bg + p.xi0 * (before - tail)


def rescale(
    time: np.ndarray, p: Params, rng: np.random.Generator, mass: np.ndarray | None = None
) -> Rescaled:
    """Rescaled times of sorted events (ties on a lattice broken as in the module docstring).

    Parameters
    ----------
    time : (N,) float64
        Event times, ascending.
    p
        Parameters (e.g. the posterior mean).
    rng
        Draws the uniforms of the tie-breaking (N of them, lattice only).
    mass : (N,) float64, optional
        Trigger mass inside the study region per event (:func:`ground_compensator`).
    """
    t = np.asarray(time, dtype=np.float64)
    h = lattice_spacing(t)
    v, inverse, counts = np.unique(t, return_inverse=True, return_counts=True)
    if h is not None:
        lam = ground_compensator(np.concatenate([v, v + h]), t, p, mass=mass)
        lo, hi = lam[: v.size], lam[v.size :]
        tau = lo[inverse] + rng.random(t.size) * (hi - lo)[inverse]
        return Rescaled(
            tau=tau,
            total=float(hi[-1]),
            lattice=h,
            cell_times=v,
            cell_observed=counts.astype(np.int64),
            cell_expected=hi - lo,
            cell_width=h,
        )
    lam = ground_compensator(v, t, p, mass=mass)
    unit = max(1.0, math.ceil((t[-1] - t[0]) / 2000.0))  # at most ~2000 cells
    edges = np.arange(math.floor(t[0]), t[-1] + unit, unit)
    if edges[-1] <= t[-1]:
        edges = np.append(edges, edges[-1] + unit)
    at_edges = ground_compensator(edges, t, p, mass=mass)
    observed = np.histogram(t, bins=edges)[0]
    return Rescaled(
        tau=lam[inverse],
        total=float(ground_compensator(np.array([t[-1]]), t, p, mass=mass)[0]),
        lattice=None,
        cell_times=edges[:-1],
        cell_observed=observed.astype(np.int64),
        cell_expected=np.diff(at_edges),
        cell_width=float(unit),
    )


def ks_summary(r: Rescaled) -> dict[str, float | int | None]:
    """KS tests of the rescaled times.

    Returns
    -------
    dict
        ``ks_statistic``, ``ks_pvalue``: the gaps of the sorted rescaled times against
        Exponential(1); ``ks_uniform_statistic``, ``ks_uniform_pvalue``: the rescaled times over
        ``total`` against Uniform(0, 1) (given N); ``n_events``, ``rescaled_total`` (``total``:
        expected events in the rescaled window), ``lattice_spacing``.
    """
    from scipy import stats

    tau = np.sort(r.tau)
    gaps = np.diff(np.concatenate([[0.0], tau]))
    exp_test = stats.kstest(gaps, "expon")
    uni_test = stats.kstest(tau / r.total, "uniform")
    return {
        "ks_statistic": float(exp_test.statistic),
        "ks_pvalue": float(exp_test.pvalue),
        "ks_uniform_statistic": float(uni_test.statistic),
        "ks_uniform_pvalue": float(uni_test.pvalue),
        "n_events": int(tau.size),
        "rescaled_total": float(r.total),
        "lattice_spacing": r.lattice,
    }
