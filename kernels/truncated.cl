/*
 * truncated.cl -- trigger pair sums with an error bound (issue 7; DESIGN.md section 2).
 *
 * Compiled after hawkes.cl in the same program (it reuses `real`, `real8`, exp2_neg, BLOCK),
 * one source for float32 and float64 (-DREAL_IS_DOUBLE).
 *
 * Sources are sorted into a multi-level uniform grid (host: hawkes_cli/engine/truncated.py):
 * level l holds the sources whose cut-off radius R_m = sqrt(2 kappa) s_m is at most the
 * level's cell size h_l; within a level, sources are sorted by cell key, then by event index
 * (i.e. by time). Row n visits, in every level, the 3 x 3 cells around its own cell, and in
 * each cell the sources with t_n - Tc <= t_m and m < lo[n] (two binary searches). Everything
 * it does not visit is one of
 *   (a) a source of a visited cell older than t_n - Tc: bounded by its temporal factor alone,
 *       w_m exp(-(t_n - t_m)/sigma_t) (the spatial factor is <= 1); the kernel sums these
 *       bounds exactly from a per-cell prefix (`pre`, from kernel cell_prefix) -> out_tail;
 *   (b1) a source of the ring of the 5 x 5 cells around the row: at distance > h_l >= R_m, so
 *       its spatial factor is < exp(-kappa); the kernel sums the temporal factors of all
 *       ring sources (m < lo[n]) -> out_ring (exponential prefixes only, else 0);
 *   (b2) any other source: at distance > 2 h_l, spatial factor < exp(-4 kappa); the host
 *       bounds their sum with the all-sources temporal sum S_n.
 * The trigger itself (out_e) uses the same shifted exp2 terms as hawkes.cl.
 */

/* 2D cell key; iy in [-1, 2^20 + 1] never collides across ix (see truncated.py). */
#define KEY_STRIDE 4194304L

