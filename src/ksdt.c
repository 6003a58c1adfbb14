/* KSDT: online KSD thinning (Hawkins, Koppel & Zhang; DESIGN.md "KSDT").
 * The dictionary D keeps its points, scores, diagonal terms k_p(x_i, x_i)
 * and row sums r_i = sum_{j in D} k_p(x_i, x_j), and the total
 * S = sum_i r_i; never its Gram matrix.  Adding a point costs one row
 * (|D| evaluations); removing one costs one row too, except the newest
 * point, whose row is kept from when it was added.
 *
 * The state lives in malloc'd memory owned by an external pointer with a
 * finalizer, so it survives between pushes from R, and an error or an
 * interrupt between two steps leaves it consistent and leaks nothing.
 * This file is the dictionary and its pushes; samplers that feed it
 * (ksdt_sample, sp_mcmc) are in spmcmc.c, through ksdt.h. */
#include <limits.h>
#include <time.h>
#include "ksdt.h"
#include "callback.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

struct ksdt_state {
    kb_kernel K;
    double *lam;               /* own copy of the kernel's eigenvalues */
    int d, n, cap, newest;     /* newest: position of the last added point */
    /* Everything sized by the capacity lives in one allocation, `mem`, so
     * that growing it either succeeds whole or changes nothing. */
    double *mem;
    double *X, *S;             /* cap x d, kernel coordinates (ld = cap) */
    double *Xo, *So;           /* cap x d, the user's coordinates */
    double *r, *kd, *cache;    /* row sums, diagonal, newest point's row */
    double *row;               /* scratch: a removed point's row */
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
};

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

ksdt_state *kb_ksdt_state(SEXP ptr)
{
    if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != ksdt_tag())
        kb_error_arg(_("'stream' must be a KSDT stream from "
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
        st, (4 * mat + 5 * (size_t) nc + 2 * (size_t) nb) * sizeof(double),
        "dictionary");
    double *X = mem, *S = X + mat, *Xo = S + mat, *So = Xo + mat,
        *r = So + mat, *kd = r + nc, *cache = kd + nc, *sidx = cache + nc,
        *row = sidx + nc, *bsum = row + nc, *bval = bsum + nb;
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
    st->r = r; st->kd = kd; st->cache = cache; st->sidx = sidx; st->row = row;
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

/* Work units of n Stein kernel evaluations (runtime.h). */
static double stein_work(const ksdt_state *st, int n)
{
    return (double) n * KB_STEIN_WORK(st->d);
}

/* Work units per position of a pass without kernel evaluations (a scan of
 * the row sums): about 0.1 ns (scan_block's lanes; 0.3-0.4 ns before
 * them), next to about 1.1 ns for a Stein kernel evaluation at d = 4
 * (KB_STEIN_WORK(4) = 20 units).  Such a pass over 5000 points takes
 * 0.5 us, and a region of 2 threads costs about 2 us more than none
 * on this project's machine (2 cores of a VM, run at real-time priority
 * so that the load did not count), so scans stay serial until n = 1e4. */
#define KB_SCAN_WORK 2.0

/* KSDT's passes open a region from this much work (a pass over 10000
 * points at d = 4): measured on an idle machine (load 0.9, 2e5-state AR(1)
 * stream in d = 4, dictionary 1563 points, 3e4 units a pass), regions from
 * KB_PAR_MIN_STEP = 2e4 made 2 threads take 1.9-2.0x the time of 1 (the
 * serial steps between passes move the dictionary's cache lines between
 * the cores), and the 2e6-state stream (dictionary up to 5387 points)
 * 1.10x; so passes stay serial until they are larger than the streams of
 * the benchmarks ever make them.  Two designs without a region per pass
 * were built and measured, and dropped (NEWS): one region per
 * chunk of steps with each pass split by a spinning hand-off (1.15x on
 * the 2e6 stream, 0.9x at 5e5 states), and a pipeline computing the next
 * state's row on the second thread (0.97x: the row's cache lines crossing
 * cores cost as much as computing it; a cross-core round trip here is
 * 0.5 us). */
#define KSDT_PAR_MIN_PASS 2e5

/* Threads for a pass doing `work` units.  The regions of this file run
 * once per stream step (microseconds each): they open from
 * KSDT_PAR_MIN_PASS units, on the team the machine's load leaves (kb_team), because on a
 * busy machine a barrier waiting for a descheduled thread costs more than
 * a small region saves.  Blocks go to threads by schedule(static), the
 * same ones at every pass, so each thread keeps its part of the
 * dictionary in its own cache. */
static int pass_threads(int nt, double work)
{
    return kb_threads_min(nt, work, KSDT_PAR_MIN_PASS);
}

/* Block b of k_p(x, x_i) over the n dictionary points, into out. */
static inline void dict_block(ksdt_state *st, const double *x, const double *s,
                              double *out, int b, int n)
{
    int i0 = b * KB_BLOCK, i1 = i0 + KB_BLOCK < n ? i0 + KB_BLOCK : n;
    kb_stein_row(&st->K, x, s, &(kb_points) {st->X, st->S, st->cap}, i0, i1,
                 out + i0);
}

/* k_p(x, x_i) for the n dictionary points, into out (threads over blocks).
 * On one thread no region is opened: libgomp's region of one thread took
 * 5% of a KSDT stream's time when every pass opened one. */
static void dict_row(ksdt_state *st, const double *x, const double *s,
                     double *out, int nt)
{
    int n = st->n, nb = (n + KB_BLOCK - 1) / KB_BLOCK,
        nth = pass_threads(nt, stein_work(st, n));
    if (nth > 1) {
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int b = 0; b < nb; b++)
            dict_block(st, x, s, out, b, n);
    } else {
        for (int b = 0; b < nb; b++)
            dict_block(st, x, s, out, b, n);
    }
    st->evals += n;
}

