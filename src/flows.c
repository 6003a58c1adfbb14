/* Particle flows (DESIGN.md, "Particle flows"): the O(n^2 d) interaction
 * terms of SVGD, KSD descent, the MMD / DrMMD witnesses and MIED.  The
 * iteration loops live in R (R/flows.R); each entry point here is one
 * evaluation at the current particles, threaded over particles.
 * Kernels reaching the kernel-layer entries are isotropic: L = lam I. */
#include <limits.h>
#include <math.h>
#include <R_ext/Utils.h>      /* R_rsort */
#include "kernels.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static void check_points(SEXP x, const char *what)
{
    if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x))
        Rf_error(_("'%s' must be a numeric matrix"), what);
}

static void check_same_dim(SEXP a, SEXP b, const char *what)
{
    check_points(b, what);
    if (Rf_nrows(a) != Rf_nrows(b) || Rf_ncols(a) != Rf_ncols(b))
        Rf_error(_("'%s' must have the dimensions of the particles"), what);
}

/* Interrupts: R_CheckUserInterrupt() may not be called inside a parallel
 * region, so the O(n^2) loops run in chunks of about KB_CHUNK_WORK units
 * (one unit: one coordinate of one pair, about 1-2 ns; a chunk takes about
 * 0.05-0.1 s on one core) with a check between chunks, and one at entry for
 * an interrupt that arrived while R code (a score closure) ran. */
#define KB_CHUNK_WORK 5e7

/* End of the chunk of rows starting at i0 (and before end) when row i
 * costs per_row units. */
static R_xlen_t chunk_end(R_xlen_t i0, R_xlen_t end, double per_row)
{
    double c = KB_CHUNK_WORK / (per_row > 1.0 ? per_row : 1.0);
    R_xlen_t m = c < 1.0 ? 1 : c > (double) (end - i0) ? end - i0 : (R_xlen_t) c;
    return i0 + m;
}

/* The same for the rows of the strict upper triangle of an n x n pair
 * matrix, row i holding n - 1 - i pairs of per_pair units. */
static R_xlen_t tri_chunk_end(R_xlen_t i0, R_xlen_t end, R_xlen_t n,
                              double per_pair)
{
    double w = 0.0;
    R_xlen_t i = i0;
    while (i < end && w < KB_CHUNK_WORK) {
        w += (double) (n - 1 - i) * per_pair + 1.0;
        i++;
    }
    return i;
}

/* ---- SVGD ------------------------------------------------------------- */

#define SVGD_TILE 64

/* Row-packed strict upper triangle of the squared distances: row i holds
 * j = i+1..n-1 from offset i n - i (i + 1) / 2. */
static inline size_t pk_off(R_xlen_t i, R_xlen_t n)
{
    return (size_t) i * n - (size_t) i * (i + 1) / 2;
}

/* The q-th smallest (0-based) of v[0..m-1] by quickselect (Hoare
 * partition, median-of-three pivot); reorders v so that v[q] is in place
 * and everything after it is >= v[q].  No NaN here. */
