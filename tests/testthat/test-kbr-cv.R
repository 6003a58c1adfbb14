# Cross-validation for kernel Bayes' rule (R/kbr-cv.R): the criteria against
# plain-R RKHS formulas (helper-reference.R), the tuning kbr() runs when
# eps or delta is NULL, the Gaussian toy with a closed-form posterior,
# futures, errors, print and plot.

# ---- criteria ----------------------------------------------------------------

test_that("kbr_cv() criterion agrees with the RKHS formula; best, fit, RNG state", {
  d <- kbr_toy_1d(45, 112)
  grid <- expand.grid(eps = c(1e-3, 1e-2), delta = c(0.1, 1))
  grid$sigma_x <- c(NA, NA, 0.5, 0.5)
  grid$sigma_y <- c(NA, 0.8, NA, 0.8)
  for (method in c("kbr", "iw")) {
    set.seed(99)
    before <- .Random.seed
    cv <- kbr_cv(d$x, d$y, grid = grid, folds = 3, method = method, seed = 7)
    expect_identical(.Random.seed, before)
    set.seed(7)
    fold <- sample(rep_len(1:3, 45))
    x <- matrix(d$x)
    y <- matrix(d$y)
    ref <- numeric(nrow(grid))
    for (g in seq_len(nrow(grid))) {
      sx <- if (is.na(grid$sigma_x[g])) ref_med_bw(x) else grid$sigma_x[g]
      sy <- if (is.na(grid$sigma_y[g])) ref_med_bw(y) else grid$sigma_y[g]
      for (a in 1:3) {
        tr <- fold != a
        te <- fold == a
        W <- ref_kbr(x[tr, , drop = FALSE], y[tr, , drop = FALSE],
                     y[te, , drop = FALSE], sx = sx, sy = sy,
                     eps = grid$eps[g], delta = grid$delta[g],
                     method = method)$W
        wbar <- rowMeans(W)
        Gtr <- ref_gauss_gram(x[tr, ], x[tr, ], sx)
        ref[g] <- ref[g] + sum(wbar * (Gtr %*% wbar)) -
          2 * sum(wbar * rowMeans(ref_gauss_gram(x[tr, ], x[te, ], sx))) +
          mean(ref_gauss_gram(x[te, ], x[te, ], sx))
      }
    }
    expect_lt(rel_err(cv$table$criterion, ref), 1e-10)
    b <- which.min(ref)
    expect_equal(cv$best$eps, grid$eps[b])
    expect_equal(cv$best$delta, grid$delta[b])
    expect_s3_class(cv$fit, "kb_kbr")
    expect_identical(cv$fit$method, method)
    expect_equal(c(cv$fit$eps, cv$fit$delta), c(grid$eps[b], grid$delta[b]))
    sx <- if (is.na(grid$sigma_x[b])) ref_med_bw(x) else grid$sigma_x[b]
    sy <- if (is.na(grid$sigma_y[b])) ref_med_bw(y) else grid$sigma_y[b]
    expect_lt(rel_err(predict(cv$fit, c(-1, 1)),
                      ref_kbr(x, y, c(-1, 1), sx = sx, sy = sy,
                              eps = grid$eps[b], delta = grid$delta[b],
                              method = method)$W), 1e-10)
  }
  # the default grid: eps 1e-3..1e-1 by delta 1e-7..1
  cv <- kbr_cv(d$x, d$y, folds = 2)
  expect_identical(nrow(cv$table), 24L)
  expect_equal(sort(unique(cv$table$eps)), 10^(-3:-1))
  expect_equal(sort(unique(cv$table$delta)), 10^(-7:0))
  expect_output(print(cv), "marginal criterion")
  expect_true(all(is.finite(cv$table$criterion)))
  # ... passes on to the final fit
  cv2 <- kbr_cv(d$x, d$y, grid = grid[1:2, 1:2], folds = 2, rank = 5)
  expect_identical(cv2$fit$rank, 5L)
})

