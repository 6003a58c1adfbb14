# Stein kernel matrices, kernelized Stein discrepancy and KSD paths.

# Check the score argument against the points without evaluating anything:
# closures run only after every argument has been checked.
check_score <- function(score, x, arg = "score") {
  if (missing(score) || is.null(score)) {
    stop_arg(arg, "is missing: give a matrix of gradients, a function ",
             "or a kb_target")
  }
  if (inherits(score, "kb_target")) {
    # an edited target is named as this argument, before its dim is used
    check_target(score, arg)
    if (!identical(as.integer(score$dim), ncol(x))) {
      stop_arg("x", sprintf(paste0("must have %d columns (the target's ",
                                   "dimension); it has %d"),
                            as.integer(score$dim), ncol(x)))
    }
    return(invisible(score))
  }
  if (is.function(score)) return(invisible(score))
  if (is.data.frame(score) || is.matrix(score) || is.numeric(score)) {
    score_points(score, x, arg)
    return(invisible(score))
  }
  stop_arg(arg, "must be a numeric matrix of gradients, a function or a ",
           "kb_target")
}

# A score given as points (a matrix, data frame or vector: as_points()),
# which must have the dimensions of x; the one check of them.
score_points <- function(score, x, arg) {
  s <- as_points(score, arg, ncol(x))
  if (any(dim(s) != dim(x))) {
    stop_arg(arg, sprintf(paste0("must have the same dimensions as x ",
                                 "(%d x %d); it is %d x %d"),
                          nrow(x), ncol(x), nrow(s), ncol(s)))
  }
  s
}

# Scores at the rows of x from a matrix, a one-point function or a kb_target.
resolve_score <- function(score, x) {
  check_score(score, x)
  if (inherits(score, "kb_target")) return(target_score(score, x))
  if (is.function(score)) return(eval_score_rows(score, x))
  as_points(score, "score", ncol(x))
}

# Reference convention (Riabiz et al.): divide each column by its mean
# absolute deviation; scores are multiplied by the same factors.  Columns of
# huge or tiny numbers are scaled by a power of two (exact) first, so that
# their means neither overflow nor underflow.  Each sum is taken over the
# sorted column, so the scale does not depend on the order of the rows (of
# the chains of a pooled sample) down to the last bit.
standardize_columns <- function(x) {
  n <- nrow(x)
  scale <- vapply(seq_len(ncol(x)), function(k) {
    col <- x[, k]
    big <- max(abs(range(col)))
    p2 <- if (big > 1e150 || (big > 0 && big < 1e-150)) 2^floor(log2(big)) else 1
    col <- sort.int(col / p2, method = "radix")
    m <- sum(col) / n
    sum(sort.int(abs(col - m), method = "radix")) / n * p2
  }, 0)
  names(scale) <- colnames(x)
  if (any(!(scale > 0))) {
    stop_arg("x", sprintf(paste0("has a constant column (%d); it cannot ",
                                 "be standardised (use standardize = FALSE)"),
                          which(!(scale > 0))[1L]))
  }
  list(x = scale_points(x, scale), scale = scale)
}

# `standardize` checked without the data: TRUE, FALSE or positive column
# scales (one per column when the dimension d is known).
check_standardize <- function(standardize, d = NULL) {
  if (is.logical(standardize) && length(standardize) == 1L &&
      !is.na(standardize)) {
    return(standardize)
  }
  if (is.numeric(standardize) && is.null(dim(standardize)) &&
      length(standardize) >= 1L && all(is.finite(standardize)) &&
      all(standardize > 0)) {
    if (!is.null(d) && length(standardize) != d) {
      stop_arg("standardize", sprintf(paste0(
        "must be TRUE, FALSE or one column scale per column of x (%d); ",
        "it has %d numbers"), as.integer(d), length(standardize)))
    }
    return(as.double(standardize))
  }
  stop_arg("standardize", "must be TRUE, FALSE or a vector of positive ",
           "finite column scales")
}

# The column scales `standardize` gives for the sample x: NULL (FALSE), the
# mean absolute deviation of each column of x (TRUE), or the scales given.
standardize_scale <- function(standardize, x) {
  standardize <- check_standardize(standardize, ncol(x))
  if (isFALSE(standardize)) return(NULL)
  if (isTRUE(standardize)) return(standardize_columns(x)$scale)
  standardize
}

# Points divided and scores multiplied by the column scales (NULL: none).
scale_points <- function(x, scale) {
  if (is.null(scale)) x else x / rep(scale, each = nrow(x))
}
scale_scores <- function(s, scale) {
  if (is.null(scale)) s else s * rep(scale, each = nrow(s))
}

# The first row of a matrix with a non-finite entry.
first_bad_row <- function(m) which(rowSums(!is.finite(m)) > 0)[1L]

