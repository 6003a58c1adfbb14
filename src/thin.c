/* Offline greedy thinning (DESIGN.md, "Greedy Stein thinning"): Stein
 * thinning (Riabiz et al. 2022), its gradient-free variant (Fisher et al.
 * 2021) and MMD thinning / kernel herding.  O(n m) kernel evaluations and
 * O(n) memory: never an n x m or n x n matrix. */
#include <limits.h>
#include <stdint.h>
#include "stein.h"
#include "args.h"
#include "runtime.h"
#include "callback.h"
#include "entries.h"

typedef struct {
    const kb_kernel *K;
    const double *X, *S;   /* n x d points and scores (S NULL: base kernel) */
    R_xlen_t n;
    const double *ew;      /* gradient-free weights exp(w_i), or NULL */
    /* a linear term: at step j (0-based) the objective of point i is
     * obj_i - lin_coef (j + 1) lin_i; MMD: the mean embedding, lin_coef 2;
     * regularised Stein thinning: log p, lin_coef lambda.  Or NULL. */
    const double *lin;
    double lin_coef;
    /* regularised Stein thinning: the Laplacian term added to the
     * diagonal (obj holds it; the gains leave it out), or NULL */
    const double *lap;
} greedy_problem;

/* First i in [0, n) with a non-finite obj_i, or -1. */
static R_xlen_t first_nonfinite_obj(const double *obj, R_xlen_t n)
{
    for (R_xlen_t i = 0; i < n; i++)
        if (!R_FINITE(obj[i]))
            return i;
    return -1;
}

/* First index of the smallest obj_i - coef lin_i over eligible i in
 * [i0, i1): the rule, applied as such to a range where an obj_i overflowed
 * (step_range() below finds the same index otherwise). */
static R_xlen_t local_argmin(const greedy_problem *g, const double *obj,
                             const int *taken, double coef, R_xlen_t i0,
                             R_xlen_t i1, double *best)
{
    R_xlen_t bi = -1;
    double bv = R_PosInf;
    for (R_xlen_t i = i0; i < i1; i++) {
        if (taken && taken[i])
            continue;
        double v = g->lin ? obj[i] - coef * g->lin[i] : obj[i];
        if (v < bv || bi < 0) {
            bv = v;
            bi = i;
        }
    }
    *best = bv;
    return bi;
}

/* Second pass, only after the objective of point i overflowed at step j
 * (after the points idx[0..j-1] were added): find the first non-finite
 * term, the diagonal k(x_i, x_i) [e^{2 w_i}] first, and raise its error.
 * Called outside the parallel region. */
static void NORET locate_overflow(const greedy_problem *g, R_xlen_t i,
                                  const int *idx, int j)
{
    const int d = g->K->d;
    R_xlen_t n = g->n;
    const char *what = g->S ? "Stein kernel" : "kernel";
    double *xi = (double *) R_alloc((size_t) 2 * d, sizeof(double)),
        *si = xi + d, kv;
    kb_get_row(g->X, n, i, d, xi);
    if (g->S) {
        kb_get_row(g->S, n, i, d, si);
        kv = kb_stein_diag(g->K, si);
    } else {
        kv = kb_phi_zero(g->K);
    }
    for (int l = -1; l < j; l++) {
        R_xlen_t o = l < 0 ? i : idx[l];
        if (l >= 0) {
            if (g->S)
                kb_stein_row(g->K, xi, si, &(kb_points) {g->X, g->S, n}, o,
                             o + 1, &kv);
            else
                kb_kernel_row(g->K, xi, g->X, n, o, o + 1, &kv);
        }
        double a = (double) (i < o ? i : o) + 1,
            b = (double) (i < o ? o : i) + 1;
        if (!R_FINITE(kv))
            kb_error_numeric(_("the %s of rows %.0f and %.0f overflows (%s): "
                               "scale the data or the kernel"), what, a, b,
                             ISNAN(kv) ? "NaN" : (kv > 0 ? "Inf" : "-Inf"));
        if (g->ew && !R_FINITE(kv * (g->ew[i] * g->ew[o])))
            kb_error_numeric(_("the %s of rows %.0f and %.0f times the weights "
                               "exp(w_i + w_j) overflows: the log weights "
                               "log q - log p span too much; set 'range_cap'"),
                             what, a, b);
    }
    kb_error_numeric(_("the greedy objective of row %.0f overflows after %d "
                       "selected points (its terms are finite but too large "
                       "to add): scale the data or the kernel"),
                     (double) i + 1, j);
}

