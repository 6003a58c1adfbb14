# Robustness and correctness audit of the interoperability layer and the
# result objects: Stan fits (stan_target, constrain_draws /
# unconstrain_draws), points from draws objects, chain labels (chain =,
# by_chain =), merging, wasserstein2, and the print / summary / plot /
# conversion methods of the result classes on edge cases.  Reference
# numbers come from plain-R code (fi_* here, the Stein kernel of
# helper-reference.R), sharing nothing with the C code.

# ---- plain-R reference -------------------------------------------------------

# The V-statistic KSD with the IMQ kernel (c = 1, beta = -1/2, L = I),
# from the plain-R Stein kernel of helper-reference.R.
fi_ksd <- function(x, s) ref_ksd(ref_stein_matrix(as.matrix(x), as.matrix(s)))

# Chains of a Gaussian AR(1) process (stationary N(0, I)), chain-major, with
# the exact scores -x.
fi_chains <- function(k, t, d = 2, seed = 1) {
  set.seed(seed)
  x <- matrix(0, k * t, d, dimnames = list(NULL, paste0("v", seq_len(d))))
  for (c in seq_len(k)) {
    z <- stats::rnorm(d)
    for (i in seq_len(t)) {
      z <- 0.7 * z + sqrt(1 - 0.49) * stats::rnorm(d)
      x[(c - 1) * t + i, ] <- z
    }
  }
  list(x = x, s = -x, chain = rep(seq_len(k), each = t))
}

# Scores of chain-major rows (k chains of t) put in iteration-major order.
fi_interleave <- function(s, k, t) {
  matrix(aperm(array(s, c(t, k, ncol(s))), c(2, 1, 3)), t * k, ncol(s))
}

# ---- chain labels --------------------------------------------------------------

test_that("the score-order check works for chain labels other than 1..k", {
  f <- fi_chains(2, 250)
  wrong <- fi_interleave(f$s, 2, 250)
  # labels 1, 2 were checked; 2, 4 (chains 2 and 4 of a subset) were not,
  # and the wrongly ordered scores gave a KSD (0.42) silently
  for (lab in list(c(1, 2), c(2, 4), c(10, 3))) {
    expect_error(ksd(f$x, wrong, chain = lab[f$chain]),
                 class = "kb_error_arg", regexp = "row order of x")
  }
  # the right order is still accepted
  expect_identical(ksd(f$x, f$s, chain = c(2, 4)[f$chain]), ksd(f$x, f$s))
})

test_that("numeric chain labels are kept as given (0-based labels too)", {
  set.seed(3)
  n <- 36
  x <- matrix(stats::rnorm(2 * n), n, dimnames = list(NULL, c("a[1]", "a[2]")))
  s <- -x
  ch <- sample(c(0, 1, 2), n, TRUE)   # 0-based and interleaved
  it <- stats::ave(seq_len(n), ch, FUN = seq_along)
  b <- ksd(x, s, chain = ch, by_chain = TRUE, standardize = FALSE)
  # chain "1" of the table was the user's chain 0 (labels were renumbered)
  expect_identical(b$chain, c("0", "1", "2", "all"))
  for (c in 0:2) {
    r <- ch == c
    expect_equal(b$ksd[b$chain == c], fi_ksd(x[r, ], s[r, ]), tolerance = 1e-12)
    expect_identical(b$n[b$chain == c], sum(r))
  }
  expect_equal(b$ksd[4], fi_ksd(x, s), tolerance = 1e-12)
  th <- stein_thin(x, s, 6, chain = ch)
  expect_identical(th$chain, as.integer(ch[th$index]))
  expect_identical(th$iteration, as.integer(it[th$index]))
  expect_identical(as.data.frame(th)$source_chain, as.integer(ch[th$index]))
  mt <- mmd_thin(x, 4, chain = ch - 5)   # negative labels
  expect_identical(mt$chain, as.integer(ch[mt$index] - 5))
  # each chain's path is the path of that chain's rows alone
  p <- ksd_path(x, s, chain = ch, standardize = FALSE)
  for (c in 0:2) {
    r <- which(ch == c)
    expect_equal(p$ksd[r], ksd_path(x[r, ], s[r, ], standardize = FALSE)$ksd, tolerance = 1e-13)
  }
  expect_identical(p$chain, as.integer(ch))
  expect_output(print(p), "final KSD of chain 0: ")
  # labels beyond the integer range cannot be kept: an error
  expect_error(ksd(x, s, chain = c(rep(1, n - 1), 3e9)),
               class = "kb_error_arg", regexp = "'chain'.*integer range")
  expect_error(ksd(x, s, chain = c(rep(1, n - 1), Inf)),
               class = "kb_error_arg", regexp = "'chain'")
})

