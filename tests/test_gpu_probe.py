"""Which OpenCL devices a user gets: a GPU the machine has but OpenCL does not list is named with
the way to register it (issue 40.1), a chain given GPUs refuses to run on the CPU unless told
to, and a device that cannot build kernels is listed as such and skipped, not failed, by
``devices --check`` unless named (issue 41.1).

The probe's cases are faked under a temporary root (device nodes as plain files, driver
libraries as empty files); the refusal runs the real ``hawkes-run local`` and ``chain``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from hawkes_cli import gpu_probe, kernels
from hawkes_cli.cli import run as run_cli
from hawkes_cli.errors import GpuNotUsedError
from hawkes_cli.gpu_probe import AMD, NVIDIA, gpu_request, icd_search, unlisted_gpus
from tests.conftest import clean_env

NVIDIA_LIB = "libnvidia-opencl.so.1"


def touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def root(tmp_path) -> Path:
    """A fake filesystem root with PoCL registered in /etc/OpenCL/vendors."""
    base = tmp_path / "root"
    touch(base / "etc/OpenCL/vendors/pocl.icd", "libpocl.so.2\n")
    return base


ENV: dict[str, str] = {"PATH": "", "LD_LIBRARY_PATH": ""}


# --------------------------------------------------------------------------- the probe
def test_an_nvidia_device_node_without_an_icd_file_gives_the_way_to_register_it(root, tmp_path):
    """The case seen on a GPU machine: /dev/nvidia0, the driver in /usr/local/nvidia/lib64,
    only PoCL's ICD file. The advice, run as printed, registers the driver (PoCL kept)."""
    touch(root / "dev/nvidia0")
    touch(root / "dev/nvidiactl")  # not a GPU
    lib = touch(root / "usr/local/nvidia/lib64" / NVIDIA_LIB)
    (found,) = unlisted_gpus([], root=root, env=ENV)
    assert found.vendor is NVIDIA and found.evidence == ("/dev/nvidia0",)
    assert found.library == lib and found.registered_by is None
    assert found.summary() == (
        "an NVIDIA GPU is here (/dev/nvidia0) but OpenCL lists none: no ICD file in "
        f"/etc/OpenCL/vendors names its driver {lib}"
    )
    commands = [line.strip() for line in found.advice() if line.startswith("  ")]
    folder = "$HOME/.local/etc/OpenCL/vendors"
    assert commands == [
        f"mkdir -p {folder}",
        f"cp {root}/etc/OpenCL/vendors/pocl.icd {folder}/",
        f"echo {lib} > {folder}/nvidia.icd",
        f"export OCL_ICD_VENDORS={folder}",
    ]
    assert any("replaces /etc/OpenCL/vendors" in line for line in found.advice())
    home = tmp_path / "home"
    home.mkdir()
    script = "\n".join([*commands, 'echo "$OCL_ICD_VENDORS"'])
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={"HOME": str(home)}
    )
    assert proc.returncode == 0, proc.stderr
    vendors = Path(proc.stdout.strip())
    assert sorted(p.name for p in vendors.iterdir()) == ["nvidia.icd", "pocl.icd"]
    fixed = {**ENV, "OCL_ICD_VENDORS": str(vendors)}
    (after,) = unlisted_gpus([], root=root, env=fixed)  # the GPU is there, now registered
    assert after.registered_by == vendors / "nvidia.icd"
    assert "nvidia-smi" in after.advice()[0]
    assert unlisted_gpus(["NVIDIA CUDA NVIDIA H100 80GB HBM3"], root=root, env=fixed) == ()


def test_nvidia_smi_on_path_shows_a_gpu(root, tmp_path):
    tool = touch(tmp_path / "bin/nvidia-smi", "#!/bin/sh\n")
    tool.chmod(0o755)
    (found,) = unlisted_gpus([], root=root, env={"PATH": str(tool.parent)})
    assert found.evidence == ("nvidia-smi on PATH",) and found.library is None
    assert f"its OpenCL driver {NVIDIA_LIB} is in none of" in found.summary()
    assert found.advice()[0].startswith(f"find {NVIDIA_LIB}")
    assert any(f"/PATH/TO/{NVIDIA_LIB}" in line for line in found.advice())


