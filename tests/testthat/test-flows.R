# Particle flows (R/flows.R, src/flows.c): svgd(), ksd_descent(), mmd_flow(),
# dmmd_flow() and mied() against the plain-R references of helper-flows.R
# (written from the formulas of the flows spec), the internal objective and
# witness helpers against finite differences, behaviour on small targets,
# structure of the result, and errors.

# A Gaussian target N(mu, Sigma) in dimension d: one-point score, a
# vectorised kb_target and the matrix score for the references.
flow_gauss <- function(d, seed) {
  set.seed(seed)
  mu <- seq(-1, 1, length.out = d)
  Sigma <- ref_spd(d)
  P <- solve(Sigma)
  list(mu = mu, Sigma = Sigma, P = P,
       score1 = function(x) -drop(solve(Sigma, x - mu)),
       score_mat = function(x) -sweep(as.matrix(x), 2, mu) %*% P,
       logd_mat = function(x) ref_dmvnorm_log(x, mu, Sigma),
       target_vec = kb_target(
         function(x) -0.5 * rowSums((sweep(x, 2, mu) %*% P) * sweep(x, 2, mu)),
         function(x) -sweep(x, 2, mu) %*% P, dim = d, vectorized = TRUE))
}

# A non-Gaussian target with a position-dependent Hessian: a correlated
# Gaussian times independent Student-t factors (nu = 3).
#   log p = -x'Px/2 - 2 sum log(1 + x_k^2 / 3)
flow_tnorm <- function(d) {
  P <- diag(d) + 0.3 * (matrix(1, d, d) - diag(d))
  list(score1 = function(x) -drop(P %*% x) - 4 * x / (3 + x^2),
       jac1 = function(x) -P - diag(4 * (3 - x^2) / (3 + x^2)^2, d),
       score_mat = function(x) {
         x <- as.matrix(x)
         -x %*% P - 4 * x / (3 + x^2)
       },
       logd1 = function(x) -0.5 * sum(x * (P %*% x)) - 2 * sum(log(1 + x^2 / 3)))
}

# ---- svgd: agreement with the reference -----------------------------------------

test_that("svgd() equals the plain-R update after 50 iterations: (n, d), optimizers, bandwidths", {
  cases <- list(c(10, 1), c(30, 2), c(25, 5))
  for (cs in cases) {
    n <- cs[1]
    d <- cs[2]
    g <- flow_gauss(d, 600 + d)
    x0 <- matrix(rnorm(n * d, sd = 1.5), n, d) + 2
    for (opt in c("adagrad", "sgd", "adam")) {
      for (bw in list("median", 0.9)) {
        lab <- sprintf("n = %d, d = %d, %s, bandwidth %s", n, d, opt, bw)
        step <- if (opt == "sgd") 0.05 else 0.02
        ref <- ref_svgd(x0, g$score_mat, 50, step, bw, opt)
        fit <- svgd(x0, g$score1, n_iter = 50, step_size = step, bandwidth = bw,
                    optimizer = opt, progress = FALSE)
        expect_s3_class(fit, "kb_particles")
        expect_identical(dim(fit$x), c(as.integer(n), as.integer(d)))
        expect_lt(rel_err(fit$x, ref$x), 1e-10, label = paste("x:", lab))
        expect_lt(rel_err(fit$objective, ref$objective), 1e-10,
                  label = paste("objective:", lab))
        expect_lt(rel_err(fit$bandwidth, ref$bandwidth), 1e-10,
                  label = paste("bandwidth:", lab))
        # the particles moved: the comparison is not trivial
        expect_gt(max(abs(fit$x - x0)), 0.1)
      }
    }
    # the same run with a vectorised kb_target, and with gaussian_target()
    ref <- ref_svgd(x0, g$score_mat, 50, 0.02)
    fv <- svgd(x0, g$target_vec, n_iter = 50, step_size = 0.02, progress = FALSE)
    expect_lt(rel_err(fv$x, ref$x), 1e-10)
    expect_lt(rel_err(fv$objective, ref$objective), 1e-10)
    fg <- svgd(x0, gaussian_target(g$mu, g$Sigma), n_iter = 50, step_size = 0.02,
               progress = FALSE)
    expect_lt(rel_err(fg$x, ref$x), 1e-10)
  }
})

test_that("svgd(): the reference's KSD^2 objective is the Gaussian Stein kernel double sum", {
  # guards the reference itself: the closed form used by ref_svgd_direction()
  # against u(x_i, x_j) = k s_i.s_j + s_i.grad_y k + s_j.grad_x k + tr
  set.seed(601)
  for (d in 1:3) {
    x <- matrix(rnorm(12 * d), 12)
    S <- matrix(rnorm(12 * d), 12)
    dir <- ref_svgd_direction(x, S, "median")
    expect_lt(rel_err(dir$objective, ref_gauss_stein_ksd2(x, S, dir$h)), 1e-12)
    # and the Stein kernel of helper-reference.R with L = I / h^2
    K <- ref_stein_cross(x, S, type = "gaussian", L = diag(d) / dir$h^2)
    expect_lt(rel_err(dir$objective, mean(K)), 1e-12)
  }
  # svgd's objective is ksd()^2 with gaussian_kernel(bandwidth = h) at x0
  g <- flow_gauss(2, 602)
  x0 <- matrix(rnorm(40), 20)
  fit <- svgd(x0, g$score1, n_iter = 1, step_size = 0.01, progress = FALSE)
  expect_equal(fit$objective[1],
               ksd(x0, g$score1, gaussian_kernel(bandwidth = fit$bandwidth[1]), standardize = FALSE)^2,
               tolerance = 1e-10)
  expect_equal(fit$bandwidth[1],
               sqrt(0.5 * median(ref_sqdist(x0)) / log(21)), tolerance = 1e-12)
  expect_identical(fit$objective_name, "KSD^2")
})

test_that("svgd() is identical on 1 and 2 threads at sizes that run threaded, and equals the reference", {
  skip_on_cran()
  # the direction's tiles are dealt to lanes summed in a fixed order
  # (src/flows.c, svgd_lanes), so particles, bandwidths and the KSD^2 trace
  # do not depend on the thread count.  At n = 1000 (136 tiles of 64 x 64
  # pairs, ~5.6e6 work units for d = 3) and n = 2100 the work is far above
  # KB_PAR_MIN_WORK (5e5, src/runtime.h), so two threads really run; n =
  # 6200 has several rounds of 8 lanes (more lanes than threads).
  for (cs in list(c(1000, 3), c(2100, 2), c(6200, 2))) {
    n <- cs[1]
    d <- cs[2]
    g <- flow_gauss(d, 640 + d)
    x0 <- matrix(rnorm(n * d, sd = 1.5), n, d) + 1
    it <- if (n > 5000) 1 else 2
    lab <- sprintf("n = %d, d = %d", n, d)
    f1 <- svgd(x0, g$target_vec, n_iter = it, step_size = 0.05, keep_every = 1,
               progress = FALSE, nthreads = 1)
    f2 <- svgd(x0, g$target_vec, n_iter = it, step_size = 0.05, keep_every = 1,
               progress = FALSE, nthreads = 2)
    expect_identical(f2$x, f1$x, label = lab)
    expect_identical(f2$trace, f1$trace, label = lab)
    expect_identical(f2$bandwidth, f1$bandwidth, label = lab)
    expect_identical(f2$objective, f1$objective, label = lab)
    expect_gt(max(abs(f1$x - x0)), 1e-3)
    if (n > 5000) next
    ref <- ref_svgd(x0, g$score_mat, it, 0.05)
    expect_lt(rel_err(f1$x, ref$x), 1e-10, label = lab)
    expect_lt(rel_err(f1$objective, ref$objective), 1e-10, label = lab)
    expect_lt(rel_err(f1$bandwidth, ref$bandwidth), 1e-12, label = lab)
  }
})

# ---- svgd: behaviour --------------------------------------------------------------

test_that("svgd() on a 2-d Gaussian recovers its mean and covariance", {
  skip_under_valgrind()
  mu <- c(1, -1)
  Sigma <- matrix(c(1, 0.5, 0.5, 2), 2)
  set.seed(603)
  x0 <- matrix(rnorm(300), 150)
  fit <- svgd(x0, gaussian_target(mu, Sigma), n_iter = 500, step_size = 0.05,
              progress = FALSE)
  expect_lt(max(abs(colMeans(fit$x) - mu)), 0.1)
  expect_lt(max(abs(cov(fit$x) - Sigma)), 0.25)
  # the KSD^2 fell by orders of magnitude
  expect_lt(fit$objective[length(fit$objective)], fit$objective[1] / 100)
})

