"""``engine.tolerance`` in nats of log-likelihood (absolute), and when the truncation cut-off may
change: while :attr:`Likelihood.adapt_cutoff` is true (the fast start and the warm-up) a bound
above the tolerance tightens the cut-off; after warm-up it is counted and logged instead.

The tests do not depend on the value of :data:`~hawkes_cli.vocab.DEFAULT_TOLERANCE`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hawkes_cli.config import config_from_yaml_text, load_config
from hawkes_cli.data import EventData, save_events
from hawkes_cli.diagnostics import DiagnoseOptions, diagnose
from hawkes_cli.engine import Likelihood, make_likelihood
from hawkes_cli.engine.base import BoundedPairBackend
from hawkes_cli.errors import ConfigError, UsageError
from hawkes_cli.model import Params
from hawkes_cli.rundir import Checkpoint, RunDir
from hawkes_cli.runner import loop as runner
from hawkes_cli.runner import run_chain
from hawkes_cli.storage import read_sidecar, sidecar_path
from hawkes_cli.storage.record import record_digest as _record_digest
from hawkes_cli.vocab import DEFAULT_TOLERANCE, MIN_TOLERANCE, tolerance_problem
from tests.conftest import clean_env
from tests.test_runner import StopAfter, events, write_config  # noqa: F401

P = Params(mu0=1.0, tau_t=10.0, xi0=1.0, sigma_x=1.0, sigma_t=1.0)
OLD_RELATIVE = "looks like an old relative value"


# --------------------------------------------------------------------------- the value


@pytest.mark.parametrize("value", [0.0, 0, MIN_TOLERANCE, 0.05, DEFAULT_TOLERANCE, 2.0, 1e3])
def test_tolerance_in_nats_is_accepted(value):
    assert tolerance_problem(value) is None


@pytest.mark.parametrize("value", [1e-6, 1e-9, 5e-4, MIN_TOLERANCE * 0.999])
def test_old_relative_values_are_refused_with_the_conversion(value):
    problem = tolerance_problem(value)
    assert problem is not None and "\n" not in problem
    assert problem.startswith("engine.tolerance is now in nats of log-likelihood (absolute)")
    assert OLD_RELATIVE in problem and f"{value:g}" in problem
    assert "Use 0 for the exact pair sum" in problem and "r x |loglik| nats" in problem


@pytest.mark.parametrize("value", [-1e-6, -1.0, math.nan, math.inf, True, "0.1"])
def test_not_a_tolerance(value):
    problem = tolerance_problem(value, "--tolerance")
    assert problem is not None and problem.startswith("--tolerance must be")


def _config(tolerance: str, tmp_path: Path):
    text = f"data: {{events: ev.h5}}\nengine: {{tolerance: {tolerance}}}\n"
    return config_from_yaml_text(text, base_dir=tmp_path, where="t.yaml")


@pytest.mark.parametrize("text, value", [("0", 0.0), ("0.05", 0.05), ("1.0e-3", 1e-3)])
def test_config_accepts_nats(tmp_path, text, value):
    assert _config(text, tmp_path).engine.tolerance == value


def test_config_refuses_an_old_relative_value(tmp_path):
    with pytest.raises(ConfigError) as exc:
        _config("1.0e-6", tmp_path)
    message = str(exc.value)
    assert message.startswith("t.yaml: engine.tolerance is now in nats")
    assert "1e-06 looks like an old relative value" in message and "\n" not in message
    assert exc.value.exit_code == ConfigError.exit_code


def test_validate_refuses_an_old_relative_value_in_one_line(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("data: {events: ev.h5}\nengine: {tolerance: 1.0e-6}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", "validate", str(path)],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and OLD_RELATIVE in lines[0]


def test_loglik_refuses_an_old_relative_value_in_one_line(tmp_path):
    path = tmp_path / "e.h5"
    save_events(EventData(time=np.array([0.0, 1.0, 2.0]), x=np.zeros(3), y=np.zeros(3)), path)
    proc = subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", "loglik", str(path), "--area", "1",
         "--tolerance", "1e-6", "--param", "mu0=1"],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == UsageError.exit_code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: --tolerance is now in nats") and OLD_RELATIVE in lines[0]


def test_make_likelihood_takes_nats():
    data = EventData(time=np.array([0.0, 1.0, 2.0]), x=np.zeros(3), y=np.ones(3))
    with pytest.raises(UsageError, match=OLD_RELATIVE):
        make_likelihood(data, model=1, area=1.0, engine="reference", tolerance=1e-6)
    with pytest.raises(UsageError, match="must be"):
        make_likelihood(data, model=1, area=1.0, engine="reference", tolerance=-1.0)
    # no upper limit: nats are not a fraction of |loglik| (the reference engine is exact)
    lik = make_likelihood(data, model=1, area=1.0, engine="reference", tolerance=5.0)
    assert math.isfinite(lik.loglik(P))


@pytest.mark.opencl
def test_the_engine_section_reaches_the_backend_as_one_record(tmp_path):
    """build_likelihood takes the config's engine section as it is (no keywords on the way):
    its tolerance, precision and background are the backend's; the reference ignores them."""
    from hawkes_cli.engine import build_likelihood
    from hawkes_cli.engine.truncated import TruncatedBackend

    rng = np.random.default_rng(4)
    t = np.sort(np.floor(rng.uniform(0, 50, 200)))
    data = EventData(time=t, x=rng.uniform(0, 3, 200), y=rng.uniform(0, 3, 200))
    text = "data: {events: e.h5}\nengine: {precision: float64, tolerance: 0.25, background: pairs}"
    engine = config_from_yaml_text(text, base_dir=tmp_path, where="t.yaml").engine
    lik = build_likelihood(data, engine, model=1, area=9.0)
    assert isinstance(lik.backend, TruncatedBackend)
    assert lik.backend.tolerance == 0.25 and lik.backend.precision == "float64"
    assert lik.backend.exact.background_mode == "pairs"
    same = make_likelihood(data, model=1, area=9.0, precision="float64", tolerance=0.25,
                           background="pairs")  # fmt: skip
    assert same.loglik(P) == lik.loglik(P)
    reference = build_likelihood(data, dataclasses.replace(engine, backend="reference"),
                                 model=1, area=9.0)  # fmt: skip
    assert type(reference.backend).__name__ == "ReferenceBackend"
    with pytest.raises(UsageError, match="background must be one of"):
        build_likelihood(data, dataclasses.replace(engine, background="x"), model=1, area=9.0)