/* Block b (positions i0 .. i0 + m - 1) of a pass with a Stein kernel row k
 * (row[t] = k_p(y, x_{i0+t})): the block's sum of k and its minimum of
 * kd_i - 2 (r_i + sign k_i), the removal criterion after adding (sign 1)
 * or removing (sign -1) y; with `apply` the row sums become r_i + sign k_i.
 * Eight lanes, position t in lane t mod 8, each summed in order and the
 * lanes added in a fixed tree: the same sum on any vector width, and no
 * chain of dependent additions (one chain cost 0.4 ns a position, 38% of
 * a KSDT stream's time); a minimum is the same in any order. */
#define SCAN_LANES 8
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Positions [0, m - m % 8) into the lanes acc (sums of row) and mn
 * (minima of kd - 2 (r + sign row)); returns where the tail starts.  SSE2
 * (every x86-64) keeps the lanes in registers: a compiler keeps an array
 * of lanes in memory, and every addition then waits for a store. */
static inline int scan_body(double *r, const double *kd, const double *row,
                            int m, double sign, const int apply, double *acc,
                            double *mn)
{
    int t = 0;
#if defined(__SSE2__)
    __m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0,
        inf = _mm_set1_pd(R_PosInf), m0 = inf, m1 = inf, m2 = inf, m3 = inf,
        sg = _mm_set1_pd(sign), two = _mm_set1_pd(2.0);
#define SCAN_PAIR(A, M, o)                                                  \
    do {                                                                    \
        __m128d k = _mm_loadu_pd(row + t + o),                             \
            rt = _mm_add_pd(_mm_loadu_pd(r + t + o), _mm_mul_pd(sg, k));   \
        if (apply)                                                          \
            _mm_storeu_pd(r + t + o, rt);                                   \
        A = _mm_add_pd(A, k);                                               \
        M = _mm_min_pd(_mm_sub_pd(_mm_loadu_pd(kd + t + o),                \
                                  _mm_mul_pd(two, rt)), M);                 \
    } while (0)
    for (; t + SCAN_LANES <= m; t += SCAN_LANES) {
        SCAN_PAIR(a0, m0, 0);
        SCAN_PAIR(a1, m1, 2);
        SCAN_PAIR(a2, m2, 4);
        SCAN_PAIR(a3, m3, 6);
    }
#undef SCAN_PAIR
    _mm_storeu_pd(acc, a0);
    _mm_storeu_pd(acc + 2, a1);
    _mm_storeu_pd(acc + 4, a2);
    _mm_storeu_pd(acc + 6, a3);
    _mm_storeu_pd(mn, m0);
    _mm_storeu_pd(mn + 2, m1);
    _mm_storeu_pd(mn + 4, m2);
    _mm_storeu_pd(mn + 6, m3);
#else
    for (int j = 0; j < SCAN_LANES; j++) {
        acc[j] = 0.0;
        mn[j] = R_PosInf;
    }
#endif
    (void) r; (void) kd; (void) row; (void) m; (void) sign; (void) apply;
    return t;
}