/* One greedy step over the eligible points, in nth contiguous ranges (in
 * parallel): add the last selected point's row to obj (when last >= 0),
 * then each range's first smallest obj_i - coef lin_i.  The ranges depend on
 * nth only and the minima are combined in range order, so the selection
 * does not depend on the number of threads. */
typedef struct {
    const greedy_problem *g;
    const int *taken;
    double *xl, *sl;          /* the last selected point and its score */
    double ewl, coef;
    R_xlen_t last;
    int nth;                  /* ranges */
    R_xlen_t *ti;             /* per range: first index of the minimum, */
    double *tv;               /* the minimum, */
    int *tb;                  /* and whether an obj_i overflowed */
} greedy_step;

/* One block of a step, the m <= KB_BLOCK points i.. : obj_i +=
 * 2 k(x_i, x_last) [e^{w_i + w_last}] with the kernel values in buf (NULL:
 * no point to add), then the smallest obj_i - coef lin_i over the block's
 * eligible points (taken ones count as +Inf), returned.  *bad becomes
 * non-zero if an updated obj_i is not finite (an overflow): o - o is 0 for
 * a finite o and NaN otherwise; an OR of the tests (64 bits, as wide as a
 * double) vectorises without a chain of additions. */
static KB_ALWAYS_INLINE double block_step_body(const greedy_step *st,
                                               const double *buf, R_xlen_t i,
                                               int m, double *obj,
                                               int64_t *bad)
{
    const greedy_problem *g = st->g;
    double *o = obj + i, bm = R_PosInf;
    int64_t z = 0;
    if (buf && g->ew) {
        const double *e = g->ew + i, ewl = st->ewl;
#pragma omp simd reduction(|:z)
        for (int t = 0; t < m; t++) {
            double v = o[t] + 2.0 * buf[t] * (e[t] * ewl);
            o[t] = v;
            z |= !(v - v == 0.0);
        }
    } else if (buf) {
#pragma omp simd reduction(|:z)
        for (int t = 0; t < m; t++) {
            double v = o[t] + 2.0 * buf[t];
            o[t] = v;
            z |= !(v - v == 0.0);
        }
    }
    const int *tk = st->taken ? st->taken + i : NULL;
    const double inf = R_PosInf;
    if (g->lin && tk) {
        const double *ln = g->lin + i, coef = st->coef;
#pragma omp simd reduction(min:bm)
        for (int t = 0; t < m; t++) {
            double v = o[t] - coef * ln[t];
            v = tk[t] ? inf : v;
            bm = v < bm ? v : bm;
        }
    } else if (g->lin) {
        const double *ln = g->lin + i, coef = st->coef;
#pragma omp simd reduction(min:bm)
        for (int t = 0; t < m; t++) {
            double v = o[t] - coef * ln[t];
            bm = v < bm ? v : bm;
        }
    } else if (tk) {
#pragma omp simd reduction(min:bm)
        for (int t = 0; t < m; t++) {
            double v = tk[t] ? inf : o[t];
            bm = v < bm ? v : bm;
        }
    } else {
#pragma omp simd reduction(min:bm)
        for (int t = 0; t < m; t++)
            bm = o[t] < bm ? o[t] : bm;
    }
    *bad |= z;
    return bm;
}

#if KB_AVX2
/* block_step_body() in AVX2 (no FMA: the same results) */
KB_TARGET_AVX2 static double block_step_avx2(const greedy_step *st,
                                             const double *buf, R_xlen_t i,
                                             int m, double *obj, int64_t *bad)
{
    return block_step_body(st, buf, i, m, obj, bad);
}
#endif

static double block_step(const greedy_step *st, const double *buf,
                         R_xlen_t i, int m, double *obj, int64_t *bad)
{
#if KB_AVX2
    if (kb_have_avx2())
        return block_step_avx2(st, buf, i, m, obj, bad);
#endif
    return block_step_body(st, buf, i, m, obj, bad);
}

