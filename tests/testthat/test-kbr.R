# Kernel Bayes' rule (R/kbr.R, src/kbr.c): agreement with plain-R versions of
# the formulas in DESIGN.md (helper-reference.R: ref_gauss_gram, ref_kbr,
# ref_nystrom), the low-rank path, pre-images and posterior expectations,
# warnings, errors and print.  Cross-validation is in test-kbr-cv.R, the
# filters in test-filters.R.

# ---- kernel_matrix -----------------------------------------------------------

test_that("kernel_matrix() is exp(-|x - y|^2 / (2 s^2)), given or median bandwidth", {
  set.seed(101)
  for (d in 1:3) {
    x <- matrix(rnorm(20 * d), 20)
    y <- matrix(rnorm(7 * d, sd = 2), 7)
    expect_lt(rel_err(kernel_matrix(x, y, gaussian_kernel(bandwidth = 0.7)),
                      ref_gauss_gram(x, y, 0.7)), 1e-12)
    # default: median pairwise distance of x (not of y)
    s <- ref_med_bw(x)
    expect_lt(rel_err(kernel_matrix(x, y, gaussian_kernel()),
                      ref_gauss_gram(x, y, s)), 1e-12)
    K <- kernel_matrix(x, kernel = gaussian_kernel())
    expect_lt(rel_err(K, ref_gauss_gram(x, x, s)), 1e-12)
    expect_equal(diag(K), rep(1, 20), tolerance = 1e-15)
  }
})

# ---- agreement with the formulas ---------------------------------------------

test_that("kbr() weights and mu agree with solve() for both methods, dx, dy in 1..3", {
  set.seed(102)
  n <- 40L
  for (method in c("kbr", "iw")) for (dx in 1:3) for (dy in 1:3) {
    x <- matrix(rnorm(n * dx), n)
    y <- x[, rep_len(seq_len(dx), dy), drop = FALSE] +
      matrix(rnorm(n * dy, sd = 0.5), n)
    U <- matrix(rnorm(25 * dx, sd = 0.7), 25)
    g <- runif(25, -0.5, 1)           # some negative prior weights
    g <- g / sum(g)
    expect_true(any(g < 0))
    yn <- matrix(rnorm(7 * dy), 7)
    fit <- kbr(x, y, prior = U, prior_weights = g, eps = 0.01, delta = 0.1,
               method = method)
    ref <- ref_kbr(x, y, yn, prior = U, gamma = g, sx = ref_med_bw(x),
                   sy = ref_med_bw(y), eps = 0.01, delta = 0.1,
                   method = method)
    lab <- sprintf("%s, dx = %d, dy = %d", method, dx, dy)
    expect_lt(rel_err(fit$mu, ref$mu), 1e-10, label = paste("mu", lab))
    W <- predict(fit, yn)
    expect_identical(dim(W), c(n, 7L))
    expect_lt(rel_err(W, ref$W), 1e-10, label = paste("weights", lab))
    expect_lt(rel_err(posterior_mean(fit, yn), crossprod(ref$W, x)), 1e-10,
              label = paste("posterior mean", lab))
  }
  # the "iw" clipping max(mu, 0) was exercised: some mu are negative
  expect_true(any(fit$mu < 0))
})

test_that("kbr() defaults: prior = x with equal weights, median bandwidths; explicit bandwidths", {
  d <- kbr_toy_1d(50, 103)
  yn <- c(-1.5, 0, 0.3, 2)
  for (method in c("kbr", "iw")) {
    # eps = delta = NULL: chosen by 5-fold cross-validation over the
    # default grid (delta by the regression criterion, eps by the marginal
    # one at that delta), with a message giving the cost
    expect_message(fit <- kbr(d$x, d$y, method = method),
                   "5-fold cross-validation over 24 settings")
    cr <- kbr_cv(d$x, d$y, folds = 5, method = method,
                 criterion = "regression", refit = FALSE)$table
    cm <- kbr_cv(d$x, d$y, folds = 5, method = method,
                 criterion = "marginal", refit = FALSE)$table
    at <- cm[cm$delta == cr$delta[which.min(cr$criterion)], ]
    expect_identical(c(fit$eps, fit$delta),
                     c(at$eps[which.min(at$criterion)], at$delta[1]))
    ref <- ref_kbr(d$x, d$y, yn, sx = ref_med_bw(d$x), sy = ref_med_bw(d$y),
                   eps = fit$eps, delta = fit$delta, method = method)
    expect_lt(rel_err(predict(fit, yn), ref$W), 1e-10)
    # only delta missing: eps is kept, delta chosen over the default deltas
    expect_message(fd <- kbr(d$x, d$y, eps = 0.05, method = method),
                   "choosing delta by 5-fold cross-validation over 8 settings")
    expect_identical(fd$eps, 0.05)
    # prior = NULL is the same as prior = x with weights 1/n
    fit2 <- kbr(d$x, d$y, prior = d$x, prior_weights = rep(1 / 50, 50),
                eps = fit$eps, delta = fit$delta, method = method)
    expect_equal(predict(fit2, yn), predict(fit, yn), tolerance = 1e-14)
    # given bandwidths override the median heuristic
    fit3 <- kbr(d$x, d$y, kernel_x = gaussian_kernel(bandwidth = 0.4),
                kernel_y = gaussian_kernel(bandwidth = 1.3), eps = 0.003,
                delta = 0.05, method = method)
    ref3 <- ref_kbr(d$x, d$y, yn, sx = 0.4, sy = 1.3, eps = 0.003,
                    delta = 0.05, method = method)
    expect_lt(rel_err(predict(fit3, yn), ref3$W), 1e-10)
    expect_lt(rel_err(fit3$mu, ref3$mu), 1e-10)
  }
  # a length-dy vector is one observation when dy > 1; a matrix is many
  x2 <- cbind(d$x, d$x^2)
  y2 <- cbind(d$y, -d$y)
  f2 <- kbr(x2, y2, eps = 0.01, delta = 0.1)
  expect_identical(dim(predict(f2, c(0.5, -0.5))), c(50L, 1L))
  expect_equal(predict(f2, c(0.5, -0.5)), predict(f2, rbind(c(0.5, -0.5))),
               tolerance = 0)
  ref2 <- ref_kbr(x2, y2, rbind(c(0.5, -0.5), c(1, 1)), sx = ref_med_bw(x2),
                  sy = ref_med_bw(y2), eps = 0.01, delta = 0.1)
  expect_lt(rel_err(predict(f2, rbind(c(0.5, -0.5), c(1, 1))), ref2$W), 1e-10)
})

