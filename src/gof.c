/* The bootstrap of the KSD goodness-of-fit test (R/gof.R): for many
 * weight vectors w_b at once, the quadratic forms q_b = w_b' K_p w_b of
 * the Stein matrix K_p and their diagonal parts sum_i w_ib^2 k_p(x_i, x_i).
 * K_p is never stored: it is evaluated in tiles of GOF_TILE x GOF_TILE
 * pairs of the lower triangle (each pair once), and each tile is applied
 * to all replicates while it is in cache, so its Stein kernel evaluations
 * cost about (3d + 8) / (2 B) of the bootstrap's flops. */
#include "stein.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

#define GOF_TILE 64   /* rows and columns of a tile */
#define GOF_RB 8      /* replicates per packed block (R/gof.R packs W so) */
#define GOF_RR 4      /* tile rows per register block */
#define GOF_RV 4      /* replicates per register block (tile_apply) */

/* Weights packed by replicate blocks: W[r + GOF_RB (j + n bb)] is the
 * weight of row j in replicate GOF_RB bb + r.  Items are the tiles (I, J),
 * J <= I, of the lower triangle numbered row after row (the runtime's
 * kb_tile_lower: t = I (I + 1) / 2 + J); R slices them by number. */
typedef struct {
    const kb_kernel *K;
    kb_points P;
    R_xlen_t n;
    int nbb;              /* replicate blocks */
    const double *W;
    kb_slots S;           /* per tile: 2 GOF_RB nbb doubles (quad, diag) */
    double *quad, *diag;  /* the totals, GOF_RB nbb each */
    int ref;              /* 1: tile_apply_ref (tests), 0: tile_apply */
} gof_ctx;

/* t[r] += f sum_{a < mi} W_{I0 + a, r} sum_{c < mj} T[a, c] W_{J0 + c, r}
 * for one replicate block (T has GOF_TILE columns and zero rows beyond
 * mi), in register blocks of GOF_RR rows x GOF_RV replicates: the 16
 * named accumulators stay in registers (an array of them is kept in memory
 * by gcc -O2, 2-3x slower).  Each replicate's sums run over c, then a, in
 * the order of tile_apply_ref(), so the two give the same bits. */
#define GOF_ACC(q) s##q##0 += k##q * w[0]; s##q##1 += k##q * w[1]; \
    s##q##2 += k##q * w[2]; s##q##3 += k##q * w[3];
static void tile_apply(const double *T, int mi, int mj, const double *WI,
                       const double *WJ, double f, double *t)
{
    for (int h = 0; h < GOF_RB; h += GOF_RV)
        for (int a = 0; a < mi; a += GOF_RR) {
            double s00 = 0.0, s01 = 0.0, s02 = 0.0, s03 = 0.0, s10 = 0.0,
                s11 = 0.0, s12 = 0.0, s13 = 0.0, s20 = 0.0, s21 = 0.0,
                s22 = 0.0, s23 = 0.0, s30 = 0.0, s31 = 0.0, s32 = 0.0,
                s33 = 0.0;
            const double *T0 = T + a * GOF_TILE;
            for (int c = 0; c < mj; c++) {
                const double *w = WJ + c * GOF_RB + h;
                const double k0 = T0[c], k1 = T0[GOF_TILE + c],
                    k2 = T0[2 * GOF_TILE + c], k3 = T0[3 * GOF_TILE + c];
                GOF_ACC(0) GOF_ACC(1) GOF_ACC(2) GOF_ACC(3)
            }
            const double acc[GOF_RR][GOF_RV] = {
                {s00, s01, s02, s03}, {s10, s11, s12, s13},
                {s20, s21, s22, s23}, {s30, s31, s32, s33}};
            int qm = mi - a < GOF_RR ? mi - a : GOF_RR;
            for (int q = 0; q < qm; q++) {
                const double *wi = WI + (a + q) * GOF_RB + h;
                for (int r = 0; r < GOF_RV; r++)
                    t[h + r] += f * wi[r] * acc[q][r];
            }
        }
}

/* The previous register block (GOF_RR rows x all GOF_RB replicates, the
 * accumulators in an array), kept as the reference route of the tests
 * (R: options(kernbayes.gof_route = "reference")). */
