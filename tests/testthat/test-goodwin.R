# Goodwin oscillator: the ODE solver and its sensitivities against a closed
# form and finite differences, the log density against plain R, the score
# against finite differences of the log density.

gw_solve_c <- function(theta, times, rtol = 1e-10, atol = 1e-12) {
  # the .Call entry allows a2 = 0 (a linear system), the R API does not
  .Call(kernbayes:::C_kb_goodwin_solve, as.double(theta), as.double(times),
        rtol, atol)
}

max_rel_err <- function(x, ref) max(abs(x - ref) / abs(ref))

# Chen et al. (2019) setting: theta = (1, 3, 2, 0.5), t = 41..80, sd = 0.1
gw_theta0 <- c(1, 3, 2, 0.5)
gw_times <- 41:80
gw_y <- local({
  set.seed(20221)
  goodwin_simulate(gw_theta0, gw_times, sd = 0.1)
})

test_that("with a2 = 0 the solver matches the closed-form linear solution", {
  times <- c(0.1, 0.5, 1, 2, 5, 10, 20, 41, 60, 80)
  for (p in list(c(1, 0, 2, 0.5), c(1.3, 0, 2, 0.7), c(0.4, 0, 3, 2.5))) {
    a1 <- p[1]; k1 <- p[3]; al <- p[4]
    e <- exp(-al * times)
    x1 <- a1 / al * (1 - e)
    x2 <- k1 * a1 / al^2 * (1 - e) - k1 * a1 * times * e / al
    r <- gw_solve_c(p, times)
    expect_lt(max_rel_err(r$x[, 1], x1), 1e-7)
    expect_lt(max_rel_err(r$x[, 2], x2), 1e-7)
    # closed-form derivatives in a1, k1 and alpha
    d1_a1 <- (1 - e) / al
    d1_al <- -a1 / al^2 * (1 - e) + a1 / al * times * e
    d2_al <- k1 * a1 * (-2 * (1 - e) / al^3 + 2 * times * e / al^2 +
                          times^2 * e / al)
    expect_lt(max_rel_err(r$sens[, 1, 1], d1_a1), 1e-7)
    expect_lt(max_rel_err(r$sens[, 2, 1], x2 / a1), 1e-7)
    expect_equal(r$sens[, 1, 3], rep(0, length(times)))
    expect_lt(max_rel_err(r$sens[, 2, 3], x2 / k1), 1e-7)
    expect_lt(max_rel_err(r$sens[, 1, 4], d1_al), 1e-7)
    expect_lt(max_rel_err(r$sens[, 2, 4], d2_al), 1e-7)
  }
  # at t = 0 everything is zero; repeated times are allowed in C
  r0 <- gw_solve_c(c(1, 0, 2, 0.5), c(0, 0, 1, 1))
  expect_equal(r0$x[1:2, ], matrix(0, 2, 2))
  expect_equal(r0$sens[1:2, , ], array(0, c(2, 2, 4)))
  expect_identical(r0$x[3, ], r0$x[4, ])
})

test_that("the a2-sensitivity at a2 = 0 matches a one-sided difference", {
  # x2 < 1 keeps x2^10 and its effect small, so h = 1e-3 is in the
  # linear regime: second-order one-sided difference in a2
  p <- c(0.5, 0, 1, 1)
  times <- c(1, 3, 10, 30)
  h <- 1e-3
  f <- function(a2) gw_solve_c(replace(p, 2, a2), times)$x
  fd <- (-3 * f(0) + 4 * f(h) - f(2 * h)) / (2 * h)
  s <- gw_solve_c(p, times)$sens[, , 2]
  expect_lt(max(abs(fd - s)) / max(abs(s)), 1e-5)
})

test_that("sensitivities of the nonlinear model match central differences", {
  times <- c(1, 5, 20, gw_times)
  for (th in list(gw_theta0, c(0.8, 2, 1.5, 0.6))) {
    s <- goodwin_solve(th, times, sensitivities = TRUE, rtol = 1e-11,
                       atol = 1e-13)
    expect_identical(dim(s$sens), c(length(times), 2L, 4L))
    expect_identical(dimnames(s$sens)[[3]], c("a1", "a2", "k1", "alpha"))
    expect_identical(s$x, goodwin_solve(th, times, rtol = 1e-11,
                                        atol = 1e-13))
    for (j in 1:4) {
      h <- 1e-5 * th[j]
      fd <- (goodwin_solve(replace(th, j, th[j] + h), times, rtol = 1e-11,
                           atol = 1e-13) -
               goodwin_solve(replace(th, j, th[j] - h), times, rtol = 1e-11,
                             atol = 1e-13)) / (2 * h)
      expect_lt(max(abs(fd - s$sens[, , j])) / max(abs(s$sens[, , j])), 1e-6)
    }
  }
})