@pytest.mark.parametrize("where", ["usr/lib/x86_64-linux-gnu", "usr/lib/wsl/lib", "ld_path"])
def test_the_driver_library_without_an_icd_file_gives_the_hint(root, tmp_path, where):
    folder = tmp_path / "custom" if where == "ld_path" else root / where
    lib = touch(folder / NVIDIA_LIB)
    env = {**ENV, "LD_LIBRARY_PATH": str(folder) if where == "ld_path" else ""}
    (found,) = unlisted_gpus([], root=root, env=env)
    assert found.evidence == () and found.library == lib
    assert found.summary().startswith("NVIDIA's OpenCL driver is installed but OpenCL lists no")


def test_an_icd_file_naming_the_library_gives_no_hint(root, tmp_path):
    lib = touch(root / "usr/local/nvidia/lib64" / NVIDIA_LIB)
    vendors = root / "etc/OpenCL/vendors"
    touch(vendors / "nvidia.icd", f"{lib}\n")
    assert unlisted_gpus([], root=root, env=ENV) == ()
    # by bare name: only where the dynamic loader finds it
    touch(vendors / "nvidia.icd", f"{NVIDIA_LIB}\n")
    assert len(unlisted_gpus([], root=root, env=ENV)) == 1
    assert unlisted_gpus([], root=root, env={**ENV, "LD_LIBRARY_PATH": str(lib.parent)}) == ()
    touch(root / "etc/ld.so.conf.d/nvidia.conf", "/usr/local/nvidia/lib64\n")
    assert unlisted_gpus([], root=root, env=ENV) == ()
    # OCL_ICD_VENDORS naming a folder replaces /etc/OpenCL/vendors: its registration is unread
    own = tmp_path / "own"
    own.mkdir()
    (found,) = unlisted_gpus([], root=root, env={**ENV, "OCL_ICD_VENDORS": str(own)})
    assert f"$OCL_ICD_VENDORS={own}" in found.summary()
    assert [line.strip() for line in found.advice() if line.startswith("  ")] == [
        f"echo {lib} > {own}/nvidia.icd"  # into the folder the loader reads already
    ]
    touch(own / "gpu.icd", f"{lib}\n")
    assert unlisted_gpus([], root=root, env={**ENV, "OCL_ICD_VENDORS": str(own)}) == ()
    # OCL_ICD_VENDORS naming one .icd file, or the library itself
    env = {**ENV, "OCL_ICD_VENDORS": str(own / "gpu.icd")}
    assert unlisted_gpus([], root=root, env=env) == ()
    assert unlisted_gpus([], root=root, env={**ENV, "OCL_ICD_VENDORS": str(lib)}) == ()


def test_ocl_icd_filenames_is_named_as_the_variable_ocl_icd_does_not_read(root):
    """The GPU machine's container set OCL_ICD_FILENAMES (the Khronos loader's variable), which
    the ocl-icd loader of PyOpenCL's wheels ignores."""
    touch(root / "dev/nvidia0")
    touch(root / "usr/local/nvidia/lib64" / NVIDIA_LIB)
    env = {**ENV, "OCL_ICD_FILENAMES": f"libpocl.so.2:{NVIDIA_LIB}"}
    (found,) = unlisted_gpus([], root=root, env=env)
    assert "$OCL_ICD_FILENAMES names it, but only the Khronos ICD loader" in found.summary()
    assert icd_search(root, env).khronos_only == ("libpocl.so.2", NVIDIA_LIB)


def test_an_amd_kfd_node_gives_the_hint(root):
    touch(root / "dev/kfd")
    (found,) = unlisted_gpus([], root=root, env=ENV)
    assert found.vendor is AMD and found.evidence == ("/dev/kfd",) and found.library is None
    assert "libamdocl64.so" in found.summary() and "libamdocl64.so" in found.advice()[0]
    lib = touch(root / "opt/rocm-6.2.0/lib/libamdocl64.so")
    (found,) = unlisted_gpus([], root=root, env=ENV)
    assert found.library == lib
    assert any(line.strip() == f"echo {lib} > $HOME/.local/etc/OpenCL/vendors/amdocl64.icd"
               for line in found.advice())  # fmt: skip
    listed = ["AMD Accelerated Parallel Processing gfx90a:sramecc+:xnack-"]
    assert unlisted_gpus(listed, root=root, env=ENV) == ()


