/* Stein kernel k_p of the Langevin Stein operator (DESIGN.md, "Stein kernel")
 * and the sums behind the kernelized Stein discrepancy. */
#include "stein.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

/* k_p(x, X_j) for m <= KB_BLOCK consecutive points j0.. of X.  With
 * u = x - y and v = s_y - s_x the four radial ingredients are
 * r = u'Lu, a = u'Lv, b = u'L^2u and s_x's_y; L is diagonal here. */
static KB_ALWAYS_INLINE void stein_block_body(const kb_kernel *K,
                                             const double *x, const double *s,
                                             const kb_points *P, R_xlen_t j0,
                                             int m, double *out)
{
    const double *X = P->X, *S = P->S;
    const R_xlen_t ld = P->ld;
    /* r is zero-initialised in full: gcc -Wall cannot see that the loop
     * below covers what kb_phi_block() reads */
    double r[KB_BLOCK] = {0.0}, a[KB_BLOCK], b[KB_BLOCK], sd[KB_BLOCK];
    double p0[KB_BLOCK], p1[KB_BLOCK], p2[KB_BLOCK];
    const int d = K->d;
    for (int t = 0; t < m; t++)
        a[t] = b[t] = sd[t] = 0.0;
    if (K->iso) {
        for (int k = 0; k < d; k++) {
            const double *xk = X + k * ld + j0, *sk = S + k * ld + j0;
            const double xik = x[k], sik = s[k];
#pragma omp simd
            for (int t = 0; t < m; t++) {
                /* sk[t] read once: a second read after the stores costs
                 * ~10% (the compiler cannot rule out aliasing) */
                double skt = sk[t], u = xik - xk[t], v = skt - sik;
                r[t] += u * u;
                a[t] += u * v;
                sd[t] += sik * skt;
            }
        }
        const double l = K->lam[0];
#pragma omp simd
        for (int t = 0; t < m; t++) {
            r[t] *= l;
            a[t] *= l;
            b[t] = l * r[t];
        }
    } else {
        for (int k = 0; k < d; k++) {
            const double *xk = X + k * ld + j0, *sk = S + k * ld + j0;
            const double xik = x[k], sik = s[k], lk = K->lam[k];
#pragma omp simd
            for (int t = 0; t < m; t++) {
                /* u'L^2u as (lk u)^2: lk * lk under- or overflows for
                 * eigenvalues beyond 1e-154 or 1e154 (data on such
                 * scales), where lk u is of the order of sqrt(lk) */
                double skt = sk[t], u = xik - xk[t], v = skt - sik,
                    lu = lk * u;
                r[t] += lu * u;
                a[t] += lu * v;
                b[t] += lu * lu;
                sd[t] += sik * skt;
            }
        }
    }
    kb_phi_block(K, m, r, p0, p1, p2);
    const double trL = K->trL;
#pragma omp simd
    for (int t = 0; t < m; t++)
        out[t] = sd[t] * p0[t] + 2.0 * p1[t] * (a[t] - trL) -
            4.0 * p2[t] * b[t];
}

#if KB_AVX2
/* stein_block() in AVX2 (kernels.h: the same results) */
KB_TARGET_AVX2 static void stein_block_avx2(const kb_kernel *K,
                                            const double *x, const double *s,
                                            const kb_points *P, R_xlen_t j0,
                                            int m, double *out)
{
    stein_block_body(K, x, s, P, j0, m, out);
}

/* The IMQ kernel with beta = -1/2: stein_imq.h in AVX2 and AVX-512 (at most
 * KB_STEIN_DMAX dimensions). */
#define KB_STEIN_DMAX 16
#define SV_NAME stein_imq_half_avx2
#define SV_TARGET KB_TARGET_AVX2
#define SV_T __m256d
#define SV_W 4
#define SV_LOADU _mm256_loadu_pd
#define SV_STOREU _mm256_storeu_pd
#define SV_SET1 _mm256_set1_pd
#define SV_ADD _mm256_add_pd
#define SV_SUB _mm256_sub_pd
#define SV_MUL _mm256_mul_pd
#define SV_IMQ kb_imq_half4
#include "stein_imq.h"

