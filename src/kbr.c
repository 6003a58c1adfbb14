/* Kernel Bayes' rule (Fukumizu, Song & Gretton 2013; DESIGN.md "Kernel
 * Bayes' rule") on the LAPACK layer: the regularised solves for the
 * prior-to-joint weights mu and for the posterior weights. */
#include <math.h>
#include "linalg.h"
#include "args.h"
#include "entries.h"

/* mu = n (G_X + n eps I)^{-1} m. */
static void kbr_mu(int n, const double *gx, const double *m, double eps,
                   double *mu)
{
    double *A = (double *) R_alloc((size_t) n * n, sizeof(double));
    memcpy(A, gx, (size_t) n * n * sizeof(double));
    for (int i = 0; i < n; i++)
        A[i + (size_t) i * n] += n * eps;
    kb_chol(n, A, "the regularised Gram matrix G_X + n eps I is not "
            "positive definite; increase 'eps'");
    for (int i = 0; i < n; i++)
        mu[i] = n * m[i];
    kb_chol_solve(n, 1, A, mu);
}

/* Factorisation behind the posterior weights, kept so that observations
 * cost O(n^2) each:
 * method 1 ("kbr"): R = L G_Y ((L G_Y)^2 + n^2 delta I)^{-1} L, L = diag(mu):
 *                   F = LU of (L G_Y)^2 + n^2 delta I (pivots in ipiv);
 * method 2 ("iw"):  R = D^(1/2) (D^(1/2) G_Y D^(1/2) + n delta I)^{-1} D^(1/2),
 *                   D = diag(max(mu, 0)): F = its Cholesky factor.
 * delta is scaled like eps (the operator convention: (L G_Y) / n and
 * D^(1/2) G_Y D^(1/2) / n estimate operators that do not grow with n), so
 * a good delta does not depend on n. */
static void kbr_factor(int n, const double *gy, const double *mu, double delta,
                       int method, double *F, int *ipiv)
{
    size_t nn = (size_t) n * n;
    if (method == 1) {
        double *B = (double *) R_alloc(nn, sizeof(double));
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++)
                B[i + (size_t) j * n] = mu[i] * gy[i + (size_t) j * n];
        kb_gemm('N', 'N', n, n, n, 1.0, B, n, B, n, 0.0, F, n);
        for (int i = 0; i < n; i++)
            F[i + (size_t) i * n] += (double) n * n * delta;
        kb_lu(n, F, ipiv, "(L G_Y)^2 + n^2 delta I is singular; increase 'delta'");
    } else {
        for (int j = 0; j < n; j++) {
            double sj = mu[j] > 0.0 ? sqrt(mu[j]) : 0.0;
            for (int i = 0; i < n; i++) {
                double si = mu[i] > 0.0 ? sqrt(mu[i]) : 0.0;
                F[i + (size_t) j * n] = si * gy[i + (size_t) j * n] * sj;
            }
        }
        for (int i = 0; i < n; i++)
            F[i + (size_t) i * n] += n * delta;
        kb_chol(n, F, "D^(1/2) G_Y D^(1/2) + n delta I is not positive "
                "definite; increase 'delta'");
    }
}

/* W = R K for the q columns of K, from the factorisation. */
static void kbr_apply(int n, const double *gy, const double *mu,
                      const double *F, const int *ipiv, int method, int q,
                      const double *K, double *W)
{
    double *Z = (double *) R_alloc((size_t) n * q, sizeof(double));
    if (method == 1) {
        for (int j = 0; j < q; j++)
            for (int i = 0; i < n; i++)
                Z[i + (size_t) j * n] = mu[i] * K[i + (size_t) j * n];
        kb_lu_solve_factored(n, q, F, ipiv, Z);
        /* W = L G_Y Z */
        kb_gemm('N', 'N', n, q, n, 1.0, gy, n, Z, n, 0.0, W, n);
        for (int j = 0; j < q; j++)
            for (int i = 0; i < n; i++)
                W[i + (size_t) j * n] *= mu[i];
    } else {
        for (int j = 0; j < q; j++)
            for (int i = 0; i < n; i++)
                Z[i + (size_t) j * n] = (mu[i] > 0.0 ? sqrt(mu[i]) : 0.0) *
                    K[i + (size_t) j * n];
        kb_chol_solve(n, q, F, Z);
        for (int j = 0; j < q; j++)
            for (int i = 0; i < n; i++)
                W[i + (size_t) j * n] = (mu[i] > 0.0 ? sqrt(mu[i]) : 0.0) *
                    Z[i + (size_t) j * n];
    }
}