test_that("svgd() on the mixture 1/3 N(-2, 1) + 2/3 N(2, 1) from N(-10, 1) populates both modes", {
  skip_under_valgrind()
  mix <- gaussian_mixture_target(means = matrix(c(-2, 2), 2), covs = 1,
                                 weights = c(1, 2) / 3)
  set.seed(604)
  x0 <- rnorm(100, -10)
  fit <- svgd(x0, mix, n_iter = 500, step_size = 0.25, progress = FALSE)
  expect_identical(dim(fit$x), c(100L, 1L))
  frac <- mean(fit$x > 0)
  expect_gt(frac, 0.45)
  expect_lt(frac, 0.85)
  expect_gt(sum(fit$x < -1), 15)   # the left mode is populated
  expect_gt(sum(fit$x > 1), 40)    # and the right
  # mean 2/3, sd sqrt(1 + 32 / 9) = 2.13
  expect_lt(abs(mean(fit$x) - 2 / 3), 0.5)
  expect_lt(abs(sd(fit$x) - sqrt(1 + 32 / 9)), 0.4)
})

# ---- ksd_descent ------------------------------------------------------------------

test_that("ksd_objective() value is ksd()^2 and the reference; gradient is analytic and matches finite differences", {
  kernels <- list(
    imq = list(k = imq_kernel(), type = "imq", lam = 1),
    gauss = list(k = gaussian_kernel(bandwidth = 0.8), type = "gaussian",
                 lam = 1 / 0.8^2))
  set.seed(605)
  for (d in 1:3) {
    tn <- flow_tnorm(d)
    x <- matrix(rnorm(9 * d), 9, d)
    for (kn in names(kernels)) {
      kk <- kernels[[kn]]
      lab <- sprintf("%s, d = %d", kn, d)
      ref <- ref_ksd_objective(x, tn$score_mat, tn$jac1, kk$type, kk$lam)
      got <- kernbayes:::ksd_objective(x, tn$score1, kk$k,
                                       score_jacobian = tn$jac1)
      expect_equal(got$value, ksd(x, tn$score1, kk$k, standardize = FALSE)^2, tolerance = 1e-12,
                   label = paste("value vs ksd()^2:", lab))
      expect_lt(rel_err(got$value, ref$value), 1e-12, label = lab)
      expect_identical(dim(got$gradient), dim(x))
      expect_lt(rel_err(got$gradient, ref$gradient), 1e-10,
                label = paste("gradient vs reference:", lab))
      fd <- ref_num_grad_mat(function(z) {
        kernbayes:::ksd_objective(z, tn$score1, kk$k,
                                  score_jacobian = tn$jac1)$value
      }, x)
      expect_lt(rel_err(got$gradient, fd), 1e-6,
                label = paste("gradient vs finite differences:", lab))
      # without the Jacobian: finite differences of the score inside
      got_fd <- kernbayes:::ksd_objective(x, tn$score1, kk$k)
      expect_equal(got_fd$value, got$value, tolerance = 1e-12)
      expect_lt(rel_err(got_fd$gradient, fd), 1e-5,
                label = paste("FD-Jacobian gradient:", lab))
    }
  }
  # the reference gradient itself against finite differences of its value
  tn <- flow_tnorm(2)
  x <- matrix(rnorm(12), 6)
  ref <- ref_ksd_objective(x, tn$score_mat, tn$jac1, "imq", 1)
  fd <- ref_num_grad_mat(function(z) {
    ref_ksd_objective(z, tn$score_mat, tn$jac1, "imq", 1)$value
  }, x)
  expect_lt(rel_err(ref$gradient, fd), 1e-7)
})

test_that("ksd_descent(method = 'gd') with a fixed step equals the plain-R descent; kernel resolved once on x0", {
  set.seed(606)
  tn <- flow_tnorm(2)
  x0 <- matrix(rnorm(20, sd = 0.7), 10) + 1
  fit <- ksd_descent(x0, tn$score1, score_jacobian = tn$jac1, method = "gd",
                     n_iter = 5, step_size = 0.2, progress = FALSE)
  ref <- ref_ksd_gd(x0, tn$score_mat, tn$jac1, 5, 0.2, type = "imq", lam = 1)
  expect_lt(rel_err(fit$x, ref$x), 1e-10)
  expect_lt(rel_err(fit$objective, ref$objective), 1e-10)
  expect_identical(fit$objective_name, "KSD^2")
  # gaussian_kernel() ("med"): the bandwidth is the median distance of x0,
  # kept fixed while the particles move
  fit <- ksd_descent(x0, tn$score1, score_jacobian = tn$jac1,
                     kernel = gaussian_kernel(), method = "gd", n_iter = 5,
                     step_size = 0.2, progress = FALSE)
  ref <- ref_ksd_gd(x0, tn$score_mat, tn$jac1, 5, 0.2, type = "gaussian",
                    lam = 1 / ref_med_bw(x0)^2)
  expect_lt(rel_err(fit$x, ref$x), 1e-10)
  expect_lt(rel_err(fit$objective, ref$objective), 1e-10)
})

test_that("ksd_descent() decreases the KSD with 'gd' (line search) and 'lbfgs'", {
  set.seed(607)
  tg <- gaussian_target(c(0, 0), matrix(c(1, 0.3, 0.3, 1), 2))
  x0 <- matrix(rnorm(40, sd = 0.5), 20) + 1.5
  k0 <- ksd(x0, tg, standardize = FALSE)
  # gd with the backtracking line search: every accepted step decreases
  gd <- ksd_descent(x0, tg, method = "gd", n_iter = 30, progress = FALSE)
  expect_length(gd$objective, 30)
  expect_equal(gd$objective[1], k0^2, tolerance = 1e-10)
  expect_true(all(diff(gd$objective) <= 1e-14 * gd$objective[1]))
  expect_lt(ksd(gd$x, tg, standardize = FALSE), k0 / 2)
  # L-BFGS-B: one objective value per function evaluation, first at x0
  lb <- ksd_descent(x0, tg, method = "lbfgs", n_iter = 30, progress = FALSE)
  expect_equal(lb$objective[1], k0^2, tolerance = 1e-10)
  expect_lt(ksd(lb$x, tg, standardize = FALSE), k0 / 2)
  expect_lt(min(lb$objective), lb$objective[1])
  # with a finite-difference score (kb_target without score) and a Jacobian
  # by finite differences too
  tfd <- suppressMessages(kb_target(function(x) -0.5 * sum(x^2), dim = 2))
  gd2 <- ksd_descent(x0, tfd, method = "gd", n_iter = 10,
                     kernel = gaussian_kernel(bandwidth = 1), progress = FALSE)
  expect_true(all(diff(gd2$objective) <= 1e-12 * gd2$objective[1]))
  expect_lt(gd2$objective[10], gd2$objective[1])
})

# ---- mmd_flow / dmmd_flow ---------------------------------------------------------

rings_problem <- function(n = 50, m = 100, seed = 610) {
  set.seed(seed)
  y <- ref_three_rings(m)
  x0 <- cbind(rnorm(n, 0, 0.01), rnorm(n, -0.3, 0.01))
  list(y = y, x0 = x0, s = ref_med_bw(y))
}

