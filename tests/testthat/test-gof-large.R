# The incomplete KSD test of ksd_test() for large samples (test =
# "incomplete"; R/gof.R gof_run_lags, src/gof.c kb_gof_lags): its row means
# against the Stein IMQ kernel written out here from its formula, the
# statistic, variance and p-value against plain R, the automatic switch,
# by_chain, threads, level on chains, bad input.

# k_p(x, y) of the IMQ kernel k = (c + lam |x - y|^2)^beta (?imq_kernel)
# with scores sx, sy (Liu et al. 2016, eq. 6): sx.sy k + sx.grad_y k + sy.grad_x k +
# tr grad_x grad_y k, with grad_x k = 2 beta lam q^(beta - 1) (x - y), q =
# c + lam r^2, and tr grad_x grad_y k = -2 beta lam d q^(beta - 1) -
# 4 beta (beta - 1) lam^2 r^2 q^(beta - 2).
imq_stein_ref <- function(x, y, sx, sy, c, beta, lam = 1) {
  u <- x - y
  r2 <- sum(u * u)
  q <- c + lam * r2
  d <- length(x)
  sum(sx * sy) * q^beta + 2 * beta * lam * q^(beta - 1) * sum(u * (sy - sx)) -
    2 * beta * lam * d * q^(beta - 1) -
    4 * beta * (beta - 1) * lam^2 * r2 * q^(beta - 2)
}

# g_i = (1/J) sum_j k_p(x_i, x_{(i + L_j) mod n}) (1-based rows here).
lag_means_ref <- function(x, s, lags, c, beta) {
  n <- nrow(x)
  vapply(seq_len(n), function(i) {
    mean(vapply(lags, function(L) {
      m <- (i - 1 + L) %% n + 1
      imq_stein_ref(x[i, ], x[m, ], s[i, ], s[m, ], c, beta)
    }, 0))
  }, 0)
}

ar1_chain <- function(n, d, a) {
  e <- matrix(rnorm(n * d), n, d)
  e[-1L, ] <- e[-1L, ] * sqrt(1 - a^2)
  apply(e, 2L, function(v) stats::filter(v, a, method = "recursive"))
}

test_that("the row means in C match the IMQ Stein kernel written from its formula", {
  set.seed(3)
  for (d in c(1, 3, 10)) for (beta in c(-0.5, -0.7)) {
    n <- 37
    x <- matrix(rnorm(n * d), n, d)
    s <- -x + 0.3
    k <- imq_kernel(c = 1.3, beta = beta)
    st <- kernbayes:::stein_setup(x, s, k, FALSE)
    expect_true(all(st$kernel$lam == 1))
    lags <- c(5L, 9L, 17L, 30L)
    g <- kernbayes:::gof_lag_means(st, lags, 1L)
    expect_equal(g, lag_means_ref(x, s, lags, 1.3, beta), tolerance = 1e-10)
    expect_identical(kernbayes:::gof_lag_means(st, lags, 2L), g)
  }
})

test_that("the statistic, its variance and p-value are those of plain R", {
  set.seed(4)
  x <- ar1_chain(4000, 2, 0.5)
  r <- ksd_test(x, -x, test = "incomplete", n_lags = 20, standardize = FALSE,
                nthreads = 1)
  lags <- floor(4000 / 8 + (4000 / 4) * (seq_len(20) - 0.5) / 20)
  expect_identical(kernbayes:::gof_lags(4000, 20), as.integer(lags))
  expect_true(all(lags >= 500 & lags <= 1500) && !anyDuplicated(lags))
  g <- lag_means_ref(x, -x, lags, 1, -0.5)
  tau <- kernbayes:::gof_iact(g)
  v <- var(g) * tau / 4000
  expect_equal(unname(r$estimate), mean(g), tolerance = 1e-10)
  expect_equal(r$variance, v, tolerance = 1e-8)
  expect_equal(r$tau_g, tau, tolerance = 1e-8)
  expect_equal(unname(r$statistic), mean(g) / sqrt(v), tolerance = 1e-8)
  expect_equal(r$p.value, 1 - pnorm(mean(g) / sqrt(v)), tolerance = 1e-8)
  expect_identical(r$n_lags, 20L)
  expect_identical(r$test, "incomplete")
  expect_null(r$boot)
  expect_match(r$method, "incomplete U-statistic over 20 cyclic lags")
  expect_match(r$method, "as requested")
  # the default number of lags: n / (40 tau), tau the largest IACT
  r2 <- ksd_test(x, -x, test = "incomplete", nthreads = 1)
  expect_identical(r2$n_lags, as.integer(min(1000, floor(4000 / (40 *
                                                                  r2$iact)))))
  # results and tables
  tab <- as.data.frame(r)
  expect_identical(tab$n_lags, 20L)
  expect_identical(summary(r), tab)
  expect_output(print(r), "n_lags = 20")
  pdf(NULL)
  on.exit(dev.off())
  expect_identical(plot(r), r)
})

