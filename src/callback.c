/* R closures called from C: the call is built once, the argument vector
 * reused (a fresh one if the closure kept a reference to it), and every
 * result checked for type, length and finiteness.  The call is name(arg),
 * evaluated in an environment that binds name to the closure, so that an
 * error inside the closure reads "Error in score(...)" and names it. */
#include <time.h>
#include "callback.h"
#include "args.h"
#include "entries.h"

/* The symbol .Random.seed, looked up once. */
static SEXP seed_sym(void)
{
    static SEXP sym = NULL;
    if (sym == NULL)
        sym = Rf_install(".Random.seed");
    return sym;
}

/* Where a closure was called, for messages: "at row i of x" (x: the
 * closure's rows_of, what the caller calls the rows), or for row 0 (a point
 * of no x, e.g. a sampler's state or proposal) "at the point (x1, x2, x3,
 * x4, ...)". */
static const char *closure_where(char *buf, size_t size, const double *x,
                                 const kb_closure *cl, R_xlen_t row)
{
    int d = cl->d;
    if (row > 0) {
        snprintf(buf, size, "at row %lld of %s", (long long) row, cl->rows_of);
        return buf;
    }
    size_t used = (size_t) snprintf(buf, size, "at the point (");
    for (int k = 0; k < d && k < 4 && used < size; k++)
        used += (size_t) snprintf(buf + used, size - used, "%s%.6g",
                                  k ? ", " : "", x[k]);
    if (used < size)
        snprintf(buf + used, size - used, "%s)", d > 4 ? ", ..." : "");
    return buf;
}

SEXP kb_closure_init(kb_closure *cl, SEXP rho, int d, const char *what)
{
    cl->allow_neginf = 0;
    cl->rng = 0;
    if (!Rf_isEnvironment(rho))
        KB_INTERNAL("rho is not an environment");
    SEXP sym = Rf_install(what);
    if (!Rf_isFunction(Rf_findVarInFrame(rho, sym)))
        kb_error_arg(_("'%s' must be a function"), what);
    cl->row_matrix = 0;
    cl->arg = PROTECT(Rf_allocVector(REALSXP, d));
    cl->call = Rf_lang2(sym, cl->arg);
    cl->rho = rho;
    cl->what = what;
    cl->rows_of = "x";
    cl->d = d;
    UNPROTECT(1);
    return cl->call;
}

void kb_closure_eval(kb_closure *cl, const double *x, int len_out,
                     double *out, R_xlen_t row)
{
    if (MAYBE_REFERENCED(cl->arg)) {
        /* the closure kept the previous argument: give it a fresh one */
        cl->arg = Rf_allocVector(REALSXP, cl->d);
        SETCADR(cl->call, cl->arg);
        if (cl->row_matrix)
            kb_closure_row_matrix(cl);
    }
    memcpy(REAL(cl->arg), x, (size_t) cl->d * sizeof(double));
    /* a closure that draws (runif(), sample(), a Monte Carlo integral)
     * reads .Random.seed: without the Put it would restart from the state
     * of our GetRNGstate() and repeat the numbers the sampler drew since */
    SEXP seed = R_NilValue;
    if (cl->rng) {
        PutRNGstate();
        seed = Rf_findVarInFrame(R_GlobalEnv, seed_sym());
    }
    /* protected, so that a new .Random.seed cannot take its address */
    PROTECT(seed);
    SEXP res = PROTECT(R_forceAndCall(cl->call, 1, cl->rho));
    /* .Random.seed is a new object once anything drew (or set.seed() ran):
     * continue from where the closure left the generator */
    if (cl->rng && Rf_findVarInFrame(R_GlobalEnv, seed_sym()) != seed)
        GetRNGstate();
    if (TYPEOF(res) == INTSXP || TYPEOF(res) == LGLSXP)
        res = Rf_coerceVector(res, REALSXP);
    UNPROTECT(2);
    PROTECT(res);
    /* errors name the closure, not the internal function that called it;
     * they are "kb_error_callback" conditions */
    char loc[192];
    if (TYPEOF(res) != REALSXP)
        kb_error_class("kb_error_callback",
                       _("'%s' must return a numeric vector (%s); it returned "
                         "an object of type '%s'"), cl->what,
                       closure_where(loc, sizeof loc, x, cl, row),
                       Rf_type2char(TYPEOF(res)));
    if (XLENGTH(res) != len_out)
        kb_error_class("kb_error_callback",
                       _("'%s' returned a vector of length %lld %s; expected "
                         "length %d"), cl->what, (long long) XLENGTH(res),
                       closure_where(loc, sizeof loc, x, cl, row), len_out);
    const double *v = REAL(res);
    for (int k = 0; k < len_out; k++) {
        if (!R_FINITE(v[k]) && !(cl->allow_neginf && v[k] == R_NegInf))
            kb_error_class("kb_error_callback",
                           _("'%s' returned a non-finite value (NA, NaN or "
                             "Inf) %s"), cl->what,
                           closure_where(loc, sizeof loc, x, cl, row));
        out[k] = v[k];
    }
    UNPROTECT(1);
}

