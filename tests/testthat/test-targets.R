# Targets (R/targets.R, src/callback.c): built-in Gaussian and Gaussian
# mixture targets, user targets from closures, evaluation and sampling.

# ---- Gaussian target ---------------------------------------------------------------

test_that("gaussian_target() log density matches the closed form", {
  set.seed(40)
  S <- matrix(c(2, 0.6, -0.3, 0.6, 1, 0.2, -0.3, 0.2, 0.5), 3)
  m <- c(1, -1, 0.5)
  x <- matrix(stats::rnorm(30), 10, 3)
  tg <- gaussian_target(m, S)
  expect_equal(target_log_density(tg, x), ref_dmvnorm_log(x, m, S),
               tolerance = 1e-12)
  # the standard normal by hand
  t0 <- gaussian_target(c(0, 0))
  expect_equal(target_log_density(t0, rbind(c(0, 0), c(1, 2))),
               c(-log(2 * pi), -log(2 * pi) - 2.5), tolerance = 1e-14)
  # cov as one variance and as a vector of variances
  expect_equal(target_log_density(gaussian_target(m, 2), x),
               ref_dmvnorm_log(x, m, diag(2, 3)), tolerance = 1e-12)
  expect_equal(target_log_density(gaussian_target(m, c(1, 2, 3)), x),
               ref_dmvnorm_log(x, m, diag(c(1, 2, 3))), tolerance = 1e-12)
  # one dimension
  x1 <- stats::rnorm(7)
  expect_equal(target_log_density(gaussian_target(0.5, 4), x1),
               stats::dnorm(x1, 0.5, 2, log = TRUE), tolerance = 1e-13)
})

test_that("gaussian_target() score matches the closed form and finite differences", {
  set.seed(41)
  S <- ref_spd(3)
  m <- c(1, -1, 0.5)
  x <- matrix(stats::rnorm(30), 10, 3)
  tg <- gaussian_target(m, S)
  g <- target_score(tg, x)
  expect_identical(dim(g), c(10L, 3L))
  expect_equal(g, -sweep(x, 2, m) %*% solve(S), tolerance = 1e-12,
               ignore_attr = TRUE)
  for (i in 1:10) {
    fd <- ref_num_grad(function(z) ref_dmvnorm_log(z, m, S), x[i, ])
    expect_lt(max(abs(g[i, ] - fd)) / max(abs(fd), 1), 1e-7)
  }
})

test_that("target_score() and target_log_density() accept one point as a vector", {
  # documented: x may be "a vector"; the package example
  # target_score(mix, c(0, 0)) uses one point of a 2-d target
  tg <- gaussian_target(c(0, 1))
  expect_equal(target_score(tg, c(1, 2)), target_score(tg, rbind(c(1, 2))),
               ignore_attr = TRUE)
  expect_equal(target_log_density(tg, c(1, 2)),
               target_log_density(tg, rbind(c(1, 2))))
  mix <- gaussian_mixture_target(means = rbind(c(-2, 0), c(2, 0)), covs = 1,
                                 weights = c(0.3, 0.7))
  # at (0, 0) both components are equally far: responsibilities = weights,
  # score = -(0.3 * (0 - (-2)) + 0.7 * (0 - 2), 0) = (0.8, 0)
  expect_equal(as.numeric(target_score(mix, c(0, 0))), c(0.8, 0),
               tolerance = 1e-12)
})

test_that("sample_target() moments of a Gaussian target", {
  set.seed(42)
  S <- matrix(c(2, 0.6, 0.6, 1), 2)
  m <- c(3, -2)
  n <- 20000
  x <- sample_target(gaussian_target(m, S), n)
  expect_identical(dim(x), c(20000L, 2L))
  expect_true(all(abs(colMeans(x) - m) < 4 * sqrt(diag(S) / n)))
  expect_lt(max(abs(stats::cov(x) - S)), 0.08)
  # reproducible with set.seed
  set.seed(1)
  a <- sample_target(gaussian_target(m, S), 5)
  set.seed(1)
  b <- sample_target(gaussian_target(m, S), 5)
  expect_identical(a, b)
})

