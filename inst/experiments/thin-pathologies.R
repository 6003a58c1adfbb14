# When greedy thinning goes wrong (issue 16, section 4): Stein thinning,
# regularised Stein thinning (Benard, Staber & Da Veiga 2023) and
# KSD-optimal weights on two targets where greedy KSD minimisation is known
# to fail, judged by yardsticks that do not use the KSD.
#
# Usage: Rscript inst/experiments/thin-pathologies.R [outdir] [seeds] [n]
#   outdir  directory for the results (default "thin-pathologies-output")
#   seeds   samples per target (default 10; 3 for a quick run)
#   n       exact draws per sample (default 5000)
#
# Targets (exact i.i.d. draws, so every failure is the method's):
#   mixture  0.2 N((-3, 0), I) + 0.8 N((3, 0), I); yardstick: the fraction
#            of the selected points (or weight) in the heavy mode x1 > 0
#            (truth 0.8)
#   funnel   Neal's funnel in d = 3: v ~ N(0, 3^2), x_k | v ~ N(0, e^v),
#            k = 1, 2; yardsticks: the standard deviation of v (truth 3)
#            and the mean of v (truth 0)
# Methods, m = 200 points from each sample of n: "uniform" (a random
# subsample: the Monte Carlo baseline), "stein" (stein_thin, reference
# defaults), "stein_reg" (stein_thin(regularize = TRUE), lambda = 1/m),
# "stein_raw" and "stein_reg_raw" (the same two without standardising the
# columns, IMQ with the median-heuristic lengthscale: the setting of the
# regularised method's paper and its kernax implementation),
# "weights" (ksd_weights on the whole sample, simplex weights; their
# summaries are weighted, and for W2 m points are drawn by systematic
# resampling of the weights). For all: W2 (exact, wasserstein2) between the
# m points and m fresh exact draws, and the KSD of the selection (IMQ,
# standardised columns, as stein_thin).
#
# Writes outdir/thin-pathologies-runs.csv (one row per target, seed and
# method) and outdir/thin-pathologies.csv (mean and standard error over the
# seeds), the latter also to inst/extdata/ from the source directory.
#
# Results (R 4.2.2, one thread, a shared two-core machine at load 5-6; 10
# seeds, n = 5000, m = 200; wall time about 3 min, ksd_weights 4.7 s
# (mixture) and 9.3 s (funnel) per sample). Mean over the seeds (standard
# error):
#   mixture, heavy-mode share (truth 0.8): uniform 0.78 (0.01), stein 0.50
#     (0.03), stein_reg 0.74 (0.02), stein_raw 0.49 (0.02), stein_reg_raw
#     0.89 (0.02), weights 0.88 (0.004); W2 to fresh draws 0.76 / 2.37 /
#     1.04 / 2.39 / 1.25 / 1.21
#   funnel, mean and sd of v (truth 0, 3): uniform -0.05 / 3.09, stein
#     4.94 / 1.65, stein_reg 4.00 / 1.97, stein_raw 5.47 / 1.58,
#     stein_reg_raw 0.63 / 2.23, weights -0.50 / 2.63; W2 12.7 / 40.7 /
#     22.3 / 51.3 / 11.8 / 12.1 (standard errors 1.8-3.5)
here <- tryCatch(dirname(normalizePath(sys.frame(1)$ofile)),
                 error = function(e) NULL)
if (is.null(here)) {
  f <- grep("^--file=", commandArgs(FALSE), value = TRUE)
  here <- if (length(f)) dirname(normalizePath(sub("^--file=", "", f[1]))) else
    "inst/experiments"
}
source(file.path(here, "common.R"))
a <- exp_args(out = "thin-pathologies-output", seeds = "10", n = "5000")
out <- exp_start(a$out)
seeds <- as.integer(a$seeds)
n <- as.integer(a$n)
m <- 200L
say <- exp_logger()

