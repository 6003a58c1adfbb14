/* KSD-optimal weights (ksd_weights()): argmin w'Kw over the
 * simplex {w >= 0, sum_i w_i = 1}, K the n x n Stein kernel matrix
 * (symmetric positive semi-definite), formed once by stein.c.
 *
 * A primal active-set method (Nocedal & Wright 2006, Algorithm 16.3, on
 * the simplex; the loop of Lawson & Hanson's NNLS): the support P holds the
 * free weights; the optimum of the equality-constrained problem on P is
 * z = K_PP^{-1} 1 / 1'K_PP^{-1} 1.  When z > 0 it is the new iterate;
 * when a weight of z is not positive the iterate steps from w towards z
 * until the first weight reaches zero, and that point leaves P.  At each
 * new iterate the points with the most negative KKT residuals
 * (Kw)_i - w'Kw (at most `batch`, 16 from R) enter P together: the
 * optimum on the larger support is still strictly better than w, so the
 * objective decreases at every step that moves, and one gradient serves
 * several entries (a point that turns out useless leaves again at once;
 * batch 1 is the classic method, 3-4 times slower at n = 5000 for the
 * same optimum).  The loop stops when no residual is below
 * -(tol w'Kw + tol_abs max_i K_ii).
 *
 * K_PP is held as its upper Cholesky factor R in packed storage, updated
 * when points enter (block bordering: one triangular solve with all of
 * them as right-hand sides, the new columns appended) and when one leaves
 * (Givens rotations on the columns after it), so each entry or exit costs
 * O(|P|^2); each new iterate costs the
 * gradient Kw on the support's columns, O(n |P|) (in row blocks, on
 * nthreads threads; each row's sum in a fixed order, so the result does
 * not depend on the number of threads).
 *
 * K is often numerically singular (near-duplicate points, smooth kernels):
 * the method works on K + delta I, delta = ridge * max_i K_ii (R passes
 * ridge = 1e-12), a strictly convex problem (unique optimum, finite
 * termination) whose optimum is within delta |w|^2 <= delta of the
 * objective's.  A bordered pivot below delta / 2 (rounding has eaten the
 * factor's accuracy) refactorises K_PP + delta I from scratch.  Points
 * that enter and leave again without the iterate moving (residuals at
 * rounding level) are not offered again until it moves. */
#include <float.h>
#include "linalg.h"
#include "args.h"
#include "runtime.h"
#include "callback.h"
#include "entries.h"

/* Rows of K in one item of the gradient loop. */
#define QP_ROWS 256

typedef struct {
    const double *K;   /* n x n, column-major */
    int n;
    double delta;      /* the ridge on the diagonal */
    int s, cap;        /* support size; columns R has room for */
    int *P;            /* the support, in the order of R's columns */
    int *pos;          /* pos[i]: the place of i in P, or -1 */
    double *R;         /* packed upper Cholesky factor of K_PP + delta I */
    double *w, *g;     /* weights; gradient (K + delta I) w (both n) */
    double *z, *y;     /* the optimum on P; R^{-T} 1 (n each) */
    double *buf, *cs, *sn;  /* scratch for the Givens rotations (n each) */
    double **cols;     /* scratch: the entering columns of R (batch) */
    int refactors;
    int *blocked;      /* blocked[i] == gen: i entered and left at gen */
    int *enter;        /* the points entering (batch), and their */
    double *genter;    /* residuals, most negative first */
} qp_state;

/* g[i] = delta w_i + sum_{j in P} K_ij w_j for the rows of block b (four
 * columns at a time, always in the order of P). */
static void gradient_rows(void *ctx, R_xlen_t b, double *scratch)
{
    (void) scratch;
    const qp_state *q = (const qp_state *) ctx;
    const R_xlen_t n = q->n, i0 = b * QP_ROWS;
    const int m = (int) (n - i0 < QP_ROWS ? n - i0 : QP_ROWS);
    double *g = q->g + i0;
    const double *w = q->w;
    for (int t = 0; t < m; t++)
        g[t] = q->delta * w[i0 + t];
    int k = 0;
    for (; k + 4 <= q->s; k += 4) {
        const int j0 = q->P[k], j1 = q->P[k + 1], j2 = q->P[k + 2],
            j3 = q->P[k + 3];
        const double w0 = w[j0], w1 = w[j1], w2 = w[j2], w3 = w[j3];
        const double *c0 = q->K + j0 * n + i0, *c1 = q->K + j1 * n + i0,
            *c2 = q->K + j2 * n + i0, *c3 = q->K + j3 * n + i0;
#pragma omp simd
        for (int t = 0; t < m; t++)
            g[t] += (w0 * c0[t] + w1 * c1[t]) + (w2 * c2[t] + w3 * c3[t]);
    }
    for (; k < q->s; k++) {
        const int j = q->P[k];
        const double wj = w[j], *c = q->K + j * n + i0;
#pragma omp simd
        for (int t = 0; t < m; t++)
            g[t] += wj * c[t];
    }
}

