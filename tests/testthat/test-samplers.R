# MCMC samplers (R/samplers.R, src/samplers.c): random walk Metropolis and
# MALA, checked against the plain-R samplers in helper-reference.R
# (ref_chain(), which draws from R's generator exactly as the C code does),
# and for invariance of a Gaussian target.

gauss2 <- function() gaussian_target(c(1, -1), matrix(c(1, 0.5, 0.5, 2), 2))

# A non-Gaussian, one-point-per-call target (a banana), to exercise the
# non-vectorised closure path.
banana <- function() {
  kb_target(function(x) -x[1]^2 / 2 - (x[2] - x[1]^2)^2,
            function(x) c(-x[1] + 4 * x[1] * (x[2] - x[1]^2),
                          -2 * (x[2] - x[1]^2)),
            dim = 2, name = "banana")
}

# Batch-means standard error of the mean of v (b batches).
bm_se <- function(v, b = 50) {
  m <- length(v) %/% b
  means <- colMeans(matrix(v[seq_len(m * b)], m, b))
  stats::sd(means) / sqrt(b)
}

# ---- exact reproduction by the plain-R samplers -------------------------------

test_that("rwm() and mala() with a fixed step are reproduced exactly by a plain-R sampler", {
  for (tgn in c("gauss2", "banana")) {
    tg <- get(tgn)()
    for (smp in c("mala", "rwm")) {
      f <- if (smp == "mala") mala else rwm
      lab <- paste(tgn, smp)
      set.seed(101)
      ch <- f(tg, c(0.3, -0.2), 400, step_size = 0.7)
      u_pkg <- stats::runif(1)  # the generator's state after the chain
      set.seed(101)
      rf <- ref_chain(tg, c(0.3, -0.2), 400, 0.7, smp)
      u_ref <- stats::runif(1)
      expect_equal(ch$x, rf$x, tolerance = 1e-12, label = lab)
      expect_identical(ch$accept_rate, rf$accept_rate, label = lab)
      # the same number of draws was taken from R's generator
      expect_identical(u_pkg, u_ref, label = lab)
      expect_identical(ch$step, 0.7)
      expect_false(ch$adapted)
      expect_identical(ch$warmup, 0L)
      expect_identical(ch$sampler, toupper(smp))
      expect_identical(dim(ch$x), c(400L, 2L))
      # a chain that moves and sometimes rejects
      expect_gt(ch$accept_rate, 0.2)
      expect_lt(ch$accept_rate, 1)
      expect_gt(sum(duplicated(ch$x)), 0)
    }
  }
})

test_that("a given step with warmup discards the warm-up without adapting", {
  tg <- gauss2()
  set.seed(102)
  ch <- mala(tg, c(3, 3), 200, step_size = 0.9, warmup = 150)
  set.seed(102)
  full <- ref_chain(tg, c(3, 3), 350, 0.9, "mala")
  expect_equal(ch$x, full$x[151:350, ], tolerance = 1e-12)
  expect_identical(ch$step, 0.9)
  expect_false(ch$adapted)
  expect_identical(ch$warmup, 150L)
  # the acceptance rate counts the kept iterations only
  set.seed(102)
  rf <- ref_chain(tg, c(3, 3), 200, 0.9, "mala", warmup = 150)
  expect_identical(ch$accept_rate, rf$accept_rate)
})

test_that("step adaptation runs over exactly the warm-up (Robbins-Monro on log h)", {
  tg <- gauss2()
  for (smp in c("mala", "rwm")) {
    f <- if (smp == "mala") mala else rwm
    ta <- if (smp == "mala") 0.574 else 0.234
    h0 <- 2.38 / sqrt(2) * if (smp == "mala") 0.5 else 1
    for (w in c(1, 37, 250)) {
      lab <- sprintf("%s, warmup %d", smp, w)
      set.seed(103)
      ch <- f(tg, c(2, -2), 120, warmup = w)
      set.seed(103)
      rf <- ref_chain(tg, c(2, -2), 120, h0, smp, warmup = w, adapt = TRUE,
                      target_accept = ta)
      expect_equal(ch$step, rf$step, tolerance = 1e-13, label = lab)
      expect_equal(ch$x, rf$x, tolerance = 1e-12, label = lab)
      expect_true(ch$adapted)
      expect_identical(ch$warmup, as.integer(w))
      expect_false(isTRUE(all.equal(ch$step, h0)), label = lab)
    }
    # a different target acceptance rate is honoured
    set.seed(104)
    ch <- f(tg, c(2, -2), 50, warmup = 100, target_accept = 0.4)
    set.seed(104)
    rf <- ref_chain(tg, c(2, -2), 50, h0, smp, warmup = 100, adapt = TRUE,
                    target_accept = 0.4)
    expect_equal(ch$step, rf$step, tolerance = 1e-13)
  }
  # default warm-up when adapting: min(1000, n_iter)
  set.seed(105)
  expect_identical(mala(tg, c(0, 0), 30)$warmup, 30L)
  set.seed(105)
  expect_identical(rwm(tg, c(0, 0), 1200)$warmup, 1000L)
})

