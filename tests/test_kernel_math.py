"""The kernels' own math (issue 25): no call into the device's math library, and the
hand-written float64 exponential of the expansion boxes within an ulp or two of numpy's.

On an AMD EPYC with AVX-512, PoCL compiled our kernels for a CPU without AVX-512 (LLVM 14
names that family "znver3") but linked the AVX-512 variant of its math library, so a
``double16`` passed to the builtin ``exp`` crossed an ABI boundary (in memory on one side, in
registers on the other): the expansion-box sums were hundreds of nats wrong. The kernels now
call no builtin that such a mismatch can reach.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from hawkes_cli import kernels

pytestmark = pytest.mark.opencl

#: OpenCL C builtins a kernel may call: each is a single instruction on every device (IEEE
#: correctly rounded or exact) or integer arithmetic, never a library routine.
ALLOWED_BUILTINS = {"sqrt", "floor", "min", "max"}

#: The OpenCL C math builtins (OpenCL C 3.0, section 6.15.2 to 6.15.4) whose implementation
#: is the device's library.
MATH_BUILTINS = frozenset(
    """acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi atan2pi cbrt ceil copysign
    cos cosh cospi erfc erf exp exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod fract
    frexp hypot ilogb ldexp lgamma lgamma_r log log2 log10 log1p logb mad maxmag minmag modf
    nan nextafter pow pown powr remainder remquo rint rootn round rsqrt sin sincos sinh sinpi
    sqrt tan tanh tanpi tgamma trunc half_exp half_exp2 half_log half_log2 half_powr
    half_recip half_rsqrt half_sqrt half_sin half_cos half_tan native_exp native_exp2
    native_log native_log2 native_powr native_recip native_rsqrt native_sqrt native_sin
    native_cos native_tan native_divide clamp degrees radians mix sign smoothstep step abs
    min max dot cross length distance normalize""".split()  # noqa: SIM905 - a word list
)


def _code(source: str) -> str:
    """The source without comments."""
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", source, flags=re.S))


@pytest.mark.parametrize("truncated", [False, True], ids=["hawkes.cl", "truncated.cl"])
def test_kernels_call_no_library_math(truncated):
    source = kernels.truncated_source() if truncated else kernels.kernel_source()
    called = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", _code(source)))
    assert called & MATH_BUILTINS <= ALLOWED_BUILTINS, sorted(called & MATH_BUILTINS)


def test_the_scan_sees_a_library_call():
    """The scan of the test above can fail: a builtin exp in code is found, in a comment not."""
    source = "/* exp(x) */ double f(double x) { return exp(x) + sqrt(x); } // log(x)"
    called = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", _code(source)))
    assert called & MATH_BUILTINS == {"exp", "sqrt"}


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_no_wide_vector_crosses_into_the_device_library(precision):
    """PoCL's compiler warns where a 512-bit vector crosses a call whose ABI depends on
    AVX-512; none of those calls may reach its library (spelled in ``_builtin_renames.h``)."""
    import pyopencl as cl

    _, dev = kernels.select_device("cpu")
    ctx = cl.Context([dev])
    for truncated in (False, True):
        with kernels.compiler_output():
            prog = cl.Program(ctx, kernels.program_source(truncated)).build(
                options=list(kernels.build_options(precision))
            )
        build_log = prog.get_build_info(dev, cl.program_build_info.LOG)
        crossing = [
            line
            for line in build_log.splitlines()
            if "changes the ABI" in line and "_builtin_renames" in line
        ]
        assert not crossing, "\n".join(crossing[:3])


def _run_f64(
    source: str, name: str, x: np.ndarray, sizes: list[int], *, truncated: bool = False
) -> list[np.ndarray]:
    """Kernel ``name`` of ``source`` (appended to the float64 program) on the CPU device, one
    work-item per element of ``x``: its outputs, float64 arrays of ``sizes``."""
    import pyopencl as cl

    _, dev = kernels.select_device("cpu")
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    with kernels.compiler_output():
        prog = cl.Program(ctx, kernels.program_source(truncated) + source).build(
            options=list(kernels.build_options("float64"))
        )
    mf = cl.mem_flags
    bx = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    outs = [np.empty(n) for n in sizes]
    bufs = [cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes) for a in outs]
    getattr(prog, name)(queue, (x.size,), None, bx, *bufs)
    for a, b in zip(outs, bufs, strict=True):
        cl.enqueue_copy(queue, a, b)
    return outs


_EXP_KERNEL = r"""
__kernel void t_exp(__global const double *x, __global double *o, __global double *o16,
                    __global double *p2)
{
    const int i = get_global_id(0);
    o[i] = exp_f64(x[i]);
    if (i % 16 == 0) {  /* indexed, as the kernels load vectors (no vload16: see below) */
        ((__global double16 *)o16)[i / 16] = exp_f64x16(((__global const double16 *)x)[i / 16]);
    }
    if (i < 2046) {
        p2[i] = pow2i(i - 1022);
    }
}
"""


def test_exp_f64_within_an_ulp_of_numpy():
    """exp_f64 and exp_f64x16 against numpy's exp (glibc, < 1 ulp): at most 2 ulp apart on
    [-708, 709] (the kernel's documented bound; measured 1), 0 below, +inf above, NaN kept;
    pow2i exact. Inputs: a seeded uniform sample over the whole range and near 0, and the
    edges of the range reduction. The 16-wide values are loaded and stored by indexing a
    ``double16`` pointer, as the kernels do: PyPI's PoCL 3.0 on an AVX-512 CPU returns
    garbage from ``vload16``/``vstore16`` (library calls passing wide vectors), not from
    ``exp_f64x16``."""

    rng = np.random.default_rng(25)
    edges = np.array(
        [
            0.0,
            -708.0,
            709.0,
            -708.0000001,
            709.0001,
            np.nan,
            -np.inf,
            np.inf,
            1e-300,
            -1e-300,
            0.5 * np.log(2),
            -0.5 * np.log(2),
            1.0,
            -1.0,
            700.0,
            -700.0,
        ]
    )
    x = np.concatenate([rng.uniform(-760, 760, 1 << 17), rng.uniform(-1, 1, 1 << 15), edges])
    x = np.ascontiguousarray(x[: x.size // 16 * 16])
    outs = _run_f64(_EXP_KERNEL, "t_exp", x, [x.size, x.size, 2046], truncated=True)
    with np.errstate(all="ignore"):
        ref = np.exp(x)
    inside = (x >= -708) & (x <= 709)
    for got in outs[:2]:
        ulp = np.abs(got[inside] - ref[inside]) / np.spacing(ref[inside])
        assert ulp.max() <= 2.0
        assert np.all(got[x < -708] == 0.0)
        assert np.all(got[x > 709] == np.inf)
        assert np.all(np.isnan(got[np.isnan(x)]))
    np.testing.assert_array_equal(outs[2], np.ldexp(1.0, np.arange(-1022, 1024)))


_LOG_KERNEL = r"""
__kernel void t_log(__global const double *x, __global double *o, __global double *o1)
{
    const int i = get_global_id(0);
    o[i] = log_f64(x[i]);
    o1[i] = log1p_f64(x[i]); /* every x >= 0 or NaN */
}
"""


def test_log_f64_and_log1p_f64_within_ulps_of_numpy():
    """The device sums' logs (``hawkes.cl``: log_f64 for the rates, floored at 1e-40, and
    log1p_f64 for the bounds' terms, >= 0) against numpy's (glibc, < 1 ulp): at most 2 ulp
    of the result apart (measured: 2 in 0.1% of inputs, else 0 or 1) over the whole normal
    range (log-uniform), near 1 where cancellation would show, at the series' switch (1/4)
    and at the reduction's (sqrt 2); NaN kept, +inf to +inf."""

    rng = np.random.default_rng(40)
    x = np.concatenate(
        [
            np.exp(rng.uniform(-708, 709, 1 << 16)),
            1.0 + rng.uniform(-0.3, 0.3, 1 << 14),
            np.exp(rng.uniform(-40, 3, 1 << 14)),
            [1e-40, 1.0, 2.0, 0.5, np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 3), np.inf, np.nan],
            [0.25, np.nextafter(0.25, 0), 2.2250738585072014e-308, 1.7976931348623157e308],
        ]
    )
    got, got1 = _run_f64(_LOG_KERNEL, "t_log", x, [x.size, x.size])
    finite = np.isfinite(x)
    for mine, ref in ((got, np.log(x)), (got1, np.log1p(x))):
        scale = np.spacing(np.maximum(np.abs(ref[finite]), 1e-300))
        assert (np.abs(mine[finite] - ref[finite]) / scale).max() <= 2.0
        assert np.isnan(mine[np.isnan(x)]).all()
        assert np.all(mine[x == np.inf] == np.inf)


