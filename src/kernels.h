/* Base kernels: k(x, y) = phi(r), r = u' L u, u = x - y.
 * Points reach this layer in the eigenbasis of L (the R layer rotates them),
 * so L is diagonal: lam[0..d-1], or lam[0] * I when iso is set.
 * This layer is the only one that knows phi and its radial derivatives, and
 * the only one that computes distances between points. */
#ifndef KB_KERNELS_H
#define KB_KERNELS_H

#include "kernbayes.h"

/* x86-64 with GCC or clang: the hot loops also get an AVX2 copy, chosen at
 * run time.  target("avx2") leaves FMA out, so the copy does the same
 * operations in the same order as the default one: the same results, bit
 * for bit (wider vectors only; reductions stay outside the copies). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KB_AVX2 1
#define KB_TARGET_AVX2 __attribute__((target("avx2")))
#define KB_ALWAYS_INLINE inline __attribute__((always_inline))
/* The widest instruction set the copies may use: 2 (AVX-512F), 1 (AVX2)
 * or 0 (the baseline, SSE2 on x86-64); 2 unless lowered by kb_simd()
 * (kernels.c), from the main thread between calls, so that the tests run
 * every copy on any machine. */
extern int kb_simd_cap;
static inline int kb_have_avx2(void)
{
    return kb_simd_cap >= 1 && __builtin_cpu_supports("avx2");
}
/* AVX-512F, for the loops bound by divisions and square roots (twice the
 * AVX2 throughput where the units are 512 bits wide).  AVX-512F brings FMA
 * with it, which GCC would contract a * b + c into: its copies multiply,
 * add and subtract with the _round intrinsics (at the current rounding
 * mode, the plain instructions), which GCC does not contract. */
#define KB_TARGET_AVX512 __attribute__((target("avx512f")))
static inline int kb_have_avx512(void)
{
    return kb_simd_cap >= 2 && __builtin_cpu_supports("avx512f");
}
#else
#define KB_AVX2 0
#define KB_ALWAYS_INLINE inline
#endif

#define KB_BLOCK 256          /* points per vectorised block */

#if KB_AVX2
#include <immintrin.h>
/* phi, phi', phi'' of the IMQ kernel with beta = -1/2 at four values of r
 * (b1 = beta, b2 = beta (beta - 1)): the operations of the scalar loop in
 * kernels.c, in its order, one square root and one division each.  Inline,
 * for the loops that keep r in registers (stein.c). */
KB_TARGET_AVX2 static inline void kb_imq_half4(__m256d c, __m256d b1,
                                               __m256d b2, __m256d r,
                                               __m256d *p0, __m256d *p1,
                                               __m256d *p2)
{
    __m256d it = _mm256_div_pd(_mm256_set1_pd(1.0), _mm256_add_pd(c, r));
    __m256d ph = _mm256_sqrt_pd(it);
    __m256d pit = _mm256_mul_pd(ph, it);
    *p0 = ph;
    *p1 = _mm256_mul_pd(b1, pit);
    *p2 = _mm256_mul_pd(b2, _mm256_mul_pd(pit, it));
}

/* kb_imq_half4() at eight values of r. */
#define KB_RND _MM_FROUND_CUR_DIRECTION
KB_TARGET_AVX512 static inline void kb_imq_half8(__m512d c, __m512d b1,
                                                 __m512d b2, __m512d r,
                                                 __m512d *p0, __m512d *p1,
                                                 __m512d *p2)
{
    __m512d it = _mm512_div_pd(_mm512_set1_pd(1.0),
                               _mm512_add_round_pd(c, r, KB_RND));
    __m512d ph = _mm512_sqrt_pd(it);
    __m512d pit = _mm512_mul_round_pd(ph, it, KB_RND);
    *p0 = ph;
    *p1 = _mm512_mul_round_pd(b1, pit, KB_RND);
    *p2 = _mm512_mul_round_pd(b2, _mm512_mul_round_pd(pit, it, KB_RND),
                              KB_RND);
}
#endif

/* Work units (runtime.h) of one base kernel evaluation in d dimensions. */
#define KB_KERNEL_WORK(d) ((double) (d) + 4.0)

/* A kernel's type and parameters mean something to kernels.c only (the
 * R layer names kernels by strings, mapped in kb_kernel_from_sexp()). */
typedef struct {
    int type;
    double c, beta;           /* parameters; IMQ: phi(r) = (c + r)^beta */
    int d;                    /* dimension */
    int iso;                  /* 1: L = lam[0] I */
    const double *lam;        /* eigenvalues of L (length d, or 1 if iso) */
    double trL;               /* trace of L */
} kb_kernel;

/* 1 if the kernel is the IMQ kernel with beta = -1/2 (kb_imq_half4()). */
int kb_is_imq_half(const kb_kernel *K);

/* Fill a kb_kernel from the resolved R kernel list (elements type, c, beta,
 * lambda, iso); lambda storage stays owned by R. */
void kb_kernel_from_sexp(SEXP kern, int d, kb_kernel *K);

/* The isotropic Gaussian kernel exp(-lam |x - y|^2 / 2) in d dimensions;
 * *lam must outlive K. */
void kb_kernel_gaussian(kb_kernel *K, int d, const double *lam);

/* phi, phi', phi'' at m values of r (any m). */
void kb_phi_block(const kb_kernel *K, int m, const double *r,
                  double *p0, double *p1, double *p2);

/* phi alone at m values of r (p0 may be r itself). */
void kb_phi0_block(const kb_kernel *K, int m, const double *r, double *p0);

