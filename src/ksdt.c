/* KSDT: online KSD thinning (Hawkins, Koppel & Zhang; DESIGN.md "KSDT").
 * The dictionary D keeps its points, scores, diagonal terms k_p(x_i, x_i)
 * and row sums r_i = sum_{j in D} k_p(x_i, x_j), and the total
 * S = sum_i r_i; never its Gram matrix.  Adding a point costs one row
 * (|D| evaluations); removing one costs one row too, except the newest
 * point, whose row is kept from when it was added.
 *
 * The state lives in malloc'd memory owned by an external pointer with a
 * finalizer, so it survives between pushes from R, and an error or an
 * interrupt between two steps leaves it consistent and leaks nothing. */
#include <limits.h>
#include <time.h>
#include "stein.h"
#include "samplers.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    kb_kernel K;
    double *lam;               /* own copy of the kernel's eigenvalues */
    int d, n, cap, newest;     /* newest: position of the last added point */
    double *X, *S;             /* cap x d, kernel coordinates (ld = cap) */
    double *Xo, *So;           /* cap x d, the user's coordinates */
    double *r, *kd, *cache;    /* row sums, diagonal, newest point's row */
    double *sidx;              /* stream index of each point (1-based) */
    double *pt;                /* scratch: one point and its score */
    double *crows;             /* SP-MCMC candidates' rows (ccap doubles) */
    size_t ccap;
    double Ssum;               /* sum over D x D */
    double t;                  /* states seen */
    double evals;              /* kernel evaluations */
    R_xlen_t hlen, hcap;       /* per-step history */
    double *h_ksd, *h_size, *h_removed;
    /* scratch for a pass: per-block sums and minima */
    int nbcap;
    double *bsum, *bval;
} ksdt_state;

static void state_free(ksdt_state *st)
{
    if (!st) return;
    free(st->lam);
    free(st->X); free(st->S); free(st->Xo); free(st->So);
    free(st->r); free(st->kd); free(st->cache); free(st->sidx);
    free(st->h_ksd); free(st->h_size); free(st->h_removed);
    free(st->bsum); free(st->bval); free(st->pt);
    free(st->crows);
    free(st);
}

static void finalizer(SEXP ptr)
{
    ksdt_state *st = (ksdt_state *) R_ExternalPtrAddr(ptr);
    state_free(st);
    R_ClearExternalPtr(ptr);
}

static ksdt_state *get_state(SEXP ptr)
{
    if (TYPEOF(ptr) != EXTPTRSXP)
        Rf_error(_("'stream' must be a KSDT stream"));
    ksdt_state *st = (ksdt_state *) R_ExternalPtrAddr(ptr);
    if (!st)
        Rf_error(_("the KSDT stream is no longer valid (saved and reloaded?); "
                   "create a new one"));
    return st;
}

/* realloc that raises an R error on failure, leaving *p untouched. */
static void grow(void **p, size_t bytes)
{
    void *q = realloc(*p, bytes);
    if (!q)
        Rf_error(_("KSDT: cannot allocate %.0f bytes"), (double) bytes);
    *p = q;
}

/* Column-major cap x d matrices: move to a larger leading dimension. */
static void grow_matrix(double **A, int d, int n, int oldcap, int newcap)
{
    double *B = (double *) malloc((size_t) newcap * d * sizeof(double));
    if (!B)
        Rf_error(_("KSDT: cannot allocate the dictionary"));
    for (int k = 0; k < d; k++)
        if (n > 0)
            memcpy(B + (size_t) k * newcap, *A + (size_t) k * oldcap,
                   (size_t) n * sizeof(double));
    free(*A);
    *A = B;
}

