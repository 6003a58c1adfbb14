# Kernel Bayes' rule (Fukumizu, Song & Gretton 2013): posterior kernel means
# from samples, with the full path (C + LAPACK, src/kbr.c) and a low-rank
# path (pivoted incomplete Cholesky, solves in the span of the factors); the
# kb_kbr class, predict() and the posterior summaries.  The pieces here
# (data and kernel checks, low-rank factors and operators, warnings) also
# serve kbr_cv() (R/kbr-cv.R) and kbr_filter() (R/filters.R).

# A sample of observations or states (as_points(); d: their dimension when
# another argument fixes it), on a scale whose squared distances are finite.
as_obs <- function(y, arg, d = NULL) {
  y <- as_points(y, arg, d)
  # squared distances in the Gaussian kernels must not overflow
  big <- max(abs(y))
  if (big > sqrt(.Machine$double.xmax / (4 * ncol(y))) / 16) {
    stop_arg(arg, sprintf(paste0("has values up to %s: squared distances ",
                                 "would overflow; rescale the data"),
                          format(big, digits = 3)))
  }
  y
}

# Pivoted incomplete Cholesky of the Gram matrix of a resolved kernel:
# G ~ L L' with L n x r, pivots chosen greedily on the residual diagonal;
# stops when the largest residual is below tol or at max_rank columns.
# O(n r^2) time, O(n r) memory, r kernel rows.  Row p_k of L (the k-th
# pivot) is zero after column k, so L[pivots, ] is lower triangular and L =
# G[, P] L[P, ]^{-T}: the Nystrom approximation G[, P] G[P, P]^{-1} G[P, ].
incomplete_cholesky <- function(rk, x, tol = 1e-6, max_rank = nrow(x)) {
  n <- nrow(x)
  max_rank <- min(max_rank, n)
  dg <- rep(resolved_phi0(rk), n)      # the diagonal k(x, x) = phi(0)
  L <- matrix(0, n, max_rank)
  piv <- integer(0)
  for (j in seq_len(max_rank)) {
    p <- which.max(dg)
    if (dg[p] <= tol) break
    kp <- drop(gram(rk, x, x[p, , drop = FALSE]))
    col <- kp
    if (j > 1L) col <- col - drop(L[, seq_len(j - 1L), drop = FALSE] %*% L[p, seq_len(j - 1L)])
    col[piv] <- 0                      # exactly zero in exact arithmetic
    L[, j] <- col / sqrt(dg[p])
    L[p, j] <- sqrt(dg[p])             # the residual diagonal, exactly
    piv <- c(piv, p)
    dg <- pmax(dg - L[, j]^2, 0)
    dg[piv] <- 0
  }
  structure(L[, seq_along(piv), drop = FALSE], residual = max(dg),
            pivots = piv)
}

# Nystrom features of the points z (rows) for the factor L of the Gram
# matrix of x: the r x q matrix F with k(x_i, z) ~ L[i, ] F[, z], F =
# L[P, ]^{-1} k(x_P, z).  For z = x_i it is L[i, ].
lowrank_features <- function(rk, x, L, z, nthreads = NULL) {
  P <- attr(L, "pivots")
  forwardsolve(L[P, , drop = FALSE],
               gram(rk, x[P, , drop = FALSE], z, nthreads))
}

# L (L'L + c I)^{-1} B = (L L' + c I)^{-1} L B, from the SVD L = U S V':
# U diag(s / (s^2 + c)) V' B.  The factor s / (s^2 + c) is at most
# 1 / (2 sqrt(c)), so this stays accurate for any c > 0 (the Woodbury form
# (v - L (c I + L'L)^{-1} L'v) / c cancels catastrophically for small c).
lowrank_ridge <- function(L, c, B) {
  s <- svd(L)
  s$u %*% ((s$d / (s$d^2 + c)) * crossprod(s$v, B))
}

# Prior weights: finite, with a positive total, rescaled to sum 1 (the prior
# is a probability measure; the regularisers assume it).  Scaled by the
# largest |weight| first so that huge weights do not overflow the sum.
check_prior_weights <- function(w, l) {
  if (is.null(w)) return(rep(1 / l, l))
  if (!is.numeric(w) || length(w) != l || anyNA(w) || any(!is.finite(w))) {
    stop_arg("prior_weights", sprintf("must be %d finite numbers, one per prior point",
                                      l))
  }
  w <- as.double(w)
  big <- max(abs(w))
  s <- if (big > 0) sum(w / big) else 0
  if (!(s > 1e-12 * l)) {
    stop_arg("prior_weights", sprintf(paste0(
      "must have a positive sum (the prior's total mass); they sum to %s"),
      format(sum(w), digits = 3)))
  }
  (w / big) / s
}

check_reg <- function(v, arg) {
  if (is.null(v)) return(NULL)
  check_number(v, arg, lower = 0, lower_open = TRUE)
}