test_that("kbr_cv(criterion = \"regression\") agrees with the held-out RKHS loss", {
  d <- kbr_toy_1d(40, 116)
  grid <- expand.grid(eps = c(1e-3, 1e-1), delta = c(1e-3, 0.1))
  x <- matrix(d$x)
  y <- matrix(d$y)
  sx <- ref_med_bw(x)
  sy <- ref_med_bw(y)
  for (method in c("kbr", "iw")) {
    cv <- kbr_cv(d$x, d$y, grid = grid, folds = 4, method = method,
                 criterion = "regression", seed = 3, refit = FALSE)
    expect_null(cv$fit)
    expect_identical(cv$criterion, "regression")
    set.seed(3)
    fold <- sample(rep_len(1:4, 40))
    ref <- numeric(nrow(grid))
    for (g in seq_len(nrow(grid))) for (a in 1:4) {
      tr <- fold != a
      W <- ref_kbr(x[tr, , drop = FALSE], y[tr, , drop = FALSE],
                   y[!tr, , drop = FALSE], sx = sx, sy = sy,
                   eps = grid$eps[g], delta = grid$delta[g],
                   method = method)$W
      Gtr <- ref_gauss_gram(x[tr, , drop = FALSE], x[tr, , drop = FALSE], sx)
      Kte <- ref_gauss_gram(x[tr, , drop = FALSE], x[!tr, , drop = FALSE], sx)
      # sum over held-out j of ||sum_i W_ij k(., X_i) - k(., X_j)||^2
      for (j in seq_len(ncol(W))) {
        ref[g] <- ref[g] + (sum(W[, j] * (Gtr %*% W[, j])) -
                              2 * sum(W[, j] * Kte[, j]) + 1) / 40
      }
    }
    expect_lt(rel_err(cv$table$criterion, ref), 1e-10)
    expect_identical(which.min(cv$table$criterion), which.min(ref))
  }
  expect_error(kbr_cv(d$x, d$y, criterion = "mse"), "'criterion'")
})

# The "kbr" criterion of every grid row from a regularised solve per fold
# and setting (plain R, the formulas of R/kbr-cv.R's per-setting path).
cv_direct_ref <- function(Gx, Gy, fold, grid, crit, method = "kbr") {
  n <- length(fold)
  ref <- numeric(nrow(grid))
  for (g in seq_len(nrow(grid))) for (a in sort(unique(fold))) {
    tr <- fold != a
    te <- !tr
    mu <- ref_kbr_mu(Gx[tr, tr], rowMeans(Gx[tr, tr]), grid$eps[g])
    W <- ref_kbr_R(Gy[tr, tr], mu, grid$delta[g], method) %*% Gy[tr, te]
    if (crit == "marginal") {
      wbar <- rowMeans(W)
      ref[g] <- ref[g] + sum(wbar * (Gx[tr, tr] %*% wbar)) -
        2 * sum(wbar * rowMeans(Gx[tr, te])) + mean(Gx[te, te])
    } else {
      ref[g] <- ref[g] + (sum(W * (Gx[tr, tr] %*% W)) -
                            2 * sum(W * Gx[tr, te]) + sum(te)) / n
    }
  }
  ref
}

test_that("kbr_cv(method = \"kbr\") equals the direct solves at full and low numerical rank", {
  # The "kbr" path evaluates every (eps, delta) of a fold from pivoted
  # Cholesky factors and one eigen-decomposition per eps (src/kbr.c,
  # kb_kbr_cv_fold).  Three regimes of the training Gram matrices' numerical
  # rank r (of n_tr): full (d = 5: r = n_tr, mu by Cholesky of G_X), between
  # n_tr / 2 and n_tr (d = 2: truncated factors, mu by Cholesky), and low (d = 1: r << n_tr, mu by Woodbury on
  # the factor); both criteria; a grid that is not a product (and one
  # delta that appears with one eps only).
  grid <- data.frame(eps = c(1e-3, 1e-3, 1e-3, 1e-2, 0.1, 0.1),
                     delta = c(1e-5, 1e-3, 1, 1e-3, 1e-5, 0.1))
  for (cfg in list(c(d = 5, n = 60), c(d = 2, n = 150), c(d = 1, n = 120))) {
    set.seed(cfg[["n"]] + cfg[["d"]])
    n <- cfg[["n"]]
    x <- matrix(stats::rnorm(n * cfg[["d"]]), n)
    y <- x + matrix(stats::rnorm(n * cfg[["d"]], sd = 0.5), n)
    sx <- ref_med_bw(x)
    sy <- ref_med_bw(y)
    Gx <- ref_gauss_gram(x, x, sx)
    Gy <- ref_gauss_gram(y, y, sy)
    set.seed(5)
    fold <- sample(rep_len(1:3, n))
    ev <- eigen(Gx[fold != 1, fold != 1], symmetric = TRUE, only.values = TRUE)$values
    r <- sum(ev > 1e-13 * ev[1])
    if (cfg[["d"]] == 5) expect_identical(r, sum(fold != 1))
    if (cfg[["d"]] == 2) expect_true(r > sum(fold != 1) / 2 && r < sum(fold != 1))
    if (cfg[["d"]] == 1) expect_lt(r, sum(fold != 1) / 2)
    for (crit in c("regression", "marginal")) {
      cv <- kbr_cv(x, y, grid = grid, folds = 3, seed = 5, criterion = crit,
                   refit = FALSE)
      ref <- cv_direct_ref(Gx, Gy, fold, grid, crit)
      expect_lt(rel_err(cv$table$criterion, ref), 1e-9)
      expect_identical(which.min(cv$table$criterion), which.min(ref))
    }
  }
})

