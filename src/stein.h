/* Stein kernel of the Langevin Stein operator on top of a base kernel. */
#ifndef KB_STEIN_H
#define KB_STEIN_H

#include "kernels.h"

/* k_p(x, X_j) for j = j0..j1-1: x, s are one point and its score (length d);
 * X, S are column-major n x d matrices with leading dimension ld. */
void kb_stein_row(const kb_kernel *K, const double *x, const double *s,
                  const double *X, const double *S, R_xlen_t ld,
                  R_xlen_t j0, R_xlen_t j1, double *out);

/* sum_j w_j k_p(x, X_j) over j0..j1-1 (w NULL: unit weights). */
double kb_stein_row_sum(const kb_kernel *K, const double *x, const double *s,
                        const double *X, const double *S, R_xlen_t ld,
                        R_xlen_t j0, R_xlen_t j1, const double *w);

/* k_p(x, x) = |s|^2 phi(0) - 2 phi'(0) tr L. */
double kb_stein_diag(const kb_kernel *K, const double *s);

/* c_j = w_j (w_j k_p(x_j, x_j) + 2 sum_{i<j} w_i k_p(x_i, x_j)), j = 0..n-1,
 * so that the KSD^2 V-statistic of the first j points is a cumulative sum.
 * Also the diagonal terms w_j^2 k_p(x_j, x_j) in diag (may be NULL).
 * Returns -1, or the first row j whose c_j is not finite (an overflow); the
 * rows after it are then not computed. */
R_xlen_t kb_stein_lower_sums(const kb_kernel *K, const double *X,
                             const double *S, R_xlen_t n, const double *w,
                             int nthreads, double *c, double *diag);

/* Gather row i of a column-major matrix into a length-d vector. */
static inline void kb_get_row(const double *X, R_xlen_t ld, R_xlen_t i, int d,
                              double *out)
{
    for (int k = 0; k < d; k++)
        out[k] = X[k * ld + i];
}

#endif