test_that("mmd_witness() and dmmd_witness() equal plain-R transcriptions and finite differences", {
  pr <- rings_problem()
  y <- pr$y
  x <- pr$x0
  set.seed(611)
  z <- rbind(matrix(rnorm(14, sd = 0.5), 7), x[1:3, ], y[c(1, 150), ])
  for (bw in list(NULL, 0.4)) {
    kern <- if (is.null(bw)) gaussian_kernel() else gaussian_kernel(bandwidth = bw)
    s <- if (is.null(bw)) pr$s else bw
    rk <- kernbayes:::resolve_kernel(kern, y)
    w <- kernbayes:::mmd_witness(z, x, y, rk)
    expect_identical(dim(w$grad), dim(z))
    expect_length(w$value, nrow(z))
    ref <- ref_mmd_witness(z, x, y, s)
    expect_lt(rel_err(w$value, ref$value), 1e-10)
    expect_lt(rel_err(w$grad, ref$grad), 1e-10)
    fd <- ref_num_grad_mat(function(zz) {
      sum(kernbayes:::mmd_witness(zz, x, y, rk)$value)
    }, z)
    expect_lt(rel_err(w$grad, fd), 1e-7)
    for (lambda in c(1e-3, 0.1, 10)) {
      lab <- sprintf("lambda = %g, bandwidth %s", lambda, format(s))
      w <- kernbayes:::dmmd_witness(z, x, y, lambda, rk)
      expect_identical(dim(w$grad), dim(z))
      # transcription with chol(): beta = (K_yy + M lambda I)^{-1} g(Y)
      M <- nrow(y)
      R <- chol(ref_gk(y, y, s) + M * lambda * diag(M))
      gY <- ref_mmd_witness(y, x, y, s)$value
      beta <- backsolve(R, forwardsolve(t(R), gY))
      hv <- (ref_mmd_witness(z, x, y, s)$value - drop(ref_gk(z, y, s) %*% beta)) / lambda
      ref <- ref_dmmd_witness(z, x, y, lambda, s)
      expect_lt(rel_err(ref$value, hv), 1e-10)          # chol() vs solve()
      expect_lt(rel_err(w$value, hv), 1e-10, label = lab)
      expect_lt(rel_err(w$grad, ref$grad), 1e-10, label = lab)
      fd <- ref_num_grad_mat(function(zz) {
        sum(kernbayes:::dmmd_witness(zz, x, y, lambda, rk)$value)
      }, z)
      expect_lt(rel_err(w$grad, fd), 1e-6, label = paste("FD:", lab))
    }
  }
})

test_that("mmd_flow() and dmmd_flow() equal the plain-R flows; one noiseless step is x - step grad f(x)", {
  pr <- rings_problem()
  y <- pr$y
  x0 <- pr$x0
  # one step, noise = 0
  f1 <- mmd_flow(x0, y, n_iter = 1, step_size = 0.7, progress = FALSE)
  expect_lt(rel_err(f1$x, x0 - 0.7 * ref_mmd_witness(x0, x0, y, pr$s)$grad), 1e-12)
  expect_equal(f1$objective, ref_flow_mmd2(x0, y, pr$s), tolerance = 1e-12)
  expect_identical(f1$objective_name, "MMD^2")
  # 20 steps
  fm <- mmd_flow(x0, y, n_iter = 20, step_size = 1, progress = FALSE)
  rm <- ref_mmd_flow(x0, y, pr$s, 20, 1)
  expect_lt(rel_err(fm$x, rm$x), 1e-10)
  expect_lt(rel_err(fm$objective, rm$objective), 1e-10)
  # a given bandwidth
  fb <- mmd_flow(x0, y, kernel = gaussian_kernel(bandwidth = 0.3), n_iter = 10,
                 step_size = 0.5, progress = FALSE)
  rb <- ref_mmd_flow(x0, y, 0.3, 10, 0.5)
  expect_lt(rel_err(fb$x, rb$x), 1e-10)
  # DrMMD
  for (lambda in c(1e-3, 0.1)) {
    st <- if (lambda < 0.01) 1e-3 else 0.1
    fd <- dmmd_flow(x0, y, lambda = lambda, n_iter = 15, step_size = st,
                    progress = FALSE)
    rd <- ref_mmd_flow(x0, y, pr$s, 15, st, lambda = lambda)
    expect_lt(rel_err(fd$x, rd$x), 1e-10, label = paste("lambda", lambda))
    expect_lt(rel_err(fd$objective, rd$objective), 1e-10)
    expect_identical(fd$objective_name, "DrMMD")
  }
  d1 <- dmmd_flow(x0, y, lambda = 0.1, n_iter = 1, step_size = 0.1, progress = FALSE)
  expect_lt(rel_err(d1$x, x0 - 0.1 * 2 * 1.1 *
                      ref_dmmd_witness(x0, x0, y, 0.1, pr$s)$grad), 1e-12)
  expect_equal(d1$objective, ref_dmmd_objective(x0, y, 0.1, pr$s),
               tolerance = 1e-12)
})

test_that("the particles' own kernel sums (by symmetry) equal a plain-R flow step, the cross path and 1 vs 2 threads", {
  # one noiseless step from the formulas: x - eps (mean_j grad k(x_i, x_j) -
  # mean_m grad k(x_i, y_m)), objective mean K_xx - 2 mean K_xy + mean K_yy;
  # n = 300 (five tiles a side, the last partial): enough work for 2 threads
  set.seed(620)
  n <- 300
  d <- 3
  x0 <- matrix(rnorm(n * d), n)
  y <- matrix(rnorm(120 * d, 1), 120)
  sq <- function(a, b) outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b)
  kerns <- list(
    gaussian = list(k = gaussian_kernel(bandwidth = 0.8),
                    phi = function(r) exp(-r / (2 * 0.8^2)),
                    dphi = function(r) -exp(-r / (2 * 0.8^2)) / (2 * 0.8^2)),
    imq = list(k = imq_kernel(c = 1.5, beta = -0.6),
               phi = function(r) (1.5 + r)^-0.6,
               dphi = function(r) -0.6 * (1.5 + r)^-1.6))
  # sum over columns of w_j 2 phi'(|a_i - b_j|^2) (a_i - b_j), divided by nb
  mean_grad <- function(kf, a, b) {
    C <- 2 * kf$dphi(pmax(sq(a, b), 0)) / nrow(b)
    a * rowSums(C) - C %*% b
  }
  for (nm in names(kerns)) {
    kf <- kerns[[nm]]
    grad <- mean_grad(kf, x0, x0) - mean_grad(kf, x0, y)
    obj <- mean(kf$phi(pmax(sq(x0, x0), 0))) - 2 * mean(kf$phi(pmax(sq(x0, y), 0))) +
      mean(kf$phi(pmax(sq(y, y), 0)))
    f1 <- mmd_flow(x0, y, kernel = kf$k, n_iter = 1, step_size = 0.3,
                   progress = FALSE, nthreads = 1)
    f2 <- mmd_flow(x0, y, kernel = kf$k, n_iter = 1, step_size = 0.3,
                   progress = FALSE, nthreads = 2)
    expect_lt(rel_err(f1$x, x0 - 0.3 * grad), 1e-12, label = nm)
    expect_equal(f1$objective, obj, tolerance = 1e-12, label = nm)
    expect_identical(f2$x, f1$x, label = nm)
    expect_identical(f2$objective, f1$objective, label = nm)
    # the symmetric sums against the cross sums of z = x, weighted
    rk <- kernbayes:::flow_kernel(kf$k, y)
    w <- runif(n)
    for (m in c(1, 2, 64, 65, n)) {
      xm <- x0[seq_len(m), , drop = FALSE]
      cr <- kernbayes:::cross_kernel(xm, xm, w[seq_len(m)], rk, 1L)
      s1 <- kernbayes:::self_kernel(xm, w[seq_len(m)], rk, 1L)
      expect_lt(rel_err(s1$value, cr$value), 1e-12, label = paste(nm, m))
      expect_lt(max(abs(s1$grad - cr$grad)), 1e-12 * max(1, abs(cr$grad)),
                label = paste(nm, m))
      expect_identical(kernbayes:::self_kernel(xm, w[seq_len(m)], rk, 2L), s1)
    }
    d1 <- dmmd_flow(x0, y, lambda = 0.1, kernel = kf$k, n_iter = 2,
                    step_size = 0.05, progress = FALSE, nthreads = 1)
    d2 <- dmmd_flow(x0, y, lambda = 0.1, kernel = kf$k, n_iter = 2,
                    step_size = 0.05, progress = FALSE, nthreads = 2)
    expect_identical(d2$x, d1$x, label = nm)
  }
})

