# Robustness audit (fuzzing) of kernel Bayes' rule, its cross-validation and
# filter, and the particle flows: edge sizes and data, differential checks
# against a plain-R transcription of the formulas of ?kbr / ?kbr_cv /
# ?kbr_filter written here (no shared helpers), 1 vs 2 threads, and bad
# input.  Regression tests for the bugs the audit found.

# ---- a plain-R reference, from the formulas --------------------------------

fz_gram <- function(a, b, s) {
  a <- as.matrix(a)
  b <- as.matrix(b)
  D <- outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b)
  exp(-pmax(D, 0) / (2 * s^2))
}
fz_rel <- function(a, b) max(abs(a - b)) / max(abs(b))

# mu = n (G_X + n eps I)^{-1} m and the posterior operator R (?kbr), by solve()
fz_mu <- function(Gx, m, eps) {
  n <- nrow(Gx)
  drop(n * solve(Gx + n * eps * diag(n), m))
}
fz_R <- function(Gy, mu, delta, method) {
  n <- nrow(Gy)
  if (method == "kbr") {
    LG <- mu * Gy
    return(LG %*% solve(LG %*% LG + n^2 * delta * diag(n)) %*% diag(mu, n))
  }
  s <- sqrt(pmax(mu, 0))
  diag(s, n) %*% solve(s * t(s * Gy) + n * delta * diag(n)) %*% diag(s, n)
}
# kbr_cv()'s criterion (?kbr_cv) per grid row, fold and setting by solve()
fz_cv <- function(x, y, grid, folds, seed, method, crit) {
  n <- nrow(x)
  set.seed(seed)
  fold <- sample(rep_len(seq_len(folds), n))
  out <- numeric(nrow(grid))
  for (g in seq_len(nrow(grid))) {
    Gx <- fz_gram(x, x, grid$sigma_x[g])
    Gy <- fz_gram(y, y, grid$sigma_y[g])
    for (a in seq_len(folds)) {
      tr <- fold != a
      te <- !tr
      Gt <- Gx[tr, tr, drop = FALSE]
      mu <- fz_mu(Gt, rowMeans(Gt), grid$eps[g])
      W <- fz_R(Gy[tr, tr, drop = FALSE], mu, grid$delta[g], method) %*%
        Gy[tr, te, drop = FALSE]
      out[g] <- out[g] + if (crit == "marginal") {
        wb <- rowMeans(W)
        sum(wb * (Gt %*% wb)) - 2 * sum(wb * rowMeans(Gx[tr, te, drop = FALSE])) +
          mean(Gx[te, te])
      } else {
        (sum(W * (Gt %*% W)) - 2 * sum(W * Gx[tr, te, drop = FALSE]) + sum(te)) / n
      }
    }
  }
  out
}
# Data of one kind: y dependent on x, independent, duplicated rows, a
# constant column, y = x, y taking two values (G_Y of rank 2), one value
fz_data <- function(kind, n, dx, dy) {
  x <- matrix(stats::rnorm(n * dx), n)
  y <- switch(kind,
    dep = x[, rep_len(seq_len(dx), dy), drop = FALSE] + stats::rnorm(n * dy, sd = 0.5),
    indep = matrix(stats::rnorm(n * dy), n),
    dup = {
      i <- c(1L, 1L, sample(n, n - 2L, TRUE))
      x <- x[i, , drop = FALSE]
      matrix(stats::rnorm(n * dy), n)[i, , drop = FALSE]
    },
    const = {
      x[, 1] <- 2
      m <- matrix(stats::rnorm(n * dy), n)
      m[, 1] <- -1
      m
    },
    same = x,
    two = matrix(rep(c(-1, 1), length.out = n * dy), n),
    one = matrix(0.3, n, dy))
  list(x = x, y = y)
}

# ---- errors about the data's scale name the data ----------------------------

