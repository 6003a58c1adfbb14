# Benchmark of ksd_test() (issue 15): n = 2000, d = 4, 1000 bootstrap
# replicates, against a plain-R version of the same test in the same run
# (Stein matrix from kernbayes::stein_kernel_matrix(), bootstrap as R matrix
# products on R's BLAS).  steinsampling::ksd_u_test is not installed here;
# when it is, it is timed too.
# Run: R_LIBS=... Rscript inst/bench/bench-gof.R
# Measured (2 cores shared with other jobs): ksd_test 0.92-0.94 s on one
# thread, plain R 2.15-2.71 s (ratio 2.3-2.9); bootstrap statistics agree
# to 1.7e-15 relative; 2 threads gave no gain on the loaded machine.
# n = 20000, d = 4, 1000 replicates, 2 threads: 179 s wall (109 s CPU,
# shared machine), peak RSS 640 MB (an n x n Stein matrix alone is 3.2 GB).
library(kernbayes)
set.seed(1)
n <- 2000L; d <- 4L; B <- 1000L
tg <- gaussian_target(rep(0, d))
x <- sample_target(tg, n) + 0.05
s <- target_score(tg, x)

plain_u_test <- function(x, s, B) {
  K <- stein_kernel_matrix(x, s, nthreads = 1)
  n <- nrow(K)
  stat <- (sum(K) - sum(diag(K))) / (n - 1)
  W <- (stats::rmultinom(B, n, rep(1 / n, n)) - 1) / n
  boot <- n * (colSums(W * (K %*% W)) - colSums(W^2 * diag(K)))
  list(statistic = stat, p.value = (1 + sum(boot >= stat)) / (B + 1),
       boot = boot)
}

set.seed(2)
t_kb <- system.time(r_kb <- ksd_test(x, s, n_boot = B, nthreads = 1,
                                     progress = FALSE))[["elapsed"]]
set.seed(2)
t_r <- system.time(r_r <- plain_u_test(x, s, B))[["elapsed"]]
t_kb2 <- system.time(ksd_test(x, s, n_boot = B, nthreads = 2,
                              progress = FALSE))[["elapsed"]]
cat(sprintf("n = %d, d = %d, %d replicates (U, multinomial)\n", n, d, B))
cat(sprintf("ksd_test, 1 thread:   %.2f s (p = %.3f)\n", t_kb, r_kb$p.value))
cat(sprintf("ksd_test, 2 threads:  %.2f s\n", t_kb2))
cat(sprintf("plain R:              %.2f s (p = %.3f)\n", t_r, r_r$p.value))
cat(sprintf("ratio plain R / ksd_test (1 thread): %.1f\n", t_r / t_kb))
cat(sprintf("max relative difference of the bootstrap statistics: %.1e\n",
            max(abs(r_kb$boot - r_r$boot)) / max(abs(r_r$boot))))
if (requireNamespace("steinsampling", quietly = TRUE)) {
  t_ss <- system.time(steinsampling::ksd_u_test(x, s))[["elapsed"]]
  cat(sprintf("steinsampling::ksd_u_test: %.2f s\n", t_ss))
} else {
  cat("steinsampling is not installed: not timed\n")
}
