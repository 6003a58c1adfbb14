/* Samplers with KSDT inside: ksdt_sample() and Stein Point MCMC (sp_mcmc()),
 * an MCMC chain (samplers.h) feeding a KSDT dictionary (ksdt.h). */
#include <time.h>
#include "ksdt.h"
#include "samplers.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

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
 *   `cand` fresh moves from a start chosen by rule (1 last added point,
 *   2 a random dictionary point, 3 the point of least influence
 *   argmin_i 2 r_i - k_p(x_i, x_i), Chen et al. 2019) and continuing from
 *   the selected candidate. */
typedef struct {
    ksdt_state *st;
    SEXP rho, eps, fmin, progress;
    int vec, type, n_iter, C, start, restart, nt, d;
    double h;
    const double *x0, *Q;
    double acc_rate, step;
} sample_args;

static SEXP sample_body(void *data)
{
    sample_args *A = (sample_args *) data;
    ksdt_state *st = A->st;
    int d = A->d, nt = A->nt, C = A->C, n_iter = A->n_iter;
    const double *Q = A->Q;
    double *ck = (double *) R_alloc((size_t) 2 * d, sizeof(double)),
        *cks = ck + d;
    double *clp = (double *) R_alloc((size_t) C, sizeof(double));
    double *cxs = (double *) R_alloc((size_t) 2 * C * d, sizeof(double));
    kb_ksdt_reserve(st, n_iter);
    kb_cblock cb;
    kb_ksdt_block_init(st, &cb);
    kb_sampler smp;
    GetRNGstate();
    kb_sampler_init(&smp, A->type, A->rho, A->vec, d, A->x0, A->h);
    time_t last = time(NULL);
    double since = 0.0, base = kb_ksdt_offered(st);
    double *pt = (double *) R_alloc((size_t) 2 * d, sizeof(double));
    int blk = 0, total = n_iter * C;
    for (int it = 0; it < total; it++) {
        double e0 = kb_ksdt_evals(st);
        int c = A->restart ? it % C : cb.filled;
        if (A->restart && c == 0 && kb_ksdt_size(st) > 0 && A->start != 1) {
            kb_ksdt_start_point(st, A->start, pt, pt + d);
            kb_sampler_jump(&smp, pt, pt + d);
        }
        kb_sampler_step(&smp);
        kb_sampler_score(&smp);
        to_kernel(d, Q, smp.x, ck);
        to_kernel(d, Q, smp.s, cks);
        /* the stream offered to KSDT: the chain's states, or with restarts
         * the selected candidates, one per step */
        double kd = kb_ksdt_diag(st, cks),
            sidx = base + (A->restart ? blk : it) + 1.0;
        int rem;
        kb_ksdt_point p = {smp.x, smp.s, ck, cks, kd, sidx};
        if (C == 1) {
            rem = kb_ksdt_add(st, &p, REAL(A->eps)[blk], REAL(A->fmin)[blk], nt);
        } else {
            if (A->restart) {
                memcpy(cxs + (size_t) c * 2 * d, smp.x, (size_t) d * sizeof(double));
                memcpy(cxs + (size_t) c * 2 * d + d, smp.s, (size_t) d * sizeof(double));
                clp[c] = smp.lp;
            }
            if (kb_ksdt_block_offer(st, &cb, &p, nt) < 0)
                kb_ksdt_nonfinite(st, "chain state", it + 1.0,
                                  kb_ksdt_offered(st) - base);
            since += kb_ksdt_evals(st) - e0;
            if (cb.filled < C && it < total - 1)
                goto check;
            e0 = kb_ksdt_evals(st);
            int b = cb.best;
            rem = kb_ksdt_block_commit(st, &cb, REAL(A->eps)[blk],
                                       REAL(A->fmin)[blk], nt);
            if (A->restart)    /* continue from the selected candidate */
                kb_sampler_set_state(&smp, cxs + (size_t) b * 2 * d,
                                     cxs + (size_t) b * 2 * d + d, clp[b]);
        }
        if (rem < 0)
            kb_ksdt_nonfinite(st, "chain state", it + 1.0,
                              kb_ksdt_offered(st) - base);
        kb_ksdt_record(st, rem, sidx);
        blk++;
        since += kb_ksdt_evals(st) - e0;
    check:
        if (since > 4194304.0 || (it + 1) % 256 == 0 || it == total - 1) {
            R_CheckUserInterrupt();
            since = 0.0;
            time_t now = time(NULL);
            if (A->progress != R_NilValue && (now > last || it == total - 1)) {
                kb_call_progress(A->progress, blk, kb_ksdt_size(st),
                                 kb_ksdt_last_ksd(st));
                last = now;
            }
        }
    }
    PutRNGstate();
    A->acc_rate = smp.proposed > 0 ? smp.accepted / smp.proposed : NA_REAL;
    A->step = smp.step;
    UNPROTECT(2);              /* kb_sampler_init's */
    return R_NilValue;
}

SEXP kb_ksdt_sample(SEXP ptr, SEXP rho, SEXP vectorized, SEXP type_, SEXP x0,
                    SEXP n_iter_, SEXP step_, SEXP cand_, SEXP start_,
                    SEXP restart_, SEXP eps, SEXP fmin, SEXP Q_,
                    SEXP nthreads, SEXP progress)
{
    ksdt_state *st = kb_ksdt_state(ptr);
    sample_args A;
    A.st = st;
    A.d = kb_ksdt_d(st);
    A.nt = kb_nthreads(nthreads);
    A.type = kb_scalar_int(type_, "type");
    A.n_iter = kb_scalar_int(n_iter_, "n_iter");
    A.C = kb_scalar_int(cand_, "candidates");
    A.start = kb_scalar_int(start_, "start");
    A.restart = Rf_asLogical(restart_) == TRUE;
    A.h = kb_scalar_real(step_, "step");
    A.vec = Rf_asLogical(vectorized) == TRUE;
    A.rho = rho;
    A.eps = eps;
    A.fmin = fmin;
    A.progress = progress;
    if (TYPEOF(x0) != REALSXP || XLENGTH(x0) != A.d)
        Rf_error(_("'x0' must be a numeric vector of length %d"), A.d);
    A.x0 = REAL(x0);
    if (A.C < 1 || A.n_iter < 1)
        KB_INTERNAL("candidates and n_iter must be positive");
    if (!A.restart && A.start != 1)
        KB_INTERNAL("start rules need restarts");
    if ((double) A.n_iter * A.C > INT_MAX)
        KB_INTERNAL("too many moves");
    if (TYPEOF(eps) != REALSXP || XLENGTH(eps) != A.n_iter ||
        TYPEOF(fmin) != REALSXP || XLENGTH(fmin) != A.n_iter)
        KB_INTERNAL("budget and minimum size must have one value per step");
    A.Q = NULL;
    if (Q_ != R_NilValue) {
        if (TYPEOF(Q_) != REALSXP || XLENGTH(Q_) != (R_xlen_t) A.d * A.d)
            KB_INTERNAL("Q must be a d x d matrix");
        A.Q = REAL(Q_);
    }
    if (progress != R_NilValue && !Rf_isFunction(progress))
        KB_INTERNAL("progress must be a function or NULL");
    kb_ksdt_hold(st);
    R_ExecWithCleanup(sample_body, &A, kb_ksdt_release, st);
    const char *nms[] = {"accept_rate", "step", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_ScalarReal(A.acc_rate));
    SET_VECTOR_ELT(ans, 1, Rf_ScalarReal(A.step));
    UNPROTECT(1);
    return ans;
}

