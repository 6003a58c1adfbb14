# Results convert: the points of every result class as a data frame, as
# posterior draws (draws_df, draws_matrix) and, for a chain, as coda::mcmc;
# the KSD of a result recomputed under its own kernel (ksd(result)); the
# sizes and effective sizes that summaries report.
#
# Conventions (documented in ?as_draws.kb_result):
# - a chain (kb_chain) keeps its chain and iteration as .chain / .iteration;
# - a set of points that is not a chain (a thinned selection, a KSDT
#   dictionary, particles) has no iteration order: each point is its own
#   chain of one iteration (.chain = .draw = 1..m in stored order,
#   .iteration = 1).  posterior then cannot compute a convergence
#   diagnostic of the stored order: rhat(), ess_bulk(), ess_tail() and the
#   MCSEs of summarise_draws() are NA on chains of one iteration (checked on
#   posterior 1.4.0; test-results.R asserts it), where one chain of m
#   "iterations" gave R-hat and ESS of the selection order.  posterior also
#   renumbers iterations that are not consecutive and cannot summarise
#   chains of unequal length, so a point's provenance (its chain and
#   iteration in the input) is not a label column either: it stays in the
#   result's fields and as.data.frame() (source_chain, source_iteration),
#   and enters the draws only with source = TRUE.
# - summarise_draws() of a selection (methods below) reports weighted
#   location and scale summaries and no convergence diagnostics.
# - weights become posterior's .log_weight (posterior::weight_draws()).
# - results of a Stan fit hold the unconstrained points and constrained
#   `draws`: scale = "constrained" (the default then) gives the draws.

# Result classes whose points convert and whose KSD ksd() recomputes.
result_classes <- c("kb_thin", "kb_ksdt", "kb_chain", "kb_particles",
                    "kb_ksdt_chains")

is_kb_result <- function(x) inherits(x, result_classes)

# The set of points a result stands for (kb_ksdt_chains: its merged
# dictionary).
result_set <- function(x, arg = "x") {
  if (inherits(x, "kb_ksdt_chains")) {
    if (is.null(x[["merged"]])) {
      stop_arg(arg, "has no merged dictionary (merge = \"none\", or the ",
               "merge failed): convert one chain's dictionary, e.g. ",
               "x$chains[[1]]")
    }
    return(x[["merged"]])
  }
  x
}

result_points <- function(x) {
  if (inherits(x, c("kb_chain", "kb_particles"))) x[["x"]] else x[["points"]]
}

# Variable names: the points' column names, else x1, x2, ...
point_names <- function(p) {
  cn <- colnames(p)
  if (is.null(cn) || anyNA(cn) || any(cn == "")) {
    cn <- paste0("x", seq_len(ncol(p)))
  }
  cn
}

# Chain and iteration of each point in the input, when the result knows
# them (a merged dictionary without them: the dictionary each point came
# from and its index there).
result_source <- function(x) {
  ch <- x[["chain"]]
  it <- x[["iteration"]]
  if (is.null(ch) && is.null(it) && is.data.frame(x[["source"]])) {
    ch <- x[["source"]]$dictionary
    it <- x[["source"]]$index
  }
  list(chain = ch, iteration = it)
}

# Check weights on the m points of a set (not normalised: posterior
# normalises them).
check_result_weights <- function(weights, m, arg = "weights") {
  if (!is.numeric(weights) || length(weights) != m) {
    stop_arg(arg, sprintf(paste0("must be a numeric vector with one weight ",
                                 "per point (%d); it has length %d"),
                          m, length(weights)))
  }
  check_weights(weights, m, arg)
  as.double(weights)
}

# Kish's effective sample size of weights, (sum w)^2 / sum w^2.
kish_size <- function(w) {
  w <- w / max(w)
  sum(w)^2 / sum(w^2)
}

