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
    /* Everything sized by the capacity lives in one allocation, `mem`, so
     * that growing it either succeeds whole or changes nothing. */
    double *mem;
    double *X, *S;             /* cap x d, kernel coordinates (ld = cap) */
    double *Xo, *So;           /* cap x d, the user's coordinates */
    double *r, *kd, *cache;    /* row sums, diagonal, newest point's row */
    double *sidx;              /* stream index of each point (1-based) */
    double *pt;                /* scratch: one point and its score */
    double *crows;             /* candidates' rows (ccap doubles) */
    size_t ccap;
    double Ssum;               /* sum over D x D */
    double t;                  /* steps (states or blocks offered to KSDT) */
    double offered;            /* rows of the stream seen */
    double evals;              /* kernel evaluations */
    double *hmem;              /* one allocation for the history: */
    R_xlen_t hlen, hcap;       /* per-step history */
    double *h_ksd, *h_size, *h_removed;
    /* scratch for a pass: per-block sums and minima */
    int nbcap;
    double *bsum, *bval;
    double bad_sidx;           /* set by a step that met a non-finite value */
    int busy;                  /* a push or a sampler is running on it */
    int fail_alloc;            /* testing: fail the n-th allocation (0: off) */
} ksdt_state;

static void state_free(ksdt_state *st)
{
    if (!st) return;
    free(st->lam);
    free(st->mem);
    free(st->hmem);
    free(st->pt);
    free(st->crows);
    free(st);
}

static void finalizer(SEXP ptr)
{
    ksdt_state *st = (ksdt_state *) R_ExternalPtrAddr(ptr);
    state_free(st);
    R_ClearExternalPtr(ptr);
}

static SEXP ksdt_tag(void)
{
    return Rf_install("kernbayes_ksdt_stream");
}

static ksdt_state *get_state(SEXP ptr)
{
    if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != ksdt_tag())
        kb_error_class("kb_error_arg", _("'stream' must be a KSDT stream from "
                                         "ksdt_stream(); its state has been "
                                         "replaced by something else"));
    ksdt_state *st = (ksdt_state *) R_ExternalPtrAddr(ptr);
    if (!st)
        kb_error_class("kb_error_state",
                       _("the KSDT stream is no longer valid (saved and "
                         "reloaded?); create a new one"));
    return st;
}

/* malloc that raises an R error on failure (testing: st->fail_alloc makes
 * the n-th allocation fail). */
static void *checked_malloc(ksdt_state *st, size_t bytes, const char *what)
{
    void *p = NULL;
    if (st->fail_alloc > 0 && --st->fail_alloc == 0)
        p = NULL;
    else
        p = malloc(bytes);
    if (!p)
        kb_error_class("kb_error_memory",
                       _("KSDT: cannot allocate %.0f bytes for the %s; "
                         "the stream is unchanged by the step that needed it"),
                       (double) bytes, what);
    return p;
}

/* Grow to hold `need` points: one new block for every capacity-sized array,
 * the old contents copied, then the old block freed.  On failure nothing
 * changes. */
