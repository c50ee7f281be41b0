/*
 * hawkes.cl -- pair sums of the spatiotemporal Hawkes log-likelihood (DESIGN.md section 2).
 *
 * One source for both precisions: build with -DREAL_IS_DOUBLE=0 (float32) or 1 (float64).
 * Whatever the working precision, every row is accumulated into float64 every BLOCK sources
 * and written as float64; the host finishes rows (normalising constants, log, floor) in float64.
 *
 * Structure exploited (all exact):
 *   - time order: events are sorted by time, so the trigger of row i only visits sources
 *     m < lo[i] (lo[i] = first index of i's tie group); no masked work over later events;
 *   - the background depends on the time alone, so it is computed once per distinct time
 *     over (distinct time, count) pairs; with continuous times this is the plain pair sum;
 *   - vector types: eight sources per step (float8 / double8), aligned loads of padded arrays;
 *   - exponents are pre-scaled by log2(e) on the host, so each term is 2^y, evaluated with an
 *     exact range reduction (f = y - rint(y) is exact) and a polynomial of 2^f whose error is
 *     below the working precision's rounding (float64: Taylor degree 13; float32: minimax
 *     degree 6, 1.9e-9 relative); no call into the device's libm in the hot loop.
 *
 * What the kernels of this file and truncated.cl require of a device, and nothing more:
 *   - cl_khr_fp64; buffers aligned to 128 bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN, checked by
 *     the host): every vector access indexes a buffer as an array of its vector type;
 *   - any work-group size, compute-unit count and preferred vector width: one work-item per
 *     output row (block, cell), no local memory, no barrier, no atomics, every private
 *     variable written before it is read;
 *   - no math-library call (tests/test_kernel_math.py): the builtins used are sqrt, floor,
 *     min and max on scalars. A builtin is the device's own code, and a wide vector passed to
 *     it crosses an ABI that a compiler can get wrong (PoCL on an AVX-512 CPU unknown to its
 *     LLVM: the kernel without AVX-512, its math library with it).
 *
 * Range: every exponent gets a constant ``shift`` (log2 units; 60 in float32, 0 in float64)
 * and the host multiplies the row by 2^-shift in float64. Terms down to 2^(-126-60) ~ 6e-58
 * survive in float32, far below the 1e-40 floor of lambda, while the largest row
 * (2^60 * density * a * N, a the renormalized amplitude) stays below FLT_MAX.
 *
 * The two-part coordinates (x = xh + xl) keep float32 distances accurate when coordinates are
 * large (degrees of longitude) and lengthscales small (model 2 at high density): xh - xm is
 * exact for nearby points (Sterbenz), and xl carries the rest of the float64 value.
 */

#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#ifndef REAL_IS_DOUBLE
#define REAL_IS_DOUBLE 0
#endif

#if REAL_IS_DOUBLE
typedef double real;
typedef double8 real8;
#else
typedef float real;
typedef float8 real8;
#endif

/* Sources accumulated in the working precision before a float64 flush. */
#define BLOCK 512

/* Eight values from index m (a multiple of 8 at every call) of a buffer: element m / 8 of it
 * as a real8 array, so the load is aligned whenever the buffer's start is (the host requires
 * CL_DEVICE_MEM_BASE_ADDR_ALIGN >= 128 bytes: kernels.require_alignment). */
#define LOAD8(p, m) (((__global const real8 *)(p))[(m) >> 3])
/* The eight lanes summed in float64, lane 0 first, through a private array: the same sums as
 * writing out (double)v.s0 + ... + (double)v.s7, which clang turns into shufflevectors with
 * undefined mask lanes, on which Oclgrind 21.10's uninitialised-value checker crashes. */
static double hsum8(const real8 v)
{
    union {
        real8 v;
        real a[8];
    } u;
    u.v = v;
    double s = 0.0;
    for (int j = 0; j < 8; ++j) {
        s += (double)u.a[j];
    }
    return s;
}
#define HSUM8(v) hsum8(v)

/*
 * 2^y by an exact range reduction (y = n + f, f in [-0.5, 0.5]) and a polynomial of 2^f whose
 * error is below the working precision's rounding, for -2^21 < y (float32; -2^50 for float64)
 * up to the largest exponent. The exponent arithmetic is unsigned and wraps below the smallest
 * normal number EXP2_MIN: callers set those lanes to 0.
 */
#if REAL_IS_DOUBLE
#define EXP2_MIN -1022.0
static real8 exp2_unmasked(const real8 y)
{
    const real8 shifted = y + 6755399441055744.0;           /* 1.5 * 2^52: round to integer */
    const real8 f = y - (shifted - 6755399441055744.0);      /* exact, in [-0.5, 0.5] */
    real8 p = 1.369148885390412888089e-12;                   /* Taylor, degree 13 */
    p = p * f + 2.567843599348820514199e-11;
    p = p * f + 4.445538271870811497596e-10;
    p = p * f + 7.054911620801123329875e-9;
    p = p * f + 1.017808600923969972749e-7;
    p = p * f + 1.321548679014430948840e-6;
    p = p * f + 1.525273380405984028003e-5;
    p = p * f + 1.540353039338160995444e-4;
    p = p * f + 1.333355814642844342341e-3;
    p = p * f + 9.618129107628477161979e-3;
    p = p * f + 5.550410866482157995314e-2;
    p = p * f + 2.402265069591007123336e-1;
    p = p * f + 6.931471805599453094172e-1;
    p = p * f + 1.0;
    const ulong8 e = (as_ulong8(shifted) - as_ulong8((real8)6755399441055744.0)) << 52;
    return as_double8(as_ulong8(p) + e);
}
#else
#define EXP2_MIN -126.0f
static real8 exp2_unmasked(const real8 y)
{
    const real8 shifted = y + 12582912.0f;                   /* 1.5 * 2^23: round to integer */
    const real8 f = y - (shifted - 12582912.0f);             /* exact, in [-0.5, 0.5] */
    /* minimax degree 6 on [-0.5, 0.5]: relative error 1.9e-9, below float32's rounding */
    real8 p = 1.53460366e-04f;
    p = p * f + 1.34000268e-03f;
    p = p * f + 9.61848891e-03f;
    p = p * f + 5.55032851e-02f;
    p = p * f + 2.40226469e-01f;
    p = p * f + 6.93147206e-01f;
    p = p * f + 1.0f;
    const uint8 e = (as_uint8(shifted) - as_uint8((real8)12582912.0f)) << 23;
    return as_float8(as_uint8(p) + e);
}
#endif