def test_a_machine_without_gpus_or_with_listed_gpus_gives_no_hint(root):
    assert unlisted_gpus([], root=root, env=ENV) == ()
    touch(root / "dev/nvidia0")
    assert unlisted_gpus(["NVIDIA CUDA NVIDIA A100-SXM4-40GB"], root=root, env=ENV) == ()
    # a CPU device's name says AMD, but only a listed GPU counts (the caller passes GPUs only)
    assert len(unlisted_gpus(["Portable Computing Language pthread-AMD EPYC"], root=root,
                             env=ENV)) == 1  # fmt: skip


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, None),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES=0"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-2a7e6836"}, "CUDA_VISIBLE_DEVICES=GPU-2a7e6836"),
        ({"CUDA_VISIBLE_DEVICES": ""}, None),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, None),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, None),
        ({"CUDA_VISIBLE_DEVICES": "-1,0"}, None),
        ({"ROCR_VISIBLE_DEVICES": "0,1"}, "ROCR_VISIBLE_DEVICES=0,1"),
        ({"SLURM_JOB_GPUS": "0,1"}, "SLURM_JOB_GPUS=0,1"),
        ({"SLURM_STEP_GPUS": "3", "SLURM_JOB_GPUS": "2,3"}, "SLURM_STEP_GPUS=3"),
        ({"CUDA_VISIBLE_DEVICES": "", "SLURM_JOB_GPUS": "0"}, None),  # the first set decides
    ],
)
def test_gpus_given_by_the_environment(env, want):
    got = gpu_request(env)
    assert (None if got is None else str(got)) == want


# --------------------------------------------------------------------------- the refusal
CPU = kernels.DeviceInfo(0, 0, "Portable Computing Language", "pthread-cpu", "cpu", 2, 1024, True)
GPU = kernels.DeviceInfo(1, 0, "NVIDIA CUDA", "NVIDIA H100 80GB HBM3", "gpu", 132, 81000, True)


@pytest.fixture
def fake_devices(monkeypatch):
    """OpenCL lists what the test sets (a CPU by default); every device builds kernels; no GPU
    unlisted unless the test says so."""
    listed = [(CPU, object())]
    monkeypatch.setattr(kernels, "_all_devices", lambda: listed)
    monkeypatch.setattr(kernels, "build_problem", lambda info, dev: None)
    monkeypatch.setattr(kernels, "unlisted_gpus", lambda devices: ())
    monkeypatch.delenv(kernels.DEVICE_ENV, raising=False)
    return listed


def test_the_automatic_choice_refuses_the_cpu_where_gpus_were_given(monkeypatch, fake_devices):
    monkeypatch.setenv("SLURM_JOB_GPUS", "0,1")
    with pytest.raises(GpuNotUsedError) as err:
        kernels.select_device()
    assert err.value.exit_code == 9
    text = str(err.value)
    assert text.startswith("SLURM_JOB_GPUS=0,1 gives this process GPUs on ")
    assert "0:0 'pthread-cpu'" in text and "\n" not in text
    assert "engine.device: cpu" in text and f"{kernels.DEVICE_ENV}=cpu" in text
    with pytest.raises(GpuNotUsedError):
        kernels.check_gpu_use(None)  # what `local` asks before it writes
    # the CPU named: by kind, by index, by name, or in the environment
    for spec in ("cpu", "0:0", "pthread"):
        assert kernels.select_device(spec)[0] == CPU
        kernels.check_gpu_use(spec)
    monkeypatch.setenv(kernels.DEVICE_ENV, "cpu")
    assert kernels.select_device()[0] == CPU
    monkeypatch.delenv(kernels.DEVICE_ENV)
    fake_devices.append((GPU, object()))  # OpenCL lists the GPU: it is chosen
    assert kernels.select_device()[0] == GPU
    monkeypatch.delenv("SLURM_JOB_GPUS")
    fake_devices.pop()
    assert kernels.select_device()[0] == CPU  # no GPUs given: the CPU, as before


def test_an_unlisted_gpu_is_named_in_the_refusal_and_warned_of_without_one(
    monkeypatch, fake_devices, caplog
):
    note = SimpleNamespace(summary=lambda: "an NVIDIA GPU is here (/dev/nvidia0) but ...")
    monkeypatch.setattr(kernels, "unlisted_gpus", lambda devices: (note,))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(GpuNotUsedError, match=r"An NVIDIA GPU is here \(/dev/nvidia0\)"):
        kernels.select_device()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with caplog.at_level("WARNING", logger="hawkes_cli.kernels"):
        assert kernels.select_device()[0] == CPU
        kernels.check_gpu_use(None)  # a launcher warns once too
    assert caplog.text.count("an NVIDIA GPU is here (/dev/nvidia0)") == 2
    with pytest.raises(kernels.DeviceError, match="An NVIDIA GPU is here"):
        kernels.select_device("gpu")


