/* Samplers with KSDT inside: ksdt_sample() and Stein Point MCMC (sp_mcmc()),
 * an MCMC chain (samplers.h) feeding a KSDT dictionary (ksdt.h). */
#include <limits.h>
#include "ksdt.h"
#include "samplers.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

/* A state or its score in the standardised coordinates: x / scale or
 * s * scale column by column (as R's scale_points(), scale_scores()). */
static void scale_row(int d, const double *scale, int score, const double *x,
                      double *out)
{
    for (int k = 0; k < d; k++)
        out[k] = score ? x[k] * scale[k] : x[k] / scale[k];
}

/* Point in kernel coordinates: x Q (Q NULL: unchanged). */
static void to_kernel(int d, const double *Q, const double *x, double *out)
{
    if (!Q) {
        memcpy(out, x, (size_t) d * sizeof(double));
        return;
    }
    for (int k = 0; k < d; k++) {
        double acc = 0.0;
        for (int l = 0; l < d; l++)
            acc += x[l] * Q[l + (size_t) k * d];
        out[k] = acc;
    }
}

/* Run a sampler for n_iter KSDT steps of `cand` chain iterations each.
 * restart = 0 (ksdt_sample): the chain runs on undisturbed; each block of
 *   `cand` consecutive states offers KSDT its state minimising
 *   k_p(y, y) + 2 sum_{x in D} k_p(y, x) (the KSDT paper's SPMCMC variants);
 *   with cand = 1 every state.  Equal to ksdt(chain, candidates = cand).
 * restart = 1 (sp_mcmc, Stein Point MCMC): n_iter steps, each running
 *   `cand` fresh moves from a start chosen by rule (the last added point,
 *   a random dictionary point, or the point of least influence
 *   argmin_i 2 r_i - k_p(x_i, x_i), Chen et al. 2019) and continuing from
 *   the selected candidate. */
typedef struct {
    ksdt_state *st;
    SEXP rho;
    int vec, type, n_iter, start, restart;
    double h;
    const double *x0, *Q, *scale;   /* scale NULL: not standardised */
    kb_ksdt_feed feed;
    double acc_rate, step;     /* results */
    double *mean, *m2, *m3, *m4;   /* results: the running mean and sums
                                    * of 2nd-4th powers of deviations of
                                    * every state the chain visited (the
                                    * sample a dictionary is judged
                                    * against; Welford's and Pebay's
                                    * updates) */
} sample_args;

/* Per-run scratch: the chain's state in kernel coordinates (and
 * standardised, in sx), and with restarts the block's candidates (state,
 * score and log density). */
typedef struct {
    double *ck, *cks, *pt, *fd, *sx, *cxs, *clp;
} sample_scratch;

static sample_scratch scratch_alloc(int d, int C)
{
    sample_scratch w;
    w.ck = (double *) R_alloc((size_t) 9 * d, sizeof(double));
    w.cks = w.ck + d;
    w.pt = w.cks + d;
    w.fd = w.pt + 2 * d;
    w.sx = w.fd + 3 * d;
    w.cxs = (double *) R_alloc((size_t) 2 * C * d, sizeof(double));
    w.clp = (double *) R_alloc((size_t) C, sizeof(double));
    return w;
}

/* Keep candidate c of the block (restarts continue from the chosen one). */
static void keep_candidate(sample_scratch *w, int c, const kb_sampler *smp)
{
    int d = smp->d;
    memcpy(w->cxs + (size_t) c * 2 * d, smp->x, (size_t) d * sizeof(double));
    memcpy(w->cxs + (size_t) c * 2 * d + d, smp->s, (size_t) d * sizeof(double));
    w->clp[c] = smp->lp;
}

/* Add state x, the n-th, to the running moments of A (M4 and M3 use the
 * sums before the update). */
static void moments_add(sample_args *A, int d, double n, const double *x)
{
    for (int k = 0; k < d; k++) {
        double delta = x[k] - A->mean[k], dn = delta / n, dn2 = dn * dn;
        double t1 = delta * dn * (n - 1.0);
        A->mean[k] += dn;
        A->m4[k] += t1 * dn2 * (n * n - 3.0 * n + 3.0) + 6.0 * dn2 * A->m2[k]
            - 4.0 * dn * A->m3[k];
        A->m3[k] += t1 * dn * (n - 2.0) - 3.0 * dn * A->m2[k];
        A->m2[k] += t1;
    }
}

