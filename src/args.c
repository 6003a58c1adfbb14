/* The argument layer of the C floor (args.h). */
#include "args.h"

#define ARG_ERROR(...) kb_error_arg(__VA_ARGS__)

int kb_arg_matrix(SEXP x, const char *what, int nrow, int ncol)
{
    if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x))
        ARG_ERROR(_("'%s' must be a numeric matrix"), what);
    if (nrow >= 0 && Rf_nrows(x) != nrow)
        ARG_ERROR(_("'%s' must have %d rows, not %d"), what, nrow,
                  Rf_nrows(x));
    if (ncol >= 0 && Rf_ncols(x) != ncol)
        ARG_ERROR(_("'%s' must have %d columns, not %d"), what, ncol,
                  Rf_ncols(x));
    return Rf_nrows(x);
}

void kb_arg_points(SEXP x, SEXP s, const char *xwhat, const char *swhat,
                   int *n, int *d)
{
    *n = kb_arg_matrix(x, xwhat, -1, -1);
    *d = Rf_ncols(x);
    if (*d < 1)
        ARG_ERROR(_("'%s' must have at least one column"), xwhat);
    kb_arg_matrix(s, swhat, *n, *d);
}

int kb_arg_square(SEXP x, const char *what)
{
    int n = kb_arg_matrix(x, what, -1, -1);
    if (Rf_ncols(x) != n)
        ARG_ERROR(_("'%s' must be a square numeric matrix"), what);
    return n;
}

double *kb_arg_vector(SEXP x, const char *what, R_xlen_t len)
{
    if (TYPEOF(x) != REALSXP)
        ARG_ERROR(_("'%s' must be a numeric vector"), what);
    if (len >= 0 && XLENGTH(x) != len)
        ARG_ERROR(_("'%s' must have length %.0f, not %.0f"), what,
                  (double) len, (double) XLENGTH(x));
    return REAL(x);
}

double kb_scalar_real(SEXP x, const char *what)
{
    if ((TYPEOF(x) != REALSXP && TYPEOF(x) != INTSXP) || XLENGTH(x) != 1)
        ARG_ERROR(_("'%s' must be a single number"), what);
    double v = Rf_asReal(x);
    if (!R_FINITE(v))
        ARG_ERROR(_("'%s' must be finite"), what);
    return v;
}

int kb_scalar_int(SEXP x, const char *what)
{
    if ((TYPEOF(x) != REALSXP && TYPEOF(x) != INTSXP) || XLENGTH(x) != 1)
        ARG_ERROR(_("'%s' must be a single integer"), what);
    int v = Rf_asInteger(x);
    if (v == NA_INTEGER)
        ARG_ERROR(_("'%s' must not be NA"), what);
    return v;
}

int kb_scalar_flag(SEXP x, const char *what)
{
    if (TYPEOF(x) != LGLSXP || XLENGTH(x) != 1 ||
        LOGICAL(x)[0] == NA_LOGICAL)
        ARG_ERROR(_("'%s' must be TRUE or FALSE"), what);
    return LOGICAL(x)[0];
}

int kb_arg_choice(SEXP x, const char *what, const char *const *choices)
{
    if (TYPEOF(x) != STRSXP || XLENGTH(x) != 1 ||
        STRING_ELT(x, 0) == NA_STRING)
        ARG_ERROR(_("'%s' must be a single string"), what);
    const char *v = CHAR(STRING_ELT(x, 0));
    for (int i = 0; choices[i]; i++)
        if (strcmp(v, choices[i]) == 0)
            return i;
    ARG_ERROR(_("'%s' must be one of the names the R layer knows, not "
                "\"%s\""), what, v);
}

SEXP kb_arg_function(SEXP x, const char *what)
{
    if (x != R_NilValue && !Rf_isFunction(x))
        ARG_ERROR(_("'%s' must be a function or NULL"), what);
    return x;
}

R_xlen_t kb_first_nonfinite(const double *v, R_xlen_t n)
{
    for (R_xlen_t i = 0; i < n; i++)
        if (!R_FINITE(v[i]))
            return i;
    return -1;
}

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
