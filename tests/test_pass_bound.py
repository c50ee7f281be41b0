"""The truncated pass's bound (``engine/pass_bound.py``): ``omega_n`` against a pair sum
written out here, :meth:`PassBound.prepare` (the far sums computed while the device runs the
pass) leaving :meth:`PassBound.omega` nothing to compute, and :class:`DeviceBound` (the same
bound made on the device, the pass's result left there for the row sums) against the host's."""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.engine import pass_bound
from hawkes_cli.engine.draw_index import REACH
from hawkes_cli.engine.grid import level_kappas
from hawkes_cli.engine.pass_bound import RESIDENT, SAFETY, PassBound
from hawkes_cli.model import Params
from tests.conftest import PARAMS, build_backend, make_events


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


def _tied_events(n: int, seed: int):
    """Continuous times with a third of them tied in groups (``lo`` matters), county-like
    locations and densities."""
    t, x, y, d = make_events(n, integer_days=False, seed=seed)
    rng = np.random.default_rng(seed)
    tied = rng.random(n) < 0.35
    t = np.sort(np.where(tied, np.round(t, 1), t))
    return t, x, y, d


def _passes(backend, sigma_x: float, sigma_t: float):
    """One full pass's (E~, omega) with the device's bound and with the host's, on the same
    index and blocks at the backend's cut-off."""
    kappa = backend.kappa
    di = backend._draw.index(sigma_x, kappa)
    blocks = backend._draw.blocks(di, sigma_x, sigma_t, kappa)
    kl = backend._level_kappas(di, kappa)
    run = backend._bounded_pass
    return (
        run(di, blocks, kl, kappa, sigma_x, sigma_t, full=True),
        run(di, blocks, kl, kappa, sigma_x, sigma_t, full=False),
    )


@pytest.mark.opencl
@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("rows", [None, (1100, 2900)])
def test_device_bound_is_the_host_bound(model, rows):
    """E~ is bit for bit the host's (one multiply), omega within float64 rounding of it: the
    far sums' float64 additions in another order (chunks of ``FAR_CHUNK``) and the kernels'
    ``exp_f64`` (within an ulp or two of numpy's) move each row by a few 1e-16 relative;
    1e-12 leaves room and still catches any part left out or counted twice (each is a sizable
    share of omega at this small cut-off). A backend of a rank's rows reads its own rows of
    the far sums, which run over every source."""
    t, x, y, d = _tied_events(4000, seed=7)
    backend = build_backend(
        "truncated", t, x, y, d, model=model, area=1000.0, precision="float32", rows=rows,
        kappa=3.0,
    )  # fmt: skip
    for sigma_x, sigma_t in [(0.1, 4.0), (0.3, 40.0)]:
        dev, host = _passes(backend, sigma_x, sigma_t)
        assert dev.shape == host.shape == (2, backend.row_stop - backend.row_start)
        np.testing.assert_array_equal(dev[0], host[0])
        np.testing.assert_allclose(dev[1], host[1], rtol=1e-12, atol=0)
        assert np.mean(host[1] > 0) > 0.99
        assert backend.resident(dev) is not None and backend.resident(host) is None


@pytest.mark.opencl
def test_a_pass_left_on_the_device_is_summed_there_and_a_reused_slot_is_not():
    """The row sums read a truncated pass where it was made (omega made there, E~ written
    into its slot by the pass): evaluations at new lengthscales upload neither again. After
    more than :data:`RESIDENT` passes the first's
    device slot holds another pass; its cached E then goes up again and its log-likelihood is
    what it was (a stale slot read would give another pass's sum: the lengthscales differ by
    far more than the sums' rounding)."""
    from hawkes_cli.data import EventData
    from hawkes_cli.engine import make_likelihood

    t, x, y, d = _tied_events(3000, seed=11)
    lik = make_likelihood(
        EventData(t, x, y, d), model=1, area=1000.0, engine="opencl", precision="float32",
        tolerance=0.05, background="lattice",
    )  # fmt: skip
    lik.trigger_cache_size = RESIDENT + 4  # the likelihood keeps every pass of this test
    lik.evaluate(PARAMS)
    lik.adapt_cutoff = False
    events = lik.row_sums._events
    sent: list[np.ndarray] = []
    upload = events.upload
    events.upload = lambda host: sent.append(np.asarray(host)) or upload(host)
    params = [Params(**{**PARAMS.__dict__, "sigma_x": 0.08 + 0.01 * k}) for k in range(6)]
    first = [lik.evaluate(p).loglik for p in params[: RESIDENT + 1]]
    stacks = [lik._e_cache[(p.sigma_x, p.sigma_t)] for p in params[: RESIDENT + 1]]
    assert all(s.shape == (2, 3000) for s in stacks)

    def sent_of(stack: np.ndarray) -> int:
        return sum(np.shares_memory(a, stack) for a in sent)

    assert [sent_of(s) for s in stacks] == [0] * (RESIDENT + 1)
    again = lik.evaluate(params[0]).loglik  # cached on the host, its slot reused
    assert sent_of(stacks[0]) == 2  # E and omega up again
    assert again == first[0]
    lik.row_sums._resident = None  # the sums of uploaded copies: the same
    lik.clear_cache()
    assert [lik.evaluate(p).loglik for p in params[: RESIDENT + 1]] == first
