/* Particle flows (DESIGN.md, "Particle flows"): the O(n^2 d) interaction
 * terms of SVGD, KSD descent, the MMD / DrMMD witnesses and MIED.  The
 * iteration loops live in R (R/flows.R); each entry point here is one
 * evaluation at the current particles, threaded over particles.  Kernel
 * values and distances come from kernels.c, the Stein terms of KSD descent
 * from stein.c.  Kernels reaching the kernel-layer entries are isotropic:
 * L = lam I.  Each entry checks for an interrupt on entry, for one that
 * arrived while R code (a score closure) ran. */
#include <float.h>
#include <math.h>
#include "stein.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

/* Per-row values summed chunk by chunk in row order (a kb_loop after()),
 * so that the total does not depend on the number of threads.  A loop's
 * context starts with this header. */
typedef struct {
    double *v, total;
} row_total;

static R_xlen_t row_total_add(void *ctx, R_xlen_t i0, R_xlen_t i1)
{
    row_total *q = (row_total *) ctx;
    double t = 0.0;
    for (R_xlen_t i = i0; i < i1; i++)
        t += q->v[i];
    q->total += t;
    return -1;
}

/* ---- SVGD: the median bandwidth ---------------------------------------
 * The median of all n^2 squared distances (zero diagonal included), exact,
 * without keeping the n (n - 1) / 2 pair distances: a sampled bracket, then
 * passes over the rows that recompute the distances (svgd_median). */

#define SVGD_TILE 64

/* The q-th smallest (0-based) of v[0..m-1] by quickselect (Hoare
 * partition, median-of-three pivot); reorders v so that v[q] is in place
 * and everything after it is >= v[q].  No NaN here. */
static double pick_rank(double *v, R_xlen_t m, R_xlen_t q)
{
    R_xlen_t lo = 0, hi = m - 1;
    while (hi > lo) {
        R_xlen_t mid = lo + (hi - lo) / 2;
        double a = v[lo], b = v[mid], c = v[hi], piv;
        piv = a < b ? (b < c ? b : (a < c ? c : a)) :
            (a < c ? a : (b < c ? c : b));
        R_xlen_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < piv)
                i++;
            while (v[j] > piv)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (q <= j)
            hi = j;
        else if (q >= i)
            lo = i;
        else
            break;
    }
    return v[q];
}

/* The two middle pair ranks (0-based, q1 = q0 or q0 + 1) of the median of
 * all n^2 entries of the squared-distance matrix (zero diagonal included):
 * sorted, those entries are n zeros and then each of the N = n (n - 1) / 2
 * pair values twice, so the 1-based rank r > n holds pair rank
 * ceil((r - n) / 2) - 1.  A rank -1 stands for a zero. */
static void median_ranks(R_xlen_t n, R_xlen_t *q)
{
    double NN = (double) n * (double) n;
    R_xlen_t r[2];
    if (((R_xlen_t) NN) % 2 == 0) {
        r[0] = (R_xlen_t) (NN / 2);
        r[1] = r[0] + 1;
    } else {
        r[0] = r[1] = (R_xlen_t) ((NN + 1) / 2);
    }
    for (int a = 0; a < 2; a++)
        q[a] = r[a] <= n ? -1 : (r[a] - n + 1) / 2 - 1;
}

/* A bracket [lo, hi] around pair rank qa of the N pair distances, from
 * order statistics of a sample of pairs drawn by a fixed xorshift stream
 * (R's RNG is left alone). */
static void median_bracket(const double *X, R_xlen_t n, int d, R_xlen_t qa,
                           double *lo, double *hi)
{
    R_xlen_t N = n * (n - 1) / 2, ms = N < 16384 ? N : 16384, ij[2];
    double *smp = (double *) R_alloc((size_t) ms, sizeof(double));
    unsigned long long st = 0x9E3779B97F4A7C15ULL;
    for (R_xlen_t t = 0; t < ms; t++) {
        for (int a = 0; a < 2; a++) {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            ij[a] = (R_xlen_t) ((st >> 11) % (unsigned long long) n);
        }
        if (ij[1] == ij[0])
            ij[1] = (ij[1] + 1) % n;
        kb_sqdist_block(d, X + ij[0], n, X, n, ij[1], 1, smp + t);
    }
    *lo = R_NegInf;
    *hi = R_PosInf;
    double pos = (double) qa / N * ms, del = 3.0 * sqrt((double) ms) + 16.0;
    R_xlen_t a = (R_xlen_t) (pos - del), b = (R_xlen_t) (pos + del) + 1;
    if (a > 0)
        *lo = pick_rank(smp, ms, a);
    if (b < ms - 1)
        *hi = a > 0 ? pick_rank(smp + a, ms - a, b - a) : pick_rank(smp, ms, b);
}

/* The selection passes.  The distance of pair i < j is the row-i value of
 * kb_sqdist_block, as the SVGD direction computes it.  Each pass looks at
 * an interval
 * [a, b] known to hold pair rank qa, counts the values below it, collects
 * the values inside it while they fit, and builds a histogram of them
 * (MED_BINS bins, with each bin's smallest and largest value).  When the
 * values inside were all collected, a quickselect finishes; otherwise the
 * bin holding rank qa becomes the next interval.  The first interval is the
 * sampled bracket; when it misses, the side of it that holds the rank
 * follows.  Memory a thread: the histogram, 3 MED_BINS numbers, and at
 * most MED_COLLECT collected values (8 MB). */

#define MED_BINS 4096
#define MED_COLLECT ((R_xlen_t) 1 << 20)

typedef struct {
    const double *X;
    R_xlen_t n, cap;          /* cap: values a thread may collect */
    int d, nb;                /* nb bins: MED_BINS, or 1 when b = Inf */
    double a, b, s1, scale;   /* bin of v: (v - a) s1 scale, cut to nb - 1 */
    /* per thread: */
    R_xlen_t *below, *above, *ncol, *hist;
    double *bmin, *bmax, *col;
} med_ctx;

/* The bin of v in [a, b]: nondecreasing in v (each step rounds
 * monotonically), so a bin's values are those between its smallest and
 * largest. */
static inline int med_bin(const med_ctx *q, double v)
{
    double u = (v - q->a) * q->s1 * q->scale;
    return u < q->nb - 1 ? (int) u : q->nb - 1;
}

