/* The KSDT dictionary (ksdt.c) as seen by the samplers that feed it
 * (spmcmc.c).  The state is opaque; a step or an offer that returns -1 met
 * a non-finite Stein kernel value and left the dictionary as it was. */
#ifndef KB_KSDT_H
#define KB_KSDT_H

#include "stein.h"
#include "runtime.h"

typedef struct ksdt_state ksdt_state;

/* The state behind a stream's external pointer (errors for anything else,
 * or for a saved-and-reloaded stream). */
ksdt_state *kb_ksdt_state(SEXP ptr);

/* A running push or sampler holds the stream; release() fits
 * R_ExecWithCleanup. */
void kb_ksdt_hold(ksdt_state *st);
void kb_ksdt_release(void *st);

int kb_ksdt_d(const ksdt_state *st);
int kb_ksdt_size(const ksdt_state *st);

/* k_p(x, x) from the score s (kernel coordinates), counted. */
double kb_ksdt_diag(ksdt_state *st, const double *s);

/* A state offered to KSDT: user coordinates xo, so; kernel coordinates
 * x, s (each length d); kd = k_p(x, x); sidx its index in the stream; for
 * a feed with the regularised candidate rule, lap (the Laplacian term
 * sum_k max(0, d^2 log p / dx_k^2)) and logp (log p, up to a constant). */
typedef struct {
    const double *xo, *so, *x, *s;
    double kd, sidx;
    double lap, logp;
} kb_ksdt_point;

/* A block of candidates (the SP-MCMC rule of Chen et al. 2019, as in the
 * KSDT paper's SPMCMC variants): of the states offered, the one minimising
 * k_p(c, c) + 2 sum_{j in D} k_p(c, x_j) goes to KSDT at commit, the first
 * on ties (regularised: plus lap(c) - w log p(c), w = lambda t with
 * t = |D| + 1, or w = 1; Benard, Staber & Da Veiga 2023); its row with D
 * is computed once.  D does not change within a block.  Internal to
 * ksdt.c (here for the size of kb_ksdt_feed). */
typedef struct {
    int filled, cur, best;     /* candidates seen; rows[cur]: the best's row */
    double crit, kd, sidx;
    double *rows[2];
    double *buf;               /* the best's xo, so, x, s (4 d) */
} kb_cblock;

/* A feed: states offered to the stream one at a time, in blocks of C (1:
 * every state is a KSDT step), each step with its budget eps[t] and
 * minimum size fmin[t].  The caller sets the first group of fields and
 * calls kb_ksdt_feed_start(); the rest is the feed's. */
typedef struct {
    int C, nt;                 /* block size; threads */
    const double *eps, *fmin;  /* one per step */
    const char *what;          /* a state's name in messages ("row") */
    int count_diag;            /* the states' k_p(x, x) were computed
                                * uncounted: count one each as taken */
    int reg;                   /* candidate rule: KB_REG_NONE, or the
                                * regularised one with weight lambda t
                                * (KB_REG_LAMBDA) or 1 (KB_REG_ADAPTIVE) on
                                * log p; used only with blocks (C > 1) */
    double lambda;
    SEXP progress;             /* progress(done, size, ksd), or R_NilValue */
    /* the feed's own */
    int steps;                 /* KSDT steps taken */
    int chosen;                /* candidate taken by the last step (0-based) */
    double base;               /* rows of the stream offered before */
    double evals_seen;         /* evaluations already counted as work */
    double last_time;
    kb_cblock cb;
    kb_ticker tick;
} kb_ksdt_feed;

/* The regularised candidate rule's weight on log p. */
enum { KB_REG_NONE = 0, KB_REG_LAMBDA = 1, KB_REG_ADAPTIVE = 2 };

/* The feed's eps, fmin (one per step), nthreads and progress from the R
 * list ctl (elements of those names); the candidate rule from `lambda`
 * (absent: none; a positive number: KB_REG_LAMBDA) and `adaptive` (TRUE:
 * KB_REG_ADAPTIVE). */
void kb_ksdt_feed_ctl(kb_ksdt_feed *f, SEXP ctl, R_xlen_t steps);

/* Start a feed of up to `steps` steps (history room is made now). */
void kb_ksdt_feed_start(ksdt_state *st, kb_ksdt_feed *f, R_xlen_t steps);

/* Offer the state p, the row-th of this feed (1-based, for messages);
 * close ends its block early (the feed's last state).  Returns 1 when a
 * KSDT step was taken (f->chosen: which candidate of the block), else 0.
 * A Stein kernel value that is not finite raises a kb_error_numeric that
 * names the row; the dictionary is then as before the step. */
int kb_ksdt_feed_offer(ksdt_state *st, kb_ksdt_feed *f, const kb_ksdt_point *p,
                       double row, int close);

/* After each offer: count the work done (the evaluations since the last
 * call plus `extra` units, e.g. closure calls), look for an interrupt
 * every KB_TICK_WORK units and call progress(done, size, ksd) at most
 * once a second, and at the end (last). */
void kb_ksdt_feed_tick(ksdt_state *st, kb_ksdt_feed *f, double extra,
                       double done, int last);

/* Start rules for fresh moves (sp_mcmc): the R layer's names, in order. */
enum { KB_START_LAST = 0, KB_START_RAND = 1, KB_START_INFL = 2 };
extern const char *const kb_start_rules[];

/* A start for fresh moves (KB_START_RAND a random dictionary point,
 * KB_START_INFL the point of least influence); its user coordinates and
 * score into x and s. */
void kb_ksdt_start_point(const ksdt_state *st, int rule, double *x, double *s);

#endif
