# Benchmark: Stein kernel evaluations inside ksd() / ksd_path().
# Prints nanoseconds per Stein kernel evaluation (k_p is symmetric: each pair
# is evaluated once, n(n+1)/2 evaluations) on 1 and 2 threads for
# n = 20000, d = 4, IMQ with precon = "med", and the ratio against a plain-R
# vectorised implementation of the same V-statistic, measured in this run.
# Goals: <= 8 ns per evaluation on one thread, >= 1.7x on 2 threads.
suppressPackageStartupMessages(library(kernbayes))
set.seed(1)
n <- as.integer(Sys.getenv("KB_BENCH_N", "20000"))
d <- 4L
target <- gaussian_target(rep(0, d))
x <- sample_target(target, n)
s <- target_score(target, x)
kernel <- imq_kernel(precon = "med")
evals <- function(n) n * (n + 1) / 2

best_time <- function(expr, reps = 3L) {
  e <- substitute(expr)
  pf <- parent.frame()
  min(replicate(reps, system.time(eval(e, pf))[["elapsed"]]))
}

# Plain-R vectorised reference: the same IMQ Stein kernel V-statistic with
# whole-matrix operations (med preconditioner, unstandardised).
ksd_plain_r <- function(x, s, c = 1, beta = -0.5) {
  n <- nrow(x)
  sub <- if (n > 1000) x[floor(seq(0, n - 1, length.out = 1000)) + 1, ] else x
  l <- 1 / stats::median(stats::dist(sub))^2
  d <- ncol(x)
  xx <- rowSums(x^2)
  r <- l * pmax(outer(xx, xx, "+") - 2 * tcrossprod(x), 0)
  t <- c + r
  p0 <- t^beta
  p1 <- beta * t^(beta - 1)
  p2 <- beta * (beta - 1) * t^(beta - 2)
  ss <- tcrossprod(s)
  xs <- rowSums(x * s)
  # (Lu)'(s_y - s_x) with u = x_i - x_j: l (x_i's_j - x_i's_i - x_j's_j + x_j's_i)
  a <- l * (tcrossprod(x, s) - xs - rep(xs, each = n) + t(tcrossprod(x, s)))
  K <- ss * p0 + 2 * p1 * a - 4 * p2 * l * r - 2 * p1 * l * d
  sqrt(sum(K)) / n
}

n_r <- 2000L
v_r <- ksd_plain_r(x[1:n_r, ], s[1:n_r, ])
t_r <- best_time(ksd_plain_r(x[1:n_r, ], s[1:n_r, ]), 3L)
v_c <- ksd(x[1:n_r, ], s[1:n_r, ], kernel, standardize = FALSE)
t_c_small <- best_time(ksd(x[1:n_r, ], s[1:n_r, ], kernel, nthreads = 1L, standardize = FALSE), 5L)
stopifnot(abs(v_r - v_c) <= 1e-10 * v_r)

t1 <- best_time(ksd(x, s, kernel, nthreads = 1L, standardize = FALSE))
t2 <- best_time(ksd(x, s, kernel, nthreads = 2L, standardize = FALSE))
tp <- best_time(ksd_path(x, s, kernel, nthreads = 1L, standardize = FALSE))
ns <- function(t, n) 1e9 * t / evals(n)
# the plain-R reference evaluates all n^2 pairs; count the same n(n+1)/2 work
cat(sprintf("ksd, IMQ precon = \"med\", d = %d\n", d))
cat(sprintf("  n = %d, 1 thread : %7.3f s  %6.2f ns/evaluation (goal <= 8)\n",
            n, t1, ns(t1, n)))
cat(sprintf("  n = %d, 2 threads: %7.3f s  %6.2f ns/evaluation, speed-up %.2fx (goal >= 1.7)\n",
            n, t2, ns(t2, n), t1 / t2))
cat(sprintf("  ksd_path, n = %d, 1 thread: %6.2f ns/evaluation\n", n, ns(tp, n)))
cat(sprintf("  plain-R vectorised reference, n = %d: %.3f s, %.1f ns/evaluation\n",
            n_r, t_r, ns(t_r, n_r)))
cat(sprintf("  ratio plain R / kernbayes, whole call incl. setup (1 thread, n = %d): %.1fx\n",
            n_r, t_r / t_c_small))
cat(sprintf("  ratio plain R (n = %d) / kernbayes (n = %d), per evaluation: %.1fx\n",
            n_r, n, ns(t_r, n_r) / ns(t1, n)))

# Samples larger than the cache: the last rows of the lower triangle (each
# row against all earlier points) at n = 1e5 (points and scores 16 MB in
# d = 10, inside the 32 MB L3 here) and at KB_BENCH_BIG (default 1e6: 160
# MB), the same number of pairs.  The C loop takes 16 rows at a time past
# each block of 256 earlier points; row by row, as before, every row read
# all earlier points from memory and the pair cost doubled past the cache
# (12.0 against 5.7 ns/pair with another job on the second core; 5.6 and
# 4.8 with the groups, the same sums bit for bit).  Prints ns per pair at
# both sizes and their ratio (about 1: the loop is not bound by memory).
n_big <- as.numeric(Sys.getenv("KB_BENCH_BIG", "1e6"))
pairs <- 2.56e8
per_pair <- function(nn, nt = 1L) {
  set.seed(2)
  xb <- matrix(stats::rnorm(nn * 10), nn, 10)
  rk <- kernbayes:::stein_setup(xb, -xb, imq_kernel(), FALSE)$kernel
  m <- ceiling(pairs / nn)
  t <- best_time(.Call(kernbayes:::C_kb_stein_block_sums, xb, -xb, rk,
                       nn - m, nn, as.integer(nt), NULL), 2L)
  1e9 * t / (m * (nn - m / 2))
}
ns_small <- per_pair(1e5)
ns_big <- per_pair(n_big)
cat(sprintf(paste0("rows past the cache, d = 10, 1 thread: n = 1e5 %.2f ns/pair, ",
                   "n = %g %.2f ns/pair, ratio %.2f (row by row, before: 2.1)\n"),
            ns_small, n_big, ns_big, ns_big / ns_small))
# The same rows on 2 threads.  Each group of 16 rows at 1e6 is about 12
# ticks of work; when a loop's chunk was cut at one tick it held a single
# group and ran on one thread (speedup 1.0 at n = 3e5 and beyond): chunks now
# hold at least one piece of the schedule per thread.
ns_big2 <- per_pair(n_big, 2L)
cat(sprintf(paste0("the same rows at n = %g on 2 threads: %.2f ns/pair, ",
                   "speedup %.2f over 1 thread (one-item chunks before: 1.0)\n"),
            n_big, ns_big2, ns_big / ns_big2))