#if KB_AVX2
/* scan_body's AVX2 copy: lanes 0-3 and 4-7 in two registers each, every
 * lane's operations those of the SSE2 body (no FMA in target("avx2")), so
 * the same sums and minima. */
KB_TARGET_AVX2 static int scan_body_avx2(double *r, const double *kd,
                                          const double *row, int m,
                                          double sign, const int apply,
                                          double *acc, double *mn)
{
    int t = 0;
    __m256d a0 = _mm256_setzero_pd(), a1 = a0,
        inf = _mm256_set1_pd(R_PosInf), m0 = inf, m1 = inf,
        sg = _mm256_set1_pd(sign), two = _mm256_set1_pd(2.0);
#define SCAN_QUAD(A, M, o)                                                  \
    do {                                                                    \
        __m256d k = _mm256_loadu_pd(row + t + o),                          \
            rt = _mm256_add_pd(_mm256_loadu_pd(r + t + o),                 \
                               _mm256_mul_pd(sg, k));                       \
        if (apply)                                                          \
            _mm256_storeu_pd(r + t + o, rt);                                \
        A = _mm256_add_pd(A, k);                                            \
        M = _mm256_min_pd(_mm256_sub_pd(_mm256_loadu_pd(kd + t + o),       \
                                        _mm256_mul_pd(two, rt)), M);        \
    } while (0)
    for (; t + SCAN_LANES <= m; t += SCAN_LANES) {
        SCAN_QUAD(a0, m0, 0);
        SCAN_QUAD(a1, m1, 4);
    }
#undef SCAN_QUAD
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    _mm256_storeu_pd(mn, m0);
    _mm256_storeu_pd(mn + 4, m1);
    return t;
}
#endif

/* The lanes' running sums and minima. */
typedef struct {
    double acc[SCAN_LANES], mn[SCAN_LANES];
} scan_lanes;

/* The lanes from position t on, one position at a time. */
static inline void scan_tail(double *r, const double *kd, const double *row,
                             int t, int m, double sign, const int apply,
                             scan_lanes *L)
{
    for (int j = 0; t < m; t++, j = (j + 1) % SCAN_LANES) {
        double rt = r[t] + sign * row[t];
        if (apply)
            r[t] = rt;
        L->acc[j] += row[t];
        double v = kd[t] - 2.0 * rt;
        L->mn[j] = v < L->mn[j] ? v : L->mn[j];
    }
}

static inline void scan_block(ksdt_state *st, int b, int i0, int m,
                              const double *row, double sign, int apply)
{
    scan_lanes L;
    double *acc = L.acc, *mn = L.mn, *r = st->r + i0;
    const double *kd = st->kd + i0;
    int t;
#if KB_AVX2
    if (kb_have_avx2())
        t = apply ? scan_body_avx2(r, kd, row, m, sign, 1, acc, mn)
            : scan_body_avx2(r, kd, row, m, sign, 0, acc, mn);
    else
#endif
        t = apply ? scan_body(r, kd, row, m, sign, 1, acc, mn)
            : scan_body(r, kd, row, m, sign, 0, acc, mn);
    scan_tail(r, kd, row, t, m, sign, apply, &L);
    for (int j = 0; j < SCAN_LANES / 2; j++) {
        acc[j] += acc[j + SCAN_LANES / 2];
        mn[j] = mn[j + SCAN_LANES / 2] < mn[j] ? mn[j + SCAN_LANES / 2] : mn[j];
    }
    st->bsum[b] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    double m01 = mn[1] < mn[0] ? mn[1] : mn[0],
        m23 = mn[3] < mn[2] ? mn[3] : mn[2];
    st->bval[b] = m23 < m01 ? m23 : m01;
}

/* Block b of a pass (below). */
static inline void pass_block(ksdt_state *st, int b, int n, const double *x,
                              const double *s, double *row, double sign,
                              int apply)
{
    int i0 = b * KB_BLOCK, m = n - i0 < KB_BLOCK ? n - i0 : KB_BLOCK;
    if (x)
        kb_stein_row(&st->K, x, s, &(kb_points) {st->X, st->S, st->cap}, i0,
                     i0 + m, row + i0);
    scan_block(st, b, i0, m, row + i0, sign, apply);
}

/* A pass over positions [0, n) with the Stein kernel row of a point y:
 * `row` when it is known (x NULL), else computed from (x, s) block by block
 * into `row` and scanned while it is in cache.  No region on one thread
 * (dict_row). */