test_that("a median heuristic that fails on y names y (or grid), not x, before any work", {
  set.seed(1)
  x <- rnorm(12)
  tiny <- 1e-200 * rnorm(12)
  expect_error(kbr(x, tiny, eps = 0.1, delta = 0.1), "^'y' has a median",
               class = "kb_error_arg")
  expect_error(kbr_cv(x, tiny, grid = data.frame(eps = 1, delta = 1), folds = 2),
               "^'y' has a median", class = "kb_error_arg")
  expect_error(kbr_filter(c(x, 1), c(tiny, 0), tiny), "^'y_train' has a median",
               class = "kb_error_arg")
  # constant y: kbr() with default eps/delta names kernel_y and y before the
  # tuning's message
  expect_silent(expect_error(kbr(x, rep(2, 12)), "'kernel_y' uses the median heuristic, which fails on 'y'",
                             class = "kb_error_arg"))
  e <- expect_error(kbr_cv(x, rep(2, 12), grid = data.frame(eps = 1, delta = 1),
                           folds = 2), class = "kb_error_arg")
  expect_identical(e$arg, "grid")
  expect_match(conditionMessage(e), "fails on 'y'.*sigma_y")
  # a later bandwidth setting that fails is found before the first runs
  grid <- data.frame(eps = 1, delta = 1, sigma_x = c(1, NA))
  e <- expect_error(kbr_cv(rep(1, 12), x, grid = grid, folds = 2,
                           progress = FALSE), class = "kb_error_arg")
  expect_identical(e$arg, "grid")
  expect_match(conditionMessage(e), "fails on 'x'.*sigma_x")
  e <- expect_error(kbr_cv(x, x, grid = data.frame(eps = 1, delta = 1, sigma_x = 1e-200),
                           folds = 2), class = "kb_error_arg")
  expect_identical(e$arg, "grid")
  expect_match(conditionMessage(e), "column sigma_x: 'bandwidth' = 1e-200")
  # a complex grid column is an argument error, not a failed comparison
  expect_error(kbr_cv(x, x, grid = data.frame(eps = 1 + 0i, delta = 1), folds = 2),
               "'grid' column eps", class = "kb_error_arg")
})

test_that("kbr_cv() takes a bandwidth column of NA only as the median heuristic", {
  set.seed(2)
  x <- matrix(rnorm(40), 20)
  y <- x + rnorm(40)
  grid <- data.frame(eps = c(0.01, 0.1), delta = 0.01)
  ref <- kbr_cv(x, y, grid = grid, folds = 2, refit = FALSE)$table
  for (method in c("kbr", "iw")) {
    g <- grid
    g$sigma_x <- NA
    g$sigma_y <- NA
    tab <- kbr_cv(x, y, grid = g, folds = 2, refit = FALSE,
                  method = method)$table
    expect_identical(tab$sigma_x, c(NA_real_, NA_real_))
    if (method == "kbr") expect_identical(tab$criterion, ref$criterion)
  }
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1, delta = 1, sigma_x = TRUE),
                      folds = 2), "'grid' column sigma_x", class = "kb_error_arg")
})

# ---- kbr_cv(): edge sizes and data against the per-setting solves ----------

test_that("kbr_cv() equals per-setting solves at n = 2..17, folds 2 and n, all data kinds", {
  # every row finite; rows with eps, delta > 1e-12 to 1e-10 relative with
  # the same pick (eps = 1e200 included: there T = P' L P ~ 1e-200 sends
  # kb_eigen_rrr_t to dsyevr, which rescales)
  set.seed(31)
  grid <- expand.grid(eps = c(1e-12, 1e-3, 0.1, 1e3, 1e200),
                      delta = c(1e-12, 1e-2, 1, 1e3))
  # the rows at 1e-12 are rounding-dominated (solve() and the eigen form
  # differ there by up to 100% on duplicated data); the rest must agree
  good <- grid$eps > 1e-12 & grid$delta > 1e-12
  n_checked <- 0
  for (n in c(2, 3, 4, 5, 7, 10, 17)) {
    for (kind in c("dep", "indep", "dup", "const", "same", "two", "one")) {
      dx <- sample(1:8, 1)
      d <- fz_data(kind, n, dx, if (kind == "same") dx else sample(1:8, 1))
      grid$sigma_x <- sample(c(0.5, 1, 3), 1)
      grid$sigma_y <- sample(c(0.5, 1, 3), 1)
      folds <- if (n %% 2) n else 2
      method <- c("kbr", "iw")[1 + n %% 2]
      for (crit in c("marginal", "regression")) {
        cv <- kbr_cv(d$x, d$y, grid = grid, folds = folds, method = method,
                     criterion = crit, refit = FALSE, seed = 3)$table$criterion
        expect_true(all(is.finite(cv)))
        ref <- fz_cv(d$x, d$y, grid[good, ], folds, 3, method, crit)
        expect_lt(fz_rel(cv[good], ref), 1e-10,
                  label = sprintf("n = %d, %s, %s, %s", n, kind, method, crit))
        expect_identical(which.min(cv[good]), which.min(ref))
        n_checked <- n_checked + 1
      }
    }
  }
  expect_identical(n_checked, 98)
  # folds > n and folds = 1 are errors naming folds
  expect_error(kbr_cv(1:4, 1:4, folds = 5), "'folds'", class = "kb_error_arg")
  expect_error(kbr_cv(1:4, 1:4, folds = 1), "'folds'", class = "kb_error_arg")
})