test_that("kbr_cv(method = \"kbr\") equals the direct solves when G_Y has rank 1 or 2", {
  # The eigen-decomposition of the r x r T = P' L P (src/linalg.c,
  # kb_eigen_rrr_t): r = 1 goes through dsyevr itself, r = 2 through the
  # tridiagonal reduction, dstemr and the back-transformation from the
  # right.  y takes one value (G_Y = 1 1') or two.
  grid <- data.frame(eps = c(1e-3, 1e-2, 0.1), delta = c(1e-4, 1e-2, 1),
                     sigma_y = 1)
  set.seed(11)
  n <- 40
  x <- matrix(stats::rnorm(2 * n), n)
  sx <- ref_med_bw(x)
  Gx <- ref_gauss_gram(x, x, sx)
  set.seed(5)
  fold <- sample(rep_len(1:3, n))
  ys <- list(matrix(0.3, n, 2), cbind(rep(c(-1, 1), length.out = n), 0))
  for (y in ys) {
    Gy <- ref_gauss_gram(y, y, 1)
    for (crit in c("regression", "marginal")) {
      cv <- kbr_cv(x, y, grid = grid, folds = 3, seed = 5, criterion = crit,
                   refit = FALSE)
      ref <- cv_direct_ref(Gx, Gy, fold, grid, crit)
      expect_lt(rel_err(cv$table$criterion, ref), 1e-9)
    }
  }
})

test_that("kbr_cv(method = \"iw\") equals the direct solves on both of its paths, at every rank", {
  skip_on_cran()
  # kbr_cv()'s search on one bandwidth setting, 3 folds, 1 thread
  cv_grid <- function(Gx, Gy, fold, grid, crit, path) {
    kernbayes:::kbr_cv_grid(Gx, Gy, fold, grid, list(
      folds = 3L, criterion = crit, method = path, nthreads = 1L,
      progress = FALSE), "cv")
  }
  # src/kbrcv.c evaluates a fold's grid for "iw" either on the factor (thin
  # QR of S P, an r x r eigen-decomposition, the held-out columns split
  # into N's span and its complement) or by the eigen-decomposition of the
  # n x n S G_Y S, whichever costs fewer flops; "iw_factor" and
  # "iw_eigen" force one.  Full rank (d = 5), between n / 2 and n (d = 2),
  # low (d = 1); the default grid down to delta = 1e-7, where a Woodbury
  # formula without the split lost 7 digits to cancellation (and eps down
  # to 1e-4).
  grid <- rbind(kernbayes:::kbr_default_grid(),
                data.frame(eps = 1e-4, delta = c(1e-6, 1e-3)))
  for (cfg in list(c(d = 5, n = 60), c(d = 2, n = 150), c(d = 1, n = 120))) {
    set.seed(cfg[["n"]] + cfg[["d"]])
    n <- cfg[["n"]]
    x <- matrix(stats::rnorm(n * cfg[["d"]]), n)
    y <- x + matrix(stats::rnorm(n * cfg[["d"]], sd = 0.5), n)
    Gx <- ref_gauss_gram(x, x, ref_med_bw(x))
    Gy <- ref_gauss_gram(y, y, ref_med_bw(y))
    set.seed(5)
    fold <- sample(rep_len(1:3, n))
    for (crit in c("regression", "marginal")) {
      ref <- cv_direct_ref(Gx, Gy, fold, grid, crit, "iw")
      for (path in c("iw", "iw_factor", "iw_eigen")) {
        got <- cv_grid(Gx, Gy, fold, grid, crit, path)
        expect_lt(rel_err(got, ref), 1e-8)
        expect_identical(which.min(got), which.min(ref))
      }
    }
    # both criteria from one pass (kbr()'s tuning): each against its
    # reference, on every path and on method "kbr"
    for (path in c("kbr", "iw", "iw_factor", "iw_eigen")) {
      rm <- if (path == "kbr") "kbr" else "iw"
      got <- cv_grid(Gx, Gy, fold, grid, "both", path)
      expect_identical(colnames(got), c("regression", "marginal"))
      expect_lt(rel_err(got[, "regression"],
                        cv_direct_ref(Gx, Gy, fold, grid, "regression", rm)), 1e-8)
      expect_lt(rel_err(got[, "marginal"],
                        cv_direct_ref(Gx, Gy, fold, grid, "marginal", rm)), 1e-8)
    }
    cv <- kbr_cv(x, y, grid = grid, folds = 3, seed = 5, method = "iw",
                 criterion = "regression", refit = FALSE)
    expect_lt(rel_err(cv$table$criterion,
                      cv_direct_ref(Gx, Gy, fold, grid, "regression", "iw")),
              1e-8)
  }
  # G_Y of rank 1 and 2 (y taking one or two values)
  set.seed(11)
  n <- 40
  x <- matrix(stats::rnorm(2 * n), n)
  Gx <- ref_gauss_gram(x, x, ref_med_bw(x))
  set.seed(5)
  fold <- sample(rep_len(1:3, n))
  grid <- data.frame(eps = c(1e-3, 1e-2, 0.1), delta = c(1e-4, 1e-2, 1))
  for (y in list(matrix(0.3, n, 2), cbind(rep(c(-1, 1), length.out = n), 0))) {
    Gy <- ref_gauss_gram(y, y, 1)
    for (crit in c("regression", "marginal")) {
      ref <- cv_direct_ref(Gx, Gy, fold, grid, crit, "iw")
      for (path in c("iw_factor", "iw_eigen")) {
        expect_lt(rel_err(cv_grid(Gx, Gy, fold, grid, crit, path), ref), 1e-9)
      }
    }
  }
  expect_error(cv_grid(Gx, Gy, fold, grid, "marginal", "iw_fast"), "method")
})