# The draws table of a result: the variables (points, or constrained draws),
# with `source`, source_chain / source_iteration for a selection that knows
# them, then .chain, .iteration, .draw and, with weights, .log_weight, the
# columns and order of as.data.frame() of a weighted posterior::draws_df.
result_frame <- function(x, scale = NULL, weights = NULL, source = FALSE) {
  x <- result_set(x)
  p <- result_points(x)
  m <- nrow(p)
  draws <- x[["draws"]]
  scale <- if (is.null(scale)) {
    if (is.null(draws)) "unconstrained" else "constrained"
  } else {
    check_choice(scale, c("constrained", "unconstrained"), "scale")
  }
  source <- check_flag(source, "source")
  if (scale == "constrained" && !is.null(draws)) {
    vars <- setdiff(names(draws), c(".chain", ".iteration", ".draw",
                                    ".log_weight"))
    vals <- unclass(draws)[vars]
    if (length(vals[[1L]]) != m) {
      stop_arg("x", sprintf(paste0("has %d constrained draws for %d points: ",
                                   "its 'draws' field has been edited"),
                            length(vals[[1L]]), m))
    }
  } else {
    vars <- point_names(p)
    vals <- lapply(seq_len(ncol(p)), function(k) p[, k])
  }
  out <- stats::setNames(vals, vars)
  extra <- list()
  if (inherits(x, "kb_chain")) {
    ch <- x[["chain"]] %||% rep(1L, m)
    it <- x[["iteration"]] %||% seq_len(m)
  } else {
    if (source && !inherits(x, "kb_particles")) {
      src <- result_source(x)
      if (!is.null(src$chain)) extra$source_chain <- as.integer(src$chain)
      if (!is.null(src$iteration)) {
        extra$source_iteration <- as.integer(src$iteration)
      }
    }
    # not a chain: each point a chain of one iteration (see the top)
    ch <- seq_len(m)
    it <- rep(1L, m)
  }
  weights <- weights %||% x[["weights"]]
  # a variable named as a label column would be overwritten by the label
  # (a coordinate source_chain after a second round of thinning, a column
  # .chain of a matrix)
  clash <- intersect(vars, c(names(extra), ".chain", ".iteration", ".draw",
                             ".log_weight"))
  if (length(clash)) {
    many <- length(clash) > 1L
    stop_arg("x", sprintf(paste0(
      "has variable%s named %s, the name%s of label columns of the draws ",
      "table, which would overwrite %s: rename the columns of its points%s"),
      if (many) "s" else "", paste(clash, collapse = ", "),
      if (many) "s" else "", if (many) "them" else "it",
      if (any(startsWith(clash, "source_"))) " or convert with source = FALSE"
      else ""))
  }
  out[names(extra)] <- extra
  out$.chain <- as.integer(ch)
  out$.iteration <- as.integer(it)
  out$.draw <- seq_len(m)
  if (!is.null(weights)) {
    out$.log_weight <- log(check_result_weights(weights, m))
  }
  structure(out, class = "data.frame", row.names = seq_len(m))
}

need_posterior <- function() {
  if (!requireNamespace("posterior", quietly = TRUE)) {
    stop(kb_error("package 'posterior' is needed to convert to draws",
                  "kb_error_state"))
  }
}

result_draws_df <- function(x, scale = NULL, weights = NULL, source = FALSE) {
  need_posterior()
  posterior::as_draws_df(result_frame(x, scale, weights, source))
}