static void ensure_capacity(ksdt_state *st, int need)
{
    if (need <= st->cap)
        return;
    int nc = st->cap < 64 ? 64 : st->cap;
    while (nc < need)
        nc = nc > INT_MAX / 2 ? INT_MAX : 2 * nc;
    int d = st->d;
    grow_matrix(&st->X, d, st->n, st->cap, nc);
    grow_matrix(&st->S, d, st->n, st->cap, nc);
    grow_matrix(&st->Xo, d, st->n, st->cap, nc);
    grow_matrix(&st->So, d, st->n, st->cap, nc);
    grow((void **) &st->r, (size_t) nc * sizeof(double));
    grow((void **) &st->kd, (size_t) nc * sizeof(double));
    grow((void **) &st->cache, (size_t) nc * sizeof(double));
    grow((void **) &st->sidx, (size_t) nc * sizeof(double));
    int nb = (nc + KB_BLOCK - 1) / KB_BLOCK;
    grow((void **) &st->bsum, (size_t) nb * sizeof(double));
    grow((void **) &st->bval, (size_t) nb * sizeof(double));
    st->nbcap = nb;
    st->cap = nc;
}

static void ensure_history(ksdt_state *st, R_xlen_t need)
{
    if (need <= st->hcap)
        return;
    R_xlen_t nc = st->hcap < 1024 ? 1024 : st->hcap;
    while (nc < need)
        nc *= 2;
    grow((void **) &st->h_ksd, (size_t) nc * sizeof(double));
    grow((void **) &st->h_size, (size_t) nc * sizeof(double));
    grow((void **) &st->h_removed, (size_t) nc * sizeof(double));
    st->hcap = nc;
}

/* Removal criterion: KSD^2 without point i is (S - 2 r_i + kd_i)/(n-1)^2,
 * so the best point to remove minimises kd_i - 2 r_i; ties go to the
 * older point (smaller stream index). */
static inline int better(double v, double si, double bv, double bsi)
{
    return v < bv || (v == bv && si < bsi);
}

/* Minimum of v[0..m) (no NaN): four independent chains, because a simd
 * min-reduction kept in memory by the compiler costs a store-forwarding
 * round trip per element. */
static double block_min(const double *v, int m)
{
    double m0 = R_PosInf, m1 = R_PosInf, m2 = R_PosInf, m3 = R_PosInf;
    int t = 0;
    for (; t + 4 <= m; t += 4) {
        m0 = v[t] < m0 ? v[t] : m0;
        m1 = v[t + 1] < m1 ? v[t + 1] : m1;
        m2 = v[t + 2] < m2 ? v[t + 2] : m2;
        m3 = v[t + 3] < m3 ? v[t + 3] : m3;
    }
    for (; t < m; t++)
        m0 = v[t] < m0 ? v[t] : m0;
    m0 = m1 < m0 ? m1 : m0;
    m2 = m3 < m2 ? m3 : m2;
    return m2 < m0 ? m2 : m0;
}

/* One pass over positions [0, n): with row_known NULL, compute
 * k_p(x, x_i) (into st->cache when keep is set); then r_i += sign * k
 * (only when apply is set: otherwise a dry run), per-block sums and
 * per-block minima of kd_i - 2 (r_i + sign k). */
/* The parallel regions below run once per stream step, so they only pay
 * off for large dictionaries: at 2048 points (the former threshold) a
 * region held ~12 us of work, and on a machine with other busy processes
 * the barrier waits for a descheduled thread made 2 threads up to 200x
 * slower than 1 (15,000 states: 87.5 s vs 0.44 s).  Now 16384 points. */
static void pass(ksdt_state *st, int n, const double *x, const double *s,
                 const double *row_known, double sign, int keep, int apply,
                 int nt)
{
    int nb = (n + KB_BLOCK - 1) / KB_BLOCK;
    const kb_kernel *K = &st->K;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= KB_PAR_MIN_EVALS / 4)
