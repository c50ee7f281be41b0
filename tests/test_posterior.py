"""The log posterior (priors + likelihood on the log scale) and the distributed proxy.

The posterior's value is the reference engine's log-likelihood plus the log priors computed
independently (scipy densities, Jacobians by hand); outside the support it is -inf without a
likelihood call; the cheap coordinates (mu0, tau_t, xi0) run no trigger pass. The proxy with
one rank broadcasts nothing; with a recording communicator its broadcasts, replayed by serve()
on a second "rank", keep that rank's likelihood, pinned sums, locations and the fast start's
subsample likelihood in step. (The proxy over ``mpiexec -n 2`` is in tests/test_mpi.py.)
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats

from hawkes_cli.config import load_config
from hawkes_cli.data import save_events
from hawkes_cli.distributed import ChainRank, DistributedLikelihood, serve
from hawkes_cli.engine import make_likelihood
from hawkes_cli.geo import PolygonSampler
from hawkes_cli.model import Params
from hawkes_cli.parallel import SerialComm
from hawkes_cli.posterior import (
    CHEAP,
    EXPENSIVE,
    PASS_COST,
    THETA_LIMIT,
    Density,
    LogPosterior,
    ScaledLikelihood,
    to_params,
    to_theta,
)
from hawkes_cli.priors import DEFAULT_PRIOR, Prior
from hawkes_cli.resample import LocationStream
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.start.subsample import subsample_events
from hawkes_cli.storage import read_chain, read_sidecar
from hawkes_cli.vocab import PARAM_NAMES

TRUTH = Params(mu0=0.5, tau_t=20.0, xi0=0.5, sigma_x=0.6, sigma_t=3.0)
BOUNDS = (0.0, 10.0, 0.0, 10.0)
AREA = 100.0
PRIORS = {
    "mu0": Prior("normal", (0.0, 1.0)),
    "tau_t": Prior("lognormal", (3.0, 0.7)),
    "xi0": Prior("gamma", (2.0, 3.0)),
    "sigma_x": Prior("halfnormal", (1.5,)),
    "sigma_t": Prior("gamma", (3.0, 0.5)),
}


@pytest.fixture(scope="module")
def grid() -> DensityGrid:
    return DensityGrid.log_uniform(BOUNDS, 4, 3, 1.0, 50.0, seed=2)


@pytest.fixture(scope="module")
def data(grid):
    d = simulate(TRUTH, model=2, n_background=150, t_end=100.0, bounds=BOUNDS, seed=8, grid=grid,
                 integer_days=True)  # fmt: skip
    assert 200 <= d.n <= 600 and d.fips is not None
    return d


def reference(data):
    return make_likelihood(data, model=2, area=AREA, engine="reference")


def thetas(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return to_theta(TRUTH.as_dict()) + 0.3 * rng.standard_normal((n, len(PARAM_NAMES)))


def independent_log_prior(theta: np.ndarray) -> float:
    """The priors of PRIORS as scipy densities of theta (natural-scale ones times exp(theta))."""
    v = np.exp(theta)
    return float(
        stats.norm.logpdf(theta[0], 0.0, 1.0)
        + stats.norm.logpdf(theta[1], 3.0, 0.7)
        + stats.gamma.logpdf(v[2], a=2.0, scale=1 / 3.0)
        + theta[2]
        + stats.halfnorm.logpdf(v[3], scale=1.5)
        + theta[3]
        + stats.gamma.logpdf(v[4], a=3.0, scale=1 / 0.5)
        + theta[4]
    )


class CountingLikelihood:
    """A stand-in likelihood that returns a fixed value and counts its calls."""

    def __init__(self, value: float = -100.0) -> None:
        self.value = value
        self.calls = 0
        self.pinned: list[Params] = []

    def loglik(self, p: Params) -> float:
        self.calls += 1
        return self.value

    def pin(self, p: Params) -> None:
        self.pinned.append(p)


# --------------------------------------------------------------------------- the value


def test_value_is_loglik_plus_log_priors(data):
    posterior = LogPosterior.from_mapping(reference(data), PRIORS)
    check = reference(data)
    for theta in thetas(4):
        d = posterior.evaluate(theta)
        assert d.finite
        assert d.loglik == check.loglik(to_params(theta))
        assert d.logprior == pytest.approx(independent_log_prior(theta), rel=1e-12, abs=1e-12)
        assert d.log_target == d.loglik + d.logprior
        assert posterior(theta) == d.log_target


def test_params_transform_round_trips():
    theta = to_theta(TRUTH.as_dict())
    assert theta.shape == (5,)
    assert to_params(theta).as_dict() == pytest.approx(TRUTH.as_dict(), rel=1e-15)
    np.testing.assert_array_equal(theta, np.log([getattr(TRUTH, n) for n in PARAM_NAMES]))


@pytest.mark.parametrize(
    "bad",
    [
        {0: math.nan},
        {1: math.inf},
        {2: -math.inf},
        {3: THETA_LIMIT + 0.5},
        {4: -THETA_LIMIT - 1e-9},
    ],
)
def test_outside_the_support_is_minus_inf_without_a_likelihood_call(bad):
    lik = CountingLikelihood()
    posterior = LogPosterior.from_mapping(lik, {n: DEFAULT_PRIOR for n in PARAM_NAMES})
    theta = to_theta(TRUTH.as_dict())
    for k, v in bad.items():
        theta[k] = v
    d = posterior.evaluate(theta)
    assert d.log_target == -math.inf and not d.finite
    assert math.isnan(d.loglik)
    assert posterior(theta) == -math.inf
    assert lik.calls == 0


def test_non_finite_prior_is_minus_inf_without_a_likelihood_call():
    lik = CountingLikelihood()
    posterior = LogPosterior.from_mapping(lik, PRIORS)
    theta = to_theta(TRUTH.as_dict())
    theta[3] = THETA_LIMIT  # inside |theta| <= 700, but the half-normal's log density is -inf
    d = posterior.evaluate(theta)
    assert d.log_target == -math.inf and math.isnan(d.loglik) and d.logprior == -math.inf
    assert lik.calls == 0
    theta[3] = 0.0
    assert posterior.evaluate(theta).finite and lik.calls == 1


@pytest.mark.parametrize("value", [math.nan, -math.inf, math.inf])
def test_non_finite_loglik_is_minus_inf_with_its_parts(value):
    lik = CountingLikelihood(value)
    posterior = LogPosterior.from_mapping(lik, PRIORS)
    d = posterior.evaluate(to_theta(TRUTH.as_dict()))
    assert d.log_target == -math.inf and lik.calls == 1
    assert math.isnan(d.loglik) if math.isnan(value) else d.loglik == value
    assert math.isfinite(d.logprior)


def test_wrong_number_of_priors_is_refused():
    with pytest.raises(ValueError, match="need 5 priors"):
        LogPosterior(CountingLikelihood(), (DEFAULT_PRIOR,) * 4)


# --------------------------------------------------------------------------- cost structure


def test_cheap_and_expensive_coordinates_by_name():
    assert LogPosterior.cheap == CHEAP == (0, 1, 2)
    assert LogPosterior.expensive == EXPENSIVE == (3, 4)
    assert [PARAM_NAMES[i] for i in CHEAP] == ["mu0", "tau_t", "xi0"]
    assert [PASS_COST[PARAM_NAMES[i]] for i in EXPENSIVE] == ["trigger", "trigger"]
    assert sorted(CHEAP + EXPENSIVE) == list(range(len(PARAM_NAMES)))


def test_cheap_moves_run_no_trigger_pass(data):
    lik = reference(data)
    posterior = LogPosterior.from_mapping(lik, PRIORS)
    current = thetas(1, seed=4)[0]
    assert posterior.evaluate(current).finite
    posterior.pin(current)
    assert (lik.background_passes, lik.trigger_passes) == (1, 1)
    rng = np.random.default_rng(5)
    tau_values = set()
    for _ in range(30):
        proposal = current.copy()
        k = int(rng.choice(LogPosterior.cheap))
        proposal[k] += 0.2 * rng.standard_normal()
        before = lik.background_passes
        assert posterior.evaluate(proposal).finite
        if PASS_COST[PARAM_NAMES[k]] == "none":
            assert lik.background_passes == before  # mu0 or xi0: no pair pass at all
        else:
            tau_values.add(proposal[1])
        assert lik.trigger_passes == 1
    assert lik.background_passes == 1 + len(tau_values)
    for k in LogPosterior.expensive:
        proposal = current.copy()
        proposal[k] += 0.1
        posterior.evaluate(proposal)
    assert lik.trigger_passes == 1 + len(LogPosterior.expensive)


def test_pin_forwards_the_natural_scale_point():
    lik = CountingLikelihood()
    posterior = LogPosterior.from_mapping(lik, PRIORS)
    theta = to_theta(TRUTH.as_dict())
    posterior.pin(tuple(theta.tolist()))
    assert lik.pinned == [to_params(theta)] and lik.calls == 0


# --------------------------------------------------------------------------- the proxy


class RecordingComm(SerialComm):
    """Rank 0 of a pretend world of ``size`` ranks: records what it broadcasts."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.sent: list[Any] = []
        self.reductions = 0

    def bcast(self, obj: Any, root: int = 0) -> Any:
        self.sent.append(obj)
        return obj

    def allreduce_sum(self, value: float) -> float:
        self.reductions += 1
        return float(value)