test_that("mmd_flow() / dmmd_flow() with noise use N(0, 1) draws from R's generator", {
  pr <- rings_problem(n = 20)
  y <- pr$y
  x0 <- pr$x0
  set.seed(612)
  f1 <- mmd_flow(x0, y, n_iter = 1, step_size = 0.5, noise = 0.2, progress = FALSE)
  set.seed(612)
  u <- matrix(rnorm(length(x0)), nrow(x0))
  z <- x0 + 0.2 * u
  expect_lt(rel_err(f1$x, x0 - 0.5 * ref_mmd_witness(z, x0, y, pr$s)$grad), 1e-12)
  # several iterations, beta_t = noise / sqrt(t)
  set.seed(613)
  fm <- mmd_flow(x0, y, n_iter = 8, step_size = 0.5, noise = 0.2, progress = FALSE)
  set.seed(613)
  rm <- ref_mmd_flow(x0, y, pr$s, 8, 0.5, noise = 0.2)
  expect_lt(rel_err(fm$x, rm$x), 1e-10)
  # noise as a function of t gives beta_t directly
  set.seed(613)
  ff <- mmd_flow(x0, y, n_iter = 8, step_size = 0.5,
                 noise = function(t) 0.2 / sqrt(t), progress = FALSE)
  expect_lt(rel_err(ff$x, rm$x), 1e-10)
  set.seed(614)
  fd <- dmmd_flow(x0, y, lambda = 0.1, n_iter = 5, step_size = 0.1, noise = 0.1,
                  progress = FALSE)
  set.seed(614)
  rd <- ref_mmd_flow(x0, y, pr$s, 5, 0.1, noise = 0.1, lambda = 0.1)
  expect_lt(rel_err(fd$x, rd$x), 1e-10)
})

test_that("mmd_flow() and dmmd_flow() decrease their objective on the three rings for a small step", {
  pr <- rings_problem()
  fm <- mmd_flow(pr$x0, pr$y, n_iter = 30, step_size = 1, progress = FALSE)
  expect_length(fm$objective, 30)
  expect_true(all(diff(fm$objective) < 0))
  expect_lt(fm$objective[30], fm$objective[1] / 10)
  fm2 <- mmd_flow(pr$x0, pr$y, n_iter = 30, step_size = 0.1, progress = FALSE)
  expect_true(all(diff(fm2$objective) < 0))
  for (cs in list(c(1e-3, 1e-3), c(0.1, 0.1), c(1, 0.1))) {
    fd <- dmmd_flow(pr$x0, pr$y, lambda = cs[1], n_iter = 20, step_size = cs[2],
                    progress = FALSE)
    expect_true(all(diff(fd$objective) < 0), label = paste("lambda", cs[1]))
    expect_lt(fd$objective[20], fd$objective[1])
  }
})

test_that("for large lambda the rescaled DrMMD update approaches the MMD-flow update", {
  pr <- rings_problem()
  y <- pr$y
  x0 <- pr$x0
  rk <- kernbayes:::resolve_kernel(gaussian_kernel(), y)
  gm <- kernbayes:::mmd_witness(x0, x0, y, rk)$grad
  um <- x0 - mmd_flow(x0, y, n_iter = 1, step_size = 0.5, progress = FALSE)$x
  errs <- errs_flow <- numeric(0)
  for (lambda in c(1e2, 1e4, 1e6)) {
    gd <- kernbayes:::dmmd_witness(x0, x0, y, lambda, rk)$grad
    errs <- c(errs, rel_err(lambda * gd, gm))
    ud <- x0 - dmmd_flow(x0, y, lambda = lambda, n_iter = 1, step_size = 0.5,
                         progress = FALSE)$x
    errs_flow <- c(errs_flow, rel_err(ud * lambda / (2 * (1 + lambda)), um))
  }
  expect_true(all(diff(errs) < 0))
  expect_true(all(diff(errs_flow) < 0))
  expect_lt(errs[2], 1e-2)
  expect_lt(errs[3], 1e-4)
  expect_lt(errs_flow[3], 1e-4)
  # the error is O(1 / lambda)
  expect_lt(errs[3] / errs[2], 0.05)
})

# ---- mied -------------------------------------------------------------------------

test_that("mied_objective() equals the reference and its gradient matches finite differences", {
  g <- flow_gauss(2, 620)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(621)
  x <- matrix(rnorm(20), 10)
  for (cs in list(c(3, 1e-8), c(2.5, 0.1))) {
    s <- cs[1]
    eps <- cs[2]
    got <- kernbayes:::mied_objective(x, tg, s, eps)
    expect_identical(dim(got$gradient), dim(x))   # list(value, gradient)
    fd <- ref_num_grad_mat(function(z) kernbayes:::mied_objective(z, tg, s, eps)$value, x)
    expect_lt(rel_err(got$gradient, fd), 1e-6)
    # the reference (sign of Li et al. 2023: weights (p_i p_j)^(-1/2))
    ref <- ref_mied_objective(x, g$logd_mat, g$score_mat, s, eps)
    expect_equal(ref$value, ref_mied_value_loop(x, g$logd_mat, s, eps),
                 tolerance = 1e-12)
    expect_lt(rel_err(ref$gradient, ref_num_grad_mat(function(z) {
      ref_mied_objective(z, g$logd_mat, g$score_mat, s, eps)$value
    }, x)), 1e-6)
    expect_equal(got$value, ref$value, tolerance = 1e-10)
    expect_lt(rel_err(got$gradient, ref$gradient), 1e-10)
  }
  # a one-point target gives the same numbers as the vectorised one
  tn <- flow_tnorm(2)
  t1 <- kb_target(tn$logd1, tn$score1, dim = 2)
  got <- kernbayes:::mied_objective(x, t1, 3, 1e-8)
  expect_identical(dim(got$gradient), dim(x))
  ref <- ref_mied_objective(x, function(z) apply(z, 1, tn$logd1),
                            tn$score_mat, 3, 1e-8)
  expect_equal(got$value, ref$value, tolerance = 1e-10)
  expect_lt(rel_err(got$gradient, ref$gradient), 1e-10)
})

test_that("mied's Gaussian and Laplace mollifiers: value from the formulas, gradient by finite differences, descent as plain R", {
  g <- flow_gauss(2, 630)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(631)
  x <- matrix(rnorm(24), 12)
  for (mol in c("gaussian", "laplace")) for (eps in c(0.3, 1.5)) {
    got <- kernbayes:::mied_objective(x, tg, 0, eps, mollifier = mol)
    expect_equal(got$value, ref_mied_value_moll(x, g$logd_mat, eps, mol),
                 tolerance = 1e-12, label = paste(mol, eps))
    fd <- ref_num_grad_mat(function(z) {
      ref_mied_value_moll(z, g$logd_mat, eps, mol)
    }, x)
    expect_lt(rel_err(got$gradient, fd), 1e-6, label = paste(mol, eps))
  }
  # plain-R descent on the loop's value with finite-difference gradients
  x0 <- x[1:6, ]
  for (mol in c("gaussian", "laplace")) {
    fit <- mied(x0, tg, n_iter = 5, step_size = 0.05, mollifier_scale = 0.5,
                mollifier = mol, optimizer = "sgd", progress = FALSE)
    z <- x0
    obj <- numeric(5)
    for (t in 1:5) {
      f <- function(w) ref_mied_value_moll(w, g$logd_mat, 0.5, mol)
      obj[t] <- f(z)
      z <- z - 0.05 * ref_num_grad_mat(f, z)
    }
    expect_lt(rel_err(fit$x, z), 1e-6, label = mol)
    expect_lt(rel_err(fit$objective, obj), 1e-10, label = mol)
    expect_identical(fit$settings$mollifier, mol)
    expect_true(is.na(fit$settings$s))
  }
  # Laplace at coinciding particles: the subgradient 0 of the pair, finite
  xs <- rbind(x[1:3, ], x[1, ])
  got <- kernbayes:::mied_objective(xs, tg, 0, 0.5, mollifier = "laplace")
  expect_true(all(is.finite(got$gradient)))
  expect_equal(got$value, ref_mied_value_moll(xs, g$logd_mat, 0.5, "laplace"),
               tolerance = 1e-12)
})