# Everything the C layer needs for a Stein kernel computation: checked and
# standardised points and scores in the eigenbasis of L, and the kernel.
# Every argument (x, score's type and shape, standardize, kernel and its
# preconditioner) is checked before the score closure runs; callers check
# their own arguments before calling this.  `score`: the scores at the rows
# of x as resolved, in x's coordinates (neither standardised nor rotated).
# `rows`: the rows for the kernel's median heuristics (heuristic_rows()).
stein_setup <- function(x, score, kernel, standardize, score_arg = "score",
                        rows = NULL) {
  x <- as_points(x)
  standardize <- check_standardize(standardize, ncol(x))
  check_score(score, x, score_arg)
  scale <- standardize_scale(standardize, x)
  xs <- scale_points(x, scale)
  rk <- resolve_kernel(kernel, xs, rows = rows)
  s <- s0 <- resolve_score(score, x)
  if (!is.null(scale)) {
    s <- scale_scores(s, scale)
    if (!all_finite(s)) {
      stop_numeric(sprintf(paste0(
        "standardising x multiplies the scores by its column scales (up to ",
        "%s) and the score of row %d overflows: rescale x or use ",
        "standardize = FALSE"), format(max(scale), digits = 3),
        first_bad_row(s)))
    }
  }
  xr <- in_basis(xs, rk)
  sr <- in_basis(s, rk)
  if (!all_finite(xr) || !all_finite(sr)) {
    bad <- if (!all_finite(xr)) first_bad_row(xr) else first_bad_row(sr)
    stop_numeric(sprintf(paste0(
      "rotating row %d of x and its score into the eigenbasis of the ",
      "preconditioner overflows: rescale x"), bad))
  }
  list(x = xr, s = sr, kernel = rk, scale = scale, n = nrow(x), d = ncol(x),
       score = s0)
}

# A Stein kernel sum added up in R (sums of finite row sums can still
# overflow).
check_total <- function(v, what = "the Stein kernel sum over all rows") {
  if (!all(is.finite(v))) {
    stop_numeric(what, " overflows: scale the data or the kernel")
  }
  v
}