# ---- low rank ----------------------------------------------------------------

test_that("low rank with r = n and tol = 0 equals the full path", {
  set.seed(107)
  n <- 30
  x <- sort(runif(n, -2, 2))
  y <- x + rnorm(n, sd = 0.3)
  yn <- c(-1, 0, 0.5, 1.5)
  for (method in c("kbr", "iw")) {
    args <- list(x = x, y = y, eps = 0.01, delta = 0.1, method = method,
                 kernel_x = gaussian_kernel(bandwidth = 0.3),
                 kernel_y = gaussian_kernel(bandwidth = 0.3))
    f0 <- do.call(kbr, args)
    f1 <- do.call(kbr, c(args, list(rank = n, tol = 0)))
    expect_identical(f1$rank_x, 30L)
    expect_gte(f1$rank_y, 29L)
    expect_lt(rel_err(f1$mu, f0$mu), 1e-8)
    expect_lt(rel_err(predict(f1, yn), predict(f0, yn)), 1e-8)
    # and against the formulas directly
    ref <- ref_kbr(x, y, yn, sx = 0.3, sy = 0.3, eps = 0.01, delta = 0.1,
                   method = method)
    expect_lt(rel_err(predict(f1, yn), ref$W), 1e-8)
  }
})

test_that("low rank with a modest r is close to the full path (smooth 1-d problem)", {
  d <- kbr_toy_1d(400, 108)
  yn <- seq(-2, 2, length.out = 21)
  for (method in c("kbr", "iw")) {
    f0 <- kbr(d$x, d$y, eps = 0.01, delta = 0.1, method = method)
    W0 <- predict(f0, yn)
    f30 <- kbr(d$x, d$y, eps = 0.01, delta = 0.1, method = method, rank = 30)
    # the incomplete Cholesky stops before 30 columns at tol = 1e-6
    expect_lte(f30$rank_x, 30L)
    err30 <- norm(predict(f30, yn) - W0, "F") / norm(W0, "F")
    expect_lt(err30, 1e-3)     # measured: 2.4e-05 (kbr), 1.4e-04 (iw)
    # a truncated factor (exactly 10 columns) is visibly but mildly worse
    f10 <- kbr(d$x, d$y, eps = 0.01, delta = 0.1, method = method, rank = 10,
               tol = 0)
    expect_identical(c(f10$rank_x, f10$rank_y), c(10L, 10L))
    err10 <- norm(predict(f10, yn) - W0, "F") / norm(W0, "F")
    expect_lt(err10, 0.1)      # measured: 0.006 (kbr), 0.03 (iw)
    expect_gt(err10, err30)
    expect_lt(max(abs(posterior_mean(f10, yn) - posterior_mean(f0, yn))), 0.02)
  }
})

test_that("low-rank kbr() equals the plain-R Nystrom formulas for small delta", {
  set.seed(21)
  x <- rnorm(200)
  y <- x + rnorm(200, sd = 0.5)
  sx <- ref_med_bw(x)
  sy <- ref_med_bw(y)
  Gx <- ref_gauss_gram(x, x, sx)
  Gy <- ref_gauss_gram(y, y, sy)
  yn <- c(-1, 1, 2)
  Ky <- ref_gauss_gram(y, yn, sy)
  Px <- ref_nystrom_pivots(Gx, 1e-6, 50)
  Py <- ref_nystrom_pivots(Gy, 1e-6, 50)
  Gxt <- ref_nystrom(Gx, Px)
  Gyt <- ref_nystrom(Gy, Py)
  Kt <- Gy[, Py] %*% solve(Gy[Py, Py], Ky[Py, ])
  for (method in c("iw", "kbr")) {
    fit <- kbr(x, y, eps = 1e-2, delta = 1e-10, method = method, rank = 50)
    expect_identical(c(fit$rank_x, fit$rank_y), c(length(Px), length(Py)))
    mu <- ref_kbr_mu(Gxt, Gxt %*% rep(1 / 200, 200), 1e-2)
    expect_lt(rel_err(fit$mu, mu), 1e-8)
    W <- if (method == "iw") ref_iw_R(Gyt, mu, 1e-10) %*% Kt else
      ref_kbr_R(Gyt, mu, 1e-10, method) %*% Kt
    # measured 3.7e-6 (iw), 2.6e-10 (kbr)
    expect_lt(rel_err(predict(fit, yn), W), 2e-5, label = method)
    pm <- posterior_mean(fit, 1)
    # measured: 0.962 (iw), 0.914 (kbr); full path 1.063, 0.914; exact 0.8
    expect_gt(pm, 0.75)
    expect_lt(pm, 1.1)
    # smaller delta: finite, tending to the delta -> 0 limit (a Woodbury
    # form cancels catastrophically there: -1.5e11 at 1e-20)
    for (dl in c(1e-14, 1e-20)) {
      p2 <- posterior_mean(kbr(x, y, eps = 1e-2, delta = dl, method = method,
                               rank = 50), 1)
      expect_true(is.finite(p2))
      expect_lt(abs(p2 - 0.962166), 0.02, label = sprintf("%s, delta %g", method, dl))
    }
  }
})