test_that("the score matches central differences of the log density", {
  tg <- goodwin_target(gw_y, gw_times, sd = 0.1)
  set.seed(3)
  q0 <- log(gw_theta0)
  Q <- rbind(q0, q0 + c(0.05, -0.1, 0.02, 0.03), c(0, 0, 0, 0),
             q0 + stats::rnorm(4, 0, 0.3), q0 + stats::rnorm(4, 0, 0.3))
  sc <- target_score(tg, Q)
  fd <- sc
  h <- 1e-5
  for (k in 1:4) {
    Qp <- Q
    Qm <- Q
    Qp[, k] <- Q[, k] + h
    Qm[, k] <- Q[, k] - h
    fd[, k] <- (target_log_density(tg, Qp) - target_log_density(tg, Qm)) /
      (2 * h)
  }
  scale <- pmax(1, apply(abs(sc), 1, max))
  expect_lt(max(abs(fd - sc) / scale), 1e-6)
})

test_that("the log density equals a plain-R Gaussian likelihood plus priors", {
  sd <- c(0.1, 0.2)
  pm <- c(0.1, 1, 0.5, -0.5)
  ps <- c(1, 0.5, 2, 0.8)
  tg <- goodwin_target(gw_y, gw_times, sd = sd, prior_mean = pm,
                       prior_sd = ps)
  Q <- rbind(log(gw_theta0), log(c(1.2, 2.5, 1.8, 0.55)), c(0, 0, 0, 0))
  ref <- apply(Q, 1, function(q) {
    x <- goodwin_solve(exp(q), gw_times)
    sum(stats::dnorm(gw_y[, 1], x[, 1], sd[1], log = TRUE)) +
      sum(stats::dnorm(gw_y[, 2], x[, 2], sd[2], log = TRUE)) +
      sum(stats::dnorm(q, pm, ps, log = TRUE))
  })
  expect_equal(target_log_density(tg, Q), ref, tolerance = 1e-12)
  # defaults: one sd for both species, priors moment-matched to Gamma(2, 1)
  tg0 <- goodwin_target(gw_y, gw_times)
  ref0 <- sapply(seq_len(nrow(Q)), function(i) {
    x <- goodwin_solve(exp(Q[i, ]), gw_times)
    sum(stats::dnorm(gw_y, x, 0.1, log = TRUE)) +
      sum(stats::dnorm(Q[i, ], digamma(2), sqrt(trigamma(2)), log = TRUE))
  })
  expect_equal(target_log_density(tg0, Q), ref0, tolerance = 1e-12)
  # a data frame of observations is accepted
  tgd <- goodwin_target(as.data.frame(gw_y), gw_times)
  expect_equal(target_log_density(tgd, Q), ref0, tolerance = 1e-12)
})

test_that("the target is a vectorised kb_target and the simulator is noisy", {
  tg <- goodwin_target(gw_y, gw_times)
  expect_s3_class(tg, "kb_target")
  expect_identical(tg$dim, 4L)
  expect_true(tg$vectorized)
  expect_false(tg$fd_score)
  expect_null(tg$sampler)
  expect_identical(tg$name, "Goodwin oscillator")
  x <- goodwin_solve(gw_theta0, gw_times)
  expect_identical(colnames(x), c("x1", "x2"))
  set.seed(20221)
  expect_identical(goodwin_simulate(gw_theta0, gw_times, sd = 0.1), gw_y)
  res <- gw_y - x
  expect_lt(abs(stats::sd(res) - 0.1), 0.03)
  set.seed(1)
  y2 <- goodwin_simulate(gw_theta0, gw_times, sd = c(0.01, 1))
  expect_lt(stats::sd(y2[, 1] - x[, 1]), 0.05)
  expect_gt(stats::sd(y2[, 2] - x[, 2]), 0.5)
})