#' Stein kernel matrix
#'
#' The matrix of Langevin Stein kernel values \eqn{k_p(x_i, x_j)} between the
#' rows of a sample, for a base kernel \eqn{k(x, y) = \phi(r)},
#' \eqn{r = u^\top L u}, \eqn{u = x - y}:
#' \deqn{k_p(x, y) = s_x^\top s_y \phi + 2\phi' (Lu)^\top (s_y - s_x)
#'   - 4 \phi'' u^\top L^2 u - 2 \phi' \mathrm{tr}(L),}
#' where \eqn{s_x = \nabla \log p(x)} is the score of the target.
#'
#' @param x The sample: an `n x d` numeric matrix, a data frame of numbers,
#'   a `coda::mcmc` or `mcmc.list`, a posterior draws object (a vector
#'   is `n` one-dimensional points; see 'Points and samples' in
#'   [kernbayes-package]), or a Stan fit (`stanfit` or `brmsfit`), whose
#'   post-warm-up draws are taken on the unconstrained scale with their
#'   gradients (leave `score` out; see [stan_target()]). Draws objects,
#'   `mcmc.list` and Stan fits keep their chain and iteration labels (rows
#'   chain after chain, as [posterior::as_draws_matrix()] stacks them).
#' @param score The score \eqn{\nabla \log p} at the rows of `x`: an `n x d`
#'   matrix in the row order of `x` (a vector as for `x`, of the dimension
#'   of `x`), a draws object of gradients with the same chains, iterations
#'   and variables as `x` (matched by its labels, in any order), a function
#'   of one point returning its gradient, or a [kb_target()]. For
#'   multi-chain `x`, a matrix whose rows follow the iteration-major order
#'   (chains interleaved) instead of chain after chain is detected through
#'   Stein's identity \eqn{E_p[s(x)^\top (x - c)] = -d} and refused.
#' @param kernel A base kernel, [imq_kernel()] (default) or
#'   [gaussian_kernel()].
#' @param standardize `TRUE` (default), `FALSE` or a vector of positive
#'   column scales, one per coordinate. `TRUE` divides each coordinate by
#'   its mean absolute deviation over the sample and multiplies the scores
#'   by the same factors (the convention of Riabiz et al., 2022), before
#'   anything else: kernel heuristics (a median preconditioner) are then
#'   resolved on the standardised sample. The scales are computed once, on
#'   the whole sample, all chains pooled (the same numbers whatever the
#'   order of the rows or chains). A sample not all known up front takes
#'   them from the rows its kernel is resolved on: a stream
#'   ([ksdt_stream()]) from its first push (at least two rows), and
#'   [ksdt_sample()] and [sp_mcmc()] from their pilot chain (one per chain
#'   in [ksdt_chains()]); they are then fixed. A vector gives the scales to
#'   divide by (say `fit$scale` of an earlier result, to judge several sets
#'   under one scale, or a stream's scales known in advance); `FALSE` keeps
#'   the coordinates as they are. Results keep the scales they used
#'   (`scale`, `NULL` without standardisation), so that `ksd(result)`
#'   recomputes their printed KSD. Why `TRUE` is the default: see
#'   'Standardisation' in [kernbayes-package].
#' @param nthreads Number of OpenMP threads; default
#'   `getOption("kernbayes.nthreads", 1)`.
#' @return An `n x n` symmetric matrix.
#' @seealso [ksd()], [ksd_path()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 5)
#' round(stein_kernel_matrix(x, tg), 3)
#' @export
stein_kernel_matrix <- function(x, score, kernel = imq_kernel(),
                                standardize = TRUE, nthreads = NULL) {
  nthreads <- resolve_nthreads(nthreads)
  smp <- as_sample(x, score)
  st <- stein_setup(smp$x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  .Call(C_kb_stein_matrix, st$x, st$s, st$kernel, nthreads)
}

#' Kernelized Stein discrepancy
#'
#' Measures how well a sample represents a target known through its score,
#' without normalising constants or draws from the target.
#'
#' For `type = "V"` the result is the discrepancy itself, the square root of
#' the V-statistic \eqn{\frac{1}{n^2}\sum_{i,j} k_p(x_i, x_j)}, or of
#' \eqn{\sum_{i,j} w_i w_j k_p(x_i, x_j)} when `weights` are given (they are
#' normalised to sum 1). For `type = "U"` the result is the U-statistic
#' \eqn{\frac{1}{n(n-1)}\sum_{i \ne j} k_p(x_i, x_j)}, an unbiased estimate of
#' the *squared* KSD, which can be negative; with weights it is
#' \eqn{\sum_{i \ne j} w_i w_j k_p / \sum_{i \ne j} w_i w_j}.
#'
#' The sum visits each pair once: \eqn{n(n+1)/2} kernel evaluations, in C,
#' on `nthreads` threads. A Stein kernel value or sum that overflows (data,
#' scores or preconditioner on an extreme scale) is an error of class
#' `kb_error_numeric` naming the first pair of rows concerned, never a `NaN`,
#' `Inf` or 0 result.
#'
#' @inheritParams stein_kernel_matrix
#' @param weights Optional non-negative weights on the rows of `x`, not all
#'   zero; only their ratios matter (a total beyond the double range is
#'   fine).
#' @param type `"V"` (the discrepancy, default) or `"U"` (unbiased estimate
#'   of its square).
#' @param blocks `NULL`, or a number of row blocks: the V-statistic is then
#'   computed by [ksd_blocks()], the blocks evaluated with the future
#'   framework (each with `nthreads` threads, default 1).
#' @param chain Chain labels for a matrix or data frame `x`, one per row
#'   (whole numbers, kept as given, 0 and negatives included; or strings
#'   or a factor, numbered in order of first appearance); `NULL` when `x`
#'   carries its own (draws, `mcmc.list`,
#'   Stan fit) or is one chain. Labelled results report the chain and
#'   iteration of their points.
#' @param by_chain If `TRUE`, return the KSD of each chain and of all
#'   chains together, all with one kernel (and standardisation) resolved
#'   on the whole sample, each with its own KSD test (see 'Per chain'): a
#'   convergence check.
#' @param reference Only when `x` is a result (an error otherwise): a
#'   sample to compare with (a matrix or other points, with `score` at its
#'   rows, or a result with scores such as a `kb_chain`); see 'Results'.
#'   `chain` and `by_chain` are not used with a result (an error when
#'   given).
#' @section Results: `x` may be a result with points: a thinned set
#'   ([stein_thin()], [stein_thin_gf()], [mmd_thin()]), a KSDT dictionary
#'   ([ksdt()], [ksdt_sample()], merged dictionaries, the merged dictionary
#'   of [ksdt_chains()]), a chain ([mala()], [rwm()]) or particles. A
#'   thinned set or a dictionary is judged with the kernel it was made with
#'   (resolved on the whole sample, e.g. the median heuristic) and the same
#'   standardisation (the sample's column scales), so `ksd(result)`
#'   recomputes the KSD its `print()` shows (to rounding: the sums are taken
#'   in another order); `kernel` and `standardize` may not be given then.
#'   Its own scores are used (an MMD-thinning result has none: give
#'   `score`, for its points, and get the KSD under its Gaussian kernel; its
#'   printed value is an MMD). For a gradient-free thinning result the value
#'   is the gradient-free discrepancy it printed. Particles from
#'   [ksd_descent()] are judged with the kernel the descent used (resolved
#'   on its starting particles, not standardised), so `ksd(fit)` is the
#'   square root of the KSD^2 its `print()` shows at the final particles.
#'   A chain, or other particles (with `score`, by default the flow's
#'   [kb_target()] if it had one), is judged with `kernel` and
#'   `standardize` as a matrix would be. With `reference`, the result is a `kb_ksd_compare` object
#'   printed in one line: the set's KSD next to the reference sample's under
#'   the same kernel and standardisation (use `as.double()` for the two
#'   numbers).
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `NULL` (automatic). With progress the double sum runs in about
#'   100 row blocks of equal work, reported between blocks; the result is
#'   the same number.
#' @param n_boot With `by_chain = TRUE`: the bootstrap replicates of each
#'   chain's KSD test (see 'Per chain'); 0 for the KSDs alone. Not used
#'   otherwise.
#' @section Per chain: With `by_chain = TRUE` each chain gets, beside its
#'   KSD, a yardstick that does not depend on a rule of thumb: the KSD
#'   goodness-of-fit test of that chain alone ([ksd_test()] with `type`,
#'   the same kernel and standardisation, and the Markov wild bootstrap
#'   along the chain, whose flip probability follows the chain's integrated
#'   autocorrelation time `iact`). `null_95` is the 95% quantile of its
#'   bootstrap null in the units of the `ksd` column (the KSD that a chain
#'   of that length and dependence, drawn from the target, stays below 95%
#'   of the time), and `p_value` its p-value. KSDs of chains of other
#'   lengths or mixing are not comparable with each other (a V-statistic is
#'   biased upwards by about \eqn{\tau E_p[k_p(x, x)] / n}): a chain is
#'   suspect when its KSD is beyond its own `null_95`. The `"all"` row
#'   tests the chains pooled (multipliers along each chain); its KSD is
#'   smaller by construction and is not compared with the chains'. With
#'   `weights` no test is made (the bootstrap takes no weights). The
#'   bootstraps draw from R's generator (set a seed for reproducible
#'   p-values).
#' @section Precision: A V-statistic (weighted or not) below the rounding
#'   error of its own Stein kernel sum, less than 1e-12 of \eqn{(\sum_i
#'   w_i \sqrt{k_p(x_i, x_i)})^2}, is noise, not a discrepancy: it is an
#'   error of class `kb_error_numeric` naming the scales of the points and
#'   of the scores. It happens when the scores swamp the kernel's other
#'   terms, e.g. points of scale 1e-100 with scores 1e100 and `standardize
#'   = FALSE` under weights that cancel the scores' mean (those of
#'   [ksd_weights()]); standardising removes it.
#' @return A number; with `by_chain = TRUE` a data frame of class
#'   `kb_ksd_by_chain` with columns `chain`, `n` and `ksd` (the last row,
#'   `"all"`, is the pooled sample; `NA` for a chain of one row with
#'   `type = "U"`), and with `n_boot > 0` `iact`, `null_95` and `p_value`
#'   (see 'Per chain'), printed with its kernel; with
#'   `reference`, a `kb_ksd_compare` object.
#' @references Liu, Q., Lee, J. and Jordan, M. (2016). A kernelized Stein
#'   discrepancy for goodness-of-fit tests. *ICML*. Gorham, J. and Mackey, L.
#'   (2017). Measuring sample quality with kernels. *ICML*.
#' @seealso [ksd_path()], [stein_kernel_matrix()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 500)
#' ksd(x, tg)
#' ksd(x + 1, tg)  # a shifted sample is further from the target
#' ksd(x, tg, type = "U")
#' @export
ksd <- function(x, score, kernel = imq_kernel(), weights = NULL,
                type = c("V", "U"), blocks = NULL, by_chain = FALSE,
                reference = NULL, n_boot = 200, standardize = TRUE,
                nthreads = NULL, chain = NULL, progress = NULL) {
  by_chain <- check_flag(by_chain, "by_chain")
  n_boot <- check_count(n_boot, "n_boot", min = 0L)
  progress <- check_progress(progress)
  if (is_kb_result(x)) {
    if (!is.null(chain) || by_chain) {
      stop_arg(if (is.null(chain)) "by_chain" else "chain",
               "is not used when x is a result (its KSD is that of its ",
               "points as one set); for KSDs per chain give a sample with ",
               "chain labels")
    }
    return(ksd_result(x, score, reference, mget(c("kernel", "weights",
      "type", "standardize", "nthreads", "blocks")),
      !missing(kernel) || !missing(standardize)))
  }
  if (!is.null(reference)) {
    stop_arg("reference", "is only used when x is a result (a thinned set, ",
             "a KSDT dictionary, a chain or particles); for a sample, ",
             "compare ksd() of the two samples")
  }
  type <- check_choice(type, c("V", "U"), "type")
  if (!is.null(blocks)) {
    if (type != "V" || !is.null(weights) || by_chain) {
      stop_arg("blocks", "is for the unweighted V-statistic of all rows only")
    }
    blocks <- check_count(blocks, "blocks")
    nthreads <- if (is.null(nthreads)) 1L else check_count(nthreads,
                                                           "nthreads")
    return(ksd_blocks(x, score, kernel, blocks = blocks,
                      standardize = standardize, nthreads = nthreads,
                      chain = chain, progress = progress))
  }
  # every argument is checked before the score closure runs
  smp <- as_sample(x, score, chain)
  x <- smp$x
  n <- nrow(x)
  if (!is.null(weights)) weights <- check_weights(weights, n)
  if (type == "U" && n < 2L) {
    stop_arg("x", "must have at least two rows for the U-statistic")
  }
  if (type == "U" && !is.null(weights) && !(1 - sum(weights^2) > 1e-12)) {
    stop_arg("weights", "must give non-negligible weight to at least two ",
             "rows for the U-statistic (1 - sum of the squared normalised ",
             "weights is below 1e-12)")
  }
  if (by_chain && is.null(smp$chain)) {
    stop_arg("by_chain", "needs chain labels: give x as a draws or ",
             "mcmc.list object or a Stan fit, or give 'chain'")
  }
  if (by_chain && n_boot > 0L && is.null(weights)) {
    check_memory(8 * 3 * n * (n_boot + 8), "n_boot",
                 sprintf("the bootstrap weights of %d replicates of %d rows",
                         n_boot, n), "use fewer replicates, or n_boot = 0")
  }
  nthreads <- resolve_nthreads(nthreads)
  st <- stein_setup(x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  if (by_chain) return(ksd_by_chain(st, smp, weights, type, nthreads, n_boot))
  ksd_of_rows(st, seq_len(n), weights, type, nthreads, progress)
}

# The KSD (type "V") or U-statistic of some rows of a Stein setup, with
# their weights (NULL, or weights of all rows: renormalised on the rows).
ksd_of_rows <- function(st, rows, weights, type, nthreads,
                        progress = FALSE) {
  n <- length(rows)
  all <- n == st$n
  w <- if (is.null(weights)) NULL else if (all) weights else
    weights[rows] / sum(weights[rows])
  if (type == "U" && n < 2L) return(NA_real_)
  sums <- if (all && progress_display(progress) != "none") {
    stein_sums_progress(st, w, nthreads, progress)
  } else {
    .Call(C_kb_stein_sums, if (all) st$x else st$x[rows, , drop = FALSE],
          if (all) st$s else st$s[rows, , drop = FALSE], st$kernel, w,
          nthreads)
  }
  v <- ksd_from_sums(sums, n, w, type)
  if (type == "V") {
    check_ksd_rounding(v^2, sums$diag, w, st$x[rows, , drop = FALSE],
                       st$s[rows, , drop = FALSE])
  }
  v
}

# A squared KSD (V-statistic, or w'Kw) below the rounding error of its own
# sum is noise, not a discrepancy: the Stein kernel's score term (|s|^2)
# swamps its kernel terms when the scores and the points are of very
# different scales (x of scale 1e-100 with scores 1e100 and no
# standardisation), and each entry is then rounded at the score term's size.
# The entries' sizes are bounded by sqrt(K_ii K_jj), so the sum's rounding
# error is a few eps times (sum_i w_i sqrt(K_ii))^2; below 1e-12 of that
# (more than a 1e-4 relative error) the value is refused.  Samples of
# ordinary scale sit at 1e-2 to 1e-6 of the bound.
check_ksd_rounding <- function(v2, diag, w, x, s) {
  w <- if (is.null(w)) rep(1 / length(diag), length(diag)) else abs(w)
  bound <- sum(w * sqrt(pmax(diag, 0)))^2
  if (!is.finite(bound) || !(v2 < 1e-12 * bound)) return(invisible(v2))
  scl <- function(m) format(stats::median(abs(m)), digits = 2)
  stop_numeric(sprintf(paste0(
    "the squared KSD (%s) is below the rounding error of its Stein kernel ",
    "sum (terms up to %s): the points (scale ~%s) and their scores (scale ",
    "~%s) are too far apart in scale for double precision, so the value ",
    "would be noise; rescale x and the scores to comparable scales, or use ",
    "standardize = TRUE"), format(v2, digits = 3), format(bound, digits = 3),
    scl(x), scl(s)))
}

# The KSD (type "V") or U-statistic from the C row sums of n points with
# normalised weights w (or NULL).
ksd_from_sums <- function(sums, n, w, type) {
  tot <- check_total(sum(sums$sums))
  if (type == "V") {
    v <- if (is.null(w)) tot / n^2 else tot
    return(sqrt(max(v, 0)))
  }
  off <- check_total(tot - sum(sums$diag))
  if (is.null(w)) return(off / (n * (n - 1)))
  off / (1 - sum(w^2))
}

# One KSD per chain and one of all chains together, all with the kernel
# and standardisation resolved on the whole sample; with n_boot > 0 (and no
# weights), beside each the Markov-bootstrap test of that chain (and of the
# chains pooled): its p-value and the 95% quantile of its bootstrap null in
# the units of the KSD column.
ksd_by_chain <- function(st, smp, weights, type, nthreads, n_boot) {
  rows <- chain_rows(smp)
  if (!is.null(weights) && any(vapply(rows, function(r) sum(weights[r]), 0) <= 0)) {
    stop_arg("weights", "must give positive weight to every chain for by_chain = TRUE")
  }
  k <- vapply(rows, function(r) ksd_of_rows(st, r, weights, type, nthreads), 0)
  all <- ksd_of_rows(st, seq_len(st$n), weights, type, nthreads)
  out <- data.frame(chain = c(names(rows), "all"),
                    n = c(lengths(rows), st$n), ksd = c(k, all),
                    stringsAsFactors = FALSE)
  test <- n_boot > 0L && is.null(weights)
  if (test) {
    iact <- gof_chain_iact(smp$x, st$score, rows)
    plan <- gof_plan(gof_request(NULL, NULL, NULL), type, TRUE, rows, iact)
    one <- function(sub, r, pk) {
      t <- gof_run(sub, r, type, pk, n_boot, nthreads, FALSE)
      q <- max(stats::quantile(t$boot, 0.95, names = FALSE), 0) / t$n
      c(if (type == "V") sqrt(q) else q, t$p.value)
    }
    res <- vapply(names(rows), function(c) {
      pk <- plan
      pk$change_prob <- plan$change_prob[c]
      r <- rows[[c]]
      if (length(r) < max(2, GOF_MIN_ESS * iact[c])) return(c(NA_real_, NA_real_))
      one(gof_subset(st, r), list(seq_along(r)), pk)
    }, numeric(2))
    pooled <- one(st, rows, plan)
    out$iact <- c(iact, NA)
    out$null_95 <- c(res[1L, ], pooled[1L])
    out$p_value <- c(res[2L, ], pooled[2L])
  }
  new_ksd_by_chain(out, st, type, if (test) n_boot else 0L,
                   !is.null(weights))
}

# The one constructor of kb_ksd_by_chain: the table `out` (a data frame, a
# row per chain and one for all), with the Stein setup's kernel and
# standardisation, the statistic's type, the bootstrap replicates (0: no
# test) and whether the KSDs are weighted as attributes.
new_ksd_by_chain <- function(out, st, type, n_boot, weighted) {
  structure(out, class = c("kb_ksd_by_chain", "data.frame"),
            kernel = st$kernel, standardize = !is.null(st$scale),
            type = type, n_boot = n_boot, weighted = weighted)
}

#' @export
print.kb_ksd_by_chain <- function(x, ...) {
  check_result(x)
  type <- attr(x, "type")
  cat(sprintf("%s by chain (%s)\n",
              if (identical(type, "U")) "KSD^2 U-statistic" else "KSD",
              if (isTRUE(attr(x, "standardize"))) "columns standardised" else
                "not standardised"))
  cat("  kernel:", describe_resolved(attr(x, "kernel")), "\n")
  tab <- as.data.frame(unclass(x), stringsAsFactors = FALSE)
  num <- vapply(tab, is.double, TRUE)
  tab[num] <- lapply(tab[num], signif, 4)
  names(tab)[3L] <- if (identical(type, "U")) "ksd2_U" else "ksd"
  print(tab, row.names = FALSE)
  nb <- attr(x, "n_boot") %||% 0L
  notes <- c(
    if (nb > 0L) sprintf(paste0(
      "null_95, p_value: each row's own KSD test (%d replicates of the ",
      "Markov wild bootstrap along its chain, whose dependence is iact); a ",
      "row's %s beyond its null_95 means p < 0.05. Judge each chain by ",
      "these, not by comparing %ss: chains of other lengths or mixing ",
      "have other nulls."), nb, names(tab)[3L], names(tab)[3L]),
    if (nb == 0L && isTRUE(attr(x, "weighted")))
      "no tests: the bootstrap does not take weights",
    sprintf(paste0("all: the chains pooled; its %s is not comparable with ",
                   "the chains' (%s)"), names(tab)[3L],
            if (identical(type, "U")) "it is averaged over more pairs" else
              "a V-statistic's bias shrinks as 1/n"),
    if (identical(type, "U") && any(is.na(tab$ksd2_U)))
      "NA: a chain of one row has no U-statistic (it needs two rows)",
    if (nb > 0L && any(is.na(tab$p_value)))
      sprintf(paste0("p_value NA: a chain of fewer than %d effective draws ",
                     "(length / iact) cannot be tested"), GOF_MIN_ESS))
  for (nt in notes) cat(strwrap(nt, indent = 2, exdent = 4), sep = "\n")
  invisible(x)
}

#' KSD path
#'
#' The kernelized Stein discrepancy of the first \eqn{j} rows of a sample,
#' for every \eqn{j = 1, \dots, n}, in one pass of \eqn{n(n+1)/2} kernel
#' evaluations. Useful to watch a chain converge, or to compare a thinned
#' sample with the full one.
#'
#' For a sample of several chains (labelled: see `chain`), the path
#' restarts at each chain: `ksd[i]` is the KSD of the chain of row `i` up
#' to that row, all chains with one kernel resolved on the whole sample.
#'
#' @inheritParams stein_kernel_matrix
#' @inheritParams ksd
#' @return An object of class `kb_ksd_path`: a list with `ksd` (the KSD, as
#'   in `ksd(type = "V")`, of the first `j` rows for each `j`, per chain for
#'   labelled input, with `chain` and `iteration` of each row), `n`, `d`,
#'   `kernel` (the kernel as resolved on the sample, with its matrix `L`)
#'   and `standardize`. It has `print`, `summary`, `plot` and `as.numeric`
#'   methods.
#' @seealso [ksd()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' p <- ksd_path(sample_target(tg, 300), tg)
#' p
#' plot(p)
#' @export
ksd_path <- function(x, score, kernel = imq_kernel(), standardize = TRUE,
                     nthreads = NULL, chain = NULL) {
  nthreads <- resolve_nthreads(nthreads)
  smp <- as_sample(x, score, chain)
  st <- stein_setup(smp$x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  path <- numeric(st$n)
  for (r in chain_rows(smp)) {
    sums <- .Call(C_kb_stein_sums, st$x[r, , drop = FALSE],
                  st$s[r, , drop = FALSE], st$kernel, NULL, nthreads)
    path[r] <- sqrt(pmax(check_total(cumsum(sums$sums)), 0)) /
      seq_along(r)
  }
  new_ksd_path(path, st, smp)
}

# The one constructor of kb_ksd_path: the running KSD of each row, the
# Stein setup (sizes, kernel, scale) and the sample's chain labels.
new_ksd_path <- function(path, st, smp) {
  structure(list(ksd = path, n = st$n, d = st$d, kernel = st$kernel,
                 standardize = !is.null(st$scale), scale = st$scale,
                 chain = smp$chain, iteration = smp$iteration),
            class = "kb_ksd_path")
}

# The final KSD of each chain of a path (one number without labels).
path_finals <- function(x) {
  if (is.null(x$chain)) return(c(all = x$ksd[x$n]))
  rows <- chain_rows(x)
  vapply(rows, function(r) x$ksd[r[length(r)]], 0)
}

#' @export
print.kb_ksd_path <- function(x, ...) {
  check_result(x)
  cat(sprintf("KSD path of %d points in dimension %d\n", x$n, x$d))
  cat("  kernel:", describe_ksd_kernel(x$kernel, x[["scale"]]), "\n")
  if (is.null(x[["chain"]])) {
    cat(sprintf("  KSD of all %d points: %s (this kernel)\n", x$n,
                format(x$ksd[x$n], digits = 6)))
  } else {
    f <- path_finals(x)
    cat(sprintf("  one path per chain; final KSD of chain %s (this kernel)\n",
                paste(sprintf("%s: %s", names(f), format(f, digits = 4)),
                      collapse = ", ")))
  }
  invisible(x)
}

#' @export
summary.kb_ksd_path <- function(object, ...) {
  check_result(object, "object")
  if (!is.null(object$chain)) return(summary_chain_paths(object))
  n <- object$n
  at <- unique(pmin(n, c(1L, 10L, 100L, 1000L, 10000L, 100000L, n)))
  at <- at[at <= n]
  new_summary_ksd_path(object, describe_ksd_kernel(object$kernel,
                                                   object[["scale"]]),
                       list(at = at, ksd = object$ksd[at],
                            min = min(object$ksd),
                            which_min = which.min(object$ksd)))
}

# The one constructor of summary.kb_ksd_path: the path's sizes and
# standardisation, the kernel's description, and either `points` (one
# path: at, the sizes shown; ksd, its values there; min, which_min) or
# `chains` (a table, a row per chain). The fields of the other are NULL.
new_summary_ksd_path <- function(object, kernel, points = list(),
                                 chains = NULL) {
  structure(list(n = object$n, d = object$d, at = points$at,
                 ksd = points$ksd, min = points$min,
                 which_min = points$which_min, chains = chains,
                 kernel = kernel, standardize = object$standardize),
            class = "summary.kb_ksd_path")
}

#' @export
print.summary.kb_ksd_path <- function(x, ...) {
  cat(sprintf("KSD path: n = %d, d = %d\n", x$n, x$d))
  cat("  kernel:", x$kernel, "\n")
  if (!is.null(x$chains)) {
    tab <- x$chains
    tab$final <- signif(tab$final, 5)
    tab$min <- signif(tab$min, 5)
    names(tab)[5L] <- "min_at"
    cat("  one path per chain:\n")
    print(tab, row.names = FALSE)
    return(invisible(x))
  }
  tab <- data.frame(points = x$at, ksd = signif(x$ksd, 6))
  print(tab, row.names = FALSE)
  cat(sprintf("  smallest KSD %s after %d points\n", format(x$min, digits = 6),
              x$which_min))
  invisible(x)
}

summary_chain_paths <- function(object) {
  rows <- chain_rows(object)
  tab <- data.frame(chain = names(rows), n = lengths(rows),
                    final = vapply(rows, function(r) object$ksd[r[length(r)]], 0),
                    min = vapply(rows, function(r) min(object$ksd[r]), 0),
                    at = vapply(rows, function(r) which.min(object$ksd[r]), 1L))
  new_summary_ksd_path(object, describe_resolved(object$kernel),
                       chains = tab)
}

#' @export
as.double.kb_ksd_path <- function(x, ...) x$ksd

#' Plot a KSD path
#'
#' @param x A `kb_ksd_path` object.
#' @param log Axes on the log scale, passed to [plot.default()].
#' @param reference If `TRUE`, add the line \eqn{c\,j^{-1/2}} through the last
#'   point, the rate of exact independent draws.
#' @param ... Further arguments to [plot.default()].
#' @return `x`, invisibly.
#' @export
plot.kb_ksd_path <- function(x, log = "xy", reference = TRUE, ...) {
  check_result(x)
  if (!is.null(x$chain)) return(plot_chain_paths(x, log, ...))
  j <- seq_len(x$n)
  args <- list(...)
  defaults <- list(xlab = "number of points j", ylab = "KSD of first j points",
                   main = "KSD path", type = "l", log = log)
  args <- c(list(x = j, y = x$ksd), utils::modifyList(defaults, args))
  do.call(graphics::plot, args)
  if (reference && x$n > 1L) {
    graphics::lines(j, x$ksd[x$n] * sqrt(x$n / j), lty = 2, col = "grey50")
    graphics::legend("topright", legend = c("KSD", "rate n^(-1/2)"),
                     lty = c(1, 2), col = c("black", "grey50"), bty = "n")
  }
  invisible(x)
}

# One line per chain of a multi-chain KSD path.
plot_chain_paths <- function(x, log, ...) {
  rows <- chain_rows(x)
  cols <- grDevices::hcl.colors(max(2L, length(rows)), "Dark 3")
  len <- lengths(rows)
  defaults <- list(xlab = "iterations j of the chain",
                   ylab = "KSD of the chain's first j points",
                   main = "KSD path per chain", type = "n", log = log)
  args <- utils::modifyList(defaults, list(...))
  do.call(graphics::plot, c(list(x = c(1, max(len)),
                                 y = range(x$ksd[x$ksd > 0])), args))
  for (i in seq_along(rows)) {
    graphics::lines(seq_along(rows[[i]]), x$ksd[rows[[i]]], col = cols[i])
  }
  graphics::legend("topright", legend = paste("chain", names(rows)),
                   col = cols[seq_along(rows)], lty = 1, bty = "n")
  invisible(x)
}

# V-statistic KSD with an already resolved kernel (points in the original
# coordinates).
ksd_resolved <- function(x, s, rk, nthreads = 1L) {
  sums <- .Call(C_kb_stein_sums, in_basis(x, rk), in_basis(s, rk), rk, NULL,
                nthreads)
  sqrt(max(check_total(sum(sums$sums)) / nrow(x)^2, 0))
}

# ---- KSD with the double sum split into row blocks (futures) ----------------

# Row boundaries of k blocks of equal work for the lower-triangular sums
# (row j costs j Stein kernel evaluations): n sqrt(b / k), b = 0..k.
row_blocks <- function(n, k) {
  k <- min(k, n)
  b <- unique(round(n * sqrt(seq(0, k) / k)))
  lapply(seq_len(length(b) - 1L), function(i) c(b[i], b[i + 1L]))
}

# kb_stein_sums() in about 100 row blocks of equal work with a progress
# line between them: the same per-row sums (each row is computed as in one
# call), so the same total.
stein_sums_progress <- function(st, weights, nthreads, progress) {
  ranges <- row_blocks(st$n, 100L)
  rep <- progress_reporter(length(ranges), "KSD: row block", progress)
  on.exit(rep$done())
  parts <- lapply(ranges, function(r) {
    v <- .Call(C_kb_stein_block_sums, st$x, st$s, st$kernel, r[1L], r[2L],
               nthreads, weights)
    rep$add(1)
    v
  })
  list(sums = unlist(lapply(parts, `[[`, "sums")),
       diag = unlist(lapply(parts, `[[`, "diag")))
}

#' KSD with the double sum split into row blocks
#'
#' Computes the same V-statistic as [ksd()], but splits the double sum
#' \eqn{\sum_{i,j} k_p(x_i, x_j)} into `blocks` blocks of rows, evaluates
#' them with the future framework (`future.apply::future_lapply()`, so on
#' whatever [future::plan()] is set: local processes, a cluster, a
#' scheduler) and adds the block sums. Row \eqn{j} contributes
#' \eqn{k_p(x_j, x_j) + 2\sum_{i < j} k_p(x_i, x_j)}, so the block
#' boundaries are at \eqn{n \sqrt{b / B}} to give the blocks equal work.
#' Without future.apply the blocks run in turn in this process.
#'
#' Each block uses `nthreads` OpenMP threads in its worker (default 1, so
#' that \eqn{k} workers on \eqn{k} cores do not oversubscribe them). The
#' whole sample and its scores travel to every worker: \eqn{O(n d)} data
#' for \eqn{O(n^2 d / B)} work per block.
#'
#' @inheritParams ksd
#' @param blocks Number of row blocks (at least 1; more blocks than rows is
#'   allowed and gives one row per block). Default: the number of workers
#'   of the current plan (1 without future).
#' @param nthreads Threads per block.
#' @param progress Show progress, one unit per block (see 'Progress' in
#'   [kernbayes-package]); blocks run in future workers report through
#'   progressr. Default `NULL` (automatic).
#' @section Running on a cluster: The blocks are futures: see the section
#'   "Running on a cluster" in [ksdt_chains()] for a Slurm plan.
#' @section When blocks pay: Each block's future carries the whole sample
#'   and its scores (\eqn{16 n d} bytes) and starts, on multisession, in a
#'   running R session, on batchtools in a new process with a registry on
#'   disk; the work is about \eqn{n^2} Stein kernel evaluations (\eqn{n =
#'   3 \times 10^5}, d = 10: 160-210 s on one core here). Measured with
#'   inst/bench/bench-distributed.R (4 blocks, d = 10, 2 cores; table
#'   `system.file("extdata", "bench-distributed.csv", package =
#'   "kernbayes")`) on an idle machine, whose speed varied by up to 30 percent
#'   between runs (ratios below are within one run). Against one process,
#'   two multisession workers took 1.00 of its time at \eqn{n = 10^4} (0.24
#'   s), 0.66 at \eqn{3 \times 10^4}, 0.52 at \eqn{10^5} and 0.59 at
#'   \eqn{3 \times 10^5} (93 s against 159 s); two batchtools jobs 3.7,
#'   1.9, 0.90 and 0.82 (their waiting main process polled the registry with
#'   65 s of CPU at \eqn{3 \times 10^5}, a third busy process on 2 cores);
#'   two threads in one process (`nthreads = 2`) 0.53, 0.57, 0.59 and 0.52.
#'   One worker of either kind took 0.94-1.09 of one process's time from
#'   \eqn{10^5} on. So on one machine threads pay from the smallest
#'   samples and need no second R session, two multisession blocks pay from
#'   about \eqn{3 \times 10^4} draws (d = 10; the break-even falls as
#'   \eqn{d} grows, since the work per pair does), and scheduler jobs, each
#'   of which starts a process and reads the sample from disk, from about
#'   \eqn{10^5}: blocks are for putting more machines to work on samples of
#'   that size. Starting the workers (the first future of a new plan) costs
#'   1-3 s more, once. At \eqn{n = 10^6} (idle): one batchtools job took
#'   1961 s (1928 s of CPU, at most 811 MB resident), two jobs 1252 s (0.64
#'   of one; 922 and 921 s of CPU, the polling main process 548 s), two
#'   multisession workers 1001 s (0.51 of one job; 928 s of CPU each, at most
#'   923 MB each: the sample and its scores, 160 MB, arrive serialised and
#'   are unpacked in the worker). One process took 2257 s of CPU and one
#'   multisession worker 2209 s, on a machine shared with a second
#'   benchmark. Every result, under every plan and at every \eqn{n}, was
#'   `identical()` to the one-process sum (at \eqn{10^6} compared across
#'   separate runs).
#' @return The KSD (V-statistic), equal to `ksd(x, score, kernel)` up to
#'   rounding (the terms are added in a different order).
#' @seealso [ksd()], [ksdt_chains()].
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(2000), 1000)
#' tg <- gaussian_target(c(0, 0))
#' ksd_blocks(x, tg, blocks = 4)
#' ksd(x, tg)
#' \donttest{
#' if (requireNamespace("future", quietly = TRUE)) {
#'   oplan <- future::plan(future::multisession, workers = 2)
#'   ksd_blocks(x, tg, blocks = 2)
#'   future::plan(oplan)
#' }
#' }
#' @export
ksd_blocks <- function(x, score, kernel = imq_kernel(), blocks = NULL,
                       standardize = TRUE, nthreads = 1, chain = NULL,
                       progress = NULL) {
  if (is.null(blocks)) {
    blocks <- if (requireNamespace("future", quietly = TRUE)) {
      max(1L, as.integer(future::nbrOfWorkers()))
    } else 1L
  }
  blocks <- check_count(blocks, "blocks")
  nthreads <- check_count(nthreads, "nthreads")
  progress <- check_progress(progress)
  smp <- as_sample(x, score, chain)
  st <- stein_setup(smp$x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  n <- st$n
  ranges <- row_blocks(n, blocks)
  one <- block_sums_task(st$x, st$s, st$kernel, nthreads)
  sums <- progress_lapply(ranges, one, length(ranges), "KSD blocks", progress)
  sqrt(max(check_total(sum(unlist(sums))) / n^2, 0))
}

# The task of one row block.  The future framework sends a task's
# environment to the workers: this one holds the points, scores and kernel
# only, not the caller's sample (a Stan fit, its target: a model that
# exists only in this process, and draws the workers do not need).
block_sums_task <- function(X, S, K, nthreads) {
  force(X)
  force(S)
  force(K)
  force(nthreads)
  function(r, relay) {
    v <- sum(.Call(C_kb_stein_block_sums, X, S, K, r[1L], r[2L], nthreads,
                   NULL)$sums)
    relay(1)
    v
  }
}

#' @rdname result_tables
#' @export
as.data.frame.kb_ksd_path <- function(x, row.names = NULL, optional = FALSE,
                                      ...) {
  check_result(x)
  data.frame(m = seq_along(x$ksd), ksd = x$ksd, row.names = row.names)
}