#' Kernel Bayes' rule
#'
#' Computes posteriors from samples alone (Fukumizu, Song and Gretton,
#' 2013): a joint sample \eqn{(X_i, Y_i)} stands for the likelihood, a
#' weighted sample \eqn{(U_j, \gamma_j)} for the prior, and the posterior
#' given an observation \eqn{y} comes out as weights \eqn{w} on the
#' \eqn{X_i}: \eqn{E[f(X) | y] \approx \sum_i w_i f(X_i)}.
#'
#' With \eqn{m_i = \sum_j \gamma_j k_X(X_i, U_j)},
#' \eqn{\mu = n (G_X + n\epsilon I)^{-1} m} and \eqn{\Lambda =
#' \mathrm{diag}(\mu)}, the weights are \eqn{w = \Lambda G_Y ((\Lambda
#' G_Y)^2 + n^2\delta I)^{-1} \Lambda k_Y(y)} (`method = "kbr"`), or the
#' importance-weighting form \eqn{w = D^{1/2} (D^{1/2} G_Y D^{1/2} +
#' n\delta I)^{-1} D^{1/2} k_Y(y)}, \eqn{D = \mathrm{diag}(\max(\mu,
#' 0))}, a positive definite solve (`method = "iw"`).
#'
#' The importance-weighting form is that of Xu et al. (2022) with kernel
#' features: \eqn{\mu} is then the KuLSIF estimate of the density ratio of
#' the prior to the marginal of \eqn{X} at the \eqn{X_i} (the minimiser of
#' \eqn{\frac{1}{2n}\sum_i r(X_i)^2 - \sum_j \gamma_j r(U_j) +
#' \frac{\epsilon}{2}\|r\|^2} evaluated at the \eqn{X_i} is exactly
#' \eqn{\mu} above), clipped at zero, and the posterior weights are those of
#' the kernel ridge regression of the features of \eqn{X} on those of
#' \eqn{Y} weighted by the ratio (loss \eqn{\frac{1}{n}\sum_i D_{ii} \|
#' \phi(X_i) - W\psi(Y_i)\|^2 + \delta \|W\|^2}).
#'
#' **Regulariser convention.** Both regularisers are those of the
#' population operators: the Gram-matrix formulas above carry the factors
#' \eqn{n} and \eqn{n^2} that turn, e.g., \eqn{\Lambda G_Y / n} into the
#' estimate of a covariance operator, so a good `eps` or `delta` does not
#' depend on the sample size (`vignette("kernel-bayes-rule")` runs one
#' setting at every \eqn{n}). Kernel values are at most 1, so the useful
#' range is about \eqn{10^{-6}} to 1 for both.
#'
#' The fit keeps the factorised operator, so [predict()] for many
#' observations costs one matrix product. With `rank`, the Gram matrices are
#' replaced by pivoted incomplete Cholesky factors of at most `rank` columns
#' (the Nystrom approximation on the chosen pivots), kernel vectors by their
#' Nystrom features, and both solves are done in the \eqn{r}-dimensional
#' span of the factors (an SVD or eigen-decomposition, accurate for any
#' `eps`, `delta` > 0): \eqn{O(n r^2)} time and \eqn{O(n r)} memory. A
#' factor that leaves more than 0.1 of the kernel's diagonal unexplained
#' gives a warning.
#'
#' **Memory.** The full path holds about five \eqn{n \times n}{n x n}
#' matrices (\eqn{40 n^2} bytes). Work that would need more than the option
#' `kernbayes.max_memory` (bytes, default 16 GiB) stops before allocating
#' anything, with an error naming the argument and the memory it needs.
#'
#' When `eps` or `delta` is `NULL`, it is chosen by 5-fold
#' cross-validation over [kbr_cv()]'s default grid (with a message giving
#' the cost): `delta` by the regression criterion, then `eps` by the
#' marginal criterion among the settings of that `delta` (see [kbr_cv()]
#' for both; the regression criterion barely depends on `eps`, the
#' marginal one does). When `n` is larger than `cv_points`, the search
#' runs on three random subsamples of `cv_points` points, each criterion
#' summed over them (drawn under a fixed seed, the global RNG state left
#' as it was; the bandwidths are still the fit's, from all the data). Each
#' fold and `eps` costs one eigen-decomposition, of size `0.8 cv_points`
#' rather than `0.8 n`, and serves both criteria and every `delta`. On 16
#' Gaussian toys at `n = 1200`, `d = 4` the default costs about 4 fixed
#' fits where the exhaustive regression search took about 19, and its
#' picks' posterior-mean error is below that search's (measurements in
#' NEWS, `vignette("kernel-bayes-rule")`,
#' `inst/experiments/kbr-cv-default.R` and `inst/bench/bench-kbr.R`).
#' `cv_points = Inf` runs the same rule on all points.
#'
#' @param x An `n x dx` sample of the hidden variable (a vector is `n`
#'   values of a one-dimensional `x`; see 'Points and samples' in
#'   [kernbayes-package]).
#' @param y The matching `n x dy` sample of the observed variable (likewise).
#' @param prior Prior sample \eqn{U} (`l x dx`; a vector is one point when
#'   `dx > 1`); `NULL` means `x` itself.
#' @param prior_weights Prior weights \eqn{\gamma} (length `l`, may be
#'   negative, with a positive sum); they are rescaled to sum 1 (the prior is
#'   a probability measure). Default equal weights \eqn{1/l}.
#' @param kernel_x,kernel_y Gaussian kernels (bandwidths default to the
#'   median heuristic on `x` and `y`).
#' @param eps,delta Regularisers (positive), or `NULL` to choose them by
#'   cross-validation (needs at least 5 rows).
#' @param method `"kbr"` or `"iw"`.
#' @param rank `NULL` (full path) or the maximum rank of the low-rank path.
#' @param tol Tolerance of the incomplete Cholesky (largest residual
#'   diagonal), in \eqn{[0, 1)}.
#' @param nthreads Threads for the Gram matrices and the default
#'   cross-validation (see [kbr_cv()]).
#' @param progress Show progress (see 'Progress' in [kernbayes-package]):
#'   the cross-validation folds when `eps` or `delta` is chosen, then the
#'   stages of the fit. Default `NULL` (automatic).
#' @param cv_points When `eps` or `delta` is chosen: the number of points
#'   the cross-validation runs on (three random subsamples when `n` is
#'   larger; at least 5); `Inf`: all `n` points.
#' @return An object of class `kb_kbr`, with `predict()`, `print()`,
#'   [summary()][summary.kb_kbr()], [plot()][plot.kb_kbr()] and the helpers
#'   [posterior_mean()], [posterior_expect()], [posterior_sd()],
#'   [posterior_ci()] and [preimage()]. It records how `eps` and
#'   `delta` were set (`tuning`) and the prior sample (`prior`,
#'   `prior_weights`, rescaled).
#' @references Fukumizu, K., Song, L. and Gretton, A. (2013). Kernel Bayes'
#'   rule: Bayesian inference with positive definite kernels. *JMLR* 14,
#'   3753-3783. Xu, L., Chen, Y., Doucet, A. and Gretton, A. (2022).
#'   Importance weighting approach in kernel Bayes' rule. *ICML*.
#' @examples
#' set.seed(1)
#' x <- rnorm(300)
#' y <- x + rnorm(300, sd = 0.5)
#' fit <- kbr(x, y, eps = 0.01, delta = 1e-4)
#' posterior_mean(fit, c(-1, 0, 1))   # exact: 0.8 * y under a N(0, 1) prior
#' @export
kbr <- function(x, y, prior = NULL, prior_weights = NULL,
                kernel_x = gaussian_kernel(), kernel_y = gaussian_kernel(),
                eps = NULL, delta = NULL, method = c("kbr", "iw"), rank = NULL,
                tol = 1e-6, cv_points = 400, nthreads = NULL,
                progress = NULL) {
  method <- check_choice(method, c("kbr", "iw"), "method")
  if (!(is.numeric(cv_points) && length(cv_points) == 1L &&
        identical(cv_points, Inf))) {
    cv_points <- tryCatch(check_count(cv_points, "cv_points", min = 5L),
                          kb_error_arg = function(e) {
      stop_arg("cv_points", "must be a single whole number >= 5, or Inf")
    })
  }
  progress <- check_progress(progress)
  x <- as_obs(x, "x")
  y <- as_obs(y, "y")
  n <- nrow(x)
  if (nrow(y) != n) {
    stop_arg("y", sprintf("must have as many rows as x (%d); it has %d", n,
                          nrow(y)))
  }
  if (n < 2L) stop_arg("x", "must have at least 2 rows (sample points)")
  U <- if (is.null(prior)) x else as_obs(prior, "prior", ncol(x))
  if (ncol(U) != ncol(x)) {
    stop_arg("prior", sprintf("must have %d columns, like x", ncol(x)))
  }
  gam <- check_prior_weights(prior_weights, nrow(U))
  eps <- check_reg(eps, "eps")
  delta <- check_reg(delta, "delta")
  # which regularisers the user left to the cross-validation (summary())
  chosen <- c(eps = is.null(eps), delta = is.null(delta))
  if (!is.null(rank)) rank <- check_count(rank, "rank", max = n)
  # the Gaussian kernel's diagonal is 1: a tolerance of 1 leaves no column
  tol <- check_number(tol, "tol", lower = 0, upper = 1, upper_open = TRUE)
  check_gaussian(kernel_x, "kernel_x")
  check_gaussian(kernel_y, "kernel_y")
  resolve_nthreads(nthreads)
  if (is.null(rank)) {
    # G_X, G_Y, k_X(x, U), the Cholesky copy of G_X and the weights'
    # factorisation (two n x n for "kbr")
    check_memory(8 * (5 * n^2 + if (is.null(prior)) 0 else n * nrow(U)), "x",
                 sprintf("kbr() with %d points on the full path", n),
                 "give 'rank' for the low-rank path")
  } else if (!is.null(prior)) {
    check_memory(8 * (2 * n * rank + 2 * rank * nrow(U)), "prior",
                 sprintf("the low-rank prior embedding of %d prior points",
                         nrow(U)))
  }
  # kernels that fail on the data are named before any tuning
  rkx <- resolve_data_kernel(kernel_x, x, "kernel_x", "x")
  rky <- resolve_data_kernel(kernel_y, y, "kernel_y", "y")
  if (is.null(eps) || is.null(delta)) {
    best <- kbr_tune(x, y, list(eps = eps, delta = delta, method = method,
                                kernel_x = kernel_x, kernel_y = kernel_y),
                     list(progress = progress, nthreads = nthreads,
                          points = cv_points))
    eps <- best$eps
    delta <- best$delta
  }
  fit <- list(x = x, y = y, n = n, eps = eps, delta = delta, method = method,
              rank = rank, kernel_x = rkx, kernel_y = rky, nthreads = nthreads)
  fit$tuning <- kbr_tuning_record(chosen, if (any(chosen)) best)
  # the prior sample, for plot()
  fit$prior <- U
  fit$prior_weights <- gam
  prog <- progress_reporter(3, "KBR fit: stage", progress)
  on.exit(prog$done())
  if (is.null(rank)) {
    prog$tick(0, "Gram matrices")
    gx <- gram(rkx, x, x, nthreads)
    gy <- gram(rky, y, y, nthreads)
    m <- if (is.null(prior)) drop(gx %*% gam) else
      drop(gram(rkx, x, U, nthreads) %*% gam)
    check_prior_reach(m)
    prog$tick(1, "solves")
    res <- .Call(C_kb_kbr_fit, gx, m, gy, eps, delta, method)
    route <- list(mu = res$mu, gy = gy, factor = res$F, ipiv = res$ipiv)
  } else {
    prog$tick(0, "incomplete Cholesky factors")
    Lx <- incomplete_cholesky(rkx, x, tol, rank)
    Ly <- incomplete_cholesky(rky, y, tol, rank)
    prog$tick(1, "low-rank solves")
    # G_X ~ Lx Lx' and k_X(x_i, u) ~ Lx[i, ] f(u): the prior embedding m =
    # Lx b lies in the span of Lx, and so does mu = n (Lx Lx' + n eps I)^{-1} m
    b <- if (is.null(prior)) crossprod(Lx, gam) else
      lowrank_features(rkx, x, Lx, U, nthreads) %*% gam
    check_prior_reach(drop(Lx %*% b))
    mu <- drop(n * lowrank_ridge(Lx, n * eps, b))
    route <- list(mu = mu, Ly = Ly, B = lowrank_operator(Ly, mu, delta, method),
                  rank_x = ncol(Lx), rank_y = ncol(Ly),
                  # largest residual diagonal left by the factorisations
                  # (0 = exact)
                  residual = c(x = attr(Lx, "residual"),
                               y = attr(Ly, "residual")))
    warn_coarse(route$residual, c(route$rank_x, route$rank_y))
  }
  prog$tick(3, "done")
  if (!all(is.finite(route$mu))) {
    stop_numeric("the prior-to-joint weights mu are not finite; increase 'eps'")
  }
  new_kbr(fit, route)
}