test_that("kbr_cv() tables are identical on 1 and 2 threads at edge sizes and extreme settings", {
  set.seed(32)
  grid <- expand.grid(eps = c(1e-9, 1e-2, 1e200), delta = c(1e-9, 1e-2, 10))
  grid$sigma_x <- 1
  grid$sigma_y <- 0.7
  for (n in c(3, 10, 24)) for (kind in c("dep", "two", "one")) {
    d <- fz_data(kind, n, 2, 2)
    for (folds in unique(c(2, n))) {
      t1 <- kbr_cv(d$x, d$y, grid = grid, folds = folds, refit = FALSE,
                   nthreads = 1)$table
      t2 <- kbr_cv(d$x, d$y, grid = grid, folds = folds, refit = FALSE,
                   nthreads = 2)$table
      expect_identical(t1, t2)
    }
  }
})

# ---- kbr(): full and low-rank paths at edge sizes ---------------------------

test_that("kbr() equals the solves at n = 2..33 for every data kind; rank n with tol 0 equals the full path", {
  set.seed(33)
  n_checked <- 0
  for (n in c(2, 3, 4, 5, 7, 10, 17, 33)) {
    for (kind in c("dep", "indep", "dup", "const", "same", "two")) {
      dx <- sample(1:8, 1)
      d <- fz_data(kind, n, dx, if (kind == "same") dx else sample(1:8, 1))
      sx <- sample(c(0.3, 1, 3), 1)
      sy <- sample(c(0.3, 1, 3), 1)
      eps <- sample(c(1e-3, 0.1, 1e3), 1)
      delta <- sample(c(1e-3, 0.1, 1e3), 1)
      method <- c("kbr", "iw")[1 + (n_checked %% 2)]
      prior <- if (n_checked %% 3 == 0) matrix(stats::rnorm(3 * dx), 3)
      pw <- if (!is.null(prior)) c(0.5, 2, -0.3)
      yn <- rbind(d$y[1, ], matrix(stats::rnorm(2 * ncol(d$y)), 2))
      args <- list(d$x, d$y, prior = prior, prior_weights = pw,
                   kernel_x = gaussian_kernel(bandwidth = sx),
                   kernel_y = gaussian_kernel(bandwidth = sy), eps = eps,
                   delta = delta, method = method)
      f <- do.call(kbr, args)
      Gx <- fz_gram(d$x, d$x, sx)
      m <- if (is.null(prior)) rowMeans(Gx) else
        drop(fz_gram(d$x, prior, sx) %*% (pw / sum(pw)))
      mu <- fz_mu(Gx, m, eps)
      Ky <- fz_gram(d$y, yn, sy)
      W <- fz_R(fz_gram(d$y, d$y, sy), mu, delta, method) %*% Ky
      # an observation with every kernel value below 1e-8 has no posterior:
      # its column is NA (issue 33); the others are compared
      far <- apply(Ky, 2, max) < 1e-8
      Wf <- suppressWarnings(predict(f, yn))
      expect_true(all(is.na(Wf[, far])))
      Wf <- Wf[, !far, drop = FALSE]
      W <- W[, !far, drop = FALSE]
      expect_lt(max(fz_rel(f$mu, mu), if (any(!far)) fz_rel(Wf, W) else 0), 1e-9,
                label = sprintf("full path: n = %d, %s, %s", n, kind, method))
      # rank n, tol 0: every column, even those on rounding-level residuals
      # of duplicated rows, and the same weights
      fl <- suppressWarnings(do.call(kbr, c(args, list(rank = n, tol = 0))))
      expect_lt(max(fz_rel(fl$mu, f$mu),
                    if (any(!far)) fz_rel(suppressWarnings(predict(fl, yn))[, !far, drop = FALSE], Wf) else 0),
                1e-8, label = sprintf("rank n: n = %d, %s, %s", n, kind, method))
      # ranks 1, 2 and n - 1: finite weights
      for (r in unique(pmax(1, c(1, 2, n - 1)))) {
        fr <- suppressWarnings(do.call(kbr, c(args, list(rank = r))))
        expect_lte(max(fr$rank_x, fr$rank_y), r)
        expect_true(all(is.finite(suppressWarnings(predict(fr, yn))[, !far])))
      }
      n_checked <- n_checked + 1
    }
  }
  expect_identical(n_checked, 48)
})

