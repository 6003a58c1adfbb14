/* Kernel thinning (Dwivedi and Mackey, "Kernel Thinning", COLT 2021 /
 * JMLR 2024; "Generalized Kernel Thinning", ICLR 2022) and Compress++
 * (Shetty, Dwivedi and Mackey, ICLR 2022).
 *
 * The idea: thinning n points to m = n / 2^g is g halvings that keep the
 * halves' kernel mean embeddings close, then a greedy repair.  KT-SPLIT
 * halves g times by the self-balancing Hilbert walk (2^g candidate
 * coresets); KT-SWAP takes the candidate with the smallest MMD to the
 * reference and refines it point by point.  Both run on a kernel matrix
 * of the points (kt_mat), so a caller may hand them the Gram matrix of a
 * base kernel or the Stein kernel matrix, of the whole sample or of one
 * node of Compress++, which halves small groups of the sample and thins
 * their concatenated outputs with the same functions.
 *
 * The refinement has one home, kt_refine(): each coreset point in turn is
 * replaced by the candidate that minimises the MMD, given a way to add
 * coef k(x_j, .) to its statistic: a column of a stored kernel matrix
 * (KT-SWAP, Compress++'s node swap) or a Stein kernel row computed on the
 * fly (kb_kt_refine: a whole sample in O(n) memory).
 *
 * Random numbers: KT's coin flips are uniforms drawn in R: flip (j, c, p)
 * (round j = 0..g-1, coreset c = 0..2^j-1 of that round, pair p) is
 * u[j n/2 + c s/2 + p] with s = n / 2^j, so set.seed() reproduces a run
 * and the R transcription in tests/testthat/helper-kt-ref.R sees the same
 * flips.  Compress++ draws its own with unif_rand(), in the order stated
 * in ?kernel_thin. */
#include <math.h>
#include <string.h>
#include "kernbayes.h"
#include "args.h"
#include "runtime.h"
#include "stein.h"
#include "callback.h"
#include "entries.h"

/* Kernel rows computed on the fly (base or Stein kernel), defined below. */
typedef struct kt_rows kt_rows;

/* A kernel matrix and what the KT steps on it share. */
typedef struct {
    const double *K;      /* n x n, column-major, or NULL: rows on the fly */
    const kt_rows *fly;   /* with K NULL: the points and their kernel */
    int n;
    const double *mu;     /* the reference's mean embedding (n values), or
                           * NULL: the zero measure (the Stein kernel's
                           * mean under the target) */
    kb_ticker *tick;
} kt_mat;

/* Halve the coreset P (s points, indices into the matrix, arrival order)
 * into L and R (s/2 each) with the self-balancing walk: for the pair
 * (x1, x2) at positions 2p, 2p + 1, f = k(x1, .) - k(x2, .) and alpha =
 * <f, sum R - sum L> over the children so far; x2 goes to L with
 * probability (1 - alpha / a) / 2, where the threshold a = max(b sigma
 * sqrt(2 log(2 / delta_j)), b^2), b^2 = ||f||^2, and the sub-Gaussian
 * parameter sigma^2 is updated as in the papers' Algorithm 1a (with the
 * adaptive threshold of the reference implementation).  One pair: x12 =
 * (x1, x2), b2 and alpha given; sets *L and *R. */
static void kt_walk(double *sig2, double b2, double alpha, double logmult,
                    double u, const int *x12, int *L, int *R)
{
    double thresh = sqrt(*sig2 * b2 * logmult);
    if (b2 > thresh)
        thresh = b2;
    if (*sig2 == 0.0) {
        *sig2 = b2;
    } else if (thresh != 0.0) {
        double upd = 0.5 + (b2 / (2.0 * thresh) - 1.0) * *sig2 / thresh;
        if (upd > 0.0)
            *sig2 += 2.0 * b2 * upd;
    }
    if (thresh == 0.0)
        thresh = 1.0;
    double prob2 = 0.5 * (1.0 - alpha / thresh);
    int to_l = u <= prob2;     /* x2 goes to L */
    *L = x12[to_l];
    *R = x12[!to_l];
}

/* The on-the-fly versions (end of the file). */
static void kt_halve_fly(const kt_mat *km, const int *P, int s,
                         double logmult, const double *u, int *L, int *R);
static double kt_rel_mmd2_fly(const kt_mat *km, const int *C, int m);
static void kt_core_sums_fly(const kt_mat *km, const int *C, int m,
                             double *stat, double *dg);
static void kt_rows_add(const void *ctx, int j, double coef, double *stat);

/* kt_walk() over the pairs of P with the kernel values read from the
 * stored matrix (kt_halve_fly(): computed on the fly, the same numbers in
 * the same order). */
static void kt_halve(const kt_mat *km, const int *P, int s, double logmult,
                     const double *u, int *L, int *R)
{
    if (!km->K) {
        kt_halve_fly(km, P, s, logmult, u, L, R);
        return;
    }
    const double *K = km->K;
    double sig2 = 0.0;
    for (int p = 0; p < s / 2; p++) {
        const int *x12 = P + 2 * p;
        const double *k1 = K + (size_t) x12[0] * km->n;
        const double *k2 = K + (size_t) x12[1] * km->n;
        double b2 = k1[x12[0]] + k2[x12[1]] - 2.0 * k1[x12[1]];
        double alpha = 0.0;
        for (int c = 0; c < p; c++)
            alpha += (k1[R[c]] - k2[R[c]]) - (k1[L[c]] - k2[L[c]]);
        kt_walk(&sig2, b2, alpha, logmult, u[p], x12, L + p, R + p);
        kb_tick(km->tick, 4.0 * p + 8.0);
    }
}

/* KT-SPLIT: g halving rounds of the n = 2^g m points in[0..n-1] (indices
 * into the matrix; in NULL: 0..n-1, in this order).  out (n ints) holds
 * the 2^g coresets of m points one after another; tmp is scratch of n
 * ints.  delta: the failure probability; a halving of round j (n_j = n /
 * 2^j points, failure probability delta_j = delta 2^j / g) uses 2 log(2
 * n_j / delta_j) = 2 log(2 n g / (delta 4^j)), as the reference
 * implementation's matrix path (goodpoints split_K; its streaming split_X
 * has 2^j in place of 4^j, which left KT-SPLIT's coresets 8-11% worse in
 * MMD in our cross-check). */
