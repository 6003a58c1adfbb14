/* The statistic and null of the FSSD test (R/fssd.R) in one pass over the
 * rows, in memory O(q^2) for q = d J features per row (the n x q feature
 * matrix is never stored): the count, the feature sums, the sum of squared
 * features and the centred cross-product matrix.  Rows go in blocks of
 * FSSD_ROWS (loop items); each block's features are formed in scratch,
 * centred on the block mean, and its cross products summed; the blocks are
 * merged in row order (the pairwise update of Chan, Golub and LeVeque) by
 * the loop's after() hook, so the result does not depend on the number of
 * threads and the covariance keeps its precision when the features' mean
 * is large. */
#include "args.h"
#include "runtime.h"
#include "kernels.h"
#include "entries.h"

#define FSSD_ROWS 128

/* A block's summary, and the running total, laid out as
 * [count, sumsq, sum (q), M2 (packed upper triangle, q (q + 1) / 2)]. */
typedef struct {
    const double *X, *S;
    int n, q;
    kb_gauss_feat G;      /* locations, bandwidth^2, scale 1 / sqrt(d J) */
    size_t per;           /* doubles per summary */
    R_xlen_t cap;         /* summaries kept: at least the items of a chunk */
    double *part, *tot, *delta;
} fssd_ctx;

static inline size_t upper_at(int q, int c)
{
    return (size_t) c * (size_t) q - (size_t) c * (size_t) (c - 1) / 2;
}

/* Block b: features xi(x_i, v_j) / sqrt(d J) (kernels.c's Gaussian Stein
 * features), row by row into F (m x q, row-major). */
static void fssd_block(void *vctx, R_xlen_t b, double *F)
{
    fssd_ctx *g = vctx;
    const int q = g->q, n = g->n;
    const R_xlen_t r0 = b * FSSD_ROWS;
    const int m = (int) (n - r0 < FSSD_ROWS ? n - r0 : FSSD_ROWS);
    double *out = g->part + (size_t) (b % g->cap) * g->per;
    double *sum = out + 2, *M2 = out + 2 + q;
    for (size_t k = 0; k < g->per; k++)
        out[k] = 0.0;
    for (int a = 0; a < m; a++) {
        double *f = F + (size_t) a * q;
        kb_gauss_stein_features(&g->G, g->X + r0 + a, g->S + r0 + a, n, f);
        for (int c = 0; c < q; c++) {
            sum[c] += f[c];
            out[1] += f[c] * f[c];
        }
    }
    out[0] = m;
    for (int c = 0; c < q; c++) {
        const double mu = sum[c] / m;
        for (int a = 0; a < m; a++)
            F[(size_t) a * q + c] -= mu;
    }
    for (int a = 0; a < m; a++) {
        const double *f = F + (size_t) a * q;
        for (int c = 0; c < q; c++) {
            const double fc = f[c];
            double *row = M2 + upper_at(q, c) - c;
#pragma omp simd
            for (int e = c; e < q; e++)
                row[e] += fc * f[e];
        }
    }
}

/* Merge the chunk's blocks into the total in row order; a block whose sums
 * are not finite stops the loop. */
static R_xlen_t fssd_after(void *vctx, R_xlen_t i0, R_xlen_t i1)
{
    fssd_ctx *g = vctx;
    const int q = g->q;
    for (R_xlen_t b = i0; b < i1; b++) {
        double *p = g->part + (size_t) (b % g->cap) * g->per;
        if (kb_first_nonfinite(p, 2 + q) >= 0)
            return b;
        double *t = g->tot;
        const double na = t[0], nb = p[0], nn = na + nb;
        if (na > 0) {
            for (int c = 0; c < q; c++)
                g->delta[c] = p[2 + c] / nb - t[2 + c] / na;
            const double f = na * nb / nn;
            double *M2 = t + 2 + q;
            const double *P2 = p + 2 + q;
            for (int c = 0; c < q; c++) {
                const size_t at = upper_at(q, c) - c;
                const double dc = f * g->delta[c];
                for (int e = c; e < q; e++)
                    M2[at + e] += P2[at + e] + dc * g->delta[e];
            }
        } else {
            for (size_t k = 2 + q; k < g->per; k++)
                t[k] = p[k];
        }
        t[0] = nn;
        t[1] += p[1];
        for (int c = 0; c < q; c++)
            t[2 + c] += p[2 + c];
    }
    return -1;
}

