"""Shared fixtures: synthetic event arrays and tier skips."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.model import Params


def _have_opencl() -> bool:
    try:
        from hawkes_cli.kernels import list_devices

        return any(d.float64 for d in list_devices())
    except Exception:
        return False


HAVE_OPENCL = _have_opencl()
HAVE_MPIEXEC = (
    Path(sys.executable).with_name("mpiexec").exists() or shutil.which("mpiexec") is not None
)


def _have_slurm() -> bool:
    """The local test cluster (``bash slurm/local-cluster.sh up``) answers and takes jobs.

    Another cluster counts only with ``HAWKES_SLURM_ANY_CLUSTER=1`` (the tests submit jobs
    asking for fake GPUs and wait minutes at most).
    """
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return False
    try:
        nodes = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=20
        )
        config = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    usable = nodes.returncode == 0 and any(
        s.rstrip("*~#!%$@^-").startswith(("idle", "mixed", "allocated"))
        for s in nodes.stdout.split()
    )
    ours = re.search(r"^ClusterName\s*=\s*hawkes-local\s*$", config.stdout, re.M) is not None
    return usable and (ours or os.environ.get("HAWKES_SLURM_ANY_CLUSTER") == "1")


HAVE_SLURM = _have_slurm()


def pytest_collection_modifyitems(config, items):
    skip_ocl = pytest.mark.skip(reason="no OpenCL device with float64 (pip install pocl)")
    skip_mpi = pytest.mark.skip(reason="mpiexec not on PATH (pip install mpich mpi4py)")
    skip_gpu = pytest.mark.skip(reason="no GPU on this machine")
    skip_slurm = pytest.mark.skip(
        reason="the local Slurm cluster is not up (sinfo/scontrol); as root on Debian: "
        "bash slurm/local-cluster.sh up"
    )
    for item in items:
        if "opencl" in item.keywords and not HAVE_OPENCL:
            item.add_marker(skip_ocl)
        if "mpi" in item.keywords and not HAVE_MPIEXEC:
            item.add_marker(skip_mpi)
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
        if "slurm" in item.keywords and not HAVE_SLURM:
            item.add_marker(skip_slurm)


def make_events(n: int, *, integer_days: bool, seed: int = 0, lonlat: bool = True):
    """Clustered synthetic events, sorted by time.

    Returns (time, x, y, density): half the events sit within ~0.05 of another event (city-like
    clusters), coordinates in US-like lon/lat degrees, densities log-uniform on [0.04, 70000].
    """
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 200.0, n)
    if integer_days:
        t = np.floor(t)
    t.sort()
    x0, y0 = (-120.0, 25.0) if lonlat else (0.0, 0.0)
    centres = rng.uniform(0, 1, (max(n // 20, 1), 2)) * [50.0, 23.0] + [x0, y0]
    pick = rng.integers(0, len(centres), n)
    spread = np.where(rng.uniform(size=n) < 0.5, 0.05, 2.0)[:, None]
    xy = centres[pick] + rng.normal(size=(n, 2)) * spread
    density = np.exp(rng.uniform(np.log(0.04), np.log(70000.0), n))
    density[:2] = [0.04, 70000.0]
    return t, xy[:, 0].copy(), xy[:, 1].copy(), density


PARAMS = Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.08, sigma_t=6.0)