/* kernels.h: no FMA contraction with the _round intrinsics */
static KB_TARGET_AVX512 inline __m512d sv_add8(__m512d a, __m512d b)
{
    return _mm512_add_round_pd(a, b, KB_RND);
}
static KB_TARGET_AVX512 inline __m512d sv_sub8(__m512d a, __m512d b)
{
    return _mm512_sub_round_pd(a, b, KB_RND);
}
static KB_TARGET_AVX512 inline __m512d sv_mul8(__m512d a, __m512d b)
{
    return _mm512_mul_round_pd(a, b, KB_RND);
}
#define SV_NAME stein_imq_half_avx512
#define SV_TARGET KB_TARGET_AVX512
#define SV_T __m512d
#define SV_W 8
#define SV_LOADU _mm512_loadu_pd
#define SV_STOREU _mm512_storeu_pd
#define SV_SET1 _mm512_set1_pd
#define SV_ADD sv_add8
#define SV_SUB sv_sub8
#define SV_MUL sv_mul8
#define SV_IMQ kb_imq_half8
#include "stein_imq.h"
#endif

static void stein_block(const kb_kernel *K, const double *x, const double *s,
                        const kb_points *P, R_xlen_t j0, int m, double *out)
{
#if KB_AVX2
    if (kb_have_avx2()) {
        if (K->d <= KB_STEIN_DMAX && kb_is_imq_half(K)) {
            /* 8, then 4 points at a time, the last m % 4 as below */
            int t = kb_have_avx512() ?
                stein_imq_half_avx512(K, x, s, P, j0, m, out) : 0;
            t += stein_imq_half_avx2(K, x, s, P, j0 + t, m - t, out + t);
            if (t < m)
                stein_block_avx2(K, x, s, P, j0 + t, m - t, out + t);
        } else {
            stein_block_avx2(K, x, s, P, j0, m, out);
        }
        return;
    }
#endif
    stein_block_body(K, x, s, P, j0, m, out);
}

void kb_stein_row(const kb_kernel *K, const double *x, const double *s,
                  const kb_points *P, R_xlen_t j0, R_xlen_t j1, double *out)
{
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        int m = (int) (j1 - j < KB_BLOCK ? j1 - j : KB_BLOCK);
        stein_block(K, x, s, P, j, m, out + (j - j0));
    }
}

/* The (weighted) sum of one block's m kernel values: every row sum adds its
 * blocks with this, so that a row summed alone or within a group of rows
 * (lower_group_item) gives the same bits. */
static inline double block_sum(const double *buf, const double *w, int m)
{
    double acc = 0.0;
    if (w) {
#pragma omp simd reduction(+:acc)
        for (int t = 0; t < m; t++)
            acc += w[t] * buf[t];
    } else {
#pragma omp simd reduction(+:acc)
        for (int t = 0; t < m; t++)
            acc += buf[t];
    }
    return acc;
}

double kb_stein_row_sum(const kb_kernel *K, const double *x, const double *s,
                        const kb_points *P, R_xlen_t j0, R_xlen_t j1,
                        const double *w)
{
    double buf[KB_BLOCK], tot = 0.0;
    for (R_xlen_t j = j0; j < j1; j += KB_BLOCK) {
        int m = (int) (j1 - j < KB_BLOCK ? j1 - j : KB_BLOCK);
        stein_block(K, x, s, P, j, m, buf);
        tot += block_sum(buf, w ? w + j : NULL, m);
    }
    return tot;
}

double kb_stein_diag(const kb_kernel *K, const double *s)
{
    double zero = 0.0, p0, p1, p2, ss = 0.0;
    kb_phi_block(K, 1, &zero, &p0, &p1, &p2);
    for (int k = 0; k < K->d; k++)
        ss += s[k] * s[k];
    return ss * p0 - 2.0 * p1 * K->trL;
}

/* s.s_j and (s_j - s).(x - x_j) for the m points j0.. of P. */
static void score_dots(int d, const double *x, const double *s,
                       const kb_points *P, R_xlen_t j0, int m, double *ss,
                       double *sz)
{
    for (int t = 0; t < m; t++)
        ss[t] = sz[t] = 0.0;
    for (int k = 0; k < d; k++) {
        const double *xk = P->X + k * P->ld + j0, *sk = P->S + k * P->ld + j0;
        double xik = x[k], sik = s[k];
#pragma omp simd
        for (int t = 0; t < m; t++) {
            double skt = sk[t];
            ss[t] += sik * skt;
            sz[t] += (skt - sik) * (xik - xk[t]);
        }
    }
}