static void tile_apply_ref(const double *T, int mi, int mj, const double *WI,
                           const double *WJ, double f, double *t)
{
    for (int a = 0; a < mi; a += GOF_RR) {
        double acc[GOF_RR][GOF_RB] = {{0.0}};
        const double *T0 = T + a * GOF_TILE;
        for (int c = 0; c < mj; c++) {
            const double *w = WJ + c * GOF_RB;
            for (int q = 0; q < GOF_RR; q++) {
                const double k = T0[q * GOF_TILE + c];
#pragma omp simd
                for (int r = 0; r < GOF_RB; r++)
                    acc[q][r] += k * w[r];
            }
        }
        int qm = mi - a < GOF_RR ? mi - a : GOF_RR;
        for (int q = 0; q < qm; q++) {
            const double *wi = WI + (a + q) * GOF_RB;
#pragma omp simd
            for (int r = 0; r < GOF_RB; r++)
                t[r] += f * wi[r] * acc[q][r];
        }
    }
}

/* Tile t = (I, J): its Stein kernel values, applied to every replicate
 * block in turn, the off-diagonal tiles counted twice (K_p is symmetric);
 * its own partial sums in its slot, merged in tile order (kb_slots), so
 * that the result does not depend on the number of threads. */
static void gof_tile(void *vctx, R_xlen_t t, double *scratch)
{
    gof_ctx *g = vctx;
    R_xlen_t I, J;
    kb_tile_lower(t, &I, &J);
    const R_xlen_t n = g->n, i0 = I * GOF_TILE, j0 = J * GOF_TILE;
    const int mi = (int) (n - i0 < GOF_TILE ? n - i0 : GOF_TILE);
    const int mj = (int) (n - j0 < GOF_TILE ? n - j0 : GOF_TILE);
    const int d = g->K->d, nbb = g->nbb;
    double *T = scratch;             /* GOF_TILE x GOF_TILE, row-major */
    double *xi = scratch + GOF_TILE * GOF_TILE, *si = xi + d;
    double *q = kb_slot(&g->S, t);
    double *dg = q + GOF_RB * nbb;
    for (int r = 0; r < 2 * GOF_RB * nbb; r++)
        q[r] = 0.0;
    for (int a = 0; a < mi; a++) {
        for (int k = 0; k < d; k++) {
            xi[k] = g->P.X[k * g->P.ld + i0 + a];
            si[k] = g->P.S[k * g->P.ld + i0 + a];
        }
        kb_stein_row(g->K, xi, si, &g->P, j0, j0 + mj, T + a * GOF_TILE);
    }
    /* rows past mi read by the register blocks are zero */
    for (int a = mi; a < GOF_TILE; a++)
        for (int c = 0; c < GOF_TILE; c++)
            T[a * GOF_TILE + c] = 0.0;
    const double f = J == I ? 1.0 : 2.0;
    for (int bb = 0; bb < nbb; bb++) {
        const double *Wb = g->W + (R_xlen_t) GOF_RB * n * bb;
        (g->ref ? tile_apply_ref : tile_apply)(T, mi, mj, Wb + GOF_RB * i0,
                                               Wb + GOF_RB * j0, f,
                                               q + GOF_RB * bb);
    }
    if (I != J)
        return;
    for (int bb = 0; bb < nbb; bb++) {
        const double *WI = g->W + (R_xlen_t) GOF_RB * (n * bb + i0);
        for (int a = 0; a < mi; a++) {
            const double kaa = T[a * GOF_TILE + a];
            for (int r = 0; r < GOF_RB; r++)
                dg[GOF_RB * bb + r] += kaa * WI[a * GOF_RB + r] *
                    WI[a * GOF_RB + r];
        }
    }
}

static R_xlen_t gof_after(void *vctx, R_xlen_t i0, R_xlen_t i1)
{
    gof_ctx *g = vctx;
    const R_xlen_t per = 2 * GOF_RB * (R_xlen_t) g->nbb;
    for (R_xlen_t t = i0; t < i1; t++)
        if (kb_first_nonfinite(kb_slot(&g->S, t), per) >= 0)
            return t;
    return -1;
}

static void gof_merge(void *vctx, R_xlen_t t, const double *slot)
{
    gof_ctx *g = vctx;
    const R_xlen_t nr = GOF_RB * (R_xlen_t) g->nbb;
    (void) t;
    for (R_xlen_t r = 0; r < nr; r++) {
        g->quad[r] += slot[r];
        g->diag[r] += slot[nr + r];
    }
}

/* The tile range [*a, *b) from first, last, checked against the tiles of
 * n points. */