/* The result list(sum, sumsq, cov) from the merged total. */
static SEXP fssd_result(const fssd_ctx *g)
{
    const int q = g->q, n = g->n;
    const char *nms[] = {"sum", "sumsq", "cov", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP sv = Rf_allocVector(REALSXP, q);
    SET_VECTOR_ELT(ans, 0, sv);
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(g->tot[1]));
    SEXP cv = Rf_allocMatrix(REALSXP, q, q);
    SET_VECTOR_ELT(ans, 2, cv);
    double *so = REAL(sv), *co = REAL(cv);
    const double *M2 = g->tot + 2 + q;
    for (int a = 0; a < q; a++) {
        so[a] = g->tot[2 + a];
        const size_t at = upper_at(q, a) - a;
        for (int e = a; e < q; e++)
            co[a + (size_t) e * q] = co[e + (size_t) a * q] =
                M2[at + e] / (n - 1);
    }
    UNPROTECT(1);
    return ans;
}

/* One pass over the blocks of rows; the summaries kept are those of a
 * chunk of the loop (kb_loop_chunk_items). */
static void fssd_run(fssd_ctx *g, int nt)
{
    const int q = g->q, d = g->G.d, J = g->G.J;
    const R_xlen_t nblock = ((R_xlen_t) g->n + FSSD_ROWS - 1) / FSSD_ROWS;
    kb_loop L = {.nt = nt,
                 .cost0 = (double) FSSD_ROWS *
                     ((double) J * (3.0 * d + 20.0) + 3.0 * q +
                      (double) q * (q + 1) / 2.0),
                 .scratch = kb_scratch_alloc((size_t) FSSD_ROWS * q, nt),
                 .item = fssd_block, .after = fssd_after, .ctx = g};
    g->cap = kb_loop_chunk_items(&L, 0, nblock);
    g->part = (double *) R_alloc((size_t) g->cap * g->per, sizeof(double));
    g->tot = (double *) R_alloc(g->per, sizeof(double));
    g->delta = (double *) R_alloc((size_t) q, sizeof(double));
    for (size_t k = 0; k < g->per; k++)
        g->tot[k] = 0.0;
    R_xlen_t bad = kb_loop_run(&L, 0, nblock), n = g->n;
    if (bad >= 0)
        kb_error_numeric(_("a Stein feature is not finite in rows %g to %g: "
                           "check the score there and scale the data"),
                         (double) (bad * FSSD_ROWS + 1),
                         (double) ((bad + 1) * FSSD_ROWS < n ?
                                   (bad + 1) * FSSD_ROWS : n));
}

/* list(sum = the q feature sums, sumsq = the sum of squared features,
 * cov = the q x q covariance of the features, divisor n - 1) for points x,
 * scores s, locations V (J x d) and bandwidth h. */
SEXP kb_fssd_moments(SEXP x, SEXP s, SEXP V, SEXP h, SEXP nthreads)
{
    int n, d;
    kb_arg_points(x, s, "x", "score", &n, &d);
    int J = kb_arg_matrix(V, "locations", -1, d);
    double bw = kb_scalar_real(h, "bandwidth");
    if (!(bw > 0))
        kb_error_arg(_("'bandwidth' must be positive"));
    if (n < 2 || J < 1)
        kb_error_arg(_("'x' needs at least two rows and "
                       "'locations' at least one"));
    int nt = kb_nthreads(nthreads);
    const int q = d * J;
    fssd_ctx g = {.X = REAL(x), .S = REAL(s), .n = n, .q = q,
                  .G = {.V = REAL(V), .J = J, .d = d, .w = bw * bw,
                        .scale = 1.0 / sqrt((double) q)},
                  .per = 2 + (size_t) q + (size_t) q * (q + 1) / 2};
    fssd_run(&g, nt);
    return fssd_result(&g);
}