/* For an isotropic kernel at m <= KB_BLOCK plain squared distances d2
 * (from kb_sqdist_block): p0 = phi(lam d2), sums[0] = sum of phi and
 * sums[1] = sum of tr(grad_x grad_y k) = -2 d lam phi' - 4 lam^2 d2 phi''
 * (the trace term of the Stein kernel); the Gaussian in one pass (the
 * inner loop of SVGD). */
void kb_phi0_iso_sums(const kb_kernel *K, int m, const double *d2,
                      double *p0, double *sums);

/* phi''' at m values of r, given p2 = phi''(r) from kb_phi_block(). */
void kb_phi3_block(const kb_kernel *K, int m, const double *r,
                   const double *p2, double *p3);

/* phi(0) = k(x, x). */
double kb_phi_zero(const kb_kernel *K);

/* The mollifiers of MIED (Li et al., 2023) as functions of the squared
 * distance r = |x - y|^2, with their log and c(r) = -2 d log phi / dr, so
 * that grad_x log phi(|x - y|^2) = -c(r) (x - y):
 *   Riesz     phi = (r + eps^2)^(-s/2)   c = s / (r + eps^2)
 *   Gaussian  phi = exp(-r / (2 eps^2))  c = 1 / eps^2
 *   Laplace   phi = exp(-sqrt(r) / eps)  c = 1 / (eps sqrt(r)), 0 at r = 0
 * (the Laplace mollifier has no gradient at 0; 0 is the subgradient of
 * least norm).  Their normalising constants are left out: they depend on
 * eps, s and d only, so they shift log phi by a constant. */
enum { KB_MOLL_RIESZ, KB_MOLL_GAUSSIAN, KB_MOLL_LAPLACE };
typedef struct {
    int type;
    double s, eps;
} kb_mollifier;

/* Fill a kb_mollifier from its name (a string: "riesz", "gaussian" or
 * "laplace"), the Riesz exponent s and the scale eps (the R layer checks
 * them: eps > 0 except for Riesz). */
void kb_mollifier_from_sexp(SEXP type, double s, double eps, kb_mollifier *M);

/* log phi(r_t) into lphi and c(r_t) into c (c may be NULL), t < m. */
void kb_mollifier_block(const kb_mollifier *M, int m, const double *r,
                        double *lphi, double *c);

/* Squared Euclidean distances (no preconditioner) r_t = |x - X_{j0+t}|^2,
 * t < m, for the points of a column-major matrix X with leading dimension
 * ld; the point x has coordinates x[k * xs] (xs = 1: a vector; xs = ld and
 * x = X + i: row i of X itself).  Inline: the inner loop of the flows. */
static inline void kb_sqdist_block(int d, const double *x, R_xlen_t xs,
                                   const double *X, R_xlen_t ld, R_xlen_t j0,
                                   int m, double *r)
{
    for (int t = 0; t < m; t++)
        r[t] = 0.0;
    for (int k = 0; k < d; k++) {
        const double *xk = X + k * ld + j0;
        double xik = x[k * xs];
#pragma omp simd
        for (int t = 0; t < m; t++) {
            double u = xik - xk[t];
            r[t] += u * u;
        }
    }
}

/* Squared preconditioned distances r_j = (x - X_j)' L (x - X_j) for the m
 * points X_j, j = j0..j0+m-1, of a column-major matrix with leading
 * dimension ld; m <= KB_BLOCK. */
void kb_dist_block(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, int m, double *r);

/* Base kernel values k(x, X_j) = phi(r_j) for j = j0..j1-1. */
void kb_kernel_row(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, R_xlen_t j1, double *out);

/* sum_j k(x, X_j) over j = j0..j1-1; buf: KB_BLOCK doubles of scratch. */
double kb_kernel_row_sum(const kb_kernel *K, const double *x, const double *X,
                         R_xlen_t ld, R_xlen_t j0, R_xlen_t j1, double *buf);

/* Kernel rows of the points y_j of Y (ny x d) against all of X (nx x d), in
 * parallel over j on up to nt threads: G[j nx + i] = k(x_i, y_j) (G not
 * NULL: the Gram matrix of X and Y), or mean[j] = mean_i k(x_i, y_j). */
typedef struct {
    const kb_kernel *K;
    const double *X, *Y;
    R_xlen_t nx, ny;
    double *G, *mean;
} kb_kernel_rows;

void kb_kernel_rows_run(const kb_kernel_rows *q, int nt);

/* The Gaussian kernel k(x, v) = exp(-|x - v|^2 / (2 w)) of bandwidth h
 * (w = h^2) at J locations V (J x d, column-major), for the FSSD test's
 * Stein features (Jitkrittum et al. 2017, eq. 2):
 *   f[j d + k] = scale (k(x, v_j) s_k + d k(x, v_j) / d x_k)
 *              = scale k(x, v_j) (s_k - (x_k - v_jk) / w)
 * at one point x with score s (coordinate k at x[k ld], s[k ld]); all d
 * features of a location NaN when its squared distance overflows. */
typedef struct {
    const double *V;
    int J, d;
    double w, scale;
} kb_gauss_feat;

void kb_gauss_stein_features(const kb_gauss_feat *G, const double *x,
                             const double *s, R_xlen_t ld, double *f);

/* Gather row i of a column-major matrix into a length-d vector. */
static inline void kb_get_row(const double *X, R_xlen_t ld, R_xlen_t i, int d,
                              double *out)
{
    for (int k = 0; k < d; k++)
        out[k] = X[k * ld + i];
}

#endif