# ---- Gaussian mixture target ---------------------------------------------------------

# log sum_k w_k N(x; m_k, S_k), via log-sum-exp for stability.
ref_mix_log <- function(x, means, covs, w) {
  w <- w / sum(w)
  a <- sapply(seq_along(w), function(k) {
    log(w[k]) + ref_dmvnorm_log(x, means[k, ], covs[[k]])
  })
  a <- matrix(a, ncol = length(w))
  mx <- apply(a, 1, max)
  mx + log(rowSums(exp(a - mx)))
}

test_that("gaussian_mixture_target() log density matches the direct formula", {
  set.seed(43)
  means <- rbind(c(-2, 0), c(2, 1), c(0, 3))
  covs <- list(diag(2), matrix(c(1, 0.5, 0.5, 2), 2), diag(c(0.5, 0.3)))
  w <- c(1, 2, 3)
  mix <- gaussian_mixture_target(means, covs, w)
  x <- matrix(stats::rnorm(40, sd = 2), 20, 2)
  expect_equal(target_log_density(mix, x), ref_mix_log(x, means, covs, w),
               tolerance = 1e-12)
  # the direct formula without log-sum-exp
  direct <- log(rowSums(sapply(1:3, function(k) {
    w[k] / 6 * exp(ref_dmvnorm_log(x, means[k, ], covs[[k]]))
  })))
  expect_equal(target_log_density(mix, x), direct, tolerance = 1e-12)
  # far from every mean: finite and accurate
  far <- rbind(c(60, -40), c(-100, 0))
  v <- target_log_density(mix, far)
  expect_true(all(is.finite(v)))
  expect_equal(v, ref_mix_log(far, means, covs, w), tolerance = 1e-12)
  # means as a list and a shared covariance
  mix2 <- gaussian_mixture_target(list(c(-2, 0), c(2, 1)), covs = 2)
  expect_equal(target_log_density(mix2, x),
               ref_mix_log(x, means[1:2, ], list(diag(2, 2), diag(2, 2)),
                           c(1, 1)), tolerance = 1e-12)
})

test_that("gaussian_mixture_target() score matches finite differences", {
  set.seed(44)
  means <- rbind(c(-2, 0, 1), c(2, 1, 0))
  covs <- list(ref_spd(3), diag(c(0.5, 1, 2)))
  mix <- gaussian_mixture_target(means, covs, c(0.3, 0.7))
  x <- matrix(stats::rnorm(24, sd = 2), 8, 3)
  g <- target_score(mix, x)
  expect_identical(dim(g), c(8L, 3L))
  for (i in 1:8) {
    fd <- ref_num_grad(function(z) ref_mix_log(z, means, covs, c(0.3, 0.7)),
                       x[i, ])
    expect_lt(max(abs(g[i, ] - fd)) / max(abs(fd), 1), 1e-7)
  }
  # far out the score is that of the dominant component, without NaN
  far <- c(80, 0, 0)
  a <- log(c(0.3, 0.7)) + c(ref_dmvnorm_log(far, means[1, ], covs[[1]]),
                            ref_dmvnorm_log(far, means[2, ], covs[[2]]))
  top <- which.max(a)
  expect_gt(abs(diff(a)), 60)   # the other component's weight is < 1e-26
  gf <- target_score(mix, rbind(far))
  expect_true(all(is.finite(gf)))
  expect_equal(as.numeric(gf),
               -as.numeric(solve(covs[[top]], far - means[top, ])),
               tolerance = 1e-10)
})

test_that("sample_target() moments of a Gaussian mixture", {
  set.seed(45)
  means <- rbind(c(-5, 0), c(5, 2))
  mix <- gaussian_mixture_target(means, covs = list(1, 0.5), weights = c(1, 3))
  n <- 20000
  x <- sample_target(mix, n)
  expect_identical(dim(x), c(20000L, 2L))
  expect_equal(mean(x[, 1] > 0), 0.75, tolerance = 0.02 / 0.75)
  expect_lt(max(abs(colMeans(x) - c(2.5, 1.5))), 0.1)
  right <- x[x[, 1] > 0, ]
  expect_lt(max(abs(stats::cov(right) - diag(0.5, 2))), 0.05)
})

