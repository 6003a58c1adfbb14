# mied(constraint = mied_constraint(...)): the dynamic barrier against a
# slow R loop written from its formula (Gong and Liu, 2021; Li et al.,
# 2023), a finite-difference check of the equality's barrier gradient
# 2 h grad h, whole runs against a plain-R descent, the constraint met at
# the end, and constraint = NULL leaving mied() unchanged.

# lambda_i = max(0, (alpha g_i - <v_i, dg_i>) / |dg_i|^2), v_i + lambda_i dg_i,
# one particle at a time
ref_barrier <- function(v, g, dg, alpha) {
  out <- v
  for (i in seq_len(nrow(v))) {
    nn <- 0
    dot <- 0
    for (k in seq_len(ncol(v))) {
      nn <- nn + dg[i, k]^2
      dot <- dot + v[i, k] * dg[i, k]
    }
    lam <- if (nn > 0) max(0, (alpha * g[i] - dot) / nn) else 0
    for (k in seq_len(ncol(v))) out[i, k] <- v[i, k] + lam * dg[i, k]
  }
  out
}

# the barrier function and its gradient of a constraint, from the formula:
# g itself for an inequality, h^2 and 2 h grad h for an equality
ref_barrier_fun <- function(fun, grad, type, x) {
  h <- fun(x)
  if (type == "ineq") return(list(g = h, dg = grad(x)))
  list(g = h^2, dg = 2 * h * grad(x))
}

# a Gaussian N(mu, Sigma) in dimension d: a vectorised target and the
# matrix log density and score for the references
con_gauss <- function(d, seed) {
  set.seed(seed)
  mu <- seq(-0.5, 0.5, length.out = d)
  Sigma <- ref_spd(d)
  P <- solve(Sigma)
  list(mu = mu, Sigma = Sigma,
       logd_mat = function(x) ref_dmvnorm_log(x, mu, Sigma),
       score_mat = function(x) -sweep(as.matrix(x), 2, mu) %*% P)
}

ring_fun <- function(x) rowSums(x^2) - 1
ring_grad <- function(x) 2 * x

test_that("the barrier direction equals the formula, particle by particle", {
  set.seed(811)
  x <- matrix(rnorm(60, sd = 1.2), 20)
  v <- matrix(rnorm(60), 20)
  for (type in c("ineq", "eq")) {
    for (alpha in c(0.5, 1, 3)) {
      con <- mied_constraint(ring_fun, ring_grad, type, alpha)
      ce <- kernbayes:::constraint_eval(con, x, 1L)
      got <- kernbayes:::barrier_direction(v, ce, alpha)
      rb <- ref_barrier_fun(ring_fun, ring_grad, type, x)
      want <- ref_barrier(v, rb$g, rb$dg, alpha)
      expect_equal(got, want, tolerance = 1e-13, label = paste(type, alpha))
      # the corrected direction decreases g at least at rate alpha g
      # (first order), and is the closest such direction: lambda = 0 where
      # v already does
      rate <- rowSums(got * rb$dg)
      expect_true(all(rate >= alpha * rb$g - 1e-12))
      free <- rowSums(v * rb$dg) >= alpha * rb$g
      expect_true(any(free) && any(!free))
      expect_identical(got[free, ], v[free, ])
    }
  }
  # the violation: largest g+ (inequality) or largest |h| (equality)
  ce_i <- kernbayes:::constraint_eval(mied_constraint(ring_fun, ring_grad), x, 1L)
  ce_e <- kernbayes:::constraint_eval(mied_constraint(ring_fun, ring_grad, "eq"), x, 1L)
  expect_equal(ce_i$violation, max(0, ring_fun(x)))
  expect_equal(ce_e$violation, max(abs(ring_fun(x))))
  # a vanishing gradient leaves the direction alone
  ce0 <- list(g = rep(1, 20), dg = matrix(0, 20, 3))
  expect_identical(kernbayes:::barrier_direction(v, ce0, 1), v)
})

test_that("the equality's barrier gradient matches finite differences of h^2", {
  set.seed(812)
  x <- matrix(rnorm(30), 10)
  cubic <- function(x) x[, 1]^3 - x[, 2] * x[, 3] + 0.5
  cubic_grad <- function(x) cbind(3 * x[, 1]^2, -x[, 3], -x[, 2])
  con <- mied_constraint(cubic, cubic_grad, "eq")
  ce <- kernbayes:::constraint_eval(con, x, 1L)
  expect_equal(ce$g, cubic(x)^2)
  h <- 1e-6
  fd <- matrix(0, 10, 3)
  for (k in 1:3) {
    e <- matrix(0, 10, 3)
    e[, k] <- h
    fd[, k] <- (cubic(x + e)^2 - cubic(x - e)^2) / (2 * h)
  }
  expect_equal(ce$dg, fd, tolerance = 1e-7)
  # the user's gradient itself, for the test's own cubic
  fd1 <- sapply(1:3, function(k) {
    e <- matrix(0, 10, 3)
    e[, k] <- h
    (cubic(x + e) - cubic(x - e)) / (2 * h)
  })
  expect_equal(cubic_grad(x), fd1, tolerance = 1e-7)
})

