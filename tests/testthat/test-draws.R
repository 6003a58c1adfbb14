# Labelled samples (R/draws.R): chains and iterations through ksd,
# ksd_path, stein_thin, mmd_thin, ksd_weights and ksdt; score matching.

# Four chains of a correlated Gaussian AR(1) process, 100 iterations each,
# as a chain-major matrix, with exact scores of N(0, I).
chains_fixture <- function(k = 4, t = 100, d = 2, seed = 11) {
  set.seed(seed)
  x <- matrix(0, k * t, d)
  for (c in seq_len(k)) {
    z <- stats::rnorm(d, sd = 2)
    for (i in seq_len(t)) {
      z <- 0.7 * z + sqrt(1 - 0.49) * stats::rnorm(d)
      x[(c - 1) * t + i, ] <- z
    }
  }
  colnames(x) <- paste0("v", seq_len(d))
  list(x = x, s = -x, chain = rep(seq_len(k), each = t),
       iteration = rep(seq_len(t), k), k = k, t = t, d = d)
}

# The same data as a posterior draws_array (iterations x chains x variables).
as_array_draws <- function(m, k, t) {
  a <- array(m, c(t, k, ncol(m)),
             dimnames = list(NULL, NULL, colnames(m)))
  posterior::as_draws_array(a)
}

test_that("ksd(by_chain = TRUE) gives each chain's KSD and the pooled one", {
  skip_on_cran()
  f <- chains_fixture()
  for (precon in c("id", "med")) {
    k <- imq_kernel(precon = precon)
    res <- ksd(f$x, f$s, kernel = k, chain = f$chain, by_chain = TRUE, standardize = FALSE)
    expect_s3_class(res, "kb_ksd_by_chain")
    expect_equal(res$chain, c(as.character(1:4), "all"))
    expect_equal(res$n, c(rep(100L, 4), 400L))
    # one kernel for all rows: resolved on the whole sample (4 x 100 rows,
    # all of them used by the median heuristic)
    L <- ref_precon(f$x, precon)
    for (c in 1:4) {
      r <- f$chain == c
      K <- ref_stein_matrix(f$x[r, ], f$s[r, ], L = L)
      expect_lt(rel_err(res$ksd[c], ref_ksd(K)), 1e-12)
    }
    Kall <- ref_stein_matrix(f$x, f$s, L = L)
    expect_lt(rel_err(res$ksd[5], ref_ksd(Kall)), 1e-12)
    expect_equal(res$ksd[5], ksd(f$x, f$s, kernel = k, standardize = FALSE))
    # U-statistics by chain
    u <- ksd(f$x, f$s, kernel = k, chain = f$chain, by_chain = TRUE,
             type = "U", standardize = FALSE)
    K1 <- ref_stein_matrix(f$x[f$chain == 1, ], f$s[f$chain == 1, ], L = L)
    expect_lt(rel_err(u$ksd[1], ref_ksd(K1, "U")), 1e-12)
  }
  expect_output(print(res), "KSD by chain")
  expect_output(print(res), "kernel: IMQ")
})

test_that("one stuck chain stands out in ksd(by_chain = TRUE)", {
  f <- chains_fixture()
  x <- f$x
  x[f$chain == 3, ] <- x[f$chain == 3, ] * 0.1 + 3   # stuck far away
  res <- ksd(x, -x, chain = f$chain, by_chain = TRUE)
  expect_equal(which.max(res$ksd[1:4]), 3L)
  expect_gt(res$ksd[3], 5 * max(res$ksd[c(1, 2, 4)]))
  # its own test says so; the others' do not
  expect_lt(res$p_value[3], 0.05)
  expect_gt(res$ksd[3], res$null_95[3])
  expect_true(all(res$p_value[c(1, 2, 4)] > 0.05))
})