static void med_row(void *ctx, R_xlen_t i, double *r)
{
    const med_ctx *q = (const med_ctx *) ctx;
    const int tid = kb_thread_id();
    const double a = q->a, b = q->b;
    R_xlen_t *hist = q->hist + (size_t) tid * MED_BINS, bl = 0, ab = 0,
        nc = q->ncol[tid];
    double *bmin = q->bmin + (size_t) tid * MED_BINS,
        *bmax = q->bmax + (size_t) tid * MED_BINS,
        *col = q->col + (size_t) tid * q->cap;
    for (R_xlen_t j0 = i + 1; j0 < q->n; j0 += KB_BLOCK) {
        int m = (int) (q->n - j0 < KB_BLOCK ? q->n - j0 : KB_BLOCK), k = 0;
        double cb = 0.0, ca = 0.0, *c = r + KB_BLOCK;
        kb_sqdist_block(q->d, q->X + i, q->n, q->X, q->n, j0, m, r);
        /* counts in doubles (exact), so that the loop vectorises */
#pragma omp simd reduction(+:cb, ca)
        for (int t = 0; t < m; t++) {
            cb += r[t] < a ? 1.0 : 0.0;
            ca += r[t] > b ? 1.0 : 0.0;
        }
        bl += (R_xlen_t) cb;
        ab += (R_xlen_t) ca;
        if (cb + ca == m)
            continue;
        for (int t = 0; t < m; t++) {   /* without branches: few are in */
            c[k] = r[t];
            k += (r[t] >= a) & (r[t] <= b);
        }
        for (int t = 0; t < k; t++) {
            double v = c[t];
            int h = med_bin(q, v);
            if (hist[h]++ == 0) {
                bmin[h] = bmax[h] = v;
            } else {
                bmin[h] = v < bmin[h] ? v : bmin[h];
                bmax[h] = v > bmax[h] ? v : bmax[h];
            }
            if (nc <= q->cap) {   /* cap + 1: overflowed */
                if (nc < q->cap)
                    col[nc] = v;
                nc++;
            }
        }
    }
    q->below[tid] += bl;
    q->above[tid] += ab;
    q->ncol[tid] = nc;
}

/* One pass over [a, b]; the per-thread counts are merged into thread 0's
 * slots.  Returns 1 when every value inside was collected (they are then
 * moved to the front of col). */
static int med_pass(med_ctx *q, int nt)
{
    q->nb = R_FINITE(q->b) && q->b > q->a ? MED_BINS : 1;
    q->s1 = q->b - q->a < 1e-280 ? 0x1p+600 : 1.0;   /* keep scale finite */
    q->scale = q->nb > 1 ? MED_BINS / ((q->b - q->a) * q->s1) : 0.0;
    for (int t = 0; t < nt; t++)
        q->below[t] = q->above[t] = q->ncol[t] = 0;
    memset(q->hist, 0, (size_t) nt * MED_BINS * sizeof(R_xlen_t));
    kb_loop L = {.nt = nt, .cost1 = -KB_KERNEL_WORK(q->d),
                 .cost0 = (double) (q->n - 1) * KB_KERNEL_WORK(q->d) + 1.0,
                 .dynamic = 8, .scratch = kb_scratch_alloc(2 * KB_BLOCK, nt),
                 .item = med_row, .ctx = q};
    kb_loop_run(&L, 0, q->n - 1);
    int whole = q->ncol[0] <= q->cap;
    R_xlen_t tot = q->ncol[0];
    for (int t = 1; t < nt; t++) {
        q->below[0] += q->below[t];
        q->above[0] += q->above[t];
        const R_xlen_t *h = q->hist + (size_t) t * MED_BINS;
        const double *mn = q->bmin + (size_t) t * MED_BINS,
            *mx = q->bmax + (size_t) t * MED_BINS;
        for (int k = 0; k < q->nb; k++) {
            if (!h[k])
                continue;
            if (!q->hist[k] || mn[k] < q->bmin[k])
                q->bmin[k] = mn[k];
            if (!q->hist[k] || mx[k] > q->bmax[k])
                q->bmax[k] = mx[k];
            q->hist[k] += h[k];
        }
        if (q->ncol[t] > q->cap)
            whole = 0;
        if (whole)
            memmove(q->col + tot, q->col + (size_t) t * q->cap,
                    (size_t) q->ncol[t] * sizeof(double));
        tot += q->ncol[t];
    }
    q->ncol[0] = tot;
    return whole;
}

/* The value of pair rank r, starting from the interval [c->a, c->b]
 * (moved as the passes narrow it).  *next: the value of rank r + 1 when
 * these passes show it (it is in the same interval), else NaN. */
static double med_select(med_ctx *c, int nt, R_xlen_t r, double *next)
{
    const R_xlen_t N = c->n * (c->n - 1) / 2;
    *next = R_NaN;
    for (int stage = 0;; stage++) {
        if (stage == 200)
            KB_INTERNAL("the median selection does not converge");
        int whole = med_pass(c, nt);
        R_xlen_t lo = c->below[0], in = N - lo - c->above[0], hs = 0;
        for (int k = 0; k < c->nb; k++)
            hs += c->hist[k];
        if (hs != in)
            kb_error_numeric(_("the particles' pair distances are not all "
                               "numbers: the flow diverged"));
        if (r < lo) {         /* the interval missed: the side below */
            c->b = nextafter(c->a, 0.0);
            c->a = 0.0;
            continue;
        }
        if (r >= lo + in) {   /* the side above */
            c->a = nextafter(c->b, R_PosInf);
            c->b = R_PosInf;
            continue;
        }
        if (whole) {
            double v = pick_rank(c->col, in, r - lo);
            if (r - lo + 1 < in) {   /* the smallest after the partition */
                *next = R_PosInf;
                for (R_xlen_t t = r - lo + 1; t < in; t++)
                    *next = c->col[t] < *next ? c->col[t] : *next;
            }
            return v;
        }
        int k = 0;
        while (r >= lo + c->hist[k])
            lo += c->hist[k++];
        int j = k + 1;        /* the next bin with values */
        while (j < c->nb && !c->hist[j])
            j++;
        if (r + 1 < lo + c->hist[k])
            *next = c->bmin[k] == c->bmax[k] ? c->bmin[k] : R_NaN;
        else if (j < c->nb)
            *next = c->bmin[j];
        if (r == lo || c->bmin[k] == c->bmax[k])
            return c->bmin[k];   /* the first of its bin, or ties */
        if (r == lo + c->hist[k] - 1)
            return c->bmax[k];
        c->a = c->bmin[k];
        /* an overflowed distance (Inf) stays above the next interval,
         * which then has bins */
        c->b = c->bmax[k] < DBL_MAX ? c->bmax[k] : DBL_MAX;
    }
}