# The one constructor of kb_kbr: `fit`, the data, settings, kernels,
# tuning record and prior; `route`, the operator of the full path (mu, gy,
# factor, ipiv) or of the low-rank path (mu, Ly, B, rank_x, rank_y,
# residual). Every fit has every field, NULL where its path has none.
new_kbr <- function(fit, route) {
  f <- c("mu", "gy", "factor", "ipiv", "Ly", "B", "rank_x", "rank_y",
         "residual")
  structure(c(fit, lapply(stats::setNames(f, f), function(k) route[[k]])),
            class = "kb_kbr")
}

# resolve_kernel() for a kernel argument of kbr(): a median heuristic that
# fails on the data names the kernel argument and the data.
# An error about the data's scale names the data (data_arg), not 'x'.
# `hint`: how to give a fixed bandwidth instead.
resolve_data_kernel <- function(kernel, x, arg, data_arg,
                                hint = "gaussian_kernel(bandwidth = 1)") {
  tryCatch(resolve_kernel(kernel, x, arg = data_arg), kb_error_arg = function(e) {
    if (!identical(e$arg, "precon")) stop(e)
    stop_arg(arg, sprintf(paste0("uses the median heuristic, which fails on ",
                                 "'%s' (%s); give a fixed bandwidth, e.g. %s"),
                          data_arg,
                          sub(sprintf("; %s has", data_arg), "; it has",
                              sub("^'precon' = \"[a-z]+\" ", "", conditionMessage(e)),
                              fixed = TRUE), hint))
  })
}

# The prior embedding m_i = sum_j gamma_j k_X(X_i, U_j) at the training x:
# identically zero (every kernel value underflows) makes mu, and then every
# posterior weight, exactly 0, so posterior_mean() would return 0 as if it
# were an answer; below 1e-8 everywhere the posterior is unreliable.
check_prior_reach <- function(m) {
  if (all(m == 0)) {
    stop_arg("prior", paste0(
      "is beyond the reach of kernel_x from every row of x: all kernel ",
      "values k_X(x_i, u_j) are 0, so every posterior weight would be 0; ",
      "give a prior within the range of x or a wider kernel_x"))
  }
  if (max(abs(m)) < 1e-8) {
    warning(sprintf(paste0(
      "the prior is far from all training x: its kernel embedding is at ",
      "most %.2g at the rows of x, so the posterior is unreliable"),
      max(abs(m))), call. = FALSE)
  }
}

check_gaussian <- function(kernel, arg) {
  if (!inherits(kernel, "kb_gaussian")) {
    stop_arg(arg, "must be a Gaussian kernel (gaussian_kernel())")
  }
}

# Warn when a low-rank factor leaves more than a tenth of a kernel's
# diagonal (k(x, x) = 1) unexplained: the result is then that of a coarse
# approximation of the Gram matrix.
warn_coarse <- function(residual, ranks) {
  bad <- which(residual > 0.1)
  if (length(bad)) {
    b <- bad[1L]
    warning(sprintf(paste0("the rank-%d factor of the Gram matrix of %s leaves ",
                           "a residual of %.2g on its diagonal (of 1): the ",
                           "low-rank result is a coarse approximation; ",
                           "increase 'rank' or use the full path"),
                    ranks[b], names(residual)[b], residual[b]), call. = FALSE)
  }
}

