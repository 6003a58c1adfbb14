/* Kernel Bayes' rule (Fukumizu, Song & Gretton 2013; DESIGN.md "Kernel
 * Bayes' rule") on the LAPACK layer: the regularised solves for the
 * prior-to-joint weights mu and for the posterior weights. */
#include <math.h>
#include "linalg.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

/* The two forms of the posterior weights, named as in R (kbr(method =)). */
enum { KBR_KBR = 0, KBR_IW = 1 };
static const char *const kbr_methods[] = {"kbr", "iw", NULL};

/* The posterior operator R(mu) of one fit: G_Y and mu, and the
 * factorisation behind it, kept so that observations cost O(n^2) each:
 * "kbr": R = L G_Y ((L G_Y)^2 + n^2 delta I)^{-1} L, L = diag(mu):
 *        F = LU of (L G_Y)^2 + n^2 delta I (pivots in ipiv);
 * "iw":  R = D^(1/2) (D^(1/2) G_Y D^(1/2) + n delta I)^{-1} D^(1/2),
 *        D = diag(max(mu, 0)): F = its Cholesky factor (ipiv unused).
 * delta is scaled like eps (the operator convention: (L G_Y) / n and
 * D^(1/2) G_Y D^(1/2) / n estimate operators that do not grow with n), so
 * a good delta does not depend on n. */
typedef struct {
    int n, method;
    const double *gy, *mu;
    double *F;
    int *ipiv;
} kbr_op;

/* A regulariser: a finite number > 0. */
static double kbr_reg(SEXP x, const char *what)
{
    double v = kb_scalar_real(x, what);
    if (!(v > 0.0))
        kb_error_arg(_("'%s' must be positive"), what);
    return v;
}

/* The Cholesky factor of G_X + n eps I, in a new n x n array. */
static double *kbr_chol_gx(int n, const double *gx, double eps)
{
    size_t nn = (size_t) n * n;
    double *C = (double *) R_alloc(nn, sizeof(double));
    memcpy(C, gx, nn * sizeof(double));
    for (int i = 0; i < n; i++)
        C[i + (size_t) i * n] += n * eps;
    kb_chol(n, C, "the regularised Gram matrix G_X + n eps I is not "
            "positive definite; increase 'eps'");
    return C;
}

/* mu = n (G_X + n eps I)^{-1} m. */
static void kbr_mu(int n, const double *gx, const double *m, double eps,
                   double *mu)
{
    double *C = kbr_chol_gx(n, gx, eps);
    for (int i = 0; i < n; i++)
        mu[i] = n * m[i];
    kb_chol_solve(n, 1, C, mu);
}

/* sqrt(max(mu, 0)), the diagonal of D^(1/2). */
static inline double kbr_sqrt_pos(double mu)
{
    return mu > 0.0 ? sqrt(mu) : 0.0;
}

/* Fill op->F (and op->ipiv) for the regulariser delta. */
static void kbr_factor(kbr_op *op, double delta)
{
    int n = op->n;
    const double *gy = op->gy, *mu = op->mu;
    double *F = op->F;
    if (op->method == KBR_KBR) {
        double *B = (double *) R_alloc((size_t) n * n, sizeof(double));
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++)
                B[i + (size_t) j * n] = mu[i] * gy[i + (size_t) j * n];
        kb_matmul(n, n, n, 1.0, B, B, F);
        for (int i = 0; i < n; i++)
            F[i + (size_t) i * n] += (double) n * n * delta;
        kb_lu(n, F, op->ipiv,
              "(L G_Y)^2 + n^2 delta I is singular; increase 'delta'");
    } else {
        for (int j = 0; j < n; j++) {
            double sj = kbr_sqrt_pos(mu[j]);
            for (int i = 0; i < n; i++)
                F[i + (size_t) j * n] = kbr_sqrt_pos(mu[i]) *
                    gy[i + (size_t) j * n] * sj;
        }
        for (int i = 0; i < n; i++)
            F[i + (size_t) i * n] += n * delta;
        kb_chol(n, F, "D^(1/2) G_Y D^(1/2) + n delta I is not positive "
                "definite; increase 'delta'");
    }
}

