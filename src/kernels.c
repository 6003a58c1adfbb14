/* Base kernels: the only place that knows phi and its radial derivatives,
 * and the only place that computes distances between points. */
#include <math.h>
#include "kernels.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

/* Compilers keep sqrt()'s errno path unless built with -fno-math-errno,
 * which R's default flags do not give, and then will not vectorise the
 * IMQ loop; on x86-64 the SSE2 square root (correctly rounded, like sqrt())
 * does it explicitly, with the same results. */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Kernel types, and the names the R layer gives them (resolve_kernel()),
 * in the same order. */
typedef enum { KB_IMQ = 0, KB_GAUSS = 1 } kb_kernel_type;
static const char *const kernel_names[] = {"imq", "gaussian", NULL};

/* The trace of L; every eigenvalue must be finite and positive. */
static double kernel_trace(const kb_kernel *K)
{
    double tr = 0.0;
    for (int k = 0; k < K->d; k++) {
        double l = K->lam[K->iso ? 0 : k];
        if (!(l > 0.0) || !R_FINITE(l))
            KB_INTERNAL("preconditioner is not positive definite");
        tr += l;
    }
    /* resolve_kernel() rules out an overflowing trace */
    if (!R_FINITE(tr))
        KB_INTERNAL("the trace of the preconditioner overflows");
    return tr;
}

void kb_kernel_from_sexp(SEXP kern, int d, kb_kernel *K)
{
    SEXP lam = kb_list_elt(kern, "lambda"), iso = kb_list_elt(kern, "iso");
    if (TYPEOF(lam) != REALSXP || TYPEOF(iso) != LGLSXP || XLENGTH(iso) != 1)
        KB_INTERNAL("malformed kernel");
    K->type = kb_arg_choice(kb_list_elt(kern, "type"), "kernel$type",
                            kernel_names);
    K->d = d;
    K->iso = LOGICAL(iso)[0] == TRUE;
    if (XLENGTH(lam) != (K->iso ? 1 : d))
        KB_INTERNAL("kernel lambda has the wrong length");
    K->lam = REAL(lam);
    K->trL = kernel_trace(K);
    K->c = 1.0;
    K->beta = -0.5;
    if (K->type == KB_IMQ) {
        K->c = kb_scalar_real(kb_list_elt(kern, "c"), "c");
        K->beta = kb_scalar_real(kb_list_elt(kern, "beta"), "beta");
        if (!(K->c > 0.0) || !(K->beta < 0.0))
            KB_INTERNAL("IMQ parameters out of range");
    }
}

int kb_is_imq_half(const kb_kernel *K)
{
    return K->type == KB_IMQ && K->beta == -0.5;
}

void kb_kernel_gaussian(kb_kernel *K, int d, const double *lam)
{
    K->type = KB_GAUSS;
    K->c = 1.0;
    K->beta = -0.5;
    K->d = d;
    K->iso = 1;
    K->lam = lam;
    K->trL = kernel_trace(K);
}

#if KB_AVX2
/* The beta = -1/2 loop of imq_block() four at a time (AVX2); returns the
 * number of values done (a multiple of 4). */
KB_TARGET_AVX2 static int imq_half_avx2(double c, double b1, double b2,
                                        int m, const double *r, double *p0,
                                        double *p1, double *p2)
{
    const __m256d cc = _mm256_set1_pd(c), bb1 = _mm256_set1_pd(b1),
        bb2 = _mm256_set1_pd(b2);
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        __m256d q0, q1, q2;
        kb_imq_half4(cc, bb1, bb2, _mm256_loadu_pd(r + j), &q0, &q1, &q2);
        _mm256_storeu_pd(p0 + j, q0);
        _mm256_storeu_pd(p1 + j, q1);
        _mm256_storeu_pd(p2 + j, q2);
    }
    return j;
}
#endif

/* IMQ: phi = t^beta with t = c + r; phi' = beta phi / t;
 * phi'' = beta (beta - 1) phi / t^2; phi''' = (beta - 2) phi'' / t.
 * The default beta = -1/2 avoids pow(). */
