/*
 * truncated.cl -- trigger pair sums with an error bound (issues 7 and 14; DESIGN.md section 2).
 *
 * Compiled after hawkes.cl in the same program (it reuses `real`, `real8`, exp2_neg, BLOCK),
 * one source for float32 and float64 (-DREAL_IS_DOUBLE).
 *
 * Sources are sorted into uniform grids, one per *level* (host: hawkes_cli/engine/grid.py,
 * launched from hawkes_cli/engine/truncated.py). Model 1 has one level; model 2 puts source m
 * in level l when its density D_m lies in [dlo_l, 4 dlo_l), so that its cut-off radius
 * R_m = sqrt(2 kappa_l) sigma_x / sqrt(D_m) is at most the level's cell size h_l. Within a level,
 * sources are sorted by cell key, then by event index (i.e. by time). The row-block kernels
 * (truncated_blocks for model 1, truncated_blocks2 for model 2; further down) evaluate up to
 * 16 rows of one cell at a time and bound everything they omit (out_tail, out_ring; the
 * exp(-2.25 kappa_l)-weighted temporal sums of the sources beyond every level's reach are added
 * by far_chunks .. pass_bound at the end, or by the host).
 */

/* 2D cell key; iy in [-1, 2^20 + 1] never collides across ix (see grid.py). */
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
 * 2^y for -2^21 < y <= shift: exp2_neg of hawkes.cl without clamping y first (exp2_unmasked
 * is exact on that range; lanes below EXP2_MIN are set to 0). A row and a visited source are
 * at most a few cells of size >= R apart (per level: sources of a level differ in density by
 * < 4x), so |y| stays below 100 kappa log2(e) (kappa <= 740) << 2^21; four operations per
 * eight terms are saved.
 */
static real8 exp2_trunc(const real8 y)
{
    return y < EXP2_MIN ? (real8)0 : exp2_unmasked(y);
}

/* 2^n for an integer n in [-1022, 1023], exactly */
static double pow2i(const int n)
{
    return as_double((long)(n + 1023) << 52);
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
        acc += exp_mode ? sw[k] * exp_f64((st[k] - t0) * inv_sigma_t) : sw[k];
    }
    pre[cbeg[c + 1] + c] = acc;
}

/*
 * As cell_prefix, per 4 x 4 sub-cell of each cell (row-block kernel): pre16[16 (k + c) + q] is
 * the sum of g over the sources of sub-cell q of cell c before sorted position k; sq[k] is the
 * sub-cell (4 qx + qy) of sorted source k.
 */
__kernel void cell_prefix16(__global const double *st, __global const double *sw,
                            __global const uchar *sq, __global const int *cbeg,
                            const int ncells, const double t0, const double inv_sigma_t,
                            const int exp_mode, __global double *pre16)
{
    const int c = get_global_id(0);
    if (c >= ncells) {
        return;
    }
    double16 acc = (double16)0.0;
    for (int k = cbeg[c]; k < cbeg[c + 1]; ++k) {
        ((__global double16 *)pre16)[k + c] = acc;
        const double g = exp_mode ? sw[k] * exp_f64((st[k] - t0) * inv_sigma_t) : sw[k];
        union {
            double16 v;
            double a[16];
        } u;
        u.v = acc;
        u.a[sq[k]] += g;
        acc = u.v;
    }
    ((__global double16 *)pre16)[cbeg[c + 1] + c] = acc;
}

/*
 * Expansion boxes (grid levels nbase + l, grid.py's build_index): cells of one density whose
 * sources are summed, for rows newer than all of them, by a Hermite series about the box's
 * centre instead of pair by pair. With a = D / (2 sigma_x^2), u = sqrt(a) (x_n - centre) and
 * e = sqrt(a) (x_m - centre) per coordinate, exp(-(u - e)^2) = exp(-u^2) sum_k H_k(u) e^k / k!
 * (physicists' Hermite polynomials), so a row's sum over the box is
 *     exp(-u_x^2 - u_y^2) sum_{k, l < HERM_P} H_k(u_x) H_l(u_y) eps^(k + l) A_kl
 * with eps = sqrt(a) h / 2 and A_kl = sum_m g_m (e_x / eps)^k (e_y / eps)^l / (k! l!) (|e / eps|
 * <= 1), g_m = w_m exp((t_m - t0) / sigma_t). By Cramer's inequality |H_k(u)| exp(-u^2 / 2) <=
 * 1.086435 sqrt(2^k k!), so the series omitted beyond HERM_P in one coordinate is at most
 * q = 1.086435 exp(-u^2 / 2) tau, tau = sum_{k >= HERM_P} (sqrt(2) eps)^k / sqrt(k!), and the
 * product's error at most q_x + (1 + q_x) q_y times sum_m g_m (the full one-coordinate series
 * is exp(-(u - e)^2) <= 1, the truncated one at most 1 + q).
 */