# Warn about observations with every kernel value to the training y below
# 1e-8: their posterior weights are then meaningless.
warn_far <- function(K, what = "so the posterior is unreliable") {
  far <- which(apply(K, 2L, max) < 1e-8)
  if (length(far)) {
    warning(sprintf(paste0("%d observation(s) far from all training y ",
                           "(e.g. number %d): every kernel value is below ",
                           "1e-8, %s"),
                    length(far), far[1L], what), call. = FALSE)
  }
  invisible(far)
}

# The n x r matrix B of the low-rank posterior weights W = B F(y), F(y) the
# Nystrom features of the observations (G_Y ~ F F' with F = Ly, k_Y(y) ~ Ly
# F(y)); delta in the operator convention, as in src/kbr.c.
# "kbr": W = L G ((L G)^2 + n^2 delta I)^{-1} L k with L = diag(mu); with A
#   = L Ly and M = Ly' L Ly (r x r, symmetric), ((L G)^2 + c I)^{-1} A = A
#   (M^2 + c I)^{-1}, so W = A M (M^2 + c I)^{-1} F(y) = A V diag(e / (e^2
#   + c)) V' F(y) for M = V diag(e) V'.
# "iw": W = s (H H' + n delta I)^{-1} H F(y), H = s Ly, s = sqrt(max(mu, 0)).
# Both stay accurate as delta -> 0 (e / (e^2 + c) <= 1 / (2 sqrt(c))).
lowrank_operator <- function(Ly, mu, delta, method) {
  n <- nrow(Ly)
  if (method == "kbr") {
    A <- mu * Ly
    e <- eigen(crossprod(Ly, A), symmetric = TRUE)
    A %*% (e$vectors %*% ((e$values / (e$values^2 + n^2 * delta)) *
                            t(e$vectors)))
  } else {
    s <- sqrt(pmax(mu, 0))
    s * lowrank_ridge(s * Ly, n * delta, diag(ncol(Ly)))
  }
}

#' @rdname kbr
#' @param object A `kb_kbr` fit.
#' @param newdata Observations: a matrix with `dy` columns; a vector is `n`
#'   values when `dy = 1` and one observation of length `dy` when `dy > 1`
#'   (see 'Points and samples' in [kernbayes-package]). Missing or `NULL`:
#'   the fit's own observations `y` (the posterior at each training `y`).
#' @param weights `"signed"` (default for `predict()`): the weights of kernel
#'   Bayes' rule as computed, some of them negative; `"nonnegative"`: their
#'   positive part renormalised to sum 1 in each column (see
#'   [posterior_expect()]).
#' @param y_new Deprecated: the old name of `newdata` (a message once per
#'   session).
#' @param ... Ignored.
#' @return `predict()`: the `n x n_new` matrix of posterior weights, one
#'   column per observation. An observation far from all training `y` (all
#'   kernel values below 1e-8) has no posterior: its column is `NA`, with a
#'   warning.
#' @export
predict.kb_kbr <- function(object, newdata = NULL,
                           weights = c("signed", "nonnegative"), y_new, ...) {
  if (!missing(y_new)) {
    newdata <- deprecated_arg("y_new", "newdata", "predict", y_new,
                              is.null(newdata))
  }
  check_kbr_fit(object, "object")
  weights <- check_choice(weights, c("signed", "nonnegative"), "weights")
  kbr_weights(object, new_obs(object, newdata), weights)
}

# The posterior weights at the observations yn (rows), n x n_new: signed (as
# computed) or nonnegative (projected onto the simplex); the column of an
# observation far from all training y (warn_far()) is NA.
kbr_weights <- function(fit, yn, weights = "signed") {
  K <- gram(fit$kernel_y, fit$y, yn, fit$nthreads)
  far <- warn_far(K, "so it has no posterior: its results are NA")
  W <- if (is.null(fit$rank)) {
    .Call(C_kb_kbr_apply, fit$gy, fit$mu, fit$factor, fit$ipiv,
          fit$method, K)
  } else {
    fit$B %*% lowrank_features(fit$kernel_y, fit$y, fit$Ly, yn,
                               fit$nthreads)
  }
  if (!all(is.finite(W[, setdiff(seq_len(ncol(W)), far)]))) {
    stop_numeric("the posterior weights are not finite; increase 'delta'")
  }
  W[, far] <- NA_real_
  if (weights == "nonnegative") W <- nonnegative_weights(W)
  W
}

# The Euclidean projection of each column onto the probability simplex,
# argmin ||v - w|| over v >= 0, sum v = 1: v = max(w - theta, 0) with theta
# from the sorted weights (the pivot rule of Held, Wolfe and Crowder, 1974;
# Duchi et al., 2008); NA columns stay NA.  O(n log n) per column.
nonnegative_weights <- function(W) {
  for (q in seq_len(ncol(W))) {
    w <- W[, q]
    if (anyNA(w)) next
    u <- sort(w, decreasing = TRUE)
    cs <- cumsum(u)
    k <- max(which(u - (cs - 1) / seq_along(u) > 0))
    W[, q] <- pmax(w - (cs[k] - 1) / k, 0)
  }
  W
}

# newdata as a matrix of observations (NULL: the training y), checked
# against the fit's dimension of y.
new_obs <- function(object, newdata, arg = "newdata") {
  dy <- ncol(object$y)
  if (is.null(newdata)) return(object$y)
  yn <- as_points(newdata, arg, dy)
  if (ncol(yn) != dy) {
    stop_arg(arg, sprintf("must have %d columns (the dimension of y); it has %d",
                          dy, ncol(yn)))
  }
  yn
}

check_kbr <- function(fit) {
  if (!inherits(fit, "kb_kbr")) stop_arg("fit", "must be a kbr() fit")
  check_kbr_fit(fit, "fit")
}

# The fields predict() relies on, as kbr() made them (an edited fit is an
# error naming the field, not a failure inside C).
check_kbr_fit <- function(fit, arg) {
  bad <- function(field) {
    stop_state(sprintf("'%s' is not a kbr() fit as made by kbr(): its field '%s' is missing or was changed",
                       arg, field))
  }
  n <- fit$n
  if (!is.numeric(n) || length(n) != 1L || is.na(n)) bad("n")
  if (!is.matrix(fit$x) || !is.double(fit$x) || nrow(fit$x) != n) bad("x")
  if (!is.matrix(fit$y) || !is.double(fit$y) || nrow(fit$y) != n) bad("y")
  if (!is.double(fit$mu) || length(fit$mu) != n || !all(is.finite(fit$mu))) bad("mu")
  if (!identical(fit$method, "kbr") && !identical(fit$method, "iw")) bad("method")
  if (!inherits(fit$kernel_y, "kb_resolved_kernel")) bad("kernel_y")
  if (!inherits(fit$kernel_x, "kb_resolved_kernel")) bad("kernel_x")
  if (is.null(fit$rank)) {
    if (!is.matrix(fit$gy) || !is.double(fit$gy) || any(dim(fit$gy) != n)) bad("gy")
    if (!is.matrix(fit$factor) || !is.double(fit$factor) ||
        any(dim(fit$factor) != n)) bad("factor")
    if (!is.integer(fit$ipiv) || length(fit$ipiv) != n) bad("ipiv")
  } else {
    r <- ncol(fit$Ly)
    if (!is.matrix(fit$Ly) || nrow(fit$Ly) != n ||
        length(attr(fit$Ly, "pivots")) != r) bad("Ly")
    if (!is.matrix(fit$B) || any(dim(fit$B) != c(n, r))) bad("B")
  }
  fit
}

