/* Offline greedy thinning (DESIGN.md, "Greedy Stein thinning"): Stein
 * thinning (Riabiz et al. 2022), its gradient-free variant (Fisher et al.
 * 2021) and MMD thinning / kernel herding.  O(n m) kernel evaluations and
 * O(n) memory: never an n x m or n x n matrix. */
#include <limits.h>
#include "stein.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const kb_kernel *K;
    const double *X, *S;   /* n x d points and scores (S NULL: base kernel) */
    R_xlen_t n;
    const double *ew;      /* gradient-free weights exp(w_i), or NULL */
    const double *mu;      /* MMD: mean embedding at each point, or NULL */
} greedy_problem;

/* obj_i += 2 k(x_i, x_last) [e^{w_i + w_last}] for i in [i0, i1).
 * Returns 1 if an updated obj_i is not finite (an overflow), else 0: o - o
 * is 0 for a finite o and NaN otherwise, and its sum vectorises (omp simd
 * may reorder the reduction, never fold o - o), so the check costs next to
 * nothing in the loop that already touches obj. */
static int add_point(const greedy_problem *g, const double *xl,
                     const double *sl, double ewl, R_xlen_t i0, R_xlen_t i1,
                     double *obj)
{
    double buf[KB_BLOCK], z = 0.0;
    for (R_xlen_t i = i0; i < i1; i += KB_BLOCK) {
        int m = (int) (i1 - i < KB_BLOCK ? i1 - i : KB_BLOCK);
        if (g->S)
            kb_stein_row(g->K, xl, sl, g->X, g->S, g->n, i, i + m, buf);
        else
            kb_kernel_row(g->K, xl, g->X, g->n, i, i + m, buf);
        double *o = obj + i;
        if (g->ew) {
            const double *e = g->ew + i;
#pragma omp simd reduction(+:z)
            for (int t = 0; t < m; t++) {
                double v = o[t] + 2.0 * buf[t] * (e[t] * ewl);
                o[t] = v;
                z += v - v;
            }
        } else {
#pragma omp simd reduction(+:z)
            for (int t = 0; t < m; t++) {
                double v = o[t] + 2.0 * buf[t];
                o[t] = v;
                z += v - v;
            }
        }
    }
    return !(z == 0.0);
}

/* First i in [0, n) with a non-finite obj_i, or -1. */
static R_xlen_t first_nonfinite_obj(const double *obj, R_xlen_t n)
{
    for (R_xlen_t i = 0; i < n; i++)
        if (!R_FINITE(obj[i]))
            return i;
    return -1;
}

