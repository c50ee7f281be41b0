"""OpenCL engine against the float64 reference: both models, both precisions, ties and not."""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.engine.base import Likelihood
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.model import Params

from .conftest import PARAMS, build_backend, make_events

pytestmark = pytest.mark.opencl

AREA = 1150.0


def _pair(n, integer_days, model, precision, seed=0):
    t, x, y, d = make_events(n, integer_days=integer_days, seed=seed)
    ref = Likelihood(ReferenceBackend(t, x, y, d, model=model, area=AREA), t)
    ocl = Likelihood(
        build_backend("opencl", t, x, y, d, model=model, area=AREA, precision=precision), t
    )
    return ref, ocl


# N not a multiple of 8 (nor of any work-group size), and small edge cases.
SIZES = [2, 3, 9, 257, 1001, 2999]


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("integer_days", [True, False], ids=["days", "continuous"])
@pytest.mark.parametrize("n", SIZES)
def test_float64_matches_reference(n, integer_days, model):
    ref, ocl = _pair(n, integer_days, model, "float64", seed=n)
    a, b = ref.evaluate(PARAMS), ocl.evaluate(PARAMS)
    assert b.loglik == pytest.approx(a.loglik, rel=1e-10, abs=0)
    np.testing.assert_allclose(b.B, a.B, rtol=1e-10, atol=0)
    np.testing.assert_allclose(b.E, a.E, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("integer_days", [True, False], ids=["days", "continuous"])
@pytest.mark.parametrize("n", SIZES)
def test_float32_within_tolerance(n, integer_days, model):
    ref, ocl = _pair(n, integer_days, model, "float32", seed=n)
    a, b = ref.loglik(PARAMS), ocl.loglik(PARAMS)
    assert abs(b - a) <= 1e-6 * n + 1e-2


@pytest.mark.parametrize(
    "params",
    [
        Params(mu0=0.4, tau_t=0.01, xi0=0.6, sigma_x=1e-4, sigma_t=0.05),  # everything underflows
        Params(mu0=0.4, tau_t=5000.0, xi0=0.6, sigma_x=500.0, sigma_t=9000.0),  # nothing decays
        Params(mu0=1e-6, tau_t=3.0, xi0=50.0, sigma_x=0.01, sigma_t=1.0),
    ],
    ids=["tiny", "huge", "mixed"],
)
@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("model", [1, 2])
def test_extreme_parameters(params, precision, model):
    ref, ocl = _pair(777, True, model, precision, seed=11)
    a, b = ref.loglik(params), ocl.loglik(params)
    tol = 1e-10 * abs(a) if precision == "float64" else 1e-6 * 777 + 1e-2
    assert abs(b - a) <= tol


def test_rows_split_sum_to_whole():
    t, x, y, d = make_events(1234, integer_days=True, seed=2)
    whole = build_backend("opencl", t, x, y, d, model=2, area=AREA, precision="float64")
    parts = [
        build_backend("opencl", t, x, y, d, model=2, area=AREA, precision="float64", rows=r)
        for r in [(0, 5), (5, 600), (600, 601), (601, 1234)]
    ]
    np.testing.assert_allclose(
        np.concatenate([p.trigger(0.1, 4.0) for p in parts]), whole.trigger(0.1, 4.0), rtol=1e-15
    )
    np.testing.assert_allclose(
        np.concatenate([p.background(9.0) for p in parts]), whole.background(9.0), rtol=1e-15
    )


def test_set_locations_matches_fresh_engine():
    t, x, y, d = make_events(500, integer_days=False, seed=8)
    eng = build_backend("opencl", t, x, y, d, model=1, area=AREA, precision="float64")
    rng = np.random.default_rng(0)
    x2, y2 = x + rng.normal(0, 0.01, x.size), y + rng.normal(0, 0.01, y.size)
    eng.set_locations(x2, y2)
    ref = ReferenceBackend(t, x2, y2, d, model=1, area=AREA)
    np.testing.assert_allclose(
        eng.trigger(0.05, 3.0), ref.trigger(0.05, 3.0), rtol=1e-10, atol=1e-300
    )


def test_cli_device_errors():
    from hawkes_cli.errors import DeviceError
    from hawkes_cli.kernels import DeviceInfo, require_float64, select_device

    with pytest.raises(DeviceError, match="no OpenCL device matches 'nonexistent-gpu'"):
        select_device("nonexistent-gpu")
    info = DeviceInfo(0, 0, "p", "toy", "gpu", 1, 1, float64=False)
    with pytest.raises(DeviceError, match="no float64 support"):
        require_float64(info)


def test_float32_keeps_tiny_rates_above_floor():
    # One trigger term exp(-95) ~ 5e-42 before normalisation (below float32's smallest
    # normal), times 1/(2 pi sigma_x^2 sigma_t) ~ 8e6: lambda ~ 4e-35, well above the 1e-40
    # floor. The background underflows to 0 in both engines (tau_t tiny).
    t = np.array([0.0, 1.0])
    x, y = np.array([0.0, 0.0095]), np.zeros(2)
    p = Params(mu0=0.5, tau_t=0.01, xi0=1.0, sigma_x=1e-3, sigma_t=1.0 / 50.0)
    ref = Likelihood(ReferenceBackend(t, x, y, None, model=1, area=AREA), t).evaluate(p)
    got = Likelihood(
        build_backend("opencl", t, x, y, None, model=1, area=AREA, precision="float32"), t
    ).evaluate(p)
    assert ref.E[1] > 1e-36  # the case is what it claims to be
    assert got.E[1] == pytest.approx(ref.E[1], rel=1e-4)
    assert got.loglik == pytest.approx(ref.loglik, abs=1e-3)


def test_program_built_once_per_process(monkeypatch):
    import pyopencl as cl

    t, x, y, d = make_events(50, integer_days=True, seed=1)
    # built (or cached)
    build_backend("opencl", t, x, y, d, model=1, area=AREA, precision="float64")
    builds = []
    real_build = cl.Program.build
    monkeypatch.setattr(cl.Program, "build", lambda self, *a, **k: builds.append(1) or
                        real_build(self, *a, **k))  # fmt: skip
    for model in (1, 2):
        build_backend("opencl", t, x, y, d, model=model, area=AREA, precision="float64")
    assert builds == []


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("integer_days", [True, False], ids=["days", "continuous"])
def test_forced_pair_sum_background_matches_lattice(integer_days, precision):
    """engine.background: pairs (every row over every event, ties skipped by index) gives the
    per-distinct-time background, and both give the reference; also split over ranks."""
    t, x, y, d = make_events(1501, integer_days=integer_days, seed=4)
    assert (np.unique(t).size < t.size) == integer_days  # the day data has ties
    ref = ReferenceBackend(t, x, y, d, model=2, area=AREA).background(PARAMS.tau_t)
    auto = build_backend("opencl", t, x, y, d, model=2, area=AREA, precision=precision)
    rtol = 1e-12 if precision == "float64" else 2e-6
    for rows in [(0, 1501), (0, 700), (700, 1501)]:
        pairs = build_backend(
            "opencl",
            t,
            x,
            y,
            d,
            model=2,
            area=AREA,
            precision=precision,
            rows=rows,
            background="pairs",
        )
        assert "pair sum (forced" in pairs.path
        np.testing.assert_allclose(pairs.background(PARAMS.tau_t), ref[slice(*rows)], rtol=rtol)
    np.testing.assert_allclose(auto.background(PARAMS.tau_t), ref, rtol=rtol)
    assert ("lattice" in auto.path) == integer_days
    with pytest.raises(ValueError, match="background"):
        build_backend("opencl", t, x, y, d, model=2, area=AREA, background="binned")


def test_kernel_fingerprint_covers_sources_options_and_precision():
    """The fingerprint hashes each program's files, source, options and precision: it differs
    between precisions and between the exact and truncated engines, is stable, and the legacy
    ``kernel_sha256`` stays the hash of hawkes.cl alone."""

    from hawkes_cli import kernels

    t, x, y, d = make_events(50, integer_days=True, seed=1)
    got = {
        (kind, precision): build_backend(
            kind, t, x, y, d, model=2, area=AREA, precision=precision
        ).kernel_fingerprint
        for kind in ("opencl", "truncated")
        for precision in ("float32", "float64")
    }
    assert len(set(got.values())) == 4
    assert got["opencl", "float32"] == kernels.kernel_fingerprint([("float32", False)])
    assert got["truncated", "float64"] == kernels.kernel_fingerprint(
        [("float64", True), ("float64", False), ("float64", True)]  # order and repeats ignored
    )
    assert kernels.kernel_fingerprint([]) == ""
    assert kernels.build_options("float64") == (
        "-DREAL_IS_DOUBLE=1",
        f"-DHERM_P={kernels.HERMITE_ORDER}",
        f"-DHERM_STRIDE={kernels.HERMITE_STRIDE}",
    )


@pytest.mark.parametrize("tolerance", [0.0, 1e-2], ids=["exact", "truncated"])
def test_make_likelihood_selects_the_device_once(monkeypatch, tolerance):
    """One device choice per likelihood, handed to every backend (the truncated one holds an
    exact one for B), all on one queue and one upload of the events."""
    from hawkes_cli import kernels
    from hawkes_cli.data import EventData
    from hawkes_cli.engine import device as device_mod
    from hawkes_cli.engine import make_likelihood

    monkeypatch.setattr(device_mod, "_CHOSEN", {})  # nothing chosen yet in this process
    calls = []
    real_select = kernels.select_device
    monkeypatch.setattr(
        kernels, "select_device", lambda *a, **k: calls.append(a) or real_select(*a, **k)
    )
    t, x, y, d = make_events(300, integer_days=True, seed=3)
    data = EventData(time=t, x=x, y=y, density=d, source="test")
    lik = make_likelihood(data, model=2, area=AREA, precision="float64", tolerance=tolerance)
    assert len(calls) == 1
    backend = lik.backend
    if tolerance > 0:
        assert backend.exact.events is backend.events
    assert backend.queue is backend.events.device.queue
    again = make_likelihood(data, model=2, area=AREA, precision="float64", tolerance=tolerance)
    assert len(calls) == 1 and again.backend.events.device is backend.events.device


def test_compiler_output_is_kept_off_the_terminal_and_logged(capfd, caplog, monkeypatch):
    """What the OpenCL compiler writes to descriptor 2 (PoCL's "N warnings generated.") goes
    to the debug log, not the terminal; descriptor 2 works again afterwards. (Handlers an
    earlier test's CLI call left on the root logger are set aside: at DEBUG they would print
    the log record itself.)"""
    import logging
    import os

    from hawkes_cli import kernels

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [h for h in root.handlers if h is caplog.handler])

    with (
        caplog.at_level(logging.DEBUG, logger="hawkes_cli.kernels"),
        kernels.compiler_output() as out,
    ):
        os.write(2, b"68 warnings generated.\n")
    os.write(2, b"after\n")
    captured = capfd.readouterr()
    assert "warnings generated" not in captured.err
    assert "after" in captured.err
    assert out.text == "68 warnings generated."
    assert "OpenCL compiler: 68 warnings generated." in caplog.messages


