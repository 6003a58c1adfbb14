# Targets: a log density and its score (gradient), as R closures.

#' Define a target distribution
#'
#' Bundles R closures for the log density of a target distribution and its
#' score (the gradient of the log density) for use by [ksd()],
#' [stein_kernel_matrix()] and the samplers and thinning algorithms.
#'
#' With `vectorized = FALSE` (the default) each closure is called on one
#' point, a numeric vector of length `dim`: `log_density` must return one
#' number and `score` a vector of length `dim`. With `vectorized = TRUE` the
#' closures receive a whole `n x dim` matrix and must return `n` values and an
#' `n x dim` matrix: one R call per batch, which is much faster.
#'
#' When `score` is omitted, it is computed by central finite differences of
#' `log_density` (step `.Machine$double.eps^(1/3) * max(1, |x_k|)` in
#' coordinate k), and a message says so once, when the target is created.
#'
#' @param log_density A function returning the log density (up to an additive
#'   constant).
#' @param score A function returning the gradient of the log density, or
#'   `NULL` for finite differences.
#' @param dim The dimension of the target.
#' @param vectorized Whether the closures take and return whole batches.
#' @param name An optional label used when printing.
#' @return An object of class `kb_target`: a list with elements
#'   `log_density`, `score`, `dim`, `vectorized`, `fd_score` (whether the
#'   score is a finite-difference approximation), `sampler` (a function of
#'   `n` returning exact draws, or `NULL`) and `name`. The closures
#'   remember the dimension they were made for: a target whose `dim` was
#'   changed by hand is an error ("has been edited") wherever it is used;
#'   build it again instead.
#' @seealso [gaussian_target()], [target_score()], [sample_target()].
#' @examples
#' # a standard bivariate normal, one point at a time
#' tg <- kb_target(function(x) -sum(x^2) / 2, function(x) -x, dim = 2)
#' target_score(tg, rbind(c(1, 2), c(0, -1)))
#' # the same, vectorised
#' tv <- kb_target(function(x) -rowSums(x^2) / 2, function(x) -x, dim = 2,
#'                 vectorized = TRUE)
#' target_log_density(tv, rbind(c(1, 2), c(0, -1)))
#' @export
kb_target <- function(log_density, score = NULL, dim, vectorized = FALSE,
                      name = NULL) {
  if (!is.function(log_density)) stop_arg("log_density", "must be a function")
  if (!is.null(score) && !is.function(score)) {
    stop_arg("score", "must be a function or NULL")
  }
  if (missing(dim)) stop_arg("dim", "is missing; give the target's dimension")
  dim <- check_count(dim, "dim")
  vectorized <- check_flag(vectorized, "vectorized")
  if (!is.null(name) && (!is.character(name) || length(name) != 1L)) {
    stop_arg("name", "must be a single string or NULL")
  }
  fd <- is.null(score)
  if (fd) {
    message("kb_target: no score given; using central finite differences ",
            "of log_density")
    score <- fd_score(log_density, vectorized)
  }
  new_target(log_density, score, dim, vectorized, fd, NULL, name)
}

# `names`: the names of the coordinates when the target knows them (a Stan
# target), else NULL; target_score() names its columns with them when x
# has no column names.
new_target <- function(log_density, score, dim, vectorized, fd_score,
                       sampler, name, names = NULL) {
  # the closures remember the dimension they were made for, so that
  # check_target() can tell a hand-edited `dim` from a rebuilt target
  # (a primitive is one shared object: it is left alone)
  if (!is.primitive(log_density)) attr(log_density, "kb_dim") <- as.integer(dim)
  if (!is.primitive(score)) attr(score, "kb_dim") <- as.integer(dim)
  structure(list(log_density = log_density, score = score, dim = dim,
                 vectorized = vectorized, fd_score = fd_score,
                 sampler = sampler, name = name, names = names),
            class = "kb_target")
}

fd_step <- function(x) .Machine$double.eps^(1 / 3) * pmax(1, abs(x))

