/* The Goodwin oscillator posterior (Chen et al. 2019, "Stein Point Markov
 * Chain Monte Carlo", Sec. 5; Riabiz et al. 2022, "Optimal thinning of MCMC
 * output", Appendix S5.2): two species, Hill exponent rho = 10,
 *   x1' = a1 / (1 + a2 x2^rho) - alpha x1,   x2' = k1 x1 - alpha x2,
 * x(0) = 0, theta = (a1, a2, k1, alpha).  The state is integrated together
 * with its forward sensitivities S = dx/dtheta (2 x 4),
 *   S' = (d f / d x) S + d f / d theta,
 * by an adaptive Dormand-Prince 5(4) method (Hairer, Norsett & Wanner,
 * "Solving ODEs I", Sec. II.5 and the code DOPRI5) that steps exactly onto
 * each observation time.  The log posterior is over log(theta). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include "kernbayes.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

#define GW_NEQ 10          /* 2 states + 2 x 4 sensitivities */
#define GW_NPAR 4
#define GW_RHO 10
#define GW_MAXSTEPS 100000 /* accepted + rejected steps per solve */

enum { GW_OK = 0, GW_MAXSTEP, GW_TINYSTEP, GW_NONFINITE };

/* Right-hand side of the augmented system.  z[0:2] = x, z[2 + i + 2 j] =
 * d x_i / d theta_j (the 2 x 4 sensitivity matrix, column-major).  The Hill
 * term needs x2^9 and x2^10, taken by repeated squaring; rho is even, so
 * 1 + a2 x2^rho >= 1 for a2 >= 0 even if a trial stage leaves x2 < 0. */
static void goodwin_rhs(const double *th, const double *z, double *dz)
{
    const double a1 = th[0], a2 = th[1], k1 = th[2], al = th[3];
    const double x1 = z[0], x2 = z[1];
    double p2 = x2 * x2, p4 = p2 * p2, p8 = p4 * p4;
    double p9 = p8 * x2, p10 = p9 * x2;
    double inv = 1.0 / (1.0 + a2 * p10);
    dz[0] = a1 * inv - al * x1;
    dz[1] = k1 * x1 - al * x2;
    /* d f1 / d x2 and d f / d theta */
    double j12 = -a1 * a2 * GW_RHO * p9 * inv * inv;
    double df1[GW_NPAR] = { inv, -a1 * p10 * inv * inv, 0.0, -x1 };
    double df2[GW_NPAR] = { 0.0, 0.0, x1, -x2 };
    for (int j = 0; j < GW_NPAR; j++) {
        double s1 = z[2 + 2 * j], s2 = z[3 + 2 * j];
        dz[2 + 2 * j] = -al * s1 + j12 * s2 + df1[j];
        dz[3 + 2 * j] = k1 * s1 - al * s2 + df2[j];
    }
}

/* Dormand-Prince 5(4) tableau; the nodes c_i are not needed, the system
 * being autonomous. */
static const double
    a21 = 1.0 / 5,
    a31 = 3.0 / 40, a32 = 9.0 / 40,
    a41 = 44.0 / 45, a42 = -56.0 / 15, a43 = 32.0 / 9,
    a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561,
    a54 = -212.0 / 729,
    a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247,
    a64 = 49.0 / 176, a65 = -5103.0 / 18656,
    a71 = 35.0 / 384, a73 = 500.0 / 1113, a74 = 125.0 / 192,
    a75 = -2187.0 / 6784, a76 = 11.0 / 84,
    e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920,
    e5 = -17253.0 / 339200, e6 = 22.0 / 525, e7 = -1.0 / 40;

/* Weighted RMS norm of v with scale atol + rtol * max(|y|, |ynew|). */
static double err_norm(const double *v, const double *y, const double *ynew,
                       double rtol, double atol)
{
    double acc = 0.0;
    for (int i = 0; i < GW_NEQ; i++) {
        double sc = atol + rtol * fmax(fabs(y[i]), fabs(ynew[i]));
        double r = v[i] / sc;
        acc += r * r;
    }
    return sqrt(acc / GW_NEQ);
}

/* What a solve needs besides theta: the nt non-decreasing observation
 * times (>= 0) and the tolerances. */