_EXPM1_KERNEL = r"""
__kernel void t_expm1(__global const double *x, __global double *o)
{
    const int i = get_global_id(0);
    o[i] = expm1_f64(x[i]);
}
"""


def test_expm1_f64_within_ulps_of_numpy():
    """The compensator's time shares on the device (``edge_lost``: -expm1_f64(tail / sigma_t),
    tail <= 0) against numpy's expm1 (glibc, < 1 ulp): at most 8 ulp of the result apart (the
    kernel's documented bound beyond ln2 / 2, where it is exp_f64 less 1; inside, the series)
    on both sides of 0, near 0 where e^x - 1 would cancel (down to 1e-300), at the switch
    (+-ln2 / 2), and far out (-1 below -708, e^x - 1 large above); NaN kept."""

    rng = np.random.default_rng(42)
    half = 0.5 * np.log(2.0)
    x = np.concatenate(
        [
            rng.uniform(-60, 60, 1 << 15),
            rng.uniform(-1, 1, 1 << 15),
            np.exp(rng.uniform(-690, 0, 1 << 13)) * rng.choice([-1.0, 1.0], 1 << 13),
            [half, -half, np.nextafter(half, 1), np.nextafter(-half, -1), 0.0, -0.0],
            [-700.0, -750.0, 700.0, 1e-300, -1e-300, np.nan],
        ]
    )
    (got,) = _run_f64(_EXPM1_KERNEL, "t_expm1", x, [x.size])
    ref = np.expm1(x)
    finite = np.isfinite(x)
    scale = np.spacing(np.maximum(np.abs(ref[finite]), 1e-300))
    assert (np.abs(got[finite] - ref[finite]) / scale).max() <= 8.0
    inside = finite & (np.abs(x) <= half)
    assert (np.abs(got[inside] - ref[inside]) / scale[inside[finite]]).max() <= 2.0
    assert got[x == -750.0] == -1.0
    assert np.isnan(got[np.isnan(x)]).all()