void kb_ksd_grad_block(const kb_kernel *K, const double *x, const double *s,
                       const kb_points *P, R_xlen_t j0, int m,
                       kb_ksd_terms *T)
{
    double *r = T->work, *p1 = r + KB_BLOCK, *p2 = p1 + KB_BLOCK,
        *p3 = p2 + KB_BLOCK, *ss = p3 + KB_BLOCK, *sz = ss + KB_BLOCK;
    const double lam = K->lam[0], d = K->d;
    kb_dist_block(K, x, P->X, P->ld, j0, m, r);
    kb_phi_block(K, m, r, T->p0, p1, p2);
    kb_phi3_block(K, m, r, p2, p3);
    score_dots(K->d, x, s, P, j0, m, ss, sz);
    double u = T->u, sc1 = 0.0, sc2 = 0.0;
    for (int t = 0; t < m; t++) {
        double r0 = r[t] / lam, f1 = p1[t], f2 = p2[t];
        u += T->p0[t] * ss[t] + 2.0 * lam * f1 * sz[t] -
            4.0 * lam * lam * f2 * r0 - 2.0 * d * lam * f1;
        T->c1[t] = 2.0 * lam * f1 * ss[t] + 4.0 * lam * lam * f2 * sz[t] -
            8.0 * lam * lam * lam * p3[t] * r0 -
            (8.0 + 4.0 * d) * lam * lam * f2;
        T->c2[t] = 2.0 * lam * f1;
        sc1 += T->c1[t];
        sc2 += T->c2[t];
    }
    T->u = u;
    T->sc1 = sc1;
    T->sc2 = sc2;
}

/* ---- rows of the lower triangle, in parallel --------------------------- */

/* The rows j of a lower-triangle loop, row j costing about j Stein kernel
 * evaluations: kb_loop items that get x_j and s_j gathered into per-thread
 * scratch.  A loop's context starts with this header. */
typedef struct stein_rows stein_rows;
struct stein_rows {
    const kb_kernel *K;
    kb_points P;
    void (*row)(const stein_rows *q, R_xlen_t j, const double *xj,
                const double *sj);
};

static void stein_rows_item(void *ctx, R_xlen_t j, double *xj)
{
    const stein_rows *q = (const stein_rows *) ctx;
    const int d = q->K->d;
    kb_get_row(q->P.X, q->P.ld, j, d, xj);
    kb_get_row(q->P.S, q->P.ld, j, d, xj + d);
    q->row(q, j, xj, xj + d);
}

/* Rows first..last-1 in chunks (runtime.h), in parallel within a chunk.
 * After each chunk, after() returns the first row of the chunk whose result
 * is not finite, or -1; the loop then stops and returns that row.
 * Detecting overflow on the row results keeps the kernel loops free of
 * tests: NaN and Inf propagate into them. */
static R_xlen_t visit_rows(stein_rows *q, R_xlen_t first, R_xlen_t last,
                           int nthreads,
                           R_xlen_t (*after)(void *, R_xlen_t, R_xlen_t))
{
    const int d = q->K->d;
    kb_loop L = {.nt = nthreads, .cost0 = KB_STEIN_WORK(d),
                 .cost1 = KB_STEIN_WORK(d), .dynamic = 4,
                 .scratch = kb_scratch_alloc((size_t) 2 * d, nthreads),
                 .item = stein_rows_item, .after = after, .ctx = q};
    return kb_loop_run(&L, first, last);
}

/* First i in [i0, i1) with a non-finite v[i], or -1. */
static R_xlen_t first_nonfinite(const double *v, R_xlen_t i0, R_xlen_t i1)
{
    for (R_xlen_t i = i0; i < i1; i++)
        if (!R_FINITE(v[i]))
            return i;
    return -1;
}

/* 1-based label of row i for messages: the optional integer attribute
 * "kb_rows" of the point matrix maps rows to those of the user's sample
 * (ksd_weights() hands over distinct rows only). */
static const int *row_labels(SEXP x)
{
    SEXP lab = Rf_getAttrib(x, Rf_install("kb_rows"));
    if (TYPEOF(lab) == INTSXP && XLENGTH(lab) == XLENGTH(x) / Rf_ncols(x))
        return INTEGER(lab);
    return NULL;
}

