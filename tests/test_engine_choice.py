# ruff: noqa: F811  (the events fixture is imported from test_runner, as pytest needs)
"""``engine.trigger``: auto times one exact and one truncated pass at a chain's start and keeps
the faster; the choice is logged, kept in the checkpoint and reused, never re-timed, on resume;
exact and truncated are honoured as given; the key leaves older runs' hash alone.

The rule (:func:`~hawkes_cli.engine.choice.choose`) and the timing loop
(:func:`~hawkes_cli.engine.choice.time_choice`) are tested with a fake clock; the tests on PoCL
inject the rule's outcome, so that none depends on timing noise.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.config import config_from_yaml_text, load_config
from hawkes_cli.data import EventData
from hawkes_cli.engine import choice, make_likelihood
from hawkes_cli.engine.choice import (
    EXACT_SHARES,
    TriggerChoice,
    choose,
    choose_trigger,
    tail_rows,
    time_choice,
    trigger_switch,
)
from hawkes_cli.errors import UsageError
from hawkes_cli.model import PARAM_NAMES
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.storage import read_chain, read_sidecar
from hawkes_cli.vocab import EXACT_SLOWER_BY, TRIGGERS
from tests.conftest import PARAMS, make_events
from tests.test_runner import StopAfter, cli, events, write_config  # noqa: F401

# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("exact", "truncated", "want"),
    [
        (0.5, 1.0, "exact"),
        (1.0, 1.0, "exact"),
        (EXACT_SLOWER_BY * 0.999, 1.0, "exact"),
        (EXACT_SLOWER_BY * 1.001, 1.0, "truncated"),
        (9.0, 1.0, "truncated"),
        (0.0, 0.0, "exact"),
    ],
)
def test_the_exact_sum_is_kept_unless_it_is_slower(exact, truncated, want):
    assert choose(exact, truncated) == want


def test_tail_rows_hold_the_share_of_the_pair_terms():
    pairs = np.arange(1000)  # distinct sorted times: row n has n earlier events
    for share in (*EXACT_SHARES, 0.3):
        rows = tail_rows(pairs, (0, 1000), share)
        assert rows[-1] == 999 and np.all(np.diff(rows) == 1)
        total = pairs.sum()
        assert pairs[rows].sum() >= share * total
        assert pairs[rows[1:]].sum() < share * total  # the fewest rows that do
    assert tail_rows(pairs, (0, 1000), 1.0)[0] <= 1  # row 0 has no pair terms
    sub = tail_rows(pairs, (200, 600), 1 / 8)
    assert sub[0] > 200 and sub[-1] == 599
    assert tail_rows(pairs, (5, 5), 0.5).size == 0


def test_a_choice_round_trips_and_a_damaged_one_is_refused():
    c = TriggerChoice("exact", 0.012, 0.015)
    assert TriggerChoice.from_json(c.to_json()) == c
    assert "exact pair sum" in c.describe() and "0.015" in c.describe()
    part = TriggerChoice("truncated", 3.0, 0.5, exact_share=1 / 64)
    assert "already 3 s" in part.describe()
    for bad in (
        {"trigger": "auto", "exact_seconds": 1, "truncated_seconds": 1},
        {"trigger": "exact", "exact_seconds": -1, "truncated_seconds": 1},
        {"trigger": "exact", "exact_seconds": 1},
        {"trigger": "exact", "exact_seconds": 1, "truncated_seconds": 1, "exact_share": 0},
        [1, 2],
    ):
        with pytest.raises(ValueError):
            TriggerChoice.from_json(bad)


# --------------------------------------------------------------------------- the timing loop


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeSwitch:
    """A trigger switch whose passes take the given seconds on a fake clock."""

    def __init__(self, clock: FakeClock, truncated: float, exact: float) -> None:
        self.clock, self.truncated, self.exact = clock, truncated, exact
        self.calls: list[tuple] = []
        self.chosen: TriggerChoice | None = None

    def truncated_pass(self, sigma_x: float, sigma_t: float) -> None:
        self.calls.append(("truncated",))
        self.clock.now += self.truncated

    def exact_pass(self, sigma_x: float, sigma_t: float, share: float = 1.0) -> None:
        self.calls.append(("exact", share))
        self.clock.now += self.exact * share

    def use_choice(self, c: TriggerChoice) -> None:
        self.chosen = c


def test_a_cheap_exact_pass_is_timed_whole_and_chosen():
    clock = FakeClock()
    switch = FakeSwitch(clock, truncated=0.010, exact=0.008)
    assert trigger_switch(switch) is switch
    got = time_choice(switch, 1.0, 1.0, clock=clock)
    assert got.trigger == "exact" and got.exact_share == 1.0
    assert math.isclose(got.exact_seconds, 0.008) and math.isclose(got.truncated_seconds, 0.010)
    # each pass warmed once, untimed, before it is timed; the exact one over growing shares
    want = [("truncated",), ("truncated",), ("exact", EXACT_SHARES[0])]
    assert switch.calls == want + [("exact", s) for s in EXACT_SHARES]
    assert switch.chosen is None  # time_choice does not apply it


def test_a_slow_exact_pass_stops_at_the_first_share_too_slow():
    clock = FakeClock()
    switch = FakeSwitch(clock, truncated=0.5, exact=200.0)  # 2 CPU cores at 1M
    got = time_choice(switch, 1.0, 1.0, clock=clock)
    assert got.trigger == "truncated"
    assert got.exact_share == EXACT_SHARES[1]  # 1/512 of 200 s is under 0.55 s, 1/64 is not
    assert math.isclose(got.exact_seconds, 200.0 * EXACT_SHARES[1])
    assert ("exact", 1.0) not in switch.calls
    assert "already" in got.describe()


class TwoRanks:
    """A communicator whose other rank is ``factor`` times slower."""

    size, rank = 2, 0

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def allgather(self, obj):
        return [obj, obj * self.factor]


def test_the_slowest_rank_times_each_pass():
    clock = FakeClock()
    switch = FakeSwitch(clock, truncated=0.010, exact=0.008)
    got = time_choice(switch, 1.0, 1.0, TwoRanks(3.0), clock=clock)
    assert math.isclose(got.truncated_seconds, 0.030)
    assert math.isclose(got.exact_seconds, 0.024)


# --------------------------------------------------------------------------- engines (PoCL)

N = 2000
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def data() -> EventData:
    t, x, y, d = make_events(N, integer_days=False, seed=4)
    return EventData(time=t, x=x, y=y, density=d, source="test")


def _likelihood(data: EventData, trigger: str = "auto", engine: str = "opencl", **kw):
    return make_likelihood(
        data, model=1, area=1150.0, engine=engine, precision="float64",
        tolerance=kw.pop("tolerance", TOLERANCE), trigger=trigger, **kw,
    )  # fmt: skip


def test_a_trigger_outside_the_vocabulary_is_refused(data):
    assert TRIGGERS == ("auto", "exact", "truncated")
    with pytest.raises(UsageError, match="trigger must be one of auto, exact, truncated"):
        _likelihood(data, trigger="fast", engine="reference")


@pytest.mark.opencl
@pytest.mark.parametrize("forced", ["exact", "truncated"])
def test_the_chosen_engine_agrees_with_the_float64_reference(data, monkeypatch, forced):
    """Either outcome of the rule, applied: exact to rounding (bound 0), truncated within the
    tolerance; the choice travels in the cut-off state and a fresh likelihood restored from it
    runs the same trigger."""
    want = _likelihood(data, engine="reference").loglik(PARAMS)
    monkeypatch.setattr(choice, "choose", lambda exact, truncated: forced)
    lik = _likelihood(data)
    got = choose_trigger(lik, PARAMS)
    assert got is not None and got.trigger == forced
    assert got.exact_seconds > 0 and got.truncated_seconds > 0
    ev = lik.evaluate(PARAMS)
    if forced == "exact":
        assert ev.error_bound == 0.0 and "chosen by engine.trigger: auto" in lik.path
        assert abs(ev.loglik - want) < 1e-8
    else:
        assert "truncation" in lik.path or "cut-offs beyond" in lik.path
        assert abs(ev.loglik - want) <= TOLERANCE and ev.error_bound <= TOLERANCE
    state = lik.truncation_state()
    assert state["trigger"]["trigger"] == forced
    again = _likelihood(data)
    again.restore_truncation(state)
    assert again.evaluate(PARAMS).loglik == ev.loglik


@pytest.mark.opencl
def test_a_real_timing_chooses_one_and_stays_within_the_tolerance(data):
    want = _likelihood(data, engine="reference").loglik(PARAMS)
    lik = _likelihood(data)
    got = choose_trigger(lik, PARAMS)
    assert got.trigger in ("exact", "truncated")
    assert got.trigger == choose(got.exact_seconds, got.truncated_seconds)
    assert abs(lik.loglik(PARAMS) - want) <= TOLERANCE


@pytest.mark.opencl
@pytest.mark.parametrize(
    ("engine", "trigger", "tolerance"),
    [("opencl", "exact", TOLERANCE), ("opencl", "auto", 0.0), ("reference", "auto", TOLERANCE)],
)
def test_nothing_to_choose_for_an_exact_engine(data, engine, trigger, tolerance):
    lik = _likelihood(data, trigger=trigger, engine=engine, tolerance=tolerance)
    assert trigger_switch(lik.backend) is None
    assert choose_trigger(lik, PARAMS) is None
    assert lik.truncation_state() is None


@pytest.mark.opencl
def test_a_forced_truncated_trigger_stays_truncated(data):
    lik = _likelihood(data, trigger="truncated")
    assert trigger_switch(lik.backend) is not None  # it could; the runner never asks it to
    ev = lik.evaluate(PARAMS)
    assert "trigger" not in lik.truncation_state()
    assert "chosen" not in lik.path and ev.error_bound <= TOLERANCE


# --------------------------------------------------------------------------- the config key


def test_the_key_leaves_older_runs_hash_alone(tmp_path):
    base = "data: {events: ev.h5}\nengine: {tolerance: 0.05%s}\n"

    def load(extra: str):
        return config_from_yaml_text(base % extra, base_dir=tmp_path, where="t.yaml")

    plain, auto = load(""), load(", trigger: auto")
    assert plain.engine.trigger == "auto" and plain.sha256 == auto.sha256
    assert "trigger" not in plain.to_yaml()
    for forced in ("exact", "truncated"):
        cfg = load(f", trigger: {forced}")
        assert cfg.engine.trigger == forced and cfg.sha256 != plain.sha256
        assert f"trigger: {forced}" in cfg.to_yaml()
    with pytest.raises(Exception, match="trigger"):
        load(", trigger: fastest")


# --------------------------------------------------------------------------- chains (PoCL)

CHAIN = {"engine__tolerance": TOLERANCE, "sampler__iterations": 60, "sampler__warmup": 20,
         "output__commit_every": 10}  # fmt: skip


def _checkpoint(cfg) -> dict:
    return read_sidecar(RunDir(cfg.output.run_dir).chain_path(0))["checkpoint"]


def _draws(cfg) -> dict:
    return read_chain(RunDir(cfg.output.run_dir).chain_path(0)).draws


@pytest.mark.opencl
@pytest.mark.parametrize("forced", ["exact", "truncated"])
def test_a_chain_records_its_choice_and_a_resume_reuses_it(
    tmp_path, events, monkeypatch, caplog, forced
):
    """auto (the key left out): the chain logs the choice and both times and its checkpoint
    keeps them; the resumed chain takes it from there without timing and gives the
    uninterrupted chain's draws, bit for bit."""
    monkeypatch.setattr(choice, "choose", lambda exact, truncated: forced)
    whole = load_config(write_config(tmp_path, events, "whole", **CHAIN))
    assert whole.engine.trigger == "auto"
    with caplog.at_level(logging.INFO, logger="hawkes_cli.runner"):
        run_chain(whole, 0)
    lines = [r.getMessage() for r in caplog.records if "engine.trigger auto" in r.getMessage()]
    assert len(lines) == 1 and "exact pass" in lines[0] and "truncated pass" in lines[0]
    # a chain running the exact pair sum has no truncation cut-off to speak of after warm-up
    fixed = [r for r in caplog.records if "truncation cut-off fixed" in r.getMessage()]
    assert len(fixed) == (forced == "truncated")
    recorded = _checkpoint(whole)["truncation"]["trigger"]
    assert recorded["trigger"] == forced and recorded["truncated_seconds"] > 0

    cfg = load_config(write_config(tmp_path, events, "stopped", **CHAIN))
    out = run_chain(cfg, 0, stop=StopAfter(30))
    assert out.stopped
    first = _checkpoint(cfg)["truncation"]["trigger"]
    assert first["trigger"] == forced

    def no_timing(*args, **kwargs):
        raise AssertionError("a resumed chain timed its trigger again")

    monkeypatch.setattr(choice, "time_choice", no_timing)
    monkeypatch.setattr(choice, "choose", lambda exact, truncated: "never")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hawkes_cli.runner.chain"):
        assert run_chain(cfg, 0).finished
    assert not any("engine.trigger auto" in r.getMessage() for r in caplog.records)
    assert _checkpoint(cfg)["truncation"]["trigger"] == first  # the same record, kept
    want, got = _draws(whole), _draws(cfg)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.opencl