/* The median of all n^2 squared distances: the mean of the entries of
 * ranks n^2 / 2 and n^2 / 2 + 1 (n even), or of rank (n^2 + 1) / 2.  cap:
 * values a thread may collect (0: the default); br: a first interval
 * instead of the sampled bracket, or NULL (the tests steer the passes with
 * both). */
static double svgd_median(const double *X, R_xlen_t n, int d, int nt,
                                 R_xlen_t cap, const double *br)
{
    R_xlen_t N = n * (n - 1) / 2, q[2];
    median_ranks(n, q);
    R_xlen_t qa = q[0] < 0 ? q[1] : q[0], q1 = q[1];
    if (cap <= 0)
        cap = MED_COLLECT;
    med_ctx c = {.X = X, .n = n, .d = d, .cap = N + 1 < cap ? N + 1 : cap};
    R_xlen_t *cnt = (R_xlen_t *) R_alloc((size_t) nt * (3 + MED_BINS),
                                         sizeof(R_xlen_t));
    double *buf = (double *) R_alloc((size_t) nt * (2 * MED_BINS + c.cap),
                                     sizeof(double));
    c.below = cnt;
    c.above = cnt + nt;
    c.ncol = cnt + 2 * nt;
    c.hist = cnt + 3 * nt;
    c.bmin = buf;
    c.bmax = buf + (size_t) nt * MED_BINS;
    c.col = c.bmax + (size_t) nt * MED_BINS;
    if (br) {
        c.a = br[0];
        c.b = br[1];
    } else {
        median_bracket(X, n, d, qa, &c.a, &c.b);
    }
    if (!(c.a > 0.0))
        c.a = 0.0;            /* distances are >= 0 */
    double v1, v0 = med_select(&c, nt, qa, &v1);
    if (q[0] < 0)
        return 0.5 * v0;
    if (q1 == qa)
        return v0;
    if (ISNAN(v1)) {          /* rank q1: the smallest value above v0 */
        c.a = nextafter(v0, R_PosInf);
        c.b = R_PosInf;
        double nx;
        v1 = med_select(&c, nt, q1, &nx);
    }
    return 0.5 * (v0 + v1);
}

/* The median heuristic h = sqrt(0.5 med / log(n + 1)). */
static double svgd_median_h(const double *X, R_xlen_t n, int d, int nt)
{
    double h = sqrt(0.5 * svgd_median(X, n, d, nt, 0, NULL) /
                    log((double) n + 1.0));
    if (!(h > 0.0))
        kb_error_numeric(_("the median heuristic gives a zero bandwidth: "
                           "the particles coincide; give a numeric "
                           "'bandwidth'"));
    return h;
}

/* ---- SVGD: the direction ---------------------------------------------- */

/* The n^2 pairs are visited in tiles of the upper triangle, each kernel
 * value computed once and added to both of its rows.  The tiles are dealt
 * to G = svgd_lanes(n, d) lanes (tile t to lane t mod G); a lane adds its
 * tiles, in tile order, to its own sums, and the lanes' sums are added in
 * lane order at the end: the order of every addition depends on n only,
 * not on the number of threads or the schedule.  The lanes are a round's
 * kb_loop items (a thread takes a whole lane's share of the round), so
 * the memory is G lanes of O(n) sums, not O(tiles).  A lane's sums: the
 * trace term and a pad (the sums stay 16-byte aligned), then rs (n),
 * KS (d x n), KX (d x n). */
#define SVGD_HEAD 2

/* Lanes for n particles in d dimensions: 8 (a round's work in pieces of
 * an eighth, so that threads stay balanced), fewer while the G (2 d + 1) n
 * sums pass 16 MB, at least 2. */
static int svgd_lanes(R_xlen_t n, int d)
{
    double lane = 8.0 * (double) n * (2.0 * d + 1.0);
    int g = 8;
    while (g > 2 && g * lane > 16.0 * 1048576.0)
        g--;
    return g;
}

typedef struct {
    const double *X, *S;
    R_xlen_t n;
    int d, G;                 /* dimension, lanes */
    const kb_kernel *K;       /* Gaussian, lam = 1 / h^2 */
    R_xlen_t T, ntile;        /* tiles per side, tiles */
    R_xlen_t k0, m;           /* the round: a lane's tiles k0..k0+m-1 */
    size_t per;               /* a lane's doubles */
    double *lanes;
} svgd_ctx;

/* Row i of a tile against j0..j0+m-1: adds to the sums in acc; returns the
 * row's trace term (twice it off the diagonal, for the mirrored pairs).
 * The Gaussian's gradient is k lam (x_i - x_j), in closed form. */
static double svgd_row(const svgd_ctx *q, R_xlen_t i, R_xlen_t j0, int m,
                       int diag, double *acc, double *d2)
{
    const R_xlen_t n = q->n;
    double *kv = d2 + SVGD_TILE, sums[2], *rs = acc + SVGD_HEAD,
        *KS = rs + n, *KX = KS + (size_t) q->d * n;
    /* on a diagonal tile j may be below i: |x_i - x_j|^2 is the same
     * number either way (no contraction into FMA here) */
    kb_sqdist_block(q->d, q->X + i, n, q->X, n, j0, m, d2);
    kb_phi0_iso_sums(q->K, m, d2, kv, sums);
    rs[i] += sums[0];
    if (!diag)
        for (int t = 0; t < m; t++)
            rs[j0 + t] += kv[t];
    for (int k = 0; k < q->d; k++) {
        const double *sk = q->S + (size_t) k * n, *xk = q->X + (size_t) k * n;
        double as = 0.0, ax = 0.0;
#pragma omp simd reduction(+:as, ax)
        for (int t = 0; t < m; t++) {
            as += kv[t] * sk[j0 + t];
            ax += kv[t] * xk[j0 + t];
        }
        KS[(size_t) k * n + i] += as;
        KX[(size_t) k * n + i] += ax;
        if (diag)
            continue;
        double sik = sk[i], xik = xk[i];
        double *KSj = KS + (size_t) k * n + j0, *KXj = KX + (size_t) k * n + j0;
#pragma omp simd
        for (int t = 0; t < m; t++) {
            KSj[t] += kv[t] * sik;
            KXj[t] += kv[t] * xik;
        }
    }
    return diag ? sums[1] : 2.0 * sums[1];
}