# Central finite-difference gradient of a log density.
fd_score <- function(log_density, vectorized) {
  force(log_density)
  if (vectorized) {
    function(x) {
      g <- x
      for (k in seq_len(ncol(x))) {
        h <- fd_step(x[, k])
        xp <- x
        xm <- x
        xp[, k] <- x[, k] + h
        xm[, k] <- x[, k] - h
        g[, k] <- (log_density(xp) - log_density(xm)) / (xp[, k] - xm[, k])
      }
      g
    }
  } else {
    function(x) {
      g <- numeric(length(x))
      for (k in seq_along(x)) {
        h <- fd_step(x[k])
        xp <- x
        xm <- x
        xp[k] <- x[k] + h
        xm[k] <- x[k] - h
        g[k] <- (log_density(xp) - log_density(xm)) / (xp[k] - xm[k])
      }
      g
    }
  }
}

#' @export
print.kb_target <- function(x, ...) {
  nm <- if (is.null(x$name)) "user-defined" else x$name
  cat(sprintf("kb_target: %s, dimension %d\n", nm, x$dim))
  cat(sprintf("  closures: %s; score: %s%s\n",
              if (x$vectorized) "vectorised (batches)" else "one point per call",
              if (x$fd_score) "finite differences" else "given",
              if (is.null(x$sampler)) "" else "; exact draws available"))
  invisible(x)
}

check_target <- function(target, arg = "target") {
  if (!inherits(target, "kb_target")) {
    stop_arg(arg, "must be a kb_target object (see ?kb_target)")
  }
  # a kb_target is a list the user can edit: check the fields C relies on
  bad <- if (!is.function(target$log_density)) "log_density" else
    if (!is.function(target$score)) "score" else
    if (!is.numeric(target$dim) || length(target$dim) != 1L ||
        !isTRUE(target$dim >= 1 && target$dim == round(target$dim) &&
                target$dim <= .Machine$integer.max)) "dim" else
    if (!is.logical(target$vectorized) || length(target$vectorized) != 1L ||
        is.na(target$vectorized)) "vectorized" else
    if (!is.null(target$names) &&
        (!is.character(target$names) ||
         length(target$names) != target$dim || anyNA(target$names))) "names"
  if (is.null(bad)) {
    made <- c(attr(target$log_density, "kb_dim"), attr(target$score, "kb_dim"))
    if (any(made != target$dim)) {
      stop_arg(arg, sprintf(paste0(
        "has been edited: its field 'dim' (%s) and its closures (made for ",
        "dimension %d) do not fit together; build the target again (e.g. ",
        "with kb_target()) instead of changing 'dim'"),
        format(target$dim), made[made != target$dim][1L]))
    }
  }
  if (!is.null(bad)) {
    stop_arg(arg, sprintf(paste0("is not a valid kb_target: its field '%s' ",
                                 "was changed (%s expected); build it again ",
                                 "with kb_target()"), bad,
                          switch(bad, log_density = , score = "a function",
                                 dim = "a whole number >= 1",
                                 vectorized = "TRUE or FALSE",
                                 names = "NULL or one name per dimension")))
  }
  if (inherits(target, "kb_stan_target")) check_stan_target(target, arg)
  target
}

# A user closure of a target failed or returned something wrong: a
# "kb_error_callback" condition naming it.  Errors that are already classed
# kernbayes conditions (raised by kernbayes code the closure called) pass
# through unchanged.
target_callback_error <- function(...) {
  stop(kb_error(paste0(...), "kb_error_callback"))
}

call_target_closure <- function(f, x, what) {
  tryCatch(f(x), error = function(e) {
    if (inherits(e, "kb_error")) stop(e)
    target_callback_error(sprintf("'%s' failed: %s", what,
                                  conditionMessage(e)))
  })
}

points_for_target <- function(target, x) {
  x <- as_points(x, "x", target$dim)
  if (ncol(x) != target$dim) {
    stop_arg("x", sprintf("must have %d columns (the target's dimension); it has %d",
                          target$dim, ncol(x)))
  }
  x
}

