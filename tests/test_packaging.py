"""The wheel carries the OpenCL sources and the console scripts, and an installed copy finds its
kernels inside itself, not in a source checkout."""

from __future__ import annotations

import configparser
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "hawkes-run": "hawkes_cli.cli:run_main",
    "hawkes-prep": "hawkes_cli.cli:prep_main",
    "hawkes-diagnose": "hawkes_cli.cli:diagnose_main",
}


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not installed in this environment")
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling (the build backend) is not installed; pip install hatchling")
    out = tmp_path_factory.mktemp("wheel")
    proc = _pip(
        "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(REPO),
        cwd=out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(out.glob("hawkes-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    return wheels[0]


def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "hawkes_cli/_kernels/hawkes.cl" in names
        assert "hawkes_cli/__init__.py" in names and "hawkes_cli/engine/opencl.py" in names
        assert zf.read("hawkes_cli/_kernels/hawkes.cl") == (REPO / "kernels/hawkes.cl").read_bytes()
        assert not any(n.startswith("tests/") for n in names)
        (entry,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(entry).decode())
    scripts = {k: v.strip() for k, v in parser["console_scripts"].items()}
    assert scripts == SCRIPTS


def test_installed_copy_uses_its_own_kernels(wheel, tmp_path):
    target = tmp_path / "site"
    proc = _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel),
                cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = target / "hawkes_cli" / "_kernels" / "hawkes.cl"
    assert installed.is_file()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import hawkes_cli, sys\n"
        "from hawkes_cli.kernels import kernel_dir, kernel_source\n"
        "print(hawkes_cli.__file__)\n"
        "print(kernel_dir())\n"
        "sys.stdout.write(kernel_source())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=elsewhere,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    module_file, kdir, source = proc.stdout.split("\n", 2)
    assert Path(module_file).resolve().is_relative_to(target.resolve())
    assert Path(kdir).resolve().is_relative_to(target.resolve()), kdir
    assert not Path(kdir).resolve().is_relative_to(REPO)
    assert source == (REPO / "kernels" / "hawkes.cl").read_text(encoding="utf-8")