#' Convert results to data frames and posterior draws
#'
#' The points of a chain ([mala()], [rwm()]), a thinned set
#' ([stein_thin()], [mmd_thin()], [stein_thin_gf()]), a KSDT dictionary
#' ([ksdt()], [ksdt_sample()], [sp_mcmc()], merged dictionaries and the
#' merged dictionary of [ksdt_chains()]) or particles (the flows) as a
#' `posterior` draws object or a data frame, with their labels and
#' weights. Values are copied unchanged: converting back with
#' `as.matrix()` gives the points exactly.
#'
#' **Chains and selections.** A chain keeps its chain and iteration as
#' `.chain` and `.iteration` (chain 1, iterations 1 to `n_iter` for a
#' `kb_chain` without labels). A thinned set, a dictionary or a set of
#' particles is *not* a chain: its rows are a selection (or a set of
#' particles), and their order is no iteration order. Each point is
#' therefore its own chain of one iteration: `.chain = .draw = 1..m` in
#' stored order (selection order for a thinned set, stream order for a
#' dictionary) and `.iteration = 1`. On such draws posterior computes no
#' convergence diagnostic: `posterior::summarise_draws()` reports `NA` for
#' `rhat`, `ess_bulk` and `ess_tail` (and the MCSEs), where one chain of
#' `m` "iterations" gave R-hat and effective sizes of the selection order,
#' numbers that describe nothing. Compute those on the chains the points
#' came from. (posterior would also renumber a selection's iterations,
#' which are neither consecutive nor, after Stein thinning, distinct, and
#' cannot summarise chains of unequal length.) Given back to this package
#' ([ksd()], [stein_thin()], [ksdt()], ...), draws whose every chain has one
#' iteration are points without chain labels, as a matrix is.
#' `posterior::resample_draws()` merges the chains first (with a message).
#'
#' **Provenance.** Where each selected point came from (its chain and
#' iteration in the input when the result knows them; for a merged
#' dictionary without them, the dictionary each point came from and its
#' index there) stays in the result's fields (`chain`, `iteration`,
#' `source`) and in `as.data.frame()`, as the columns `source_chain` and
#' `source_iteration`. It is not a variable of `as_draws_df()` or
#' `as_draws_matrix()`, where it would be summarised and plotted as a
#' parameter, unless asked with `source = TRUE`.
#'
#' **Summaries.** `posterior::summarise_draws()` of a thinned set, a
#' dictionary, a `ksdt_chains()` result (its merged dictionary) or
#' particles gives, per variable, the mean, median, standard deviation,
#' MAD and 5% and 95% quantiles of the points, weighted when the result has
#' weights (or `weights` is given): the weighted mean, the standard
#' deviation with the reliability-weights correction
#' \eqn{\sum_i w_i (x_i - \bar x)^2 / (1 - \sum_i w_i^2)} (weights
#' normalised; the usual \eqn{n - 1} denominator for equal weights),
#' quantiles interpolating the sorted points placed at
#' \eqn{(W_k - w_k/2 - w_{(1)}/2) / (1 - w_{(1)}/2 - w_{(n)}/2)}, where
#' \eqn{W_k} is the cumulative weight of the \eqn{k} smallest points (for
#' equal weights R's default quantiles, `type = 7`, and the median), and
#' the MAD as 1.4826 times the weighted median of the absolute deviations
#' from the weighted median. For equal weights these equal posterior's own
#' `mean`, `median`, `sd`, `mad` and `quantile2`. There is no `rhat` or
#' `ess_*` column: a selection has no convergence to diagnose. Summary
#' functions given in `...` are passed to posterior's method on the
#' draws above (each point its own chain, so convergence measures come out
#' `NA`); posterior 1.4 ignores weights in them, so they are refused (an
#' error of class `kb_error_arg` naming `weights`) on a weighted set:
#' resample it first with [posterior::resample_draws()].
#'
#' **Weights.** `weights` (default: the result's `weights` field, which you
#' may set, e.g. `th$weights <- ksd_weights(th$points, th$score)`) are
#' attached with [posterior::weight_draws()] semantics (`.log_weight`, the
#' log of the weights; `stats::weights()` of the draws returns them
#' normalised). Summaries report Kish's effective size of the weights,
#' \eqn{(\sum w)^2 / \sum w^2}.
#' Zero weights (from `ksd_weights(nonneg = TRUE)`) give `-Inf` log weights,
#' which posterior accepts. posterior's summaries of a draws object
#' ignore weights (posterior 1.4); `summarise_draws()` of the result itself
#' uses them (see Summaries), and [posterior::resample_draws()] turns the
#' weighted draws into unweighted ones.
#'
#' **Stan fits.** A result made from a Stan fit holds its points on the
#' unconstrained scale and, in `draws`, the same points as constrained
#' draws. `scale = "constrained"` (the default when `draws` is present)
#' converts the constrained draws; `scale = "unconstrained"` the points.
#' Without `draws` both give the points.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_chain`, `kb_thin`, `kb_ksdt`, `kb_particles` or
#'   `kb_ksdt_chains` (its merged dictionary) object.
#' @param scale `NULL` (constrained draws when the result has them, else
#'   the points), `"constrained"` or `"unconstrained"`.
#' @param weights `NULL` (the result's `weights` field, if any) or
#'   non-negative weights, one per point.
#' @param source Add `source_chain` and `source_iteration` to a selection
#'   when they are known: default `FALSE` for `as_draws_df()` and
#'   `as_draws_matrix()` (provenance is no parameter), `TRUE` for
#'   `as.data.frame()`.
#' @param .x For `summarise_draws()`: a `kb_thin`, `kb_ksdt`,
#'   `kb_ksdt_chains` or `kb_particles` object.
#' @param row.names,optional Ignored (for [as.data.frame()]).
#' @param ... Ignored, except by `summarise_draws()`: summary functions
#'   and posterior's `.args`, `.num_args` and `.cores` (see
#'   [posterior::summarise_draws()]).
#' @return `as_draws_df()`: a `posterior::draws_df`; `as_draws_matrix()`
#'   and `as_draws()`: a `posterior::draws_matrix` (as posterior's
#'   `as_draws()` gives for a matrix); `as.data.frame()`: a
#'   data frame with the columns of `as.data.frame(as_draws_df(x))`
#'   (variables, `source_*`, `.chain`, `.iteration`, `.draw`,
#'   `.log_weight` with weights), without needing posterior;
#'   `summarise_draws()`: a `posterior::draws_summary` (a tibble) with
#'   columns `variable`, `mean`, `median`, `sd`, `mad`, `q5`, `q95`.
#' @seealso [as.mcmc.kb_chain()] for coda; [ksd()] on a result.
#' @name as_draws.kb_result
#' @examplesIf requireNamespace("posterior", quietly = TRUE)
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' ch <- mala(tg, x0 = c(2, 2), n_iter = 500)
#' posterior::as_draws_df(ch)
#' th <- stein_thin(ch$x, ch$score, m = 10)
#' d <- posterior::as_draws_df(th, weights = ksd_weights(th$points, th$score))
#' stats::weights(d)
#' head(as.data.frame(th))
#' # weighted summaries, without R-hat or ESS of the selection order
#' th$weights <- ksd_weights(th$points, th$score)
#' posterior::summarise_draws(th)
NULL

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_df
as_draws_df.kb_chain <- function(x, scale = NULL, weights = NULL,
                                 source = FALSE, ...) {
  check_result(x)
  result_draws_df(x, scale, weights, source)
}

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_df
as_draws_df.kb_thin <- as_draws_df.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_df
as_draws_df.kb_ksdt <- as_draws_df.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_df
as_draws_df.kb_particles <- as_draws_df.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_df
as_draws_df.kb_ksdt_chains <- as_draws_df.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_matrix
as_draws_matrix.kb_chain <- function(x, scale = NULL, weights = NULL,
                                     source = FALSE, ...) {
  check_result(x)
  posterior::as_draws_matrix(result_draws_df(x, scale, weights, source))
}

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_matrix
as_draws_matrix.kb_thin <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_matrix
as_draws_matrix.kb_ksdt <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_matrix
as_draws_matrix.kb_particles <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws_matrix
as_draws_matrix.kb_ksdt_chains <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws
as_draws.kb_chain <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws
as_draws.kb_thin <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws
as_draws.kb_ksdt <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws
as_draws.kb_particles <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::as_draws
as_draws.kb_ksdt_chains <- as_draws_matrix.kb_chain