#' Evaluate a target's log density or score at points
#'
#' @param target A [kb_target()].
#' @param x Points: a numeric matrix with `target$dim` columns (or a data
#'   frame, a `coda::mcmc` or a posterior draws object). A vector is one
#'   point when `target$dim > 1` and one value per point when it is 1 (see
#'   'Points and samples' in [kernbayes-package]).
#' @return `target_log_density()`: a numeric vector with one value per row
#'   of `x` (`-Inf` is allowed, for points outside the support; `NA`, `NaN`
#'   and `+Inf` are errors). `target_score()`: a matrix of the same dimensions as `x`, with the
#'   column names of `x`, or, when `x` has none, the coordinate names the
#'   target knows (those of a [stan_target()]).
#' @examples
#' tg <- gaussian_target(mean = c(0, 1))
#' target_log_density(tg, rbind(c(0, 1), c(1, 1)))
#' target_score(tg, rbind(c(0, 1), c(1, 1)))
#' @export
target_score <- function(target, x) {
  check_target(target)
  target_score_rows(target, points_for_target(target, x))
}

# target_score() at the rows of a checked point matrix x; `rows_of` names
# the rows in messages (stein_points(): its candidate points).
target_score_rows <- function(target, x, rows_of = "x") {
  if (!target$vectorized) {
    return(name_score(eval_score_rows(target$score, x, rows_of = rows_of), x,
                      target))
  }
  g <- call_target_closure(target$score, x, "score")
  if (is.numeric(g) && is.null(dim(g)) && ncol(x) == 1L) g <- matrix(g, ncol = 1L)
  if (!is.matrix(g) || !is.numeric(g) || any(dim(g) != dim(x))) {
    target_callback_error(sprintf(paste0(
      "'score' (vectorised) must return a %d x %d numeric matrix for a ",
      "%d x %d input"), nrow(x), ncol(x), nrow(x), ncol(x)))
  }
  if (anyNA(g) || any(!is.finite(g))) {
    bad <- which(!is.finite(g), arr.ind = TRUE)[1L, 1L]
    target_callback_error(sprintf(paste0(
      "'score' returned a non-finite value (NA, NaN or Inf) at row %d of %s"),
      bad, rows_of))
  }
  storage.mode(g) <- "double"
  dimnames(g) <- NULL
  name_score(g, x, target)
}

# The column names of a score matrix: those of x, else the coordinate names
# the target knows (a Stan target's), else none.
name_score <- function(g, x, target) {
  if (!is.null(colnames(x))) {
    dimnames(g) <- dimnames(x)
  } else if (!is.null(target$names)) {
    dimnames(g) <- list(rownames(x), target$names)
  }
  g
}

#' @rdname target_score
#' @export
target_log_density <- function(target, x) {
  check_target(target)
  x <- points_for_target(target, x)
  if (!target$vectorized) {
    return(eval_rows(target$log_density, x, 1L, "log_density",
                     allow_neginf = TRUE))
  }
  v <- call_target_closure(target$log_density, x, "log_density")
  if (!is.numeric(v) || length(v) != nrow(x)) {
    target_callback_error(sprintf(paste0(
      "'log_density' (vectorised) must return %d numbers for a %d-row ",
      "input"), nrow(x), nrow(x)))
  }
  if (anyNA(v) || any(v == Inf)) {
    target_callback_error(sprintf(
      "'log_density' returned NA, NaN or +Inf at row %d of x",
      which(is.na(v) | v == Inf)[1L]))
  }
  as.double(v)
}

#' Exact draws from a built-in target
#'
#' @param target A target with a sampler: [gaussian_target()] or
#'   [gaussian_mixture_target()] (exact draws), or [rbm_target()] (the last
#'   states of independent block Gibbs chains).
#' @param n Number of draws.
#' @return An `n x dim` matrix. Uses R's random number generator, so
#'   [set.seed()] makes it reproducible.
#' @examples
#' set.seed(1)
#' x <- sample_target(gaussian_target(c(0, 0)), 5)
#' @export
sample_target <- function(target, n) {
  check_target(target)
  n <- check_count(n, "n")
  if (is.null(target$sampler)) {
    stop_arg("target", "has no exact sampler; use an MCMC sampler instead")
  }
  # the normals, the draws and a product or sweep of them
  check_memory(8 * 3 * as.double(n) * target$dim, "n",
               sprintf("%.0f draws in dimension %d", as.double(n), target$dim))
  target$sampler(n)
}

