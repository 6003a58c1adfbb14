# Kernel Bayes' rule against kernel density estimation + importance
# weighting on the Gaussian toy, across dimensions: Sec. 5.1 of Fukumizu,
# Song and Gretton (2013, JMLR 14; arXiv 1009.5736), d = 2, 4, ..., 64 at
# n = l = 200.
#
# Usage: Rscript inst/experiments/kbr-sec51.R [outdir] [reps] [cov]
#   outdir  directory for the results (default "kbr-sec51-output")
#   reps    repeats per dimension (default 30; "quick" = 2)
#   cov     covariances to run, comma-separated (default "paper,scaled")
#
# Setting. The text of the paper's Sec. 5.1 could not be retrieved here
# (the extract in shared/papers stops at Sec. 4.3, and the stored copies of
# the paper found by search show only its first page), so the model is
# gauss_toy() of common.R: (X, Y) ~ N((0, 1), Sigma) in R^d x R^d, A a 2d x
# 2d matrix of N(0, 1) entries (a new A for every repeat), prior N(0,
# Sigma_XX / 2), with two covariances (issue 32):
#   "paper"   Sigma = A'A + 2 I, the paper's as two independent readings of
#             it recall it (labelled "as recalled": not checked against the
#             text)
#   "scaled"  Sigma = A'A / (2 d) + 2 I, the package's first reading (the
#             same A), kept as a sensitivity row: A'A / (2d) is of order
#             1 against the noise 2 I, and y says little about x at every
#             d (the exact posterior's total variance, tr P / tr V, is 0.97
#             at every d; 0.90 at d = 2 to 0.62 at d = 64 with "paper";
#             means over the first 10 toys).
# n = 200 joint points, l = 200 prior points (equal
# weights), 200 test observations per run (x from the prior, y | x from the
# model); error = mean over the test points of the squared distance between
# a method's posterior mean and the exact one (the paper's measure).
# Methods:
#   "kbr_fixed"   kbr(), median-heuristic Gaussian kernels, eps = 0.1,
#                 delta = 0.01 (as kbr_fixed in kbr-gaussian-toy.R)
#   "kbr_cv"      kbr() with eps, delta by kbr_cv() (the paper's criterion,
#                 3 folds) over eps in {0.01, 0.1} x delta in {1e-4, 1e-3,
#                 1e-2}, as in kbr-gaussian-toy.R
#   "kde_iw_best" the baseline: Gaussian KDEs of p(x, y) and p(x) from the
#                 joint sample give p^(y | x) = p^(x, y) / p^(x), which
#                 weights the prior sample, w_j ~ p^(y | U_j); the posterior
#                 mean is sum_j w_j U_j / sum_j w_j. Isotropic Gaussian
#                 kernels, bandwidth h_x = c m_x on x and h_y = c m_y on y
#                 (m_x, m_y the median pairwise distances of the joint
#                 sample), c from the grid {1/8, 1/4, 1/2, 1, 2, 4, 8}; the
#                 c with the smallest error against the exact posterior
#                 means (an oracle choice, in the baseline's favour: the
#                 paper's grid is not known here, this grid brackets it)
#   "kde_iw_med"  the same with c = 1 (median heuristic, no oracle)
#   "prior_mean"  the prior mean 0 (ignores y)
# KDE+IW is computed in log space (log-sum-exp), so it stays finite at d =
# 64. Seeds as kbr-gaussian-toy.R with n = 200: the toy of repeat r in
# dimension d is gauss_toy(d, 100 d + r), the samples set.seed(1000 r + 200
# + 7 d) (so at d = 2 and 4 the draws are those of that script at n = 200).
#
# Seeds do not depend on cov: both covariances see the same A, samples and
# test points up to the factor of Sigma.
#
# Writes to outdir: kbr-sec51-results.csv (one row per covariance, d, repeat
# and method, with the chosen eps, delta or c and the seconds taken) and
# kbr-sec51.csv (per covariance, d and method: mean, standard error and
# median of the error over repeats; ratio_to_prior, the ratio of its mean to
# the prior mean's; rel_mean and rel_se, the mean and standard error over
# repeats of the per-repeat ratio; wins over kde_iw_best and over
# kbr_fixed), the latter also copied to inst/extdata/ when the script is
# run from the package's source directory.
#
# Results (2 cores shared with another session's jobs, load average about
#   2; niced, one thread, reference BLAS): 30 repeats at both covariances,
#   10 min 18 s wall (10 min 13 s CPU), about 1.7-1.9 s a repeat for all
#   methods at one d ("quick", 2 repeats of both: 47 s). Mean MSE over the
#   repeats (standard error) [ratio to the prior mean's mean MSE]:
#   Sigma = A'A + 2I (the paper's, as recalled)
#   d   kbr_fixed            kbr_cv               kde_iw_best          kde_iw_med           prior_mean
#   2   0.151 (0.022) [0.21] 0.156 (0.013) [0.21] 0.215 (0.024) [0.29] 0.655 (0.12) [0.89]  0.736 (0.14)
#   4   1.624 (0.16) [0.45]  0.822 (0.055) [0.23] 1.651 (0.12) [0.46]  3.54 (0.31) [0.99]   3.579 (0.30)
#   8   14.09 (0.47) [0.74]  4.939 (0.35) [0.26]  12.85 (0.39) [0.68]  19.19 (0.58) [1.01]  18.92 (0.57)
#   16  77.74 (1.5) [0.91]   28.57 (1.2) [0.33]   73.11 (1.3) [0.86]   86.63 (1.6) [1.01]   85.38 (1.6)
#   32  372.9 (4.0) [0.99]   191.9 (1.8) [0.51]   358.9 (3.7) [0.95]   382.1 (3.9) [1.01]   376.9 (3.9)
#   64  1616 (7.6) [1.01]    1132 (7.1) [0.71]    1588 (7.4) [0.99]    1619 (7.6) [1.01]    1597 (7.3)
#   kbr_cv beats the oracle KDE+IW in 21, 30, 29, 30, 30, 30 of the 30 runs
#   at d = 2, 4, ..., 64 and kbr_fixed in 12, 29, 29, 30, 30, 30; kbr_fixed
#   beats the oracle KDE+IW in 28, 20, 3, 0, 0, 0. kbr_cv chose the grid's
#   smallest eps = 0.01, delta = 1e-4 in 17, 14, 20, 25, 29, 29 runs; the
#   oracle c is 1/4 in every run from d = 4 (1/4 or 1/2 at d = 2).
#   Sigma = A'A / (2d) + 2I (sensitivity; identical to this script's run
#   before issue 32, which used only this covariance)
#   d   kbr_fixed             kbr_cv         kde_iw_best           kde_iw_med     prior_mean
#   2   0.0333 (.0041) [0.39] 0.0800 [0.93] 0.0503 (.0062) [0.58] 0.0883 [1.02] 0.0862
#   4   0.0773 (.0056) [0.53] 0.1791 [1.22] 0.1395 (.0140) [0.95] 0.1731 [1.18] 0.1472
#   8   0.2551 (.0086) [0.82] 0.4503 [1.44] 0.3475 (.0107) [1.11] 0.3765 [1.21] 0.3120
#   16  0.6979 (.0189) [1.11] 1.2070 [1.93] 0.7199 (.0162) [1.15] 0.7532 [1.20] 0.6270
#   32  1.5850 (.0228) [1.27] 1.6250 [1.30] 1.4220 (.0148) [1.14] 1.4910 [1.19] 1.2490
#   64  3.2500 (.0321) [1.30] 3.5550 [1.43] 2.9370 (.0289) [1.18] 2.9950 [1.20] 2.4910
#   kbr_fixed beats the oracle KDE+IW in 24, 28, 29, 22, 1 and 1 of the 30
#   runs, kbr_cv beats kbr_fixed in 2, 3, 5, 16, 25, 17; from d = 16 on no
#   method beats the prior mean 0. The oracle c is 1/2 at d <= 8 and 1/4 at
#   d >= 32.
#   In the paper's covariance KBR with kbr_cv() beats the oracle KDE+IW at
#   every d and its advantage (in ratio to the prior mean's error) grows to
#   d = 16 and narrows after; the fixed setting is too strong a
#   regularisation there. In the scaled one the trend is reversed.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
args <- exp_args(out = "kbr-sec51-output", reps = "30", cov = "paper,scaled")
out <- exp_start(args$out)
reps <- if (identical(args$reps, "quick")) 2L else as.integer(args$reps)
stopifnot(reps >= 1L)
covs <- strsplit(args$cov, ",", fixed = TRUE)[[1L]]
stopifnot(length(covs) >= 1L, all(covs %in% c("paper", "scaled")))
dims <- c(2L, 4L, 8L, 16L, 32L, 64L)
n <- 200L
l <- 200L
n_test <- 200L
grid <- expand.grid(eps = c(1e-2, 1e-1), delta = c(1e-4, 1e-3, 1e-2))
fixed <- c(eps = 0.1, delta = 0.01)
cgrid <- c(1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8)
say <- exp_logger()

