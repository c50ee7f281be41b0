"""An evaluation's per-row sums on the device (engine/device_sums.py) against numpy's.

With the background on a time lattice, an OpenCL likelihood sums ``log lambda_n`` and the two
bounds' terms on its device instead of building ``B`` on the host (issue 40). Each test
evaluates the same parameters with the device sums and with the host's (``row_sums = None``:
:func:`hawkes_cli.engine.row_sums.host_sums`, the code every evaluation ran before) and
compares. Tolerances: the sums are over a few thousand rows of magnitude ~10 each, so float64
rounding of two summation orders differs by ~1e-12 nats; 1e-9 leaves room and still catches
any wrong term (one row's ``log lambda`` is ~10 nats, a wrong fraction or cell shifts it by
far more than 1e-9).
"""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.engine import make_likelihood
from hawkes_cli.model import Params
from tests.conftest import PARAMS, make_events

pytestmark = pytest.mark.opencl

AREA = 1000.0


def _data(n: int, *, integer_days: bool):
    from hawkes_cli.data import EventData

    t, x, y, d = make_events(n, integer_days=integer_days, seed=3)
    return EventData(t, x, y, d)


def _both(lik, params: list[Params]) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """(device, host) of (loglik, error_bound, background_bound) at each of ``params``, at
    one cut-off (a truncated trigger's, settled by a first evaluation and then kept)."""
    lik.evaluate(params[0])
    lik.adapt_cutoff = False

    def sums() -> list[tuple[float, float, float]]:
        lik.clear_cache()
        evs = [lik.evaluate(p) for p in params]
        return [(ev.loglik, ev.error_bound, ev.background_bound) for ev in evs]

    device = sums()
    lik.row_sums = None
    return list(zip(device, sums(), strict=True))


TAUS = (20.0, 3.0, 0.3, 400.0)  # fine and coarse lattices, the bound small and large


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize(
    ("precision", "tolerance"), [("float64", 0.0), ("float32", 0.05), ("float64", 0.01)]
)
def test_device_sums_equal_the_host_sums_off_a_lattice(model, precision, tolerance):
    """Continuous times (a bounded lattice, beta > 0), exact and truncated triggers (omega)."""
    lik = make_likelihood(
        _data(3000, integer_days=False), model=model, area=AREA, engine="opencl",
        precision=precision, tolerance=tolerance, background="lattice",
    )  # fmt: skip
    assert lik.row_sums is not None and not lik.lattice.exact
    params = [Params(**{**PARAMS.__dict__, "tau_t": tau}) for tau in TAUS]
    params.append(Params(**{**PARAMS.__dict__, "mu0": 3.0, "xi0": 0.01}))
    for (dev, host), p in zip(_both(lik, params), params, strict=True):
        assert dev[0] == pytest.approx(host[0], rel=0, abs=1e-9), p
        assert dev[1] == pytest.approx(host[1], rel=1e-9, abs=1e-15), p
        assert dev[2] == pytest.approx(host[2], rel=1e-9, abs=1e-15), p
        assert dev[2] > 0  # the lattice's bound is summed, not left out


def test_device_sums_on_an_exact_lattice():
    """Whole days: every event on the lattice, ``B~ = B`` and the bound 0 on both paths."""
    lik = make_likelihood(
        _data(3000, integer_days=True), model=1, area=AREA, engine="opencl",
        precision="float64", background="lattice",
    )  # fmt: skip
    assert lik.lattice.exact
    for dev, host in _both(lik, [Params(**{**PARAMS.__dict__, "tau_t": t}) for t in TAUS]):
        assert dev[0] == pytest.approx(host[0], rel=0, abs=1e-9)
        assert dev[2] == host[2] == 0.0


def test_device_sums_without_b_still_give_components():
    """The device path builds no ``B``; :meth:`components` still returns it (from the host),
    and ``lambda`` from it gives the same log-likelihood's first term."""
    lik = make_likelihood(
        _data(2000, integer_days=False), model=1, area=AREA, engine="opencl",
        precision="float64", background="lattice",
    )  # fmt: skip
    ev = lik.evaluate(PARAMS)
    assert ev.B is None
    B, E = lik.components(PARAMS)
    lam = np.maximum(PARAMS.mu0 * B + PARAMS.xi0 * E, 1e-40)
    lik.row_sums = None
    lik.clear_cache()
    host = lik.evaluate(PARAMS)
    np.testing.assert_array_equal(B, host.B)
    assert np.all(lam > 0)
    assert ev.loglik == pytest.approx(host.loglik, abs=1e-9)


def test_device_sums_upload_a_trigger_pass_once():
    """Cheap moves (``mu0``, ``xi0``, ``tau_t``) reuse the trigger's device copy: a run of
    them uploads only the lattice's arrays, never ``E`` again; a new trigger pass goes up once."""
    lik = make_likelihood(
        _data(4000, integer_days=False), model=1, area=AREA, engine="opencl",
        precision="float64", background="lattice",
    )  # fmt: skip
    lik.evaluate(PARAMS)
    uploaded = []
    orig = lik.row_sums._events.upload

    def spy(host):
        uploaded.append(np.asarray(host))
        return orig(host)

    lik.row_sums._events.upload = spy
    E = lik.evaluate(PARAMS).E
    for k in range(6):
        lik.evaluate(Params(**{**PARAMS.__dict__, "mu0": 0.4 + 0.01 * k, "tau_t": 20.0 + k}))
    assert uploaded and not any(np.shares_memory(a, E) for a in uploaded)
    moved = Params(**{**PARAMS.__dict__, "sigma_x": 0.09})
    E2 = lik.evaluate(moved).E
    lik.evaluate(Params(**{**moved.__dict__, "mu0": 0.5}))
    assert sum(np.shares_memory(a, E2) for a in uploaded) == 1


def test_renormalized_edge_error_on_the_device():
    """``renormalized``: its edge error, ``sum_n (xi0 E_n / lambda_n) e_n / M_n``, is the
    fourth device sum; log-likelihood and edge error equal the host's."""
    from hawkes_cli.engine.region import RectangleRegion

    data = _data(1500, integer_days=False)
    box = (data.x.min() + 5, data.x.max() - 5, data.y.min() + 3, data.y.max() - 3)
    region = RectangleRegion(tuple(float(v) for v in box))
    lik = make_likelihood(
        data, model=1, area=region.area, engine="opencl", precision="float64",
        background="lattice", region=region, edge="renormalized",
    )  # fmt: skip
    assert lik.row_sums is not None
    params = [PARAMS, Params(**{**PARAMS.__dict__, "sigma_x": 0.3, "tau_t": 3.0})]
    device = [lik.evaluate(p) for p in params]
    lik.row_sums = None
    lik.clear_cache()
    for dev, p in zip(device, params, strict=True):
        host = lik.evaluate(p)
        assert host.edge_error > 0
        assert dev.edge_error == pytest.approx(host.edge_error, rel=1e-9)
        assert dev.loglik == pytest.approx(host.loglik, rel=0, abs=1e-9)