test_that("ksd(by_chain = TRUE): each chain's yardstick is its own Markov-bootstrap test", {
  f <- chains_fixture(t = 150)
  for (type in c("V", "U")) {
    set.seed(31)
    res <- ksd(f$x, f$s, chain = f$chain, by_chain = TRUE, type = type,
               n_boot = 40, standardize = FALSE)
    expect_identical(names(res), c("chain", "n", "ksd", "iact", "null_95",
                                   "p_value"))
    # chain 1's test is drawn first: ksd_test() of its rows alone, with
    # the same kernel (precon "id": nothing resolved on the data)
    set.seed(31)
    r1 <- f$chain == 1
    t1 <- ksd_test(f$x[r1, ], f$s[r1, ], type = type, wild = "markov",
                   n_boot = 40, standardize = FALSE, progress = FALSE)
    q <- max(stats::quantile(t1$boot, 0.95, names = FALSE), 0) / 150
    expect_equal(res$null_95[1], if (type == "V") sqrt(q) else q,
                 tolerance = 1e-12)
    expect_equal(res$p_value[1], t1$p.value)
    expect_equal(res$iact[1], unname(t1$iact))
    # a KSD beyond its null_95 is a p-value below 0.05 and conversely
    beyond <- res$ksd > res$null_95
    expect_identical(beyond, res$p_value <= 0.05 + 1 / 41 & beyond)
    expect_true(is.na(res$iact[5]))
  }
  expect_output(print(res), "not comparable")
  expect_output(print(res), "null_95, p_value: each row's own KSD test")
  # n_boot = 0: the KSDs alone; weights: no test
  res0 <- ksd(f$x, f$s, chain = f$chain, by_chain = TRUE, n_boot = 0)
  expect_identical(names(res0), c("chain", "n", "ksd"))
  rw <- ksd(f$x, f$s, chain = f$chain, by_chain = TRUE,
            weights = rep(1, nrow(f$x)))
  expect_identical(names(rw), c("chain", "n", "ksd"))
  expect_output(print(rw), "no tests: the bootstrap does not take weights")
  expect_error(ksd(f$x, f$s, chain = f$chain, by_chain = TRUE, n_boot = -1),
               class = "kb_error_arg", regexp = "'n_boot'")
})

test_that("draws objects, mcmc.list and a chain argument give the same labels", {
  skip_if_not_installed("posterior")
  f <- chains_fixture()
  da <- as_array_draws(f$x, f$k, f$t)
  sa <- as_array_draws(f$s, f$k, f$t)
  # the same seed: by_chain's bootstrap p-values are random
  bc <- function(...) {
    set.seed(21)
    ksd(..., by_chain = TRUE)
  }
  base <- bc(f$x, f$s, chain = f$chain)
  expect_equal(bc(da, sa), base)
  expect_equal(bc(posterior::as_draws_df(da), posterior::as_draws_df(sa)),
               base)
  expect_equal(bc(posterior::as_draws_list(da), posterior::as_draws_list(sa)),
               base)
  skip_if_not_installed("coda")
  ml <- coda::mcmc.list(lapply(1:4, function(c) coda::mcmc(f$x[f$chain == c, ])))
  expect_equal(bc(ml, f$s), base)
  # string chain labels are numbered in order of first appearance
  lab <- c("a", "b", "c", "d")[f$chain]
  expect_equal(bc(f$x, f$s, chain = lab)$ksd, base$ksd)
  # a data frame with .chain/.iteration columns: labels, not coordinates
  df <- as.data.frame(posterior::as_draws_df(da))
  expect_equal(bc(df, f$s), base)
})

test_that("a draws object of gradients is matched by chain, iteration and variable", {
  skip_if_not_installed("posterior")
  f <- chains_fixture()
  da <- as_array_draws(f$x, f$k, f$t)
  sdf <- posterior::as_draws_df(as_array_draws(f$s, f$k, f$t))
  set.seed(2)
  shuffled <- sdf[sample(nrow(sdf)), c("v2", "v1", ".chain", ".iteration", ".draw")]
  expect_equal(ksd(da, shuffled), ksd(f$x, f$s))
  # a gradient draws object missing a draw of x
  short <- posterior::subset_draws(sdf, chain = 1:3)
  expect_error(ksd(da, short), class = "kb_error_arg", regexp = "'score' has 300 draws")
  other <- posterior::rename_variables(sdf, w1 = v1)
  expect_error(ksd(da, other), class = "kb_error_arg", regexp = "same variables")
  expect_error(ksd(f$x, sdf), class = "kb_error_arg", regexp = "x has none")
})

