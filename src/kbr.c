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
        kb_error_class("kb_error_arg", _("'%s' must be positive"), what);
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
        kb_error_class("kb_error_arg",
                       _("'ipiv' must be an integer vector of length %d"), n);
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

/* ---- cross-validation: one fold, every (eps, delta) at once ------------ */

/* Method "kbr" on one fold's training Gram matrices, for every eps and
 * delta of a product grid, without a solve per setting (the solves of
 * DESIGN.md "Kernel Bayes' rule", reorganised).  With G_Y = P P' (pivoted
 * Cholesky, r columns) and L = diag(mu), the push-through identity gives
 *   R = L G_Y ((L G_Y)^2 + c I)^{-1} L = L P (T^2 + c I)^{-1} P' L,
 *   T = P' L P (r x r, symmetric),
 * so with T = Q diag(theta) Q' and V = L P Q, R = V diag(1 / (c +
 * theta^2)) V': one eigen-decomposition per eps serves every delta, and the
 * criterion's quadratic forms (G_X ~ Px Px') are sums over r x r arrays:
 *   sum_j W_j' G_X W_j = sum_ab d_a d_b (A'A)_ab (Z Z')_ab, A = Px' V,
 *   sum_j W_j' k_X(., x_j) = sum_a d_a sum_j Z_aj (V' K_X)_aj, Z = V' K_Y,
 * with d = 1 / (c + theta^2), c = n^2 delta.  Exact up to the factors'
 * truncation (LAPACK's tolerance n macheps max diag, far below the
 * regularisation) and rounding. */
typedef struct {
    int n, q, rx, ry;
    const double *gx, *m, *Px, *Pxt, *Py, *kx, *ky;
    double *Sx;           /* Cholesky factor of c I + Px' Px (Woodbury) */
} kbr_cv_fold;

/* mu = n (G_X + n eps I)^{-1} m: by Cholesky on G_X itself when Px has
 * more than n / 2 columns, else by Woodbury on the factor,
 * (Px Px' + c I)^{-1} m = (m - Px (c I + Px' Px)^{-1} Px' m) / c. */
static void kbr_cv_mu(const kbr_cv_fold *f, const double *PtP, double eps,
                      double *mu)
{
    int n = f->n, rx = f->rx;
    if (2 * rx > n) {
        kbr_mu(n, f->gx, f->m, eps, mu);
        return;
    }
    double c = n * eps;
    size_t rr = (size_t) rx * rx;
    memcpy(f->Sx, PtP, rr * sizeof(double));
    for (int a = 0; a < rx; a++)
        f->Sx[a + (size_t) a * rx] += c;
    kb_chol(rx, f->Sx, "c I + Px' Px is not positive definite");
    double *t = (double *) R_alloc((size_t) rx, sizeof(double));
    kb_crossprod(rx, 1, n, f->Px, f->m, t);
    kb_chol_solve(rx, 1, f->Sx, t);
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int a = 0; a < rx; a++)
            s += f->Px[i + (size_t) a * n] * t[a];
        mu[i] = n * ((f->m[i] - s) / c);
    }
}

/* The fold's criterion terms for eps[e], every delta: out[e + ne * k] =
 * sum_j W_j' G_X W_j - 2 sum_j W_j' k_X(., x_j) (regression), or wbar' G_X
 * wbar - 2 wbar' cbar with wbar, cbar the means over the held-out columns
 * (marginal). */
