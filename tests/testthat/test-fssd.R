# The FSSD test (R/fssd.R): statistic against a plain-R transcription of
# the paper's pairwise formula, null eigenvalues and simulation, the power
# criterion and its gradient (finite differences), the optimisation, level
# and power, seeds, inputs.

# Plain R from Jitkrittum et al. (2017), eqs. for xi and the U-statistic:
# Delta(x, y) = sum_j xi(x, v_j)' xi(y, v_j) / (d J), statistic
# n * 2 / (n (n - 1)) sum_{i < j} Delta(x_i, x_j).
ref_fssd_stat <- function(x, s, V, h) {
  n <- nrow(x)
  d <- ncol(x)
  J <- nrow(V)
  xi <- function(i, j) {
    diff <- x[i, ] - V[j, ]
    kv <- exp(-sum(diff^2) / (2 * h^2))
    s[i, ] * kv - diff / h^2 * kv
  }
  feats <- lapply(seq_len(n), function(i) lapply(seq_len(J), function(j) xi(i, j)))
  tot <- 0
  for (i in 1:(n - 1)) for (k in (i + 1):n) {
    delta <- 0
    for (j in seq_len(J)) delta <- delta + sum(feats[[i]][[j]] * feats[[k]][[j]])
    tot <- tot + delta / (d * J)
  }
  n * 2 / (n * (n - 1)) * tot
}

fssd_data <- function(n, d, seed) {
  set.seed(seed)
  matrix(rnorm(n * d), n, d)
}

test_that("the statistic matches a plain-R transcription of the pairwise formula", {
  for (cfg in list(c(n = 40, d = 1, J = 1), c(n = 35, d = 3, J = 4),
                   c(n = 25, d = 5, J = 2))) {
    x <- fssd_data(cfg[["n"]], cfg[["d"]], 3) * 1.3 + 0.2
    s <- -x
    set.seed(5)
    V <- matrix(rnorm(cfg[["J"]] * cfg[["d"]]), cfg[["J"]])
    for (h in c(0.7, 2.5)) {
      t1 <- fssd_test(x, s, locations = V, bandwidth = h, n_simulate = 10)
      expect_equal(unname(t1$statistic), ref_fssd_stat(x, s, V, h),
                   tolerance = 1e-12)
      expect_equal(unname(t1$estimate) * cfg[["n"]], unname(t1$statistic))
      expect_identical(t1$n, as.integer(cfg[["n"]]))
      expect_equal(t1$locations, V, ignore_attr = TRUE)
      expect_identical(t1$bandwidth, h)
    }
  }
})

test_that("the null is the weighted chi-square of the feature covariance's eigenvalues", {
  x <- fssd_data(60, 2, 8) + 0.1
  s <- -x
  V <- rbind(c(0, 0), c(1, -1), c(-0.5, 2))
  h <- 1.1
  set.seed(21)
  t1 <- fssd_test(x, s, locations = V, bandwidth = h, n_simulate = 400)
  # features from the formula, one point at a time
  tau <- t(apply(cbind(x, s), 1, function(r) {
    xx <- r[1:2]
    ss <- r[3:4]
    unlist(lapply(1:3, function(j) {
      kv <- exp(-sum((xx - V[j, ])^2) / (2 * h^2))
      (ss * kv - (xx - V[j, ]) / h^2 * kv) / sqrt(2 * 3)
    }))
  }))
  ev <- sort(eigen(cov(tau))$values, decreasing = TRUE)
  expect_equal(t1$eigenvalues, ev, tolerance = 1e-10)
  set.seed(21)
  z <- matrix(rnorm(6 * 400), 6, 400)
  null <- colSums(ev * (z^2 - 1))
  expect_equal(t1$null, null, tolerance = 1e-10)
  expect_equal(t1$p.value, (1 + sum(null >= t1$statistic)) / 401)
  # the simulated null has mean 0 and variance 2 sum(ev^2)
  set.seed(2)
  big <- fssd_test(x, s, locations = V, bandwidth = h, n_simulate = 20000)
  expect_lt(abs(mean(big$null)), 4 * sqrt(2 * sum(ev^2) / 20000))
  expect_equal(var(big$null), 2 * sum(ev^2), tolerance = 0.05)
})

