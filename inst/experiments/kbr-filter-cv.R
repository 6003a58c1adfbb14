# How far kbr_cv()'s pick of (eps, delta) is, for the KBR filter, from the
# best setting known from the truth (issue 33, item 3, the filter half of
# the criterion study; the toy half is inst/experiments/kbr-cv-default.R).
# kbr_filter() has no cross-validation of its own: a user would run
# kbr_cv() on the observation pairs (x_t, y_t) of the training trajectory
# and pass its pick. Here the model is linear Gaussian, so the Kalman filter
# gives the exact filtered means and the floor of the error.
#
# Usage: Rscript inst/experiments/kbr-filter-cv.R [outdir]
#   outdir  directory for the results (default "kbr-filter-cv-output")
# Environment: KBR_FCV_SEEDS (seeds, default "1,...,8"), KBR_FCV_T
#   (training transitions, default 400); KBR_FCV_SEEDS=1,2 KBR_FCV_T=150 is
#   a quick run (well under a minute).
#
# Model (chosen for this study; d = 2, state and observation):
#   x_{t+1} = A x_t + N(0, Q),  y_t = C x_t + N(0, R),
#   A = 0.95 * rotation by 0.3 rad (a damped rotation), C = [1 0.5; 0 1],
#   Q = 0.2^2 I_2, R = 0.3^2 I_2, x_1 from the stationary N(0, P_inf)
#   (P_inf = A P_inf A' + Q; about 0.41 I_2: state sd 0.64 a coordinate).
# Per seed s: set.seed(s), a training trajectory of T + 1 = 401 steps, then
# a test trajectory of 200 steps; error = RMSE of the filtered mean,
# sqrt(mean over the 200 test steps of |m_t - x_t|^2).
#   grid      kbr_filter(x_train, y_train, y_test, eps, delta) with its
#             defaults otherwise (method "iw", median bandwidths, automatic
#             path: low rank for T > 300) for every setting of kbr_cv()'s
#             default grid, eps in {1e-3, 1e-2, 1e-1} x delta in {1e-7, ...,
#             1}; "truth-best" is the setting of the brief's 3 x 3 grid (eps
#             as above, delta in {1e-4, 1e-3, 1e-2}; column in3x3; the
#             filter's default (1e-3, 1e-4) is its corner) with the lowest
#             RMSE, "best of 24" that of the whole grid
#   cv        kbr_cv(x_train, y_train, refit = FALSE): its defaults (5
#             folds, seed 1, the default 3 x 8 grid eps 1e-3..1e-1 x delta
#             1e-7..1, median bandwidths, criterion "marginal", method
#             "kbr"); the pick ($best) is run through kbr_filter() as is
#             (also when outside the 3 x 3 grid)
#   cv_iw     the same with method = "iw" (the filter's form)
#   cv_reg    the same with criterion = "regression", method "kbr"
#   kbr_default  the (eps, delta) kbr(x_train, y_train, method = "iw")
#             chooses with its defaults (issue 33: delta by the regression
#             criterion, eps by the marginal one at that delta, on three
#             subsamples of 400 of the 401 pairs)
#   kalman    kalman_filter() with the true A, C, Q, R and x_1 ~ N(0, P_inf)
# Writes kbr-filter-cv.csv (one row per seed and setting: seed, setting,
# eps, delta, in3x3, rmse, na_steps, ratio_kalman = rmse / Kalman's; rmse
# is over the steps with a filtered state: na_steps > 0 (only delta = 1,
# 181-195 of 200 steps in the run of record) means the weights lost their
# mass, see ?kbr_filter); copied to
# inst/extdata/ from the package's source directory.
#
# Results (the run of record: one process, 8 seeds, niced, one thread, on 2
# cores shared with an R CMD check; 502 s = 8.4 min wall, 12-73 s a seed;
# a rerun gave the same CSV byte for byte): Kalman RMSE 0.268-0.310 (mean
# 0.293). Truth-best of the 3 x 3 grid (1e-3, 1e-2) on 7 seeds, (1e-3,
# 1e-3) on seed 4; its RMSE 1.04-1.44x Kalman's (mean 1.16); on the 3 x 8
# grid delta = 0.1 was better on seeds 2 and 5 (0.94x, 0.93x), delta = 1
# had no filtered state on 181-195 of 200 steps (every eps and seed). The
# filter's default (1e-3, 1e-4): 1.01-1.31x the truth-best (mean 1.09).
# RMSE of the pick over the truth-best's, mean (range; median):
#   cv      1.62 (1.05-4.12; 1.30), delta 1e-7 on 5 seeds, 1e-6, 1e-5,
#           1e-4 on one each; eps 1e-3 on 7; never the truth-best; 1.87x
#           Kalman's on average; worse than the default on 7 seeds (seed
#           4's pick is the default)
#   cv_iw   1.16 (1.00-2.02; 1.04), delta 1e-3 on 5, 1e-4 on 2, 1e-6 on
#           seed 1; the truth-best on seed 4; 1.34x Kalman's
#   cv_reg  2.17 (1.02-8.01; 1.19), delta 1e-6 on 7, 1e-7 on 1; 2.75x
#           Kalman's
#   kbr_default  1.025 (1.00-1.05; 1.02), (1e-3, 1e-3) on 7 seeds, (1e-3,
#           1e-4) on seed 7; 1.19x Kalman's on average. Added in a rerun
#           (2918 s wall on 2 cores shared with four other jobs) whose other
#           rows equal the run above (all.equal on the CSV).
# Table and discussion in vignette("kernel-bayes-rule"), subsection "How
# kbr() chooses eps and delta by default".
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
out <- exp_start(exp_args(out = "kbr-filter-cv-output")$out)
say <- exp_logger()
seeds <- as.integer(strsplit(Sys.getenv("KBR_FCV_SEEDS", "1,2,3,4,5,6,7,8"),
                             ",")[[1]])