/* The gradient (K + delta I) w into q->g; returns w'(K + delta I) w. */
static double gradient(qp_state *q, int nt)
{
    R_xlen_t blocks = (q->n + QP_ROWS - 1) / QP_ROWS;
    kb_loop L = {.nt = nt, .cost0 = (double) QP_ROWS * (q->s + 1),
                 .item = gradient_rows, .ctx = q};
    kb_loop_run(&L, 0, blocks);
    double lam = 0.0;
    for (int k = 0; k < q->s; k++)
        lam += q->w[q->P[k]] * q->g[q->P[k]];
    return lam;
}

static double *packed_col(const qp_state *q, int c)
{
    return q->R + (size_t) c * (c + 1) / 2;
}

/* Solves with the packed factor R of order s, in place of b: R'x = b (a
 * dot product per column) and R x = b (an axpy per column).  LAPACK's
 * dtpsv does the same; written out here so that the loops vectorise (R's
 * reference BLAS does not), which halves the solver's time. */
static void solve_rt(const qp_state *q, int s, double *b)
{
    for (int k = 0; k < s; k++) {
        const double *c = packed_col(q, k);
        double t = 0.0;
#pragma omp simd reduction(+:t)
        for (int l = 0; l < k; l++)
            t += c[l] * b[l];
        b[k] = (b[k] - t) / c[k];
    }
}

static void solve_r(const qp_state *q, int s, double *b)
{
    for (int k = s - 1; k >= 0; k--) {
        const double *c = packed_col(q, k);
        const double xk = b[k] / c[k];
        b[k] = xk;
#pragma omp simd
        for (int l = 0; l < k; l++)
            b[l] -= xk * c[l];
    }
}

/* Room in R for `need` columns (capacity doubled, at most n). */
static void reserve(qp_state *q, int need)
{
    if (need <= q->cap)
        return;
    int cap = q->cap;
    while (cap < need)
        cap = cap > q->n / 2 ? q->n : 2 * cap;
    double *R = (double *) R_alloc((size_t) cap * (cap + 1) / 2,
                                   sizeof(double));
    memcpy(R, q->R, (size_t) q->s * (q->s + 1) / 2 * sizeof(double));
    q->R = R;
    q->cap = cap;
}

/* R from scratch: the packed Cholesky factor of K_PP + delta I. */
static void refactor(qp_state *q)
{
    const R_xlen_t n = q->n;
    for (int c = 0; c < q->s; c++) {
        double *col = packed_col(q, c);
        const double *Kc = q->K + q->P[c] * n;
        for (int r = 0; r <= c; r++)
            col[r] = Kc[q->P[r]];
        col[c] += q->delta;
    }
    kb_chol_packed(q->s, q->R, _("the Stein kernel matrix on the support of "
                                 "the KSD-optimal weights is numerically "
                                 "singular even with a ridge: scale the data "
                                 "or the kernel"));
    q->refactors++;
}

/* The m points J enter P, as the last m columns of R (block bordering:
 * the columns' first s rows solve R'B = K_PJ, all m at once, so that each
 * column of R is read from memory once and used m times; their last rows
 * are the Cholesky factor of K_JJ + delta I - B'B, column by column). */
