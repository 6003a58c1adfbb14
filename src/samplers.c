/* Random walk Metropolis and MALA with R closures for the log density and
 * the score (DESIGN.md, "Samplers").  All randomness from R's RNG. */
#include <float.h>
#include <math.h>
#include "samplers.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

int kb_sampler_type(SEXP name)
{
    static const char *const types[] = {"rwm", "mala", NULL};
    return kb_arg_choice(name, "sampler", types);
}

SEXP kb_sampler_init(kb_sampler *smp, int type, SEXP rho, int vectorized,
                     int d, const double *x0, double step)
{
    smp->type = type;
    smp->d = d;
    smp->step = step;
    SEXP keep = PROTECT(Rf_allocVector(VECSXP, 2));
    SET_VECTOR_ELT(keep, 0, kb_closure_init(&smp->logd, rho, d, "log_density"));
    SET_VECTOR_ELT(keep, 1, kb_closure_init(&smp->grad, rho, d, "score"));
    smp->logd.allow_neginf = 1;
    /* the sampler draws between GetRNGstate() and PutRNGstate() */
    smp->logd.rng = smp->grad.rng = 1;
    if (vectorized) {
        kb_closure_row_matrix(&smp->logd);
        kb_closure_row_matrix(&smp->grad);
    }
    double *buf = (double *) R_alloc((size_t) 5 * d, sizeof(double));
    smp->x = buf;
    smp->s = buf + d;
    smp->y = buf + 2 * d;
    smp->sy = buf + 3 * d;
    smp->z = buf + 4 * d;
    memcpy(smp->x, x0, (size_t) d * sizeof(double));
    kb_closure_eval(&smp->logd, smp->x, 1, &smp->lp, 0);
    if (!R_FINITE(smp->lp))
        kb_error_arg(_("'x0' must be a point where the log "
                       "density is finite; it is %g there"),
                     smp->lp);
    smp->has_score = 0;
    if (type == KB_MALA)
        kb_sampler_score(smp);
    smp->accepted = smp->proposed = 0.0;
    smp->last_alpha = 0.0;
    UNPROTECT(1);
    return keep;
}

void kb_sampler_score(kb_sampler *smp)
{
    if (!smp->has_score) {
        kb_closure_eval(&smp->grad, smp->x, smp->d, smp->s, 0);
        smp->has_score = 1;
    }
}

/* H_kk = (s_k(x + h e_k) - s_k(x - h e_k)) / ((x_k + h) - (x_k - h)), with
 * R/targets.R's fd_step(): h = eps^(1/3) max(1, |x_k|). */
double kb_sampler_laplacian_plus(kb_sampler *smp, double *scratch,
                                 const double *scale)
{
    int d = smp->d;
    double *xe = scratch, *sp = scratch + d, *sm = scratch + 2 * d;
    double lap = 0.0, c = pow(DBL_EPSILON, 1.0 / 3.0);
    memcpy(xe, smp->x, (size_t) d * sizeof(double));
    for (int k = 0; k < d; k++) {
        double xk = smp->x[k], h = c * (fabs(xk) > 1.0 ? fabs(xk) : 1.0);
        double xp = xk + h, xm = xk - h;
        xe[k] = xp;
        kb_closure_eval(&smp->grad, xe, d, sp, 0);
        xe[k] = xm;
        kb_closure_eval(&smp->grad, xe, d, sm, 0);
        xe[k] = xk;
        double H = (sp[k] - sm[k]) / (xp - xm);
        /* standardised coordinates x_k / scale_k: H_kk scale_k^2 */
        if (H > 0.0)
            lap += scale ? H * (scale[k] * scale[k]) : H;
    }
    return lap;
}

void kb_sampler_jump(kb_sampler *smp, const double *x, const double *s)
{
    memcpy(smp->x, x, (size_t) smp->d * sizeof(double));
    memcpy(smp->s, s, (size_t) smp->d * sizeof(double));
    kb_closure_eval(&smp->logd, smp->x, 1, &smp->lp, 0);
    smp->has_score = 1;
}