/*
 * 2^y for any y <= shift, with 2^y = 0 below the smallest normal number. One comparison
 * decides both selects: written as two comparisons `y < EXP2_MIN` (clamp, then mask), the
 * Oclgrind 21.10 simulator returned 0 for every lane at or above EXP2_MIN (a simulator fault:
 * the two forms are the same OpenCL C, and PoCL agrees with the float64 reference on both),
 * which made every exact trigger sum on it 0 or NaN.
 */
static real8 exp2_neg(const real8 y)
{
#if REAL_IS_DOUBLE
    const long8 keep = y >= EXP2_MIN;
#else
    const int8 keep = y >= EXP2_MIN;
#endif
    const real8 r = exp2_unmasked(keep ? y : (real8)EXP2_MIN);
    return keep ? r : (real8)0;
}

/*
 * The exponent shift - dt * (kt + ktl) - ys * (1 + kxr) (log2 units), with ys the spatial
 * part at the working-precision coefficient kx and both coefficients exact in two parts from
 * the host (DeviceEvents.coefficient: kt a multiple of 2^-18; kxr the relative rounding of
 * kx): on a day lattice dt * kt and shift - dt * kt are exact, and the rest, continuous in
 * ys, rounds at random. A rounding shared by every pair with the same dt (of a one-part
 * coefficient, or after adding the shift) would bias every row alike: 1e-7 relative in
 * float32, 0.01 nats of log-likelihood differences at 200,000 events.
 */
#define EXPONENT(shift, dt, kt, ktl, ys, kxr) \
    (((shift) - (dt) * (kt)) - ((ys) + ((dt) * (ktl) + (ys) * (kxr))))

/*
 * Trigger terms of row (ti, xi, yi) against the eight sources starting at m:
 *     a_m * w_m * 2^( -(ti - t_m) * kt - |x_i - x_m|^2 * kx * w_m )
 * with w_m = density (model 2) or 1 (model 1), and a_m = 1 / M_m, the inverse of the source's
 * trigger mass inside the study region (model.edge: renormalized; amp, a compile-time constant
 * of each kernel) or 1 (a is then not read).
 */
static real8 trigger8(const int m, const real ti, const real xi, const real yi,
                      const real xil, const real yil,
                      __global const real *t, __global const real *x, __global const real *y,
                      __global const real *xl, __global const real *yl,
                      __global const real *w, __global const real *a, const real kt,
                      const real kx, const real ktl, const real kxr, const real shift,
                      const int model2, const int amp)
{
    const real8 dt = ti - LOAD8(t, m);
#if REAL_IS_DOUBLE
    const real8 dx = xi - LOAD8(x, m);
    const real8 dy = yi - LOAD8(y, m);
#else
    const real8 dx = (xi - LOAD8(x, m)) + (xil - LOAD8(xl, m));
    const real8 dy = (yi - LOAD8(y, m)) + (yil - LOAD8(yl, m));
#endif
    const real8 r2 = dx * dx + dy * dy;
    real8 v;
    if (model2) {
        const real8 wm = LOAD8(w, m);
        v = wm * exp2_neg(EXPONENT(shift, dt, kt, ktl, r2 * (kx * wm), kxr));
    } else {
        v = exp2_neg(EXPONENT(shift, dt, kt, ktl, r2 * kx, kxr));
    }
    return amp ? LOAD8(a, m) * v : v;
}

/* The trigger sum of row i over its sources m < lo[i] (t_m < t_i strictly). */
static double trigger_row(const int i, __global const real *t, __global const real *x,
                          __global const real *y, __global const real *xl,
                          __global const real *yl, __global const real *w,
                          __global const real *a, __global const int *lo, const real kt,
                          const real kx, const real ktl, const real kxr, const real shift,
                          const int model2, const int amp)
{
    const real ti = t[i], xi = x[i], yi = y[i];
#if REAL_IS_DOUBLE
    const real xil = 0, yil = 0;
#else
    const real xil = xl[i], yil = yl[i];
#endif
    const int l = lo[i];
    const int full = l & ~7;
    const real8 lane = (real8)(0, 1, 2, 3, 4, 5, 6, 7);
    double acc = 0.0;
    for (int b = 0; b < full; b += BLOCK) {
        const int end = min(b + BLOCK, full);
        real8 s = (real8)0;
        for (int m = b; m < end; m += 8) {
            s += trigger8(m, ti, xi, yi, xil, yil, t, x, y, xl, yl, w, a, kt, kx, ktl, kxr,
                          shift, model2, amp);
        }
        acc += HSUM8(s);
    }
    if (full < l) {                      /* last partial chunk: arrays are padded to 8 */
        const real8 v = trigger8(full, ti, xi, yi, xil, yil, t, x, y, xl, yl, w, a, kt, kx, ktl,
                                 kxr, shift, model2, amp);
        const real8 keep = lane < (real)(l - full) ? v : (real8)0;
        acc += HSUM8(keep);
    }
    return acc;
}

