# Choosing a compression method, with numbers (issue 31, item 4): what
# each of the package's compression methods does to the posterior moments
# of five samples, judged against the sample it compressed, and what an
# undistorted subset of the same size does (the null for a distortion
# warning).  Read by vignette("kernbayes") and cited in ?kernbayes, the
# README and vignette("stan-output").
#
# Usage: Rscript inst/experiments/compression-choice.R [outdir]
#   outdir  directory for the results (default "compression-choice-output")
# Environment (to shorten a run): CCHOICE_SEEDS (samples per target,
#   default 10), CCHOICE_N (exact draws per sample, default 4000),
#   CCHOICE_ITER (post-warm-up draws per Stan chain, default 1000),
#   CCHOICE_SKT_M (the m of stein_kernel_thin, default "100"),
#   CCHOICE_NULL (replicates per cell of the null experiment, default
#   2000), CCHOICE_TARGETS (comma-separated subset of the targets below).
#
# Targets (one sample per target and seed; seed = run number, for Stan the
# sampler's seed, else set.seed() before the draws):
#   eight_schools  centred eight schools (the model and priors of
#                  stan-eight-schools.R), rstan, 4 chains x 1000 draws after
#                  1000 warm-up iterations; coordinates mu, log tau,
#                  theta[1..8] (the unconstrained scale the methods work on)
#   funnel         Neal's funnel, d = 3: v ~ N(0, 3^2), x_k | v ~ N(0, e^v),
#                  4000 exact draws, closed-form score
#   mixture        0.2 N((-3, 0), I) + 0.8 N((3, 0), I), 4000 exact draws
#                  (gaussian_mixture_target(), sample_target())
#   mtcars         mpg ~ wt + hp + qsec with raw (unscaled) predictors,
#                  normal likelihood, alpha, beta ~ N(0, 100^2), sigma ~
#                  half-Student-t(3, 0, 10), rstan, 4 chains x 1000 draws;
#                  coordinates alpha, beta_wt, beta_hp, beta_qsec, log sigma
#   gauss20        N(0, S) in d = 20, S_jk = 0.7^|j - k| s_j s_k with sds
#                  s_j log-spaced from 0.1 to 10, 4000 exact draws
# Methods, at m = 50, 100, 200, all with the package's defaults (standardize
# = TRUE: columns scaled by their mean absolute deviation) unless stated:
#   equally_spaced     m rows equally spaced over the stacked sample (for
#                      Stan, about m / 4 per chain)
#   stein_thin         stein_thin(fit or x, m)
#   stein_thin_reg     stein_thin(..., regularize = TRUE) (log p from the
#                      fit or target, Hessian diagonal by differences)
#   stein_thin+w       the stein_thin points with ksd_weights(th$points,
#                      th$score) (ksd_weights(th) is refused on this version)
#   ksdt_default       ksdt(fit or x): its own size (recorded; independent
#                      of m, so the same set at every m)
#   ksdt_m             ksdt(x, score, size = m, budget = 1e10): pruned to m
#                      points at every step, one stream through the stacked
#                      rows (for Stan, the four chains in turn). ksdt(fit,
#                      ...) runs a stream per chain and merges them, which
#                      does not give m points: size = m per chain kept
#                      100-400 points, size = m / 4 per chain 29-100 (one
#                      seed, eight schools and mtcars)
#   kernel_thin        kernel_thin(fit or x, m = m') with m' the size it
#                      allows nearest m (n / 2^g: 62, 125, 250 of 4000;
#                      recorded): no score, so MMD to the sample under the
#                      default Gaussian kernel (what kernel_thin(fit) does)
#   kernel_thin_m      the same at exactly m: kernel_thin() of 2^g m rows
#                      equally spaced over the sample (3200 of 4000 for all
#                      three m), with g the largest with 2^g m <= n
#   kernel_thin_stein  kernel_thin(x, score, m = m'): the Stein kernel, KSD
#                      to the target ("target KT")
#   stein_kernel_thin  stein_kernel_thin(x, score, m = m') (matrices and
#                      chain labels: stein_kernel_thin(fit, m = ) stops
#                      with "'score' is missing"), at m =
#                      100 only (CCHOICE_SKT_M = "50,100,200" for all three):
#                      its debiasing step (KSD-optimal simplex weights on
#                      all 4000 rows) took 1-13 s a call (up to 19 s at
#                      load 4-5), 70% of the run's time at every m
# Metrics per coordinate of a set against the full sample it came from:
# shift = (mean of the set - mean of the sample) / sd of the sample, and
# sd ratio = sd of the set / sd of the sample, weighted where a method
# gives weights (rows repeated by a method count as often as they appear;
# weighted variance sum w (x - mean)^2 / (1 - sum w^2), the usual sd for
# equal weights).  Per set: max_shift (largest |shift|), rms_shift, sd_worst
# (the ratio farthest from 1 on the log scale) and the coordinates of the
# two; `fires`: max_shift > 0.3 or sd_worst outside [0.7, 1.3] (the issue's
# starting threshold); `fires_md`: some coordinate's |shift| or sd ratio is
# beyond both that threshold and what an undistorted subset of the set's
# size exceeds with probability 0.005 / d per coordinate and side (about 1%
# over the d coordinates, for each of the two checks): |shift| > max(0.3,
# z sqrt(1/m - 1/n)), z = qnorm(1 - 0.005 / d), and sd ratio outside
# [min(0.7, l), max(1.3, u)], l and u the 0.005 / d and 1 - 0.005 / d
# quantiles of sqrt(chisq_nu / nu), nu = m - 1, with m Kish's size of the
# set; `fires_mdk`: the same with nu = 2 (m - 1) / (kurtosis - 1) per
# coordinate (the full sample's kurtosis; nu = m - 1 at kurtosis 3), which
# widens the sd band of heavy-tailed coordinates; `ksd`: the KSD of the set
# under one kernel per sample (IMQ, c = 1, beta = -1/2, columns scaled by
# the full sample's mean absolute deviations: ksd(..., standardize = <those
# scales>)), with `ksd_full` the full sample's; `seconds` of the method's
# call on one thread.
#
# Null (compression-choice-null.csv): CCHOICE_NULL samples of N(0, I_20)
# draws of size n (CCHOICE_N); in each, for d = 2, 10, 20 (the first d
# coordinates) and m = 20, 50, 100, 200, a random subset and m equally
# spaced rows (the same law for i.i.d. draws; both are kept as a check),
# with max_shift and sd_worst as above.  Per cell: quantiles (50, 90, 95,
# 99%) of max_shift and of |log sd_worst| (reported as the band
# [exp(-q), exp(q)]), and how often each rule above fires (fires_shift and
# fires_sd: the two halves of `fires`).
#
# Writes to outdir (and copies the first two to inst/extdata/ from the
# source directory; the .csv.gz files gzip-compressed, read.csv() reads
# them as they are):
#   compression-choice.csv.gz    one row per target, seed, m and method
#   compression-choice-null.csv  one row per scheme, d and m of the null
#   compression-choice-coords.csv.gz  per coordinate: shift and sd ratio of
#                                every set, and the full sample's kurtosis
#                                (outdir only)
#   compression-choice-null-runs.csv.gz  the null's replicates (outdir only)
#
# Results (R 4.2.2, rstan 2.21.7, one thread on 2 cores shared with other
# jobs; all defaults: 10 seeds, n = 4000, 2000 null replicates; wall time
# 13.5 min at load 2-3, of which 2.7 min compiling the two models, and 21
# min at load 4-5, with the same results; the seconds in the CSV are the
# 13.5-min run's: stein_kernel_thin 0.9-13 s a call, kernel_thin 0.3-1.2 s,
# stein_thin(regularize = TRUE) on a Stan fit 0.9-3.9 s (differenced
# Hessians through rstan), every other method under 0.6 s; no method
# failed). Medians over the 10 seeds at
# m = 100 of max_shift and sd_worst (kernel_thin, kernel_thin_stein and
# stein_kernel_thin at 125 points, ksdt_default at its own size: 94-403
# points on eight schools, 183 on the funnel and the mixture, 84-86 on
# mtcars, 3149-3261 of the 4000 on gauss20):
#                      8schools    funnel      mixture     mtcars      gauss20
#   kernel_thin        0.03 0.95  0.03 0.40  0.00 1.00  0.01 0.99  0.02 1.03
#   kernel_thin_m      0.03 0.94  0.03 0.42  0.01 1.01  0.01 0.99  0.03 1.05
#   equally_spaced     0.16 1.13  0.11 0.79  0.16 1.04  0.12 0.94  0.21 1.12
#   kernel_thin_stein  0.14 0.87  0.15 0.24  0.06 0.96  0.12 0.89  0.06 0.83
#   stein_kernel_thin  1.33 0.37  0.22 0.19  0.35 0.67  0.05 1.19  0.05 0.88
#   ksdt_m             1.31 0.38  0.27 1.83  0.07 0.95  0.14 0.86  0.06 0.85
#   ksdt_default       1.14 0.43  1.10 3.12  0.23 0.79  0.10 1.11  0.02 0.98
#   stein_thin         1.37 0.34  1.71 4.15  0.71 1.17  0.05 1.18  0.05 0.86
#   stein_thin_reg     0.87 0.41  1.19 1.54  0.20 1.08  0.12 1.11  0.06 0.77
#   stein_thin+w       1.39 0.34  1.90 7.08  0.69 1.17  0.08 1.15  0.06 0.86
# KSD over the full sample's (same rows and columns): kernel_thin 2.7 3.5
# 3.7 5.4 5.4, equally_spaced 2.8 4.3 6.6 6.7 6.5, stein_thin 1.3 0.4 1.9
# 1.1 4.9, ksdt_m 1.3 0.4 1.0 1.4 4.9, stein_kernel_thin 1.2 0.3 1.0 1.1
# 4.4: the sets that move the posterior most have the smallest KSD. On
# eight schools the largest shift and the extreme sd ratio of the six
# KSD-minimising methods are log tau's in 60 and 57 of 60 runs; on the
# funnel the extreme sd ratio is x1's or x2's for every method but
# stein_thin_reg (kurtosis of x_k 100-160: equally spaced draws keep 0.74-
# 0.81 of their sd, kernel_thin 0.42-0.44, medians by coordinate).
# m = 50 and 200 rank the methods the same way (kernel_thin 0.00-0.04 and
# 0.00-0.03, equally spaced 0.13-0.28 and 0.05-0.13).
# Null (random subsets; equally spaced rows agree within Monte Carlo
# error): 99% quantile of max_shift 0.61 / 0.40 / 0.28 / 0.19 at d = 2 and
# m = 20 / 50 / 100 / 200, 0.71 / 0.45 / 0.33 / 0.22 at d = 10, 0.77 / 0.49
# / 0.35 / 0.24 at d = 20 (z sqrt(1/m - 1/n) with z = qnorm(1 - 0.005 / d)
# is within 0.03 of each); 99% band of sd_worst [0.60, 1.68] / [0.74, 1.35]
# / [0.81, 1.23] / [0.87, 1.15] at d = 2, [0.51, 1.95] / [0.69, 1.44] /
# [0.77, 1.30] / [0.84, 1.19] at d = 20. The issue's threshold (`fires`)
# fires on 41% / 7% / 0.8% / 0% of undistorted subsets at d = 2, 93% / 30%
# / 2% / 0% at d = 10 and 99% / 51% / 4.5% / 0% at d = 20; fires_md and
# fires_mdk on at most 2.5% in every cell (0.4-2.5% at m <= 100). On the
# targets (share of the 10 runs at m = 100): `fires` and `fires_md` fire
# on 9-10 of 10 runs of every method on the funnel (equally spaced 6 of
# 10: the sd of x_k), on no kernel_thin run elsewhere, on
# all KSD-minimising runs on eight schools and 8-9 of 10 stein_thin and
# stein_kernel_thin runs on the mixture; fires_mdk is silent on every
# kernel_thin and equally spaced run of every target and m (but 1 of 10
# equally spaced mtcars runs at m = 50), fires as fires_md on the
# KSD-minimising methods of eight schools and the mixture, and on the funnel
# keeps stein_thin (plain, regularised, weighted) and ksdt_default (10 of
# 10) and drops to 2-3 of 10 for kernel_thin_stein, ksdt_m and
# stein_kernel_thin.