#' Posterior summaries from a KBR fit
#'
#' `posterior_mean()` gives \eqn{\sum_i w_i X_i} for each observation,
#' `posterior_expect()` gives \eqn{\sum_i w_i f(X_i)}, `posterior_sd()` and
#' `posterior_ci()` the spread of the weighted sample, and
#' `preimage()` finds a point whose kernel feature best matches the
#' posterior kernel mean (Gaussian kernel): the fixed point of \eqn{x
#' \leftarrow \sum_i w_i k(X_i, x) X_i / \sum_i w_i k(X_i, x)}, started at
#' the posterior mean.
#'
#' **Signed and nonnegative weights.** The weights \eqn{w} of kernel Bayes'
#' rule estimate the posterior's kernel mean; many are negative (on the 1-d
#' toy of the examples, a third to two fifths of them) and they need not sum
#' to 1, so \eqn{\sum_i w_i f(X_i)} for an \eqn{f} with values in \eqn{[0,
#' 1]} can leave \eqn{[0, 1]} (probabilities of -0.04 or 1.08 are typical).
#' `weights = "nonnegative"` uses instead the probability vector closest to
#' \eqn{w}, its Euclidean projection onto the simplex: \eqn{\tilde w_i =
#' \max(w_i - \theta, 0)} with \eqn{\theta} such that \eqn{\sum_i \tilde w_i
#' = 1}, found by sorting (\eqn{O(n \log n)} per observation on top of the
#' weights). Expectations of an \eqn{f} with values in \eqn{[a, b]} then
#' lie in \eqn{[a, b]}. It is the default of `posterior_expect()`;
#' `posterior_mean()` keeps the signed weights by default (the estimator of
#' Fukumizu et al., 2013, whose consistency results are for it),
#' `posterior_sd()` and `posterior_ci()` use the nonnegative ones (a
#' variance or a quantile needs a probability vector). The simpler positive
#' part renormalised, \eqn{\max(w_i, 0) / \sum_j \max(w_j, 0)}, keeps the
#' many small positive weights far from the posterior: on the 1-d toy with
#' `eps` 1e-3 or 1e-2 its probabilities were about twice as far from the
#' exact ones as the projection's (it did better only at `eps = 0.1`, where
#' every estimate was poor; `inst/experiments/kbr-readable-posterior.R`),
#' so it is not offered.
#'
#' What is known of their consistency: Fukumizu et al. (2013) prove rates
#' for the signed estimator \eqn{\sum_i w_i f(X_i)} of \eqn{E[f(X) \mid y]}
#' for \eqn{f} in (a smoothness class of) the RKHS; Kanagawa and Fukumizu
#' (2014) show that, with a Gaussian kernel, weighted sums
#' \eqn{\sum_i w_i f(X_i)} from a consistent kernel-mean estimator with
#' signed weights converge to the expectation for \eqn{f} in a Besov space,
#' and that moments and probabilities of intervals can be recovered;
#' Kanagawa et al. (2016) analyse such weighted samples in filtering
#' through their effective sample size. We found no consistency result for
#' projected (or truncated and renormalised) weights. The projection
#' changes a bounded \eqn{f}'s estimate by at most \eqn{\|f\|_\infty
#' \sum_i |\tilde w_i - w_i|}, so it inherits the signed estimator's
#' consistency where that distance vanishes, and is a heuristic otherwise.
#' Measured on the 1-d toy (41 observations, 5 seeds, `eps` 1e-3 or 1e-2),
#' its event probabilities were about as close to the exact ones as the
#' signed estimate's (root mean square error 0.033-0.048 against
#' 0.019-0.056) while staying in \eqn{[0, 1]}; the signed ones ranged from
#' -0.03 to 1.05.
#'
#' **Spread.** `posterior_sd()` is the weighted standard deviation
#' \eqn{(\sum_i \tilde w_i (X_i - \tilde m)^2)^{1/2}}, \eqn{\tilde m =
#' \sum_i \tilde w_i X_i}, per coordinate; `posterior_ci()` the
#' equal-tailed interval of the weighted sample: per coordinate, the
#' \eqn{(1 - \mathrm{level})/2} and \eqn{(1 + \mathrm{level})/2} quantiles
#' \eqn{Q(p) = \min\{X_i : \sum_{j: X_j \le X_i} \tilde w_j \ge p\}}. They
#' describe the kernel estimate of the posterior, not exact credible
#' intervals: their accuracy is that of the weights (regularisation, sample
#' size and bandwidths), and a weighted sample on the training states cannot
#' reach outside their range. On the 1-d toy (exact sd 0.447) the sds were
#' 0.57-0.59 and the 95% intervals held 0.97-0.98 of the exact posterior's
#' mass: too wide, as the weights spread over more points than the
#' posterior.
#'
#' **Far observations.** An observation far from all training `y` (every
#' kernel value below 1e-8) has no posterior: its row of every result is
#' `NA`, with a warning (as in [kbr_filter()]).
#'
#' @param fit A [kbr()] fit.
#' @param newdata Observations (see [predict.kb_kbr()]); missing or `NULL`:
#'   the fit's own observations `y`.
#' @param f A function of one row of `x` returning a number or a vector.
#' @param weights `"nonnegative"` or `"signed"` (see Details); the default
#'   is the first of the choices shown in the usage.
#' @param level Probability of the interval, in (0, 1).
#' @param max_iter,tol Iteration limit and tolerance (on the change of
#'   \eqn{x}) of the fixed-point iteration.
#' @param y_new Deprecated: the old name of `newdata` (a message once per
#'   session).
#' @return `posterior_mean()`, `posterior_expect()`, `posterior_sd()`,
#'   `preimage()`: a matrix with one row per observation.
#'   `posterior_ci()`: a list of two such matrices, `lower` and
#'   `upper`, with `level`. (Not called `posterior_interval()`: rstantools,
#'   brms and rstanarm export a generic of that name, which one package
#'   would mask for the other.)
#' @references Fukumizu, K., Song, L. and Gretton, A. (2013). Kernel Bayes'
#'   rule: Bayesian inference with positive definite kernels. *JMLR* 14,
#'   3753-3783. Kanagawa, M. and Fukumizu, K. (2014). Recovering
#'   distributions from Gaussian RKHS embeddings. *AISTATS*, PMLR 33,
#'   457-465. Kanagawa, M., Nishiyama, Y., Gretton, A. and Fukumizu, K.
#'   (2016). Filtering with state-observation examples via kernel Monte
#'   Carlo filter. *Neural Computation* 28, 382-444.
#' @examples
#' set.seed(1)
#' x <- rnorm(300)
#' y <- x + rnorm(300, sd = 0.5)
#' fit <- kbr(x, y, eps = 0.01, delta = 1e-4)
#' posterior_expect(fit, 1, function(x) x^2)   # E[X^2 | y = 1]
#' # P(X > 0 | y), exact pnorm(0.8 * y / sqrt(0.2)): in [0, 1] by default
#' posterior_expect(fit, c(-2, 0, 1.5), function(x) x > 0)
#' posterior_expect(fit, c(-2, 0, 1.5), function(x) x > 0, weights = "signed")
#' posterior_sd(fit, 1)                        # exact sqrt(0.2) = 0.447
#' posterior_ci(fit, 1)                  # exact 0.8 -/+ 0.877
#' preimage(fit, 1)
#' @export
posterior_mean <- function(fit, newdata = NULL,
                           weights = c("signed", "nonnegative"), y_new) {
  if (!missing(y_new)) {
    newdata <- deprecated_arg("y_new", "newdata", "posterior_mean", y_new,
                              is.null(newdata))
  }
  check_kbr(fit)
  weights <- check_choice(weights, c("signed", "nonnegative"), "weights")
  W <- kbr_weights(fit, new_obs(fit, newdata), weights)
  out <- crossprod(W, fit$x)
  colnames(out) <- colnames(fit$x)
  out
}

