#include <math.h>
#include "linalg.h"
#include "args.h"
#include "entries.h"
#include <R_ext/Lapack.h>
#include <R_ext/BLAS.h>
#ifndef FCONE
#define FCONE
#endif
#ifndef FCLEN
#define FCLEN
#endif

/* dsyevr's tridiagonal eigensolver (relatively robust representations),
 * in R's LAPACK (dsyevr calls it) but not declared in R_ext/Lapack.h */
extern void F77_NAME(dstemr)(const char *jobz, const char *range,
                             const int *n, double *d, double *e,
                             const double *vl, const double *vu,
                             const int *il, const int *iu, int *m, double *w,
                             double *z, const int *ldz, const int *nzc,
                             int *isuppz, int *tryrac, double *work,
                             const int *lwork, int *iwork, const int *liwork,
                             int *info FCLEN FCLEN);

void kb_sym_eigen(int d, const double *A, double *w, double *Q,
                  const char *what)
{
    int info = 0, lwork = -1;
    double wq;
    memcpy(Q, A, (size_t) d * d * sizeof(double));
    /* workspace query, then the decomposition */
    F77_CALL(dsyev)("V", "U", &d, Q, &d, w, &wq, &lwork, &info FCONE FCONE);
    if (info != 0)
        kb_error_numeric(_("eigen-decomposition of '%s' failed (LAPACK dsyev "
                           "info %d)"), what, info);
    lwork = (int) wq;
    double *work = (double *) R_alloc((size_t) lwork, sizeof(double));
    F77_CALL(dsyev)("V", "U", &d, Q, &d, w, work, &lwork, &info FCONE FCONE);
    if (info != 0)
        kb_error_numeric(_("eigen-decomposition of '%s' failed to converge "
                           "(LAPACK dsyev info %d)"), what, info);
}

/* .Call entry: list(values, vectors) of a symmetric matrix. */
SEXP kb_eigen_sym(SEXP A, SEXP what)
{
    const char *nm = Rf_isString(what) ? CHAR(STRING_ELT(what, 0)) : "A";
    int d = kb_arg_square(A, nm);
    if (kb_first_nonfinite(REAL(A), (R_xlen_t) d * d) >= 0)
        kb_error_arg(_("'%s' must not contain NA, NaN or Inf"), nm);
    const char *nms[] = {"values", "vectors", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocVector(REALSXP, d));
    SET_VECTOR_ELT(ans, 1, Rf_allocMatrix(REALSXP, d, d));
    if (d > 0)
        kb_sym_eigen(d, REAL(A), REAL(VECTOR_ELT(ans, 0)),
                     REAL(VECTOR_ELT(ans, 1)), nm);
    UNPROTECT(1);
    return ans;
}

void kb_chol(int n, double *A, const char *msg)
{
    int info = 0;
    F77_CALL(dpotrf)("U", &n, A, &n, &info FCONE);
    if (info != 0)
        kb_error_numeric("%s (LAPACK dpotrf: leading minor %d is not "
                         "positive)", msg, info);
}

void kb_chol_solve(int n, int nrhs, const double *U, double *B)
{
    int info = 0;
    F77_CALL(dpotrs)("U", &n, &nrhs, U, &n, B, &n, &info FCONE);
    if (info != 0)
        KB_INTERNAL("dpotrs failed");
}

void kb_chol_packed(int n, double *AP, const char *msg)
{
    int info = 0;
    F77_CALL(dpptrf)("U", &n, AP, &info FCONE);
    if (info != 0)
        kb_error_numeric("%s (LAPACK dpptrf: leading minor %d is not "
                         "positive)", msg, info);
}

void kb_matmul(int m, int n, int k, double alpha, const double *A,
               const double *B, double *C)
{
    const double beta = 0.0;
    F77_CALL(dgemm)("N", "N", &m, &n, &k, &alpha, A, &m, B, &k, &beta, C, &m
                    FCONE FCONE);
}

void kb_lu(int n, double *A, int *ipiv, const char *msg)
{
    int info = 0;
    F77_CALL(dgetrf)(&n, &n, A, &n, ipiv, &info);
    if (info != 0)
        kb_error_numeric("%s (LAPACK dgetrf: U[%d, %d] is exactly zero)", msg,
                         info, info);
}