test_that("kbr() and predict() reject bad input, naming the argument", {
  set.seed(34)
  x <- matrix(stats::rnorm(24), 12)
  y <- x[, 1] + stats::rnorm(12)
  call <- function(...) {
    a <- list(x = x, y = y, eps = 0.1, delta = 0.1)
    a[names(list(...))] <- list(...)
    do.call(kbr, a)
  }
  bad <- list(
    x = list(replace(x, 3, NA), replace(x, 3, NaN), replace(x, 3, -Inf),
             matrix("a", 12, 2), matrix(1, 1, 2), matrix(0, 12, 0)),
    y = list(y[-1], replace(y, 2, Inf), complex(real = y)),
    eps = list(-1, 0, NA, NaN, Inf, c(1, 2), numeric(0), "a"),
    delta = list(-1, 0, NA, NaN, Inf, c(1, 2), numeric(0), "a"),
    rank = list(-1, 0, NA, 1.5, 13, Inf, c(1, 2)),
    tol = list(-1, 1, NA, NaN),
    prior = list(matrix(0, 3, 3), matrix(NA_real_, 3, 2), matrix(0, 0, 2)),
    prior_weights = list(1:3, c(NA, rep(1, 11)), rep(0, 12), c(-1, rep(0, 11))))
  for (arg in names(bad)) for (v in bad[[arg]]) {
    a <- list(v)
    names(a) <- arg
    if (arg == "x" && nrow(as.matrix(v)) == 1L) a$y <- 1
    expect_error(do.call(call, a), sprintf("'%s'", arg), class = "kb_error_arg",
                 label = sprintf("%s = %s", arg, deparse(v)[1]))
  }
  f <- call()
  for (v in list(c(NA, 1), Inf, "a", matrix(0, 2, 2), numeric(0))) {
    expect_error(predict(f, v), "'newdata'", class = "kb_error_arg")
  }
  expect_error(preimage(f, 1, max_iter = 0), "'max_iter'", class = "kb_error_arg")
  expect_error(preimage(f, 1, tol = NA), "'tol'", class = "kb_error_arg")
})

# ---- kbr_filter(): edge lengths, both paths, bad input ----------------------

test_that("kbr_filter() equals a plain-R filter at T = 2..32 (full, and low rank T with tol 0)", {
  fz_filter <- function(x, y, yo, sx, sy, eps, delta, method) {
    T <- nrow(x) - 1
    X <- x[1:T, , drop = FALSE]
    Gx <- fz_gram(X, X, sx)
    Gxp <- fz_gram(X, x[2:(T + 1), , drop = FALSE], sx)
    Y <- y[1:T, , drop = FALSE]
    A <- solve(Gx + T * eps * diag(T))
    a <- rep(1 / T, T)
    W <- matrix(0, T, nrow(yo))
    for (t in seq_len(nrow(yo))) {
      mu <- drop(T * A %*% (Gxp %*% (A %*% (Gx %*% a))))
      a <- drop(fz_R(fz_gram(Y, Y, sy), mu, delta, method) %*% fz_gram(Y, yo[t, , drop = FALSE], sy))
      W[, t] <- a
    }
    W
  }
  set.seed(35)
  for (Tp1 in c(3, 4, 5, 10, 33)) for (kind in c("ar", "dup", "two")) {
    dx <- sample(1:3, 1)
    dy <- sample(1:3, 1)
    x <- matrix(0, Tp1, dx)
    x[1, ] <- stats::rnorm(dx)
    for (t in 2:Tp1) x[t, ] <- 0.8 * x[t - 1, ] + stats::rnorm(dx, sd = 0.4)
    y <- x[, rep_len(seq_len(dx), dy), drop = FALSE] + stats::rnorm(Tp1 * dy, sd = 0.3)
    if (kind == "dup") {
      x[2, ] <- x[1, ]
      y[2, ] <- y[1, ]
    }
    if (kind == "two") y[] <- rep(c(-1, 1), length.out = length(y))
    yo <- matrix(stats::rnorm(3 * dy), 3)
    method <- c("iw", "kbr")[1 + Tp1 %% 2]
    args <- list(x, y, yo, kernel_x = gaussian_kernel(bandwidth = 1),
                 kernel_y = gaussian_kernel(bandwidth = 0.7), eps = 0.01,
                 delta = 0.01, method = method)
    ref <- fz_filter(x, y, yo, 1, 0.7, 0.01, 0.01, method)
    f <- suppressWarnings(do.call(kbr_filter, args))
    expect_identical(f$path, "full")
    expect_lt(fz_rel(f$weights, ref), 1e-9)
    fl <- suppressWarnings(do.call(kbr_filter, c(args, list(rank = Tp1 - 1, tol = 0))))
    expect_identical(fl$path, "lowrank")
    expect_lt(fz_rel(fl$weights, ref), 1e-7)
  }
  x <- cumsum(stats::rnorm(20))
  y <- x + stats::rnorm(20)
  kf <- function(...) {
    a <- list(x_train = x, y_train = y, y_obs = y[1:3])
    a[names(list(...))] <- list(...)
    do.call(kbr_filter, a)
  }
  for (v in list(0, -1, NA, 1.5, 20, -Inf, NaN, "a")) {
    expect_error(kf(rank = v), "'rank'", class = "kb_error_arg")
  }
  for (v in list(0, -1, NA, Inf)) {
    expect_error(kf(eps = v), "'eps'", class = "kb_error_arg")
    expect_error(kf(delta = v), "'delta'", class = "kb_error_arg")
  }
  expect_error(kf(y_obs = c(1, NA)), "'y_obs'", class = "kb_error_arg")
  expect_error(kf(y_obs = numeric(0)), "'y_obs'", class = "kb_error_arg")
  expect_error(kf(x_train = x[1:2], y_train = y[1:2]), "'x_train'",
               class = "kb_error_arg")
})