#' @rdname posterior_mean
#' @export
posterior_expect <- function(fit, newdata = NULL, f,
                             weights = c("nonnegative", "signed"), y_new) {
  if (!missing(y_new)) {
    newdata <- deprecated_arg("y_new", "newdata", "posterior_expect", y_new,
                              is.null(newdata))
  }
  check_kbr(fit)
  yn <- new_obs(fit, newdata)
  weights <- check_choice(weights, c("nonnegative", "signed"), "weights")
  if (missing(f) || !is.function(f)) {
    stop_arg("f", "must be a function of one row of x")
  }
  X <- fit$x
  Fx <- NULL
  for (i in seq_len(nrow(X))) {
    v <- f(X[i, ])
    if (!(is.numeric(v) || is.logical(v)) || !is.null(dim(v)) && length(dim(v)) > 2L ||
        length(v) < 1L) {
      stop_f_result(sprintf(paste0(
        "'f' must return a numeric vector (the function's values at one ",
        "row of x); at row %d of x it returned %s"), i, describe_value(v)))
    }
    if (is.null(Fx)) {
      Fx <- matrix(0, nrow(X), length(v))
    } else if (length(v) != ncol(Fx)) {
      stop_f_result(sprintf(paste0(
        "'f' must return vectors of one length; it returned length %d at ",
        "row 1 of x and %d at row %d"), ncol(Fx), length(v), i))
    }
    if (anyNA(v) || any(!is.finite(v))) {
      stop_f_result(sprintf(paste0(
        "'f' must return finite numbers; it returned NA, NaN or Inf at row ",
        "%d of x"), i))
    }
    Fx[i, ] <- v
  }
  W <- kbr_weights(fit, yn, weights)
  out <- crossprod(W, Fx)
  if (!all(is.finite(out[!is.na(colSums(W)), ]))) {
    stop_numeric("the posterior expectation overflows: the values of 'f' are ",
                 "too large (scale them)")
  }
  out
}

#' @rdname posterior_mean
#' @export
posterior_sd <- function(fit, newdata = NULL, y_new) {
  if (!missing(y_new)) {
    newdata <- deprecated_arg("y_new", "newdata", "posterior_sd", y_new,
                              is.null(newdata))
  }
  check_kbr(fit)
  W <- kbr_weights(fit, new_obs(fit, newdata), "nonnegative")
  out <- posterior_spread(W, fit$x)
  colnames(out) <- colnames(fit$x)
  out
}

# Per column of the probability vectors W (n x q, NA columns allowed) the
# weighted sd of each column of X (n x d): q x d, from the centred sum.
posterior_spread <- function(W, X) {
  m <- crossprod(W, X)
  out <- matrix(NA_real_, ncol(W), ncol(X))
  for (k in seq_len(ncol(X))) {
    D <- outer(X[, k], m[, k], "-")       # n x q deviations
    out[, k] <- sqrt(colSums(W * D^2))
  }
  out
}

#' @rdname posterior_mean
#' @export
posterior_ci <- function(fit, newdata = NULL, level = 0.95, y_new) {
  if (!missing(y_new)) {
    newdata <- deprecated_arg("y_new", "newdata", "posterior_ci", y_new,
                              is.null(newdata))
  }
  check_kbr(fit)
  level <- check_number(level, "level", lower = 0, upper = 1,
                        lower_open = TRUE, upper_open = TRUE)
  W <- kbr_weights(fit, new_obs(fit, newdata), "nonnegative")
  lower <- weighted_quantiles(W, fit$x, (1 - level) / 2)
  upper <- weighted_quantiles(W, fit$x, (1 + level) / 2)
  colnames(lower) <- colnames(upper) <- colnames(fit$x)
  list(lower = lower, upper = upper, level = level)
}

# Q(p) = min {X_i : sum_{j: X_j <= X_i} w_j >= p} per column of W
# (probability vectors; NA columns give NA) and per column of X: q x d.
weighted_quantiles <- function(W, X, p) {
  out <- matrix(NA_real_, ncol(W), ncol(X))
  for (k in seq_len(ncol(X))) {
    o <- order(X[, k])
    xs <- X[o, k]
    for (q in seq_len(ncol(W))) {
      if (anyNA(W[, q])) next
      cw <- cumsum(W[o, q])
      i <- which(cw >= p)[1L]
      out[q, k] <- xs[if (is.na(i)) length(xs) else i]
    }
  }
  out
}

# A user function returned something unusable (class kb_error_callback).
stop_f_result <- function(msg) {
  stop(kb_error(msg, "kb_error_callback", "f"))
}

describe_value <- function(v) {
  if (is.null(v)) return("NULL")
  sprintf("an object of type '%s' and length %d", typeof(v), length(v))
}

#' @rdname posterior_mean
#' @export
preimage <- function(fit, newdata = NULL, max_iter = 100, tol = 1e-8, y_new) {
  if (!missing(y_new)) {
    newdata <- deprecated_arg("y_new", "newdata", "preimage", y_new,
                              is.null(newdata))
  }
  check_kbr(fit)
  max_iter <- check_count(max_iter, "max_iter")
  tol <- check_number(tol, "tol", lower = 0)
  W <- kbr_weights(fit, new_obs(fit, newdata))
  X <- fit$x
  out <- crossprod(W, X)
  for (q in seq_len(ncol(W))) {
    if (anyNA(W[, q])) next           # a far observation: NA
    z <- out[q, ]
    for (it in seq_len(max_iter)) {
      kz <- drop(gram(fit$kernel_x, X, matrix(z, 1L))) * W[, q]
      den <- sum(kz)
      if (!is.finite(den) || abs(den) < 1e-300) break
      znew <- drop(crossprod(kz, X)) / den
      done <- max(abs(znew - z)) <= tol * max(1, max(abs(z)))
      z <- znew
      if (done) break
    }
    out[q, ] <- z
  }
  colnames(out) <- colnames(X)
  out
}

