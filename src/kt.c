/* Kernel thinning (Dwivedi and Mackey, "Kernel Thinning", COLT 2021 /
 * JMLR 2024; "Generalized Kernel Thinning", ICLR 2022): KT-SPLIT, g rounds
 * of kernel halving by the self-balancing Hilbert walk, and KT-SWAP, the
 * choice of the best candidate coreset and its point-by-point refinement.
 * Both run on a kernel matrix K of the n input points (column-major), so
 * a caller may hand them the Gram matrix of a base kernel or the Stein
 * kernel matrix, of the whole sample or of one group of it (Compress++
 * halves groups with the same split).  The coin flips are uniforms drawn
 * in R: flip (j, c, p) (round j = 0..g-1, coreset c = 0..2^j-1 of that
 * round, pair p) is u[j n/2 + c s/2 + p] with s = n / 2^j, so set.seed()
 * reproduces a run and the R transcription in tests/testthat/test-kt.R
 * sees the same flips. */
#include <math.h>
#include <string.h>
#include "kernbayes.h"
#include "args.h"
#include "runtime.h"
#include "stein.h"
#include "entries.h"

/* Halve the coreset P (s points, indices into K, arrival order) into
 * L and R (s/2 each) with the self-balancing walk: for the pair (x1, x2)
 * at positions 2p, 2p + 1, f = k(x1, .) - k(x2, .) and alpha = <f, sum R -
 * sum L> over the children so far; x2 goes to L with probability
 * (1 - alpha / a) / 2, where the threshold a = max(b sigma sqrt(2 log(2 /
 * delta_j)), b^2), b^2 = ||f||^2, and the sub-Gaussian parameter sigma^2
 * is updated as in the papers' Algorithm 1a (with the adaptive threshold
 * of the reference implementation). */
static void kt_halve(const double *K, int n, const int *P, int s,
                     double logmult, const double *u, int *L, int *R,
                     kb_ticker *tick)
{
    double sig2 = 0.0;
    for (int p = 0; p < s / 2; p++) {
        int x1 = P[2 * p], x2 = P[2 * p + 1];
        const double *k1 = K + (size_t) x1 * n, *k2 = K + (size_t) x2 * n;
        double b2 = k1[x1] + k2[x2] - 2.0 * k1[x2];
        double thresh = sqrt(sig2 * b2 * logmult);
        if (b2 > thresh) thresh = b2;
        if (sig2 == 0.0) {
            sig2 = b2;
        } else if (thresh != 0.0) {
            double upd = 0.5 + (b2 / (2.0 * thresh) - 1.0) * sig2 / thresh;
            if (upd > 0.0) sig2 += 2.0 * b2 * upd;
        }
        if (thresh == 0.0) thresh = 1.0;
        double alpha = 0.0;
        for (int c = 0; c < p; c++)
            alpha += (k1[R[c]] - k2[R[c]]) - (k1[L[c]] - k2[L[c]]);
        double prob2 = 0.5 * (1.0 - alpha / thresh);
        if (u[p] <= prob2) {
            L[p] = x2; R[p] = x1;
        } else {
            L[p] = x1; R[p] = x2;
        }
        kb_tick(tick, 4.0 * p + 8.0);
    }
}

/* KT-SPLIT: g halving rounds of the n = 2^g m points in[0..n-1] (indices
 * into K; in NULL: 0..n-1, in this order).  `out`
 * (n ints) holds the 2^g coresets of m points one after another; `tmp`
 * is scratch of n ints.  delta: the failure probability; the threshold
 * of round j uses 2 log(2 n g / (delta 2^j)) (reference implementation). */