/* W = R K for the q columns of K (n x q), from the factorisation. */
static void kbr_apply(const kbr_op *op, int q, const double *K, double *W)
{
    int n = op->n;
    const double *mu = op->mu;
    size_t nq = (size_t) n * q;
    double *Z = (double *) R_alloc(nq, sizeof(double));
    if (op->method == KBR_KBR) {
        for (size_t k = 0; k < nq; k++)
            Z[k] = mu[k % n] * K[k];
        kb_lu_solve_factored(n, q, op->F, op->ipiv, Z);
        /* W = L G_Y Z */
        kb_matmul(n, q, n, 1.0, op->gy, Z, W);
        for (size_t k = 0; k < nq; k++)
            W[k] *= mu[k % n];
    } else {
        for (size_t k = 0; k < nq; k++)
            Z[k] = kbr_sqrt_pos(mu[k % n]) * K[k];
        kb_chol_solve(n, q, op->F, Z);
        for (size_t k = 0; k < nq; k++)
            W[k] = kbr_sqrt_pos(mu[k % n]) * Z[k];
    }
}

/* An operator over scratch factorisation arrays (R_alloc). */
static kbr_op kbr_op_scratch(int n, int method, const double *gy,
                             const double *mu)
{
    kbr_op op = {n, method, gy, mu, NULL, NULL};
    op.F = (double *) R_alloc((size_t) n * n, sizeof(double));
    op.ipiv = (int *) R_alloc((size_t) n, sizeof(int));
    return op;
}

/* The filter's steps: from the weights a (length n, overwritten), for each
 * column t of ky (n x T), mu = n (G_X + n eps I)^{-1} G_XX+ (G_X + n eps
 * I)^{-1} G_X a (C: the Cholesky factor of G_X + n eps I), then a = R(mu)
 * k_Y(., y_t), written to column t of W. */
typedef struct {
    int n;
    const double *gx, *gxx, *gy, *C;
    double delta;
    int method;
} kbr_filter_model;

static void kbr_filter_run(const kbr_filter_model *md, double *a,
                           const double *ky, int T, double *W)
{
    int n = md->n;
    double *v = (double *) R_alloc((size_t) n, sizeof(double)),
        *mu = (double *) R_alloc((size_t) n, sizeof(double));
    kb_ticker tick = KB_TICKER_INIT;
    for (int t = 0; t < T; t++) {
        kb_matmul(n, 1, n, 1.0, md->gx, a, v);
        kb_chol_solve(n, 1, md->C, v);
        kb_matmul(n, 1, n, (double) n, md->gxx, v, mu);
        kb_chol_solve(n, 1, md->C, mu);
        double *w = W + (size_t) t * n;
        const void *vmax = vmaxget();
        kbr_op op = kbr_op_scratch(n, md->method, md->gy, mu);
        kbr_factor(&op, md->delta);
        kbr_apply(&op, 1, ky + (size_t) t * n, w);
        vmaxset(vmax);
        memcpy(a, w, (size_t) n * sizeof(double));
        /* a factorisation: about n^3 units */
        kb_tick(&tick, (double) n * n * n);
    }
}