/* Lane g's tiles of the round, in tile order (kb_loop item). */
static void svgd_lane(void *ctx, R_xlen_t g, double *tb)
{
    const svgd_ctx *q = (const svgd_ctx *) ctx;
    double *acc = q->lanes + q->per * (size_t) g;
    for (R_xlen_t k = q->k0; k < q->k0 + q->m; k++) {
        R_xlen_t tile = g + k * q->G, I, J;
        if (tile >= q->ntile)
            break;
        kb_tile_upper(q->T, tile, &I, &J);
        R_xlen_t i0 = I * SVGD_TILE, j0 = J * SVGD_TILE,
            i1 = i0 + SVGD_TILE < q->n ? i0 + SVGD_TILE : q->n,
            j1 = j0 + SVGD_TILE < q->n ? j0 + SVGD_TILE : q->n;
        double trl = 0.0;
        for (R_xlen_t i = i0; i < i1; i++)
            trl += svgd_row(q, i, j0, (int) (j1 - j0), I == J, acc, tb);
        acc[0] += trl;
    }
}

/* phi = (K S + rep) / n with rep_i = sum_j grad_{x_j} k(x_j, x_i), from the
 * lanes' sums (added in lane order); returns KSD^2. */
static double svgd_finish(const svgd_ctx *q, double h2, double *phi)
{
    const R_xlen_t n = q->n;
    double *acc = q->lanes;
    for (int g = 1; g < q->G; g++) {
        const double *src = acc + q->per * (size_t) g;
        for (size_t t = 0; t < q->per; t++)
            acc[t] += src[t];
    }
    double tr = acc[0];
    acc += SVGD_HEAD;
    const double *rs = acc, *KS = acc + n, *KX = KS + (size_t) q->d * n;
    double ss = 0.0;
    for (int k = 0; k < q->d; k++) {
        const double *sk = q->S + (size_t) k * n, *xk = q->X + (size_t) k * n,
            *ksk = KS + (size_t) k * n, *kxk = KX + (size_t) k * n;
        double *pk = phi + (size_t) k * n;
        for (R_xlen_t i = 0; i < n; i++) {
            double rep = (xk[i] * rs[i] - kxk[i]) / h2;
            ss += sk[i] * (ksk[i] + 2.0 * rep);
            pk[i] = (ksk[i] + rep) / (double) n;
        }
    }
    return (ss + tr) / ((double) n * n);
}

typedef struct {
    svgd_ctx *q;
    kb_loop *L;
    double h2, *phi, ksd2;
} svgd_run;

/* The rounds of lanes, then the direction (R_ExecWithCleanup body). */
static SEXP svgd_body(void *data)
{
    svgd_run *r = (svgd_run *) data;
    svgd_ctx *q = r->q;
    R_xlen_t per_lane = (q->ntile + q->G - 1) / q->G;
    for (q->k0 = 0; q->k0 < per_lane; q->k0 += q->m)
        kb_loop_run(r->L, 0, q->G);
    r->ksd2 = svgd_finish(q, r->h2, r->phi);
    return R_NilValue;
}

static void svgd_free(void *data)
{
    svgd_ctx *q = (svgd_ctx *) data;
    free(q->lanes);
    q->lanes = NULL;
}

/* The SVGD direction for the Gaussian kernel of bandwidth h into phi;
 * returns the V-statistic KSD^2 of the particles with that kernel. */
static double svgd_direction(svgd_ctx *q, int nt, double h, double *phi)
{
    double h2 = h * h, lam = 1.0 / h2, b = 1.0 / (h2 * h2);
    if (!(h2 > 0.0) || !R_FINITE(h2) || !R_FINITE(b))
        kb_error_numeric(_("the SVGD kernel bandwidth %g is out of range (its "
                           "square or 1 / h^4 is not a finite positive "
                           "number): the particles' scale is the cause; "
                           "rescale the problem"), h);
    kb_kernel K;
    kb_kernel_gaussian(&K, q->d, &lam);
    R_xlen_t n = q->n, T = kb_tiles_side(n, SVGD_TILE);
    q->K = &K;
    q->T = T;
    q->ntile = T * (T + 1) / 2;
    q->G = svgd_lanes(n, q->d);
    q->per = (SVGD_HEAD + (size_t) n * (2 * q->d + 1) + 1) / 2 * 2;
    /* rounds of about KB_TICK_WORK: m tiles a lane, the G lanes one chunk */
    double tile_work = (double) SVGD_TILE * SVGD_TILE * (2.0 * q->d + 4.0);
    R_xlen_t per_lane = (q->ntile + q->G - 1) / q->G;
    q->m = (R_xlen_t) (KB_TICK_WORK / (tile_work * q->G));
    q->m = q->m < 1 ? 1 : q->m > per_lane ? per_lane : q->m;
    kb_loop L = {.nt = nt, .dynamic = 1, .cost0 = tile_work * (double) q->m,
                 .scratch = kb_scratch_alloc(2 * SVGD_TILE, nt),
                 .item = svgd_lane, .ctx = q};
    svgd_run run = {q, &L, h2, phi, 0.0};
    /* the lanes from calloc, freed when the direction ends or an interrupt
     * unwinds (R_alloc'd memory is fresh pages at every call until R's
     * next GC: measured 7-13% of a call at n = 1000, d = 50) */
    q->lanes = (double *) calloc(q->per * (size_t) q->G, sizeof(double));
    if (!q->lanes)
        kb_error_class("kb_error_memory",
                       _("SVGD: cannot allocate %.0f bytes for the kernel "
                         "sums"), (double) (q->per * (size_t) q->G *
                                            sizeof(double)));
    R_ExecWithCleanup(svgd_body, &run, svgd_free, q);
    return run.ksd2;
}

/* .Call entry: one SVGD direction.  x, s: n x d particles and scores; h:
 * the bandwidth, or a non-positive value for the median heuristic h^2 =
 * 0.5 med / log(n + 1).  Returns list(phi, h, ksd2): phi = (K S + rep) / n
 * and the V-statistic KSD^2 of the particles with the same Gaussian
 * kernel.  Nothing of size n^2 is kept: the median's passes and the
 * direction's tiles each compute the pair distances. */