static void kbr_cv_eps(const kbr_cv_fold *f, const double *mu, int marginal,
                       const double *delta, int nd, int e, int ne,
                       double *out)
{
    int n = f->n, q = f->q, r = f->ry, rx = f->rx, np = 0, nn = 0;
    size_t nr = (size_t) n * r, rr = (size_t) r * r;
    double *LP = (double *) R_alloc(nr, sizeof(double)),
        *Pp = (double *) R_alloc(nr, sizeof(double)),
        *T = (double *) R_alloc(rr, sizeof(double)),
        *Q = (double *) R_alloc(rr, sizeof(double)),
        *th = (double *) R_alloc((size_t) r, sizeof(double)),
        *V = (double *) R_alloc(nr, sizeof(double)),
        *A = (double *) R_alloc((size_t) rx * r, sizeof(double)),
        *H = (double *) R_alloc(rr, sizeof(double)),
        *S = (double *) R_alloc(rr, sizeof(double)),
        *cr = (double *) R_alloc((size_t) r, sizeof(double)),
        *Z = (double *) R_alloc((size_t) r * q, sizeof(double)),
        *X = (double *) R_alloc((size_t) r * q, sizeof(double));
    for (int a = 0; a < r; a++)
        for (int i = 0; i < n; i++)
            LP[i + (size_t) a * n] = mu[i] * f->Py[i + (size_t) a * n];
    /* T = P' L P = Pp' Pp - Pn' Pn, the rows scaled by sqrt(|mu_i|) split
     * by sign (symmetric rank-k updates: half a general product's work);
     * Pp holds the positive rows' block (np x r), then the negative ones */
    for (int i = 0; i < n; i++)
        np += mu[i] > 0.0, nn += mu[i] < 0.0;
    for (int a = 0; a < r; a++) {
        int ip = 0, in = np;
        for (int i = 0; i < n; i++) {
            if (mu[i] == 0.0)
                continue;
            double v = sqrt(fabs(mu[i])) * f->Py[i + (size_t) a * n];
            if (mu[i] > 0.0)
                Pp[ip++ + (size_t) a * np] = v;
            else
                Pp[(size_t) np * r + (in++ - np) + (size_t) a * nn] = v;
        }
    }
    kb_syrk_t(r, np, Pp, 1.0, 0, T);
    kb_syrk_t(r, nn, Pp + (size_t) np * r, -1.0, 1, T);
    kb_sym_fill(r, T);
    kb_sym_eigen_rrr(r, T, th, Q, "P' L P");
    kb_matmul(n, r, r, 1.0, LP, Q, V);
    /* A = Px' V from the transposed factor (a plain product is the fast
     * one in the reference BLAS), H = A' A */
    kb_matmul(rx, r, n, 1.0, f->Pxt, V, A);
    kb_syrk_t(r, rx, A, 1.0, 0, H);
    kb_sym_fill(r, H);
    kb_crossprod(r, q, n, V, f->ky, Z);
    kb_crossprod(r, q, n, V, f->kx, X);
    if (marginal) {
        /* wbar = V D zbar with zbar = Z 1 / q, and V' cbar = X 1 / q */
        double *zb = (double *) R_alloc((size_t) r, sizeof(double));
        for (int a = 0; a < r; a++) {
            double sz = 0.0, sx = 0.0;
            for (int j = 0; j < q; j++) {
                sz += Z[a + (size_t) j * r];
                sx += X[a + (size_t) j * r];
            }
            zb[a] = sz / q;
            cr[a] = zb[a] * (sx / q);
        }
        for (int b = 0; b < r; b++)
            for (int a = 0; a < r; a++)
                S[a + (size_t) b * r] = zb[a] * zb[b];
    } else {
        kb_matmul_nt(r, r, q, Z, Z, S);
        for (int a = 0; a < r; a++) {
            double s = 0.0;
            for (int j = 0; j < q; j++)
                s += Z[a + (size_t) j * r] * X[a + (size_t) j * r];
            cr[a] = s;
        }
    }
    /* every delta: O(r^2) */
    double *dd = Q;       /* reused */
    for (int k = 0; k < nd; k++) {
        double c = (double) n * n * delta[k], quad = 0.0, lin = 0.0;
        for (int a = 0; a < r; a++)
            dd[a] = 1.0 / (c + th[a] * th[a]);
        for (int b = 0; b < r; b++) {
            double s = 0.0;
            for (int a = 0; a < r; a++)
                s += dd[a] * H[a + (size_t) b * r] * S[a + (size_t) b * r];
            quad += dd[b] * s;
            lin += dd[b] * cr[b];
        }
        out[e + (size_t) ne * k] = quad - 2.0 * lin;
    }
}