void kb_sampler_set_state(kb_sampler *smp, const double *x, const double *s,
                          double lp)
{
    memcpy(smp->x, x, (size_t) smp->d * sizeof(double));
    memcpy(smp->s, s, (size_t) smp->d * sizeof(double));
    smp->lp = lp;
    smp->has_score = 1;
}

/* MALA proposal density log q(to | from) up to a constant:
 * -|to - from - (h^2/2) s(from)|^2 / (2 h^2).  Below h = 1e-100 it is
 * taken as -|v|^2 / 2 with v = (to - from) / h - (h/2) s(from): h^2
 * underflows to 0 below h = 1e-162 (and loses digits below 1e-154), which
 * made every ratio 0/0 and every proposal rejected.  Above, the direct form
 * is kept: chains are reproduced bit for bit by plain-R transcriptions of
 * it (tests/testthat/helper-reference.R), and MALA on a Gaussian amplifies
 * a last-bit change in an adapted step to 1e-9 within a hundred steps. */
static double mala_logq(int d, double h, const double *to, const double *from,
                        const double *sfrom)
{
    double acc = 0.0;
    if (h < 1e-100) {
        for (int k = 0; k < d; k++) {
            double v = (to[k] - from[k]) / h - 0.5 * h * sfrom[k];
            acc += v * v;
        }
        return -0.5 * acc;
    }
    double h2 = h * h;
    for (int k = 0; k < d; k++) {
        double u = to[k] - from[k] - 0.5 * h2 * sfrom[k];
        acc += u * u;
    }
    return -acc / (2.0 * h2);
}

void kb_sampler_step(kb_sampler *smp)
{
    const int d = smp->d;
    const double h = smp->step;
    for (int k = 0; k < d; k++)
        smp->z[k] = norm_rand();
    if (smp->type == KB_MALA) {
        for (int k = 0; k < d; k++)
            smp->y[k] = smp->x[k] + 0.5 * h * h * smp->s[k] + h * smp->z[k];
    } else {
        for (int k = 0; k < d; k++)
            smp->y[k] = smp->x[k] + h * smp->z[k];
    }
    /* a proposal beyond the doubles is the step's fault, not the closure's */
    for (int k = 0; k < d; k++)
        if (!R_FINITE(smp->y[k]))
            kb_error_class("kb_error_numeric",
                           _("the %s proposal left the finite range (coordinate "
                             "%d is %g): the step %g is too large for this "
                             "target; give a smaller 'step_size'"),
                           smp->type == KB_MALA ? "MALA" : "random walk",
                           k + 1, smp->y[k], h);
    kb_closure_eval(&smp->logd, smp->y, 1, &smp->lpy, 0);
    double loga = R_NegInf;
    if (smp->lpy > R_NegInf) {
        loga = smp->lpy - smp->lp;
        if (smp->type == KB_MALA) {
            kb_closure_eval(&smp->grad, smp->y, d, smp->sy, 0);
            loga += mala_logq(d, h, smp->x, smp->y, smp->sy) -
                mala_logq(d, h, smp->y, smp->x, smp->s);
        }
    }
    smp->proposed += 1.0;
    smp->last_alpha = loga >= 0.0 ? 1.0 : exp(loga);
    if (loga >= 0.0 || log(unif_rand()) < loga) {
        memcpy(smp->x, smp->y, (size_t) d * sizeof(double));
        smp->lp = smp->lpy;
        if (smp->type == KB_MALA) {
            memcpy(smp->s, smp->sy, (size_t) d * sizeof(double));
        } else {
            smp->has_score = 0;
        }
        smp->accepted += 1.0;
    }
}

/* Robbins-Monro adaptation of the step size towards an acceptance rate. */
static void adapt_step(kb_sampler *smp, double target, int iter)
{
    double gamma = 1.0 / pow(iter + 1.0, 0.6);
    smp->step *= exp(gamma * (smp->last_alpha - target));
}

/* The chain's output: x, score (or NULL), log_density, accept_rate, step. */
static SEXP chain_output(int n_iter, int d, int want_scores)
{
    const char *nms[] = {"x", "score", "log_density", "accept_rate", "step", ""};
    SEXP ans = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(ans, 0, Rf_allocMatrix(REALSXP, n_iter, d));
    if (want_scores)
        SET_VECTOR_ELT(ans, 1, Rf_allocMatrix(REALSXP, n_iter, d));
    SET_VECTOR_ELT(ans, 2, Rf_allocVector(REALSXP, n_iter));
    UNPROTECT(1);
    return ans;
}