SEXP kb_svgd_phi(SEXP x, SEXP s, SEXP h_, SEXP nthreads)
{
    int n, d;
    kb_arg_points(x, s, "x", "score", &n, &d);
    int nt = kb_nthreads(nthreads);
    double h = kb_scalar_real(h_, "h");
    if (n < 2)
        kb_error_arg(_("SVGD needs at least 2 particles"));
    kb_check_interrupt();
    svgd_ctx q = {.X = REAL(x), .S = REAL(s), .n = n, .d = d};
    if (!(h > 0.0))
        h = svgd_median_h(q.X, n, d, nt);
    const char *nms[] = {"phi", "h", "ksd2", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP phi = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 0, phi);
    double ksd2 = svgd_direction(&q, nt, h, REAL(phi));
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(h));
    SET_VECTOR_ELT(ans, 2, Rf_ScalarReal(ksd2));
    UNPROTECT(1);
    return ans;
}

/* .Call entry (tests, benchmarks): the median of all n^2 squared
 * distances of the rows of x.  cap: values a thread may collect, 0 for the
 * default; bracket: NULL or c(lo, hi), a first interval instead of the
 * sampled one. */
SEXP kb_svgd_median(SEXP x, SEXP cap, SEXP bracket, SEXP nthreads)
{
    int n = kb_arg_matrix(x, "x", -1, -1), d = Rf_ncols(x);
    int nt = kb_nthreads(nthreads);
    if (n < 2)
        kb_error_arg(_("'x' must have at least 2 rows"));
    const double *br = NULL;
    if (!Rf_isNull(bracket)) {
        if (TYPEOF(bracket) != REALSXP || XLENGTH(bracket) != 2)
            kb_error_arg(_("'bracket' must be NULL or two "
                           "numbers"));
        br = REAL(bracket);
    }
    kb_check_interrupt();
    return Rf_ScalarReal(svgd_median(REAL(x), n, d, nt,
                                     (R_xlen_t) kb_scalar_real(cap, "cap"),
                                     br));
}

/* ---- kernel sums and their gradients (MMD / DrMMD witnesses) ---------- */

typedef struct {
    const kb_kernel *K;
    const double *Z, *X, *W;
    R_xlen_t nz, nx;
    double *val, *grad;
} cross_ctx;

/* Row z_i: sum_j w_j phi(r_ij) and sum_j w_j 2 lam phi'(r_ij) (z_i - x_j). */
static void cross_row(void *ctx, R_xlen_t i, double *r)
{
    const cross_ctx *q = (const cross_ctx *) ctx;
    const int d = q->K->d;
    const double lam = q->K->lam[0], *W = q->W;
    double *p0 = r + KB_BLOCK, *p1 = p0 + KB_BLOCK, *p2 = p1 + KB_BLOCK,
        *zi = p2 + KB_BLOCK, *g = zi + d;
    kb_get_row(q->Z, q->nz, i, d, zi);
    for (int k = 0; k < d; k++)
        g[k] = 0.0;
    double v = 0.0;
    for (R_xlen_t j0 = 0; j0 < q->nx; j0 += KB_BLOCK) {
        int m = (int) (q->nx - j0 < KB_BLOCK ? q->nx - j0 : KB_BLOCK);
        kb_dist_block(q->K, zi, q->X, q->nx, j0, m, r);
        kb_phi_block(q->K, m, r, p0, p1, p2);
        double c1 = 0.0;
        for (int t = 0; t < m; t++) {
            v += W[j0 + t] * p0[t];
            p1[t] *= 2.0 * lam * W[j0 + t];
            c1 += p1[t];
        }
        for (int k = 0; k < d; k++) {
            const double *xk = q->X + (size_t) k * q->nx + j0;
            double acc = 0.0;
#pragma omp simd reduction(+:acc)
            for (int t = 0; t < m; t++)
                acc += p1[t] * xk[t];
            g[k] += zi[k] * c1 - acc;
        }
    }
    q->val[i] = v;
    for (int k = 0; k < d; k++)
        q->grad[i + (size_t) k * q->nz] = g[k];
}

/* The isotropic kernel of a flow's kernel sums. */
static void flow_iso_kernel(SEXP kern, int d, kb_kernel *K)
{
    kb_kernel_from_sexp(kern, d, K);
    if (!K->iso)
        KB_INTERNAL("flows need an isotropic kernel");
}

/* list(value = numeric(n), grad = n x d), unprotected. */
static SEXP value_grad_list(int n, int d)
{
    const char *nms[] = {"value", "grad", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocVector(REALSXP, n));
    SET_VECTOR_ELT(ans, 1, Rf_allocMatrix(REALSXP, n, d));
    UNPROTECT(1);
    return ans;
}

/* .Call entry: for each row z_i of z, sum_j w_j k(z_i, x_j) and its
 * gradient in z_i, sum_j w_j 2 phi'(r_ij) lam (z_i - x_j), for an
 * isotropic kernel.  Returns list(value, grad). */
SEXP kb_cross_kernel(SEXP z, SEXP x, SEXP w, SEXP kern, SEXP nthreads)
{
    int nz = kb_arg_matrix(z, "z", -1, -1), d = Rf_ncols(z),
        nx = kb_arg_matrix(x, "x", -1, d);
    const double *W = kb_arg_vector(w, "w", nx);
    int nt = kb_nthreads(nthreads);
    kb_kernel K;
    flow_iso_kernel(kern, d, &K);
    SEXP ans = PROTECT(value_grad_list(nz, d)),
        val = VECTOR_ELT(ans, 0), grad = VECTOR_ELT(ans, 1);
    cross_ctx q = {&K, REAL(z), REAL(x), W, nz, nx, REAL(val), REAL(grad)};
    kb_check_interrupt();
    kb_loop L = {.nt = nt, .cost0 = (double) nx * KB_KERNEL_WORK(d),
                 .scratch = kb_scratch_alloc((size_t) 2 * d + 4 * KB_BLOCK, nt),
                 .item = cross_row, .ctx = &q};
    kb_loop_run(&L, 0, nz);
    UNPROTECT(1);
    return ans;
}

/* ---- the particles' own kernel sums (x against x), by symmetry --------- */

/* kb_cross_kernel() with z = x, each pair's phi and phi' computed once: the
 * pairs are visited in SELF_TILE x SELF_TILE tiles (I, J), I <= J, of the
 * upper triangle (kb_tile_upper).  A tile writes its row sums (block I)
 * and column sums (block J) to its own slot (kb_slots); after each batch
 * the slots are added to the totals in tile order, so the sums do not
 * depend on the number of threads or the schedule.  Per point the sums are the value
 * sum_j w_j phi, c1 = sum_j w_j c_ij and cx_k = sum_j w_j c_ij x_jk with
 * c = 2 lam phi'; the gradient is x_i c1 - cx (as cross_row). */
#define SELF_TILE 64
#define SELF_NS(d) ((size_t) (d) + 2)     /* sums per point */