# ---- user targets --------------------------------------------------------------------

test_that("kb_target() one point at a time and vectorised", {
  set.seed(46)
  x <- matrix(stats::rnorm(12), 6, 2)
  t1 <- kb_target(function(z) -sum(z^2) / 2, function(z) -z, dim = 2,
                  name = "std normal")
  tv <- kb_target(function(z) -rowSums(z^2) / 2, function(z) -z, dim = 2,
                  vectorized = TRUE)
  expect_s3_class(t1, "kb_target")
  expect_identical(t1$dim, 2L)
  expect_false(t1$vectorized)
  expect_true(tv$vectorized)
  expect_false(t1$fd_score)
  expect_null(t1$sampler)
  expect_identical(target_log_density(t1, x), -rowSums(x^2) / 2)
  expect_identical(target_log_density(tv, x), -rowSums(x^2) / 2)
  expect_identical(unname(target_score(t1, x)), -x)
  expect_identical(unname(target_score(tv, x)), -x)
  # data frames are points too
  expect_identical(target_score(t1, as.data.frame(x)), -x, ignore_attr = TRUE)
  # a vectorised 1-d score may return a plain vector
  t1d <- kb_target(function(z) -z^2 / 2, function(z) -as.numeric(z), dim = 1,
                   vectorized = TRUE)
  expect_equal(target_score(t1d, c(1, 2, 3)), matrix(-(1:3)), ignore_attr = TRUE)
})

test_that("log_density closures are checked and named", {
  x <- matrix(c(1, 2, 3, 4), 2)
  tl <- kb_target(function(z) stop("kaboom"), function(z) -z, dim = 2)
  err <- tryCatch(target_log_density(tl, x), error = identity)
  expect_match(conditionMessage(err), "kaboom")
  expect_match(deparse(conditionCall(err))[1], "^log_density\\(")
  tl <- kb_target(function(z) c(1, 2), function(z) -z, dim = 2)
  expect_error(target_log_density(tl, x), "'log_density'.*length 2")
  tl <- kb_target(function(z) NaN, function(z) -z, dim = 2)
  expect_error(target_log_density(tl, x), "'log_density'.*non-finite")
  tl <- kb_target(function(z) "a", function(z) -z, dim = 2)
  expect_error(target_log_density(tl, x), "'log_density'.*numeric")
  tv <- kb_target(function(z) 1, function(z) -z, dim = 2, vectorized = TRUE)
  expect_error(target_log_density(tv, x), "'log_density'.*2")
  tv <- kb_target(function(z) c(NA, 1), function(z) -z, dim = 2,
                  vectorized = TRUE)
  expect_error(target_log_density(tv, x), "'log_density'.*row 1")
  tv <- kb_target(function(z) stop("kaboom"), function(z) -z, dim = 2,
                  vectorized = TRUE)
  expect_error(target_log_density(tv, x), "'log_density'.*kaboom")
})

test_that("target print methods", {
  expect_snapshot({
    gaussian_target(c(0, 0))
    gaussian_mixture_target(rbind(c(-1, 0), c(1, 0), c(0, 2)))
    kb_target(function(z) -sum(z^2) / 2, function(z) -z, dim = 3,
              name = "my target")
    kb_target(function(z) -rowSums(z^2) / 2, function(z) -z, dim = 2,
              vectorized = TRUE)
    suppressMessages(kb_target(function(z) -sum(z^2) / 2, dim = 2))
  })
  utils::capture.output(vis <- withVisible(print(gaussian_target(0))))
  expect_false(vis$visible)
})

# ---- bad input --------------------------------------------------------------------------