class ReplayComm(SerialComm):
    """Rank 1 of the same pretend world: receives what rank 0 recorded."""

    rank = 1

    def __init__(self, messages: list[Any], size: int) -> None:
        super().__init__()
        self.size = size
        self.queue = deque(messages)
        self.reductions = 0

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.queue.popleft()

    def allreduce_sum(self, value: float) -> float:
        self.reductions += 1
        return float(value)


def chain_rank(data, grid, comm, seed: int = 11) -> ChainRank:
    polygons = PolygonSampler.from_grid(grid)
    stream = LocationStream(polygons, polygons.codes(data.fips), np.random.default_rng(seed))
    return ChainRank(reference(data), comm, locations=stream)


def test_one_rank_proxy_broadcasts_nothing(data, grid):
    comm = RecordingComm(size=1)
    local = chain_rank(data, grid, comm)
    with DistributedLikelihood(local) as proxy:
        posterior = LogPosterior.from_mapping(proxy, PRIORS)
        plain = LogPosterior.from_mapping(reference(data), PRIORS)
        for theta in thetas(2, seed=1):
            assert posterior.evaluate(theta) == plain.evaluate(theta)
        posterior.pin(theta)
        proxy.redraw_locations()
        assert proxy.boundary_stop() is False
    assert comm.sent == [] and comm.reductions == 0
    with pytest.raises(RuntimeError, match="closed"):
        proxy.loglik(TRUTH)