static void kbr_weights(int n, const double *gy, const double *mu,
                        double delta, int method, int q, const double *K,
                        double *W)
{
    double *F = (double *) R_alloc((size_t) n * n, sizeof(double));
    int *ipiv = (int *) R_alloc((size_t) n, sizeof(int));
    kbr_factor(n, gy, mu, delta, method, F, ipiv);
    kbr_apply(n, gy, mu, F, ipiv, method, q, K, W);
}

static int check_square(SEXP g, const char *what)
{
    if (TYPEOF(g) != REALSXP || !Rf_isMatrix(g) || Rf_nrows(g) != Rf_ncols(g))
        Rf_error(_("'%s' must be a square numeric matrix"), what);
    return Rf_nrows(g);
}

/* .Call entry: list(mu, F, ipiv) for the full KBR fit. */
SEXP kb_kbr_fit(SEXP gx, SEXP m, SEXP gy, SEXP eps_, SEXP delta_,
                SEXP method_)
{
    int n = check_square(gx, "G_X");
    if (check_square(gy, "G_Y") != n || TYPEOF(m) != REALSXP ||
        XLENGTH(m) != n)
        Rf_error(_("KBR: Gram matrices and prior embedding must match"));
    double eps = kb_scalar_real(eps_, "eps"), delta = kb_scalar_real(delta_, "delta");
    int method = kb_scalar_int(method_, "method");
    if (!(eps > 0.0) || !(delta > 0.0))
        Rf_error(_("'eps' and 'delta' must be positive"));
    const char *nms[] = {"mu", "F", "ipiv", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP mu = Rf_allocVector(REALSXP, n);
    SET_VECTOR_ELT(ans, 0, mu);
    SEXP F = Rf_allocMatrix(REALSXP, n, n);
    SET_VECTOR_ELT(ans, 1, F);
    SEXP ipiv = Rf_allocVector(INTSXP, n);
    SET_VECTOR_ELT(ans, 2, ipiv);
    kbr_mu(n, REAL(gx), REAL(m), eps, REAL(mu));
    kbr_factor(n, REAL(gy), REAL(mu), delta, method, REAL(F), INTEGER(ipiv));
    UNPROTECT(1);
    return ans;
}

/* .Call entry: posterior weights from a fit's factorisation. */
SEXP kb_kbr_apply(SEXP gy, SEXP mu, SEXP F, SEXP ipiv, SEXP method_, SEXP K)
{
    int n = check_square(gy, "G_Y");
    if (check_square(F, "F") != n || TYPEOF(mu) != REALSXP ||
        XLENGTH(mu) != n || TYPEOF(ipiv) != INTSXP || XLENGTH(ipiv) != n ||
        TYPEOF(K) != REALSXP || !Rf_isMatrix(K) || Rf_nrows(K) != n)
        Rf_error(_("KBR: the fit and the kernel vectors do not match"));
    int method = kb_scalar_int(method_, "method"), q = Rf_ncols(K);
    SEXP W = PROTECT(Rf_allocMatrix(REALSXP, n, q));
    kbr_apply(n, REAL(gy), REAL(mu), REAL(F), INTEGER(ipiv), method, q,
              REAL(K), REAL(W));
    UNPROTECT(1);
    return W;
}

/* .Call entry: the KBR filter on the full Gram matrices.  gx = G_X (T x T),
 * gxx = G_{X X+} (k(X_i, X_{j+1})), gy = G_Y, ky = k_Y(Y_i, y_t) (T x n_obs).
 * Each step: prior embedding m = G_{XX+} P alpha (P = (G_X + T eps I)^{-1}
 * G_X, the conditional-embedding transition), mu = T (G_X + T eps I)^{-1} m,
 * alpha = R(mu) k_Y(y_t).  alpha0: the weights before the first
 * observation's prediction.  Returns the T x n_obs posterior weights. */
SEXP kb_kbr_filter(SEXP gx, SEXP gxx, SEXP gy, SEXP ky, SEXP alpha0,
                   SEXP eps_, SEXP delta_, SEXP method_)
{
    int n = check_square(gx, "G_X");
    if (check_square(gxx, "G_XX+") != n || check_square(gy, "G_Y") != n ||
        TYPEOF(ky) != REALSXP || !Rf_isMatrix(ky) || Rf_nrows(ky) != n ||
        TYPEOF(alpha0) != REALSXP || XLENGTH(alpha0) != n)
        Rf_error(_("KBR filter: Gram matrices do not match"));
    double eps = kb_scalar_real(eps_, "eps"), delta = kb_scalar_real(delta_, "delta");
    int method = kb_scalar_int(method_, "method"), T = Rf_ncols(ky);
    size_t nn = (size_t) n * n;
    /* Cholesky of G_X + n eps I once */
    double *C = (double *) R_alloc(nn, sizeof(double));
    memcpy(C, REAL(gx), nn * sizeof(double));
    for (int i = 0; i < n; i++)
        C[i + (size_t) i * n] += n * eps;
    kb_chol(n, C, "the regularised Gram matrix G_X + n eps I is not "
            "positive definite; increase 'eps'");
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, n, T));
    double *a = (double *) R_alloc((size_t) n, sizeof(double)),
        *v = (double *) R_alloc((size_t) n, sizeof(double)),
        *mu = (double *) R_alloc((size_t) n, sizeof(double));
    memcpy(a, REAL(alpha0), (size_t) n * sizeof(double));
    for (int t = 0; t < T; t++) {
        /* v = (G_X + n eps I)^{-1} G_X a, m = G_XX+ v, mu = n (..)^{-1} m */
        kb_gemm('N', 'N', n, 1, n, 1.0, REAL(gx), n, a, n, 0.0, v, n);
        kb_chol_solve(n, 1, C, v);
        kb_gemm('N', 'N', n, 1, n, (double) n, REAL(gxx), n, v, n, 0.0, mu, n);
        kb_chol_solve(n, 1, C, mu);
        double *w = REAL(ans) + (size_t) t * n;
        const void *vmax = vmaxget();
        kbr_weights(n, REAL(gy), mu, delta, method, 1,
                    REAL(ky) + (size_t) t * n, w);
        vmaxset(vmax);
        memcpy(a, w, (size_t) n * sizeof(double));
        R_CheckUserInterrupt();
    }
    UNPROTECT(1);
    return ans;
}