/*
 * One work-item per row: rows row0 .. row0 + nrows - 1 (trigger_model1, trigger_model2; with
 * each source's amplitude a_m, trigger_scaled1, trigger_scaled2), or the rows listed in
 * sample[0 .. nrows) (trigger_sample1, trigger_sample2, and with amplitudes
 * trigger_scaled_sample1, trigger_scaled_sample2: the truncated engine's self-check against the
 * exact sum on the same device). Work-items past nrows (the launch is rounded up to
 * whole work-groups) do nothing; no local memory, no barrier, so any work-group size gives the
 * same sums.
 */
#define TRIGGER_KERNEL(name, model2, amp, ROW)                                                 \
    __kernel void name(__global const real *t, __global const real *x,                         \
                       __global const real *y, __global const real *xl,                       \
                       __global const real *yl, __global const real *w,                       \
                       __global const real *a, __global const int *lo,                        \
                       __global const int *sample, const int row0, const int nrows,           \
                       const real kt, const real kx, const real ktl, const real kxr,          \
                       const real shift, __global double *out)                                \
    {                                                                                          \
        const int g = get_global_id(0);                                                        \
        if (g < nrows) {                                                                       \
            out[g] = trigger_row(ROW, t, x, y, xl, yl, w, a, lo, kt, kx, ktl, kxr, shift,      \
                                 model2, amp);                                                 \
        }                                                                                      \
    }

TRIGGER_KERNEL(trigger_model1, 0, 0, row0 + g)
TRIGGER_KERNEL(trigger_model2, 1, 0, row0 + g)
TRIGGER_KERNEL(trigger_scaled1, 0, 1, row0 + g)
TRIGGER_KERNEL(trigger_scaled2, 1, 1, row0 + g)
TRIGGER_KERNEL(trigger_sample1, 0, 0, sample[g])
TRIGGER_KERNEL(trigger_sample2, 1, 0, sample[g])
TRIGGER_KERNEL(trigger_scaled_sample1, 0, 1, sample[g])
TRIGGER_KERNEL(trigger_scaled_sample2, 1, 1, sample[g])

/*
 * Background over distinct times: row u gets sum_{v != u} c_v 2^(-(tu_u - tu_v)^2 kb),
 * tu sorted ascending, c_v = number of events at time tu_v; padding has c = 0.
 * Excluding v == u is exactly the contract's tie rule (skip every m with t_m == t_n).
 */
static real8 background8(const int v, const real tu_u, __global const real *tu,
                         __global const real *c, const real kb, const real kbl,
                         const real shift)
{
    const real8 dt = tu_u - LOAD8(tu, v);
    return LOAD8(c, v) * exp2_neg(EXPONENT(shift, dt * dt, kb, kbl, (real8)0, 0));
}

__kernel void background(__global const real *tu, __global const real *c, const int nu,
                         const int row0, const int nrows, const real kb, const real kbl,
                         const real shift, __global double *out)
{
    const int g = get_global_id(0);
    if (g >= nrows) {
        return;
    }
    const int u = row0 + g;
    const real tu_u = tu[u];
    const int own = u & ~7;              /* the chunk holding u itself is masked */
    const int padded = (nu + 7) & ~7;
    const real8 lane = (real8)(0, 1, 2, 3, 4, 5, 6, 7);
    double acc = 0.0;
    for (int b = 0; b < padded; b += BLOCK) {
        const int end = min(b + BLOCK, padded);
        real8 s = (real8)0;
        for (int v = b; v < end; v += 8) {
            if (v != own) {
                s += background8(v, tu_u, tu, c, kb, kbl, shift);
            }
        }
        acc += HSUM8(s);
    }
    const real8 v = background8(own, tu_u, tu, c, kb, kbl, shift);
    const real8 keep = lane != (real)(u - own) ? v : (real8)0;
    acc += HSUM8(keep);
    out[g] = acc;
}

/*
 * Background as the plain pair sum over all events (engine.background: pairs), to check the
 * per-distinct-time form: row i gets sum_m 2^(-(t_i - t_m)^2 kb) over every m outside i's tie
 * group [lo[i], hi[i]) (the tie rule, by index, so it holds for any times); t padded by 8.
 */
__kernel void background_pairs(__global const real *t, const int n, __global const int *lo,
                               __global const int *hi, const int row0, const int nrows,
                               const real kb, const real kbl, const real shift,
                               __global double *out)
{
    const int g = get_global_id(0);
    if (g >= nrows) {
        return;
    }
    const int i = row0 + g;
    const real ti = t[i];
    const real8 lane = (real8)(0, 1, 2, 3, 4, 5, 6, 7);
    const real a = (real)lo[i], b = (real)hi[i], end = (real)n;
    double acc = 0.0;
    for (int blk = 0; blk < n; blk += BLOCK) {
        const int stop = min(blk + BLOCK, n);
        real8 s = (real8)0;
        for (int m = blk; m < stop; m += 8) {
            const real8 dt = ti - LOAD8(t, m);
            const real8 v = exp2_neg(EXPONENT(shift, dt * dt, kb, kbl, (real8)0, 0));
            const real8 pos = lane + (real)m;
            s += ((pos < a || pos >= b) && pos < end) ? v : (real8)0;
        }
        acc += HSUM8(s);
    }
    out[g] = acc;
}

/* (e^r - 1) / r from its Taylor series to degree 12, 1 + r/2! + ... + r^12/13!, by Horner
 * (exp_f64 and expm1_f64; |r| <= ln2 / 2 there). */