static void add_points(qp_state *q, const int *J, int m)
{
    const int s = q->s;
    reserve(q, s + m);
    const R_xlen_t n = q->n;
    double **cols = q->cols;
    for (int t = 0; t < m; t++) {
        cols[t] = packed_col(q, s + t);
        const double *Kj = q->K + J[t] * n;
        for (int k = 0; k < s; k++)
            cols[t][k] = Kj[q->P[k]];
    }
    for (int k = 0; k < s; k++) {
        const double *c = packed_col(q, k);
        for (int t = 0; t < m; t++) {
            double *b = cols[t], acc = 0.0;
#pragma omp simd reduction(+:acc)
            for (int l = 0; l < k; l++)
                acc += c[l] * b[l];
            b[k] = (b[k] - acc) / c[k];
        }
    }
    int ok = 1;
    for (int t = 0; t < m && ok; t++) {
        double *b = cols[t];
        const double *Kj = q->K + J[t] * n;
        for (int u = 0; u < t; u++) {
            const double *c = cols[u];
            double acc = 0.0;
#pragma omp simd reduction(+:acc)
            for (int l = 0; l < s + u; l++)
                acc += c[l] * b[l];
            b[s + u] = (Kj[J[u]] - acc) / c[s + u];
        }
        double rr = 0.0;
#pragma omp simd reduction(+:rr)
        for (int l = 0; l < s + t; l++)
            rr += b[l] * b[l];
        double rho2 = Kj[J[t]] + q->delta - rr;
        if (rho2 > 0.5 * q->delta)
            b[s + t] = sqrt(rho2);
        else
            ok = 0;
    }
    for (int t = 0; t < m; t++) {
        q->P[s + t] = J[t];
        q->pos[J[t]] = s + t;
    }
    q->s = s + m;
    if (!ok)
        refactor(q);
}

/* The point at place k of P leaves: its column is removed from R and the
 * columns after it are brought back to triangular form by Givens
 * rotations on rows (c, c + 1), c = k, k + 1, ...; column c + 1 of the
 * old factor becomes column c of the new one, written in place (its new
 * packed position ends where the old one starts).  The same rotations
 * take y = R^{-T} 1 to the new factor's (the first s - 1 entries of G y,
 * since (G R~)'(G y) = R~'y = 1 for R~, R without the column). */
static void drop_point(qp_state *q, int k)
{
    const int s = q->s;
    double *buf = q->buf, *cs = q->cs, *sn = q->sn, *y = q->y;
    for (int c = k; c < s - 1; c++) {
        memcpy(buf, packed_col(q, c + 1), (size_t) (c + 2) * sizeof(double));
        for (int l = k; l < c; l++) {
            double a = buf[l], b = buf[l + 1];
            buf[l] = cs[l] * a + sn[l] * b;
            buf[l + 1] = cs[l] * b - sn[l] * a;
        }
        double a = buf[c], b = buf[c + 1], r = hypot(a, b);
        cs[c] = r > 0.0 ? a / r : 1.0;
        sn[c] = r > 0.0 ? b / r : 0.0;
        buf[c] = r;
        memcpy(packed_col(q, c), buf, (size_t) (c + 1) * sizeof(double));
        double ya = y[c], yb = y[c + 1];
        y[c] = cs[c] * ya + sn[c] * yb;
        y[c + 1] = cs[c] * yb - sn[c] * ya;
    }
    q->pos[q->P[k]] = -1;
    for (int c = k; c < s - 1; c++) {
        q->P[c] = q->P[c + 1];
        q->pos[q->P[c]] = c;
    }
    q->s = s - 1;
}

/* z = the optimum on P, (K_PP + delta I)^{-1} 1 = R^{-1} y normalised to
 * sum 1, y = R^{-T} 1 (computed when fresh, else kept by drop_point). */
static void solve_support(qp_state *q, int fresh)
{
    const int s = q->s;
    double *z = q->z, *y = q->y, tot = 0.0;
    if (fresh) {
        for (int k = 0; k < s; k++)
            y[k] = 1.0;
        solve_rt(q, s, y);
    }
    for (int k = 0; k < s; k++)
        z[k] = y[k];
    solve_r(q, s, z);
    for (int k = 0; k < s; k++)
        tot += z[k];
    if (!(tot > 0.0) || !R_FINITE(tot))
        kb_error_numeric(_("solving for the KSD-optimal weights on %d points "
                           "fails (1'K^-1 1 is %g): scale the data or the "
                           "kernel"), s, tot);
    for (int k = 0; k < s; k++)
        z[k] /= tot;
}

/* Inner loop after points entered: move to the optimum on P, dropping
 * the points whose weights reach zero on the way (each exit ticks: a long
 * run of exits on a large support stays interruptible).  Returns 1 when w
 * moved. */
