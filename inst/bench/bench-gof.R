# Benchmark of ksd_test() (issue 15): n = 2000, d = 4, 1000 bootstrap
# replicates (U-statistic, multinomial bootstrap, IMQ c = 1, beta = -1/2,
# L = I), on one thread, against on the same data in the same run:
# - a plain-R version of the same test (Stein matrix from
#   kernbayes::stein_kernel_matrix(), bootstrap as R matrix products);
# - steinsampling::ksd_u_test() (CRAN steinsampling 0.1.3: the same U-test,
#   kernel = "imq", scaling = 1 gives the same Stein kernel to rounding;
#   it forms the n x n Stein matrix in R and multiplies it by the n x B
#   weights), when it is installed.  steinsampling is not a dependency:
#   put its library on the path with KB_PEER_LIB, e.g.
#   KB_PEER_LIB=/work/scratch-lib.
# Times are the best of three runs.  The two packages draw their multinomial
# weights differently, so their p-values agree only within Monte Carlo error
# (about sqrt(p (1 - p) / 1000) each).
# KB_BENCH_BIG=1 also runs n = 20000 (d = 4, 1000 replicates, one thread,
# progress on): the R side holds the n x B weights (160 MB) and their packed
# copy (160 MB); the Stein matrix (3.2 GB) is never stored.
# Run: R_LIBS=... KB_PEER_LIB=... Rscript inst/bench/bench-gof.R
#
# Measured (R 4.2.2, reference BLAS, 2 cores shared with other jobs whose
# load varied; KB_PEER_LIB=/work/scratch-lib, steinsampling 0.1.3):
#   load ~2:  ksd_test 2.20 s, plain R 6.36 s, steinsampling 8.50 s: ratio
#             steinsampling / ksd_test 3.9 (idle, ksd_test took 0.92 s)
#   load ~7:  ksd_test 2.88 s, plain R 6.82 s, steinsampling 31.77 s: 11.1
#   p-values (shift 0.02, the same data): kernbayes 0.128, steinsampling
#   0.138 (difference 0.010, Monte Carlo SE of the difference 0.015); the
#   statistics agree to all printed digits (n U_n = 1.46736); the plain-R
#   bootstrap statistics agree with ksd_test's to 1.8e-15 (same weights).
#   2 threads gave no gain on the loaded machine (3.60 s).
#   n = 20000, 1000 replicates, one thread, with progress: 302 s wall at
#   load ~7 (the process got about a quarter of a core; 179 s on 2 threads
#   at a lighter load before), p = 0.034; R heap peak 593 MB (the n x B
#   weights 153 MB, their packed copy and rmultinom's integer counts),
#   peak RSS 646 MB; the Stein matrix would be 3.2 GB.
# The default on chains (issue 30; the second block below), same run, load
# ~1-2 (an R CMD check beside it): 4 chains x 500, d = 4, 1000 replicates,
# Markov wild bootstrap per chain: ksd_test 1.00 s, plain R 6.79 s (ratio
# 6.8; the same p-value 0.285, bootstrap statistics within 6.7e-16);
# ksd(by_chain = TRUE) with each chain's test (200 replicates) 0.51 s
# against 0.008 s for the KSDs alone (ratio 63). The first block in the
# same run: ksd_test 1.10 s, plain R 2.69 s (ratio 2.4).
peer <- Sys.getenv("KB_PEER_LIB")
if (nzchar(peer)) .libPaths(c(.libPaths(), strsplit(peer, ":")[[1L]]))
suppressPackageStartupMessages(library(kernbayes))
set.seed(1)
n <- 2000L; d <- 4L; B <- 1000L
tg <- gaussian_target(rep(0, d))
x <- sample_target(tg, n) + 0.02  # a small shift: p-value near 0.13
s <- target_score(tg, x)

best_time <- function(expr, reps = 3L) {
  e <- substitute(expr)
  pf <- parent.frame()
  min(replicate(reps, system.time(eval(e, pf))[["elapsed"]]))
}

plain_u_test <- function(x, s, B) {
  K <- stein_kernel_matrix(x, s, nthreads = 1, standardize = FALSE)
  n <- nrow(K)
  stat <- (sum(K) - sum(diag(K))) / (n - 1)
  W <- (stats::rmultinom(B, n, rep(1 / n, n)) - 1) / n
  boot <- n * (colSums(W * (K %*% W)) - colSums(W^2 * diag(K)))
  list(statistic = stat, p.value = (1 + sum(boot >= stat)) / (B + 1),
       boot = boot)
}

