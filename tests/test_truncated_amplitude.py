"""The truncated trigger with a per-source amplitude (``model.edge: renormalized`` at scale).

Source m's trigger terms are weighted by ``a_m = 1 / M_m``; the truncated kernels carry it in
their pair terms (``truncated_scaled``, ``truncated_scaled2``) and, through the float64 weights
``w_m a_m``, in every bound (prefix sums, Hermite moments, far sums). References, independent
of the truncated kernels: the float64 reference backend with the same amplitudes (a numpy pair
sum), and the log-likelihood of ``test_renormalized`` written out by hand.

A kernel that dropped the amplitude from its pair terms would miss about half of every row's
sum (amplitudes here average about 2), far beyond a bound that carries it; a bound that dropped
it would be too small by the same factor wherever terms are omitted.
"""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.data import EventData
from hawkes_cli.engine import make_likelihood
from hawkes_cli.engine.base import MIN_RENORMALIZED_MASS, Likelihood
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.model import Params

from .conftest import build_backend
from .test_renormalized import AREA as BOX_AREA
from .test_renormalized import REGION, _by_hand
from .test_truncated import AREA, _events, dense_city_events

pytestmark = pytest.mark.opencl

PARAMS = {
    "paper": Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.08, sigma_t=6.0),
    "wide": Params(mu0=0.3, tau_t=10.0, xi0=0.7, sigma_x=1.5, sigma_t=30.0),
}
# float32: the pair terms' working-precision rounding (test_truncated's tolerances)
ROUNDING = {"float64": 1e-10, "float32": 1e-5}


