"""The truncated pass's host bound (``engine/pass_bound.py``): ``omega_n`` against a pair sum
written out here, and :meth:`PassBound.prepare` (the far sums computed while the device runs
the pass) leaving :meth:`PassBound.omega` nothing to compute."""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.engine import pass_bound
from hawkes_cli.engine.draw_index import REACH
from hawkes_cli.engine.grid import level_kappas
from hawkes_cli.engine.pass_bound import SAFETY, PassBound


def _events(n: int = 300, seed: int = 3):
    """Sorted times with ties (whole days half the time), two density levels."""
    rng = np.random.default_rng(seed)
    t = np.sort(
        np.where(rng.random(n) < 0.5, np.floor(rng.uniform(0, 60, n)), rng.uniform(0, 60, n))
    )
    lo = np.searchsorted(t, t, side="left")  # first index of each tie group
    level = rng.integers(0, 2, n)
    ceil = np.array([4.0, 1.0])
    weight = rng.uniform(0.2, 4.0, n)
    return t, weight, lo, level, ceil


def _far_by_pairs(t, weight, lo, level, ceil, sigma_t, factor, kappa):
    """``sum_{m < lo_n} exp(-factor kappa_l(m)) w_m exp(-(t_n - t_m) / sigma_t)``, pair by pair."""
    w = weight * np.exp(-factor * level_kappas(kappa, ceil))[level]
    return np.array(
        [np.sum(w[: lo[i]] * np.exp(-(t[i] - t[: lo[i]]) / sigma_t)) for i in range(t.size)]
    )


@pytest.mark.parametrize("exp_mode", [True, False])
def test_omega_is_the_written_out_bound_and_prepare_leaves_it_nothing_to_compute(
    monkeypatch, exp_mode
):
    t, weight, lo, level, ceil = _events()
    rows = (40, 260)
    sigma_t, kappa, norm = 7.5, 2.0, 0.37  # a small cut-off: the far part is not negligible
    rng = np.random.default_rng(5)
    tail, ring = rng.uniform(0, 1, rows[1] - rows[0]), rng.uniform(0, 1, rows[1] - rows[0])
    calls = []
    real = pass_bound.temporal_sums
    monkeypatch.setattr(pass_bound, "temporal_sums", lambda *a: calls.append(a[-1]) or real(*a))
    bound = PassBound(t, weight, lo, level, ceil, rows)
    bound.prepare(sigma_t, kappa, exp_mode)
    assert calls == [sigma_t]
    got = bound.omega(tail, ring, norm, sigma_t, kappa, exp_mode)
    assert calls == [sigma_t]  # omega read what prepare computed
    factor = REACH**2 if exp_mode else 1.0
    far = _far_by_pairs(t, weight, lo, level, ceil, sigma_t, factor, kappa)[rows[0] : rows[1]]
    want = norm * (tail + (ring if exp_mode else 0.0) + far) * SAFETY
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # another sigma_t is computed afresh, and is not the first one's
    other = bound.omega(tail, ring, norm, 2 * sigma_t, kappa, exp_mode)
    assert calls == [sigma_t, 2 * sigma_t]
    assert not np.allclose(other, got)