set.seed(2)
r_kb <- ksd_test(x, s, n_boot = B, nthreads = 1, progress = FALSE, standardize = FALSE)
set.seed(2)
r_r <- plain_u_test(x, s, B)
t_kb <- best_time(ksd_test(x, s, n_boot = B, nthreads = 1, progress = FALSE, standardize = FALSE))
t_kb2 <- best_time(ksd_test(x, s, n_boot = B, nthreads = 2,
                            progress = FALSE, standardize = FALSE))
t_r <- best_time(plain_u_test(x, s, B), 1L)
cat(sprintf("n = %d, d = %d, %d replicates (U, multinomial)\n", n, d, B))
cat(sprintf("ksd_test, 1 thread:   %.2f s (p = %.3f)\n", t_kb, r_kb$p.value))
cat(sprintf("ksd_test, 2 threads:  %.2f s\n", t_kb2))
cat(sprintf("plain R:              %.2f s (p = %.3f)\n", t_r, r_r$p.value))
cat(sprintf("ratio plain R / ksd_test (1 thread): %.1f\n", t_r / t_kb))
cat(sprintf("max relative difference of the bootstrap statistics: %.1e\n",
            max(abs(r_kb$boot - r_r$boot)) / max(abs(r_r$boot))))
if (requireNamespace("steinsampling", quietly = TRUE)) {
  score_fn <- function(z) target_score(tg, z)
  ss <- function() {
    steinsampling::ksd_u_test(x, score_fn, kernel = "imq", scaling = 1,
                              nboot = B)
  }
  set.seed(3)
  r_ss <- ss()
  t_ss <- best_time(ss())
  se <- sqrt(r_kb$p.value * (1 - r_kb$p.value) / B)
  cat(sprintf(paste0("steinsampling::ksd_u_test %s: %.2f s (p = %.3f); ",
                     "statistic %.6g vs %.6g\n"),
              utils::packageVersion("steinsampling"), t_ss, r_ss$p.value,
              unname(r_ss$statistic), unname(r_kb$statistic)))
  cat(sprintf("ratio steinsampling / ksd_test (1 thread): %.1f\n",
              t_ss / t_kb))
  cat(sprintf(paste0("p-values: kernbayes %.3f, steinsampling %.3f ",
                     "(difference %.3f; Monte Carlo SE of each %.3f)\n"),
              r_kb$p.value, r_ss$p.value, r_kb$p.value - r_ss$p.value, se))
} else {
  cat("steinsampling is not installed (set KB_PEER_LIB): not timed\n")
}

# The default on chains (issue 30): four random-walk chains of 500 states
# (d = 4), labelled; ksd_test() chooses the Markov wild bootstrap along each
# chain (flip probability per chain).  Against a plain-R version on the
# same data and the same random numbers (the IACT per chain by
# kernbayes:::gof_iact, weights drawn as ?ksd_test states, the bootstrap as
# R matrix products), and ksd(by_chain = TRUE) with each chain's test
# (n_boot = 200) against the KSDs alone (n_boot = 0).
set.seed(5)
ch <- do.call(rbind, lapply(1:4, function(i)
  rwm(tg, x0 = rnorm(d), n_iter = 500, step_size = 0.8)$x))
sc <- target_score(tg, ch)
lab <- rep(1:4, each = 500)
plain_markov <- function(x, s, lab, B) {
  K <- stein_kernel_matrix(x, s, nthreads = 1, standardize = FALSE)
  n <- nrow(K)
  stat <- (sum(K) - sum(diag(K))) / (n - 1)
  rows <- split(seq_len(n), lab)
  tau <- vapply(rows, function(r) max(apply(cbind(x[r, ], s[r, ]), 2,
                                             kernbayes:::gof_iact)), 0)
  p <- 1 / (1 + pmax(1, sqrt(lengths(rows) * tau)))
  first <- ifelse(stats::runif(B) < 0.5, -1, 1)
  u <- matrix(stats::runif(n * B), n, B)
  W <- matrix(0, n, B)
  pr <- rep(p, lengths(rows))
  starts <- cumsum(c(1, lengths(rows)))[seq_along(rows)]
  for (b in seq_len(B)) {
    w <- first[b]
    for (t in seq_len(n)) {
      if (t > 1) {
        flip <- if (t %in% starts) u[t, b] < 0.5 else u[t, b] < pr[t]
        if (flip) w <- -w
      }
      W[t, b] <- w
    }
  }
  boot <- (colSums(W * (K %*% W)) - colSums(W^2 * diag(K))) / n
  list(statistic = stat, p.value = (1 + sum(boot >= stat)) / (B + 1),
       boot = boot)
}
set.seed(6)
m_kb <- ksd_test(ch, sc, chain = lab, n_boot = B, nthreads = 1,
                 progress = FALSE, standardize = FALSE)
