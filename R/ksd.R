# Stein kernel matrices, kernelized Stein discrepancy and KSD paths.

# Check the score argument against the points without evaluating anything:
# closures run only after every argument has been checked.
check_score <- function(score, x, arg = "score") {
  if (missing(score) || is.null(score)) {
    stop_arg(arg, "is missing: give a matrix of gradients, a function ",
             "or a kb_target")
  }
  if (inherits(score, "kb_target")) {
    if (!identical(as.integer(score$dim), ncol(x))) {
      stop_arg("x", sprintf(paste0("must have %d columns (the target's ",
                                   "dimension); it has %d"),
                            as.integer(score$dim), ncol(x)))
    }
    return(invisible(score))
  }
  if (is.function(score)) return(invisible(score))
  if (is.data.frame(score) || is.matrix(score) || is.numeric(score)) {
    s <- as_points(score, arg, ncol(x))
    if (any(dim(s) != dim(x))) {
      stop_arg(arg, sprintf(paste0("must have the same dimensions as x ",
                                   "(%d x %d); it is %d x %d"),
                            nrow(x), ncol(x), nrow(s), ncol(s)))
    }
    return(invisible(score))
  }
  stop_arg(arg, "must be a numeric matrix of gradients, a function or a ",
           "kb_target")
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
# their means neither overflow nor underflow.
standardize_columns <- function(x) {
  scale <- colMeans(abs(sweep(x, 2L, colMeans(x))))
  big <- apply(abs(x), 2L, max)
  for (k in which(big > 1e150 | (big > 0 & big < 1e-150))) {
    p2 <- 2^floor(log2(big[k]))
    col <- x[, k] / p2
    scale[k] <- mean(abs(col - mean(col))) * p2
  }
  if (any(!(scale > 0))) {
    stop_arg("x", sprintf(paste0("has a constant column (%d); it cannot ",
                                 "be standardised (use standardize = FALSE)"),
                          which(!(scale > 0))[1L]))
  }
  list(x = sweep(x, 2L, scale, "/"), scale = scale)
}

# The first row of a matrix with a non-finite entry.
first_bad_row <- function(m) which(rowSums(!is.finite(m)) > 0)[1L]

# Everything the C layer needs for a Stein kernel computation: checked and
# standardised points and scores in the eigenbasis of L, and the kernel.
# Every argument (x, score's type and shape, standardize, kernel and its
# preconditioner) is checked before the score closure runs; callers check
# their own arguments before calling this.
stein_setup <- function(x, score, kernel, standardize, score_arg = "score") {
  x <- as_points(x)
  standardize <- check_flag(standardize, "standardize")
  check_score(score, x, score_arg)
  scale <- NULL
  xs <- x
  if (standardize) {
    sc <- standardize_columns(x)
    xs <- sc$x
    scale <- sc$scale
  }
  rk <- resolve_kernel(kernel, xs)
  s <- resolve_score(score, x)
  if (standardize) {
    s <- sweep(s, 2L, scale, "*")
    if (any(!is.finite(s))) {
      stop_numeric(sprintf(paste0(
        "standardising x multiplies the scores by its column scales (up to ",
        "%s) and the score of row %d overflows: rescale x or use ",
        "standardize = FALSE"), format(max(scale), digits = 3),
        first_bad_row(s)))
    }
  }
  xr <- in_basis(xs, rk)
  sr <- in_basis(s, rk)
  if (any(!is.finite(xr)) || any(!is.finite(sr))) {
    bad <- if (any(!is.finite(xr))) first_bad_row(xr) else first_bad_row(sr)
    stop_numeric(sprintf(paste0(
      "rotating row %d of x and its score into the eigenbasis of the ",
      "preconditioner overflows: rescale x"), bad))
  }
  list(x = xr, s = sr, kernel = rk, scale = scale, n = nrow(x), d = ncol(x))
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
#'   a `coda::mcmc` or `mcmc.list`, or a posterior draws object (a vector
#'   is `n` one-dimensional points; see 'Points and samples' in [kernbayes-package]).
#' @param score The score \eqn{\nabla \log p} at the rows of `x`: an `n x d`
#'   matrix (a vector as for `x`, of the dimension of `x`), a function of
#'   one point returning its gradient, or a [kb_target()].
#' @param kernel A base kernel, [imq_kernel()] (default) or
#'   [gaussian_kernel()].
#' @param standardize If `TRUE`, divide each column of `x` by its mean
#'   absolute deviation (and multiply the scores by it) before anything else;
#'   preconditioner heuristics are then computed on the standardised sample.
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
                                standardize = FALSE, nthreads = NULL) {
  nthreads <- resolve_nthreads(nthreads)
  st <- stein_setup(x, score, kernel, standardize)
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
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `interactive()`. With progress the double sum runs in about
#'   100 row blocks of equal work, reported between blocks; the result is
#'   the same number.
#' @return A number.
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
                type = c("V", "U"), standardize = FALSE, nthreads = NULL,
                blocks = NULL, progress = interactive()) {
  type <- check_choice(type, c("V", "U"), "type")
  progress <- check_flag(progress, "progress")
  if (!is.null(blocks)) {
    if (type != "V" || !is.null(weights)) {
      stop_arg("blocks", "is for the unweighted V-statistic only")
    }
    blocks <- check_count(blocks, "blocks")
    nthreads <- if (is.null(nthreads)) 1L else check_count(nthreads,
                                                           "nthreads")
    return(ksd_blocks(x, score, kernel, blocks = blocks,
                      standardize = standardize, nthreads = nthreads,
                      progress = progress))
  }
  # every argument is checked before the score closure runs
  x <- as_points(x)
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
  nthreads <- resolve_nthreads(nthreads)
  st <- stein_setup(x, score, kernel, standardize)
  sums <- if (progress) stein_sums_progress(st, weights, nthreads) else
    .Call(C_kb_stein_sums, st$x, st$s, st$kernel, weights, nthreads)
  tot <- check_total(sum(sums$sums))
  if (type == "V") {
    v <- if (is.null(weights)) tot / n^2 else tot
    return(sqrt(max(v, 0)))
  }
  off <- check_total(tot - sum(sums$diag))
  if (is.null(weights)) return(off / (n * (n - 1)))
  off / (1 - sum(weights^2))
}

#' KSD path
#'
#' The kernelized Stein discrepancy of the first \eqn{j} rows of a sample,
#' for every \eqn{j = 1, \dots, n}, in one pass of \eqn{n(n+1)/2} kernel
#' evaluations. Useful to watch a chain converge, or to compare a thinned
#' sample with the full one.
#'
#' @inheritParams stein_kernel_matrix
#' @return An object of class `kb_ksd_path`: a list with `ksd` (the KSD, as
#'   in `ksd(type = "V")`, of the first `j` rows for each `j`), `n`, `d`,
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
ksd_path <- function(x, score, kernel = imq_kernel(), standardize = FALSE,
                     nthreads = NULL) {
  nthreads <- resolve_nthreads(nthreads)
  st <- stein_setup(x, score, kernel, standardize)
  sums <- .Call(C_kb_stein_sums, st$x, st$s, st$kernel, NULL, nthreads)
  path <- sqrt(pmax(check_total(cumsum(sums$sums)), 0)) / seq_len(st$n)
  structure(list(ksd = path, n = st$n, d = st$d, kernel = st$kernel,
                 standardize = standardize, scale = st$scale),
            class = "kb_ksd_path")
}

#' @export
print.kb_ksd_path <- function(x, ...) {
  cat(sprintf("KSD path of %d points in dimension %d%s\n", x$n, x$d,
              if (x$standardize) " (standardised)" else ""))
  cat("  kernel:", describe_resolved(x$kernel), "\n")
  cat(sprintf("  KSD of all %d points: %s\n", x$n, format(x$ksd[x$n],
                                                        digits = 6)))
  invisible(x)
}

#' @export
summary.kb_ksd_path <- function(object, ...) {
  n <- object$n
  at <- unique(pmin(n, c(1L, 10L, 100L, 1000L, 10000L, 100000L, n)))
  at <- at[at <= n]
  structure(list(n = n, d = object$d, at = at, ksd = object$ksd[at],
                 min = min(object$ksd), which_min = which.min(object$ksd),
                 kernel = describe_resolved(object$kernel),
                 standardize = object$standardize),
            class = "summary.kb_ksd_path")
}

#' @export
print.summary.kb_ksd_path <- function(x, ...) {
  cat(sprintf("KSD path: n = %d, d = %d, standardised: %s\n", x$n, x$d,
              if (x$standardize) "yes" else "no"))
  cat("  kernel:", x$kernel, "\n")
  tab <- data.frame(points = x$at, ksd = signif(x$ksd, 6))
  print(tab, row.names = FALSE)
  cat(sprintf("  smallest KSD %s after %d points\n", format(x$min, digits = 6),
              x$which_min))
  invisible(x)
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
stein_sums_progress <- function(st, weights, nthreads) {
  ranges <- row_blocks(st$n, 100L)
  rep <- progress_reporter(length(ranges), "KSD: row block", TRUE)
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
#'   progressr. Default `interactive()`.
#' @section Running on a cluster: The blocks are futures: see the section
#'   "Running on a cluster" in [ksdt_chains()] for a Slurm plan.
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
                       standardize = FALSE, nthreads = 1,
                       progress = interactive()) {
  if (is.null(blocks)) {
    blocks <- if (requireNamespace("future", quietly = TRUE)) {
      max(1L, as.integer(future::nbrOfWorkers()))
    } else 1L
  }
  blocks <- check_count(blocks, "blocks")
  nthreads <- check_count(nthreads, "nthreads")
  progress <- check_flag(progress, "progress")
  st <- stein_setup(x, score, kernel, standardize)
  n <- st$n
  ranges <- row_blocks(n, blocks)
  X <- st$x
  S <- st$s
  K <- st$kernel
  one <- function(r, relay) {
    v <- sum(.Call(C_kb_stein_block_sums, X, S, K, r[1L], r[2L], nthreads,
                   NULL)$sums)
    relay(1)
    v
  }
  sums <- progress_lapply(ranges, one, length(ranges), "KSD blocks", progress)
  sqrt(max(check_total(sum(unlist(sums))) / n^2, 0))
}