/* Run the chain: warmup iterations (adapting the step towards `target`
 * when adapt is set), not kept, then n_iter kept in ans. */
static void run_chain(kb_sampler *smp, int warmup, int adapt, double target,
                      int n_iter, SEXP ans, kb_progress *prog)
{
    int d = smp->d, want_scores = VECTOR_ELT(ans, 1) != R_NilValue;
    double *X = REAL(VECTOR_ELT(ans, 0)), *LP = REAL(VECTOR_ELT(ans, 2)),
        *S = want_scores ? REAL(VECTOR_ELT(ans, 1)) : NULL;
    kb_ticker tk = KB_TICKER_INIT;
    for (int it = 0; it < warmup; it++) {
        kb_sampler_step(smp);
        if (adapt)
            adapt_step(smp, target, it);
        if (kb_tick(&tk, 2.0 * KB_CLOSURE_WORK))
            kb_progress_report(prog, it + 1.0, NA_REAL, NA_REAL, 0);
    }
    smp->accepted = smp->proposed = 0.0;
    for (int it = 0; it < n_iter; it++) {
        kb_sampler_step(smp);
        if (want_scores)
            kb_sampler_score(smp);
        for (int k = 0; k < d; k++) {
            X[(R_xlen_t) k * n_iter + it] = smp->x[k];
            if (want_scores)
                S[(R_xlen_t) k * n_iter + it] = smp->s[k];
        }
        LP[it] = smp->lp;
        if (kb_tick(&tk, 2.0 * KB_CLOSURE_WORK))
            kb_progress_report(prog, warmup + it + 1.0, NA_REAL, NA_REAL, 0);
    }
    kb_progress_report(prog, (double) warmup + n_iter, NA_REAL, NA_REAL, 1);
}

/* .Call entry: a chain.  rho binds log_density and score; ctl = list(
 * sampler, vectorized, x0, n_iter, step, warmup, adapt, target_accept,
 * scores, progress: a function(i, size, ksd) or NULL). */
SEXP kb_mcmc(SEXP rho, SEXP ctl)
{
    int type = kb_sampler_type(kb_list_elt(ctl, "sampler")),
        vec = kb_scalar_flag(kb_list_elt(ctl, "vectorized"), "vectorized"),
        n_iter = kb_scalar_int(kb_list_elt(ctl, "n_iter"), "n_iter"),
        warmup = kb_scalar_int(kb_list_elt(ctl, "warmup"), "warmup"),
        adapt = kb_scalar_flag(kb_list_elt(ctl, "adapt"), "adapt"),
        scores = kb_scalar_flag(kb_list_elt(ctl, "scores"), "scores");
    double step = kb_scalar_real(kb_list_elt(ctl, "step"), "step"),
        target = kb_scalar_real(kb_list_elt(ctl, "target_accept"),
                                "target_accept");
    SEXP x0 = kb_list_elt(ctl, "x0");
    kb_arg_vector(x0, "x0", -1);
    int d = (int) XLENGTH(x0);
    if (d < 1 || n_iter < 0 || warmup < 0)
        KB_INTERNAL("x0, n_iter or warmup out of range");
    kb_sampler smp;
    kb_progress prog;
    kb_progress_init(&prog, kb_list_elt(ctl, "progress"));
    GetRNGstate();
    PROTECT(kb_sampler_init(&smp, type, rho, vec, d, REAL(x0), step));
    SEXP ans = PROTECT(chain_output(n_iter, d, scores));
    run_chain(&smp, warmup, adapt, target, n_iter, ans, &prog);
    PutRNGstate();
    SET_VECTOR_ELT(ans, 3, Rf_ScalarReal(n_iter > 0 ? smp.accepted / smp.proposed : NA_REAL));
    SET_VECTOR_ELT(ans, 4, Rf_ScalarReal(smp.step));
    UNPROTECT(2);
    return ans;
}