test_that("mied() with the Gaussian mollifier on a 2-d Gaussian matches its moments", {
  g <- flow_gauss(2, 632)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(633)
  x0 <- matrix(rnorm(300), 150)
  fit <- mied(x0, tg, n_iter = 500, step_size = 0.05, mollifier_scale = 0.5,
              mollifier = "gaussian", progress = FALSE)
  expect_lt(max(abs(colMeans(fit$x) - g$mu) / sqrt(diag(g$Sigma))), 0.1)
  r <- sqrt(diag(cov(fit$x)) / diag(g$Sigma))
  expect_true(all(r > 0.85 & r < 1.15), info = paste(round(r, 3), collapse = " "))
  # a scale far below the spacing leaves the self-interaction in charge:
  # the particles crowd the mode (sds about 0.4 of the target's here)
  fit <- mied(x0, tg, n_iter = 500, step_size = 0.05, mollifier_scale = 0.05,
              mollifier = "gaussian", progress = FALSE)
  expect_true(all(sqrt(diag(cov(fit$x)) / diag(g$Sigma)) < 0.7))
})

test_that("mied() equals the plain-R descent (adam, sgd)", {
  g <- flow_gauss(2, 622)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(623)
  x0 <- matrix(rnorm(40), 20)
  for (opt in c("adam", "sgd")) {
    st <- if (opt == "adam") 0.05 else 0.01
    fit <- mied(x0, tg, n_iter = 30, step_size = st, s = 2.5, mollifier_scale = 1e-4,
                optimizer = opt, progress = FALSE)
    ref <- ref_mied(x0, g$logd_mat, g$score_mat, 30, st, s = 2.5, eps = 1e-4,
                    optimizer = opt)
    expect_lt(rel_err(fit$x, ref$x), 1e-10, label = opt)
    expect_lt(rel_err(fit$objective, ref$objective), 1e-10, label = opt)
  }
  expect_identical(fit$objective_name, "log energy")
})

test_that("mied() on a 2-d Gaussian matches mean and covariance; particles do not collapse", {
  skip_under_valgrind()
  mu <- c(1, -1)
  Sigma <- matrix(c(1, 0.5, 0.5, 2), 2)
  tg <- gaussian_target(mu, Sigma)
  set.seed(624)
  x0 <- matrix(rnorm(300), 150)
  # s just above d (the choice of Li et al. 2023 for weights (p_i p_j)^(-1/2)):
  # the minimisers then approach the target itself
  fit <- mied(x0, tg, n_iter = 500, step_size = 0.05, s = 2 + 1e-4,
              progress = FALSE)
  expect_lt(max(abs(colMeans(fit$x) - mu)), 0.1)
  expect_lt(max(abs(cov(fit$x) - Sigma)), 0.35)
  expect_gt(ref_min_pairdist(fit$x), 0.05)
  expect_lt(fit$objective[length(fit$objective)], fit$objective[1])
  # the default s is d + 1e-4
  fd <- mied(x0, tg, n_iter = 500, step_size = 0.05, progress = FALSE)
  expect_identical(fd$x, fit$x)
  # s = d + 1 targets p^(d/s): centred, no collapse, but overdispersed
  # (by about s/d = 1.5 in variance)
  f3 <- mied(x0, tg, n_iter = 500, step_size = 0.05, s = 3, progress = FALSE)
  expect_lt(max(abs(colMeans(f3$x) - mu)), 0.1)
  expect_gt(ref_min_pairdist(f3$x), 0.05)
  expect_true(all(diag(cov(f3$x)) > 1.2 * diag(Sigma)))
  expect_true(all(diag(cov(f3$x)) < 2 * diag(Sigma)))
})

# ---- structure, print, summary, plot ---------------------------------------------

test_that("kb_particles structure: trace, trace_iter, objective, fields", {
  g <- flow_gauss(2, 630)
  set.seed(631)
  x0 <- matrix(rnorm(24), 12)
  fit <- svgd(x0, g$score1, n_iter = 10, step_size = 0.05, keep_every = 3,
              progress = FALSE)
  expect_s3_class(fit, "kb_particles")
  expect_identical(dim(fit$trace), c(12L, 2L, 5L))
  expect_identical(as.integer(fit$trace_iter), c(0L, 3L, 6L, 9L, 10L))
  expect_true(is.integer(fit$trace_iter))
  expect_length(fit$objective, 10)
  expect_equal(fit$n_iter, 10)
  expect_true(is.list(fit$settings))
  expect_true(is.character(fit$method) && length(fit$method) == 1L)
  expect_null(fit$y)
  # the kept iterates are the reference's positions at those iterations
  ref <- ref_svgd(x0, g$score_mat, 10, 0.05)
  for (k in seq_along(fit$trace_iter)) {
    expect_lt(rel_err(fit$trace[, , k], ref$xs[[fit$trace_iter[k] + 1]]), 1e-10)
  }
  expect_identical(unname(fit$trace[, , 1]), x0)
  expect_identical(unname(fit$trace[, , 5]), unname(fit$x))
  # keep_every dividing n_iter: n_iter is not repeated
  f2 <- svgd(x0, g$score1, n_iter = 10, step_size = 0.05, keep_every = 5,
             progress = FALSE)
  expect_identical(as.integer(f2$trace_iter), c(0L, 5L, 10L))
  expect_identical(dim(f2$trace), c(12L, 2L, 3L))
  # no trace by default
  f0 <- svgd(x0, g$score1, n_iter = 4, step_size = 0.05, progress = FALSE)
  expect_null(f0$trace)
  # other flows: trace and objective length
  pr <- rings_problem(n = 15)
  fm <- mmd_flow(pr$x0, pr$y, n_iter = 7, keep_every = 2, progress = FALSE)
  expect_s3_class(fm, "kb_particles")
  expect_identical(dim(fm$trace), c(15L, 2L, 5L))
  expect_identical(as.integer(fm$trace_iter), c(0L, 2L, 4L, 6L, 7L))
  expect_length(fm$objective, 7)
  expect_equal(unname(as.matrix(fm$y)), unname(pr$y))
  fd <- dmmd_flow(pr$x0, pr$y, lambda = 0.1, step_size = 0.1, n_iter = 3,
                  progress = FALSE)
  expect_s3_class(fd, "kb_particles")
  expect_length(fd$objective, 3)
  tg <- gaussian_target(c(0, 0))
  fi <- mied(x0, tg, n_iter = 6, keep_every = 6, progress = FALSE)
  expect_s3_class(fi, "kb_particles")
  expect_identical(as.integer(fi$trace_iter), c(0L, 6L))
  expect_length(fi$objective, 6)
  expect_s3_class(fi$target, "kb_target")
  fk <- ksd_descent(x0, tg, method = "gd", n_iter = 4, progress = FALSE)
  expect_s3_class(fk, "kb_particles")
  expect_length(fk$objective, 4)
  # a plain vector is n x 1
  f1 <- svgd(rnorm(8), function(x) -x, n_iter = 3, step_size = 0.05, progress = FALSE)
  expect_identical(dim(f1$x), c(8L, 1L))
})

test_that("print, summary and plot methods", {
  g <- flow_gauss(2, 640)
  set.seed(641)
  x2 <- matrix(rnorm(30), 15)
  f2 <- svgd(x2, g$score1, n_iter = 6, step_size = 0.05, keep_every = 2,
             progress = FALSE)
  f1 <- svgd(rnorm(15), function(x) -x, n_iter = 6, step_size = 0.05,
             keep_every = 2, progress = FALSE)
  pr <- rings_problem(n = 10)
  fm <- mmd_flow(pr$x0, pr$y, n_iter = 3, progress = FALSE)
  for (f in list(f1, f2, fm)) {
    expect_output(print(f))
    expect_output(print(summary(f)))
  }
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_error(plot(f1), NA)
  expect_error(plot(f2), NA)
  expect_error(plot(fm), NA)
})

# ---- bad input --------------------------------------------------------------------