static void kt_split(const kt_mat *km, const int *in, int g, double delta,
                     const double *u, int *out, int *tmp)
{
    int n = km->n;
    for (int i = 0; i < n; i++)
        out[i] = in ? in[i] : i;
    double logmult = 2.0 * log(2.0 * n * g / delta);
    for (int j = 0; j < g; j++) {
        int ncs = 1 << j;
        int s = n / ncs;
        double lm = logmult - j * 4.0 * log(2.0);
        for (int c = 0; c < ncs; c++) {
            int *half = tmp + (size_t) c * s;
            kt_halve(km, out + (size_t) c * s, s, lm,
                     u + (size_t) j * (n / 2) + (size_t) c * (s / 2),
                     half, half + s / 2);
        }
        memcpy(out, tmp, (size_t) n * sizeof(int));
    }
}

/* MMD^2 of the coreset C (m points) to the reference, up to a constant:
 * mean(K[C, C]) - 2 mean(mu[C]). */
static double kt_rel_mmd2(const kt_mat *km, const int *C, int m)
{
    if (!km->K)
        return kt_rel_mmd2_fly(km, C, m);
    double cc = 0.0;
    double ca = 0.0;
    for (int a = 0; a < m; a++) {
        const double *ka = km->K + (size_t) C[a] * km->n;
        double r = 0.0;
        for (int b = 0; b < m; b++)
            r += ka[C[b]];
        cc += r / m;
        if (km->mu)
            ca += km->mu[C[a]];
    }
    return (cc - 2.0 * ca) / m;
}

/* stat[i] = sum_a K[C[a], i] over the coreset C (m points), i < n, and
 * (dg not NULL) dg[i] = K[i, i]. */
static void kt_core_sums(const kt_mat *km, const int *C, int m, double *stat,
                         double *dg)
{
    if (!km->K) {
        kt_core_sums_fly(km, C, m, stat, dg);
        return;
    }
    for (int i = 0; i < km->n; i++) {
        const double *ki = km->K + (size_t) i * km->n;
        double r = 0.0;
        for (int a = 0; a < m; a++)
            r += ki[C[a]];
        stat[i] = r;
        if (dg)
            dg[i] = ki[i];
    }
}

/* ---- The refinement ----------------------------------------------------
 * stat[i] is the change in m MMD^2 (up to terms free of i) when x_i joins
 * the coreset with one point taken out: k(x_i, x_i) / m - 2 mu_i + (2 / m)
 * sum_a k(x_i, x_core[a]).  Taking core[a]'s row out leaves the score of
 * x_i as core[a]'s replacement; the best is put in and its row added. */

/* stat += coef k(x_j, .) over all candidates. */
typedef void (*kt_add_fn)(const void *ctx, int j, double coef, double *stat);

typedef struct {
    kt_add_fn add;
    const void *ctx;
    int n;                /* the candidates are 0..n-1 */
    double *stat;         /* n values, set up by the caller as above */
    kb_ticker *tick;      /* NULL: the adder checks for interrupts */
    double step_work;     /* ticked per coreset point */
    int check;            /* stop when the best value is not finite */
} kt_refiner;

/* The point of non (m of them) with the smallest stat below stat[cur]
 * (first on ties), exchanged for cur in non; cur when there is none. */
static int kt_exchange(const double *stat, int cur, int *non, int m)
{
    int bb = -1;
    double bv = stat[cur];
    for (int b = 0; b < m; b++) {
        if (stat[non[b]] < bv) {
            bv = stat[non[b]];
            bb = b;
        }
    }
    if (bb < 0)
        return cur;
    int in = non[bb];
    non[bb] = cur;
    return in;
}

/* The first index of the smallest of v[0..n-1] (the running minimum kept
 * in a variable: a load of v[best] each step made the scan 2x slower). */
static int kt_argmin(const double *v, int n)
{
    int bi = 0;
    double bv = v[0];
    for (int i = 1; i < n; i++) {
        if (v[i] < bv) {
            bv = v[i];
            bi = i;
        }
    }
    return bi;
}

/* One pass of KT-SWAP's refinement over core (m points), in order.  non
 * NULL: any candidate may replace core[a] (repeats allowed; first index on
 * ties).  Else non holds the other m points of a halving and core[a] is
 * exchanged with the best of them only if strictly better (Compress++'s
 * unique swap).  Returns 0, or -1 when check is set and a best value was
 * not finite (core is then refined only in part). */
static int kt_refine(const kt_refiner *r, int *core, int m, int *non)
{
    double *stat = r->stat;
    double two_m = 2.0 / m;
    for (int a = 0; a < m; a++) {
        int cur = core[a];
        r->add(r->ctx, cur, -two_m, stat);
        int bi = non ? kt_exchange(stat, cur, non, m) : kt_argmin(stat, r->n);
        if (r->check && !R_FINITE(stat[bi]))
            return -1;
        core[a] = bi;
        r->add(r->ctx, bi, two_m, stat);
        if (r->tick)
            kb_tick(r->tick, r->step_work);
    }
    return 0;
}

/* The adder on a stored kernel matrix (ctx: a kt_mat). */
static void kt_mat_add(const void *ctx, int j, double coef, double *stat)
{
    const kt_mat *km = (const kt_mat *) ctx;
    const double *kj = km->K + (size_t) j * km->n;
    for (int i = 0; i < km->n; i++)
        stat[i] += coef * kj[i];
}

/* KT-SWAP: the candidate with the smallest MMD among the baseline (every
 * (n/m)-th point of in[] (NULL: 0..n-1), ending with the last) and the ncs
 * coresets cs (m x ncs; first on ties), refined over all n points.  best:
 * m ints out; stat: n doubles scratch. */