static void ensure_capacity(ksdt_state *st, int need)
{
    if (need <= st->cap)
        return;
    int nc = st->cap < 64 ? 64 : st->cap;
    while (nc < need)
        nc = nc > INT_MAX / 2 ? INT_MAX : 2 * nc;
    int d = st->d, n = st->n, nb = (nc + KB_BLOCK - 1) / KB_BLOCK;
    size_t mat = (size_t) nc * d;
    double *mem = (double *) checked_malloc(
        st, (4 * mat + 4 * (size_t) nc + 2 * (size_t) nb) * sizeof(double),
        "dictionary");
    double *X = mem, *S = X + mat, *Xo = S + mat, *So = Xo + mat,
        *r = So + mat, *kd = r + nc, *cache = kd + nc, *sidx = cache + nc,
        *bsum = sidx + nc, *bval = bsum + nb;
    if (n > 0) {
        double *from[4] = {st->X, st->S, st->Xo, st->So}, *to[4] = {X, S, Xo, So};
        for (int q = 0; q < 4; q++)
            for (int k = 0; k < d; k++)
                memcpy(to[q] + (size_t) k * nc, from[q] + (size_t) k * st->cap,
                       (size_t) n * sizeof(double));
        memcpy(r, st->r, (size_t) n * sizeof(double));
        memcpy(kd, st->kd, (size_t) n * sizeof(double));
        memcpy(cache, st->cache, (size_t) n * sizeof(double));
        memcpy(sidx, st->sidx, (size_t) n * sizeof(double));
    }
    free(st->mem);
    st->mem = mem;
    st->X = X; st->S = S; st->Xo = Xo; st->So = So;
    st->r = r; st->kd = kd; st->cache = cache; st->sidx = sidx;
    st->bsum = bsum; st->bval = bval;
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
    double *h = (double *) checked_malloc(st, 3 * (size_t) nc * sizeof(double),
                                          "history");
    if (st->hlen > 0) {
        memcpy(h, st->h_ksd, (size_t) st->hlen * sizeof(double));
        memcpy(h + nc, st->h_size, (size_t) st->hlen * sizeof(double));
        memcpy(h + 2 * nc, st->h_removed, (size_t) st->hlen * sizeof(double));
    }
    free(st->hmem);
    st->hmem = h;
    st->h_ksd = h;
    st->h_size = h + nc;
    st->h_removed = h + 2 * nc;
    st->hcap = nc;
}