static double exp_series13(const double r)
{
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    return p * r + 1.0;
}

/*
 * e^x in float64 from arithmetic alone: no library call. The builtin exp is the device's own
 * code, and a kernel that passes it a vector is right only where caller and library agree on
 * how vectors are passed. PoCL 3.0 (LLVM 14) on an AMD EPYC with AVX-512 compiles our code for
 * "znver3", without AVX-512, but links the AVX-512 variant of its math library: exp(double16)
 * then returns in two 512-bit registers while our code reads four 256-bit ones (lanes 4-15
 * garbage, no crash; seen in the code PoCL generates here with that library swapped in).
 * hermite_box and the expansion boxes' time factors called it, which is why exactly the
 * expansion-box tests were hundreds of nats off there. Range reduction x = n ln2 + r with ln2
 * in two parts (n LN2_HI exact for |n| < 2^11), |r| <= ln2 / 2, Taylor series of e^r to degree
 * 13 (omitted term < 5e-18 relative), 2^n added to the exponent: within 2 ulp of e^x for
 * -708 <= x <= 709 (1 measured: tests/test_kernel_math.py); 0 below (e^x < 3.3e-308), +inf
 * above, NaN stays NaN.
 */
#define LN2_HI 6.93147180369123816490e-01 /* 0x3fe62e42fee00000 */
#define LN2_LO 1.90821492927058770002e-10
static double exp_f64(const double x)
{
    const double xc = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x);
    const double shifted = xc * 1.4426950408889634 + 6755399441055744.0; /* round(x / ln2) */
    const double n = shifted - 6755399441055744.0;
    const double r = (xc - n * LN2_HI) - n * LN2_LO;
    const double p = exp_series13(r) * r + 1.0;
    const long e = (as_long(shifted) - as_long(6755399441055744.0)) << 52;
    const double v = as_double(as_long(p) + e);
    return x < -708.0 ? 0.0 : (x > 709.0 ? INFINITY : (x == x ? v : x));
}

/*
 * e^x - 1 in float64 without cancellation (the builtin expm1 is the device's library): for
 * |x| <= ln2 / 2 the Taylor series of e^x less its 1, x (1 + x/2 + ... + x^12 / 13!) (the
 * omitted term is below 2e-17 of the value); beyond, exp_f64(x) - 1, where |e^x - 1| >= 0.29
 * keeps exp_f64's 2 ulp within 8 ulp of the difference. Within a few ulp of numpy's expm1
 * (tests/test_kernel_math.py).
 */
static double expm1_f64(const double x)
{
    if (x < -0.34657359027997264 || x > 0.34657359027997264) {
        return exp_f64(x) - 1.0;
    }
    return exp_series13(x) * x;
}

/*
 * log x for a positive normal double, NaN kept, +inf to +inf (the rates are floored at 1e-40):
 * x = m 2^k with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1) (m - 1
 * exact), |s| <= 0.1716, by its series to s^21 (the next term is below 2^-55 of log m); log 2
 * in two parts, k LN2_HI exact. Within a few ulp of numpy's log (tests/test_kernel_math.py).
 */
static double log_series(const double s)
{
    const double s2 = s * s;
    double p = 1.0 / 21.0;
    p = p * s2 + 1.0 / 19.0;
    p = p * s2 + 1.0 / 17.0;
    p = p * s2 + 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0;
    p = p * s2 + 1.0 / 11.0;
    p = p * s2 + 1.0 / 9.0;
    p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0;
    p = p * s2 + 1.0 / 3.0;
    return 2.0 * s + 2.0 * s * (s2 * p);
}

static double log_f64(const double x)
{
    const long bits = as_long(x);
    long k = (bits >> 52) - 1023;
    double m = as_double((bits & 0x000fffffffffffffL) | 0x3ff0000000000000L); /* [1, 2) */
    if (m > 1.4142135623730951) {
        m *= 0.5;
        k += 1;
    }
    const double kd = (double)k;
    const double v = kd * LN2_HI + (kd * LN2_LO + log_series((m - 1.0) / (m + 1.0)));
    return (x == x && x <= 1.7976931348623157e308) ? v : x;
}

/* log(1 + x) for x >= 0 (NaN kept, +inf to +inf): the series of 2 atanh(x / (2 + x)) below
 * x = 1/4 (|s| <= 1/9, no cancellation for small x); above, log_f64(u), u = 1 + x rounded,
 * less the rounding's share ((u - 1) - x) / u (u - 1 is exact). */
static double log1p_f64(const double x)
{
    if (x < 0.25) {
        return log_series(x / (2.0 + x));
    }
    const double u = 1.0 + x;
    return x <= 1.7976931348623157e308 ? log_f64(u) - ((u - 1.0) - x) / u : log_f64(x);
}

/* log1p_f64, by its series' first three terms below 2^-20 (x - x^2/2 + x^3/3: the rest is
 * below 2^-62 of it): the bounds' terms are mostly tiny, and this spares their divisions. */
static double log1p_small(const double x)
{
    return x < 0x1p-20 ? x * (1.0 - x * (0.5 - x * (1.0 / 3.0))) : log1p_f64(x);
}