test_that("bad input is rejected with a message naming the argument", {
  g <- flow_gauss(2, 650)
  x0 <- matrix(rnorm(20), 10)
  xna <- x0
  xna[3, 2] <- NA
  pr <- rings_problem(n = 10)
  tg <- gaussian_target(c(0, 0))
  expect_error(svgd(xna, g$score1, n_iter = 2, progress = FALSE), "'x0'")
  expect_error(mmd_flow(xna, pr$y, n_iter = 2, progress = FALSE), "'x0'")
  expect_error(mied(xna, tg, n_iter = 2, progress = FALSE), "'x0'")
  expect_error(svgd(x0, "not a score", n_iter = 2, progress = FALSE), "'target'")
  expect_error(ksd_descent(x0, 42, n_iter = 2, progress = FALSE), "'target'")
  expect_error(svgd(x0, function(x) c(x, 1), n_iter = 2, progress = FALSE),
               "score")
  expect_error(ksd_descent(x0, function(x) 1, n_iter = 2, progress = FALSE),
               "score")
  for (st in list(0, -1, NA_real_, "a")) {
    expect_error(svgd(x0, g$score1, n_iter = 2, step_size = st, progress = FALSE),
                 "'step_size'")
    expect_error(mmd_flow(pr$x0, pr$y, n_iter = 2, step_size = st, progress = FALSE),
                 "'step_size'")
    expect_error(mied(x0, tg, n_iter = 2, step_size = st, progress = FALSE), "'step_size'")
  }
  expect_error(ksd_descent(x0, tg, method = "gd", n_iter = 2, step_size = -0.1,
                           progress = FALSE), "'step_size'")
  for (ni in list(2.5, 0, -3, "10", NA)) {
    expect_error(svgd(x0, g$score1, n_iter = ni, progress = FALSE), "'n_iter'")
    expect_error(dmmd_flow(pr$x0, pr$y, n_iter = ni, progress = FALSE),
                 "'n_iter'")
  }
  for (lam in list(0, -1, NA_real_)) {
    expect_error(dmmd_flow(pr$x0, pr$y, lambda = lam, n_iter = 2,
                           progress = FALSE), "'lambda'")
  }
  expect_error(mmd_flow(pr$x0, cbind(pr$y, 1), n_iter = 2, progress = FALSE),
               "'y'")
  expect_error(dmmd_flow(pr$x0, pr$y[, 1], n_iter = 2, progress = FALSE), "'y'")
  expect_error(mied(x0, g$score1, n_iter = 2, progress = FALSE), "'target'")
  expect_error(svgd(x0, g$score1, n_iter = 2, optimizer = "newton",
                    progress = FALSE), "'optimizer'")
  expect_error(svgd(x0, g$score1, n_iter = 2, bandwidth = -1,
                    progress = FALSE), "'bandwidth'")
  expect_error(svgd(x0, g$score1, n_iter = 2, keep_every = -1,
                    progress = FALSE), "'keep_every'")
})

test_that("a step that makes particles non-finite stops with the iteration and a hint on 'step_size'", {
  set.seed(660)
  x0 <- matrix(rnorm(20), 10)
  expect_error(svgd(x0, function(x) -1e10 * x, n_iter = 5, step_size = 1e300,
                    optimizer = "sgd", progress = FALSE),
               "non-finite particle positions at iteration 1\\b")
  expect_error(svgd(x0, function(x) -1e10 * x, n_iter = 5, step_size = 1e300,
                    optimizer = "sgd", progress = FALSE), "'step_size'")
  pr <- rings_problem(n = 10)
  expect_error(dmmd_flow(pr$x0, pr$y, lambda = 1e-3, n_iter = 5, step_size = 1e308,
                         progress = FALSE),
               "non-finite particle positions at iteration [0-9]+.*'step_size'")
})

test_that("plot methods accept main, xlab and ylab", {
  set.seed(641)
  tg <- gaussian_target(c(0, 0))
  f <- svgd(matrix(rnorm(40), 20), tg, n_iter = 5, keep_every = 1,
            progress = FALSE)
  f1 <- svgd(rnorm(20), gaussian_target(0), n_iter = 5, keep_every = 1,
             progress = FALSE)
  pdf(NULL)
  on.exit(dev.off())
  for (ty in c("particles", "trajectories", "objective")) {
    expect_silent(plot(f, ty, main = "mine", xlab = "a", ylab = "b"))
    expect_silent(plot(f1, ty, main = "mine", xlab = "a"))
  }
})

# ---- interrupts ------------------------------------------------------------------

test_that("an interrupt raised inside a score closure stops every flow at once and returns nothing", {
  skip_on_os("windows")   # no SIGINT to send
  set.seed(670)
  x0 <- matrix(rnorm(40), 20)
  g <- flow_gauss(2, 671)
  env <- new.env()
  # a one-point score (evaluated row by row from C)
  sc <- interrupting(g$score1, 25, env)
  expect_identical(tryCatch(svgd(x0, sc, n_iter = 10, progress = FALSE),
                            interrupt = function(e) "interrupted"), "interrupted")
  expect_lte(env$calls, 40)
  # a vectorised target, called once per iteration: the flow stops, it does
  # not return its result and leave the interrupt pending
  tv <- g$target_vec
  mk <- function(k) kb_target(tv$log_density, interrupting(tv$score, k, env),
                              dim = 2, vectorized = TRUE)
  expect_identical(tryCatch(svgd(x0, mk(3), n_iter = 5, progress = FALSE),
                            interrupt = function(e) "interrupted"), "interrupted")
  expect_identical(env$calls, 3)
  expect_identical(tryCatch(mied(x0, mk(2), n_iter = 5, progress = FALSE),
                            interrupt = function(e) "interrupted"), "interrupted")
  expect_identical(env$calls, 2)
  for (m in c("gd", "lbfgs")) {
    expect_identical(tryCatch(ksd_descent(x0, mk(2), method = m, n_iter = 5,
                                          step_size = if (m == "gd") 0.01,
                                          progress = FALSE),
                              interrupt = function(e) "interrupted"),
                     "interrupted", label = m)
    # the finite-difference Jacobian calls the score twice more in R before
    # the next C entry honours the interrupt
    expect_lte(env$calls, 4)
  }
  # the MMD flows call no closure but the noise schedule
  nz <- interrupting(function(t) 0, 2, env)
  pr <- rings_problem(n = 10, m = 20)
  expect_identical(tryCatch(mmd_flow(pr$x0, pr$y, noise = nz, n_iter = 5,
                                     progress = FALSE),
                            interrupt = function(e) "interrupted"), "interrupted")
  expect_identical(env$calls, 2)
  # and nothing is left pending: the next call runs normally
  expect_s3_class(svgd(x0, g$score1, n_iter = 2, progress = FALSE), "kb_particles")
})

test_that("Ctrl-C stops a large svgd() and mied() promptly in a child R process", {
  skip_on_cran()
  skip_if(nzchar(Sys.getenv("KB_VALGRIND")), "slow under valgrind")
  skip_on_os("windows")
  # one iteration takes seconds (30000 / 10000 particles); SIGINT is sent
  # 0.5 s into it: the call stops within the iteration and the child
  # reports the interrupt.  Measured here: stopped 0.1-0.3 s after the
  # interrupt.
  score_code <- paste0(
    "tg <- kb_target(function(x) -rowSums(x^2) / 2, function(x) { ",
    "if (!exists('done')) { done <<- TRUE; report('started') }; -x }, ",
    "dim = 2, vectorized = TRUE)")
  r <- run_interrupted_child(c(
    "set.seed(1); x <- matrix(rnorm(60000), 30000)", score_code,
    "res <- svgd(x, tg, n_iter = 1, bandwidth = 1, progress = FALSE)"))
  expect_true(any(grepl("^INTERRUPTED", r$lines)), label = paste(r$lines, collapse = "; "))
  expect_false(any(grepl("^RETURNED", r$lines)))
  expect_false(is.na(r$seconds))      # liveness only: it exited by itself
  r <- run_interrupted_child(c(
    "set.seed(1); x <- matrix(rnorm(20000), 10000)", score_code,
    "res <- mied(x, tg, n_iter = 1, progress = FALSE)"))
  expect_true(any(grepl("^INTERRUPTED", r$lines)), label = paste(r$lines, collapse = "; "))
  expect_false(any(grepl("^RETURNED", r$lines)))
  expect_false(is.na(r$seconds))
})

# ---- arguments before work, sizes, messages ---------------------------------------

