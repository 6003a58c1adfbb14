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
