# Benchmark of the moment report every compression result carries (issue
# 31, R/moments.R): its cost beside the compression it reports on, and the
# reference moments (one pass of sums of powers over scaled deviations)
# beside a plain-R route (colMeans, apply(sd) and the kurtosis by apply),
# in one run.  The report reads the whole sample once (n d) and the set
# once (m d); a compression costs n m kernel evaluations or more.
# Run: R_LIBS=... Rscript inst/bench/bench-moments.R
# Measured (2 cores shared with an R CMD check, one thread): the reference
# moments 1.3-2.1x faster than the plain-R route (n = 1e4 and 1e5, d = 4
# and 20); the report of 100 points 0.6 ms; together 10-15% of the time
# of stein_thin(m = 100), the fastest compression (0.01-0.5 s here).
library(kernbayes)
el <- function(expr) system.time(expr)[["elapsed"]]
# mean time of k calls (a single call at n = 1e4 is below the clock's
# resolution)
reps <- function(f, k = 20L) el(for (i in seq_len(k)) f()) / k

cat("load:", system("uptime", intern = TRUE), "\n")
options(kernbayes.warn_distortion = FALSE)
for (d in c(4L, 20L)) for (n in c(1e4, 1e5)) {
  set.seed(d + n)
  x <- matrix(rnorm(n * d), n, d) %*% diag(seq_len(d))
  s <- -sweep(x, 2L, seq_len(d)^2, "/")
  t_ref <- reps(function() kernbayes:::sample_moments(x))
  t_plain <- reps(function() {
    mu <- colMeans(x)
    sdv <- apply(x, 2L, stats::sd)
    k <- apply(x, 2L, function(v) mean((v - mean(v))^4) / mean((v - mean(v))^2)^2)
    list(mu, sdv, k)
  })
  m <- 100L
  idx <- sample(n, m)
  ref <- kernbayes:::sample_moments(x)
  t_rep <- reps(function() kernbayes:::moment_report(x[idx, ], NULL, ref, "s"))
  t_thin <- el(th <- stein_thin(x, s, m = m, nthreads = 1L, progress = FALSE))
  cat(sprintf(paste0(
    "n = %6.0f, d = %2d: reference moments %.4f s (plain R %.4f s, ratio ",
    "%.2f); report of %d points %.5f s; stein_thin(m = %d) %.2f s: the ",
    "moments are %.2f%% of the thinning\n"),
    n, d, t_ref, t_plain, t_plain / t_ref, m, t_rep, m, t_thin,
    100 * (t_ref + t_rep) / t_thin))
}
