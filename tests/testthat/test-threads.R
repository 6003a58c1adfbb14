# The thread policy (src/runtime.c, kb_team): regions follow the machine's
# load unless options(kernbayes.follow_load = FALSE); results never depend
# on the team.  helper-threads.R switches following off for all tests.

test_that("the team follows the option and never exceeds the request", {
  cores <- parallel::detectCores()
  on.exit(options(kernbayes.follow_load = FALSE))
  options(kernbayes.follow_load = FALSE)
  expect_identical(kernbayes:::thread_team(1L), 1L)
  expect_identical(kernbayes:::thread_team(2L), as.integer(min(2L, cores)))
  options(kernbayes.follow_load = TRUE)
  for (i in 1:3) {
    tm <- kernbayes:::thread_team(2L)
    expect_true(tm >= 1L && tm <= min(2L, cores))
    Sys.sleep(0.12)   # a new sample of the load
  }
  expect_identical(kernbayes:::thread_team(1L), 1L)
  # results do not depend on it
  x <- matrix(stats::rnorm(600), 300)
  a <- ksd(x, -x, nthreads = 2, progress = FALSE)
  options(kernbayes.follow_load = FALSE)
  expect_identical(ksd(x, -x, nthreads = 2, progress = FALSE), a)
})

test_that("a bad kernbayes.follow_load is an error naming the option", {
  on.exit(options(kernbayes.follow_load = FALSE))
  x <- matrix(stats::rnorm(40), 20)
  for (bad in list(NA, "yes", c(TRUE, FALSE), 1)) {
    options(kernbayes.follow_load = bad)
    expect_error(ksd(x, -x, progress = FALSE), class = "kb_error_arg",
                 regexp = "kernbayes.follow_load")
  }
})

test_that("KSDT: 1 and 2 threads agree when every pass of a step is parallel", {
  skip_on_cran()
  # d = 1: the Stein passes (11 n work units) reach KSDT_PAR_MIN_PASS = 2e5
  # (src/ksdt.c) from n = 18182, the scans of the row sums (2 n) from n = 1e4
  set.seed(301)
  n <- 18500
  x <- matrix(0, n, 1)
  for (t in 2:n) x[t] <- 0.9 * x[t - 1] + sqrt(1 - 0.81) * stats::rnorm(1)
  s <- -x + 0.2 * stats::rnorm(n)
  fields <- c("points", "score", "index", "ksd", "size", "removed", "evals")
  for (cf in c(2600, 18300)) {
    m <- if (cf < 3000) 2800 else n
    run <- function(nt) {
      ksdt(x[1:m, , drop = FALSE], s[1:m, , drop = FALSE], budget = 1e-6,
           min_size = "constant", min_size_coef = cf, nthreads = nt,
           progress = FALSE)
    }
    a <- run(1)
    expect_gte(length(a$index), cf)
    expect_gt(sum(a$removed), 100)
    expect_identical(run(2)[fields], a[fields])
  }
  # the final KSD of the smaller run from the formulas on its points
  a <- ksdt(x[1:2800, , drop = FALSE], s[1:2800, , drop = FALSE],
            budget = 1e-6, min_size = "constant", min_size_coef = 2600,
            nthreads = 2, progress = FALSE, standardize = FALSE)
  i <- a$index
  K <- ref_stein_cross(x[i, , drop = FALSE], s[i, , drop = FALSE])
  expect_lt(rel_err(a$ksd[2800], sqrt(mean(K))), 1e-10)
})

test_that("stein_thin: 1 and 2 threads agree when every step is a region", {
  skip_on_cran()
  # n = 1600, d = 2: 14 n = 22400 work units per step >= KB_PAR_MIN_STEP
  set.seed(302)
  smp <- ref_noisy_sample(1600, 2)
  K <- ref_stein(smp$x, smp$s, "imq", 1, -0.5, "med", standardize = TRUE)
  thin_on <- function(nt, uq) {
    stein_thin(smp$x, smp$s, 25, imq_kernel(precon = "med"), unique = uq,
               nthreads = nt, progress = FALSE)[c("index", "ksd")]
  }
  want <- ref_greedy(K, 25)
  expect_identical(thin_on(1, FALSE)$index, as.integer(want))
  expect_lt(rel_err(thin_on(1, FALSE)$ksd, ref_sel_path(K, want)), 1e-12)
  expect_identical(thin_on(2, FALSE), thin_on(1, FALSE))
  expect_identical(thin_on(2, TRUE), thin_on(1, TRUE))
  expect_identical(thin_on(2, TRUE)$index,
                   as.integer(ref_greedy(K, 25, unique = TRUE)))
})