static void imq_block(double c, double beta, int m, const double *r,
                      double *p0, double *p1, double *p2)
{
    double b1 = beta, b2 = beta * (beta - 1.0);
    if (beta != -0.5) {
        for (int j = 0; j < m; j++) {
            double t = c + r[j], ph = pow(t, beta), it = 1.0 / t;
            p0[j] = ph;
            p1[j] = b1 * ph * it;
            p2[j] = b2 * ph * it * it;
        }
        return;
    }
    int j = 0;
#if KB_AVX2
    if (kb_have_avx2())
        j = imq_half_avx2(c, b1, b2, m, r, p0, p1, p2);
#endif
#if defined(__SSE2__)
    const __m128d one = _mm_set1_pd(1.0), cc = _mm_set1_pd(c),
        bb1 = _mm_set1_pd(b1), bb2 = _mm_set1_pd(b2);
    for (; j + 2 <= m; j += 2) {
        __m128d it = _mm_div_pd(one, _mm_add_pd(cc, _mm_loadu_pd(r + j)));
        __m128d ph = _mm_sqrt_pd(it);
        __m128d pit = _mm_mul_pd(ph, it);
        _mm_storeu_pd(p0 + j, ph);
        _mm_storeu_pd(p1 + j, _mm_mul_pd(bb1, pit));
        _mm_storeu_pd(p2 + j, _mm_mul_pd(bb2, _mm_mul_pd(pit, it)));
    }
#endif
    for (; j < m; j++) {
        double it = 1.0 / (c + r[j]);
        double ph = sqrt(it), pit = ph * it;
        p0[j] = ph;
        p1[j] = b1 * pit;
        p2[j] = b2 * (pit * it);
    }
}

/* IMQ values alone: (c + r)^beta, sqrt(1 / (c + r)) when beta = -1/2. */
static void imq_values(double c, double beta, int m, const double *r,
                       double *p0)
{
    int j = 0;
    if (beta != -0.5) {
        for (; j < m; j++)
            p0[j] = pow(c + r[j], beta);
        return;
    }
#if defined(__SSE2__)
    const __m128d one = _mm_set1_pd(1.0), cc = _mm_set1_pd(c);
    for (; j + 2 <= m; j += 2)
        _mm_storeu_pd(p0 + j, _mm_sqrt_pd(_mm_div_pd(
            one, _mm_add_pd(cc, _mm_loadu_pd(r + j)))));
#endif
    for (; j < m; j++)
        p0[j] = sqrt(1.0 / (c + r[j]));
}

/* Gaussian: phi = exp(-r/2), phi' = -phi/2, phi'' = phi/4,
 * phi''' = -phi''/2. */
static void gauss_block(int m, const double *r, double *p0, double *p1,
                        double *p2)
{
    for (int j = 0; j < m; j++) {
        double ph = exp(-0.5 * r[j]);
        p0[j] = ph;
        p1[j] = -0.5 * ph;
        p2[j] = 0.25 * ph;
    }
}

void kb_phi_block(const kb_kernel *K, int m, const double *r,
                  double *p0, double *p1, double *p2)
{
    if (K->type == KB_IMQ)
        imq_block(K->c, K->beta, m, r, p0, p1, p2);
    else
        gauss_block(m, r, p0, p1, p2);
}

void kb_phi0_block(const kb_kernel *K, int m, const double *r, double *p0)
{
    if (K->type == KB_IMQ) {
        imq_values(K->c, K->beta, m, r, p0);
    } else {
        for (int j = 0; j < m; j++)
            p0[j] = exp(-0.5 * r[j]);
    }
}

/* kb_phi0_iso_sums() for any kernel, from phi' and phi''. */
static void iso_sums_any(const kb_kernel *K, int m, const double *d2,
                         double *p0, double *sums)
{
    const double lam = K->lam[0];
    double r[KB_BLOCK], p1[KB_BLOCK], p2[KB_BLOCK], s0 = 0.0, s1 = 0.0;
    for (int j = 0; j < m; j++)
        r[j] = lam * d2[j];
    kb_phi_block(K, m, r, p0, p1, p2);
    for (int j = 0; j < m; j++) {
        s0 += p0[j];
        s1 += -2.0 * K->d * lam * p1[j] - 4.0 * lam * lam * d2[j] * p2[j];
    }
    sums[0] = s0;
    sums[1] = s1;
}