# ---- wasserstein2 ----------------------------------------------------------------

# All permutations of 1..n (n! rows) and the exact W2 over them.
fi_perms <- function(n) {
  if (n == 1L) return(matrix(1L))
  p <- fi_perms(n - 1L)
  do.call(rbind, lapply(seq_len(n), function(i) cbind(i, ifelse(p >= i, p + 1L, p))))
}
fi_w2 <- function(x, y) {
  P <- fi_perms(nrow(x))
  v <- apply(P, 1L, function(p) mean(rowSums((x - y[p, , drop = FALSE])^2)))
  list(w = sqrt(min(v)), perm = P[which.min(v), ])
}

test_that("wasserstein2() is exact far from the origin in high dimension", {
  set.seed(5)
  for (d in c(3L, 9L, 12L)) for (off in c(0, 1e4, 1e8, -3e12)) {
    x <- matrix(stats::rnorm(6 * d), 6) + off
    y <- matrix(stats::rnorm(6 * d, sd = 1.3), 6) + off + 0.3
    # brute force on the points moved to the origin (W2 is translation
    # invariant; the subtraction is exact to rounding of the offset)
    bf <- fi_w2(x - off, y - off)
    w <- wasserstein2(x, y)
    lab <- sprintf("d = %d, offset %g", d, off)
    # the Gram form lost the differences: 12% too large at d = 12, 1e8
    expect_identical(attr(w, "assignment"), as.integer(bf$perm), label = lab)
    tol <- if (off == 0) 1e-12 else 1e-12 + 4 * abs(off) * .Machine$double.eps / bf$w
    expect_lt(abs(as.numeric(w) - bf$w) / bf$w, tol, label = lab)
  }
  # x and y far apart from each other: the assignment is still the optimum
  x <- matrix(stats::rnorm(60), 6)
  y <- matrix(stats::rnorm(60), 6) + 1e9
  expect_identical(attr(wasserstein2(x, y), "assignment"),
                   as.integer(fi_w2(x, y - 1e9)$perm))
})

# ---- merging dictionaries -----------------------------------------------------------

test_that("merged dictionaries keep each point's chain, iteration and draws", {
  tg <- gaussian_target(c(0, 0))
  set.seed(4)
  kc <- ksdt_chains(tg, rbind(c(0, 0), c(1, 1), c(-1, 0)), 150)
  a <- kc$chains[[2]]
  b <- kc$chains[[3]]
  for (how in c("ksdt", "stein_thin")) {
    m <- c(a, b, how = how, m = if (how == "stein_thin") 6)
    # each merged point is the point of its chain at its iteration (the
    # points of chain 3 were labelled source_chain 2, their argument's
    # position, when the best dictionary came second)
    expect_false(is.null(m$chain))
    for (j in seq_len(nrow(m$points))) {
      z <- kc$chains[[m$chain[j]]]
      expect_identical(m$points[j, ], z$points[match(m$iteration[j], z$iteration), ])
    }
    df <- as.data.frame(m)
    expect_identical(df$source_chain, m$chain)
    expect_identical(df$source_iteration, m$iteration)
    expect_setequal(unique(m$chain), c(2L, 3L))
  }
  # dictionaries without labels: the provenance is the source (argument
  # position and index)
  set.seed(2)
  x <- matrix(stats::rnorm(200), 100, dimnames = list(NULL, c("mu", "tau")))
  k1 <- ksdt(x[1:50, ], -x[1:50, ], progress = FALSE)
  k2 <- ksdt(x[51:100, ], -x[51:100, ], progress = FALSE)
  m <- c(k1, k2)
  expect_null(m$chain)
  expect_identical(as.data.frame(m)$source_chain, as.integer(m$source$dictionary))
  # constrained draws travel with their points
  k1$draws <- data.frame(sigma = exp(k1$points[, "tau"]), mu = k1$points[, "mu"])
  k2$draws <- data.frame(sigma = exp(k2$points[, "tau"]), mu = k2$points[, "mu"])
  m <- c(k1, k2)
  expect_identical(m$draws$sigma, exp(m$points[, "tau"]))
  expect_identical(as.data.frame(m)$sigma, exp(m$points[, "tau"]))
  expect_identical(as.data.frame(m, scale = "unconstrained")$tau,
                   unname(m$points[, "tau"]))
})

