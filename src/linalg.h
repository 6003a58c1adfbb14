/* Thin wrappers over R's LAPACK with info checks. */
#ifndef KB_LINALG_H
#define KB_LINALG_H

#include "kernbayes.h"

/* Eigen-decomposition of the symmetric d x d matrix A (upper triangle used):
 * values ascending into w, orthonormal vectors into the columns of Q. */
void kb_sym_eigen(int d, const double *A, double *w, double *Q,
                  const char *what);

#endif