T <- as.integer(Sys.getenv("KBR_FCV_T", "400"))
n_test <- 200L
th <- 0.3
A <- 0.95 * matrix(c(cos(th), sin(th), -sin(th), cos(th)), 2)
C <- matrix(c(1, 0, 0.5, 1), 2)
Q <- 0.2^2 * diag(2)
R <- 0.3^2 * diag(2)
# stationary covariance: vec(P) = (I - A (x) A)^{-1} vec(Q)
P_inf <- matrix(solve(diag(4) - kronecker(A, A), c(Q)), 2)
sim <- function(n) {
  x <- matrix(0, n, 2)
  x[1, ] <- drop(t(chol(P_inf)) %*% rnorm(2))
  for (t in 2:n) x[t, ] <- A %*% x[t - 1, ] + rnorm(2, sd = 0.2)
  list(x = x, y = x %*% t(C) + matrix(rnorm(2 * n, sd = 0.3), n))
}
# kbr_cv()'s default grid (3 x 8); the brief's 3 x 3 grid is its rows
# with delta in 1e-4..1e-2 (column in3x3)
grid <- kernbayes:::kbr_default_grid()
grid$in3x3 <- grid$delta >= 1e-4 & grid$delta <= 1e-2
rows <- list()
for (s in seeds) {
  set.seed(s)
  tr <- sim(T + 1L)
  te <- sim(n_test)
  rmse_of <- function(m) {
    e <- rowSums((m - te$x)^2)
    c(rmse = sqrt(mean(e, na.rm = TRUE)), na_steps = sum(is.na(e)))
  }
  filt <- function(eps, delta) {
    f <- withCallingHandlers(
      tryCatch(kbr_filter(tr$x, tr$y, te$y, eps = eps, delta = delta,
                          progress = FALSE)$mean,
               error = function(e) matrix(NA_real_, n_test, 2)),
      warning = function(w) invokeRestart("muffleWarning"))
    rmse_of(f)
  }
  kal <- rmse_of(kalman_filter(te$y, A, C, Q, R, m0 = c(0, 0), P0 = P_inf)$mean)
  res <- data.frame(seed = s, setting = "kalman", eps = NA, delta = NA,
                    in3x3 = NA, rmse = kal[["rmse"]],
                    na_steps = kal[["na_steps"]])
  for (i in seq_len(nrow(grid))) {
    r <- filt(grid$eps[i], grid$delta[i])
    res <- rbind(res, data.frame(seed = s, setting = "grid", eps = grid$eps[i],
                                 delta = grid$delta[i], in3x3 = grid$in3x3[i],
                                 rmse = r[["rmse"]],
                                 na_steps = r[["na_steps"]]))
  }
  cvs <- list(cv = list(), cv_iw = list(method = "iw"),
              cv_reg = list(criterion = "regression"))
  for (nm in c(names(cvs), "kbr_default")) {
    b <- if (nm == "kbr_default") {
      suppressMessages(kbr(tr$x, tr$y, method = "iw", progress = FALSE))[c("eps", "delta")]
    } else {
      do.call(kbr_cv, c(list(tr$x, tr$y, refit = FALSE, progress = FALSE),
                        cvs[[nm]]))$best
    }
    r <- filt(b$eps, b$delta)
    res <- rbind(res, data.frame(seed = s, setting = nm, eps = b$eps,
                                 delta = b$delta,
                                 in3x3 = b$eps %in% grid$eps & b$delta >= 1e-4 &
                                   b$delta <= 1e-2, rmse = r[["rmse"]],
                                 na_steps = r[["na_steps"]]))
  }
  res$ratio_kalman <- res$rmse / kal[["rmse"]]
  rows[[length(rows) + 1L]] <- res
  g <- res[res$setting == "grid" & res$in3x3, ]
  k <- which.min(g$rmse)
  say("seed %d: kalman %.4f, truth-best (%g, %g) %.4f, cv (%g, %g) %.4f",
      s, kal[["rmse"]], g$eps[k], g$delta[k], g$rmse[k],
      res$eps[res$setting == "cv"], res$delta[res$setting == "cv"],
      res$rmse[res$setting == "cv"])
}
res <- do.call(rbind, rows)
res$rmse <- signif(res$rmse, 5)
res$ratio_kalman <- signif(res$ratio_kalman, 5)
print(exp_write(list(`kbr-filter-cv.csv` = res), out, "kbr-filter-cv.csv"))
# the summary of the header
summ <- do.call(rbind, lapply(split(res, res$seed), function(v) {
  g <- v[v$setting == "grid" & v$in3x3, ]
  k <- which.min(g$rmse)
  # a setting whose weights lose their mass (NA steps; delta = 1 here)
  # does not count
  g8 <- v[v$setting == "grid" & v$na_steps == 0, ]
  k8 <- which.min(g8$rmse)
  pick <- function(nm) v[v$setting == nm, ]
  data.frame(seed = v$seed[1], kalman = v$rmse[v$setting == "kalman"],
             best = sprintf("%g,%g", g$eps[k], g$delta[k]), best_rmse = g$rmse[k],
             default_ratio = g$rmse[g$eps == 1e-3 & g$delta == 1e-4] / g$rmse[k],
             cv = sprintf("%g,%g", pick("cv")$eps, pick("cv")$delta),
             cv_ratio = pick("cv")$rmse / g$rmse[k],
             cv_iw = sprintf("%g,%g", pick("cv_iw")$eps, pick("cv_iw")$delta),
             cv_iw_ratio = pick("cv_iw")$rmse / g$rmse[k],
             cv_reg = sprintf("%g,%g", pick("cv_reg")$eps, pick("cv_reg")$delta),
             cv_reg_ratio = pick("cv_reg")$rmse / g$rmse[k],
             kbr_default = sprintf("%g,%g", pick("kbr_default")$eps,
                                   pick("kbr_default")$delta),
             kbr_default_ratio = pick("kbr_default")$rmse / g$rmse[k],
             best_over_kalman = g$rmse[k] / v$rmse[v$setting == "kalman"],
             best24 = sprintf("%g,%g", g8$eps[k8], g8$delta[k8]),
             best24_ratio = g8$rmse[k8] / g$rmse[k],
             na_cv = pick("cv")$na_steps)
}))
print(summ, digits = 4)
print(colMeans(summ[sapply(summ, is.numeric)][-1]), digits = 4)
say("done")
