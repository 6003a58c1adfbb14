# Independent, deliberately plain-R reference implementations of the particle
# flows (svgd, ksd_descent, mmd_flow, dmmd_flow, mied), written from
# the formulas of the flows spec.  Nothing here calls kernbayes: test-flows.R
# compares the package against these functions.  Scores and log densities are
# passed as functions of an n x d matrix (ref_rowwise() wraps a one-point
# function).

# Apply a one-point function to every row of x, giving an n x len matrix.
ref_rowwise <- function(f, len = NULL) {
  force(f)
  function(x) {
    x <- as.matrix(x)
    out <- t(vapply(seq_len(nrow(x)), function(i) as.double(f(x[i, ])),
                    numeric(if (is.null(len)) ncol(x) else len)))
    if (nrow(out) != nrow(x)) out <- t(out)  # a d = 1 vapply drops a dim
    out
  }
}

# All n^2 squared distances between the rows of a and of b (a plain sum over
# coordinates of outer differences).
ref_sqdist <- function(a, b = a) {
  a <- as.matrix(a)
  b <- as.matrix(b)
  D2 <- matrix(0, nrow(a), nrow(b))
  for (k in seq_len(ncol(a))) D2 <- D2 + outer(a[, k], b[, k], "-")^2
  D2
}

# ---- SVGD ----------------------------------------------------------------------

# One evaluation of the SVGD direction at x with scores S: bandwidth, kernel,
# the repulsive term, phi and the KSD^2 objective with that Gaussian kernel.
ref_svgd_direction <- function(x, S, bandwidth = "median") {
  n <- nrow(x)
  d <- ncol(x)
  D2 <- ref_sqdist(x)
  h2 <- if (identical(bandwidth, "median")) {
    0.5 * stats::median(D2) / log(n + 1)
  } else {
    bandwidth^2
  }
  K <- exp(-D2 / (2 * h2))
  rep <- (x * rowSums(K) - K %*% x) / h2
  KS <- K %*% S
  phi <- (KS + rep) / n
  obj <- (sum(S * KS) + 2 * sum(S * rep) + sum(K * (d / h2 - D2 / h2^2))) / n^2
  list(phi = phi, h = sqrt(h2), objective = obj, K = K, D2 = D2, rep = rep)
}

# The whole SVGD run.  score_mat: function of an n x d matrix.  Returns the
# final particles, objective and bandwidth per iteration and all iterates
# (xs[[t + 1]] = positions after t updates).
ref_svgd <- function(x0, score_mat, n_iter, step, bandwidth = "median",
                     optimizer = "adagrad", alpha = 0.9) {
  x <- as.matrix(x0)
  n <- nrow(x)
  obj <- numeric(n_iter)
  bw <- numeric(n_iter)
  xs <- vector("list", n_iter + 1L)
  xs[[1]] <- x
  hist <- NULL
  m <- v <- matrix(0, n, ncol(x))
  for (t in seq_len(n_iter)) {
    S <- as.matrix(score_mat(x))
    dir <- ref_svgd_direction(x, S, bandwidth)
    phi <- dir$phi
    obj[t] <- dir$objective
    bw[t] <- dir$h
    if (optimizer == "adagrad") {
      hist <- if (t == 1) phi^2 else alpha * hist + (1 - alpha) * phi^2
      x <- x + step * phi / (1e-6 + sqrt(hist))
    } else if (optimizer == "sgd") {
      x <- x + step * phi
    } else {
      m <- 0.9 * m + 0.1 * phi
      v <- 0.999 * v + 0.001 * phi^2
      x <- x + step * (m / (1 - 0.9^t)) / (sqrt(v / (1 - 0.999^t)) + 1e-8)
    }
    xs[[t + 1L]] <- x
  }
  list(x = x, objective = obj, bandwidth = bw, xs = xs)
}

# KSD^2 (V-statistic) with the Gaussian kernel exp(-|x - y|^2 / (2 h^2)) as a
# plain double sum of the Stein kernel written with explicit gradients:
#   u(x, y) = k s_x.s_y + s_x.grad_y k + s_y.grad_x k + tr grad_x grad_y k,
#   grad_x k = -k (x - y) / h^2, grad_y k = k (x - y) / h^2,
#   tr grad_x grad_y k = k (d / h^2 - |x - y|^2 / h^4).
ref_gauss_stein_ksd2 <- function(x, S, h) {
  n <- nrow(x)
  d <- ncol(x)
  tot <- 0
  for (i in seq_len(n)) for (j in seq_len(n)) {
    u <- x[i, ] - x[j, ]
    r2 <- sum(u^2)
    k <- exp(-r2 / (2 * h^2))
    gx <- -k * u / h^2
    gy <- k * u / h^2
    tot <- tot + k * sum(S[i, ] * S[j, ]) + sum(S[i, ] * gy) +
      sum(S[j, ] * gx) + k * (d / h^2 - r2 / h^4)
  }
  tot / n^2
}