/*
 * The per-row sums of one evaluation (engine/row_sums.py), in float64, over this rank's rows
 * n < rows: lane g of `lanes` takes rows g, g + lanes, ... (adjacent lanes read adjacent rows;
 * no local memory, no barrier) and writes
 *     out[g]             = sum log lambda_n,
 *     out[lanes + g]     = sum log1p(xi0 omega_n / lambda_n)       (has_omega, else 0),
 *     out[2 lanes + g]   = sum -log1p(-min(mu0 beta_n / lambda_n, 1))  (!exact, else 0),
 *     out[3 lanes + g]   = sum (xi0 E_n / lambda_n) rel_n          (has_rel, else 0:
 *                          renormalized's edge error, rel_n = e_n / M_n),
 * the host adding the lanes. With i = cell[n], b = frac[n], q = b (1 - b), the background on
 * its time lattice and the bound (engine/binned.py, the same operations in the same order):
 *     B_n    = max(((1 - b) conv[i] + b conv[i + 1] + extra[n] - tq[n] g1) norm, 0)
 *     beta_n = max(q bv[i >> shift_r] + bu[i >> shift_r] - m0 tq[n], 0) bscale norm
 * (exact: B_n = max(conv[i] norm, 0), beta_n = 0), and lambda_n = max(mu0 B_n + xi0 E_n,
 * lam_floor) (NaN kept, as numpy's maximum keeps it).
 */
__kernel void row_sums(__global const int *cell, __global const double *frac,
                       __global const double *extra, __global const double *tq,
                       __global const double *conv, __global const double *bu,
                       __global const double *bv, __global const double *e,
                       __global const double *omega, __global const double *rel,
                       const int rows, const int lanes, const int exact, const int has_omega,
                       const int has_rel, const int shift_r,
                       const double norm, const double g1, const double m0,
                       const double bscale, const double mu0, const double xi0,
                       const double lam_floor, __global double *out)
{
    const int g = get_global_id(0);
    if (g >= lanes) {
        return;
    }
    double s_log = 0.0, s_trig = 0.0, s_back = 0.0, s_edge = 0.0;
    for (int n = g; n < rows; n += lanes) {
        const int i = cell[n];
        double B, beta = 0.0;
        if (exact) {
            B = conv[i] * norm;
        } else {
            const double b = frac[n], a = 1.0 - b;
            B = a * conv[i];
            B += b * conv[i + 1];
            B += extra[n];
            B -= tq[n] * g1;
            B *= norm;
            const int blk = i >> shift_r;
            beta = (b * a) * bv[blk];
            beta += bu[blk];
            beta -= m0 * tq[n];
            beta = (beta > 0.0 ? beta : 0.0) * bscale;
            beta *= norm;
        }
        B = B > 0.0 ? B : 0.0;
        double lam = B * mu0;
        lam += e[n] * xi0;
        lam = lam < lam_floor ? lam_floor : lam;
        s_log += log_f64(lam);
        if (has_rel) {
            s_edge += ((e[n] * xi0) / lam) * rel[n];
        }
        if (has_omega) {
            s_trig += log1p_small((omega[n] * xi0) / lam);
        }
        if (!exact) {
            double r = (beta * mu0) / lam;
            r = r < 1.0 ? r : 1.0;
            /* -log1p(-r) = log1p(r / (1 - r)); below 2^-20 its series r + r^2/2 + r^3/3 */
            s_back += r < 0x1p-20 ? r * (1.0 + r * (0.5 + r * (1.0 / 3.0)))
                                  : log1p_f64(r / (1.0 - r));
        }
    }
    out[g] = s_log;
    out[lanes + g] = s_trig;
    out[2 * lanes + g] = s_back;
    out[3 * lanes + g] = s_edge;
}

/* One uniform point inside each event's polygon, from three uniforms per event: the location
 * redraw of the cut posterior on the device, the same numbers as geo.PolygonSampler's host
 * draw (same comparisons, same float64 operations in the same order, no contraction: every
 * product and sum is its own statement, and the pragma FP_CONTRACT OFF in the body forbids
 * fusing them across statements, which NVIDIA's compiler does by default: on an H200 without
 * it, 46 of 100,000 points differed from the host's in the last bit).
 *
 * Event n of polygon c = code[n] with uniforms r[3n], r[3n + 1], r[3n + 2]: the triangle is
 * the first t in [offsets[c], offsets[c + 1]) whose key[t] (c + the cumulative area share of
 * the polygon's triangles up to t) exceeds c + r[3n], else the polygon's last; (u, v) =
 * (r[3n + 1], r[3n + 2]) folded into the triangle when u + v > 1; the point A + u (B - A) +
 * v (C - A) clamped to the triangle's bounding box (tri holds ax, ay, bx, by, cx, cy per
 * triangle). Writes x and y in float64 (xd, yd: n values) and in the working precision as
 * the events' location buffers hold them (xh, yh and, in float32 only, the remainders xl, yl;
 * float64 never writes xl, yl), the work-items from n to the buffers' padded length writing
 * their padding (0).
 */
