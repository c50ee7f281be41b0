"""The float64 reference engine against the contract written out as plain Python loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hawkes_cli.engine.base import LAMBDA_FLOOR, Likelihood
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.engine.times import TimeStructure
from hawkes_cli.model import Params

from .conftest import PARAMS, make_events


def loop_loglik(t, x, y, d, p: Params, model: int, area: float, T: float | None = None):
    """DESIGN section 2, term by term, with the math module only."""
    n = len(t)
    T = t[-1] if T is None else T
    rho = 1.0 / area
    ell = 0.0
    for i in range(n):
        bg = 0.0
        tr = 0.0
        for m in range(n):
            dt = t[i] - t[m]
            if t[m] != t[i]:
                bg += math.exp(-0.5 * (dt / p.tau_t) ** 2) / (math.sqrt(2 * math.pi) * p.tau_t)
            if t[m] < t[i]:
                s = p.sigma_x if model == 1 else p.sigma_x / math.sqrt(d[m])
                r2 = (x[i] - x[m]) ** 2 + (y[i] - y[m]) ** 2
                phi2 = math.exp(-r2 / (2 * s * s)) / (2 * math.pi * s * s)
                tr += math.exp(-dt / p.sigma_t) / p.sigma_t * phi2
        lam = p.mu0 * rho * bg + p.xi0 * tr
        ell += math.log(max(lam, 1e-40))

        def Phi(z):
            return 0.5 * math.erfc(-z / math.sqrt(2))

        ell -= p.mu0 * (Phi((T - t[i]) / p.tau_t) - Phi(-t[i] / p.tau_t))
        ell -= p.xi0 * (1 - math.exp(-(T - t[i]) / p.sigma_t))
    return ell


def reference(t, x, y, d, model, area, **kw):
    return Likelihood(ReferenceBackend(t, x, y, d, model=model, area=area, **kw), t)


def test_two_events_by_hand():
    # Two events one day and (3, 4) apart: every term written out.
    t, x, y = np.array([0.0, 1.0]), np.array([0.0, 3.0]), np.array([0.0, 4.0])
    p = Params(mu0=0.5, tau_t=2.0, xi0=0.25, sigma_x=5.0, sigma_t=4.0)
    area = 100.0
    phi1 = math.exp(-1 / 8) / (math.sqrt(2 * math.pi) * 2)  # phi1(1; 2)
    phi2 = math.exp(-25 / 50) / (2 * math.pi * 25)  # |v|=5, s=5
    lam1 = 0.5 / 100 * phi1
    lam2 = 0.5 / 100 * phi1 + 0.25 * math.exp(-1 / 4) / 4 * phi2

    def Phi(z):
        return 0.5 * math.erfc(-z / math.sqrt(2))

    comp = 0.5 * (Phi(1 / 2) - Phi(0)) + 0.25 * (1 - math.exp(-1 / 4))  # event at t=0
    comp += 0.5 * (Phi(0) - Phi(-1 / 2)) + 0.0  # event at t=1=T
    expected = math.log(lam1) + math.log(lam2) - comp
    assert reference(t, x, y, None, 1, area).loglik(p) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("integer_days", [True, False])
def test_matches_loops(model, integer_days):
    t, x, y, d = make_events(60, integer_days=integer_days, seed=3)
    want = loop_loglik(t, x, y, d, PARAMS, model, area=900.0)
    got = reference(t, x, y, d, model, 900.0).loglik(PARAMS)
    assert got == pytest.approx(want, rel=1e-12)


def test_window_end_changes_only_compensator():
    t, x, y, d = make_events(40, integer_days=False, seed=4)
    want = loop_loglik(t, x, y, d, PARAMS, 1, area=50.0, T=t[-1] + 30.0)
    lik = Likelihood(ReferenceBackend(t, x, y, d, model=1, area=50.0), t, window_end=t[-1] + 30)
    assert lik.loglik(PARAMS) == pytest.approx(want, rel=1e-12)


def test_all_ties_use_floor():
    # Every event at one time: no background (ties skipped) and no trigger -> floor.
    t = np.zeros(4)
    lik = reference(t, np.arange(4.0), np.zeros(4), None, 1, 10.0)
    ev = lik.evaluate(PARAMS)
    assert np.all(ev.B == 0) and np.all(ev.E == 0)
    assert ev.loglik == pytest.approx(4 * math.log(LAMBDA_FLOOR), rel=1e-15)


def test_blocking_does_not_change_result():
    t, x, y, d = make_events(500, integer_days=True, seed=5)
    a = reference(t, x, y, d, 2, 900.0).evaluate(PARAMS)
    b = reference(t, x, y, d, 2, 900.0, block_elems=997).evaluate(PARAMS)  # 1-row blocks
    np.testing.assert_allclose(a.B, b.B, rtol=1e-14)
    np.testing.assert_allclose(a.E, b.E, rtol=1e-14)


def test_time_structure():
    ts = TimeStructure.from_times(np.array([0.0, 1.0, 1.0, 1.0, 2.5, 4.0, 4.0]))
    assert ts.lo.tolist() == [0, 1, 1, 1, 4, 5, 5]
    assert ts.hi.tolist() == [1, 4, 4, 4, 5, 7, 7]
    assert ts.counts.tolist() == [1, 3, 1, 2]
    assert ts.inverse.tolist() == [0, 1, 1, 1, 2, 3, 3]
    with pytest.raises(ValueError):
        TimeStructure.from_times(np.array([1.0, 0.0]))
