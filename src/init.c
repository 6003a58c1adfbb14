/* Registration of the .Call entry points, nothing else. */
#include "entries.h"

#define CALLDEF(name, n) {#name, (DL_FUNC) &name, n}

static const R_CallMethodDef CallEntries[] = {
    CALLDEF(kb_stein_matrix, 4),
    CALLDEF(kb_stein_sums, 5),
    CALLDEF(kb_phi, 2),
    CALLDEF(kb_gram, 4),
    CALLDEF(kb_kbr_fit, 6),
    CALLDEF(kb_kbr_filter, 8),
    CALLDEF(kb_svgd_phi, 4),
    CALLDEF(kb_svgd_median, 4),
    CALLDEF(kb_stein_block_sums, 7),
    CALLDEF(kb_stein_cross_sums, 6),
    CALLDEF(kb_gof_quad, 8),
    CALLDEF(kb_gof_lags, 6),
    CALLDEF(kb_fssd_moments, 5),
    CALLDEF(kb_cross_kernel, 5),
    CALLDEF(kb_self_kernel, 4),
    CALLDEF(kb_ksd_grad, 4),
    CALLDEF(kb_mied_grad, 7),
    CALLDEF(kb_kbr_mu, 3),
    CALLDEF(kb_kbr_apply, 6),
    CALLDEF(kb_kbr_weights, 5),
    CALLDEF(kb_kbr_cv, 4),
    CALLDEF(kb_eval_rows, 6),
    CALLDEF(kb_eigen_sym, 2),
    CALLDEF(kb_stein_thin, 8),
    CALLDEF(kb_mmd_thin, 7),
    CALLDEF(kb_simplex_weights, 4),
    CALLDEF(kb_ksdt_new, 2),
    CALLDEF(kb_ksdt_push, 3),
    CALLDEF(kb_ksdt_fail_alloc, 2),
    CALLDEF(kb_ksdt_dim, 1),
    CALLDEF(kb_ksdt_result, 1),
    CALLDEF(kb_ksdt_info, 1),
    CALLDEF(kb_mcmc, 2),
    CALLDEF(kb_ksdt_sample, 3),
    CALLDEF(kb_goodwin_solve, 4),
    CALLDEF(kb_goodwin_logpost, 8),
    CALLDEF(kb_assign, 1),
    CALLDEF(kb_kernel_thin, 6),
    CALLDEF(kb_compresspp, 4),
    CALLDEF(kb_kt_refine, 5),
    CALLDEF(kb_kernel_thin_rows, 5),
    CALLDEF(kb_thread_team, 1),
    CALLDEF(kb_simd, 1),
    {NULL, NULL, 0}
};

void R_init_kernbayes(DllInfo *dll)
{
    R_registerRoutines(dll, NULL, CallEntries, NULL, NULL);
    R_useDynamicSymbols(dll, FALSE);
    R_forceSymbols(dll, TRUE);
}