static void pass(ksdt_state *st, int n, const double *x, const double *s,
                 double *row, double sign, int apply, int nt)
{
    int nb = (n + KB_BLOCK - 1) / KB_BLOCK;
    int nth = pass_threads(nt, x ? stein_work(st, n) : KB_SCAN_WORK * n);
    if (nth > 1) {
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int b = 0; b < nb; b++)
            pass_block(st, b, n, x, s, row, sign, apply);
    } else {
        for (int b = 0; b < nb; b++)
            pass_block(st, b, n, x, s, row, sign, apply);
    }
    if (x)
        st->evals += n;
}

/* As if a point with row `row` were added: sums and minima, nothing
 * changed. */
static void scan_added(ksdt_state *st, int n, double *row, int nt)
{
    pass(st, n, NULL, NULL, row, 1.0, 0, nt);
}

/* Add (sign 1) or subtract (sign -1) a point's row to the row sums. */
static void update_rows(ksdt_state *st, int n, double *row, double sign,
                        int nt)
{
    pass(st, n, NULL, NULL, row, sign, 1, nt);
}

/* The minima of the current row sums, nothing changed. */
static void scan_current(ksdt_state *st, int n, int nt)
{
    pass(st, n, NULL, NULL, st->cache, 0.0, 0, nt);
}

/* The minimum of v[0..m) (no NaN; the same in any order). */
static inline double values_min(const double *v, int m)
{
    int t = 0;
    double mn = R_PosInf;
#if defined(__SSE2__)
    __m128d m0 = _mm_set1_pd(R_PosInf), m1 = m0, m2 = m0, m3 = m0;
    for (; t + 8 <= m; t += 8) {
        m0 = _mm_min_pd(_mm_loadu_pd(v + t), m0);
        m1 = _mm_min_pd(_mm_loadu_pd(v + t + 2), m1);
        m2 = _mm_min_pd(_mm_loadu_pd(v + t + 4), m2);
        m3 = _mm_min_pd(_mm_loadu_pd(v + t + 6), m3);
    }
    double a[2];
    _mm_storeu_pd(a, _mm_min_pd(_mm_min_pd(m0, m1), _mm_min_pd(m2, m3)));
    mn = a[1] < a[0] ? a[1] : a[0];
#endif
    for (; t < m; t++)
        mn = v[t] < mn ? v[t] : mn;
    return mn;
}