test_that("a score matrix in iteration-major order is caught", {
  skip_if_not_installed("posterior")
  f <- chains_fixture(t = 250)
  da <- as_array_draws(f$x, f$k, f$t)
  # the right order (chain after chain) is accepted
  expect_equal(ksd(da, f$s), ksd(f$x, f$s))
  # gradients of the draws array flattened with the chains interleaved
  arr <- array(f$s, c(f$t, f$k, f$d))
  wrong <- matrix(aperm(arr, c(2, 1, 3)), f$t * f$k, f$d)
  expect_error(ksd(da, wrong), class = "kb_error_arg",
               regexp = "does not seem to be in the row order")
  expect_error(stein_thin(da, wrong, 10), class = "kb_error_arg",
               regexp = "iteration-major")
  # the same for a matrix with a chain argument
  expect_error(ksd(f$x, wrong, chain = f$chain), class = "kb_error_arg",
               regexp = "row order")
  # unlabelled input has no order to check: accepted as given
  expect_silent(ksd(f$x, wrong))
})

test_that("ksd_path restarts at each chain", {
  f <- chains_fixture(t = 60)
  p <- ksd_path(f$x, f$s, chain = f$chain, standardize = FALSE)
  expect_equal(p$chain, f$chain)
  for (c in 1:4) {
    r <- f$chain == c
    K <- ref_stein_matrix(f$x[r, ], f$s[r, ])
    expect_lt(rel_err(p$ksd[r], ref_ksd_path(K)), 1e-12)
  }
  expect_output(print(p), "one path per chain")
  sm <- summary(p)
  expect_equal(sm$chains$final, p$ksd[f$iteration == 60])
  expect_output(print(sm), "one path per chain")
  pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(p), p)
  # without labels: one path over all rows, as before
  q <- ksd_path(f$x, f$s, standardize = FALSE)
  expect_null(q$chain)
  expect_lt(rel_err(q$ksd, ref_ksd_path(ref_stein_matrix(f$x, f$s))), 1e-12)
})

test_that("stein_thin and mmd_thin carry the chain and iteration of each point", {
  skip_if_not_installed("posterior")
  f <- chains_fixture()
  da <- as_array_draws(f$x, f$k, f$t)
  th <- stein_thin(da, f$s, 25)
  ref <- ref_greedy(ref_stein(f$x, f$s, standardize = TRUE), 25)
  expect_equal(th$index, ref)
  expect_equal(th$chain, f$chain[ref])
  expect_equal(th$iteration, f$iteration[ref])
  expect_equal(th$points, f$x[ref, ], ignore_attr = TRUE)
  mt <- mmd_thin(f$x, 15, chain = f$chain)
  expect_equal(mt$chain, f$chain[mt$index])
  expect_equal(mt$iteration, f$iteration[mt$index])
  # unlabelled input: no labels
  expect_null(stein_thin(f$x, f$s, 5)$chain)
})

