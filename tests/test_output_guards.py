# ruff: noqa: F811  (the events fixture is imported from test_runner, as pytest needs)
"""No command writes over a file it did not make for that purpose: output paths are checked
against the run's own files and the inputs, and multi-file outputs are swapped in whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hawkes_cli import atomic
from hawkes_cli.config import load_config
from hawkes_cli.rundir import RunDir, output_problem
from hawkes_cli.runner import run_chain
from tests.test_runner import events, write_config  # noqa: F401

pytestmark = pytest.mark.opencl


@pytest.fixture(scope="module")
def run(tmp_path_factory, events) -> Path:
    tmp = tmp_path_factory.mktemp("guards")
    cfg = load_config(write_config(tmp, events, "run", sampler__iterations=60, sampler__warmup=20))
    run_chain(cfg, 0)
    run_chain(cfg, 1)
    return Path(cfg.output.run_dir)


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hawkes_cli", name, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", ["chains/chain-00.h5", "config.yaml", "chains/new.nc", "EVENTS"])
def test_netcdf_onto_the_runs_files_or_its_events_is_refused(run, events, target):
    path = events if target == "EVENTS" else run / target
    before, ev = _snapshot(run), events.read_bytes()
    proc = tool("diagnose", str(run), "--netcdf", str(path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "refusing to write --netcdf" in proc.stderr
    assert _snapshot(run) == before and events.read_bytes() == ev


def test_simulate_onto_a_chain_file_is_refused_anywhere(run, tmp_path):
    proc = tool("prep", "simulate", "--out", str(run / "chains" / "chain-00.h5"))
    assert proc.returncode != 0 and "one of the run's own files" in proc.stderr
    # a chain file copied out of its run is still a chain file
    loose = tmp_path / "loose.h5"
    loose.write_bytes((run / "chains" / "chain-00.h5").read_bytes())
    assert output_problem(loose) == "it is a hawkes chain file"
    proc = tool("prep", "simulate", "--out", str(loose))
    assert proc.returncode != 0 and "hawkes chain file" in proc.stderr


def test_outputs_elsewhere_are_written_and_a_missing_folder_is_made(run, tmp_path):
    nc = tmp_path / "new" / "deeper" / "run.nc"
    proc = tool("diagnose", str(run), "--netcdf", str(nc), "--plots", str(tmp_path / "plots"))
    assert proc.returncode in (0, 1), proc.stderr  # 1: a short run may fail a check
    assert nc.is_file() and sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "posterior.png",
        "rank.png",
        "trace.png",
    ]
    assert output_problem(tmp_path / "other.nc") is None


def test_a_plot_or_gof_folder_holding_other_files_is_refused(run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for option in ("--plots", "--gof"):
        proc = tool("diagnose", str(run), option, str(mine))
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "does not write" in proc.stderr
        assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    # the run directory itself, as a folder output
    proc = tool("diagnose", str(run), "--gof", str(run))
    assert proc.returncode != 0 and "it is the run directory" in proc.stderr


def test_replacing_folder_swaps_a_whole_set_or_leaves_the_old_one(tmp_path):
    out = tmp_path / "gof"
    with atomic.replacing_folder(out, owns=lambda n: n.endswith(".csv")) as tmp:
        (tmp / "a.csv").write_text("old a")
        (tmp / "b.csv").write_text("old b")
    # interrupted: the new set is dropped, the old one stays whole
    with (
        pytest.raises(KeyboardInterrupt),
        atomic.replacing_folder(out, owns=lambda n: n.endswith(".csv")) as tmp,
    ):
        (tmp / "a.csv").write_text("new a")
        raise KeyboardInterrupt
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.csv": "old a", "b.csv": "old b"}
    # completed: the new set replaces the old one whole (b.csv of the old run is gone)
    with atomic.replacing_folder(out, owns=lambda n: n.endswith(".csv")) as tmp:
        (tmp / "a.csv").write_text("new a")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.csv": "new a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gof"]  # no hidden leftovers


def test_the_same_path_for_two_outputs_is_refused(run, tmp_path):
    proc = tool("diagnose", str(run), "--plots", str(tmp_path / "x"), "--gof", str(tmp_path / "x"))
    assert proc.returncode != 0 and "two outputs share one path" in proc.stderr
    nested = ("--netcdf", str(tmp_path / "g" / "r.nc"), "--gof", str(tmp_path / "g"))
    proc = tool("diagnose", str(run), *nested)
    assert proc.returncode != 0 and "give the outputs separate paths" in proc.stderr


def test_run_files_are_recognised(run):
    rd = RunDir(run)
    for path in (rd.config_path, rd.chain_path(0), rd.logs_dir / "x.log", run):
        assert output_problem(path) is not None, path
