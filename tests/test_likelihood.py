"""The contract of Likelihood (engine/base.py), for every backend: reference, exact OpenCL and
truncated (the ``make_backend`` fixture of conftest.py).

B depends only on tau_t and E only on (sigma_x, sigma_t): a change of mu0 or xi0 runs no pair
pass, a change of tau_t only the background pass, a change of sigma_x or sigma_t only the
trigger pass; the value after a cache hit is exactly that of a fresh engine. Also the
provenance (kernel fingerprint) and the checkpointed cut-off each backend reports.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest

from hawkes_cli.engine.base import LAMBDA_FLOOR, BoundedPairBackend, Likelihood

from .conftest import PARAMS, build_backend, make_events

AREA = 1200.0
N = 600


@pytest.fixture(scope="module")
def events():
    return make_events(N, integer_days=True, seed=21)


def fresh(make_backend, events, model, *, x=None, y=None, window_end=None):
    t, x0, y0, d = events
    x = x0 if x is None else x
    y = y0 if y is None else y
    return Likelihood(make_backend(t, x, y, d, model=model, area=AREA), t, window_end=window_end)


def passes(lik):
    return (lik.background_passes, lik.trigger_passes)


def changed(p, **kw):
    return dataclasses.replace(p, **kw)


@pytest.mark.parametrize("model", [1, 2])
def test_first_evaluation_runs_both_passes(make_backend, events, model):
    lik = fresh(make_backend, events, model)
    assert passes(lik) == (0, 0)
    lik.loglik(PARAMS)
    assert passes(lik) == (1, 1)
    assert lik.pair_passes == 2
    lik.loglik(PARAMS)  # same point again: no pass at all
    assert passes(lik) == (1, 1)


@pytest.mark.parametrize(
    "update",
    [{"mu0": 0.9}, {"xi0": 0.05}, {"mu0": 2.5, "xi0": 1.7}],
    ids=["mu0", "xi0", "both"],
)
@pytest.mark.parametrize("model", [1, 2])
def test_weights_need_no_pair_pass(make_backend, events, model, update):
    lik = fresh(make_backend, events, model)
    before = lik.loglik(PARAMS)
    q = changed(PARAMS, **update)
    value = lik.loglik(q)
    assert passes(lik) == (1, 1)
    assert value != before  # the weights do change the value
    assert value == fresh(make_backend, events, model).loglik(q)  # bit for bit


@pytest.mark.parametrize("model", [1, 2])
def test_tau_t_runs_only_background(make_backend, events, model):
    lik = fresh(make_backend, events, model)
    lik.loglik(PARAMS)
    q = changed(PARAMS, tau_t=PARAMS.tau_t * 1.7)
    value = lik.loglik(q)
    assert passes(lik) == (2, 1)
    assert value == fresh(make_backend, events, model).loglik(q)


@pytest.mark.parametrize("name", ["sigma_x", "sigma_t"])
@pytest.mark.parametrize("model", [1, 2])
def test_trigger_scales_run_only_trigger(make_backend, events, model, name):
    lik = fresh(make_backend, events, model)
    lik.loglik(PARAMS)
    q = changed(PARAMS, **{name: getattr(PARAMS, name) * 1.3})
    value = lik.loglik(q)
    assert passes(lik) == (1, 2)
    assert value == fresh(make_backend, events, model).loglik(q)


def test_mixed_change_runs_both(make_backend, events):
    lik = fresh(make_backend, events, 1)
    lik.loglik(PARAMS)
    q = changed(PARAMS, tau_t=3.0, sigma_t=2.0, mu0=0.1)
    value = lik.loglik(q)
    assert passes(lik) == (2, 2)
    assert value == fresh(make_backend, events, 1).loglik(q)


@pytest.mark.parametrize(
    "update",
    [{"tau_t": 35.0}, {"sigma_x": 0.2}, {"sigma_t": 1.5}, {"tau_t": 7.0, "sigma_x": 0.03}],
    ids=["tau_t", "sigma_x", "sigma_t", "tau_t+sigma_x"],
)
def test_alternating_current_and_proposal_hits_cache(make_backend, events, update):
    """MCMC evaluates the proposal, rejects it, and comes back to the current state."""
    lik = fresh(make_backend, events, 2)
    current, proposal = PARAMS, changed(PARAMS, **update)
    a = lik.loglik(current)
    b = lik.loglik(proposal)
    after_two = passes(lik)
    for _ in range(5):
        assert lik.loglik(current) == a
        assert lik.loglik(proposal) == b
        # weight-only moves around both points are free as well
        lik.loglik(changed(current, mu0=0.77))
        lik.loglik(changed(proposal, xi0=0.33))
    assert passes(lik) == after_two
    assert a != b


def test_cache_evicts_oldest(make_backend, events):
    lik = fresh(make_backend, events, 1)
    taus = [10.0, 20.0, 30.0]
    for tau in taus:
        lik.loglik(changed(PARAMS, tau_t=tau))
    assert passes(lik) == (3, 1)
    lik.loglik(changed(PARAMS, tau_t=30.0))  # newest: cached
    lik.loglik(changed(PARAMS, tau_t=20.0))  # second newest: cached
    assert passes(lik) == (3, 1)
    lik.loglik(changed(PARAMS, tau_t=10.0))  # evicted: recomputed
    assert passes(lik) == (4, 1)


def test_clear_cache_forces_both_passes(make_backend, events):
    lik = fresh(make_backend, events, 1)
    a = lik.loglik(PARAMS)
    lik.clear_cache()
    assert lik.loglik(PARAMS) == a
    assert passes(lik) == (2, 2)


@pytest.mark.parametrize("model", [1, 2])
def test_set_locations_forces_trigger_pass(make_backend, events, model):
    _, x, y, _ = events
    rng = np.random.default_rng(99)
    x2 = x + rng.normal(scale=0.05, size=x.size)
    y2 = y + rng.normal(scale=0.05, size=y.size)
    lik = fresh(make_backend, events, model)
    old = lik.evaluate(PARAMS)
    lik.set_locations(x2, y2)
    new = lik.evaluate(PARAMS)
    assert passes(lik) == (1, 2)  # B does not depend on locations
    want = fresh(make_backend, events, model, x=x2, y=y2).evaluate(PARAMS)
    assert new.loglik == want.loglik
    np.testing.assert_array_equal(new.B, old.B)
    np.testing.assert_array_equal(new.E, want.E)
    assert not np.array_equal(new.E, old.E)
    # the trigger state from before the move is gone, even the one not evaluated last
    q = changed(PARAMS, sigma_t=PARAMS.sigma_t * 2)
    lik.loglik(q)
    lik.set_locations(x, y)
    lik.loglik(PARAMS)
    assert passes(lik) == (1, 4)
    assert lik.loglik(PARAMS) == old.loglik


def _Phi(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def loglik_from_parts(B, E, t, p, T):
    """DESIGN section 2 from the per-event parts, with the math module."""
    ell = 0.0
    for b, e, tn in zip(B.tolist(), E.tolist(), t.tolist(), strict=True):
        ell += math.log(max(p.mu0 * b + p.xi0 * e, 1e-40))
        ell -= p.mu0 * (_Phi((T - tn) / p.tau_t) - _Phi(-tn / p.tau_t))
        ell -= p.xi0 * (1.0 - math.exp(-(T - tn) / p.sigma_t))
    return ell


@pytest.mark.parametrize("window", [None, 25.0])
@pytest.mark.parametrize("model", [1, 2])
def test_evaluation_parts_reproduce_loglik(make_backend, events, model, window):
    t = events[0]
    T = None if window is None else float(t[-1]) + window
    lik = fresh(make_backend, events, model, window_end=T)
    ev = lik.evaluate(PARAMS)
    assert ev.B.shape == ev.E.shape == (N,)
    assert ev.B.dtype == ev.E.dtype == np.float64
    assert np.all(ev.B >= 0) and np.all(ev.E >= 0)
    # the first tie group has no earlier source: E is exactly zero there
    first = np.flatnonzero(t == t[0])
    assert np.all(ev.E[first] == 0.0)
    want = loglik_from_parts(ev.B, ev.E, t, PARAMS, t[-1] if T is None else T)
    assert ev.loglik == pytest.approx(want, rel=1e-12)
    # lambda = mu0 B + xi0 E: the parts are the same for other weights, and reproduce them too
    q = changed(PARAMS, mu0=3.0, xi0=0.01)
    ev2 = lik.evaluate(q)
    np.testing.assert_array_equal(ev2.B, ev.B)
    np.testing.assert_array_equal(ev2.E, ev.E)
    assert ev2.loglik == pytest.approx(
        loglik_from_parts(ev.B, ev.E, t, q, t[-1] if T is None else T), rel=1e-12
    )


def test_parts_match_reference_by_hand(events):
    """B and E of a few rows written out from DESIGN section 2 (model 2)."""
    t, x, y, d = events
    ev = fresh(functools.partial(build_backend, "reference"), events, 2).evaluate(PARAMS)
    p = PARAMS
    for n in (0, 17, N // 2, N - 1):
        b = sum(
            math.exp(-0.5 * ((t[n] - t[m]) / p.tau_t) ** 2) / (math.sqrt(2 * math.pi) * p.tau_t)
            for m in range(N)
            if t[m] != t[n]
        )
        e = 0.0
        for m in range(N):
            if t[m] < t[n]:
                s2 = p.sigma_x**2 / d[m]
                r2 = (x[n] - x[m]) ** 2 + (y[n] - y[m]) ** 2
                decay = math.exp(-(t[n] - t[m]) / p.sigma_t) / p.sigma_t
                e += decay * math.exp(-r2 / (2 * s2)) / (2 * math.pi * s2)
        assert ev.B[n] == pytest.approx(b / AREA, rel=1e-12)
        assert ev.E[n] == pytest.approx(e, rel=1e-10, abs=1e-300)


def test_floor_applies_to_lambda(make_backend):
    # Two far-apart events: lambda underflows to 0 for the first one, the floor keeps it finite
    t = np.array([0.0, 1000.0])
    x = np.array([0.0, 50.0])
    y = np.array([0.0, 50.0])
    lik = Likelihood(make_backend(t, x, y, None, model=1, area=AREA), t)
    ev = lik.evaluate(PARAMS)
    assert ev.B[0] == 0.0 and ev.E[0] == 0.0
    want = loglik_from_parts(ev.B, ev.E, t, PARAMS, 1000.0)
    assert math.isfinite(ev.loglik)
    assert ev.loglik == pytest.approx(want, rel=1e-12)
    assert ev.loglik < 2 * math.log(LAMBDA_FLOOR) + 1


@pytest.mark.parametrize("model", [1, 2])
def test_kernel_fingerprint_and_truncation_state(make_backend, backend_kind, events, model):
    """Provenance and checkpoint of each kind: no kernel and no cut-off for the reference; the
    exact OpenCL program; both programs and the cut-off ``{"kappa": float}`` for truncation."""
    lik = fresh(make_backend, events, model)
    fingerprint = lik.kernel_fingerprint
    state = lik.truncation_state()
    if backend_kind == "reference":
        assert fingerprint == ""
    else:
        from hawkes_cli import kernels

        programs = [("float64", False)] + ([("float64", True)] * (backend_kind == "truncated"))
        assert fingerprint == kernels.kernel_fingerprint(programs)
        assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    assert isinstance(lik.backend, BoundedPairBackend) == (backend_kind == "truncated")
    if backend_kind != "truncated":
        assert state is None
        lik.restore_truncation({"kappa": 3.0})  # ignored
        assert lik.truncation_state() is None
        return
    assert state == {"kappa": 25.0}
    a = lik.evaluate(PARAMS)
    lik.restore_truncation({"kappa": 30.0})
    assert lik.truncation_state() == {"kappa": 30.0}
    b = lik.loglik(PARAMS)  # the cached trigger was dropped: recomputed at the new cut-off
    assert passes(lik) == (1, 2)
    # the tighter cut-off omits less: both within kappa 25's bound of the exact value
    assert abs(b - a.loglik) <= a.error_bound + 1e-9 * abs(a.loglik)
    lik.restore_truncation(None)  # nothing to restore
    assert lik.truncation_state() == {"kappa": 30.0}


def test_make_likelihood_builds_one_time_structure(backend_kind, events, monkeypatch):
    """make_likelihood builds the tie structure once and hands it to the backend and the
    likelihood (the truncated engine included), with the same value as building it anew."""
    from hawkes_cli.data import EventData
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.engine.times import TimeStructure

    built = []
    real = TimeStructure.from_times.__func__
    monkeypatch.setattr(
        TimeStructure, "from_times", classmethod(lambda cls, t: built.append(1) or real(cls, t))
    )
    t, x, y, d = events
    data = EventData(time=t, x=x, y=y, density=d, source="test")
    engine = "reference" if backend_kind == "reference" else "opencl"
    tolerance = 1e-2 if backend_kind == "truncated" else 0.0  # build_backend's default
    lik = make_likelihood(
        data, model=2, area=AREA, engine=engine, precision="float64", tolerance=tolerance
    )
    assert len(built) == 1
    monkeypatch.undo()
    # the same value as a backend built on its own (truncated: tolerance 1e-2 nats, default kappa)
    alone = fresh(functools.partial(build_backend, backend_kind), events, 2)
    assert lik.loglik(PARAMS) == alone.loglik(PARAMS)