local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
out <- exp_start(exp_args(out = "compression-choice-output")$out)
say <- exp_logger()
n_seeds <- as.integer(Sys.getenv("CCHOICE_SEEDS", "10"))
n_exact <- as.integer(Sys.getenv("CCHOICE_N", "4000"))
n_iter <- as.integer(Sys.getenv("CCHOICE_ITER", "1000"))
n_null <- as.integer(Sys.getenv("CCHOICE_NULL", "2000"))
all_targets <- c("eight_schools", "funnel", "mixture", "mtcars", "gauss20")
targets <- strsplit(Sys.getenv("CCHOICE_TARGETS",
                               paste(all_targets, collapse = ",")), ",")[[1L]]
stopifnot(all(targets %in% all_targets))
ms <- c(50L, 100L, 200L)
skt_m <- as.integer(strsplit(Sys.getenv("CCHOICE_SKT_M", "100"), ",")[[1L]])
thr_shift <- 0.3
thr_sd <- c(0.7, 1.3)

# ---- targets --------------------------------------------------------------

stan_code <- list(
  eight_schools = "
data { int<lower=0> J; vector[J] y; vector<lower=0>[J] sigma; }
parameters { real mu; real<lower=0> tau; vector[J] theta; }
model { mu ~ normal(0, 5); tau ~ cauchy(0, 5); theta ~ normal(mu, tau);
        y ~ normal(theta, sigma); }",
  mtcars = "
data { int<lower=0> N; int<lower=0> K; matrix[N, K] X; vector[N] y; }
parameters { real alpha; vector[K] beta; real<lower=0> sigma; }
model { alpha ~ normal(0, 100); beta ~ normal(0, 100);
        sigma ~ student_t(3, 0, 10); y ~ normal(alpha + X * beta, sigma); }")
stan_data <- list(
  eight_schools = list(J = 8L, y = c(28, 8, -3, 7, -1, 1, 18, 12),
                       sigma = c(15, 10, 16, 11, 9, 11, 10, 18)),
  mtcars = list(N = nrow(datasets::mtcars), K = 3L,
                X = as.matrix(datasets::mtcars[c("wt", "hp", "qsec")]),
                y = datasets::mtcars$mpg))
# the unconstrained coordinates under names that say so
stan_names <- list(
  eight_schools = c("mu", "log_tau", paste0("theta[", 1:8, "]")),
  mtcars = c("alpha", "beta_wt", "beta_hp", "beta_qsec", "log_sigma"))

funnel <- funnel_target()
mix_target <- gaussian_mixture_target(rbind(c(-3, 0), c(3, 0)),
                                      weights = c(0.2, 0.8))
g20_sd <- exp(seq(log(0.1), log(10), length.out = 20))
g20_cov <- 0.7^abs(outer(1:20, 1:20, "-")) * outer(g20_sd, g20_sd)
g20_target <- gaussian_target(rep(0, 20), g20_cov)
exact <- list(
  funnel = list(target = funnel, names = c("v", "x1", "x2"),
                draw = function(n) {
                  v <- stats::rnorm(n, 0, 3)
                  cbind(v, matrix(stats::rnorm(2 * n), n) * exp(v / 2))
                }),
  mixture = list(target = mix_target, names = c("x1", "x2"),
                 draw = function(n) sample_target(mix_target, n)),
  gauss20 = list(target = g20_target, names = paste0("x", 1:20),
                 draw = function(n) {
                   matrix(stats::rnorm(n * 20), n) %*% chol(g20_cov)
                 }))

models <- list()
for (tn in intersect(targets, names(stan_code))) {
  if (!requireNamespace("rstan", quietly = TRUE) ||
      !requireNamespace("posterior", quietly = TRUE)) {
    stop("the Stan targets need rstan and posterior (or set CCHOICE_TARGETS)")
  }
  models[[tn]] <- rstan::stan_model(model_code = stan_code[[tn]])
  say("compiled %s", tn)
}

# One sample: `input` (what the methods are given: the Stan fit, or the
# draws), x and s (the unconstrained draws and their scores, chain-major),
# chain labels (NULL for exact draws), `target` (for regularize: NULL for a
# fit, which brings its own log density) and the number of divergent
# transitions.
make_sample <- function(tn, seed) {
  if (tn %in% names(stan_code)) {
    fit <- suppressWarnings(rstan::sampling(
      models[[tn]], data = stan_data[[tn]], chains = 4L, iter = 1000L + n_iter,
      warmup = 1000L, seed = seed, refresh = 0))
    x <- unconstrain_draws(fit)
    s <- target_score(stan_target(fit), x)
    dimnames(x) <- dimnames(s) <- list(NULL, stan_names[[tn]])
    dr <- posterior::as_draws_df(fit)
    return(list(input = fit, x = x, s = s, chain = as.integer(dr$.chain),
                iteration = as.integer(dr$.iteration), target = NULL,
                divergent = sum(rstan::get_divergent_iterations(fit))))
  }
  ex <- exact[[tn]]
  set.seed(seed)
  x <- ex$draw(n_exact)
  s <- target_score(ex$target, x)
  dimnames(x) <- dimnames(s) <- list(NULL, ex$names)
  list(input = x, x = x, s = s, chain = NULL, iteration = NULL,
       target = ex$target, divergent = NA_integer_)
}

# ---- methods --------------------------------------------------------------

# The size of kernel thinning nearest m: n %/% 2^g (the larger on a tie).
kt_size <- function(m, n) {
  ok <- unique(n %/% 2^(0:floor(log2(n))))
  ok <- ok[ok >= 1L]
  ok[order(abs(ok - m), -ok)][1L]
}

# rows of the stacked sample (with repeats) of points labelled by chain and
# iteration (a multi-chain result), or its `index` (one stream)
rows_of <- function(res, smp) {
  if (is.null(smp$chain)) return(res$index)
  match(paste(res[["chain"]], res[["iteration"]]),
        paste(smp$chain, smp$iteration))
}

# f(input, score, ...) on the sample as a user hands it over: a Stan fit
# alone (the package computes its gradients), or the draws and their scores
on_input <- function(f, smp, ...) {
  if (is.null(smp$chain)) f(smp$input, smp$s, ...) else f(smp$input, ...)
}

# Each method: function(smp, m) giving list(rows, w = NULL, res = the
# package's result); the points of `res` are checked against x[rows, ] by
# the caller.
methods <- list(
  equally_spaced = function(smp, m) {
    n <- nrow(smp$x)
    list(rows = as.integer(floor((seq_len(m) - 0.5) * n / m)) + 1L)
  },
  stein_thin = function(smp, m) {
    th <- on_input(stein_thin, smp, m = m, progress = FALSE)
    list(rows = th$index, res = th)
  },
  stein_thin_reg = function(smp, m) {
    th <- if (is.null(smp$target)) {
      stein_thin(smp$input, m = m, regularize = TRUE, progress = FALSE)
    } else {
      stein_thin(smp$x, smp$target, m = m, regularize = TRUE,
                 progress = FALSE)
    }
    list(rows = th$index, res = th)
  },
  `stein_thin+w` = function(smp, m) {
    th <- on_input(stein_thin, smp, m = m, progress = FALSE)
    w <- ksd_weights(th$points, th$score, progress = FALSE)
    list(rows = th$index, w = as.double(w), res = th)
  },
  ksdt_default = function(smp, m) {
    kt <- on_input(ksdt, smp, progress = FALSE)
    list(rows = rows_of(kt, smp), res = kt)
  },
  ksdt_m = function(smp, m) {
    # one stream through the stacked rows (for a Stan fit, its four chains
    # in turn), so that the dictionary has exactly m points
    kt <- ksdt(smp$x, smp$s, size = m, budget = 1e10, progress = FALSE)
    list(rows = kt$index, res = kt)
  },
  kernel_thin = function(smp, m) {
    set.seed(m)
    kt <- kernel_thin(smp$input, m = kt_size(m, nrow(smp$x)))
    list(rows = kt$index, res = kt)
  },
  kernel_thin_m = function(smp, m) {
    n <- nrow(smp$x)
    big <- m * 2^floor(log2(n / m))
    sub <- as.integer(floor((seq_len(big) - 0.5) * n / big)) + 1L
    set.seed(m)
    kt <- kernel_thin(smp$x[sub, , drop = FALSE], m = m,
                      chain = smp$chain[sub])
    list(rows = sub[kt$index])
  },
  kernel_thin_stein = function(smp, m) {
    set.seed(m)
    kt <- kernel_thin(smp$x, smp$s, m = kt_size(m, nrow(smp$x)),
                      chain = smp$chain)
    list(rows = kt$index, res = kt)
  },
  stein_kernel_thin = function(smp, m) {
    set.seed(m)
    kt <- stein_kernel_thin(smp$x, smp$s, m = kt_size(m, nrow(smp$x)),
                            chain = smp$chain, progress = FALSE)
    list(rows = kt$index, res = kt)
  }
)

# ---- metrics --------------------------------------------------------------

# Per-coordinate shift and sd ratio of rows (weights w, NULL: equal) of x
# against all of x; the KSD of the set under the sample's one kernel.
set_metrics <- function(smp, rows, w, scale, mu0, sd0) {
  if (is.null(w)) w <- rep(1 / length(rows), length(rows))
  w <- w / sum(w)
  p <- smp$x[rows, , drop = FALSE]
  mu <- colSums(p * w)
  v <- colSums(sweep(p, 2L, mu)^2 * w) / (1 - sum(w^2))
  keep <- w > 0
  k <- ksd(p[keep, , drop = FALSE], smp$s[rows[keep], , drop = FALSE],
           weights = w[keep], standardize = scale, progress = FALSE)
  # Kish's size over distinct rows (repeats merged)
  wd <- tapply(w, rows, sum)
  list(shift = (mu - mu0) / sd0, ratio = sqrt(v) / sd0, ksd = k,
       kish = 1 / sum(wd^2), distinct = length(wd))
}

worst <- function(shift, ratio) {
  i <- which.max(abs(shift))
  j <- which.max(abs(log(ratio)))
  list(max_shift = abs(shift[i]), rms_shift = sqrt(mean(shift^2)),
       sd_worst = ratio[j], shift_coord = names(shift)[i],
       sd_coord = names(ratio)[j])
}

fires <- function(max_shift, sd_worst) {
  max_shift > thr_shift | sd_worst < thr_sd[1L] | sd_worst > thr_sd[2L]
}

# The thresholds of the rules fires_md and fires_mdk (see the header) for a
# set of effective size m from a sample of n, in d coordinates with
# kurtosis kurt (3: Gaussian): the issue's values widened to what an
# undistorted subset exceeds with probability 0.005 / d per coordinate and
# side, the shift by its normal approximation, the sd ratio by a scaled
# chi-square with nu = 2 (m - 1) / (kurt - 1) degrees of freedom (m - 1 for
# Gaussian coordinates; fewer, hence a wider band, for heavy tails).
thresholds <- function(m, n, d, kurt = 3) {
  a <- 0.005 / d
  nu <- 2 * (m - 1) / (kurt - 1)
  se <- sqrt(max(1 / m - 1 / n, 0))
  list(shift = max(thr_shift, stats::qnorm(1 - a) * se),
       lo = pmin(thr_sd[1L], sqrt(stats::qchisq(a, nu) / nu)),
       hi = pmax(thr_sd[2L], sqrt(stats::qchisq(1 - a, nu) / nu)))
}
fires_rule <- function(shift, ratio, m, n, kurt = 3) {
  if (m < 2) return(NA)
  th <- thresholds(m, n, length(shift), kurt)
  any(abs(shift) > th$shift) || any(ratio < th$lo | ratio > th$hi)
}
kurtosis <- function(x) {
  z <- sweep(x, 2L, colMeans(x))
  colMeans(z^4) / colMeans(z^2)^2
}

# ---- main experiment --------------------------------------------------------

rows <- list()
coords <- list()
for (tn in targets) {
  for (seed in seq_len(n_seeds)) {
    smp <- exp_timed(make_sample(tn, seed))
    t_sample <- exp_secs(smp)
    x <- smp$x
    mu0 <- colMeans(x)
    sd0 <- apply(x, 2L, stats::sd)
    # one kernel per sample: the full sample's mean absolute deviations
    scale <- colMeans(abs(sweep(x, 2L, mu0)))
    kurt <- kurtosis(x)
    ksd_full <- ksd(x, smp$s, standardize = scale, progress = FALSE)
    for (m in ms) {
      for (meth in names(methods)) {
        if (meth == "stein_kernel_thin" && !m %in% skt_m) next
        r <- tryCatch(exp_timed(methods[[meth]](smp, m)),
                      error = function(e) e)
        if (inherits(r, "error")) {
          say("%s seed %d m %d %s: error: %s", tn, seed, m, meth,
              conditionMessage(r))
          next
        }
        if (!is.null(r$res)) {  # the rows found are the result's points
          stopifnot(isTRUE(all.equal(unname(x[r$rows, , drop = FALSE]),
                                     unname(r$res$points))))
        }
        mt <- set_metrics(smp, r$rows, r$w, scale, mu0, sd0)
        wo <- worst(mt$shift, mt$ratio)
        rows[[length(rows) + 1L]] <- data.frame(
          target = tn, seed = seed, m = m, method = meth,
          size = length(r$rows), distinct = mt$distinct,
          kish = round(mt$kish, 1), max_shift = wo$max_shift,
          rms_shift = wo$rms_shift, sd_worst = wo$sd_worst,
          shift_coord = wo$shift_coord, sd_coord = wo$sd_coord,
          fires = fires(wo$max_shift, wo$sd_worst),
          fires_md = fires_rule(mt$shift, mt$ratio, mt$kish, nrow(x)),
          fires_mdk = fires_rule(mt$shift, mt$ratio, mt$kish, nrow(x), kurt),
          ksd = mt$ksd,
          ksd_full = ksd_full, ksd_ratio = mt$ksd / ksd_full,
          seconds = exp_secs(r), divergent = smp$divergent,
          stringsAsFactors = FALSE)
        coords[[length(coords) + 1L]] <- data.frame(
          target = tn, seed = seed, m = m, method = meth,
          coord = colnames(x), shift = unname(mt$shift),
          sd_ratio = unname(mt$ratio), kurtosis = unname(kurt),
          stringsAsFactors = FALSE)
      }
    }
    say("%s seed %d: sample %.1f s, methods %.1f s", tn, seed, t_sample,
        sum(vapply(rows[vapply(rows, function(v) v$target == tn &&
                                 v$seed == seed, TRUE)],
                   function(v) v$seconds, 0)))
  }
}
res <- do.call(rbind, rows)
num <- vapply(res, is.double, TRUE) & !names(res) %in% c("kish", "seconds")
res[num] <- lapply(res[num], signif, 4)
res$seconds <- round(res$seconds, 3)
coords <- do.call(rbind, coords)
coords[c("shift", "sd_ratio")] <- lapply(coords[c("shift", "sd_ratio")],
                                         signif, 4)

# ---- null: undistorted subsets of i.i.d. Gaussian draws ---------------------

null_d <- c(2L, 10L, 20L)
null_m <- c(20L, 50L, 100L, 200L)
set.seed(31)
nr <- list()
for (rep in seq_len(n_null)) {
  z <- matrix(stats::rnorm(n_exact * max(null_d)), n_exact)
  for (d in null_d) {
    zd <- z[, seq_len(d), drop = FALSE]
    mu0 <- colMeans(zd)
    sd0 <- apply(zd, 2L, stats::sd)
    kd <- kurtosis(zd)
    for (m in null_m) {
      sub <- list(random = sample.int(n_exact, m),
                  equally_spaced = as.integer(floor((seq_len(m) - 0.5) *
                                                     n_exact / m)) + 1L)
      for (sc in names(sub)) {
        p <- zd[sub[[sc]], , drop = FALSE]
        sh <- (colMeans(p) - mu0) / sd0
        ra <- apply(p, 2L, stats::sd) / sd0
        wo <- worst(sh, ra)
        nr[[length(nr) + 1L]] <- c(rep = rep, d = d, m = m,
                                   scheme = if (sc == "random") 1 else 2,
                                   max_shift = wo$max_shift,
                                   sd_worst = wo$sd_worst,
                                   fires_md = fires_rule(sh, ra, m, n_exact),
                                   fires_mdk = fires_rule(sh, ra, m, n_exact,
                                                          kd))
      }
    }
  }
}
null_runs <- as.data.frame(do.call(rbind, nr))
null_runs$scheme <- c("random", "equally_spaced")[null_runs$scheme]
key <- unique(null_runs[c("scheme", "d", "m")])
null <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  v <- null_runs[null_runs$scheme == key$scheme[i] & null_runs$d == key$d[i] &
                   null_runs$m == key$m[i], ]
  qs <- stats::quantile(v$max_shift, c(0.5, 0.9, 0.95, 0.99), names = FALSE)
  ql <- stats::quantile(abs(log(v$sd_worst)), c(0.5, 0.9, 0.95, 0.99),
                        names = FALSE)
  data.frame(key[i, ], reps = nrow(v),
             shift_q50 = qs[1], shift_q90 = qs[2], shift_q95 = qs[3],
             shift_q99 = qs[4],
             sd_lo95 = exp(-ql[3]), sd_hi95 = exp(ql[3]),
             sd_lo99 = exp(-ql[4]), sd_hi99 = exp(ql[4]),
             sd_logq50 = ql[1], sd_logq90 = ql[2],
             fires_shift = mean(v$max_shift > thr_shift),
             fires_sd = mean(v$sd_worst < thr_sd[1L] | v$sd_worst > thr_sd[2L]),
             fires = mean(fires(v$max_shift, v$sd_worst)),
             fires_md = mean(v$fires_md), fires_mdk = mean(v$fires_mdk),
             row.names = NULL)
}))
num <- vapply(null, is.double, TRUE)
null[num] <- lapply(null[num], signif, 4)
null_runs[c("max_shift", "sd_worst")] <-
  lapply(null_runs[c("max_shift", "sd_worst")], signif, 4)
say("null: %d replicates per cell", n_null)

files <- exp_write(list(`compression-choice.csv.gz` = res,
                        `compression-choice-null.csv` = null,
                        `compression-choice-coords.csv.gz` = coords,
                        `compression-choice-null-runs.csv.gz` = null_runs),
                   out, extdata = c("compression-choice.csv.gz",
                                    "compression-choice-null.csv"))
say("wrote %s", paste(files, collapse = ", "))

# the m = 100 table: medians over the seeds, and how often the threshold
# fired
r100 <- res[res$m == 100L, ]
med <- stats::aggregate(cbind(size, max_shift, sd_worst, ksd_ratio,
                              seconds) ~ target + method,
                        data = r100, FUN = stats::median)
med <- merge(med, stats::aggregate(cbind(fires, fires_md, fires_mdk) ~
                                     target + method, data = r100,
                                   FUN = mean))
print(med, digits = 3, row.names = FALSE)
print(null[null$scheme == "random", ], digits = 3, row.names = FALSE)