/* .Call entry: one fold of kbr_cv() for method "kbr": gx, gy the training
 * Gram matrices (n x n), m = rowMeans(gx), kx = G_X[train, held out], ky =
 * G_Y[train, held out] (n x q), eps and delta the grid's values (the
 * product is evaluated).  Returns the ne x nd criterion terms (see
 * kbr_cv_eps; R adds the constants) with attribute "rank" = c(rx, ry). */
SEXP kb_kbr_cv_fold(SEXP gx, SEXP gy, SEXP m, SEXP kx, SEXP ky, SEXP eps_,
                    SEXP delta_, SEXP marginal_)
{
    int n = kb_arg_square(gx, "G_X");
    kb_arg_matrix(gy, "G_Y", n, n);
    const double *pm = kb_arg_vector(m, "m", n);
    kb_arg_matrix(kx, "K_X", n, -1);
    int q = Rf_ncols(kx);
    kb_arg_matrix(ky, "K_Y", n, q);
    int ne = Rf_length(eps_), nd = Rf_length(delta_);
    if (TYPEOF(eps_) != REALSXP || TYPEOF(delta_) != REALSXP || ne < 1 ||
        nd < 1)
        kb_error_class("kb_error_arg",
                       _("'eps' and 'delta' must be non-empty numeric vectors"));
    for (int e = 0; e < ne; e++)
        if (!(REAL(eps_)[e] > 0.0) || !R_FINITE(REAL(eps_)[e]))
            kb_error_class("kb_error_arg", _("'eps' must be positive"));
    for (int k = 0; k < nd; k++)
        if (!(REAL(delta_)[k] > 0.0) || !R_FINITE(REAL(delta_)[k]))
            kb_error_class("kb_error_arg", _("'delta' must be positive"));
    int marginal = Rf_asLogical(marginal_) == TRUE;
    kbr_cv_fold f = {n, q, 0, 0, REAL(gx), pm, NULL, NULL, NULL, REAL(kx),
                     REAL(ky), NULL};
    f.Px = kb_pivoted_chol(n, f.gx, &f.rx, "G_X");
    double *Pxt = (double *) R_alloc((size_t) n * f.rx, sizeof(double));
    for (int a = 0; a < f.rx; a++)
        for (int i = 0; i < n; i++)
            Pxt[a + (size_t) i * f.rx] = f.Px[i + (size_t) a * n];
    f.Pxt = Pxt;
    f.Py = kb_pivoted_chol(n, REAL(gy), &f.ry, "G_Y");
    if (f.rx < 1 || f.ry < 1)
        kb_error_numeric(_("a training Gram matrix is zero"));
    double *PtP = NULL;
    if (2 * f.rx <= n) {
        PtP = (double *) R_alloc((size_t) f.rx * f.rx, sizeof(double));
        f.Sx = (double *) R_alloc((size_t) f.rx * f.rx, sizeof(double));
        kb_crossprod(f.rx, f.rx, n, f.Px, f.Px, PtP);
    }
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, ne, nd));
    double *mu = (double *) R_alloc((size_t) n, sizeof(double));
    for (int e = 0; e < ne; e++) {
        const void *vmax = vmaxget();
        kbr_cv_mu(&f, PtP, REAL(eps_)[e], mu);
        kbr_cv_eps(&f, mu, marginal, REAL(delta_), nd, e, ne, REAL(ans));
        vmaxset(vmax);
        kb_check_interrupt();
    }
    SEXP rk = PROTECT(Rf_allocVector(INTSXP, 2));
    INTEGER(rk)[0] = f.rx;
    INTEGER(rk)[1] = f.ry;
    Rf_setAttrib(ans, Rf_install("rank"), rk);
    UNPROTECT(2);
    return ans;
}