static void gof_range(SEXP first_, SEXP last_, int n, R_xlen_t *a,
                      R_xlen_t *b)
{
    double nrb = (double) kb_tiles_side(n, GOF_TILE);
    double fa = kb_scalar_real(first_, "first"),
        fb = kb_scalar_real(last_, "last"), ntile = nrb * (nrb + 1) / 2;
    if (!(fa >= 0 && fa <= fb && fb <= ntile && fa == floor(fa) &&
          fb == floor(fb)))
        kb_error_arg(_("tiles [%g, %g) out of range for "
                       "%g tiles"), fa, fb, ntile);
    *a = (R_xlen_t) fa;
    *b = (R_xlen_t) fb;
}

/* list(quad, diag), zeros, into g's totals. */
static SEXP gof_result(gof_ctx *g)
{
    const char *nms[] = {"quad", "diag", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP qv = Rf_allocVector(REALSXP, GOF_RB * (R_xlen_t) g->nbb);
    SET_VECTOR_ELT(ans, 0, qv);
    SEXP dv = Rf_allocVector(REALSXP, GOF_RB * (R_xlen_t) g->nbb);
    SET_VECTOR_ELT(ans, 1, dv);
    g->quad = REAL(qv);
    g->diag = REAL(dv);
    for (R_xlen_t r = 0; r < GOF_RB * (R_xlen_t) g->nbb; r++)
        g->quad[r] = g->diag[r] = 0.0;
    UNPROTECT(1);
    return ans;
}

/* Tiles first..last-1 (numbered as in gof_ctx), with tile_apply_ref() if
 * ref is 1: list(quad, diag), each of
 * length GOF_RB nbb: the sums over those tiles of
 * w_Ib' K_p[I, J] w_Jb (twice off the diagonal) and of w_ib^2 k_p(x_i, x_i)
 * (diagonal tiles).  Over all tiles, quad_b = w_b' K_p w_b. */
SEXP kb_gof_quad(SEXP x, SEXP s, SEXP kern, SEXP W, SEXP first_,
                 SEXP last_, SEXP nthreads, SEXP ref)
{
    int n, d;
    kb_kernel K;
    kb_arg_points(x, s, "x", "score", &n, &d);
    kb_kernel_from_sexp(kern, d, &K);
    int nt = kb_nthreads(nthreads);
    const double *w = kb_arg_vector(W, "weights", -1);
    R_xlen_t len = XLENGTH(W), per = (R_xlen_t) GOF_RB * n, a, b;
    if (len == 0 || len % per != 0)
        kb_error_arg(_("'weights' must be packed in "
                       "blocks of %d x %d"), GOF_RB, n);
    gof_range(first_, last_, n, &a, &b);
    gof_ctx g = {.K = &K, .P = {REAL(x), REAL(s), n}, .n = n,
                 .nbb = (int) (len / per), .W = w,
                 .S = {.merge = gof_merge},
                 .ref = kb_scalar_real(ref, "ref") != 0.0};
    kb_slots_alloc(&g.S, 2 * GOF_RB * (size_t) g.nbb, b - a);
    SEXP ans = PROTECT(gof_result(&g));
    kb_loop L = {.nt = nt, .dynamic = 1,
                 .cost0 = (double) GOF_TILE * GOF_TILE *
                     (KB_STEIN_WORK(d) + 2.0 * GOF_RB * g.nbb),
                 .scratch = kb_scratch_alloc(GOF_TILE * GOF_TILE +
                                             2 * (size_t) d, nt),
                 .item = gof_tile, .after = gof_after, .ctx = &g};
    R_xlen_t bad = kb_slot_loop_run(&L, &g.S, a, b);
    if (bad >= 0)
        kb_error_numeric(_("the bootstrap quadratic forms overflow in tile "
                           "%g (a Stein kernel value or a sum of them is not "
                           "finite): scale the data or the kernel"),
                         (double) bad);
    UNPROTECT(1);
    return ans;
}

/* ---- the incomplete U-statistic at long cyclic lags (R: gof_lag_means) */

/* Row i's partners are the rows (i + lag[j]) mod n, j < J (0 < lag < n):
 * g_i = (1/J) sum_j k_p(x_i, x_{(i + lag_j) mod n}), the partners gathered
 * into this thread's scratch (J x d points and scores) so that stein.c's
 * row evaluation (and its SIMD copies) computes the J values; each g_i is
 * summed in lag order, whatever the team.  The gathering reads a row-major
 * copy of the points and scores (XS: row m's point, then its score), where
 * a partner is 2d adjacent doubles: from the column-major matrices each of
 * its 2d values is a cache line of its own, and at n = 1e6, d = 10 the
 * gathering then ran at memory speed (2x the time per row of n = 1e5). */
typedef struct {
    const kb_kernel *K;
    const double *XS;
    R_xlen_t n;
    int J;
    const int *lag;
    R_xlen_t from;  /* the first row computed: g[i - from] is row i's */
    double *g;
} lag_ctx;

static void lag_row(void *vctx, R_xlen_t i, double *scratch)
{
    const lag_ctx *c = vctx;
    const int d = c->K->d, J = c->J;
    const R_xlen_t n = c->n;
    double *Y = scratch, *SY = Y + (size_t) J * d,
        *kv = SY + (size_t) J * d;
    for (int j = 0; j < J; j++) {
        R_xlen_t m = i + c->lag[j];
        if (m >= n)
            m -= n;
        const double *r = c->XS + (size_t) m * 2 * d;
        for (int k = 0; k < d; k++) {
            Y[(size_t) k * J + j] = r[k];
            SY[(size_t) k * J + j] = r[d + k];
        }
    }
    kb_points Q = {Y, SY, J};
    const double *ri = c->XS + (size_t) i * 2 * d;
    kb_stein_row(c->K, ri, ri + d, &Q, 0, J, kv);
    double acc = 0.0;
    for (int j = 0; j < J; j++)
        acc += kv[j];
    c->g[i - c->from] = acc / J;
}

/* The row-major copy XS of the points and scores of P (n rows, d). */
static double *lag_rows(const kb_points *P, R_xlen_t n, int d)
{
    double *XS = (double *) R_alloc((size_t) n * 2 * d, sizeof(double));
    kb_ticker tick = KB_TICKER_INIT;
    for (R_xlen_t i = 0; i < n; i++) {
        kb_get_row(P->X, P->ld, i, d, XS + (size_t) i * 2 * d);
        kb_get_row(P->S, P->ld, i, d, XS + (size_t) i * 2 * d + d);
        kb_tick(&tick, 2.0 * d);
    }
    return XS;
}

static R_xlen_t lag_after(void *vctx, R_xlen_t i0, R_xlen_t i1)
{
    const lag_ctx *c = vctx;
    R_xlen_t bad = kb_first_nonfinite(c->g + (i0 - c->from), i1 - i0);
    return bad < 0 ? -1 : i0 + bad;
}

/* g for the lags (an integer vector of 1..n-1, 0-based offsets of the
 * partner rows), as described at lag_ctx: rows from..to-1 (0-based; `range`
 * c(from, to), or NULL for all n rows), the partners taken from all rows. */
SEXP kb_gof_lags(SEXP x, SEXP s, SEXP kern, SEXP lags, SEXP nthreads,
                 SEXP range)
{
    int n, d;
    kb_kernel K;
    kb_arg_points(x, s, "x", "score", &n, &d);
    kb_kernel_from_sexp(kern, d, &K);
    int nt = kb_nthreads(nthreads);
    if (TYPEOF(lags) != INTSXP || XLENGTH(lags) < 1)
        kb_error_arg(_("'lags' must be a non-empty integer vector"));
    const int J = (int) XLENGTH(lags), *L = INTEGER(lags);
    for (int j = 0; j < J; j++)
        if (L[j] == NA_INTEGER || L[j] < 1 || L[j] >= n)
            kb_error_arg(_("'lags' must lie in 1..%d"), n - 1);
    R_xlen_t from = 0, to = n;
    if (range != R_NilValue) {
        if (TYPEOF(range) != REALSXP || XLENGTH(range) != 2 ||
            !(REAL(range)[0] >= 0) || !(REAL(range)[1] <= n) ||
            !(REAL(range)[0] < REAL(range)[1]))
            kb_error_arg(_("'range' must be c(from, to), 0 <= from < to "
                           "<= %d"), n);
        from = (R_xlen_t) REAL(range)[0];
        to = (R_xlen_t) REAL(range)[1];
    }
    SEXP ans = PROTECT(Rf_allocVector(REALSXP, to - from));
    kb_points P = {REAL(x), REAL(s), n};
    lag_ctx c = {.K = &K, .XS = lag_rows(&P, n, d), .n = n, .J = J,
                 .lag = L, .from = from, .g = REAL(ans)};
    kb_loop Lp = {.nt = nt, .cost0 = J * (KB_STEIN_WORK(d) + 2.0 * d),
                  .scratch = kb_scratch_alloc((size_t) 2 * J * d + J, nt),
                  .item = lag_row, .after = lag_after, .ctx = &c};
    R_xlen_t bad = kb_loop_run(&Lp, from, to);
    if (bad >= 0)
        kb_error_numeric(_("the Stein kernel of row %.0f against its lagged "
                           "partners overflows: scale the data or the "
                           "kernel"), (double) bad + 1.0);
    UNPROTECT(1);
    return ans;
}