# plain-R constrained MIED: ref_mied() of helper-flows.R with the barrier
# above correcting each gradient; the violations recorded on the way
ref_mied_con <- function(x0, logd_mat, score_mat, n_iter, step, s, eps,
                         fun, grad, type, alpha, optimizer = "adam") {
  viol <- numeric(0)
  violation <- function(x) {
    h <- fun(x)
    if (type == "eq") max(abs(h)) else max(0, h)
  }
  correct <- function(g, x) {
    viol <<- c(viol, violation(x))
    rb <- ref_barrier_fun(fun, grad, type, x)
    ref_barrier(g, rb$g, rb$dg, alpha)
  }
  r <- ref_mied(x0, logd_mat, score_mat, n_iter, step, s, eps, optimizer,
                correct)
  list(x = r$x, violation = c(viol, violation(r$x)))
}

test_that("constrained mied() equals the plain-R descent (eq and ineq, adam and sgd)", {
  g <- con_gauss(3, 813)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(814)
  x0 <- matrix(rnorm(45), 15)
  for (type in c("eq", "ineq")) {
    for (opt in c("adam", "sgd")) {
      st <- if (opt == "adam") 0.02 else 0.005
      con <- mied_constraint(ring_fun, ring_grad, type, alpha = 0.7)
      fit <- mied(x0, tg, n_iter = 25, step_size = st, s = 3.5, mollifier_scale = 1e-4,
                  optimizer = opt, constraint = con, progress = FALSE)
      ref <- ref_mied_con(x0, g$logd_mat, g$score_mat, 25, st, 3.5, 1e-4,
                          ring_fun, ring_grad, type, 0.7, opt)
      lab <- paste(type, opt)
      expect_lt(rel_err(fit$x, ref$x), 1e-10, label = lab)
      expect_equal(fit$violation, ref$violation, tolerance = 1e-10, label = lab)
      expect_identical(fit$settings$constraint, con)
    }
  }
  expect_output(print(fit), "constraint violation")
})

test_that("the constraint holds at the end: the unit circle (eq) and disc (ineq)", {
  skip_under_valgrind()
  tg <- gaussian_target(c(1, 0), diag(2))
  set.seed(815)
  x0 <- matrix(rnorm(100), 50)
  circle <- mied_constraint(ring_fun, ring_grad, "eq")
  fc <- mied(x0, tg, n_iter = 300, step_size = 0.02, constraint = circle,
             progress = FALSE)
  expect_lt(fc$violation[301], 0.05)
  expect_lt(max(abs(rowSums(fc$x^2) - 1)), 0.05)
  expect_gt(fc$violation[1], 1)
  # the default s is the dimension of the circle, 1, plus 1e-4
  expect_equal(fc$settings$s, 1 + 1e-4)
  # the target restricted to the circle is von Mises with kappa = 1 in the
  # angle: E cos = I1(1) / I0(1) = 0.446 (0.448 here)
  expect_lt(abs(mean(fc$x[, 1] / sqrt(rowSums(fc$x^2))) -
                  besselI(1, 1) / besselI(1, 0)), 0.02)
  # with sgd the barrier brings g down geometrically, by about
  # 1 - step alpha = 0.96 an iteration
  disc <- mied_constraint(ring_fun, ring_grad, "ineq", alpha = 2)
  fd <- mied(x0, tg, n_iter = 400, step_size = 0.02, optimizer = "sgd",
             constraint = disc, progress = FALSE)
  expect_lt(fd$violation[401], 1e-5 * fd$violation[1])
  expect_true(all(ring_fun(fd$x) < 1e-4))
  expect_gt(ref_min_pairdist(fd$x), 1e-3)
})

test_that("constraint = NULL leaves mied() unchanged; an inactive constraint too", {
  g <- con_gauss(2, 816)
  tg <- gaussian_target(g$mu, g$Sigma)
  set.seed(817)
  x0 <- matrix(rnorm(40), 20)
  f0 <- mied(x0, tg, n_iter = 20, step_size = 0.05, keep_every = 5,
             progress = FALSE)
  f1 <- mied(x0, tg, n_iter = 20, step_size = 0.05, keep_every = 5,
             constraint = NULL, progress = FALSE)
  expect_identical(f1, f0)
  expect_null(f0$violation)
  expect_null(f0$settings$constraint)
  # a constraint far from binding (g = x_1 - 1e6) never corrects a direction
  far <- mied_constraint(function(x) x[, 1] - 1e6,
                         function(x) cbind(1 + 0 * x[, 1], 0))
  f2 <- mied(x0, tg, n_iter = 20, step_size = 0.05, keep_every = 5,
             constraint = far, progress = FALSE)
  expect_identical(f2$x, f0$x)
  expect_identical(f2$trace, f0$trace)
  expect_identical(f2$objective, f0$objective)
  expect_identical(f2$violation, rep(0, 21))
})
