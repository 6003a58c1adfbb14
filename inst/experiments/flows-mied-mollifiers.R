# MIED's three mollifiers side by side: Korba's talk "Sampling through
# optimization of divergences" (2024), slide 26, lists the Gaussian,
# Laplace and Riesz-s mollifiers of Li, Liu, Korba, Yurochkin and Solomon
# (2023, "Sampling with mollified interaction energy descent") without a
# comparison in numbers; this script makes one (issue 32, item 5). It is the
# package's own experiment, not a figure of the talk or the paper.
#
# Usage: Rscript inst/experiments/flows-mied-mollifiers.R [outdir]
#   outdir  directory for the results (default "flows-mied-mollifiers-output")
# Environment (to shorten the run for testing):
#   MIED_MOLL_SEEDS  initial particle sets per target (default 10; at least 2)
#   MIED_MOLL_ITER   MIED iterations (default 1000; at least 10)
#   MIED_MOLL_N      particles (default 200; at least 10)
#
# What is run:
# - targets: "gauss2", N((-1, 1), [1, 0.5; 0.5, 2]); "mixture2", the equal
#   mixture of N((-2, 0), 0.5^2 I) and N((2, 0), 0.5^2 I); "gauss10",
#   N(0, S) in d = 10 with sds 1, 1.22, ..., 3 (evenly spaced) and
#   correlations 0.5^|i - j| (our choices: a correlated Gaussian, two
#   separated modes, a higher dimension);
# - start: MIED_MOLL_N particles from N(0, I), the same sets (seeds 1, 2,
#   ...) for every mollifier, so that comparisons are paired;
# - mied(): Adam, step 0.05, MIED_MOLL_ITER iterations; mollifiers "riesz"
#   (s = d + 1e-4, eps = 1e-8: the package's defaults, the authors'
#   choice), "gaussian" and "laplace" at scales eps = 0.1, 0.2, 0.5, 1, 2
#   (the Gaussian and Laplace energies need a scale of the order of the
#   particles' spacing, and no default suits every target and size);
# - yardsticks against 4000 exact draws of the target (fixed per target):
#   the energy distance 2 E|X - Y| - E|X - X'| - E|Y - Y'| (X the
#   particles, Y the exact draws; V-statistics), the largest error of a
#   coordinate's mean in target sds, the range of the ratios particle sd /
#   target sd, and for the mixture the share of particles in the right-hand
#   mode; beside them the same yardsticks for 10 sets of as many exact
#   i.i.d. draws ("exact"), the level a sampler of that size reaches by
#   chance; `settle` is the change of the objective over the last tenth of
#   the iterations (how far from converged the run stopped).
#
# Writes to outdir: flows-mied-mollifiers-runs.csv (one row per target,
# mollifier, eps and seed) and flows-mied-mollifiers.csv (per target,
# mollifier and eps: means and standard errors over the seeds, and the
# number of seeds whose energy distance is below Riesz's, paired); the
# summary is copied to inst/extdata/ when run from the package's source
# directory.
#
# Results: see the end of this header after a full run.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
out <- exp_start(exp_args(out = "flows-mied-mollifiers-output")$out)
n_seeds <- as.integer(Sys.getenv("MIED_MOLL_SEEDS", "10"))
n_iter <- as.integer(Sys.getenv("MIED_MOLL_ITER", "1000"))
n_part <- as.integer(Sys.getenv("MIED_MOLL_N", "200"))
stopifnot(n_seeds >= 2L, n_iter >= 10L, n_part >= 10L)
say <- exp_logger()
n_exact <- 4000L
eps_grid <- c(0.1, 0.2, 0.5, 1, 2)

## Targets --------------------------------------------------------------------
gauss_spec <- function(mu, S) {
  P <- solve(S)
  R <- chol(S)
  list(dim = length(mu), mu = mu, sd = sqrt(diag(S)),
       target = gaussian_target(mu, S),
       draw = function(n) sweep(matrix(rnorm(n * length(mu)), n) %*% R, 2L,
                                mu, "+"))
}
mixture_spec <- function() {
  m <- rbind(c(-2, 0), c(2, 0))
  s2 <- 0.25
  logd <- function(x) {
    a <- -rowSums(sweep(x, 2L, m[1, ])^2) / (2 * s2)
    b <- -rowSums(sweep(x, 2L, m[2, ])^2) / (2 * s2)
    mx <- pmax(a, b)
    mx + log(exp(a - mx) + exp(b - mx))
  }
  score <- function(x) {
    a <- -rowSums(sweep(x, 2L, m[1, ])^2) / (2 * s2)
    b <- -rowSums(sweep(x, 2L, m[2, ])^2) / (2 * s2)
    wb <- 1 / (1 + exp(a - b))  # responsibility of the right-hand mode
    -(x - (1 - wb) %o% m[1, ] - wb %o% m[2, ]) / s2
  }
  list(dim = 2L, mu = c(0, 0), sd = sqrt(c(4 + s2, s2)),
       target = kb_target(logd, score, dim = 2, vectorized = TRUE),
       draw = function(n) {
         k <- 1L + (stats::runif(n) < 0.5)
         m[k, ] + sqrt(s2) * matrix(rnorm(2 * n), n)
       })
}
S10 <- local({
  sds <- seq(1, 3, length.out = 10)
  outer(sds, sds) * 0.5^abs(outer(1:10, 1:10, "-"))
})
targets <- list(gauss2 = gauss_spec(c(-1, 1), matrix(c(1, 0.5, 0.5, 2), 2)),
                mixture2 = mixture_spec(),
                gauss10 = gauss_spec(rep(0, 10), S10))

