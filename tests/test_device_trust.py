"""Whether a device's numbers can be trusted (issue 25): the truncated engine's self-check,
``hawkes-run devices --check``, no dependence on the work-group size or on memory no kernel
wrote, and a simulator never chosen by default."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from hawkes_cli import kernels
from hawkes_cli.cli.run_cmds import run as run_cli
from hawkes_cli.engine import device as device_mod
from hawkes_cli.engine.base import Likelihood
from hawkes_cli.engine.device import Device, DeviceEvents
from hawkes_cli.engine.opencl import OpenCLBackend
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.engine.rowcheck import SELF_CHECK_ROWS
from hawkes_cli.engine.selfcheck import (
    CHECK_AREA,
    CHECK_KAPPA,
    CHECK_PARAMS,
    check_device,
    check_events,
    relative_excess,
    truncated_excess,
)
from hawkes_cli.engine.times import TimeStructure
from hawkes_cli.engine.truncated import TruncatedBackend
from hawkes_cli.errors import DeviceError

pytestmark = pytest.mark.opencl

P = CHECK_PARAMS


def _backend(kind: str, model: int, precision: str, *, n: int = 1500, work_group=None):
    t, x, y, d = check_events(n)
    events = DeviceEvents(
        Device.select("cpu"), t, x, y, d if model == 2 else None, precision=precision
    )
    common = {"model": model, "area": CHECK_AREA, "work_group": work_group}
    if kind == "exact":
        return OpenCLBackend(events, **common)
    return TruncatedBackend(events, kappa=CHECK_KAPPA, **common)


# --------------------------------------------------------------------------- self-check
@pytest.mark.parametrize("model", [1, 2])
def test_self_check_passes_once_per_cutoff_and_again_after_a_change(model):
    tr = _backend("truncated", model, "float32")
    tr.trigger_bounded(P.sigma_x, P.sigma_t)
    tr.trigger_bounded(P.sigma_x, P.sigma_t)
    assert tr.self_checks == 1 and tr.check_failure is None
    tr.tighten(10.0)  # a new cut-off: checked again
    tr.trigger_bounded(P.sigma_x, P.sigma_t)
    assert tr.self_checks == 2 and tr.check_failure is None


def test_trigger_at_equals_the_full_pass_rows():
    """The self-check's sample kernel computes the same sums as the full exact pass."""
    ex = _backend("exact", 2, "float32")
    full = ex.trigger(P.sigma_x, P.sigma_t)
    rows = np.array([0, 5, 17, 800, 1499, 3])
    assert np.array_equal(ex.trigger_at(rows, P.sigma_x, P.sigma_t), full[rows])


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_a_device_that_omits_terms_without_bounding_them_is_a_hard_error(precision, monkeypatch):
    """A truncated pass whose bound misses what it omits (here: the bound zeroed, as a device
    that drops the ring and tail sums would compute it) fails the self-check, and the
    likelihood refuses to return a number: DeviceError naming the device and the remedy."""
    tr = _backend("truncated", 1, precision)
    real_pass = TruncatedBackend._bounded_pass

    def broken(self, *args, **kwargs):
        e, omega = real_pass(self, *args, **kwargs)
        return np.vstack([e, np.zeros_like(omega)])

    monkeypatch.setattr(TruncatedBackend, "_bounded_pass", broken)
    t = tr.events.time
    lik = Likelihood(tr, t, times=TimeStructure.from_times(t))
    with pytest.raises(DeviceError) as err:
        lik.loglik(P)
    text = str(err.value)
    assert tr.events.device.info.name in text
    assert "engine.tolerance: 0" in text and "devices --check" in text
    assert f"of {SELF_CHECK_ROWS} sampled rows" in text


def test_the_check_catches_a_wrong_row_and_only_a_wrong_one():
    e0 = np.array([1.0, 2.0, 3.0, 1e-45])
    assert truncated_excess(e0 * (1 - 1e-6), e0 * 1e-5, e0, 1e-4) == 0.0
    assert truncated_excess(e0 * 0.5, e0 * 0.1, e0, 1e-4) > 0.3  # omitted beyond the bound
    assert truncated_excess(e0 * 1.5, e0, e0, 1e-4) > 0.4  # above the whole sum
    assert math.isinf(truncated_excess(np.r_[e0[:3], np.nan], e0, e0, 1e-4))
    assert relative_excess(e0, e0 * (1 + 1e-5), 1e-4) == 0.0
    assert relative_excess(e0 * 2, e0, 1e-4) > 0.9


