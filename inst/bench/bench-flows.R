# Particle flows: seconds per iteration at n = 1000 particles, d = 2 and 50,
# for svgd, mmd_flow and ksd_descent on 1 and 2 threads, and the ratio of
# svgd against a vectorised plain-R SVGD update measured in the same run.
# Run: Rscript inst/bench/bench-flows.R  (KB_BENCH_THREADS=1 skips 2 threads)
suppressMessages(library(kernbayes))
elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}
threads <- if (Sys.getenv("KB_BENCH_THREADS") == "1") 1L else c(1L, 2L)

# the vectorised plain-R SVGD update (the reference algorithm's formulas)
svgd_plain_r <- function(x, score, n_iter, step, alpha = 0.9) {
  hist <- NULL
  for (t in seq_len(n_iter)) {
    S <- score(x)
    D2 <- as.matrix(stats::dist(x))^2
    h2 <- 0.5 * stats::median(D2) / log(nrow(x) + 1)
    K <- exp(-D2 / (2 * h2))
    phi <- (K %*% S + (x * rowSums(K) - K %*% x) / h2) / nrow(x)
    hist <- if (t == 1L) phi^2 else alpha * hist + (1 - alpha) * phi^2
    x <- x + step * phi / (1e-6 + sqrt(hist))
  }
  x
}

n <- 1000L
for (d in c(2L, 50L)) {
  set.seed(1)
  tg <- kb_target(function(x) -rowSums(x^2) / 2, function(x) -x, dim = d,
                  vectorized = TRUE)
  x0 <- matrix(stats::rnorm(n * d), n)
  y <- matrix(stats::rnorm(n * d), n)
  it <- 20L
  t_r <- elapsed(xr <- svgd_plain_r(x0, function(x) -x, it, 0.01)) / it
  cat(sprintf("d = %d, n = %d: plain-R svgd update %.4f s/iteration\n", d, n, t_r))
  for (nt in threads) {
    t_s <- elapsed(fs <- svgd(x0, tg, n_iter = it, step_size = 0.01,
                              progress = FALSE, nthreads = nt)) / it
    stopifnot(max(abs(fs$x - xr)) < 1e-8)
    t_m <- elapsed(mmd_flow(x0, y, n_iter = it, progress = FALSE,
                            nthreads = nt)) / it
    t_k <- elapsed(fk <- ksd_descent(x0, tg, method = "gd", step_size = 0.01,
                                     n_iter = it, progress = FALSE,
                                     nthreads = nt)) / length(fk$objective)
    cat(sprintf(paste0("  %d thread%s: svgd %.4f s/it (%.1fx plain R); ",
                       "mmd_flow %.4f s/it; ksd_descent (gd, FD Jacobian) ",
                       "%.4f s/it\n"),
                nt, if (nt > 1L) "s" else " ", t_s, t_r / t_s, t_m, t_k))
  }
}