test_that("kbr_cv(method = \"iw\") gives the same table on 1 and 2 threads", {
  set.seed(22)
  for (d in c(1L, 4L)) {
    x <- matrix(stats::rnorm(120 * d), 120)
    y <- x + matrix(stats::rnorm(120 * d, sd = 0.5), 120)
    t1 <- kbr_cv(x, y, folds = 3, method = "iw", refit = FALSE,
                 nthreads = 1)$table
    t2 <- kbr_cv(x, y, folds = 3, method = "iw", refit = FALSE,
                 nthreads = 2)$table
    expect_identical(t1, t2)
  }
})

test_that("kbr_cv(method = \"kbr\") gives the same table on 1 and 2 threads, and with progress", {
  set.seed(21)
  x <- matrix(stats::rnorm(300), 150)
  y <- x + matrix(stats::rnorm(300, sd = 0.5), 150)
  t1 <- kbr_cv(x, y, folds = 3, refit = FALSE, nthreads = 1)$table
  t2 <- kbr_cv(x, y, folds = 3, refit = FALSE, nthreads = 2)$table
  expect_identical(t1, t2)
  msg <- capture_messages(t3 <- kbr_cv(x, y, folds = 3, refit = FALSE,
                                       progress = TRUE)$table)
  expect_identical(t1, t3)
  expect_true(any(grepl("factors and eps", msg)))
  expect_error(kbr_cv(x, y, folds = 3, refit = FALSE, nthreads = 0),
               "'nthreads'")
})

# ---- the tuning inside kbr() -------------------------------------------------

test_that("kbr() with eps/delta = NULL tunes them for the kernels it is given", {
  # The default cross-validation runs kbr_cv() with median-heuristic
  # bandwidths even when kernel_x / kernel_y fix other bandwidths, so eps
  # and delta are tuned for kernels the fit does not use.
  d <- kbr_toy_1d(50, 103)
  grid <- expand.grid(eps = 10^(-3:-1), delta = 10^(-7:0))
  grid$sigma_x <- 0.3
  grid$sigma_y <- 0.3
  # kbr()'s rule: delta by the regression criterion, then eps by the
  # marginal criterion among the rows of that delta
  reg <- kbr_cv(d$x, d$y, grid = grid, folds = 5, criterion = "regression",
                refit = FALSE)$table
  marg <- kbr_cv(d$x, d$y, grid = grid, folds = 5, criterion = "marginal",
                 refit = FALSE)$table
  rows <- reg$delta == reg$delta[which.min(reg$criterion)]
  want <- marg[rows, ][which.min(marg$criterion[rows]), ]
  fit <- suppressMessages(kbr(d$x, d$y,
                              kernel_x = gaussian_kernel(bandwidth = 0.3),
                              kernel_y = gaussian_kernel(bandwidth = 0.3)))
  expect_identical(c(fit$eps, fit$delta), c(want$eps, want$delta))
  # the record keeps both criteria of the chosen row
  expect_equal(fit$tuning$best$regression, reg$criterion[as.integer(rownames(want))],
               tolerance = 1e-12)
  expect_equal(fit$tuning$best$marginal, want$criterion, tolerance = 1e-12)
})