# Check the mixture's score against central differences of its log density.
local({
  set.seed(9)
  x <- matrix(rnorm(10), 5)
  tg <- targets$mixture2$target
  fd <- sapply(1:2, function(k) {
    h <- 1e-6 * (seq_len(2) == k)
    (tg$log_density(sweep(x, 2L, h, "+")) -
       tg$log_density(sweep(x, 2L, h, "-"))) / 2e-6
  })
  stopifnot(max(abs(fd - tg$score(x))) < 1e-6)
})

## Yardsticks -----------------------------------------------------------------
mean_dist <- function(a, b) {
  # mean Euclidean distance between the rows of a and of b
  d2 <- outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b)
  mean(sqrt(pmax(d2, 0)))
}
yardsticks <- function(x, spec, ref, ref_self) {
  data.frame(
    energy = 2 * mean_dist(x, ref) - mean_dist(x, x) - ref_self,
    mean_err = max(abs(colMeans(x) - spec$mu) / spec$sd),
    sd_ratio_min = min(apply(x, 2L, stats::sd) / spec$sd),
    sd_ratio_max = max(apply(x, 2L, stats::sd) / spec$sd),
    right_mode = mean(x[, 1] > 0))
}

## Runs -----------------------------------------------------------------------
settings <- rbind(data.frame(mollifier = "riesz", eps = NA_real_),
                  expand.grid(mollifier = c("gaussian", "laplace"),
                              eps = eps_grid, stringsAsFactors = FALSE))
runs <- list()
for (tn in names(targets)) {
  spec <- targets[[tn]]
  set.seed(1000)
  ref <- spec$draw(n_exact)
  ref_self <- mean_dist(ref, ref)
  for (r in seq_len(10)) {  # exact draws of the particles' size
    set.seed(5000 + r)
    runs[[length(runs) + 1L]] <- data.frame(
      target = tn, mollifier = "exact", eps = NA_real_, seed = r,
      yardsticks(spec$draw(n_part), spec, ref, ref_self), settle = NA_real_,
      seconds = NA_real_)
  }
  for (k in seq_len(nrow(settings))) {
    st <- settings[k, ]
    for (r in seq_len(n_seeds)) {
      set.seed(r)
      x0 <- matrix(rnorm(n_part * spec$dim), n_part)
      fit <- exp_timed(if (st$mollifier == "riesz") {
        mied(x0, spec$target, n_iter = n_iter, step_size = 0.05,
             progress = FALSE, tol = 0)
      } else {
        mied(x0, spec$target, n_iter = n_iter, step_size = 0.05,
             mollifier_scale = st$eps, mollifier = st$mollifier, progress = FALSE, tol = 0)
      })
      ob <- fit$objective
      tail_len <- max(1L, n_iter %/% 10L)
      runs[[length(runs) + 1L]] <- data.frame(
        target = tn, mollifier = st$mollifier, eps = st$eps, seed = r,
        yardsticks(fit$x, spec, ref, ref_self),
        settle = ob[n_iter] - ob[n_iter - tail_len + 1L],
        seconds = exp_secs(fit))
    }
    say("%s %s eps %s: energy %.4f", tn, st$mollifier, format(st$eps),
        mean(utils::tail(do.call(rbind, runs), n_seeds)$energy))
  }
}
runs <- do.call(rbind, runs)

## Summary --------------------------------------------------------------------
key <- unique(runs[c("target", "mollifier", "eps")])
summ <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  g <- runs$target == key$target[i] & runs$mollifier == key$mollifier[i] &
    (runs$eps %in% key$eps[i])
  v <- runs[g, ]
  rz <- runs[runs$target == key$target[i] & runs$mollifier == "riesz", ]
  paired <- if (key$mollifier[i] %in% c("gaussian", "laplace")) {
    dv <- v$energy[order(v$seed)] - rz$energy[order(rz$seed)]
    c(below_riesz = sum(dv < 0), diff_mean = mean(dv),
      diff_se = stats::sd(dv) / sqrt(length(dv)))
  } else c(below_riesz = NA, diff_mean = NA, diff_se = NA)
  se <- function(z) stats::sd(z) / sqrt(length(z))
  data.frame(key[i, ], reps = nrow(v),
             energy_mean = signif(mean(v$energy), 4),
             energy_se = signif(se(v$energy), 3),
             mean_err = signif(mean(v$mean_err), 3),
             sd_ratio_min = signif(mean(v$sd_ratio_min), 3),
             sd_ratio_max = signif(mean(v$sd_ratio_max), 3),
             right_mode = signif(mean(v$right_mode), 3),
             settle = signif(mean(v$settle), 3),
             seconds = signif(mean(v$seconds), 3),
             below_riesz = paired[["below_riesz"]],
             diff_mean = signif(paired[["diff_mean"]], 3),
             diff_se = signif(paired[["diff_se"]], 3), row.names = NULL)
}))
print(summ, row.names = FALSE)
files <- exp_write(list(`flows-mied-mollifiers-runs.csv` = runs,
                        `flows-mied-mollifiers.csv` = summ), out,
                   extdata = "flows-mied-mollifiers.csv")
say("wrote %s", paste(files, collapse = ", "))
