/* Stein kernel k_p of the Langevin Stein operator (DESIGN.md, "Stein kernel")
 * and the sums behind the kernelized Stein discrepancy. */
#include "stein.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* k_p(x, X_j) for m <= KB_BLOCK consecutive points j0.. of X.  With
 * u = x - y and v = s_y - s_x the four radial ingredients are
 * r = u'Lu, a = u'Lv, b = u'L^2u and s_x's_y; L is diagonal here. */
static void stein_block(const kb_kernel *K, const double *x, const double *s,
                        const double *X, const double *S, R_xlen_t ld,
                        R_xlen_t j0, int m, double *out)
{
    /* r is zero-initialised in full: gcc -Wall cannot see that the loop
     * below covers what kb_phi_block() reads */
    double r[KB_BLOCK] = {0.0}, a[KB_BLOCK], b[KB_BLOCK], sd[KB_BLOCK];
    double p0[KB_BLOCK], p1[KB_BLOCK], p2[KB_BLOCK];
    const int d = K->d;
    for (int t = 0; t < m; t++)
        a[t] = b[t] = sd[t] = 0.0;
    if (K->iso) {
        for (int k = 0; k < d; k++) {
            const double *xk = X + k * ld + j0, *sk = S + k * ld + j0;
            const double xik = x[k], sik = s[k];
#pragma omp simd
            for (int t = 0; t < m; t++) {
                double u = xik - xk[t], v = sk[t] - sik;
                r[t] += u * u;
                a[t] += u * v;
                sd[t] += sik * sk[t];
            }
        }
        const double l = K->lam[0];
#pragma omp simd
        for (int t = 0; t < m; t++) {
            r[t] *= l;
            a[t] *= l;
            b[t] = l * r[t];
        }
    } else {
        for (int k = 0; k < d; k++) {
            const double *xk = X + k * ld + j0, *sk = S + k * ld + j0;
            const double xik = x[k], sik = s[k], lk = K->lam[k], lk2 = lk * lk;
#pragma omp simd
            for (int t = 0; t < m; t++) {
                double u = xik - xk[t], v = sk[t] - sik;
                r[t] += lk * u * u;
                a[t] += lk * u * v;
                b[t] += lk2 * u * u;
                sd[t] += sik * sk[t];
            }
        }
    }
    kb_phi_block(K, m, r, p0, p1, p2);
    const double trL = K->trL;
#pragma omp simd
    for (int t = 0; t < m; t++)
        out[t] = sd[t] * p0[t] + 2.0 * p1[t] * (a[t] - trL) - 4.0 * p2[t] * b[t];
}

void kb_stein_row(const kb_kernel *K, const double *x, const double *s,
                  const double *X, const double *S, R_xlen_t ld,
                  R_xlen_t j0, R_xlen_t j1, double *out)
{
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        int m = (int) (j1 - j < KB_BLOCK ? j1 - j : KB_BLOCK);
        stein_block(K, x, s, X, S, ld, j, m, out + (j - j0));
    }
}

double kb_stein_row_sum(const kb_kernel *K, const double *x, const double *s,
                        const double *X, const double *S, R_xlen_t ld,
                        R_xlen_t j0, R_xlen_t j1, const double *w)
{
    double buf[KB_BLOCK], tot = 0.0;
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        int m = (int) (j1 - j < KB_BLOCK ? j1 - j : KB_BLOCK);
        double acc = 0.0;
        stein_block(K, x, s, X, S, ld, j, m, buf);
        if (w) {
            const double *wj = w + j;
#pragma omp simd reduction(+:acc)
            for (int t = 0; t < m; t++)
                acc += wj[t] * buf[t];
        } else {
#pragma omp simd reduction(+:acc)
            for (int t = 0; t < m; t++)
                acc += buf[t];
        }
        tot += acc;
    }
    return tot;
}

double kb_stein_diag(const kb_kernel *K, const double *s)
{
    double zero = 0.0, p0, p1, p2, ss = 0.0;
    kb_phi_block(K, 1, &zero, &p0, &p1, &p2);
    for (int k = 0; k < K->d; k++)
        ss += s[k] * s[k];
    return ss * p0 - 2.0 * p1 * K->trL;
}

/* Rows per parallel region: about 2^23 kernel evaluations between two
 * checks for a user interrupt. */
static R_xlen_t rows_per_chunk(R_xlen_t n)
{
    R_xlen_t r = ((R_xlen_t) 1 << 23) / (n > 0 ? n : 1);
    return r < 8 ? 8 : r;
}