# --------------------------------------------------------------------------- device shape
@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", [1, 2])
def test_results_do_not_depend_on_the_work_group_size(model, precision):
    """Every kernel at local sizes 1, 3 (not a power of two), 64 and the implementation's
    choice gives the same rows, bit for bit (no kernel assumes a work-group shape)."""
    outs = {}
    for wg in (None, 1, 3, 64):
        ex = _backend("exact", model, precision, n=900, work_group=wg)
        tr = _backend("truncated", model, precision, n=900, work_group=wg)
        e, omega = tr.trigger_bounded(P.sigma_x, P.sigma_t)
        outs[wg] = (ex.trigger(P.sigma_x, P.sigma_t), ex.background(P.tau_t), e, omega)
    for wg, arrays in outs.items():
        for a, b in zip(arrays, outs[None], strict=True):
            assert np.array_equal(a, b), wg


_ROWS_CHILD = """
import sys
import numpy as np
from tests.test_device_trust import P, _backend
out = {}
for model in (1, 2):
    for precision in ("float32", "float64"):
        ex = _backend("exact", model, precision, n=900)
        tr = _backend("truncated", model, precision, n=900)
        e, omega = tr.trigger_bounded(P.sigma_x, P.sigma_t)
        arrays = (ex.trigger(P.sigma_x, P.sigma_t), ex.background(P.tau_t), e, omega)
        for k, a in enumerate(arrays):
            out[f"m{model}-{precision}-{k}"] = np.asarray(a)
np.savez(sys.argv[1], **out)
"""


def test_results_do_not_depend_on_the_number_of_compute_units(tmp_path):
    """Every kernel, both models and precisions, on PoCL with 1 and with 7 compute units
    (POCL_MAX_PTHREAD_COUNT; this machine has 2): the same rows, bit for bit."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import clean_env

    root = Path(__file__).resolve().parents[1]
    found = {}
    for units in ("1", "7"):
        path = tmp_path / f"cu{units}.npz"
        subprocess.run(
            [sys.executable, "-c", _ROWS_CHILD, str(path)],
            cwd=root,
            env=clean_env(POCL_MAX_PTHREAD_COUNT=units),
            check=True,
            timeout=600,
        )
        found[units] = dict(np.load(path))
    assert len(found["1"]) == 16
    for key, a in found["1"].items():
        assert np.all(np.isfinite(a)) and np.array_equal(a, found["7"][key]), key


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", [1, 2])
def test_no_kernel_reads_memory_it_did_not_write(model, precision, monkeypatch):
    """Every output and scratch buffer (prefix sums, moments, row outputs) filled with NaN, a
    huge value or 3 before any kernel runs: the results are the same bit for bit and finite.
    A kernel that read a slot nobody wrote would pick the poison up."""
    outs = []
    for poison in (None, math.nan, -1e300, 3.0):
        monkeypatch.setattr(device_mod, "POISON", poison)
        ex = _backend("exact", model, precision, n=900)
        tr = _backend("truncated", model, precision, n=900)
        e, omega = tr.trigger_bounded(P.sigma_x, P.sigma_t)
        outs.append((ex.trigger(P.sigma_x, P.sigma_t), ex.background(P.tau_t), e, omega))
    for arrays in outs:
        for a, b in zip(arrays, outs[0], strict=True):
            assert np.all(np.isfinite(a)) and np.array_equal(a, b)


def test_check_data_uses_every_path_of_the_row_block_kernel():
    tr = _backend("truncated", 2, "float64")
    tr.trigger_bounded(P.sigma_x, P.sigma_t)
    tr.block_pass.collect()  # the pass's per-row buffers (its bound was made on the device)
    di = tr._draw.index(P.sigma_x, tr.kappa)
    assert tr.n - di.index.expanded[1] > 300  # expansion boxes
    assert np.count_nonzero(tr.block_pass.ring) > 100  # ring cells
    assert tr._draw.blocks(di, P.sigma_x, P.sigma_t, tr.kappa).count > 100  # several row blocks


# --------------------------------------------------------------------------- devices --check
def test_check_device_passes_on_pocl_against_the_reference():
    rep = check_device("cpu")
    assert rep.ok and len(rep.cases) == 8
    assert {c.name for c in rep.cases} == {
        f"model {m} {p} {e}"
        for m in (1, 2)
        for p in ("float32", "float64")
        for e in ("exact", "truncated")
    }


def test_devices_check_cli_prints_a_verdict_per_device():
    res = CliRunner().invoke(run_cli, ["devices", "--check", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output and "model 2 float32 truncated" in res.output
    res = CliRunner().invoke(run_cli, ["devices", "--check", "--device", "cpu", "--json"])
    (report,) = json.loads(res.output)
    assert report["ok"] and len(report["cases"]) == 8


def test_devices_check_fails_with_exit_1_on_a_wrong_device(monkeypatch):
    from hawkes_cli.engine import selfcheck

    monkeypatch.setattr(selfcheck, "CHECK_ROUNDING", {"float32": -1.0, "float64": -1.0})
    res = CliRunner().invoke(run_cli, ["devices", "--check", "--device", "cpu"])
    assert res.exit_code == 1
    assert "FAIL" in res.output and "do not use this device" in res.output


def test_devices_check_names_a_device_that_cannot_build_kernels(monkeypatch):
    """One FAIL line with the compiler's reason and the remedy, not eight build logs."""
    reason = "error: unknown target CPU 'generic': " + kernels.UNKNOWN_CPU_HINT
    monkeypatch.setattr(kernels, "device_problem", lambda ident: reason)
    res = CliRunner().invoke(run_cli, ["devices", "--check", "--device", "cpu"])
    assert res.exit_code == 1
    assert res.output.count("FAIL") == 1 and "pocl-opencl-icd" in res.output
    assert "clBuildProgram" not in res.output