test_that("vectorised evaluation of several rows equals row by row", {
  tg <- goodwin_target(gw_y, gw_times)
  set.seed(4)
  Q <- matrix(rep(log(gw_theta0), each = 6), 6) +
    matrix(stats::rnorm(24, 0, 0.2), 6)
  ld <- target_log_density(tg, Q)
  sc <- target_score(tg, Q)
  for (i in seq_len(nrow(Q))) {
    expect_identical(target_log_density(tg, Q[i, , drop = FALSE]), ld[i])
    expect_identical(target_score(tg, Q[i, , drop = FALSE]),
                     sc[i, , drop = FALSE])
  }
  # the shared solve never serves a stale batch
  expect_identical(tg$score(Q[1:2, ]), sc[1:2, ])
  expect_identical(tg$log_density(Q[3:4, ]), ld[3:4])
  expect_identical(tg$score(Q[3:4, ]), sc[3:4, ])
  expect_identical(tg$log_density(Q[1:2, ]), ld[1:2])
})

test_that("bad input gives errors naming the argument", {
  y <- gw_y
  t <- gw_times
  expect_error(goodwin_target(y[-1, ], t), "'y' must be a numeric matrix")
  expect_error(goodwin_target(y[, 1], t), "'y' must be a numeric matrix")
  expect_error(goodwin_target(replace(y, 3, NA), t), "'y' must not contain")
  expect_error(goodwin_target(y, rev(t)), "'times' must be strictly")
  expect_error(goodwin_target(y, t - 50), "'times' must be non-negative")
  expect_error(goodwin_target(y, replace(t, 2, Inf)), "'times' must be")
  expect_error(goodwin_target(y, t, sd = 0), "'sd' must be one or two")
  expect_error(goodwin_target(y, t, sd = c(1, 2, 3)), "'sd' must be one or two")
  expect_error(goodwin_target(y, t, prior_mean = 1:3), "'prior_mean' must be")
  expect_error(goodwin_target(y, t, prior_sd = -1), "'prior_sd' must be")
  expect_error(goodwin_target(y, t, rtol = 0), "'rtol' must be in")
  expect_error(goodwin_target(y, t, atol = -1), "'atol' must be in")
  expect_error(goodwin_solve(c(1, 3, 2), t), "'theta' must be 4")
  expect_error(goodwin_solve(c(1, 0, 2, 0.5), t), "'theta' must be 4")
  expect_error(goodwin_solve(c(1, 3, 2, NA), t), "'theta' must be 4")
  expect_error(goodwin_solve(gw_theta0, t, sensitivities = NA),
               "'sensitivities' must be TRUE or FALSE")
  expect_error(goodwin_simulate(gw_theta0, t, sd = -0.1), "'sd' must be")
  # the C layer re-checks what it relies on
  expect_error(gw_solve_c(c(1, -1, 2, 0.5), 1:2), "'theta' must be",
               class = "kb_error_arg")
  expect_error(gw_solve_c(gw_theta0, c(2, 1)), "'times' must be",
               class = "kb_error_arg")
  expect_error(gw_solve_c(gw_theta0, 1:2, rtol = 0), "'rtol' and 'atol'",
               class = "kb_error_arg")
  tg <- goodwin_target(y, t)
  expect_error(target_log_density(tg, matrix(0, 2, 3)), "4 columns")
  # a stiff point exhausts the step budget: the error names the parameters
  expect_error(goodwin_solve(c(1, 3, 2, 1e6), t),
               "Goodwin ODE solver failed at theta = \\(a1 = 1, a2 = 3")
  # ... as a classed numeric error
  expect_error(goodwin_solve(c(1, 3, 2, 1e6), t), class = "kb_error_numeric")
  expect_error(goodwin_solve(c(1e300, 3, 2, 0.5), 1:2), "a1 = 1e\\+300",
               class = "kb_error_numeric")
  expect_error(goodwin_solve(gw_theta0, 1:2, rtol = 1e-300, atol = 1e-300),
               "'rtol'/'atol' too small", class = "kb_error_numeric")
  # the target instead gives such points zero density (score 0), so a
  # sampler rejects them and the user's run goes on
  far <- rbind(c(0, 0, 0, 14), log(gw_theta0))
  ld <- target_log_density(tg, far)
  expect_identical(ld[1], -Inf)
  expect_true(is.finite(ld[2]))
  expect_identical(unname(target_score(tg, far)[1, ]), rep(0, 4))
  set.seed(3)
  ch <- mala(tg, x0 = log(gw_theta0), n_iter = 50, step_size = 3, warmup = 0)
  expect_true(all(is.finite(ch$x)))
})
