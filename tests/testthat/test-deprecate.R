# Renamed arguments: the old names give the same results with a message,
# once per session and name.

fresh_deprecations <- function() {
  rm(list = ls(kernbayes:::deprecation_seen),
     envir = kernbayes:::deprecation_seen)
}

test_that("step -> step_size: samplers give identical results with a message once", {
  tg <- gaussian_target(c(0, 0))
  for (f in c("mala", "rwm")) {
    fresh_deprecations()
    fun <- get(f)
    set.seed(1)
    new <- fun(tg, c(1, 1), 200, step_size = 0.7, progress = FALSE)
    set.seed(1)
    expect_message(old <- fun(tg, c(1, 1), 200, step = 0.7, progress = FALSE),
                   sprintf("%s\\(\\): argument 'step' is deprecated; use 'step_size'", f),
                   class = "kb_deprecated")
    expect_identical(old, new)
    set.seed(1)
    expect_no_message(fun(tg, c(1, 1), 200, step = 0.7, progress = FALSE))
    expect_error(fun(tg, c(1, 1), 200, step = 0.7, step_size = 0.7),
                 class = "kb_error_arg", regexp = "'step' is the old name of 'step_size'")
  }
})

test_that("step -> step_size and m -> candidates: KSDT samplers and SP-MCMC", {
  fresh_deprecations()
  tg <- gaussian_target(c(0, 0))
  set.seed(2)
  new <- ksdt_sample(tg, c(0, 0), 100, step_size = 0.8, progress = FALSE)
  set.seed(2)
  expect_message(old <- ksdt_sample(tg, c(0, 0), 100, step = 0.8, progress = FALSE),
                 "ksdt_sample\\(\\): argument 'step'", class = "kb_deprecated")
  expect_identical(old, new)
  set.seed(3)
  new <- sp_mcmc(tg, c(0, 0), 15, candidates = 3, step_size = 0.8, progress = FALSE)
  set.seed(3)
  expect_message(expect_message(
    old <- sp_mcmc(tg, c(0, 0), 15, m = 3, step = 0.8, progress = FALSE),
    "sp_mcmc\\(\\): argument 'm' is deprecated; use 'candidates'"),
    "sp_mcmc\\(\\): argument 'step'")
  expect_identical(old, new)
  expect_error(sp_mcmc(tg, c(0, 0), 15, m = 3, candidates = 3), class = "kb_error_arg",
               regexp = "'m' is the old name of 'candidates'")
  # ksdt_chains passes the old name on, reported once, not by every chain
  fresh_deprecations()
  set.seed(4)
  new <- ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 100, step_size = 0.8,
                     progress = FALSE)
  set.seed(4)
  expect_message(old <- ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 100, step = 0.8,
                                    progress = FALSE),
                 "'step' is deprecated")
  new$elapsed <- old$elapsed <- 0
  expect_identical(old, new)
})

test_that("step -> step_size: particle flows", {
  fresh_deprecations()
  tg <- gaussian_target(c(0, 0))
  set.seed(5)
  x0 <- matrix(rnorm(40), 20)
  y <- matrix(rnorm(60), 30)
  calls <- list(
    svgd = function(...) svgd(x0, tg, n_iter = 5, progress = FALSE, ...),
    ksd_descent = function(...) ksd_descent(x0, tg, method = "gd", n_iter = 3,
                                             progress = FALSE, ...),
    mmd_flow = function(...) mmd_flow(x0, y, n_iter = 5, progress = FALSE, ...),
    dmmd_flow = function(...) dmmd_flow(x0, y, n_iter = 5, progress = FALSE, ...),
    mied = function(...) mied(x0, tg, n_iter = 5, progress = FALSE, ...))
  for (nm in names(calls)) {
    new <- calls[[nm]](step_size = 0.01)
    expect_message(old <- calls[[nm]](step = 0.01),
                   sprintf("%s\\(\\): argument 'step' is deprecated", nm))
    new$elapsed <- old$elapsed <- NULL
    expect_identical(old, new)
  }
})

test_that("fit -> refit in kbr_cv()", {
  fresh_deprecations()
  set.seed(6)
  x <- rnorm(60)
  y <- x + rnorm(60, sd = 0.5)
  grid <- data.frame(eps = c(0.01, 0.1), delta = 0.01)
  new <- kbr_cv(x, y, grid = grid, folds = 3, refit = FALSE, progress = FALSE)
  expect_message(old <- kbr_cv(x, y, grid = grid, folds = 3, fit = FALSE,
                               progress = FALSE),
                 "kbr_cv\\(\\): argument 'fit' is deprecated; use 'refit'")
  expect_identical(old, new)
})