#' @export
print.kb_kbr <- function(x, ...) {
  check_kbr_fit(x, "x")
  cat(sprintf("Kernel Bayes' rule (%s): n = %d, dim x = %d, dim y = %d\n",
              x$method, x$n, ncol(x$x), ncol(x$y)))
  cat(sprintf("  eps = %s, delta = %s; %s\n", format(x$eps), format(x$delta),
              if (is.null(x$rank)) "full Gram matrices" else
                sprintf("low rank: %d (x), %d (y), largest residual %.2g",
                        x$rank_x, x$rank_y, max(x$residual))))
  cat("  kernel x:", describe_resolved(x$kernel_x), "\n")
  cat("  kernel y:", describe_resolved(x$kernel_y), "\n")
  invisible(x)
}

# How eps and delta were set: by the user, or by the cross-validation of
# kbr() (its best row; a tuner may describe itself in attr(best, "how")).
kbr_tuning_record <- function(chosen, best = NULL) {
  how <- if (!is.null(best) && !is.null(attr(best, "how"))) attr(best, "how") else
    "5-fold kbr_cv(), regression criterion"
  list(chosen = chosen, how = if (any(chosen)) how else NULL,
       best = if (is.null(best)) NULL else as.data.frame(best))
}

# At most this many of the training observations enter summary()'s weights
# (an n x n matrix otherwise).
kbr_summary_max_obs <- 500L

#' Summarise a KBR fit
#'
#' The settings of a [kbr()] fit, how they were chosen, and how the
#' posterior weights look: their effective number of points and share of
#' negative weight, at the fit's own observations (the training `y`; at
#' most 500 of them, evenly spaced) or at `newdata`.
#'
#' The effective number of points of weights \eqn{w} is Kish's
#' \eqn{(\sum_i w_i)^2 / \sum_i w_i^2}, given for the signed weights and for
#' the nonnegative ones of [posterior_expect()] (their projection onto the
#' probability simplex, \eqn{1 / \sum_i \tilde w_i^2}); the share of
#' negative weight is \eqn{\sum_i \max(-w_i, 0) / \sum_i |w_i|}. Each is
#' summarised by its median and range over the observations.
#'
#' @param object A [kbr()] fit.
#' @param newdata Observations (see [predict.kb_kbr()]); `NULL` (default):
#'   the fit's own observations.
#' @param x A `summary.kb_kbr`.
#' @param ... Ignored.
#' @return `summary()`: an object of class `summary.kb_kbr`: `settings`
#'   (method, n, dimensions, eps, delta, rank), `tuning` (which
#'   regularisers the cross-validation chose and how), `kernels` (their
#'   descriptions), `at` (`"training y"` or `"newdata"`), `n_obs`, `n_far`
#'   (observations without a posterior), and per observation `ess`,
#'   `ess_nonnegative`, `negative_share` (mass) and `negative_count` (share
#'   of the weights that are negative). `print()` returns its argument
#'   invisibly.
#' @examples
#' set.seed(1)
#' x <- rnorm(300)
#' y <- x + rnorm(300, sd = 0.5)
#' summary(kbr(x, y, eps = 0.01, delta = 1e-4))
#' @export
summary.kb_kbr <- function(object, newdata = NULL, ...) {
  check_kbr_fit(object, "object")
  if (is.null(newdata)) {
    idx <- unique(round(seq(1, object$n, length.out = min(object$n,
                                                          kbr_summary_max_obs))))
    yn <- object$y[idx, , drop = FALSE]
    at <- "training y"
  } else {
    yn <- new_obs(object, newdata)
    at <- "newdata"
  }
  W <- kbr_weights(object, yn)
  ok <- !is.na(colSums(W))
  Wn <- nonnegative_weights(W)
  kish <- function(M) colSums(M)^2 / colSums(M^2)
  tun <- object$tuning
  if (is.null(tun)) tun <- kbr_tuning_record(c(eps = FALSE, delta = FALSE))
  structure(list(
    settings = list(method = object$method, n = object$n, dim_x = ncol(object$x),
                    dim_y = ncol(object$y), eps = object$eps,
                    delta = object$delta, rank = object$rank),
    tuning = tun,
    kernels = c(x = describe_resolved(object$kernel_x),
                y = describe_resolved(object$kernel_y)),
    at = at, n_obs = ncol(W), n_far = sum(!ok),
    ess = kish(W), ess_nonnegative = kish(Wn),
    negative_share = colSums(pmax(-W, 0)) / colSums(abs(W)),
    negative_count = colMeans(W < 0)),
    class = "summary.kb_kbr")
}

#' @rdname summary.kb_kbr
#' @export
print.summary.kb_kbr <- function(x, ...) {
  if (!inherits(x, "summary.kb_kbr") || !is.list(x$settings) ||
      !is.numeric(x$ess) || !is.numeric(x$negative_share)) {
    stop_arg("x", "must be a summary() of a kbr() fit")
  }
  s <- x$settings
  cat(sprintf("Kernel Bayes' rule (%s): n = %d, dim x = %d, dim y = %d%s\n",
              s$method, s$n, s$dim_x, s$dim_y,
              if (is.null(s$rank)) "" else sprintf(", low rank %d", s$rank)))
  ch <- x$tuning$chosen
  src <- function(v) if (isTRUE(ch[[v]])) "chosen" else "given"
  cat(sprintf("  eps = %s (%s), delta = %s (%s)%s\n", format(s$eps), src("eps"),
              format(s$delta), src("delta"),
              if (any(ch)) sprintf("; chosen by %s", x$tuning$how) else
                "; both given by the user"))
  cat("  kernel x:", x$kernels[["x"]], "\n")
  cat("  kernel y:", x$kernels[["y"]], "\n")
  rng <- function(v) {
    v <- v[is.finite(v)]
    if (!length(v)) return("-")
    sprintf("%s (%s to %s)", format(stats::median(v), digits = 3),
            format(min(v), digits = 3), format(max(v), digits = 3))
  }
  cat(sprintf("Posterior weights at %d %s%s: median (range)\n", x$n_obs,
              if (x$at == "training y") "training observations" else "observations",
              if (x$n_far) sprintf(" (%d far, without a posterior)", x$n_far) else ""))
  cat(sprintf("  effective number of points: %s signed, %s nonnegative\n",
              rng(x$ess), rng(x$ess_nonnegative)))
  cat(sprintf("  share of negative weight:   %s of |mass|, %s of the weights\n",
              rng(x$negative_share), rng(x$negative_count)))
  invisible(x)
}

