# Many chains: 4 chains of 50,000 MALA steps with KSDT on 4-d targets (a
# Gaussian, where fixed costs dominate, and the Goodwin posterior),
# sequential against future's multisession plan with 2 workers (speed-up,
# goal >= 1.7 on 2 cores), and ksd_blocks() on 100,000 points with 2
# workers against ksd() with nthreads = 2 (ratio), measured in one run.
# Run: Rscript inst/bench/bench-chains.R  (KB_BENCH_SMALL=1: 10x smaller)
suppressMessages(library(kernbayes))
if (!requireNamespace("future.apply", quietly = TRUE)) {
  cat("bench-chains: future.apply is not installed; skipped\n")
  quit(save = "no")
}
small <- Sys.getenv("KB_BENCH_SMALL") == "1"
elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}
tg <- kb_target(function(x) -rowSums(x^2) / 2, function(x) -x, dim = 4,
                vectorized = TRUE, name = "N(0, I_4)")
# a realistic 4-d posterior: the Goodwin oscillator (an ODE solve per step)
set.seed(20261129)
gw <- goodwin_target(goodwin_simulate(c(1, 3, 2, 0.5), 41:80, sd = 0.1),
                     41:80, sd = 0.1)
n_iter <- if (small) 5000L else 50000L
# start the workers before timing (a one-off cost of a session)
future::plan(future::multisession, workers = 2)
invisible(future.apply::future_lapply(1:2, function(i) i))
for (case in list(list(tg, matrix(c(1, -1, 0.5, 0), 4, 4, byrow = TRUE)),
                  list(gw, matrix(digamma(2), 4, 4)))) {
  target <- case[[1]]
  future::plan(future::sequential)
  set.seed(1)
  t_seq <- elapsed(f1 <- ksdt_chains(target, case[[2]], n_iter, standardize = FALSE))
  future::plan(future::multisession, workers = 2)
  set.seed(1)
  t_par <- elapsed(f2 <- ksdt_chains(target, case[[2]], n_iter, standardize = FALSE))
  stopifnot(identical(f1$merged$points, f2$merged$points))
  cat(sprintf(paste0("ksdt_chains on %s, 4 chains x %d MALA steps: sequential ",
                     "%.1f s, multisession (2 workers) %.1f s: speed-up %.2fx\n"),
              target$name, n_iter, t_seq, t_par, t_seq / t_par))
  print(summary(f2))
}

future::plan(future::multisession, workers = 2)
n <- if (small) 10000L else 100000L
set.seed(2)
x <- matrix(stats::rnorm(4 * n), n)
t_blk <- elapsed(k_blk <- ksd_blocks(x, tg, blocks = 2, standardize = FALSE))
future::plan(future::sequential)
t_thr <- elapsed(k_thr <- ksd(x, tg, nthreads = 2, standardize = FALSE))
stopifnot(abs(k_blk / k_thr - 1) < 1e-10)
cat(sprintf(paste0("KSD of %d points, d = 4: ksd_blocks (2 workers) %.1f s, ",
                   "ksd(nthreads = 2) %.1f s: ratio %.2f (>1: threads faster)\n"),
            n, t_blk, t_thr, t_blk / t_thr))