#endif
    for (int b = 0; b < nb; b++) {
        int i0 = b * KB_BLOCK, m = n - i0 < KB_BLOCK ? n - i0 : KB_BLOCK;
        double buf[KB_BLOCK], sum = 0.0, bv;
        const double *row;
        if (row_known) {
            row = row_known + i0;
        } else {
            kb_stein_row(K, x, s, st->X, st->S, st->cap, i0, i0 + m, buf);
            if (keep)
                memcpy(st->cache + i0, buf, (size_t) m * sizeof(double));
            row = buf;
        }
        double *r = st->r + i0;
        const double *kd = st->kd + i0;
        double vals[KB_BLOCK];
#pragma omp simd reduction(+:sum)
        for (int t = 0; t < m; t++) {
            double rt = r[t] + sign * row[t];
            if (apply)
                r[t] = rt;
            sum += row[t];
            vals[t] = kd[t] - 2.0 * rt;
        }
        bv = block_min(vals, m);
        st->bsum[b] = sum;
        st->bval[b] = bv;
    }
    if (!row_known)
        st->evals += n;
}

/* The best point to remove after a pass over n positions: the smallest
 * kd_i - 2 r_i (position `exclude` left out), the oldest on exact ties;
 * after a dry pass with row `dry`, of kd_i - 2 (r_i + dry_i).  Only the
 * blocks attaining the minimum are scanned. */
static int pass_argmin(const ksdt_state *st, int n, int exclude,
                       const double *dry)
{
    int nb = (n + KB_BLOCK - 1) / KB_BLOCK, bi = -1;
    double gv = R_PosInf;
    for (int b = 0; b < nb; b++)
        if (st->bval[b] < gv)
            gv = st->bval[b];
    if (!R_FINITE(gv))
        return -1;
    double bv = R_PosInf;
    for (int b = 0; b < nb; b++) {
        if (st->bval[b] != gv)
            continue;
        int i1 = (b + 1) * KB_BLOCK < n ? (b + 1) * KB_BLOCK : n;
        for (int i = b * KB_BLOCK; i < i1; i++) {
            if (i == exclude)
                continue;
            /* recomputed as in pass(); compared among themselves, so a
             * compiler contracting one of the two into an FMA is harmless */
            double v = st->kd[i] - 2.0 * (dry ? st->r[i] + 1.0 * dry[i] : st->r[i]);
            if (bi < 0 || better(v, st->sidx[i], bv, st->sidx[bi])) {
                bv = v;
                bi = i;
            }
        }
    }
    return bi;
}

static double pass_sum(const ksdt_state *st, int n)
{
    int nb = (n + KB_BLOCK - 1) / KB_BLOCK;
    double s = 0.0;
    for (int b = 0; b < nb; b++)
        s += st->bsum[b];
    return s;
}

static void copy_point(ksdt_state *st, int to, int from)
{
    for (int k = 0; k < st->d; k++) {
        size_t a = (size_t) k * st->cap;
        st->X[a + to] = st->X[a + from];
        st->S[a + to] = st->S[a + from];
        st->Xo[a + to] = st->Xo[a + from];
        st->So[a + to] = st->So[a + from];
    }
    st->r[to] = st->r[from];
    st->kd[to] = st->kd[from];
    st->sidx[to] = st->sidx[from];
    st->cache[to] = st->cache[from];
}

/* Remove position j; returns the best next candidate (or -1). */
static int remove_point(ksdt_state *st, int j, int nt)
{
    int n = st->n, last = n - 1;
    double rj = st->r[j], kdj = st->kd[j];
    st->kd[j] = R_PosInf;      /* keep j out of the pass's minima */
    if (j == st->newest) {
        /* its row is known from when it was added */
        pass(st, n, NULL, NULL, st->cache, -1.0, 0, 1, nt);
        st->newest = -1;
    } else {
        double *pt = st->pt;
        kb_get_row(st->X, st->cap, j, st->d, pt);
        kb_get_row(st->S, st->cap, j, st->d, pt + st->d);
        pass(st, n, pt, pt + st->d, NULL, -1.0, 0, 1, nt);
    }
    st->kd[j] = kdj;
    st->Ssum -= 2.0 * rj - kdj;
    int best = pass_argmin(st, n, j, NULL);
    if (j != last) {
        copy_point(st, j, last);
        if (st->newest == last)
            st->newest = j;
        if (best == last)
            best = j;
    }
    st->n = n - 1;
    return best;
}