#' @rdname as_draws.kb_result
#' @export
as.data.frame.kb_chain <- function(x, row.names = NULL, optional = FALSE,
                                   scale = NULL, weights = NULL,
                                   source = TRUE, ...) {
  check_result(x)
  result_frame(x, scale, weights, source)
}

#' @rdname as_draws.kb_result
#' @export
as.data.frame.kb_thin <- as.data.frame.kb_chain

#' @rdname as_draws.kb_result
#' @export
as.data.frame.kb_ksdt <- as.data.frame.kb_chain

#' @rdname as_draws.kb_result
#' @export
as.data.frame.kb_particles <- as.data.frame.kb_chain

#' @rdname as_draws.kb_result
#' @export
as.data.frame.kb_ksdt_chains <- as.data.frame.kb_chain

# ---- summaries of a selection --------------------------------------------------

# posterior::summarise_draws() of a selection, a dictionary or particles:
# location and scale of its points, weighted when it has weights, and no
# convergence diagnostics (a selection has no iteration order; see the top
# of this file).  The summaries run through posterior's own method, so the
# result is its draws_summary with its printing and .num_args; each summary
# function gets a variable's 1 x m matrix (one iteration, a chain per point,
# chains in point order) and the weights in the same order.
result_summarise <- function(.x, ..., scale = NULL, weights = NULL) {
  need_posterior()
  df <- result_frame(.x, scale, weights, source = FALSE)
  w <- df$.log_weight
  df$.log_weight <- NULL
  d <- posterior::as_draws_df(df)
  dots <- list(...)
  opts <- c(".args", ".num_args", ".cores")
  measures <- if (is.null(names(dots))) dots else
    dots[!names(dots) %in% opts]
  if (length(measures)) {
    if (!is.null(w)) {
      stop_arg("weights", paste0(
        "are set on this set of points, and posterior's summary functions ",
        "ignore weights: call summarise_draws() without functions for ",
        "weighted summaries, or resample first with ",
        "posterior::resample_draws(posterior::as_draws_df(x))"))
    }
    # posterior's method on draws of chains of one iteration: its
    # convergence measures are NA there
    return(posterior::summarise_draws(d, ...))
  }
  m <- nrow(df)
  w <- if (is.null(w)) rep(1 / m, m) else exp(w) / sum(exp(w))
  vals <- function(v) {
    v <- as.vector(v)
    if (length(v) != m) {
      stop(kb_error("result_summarise: a variable's draws are not one per point",
                    "kb_error_internal"))
    }
    v
  }
  posterior::summarise_draws(
    d,
    mean = function(v) sum(w * vals(v)),
    median = function(v) weighted_quantile(vals(v), w, 0.5),
    sd = function(v) weighted_sd(vals(v), w),
    mad = function(v) weighted_mad(vals(v), w),
    quantile = function(v) stats::setNames(
      weighted_quantile(vals(v), w, c(0.05, 0.95)), c("q5", "q95")),
    ...)
}