/* .Call entry: evaluate the closure bound to `what` in rho at each row of
 * the n x d matrix x; each call must return len_out finite numbers.
 * `rows_of` names the rows in messages (the caller's name for x).
 * Result: n x len_out matrix (a vector when len_out is 1). */
SEXP kb_eval_rows(SEXP x, SEXP len_out, SEXP what, SEXP rho,
                  SEXP allow_neginf, SEXP rows_of)
{
    int n = kb_arg_matrix(x, "x", -1, -1), d = Rf_ncols(x),
        lo = kb_scalar_int(len_out, "len_out");
    if (!Rf_isString(what) || XLENGTH(what) != 1)
        KB_INTERNAL("'what' must be a string");
    const char *name = CHAR(STRING_ELT(what, 0));
    kb_closure cl;
    PROTECT(kb_closure_init(&cl, rho, d, name));
    cl.allow_neginf = Rf_asLogical(allow_neginf) == TRUE;
    if (!Rf_isString(rows_of) || XLENGTH(rows_of) != 1)
        KB_INTERNAL("'rows_of' must be a string");
    cl.rows_of = CHAR(STRING_ELT(rows_of, 0));
    SEXP ans = PROTECT(lo == 1 ? Rf_allocVector(REALSXP, n)
                               : Rf_allocMatrix(REALSXP, n, lo));
    double *xi = (double *) R_alloc((size_t) d, sizeof(double));
    double *oi = (double *) R_alloc((size_t) lo, sizeof(double));
    const double *X = REAL(x);
    double *O = REAL(ans);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < d; k++)
            xi[k] = X[(R_xlen_t) k * n + i];
        kb_closure_eval(&cl, xi, lo, oi, i + 1);
        for (int k = 0; k < lo; k++)
            O[(R_xlen_t) k * n + i] = oi[k];
    }
    UNPROTECT(2);
    return ans;
}

void kb_closure_row_matrix(kb_closure *cl)
{
    SEXP dim = PROTECT(Rf_allocVector(INTSXP, 2));
    INTEGER(dim)[0] = 1;
    INTEGER(dim)[1] = cl->d;
    Rf_setAttrib(cl->arg, R_DimSymbol, dim);
    UNPROTECT(1);
    cl->row_matrix = 1;
}

void kb_call_progress(SEXP progress, double i, double size, double ksd)
{
    SEXP a1 = PROTECT(Rf_ScalarReal(i));
    SEXP a2 = PROTECT(Rf_ScalarReal(size));
    SEXP a3 = PROTECT(Rf_ScalarReal(ksd));
    SEXP call = PROTECT(Rf_lang4(progress, a1, a2, a3));
    Rf_eval(call, R_GlobalEnv);
    UNPROTECT(4);
}

void kb_progress_init(kb_progress *p, SEXP fn)
{
    p->fn = kb_arg_function(fn, "progress");
    p->last = (double) time(NULL);
}

void kb_progress_report(kb_progress *p, double done, double size, double ksd,
                        int force)
{
    if (p->fn == R_NilValue)
        return;
    double now = (double) time(NULL);
    if (now > p->last || force) {
        kb_call_progress(p->fn, done, size, ksd);
        p->last = now;
    }
}