check_cov <- function(cov, d, arg) {
  if (is.numeric(cov) && is.null(dim(cov)) && length(cov) %in% c(1L, d)) {
    cov <- diag(as.double(cov), d)
  }
  if (!is.matrix(cov) || !is.numeric(cov) || any(dim(cov) != d)) {
    stop_arg(arg, sprintf(paste0("must be a %d x %d covariance matrix, a ",
                                 "variance or a vector of %d variances"),
                          d, d, d))
  }
  if (anyNA(cov) || any(!is.finite(cov))) {
    stop_arg(arg, "must not contain NA, NaN or Inf")
  }
  if (max(abs(cov - t(cov))) > 1e-10 * max(abs(cov))) {
    stop_arg(arg, "must be symmetric")
  }
  R <- tryCatch(chol(cov), error = function(e) NULL)
  if (is.null(R)) stop_arg(arg, "must be positive definite")
  list(cov = cov, chol = R, prec = chol2inv(R),
       logdet = 2 * sum(log(diag(R))))
}

check_mean <- function(mean, arg) {
  if (!is.numeric(mean) || length(mean) < 1L || anyNA(mean) ||
      any(!is.finite(mean))) {
    stop_arg(arg, "must be a numeric vector of finite values")
  }
  as.double(mean)
}

#' Gaussian and Gaussian mixture targets
#'
#' Built-in targets with vectorised closures and exact samplers, useful as
#' test beds: the KSD of exact draws shrinks like \eqn{n^{-1/2}}.
#'
#' @param mean Mean vector.
#' @param cov Covariance: a matrix, a single variance or a vector of
#'   variances. Default the identity.
#' @return A [kb_target()] with an exact sampler (see [sample_target()]).
#' @examples
#' tg <- gaussian_target(mean = c(1, -1), cov = matrix(c(2, 0.5, 0.5, 1), 2))
#' tg
#' mix <- gaussian_mixture_target(means = rbind(c(-2, 0), c(2, 0)),
#'                                covs = 1, weights = c(0.3, 0.7))
#' target_score(mix, c(0, 0))
#' @export
gaussian_target <- function(mean, cov = NULL) {
  mean <- check_mean(mean, "mean")
  d <- length(mean)
  cv <- check_cov(if (is.null(cov)) 1 else cov, d, "cov")
  prec <- cv$prec
  const <- -0.5 * (d * log(2 * pi) + cv$logdet)
  log_density <- function(x) {
    x <- as_row_matrix(x, d)
    z <- sweep(x, 2L, mean)
    const - 0.5 * rowSums((z %*% prec) * z)
  }
  score <- function(x) {
    x <- as_row_matrix(x, d)
    -sweep(x, 2L, mean) %*% prec
  }
  sampler <- function(n) {
    z <- matrix(stats::rnorm(as.double(n) * d), n, d) %*% cv$chol
    sweep(z, 2L, mean, "+")
  }
  new_target(log_density, score, d, TRUE, FALSE, sampler,
             sprintf("Gaussian (d = %d)", d))
}

# The points a built-in target's vectorised closure is called with, as a
# matrix (the rule of as_points(), without its checks: C calls these with
# one-row matrices, users with vectors or matrices).
as_row_matrix <- function(x, d) {
  if (!is.null(dim(x))) return(x)
  if (d > 1L && length(x) != d) {
    stop_arg("x", sprintf("must be one point of length %d or a matrix with %d columns; it has length %d",
                          d, d, length(x)))
  }
  vector_points(x, d)
}