/* first k in [a, b) with keys[k] >= key (b if none) */
static int lower_bound_long(__global const long *keys, int a, int b, const long key)
{
    while (a < b) {
        const int mid = a + ((b - a) >> 1);
        if (keys[mid] < key) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    return a;
}

/* first k in [a, b) with idx[k] >= v */
static int lower_bound_int(__global const int *idx, int a, int b, const int v)
{
    while (a < b) {
        const int mid = a + ((b - a) >> 1);
        if (idx[mid] < v) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    return a;
}

/* first k in [a, b) with t[k] >= v */
static int lower_bound_time(__global const double *t, int a, int b, const double v)
{
    while (a < b) {
        const int mid = a + ((b - a) >> 1);
        if (t[mid] < v) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    return a;
}

/*
 * Per-cell exclusive prefix of the tail weights g_k (sorted order), in float64:
 *     g_k = w_k * exp((t_k - t0) / sigma_t)   (exp_mode = 1; the host guarantees no overflow)
 *     g_k = w_k                               (exp_mode = 0)
 * Cell c owns the count + 1 slots pre[cbeg[c] + c .. cbeg[c + 1] + c]: pre[k + c] = sum over
 * the sources of cell c before sorted position k (k = cbeg[c + 1] gives the whole cell).
 * One work-item per cell; summation of positive terms, relative error <= count * eps.
 */
__kernel void cell_prefix(__global const double *st, __global const double *sw,
                          __global const int *cbeg, const int ncells, const double t0,
                          const double inv_sigma_t, const int exp_mode, __global double *pre)
{
    const int c = get_global_id(0);
    if (c >= ncells) {
        return;
    }
    double acc = 0.0;
    for (int k = cbeg[c]; k < cbeg[c + 1]; ++k) {
        pre[k + c] = acc;
        acc += exp_mode ? sw[k] * exp((st[k] - t0) * inv_sigma_t) : sw[k];
    }
    pre[cbeg[c + 1] + c] = acc;
}

static real8 source8(const int k, const real ti, const real xi, const real yi, const real xil,
                     const real yil, __global const real *st, __global const real *sx,
                     __global const real *sy, __global const real *sxl,
                     __global const real *syl, __global const real *sw, const real kt,
                     const real kx, const real shift, const int model2)
{
    const real8 dt = ti - vload8(0, st + k);
#if REAL_IS_DOUBLE
    const real8 dx = xi - vload8(0, sx + k);
    const real8 dy = yi - vload8(0, sy + k);
#else
    const real8 dx = (xi - vload8(0, sx + k)) + (xil - vload8(0, sxl + k));
    const real8 dy = (yi - vload8(0, sy + k)) + (yil - vload8(0, syl + k));
#endif
    const real8 r2 = dx * dx + dy * dy;
    if (model2) {
        const real8 wm = vload8(0, sw + k);
        return wm * exp2_neg(shift - dt * kt - r2 * (kx * wm));
    }
    return exp2_neg(shift - dt * kt - r2 * kx);
}

static void truncated_rows(
    /* targets, by event index */
    __global const real *t, __global const real *x, __global const real *y,
    __global const real *xl, __global const real *yl, __global const double *td,
    __global const double *xd, __global const double *yd, __global const int *lo,
    /* sources, sorted by (level, cell, index); padded by 8 */
    __global const real *st, __global const real *sx, __global const real *sy,
    __global const real *sxl, __global const real *syl, __global const real *sw,
    __global const double *std, __global const int *sidx, __global const double *pre,
    /* cells */
    __global const long *ckey, __global const int *cbeg, __global const int *loff,
    __global const double *inv_h, const int nlevels, const double x0, const double y0,
    /* rows and parameters */
    const int row0, const int nrows, const real kt, const real kx, const real shift,
    const double tc, const double t0, const double inv_sigma_t, const int exp_mode,
    const double count_scale, __global double *out_e, __global double *out_tail,
    __global double *out_ring, const int model2)
{
    const int g = get_global_id(0);
    if (g >= nrows) {
        return;
    }
    const int i = row0 + g;
    const real ti = t[i], xi = x[i], yi = y[i];
#if REAL_IS_DOUBLE
    const real xil = 0, yil = 0;
#else
    const real xil = xl[i], yil = yl[i];
#endif
    const double tid = td[i], xid = xd[i], yid = yd[i];
    const double tstart = tid - tc;
    const int l = lo[i];
    const real8 lane = (real8)(0, 1, 2, 3, 4, 5, 6, 7);
    double acc = 0.0, tail = 0.0, ring = 0.0;
    for (int lev = 0; lev < nlevels; ++lev) {
        const int ka = loff[lev], kb = loff[lev + 1];
        if (ka == kb) {
            continue;
        }
        const long cx = (long)floor((xid - x0) * inv_h[lev]);
        const long cy = (long)floor((yid - y0) * inv_h[lev]);
        for (long ox = cx - 2; ox <= cx + 2; ++ox) {
            /* the cells (ox, cy-2..cy+2) are consecutive keys: one search, then walk */
            const long kx0 = ox * KEY_STRIDE + cy;
            const int edge_x = (ox == cx - 2) || (ox == cx + 2);
            int c = lower_bound_long(ckey, ka, kb, kx0 - 2);
            for (; c < kb && ckey[c] <= kx0 + 2; ++c) {
                const int cb = cbeg[c], ce = cbeg[c + 1];
                const int e = lower_bound_int(sidx, cb, ce, l); /* sources m < lo[i] */
                const long oy = ckey[c] - kx0;
                if (edge_x || oy == -2 || oy == 2) {
                    ring += pre[e + c]; /* (b1): ring of the 5 x 5 block, distance > h */
                    continue;
                }
                const int s = lower_bound_time(std, cb, e, tstart); /* t_m >= t_i - Tc */
                tail += pre[s + c];                                 /* (a): [cb, s) */
                real8 v = (real8)0;
                int count = 0;
                int k = s;
                for (; k + 8 <= e; k += 8) {
                    v += source8(k, ti, xi, yi, xil, yil, st, sx, sy, sxl, syl, sw, kt, kx,
                                 shift, model2);
                    if (++count == BLOCK / 8) {
                        acc += HSUM8(v);
                        v = (real8)0;
                        count = 0;
                    }
                }
                if (k < e) { /* arrays are padded by 8 past the last source */
                    const real8 u = source8(k, ti, xi, yi, xil, yil, st, sx, sy, sxl, syl, sw,
                                            kt, kx, shift, model2);
                    v += lane < (real)(e - k) ? u : (real8)0;
                }
                acc += HSUM8(v);
            }
        }
    }
    const double scale = exp_mode ? exp(-(tid - t0) * inv_sigma_t) : count_scale;
    out_e[g] = acc;
    out_tail[g] = tail * scale;
    out_ring[g] = exp_mode ? ring * scale : 0.0;
}

#define TRUNCATED_ARGS                                                                         \
    __global const real *t, __global const real *x, __global const real *y,                  \
        __global const real *xl, __global const real *yl, __global const double *td,         \
        __global const double *xd, __global const double *yd, __global const int *lo,        \
        __global const real *st, __global const real *sx, __global const real *sy,           \
        __global const real *sxl, __global const real *syl, __global const real *sw,         \
        __global const double *std, __global const int *sidx, __global const double *pre,   \
        __global const long *ckey, __global const int *cbeg, __global const int *loff,       \
        __global const double *inv_h, const int nlevels, const double x0, const double y0,   \
        const int row0, const int nrows, const real kt, const real kx, const real shift,     \
        const double tc, const double t0, const double inv_sigma_t, const int exp_mode,      \
        const double count_scale, __global double *out_e, __global double *out_tail,       \
        __global double *out_ring

#define TRUNCATED_CALL(model2)                                                                 \
    truncated_rows(t, x, y, xl, yl, td, xd, yd, lo, st, sx, sy, sxl, syl, sw, std, sidx, pre, \
                   ckey, cbeg, loff, inv_h, nlevels, x0, y0, row0, nrows, kt, kx, shift, tc,  \
                   t0, inv_sigma_t, exp_mode, count_scale, out_e, out_tail, out_ring, model2)

__kernel void truncated_model1(TRUNCATED_ARGS)
{
    TRUNCATED_CALL(0);
}

__kernel void truncated_model2(TRUNCATED_ARGS)
{
    TRUNCATED_CALL(1);
}