# --------------------------------------------------------------------------- selection
def _fake(pi, name, platform, kind, simulator):
    info = kernels.DeviceInfo(pi, 0, platform, name, kind, 1, 128, True, simulator)
    return info, object()


def test_a_simulator_is_never_the_default_device(monkeypatch):
    sim = _fake(0, "Oclgrind Simulator", "Oclgrind", "gpu", True)
    cpu = _fake(1, "pthread-cpu", "Portable Computing Language", "cpu", False)
    monkeypatch.delenv(kernels.DEVICE_ENV, raising=False)
    monkeypatch.setattr(kernels, "_all_devices", lambda: [sim, cpu])
    monkeypatch.setattr(kernels, "build_problem", lambda info, dev: None)
    assert kernels.select_device()[0].name == "pthread-cpu"
    with pytest.raises(DeviceError):
        kernels.select_device("gpu")  # a simulator is no GPU to choose by kind
    assert kernels.select_device("oclgrind")[0].simulator  # but it can be named
    assert kernels.select_device("0:0")[0].simulator
    monkeypatch.setattr(kernels, "_all_devices", lambda: [sim])
    with pytest.raises(DeviceError, match="only an OpenCL simulator"):
        kernels.select_device()
    assert kernels.is_simulator("Oclgrind", "Oclgrind Simulator")
    assert not kernels.is_simulator("NVIDIA CUDA", "NVIDIA H100 80GB HBM3")


def test_a_device_that_cannot_build_kernels_is_skipped_with_the_remedy(monkeypatch, caplog):
    """PoCL 3.0 (LLVM 14) on an AMD Zen 5 builds nothing ("unknown target CPU 'generic'"): the
    automatic choice takes the next device and says why; with none left, the error says what
    to install."""
    broken = _fake(0, "pthread-AMD EPYC", "Portable Computing Language", "cpu", False)
    good = _fake(1, "pthread-skylake-avx512-AMD EPYC", "Portable Computing Language", "cpu", False)
    problems = {
        "pthread-AMD EPYC": "error: unknown target CPU 'generic': " + kernels.UNKNOWN_CPU_HINT
    }
    monkeypatch.delenv(kernels.DEVICE_ENV, raising=False)
    monkeypatch.setattr(kernels, "build_problem", lambda info, dev: problems.get(info.name))
    monkeypatch.setattr(kernels, "_all_devices", lambda: [broken, good])
    with caplog.at_level("INFO", logger="hawkes_cli.kernels"):
        for rank in range(3):  # every rank of a node gets the one usable device
            assert kernels.select_device(None, rank)[0].name == good[0].name
        assert kernels.select_device("cpu")[0].name == good[0].name
    assert "0:0 pthread-AMD EPYC" in caplog.text and "pocl-opencl-icd" in caplog.text
    assert kernels.select_device("0:0")[0].name == "pthread-AMD EPYC"  # named: taken as is
    monkeypatch.setattr(kernels, "_all_devices", lambda: [broken])
    with pytest.raises(
        DeviceError, match=r"can build kernels.*unknown target CPU.*pocl-opencl-icd"
    ):
        kernels.select_device()