test_that("a log density of -Inf outside the support is rejected, and the score is never called there", {
  # a half-normal in x1 (x1 > 0) times a normal in x2; the score fails
  # loudly if it is ever evaluated outside the support
  tg <- kb_target(function(x) if (x[1] <= 0) -Inf else -sum(x^2) / 2,
                  function(x) {
                    if (x[1] <= 0) stop("score called outside the support")
                    -x
                  }, dim = 2)
  for (smp in c("mala", "rwm")) {
    f <- if (smp == "mala") mala else rwm
    set.seed(106)
    ch <- f(tg, c(0.2, 0), 600, step_size = 1.2)
    set.seed(106)
    rf <- ref_chain(tg, c(0.2, 0), 600, 1.2, smp)
    expect_equal(ch$x, rf$x, tolerance = 1e-12, label = smp)
    expect_true(all(ch$x[, 1] > 0), label = smp)
    expect_true(all(is.finite(ch$log_density)), label = smp)
  }
})

# ---- invariance ------------------------------------------------------------

test_that("MALA and RWM leave a Gaussian target invariant: moments within Monte Carlo error", {
  skip_on_cran()
  skip_under_valgrind()
  mu <- c(1, -1)
  Sig <- matrix(c(1, 0.5, 0.5, 2), 2)
  tg <- gaussian_target(mu, Sig)
  for (smp in c("mala", "rwm")) {
    f <- if (smp == "mala") mala else rwm
    set.seed(107)
    ch <- f(tg, c(1, -1), 30000, warmup = 2000)
    x <- ch$x
    # functions with known expectations: x_k, (x_k - mu_k)^2, products
    fs <- list(m1 = x[, 1], m2 = x[, 2],
               v1 = (x[, 1] - mu[1])^2, v2 = (x[, 2] - mu[2])^2,
               c12 = (x[, 1] - mu[1]) * (x[, 2] - mu[2]))
    want <- c(m1 = mu[1], m2 = mu[2], v1 = Sig[1, 1], v2 = Sig[2, 2],
              c12 = Sig[1, 2])
    for (nm in names(fs)) {
      se <- bm_se(fs[[nm]])
      lab <- paste(smp, nm)
      expect_lt(abs(mean(fs[[nm]]) - want[[nm]]), 5 * se, label = lab)
      # the standard error is small enough for this to be a real check
      expect_lt(se, 0.06, label = lab)
    }
  }
})

test_that("MALA and RWM on a one-point banana target: mean of x1 and of x2 - x1^2", {
  # x1 ~ N(0, 1), x2 | x1 ~ N(x1^2, 1/2): E x1 = 0, E x2 = 1, Var x2 = 2.5
  tg <- banana()
  for (smp in c("mala", "rwm")) {
    f <- if (smp == "mala") mala else rwm
    set.seed(108)
    ch <- f(tg, c(0, 0), 12000, warmup = 1000)
    x <- ch$x
    expect_lt(abs(mean(x[, 1])), 5 * bm_se(x[, 1]), label = smp)
    expect_lt(abs(mean(x[, 2]) - 1), 5 * bm_se(x[, 2]), label = smp)
    v <- (x[, 2] - x[, 1]^2)^2
    expect_lt(abs(mean(v) - 0.5), 5 * bm_se(v), label = smp)
  }
})