static int optimise_support(qp_state *q, kb_ticker *tick)
{
    int moved = 0, fresh = 1;
    double *w = q->w, *z = q->z;
    for (;; fresh = 0) {
        solve_support(q, fresh);
        int kb = -1;
        double alpha = 1.0;
        for (int k = 0; k < q->s; k++) {
            if (z[k] > 0.0)
                continue;
            double wk = w[q->P[k]], a = wk / (wk - z[k]);
            if (kb < 0 || a < alpha) {
                alpha = a;
                kb = k;
            }
        }
        if (kb < 0) {
            for (int k = 0; k < q->s; k++)
                w[q->P[k]] = z[k];
            return 1;
        }
        if (alpha > 0.0) {
            /* every entering point has z > 0 here and gets a positive
             * weight: the points at zero now are the blocking ones */
            moved = 1;
            for (int k = 0; k < q->s; k++)
                w[q->P[k]] += alpha * (z[k] - w[q->P[k]]);
            w[q->P[kb]] = 0.0;
            for (int k = q->s - 1; k >= 0; k--)
                if (w[q->P[k]] <= 0.0) {
                    w[q->P[k]] = 0.0;
                    drop_point(q, k);
                }
        } else {
            /* an entering point (weight 0) with z <= 0: only it leaves */
            drop_point(q, kb);
        }
        kb_tick(tick, 4.0 * q->s * q->s);
        if (q->s == 0)
            kb_error_numeric(_("the active-set solver for the KSD-optimal "
                               "weights lost all points (the Stein kernel "
                               "matrix is too ill conditioned): scale the "
                               "data or the kernel"));
        double tot = 0.0;
        for (int k = 0; k < q->s; k++)
            tot += w[q->P[k]];
        for (int k = 0; k < q->s; k++)
            w[q->P[k]] /= tot;
    }
    return moved;
}

/* The solver's settings (the control list of kb_simplex_weights). */
typedef struct {
    double ridge, tol, tol_abs;
    int max_iter, batch;
} qp_control;

static qp_control qp_read_control(SEXP control)
{
    qp_control c;
    c.ridge = kb_scalar_real(kb_list_elt(control, "ridge"), "ridge");
    c.tol = kb_scalar_real(kb_list_elt(control, "tol"), "tol");
    c.max_iter = kb_scalar_int(kb_list_elt(control, "max_iter"), "max_iter");
    c.batch = kb_scalar_int(kb_list_elt(control, "batch"), "batch");
    c.tol_abs = kb_scalar_real(kb_list_elt(control, "tol_abs"), "tol_abs");
    if (!(c.ridge >= 0.0) || !(c.tol >= 0.0) || !(c.tol_abs >= 0.0) ||
        c.max_iter < 1 || c.batch < 1)
        kb_error_arg(_("'control' needs ridge >= 0, tol >= "
                       "0, max_iter >= 1 and batch >= 1"));
    return c;
}

/* The ridge: a multiple of max_i K_ii, at least the smallest normal
 * number (the problem stays strictly convex). */
static double ridge_delta(double ridge, double mx)
{
    double delta = ridge * mx;
    return delta > 0.0 ? delta : DBL_MIN;
}

/* The state's arrays, and the start: the best vertex (the smallest K_ii).
 * Returns max_i K_ii. */
static double qp_init(qp_state *q, const double *Kx, int n,
                      const qp_control *ctl)
{
    int i0 = 0;
    double mx = 0.0;
    for (int i = 0; i < n; i++) {
        double d = Kx[(R_xlen_t) i * n + i];
        if (d > mx)
            mx = d;
        if (d < Kx[(R_xlen_t) i0 * n + i0])
            i0 = i;
    }
    if (!(mx > 0.0))
        kb_error_numeric(_("the Stein kernel matrix has no positive diagonal "
                           "entry: scale the data or the kernel"));
    *q = (qp_state) {.K = Kx, .n = n, .delta = ridge_delta(ctl->ridge, mx),
                     .s = 0, .cap = n < 64 ? n : 64};
    q->P = (int *) R_alloc((size_t) n, sizeof(int));
    q->pos = (int *) R_alloc((size_t) n, sizeof(int));
    q->blocked = (int *) R_alloc((size_t) n, sizeof(int));
    q->R = (double *) R_alloc((size_t) q->cap * (q->cap + 1) / 2,
                              sizeof(double));
    double *work = (double *) R_alloc((size_t) 7 * n, sizeof(double));
    q->w = work;
    q->g = work + n;
    q->z = work + 2 * (size_t) n;
    q->buf = work + 3 * (size_t) n;
    q->cs = work + 4 * (size_t) n;
    q->sn = work + 5 * (size_t) n;
    q->y = work + 6 * (size_t) n;
    for (int i = 0; i < n; i++) {
        q->pos[i] = -1;
        q->blocked[i] = -1;
        q->w[i] = 0.0;
    }
    q->cols = (double **) R_alloc((size_t) ctl->batch, sizeof(double *));
    q->enter = (int *) R_alloc((size_t) ctl->batch, sizeof(int));
    q->genter = (double *) R_alloc((size_t) ctl->batch, sizeof(double));
    add_points(q, &i0, 1);
    q->w[i0] = 1.0;
    return mx;
}