def _amplitudes(n: int, seed: int) -> np.ndarray:
    """Amplitudes as renormalized gives them: 1 for most sources, up to 1 / (the mass floor)
    for a few (a speck of land under a wide kernel), mean about 2."""
    rng = np.random.default_rng(seed)
    a = np.where(rng.uniform(size=n) < 0.5, 1.0, np.exp(rng.uniform(0.0, 1.5, n)))
    a[rng.choice(n, size=max(n // 100, 1), replace=False)] = 1.0 / MIN_RENORMALIZED_MASS
    return a


def _rowwise(e, omega, e0, rounding):
    assert np.all(omega >= 0)
    assert np.all(e0 - e <= omega + rounding * e0 + 1e-300)
    assert np.all(e <= e0 * (1 + rounding) + 1e-300)


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("kind", ["clustered", "uniform", "cities"])
@pytest.mark.parametrize("name", list(PARAMS))
def test_rows_within_their_bound_against_the_reference(kind, name, model):
    """float64, a cut-off loose enough that terms are omitted: each row's truncated sum lies
    between the numpy pair sum with the same amplitudes minus its bound and that sum, and the
    log-likelihood within the realised bound."""
    p = PARAMS[name]
    t, x, y, d = _events(kind, 1500, seed=3)
    a = _amplitudes(t.size, seed=4)
    ref = ReferenceBackend(t, x, y, d, model=model, area=AREA)
    ref.set_amplitude(a)
    tr = build_backend("truncated", t, x, y, d, model=model, area=AREA, kappa=4.0)
    tr.set_amplitude(a)
    e0 = ref.trigger(p.sigma_x, p.sigma_t)
    e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    assert "truncation" in tr.trigger_path
    _rowwise(e, omega, e0, ROUNDING["float64"])
    assert np.sum(e0 - e) > 0  # terms were omitted
    lik = Likelihood(tr, t)
    ev = lik.evaluate(p)
    truth = Likelihood(ref, t).loglik(p)
    assert abs(ev.loglik - truth) <= ev.error_bound + 1e-10 * abs(truth)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("model", [1, 2])
def test_expansion_boxes_carry_the_amplitude(model, precision):
    """A dense city summed by its Hermite moments: the moments are of ``w_m a_m``, the newer
    sources pair by pair with ``a_m``; every row within its bound of the exact scaled kernel
    (float64), which itself equals the reference."""
    p = Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.05, sigma_t=10.0)
    t, x, y, d = dense_city_events(3000, seed=11)
    a = _amplitudes(t.size, seed=12)
    exact = build_backend("opencl", t, x, y, d, model=model, area=AREA)
    exact.set_amplitude(a)
    e0 = exact.trigger(p.sigma_x, p.sigma_t)
    ref = ReferenceBackend(t, x, y, d, model=model, area=AREA)
    ref.set_amplitude(a)
    np.testing.assert_allclose(e0, ref.trigger(p.sigma_x, p.sigma_t), rtol=1e-11, atol=1e-300)
    tr = build_backend("truncated", t, x, y, d, model=model, area=AREA, precision=precision,
                       kappa=12.0)  # fmt: skip
    tr.set_amplitude(a)
    e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    index = tr._draw.index(p.sigma_x, tr.kappa).index
    assert t.size - index.expanded[1] > 1000  # most of the city is in expansion boxes
    _rowwise(e, omega, e0, ROUNDING[precision])
    # on most rows the amplitudes add more than the bound allows: a kernel (or moments)
    # without them would fail there
    plain = ReferenceBackend(t, x, y, d, model=model, area=AREA).trigger(p.sigma_x, p.sigma_t)
    assert np.mean(e0 - plain > omega + 1e-5 * e0) > 0.5
    # the self-check's rows (the exact kernel on a sample, with amplitudes) agree too
    assert tr.check_failure is None
    rows = np.array([5, 700, 2999])
    np.testing.assert_allclose(exact.trigger_at(rows, p.sigma_x, p.sigma_t), e0[rows],
                               rtol=1e-12)  # fmt: skip


def test_amplitudes_replaced_and_dropped():
    """New amplitudes reach the next pass (prefix sums and far sums are of the new weights),
    and None brings back the unscaled sums exactly."""
    p = PARAMS["paper"]
    t, x, y, d = _events("clustered", 1500, seed=3)
    tr = build_backend("truncated", t, x, y, d, model=2, area=AREA, kappa=4.0)
    plain = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    ref = ReferenceBackend(t, x, y, d, model=2, area=AREA)
    for seed in (1, 2):
        a = _amplitudes(t.size, seed)
        tr.set_amplitude(a)
        ref.set_amplitude(a)
        e, omega = tr.trigger_bounded(p.sigma_x, p.sigma_t)
        _rowwise(e, omega, ref.trigger(p.sigma_x, p.sigma_t), ROUNDING["float64"])
    tr.set_amplitude(None)
    again = tr.trigger_bounded(p.sigma_x, p.sigma_t)
    np.testing.assert_array_equal(again[0], plain[0])
    np.testing.assert_array_equal(again[1], plain[1])


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("model", [1, 2])
def test_renormalized_likelihood_truncated_against_the_hand_computation(model, precision):
    """``model.edge: renormalized`` with ``engine.trigger: truncated``: the log-likelihood
    within its reported bound (truncation and edge masses) of DESIGN section 2 written out by
    hand, plus float32 rounding (as in test_truncated: 1e-2 nats at these sizes)."""
    rng = np.random.default_rng(3)
    n = 600
    data = EventData(
        time=np.sort(rng.uniform(0.0, 50.0, n)),
        x=rng.uniform(0.0, 10.0, n),
        y=rng.uniform(0.0, 6.0, n),
        density=rng.uniform(0.5, 4.0, n),
        source="test",
    )
    p = Params(mu0=0.8, tau_t=3.0, xi0=0.6, sigma_x=0.3, sigma_t=1.0)
    lik = make_likelihood(
        data, model=model, area=BOX_AREA, engine="opencl", precision=precision,
        tolerance=0.05, trigger="truncated", region=REGION, edge="renormalized",
    )  # fmt: skip
    ev = lik.evaluate(p)
    assert "trigger: truncation" in lik.path
    assert ev.error_bound > 0
    want = _by_hand(data, p, model)
    slack = 1e-10 * abs(want) if precision == "float64" else 1e-6 * abs(want) + 1e-2
    assert abs(ev.loglik - want) <= ev.error_bound + ev.edge_error + slack