/* Visit rows j = first..last-1 of the point set in chunks of about 2^23 kernel
 * evaluations, in parallel within a chunk (each row j costs about j
 * evaluations), with an interrupt check between chunks; fn gets the row's
 * point and score gathered into per-thread scratch.  After each chunk (out
 * of the parallel region) check, when given, returns the first row of the
 * chunk whose result is not finite, or -1; visit_rows then stops and returns
 * that row, else it returns -1.  Detecting overflow on the row results keeps
 * the kernel loops free of tests: NaN and Inf propagate into them. */
typedef void (*row_visitor)(void *ctx, R_xlen_t j, const double *xj,
                            const double *sj);
typedef R_xlen_t (*chunk_check)(void *ctx, R_xlen_t j0, R_xlen_t j1);

static R_xlen_t visit_rows(const kb_kernel *K, const double *X,
                           const double *S, R_xlen_t n, R_xlen_t first,
                           R_xlen_t last, int nthreads, row_visitor fn,
                           chunk_check check, void *ctx)
{
    const int d = K->d;
    double *scratch = (double *) R_alloc((size_t) 2 * d * nthreads,
                                         sizeof(double));
    R_xlen_t step = rows_per_chunk(n);
    for (R_xlen_t j0 = first; j0 < last; j0 += step) {
        R_xlen_t j1 = j0 + step < last ? j0 + step : last;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 4) \
    if ((double) (j1 - j0) * j1 >= KB_PAR_MIN_EVALS)
#endif
        for (R_xlen_t j = j0; j < j1; j++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *xj = scratch + (size_t) 2 * d * tid, *sj = xj + d;
            kb_get_row(X, n, j, d, xj);
            kb_get_row(S, n, j, d, sj);
            fn(ctx, j, xj, sj);
        }
        if (check) {
            R_xlen_t bad = check(ctx, j0, j1);
            if (bad >= 0)
                return bad;
        }
        R_CheckUserInterrupt();
    }
    return -1;
}

/* First i in [i0, i1) with a non-finite v[i], or -1. */
static R_xlen_t first_nonfinite(const double *v, R_xlen_t i0, R_xlen_t i1)
{
    for (R_xlen_t i = i0; i < i1; i++)
        if (!R_FINITE(v[i]))
            return i;
    return -1;
}

/* 1-based label of row i for messages: the optional integer attribute
 * "kb_rows" of the point matrix maps rows to those of the user's sample
 * (ksd_weights() hands over distinct rows only). */
static const int *row_labels(SEXP x)
{
    SEXP lab = Rf_getAttrib(x, Rf_install("kb_rows"));
    if (TYPEOF(lab) == INTSXP && XLENGTH(lab) == XLENGTH(x) / Rf_ncols(x))
        return INTEGER(lab);
    return NULL;
}

static double row_label(const int *lab, R_xlen_t i)
{
    return lab ? (double) lab[i] : (double) (i + 1);
}

/* Raise the error for a non-finite Stein kernel of rows i and j (0-based),
 * or, when i < 0, for a row sum that overflowed although its terms are
 * finite.  Never called inside a parallel region. */
static void NORET stein_overflow(const int *lab, R_xlen_t i, R_xlen_t j,
                                 double v)
{
    double a = row_label(lab, i < 0 ? j : (i < j ? i : j)),
        b = row_label(lab, i < 0 ? j : (i < j ? j : i));
    if (i < 0)
        kb_error_numeric(_("the Stein kernel sum over row %.0f overflows (its "
                           "terms are finite but too large to add): scale "
                           "the data or the kernel"), a);
    kb_error_numeric(_("the Stein kernel of rows %.0f and %.0f overflows (%s): "
                       "scale the data or the kernel"), a, b,
                     ISNAN(v) ? "NaN" : (v > 0 ? "Inf" : "-Inf"));
}

/* Second pass, only after a failure: the first pair (i, j), i <= j, with a
 * non-finite Stein kernel, the diagonal first; raise its error.  When all
 * of k_p(x_i, x_j), i <= j, are finite the weighted row sum overflowed. */
