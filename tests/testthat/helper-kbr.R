# Data shared by test-kbr.R, test-kbr-cv.R and test-filters.R.

# A small 1-d problem: X ~ N(0, 1), Y = X + N(0, 0.5^2); the exact posterior
# under the N(0, 1) prior is N(0.8 y, 0.2).
kbr_toy_1d <- function(n, seed) {
  set.seed(seed)
  x <- rnorm(n)
  list(x = x, y = x + rnorm(n, sd = 0.5))
}

# The Gaussian toy with a closed-form posterior, (X, Y) ~ N((0, 1), Sigma) in
# R^d x R^d, prior N(0, Sigma_XX / 2): gauss_toy() of the experiment
# scripts' helpers (inst/experiments/common.R), which the full-scale runs
# use too; its argument cov chooses Sigma = A'A + 2I ("paper", the default)
# or A'A / (2d) + 2I ("scaled").
kbr_gauss_toy <- local({
  env <- new.env()
  sys.source(system.file("experiments", "common.R", package = "kernbayes",
                         mustWork = TRUE), envir = env)
  env$gauss_toy
})