typedef struct {
    const kb_kernel *K;
    const double *X, *W;
    R_xlen_t n, T;            /* points, tiles per side */
    kb_slots S;               /* per tile: 2 SELF_TILE SELF_NS sums */
    double phi00;             /* phi(0) */
    double *tot;              /* SELF_NS x n totals, one sum after another */
} self_ctx;

/* One tile into its slot: rows (layout: sum s of row a at s SELF_TILE + a)
 * then columns, both SELF_NS(d) x SELF_TILE. */
static void self_tile(void *ctx, R_xlen_t tile, double *buf)
{
    const self_ctx *q = (const self_ctx *) ctx;
    const int d = q->K->d;
    const size_t ns = SELF_NS(d);
    const double lam = q->K->lam[0], *W = q->W, *X = q->X;
    const R_xlen_t n = q->n;
    R_xlen_t I, J;
    kb_tile_upper(q->T, tile, &I, &J);
    R_xlen_t i0 = I * SELF_TILE, j0 = J * SELF_TILE,
        i1 = i0 + SELF_TILE < n ? i0 + SELF_TILE : n,
        j1 = j0 + SELF_TILE < n ? j0 + SELF_TILE : n;
    double *rows = kb_slot(&q->S, tile), *cols = rows + ns * SELF_TILE;
    memset(rows, 0, 2 * ns * SELF_TILE * sizeof(double));
    double *r = buf, *p0 = r + SELF_TILE, *p1 = p0 + SELF_TILE,
        *p2 = p1 + SELF_TILE, *xi = p2 + SELF_TILE;
    for (R_xlen_t i = i0; i < i1; i++) {
        /* on a diagonal tile, the pairs j > i only */
        R_xlen_t js = I == J ? i + 1 : j0;
        int m = (int) (j1 - js), a = (int) (i - i0), o = (int) (js - j0);
        double wi = W[i], v = 0.0, c1 = 0.0;
        if (I == J)
            rows[a] += wi * q->phi00;
        if (m <= 0)
            continue;
        kb_get_row(X, n, i, d, xi);
        kb_dist_block(q->K, xi, X, n, js, m, r);
        kb_phi_block(q->K, m, r, p0, p1, p2);
        double *cv = cols + o, *cc = cols + SELF_TILE + o;
#pragma omp simd reduction(+:v, c1)
        for (int t = 0; t < m; t++) {
            double wj = W[js + t], c = 2.0 * lam * p1[t];
            v += wj * p0[t];
            c1 += wj * c;
            cv[t] += wi * p0[t];
            p1[t] = c;                    /* c_ij, unweighted */
            cc[t] += wi * c;
        }
        rows[a] += v;
        rows[SELF_TILE + a] += c1;
        for (int k = 0; k < d; k++) {
            const double *xk = X + (size_t) k * n + js, *wj = W + js;
            double *ck = cols + (2 + (size_t) k) * SELF_TILE + o, acc = 0.0,
                wxi = wi * xi[k];
#pragma omp simd reduction(+:acc)
            for (int t = 0; t < m; t++) {
                acc += wj[t] * p1[t] * xk[t];
                ck[t] += wxi * p1[t];
            }
            rows[(2 + (size_t) k) * SELF_TILE + a] += acc;
        }
    }
}

/* A tile's slot added to the totals. */
static void self_merge(void *ctx, R_xlen_t tile, const double *slot)
{
    const self_ctx *q = (const self_ctx *) ctx;
    const R_xlen_t n = q->n;
    const size_t ns = SELF_NS(q->K->d);
    R_xlen_t I, J;
    kb_tile_upper(q->T, tile, &I, &J);
    const double *rows = slot, *cols = rows + ns * SELF_TILE;
    R_xlen_t i0 = I * SELF_TILE, j0 = J * SELF_TILE;
    int mi = (int) (n - i0 < SELF_TILE ? n - i0 : SELF_TILE),
        mj = (int) (n - j0 < SELF_TILE ? n - j0 : SELF_TILE);
    for (size_t s = 0; s < ns; s++) {
        double *ts = q->tot + s * (size_t) n;
        for (int a = 0; a < mi; a++)
            ts[i0 + a] += rows[s * SELF_TILE + a];
        for (int a = 0; a < mj; a++)
            ts[j0 + a] += cols[s * SELF_TILE + a];
    }
}

/* The totals over every tile, in batches of slots of about 4 MB (at least
 * 4 tiles a thread). */
static void self_sums(self_ctx *q, int nt)
{
    const int d = q->K->d;
    const size_t ns = SELF_NS(d), per_tile = 2 * ns * SELF_TILE;
    R_xlen_t ntile = q->T * (q->T + 1) / 2,
        batch = (R_xlen_t) ((1 << 19) / per_tile);
    if (batch < 4 * nt)
        batch = 4 * nt;
    if (batch > ntile)
        batch = ntile;
    q->tot = (double *) R_alloc(ns * (size_t) q->n, sizeof(double));
    memset(q->tot, 0, ns * (size_t) q->n * sizeof(double));
    q->S.merge = self_merge;
    kb_slots_alloc(&q->S, per_tile, batch);
    kb_check_interrupt();
    kb_loop L = {.nt = nt, .dynamic = 1,
                 .cost0 = (double) SELF_TILE * SELF_TILE *
                     (KB_KERNEL_WORK(d) + 2.0 * d),
                 .scratch = kb_scratch_alloc((size_t) d + 4 * SELF_TILE, nt),
                 .item = self_tile, .ctx = q};
    kb_slot_loop_run(&L, &q->S, 0, ntile);
}

/* .Call entry: kb_cross_kernel(x, x, w, kern, nthreads) by symmetry (the
 * same list(value, grad); sums in another order). */
SEXP kb_self_kernel(SEXP x, SEXP w, SEXP kern, SEXP nthreads)
{
    int n = kb_arg_matrix(x, "x", -1, -1), d = Rf_ncols(x);
    const double *W = kb_arg_vector(w, "w", n);
    int nt = kb_nthreads(nthreads);
    kb_kernel K;
    flow_iso_kernel(kern, d, &K);
    SEXP ans = PROTECT(value_grad_list(n, d)),
        val = VECTOR_ELT(ans, 0), grad = VECTOR_ELT(ans, 1);
    self_ctx q = {.K = &K, .X = REAL(x), .W = W, .n = n,
                  .T = kb_tiles_side(n, SELF_TILE), .phi00 = kb_phi_zero(&K)};
    self_sums(&q, nt);
    double *V = REAL(val), *G = REAL(grad);
    const double *c1 = q.tot + (size_t) n, *X = REAL(x);
    memcpy(V, q.tot, (size_t) n * sizeof(double));
    for (int k = 0; k < d; k++) {
        const double *cx = q.tot + (2 + (size_t) k) * n,
            *xk = X + (size_t) k * n;
        double *gk = G + (size_t) k * n;
        for (R_xlen_t i = 0; i < n; i++)
            gk[i] = xk[i] * c1[i] - cx[i];
    }
    UNPROTECT(1);
    return ans;
}