test_that("low-rank kbr() with a separate prior uses the Nystrom features of the prior", {
  set.seed(22)
  x <- rnorm(120)
  y <- x + rnorm(120, sd = 0.5)
  U <- rnorm(40, sd = 0.7)
  g <- runif(40)
  k <- gaussian_kernel(bandwidth = 0.6)
  Gx <- ref_gauss_gram(x, x, 0.6)
  Gy <- ref_gauss_gram(y, y, 0.6)
  Px <- ref_nystrom_pivots(Gx, 1e-6, 60)
  Py <- ref_nystrom_pivots(Gy, 1e-6, 60)
  m <- Gx[, Px] %*% solve(Gx[Px, Px], ref_gauss_gram(x[Px], U, 0.6) %*% (g / sum(g)))
  mu <- ref_kbr_mu(ref_nystrom(Gx, Px), m, 1e-3)
  fit <- kbr(x, y, prior = U, prior_weights = g, kernel_x = k, kernel_y = k,
             eps = 1e-3, delta = 1e-6, method = "iw", rank = 60)
  expect_lt(rel_err(fit$mu, mu), 1e-8)
  Kt <- Gy[, Py] %*% solve(Gy[Py, Py], ref_gauss_gram(y[Py], c(0, 1), 0.6))
  expect_lt(rel_err(predict(fit, c(0, 1)),
                    ref_kbr_R(ref_nystrom(Gy, Py), mu, 1e-6, "iw") %*% Kt), 1e-6)
})

# ---- pre-image and posterior expectations ------------------------------------

test_that("preimage() is the fixed point and sits near the posterior mean (unimodal 1-d)", {
  d <- kbr_toy_1d(400, 110)
  yn <- c(-1, -0.5, 0, 0.5, 1)
  for (method in c("kbr", "iw")) {
    fit <- kbr(d$x, d$y, eps = 0.01, delta = if (method == "kbr") 1e-4 else 1e-2,
               method = method)
    pm <- drop(posterior_mean(fit, yn))
    pi <- preimage(fit, yn)
    expect_identical(dim(pi), c(5L, 1L))
    expect_lt(max(abs(pi - pm)), 0.05)
    expect_lt(max(abs(pi - 0.8 * yn)), 0.1)
    # the fixed point of x <- sum_i w_i k(X_i, x) X_i / sum_i w_i k(X_i, x)
    W <- predict(fit, yn)
    s <- ref_med_bw(d$x)
    for (q in seq_along(yn)) {
      z <- pi[q, 1]
      kz <- W[, q] * exp(-(d$x - z)^2 / (2 * s^2))
      expect_equal(sum(kz * d$x) / sum(kz), z, tolerance = 1e-6)
    }
    # one iteration from the posterior mean is one plain-R update
    kz <- W[, 5] * exp(-(d$x - pm[5])^2 / (2 * s^2))
    expect_equal(preimage(fit, 1, max_iter = 1)[1, 1],
                 sum(kz * d$x) / sum(kz), tolerance = 1e-12)
  }
})

test_that("posterior_expect(): identity is posterior_mean(); c(x, x^2) gives two columns", {
  d <- kbr_toy_1d(400, 110)
  yn <- c(-1, 0, 1)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 1e-4)
  expect_equal(unname(posterior_expect(fit, yn, identity, weights = "signed")),
               unname(posterior_mean(fit, yn)), tolerance = 1e-14)
  expect_equal(unname(posterior_expect(fit, yn, identity)),
               unname(posterior_mean(fit, yn, weights = "nonnegative")),
               tolerance = 1e-14)
  e2 <- posterior_expect(fit, yn, function(x) c(x, x^2), weights = "signed")
  expect_identical(dim(e2), c(3L, 2L))
  W <- predict(fit, yn)
  expect_equal(unname(e2), unname(crossprod(W, cbind(d$x, d$x^2))),
               tolerance = 1e-14)
  # E[X^2 | y] = 0.64 y^2 + 0.2
  expect_lt(max(abs(e2[, 2] - (0.64 * yn^2 + 0.2))), 0.1)
  # 2-d: f of a row
  set.seed(111)
  x2 <- matrix(rnorm(200), 100)
  y2 <- x2 + matrix(rnorm(200, sd = 0.5), 100)
  f2 <- kbr(x2, y2, eps = 0.01, delta = 0.1)
  yq <- rbind(c(0, 0), c(1, -1))
  expect_equal(unname(posterior_expect(f2, yq, identity, weights = "signed")),
               unname(posterior_mean(f2, yq)), tolerance = 1e-14)
  e3 <- posterior_expect(f2, yq, function(x) c(x[1] * x[2], sum(x), 1),
                         weights = "signed")
  expect_identical(dim(e3), c(2L, 3L))
  expect_equal(unname(e3[, 3]), colSums(predict(f2, yq)), tolerance = 1e-14)
  expect_equal(unname(e3[, 1]), drop(crossprod(predict(f2, yq),
                                                x2[, 1] * x2[, 2])),
               tolerance = 1e-14)
})