test_that("test = \"auto\" switches at n^2 n_boot above kernbayes.gof_quad_max", {
  set.seed(5)
  x <- ar1_chain(2000, 2, 0.3)
  # the switch size lowered for the test (internal option; the default is
  # GOF_QUAD_MAX = 4e11, n > 2e4 at n_boot = 1000)
  old <- options(kernbayes.gof_quad_max = 2000^2 * 100)
  on.exit(options(old))
  a <- ksd_test(x, -x, n_boot = 101, nthreads = 1, progress = FALSE)
  expect_identical(a$test, "incomplete")
  expect_match(a$method, "test = \"auto\"")
  b <- ksd_test(x, -x, n_boot = 100, nthreads = 1, progress = FALSE)
  expect_identical(b$test, "quadratic")
  expect_length(b$boot, 100)
  expect_null(b$n_lags)
  # explicit choices win
  set.seed(1)
  q <- ksd_test(x, -x, n_boot = 101, test = "quadratic", nthreads = 1,
                progress = FALSE)
  expect_identical(q$test, "quadratic")
  set.seed(1)
  options(kernbayes.gof_quad_max = NULL)
  q2 <- ksd_test(x, -x, n_boot = 101, nthreads = 1, progress = FALSE)
  expect_identical(q2$boot, q$boot)
  expect_identical(ksd_test(x, -x, test = "incomplete", nthreads = 1)$test,
                   "incomplete")
})

test_that("by_chain runs each chain's own test, incomplete when large", {
  set.seed(6)
  x <- rbind(ar1_chain(3000, 2, 0.3), ar1_chain(1000, 2, 0.3))
  ch <- rep(1:2, c(3000, 1000))
  old <- options(kernbayes.gof_quad_max = 2000^2 * 50)
  on.exit(options(old))
  r <- ksd_test(x, -x, n_boot = 50, chain = ch, by_chain = TRUE,
                nthreads = 1, progress = FALSE)
  expect_identical(r$pooled$test, "incomplete")
  expect_identical(r$chains[["1"]]$test, "incomplete")
  expect_identical(r$chains[["2"]]$test, "quadratic")
  tab <- as.data.frame(r)
  expect_identical(tab$chain, c("1", "2", "all"))
  expect_true(all(tab$p_value >= 0 & tab$p_value <= 1))
  expect_output(print(r), "incomplete tests for 1, all, 50 replicates")
  ri <- ksd_test(x, -x, chain = ch, by_chain = TRUE, test = "incomplete",
                 nthreads = 1)
  expect_identical(vapply(ri$chains, `[[`, "", "test"),
                   c("1" = "incomplete", "2" = "incomplete"))
  # each chain's own size and autocorrelation time set its lags
  c1 <- ri$chains[["1"]]
  expect_identical(c1$n, 3000L)
  expect_identical(c1$n_lags, as.integer(floor(3000 / (40 * c1$iact))))
  expect_output(print(ri), "incomplete tests \\(normal null\\)")
  pdf(NULL)
  on.exit(dev.off(), add = TRUE)
  expect_identical(plot(ri), ri)
})

test_that("the incomplete test does not depend on the number of threads", {
  set.seed(7)
  x <- matrix(rnorm(3000 * 4), 3000)
  a <- ksd_test(x, -x, test = "incomplete", nthreads = 1)
  b <- ksd_test(x, -x, test = "incomplete", nthreads = 2)
  expect_identical(a$p.value, b$p.value)
  expect_identical(a$estimate, b$estimate)
})

test_that("the incomplete test holds its level on AR(1) and RWM chains", {
  skip_on_cran()
  tg <- gaussian_target(c(0, 0))
  p <- vapply(1:200, function(i) {
    set.seed(1000 + i)
    x <- if (i %% 2) ar1_chain(4000, 2, 0.5) else
      rwm(tg, rnorm(2), 4000, step_size = 1.5, progress = FALSE)$x
    ksd_test(x, -x, test = "incomplete", nthreads = 1)$p.value
  }, 0)
  # 200 tests at level 0.05: binomial sd 0.015; allow 3 sd
  expect_lt(mean(p <= 0.05), 0.05 + 3 * sqrt(0.05 * 0.95 / 200))
  expect_gt(mean(p <= 0.05), 0.005)
  # and power against a mean shift
  set.seed(2)
  x <- ar1_chain(4000, 2, 0.5) + c(0.15, 0)
  expect_lt(ksd_test(x, -x, test = "incomplete", nthreads = 1)$p.value, 0.05)
})