test_that("after adaptation the acceptance rate is near target_accept (within 0.05)", {
  skip_under_valgrind()
  tg <- gauss2()
  cases <- list(list(f = mala, ta = 0.574), list(f = rwm, ta = 0.234),
                list(f = rwm, ta = 0.45), list(f = mala, ta = 0.8))
  for (k in seq_along(cases)) {
    set.seed(109 + k)
    ch <- cases[[k]]$f(tg, c(0, 0), 4000, warmup = 3000,
                       target_accept = cases[[k]]$ta)
    expect_lt(abs(ch$accept_rate - cases[[k]]$ta), 0.05,
              label = sprintf("case %d (%s, %.3f)", k, ch$sampler,
                              cases[[k]]$ta))
  }
})

# ---- reproducibility, vectorised vs one-point closures, stored scores ----------

test_that("chains are reproducible under set.seed, and different seeds differ", {
  tg <- gauss2()
  set.seed(120)
  a <- mala(tg, c(0, 0), 300)
  set.seed(120)
  b <- mala(tg, c(0, 0), 300)
  expect_identical(a, b)
  c2 <- mala(tg, c(0, 0), 300)  # the generator moved on
  expect_false(isTRUE(all.equal(a$x, c2$x)))
  set.seed(120)
  a <- rwm(tg, c(0, 0), 300, step_size = 1)
  set.seed(120)
  b <- rwm(tg, c(0, 0), 300, step_size = 1)
  expect_identical(a, b)
})

test_that("vectorised and one-point targets give identical chains under the same seed", {
  tv <- gauss2()
  # the same closures, called one point at a time (exactly the same numbers)
  t1 <- kb_target(function(x) tv$log_density(matrix(x, 1)),
                  function(x) as.vector(tv$score(matrix(x, 1))), dim = 2)
  # independent plain formulas (equal up to rounding)
  P <- solve(matrix(c(1, 0.5, 0.5, 2), 2))
  lc <- tv$log_density(matrix(c(1, -1), 1))
  tp <- kb_target(function(x) lc - 0.5 * sum((x - c(1, -1)) * (P %*% (x - c(1, -1)))),
                  function(x) -as.vector(P %*% (x - c(1, -1))), dim = 2)
  vv <- kb_target(function(x) -0.5 * rowSums(((x - rep(c(1, -1), each = nrow(x))) %*% P) *
                                               (x - rep(c(1, -1), each = nrow(x)))),
                  function(x) -(x - rep(c(1, -1), each = nrow(x))) %*% P,
                  dim = 2, vectorized = TRUE)
  for (smp in c("mala", "rwm")) {
    f <- if (smp == "mala") mala else rwm
    set.seed(121)
    a <- f(tv, c(0.5, 0.5), 500, warmup = 100)
    set.seed(121)
    b <- f(t1, c(0.5, 0.5), 500, warmup = 100)
    expect_identical(a$x, b$x, label = smp)
    expect_identical(a$score, b$score, label = smp)
    expect_identical(a$step, b$step, label = smp)
    set.seed(121)
    p <- f(tp, c(0.5, 0.5), 500, warmup = 100)
    expect_equal(p$x, a$x, tolerance = 1e-10, label = smp)
    set.seed(121)
    q <- f(vv, c(0.5, 0.5), 500, warmup = 100)
    expect_equal(q$x, p$x, tolerance = 1e-10, label = smp)
  }
})

test_that("stored scores and log densities are the target's at the stored states", {
  for (tgn in c("gauss2", "banana")) {
    tg <- get(tgn)()
    for (f in list(mala, rwm)) {
      set.seed(122)
      ch <- f(tg, c(0.1, 0.4), 300, step_size = 0.8)
      expect_equal(ch$score, target_score(tg, ch$x), tolerance = 1e-13,
                   ignore_attr = TRUE, label = paste(tgn, ch$sampler))
      expect_equal(ch$log_density, target_log_density(tg, ch$x),
                   tolerance = 1e-13, label = paste(tgn, ch$sampler))
    }
  }
})

test_that("a closure that keeps its argument gets a fresh vector each call", {
  seen <- list()
  tg <- kb_target(function(x) {
    seen[[length(seen) + 1L]] <<- x
    -sum(x^2) / 2
  }, function(x) -x, dim = 2)
  set.seed(123)
  ch <- rwm(tg, c(0.5, 0.5), 50, step_size = 0.5)
  # one call at x0, then one per proposal
  expect_length(seen, 51L)
  expect_identical(seen[[1]], c(0.5, 0.5))
  props <- do.call(rbind, seen[-1])
  # accepted proposals are the chain's new states; rejected ones are not
  prev <- rbind(c(0.5, 0.5), ch$x[-50, ])
  moved <- rowSums(ch$x != prev) > 0
  expect_gt(sum(moved), 10)
  expect_gt(sum(!moved), 5)
  expect_identical(props[moved, ], ch$x[moved, ])
  expect_true(all(rowSums(props[!moved, ] != ch$x[!moved, ]) > 0))
  expect_identical(nrow(unique(props)), 50L)
})