test_that("flows check every argument before calling a closure or resolving a kernel", {
  set.seed(672)
  x0 <- matrix(rnorm(40), 20)
  g <- flow_gauss(2, 673)
  env <- new.env()
  sc <- interrupting(g$score1, 0, env)      # k = 0: only counts
  tv <- g$target_vec
  tg <- kb_target(interrupting(tv$log_density, 0, env), sc, dim = 2)
  bad_svgd <- list(list(n_iter = 0), list(step_size = -1), list(bandwidth = "x"),
                   list(bandwidth = 1e-200), list(optimizer = "x"),
                   list(alpha = 1), list(keep_every = -1), list(progress = NA),
                   list(nthreads = 0))
  for (b in bad_svgd) {
    expect_error(do.call(svgd, c(list(x0, sc), b)), class = "kb_error_arg",
                 regexp = sprintf("'%s'", names(b)))
  }
  for (b in c(list(list(kernel = "imq"), list(score_jacobian = 1)),
              bad_svgd[c(1, 2, 7, 8, 9)])) {
    expect_error(do.call(ksd_descent, c(list(x0, sc, method = "gd"), b)),
                 class = "kb_error_arg", regexp = sprintf("'%s'", names(b)))
  }
  expect_error(ksd_descent(x0, sc, method = "x"), class = "kb_error_arg",
               regexp = "'method'")
  for (b in c(list(list(s = 1), list(mollifier_scale = -1), list(optimizer = "sgdx"),
                list(tol = -1)),
              bad_svgd[c(1, 2, 7, 8, 9)])) {
    expect_error(do.call(mied, c(list(x0, tg), b)), class = "kb_error_arg",
                 regexp = sprintf("'%s'", names(b)))
  }
  nz <- interrupting(function(t) 0, 0, env)
  for (b in c(list(list(kernel = 1)), bad_svgd[c(1, 2, 7, 8, 9)])) {
    expect_error(do.call(mmd_flow, c(list(x0, x0 + 1, noise = nz), b)),
                 class = "kb_error_arg", regexp = sprintf("'%s'", names(b)))
    expect_error(do.call(dmmd_flow, c(list(x0, x0 + 1, noise = nz), b)),
                 class = "kb_error_arg", regexp = sprintf("'%s'", names(b)))
  }
  expect_identical(env$calls, 0)
})

test_that("sizes are checked before anything is allocated, with the memory named", {
  env <- new.env()
  sc <- interrupting(function(x) -x, 0, env)
  op <- options(kernbayes.max_memory = 1e6)
  on.exit(options(op))
  set.seed(674)
  x <- matrix(rnorm(1000), 500)
  # svgd() keeps nothing of size n^2, with either bandwidth (the median's
  # selection: test-svgd-median.R)
  expect_s3_class(svgd(x, sc, n_iter = 1, progress = FALSE), "kb_particles")
  expect_s3_class(svgd(x, sc, n_iter = 1, bandwidth = 1, progress = FALSE),
                  "kb_particles")
  expect_error(dmmd_flow(x[1:10, ], x, n_iter = 1, progress = FALSE),
               class = "kb_error_arg",
               regexp = "'y' is too large: dmmd_flow\\(\\) with a target sample of 500 points would need 5.7 MB")
})

test_that("flow errors name the cause: step, bandwidth, data scale, noise, log density", {
  set.seed(675)
  x0 <- matrix(rnorm(40), 20)
  tg <- gaussian_target(c(0, 0))
  pr <- rings_problem(n = 10, m = 30)
  # a huge step flings the particles to 1e299: the step is named
  expect_error(dmmd_flow(pr$x0, pr$y, lambda = 1, step_size = 1e300, n_iter = 2,
                         progress = FALSE),
               class = "kb_error_numeric",
               regexp = "'step_size' is too large: at iteration 1")
  # the default step is capped at 1, so a huge lambda alone runs
  fl <- dmmd_flow(pr$x0, pr$y, lambda = 1e300, n_iter = 2, progress = FALSE)
  expect_identical(fl$settings$step, 1)
  # with a sane step it runs (the DrMMD flow is then nearly the MMD flow)
  fd <- dmmd_flow(pr$x0, pr$y, lambda = 1e300, step_size = 0.5, n_iter = 3,
                  progress = FALSE)
  fm <- mmd_flow(pr$x0, pr$y, step_size = 1, n_iter = 3, progress = FALSE)
  expect_lt(max(abs(fd$x - fm$x)), 1e-12)
  # a noise function returning NA: the value and the iteration are named
  expect_error(mmd_flow(x0, x0 + 1, noise = function(t) NA, n_iter = 3,
                        progress = FALSE),
               class = "kb_error_callback",
               regexp = "'noise' returned NA at iteration 1; expected one number >= 0")
  expect_error(mmd_flow(x0, x0 + 1, noise = function(t) c(1, 2), n_iter = 3,
                        progress = FALSE),
               class = "kb_error_callback", regexp = "'noise' returned a double vector of length 2")
  # an adaptive step of 1e10 moved particles by 1e10 and reported KSD^2 1e18
  expect_error(svgd(x0, tg, step_size = 1e10, n_iter = 5, progress = FALSE),
               class = "kb_error_numeric",
               regexp = "'step_size' is too large: at iteration 1 a particle moved by 1e\\+10")
  # the bandwidth and the data's scale, not the step
  expect_error(svgd(x0, tg, bandwidth = 1e-200, n_iter = 2, progress = FALSE),
               class = "kb_error_arg", regexp = "'bandwidth' must be between 1e-50 and 1e50")
  expect_error(svgd(x0 * 1e200, tg, n_iter = 2, progress = FALSE),
               class = "kb_error_arg",
               regexp = "'x0' has coordinates up to .*e\\+200: squared distances between particles would overflow")
  expect_error(svgd(x0 * 1e-200, tg, n_iter = 2, progress = FALSE),
               class = "kb_error_arg", regexp = "'x0' spans only .*underflow")
  expect_error(mmd_flow(x0, (x0 + 1) * 1e160, n_iter = 2, progress = FALSE),
               class = "kb_error_arg", regexp = "'y' has coordinates up to")
  expect_error(ksd_descent(x0, tg, kernel = gaussian_kernel(bandwidth = 1e-60),
                           n_iter = 2, progress = FALSE),
               class = "kb_error_arg", regexp = "'kernel' has bandwidth 1e-60")
  expect_error(mmd_flow(x0 * 1e-120, x0 * 1e-120 + 1e-120, n_iter = 2,
                        progress = FALSE),
               class = "kb_error_arg", regexp = "'y' sets the kernel bandwidth .* by the median heuristic")
  # MIED: a -Inf log density is named as such, not as coinciding particles
  tl <- kb_target(function(x) if (x[1] > 2) -Inf else -sum(x^2) / 2,
                  function(x) -x, dim = 2)
  x1 <- x0
  x1[2, 1] <- 3
  expect_error(mied(x1, tl, n_iter = 3, progress = FALSE), class = "kb_error_numeric",
               regexp = "the log density is -Inf at particle 2: it is outside the target's support")
  expect_error(mied(rbind(c(0, 0), c(1, 1), c(0, 0)), tg, mollifier_scale = 0, n_iter = 2,
                    progress = FALSE),
               class = "kb_error_numeric", regexp = "particles 1 and 3 coincide and 'mollifier_scale' is 0")
  # huge but finite log densities: 0.5 V_i + 0.5 V_j does not overflow
  th <- kb_target(function(x) -1e308 - sum(x^2), function(x) -2 * x, dim = 2)
  expect_true(is.finite(mied(x0, th, n_iter = 2, progress = FALSE)$objective[1]))
})

test_that("a median bandwidth that fails on the data names the data, not 'precon'", {
  expect_error(mmd_flow(c(1, 2), c(0, 0), n_iter = 2, progress = FALSE),
               class = "kb_error_arg",
               regexp = "'y' sets the kernel bandwidth by the median heuristic, which fails on it")
  expect_error(ksd_descent(c(1, 1, 1), gaussian_target(0), n_iter = 2,
                           kernel = imq_kernel(precon = "med"), progress = FALSE),
               class = "kb_error_arg", regexp = "'x0' sets the kernel bandwidth")
})

test_that("a direction that overflows blames the scale of the problem, not the step", {
  set.seed(676)
  x0 <- matrix(rnorm(40), 20)
  expect_error(svgd(x0, function(x) c(1e308, 1e308), n_iter = 2, progress = FALSE),
               class = "kb_error_numeric",
               regexp = "the SVGD direction is not finite at iteration 1 \\(bandwidth .*scores up to 1e\\+308\\).*rescale the problem")
})

# ---- stopping rule and defaults (issue 33) -----------------------------------