__kernel void draw_points(__global const double *r, __global const int *code,
                          __global const int *offsets, __global const double *key,
                          __global const double *tri, const int n, const int padded_n,
                          __global double *xd, __global double *yd, __global real *xh,
                          __global real *yh, __global real *xl, __global real *yl)
{
#pragma OPENCL FP_CONTRACT OFF
    const int i = get_global_id(0);
    if (i >= padded_n) {
        return;
    }
    if (i >= n) {
        xh[i] = 0;
        yh[i] = 0;
#if !REAL_IS_DOUBLE
        xl[i] = 0;
        yl[i] = 0;
#endif
        return;
    }
    const int c = code[i];
    const double q = (double)c + r[3 * i];
    int lo = offsets[c];
    const int last = offsets[c + 1] - 1;
    int hi = last + 1;
    while (lo < hi) { /* the first key > q */
        const int mid = lo + ((hi - lo) >> 1);
        if (key[mid] > q) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    const int t = lo < last ? lo : last;
    double u = r[3 * i + 1], v = r[3 * i + 2];
    if (u + v > 1.0) {
        u = 1.0 - u;
        v = 1.0 - v;
    }
    __global const double *p = tri + 6 * (size_t)t;
    const double ax = p[0], ay = p[1], bx = p[2], by = p[3], cx = p[4], cy = p[5];
    double dx = bx - ax, dy = by - ay;
    double x = u * dx, y = u * dy;
    x = ax + x;
    y = ay + y;
    dx = cx - ax;
    dy = cy - ay;
    dx = v * dx;
    dy = v * dy;
    x = x + dx;
    y = y + dy;
    const double x_lo = min(min(ax, bx), cx), x_hi = max(max(ax, bx), cx);
    const double y_lo = min(min(ay, by), cy), y_hi = max(max(ay, by), cy);
    x = min(max(x, x_lo), x_hi);
    y = min(max(y, y_lo), y_hi);
    xd[i] = x;
    yd[i] = y;
    const real hx = (real)x, hy = (real)y;
    xh[i] = hx;
    yh[i] = hy;
#if !REAL_IS_DOUBLE
    xl[i] = (real)(x - (double)hx);
    yl[i] = (real)(y - (double)hy);
#endif
}

/* The sources of a truncated trigger's grid index in its sorted order (engine/grid_upload.py),
 * from the float64 times, locations and weights already on the device: sorted position k holds
 * source m = order[k], of grid level l = level[m] (cell side hs[l], ih[l] = 1 / hs[l]); its
 * time (st, std), weight (sw, swd), offset from the corner of its cell floor((x - x0) ih[l])
 * (sxr, syr), its 4 x 4 sub-cell 4 qx + qy (sq, qx = floor(offset * (4 / hs[l])) clamped to
 * [0, 3]) and, for the expansion sources (k >= mk0), the offsets from their box's centre over
 * half the box clamped to [-1, 1] (enx, eny at k - mk0). The same float64 operations in the
 * same order as the host's, none contracted (FP_CONTRACT OFF, as draw_points). Work-items n .. padded_n - 1 write the padding
 * (0) of the working-precision arrays and of enx, eny.
 */
__kernel void index_sources(__global const int *order, __global const int *level,
                            __global const double *hs, __global const double *ih,
                            __global const double *td, __global const double *xd,
                            __global const double *yd, __global const double *wd,
                            const double x0, const double y0, const int n,
                            const int padded_n, const int mk0, __global real *st,
                            __global real *sxr, __global real *syr, __global real *sw,
                            __global double *std, __global double *swd, __global uchar *sq,
                            __global double *enx, __global double *eny)
{
#pragma OPENCL FP_CONTRACT OFF
    const int k = get_global_id(0);
    if (k >= padded_n) {
        return;
    }
    if (k >= n) {
        st[k] = 0;
        sxr[k] = 0;
        syr[k] = 0;
        sw[k] = 0;
        enx[k - mk0] = 0.0;
        eny[k - mk0] = 0.0;
        return;
    }
    const int m = order[k];
    const int l = level[m];
    const double h = hs[l], inv = ih[l];
    const double x = xd[m], y = yd[m];
    const double cx = floor((x - x0) * inv), cy = floor((y - y0) * inv);
    double cornx = cx * h, corny = cy * h;
    cornx = x0 + cornx;
    corny = y0 + corny;
    const double rx = x - cornx, ry = y - corny;
    const double q = 4.0 / h;
    const double qx = min(max(floor(rx * q), 0.0), 3.0), qy = min(max(floor(ry * q), 0.0), 3.0);
    const double t = td[m], w = wd[m];
    st[k] = (real)t;
    std[k] = t;
    sw[k] = (real)w;
    swd[k] = w;
    sxr[k] = (real)rx;
    syr[k] = (real)ry;
    sq[k] = (uchar)(4.0 * qx + qy);
    if (k >= mk0) {
        const double half_box = 0.5 * h;
        enx[k - mk0] = min(max(rx / half_box - 1.0, -1.0), 1.0);
        eny[k - mk0] = min(max(ry / half_box - 1.0, -1.0), 1.0);
    }
}

/* Read of one tile raster at (px, py): geom[4k ..] = x0, y0, h (its corner and cell side),
 * shape[3k ..] = nx, ny, off (its cells and where it starts in raster): three layers of nx ny
 * floats (the mass, its second differences along x and along y). Bilinear between cell
 * centres less fx (1 - fx) Mxx / 2 + fy (1 - fy) Myy / 2 at the nearest centre (not clamped).
 */
static double raster_read(__global const double *geom, __global const long *shape,
                          __global const float *raster, const int k, const double px,
                          const double py)
{
    const double x0 = geom[4 * k], y0 = geom[4 * k + 1], h = geom[4 * k + 2];
    const long nx = shape[3 * k], ny = shape[3 * k + 1], off = shape[3 * k + 2];
    double u = (px - x0) / h - 0.5, v = (py - y0) / h - 0.5;
    u = min(max(u, 0.0), (double)nx - 1.000001);
    v = min(max(v, 0.0), (double)ny - 1.000001);
    const long i = (long)u, j = (long)v;
    const double fx = u - (double)i, fy = v - (double)j;
    __global const float *m = raster + off;
    const long at = j * nx + i;
    double lo_row = (1.0 - fx) * (double)m[at];
    lo_row += fx * (double)m[at + 1];
    double hi_row = (1.0 - fx) * (double)m[at + nx];
    hi_row += fx * (double)m[at + nx + 1];
    double val = (1.0 - fy) * lo_row;
    val += fy * hi_row;
    const long near = at + (fx > 0.5 ? 1 : 0) + (fy > 0.5 ? nx : 0);
    double corr = fx * (1.0 - fx) * (double)m[nx * ny + near];
    corr += fy * (1.0 - fy) * (double)m[2 * nx * ny + near];
    val -= 0.5 * corr;
    return val;
}

/* Each row's trigger mass inside a polygon region read from the rasters of its county's tile
 * (engine/region_groups.py: locations redrawn inside their counties), the read of
 * engine/region.py's _Field, behind the distance screen of engine/region_screen.py.
 *
 * Row n (event row0 + n) of tile k = tile[n] (k < 0: no raster, mass 1) reads the tile's
 * raster (raster_read; geom[4k + 3] is the tile's reach). Where the tile has an upper raster
 * (the next lattice level's, tile u = upper[k] >= 0), the row's mass is (1 - f) lo + f hi with
 * f = frac[n] (model 2: each county's lengthscale between two levels); then clamped to [0, 1];
 * err = field_error where the mass is below 1. A row the screen (bound: bny x bnx cells of
 * side bh from (bx0, by0), a lower bound on the distance to the boundary) puts at least its
 * tile's reach from the boundary keeps mass 1, err 0. Work-item i computes row n = pick[i]
 * (i < rows) and writes mass[out0 + i], err[out0 + i]: all rows in order, or only those that
 * can lose mass (out0: where this lattice point's block starts when several share a buffer).
 */
__kernel void raster_mass(__global const double *x, __global const double *y, const int row0,
                          const int rows, __global const int *pick, __global const int *tile,
                          __global const double *frac, __global const double *geom,
                          __global const long *shape, __global const int *upper,
                          __global const float *raster, __global const float *bound,
                          const int bnx, const int bny, const double bx0, const double by0,
                          const double bh, const double field_error, const int out0,
                          __global double *mass, __global double *err)
{
    const int i = get_global_id(0);
    if (i >= rows) {
        return;
    }
    const int n = pick[i];
    const long at = (long)out0 + i;
    mass[at] = 1.0;
    err[at] = 0.0;
    const int k = tile[n];
    if (k < 0) {
        return;
    }
    const double px = x[row0 + n], py = y[row0 + n];
    const double fi = floor((px - bx0) / bh), fj = floor((py - by0) / bh);
    if (fi >= 0.0 && fi < (double)bnx && fj >= 0.0 && fj < (double)bny
        && (double)bound[(long)fj * bnx + (long)fi] >= geom[4 * k + 3]) {
        return;
    }
    double val = raster_read(geom, shape, raster, k, px, py);
    const int u = upper[k];
    if (u >= 0) {
        const double f = frac[n];
        const double hi = raster_read(geom, shape, raster, u, px, py);
        val = (1.0 - f) * val;
        val += f * hi;
    }
    val = min(max(val, 0.0), 1.0);
    mass[at] = val;
    err[at] = val < 1.0 ? field_error : 0.0;
}

/* The rows the host computes itself (engine/region_groups_device.py: per-event rows, and rows
 * of counties wider than a tile that no square took this draw) out of the device's masses of
 * `npoints` lattice points, each a block of `rows` in mass and err (raster_mass's out0 = j rows):
 * work-item r < count copies row idx[r] of every block into out_m[j count + r], out_e[...] and
 * sets its mass to 1 there (so that edge_lost counts it nowhere: the host adds it).
 */
__kernel void take_rows(__global double *mass, __global const double *err, const int rows,
                        const int npoints, __global const int *idx, const int count,
                        __global double *out_m, __global double *out_e)
{
    const int r = get_global_id(0);
    if (r >= count) {
        return;
    }
    const long n = idx[r];
    for (int j = 0; j < npoints; j++) {
        const long at = (long)j * rows + n;
        out_m[(long)j * count + r] = mass[at];
        out_e[(long)j * count + r] = err[at];
        mass[at] = 1.0;
    }
}

/* What the rows that can lose trigger mass lose, in the compensator (engine/compensator.py,
 * engine/edge_mass.py's _LostCubics on the host): row i < rows (event row pick[i] of this
 * rank) has its masses at `npoints` lattice points in mass[j rows + i] (raster_mass, err there
 * field_error exactly where the mass is below 1); its lost mass 1 - M at position u = shift +
 * offset[pick[i]] (has_offset: model 2's own lengthscale's place above its snap, in lattice
 * steps; else 0) is the cubic through the lost masses 1 - mass of nodes -1, 0, 1, 2 at the
 * points j0 .. j0 + 3, j0 = 1 where five points and u >= 1 (then at u - 1), else 0, by
 * Lagrange weights; M = clamp(1 - cubic, 0, 1). One point: 1 - mass as it is. Its error scale
 * is field_error + interpolation_error where some point's mass is below 1 (one point: only
 * field_error), else 0. With s = -expm1_f64(tail[pick[i]] / sigma_t) (tail: the row's time less
 * the window's end), lane g of `lanes` takes rows g, g + lanes, ... and writes
 *     out[g]         = sum s (1 - M),
 *     out[lanes + g] = sum s e,
 * the host adding the lanes (as row_sums: no local memory, no barrier).
 */
__kernel void edge_lost(const int rows, const int lanes, const int npoints,
                        __global const int *pick, __global const double *mass,
                        __global const double *offset, const int has_offset, const double shift,
                        __global const double *tail, const double sigma_t,
                        const double field_error, const double interpolation_error,
                        __global double *out)
{
    const int g = get_global_id(0);
    if (g >= lanes) {
        return;
    }
    double s_lost = 0.0, s_err = 0.0;
    for (int i = g; i < rows; i += lanes) {
        const int n = pick[i];
        double lo = 1.0;
        for (int j = 0; j < npoints; j++) {
            lo = min(lo, mass[(long)j * rows + i]);
        }
        if (lo >= 1.0) {
            continue;
        }
        const double share = -expm1_f64(tail[n] / sigma_t);
        double lost;
        if (npoints == 1) {
            lost = 1.0 - mass[i];
            s_err += share * field_error;
        } else {
            double u = shift + (has_offset ? offset[n] : 0.0);
            int j0 = 0;
            if (npoints == 5 && u >= 1.0) {
                j0 = 1;
                u -= 1.0;
            }
            const double w0 = -u * (u - 1.0) * (u - 2.0) / 6.0;
            const double w1 = (u + 1.0) * (u - 1.0) * (u - 2.0) / 2.0;
            const double w2 = -(u + 1.0) * u * (u - 2.0) / 2.0;
            const double w3 = (u + 1.0) * u * (u - 1.0) / 6.0;
            __global const double *m = mass + (long)j0 * rows + i;
            double c = w0 * (1.0 - m[0]);
            c += w1 * (1.0 - m[rows]);
            c += w2 * (1.0 - m[2L * rows]);
            c += w3 * (1.0 - m[3L * rows]);
            lost = 1.0 - min(max(1.0 - c, 0.0), 1.0);
            s_err += share * (field_error + interpolation_error);
        }
        s_lost += share * lost;
    }
    out[g] = s_lost;
    out[lanes + g] = s_err;
}

/* Which levels have a source within reach of each row block, one bit per level: the host's
 * grid.block_levels, one work-item per block. Block b's rows (blocks[16 b ..], ~r a padding
 * copy of row r) span a box; level l is kept when the presence grid's summed-area table of
 * level l (sat + l (cells + 1)^2, row-major [i][j] for the cells [0, i) x [0, j) from (x0, y0)
 * in steps of g) counts a source in the box widened by pad[l] and rounded out to whole
 * cells. Levels with no source at all are never kept. The same float64 operations as the
 * host's, so the same bits.
 */
static long presence_cell(const double v, const double v0, const double g, const int shift,
                          const int cells)
{
    double c = floor((v - v0) / g) + (double)shift;
    c = c < 0.0 ? 0.0 : (c > (double)cells ? (double)cells : c);
    return (long)c;
}

__kernel void block_levels(__global const int *blocks, const int count,
                           __global const double *x, __global const double *y,
                           __global const int *sat, const int nlev, const int cells,
                           const double x0, const double y0, const double g,
                           __global const double *pad, __global ulong *near)
{
    const int b = get_global_id(0);
    if (b >= count) {
        return;
    }
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int j = 0; j < 16; j++) {
        int r = blocks[16 * b + j];
        r = r >= 0 ? r : ~r;
        xlo = min(xlo, x[r]);
        xhi = max(xhi, x[r]);
        ylo = min(ylo, y[r]);
        yhi = max(yhi, y[r]);
    }
    const long w = cells + 1;
    ulong out = 0;
    for (int lev = 0; lev < nlev; lev++) {
        __global const int *s = sat + (size_t)lev * w * w;
        if (s[w * w - 1] == 0) {
            continue;
        }
        const long lx = presence_cell(xlo - pad[lev], x0, g, 0, cells);
        const long hx = presence_cell(xhi + pad[lev], x0, g, 1, cells);
        const long ly = presence_cell(ylo - pad[lev], y0, g, 0, cells);
        const long hy = presence_cell(yhi + pad[lev], y0, g, 1, cells);
        const int found = s[hx * w + hy] - s[lx * w + hy] - s[hx * w + ly] + s[lx * w + ly];
        if (found > 0) {
            out |= (ulong)1 << lev;
        }
    }
    near[b] = out;
}