test_that("the one-pass C moments agree with the features' formulas over many blocks, on 1 and 2 threads", {
  x <- fssd_data(5003, 3, 12) * 0.8 + 3   # features with a large mean
  s <- -x
  V <- rbind(c(3, 3, 3), c(2, 4, 3.5), c(4, 2, 2))
  h <- 0.9
  tau <- do.call(cbind, lapply(1:3, function(j) {
    D <- sweep(x, 2, V[j, ])
    kv <- exp(-rowSums(D^2) / (2 * h^2))
    (s * kv - D / h^2 * kv) / sqrt(9)
  }))
  n <- 5003
  set.seed(1)
  t1 <- fssd_test(x, s, locations = V, bandwidth = h, n_simulate = 50,
                  nthreads = 1)
  set.seed(1)
  t2 <- fssd_test(x, s, locations = V, bandwidth = h, n_simulate = 50,
                  nthreads = 2)
  expect_identical(t1, t2)
  expect_equal(unname(t1$statistic),
               n * (sum(colSums(tau)^2) -
                      sum(tau^2)) / (n * (n - 1)), tolerance = 1e-11)
  expect_equal(t1$eigenvalues, sort(eigen(cov(tau))$values, TRUE),
               tolerance = 1e-9)
})

test_that("the power criterion matches its formula and its gradient finite differences", {
  x <- fssd_data(50, 3, 9) * c(1, 1.5, 0.7) + 0.3
  s <- -x
  set.seed(4)
  V <- matrix(rnorm(4 * 3), 4, 3)
  h <- 1.3
  reg <- 0.01
  r <- kernbayes:::fssd_criterion(x, s, V, h, reg, gradient = TRUE)
  # value: unbiased FSSD^2 / sqrt(4 mu' Sigma mu + reg), Sigma with divisor n
  tau <- do.call(cbind, lapply(1:4, function(j) {
    D <- sweep(x, 2, V[j, ])
    kv <- exp(-rowSums(D^2) / (2 * h^2))
    (s * kv - D / h^2 * kv) / sqrt(12)
  }))
  n <- 50
  G <- tau %*% t(tau)
  u <- (sum(G) - sum(diag(G))) / (n * (n - 1))
  mu <- colMeans(tau)
  Sig <- cov(tau) * (n - 1) / n
  expect_equal(r$value, u / sqrt(4 * drop(t(mu) %*% Sig %*% mu) + reg),
               tolerance = 1e-12)
  f <- function(V, h) kernbayes:::fssd_criterion(x, s, V, h, reg)$value
  eps <- 1e-5
  num <- V * 0
  for (i in seq_along(V)) {
    Vp <- V
    Vm <- V
    Vp[i] <- Vp[i] + eps
    Vm[i] <- Vm[i] - eps
    num[i] <- (f(Vp, h) - f(Vm, h)) / (2 * eps)
  }
  expect_equal(r$gV, num, tolerance = 1e-6)
  expect_equal(r$gh, (f(V, h + eps) - f(V, h - eps)) / (2 * eps),
               tolerance = 1e-6)
})

test_that("opt chooses on a training split, improves the criterion and tests the rest", {
  tg <- gaussian_target(c(0, 0))
  set.seed(3)
  x <- sample_target(tg, 300)
  y <- cbind(x[, 1], x[, 2] / 2)
  set.seed(10)
  t1 <- fssd_test(y, tg, n_locations = 4, train_frac = 0.3)
  expect_s3_class(t1, "htest")
  expect_s3_class(t1, "kb_fssd_test")
  expect_length(t1$train, 90)
  expect_identical(t1$n, 210L)
  expect_identical(dim(t1$locations), c(4L, 2L))
  expect_gte(t1$criterion[["optimum"]], t1$criterion[["start"]])
  expect_lt(t1$p.value, 0.01)
  # the statistic is the test rows' statistic at the chosen locations
  rest <- y[-t1$train, ]
  expect_equal(unname(t1$statistic),
               ref_fssd_stat(rest, -rest, t1$locations, t1$bandwidth),
               tolerance = 1e-10)
  m <- kernbayes:::median_distance(y[t1$train, ])
  expect_true(t1$bandwidth >= m / 10 - 1e-12 && t1$bandwidth <= 10 * m + 1e-12)
  # reproducible; a fixed bandwidth is kept
  set.seed(10)
  expect_identical(fssd_test(y, tg, n_locations = 4, train_frac = 0.3), t1)
  t2 <- fssd_test(y, tg, n_locations = 4, bandwidth = 0.8)
  expect_identical(t2$bandwidth, 0.8)
  # rand: whole sample, median bandwidth
  t3 <- fssd_test(y, tg, locations = "rand")
  expect_identical(t3$n, 300L)
  expect_null(t3$train)
  expect_equal(t3$bandwidth, kernbayes:::median_distance(y))
  expect_output(print(t1), "rows chose the locations")
  pdf(NULL)
  on.exit(dev.off())
  expect_identical(plot(t1), t1)
  # hist() arguments pass through and override the defaults
  expect_identical(plot(t1, main = "mine", xlab = "T", col = "blue"), t1)
  k1 <- ksd_test(y, tg, n_boot = 20, progress = FALSE)
  expect_identical(plot(k1, main = "mine", xlab = "T", breaks = 10), k1)
})