/* The best point to remove after a pass over n positions: the smallest
 * kd_i - 2 r_i (position `exclude` left out), the oldest on exact ties;
 * after a dry pass with row `dry`, of kd_i - 2 (r_i + dry_i).  Only the
 * blocks attaining the minimum are looked at: each block's values once
 * into an array, its minimum, then the oldest position holding it (the
 * values are compared among themselves, so a compiler contracting their
 * expression into an FMA here and not in scan_block is harmless). */
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
    double bv = R_PosInf, v[KB_BLOCK];
    for (int b = 0; b < nb; b++) {
        if (st->bval[b] != gv)
            continue;
        int i0 = b * KB_BLOCK, m = n - i0 < KB_BLOCK ? n - i0 : KB_BLOCK;
        const double *kd = st->kd + i0, *r = st->r + i0;
        if (dry) {
            const double *k = dry + i0;
#pragma omp simd
            for (int t = 0; t < m; t++)
                v[t] = kd[t] - 2.0 * (r[t] + 1.0 * k[t]);
        } else {
#pragma omp simd
            for (int t = 0; t < m; t++)
                v[t] = kd[t] - 2.0 * r[t];
        }
        if (exclude >= i0 && exclude < i0 + m)
            v[exclude - i0] = R_PosInf;
        double mv = values_min(v, m);
        if (!R_FINITE(mv))
            continue;
        for (int t = 0; t < m; t++)
            if (v[t] == mv &&
                (bi < 0 || better(mv, st->sidx[i0 + t], bv, st->sidx[bi]))) {
                bv = mv;
                bi = i0 + t;
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
        update_rows(st, n, st->cache, -1.0, nt);
        st->newest = -1;
    } else {
        double *pt = st->pt;
        kb_get_row(st->X, st->cap, j, st->d, pt);
        kb_get_row(st->S, st->cap, j, st->d, pt + st->d);
        pass(st, n, pt, pt + st->d, st->row, -1.0, 1, nt);
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

/* KSD^2 (times nothing: a V-statistic sum over m^2) of a set of m points
 * whose total is S, without a member whose row sum is r and diagonal kd. */
static inline double ksd2_without(double S, double r, double kd, double m)
{
    return (S - 2.0 * r + kd) / (m * m);
}

/* Greedy removals while the KSD^2 without the best candidate stays at most
 * `bound`, down to fmin points (and never below 1).  Returns removals. */
static int prune(ksdt_state *st, int best, double bound, double fmin, int nt)
{
    int removed = 0;
    while (st->n >= 2 && st->n - 1 >= fmin && best >= 0) {
        if (!(ksd2_without(st->Ssum, st->r[best], st->kd[best], st->n - 1.0) <=
              bound))
            break;
        best = remove_point(st, best, nt);
        removed++;
    }
    return removed;
}

/* Store the new point p at position n, with row sum rnew and total Snew. */
static void append_point(ksdt_state *st, const kb_ksdt_point *p, double rnew,
                         double Snew)
{
    int n = st->n;
    for (int k = 0; k < st->d; k++) {
        size_t a = (size_t) k * st->cap + n;
        st->X[a] = p->x[k];
        st->S[a] = p->s[k];
        st->Xo[a] = p->xo[k];
        st->So[a] = p->so[k];
    }
    st->r[n] = rnew;
    st->kd[n] = p->kd;
    st->cache[n] = p->kd;
    st->sidx[n] = p->sidx;
    st->Ssum = Snew;
    st->newest = n;
    st->n = n + 1;
}

/* The stream index of the first dictionary point whose value in a Stein
 * kernel row is not finite (0 if none: a total overflowed). */
static double first_nonfinite(const ksdt_state *st, const double *row, int n)
{
    R_xlen_t i = kb_first_nonfinite(row, n);
    return i >= 0 ? st->sidx[i] : 0.0;
}

/* One KSDT step: add the point p (row, when known, its Stein kernel row
 * with the dictionary), then prune with budget eps down to no fewer than
 * fmin points.  Returns the number of removals, or -1 when a Stein kernel
 * value with the dictionary is not finite: then the dictionary is as it
 * was (st->bad_sidx is the stream index of the dictionary state involved,
 * or 0 for the new state itself or an overflowing total). */
static int step(ksdt_state *st, const kb_ksdt_point *p, const double *row,
                double eps, double fmin, int nt)
{
    int n = st->n;
    double kt = p->kd;
    ensure_capacity(st, n + 1);
    st->bad_sidx = 0.0;
    if (!R_FINITE(kt))
        return -1;
    int best = -1;
    double rowsum = 0.0;
    if (n > 0) {
        /* the new point's row goes into the cache (which then no longer
         * holds the newest point's), and a dry pass first: the new state is
         * often the one pruned at once, and then D and its row sums stay
         * exactly as they were */
        if (row) {
            memcpy(st->cache, row, (size_t) n * sizeof(double));
            scan_added(st, n, st->cache, nt);
        } else {
            pass(st, n, p->x, p->s, st->cache, 1.0, 0, nt);
        }
        st->newest = -1;
        rowsum = pass_sum(st, n);
        if (!R_FINITE(rowsum) || !R_FINITE(st->Ssum + 2.0 * rowsum + kt)) {
            st->bad_sidx = first_nonfinite(st, st->cache, n);
            return -1;
        }
        best = pass_argmin(st, n, -1, st->cache);
    }
    st->t += 1.0;
    double rnew = rowsum + kt, Snew = st->Ssum + 2.0 * rowsum + kt,
        n1 = n + 1.0, bound = Snew / (n1 * n1) + eps;
    if (n >= 1 && n >= fmin &&
        (best < 0 || better(kt - 2.0 * rnew, p->sidx, st->kd[best] -
                            2.0 * (st->r[best] + 1.0 * st->cache[best]),
                            st->sidx[best])) &&
        ksd2_without(Snew, rnew, kt, n) <= bound) {
        /* the new state is pruned at once */
        if (!(n >= 2 && n - 1 >= fmin))
            return 1;
        scan_current(st, n, nt);
        return 1 + prune(st, pass_argmin(st, n, -1, NULL), bound, fmin, nt);
    }
    if (n > 0) {
        update_rows(st, n, st->cache, 1.0, nt);
        best = pass_argmin(st, n, -1, NULL);
    }
    append_point(st, p, rnew, Snew);
    if (best < 0 || better(kt - 2.0 * st->r[n], p->sidx,
                           st->kd[best] - 2.0 * st->r[best], st->sidx[best]))
        best = n;
    return prune(st, best, bound, fmin, nt);
}

static void record(ksdt_state *st, int removed, double offered)
{
    double nn = st->n;
    st->h_ksd[st->hlen] = sqrt(st->Ssum > 0 ? st->Ssum : 0.0) / nn;
    st->h_size[st->hlen] = nn;
    st->h_removed[st->hlen] = removed;
    st->hlen++;
    st->offered = offered;
}

double kb_ksdt_diag(ksdt_state *st, const double *s)
{
    st->evals += 1.0;
    return kb_stein_diag(&st->K, s);
}

int kb_ksdt_size(const ksdt_state *st) { return st->n; }
int kb_ksdt_d(const ksdt_state *st) { return st->d; }

const char *const kb_start_rules[] = {"last", "rand", "infl", NULL};

/* A start for fresh moves: a uniformly random dictionary point, or the
 * point of least influence argmin_i 2 r_i - k_p(x_i, x_i) (Chen et
 * al. 2019; ties to the oldest).  Its user coordinates and score into x, s. */
void kb_ksdt_start_point(const ksdt_state *st, int rule, double *x, double *s)
{
    int j = 0;
    if (rule == KB_START_RAND) {
        j = (int) floor(unif_rand() * st->n);
        if (j >= st->n) j = st->n - 1;
    } else {
        double bv = R_PosInf;
        for (int i = 0; i < st->n; i++) {
            double v = 2.0 * st->r[i] - st->kd[i];
            if (v < bv || (v == bv && st->sidx[i] < st->sidx[j])) {
                bv = v;
                j = i;
            }
        }
    }
    kb_get_row(st->Xo, st->cap, j, st->d, x);
    kb_get_row(st->So, st->cap, j, st->d, s);
}

static void block_init(ksdt_state *st, kb_cblock *cb)
{
    cb->buf = (double *) R_alloc((size_t) 4 * st->d, sizeof(double));
    cb->filled = 0;
}

/* Offer one candidate; reg: add the regulariser lap - w log p with weight
 * w on log p (Benard et al. 2023; the candidates of a block share t).
 * Returns 0, or -1 on a non-finite Stein kernel value (st->bad_sidx as in
 * step()). */
static int block_offer(ksdt_state *st, kb_cblock *cb, const kb_ksdt_point *p,
                       int reg, double w, int nt)
{
    int n = st->n, d = st->d;
    double kd = p->kd;
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
        dict_row(st, p->x, p->s, row, nt);
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += row[i];
        crit += 2.0 * sum;
        if (!R_FINITE(crit)) {
            st->bad_sidx = first_nonfinite(st, row, n);
            return -1;
        }
    }
    if (reg) {
        /* lap and logp are finite (checked by the push, or the sampler's);
         * only an overflow of the sum is left, reported as the state's */
        crit += p->lap - w * p->logp;
        if (!R_FINITE(crit))
            return -1;
    }
    if (cb->filled == 0 || crit < cb->crit) {
        cb->crit = crit;
        cb->cur = 1 - cb->cur;
        cb->kd = kd;
        cb->sidx = p->sidx;
        cb->best = cb->filled;
        memcpy(cb->buf, p->xo, (size_t) d * sizeof(double));
        memcpy(cb->buf + d, p->so, (size_t) d * sizeof(double));
        memcpy(cb->buf + 2 * d, p->x, (size_t) d * sizeof(double));
        memcpy(cb->buf + 3 * d, p->s, (size_t) d * sizeof(double));
    }
    cb->filled++;
    return 0;
}

/* Offer the block's best to KSDT; returns as step(). */
static int block_commit(ksdt_state *st, kb_cblock *cb, double eps,
                        double fmin, int nt)
{
    int d = st->d;
    cb->filled = 0;
    kb_ksdt_point p = {cb->buf, cb->buf + d, cb->buf + 2 * d, cb->buf + 3 * d,
                       cb->kd, cb->sidx};
    return step(st, &p, st->n > 0 ? cb->rows[cb->cur] : NULL, eps, fmin, nt);
}

/* The error for a step or an offer that met a non-finite value. */
static void NORET nonfinite(const ksdt_state *st, const char *what,
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

/* ---- feeds: states offered one at a time ------------------------------ */

void kb_ksdt_feed_ctl(kb_ksdt_feed *f, SEXP ctl, R_xlen_t steps)
{
    f->eps = kb_arg_vector(kb_list_elt(ctl, "eps"), "eps", steps);
    f->fmin = kb_arg_vector(kb_list_elt(ctl, "fmin"), "fmin", steps);
    f->nt = kb_nthreads(kb_list_elt(ctl, "nthreads"));
    f->progress = kb_arg_function(kb_list_elt(ctl, "progress"), "progress");
    SEXP lambda = kb_list_elt(ctl, "lambda"), adaptive = kb_list_elt(ctl, "adaptive");
    f->reg = KB_REG_NONE;
    f->lambda = 0.0;
    if (adaptive != R_NilValue && kb_scalar_flag(adaptive, "adaptive")) {
        f->reg = KB_REG_ADAPTIVE;
    } else if (lambda != R_NilValue) {
        f->lambda = kb_scalar_real(lambda, "lambda");
        if (!(f->lambda > 0))
            kb_error_arg(_("'lambda' must be positive"));
        f->reg = KB_REG_LAMBDA;
    }
}

void kb_ksdt_feed_start(ksdt_state *st, kb_ksdt_feed *f, R_xlen_t steps)
{
    ensure_history(st, st->hlen + steps);
    block_init(st, &f->cb);
    f->steps = 0;
    f->chosen = 0;
    f->base = st->offered;
    f->evals_seen = st->evals;
    f->last_time = (double) time(NULL);
    f->tick.acc = 0.0;
}

int kb_ksdt_feed_offer(ksdt_state *st, kb_ksdt_feed *f, const kb_ksdt_point *p,
                       double row, int close)
{
    double eps = f->eps[f->steps], fmin = f->fmin[f->steps];
    int rem;
    if (f->C == 1) {
        rem = step(st, p, NULL, eps, fmin, f->nt);
        f->chosen = 0;
    } else {
        double w = f->reg == KB_REG_LAMBDA ? f->lambda * (st->n + 1.0) : 1.0;
        if (block_offer(st, &f->cb, p, f->reg != KB_REG_NONE, w, f->nt) < 0)
            nonfinite(st, f->what, row, st->offered - f->base);
        if (f->count_diag)
            st->evals += 1.0;
        if (f->cb.filled < f->C && !close)
            return 0;
        f->chosen = f->cb.best;
        rem = block_commit(st, &f->cb, eps, fmin, f->nt);
    }
    if (rem < 0)
        nonfinite(st, f->what, row, st->offered - f->base);
    if (f->C == 1 && f->count_diag)
        st->evals += 1.0;
    record(st, rem, p->sidx);
    f->steps++;
    return 1;
}

void kb_ksdt_feed_tick(ksdt_state *st, kb_ksdt_feed *f, double extra,
                       double done, int last)
{
    double work = (st->evals - f->evals_seen) * KB_STEIN_WORK(st->d) + extra;
    f->evals_seen = st->evals;
    if (!kb_tick(&f->tick, work) && !last)
        return;
    double now = (double) time(NULL);
    if (f->progress != R_NilValue && (now > f->last_time || last)) {
        kb_call_progress(f->progress, done, st->n,
                         st->hlen > 0 ? st->h_ksd[st->hlen - 1] : NA_REAL);
        f->last_time = now;
    }
}

/* A push or a sampler holds the stream while it runs: a closure or a
 * progress function that pushes to the same stream is refused, and the
 * hold is released however the call ends (error, interrupt). */
void kb_ksdt_hold(ksdt_state *st)
{
    if (st->busy)
        kb_error_class("kb_error_state",
                       _("the KSDT stream is in use by a running ksdt_push() "
                         "or sampler (a closure or progress function cannot "
                         "push to the stream it is called from)"));
    st->busy = 1;
}

void kb_ksdt_release(void *data)
{
    ((ksdt_state *) data)->busy = 0;
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
 * in blocks of `candidates` consecutive rows (1: every row), with per-step
 * budgets eps and minimum sizes fmin (one per block).  Every row's
 * k_p(x, x) is checked before anything changes, so a push rejected there
 * leaves the stream as it was; a Stein kernel value with the dictionary
 * that overflows stops the push after the blocks before it were taken. */
typedef struct {
    ksdt_state *st;
    const double *m[4];        /* xo, so, x, s: n x d each */
    const double *lap, *logp;  /* per row, for the regularised rule, or NULL */
    int n;
    kb_ksdt_feed feed;
} push_args;

/* k_p(x_i, x_i) of every row from its score s (kernel coordinates). */
static double *push_diag(ksdt_state *st, const double *S, int m)
{
    double *s = (double *) R_alloc((size_t) st->d, sizeof(double));
    double *kdv = (double *) R_alloc(m > 0 ? m : 1, sizeof(double));
    for (int i = 0; i < m; i++) {
        kb_get_row(S, m, i, st->d, s);
        kdv[i] = kb_stein_diag(&st->K, s);
        if (!R_FINITE(kdv[i]))
            kb_error_numeric(_("KSDT push: the Stein kernel of row %d with "
                               "itself is not finite (overflow: its score is "
                               "too large); scale the data or the kernel; "
                               "nothing was pushed"), i + 1);
    }
    return kdv;
}

static SEXP push_body(void *data)
{
    push_args *A = (push_args *) data;
    ksdt_state *st = A->st;
    kb_ksdt_feed *f = &A->feed;
    int d = st->d, m = A->n;
    double *buf = (double *) R_alloc((size_t) 4 * d, sizeof(double));
    double *kdv = push_diag(st, A->m[3], m);
    kb_ksdt_feed_start(st, f, (m + f->C - 1) / f->C);
    double base = st->offered;
    for (int i = 0; i < m; i++) {
        for (int q = 0; q < 4; q++)
            kb_get_row(A->m[q], m, i, d, buf + (size_t) q * d);
        kb_ksdt_point p = {buf, buf + d, buf + 2 * d, buf + 3 * d, kdv[i],
                           base + i + 1.0, A->lap ? A->lap[i] : 0.0,
                           A->logp ? A->logp[i] : 0.0};
        kb_ksdt_feed_offer(st, f, &p, i + 1.0, i == m - 1);
        kb_ksdt_feed_tick(st, f, 0.0, i + 1.0, i == m - 1);
    }
    return R_NilValue;
}

/* .Call entry: rows = list(xo, so, x, s), ctl = list(eps, fmin,
 * candidates, nthreads, progress) and, for the regularised candidate rule,
 * lap and logp (one per row) with lambda or adaptive (kb_ksdt_feed_ctl). */
SEXP kb_ksdt_push(SEXP ptr, SEXP rows, SEXP ctl)
{
    static const char *nm[4] = {"x", "score", "x (in the kernel's basis)",
                                "score (in the kernel's basis)"};
    push_args A;
    A.st = kb_ksdt_state(ptr);
    int d = A.st->d, m = -1;
    for (int q = 0; q < 4; q++) {
        SEXP v = VECTOR_ELT(rows, q);
        m = kb_arg_matrix(v, nm[q], m, d);
        A.m[q] = REAL(v);
        R_xlen_t bad = kb_first_nonfinite(A.m[q], (R_xlen_t) m * d);
        if (bad >= 0)
            kb_error_numeric(_("KSDT push: %s is not finite at row %d; "
                               "nothing was pushed"), nm[q],
                             (int) (bad % m) + 1);
    }
    A.n = m;
    kb_ksdt_feed *f = &A.feed;
    f->C = kb_scalar_int(kb_list_elt(ctl, "candidates"), "candidates");
    if (f->C < 1)
        KB_INTERNAL("candidates must be positive");
    R_xlen_t nb = (m + f->C - 1) / f->C;
    kb_ksdt_feed_ctl(f, ctl, nb);
    A.lap = A.logp = NULL;
    if (f->reg != KB_REG_NONE) {
        A.lap = kb_arg_vector(kb_list_elt(ctl, "lap"), "lap", m);
        A.logp = kb_arg_vector(kb_list_elt(ctl, "logp"), "logp", m);
        if (kb_first_nonfinite(A.lap, m) >= 0 ||
            kb_first_nonfinite(A.logp, m) >= 0)
            kb_error_arg(_("'lap' and 'logp' must be finite"));
    }
    f->what = "row";
    f->count_diag = 1;
    kb_ksdt_hold(A.st);
    R_ExecWithCleanup(push_body, &A, kb_ksdt_release, A.st);
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
    ksdt_state *st = kb_ksdt_state(ptr);
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

/* .Call entry: c(steps, dictionary size, current KSD, rows offered). */
SEXP kb_ksdt_info(SEXP ptr)
{
    ksdt_state *st = kb_ksdt_state(ptr);
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
    return Rf_ScalarInteger(kb_ksdt_state(ptr)->d);
}

/* .Call entry, for tests: make the n-th next allocation of the stream fail
 * (0: never). */
SEXP kb_ksdt_fail_alloc(SEXP ptr, SEXP n)
{
    ksdt_state *st = kb_ksdt_state(ptr);
    st->fail_alloc = kb_scalar_int(n, "n");
    return R_NilValue;
}
