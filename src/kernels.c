/* Base kernels: the only place that knows phi and its radial derivatives. */
#include <math.h>
#include "kernels.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* Compilers keep sqrt()'s errno path unless built with -fno-math-errno,
 * which R's default flags do not give, and then will not vectorise the
 * IMQ loop; on x86-64 the SSE2 square root (correctly rounded, like sqrt())
 * does it explicitly, with the same results. */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void kb_kernel_from_sexp(SEXP kern, int d, kb_kernel *K)
{
    SEXP type = kb_list_elt(kern, "type"), lam = kb_list_elt(kern, "lambda"),
        iso = kb_list_elt(kern, "iso");
    if (TYPEOF(lam) != REALSXP || TYPEOF(iso) != LGLSXP || XLENGTH(iso) != 1)
        KB_INTERNAL("malformed kernel");
    K->type = kb_scalar_int(type, "kernel$type");
    K->d = d;
    K->iso = LOGICAL(iso)[0] == TRUE;
    if (XLENGTH(lam) != (K->iso ? 1 : d))
        KB_INTERNAL("kernel lambda has the wrong length");
    K->lam = REAL(lam);
    K->trL = 0.0;
    for (int k = 0; k < d; k++) {
        double l = K->lam[K->iso ? 0 : k];
        if (!(l > 0.0) || !R_FINITE(l))
            KB_INTERNAL("preconditioner is not positive definite");
        K->trL += l;
    }
    /* resolve_kernel() rules out an overflowing trace */
    if (!R_FINITE(K->trL))
        KB_INTERNAL("the trace of the preconditioner overflows");
    K->c = 1.0;
    K->beta = -0.5;
    if (K->type == KB_IMQ) {
        K->c = kb_scalar_real(kb_list_elt(kern, "c"), "c");
        K->beta = kb_scalar_real(kb_list_elt(kern, "beta"), "beta");
        if (!(K->c > 0.0) || !(K->beta < 0.0))
            KB_INTERNAL("IMQ parameters out of range");
    } else if (K->type != KB_GAUSS) {
        KB_INTERNAL("unknown kernel type");
    }
}

/* IMQ: phi = t^beta with t = c + r; phi' = beta phi / t;
 * phi'' = beta (beta - 1) phi / t^2.  The default beta = -1/2 avoids pow(). */
static void imq_block(double c, double beta, int m, const double *r,
                      double *p0, double *p1, double *p2)
{
    double b1 = beta, b2 = beta * (beta - 1.0);
    if (beta == -0.5) {
        int j = 0;
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
    } else {
        for (int j = 0; j < m; j++) {
            double t = c + r[j], ph = pow(t, beta), it = 1.0 / t;
            p0[j] = ph;
            p1[j] = b1 * ph * it;
            p2[j] = b2 * ph * it * it;
        }
    }
}

/* Gaussian: phi = exp(-r/2), phi' = -phi/2, phi'' = phi/4. */
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

void kb_dist_block(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, int m, double *r)
{
    for (int t = 0; t < m; t++)
        r[t] = 0.0;
    for (int k = 0; k < K->d; k++) {
        const double *xk = X + k * ld + j0;
        double xik = x[k], lk = K->lam[K->iso ? 0 : k];
        if (K->iso)
            lk = 1.0;
#pragma omp simd
        for (int t = 0; t < m; t++) {
            double u = xik - xk[t];
            r[t] += lk * u * u;
        }
    }
    if (K->iso)
        for (int t = 0; t < m; t++)
            r[t] *= K->lam[0];
}

void kb_kernel_row(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, R_xlen_t j1, double *out)
{
    double r[KB_BLOCK], p1[KB_BLOCK], p2[KB_BLOCK];
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        int m = (int) (j1 - j < KB_BLOCK ? j1 - j : KB_BLOCK);
        kb_dist_block(K, x, X, ld, j, m, r);
        kb_phi_block(K, m, r, out + (j - j0), p1, p2);
    }
}

/* .Call entry: the base kernel Gram matrix k(x_i, y_j), n x m, for points
 * already in the kernel's coordinates (threads over columns). */
SEXP kb_gram(SEXP x, SEXP y, SEXP kern, SEXP nthreads)
{
    if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x) || TYPEOF(y) != REALSXP ||
        !Rf_isMatrix(y) || Rf_ncols(x) != Rf_ncols(y))
        Rf_error(_("'x' and 'y' must be numeric matrices with the same "
                   "number of columns"));
    int n = Rf_nrows(x), m = Rf_nrows(y), d = Rf_ncols(x),
        nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, n, m));
    double *G = REAL(ans);
    const double *X = REAL(x), *Y = REAL(y);
    double *scratch = (double *) R_alloc((size_t) d * nt, sizeof(double));
    R_xlen_t step = (R_xlen_t) (KB_PAR_MIN_EVALS * 16 / (n > 0 ? n : 1)) + 1;
    for (R_xlen_t j0 = 0; j0 < m; j0 += step) {
        R_xlen_t j1 = j0 + step < m ? j0 + step : m;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) \
    if ((double) (j1 - j0) * n >= KB_PAR_MIN_EVALS)
#endif
        for (R_xlen_t j = j0; j < j1; j++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *yj = scratch + (size_t) d * tid;
            for (int k = 0; k < d; k++)
                yj[k] = Y[(R_xlen_t) k * m + j];
            kb_kernel_row(&K, yj, X, n, 0, n, G + j * (R_xlen_t) n);
        }
        R_CheckUserInterrupt();
    }
    UNPROTECT(1);
    return ans;
}