test_that("level under the null is near 0.05 (opt and rand, N(0, I_2), n = 100)", {
  skip_on_cran()
  tg <- gaussian_target(c(0, 0))
  for (mode in c("opt", "rand")) {
    set.seed(100)
    p <- replicate(300, fssd_test(matrix(rnorm(200), 100, 2), tg,
                                  n_locations = 5, locations = mode,
                                  n_simulate = 500)$p.value)
    rate <- mean(p <= 0.05)
    expect_gte(rate, 0.015, label = mode)
    expect_lte(rate, 0.095, label = mode)
    # p-values roughly uniform
    expect_gt(suppressWarnings(ks.test(p, "punif")$p.value), 1e-3)
  }
})

test_that("power: a mean shift and a Student-t sample are rejected", {
  skip_on_cran()
  tg <- gaussian_target(c(0, 0))
  for (mode in c("opt", "rand")) {
    set.seed(200)
    p <- replicate(40, fssd_test(matrix(rnorm(400), 200, 2) + c(1, 0), tg,
                                 n_locations = 5, locations = mode,
                                 n_simulate = 500)$p.value)
    expect_gte(mean(p <= 0.05), 0.9, label = mode)
    set.seed(201)
    p <- replicate(40, fssd_test(matrix(rt(4000, 3), 2000, 2), tg,
                                 n_locations = 5, locations = mode,
                                 n_simulate = 500)$p.value)
    expect_gte(mean(p <= 0.05), 0.8, label = mode)
  }
})

test_that("x and score take targets, closures and draws objects", {
  tg <- gaussian_target(c(1, -1))
  set.seed(6)
  x <- sample_target(tg, 120)
  V <- rbind(c(1, -1), c(0, 0))
  ref <- fssd_test(x, -sweep(x, 2, c(1, -1)), locations = V, n_simulate = 20)
  expect_equal(fssd_test(x, tg, locations = V, n_simulate = 20)$statistic,
               ref$statistic)
  f <- function(p) -(p - c(1, -1))
  expect_equal(fssd_test(x, f, locations = V, n_simulate = 20)$statistic,
               ref$statistic)
  skip_if_not_installed("posterior")
  dr <- posterior::as_draws_matrix(x)
  expect_equal(fssd_test(dr, tg, locations = V, n_simulate = 20)$statistic,
               ref$statistic)
})

test_that("bad input is rejected naming the argument, before the score runs", {
  x <- fssd_data(50, 2, 1)
  called <- FALSE
  f <- function(p) {
    called <<- TRUE
    -p
  }
  err <- function(expr, arg) {
    e <- expect_error(expr, class = "kb_error_arg")
    expect_identical(e$arg, arg)
  }
  err(fssd_test(x, f, n_locations = 0), "n_locations")
  err(fssd_test(x, f, locations = "best"), "locations")
  err(fssd_test(x, f, locations = matrix(0, 2, 3)), "locations")
  err(fssd_test(x, f, locations = matrix(NA_real_, 2, 2)), "locations")
  err(fssd_test(x, f, train_frac = 1), "train_frac")
  err(fssd_test(x, f, train_frac = 0.01), "train_frac")
  err(fssd_test(x, f, bandwidth = -1), "bandwidth")
  err(fssd_test(x, f, n_simulate = 0), "n_simulate")
  err(fssd_test(x, f, reg = -1), "reg")
  err(fssd_test(x, f, max_iter = 1.5), "max_iter")
  err(fssd_test(x, "a"), "score")
  err(fssd_test(x[1, , drop = FALSE], f, locations = "rand"), "x")
  err(fssd_test(matrix(1, 10, 2), f, locations = "rand"), "x")
  expect_false(called)
  expect_error(fssd_test(x, function(p) p * NA), class = "kb_error_callback")
})

test_that("an FSSD test's table and summary", {
  set.seed(12)
  tg <- gaussian_target(c(0, 0))
  ft <- fssd_test(sample_target(tg, 200), tg, n_locations = 2, max_iter = 5)
  df <- as.data.frame(ft)
  expect_identical(names(df), c("n", "statistic", "estimate", "J", "p_value",
                                "method"))
  expect_identical(df$p_value, ft$p.value)
  expect_identical(summary(ft), df)
})