test_that("KSDT size is a constant minimum size, exclusive with min_size", {
  set.seed(7)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 300)
  a <- ksdt(x, tg, size = 15, progress = FALSE)
  b <- ksdt(x, tg, min_size = "constant", min_size_coef = 15,
            min_size_floor = 15, progress = FALSE)
  expect_identical(a, b)
  # a large budget prunes to exactly size
  p <- ksdt(x, tg, size = 15, budget = 1e10, progress = FALSE)
  expect_true(all(p$size[15:300] == 15))
  st <- ksdt_stream(2, size = 15, progress = FALSE)
  ksdt_push(st, x, tg)
  expect_identical(ksdt_result(st)$index, a$index)
  set.seed(8)
  s1 <- ksdt_sample(tg, c(0, 0), 100, step_size = 1, size = 12, progress = FALSE)
  set.seed(8)
  s2 <- ksdt_sample(tg, c(0, 0), 100, step_size = 1, min_size = "constant",
                    min_size_coef = 12, min_size_floor = 12, progress = FALSE)
  expect_identical(s1, s2)
  for (bad in list(list(min_size = "linear"), list(min_size_coef = 2),
                   list(min_size_floor = 3))) {
    expect_error(do.call(ksdt, c(list(x, tg, size = 10), bad)),
                 class = "kb_error_arg", regexp = "'size' sets a constant minimum size")
  }
  expect_error(ksdt_stream(2, size = 10, min_size = "sqrt"), class = "kb_error_arg",
               regexp = "'size'")
  expect_error(ksdt(x, tg, size = 0), class = "kb_error_arg", regexp = "'size'")
  expect_error(ksdt_chains(tg, rbind(c(0, 0)), 10, size = 5, min_size_coef = 2,
                           progress = FALSE),
               class = "kb_error_arg", regexp = "'size'")
})

test_that("score -> target in svgd() and ksd_descent(), identical with a message once", {
  tg <- gaussian_target(c(0, 0))
  set.seed(5)
  x0 <- matrix(rnorm(40, sd = 2), 20)
  calls <- list(
    svgd = function(...) svgd(x0, ..., n_iter = 20, progress = FALSE),
    ksd_descent = function(...) ksd_descent(x0, ..., n_iter = 10, progress = FALSE))
  for (f in names(calls)) {
    fresh_deprecations()
    new <- calls[[f]](target = tg)
    expect_message(old <- calls[[f]](score = tg),
                   sprintf("%s\\(\\): argument 'score' is deprecated; use 'target'", f),
                   class = "kb_deprecated")
    expect_identical(old, new)
    expect_no_message(calls[[f]](score = tg))
    expect_error(calls[[f]](score = tg, target = tg), class = "kb_error_arg",
                 regexp = "'score' is the old name of 'target'")
  }
  # a score function is still a target for the flows that use only the score
  s <- function(x) -x
  expect_identical(svgd(x0, s, n_iter = 20, progress = FALSE)$x,
                   svgd(x0, tg, n_iter = 20, progress = FALSE)$x)
})

test_that("n -> m in stein_points(), log_p -> log_density in stein_thin_gf()", {
  fresh_deprecations()
  tg <- gaussian_target(c(0, 0))
  set.seed(6)
  new <- stein_points(tg, m = 4)
  set.seed(6)
  expect_message(old <- stein_points(tg, n = 4),
                 "stein_points\\(\\): argument 'n' is deprecated; use 'm'",
                 class = "kb_deprecated")
  expect_identical(old, new)
  expect_error(stein_points(tg, m = 4, n = 4), class = "kb_error_arg",
               regexp = "'n' is the old name of 'm'")
  set.seed(7)
  x <- sample_target(tg, 100)
  q <- gaussian_target(colMeans(x), cov(x))
  new <- stein_thin_gf(x, log_density = tg, log_q = q, score_q = q, m = 5)
  expect_message(old <- stein_thin_gf(x, log_p = tg, log_q = q, score_q = q, m = 5),
                 "stein_thin_gf\\(\\): argument 'log_p' is deprecated; use 'log_density'",
                 class = "kb_deprecated")
  expect_identical(old, new)
  expect_no_message(stein_thin_gf(x, log_p = tg, log_q = q, score_q = q, m = 5))
})

test_that("size -> m in c() and merge() of KSDT dictionaries", {
  fresh_deprecations()
  tg <- gaussian_target(c(0, 0))
  set.seed(8)
  a <- ksdt(sample_target(tg, 200), tg, standardize = FALSE, progress = FALSE)
  b <- ksdt(sample_target(tg, 200), tg, standardize = FALSE, progress = FALSE)
  new <- c(a, b, how = "stein_thin", m = 10)
  expect_message(old <- c(a, b, how = "stein_thin", size = 10),
                 "c\\(\\): argument 'size' is deprecated; use 'm'",
                 class = "kb_deprecated")
  expect_identical(old, new)
  expect_message(old2 <- merge(a, b, how = "stein_thin", size = 10),
                 "merge\\(\\): argument 'size' is deprecated; use 'm'")
  expect_identical(old2, merge(a, b, how = "stein_thin", m = 10))
  expect_error(c(a, b, how = "stein_thin", m = 10, size = 10), class = "kb_error_arg",
               regexp = "'size' is the old name of 'm'")
})

test_that("the shared arguments come last, in the order standardize, nthreads, chain, progress", {
  shared <- c("standardize", "nthreads", "chain", "progress")
  ns <- asNamespace("kernbayes")
  for (f in getNamespaceExports("kernbayes")) {
    a <- names(formals(get(f, ns)))
    s <- a[a %in% shared]
    if (!length(s)) next
    expect_identical(s, shared[shared %in% s], info = f)
    # after them only deprecated names (the arguments that deprecated_arg()
    # handles in the body)
    after <- a[-seq_len(max(match(s, a)))]
    body_text <- paste(deparse(body(get(f, ns))), collapse = " ")
    for (d in after) {
      expect_match(body_text, sprintf("deprecated_arg(\"%s\"", d), fixed = TRUE,
                   info = paste(f, d))
    }
  }
})
