# ruff: noqa: F811  (the events fixture is imported from test_runner, as pytest needs)
"""A run's identity travels with its directory: copies and moves resume where they are, a copy
never writes into the original, a resume on changed events is refused, and ``--overwrite``
never replaces the config of a run whose chains are running."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.config import load_config
from hawkes_cli.data import load_events, save_events
from hawkes_cli.errors import StorageError
from hawkes_cli.rundir import RunDir
from hawkes_cli.runner import run_chain
from hawkes_cli.storage import read_chain, read_sidecar
from tests.test_runner import StopAfter, events, write_config  # noqa: F401

pytestmark = pytest.mark.opencl

SHORT = {"sampler__iterations": 120, "sampler__warmup": 40}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _stopped_run(tmp_path: Path, events: Path, name: str, after: int = 50) -> Path:
    """A run directory whose chain 0 stopped (committed) after ``after`` iterations."""
    cfg = load_config(write_config(tmp_path, events, name, **SHORT))
    out = run_chain(cfg, 0, stop=StopAfter(after))
    assert out.stopped and not out.finished
    return Path(cfg.output.run_dir)


def _committed(run_dir: Path) -> int:
    return int(read_sidecar(RunDir(run_dir).chain_path(0))["draws"])


def test_a_copied_run_resumes_in_the_copy_and_never_touches_the_original(tmp_path, events):
    run = _stopped_run(tmp_path, events, "orig")
    before = (RunDir(run).chain_path(0).read_bytes(), _committed(run))
    copy = tmp_path / "run-copy"
    shutil.copytree(run, copy)
    cfg = load_config(copy / "config.yaml")
    assert Path(cfg.output.run_dir) == copy and cfg.created_in == run
    # the identity does not move: same sha256, same YAML (the chain files still belong to it)
    assert cfg.sha256 == load_config(run / "config.yaml").sha256
    run_chain(cfg, 0)
    assert read_sidecar(RunDir(copy).chain_path(0))["checkpoint"]["finished"]
    assert (RunDir(run).chain_path(0).read_bytes(), _committed(run)) == before
    # the copy's resumed chain is the uninterrupted chain of the original config, bit for bit
    whole = load_config(write_config(tmp_path, events, "whole", **SHORT))
    run_chain(whole, 0)
    want = read_chain(RunDir(whole.output.run_dir).chain_path(0)).draws
    got = read_chain(RunDir(copy).chain_path(0)).draws
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # --overwrite on the copy starts the copy afresh and still leaves the original alone
    proc = cli("local", str(copy / "config.yaml"), "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert (RunDir(run).chain_path(0).read_bytes(), _committed(run)) == before


def test_a_moved_run_resumes_where_it_is_and_status_reads_it_there(tmp_path, events):
    run = _stopped_run(tmp_path, events, "first", after=30)
    moved = tmp_path / "elsewhere" / "second"
    moved.parent.mkdir()
    run.rename(moved)
    status = cli("status", str(moved), "--json")
    assert status.returncode == 0, status.stderr
    chains = json.loads(status.stdout)
    chains = chains["chains"] if isinstance(chains, dict) else chains
    assert chains[0]["draws"] == 30, chains
    assert chains[0]["phase"] == "stopped", chains  # the chain's own last word, read there
    proc = cli("local", str(moved / "config.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert not run.exists(), "the run was started afresh at its old place"
    assert read_sidecar(RunDir(moved).chain_path(0))["checkpoint"]["finished"]
    assert f"hawkes-diagnose {moved}" in proc.stdout


def test_an_edited_copy_of_a_run_config_is_a_plain_config(tmp_path, events):
    """Only a run directory's own, unedited config.yaml follows the directory: an edited one
    is a config like any other and names its run directory itself."""
    run = _stopped_run(tmp_path, events, "tmpl", after=5)
    other = tmp_path / "other"
    other.mkdir()
    text = (run / "config.yaml").read_text().replace("seed: 7", "seed: 8")
    (other / "config.yaml").write_text(text)
    cfg = load_config(other / "config.yaml")
    assert Path(cfg.output.run_dir) == run and cfg.created_in is None


def test_a_resume_on_changed_events_is_refused(tmp_path, events):
    ev = tmp_path / "events.h5"
    shutil.copy(events, ev)
    cfg = load_config(write_config(tmp_path, ev, "data", **SHORT))
    run_chain(cfg, 0, stop=StopAfter(20))
    chain = RunDir(cfg.output.run_dir).chain_path(0)
    assert read_chain(chain).attrs["events_sha256"] == load_events(ev).digest()
    data = load_events(ev)
    keep = np.arange(data.n) != data.n // 2  # one event less, same path
    fewer = type(data)(data.time[keep], data.x[keep], data.y[keep], fips=data.fips[keep],
                       attrs=data.attrs)  # fmt: skip
    save_events(fewer, ev)
    before = chain.read_bytes()
    with pytest.raises(StorageError, match="events file changed"):
        run_chain(load_config(cfg.source), 0)
    assert chain.read_bytes() == before
    proc = cli("chain", str(cfg.source), "--chain", "0")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "events file changed" in proc.stderr
    # the goodness of fit refuses to describe other data than the chains ran on
    args = [str(cfg.output.run_dir), "--burn", "0", "--gof", str(tmp_path / "gof")]
    gof = subprocess.run([sys.executable, "-m", "hawkes_cli", "diagnose", *args],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert gof.returncode == 2 and "changed since the chains ran" in gof.stderr
    assert not (tmp_path / "gof").exists()


def test_overwrite_never_replaces_the_config_of_a_running_run(tmp_path, events):
    path = write_config(tmp_path, events, "busy", sampler__iterations=5000, sampler__warmup=10)
    cfg = load_config(path)
    run_dir = RunDir(cfg.output.run_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hawkes_cli", "run", "chain", str(path), "--chain", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        from tests.test_runner import _wait_for_draws

        _wait_for_draws(run_dir.chain_path(0), 20, proc)
        before = run_dir.config_path.read_text()
        other = write_config(tmp_path, events, "busy", sampler__iterations=6000,
                             sampler__warmup=10)  # fmt: skip
        out = cli("local", str(other), "--overwrite")
        assert out.returncode != 0 and "Traceback" not in out.stderr
        assert "is running" in out.stderr and "nothing was changed" in out.stderr
        assert run_dir.config_path.read_text() == before
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert proc.returncode == 75  # stopped at a commit, resumable: its config is intact
