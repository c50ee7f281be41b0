"""A full disk (a small tmpfs) in the middle of a run, a simulation and an export: one clear
``error:`` line naming the file and the cause, the error's exit code, no traceback, no
segmentation fault, no hidden temporary file, and every committed draw kept (the chain then
resumes to the draws of a run that never failed).

A nearly full disk (8 to 100 KiB free) is the harder case: an HDF5 file then begins to be
written and fails half-way. Before the writers built their files in memory
(:func:`hawkes_cli.atomic.hdf5_image`) that ended in h5py's "Can't decrement id ref count"
tracebacks, a segmentation fault (exit -11) and a hidden ``.x.h5.PID.tmp`` left behind, for
``hawkes-prep simulate`` and for a stopped chain resumed by ``hawkes-run chain`` or ``local``.

The tier mounts a 3 MiB tmpfs, which needs root and a kernel that allows it; elsewhere it skips
and says why, except under ``CI=true``, where it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from hawkes_cli.model import Params
from hawkes_cli.storage import read_chain

SIZE = "3m"
CONFIG = {
    "model": {"kind": 1},
    "sampler": {"kind": "univariate", "iterations": 2500, "warmup": 100, "seed": 1,
                "resample_every": 0, "initial": {}},
    "chains": {"count": 1},
    "engine": {"backend": "reference"},
    "output": {"commit_every": 250},
}  # fmt: skip


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    why = None
    if os.geteuid() != 0:
        why = "mounting a tmpfs needs root"
    else:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
                              capture_output=True, text=True)  # fmt: skip
        if proc.returncode:
            why = f"cannot mount a tmpfs here: {proc.stderr.strip()}"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the disk-full tier must run under CI: {why}")
        pytest.skip(why)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave_kib: int) -> Path:
    """Fill the disk up to ``leave_kib`` KiB free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(free - leave_kib * 1024, 0))
    return filler


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hawkes_cli", *args], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def _one_error_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "Exception ignored" not in proc.stderr and "ref count" not in proc.stderr
    assert "No space left on device" in errors[0]
    return errors[0]


def _hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*")]


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ev") / "ev.h5"
    assert tool("prep", "simulate", "--n-background", "150", "--out", str(path)).returncode == 0
    return path


def _config(where: Path, events: Path, run_dir: Path) -> Path:
    cfg = {"data": {"events": str(events)}, **CONFIG,
           "output": {**CONFIG["output"], "run_dir": str(run_dir)}}  # fmt: skip
    path = where / f"{run_dir.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_chain_that_fills_the_disk_keeps_its_draws_and_resumes(small_disk, events, tmp_path):
    run = small_disk / "run"
    cfg = _config(tmp_path, events, run)
    filler = _fill(small_disk, 200)  # room for one chunk of 1024 rows per dataset, not two
    proc = tool("run", "chain", str(cfg), "--chain", "0")
    line = _one_error_line(proc, 7)
    assert "cannot commit draws to" in line and "is intact" in line
    side = json.loads((run / "chains" / "chain-00.ckpt.json").read_text())
    kept = read_chain(run / "chains" / "chain-00.h5")
    assert 0 < side["draws"] < 2500 and kept.n_committed == side["draws"]
    assert _hidden(small_disk) == []
    # still full: the resume's rewrite cannot start either; the draws stay
    again = tool("run", "chain", str(cfg), "--chain", "0")
    _one_error_line(again, 7)
    assert read_chain(run / "chains" / "chain-00.h5").n_committed == side["draws"]
    filler.unlink()
    done = tool("run", "chain", str(cfg), "--chain", "0")
    assert done.returncode == 0, done.stderr
    whole_cfg = _config(tmp_path, events, tmp_path / "whole")
    assert tool("run", "chain", str(whole_cfg), "--chain", "0").returncode == 0
    got = read_chain(run / "chains" / "chain-00.h5").draws
    want = read_chain(tmp_path / "whole" / "chains" / "chain-00.h5").draws
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_simulate_and_netcdf_on_a_full_disk_write_nothing(small_disk, events, tmp_path):
    run = tmp_path / "run"
    assert tool("run", "chain", str(_config(tmp_path, events, run)), "--chain", "0").returncode == 0
    _fill(small_disk, 8)
    for suffix in ("h5", "csv"):
        proc = tool("prep", "simulate", "--n-background", "5000", "--out",
                    str(small_disk / f"ev.{suffix}"))  # fmt: skip
        assert "writing the events file failed" in _one_error_line(proc, 3)
    proc = tool("diagnose", str(run), "--netcdf", str(small_disk / "run.nc"))
    assert "cannot write the netCDF file" in _one_error_line(proc, 2)
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_a_read_only_disk_refuses_with_one_line_and_keeps_the_draws(small_disk, events, tmp_path):
    """A file system that refuses writes (here remounted read-only: EROFS, the same path in
    the code as EPERM/EACCES, which root does not get): one error line naming the cause."""
    run = small_disk / "run"
    cfg = _config(tmp_path, events, run)
    assert tool("run", "chain", str(cfg), "--chain", "0").returncode == 0
    side = (run / "chains" / "chain-00.ckpt.json").read_bytes()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    proc = tool("run", "chain", str(cfg), "--chain", "0", "--overwrite")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Read-only file system" in errors[0], proc.stderr
    proc = tool("prep", "simulate", "--out", str(small_disk / "ev.h5"))
    assert proc.returncode == 3 and "Read-only file system" in proc.stderr
    assert (run / "chains" / "chain-00.ckpt.json").read_bytes() == side


