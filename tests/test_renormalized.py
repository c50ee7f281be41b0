"""The renormalized edge correction (``model.edge: renormalized``, DESIGN section 2b): each
event's trigger kernel divided by its mass inside the study region, the compensator the paper's.

References, each independent of the engines' pair sums:

- the log-likelihood written out by hand from DESIGN section 2 as one dense numpy matrix, with
  the rectangle's masses in closed form (a product of normal-CDF differences);
- simulations that are the model (``simulate(edge="renormalized")`` redraws a child displaced
  off the rectangle from the kernel restricted to it), on which the maximum-likelihood ``xi0``
  (the other parameters at their truth) must land on the truth, while the paper's and the
  censored likelihoods, the wrong readings for these data, must miss it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import ndtr

from hawkes_cli.config import load_config
from hawkes_cli.data import EventData
from hawkes_cli.engine import make_likelihood
from hawkes_cli.engine.edge_mass import mass_stencil
from hawkes_cli.engine.region import RectangleRegion
from hawkes_cli.model import Params
from hawkes_cli.simulate import simulate

BOX = (0.0, 10.0, 0.0, 6.0)
AREA = 60.0
REGION = RectangleRegion(BOX)


@pytest.fixture(scope="module")
def events() -> EventData:
    rng = np.random.default_rng(3)
    n = 600
    t = np.sort(rng.uniform(0.0, 50.0, n))
    return EventData(
        time=t,
        x=rng.uniform(0.0, 10.0, n),
        y=rng.uniform(0.0, 6.0, n),
        density=rng.uniform(0.5, 4.0, n),
        source="test",
    )


def _mass(x: float, y: float, s: float) -> float:
    """The rectangle's mass of a kernel of lengthscale ``s`` at ``(x, y)``, in closed form."""
    mx = ndtr((BOX[1] - x) / s) - ndtr((BOX[0] - x) / s)
    return mx * (ndtr((BOX[3] - y) / s) - ndtr((BOX[2] - y) / s))


def _by_hand(data: EventData, p: Params, model: int) -> float:
    """DESIGN section 2 with source m's trigger kernel over its mass M_m (interpolated in log
    s by the cubic through the mass lattice's four points around its lengthscale s, as the
    likelihood does; exact at them)."""
    scale = np.ones(data.n) if model == 1 else 1.0 / np.sqrt(data.density)
    s = p.sigma_x * scale
    mass = np.empty(data.n)
    for i in range(data.n):  # each source's own stencil
        points, weights = mass_stencil(float(s[i]))
        xi, yi = data.x[i], data.y[i]
        mass[i] = sum(w * _mass(xi, yi, sk) for sk, w in zip(points, weights, strict=True))
    t, x, y = data.time, data.x, data.y
    dt = t[:, None] - t[None, :]
    r2 = (x[:, None] - x[None, :]) ** 2 + (y[:, None] - y[None, :]) ** 2
    with np.errstate(over="ignore"):
        g = np.exp(-dt / p.sigma_t - r2 / (2 * s[None, :] ** 2))
    g = g / (2 * math.pi * s[None, :] ** 2 * p.sigma_t) / mass[None, :]
    g[dt <= 0] = 0.0
    b = np.exp(-0.5 * (dt / p.tau_t) ** 2) / (math.sqrt(2 * math.pi) * p.tau_t) / AREA
    b[dt == 0] = 0.0
    lam = p.mu0 * b.sum(axis=1) + p.xi0 * g.sum(axis=1)
    T = t[-1]
    comp = p.mu0 * np.sum(ndtr((T - t) / p.tau_t) - ndtr(-t / p.tau_t))
    comp += p.xi0 * np.sum(-np.expm1(-(T - t) / p.sigma_t))
    return float(np.sum(np.log(lam)) - comp)


ENGINES = [
    ("reference", "float64", 1e-10),
    pytest.param("opencl", "float64", 1e-10, marks=pytest.mark.opencl),
    # float32 pair terms: ~1e-7 relative per row, ~600 rows of log lambda ~ 1
    pytest.param("opencl", "float32", 1e-7, marks=pytest.mark.opencl),
]


@pytest.mark.parametrize("sigma_x", [0.5, 0.8], ids=["lattice point", "interpolated"])
@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize(("engine", "precision", "rel"), ENGINES)
def test_renormalized_likelihood_by_hand(events, model, engine, precision, rel, sigma_x):
    """Every engine gives the hand-written renormalized log-likelihood; it differs from the
    paper's by many nats (the masses matter here), and the reported edge error is small (none
    at a lattice point for model 1, where the closed-form masses are not interpolated; model
    2's lengthscales sigma_x / sqrt(D) are off the lattice there too)."""
    p = Params(mu0=0.8, tau_t=3.0, xi0=0.6, sigma_x=sigma_x, sigma_t=4.0)
    want = _by_hand(events, p, model)
    kw = {"model": model, "area": AREA, "engine": engine, "precision": precision}
    lik = make_likelihood(events, region=REGION, edge="renormalized", **kw)
    ev = lik.evaluate(p)
    assert ev.loglik == pytest.approx(want, rel=rel, abs=1e-9)
    assert "edge: renormalized" in lik.path and "exact" in lik.path
    plain = make_likelihood(events, **kw).loglik(p)
    assert ev.loglik - plain > 5.0
    # a rectangle's masses are closed-form: exact at a lattice point, the cubic's bound between
    exact = sigma_x == 0.5 and model == 1
    assert 0.0 <= ev.edge_error < 0.1 and (ev.edge_error == 0.0) == exact
    # the same locations again after a redraw elsewhere: the amplitudes follow the locations
    lik.set_locations(events.y * 10.0 / 6.0, events.x * 0.6)
    lik.set_locations(events.x, events.y)
    assert lik.loglik(p) == pytest.approx(want, rel=rel, abs=1e-9)


