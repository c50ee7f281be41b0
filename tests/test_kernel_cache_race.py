"""Several processes compiling the kernels at once on an empty kernel cache (issue 41.4: four
chains started together): every one must succeed and compute with the right binary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.opencl

#: Processes started together.
N_PROCS = 8

#: Each process: the tiny data set below, the log-likelihood by the OpenCL engine in float64
#: and in float32, exact, and by the default (truncated, float32) engine a chain runs: three
#: programs built, all through the empty cache; printed as JSON.
DATA = """
from types import SimpleNamespace

import numpy as np
from hawkes_cli.data import EventData
from hawkes_cli.model import Params
rng = np.random.default_rng(17)
n = 300
t = np.sort(rng.uniform(0.0, 100.0, n))
x, y = rng.uniform(0.0, 3.0, n), rng.uniform(0.0, 2.0, n)
d = np.exp(rng.uniform(-3.0, 10.0, n))
data = EventData(t, x, y, d)
p = Params(mu0=0.4, tau_t=20.0, xi0=0.6, sigma_x=0.08, sigma_t=6.0)
"""
COMPUTE = """
import json
from hawkes_cli.engine import make_likelihood
out = {}
for precision in ("float64", "float32"):
    for model in (1, 2):
        lik = make_likelihood(data, model=model, area=6.0, engine="opencl", precision=precision)
        out[f"{precision}/{model}"] = lik.loglik(p)
for model in (1, 2):
    lik = make_likelihood(data, model=model, area=6.0, engine="opencl", tolerance=0.05)
    out[f"default/{model}"] = lik.loglik(p)
print(json.dumps(out))
"""
SCRIPT = DATA + COMPUTE


def _reference() -> dict[str, float]:
    """The float64 reference engine's log-likelihoods on the same data (this process)."""
    from hawkes_cli.engine import make_likelihood

    ns: dict = {}
    exec(DATA, ns)
    return {
        m: make_likelihood(ns["data"], model=m, area=6.0, engine="reference").loglik(ns["p"])
        for m in (1, 2)
    }


def test_eight_processes_build_on_an_empty_cache_at_once(tmp_path):
    """8 processes started together, each building the float64, float32 and truncated
    programs with
    PoCL's kernel cache and pyopencl's (under XDG_CACHE_HOME) both empty and shared: all 8
    exit 0 with the same log-likelihoods, equal to the reference engine's (float64 to 1e-9
    relative, float32 to 1e-4: a binary built for the other precision, or a truncated one,
    would miss the first)."""
    env = dict(
        os.environ,
        POCL_CACHE_DIR=str(tmp_path / "pocl"),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        PYOPENCL_CACHE_DIR=str(tmp_path / "pyopencl"),
    )
    env.pop("PYOPENCL_NO_CACHE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(N_PROCS)
    ]
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r == results[0] for r in results), results
    ref = _reference()
    for m in (1, 2):
        np.testing.assert_allclose(results[0][f"float64/{m}"], ref[m], rtol=1e-9)
        np.testing.assert_allclose(results[0][f"float32/{m}"], ref[m], rtol=0, atol=1e-4)
        np.testing.assert_allclose(results[0][f"default/{m}"], ref[m], rtol=0, atol=0.05)
    assert any((tmp_path / "pocl").rglob("*")), "PoCL's cache stayed empty: nothing was built"


# -- the build lock and the one retry (hawkes_cli.kernels.build_lock, build_program) ----------


class _Context:
    """A stand-in for a pyopencl context: build_program reads only ``int_ptr`` before _build."""

    int_ptr = -41


def test_build_lock_is_exclusive_and_lives_in_pocls_cache(tmp_path, monkeypatch):
    """While one holder has the lock, a second open file cannot take it; after, it can. The
    file is in the folder PoCL uses (POCL_CACHE_DIR), created when missing."""
    import fcntl

    from hawkes_cli import kernels

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "new" / "pocl"))
    lock = tmp_path / "new" / "pocl" / kernels.BUILD_LOCK_FILE

    def free() -> bool:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with kernels.build_lock():
        assert lock.is_file()
        assert not free()
    assert free()


