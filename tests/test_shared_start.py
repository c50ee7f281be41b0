"""One fast start per run directory: the chains share the search and draw exactly as if each
had searched itself."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import numpy as np
import pytest

from hawkes_cli.config import load_config
from hawkes_cli.data import load_events
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.start import StartResult
from hawkes_cli.start.shared import SharedStart, shared_start, start_key
from hawkes_cli.storage import read_sidecar
from tests.test_runner import TIERED, draws, events, write_config  # noqa: F401  (fixture)


def _result(x: float) -> StartResult:
    return StartResult(
        theta=(x, 0.0, 0.0, 0.0, 0.0), log_post=-1.0, cov=tuple(map(tuple, np.eye(5))),
        hessian="none",
        n_clipped=0, n_sub_evals=1, n_full_evals=1, seconds=0.5, modes=(),
    )  # fmt: skip


def test_concurrent_chains_search_once(tmp_path):
    """Four chains asking at once: one computes (while holding the lock, the others wait), all
    get its result, and the file holds it."""
    path = tmp_path / "start.json"
    calls: list[int] = []
    got: dict[int, tuple[SharedStart, bool]] = {}

    def compute(chain: int) -> SharedStart:
        calls.append(chain)
        time.sleep(0.5)
        return SharedStart(_result(float(chain)), {"kappa": 15.0 + chain}, chain)

    def run(chain: int) -> None:
        got[chain] = shared_start(path, "k1", lambda: compute(chain), chain_id=chain)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(calls) == 1
    first = calls[0]
    assert sorted(reused for _, reused in got.values()) == [False, True, True, True]
    for shared, _ in got.values():
        assert shared.chain_id == first
        assert shared.result.theta[0] == float(first)
        assert shared.truncation == {"kappa": 15.0 + first}
    assert json.loads(path.read_text())["key"] == "k1"


def test_a_stale_or_damaged_file_is_searched_again(tmp_path, caplog):
    """Another key (config, ranks or events changed) or a damaged file: searched again and
    rewritten, never served."""
    path = tmp_path / "start.json"
    shared_start(path, "old", lambda: SharedStart(_result(1.0), None, 0), chain_id=0)
    new, reused = shared_start(path, "new", lambda: SharedStart(_result(2.0), None, 1), chain_id=1)
    assert not reused and new.result.theta[0] == 2.0
    assert json.loads(path.read_text())["key"] == "new"
    path.write_text('{"schema": 1, "key": "new", "chain_id": 0, "start": {"theta": [')
    new, reused = shared_start(path, "new", lambda: SharedStart(_result(3.0), None, 2), chain_id=2)
    assert not reused and new.result.theta[0] == 3.0
    assert "unreadable" in caplog.text
    # a start of an older search (schema 1 searched on the file's points even when the run
    # redraws locations) is never served, whatever its key
    old = json.loads(path.read_text()) | {"schema": 1}
    path.write_text(json.dumps(old))
    new, reused = shared_start(path, "new", lambda: SharedStart(_result(4.0), None, 3), chain_id=3)
    assert not reused and new.result.theta[0] == 4.0


def test_start_key_follows_config_ranks_and_events(tmp_path, events):  # noqa: F811
    data = load_events(events)
    key = start_key("abc", 1, data)
    assert key == start_key("abc", 1, load_events(events))
    assert key != start_key("abd", 1, data)
    assert key != start_key("abc", 2, data)
    x = data.x.copy()
    x[0] += 1e-9
    assert key != start_key("abc", 1, dataclasses.replace(data, x=x))


@pytest.mark.opencl
def test_a_chain_reading_the_shared_start_draws_as_if_it_had_searched(tmp_path, events):  # noqa: F811
    """Truncated engine (the search's full evaluations tighten the cut-off on these data):
    chain 1 of a run whose chain 0 searched first reads the start and the cut-off, runs no
    search, and its every column equals chain 1 of a run where it searched itself."""
    over = {"engine__tolerance": 1e-2, "engine__trigger": "truncated",
            "sampler__iterations": 120, "sampler__warmup": 60, **TIERED}  # fmt: skip
    solo = load_config(write_config(tmp_path, events, "solo", **over))
    alone = run_chain(solo, 1)
    shared = load_config(write_config(tmp_path, events, "shared", **over))
    first = run_chain(shared, 0)
    second = run_chain(shared, 1)
    assert first.finished and second.finished and alone.finished

    on_file = json.loads(RunDir(shared.output.run_dir).start_path.read_text())
    assert on_file["chain_id"] == 0
    assert on_file["truncation"]["kappa"] > 0
    # the search's passes (hundreds) were spent once: chain 1 evaluated its start point only
    assert first.start_passes > 50 and alone.start_passes > 50
    assert second.start_passes <= 2
    want, got = draws(solo.output.run_dir, 1), draws(shared.output.run_dir, 1)
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    ckpt = read_sidecar(RunDir(shared.output.run_dir).chain_path(1))["checkpoint"]
    want_ckpt = read_sidecar(RunDir(solo.output.run_dir).chain_path(1))["checkpoint"]
    assert ckpt["truncation"] == want_ckpt["truncation"]
    assert ckpt["start"]["theta"] == want_ckpt["start"]["theta"]


def _written(tmp_path, result: StartResult | None = None):
    path = tmp_path / "start.json"
    shared = SharedStart(result or _result(1.0), None, 0)
    path.write_text(json.dumps(shared.to_json("k1")))
    return path


def _again(path, chain: int = 1) -> tuple[SharedStart, bool]:
    return shared_start(path, "k1", lambda: SharedStart(_result(9.0), None, chain), chain_id=chain)


def test_a_damaged_start_file_is_searched_again_with_a_warning(tmp_path, caplog):
    path = _written(tmp_path)
    assert _again(path)[1]  # intact: reused
    text = path.read_text()
    path.write_text(text.replace('"log_post": -1.0', '"log_post": -1.5'))  # one digit flipped
    shared, reused = _again(path)
    assert not reused and shared.result.theta[0] == 9.0
    assert "sha256 does not match" in caplog.text


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"theta": (float("nan"), 0.0, 0.0, 0.0, 0.0)}, "not finite"),
        ({"cov": tuple(map(tuple, -np.eye(5)))}, "not positive definite"),
        ({"cov": tuple(map(tuple, np.triu(np.ones((5, 5)))))}, "not symmetric"),
    ],
)
def test_a_start_that_cannot_start_a_sampler_is_searched_again(tmp_path, caplog, change, why):
    """A file whose checksum is right (written so) but whose mode or curvature is unusable:
    never a traceback in every chain, a WARNING and a new search."""
    bad = dataclasses.replace(_result(1.0), **change)
    path = tmp_path / "start.json"
    path.write_text(json.dumps(SharedStart(bad, None, 0).to_json("k1")))  # NaN as JSON's NaN
    shared, reused = _again(path)
    assert not reused and shared.result.theta[0] == 9.0
    assert "ignoring the shared start" in caplog.text and why in caplog.text


def _hold(lock, text: str) -> int:
    import fcntl
    import os

    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, text.encode(), 0)
    return fd


def test_a_hung_holder_of_the_start_lock_is_named_and_given_up_on(tmp_path, monkeypatch):
    import os

    from hawkes_cli.errors import StorageError, UsageError

    fd = _hold(tmp_path / "start.lock", "chain 3, pid 4242 on nodeX, since 2026-01-01T00:00:00Z")
    try:
        monkeypatch.setenv("HAWKES_START_WAIT", "0.5")
        t0 = time.monotonic()
        with pytest.raises(StorageError, match=r"gave up after 1 s .*chain 3, pid 4242 on nodeX"):
            _again(tmp_path / "start.json")
        assert time.monotonic() - t0 < 5
        monkeypatch.setenv("HAWKES_START_WAIT", "soon")
        with pytest.raises(UsageError, match="HAWKES_START_WAIT='soon'"):
            _again(tmp_path / "start.json")
    finally:
        os.close(fd)
    monkeypatch.delenv("HAWKES_START_WAIT")
    assert not _again(tmp_path / "start.json")[1]  # released: this chain searches


def test_a_stop_request_ends_the_wait_at_once(tmp_path):
    import os

    from hawkes_cli.errors import Interrupted

    fd = _hold(tmp_path / "start.lock", "chain 0")
    try:
        with pytest.raises(Interrupted, match="stopped while waiting"):
            shared_start(tmp_path / "start.json", "k1", lambda: None, chain_id=2,
                         should_stop=lambda: True)  # fmt: skip
    finally:
        os.close(fd)


def test_a_stop_request_ends_the_search_within_an_evaluation(tmp_path, events):  # noqa: F811
    """A signal during the fast start stops it at the next evaluation (not when the search
    ends): exit as stopped, nothing committed; the next run searches and runs to the end."""
    from hawkes_cli.errors import Interrupted
    from hawkes_cli.stop import StopFlag

    class StopInSearch(StopFlag):
        def __init__(self) -> None:
            super().__init__()
            self.polls = 0

        def requested(self) -> bool:
            self.polls += 1
            return self.polls > 5  # the sixth evaluation of the search

    cfg = load_config(write_config(tmp_path, events, "stop", **TIERED))
    stop = StopInSearch()
    with pytest.raises(Interrupted, match="stopped during the fast start"):
        run_chain(cfg, 0, stop=stop)
    assert stop.polls == 6
    assert not RunDir(cfg.output.run_dir).start_path.exists()
    side = read_sidecar(RunDir(cfg.output.run_dir).chain_path(0))
    assert side is None or side["draws"] == 0
    assert run_chain(cfg, 0).finished