test_that("ksdt on several chains runs a stream per chain and does not depend on their order", {
  skip_if_not_installed("posterior")
  f <- chains_fixture(t = 150)
  da <- as_array_draws(f$x, f$k, f$t)
  sa <- as_array_draws(f$s, f$k, f$t)
  kt <- ksdt(da, sa, progress = FALSE, standardize = FALSE)
  expect_equal(names(kt$per_chain), as.character(1:4))
  # each chain's stream is ksdt() on that chain alone (precon "id")
  for (c in 1:4) {
    r <- f$chain == c
    one <- ksdt(f$x[r, ], f$s[r, ], progress = FALSE, standardize = FALSE)
    expect_equal(kt$per_chain[[c]]$index, one$index)
    expect_equal(kt$per_chain[[c]]$ksd, one$ksd)
    expect_equal(kt$per_chain[[c]]$iteration, one$index)
  }
  # provenance: each kept point is the draw of x at its chain and iteration
  row <- (kt$chain - 1L) * f$t + kt$iteration
  expect_equal(kt$points, f$x[row, ], ignore_attr = TRUE)
  expect_equal(kt$n_offered, nrow(f$x))
  # chains in reverse order: the same points, labels permuted
  rev <- ksdt(da[, 4:1, ], sa[, 4:1, ], progress = FALSE, standardize = FALSE)
  key <- function(p) sort(apply(p, 1L, paste, collapse = ","))
  expect_equal(key(rev$points), key(kt$points))
  expect_equal(sort(5L - rev$chain), sort(kt$chain))
  expect_lt(abs(utils::tail(rev$ksd, 1) - utils::tail(kt$ksd, 1)), 1e-12)
  # the same with a data-dependent kernel (median heuristic on the same
  # iterations of every chain)
  km <- imq_kernel(precon = "med")
  a <- ksdt(da, sa, kernel = km, progress = FALSE, standardize = FALSE)
  b <- ksdt(da[, c(3, 1, 4, 2), ], sa[, c(3, 1, 4, 2), ], kernel = km,
            progress = FALSE, standardize = FALSE)
  expect_equal(key(a$points), key(b$points))
  expect_output(print(kt), "KSDT on 4 chains, merged: .* of 600 states kept")
})

test_that("a single labelled chain keeps its labels in ksdt", {
  f <- chains_fixture(k = 1, t = 200)
  kt <- ksdt(f$x, f$s, chain = rep(7, 200), progress = FALSE)
  expect_equal(kt$chain, rep(7L, length(kt$index)))
  expect_equal(kt$iteration, kt$index)
  expect_null(ksdt(f$x, f$s, progress = FALSE)$chain)
})

test_that("bad chain arguments are rejected before any work", {
  skip_if_not_installed("posterior")
  f <- chains_fixture()
  expect_error(ksd(f$x, f$s, chain = 1:3), class = "kb_error_arg",
               regexp = "'chain' must have one label per row of x \\(400\\); it has 3")
  expect_error(ksd(f$x, f$s, chain = c(f$chain[-1], NA)), class = "kb_error_arg",
               regexp = "NA")
  expect_error(ksd(f$x, f$s, chain = f$chain + 0.5), class = "kb_error_arg",
               regexp = "whole numbers")
  expect_error(ksd(f$x, f$s, by_chain = TRUE), class = "kb_error_arg",
               regexp = "'by_chain' needs chain labels")
  expect_error(ksd(f$x, f$s, by_chain = NA), class = "kb_error_arg")
  da <- as_array_draws(f$x, f$k, f$t)
  expect_error(ksd(da, f$s, chain = f$chain), class = "kb_error_arg",
               regexp = "carries its own chain labels")
  calls <- 0
  sfun <- function(z) { calls <<- calls + 1; -z }
  expect_error(ksd(f$x, sfun, chain = 1:2, by_chain = TRUE), class = "kb_error_arg")
  expect_equal(calls, 0)
})

test_that("ksdt_chains labels the chain and iteration of every kept point", {
  tg <- gaussian_target(c(0, 0))
  set.seed(3)
  f <- ksdt_chains(tg, x0 = rbind(c(-1, 0), c(1, 0), c(0, 1)), n_iter = 300,
                   sampler = "rwm", step_size = 1)
  for (i in 1:3) {
    z <- f$chains[[i]]
    expect_equal(z$chain, rep(i, length(z$index)))
    expect_equal(z$iteration, z$index)
  }
  m <- f$merged
  expect_equal(m$chain, m$source$dictionary)
  expect_equal(m$iteration, m$source$index)
  for (j in seq_along(m$chain)) {
    z <- f$chains[[m$chain[j]]]
    expect_equal(m$points[j, ], z$points[match(m$iteration[j], z$index), ])
  }
})