test_that("merging checks that the dictionaries have the same variables", {
  set.seed(2)
  x <- matrix(stats::rnorm(200), 100, dimnames = list(NULL, c("mu", "tau")))
  k1 <- ksdt(x[1:50, ], -x[1:50, ], progress = FALSE)
  k2 <- ksdt(x[51:100, 2:1], -x[51:100, 2:1], progress = FALSE)
  # the columns of k2 were merged under k1's names (tau as mu)
  expect_error(c(k1, k2), class = "kb_error_arg",
               regexp = "'\\.\\.\\.' must have the variables.*mu, tau.*tau, mu")
  expect_error(merge(k1, k2), class = "kb_error_arg", regexp = "^'y' must have")
  k3 <- k2
  colnames(k3$points) <- colnames(k3$score) <- NULL
  expect_s3_class(c(k1, k3), "kb_ksdt")
})

test_that("c() of one dictionary checks its arguments", {
  set.seed(2)
  x <- matrix(stats::rnorm(100), 50, dimnames = list(NULL, c("mu", "tau")))
  k1 <- ksdt(x, -x, progress = FALSE)
  # returned as it is, but bad arguments are errors (they were ignored)
  expect_identical(c(k1), k1)
  expect_error(c(k1, how = "bad"), class = "kb_error_arg", regexp = "'how'")
  expect_error(c(k1, m = -3), class = "kb_error_arg", regexp = "'m'")
  expect_error(c(k1, budget = NA), class = "kb_error_arg", regexp = "'budget'")
  expect_error(c(k1, nthreads = "a"), class = "kb_error_arg", regexp = "'nthreads'")
  bad <- k1
  bad$score <- bad$score[-1, ]
  expect_error(c(bad), class = "kb_error_arg", regexp = "has been edited")
})

# ---- conversions of results ---------------------------------------------------------

test_that("a variable named as a label column is not overwritten", {
  skip_if_not_installed("posterior")
  set.seed(1)
  a <- array(stats::rnorm(240), c(40, 3, 2),
             dimnames = list(NULL, NULL, c("mu", "theta[1]")))
  th <- stein_thin(posterior::as_draws_array(a), function(z) -z, 7)
  d <- posterior::as_draws_df(th, source = TRUE)
  expect_identical(posterior::variables(d),
                   c("mu", "theta[1]", "source_chain", "source_iteration"))
  # thinning the converted draws again with chain labels: source_* are
  # coordinates now, and the second conversion replaced their values by the
  # new labels
  x2 <- unclass(posterior::as_draws_matrix(d))
  attributes(x2) <- attributes(x2)[c("dim", "dimnames")]
  th2 <- stein_thin(x2, function(z) -z, 3, standardize = FALSE,
                    chain = rep(1:2, c(4, 3)))
  expect_error(as.data.frame(th2), class = "kb_error_arg",
               regexp = "'x' has variables named source_chain, source_iteration.*source = FALSE")
  expect_error(posterior::as_draws_df(th2, source = TRUE),
               class = "kb_error_arg")
  # without source (the default of as_draws_df()) nothing is overwritten
  expect_identical(posterior::as_draws_df(th2)$source_iteration,
                   unname(th2$points[, "source_iteration"]))
  df <- as.data.frame(th2, source = FALSE)
  expect_identical(df$source_iteration, unname(th2$points[, "source_iteration"]))
  expect_identical(df[["theta[1]"]], unname(th2$points[, "theta[1]"]))
  # a matrix column named .chain lost its values to the chain label
  x <- matrix(stats::rnorm(40), 20, dimnames = list(NULL, c(".chain", "b")))
  th3 <- stein_thin(x, -x, 3)
  expect_error(as.data.frame(th3), class = "kb_error_arg",
               regexp = "'x' has variable named \\.chain")
})

# ---- Stan fits ----------------------------------------------------------------------

