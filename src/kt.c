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

/* KT-SPLIT: g halving rounds of the n = 2^g m points 0..n-1.  `out`
 * (n ints) holds the 2^g coresets of m points one after another; `tmp`
 * is scratch of n ints.  delta: the failure probability; the threshold
 * of round j uses 2 log(2 n g / (delta 2^j)) (reference implementation). */
static void kt_split(const double *K, int n, int g, double delta,
                     const double *u, int *out, int *tmp, kb_ticker *tick)
{
    for (int i = 0; i < n; i++) out[i] = i;
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
 * (n/m)-th point, ending with the last) and the 2^g coresets (first on
 * ties), then each point in turn replaced by the input point that
 * minimises the MMD (repeats allowed; first index on ties).  best: m ints
 * out; stat: n doubles scratch. */
static void kt_swap(const double *K, int n, const int *cs, int ncs, int m,
                    const double *mu, int *best, double *stat,
                    kb_ticker *tick)
{
    int step = n / m;
    for (int a = 0; a < m; a++) best[a] = n - 1 - (m - 1 - a) * step;
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
    kt_split(K, n, g, delta, u, c, tmp, &tick);
    if (swap && g > 0) {   /* no rounds: the whole input, as goodpoints */
        double *stat = (double *) R_alloc(n, sizeof(double));
        kt_swap(K, n, c, ncs, m, mu, b, stat, &tick);
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