/* .Call entry: mu = n (G_X + n eps I)^{-1} m. */
SEXP kb_kbr_mu(SEXP gx, SEXP m, SEXP eps_)
{
    int n = check_square(gx, "G_X");
    if (TYPEOF(m) != REALSXP || XLENGTH(m) != n)
        Rf_error(_("KBR: the prior embedding must have length n"));
    double eps = kb_scalar_real(eps_, "eps");
    if (!(eps > 0.0))
        Rf_error(_("'eps' must be positive"));
    SEXP mu = PROTECT(Rf_allocVector(REALSXP, n));
    kbr_mu(n, REAL(gx), REAL(m), eps, REAL(mu));
    UNPROTECT(1);
    return mu;
}

/* .Call entry: posterior weights R(mu) K for the columns of K. */
SEXP kb_kbr_weights(SEXP gy, SEXP mu, SEXP delta_, SEXP method_, SEXP K)
{
    int n = check_square(gy, "G_Y");
    if (TYPEOF(mu) != REALSXP || XLENGTH(mu) != n || TYPEOF(K) != REALSXP ||
        !Rf_isMatrix(K) || Rf_nrows(K) != n)
        Rf_error(_("KBR: weights, Gram matrix and kernel vectors must match"));
    double delta = kb_scalar_real(delta_, "delta");
    if (!(delta > 0.0))
        Rf_error(_("'delta' must be positive"));
    int method = kb_scalar_int(method_, "method"), q = Rf_ncols(K);
    SEXP W = PROTECT(Rf_allocMatrix(REALSXP, n, q));
    kbr_weights(n, REAL(gy), REAL(mu), delta, method, q, REAL(K), REAL(W));
    UNPROTECT(1);
    return W;
}