test_that("stan_target is rstan's log density and gradient away from the draws", {
  skip_on_cran()
  for (name in c("schools", "shapes")) {
    fit <- stan_test_fit(name)
    tg <- stan_target(fit)
    u <- unconstrain_draws(fit)
    set.seed(7)
    up <- u[1:12, ] + matrix(stats::rnorm(12 * ncol(u), sd = 0.5), 12)
    ld <- target_log_density(tg, up)
    g <- target_score(tg, up)
    for (i in 1:12) {
      expect_equal(ld[i], rstan::log_prob(fit, up[i, ], adjust_transform = TRUE,
                                          gradient = FALSE),
                   tolerance = 1e-12, info = name)
      expect_equal(unname(g[i, ]),
                   as.vector(rstan::grad_log_prob(fit, up[i, ],
                                                  adjust_transform = TRUE)),
                   tolerance = 1e-12, info = name)
    }
    expect_identical(colnames(g), colnames(u))
    # one point as a vector
    expect_equal(target_score(tg, up[3, ]), g[3, , drop = FALSE],
                 tolerance = 1e-14)
  }
})

test_that("constrain_draws and unconstrain_draws invert each other anywhere", {
  skip_on_cran()
  skip_if_not_installed("posterior")
  for (name in c("schools", "shapes")) {
    fit <- stan_test_fit(name)
    u <- unconstrain_draws(fit)
    set.seed(8)
    # points far from the draws too (simplex logits, log scales up to +-9)
    ur <- matrix(stats::rnorm(20 * ncol(u), sd = 3), 20,
                 dimnames = list(NULL, colnames(u)))
    back <- constrain_draws(fit, ur)
    expect_lt(max(abs(unconstrain_draws(fit, back) - ur)), 1e-10)
    # every draws format gives the same points
    for (conv in list(posterior::as_draws_array, posterior::as_draws_list,
                      posterior::as_draws_rvars, posterior::as_draws_matrix)) {
      expect_equal(unconstrain_draws(fit, conv(back)), unconstrain_draws(fit, back),
                   tolerance = 1e-15)
    }
    # non-numeric extra columns of a data frame are ignored
    df <- as.data.frame(back)
    df$note <- "a"
    expect_equal(unconstrain_draws(fit, df), unconstrain_draws(fit, back),
                 tolerance = 0)
  }
})

test_that("a named vector of unconstrained values is matched by its names", {
  skip_on_cran()
  fit <- stan_test_fit("schools")
  u <- unconstrain_draws(fit)
  p <- u[4, ]
  rev <- p[c(2, 1, 10:3)]
  # the names were dropped and the values used in the given order: tau
  # became mu
  one <- constrain_draws(fit, p)
  expect_equal(constrain_draws(fit, rev)$mu, one$mu, tolerance = 0)
  expect_equal(constrain_draws(fit, rev)$tau, exp(p[["log(tau)"]]),
               tolerance = 1e-14)
  bad <- p
  names(bad)[1] <- "nu"
  expect_error(constrain_draws(fit, bad), class = "kb_error_arg",
               regexp = "'upars' has column names")
  expect_equal(constrain_draws(fit, unname(p))$mu, one$mu, tolerance = 0)
})

test_that("a parameter given as an array of the wrong shape is an error", {
  skip_on_cran()
  fit <- stan_test_fit("shapes")
  p <- list(w = c(0.2, 0.3, 0.5), s = c(1, 2), B = matrix(1:6, 2), a = 0.1)
  u <- unconstrain_draws(fit, p)
  # B as a 3 x 2 matrix has six values but is not B: its elements were
  # taken column-major as if it were 2 x 3
  p$B <- matrix(1:6, 3)
  expect_error(unconstrain_draws(fit, p), class = "kb_error_arg",
               regexp = "'draws' element 'B' has dimensions 3 x 2; the parameter has 2 x 3")
  # extents of 1 and flattened vectors are fine
  p$B <- 1:6
  p$s <- matrix(c(1, 2), 1)
  expect_identical(unconstrain_draws(fit, p), u)
  p$a <- matrix(0.1)
  expect_identical(unconstrain_draws(fit, p), u)
})

test_that("a Stan fit through stein_thin and back keeps names, chains and values", {
  skip_on_cran()
  skip_if_not_installed("posterior")
  fit <- stan_test_fit("shapes")
  dr <- posterior::as_draws_df(fit)
  th <- stein_thin(fit, m = 6, progress = FALSE)
  d <- posterior::as_draws_df(th, source = TRUE)
  vars <- setdiff(posterior::variables(dr), "lp__")
  expect_identical(setdiff(posterior::variables(d),
                           c("lp__", "source_chain", "source_iteration")), vars)
  row <- match(paste(d$source_chain, d$source_iteration),
               paste(dr$.chain, dr$.iteration))
  expect_false(anyNA(row))
  expect_identical(row, as.integer(th$index))
  for (v in vars) expect_identical(d[[v]], dr[[v]][row], info = v)
  du <- posterior::as_draws_df(th, scale = "unconstrained")
  expect_identical(posterior::variables(du)[1:11], colnames(th$points))
  expect_equal(du[["log(s[2])"]], log(dr[["s[2]"]][row]), tolerance = 1e-12)
  pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_output(print(th), "Stein thinning: 6 of")
  expect_identical(plot(th), th)
})