/* One KSDT step: add (x, s) (user and kernel coordinates), then prune with
 * budget eps down to no fewer than fmin points.  Returns removals. */
static int step(ksdt_state *st, const double *xo, const double *so,
                const double *x, const double *s, const double *row,
                double kt, double eps, double fmin, int nt)
{
    int d = st->d, n = st->n;
    ensure_capacity(st, n + 1);
    st->t += 1.0;
    if (!row) {
        kt = kb_stein_diag(&st->K, s);
        st->evals += 1.0;
    }
    int best = -1;
    double rowsum = 0.0;
    if (n > 0) {
        /* a dry pass first: the new state is often the one pruned at once,
         * and then D and its row sums stay exactly as they were */
        if (row) {
            /* the row is known (an SP-MCMC candidate): keep it as cache */
            memcpy(st->cache, row, (size_t) n * sizeof(double));
            pass(st, n, NULL, NULL, st->cache, 1.0, 0, 0, nt);
        } else {
            pass(st, n, x, s, NULL, 1.0, 1, 0, nt);
        }
        rowsum = pass_sum(st, n);
        best = pass_argmin(st, n, -1, st->cache);
    }
    double rnew = rowsum + kt, Snew = st->Ssum + 2.0 * rowsum + kt,
        n1 = n + 1.0, K0 = Snew / (n1 * n1);
    if (n >= 1 && n >= fmin &&
        (best < 0 || better(kt - 2.0 * rnew, st->t, st->kd[best] -
                            2.0 * (st->r[best] + 1.0 * st->cache[best]),
                            st->sidx[best]))) {
        double val = (Snew - 2.0 * rnew + kt) / ((double) n * n);
        if (val <= K0 + eps) {
            /* the new state is pruned at once */
            int removed = 1;
            st->newest = -1;
            if (!(n >= 2 && n - 1 >= fmin))
                return removed;
            pass(st, n, NULL, NULL, st->cache, 0.0, 0, 0, nt);
            best = pass_argmin(st, n, -1, NULL);
            while (st->n >= 2 && st->n - 1 >= fmin && best >= 0) {
                double m1 = st->n - 1.0;
                double v = (st->Ssum - 2.0 * st->r[best] + st->kd[best]) /
                    (m1 * m1);
                if (!(v <= K0 + eps))
                    break;
                best = remove_point(st, best, nt);
                removed++;
            }
            return removed;
        }
    }
    if (n > 0) {
        pass(st, n, NULL, NULL, st->cache, 1.0, 0, 1, nt);
        best = pass_argmin(st, n, -1, NULL);
    }
    for (int k = 0; k < d; k++) {
        size_t a = (size_t) k * st->cap + n;
        st->X[a] = x[k];
        st->S[a] = s[k];
        st->Xo[a] = xo[k];
        st->So[a] = so[k];
    }
    st->r[n] = rnew;
    st->kd[n] = kt;
    st->cache[n] = kt;
    st->sidx[n] = st->t;
    st->Ssum = Snew;
    st->newest = n;
    if (best < 0 || better(kt - 2.0 * st->r[n], st->t,
                           st->kd[best] - 2.0 * st->r[best], st->sidx[best]))
        best = n;
    st->n = n + 1;

    int removed = 0;
    while (st->n >= 2 && st->n - 1 >= fmin && best >= 0) {
        double m1 = st->n - 1.0;
        double val = (st->Ssum - 2.0 * st->r[best] + st->kd[best]) / (m1 * m1);
        if (!(val <= K0 + eps))
            break;
        best = remove_point(st, best, nt);
        removed++;
    }
    return removed;
}