test_that("posterior_expect() names f and what it must return; checks newdata before calling f", {
  d <- kbr_toy_1d(30, 121)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 0.01)
  expect_error(posterior_expect(fit, 1, function(x) NULL),
               class = "kb_error_callback",
               regexp = "'f' must return a numeric vector .* at row 1 of x it returned NULL")
  expect_error(posterior_expect(fit, 1, function(x) "a"),
               class = "kb_error_callback", regexp = "type 'character'")
  expect_error(posterior_expect(fit, 1, function(x) if (x > 0) 1 else c(1, 2)),
               class = "kb_error_callback", regexp = "'f' must return vectors of one length")
  expect_error(posterior_expect(fit, 1, function(x) if (x > 1) NA else x),
               class = "kb_error_callback", regexp = "NA, NaN or Inf at row")
  expect_error(posterior_expect(fit, 1, function(x) 1e308 * c(1, 1) * 10^(x > 0)),
               class = "kb_error_callback")
  # a counting closure is not called when a later argument is bad
  calls <- 0
  f <- function(x) {
    calls <<- calls + 1
    x^2
  }
  expect_error(posterior_expect(fit, "a", f), class = "kb_error_arg",
               regexp = "'newdata'")
  expect_error(posterior_expect(fit, matrix(1, 1, 2), f), class = "kb_error_arg",
               regexp = "'newdata' must have 1 columns")
  expect_identical(calls, 0)
  # and the values are right
  e2 <- posterior_expect(fit, c(0, 1), f, weights = "signed")
  expect_equal(e2, crossprod(predict(fit, c(0, 1)), d$x^2), tolerance = 1e-14)
  expect_identical(calls, 30)
})

# ---- prior weights -----------------------------------------------------------

test_that("prior weights are rescaled to sum 1; a zero or negative total is an error", {
  d <- kbr_toy_1d(40, 120)
  f1 <- kbr(d$x, d$y, prior_weights = rep(1 / 40, 40), eps = 0.01, delta = 0.01)
  # 1e308 each: the sum overflows unless the weights are scaled first
  f2 <- kbr(d$x, d$y, prior_weights = rep(1e308, 40), eps = 0.01, delta = 0.01)
  expect_equal(posterior_mean(f2, c(0, 1)), posterior_mean(f1, c(0, 1)),
               tolerance = 1e-14)
  f3 <- kbr(d$x, d$y, prior_weights = rep(3, 40), eps = 0.01, delta = 0.01,
            method = "iw", rank = 20)
  f4 <- kbr(d$x, d$y, eps = 0.01, delta = 0.01, method = "iw", rank = 20)
  expect_equal(f3$mu, f4$mu, tolerance = 1e-14)
  # all-zero weights: no prior mass
  expect_error(kbr(d$x, d$y, prior_weights = rep(0, 40), eps = 0.01, delta = 0.01),
               class = "kb_error_arg", regexp = "'prior_weights' must have a positive sum")
  expect_error(kbr(d$x, d$y, prior_weights = c(-1, rep(0.01, 39)), eps = 0.01,
                   delta = 0.01),
               class = "kb_error_arg", regexp = "'prior_weights'.*sum to -0.61")
})

# ---- warnings and numerical errors -------------------------------------------

test_that("an observation far from all training y gives a warning", {
  d <- kbr_toy_1d(50, 113)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 0.1)
  expect_warning(W <- predict(fit, c(0, 100)), "far from all training y")
  expect_warning(predict(fit, c(0, 100)), "number 2")
  expect_true(all(is.na(W[, 2])))       # no posterior (issue 33)
  expect_warning(posterior_mean(fit, 100), "far from all training y")
  lr <- kbr(d$x, d$y, eps = 0.01, delta = 0.1, rank = 10)
  expect_warning(predict(lr, -100), "far from all training y")
  expect_no_warning(predict(fit, c(-1, 0, 1)))
  # the threshold is 1e-8 on the largest kernel value: exp(-r / 2) = 1e-8 at
  # a distance s sqrt(2 log(1e8)) beyond the largest training y
  s <- ref_med_bw(d$y)
  edge <- max(d$y) + s * sqrt(2 * log(1e8))
  expect_warning(predict(fit, edge + 0.01 * s), "far from all training y")
  expect_no_warning(predict(fit, edge - 0.01 * s))
})