static void kt_split(const double *K, int n, const int *in, int g,
                     double delta, const double *u, int *out, int *tmp,
                     kb_ticker *tick)
{
    for (int i = 0; i < n; i++) out[i] = in ? in[i] : i;
    double logmult = 2.0 * log(2.0 * n * g / delta);
    for (int j = 0; j < g; j++) {
        int ncs = 1 << j, s = n / ncs;
        double lm = logmult - j * 2.0 * log(2.0);
        for (int c = 0; c < ncs; c++)
            kt_halve(K, n, out + (size_t) c * s, s, lm,
                     u + (size_t) j * (n / 2) + (size_t) c * (s / 2),
                     tmp + (size_t) c * s, tmp + (size_t) c * s + s / 2,
                     tick);
        memcpy(out, tmp, (size_t) n * sizeof(int));
    }
}

/* MMD^2 of the coreset C (m points) to the reference, up to a constant:
 * mean(K[C, C]) - 2 mean(mu[C]) (mu = NULL: the zero measure). */
static double kt_rel_mmd2(const double *K, int n, const int *C, int m,
                          const double *mu)
{
    double cc = 0.0, ca = 0.0;
    for (int a = 0; a < m; a++) {
        const double *ka = K + (size_t) C[a] * n;
        double r = 0.0;
        for (int b = 0; b < m; b++) r += ka[C[b]];
        cc += r / m;
        if (mu) ca += mu[C[a]];
    }
    return (cc - 2.0 * ca) / m;
}

/* KT-SWAP: the candidate with the smallest MMD among the baseline (every
 * (n/m)-th point of in[] (NULL: 0..n-1), ending with the last) and the 2^g
 * coresets (first on
 * ties), then each point in turn replaced by the input point that
 * minimises the MMD (repeats allowed; first index on ties).  best: m ints
 * out; stat: n doubles scratch. */
static void kt_swap(const double *K, int n, const int *in, const int *cs,
                    int ncs, int m, const double *mu, int *best,
                    double *stat, kb_ticker *tick)
{
    int step = n / m;
    for (int a = 0; a < m; a++) {
        int pos = n - 1 - (m - 1 - a) * step;
        best[a] = in ? in[pos] : pos;
    }
    double bv = kt_rel_mmd2(K, n, best, m, mu);
    for (int c = 0; c < ncs; c++) {
        double v = kt_rel_mmd2(K, n, cs + (size_t) c * m, m, mu);
        if (v < bv) {
            bv = v;
            memcpy(best, cs + (size_t) c * m, (size_t) m * sizeof(int));
        }
    }
    /* stat[i]: the change in m * MMD^2 (up to terms free of i) when x_i
     * joins the coreset with one point taken out */
    for (int i = 0; i < n; i++) {
        const double *ki = K + (size_t) i * n;
        double r = 0.0;
        for (int a = 0; a < m; a++) r += ki[best[a]];
        stat[i] = ki[i] / m - 2.0 * (mu ? mu[i] : 0.0) + 2.0 * (r / m);
    }
    double two_m = 2.0 / m;
    for (int a = 0; a < m; a++) {
        const double *ko = K + (size_t) best[a] * n;
        for (int i = 0; i < n; i++) stat[i] -= ko[i] * two_m;
        int bi = 0;
        for (int i = 1; i < n; i++) if (stat[i] < stat[bi]) bi = i;
        best[a] = bi;
        const double *kb = K + (size_t) bi * n;
        for (int i = 0; i < n; i++) stat[i] += kb[i] * two_m;
        kb_tick(tick, 3.0 * n);
    }
}

/* .Call entry: K (n x n, n = 2^g m), g, delta, u (g n / 2 uniforms),
 * mu (the reference's mean embedding, length n, or NULL: the zero
 * measure), swap (TRUE/FALSE).  Returns list(coresets = m x 2^g integer
 * matrix of KT-SPLIT's coresets, index = the m selected rows), 1-based;
 * without swap, index is KT-SPLIT's first coreset; with g = 0 it is the
 * whole input (no swap). */