static void kt_swap(const kt_mat *km, const int *in, const int *cs, int ncs,
                    int m, int *best, double *stat)
{
    int n = km->n;
    int step = n / m;
    for (int a = 0; a < m; a++) {
        int pos = n - 1 - (m - 1 - a) * step;
        best[a] = in ? in[pos] : pos;
    }
    double bv = kt_rel_mmd2(km, best, m);
    for (int c = 0; c < ncs; c++) {
        double v = kt_rel_mmd2(km, cs + (size_t) c * m, m);
        if (v < bv) {
            bv = v;
            memcpy(best, cs + (size_t) c * m, (size_t) m * sizeof(int));
        }
    }
    double *dg = (double *) R_alloc(n, sizeof(double));
    kt_core_sums(km, best, m, stat, dg);
    for (int i = 0; i < n; i++) {
        double kii = dg[i];
        double mui = km->mu ? km->mu[i] : 0.0;
        stat[i] = kii / m - 2.0 * mui + 2.0 * (stat[i] / m);
    }
    kt_refiner r = {.add = km->K ? kt_mat_add : kt_rows_add,
                    .ctx = km->K ? (const void *) km : (const void *) km->fly,
                    .n = n, .stat = stat, .tick = km->tick,
                    .step_work = 3.0 * n};
    kt_refine(&r, best, m, NULL);
}

/* Kernel thinning of the n points in[] (NULL: 0..n-1) on km: KT-SPLIT's
 * 2^g coresets of m = n / 2^g points into cs (n ints), then KT-SWAP into
 * best (m ints), or without swap KT-SPLIT's first coreset. */
static void kt_thin(const kt_mat *km, const int *in, int g, double delta,
                    const double *u, int swap, int *cs, int *best)
{
    int n = km->n;
    int m = n >> g;
    int *tmp = (int *) R_alloc(n, sizeof(int));
    kt_split(km, in, g, delta, u, cs, tmp);
    if (swap) {
        double *stat = (double *) R_alloc(n, sizeof(double));
        kt_swap(km, in, cs, 1 << g, m, best, stat);
    } else {
        memcpy(best, cs, (size_t) m * sizeof(int));
    }
}

/* kt_thin() on km as a .Call result: list(coresets = the m x 2^g matrix
 * of KT-SPLIT's coresets, index = the m selected rows, 1-based, mu). */
static SEXP kt_thin_result(const kt_mat *km, int g, double delta,
                           const double *u, int swap, SEXP mu)
{
    int n = km->n;
    int m = n >> g;
    SEXP cs = PROTECT(Rf_allocMatrix(INTSXP, m, 1 << g));
    SEXP idx = PROTECT(Rf_allocVector(INTSXP, m));
    int *c = INTEGER(cs);
    int *b = INTEGER(idx);
    kt_thin(km, NULL, g, delta, u, swap && g > 0, c, b);
    for (int i = 0; i < n; i++)
        c[i] += 1;
    for (int i = 0; i < m; i++)
        b[i] += 1;
    const char *nms[] = {"coresets", "index", "mu", ""};
    SEXP out = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(out, 0, cs);
    SET_VECTOR_ELT(out, 1, idx);
    SET_VECTOR_ELT(out, 2, mu);
    UNPROTECT(3);
    return out;
}

/* .Call entry: K (n x n, n = 2^g m), g, delta, u (g n / 2 uniforms),
 * mu (the reference's mean embedding, length n, or NULL: the zero
 * measure), swap (TRUE/FALSE).  Returns list(coresets = m x 2^g integer
 * matrix of KT-SPLIT's coresets, index = the m selected rows), 1-based;
 * without swap, index is KT-SPLIT's first coreset; with g = 0 it is the
 * whole input (no swap, as goodpoints). */
SEXP kb_kernel_thin(SEXP K_, SEXP g_, SEXP delta_, SEXP u_, SEXP mu_,
                    SEXP swap_)
{
    int n = kb_arg_square(K_, "K");
    int g = kb_scalar_int(g_, "g");
    double delta = kb_scalar_real(delta_, "delta");
    int swap = kb_scalar_flag(swap_, "swap");
    if (g < 0 || g > 30 || n < 1 || n % (1 << g) != 0)
        kb_error_arg(_("'g' must give 2^g dividing nrow(K)"));
    if (!(delta > 0.0 && delta < 1.0))
        kb_error_arg(_("'delta' must be in (0, 1)"));
    const double *u = kb_arg_vector(u_, "u", (R_xlen_t) g * (n / 2));
    const double *mu = Rf_isNull(mu_) ? NULL : kb_arg_vector(mu_, "mu", n);
    if (kb_first_nonfinite(REAL(K_), XLENGTH(K_)) >= 0)
        kb_error_numeric(_("the kernel matrix has non-finite values"));
    kb_ticker tick = KB_TICKER_INIT;   /* R_alloc scratch: interrupts safe */
    kt_mat km = {.K = REAL(K_), .n = n, .mu = mu, .tick = &tick};
    return kt_thin_result(&km, g, delta, u, swap, R_NilValue);
}

/* ---- Compress++ --------------------------------------------------------
 * The exact rules (bins, delta split, node halving with baseline, unique
 * swap and symmetrisation, the order in which uniforms are drawn) are
 * stated in ?kernel_thin and transcribed in plain R in
 * tests/testthat/test-compress.R.  Memory: the points, and one kernel
 * matrix of at most 2^(g+1) sqrt(N) points at a time. */

typedef struct {
    kb_kernel K;
    const double *X, *S;      /* N x d, column-major; S NULL: base kernel */
    int N, d, nt;
    int k, nb, bin, base;     /* N = 2^k rows in nb bins of bin rows; a
                               * node of base = 4^(g+1) rows is halved
                               * directly */
    int bout, M, m, gf;       /* rows out of a bin, of all bins; the final
                               * size and its KT-SPLIT rounds */
    double *T;                /* node kernel matrix, sorted node order */
    double *Xs, *Ss;          /* the node's points, sorted, column-major */
    int *rank, *ord;          /* node position -> sorted; sorted -> position */
    double *u, *mu, *stat;
    int *L, *R, *bl, *bc;
    double halve_prob;
    int swap;
    int final;                /* 0: stop after the bins (Compress only) */
    kb_ticker tick;
    kb_progress prog;         /* rows of the bins compressed so far */
    double rows_done;
} cpp_ctx;

/* Pairs (row, position), by row then position. */
static int cpp_cmp(const void *a, const void *b)
{
    const int *x = (const int *) a;
    const int *y = (const int *) b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    if (x[1] != y[1])
        return x[1] < y[1] ? -1 : 1;
    return 0;
}

/* The kernel matrix of the points S[0..s-1] (rows of X) in ascending row
 * order into c->T (s x s); rank[pos] is the sorted place of S[pos] and
 * ord[r] the position at sorted place r.  Ascending order makes every
 * entry the same number as in the kernel matrix of all rows (the Stein
 * kernel is evaluated with the later row as the row point). */