def test_serve_replays_rank_0_calls_in_order(data, grid):
    comm0 = RecordingComm(size=2)
    rank0 = chain_rank(data, grid, comm0)
    with DistributedLikelihood(rank0) as proxy:
        posterior = LogPosterior.from_mapping(proxy, PRIORS)
        theta = thetas(1, seed=2)[0]
        posterior.evaluate(theta)
        proxy.redraw_locations()
        saved = rank0.location_state
        proxy.redraw_locations()
        posterior.pin(theta)
        assert proxy.boundary_stop() is False
        outside = theta.copy()
        outside[0] = math.nan
        posterior.evaluate(outside)  # outside the support: no call, nothing broadcast
        proxy.restore(saved, None)  # the first draw again
        want = posterior.evaluate(theta + 0.01)
    names = [name for name, _ in comm0.sent]
    assert names == [
        "loglik",
        "redraw_locations",
        "redraw_locations",
        "pin",
        "boundary_stop",
        "restore",
        "loglik",
        "close",
    ]
    assert comm0.reductions == 1  # the stop agreement

    comm1 = ReplayComm(comm0.sent, size=2)
    rank1 = chain_rank(data, grid, comm1)
    serve(rank1)
    assert not comm1.queue and comm1.reductions == 1
    assert rank1.location_state == rank0.location_state == saved
    np.testing.assert_array_equal(rank1.likelihood.backend.x, rank0.likelihood.backend.x)
    assert rank1.likelihood.pair_passes == rank0.likelihood.pair_passes
    assert rank1.loglik(to_params(theta + 0.01)) == want.loglik


def test_scaled_likelihood_stands_in_for_the_full_data():
    inner = CountingLikelihood(-10.0)
    scaled = ScaledLikelihood(inner.loglik, 4.0)
    posterior = LogPosterior(scaled, (DEFAULT_PRIOR,) * len(PARAM_NAMES))
    theta = to_theta(TRUTH.as_dict())
    assert posterior.evaluate(theta).loglik == -40.0 and inner.calls == 1
    posterior.pin(theta)  # nothing to keep, nothing forwarded
    assert inner.pinned == []
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="factor"):
            ScaledLikelihood(inner.loglik, bad)


def test_subsample_is_seeded_by_the_run_and_kept_in_time_order(data):
    a, b = subsample_events(data, 100, seed=5), subsample_events(data, 100, seed=5)
    assert a.n == 100 and np.all(np.diff(a.time) >= 0)
    np.testing.assert_array_equal(a.x, b.x)  # every chain and rank draws the same events
    assert not np.array_equal(a.x, subsample_events(data, 100, seed=6).x)
    events = set(zip(data.time, data.x, data.y, data.density, data.fips, strict=True))
    picked = set(zip(a.time, a.x, a.y, a.density, a.fips, strict=True))
    assert len(picked) == 100 and picked <= events  # distinct events of the data, all columns