/* A step over the range [i0, i1) of points: the last selected point's row
 * added (when last >= 0), block by block (the block in cache for the
 * minimum), and the first index of the smallest obj_i - coef lin_i over
 * eligible i, with the minimum in *best.  A block's first index of its
 * minimum is looked for only when the minimum beats the blocks before it
 * (strictly: the first index among equal minima).  *flagged: an obj_i
 * overflowed; then local_argmin()'s rule is applied as such (a NaN is never
 * the minimum).  Otherwise every eligible obj_i is finite (the initial
 * objective is checked, and an overflow stays non-finite), lin and coef
 * are finite, so obj_i - coef lin_i is never NaN, and an infinite one is
 * found as local_argmin() finds it. */
static R_xlen_t step_range(const greedy_step *st, double *obj, R_xlen_t i0,
                           R_xlen_t i1, double *best, int *flagged)
{
    const greedy_problem *g = st->g;
    const int *taken = st->taken;
    double buf[KB_BLOCK], bv = R_PosInf;
    int64_t bad = 0;
    R_xlen_t bi = -1;
    for (R_xlen_t i = i0; i < i1; i += KB_BLOCK) {
        int m = (int) (i1 - i < KB_BLOCK ? i1 - i : KB_BLOCK);
        if (st->last >= 0) {
            if (g->S)
                kb_stein_row(g->K, st->xl, st->sl,
                             &(kb_points) {g->X, g->S, g->n}, i, i + m, buf);
            else
                kb_kernel_row(g->K, st->xl, g->X, g->n, i, i + m, buf);
        }
        double bm = block_step(st, st->last >= 0 ? buf : NULL, i, m, obj,
                               &bad);
        /* all eligible values +Inf so far: the first eligible point */
        if (bm < bv || (bi < 0 && bm == R_PosInf)) {
            for (int t = 0; t < m; t++) {
                if (taken && taken[i + t])
                    continue;
                double v = g->lin ? obj[i + t] - st->coef * g->lin[i + t] :
                    obj[i + t];
                if (v == bm) {
                    bi = i + t;
                    bv = bm;
                    break;
                }
            }
        }
    }
    *flagged = bad != 0;
    if (bad)
        return local_argmin(g, obj, taken, st->coef, i0, i1, best);
    *best = bv;
    return bi;
}

/* The step's selection (-1: none); *flagged: an obj_i overflowed. */
static R_xlen_t greedy_argmin(const greedy_step *st, double *obj,
                              int *flagged)
{
    const int nth = st->nth;
    R_xlen_t n = st->g->n;
#pragma omp parallel for num_threads(nth) schedule(static, 1)
    for (int t = 0; t < nth; t++) {
        R_xlen_t i0 = n * t / nth, i1 = n * (t + 1) / nth;
        st->ti[t] = step_range(st, obj, i0, i1, st->tv + t, st->tb + t);
    }
    R_xlen_t bi = -1;
    double bv = R_PosInf;
    *flagged = 0;
    for (int t = 0; t < nth; t++) {
        *flagged |= st->tb[t];
        /* strict <: the first index among equal minima */
        if (st->ti[t] >= 0 && (bi < 0 || st->tv[t] < bv)) {
            bv = st->tv[t];
            bi = st->ti[t];
        }
    }
    return bi;
}

/* After an overflow: name the first eligible point whose objective it
 * reached.  Without repeats a selected point's objective is never read
 * again: its overflow is harmless and reset to 0 (the step's minimum, over
 * eligible points only, stands). */
static void greedy_overflow(const greedy_problem *g, const int *taken,
                            double *obj, const int *idx, int j)
{
    for (R_xlen_t i = 0; i < g->n; i++)
        if (!R_FINITE(obj[i])) {
            if (taken && taken[i])
                obj[i] = 0.0;
            else
                locate_overflow(g, i, idx, j);
        }
}

/* The greedy loop.  obj must hold the diagonal terms on entry.  Writes the
 * 0-based selection into idx and, for each step, obj at the selected point
 * before its own row is added (the increase of the sum over the selected
 * set), into gain.  An objective that overflows is an error naming the
 * pair of rows. */
