# The KSD test on dependent samples (issue 15): level and power of the wild
# bootstrap with Markov-chain multipliers (Chwialkowski, Strathmann and
# Gretton 2016, Sec. 2.2; Chwialkowski, Sejdinovic and Gretton 2014) for
# candidate rules for the flip probability, on AR(1) chains.
#
# Usage: Rscript inst/experiments/gof-dependent.R [mode] [outdir]
#   mode    "quick" (40 data sets per cell, n = 200 only; 15 s) or
#           "full" (GOF_DEP_REPS data sets per cell, default 300, n = 200
#           and 1000, or the sizes in GOF_DEP_NS, e.g. GOF_DEP_NS=5000;
#           above n = 2000 only the default rule, through ksd_test(),
#           under the null, at most 200 data sets per cell)
#   outdir  directory for the results (default "gof-dependent-output")
#
# Setting: x_1 ~ N(0, 1), x_t = a x_{t-1} + sqrt(1 - a^2) e_t (exact N(0, 1)
# margins), a = 0.5 and 0.9 (integrated autocorrelation time tau = (1 + a) /
# (1 - a) = 3 and 19), d = 1; target N(0, 1), score -x; IMQ kernel (c = 1,
# beta = -1/2); the V-statistic T = n V_n; 200 bootstrap replicates; p-value
# (1 + #{T* >= T}) / (B + 1), rejection at 0.05. Null: the chain itself.
# Alternative: the chain shifted by delta = 2.5 sqrt(tau / n) (a mean shift
# of 2.5 standard errors of the chain's mean, so power is comparable across
# a and n). The Stein matrix of each data set is formed once and every rule
# is applied to it (plain R matrix algebra, the formulas of ?ksd_test).
#
# Rules (multipliers W_t: Markov chain of signs, flip probability p; the
# chain's correlation length is l = (1 - p) / p, i.e. p = 1 / (1 + l)):
#   rademacher      p = 1/2 (i.i.d. signs)
#   fixed0.1        p = 0.1 (the authors' experiments; the old default)
#   sqrtn           p = n^(-1/2)
#   tau_x/2         l = sqrt(n tau_x) / 2, tau_x the largest integrated
#                   autocorrelation time of the sample's coordinates
#                   (Geyer's initial positive sequence, kernbayes' gof_iact)
#   tau_x           l = sqrt(n tau_x)
#   tau_r/2         l = sqrt(n tau_r) / 2, tau_r that of the row sums of
#                   the Stein matrix
# Each rule with suffix "+c" uses centred multipliers W_t - mean(W)
# (the V_b2 of Chwialkowski et al. 2014). Row "ksd_test" is ksd_test()
# itself with its default change_prob when run (wild = "markov", type =
# "V"), through the C bootstrap; the only rule run above n = 2000.
#
# Writes to outdir: gof-dependent-runs.csv (one row per data set, cell and
# rule: p-value, flip probability, tau estimates) and gof-dependent.csv (per
# cell and rule: rejection rate and its Monte Carlo standard error), which
# is copied to inst/extdata/ when run from the package's source directory.
#
# inst/extdata/gof-dependent.csv: `Rscript inst/experiments/gof-dependent.R
# full` (n = 200, 1000; 300 data sets per cell; 50 min on a shared,
# heavily loaded two-core machine, one thread) with the rows of
# `GOF_DEP_NS=5000 Rscript inst/experiments/gof-dependent.R full` (20 min)
# appended. The first run was made before the default changed, so its
# "ksd_test" rows are the old default 0.1 (they agree with "fixed0.1", a
# check of the C path); the n = 5000 rows are the new default, which is the
# rule "tau_x" (the package also takes the scores' columns into tau; here
# they are -x).
#
# Results (rejection rate at 0.05; Monte Carlo SE 0.012-0.015 under the
# null, up to 0.029 under the shift):
#                  a = 0.5              a = 0.9
#   null      n =  200   1000  5000     200   1000  5000
#   rademacher    0.233 0.280   -      0.840 0.870   -
#   fixed0.1      0.070 0.110   -      0.280 0.293   -
#   sqrtn         0.060 0.047   -      0.237 0.150   -
#   tau_x/2       0.060 0.060   -      0.147 0.070   -
#   tau_r/2       0.073 0.063   -      0.153 0.087   -
#   tau_x         0.050 0.063 0.030    0.037 0.043 0.045  (the default)
#   fixed0.1+c    0.097 0.117   -      0.333 0.313   -
#   sqrtn+c       0.103 0.077   -      0.277 0.160   -
#   tau_x+c       0.110 0.097   -      0.243 0.130   -
#   shift (power)
#   rademacher    0.917 0.867          0.987 0.990
#   fixed0.1      0.750 0.737          0.927 0.930
#   sqrtn         0.700 0.680          0.890 0.813
#   tau_x/2       0.693 0.677          0.750 0.710
#   tau_x         0.590 0.653          0.400 0.573
#   tau_x+c       0.807 0.723          0.863 0.813
# Only tau_x holds the level in every cell; the rules with more power
# reject too often under the null (their power is not comparable). The
# price of the level is power on short, strongly dependent chains (0.40 at
# a = 0.9, n = 200: about ten effective draws), which shrinks with n.
# Centring raises both the level and the power: not used.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
args <- exp_args(mode = "quick", out = "gof-dependent-output")
stopifnot(args$mode %in% c("quick", "full"))
out <- exp_start(args$out)
full <- args$mode == "full"
reps <- if (full) as.integer(Sys.getenv("GOF_DEP_REPS", "300")) else 40L
ns <- if (!full) 200L else if (nzchar(Sys.getenv("GOF_DEP_NS")))
  as.integer(strsplit(Sys.getenv("GOF_DEP_NS"), ",")[[1L]]) else
    c(200L, 1000L)