# ---- KSD descent ----------------------------------------------------------------

# phi, phi', phi'', phi''' of IMQ (c + r)^beta or Gaussian exp(-r / 2).
ref_phi3 <- function(type, r, c = 1, beta = -0.5) {
  if (type == "imq") {
    t <- c + r
    list(p0 = t^beta, p1 = beta * t^(beta - 1),
         p2 = beta * (beta - 1) * t^(beta - 2),
         p3 = beta * (beta - 1) * (beta - 2) * t^(beta - 3))
  } else {
    e <- exp(-r / 2)
    list(p0 = e, p1 = -e / 2, p2 = e / 4, p3 = -e / 8)
  }
}

# KSD^2 = (1/n^2) sum_ij k_p(x_i, x_j) for an isotropic kernel phi(lam |u|^2)
# and its analytic gradient in every particle.  The Stein kernel (u = x - y,
# L = lam I):
#   k_p = s_x.s_y phi + 2 lam phi' u.(s_y - s_x) - 4 lam^2 phi'' |u|^2
#         - 2 d lam phi'.
# Its total derivative in x (J = Jacobian of the score at x, symmetric):
#   J s_y phi + 2 lam phi' (s_x.s_y) u
#   + 4 lam^2 phi'' (u.(s_y - s_x)) u + 2 lam phi' (s_y - s_x) - 2 lam phi' J u
#   - 8 lam^3 phi''' |u|^2 u - 8 lam^2 phi'' u - 4 d lam^2 phi'' u,
# and, k_p being symmetric, d KSD^2 / d x_i = (2/n^2) sum_j D_x k_p(x_i, x_j).
# score_mat: function of an n x d matrix; jac: function of one point (d x d).
ref_ksd_objective <- function(x, score_mat, jac, type = "imq", lam = 1,
                              c = 1, beta = -0.5) {
  x <- as.matrix(x)
  n <- nrow(x)
  d <- ncol(x)
  S <- as.matrix(score_mat(x))
  val <- 0
  G <- matrix(0, n, d)
  for (i in seq_len(n)) {
    J <- matrix(jac(x[i, ]), d, d)
    for (j in seq_len(n)) {
      u <- x[i, ] - x[j, ]
      r2 <- sum(u^2)
      p <- ref_phi3(type, lam * r2, c, beta)
      sx <- S[i, ]
      sy <- S[j, ]
      val <- val + sum(sx * sy) * p$p0 + 2 * lam * p$p1 * sum(u * (sy - sx)) -
        4 * lam^2 * p$p2 * r2 - 2 * d * lam * p$p1
      G[i, ] <- G[i, ] + drop(J %*% sy) * p$p0 + 2 * lam * p$p1 * sum(sx * sy) * u +
        4 * lam^2 * p$p2 * sum(u * (sy - sx)) * u + 2 * lam * p$p1 * (sy - sx) -
        2 * lam * p$p1 * drop(J %*% u) - 8 * lam^3 * p$p3 * r2 * u -
        8 * lam^2 * p$p2 * u - 4 * d * lam^2 * p$p2 * u
    }
  }
  list(value = val / n^2, gradient = 2 * G / n^2)
}

# Plain gradient descent on KSD^2 with a fixed step.
ref_ksd_gd <- function(x0, score_mat, jac, n_iter, step, ...) {
  x <- as.matrix(x0)
  obj <- numeric(n_iter)
  for (t in seq_len(n_iter)) {
    o <- ref_ksd_objective(x, score_mat, jac, ...)
    obj[t] <- o$value
    x <- x - step * o$gradient
  }
  list(x = x, objective = obj)
}

# ---- MMD and DrMMD flows -------------------------------------------------------