class PartComm:
    """Rank ``rank`` of ``size`` whose reductions return its own part (the test sums them)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def allreduce_sum(self, value: float) -> float:
        return value

    def allgather(self, obj):
        return [obj] * self.size

    def bcast(self, obj, root: int = 0):
        return obj

    def barrier(self) -> None:
        pass


@pytest.mark.parametrize("model", [1, 2])
def test_rows_split_over_ranks_sum_to_the_whole(events, model):
    """Split over three ranks, each rank weights its rows' sources by every source's mass (not
    only its own rows'): the parts sum to the serial log-likelihood."""
    p = Params(mu0=0.8, tau_t=3.0, xi0=0.6, sigma_x=0.8, sigma_t=4.0)
    kw = {"model": model, "area": AREA, "engine": "reference", "region": REGION}
    whole = make_likelihood(events, edge="renormalized", **kw).loglik(p)
    parts = [
        make_likelihood(events, edge="renormalized", comm=PartComm(r, 3), **kw).loglik(p)
        for r in range(3)
    ]
    assert sum(parts) == pytest.approx(whole, rel=1e-12)


def test_config_takes_renormalized_with_every_trigger(tmp_path):
    """The truncated kernels carry each source's amplitude too (tests/test_truncated_amplitude.py),
    so no trigger is refused with ``renormalized``."""
    text = "data: {events: e.h5}\nmodel: {edge: renormalized}\nengine: {trigger: %s}\n"
    path = tmp_path / "c.yaml"
    for trigger in ("truncated", "auto", "exact"):
        path.write_text(text % trigger)
        config = load_config(path)
        assert (config.model.edge, config.engine.trigger) == ("renormalized", trigger)


def _xi0_fit(data: EventData, p: Params, edge: str) -> float:
    """How far the maximum-likelihood xi0 (the other parameters at ``p``) lies from ``p.xi0``,
    in its standard errors (observed information)."""
    region = None if edge == "none" else REGION
    lik = make_likelihood(data, model=1, area=AREA, engine="reference", region=region, edge=edge)
    ev = lik.evaluate(p)
    B, E = ev.B, ev.E
    # the compensator per unit xi0, from two evaluations (the log-likelihood is linear in it)
    other = Params(**(p.as_dict() | {"xi0": 2.0 * p.xi0}))
    logs = [np.sum(np.log(p.mu0 * B + q.xi0 * E)) for q in (p, other)]
    per_xi0 = -((lik.loglik(other) - logs[1]) - (ev.loglik - logs[0])) / p.xi0
    xi0 = brentq(lambda a: np.sum(E / (p.mu0 * B + a * E)) - per_xi0, 0.01, 10.0)
    se = 1.0 / math.sqrt(np.sum(E**2 / (p.mu0 * B + xi0 * E) ** 2))
    return (xi0 - p.xi0) / se


def test_renormalized_recovers_xi0_on_its_own_simulations():
    """Four simulations whose displaced children are redrawn inside the rectangle (about 17% of
    the kernel falls outside at sigma_x 0.8 in a 10 x 6 box; ~3,400 events each). The
    background is constant (tau_t far beyond the window), mu0 at the value that gives each
    file's background count. The mean of four z-scores of the renormalized fit is N(0, 1/4)
    when the likelihood is the simulation's: |mean| < 1.5 is three of its sds. The censored
    and the paper's likelihoods miss by 4-6 sds each on these files (mean |z| > 3)."""
    truth = Params(mu0=1.0, tau_t=1e4, xi0=0.6, sigma_x=0.8, sigma_t=5.0)
    z: dict[str, list[float]] = {"renormalized": [], "censored": [], "none": []}
    for seed in range(4):
        data = simulate(
            truth, model=1, n_background=1500, t_end=100.0, bounds=BOX, seed=seed,
            edge="renormalized",
        )  # fmt: skip
        assert data.attrs["n_redrawn"] > 200
        background = data.n - data.attrs["n_offspring"]
        mu0 = background * math.sqrt(2 * math.pi) * truth.tau_t / (100.0 * (data.n - 1))
        p = Params(**(truth.as_dict() | {"mu0": mu0}))
        for edge, got in z.items():
            got.append(_xi0_fit(data, p, edge))
    assert abs(np.mean(z["renormalized"])) < 1.5, z
    assert np.mean(z["censored"]) > 3.0, z
    assert np.mean(z["none"]) < -3.0, z