test_that("the banana of the defaults' tests has sds 1 and sqrt(3) (Monte Carlo)", {
  set.seed(3301)
  x1 <- rnorm(2e5)
  x2 <- rnorm(2e5, x1^2 - 1)
  expect_equal(c(sd(x1), sd(x2)), c(1, sqrt(3)), tolerance = 0.01)
  # its log density and score agree with the formula and its derivative
  tg <- flow_banana()
  x <- cbind(c(0.3, -1.2), c(0.5, 2))
  expect_equal(target_log_density(tg, x),
               dnorm(x[, 1], log = TRUE) + dnorm(x[, 2], x[, 1]^2 - 1, log = TRUE) +
                 log(2 * pi))
  expect_equal(target_score(tg, x),
               ref_num_grad_mat(function(z) sum(target_log_density(tg, z)), x),
               tolerance = 1e-6)
})

test_that("the moments rule stops where the plain-R rule does, at the same iterate", {
  g <- flow_gauss(2, 3302)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(3303)
  x0 <- matrix(rnorm(60), 30)
  full <- svgd(x0, tg, n_iter = 400, step_size = 0.05, tol = 0, keep_every = 1,
               progress = FALSE)
  expect_true(is.na(full$convergence$converged))
  expect_identical(full$n_iter, 400L)
  for (tol in c(0.02, 0.005)) {
    k <- ref_settle_iter(full$trace, tol)
    expect_false(is.na(k))
    fit <- svgd(x0, tg, n_iter = 400, step_size = 0.05, tol = tol, progress = FALSE)
    expect_identical(fit$convergence$stop_iter, as.integer(k))
    expect_true(fit$convergence$converged)
    expect_identical(fit$n_iter, as.integer(k))
    expect_identical(fit$n_iter_max, 400L)
    expect_identical(fit$x, full$trace[, , k + 1])
    expect_identical(fit$objective, full$objective[seq_len(k)])
    expect_output(print(fit), sprintf("stopped at iteration %d: moments settled", k))
  }
  # a cap below the settling point: reached n_iter without settling
  short <- svgd(x0, tg, n_iter = 100, step_size = 0.001, progress = FALSE)
  expect_false(short$convergence$converged)
  expect_identical(short$x, svgd(x0, tg, n_iter = 100, step_size = 0.001, tol = 0,
                                 progress = FALSE)$x)
  expect_output(print(short), "reached n_iter = 100 without settling: increase n_iter")
  expect_output(print(full), "ran all n_iter = 400 iterations \\(tol = 0")
  # the other flows stop by the same rule
  y <- sample_target(tg, 100)
  fm <- mmd_flow(x0, y, n_iter = 1000, progress = FALSE)
  fm0 <- mmd_flow(x0, y, n_iter = fm$n_iter, tol = 0, keep_every = 1,
                  progress = FALSE)
  expect_true(fm$convergence$converged)
  expect_identical(ref_settle_iter(fm0$trace, 0.01), fm$n_iter + 0)
  fi <- mied(x0, tg, n_iter = 1000, step_size = 0.05, progress = FALSE)
  expect_true(fi$convergence$converged)
  expect_lt(fi$n_iter, 1000)
  fg <- ksd_descent(x0, tg, method = "gd", n_iter = 1000, progress = FALSE)
  expect_true(fg$convergence$converged)
  expect_lt(fg$n_iter, 1000)
})

test_that("svgd() with its defaults reaches the sds of a correlated Gaussian (10%) and a banana (15%)", {
  skip_on_cran()
  skip_under_valgrind()
  # sds 1 and 3, correlation 0.8; the banana of flow_banana() (sds 1, 1.73)
  tg <- gaussian_target(c(0, 0), matrix(c(1, 2.4, 2.4, 9), 2))
  for (seed in 1:2) {
    set.seed(seed)
    x0 <- matrix(rnorm(400), 200)
    fit <- svgd(x0, tg, progress = FALSE)
    r <- apply(fit$x, 2, sd) / c(1, 3)
    expect_true(all(abs(r - 1) < 0.1), info = paste(round(r, 3), collapse = " "))
    expect_true(fit$convergence$converged)
    fb <- svgd(x0, flow_banana(), progress = FALSE)
    r <- apply(fb$x, 2, sd) / c(1, sqrt(3))
    expect_true(all(abs(r - 1) < 0.15), info = paste(round(r, 3), collapse = " "))
    expect_true(fb$convergence$converged)
  }
})

test_that("KSD descent keeps its kernel: ksd(fit) reproduces the printed KSD", {
  set.seed(3304)
  tg <- gaussian_target(c(0, 0))
  x0 <- matrix(rnorm(40, sd = 3), 20)
  for (m in c("lbfgs", "gd")) {
    fit <- ksd_descent(x0, tg, method = m, n_iter = 60, progress = FALSE,
                       kernel = imq_kernel(precon = "med"))
    v <- kernbayes:::ksd_objective(fit$x, tg, kernel = fit$ksd_kernel$kernel)$value
    expect_equal(fit$final_objective, v, tolerance = 1e-12)
    expect_equal(ksd(fit), sqrt(v), tolerance = 1e-10)
    expect_equal(ksd(fit, tg), sqrt(v), tolerance = 1e-10)
    expect_output(print(fit), sprintf("KSD %s = ksd\\(fit\\)",
                                      format(sqrt(v), digits = 4)))
    expect_error(ksd(fit, kernel = gaussian_kernel()), "'kernel'",
                 class = "kb_error_arg")
  }
  expect_identical(fit$final_objective, ksd_descent(x0, tg, method = "gd", n_iter = 60,
    progress = FALSE, kernel = imq_kernel(precon = "med"))$final_objective)
  lb <- ksd_descent(x0, tg, n_iter = 60, progress = FALSE)
  expect_identical(lb$objective[length(lb$objective)], lb$final_objective)
  expect_output(print(lb), "L-BFGS-B converged after")
})

test_that("summary() names the coordinates; plot() spans the target, not only the particles", {
  set.seed(3305)
  tg <- gaussian_target(c(0, 0), diag(c(25, 1)))
  x0 <- matrix(rnorm(40, sd = 0.1), 20)
  fit <- svgd(x0, tg, n_iter = 3, progress = FALSE)
  sm <- summary(fit)
  expect_identical(names(sm$mean), c("x1", "x2"))
  expect_identical(dimnames(sm$cov), list(c("x1", "x2"), c("x1", "x2")))
  expect_equal(unname(sm$sd), unname(apply(fit$x, 2, sd)))
  expect_output(print(sm), "x1 +x2")
  colnames(x0) <- c("a", "b")
  expect_identical(names(summary(svgd(x0, tg, n_iter = 2, progress = FALSE))$mean),
                   c("a", "b"))
  # density above 1e-3 of its peak: |x1| < 5 sqrt(2 log 1000) = 18.6, |x2| < 3.7
  box <- kernbayes:::plot_box(fit$x, tg)
  expect_true(box[1, 1] < -18 && box[2, 1] > 18, info = paste(box, collapse = " "))
  expect_true(box[1, 2] < -3.5 && box[2, 2] > 3.5 && box[2, 2] < 6)
  f <- tempfile(fileext = ".pdf")
  grDevices::pdf(f)
  expect_identical(plot(fit), fit)
  grDevices::dev.off()
  unlink(f)
  expect_error(print(structure(list(x = "a"), class = "kb_particles")), "'x'",
               class = "kb_error_arg")
  expect_error(summary(structure(list(), class = "kb_particles")), "'object'",
               class = "kb_error_arg")
  expect_error(plot(structure(list(), class = "kb_particles")), "'x'",
               class = "kb_error_arg")
})

test_that("mied(eps) is the deprecated name of mollifier_scale", {
  tg <- gaussian_target(c(0, 0))
  set.seed(3306)
  x0 <- matrix(rnorm(20), 10)
  a <- mied(x0, tg, n_iter = 5, mollifier = "gaussian", mollifier_scale = 0.5,
            progress = FALSE)
  rm(list = ls(kernbayes:::deprecation_seen), envir = kernbayes:::deprecation_seen)
  expect_message(b <- mied(x0, tg, n_iter = 5, mollifier = "gaussian", eps = 0.5,
                           progress = FALSE),
                 "argument 'eps' is deprecated; use 'mollifier_scale'",
                 class = "kb_deprecated")
  expect_identical(a$x, b$x)
  expect_identical(b$settings$mollifier_scale, 0.5)
  expect_error(mied(x0, tg, eps = 0.5, mollifier_scale = 0.5, progress = FALSE),
               "'eps'", class = "kb_error_arg")
})
