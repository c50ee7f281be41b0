"""The background compensator from per-bin moments against the exact sum over every distinct
time (the reference), and its bound against the error it makes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr

from hawkes_cli.engine.time_moments import MAX_ERROR, MIN_TIMES, TRIGGER_BINS, TimeMoments


def _times(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """``n`` distinct continuous times over 1,100 days, a few repeated, and the window end."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.random(n) * 1100.0)
    t[::50] = t[1::50]  # ties: counts of 2
    tu, counts = np.unique(t, return_counts=True)
    return tu, counts, 1100.5


def _exact(tu: np.ndarray, counts: np.ndarray, T: float, tau: float) -> float:
    return float(np.dot(ndtr((T - tu) / tau) - ndtr(-tu / tau), counts))


@pytest.mark.parametrize("tau", [2_000.0, 9_000.0, 1e5])
def test_moments_sum_is_the_exact_sum(tau):
    """Where it answers, the moments' sum equals the exact one within float64 rounding of a
    sum of 200,000 terms (1e-12 relative) and within its bound (<= 1e-10 nats)."""
    tu, counts, T = _times(200_000)
    m = TimeMoments.of(tu, counts)
    got = m.background_total(T, tau)
    assert got is not None
    want = _exact(tu, counts, T, tau)
    assert abs(got - want) <= max(m.bound(tau), 1e-12 * abs(want)), (got, want)
    assert m.bound(tau) <= MAX_ERROR


def test_bound_holds_where_it_is_large_and_refuses_there():
    """At a short tau_t the Taylor remainder is large: the bound (computed with the real
    fourth moments) is above the real error, and the moments decline (None)."""
    tu, counts, T = _times(100_000, seed=1)
    m = TimeMoments.of(tu, counts)
    for tau in [5.0, 20.0, 100.0]:
        assert m.background_total(T, tau) is None
        approx = m.expansion(T, tau)  # the same sum, without the refusal
        assert abs(approx - _exact(tu, counts, T, tau)) <= m.bound(tau), tau


def test_few_times_are_summed_exactly():
    tu, counts, _ = _times(MIN_TIMES - 1)
    assert TimeMoments.of(tu, counts) is None


@pytest.mark.parametrize("sigma_t", [30.0, 80.0, 400.0])
def test_trigger_total_is_the_exact_sum(sigma_t):
    """The trigger's whole compensator from the fine bins' moments equals the exact sum over
    every distinct time within float64 rounding of 200,000 terms (1e-12 relative) where it
    answers (its bound <= 1e-10), and declines at half a day, where its bound exceeds that
    (and a coarser, first-order sum from moments does miss by more than 1e-10)."""
    tu, counts, T = _times(200_000)
    m = TimeMoments.of(tu, counts, TRIGGER_BINS)
    want = float(np.dot(-np.expm1(-(T - tu) / sigma_t), counts))
    got = m.trigger_total(T, sigma_t)
    assert got is not None
    assert abs(got - want) <= 1e-12 * want, (got, want)
    assert m.trigger_total(T, 0.5) is None
    coarse = TimeMoments.of(tu, counts)  # 16x wider bins: an error the test can see
    g = np.exp((coarse.centre - T) / 0.5)
    rough = counts.sum() - float(np.dot(g, coarse.moments[0] + coarse.moments[1] / 0.5))
    exact_half = float(np.dot(-np.expm1(-(T - tu) / 0.5), counts))
    assert abs(rough - exact_half) > 1e-10
