/* MCMC kernels (random walk Metropolis, MALA) driven by R closures. */
#ifndef KB_SAMPLERS_H
#define KB_SAMPLERS_H

#include "callback.h"

/* Sampler types: the R layer's names, in order. */
enum { KB_RWM = 0, KB_MALA = 1 };

/* The sampler type named by an R string ("rwm" or "mala"). */
int kb_sampler_type(SEXP name);

typedef struct {
    int type, d;
    kb_closure logd, grad;
    double step;
    double *x, *s, lp;         /* current state, its score, log density */
    double *y, *sy, lpy;       /* proposal */
    double *z;                 /* scratch */
    int has_score;             /* is s the score of x (RWM computes lazily) */
    double accepted, proposed;
    double last_alpha;         /* acceptance probability of the last step */
} kb_sampler;

/* Set up from an environment binding `log_density` and `score`, between
 * GetRNGstate() and PutRNGstate() (the closures are called with the
 * generator's state handed to R, see kb_closure.rng).  x0 must have a
 * finite log density.  Returns the object holding the sampler's R
 * calls: the caller protects it for as long as the sampler is used. */
SEXP kb_sampler_init(kb_sampler *smp, int type, SEXP rho, int vectorized,
                     int d, const double *x0, double step);

/* One Metropolis-Hastings step (uses R's RNG: call between
 * GetRNGstate/PutRNGstate). */
void kb_sampler_step(kb_sampler *smp);

/* Make sure smp->s holds the score of the current state. */
void kb_sampler_score(kb_sampler *smp);

/* Move the chain to x (a state seen before, with its score). */
void kb_sampler_jump(kb_sampler *smp, const double *x, const double *s);

/* The Laplacian term of regularised Stein thinning (Benard, Staber & Da
 * Veiga 2023) at the current state, sum_k max(0, d^2 log p / dx_k^2), the
 * Hessian diagonal by central differences of the score as R/thin.R's
 * fd_hessian_diag() takes it: 2d score evaluations; scratch: 3d doubles.
 * With column scales `scale` (NULL: none) the term of coordinate k is
 * multiplied by scale_k^2: the Laplacian in the standardised coordinates
 * x_k / scale_k, as R/thin.R's laplacian_plus(). The chain does not move. */
double kb_sampler_laplacian_plus(kb_sampler *smp, double *scratch,
                                 const double *scale);

/* Set the chain's state to x with score s and log density lp, all known. */
void kb_sampler_set_state(kb_sampler *smp, const double *x, const double *s,
                          double lp);

#endif