void kb_phi0_iso_sums(const kb_kernel *K, int m, const double *d2,
                      double *p0, double *sums)
{
    if (K->type != KB_GAUSS) {
        iso_sums_any(K, m, d2, p0, sums);
        return;
    }
    /* the Gaussian in one pass, so that the sums overlap the exponentials:
     * -2 d lam phi' - 4 lam^2 d2 phi'' = phi (d lam - lam^2 d2) */
    const double lam = K->lam[0], a = K->d * lam, b = lam * lam;
    double s0 = 0.0, s1 = 0.0;
    for (int j = 0; j < m; j++) {
        double ph = exp(-0.5 * (lam * d2[j]));
        p0[j] = ph;
        s0 += ph;
        s1 += ph * (a - b * d2[j]);
    }
    sums[0] = s0;
    sums[1] = s1;
}

void kb_phi3_block(const kb_kernel *K, int m, const double *r,
                   const double *p2, double *p3)
{
    if (K->type == KB_IMQ) {
        for (int j = 0; j < m; j++)
            p3[j] = p2[j] * (K->beta - 2.0) / (K->c + r[j]);
    } else {
        for (int j = 0; j < m; j++)
            p3[j] = -0.5 * p2[j];
    }
}

/* ---- mollifiers (MIED) ------------------------------------------------ */

static const char *const mollifier_names[] = {"riesz", "gaussian", "laplace",
                                              NULL};

void kb_mollifier_from_sexp(SEXP type, double s, double eps, kb_mollifier *M)
{
    M->type = kb_arg_choice(type, "mollifier", mollifier_names);
    M->s = s;
    M->eps = eps;
    if (!(eps >= 0.0) || (M->type != KB_MOLL_RIESZ && !(eps > 0.0)))
        KB_INTERNAL("mollifier scale out of range");
}

void kb_mollifier_block(const kb_mollifier *M, int m, const double *r,
                        double *lphi, double *c)
{
    const double e = M->eps, e2 = e * e;
    switch (M->type) {
    case KB_MOLL_RIESZ:
        for (int t = 0; t < m; t++) {
            double u = r[t] + e2;
            lphi[t] = -0.5 * M->s * log(u);
            if (c)
                c[t] = M->s / u;
        }
        break;
    case KB_MOLL_GAUSSIAN:
        for (int t = 0; t < m; t++) {
            lphi[t] = -0.5 * r[t] / e2;
            if (c)
                c[t] = 1.0 / e2;
        }
        break;
    default:
        for (int t = 0; t < m; t++) {
            double q = sqrt(r[t]);
            lphi[t] = -q / e;
            if (c)
                c[t] = q > 0.0 ? 1.0 / (e * q) : 0.0;
        }
    }
}

/* ---- Gaussian Stein features (FSSD) ------------------------------------ */

void kb_gauss_stein_features(const kb_gauss_feat *G, const double *x,
                             const double *s, R_xlen_t ld, double *f)
{
    const int d = G->d;
    for (int j = 0; j < G->J; j++) {
        double r2 = 0.0;
        for (int k = 0; k < d; k++) {
            double u = x[(R_xlen_t) k * ld] - G->V[k * G->J + j];
            f[j * d + k] = u;
            r2 += u * u;
        }
        const double kv = isfinite(r2) ?
            exp(-r2 / (2.0 * G->w)) * G->scale : NAN;
        for (int k = 0; k < d; k++)
            f[j * d + k] = kv * (s[(R_xlen_t) k * ld] - f[j * d + k] / G->w);
    }
}

double kb_phi_zero(const kb_kernel *K)
{
    double zero = 0.0, p0;
    kb_phi0_block(K, 1, &zero, &p0);
    return p0;
}

void kb_dist_block(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, int m, double *r)
{
    if (K->iso) {
        kb_sqdist_block(K->d, x, 1, X, ld, j0, m, r);
        for (int t = 0; t < m; t++)
            r[t] *= K->lam[0];
        return;
    }
    for (int t = 0; t < m; t++)
        r[t] = 0.0;
    for (int k = 0; k < K->d; k++) {
        const double *xk = X + k * ld + j0;
        double xik = x[k], lk = K->lam[k];
#pragma omp simd
        for (int t = 0; t < m; t++) {
            double u = xik - xk[t];
            r[t] += lk * u * u;
        }
    }
}

void kb_kernel_row(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, R_xlen_t j1, double *out)
{
    double r[KB_BLOCK];
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        int m = (int) (j1 - j < KB_BLOCK ? j1 - j : KB_BLOCK);
        kb_dist_block(K, x, X, ld, j, m, r);
        kb_phi0_block(K, m, r, out + (j - j0));
    }
}

