#include <stdarg.h>
#include <stdio.h>
#include "kernbayes.h"

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

void kb_error_arg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kb_signal_va("kb_error_arg", fmt, ap);
}