# ---- particle flows: edge sizes against two plain-R steps -------------------

test_that("svgd() equals two plain-R steps at n = 2..33, d = 1..8, duplicated particles", {
  fz_svgd <- function(x, mu, steps, step, h = NULL) {
    n <- nrow(x)
    d <- ncol(x)
    obj <- numeric(steps)
    for (t in seq_len(steps)) {
      S <- -sweep(x, 2, mu)
      D2 <- as.matrix(stats::dist(x))^2
      # the median of all n^2 squared distances, the zero diagonal included
      h2 <- if (is.null(h)) 0.5 * stats::median(D2) / log(n + 1) else h^2
      K <- exp(-D2 / (2 * h2))
      sx <- rowSums(S * x)
      U <- K * (tcrossprod(S) + (outer(sx, sx, "+") - S %*% t(x) - x %*% t(S)) / h2 +
                  d / h2 - D2 / h2^2)
      obj[t] <- mean(U)
      x <- x + step * (K %*% S + (rowSums(K) * x - K %*% x) / h2) / n
    }
    list(x = x, obj = obj)
  }
  set.seed(36)
  for (n in c(2, 3, 4, 5, 10, 33)) for (d in c(1, 2, 8)) for (h in list(NULL, 0.7)) {
    mu <- stats::rnorm(d)
    x <- matrix(stats::rnorm(n * d), n)
    if (n >= 5) x[2, ] <- x[1, ]
    f <- svgd(x, gaussian_target(mu), n_iter = 2, step_size = 0.3,
              optimizer = "sgd", bandwidth = if (is.null(h)) "median" else h,
              progress = FALSE)
    r <- fz_svgd(x, mu, 2, 0.3, h)
    expect_lt(max(fz_rel(f$x, r$x), fz_rel(f$objective, r$obj)), 1e-10)
  }
  # more than half of the n^2 squared distances zero: a zero median
  # bandwidth is an error, not NaN particles
  for (x0 in list(c(1, 1), c(0, 0, 1), matrix(1, 4, 2))) {
    expect_error(svgd(x0, gaussian_target(rep(0, NCOL(x0))), n_iter = 1,
                      progress = FALSE), "zero bandwidth",
                 class = "kb_error_numeric")
  }
})