static double pick_rank(double *v, R_xlen_t m, R_xlen_t q)
{
    R_xlen_t lo = 0, hi = m - 1;
    while (hi > lo) {
        R_xlen_t mid = lo + (hi - lo) / 2;
        double a = v[lo], b = v[mid], c = v[hi], piv;
        piv = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
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

/* Squared distances of row i to the columns j0..j0+m-1 of column-major X
 * (n rows, d columns). */
static inline void sq_dist_row(const double *X, R_xlen_t n, int d, R_xlen_t i,
                               R_xlen_t j0, int m, double *out)
{
    for (int t = 0; t < m; t++)
        out[t] = 0.0;
    for (int k = 0; k < d; k++) {
        const double *xk = X + (size_t) k * n;
        double xik = xk[i];
        const double *xj = xk + j0;
#ifdef _OPENMP
#pragma omp simd
#endif
        for (int t = 0; t < m; t++) {
            double u = xik - xj[t];
            out[t] += u * u;
        }
    }
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

/* Fill P (row-packed pair distances) and return the median of all n^2
 * squared distances.  The two middle order statistics are bracketed by
 * order statistics of a sample of pairs; the packing pass counts the
 * values below the bracket and collects those inside it (per thread), and
 * a quickselect inside the bracket finishes.  If the bracket misses, a
 * quickselect on a copy of P gives the same exact answer. */
static double svgd_median(const double *X, R_xlen_t n, int d, double *P,
                          int nt, int par)
{
    R_xlen_t N = n * (n - 1) / 2, q[2];
    median_ranks(n, q);
    R_xlen_t ms = N < 16384 ? N : 16384;
    double *smp = (double *) R_alloc((size_t) ms, sizeof(double));
    /* pairs from a fixed xorshift stream (R's RNG is left alone) */
    unsigned long long st = 0x9E3779B97F4A7C15ULL;
    for (R_xlen_t t = 0; t < ms; t++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        R_xlen_t i = (R_xlen_t) ((st >> 11) % (unsigned long long) n);
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        R_xlen_t j = (R_xlen_t) ((st >> 11) % (unsigned long long) n);
        if (j == i)
            j = (j + 1) % n;
        double acc = 0.0;
        for (int k = 0; k < d; k++) {
            double u = X[i + (size_t) k * n] - X[j + (size_t) k * n];
            acc += u * u;
        }
        smp[t] = acc;
    }
    R_xlen_t qa = q[0] < 0 ? q[1] : q[0];
    double lo = R_NegInf, hi = R_PosInf;
    if (qa >= 0) {
        double pos = (double) qa / N * ms, del = 3.0 * sqrt((double) ms) + 16.0;
        R_xlen_t a = (R_xlen_t) (pos - del), b = (R_xlen_t) (pos + del) + 1;
        if (a > 0)
            lo = pick_rank(smp, ms, a);
        if (b < ms - 1)
            hi = a > 0 ? pick_rank(smp + a, ms - a, b - a) : pick_rank(smp, ms, b);
    }
    R_xlen_t cap = N / 8 / nt + 1024;
    double *buf = (double *) R_alloc((size_t) nt * (cap + 1), sizeof(double));
    R_xlen_t *below = (R_xlen_t *) R_alloc((size_t) nt * 3, sizeof(R_xlen_t)),
        *nb = below + nt, *over = nb + nt;
    for (int t = 0; t < nt; t++)
        below[t] = nb[t] = over[t] = 0;
    for (R_xlen_t c0 = 0; c0 < n - 1; ) {
        R_xlen_t c1 = tri_chunk_end(c0, n - 1, n, d + 4.0);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 8) if (par)
#endif
        for (R_xlen_t i = c0; i < c1; i++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *row = P + pk_off(i, n), *bt = buf + (size_t) tid * (cap + 1);
            int m = (int) (n - 1 - i);
            sq_dist_row(X, n, d, i, i + 1, m, row);
            R_xlen_t bl = below[tid], k = nb[tid];
            for (int t = 0; t < m; t++) {
                double v = row[t];
                bl += v < lo;
                bt[k] = v;             /* slot cap is the spare one */
                k += (v >= lo) & (v <= hi);
                if (k == cap) {
                    over[tid] = 1;
                    k = cap - 1;
                }
            }
            below[tid] = bl;
            nb[tid] = k;
        }
        R_CheckUserInterrupt();
        c0 = c1;
    }
    if (qa < 0)
        return 0.0;
    R_xlen_t bl = 0, tot = 0;
    int overflow = 0;
    for (int t = 0; t < nt; t++) {
        bl += below[t];
        overflow |= (int) over[t];
        if (t > 0)
            memmove(buf + tot, buf + (size_t) t * (cap + 1),
                    (size_t) nb[t] * sizeof(double));
        tot += nb[t];
    }
    double v0, v1;
    double *w;
    R_xlen_t off, m;
    if (!overflow && bl <= qa && q[1] < bl + tot) {
        w = buf;
        off = bl;
        m = tot;
    } else {
        w = (double *) R_alloc((size_t) N, sizeof(double));
        memcpy(w, P, (size_t) N * sizeof(double));
        off = 0;
        m = N;
    }
    v0 = pick_rank(w, m, qa - off);
    if (q[1] == qa) {
        v1 = v0;
    } else {
        double mn = R_PosInf;   /* the smallest after the partition point */
        for (R_xlen_t t = qa - off + 1; t < m; t++)
            if (w[t] < mn)
                mn = w[t];
        v1 = mn;
    }
    if (q[0] < 0)
        v0 = 0.0;
    return 0.5 * (v0 + v1);
}

/* .Call entry: one SVGD direction.  x, s: n x d particles and scores; h:
 * the bandwidth, or a non-positive value for the median heuristic h^2 =
 * 0.5 med / log(n + 1).  Returns list(phi, h, ksd2):
 * phi = (K S + rep) / n, rep_i = sum_j grad_{x_j} k(x_j, x_i), and the
 * V-statistic KSD^2 of the particles with the same Gaussian kernel.
 * ws: a double vector of length n (n - 1) / 2 the distances may be written
 * to (a workspace the R caller allocates once), or NULL.
 * The n^2 pairs are visited in tiles of the upper triangle, each kernel
 * value computed once and added to both of its rows (per-thread sums);
 * memory: 4 n^2 bytes for the distances when the median is needed. */
SEXP kb_svgd_phi(SEXP x, SEXP s, SEXP h_, SEXP ws, SEXP nthreads)
{
    check_points(x, "x");
    check_same_dim(x, s, "score");
    R_xlen_t n = Rf_nrows(x);
    int d = Rf_ncols(x), nt = kb_nthreads(nthreads);
    double h = kb_scalar_real(h_, "h");
    if (n < 2 || (!(h > 0.0) && n * (n - 1) / 2 > INT_MAX))
        Rf_error(_("SVGD needs at least 2 particles, and at most 65536 with "
                   "the median bandwidth"));
    R_CheckUserInterrupt();
    const double *X = REAL(x), *S = REAL(s);
    R_xlen_t N = n * (n - 1) / 2;
    int par = (double) N * (d + 4) >= KB_PAR_MIN_EVALS * 8;
    double *P = NULL;
    if (!(h > 0.0)) {
        /* the caller's workspace (kept across iterations: no fresh pages) */
        if (TYPEOF(ws) == REALSXP && XLENGTH(ws) == N)
            P = REAL(ws);
        else
            P = (double *) R_alloc((size_t) N, sizeof(double));
        double med = svgd_median(X, n, d, P, nt, par);
        h = sqrt(0.5 * med / log((double) n + 1.0));
        if (!(h > 0.0))
            kb_error_numeric(_("the median heuristic gives a zero bandwidth: "
                               "the particles coincide; give a numeric "
                               "'bandwidth'"));
    }
    double h2 = h * h, c = -0.5 / h2, a = d / h2, b = 1.0 / (h2 * h2);
    if (!(h2 > 0.0) || !R_FINITE(h2) || !R_FINITE(b))
        kb_error_numeric(_("the SVGD kernel bandwidth %g is out of range (its "
                           "square or 1 / h^4 is not a finite positive "
                           "number): the particles' scale is the cause; "
                           "rescale the problem"), h);
    /* per-thread sums: rs (n), KS (d x n), KX (d x n) */
    size_t nacc = (size_t) n * (2 * d + 1);
    double *acc = (double *) R_alloc(nacc * nt, sizeof(double));
    double *tbuf = (double *) R_alloc((size_t) nt * 2 * SVGD_TILE, sizeof(double));
    memset(acc, 0, nacc * nt * sizeof(double));
    R_xlen_t T = (n + SVGD_TILE - 1) / SVGD_TILE, ntile = T * (T + 1) / 2;
    double tr_sum = 0.0;
    for (R_xlen_t c0 = 0; c0 < ntile; ) {
        R_xlen_t c1 = chunk_end(c0, ntile, (double) SVGD_TILE * SVGD_TILE * (2.0 * d + 4.0));
        double tr_chunk = 0.0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (par) \
        reduction(+:tr_chunk)
#endif
        for (R_xlen_t tile = c0; tile < c1; tile++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            /* tile -> (I, J), I <= J, row-major over the upper triangle */
            R_xlen_t I = 0, rem = tile;
            while (rem >= T - I) {
                rem -= T - I;
                I++;
            }
            R_xlen_t J = I + rem;
            R_xlen_t i0 = I * SVGD_TILE, i1 = i0 + SVGD_TILE < n ? i0 + SVGD_TILE : n,
                j0 = J * SVGD_TILE, j1 = j0 + SVGD_TILE < n ? j0 + SVGD_TILE : n;
            int m = (int) (j1 - j0);
            double *rs = acc + nacc * tid, *KS = rs + n, *KX = KS + (size_t) d * n;
            double *d2 = tbuf + (size_t) tid * 2 * SVGD_TILE, *kv = d2 + SVGD_TILE;
            double trl = 0.0;
            for (R_xlen_t i = i0; i < i1; i++) {
                if (I != J) {
                    if (P)
                        memcpy(d2, P + pk_off(i, n) + (j0 - i - 1), (size_t) m * sizeof(double));
                    else
                        sq_dist_row(X, n, d, i, j0, m, d2);
                } else {
                    if (P) {
                        for (int t = 0; t < m; t++) {
                            R_xlen_t j = j0 + t;
                            d2[t] = j > i ? P[pk_off(i, n) + (j - i - 1)] :
                                j < i ? P[pk_off(j, n) + (i - j - 1)] : 0.0;
                        }
                    } else {
                        sq_dist_row(X, n, d, i, j0, m, d2);
                    }
                }
                double ksum = 0.0, tacc = 0.0;
                for (int t = 0; t < m; t++) {
                    double k = exp(c * d2[t]);
                    kv[t] = k;
                    ksum += k;
                    tacc += k * (a - b * d2[t]);
                }
                rs[i] += ksum;
                if (I != J) {
                    trl += 2.0 * tacc;
                    double *rsj = rs + j0;
                    for (int t = 0; t < m; t++)
                        rsj[t] += kv[t];
                } else {
                    trl += tacc;
                }
                for (int k = 0; k < d; k++) {
                    const double *sk = S + (size_t) k * n, *xk = X + (size_t) k * n;
                    const double *sj = sk + j0, *xj = xk + j0;
                    double as = 0.0, ax = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+:as, ax)
#endif
                    for (int t = 0; t < m; t++) {
                        as += kv[t] * sj[t];
                        ax += kv[t] * xj[t];
                    }
                    KS[(size_t) k * n + i] += as;
                    KX[(size_t) k * n + i] += ax;
                    if (I != J) {
                        double sik = sk[i], xik = xk[i];
                        double *KSj = KS + (size_t) k * n + j0,
                            *KXj = KX + (size_t) k * n + j0;
#ifdef _OPENMP
#pragma omp simd
#endif
                        for (int t = 0; t < m; t++) {
                            KSj[t] += kv[t] * sik;
                            KXj[t] += kv[t] * xik;
                        }
                    }
                }
            }
            tr_chunk += trl;
        }
        tr_sum += tr_chunk;
        R_CheckUserInterrupt();
        c0 = c1;
    }
    for (int th = 1; th < nt; th++) {
        const double *src = acc + nacc * th;
        for (size_t t = 0; t < nacc; t++)
            acc[t] += src[t];
    }
    const double *rs = acc, *KS = acc + n, *KX = KS + (size_t) d * n;
    const char *nms[] = {"phi", "h", "ksd2", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP phi_ = Rf_allocMatrix(REALSXP, (int) n, d);
    SET_VECTOR_ELT(ans, 0, phi_);
    double *phi = REAL(phi_), ss = 0.0;
    for (int k = 0; k < d; k++) {
        const double *sk = S + (size_t) k * n, *xk = X + (size_t) k * n,
            *ksk = KS + (size_t) k * n, *kxk = KX + (size_t) k * n;
        double *pk = phi + (size_t) k * n;
        for (R_xlen_t i = 0; i < n; i++) {
            double rep = (xk[i] * rs[i] - kxk[i]) / h2;
            ss += sk[i] * (ksk[i] + 2.0 * rep);
            pk[i] = (ksk[i] + rep) / (double) n;
        }
    }
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(h));
    SET_VECTOR_ELT(ans, 2, Rf_ScalarReal((ss + tr_sum) / ((double) n * n)));
    UNPROTECT(1);
    return ans;
}

/* ---- kernel sums and their gradients (MMD / DrMMD witnesses) ---------- */

/* .Call entry: for each row z_i of z, sum_j w_j k(z_i, x_j) and its
 * gradient in z_i, sum_j w_j 2 phi'(r_ij) lam (z_i - x_j), for an
 * isotropic kernel.  Returns list(value, grad). */
SEXP kb_cross_kernel(SEXP z, SEXP x, SEXP w, SEXP kern, SEXP nthreads)
{
    check_points(z, "z");
    check_points(x, "x");
    if (Rf_ncols(z) != Rf_ncols(x) || TYPEOF(w) != REALSXP ||
        XLENGTH(w) != Rf_nrows(x))
        Rf_error(_("kernel sums: dimensions do not match"));
    int nz = Rf_nrows(z), nx = Rf_nrows(x), d = Rf_ncols(z),
        nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    if (!K.iso)
        KB_INTERNAL("flows need an isotropic kernel");
    double lam = K.lam[0];
    const double *Z = REAL(z), *X = REAL(x), *W = REAL(w);
    const char *nms[] = {"value", "grad", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP val_ = Rf_allocVector(REALSXP, nz);
    SET_VECTOR_ELT(ans, 0, val_);
    SEXP grad_ = Rf_allocMatrix(REALSXP, nz, d);
    SET_VECTOR_ELT(ans, 1, grad_);
    double *val = REAL(val_), *grad = REAL(grad_);
    size_t per = (size_t) 4 * KB_BLOCK + 2 * (size_t) d;
    double *scratch = (double *) R_alloc(per * nt, sizeof(double));
    int par = (double) nz * nx * (d + 4) >= KB_PAR_MIN_EVALS * 8;
    R_CheckUserInterrupt();
    for (int c0 = 0; c0 < nz; ) {
        int c1 = (int) chunk_end(c0, nz, (double) nx * (d + 4));
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
#endif
        for (int i = c0; i < c1; i++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *r = scratch + per * tid, *p0 = r + KB_BLOCK,
                *p1 = p0 + KB_BLOCK, *p2 = p1 + KB_BLOCK, *zi = p2 + KB_BLOCK,
                *g = zi + d;
            for (int k = 0; k < d; k++) {
                zi[k] = Z[i + (size_t) k * nz];
                g[k] = 0.0;
            }
            double v = 0.0;
            for (int j0 = 0; j0 < nx; j0 += KB_BLOCK) {
                int m = nx - j0 < KB_BLOCK ? nx - j0 : KB_BLOCK;
                kb_dist_block(&K, zi, X, nx, j0, m, r);
                kb_phi_block(&K, m, r, p0, p1, p2);
                double c1 = 0.0;
                for (int t = 0; t < m; t++) {
                    v += W[j0 + t] * p0[t];
                    p1[t] *= 2.0 * lam * W[j0 + t];
                    c1 += p1[t];
                }
                for (int k = 0; k < d; k++) {
                    const double *xk = X + (size_t) k * nx + j0;
                    double acc = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+:acc)
#endif
                    for (int t = 0; t < m; t++)
                        acc += p1[t] * xk[t];
                    g[k] += zi[k] * c1 - acc;
                }
            }
            val[i] = v;
            for (int k = 0; k < d; k++)
                grad[i + (size_t) k * nz] = g[k];
        }
        R_CheckUserInterrupt();
        c0 = c1;
    }
    UNPROTECT(1);
    return ans;
}

/* ---- KSD descent ------------------------------------------------------- */

/* .Call entry: KSD^2 (V-statistic) of particles x with scores s for an
 * isotropic kernel k = phi(lam |x - y|^2), and the two parts of its
 * gradient: pos (score held fixed) and v, such that
 * d KSD^2 / d x_i = pos_i + J_i' v_i with J_i the score's Jacobian at x_i.
 * With z = x_i - x_j, r0 = |z|^2 and A = lam I:
 *   u = phi s_i.s_j + 2 lam phi' (s_j - s_i).z - 4 lam^2 phi'' r0 - 2 d lam phi'
 *   d u / d x_i (s fixed) = c1 z + c2 (s_j - s_i), c2 = 2 lam phi',
 *   c1 = 2 lam phi' s_i.s_j + 4 lam^2 phi'' (s_j - s_i).z
 *        - 8 lam^3 phi''' r0 - (8 + 4 d) lam^2 phi''
 *   d u / d s_i = phi s_j - 2 lam phi' z
 * and both sums over j are scaled by 2 / n^2 (u is symmetric). */
SEXP kb_ksd_grad(SEXP x, SEXP s, SEXP kern, SEXP nthreads)
{
    check_points(x, "x");
    check_same_dim(x, s, "score");
    int n = Rf_nrows(x), d = Rf_ncols(x), nt = kb_nthreads(nthreads);
    kb_kernel K;
    kb_kernel_from_sexp(kern, d, &K);
    if (!K.iso)
        KB_INTERNAL("flows need an isotropic kernel");
    double lam = K.lam[0];
    const double *X = REAL(x), *S = REAL(s);
    const char *nms[] = {"value", "pos", "v", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP pos_ = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 1, pos_);
    SEXP v_ = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 2, v_);
    double *pos = REAL(pos_), *V = REAL(v_);
    size_t per = (size_t) 8 * KB_BLOCK + 4 * (size_t) d;
    double *scratch = (double *) R_alloc(per * nt, sizeof(double));
    double total = 0.0, scale = 2.0 / ((double) n * n);
    int par = (double) n * n * (3 * d + 8) >= KB_PAR_MIN_EVALS * 8;
    R_CheckUserInterrupt();
    for (int c0 = 0; c0 < n; ) {
        int c1 = (int) chunk_end(c0, n, (double) n * (3 * d + 8));
        double tchunk = 0.0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par) \
        reduction(+:tchunk)
#endif
        for (int i = c0; i < c1; i++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *r = scratch + per * tid, *p0 = r + KB_BLOCK,
                *p1 = p0 + KB_BLOCK, *p2 = p1 + KB_BLOCK, *ss = p2 + KB_BLOCK,
                *sz = ss + KB_BLOCK, *c1 = sz + KB_BLOCK, *c2 = c1 + KB_BLOCK,
                *xi = c2 + KB_BLOCK, *si = xi + d, *gp = si + d, *gv = gp + d;
            for (int k = 0; k < d; k++) {
                xi[k] = X[i + (size_t) k * n];
                si[k] = S[i + (size_t) k * n];
                gp[k] = gv[k] = 0.0;
            }
            double urow = 0.0;
            for (int j0 = 0; j0 < n; j0 += KB_BLOCK) {
                int m = n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK;
                kb_dist_block(&K, xi, X, n, j0, m, r);
                kb_phi_block(&K, m, r, p0, p1, p2);
                /* ss = s_i.s_j, sz = (s_j - s_i).z, z = x_i - x_j */
                for (int t = 0; t < m; t++)
                    ss[t] = sz[t] = 0.0;
                for (int k = 0; k < d; k++) {
                    const double *xk = X + (size_t) k * n + j0,
                        *sk = S + (size_t) k * n + j0;
                    double xik = xi[k], sik = si[k];
#ifdef _OPENMP
#pragma omp simd
#endif
                    for (int t = 0; t < m; t++) {
                        ss[t] += sik * sk[t];
                        sz[t] += (sk[t] - sik) * (xik - xk[t]);
                    }
                }
                double sc1 = 0.0, sc2 = 0.0;
                for (int t = 0; t < m; t++) {
                    double r0 = r[t] / lam, f1 = p1[t], f2 = p2[t], f3;
                    /* phi''' from phi'': IMQ (beta - 2) / (c + r), Gaussian -1/2 */
                    if (K.type == KB_IMQ)
                        f3 = f2 * (K.beta - 2.0) / (K.c + r[t]);
                    else
                        f3 = -0.5 * f2;
                    urow += p0[t] * ss[t] + 2.0 * lam * f1 * sz[t] -
                        4.0 * lam * lam * f2 * r0 - 2.0 * d * lam * f1;
                    c1[t] = 2.0 * lam * f1 * ss[t] + 4.0 * lam * lam * f2 * sz[t] -
                        8.0 * lam * lam * lam * f3 * r0 -
                        (8.0 + 4.0 * d) * lam * lam * f2;
                    c2[t] = 2.0 * lam * f1;
                    sc1 += c1[t];
                    sc2 += c2[t];
                }
                for (int k = 0; k < d; k++) {
                    const double *xk = X + (size_t) k * n + j0,
                        *sk = S + (size_t) k * n + j0;
                    double a1 = 0.0, a2 = 0.0, a3 = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+:a1, a2, a3)
#endif
                    for (int t = 0; t < m; t++) {
                        a1 += c1[t] * xk[t];
                        a2 += c2[t] * sk[t];
                        a3 += p0[t] * sk[t];
                    }
                    /* sum_j c1 z = x_i sum c1 - sum c1 x_j;
                     * sum_j c2 (s_j - s_i) = sum c2 s_j - s_i sum c2;
                     * v: sum_j phi s_j - (x_i sum c2 - sum c2 x_j) */
                    gp[k] += xi[k] * sc1 - a1 + a2 - si[k] * sc2;
                    double a4 = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+:a4)
#endif
                    for (int t = 0; t < m; t++)
                        a4 += c2[t] * xk[t];
                    gv[k] += a3 - (xi[k] * sc2 - a4);   /* -2 lam phi' z = -c2 z */
                }
            }
            tchunk += urow;
            for (int k = 0; k < d; k++) {
                pos[i + (size_t) k * n] = scale * gp[k];
                V[i + (size_t) k * n] = scale * gv[k];
            }
        }
        total += tchunk;
        R_CheckUserInterrupt();
        c0 = c1;
    }
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(total / ((double) n * n)));
    UNPROTECT(1);
    return ans;
}

