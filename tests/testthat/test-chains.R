# Many chains and many machines: merged KSDT dictionaries (c() / merge()),
# ksdt_chains() under sequential and multisession plans, kbr_cv() through
# futures.  ksd_blocks() is tested in test-ksd.R.

chains_mix <- function() {
  gaussian_mixture_target(means = rbind(c(-2, 0), c(2, 0)))
}

test_that("merging dictionaries: recomputed KSD, no worse than the best, idempotent, sources", {
  tg <- gaussian_target(c(0, 0))
  set.seed(802)
  a <- ksdt(sample_target(tg, 600), tg, progress = FALSE)
  b <- ksdt(sample_target(tg, 600), tg, progress = FALSE)
  fin <- function(z) z$ksd[length(z$ksd)]
  m <- c(a, b)
  expect_s3_class(m, "kb_ksdt")
  # the merged KSD is the KSD of its points, recomputed from scratch
  expect_equal(fin(m), ksd(m$points, m$score, imq_kernel()), tolerance = 1e-12)
  # no worse than the better input (budget 0)
  expect_lte(fin(m), min(fin(a), fin(b)) * (1 + 1e-12))
  expect_equal(sort(m$input_ksd), sort(c(fin(a), fin(b))), tolerance = 1e-12)
  # merge() is the same operation
  expect_identical(merge(a, b)$points, m$points)
  # with a budget the merged KSD may rise, by at most the budget per point
  mb <- c(a, b, budget = 1e-4)
  added <- nrow(b$points)
  expect_lte(fin(mb)^2, min(fin(a), fin(b))^2 + added * 1e-4)
  # merging a dictionary with itself changes nothing
  aa <- c(a, a)
  expect_identical(aa$points, a$points)
  expect_equal(fin(aa), fin(a), tolerance = 1e-12)
  # sources point back to the inputs
  src <- m$source
  expect_identical(nrow(src), nrow(m$points))
  for (i in seq_len(nrow(src))) {
    d <- list(a, b)[[src$dictionary[i]]]
    j <- match(src$index[i], d$index)
    expect_identical(unname(m$points[i, ]), unname(d$points[j, ]))
  }
  # Stein thinning of the union to a given size
  st <- c(a, b, how = "stein_thin", size = 40)
  expect_identical(nrow(st$points), 40L)
  expect_equal(fin(st), ksd(st$points, st$score, imq_kernel()), tolerance = 1e-10)
  expect_false(anyDuplicated(st$points) > 0)
})

test_that("merging: bad input (dimension, empty dictionary, wrong class)", {
  tg2 <- gaussian_target(c(0, 0))
  tg3 <- gaussian_target(c(0, 0, 0))
  set.seed(803)
  a <- ksdt(sample_target(tg2, 100), tg2, progress = FALSE)
  b <- ksdt(sample_target(tg3, 100), tg3, progress = FALSE)
  expect_error(c(a, b), "dictionaries of one dimension; they have 2, 3", class = "kb_error_arg")
  e <- a
  e$points <- e$points[0, , drop = FALSE]
  e$score <- e$score[0, , drop = FALSE]
  expect_error(c(a, e), "dictionary 2 is empty")
  expect_error(merge(a, list(1)), "kb_ksdt")
  expect_error(c(a, a, how = "stein_thin", size = 10^6), "'size' must be at most", class = "kb_error_arg")
})

test_that("ksdt_chains(): sequential and multisession plans give identical results", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_under_valgrind()
  mix <- chains_mix()
  x0 <- rbind(c(-2, 0), c(2, 0), c(0, 1))
  oplan <- future::plan(future::sequential)
  on.exit(future::plan(oplan), add = TRUE)
  set.seed(804)
  f1 <- ksdt_chains(mix, x0, n_iter = 800)
  future::plan(future::multisession, workers = 2)
  set.seed(804)
  f2 <- ksdt_chains(mix, x0, n_iter = 800)
  future::plan(future::sequential)
  expect_s3_class(f1, "kb_ksdt_chains")
  expect_identical(length(f1$chains), 3L)
  for (i in 1:3) {
    expect_identical(f1$chains[[i]]$points, f2$chains[[i]]$points)
    expect_identical(f1$chains[[i]]$ksd, f2$chains[[i]]$ksd)
  }
  expect_identical(f1$merged$points, f2$merged$points)
  # the merged dictionary's KSD is recomputable and no worse than the best chain
  m <- f1$merged
  fin <- function(z) z$ksd[length(z$ksd)]
  expect_equal(fin(m), kernbayes:::ksd_resolved(m$points, m$score, m$kernel),
               tolerance = 1e-12)
  expect_lte(fin(m), min(vapply(f1$chains, fin, 0)) * (1 + 1e-12))
  # the chains differ (independent streams) and reach both modes together
  expect_false(identical(f1$chains[[1]]$points, f1$chains[[3]]$points))
  expect_true(any(m$points[, 1] < 0) && any(m$points[, 1] > 0))
  # same seed, same result; another seed, another result
  set.seed(804)
  expect_identical(ksdt_chains(mix, x0, n_iter = 800)$merged$points, m$points)
  set.seed(805)
  expect_false(identical(ksdt_chains(mix, x0, n_iter = 800)$merged$points,
                         m$points))
  # options pass through to ksdt_sample(); merge = "none" and "stein_thin"
  fr <- ksdt_chains(mix, x0[1:2, ], n_iter = 300, sampler = "rwm",
                    merge = "none")
  expect_null(fr$merged)
  expect_identical(fr$chains[[1]]$sampler, "RWM")
  fs <- ksdt_chains(mix, x0[1:2, ], n_iter = 300, merge = "stein_thin",
                    merge_size = 25)
  expect_identical(nrow(fs$merged$points), 25L)
  expect_output(print(f1), "merged \\(ksdt\\)")
  expect_output(print(summary(f1)), "3 chains of 800 iterations")
  pdf(NULL)
  on.exit(dev.off(), add = TRUE)
  expect_silent(plot(f1))
})