# ------------------------------------------------------------------ a nearly full disk


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, events) -> Path:
    """A run directory (on the ordinary disk) whose one chain a SIGTERM stopped after its
    first commit: a resume rewrites its chain file (about 100 KiB) first."""
    where = tmp_path_factory.mktemp("stopped")
    cfg = {"data": {"events": str(events)}, **CONFIG,
           "sampler": {**CONFIG["sampler"], "iterations": 100_000},
           "output": {**CONFIG["output"], "run_dir": str(where / "run")}}  # fmt: skip
    path = where / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    side = where / "run" / "chains" / "chain-00.ckpt.json"
    proc = subprocess.Popen([sys.executable, "-m", "hawkes_cli", "run", "chain", str(path),
                             "--chain", "0"], stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if side.exists() and json.loads(side.read_text())["draws"] > 0:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]  # stopped after a commit
    return where / "run"


def _copy_run(stopped: Path, disk: Path) -> Path:
    run = disk / "run"
    shutil.copytree(stopped, run)
    return run


@pytest.mark.parametrize("leave_kib", [8, 48])
def test_simulate_on_a_nearly_full_disk_fails_cleanly(small_disk, leave_kib):
    _fill(small_disk, leave_kib)  # the file needs about 53 KB
    proc = tool("prep", "simulate", "--out", str(small_disk / "x.h5"))
    line = _one_error_line(proc, 3)
    assert "writing the events file failed" in line and "needs about 0.05" in line
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_a_resume_on_a_nearly_full_disk_keeps_the_chain(small_disk, stopped_run):
    run = _copy_run(stopped_run, small_disk)
    chain = run / "chains" / "chain-00.h5"
    before = chain.read_bytes(), (run / "chains" / "chain-00.ckpt.json").read_bytes()
    _fill(small_disk, 8)
    proc = tool("run", "chain", str(run / "config.yaml"), "--chain", "0")
    line = _one_error_line(proc, 7)
    assert f"cannot write chain file {chain}" in line and "needs about" in line
    assert (chain.read_bytes(), (run / "chains" / "chain-00.ckpt.json").read_bytes()) == before
    assert _hidden(small_disk) == []


def test_local_resumes_on_a_nearly_full_disk_with_one_error_line(small_disk, stopped_run):
    """``hawkes-run local`` reports the chain's exit 7 (StorageError) and passes it on; the
    chain's log holds its one error line and no h5py traceback."""
    run = _copy_run(stopped_run, small_disk)
    _fill(small_disk, 64)
    proc = tool("run", "local", str(run / "config.yaml"))
    assert proc.returncode == 7 and "chain 0 failed (exit 7)" in proc.stderr, proc.stderr
    log = (run / "logs" / "chain-00.log").read_text()
    assert "Traceback" not in log and "Exception ignored" not in log, log[-2000:]
    errors = [line for line in log.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "cannot write chain file" in errors[0], log[-2000:]
    assert _hidden(small_disk) == []


def test_netcdf_and_gof_on_a_nearly_full_disk_write_nothing(small_disk, stopped_run):
    """The netCDF file (about 150 KB) and the files of ``--gof`` (in process: the CLI only
    prints the StorageError) meet a full disk in plain writes."""
    from hawkes_cli.errors import StorageError
    from hawkes_cli.gof import GofOptions, run_gof

    _fill(small_disk, 48)
    proc = tool("diagnose", str(stopped_run), "--no-systematic", "--netcdf",
                str(small_disk / "run.nc"))  # fmt: skip
    line = _one_error_line(proc, 2)
    assert "cannot write the netCDF file" in line and "needs about" in line
    with pytest.raises(StorageError, match="cannot write its files: No space left on device"):
        run_gof(stopped_run, small_disk / "gof", GofOptions(draws=1, date="5"))
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_prep_cases_with_dropped_rows_on_a_nearly_full_disk(small_disk):
    """The ``/dropped`` group of ``hawkes-prep hhs`` is built with the events, in memory."""
    from hawkes_cli.errors import EventsError
    from hawkes_cli.prep.output import write_cases
    from hawkes_cli.simulate import simulate_with_parents

    data, _ = simulate_with_parents(Params(0.5, 30.0, 0.5, 0.2, 5.0), model=1, n_background=2000,
                                    t_end=100.0, seed=1)  # fmt: skip
    text = np.array(["x"] * 3)
    dropped = {"record": np.arange(3), "reason": np.ones(3, np.uint8), "hospital_pk": text,
               "collection_week": text, "fips_code": text}  # fmt: skip
    _fill(small_disk, 24)
    with pytest.raises(EventsError, match=r"No space left on device; it needs about \d"):
        write_cases(data, dropped, small_disk / "cases.h5")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]