/* The (at most nmax) points off P with the most negative KKT residuals
 * below cut, most negative first, into q->enter; returns their number. */
static int qp_entering(qp_state *q, double cut, int gen, int nmax)
{
    int ne = 0;
    for (int i = 0; i < q->n; i++) {
        double gi = q->g[i];
        if (!R_FINITE(gi))
            kb_error_numeric(_("the weighted Stein kernel sums overflow "
                               "while solving for the KSD-optimal "
                               "weights: scale the data or the kernel"));
        if (!(gi < cut) || q->pos[i] >= 0 || q->blocked[i] == gen)
            continue;
        if (ne == nmax && !(gi < q->genter[ne - 1]))
            continue;
        int k = ne < nmax ? ne++ : ne - 1;
        for (; k > 0 && gi < q->genter[k - 1]; k--) {
            q->genter[k] = q->genter[k - 1];
            q->enter[k] = q->enter[k - 1];
        }
        q->genter[k] = gi;
        q->enter[k] = i;
    }
    return ne;
}

/* The active-set loop from q's start; returns the objective w'(K +
 * delta I)w at the optimum, its steps in *iter. */
static double qp_solve(qp_state *q, const qp_control *ctl, double mx, int nt,
                       kb_progress *prog, int *iter)
{
    kb_ticker tick = KB_TICKER_INIT;
    int gen = 0, n = q->n;
    double lam;
    *iter = 0;
    for (;;) {
        lam = gradient(q, nt);
        int ne = qp_entering(q, lam - (ctl->tol * lam + ctl->tol_abs * mx),
                             gen, ctl->batch);
        if (ne == 0)
            break;
        if (++*iter > ctl->max_iter)
            kb_error_numeric(_("the active-set solver for the KSD-optimal "
                               "weights did not converge in %d steps"),
                             ctl->max_iter);
        add_points(q, q->enter, ne);
        if (optimise_support(q, &tick))
            gen++;
        else
            for (int k = 0; k < ne; k++)
                q->blocked[q->enter[k]] = gen;
        if (kb_tick(&tick, (double) n * q->s + (double) ne * q->s * q->s) ||
            prog->fn != R_NilValue)
            kb_progress_report(prog, *iter, q->s, sqrt(fmax(lam, 0.0)), 0);
    }
    kb_progress_report(prog, *iter, q->s, sqrt(fmax(lam, 0.0)), 1);
    return lam;
}

/* .Call entry: the weights on the rows of K; control = list(ridge, tol,
 * tol_abs, max_iter, batch): the ridge relative to max K_ii, the stopping
 * tolerance on the KKT residual relative to the objective, the absolute
 * one relative to max K_ii (for rounding), the cap on steps, the cap on
 * points entering at one gradient.  progress: a function(i, size, ksd) or
 * NULL.  Returns list(weights, iterations, support, refactors, objective)
 * (the objective of K + delta I). */
SEXP kb_simplex_weights(SEXP K, SEXP control, SEXP nthreads, SEXP progress)
{
    int n = kb_arg_square(K, "K");
    if (n < 1)
        kb_error_arg(_("'K' must have at least one row"));
    R_xlen_t bad = kb_first_nonfinite(REAL(K), (R_xlen_t) n * n);
    if (bad >= 0)
        kb_error_arg(_("'K' must not contain NA, NaN or Inf "
                       "(element %.0f)"), (double) bad + 1);
    qp_control ctl = qp_read_control(control);
    int nt = kb_nthreads(nthreads), iter;
    kb_progress prog;
    kb_progress_init(&prog, progress);
    qp_state q;
    double mx = qp_init(&q, REAL(K), n, &ctl);
    double lam = qp_solve(&q, &ctl, mx, nt, &prog, &iter);
    const char *nms[] = {"weights", "iterations", "support", "refactors",
                         "objective", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP w = Rf_allocVector(REALSXP, n);
    SET_VECTOR_ELT(ans, 0, w);
    memcpy(REAL(w), q.w, (size_t) n * sizeof(double));
    SET_VECTOR_ELT(ans, 1, Rf_ScalarInteger(iter));
    SET_VECTOR_ELT(ans, 2, Rf_ScalarInteger(q.s));
    SET_VECTOR_ELT(ans, 3, Rf_ScalarInteger(q.refactors));
    SET_VECTOR_ELT(ans, 4, Rf_ScalarReal(lam));
    UNPROTECT(1);
    return ans;
}