static void record(ksdt_state *st, int removed)
{
    double nn = st->n;
    st->h_ksd[st->hlen] = sqrt(st->Ssum > 0 ? st->Ssum : 0.0) / nn;
    st->h_size[st->hlen] = nn;
    st->h_removed[st->hlen] = removed;
    st->hlen++;
}

/* ---- .Call entry points ------------------------------------------------ */

SEXP kb_ksdt_new(SEXP kern, SEXP dim)
{
    int d = kb_scalar_int(dim, "dim");
    if (d < 1)
        Rf_error(_("'dim' must be at least 1"));
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    ksdt_state *st = (ksdt_state *) calloc(1, sizeof(ksdt_state));
    if (!st)
        Rf_error(_("KSDT: cannot allocate the stream"));
    SEXP ptr = PROTECT(R_MakeExternalPtr(st, R_NilValue, R_NilValue));
    R_RegisterCFinalizerEx(ptr, finalizer, TRUE);
    int nl = K.iso ? 1 : d;
    st->lam = (double *) malloc((size_t) nl * sizeof(double));
    st->pt = (double *) malloc((size_t) 2 * d * sizeof(double));
    if (!st->lam || !st->pt)
        Rf_error(_("KSDT: cannot allocate the stream"));
    memcpy(st->lam, K.lam, (size_t) nl * sizeof(double));
    st->K = K;
    st->K.lam = st->lam;
    st->d = d;
    st->newest = -1;
    UNPROTECT(1);
    return ptr;
}

/* Push the rows of xo/so (user coordinates) and x/s (kernel coordinates),
 * with per-step budgets eps and minimum sizes fmin. */
SEXP kb_ksdt_push(SEXP ptr, SEXP xo, SEXP so, SEXP x, SEXP s, SEXP eps,
                  SEXP fmin, SEXP nthreads, SEXP progress)
{
    ksdt_state *st = get_state(ptr);
    int nt = kb_nthreads(nthreads), d = st->d;
    SEXP mats[4] = {xo, so, x, s};
    for (int q = 0; q < 4; q++)
        if (TYPEOF(mats[q]) != REALSXP || !Rf_isMatrix(mats[q]) ||
            Rf_ncols(mats[q]) != d || Rf_nrows(mats[q]) != Rf_nrows(xo))
            Rf_error(_("KSDT push: states and scores must be n x %d matrices"), d);
    int m = Rf_nrows(xo);
    if (TYPEOF(eps) != REALSXP || XLENGTH(eps) != m ||
        TYPEOF(fmin) != REALSXP || XLENGTH(fmin) != m)
        KB_INTERNAL("budget and minimum size must have one value per state");
    for (int q = 0; q < 4; q++)
        for (R_xlen_t i = 0; i < XLENGTH(mats[q]); i++)
            if (!R_FINITE(REAL(mats[q])[i]))
                Rf_error(_("KSDT push: states and scores must be finite"));
    const double *XO = REAL(xo), *SO = REAL(so), *XK = REAL(x), *SK = REAL(s);
    double *buf = (double *) R_alloc((size_t) 4 * d, sizeof(double));
    ensure_history(st, st->hlen + m);
    if (progress != R_NilValue && !Rf_isFunction(progress))
        KB_INTERNAL("progress must be a function or NULL");
    time_t last = time(NULL);
    double since = 0.0;
    for (int i = 0; i < m; i++) {
        kb_get_row(XO, m, i, d, buf);
        kb_get_row(SO, m, i, d, buf + d);
        kb_get_row(XK, m, i, d, buf + 2 * d);
        kb_get_row(SK, m, i, d, buf + 3 * d);
        double e0 = st->evals;
        int rem = step(st, buf, buf + d, buf + 2 * d, buf + 3 * d, NULL, 0.0,
                       REAL(eps)[i], REAL(fmin)[i], nt);
        record(st, rem);
        double nn = st->n;
        since += st->evals - e0;
        if (since > 4194304.0 || i == m - 1) {
            R_CheckUserInterrupt();
            since = 0.0;
            time_t now = time(NULL);
            if (progress != R_NilValue && (now > last || i == m - 1)) {
                /* progress(i, size, ksd), at most about once a second */
                SEXP a1 = PROTECT(Rf_ScalarReal(i + 1.0));
                SEXP a2 = PROTECT(Rf_ScalarReal(nn));
                SEXP a3 = PROTECT(Rf_ScalarReal(st->h_ksd[st->hlen - 1]));
                SEXP call = PROTECT(Rf_lang4(progress, a1, a2, a3));
                Rf_eval(call, R_GlobalEnv);
                UNPROTECT(4);
                last = now;
            }
        }
    }
    return R_NilValue;
}

