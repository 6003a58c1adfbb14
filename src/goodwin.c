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

/* Integrate from x(0) = 0, S(0) = 0 to each of the nt non-decreasing times
 * (>= 0).  Writes x (nt x 2) and sens (nt x 2 x 4), column-major.  work
 * holds 9 * GW_NEQ doubles.  Returns GW_OK or a failure code, with the time
 * reached in *t_fail.  Touches no SEXP; may be interrupted by the user. */
static int goodwin_integrate(const double *th, int nt, const double *times,
                             double rtol, double atol, double *x,
                             double *sens, double *work, double *t_fail)
{
    double *y = work, *ynew = work + GW_NEQ, *k1 = work + 2 * GW_NEQ,
           *k2 = work + 3 * GW_NEQ, *k3 = work + 4 * GW_NEQ,
           *k4 = work + 5 * GW_NEQ, *k5 = work + 6 * GW_NEQ,
           *k6 = work + 7 * GW_NEQ, *k7 = work + 8 * GW_NEQ;
    double ytmp[GW_NEQ], errv[GW_NEQ];
    const double safe = 0.9, facmin = 0.2, facmax = 10.0, beta = 0.04;
    const double expo = 0.2 - 0.75 * beta;
    double t = 0.0, facold = 1e-4, h = 0.0;
    long nstep = 0;

    for (int i = 0; i < GW_NEQ; i++)
        y[i] = 0.0;
    goodwin_rhs(th, y, k1);

    /* Initial step (Hairer et al., Sec. II.4): y(0) = 0, so the first
     * guess is 1e-6, refined by one explicit Euler step. */
    {
        const double h0 = 1e-6;
        double d1 = err_norm(k1, y, y, rtol, atol);
        for (int i = 0; i < GW_NEQ; i++)
            ytmp[i] = y[i] + h0 * k1[i];
        goodwin_rhs(th, ytmp, k2);
        for (int i = 0; i < GW_NEQ; i++)
            errv[i] = k2[i] - k1[i];
        double d2 = err_norm(errv, y, y, rtol, atol) / h0;
        double dm = fmax(d1, d2);
        double h1 = dm <= 1e-15 ? fmax(1e-6, h0 * 1e-3)
                                : pow(0.01 / dm, 1.0 / 5.0);
        h = fmin(100.0 * h0, h1);
    }

    for (int it = 0; it < nt; it++) {
        const double tout = times[it];
        while (t < tout) {
            if (++nstep > GW_MAXSTEPS) {
                *t_fail = t;
                return GW_MAXSTEP;
            }
            if (nstep % 4096 == 0)
                R_CheckUserInterrupt();
            /* land exactly on tout; remember the unclamped proposal */
            double hprop = h;
            int last = t + 1.01 * h >= tout;
            if (last)
                h = tout - t;
            if (h <= 16.0 * DBL_EPSILON * fmax(fabs(t), 1.0)) {
                *t_fail = t;
                return GW_TINYSTEP;
            }
            for (int i = 0; i < GW_NEQ; i++)
                ytmp[i] = y[i] + h * a21 * k1[i];
            goodwin_rhs(th, ytmp, k2);
            for (int i = 0; i < GW_NEQ; i++)
                ytmp[i] = y[i] + h * (a31 * k1[i] + a32 * k2[i]);
            goodwin_rhs(th, ytmp, k3);
            for (int i = 0; i < GW_NEQ; i++)
                ytmp[i] = y[i] + h * (a41 * k1[i] + a42 * k2[i] + a43 * k3[i]);
            goodwin_rhs(th, ytmp, k4);
            for (int i = 0; i < GW_NEQ; i++)
                ytmp[i] = y[i] + h * (a51 * k1[i] + a52 * k2[i] + a53 * k3[i] +
                                      a54 * k4[i]);
            goodwin_rhs(th, ytmp, k5);
            for (int i = 0; i < GW_NEQ; i++)
                ytmp[i] = y[i] + h * (a61 * k1[i] + a62 * k2[i] + a63 * k3[i] +
                                      a64 * k4[i] + a65 * k5[i]);
            goodwin_rhs(th, ytmp, k6);
            for (int i = 0; i < GW_NEQ; i++)
                ynew[i] = y[i] + h * (a71 * k1[i] + a73 * k3[i] + a74 * k4[i] +
                                      a75 * k5[i] + a76 * k6[i]);
            goodwin_rhs(th, ynew, k7);
            for (int i = 0; i < GW_NEQ; i++)
                errv[i] = h * (e1 * k1[i] + e3 * k3[i] + e4 * k4[i] +
                               e5 * k5[i] + e6 * k6[i] + e7 * k7[i]);
            double err = err_norm(errv, y, ynew, rtol, atol);
            if (!R_FINITE(err)) {
                /* overflow in a trial stage: retreat sharply */
                h *= facmin;
                continue;
            }
            /* step-size control with Lund stabilisation, as in DOPRI5 */
            double fac11 = pow(err, expo);
            if (err <= 1.0) {
                double fac = fac11 / pow(facold, beta);
                fac = fmax(1.0 / facmax, fmin(1.0 / facmin, fac / safe));
                facold = fmax(err, 1e-4);
                double hnew = h / fac;
                memcpy(y, ynew, GW_NEQ * sizeof(double));
                memcpy(k1, k7, GW_NEQ * sizeof(double)); /* FSAL */
                if (last) {
                    t = tout;
                    /* a short landing step says little about the scale */
                    h = fmax(hnew, hprop);
                } else {
                    t += h;
                    h = hnew;
                }
            } else {
                h /= fmin(1.0 / facmin, fac11 / safe);
            }
        }
        for (int s = 0; s < 2; s++) {
            if (!R_FINITE(y[s])) {
                *t_fail = t;
                return GW_NONFINITE;
            }
            x[it + (size_t) nt * s] = y[s];
        }
        if (sens != NULL)
            for (int j = 0; j < GW_NPAR; j++)
                for (int s = 0; s < 2; s++)
                    sens[it + (size_t) nt * s + (size_t) 2 * nt * j] =
                        y[2 + s + 2 * j];
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
                       "the ODE may be stiff for these parameters, or "
                       "'rtol'/'atol' too small"),
                     th[0], th[1], th[2], th[3], why, t_fail);
}