# Gaussian kernel matrix exp(-|a - b|^2 / (2 s^2)) and the gradient in z of
# (1/m) sum_j k(z, p_j) weighted by w (default 1/m): -sum_j w_j k (z - p_j)/s^2.
ref_gk <- function(a, b, s) exp(-ref_sqdist(a, b) / (2 * s^2))
ref_gk_grad <- function(z, p, s, w = rep(1 / nrow(p), nrow(p))) {
  K <- ref_gk(z, p, s)
  KW <- sweep(K, 2, w, "*")
  -(z * rowSums(KW) - KW %*% p) / s^2
}

# MMD witness f(z) = mean_j k(z, x_j) - mean_m k(z, y_m) and its gradient.
ref_mmd_witness <- function(z, x, y, s) {
  z <- as.matrix(z)
  list(value = rowMeans(ref_gk(z, x, s)) - rowMeans(ref_gk(z, y, s)),
       grad = ref_gk_grad(z, x, s) - ref_gk_grad(z, y, s))
}

ref_flow_mmd2 <- function(x, y, s) {
  mean(ref_gk(x, x, s)) - 2 * mean(ref_gk(x, y, s)) + mean(ref_gk(y, y, s))
}

# DrMMD witness h(z) = (g(z) - k(z, Y) beta) / lambda, beta = (K_yy + M lambda
# I)^{-1} g(Y), with solve(); also returns beta and g(Y).
ref_dmmd_witness <- function(z, x, y, lambda, s) {
  z <- as.matrix(z)
  M <- nrow(y)
  gY <- ref_mmd_witness(y, x, y, s)$value
  beta <- solve(ref_gk(y, y, s) + M * lambda * diag(M), gY)
  g <- ref_mmd_witness(z, x, y, s)
  list(value = (g$value - drop(ref_gk(z, y, s) %*% beta)) / lambda,
       grad = (g$grad - ref_gk_grad(z, y, s, w = beta)) / lambda,
       beta = beta, gY = gY)
}

ref_dmmd_objective <- function(x, y, lambda, s) {
  w <- ref_dmmd_witness(y[1, , drop = FALSE], x, y, lambda, s)
  (1 + lambda) / lambda * (ref_flow_mmd2(x, y, s) - sum(w$gY * w$beta))
}

# Both flows: x_i <- x_i - step * c grad w(z_i), z_i = x_i + beta_t u_i,
# beta_t = noise / sqrt(t), u = matrix(rnorm(n * d), n, d) drawn only when
# noise > 0; c = 1 (MMD) or 2 (1 + lambda) (DrMMD).
ref_mmd_flow <- function(x0, y, s, n_iter, step, noise = 0, lambda = NULL) {
  x <- as.matrix(x0)
  n <- nrow(x)
  d <- ncol(x)
  obj <- numeric(n_iter)
  for (t in seq_len(n_iter)) {
    z <- x
    if (noise > 0) {
      z <- x + noise / sqrt(t) * matrix(stats::rnorm(n * d), n, d)
    }
    if (is.null(lambda)) {
      obj[t] <- ref_flow_mmd2(x, y, s)
      x <- x - step * ref_mmd_witness(z, x, y, s)$grad
    } else {
      obj[t] <- ref_dmmd_objective(x, y, lambda, s)
      x <- x - step * 2 * (1 + lambda) * ref_dmmd_witness(z, x, y, lambda, s)$grad
    }
  }
  list(x = x, objective = obj)
}

# Three circles of radius 0.3 centred at (0, 0), (0, -0.75), (0, -1.5), m
# evenly spaced points each.
ref_three_rings <- function(m = 100) {
  th <- 2 * pi * (seq_len(m) - 1) / m
  do.call(rbind, lapply(c(0, -0.75, -1.5), function(cy) {
    cbind(0.3 * cos(th), cy + 0.3 * sin(th))
  }))
}

# ---- MIED ----------------------------------------------------------------------