static double row_label(const int *lab, R_xlen_t i)
{
    return lab ? (double) lab[i] : (double) (i + 1);
}

/* Raise the error for a non-finite Stein kernel of rows i and j (0-based),
 * or, when i < 0, for a row sum that overflowed although its terms are
 * finite.  Never called inside a parallel region. */
static void NORET stein_overflow(const int *lab, R_xlen_t i, R_xlen_t j,
                                 double v)
{
    double a = row_label(lab, i < 0 ? j : (i < j ? i : j)),
        b = row_label(lab, i < 0 ? j : (i < j ? j : i));
    if (i < 0)
        kb_error_numeric(_("the Stein kernel sum over row %.0f overflows (its "
                           "terms are finite but too large to add): scale "
                           "the data or the kernel"), a);
    kb_error_numeric(_("the Stein kernel of rows %.0f and %.0f overflows (%s): "
                       "scale the data or the kernel"), a, b,
                     ISNAN(v) ? "NaN" : (v > 0 ? "Inf" : "-Inf"));
}

/* Second pass, only after a failure: the first pair (i, j), i <= j, with a
 * non-finite Stein kernel, the diagonal first; raise its error.  When all
 * of k_p(x_i, x_j), i <= j, are finite the weighted row sum overflowed. */
static void NORET locate_in_row(const kb_kernel *K, const kb_points *P,
                                R_xlen_t j, const int *lab)
{
    const int d = K->d;
    double *xj = (double *) R_alloc((size_t) 2 * d + KB_BLOCK, sizeof(double)),
        *sj = xj + d, *buf = sj + d;
    kb_get_row(P->X, P->ld, j, d, xj);
    kb_get_row(P->S, P->ld, j, d, sj);
    double dj = kb_stein_diag(K, sj);
    if (!R_FINITE(dj))
        stein_overflow(lab, j, j, dj);
    for (R_xlen_t i0 = 0; i0 < j; i0 += KB_BLOCK) {
        R_xlen_t i1 = i0 + KB_BLOCK < j ? i0 + KB_BLOCK : j;
        kb_stein_row(K, xj, sj, P, i0, i1, buf);
        R_xlen_t bad = first_nonfinite(buf, 0, i1 - i0);
        if (bad >= 0)
            stein_overflow(lab, i0 + bad, j, buf[bad]);
    }
    stein_overflow(lab, -1, j, 0.0);
}

/* Row sums of the lower triangle, rows j0..j1-1, in groups of
 * KB_ROW_GROUP consecutive rows: the group walks the earlier points one
 * block of KB_BLOCK at a time and every row of the group takes that block
 * while it is in cache.  Row by row, each sum streamed all earlier points
 * from memory (16 d bytes a pair): past about 2e5 points in d = 10 (the
 * points and scores larger than the L3 cache) the loop was bound by memory
 * bandwidth, twice as slow again when another process shared it.  Each
 * row still adds its blocks in order with block_sum(), so its sum is the
 * one kb_stein_row_sum() gives, bit for bit. */
#define KB_ROW_GROUP 16

typedef struct {
    const kb_kernel *K;
    kb_points P;
    const double *w;
    R_xlen_t j0, j1;          /* rows; out[j - j0], diag[j - j0] */
    double *out, *diag;
    R_xlen_t bad;             /* the first non-finite row after() found */
} lower_sums_ctx;