test_that("mmd_flow(), dmmd_flow() and mied() equal two plain-R steps at n, M = 2..17, d = 1..8", {
  set.seed(37)
  h <- 1.3
  fz_k <- function(z, p, w) {
    K <- fz_gram(z, p, h)
    list(v = drop(K %*% w), g = (K %*% (w * p) - drop(K %*% w) * z) / h^2)
  }
  for (n in c(2, 3, 17)) for (M in c(2, 7)) for (d in c(1, 8)) for (lam in list(NULL, 0.01, 10)) {
    x <- matrix(stats::rnorm(n * d, 1), n)
    y <- matrix(stats::rnorm(M * d), M)
    if (n >= 3) x[3, ] <- x[1, ]
    step <- if (is.null(lam)) 0.5 else 0.5 * lam
    f <- if (is.null(lam)) {
      mmd_flow(x, y, kernel = gaussian_kernel(bandwidth = h), n_iter = 2,
               step_size = step, progress = FALSE)
    } else {
      dmmd_flow(x, y, lambda = lam, kernel = gaussian_kernel(bandwidth = h),
                n_iter = 2, step_size = step, progress = FALSE)
    }
    Kyy <- fz_gram(y, y, h)
    xr <- x
    obj <- numeric(2)
    for (t in 1:2) {
      a <- fz_k(xr, xr, rep(1 / n, n))
      mmd2 <- mean(fz_gram(xr, xr, h)) - 2 * mean(fz_gram(xr, y, h)) + mean(Kyy)
      if (is.null(lam)) {
        obj[t] <- mmd2
        grad <- a$g - fz_k(xr, y, rep(1 / M, M))$g
      } else {
        gY <- fz_k(y, xr, rep(1 / n, n))$v - rowMeans(Kyy)
        beta <- solve(Kyy + M * lam * diag(M), gY)
        obj[t] <- (1 + lam) / lam * (mmd2 - sum(gY * beta))
        grad <- 2 * (1 + lam) / lam * (a$g - fz_k(xr, y, 1 / M + beta)$g)
      }
      xr <- xr - step * grad
    }
    expect_lt(max(fz_rel(f$x, xr), fz_rel(f$objective, obj)), 1e-10)
  }
  # MIED: log E with E = n^-2 sum_{i != j} (|x_i - x_j|^2 + eps^2)^(-s/2)
  # exp((V_i + V_j) / 2), V = -log p; two plain gradient steps on log E
  for (n in c(2, 3, 17)) for (d in c(1, 8)) for (eps in c(0, 1e-8, 0.5)) {
    tg <- gaussian_target(stats::rnorm(d))
    x <- matrix(stats::rnorm(n * d), n)
    s <- d + 1e-4
    f <- mied(x, tg, n_iter = 2, step_size = 0.01, optimizer = "sgd", mollifier_scale = eps,
              progress = FALSE)
    xr <- x
    obj <- numeric(2)
    for (t in 1:2) {
      V <- -target_log_density(tg, xr)
      D2 <- as.matrix(stats::dist(xr))^2 + eps^2
      A <- D2^(-s / 2) * exp(outer(V, V, "+") / 2)
      diag(A) <- 0
      B <- -s * A / D2
      diag(B) <- 0
      obj[t] <- log(sum(A) / n^2)
      G <- 2 * (rowSums(B) * xr - B %*% xr) - rowSums(A) * target_score(tg, xr)
      xr <- xr - 0.01 * G / sum(A)
    }
    expect_lt(fz_rel(f$x, xr), 1e-10)
    expect_lt(max(abs(f$objective - obj)), 1e-10 * max(1, abs(obj)))
  }
})

test_that("flows reject NaN scores, steps <= 0, n_iter 0 and coinciding MIED particles, naming the cause", {
  tg <- gaussian_target(0)
  x0 <- c(0, 1, 2)
  y <- matrix(stats::rnorm(10), 5)
  flows <- list(
    svgd = function(...) svgd(x0, tg, progress = FALSE, ...),
    ksd_descent = function(...) ksd_descent(x0, tg, method = "gd", progress = FALSE, ...),
    mmd_flow = function(...) mmd_flow(matrix(x0, 3, 2), y, progress = FALSE, ...),
    dmmd_flow = function(...) dmmd_flow(matrix(x0, 3, 2), y, progress = FALSE, ...),
    mied = function(...) mied(x0, tg, progress = FALSE, ...))
  for (nm in names(flows)) {
    for (v in list(0, -1, NA, Inf, "a", c(1, 2))) {
      if (identical(v, Inf)) next
      expect_error(flows[[nm]](step_size = v), "'step_size'", class = "kb_error_arg",
                   label = nm)
    }
    for (v in list(0, -1, NA, 1.5)) {
      expect_error(flows[[nm]](n_iter = v), "'n_iter'", class = "kb_error_arg",
                   label = nm)
    }
  }
  for (bad in list(function(x) NaN, function(x) Inf, function(x) c(1, 2))) {
    expect_error(svgd(x0, bad, n_iter = 1, progress = FALSE), "'score'",
                 class = "kb_error_callback")
    expect_error(ksd_descent(x0, bad, n_iter = 1, progress = FALSE), "'score'",
                 class = "kb_error_callback")
  }
  expect_error(mied(c(0, 0, 1), tg, mollifier_scale = 0, n_iter = 1, progress = FALSE),
               "coincide", class = "kb_error_numeric")
  expect_error(mmd_flow(matrix(stats::rnorm(4), 2), y, noise = function(t) NaN,
                        n_iter = 1, progress = FALSE), "'noise'",
               class = "kb_error_callback")
  expect_error(dmmd_flow(matrix(stats::rnorm(4), 2), y, lambda = NA,
                         progress = FALSE), "'lambda'", class = "kb_error_arg")
})