def test_a_fresh_build_prints_nothing_on_stderr(tmp_path):
    """A real build with PoCL's kernel cache empty (when its clang prints "N warnings
    generated." to stderr) leaves stderr empty; the note is in the debug log (stdout here)."""
    import os
    import subprocess
    import sys

    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s')\n"
        "from hawkes_cli import kernels\n"
        "from hawkes_cli.engine.device import Device\n"
        "d = Device.select()\n"
        "for p in ('float32', 'float64'):\n"
        "    kernels.build_program(d.context, p, truncated=True)\n"
    )
    env = dict(os.environ, POCL_CACHE_DIR=str(tmp_path / "pocl-cache"))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "built hawkes.cl for float64 (truncated: True)" in done.stdout


def test_truncated_source_changes_the_default_engines_fingerprint(tmp_path, monkeypatch):
    """The chain files' ``kernel_sha256`` (the likelihood's fingerprint, runner.chain._chain_meta)
    covers ``truncated.cl``, which the default engine (tolerance > 0) compiles: changing only
    that file changes it, and the exact engine's fingerprint does not move."""
    import shutil

    from hawkes_cli import kernels
    from hawkes_cli.data import EventData
    from hawkes_cli.engine import make_likelihood
    from hawkes_cli.vocab import DEFAULT_TOLERANCE

    t, x, y, d = make_events(200, integer_days=True, seed=4)
    data = EventData(time=t, x=x, y=y, density=d, source="test")

    def fingerprints():
        kernels.kernel_source.cache_clear()
        kernels.truncated_source.cache_clear()
        monkeypatch.setattr(kernels, "_PROGRAMS", {})  # compile the files as they are now
        return tuple(
            make_likelihood(
                data, model=2, area=AREA, precision="float64", tolerance=tol
            ).kernel_fingerprint
            for tol in (DEFAULT_TOLERANCE, 0.0)
        )

    assert DEFAULT_TOLERANCE > 0  # the default engine is the truncated one
    before_default, before_exact = fingerprints()
    copy = tmp_path / "kernels"
    shutil.copytree(kernels.kernel_dir(), copy)
    with (copy / kernels.TRUNCATED_FILE).open("a", encoding="utf-8") as f:
        f.write("\n// a changed truncated kernel\n")
    monkeypatch.setattr(kernels, "kernel_dir", lambda: copy)
    try:
        after_default, after_exact = fingerprints()
    finally:
        monkeypatch.undo()
        kernels.kernel_source.cache_clear()
        kernels.truncated_source.cache_clear()
    assert before_default != before_exact
    assert after_default != before_default
    assert after_exact == before_exact