double kb_kernel_row_sum(const kb_kernel *K, const double *x, const double *X,
                         R_xlen_t ld, R_xlen_t j0, R_xlen_t j1, double *buf)
{
    double acc = 0.0;
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        R_xlen_t j2 = j + KB_BLOCK < j1 ? j + KB_BLOCK : j1;
        kb_kernel_row(K, x, X, ld, j, j2, buf);
        for (R_xlen_t t = 0; t < j2 - j; t++)
            acc += buf[t];
    }
    return acc;
}

static void kernel_rows_item(void *ctx, R_xlen_t j, double *yj)
{
    const kb_kernel_rows *q = (const kb_kernel_rows *) ctx;
    kb_get_row(q->Y, q->ny, j, q->K->d, yj);
    if (q->G)
        kb_kernel_row(q->K, yj, q->X, q->nx, 0, q->nx, q->G + j * q->nx);
    else
        q->mean[j] = kb_kernel_row_sum(q->K, yj, q->X, q->nx, 0, q->nx,
                                       yj + q->K->d) / q->nx;
}

void kb_kernel_rows_run(const kb_kernel_rows *q, int nt)
{
    const int d = q->K->d;
    kb_loop L = {.nt = nt, .cost0 = (double) q->nx * KB_KERNEL_WORK(d),
                 .scratch = kb_scratch_alloc((size_t) d + KB_BLOCK, nt),
                 .item = kernel_rows_item,
                 .ctx = (void *) q};
    kb_loop_run(&L, 0, q->ny);
}

/* ---- .Call entries ---------------------------------------------------- */

/* The base kernel Gram matrix k(x_i, y_j), n x m, for points already in the
 * kernel's coordinates (threads over columns). */
SEXP kb_gram(SEXP x, SEXP y, SEXP kern, SEXP nthreads)
{
    int n = kb_arg_matrix(x, "x", -1, -1), d = Rf_ncols(x),
        m = kb_arg_matrix(y, "y", -1, d), nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, n, m));
    kb_kernel_rows q = {&K, REAL(x), REAL(y), n, m, REAL(ans), NULL};
    kb_kernel_rows_run(&q, nt);
    UNPROTECT(1);
    return ans;
}

/* phi, phi', phi'' at the values r: a length(r) x 3 matrix (for tests and
 * for phi(0) in the R layer). */
SEXP kb_phi(SEXP kern, SEXP r)
{
    const double *rv = kb_arg_vector(r, "r", -1);
    kb_kernel K;
    SEXP lam = kb_list_elt(kern, "lambda");
    kb_kernel_from_sexp(kern, (int) XLENGTH(lam), &K);
    R_xlen_t m = XLENGTH(r);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, (int) m, 3));
    double *o = REAL(ans);
    for (R_xlen_t j = 0; j < m; j += KB_BLOCK) {
        int mm = (int) (m - j < KB_BLOCK ? m - j : KB_BLOCK);
        kb_phi_block(&K, mm, rv + j, o + j, o + m + j, o + 2 * m + j);
    }
    UNPROTECT(1);
    return ans;
}

#if KB_AVX2
int kb_simd_cap = 2;
#endif

/* The instruction sets of the hot loops' copies (kernels.h): level NULL
 * reads, 0, 1 or 2 caps them (every result is the same at every level:
 * the tests compare them).  Returns c(in use, the machine's widest) as
 * they were before the call. */
SEXP kb_simd(SEXP level)
{
    int machine = 0, cap = 0;
#if KB_AVX2
    machine = __builtin_cpu_supports("avx512f") ? 2 :
        __builtin_cpu_supports("avx2") ? 1 : 0;
    cap = kb_simd_cap;
#endif
    SEXP out = PROTECT(Rf_allocVector(INTSXP, 2));
    INTEGER(out)[0] = cap < machine ? cap : machine;
    INTEGER(out)[1] = machine;
    if (!Rf_isNull(level)) {
        int v = kb_scalar_int(level, "level");
        if (v < 0 || v > 2)
            kb_error_arg(_("'%s' must be 0, 1 or 2"), "level");
#if KB_AVX2
        kb_simd_cap = v;
#else
        (void) v;
#endif
    }
    UNPROTECT(1);
    return out;
}