test_that("kbr() checks its arguments before the default cross-validation", {
  # rank, tol and the kernels are checked after the (costly) default CV has
  # run, so a bad argument costs a full CV and prints its message first.
  d <- kbr_toy_1d(30, 115)
  for (bad in list(list(rank = 0), list(tol = -1),
                   list(kernel_x = imq_kernel()))) {
    msgs <- character()
    err <- withCallingHandlers(
      tryCatch(do.call(kbr, c(list(d$x, d$y), bad)),
               error = conditionMessage),
      message = function(m) {
        msgs <<- c(msgs, conditionMessage(m))
        invokeRestart("muffleMessage")
      })
    expect_match(err, sprintf("'%s'", names(bad)), fixed = TRUE)
    expect_identical(msgs, character(), label = paste("messages before the",
                                                      names(bad), "error"))
  }
})

test_that("default eps/delta with fewer than 5 rows names eps and delta, not folds", {
  msgs <- character()
  expect_error(withCallingHandlers(kbr(1:4, c(1.1, 2.3, 2.8, 4.2)),
                                   message = function(m) msgs <<- c(msgs, "m")),
               class = "kb_error_arg",
               regexp = "'eps' and 'delta' must be given when x has fewer than 5 rows \\(it has 4\\)")
  expect_identical(msgs, character())
  expect_error(kbr(1:4, c(1.1, 2.3, 2.8, 4.2), eps = 0.1),
               class = "kb_error_arg", regexp = "^'delta' must be given")
  expect_error(kbr(1, 1, eps = 0.1, delta = 0.1), class = "kb_error_arg",
               regexp = "'x' must have at least 2 rows")
  expect_error(kbr_cv(1, 1), class = "kb_error_arg",
               regexp = "'x' must have at least 2 rows")
  # a median heuristic that fails names the kernel argument and the data
  expect_error(kbr(rep(1, 6), 1:6, eps = 0.1, delta = 0.1),
               class = "kb_error_arg", regexp = "'kernel_x' uses the median heuristic, which fails on 'x'")
  expect_s3_class(kbr(rep(1, 6), 1:6, kernel_x = gaussian_kernel(bandwidth = 1),
                      eps = 0.1, delta = 0.1), "kb_kbr")
})

test_that("a kernel the default cross-validation cannot tune is named before any message or work", {
  d <- kbr_toy_1d(30, 125)
  msgs <- character()
  expect_error(withCallingHandlers(
    kbr(d$x, d$y, kernel_y = gaussian_kernel(precon = "sclmed")),
    message = function(m) {
      msgs <<- c(msgs, conditionMessage(m))
      invokeRestart("muffleMessage")
    }), class = "kb_error_arg",
    regexp = "^'kernel_y' must use the median heuristic or a fixed bandwidth")
  expect_identical(msgs, character())
})

# ---- the Gaussian toy --------------------------------------------------------

# The toy: kbr_gauss_toy() of helper-kbr.R, in the covariance A'A / (2d) + 2I
# (cov = "scaled"), the one the measured numbers below were taken in.

