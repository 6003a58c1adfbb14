# Many chains and many machines (R/chains.R): ksdt_chains() under sequential
# and multisession plans, failing chains, argument checks.  Merging is tested
# in test-merge.R, ksd_blocks() in test-ksd.R, kbr_cv() through futures in
# test-kbr-cv.R.

chains_mix <- function() {
  gaussian_mixture_target(means = rbind(c(-2, 0), c(2, 0)))
}

test_that("ksdt_chains(): sequential and multisession plans give identical results", {
  skip_on_cran()
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
  # (ksd() of the result: its points under its kernel and the scales of
  # the union of the chains' dictionaries)
  expect_equal(fin(m), as.double(ksd(m)), tolerance = 1e-12)
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
  # the plot shows each chain's stream (KSD and size per step) and not the
  # merge's own trace, from the result and from its merged dictionary
  for (obj in list(f1, f1$merged)) {
    drawn <- record_lines(plot(obj, which = 1:2))
    for (z in f1$chains) {
      expect_true(has_line(drawn, z$ksd))
      expect_true(has_line(drawn, z$size))
    }
    expect_false(has_line(drawn, m$ksd))
  }
  expect_identical(f1$merged$streams$label, paste("chain", 1:3))
  expect_identical(f1$merged$streams$point,
                   match(f1$merged[["chain"]], 1:3))
  expect_identical(plot(fr), fr)
  expect_identical(plot(fs, which = 3), fs)
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

test_that("ksdt_chains() checks every argument before any chain runs", {
  calls <- 0
  tg <- kb_target(function(z) { calls <<- calls + 1; -sum(z^2) / 2 },
                  function(z) { calls <<- calls + 1; -z }, 2)
  x0 <- rbind(c(0, 0), c(1, 1))
  # a bad merge_size is found before any chain runs, not at the merge
  expect_error(ksdt_chains(tg, x0, 200, step_size = 1, merge = "stein_thin", merge_size = 0),
               "'merge_size'", class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step_size = 1, budget = -1), "'budget'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step_size = 1, min_size = "cubic"), "'min_size'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step_size = 1, candidates = 0), "'candidates'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step_size = 1, warmup = 1), "'warmup'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, stepsize = 1), "'...' must be named arguments",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, 1), "'...' must be named arguments",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 200, step_size = 1,
                           budget = function(t) if (t > 100) NA else 0),
               "'budget' must return", class = "kb_error_callback")
  expect_identical(calls, 0)
})

test_that("ksdt_chains() refuses a -Inf start, repeated or unnamed dots and a stray merge_size before any chain runs", {
  # found by the samplers' audit: each of these used to run the chains
  # first (a -Inf start failed after the others had run; a repeated
  # argument made every chain fail, "all chains failed"; merge_size was
  # ignored without merge = "stein_thin"; a positional extra said "got ''")
  runs <- 0
  tg <- kb_target(function(z) { runs <<- runs + 1; -sum(z^2) / 2 },
                  function(z) -z, 2)
  tg_cut <- kb_target(function(z) if (z[1] > 1e100) -Inf else -sum(z^2) / 2,
                      function(z) -z, 2)
  x0 <- rbind(c(0, 0), c(1e200, 1))
  expect_error(ksdt_chains(tg_cut, x0, 50, step_size = 1, progress = FALSE),
               "'x0' row 2 is a start where the target's log density is -Inf",
               class = "kb_error_arg")
  x0 <- rbind(c(0, 0), c(1, 1))
  expect_error(ksdt_chains(tg, x0, 50, step_size = 1, step_size = 2),
               "'...' must name each argument of ksdt_sample\\(\\) once; 'step_size'",
               class = "kb_error_arg")
  expect_error(ksdt_chains(tg, x0, 50, step_size = 1, 3),
               "got an unnamed argument", class = "kb_error_arg")
  for (m in c("ksdt", "none")) {
    expect_error(ksdt_chains(tg, x0, 50, step_size = 1, merge = m, merge_size = 10),
                 "'merge_size' is used only with merge = \"stein_thin\"",
                 class = "kb_error_arg")
  }
  expect_identical(runs, 0)
})

test_that("ksdt_chains(), ksd_blocks() and kbr_cv() give the sequential results on future.batchtools", {
  # batchtools' local backend stands in for a scheduler (Slurm, SGE, ...):
  # each future is a batchtools job with its own R process
  skip_on_cran()
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_if_not_installed("future.batchtools")
  tg <- gaussian_target(c(0, 0))
  set.seed(1)
  x <- sample_target(tg, 300)
  x0 <- rbind(c(0, 0), c(1, 1))
  set.seed(2)
  chains_seq <- ksdt_chains(tg, x0, 200, progress = FALSE)
  ksd_seq <- ksd_blocks(x, tg, blocks = 2, progress = FALSE)
  cv_seq <- kbr_cv(x[, 1], x[, 2], folds = 2, progress = FALSE)
  # job registries go to a temporary directory, not the working directory
  oopt <- options(future.cache.path = tempfile("kb-batchtools-"))
  oplan <- future::plan(future.batchtools::batchtools_local)
  on.exit({
    future::plan(oplan)
    unlink(getOption("future.cache.path"), recursive = TRUE)
    options(oopt)
  }, add = TRUE)
  updates <- 0
  set.seed(2)
  chains_bt <- withCallingHandlers(
    suppressMessages(ksdt_chains(tg, x0, 200, progress = TRUE)),
    progression = function(p) if (identical(p$type, "update")) updates <<- updates + 1)
  expect_identical(chains_bt$chains, chains_seq$chains)
  expect_identical(chains_bt$merged, chains_seq$merged)
  if (requireNamespace("progressr", quietly = TRUE)) expect_equal(updates, 2)
  expect_identical(ksd_blocks(x, tg, blocks = 2, progress = FALSE), ksd_seq)
  expect_identical(kbr_cv(x[, 1], x[, 2], folds = 2, progress = FALSE), cv_seq)
})