@pytest.mark.parametrize("model", [1, 2])
@pytest.mark.parametrize("kind", ["opencl", "truncated"])
def test_float32_trigger_sums_are_unbiased_on_a_day_lattice(kind, model):
    """Float32 rounding must not bias every row alike: on whole days, every pair with the same
    ``dt`` used to share one rounding (of the coefficient ``log2(e) / sigma_t``, and after the
    exponent's shift of 60), which moved every row's E by the same 3e-8 to 1.3e-7 (relative,
    a different amount at each sigma_t) -- 0.01 nats of log-likelihood differences at 200,000
    events and more at 1,000,000. With the two-part coefficients
    (``DeviceEvents.coefficient``) the mean relative error over 20,000 rows is at most 1.4e-8
    at these five sigma_t; 3e-8 leaves room for its random part and still fails the one-part
    form (coefficient rounded to float32, no second part) at four of the five. The background
    over 200 distinct days repeats the same exponents in every row however they are rounded, so
    float32 sums it in float64 on the host (``opencl.HOST_BACKGROUND``): the same as float64 to
    1e-12, where the device's float32 sum was 1.2e-7 to 2.7e-7 off on average."""
    t, x, y, d = make_events(20000, integer_days=True, seed=3)
    kw = dict(model=model, area=1.0, kappa=12.0)
    b64 = build_backend(kind, t, x, y, d, precision="float64", **kw)
    b32 = build_backend(kind, t, x, y, d, precision="float32", **kw)
    for sigma_t in (3.0, 4.7, 6.0, 9.1, 13.0):
        e64, e32 = b64.trigger(0.08, sigma_t), b32.trigger(0.08, sigma_t)
        rows = e64 > 1e-6 * np.median(e64)  # rows whose E float32 holds to its precision
        bias = np.mean((e32[rows] - e64[rows]) / e64[rows])
        assert abs(bias) < 3e-8, (sigma_t, bias)
    for tau_t in (11.0, 31.0):
        np.testing.assert_allclose(b32.background(tau_t), b64.background(tau_t), rtol=1e-12)
    assert "float64 on the host" in b32.path


