"""Messages that lead somewhere: path hints a shell can paste, the disk named when a kernel
build fails for want of space."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections import namedtuple

import yaml

from hawkes_cli import kernels


def test_a_nearly_full_kernel_cache_is_named(monkeypatch, tmp_path):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "pocl"))
    monkeypatch.setattr(kernels.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 4096, 4096))
    hint = kernels._cache_space_hint()
    assert f"the kernel cache folder {tmp_path / 'pocl'} has only 4,096 bytes free" in hint
    monkeypatch.setattr(kernels.shutil, "disk_usage", lambda p: usage(10**12, 0, 10**11))
    assert kernels._cache_space_hint() == ""


def test_path_hints_are_quoted_for_the_shell(tmp_path):
    folder = tmp_path / "my runs"
    folder.mkdir()
    ev = folder / "ev.h5"
    sim = [sys.executable, "-m", "hawkes_cli", "prep", "simulate", "--n-background", "60"]
    assert subprocess.run([*sim, "--out", str(ev)], capture_output=True).returncode == 0
    cfg = {
        "data": {"events": str(ev)},
        "sampler": {"kind": "univariate", "iterations": 30, "warmup": 10, "initial": {},
                    "resample_every": 0},
        "chains": {"count": 1},
        "engine": {"backend": "reference"},
        "output": {"run_dir": str(folder / "run one")},
    }  # fmt: skip
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "hawkes_cli", "run", "local", str(path)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("diagnose with: "))
    assert shlex.split(line.removeprefix("diagnose with: ")) == [
        "hawkes-diagnose",
        str(folder / "run one"),
    ]