# ---- a prior out of the kernel's reach --------------------------------------

test_that("a prior beyond kernel_x's reach of every x is an error, not all-zero weights", {
  # every k_X(x_i, u_j) underflows to 0: mu = 0 and every posterior weight
  # was exactly 0, so posterior_mean() returned 0 as an answer
  set.seed(38)
  x <- stats::rnorm(40)
  y <- x + stats::rnorm(40, sd = 0.5)
  for (rank in list(NULL, 10)) for (method in c("kbr", "iw")) {
    expect_error(kbr(x, y, prior = c(100, 101), eps = 0.01, delta = 0.01,
                     method = method, rank = rank),
                 "'prior' is beyond the reach of kernel_x", class = "kb_error_arg")
    # far but not out of reach: a warning; the fit itself is kept
    expect_warning(f <- kbr(x, y, prior = c(9, 10), eps = 0.01, delta = 0.01,
                            method = method, rank = rank),
                   "the prior is far from all training x")
    expect_s3_class(f, "kb_kbr")
    # within reach: silent
    expect_silent(kbr(x, y, prior = c(2, 3), eps = 0.01, delta = 0.01,
                      method = method, rank = rank))
  }
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 0.1, delta = 0.1), folds = 2,
                      prior = 100), "'prior' is beyond", class = "kb_error_arg")
})

# ---- kbr_filter(): weights that vanish after a far observation --------------

test_that("kbr_filter() gives NA, not 0, at steps whose posterior weights vanished, with a warning", {
  # One observation far from the training y: its kernel values (here 1e-5,
  # above warn_far()'s 1e-8) leave the weights almost no mass; the "kbr"
  # form then shrinks them geometrically (sum |w|: 1.4, 1.8e-5, 6.7e-8,
  # 9e-12, ... 0), and exactly-zero kernel values zero every later step of
  # both forms: the filtered means were 0 from there on, silently.
  set.seed(39)
  T1 <- 60
  x <- numeric(T1)
  for (t in 2:T1) x[t] <- 0.9 * x[t - 1] + stats::rnorm(1, sd = 0.3)
  y <- x + stats::rnorm(T1, sd = 0.3)
  ky <- gaussian_kernel(bandwidth = 0.3)
  far5 <- max(y) + 0.3 * sqrt(2 * 5 * log(10))   # largest k_Y = 1e-5
  obs <- c(0.5, far5, 0.5, 0.3, 0.2)
  for (rank in list(NULL, 30)) {
    expect_warning(f <- kbr_filter(x, y, obs, kernel_y = ky, method = "kbr",
                                   rank = rank),
                   "vanished .* at 4 step\\(s\\), first at step 2.*method = \"iw\"")
    expect_true(is.finite(f$mean[1]))
    expect_true(all(is.na(f$mean[2:5])))
    expect_lt(max(colSums(abs(f$weights[, 2:5]))), 1e-3)
    expect_output(print(f), "no filtered state at 4 step\\(s\\), first at step 2")
    # "iw" loses the mass at the far step only, and recovers
    expect_warning(f <- kbr_filter(x, y, obs, kernel_y = ky, rank = rank),
                   "at 1 step\\(s\\), first at step 2")
    expect_identical(which(is.na(f$mean)), 2L)
    # (step 3 keeps 2% of the mass: shrunk, not flagged; the threshold
    # flags only a loss of 99.9%)
    expect_gt(sum(abs(f$weights[, 3])), 1e-3)
    expect_gt(min(colSums(abs(f$weights[, 4:5]))), 0.5)
    # kernel values that underflow to 0: zero weights from there on, both forms
    expect_warning(expect_warning(f <- kbr_filter(x, y, c(0.5, 100, 0.5), rank = rank),
                                  "far from all training y"),
                   "vanished .* at 2 step\\(s\\)")
    expect_identical(which(is.na(f$mean)), 2:3)
  }
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_invisible(plot(f, truth = c(0, 1, 2)))
  # healthy runs keep every step's mass (sum |w| >= 1.2 measured on the
  # 2-d rotation of test-filters.R, 3% of the observations outside the
  # training range): nothing is NA, no warning
  expect_silent(f <- kbr_filter(x, y, y[1:20]))
  expect_gt(min(colSums(abs(f$weights))), 0.5)
})

