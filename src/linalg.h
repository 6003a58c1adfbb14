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

/* C = A' B for column-major A (k x m), B (k x n), C (m x n) (dgemm "T","N":
 * dot products in the reference BLAS, the slow form for large m, n). */
void kb_crossprod(int m, int n, int k, const double *A, const double *B,
                  double *C);

/* C = sgn A A' (m x k A, m x m C), or C += sgn A A' when acc is non-zero
 * (BLAS dsyrk "N", the reference BLAS's fast form; "T" runs as dot
 * products): only the upper triangle is written (kb_sym_fill copies it
 * down); with k = 0 and acc = 0, C is zeroed. */
void kb_syrk_n(int m, int k, const double *A, double sgn, int acc, double *C);

/* C = A B' for column-major A (m x k), B (n x k), C (m x n). */
void kb_matmul_nt(int m, int n, int k, const double *A, const double *B,
                  double *C);

/* Thread-safe pieces (no R API: they return LAPACK's info).
 * Eigen-decomposition of the symmetric d x d A (upper triangle; destroyed)
 * with dsyevr (relatively robust representations: several times faster
 * than dsyev for large d): values ascending into w, vectors into Q.
 * Workspace: isuppz 2 d ints, work lwork doubles, iwork liwork ints, the
 * sizes from kb_eigen_rrr_query(d, ...) (they grow with d). */
void kb_eigen_rrr_query(int d, int *lwork, int *liwork);

/* That workspace, handed to the eigensolvers as one. */
typedef struct {
    double *work;
    int lwork;
    int *iwork;
    int liwork;
    int *isuppz;        /* 2 d ints */
} kb_eigen_ws;
/* Cholesky factor (upper) in place; returns dpotrf's info (0: done). */
int kb_chol_info(int n, double *A);
/* kb_chol_solve returning dpotrs's info instead of raising an error. */
int kb_chol_solve_info(int n, int nrhs, const double *U, double *B);
int kb_eigen_rrr(int d, double *A, double *w, double *Q,
                 const kb_eigen_ws *ws);
/* The same decomposition with the vectors as the rows of Qt (Qt = Q'):
 * dsyevr's steps (dsytrd, dstemr) with the back-transformation applied
 * from the right to Z' (dormtr "R": "N","N" / "N","T" products in the
 * reference BLAS; dsyevr's, from the left, runs "T","N" ones); dsyevr
 * itself where it would rescale A, for d = 1, or when dstemr fails (dsyevr
 * then falls back to bisection).  A (upper triangle) is destroyed;
 * scratch: Z and save, d x d each; the other workspace as kb_eigen_rrr's
 * (kb_eigen_rrr_query covers both).  Returns 0 or LAPACK's info. */
int kb_eigen_rrr_t(int d, double *A, double *w, double *Qt, double *Z,
                   double *save, const kb_eigen_ws *ws);

/* Pivoted Cholesky of the n x n positive semi-definite A (overwritten),
 * stopped at LAPACK's tolerance n * macheps * max(diag): P' A P = L L',
 * L n x r.  piv: n ints, work: 2 n doubles.  Returns the rank r (or -1 on
 * an argument error) and writes the factor in the rows' original order to
 * F, n x r (column-major) or, with trans, r x n. */
int kb_pivoted_chol(int n, double *A, int *piv, double *work, double *F,
                    int trans);

/* Thin QR of the m x n A (m >= n) by Householder reflections (dgeqrf,
 * dorgqr): A is overwritten by the orthonormal factor, R (n x n) gets the
 * triangular one (zeros below).  Thread-safe; tau: n doubles, work: lwork
 * doubles, lwork from kb_qr_query(m, n).  Returns LAPACK's info. */
int kb_qr_query(int m, int n);
int kb_qr(int m, int n, double *A, double *R, double *tau, double *work,
          int lwork);

/* Copy the upper triangle of the n x n matrix C to its lower triangle. */
void kb_sym_fill(int n, double *C);
#endif