# Weighted quantiles of v (normalised weights w): the sorted points with
# positive weight placed at (W_k - w_k/2 - w_1/2) / (1 - w_1/2 - w_n/2)
# (W_k the cumulative weight of the k smallest; w_1, w_n the weights of the
# smallest and largest), linearly interpolated.  Equal weights place them
# at (k - 1) / (n - 1): R's type 7, posterior's quantile2 and median.  The
# placement is symmetric (quantiles of -v are minus those of v).
weighted_quantile <- function(v, w, probs) {
  keep <- w > 0
  v <- v[keep]
  w <- w[keep] / sum(w[keep])
  if (anyNA(v)) return(rep(NA_real_, length(probs)))
  n <- length(v)
  if (n == 1L) return(rep(v, length(probs)))
  o <- order(v)
  v <- v[o]
  w <- w[o]
  at <- (cumsum(w) - w / 2 - w[1L] / 2) / (1 - w[1L] / 2 - w[n] / 2)
  at[1L] <- 0
  at[n] <- 1
  stats::approx(at, v, xout = probs, ties = "ordered")$y
}

# Weighted standard deviation with the reliability-weights correction:
# sum w (v - mean)^2 / (1 - sum w^2), the n - 1 denominator for equal
# weights; NA for a single point (as stats::sd()).
weighted_sd <- function(v, w) {
  den <- 1 - sum(w^2)
  if (!(den > 0)) return(NA_real_)
  mu <- sum(w * v)
  sqrt(sum(w * (v - mu)^2) / den)
}

# Weighted MAD: 1.4826 times the weighted median of |v - weighted median|
# (stats::mad() for equal weights).
weighted_mad <- function(v, w) {
  med <- weighted_quantile(v, w, 0.5)
  1.4826 * weighted_quantile(abs(v - med), w, 0.5)
}

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::summarise_draws
summarise_draws.kb_thin <- function(.x, ..., scale = NULL, weights = NULL) {
  check_result(.x, ".x")
  result_summarise(.x, ..., scale = scale, weights = weights)
}

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::summarise_draws
summarise_draws.kb_ksdt <- summarise_draws.kb_thin

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::summarise_draws
summarise_draws.kb_ksdt_chains <- summarise_draws.kb_thin

#' @rdname as_draws.kb_result
#' @exportS3Method posterior::summarise_draws
summarise_draws.kb_particles <- summarise_draws.kb_thin