/* HERM_P and HERM_STRIDE (prefix moments at every HERM_STRIDE-th source of a cell) come from
 * the build options (hawkes_cli/kernels.py: HERMITE_ORDER, HERMITE_STRIDE) */
#define HERM_PP (HERM_P * HERM_P)
#define CRAMER_K 1.0864350000001

/*
 * Prefix moments A_kl of the expansion cells [c0, c0 + ncells) (sorted positions from k0 on)
 * at every HERM_STRIDE-th source: mom[HERM_PP (moff[c - c0] + i) + HERM_P k' + l'] is A_k'l' of
 * the sources of cell c before sorted position cbeg[c] + HERM_STRIDE i. enx, eny: each
 * expansion source's offset from its box's centre over half the box (in [-1, 1]), from k0 on.
 * One work-item per cell; exp_mode only (the host guarantees no overflow of g).
 */
__kernel void cell_moments(__global const double *st, __global const double *sw,
                           __global const double *enx, __global const double *eny,
                           __global const int *cbeg, __global const int *moff, const int c0,
                           const int ncells, const int k0, const double t0,
                           const double inv_sigma_t, __global double *mom)
{
    const int i = get_global_id(0);
    if (i >= ncells) {
        return;
    }
    const int c = c0 + i;
    double acc[HERM_PP];
    for (int q = 0; q < HERM_PP; ++q) {
        acc[q] = 0.0;
    }
    __global double *out = mom + (size_t)HERM_PP * (size_t)moff[i];
    for (int k = cbeg[c];; ++k) {
        if ((k - cbeg[c]) % HERM_STRIDE == 0) {
            for (int q = 0; q < HERM_PP; ++q) {
                out[q] = acc[q];
            }
            out += HERM_PP;
        }
        if (k == cbeg[c + 1]) {
            break;
        }
        double px[HERM_P], py[HERM_P];
        px[0] = sw[k] * exp_f64((st[k] - t0) * inv_sigma_t);
        py[0] = 1.0;
        const double ex = enx[k - k0], ey = eny[k - k0];
        for (int n = 1; n < HERM_P; ++n) {
            px[n] = px[n - 1] * ex / n;
            py[n] = py[n - 1] * ey / n;
        }
        for (int n = 0; n < HERM_P; ++n) {
            for (int m = 0; m < HERM_P; ++m) {
                acc[HERM_P * n + m] += px[n] * py[m];
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Row blocks: one work-item evaluates up to LANES rows of one grid cell that lie close in time;
 * the rows share the enumeration of cells and the searches in them, and the per-row bound
 * factors are vectors over the rows (DESIGN.md section 2; host: hawkes_cli/engine/grid.py,
 * truncated.py). Source m has the term w_m exp(-u) exp(-|x_n - x_m|^2 D_m / (2 sigma_x^2))
 * (model 1: w_m = D_m = 1; model 2: w_m = D_m), so with u = (t_j - t_m)/sigma_t and
 * v_j = (distance from row j to the cell's rectangle)^2 dlo_c / (2 sigma_x^2), dlo_c the
 * smallest density of the cell's sources (>= the level's dlo_l), every source of the cell has
 * a term <= w_m exp(-u - v_j) (D_m >= dlo_c). The prefix sums carry w_m.
 * Each level has its own cut-off exponent kappa_l (host: kappa + log(the level's largest
 * density / the largest density), so that the weight times exp(-kappa_l) is about the same in
 * every level; model 1: kappa). For each level, for each non-empty cell within reach_l =
 * 1.5 R_l (R_l = sqrt(2 kappa_l) sigma_x / sqrt(dlo_l) <= h_l) of the block's bounding box
 * (levels with no source that near, host: bmask, are skipped: the far bound holds them):
 * (kappa below means kappa_l)
 *   - ring cell (v_j >= kappa for every row): nothing is computed; row j bounds the cell's
 *     sources older than itself by exp(-v_j) times their temporal factors (prefix sums);
 *   - otherwise, with tstart = min_j (t_j - sigma_t (kappa - v_j)) over the rows near the cell
 *     (the paraboloid u + v <= kappa of the ideal cut-off, widened to the block): every near
 *     row sums the sources with tstart <= t_m < t_j exactly; the older sources are bounded
 *     sub-cell by sub-cell (4 x 4 sub-cells in the rows' own cell, 4 strips across the
 *     separating axis in the others; per-sub-cell prefix sums from cell_prefix16); a row far
 *     from the cell (v_j >= kappa) bounds all the cell's sources older than itself.
 * Cells beyond the reach are at distance > 1.5 R_l: the host bounds them, over all levels
 * together, by sum_{m < lo_n} exp(-2.25 kappa_l(m)) w_m exp(-(t_n - t_m)/sigma_t).
 * With exp_mode = 0 (time span > 600 sigma_t) the ring is not summed (the host bounds it and
 * the far part by the same sum with exp(-kappa_l(m))), the prefix sums are plain weights, and
 * the older sources of a cell are bounded by exp(-(t_j - tstart)/sigma_t).
 * Levels nbase + l hold the expansion boxes of level l (see cell_moments; same kappa_l and
 * reach): with exp_mode, a non-ring box adds its Hermite series for every row instead of the
 * window, the sub-cell bounds and the far rows' bounds; without, it is an ordinary cell.
 * ------------------------------------------------------------------------------------------ */

#define LANES 16 /* rows per block */
typedef double16 dvec;
typedef long16 lvec;

/* one row block's lanes, as a vector and one by one */
union lanes {
    dvec v;
    double a[LANES];
};

/* An upper bound of exp(-v) for v >= 0, within 0.3 percent (alternating Taylor series of
 * 2^-f ending on a positive term, times an exact power of two); 2^-1020 below that. */
static dvec exp_neg_upper(const dvec v)
{
    const dvec y0 = v * 1.4426950408889634;
    const dvec y = y0 > 1020.0 ? (dvec)1020.0 : (y0 < 0.0 ? (dvec)0.0 : y0);
    const dvec shifted = y + 6755399441055744.0; /* 1.5 * 2^52: round to integer */
    const dvec r = shifted - 6755399441055744.0;
    const lvec up = r > y;                          /* -1 where rounded up */
    const dvec f = y - (r + (up ? (dvec)-1.0 : (dvec)0.0)); /* in [0, 1) */
    const dvec z = f * 0.6931471805599453;
    const dvec p = 1.0 - z * (1.0 - z * (0.5 - z * (0.16666666666666669 - z * 0.041666666666666671)));
    const lvec n = (as_long16(shifted) - as_long16((dvec)6755399441055744.0)) + up;
    return as_double16(as_long16(p * 1.0000000001) - (n << 52));
}

/* exp_f64 lane by lane (Oclgrind 21.10 evaluates the same range reduction written on double16
 * wrongly, as it did exp2_neg's two selects) */
static dvec exp_f64x16(const dvec v)
{
    union lanes u;
    u.v = v;
    for (int j = 0; j < LANES; ++j) {
        u.a[j] = exp_f64(u.a[j]);
    }
    return u.v;
}

static dvec sq(const dvec v)
{
    return v * v;
}

/* The smallest and largest of a vector's lanes, one lane at a time (no half-vector swizzles:
 * every lane of every row block is a real row, padding lanes copies of one). */
static double hmin(const dvec w)
{
    union lanes u;
    u.v = w;
    double m = u.a[0];
    for (int j = 1; j < LANES; ++j) {
        m = u.a[j] < m ? u.a[j] : m;
    }
    return m;
}

static double hmax(const dvec w)
{
    union lanes u;
    u.v = w;
    double m = u.a[0];
    for (int j = 1; j < LANES; ++j) {
        m = u.a[j] > m ? u.a[j] : m;
    }
    return m;
}

/* per-lane distance from points p to the interval [a, a + h], >= 0 */
static dvec gap(const dvec p, const double a, const double h)
{
    const dvec below = a - p, above = p - (a + h);
    const dvec m = below > above ? below : above;
    return m > 0.0 ? m : (dvec)0.0;
}


/*
 * Sum over the sources [s, e) (sorted arrays; coordinates relative to their cell's corner) of
 * the trigger terms of one row (coordinates relative to the same corner, two-part in float32),
 * eight sources per step with aligned loads; lanes outside [s, e) are masked. Model 2 weighs
 * each term by its density w_m, which also scales its squared distance; with amp (a compile-time
 * constant of each kernel, model.edge: renormalized) every term is also weighed by its source's
 * amplitude sa_m = 1 / M_m, which the host also puts into the float64 weights of the prefix
 * sums, moments and far sums (so every bound below carries it).
 */
static real8 rel_terms(const int k, const real ti, const real xi, const real yi,
                       const real xil, const real yil, __global const real *st,
                       __global const real *sxr, __global const real *syr,
                       __global const real *sw, __global const real *sa, const real kt,
                       const real kx, const real ktl, const real kxr, const real shift,
                       const int model2, const int amp)
{
    const real8 dt = ti - LOAD8(st, k);
    const real8 dx = (xi - LOAD8(sxr, k)) + xil;
    const real8 dy = (yi - LOAD8(syr, k)) + yil;
    const real8 r2 = dx * dx + dy * dy;
    real8 v;
    if (model2) {
        const real8 wm = LOAD8(sw, k);
        v = wm * exp2_trunc(EXPONENT(shift, dt, kt, ktl, r2 * (kx * wm), kxr));
    } else {
        v = exp2_trunc(EXPONENT(shift, dt, kt, ktl, r2 * kx, kxr));
    }
    return amp ? LOAD8(sa, k) * v : v;
}

static double rel_sum(const int s, const int e, const real ti, const real xi, const real yi,
                      const real xil, const real yil, __global const real *st,
                      __global const real *sxr, __global const real *syr,
                      __global const real *sw, __global const real *sa, const real kt,
                      const real kx, const real ktl, const real kxr, const real shift,
                      const int model2, const int amp)
{
    const real8 lane = (real8)(0, 1, 2, 3, 4, 5, 6, 7);
    const int first = s & ~7, last = e & ~7;
    real8 v;
    double acc = 0.0;
#define TERMS(k) \
    rel_terms(k, ti, xi, yi, xil, yil, st, sxr, syr, sw, sa, kt, kx, ktl, kxr, shift, model2, amp)
    if (first == last) { /* one chunk holds [s, e) */
        v = TERMS(first);
        return HSUM8(lane >= (real)(s - first) && lane < (real)(e - first) ? v : (real8)0);
    }
    /* head chunk (lanes >= s), full chunks, tail chunk (lanes < e; arrays padded by 8) */
    v = TERMS(first);
    v = lane >= (real)(s - first) ? v : (real8)0;
    int k = first + 8;
    while (k < last) {
        const int stop = min(k + BLOCK, last);
        for (; k < stop; k += 8) {
            v += TERMS(k);
        }
        acc += HSUM8(v);
        v = (real8)0;
    }
    if (last < e) {
        const real8 u = TERMS(last);
        v += lane < (real)(e - last) ? u : (real8)0;
    }
#undef TERMS
    return acc + HSUM8(v);
}

/*
 * rel_sum for a row at (xr, yr) relative to the sources' cell corner (float64), carried into
 * the working precision in two parts (float32) so that short distances stay accurate.
 */
static double row_sum(const int s, const int e, const double tj, const double xr,
                      const double yr, __global const real *st, __global const real *sxr,
                      __global const real *syr, __global const real *sw,
                      __global const real *sa, const real kt, const real kx, const real ktl,
                      const real kxr, const real shift, const int model2, const int amp)
{
    const real xi = (real)xr, yi = (real)yr;
#if REAL_IS_DOUBLE
    const real xil = 0, yil = 0;
#else
    const real xil = (real)(xr - (double)xi), yil = (real)(yr - (double)yi);
#endif
    return rel_sum(s, e, (real)tj, xi, yi, xil, yil, st, sxr, syr, sw, sa, kt, kx, ktl, kxr,
                   shift, model2, amp);
}

/*
 * A box's Hermite series (see cell_moments) at the rows' scaled offsets u, w from its centre:
 * the sum over its moments M (HERM_PP values) times exp(-u^2 - w^2); *err receives the bound
 * on the series omitted and on the rounding of the count sources' moments, per unit of
 * sum_m g_m.
 */
static dvec hermite_box(const dvec u, const dvec w, __global const double *M, const double eps,
                        const int count, dvec *err)
{
    dvec hx[HERM_P], hy[HERM_P];
    hx[0] = (dvec)1.0;
    hy[0] = (dvec)1.0;
    hx[1] = 2.0 * u;
    hy[1] = 2.0 * w;
    for (int n = 1; n + 1 < HERM_P; ++n) {
        hx[n + 1] = 2.0 * u * hx[n] - (2.0 * n) * hx[n - 1];
        hy[n + 1] = 2.0 * w * hy[n] - (2.0 * n) * hy[n - 1];
    }
    dvec sum = (dvec)0.0;
    double en = 1.0;
    for (int n = 0; n < HERM_P; ++n) {
        dvec inner = (dvec)0.0;
        double em = en;
        for (int m = 0; m < HERM_P; ++m) {
            inner += (M[HERM_P * n + m] * em) * hy[m];
            em *= eps;
        }
        sum += hx[n] * inner;
        en *= eps;
    }
    /* tau = sum_{k >= HERM_P} q^k / sqrt(k!) <= its first term / (1 - q / sqrt(HERM_P + 1));
     * head = the same sum over k < HERM_P bounds the terms summed, per coordinate */
    const double q = sqrt(2.0) * eps;
    double first = 1.0, head = 0.0;
    for (int n = 1; n <= HERM_P; ++n) {
        head += first;
        first *= q / sqrt((double)n);
    }
    const double ratio = q / sqrt(HERM_P + 1.0);
    const double tau = ratio < 1.0 ? first / (1.0 - ratio) * (1.0 + 1e-12) : INFINITY;
    const dvec fx = exp_f64x16(-0.5 * u * u), fy = exp_f64x16(-0.5 * w * w);
    const dvec qx = (CRAMER_K * tau) * fx, qy = (CRAMER_K * tau) * fy;
    /* plus the float64 rounding of the moments' prefix sums (count terms) and of the HERM_PP
     * terms (each at most its Cramer bound) */
    const double sum_abs = CRAMER_K * CRAMER_K * head * head;
    *err = qx + (1.0 + qx) * qy + ((count + 4.0 * HERM_PP) * 1.2e-16 * sum_abs) * (fx * fy);
    return (fx * fx) * (fy * fy) * sum;
}

/*
 * The row-block body shared by truncated_blocks (model 1) and truncated_blocks2 (model 2):
 * model2 is a compile-time constant in each, so model 1 never loads weights.
 */
static void blocks_body(
    /* targets, by event index */
    __global const double *td, __global const double *xd, __global const double *yd,
    /* sources sorted by (level, cell, index); coordinates relative to their cell's corner */
    __global const real *st, __global const real *sxr, __global const real *syr,
    __global const real *sw, __global const real *sa, __global const double *std,
    __global const double *pre, __global const double *pre16,
    /* prefix moments of the expansion cells from mc0 (cell_moments) */
    __global const double *mom, __global const int *moff, const int mc0,
    /* cells and grids: level l holds cells [loff[l], loff[l + 1]) of size hs[l], whose
     * sources have densities >= dlo[l]; cell c's sources have densities in [cdlo[c], cdhi[c]],
     * cdlo[c] >= dlo[l] (1 for model 1) */
    __global const long *ckey, __global const int *cbeg, __global const double *cdlo,
    __global const double *cdhi, __global const int *loff, __global const double *hs,
    __global const double *dlo,
    /* levels [0, nbase) are density levels, [nbase, nlevels) their expansion levels */
    const int nlevels, const int nbase,
    const double x0, const double y0,
    /* blocks: LANES event indices each, in time order; ~r marks a padding lane (a copy of
     * row r, evaluated but not stored) */
    __global const int *brow, const int nblocks, const int row0,
    /* bit l of bmask[b]: level l has sources within the reach of block b (else skipped) */
    __global const ulong *bmask,
    /* parameters: kl[l] = the level's cut-off exponent kappa_l, vscale = 1 / (2 sigma_x^2) */
    const real kt, const real kx, const real ktl, const real kxr, const real shift,
    __global const double *kl, const double sigma_t, const double vscale, const double t0, const double inv_sigma_t,
    const int exp_mode, __global double *out_e, __global double *out_tail,
    __global double *out_ring, const int model2, const int amp)
{
    const int b = get_global_id(0);
    if (b >= nblocks) {
        return;
    }
    const int16 rv = ((__global const int16 *)brow)[b]; /* LANES = 16 */
    union lanes ut, ux, uy, ua;
    int rows[LANES], valid[LANES];
#define GATHER_ROW(j, n)                                                                       \
    valid[n] = rv.s##j >= 0;                                                                   \
    rows[n] = valid[n] ? rv.s##j : ~rv.s##j;                                                   \
    ut.a[n] = td[rows[n]];                                                                     \
    ux.a[n] = xd[rows[n]];                                                                     \
    uy.a[n] = yd[rows[n]];
    GATHER_ROW(0, 0) GATHER_ROW(1, 1) GATHER_ROW(2, 2) GATHER_ROW(3, 3)
    GATHER_ROW(4, 4) GATHER_ROW(5, 5) GATHER_ROW(6, 6) GATHER_ROW(7, 7)
    GATHER_ROW(8, 8) GATHER_ROW(9, 9) GATHER_ROW(a, 10) GATHER_ROW(b, 11)
    GATHER_ROW(c, 12) GATHER_ROW(d, 13) GATHER_ROW(e, 14) GATHER_ROW(f, 15)
#undef GATHER_ROW
    int nrows = LANES; /* padding lanes are at the end */
    while (nrows > 1 && !valid[nrows - 1]) {
        --nrows;
    }
    const dvec tn = ut.v, xn = ux.v, yn = uy.v;
    const double t_first = ut.a[0];
    const double xmin = hmin(xn), xmax = hmax(xn), ymin = hmin(yn), ymax = hmax(yn);
    union lanes ut_tail, ur_ring;
    ur_ring.v = (dvec)0.0;
    ut_tail.v = (dvec)0.0;
    ua.v = (dvec)0.0;
    const ulong near = bmask[b];
    for (int lev = 0; lev < nlevels; ++lev) {
        const int ka = loff[lev], kb = loff[lev + 1];
        const int expansion = lev >= nbase; /* of density level lev - nbase */
        if (ka == kb || !((near >> (expansion ? lev - nbase : lev)) & 1UL)) {
            continue;
        }
        const double h = hs[lev], inv_h = 1.0 / h, hq = 0.25 * h, kappa = kl[lev];
        const double vlev = model2 ? vscale * dlo[lev] : vscale;
        const double rch = 1.5 * sqrt(kappa / vlev); /* 1.5 R_l */
        const long ix0 = (long)floor((xmin - rch - x0) * inv_h);
        const long ix1 = (long)floor((xmax + rch - x0) * inv_h);
        const long iy0 = (long)floor((ymin - rch - y0) * inv_h);
        const long iy1 = (long)floor((ymax + rch - y0) * inv_h);
        /* the level's cells in the window: one search per column, from the previous column's
         * position (keys ascend) */
        int c0 = ka;
        for (long ox = ix0; ox <= ix1 && c0 < kb; ++ox) {
            const long kbase = ox * KEY_STRIDE;
            int c = lower_bound_long(ckey, c0, kb, kbase + iy0);
            if (c < kb && ckey[c] >= kbase + KEY_STRIDE / 2) {
                /* no cell in this column: jump to the column of the next cell */
                const long nx = (ckey[c] + KEY_STRIDE / 2) / KEY_STRIDE;
                c0 = c;
                if (nx - 1 > ox) {
                    ox = nx - 1; /* ++ox follows */
                }
                continue;
            }
            const double cxa = x0 + (double)ox * h;
            const dvec gx = gap(xn, cxa, h);
            for (; c < kb && ckey[c] <= kbase + iy1; ++c) {
                const double cya = y0 + (double)(ckey[c] - kbase) * h;
                const dvec gy = gap(yn, cya, h);
                /* the cell's smallest density (>= the level's) scales every distance below */
                const double vs = vscale * cdlo[c];
                const dvec v = (gx * gx + gy * gy) * vs;
                const int cb = cbeg[c], ce = cbeg[c + 1];
                if (hmin(v) >= kappa) { /* ring cell: bound only, each row its own past */
                    if (exp_mode) {
                        union lanes uf;
                        uf.v = exp_neg_upper(v);
                        int er = lower_bound_time(std, cb, ce, t_first);
                        for (int j = 0; j < nrows; ++j) {
                            while (er < ce && std[er] < ut.a[j]) {
                                ++er;
                            }
                            ur_ring.a[j] += uf.a[j] * pre[er + c];
                        }
                    }
                    continue;
                }
                if (expansion && exp_mode) {
                    /* expansion box (one density): its sources up to the last prefix before
                     * the rows by their Hermite series (E lowered by its error bound, twice
                     * that into the tail), the newer ones pair by pair */
                    const int slot = (lower_bound_time(std, cb, ce, t_first) - cb) / HERM_STRIDE;
                    const int s0 = cb + HERM_STRIDE * slot;
                    const double g = pre[s0 + c];
                    if (g > 0.0) {
                        const double sa = sqrt(vs), r = 0.5 * h;
                        __global const double *M =
                            mom + (size_t)HERM_PP * (size_t)(moff[c - mc0] + slot);
                        dvec err;
                        const dvec val = hermite_box(sa * (xn - (cxa + r)), sa * (yn - (cya + r)),
                                                     M, sa * r, s0 - cb, &err);
                        const dvec tf = exp_f64x16(-(tn - t0) * inv_sigma_t) * pow2i((int)shift);
                        ua.v += (val - g * err) * tf;
                        ut_tail.v += (2.0 * g) * err;
                    }
                    const real kxc = kx * (real)cdlo[c];
                    int er = lower_bound_time(std, s0, ce, t_first);
                    for (int j = 0; j < nrows; ++j) {
                        while (er < ce && std[er] < ut.a[j]) {
                            ++er;
                        }
                        if (s0 < er) {
                            ua.a[j] += cdlo[c] * row_sum(s0, er, ut.a[j], ux.a[j] - cxa,
                                                         uy.a[j] - cya, st, sxr, syr, sw, sa,
                                                         kt, kxc, ktl, kxr, shift, 0, amp);
                        }
                    }
                    continue;
                }
                union lanes uf; /* only needed for rows far from the cell */
                uf.v = hmax(v) >= kappa ? exp_neg_upper(v) : (dvec)0.0;
                union lanes uts;
                uts.v = v < kappa ? tn - sigma_t * (kappa - v) : (dvec)INFINITY;
                const double tstart = hmin(uts.v);
                const int s = lower_bound_time(std, cb, ce, tstart);
                /* sources of the cell before s, into the bound of the rows near the cell,
                 * sub-cell by sub-cell: sum_q P_q exp(-v_q), separable exp(-v_q) = fx_a fy_b */
                if (hmax(v) > 0.0 && pre[s + c] > 0.0) {
                    /* not the rows' own cell: four strips across the axis that separates */
                    __global const double *P = pre16 + 16 * (s + c); /* scalars: see hsum8 */
                    dvec sub;
                    if (hmax(gx) > 0.0) {
                        const dvec fy = exp_neg_upper(gy * gy * vs);
#define STRIP(a, p0, p1, p2, p3)                                                               \
    (exp_neg_upper(sq(gap(xn, cxa + (a) * hq, hq)) * vs) * (P[p0] + P[p1] + P[p2] + P[p3]))
                        sub = fy * (STRIP(0.0, 0, 1, 2, 3) + STRIP(1.0, 4, 5, 6, 7) +
                                    STRIP(2.0, 8, 9, 10, 11) + STRIP(3.0, 12, 13, 14, 15));
#undef STRIP
                    } else {
                        const dvec fx = exp_neg_upper(gx * gx * vs);
#define STRIP(b, p0, p1, p2, p3)                                                               \
    (exp_neg_upper(sq(gap(yn, cya + (b) * hq, hq)) * vs) * (P[p0] + P[p1] + P[p2] + P[p3]))
                        sub = fx * (STRIP(0.0, 0, 4, 8, 12) + STRIP(1.0, 1, 5, 9, 13) +
                                    STRIP(2.0, 2, 6, 10, 14) + STRIP(3.0, 3, 7, 11, 15));
#undef STRIP
                    }
                    if (!exp_mode) {
                        sub *= exp_neg_upper((tn - tstart) * inv_sigma_t);
                    }
                    ut_tail.v += v < kappa ? sub : (dvec)0.0;
                } else if (hmax(v) == 0.0 && pre[s + c] > 0.0) {
                    __global const double *P = pre16 + 16 * (s + c); /* scalars: see hsum8 */
                    const dvec fy0 = exp_neg_upper(sq(gap(yn, cya, hq)) * vs);
                    const dvec fy1 = exp_neg_upper(sq(gap(yn, cya + hq, hq)) * vs);
                    const dvec fy2 = exp_neg_upper(sq(gap(yn, cya + 2.0 * hq, hq)) * vs);
                    const dvec fy3 = exp_neg_upper(sq(gap(yn, cya + 3.0 * hq, hq)) * vs);
#define SUBROW(a, p0, p1, p2, p3)                                                              \
    (exp_neg_upper(sq(gap(xn, cxa + (a) * hq, hq)) * vs) *                                    \
     (P[p0] * fy0 + P[p1] * fy1 + P[p2] * fy2 + P[p3] * fy3))
                    dvec sub = SUBROW(0.0, 0, 1, 2, 3) + SUBROW(1.0, 4, 5, 6, 7) +
                               SUBROW(2.0, 8, 9, 10, 11) + SUBROW(3.0, 12, 13, 14, 15);
#undef SUBROW
                    if (!exp_mode) { /* plain weights: the sources are older than tstart */
                        sub *= exp_neg_upper((tn - tstart) * inv_sigma_t);
                    }
                    ut_tail.v += v < kappa ? sub : (dvec)0.0;
                }
                /* one density in the cell (model 2): the model-1 sum at its scale, times it */
                const int uni = model2 && cdhi[c] == cdlo[c];
                const real kxc = uni ? kx * (real)cdlo[c] : kx;
                /* row by row (rows in time order share the searches): [s, e_j) exactly */
                int er = lower_bound_time(std, s, ce, t_first);
                for (int j = 0; j < nrows; ++j) {
                    while (er < ce && std[er] < ut.a[j]) {
                        ++er;
                    }
                    if (uts.a[j] == INFINITY) { /* row far from the cell: all bounded */
                        /* er = max(s, e_j): a row older than s has its own e_j before it */
                        const int ej = er > s ? er : lower_bound_time(std, cb, s, ut.a[j]);
                        ut_tail.a[j] += uf.a[j] * pre[ej + c];
                        continue;
                    }
                    if (s >= er) {
                        continue;
                    }
                    const double xr = ux.a[j] - cxa, yr = uy.a[j] - cya;
                    if (uni) {
                        ua.a[j] += cdlo[c] * row_sum(s, er, ut.a[j], xr, yr, st, sxr, syr, sw,
                                                     sa, kt, kxc, ktl, kxr, shift, 0, amp);
                    } else {
                        ua.a[j] += row_sum(s, er, ut.a[j], xr, yr, st, sxr, syr, sw, sa, kt,
                                           kx, ktl, kxr, shift, model2, amp);
                    }
                }
            }
            c0 = c;
        }
    }
    union lanes us, ur;
    us.v = ut_tail.v * (exp_mode ? exp_neg_upper((tn - t0) * inv_sigma_t) : (dvec)1.0);
    ur.v = ur_ring.v * exp_neg_upper((tn - t0) * inv_sigma_t);
    for (int j = 0; j < nrows; ++j) {
        const int r = rows[j] - row0;
        out_e[r] = ua.a[j];
        out_tail[r] = us.a[j];
        out_ring[r] = exp_mode ? ur.a[j] : 0.0;
    }
}

#define BLOCKS_KERNEL(name, model2, amp)                                                       \
    __kernel void name(__global const double *td, __global const double *xd,                  \
                       __global const double *yd, __global const real *st,                    \
                       __global const real *sxr, __global const real *syr,                    \
                       __global const real *sw, __global const real *sa,                      \
                       __global const double *std,                                            \
                       __global const double *pre, __global const double *pre16,              \
                       __global const double *mom, __global const int *moff, const int mc0,   \
                       __global const long *ckey, __global const int *cbeg,                   \
                       __global const double *cdlo, __global const double *cdhi,              \
                       __global const int *loff,                                              \
                       __global const double *hs, __global const double *dlo,                 \
                       const int nlevels, const int nbase, const double x0, const double y0,  \
                       __global const int *brow, const int nblocks, const int row0,           \
                       __global const ulong *bmask, const real kt, const real kx,             \
                       const real ktl, const real kxr, const real shift,                      \
                       __global const double *kl,                                             \
                       const double sigma_t, const double vscale, const double t0,            \
                       const double inv_sigma_t, const int exp_mode, __global double *out_e,  \
                       __global double *out_tail, __global double *out_ring)                  \
    {                                                                                          \
        blocks_body(td, xd, yd, st, sxr, syr, sw, sa, std, pre, pre16, mom, moff, mc0, ckey,   \
                    cbeg,                                                                      \
                    cdlo, cdhi, loff, hs, dlo, nlevels, nbase, x0, y0, brow, nblocks, row0,    \
                    bmask, kt, kx, ktl, kxr, shift, kl, sigma_t, vscale, t0, inv_sigma_t,      \
                    exp_mode, out_e, out_tail, out_ring, model2, amp);                         \
    }

/* model 1: one level, unit weights */
BLOCKS_KERNEL(truncated_blocks, 0, 0)
/* model 2: one level per density band, weights and scales D_m */
BLOCKS_KERNEL(truncated_blocks2, 1, 0)
/* the same with each source's amplitude sa_m (model.edge: renormalized; sa unread above) */
BLOCKS_KERNEL(truncated_scaled, 0, 1)
BLOCKS_KERNEL(truncated_scaled2, 1, 1)

/*
 * The bound's far part and the pass's result on the device (hawkes_cli/engine/pass_bound.py,
 * DeviceBound), exponential prefixes only (the host guarantees no overflow of g), float64:
 *     g_m   = w_m lfac[lvl_m] exp((t_m - t0) / sigma_t)     (sources in time order)
 *     cum_j = sum_{m < j} g_m                                (j = 0 .. n)
 *     far_n = cum[lo_n] exp(-(t_n - t0) / sigma_t)
 * as a scan in three launches: far_chunks sums each chunk of `chunk` sources in order into
 * tot[c] and keeps g; far_offsets (one work-item) turns tot into the chunks' exclusive prefixes
 * and tot[nchunks] into the total; far_prefix writes cum. The association is fixed by `chunk`
 * alone, so every launch on a device gives the same sums. pass_bound then makes each row's
 * E~_n = e_n escale and omega_n = norm (tail_n + (ring_n + far_n)) safety (ring_n unread
 * without with_ring), the host's operations in its order, none contracted.
 */
__kernel void far_chunks(__global const double *td, __global const double *w,
                         __global const int *lvl, __global const double *lfac, const int n,
                         const int chunk, const double t0, const double inv_sigma_t,
                         __global double *g, __global double *tot)
{
#pragma OPENCL FP_CONTRACT OFF
    const int c = get_global_id(0);
    const int k0 = c * chunk;
    if (k0 >= n) {
        return;
    }
    const int k1 = min(k0 + chunk, n);
    double acc = 0.0;
    for (int k = k0; k < k1; ++k) {
        double v = w[k] * lfac[lvl[k]];
        v *= exp_f64((td[k] - t0) * inv_sigma_t);
        g[k] = v;
        acc += v;
    }
    tot[c] = acc;
}

__kernel void far_offsets(__global double *tot, const int nchunks)
{
    if (get_global_id(0) != 0) {
        return;
    }
    double acc = 0.0;
    for (int c = 0; c < nchunks; ++c) {
        const double v = tot[c];
        tot[c] = acc;
        acc += v;
    }
    tot[nchunks] = acc;
}

__kernel void far_prefix(__global const double *g, __global const double *tot, const int n,
                         const int chunk, __global double *cum)
{
    const int c = get_global_id(0);
    const int k0 = c * chunk;
    if (k0 >= n) {
        return;
    }
    const int k1 = min(k0 + chunk, n);
    double acc = tot[c];
    for (int k = k0; k < k1; ++k) {
        cum[k] = acc;
        acc += g[k];
    }
    if (k1 == n) {
        cum[n] = acc;
    }
}

__kernel void pass_bound(__global const double *e, __global const double *tail,
                         __global const double *ring, __global const double *cum,
                         __global const int *lo, __global const double *td, const int row0,
                         const int rows, const int with_ring, const double t0,
                         const double inv_sigma_t, const double escale, const double norm,
                         const double safety, __global double *out_e,
                         __global double *out_omega)
{
#pragma OPENCL FP_CONTRACT OFF
    const int r = get_global_id(0);
    if (r >= rows) {
        return;
    }
    const int n = row0 + r;
    double far = cum[lo[n]];
    far *= exp_f64(-((td[n] - t0) * inv_sigma_t));
    const double rest = with_ring ? ring[r] + far : far;
    double omega = norm * (tail[r] + rest);
    omega *= safety;
    out_e[r] = e[r] * escale;
    out_omega[r] = omega;
}
