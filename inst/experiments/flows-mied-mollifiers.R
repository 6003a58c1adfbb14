# MIED's three mollifiers side by side: Korba's talk "Sampling through
# optimization of divergences" (2024), slide 26, lists the Gaussian,
# Laplace and Riesz-s mollifiers of Li, Liu, Korba, Yurochkin and Solomon
# (2023, "Sampling with mollified interaction energy descent") without a
# comparison in numbers (issue 32, item 5). This script runs the authors'
# own comparison of the three (their code, lingxiaoli94/MIED,
# tests/analytical/script.sh: uniform sampling in a box, "box" below) and
# the package's own on three smooth targets.
#
# Usage: Rscript inst/experiments/flows-mied-mollifiers.R [outdir]
#   outdir  directory for the results (default "flows-mied-mollifiers-output")
# Environment (to shorten the run for testing):
#   MIED_MOLL_SEEDS  initial particle sets per target (default 10; at least 2;
#                    the box runs at most 5: each of its runs costs 20-50 s)
#   MIED_MOLL_ITER   MIED iterations (default 1000; at least 10; the box
#                    runs twice as many)
#   MIED_MOLL_N      particles (default 200; at least 10; the box runs 500,
#                    or 50 when MIED_MOLL_N is below 200)
#
# What is run:
# - "box", the authors' setting: the uniform distribution on [-1, 1]^2,
#   500 particles x = tanh(z) moved in z (their reparametrisation
#   box_tanh; start z = atanh(u - 1/2), u uniform on the unit square),
#   Adam with step 0.01 on z for 2000 iterations (their defaults), the
#   energy and its gradient in x from the package (kernbayes:::
#   mied_objective, the energy mied() descends) and the chain rule
#   dx/dz = 1 - x^2 in this script; their mollifiers: Riesz with
#   s = d + 1e-4 and eps = 1e-4 (their 1e-8 is added to the squared
#   distance), Gaussian with their eps = 1e-3 (exp(-r^2 / (2 * 1e-3)):
#   our eps = sqrt(1e-3) = 0.0316) and Laplace with eps = 0.01; beside
#   them eps = 0.1 for both. Judged as the authors do, by the energy
#   distance to 5000 exact draws (their gt_multiplier 10), and by the share
#   of particles within 0.05 of the box's edge (area share 0.0975). Their
#   energy also has one i = i term per particle scaled by its
#   nearest-neighbour distance ('nnd_scale'); with a uniform target it has
#   no gradient and only rescales the step, which Adam undoes.
# - targets: "gauss2", N((-1, 1), [1, 0.5; 0.5, 2]); "mixture2", the equal
#   mixture of N((-2, 0), 0.5^2 I) and N((2, 0), 0.5^2 I); "gauss10",
#   N(0, S) in d = 10 with sds 1, 1.22, ..., 3 (evenly spaced) and
#   correlations 0.5^|i - j| (our choices: a correlated Gaussian, two
#   separated modes, a higher dimension);
# - start: MIED_MOLL_N particles from N(0, I), the same sets (seeds 1, 2,
#   ...) for every mollifier, so that comparisons are paired;
# - mied(): Adam, step 0.05, MIED_MOLL_ITER iterations; mollifiers "riesz"
#   (s = d + 1e-4, eps = 1e-8: the package's defaults, the authors'
#   choice), "gaussian" and "laplace" at scales eps = 0.1, 0.2, 0.5, 1
#   (d = 2) and 0.5, 1, 2, 4 (d = 10): the Gaussian and Laplace energies
#   need a scale of the order of the particles' spacing (a trial run at
#   eps = 2 in d = 2 was far off: energy distance 0.39 against 0.0013 for
#   Riesz);
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
# Results (R 4.2.2, one thread, nice, 2 cores shared with 3-5 other jobs,
# load average 8-11; wall time 1300 s = 21 min 40 s, of which the box
# 770 s). Energy distance, mean (standard error) over the seeds; "exact":
# as many i.i.d. draws of the target.
#   box (5 seeds, 500 particles): exact 0.00269 (0.0004); Riesz 0.00369
#     (0.00001); Gaussian, the authors' eps 0.0316: 0.00063 (0.00001),
#     below Riesz in 5 of 5; Laplace, their eps 0.01: 0.00287 (0.0001),
#     below Riesz in 5 of 5; eps 0.1: Gaussian 0.00429, Laplace 0.00539.
#     Share within 0.05 of the edge (area 0.0975): exact 0.096, Riesz
#     0.204, Gaussian 0.161, Laplace 0.022 (eps 0.1: 0.34, 0.33).
#   gauss2: exact 0.0126 (0.0029); Riesz 0.00128 (0.000004); Gaussian
#     eps 0.1 / 0.2 / 0.5 / 1: 0.0355 / 0.0040 / 0.0020 / 0.0143; Laplace
#     0.0426 / 0.0089 / 0.0046 / 0.0305 (every one above Riesz in 10 of
#     10); sd ratios: Riesz 0.99-1.04, Gaussian eps 0.1 0.73, eps 0.5
#     0.95-0.97.
#   mixture2: exact 0.0183 (0.0057); Riesz 0.0072; Gaussian eps 0.2 0.0070
#     (paired -0.0002, se 0.0006: a tie), Laplace eps 0.2 0.0087; every
#     setting keeps 0.49-0.50 of the particles in the right-hand mode.
#   gauss10: exact 0.056 (0.009); Riesz 0.180 (sd ratios 0.62-1.42);
#     best Gaussian (eps 2) 0.118, below Riesz in 10 of 10 (sd ratios
#     0.31-0.90), best Laplace (eps 1) 0.303; nothing reaches the exact
#     draws in d = 10 with 200 particles and 1000 iterations.
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
eps_grid <- list(gauss2 = c(0.1, 0.2, 0.5, 1), mixture2 = c(0.1, 0.2, 0.5, 1),
                 gauss10 = c(0.5, 1, 2, 4))

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

