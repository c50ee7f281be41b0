"""HAWKES_PROFILE: a chain writes one record per iteration, with its kernels' device seconds
(OpenCL profiling events), the bytes it read back and its host stages, checked against what
the chain file says it did and against the sizes of the arrays it must have read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hawkes_cli.data import save_events
from hawkes_cli.model import Params
from hawkes_cli.rundir import RunDir
from hawkes_cli.simulate import DensityGrid, simulate
from hawkes_cli.storage import read_chain
from tests.conftest import clean_env, write_config_file

pytestmark = pytest.mark.opencl

TRUTH = Params(mu0=0.5, tau_t=40.0, xi0=0.5, sigma_x=0.3, sigma_t=4.0)
BOUNDS = (0.0, 10.0, 0.0, 10.0)


def run_profiled(tmp_path: Path, resample_every: int) -> tuple[list[dict], dict, int]:
    grid = DensityGrid.log_uniform(BOUNDS, 4, 4, 1.0, 100.0, seed=3)
    data = simulate(TRUTH, model=1, n_background=150, t_end=100.0, bounds=BOUNDS, seed=5,
                    grid=grid)  # fmt: skip
    events = tmp_path / "events.h5"
    save_events(data, events)
    cfg = {
        "data": {"events": str(events)},
        "model": {"kind": 1},
        "sampler": {"kind": "tiered", "iterations": 6, "warmup": 2, "seed": 3,
                    "resample_every": resample_every, "initial": TRUTH.as_dict(),
                    "n_cheap": 3},
        "chains": {"count": 1},
        "engine": {"backend": "opencl", "precision": "float64", "tolerance": 0.0},
        "output": {"run_dir": str(tmp_path / "run"), "commit_every": 3},
    }  # fmt: skip
    config = write_config_file(tmp_path / "run.yaml", cfg)
    prof = tmp_path / "profile.jsonl"
    subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", "chain", str(config), "--chain", "0"],
        env=clean_env(HAWKES_PROFILE=str(prof)), check=True, capture_output=True, text=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in prof.read_text().splitlines()]
    chain = read_chain(RunDir(tmp_path / "run").chain_path(0)).draws
    return rows, chain, data.n


@pytest.mark.parametrize("resample_every", [0, 1])
def test_profile_records_each_iteration(tmp_path, resample_every: int) -> None:
    rows, chain, n = run_profiled(tmp_path, resample_every)
    assert [r["iteration"] for r in rows] == list(range(6))
    for r, passes in zip(rows, chain["pair_passes"], strict=True):
        # the exact engine reads E back once per trigger pass: n float64 values
        assert r["reads"] >= r["trigger_passes"]
        assert r["bytes_down"] >= r["trigger_passes"] * n * 8
        assert r["trigger_passes"] <= passes
        trig = r["kernels"].get("trigger_model1", {"launches": 0, "seconds": 0.0})
        assert trig["launches"] == r["trigger_passes"]
        if r["trigger_passes"]:
            assert trig["seconds"] > 0
        assert r["kernel_s"] == pytest.approx(sum(k["seconds"] for k in r["kernels"].values()))
        assert r["host_cpu_s"] > 0 and r["wall_s"] > 0
    redrawn = [r for r in rows if r["redraw"]]
    if resample_every:
        # every iteration after the first redraws: a polygon draw and an upload of locations
        assert len(redrawn) == 5
        assert all("location draw" in r["stages"] and r["bytes_up"] > 0 for r in redrawn)
    else:
        assert not redrawn
        assert not any("location draw" in r["stages"] for r in rows)


def test_profile_is_off_by_default(monkeypatch) -> None:
    """Without HAWKES_PROFILE nothing is recorded and every hook returns at once."""
    from hawkes_cli.engine import profile

    monkeypatch.delenv(profile.PROFILE_ENV, raising=False)
    profile.reset()
    try:
        assert not profile.active()
        assert profile.iteration_end(0) is None
        with profile.stage("x"):
            pass
    finally:
        profile.reset()


def test_worker_stages_are_reported_apart(monkeypatch, tmp_path) -> None:
    """A worker thread's stage (:mod:`hawkes_cli.engine.ahead`) lands in ``worker_stages`` and
    ``worker_cpu_s`` with that thread's CPU time, not in the main thread's ``stages`` or
    ``host_cpu_s``; a non-blocking read counts bytes but no synchronisation."""
    import threading
    import time

    from hawkes_cli.engine import profile

    monkeypatch.setenv(profile.PROFILE_ENV, str(tmp_path / "p.jsonl"))
    profile.reset()
    try:
        assert profile.active()
        profile.iteration_begin()

        def spin() -> None:
            with profile.worker_stage("grid index"):
                end = time.thread_time() + 0.2
                while time.thread_time() < end:
                    pass

        worker = threading.Thread(target=spin)
        worker.start()
        worker.join()
        profile.read_back(800, sync=False)
        with profile.stage("set locations"):
            pass
        r = profile.iteration_end(0)
    finally:
        profile.reset()
    assert r["worker_stages"]["grid index"]["calls"] == 1
    assert r["worker_cpu_s"] >= 0.2 and r["worker_stages"]["grid index"]["cpu_s"] >= 0.2
    assert "grid index" not in r["stages"] and r["host_cpu_s"] < 0.1  # the main thread waited
    assert r["stages"]["set locations"]["calls"] == 1
    assert (r["reads"], r["bytes_down"], r["syncs"]) == (1, 800, 0)