/* First index of the smallest obj_i - coef mu_i over eligible i in [i0, i1). */
static R_xlen_t local_argmin(const greedy_problem *g, const double *obj,
                             const int *taken, double coef, R_xlen_t i0,
                             R_xlen_t i1, double *best)
{
    R_xlen_t bi = -1;
    double bv = R_PosInf;
    for (R_xlen_t i = i0; i < i1; i++) {
        if (taken && taken[i])
            continue;
        double v = g->mu ? obj[i] - coef * g->mu[i] : obj[i];
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
        *si = xi + d, kv, p1, p2, zero = 0.0;
    kb_get_row(g->X, n, i, d, xi);
    if (g->S) {
        kb_get_row(g->S, n, i, d, si);
        kv = kb_stein_diag(g->K, si);
    } else {
        kb_phi_block(g->K, 1, &zero, &kv, &p1, &p2);
    }
    for (int l = -1; l < j; l++) {
        R_xlen_t o = l < 0 ? i : idx[l];
        if (l >= 0) {
            if (g->S)
                kb_stein_row(g->K, xi, si, g->X, g->S, n, o, o + 1, &kv);
            else
                kb_kernel_row(g->K, xi, g->X, n, o, o + 1, &kv);
        }
        double a = (double) (i < o ? i : o) + 1, b = (double) (i < o ? o : i) + 1;
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

/* The greedy loop.  obj must hold the diagonal terms on entry.  Writes the
 * 0-based selection into idx and, for each step, obj at the selected point
 * before its own row is added (the increase of the sum over the selected
 * set), into gain.  An objective that overflows is an error naming the
 * pair of rows. */
static void greedy(const greedy_problem *g, int m, int unique, int nt,
                   double *obj, int *idx, double *gain)
{
    const int d = g->K->d;
    R_xlen_t n = g->n;
    int *taken = unique ? (int *) R_alloc((size_t) n, sizeof(int)) : NULL;
    if (taken)
        memset(taken, 0, (size_t) n * sizeof(int));
    double *xl = (double *) R_alloc((size_t) 2 * d, sizeof(double)),
        *sl = xl + d;
    double *tv = (double *) R_alloc((size_t) nt, sizeof(double));
    R_xlen_t *ti = (R_xlen_t *) R_alloc((size_t) nt, sizeof(R_xlen_t)),
        *tb = (R_xlen_t *) R_alloc((size_t) nt, sizeof(R_xlen_t));
    R_xlen_t last = -1, since_check = 0;
    for (int j = 0; j < m; j++) {
        double ewl = 1.0, coef = 2.0 * (j + 1);
        if (last >= 0) {
            kb_get_row(g->X, n, last, d, xl);
            if (g->S)
                kb_get_row(g->S, n, last, d, sl);
            if (g->ew)
                ewl = g->ew[last];
        }
        for (int t = 0; t < nt; t++) {
            ti[t] = tb[t] = -1;
            tv[t] = R_PosInf;
        }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (n >= KB_PAR_MIN_EVALS / 8)
#endif
        {
            int tid = 0, nth = 1;
#ifdef _OPENMP
            tid = omp_get_thread_num();
            nth = omp_get_num_threads();
#endif
            R_xlen_t i0 = n * tid / nth, i1 = n * (tid + 1) / nth;
            if (last >= 0)
                tb[tid] = add_point(g, xl, sl, ewl, i0, i1, obj);
            ti[tid] = local_argmin(g, obj, taken, coef, i0, i1, tv + tid);
        }
        /* an overflow: name the first eligible point whose objective it
         * reached.  Without repeats a selected point's objective is never
         * read again: its overflow is harmless and reset to 0. */
        int flagged = 0;
        for (int t = 0; t < nt; t++)
            flagged |= tb[t] > 0;
        if (flagged)
            for (R_xlen_t i = 0; i < n; i++)
                if (!R_FINITE(obj[i])) {
                    if (taken && taken[i])
                        obj[i] = 0.0;
                    else
                        locate_overflow(g, i, idx, j);
                }
        /* ranges are in thread order, so strict < keeps the first index */
        R_xlen_t bi = -1;
        double bv = R_PosInf;
        for (int t = 0; t < nt; t++)
            if (ti[t] >= 0 && (bi < 0 || tv[t] < bv)) {
                bv = tv[t];
                bi = ti[t];
            }
        if (bi < 0)
            KB_INTERNAL("no point left to select");
        idx[j] = (int) bi;
        gain[j] = obj[bi];
        if (taken)
            taken[bi] = 1;
        last = bi;
        since_check += n;
        if (since_check > ((R_xlen_t) 1 << 22)) {
            R_CheckUserInterrupt();
            since_check = 0;
        }
    }
}

static void check_thin_points(SEXP x, SEXP s, int *n, int *d)
{
    if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x))
        Rf_error(_("'x' must be a numeric matrix"));
    *n = Rf_nrows(x);
    *d = Rf_ncols(x);
    if (s != R_NilValue && (TYPEOF(s) != REALSXP || !Rf_isMatrix(s) ||
                            Rf_nrows(s) != *n || Rf_ncols(s) != *d))
        Rf_error(_("'score' must be a numeric matrix with the dimensions of 'x'"));
    if (*n < 1 || *d < 1)
        Rf_error(_("'x' must have at least one row and one column"));
}

static SEXP thin_result(int m, const int *idx, const double *gain)
{
    const char *nms[] = {"index", "gain", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP ix = Rf_allocVector(INTSXP, m);
    SET_VECTOR_ELT(ans, 0, ix);
    for (int j = 0; j < m; j++)
        INTEGER(ix)[j] = idx[j] + 1;
    SEXP gn = Rf_allocVector(REALSXP, m);
    SET_VECTOR_ELT(ans, 1, gn);
    memcpy(REAL(gn), gain, (size_t) m * sizeof(double));
    UNPROTECT(1);
    return ans;
}

static int check_m(SEXP m_, SEXP unique_, int n, int *unique)
{
    int m = kb_scalar_int(m_, "m");
    if (TYPEOF(unique_) != LGLSXP || XLENGTH(unique_) != 1 ||
        LOGICAL(unique_)[0] == NA_LOGICAL)
        Rf_error(_("'unique' must be TRUE or FALSE"));
    *unique = LOGICAL(unique_)[0];
    if (m < 1 || (*unique && m > n))
        Rf_error(_("'m' must be between 1 and %d"), *unique ? n : INT_MAX);
    return m;
}

/* .Call entry: greedy Stein thinning; w = NULL or the gradient-free log
 * weights (shifted to minimum 0 by the R layer). */
SEXP kb_stein_thin(SEXP x, SEXP s, SEXP kern, SEXP m_, SEXP unique_, SEXP w,
                   SEXP nthreads)
{
    int n, d, unique;
    check_thin_points(x, s, &n, &d);
    if (s == R_NilValue)
        Rf_error(_("'score' must be a numeric matrix"));
    int m = check_m(m_, unique_, n, &unique), nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    double *ew = NULL;
    if (w != R_NilValue) {
        if (TYPEOF(w) != REALSXP || XLENGTH(w) != n)
            Rf_error(_("'w' must be a numeric vector of length nrow(x)"));
        ew = (double *) R_alloc((size_t) n, sizeof(double));
        for (int i = 0; i < n; i++)
            ew[i] = exp(REAL(w)[i]);
    }
    greedy_problem g = {&K, REAL(x), REAL(s), n, ew, NULL};
    double *obj = (double *) R_alloc((size_t) n, sizeof(double));
    double *si = (double *) R_alloc((size_t) d, sizeof(double));
    for (int i = 0; i < n; i++) {
        kb_get_row(REAL(s), n, i, d, si);
        obj[i] = kb_stein_diag(&K, si);
        if (ew)
            obj[i] *= ew[i] * ew[i];
    }
    R_xlen_t bad = first_nonfinite_obj(obj, n);
    if (bad >= 0)
        locate_overflow(&g, bad, NULL, 0);
    int *idx = (int *) R_alloc((size_t) m, sizeof(int));
    double *gain = (double *) R_alloc((size_t) m, sizeof(double));
    greedy(&g, m, unique, nt, obj, idx, gain);
    return thin_result(m, idx, gain);
}

/* .Call entry: MMD thinning (kernel herding on the sample).  xe holds the
 * rows the mean embedding is computed on.  Also returns the embedding mu at
 * every row. */
SEXP kb_mmd_thin(SEXP x, SEXP xe, SEXP kern, SEXP m_, SEXP unique_,
                 SEXP nthreads)
{
    int n, d, unique, ne, de;
    check_thin_points(x, R_NilValue, &n, &d);
    check_thin_points(xe, R_NilValue, &ne, &de);
    if (de != d)
        Rf_error(_("embedding rows must have ncol(x) columns"));
    int m = check_m(m_, unique_, n, &unique), nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    SEXP mu_ = PROTECT(Rf_allocVector(REALSXP, n));
    double *mu = REAL(mu_);
    const double *X = REAL(x), *XE = REAL(xe);
    double *scratch = (double *) R_alloc((size_t) (d + KB_BLOCK) * nt,
                                         sizeof(double));
    R_xlen_t step = ((R_xlen_t) 1 << 22) / ne + 1;
    for (R_xlen_t i0 = 0; i0 < n; i0 += step) {
        R_xlen_t i1 = i0 + step < n ? i0 + step : n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) \
    if ((double) (i1 - i0) * ne >= KB_PAR_MIN_EVALS)
#endif
        for (R_xlen_t i = i0; i < i1; i++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *xi = scratch + (size_t) (d + KB_BLOCK) * tid,
                *buf = xi + d, acc = 0.0;
            kb_get_row(X, n, i, d, xi);
            for (R_xlen_t l = 0; l < ne; l += KB_BLOCK) {
                R_xlen_t l1 = l + KB_BLOCK < ne ? l + KB_BLOCK : ne;
                kb_kernel_row(&K, xi, XE, ne, l, l1, buf);
                for (R_xlen_t t = 0; t < l1 - l; t++)
                    acc += buf[t];
            }
            mu[i] = acc / ne;
        }
        R_CheckUserInterrupt();
    }
    greedy_problem g = {&K, X, NULL, n, NULL, mu};
    double *obj = (double *) R_alloc((size_t) n, sizeof(double));
    double zero = 0.0, k0, p1, p2;
    kb_phi_block(&K, 1, &zero, &k0, &p1, &p2);
    for (int i = 0; i < n; i++)
        obj[i] = k0;
    int *idx = (int *) R_alloc((size_t) m, sizeof(int));
    double *gain = (double *) R_alloc((size_t) m, sizeof(double));
    greedy(&g, m, unique, nt, obj, idx, gain);
    SEXP ans = PROTECT(thin_result(m, idx, gain));
    SEXP out = PROTECT(Rf_lengthgets(ans, 3));
    SET_VECTOR_ELT(out, 2, mu_);
    SEXP nm = PROTECT(Rf_allocVector(STRSXP, 3));
    SET_STRING_ELT(nm, 0, Rf_mkChar("index"));
    SET_STRING_ELT(nm, 1, Rf_mkChar("gain"));
    SET_STRING_ELT(nm, 2, Rf_mkChar("mu"));
    Rf_setAttrib(out, R_NamesSymbol, nm);
    UNPROTECT(4);
    return out;
}