def test_a_launcher_finds_a_named_device_missing_before_it_writes(monkeypatch, fake_devices):
    # engine.device (or the environment) naming no device here: one DeviceError from the
    # launcher, not one failure per chain
    for spec, env, says in (("banana", None, "'banana';"), (None, "banana", "'banana' (HAWKES_")):
        if env is not None:
            monkeypatch.setenv(kernels.DEVICE_ENV, env)
        with pytest.raises(kernels.DeviceError, match=r"no OpenCL device matches ") as err:
            kernels.check_gpu_use(spec)
        assert says in str(err.value)
    monkeypatch.delenv(kernels.DEVICE_ENV)
    kernels.check_gpu_use("cpu")  # found: nothing to say


def tiny_config(tmp_path: Path, **engine) -> Path:
    from hawkes_cli.data import save_events
    from hawkes_cli.model import Params
    from hawkes_cli.simulate import simulate

    p = Params(mu0=0.5, tau_t=30.0, xi0=0.5, sigma_x=0.2, sigma_t=5.0)
    save_events(simulate(p, model=1, n_background=60, t_end=100.0, seed=3), tmp_path / "ev.h5")
    cfg = {
        "data": {"events": "ev.h5"},
        "sampler": {"kind": "univariate", "iterations": 20, "warmup": 10, "initial": {},
                    "resample_every": 0},
        "chains": {"count": 1},
        "engine": {"backend": "opencl", "precision": "float64", **engine},
        "output": {"run_dir": "run"},
    }  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def hawkes_run(*args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hawkes_cli", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(**env),
    )


def _gpu_listed() -> bool:
    try:
        return any(d.kind == "gpu" and not d.simulator for d in kernels.list_devices())
    except kernels.DeviceError:
        return False


@pytest.mark.opencl
@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["local"], {"CUDA_VISIBLE_DEVICES": "0"}),
        (["chain", "--chain", "0"], {"SLURM_JOB_GPUS": "0,1"}),
    ],
)
def test_a_run_given_gpus_refuses_the_cpu_and_writes_nothing(tmp_path, command, env):
    if _gpu_listed():
        pytest.skip("OpenCL lists a GPU here: the automatic choice takes it")
    config = tiny_config(tmp_path)
    proc = hawkes_run(command[0], config, *command[1:], **env)
    assert proc.returncode == GpuNotUsedError.exit_code == 9, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    name, value = next(iter(env.items()))
    assert f"{name}={value} gives this process GPUs" in lines[0]
    assert "engine.device: cpu" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.opencl
@pytest.mark.parametrize("engine", [{"device": "cpu"}, {"backend": "reference"}])
def test_a_run_given_gpus_runs_on_the_cpu_named_or_the_reference_engine(tmp_path, engine):
    config = tiny_config(tmp_path, **engine)
    proc = hawkes_run("local", config, CUDA_VISIBLE_DEVICES="0", SLURM_JOB_GPUS="0")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run/chains/chain-00.h5").is_file()


# --------------------------------------------------------------------------- devices
BROKEN = kernels.DeviceInfo(5, 0, "Portable Computing Language", "pthread-generic", "cpu", 2,
                            1024, True)  # fmt: skip
REASON = "error: unknown target CPU 'generic'"