test_that("kb_target() rejects bad arguments, naming them", {
  ld <- function(z) 0
  expect_error(kb_target("f", dim = 2), "'log_density'")
  expect_error(kb_target(ld, score = "g", dim = 2), "'score'")
  expect_error(kb_target(ld, score = 1, dim = 2), "'score'")
  expect_error(kb_target(ld, function(z) z), "'dim'")
  for (bad in list(0, -1, 1.5, NA, "2", c(1, 2), Inf)) {
    expect_error(kb_target(ld, function(z) z, dim = bad), "'dim'")
  }
  expect_error(kb_target(ld, function(z) z, dim = 2, vectorized = NA),
               "'vectorized'")
  expect_error(kb_target(ld, function(z) z, dim = 2, vectorized = "yes"),
               "'vectorized'")
  expect_error(kb_target(ld, function(z) z, dim = 2, name = 1), "'name'")
  expect_error(kb_target(ld, function(z) z, dim = 2, name = c("a", "b")),
               "'name'")
})

test_that("gaussian_target() and gaussian_mixture_target() reject bad arguments", {
  expect_error(gaussian_target(c(0, NA)), "'mean'")
  expect_error(gaussian_target(c(0, Inf)), "'mean'")
  expect_error(gaussian_target("0"), "'mean'")
  expect_error(gaussian_target(numeric(0)), "'mean'")
  expect_error(gaussian_target(c(0, 0), diag(3)), "'cov'.*2 x 2")
  expect_error(gaussian_target(c(0, 0), c(1, 2, 3)), "'cov'")
  expect_error(gaussian_target(c(0, 0), matrix(c(1, 0.5, 0, 1), 2)),
               "'cov'.*symmetric")
  expect_error(gaussian_target(c(0, 0), matrix(c(1, 2, 2, 1), 2)),
               "'cov'.*positive definite")
  expect_error(gaussian_target(c(0, 0), -1), "'cov'.*positive definite")
  expect_error(gaussian_target(c(0, 0), matrix(c(1, NA, NA, 1), 2)), "'cov'")
  expect_error(gaussian_target(c(0, 0), "1"), "'cov'")

  expect_error(gaussian_mixture_target(matrix("a", 2, 2)), "'means'")
  expect_error(gaussian_mixture_target(rbind(c(0, NA), c(1, 1))), "'means'")
  expect_error(gaussian_mixture_target(list(c(0, 0), c(1, 1, 1))), "'means'")
  expect_error(gaussian_mixture_target(c(0, 1)), "'means'")
  m <- rbind(c(0, 0), c(1, 1))
  expect_error(gaussian_mixture_target(m, covs = list(1, 1, 1)), "'covs'")
  expect_error(gaussian_mixture_target(m, covs = list(1, -1)),
               "'covs\\[\\[2\\]\\]'")
  expect_error(gaussian_mixture_target(m, covs = diag(3)), "'covs\\[\\[1\\]\\]'")
  expect_error(gaussian_mixture_target(m, weights = c(1, -1)), "'weights'")
  expect_error(gaussian_mixture_target(m, weights = c(0, 0)), "'weights'")
  expect_error(gaussian_mixture_target(m, weights = 1), "'weights'")
  expect_error(gaussian_mixture_target(m, weights = c(1, NA)), "'weights'")
})

test_that("evaluation and sampling functions reject bad arguments", {
  tg <- gaussian_target(c(0, 0))
  x <- matrix(1:6, 2)
  expect_error(target_score(list(), x), "'target'")
  expect_error(target_log_density("tg", x), "'target'")
  expect_error(sample_target(function(n) n, 2), "'target'")
  expect_error(target_score(tg, x), "'x'.*2 columns.*3")
  expect_error(target_log_density(tg, x), "'x'.*2 columns")
  expect_error(target_score(tg, rbind(c(0, NA))), "'x'")
  expect_error(target_score(tg, matrix("a", 2, 2)), "'x'")
  expect_error(sample_target(tg, 0), "'n'")
  expect_error(sample_target(tg, 2.5), "'n'")
  expect_error(sample_target(tg, NA), "'n'")
  expect_error(sample_target(kb_target(function(z) 0, function(z) z, dim = 1),
                             5), "'target'.*sampler")
})