# ---- bad input -------------------------------------------------------------

test_that("samplers reject bad arguments with messages naming them", {
  set.seed(129)
  tg <- gauss2()
  for (f in list(mala, rwm)) {
    expect_error(f(tg, c(0, 0, 0), 10), "'x0'.*length 2")
    expect_error(f(tg, c(0, NA), 10), "'x0'")
    expect_error(f(tg, c(0, Inf), 10), "'x0'")
    expect_error(f(tg, "a", 10), "'x0'")
    expect_error(f(tg, c(0, 0), 0), "'n_iter'")
    expect_error(f(tg, c(0, 0), 2.5), "'n_iter'")
    expect_error(f(tg, c(0, 0), 10, step_size = 0), "'step_size'")
    expect_error(f(tg, c(0, 0), 10, step_size = -1), "'step_size'")
    expect_error(f(tg, c(0, 0), 10, step_size = NA_real_), "'step_size'")
    expect_error(f(tg, c(0, 0), 10, warmup = 0), "'warmup'")
    expect_error(f(tg, c(0, 0), 10, step_size = 1, warmup = -1), "'warmup'")
    expect_error(f(tg, c(0, 0), 10, target_accept = 1), "'target_accept'")
    expect_error(f(tg, c(0, 0), 10, target_accept = 0), "'target_accept'")
    expect_error(f(list(), c(0, 0), 10), "'target'")
  }
  # x0 where the log density is -Inf
  tb <- kb_target(function(x) if (x[1] < 0) -Inf else -sum(x^2) / 2,
                  function(x) -x, dim = 2)
  expect_error(mala(tb, c(-1, 0), 10, step_size = 1), "'x0'.*finite")
  expect_error(rwm(tb, c(-1, 0), 10, step_size = 1), "'x0'.*finite")
})

test_that("a closure failing mid-chain stops the chain with an error naming it", {
  make <- function(fail_ld, fail_sc, nan = FALSE) {
    n_ld <- 0
    n_sc <- 0
    kb_target(function(x) {
      n_ld <<- n_ld + 1
      if (n_ld > fail_ld) if (nan) return(NaN) else stop("density broke")
      -sum(x^2) / 2
    }, function(x) {
      n_sc <<- n_sc + 1
      if (n_sc > fail_sc) if (nan) return(c(NaN, 0)) else stop("score broke")
      -x
    }, dim = 2)
  }
  set.seed(124)
  e <- expect_error(mala(make(30, Inf), c(0, 0), 100, step_size = 1), "density broke")
  expect_match(paste(deparse(conditionCall(e)), collapse = ""), "^log_density\\(")
  e <- expect_error(mala(make(Inf, 30), c(0, 0), 100, step_size = 1), "score broke")
  expect_match(paste(deparse(conditionCall(e)), collapse = ""), "^score\\(")
  e <- expect_error(rwm(make(Inf, 30), c(0, 0), 100, step_size = 1), "score broke")
  expect_error(mala(make(30, Inf, nan = TRUE), c(0, 0), 100, step_size = 1),
               "'log_density' returned a non-finite value")
  expect_error(mala(make(Inf, 30, nan = TRUE), c(0, 0), 100, step_size = 1),
               "'score' returned a non-finite value")
  # a wrong-length score
  tw <- kb_target(function(x) -sum(x^2) / 2, function(x) -x[1], dim = 2)
  expect_error(mala(tw, c(0, 0), 10, step_size = 1), "'score' returned a vector of length 1")
})

# ---- print, summary, plot ------------------------------------------------------