test_that("a Gram matrix that is not positive definite names eps (or delta)", {
  set.seed(114)
  x <- rep(rnorm(10), 2)                 # duplicated rows: G_X singular
  y <- rnorm(20)
  expect_error(kbr(x, y, eps = 1e-300, delta = 0.1), "eps")
  expect_error(kbr(x, y, eps = 1e-300, delta = 0.1),
               "not positive definite; increase 'eps'", fixed = TRUE)
  expect_error(kbr(x, y, eps = 1e-300, delta = 0.1, method = "iw"),
               "increase 'eps'", fixed = TRUE)
  expect_error(kbr_filter(c(x, 0), c(y, 0), 1:3, eps = 1e-300),
               "increase 'eps'", fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1e-300, delta = 1),
                      folds = 2), "increase 'eps'", fixed = TRUE)
  # duplicated y with a negligible delta: the second solve names delta
  x <- rnorm(30)
  y <- c(rep(0, 10), rnorm(20))
  expect_error(kbr(x, y, eps = 0.01, delta = 1e-300, method = "iw"),
               "increase 'delta'", fixed = TRUE)
  expect_error(kbr(x, y, eps = 0.01, delta = 1e-300, method = "kbr"),
               "increase 'delta'", fixed = TRUE)
})

test_that("a failed factorisation on the full path is a classed numeric error naming the regulariser", {
  set.seed(21)
  x <- rnorm(200)
  y <- x + rnorm(200, sd = 0.5)
  expect_error(kbr(x, y, eps = 1e-2, delta = 1e-20, method = "iw"),
               class = "kb_error_numeric",
               regexp = "not positive definite; increase 'delta' \\(LAPACK dpotrf")
  # the low-rank path gives the accurate answer there (measured 0.962)
  p <- posterior_mean(kbr(x, y, eps = 1e-2, delta = 1e-20, method = "iw",
                          rank = 50), 1)
  expect_lt(abs(p - 0.962166), 1e-4)
})

# ---- bad input ---------------------------------------------------------------

test_that("kbr() rejects bad input with messages naming the argument", {
  d <- kbr_toy_1d(30, 115)
  x <- d$x
  y <- d$y
  expect_error(kbr(x, y[-1]), "'y' must have as many rows as x (30); it has 29",
               fixed = TRUE)
  expect_error(kbr(c(x[-1], NA), y), "'x' must not contain NA")
  expect_error(kbr(x, c(y[-1], Inf)), "'y' must not contain NA")
  expect_error(kbr(x, y, prior = c(1, NaN)), "'prior' must not contain NA")
  expect_error(kbr(x, y, prior = cbind(x, x)), "'prior' must have 1 columns")
  expect_error(kbr(x, y, eps = -1), "'eps' must be in (0", fixed = TRUE)
  expect_error(kbr(x, y, eps = 0), "'eps'", fixed = TRUE)
  expect_error(kbr(x, y, delta = -1), "'delta' must be in (0", fixed = TRUE)
  expect_error(kbr(x, y, delta = NA), "'delta' must be a single finite number",
               fixed = TRUE)
  expect_error(kbr(x, y, eps = Inf), "'eps'", fixed = TRUE)
  # (eps and delta given, so that no default cross-validation runs first)
  ok <- list(x = x, y = y, eps = 0.01, delta = 0.1)
  expect_error(do.call(kbr, c(ok, rank = 0)),
               "'rank' must be a single whole number >= 1", fixed = TRUE)
  expect_error(do.call(kbr, c(ok, rank = 31)), "'rank' must be at most 30",
               fixed = TRUE)
  expect_error(do.call(kbr, c(ok, rank = 2.5)), "'rank'", fixed = TRUE)
  expect_error(do.call(kbr, c(ok, tol = -1)), "'tol'", fixed = TRUE)
  expect_error(kbr(x, y, prior_weights = rep(0.25, 4)),
               "'prior_weights' must be 30 finite numbers", fixed = TRUE)
  expect_error(kbr(x, y, prior = rnorm(5), prior_weights = rep(0.2, 4)),
               "'prior_weights' must be 5 finite numbers", fixed = TRUE)
  expect_error(kbr(x, y, prior_weights = c(NA, rep(1 / 29, 29))),
               "'prior_weights'", fixed = TRUE)
  expect_error(do.call(kbr, c(ok, list(kernel_x = imq_kernel()))),
               "'kernel_x' must be a Gaussian kernel", fixed = TRUE)
  expect_error(do.call(kbr, c(ok, list(kernel_y = imq_kernel()))),
               "'kernel_y' must be a Gaussian kernel", fixed = TRUE)
  expect_error(do.call(kbr, c(ok, kernel_y = "gaussian")), "'kernel_y'",
               fixed = TRUE)
  expect_error(kbr(x, y, method = "foo"), "'method' must be one of",
               fixed = TRUE)
})

test_that("predict() and the posterior helpers reject bad input", {
  d <- kbr_toy_1d(30, 115)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 0.1)
  fit2 <- kbr(cbind(d$x, d$x^2), cbind(d$y, -d$y), eps = 0.01, delta = 0.1)
  expect_error(predict(fit, cbind(1, 2)),
               "'newdata' must have 1 columns (the dimension of y); it has 2",
               fixed = TRUE)
  expect_error(predict(fit2, c(1, 2, 3)), "'newdata' must have 2 columns",
               fixed = TRUE)
  expect_error(posterior_mean(fit2, 1), "'newdata' must have 2 columns",
               fixed = TRUE)
  expect_error(preimage(fit2, cbind(1, 2, 3)), "'newdata'", fixed = TRUE)
  expect_error(posterior_mean(fit, c(0, NA)), "'newdata' must not contain NA",
               fixed = TRUE)
  expect_error(posterior_mean(list(), 1), "'fit' must be a kbr() fit",
               fixed = TRUE)
  expect_error(posterior_expect(fit, 1, "a"), "'f' must be a function",
               fixed = TRUE)
  expect_error(posterior_expect(fit, 1, function(x) NA), "'f' must return",
               fixed = TRUE)
  expect_error(preimage(fit, 1, max_iter = 0), "'max_iter'", fixed = TRUE)
  expect_error(preimage(fit, 1, tol = -1), "'tol'", fixed = TRUE)
})