SEXP kb_kernel_thin(SEXP K_, SEXP g_, SEXP delta_, SEXP u_, SEXP mu_,
                    SEXP swap_)
{
    int n = kb_arg_square(K_, "K");
    int g = kb_scalar_int(g_, "g");
    double delta = kb_scalar_real(delta_, "delta");
    int swap = kb_scalar_flag(swap_, "swap");
    if (g < 0 || g > 30 || n < 1 || n % (1 << g) != 0)
        kb_error_class("kb_error_arg", _("'g' must give 2^g dividing nrow(K)"));
    if (!(delta > 0.0 && delta < 1.0))
        kb_error_class("kb_error_arg", _("'delta' must be in (0, 1)"));
    const double *u = kb_arg_vector(u_, "u", (R_xlen_t) g * (n / 2));
    const double *mu = Rf_isNull(mu_) ? NULL : kb_arg_vector(mu_, "mu", n);
    const double *K = REAL(K_);
    if (kb_first_nonfinite(K, XLENGTH(K_)) >= 0)
        kb_error_numeric(_("the kernel matrix has non-finite values"));
    int ncs = 1 << g, m = n / ncs;
    SEXP cs = PROTECT(Rf_allocMatrix(INTSXP, m, ncs));
    SEXP idx = PROTECT(Rf_allocVector(INTSXP, m));
    int *tmp = (int *) R_alloc(n, sizeof(int));
    int *c = INTEGER(cs), *b = INTEGER(idx);
    kb_ticker tick = KB_TICKER_INIT;   /* scratch is R_alloc'd: interrupts are safe */
    kt_split(K, n, NULL, g, delta, u, c, tmp, &tick);
    if (swap && g > 0) {   /* no rounds: the whole input, as goodpoints */
        double *stat = (double *) R_alloc(n, sizeof(double));
        kt_swap(K, n, NULL, c, ncs, m, mu, b, stat, &tick);
    } else {
        memcpy(b, c, (size_t) m * sizeof(int));
    }
    for (int i = 0; i < n; i++) c[i] += 1;
    for (int i = 0; i < m; i++) b[i] += 1;
    SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
    SEXP nm = PROTECT(Rf_allocVector(STRSXP, 2));
    SET_VECTOR_ELT(out, 0, cs);
    SET_VECTOR_ELT(out, 1, idx);
    SET_STRING_ELT(nm, 0, Rf_mkChar("coresets"));
    SET_STRING_ELT(nm, 1, Rf_mkChar("index"));
    Rf_setAttrib(out, R_NamesSymbol, nm);
    UNPROTECT(4);
    return out;
}

/* ---- Compress++ (Shetty, Dwivedi and Mackey, ICLR 2022) ----------------
 * The exact rules (bins, delta split, node halving with baseline, unique
 * swap and symmetrisation, the order in which uniforms are drawn) are
 * stated in ?kernel_thin and transcribed in plain R in
 * tests/testthat/test-compress.R.  Memory: the points, and one kernel
 * matrix of at most 2^(g+1) sqrt(N) points at a time. */

typedef struct {
    kb_kernel K;
    const double *X, *S;      /* N x d, column-major; S NULL: base kernel */
    int N, d, nt;
    double *T;                /* node kernel matrix, sorted node order */
    double *Xs, *Ss;          /* the node's points, sorted, column-major */
    int *rank, *ord;          /* node position -> sorted; sorted -> position */
    double *u, *mu, *stat;
    int *L, *R, *bl, *bc;
    double halve_prob;
    int swap;
    kb_ticker tick;
} cpp_ctx;