def test_distinct_time_sums_match_the_pair_sum_on_and_off_the_day_grid():
    """The float32 backends' float64 background over distinct times: whole days by one
    convolution on the day grid, other times by the U x U terms; both equal the direct sum over
    the other distinct times (the own one skipped: the tie rule) for every row range."""
    from hawkes_cli.engine.opencl import distinct_time_sums

    rng = np.random.default_rng(4)
    for tu in (np.unique(rng.integers(0, 700, 300)) + 0.5, np.unique(rng.uniform(0, 700, 300))):
        c = rng.integers(1, 50, tu.size)
        for tau_t in (0.6, 20.0, 300.0):
            gap = tu[:, None] - tu[None, :]
            terms = np.where(gap == 0.0, 0.0, np.exp(-0.5 * (gap / tau_t) ** 2))
            want = terms @ c
            got = distinct_time_sums(tu, c, tau_t, 7, tu.size - 5)
            np.testing.assert_allclose(got, want[7:-5], rtol=1e-13, atol=0.0)


# --------------------------------------------------------------------------- kernel arguments
_C_KINDS = {"const int": "int", "const double": "float", "const real": "Real"}


def _parameters(params: str) -> tuple[tuple[str, str], ...]:
    """``(name, kind)`` of each parameter of a kernel signature: a ``__global`` pointer is a
    ``Buffer``, scalars by :data:`_C_KINDS`."""
    out = []
    for part in params.split(","):
        words = part.replace("*", " * ").split()
        name = words[-1]
        if words[0] == "__global" and "*" in words:
            out.append((name, "Buffer"))
        else:
            out.append((name, _C_KINDS[" ".join(words[:-1])]))
    return tuple(out)