# --------------------------------------------------------------------------- the likelihood


class FakeBounded(BoundedPairBackend):
    """B = E~ = 1 per row; the omitted part's bound is ``scale * exp(-kappa)`` per row, so with
    ``mu0 = xi0 = 1`` the realised bound is ``n log1p(scale exp(-kappa) / 2)`` nats."""

    def __init__(self, n: int, tolerance: float, scale: float, kappa: float = 0.0) -> None:
        self.row_start, self.row_stop = 0, n
        self.tolerance = tolerance
        self.scale = scale
        self.kappa = kappa
        self.tighten_calls: list[float] = []

    path = "fake"
    kernel_fingerprint = ""

    def background(self, tau_t: float) -> np.ndarray:
        return np.ones(self.row_stop)

    def trigger(self, sigma_x: float, sigma_t: float) -> np.ndarray:
        return self.trigger_bounded(sigma_x, sigma_t)[0]

    def trigger_bounded(self, sigma_x: float, sigma_t: float) -> tuple[np.ndarray, np.ndarray]:
        n = self.row_stop
        return np.ones(n), np.full(n, self.scale * math.exp(-self.kappa))

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        pass

    def tighten(self, excess: float) -> bool:
        self.tighten_calls.append(excess)
        self.kappa += math.log(excess) + 0.5
        return True

    def cutoff_state(self) -> dict[str, float]:
        return {"kappa": self.kappa}

    def restore_cutoff(self, state: Mapping[str, Any]) -> None:
        self.kappa = float(state["kappa"])

    def bound(self) -> float:
        return self.row_stop * math.log1p(self.scale * math.exp(-self.kappa) / 2.0)


def fake_likelihood(tolerance: float = 0.05, scale: float = 0.1) -> tuple[Likelihood, FakeBounded]:
    backend = FakeBounded(10, tolerance, scale)
    return Likelihood(backend, np.arange(10.0)), backend


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_adapting_tightens_to_the_absolute_tolerance(caplog):
    lik, backend = fake_likelihood(tolerance=0.05, scale=0.1)  # bound ~0.49 nats
    assert lik.adapt_cutoff
    initial = backend.bound()
    with caplog.at_level(logging.WARNING):
        ev = lik.evaluate(P)
    assert backend.tighten_calls and lik.tightenings == len(backend.tighten_calls)
    assert ev.error_bound == pytest.approx(backend.bound()) and ev.error_bound <= 0.05
    # absolute, not relative: |loglik| (about 6.9 nats) does not scale what is allowed
    assert backend.tighten_calls[0] == pytest.approx(initial / 0.05)
    assert (lik.bound_exceedances, lik.worst_bound) == (0, 0.0)
    assert not warnings_of(caplog)