funnel_draw <- function(n) {
  v <- stats::rnorm(n, 0, 3)
  cbind(v, matrix(stats::rnorm(2 * n), n) * exp(v / 2))
}
mix <- gaussian_mixture_target(means = rbind(c(-3, 0), c(3, 0)),
                               weights = c(0.2, 0.8))
targets <- list(
  mixture = list(target = mix, draw = function(n) sample_target(mix, n)),
  funnel = list(target = funnel_target(), draw = funnel_draw))

# m indices drawn by systematic resampling of weights w
systematic <- function(w, m) {
  u <- (stats::runif(1) + 0:(m - 1)) / m
  findInterval(u, cumsum(w) / sum(w)) + 1L
}

rows <- list()
for (tn in names(targets)) {
  tt <- targets[[tn]]
  for (seed in seq_len(seeds)) {
    set.seed(seed)
    x <- tt$draw(n)
    s <- target_score(tt$target, x)
    fresh <- tt$draw(m)
    sel <- list(
      uniform = exp_timed(list(index = sample.int(n, m))),
      stein = exp_timed(stein_thin(x, s, m, progress = FALSE)),
      stein_reg = exp_timed(stein_thin(x, tt$target, m, regularize = TRUE,
                                       progress = FALSE)),
      stein_raw = exp_timed(stein_thin(x, s, m, standardize = FALSE,
                                       kernel = imq_kernel(precon = "med"),
                                       progress = FALSE)),
      stein_reg_raw = exp_timed(stein_thin(x, tt$target, m,
                                           standardize = FALSE,
                                           kernel = imq_kernel(precon = "med"),
                                           regularize = TRUE,
                                           progress = FALSE)))
    w <- exp_timed(ksd_weights(x, s, standardize = FALSE))
    sel$weights <- structure(list(index = systematic(w, m), w = w),
                             seconds = exp_secs(w))
    for (meth in names(sel)) {
      idx <- sel[[meth]]$index
      pts <- x[idx, , drop = FALSE]
      wt <- if (meth == "weights") as.double(sel[[meth]]$w) else
        tabulate(idx, n) / m
      k <- ksd(x[wt > 0, , drop = FALSE], s[wt > 0, , drop = FALSE],
               standardize = TRUE, weights = wt[wt > 0])
      row <- data.frame(target = tn, seed = seed, method = meth,
                        ksd = k, w2 = wasserstein2(pts, fresh),
                        seconds = exp_secs(sel[[meth]]))
      if (tn == "mixture") {
        row$heavy_frac <- sum(wt[x[, 1] > 0])
      } else {
        mv <- sum(wt * x[, 1])
        row$v_mean <- mv
        row$v_sd <- sqrt(sum(wt * (x[, 1] - mv)^2))
      }
      rows[[length(rows) + 1L]] <- row
    }
    say("%s seed %d done", tn, seed)
  }
}
all_cols <- unique(unlist(lapply(rows, names)))
runs <- do.call(rbind, lapply(rows, function(r) {
  r[setdiff(all_cols, names(r))] <- NA
  r[all_cols]
}))
stat_cols <- c("ksd", "w2", "heavy_frac", "v_mean", "v_sd", "seconds")
key <- unique(runs[c("target", "method")])
summ <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  v <- runs[runs$target == key$target[i] & runs$method == key$method[i], ]
  st <- lapply(stat_cols, function(cn) {
    z <- v[[cn]]
    stats::setNames(data.frame(signif(mean(z), 4),
                               signif(stats::sd(z) / sqrt(length(z)), 3)),
                    c(paste0(cn, "_mean"), paste0(cn, "_se")))
  })
  data.frame(key[i, ], seeds = nrow(v), n = n, m = m,
             do.call(cbind, st), row.names = NULL)
}))
print(summ)
exp_write(list(`thin-pathologies-runs.csv` = runs,
               `thin-pathologies.csv` = summ), out,
          extdata = "thin-pathologies.csv")