/* .Call entry: list(mu, F, ipiv) for the full KBR fit. */
SEXP kb_kbr_fit(SEXP gx, SEXP m, SEXP gy, SEXP eps_, SEXP delta_,
                SEXP method_)
{
    int n = kb_arg_square(gx, "G_X");
    kb_arg_matrix(gy, "G_Y", n, n);
    const double *pm = kb_arg_vector(m, "m", n);
    double eps = kbr_reg(eps_, "eps"), delta = kbr_reg(delta_, "delta");
    int method = kb_arg_choice(method_, "method", kbr_methods);
    const char *nms[] = {"mu", "F", "ipiv", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP mu = Rf_allocVector(REALSXP, n);
    SET_VECTOR_ELT(ans, 0, mu);
    SEXP F = Rf_allocMatrix(REALSXP, n, n);
    SET_VECTOR_ELT(ans, 1, F);
    SEXP ipiv = Rf_allocVector(INTSXP, n);
    SET_VECTOR_ELT(ans, 2, ipiv);
    /* method "iw" (a Cholesky factor) leaves the pivots unused: zeros
     * rather than whatever the allocation held */
    memset(INTEGER(ipiv), 0, (size_t) n * sizeof(int));
    kbr_mu(n, REAL(gx), pm, eps, REAL(mu));
    kbr_op op = {n, method, REAL(gy), REAL(mu), REAL(F), INTEGER(ipiv)};
    kbr_factor(&op, delta);
    UNPROTECT(1);
    return ans;
}

/* .Call entry: posterior weights from a fit's factorisation. */
SEXP kb_kbr_apply(SEXP gy, SEXP mu, SEXP F, SEXP ipiv, SEXP method_, SEXP K)
{
    int n = kb_arg_square(gy, "G_Y");
    kb_arg_matrix(F, "F", n, n);
    kb_arg_matrix(K, "K", n, -1);
    if (TYPEOF(ipiv) != INTSXP || XLENGTH(ipiv) != n)
        kb_error_arg(_("'ipiv' must be an integer vector of length %d"), n);
    const double *pmu = kb_arg_vector(mu, "mu", n);
    int method = kb_arg_choice(method_, "method", kbr_methods);
    kbr_op op = {n, method, REAL(gy), pmu, REAL(F), INTEGER(ipiv)};
    int q = Rf_ncols(K);
    SEXP W = PROTECT(Rf_allocMatrix(REALSXP, n, q));
    kbr_apply(&op, q, REAL(K), REAL(W));
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
    int n = kb_arg_square(gx, "G_X");
    kb_arg_matrix(gxx, "G_XX+", n, n);
    kb_arg_matrix(gy, "G_Y", n, n);
    kb_arg_matrix(ky, "K_Y", n, -1);
    const double *a0 = kb_arg_vector(alpha0, "alpha0", n);
    double eps = kbr_reg(eps_, "eps"), delta = kbr_reg(delta_, "delta");
    int method = kb_arg_choice(method_, "method", kbr_methods);
    kbr_filter_model md = {n, REAL(gx), REAL(gxx), REAL(gy), NULL, delta,
                           method};
    md.C = kbr_chol_gx(n, md.gx, eps);
    int T = Rf_ncols(ky);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, n, T));
    double *a = (double *) R_alloc((size_t) n, sizeof(double));
    memcpy(a, a0, (size_t) n * sizeof(double));
    kbr_filter_run(&md, a, REAL(ky), T, REAL(ans));
    UNPROTECT(1);
    return ans;
}

/* .Call entry: mu = n (G_X + n eps I)^{-1} m. */
SEXP kb_kbr_mu(SEXP gx, SEXP m, SEXP eps_)
{
    int n = kb_arg_square(gx, "G_X");
    const double *pm = kb_arg_vector(m, "m", n);
    double eps = kbr_reg(eps_, "eps");
    SEXP mu = PROTECT(Rf_allocVector(REALSXP, n));
    kbr_mu(n, REAL(gx), pm, eps, REAL(mu));
    UNPROTECT(1);
    return mu;
}

/* .Call entry: posterior weights R(mu) K for the columns of K. */
SEXP kb_kbr_weights(SEXP gy, SEXP mu, SEXP delta_, SEXP method_, SEXP K)
{
    int n = kb_arg_square(gy, "G_Y");
    kb_arg_matrix(K, "K", n, -1);
    const double *pmu = kb_arg_vector(mu, "mu", n);
    double delta = kbr_reg(delta_, "delta");
    int method = kb_arg_choice(method_, "method", kbr_methods);
    kbr_op op = kbr_op_scratch(n, method, REAL(gy), pmu);
    int q = Rf_ncols(K);
    SEXP W = PROTECT(Rf_allocMatrix(REALSXP, n, q));
    kbr_factor(&op, delta);
    kbr_apply(&op, q, REAL(K), REAL(W));
    UNPROTECT(1);
    return W;
}