test_that("a draw on the boundary of its constraint is an error naming its source", {
  skip_on_cran()
  fit <- stan_test_fit("schools")
  # a scale stored as exactly 0 (an underflow in the sampler): its
  # unconstrained value log(0) = -Inf was returned as it was, ksd() and
  # stein_thin() failed inside rstan and mmd_thin() with "missing value
  # where TRUE/FALSE needed"
  fz <- fit
  fz@sim$samples[[1]]$tau[60] <- 0   # post-warmup draw 10 of chain 1
  expect_error(unconstrain_draws(fz), class = "kb_error_arg",
               regexp = "'fit' has a value on the boundary.*row 10.*'log\\(tau\\)' is -Inf")
  expect_error(ksd(fz, progress = FALSE), class = "kb_error_arg",
               regexp = "'x' has a value on the boundary")
  expect_error(stein_thin(fz, m = 3, progress = FALSE), class = "kb_error_arg",
               regexp = "'x' has a value on the boundary")
  expect_error(mmd_thin(fz, 3, progress = FALSE), class = "kb_error_arg",
               regexp = "'x' has a value on the boundary")
  fs <- stan_test_fit("shapes")
  p <- list(w = c(0.2, 0.3, 0.5), s = c(1, 0), B = 1:6, a = 0.1)
  expect_error(unconstrain_draws(fs, p), class = "kb_error_arg",
               regexp = "'draws' has a value on the boundary.*'log\\(s\\[2\\]\\)' is -Inf")
  p$s <- c(1, 2)
  p$w <- c(0, 0.5, 0.5)
  expect_error(unconstrain_draws(fs, p), class = "kb_error_arg",
               regexp = "'draws' has a value on the boundary.*unc\\(w\\)\\[1\\]")
})

test_that("constrain_draws refuses points whose transform overflows", {
  skip_on_cran()
  fit <- stan_test_fit("schools")
  u <- unconstrain_draws(fit)[1:3, ]
  u[2, "log(tau)"] <- 800   # tau = exp(800) was returned as Inf
  expect_error(constrain_draws(fit, u), class = "kb_error_arg",
               regexp = "'upars' row 2 constrains to a non-finite value of 'tau' \\(Inf\\)")
  u[2, "log(tau)"] <- 700   # large but finite: fine
  expect_equal(constrain_draws(fit, u)$tau[2], exp(700))
  # a flow started from the fit whose particles overflow keeps its work:
  # the particles come back without draws, with a warning (a stand-in flow
  # returns such particles)
  u[2, "log(tau)"] <- 800
  env <- new.env()
  env$flow <- function(x0) list(x = u)
  expect_warning(res <- kernbayes:::stan_flow(quote(flow()), env, fit),
                 "without constrained draws: 'upars' row 2")
  expect_identical(res$x, u)
  expect_null(res$draws)
  u[2, "log(tau)"] <- 1
  res <- kernbayes:::stan_flow(quote(flow()), env, fit)
  expect_equal(res$draws$tau, exp(u[, "log(tau)"]), tolerance = 1e-14)
})

test_that("ksdt_chains keeps its chains when the merge fails", {
  tg <- gaussian_target(c(0, 0))
  set.seed(1)
  # merge_size above the number of distinct points is known only after the
  # chains ran; the error lost every chain
  expect_warning(
    f <- ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), n_iter = 100,
                     merge = "stein_thin", merge_size = 10000),
    "not merged \\('merge_size' must be at most")
  expect_null(f$merged)
  expect_length(f$chains, 2L)
  expect_s3_class(f$chains[[1]], "kb_ksdt")
  expect_output(print(f), "KSDT on 2 chains")
  expect_error(as.data.frame(f), class = "kb_error_arg", regexp = "merge failed")
  m <- c(f$chains[[1]], f$chains[[2]], how = "stein_thin", m = 5)
  expect_identical(nrow(m$points), 5L)
  expect_true(all(m$chain %in% 1:2))
})
