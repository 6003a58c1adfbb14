/* Particle flows (DESIGN.md, "Particle flows"): the O(n^2 d) interaction
 * terms of SVGD, KSD descent, the MMD / DrMMD witnesses and MIED.  The
 * iteration loops live in R (R/flows.R); each entry point here is one
 * evaluation at the current particles, threaded over particles.
 * Kernels reaching the kernel-layer entries are isotropic: L = lam I. */
#include <limits.h>
#include <math.h>
#include <R_ext/Utils.h>      /* rPsort */
#include "kernels.h"
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

/* ---- SVGD ------------------------------------------------------------- */

/* The median of all n^2 entries of the squared-distance matrix (zero
 * diagonal included), from its n (n - 1) / 2 distinct off-diagonal values
 * p (reordered): sorted, the entries are n zeros followed by every p
 * twice, so rank r (1-based) > n holds p_(ceil((r - n) / 2)). */
static double full_median(double *p, R_xlen_t npair, R_xlen_t n)
{
    double N = (double) n * (double) n;
    R_xlen_t r1, r2;                    /* the two middle ranks, 1-based */
    if (((R_xlen_t) N) % 2 == 0) {
        r1 = (R_xlen_t) (N / 2);
        r2 = r1 + 1;
    } else {
        r1 = r2 = (R_xlen_t) ((N + 1) / 2);
    }
    double v[2];
    R_xlen_t r[2] = {r1, r2};
    /* pair ranks (0-based) needed, then a partial sort for the smaller */
    R_xlen_t q[2];
    for (int a = 0; a < 2; a++)
        q[a] = r[a] <= n ? -1 : (r[a] - n + 1) / 2 - 1;
    if (q[0] >= 0) {
        rPsort(p, (int) npair, (int) q[0]);
        v[0] = p[q[0]];
    } else {
        v[0] = 0.0;
    }
    if (q[1] < 0) {
        v[1] = 0.0;
    } else if (q[1] == q[0]) {
        v[1] = v[0];
    } else if (q[0] >= 0) {
        /* q[1] = q[0] + 1: the smallest value after the partition point */
        double m = R_PosInf;
        for (R_xlen_t t = q[0] + 1; t < npair; t++)
            if (p[t] < m)
                m = p[t];
        v[1] = m;
    } else {
        rPsort(p, (int) npair, (int) q[1]);
        v[1] = p[q[1]];
    }
    return 0.5 * (v[0] + v[1]);
}

/* .Call entry: one SVGD direction.  x, s: n x d particles and scores; h:
 * the bandwidth, or a non-positive value for the median heuristic h^2 =
 * 0.5 med / log(n + 1).  Returns list(phi, h, ksd2):
 * phi = (K S + rep) / n, rep_i = sum_j grad_{x_j} k(x_j, x_i), and the
 * V-statistic KSD^2 of the particles with the same Gaussian kernel. */
SEXP kb_svgd_phi(SEXP x, SEXP s, SEXP h_, SEXP nthreads)
{
    check_points(x, "x");
    check_same_dim(x, s, "score");
    R_xlen_t n = Rf_nrows(x);
    int d = Rf_ncols(x), nt = kb_nthreads(nthreads);
    double h = kb_scalar_real(h_, "h");
    if (n < 2 || n * (n - 1) / 2 > INT_MAX)
        Rf_error(_("SVGD needs between 2 and 65536 particles"));
    const double *X = REAL(x), *S = REAL(s);
    size_t nn = (size_t) n * n;
    double *K = (double *) R_alloc(nn, sizeof(double));
    int par = (double) n * n * (d + 4) >= KB_PAR_MIN_EVALS * 8;

    /* squared distances, both triangles (rows in parallel) */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16) if (par)
#endif
    for (R_xlen_t j = 0; j < n; j++) {
        double *col = K + (size_t) j * n;
        for (R_xlen_t i = 0; i < n; i++)
            col[i] = 0.0;
        for (int k = 0; k < d; k++) {
            const double *xk = X + (size_t) k * n;
            double xjk = xk[j];
#ifdef _OPENMP
#pragma omp simd
#endif
            for (R_xlen_t i = 0; i < n; i++) {
                double u = xk[i] - xjk;
                col[i] += u * u;
            }
        }
    }
    if (!(h > 0.0)) {
        R_xlen_t npair = n * (n - 1) / 2, t = 0;
        double med = 0.0;
        if (npair > 0) {
            double *p = (double *) R_alloc((size_t) npair, sizeof(double));
            for (R_xlen_t j = 1; j < n; j++) {
                memcpy(p + t, K + (size_t) j * n, (size_t) j * sizeof(double));
                t += j;
            }
            med = full_median(p, npair, n);
        }
        h = sqrt(0.5 * med / log((double) n + 1.0));
        if (!(h > 0.0))
            Rf_error(_("the median heuristic gives a zero bandwidth: the "
                       "particles coincide; give a numeric 'bandwidth'"));
    }
    double h2 = h * h, c = -0.5 / h2, a = d / h2, b = 1.0 / (h2 * h2);
    double tr_sum = 0.0;
    /* K in place; sum_ij K_ij (d / h^2 - D2_ij / h^4) */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par) \
    reduction(+:tr_sum)