test_that("logistic_regression_target: log density, score and predictions from the formulas", {
  set.seed(31)
  X <- matrix(rnorm(60), 20, 3)
  y <- rbinom(20, 1, 0.4)
  for (ic in c(TRUE, FALSE)) for (sc in c(TRUE, FALSE)) {
    tg <- logistic_regression_target(X, y, prior_sd = 2, intercept = ic,
                                     scale = sc)
    Z <- if (sc) scale(X) else X
    if (ic) Z <- cbind(1, Z)
    p <- ncol(Z)
    expect_identical(tg$dim, p)
    B <- matrix(rnorm(4 * p), 4)
    ref_ld <- apply(B, 1, function(b) {
      eta <- drop(Z %*% b)
      sum(dbinom(y, 1, plogis(eta), log = TRUE)) - sum(b^2) / 8
    })
    expect_equal(target_log_density(tg, B), ref_ld, tolerance = 1e-12)
    ref_sc <- t(apply(B, 1, function(b) {
      drop(crossprod(Z, y - plogis(drop(Z %*% b)))) - b / 4
    }))
    expect_equal(unname(target_score(tg, B)), ref_sc, tolerance = 1e-12)
    # score against central differences of the log density
    h <- 1e-6
    for (k in seq_len(p)) {
      e <- replace(numeric(p), k, h)
      fd <- (target_log_density(tg, B[1, ] + e) -
               target_log_density(tg, B[1, ] - e)) / (2 * h)
      expect_equal(target_score(tg, B[1, , drop = FALSE])[1, k], fd,
                   tolerance = 1e-6)
    }
    # predictions: the average of the per-draw probabilities
    newX <- matrix(rnorm(9), 3)
    Zn <- if (sc) sweep(sweep(newX, 2, attr(Z <- scale(X), "scaled:center")), 2,
                        attr(Z, "scaled:scale"), "/") else newX
    if (ic) Zn <- cbind(1, Zn)
    expect_equal(tg$predict(B, newX), rowMeans(plogis(Zn %*% t(B))),
                 tolerance = 1e-12)
  }
  # stable far in the tails (no -Inf or NaN)
  tg <- logistic_regression_target(X, y, prior_sd = 10)
  big <- rbind(rep(200, tg$dim), rep(-200, tg$dim))
  expect_true(all(is.finite(target_log_density(tg, big))))
  expect_true(all(is.finite(target_score(tg, big))))
})

test_that("logistic_regression_target: data frames, factors and bad input", {
  d <- data.frame(a = c(1, 2, 3, 4, 5), b = c(0.5, 0.1, 0.9, 0.3, 0.2))
  yf <- factor(c("No", "Yes", "No", "Yes", "Yes"))
  tg <- logistic_regression_target(d, yf)
  expect_identical(tg$y, c(0, 1, 0, 1, 1))
  expect_identical(tg$dim, 3L)
  expect_error(logistic_regression_target(d, yf[-1]), "'y'")
  expect_error(logistic_regression_target(d, c(0, 1, 2, 1, 0)), "'y'")
  expect_error(logistic_regression_target(d, factor(letters[1:5])), "'y'")
  expect_error(logistic_regression_target(d, yf, prior_sd = 0), "'prior_sd'")
  expect_error(logistic_regression_target(matrix(c(1, NA), 2), c(0, 1)), "'X'")
  expect_error(logistic_regression_target("a", 1), "'X'")
  expect_error(tg$predict(c(0, 0, 0), matrix(1, 2, 3)), "'newX'")
})