test_that("kbr() checks sizes before allocating Gram matrices", {
  d <- kbr_toy_1d(200, 122)
  withr_opt <- options(kernbayes.max_memory = 1e6)
  on.exit(options(withr_opt), add = TRUE)
  expect_error(kbr(d$x, d$y, eps = 0.1, delta = 0.1), class = "kb_error_arg",
               regexp = "'x' is too large: kbr\\(\\) with 200 points on the full path would need 1.5 MB of memory, more than 976.6 KB.*'rank'")
  # no cross-validation message either: the size is checked first
  expect_error(expect_silent(try(kbr(d$x, d$y), silent = TRUE)), NA)
  # the low-rank path fits in the limit
  expect_s3_class(kbr(d$x, d$y, eps = 0.1, delta = 0.1, rank = 20), "kb_kbr")
  options(kernbayes.max_memory = "a")
  expect_error(kbr(d$x, d$y, eps = 0.1, delta = 0.1), class = "kb_error_arg",
               regexp = "'kernbayes.max_memory'")
})

test_that("kbr() blames the data's scale, a tolerance that leaves no column, and an edited fit", {
  set.seed(124)
  x <- rnorm(20)
  y <- x + rnorm(20, sd = 0.5)
  # squared distances that overflow: the data's scale is named
  expect_error(kbr(x * 1e300, y, eps = 0.1, delta = 0.1), class = "kb_error_arg",
               regexp = "'x' has values up to .*e\\+300: squared distances would overflow")
  expect_error(kbr_filter(x, y * 1e300, 1), class = "kb_error_arg",
               regexp = "'y_train' has values up to")
  # tol = 1 would leave no column
  expect_error(kbr(x, y, eps = 0.1, delta = 0.1, rank = 5, tol = 1),
               class = "kb_error_arg", regexp = "'tol' must be in \\[0, 1\\)")
  expect_error(kbr(x, rep(2, 20), eps = 0.1, delta = 0.1), class = "kb_error_arg",
               regexp = "'kernel_y' uses the median heuristic, which fails on 'y' \\(.*; it has too few distinct rows\\)")
  for (rank in list(NULL, 10)) {
    fit <- kbr(x, y, eps = 0.1, delta = 0.1, rank = rank)
    for (field in c("mu", "gy", "B", "method", "x")) {
      if (is.null(fit[[field]])) next
      bad <- fit
      bad[[field]] <- NULL
      expect_error(predict(bad, 1), class = "kb_error_state",
                   regexp = sprintf("'object' is not a kbr\\(\\) fit .* field '%s'", field))
    }
    bad <- fit
    bad$mu <- bad$mu[-1]
    expect_error(posterior_mean(bad, 1), class = "kb_error_state",
                 regexp = "'fit' .* field 'mu'")
  }
})

# ---- print -------------------------------------------------------------------

test_that("print method for kb_kbr", {
  d <- kbr_toy_1d(40, 116)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 0.1)
  # different ranks for x and y (a wide x bandwidth has a lower numerical rank)
  lr <- kbr(d$x, d$y, eps = 0.01, delta = 0.1, method = "iw", rank = 20,
            kernel_x = gaussian_kernel(bandwidth = 3))
  expect_identical(c(lr$rank_x, lr$rank_y), c(6L, 11L))
  expect_snapshot({
    fit
    lr
  })
  out <- utils::capture.output(vis <- withVisible(print(fit)))
  expect_false(vis$visible)
  expect_identical(vis$value, fit)
})

# ---- a posterior you can read (issue 33) -------------------------------------

fresh_kbr_deprecations <- function() {
  rm(list = ls(kernbayes:::deprecation_seen),
     envir = kernbayes:::deprecation_seen)
}

test_that("predict(newdata =): the training y by default; y_new is a deprecated alias", {
  d <- kbr_toy_1d(60, 331)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 1e-3)
  ref <- ref_kbr(d$x, d$y, d$y, sx = ref_med_bw(d$x), sy = ref_med_bw(d$y),
                 eps = 0.01, delta = 1e-3)
  expect_lt(rel_err(predict(fit), ref$W), 1e-10)
  expect_identical(predict(fit), predict(fit, newdata = d$y))
  yn <- c(-1, 0.2, 1.5)
  W <- predict(fit, newdata = yn)
  expect_identical(predict(fit, yn), W)
  for (f in c("predict", "posterior_mean", "posterior_sd", "posterior_ci",
              "preimage")) {
    fresh_kbr_deprecations()
    fun <- if (f == "predict") function(...) predict(fit, ...) else
      function(...) get(f)(fit, ...)
    expect_message(old <- fun(y_new = yn),
                   sprintf("%s\\(\\): argument 'y_new' is deprecated; use 'newdata'", f),
                   class = "kb_deprecated")
    expect_identical(old, fun(newdata = yn))
    expect_no_message(fun(y_new = yn))
    expect_error(fun(newdata = yn, y_new = yn), class = "kb_error_arg",
                 regexp = "'y_new' is the old name of 'newdata'")
  }
  fresh_kbr_deprecations()
  expect_message(old <- posterior_expect(fit, y_new = yn, f = function(x) x^2),
                 "posterior_expect\\(\\): argument 'y_new'", class = "kb_deprecated")
  expect_identical(old, posterior_expect(fit, yn, function(x) x^2))
})

