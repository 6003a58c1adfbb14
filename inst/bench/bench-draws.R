# Benchmark: what labelled (multi-chain) input costs over a plain matrix.
# Four chains of an AR(1) process in d = 10 (n = 4 x 2500 by default,
# KB_BENCH_N rows in all), exact N(0, I) scores, one thread. Ratios measured
# in this run:
#   ksd(by_chain = TRUE)   against ksd() of the pooled matrix plus ksd() of
#                          each chain's rows (the same sums, done by hand)
#   ksd(draws, matrix)     (labels, row matching and the Stein-identity
#                          check of the score order) against ksd(matrix)
#   ksdt on 4 chains       (four streams and a merge) against one stream
#                          over the stacked rows (what it did before)
#   ksd_path per chain     against ksd_path of the stacked rows
# Goal: labels, row matching and the order check cost at most 10% on top of
# the kernel sums (ratios of the first two lines <= 1.1). Per-chain KSDT is
# another computation (four streams and a merge; measured 0.98-1.30 on a
# loaded machine) and per-chain paths sum fewer pairs (about 1/k of them).
# Measured (10000 x 10, loaded machine): by_chain 0.88-0.91, draws 1.02
# (1.32 before the order check was vectorised), ksdt 0.98-1.30, paths 0.26.
suppressPackageStartupMessages(library(kernbayes))
options(kernbayes.nthreads = 1L)
set.seed(1)
n <- as.integer(Sys.getenv("KB_BENCH_N", "10000"))
k <- 4L
t <- n %/% k
d <- 10L
x <- matrix(0, k * t, d)
for (c in seq_len(k)) {
  z <- stats::rnorm(d)
  for (i in seq_len(t)) {
    z <- 0.8 * z + 0.6 * stats::rnorm(d)
    x[(c - 1) * t + i, ] <- z
  }
}
colnames(x) <- paste0("v", seq_len(d))
s <- -x
chain <- rep(seq_len(k), each = t)

best_time <- function(expr, reps = 3L) {
  e <- substitute(expr)
  pf <- parent.frame()
  min(replicate(reps, system.time(eval(e, pf))[["elapsed"]]))
}
line <- function(what, a, b, la, lb) {
  cat(sprintf("%-22s %s %.3f s, %s %.3f s: ratio %.2f\n", what, la, a, lb, b,
              a / b))
}

by_hand <- function() {
  c(vapply(seq_len(k), function(c) ksd(x[chain == c, ], s[chain == c, ],
                                       progress = FALSE, standardize = FALSE), 0),
    ksd(x, s, progress = FALSE, standardize = FALSE))
}
stopifnot(isTRUE(all.equal(ksd(x, s, chain = chain, by_chain = TRUE,
                               progress = FALSE, standardize = FALSE)$ksd, by_hand())))
line("ksd(by_chain = TRUE)",
     best_time(ksd(x, s, chain = chain, by_chain = TRUE, progress = FALSE, standardize = FALSE)),
     best_time(by_hand()), "by_chain", "by hand")

if (requireNamespace("posterior", quietly = TRUE)) {
  da <- posterior::as_draws_array(array(x, c(t, k, d),
                                        dimnames = list(NULL, NULL, colnames(x))))
  line("ksd(draws, matrix, standardize = FALSE)",
       best_time(ksd(da, s, progress = FALSE, standardize = FALSE)),
       best_time(ksd(x, s, progress = FALSE, standardize = FALSE)), "draws", "matrix")
}

line("ksdt, 4 chains",
     best_time(ksdt(x, s, chain = chain, progress = FALSE, standardize = FALSE), 1L),
     best_time(ksdt(x, s, progress = FALSE, standardize = FALSE), 1L), "per chain", "stacked")
line("ksd_path per chain",
     best_time(ksd_path(x, s, chain = chain, standardize = FALSE)),
     best_time(ksd_path(x, s, standardize = FALSE)), "per chain", "stacked")