void kb_lu_solve_factored(int n, int nrhs, const double *LU, const int *ipiv,
                          double *B)
{
    int info = 0;
    F77_CALL(dgetrs)("N", &n, &nrhs, LU, &n, ipiv, B, &n, &info FCONE);
    if (info != 0)
        KB_INTERNAL("dgetrs failed");
}

void kb_crossprod(int m, int n, int k, const double *A, const double *B,
                  double *C)
{
    const double one = 1.0, zero = 0.0;
    F77_CALL(dgemm)("T", "N", &m, &n, &k, &one, A, &k, B, &k, &zero, C, &m
                    FCONE FCONE);
}

void kb_syrk_n(int m, int k, const double *A, double sgn, int acc, double *C)
{
    const double beta = acc ? 1.0 : 0.0;
    if (k > 0)
        F77_CALL(dsyrk)("U", "N", &m, &k, &sgn, A, &m, &beta, C, &m
                        FCONE FCONE);
    else if (!acc)
        memset(C, 0, (size_t) m * m * sizeof(double));
}

void kb_sym_fill(int n, double *C)
{
    for (int j = 0; j < n; j++)
        for (int i = j + 1; i < n; i++)
            C[i + (size_t) j * n] = C[j + (size_t) i * n];
}

void kb_matmul_nt(int m, int n, int k, const double *A, const double *B,
                  double *C)
{
    const double one = 1.0, zero = 0.0;
    F77_CALL(dgemm)("N", "T", &m, &n, &k, &one, A, &m, B, &n, &zero, C, &m
                    FCONE FCONE);
}

int kb_chol_info(int n, double *A)
{
    int info = 0;
    F77_CALL(dpotrf)("U", &n, A, &n, &info FCONE);
    return info;
}

int kb_chol_solve_info(int n, int nrhs, const double *U, double *B)
{
    int info = 0;
    F77_CALL(dpotrs)("U", &n, &nrhs, U, &n, B, &n, &info FCONE);
    return info;
}

void kb_eigen_rrr_query(int d, int *lwork, int *liwork)
{
    int info = 0, lw = -1, liw = -1, m, iwq, il = 1, iu = d, isuppz[2];
    double wq, vl = 0.0, vu = 0.0, abstol = 0.0, a = 0.0, w = 0.0, z = 0.0;
    F77_CALL(dsyevr)("V", "A", "U", &d, &a, &d, &vl, &vu, &il, &iu, &abstol,
                     &m, &w, &z, &d, isuppz, &wq, &lw, &iwq, &liw, &info
                     FCONE FCONE FCONE);
    *lwork = (int) wq;
    *liwork = iwq;
    /* kb_eigen_rrr_t's pieces: d, e, tau, then dsytrd's, dstemr's (18 d,
     * 10 d ints) or dormtr's workspace */
    int mx = 18 * d;
    F77_CALL(dsytrd)("U", &d, &a, &d, &w, &w, &w, &wq, &lw, &info FCONE);
    mx = (int) wq > mx ? (int) wq : mx;
    F77_CALL(dormtr)("R", "U", "T", &d, &d, &a, &d, &w, &z, &d, &wq, &lw,
                     &info FCONE FCONE FCONE);
    /* + dormql's block reflector (65 x 64), which dormtr's answer omits */
    mx = (int) wq + 4160 > mx ? (int) wq + 4160 : mx;
    *lwork = 3 * d + mx > *lwork ? 3 * d + mx : *lwork;
    *liwork = 10 * d > *liwork ? 10 * d : *liwork;
}

/* Q' from Q (d x d) */
static void eigen_transpose(int d, const double *Q, double *Qt)
{
    for (int j = 0; j < d; j++)
        for (int i = 0; i < d; i++)
            Qt[j + (size_t) i * d] = Q[i + (size_t) j * d];
}