def kernel_signatures() -> dict[str, tuple[tuple[str, str], ...]]:
    """Every ``__kernel`` in ``kernels/*.cl`` (those a macro defines under each name it is
    instantiated with) and its parameters, parsed from the source."""
    import re

    from hawkes_cli import kernels

    text = kernels.program_source(truncated=True)
    text = re.sub(r"/\*.*?\*/", " ", text.replace("\\\n", " "), flags=re.S)
    found = {}
    for m in re.finditer(r"^__kernel\s+void\s+(\w+)\s*\(([^)]*)\)", text, re.M):
        found[m[1]] = _parameters(m[2])
    macro = r"^#define\s+(\w+)\((\w+)[^)]*\)\s*__kernel\s+void\s+(\w+)\s*\(([^)]*)\)"
    for m in re.finditer(macro, text, re.M):
        assert m[2] == m[3], f"macro {m[1]} names its kernel by its first argument"
        for name in re.findall(rf"^{m[1]}\((\w+)\s*,", text, re.M):
            found[name] = _parameters(m[4])
    return found


def test_every_kernel_has_its_argument_record_in_kernel_order():
    """The launch records (engine.launch) are the kernels' signatures: same names, same
    order, same kinds, for every kernel in the sources and no other."""
    from hawkes_cli.engine.launch import KERNEL_ARGS, argument_kinds

    signatures = kernel_signatures()
    assert len(signatures) == 30  # the parse found every kernel (12 through macros)
    assert set(signatures) == set(KERNEL_ARGS)
    for name, params in signatures.items():
        assert argument_kinds(KERNEL_ARGS[name]) == params, name


def _truncated_program():
    """The float64 truncated program (both sources) on the PoCL CPU device."""
    from hawkes_cli import kernels
    from hawkes_cli.engine.device import Device

    return kernels.build_program(Device.select("cpu").context, "float64", truncated=True)


def test_argument_records_match_the_built_program():
    """What the device compiled: the same kernel names, each taking as many arguments as its
    record has fields; and a kernel takes no other kernel's record."""
    import dataclasses

    import pyopencl as cl

    from hawkes_cli.engine.device import Device
    from hawkes_cli.engine.launch import KERNEL_ARGS, PrefixArgs, kernel

    prog = _truncated_program()
    assert set(prog.kernel_names.split(";")) == set(KERNEL_ARGS)
    for name, record in KERNEL_ARGS.items():
        count = cl.Kernel(prog, name).get_info(cl.kernel_info.NUM_ARGS)
        assert count == len(dataclasses.fields(record)), name
    blocks = kernel(prog, "truncated_blocks")
    args = PrefixArgs(*[None] * len(dataclasses.fields(PrefixArgs)))
    with pytest.raises(TypeError, match="takes BlocksArgs, got PrefixArgs"):
        blocks(Device.select("cpu").queue, (1,), None, args)


def test_int_and_float_arguments_reach_the_kernel_as_int32_and_float64():
    from hawkes_cli.engine.launch import PrefixArgs

    values = PrefixArgs("st", "sw", "cbeg", 7, 1, 0.5, True, "pre").values()
    assert values == ("st", "sw", "cbeg", 7, 1.0, 0.5, 1, "pre")
    assert [type(v) for v in values[3:7]] == [np.int32, np.float64, np.float64, np.int32]