test_that("Gaussian toy: the CV-tuned KBR posterior mean's MSE decreases with n", {
  skip_on_cran()
  skip_under_valgrind()
  # delta is in the operator convention (no n in its scale), so one grid
  # serves every n
  grid <- expand.grid(eps = c(1e-2, 1e-1), delta = c(1e-4, 1e-3, 1e-2))
  ns <- c(100, 200, 400, 800)
  reps <- 3
  for (d in 2:3) {
    mse <- mse_prior <- mse_fixed <- matrix(NA_real_, reps, length(ns))
    for (k in seq_along(ns)) for (r in seq_len(reps)) {
      n <- ns[k]
      toy <- kbr_gauss_toy(d, 100 * d + r, cov = "scaled")
      set.seed(1000 * r + n)
      s <- toy$joint(n)
      U <- toy$prior(n)
      yt <- toy$lik(toy$prior(100))
      exact <- toy$post_mean(yt)
      cv <- kbr_cv(s$x, s$y, grid = grid, folds = 3, refit = FALSE)
      fit <- kbr(s$x, s$y, prior = U, eps = cv$best$eps,
                 delta = cv$best$delta)
      mse[r, k] <- mean(rowSums((posterior_mean(fit, yt) - exact)^2))
      mse_prior[r, k] <- mean(rowSums(exact^2))     # prior mean is 0
      # the same fixed setting for every n
      fx <- kbr(s$x, s$y, prior = U, eps = 0.1, delta = 0.01)
      mse_fixed[r, k] <- mean(rowSums((posterior_mean(fx, yt) - exact)^2))
    }
    m <- colMeans(mse)
    m0 <- colMeans(mse_prior)
    mf <- colMeans(mse_fixed)
    message(sprintf(paste0("KBR Gaussian toy, d = %d, n = %s: MSE (CV) = %s; ",
                           "eps = 0.1, delta = 0.01: %s; prior-mean MSE = %s"),
                    d, paste(ns, collapse = "/"),
                    paste(signif(m, 3), collapse = "/"),
                    paste(signif(mf, 3), collapse = "/"),
                    paste(signif(m0, 3), collapse = "/")))
    # measured (3 folds, 3 repeats): d = 2: CV 0.107/0.0961/0.0538/0.0161,
    #   fixed 0.0569/0.0303/0.0223/0.013, prior 0.065/0.0672/0.062/0.0628;
    #   d = 3: CV 0.207/0.128/0.0776/0.0396, fixed 0.0829/0.036/0.0269/0.02,
    #   prior 0.07/0.0745/0.0813/0.0738.  The CV criterion assumes the prior
    #   is the marginal of X; this prior is narrower, so CV under-regularises
    #   at small n.
    expect_lt(m[2], m[1])
    expect_lt(m[3], 0.8 * m[2])
    expect_lt(m[4], 0.8 * m[3])
    expect_lt(m[4], m0[4])
    expect_true(all(diff(mf) < 0))
    # with the fixed setting KBR beats the prior mean at every n from 200
    expect_true(all(mf[-1] < m0[-1]))
  }
})

# ---- futures -----------------------------------------------------------------

test_that("kbr_cv() gives the same table through futures (multisession)", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_under_valgrind()
  set.seed(807)
  x <- rnorm(120)
  y <- x + rnorm(120, sd = 0.5)
  grid <- expand.grid(eps = c(1e-3, 1e-2), delta = c(1e-3, 1e-1))
  c1 <- kbr_cv(x, y, grid = grid, folds = 3, refit = FALSE)
  oplan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(oplan), add = TRUE)
  c2 <- kbr_cv(x, y, grid = grid, folds = 3, refit = FALSE)
  expect_identical(c1$table, c2$table)
})

# ---- bad input ---------------------------------------------------------------

test_that("kbr_cv() rejects a bad grid, folds < 2 and mismatched data", {
  d <- kbr_toy_1d(30, 115)
  x <- d$x
  y <- d$y
  msg <- "'grid' must be a data frame with columns eps and delta"
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1)), msg, fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = list(eps = 1, delta = 1)), msg, fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1, delta = 1)[0, ]), msg,
               fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = -1, delta = 1)),
               "'grid' column eps must hold positive numbers", fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1, delta = NA)),
               "'grid' column delta", fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = "a", delta = 1)),
               "'grid' column eps", fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1, delta = 1,
                                              sigma_x = -1)),
               "'grid' column sigma_x", fixed = TRUE)
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1, delta = 1,
                                              sigma_y = 0)),
               "'grid' column sigma_y", fixed = TRUE)
  expect_error(kbr_cv(x, y, folds = 1), "'folds' must be a single whole number >= 2",
               fixed = TRUE)
  expect_error(kbr_cv(x, y, folds = 31), "'folds' must be at most 30",
               fixed = TRUE)
  expect_error(kbr_cv(x, y[-1]), "'y' must have as many rows as x",
               fixed = TRUE)
  expect_error(kbr_cv(x, c(y[-1], NaN)), "'y' must not contain NA")
  expect_error(kbr_cv(x, y, method = "x"), "'method'", fixed = TRUE)
})