int kb_eigen_rrr_t(int d, double *A, double *w, double *Qt, double *Z,
                   double *save, const kb_eigen_ws *ws)
{
    double *work = ws->work;
    int lwork = ws->lwork, liwork = ws->liwork, *iwork = ws->iwork,
        *isuppz = ws->isuppz;
    size_t dd = (size_t) d * d;
    double amax = 0.0;
    for (int j = 0; j < d; j++)
        for (int i = 0; i <= j; i++) {
            double v = fabs(A[i + (size_t) j * d]);
            if (!(v <= amax))
                amax = v;           /* NaN stays */
        }
    /* dsyevr rescales a matrix whose largest entry is below ~1e-146 or
     * above ~1e76, and returns at once for d = 1: dsyevr itself then */
    if (d > 1 && amax > 1e-140 && amax < 1e70) {
        double *dg = work, *e = dg + d, *tau = e + d, *wk = tau + d;
        double vl = 0.0, vu = 0.0;
        int lw = lwork - 3 * d, m = 0, il = 1, iu = d, tryrac = 1, info = 0;
        memcpy(save, A, dd * sizeof(double));
        F77_CALL(dsytrd)("U", &d, A, &d, dg, e, tau, wk, &lw, &info FCONE);
        if (info == 0)
            F77_CALL(dstemr)("V", "A", &d, dg, e, &vl, &vu, &il, &iu, &m, w,
                             Z, &d, &d, isuppz, &tryrac, wk, &lw, iwork,
                             &liwork, &info FCONE FCONE);
        if (info == 0 && m == d) {
            /* Q = U Z with U dsytrd's reflectors: Q' = Z' U' */
            eigen_transpose(d, Z, Qt);
            F77_CALL(dormtr)("R", "U", "T", &d, &d, A, &d, tau, Qt, &d, wk,
                             &lw, &info FCONE FCONE FCONE);
            return info;
        }
        /* dstemr failed: dsyevr falls back to bisection and inverse
         * iteration */
        memcpy(A, save, dd * sizeof(double));
    }
    int info = kb_eigen_rrr(d, A, w, Z, ws);
    if (info == 0)
        eigen_transpose(d, Z, Qt);
    return info;
}

int kb_eigen_rrr(int d, double *A, double *w, double *Q,
                 const kb_eigen_ws *ws)
{
    int info = 0, m = 0, il = 1, iu = d, lwork = ws->lwork,
        liwork = ws->liwork;
    double vl = 0.0, vu = 0.0, abstol = 0.0;
    F77_CALL(dsyevr)("V", "A", "U", &d, A, &d, &vl, &vu, &il, &iu, &abstol,
                     &m, w, Q, &d, ws->isuppz, ws->work, &lwork, ws->iwork,
                     &liwork, &info
                     FCONE FCONE FCONE);
    return info != 0 ? info : (m != d ? -1 : 0);
}

int kb_pivoted_chol(int n, double *A, int *piv, double *work, double *F,
                    int trans)
{
    int info = 0, r = 0;
    double tol = -1.0;
    F77_CALL(dpstrf)("L", &n, A, &n, piv, &r, &tol, work, &info FCONE);
    if (info < 0 || r < 0 || r > n)
        return -1;
    /* row i of L is row piv[i] of the matrix; L is zero above its diagonal */
    memset(F, 0, (size_t) n * r * sizeof(double));
    for (int k = 0; k < r; k++)
        for (int i = k; i < n; i++) {
            size_t o = trans ? k + (size_t) (piv[i] - 1) * r :
                (piv[i] - 1) + (size_t) k * n;
            F[o] = A[i + (size_t) k * n];
        }
    return r;
}

/* Workspace doubles for kb_qr(m, n, ...) */
int kb_qr_query(int m, int n)
{
    int info = 0, lw = -1, mx = n > 1 ? n : 1;
    double wq = 0.0, a = 0.0, tau = 0.0;
    F77_CALL(dgeqrf)(&m, &n, &a, &m, &tau, &wq, &lw, &info);
    mx = (int) wq > mx ? (int) wq : mx;
    F77_CALL(dorgqr)(&m, &n, &n, &a, &m, &tau, &wq, &lw, &info);
    mx = (int) wq > mx ? (int) wq : mx;
    return mx + 64 * (n > 1 ? n : 1);
}

int kb_qr(int m, int n, double *A, double *R, double *tau, double *work,
          int lwork)
{
    int info = 0;
    F77_CALL(dgeqrf)(&m, &n, A, &m, tau, work, &lwork, &info);
    if (info != 0)
        return info;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            R[i + (size_t) j * n] = i <= j ? A[i + (size_t) j * m] : 0.0;
    F77_CALL(dorgqr)(&m, &n, &n, A, &m, tau, work, &lwork, &info);
    return info;
}