static void cpp_node_matrix(cpp_ctx *c, const int *S, int s)
{
    int *pr = (int *) R_alloc((size_t) 2 * s, sizeof(int));
    for (int p = 0; p < s; p++) {
        pr[2 * p] = S[p];
        pr[2 * p + 1] = p;
    }
    qsort(pr, (size_t) s, 2 * sizeof(int), cpp_cmp);
    for (int r = 0; r < s; r++) {
        c->ord[r] = pr[2 * r + 1];
        c->rank[pr[2 * r + 1]] = r;
    }
    for (int k = 0; k < c->d; k++) {
        size_t to = (size_t) k * s;
        size_t from = (size_t) k * c->N;
        for (int r = 0; r < s; r++) {
            c->Xs[to + r] = c->X[from + pr[2 * r]];
            if (c->S)
                c->Ss[to + r] = c->S[from + pr[2 * r]];
        }
    }
    R_xlen_t bad = -1;
    if (c->S) {
        kb_points P = {.X = c->Xs, .S = c->Ss, .ld = s};
        bad = kb_stein_matrix_fill(&c->K, &P, s, c->nt, c->T);
    } else {   /* a base kernel is bounded: no check needed */
        kb_kernel_rows q = {.K = &c->K, .X = c->Xs, .Y = c->Xs, .nx = s,
                            .ny = s, .G = c->T, .mean = NULL};
        kb_kernel_rows_run(&q, c->nt);
    }
    if (bad >= 0)
        kb_error_numeric(_("the Stein kernel has non-finite values in "
                           "Compress++ (check the scores)"));
    kb_tick(&c->tick, (double) s * s * KB_KERNEL_WORK(c->d));
}

/* mu[r] = mean of row r of the node matrix (= column r: symmetric). */
static void cpp_row_means(const cpp_ctx *c, int s, double *mu)
{
    for (int r = 0; r < s; r++) {
        const double *col = c->T + (size_t) r * s;
        double acc = 0.0;
        for (int p = 0; p < s; p++)
            acc += col[p];
        mu[r] = acc / s;
    }
}

/* A four-point node (matrix T, ranks rk): the pair of the pairing with
 * the smallest cross sum, or its complement, by one uniform. */
static void cpp_halve4(const double *T, const int *rk, const int *S, int *out)
{
    double u = unif_rand();
#define KP(a, b) T[(size_t) rk[a] * 4 + rk[b]]
    double A = KP(1, 2) + KP(0, 3);
    double B = KP(0, 1) + KP(2, 3);
    double C = KP(0, 2) + KP(1, 3);
#undef KP
    int p1;
    if (A < B)
        p1 = A < C ? 3 : 2;
    else
        p1 = B < C ? 1 : 2;
    int keep[2] = {0, p1};
    if (!(u < 0.5)) {   /* the complementary pair */
        int k = 0;
        for (int p = 1; p < 4; p++)
            if (p != p1)
                keep[k++] = p;
    }
    out[0] = S[keep[0]];
    out[1] = S[keep[1]];
}

/* Compress++'s swap on a halved node (matrix node, halves c->L, c->R):
 * the half L, or the baseline of the odd positions when its MMD to the
 * node's points is smaller, refined by the unique swap with its
 * complement.  *core and *non point to the chosen half and the other. */
static void cpp_node_swap(cpp_ctx *c, const kt_mat *node, int **core,
                          int **non)
{
    int s = node->n;
    int h = s / 2;
    cpp_row_means(c, s, c->mu);
    for (int a = 0; a < h; a++) {
        c->bl[a] = c->rank[2 * a + 1];
        c->bc[a] = c->rank[2 * a];
    }
    /* L = the even positions is the baseline's complement: the same MMD in
     * exact arithmetic, so keep L without letting rounding decide */
    int comp = 1;
    for (int a = 0; a < h && comp; a++)
        comp = c->L[a] == c->bc[a];
    if (!comp && !(kt_rel_mmd2(node, c->L, h) <
                   kt_rel_mmd2(node, c->bl, h))) {
        *core = c->bl;
        *non = c->bc;
    }
    double *st = c->stat;
    kt_core_sums(node, *core, h, st, NULL);
    for (int i = 0; i < s; i++) {
        double kii = node->K[(size_t) i * s + i];
        st[i] = kii / h + 2.0 * (st[i] / h - c->mu[i]);
    }
    kt_refiner r = {.add = kt_mat_add, .ctx = node, .n = s, .stat = st,
                    .tick = &c->tick, .step_work = 4.0 * s};
    kt_refine(&r, *core, h, *non);
}

/* Halve the s points S (rows of X) into out (s/2 rows).  All indices
 * inside are sorted places in the node matrix. */
static void cpp_halve(cpp_ctx *c, const int *S, int s, int *out)
{
    const void *vmax = vmaxget();
    cpp_node_matrix(c, S, s);
    if (s == 4) {
        cpp_halve4(c->T, c->rank, S, out);
        vmaxset(vmax);
        return;
    }
    int h = s / 2;
    for (int p = 0; p < h; p++)
        c->u[p] = unif_rand();
    double delta_h = c->halve_prob * (double) s * s;
    kt_mat node = {.K = c->T, .n = s, .mu = c->mu, .tick = &c->tick};
    kt_halve(&node, c->rank, s, 2.0 * log(2.0 * s / delta_h), c->u, c->L,
             c->R);
    int *core = c->L;
    int *non = c->R;
    if (c->swap)
        cpp_node_swap(c, &node, &core, &non);
    const int *pick = unif_rand() > 0.5 ? non : core;
    for (int a = 0; a < h; a++)
        out[a] = S[c->ord[pick[a]]];
    vmaxset(vmax);
}

/* Compress(g) of the s rows S into out (2^g sqrt(s) rows); base = 4^(g+1). */
static void cpp_compress(cpp_ctx *c, const int *S, int s, int base, int *out)
{
    if (s == base) {
        cpp_halve(c, S, s, out);
        c->rows_done += s;
        kb_progress_report(&c->prog, c->rows_done, NA_REAL, NA_REAL, 0);
        return;
    }
    int q = s / 4;
    /* output of a quarter: 2^g sqrt(q) = half of this node's halving input */
    int hin = 2 * (int) lround(sqrt((double) base / 4.0) * sqrt((double) s));
    int oq = hin / 4;
    int *D = (int *) R_alloc((size_t) hin, sizeof(int));
    for (int k = 0; k < 4; k++)
        cpp_compress(c, S + (size_t) k * q, q, base, D + (size_t) k * oq);
    cpp_halve(c, D, hin, out);
}