#' @rdname gaussian_target
#' @param means A `k x d` matrix of component means (one row each), or a list
#'   of `k` mean vectors.
#' @param covs Component covariances: a list of `k` covariances (each as in
#'   `cov`), or one covariance shared by all components.
#' @param weights Mixture weights (non-negative, normalised to sum 1); equal
#'   by default.
#' @export
gaussian_mixture_target <- function(means, covs = NULL, weights = NULL) {
  if (is.list(means)) {
    if (length(means) < 1L) stop_arg("means", "must hold at least one mean")
    means <- lapply(means, check_mean, arg = "means")
    if (length(unique(lengths(means))) != 1L) {
      stop_arg("means", "must be vectors of a common length")
    }
    means <- do.call(rbind, means)
  }
  if (!is.matrix(means) || !is.numeric(means) || nrow(means) < 1L ||
      ncol(means) < 1L || anyNA(means) || any(!is.finite(means))) {
    stop_arg("means", paste0("must be a numeric matrix with one finite mean ",
                             "per row (at least one row and column)"))
  }
  K <- nrow(means)
  d <- ncol(means)
  if (is.null(covs)) covs <- 1
  if (!is.list(covs)) covs <- rep(list(covs), K)
  if (length(covs) != K) {
    stop_arg("covs", sprintf("must be one covariance or a list of %d", K))
  }
  cvs <- lapply(seq_len(K), function(k) {
    check_cov(covs[[k]], d, sprintf("covs[[%d]]", k))
  })
  if (is.null(weights)) weights <- rep(1, K)
  weights <- check_weights(weights, K, "weights")
  logw <- log(weights)
  # per-component log density (n x K) and, optionally, the scores
  comp_logd <- function(x) {
    vapply(seq_len(K), function(k) {
      z <- sweep(x, 2L, means[k, ])
      logw[k] - 0.5 * (d * log(2 * pi) + cvs[[k]]$logdet) -
        0.5 * rowSums((z %*% cvs[[k]]$prec) * z)
    }, numeric(nrow(x)))
  }
  # log sum exp of each row; -Inf where every term is -Inf (a point so far
  # out that every quadratic form overflows: -Inf - -Inf was NaN)
  lse_rows <- function(a) {
    a <- matrix(a, ncol = K)
    m <- apply(a, 1L, max)
    m[m == -Inf] <- 0
    m + log(rowSums(exp(a - m)))
  }
  log_density <- function(x) {
    x <- as_row_matrix(x, d)
    lse_rows(comp_logd(x))
  }
  score <- function(x) {
    x <- as_row_matrix(x, d)
    a <- matrix(comp_logd(x), ncol = K)
    resp <- exp(a - lse_rows(a))
    g <- matrix(0, nrow(x), d)
    for (k in seq_len(K)) {
      g <- g - resp[, k] * (sweep(x, 2L, means[k, ]) %*% cvs[[k]]$prec)
    }
    g
  }
  sampler <- function(n) {
    comp <- sample.int(K, n, replace = TRUE, prob = weights)
    z <- matrix(stats::rnorm(as.double(n) * d), n, d)
    out <- matrix(0, n, d)
    for (k in seq_len(K)) {
      idx <- which(comp == k)
      if (length(idx)) {
        out[idx, ] <- sweep(z[idx, , drop = FALSE] %*% cvs[[k]]$chol, 2L,
                            means[k, ], "+")
      }
    }
    out
  }
  new_target(log_density, score, d, TRUE, FALSE, sampler,
             sprintf("Gaussian mixture (%d components, d = %d)", K, d))
}