static SEXP dict_matrix(const ksdt_state *st, const double *A)
{
    SEXP M = PROTECT(Rf_allocMatrix(REALSXP, st->n, st->d));
    for (int k = 0; k < st->d; k++)
        if (st->n > 0)
            memcpy(REAL(M) + (size_t) k * st->n, A + (size_t) k * st->cap,
                   (size_t) st->n * sizeof(double));
    UNPROTECT(1);
    return M;
}

static SEXP copy_vec(const double *v, R_xlen_t n)
{
    SEXP out = Rf_allocVector(REALSXP, n);
    if (n > 0)
        memcpy(REAL(out), v, (size_t) n * sizeof(double));
    return out;
}

/* The dictionary (in stream order) and the history. */
SEXP kb_ksdt_result(SEXP ptr)
{
    ksdt_state *st = get_state(ptr);
    const char *nms[] = {"points", "score", "index", "r", "kdiag", "S",
                         "ksd", "size", "removed", "t", "evals", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, dict_matrix(st, st->Xo));
    SET_VECTOR_ELT(ans, 1, dict_matrix(st, st->So));
    SET_VECTOR_ELT(ans, 2, copy_vec(st->sidx, st->n));
    SET_VECTOR_ELT(ans, 3, copy_vec(st->r, st->n));
    SET_VECTOR_ELT(ans, 4, copy_vec(st->kd, st->n));
    SET_VECTOR_ELT(ans, 5, Rf_ScalarReal(st->Ssum));
    SET_VECTOR_ELT(ans, 6, copy_vec(st->h_ksd, st->hlen));
    SET_VECTOR_ELT(ans, 7, copy_vec(st->h_size, st->hlen));
    SET_VECTOR_ELT(ans, 8, copy_vec(st->h_removed, st->hlen));
    SET_VECTOR_ELT(ans, 9, Rf_ScalarReal(st->t));
    SET_VECTOR_ELT(ans, 10, Rf_ScalarReal(st->evals));
    UNPROTECT(1);
    return ans;
}

/* ---- sampling with KSDT inside (ksdt_sample, sp_mcmc) ----------------- */

/* Point in kernel coordinates: x Q (Q NULL: unchanged). */
static void to_kernel(int d, const double *Q, const double *x, double *out)
{
    if (!Q) {
        memcpy(out, x, (size_t) d * sizeof(double));
        return;
    }
    for (int k = 0; k < d; k++) {
        double acc = 0.0;
        for (int l = 0; l < d; l++)
            acc += x[l] * Q[l + (size_t) k * d];
        out[k] = acc;
    }
}

/* k_p(x, X_i) for the n dictionary points, into out (threads over blocks). */
static void dict_row(ksdt_state *st, const double *x, const double *s,
                     double *out, int nt)
{
    int n = st->n, nb = (n + KB_BLOCK - 1) / KB_BLOCK;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= KB_PAR_MIN_EVALS / 4)
