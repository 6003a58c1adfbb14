# Benchmark of fssd_test() (issue 15): the linear-time test against a
# plain-R version written point by point from the paper's formulas (features
# xi(x, v) = k(x, v) s(x) + grad_x k(x, v), unbiased statistic, eigenvalues
# of the feature covariance, simulated null) on the same locations and
# bandwidth, and against ksd_test() (quadratic in n) on the same data, in
# the same run.  Also the cost of "opt" (L-BFGS-B on a 20% training split)
# and how time grows with n.
# Run: R_LIBS=... Rscript inst/bench/bench-fssd.R
library(kernbayes)
d <- 4L; J <- 10L
tg <- gaussian_target(rep(0, d))

plain_fssd <- function(x, s, V, h, n_sim) {
  n <- nrow(x)
  tau <- matrix(0, n, d * J)
  for (i in seq_len(n)) {
    f <- numeric(0)
    for (j in seq_len(J)) {
      diff <- x[i, ] - V[j, ]
      kv <- exp(-sum(diff^2) / (2 * h^2))
      f <- c(f, s[i, ] * kv - diff / h^2 * kv)
    }
    tau[i, ] <- f / sqrt(d * J)
  }
  stat <- (sum(colSums(tau)^2) - sum(tau^2)) / (n - 1)
  ev <- eigen(cov(tau), symmetric = TRUE)$values
  z <- matrix(rnorm(length(ev) * n_sim), length(ev))
  null <- colSums(ev * (z^2 - 1))
  list(statistic = stat, p.value = (1 + sum(null >= stat)) / (n_sim + 1))
}

set.seed(1)
n <- 20000L
x <- sample_target(tg, n) + 0.05
s <- target_score(tg, x)
V <- matrix(rnorm(J * d), J, d)
h <- 2
t_kb <- system.time(r_kb <- fssd_test(x, s, locations = V, bandwidth = h))[["elapsed"]]
t_r <- system.time(r_r <- plain_fssd(x, s, V, h, 3000))[["elapsed"]]
cat(sprintf("n = %d, d = %d, J = %d, given locations\n", n, d, J))
cat(sprintf("fssd_test: %.3f s, plain R: %.2f s, ratio %.0f; statistic %.6g vs %.6g\n",
            t_kb, t_r, t_r / t_kb, r_kb$statistic, r_r$statistic))

cat("\nopt (20% training split) and rand, and ksd_test (U, 1000 replicates, 1 thread):\n")
for (n in c(1000L, 4000L, 16000L)) {
  set.seed(2)
  x <- sample_target(tg, n)
  x[, 1] <- x[, 1] * 0.9
  s <- target_score(tg, x)
  t_opt <- system.time(p_opt <- fssd_test(x, s, n_locations = J)$p.value)[["elapsed"]]
  t_rand <- system.time(p_rand <- fssd_test(x, s, n_locations = J,
                                            locations = "rand")$p.value)[["elapsed"]]
  t_ksd <- if (n <= 4000L) system.time(p_ksd <- ksd_test(
    x, s, nthreads = 1, progress = FALSE, standardize = FALSE)$p.value)[["elapsed"]] else NA
  cat(sprintf("n = %5d: opt %.2f s (p = %.3f), rand %.3f s (p = %.3f), ksd_test %s\n",
              n, t_opt, p_opt, t_rand, p_rand,
              if (is.na(t_ksd)) "not run" else
                sprintf("%.2f s (p = %.3f), ratio ksd_test / opt %.1f", t_ksd,
                        p_ksd, t_ksd / t_opt)))
}
