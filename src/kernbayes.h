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

/* Classed errors (R conditions inheriting from "kb_error"): the message is
 * formatted here and raised by R's kernbayes:::kb_signal().  Like Rf_error,
 * these do not return. */
void NORET kb_error_numeric(const char *fmt, ...);   /* "kb_error_numeric" */
void NORET kb_error_class(const char *cls, const char *fmt, ...);
void NORET kb_error_arg(const char *fmt, ...);       /* "kb_error_arg" */

/* Internal errors: conditions the R layer is supposed to rule out; the
 * message names the C function that met it. */
#define KB_INTERNAL(msg) \
    kb_error_class("kb_error_internal", \
                   _("kernbayes internal error in %s(): %s"), __func__, msg)

/* The other floors' headers: args.h (checks of what R hands to C),
 * runtime.h (threads, scratch, interrupts), entries.h (.Call entries). */

#endif