/* ---- MIED (Riesz mollifier) ------------------------------------------ */

/* .Call entry: log energy and its gradient.  x: n x d particles, V: -log
 * density (length n), s: scores; sexp, eps: the Riesz exponent and
 * mollifier scale.  Over pairs i != j:
 *   w_ij = (|x_i - x_j|^2 + eps^2)^(-sexp / 2) exp((V_i + V_j) / 2)
 *        = phi_eps(x_i - x_j) (p(x_i) p(x_j))^(-1/2),
 *   value = log(sum w / n^2),
 *   grad_i = 2 sum_j w_ij [-sexp (x_i - x_j) / (|x_i - x_j|^2 + eps^2)
 *            - s_i / 2] / sum w. */
SEXP kb_mied_grad(SEXP x, SEXP V_, SEXP s, SEXP sexp_, SEXP eps_,
                  SEXP nthreads)
{
    check_points(x, "x");
    check_same_dim(x, s, "score");
    int n = Rf_nrows(x), d = Rf_ncols(x), nt = kb_nthreads(nthreads);
    if (TYPEOF(V_) != REALSXP || XLENGTH(V_) != n)
        Rf_error(_("MIED: one log density per particle expected"));
    if (n < 2)
        Rf_error(_("MIED needs at least 2 particles"));
    double se = kb_scalar_real(sexp_, "s"), e2 = kb_scalar_real(eps_, "eps");
    e2 *= e2;
    const double *X = REAL(x), *S = REAL(s), *V = REAL(V_);
    int par = (double) n * n * (d + 4) >= KB_PAR_MIN_EVALS * 8;
    double *rowmax = (double *) R_alloc((size_t) n, sizeof(double));
    double *scratch = (double *) R_alloc((size_t) nt * (2 * KB_BLOCK + d),
                                         sizeof(double));
    /* pass 1: the largest log weight, for a stable sum */
    R_CheckUserInterrupt();
    for (int c0 = 0; c0 < n; ) {
        int c1 = (int) chunk_end(c0, n, (double) n * (d + 4));
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
#endif
        for (int i = c0; i < c1; i++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *r = scratch + (size_t) tid * (2 * KB_BLOCK + d);
            double mx = R_NegInf;
            for (int j0 = 0; j0 < n; j0 += KB_BLOCK) {
                int m = n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK;
                sq_dist_row(X, n, d, i, j0, m, r);
                for (int t = 0; t < m; t++) {
                    if (j0 + t == i)
                        continue;
                    double lw = -0.5 * se * log(r[t] + e2) + 0.5 * V[i] + 0.5 * V[j0 + t];
                    if (lw > mx)
                        mx = lw;
                }
            }
            rowmax[i] = mx;
        }
        R_CheckUserInterrupt();
        c0 = c1;
    }
    double M = R_NegInf;
    for (int i = 0; i < n; i++)
        if (rowmax[i] > M)
            M = rowmax[i];
    if (M == R_PosInf) {
        /* a zero distance with eps = 0 (the log densities are finite) */
        int a = 0, b = 0;
        for (int i = 0; i < n && !b; i++) {
            if (rowmax[i] != R_PosInf)
                continue;
            for (int j = 0; j < n; j++) {
                double r2 = 0.0;
                for (int k = 0; k < d; k++) {
                    double u = X[i + (size_t) k * n] - X[j + (size_t) k * n];
                    r2 += u * u;
                }
                if (j != i && r2 == 0.0) {
                    a = i + 1;
                    b = j + 1;
                    break;
                }
            }
        }
        kb_error_numeric(_("MIED: particles %d and %d coincide and 'eps' is "
                           "0, so the energy is infinite; give eps > 0 or "
                           "distinct particles"), a, b);
    }
    if (!R_FINITE(M))
        kb_error_numeric(_("MIED: the energy is not finite: the squared "
                           "distances between particles overflow or the log "
                           "densities are too large; rescale the problem"));
    const char *nms[] = {"value", "grad", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP g_ = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 1, g_);
    double *G = REAL(g_), total = 0.0;
    for (int c0 = 0; c0 < n; ) {
        int c1 = (int) chunk_end(c0, n, (double) n * (d + 4));
        double tchunk = 0.0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par) \
        reduction(+:tchunk)
#endif
        for (int i = c0; i < c1; i++) {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            double *r = scratch + (size_t) tid * (2 * KB_BLOCK + d), *c = r + KB_BLOCK,
                *xi = r + 2 * KB_BLOCK;
            for (int k = 0; k < d; k++)
                xi[k] = X[i + (size_t) k * n];
            double wsum = 0.0, csum = 0.0;
            /* the gradient accumulates in G's row i (this thread only) */
            for (int k = 0; k < d; k++)
                G[i + (size_t) k * n] = 0.0;
            for (int j0 = 0; j0 < n; j0 += KB_BLOCK) {
                int m = n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK;
                sq_dist_row(X, n, d, i, j0, m, r);
                double cb = 0.0;
                for (int t = 0; t < m; t++) {
                    if (j0 + t == i) {
                        c[t] = 0.0;
                        continue;
                    }
                    double q = r[t] + e2;
                    double w = exp(-0.5 * se * log(q) + 0.5 * V[i] + 0.5 * V[j0 + t] - M);
                    wsum += w;
                    c[t] = w * se / q;
                    cb += c[t];
                }
                csum += cb;
                for (int k = 0; k < d; k++) {
                    const double *xk = X + (size_t) k * n + j0;
                    double acc = 0.0;
                    for (int t = 0; t < m; t++)
                        acc += c[t] * xk[t];
                    /* sum_j c_j (x_i - x_j) */
                    G[i + (size_t) k * n] += xi[k] * cb - acc;
                }
            }
            for (int k = 0; k < d; k++)
                G[i + (size_t) k * n] = -G[i + (size_t) k * n] -
                    0.5 * wsum * S[i + (size_t) k * n];
            tchunk += wsum;
        }
        total += tchunk;
        R_CheckUserInterrupt();
        c0 = c1;
    }
    for (R_xlen_t t = 0; t < (R_xlen_t) n * d; t++)
        G[t] *= 2.0 / total;
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(M + log(total) -
                                         2.0 * log((double) n)));
    UNPROTECT(1);
    return ans;
}