test_that("posterior_expect(): probabilities in [0, 1] over a grid; the signed estimator as before", {
  d <- kbr_toy_1d(300, 332)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 1e-4)
  yg <- seq(-2.5, 2.5, length.out = 41)
  ind <- function(x) as.numeric(x > 0)
  p <- posterior_expect(fit, yg, ind)
  expect_identical(dim(p), c(41L, 1L))
  expect_true(all(p >= 0 & p <= 1))
  # the signed weights leave [0, 1] on this toy (the issue's complaint)
  ps <- posterior_expect(fit, yg, ind, weights = "signed")
  expect_gt(max(ps), 1.04)
  # ... and are exactly the weights times f, as before; against solve()
  W <- predict(fit, yg)
  expect_identical(ps, crossprod(W, ind(d$x)))
  ref <- ref_kbr(d$x, d$y, yg, sx = ref_med_bw(d$x), sy = ref_med_bw(d$y),
                 eps = 0.01, delta = 1e-4)
  expect_lt(rel_err(ps, crossprod(ref$W, ind(d$x))), 1e-9)
  # the nonnegative weights are the projections of the signed ones
  Wn <- predict(fit, yg, weights = "nonnegative")
  for (q in seq_along(yg)) {
    v <- ref_simplex_proj(W[, q])
    expect_lt(max(abs(Wn[, q] - v)), 1e-12)
    expect_equal(p[q, 1], sum(v * ind(d$x)), tolerance = 1e-10)
  }
  expect_true(all(Wn >= 0))
  expect_equal(colSums(Wn), rep(1, 41), tolerance = 1e-12)
  # both estimate P(X > 0 | y) = pnorm(0.8 y / sqrt(0.2)) on this toy
  exact <- stats::pnorm(0.8 * yg / sqrt(0.2))
  expect_lt(sqrt(mean((p - exact)^2)), 0.06)     # 0.042 (signed: 0.069)
  # bounded vector-valued f: each coordinate stays within f's range
  pe <- posterior_expect(fit, yg, function(x) c(x > 1, x < -1, 0.5))
  expect_true(all(pe >= 0 & pe <= 1))
  expect_equal(pe[, 3], rep(0.5, 41), tolerance = 1e-12)
  expect_error(posterior_expect(fit, yg, ind, weights = "positive"),
               class = "kb_error_arg", regexp = "'weights'")
})

test_that("posterior_sd() and posterior_ci() agree with plain-R weighted formulas (1-d and 2-d x)", {
  set.seed(333)
  for (dx in 1:2) {
    n <- 80
    x <- matrix(rnorm(n * dx), n)
    y <- x[, 1] + rnorm(n, sd = 0.5)
    fit <- kbr(x, y, eps = 0.01, delta = 1e-3)
    yn <- c(-1, 0, 0.7)
    ref <- ref_kbr(x, y, yn, sx = ref_med_bw(x), sy = ref_med_bw(y),
                   eps = 0.01, delta = 1e-3)
    s <- posterior_sd(fit, yn)
    iv <- posterior_ci(fit, yn, level = 0.9)
    iv95 <- posterior_ci(fit, yn)
    expect_identical(dim(s), c(3L, dx))
    expect_identical(dim(iv$lower), c(3L, dx))
    expect_identical(iv$level, 0.9)
    for (q in 1:3) {
      v <- ref_simplex_proj(ref$W[, q])
      for (k in seq_len(dx)) {
        m <- sum(v * x[, k])
        expect_equal(s[q, k], sqrt(sum(v * (x[, k] - m)^2)), tolerance = 1e-8)
        expect_identical(iv$lower[q, k], ref_wquantile(x[, k], v, 0.05))
        expect_identical(iv$upper[q, k], ref_wquantile(x[, k], v, 0.95))
        expect_identical(iv95$lower[q, k], ref_wquantile(x[, k], v, 0.025))
        expect_lte(iv95$lower[q, k], iv$lower[q, k])
        expect_gte(iv95$upper[q, k], iv$upper[q, k])
      }
    }
    expect_equal(unname(posterior_mean(fit, yn, weights = "nonnegative")),
                 unname(crossprod(apply(ref$W, 2, ref_simplex_proj), x)),
                 tolerance = 1e-8)
  }
  expect_error(posterior_ci(fit, 1, level = 1), class = "kb_error_arg",
               regexp = "'level'")
  expect_error(posterior_ci(fit, 1, level = NA), class = "kb_error_arg",
               regexp = "'level'")
})