/* The R layer has checked these arguments; the checks below guard C and
 * raise "kb_error_arg" conditions should they ever fire. */
static const double *checked_times(SEXP times, int *nt)
{
    if (TYPEOF(times) != REALSXP || XLENGTH(times) < 1 ||
        XLENGTH(times) > INT_MAX / 8)
        kb_error_class("kb_error_arg",
                       _("'times' must be a non-empty double vector"));
    const double *tt = REAL(times);
    *nt = (int) XLENGTH(times);
    for (int i = 0; i < *nt; i++)
        if (!R_FINITE(tt[i]) || tt[i] < 0.0 || (i > 0 && tt[i] < tt[i - 1]))
            kb_error_class("kb_error_arg",
                           _("'times' must be finite, non-negative and "
                             "non-decreasing"));
    return tt;
}

static void checked_tols(SEXP rtol, SEXP atol, double *rt, double *at)
{
    *rt = kb_scalar_real(rtol, "rtol");
    *at = kb_scalar_real(atol, "atol");
    if (!(*rt > 0.0) || !(*at > 0.0))
        kb_error_class("kb_error_arg", _("'rtol' and 'atol' must be positive"));
}

static const double *checked_real(SEXP v, R_xlen_t len, int positive,
                                  const char *what)
{
    if (TYPEOF(v) != REALSXP || XLENGTH(v) != len)
        kb_error_class("kb_error_arg",
                       _("'%s' must be a double vector of length %d"), what,
                       (int) len);
    const double *p = REAL(v);
    for (R_xlen_t i = 0; i < len; i++)
        if (!R_FINITE(p[i]) || (positive && !(p[i] > 0.0)))
            kb_error_class("kb_error_arg",
                           positive ? _("'%s' must be finite and positive")
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
            kb_error_class("kb_error_arg",
                           _("'theta' must be non-negative"));
    int nt;
    const double *tt = checked_times(times, &nt);
    double rt, at;
    checked_tols(rtol, atol, &rt, &at);

    SEXP x = PROTECT(Rf_allocMatrix(REALSXP, nt, 2));
    SEXP sens = PROTECT(Rf_alloc3DArray(REALSXP, nt, 2, GW_NPAR));
    double *work = (double *) R_alloc(9 * GW_NEQ, sizeof(double));
    double t_fail = 0.0;
    int code = goodwin_integrate(th, nt, tt, rt, at, REAL(x), REAL(sens),
                                 work, &t_fail);
    if (code != GW_OK)
        goodwin_fail(code, th, t_fail);

    SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
    SEXP nms = PROTECT(Rf_allocVector(STRSXP, 2));
    SET_VECTOR_ELT(out, 0, x);
    SET_VECTOR_ELT(out, 1, sens);
    SET_STRING_ELT(nms, 0, Rf_mkChar("x"));
    SET_STRING_ELT(nms, 1, Rf_mkChar("sens"));
    Rf_setAttrib(out, R_NamesSymbol, nms);
    UNPROTECT(4);
    return out;
}

/* Log posterior over q = log(theta) and its gradient at one point:
 *   log p(q | y) = sum_{i,s} log N(y_is; x_s(t_i; theta), sd_s^2)
 *                  + sum_j log N(q_j; m_j, s_j^2),
 * i.e. theta_j log-normal a priori, which is a normal density for q_j
 * (no Jacobian term is left over).  The chain rule through the
 * sensitivities gives d/dq_j = theta_j d/dtheta_j. */
static int goodwin_logpost_one(const double *q, int nt, const double *times,
                               const double *y, const double *sd,
                               const double *pm, const double *ps,
                               double rtol, double atol, double *x,
                               double *sens, double *work, double *lp,
                               double *grad, double *th, double *t_fail)
{
    for (int j = 0; j < GW_NPAR; j++)
        th[j] = exp(q[j]);
    int code = goodwin_integrate(th, nt, times, rtol, atol, x, sens, work,
                                 t_fail);
    if (code != GW_OK)
        return code;
    const double half_log_2pi = 0.5 * log(2.0 * M_PI);
    double ll = 0.0, dll[GW_NPAR] = { 0.0, 0.0, 0.0, 0.0 };
    for (int s = 0; s < 2; s++) {
        double prec = 1.0 / (sd[s] * sd[s]);
        ll -= nt * (log(sd[s]) + half_log_2pi);
        for (int i = 0; i < nt; i++) {
            double r = y[i + (size_t) nt * s] - x[i + (size_t) nt * s];
            ll -= 0.5 * r * r * prec;
            for (int j = 0; j < GW_NPAR; j++)
                dll[j] += r * prec *
                          sens[i + (size_t) nt * s + (size_t) 2 * nt * j];
        }
    }
    for (int j = 0; j < GW_NPAR; j++) {
        double z = (q[j] - pm[j]) / ps[j];
        ll -= 0.5 * z * z + log(ps[j]) + half_log_2pi;
        grad[j] = th[j] * dll[j] - z / ps[j];
    }
    *lp = ll;
    return GW_OK;
}

/* kb_goodwin_logpost(logtheta, y, times, sd, prior_mean, prior_sd, rtol,
 * atol): list(log_density = n, score = n x 4) for the n rows of logtheta. */
SEXP kb_goodwin_logpost(SEXP logtheta, SEXP y, SEXP times, SEXP sd,
                        SEXP prior_mean, SEXP prior_sd, SEXP rtol, SEXP atol)
{
    if (TYPEOF(logtheta) != REALSXP || !Rf_isMatrix(logtheta) ||
        Rf_ncols(logtheta) != GW_NPAR)
        kb_error_class("kb_error_arg",
                       _("'x' must be a double matrix with 4 columns"));
    const int n = Rf_nrows(logtheta);
    const double *Q = REAL(logtheta);
    int nt;
    const double *tt = checked_times(times, &nt);
    const double *yy = checked_real(y, (R_xlen_t) 2 * nt, 0, "y");
    const double *sdv = checked_real(sd, 2, 1, "sd");
    const double *pm = checked_real(prior_mean, GW_NPAR, 0, "prior_mean");
    const double *ps = checked_real(prior_sd, GW_NPAR, 1, "prior_sd");
    double rt, at;
    checked_tols(rtol, atol, &rt, &at);

    SEXP ld = PROTECT(Rf_allocVector(REALSXP, n));
    SEXP sc = PROTECT(Rf_allocMatrix(REALSXP, n, GW_NPAR));
    double *pld = REAL(ld), *psc = REAL(sc);
    double *work = (double *) R_alloc(9 * GW_NEQ, sizeof(double));
    double *x = (double *) R_alloc((size_t) 2 * nt, sizeof(double));
    double *sens = (double *) R_alloc((size_t) 2 * GW_NPAR * nt,
                                      sizeof(double));
    double q[GW_NPAR], th[GW_NPAR], g[GW_NPAR];
    for (int r = 0; r < n; r++) {
        R_CheckUserInterrupt();
        for (int j = 0; j < GW_NPAR; j++) {
            q[j] = Q[r + (size_t) n * j];
            if (!R_FINITE(q[j]))
                kb_error_class("kb_error_arg",
                               _("'x' must be finite (row %d)"), r + 1);
        }
        double t_fail = 0.0;
        int code = goodwin_logpost_one(q, nt, tt, yy, sdv, pm, ps, rt, at,
                                       x, sens, work, pld + r, g, th,
                                       &t_fail);
        if (code != GW_OK) {
            /* stiff parameters far out in the tails: a point of zero
             * density (a sampler rejects it) rather than an error that
             * would end the user's run */
            pld[r] = R_NegInf;
            for (int j = 0; j < GW_NPAR; j++)
                g[j] = 0.0;
        }
        for (int j = 0; j < GW_NPAR; j++)
            psc[r + (size_t) n * j] = g[j];
    }

    SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
    SEXP nms = PROTECT(Rf_allocVector(STRSXP, 2));
    SET_VECTOR_ELT(out, 0, ld);
    SET_VECTOR_ELT(out, 1, sc);
    SET_STRING_ELT(nms, 0, Rf_mkChar("log_density"));
    SET_STRING_ELT(nms, 1, Rf_mkChar("score"));
    Rf_setAttrib(out, R_NamesSymbol, nms);
    UNPROTECT(4);
    return out;
}