mse <- function(a, b) mean(rowSums((a - b)^2))
sqd <- function(a, b) {  # squared distances between the rows of a and b
  pmax(outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b), 0)
}
med_dist <- function(a) stats::median(sqrt(sqd(a, a)[upper.tri(diag(nrow(a)))]))
lse_rows <- function(M) {  # log-sum-exp of each row
  m <- apply(M, 1L, max)
  m + log(rowSums(exp(M - m)))
}
# KDE + importance weighting: posterior means (rows) for the test
# observations yt, for bandwidths hx, hy. Gaussian normalising constants
# cancel in p^(y | U_j) up to a factor common to all j.
kde_iw <- function(x, y, U, yt, hx, hy, Dux, Dty) {
  lkx <- -Dux / (2 * hx^2)               # l x n: log k(U_j, X_i)
  lky <- -Dty / (2 * hy^2)               # t x n: log k(y_t, Y_i)
  lden <- lse_rows(lkx)                  # log p^(U_j) (up to constants)
  t(vapply(seq_len(nrow(yt)), function(s) {
    lw <- lse_rows(sweep(lkx, 2L, lky[s, ], "+")) - lden
    w <- exp(lw - max(lw))
    colSums(U * w) / sum(w)
  }, numeric(ncol(U))))
}

res <- list()
add <- function(d, r, method, eps, delta, c, err, sec) {
  res[[length(res) + 1L]] <<- data.frame(cov = cv_name, d = d, rep = r,
                                         method = method,
                                         eps = eps, delta = delta, c = c,
                                         mse = err, seconds = round(sec, 3))
}
for (cv_name in covs) for (d in dims) {
  t_cell <- Sys.time()
  for (r in seq_len(reps)) {
    toy <- gauss_toy(d, 100L * d + r, cov = cv_name)
    set.seed(1000L * r + n + 7L * d)
    s <- toy$joint(n)
    U <- toy$prior(l)
    yt <- toy$lik(toy$prior(n_test))
    exact <- toy$post_mean(yt)
    add(d, r, "prior_mean", NA, NA, NA, mse(0, exact), 0)
    tm <- system.time({
      fx <- kbr(s$x, s$y, prior = U, eps = fixed[["eps"]],
                delta = fixed[["delta"]])
      err <- mse(posterior_mean(fx, yt), exact)
    })[["elapsed"]]
    add(d, r, "kbr_fixed", fixed[["eps"]], fixed[["delta"]], NA, err, tm)
    tm <- system.time({
      cv <- kbr_cv(s$x, s$y, grid = grid, folds = 3, refit = FALSE)
      fc <- kbr(s$x, s$y, prior = U, eps = cv$best$eps, delta = cv$best$delta)
      err <- mse(posterior_mean(fc, yt), exact)
    })[["elapsed"]]
    add(d, r, "kbr_cv", cv$best$eps, cv$best$delta, NA, err, tm)
    tm <- system.time({
      mx <- med_dist(s$x)
      my <- med_dist(s$y)
      Dux <- sqd(U, s$x)
      Dty <- sqd(yt, s$y)
      errs <- vapply(cgrid, function(cc) {
        mse(kde_iw(s$x, s$y, U, yt, cc * mx, cc * my, Dux, Dty), exact)
      }, 0)
    })[["elapsed"]]
    k <- which.min(errs)
    add(d, r, "kde_iw_best", NA, NA, cgrid[k], errs[k], tm)
    add(d, r, "kde_iw_med", NA, NA, 1, errs[cgrid == 1], tm / length(cgrid))
  }
  cur <- do.call(rbind, res)
  cur <- cur[cur$cov == cv_name & cur$d == d, ]
  m <- tapply(cur$mse, cur$method, mean)
  say("%s, d = %2d, %2d repeats (%5.1f s): MSE kbr fixed %.4f, cv %.4f, kde+iw best %.4f, med %.4f, prior mean %.4f",
      cv_name, d, reps, as.double(difftime(Sys.time(), t_cell, units = "secs")),
      m[["kbr_fixed"]], m[["kbr_cv"]], m[["kde_iw_best"]], m[["kde_iw_med"]],
      m[["prior_mean"]])
}
res <- do.call(rbind, res)
res$mse <- signif(res$mse, 6)