/* The sizes for c->N rows and oversampling g, m = 2^floor(k/2) / 2^r; 0
 * when they do not fit (N not a power of 2, bins below 4^(g+1) rows). */
static int cpp_plan(cpp_ctx *c, int g, int r)
{
    int k = 0;
    while (k < 30 && (1 << k) < c->N)
        k++;
    c->k = k;
    c->nb = k % 2 ? 8 : 4;
    c->bin = c->N >> (k % 2 ? 3 : 2);
    long base = g >= 0 && g <= 12 ? 1L << (2 * (g + 1)) : 0;
    if ((1 << k) != c->N || base == 0 || c->bin < base || r < 0 || r > k / 2)
        return 0;
    c->base = (int) base;
    c->bout = (1 << g) * (int) lround(sqrt((double) c->bin));
    c->M = c->nb * c->bout;
    c->m = (1 << (k / 2)) >> r;
    c->gf = 0;
    while ((c->m << c->gf) < c->M)
        c->gf++;
    return 1;
}

/* Scratch for nodes of up to M points (the final thinning's node), or of
 * up to 2 bout (a bin's top node) without the final thinning. */
static void cpp_alloc(cpp_ctx *c)
{
    size_t M = (size_t) (c->final ? c->M : 2 * c->bout);
    c->T = (double *) R_alloc(M * M, sizeof(double));
    c->Xs = (double *) R_alloc(M * c->d, sizeof(double));
    c->Ss = c->S ? (double *) R_alloc(M * c->d, sizeof(double)) : NULL;
    c->rank = (int *) R_alloc(M, sizeof(int));
    c->ord = (int *) R_alloc(M, sizeof(int));
    c->u = (double *) R_alloc(M, sizeof(double));
    c->mu = (double *) R_alloc(M, sizeof(double));
    c->stat = (double *) R_alloc(M, sizeof(double));
    c->L = (int *) R_alloc(M, sizeof(int));
    c->R = (int *) R_alloc(M, sizeof(int));
    c->bl = (int *) R_alloc(M, sizeof(int));
    c->bc = (int *) R_alloc(M, sizeof(int));
}

/* The final thinning of the bins' outputs C (M rows, their node matrix in
 * c->T): KT-SPLIT (gf rounds, uniforms u) and, with swap, KT-SWAP against
 * the target (with a score) or the outputs' empirical measure.  idx: the
 * m selected rows; both made 1-based. */
static void cpp_final(cpp_ctx *c, double delta_t, const double *u, int *C,
                      int *idx)
{
    double *mu = NULL;
    if (c->swap && !c->S) {
        mu = (double *) R_alloc(c->M, sizeof(double));
        cpp_row_means(c, c->M, mu);
    }
    kt_mat km = {.K = c->T, .n = c->M, .mu = mu, .tick = &c->tick};
    int *split = (int *) R_alloc(c->M, sizeof(int));
    kt_thin(&km, c->rank, c->gf, delta_t, u, c->swap, split, idx);
    for (int a = 0; a < c->m; a++)
        idx[a] = C[c->ord[idx[a]]] + 1;
    for (int i = 0; i < c->M; i++)
        C[i] += 1;
}

/* Compress++ of the c->N rows (sizes from cpp_plan) with failure
 * probability delta, split between the stages as in the reference
 * implementation: C (M rows) the bins' outputs, idx (m) the selection. */
static void cpp_run(cpp_ctx *c, int g, double delta, int *C, int *idx)
{
    double hh = g + log2((double) c->nb) / 2.0;
    double ls = c->k / 2.0;
    double thin_frac = hh / (hh + pow(2.0, hh) * (ls - hh));
    double delta_t = delta * thin_frac;
    double delta_c = delta * (1.0 - thin_frac);
    c->halve_prob = delta_c / c->base / (log2((double) c->bin) / 2.0 - g)
        / c->N;
    cpp_alloc(c);
    int *rows = (int *) R_alloc(c->N, sizeof(int));
    for (int i = 0; i < c->N; i++)
        rows[i] = i;
    GetRNGstate();
    for (int b = 0; b < c->nb; b++)
        cpp_compress(c, rows + (size_t) b * c->bin, c->bin, c->base,
                     C + (size_t) b * c->bout);
    if (!c->final) {
        PutRNGstate();
        kb_progress_report(&c->prog, (double) c->N, NA_REAL, NA_REAL, 1);
        for (int i = 0; i < c->M; i++)
            C[i] += 1;
        return;
    }
    cpp_node_matrix(c, C, c->M);
    R_xlen_t nu = (R_xlen_t) c->gf * (c->M / 2);
    double *u = (double *) R_alloc((size_t) nu, sizeof(double));
    for (R_xlen_t i = 0; i < nu; i++)
        u[i] = unif_rand();
    PutRNGstate();
    kb_progress_report(&c->prog, (double) c->N, NA_REAL, NA_REAL, 1);
    cpp_final(c, delta_t, u, C, idx);
}

/* .Call entry: x (N x d, N = 2^k, in the kernel's coordinates), s (N x d
 * scores, or NULL: the base kernel), kern, ctl = list(g (oversampling),
 * r (extra final rounds: m = 2^floor(k/2) / 2^r), delta, swap, nthreads,
 * progress (an R function of (rows done, size, ksd), or NULL), final
 * (optional, default TRUE; FALSE: Compress only, no final thinning, and
 * `index` empty: stein_kernel_thin()'s coreset before its debiasing));
 * nb = 4 bins (k even) or 8 (k odd) of N / nb rows, at least 4^(g+1) each.
 * Returns list(compress = the rows kept by Compress, index = the m
 * selected rows), 1-based. */