# ---- extremes: one-row grids, regularisers at 1e-12 .. 1e3, threads ---------

test_that("one-row grids, n = 2, extreme regularisers: a finite answer or a classed error", {
  set.seed(40)
  for (method in c("kbr", "iw")) for (crit in c("marginal", "regression")) {
    g <- data.frame(eps = 0.05, delta = 0.02, sigma_x = 1, sigma_y = 1)
    x <- matrix(stats::rnorm(4), 2)
    y <- x + stats::rnorm(4)
    cv <- kbr_cv(x, y, grid = g, folds = 2, method = method, criterion = crit,
                 refit = TRUE, seed = 2)
    expect_identical(nrow(cv$table), 1L)
    expect_lt(fz_rel(cv$table$criterion, fz_cv(x, y, g, 2, 2, method, crit)), 1e-12)
    expect_s3_class(cv$fit, "kb_kbr")
  }
  outcome <- character(0)
  for (kind in c("dep", "dup", "const", "two", "one")) {
    d <- fz_data(kind, 10, 2, 2)
    for (method in c("kbr", "iw")) for (eps in c(1e-12, 1e3)) for (delta in c(1e-12, 1e3)) {
      for (rank in list(NULL, 2L)) {
        r <- tryCatch({
          f <- suppressWarnings(kbr(d$x, d$y, kernel_x = gaussian_kernel(bandwidth = 1),
                                    kernel_y = gaussian_kernel(bandwidth = 1), eps = eps,
                                    delta = delta, method = method, rank = rank))
          all(is.finite(suppressWarnings(posterior_mean(f, d$y[1:2, ]))))
        }, kb_error_numeric = function(e) "numeric error")
        outcome <- c(outcome, as.character(r))
      }
    }
  }
  expect_true(all(outcome %in% c("TRUE", "numeric error")))
  expect_gt(mean(outcome == "TRUE"), 0.8)
})

test_that("kbr_filter() is identical on 1 and 2 threads on both paths", {
  set.seed(41)
  x <- cumsum(stats::rnorm(80)) / 5
  y <- x + stats::rnorm(80, sd = 0.3)
  for (method in c("iw", "kbr")) for (rank in list(NULL, 10)) {
    f1 <- kbr_filter(x, y, y[1:15], method = method, rank = rank, nthreads = 1)
    f2 <- kbr_filter(x, y, y[1:15], method = method, rank = rank, nthreads = 2)
    expect_identical(f1$weights, f2$weights)
  }
})

test_that("ksd_descent(method = \"gd\") takes one step down the KSD^2 gradient at n = 2..5, d = 1..8", {
  # KSD^2 (V-statistic) of the IMQ kernel (1 + |u|^2)^(-1/2) for N(mu, I),
  # written out per pair; its gradient by central differences
  fz_ksd2 <- function(x, mu) {
    n <- nrow(x)
    d <- ncol(x)
    S <- -sweep(x, 2, mu)
    tot <- 0
    for (i in seq_len(n)) for (j in seq_len(n)) {
      u <- x[i, ] - x[j, ]
      b <- 1 + sum(u^2)
      tot <- tot + sum(S[i, ] * S[j, ]) * b^-0.5 + sum((S[i, ] - S[j, ]) * u) * b^-1.5 +
        d * b^-1.5 - 3 * sum(u^2) * b^-2.5
    }
    tot / n^2
  }
  set.seed(42)
  for (n in c(2, 3, 5)) for (d in c(1, 4, 8)) {
    mu <- stats::rnorm(d)
    x <- matrix(stats::rnorm(n * d), n)
    if (n >= 3) x[3, ] <- x[1, ]
    f <- ksd_descent(x, gaussian_target(mu), score_jacobian = function(z) -diag(d),
                     method = "gd", step_size = 0.05, n_iter = 1, progress = FALSE)
    g <- matrix(vapply(seq_along(x), function(k) {
      a <- b <- x
      a[k] <- a[k] + 1e-5
      b[k] <- b[k] - 1e-5
      (fz_ksd2(a, mu) - fz_ksd2(b, mu)) / 2e-5
    }, 0), n)
    expect_lt(max(abs(f$x - (x - 0.05 * g))) / max(abs(0.05 * g)), 1e-7)
    expect_lt(abs(f$objective[1] / fz_ksd2(x, mu) - 1), 1e-13)
  }
})