static SEXP sample_body(void *data)
{
    sample_args *A = (sample_args *) data;
    ksdt_state *st = A->st;
    kb_ksdt_feed *f = &A->feed;
    int d = kb_ksdt_d(st), C = f->C, total = A->n_iter * C;
    /* the regularised candidate rule: each candidate's log p (the
     * sampler's) and Laplacian term (2d score evaluations) */
    int reg = f->reg != KB_REG_NONE && C > 1;
    sample_scratch w = scratch_alloc(d, C);
    kb_ksdt_feed_start(st, f, A->n_iter);
    kb_sampler smp;
    GetRNGstate();
    PROTECT(kb_sampler_init(&smp, A->type, A->rho, A->vec, d, A->x0, A->h));
    for (int it = 0; it < total; it++) {
        int c = it % C;
        if (A->restart && c == 0 && kb_ksdt_size(st) > 0 &&
            A->start != KB_START_LAST) {
            kb_ksdt_start_point(st, A->start, w.pt, w.pt + d);
            kb_sampler_jump(&smp, w.pt, w.pt + d);
        }
        kb_sampler_step(&smp);
        kb_sampler_score(&smp);
        moments_add(A, d, it + 1.0, smp.x);
        const double *sx = smp.x, *ss = smp.s;
        if (A->scale) {
            scale_row(d, A->scale, 0, smp.x, w.sx);
            scale_row(d, A->scale, 1, smp.s, w.sx + d);
            sx = w.sx;
            ss = w.sx + d;
        }
        to_kernel(d, A->Q, sx, w.ck);
        to_kernel(d, A->Q, ss, w.cks);
        if (A->restart)
            keep_candidate(&w, c, &smp);
        /* the stream offered to KSDT: the chain's states, or with restarts
         * the selected candidates, one per step */
        kb_ksdt_point p = {smp.x, smp.s, w.ck, w.cks, kb_ksdt_diag(st, w.cks),
                           f->base + (A->restart ? f->steps : it) + 1.0,
                           0.0, 0.0};
        if (reg) {
            p.lap = kb_sampler_laplacian_plus(&smp, w.fd, A->scale);
            p.logp = smp.lp;
        }
        if (kb_ksdt_feed_offer(st, f, &p, it + 1.0, it == total - 1) &&
            A->restart && C > 1)
            kb_sampler_set_state(&smp, w.cxs + (size_t) f->chosen * 2 * d,
                                 w.cxs + (size_t) f->chosen * 2 * d + d,
                                 w.clp[f->chosen]);
        kb_ksdt_feed_tick(st, f, (reg ? 2.0 + 2.0 * d : 2.0) * KB_CLOSURE_WORK,
                          f->steps, it == total - 1);
    }
    PutRNGstate();
    A->acc_rate = smp.proposed > 0 ? smp.accepted / smp.proposed : NA_REAL;
    A->step = smp.step;
    UNPROTECT(1);
    return R_NilValue;
}

/* The control list read into A (its moment sums allocated, zero). */
static void sample_read(sample_args *A, SEXP ptr, SEXP rho, SEXP ctl)
{
    kb_ksdt_feed *f = &A->feed;
    A->st = kb_ksdt_state(ptr);
    A->rho = rho;
    int d = kb_ksdt_d(A->st);
    A->type = kb_sampler_type(kb_list_elt(ctl, "sampler"));
    A->vec = kb_scalar_flag(kb_list_elt(ctl, "vectorized"), "vectorized");
    A->x0 = kb_arg_vector(kb_list_elt(ctl, "x0"), "x0", d);
    A->n_iter = kb_scalar_int(kb_list_elt(ctl, "n_iter"), "n_iter");
    A->h = kb_scalar_real(kb_list_elt(ctl, "step"), "step");
    f->C = kb_scalar_int(kb_list_elt(ctl, "candidates"), "candidates");
    A->start = kb_arg_choice(kb_list_elt(ctl, "start"), "start",
                             kb_start_rules);
    A->restart = kb_scalar_flag(kb_list_elt(ctl, "restart"), "restart");
    if (f->C < 1 || A->n_iter < 1 || (double) A->n_iter * f->C > INT_MAX)
        KB_INTERNAL("candidates and n_iter out of range");
    if (!A->restart && A->start != KB_START_LAST)
        KB_INTERNAL("start rules need restarts");
    kb_ksdt_feed_ctl(f, ctl, A->n_iter);
    SEXP Q = kb_list_elt(ctl, "Q");
    A->Q = Q == R_NilValue ? NULL : kb_arg_vector(Q, "Q", (R_xlen_t) d * d);
    SEXP scale = kb_list_elt(ctl, "scale");
    A->scale = scale == R_NilValue ? NULL : kb_arg_vector(scale, "scale", d);
    f->what = "chain state";
    f->count_diag = 0;
    A->mean = (double *) R_alloc((size_t) 4 * d, sizeof(double));
    A->m2 = A->mean + d;
    A->m3 = A->m2 + d;
    A->m4 = A->m3 + d;
    memset(A->mean, 0, (size_t) 4 * d * sizeof(double));
}

/* .Call entry: ctl = list(sampler, vectorized, x0, n_iter, step,
 * candidates, start, restart, eps, fmin, Q, scale (NULL or the column
 * scales of the standardisation), nthreads, progress) and, for
 * the regularised candidate rule, lambda or adaptive (kb_ksdt_feed_ctl).
 * Returns list(accept_rate, step, n, mean, m2, m3, m4): n, the column
 * means and sums of 2nd-4th powers of deviations of the states the chain
 * visited. */
SEXP kb_ksdt_sample(SEXP ptr, SEXP rho, SEXP ctl)
{
    sample_args A;
    sample_read(&A, ptr, rho, ctl);
    int d = kb_ksdt_d(A.st);
    kb_ksdt_hold(A.st);
    R_ExecWithCleanup(sample_body, &A, kb_ksdt_release, A.st);
    const char *nms[] = {"accept_rate", "step", "n", "mean", "m2", "m3", "m4",
                         ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(A.acc_rate));
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(A.step));
    SET_VECTOR_ELT(ans, 2, Rf_ScalarReal((double) A.n_iter * A.feed.C));
    for (int j = 0; j < 4; j++) {
        SEXP v = Rf_allocVector(REALSXP, d);
        SET_VECTOR_ELT(ans, 3 + j, v);
        memcpy(REAL(v), A.mean + (size_t) j * d, (size_t) d * sizeof(double));
    }
    UNPROTECT(1);
    return ans;
}