test_that("the incomplete test refuses bad input naming the argument", {
  set.seed(8)
  x <- ar1_chain(1000, 2, 0.95)
  expect_error(ksd_test(x, -x, test = "incomplete"), "too short for the incomplete",
               class = "kb_error_arg")
  expect_error(ksd_test(x, -x, test = "incomplete"), "'x'")
  y <- matrix(rnorm(400), 200)
  expect_error(ksd_test(y, -y, test = "incomplete", n_lags = 1.5), "'n_lags'",
               class = "kb_error_arg")
  expect_error(ksd_test(y, -y, test = "incomplete", n_lags = 0), "'n_lags'")
  expect_error(ksd_test(y, -y, test = "incomplete", n_lags = 26), "at most n / 8 = 25")
  expect_error(ksd_test(y, -y, test = "incomplete", type = "V"), "'type'",
               class = "kb_error_arg")
  expect_error(ksd_test(y, -y, test = "linear"), "'test'",
               class = "kb_error_arg")
  old <- options(kernbayes.gof_quad_max = 1)
  on.exit(options(old))
  expect_error(ksd_test(y, -y, type = "V", n_boot = 10), "test = \"auto\"")
})

test_that("the bootstrap weights are drawn in blocks with the same numbers", {
  rows <- list(1:30, 31:50)
  for (b in list(list(bootstrap = "multinomial", wild = NULL),
                 list(bootstrap = "wild", wild = "rademacher"),
                 list(bootstrap = "wild", wild = "markov"))) {
    set.seed(9)
    W <- kernbayes:::gof_weights(50, 150, b$bootstrap, b$wild,
                                 rep(0.1, 50), rows)
    set.seed(9)
    Wp <- kernbayes:::gof_packed_weights(50, 150, b, rep(0.1, 50), rows)
    W <- cbind(W, matrix(0, 50, 2))
    expect_identical(Wp, as.double(aperm(array(W, c(50, 8, 19)),
                                         c(2L, 1L, 3L))))
  }
})

# ---- the blocked test (blocks =): futures, identical to one process ----------

# Every variant of the test, in one process and in blocks under the current
# plan, from the same seed.
blocked_pairs <- function(x, score, chain, blocks) {
  calls <- list(
    list(n_boot = 120),
    list(n_boot = 90, type = "V", bootstrap = "wild"),
    list(n_boot = 70, wild = "markov", chain = chain, by_chain = TRUE),
    list(test = "incomplete"),
    list(test = "incomplete", chain = chain, by_chain = TRUE))
  lapply(calls, function(a) {
    one <- function(b) {
      set.seed(31)
      do.call(ksd_test, c(list(x, score, blocks = b, progress = FALSE), a))
    }
    list(one(NULL), one(blocks))
  })
}

test_that("the blocked test equals the one-process test to the last bit", {
  set.seed(12)
  x <- rbind(ar1_chain(400, 3, 0.5), ar1_chain(400, 3, 0.5))
  chain <- rep(1:2, each = 400)
  for (k in c(1L, 3L, 7L, 5000L)) {
    for (p in blocked_pairs(x, -x, chain, k)) {
      expect_identical(p[[1L]], p[[2L]])
    }
  }
  # the pooled quadratic test: the bootstrap itself, not only the p-value
  set.seed(5)
  a <- ksd_test(x, -x, n_boot = 50)
  set.seed(5)
  b <- ksd_test(x, -x, n_boot = 50, blocks = 4)
  expect_identical(a$boot, b$boot)
  expect_true(length(unique(a$boot)) == 50L)
  expect_error(ksd_test(x, -x, blocks = 0), "'blocks'", class = "kb_error_arg")
  expect_error(ksd_test(x, -x, blocks = 2.5), "'blocks'",
               class = "kb_error_arg")
  expect_error(ksd_test(x, -x, blocks = NA), "'blocks'",
               class = "kb_error_arg")
})

test_that("the blocked test on multisession workers equals one process", {
  skip_on_cran()
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_under_valgrind()
  set.seed(13)
  x <- rbind(ar1_chain(300, 2, 0.3), ar1_chain(300, 2, 0.3) + 0.2)
  chain <- rep(1:2, each = 300)
  oplan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(oplan), add = TRUE)
  for (p in blocked_pairs(x, -x, chain, 2L)) {
    expect_identical(p[[1L]], p[[2L]])
  }
})