test_that("kbr_cv() refuses an eps at which mu is rounding noise", {
  # With m = G 1 / n, ||mu||^2 <= n in exact arithmetic; at eps = 1e-16
  # G_X + n eps I is numerically singular, mu is noise far beyond the
  # bound, and its criterion once won a grid. An eps where mu is still
  # accurate (1e-10) passes, and agrees with the plain-R solves.
  set.seed(1)
  x <- stats::rnorm(60)
  y <- x + stats::rnorm(60, sd = 0.5)
  for (method in c("kbr", "iw")) {
    expect_error(kbr_cv(x, y, grid = data.frame(eps = 1e-16, delta = 1e-3),
                        method = method, refit = FALSE),
                 "numerically unstable at eps = 1e-16.*increase 'eps'")
    expect_error(kbr(x, y, eps = 1e-16, method = method, progress = FALSE),
                 "increase 'eps'")
  }
  grid <- data.frame(eps = 1e-10, delta = 1e-3)
  cv <- kbr_cv(x, y, grid = grid, folds = 3, seed = 2, refit = FALSE)
  X <- matrix(x)
  Y <- matrix(y)
  Gx <- ref_gauss_gram(X, X, ref_med_bw(X))
  Gy <- ref_gauss_gram(Y, Y, ref_med_bw(Y))
  set.seed(2)
  fold <- sample(rep_len(1:3, 60))
  mu <- ref_kbr_mu(Gx[fold != 1, fold != 1], rowMeans(Gx[fold != 1, fold != 1]), 1e-10)
  expect_lte(sum(mu^2), sum(fold != 1))
  # G_X + n eps I has condition number about 1e8 here: 2e-6 relative
  # without long double sums in the reference (arm64, valgrind)
  expect_lt(rel_err(cv$table$criterion,
                    cv_direct_ref(Gx, Gy, fold, grid, "marginal")), 1e-5)
})

test_that("kbr_cv() checks the arguments for the final fit before cross-validating", {
  d <- kbr_toy_1d(60, 123)
  for (bad in list(list(rank = 0), list(tol = -1), list(nthreads = 0),
                   list(prior_weights = rep(0, 60)), list(prior = cbind(1, 2)),
                   list(delta = 1))) {
    t0 <- proc.time()[["elapsed"]]
    expect_error(do.call(kbr_cv, c(list(d$x, d$y), bad)), class = "kb_error_arg",
                 regexp = if (names(bad) == "delta") "'...'.*'delta'" else
                   sprintf("'%s'", names(bad)))
  }
  # refit = FALSE does not use them
  expect_s3_class(kbr_cv(d$x, d$y, folds = 2, refit = FALSE, rank = 0), "kb_kbr_cv")
  expect_error(kbr_cv(d$x, d$y, refit = NA), class = "kb_error_arg", regexp = "'refit'")
})

test_that("kbr_cv() checks sizes before allocating Gram matrices", {
  d <- kbr_toy_1d(200, 122)
  withr_opt <- options(kernbayes.max_memory = 1e6)
  on.exit(options(withr_opt), add = TRUE)
  expect_error(kbr_cv(d$x, d$y), class = "kb_error_arg",
               regexp = "'x' is too large: cross-validation with 200 points")
  # and it names the route that fits
  expect_error(kbr_cv(d$x, d$y), class = "kb_error_arg",
               regexp = "cross-validate on a subsample")
})

# ---- print and plot ----------------------------------------------------------

test_that("print method for kb_kbr_cv", {
  d <- kbr_toy_1d(40, 116)
  cv <- kbr_cv(d$x, d$y, grid = expand.grid(eps = c(0.01, 0.1),
                                            delta = c(0.1, 1)), folds = 2)
  expect_snapshot({
    cv
  })
  out <- utils::capture.output(vis <- withVisible(print(cv)))
  expect_false(vis$visible)
})

test_that("plot method for kb_kbr_cv draws and returns its argument invisibly", {
  d <- kbr_toy_1d(40, 117)
  cv <- kbr_cv(d$x, d$y, grid = expand.grid(eps = c(0.01, 0.1),
                                            delta = c(0.1, 1)), folds = 2)
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  vis <- withVisible(plot(cv))
  expect_false(vis$visible)
  expect_identical(vis$value, cv)
})

# ---- kbr()'s default tuning on a subsample (issue 33) -------------------------

