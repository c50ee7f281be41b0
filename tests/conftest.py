"""Shared fixtures: synthetic event arrays, the pair backends, and tier skips."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hawkes_cli.gpu_probe import GPU_VARS
from hawkes_cli.model import Params

#: Under CI a tier that cannot run is an error, not a skip (as scripts/test.sh does for Slurm).
IN_CI = os.environ.get("CI") == "true"

# GPUs given to the test process (a CI runner's CUDA_VISIBLE_DEVICES, a Slurm job's
# SLURM_JOB_GPUS) make the automatic device choice refuse the CPU device the suite runs on
# (hawkes_cli.kernels.select_device): the session and its child processes run without them;
# a test that needs them sets them (monkeypatch.setenv, or a child's env).
for _var in GPU_VARS:
    os.environ.pop(_var, None)


def _opencl_status() -> tuple[bool, str]:
    """(usable, why not): an OpenCL device with float64, or the reason there is none."""
    try:
        from hawkes_cli.kernels import list_devices

        devices = list_devices()
    except Exception as exc:  # a broken driver or ICD: report it, never hide it
        return False, f"OpenCL device listing failed: {type(exc).__name__}: {exc}"
    if not devices:
        return False, "no OpenCL device (pip install pocl-binary-distribution)"
    if not any(d.float64 for d in devices):
        names = ", ".join(f"{d.ident} {d.name}" for d in devices)
        return False, f"no OpenCL device with float64 among {names} (pip install pocl)"
    return True, ""


HAVE_OPENCL, OPENCL_REASON = _opencl_status()
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

#: The Oclgrind simulator's OpenCL driver (Debian package oclgrind, scripts/setup.sh); the
#: simulator tier registers it through $OCL_ICD_VENDORS for its child processes only.
OCLGRIND_ICD = next(
    (p for p in (Path("/usr/lib/oclgrind/liboclgrind-rt-icd.so"),) if p.exists()), None
)


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only the tests that will run
def pytest_collection_modifyitems(config, items):
    def marked(item, name: str) -> bool:  # a marker, not a word in the test's name or ids
        return item.get_closest_marker(name) is not None

    if IN_CI and not HAVE_OPENCL and any(marked(item, "opencl") for item in items):
        pytest.exit(f"CI=true and the opencl tier cannot run: {OPENCL_REASON}", returncode=1)
    if IN_CI and not HAVE_MPIEXEC and any(marked(item, "mpi") for item in items):
        pytest.exit(
            "CI=true and the mpi tier cannot run: mpiexec or mpi4py is missing "
            "(pip install mpich mpi4py)",
            returncode=1,
        )
    if IN_CI and not HAVE_SLURM and any(marked(item, "slurm") for item in items):
        pytest.exit(
            "CI=true and the slurm tier cannot run: the local cluster does not answer "
            "(bash slurm/local-cluster.sh up; /var/log/hawkes-slurm)",
            returncode=1,
        )
    if IN_CI and OCLGRIND_ICD is None and any(marked(item, "simulator") for item in items):
        pytest.exit(
            "CI=true and the simulator tier cannot run: Oclgrind is not installed "
            "(scripts/setup.sh installs Debian's oclgrind as root)",
            returncode=1,
        )
    skip_sim = pytest.mark.skip(reason="Oclgrind not installed (apt-get install oclgrind)")
    skip_ocl = pytest.mark.skip(reason=OPENCL_REASON)
    skip_mpi = pytest.mark.skip(reason="mpiexec not on PATH (pip install mpich mpi4py)")
    skip_gpu = pytest.mark.skip(reason="no GPU on this machine")
    skip_slurm = pytest.mark.skip(
        reason="the local Slurm cluster is not up (sinfo/scontrol); as root on Debian: "
        "bash slurm/local-cluster.sh up"
    )
    for item in items:
        if marked(item, "opencl") and not HAVE_OPENCL:
            item.add_marker(skip_ocl)
        if marked(item, "mpi") and not HAVE_MPIEXEC:
            item.add_marker(skip_mpi)
        if marked(item, "simulator") and OCLGRIND_ICD is None:
            item.add_marker(skip_sim)
        if marked(item, "gpu"):
            item.add_marker(skip_gpu)
        if marked(item, "slurm") and not HAVE_SLURM:
            item.add_marker(skip_slurm)


#: Directory of this interpreter's console scripts (hawkes-run, mpiexec of the mpich wheel).
BIN = Path(sys.executable).parent
#: Environment prefixes a test's child process must not inherit: a scheduler's or MPI
#: launcher's variables (the tests may themselves run under Slurm or mpiexec) and ours.
_FOREIGN_ENV = ("SLURM_", "PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HAWKES_")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: without scheduler, MPI and HAWKES_ variables,
    with :data:`BIN` first on PATH, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def write_config_file(path: Path, cfg: dict, **over) -> Path:
    """Write ``cfg`` (a config mapping) as YAML to ``path`` after ``section__key=value``
    overrides (e.g. ``sampler__iterations=50``); returns ``path``."""
    import yaml

    cfg = {section: dict(values) for section, values in cfg.items()}
    for key, value in over.items():
        section, _, name = key.partition("__")
        cfg.setdefault(section, {})[name] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


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


# --------------------------------------------------------------------------- pair backends
#: The pair-sum backends every engine-agnostic test runs on (the OpenCL ones in float64).
BACKEND_KINDS = ("reference", "opencl", "truncated")


def build_backend(
    kind: str,
    t,
    x,
    y,
    density,
    *,
    model: int,
    area: float,
    precision: str = "float64",
    rows: tuple[int, int] | None = None,
    background: str = "auto",
    tolerance: float = 1e-2,
    kappa: float | None = None,
    device: str | None = None,
):
    """One backend of ``kind`` (see :data:`BACKEND_KINDS`) on these events, built as
    ``make_likelihood`` builds it (OpenCL: one device, the events uploaded once).

    ``precision`` and ``background`` apply to the OpenCL kinds, ``tolerance`` (nats of
    log-likelihood, absolute) and ``kappa`` to ``truncated``.
    """
    from hawkes_cli.engine.times import TimeStructure

    times = TimeStructure.from_times(t)
    if kind == "reference":
        from hawkes_cli.engine.reference import ReferenceBackend

        return ReferenceBackend(t, x, y, density, model=model, area=area, rows=rows, times=times)
    from hawkes_cli.engine.device import Device, DeviceEvents

    events = DeviceEvents(Device.select(device), t, x, y, density, precision=precision, times=times)
    common = {"model": model, "area": area, "rows": rows, "background": background}
    if kind == "opencl":
        from hawkes_cli.engine.opencl import OpenCLBackend

        return OpenCLBackend(events, **common)
    if kind == "truncated":
        from hawkes_cli.engine.truncated import TruncatedBackend

        return TruncatedBackend(events, tolerance=tolerance, kappa=kappa, **common)
    raise ValueError(f"backend kind must be one of {BACKEND_KINDS}, got {kind!r}")


@pytest.fixture(
    params=[
        pytest.param(kind, id=kind, marks=() if kind == "reference" else pytest.mark.opencl)
        for kind in BACKEND_KINDS
    ]
)
def backend_kind(request) -> str:
    """Each pair backend in turn: ``reference``, ``opencl`` (exact) and ``truncated``."""
    return request.param


@pytest.fixture
def make_backend(backend_kind):
    """``make_backend(t, x, y, density, model=..., area=..., **options)``: a backend of the
    current :func:`backend_kind` (:func:`build_backend`).

    The truncated backend starts at a cut-off (``kappa`` 25) whose bound is far below its
    tolerance (1 nat; model 2's bound there is a few 1e-2 nats on these tests' data), so it
    never tightens and runs the same passes as the exact ones.
    """
    defaults = {"kappa": 25.0, "tolerance": 1.0} if backend_kind == "truncated" else {}
    return functools.partial(build_backend, backend_kind, **defaults)