test_that("closures that fail or return the wrong thing give kb_error_callback", {
  x <- rbind(c(1, 2), c(3, 4))
  ld <- function(x) -sum(x^2) / 2
  one <- function(score, ...) kb_target(ld, score, dim = 2, ...)
  # one point per call (checked in C, src/callback.c)
  expect_error(target_score(one(function(x) c(x, 0)), x),
               "'score' returned a vector of length 3 at row 1",
               class = "kb_error_callback")
  expect_error(target_score(one(function(x) "a"), x),
               "'score' must return a numeric vector .*type 'character'",
               class = "kb_error_callback")
  expect_error(target_score(one(function(x) NULL), x),
               "type 'NULL'", class = "kb_error_callback")
  expect_error(target_score(one(function(x) c(NA, 1)), x),
               "non-finite value .* at row 1", class = "kb_error_callback")
  expect_error(target_log_density(kb_target(function(x) Inf, dim = 2), x),
               "'log_density' returned a non-finite", class = "kb_error_callback")
  # the closure's own error passes through, its call naming the closure
  e <- tryCatch(target_score(one(function(x) stop("boom")), x),
                error = function(e) e)
  expect_match(conditionMessage(e), "boom")
  expect_match(deparse(conditionCall(e))[1], "^score\\(")
  # vectorised closures (checked in R)
  vec <- function(score) kb_target(function(x) -rowSums(x^2) / 2, score, dim = 2,
                                   vectorized = TRUE)
  expect_error(target_score(vec(function(x) x[, 1]), x),
               "'score' \\(vectorised\\) must return a 2 x 2", class = "kb_error_callback")
  expect_error(target_score(vec(function(x) x * NaN), x), "at row 1",
               class = "kb_error_callback")
  expect_error(target_score(vec(function(x) stop("boom")), x),
               "'score' failed: boom", class = "kb_error_callback")
  expect_error(target_log_density(kb_target(function(x) 1, dim = 2, vectorized = TRUE),
                                  x), "must return 2 numbers", class = "kb_error_callback")
  expect_error(target_log_density(kb_target(function(x) c(0, NaN), dim = 2,
                                            vectorized = TRUE), x),
               "at row 2", class = "kb_error_callback")
  # a kernbayes condition raised inside a closure keeps its class
  expect_error(target_score(vec(function(x) kernbayes:::stop_numeric("deep")), x),
               "^deep$", class = "kb_error_numeric")
})

test_that("a kb_target with an edited field is rejected, naming the field", {
  tg <- gaussian_target(c(0, 0))
  x <- rbind(c(1, 2))
  edit <- function(...) {
    t2 <- tg
    m <- list(...)
    for (nm in names(m)) t2[nm] <- list(m[[nm]])
    t2
  }
  expect_error(target_score(edit(dim = "a"), x), "field 'dim'", class = "kb_error_arg")
  expect_error(target_score(edit(dim = 0), x), "field 'dim'", class = "kb_error_arg")
  expect_error(target_score(edit(dim = 1.5), x), "field 'dim'", class = "kb_error_arg")
  expect_error(target_score(edit(score = NULL), x), "field 'score'",
               class = "kb_error_arg")
  expect_error(target_log_density(edit(log_density = "f"), x), "field 'log_density'",
               class = "kb_error_arg")
  expect_error(target_score(edit(vectorized = NA), x), "field 'vectorized'",
               class = "kb_error_arg")
  expect_error(sample_target(edit(dim = NA), 2), "'target' is not a valid kb_target",
               class = "kb_error_arg")
  expect_error(mala(edit(dim = 0), c(0, 0), 5), "field 'dim'", class = "kb_error_arg")
  expect_error(target_score(edit(names = "a"), x), "field 'names'",
               class = "kb_error_arg")
  expect_error(target_score(edit(names = 1:2), x), "field 'names'",
               class = "kb_error_arg")
})

test_that("target_score names columns from x, else from the target's names", {
  x <- rbind(c(1, 2), c(0, 1))
  for (vec in c(TRUE, FALSE)) {
    tg <- if (vec) gaussian_target(c(0, 0)) else
      kb_target(function(x) -sum(x^2) / 2, function(x) -x, dim = 2)
    expect_null(colnames(target_score(tg, x)))
    tg$names <- c("a", "b")
    expect_identical(dimnames(target_score(tg, x)), list(NULL, c("a", "b")))
    expect_identical(colnames(target_score(tg, c(1, 2))), c("a", "b"))
    xn <- x
    colnames(xn) <- c("p", "q")
    expect_identical(colnames(target_score(tg, xn)), c("p", "q"))
    expect_equal(unname(target_score(tg, xn)), -x)
  }
})

