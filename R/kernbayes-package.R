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
#' @section Points and samples:
#' Points are the rows of a numeric matrix, `n` points in `d` dimensions
#' making an `n x d` matrix; a data frame of numbers, a `coda::mcmc` or
#' `mcmc.list` and a posterior draws object are converted to their matrix of
#' draws. A plain numeric vector is read by one rule, the same everywhere:
#' * where a function takes one point (the start `x0` of [mala()], [rwm()],
#'   [ksdt_sample()] and [sp_mcmc()]), the vector is that point;
#' * where it takes points whose dimension `d` another argument fixes (a
#'   target's in [target_score()], [target_log_density()] and
#'   [ksdt_chains()]; a stream's in [ksdt_push()]; the fit's `y` in
#'   [predict.kb_kbr()] and the posterior summaries; the first sample's for
#'   a second one, such as scores, `prior` in [kbr()], `y` in
#'   [kernel_matrix()], [wasserstein2()] and [mmd_flow()], `y_obs` in
#'   [kbr_filter()]), a vector is one point when `d > 1` (its length must
#'   be `d`) and `n` one-dimensional points when `d = 1`;
#' * elsewhere (the first sample given to [kbr()], [kbr_cv()],
#'   [kbr_filter()], [kalman_filter()], [ksd()], [stein_thin()], [ksdt()],
#'   [kernel_matrix()], [svgd()] and the other flows), a vector is `n`
#'   one-dimensional points, an `n x 1` matrix.
#'
#' So `c(1, 2)` is two observations to `kbr(x = )`, and one point to
#' `target_score()` for a target of dimension 2 (two points for a target of
#' dimension 1). To give one point of dimension `d` where a sample is
#' expected, write `rbind(v)` or `matrix(v, nrow = 1)`.
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