#endif
    for (R_xlen_t j = 0; j < n; j++) {
        double *col = K + (size_t) j * n, acc = 0.0;
        for (R_xlen_t i = 0; i < n; i++) {
            double r = col[i], k = exp(c * r);
            acc += k * (a - b * r);
            col[i] = k;
        }
        tr_sum += acc;
    }
    const char *nms[] = {"phi", "h", "ksd2", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP phi_ = Rf_allocMatrix(REALSXP, (int) n, d);
    SET_VECTOR_ELT(ans, 0, phi_);
    double *phi = REAL(phi_);
    double ss = 0.0;
    /* column i of K is row i (symmetric): contiguous dot products */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par) \
    reduction(+:ss)
#endif
    for (R_xlen_t i = 0; i < n; i++) {
        const double *ki = K + (size_t) i * n;
        double rs = 0.0, acc = 0.0;
        for (R_xlen_t j = 0; j < n; j++)
            rs += ki[j];
        for (int k = 0; k < d; k++) {
            const double *xk = X + (size_t) k * n, *sk = S + (size_t) k * n;
            double ks = 0.0, kx = 0.0;
#ifdef _OPENMP
#pragma omp simd reduction(+:ks, kx)
#endif
            for (R_xlen_t j = 0; j < n; j++) {
                ks += ki[j] * sk[j];
                kx += ki[j] * xk[j];
            }
            double rep = (xk[i] * rs - kx) / h2;
            acc += sk[i] * (ks + 2.0 * rep);
            phi[i + (size_t) k * n] = (ks + rep) / (double) n;
        }
        ss += acc;
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
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) \
    if ((double) nz * nx * (d + 4) >= KB_PAR_MIN_EVALS * 8)
#endif
    for (int i = 0; i < nz; i++) {
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
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) \
    if ((double) n * n * (3 * d + 8) >= KB_PAR_MIN_EVALS * 8) reduction(+:total)
#endif
    for (int i = 0; i < n; i++) {
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
        total += urow;
        for (int k = 0; k < d; k++) {
            pos[i + (size_t) k * n] = scale * gp[k];
            V[i + (size_t) k * n] = scale * gv[k];
        }
    }
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(total / ((double) n * n)));
    UNPROTECT(1);
    return ans;
}

/* ---- MIED (Riesz mollifier) ------------------------------------------ */

/* .Call entry: log energy and its gradient.  x: n x d particles, V: -log
 * density (length n), s: scores; sexp, eps: the Riesz exponent and
 * mollifier scale.  Over pairs i != j:
 *   w_ij = (|x_i - x_j|^2 + eps^2)^(-sexp / 2) exp(-(V_i + V_j) / 2),
 *   value = log(sum w / n^2),
 *   grad_i = 2 sum_j w_ij [-sexp (x_i - x_j) / (|x_i - x_j|^2 + eps^2)
 *            + s_i / 2] / sum w. */
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
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
#endif
    for (int i = 0; i < n; i++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *r = scratch + (size_t) tid * (2 * KB_BLOCK + d), *xi = r + 2 * KB_BLOCK;
        for (int k = 0; k < d; k++)
            xi[k] = X[i + (size_t) k * n];
        double mx = R_NegInf;
        for (int j0 = 0; j0 < n; j0 += KB_BLOCK) {
            int m = n - j0 < KB_BLOCK ? n - j0 : KB_BLOCK;
            for (int t = 0; t < m; t++)
                r[t] = 0.0;
            for (int k = 0; k < d; k++) {
                const double *xk = X + (size_t) k * n + j0;
                for (int t = 0; t < m; t++) {
                    double u = xi[k] - xk[t];
                    r[t] += u * u;
                }
            }
            for (int t = 0; t < m; t++) {
                if (j0 + t == i)
                    continue;
                double lw = -0.5 * se * log(r[t] + e2) - 0.5 * (V[i] + V[j0 + t]);
                if (lw > mx)
                    mx = lw;
            }
        }
        rowmax[i] = mx;
    }
    double M = R_NegInf;
    for (int i = 0; i < n; i++)
        if (rowmax[i] > M)
            M = rowmax[i];
    if (!R_FINITE(M))
        Rf_error(_("MIED: the energy is not finite (coinciding particles "
                   "with eps = 0?)"));
    const char *nms[] = {"value", "grad", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SEXP g_ = Rf_allocMatrix(REALSXP, n, d);
    SET_VECTOR_ELT(ans, 1, g_);
    double *G = REAL(g_), total = 0.0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (par) \
    reduction(+:total)
#endif
    for (int i = 0; i < n; i++) {
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
            for (int t = 0; t < m; t++)
                r[t] = 0.0;
            for (int k = 0; k < d; k++) {
                const double *xk = X + (size_t) k * n + j0;
                for (int t = 0; t < m; t++) {
                    double u = xi[k] - xk[t];
                    r[t] += u * u;
                }
            }
            double cb = 0.0;
            for (int t = 0; t < m; t++) {
                if (j0 + t == i) {
                    c[t] = 0.0;
                    continue;
                }
                double q = r[t] + e2;
                double w = exp(-0.5 * se * log(q) - 0.5 * (V[i] + V[j0 + t]) - M);
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
            G[i + (size_t) k * n] = -G[i + (size_t) k * n] +
                0.5 * wsum * S[i + (size_t) k * n];
        total += wsum;
    }
    for (R_xlen_t t = 0; t < (R_xlen_t) n * d; t++)
        G[t] *= 2.0 / total;
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(M + log(total) -
                                         2.0 * log((double) n)));
    UNPROTECT(1);
    return ans;
}