/* ---- KSD descent ------------------------------------------------------- */

typedef struct {
    row_total u;              /* per row: sum_j u(x_i, x_j) */
    const kb_kernel *K;
    kb_points P;
    double *pos, *V;          /* n x d outputs */
    double scale;
} ksd_grad_ctx;

/* Row i: with the pair terms of stein.h, sum_j c1 z = x_i sum c1 -
 * sum c1 x_j; sum_j c2 (s_j - s_i) = sum c2 s_j - s_i sum c2; and for v,
 * sum_j phi s_j - (x_i sum c2 - sum c2 x_j). */
static void ksd_grad_row(void *ctx, R_xlen_t i, double *buf)
{
    const ksd_grad_ctx *q = (const ksd_grad_ctx *) ctx;
    const int d = q->K->d;
    const R_xlen_t n = q->P.ld;
    double *xi = buf + KB_KSD_WORK, *si = xi + d, *gp = si + d, *gv = gp + d;
    kb_ksd_terms T;
    kb_ksd_terms_init(&T, buf);
    kb_get_row(q->P.X, n, i, d, xi);
    kb_get_row(q->P.S, n, i, d, si);
    for (int k = 0; k < d; k++)
        gp[k] = gv[k] = 0.0;
    for (R_xlen_t j0 = 0; j0 < n; j0 += KB_BLOCK) {
        int m = (int) (n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK);
        kb_ksd_grad_block(q->K, xi, si, &q->P, j0, m, &T);
        for (int k = 0; k < d; k++) {
            const double *xk = q->P.X + (size_t) k * n + j0,
                *sk = q->P.S + (size_t) k * n + j0;
            double a1 = 0.0, a2 = 0.0, a3 = 0.0, a4 = 0.0;
#pragma omp simd reduction(+:a1, a2, a3)
            for (int t = 0; t < m; t++) {
                a1 += T.c1[t] * xk[t];
                a2 += T.c2[t] * sk[t];
                a3 += T.p0[t] * sk[t];
            }
            gp[k] += xi[k] * T.sc1 - a1 + a2 - si[k] * T.sc2;
#pragma omp simd reduction(+:a4)
            for (int t = 0; t < m; t++)
                a4 += T.c2[t] * xk[t];
            gv[k] += a3 - (xi[k] * T.sc2 - a4);
        }
    }
    q->u.v[i] = T.u;
    for (int k = 0; k < d; k++) {
        q->pos[i + (size_t) k * n] = q->scale * gp[k];
        q->V[i + (size_t) k * n] = q->scale * gv[k];
    }
}

/* .Call entry: KSD^2 (V-statistic) of particles x with scores s for an
 * isotropic kernel k = phi(lam |x - y|^2), and the two parts of its
 * gradient: pos (score held fixed) and v, such that
 * d KSD^2 / d x_i = pos_i + J_i' v_i with J_i the score's Jacobian at x_i;
 * both sums over j of the pair terms (stein.h) are scaled by 2 / n^2 (u is
 * symmetric). */
SEXP kb_ksd_grad(SEXP x, SEXP s, SEXP kern, SEXP nthreads)
{
    int n, d;
    kb_arg_points(x, s, "x", "score", &n, &d);
    int nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    if (!K.iso)
        KB_INTERNAL("flows need an isotropic kernel");
    const char *nms[] = {"value", "pos", "v", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP pos = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 1, pos);
    SEXP v = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 2, v);
    ksd_grad_ctx q = {{(double *) R_alloc((size_t) n, sizeof(double)), 0.0},
                      &K, {REAL(x), REAL(s), n}, REAL(pos), REAL(v),
                      2.0 / ((double) n * n)};
    kb_check_interrupt();
    kb_loop L = {.nt = nt, .cost0 = (double) n * KB_STEIN_WORK(d),
                 .scratch = kb_scratch_alloc((size_t) 4 * d + KB_KSD_WORK, nt),
                 .item = ksd_grad_row, .after = row_total_add, .ctx = &q};
    kb_loop_run(&L, 0, n);
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(q.u.total / ((double) n * n)));
    UNPROTECT(1);
    return ans;
}

/* ---- MIED ---------------------------------------------------------------- */

/* Over pairs i != j (Riesz) or all pairs (Gaussian, Laplace), with
 * V = -log density and a mollifier phi of the squared distance
 * r_ij = |x_i - x_j|^2 (kernels.c):
 *   w_ij = phi(r_ij) exp((V_i + V_j) / 2) = phi(x_i - x_j) (p(x_i) p(x_j))^(-1/2),
 *   value = log(sum w / n^2),
 *   grad_i = 2 sum_j w_ij [-c(r_ij) (x_i - x_j) - s_i / 2] / sum w,
 * c = -2 d log phi / dr.  The pairs i = i are the energy's self-interaction
 * phi(0) / p(x_i), which holds the particles in: without it the Gaussian
 * and Laplace energies fall to 0 as the particles spread out; the Riesz
 * energy leaves them out (they are infinite at eps = 0, and the pair terms
 * alone confine: phi decays only polynomially).  The weights are not a
 * kernel of the package (they mix in densities); the mollifier and the
 * distances come from kernels.c.
 * The sums are taken relative to the largest log weight M, for stability. */
typedef struct {
    row_total w;              /* per row: sum_j exp(log w_ij - M) */
    const double *X, *S, *V;
    R_xlen_t n;
    int d;
    kb_mollifier mol;
    int diag;                 /* 1: the pairs i = i count */
    double M;
    double *rowmax, *G;
} mied_ctx;

/* log w_ij over a block j = j0..j0+m-1 of row i, into r (which holds the
 * squared distances on entry); c (if not NULL) gets c(r_ij). */
static void mied_logw_block(const mied_ctx *q, R_xlen_t i, R_xlen_t j0,
                            int m, double *r, double *c)
{
    kb_mollifier_block(&q->mol, m, r, r, c);
    for (int t = 0; t < m; t++)
        r[t] += 0.5 * q->V[i] + 0.5 * q->V[j0 + t];
}