#' Bayesian logistic regression target
#'
#' The posterior of the coefficients \eqn{\beta} of a logistic regression,
#' \eqn{P(y_i = 1) = 1 / (1 + e^{-x_i^\top \beta})}, with independent
#' \eqn{N(0, \sigma^2)} priors (`prior_sd` \eqn{= \sigma}):
#' \deqn{\log p(\beta) = \sum_i [y_i \eta_i - \log(1 + e^{\eta_i})] -
#' |\beta|^2 / (2\sigma^2) + c, \quad \eta = X\beta,}{log p(beta) =
#' sum_i [y_i eta_i - log(1 + exp(eta_i))] - |beta|^2 / (2 sigma^2) + c,
#' eta = X beta,}
#' with score \eqn{X^\top (y - \mathrm{logit}^{-1}(\eta)) - \beta / \sigma^2}.
#' Both are vectorised (one matrix product for a batch of points) and
#' computed stably for large \eqn{|\eta|}.
#'
#' @param X The `N x p` design matrix (a data frame is turned into one with
#'   [stats::model.matrix()] without an intercept column; factors become
#'   indicator columns).
#' @param y The responses: 0/1, logical, or a factor with two levels (the
#'   second level is 1).
#' @param prior_sd The prior standard deviation \eqn{\sigma} of every
#'   coefficient.
#' @param intercept Add a column of ones (first) to `X`.
#' @param scale Centre and scale the columns of `X` (not the intercept) to
#'   unit standard deviation, as is usual before sampling; the centring and
#'   scales are kept in the target (`$x_center`, `$x_scale`).
#' @return A [kb_target()] of dimension `ncol(X)` (+ 1 with `intercept`),
#'   with the design matrix used (`$X`, after scaling) and `$y`, and a
#'   `$predict(beta, newX)` function giving the predicted probabilities
#'   for new rows (scaled like `X`), averaged over the rows of `beta`.
#' @examples
#' if (requireNamespace("MASS", quietly = TRUE)) {
#'   tr <- MASS::Pima.tr
#'   tg <- logistic_regression_target(tr[, 1:7], tr$type, prior_sd = 5)
#'   tg
#'   fit <- mala(tg, x0 = rep(0, tg$dim), n_iter = 2000)
#'   te <- MASS::Pima.te
#'   p <- tg$predict(fit$x[-(1:500), ], te[, 1:7])
#'   mean((p > 0.5) == (te$type == "Yes"))   # test accuracy
#' }
#' @export
logistic_regression_target <- function(X, y, prior_sd = 1, intercept = TRUE,
                                       scale = TRUE) {
  if (is.data.frame(X)) X <- design_matrix(X, "X")
  if (!is.numeric(X) || !is.matrix(X) || nrow(X) < 1L || ncol(X) < 1L) {
    stop_arg("X", "must be a numeric matrix or a data frame with at least one row and column")
  }
  if (anyNA(X) || any(!is.finite(X))) stop_arg("X", "must not contain NA, NaN or Inf")
  if (is.factor(y)) {
    if (nlevels(y) != 2L) stop_arg("y", "must be a factor with exactly two levels")
    y <- as.integer(y) - 1L
  }
  if (is.logical(y)) y <- as.integer(y)
  if (!is.numeric(y) || length(y) != nrow(X) || anyNA(y) || !all(y %in% c(0, 1))) {
    stop_arg("y", sprintf("must hold %d values, each 0 or 1 (or a two-level factor)",
                          nrow(X)))
  }
  prior_sd <- check_number(prior_sd, "prior_sd", lower = 0, lower_open = TRUE)
  intercept <- check_flag(intercept, "intercept")
  scale <- check_flag(scale, "scale")
  ctr <- rep(0, ncol(X))
  scl <- rep(1, ncol(X))
  if (scale) {
    ctr <- colMeans(X)
    scl <- apply(X, 2L, stats::sd)
    scl[is.na(scl) | !(scl > 0)] <- 1   # NA: a single row
  }
  prep <- function(Z) {
    Z <- sweep(sweep(Z, 2L, ctr), 2L, scl, "/")
    if (intercept) cbind(`(Intercept)` = 1, Z) else Z
  }
  Xs <- prep(X)
  y <- as.double(y)
  p <- ncol(Xs)
  s2 <- prior_sd^2
  log1pexp <- function(e) pmax(e, 0) + log1p(exp(-abs(e)))
  log_density <- function(b) {
    b <- as_row_matrix(b, p)
    eta <- Xs %*% t(b)                               # N x m
    colSums(y * eta - log1pexp(eta)) - rowSums(b^2) / (2 * s2)
  }
  score <- function(b) {
    b <- as_row_matrix(b, p)
    eta <- Xs %*% t(b)
    t(crossprod(Xs, y - stats::plogis(eta))) - b / s2
  }
  predict <- function(beta, newX) {
    if (is.data.frame(newX)) newX <- design_matrix(newX, "newX")
    newX <- as.matrix(newX)
    if (ncol(newX) != length(ctr)) {
      stop_arg("newX", sprintf("must have %d columns, like X", length(ctr)))
    }
    beta <- as_row_matrix(beta, p)
    rowMeans(stats::plogis(prep(newX) %*% t(beta)))
  }
  tg <- new_target(log_density, score, p, TRUE, FALSE, NULL,
                   sprintf("Bayesian logistic regression (%d coefficients, %d observations)",
                           p, nrow(Xs)))
  tg$X <- Xs
  tg$y <- y
  tg$x_center <- ctr
  tg$x_scale <- scl
  tg$predict <- predict
  tg
}