test_that("logistic_regression_target() accepts a single row of X", {
  # the column sd of one row is NA: the scale is then 1, not NaN
  tg <- logistic_regression_target(matrix(c(1, 2), 1), 1)
  expect_equal(target_log_density(tg, c(0, 0, 0)), -log(2))
  expect_true(all(is.finite(target_score(tg, c(0.5, 1, -1)))))
})

# ---- Gaussian-Bernoulli RBM target -------------------------------------------------------

# All 2^dh hidden states as the rows of a matrix of +-1.
rbm_states <- function(dh) {
  as.matrix(expand.grid(rep(list(c(-1, 1)), dh)))
}

# The exact marginal of an RBM as a mixture: x | h ~ N(Bh + b, I) and
# p(h) proportional to exp(c'h + |Bh + b|^2 / 2) (complete the square in
# x'Bh + b'x - |x|^2 / 2); returns the component means, the log weights and
# the mean and covariance of x.
rbm_mixture <- function(B, b, c) {
  H <- rbm_states(ncol(B))
  M <- sweep(H %*% t(B), 2, b, "+")
  lw <- drop(H %*% c) + rowSums(M^2) / 2
  w <- exp(lw - max(lw))
  w <- w / sum(w)
  mu <- colSums(w * M)
  list(means = M, logw = lw, w = w, mean = mu,
       cov = diag(ncol(M)) + crossprod(M * sqrt(w)) - tcrossprod(mu))
}

test_that("rbm_target() log density is the log of the sum over hidden states", {
  set.seed(50)
  d <- 2
  dh <- 3
  B <- matrix(rnorm(d * dh), d, dh)
  b <- rnorm(d)
  c <- rnorm(dh)
  tg <- rbm_target(B, b, c)
  H <- rbm_states(dh)
  x <- rbind(matrix(rnorm(20), 10), c(30, -40))   # one point far out
  brute <- apply(x, 1, function(z) {
    e <- drop(H %*% (crossprod(B, z) + c)) + sum(b * z) - sum(z^2) / 2
    max(e) + log(sum(exp(e - max(e))))
  })
  expect_equal(target_log_density(tg, x), brute, tolerance = 1e-12)
  # the same as the Gaussian mixture of the exact marginal, up to log Z
  mix <- rbm_mixture(B, b, c)
  gm <- gaussian_mixture_target(mix$means, 1, mix$w)
  dl <- target_log_density(tg, x) - target_log_density(gm, x)
  expect_lt(diff(range(dl)), 1e-9)
  expect_equal(target_score(tg, x), target_score(gm, x), tolerance = 1e-9)
})

test_that("rbm_target() score is b - x + B tanh(B'x + c) and matches finite differences", {
  set.seed(51)
  d <- 4
  dh <- 3
  B <- matrix(sample(c(-1, 1), d * dh, TRUE), d, dh) / 2
  b <- rnorm(d)
  c <- rnorm(dh)
  tg <- rbm_target(B, b, c)
  x <- matrix(rnorm(8 * d, sd = 2), 8)
  g <- target_score(tg, x)
  expect_identical(dim(g), dim(x))
  ref <- t(apply(x, 1, function(z) b - z + B %*% tanh(crossprod(B, z) + c)))
  expect_equal(g, ref, tolerance = 1e-13, ignore_attr = TRUE)
  ld <- function(z) target_log_density(tg, matrix(z, 1))
  for (i in seq_len(nrow(x))) {
    fd <- ref_num_grad(ld, x[i, ])
    expect_lt(max(abs(g[i, ] - fd)) / max(abs(fd), 1), 1e-7)
  }
  # one point as a vector; d = 1 targets
  expect_equal(target_score(tg, x[1, ]), g[1, , drop = FALSE], ignore_attr = TRUE)
  t1 <- rbm_target(matrix(c(0.5, -1), 1), 0.3, c(0.1, -0.2))
  z <- c(-1, 0, 2)
  expect_equal(drop(target_score(t1, z)),
               0.3 - z + 0.5 * tanh(0.5 * z + 0.1) - tanh(-z - 0.2),
               tolerance = 1e-13)
})

