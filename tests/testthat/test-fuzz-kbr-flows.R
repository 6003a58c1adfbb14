# Robustness audit (fuzzing) of kernel Bayes' rule, its cross-validation and
# filter, and the particle flows: edge sizes and data, differential checks
# against a plain-R transcription of the formulas of ?kbr / ?kbr_cv /
# ?kbr_filter written here (no shared helpers), 1 vs 2 threads, and bad
# input.  Regression tests for the bugs the audit found.

# ---- a plain-R reference, from the formulas --------------------------------

fz_gram <- function(a, b, s) {
  a <- as.matrix(a)
  b <- as.matrix(b)
  D <- outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b)
  exp(-pmax(D, 0) / (2 * s^2))
}
fz_rel <- function(a, b) max(abs(a - b)) / max(abs(b))

# ---- errors about the data's scale name the data ----------------------------

test_that("a median heuristic that fails on y names y (or grid), not x, before any work", {
  set.seed(1)
  x <- rnorm(12)
  tiny <- 1e-200 * rnorm(12)
  expect_error(kbr(x, tiny, eps = 0.1, delta = 0.1), "^'y' has a median",
               class = "kb_error_arg")
  expect_error(kbr_cv(x, tiny, grid = data.frame(eps = 1, delta = 1), folds = 2),
               "^'y' has a median", class = "kb_error_arg")
  expect_error(kbr_filter(c(x, 1), c(tiny, 0), tiny), "^'y_train' has a median",
               class = "kb_error_arg")
  # constant y: kbr() with default eps/delta names kernel_y and y before the
  # tuning's message
  expect_silent(expect_error(kbr(x, rep(2, 12)), "'kernel_y' uses the median heuristic, which fails on 'y'",
                             class = "kb_error_arg"))
  e <- expect_error(kbr_cv(x, rep(2, 12), grid = data.frame(eps = 1, delta = 1),
                           folds = 2), class = "kb_error_arg")
  expect_identical(e$arg, "grid")
  expect_match(conditionMessage(e), "fails on 'y'.*sigma_y")
  # a later bandwidth setting that fails is found before the first runs
  grid <- data.frame(eps = 1, delta = 1, sigma_x = c(1, NA))
  e <- expect_error(kbr_cv(rep(1, 12), x, grid = grid, folds = 2,
                           progress = FALSE), class = "kb_error_arg")
  expect_identical(e$arg, "grid")
  expect_match(conditionMessage(e), "fails on 'x'.*sigma_x")
  e <- expect_error(kbr_cv(x, x, grid = data.frame(eps = 1, delta = 1, sigma_x = 1e-200),
                           folds = 2), class = "kb_error_arg")
  expect_identical(e$arg, "grid")
  expect_match(conditionMessage(e), "column sigma_x: 'bandwidth' = 1e-200")
  # a complex grid column is an argument error, not a failed comparison
  expect_error(kbr_cv(x, x, grid = data.frame(eps = 1 + 0i, delta = 1), folds = 2),
               "'grid' column eps", class = "kb_error_arg")
})

test_that("kbr_cv() takes a bandwidth column of NA only as the median heuristic", {
  set.seed(2)
  x <- matrix(rnorm(40), 20)
  y <- x + rnorm(40)
  grid <- data.frame(eps = c(0.01, 0.1), delta = 0.01)
  ref <- kbr_cv(x, y, grid = grid, folds = 2, refit = FALSE)$table
  for (method in c("kbr", "iw")) {
    g <- grid
    g$sigma_x <- NA
    g$sigma_y <- NA
    tab <- kbr_cv(x, y, grid = g, folds = 2, refit = FALSE,
                  method = method)$table
    expect_identical(tab$sigma_x, c(NA_real_, NA_real_))
    if (method == "kbr") expect_identical(tab$criterion, ref$criterion)
  }
  expect_error(kbr_cv(x, y, grid = data.frame(eps = 1, delta = 1, sigma_x = TRUE),
                      folds = 2), "'grid' column sigma_x", class = "kb_error_arg")
})
