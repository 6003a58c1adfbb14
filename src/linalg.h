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

/* C = A' B for column-major A (k x m), B (k x n), C (m x n). */
void kb_crossprod(int m, int n, int k, const double *A, const double *B,
                  double *C);

/* C = A' A (k x m A, m x m C), both triangles filled (BLAS dsyrk),
 * or C += sgn A' A when acc is non-zero. */
void kb_syrk_t(int m, int k, const double *A, double sgn, int acc, double *C);

/* C = A B' for column-major A (m x k), B (n x k), C (m x n). */
void kb_matmul_nt(int m, int n, int k, const double *A, const double *B,
                  double *C);

/* The same as kb_sym_eigen with LAPACK's dsyevr (relatively robust
 * representations: several times faster for large d); A is not changed. */
void kb_sym_eigen_rrr(int d, const double *A, double *w, double *Q,
                      const char *what);

/* Pivoted Cholesky factor of the n x n positive semi-definite G (not
 * changed), stopped at LAPACK's tolerance n * macheps * max(diag G): G ~
 * P P' with P n x r in the rows' original order (a new R_alloc array);
 * the rank r into *rank. */
double *kb_pivoted_chol(int n, const double *G, int *rank, const char *what);

/* Copy the upper triangle of the n x n matrix C to its lower triangle. */
void kb_sym_fill(int n, double *C);
#endif