static void lower_group_item(void *ctx, R_xlen_t g, double *scr)
{
    const lower_sums_ctx *q = (const lower_sums_ctx *) ctx;
    const kb_kernel *K = q->K;
    const int d = K->d;
    const R_xlen_t a = q->j0 + g * KB_ROW_GROUP;
    const int m = (int) (q->j1 - a < KB_ROW_GROUP ? q->j1 - a : KB_ROW_GROUP);
    double *xs = scr, *ss = xs + (size_t) KB_ROW_GROUP * d,
        *buf = ss + (size_t) KB_ROW_GROUP * d, tot[KB_ROW_GROUP];
    for (int r = 0; r < m; r++) {
        kb_get_row(q->P.X, q->P.ld, a + r, d, xs + (size_t) r * d);
        kb_get_row(q->P.S, q->P.ld, a + r, d, ss + (size_t) r * d);
        tot[r] = 0.0;
    }
    const R_xlen_t last = a + m - 1;  /* the group's longest row */
    for (R_xlen_t i0 = 0; i0 < last; i0 += KB_BLOCK) {
        const double *wi = q->w ? q->w + i0 : NULL;
        for (int r = 0; r < m; r++) {
            const R_xlen_t j = a + r;
            if (i0 >= j)
                continue;
            int mb = (int) (j - i0 < KB_BLOCK ? j - i0 : KB_BLOCK);
            stein_block(K, xs + (size_t) r * d, ss + (size_t) r * d, &q->P,
                        i0, mb, buf);
            tot[r] += block_sum(buf, wi, mb);
        }
    }
    for (int r = 0; r < m; r++) {
        const R_xlen_t j = a + r;
        double wj = q->w ? q->w[j] : 1.0;
        double dj = wj * wj * kb_stein_diag(K, ss + (size_t) r * d);
        q->out[j - q->j0] = dj + 2.0 * wj * tot[r];
        if (q->diag)
            q->diag[j - q->j0] = dj;
    }
}

/* after(): groups g0..g1-1; records the first non-finite row */
static R_xlen_t lower_sums_check(void *ctx, R_xlen_t g0, R_xlen_t g1)
{
    lower_sums_ctx *q = (lower_sums_ctx *) ctx;
    R_xlen_t r0 = g0 * KB_ROW_GROUP, r1 = g1 * KB_ROW_GROUP;
    if (r1 > q->j1 - q->j0)
        r1 = q->j1 - q->j0;
    R_xlen_t bad = first_nonfinite(q->out, r0, r1);
    if (bad < 0)
        return -1;
    q->bad = bad + q->j0;
    return bad / KB_ROW_GROUP;
}

R_xlen_t kb_stein_lower_sums(const kb_kernel *K, const kb_points *P,
                             R_xlen_t j0, R_xlen_t j1, const double *w,
                             int nthreads, double *out, double *diag)
{
    const int d = K->d;
    const double W = KB_STEIN_WORK(d);
    lower_sums_ctx q = {K, *P, w, j0, j1, out, diag, -1};
    R_xlen_t groups = (j1 - j0 + KB_ROW_GROUP - 1) / KB_ROW_GROUP;
    /* group g: about KB_ROW_GROUP (j0 + g KB_ROW_GROUP + 1) evaluations */
    kb_loop L = {.nt = nthreads,
                 .cost0 = KB_ROW_GROUP * W * ((double) j0 + 1.0),
                 .cost1 = (double) KB_ROW_GROUP * KB_ROW_GROUP * W,
                 .dynamic = 1,
                 .scratch = kb_scratch_alloc((size_t) 2 * KB_ROW_GROUP * d +
                                             KB_BLOCK, nthreads),
                 .item = lower_group_item, .after = lower_sums_check,
                 .ctx = &q};
    return kb_loop_run(&L, 0, groups) < 0 ? -1 : q.bad;
}

typedef struct {
    stein_rows h;
    R_xlen_t n;
    double *out;
    unsigned char *bad;    /* bad[j]: column j has a non-finite value */
} matrix_ctx;

/* column j, rows 0..j (the strict lower part is mirrored afterwards, in
 * tiles, by mirror_upper()).  v - v is 0 for a finite v and NaN otherwise:
 * summed while the column is still in cache, it flags overflow without a
 * second pass over memory. */
static void matrix_row(const stein_rows *h, R_xlen_t j, const double *xj,
                       const double *sj)
{
    const matrix_ctx *q = (const matrix_ctx *) h;
    R_xlen_t nn = q->n;
    double *col = q->out + j * nn, z = 0.0;
    kb_stein_row(h->K, xj, sj, &h->P, 0, j + 1, col);
    for (R_xlen_t i = 0; i <= j; i++)
        z += col[i] - col[i];
    q->bad[j] = !(z == 0.0);
}

/* out[j, i] = out[i, j] for i < j (column-major n x n), tile by tile so
 * that both the reads and the writes stay in cache. */