static int cpp_cmp(const void *a, const void *b)
{
    const int *x = (const int *) a, *y = (const int *) b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* The kernel matrix of the points S[0..s-1] (rows of X) in ascending row
 * order into c->T (s x s); rank[pos] is the sorted place of S[pos] and
 * ord[r] the position at sorted place r.  Ascending order makes every
 * entry the same number as in the kernel matrix of all rows (the Stein
 * kernel is evaluated with the later row as the row point). */
static void cpp_node_matrix(cpp_ctx *c, const int *S, int s)
{
    int *pr = (int *) R_alloc((size_t) 2 * s, sizeof(int));
    for (int p = 0; p < s; p++) { pr[2 * p] = S[p]; pr[2 * p + 1] = p; }
    qsort(pr, (size_t) s, 2 * sizeof(int), cpp_cmp);
    for (int r = 0; r < s; r++) {
        c->ord[r] = pr[2 * r + 1];
        c->rank[pr[2 * r + 1]] = r;
    }
    for (int k = 0; k < c->d; k++)
        for (int r = 0; r < s; r++) {
            c->Xs[(size_t) k * s + r] = c->X[(size_t) k * c->N + pr[2 * r]];
            if (c->S)
                c->Ss[(size_t) k * s + r] = c->S[(size_t) k * c->N + pr[2 * r]];
        }
    R_xlen_t bad = -1;
    if (c->S) {
        kb_points P = {c->Xs, c->Ss, s};
        bad = kb_stein_matrix_fill(&c->K, &P, s, c->nt, c->T);
    } else {   /* a base kernel is bounded: no check needed */
        kb_kernel_rows q = {&c->K, c->Xs, c->Xs, s, s, c->T, NULL};
        kb_kernel_rows_run(&q, c->nt);
    }
    if (bad >= 0)
        kb_error_numeric(_("the Stein kernel has non-finite values in Compress++ (check the scores)"));
    kb_tick(&c->tick, (double) s * s * KB_KERNEL_WORK(c->d));
}

/* mu[r] = mean of row r of the node matrix (= column r: symmetric). */
static void cpp_row_means(const cpp_ctx *c, int s, double *mu)
{
    for (int r = 0; r < s; r++) {
        const double *col = c->T + (size_t) r * s;
        double acc = 0.0;
        for (int p = 0; p < s; p++) acc += col[p];
        mu[r] = acc / s;
    }
}

/* Halve the s points S (rows of X) into out (s/2 rows).  All indices
 * inside are sorted places in the node matrix. */
static void cpp_halve(cpp_ctx *c, const int *S, int s, int *out)
{
    const void *vmax = vmaxget();
    cpp_node_matrix(c, S, s);
    const double *T = c->T;
    const int *rk = c->rank;
#define KP(a, b) T[(size_t) rk[a] * s + rk[b]]
    if (s == 4) {
        double u = unif_rand();
        double A = KP(1, 2) + KP(0, 3), B = KP(0, 1) + KP(2, 3),
            C = KP(0, 2) + KP(1, 3);
        int p0, p1;
        if (A < B) {
            if (A < C) { p0 = 0; p1 = 3; } else { p0 = 0; p1 = 2; }
        } else if (B < C) {
            p0 = 0; p1 = 1;
        } else {
            p0 = 0; p1 = 2;
        }
        if (!(u < 0.5)) {   /* the complementary pair */
            int q[2], k = 0;
            for (int p = 0; p < 4; p++) if (p != p0 && p != p1) q[k++] = p;
            p0 = q[0]; p1 = q[1];
        }
        out[0] = S[p0]; out[1] = S[p1];
        vmaxset(vmax);
        return;
    }
#undef KP
    int h = s / 2;
    for (int p = 0; p < h; p++) c->u[p] = unif_rand();
    double delta_h = c->halve_prob * (double) s * s;
    kt_halve(T, s, rk, s, 2.0 * log(2.0 * s / delta_h), c->u, c->L, c->R,
             &c->tick);
    int *core = c->L, *non = c->R;
    if (c->swap) {
        cpp_row_means(c, s, c->mu);
        for (int a = 0; a < h; a++) {
            c->bl[a] = rk[2 * a + 1];
            c->bc[a] = rk[2 * a];
        }
        if (!(kt_rel_mmd2(T, s, c->L, h, c->mu) <
              kt_rel_mmd2(T, s, c->bl, h, c->mu))) {
            core = c->bl; non = c->bc;
        }
        /* unique swap: stat[i] = K_ii / h + 2 (sum_core K_ic / h - mu_i) */
        double *st = c->stat, two_h = 2.0 / h;
        for (int i = 0; i < s; i++) {
            const double *ki = T + (size_t) i * s;
            double r = 0.0;
            for (int a = 0; a < h; a++) r += ki[core[a]];
            st[i] = ki[i] / h + 2.0 * (r / h - c->mu[i]);
        }
        for (int a = 0; a < h; a++) {
            int cur = core[a];
            const double *ko = T + (size_t) cur * s;
            for (int i = 0; i < s; i++) st[i] -= ko[i] * two_h;
            int bb = -1;
            double bv = st[cur];
            for (int b = 0; b < h; b++)
                if (st[non[b]] < bv) { bv = st[non[b]]; bb = b; }
            if (bb >= 0) {
                core[a] = non[bb];
                non[bb] = cur;
            }
            const double *kn = T + (size_t) core[a] * s;
            for (int i = 0; i < s; i++) st[i] += kn[i] * two_h;
        }
        kb_tick(&c->tick, 4.0 * (double) s * h);
    }
    const int *pick = unif_rand() > 0.5 ? non : core;
    for (int a = 0; a < h; a++) out[a] = S[c->ord[pick[a]]];
    vmaxset(vmax);
}

/* Compress(g) of the s rows S into out (2^g sqrt(s) rows); base = 4^(g+1). */
static void cpp_compress(cpp_ctx *c, const int *S, int s, int base, int *out)
{
    if (s == base) {
        cpp_halve(c, S, s, out);
        return;
    }
    int q = s / 4, oq = 0;
    /* output of a quarter: 2^g sqrt(q) = half of this node's halving input */
    int hin = 2 * (int) lround(sqrt((double) base / 4.0) * sqrt((double) s));
    oq = hin / 4;
    int *D = (int *) R_alloc((size_t) hin, sizeof(int));
    for (int k = 0; k < 4; k++)
        cpp_compress(c, S + (size_t) k * q, q, base, D + (size_t) k * oq);
    cpp_halve(c, D, hin, out);
}

/* .Call entry: x (N x d, N = 2^k, in the kernel's coordinates), s (N x d
 * scores, or NULL: the base kernel), kern, ctl = list(g (oversampling),
 * r (extra final rounds: m = 2^floor(k/2) / 2^r), delta, swap, nthreads);
 * nb = 4 bins (k even) or 8 (k odd) of N / nb rows, at least 4^(g+1) each.
 * Returns list(compress = the rows kept by Compress, index = the m
 * selected rows), 1-based. */
SEXP kb_compresspp(SEXP x_, SEXP s_, SEXP kern, SEXP ctl)
{
    cpp_ctx c;
    memset(&c, 0, sizeof c);
    int N, d;
    if (Rf_isNull(s_)) {
        N = kb_arg_matrix(x_, "x", -1, -1);
        d = Rf_ncols(x_);
    } else {
        kb_arg_points(x_, s_, "x", "score", &N, &d);
        c.S = REAL(s_);
    }
    int g = kb_scalar_int(kb_list_elt(ctl, "g"), "oversample");
    int r = kb_scalar_int(kb_list_elt(ctl, "r"), "r");
    double delta = kb_scalar_real(kb_list_elt(ctl, "delta"), "delta");
    c.swap = kb_scalar_flag(kb_list_elt(ctl, "swap"), "swap");
    c.nt = kb_nthreads(kb_list_elt(ctl, "nthreads"));
    int k = 0;
    while (k < 30 && (1 << k) < N) k++;
    int nb = k % 2 ? 8 : 4, bin = N >> (k % 2 ? 3 : 2);
    long base = g >= 0 && g <= 12 ? 1L << (2 * (g + 1)) : 0;
    if ((1 << k) != N || base == 0 || bin < base || r < 0 || r > k / 2)
        kb_error_class("kb_error_arg", _("Compress++ needs N = 2^k rows with N / bins >= 4^(oversample + 1)"));
    if (!(delta > 0.0 && delta < 1.0))
        kb_error_class("kb_error_arg", _("'delta' must be in (0, 1)"));
    kb_kernel_from_sexp(kern, d, &c.K);
    c.X = REAL(x_); c.N = N; c.d = d;
    double hh = g + log2((double) nb) / 2.0, ls = k / 2.0;
    double thin_frac = hh / (hh + pow(2.0, hh) * (ls - hh));
    double delta_t = delta * thin_frac, delta_c = delta * (1.0 - thin_frac);
    c.halve_prob = delta_c / base / (log2((double) bin) / 2.0 - g) / N;
    int bout = (1 << g) * (int) lround(sqrt((double) bin));  /* per bin */
    int M = nb * bout, m = (1 << (k / 2)) >> r, gf = 0;
    while ((m << gf) < M) gf++;
    int smax = M;
    c.T = (double *) R_alloc((size_t) smax * smax, sizeof(double));
    c.Xs = (double *) R_alloc((size_t) smax * d, sizeof(double));
    c.Ss = c.S ? (double *) R_alloc((size_t) smax * d, sizeof(double)) : NULL;
    c.rank = (int *) R_alloc(smax, sizeof(int));
    c.ord = (int *) R_alloc(smax, sizeof(int));
    c.u = (double *) R_alloc(smax, sizeof(double));
    c.mu = (double *) R_alloc(smax, sizeof(double));
    c.stat = (double *) R_alloc(smax, sizeof(double));
    c.L = (int *) R_alloc(smax, sizeof(int));
    c.R = (int *) R_alloc(smax, sizeof(int));
    c.bl = (int *) R_alloc(smax, sizeof(int));
    c.bc = (int *) R_alloc(smax, sizeof(int));
    int *rows = (int *) R_alloc(N, sizeof(int));
    for (int i = 0; i < N; i++) rows[i] = i;
    SEXP cs = PROTECT(Rf_allocVector(INTSXP, M));
    int *C = INTEGER(cs);
    GetRNGstate();
    for (int b = 0; b < nb; b++)
        cpp_compress(&c, rows + (size_t) b * bin, bin, (int) base,
                     C + (size_t) b * bout);
    /* final thin of C: gf rounds of KT-SPLIT, then KT-SWAP */
    cpp_node_matrix(&c, C, M);
    double *u = (double *) R_alloc((size_t) gf * (M / 2), sizeof(double));
    for (R_xlen_t i = 0; i < (R_xlen_t) gf * (M / 2); i++) u[i] = unif_rand();
    PutRNGstate();
    int *split = (int *) R_alloc((size_t) M, sizeof(int));
    int *tmp = (int *) R_alloc((size_t) M, sizeof(int));
    kt_split(c.T, M, c.rank, gf, delta_t, u, split, tmp, &c.tick);
    SEXP idx = PROTECT(Rf_allocVector(INTSXP, m));
    int *b = INTEGER(idx);
    if (c.swap) {
        double *mu = NULL;
        if (!c.S) {
            mu = (double *) R_alloc(M, sizeof(double));
            cpp_row_means(&c, M, mu);
        }
        kt_swap(c.T, M, c.rank, split, 1 << gf, m, mu, b, c.stat, &c.tick);
    } else {
        memcpy(b, split, (size_t) m * sizeof(int));
    }
    for (int a = 0; a < m; a++) b[a] = C[c.ord[b[a]]] + 1;
    for (int i = 0; i < M; i++) C[i] += 1;
    const char *nms[] = {"compress", "index", ""};
    SEXP out = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(out, 0, cs);
    SET_VECTOR_ELT(out, 1, idx);
    UNPROTECT(3);
    return out;
}