#' Convert a chain to a coda mcmc object
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_chain` ([mala()], [rwm()]).
#' @param ... Ignored.
#' @return A `coda::mcmc` object of the states (variables named as the
#'   chain's columns, `x1`, `x2`, ... when it has none), with `mcpar` =
#'   (first iteration, last iteration, 1): iterations 1 to `n_iter` for a
#'   chain without iteration labels.
#' @examplesIf requireNamespace("coda", quietly = TRUE)
#' set.seed(1)
#' ch <- mala(gaussian_target(c(0, 0)), x0 = c(1, 1), n_iter = 300)
#' m <- coda::as.mcmc(ch)
#' coda::effectiveSize(m)
#' @exportS3Method coda::as.mcmc
as.mcmc.kb_chain <- function(x, ...) {
  check_result(x)
  if (!requireNamespace("coda", quietly = TRUE)) {
    stop(kb_error("package 'coda' is needed to convert to mcmc",
                  "kb_error_state"))
  }
  p <- x[["x"]]
  colnames(p) <- point_names(p)
  rownames(p) <- NULL
  it <- x[["iteration"]] %||% seq_len(nrow(p))
  if (length(unique(x[["chain"]] %||% 1L)) > 1L) {
    stop_arg("x", "holds several chains: convert each chain on its own")
  }
  if (nrow(p) > 1L && any(diff(it) != 1L)) {
    stop_arg("x", "has iterations that are not consecutive; coda::mcmc ",
             "needs equally spaced iterations")
  }
  coda::mcmc(p, start = it[1L], end = it[length(it)], thin = 1)
}

#' Compressed sets and particles are not chains for coda
#'
#' `coda::as.mcmc()` of a thinned set ([stein_thin()], [kernel_thin()],
#' ...), a KSDT dictionary ([ksdt()], [ksdt_sample()], [ksdt_chains()]) or
#' particles ([svgd()], ...) is an error of class `kb_error_arg`: coda's
#' default method returned a broken `mcmc` object for them (a list, on which
#' `coda::effectiveSize()` then failed), and their rows are a selection or
#' a set of particles, not iterations of a Markov chain, so effective sizes
#' or autocorrelations of the selection order mean nothing. Convert them
#' with [posterior::as_draws_df()] or [as.data.frame()] (see
#' [as_draws.kb_result]), which keep weights and provenance.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_thin`, `kb_ksdt`, `kb_ksdt_chains` or `kb_particles`
#'   result.
#' @param ... Ignored.
#' @return Never returns: an error naming `x`.
#' @examplesIf requireNamespace("coda", quietly = TRUE)
#' tg <- gaussian_target(c(0, 0))
#' th <- stein_thin(sample_target(tg, 200), tg, m = 10)
#' try(coda::as.mcmc(th))
#' @name as.mcmc.kb_thin
#' @exportS3Method coda::as.mcmc
as.mcmc.kb_thin <- function(x, ...) {
  check_result(x)
  stop_arg("x", sprintf(paste0(
    "is a %s, not a Markov chain: coda's mcmc would take its rows as ",
    "iterations (effective sizes of a selection or of particles mean ",
    "nothing); convert it with posterior::as_draws_df() or as.data.frame(), ",
    "which keep its weights and provenance"), describe_result_class(x)))
}

#' @rdname as.mcmc.kb_thin
#' @exportS3Method coda::as.mcmc
as.mcmc.kb_ksdt <- as.mcmc.kb_thin

#' @rdname as.mcmc.kb_thin
#' @exportS3Method coda::as.mcmc
as.mcmc.kb_ksdt_chains <- as.mcmc.kb_thin

#' @rdname as.mcmc.kb_thin
#' @exportS3Method coda::as.mcmc
as.mcmc.kb_particles <- as.mcmc.kb_thin

describe_result_class <- function(x) {
  if (inherits(x, "kb_thin")) return("thinned set (kb_thin)")
  if (inherits(x, "kb_ksdt_chains")) return("set of KSDT dictionaries (kb_ksdt_chains)")
  if (inherits(x, "kb_ksdt")) return("KSDT dictionary (kb_ksdt)")
  "set of particles (kb_particles)"
}

# ---- KSD of a result ------------------------------------------------------------

# How a result's KSD was standardised, for printing.
describe_standardisation <- function(scale) {
  if (is.null(scale)) "not standardised" else
    "standardised columns (mean absolute deviation scale)"
}

# The kernel line every printed KSD comes with.
describe_ksd_kernel <- function(rk, scale) {
  sprintf("%s; %s", describe_resolved(rk), describe_standardisation(scale))
}

# The resolved kernel and standardisation scale a result's own KSD uses, or
# NULL when the result has none (a chain, particles of flows other than
# KSD descent: ksd()'s arguments apply).
result_kernel <- function(x) {
  if (inherits(x, "kb_thin") || inherits(x, "kb_ksdt")) {
    return(list(kernel = x[["kernel"]], scale = x[["scale"]]))
  }
  if (inherits(x, "kb_particles")) return(x[["ksd_kernel"]])
  NULL
}