# log E and its gradient for the mollified interaction energy of Li et al.
# (2023), E = (1/n^2) sum_{i != j} w_ij with
#   w_ij = (|x_i - x_j|^2 + eps^2)^(-s/2) (p(x_i) p(x_j))^(-alpha),
# alpha = 1/2 (their default), i.e. w_ij = ... * exp(+(V_i + V_j) / 2) with
# V = -log p.  (The flows spec writes exp(-(V_i + V_j) / 2), i.e. weights
# sqrt(p_i p_j): minimising that energy drives the particles away from the
# mode, so the reference uses the sign of the paper.)  Gradient in x_i:
#   2 sum_{j != i} w_ij [-s (x_i - x_j) / (|x_i - x_j|^2 + eps^2)
#                        - 2 alpha score(x_i) / 2] / sum_{i != j} w_ij.
# Written with matrices; checked against a double loop and finite differences
# in test-flows.R.
ref_mied_objective <- function(x, logd_mat, score_mat, s, eps, alpha = 0.5) {
  x <- as.matrix(x)
  n <- nrow(x)
  V <- -as.double(logd_mat(x))
  S <- as.matrix(score_mat(x))
  D2e <- ref_sqdist(x) + eps^2
  W <- D2e^(-s / 2) * exp(alpha * outer(V, V, "+"))
  diag(W) <- 0
  A <- W / D2e
  tot <- sum(W)
  G <- -s * (x * rowSums(A) - A %*% x) - alpha * rowSums(W) * S
  list(value = log(tot / n^2), gradient = 2 * G / tot)
}

# The same value as an explicit double loop over i != j (for checking).
ref_mied_value_loop <- function(x, logd_mat, s, eps, alpha = 0.5) {
  x <- as.matrix(x)
  n <- nrow(x)
  lp <- as.double(logd_mat(x))
  tot <- 0
  for (i in seq_len(n)) for (j in seq_len(n)) {
    if (i != j) {
      tot <- tot + (sum((x[i, ] - x[j, ])^2) + eps^2)^(-s / 2) *
        exp(-alpha * (lp[i] + lp[j]))
    }
  }
  log(tot / n^2)
}

# Descent on log E: sgd x -= step g, or adam as in svgd with x -= ...
# `correct(g, x)`, if given, replaces the gradient before the step (the
# constraint's barrier in test-flow-constraint.R).
ref_mied <- function(x0, logd_mat, score_mat, n_iter, step, s = NULL,
                     eps = 1e-8, optimizer = "adam", correct = NULL) {
  x <- as.matrix(x0)
  if (is.null(s)) s <- ncol(x) + 1
  obj <- numeric(n_iter)
  m <- v <- 0 * x
  for (t in seq_len(n_iter)) {
    o <- ref_mied_objective(x, logd_mat, score_mat, s, eps)
    obj[t] <- o$value
    g <- o$gradient
    if (!is.null(correct)) g <- correct(g, x)
    if (optimizer == "sgd") {
      x <- x - step * g
    } else {
      m <- 0.9 * m + 0.1 * g
      v <- 0.999 * v + 0.001 * g^2
      x <- x - step * (m / (1 - 0.9^t)) / (sqrt(v / (1 - 0.999^t)) + 1e-8)
    }
  }
  list(x = x, objective = obj)
}

# ---- generic ---------------------------------------------------------------------

# Central finite-difference gradient of a scalar function of a matrix.
ref_num_grad_mat <- function(f, x, h = 1e-5) {
  g <- x
  for (k in seq_along(x)) {
    e <- replace(0 * x, k, h)
    g[k] <- (f(x + e) - f(x - e)) / (2 * h)
  }
  g
}

# Smallest distance between two distinct rows.
ref_min_pairdist <- function(x) min(stats::dist(x))

# ---- interrupts ------------------------------------------------------------------

# A closure that sends SIGINT to this R process on its k-th call (an
# in-process Ctrl-C) and counts its calls in env$calls.
interrupting <- function(f, k, env) {
  force(f)
  env$calls <- 0
  function(...) {
    env$calls <- env$calls + 1
    if (env$calls == k) tools::pskill(Sys.getpid(), tools::SIGINT)
    f(...)
  }
}