summ <- exp_summary(res, c("cov", "d"), function(v, g) {
  p0 <- g[g$method == "prior_mean", ]
  kd <- g[g$method == "kde_iw_best", ]
  kf <- g[g$method == "kbr_fixed", ]
  list(ratio_to_prior = signif(mean(v$mse) / mean(p0$mse), 4),
       # the ratio's standard error over repeats (per-repeat ratio of the
       # errors: the toy, and the prior mean's error, change with the repeat)
       rel_mean = signif(mean(v$mse / p0$mse[match(v$rep, p0$rep)]), 4),
       rel_se = signif(stats::sd(v$mse / p0$mse[match(v$rep, p0$rep)]) /
                         sqrt(nrow(v)), 3),
       wins_vs_kde_best = sum(v$mse < kd$mse[match(v$rep, kd$rep)]),
       wins_vs_kbr_fixed = sum(v$mse < kf$mse[match(v$rep, kf$rep)]),
       seconds_mean = round(mean(v$seconds), 3))
})
written <- exp_write(list("kbr-sec51-results.csv" = res,
                          "kbr-sec51.csv" = summ), out,
                     extdata = "kbr-sec51.csv")

meths <- c("kbr_fixed", "kbr_cv", "kde_iw_best", "kde_iw_med", "prior_mean")
for (cv_name in covs) {
  sc <- summ[summ$cov == cv_name, ]
  rc <- res[res$cov == cv_name, ]
  cat(sprintf("\n=== Sigma %s ===\n", if (cv_name == "paper")
    "= A'A + 2I (the paper's, as recalled)" else "= A'A / (2d) + 2I (scaled)"))
  cat("Mean posterior-mean MSE over repeats (standard error) [mean over",
      "repeats of the ratio to the prior mean's (its standard error)]:\n")
  tab <- sapply(meths, function(mth) {
    vapply(dims, function(d) {
      v <- sc[sc$d == d & sc$method == mth, ]
      sprintf("%.4f (%.4f) [%.3f (%.3f)]", v$mse_mean, v$mse_se, v$rel_mean,
              v$rel_se)
    }, "")
  })
  rownames(tab) <- paste0("d = ", dims)
  print(noquote(tab))
  cat("\nRuns (of", reps, "per d) in which each method beats kde_iw_best:\n")
  print(xtabs(wins_vs_kde_best ~ d + method,
              sc[sc$method %in% c("kbr_fixed", "kbr_cv", "prior_mean"), ]))
  cat("\nRuns in which kbr_cv beats kbr_fixed, by d:",
      sc$wins_vs_kbr_fixed[sc$method == "kbr_cv"], "\n")
  cat("\nKDE+IW bandwidth factor c chosen (oracle), by d:\n")
  kb <- rc[rc$method == "kde_iw_best", ]
  print(table(kb$d, kb$c))
  cvr <- rc[rc$method == "kbr_cv", ]
  cat("\nkbr_cv() choices (eps/delta), by d:\n")
  print(table(cvr$d, paste(cvr$eps, cvr$delta, sep = "/")))
}
say("done; wrote %s", paste(written, collapse = ", "))
