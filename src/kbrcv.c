/* Cross-validation of kernel Bayes' rule, methods "kbr" and "iw" (kbr_cv()
 * and kbr()'s tuning): every fold and every (eps, delta) of a product grid,
 * without a regularised solve per setting.  The solves of DESIGN.md
 * "Kernel Bayes' rule", reorganised: with G_Y = P P' (pivoted Cholesky, r
 * columns) and L = diag(mu), the push-through identity gives
 *   R = L G_Y ((L G_Y)^2 + c I)^{-1} L = L P (T^2 + c I)^{-1} P' L,
 *   T = P' L P (r x r, symmetric),
 * so with T = Q diag(theta) Q' and V = L P Q, R = V diag(1 / (c +
 * theta^2)) V': one eigen-decomposition per fold and eps serves every
 * delta, and the criterion's quadratic forms (G_X ~ Px Px') are sums over
 * r x r arrays:
 *   sum_j W_j' G_X W_j = sum_ab d_a d_b (A'A)_ab (Z Z')_ab, A = Px' V,
 *   sum_j W_j' k_X(., x_j) = sum_a d_a sum_j Z_aj (V' K_X)_aj, Z = V' K_Y,
 * with d = 1 / (c + theta^2), c = n^2 delta.  Exact up to the factors'
 * truncation (LAPACK's tolerance n macheps max diag, far below the
 * regularisation) and rounding.
 *
 * Method "iw", R = S (S G_Y S + c I)^{-1} S with S = diag(sqrt(max(mu,
 * 0))) and c = n delta, has no L G_Y in front to push through: its
 * operator weighs the part of S k_Y(., y) outside S G_Y S's range by 1 /
 * c.  Each fold takes the cheaper (by flop count) of two exact forms: the
 * eigen-decomposition of the n x n T = S G_Y S = U U' (U = S P), where
 * the item above runs with V = S Q and d = 1 / (c + theta); or, at low
 * rank, kcv_item_iw_low (below): the thin QR of U, an r x r
 * eigen-decomposition and the held-out columns split into U's range and
 * its complement, O(r q) per delta.
 *
 * Layout: the reference BLAS runs dgemm "N","N" / "N","T" and dsyrk "N"
 * as column updates the compiler vectorises, but its transposed forms
 * ("T","N", dsyrk "T") as dot products, 1.6-3x slower at n ~ 640.  So
 * P_Y is kept transposed (P' = Pyt, r x n) and the item works with V'
 * (r x n): T = Pt Pt' (the columns of Pyt scaled by sqrt|mu|), V' = Q'
 * P' L, A' = V' Px, A'A = A' A'', Z = V' K_Y, V' K_X, all in the fast
 * forms (Q' comes transposed from the eigensolver, kb_eigen_rrr_t, whose
 * back-transformation is applied from the right for the same reason).
 *
 * Threads: first the folds' factors (one item per fold), then one item
 * per (fold, eps), each on one thread calling the BLAS and LAPACK, in
 * rounds of a few items with an interrupt check between rounds; with R's
 * reference BLAS (single-threaded, reentrant) every item's arithmetic is
 * the same on any number of threads.  A multi-threaded BLAS would start
 * its own threads inside each item: ?kbr_cv advises nthreads = 1 then. */
#include <math.h>
#include "linalg.h"
#include "args.h"
#include "runtime.h"
#include "callback.h"
#include "entries.h"

/* One fold's training data and factors (arrays sized for full rank). */
typedef struct {
    int n, q, rx, ry;
    double *gx;          /* G_X[train, train] (mu by Cholesky when 2 rx > n) */
    double *Px;          /* n x rx: G_X ~ Px Px' */
    double *Pyt;         /* ry x n: G_Y ~ Py Py', Pyt = Py' */
    double *PtP;         /* rx x rx: Px' Px (Woodbury, when 2 rx <= n) */
    double *kx, *ky;     /* G_X, G_Y [train, held out] (n x q; ky follows
                          * kx: one n x 2q array) */
    double *m;           /* rowMeans(G_X[train, train]) */
    int low;             /* method "iw": on the factor (kcv_item_iw_low;
                          * else the eigen-decomposition of S G_Y S) */
} kcv_fold;

typedef struct {
    const double *GX, *GY;
    int N, K;
    const int *sel;      /* the folds evaluated (0-based), nsel of them */
    int nsel;
    const int *fold;     /* 1..K */
    kcv_fold *f;
    const double *eps, *delta;
    int ne, nd;
    int crit;            /* 0: regression, 1: marginal, 2: both (out's
                          * last dimension: regression, then marginal) */
    int iw;              /* 0: method "kbr"; 1: "iw", each fold's variant
                          * by its cost; 2: "iw" on the factor, 3: by the
                          * n x n eigen-decomposition (2, 3 for tests) */
    double *out;         /* ne x nd x K (x 2 for both criteria) */
    int *status;         /* per item: 0, or a failure code */
    int lwork, liwork;   /* dsyevr workspace for the largest rank */
    int lqr;             /* kb_qr's workspace ("iw" on the factor) */
    int nmax;            /* the largest training size */
} kcv_ctx;

enum { KCV_OK = 0, KCV_FACTOR = 1, KCV_CHOL_GX = 2, KCV_EIGEN = 3,
       KCV_MU = 4, KCV_CRIT = 5, KCV_MU_BOUND = 6 };

/* The fold's submatrices, mu's right-hand side m and the factors.
 * Scratch: n x n + 3 n + N doubles. */