SEXP kb_compresspp(SEXP x_, SEXP s_, SEXP kern, SEXP ctl)
{
    cpp_ctx c;
    memset(&c, 0, sizeof c);
    if (Rf_isNull(s_)) {
        c.N = kb_arg_matrix(x_, "x", -1, -1);
        c.d = Rf_ncols(x_);
    } else {
        kb_arg_points(x_, s_, "x", "score", &c.N, &c.d);
        c.S = REAL(s_);
    }
    c.X = REAL(x_);
    int g = kb_scalar_int(kb_list_elt(ctl, "g"), "oversample");
    int r = kb_scalar_int(kb_list_elt(ctl, "r"), "r");
    double delta = kb_scalar_real(kb_list_elt(ctl, "delta"), "delta");
    c.swap = kb_scalar_flag(kb_list_elt(ctl, "swap"), "swap");
    SEXP fin = kb_list_elt(ctl, "final");
    c.final = Rf_isNull(fin) ? 1 : kb_scalar_flag(fin, "final");
    c.nt = kb_nthreads(kb_list_elt(ctl, "nthreads"));
    kb_progress_init(&c.prog, kb_list_elt(ctl, "progress"));
    if (!cpp_plan(&c, g, r))
        kb_error_arg(_("Compress++ needs N = 2^k rows with N / bins >= "
                       "4^(oversample + 1)"));
    if (!(delta > 0.0 && delta < 1.0))
        kb_error_arg(_("'delta' must be in (0, 1)"));
    kb_kernel_from_sexp(kern, c.d, &c.K);
    SEXP cs = PROTECT(Rf_allocVector(INTSXP, c.M));
    SEXP idx = PROTECT(Rf_allocVector(INTSXP, c.final ? c.m : 0));
    cpp_run(&c, g, delta, INTEGER(cs), INTEGER(idx));
    const char *nms[] = {"compress", "index", ""};
    SEXP out = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(out, 0, cs);
    SET_VECTOR_ELT(out, 1, idx);
    UNPROTECT(3);
    return out;
}

/* ---- KT-SWAP over a whole sample (Stein kernel thinning) ---------------
 * Li, Dwivedi and Mackey (ICML 2024) refine the candidate coresets of a
 * debiased, rounded sample against the target over ALL input points.  The
 * kernel rows are computed on the fly (3 n m Stein kernel evaluations per
 * candidate, O(n) memory), in parallel over blocks of points. */

typedef struct {
    const kb_kernel *K;
    const kb_points *P;
    const double *x;          /* the row point, then its score (2 d) */
    double coef;              /* out[j] += coef * k(x, x_j) */
    double *out;
    R_xlen_t n;
} kt_row_ctx;

/* k(x, x_j), j0 <= j < j1: the Stein kernel when P has scores (x: the
 * point, then its score), else the base kernel; the functions that fill
 * kb_stein_matrix and kb_gram. */
static void kt_row(const kb_kernel *K, const double *x, const kb_points *P,
                   R_xlen_t j0, R_xlen_t j1, double *out)
{
    if (P->S)
        kb_stein_row(K, x, x + K->d, P, j0, j1, out);
    else
        kb_kernel_row(K, x, P->X, P->ld, j0, j1, out);
}

static void kt_row_item(void *ctx, R_xlen_t b, double *buf)
{
    const kt_row_ctx *q = (const kt_row_ctx *) ctx;
    R_xlen_t j0 = b * KB_BLOCK;
    R_xlen_t j1 = j0 + KB_BLOCK < q->n ? j0 + KB_BLOCK : q->n;
    kt_row(q->K, q->x, q->P, j0, j1, buf);
    for (R_xlen_t j = j0; j < j1; j++)
        q->out[j] += q->coef * buf[j - j0];
}

/* The kernel rows of the n points of P, computed on the fly, and the
 * scratch of the KT steps that read them (kt_mat with K NULL). */
struct kt_rows {
    const kb_kernel *K;
    const kb_points *P;       /* S NULL: the base kernel */
    int n, nt;
    double *xi, *xj;          /* scratch: a point and its score (2 d) */
    kb_scratch scratch;       /* the loop's: KB_BLOCK per thread */
    int cap;                  /* rows of the gathered points (0: none) */
    double *Y, *YS;           /* gathered points and scores (cap x d) */
    double *r1, *r2;          /* rows against them (cap each) */
};

/* The adder on kernel rows computed on the fly (ctx: kt_rows); x_j
 * gathered first. */
static void kt_rows_add(const void *ctx, int j, double coef, double *stat)
{
    const kt_rows *sr = (const kt_rows *) ctx;
    int d = sr->K->d;
    kb_get_row(sr->P->X, sr->P->ld, j, d, sr->xi);
    if (sr->P->S)
        kb_get_row(sr->P->S, sr->P->ld, j, d, sr->xi + d);
    kt_row_ctx q = {.K = sr->K, .P = sr->P, .x = sr->xi, .coef = coef,
                    .out = stat, .n = sr->n};
    double work = sr->P->S ? KB_STEIN_WORK(d) : KB_KERNEL_WORK(d);
    kb_loop L = {.nt = sr->nt, .cost0 = KB_BLOCK * work,
                 .scratch = sr->scratch, .item = kt_row_item, .ctx = &q};
    kb_loop_run(&L, 0, (sr->n + KB_BLOCK - 1) / KB_BLOCK);
}

/* dg[i] = k_p(x_i, x_i), the Stein kernel's diagonal (xi: 2 d doubles of
 * scratch), with an error at the first row where it is not finite.  For a
 * positive definite kernel |k_p(x_i, x_j)| <= sqrt(k_p(x_i, x_i) k_p(x_j,
 * x_j)), so a finite diagonal bounds every entry the rows on the fly will
 * compute: the check the matrix path makes on the whole matrix, in O(n d). */
static void kt_stein_diag(const kb_kernel *K, const kb_points *P, int n,
                          double *xi, double *dg)
{
    for (int i = 0; i < n; i++) {
        kb_get_row(P->S, n, i, K->d, xi);
        dg[i] = kb_stein_diag(K, xi);
        if (!R_FINITE(dg[i]))
            kb_error_numeric(_("the Stein kernel is not finite at row %d "
                               "(check the scores)"), i + 1);
    }
}

/* KT-SWAP's refinement of each of the nc candidates (m x nc, 0-based, in
 * place) over all n points of P against the target (mu = 0). */