def test_a_slurm_ranks_device_is_the_one_its_likelihood_drives(monkeypatch, tmp_path):
    """The device is chosen once: the one a Slurm rank chose and checked against its node's
    other ranks (slurm.devices) is the one its chain's likelihood drives (engine), also where
    the slot is not the local rank: a runtime that ignores CUDA_VISIBLE_DEVICES=4,5,6,7 lists
    all 8 GPUs, so local rank 1 takes GPU 5."""
    from types import SimpleNamespace

    from hawkes_cli.config import config_from_mapping
    from hawkes_cli.data import EventData
    from hawkes_cli.engine import build_likelihood
    from hawkes_cli.parallel import SerialComm
    from hawkes_cli.slurm.devices import choose_device
    from hawkes_cli.slurm.ranks import _chain_comm

    real = kernels.select_device("cpu")[1]  # every fake GPU runs on the PoCL device
    gpus = [(kernels.DeviceInfo(0, i, "CUDA", f"G{i}", "gpu", 1, 1, True), real) for i in range(8)]
    monkeypatch.setattr(kernels, "_all_devices", lambda: gpus)
    monkeypatch.setattr(kernels, "build_problem", lambda info, dev: None)
    monkeypatch.delenv(kernels.DEVICE_ENV, raising=False)
    monkeypatch.setattr(device_mod, "_CHOSEN", {})  # nothing chosen yet in this process
    calls = []
    select = kernels.select_device
    monkeypatch.setattr(kernels, "select_device", lambda *a: calls.append(a) or select(*a))
    engine = {"backend": "opencl", "device": None, "precision": "float64", "tolerance": 0.0}
    config = config_from_mapping(
        {"data": {"events": "e.h5"}, "engine": engine}, base_dir=tmp_path, where="t.yaml"
    )
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    choice = choose_device(config, rank=1, chain=0, chain_rank=0, local_rank=1, env=env)
    assert (choice.ident, choice.visible_id, choice.slot) == ("0:5", "5", 5)
    plan, slot = SimpleNamespace(gpus_per_chain=1), SimpleNamespace(chain=0, chain_rank=0)
    comm = _chain_comm(SerialComm(), plan, slot, choice)  # as slurm.ranks pins the slot
    t, x, y, _ = check_events(300)
    data = EventData(time=t, x=x, y=y, density=None, source="test")
    lik = build_likelihood(data, config.engine, model=1, area=CHECK_AREA, comm=comm)
    assert lik.backend.events.device.info.ident == choice.ident
    assert len(calls) == 1  # chosen once, by the engine's chooser


def test_the_chosen_device_builds_the_probe_kernel():
    """The real device the suite runs on passes the probe (a probe that rejects a working
    device would leave every user without one)."""
    info, dev = kernels.select_device()
    assert kernels.build_problem(info, dev) is None


def test_reference_agrees_with_check_data_sizes():
    """The check's data is what the docs say: 1500 events on whole days, two thirds in one
    density (the city)."""
    t, x, y, d = check_events()
    assert t.size == 1500 and np.all(t == np.floor(t)) and np.all(np.diff(t) >= 0)
    assert np.count_nonzero(d == 0.5) == 1000
    ref = ReferenceBackend(t, x, y, d, model=2, area=CHECK_AREA)
    assert np.all(np.isfinite(ref.trigger(P.sigma_x, P.sigma_t)))