@pytest.mark.parametrize("forced", ["exact", "truncated"])
def test_a_chain_with_a_given_trigger_never_times(tmp_path, events, monkeypatch, forced):
    def no_timing(*args, **kwargs):
        raise AssertionError("engine.trigger was given: nothing to time")

    monkeypatch.setattr(choice, "time_choice", no_timing)
    cfg = load_config(write_config(tmp_path, events, forced, engine__trigger=forced, **CHAIN))
    assert run_chain(cfg, 0).finished
    truncation = _checkpoint(cfg)["truncation"]
    if forced == "exact":
        assert truncation is None  # the plain pair sum, as tolerance 0
    else:
        assert truncation["kappa"] > 0 and "trigger" not in truncation


@pytest.mark.mpi
def test_the_ranks_of_a_chain_make_one_choice(tmp_path, events):
    """Two ranks time their own rows and take the slower rank's times: one choice, recorded by
    rank 0 and run by both. The draws are those of a serial chain given that trigger: to
    rounding when exact (a rank left truncating would be off by its truncation error), within
    twice the tolerance when truncated (rows are split differently, as in
    ``test_mpi_ranks_give_the_serial_chain``)."""
    path = write_config(tmp_path, events, "mpi-auto", chains__gpus_per_chain=2, **CHAIN)
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    proc = subprocess.run(
        [mpiexec, "-n", "2", *cli("chain", str(path), "--chain", "0")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = load_config(path)
    chosen = _checkpoint(cfg)["truncation"]["trigger"]["trigger"]
    serial = load_config(write_config(tmp_path, events, "serial", engine__trigger=chosen, **CHAIN))
    run_chain(serial, 0)
    a, b = _draws(serial), _draws(cfg)
    for name in (*PARAM_NAMES, "iteration", "accepted"):
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    atol = 1e-8 if chosen == "exact" else 2 * TOLERANCE
    np.testing.assert_allclose(b["loglik"], a["loglik"], rtol=0, atol=atol)