static void kt_refine_stein(const kb_kernel *K, const kb_points *P, int n,
                            int nt, int *cands, int m, int nc)
{
    int d = K->d;
    double *dg = (double *) R_alloc(n, sizeof(double));
    double *stat = (double *) R_alloc(n, sizeof(double));
    double *xi = (double *) R_alloc((size_t) 2 * d, sizeof(double));
    kt_stein_diag(K, P, n, xi, dg);
    kt_rows rows = {.K = K, .P = P, .n = n, .nt = nt, .xi = xi,
                    .scratch = kb_scratch_alloc(KB_BLOCK, nt)};
    kt_refiner r = {.add = kt_rows_add, .ctx = &rows, .n = n,
                    .stat = stat, .tick = NULL, .check = 1};
    double two_m = 2.0 / m;
    for (int c = 0; c < nc; c++) {
        int *best = cands + (size_t) c * m;
        for (int i = 0; i < n; i++)
            stat[i] = dg[i] / m;
        for (int a = 0; a < m; a++)
            kt_rows_add(&rows, best[a], two_m, stat);
        if (kt_refine(&r, best, m, NULL) < 0)
            kb_error_numeric(_("the Stein kernel has non-finite values "
                               "(check the scores)"));
    }
}

/* .Call entry: x, s (n x d, the kernel's coordinates), kern, cands (m x C
 * integer matrix of 1-based rows), nthreads.  Each candidate in turn: every
 * point replaced, in order, by the row of the whole sample that minimises
 * the KSD of the coreset (repeats allowed, first row on ties).  Returns the
 * m x C matrix of refined candidates (1-based). */
SEXP kb_kt_refine(SEXP x_, SEXP s_, SEXP kern, SEXP cands, SEXP nthreads)
{
    int n, d;
    kb_arg_points(x_, s_, "x", "score", &n, &d);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    kb_points P = {.X = REAL(x_), .S = REAL(s_), .ld = n};
    int nt = kb_nthreads(nthreads);
    if (!Rf_isInteger(cands) || !Rf_isMatrix(cands) || Rf_nrows(cands) < 1)
        kb_error_arg(_("'cands' must be an integer matrix"));
    int m = Rf_nrows(cands);
    int nc = Rf_ncols(cands);
    const int *cv = INTEGER(cands);
    R_xlen_t len = (R_xlen_t) m * nc;
    for (R_xlen_t i = 0; i < len; i++)
        if (cv[i] == NA_INTEGER || cv[i] < 1 || cv[i] > n)
            kb_error_arg(_("'cands' must hold rows 1..nrow(x)"));
    SEXP out = PROTECT(Rf_allocMatrix(INTSXP, m, nc));
    int *o = INTEGER(out);
    for (R_xlen_t i = 0; i < len; i++)
        o[i] = cv[i] - 1;
    kt_refine_stein(&K, &P, n, nt, o, m, nc);
    for (R_xlen_t i = 0; i < len; i++)
        o[i] += 1;
    UNPROTECT(1);
    return out;
}

/* kt_rows for the n points of P with the gathered scratch (n rows). */
static kt_rows kt_rows_alloc(const kb_kernel *K, const kb_points *P, int n,
                             int nt)
{
    int d = K->d;
    size_t nd = (size_t) n * d;
    kt_rows f = {.K = K, .P = P, .n = n, .nt = nt, .cap = n,
                 .scratch = kb_scratch_alloc(KB_BLOCK, nt)};
    f.xi = (double *) R_alloc((size_t) 4 * d, sizeof(double));
    f.xj = f.xi + 2 * d;
    f.Y = (double *) R_alloc(nd, sizeof(double));
    f.YS = P->S ? (double *) R_alloc(nd, sizeof(double)) : NULL;
    f.r1 = (double *) R_alloc((size_t) 2 * n, sizeof(double));
    f.r2 = f.r1 + n;
    return f;
}

/* ---- KT with kernel rows on the fly ------------------------------------
 * KT in O(n d) memory: every kernel value the matrix path reads is
 * computed when it is needed, by the function that fills the matrix
 * (kb_kernel_row for kb_gram, kb_stein_row for kb_stein_matrix).  Their
 * values depend neither on a point's place in the row nor on which of the
 * two points is the row point (tests/testthat/test-kt-memory.R checks it
 * on whole matrices), and they are summed in the matrix path's order, so
 * the coresets are the same.  KT-SPLIT's halving of s points keeps its
 * points gathered (pair p at rows 2p = R[p], 2p + 1 = L[p]) and computes
 * the rows of x1 and x2 against the 2p + 2 so far: about n^2 evaluations
 * over all rounds, against n^2 / 2 for the matrix. */

/* Point i and its score (base kernel: the point) into buf (2 d). */
static void kt_get(const kt_rows *f, int i, double *buf)
{
    int d = f->K->d;
    kb_get_row(f->P->X, f->P->ld, i, d, buf);
    if (f->P->S)
        kb_get_row(f->P->S, f->P->ld, i, d, buf + d);
}

/* Point i (and its score) into row `slot` of the gathered points; slot
 * -1 - t: exchange rows t and t + 1 instead. */
static void kt_put(const kt_rows *f, int i, int slot)
{
    size_t cap = (size_t) f->cap;
    size_t ld = (size_t) f->P->ld;
    for (int k = 0; k < f->K->d; k++) {
        double *y = f->Y + k * cap;
        double *ys = f->P->S ? f->YS + k * cap : NULL;
        if (slot < 0) {
            int t = -1 - slot;
            double v = y[t];
            y[t] = y[t + 1];
            y[t + 1] = v;
            if (ys) {
                v = ys[t];
                ys[t] = ys[t + 1];
                ys[t + 1] = v;
            }
        } else {
            y[slot] = f->P->X[k * ld + i];
            if (ys)
                ys[slot] = f->P->S[k * ld + i];
        }
    }
}

/* out[t] = k(x_i, y_t) for the first cnt gathered points y_t. */
static void kt_row_gathered(const kt_rows *f, int i, int cnt, double *out)
{
    kt_get(f, i, f->xi);
    kb_points G = {.X = f->Y, .S = f->P->S ? f->YS : NULL, .ld = f->cap};
    kt_row(f->K, f->xi, &G, 0, cnt, out);
}

