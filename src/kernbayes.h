/* Internal header shared by every C file of kernbayes: R headers, i18n and
 * small utilities.  Each layer has its own header below this one. */
#ifndef KERNBAYES_H
#define KERNBAYES_H

#define R_NO_REMAP
#define USE_FC_LEN_T
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

#ifdef ENABLE_NLS
#include <libintl.h>
#define _(String) dgettext("kernbayes", String)
#else
#define _(String) (String)
#endif

/* Below this many kernel evaluations in a parallel region, threads cost
 * more than they save (and spin idly on a busy machine): run serially. */
#define KB_PAR_MIN_EVALS 65536.0

/* Classed errors (R conditions inheriting from "kb_error"): the message is
 * formatted here and raised by R's kernbayes:::kb_signal().  Like Rf_error,
 * these do not return. */
void NORET kb_error_numeric(const char *fmt, ...);   /* "kb_error_numeric" */
void NORET kb_error_class(const char *cls, const char *fmt, ...);

/* Internal errors: conditions the R layer is supposed to rule out. */
#define KB_INTERNAL(msg) \
    kb_error_class("kb_error_internal", _("kernbayes internal error: %s"), msg)

/* Look up a list element by name; R_NilValue when absent. */
SEXP kb_list_elt(SEXP list, const char *name);
/* Checked scalar extraction (the R layer has validated; these guard C). */
double kb_scalar_real(SEXP x, const char *what);
int kb_scalar_int(SEXP x, const char *what);
/* Thread count: at least 1, at most the number of processors. */
int kb_nthreads(SEXP nthreads);

#endif