## The authors' box ------------------------------------------------------------
box_target <- kb_target(function(x) rep(0, nrow(x)), function(x) 0 * x,
                        dim = 2, vectorized = TRUE)
box_run <- function(mollifier, eps, seed, n = 500L, iters = 2000L,
                    step = 0.01) {
  set.seed(seed)
  z <- atanh(matrix(stats::runif(2 * n), n) - 0.5)
  m <- v <- 0 * z
  for (t in seq_len(iters)) {
    x <- tanh(z)
    g <- kernbayes:::mied_objective(x, box_target, s = 2 + 1e-4,
                                    mollifier_scale = eps,
                                    mollifier = mollifier)$gradient
    g <- g * (1 - x^2)                       # chain rule through tanh
    m <- 0.9 * m + 0.1 * g                   # Adam (torch's defaults)
    v <- 0.999 * v + 0.001 * g^2
    z <- z - step * (m / (1 - 0.9^t)) / (sqrt(v / (1 - 0.999^t)) + 1e-8)
  }
  tanh(z)
}
box_yardsticks <- function(x, ref, ref_self) {
  data.frame(energy = 2 * mean_dist(x, ref) - mean_dist(x, x) - ref_self,
             edge = mean(apply(abs(x), 1L, max) > 0.95))
}

## Runs -----------------------------------------------------------------------
runs <- list()
set.seed(2000)
box_ref <- matrix(2 * stats::runif(2 * 5000) - 1, 5000)
box_ref_self <- mean_dist(box_ref, box_ref)
for (r in seq_len(10)) {
  set.seed(6000 + r)
  runs[[length(runs) + 1L]] <- data.frame(
    target = "box", mollifier = "exact", eps = NA_real_, seed = r,
    box_yardsticks(matrix(2 * stats::runif(1000) - 1, 500), box_ref,
                   box_ref_self), seconds = NA_real_)
}
box_settings <- data.frame(mollifier = c("riesz", "gaussian", "gaussian",
                                         "laplace", "laplace"),
                           eps = c(1e-4, sqrt(1e-3), 0.1, 0.01, 0.1))
box_seeds <- min(n_seeds, 5L)
for (k in seq_len(nrow(box_settings))) {
  st <- box_settings[k, ]
  for (r in seq_len(box_seeds)) {
    x <- exp_timed(box_run(st$mollifier, st$eps, r,
                           n = if (n_part < 200L) 50L else 500L,
                           iters = 2L * n_iter))
    runs[[length(runs) + 1L]] <- data.frame(
      target = "box", mollifier = st$mollifier, eps = st$eps, seed = r,
      box_yardsticks(x, box_ref, box_ref_self), seconds = exp_secs(x))
  }
  say("box %s eps %s: energy %.4f", st$mollifier, format(st$eps),
      mean(utils::tail(do.call(rbind, runs), box_seeds)$energy))
}
box_runs <- do.call(rbind, runs)
runs <- list()
for (tn in names(targets)) {
  settings <- rbind(data.frame(mollifier = "riesz", eps = NA_real_),
                    expand.grid(mollifier = c("gaussian", "laplace"),
                                eps = eps_grid[[tn]], stringsAsFactors = FALSE))
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
             mollifier_scale = st$eps, mollifier = st$mollifier,
             progress = FALSE, tol = 0)
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
box_runs[setdiff(names(runs), names(box_runs))] <- NA
runs[setdiff(names(box_runs), names(runs))] <- NA
runs <- rbind(box_runs[names(runs)], runs)

## Summary --------------------------------------------------------------------
key <- unique(runs[c("target", "mollifier", "eps")])
summ <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  g <- runs$target == key$target[i] & runs$mollifier == key$mollifier[i] &
    (runs$eps %in% key$eps[i])
  v <- runs[g, ]
  rz <- runs[runs$target == key$target[i] & runs$mollifier == "riesz", ]
  rz <- rz[order(rz$seed), ]
  paired <- if (key$mollifier[i] %in% c("gaussian", "laplace")) {
    dv <- v$energy[order(v$seed)] - rz$energy
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
             edge = signif(mean(v$edge), 3),
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