def test_pocl_cache_dir_follows_pocl(tmp_path, monkeypatch):
    """POCL_CACHE_DIR first, then XDG_CACHE_HOME/pocl, then ~/.cache/pocl (PoCL's own order)."""
    from pathlib import Path

    from hawkes_cli import kernels

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert kernels.pocl_cache_dir() == tmp_path / "a"
    monkeypatch.delenv("POCL_CACHE_DIR")
    assert kernels.pocl_cache_dir() == tmp_path / "b" / "pocl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert kernels.pocl_cache_dir() == Path.home() / ".cache" / "pocl"


def test_build_goes_on_where_the_lock_cannot_be_made(tmp_path, monkeypatch):
    """A cache folder that cannot be created (its parent is a file): the build runs unlocked."""
    from hawkes_cli import kernels

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("POCL_CACHE_DIR", str(blocker / "pocl"))
    ran = []
    with kernels.build_lock():
        ran.append(True)
    assert ran == [True]


#: What the CI machine's PoCL 3.0 said when 8 processes built on one empty cache: warnings only.
RACE_LOG = (
    "clBuildProgram failed: BUILD_PROGRAM_FAILURE\n"
    "warning: tempfile.cl:293:22: AVX vector return of type 'real8' without 'avx512f' "
    "enabled changes the ABI\nDevice pthread-AMD EPYC failed to build the program"
)


@pytest.mark.parametrize(
    "first, calls, raises",
    [
        (RACE_LOG, 2, False),  # a device that gave up with warnings only: built again, works
        ("tempfile.cl:3:1: error: use of undeclared identifier 'q'", 1, True),  # never retried
    ],
    ids=["race", "compiler-error"],
)
def test_a_failed_build_is_retried_once_unless_the_compiler_said_error(
    tmp_path, monkeypatch, first, calls, raises
):
    from hawkes_cli import kernels
    from hawkes_cli.errors import DeviceError

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_PROGRAMS", {})
    monkeypatch.setattr(kernels, "BUILD_RETRY_WAIT_S", 0.0)
    seen = []

    def build(cl, context, truncated, options):
        seen.append(options)
        if len(seen) == 1:
            raise kernels._BuildFailed(first)
        return "program"

    monkeypatch.setattr(kernels, "_build", build)
    if raises:
        with pytest.raises(DeviceError, match="undeclared identifier"):
            kernels.build_program(_Context(), "float64")
    else:
        assert kernels.build_program(_Context(), "float64") == "program"
    assert len(seen) == calls


def test_a_build_that_fails_twice_says_so(tmp_path, monkeypatch):
    """The retry fails too: one DeviceError with the second log, no traceback of the first."""
    from hawkes_cli import kernels
    from hawkes_cli.errors import DeviceError

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_PROGRAMS", {})
    monkeypatch.setattr(kernels, "BUILD_RETRY_WAIT_S", 0.0)

    def build(cl, context, truncated, options):
        raise kernels._BuildFailed(RACE_LOG)

    monkeypatch.setattr(kernels, "_build", build)
    with pytest.raises(DeviceError, match=r"OpenCL build of hawkes\.cl failed") as info:
        kernels.build_program(_Context(), "float32", truncated=False)
    assert "failed to build the program" in str(info.value)
    assert info.value.__cause__ is None


@pytest.mark.parametrize(
    ("first", "calls", "problem"),
    [
        (RACE_LOG, 2, None),  # PoCL's cache mid-write: retried, and it builds
        ("error: unknown target CPU 'generic'", 1, "unknown target CPU"),  # never retried
    ],
    ids=["race", "compiler-error"],
)
def test_a_failed_probe_is_retried_once_unless_the_compiler_said_error(
    tmp_path, monkeypatch, first, calls, problem
):
    """The device probe (kernels.build_problem) takes the build lock and retries a failure
    without a compiler error, as the program build does: in one clean-clone run, one of eight
    processes probing an empty cache at once was refused its only device that way."""
    from hawkes_cli import kernels

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_PROBES", {})
    monkeypatch.setattr(kernels, "BUILD_RETRY_WAIT_S", 0.0)
    seen = []

    def probe(cl, dev):
        seen.append(dev)
        return first if len(seen) == 1 else None

    monkeypatch.setattr(kernels, "_probe", probe)
    info = SimpleNamespace(platform="PoCL", name="cpu", platform_index=0)
    got = kernels.build_problem(info, object())
    assert len(seen) == calls
    assert (got is None) if problem is None else (problem in got)
    assert (tmp_path / kernels.BUILD_LOCK_FILE).exists()  # probed under the lock