test_that("print and summary of a kb_chain", {
  tg <- gauss2()
  set.seed(125)
  ch <- mala(tg, c(0, 0), 200, warmup = 100)
  set.seed(126)
  ch2 <- rwm(tg, c(0, 0), 200, step_size = 1.5)
  expect_snapshot({
    print(ch)
    summary(ch)
    ch2
    summary(ch2)
  })
  s <- summary(ch)
  expect_equal(s$table$mean, unname(colMeans(ch$x)))
  expect_equal(s$table$sd, unname(apply(ch$x, 2, stats::sd)))
  expect_equal(s$table$q95, unname(apply(ch$x, 2, stats::quantile, 0.95)))
  expect_identical(rownames(s$table), c("x1", "x2"))
})

test_that("a named x0 names the chain's columns", {
  # run_mcmc() sets colnames(x) from names(x0), but check_x0() has already
  # dropped the names (as.double), so the columns come back unnamed
  tg <- gauss2()
  set.seed(128)
  ch <- rwm(tg, c(a = 0, b = 0), 20, step_size = 1.5)
  expect_identical(colnames(ch$x), c("a", "b"))
  expect_identical(rownames(summary(ch)$table), c("a", "b"))
})

test_that("plot of a kb_chain draws without error", {
  tg <- gaussian_target(rep(0, 5))
  set.seed(127)
  ch <- rwm(tg, rep(0, 5), 100, step_size = 1)
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_invisible(plot(ch))
  expect_identical(plot(ch, which = c(2, 5)), ch)
})

test_that("a chain that barely moves gives a warning naming step and x0", {
  tg <- gaussian_target(c(0, 0))
  set.seed(12)
  expect_warning(ch <- mala(tg, x0 = c(0, 0), n_iter = 200, step_size = 50,
                            warmup = 0),
                 "MALA chain accepted .*% of its proposals .*'step_size'.*'x0'")
  expect_lt(ch$accept_rate, 0.01)
  expect_warning(rwm(tg, x0 = c(0, 0), n_iter = 200, step_size = 1e3, warmup = 0),
                 "RWM chain accepted")
  # a healthy chain is silent
  expect_silent(mala(tg, x0 = c(0, 0), n_iter = 200))
})

# ---- steps, interrupts, argument order -------------------------------------------

test_that("a step too large is blamed, not the log density 'at row 1 of x'", {
  tg <- gaussian_target(c(0, 0))
  expect_error(mala(tg, c(0, 0), 10, step_size = 1e300), class = "kb_error_arg",
               regexp = "'step_size' is too large: 1e\\+300")
  expect_error(rwm(tg, c(0, 0), 10, step_size = 1e300), class = "kb_error_arg",
               regexp = "'step_size' is too large")
  # a finite step whose proposal overflows (score near the largest double)
  big <- kb_target(function(x) -sum(abs(x)), function(x) rep(1.7e308, 2), dim = 2)
  set.seed(700)
  expect_error(mala(big, c(0, 0), 10, step_size = 2), class = "kb_error_numeric",
               regexp = "the MALA proposal left the finite range .*give a smaller 'step_size'")
})

test_that("an interrupt raised inside a closure stops a chain at once", {
  skip_on_os("windows")   # no SIGINT to send
  env <- new.env()
  env$calls <- 0
  ld <- function(x) {
    env$calls <- env$calls + 1
    if (env$calls == 50) tools::pskill(Sys.getpid(), tools::SIGINT)
    -sum(x^2) / 2
  }
  tg <- kb_target(ld, function(x) -x, dim = 2)
  set.seed(701)
  expect_identical(tryCatch(rwm(tg, c(0, 0), 5000, step_size = 1),
                            interrupt = function(e) "interrupted"), "interrupted")
  # the chain checks for an interrupt at every step
  expect_lte(env$calls, 51)   # measured: 50
})

test_that("rwm() and mala() check every argument before calling the target", {
  env <- new.env()
  env$calls <- 0
  tg <- kb_target(function(x) {
    env$calls <- env$calls + 1
    -sum(x^2) / 2
  }, function(x) {
    env$calls <- env$calls + 1
    -x
  }, dim = 2)
  for (f in list(rwm, mala)) {
    for (b in list(list(n_iter = 0), list(step_size = -1), list(step_size = 1e300),
                   list(warmup = -1), list(target_accept = 1),
                   list(x0 = c(0, NA)), list(x0 = 1))) {
      args <- utils::modifyList(list(target = tg, x0 = c(0, 0), n_iter = 10), b)
      expect_error(do.call(f, args), class = "kb_error_arg",
                   regexp = sprintf("'%s'", names(b)))
    }
  }
  expect_identical(env$calls, 0)
})
