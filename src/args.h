/* The argument layer of the C floor, written once.  The R layer checks
 * every user argument and tells the user what was expected; these checks
 * guard the C floor against a malformed call (a bug in the R layer, or a
 * user calling .Call directly) before any work, and raise a
 * "kb_error_arg" condition that names the argument. */
#ifndef KB_ARGS_H
#define KB_ARGS_H

#include "kernbayes.h"

/* A numeric (double) matrix; nrow, ncol: the required dimensions, or -1
 * for any.  Returns the number of rows. */
int kb_arg_matrix(SEXP x, const char *what, int nrow, int ncol);

/* Points and their scores: two n x d double matrices with the same
 * dimensions, d >= 1.  Sets *n and *d. */
void kb_arg_points(SEXP x, SEXP s, const char *xwhat, const char *swhat,
                   int *n, int *d);

/* A square double matrix; returns its order. */
int kb_arg_square(SEXP x, const char *what);

/* A double vector of length len (-1: any); returns its data. */
double *kb_arg_vector(SEXP x, const char *what, R_xlen_t len);

/* Scalars: a finite number; an integer (not NA); TRUE or FALSE. */
double kb_scalar_real(SEXP x, const char *what);
int kb_scalar_int(SEXP x, const char *what);
int kb_scalar_flag(SEXP x, const char *what);

/* A string naming one of choices[] (NULL-terminated); returns its index.
 * The R layer passes the same strings its users see ("imq", "gaussian",
 * ...), so no integer code is mirrored by hand in R and C. */
int kb_arg_choice(SEXP x, const char *what, const char *const *choices);

/* A function or NULL (R_NilValue), e.g. a progress callback; returned. */
SEXP kb_arg_function(SEXP x, const char *what);

/* The first i < n with v[i] not finite (NA, NaN, Inf), or -1. */
R_xlen_t kb_first_nonfinite(const double *v, R_xlen_t n);

/* A list element by name; R_NilValue when absent. */
SEXP kb_list_elt(SEXP list, const char *name);

#endif