/* The presence grid of the row blocks' level test (engine/grid.py level_presence) on the
 * device: presence_count adds each source to its level's cell (atomic; the table starts at
 * zero), sat[l][gx + 1][gy + 1] with (gx, gy) = floor((x - x0) / g), floor((y - y0) / g)
 * clamped to [0, cells - 1]; presence_scan then sums each level's counts into its summed-area
 * table, along j for every row i (axis 0: one work-item per level and row) and along i for
 * every column j (axis 1). Integer sums: the same table as the host's, whatever the order.
 */
__kernel void presence_count(__global const double *x, __global const double *y,
                             __global const int *level, const int n, const int cells,
                             const double x0, const double y0, const double g,
                             __global int *sat)
{
    const int m = get_global_id(0);
    if (m >= n) {
        return;
    }
    double gx = floor((x[m] - x0) / g), gy = floor((y[m] - y0) / g);
    gx = gx < 0.0 ? 0.0 : (gx > (double)(cells - 1) ? (double)(cells - 1) : gx);
    gy = gy < 0.0 ? 0.0 : (gy > (double)(cells - 1) ? (double)(cells - 1) : gy);
    const long w = cells + 1;
    atomic_inc(sat + (size_t)level[m] * w * w + ((long)gx + 1) * w + ((long)gy + 1));
}

__kernel void presence_scan(__global int *sat, const int nlev, const int cells, const int axis)
{
    const int k = get_global_id(0);
    const long w = cells + 1;
    if (k >= nlev * w) {
        return;
    }
    __global int *s = sat + (size_t)(k / w) * w * w;
    const long line = k % w;
    const long step = axis == 0 ? 1 : w; /* along j within row `line`, or along i */
    __global int *p = s + (axis == 0 ? line * w : line);
    int acc = 0;
    for (long i = 0; i < w; i++) {
        acc += p[i * step];
        p[i * step] = acc;
    }
}