test_that("ksdt_chains(): a failing chain is reported with its number, the others kept", {
  skip_if_not_installed("future.apply")
  # the score fails only far out (x2 >= 8, where chain 2 starts)
  bad <- kb_target(function(x) -sum(x^2) / 2,
                   function(x) if (x[2] >= 8) stop("score blew up") else -x,
                   dim = 2)
  set.seed(806)
  expect_warning(f <- ksdt_chains(bad, rbind(c(0, 0), c(8, 8), c(0, 1)),
                                  n_iter = 200),
                 "chain 2 failed \\(.*score blew up.*\\); the results of the other 2 chains are kept")
  expect_null(f$chains[[2]])
  expect_s3_class(f$chains[[1]], "kb_ksdt")
  expect_s3_class(f$errors[["2"]], "error")
  expect_s3_class(f$merged, "kb_ksdt")
  expect_true(all(f$merged$source$dictionary %in% c(1L, 3L)))
  expect_output(print(f), "chain 2: .*score blew up")
  # every chain failing is an error
  expect_error(suppressWarnings(ksdt_chains(bad, rbind(c(8, 8), c(9, 9)),
                                            n_iter = 50)),
               "all 2 chains failed")
})

test_that("ksdt_chains(): bad input", {
  mix <- chains_mix()
  expect_error(ksdt_chains(mix, matrix(0, 2, 3), 100), "'x0' must have 2 columns")
  expect_error(ksdt_chains(mix, matrix(0, 0, 2), 100), "'x0'")
  expect_error(ksdt_chains(mix, c(0, 0), 0), "'n_iter'")
  expect_error(ksdt_chains(mix, c(0, 0), 10, merge = "avg"), "'merge'")
  expect_error(ksdt_chains(list(), c(0, 0), 10), "'target'")
  # a bad option for ksdt_sample() is rejected before any chain runs
  expect_error(ksdt_chains(mix, c(0, 0), 10, sampler = "hmc"),
               "'sampler' must be one of", class = "kb_error_arg")
})

test_that("kbr_cv() gives the same table through futures (multisession)", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_under_valgrind()
  set.seed(807)
  x <- rnorm(120)
  y <- x + rnorm(120, sd = 0.5)
  grid <- expand.grid(eps = c(1e-3, 1e-2), delta = c(1e-3, 1e-1))
  c1 <- kbr_cv(x, y, grid = grid, folds = 3, fit = FALSE)
  oplan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(oplan), add = TRUE)
  c2 <- kbr_cv(x, y, grid = grid, folds = 3, fit = FALSE)
  expect_identical(c1$table, c2$table)
})

test_that("ksdt_chains() checks every argument before any chain runs", {
  calls <- 0
  tg <- kb_target(function(z) { calls <<- calls + 1; -sum(z^2) / 2 },
                  function(z) { calls <<- calls + 1; -z }, 2)
  x0 <- rbind(c(0, 0), c(1, 1))
  # before: every chain ran, then the merge failed
  expect_error(ksdt_chains(tg, x0, 200, step = 1, merge = "stein_thin", merge_size = 0),
               "'merge_size'", class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step = 1, budget = -1), "'budget'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step = 1, min_size = "cubic"), "'min_size'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step = 1, candidates = 0), "'candidates'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step = 1, warmup = 1), "'warmup'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, stepsize = 1), "'...' must be named arguments",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, 1), "'...' must be named arguments",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step = 1,
                           budget = function(t) if (t > 100) NA else 0),
               "'budget' must return", class = "kb_error_callback")
  expect_identical(calls, 0)
})