set.seed(6)
m_r <- plain_markov(ch, sc, lab, B)
t_mkb <- best_time(ksd_test(ch, sc, chain = lab, n_boot = B, nthreads = 1,
                            progress = FALSE, standardize = FALSE))
t_mr <- best_time(plain_markov(ch, sc, lab, B), 1L)
cat(sprintf("\n4 chains x 500, d = %d, %d replicates: %s\n", d, B, m_kb$method))
cat(sprintf("ksd_test: %.2f s (p = %.3f); plain R: %.2f s (p = %.3f); ratio %.1f\n",
            t_mkb, m_kb$p.value, t_mr, m_r$p.value, t_mr / t_mkb))
cat(sprintf("max relative difference of the bootstrap statistics: %.1e\n",
            max(abs(m_kb$boot - m_r$boot)) / max(abs(m_r$boot))))
t_bc <- best_time(ksd(ch, sc, chain = lab, by_chain = TRUE, nthreads = 1,
                      standardize = FALSE))
t_bc0 <- best_time(ksd(ch, sc, chain = lab, by_chain = TRUE, n_boot = 0,
                       nthreads = 1, standardize = FALSE))
cat(sprintf(paste0("ksd(by_chain = TRUE) with each chain's test (200 ",
                   "replicates): %.2f s; KSDs alone: %.3f s; ratio %.1f\n"),
            t_bc, t_bc0, t_bc / t_bc0))

if (Sys.getenv("KB_BENCH_BIG") == "1") {
  nb <- 20000L
  xb <- sample_target(tg, nb) + 0.01
  sb <- target_score(tg, xb)
  gc(reset = TRUE)
  set.seed(4)
  t_big <- system.time(r_big <- ksd_test(xb, sb, n_boot = B, nthreads = 1,
                                         progress = TRUE, standardize = FALSE))[["elapsed"]]
  mem <- gc()
  cat(sprintf(paste0("n = %d, %d replicates, 1 thread: %.0f s (p = %.3f); ",
                     "R heap peak %.0f MB (weights %.0f MB)\n"),
              nb, B, t_big, r_big$p.value, sum(mem[, ncol(mem)]),
              8 * nb * B / 2^20))
}

# The register blocks of the bootstrap (issue 35, item 3): d = 10, 1000
# replicates, one thread, IMQ, U-statistic, multinomial bootstrap.
# src/gof.c's tile_apply (4 tile rows x 4 replicates in 16 named
# accumulators) against its previous kernel tile_apply_ref (4 rows x 8
# replicates in an array), both selected in this run with the internal
# option kernbayes.gof_route; the same bits (checked below).  Then the time
# of the new kernel alone at the sizes in KB_BENCH_GOF_N (default 3e4; add
# 1e5 for about 20 minutes more on one idle core): the Stein matrix is never
# stored, the memory is the n x B weights and their packed copy.
# Measured (R 4.2.2, gcc 12 -O2, one thread, load ~1-2 on 2 shared cores):
#   n =  2000: new 0.9 s, old 1.8 s (1.88x); 5000: 4.0 s, 8.6 s (2.16x);
#   10000: 12.6 s, 33.1 s (2.63x); p-values and bootstrap identical.
#   n = 30000: new 112 s, R heap peak 872 MB.  An earlier run at load ~5
#   (the old kernel when the load fell): n = 10000 31.6 s against 72.2 s,
#   n = 30000 218.8 s against 320.0 s.  n = 1e5 with 8 replicates: 69 s,
#   peak RSS 172 MB (before issue 35 it stopped in gof_iact(), an integer
#   overflow from n = 32768); with 1000 replicates 1197 s, R heap peak
#   2.8 GB, peak RSS 2.9 GB (KB_BENCH_GOF_N=1e5).
cat("\nRegister blocks of the bootstrap, d = 10, 1000 replicates, 1 thread\n")
d10 <- 10L
tg10 <- gaussian_target(rep(0, d10))
gof_at <- function(n, route) {
  set.seed(7)
  x <- sample_target(tg10, n) + 0.01
  s <- target_score(tg10, x)
  old <- options(kernbayes.gof_route = route)
  on.exit(options(old))
  set.seed(8)
  t <- system.time(r <- ksd_test(x, s, n_boot = B, nthreads = 1,
                                 progress = FALSE))[["elapsed"]]
  list(time = t, test = r)
}
for (n in c(2000, 5000, 10000)) {
  a <- gof_at(n, "blocked")
  b <- gof_at(n, "reference")
  cat(sprintf(paste0("n = %5d: new %6.1f s, old %6.1f s, old / new %.2f; ",
                     "p-values identical %s, bootstrap identical %s\n"),
              n, a$time, b$time, b$time / a$time,
              identical(a$test$p.value, b$test$p.value),
              identical(a$test$boot, b$test$boot)))
}
big <- as.numeric(strsplit(Sys.getenv("KB_BENCH_GOF_N", "3e4"), ",")[[1L]])
for (n in big) {
  gc(reset = TRUE)
  a <- gof_at(n, "blocked")
  mem <- gc()
  cat(sprintf("n = %g: new %.0f s (p = %.3f); R heap peak %.0f MB\n", n,
              a$time, a$test$p.value, sum(mem[, ncol(mem)])))
}