/* Pass 1: the largest log weight of row i. */
static void mied_max_row(void *ctx, R_xlen_t i, double *r)
{
    const mied_ctx *q = (const mied_ctx *) ctx;
    double mx = R_NegInf;
    for (R_xlen_t j0 = 0; j0 < q->n; j0 += KB_BLOCK) {
        int m = (int) (q->n - j0 < KB_BLOCK ? q->n - j0 : KB_BLOCK);
        kb_sqdist_block(q->d, q->X + i, q->n, q->X, q->n, j0, m, r);
        mied_logw_block(q, i, j0, m, r, NULL);
        for (int t = 0; t < m; t++)
            if ((j0 + t != i || q->diag) && r[t] > mx)
                mx = r[t];
    }
    q->rowmax[i] = mx;
}

/* Pass 2: row i of the gradient (accumulated in G's row i, which only this
 * thread writes) and its sum of weights exp(log w - M). */
static void mied_grad_row(void *ctx, R_xlen_t i, double *r)
{
    const mied_ctx *q = (const mied_ctx *) ctx;
    const R_xlen_t n = q->n;
    double *c = r + KB_BLOCK, *xi = c + KB_BLOCK, wsum = 0.0, *G = q->G;
    kb_get_row(q->X, n, i, q->d, xi);
    for (int k = 0; k < q->d; k++)
        G[i + (size_t) k * n] = 0.0;
    for (R_xlen_t j0 = 0; j0 < n; j0 += KB_BLOCK) {
        int m = (int) (n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK);
        kb_sqdist_block(q->d, q->X + i, n, q->X, n, j0, m, r);
        mied_logw_block(q, i, j0, m, r, c);
        double cb = 0.0;
        for (int t = 0; t < m; t++) {
            if (j0 + t == i) {
                c[t] = 0.0;   /* x_i - x_i = 0 */
                if (!q->diag)
                    continue;
            }
            double w = exp(r[t] - q->M);
            wsum += w;
            c[t] *= w;
            cb += c[t];
        }
        for (int k = 0; k < q->d; k++) {
            const double *xk = q->X + (size_t) k * n + j0;
            double acc = 0.0;
            for (int t = 0; t < m; t++)
                acc += c[t] * xk[t];
            /* sum_j c_j (x_i - x_j) */
            G[i + (size_t) k * n] += xi[k] * cb - acc;
        }
    }
    for (int k = 0; k < q->d; k++)
        G[i + (size_t) k * n] = -G[i + (size_t) k * n] -
            0.5 * wsum * q->S[i + (size_t) k * n];
    q->w.v[i] = wsum;
}

/* M, the largest log weight over all rows; an error when it is not finite
 * (the first coinciding pair named when eps = 0). */
static void mied_max(mied_ctx *q)
{
    const R_xlen_t n = q->n;
    q->M = R_NegInf;
    for (R_xlen_t i = 0; i < n; i++)
        if (q->rowmax[i] > q->M)
            q->M = q->rowmax[i];
    if (q->M == R_PosInf) {
        /* a zero distance with eps = 0 (the log densities are finite) */
        double r[KB_BLOCK];
        R_xlen_t a = 0, b = 0;
        for (R_xlen_t i = 0; i < n && !b; i++)
            for (R_xlen_t j0 = 0; j0 < n && !b && q->rowmax[i] == R_PosInf;
                 j0 += KB_BLOCK) {
                int m = (int) (n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK);
                kb_sqdist_block(q->d, q->X + i, n, q->X, n, j0, m, r);
                for (int t = 0; t < m && !b; t++)
                    if (j0 + t != i && r[t] == 0.0) {
                        a = i + 1;
                        b = j0 + t + 1;
                    }
            }
        kb_error_numeric(_("MIED: particles %d and %d coincide and "
                           "'mollifier_scale' is 0, so the energy is "
                           "infinite; give mollifier_scale > 0 or distinct "
                           "particles"), (int) a, (int) b);
    }
    if (!R_FINITE(q->M))
        kb_error_numeric(_("MIED: the energy is not finite: the squared "
                           "distances between particles overflow or the log "
                           "densities are too large; rescale the problem"));
}

/* The log energy, and its gradient into q->G. */
static double mied_energy(mied_ctx *q, int nt)
{
    const R_xlen_t n = q->n;
    /* per thread: distances, weights, x_i */
    kb_loop L = {.nt = nt, .cost0 = (double) n * KB_KERNEL_WORK(q->d),
                 .item = mied_max_row, .ctx = q,
                 .scratch = kb_scratch_alloc(2 * KB_BLOCK + q->d, nt)};
    kb_loop_run(&L, 0, n);
    mied_max(q);
    L.item = mied_grad_row;
    L.after = row_total_add;
    kb_loop_run(&L, 0, n);
    for (R_xlen_t t = 0; t < n * q->d; t++)
        q->G[t] *= 2.0 / q->w.total;
    return q->M + log(q->w.total) - 2.0 * log((double) n);
}

/* .Call entry: log energy and its gradient.  x: n x d particles, V: -log
 * density (length n), s: scores; mollifier: its name; sexp, eps: the Riesz
 * exponent and the mollifier's scale. */
SEXP kb_mied_grad(SEXP x, SEXP V_, SEXP s, SEXP mollifier, SEXP sexp_,
                  SEXP eps_, SEXP nthreads)
{
    int n, d;
    kb_arg_points(x, s, "x", "score", &n, &d);
    int nt = kb_nthreads(nthreads);
    const double *V = kb_arg_vector(V_, "V", n);
    if (n < 2)
        kb_error_arg(_("MIED needs at least 2 particles"));
    double se = kb_scalar_real(sexp_, "s"), eps = kb_scalar_real(eps_, "eps");
    const char *nms[] = {"value", "grad", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP g = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 1, g);
    mied_ctx q = {.w = {(double *) R_alloc((size_t) n, sizeof(double)), 0.0},
                  .X = REAL(x), .S = REAL(s), .V = V, .n = n, .d = d,
                  .M = R_NegInf,
                  .rowmax = (double *) R_alloc((size_t) n, sizeof(double)),
                  .G = REAL(g)};
    kb_mollifier_from_sexp(mollifier, se, eps, &q.mol);
    q.diag = q.mol.type != KB_MOLL_RIESZ;
    kb_check_interrupt();
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(mied_energy(&q, nt)));
    UNPROTECT(1);
    return ans;
}