typedef struct {
    int nt;
    const double *times;
    double rtol, atol;
} gw_problem;

/* The solver's state: y, the step's stages k1..k7 (FSAL: k7 of an accepted
 * step is the next k1), a trial point and the error estimate. */
typedef struct {
    double y[GW_NEQ], ynew[GW_NEQ], k[7][GW_NEQ], ytmp[GW_NEQ],
        errv[GW_NEQ];
    double t, h, facold;
    long nstep;
} gw_solver;

/* One Dormand-Prince trial step of size S->h: the stages k2..k7 (k7 at
 * ynew), ynew and the weighted error norm.  The stages are written out:
 * a loop over the tableau is a third slower. */
static double dopri_step(const double *th, gw_solver *S, double rtol,
                         double atol)
{
    const double h = S->h, *y = S->y;
    double *k1 = S->k[0], *k2 = S->k[1], *k3 = S->k[2], *k4 = S->k[3],
        *k5 = S->k[4], *k6 = S->k[5], *k7 = S->k[6], *yt = S->ytmp;
    for (int i = 0; i < GW_NEQ; i++)
        yt[i] = y[i] + h * a21 * k1[i];
    goodwin_rhs(th, yt, k2);
    for (int i = 0; i < GW_NEQ; i++)
        yt[i] = y[i] + h * (a31 * k1[i] + a32 * k2[i]);
    goodwin_rhs(th, yt, k3);
    for (int i = 0; i < GW_NEQ; i++)
        yt[i] = y[i] + h * (a41 * k1[i] + a42 * k2[i] + a43 * k3[i]);
    goodwin_rhs(th, yt, k4);
    for (int i = 0; i < GW_NEQ; i++)
        yt[i] = y[i] + h * (a51 * k1[i] + a52 * k2[i] + a53 * k3[i] +
                            a54 * k4[i]);
    goodwin_rhs(th, yt, k5);
    for (int i = 0; i < GW_NEQ; i++)
        yt[i] = y[i] + h * (a61 * k1[i] + a62 * k2[i] + a63 * k3[i] +
                            a64 * k4[i] + a65 * k5[i]);
    goodwin_rhs(th, yt, k6);
    for (int i = 0; i < GW_NEQ; i++)
        S->ynew[i] = y[i] + h * (a71 * k1[i] + a73 * k3[i] + a74 * k4[i] +
                                 a75 * k5[i] + a76 * k6[i]);
    goodwin_rhs(th, S->ynew, k7);
    for (int i = 0; i < GW_NEQ; i++)
        S->errv[i] = h * (e1 * k1[i] + e3 * k3[i] + e4 * k4[i] +
                          e5 * k5[i] + e6 * k6[i] + e7 * k7[i]);
    return err_norm(S->errv, y, S->ynew, rtol, atol);
}

/* Start at x(0) = 0, S(0) = 0 with the initial step of Hairer et al.
 * (Sec. II.4): y(0) = 0, so the first guess is 1e-6, refined by one
 * explicit Euler step. */
static void gw_start(const double *th, gw_solver *S, double rtol, double atol)
{
    const double h0 = 1e-6;
    memset(S, 0, sizeof *S);
    S->facold = 1e-4;
    goodwin_rhs(th, S->y, S->k[0]);
    double d1 = err_norm(S->k[0], S->y, S->y, rtol, atol);
    for (int i = 0; i < GW_NEQ; i++)
        S->ytmp[i] = h0 * S->k[0][i];
    goodwin_rhs(th, S->ytmp, S->k[1]);
    for (int i = 0; i < GW_NEQ; i++)
        S->errv[i] = S->k[1][i] - S->k[0][i];
    double d2 = err_norm(S->errv, S->y, S->y, rtol, atol) / h0;
    double dm = fmax(d1, d2);
    double h1 = dm <= 1e-15 ? fmax(1e-6, h0 * 1e-3) : pow(0.01 / dm, 1.0 / 5.0);
    S->h = fmin(100.0 * h0, h1);
}

/* Advance to tout, stepping exactly onto it.  Returns GW_OK or a failure
 * code (S->t is then the time reached). */