static void NORET locate_in_row(const kb_kernel *K, const double *X,
                                const double *S, R_xlen_t n, R_xlen_t j,
                                const int *lab)
{
    const int d = K->d;
    double *xj = (double *) R_alloc((size_t) 2 * d + KB_BLOCK, sizeof(double)),
        *sj = xj + d, *buf = sj + d;
    kb_get_row(X, n, j, d, xj);
    kb_get_row(S, n, j, d, sj);
    double dj = kb_stein_diag(K, sj);
    if (!R_FINITE(dj))
        stein_overflow(lab, j, j, dj);
    for (R_xlen_t i0 = 0; i0 < j; i0 += KB_BLOCK) {
        R_xlen_t i1 = i0 + KB_BLOCK < j ? i0 + KB_BLOCK : j;
        kb_stein_row(K, xj, sj, X, S, n, i0, i1, buf);
        R_xlen_t bad = first_nonfinite(buf, 0, i1 - i0);
        if (bad >= 0)
            stein_overflow(lab, i0 + bad, j, buf[bad]);
    }
    stein_overflow(lab, -1, j, 0.0);
}

typedef struct {
    const kb_kernel *K;
    const double *X, *S, *w;
    R_xlen_t n;
    double *c, *diag;
} lower_sums_ctx;

static void lower_sum_row(void *ctx, R_xlen_t j, const double *xj,
                          const double *sj)
{
    lower_sums_ctx *q = (lower_sums_ctx *) ctx;
    double wj = q->w ? q->w[j] : 1.0;
    double dj = wj * wj * kb_stein_diag(q->K, sj);
    double off = kb_stein_row_sum(q->K, xj, sj, q->X, q->S, q->n, 0, j, q->w);
    q->c[j] = dj + 2.0 * wj * off;
    if (q->diag)
        q->diag[j] = dj;
}

static R_xlen_t lower_sums_check(void *ctx, R_xlen_t j0, R_xlen_t j1)
{
    return first_nonfinite(((lower_sums_ctx *) ctx)->c, j0, j1);
}

R_xlen_t kb_stein_lower_sums(const kb_kernel *K, const double *X,
                             const double *S, R_xlen_t n, const double *w,
                             int nthreads, double *c, double *diag)
{
    lower_sums_ctx q = {K, X, S, w, n, c, diag};
    return visit_rows(K, X, S, n, 0, n, nthreads, lower_sum_row,
                      lower_sums_check, &q);
}

typedef struct {
    const kb_kernel *K;
    const double *X, *S;
    R_xlen_t n;
    double *out;
    unsigned char *bad;    /* bad[j]: column j has a non-finite value */
} matrix_ctx;

/* column j, rows 0..j; the strict upper part is mirrored into row j.
 * v - v is 0 for a finite v and NaN otherwise: summed while the column is
 * still in cache, it flags overflow without a second pass over memory. */
static void matrix_row(void *ctx, R_xlen_t j, const double *xj,
                       const double *sj)
{
    matrix_ctx *q = (matrix_ctx *) ctx;
    R_xlen_t nn = q->n;
    double *col = q->out + j * nn, z = 0.0;
    kb_stein_row(q->K, xj, sj, q->X, q->S, nn, 0, j + 1, col);
    for (R_xlen_t i = 0; i < j; i++) {
        double v = col[i];
        q->out[i * nn + j] = v;
        z += v - v;
    }
    z += col[j] - col[j];
    q->bad[j] = !(z == 0.0);
}

static R_xlen_t matrix_check(void *ctx, R_xlen_t j0, R_xlen_t j1)
{
    matrix_ctx *q = (matrix_ctx *) ctx;
    for (R_xlen_t j = j0; j < j1; j++)
        if (q->bad[j])
            return j;
    return -1;
}

/* ---- .Call entry points ------------------------------------------------ */

/* Validate the n x d point and score matrices handed over by the R layer. */
static void check_points(SEXP x, SEXP s, int *n, int *d)
{
    if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x))
        Rf_error(_("'x' must be a numeric matrix"));
    if (TYPEOF(s) != REALSXP || !Rf_isMatrix(s))
        Rf_error(_("'score' must be a numeric matrix"));
    *n = Rf_nrows(x);
    *d = Rf_ncols(x);
    if (Rf_nrows(s) != *n || Rf_ncols(s) != *d)
        Rf_error(_("'score' must have the same dimensions as 'x'"));
    if (*d < 1)
        Rf_error(_("'x' must have at least one column"));
}

SEXP kb_stein_matrix(SEXP x, SEXP s, SEXP kern, SEXP nthreads)
{
    int n, d;
    check_points(x, s, &n, &d);
    int nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, n, n));
    unsigned char *flags = (unsigned char *) R_alloc((size_t) n + 1, 1);
    matrix_ctx q = {&K, REAL(x), REAL(s), n, REAL(ans), flags};
    R_xlen_t bad = visit_rows(&K, REAL(x), REAL(s), n, 0, n, nt, matrix_row,
                              matrix_check, &q);
    if (bad >= 0) {
        /* the diagonal first, then the rows above it */
        const double *col = REAL(ans) + bad * (R_xlen_t) n;
        R_xlen_t i = R_FINITE(col[bad]) ? first_nonfinite(col, 0, bad) : bad;
        stein_overflow(row_labels(x), i, bad, col[i]);
    }
    UNPROTECT(1);
    return ans;
}