#endif
    for (int b = 0; b < nb; b++) {
        int i0 = b * KB_BLOCK, i1 = i0 + KB_BLOCK < n ? i0 + KB_BLOCK : n;
        kb_stein_row(&st->K, x, s, st->X, st->S, st->cap, i0, i1, out + i0);
    }
    st->evals += n;
}

/* .Call entry: run a sampler for n_iter steps with KSDT inside.  With
 * candidates > 1, each step runs `candidates` MCMC moves from a start
 * chosen by rule (1 last, 2 rand, 3 infl) and adds the candidate that
 * minimises k_p(y, y) + 2 sum_{x in D} k_p(y, x) (Stein Point MCMC); its
 * row is reused for the addition. */
SEXP kb_ksdt_sample(SEXP ptr, SEXP rho, SEXP vectorized, SEXP type_, SEXP x0,
                    SEXP n_iter_, SEXP step_, SEXP cand_, SEXP start_,
                    SEXP eps, SEXP fmin, SEXP Q_, SEXP nthreads,
                    SEXP progress)
{
    ksdt_state *st = get_state(ptr);
    int d = st->d, nt = kb_nthreads(nthreads);
    int type = kb_scalar_int(type_, "type"), n_iter = kb_scalar_int(n_iter_, "n_iter"),
        C = kb_scalar_int(cand_, "candidates"), start = kb_scalar_int(start_, "start");
    double h = kb_scalar_real(step_, "step");
    if (TYPEOF(x0) != REALSXP || XLENGTH(x0) != d)
        Rf_error(_("'x0' must be a numeric vector of length %d"), d);
    if (C < 1 || n_iter < 1)
        KB_INTERNAL("candidates and n_iter must be positive");
    if (TYPEOF(eps) != REALSXP || XLENGTH(eps) != n_iter ||
        TYPEOF(fmin) != REALSXP || XLENGTH(fmin) != n_iter)
        KB_INTERNAL("budget and minimum size must have one value per step");
    const double *Q = NULL;
    if (Q_ != R_NilValue) {
        if (TYPEOF(Q_) != REALSXP || XLENGTH(Q_) != (R_xlen_t) d * d)
            KB_INTERNAL("Q must be a d x d matrix");
        Q = REAL(Q_);
    }
    if (progress != R_NilValue && !Rf_isFunction(progress))
        KB_INTERNAL("progress must be a function or NULL");
    ensure_history(st, st->hlen + n_iter);
    double *cx = (double *) R_alloc((size_t) 4 * C * d + C, sizeof(double));
    double *cs = cx + (size_t) C * d, *ck = cs + (size_t) C * d,
        *cks = ck + (size_t) C * d, *clp = cks + (size_t) C * d;
    kb_sampler smp;
    GetRNGstate();
    kb_sampler_init(&smp, type, rho, Rf_asLogical(vectorized) == TRUE, d,
                    REAL(x0), h);
    time_t last = time(NULL);
    double since = 0.0;
    for (int it = 0; it < n_iter; it++) {
        double e0 = st->evals;
        int rem;
        if (C == 1) {
            kb_sampler_step(&smp);
            kb_sampler_score(&smp);
            to_kernel(d, Q, smp.x, ck);
            to_kernel(d, Q, smp.s, cks);
            rem = step(st, smp.x, smp.s, ck, cks, NULL, 0.0, REAL(eps)[it],
                       REAL(fmin)[it], nt);
        } else {
            if (st->n > 0 && start != 1) {
                int j = 0;
                if (start == 2) {
                    j = (int) floor(unif_rand() * st->n);
                    if (j >= st->n) j = st->n - 1;
                } else {
                    double bv = R_NegInf;
                    for (int i = 0; i < st->n; i++) {
                        double v = 2.0 * st->r[i] - st->kd[i];
                        if (v > bv) { bv = v; j = i; }
                    }
                }
                kb_get_row(st->Xo, st->cap, j, d, st->pt);
                kb_get_row(st->So, st->cap, j, d, st->pt + d);
                kb_sampler_jump(&smp, st->pt, st->pt + d);
            }
            size_t need = (size_t) C * (st->n > 0 ? st->n : 1);
            if (need > st->ccap) {
                grow((void **) &st->crows, need * 2 * sizeof(double));
                st->ccap = need * 2;
            }
            int best = 0;
            double bcrit = R_PosInf;
            for (int c = 0; c < C; c++) {
                kb_sampler_step(&smp);
                kb_sampler_score(&smp);
                double *xc = cx + (size_t) c * d, *sc = cs + (size_t) c * d,
                    *kc = ck + (size_t) c * d, *ksc = cks + (size_t) c * d;
                memcpy(xc, smp.x, (size_t) d * sizeof(double));
                memcpy(sc, smp.s, (size_t) d * sizeof(double));
                clp[c] = smp.lp;
                to_kernel(d, Q, xc, kc);
                to_kernel(d, Q, sc, ksc);
                double kdc = kb_stein_diag(&st->K, ksc), crit = kdc;
                st->evals += 1.0;
                if (st->n > 0) {
                    double *row = st->crows + (size_t) c * st->n;
                    dict_row(st, kc, ksc, row, nt);
                    double sum = 0.0;
                    for (int i = 0; i < st->n; i++)
                        sum += row[i];
                    crit += 2.0 * sum;
                }
                if (crit < bcrit) {
                    bcrit = crit;
                    best = c;
                }
            }
            /* continue the chain from the selected candidate */
            memcpy(smp.x, cx + (size_t) best * d, (size_t) d * sizeof(double));
            memcpy(smp.s, cs + (size_t) best * d, (size_t) d * sizeof(double));
            smp.lp = clp[best];
            smp.has_score = 1;
            double kdb = kb_stein_diag(&st->K, cks + (size_t) best * d);
            rem = step(st, cx + (size_t) best * d, cs + (size_t) best * d,
                       ck + (size_t) best * d, cks + (size_t) best * d,
                       st->n > 0 ? st->crows + (size_t) best * st->n : NULL,
                       kdb, REAL(eps)[it], REAL(fmin)[it], nt);
        }
        record(st, rem);
        since += st->evals - e0;
        if (since > 4194304.0 || (it + 1) % 256 == 0 || it == n_iter - 1) {
            R_CheckUserInterrupt();
            since = 0.0;
            time_t now = time(NULL);
            if (progress != R_NilValue && (now > last || it == n_iter - 1)) {
                SEXP a1 = PROTECT(Rf_ScalarReal(it + 1.0));
                SEXP a2 = PROTECT(Rf_ScalarReal((double) st->n));
                SEXP a3 = PROTECT(Rf_ScalarReal(st->h_ksd[st->hlen - 1]));
                SEXP call = PROTECT(Rf_lang4(progress, a1, a2, a3));
                Rf_eval(call, R_GlobalEnv);
                UNPROTECT(4);
                last = now;
            }
        }
    }
    PutRNGstate();
    const char *nms[] = {"accept_rate", "step", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(smp.proposed > 0 ? smp.accepted / smp.proposed : NA_REAL));
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(smp.step));
    UNPROTECT(3);
    return ans;
}

/* .Call entry: c(states seen, dictionary size, current KSD). */
SEXP kb_ksdt_info(SEXP ptr)
{
    ksdt_state *st = get_state(ptr);
    SEXP ans = PROTECT(Rf_allocVector(REALSXP, 3));
    REAL(ans)[0] = st->t;
    REAL(ans)[1] = st->n;
    REAL(ans)[2] = st->hlen > 0 ? st->h_ksd[st->hlen - 1] : NA_REAL;
    UNPROTECT(1);
    return ans;
}