test_that("ksd_weights keeps the labels of the rows it weights", {
  f <- chains_fixture(t = 15)
  w <- ksd_weights(f$x, f$s, chain = f$chain)
  expect_equal(attr(w, "chain"), f$chain)
  expect_equal(attr(w, "iteration"), f$iteration)
  w0 <- ksd_weights(f$x, f$s)
  expect_equal(as.double(w), as.double(w0))
  expect_null(attr(w0, "chain"))
})

test_that("weighted draws and non-numeric draws_df columns are refused by name", {
  # posterior::weight_draws() adds a .log_weight variable: taken as a
  # coordinate it doubled the KSD (0.80 against 0.40) and added a column to
  # stein_thin's points; a character column of a draws_df went through
  # posterior's coercion warnings to a misleading NA error.
  skip_if_not_installed("posterior")
  set.seed(1)
  x <- matrix(stats::rnorm(40), 20, dimnames = list(NULL, c("a", "b")))
  d <- posterior::as_draws_df(x)
  expect_identical(ksd(d, function(z) -z), ksd(x, function(z) -z))
  expect_error(ksd(posterior::weight_draws(d, stats::runif(20)), function(z) -z),
               "'x' carries importance weights.*'weights'")
  expect_error(stein_thin(posterior::weight_draws(d, stats::runif(20)),
                          function(z) -z, 5, progress = FALSE),
               "'x' carries importance weights")
  df <- as.data.frame(x)
  df$.log_weight <- 0
  expect_error(ksd(df, function(z) -z), "'x' carries importance weights")
  d2 <- d
  d2$s <- letters[1:20]
  expect_no_warning(expect_error(ksd(d2, function(z) -z),
                                 "'x' must contain only numeric columns.*'s'"))
})

test_that("plot of a thinning whose discrepancy is 0 throughout draws on a linear axis", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  th <- mmd_thin(matrix(c(0.3, -0.2), 1), 1,
                 kernel = gaussian_kernel(precon = "id"), progress = FALSE, standardize = FALSE)
  expect_identical(th$mmd, 0)
  expect_invisible(plot(th))
})

test_that("ksd(by_chain = TRUE, type = \"U\") explains a one-row chain's NA", {
  set.seed(2)
  x <- matrix(stats::rnorm(22), 11)
  tab <- ksd(x, -x, type = "U", chain = c(rep(1, 10), 2), by_chain = TRUE)
  expect_true(is.na(tab$ksd[2]))
  expect_output(print(tab), "one row has no U-statistic")
})

test_that("draws of one iteration per chain (a converted selection) are points without chains", {
  skip_if_not_installed("posterior")
  set.seed(3)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 300)
  th <- stein_thin(x, tg, m = 30, progress = FALSE)
  d <- posterior::as_draws_df(th)
  expect_identical(posterior::nchains(d), 30L)
  expect_null(kernbayes:::draws_labels(d))
  smp <- kernbayes:::as_sample(d, tg)
  expect_null(smp$chain)
  expect_equal(ksd(d, tg), ksd(th$points, tg), tolerance = 1e-14)
  # gradients as the same kind of draws are matched row for row
  # (the selection with its scores as points: methods refuse a partial
  # kb_thin built by hand)
  sc <- th
  sc$points <- th$score
  sd <- posterior::as_draws_df(sc)
  expect_equal(ksd(d, sd), ksd(th$points, th$score), tolerance = 1e-14)
  # a second thinning or KSDT of the converted set is one stream
  expect_identical(stein_thin(d, tg, m = 5, progress = FALSE)$index,
                   stein_thin(th$points, tg, m = 5, progress = FALSE)$index)
  expect_null(ksdt(d, tg, progress = FALSE)[["per_chain"]])
  # draws of one chain of one draw keep their labels
  one <- posterior::as_draws_df(data.frame(a = 1, b = 2))
  expect_identical(kernbayes:::draws_labels(one)$chain, 1L)
})