test_that("rbm_target() Gibbs draws have the exact marginal's mean and covariance", {
  set.seed(52)
  d <- 2
  dh <- 2
  B <- matrix(c(0.8, -0.4, 0.5, 0.9), d, dh)
  b <- c(0.5, -1)
  c <- c(0.3, -0.6)
  tg <- rbm_target(B, b, c, burnin = 50)
  expect_s3_class(tg, "kb_target")
  mix <- rbm_mixture(B, b, c)
  n <- 40000
  x <- sample_target(tg, n)
  expect_identical(dim(x), c(40000L, 2L))
  se <- sqrt(diag(mix$cov) / n)
  expect_true(all(abs(colMeans(x) - mix$mean) < 4 * se))
  expect_lt(max(abs(stats::cov(x) - mix$cov)), 0.06)
  # more sweeps of the same chains keep the marginal
  y <- tg$gibbs(x, 3)
  expect_true(all(abs(colMeans(y) - mix$mean) < 4 * se))
  expect_identical(tg$gibbs(x, 0), x)
  # d = 1, two hidden units: the probability of x > mean
  t1 <- rbm_target(matrix(c(1, -0.7), 1), 0.2, c(0.4, 0.1), burnin = 50)
  m1 <- rbm_mixture(t1$B, t1$b, t1$c)
  x1 <- sample_target(t1, n)
  p_exact <- sum(m1$w * stats::pnorm(m1$mean, drop(m1$means), lower.tail = FALSE))
  expect_lt(abs(mean(x1 > m1$mean) - p_exact), 4 * sqrt(0.25 / n))
  # reproducible under set.seed
  set.seed(3)
  a <- sample_target(tg, 5)
  set.seed(3)
  expect_identical(sample_target(tg, 5), a)
})

test_that("rbm_target() rejects bad input, naming the argument", {
  B <- matrix(1, 3, 2)
  expect_error(rbm_target(1:6, rep(0, 6), 0), "'B'", class = "kb_error_arg")
  expect_error(rbm_target(replace(B, 2, NA), rep(0, 3), c(0, 0)), "'B'",
               class = "kb_error_arg")
  expect_error(rbm_target(matrix("a", 3, 2), rep(0, 3), c(0, 0)), "'B'",
               class = "kb_error_arg")
  expect_error(rbm_target(B, rep(0, 2), c(0, 0)), "'b'.*3", class = "kb_error_arg")
  expect_error(rbm_target(B, c(0, Inf, 0), c(0, 0)), "'b'", class = "kb_error_arg")
  expect_error(rbm_target(B, rep(0, 3), 0), "'c'.*2", class = "kb_error_arg")
  expect_error(rbm_target(B, rep(0, 3), c(NA, 0)), "'c'", class = "kb_error_arg")
  expect_error(rbm_target(B, rep(0, 3), c(0, 0), burnin = -1), "'burnin'",
               class = "kb_error_arg")
  expect_error(rbm_target(B, rep(0, 3), c(0, 0), burnin = 1.5), "'burnin'",
               class = "kb_error_arg")
  tg <- rbm_target(B, rep(0, 3), c(0, 0))
  expect_error(tg$gibbs(matrix(0, 2, 2), 1), "'x'", class = "kb_error_arg")
  expect_error(tg$gibbs(matrix(0, 2, 3), -1), "'sweeps'", class = "kb_error_arg")
  expect_error(target_score(tg, matrix(0, 2, 2)), "'x'", class = "kb_error_arg")
})
