#' kernbayes: Kernel Methods for Bayesian Computation
#'
#' Stein kernels and the kernelized Stein discrepancy ([ksd()],
#' [ksd_path()], [stein_kernel_matrix()]) with a C core, for R closures that
#' give a target's log density and score ([kb_target()]).
#'
#' @section Options:
#' * `kernbayes.nthreads`: the default of every `nthreads` argument (1).
#' * `kernbayes.max_memory`: the most memory (bytes) that one n x n workspace
#'   (KBR Gram matrices, the SVGD pair distances, DrMMD) may take; larger
#'   problems stop with an error naming the argument before allocating
#'   (default 16 GiB).
#'
#' @section Errors:
#' Errors are conditions of class `"kb_error"` and one of
#' `"kb_error_arg"` (an argument is wrong; the message names it),
#' `"kb_error_numeric"` (a computation overflowed or lost its meaning; the
#' message names the rows or the cause), `"kb_error_callback"` (a user
#' function failed or returned something unusable), `"kb_error_state"` (an
#' object, such as a saved-and-reloaded KSDT stream, cannot be used),
#' `"kb_error_memory"` or `"kb_error_internal"`, so that they can be caught
#' by class with `tryCatch()`.
#'
#' @keywords internal
#' @useDynLib kernbayes, .registration = TRUE, .fixes = "C_"
"_PACKAGE"