def test_devices_marks_a_device_that_cannot_build_kernels(monkeypatch):
    good = kernels.DeviceInfo(0, 0, "Portable Computing Language", "pthread-x", "cpu", 2, 1024,
                              True)  # fmt: skip
    listing = [(good, None), (BROKEN, REASON)]
    monkeypatch.setattr(kernels, "list_devices_checked", lambda: listing)
    monkeypatch.setattr(kernels, "unlisted_gpus", lambda devices: ())
    res = CliRunner().invoke(run_cli, ["devices"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:6] == ["id", "kind", "fp64", "CUs", "memory", "status"]
    assert lines[1].startswith("0:0") and " ok " in lines[1]
    assert lines[2].startswith("5:0") and " cannot build " in lines[2]
    assert lines[3].strip() == (
        f"cannot build kernels here: {REASON}; skipped by the automatic choice"
    )
    res = CliRunner().invoke(run_cli, ["devices", "--json"])
    assert res.exit_code == 0, res.output
    entries = json.loads(res.output)
    assert [(e["ident"], e["status"], e["problem"]) for e in entries] == [
        ("0:0", "ok", None),
        ("5:0", "cannot build", REASON),
    ]


def test_devices_prints_the_way_to_register_an_unlisted_gpu(monkeypatch, root):
    touch(root / "dev/nvidia0")
    lib = touch(root / "usr/local/nvidia/lib64" / NVIDIA_LIB)
    found = unlisted_gpus([], root=root, env=ENV)
    monkeypatch.setattr(kernels, "unlisted_gpus", lambda devices: found)
    monkeypatch.setattr(kernels, "list_devices_checked", lambda: [(CPU, None)])
    res = CliRunner().invoke(run_cli, ["devices"])
    assert res.exit_code == 0, res.output
    assert "note: an NVIDIA GPU is here (/dev/nvidia0) but OpenCL lists none" in res.output
    assert f"echo {lib} > $HOME/.local/etc/OpenCL/vendors/nvidia.icd" in res.output
    res = CliRunner().invoke(run_cli, ["devices", "--json"])
    assert json.loads(res.stdout)[0]["ident"] == "0:0"  # the note goes to stderr
    assert "export OCL_ICD_VENDORS=" in res.stderr


def _fake_devices_for_check(monkeypatch, devices, problems):
    monkeypatch.setattr(kernels, "list_devices_checked",
                        lambda: [(d, problems.get(d.ident)) for d in devices])  # fmt: skip
    monkeypatch.setattr(kernels, "device_problem", lambda ident: problems.get(ident))
    monkeypatch.setattr(kernels, "unlisted_gpus", lambda devices: ())


@pytest.mark.opencl
def test_check_skips_a_device_that_cannot_build_and_passes_the_one_that_works(monkeypatch):
    """Real PoCL passes; the broken device beside it is a SKIP (the automatic choice passes it
    over), not a FAIL: exit 0."""
    real = kernels.select_device("cpu")[0]
    _fake_devices_for_check(monkeypatch, [real, BROKEN], {BROKEN.ident: REASON})
    res = CliRunner().invoke(run_cli, ["devices", "--check"])
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output and "FAIL" not in res.output
    assert (
        f"  SKIP  cannot build kernels here: {REASON} (skipped by the automatic choice)"
        in res.output.splitlines()
    )


def _report(ok: bool) -> SimpleNamespace:
    case = SimpleNamespace(name="model 1 float32 exact", ok=ok, detail="1500 rows", worst=0.5)
    return SimpleNamespace(ident="0:0", name="pthread-cpu", platform=CPU.platform, kind="cpu",
                           ok=ok, seconds=0.1, cases=[case])  # fmt: skip


def test_check_fails_a_device_that_gives_wrong_numbers_beside_a_skipped_one(monkeypatch):
    from hawkes_cli.engine import selfcheck

    _fake_devices_for_check(monkeypatch, [CPU, BROKEN], {BROKEN.ident: REASON})
    monkeypatch.setattr(selfcheck, "check_device", lambda ident: _report(False))
    res = CliRunner().invoke(run_cli, ["devices", "--check"])
    assert res.exit_code == 1
    assert "FAIL: do not use this device" in res.output and "SKIP" in res.output
    res = CliRunner().invoke(run_cli, ["devices", "--check", "--json"])
    assert res.exit_code == 1
    assert [(r["ident"], r["status"], r["ok"]) for r in json.loads(res.output)] == [
        ("0:0", "fail", False),
        ("5:0", "skip", False),
    ]


def test_check_fails_a_named_device_that_cannot_build(monkeypatch):
    _fake_devices_for_check(monkeypatch, [CPU, BROKEN], {BROKEN.ident: REASON})
    monkeypatch.setattr(kernels, "select_device", lambda spec: (BROKEN, object()))
    res = CliRunner().invoke(run_cli, ["devices", "--check", "--device", "5:0"])
    assert res.exit_code == 1
    assert f"  FAIL  cannot build kernels here: {REASON}" in res.output.splitlines()
    assert "SKIP" not in res.output


def test_check_fails_when_no_device_can_build(monkeypatch):
    _fake_devices_for_check(monkeypatch, [BROKEN], {BROKEN.ident: REASON})
    res = CliRunner().invoke(run_cli, ["devices", "--check"])
    assert res.exit_code == 1
    assert "SKIP" in res.stdout and "no device passed" in res.stderr


def test_the_gpu_variables_are_cleared_for_the_suite():
    """conftest clears them: a CI runner's CUDA_VISIBLE_DEVICES must not refuse PoCL."""
    assert not any(var in os.environ for var in gpu_probe.GPU_VARS)