static void greedy(const greedy_problem *g, int m, int unique, int nt,
                   double *obj, int *idx, double *gain, kb_progress *prog)
{
    const int d = g->K->d;
    R_xlen_t n = g->n;
    double per = (double) n * (g->S ? KB_STEIN_WORK(d) : KB_KERNEL_WORK(d));
    int *taken = unique ? (int *) R_alloc((size_t) n, sizeof(int)) : NULL;
    if (taken)
        memset(taken, 0, (size_t) n * sizeof(int));
    double *xl = (double *) R_alloc((size_t) 2 * d, sizeof(double));
    greedy_step st = {g, taken, xl, xl + d, 1.0, 0.0, -1, 1,
                      (R_xlen_t *) R_alloc((size_t) nt, sizeof(R_xlen_t)),
                      (double *) R_alloc((size_t) nt, sizeof(double)),
                      (int *) R_alloc((size_t) nt, sizeof(int))};
    kb_ticker tick = KB_TICKER_INIT;
    for (int j = 0; j < m; j++) {
        /* a region per step: its team follows the machine's load from step
         * to step (runtime.h, KB_PAR_MIN_STEP) */
        st.nth = kb_threads_min(nt, per, KB_PAR_MIN_STEP);
        st.coef = g->lin_coef * (j + 1);
        if (st.last >= 0) {
            kb_get_row(g->X, n, st.last, d, st.xl);
            if (g->S)
                kb_get_row(g->S, n, st.last, d, st.sl);
            st.ewl = g->ew ? g->ew[st.last] : 1.0;
        }
        int flagged;
        R_xlen_t bi = greedy_argmin(&st, obj, &flagged);
        if (flagged)
            greedy_overflow(g, taken, obj, idx, j);
        if (bi < 0)
            KB_INTERNAL("no point left to select");
        idx[j] = (int) bi;
        gain[j] = g->lap ? obj[bi] - g->lap[bi] : obj[bi];
        if (taken)
            taken[bi] = 1;
        st.last = bi;
        if (kb_tick(&tick, per))
            kb_progress_report(prog, j + 1.0, NA_REAL, NA_REAL, 0);
    }
    kb_progress_report(prog, (double) m, NA_REAL, NA_REAL, 1);
}

/* Entry arguments: at least one point (row) and one coordinate. */
static void thin_nonempty(int n, int d, const char *what)
{
    if (n < 1 || d < 1)
        kb_error_arg(_("'%s' must have at least one row "
                       "and one column"), what);
}

/* m and unique; m is at most n without repeats. */
static int thin_m(SEXP m_, SEXP unique_, int n, int *unique)
{
    int m = kb_scalar_int(m_, "m");
    *unique = kb_scalar_flag(unique_, "unique");
    if (m < 1 || (*unique && m > n))
        kb_error_arg(_("'m' must be between 1 and %d"),
                     *unique ? n : INT_MAX);
    return m;
}

/* Run the greedy loop on obj (the diagonal terms) and return
 * list(index (1-based), gain[, mu]); progress: a function(i, size, ksd) or
 * NULL. */