@pytest.mark.parametrize("truncated", [False, True], ids=["hawkes.cl", "truncated.cl"])
def test_every_vector_access_indexes_a_buffer_from_its_start(truncated):
    """No pointer arithmetic cast to a vector pointer (misaligned unless the offset is a
    multiple of the width) and no vloadN / vstoreN (library calls taking or returning wide
    vectors): a vector load is ``((__global T *)buffer)[i]``, aligned when the buffer is."""
    code = _code(kernels.truncated_source() if truncated else kernels.kernel_source())
    assert not re.findall(r"\*\s*\(\s*__global[^)]*\*\s*\)\s*\(", code)
    assert not re.findall(r"\b(vload|vstore)[a-z_]*\d+\s*\(", code)
    casts = re.findall(r"\(\(__global (?:const )?(\w+) \*\)\s*\(?\w+\)?\)\[", code)
    assert casts, "the scan finds the array-indexed vector accesses"


def test_a_device_aligning_buffers_loosely_is_refused():
    base = kernels.DeviceInfo(0, 0, "P", "D", "gpu", 1, 1, True)
    kernels.require_alignment(base)  # 128 bytes: fine
    loose = kernels.DeviceInfo(0, 0, "P", "D", "gpu", 1, 1, True, base_align_bytes=64)
    with pytest.raises(kernels.DeviceError, match="aligns buffers to 64 bytes"):
        kernels.require_alignment(loose)
