"""Background on a time lattice (engine/binned.py) against the float64 reference pair sum.

On a lattice the binned background must be the exact sum (bound 0); off it, every row's error
must lie within its bound, and the bound must be near the realised error (not vacuous).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hawkes_cli.engine.binned import (
    BUDGET_NATS,
    MAX_POINTS,
    RESOLUTION,
    BinnedBackground,
    resolution_for,
)
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.engine.times import TimeStructure

AREA = 738.0
TAUS = (0.5, 1.0, 5.0, 20.0, 200.0)


def binned(t: np.ndarray, rows: tuple[int, int] | None = None, **kw) -> BinnedBackground:
    return BinnedBackground(
        t, area=AREA, rows=rows or (0, t.size), times=TimeStructure.from_times(t), **kw
    )


def reference(t: np.ndarray, tau: float) -> np.ndarray:
    zeros = np.zeros_like(t)
    return ReferenceBackend(t, zeros, zeros, None, model=1, area=AREA).background(tau)


def rounding(b: np.ndarray, tau: float) -> np.ndarray:
    """Float64 rounding, which the bound leaves out: relative to B, and absolute at the
    scale of ``rho phi1(0)`` (see the module's "Rounding")."""
    return 1e-12 * np.abs(b) + 1e-13 / (AREA * math.sqrt(2.0 * math.pi) * tau)


def continuous_times(n: int = 3000, seed: int = 0) -> np.ndarray:
    """Distinct times over 700 days: a uniform part and three bursts (varying density)."""
    rng = np.random.default_rng(seed)
    k = n // 2
    t = np.concatenate(
        [rng.uniform(0.0, 700.0, k), rng.normal(rng.choice([120.0, 400.0, 610.0], n - k), 6.0)]
    )
    return np.sort(np.clip(t, 0.0, 700.0))


def day_times(n: int = 3000, seed: int = 1, offset: float = 0.0, step: float = 1.0) -> np.ndarray:
    """Times on a lattice of ``step`` days (many ties) starting at ``offset``."""
    rng = np.random.default_rng(seed)
    return np.sort(offset + step * np.floor(rng.uniform(0.0, 300.0, n)))


@pytest.mark.parametrize(
    ("offset", "step"), [(0.0, 1.0), (17.25, 1.0), (0.375, 0.25), (-5.0, 4.0)], ids=str
)
def test_lattice_data_are_exact(offset: float, step: float) -> None:
    t = day_times(n=1500, offset=offset, step=step)
    assert np.unique(t).size < t.size  # ties
    bb = binned(t)
    assert bb.exact
    assert bb.spacing == step  # the coarsest lattice the data lie on
    assert "exact" in bb.path
    for tau in TAUS:
        b, beta = bb.background(tau)
        ref = reference(t, tau)
        assert b.dtype == np.float64 and b.shape == t.shape and beta.shape == t.shape
        assert np.all(beta == 0.0)
        np.testing.assert_allclose(b, ref, rtol=1e-12, atol=0)


def test_nearly_lattice_data_are_bounded_tightly() -> None:
    """17.3 + whole days: in float64 their differences are not all whole (17.3 is not a
    binary fraction), so they are not on a lattice; the bound covers the 1e-15 day offsets."""
    t = day_times(n=1500, offset=17.3)
    bb = binned(t)
    assert not bb.exact
    for tau in (0.5, 20.0):
        b, beta = bb.background(tau)
        ref = reference(t, tau)
        assert np.all(np.abs(b - ref) <= beta + rounding(ref, tau))
        assert np.max(beta / ref) < 1e-9


def test_lattice_data_at_a_finer_explicit_spacing_are_exact() -> None:
    t = day_times(n=500)
    bb = binned(t, spacing=2.0**-3)
    assert bb.exact and bb.spacing == 0.125
    b, beta = bb.background(2.0)
    assert np.all(beta == 0.0)
    np.testing.assert_allclose(b, reference(t, 2.0), rtol=1e-12, atol=0)


@pytest.fixture(scope="module")
def continuous() -> tuple[np.ndarray, BinnedBackground, dict[float, tuple]]:
    t = continuous_times()
    bb = binned(t)
    out = {tau: (*bb.background(tau), reference(t, tau)) for tau in TAUS}
    return t, bb, out


def test_continuous_default_lattice(continuous) -> None:
    _, bb, _ = continuous
    assert not bb.exact and "bounded" in bb.path
    assert bb.points <= MAX_POINTS and bb.spacing == 2.0**-10  # 700 days in 2^20 points
    assert bb.spacing_for(0.5) == bb.spacing
    assert bb.resolution == 512  # sqrt(3000 / (6 * 0.005)) = 316, up to a power of two
    assert bb.spacing_for(200.0) <= 200.0 / bb.resolution < 2 * bb.spacing_for(200.0)


def test_resolution_grows_with_events() -> None:
    """A million events keep the finest coarsening; a few thousand get a 4-32x shorter FFT."""
    assert resolution_for(1_000_000) == RESOLUTION == resolution_for(200_000)
    assert resolution_for(4_000) == 512 and resolution_for(10) == 128


def test_coarse_lattice_keeps_the_bound_in_budget(continuous) -> None:
    """The relative bound summed over the events (an upper bound of the nats it can cost)
    stays within a few budgets at the coarser lattice, and the bound still holds."""
    _, _, out = continuous
    for tau in (20.0, 200.0):
        b, beta, ref = out[tau]
        assert np.all(np.abs(b - ref) <= beta * (1 + 1e-9) + 1e-12 * ref)
        assert float(np.sum(beta / ref)) < 4 * BUDGET_NATS


@pytest.mark.parametrize("tau", TAUS)
def test_continuous_error_within_bound(continuous, tau: float) -> None:
    _, bb, out = continuous
    b, beta, ref = out[tau]
    err = np.abs(b - ref)
    assert np.all(err <= beta + rounding(ref, tau))
    assert np.all(ref > 0) and np.all(b > 0)
    # the bound is near the realised error somewhere (not vacuous) ...
    assert np.max(err / beta) > 0.1
    # ... and small: about (h / tau)^2 / 6 of B, within a factor 12 where events bunch
    rel = beta / ref
    h = bb.spacing_for(tau)
    assert np.max(rel) < (2e-5 if tau < 1 else 2.0 * (h / tau) ** 2)


def test_bound_is_attained_by_a_pair_at_half_cells() -> None:
    """Two events at cell fraction 1/2, tau/2 apart (e'' < 0 there): the realised error is
    the bound up to the variation of e'' over a cell; a bound half as large would fail."""
    h, tau = 2.0**-6, 1.0
    t = np.array([0.0, 100.0 + h / 2, 100.0 + h / 2 + 32 * h])
    bb = binned(t, spacing=h)
    b, beta = bb.background(tau)
    ref = reference(t, tau)
    err = np.abs(b - ref)
    assert np.all(err <= beta + rounding(ref, tau))
    assert err[1] / beta[1] > 0.9 and err[2] / beta[2] > 0.9


@pytest.mark.parametrize("kind", ["days", "continuous"])
def test_row_blocks_are_slices_of_the_whole(kind: str) -> None:
    t = day_times(n=2000) if kind == "days" else continuous_times(n=2000, seed=3)
    full = binned(t)
    for tau in (0.7, 30.0, 300.0):
        b, beta = full.background(tau)
        for r0, r1 in [(0, 700), (700, 1311), (1311, 2000), (5, 6)]:
            part = binned(t, rows=(r0, r1))
            pb, pbeta = part.background(tau)
            np.testing.assert_array_equal(pb, b[r0:r1])
            np.testing.assert_array_equal(pbeta, beta[r0:r1])


def test_continuous_times_with_ties() -> None:
    t = continuous_times(n=1500, seed=5)
    t = np.sort(np.concatenate([t, t[::7], t[::11]]))
    bb = binned(t)
    assert not bb.exact
    for tau in (0.3, 3.0, 60.0):
        b, beta = bb.background(tau)
        ref = reference(t, tau)
        assert np.all(np.abs(b - ref) <= beta + rounding(ref, tau))
        # rows isolated by many tau_t (B ~ 1e-20) are at the rounding level: not these
        busy = ref > 1e-6 * ref.max()
        assert np.max(beta[busy] / ref[busy]) < 1e-4


def test_single_event() -> None:
    bb = binned(np.array([3.7]))
    assert bb.exact
    b, beta = bb.background(2.0)
    assert b.tolist() == [0.0] and beta.tolist() == [0.0]


def test_all_events_at_one_time() -> None:
    t = np.full(6, 12.345678)
    bb = binned(t)
    assert bb.exact
    for tau in (1e-3, 1.0, 1e3):
        b, beta = bb.background(tau)
        assert np.all(b == 0.0) and np.all(beta == 0.0)


def test_empty_rows_and_no_events() -> None:
    t = continuous_times(n=200)
    for r in (0, 77, 200):
        b, beta = binned(t, rows=(r, r)).background(3.0)
        assert b.shape == (0,) and beta.shape == (0,)
        assert b.dtype == np.float64 and beta.dtype == np.float64
    b, beta = binned(np.zeros(0)).background(3.0)
    assert b.shape == (0,) and beta.shape == (0,)


def test_huge_span_caps_the_lattice() -> None:
    rng = np.random.default_rng(4)
    t = np.sort(np.concatenate([rng.uniform(0, 3e7, 300), rng.normal(1e6, 50.0, 300)]))
    bb = binned(t)
    assert bb.points <= MAX_POINTS and bb.spacing > 2.0**-6
    assert math.log2(bb.spacing) == round(math.log2(bb.spacing))
    for tau in (1.0, 30.0, 1e4, 1e6):  # tau = 1: below the spacing (32 days)
        b, beta = bb.background(tau)
        ref = reference(t, tau)
        assert np.all(np.abs(b - ref) <= beta + rounding(ref, tau))
        assert np.all(b >= 0)


@pytest.mark.parametrize("tau", [0.002, 0.02, 0.1])
def test_tau_below_the_spacing_keeps_the_bound(tau: float) -> None:
    """tau_t at or below h: the bound still holds; it is simply large (here of order B)."""
    t = continuous_times(n=800, seed=9)
    bb = binned(t, spacing=0.125)
    b, beta = bb.background(tau)
    ref = reference(t, tau)
    assert np.all(np.abs(b - ref) <= beta + rounding(ref, tau))
    assert np.all(b >= 0)
    busy = ref > 1e-3 * ref.max()
    assert np.median(beta[busy] / ref[busy]) > 1e-2  # honest: the lattice is too coarse


def test_invalid_arguments() -> None:
    t = continuous_times(n=50)
    with pytest.raises(ValueError, match="power of two"):
        binned(t, spacing=0.3)
    with pytest.raises(ValueError, match="rows"):
        binned(t, rows=(10, 60))
    with pytest.raises(ValueError, match="sorted"):
        BinnedBackground(t[::-1], area=AREA, rows=(0, 50), times=TimeStructure.from_times(t))
    with pytest.raises(ValueError, match="lattice points"):
        binned(np.array([0.0, 1e6]), spacing=2.0**-10)
    with pytest.raises(ValueError, match="tau_t"):
        binned(t).background(0.0)


# ----------------------------------------------------------------- in the likelihood engine


def _events(n: int, *, integer_days: bool):
    from hawkes_cli.data import EventData

    from .conftest import make_events

    t, x, y, d = make_events(n, integer_days=integer_days, seed=3)
    return EventData(t, x, y, d)


@pytest.mark.opencl
@pytest.mark.parametrize("model", [1, 2])
def test_lattice_likelihood_within_its_bound(model):
    """engine.background: lattice on continuous times: the log-likelihood is within the
    reported background bound of the float64 reference engine (plus float64 rounding), the
    bound is small but not zero, and ``auto`` takes the lattice above LATTICE_FROM distinct
    times only."""
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.model import Params
    from hawkes_cli.vocab import LATTICE_FROM

    data = _events(LATTICE_FROM + 500, integer_days=False)
    p = Params(mu0=0.4, tau_t=0.7, xi0=0.6, sigma_x=0.08, sigma_t=6.0)
    kw = {"model": model, "area": 1150.0}
    ref = make_likelihood(data, engine="reference", **kw).evaluate(p)
    for background in ("lattice", "auto"):
        lik = make_likelihood(
            data, engine="opencl", precision="float64", background=background, **kw
        )
        ev = lik.evaluate(p)
        assert lik.lattice is not None and "lattice of 2^" in lik.path
        assert 0 < ev.background_bound < 1e-2
        assert abs(ev.loglik - ref.loglik) <= ev.background_bound + 1e-9 * abs(ref.loglik)
    small = _events(LATTICE_FROM - 100, integer_days=False)
    assert make_likelihood(small, engine="opencl", precision="float64", **kw).lattice is None


@pytest.mark.opencl
def test_lattice_exact_on_whole_days():
    """On whole days the lattice is exact: bound 0, the same log-likelihood as the exact
    per-distinct-time kernel."""
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.model import Params

    data = _events(3000, integer_days=True)
    p = Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.08, sigma_t=6.0)
    kw = {"model": 1, "area": 1150.0, "engine": "opencl", "precision": "float64"}
    exact = make_likelihood(data, **kw).evaluate(p)
    ev = make_likelihood(data, background="lattice", **kw).evaluate(p)
    assert ev.background_bound == 0.0
    assert ev.loglik == pytest.approx(exact.loglik, rel=1e-12)