#' Plot a KBR fit
#'
#' Two panels. Left: the posterior mean of a state coordinate against the
#' observation (one-dimensional `y`: over a grid spanning the training `y`,
#' with the 95% interval of [posterior_ci()] as a band and the
#' training pairs in grey; otherwise the posterior mean at each training
#' `y` against the training state). Right: the posterior weights given one
#' observation: for one-dimensional states the weights \eqn{w_i} at the
#' \eqn{X_i} (positive and negative in two colours, the prior sample as a
#' rug); for two or more, the \eqn{X_i} (first two coordinates) as points
#' whose area follows \eqn{|w_i|}, negative weights as open red circles,
#' the prior sample faint beneath and the posterior mean marked.
#'
#' @param x A [kbr()] fit.
#' @param newdata The observation whose posterior weights are drawn (the
#'   first row is used); default the median of the training `y`
#'   (coordinate-wise).
#' @param coord Which state coordinate the left panel shows.
#' @param ... Ignored.
#' @return `x`, invisibly.
#' @examples
#' set.seed(1)
#' x <- rnorm(300)
#' y <- x + rnorm(300, sd = 0.5)
#' plot(kbr(x, y, eps = 0.01, delta = 1e-4), newdata = 1)
#' @export
plot.kb_kbr <- function(x, newdata = NULL, coord = 1L, ...) {
  check_kbr_fit(x, "x")
  coord <- check_count(coord, "coord", max = ncol(x$x))
  y0 <- if (is.null(newdata)) {
    matrix(apply(x$y, 2L, stats::median), 1L)
  } else new_obs(x, newdata)[1L, , drop = FALSE]
  op <- graphics::par(mfrow = c(1L, 2L), mar = c(4, 4, 3, 1))
  on.exit(graphics::par(op))
  xlab_state <- function(k) {
    nm <- colnames(x$x)
    if (!is.null(nm) && nzchar(nm[k])) nm[k] else if (ncol(x$x) == 1L) "x" else
      paste0("x", k)
  }
  # left: posterior mean against the observation
  if (ncol(x$y) == 1L) {
    grid <- seq(min(x$y), max(x$y), length.out = 101L)
    W <- suppressWarnings(kbr_weights(x, matrix(grid)))
    m <- crossprod(W, x$x[, coord])
    Wn <- nonnegative_weights(W)
    lo <- weighted_quantiles(Wn, x$x[, coord, drop = FALSE], 0.025)
    hi <- weighted_quantiles(Wn, x$x[, coord, drop = FALSE], 0.975)
    graphics::plot(x$y[, 1L], x$x[, coord], col = grDevices::gray(0.75),
                   pch = 16, cex = 0.5, xlab = "observation y",
                   ylab = xlab_state(coord), main = "Posterior against the observation")
    ok <- !is.na(lo)
    graphics::polygon(c(grid[ok], rev(grid[ok])), c(lo[ok], rev(hi[ok])),
                      col = grDevices::adjustcolor("#0072B2", 0.2), border = NA)
    graphics::lines(grid, m, col = "#0072B2", lwd = 2)
    graphics::abline(v = y0[1L, 1L], lty = 3)
    graphics::legend("topleft", c("training (y, x)", "posterior mean",
                                  "95% interval (nonnegative weights)",
                                  "observation drawn right"),
                     col = c(grDevices::gray(0.75), "#0072B2",
                             grDevices::adjustcolor("#0072B2", 0.2), "black"),
                     pch = c(16, NA, 15, NA), lty = c(NA, 1, NA, 3),
                     lwd = c(NA, 2, NA, 1), pt.cex = c(0.7, 1, 2, 1),
                     bty = "n", cex = 0.75)
  } else {
    m <- suppressWarnings(crossprod(kbr_weights(x, x$y), x$x[, coord]))
    graphics::plot(x$x[, coord], m, pch = 16, cex = 0.5, col = "#0072B2",
                   xlab = paste("training state", xlab_state(coord)),
                   ylab = "posterior mean at its y",
                   main = "Posterior mean at the training y")
    graphics::abline(0, 1, lty = 2, col = "grey40")
    graphics::legend("topleft", c("posterior mean", "identity"),
                     col = c("#0072B2", "grey40"), pch = c(16, NA),
                     lty = c(NA, 2), bty = "n", cex = 0.75)
  }
  # right: the weighted posterior given y0 (fits made before the prior was
  # kept: the training x stand for it)
  prior <- if (is.matrix(x$prior) && ncol(x$prior) == ncol(x$x)) x$prior else x$x
  w <- drop(kbr_weights(x, y0))
  ttl <- sprintf("Posterior weights given y = %s",
                 paste(format(signif(y0[1L, ], 3)), collapse = ", "))
  if (anyNA(w)) {
    graphics::plot.new()
    graphics::title(main = ttl)
    graphics::text(0.5, 0.5, "no posterior: the observation is far\nfrom all training y")
    return(invisible(x))
  }
  neg <- w < 0
  cols <- ifelse(neg, "#D55E00", "#0072B2")
  if (ncol(x$x) == 1L) {
    graphics::plot(x$x[, 1L], w, type = "h", col = cols, xlab = xlab_state(1L),
                   ylab = "weight", main = ttl)
    graphics::abline(h = 0, col = "grey60")
    graphics::rug(prior[, 1L], col = grDevices::gray(0.6, 0.5))
    graphics::abline(v = sum(w * x$x[, 1L]), lty = 2)
    graphics::legend("topleft", c("positive weight", "negative weight",
                                  "posterior mean", "prior sample (rug)"),
                     col = c("#0072B2", "#D55E00", "black", "grey60"),
                     lty = c(1, 1, 2, 1), bty = "n", cex = 0.75)
  } else {
    sz <- 0.3 + 2.2 * sqrt(abs(w) / max(abs(w)))
    graphics::plot(prior[, 1L], prior[, 2L], pch = 16, cex = 0.4,
                   col = grDevices::gray(0.8),
                   xlim = range(prior[, 1L], x$x[, 1L]),
                   ylim = range(prior[, 2L], x$x[, 2L]),
                   xlab = xlab_state(1L), ylab = xlab_state(2L),
                   main = if (ncol(x$x) > 2L) paste(ttl, "(coordinates 1, 2)") else ttl)
    o <- order(abs(w))
    graphics::points(x$x[o, 1L], x$x[o, 2L], cex = sz[o],
                     pch = ifelse(neg[o], 1, 16),
                     col = grDevices::adjustcolor(cols[o], 0.6))
    mu <- crossprod(w, x$x)
    graphics::points(mu[1L], mu[2L], pch = 4, cex = 2, lwd = 2)
    graphics::legend("topleft", c("positive weight (area)", "negative weight",
                                  "posterior mean", "prior sample"),
                     col = c("#0072B2", "#D55E00", "black", grDevices::gray(0.7)),
                     pch = c(16, 1, 4, 16), bty = "n", cex = 0.75)
  }
  invisible(x)
}