static int gw_advance(const double *th, gw_solver *S, double tout,
                      double rtol, double atol, kb_ticker *tk)
{
    const double safe = 0.9, facmin = 0.2, facmax = 10.0, beta = 0.04;
    const double expo = 0.2 - 0.75 * beta;
    int code = GW_OK;
    while (S->t < tout) {
        if (++S->nstep > GW_MAXSTEPS) {
            code = GW_MAXSTEP;
            break;
        }
        if (S->nstep % 4096 == 0)
            kb_tick(tk, 4096.0 * 7.0 * 40.0 * GW_NEQ);
        /* land exactly on tout; remember the unclamped proposal */
        double hprop = S->h, t = S->t;
        int last = t + 1.01 * hprop >= tout;
        double h = last ? tout - t : hprop;
        /* a landing step may be as short as the gap to tout (observation
         * times 1e-15 apart, or a first time of 1e-15): taken as it is */
        if (!last && h <= 16.0 * DBL_EPSILON * fmax(fabs(t), 1.0)) {
            code = GW_TINYSTEP;
            break;
        }
        S->h = h;
        double err = dopri_step(th, S, rtol, atol);
        if (!R_FINITE(err)) {
            /* overflow in a trial stage: retreat sharply */
            S->h = h * facmin;
            continue;
        }
        /* step-size control with Lund stabilisation, as in DOPRI5 */
        double fac11 = pow(err, expo);
        if (err > 1.0) {
            S->h = h / fmin(1.0 / facmin, fac11 / safe);
            continue;
        }
        double fac = fac11 / pow(S->facold, beta);
        fac = fmax(1.0 / facmax, fmin(1.0 / facmin, fac / safe));
        S->facold = fmax(err, 1e-4);
        double hnew = h / fac;
        memcpy(S->y, S->ynew, GW_NEQ * sizeof(double));
        memcpy(S->k[0], S->k[6], GW_NEQ * sizeof(double)); /* FSAL */
        /* a short landing step says little about the scale */
        S->t = last ? tout : t + h;
        S->h = last ? fmax(hnew, hprop) : hnew;
    }
    return code;
}

/* Integrate from x(0) = 0, S(0) = 0 to each observation time.  Writes x
 * (nt x 2) and, unless NULL, sens (nt x 2 x 4), column-major.  Returns
 * GW_OK or a failure code, with the time reached in *t_fail.  Touches no
 * SEXP; may be interrupted by the user. */
static int goodwin_integrate(const double *th, const gw_problem *P, double *x,
                             double *sens, double *t_fail)
{
    gw_solver S;
    kb_ticker tk = KB_TICKER_INIT;
    int nt = P->nt;
    gw_start(th, &S, P->rtol, P->atol);
    for (int it = 0; it < nt; it++) {
        int code = gw_advance(th, &S, P->times[it], P->rtol, P->atol, &tk);
        for (int s = 0; s < 2 && code == GW_OK; s++) {
            if (!R_FINITE(S.y[s]))
                code = GW_NONFINITE;
            x[it + (size_t) nt * s] = S.y[s];
        }
        if (code != GW_OK) {
            *t_fail = S.t;
            return code;
        }
        if (sens != NULL)
            for (int j = 0; j < GW_NPAR; j++)
                for (int s = 0; s < 2; s++)
                    sens[it + (size_t) nt * s + (size_t) 2 * nt * j] =
                        S.y[2 + s + 2 * j];
    }
    return GW_OK;
}

/* A solver failure is a numeric error ("kb_error_numeric") naming theta. */
static void NORET goodwin_fail(int code, const double *th, double t_fail)
{
    const char *why =
        code == GW_MAXSTEP ? "more than 100000 steps were needed" :
        code == GW_TINYSTEP ? "the step size fell below machine precision" :
        "the solution is not finite";
    kb_error_numeric(_("Goodwin ODE solver failed at theta = (a1 = %g, "
                       "a2 = %g, k1 = %g, alpha = %g): %s (reached t = %g); "
                       "the ODE may be stiff for these parameters, the "
                       "time span too long, or 'rtol'/'atol' too small"),
                     th[0], th[1], th[2], th[3], why, t_fail);
}

/* The R layer has checked these arguments; the checks below guard C and
 * raise "kb_error_arg" conditions should they ever fire. */