coefs <- c(0.5, 0.9)
B <- 200L
say <- exp_logger()
iact <- kernbayes:::gof_iact

ar1 <- function(n, a) {
  e <- stats::rnorm(n)
  x <- numeric(n)
  x[1] <- e[1]
  s <- sqrt(1 - a^2)
  for (t in 2:n) x[t] <- a * x[t - 1] + s * e[t]
  matrix(x, n, 1)
}

markov_signs <- function(n, B, p) {
  first <- ifelse(stats::runif(B) < 0.5, -1, 1)
  flip <- matrix(stats::runif(n * B) < p, n, B)
  flip[1L, ] <- FALSE
  sweep(1 - 2 * (apply(flip, 2L, cumsum) %% 2L), 2L, first, "*")
}

rules <- list(
  "rademacher" = function(n, tx, tr) 0.5,
  "fixed0.1" = function(n, tx, tr) 0.1,
  "sqrtn" = function(n, tx, tr) n^-0.5,
  "tau_x/2" = function(n, tx, tr) 1 / (1 + max(1, sqrt(n * tx) / 2)),
  "tau_x" = function(n, tx, tr) 1 / (1 + max(1, sqrt(n * tx))),
  "tau_r/2" = function(n, tx, tr) 1 / (1 + max(1, sqrt(n * tr) / 2)))
centred <- c("fixed0.1", "sqrtn", "tau_x/2", "tau_x", "tau_r/2")

one_set <- function(x) {
  n <- nrow(x)
  s <- -x
  big <- n > 2000L  # the default only, in C: no n x n matrix in R
  K <- if (!big) stein_kernel_matrix(x, s, nthreads = 1, standardize = FALSE)
  stat <- sum(K) / n
  tx <- max(apply(x, 2L, iact))
  tr <- if (big) NA_real_ else iact(rowSums(K))
  res <- list()
  for (r in if (!big) names(rules)) {
    p <- rules[[r]](n, tx, tr)
    W <- markov_signs(n, B, p)
    for (ctr in c(FALSE, if (r %in% centred) TRUE)) {
      Wc <- if (ctr) sweep(W, 2L, colMeans(W)) else W
      boot <- colSums(Wc * (K %*% Wc)) / n
      res[[length(res) + 1L]] <- data.frame(
        rule = if (ctr) paste0(r, "+c") else r, flip = p,
        p_value = (1 + sum(boot >= stat)) / (B + 1))
    }
  }
  d <- ksd_test(x, s, type = "V", wild = "markov", n_boot = B, nthreads = 1,
                progress = FALSE, standardize = FALSE)
  res[[length(res) + 1L]] <- data.frame(rule = "ksd_test",
                                        flip = d$change_prob,
                                        p_value = d$p.value)
  cbind(do.call(rbind, res), tau_x = tx, tau_r = tr)
}

runs <- list()
for (n in ns) for (a in coefs) for (alt in c("null", if (n <= 2000L) "shift")) {
  tau <- (1 + a) / (1 - a)
  delta <- if (alt == "null") 0 else 2.5 * sqrt(tau / n)
  nr <- if (n > 2000L) min(reps, 200L) else reps
  t0 <- proc.time()[["elapsed"]]
  cell <- lapply(seq_len(nr), function(i) {
    set.seed(1e6 * (a == 0.9) + 1e4 * match(n, c(200L, 1000L, 5000L)) + i)
    x <- ar1(n, a) + delta
    cbind(n = n, coef = a, case = alt, delta = delta, rep = i, one_set(x))
  })
  runs[[length(runs) + 1L]] <- do.call(rbind, cell)
  say("n = %d, a = %.1f, %s: %d data sets in %.0f s", n, a, alt, nr,
      proc.time()[["elapsed"]] - t0)
  # partial results survive an interrupted run
  utils::write.csv(do.call(rbind, runs),
                   file.path(out, "gof-dependent-runs.csv"), row.names = FALSE)
}
runs <- do.call(rbind, runs)

key <- unique(runs[c("n", "coef", "case", "delta", "rule")])
summ <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  v <- runs[runs$n == key$n[i] & runs$coef == key$coef[i] &
              runs$case == key$case[i] & runs$rule == key$rule[i], ]
  r <- mean(v$p_value <= 0.05)
  data.frame(key[i, ], reps = nrow(v), reject = round(r, 4),
             mc_se = round(sqrt(r * (1 - r) / nrow(v)), 4),
             flip_mean = signif(mean(v$flip), 3),
             tau_x_mean = signif(mean(v$tau_x), 3),
             tau_r_mean = signif(mean(v$tau_r), 3), row.names = NULL)
}))
options(width = 200)
print(summ, row.names = FALSE)
files <- exp_write(list("gof-dependent-runs.csv" = runs,
                        "gof-dependent.csv" = summ), out,
                   extdata = if (full) "gof-dependent.csv")
say("wrote %s", paste(files, collapse = ", "))
