#include <stdarg.h>
#include <stdio.h>
#include "kernbayes.h"
#ifdef _OPENMP
#include <omp.h>
#endif

SEXP kb_list_elt(SEXP list, const char *name)
{
    SEXP names = Rf_getAttrib(list, R_NamesSymbol);
    if (TYPEOF(list) != VECSXP || names == R_NilValue)
        return R_NilValue;
    R_xlen_t n = XLENGTH(list);
    for (R_xlen_t i = 0; i < n; i++)
        if (strcmp(CHAR(STRING_ELT(names, i)), name) == 0)
            return VECTOR_ELT(list, i);
    return R_NilValue;
}

double kb_scalar_real(SEXP x, const char *what)
{
    if ((TYPEOF(x) != REALSXP && TYPEOF(x) != INTSXP) || XLENGTH(x) != 1)
        Rf_error(_("'%s' must be a single number"), what);
    double v = Rf_asReal(x);
    if (!R_FINITE(v))
        Rf_error(_("'%s' must be finite"), what);
    return v;
}

int kb_scalar_int(SEXP x, const char *what)
{
    if ((TYPEOF(x) != REALSXP && TYPEOF(x) != INTSXP) || XLENGTH(x) != 1)
        Rf_error(_("'%s' must be a single integer"), what);
    int v = Rf_asInteger(x);
    if (v == NA_INTEGER)
        Rf_error(_("'%s' must not be NA"), what);
    return v;
}

int kb_nthreads(SEXP nthreads)
{
    int nt = kb_scalar_int(nthreads, "nthreads");
    if (nt < 1)
        nt = 1;
#ifdef _OPENMP
    int np = omp_get_num_procs();
    if (nt > np)
        nt = np;
#else
    nt = 1;
#endif
    return nt;
}

/* Raise the R condition of class cls (plus "kb_error", "error",
 * "condition") through kernbayes:::kb_signal(message, class). */
static void NORET kb_signal_va(const char *cls, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    SEXP ns = PROTECT(R_FindNamespace(Rf_mkString("kernbayes")));
    SEXP fn = PROTECT(Rf_findFun(Rf_install("kb_signal"), ns));
    SEXP m = PROTECT(Rf_mkString(msg)), c = PROTECT(Rf_mkString(cls));
    SEXP call = PROTECT(Rf_lang3(fn, m, c));
    Rf_eval(call, ns);
    UNPROTECT(5);
    Rf_error("%s", msg);   /* not reached: kb_signal() always signals */
}

void kb_error_class(const char *cls, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kb_signal_va(cls, fmt, ap);
}

void kb_error_numeric(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kb_signal_va("kb_error_numeric", fmt, ap);
}
