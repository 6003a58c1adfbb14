/* Stein kernel of the Langevin Stein operator on top of a base kernel. */
#ifndef KB_STEIN_H
#define KB_STEIN_H

#include "kernels.h"

/* Work units (runtime.h) of one Stein kernel evaluation in d dimensions. */
#define KB_STEIN_WORK(d) (3.0 * (d) + 8.0)

/* Points and their scores: column-major matrices with leading dimension
 * ld, d = the kernel's dimension columns each. */
typedef struct {
    const double *X, *S;
    R_xlen_t ld;
} kb_points;

/* k_p(x, X_j) for j = j0..j1-1 of P: x, s are one point and its score
 * (length d). */
void kb_stein_row(const kb_kernel *K, const double *x, const double *s,
                  const kb_points *P, R_xlen_t j0, R_xlen_t j1, double *out);

/* sum_j w_j k_p(x, X_j) over j0..j1-1 of P (w NULL: unit weights). */
double kb_stein_row_sum(const kb_kernel *K, const double *x, const double *s,
                        const kb_points *P, R_xlen_t j0, R_xlen_t j1,
                        const double *w);

/* The n x n Stein kernel matrix of the first n points of P into out
 * (column-major; entry (i, j), i <= j, computed with x_j as the row point
 * and mirrored, so a matrix of sorted subsets agrees with the full one
 * entry by entry), threads over columns.  Returns -1, or a column with a
 * non-finite value. */
R_xlen_t kb_stein_matrix_fill(const kb_kernel *K, const kb_points *P,
                              R_xlen_t n, int nthreads, double *out);

/* k_p(x, x) = |s|^2 phi(0) - 2 phi'(0) tr L. */
double kb_stein_diag(const kb_kernel *K, const double *s);

/* For the rows j = j0..j1-1 of P: out[j - j0] = w_j (w_j k_p(x_j, x_j) +
 * 2 sum_{i<j} w_i k_p(x_i, x_j)) (w NULL: unit weights), so that over all
 * rows the KSD^2 V-statistic of the first j points is a cumulative sum.
 * Also the diagonal terms w_j^2 k_p(x_j, x_j) in diag[j - j0] (diag may be
 * NULL).  Returns -1, or the first row j whose out value is not finite (an
 * overflow); the rows after its chunk are then not computed. */
R_xlen_t kb_stein_lower_sums(const kb_kernel *K, const kb_points *P,
                             R_xlen_t j0, R_xlen_t j1, const double *w,
                             int nthreads, double *out, double *diag);

/* The pair terms of the gradient of the KSD^2 V-statistic (KSD descent)
 * for an isotropic kernel, L = lam I.  For the point x with score s
 * against the points x_j, s_j of a block, with z = x - x_j and
 * r0 = |z|^2:
 *   u  = phi s.s_j + 2 lam phi' (s_j - s).z - 4 lam^2 phi'' r0
 *        - 2 d lam phi'                            (the Stein kernel),
 *   c1 = 2 lam phi' s.s_j + 4 lam^2 phi'' (s_j - s).z - 8 lam^3 phi''' r0
 *        - (8 + 4 d) lam^2 phi'',
 *   c2 = 2 lam phi',
 * so that d u / d x (s fixed) = c1 z + c2 (s_j - s) and
 * d u / d s = phi s_j - c2 z. */
typedef struct {
    double u;                 /* sum of u, accumulated over blocks */
    double sc1, sc2;          /* this block's sums of c1 and c2 */
    double *p0, *c1, *c2;     /* KB_BLOCK each: phi, c1, c2 */
    double *work;             /* 6 KB_BLOCK doubles of scratch */
} kb_ksd_terms;

/* Doubles of caller-provided memory behind one kb_ksd_terms: per-thread
 * scratch (kb_scratch) rather than the stack, where the loops next to the
 * point matrices ran slower. */
#define KB_KSD_WORK (9 * KB_BLOCK)

/* Point T's arrays into buf (KB_KSD_WORK doubles). */
static inline void kb_ksd_terms_init(kb_ksd_terms *T, double *buf)
{
    T->u = T->sc1 = T->sc2 = 0.0;
    T->work = buf;
    T->p0 = buf + 6 * KB_BLOCK;
    T->c1 = buf + 7 * KB_BLOCK;
    T->c2 = buf + 8 * KB_BLOCK;
}

/* The terms of x, s against the m <= KB_BLOCK points j0.. of P: adds the
 * u's to T->u, sets T->sc1, T->sc2 and the first m of T->p0 (phi), T->c1,
 * T->c2. */
void kb_ksd_grad_block(const kb_kernel *K, const double *x, const double *s,
                       const kb_points *P, R_xlen_t j0, int m,
                       kb_ksd_terms *T);

#endif