static void kcv_factor(void *ctx, R_xlen_t a, double *w)
{
    kcv_ctx *c = (kcv_ctx *) ctx;
    int fa = c->sel[a];
    kcv_fold *f = c->f + fa;
    int N = c->N, n = f->n, ni = 0, nq = 0;
    double *work = w + (size_t) n * n;          /* 2 n doubles */
    int *piv = (int *) (work + 2 * n),          /* n ints */
        *tr = (int *) (work + 3 * n), *te = tr + n;   /* N ints */
    for (int i = 0; i < N; i++) {
        if (c->fold[i] == fa + 1)
            te[nq++] = i;
        else
            tr[ni++] = i;
    }
    for (int j = 0; j < n; j++) {
        long double s = 0.0;
        for (int i = 0; i < n; i++) {
            double v = c->GX[tr[i] + (size_t) tr[j] * N];
            f->gx[i + (size_t) j * n] = v;
            s += v;
        }
        f->m[j] = (double) (s / n);   /* G_X is symmetric: column sums */
    }
    for (int j = 0; j < f->q; j++)
        for (int i = 0; i < n; i++) {
            f->kx[i + (size_t) j * n] = c->GX[tr[i] + (size_t) te[j] * N];
            f->ky[i + (size_t) j * n] = c->GY[tr[i] + (size_t) te[j] * N];
        }
    memcpy(w, f->gx, (size_t) n * n * sizeof(double));
    int rx = f->rx = kb_pivoted_chol(n, w, piv, work, f->Px, 0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            w[i + (size_t) j * n] = c->GY[tr[i] + (size_t) tr[j] * N];
    f->ry = kb_pivoted_chol(n, w, piv, work, f->Pyt, 1);
    if (rx < 1 || f->ry < 1) {
        c->status[a] = KCV_FACTOR;
        return;
    }
    if (2 * rx <= n) {
        /* Px' Px as Pxt Pxt' from a transposed copy in w (the fast form) */
        for (int k = 0; k < rx; k++)
            for (int i = 0; i < n; i++)
                w[k + (size_t) i * rx] = f->Px[i + (size_t) k * n];
        kb_matmul_nt(rx, rx, n, w, w, f->PtP);
    }
}

/* mu = n (G_X + n eps I)^{-1} m: by Cholesky on G_X itself when Px has
 * more than n / 2 columns, else by Woodbury on the factor,
 * (Px Px' + c I)^{-1} m = (m - Px (c I + Px' Px)^{-1} Px' m) / c.
 * Scratch: n^2 doubles (C) and rx (t).  Returns a status. */
static int kcv_mu(const kcv_fold *f, double eps, double *C, double *t,
                  double *mu)
{
    int n = f->n, rx = f->rx;
    double c = n * eps;
    if (2 * rx > n) {
        memcpy(C, f->gx, (size_t) n * n * sizeof(double));
        for (int i = 0; i < n; i++)
            C[i + (size_t) i * n] += c;
        if (kb_chol_info(n, C) != 0)
            return KCV_CHOL_GX;
        for (int i = 0; i < n; i++)
            mu[i] = n * f->m[i];
        return kb_chol_solve_info(n, 1, C, mu) == 0 ? KCV_OK : KCV_CHOL_GX;
    }
    memcpy(C, f->PtP, (size_t) rx * rx * sizeof(double));
    for (int a = 0; a < rx; a++)
        C[a + (size_t) a * rx] += c;
    if (kb_chol_info(rx, C) != 0)
        return KCV_CHOL_GX;
    kb_crossprod(rx, 1, n, f->Px, f->m, t);
    if (kb_chol_solve_info(rx, 1, C, t) != 0)
        return KCV_CHOL_GX;
    double *s = C + (size_t) rx * rx;          /* Px t */
    kb_matmul(n, 1, rx, 1.0, f->Px, t, s);
    for (int i = 0; i < n; i++)
        mu[i] = n * ((f->m[i] - s[i]) / c);
    return KCV_OK;
}

/* mu finite (a tiny eps on a low-rank G_X can overflow it) */
static int kcv_mu_finite(const double *mu, int n)
{
    double z = 0.0;
    for (int i = 0; i < n; i++)
        z += mu[i] - mu[i];
    return z == 0.0;
}

/* An item's mu (kcv_mu, checked finite); 0 with the item's status set
 * when it failed.  With m = G 1 / n, mu = (G + n eps I)^{-1} G 1 has
 * ||mu||^2 <= n in exact arithmetic (the eigenvalues of (G + n eps
 * I)^{-1} G lie in [0, 1)); a computed mu far beyond it is rounding at a
 * tiny eps (G_X + n eps I numerically singular), whose criterion would be
 * noise passed off as a number (eps = 1e-16 once won a grid). */
static int kcv_item_mu(kcv_ctx *c, R_xlen_t i, const kcv_fold *f,
                       double eps, double *C, double *t, double *mu)
{
    int st = kcv_mu(f, eps, C, t, mu);
    if (st == KCV_OK && !kcv_mu_finite(mu, f->n))
        st = KCV_MU;
    if (st == KCV_OK) {
        double ss = 0.0;
        for (int j = 0; j < f->n; j++)
            ss += mu[j] * mu[j];
        if (!(ss <= 1.001 * f->n))
            st = KCV_MU_BOUND;
    }
    c->status[i] = st;
    return st == KCV_OK;
}

/* Method "iw": s = sqrt(max(mu, 0)) and U = S P (n x ry, column-major,
 * from the rows of Pyt'). */
static void kcv_iw_factor(const kcv_fold *f, const double *mu, double *sv,
                          double *U)
{
    int n = f->n, r = f->ry;
    for (int j = 0; j < n; j++)
        sv[j] = mu[j] > 0.0 ? sqrt(mu[j]) : 0.0;
    for (int b = 0; b < r; b++)
        for (int j = 0; j < n; j++)
            U[j + (size_t) b * n] = sv[j] * f->Pyt[b + (size_t) j * r];
}

/* Where item i's value of criterion m (0: regression, 1: marginal) at the
 * first delta goes; the next delta is ne further. */
static double *kcv_out(const kcv_ctx *c, R_xlen_t i, int m)
{
    int a = c->sel[i / c->ne], e = (int) (i % c->ne);
    size_t plane = (size_t) c->ne * c->nd * c->K;
    return c->out + e + (size_t) c->ne * c->nd * a +
        (c->crit == 2 && m ? plane : 0);
}

/* ---- method "kbr", and "iw" by the n x n eigen-decomposition ---------- */

/* One item's arrays (kcv_item; r = n for "iw"). */
typedef struct {
    double *Pt;          /* n x r: P's scaled rows, then Q' */
    double *Vt;          /* r x n: V' ("iw": first U = S P) */
    double *T;           /* r x r: T, then A'A (H) */
    double *Q, *S;       /* r x r: the eigensolver's scratch; S = Z Z' */
    double *At;          /* r x rx: A' */
    double *C;           /* mu's Cholesky (kcv_mu: n^2, or rx^2 + n) */
    double *X, *Z;       /* r x q each, adjacent: V' K_X, V' K_Y */
    double *th, *dd, *cr, *mu, *t, *zb;   /* n each */
    kb_eigen_ws eig;
} kcv_ws;

#define KCV_ITEM_PARTS 18

/* The arrays of an item of fold f, as parts of one scratch slice. */
static int kcv_item_parts(kcv_ws *s, const kcv_ctx *c, const kcv_fold *f,
                          kb_part *p)
{
    int n = f->n, r = c->iw ? n : f->ry, rx = f->rx, q = f->q, k = 0;
    size_t nr = (size_t) n * r, rr = (size_t) r * r;
    s->eig.lwork = c->lwork;
    s->eig.liwork = c->liwork;
    p[k++] = KB_DOUBLES(s->Pt, nr);
    p[k++] = KB_DOUBLES(s->Vt, nr);
    p[k++] = KB_DOUBLES(s->T, rr);
    p[k++] = KB_DOUBLES(s->Q, rr);
    p[k++] = KB_DOUBLES(s->At, (size_t) rx * r);
    p[k++] = KB_DOUBLES(s->S, rr);
    p[k++] = KB_DOUBLES(s->C, (size_t) n * n + n);
    p[k++] = KB_DOUBLES(s->X, (size_t) r * q);
    p[k++] = KB_DOUBLES(s->Z, (size_t) r * q);
    p[k++] = KB_DOUBLES(s->th, n);
    p[k++] = KB_DOUBLES(s->dd, n);
    p[k++] = KB_DOUBLES(s->cr, n);
    p[k++] = KB_DOUBLES(s->mu, n);
    p[k++] = KB_DOUBLES(s->t, n);
    p[k++] = KB_DOUBLES(s->zb, n);
    p[k++] = KB_DOUBLES(s->eig.work, c->lwork);
    p[k++] = KB_INTS(s->eig.iwork, c->liwork);
    p[k++] = KB_INTS(s->eig.isuppz, 2 * (size_t) r);
    return k;
}

/* Method "kbr": T = P' L P = Pp' Pp - Pn' Pn, P's rows scaled by
 * sqrt(|mu_i|) split by sign (symmetric rank-k updates: half a general
 * product's work), as the columns of Pt (r x np, then r x nn). */
static void kcv_kbr_T(const kcv_fold *f, kcv_ws *s)
{
    int n = f->n, r = f->ry, np = 0, nn = 0;
    const double *mu = s->mu;
    for (int j = 0; j < n; j++)
        np += mu[j] > 0.0, nn += mu[j] < 0.0;
    double *Pn = s->Pt + (size_t) np * r;
    for (int j = 0, ip = 0, in = 0; j < n; j++) {
        if (mu[j] == 0.0)
            continue;
        double sj = sqrt(fabs(mu[j]));
        const double *p = f->Pyt + (size_t) j * r;
        double *o = mu[j] > 0.0 ? s->Pt + (size_t) ip++ * r :
            Pn + (size_t) in++ * r;
        for (int b = 0; b < r; b++)
            o[b] = sj * p[b];
    }
    kb_syrk_n(r, np, s->Pt, 1.0, 0, s->T);
    kb_syrk_n(r, nn, Pn, -1.0, 1, s->T);
}

/* V' from Q' (in Pt): "iw", V = S Q (the columns of Q' scaled by s, in
 * t); "kbr", V' = Q' P' L (the columns of Q' P' scaled by mu). */
static void kcv_item_V(const kcv_fold *f, kcv_ws *s, int r, int iw)
{
    int n = f->n;
    const double *Qt = s->Pt;
    double *Vt = s->Vt;
    if (iw) {
        for (int j = 0; j < n; j++)
            for (int b = 0; b < r; b++)
                Vt[b + (size_t) j * r] = Qt[b + (size_t) j * r] * s->t[j];
    } else {
        kb_matmul(r, n, r, 1.0, Qt, f->Pyt, Vt);
        for (int j = 0; j < n; j++)
            for (int b = 0; b < r; b++)
                Vt[b + (size_t) j * r] *= s->mu[j];
    }
}

/* Criterion m's r x r array S and vector cr: regression, S = Z Z' and
 * cr_b = sum_j Z_bj X_bj; marginal, wbar = V D zbar with zbar = Z 1 / q
 * and V' cbar = X 1 / q: S = zbar zbar', cr = zbar * (X 1 / q). */
static void kcv_item_terms(kcv_ws *s, int m, int r, int q)
{
    const double *Z = s->Z, *X = s->X;
    double *S = s->S, *cr = s->cr, *zb = s->zb;
    if (m) {
        for (int b = 0; b < r; b++) {
            double sz = 0.0, sx = 0.0;
            for (int j = 0; j < q; j++) {
                sz += Z[b + (size_t) j * r];
                sx += X[b + (size_t) j * r];
            }
            zb[b] = sz / q;
            cr[b] = zb[b] * (sx / q);
        }
        for (int b = 0; b < r; b++)
            for (int j = 0; j < r; j++)
                S[j + (size_t) b * r] = zb[j] * zb[b];
    } else {
        kb_syrk_n(r, q, Z, 1.0, 0, S);
        kb_sym_fill(r, S);
        for (int b = 0; b < r; b++) {
            double v = 0.0;
            for (int j = 0; j < q; j++)
                v += Z[b + (size_t) j * r] * X[b + (size_t) j * r];
            cr[b] = v;
        }
    }
}

/* Criterion m at every delta, O(r^2) each: sum_ab d_a d_b H_ab S_ab -
 * 2 sum_a d_a cr_a, d from the eigenvalues th (H = A'A in T). */
static void kcv_item_deltas(kcv_ctx *c, R_xlen_t i, int m, kcv_ws *s, int r,
                            int n, int iw)
{
    const double *H = s->T, *S = s->S, *th = s->th;
    double *dd = s->dd, *out = kcv_out(c, i, m);
    for (int k = 0; k < c->nd; k++) {
        double cc = (iw ? (double) n : (double) n * n) * c->delta[k],
            quad = 0.0, lin = 0.0;
        for (int b = 0; b < r; b++)
            dd[b] = iw ? 1.0 / (cc + (th[b] > 0.0 ? th[b] : 0.0)) :
                1.0 / (cc + th[b] * th[b]);
        for (int b = 0; b < r; b++) {
            double v = 0.0;
            for (int j = 0; j < r; j++)
                v += dd[j] * H[j + (size_t) b * r] * S[j + (size_t) b * r];
            quad += dd[b] * v;
            lin += dd[b] * s->cr[b];
        }
        double v = quad - 2.0 * lin;
        out[(size_t) c->ne * k] = v;
        if (!R_FINITE(v))
            c->status[i] = KCV_CRIT;
    }
}

static void kcv_item_iw_low(kcv_ctx *c, R_xlen_t i, double *w);

/* Item (fold a, eps e), i = a ne + e: the criterion terms of every delta,
 * out[e + ne k + ne nd a] = sum_j W_j' G_X W_j - 2 sum_j W_j' k_X(., x_j)
 * (regression), or wbar' G_X wbar - 2 wbar' cbar with wbar, cbar the
 * means over the held-out columns (marginal), or both.  Method "kbr", and
 * "iw" by the n x n eigen-decomposition (r = n then); "iw" on the factor
 * goes to kcv_item_iw_low. */
static void kcv_item(void *ctx, R_xlen_t i, double *w)
{
    kcv_ctx *c = (kcv_ctx *) ctx;
    int a = c->sel[i / c->ne], e = (int) (i % c->ne);
    const kcv_fold *f = c->f + a;
    if (c->iw && f->low) {
        kcv_item_iw_low(c, i, w);
        return;
    }
    int iw = c->iw != 0, n = f->n, q = f->q, r = iw ? n : f->ry, rx = f->rx;
    kcv_ws s;
    kb_part parts[KCV_ITEM_PARTS];
    kb_layout_carve(w, parts, kcv_item_parts(&s, c, f, parts));
    if (!kcv_item_mu(c, i, f, c->eps[e], s.C, s.t, s.mu))
        return;
    if (iw) {
        /* T = S G_Y S = U U', U = S P (n x ry) in Vt's place, s in t */
        kcv_iw_factor(f, s.mu, s.t, s.Vt);
        kb_syrk_n(n, f->ry, s.Vt, 1.0, 0, s.T);
    } else
        kcv_kbr_T(f, &s);
    /* Q' into Pt (free now); Q and S as scratch */
    if (kb_eigen_rrr_t(r, s.T, s.th, s.Pt, s.Q, s.S, &s.eig) != 0) {
        c->status[i] = KCV_EIGEN;
        return;
    }
    kcv_item_V(f, &s, r, iw);
    /* A' = V' Px, A'A = A' A'' into T */
    kb_matmul(r, rx, n, 1.0, s.Vt, f->Px, s.At);
    kb_syrk_n(r, rx, s.At, 1.0, 0, s.T);
    kb_sym_fill(r, s.T);
    /* V' K_X and Z = V' K_Y in one product (kx, ky adjacent: n x 2q) */
    kb_matmul(r, 2 * q, n, 1.0, s.Vt, f->kx, s.X);
    for (int m = c->crit == 1; m <= (c->crit != 0); m++) {
        kcv_item_terms(&s, m, r, q);
        kcv_item_deltas(c, i, m, &s, r, n, iw);
    }
}

/* ---- method "iw" on the factor ----------------------------------------- */

/* Method "iw" on the factor, for a G_Y of low numerical rank r: with
 * S = diag(sqrt(max(mu, 0))), c = n delta, U = S P (n x r) = Omega R (thin
 * QR) and R R' = Q diag(theta) Q', the columns of N = Omega Q are
 * orthonormal eigenvectors of U U' (eigenvalues theta) spanning its range,
 * and with Y0 = S K_Y = N G + Y_perp (G = N' Y0, Y_perp orthogonal to N),
 *   E = c (U U' + c I)^{-1} Y0 = N diag(c / (c + theta)) G + Y_perp,
 * W = R K_Y = S E / c.  So per delta only r x q numbers change:
 *   sum_j W_j' G_X W_j = ||A D G + B_perp||^2 / c^2,
 *   sum_j W_j' k_X(., x_j) = (sum_a d_a sum_j G_aj X_aj + L_perp) / c,
 * with d = c / (c + theta), A = Px' S N, B_perp = Px' S Y_perp,
 * X = N' S K_X, L_perp = sum Y_perp * S K_X (marginal: the held-out
 * columns' means).  Y_perp is projected twice (one projection leaves
 * rounding of order macheps |Y0| in N's span, where it would weigh 1
 * instead of c / (c + theta); the second leaves macheps |Y_perp|), and no
 * term is a difference that c makes cancel: the result is as accurate as
 * the n x n eigen-decomposition's. */

/* The arrays of one criterion, qq columns (q, or 1 for the marginal one),
 * laid out last in the item's scratch (sized for the largest qq). */
typedef struct {
    double *Y, *Y0;      /* n x qq each, adjacent: S K_X, S K_Y (Y_perp) */
    double *NG;          /* n x qq */
    double *X, *G;       /* r x qq each, adjacent: N' Y, N' Y0 */
    double *G2;          /* r x qq: the second projection's, then D G */
    double *Bp, *B;      /* rx x qq: B_perp, A D G */
} kcv_crit_ws;

#define KCV_CRIT_PARTS 8

static int kcv_crit_parts(kcv_crit_ws *s, const kcv_fold *f, int qq,
                          kb_part *p)
{
    size_t nq = (size_t) f->n * qq, rq = (size_t) f->ry * qq,
        xq = (size_t) f->rx * qq;
    int k = 0;
    p[k++] = KB_DOUBLES(s->Y, nq);
    p[k++] = KB_DOUBLES(s->Y0, nq);
    p[k++] = KB_DOUBLES(s->NG, nq);
    p[k++] = KB_DOUBLES(s->X, rq);
    p[k++] = KB_DOUBLES(s->G, rq);
    p[k++] = KB_DOUBLES(s->G2, rq);
    p[k++] = KB_DOUBLES(s->Bp, xq);
    p[k++] = KB_DOUBLES(s->B, xq);
    return k;
}

typedef struct {
    double *C;           /* mu's Cholesky: n^2 + n (or rx^2 + n) */
    double *Om, *N, *Nt; /* n x r: U then Omega; N = Omega Q; N' (r x n) */
    double *M, *Qt;      /* r x r: R R'; Q' */
    double *E1, *E2;     /* r x r: R, then the eigensolver's scratch */
    double *Pxt;         /* rx x n: (S Px)' */
    double *A;           /* rx x r: Px' S N */
    double *mu, *t, *sv; /* n each */
    double *th, *cr, *dd, *tau;           /* r each */
    double *wqr;         /* kb_qr's workspace */
    double *var;         /* the criterion's arrays (kcv_crit_ws) */
    kb_eigen_ws eig;
} kcv_low_ws;

#define KCV_LOW_PARTS 23

static int kcv_low_parts(kcv_low_ws *s, const kcv_ctx *c, const kcv_fold *f,
                         kb_part *p)
{
    int n = f->n, r = f->ry, rx = f->rx, k = 0;
    size_t nr = (size_t) n * r, rr = (size_t) r * r;
    kcv_crit_ws v;
    kb_part vp[KCV_CRIT_PARTS];
    size_t nvar = kb_layout_size(vp, kcv_crit_parts(&v, f, c->crit == 1 ?
                                                     1 : f->q, vp));
    s->eig.lwork = c->lwork;
    s->eig.liwork = c->liwork;
    p[k++] = KB_DOUBLES(s->C, (size_t) n * n + n);
    p[k++] = KB_DOUBLES(s->Om, nr);
    p[k++] = KB_DOUBLES(s->N, nr);
    p[k++] = KB_DOUBLES(s->Nt, nr);
    p[k++] = KB_DOUBLES(s->M, rr);
    p[k++] = KB_DOUBLES(s->Qt, rr);
    p[k++] = KB_DOUBLES(s->E1, rr);
    p[k++] = KB_DOUBLES(s->E2, rr);
    p[k++] = KB_DOUBLES(s->Pxt, (size_t) rx * n);
    p[k++] = KB_DOUBLES(s->A, (size_t) rx * r);
    p[k++] = KB_DOUBLES(s->mu, n);
    p[k++] = KB_DOUBLES(s->t, n);
    p[k++] = KB_DOUBLES(s->sv, n);
    p[k++] = KB_DOUBLES(s->th, r);
    p[k++] = KB_DOUBLES(s->cr, r);
    p[k++] = KB_DOUBLES(s->dd, r);
    p[k++] = KB_DOUBLES(s->tau, r);
    p[k++] = KB_DOUBLES(s->eig.work, c->lwork);
    p[k++] = KB_DOUBLES(s->wqr, c->lqr);
    p[k++] = KB_INTS(s->eig.iwork, c->liwork);
    p[k++] = KB_INTS(s->eig.isuppz, 2 * (size_t) r);
    p[k++] = KB_DOUBLES(s->var, nvar);
    return k;
}

/* U = S P = Omega R, R R' = Q diag(theta) Q', N = Omega Q and N', (S Px)'
 * and A = Px' S N; 0 with the item's status set when LAPACK failed. */
static int kcv_low_basis(kcv_ctx *c, R_xlen_t i, const kcv_fold *f,
                         kcv_low_ws *s)
{
    int n = f->n, r = f->ry, rx = f->rx;
    kcv_iw_factor(f, s->mu, s->sv, s->Om);            /* U, then Omega R */
    if (kb_qr(n, r, s->Om, s->E1, s->tau, s->wqr, c->lqr) != 0) {
        c->status[i] = KCV_EIGEN;
        return 0;
    }
    kb_syrk_n(r, r, s->E1, 1.0, 0, s->M);             /* R R' */
    if (kb_eigen_rrr_t(r, s->M, s->th, s->Qt, s->E1, s->E2, &s->eig) != 0) {
        c->status[i] = KCV_EIGEN;
        return 0;
    }
    kb_matmul_nt(n, r, r, s->Om, s->Qt, s->N);        /* N = Omega Q */
    for (int b = 0; b < r; b++)
        for (int j = 0; j < n; j++)
            s->Nt[b + (size_t) j * r] = s->N[j + (size_t) b * n];
    for (int j = 0; j < n; j++)                       /* (S Px)' */
        for (int k = 0; k < rx; k++)
            s->Pxt[k + (size_t) j * rx] = s->sv[j] * f->Px[j + (size_t) k * n];
    kb_matmul(rx, r, n, 1.0, s->Pxt, s->N, s->A);     /* A = Px' S N */
    return 1;
}

/* Criterion m's delta-free terms: Y = S K_X, Y0 = S K_Y (or their
 * held-out means), [X, G] = N' [Y, Y0], Y_perp (in Y0), B_perp, cr_b =
 * sum_j G_bj X_bj; returns L_perp. */
static double kcv_low_project(const kcv_fold *f, const kcv_low_ws *s,
                              const kcv_crit_ws *v, int m, int qq)
{
    int n = f->n, r = f->ry, rx = f->rx, q = f->q;
    size_t nq = (size_t) n * qq, rq = (size_t) r * qq;
    if (m) {
        for (int j = 0; j < n; j++) {
            double sx = 0.0, sy = 0.0;
            for (int b = 0; b < q; b++) {
                sx += f->kx[j + (size_t) b * n];
                sy += f->ky[j + (size_t) b * n];
            }
            v->Y[j] = s->sv[j] * (sx / q);
            v->Y0[j] = s->sv[j] * (sy / q);
        }
    } else {
        for (int b = 0; b < 2 * q; b++)
            for (int j = 0; j < n; j++)
                v->Y[j + (size_t) b * n] =
                    s->sv[j] * f->kx[j + (size_t) b * n];
    }
    kb_matmul(r, 2 * qq, n, 1.0, s->Nt, v->Y, v->X);
    /* Y_perp = Y0 - N G, twice (G += the second pass's coefficients) */
    for (int pass = 0; pass < 2; pass++) {
        double *Gp = pass == 0 ? v->G : v->G2;
        if (pass == 1)
            kb_matmul(r, qq, n, 1.0, s->Nt, v->Y0, v->G2);
        kb_matmul(n, qq, r, 1.0, s->N, Gp, v->NG);
        for (size_t k = 0; k < nq; k++)
            v->Y0[k] -= v->NG[k];
    }
    for (size_t k = 0; k < rq; k++)
        v->G[k] += v->G2[k];
    kb_matmul(rx, qq, n, 1.0, s->Pxt, v->Y0, v->Bp);   /* B_perp */
    double Lp = 0.0;
    for (size_t k = 0; k < nq; k++)
        Lp += v->Y0[k] * v->Y[k];
    for (int b = 0; b < r; b++) {
        double t = 0.0;
        for (int j = 0; j < qq; j++)
            t += v->G[b + (size_t) j * r] * v->X[b + (size_t) j * r];
        s->cr[b] = t;
    }
    return Lp;
}

/* Criterion m at every delta: (||A D G + B_perp||^2 / c - 2 (sum_b d_b
 * cr_b + L_perp)) / c. */
static void kcv_low_deltas(kcv_ctx *c, R_xlen_t i, int m, const kcv_fold *f,
                           const kcv_low_ws *s, const kcv_crit_ws *v,
                           double Lp)
{
    int n = f->n, r = f->ry, rx = f->rx, qq = m ? 1 : f->q;
    double *DG = v->G2, *out = kcv_out(c, i, m);
    for (int k = 0; k < c->nd; k++) {
        double cc = (double) n * c->delta[k], lin = Lp, quad = 0.0;
        for (int b = 0; b < r; b++) {
            s->dd[b] = cc / (cc + (s->th[b] > 0.0 ? s->th[b] : 0.0));
            lin += s->dd[b] * s->cr[b];
        }
        for (int j = 0; j < qq; j++)
            for (int b = 0; b < r; b++)
                DG[b + (size_t) j * r] = s->dd[b] * v->G[b + (size_t) j * r];
        kb_matmul(rx, qq, r, 1.0, s->A, DG, v->B);
        for (size_t mm = 0; mm < (size_t) rx * qq; mm++) {
            double t = v->B[mm] + v->Bp[mm];
            quad += t * t;
        }
        double val = (quad / cc - 2.0 * lin) / cc;
        out[(size_t) c->ne * k] = val;
        if (!R_FINITE(val))
            c->status[i] = KCV_CRIT;
    }
}

static void kcv_item_iw_low(kcv_ctx *c, R_xlen_t i, double *w)
{
    int a = c->sel[i / c->ne], e = (int) (i % c->ne);
    const kcv_fold *f = c->f + a;
    kcv_low_ws s;
    kb_part parts[KCV_LOW_PARTS];
    kb_layout_carve(w, parts, kcv_low_parts(&s, c, f, parts));
    if (!kcv_item_mu(c, i, f, c->eps[e], s.C, s.t, s.mu) ||
        !kcv_low_basis(c, i, f, &s))
        return;
    for (int m = c->crit == 1; m <= (c->crit != 0); m++) {
        int qq = m ? 1 : f->q;
        kcv_crit_ws v;
        kb_part vp[KCV_CRIT_PARTS];
        kb_layout_carve(s.var, vp, kcv_crit_parts(&v, f, qq, vp));
        double Lp = kcv_low_project(f, &s, &v, m, qq);
        kcv_low_deltas(c, i, m, f, &s, &v, Lp);
    }
}

/* Scratch doubles of the largest item of the selected folds. */
static size_t kcv_item_scratch(const kcv_ctx *c)
{
    size_t per = 1;
    for (int s = 0; s < c->nsel; s++) {
        const kcv_fold *f = c->f + c->sel[s];
        size_t z;
        if (c->iw && f->low) {
            kcv_low_ws w;
            kb_part p[KCV_LOW_PARTS];
            z = kb_layout_size(p, kcv_low_parts(&w, c, f, p));
        } else {
            kcv_ws w;
            kb_part p[KCV_ITEM_PARTS];
            z = kb_layout_size(p, kcv_item_parts(&w, c, f, p));
        }
        per = z > per ? z : per;
    }
    return per;
}

/* ---- the two rounds ---------------------------------------------------- */

/* What the rounds share: the context, the thread cap, the progress. */
typedef struct {
    kcv_ctx *c;
    int nt;
    kb_progress *prog;
    double size;         /* progress steps in all: folds + items */
} kcv_runner;

/* Items 0..m-1 (each costing about `work` units) in rounds of nt, one
 * item per thread, with an interrupt check between rounds; returns the
 * first failed item, or -1.  status is cleared first.  This is the one
 * parallel loop of the package that is not a kb_loop: an item is a few
 * LAPACK calls on its own scratch (seconds at n ~ 2000), so a kb_loop
 * chunk of KB_TICK_WORK would be a single item anyway, and one item per
 * thread per round keeps the interrupt check and the progress report as
 * frequent as the items allow. */
static R_xlen_t kcv_rounds(const kcv_runner *run, kb_scratch s,
                           void (*item)(void *, R_xlen_t, double *), int m,
                           double work, double done0)
{
    kcv_ctx *c = run->c;
    memset(c->status, 0, (size_t) m * sizeof(int));
    int th = kb_threads_for(run->nt, work * (m < run->nt ? m : run->nt));
    for (int i0 = 0; i0 < m; i0 += th) {
        int i1 = i0 + th < m ? i0 + th : m;
#pragma omp parallel for num_threads(th) schedule(static, 1)
        for (int i = i0; i < i1; i++)
            item(c, i, kb_scratch_mine(s));
        for (int i = i0; i < i1; i++)
            if (c->status[i] != KCV_OK)
                return i;
        kb_check_interrupt();
        kb_progress_report(run->prog, done0 + i1, run->size, NA_REAL, 0);
    }
    return -1;
}

static void NORET kcv_fail(int code, int a, double eps)
{
    if (code == KCV_CHOL_GX)
        kb_error_numeric(_("cross-validation fold %d: G_X + n eps I is not "
                           "positive definite at eps = %g; increase 'eps'"),
                         a + 1, eps);
    if (code == KCV_MU)
        kb_error_numeric(_("cross-validation fold %d: mu = n (G_X + n eps "
                           "I)^{-1} m overflows at eps = %g; increase 'eps'"),
                         a + 1, eps);
    if (code == KCV_MU_BOUND)
        kb_error_numeric(_("cross-validation fold %d: mu = n (G_X + n eps "
                           "I)^{-1} m is numerically unstable at eps = %g "
                           "(||mu||^2 exceeds n, its bound in exact "
                           "arithmetic); increase 'eps'"), a + 1, eps);
    if (code == KCV_CRIT)
        kb_error_numeric(_("cross-validation fold %d: the criterion is not "
                           "finite at eps = %g; increase 'eps' or 'delta'"),
                         a + 1, eps);
    if (code == KCV_EIGEN)
        kb_error_numeric(_("cross-validation fold %d: the eigen-decomposition "
                           "of the fold's operator failed (LAPACK) at eps = %g"),
                         a + 1, eps);
    kb_error_numeric(_("cross-validation fold %d: a training Gram matrix is "
                       "zero or its pivoted Cholesky factorisation failed"),
                     a + 1);
}

/* "iw": each fold on its factor (thin QR) or by the n x n
 * eigen-decomposition, whichever its flop count favours; then the
 * eigensolver's and kb_qr's workspace for the largest order. */
static void kcv_choose(kcv_ctx *c, int iw)
{
    int rmax = 1;
    for (int s = 0; s < c->nsel; s++) {
        kcv_fold *f = c->f + c->sel[s];
        double n = f->n, r = f->ry, rx = f->rx,
            qq = c->crit == 1 ? 1.0 : f->q + (c->crit == 2),
            low = 6.0 * n * r * r + 3.3 * r * r * r + 2.0 * n * r * rx +
                2.0 * n * rx * qq + 10.0 * n * r * qq +
                2.0 * c->nd * rx * r * qq,
            eig = n * n * r + 3.3 * n * n * n + 3.0 * n * n * rx +
                4.0 * n * n * qq;
        f->low = iw == 2 || (iw == 1 && low <= eig);
        int dim = iw && !f->low ? f->n : f->ry;
        rmax = dim > rmax ? dim : rmax;
    }
    c->iw = iw != 0;
    kb_eigen_rrr_query(rmax, &c->lwork, &c->liwork);
    for (int s = 0; s < c->nsel; s++) {
        kcv_fold *f = c->f + c->sel[s];
        int l = c->iw && f->low ? kb_qr_query(f->n, f->ry) : 0;
        c->lqr = l > c->lqr ? l : c->lqr;
    }
}

/* The folds' factors (one item per fold: two pivoted Cholesky, ~n^3 / 3
 * each), then one (fold, eps) per item (about 10 n^3 at full rank). */
static void kcv_run(kcv_ctx *c, int nt, kb_progress *prog)
{
    int nitem = c->nsel * c->ne, iw = c->iw;
    double n3 = (double) c->nmax * c->nmax * c->nmax;
    kcv_runner run = {.c = c, .nt = nt, .prog = prog,
                      .size = c->nsel + nitem};
    c->status = (int *) R_alloc((size_t) nitem, sizeof(int));
    const void *vmax = vmaxget();   /* the factors' scratch, freed below */
    kb_scratch s1 = kb_scratch_alloc((size_t) c->nmax * c->nmax +
                                     3 * (size_t) c->nmax + c->N + 1, nt);
    R_xlen_t bad = kcv_rounds(&run, s1, kcv_factor, c->nsel, n3, 0.0);
    if (bad >= 0)
        kcv_fail(c->status[bad], c->sel[bad], 0.0);
    vmaxset(vmax);
    kcv_choose(c, iw);
    kb_scratch s2 = kb_scratch_alloc(kcv_item_scratch(c), nt);
    bad = kcv_rounds(&run, s2, kcv_item, nitem, 10.0 * n3, c->nsel);
    if (bad >= 0)
        kcv_fail(c->status[bad], c->sel[bad / c->ne], c->eps[bad % c->ne]);
    kb_progress_report(prog, run.size, run.size, NA_REAL, 1);
}

/* ---- arguments --------------------------------------------------------- */

/* The folds to evaluate (0-based) from `only` (1-based; empty: all). */
static void kcv_only(kcv_ctx *c, SEXP only_)
{
    int K = c->K, nsel = Rf_length(only_);
    if (TYPEOF(only_) != INTSXP)
        kb_error_arg(_("'only' must be an integer vector"));
    int *sel = (int *) R_alloc((size_t) K, sizeof(int));
    if (nsel == 0) {
        nsel = K;
        for (int a = 0; a < K; a++)
            sel[a] = a;
    } else {
        if (nsel > K)
            kb_error_arg(_("'only' is too long"));
        for (int a = 0; a < nsel; a++) {
            sel[a] = INTEGER(only_)[a] - 1;
            if (sel[a] < 0 || sel[a] >= K)
                kb_error_arg(_("'only' must hold 1..%d"), K);
            for (int b = 0; b < a; b++)
                if (sel[b] == sel[a])
                    kb_error_arg(_("'only' must not repeat a fold"));
        }
    }
    c->sel = sel;
    c->nsel = nsel;
}

/* The grid: eps and delta positive numbers. */
static void kcv_grid(kcv_ctx *c, SEXP eps_, SEXP delta_)
{
    int ne = Rf_length(eps_), nd = Rf_length(delta_);
    if (TYPEOF(eps_) != REALSXP || TYPEOF(delta_) != REALSXP || ne < 1 ||
        nd < 1)
        kb_error_arg(_("'eps' and 'delta' must be non-empty numeric "
                       "vectors"));
    for (int e = 0; e < ne; e++)
        if (!(REAL(eps_)[e] > 0.0) || !R_FINITE(REAL(eps_)[e]))
            kb_error_arg(_("'eps' must be positive"));
    for (int k = 0; k < nd; k++)
        if (!(REAL(delta_)[k] > 0.0) || !R_FINITE(REAL(delta_)[k]))
            kb_error_arg(_("'delta' must be positive"));
    c->eps = REAL(eps_);
    c->delta = REAL(delta_);
    c->ne = ne;
    c->nd = nd;
}

/* Each selected fold's sizes and arrays (kcv_fold); c->nmax. */
static void kcv_folds(kcv_ctx *c)
{
    int N = c->N, K = c->K;
    c->f = (kcv_fold *) R_alloc((size_t) K, sizeof(kcv_fold));
    for (int i = 0; i < N; i++)
        if (c->fold[i] < 1 || c->fold[i] > K)
            kb_error_arg(_("'fold' must hold 1..%d"), K);
    for (int s = 0; s < c->nsel; s++) {
        int a = c->sel[s], q = 0;
        for (int i = 0; i < N; i++)
            q += c->fold[i] == a + 1;
        if (q < 1 || q >= N)
            kb_error_arg(_("every fold must hold some but not all points"));
        kcv_fold *f = c->f + a;
        int n = N - q;
        size_t nn = (size_t) n * n;
        f->n = n;
        f->q = q;
        f->gx = (double *) R_alloc(4 * nn + 2 * (size_t) n * q + n,
                                   sizeof(double));
        f->Px = f->gx + nn;
        f->Pyt = f->Px + nn;
        f->PtP = f->Pyt + nn;
        f->kx = f->PtP + nn;
        f->ky = f->kx + (size_t) n * q;
        f->m = f->ky + (size_t) n * q;
        c->nmax = n > c->nmax ? n : c->nmax;
    }
}

/* The result: ne x nd x K (x 2 for both criteria), NA until evaluated. */
static SEXP kcv_result(kcv_ctx *c)
{
    SEXP ans;
    if (c->crit == 2) {
        SEXP dim = PROTECT(Rf_allocVector(INTSXP, 4));
        INTEGER(dim)[0] = c->ne, INTEGER(dim)[1] = c->nd,
            INTEGER(dim)[2] = c->K, INTEGER(dim)[3] = 2;
        ans = Rf_allocArray(REALSXP, dim);
        UNPROTECT(1);
        PROTECT(ans);
    } else
        ans = PROTECT(Rf_alloc3DArray(REALSXP, c->ne, c->nd, c->K));
    c->out = REAL(ans);
    for (R_xlen_t k = 0; k < XLENGTH(ans); k++)
        c->out[k] = NA_REAL;
    UNPROTECT(1);
    return ans;
}

/* .Call entry: kbr_cv()'s folds.  gx, gy: the N x N Gram matrices; fold:
 * the fold (1..K) of each point; ctl: a named list of the settings:
 * folds (K); only: the folds to evaluate (1-based; empty: all); eps,
 * delta: the grid's values (their product is evaluated); criterion:
 * "regression", "marginal" or "both"; method: "kbr", "iw" (each fold's
 * form by its cost), or, for the tests, "iw_factor" / "iw_eigen" (one
 * form for every fold); nthreads; progress: a function (i, size, ksd) or
 * NULL, told the (fold, eps) pairs done.  Returns the ne x nd x K
 * criterion terms (kcv_item; R adds each fold's constants; NA for the
 * folds not evaluated), ne x nd x K x 2 for both (regression, then
 * marginal). */
SEXP kb_kbr_cv(SEXP gx, SEXP gy, SEXP fold_, SEXP ctl)
{
    static const char *const methods[] = {"kbr", "iw", "iw_factor",
                                          "iw_eigen", NULL},
        *const criteria[] = {"regression", "marginal", "both", NULL};
    kcv_ctx c = {.nmax = 0};
    c.iw = kb_arg_choice(kb_list_elt(ctl, "method"), "method", methods);
    c.crit = kb_arg_choice(kb_list_elt(ctl, "criterion"), "criterion",
                           criteria);
    c.N = kb_arg_square(gx, "G_X");
    kb_arg_matrix(gy, "G_Y", c.N, c.N);
    c.GX = REAL(gx);
    c.GY = REAL(gy);
    c.K = kb_scalar_int(kb_list_elt(ctl, "folds"), "folds");
    if (TYPEOF(fold_) != INTSXP || XLENGTH(fold_) != c.N || c.K < 2)
        kb_error_arg(_("'fold' must be an integer vector of length %d, "
                       "'folds' at least 2"), c.N);
    c.fold = INTEGER(fold_);
    kcv_only(&c, kb_list_elt(ctl, "only"));
    kcv_grid(&c, kb_list_elt(ctl, "eps"), kb_list_elt(ctl, "delta"));
    int nt = kb_nthreads(kb_list_elt(ctl, "nthreads"));
    kcv_folds(&c);
    SEXP ans = PROTECT(kcv_result(&c));
    kb_progress prog;
    kb_progress_init(&prog, kb_list_elt(ctl, "progress"));
    kcv_run(&c, nt, &prog);
    UNPROTECT(1);
    return ans;
}
