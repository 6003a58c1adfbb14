/* Thin wrappers over R's LAPACK with info checks. */
#ifndef KB_LINALG_H
#define KB_LINALG_H

#include "kernbayes.h"

/* Eigen-decomposition of the symmetric d x d matrix A (upper triangle used):
 * values ascending into w, orthonormal vectors into the columns of Q. */
void kb_sym_eigen(int d, const double *A, double *w, double *Q,
                  const char *what);

/* Cholesky factor (upper) of the n x n SPD matrix A in place; on failure an
 * R error with msg. */
void kb_chol(int n, double *A, const char *msg);

/* LU factorisation of the n x n matrix A in place (pivots in ipiv), and a
 * solve with it; a singular A gives an R error with msg. */
void kb_lu(int n, double *A, int *ipiv, const char *msg);
void kb_lu_solve_factored(int n, int nrhs, const double *LU, const int *ipiv,
                          double *B);

/* Solve (U'U) X = B for an upper Cholesky factor U, in place of B. */
void kb_chol_solve(int n, int nrhs, const double *U, double *B);

/* Cholesky factor (upper) of the n x n SPD matrix AP in LAPACK's packed
 * storage (column j holds rows 0..j, from offset j (j + 1) / 2), in place;
 * on failure an R error with msg. */
void kb_chol_packed(int n, double *AP, const char *msg);

/* C = alpha A B for column-major A (m x k), B (k x n), C (m x n). */
void kb_matmul(int m, int n, int k, double alpha, const double *A,
               const double *B, double *C);
#endif