static const double *checked_times(SEXP times, int *nt)
{
    if (TYPEOF(times) != REALSXP || XLENGTH(times) < 1 ||
        XLENGTH(times) > INT_MAX / 8)
        kb_error_arg(_("'times' must be a non-empty double vector"));
    const double *tt = REAL(times);
    *nt = (int) XLENGTH(times);
    for (int i = 0; i < *nt; i++)
        if (!R_FINITE(tt[i]) || tt[i] < 0.0 || (i > 0 && tt[i] < tt[i - 1]))
            kb_error_arg(_("'times' must be finite, non-negative and "
                             "non-decreasing"));
    return tt;
}

/* The problem: times and tolerances, checked. */
static gw_problem checked_problem(SEXP times, SEXP rtol, SEXP atol)
{
    gw_problem P;
    P.times = checked_times(times, &P.nt);
    P.rtol = kb_scalar_real(rtol, "rtol");
    P.atol = kb_scalar_real(atol, "atol");
    if (!(P.rtol > 0.0) || !(P.atol > 0.0))
        kb_error_arg(_("'rtol' and 'atol' must be positive"));
    return P;
}

/* list(a, b) with names na, nb. */
static SEXP named_pair(SEXP a, SEXP b, const char *na, const char *nb)
{
    PROTECT(a);
    PROTECT(b);
    const char *nms[] = {na, nb, ""};
    SEXP out = PROTECT(Rf_mkNamed(VECSXP, nms));
    SET_VECTOR_ELT(out, 0, a);
    SET_VECTOR_ELT(out, 1, b);
    UNPROTECT(3);
    return out;
}

static const double *checked_real(SEXP v, R_xlen_t len, int positive,
                                  const char *what)
{
    if (TYPEOF(v) != REALSXP || XLENGTH(v) != len)
        kb_error_arg(_("'%s' must be a double vector of length %d"), what,
                     (int) len);
    const double *p = REAL(v);
    for (R_xlen_t i = 0; i < len; i++)
        if (!R_FINITE(p[i]) || (positive && !(p[i] > 0.0)))
            kb_error_arg(positive ? _("'%s' must be finite and positive")
                                    : _("'%s' must be finite"), what);
    return p;
}

/* kb_goodwin_solve(theta, times, rtol, atol): list(x = nt x 2,
 * sens = nt x 2 x 4).  theta >= 0 is allowed here (a2 = 0 makes the
 * system linear, which the tests use); the R layer asks for theta > 0. */
SEXP kb_goodwin_solve(SEXP theta, SEXP times, SEXP rtol, SEXP atol)
{
    const double *th = checked_real(theta, GW_NPAR, 0, "theta");
    for (int j = 0; j < GW_NPAR; j++)
        if (th[j] < 0.0)
            kb_error_arg(_("'theta' must be non-negative"));
    gw_problem P = checked_problem(times, rtol, atol);
    SEXP x = PROTECT(Rf_allocMatrix(REALSXP, P.nt, 2));
    SEXP sens = PROTECT(Rf_alloc3DArray(REALSXP, P.nt, 2, GW_NPAR));
    double t_fail = 0.0;
    int code = goodwin_integrate(th, &P, REAL(x), REAL(sens), &t_fail);
    if (code != GW_OK)
        goodwin_fail(code, th, t_fail);
    SEXP out = named_pair(x, sens, "x", "sens");
    UNPROTECT(2);
    return out;
}

/* The data and prior of the log posterior: observations y (nt x 2), noise
 * sd (2), prior mean and sd of log(theta) (4 each); and scratch for one
 * solve: x (nt x 2), sens (nt x 2 x 4). */
typedef struct {
    const double *y, *sd, *pm, *ps;
    double *x, *sens;
} gw_data;

/* Log posterior over q = log(theta) and its gradient at one point:
 *   log p(q | y) = sum_{i,s} log N(y_is; x_s(t_i; theta), sd_s^2)
 *                  + sum_j log N(q_j; m_j, s_j^2),
 * i.e. theta_j log-normal a priori, which is a normal density for q_j
 * (no Jacobian term is left over).  The chain rule through the
 * sensitivities gives d/dq_j = theta_j d/dtheta_j.  A failed solve gives
 * the code, and lp, grad untouched. */
