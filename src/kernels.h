/* Base kernels: k(x, y) = phi(r), r = u' L u, u = x - y.
 * Points reach this layer in the eigenbasis of L (the R layer rotates them),
 * so L is diagonal: lam[0..d-1], or lam[0] * I when iso is set. */
#ifndef KB_KERNELS_H
#define KB_KERNELS_H

#include "kernbayes.h"

#define KB_BLOCK 256          /* points per vectorised block */

typedef enum { KB_IMQ = 1, KB_GAUSS = 2 } kb_kernel_type;

typedef struct {
    int type;                 /* kb_kernel_type */
    double c, beta;           /* IMQ: phi(r) = (c + r)^beta */
    int d;                    /* dimension */
    int iso;                  /* 1: L = lam[0] I */
    const double *lam;        /* eigenvalues of L (length d, or 1 if iso) */
    double trL;               /* trace of L */
} kb_kernel;

/* Fill a kb_kernel from the resolved R kernel list (elements type, c, beta,
 * lambda, iso); lambda storage stays owned by R. */
void kb_kernel_from_sexp(SEXP kern, int d, kb_kernel *K);

/* phi, phi', phi'' at m values of r (any m). */
void kb_phi_block(const kb_kernel *K, int m, const double *r,
                  double *p0, double *p1, double *p2);

/* Squared preconditioned distances r_j = (x - X_j)' L (x - X_j) for the m
 * points X_j, j = j0..j0+m-1, of a column-major matrix with leading
 * dimension ld; m <= KB_BLOCK. */
void kb_dist_block(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, int m, double *r);

/* Base kernel values k(x, X_j) = phi(r_j) for j = j0..j1-1. */
void kb_kernel_row(const kb_kernel *K, const double *x, const double *X,
                   R_xlen_t ld, R_xlen_t j0, R_xlen_t j1, double *out);

#endif