static void mirror_upper(double *out, R_xlen_t n)
{
    const R_xlen_t B = 64;
    kb_ticker tick = KB_TICKER_INIT;
    for (R_xlen_t jb = 0; jb < n; jb += B) {
        kb_tick(&tick, (double) B * jb);
        R_xlen_t je = jb + B < n ? jb + B : n;
        for (R_xlen_t ib = 0; ib <= jb; ib += B) {
            R_xlen_t ie = ib + B < n ? ib + B : n;
            for (R_xlen_t j = jb; j < je; j++) {
                const double *cj = out + j * n;
                R_xlen_t iend = ie < j ? ie : j;
                for (R_xlen_t i = ib; i < iend; i++)
                    out[i * n + j] = cj[i];
            }
        }
    }
}

static R_xlen_t matrix_check(void *ctx, R_xlen_t j0, R_xlen_t j1)
{
    const matrix_ctx *q = (const matrix_ctx *) ctx;
    for (R_xlen_t j = j0; j < j1; j++)
        if (q->bad[j])
            return j;
    return -1;
}

/* ---- .Call entries ---------------------------------------------------- */

/* The n x d points and scores of an entry, and its kernel. */
static kb_points stein_args(SEXP x, SEXP s, SEXP kern, int *n, kb_kernel *K)
{
    int d;
    kb_arg_points(x, s, "x", "score", n, &d);
    kb_kernel_from_sexp(kern, d, K);
    kb_points P = {REAL(x), REAL(s), *n};
    return P;
}

R_xlen_t kb_stein_matrix_fill(const kb_kernel *K, const kb_points *P,
                              R_xlen_t n, int nthreads, double *out)
{
    unsigned char *flags = (unsigned char *) R_alloc((size_t) n + 1, 1);
    matrix_ctx q = {{K, *P, matrix_row}, n, out, flags};
    R_xlen_t bad = visit_rows(&q.h, 0, n, nthreads, matrix_check);
    if (bad < 0)
        mirror_upper(out, n);
    return bad;
}

SEXP kb_stein_matrix(SEXP x, SEXP s, SEXP kern, SEXP nthreads)
{
    int n;
    kb_kernel K;
    kb_points P = stein_args(x, s, kern, &n, &K);
    int nt = kb_nthreads(nthreads);
    SEXP ans = PROTECT(Rf_allocMatrix(REALSXP, n, n));
    R_xlen_t bad = kb_stein_matrix_fill(&K, &P, n, nt, REAL(ans));
    if (bad >= 0) {
        /* the diagonal first, then the rows above it */
        const double *col = REAL(ans) + bad * (R_xlen_t) n;
        R_xlen_t i = R_FINITE(col[bad]) ? first_nonfinite(col, 0, bad) : bad;
        stein_overflow(row_labels(x), i, bad, col[i]);
    }
    UNPROTECT(1);
    return ans;
}

SEXP kb_stein_sums(SEXP x, SEXP s, SEXP kern, SEXP weights, SEXP nthreads)
{
    int n;
    kb_kernel K;
    kb_points P = stein_args(x, s, kern, &n, &K);
    int nt = kb_nthreads(nthreads);
    const double *w = weights == R_NilValue ? NULL :
        kb_arg_vector(weights, "weights", n);
    const char *nms[] = {"sums", "diag", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocVector(REALSXP, n));
    SET_VECTOR_ELT(ans, 1, Rf_allocVector(REALSXP, n));
    R_xlen_t bad = kb_stein_lower_sums(&K, &P, 0, n, w, nt,
                                       REAL(VECTOR_ELT(ans, 0)),
                                       REAL(VECTOR_ELT(ans, 1)));
    if (bad >= 0)
        locate_in_row(&K, &P, bad, row_labels(x));
    UNPROTECT(1);
    return ans;
}

/* Row sums of the lower triangle for rows j0..j1-1 only (0-based, j1
 * exclusive): c_j = k_p(x_j, x_j) + 2 sum_{i < j} k_p(x_i, x_j) (weighted
 * as in kb_stein_sums when weights is not NULL), so that blocks of rows
 * computed anywhere add up to n^2 KSD^2; each c_j is the value
 * kb_stein_sums() gives for row j.  Returns list(sums, diag). */