# V or U statistic of points P with scores S under a resolved kernel and a
# standardisation scale (NULL: none), optionally weighted (normalised
# weights).
ksd_under <- function(P, S, rk, scale, weights, type, nthreads) {
  P <- scale_points(P, scale)
  S <- scale_scores(S, scale)
  n <- nrow(P)
  sums <- .Call(C_kb_stein_sums, in_basis(P, rk), in_basis(S, rk), rk,
                weights, nthreads)
  v <- ksd_from_sums(sums, n, weights, type)
  if (type == "V") check_ksd_rounding(v^2, sums$diag, weights, P, S)
  v
}

# Scores for the points P of a result: its own, else from `score` (a
# matrix for these points, a function or a kb_target).
result_scores <- function(x, P, score, what) {
  s <- if (inherits(x, "kb_chain") || inherits(x, "kb_ksdt") ||
           inherits(x, "kb_thin")) x[["score"]] else NULL
  if (!is.null(s)) return(s)
  if (is.null(score)) {
    stop_arg("score", sprintf(paste0(
      "is missing: %s carries no scores; give the score at its %d points (a ",
      "matrix), a function or a kb_target"), what, nrow(P)))
  }
  resolve_score(score, P)
}

# ksd(x) for a result x (see ksd()): the KSD of its points under its own
# kernel and standardisation when it has them (kb_thin, kb_ksdt), else under
# ksd()'s arguments; with `reference`, a kb_ksd_compare. `args`: ksd()'s
# other arguments; `own`: whether kernel or standardize were given.
ksd_result <- function(x, score, reference, args, own) {
  check_result(x)
  if (missing(score)) score <- NULL
  # particles from a flow with a kb_target: that target's score by default
  if (is.null(score) && inherits(x, "kb_particles") &&
      inherits(x[["target"]], "kb_target")) score <- x[["target"]]
  what <- sprintf("this %s", class(x)[1L])
  x <- result_set(x)
  type <- check_choice(args$type, c("V", "U"), "type")
  nthreads <- resolve_nthreads(args$nthreads)
  if (!is.null(args$blocks)) {
    stop_arg("blocks", "is not used on a result; give its points as a matrix")
  }
  rk <- result_kernel(x)
  if (!is.null(rk) && own) {
    stop_arg("kernel", sprintf(paste0(
      "must not be given with %s: it is judged with the kernel and ",
      "standardisation it was made with; to use another kernel give its ",
      "points, e.g. ksd(x$points, x$score, kernel)"), what))
  }
  P <- result_points(x)
  if (inherits(x, "kb_thin") && !is.null(x[["mmd"]]) && is.null(score)) {
    stop_arg("score", paste0(
      "is missing: an MMD-thinning result carries no scores and prints an ",
      "MMD (x$mmd), not a KSD; give the score (a matrix for its points, a ",
      "function or a kb_target) to get its KSD under its kernel"))
  }
  # a result with scores takes `score` for the reference only
  own_scores <- !is.null(x[["score"]]) && !inherits(x, "kb_particles")
  set_score <- if (own_scores || (!is.null(reference) && is.matrix(score)))
    NULL else score
  if (!is.null(reference) && !own_scores && !is.null(score) &&
      !is.function(score) && !inherits(score, "kb_target")) {
    stop_arg("score", paste0(
      "must be a function or a kb_target when the result has no scores and ",
      "a reference is given (one score for both sets)"))
  }
  if (is.null(rk)) {
    kernel <- args$kernel
    check_kernel(kernel)
    scale <- standardize_scale(args$standardize, P)
    rk <- list(kernel = resolve_kernel(kernel, scale_points(P, scale)),
               scale = scale)
  }
  weights <- args$weights
  if (!is.null(weights)) weights <- check_weights(weights, nrow(P))
  gf <- if (inherits(x, "kb_thin")) x[["w"]]
  if (!is.null(gf) && (!is.null(weights) || type == "U")) {
    stop_arg("weights", "and type = \"U\" are not available for a ",
             "gradient-free thinning result")
  }
  if (!is.null(reference) && (!is.null(weights) || type == "U" ||
                              !is.null(gf))) {
    stop_arg("reference", "compares unweighted V-statistics of Stein ",
             "kernels only")
  }
  R <- if (!is.null(reference)) ksd_reference_points(reference, P, score)
  S <- result_scores(x, P, set_score, what)
  if (!is.null(gf)) {
    # the gradient-free discrepancy: the Stein kernel of the proxy times
    # exp(w_i + w_j), i.e. weights exp(w) on the selection
    u <- exp(gf[x[["index"]]])
    v <- ksd_under(P, S, rk$kernel, rk$scale, u / sum(u), "V", nthreads)
    value <- v * sum(u) / nrow(P)
  } else {
    value <- ksd_under(P, S, rk$kernel, rk$scale, weights, type, nthreads)
  }
  if (is.null(reference)) return(value)
  RS <- if (!is.null(R$score)) R$score else resolve_score(score, R$x)
  R <- R$x
  ref <- ksd_under(R, RS, rk$kernel, rk$scale, NULL, "V", nthreads)
  new_ksd_compare(value, ref, nrow(P), nrow(R),
                  describe_ksd_kernel(rk$kernel, rk$scale))
}