def test_serve_replays_the_subsample_calls(data, grid):
    """The fast start's subsample likelihood is built, evaluated and freed on every rank at
    the same calls; its passes are counted apart from the chain likelihood's."""
    sub = subsample_events(data, 120, seed=1)

    def rank(comm):
        return ChainRank(reference(data), comm, subsample=lambda: reference(sub))

    comm0 = RecordingComm(size=2)
    rank0 = rank(comm0)
    theta = thetas(2, seed=4)
    with DistributedLikelihood(rank0) as proxy:
        search = LogPosterior(ScaledLikelihood(proxy.subsample_loglik, data.n / sub.n),
                              LogPosterior.from_mapping(proxy, PRIORS).priors)  # fmt: skip
        values = [search.evaluate(t).loglik for t in theta]
        proxy.end_subsample()
    assert [name for name, _ in comm0.sent] == [
        "subsample_loglik", "subsample_loglik", "end_subsample", "close"]  # fmt: skip
    want = [data.n / sub.n * reference(sub).loglik(to_params(t)) for t in theta]
    assert values == pytest.approx(want, rel=1e-12)
    assert rank0.pair_passes == 0 and rank0.subsample_pair_passes == 4
    comm1 = ReplayComm(comm0.sent, size=2)
    rank1 = rank(comm1)
    serve(rank1)
    assert rank1.subsample_pair_passes == 4 and rank1.pair_passes == 0
    with pytest.raises(RuntimeError, match="no subsample"):
        ChainRank(reference(data), SerialComm()).subsample_loglik(TRUTH)


def test_stop_is_each_ranks_own_flag(data, grid):
    class Flag:
        def __init__(self, value: bool) -> None:
            self.value, self.reads = value, 0

        def __bool__(self) -> bool:
            self.reads += 1
            return self.value

    flag = Flag(True)
    comm = RecordingComm(size=2)
    local = ChainRank(reference(data), comm, stop=flag)
    with DistributedLikelihood(local) as proxy:
        assert proxy.boundary_stop() is True
    assert flag.reads == 1
    assert comm.sent == [("boundary_stop", ()), ("close", ())]  # the flag itself is not sent


def test_proxy_and_serve_refuse_the_wrong_rank(data):
    with pytest.raises(ValueError, match="rank 0"):
        serve(ChainRank(reference(data), SerialComm()))
    with pytest.raises(ValueError, match="serve"):
        DistributedLikelihood(ChainRank(reference(data), ReplayComm([], size=2)))


def test_density_is_a_frozen_record():
    d = Density(-1.0, -0.5, -0.5)
    with pytest.raises(AttributeError):
        d.loglik = 0.0  # type: ignore[misc]


# --------------------------------------------------------------------------- in a chain


@pytest.mark.parametrize("kind", ["univariate", "block", "tiered"])
def test_chain_records_the_density_of_its_current_state(tmp_path, data, kind):
    """Each row's log-likelihood and log-prior are those of the row's parameters (the tiered
    kernel's several calls per step included: the parts come from ``StepInfo.target_call``),
    and the checkpoint's parts add up to the sampler state's log target."""
    events = tmp_path / "events.h5"
    save_events(data, events)
    spec = {
        "data": {"events": str(events), "area": AREA},
        "model": {"kind": 2},
        "priors": {name: prior.to_config() for name, prior in PRIORS.items()},
        "sampler": {"kind": kind, "iterations": 40, "warmup": 20, "seed": 3,
                    "resample_every": 15, "initial": TRUTH.as_dict()},
        "chains": {"count": 1},
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(tmp_path / "run"), "commit_every": 10},
    }  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(spec))
    config = load_config(tmp_path / "c.yaml")
    assert run_chain(config, 0).finished
    path = RunDir(config.output.run_dir).chain_path(0)
    d = read_chain(path).draws
    checkpoint = read_sidecar(path)["checkpoint"]
    assert checkpoint["sampler"]["log_target"] == checkpoint["loglik"] + checkpoint["logprior"]
    # the rows' own point, evaluated afresh at the locations of its resampling period
    polygons = PolygonSampler.from_grid(DensityGrid.log_uniform(BOUNDS, 4, 3, 1.0, 50.0, seed=2))
    seq = np.random.SeedSequence(3, spawn_key=(0,)).spawn(2)[1]
    stream = LocationStream(polygons, polygons.codes(data.fips), np.random.default_rng(seq))
    lik = reference(data)
    posterior = LogPosterior.from_mapping(lik, PRIORS)
    for i, it in enumerate(d["iteration"]):
        if it > 0 and it % 15 == 0:
            lik.set_locations(*stream.draw())
        theta = np.log([d[name][i] for name in PARAM_NAMES])
        got = posterior.evaluate(theta)
        assert got.loglik == pytest.approx(d["loglik"][i], rel=1e-9)
        assert got.logprior == pytest.approx(d["logprior"][i], rel=1e-9, abs=1e-9)