SEXP kb_stein_block_sums(SEXP x, SEXP s, SEXP kern, SEXP j0_, SEXP j1_,
                         SEXP nthreads, SEXP weights)
{
    int n;
    kb_kernel K;
    kb_points P = stein_args(x, s, kern, &n, &K);
    int nt = kb_nthreads(nthreads);
    const double *w = weights == R_NilValue ? NULL :
        kb_arg_vector(weights, "weights", n);
    double a = kb_scalar_real(j0_, "first"), b = kb_scalar_real(j1_, "last");
    if (!(a >= 0 && a <= b && b <= n))
        kb_error_arg(_("row block [%g, %g) out of range "
                       "for %d rows"), a, b, n);
    R_xlen_t j0 = (R_xlen_t) a, j1 = (R_xlen_t) b;
    const char *nms[] = {"sums", "diag", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocVector(REALSXP, j1 - j0));
    SET_VECTOR_ELT(ans, 1, Rf_allocVector(REALSXP, j1 - j0));
    R_xlen_t bad = kb_stein_lower_sums(&K, &P, j0, j1, w, nt,
                                       REAL(VECTOR_ELT(ans, 0)),
                                       REAL(VECTOR_ELT(ans, 1)));
    if (bad >= 0)
        locate_in_row(&K, &P, bad, row_labels(x));
    UNPROTECT(1);
    return ans;
}

/* ---- candidates against a point set (Stein Points) --------------------- */

typedef struct {
    const kb_kernel *K;
    kb_points C, P;           /* candidates, current points */
    double *sums, *diag;
} cross_sums_ctx;

static void cross_sums_item(void *ctx, R_xlen_t i, double *buf)
{
    const cross_sums_ctx *q = (const cross_sums_ctx *) ctx;
    const int d = q->K->d;
    double *yi = buf, *si = buf + d;
    kb_get_row(q->C.X, q->C.ld, i, d, yi);
    kb_get_row(q->C.S, q->C.ld, i, d, si);
    q->diag[i] = kb_stein_diag(q->K, si);
    q->sums[i] = q->P.ld > 0 ?
        kb_stein_row_sum(q->K, yi, si, &q->P, 0, q->P.ld, NULL) : 0.0;
}

static R_xlen_t cross_sums_check(void *ctx, R_xlen_t i0, R_xlen_t i1)
{
    const cross_sums_ctx *q = (const cross_sums_ctx *) ctx;
    for (R_xlen_t i = i0; i < i1; i++)
        if (!R_FINITE(q->sums[i]) || !R_FINITE(q->diag[i]))
            return i;
    return -1;
}

/* For each candidate y_i (rows of y, scores sy): sum_j k_p(y_i, x_j) over
 * the rows of x (which may have none) and k_p(y_i, y_i), the two terms of
 * the Stein Points criteria (Chen et al. 2018).  Returns list(sums, diag).
 * A non-finite value is an error naming the candidate. */
SEXP kb_stein_cross_sums(SEXP y, SEXP sy, SEXP x, SEXP sx, SEXP kern,
                         SEXP nthreads)
{
    int ny, nx, d, dx;
    kb_arg_points(y, sy, "y", "sy", &ny, &d);
    kb_arg_points(x, sx, "x", "sx", &nx, &dx);
    if (dx != d)
        kb_error_arg(_("'x' must have %d columns, not %d"),
                     d, dx);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    int nt = kb_nthreads(nthreads);
    const char *nms[] = {"sums", "diag", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocVector(REALSXP, ny));
    SET_VECTOR_ELT(ans, 1, Rf_allocVector(REALSXP, ny));
    cross_sums_ctx q = {&K, {REAL(y), REAL(sy), ny}, {REAL(x), REAL(sx), nx},
                        REAL(VECTOR_ELT(ans, 0)), REAL(VECTOR_ELT(ans, 1))};
    kb_loop L = {.nt = nt, .cost0 = ((double) nx + 1.0) * KB_STEIN_WORK(d),
                 .scratch = kb_scratch_alloc((size_t) 2 * d, nt),
                 .item = cross_sums_item, .after = cross_sums_check,
                 .ctx = &q};
    R_xlen_t bad = kb_loop_run(&L, 0, ny);
    if (bad >= 0)
        kb_error_numeric(_("the Stein kernel of candidate %.0f against the "
                           "points so far overflows: rescale the target or "
                           "the kernel"), (double) bad + 1.0);
    UNPROTECT(1);
    return ans;
}