static int goodwin_logpost_one(const double *q, const gw_problem *P,
                               const gw_data *D, double *lp, double *grad)
{
    double th[GW_NPAR], t_fail = 0.0;
    int nt = P->nt;
    for (int j = 0; j < GW_NPAR; j++)
        th[j] = exp(q[j]);
    int code = goodwin_integrate(th, P, D->x, D->sens, &t_fail);
    if (code != GW_OK)
        return code;
    const double half_log_2pi = 0.5 * log(2.0 * M_PI);
    double ll = 0.0, dll[GW_NPAR] = { 0.0, 0.0, 0.0, 0.0 };
    for (int s = 0; s < 2; s++) {
        double prec = 1.0 / (D->sd[s] * D->sd[s]);
        ll -= nt * (log(D->sd[s]) + half_log_2pi);
        for (int i = 0; i < nt; i++) {
            double r = D->y[i + (size_t) nt * s] - D->x[i + (size_t) nt * s];
            ll -= 0.5 * r * r * prec;
            for (int j = 0; j < GW_NPAR; j++)
                dll[j] += r * prec *
                          D->sens[i + (size_t) nt * s + (size_t) 2 * nt * j];
        }
    }
    for (int j = 0; j < GW_NPAR; j++) {
        double z = (q[j] - D->pm[j]) / D->ps[j];
        ll -= 0.5 * z * z + log(D->ps[j]) + half_log_2pi;
        grad[j] = th[j] * dll[j] - z / D->ps[j];
    }
    *lp = ll;
    return GW_OK;
}

/* The log posterior and score at the n rows of Q (n x 4) into ld, sc. */
static void goodwin_logpost_rows(const double *Q, int n, const gw_problem *P,
                                 const gw_data *D, double *ld, double *sc)
{
    double q[GW_NPAR], g[GW_NPAR];
    kb_ticker tk = KB_TICKER_INIT;
    for (int r = 0; r < n; r++) {
        kb_tick(&tk, KB_CLOSURE_WORK);
        for (int j = 0; j < GW_NPAR; j++) {
            q[j] = Q[r + (size_t) n * j];
            if (!R_FINITE(q[j]))
                kb_error_arg(_("'x' must be finite (row %d)"), r + 1);
        }
        if (goodwin_logpost_one(q, P, D, ld + r, g) != GW_OK) {
            /* stiff parameters far out in the tails: a point of zero
             * density (a sampler rejects it) rather than an error that
             * would end the user's run */
            ld[r] = R_NegInf;
            for (int j = 0; j < GW_NPAR; j++)
                g[j] = 0.0;
        }
        for (int j = 0; j < GW_NPAR; j++)
            sc[r + (size_t) n * j] = g[j];
    }
}

/* kb_goodwin_logpost(logtheta, y, times, sd, prior_mean, prior_sd, rtol,
 * atol): list(log_density = n, score = n x 4) for the n rows of logtheta. */
SEXP kb_goodwin_logpost(SEXP logtheta, SEXP y, SEXP times, SEXP sd,
                        SEXP prior_mean, SEXP prior_sd, SEXP rtol, SEXP atol)
{
    int n = kb_arg_matrix(logtheta, "x", -1, GW_NPAR);
    gw_problem P = checked_problem(times, rtol, atol);
    gw_data D;
    D.y = checked_real(y, (R_xlen_t) 2 * P.nt, 0, "y");
    D.sd = checked_real(sd, 2, 1, "sd");
    D.pm = checked_real(prior_mean, GW_NPAR, 0, "prior_mean");
    D.ps = checked_real(prior_sd, GW_NPAR, 1, "prior_sd");
    D.x = (double *) R_alloc((size_t) 2 * P.nt, sizeof(double));
    D.sens = (double *) R_alloc((size_t) 2 * GW_NPAR * P.nt, sizeof(double));
    SEXP ld = PROTECT(Rf_allocVector(REALSXP, n));
    SEXP sc = PROTECT(Rf_allocMatrix(REALSXP, n, GW_NPAR));
    goodwin_logpost_rows(REAL(logtheta), n, &P, &D, REAL(ld), REAL(sc));
    SEXP out = named_pair(ld, sc, "log_density", "score");
    UNPROTECT(2);
    return out;
}