/* Scratch for candidates' rows: at least `need` doubles. */
static void ensure_crows(ksdt_state *st, size_t need)
{
    if (need <= st->ccap)
        return;
    double *c = (double *) checked_malloc(st, 2 * need * sizeof(double),
                                          "candidates' rows");
    free(st->crows);
    st->crows = c;
    st->ccap = 2 * need;
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

/* One KSDT step: add (x, s) (user and kernel coordinates; kt = k_p(x, x);
 * row, when known, its Stein kernel row with the dictionary; sidx its index
 * in the stream), then prune with budget eps down to no fewer than fmin
 * points.  Returns the number of removals, or -1 when a Stein kernel value
 * with the dictionary is not finite: then the dictionary is as it was
 * (st->bad_sidx is the stream index of the dictionary state involved, or 0
 * for the new state itself or an overflowing total). */
static int step(ksdt_state *st, const double *xo, const double *so,
                const double *x, const double *s, const double *row,
                double kt, double sidx, double eps, double fmin, int nt)
{
    int d = st->d, n = st->n;
    ensure_capacity(st, n + 1);
    st->bad_sidx = 0.0;
    if (!R_FINITE(kt))
        return -1;
    int best = -1;
    double rowsum = 0.0;
    if (n > 0) {
        /* a dry pass first: the new state is often the one pruned at once,
         * and then D and its row sums stay exactly as they were */
        if (row) {
            /* the row is known (a candidate's): keep it as cache */
            memcpy(st->cache, row, (size_t) n * sizeof(double));
            pass(st, n, NULL, NULL, st->cache, 1.0, 0, 0, nt);
        } else {
            pass(st, n, x, s, NULL, 1.0, 1, 0, nt);
        }
        /* the cache no longer holds the newest point's row */
        st->newest = -1;
        rowsum = pass_sum(st, n);
        if (!R_FINITE(rowsum) || !R_FINITE(st->Ssum + 2.0 * rowsum + kt)) {
            for (int i = 0; i < n; i++)
                if (!R_FINITE(st->cache[i])) {
                    st->bad_sidx = st->sidx[i];
                    break;
                }
            return -1;
        }
        best = pass_argmin(st, n, -1, st->cache);
    }
    st->t += 1.0;
    double rnew = rowsum + kt, Snew = st->Ssum + 2.0 * rowsum + kt,
        n1 = n + 1.0, K0 = Snew / (n1 * n1);
    if (n >= 1 && n >= fmin &&
        (best < 0 || better(kt - 2.0 * rnew, sidx, st->kd[best] -
                            2.0 * (st->r[best] + 1.0 * st->cache[best]),
                            st->sidx[best]))) {
        double val = (Snew - 2.0 * rnew + kt) / ((double) n * n);
        if (val <= K0 + eps) {
            /* the new state is pruned at once */
            int removed = 1;
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
    st->sidx[n] = sidx;
    st->Ssum = Snew;
    st->newest = n;
    if (best < 0 || better(kt - 2.0 * st->r[n], sidx,
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

static double diag_of(ksdt_state *st, const double *s)
{
    st->evals += 1.0;
    return kb_stein_diag(&st->K, s);
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

/* A block of candidates (SP-MCMC's rule, Chen et al. 2019, as used by the
 * KSDT paper's SPMCMC variants): of the states offered in a block, the one
 * minimising k_p(c, c) + 2 sum_{j in D} k_p(c, x_j) goes to KSDT, the first
 * on ties.  Its row with D is kept for the step.  The dictionary does not
 * change within a block. */
typedef struct {
    int filled, cur, best;     /* candidates seen; rows[cur]: the best's row */
    double crit, kd, sidx;
    double *rows[2];
    double *buf;               /* the best's xo, so, x, s (4 d) */
} cblock;

static void cblock_init(ksdt_state *st, cblock *cb)
{
    cb->buf = (double *) R_alloc((size_t) 4 * st->d, sizeof(double));
    cb->filled = 0;
}

/* Offer one candidate; returns 0, or -1 on a non-finite Stein kernel value
 * (st->bad_sidx as in step()). */
static int cblock_offer(ksdt_state *st, cblock *cb, const double *xo,
                        const double *so, const double *x, const double *s,
                        double kd, double sidx, int nt)
{
    int n = st->n, d = st->d;
    if (cb->filled == 0) {
        ensure_crows(st, 2 * (size_t) (n > 0 ? n : 1));
        cb->rows[0] = st->crows;
        cb->rows[1] = st->crows + (n > 0 ? n : 1);
        cb->cur = 0;
    }
    st->bad_sidx = 0.0;
    if (!R_FINITE(kd))
        return -1;
    double crit = kd;
    double *row = cb->rows[1 - cb->cur];
    if (n > 0) {
        dict_row(st, x, s, row, nt);
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += row[i];
        crit += 2.0 * sum;
        if (!R_FINITE(crit)) {
            for (int i = 0; i < n; i++)
                if (!R_FINITE(row[i])) {
                    st->bad_sidx = st->sidx[i];
                    break;
                }
            return -1;
        }
    }
    if (cb->filled == 0 || crit < cb->crit) {
        cb->crit = crit;
        cb->cur = 1 - cb->cur;
        cb->kd = kd;
        cb->sidx = sidx;
        cb->best = cb->filled;
        memcpy(cb->buf, xo, (size_t) d * sizeof(double));
        memcpy(cb->buf + d, so, (size_t) d * sizeof(double));
        memcpy(cb->buf + 2 * d, x, (size_t) d * sizeof(double));
        memcpy(cb->buf + 3 * d, s, (size_t) d * sizeof(double));
    }
    cb->filled++;
    return 0;
}

/* Offer the block's best to KSDT; returns as step(). */
static int cblock_commit(ksdt_state *st, cblock *cb, double eps, double fmin,
                         int nt)
{
    int d = st->d;
    cb->filled = 0;
    return step(st, cb->buf, cb->buf + d, cb->buf + 2 * d, cb->buf + 3 * d,
                st->n > 0 ? cb->rows[cb->cur] : NULL, cb->kd, cb->sidx, eps,
                fmin, nt);
}

/* The error for a step or an offer that met a non-finite value. */
static void NORET nonfinite_error(const ksdt_state *st, const char *what,
                                  double row, double taken)
{
    if (st->bad_sidx > 0)
        kb_error_numeric(_("KSDT: the Stein kernel of %s %.0f and the "
                           "dictionary state from stream row %.0f is not finite "
                           "(overflow): scale the data or the kernel; %.0f rows "
                           "of the stream were taken before it "
                           "(ksdt_result()$n_offered)"),
                         what, row, st->bad_sidx, taken);
    kb_error_numeric(_("KSDT: the Stein kernel of %s %.0f is not finite "
                       "(overflow): scale the data or the kernel; %.0f rows of "
                       "the stream were taken before it "
                       "(ksdt_result()$n_offered)"), what, row, taken);
}

/* A push or a sampler holds the stream while it runs: a closure or a
 * progress function that pushes to the same stream is refused, and the
 * hold is released however the call ends (error, interrupt). */
static void hold(ksdt_state *st)
{
    if (st->busy)
        kb_error_class("kb_error_state",
                       _("the KSDT stream is in use by a running ksdt_push() "
                         "or sampler (a closure or progress function cannot "
                         "push to the stream it is called from)"));
    st->busy = 1;
}

static void release(void *data)
{
    ((ksdt_state *) data)->busy = 0;
}

static void call_progress(SEXP progress, double i, double size, double ksd)
{
    /* progress(i, size, ksd) */
    SEXP a1 = PROTECT(Rf_ScalarReal(i));
    SEXP a2 = PROTECT(Rf_ScalarReal(size));
    SEXP a3 = PROTECT(Rf_ScalarReal(ksd));
    SEXP call = PROTECT(Rf_lang4(progress, a1, a2, a3));
    Rf_eval(call, R_GlobalEnv);
    UNPROTECT(4);
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
    SEXP ptr = PROTECT(R_MakeExternalPtr(st, ksdt_tag(), R_NilValue));
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
 * in blocks of `cand` consecutive rows (1: every row), with per-step
 * budgets eps and minimum sizes fmin (one per block).  Every row's
 * k_p(x, x) is checked before anything changes, so a push rejected there
 * leaves the stream as it was; a Stein kernel value with the dictionary
 * that overflows stops the push after the blocks before it were taken. */
typedef struct {
    ksdt_state *st;
    SEXP xo, so, x, s, eps, fmin, progress;
    int nt, cand;
} push_args;

static SEXP push_body(void *data)
{
    push_args *A = (push_args *) data;
    ksdt_state *st = A->st;
    int d = st->d, m = Rf_nrows(A->xo), nt = A->nt, C = A->cand;
    const double *XO = REAL(A->xo), *SO = REAL(A->so), *XK = REAL(A->x),
        *SK = REAL(A->s);
    double *buf = (double *) R_alloc((size_t) 4 * d, sizeof(double));
    double *kdv = (double *) R_alloc(m > 0 ? m : 1, sizeof(double));
    for (int i = 0; i < m; i++) {
        kb_get_row(SK, m, i, d, buf);
        kdv[i] = kb_stein_diag(&st->K, buf);
        if (!R_FINITE(kdv[i]))
            kb_error_numeric(_("KSDT push: the Stein kernel of row %d with "
                               "itself is not finite (overflow: its score is "
                               "too large); scale the data or the kernel; "
                               "nothing was pushed"), i + 1);
    }
    int nblocks = (m + C - 1) / C;
    ensure_history(st, st->hlen + nblocks);
    cblock cb;
    cblock_init(st, &cb);
    time_t last = time(NULL);
    double since = 0.0, base = st->offered;
    int blk = 0;
    for (int i = 0; i < m; i++) {
        kb_get_row(XO, m, i, d, buf);
        kb_get_row(SO, m, i, d, buf + d);
        kb_get_row(XK, m, i, d, buf + 2 * d);
        kb_get_row(SK, m, i, d, buf + 3 * d);
        double e0 = st->evals;
        int rem;
        /* the diagonal evaluated above is counted as its row is taken */
        if (C == 1) {
            rem = step(st, buf, buf + d, buf + 2 * d, buf + 3 * d, NULL,
                       kdv[i], base + i + 1.0, REAL(A->eps)[blk],
                       REAL(A->fmin)[blk], nt);
            if (rem >= 0)
                st->evals += 1.0;
        } else {
            if (cblock_offer(st, &cb, buf, buf + d, buf + 2 * d, buf + 3 * d,
                             kdv[i], base + i + 1.0, nt) < 0)
                nonfinite_error(st, "row", i + 1.0, st->offered - base);
            st->evals += 1.0;
            since += st->evals - e0;
            if (cb.filled < C && i < m - 1)
                goto check;
            e0 = st->evals;
            rem = cblock_commit(st, &cb, REAL(A->eps)[blk], REAL(A->fmin)[blk],
                                nt);
        }
        if (rem < 0)
            nonfinite_error(st, "row", i + 1.0, st->offered - base);
        record(st, rem);
        st->offered = base + i + 1.0;
        blk++;
        since += st->evals - e0;
    check:
        if (since > 4194304.0 || i == m - 1) {
            R_CheckUserInterrupt();
            since = 0.0;
            time_t now = time(NULL);
            if (A->progress != R_NilValue && (now > last || i == m - 1)) {
                call_progress(A->progress, i + 1.0, st->n,
                              st->h_ksd[st->hlen - 1]);
                last = now;
            }
        }
    }
    return R_NilValue;
}

SEXP kb_ksdt_push(SEXP ptr, SEXP xo, SEXP so, SEXP x, SEXP s, SEXP eps,
                  SEXP fmin, SEXP cand, SEXP nthreads, SEXP progress)
{
    ksdt_state *st = get_state(ptr);
    int nt = kb_nthreads(nthreads), d = st->d, C = kb_scalar_int(cand, "candidates");
    SEXP mats[4] = {xo, so, x, s};
    for (int q = 0; q < 4; q++)
        if (TYPEOF(mats[q]) != REALSXP || !Rf_isMatrix(mats[q]) ||
            Rf_ncols(mats[q]) != d || Rf_nrows(mats[q]) != Rf_nrows(xo))
            Rf_error(_("KSDT push: states and scores must be n x %d matrices"), d);
    int m = Rf_nrows(xo);
    if (C < 1)
        KB_INTERNAL("candidates must be positive");
    R_xlen_t nb = (m + C - 1) / C;
    if (TYPEOF(eps) != REALSXP || XLENGTH(eps) != nb ||
        TYPEOF(fmin) != REALSXP || XLENGTH(fmin) != nb)
        KB_INTERNAL("budget and minimum size must have one value per block");
    if (progress != R_NilValue && !Rf_isFunction(progress))
        KB_INTERNAL("progress must be a function or NULL");
    static const char *nm[4] = {"x", "score", "x (in the kernel's basis)",
                                "score (in the kernel's basis)"};
    for (int q = 0; q < 4; q++)
        for (R_xlen_t i = 0; i < XLENGTH(mats[q]); i++)
            if (!R_FINITE(REAL(mats[q])[i]))
                kb_error_numeric(_("KSDT push: %s is not finite at row %d; "
                                   "nothing was pushed"), nm[q],
                                 (int) (i % (m > 0 ? m : 1)) + 1);
    hold(st);
    push_args A = {st, xo, so, x, s, eps, fmin, progress, nt, C};
    R_ExecWithCleanup(push_body, &A, release, st);
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
                         "ksd", "size", "removed", "t", "evals", "n_offered",
                         ""};
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
    SET_VECTOR_ELT(ans, 11, Rf_ScalarReal(st->offered));
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

/* Run a sampler for n_iter KSDT steps of `cand` chain iterations each.
 * restart = 0 (ksdt_sample): the chain runs on undisturbed; each block of
 *   `cand` consecutive states offers KSDT its state minimising
 *   k_p(y, y) + 2 sum_{x in D} k_p(y, x) (the KSDT paper's SPMCMC variants);
 *   with cand = 1 every state.  Equal to ksdt(chain, candidates = cand).
 * restart = 1 (sp_mcmc, Stein Point MCMC): n_iter steps, each running
 *   `cand` fresh moves from a start chosen by rule (1 last added point,
 *   2 a random dictionary point, 3 the point of least influence
 *   argmin_i 2 r_i - k_p(x_i, x_i), Chen et al. 2019) and continuing from
 *   the selected candidate. */
typedef struct {
    ksdt_state *st;
    SEXP rho, eps, fmin, progress;
    int vec, type, n_iter, C, start, restart, nt, d;
    double h;
    const double *x0, *Q;
    double acc_rate, step;
} sample_args;

static SEXP sample_body(void *data)
{
    sample_args *A = (sample_args *) data;
    ksdt_state *st = A->st;
    int d = A->d, nt = A->nt, C = A->C, n_iter = A->n_iter;
    const double *Q = A->Q;
    double *ck = (double *) R_alloc((size_t) 2 * d, sizeof(double)),
        *cks = ck + d;
    double *clp = (double *) R_alloc((size_t) C, sizeof(double));
    double *cxs = (double *) R_alloc((size_t) 2 * C * d, sizeof(double));
    ensure_history(st, st->hlen + n_iter);
    cblock cb;
    cblock_init(st, &cb);
    kb_sampler smp;
    GetRNGstate();
    kb_sampler_init(&smp, A->type, A->rho, A->vec, d, A->x0, A->h);
    time_t last = time(NULL);
    double since = 0.0, base = st->offered;
    int blk = 0, total = n_iter * C;
    for (int it = 0; it < total; it++) {
        double e0 = st->evals;
        int c = A->restart ? it % C : cb.filled;
        if (A->restart && c == 0 && st->n > 0 && A->start != 1) {
            int j = 0;
            if (A->start == 2) {
                j = (int) floor(unif_rand() * st->n);
                if (j >= st->n) j = st->n - 1;
            } else {
                /* least influence; ties to the oldest point */
                double bv = R_PosInf;
                for (int i = 0; i < st->n; i++) {
                    double v = 2.0 * st->r[i] - st->kd[i];
                    if (v < bv || (v == bv && st->sidx[i] < st->sidx[j])) {
                        bv = v;
                        j = i;
                    }
                }
            }
            kb_get_row(st->Xo, st->cap, j, d, st->pt);
            kb_get_row(st->So, st->cap, j, d, st->pt + d);
            kb_sampler_jump(&smp, st->pt, st->pt + d);
        }
        kb_sampler_step(&smp);
        kb_sampler_score(&smp);
        to_kernel(d, Q, smp.x, ck);
        to_kernel(d, Q, smp.s, cks);
        /* the stream offered to KSDT: the chain's states, or with restarts
         * the selected candidates, one per step */
        double kd = diag_of(st, cks),
            sidx = base + (A->restart ? blk : it) + 1.0;
        int rem;
        if (C == 1) {
            rem = step(st, smp.x, smp.s, ck, cks, NULL, kd, sidx,
                       REAL(A->eps)[blk], REAL(A->fmin)[blk], nt);
        } else {
            if (A->restart) {
                memcpy(cxs + (size_t) c * 2 * d, smp.x, (size_t) d * sizeof(double));
                memcpy(cxs + (size_t) c * 2 * d + d, smp.s, (size_t) d * sizeof(double));
                clp[c] = smp.lp;
            }
            if (cblock_offer(st, &cb, smp.x, smp.s, ck, cks, kd, sidx, nt) < 0)
                nonfinite_error(st, "chain state", it + 1.0, st->offered - base);
            since += st->evals - e0;
            if (cb.filled < C && it < total - 1)
                goto check;
            e0 = st->evals;
            int b = cb.best;
            rem = cblock_commit(st, &cb, REAL(A->eps)[blk], REAL(A->fmin)[blk],
                                nt);
            if (A->restart) {
                /* continue the chain from the selected candidate */
                memcpy(smp.x, cxs + (size_t) b * 2 * d, (size_t) d * sizeof(double));
                memcpy(smp.s, cxs + (size_t) b * 2 * d + d, (size_t) d * sizeof(double));
                smp.lp = clp[b];
                smp.has_score = 1;
            }
        }
        if (rem < 0)
            nonfinite_error(st, "chain state", it + 1.0, st->offered - base);
        record(st, rem);
        st->offered = sidx;
        blk++;
        since += st->evals - e0;
    check:
        if (since > 4194304.0 || (it + 1) % 256 == 0 || it == total - 1) {
            R_CheckUserInterrupt();
            since = 0.0;
            time_t now = time(NULL);
            if (A->progress != R_NilValue && (now > last || it == total - 1)) {
                call_progress(A->progress, blk, st->n,
                              st->hlen > 0 ? st->h_ksd[st->hlen - 1] : NA_REAL);
                last = now;
            }
        }
    }
    PutRNGstate();
    A->acc_rate = smp.proposed > 0 ? smp.accepted / smp.proposed : NA_REAL;
    A->step = smp.step;
    UNPROTECT(2);              /* kb_sampler_init's */
    return R_NilValue;
}

SEXP kb_ksdt_sample(SEXP ptr, SEXP rho, SEXP vectorized, SEXP type_, SEXP x0,
                    SEXP n_iter_, SEXP step_, SEXP cand_, SEXP start_,
                    SEXP restart_, SEXP eps, SEXP fmin, SEXP Q_,
                    SEXP nthreads, SEXP progress)
{
    ksdt_state *st = get_state(ptr);
    sample_args A;
    A.st = st;
    A.d = st->d;
    A.nt = kb_nthreads(nthreads);
    A.type = kb_scalar_int(type_, "type");
    A.n_iter = kb_scalar_int(n_iter_, "n_iter");
    A.C = kb_scalar_int(cand_, "candidates");
    A.start = kb_scalar_int(start_, "start");
    A.restart = Rf_asLogical(restart_) == TRUE;
    A.h = kb_scalar_real(step_, "step");
    A.vec = Rf_asLogical(vectorized) == TRUE;
    A.rho = rho;
    A.eps = eps;
    A.fmin = fmin;
    A.progress = progress;
    if (TYPEOF(x0) != REALSXP || XLENGTH(x0) != A.d)
        Rf_error(_("'x0' must be a numeric vector of length %d"), A.d);
    A.x0 = REAL(x0);
    if (A.C < 1 || A.n_iter < 1)
        KB_INTERNAL("candidates and n_iter must be positive");
    if (!A.restart && A.start != 1)
        KB_INTERNAL("start rules need restarts");
    if ((double) A.n_iter * A.C > INT_MAX)
        KB_INTERNAL("too many moves");
    if (TYPEOF(eps) != REALSXP || XLENGTH(eps) != A.n_iter ||
        TYPEOF(fmin) != REALSXP || XLENGTH(fmin) != A.n_iter)
        KB_INTERNAL("budget and minimum size must have one value per step");
    A.Q = NULL;
    if (Q_ != R_NilValue) {
        if (TYPEOF(Q_) != REALSXP || XLENGTH(Q_) != (R_xlen_t) A.d * A.d)
            KB_INTERNAL("Q must be a d x d matrix");
        A.Q = REAL(Q_);
    }
    if (progress != R_NilValue && !Rf_isFunction(progress))
        KB_INTERNAL("progress must be a function or NULL");
    hold(st);
    R_ExecWithCleanup(sample_body, &A, release, st);
    const char *nms[] = {"accept_rate", "step", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(A.acc_rate));
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(A.step));
    UNPROTECT(1);
    return ans;
}

/* .Call entry: c(steps, dictionary size, current KSD, rows offered). */
SEXP kb_ksdt_info(SEXP ptr)
{
    ksdt_state *st = get_state(ptr);
    SEXP ans = PROTECT(Rf_allocVector(REALSXP, 4));
    REAL(ans)[0] = st->t;
    REAL(ans)[1] = st->n;
    REAL(ans)[2] = st->hlen > 0 ? st->h_ksd[st->hlen - 1] : NA_REAL;
    REAL(ans)[3] = st->offered;
    UNPROTECT(1);
    return ans;
}

/* .Call entry: the stream's dimension. */
SEXP kb_ksdt_dim(SEXP ptr)
{
    return Rf_ScalarInteger(get_state(ptr)->d);
}

/* .Call entry, for tests: make the n-th next allocation of the stream fail
 * (0: never). */
SEXP kb_ksdt_fail_alloc(SEXP ptr, SEXP n)
{
    ksdt_state *st = get_state(ptr);
    st->fail_alloc = kb_scalar_int(n, "n");
    return R_NilValue;
}