# Run `code` (R source that calls report("started") once the long call is
# under way, and evaluates the long call as `res <- ...`) in a child Rscript,
# send it SIGINT after it reports, and return the child's output lines and
# the seconds from the interrupt to its exit (NA if it is still running
# after `limit` seconds; then it is killed).  The child prints INTERRUPTED
# when the call signals an interrupt and RETURNED when it returns.
run_interrupted_child <- function(code, limit = 120) {
  dir <- tempfile("kbint")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  out <- file.path(dir, "out.txt")
  script <- file.path(dir, "child.R")
  writeLines(c(
    "suppressMessages(library(kernbayes))",
    sprintf("report <- function(s) cat(s, Sys.getpid(), '\\n', file = %s, append = TRUE)",
            deparse(out)),
    "r <- tryCatch({",
    code,
    "  'RETURNED'",
    "}, interrupt = function(e) 'INTERRUPTED')",
    "report(r)",
    "report('EXIT')"), script)
  system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(script)),
          stdout = FALSE, stderr = FALSE, wait = FALSE,
          env = sprintf("R_LIBS=%s", paste(.libPaths(), collapse = .Platform$path.sep)))
  read_out <- function() if (file.exists(out)) readLines(out, warn = FALSE) else character()
  t0 <- Sys.time()
  while (!any(grepl("^started", read_out())) &&
         difftime(Sys.time(), t0, units = "secs") < limit) Sys.sleep(0.1)
  lines <- read_out()
  if (!any(grepl("^started", lines))) return(list(lines = lines, seconds = NA))
  pid <- as.integer(strsplit(grep("^started", lines, value = TRUE)[1L], " ")[[1L]][2L])
  Sys.sleep(0.5)                      # well inside the C computation
  tools::pskill(pid, tools::SIGINT)
  t1 <- Sys.time()
  # until it reports its exit, or dies (an interrupt that escaped), or the
  # time limit
  while (!any(grepl("^EXIT", read_out())) && isTRUE(tools::pskill(pid, 0)) &&
         difftime(Sys.time(), t1, units = "secs") < limit) Sys.sleep(0.05)
  secs <- as.numeric(difftime(Sys.time(), t1, units = "secs"))
  lines <- read_out()
  if (!any(grepl("^EXIT", lines))) {
    if (isTRUE(tools::pskill(pid, 0))) tools::pskill(pid, tools::SIGKILL)
    secs <- NA
  }
  list(lines = lines, seconds = secs)
}

# The energy with the Gaussian or Laplace mollifier of Li et al. (2023),
# written from the formulas as an explicit double loop (no normalising
# constant): phi(u) = exp(-|u|^2 / (2 eps^2)) or exp(-|u| / eps);
# E = (1/n^2) sum_{i, j} phi(x_i - x_j) / sqrt(p(x_i) p(x_j)), the pairs
# i = j included (Li et al.'s discrete energy; phi(0) = 1).
ref_mied_value_moll <- function(x, logd_mat, eps, mollifier) {
  x <- as.matrix(x)
  n <- nrow(x)
  lp <- as.double(logd_mat(x))
  tot <- 0
  for (i in seq_len(n)) for (j in seq_len(n)) {
    u <- sqrt(sum((x[i, ] - x[j, ])^2))
    phi <- if (mollifier == "gaussian") exp(-u^2 / (2 * eps^2)) else
      exp(-u / eps)
    tot <- tot + phi / sqrt(exp(lp[i] + lp[j]))
  }
  log(tot / n^2)
}

# The banana of issue 33: x1 ~ N(0, 1), x2 | x1 ~ N(x1^2 - 1, 1), so
# E x2 = 0 and var x2 = var(x1^2) + 1 = 2 + 1: sds 1 and sqrt(3) = 1.73.
flow_banana <- function() {
  kb_target(function(x) -x[, 1]^2 / 2 - (x[, 2] - x[, 1]^2 + 1)^2 / 2,
            function(x) {
              r <- x[, 2] - x[, 1]^2 + 1
              cbind(-x[, 1] + 2 * x[, 1] * r, -r)
            }, dim = 2, vectorized = TRUE, name = "banana")
}

# The stopping rule from its definition, on the iterates x_1..x_T (an
# n x d x (T + 1) trace whose first slice is the start): per iteration the
# coordinates' means and sds (1/n), averaged over windows of w iterations;
# the first window k >= 2 whose averages differ from window k - 1's by less
# than tol times window k's sds. NA if none.
ref_settle_iter <- function(trace, tol, w = 50) {
  nt <- dim(trace)[3] - 1
  mom <- t(vapply(seq_len(nt), function(t) {
    x <- trace[, , t + 1, drop = FALSE]
    x <- matrix(x, dim(trace)[1])
    m <- colMeans(x)
    c(m, sqrt(colMeans(sweep(x, 2, m)^2)))
  }, numeric(2 * dim(trace)[2])))
  d <- dim(trace)[2]
  prev <- NULL
  for (k in seq_len(nt %/% w)) {
    cur <- colMeans(mom[(k - 1) * w + seq_len(w), , drop = FALSE])
    if (!is.null(prev)) {
      sc <- cur[d + seq_len(d)]
      if (max(abs(cur - prev) / c(sc, sc)) < tol) return(k * w)
    }
    prev <- cur
  }
  NA
}
