"""A full disk (a small tmpfs) in the middle of a run, a simulation and an export: one clear
``error:`` line naming the file and the cause, the error's exit code, no traceback, no
segmentation fault, no hidden temporary file, and every committed draw kept (the chain then
resumes to the draws of a run that never failed).

The tier mounts a 3 MiB tmpfs, which needs root and a kernel that allows it; elsewhere it skips
and says why, except under ``CI=true``, where it must run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

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