SEXP kb_stein_sums(SEXP x, SEXP s, SEXP kern, SEXP weights, SEXP nthreads)
{
    int n, d;
    check_points(x, s, &n, &d);
    int nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    const double *w = NULL;
    if (weights != R_NilValue) {
        if (TYPEOF(weights) != REALSXP || XLENGTH(weights) != n)
            Rf_error(_("'weights' must be a numeric vector of length nrow(x)"));
        w = REAL(weights);
    }
    const char *nms[] = {"sums", "diag", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocVector(REALSXP, n));
    SET_VECTOR_ELT(ans, 1, Rf_allocVector(REALSXP, n));
    R_xlen_t bad = kb_stein_lower_sums(&K, REAL(x), REAL(s), n, w, nt,
                                       REAL(VECTOR_ELT(ans, 0)),
                                       REAL(VECTOR_ELT(ans, 1)));
    if (bad >= 0)
        locate_in_row(&K, REAL(x), REAL(s), n, bad, row_labels(x));
    UNPROTECT(1);
    return ans;
}

/* Row sums of the lower triangle for rows j0..j1-1 only (0-based, j1
 * exclusive): c_j = k_p(x_j, x_j) + 2 sum_{i < j} k_p(x_i, x_j), so that
 * blocks of rows computed anywhere add up to n^2 KSD^2. */
typedef struct {
    lower_sums_ctx q;
    R_xlen_t j0;
    double *out;
} block_ctx;

static void block_row(void *ctx, R_xlen_t j, const double *xj, const double *sj)
{
    block_ctx *b = (block_ctx *) ctx;
    const kb_kernel *K = b->q.K;
    double dj = kb_stein_diag(K, sj);
    double off = kb_stein_row_sum(K, xj, sj, b->q.X, b->q.S, b->q.n, 0, j, NULL);
    b->out[j - b->j0] = dj + 2.0 * off;
}

static R_xlen_t block_check(void *ctx, R_xlen_t j0, R_xlen_t j1)
{
    block_ctx *b = (block_ctx *) ctx;
    R_xlen_t bad = first_nonfinite(b->out, j0 - b->j0, j1 - b->j0);
    return bad < 0 ? -1 : bad + b->j0;
}

SEXP kb_stein_block_sums(SEXP x, SEXP s, SEXP kern, SEXP j0_, SEXP j1_,
                         SEXP nthreads)
{
    int n, d;
    check_points(x, s, &n, &d);
    int nt = kb_nthreads(nthreads);
    double a = kb_scalar_real(j0_, "first"), b = kb_scalar_real(j1_, "last");
    if (!(a >= 0 && a <= b && b <= n))
        Rf_error(_("row block [%g, %g) out of range for %d rows"), a, b, n);
    R_xlen_t j0 = (R_xlen_t) a, j1 = (R_xlen_t) b;
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    SEXP ans = PROTECT(Rf_allocVector(REALSXP, j1 - j0));
    block_ctx q = {{&K, REAL(x), REAL(s), NULL, n, NULL, NULL}, j0, REAL(ans)};
    R_xlen_t bad = visit_rows(&K, REAL(x), REAL(s), n, j0, j1, nt, block_row,
                              block_check, &q);
    if (bad >= 0)
        locate_in_row(&K, REAL(x), REAL(s), n, bad, row_labels(x));
    UNPROTECT(1);
    return ans;
}

/* phi, phi', phi'' at the values r: a length(r) x 3 matrix (for tests). */
SEXP kb_phi(SEXP kern, SEXP r)
{
    if (TYPEOF(r) != REALSXP)
        Rf_error(_("'r' must be a numeric vector"));
    kb_kernel K;
    SEXP lam = kb_list_elt(kern, "lambda");
    kb_kernel_from_sexp(kern, (int) XLENGTH(lam), &K);
    R_xlen_t m = XLENGTH(r);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, (int) m, 3));
    double *o = REAL(ans);
    for (R_xlen_t j = 0; j < m; j += KB_BLOCK) {
        int mm = (int) (m - j < KB_BLOCK ? m - j : KB_BLOCK);
        kb_phi_block(&K, mm, REAL(r) + j, o + j, o + m + j, o + 2 * m + j);
    }
    UNPROTECT(1);
    return ans;
}