# The one constructor of kb_ksd_compare: a result's KSD, the reference
# sample's, their sizes and the kernel's description.
new_ksd_compare <- function(ksd, reference, m, n, kernel) {
  structure(list(ksd = ksd, reference = reference, m = m, n = n,
                 kernel = kernel), class = "kb_ksd_compare")
}

# The points of ksd()'s `reference` (and its own scores when it is a
# result with scores), checked against the set's points P and `score`
# before any score closure runs.
ksd_reference_points <- function(reference, P, score) {
  if (is_stan_fit(reference)) {
    # a Stan fit: its unconstrained draws with their gradients
    smp <- as_sample(reference, arg = "reference")
    R <- smp$x
    RS <- smp$score
  } else if (is_kb_result(reference)) {
    rset <- result_set(reference, "reference")
    R <- result_points(rset)
    RS <- rset[["score"]]
    if (is.null(RS) && is.null(score)) {
      stop_arg("score", "is missing: the reference carries no scores")
    }
  } else {
    R <- as_points(reference, "reference", ncol(P))
    RS <- NULL
    if (is.null(score)) {
      stop_arg("score", "is missing: give the score at the rows of ",
               "'reference' (a matrix), a function or a kb_target")
    }
  }
  if (ncol(R) != ncol(P)) {
    stop_arg("reference", sprintf("must have %d columns; it has %d",
                                  ncol(P), ncol(R)))
  }
  if (is.null(RS)) check_score(score, R)
  list(x = R, score = RS)
}

#' @export
print.kb_ksd_compare <- function(x, ...) {
  check_result(x)
  cat(sprintf("KSD %s (%d points) vs %s (reference, %d points); %s\n",
              format(x$ksd, digits = 6), x$m, format(x$reference, digits = 6),
              x$n, x$kernel))
  invisible(x)
}

#' @export
as.double.kb_ksd_compare <- function(x, ...) c(set = x$ksd,
                                               reference = x$reference)

# The kernel line of a flow's printed KSD^2 objective (SVGD: a Gaussian
# kernel of the iteration's bandwidth; KSD descent: its kernel resolved on
# the starting particles). KSD descent keeps that kernel, so
# ksd(particles) recomputes its KSD at the final particles; SVGD's objective
# is its own, and ksd(particles, score) judges its particles under ksd()'s
# kernel arguments instead.
particles_ksd_kernel <- function(x) {
  k <- x[["settings"]][["kernel"]]
  kern <- if (inherits(k, "kb_kernel")) {
    sprintf("%s, L = %s, resolved on the starting particles",
            if (k$type == "imq") sprintf("IMQ (c = %s, beta = %s)",
                                         format(k$c), format(k$beta))
            else "Gaussian", describe_precon(k$precon))
  } else if (!is.null(x[["bandwidth"]])) {
    sprintf("Gaussian, bandwidth h = %s at the last iteration",
            format(x[["bandwidth"]][length(x[["bandwidth"]])], digits = 4))
  } else "the flow's kernel"
  sprintf("  KSD^2 kernel: %s; %s", kern, describe_standardisation(NULL))
}

#' @rdname result_tables
#' @export
as.data.frame.kb_ksd_compare <- function(x, row.names = NULL,
                                         optional = FALSE, ...) {
  check_result(x)
  data.frame(set = c("set", "reference"), points = c(x$m, x$n),
             ksd = c(x$ksd, x$reference), row.names = row.names,
             stringsAsFactors = FALSE)
}