# The design matrix of a data frame (factors as indicator columns, no
# intercept), one row per row of df: rows with NA are kept (as NA, which the
# caller refuses or propagates), not dropped as model.frame() would by
# default, which misaligned X with y and predictions with newX's rows.
design_matrix <- function(df, arg) {
  if (ncol(df) < 1L) {
    stop_arg(arg, "must have at least one column")
  }
  mf <- stats::model.frame(~ ., data = df, na.action = stats::na.pass)
  stats::model.matrix(~ . - 1, data = mf)
}

#' Gaussian-Bernoulli restricted Boltzmann machine target
#'
#' The visible marginal of a Gaussian-Bernoulli restricted Boltzmann machine
#' (RBM) with hidden units \eqn{h \in \{-1, 1\}^{d_h}}, the standard
#' benchmark of the kernel goodness-of-fit literature (Liu, Lee and Jordan
#' 2016, Section 6; Jitkrittum et al. 2017, Section 5):
#' \deqn{p(x) \propto \sum_{h \in \{-1,1\}^{d_h}} \exp(x^\top B h + b^\top x
#' + c^\top h - \|x\|^2 / 2), \quad x \in R^d,}{p(x) prop. to sum_h exp(x'Bh
#' + b'x + c'h - |x|^2 / 2), x in R^d,}
#' with \eqn{B} a \eqn{d \times d_h} matrix. The sum over \eqn{h} factorises,
#' so the log density and the score have closed forms (\eqn{B_j} the
#' \eqn{j}-th column of \eqn{B}):
#' \deqn{\log p(x) = b^\top x - \|x\|^2 / 2 + \sum_j \log(2\cosh(B_j^\top x
#' + c_j)) - \log Z,}{log p(x) = b'x - |x|^2 / 2 + sum_j log(2 cosh(B_j'x +
#' c_j)) - log Z,}
#' \deqn{\nabla \log p(x) = b - x + B \tanh(B^\top x + c).}{grad log p(x) =
#' b - x + B tanh(B'x + c).}
#' `target_log_density()` leaves out \eqn{\log Z} (a sum over \eqn{2^{d_h}}
#' states): it is the log of the unnormalised sum above.
#'
#' Given \eqn{x}, the hidden units are independent with \eqn{P(h_j = 1 \mid
#' x) = 1 / (1 + e^{-2(B_j^\top x + c_j)})}; given \eqn{h}, \eqn{x \sim
#' N(Bh + b, I)}. [sample_target()] runs `n` independent block Gibbs chains
#' at once (matrix operations on all chains), each started from
#' \eqn{N(0, I)}, discards `burnin` sweeps and returns the visible state of
#' the next sweep, so the `n` rows are independent draws whose accuracy
#' depends on the burn-in (the papers' code, kgof, uses 2000 sweeps). The
#' marginal of \eqn{h} is \eqn{p(h) \propto \exp(c^\top h + \|Bh + b\|^2 /
#' 2)}, so \eqn{p(x)} is a mixture of \eqn{2^{d_h}} Gaussians
#' \eqn{N(Bh + b, I)}: with large weights the modes are far apart and the
#' Gibbs chains mix slowly.
#'
#' The papers' code (the kgof package) writes the joint density with
#' \eqn{\frac12 x^\top B h}; its RBM with matrix \eqn{B} is `rbm_target(B / 2,
#' b, c)` here.
#'
#' @param B The \eqn{d \times d_h} weight matrix.
#' @param b The visible bias, a vector of length \eqn{d}.
#' @param c The hidden bias, a vector of length \eqn{d_h}.
#' @param burnin Gibbs sweeps discarded before each draw of
#'   [sample_target()].
#' @return A [kb_target()] of dimension \eqn{d} with vectorised closures, an
#'   approximate sampler (block Gibbs, see Details) and the fields `B`, `b`,
#'   `c`, `burnin`, and `gibbs(x, sweeps)`, which runs `sweeps` further
#'   sweeps of one chain per row of the `n x d` matrix `x` and returns the
#'   new visible states (to continue chains instead of starting new ones).
#' @references Liu, Q., Lee, J. and Jordan, M. (2016). A kernelized Stein
#'   discrepancy for goodness-of-fit tests. *ICML*. Jitkrittum, W., Xu, W.,
#'   Szabo, Z., Fukumizu, K. and Gretton, A. (2017). A linear-time kernel
#'   goodness-of-fit test. *NeurIPS*.
#' @seealso [ksd_test()] for the goodness-of-fit benchmark built on it.
#' @examples
#' set.seed(1)
#' d <- 5; dh <- 3
#' B <- matrix(sample(c(-1, 1), d * dh, replace = TRUE), d, dh) / 2
#' tg <- rbm_target(B, b = rnorm(d), c = rnorm(dh), burnin = 200)
#' tg
#' x <- sample_target(tg, 100)
#' target_score(tg, x[1:2, ])
#' ksd_test(x, tg, n_boot = 200)$p.value
#' @export
rbm_target <- function(B, b, c, burnin = 2000) {
  if (!is.numeric(B) || !is.matrix(B) || nrow(B) < 1L || ncol(B) < 1L ||
      anyNA(B) || any(!is.finite(B))) {
    stop_arg("B", "must be a numeric d x dh matrix of finite values")
  }
  d <- nrow(B)
  dh <- ncol(B)
  storage.mode(B) <- "double"
  if (!is.numeric(b) || length(b) != d || anyNA(b) || any(!is.finite(b))) {
    stop_arg("b", sprintf(paste0("must be a numeric vector of %d finite ",
                                 "values (one per row of B)"), d))
  }
  if (!is.numeric(c) || length(c) != dh || anyNA(c) || any(!is.finite(c))) {
    stop_arg("c", sprintf(paste0("must be a numeric vector of %d finite ",
                                 "values (one per column of B)"), dh))
  }
  b <- as.double(b)
  c <- as.double(c)
  burnin <- check_count(burnin, "burnin", min = 0L)
  Bt <- t(B)
  # the n x dh matrix of B_j'x_i + c_j
  pre <- function(x) sweep(x %*% B, 2L, c, "+")
  log_density <- function(x) {
    x <- as_row_matrix(x, d)
    a <- abs(pre(x))
    # log(2 cosh(a)) = a + log1p(exp(-2 a)), stable for large |a|
    drop(x %*% b) - rowSums(x^2) / 2 + rowSums(a + log1p(exp(-2 * a)))
  }
  score <- function(x) {
    x <- as_row_matrix(x, d)
    sweep(tanh(pre(x)) %*% Bt - x, 2L, b, "+")
  }
  # block Gibbs sweeps of one chain per row of x: h | x, then x | h
  gibbs <- function(x, sweeps) {
    x <- as_row_matrix(x, d)
    n <- nrow(x)
    for (s in seq_len(sweeps)) {
      p1 <- stats::plogis(2 * pre(x))
      h <- 2 * (stats::runif(n * dh) < p1) - 1
      x <- sweep(h %*% Bt, 2L, b, "+") + stats::rnorm(n * d)
    }
    x
  }
  sampler <- function(n) {
    gibbs(matrix(stats::rnorm(as.double(n) * d), n, d), burnin + 1L)
  }
  tg <- new_target(log_density, score, d, TRUE, FALSE, sampler,
                   sprintf(paste0("Gaussian-Bernoulli RBM (d = %d visible, ",
                                  "%d hidden; Gibbs burn-in %d)"),
                           d, dh, burnin))
  tg$B <- B
  tg$b <- b
  tg$c <- c
  tg$burnin <- burnin
  tg$gibbs <- function(x, sweeps) {
    x <- as_points(x, "x", d)
    if (ncol(x) != d) {
      stop_arg("x", sprintf("must have %d columns (the RBM's dimension)", d))
    }
    dimnames(x) <- NULL
    gibbs(x, check_count(sweeps, "sweeps", min = 0L))
  }
  tg
}