static SEXP thin_run(const greedy_problem *g, int m, int unique, int nt,
                     double *obj, SEXP mu, SEXP progress)
{
    int *idx = (int *) R_alloc((size_t) m, sizeof(int));
    double *gain = (double *) R_alloc((size_t) m, sizeof(double));
    kb_progress prog;
    kb_progress_init(&prog, progress);
    greedy(g, m, unique, nt, obj, idx, gain, &prog);
    const char *nms[] = {"index", "gain", mu == R_NilValue ? "" : "mu", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP ix = Rf_allocVector(INTSXP, m);
    SET_VECTOR_ELT(ans, 0, ix);
    for (int j = 0; j < m; j++)
        INTEGER(ix)[j] = idx[j] + 1;
    SEXP gn = Rf_allocVector(REALSXP, m);
    SET_VECTOR_ELT(ans, 1, gn);
    memcpy(REAL(gn), gain, (size_t) m * sizeof(double));
    if (mu != R_NilValue)
        SET_VECTOR_ELT(ans, 2, mu);
    UNPROTECT(1);
    return ans;
}

/* The diagonal terms k_p(x_i, x_i) [e^{2 w_i}] [+ lap_i] of Stein thinning;
 * an error naming the row when one overflows. */
static double *stein_thin_diag(const greedy_problem *g)
{
    const int d = g->K->d;
    double *obj = (double *) R_alloc((size_t) g->n, sizeof(double));
    double *si = (double *) R_alloc((size_t) d, sizeof(double));
    for (R_xlen_t i = 0; i < g->n; i++) {
        kb_get_row(g->S, g->n, i, d, si);
        obj[i] = kb_stein_diag(g->K, si);
        if (g->ew)
            obj[i] *= g->ew[i] * g->ew[i];
        if (g->lap)
            obj[i] += g->lap[i];
    }
    R_xlen_t bad = first_nonfinite_obj(obj, g->n);
    if (bad >= 0)
        locate_overflow(g, bad, NULL, 0);
    return obj;
}

/* .Call entry: greedy Stein thinning.  ctl: a named list with (each may be
 * NULL) w, the gradient-free log weights (shifted to minimum 0 by the R
 * layer); and for regularised Stein thinning (Benard et al. 2023) lap, the
 * Laplacian term of each point, logp, its log density, and lambda. */
SEXP kb_stein_thin(SEXP x, SEXP s, SEXP kern, SEXP m_, SEXP unique_, SEXP ctl,
                   SEXP nthreads, SEXP progress)
{
    int n, d, unique;
    kb_arg_points(x, s, "x", "score", &n, &d);
    thin_nonempty(n, d, "x");
    int m = thin_m(m_, unique_, n, &unique), nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    if (TYPEOF(ctl) != VECSXP)
        kb_error_arg(_("'ctl' must be a named list"));
    SEXP w = kb_list_elt(ctl, "w"), lap = kb_list_elt(ctl, "lap"),
        logp = kb_list_elt(ctl, "logp"), lambda = kb_list_elt(ctl, "lambda");
    double *ew = NULL;
    if (w != R_NilValue) {
        const double *wv = kb_arg_vector(w, "w", n);
        ew = (double *) R_alloc((size_t) n, sizeof(double));
        for (int i = 0; i < n; i++)
            ew[i] = exp(wv[i]);
    }
    const double *lp = lap == R_NilValue ? NULL : kb_arg_vector(lap, "lap", n);
    const double *lg = logp == R_NilValue ? NULL :
        kb_arg_vector(logp, "logp", n);
    double lam = lg ? kb_scalar_real(lambda, "lambda") : 0.0;
    if ((lp && kb_first_nonfinite(lp, n) >= 0) ||
        (lg && kb_first_nonfinite(lg, n) >= 0))
        kb_error_arg(_("'lap' and 'logp' must be finite"));
    greedy_problem g = {&K, REAL(x), REAL(s), n, ew, lg, lam, lp};
    return thin_run(&g, m, unique, nt, stein_thin_diag(&g), R_NilValue,
                    progress);
}

/* .Call entry: MMD thinning (kernel herding on the sample).  xe holds the
 * rows the mean embedding is computed on.  Also returns the embedding mu at
 * every row. */
SEXP kb_mmd_thin(SEXP x, SEXP xe, SEXP kern, SEXP m_, SEXP unique_,
                 SEXP nthreads, SEXP progress)
{
    int n = kb_arg_matrix(x, "x", -1, -1), d = Rf_ncols(x), unique;
    thin_nonempty(n, d, "x");
    int ne = kb_arg_matrix(xe, "xe", -1, d);
    thin_nonempty(ne, d, "xe");
    int m = thin_m(m_, unique_, n, &unique), nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    SEXP mu = PROTECT(Rf_allocVector(REALSXP, n));
    /* the mean embedding mu_i = mean_l k(x_i, xe_l) */
    kb_kernel_rows q = {&K, REAL(xe), REAL(x), ne, n, NULL, REAL(mu)};
    kb_kernel_rows_run(&q, nt);
    greedy_problem g = {&K, REAL(x), NULL, n, NULL, REAL(mu), 2.0, NULL};
    double *obj = (double *) R_alloc((size_t) n, sizeof(double));
    double k0 = kb_phi_zero(&K);
    for (int i = 0; i < n; i++)
        obj[i] = k0;
    SEXP ans = thin_run(&g, m, unique, nt, obj, mu, progress);
    UNPROTECT(1);
    return ans;
}