def test_fixed_cutoff_reports_instead_of_tightening(caplog):
    lik, backend = fake_likelihood(tolerance=0.05, scale=0.1)
    lik.adapt_cutoff = False
    first = backend.bound()
    with caplog.at_level(logging.WARNING):
        ev = lik.evaluate(P)
        lik.evaluate(P)  # the same bound again (cached E): counted, not logged again
        lik.evaluate(Params(**{**P.as_dict(), "mu0": 1.01}))
    assert not backend.tighten_calls and lik.tightenings == 0 and backend.kappa == 0.0
    assert ev.error_bound == pytest.approx(first) and ev.error_bound > 0.05
    assert lik.bound_exceedances == 3
    assert lik.worst_bound == pytest.approx(first)
    (message,) = warnings_of(caplog)
    assert "exceeds engine.tolerance" in message and "after warm-up" in message
    # a bound twice as large is logged once more
    backend.scale *= 3.0
    lik.clear_cache()
    with caplog.at_level(logging.WARNING):
        lik.evaluate(P)
    assert len(warnings_of(caplog)) == 2 and lik.bound_exceedances == 4
    assert lik.worst_bound == pytest.approx(backend.bound()) and lik.worst_bound > 2 * first


def test_bound_within_the_tolerance_changes_nothing(caplog):
    lik, backend = fake_likelihood(tolerance=0.05, scale=1e-3)  # bound ~0.005 nats
    for adapt in (True, False):
        lik.adapt_cutoff = adapt
        with caplog.at_level(logging.WARNING):
            ev = lik.evaluate(P)
        assert ev.error_bound == pytest.approx(backend.bound()) and ev.error_bound <= 0.05
    assert not backend.tighten_calls and lik.bound_exceedances == 0
    assert lik.worst_bound == pytest.approx(backend.bound())  # after warm-up: the worst seen
    assert not warnings_of(caplog)


def test_a_hopeless_proposal_neither_tightens_nor_counts(caplog):
    """A proposal whose log-likelihood plus its whole bound is over HOPELESS_NATS below the
    pinned state's cannot be accepted: its bound above the tolerance raises no kappa (at 1M
    one jump to mu0 ~ 1e-5 took kappa from 19 to 366, every later pass ~20x slower) and, after
    warm-up, is no exceedance. A proposal as uncertain but not hopeless still tightens, and so
    does any evaluation with no pinned state (the fast start's search)."""
    from hawkes_cli.engine.base import HOPELESS_NATS

    backend = FakeBounded(2000, 0.05, 1e-6)  # bound ~0.001 nats
    lik = Likelihood(backend, np.arange(2000.0))
    lik.pin(P)
    good = lik.evaluate(P)
    backend.scale = 0.1  # from now on ~98 nats at any parameters
    lik.clear_cache()
    bad = Params(**{**P.as_dict(), "mu0": 1e-10, "xi0": 1e-10})  # ~ -44,000 nats
    for adapt in (True, False):
        lik.adapt_cutoff = adapt
        ev = lik.evaluate(bad)
        assert ev.loglik + ev.error_bound < good.loglik - HOPELESS_NATS
        assert ev.error_bound > 0.05
    assert not backend.tighten_calls and lik.bound_exceedances == 0 and backend.kappa == 0.0
    lik.adapt_cutoff = True
    near = Params(**{**P.as_dict(), "mu0": 0.9 * P.mu0})
    assert lik.evaluate(near).error_bound <= 0.05 and len(backend.tighten_calls) >= 1
    fresh_backend = FakeBounded(2000, 0.05, 0.1)
    fresh = Likelihood(fresh_backend, np.arange(2000.0))  # nothing pinned
    assert fresh.evaluate(bad).error_bound <= 0.05 and fresh_backend.tighten_calls


def test_checkpoint_carries_the_counts():
    base = {"iteration": 3, "sampler": {}, "rng": {}, "loglik": -1.0, "logprior": 0.0,
            "finished": False}  # fmt: skip
    old = Checkpoint.from_json(base)  # written before the counts existed
    assert (old.bound_exceedances, old.worst_bound) == (0, 0.0)
    new = Checkpoint(**{**old.to_json(), "bound_exceedances": 2, "worst_bound": 0.3})
    again = Checkpoint.from_json(json.loads(json.dumps(new.to_json())))
    assert (again.bound_exceedances, again.worst_bound) == (2, 0.3)


# --------------------------------------------------------------------------- the runner

