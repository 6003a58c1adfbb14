/* Every .Call entry of kernbayes, declared once: included by init.c (which
 * registers them) and by each file that defines one, so the compiler checks
 * that a definition and its registration agree. */
#ifndef KB_ENTRIES_H
#define KB_ENTRIES_H

#include "kernbayes.h"

/* assign.c */
SEXP kb_assign(SEXP);

/* callback.c */
SEXP kb_eval_rows(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);

/* flows.c */
SEXP kb_svgd_phi(SEXP, SEXP, SEXP, SEXP);
SEXP kb_svgd_median(SEXP, SEXP, SEXP, SEXP);
SEXP kb_cross_kernel(SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_self_kernel(SEXP, SEXP, SEXP, SEXP);
SEXP kb_ksd_grad(SEXP, SEXP, SEXP, SEXP);
SEXP kb_mied_grad(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);

/* fssd.c */
SEXP kb_fssd_moments(SEXP, SEXP, SEXP, SEXP, SEXP);

/* gof.c */
SEXP kb_gof_quad(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_gof_lags(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);

/* goodwin.c */
SEXP kb_goodwin_solve(SEXP, SEXP, SEXP, SEXP);
SEXP kb_goodwin_logpost(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);

/* kbr.c */
SEXP kb_kbr_fit(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_kbr_filter(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_kbr_mu(SEXP, SEXP, SEXP);
SEXP kb_kbr_apply(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_kbr_weights(SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_kbr_cv(SEXP, SEXP, SEXP, SEXP);

/* kernels.c */
SEXP kb_gram(SEXP, SEXP, SEXP, SEXP);
SEXP kb_simd(SEXP);

/* ksdt.c */
SEXP kb_ksdt_new(SEXP, SEXP);
SEXP kb_ksdt_push(SEXP, SEXP, SEXP);
SEXP kb_ksdt_fail_alloc(SEXP, SEXP);
SEXP kb_ksdt_dim(SEXP);
SEXP kb_ksdt_result(SEXP);
SEXP kb_ksdt_info(SEXP);

/* linalg.c */
SEXP kb_eigen_sym(SEXP, SEXP);

/* samplers.c */
SEXP kb_mcmc(SEXP, SEXP);

/* spmcmc.c */
SEXP kb_ksdt_sample(SEXP, SEXP, SEXP);

/* stein.c */
SEXP kb_stein_matrix(SEXP, SEXP, SEXP, SEXP);
SEXP kb_stein_sums(SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_phi(SEXP, SEXP);
SEXP kb_stein_block_sums(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_stein_cross_sums(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);

/* thin.c */
SEXP kb_stein_thin(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_mmd_thin(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);

/* kt.c */
SEXP kb_kernel_thin(SEXP, SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_compresspp(SEXP, SEXP, SEXP, SEXP);
SEXP kb_kt_refine(SEXP, SEXP, SEXP, SEXP, SEXP);
SEXP kb_kernel_thin_rows(SEXP, SEXP, SEXP, SEXP, SEXP);

/* weights.c */
SEXP kb_simplex_weights(SEXP, SEXP, SEXP, SEXP);

/* runtime.c */
SEXP kb_thread_team(SEXP);

#endif