static void kt_halve_fly(const kt_mat *km, const int *P, int s,
                         double logmult, const double *u, int *L, int *R)
{
    const kt_rows *f = km->fly;
    const double *k1 = f->r1;
    const double *k2 = f->r2;
    double sig2 = 0.0;
    for (int p = 0; p < s / 2; p++) {
        const int *x12 = P + 2 * p;
        int t = 2 * p;
        kt_put(f, x12[0], t);
        kt_put(f, x12[1], t + 1);
        kt_row_gathered(f, x12[0], t + 2, f->r1);
        kt_row_gathered(f, x12[1], t + 2, f->r2);
        double b2 = k1[t] + k2[t + 1] - 2.0 * k1[t + 1];
        double alpha = 0.0;
        for (int c = 0; c < t; c += 2)
            alpha += (k1[c] - k2[c]) - (k1[c + 1] - k2[c + 1]);
        kt_walk(&sig2, b2, alpha, logmult, u[p], x12, L + p, R + p);
        if (R[p] != x12[0])
            kt_put(f, 0, -1 - t);
        kb_tick(km->tick, 8.0 * (p + 1) * KB_KERNEL_WORK(f->K->d));
    }
}

static double kt_rel_mmd2_fly(const kt_mat *km, const int *C, int m)
{
    const kt_rows *f = km->fly;
    for (int b = 0; b < m; b++)
        kt_put(f, C[b], b);
    double cc = 0.0;
    double ca = 0.0;
    for (int a = 0; a < m; a++) {
        kt_row_gathered(f, C[a], m, f->r1);
        double r = 0.0;
        for (int b = 0; b < m; b++)
            r += f->r1[b];
        cc += r / m;
        if (km->mu)
            ca += km->mu[C[a]];
    }
    kb_tick(km->tick, (double) m * m * KB_KERNEL_WORK(f->K->d));
    return (cc - 2.0 * ca) / m;
}

/* The coreset gathered at rows 0..m-1, x_i at row m: its row gives the
 * sum and (dg) the diagonal. */
static void kt_core_sums_fly(const kt_mat *km, const int *C, int m,
                             double *stat, double *dg)
{
    const kt_rows *f = km->fly;
    for (int a = 0; a < m; a++)
        kt_put(f, C[a], a);
    for (int i = 0; i < km->n; i++) {
        kt_put(f, i, m);
        kt_row_gathered(f, i, m + 1, f->r1);
        double r = 0.0;
        for (int a = 0; a < m; a++)
            r += f->r1[a];
        stat[i] = r;
        if (dg)
            dg[i] = f->r1[m];
        kb_tick(km->tick, (m + 1.0) * KB_KERNEL_WORK(f->K->d));
    }
}

typedef struct {
    const kt_rows *f;
    double *mu;
} kt_means_ctx;

/* mu[i] = the mean of row i of the base kernel's matrix as rowMeans()
 * computes it: a long double sum over the columns in order, then / n. */
static void kt_means_item(void *ctx, R_xlen_t i, double *buf)
{
    const kt_means_ctx *q = (const kt_means_ctx *) ctx;
    const kt_rows *f = q->f;
    int d = f->K->d;
    double *x = buf + KB_BLOCK;
    kb_get_row(f->P->X, f->P->ld, i, d, x);
    long double acc = 0.0;
    for (R_xlen_t j = 0; j < f->n; j += KB_BLOCK) {
        R_xlen_t j1 = j + KB_BLOCK < f->n ? j + KB_BLOCK : f->n;
        kt_row(f->K, x, f->P, j, j1, buf);
        for (R_xlen_t t = 0; t < j1 - j; t++)
            acc += buf[t];
    }
    acc /= f->n;
    q->mu[i] = (double) acc;
}

/* .Call entry: x (n x d, the kernel's coordinates, n = 2^g m), s (n x d
 * scores: the Stein kernel, reference the target; NULL: the base kernel,
 * reference the sample's mean embedding), kern, u (g n / 2 uniforms), ctl
 * = list(g, delta, swap, nthreads).  The result of kb_kernel_thin on the
 * kernel matrix of x (with mu = its row means for a base kernel), which
 * is not formed; mu: those row means (base kernel) or NULL. */
SEXP kb_kernel_thin_rows(SEXP x_, SEXP s_, SEXP kern, SEXP u_, SEXP ctl)
{
    int n = kb_arg_matrix(x_, "x", -1, -1);
    int d = Rf_ncols(x_);
    if (!Rf_isNull(s_))
        kb_arg_points(x_, s_, "x", "score", &n, &d);
    int g = kb_scalar_int(kb_list_elt(ctl, "g"), "g");
    double delta = kb_scalar_real(kb_list_elt(ctl, "delta"), "delta");
    int swap = kb_scalar_flag(kb_list_elt(ctl, "swap"), "swap");
    int nt = kb_nthreads(kb_list_elt(ctl, "nthreads"));
    if (g < 0 || g > 30 || n < 1 || n % (1 << g) != 0)
        kb_error_arg(_("'g' must give 2^g dividing nrow(x)"));
    if (!(delta > 0.0 && delta < 1.0))
        kb_error_arg(_("'delta' must be in (0, 1)"));
    const double *u = kb_arg_vector(u_, "u", (R_xlen_t) g * (n / 2));
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    kb_points P = {.X = REAL(x_), .S = Rf_isNull(s_) ? NULL : REAL(s_),
                   .ld = n};
    if (P.S) {   /* a base kernel is bounded: no check needed */
        double *xi = (double *) R_alloc((size_t) 2 * d, sizeof(double));
        kt_stein_diag(&K, &P, n, xi, (double *) R_alloc(n, sizeof(double)));
    }
    kt_rows f = kt_rows_alloc(&K, &P, n, nt);
    SEXP mu = PROTECT(P.S ? R_NilValue : Rf_allocVector(REALSXP, n));
    if (!P.S) {
        kt_means_ctx q = {.f = &f, .mu = REAL(mu)};
        kb_loop L = {.nt = nt, .cost0 = (double) n * KB_KERNEL_WORK(d),
                     .scratch = kb_scratch_alloc((size_t) d + KB_BLOCK, nt),
                     .item = kt_means_item, .ctx = &q};
        kb_loop_run(&L, 0, n);
    }
    kb_ticker tick = KB_TICKER_INIT;   /* R_alloc scratch: interrupts safe */
    kt_mat km = {.K = NULL, .fly = &f, .n = n,
                 .mu = P.S ? NULL : REAL(mu), .tick = &tick};
    SEXP out = kt_thin_result(&km, g, delta, u, swap, mu);
    UNPROTECT(1);
    return out;
}