#: A short truncated chain whose cut-off would still tighten after a 10-iteration warm-up (it
#: did, at iteration ~80, before the cut-off was fixed).
CHAIN = {"engine__tolerance": 0.01, "engine__trigger": "truncated", "sampler__iterations": 150,
         "sampler__warmup": 10, "output__commit_every": 10}  # fmt: skip


def _spy_commits(monkeypatch) -> list[tuple[int, float, bool]]:
    """(iteration, kappa, adapting) at every commit of rank 0."""
    seen: list[tuple[int, float, bool]] = []
    commit = runner._Loop.commit

    def spy(self, state, current, iteration):
        rank = self.setup.rank
        seen.append((iteration, rank.truncation_state()["kappa"], rank.adapt_cutoff))
        return commit(self, state, current, iteration)

    monkeypatch.setattr(runner._Loop, "commit", spy)
    return seen


@pytest.mark.opencl
def test_cutoff_is_fixed_after_warmup(tmp_path, events, monkeypatch):  # noqa: F811
    seen = _spy_commits(monkeypatch)
    cfg = load_config(write_config(tmp_path, events, "fixed", **CHAIN))
    out = run_chain(cfg, 0)
    assert out.finished
    warmup = cfg.sampler.warmup
    after = [(kappa, adapting) for it, kappa, adapting in seen if it > warmup]
    at_end_of_warmup = [kappa for it, kappa, _ in seen if it == warmup]
    assert after and at_end_of_warmup
    assert {kappa for kappa, _ in after} == {at_end_of_warmup[0]}
    assert not any(adapting for _, adapting in after)
    checkpoint = read_sidecar(RunDir(cfg.output.run_dir).chain_path(0))["checkpoint"]
    assert checkpoint["truncation"]["kappa"] == at_end_of_warmup[0]
    assert checkpoint["bound_exceedances"] == out.bound_exceedances
    assert checkpoint["worst_bound"] == out.worst_bound
    assert (out.worst_bound > cfg.engine.tolerance) == (out.bound_exceedances > 0)


def _loosen_checkpoint(run_dir: Path, kappa: float) -> Path:
    target = RunDir(run_dir).chain_path(0)
    side = json.loads(sidecar_path(target).read_text())
    side["checkpoint"]["truncation"]["kappa"] = kappa
    side["record_sha256"] = _record_digest(side)  # an edit hawkes accepts: checksum made to fit
    sidecar_path(target).write_text(json.dumps(side))
    return target


@pytest.mark.opencl
def test_a_chain_resumed_after_warmup_does_not_adapt(tmp_path, events, caplog):  # noqa: F811
    """A checkpoint past warm-up at a cut-off far too loose for the tolerance: the resumed
    chain keeps it (no tightening), counts and logs the bounds above the tolerance, and
    ``hawkes-diagnose`` names the chain."""
    cfg = load_config(write_config(tmp_path, events, "resumed", **CHAIN))
    out = run_chain(cfg, 0, stop=StopAfter(60))
    assert out.stopped and out.iteration > cfg.sampler.warmup
    target = _loosen_checkpoint(cfg.output.run_dir, 1.0)
    with caplog.at_level(logging.WARNING):
        out = run_chain(cfg, 0)
    assert out.finished
    checkpoint = read_sidecar(target)["checkpoint"]
    assert checkpoint["truncation"]["kappa"] == 1.0
    assert checkpoint["bound_exceedances"] == out.bound_exceedances > 0
    assert checkpoint["worst_bound"] == out.worst_bound > cfg.engine.tolerance
    assert any("exceeds engine.tolerance" in m for m in warnings_of(caplog))

    report = diagnose(cfg.output.run_dir, DiagnoseOptions())
    (verdict,) = [v for v in report.verdicts if v.code == "bound"]
    assert verdict.level == "warn" and verdict.chain == 0
    assert f"{out.bound_exceedances} evaluation(s) after warm-up" in verdict.message


@pytest.mark.opencl
def test_a_chain_resumed_in_warmup_still_adapts(tmp_path, events):  # noqa: F811
    cfg = load_config(write_config(tmp_path, events, "early", **{**CHAIN, "sampler__warmup": 100}))
    out = run_chain(cfg, 0, stop=StopAfter(20))
    assert out.stopped and out.iteration < cfg.sampler.warmup
    target = _loosen_checkpoint(cfg.output.run_dir, 1.0)
    out = run_chain(cfg, 0)
    checkpoint = read_sidecar(target)["checkpoint"]
    assert checkpoint["truncation"]["kappa"] > 1.0  # tightened during the rest of warm-up
    assert checkpoint["bound_exceedances"] == out.bound_exceedances
