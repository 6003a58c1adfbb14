/* Calling R closures (log-density, score) from C, with every result checked. */
#ifndef KB_CALLBACK_H
#define KB_CALLBACK_H

#include "kernbayes.h"

typedef struct {
    SEXP call;        /* fn(arg), protected by the caller */
    SEXP arg;         /* the argument vector the call refers to */
    SEXP rho;         /* environment of evaluation */
    const char *what; /* closure's name for messages, e.g. "score" */
    const char *rows_of; /* what the rows are, "row i of <rows_of>";
                          * default "x" */
    int d;
    int allow_neginf; /* accept -Inf results (log densities); default 0 */
    int row_matrix;   /* pass the point as a 1 x d matrix (vectorised) */
    int rng;          /* called between GetRNGstate() and PutRNGstate(): the
                       * generator's state is handed to R around each call,
                       * so that a closure drawing random numbers continues
                       * the stream instead of replaying it; default 0 */
} kb_closure;

/* Build the call what(<length-d numeric>), to be evaluated in rho where
 * `what` is bound to the closure.  Returns the call: the caller protects
 * it for as long as the closure is used. */
SEXP kb_closure_init(kb_closure *cl, SEXP rho, int d, const char *what);

/* Pass the point as a 1 x d matrix, for closures that take batches. */
void kb_closure_row_matrix(kb_closure *cl);

/* Evaluate at one point x (length d); the result (length len_out) goes into
 * out.  row is the 1-based row named in messages; 0 names the point itself
 * (a sampler's state or proposal, which is no row of any x). */
void kb_closure_eval(kb_closure *cl, const double *x, int len_out,
                     double *out, R_xlen_t row);

/* progress(i, size, ksd), an R function of three numbers. */
void kb_call_progress(SEXP progress, double i, double size, double ksd);

/* A progress function (or R_NilValue: none) called at most once a second:
 * loops call kb_progress_report() when their ticker fires (with force at
 * the end); without a function that is one comparison. */
typedef struct {
    SEXP fn;
    double last;
} kb_progress;

void kb_progress_init(kb_progress *p, SEXP fn);
void kb_progress_report(kb_progress *p, double done, double size, double ksd,
                        int force);

#endif