# The incomplete test (issue 35, item 3): ksd_test(test = "incomplete") at
# n = 1e5 and 1e6 (its default lags, 1000 on independent draws), against
# the quadratic test at the switch size n = 2e4 with 1000 replicates
# (test = "auto" switches above n^2 n_boot = 4e11), d = 10, one thread,
# same run; printed as ratios.  Then the R heap the quadratic test's
# weights take (gc() "max used", n = 2e4, 200 / 1000 / 3000 replicates,
# Markov multipliers: they are drawn in blocks of 64 replicates and packed
# as they come), against gof_weight_bytes(), the estimate check_memory()
# is given (measured first: R's collector lets more garbage pile up in a
# process that has held large objects; after the n = 1e6 test the same
# 200 replicates peaked at 428 MB).  KB_BENCH_GOF_LARGE=0 skips the
# section.
# Measured (R 4.2.2, gcc 12 -O2, one thread, 2 shared cores at load 6-7):
#   quadratic n = 2e4 / incomplete n = 1e5: 17; / incomplete n = 1e6: 1.3;
#   incomplete n = 1e6 / n = 1e5: 13.1 (the partners' rows no longer stay
#   in cache; 21 with the partners read from the column-major matrices).
#   Weights (in a fresh process): 200 / 1000 / 3000 replicates peak at
#   114 / 338 / 859 MB, estimates 140 / 384 / 994 MB.
if (Sys.getenv("KB_BENCH_GOF_LARGE", "1") == "1") {
  cat("R heap of the quadratic test's weights, n = 2e4 (Markov):\n")
  for (B in c(200, 1000, 3000)) {
    invisible(gc(reset = TRUE))
    base <- gc()[2L, 2L]
    set.seed(13)
    Wp <- kernbayes:::gof_packed_weights(2e4, B, list(
      bootstrap = "wild", wild = "markov"), rep(0.05, 2e4), list(seq_len(2e4)))
    peak <- gc()[2L, 6L] - base
    rm(Wp)
    cat(sprintf("  %4d replicates: peak %.0f MB, estimate %.0f MB (%.2f)\n",
                B, peak, kernbayes:::gof_weight_bytes(2e4, B) / 2^20,
                kernbayes:::gof_weight_bytes(2e4, B) / 2^20 / peak))
  }
  cat("\nThe incomplete test against the quadratic one, d = 10, 1 thread\n")
  tgl <- gaussian_target(rep(0, 10))
  at_n <- function(n, test, n_boot = 1000) {
    set.seed(11)
    x <- sample_target(tgl, n) + 0.01
    s <- target_score(tgl, x)
    set.seed(12)
    t <- system.time(r <- ksd_test(x, s, n_boot = n_boot, test = test,
                                   nthreads = 1, progress = FALSE))
    list(time = t[["elapsed"]], test = r)
  }
  q <- at_n(2e4, "quadratic")
  i5 <- at_n(1e5, "incomplete")
  i6 <- at_n(1e6, "incomplete")
  cat(sprintf(paste0(
    "quadratic, n = 2e4, 1000 replicates / incomplete, n = 1e5 (%d lags): ",
    "%.0f\nquadratic, n = 2e4 / incomplete, n = 1e6 (%d lags): %.1f\n",
    "incomplete, n = 1e6 / n = 1e5: %.1f (10x the rows)\n"),
    i5$test$n_lags, q$time / i5$time, i6$test$n_lags, q$time / i6$time,
    i6$time / i5$time))
}