test_that("kbr()'s default tuning above cv_points is kbr_cv() on seeded subsamples with the fit's bandwidths", {
  d <- kbr_toy_1d(300, 331)
  # written from the rule: three subsamples of cv_points rows drawn in turn
  # after set.seed(1) (each sorted), 5-fold regression CV over the default
  # grid on each, the criteria summed; the median bandwidths of all the
  # data (every pair of the 300 points)
  med_all <- function(v) stats::median(abs(outer(v, v, "-"))[upper.tri(diag(300))])
  grid <- expand.grid(eps = 10^(-3:-1), delta = 10^(-7:0))
  grid$sigma_x <- med_all(d$x)
  grid$sigma_y <- med_all(d$y)
  set.seed(1)
  ii <- list(sort(sample.int(300, 120)), sort(sample.int(300, 120)),
             sort(sample.int(300, 120)))
  crit <- 0
  for (i in ii) {
    crit <- crit + kbr_cv(d$x[i], d$y[i], grid = grid, folds = 5,
                          criterion = "regression", refit = FALSE)$table$criterion
  }
  best <- grid[which.min(crit), ]
  set.seed(99)
  rs <- .Random.seed
  expect_message(fit <- kbr(d$x, d$y, cv_points = 120),
                 "over 24 settings on 3 subsamples of 120 of the 300 points")
  expect_identical(.Random.seed, rs)             # the global RNG untouched
  expect_identical(c(fit$eps, fit$delta), c(best$eps, best$delta))
  # reproducible
  fit2 <- suppressMessages(kbr(d$x, d$y, cv_points = 120))
  expect_identical(c(fit2$eps, fit2$delta), c(fit$eps, fit$delta))
  # at or above n, and with Inf: the exhaustive search on all points
  ex <- kbr_cv(d$x, d$y, folds = 5, criterion = "regression", refit = FALSE)
  for (cp in list(300, Inf)) {
    expect_message(fe <- kbr(d$x, d$y, cv_points = cp), "over 24 settings \\(about")
    expect_identical(c(fe$eps, fe$delta), c(ex$best$eps, ex$best$delta))
  }
})

test_that("the subsampled default is about as good as the exhaustive search on the toys", {
  skip_on_cran()
  # 1-d toy, posterior mean 0.8 y exact under the N(0, 1) prior (= the
  # marginal of x); n = 600, the default subsample of 400
  yn <- seq(-2, 2, length.out = 41)
  e <- matrix(NA_real_, 4, 2)
  for (r in 1:4) {
    d <- kbr_toy_1d(600, 340 + r)
    fd <- suppressMessages(kbr(d$x, d$y))
    fe <- suppressMessages(kbr(d$x, d$y, cv_points = Inf))
    e[r, ] <- c(mean((posterior_mean(fd, yn) - 0.8 * yn)^2),
                mean((posterior_mean(fe, yn) - 0.8 * yn)^2))
    # the picks within one step of the grid (a decade) of each other
    expect_lte(abs(log10(fd$eps / fe$eps)), 1 + 1e-9)
  }
  # measured: errors (default, exhaustive) 4.5e-4 / 4.5e-4, 3.0e-3 / 3.0e-3,
  # 1.4e-3 / 1.2e-3, 1.9e-3 / 3.8e-3 (means 1.7e-3 / 2.1e-3); eps picks
  # equal or a decade apart
  expect_lt(mean(e[, 1]), 1.5 * mean(e[, 2]) + 1e-3)
})

test_that("kbr() rejects a bad cv_points before any message or work", {
  d <- kbr_toy_1d(30, 351)
  for (bad in list(4, 2.5, NA, "all", c(10, 20), -Inf)) {
    msgs <- character()
    expect_error(withCallingHandlers(kbr(d$x, d$y, cv_points = bad),
                                     message = function(m) msgs <<- c(msgs, "m")),
                 class = "kb_error_arg",
                 regexp = "^'cv_points' must be a single whole number >= 5, or Inf")
    expect_identical(msgs, character())
  }
  # a given eps and delta need no tuning; cv_points is still checked
  expect_error(kbr(d$x, d$y, eps = 0.1, delta = 0.1, cv_points = 0),
               class = "kb_error_arg", regexp = "'cv_points'")
})

test_that("a KBR cross-validation's table and summary (best first)", {
  set.seed(15)
  xs <- rnorm(60)
  ys <- xs + rnorm(60, sd = 0.3)
  cv <- kbr_cv(xs, ys, folds = 3, progress = FALSE)
  df <- as.data.frame(cv)
  expect_identical(nrow(df), nrow(cv$table))
  expect_null(attr(df, "out.attrs"))
  s <- summary(cv)
  expect_false(is.unsorted(s$criterion))
  expect_identical(s[1, "criterion"], cv$best$criterion)
})
