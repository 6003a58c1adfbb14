/* The KSDT dictionary (ksdt.c) as seen by the samplers that feed it
 * (spmcmc.c).  The state is opaque; a step or an offer that returns -1 met
 * a non-finite Stein kernel value and left the dictionary as it was. */
#ifndef KB_KSDT_H
#define KB_KSDT_H

#include "stein.h"

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
double kb_ksdt_offered(const ksdt_state *st);
double kb_ksdt_evals(const ksdt_state *st);
double kb_ksdt_last_ksd(const ksdt_state *st);

/* Room in the history for `steps` more steps. */
void kb_ksdt_reserve(ksdt_state *st, R_xlen_t steps);

/* k_p(x, x) from the score s (kernel coordinates), counted. */
double kb_ksdt_diag(ksdt_state *st, const double *s);

/* A state offered to KSDT: user coordinates xo, so; kernel coordinates
 * x, s (each length d); kd = k_p(x, x); sidx its index in the stream. */
typedef struct {
    const double *xo, *so, *x, *s;
    double kd, sidx;
} kb_ksdt_point;

/* One KSDT step with a new state: add it, then prune with budget eps down
 * to no fewer than fmin points.  Returns the number of removals or -1. */
int kb_ksdt_add(ksdt_state *st, const kb_ksdt_point *p, double eps,
                double fmin, int nt);

/* A block of candidates (the SP-MCMC rule of Chen et al. 2019, as in the
 * KSDT paper's SPMCMC variants): of the states offered, the one minimising
 * k_p(c, c) + 2 sum_{j in D} k_p(c, x_j) goes to KSDT at commit, the first
 * on ties; its row with D is computed once.  D does not change within a
 * block. */
typedef struct {
    int filled, cur, best;     /* candidates seen; rows[cur]: the best's row */
    double crit, kd, sidx;
    double *rows[2];
    double *buf;               /* the best's xo, so, x, s (4 d) */
} kb_cblock;

void kb_ksdt_block_init(ksdt_state *st, kb_cblock *cb);
int kb_ksdt_block_offer(ksdt_state *st, kb_cblock *cb, const kb_ksdt_point *p,
                        int nt);
int kb_ksdt_block_commit(ksdt_state *st, kb_cblock *cb, double eps,
                         double fmin, int nt);

/* Record a step's outcome; `offered`: rows of the stream taken so far. */
void kb_ksdt_record(ksdt_state *st, int removed, double offered);

/* The error for a step or an offer that returned -1. */
void NORET kb_ksdt_nonfinite(const ksdt_state *st, const char *what,
                             double row, double taken);

/* A start for fresh moves (rule 2 random point, 3 least influence); its
 * user coordinates and score into x and s. */
void kb_ksdt_start_point(const ksdt_state *st, int rule, double *x, double *s);

#endif