test_that("a far observation gives NA with a warning in every posterior function", {
  d <- kbr_toy_1d(50, 334)
  for (rank in list(NULL, 20)) {
    fit <- kbr(d$x, d$y, eps = 0.01, delta = 1e-3, rank = rank)
    yn <- c(0.5, 100)
    far <- "far from all training y .* its results are NA"
    expect_warning(W <- predict(fit, yn), far)
    expect_true(all(is.na(W[, 2])) && all(is.finite(W[, 1])))
    expect_warning(Wn <- predict(fit, yn, weights = "nonnegative"), far)
    expect_true(all(is.na(Wn[, 2])) && all(is.finite(Wn[, 1])))
    checks <- list(
      posterior_mean = function() posterior_mean(fit, yn),
      posterior_expect = function() posterior_expect(fit, yn, function(x) x > 0),
      posterior_expect_signed = function() posterior_expect(fit, yn, function(x) x > 0,
                                                            weights = "signed"),
      posterior_sd = function() posterior_sd(fit, yn),
      preimage = function() preimage(fit, yn))
    for (nm in names(checks)) {
      expect_warning(v <- checks[[nm]](), far, label = nm)
      expect_true(is.na(v[2, 1]) && is.finite(v[1, 1]), label = nm)
    }
    expect_warning(iv <- posterior_ci(fit, yn), far)
    expect_true(is.na(iv$lower[2, 1]) && is.na(iv$upper[2, 1]) &&
                  is.finite(iv$lower[1, 1]))
  }
})

test_that("newdata of the wrong dimension is a classed error naming newdata", {
  set.seed(335)
  x <- matrix(rnorm(80), 40)
  y <- x + matrix(rnorm(80, sd = 0.5), 40)
  fit <- kbr(x, y, eps = 0.01, delta = 1e-3)
  bad <- matrix(0, 2, 3)
  expect_error(predict(fit, bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(posterior_mean(fit, bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(posterior_expect(fit, bad, function(x) 1), class = "kb_error_arg",
               regexp = "'newdata'")
  expect_error(posterior_sd(fit, bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(posterior_ci(fit, bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(preimage(fit, bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(summary(fit, newdata = bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(plot(fit, newdata = bad), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(predict(fit, c(1, NA)), class = "kb_error_arg", regexp = "'newdata'")
  expect_error(predict(fit, 1, weights = "x"), class = "kb_error_arg", regexp = "'weights'")
})

test_that("summary() of a KBR fit: settings, how chosen, Kish sizes and negative weight from the formulas", {
  d <- kbr_toy_1d(80, 336)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 1e-4)
  yn <- c(-1, 0, 1)
  s <- summary(fit, newdata = yn)
  expect_s3_class(s, "summary.kb_kbr")
  W <- predict(fit, yn)
  expect_equal(s$ess, colSums(W)^2 / colSums(W^2), tolerance = 1e-12)
  V <- apply(W, 2, ref_simplex_proj)
  expect_equal(s$ess_nonnegative, 1 / colSums(V^2), tolerance = 1e-8)
  expect_equal(s$negative_share, colSums(pmax(-W, 0)) / colSums(abs(W)),
               tolerance = 1e-12)
  expect_equal(s$negative_count, colMeans(W < 0))
  expect_true(all(s$negative_share > 0 & s$negative_share < 0.5))
  expect_identical(s$at, "newdata")
  expect_identical(s$tuning$chosen, c(eps = FALSE, delta = FALSE))
  expect_output(print(s), "eps = 0.01 \\(given\\), delta = 1e-04 \\(given\\); both given by the user")
  expect_output(print(s), "effective number of points")
  expect_output(print(s), "share of negative weight")
  # at the training y by default (all 80)
  s0 <- summary(fit)
  expect_identical(s0$n_obs, 80L)
  expect_equal(s0$ess, colSums(predict(fit))^2 / colSums(predict(fit)^2),
               tolerance = 1e-12)
  # chosen by the cross-validation: recorded and printed
  fc <- suppressMessages(kbr(d$x, d$y, delta = 1e-4))
  sc <- summary(fc)
  expect_identical(sc$tuning$chosen, c(eps = TRUE, delta = FALSE))
  expect_output(print(sc), paste0("eps = [^ ]+ \\(chosen\\), delta = 1e-04 \\(given\\); ",
                                  "chosen by 5-fold CV on all points: delta by the ",
                                  "regression criterion, eps by the marginal"))
  # a far observation is counted
  s2 <- suppressWarnings(summary(fit, newdata = c(0, 100)))
  expect_identical(s2$n_far, 1L)
  expect_output(print(s2), "1 far")
  expect_error(print(structure(list(), class = "summary.kb_kbr")),
               class = "kb_error_arg", regexp = "'x'")
  expect_error(summary(modifyList(fit, list(mu = 1))), class = "kb_error_state")
})

test_that("plot method for kb_kbr draws 1-d, 2-d and 3-d states and returns invisibly", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  d <- kbr_toy_1d(60, 337)
  fit <- kbr(d$x, d$y, eps = 0.01, delta = 1e-3)
  expect_invisible(plot(fit))
  expect_invisible(plot(fit, newdata = 1))
  expect_invisible(suppressWarnings(plot(fit, newdata = 100)))
  old_fit <- fit
  old_fit$prior <- NULL                 # a fit made before the prior was kept
  expect_invisible(plot(old_fit))
  set.seed(338)
  for (dx in 2:3) {
    x <- matrix(rnorm(60 * dx), 60)
    y <- x[, 1:2] + matrix(rnorm(120, sd = 0.5), 60)
    f2 <- kbr(x, y, prior = matrix(rnorm(30 * dx), 30), eps = 0.01, delta = 1e-3)
    expect_invisible(plot(f2, newdata = c(0.5, 0), coord = dx))
  }
  expect_error(plot(f2, coord = 4), class = "kb_error_arg", regexp = "'coord'")
  expect_error(plot(modifyList(fit, list(x = 1))), class = "kb_error_state")
})
