#' kernbayes: Kernel Methods for Bayesian Computation
#'
#' Stein kernels and the kernelized Stein discrepancy ([ksd()],
#' [ksd_path()], [stein_kernel_matrix()]) with a C core, for R closures that
#' give a target's log density and score ([kb_target()]).
#'
#' @section Options:
#' * `kernbayes.nthreads`: the default of every `nthreads` argument (1).
#'
#' @keywords internal
#' @useDynLib kernbayes, .registration = TRUE, .fixes = "C_"
"_PACKAGE"
