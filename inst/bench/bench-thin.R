# Benchmark: greedy Stein thinning, n = 100000, d = 4, m = 1000,
# precon = "med".  Prints seconds and nanoseconds per Stein kernel
# evaluation (n per step, n m in all) on 1 and 2 threads, and the ratio
# against a plain-R vectorised implementation of the same greedy rule on a
# smaller problem, measured in this run, and the cost of progress = TRUE
# against the default progress = FALSE.  If KB_REF_STEIN_THINNING names a
# directory holding the reference Python package `stein_thinning` (Riabiz et
# al.), and python3 (or KB_PYTHON) has numpy and scipy, the reference is
# timed too (wall and CPU time; Debian's /usr/bin/python3 with
# python3-numpy and python3-scipy will do).
# Goals: <= 1 s on one thread, >= 20x faster than the reference (issue 19).
suppressPackageStartupMessages(library(kernbayes))
set.seed(1)
n <- as.integer(Sys.getenv("KB_BENCH_N", "100000"))
m <- as.integer(Sys.getenv("KB_BENCH_M", "1000"))
d <- 4L
x <- matrix(stats::rnorm(n * d), n, d)
s <- -x
kernel <- imq_kernel(precon = "med")

best_time <- function(expr, reps = 3L) {
  e <- substitute(expr)
  pf <- parent.frame()
  min(replicate(reps, system.time(eval(e, pf))[["elapsed"]]))
}

# Plain-R vectorised greedy Stein thinning (same rule, same kernel).
thin_plain_r <- function(x, s, m, c = 1, beta = -0.5) {
  scl <- colMeans(abs(sweep(x, 2, colMeans(x))))
  x <- sweep(x, 2, scl, "/")
  s <- sweep(s, 2, scl, "*")
  n <- nrow(x)
  sub <- if (n > 1000) x[floor(seq(0, n - 1, length.out = 1000)) + 1, ] else x
  l <- 1 / stats::median(as.vector(stats::dist(sub)))^2
  kp_col <- function(j) {
    u <- sweep(x, 2, x[j, ], "-")        # x_i - x_j
    r <- l * rowSums(u^2)
    t <- c + r
    v <- sweep(-s, 2, s[j, ], "+")       # s_j - s_i
    rowSums(s * rep(s[j, ], each = n)) * t^beta +
      2 * beta * t^(beta - 1) * l * rowSums(u * v) -
      4 * beta * (beta - 1) * t^(beta - 2) * l * r -
      2 * beta * t^(beta - 1) * l * ncol(x)
  }
  obj <- rowSums(s^2) * c^beta - 2 * beta * c^(beta - 1) * l * ncol(x)
  idx <- integer(m)
  for (j in seq_len(m)) {
    if (j > 1) obj <- obj + 2 * kp_col(idx[j - 1])
    idx[j] <- which.min(obj)
  }
  idx
}

t1 <- best_time(th1 <- stein_thin(x, s, m, kernel, nthreads = 1L,
                                  progress = FALSE), 3L)
t2 <- best_time(th2 <- stein_thin(x, s, m, kernel, nthreads = 2L,
                                  progress = FALSE), 3L)
# the progress hook: without it (progress = FALSE) the greedy loop only
# tests a NULL pointer when its interrupt ticker fires; with it, an R call
# at most once a second
t1p <- best_time(th1p <- suppressMessages(stein_thin(x, s, m, kernel,
                                                     nthreads = 1L,
                                                     progress = TRUE)), 3L)
stopifnot(identical(th1$index, th1p$index))
stopifnot(identical(th1$index, th2$index))
ns <- function(t, n, m) 1e9 * t / (n * m)

n_r <- 20000L
m_r <- 100L
t_r <- best_time(i_r <- thin_plain_r(x[1:n_r, ], s[1:n_r, ], m_r), 1L)
t_c <- best_time(th_r <- stein_thin(x[1:n_r, ], s[1:n_r, ], m_r, kernel,
                                   nthreads = 1L), 3L)
stopifnot(identical(i_r, th_r$index))

cat(sprintf("stein_thin, IMQ precon = \"med\", n = %d, d = %d, m = %d\n", n, d, m))
cat(sprintf("  1 thread : %6.3f s  %5.2f ns/evaluation (goal <= 1 s)\n", t1,
            ns(t1, n, m)))
cat(sprintf("  2 threads: %6.3f s  %5.2f ns/evaluation, speed-up %.2fx\n", t2,
            ns(t2, n, m), t1 / t2))
cat(sprintf("  plain-R vectorised, n = %d, m = %d: %.3f s vs %.3f s here: ratio %.1fx\n",
            n_r, m_r, t_r, t_c, t_r / t_c))
cat(sprintf("  progress = TRUE vs FALSE, 1 thread: %.3f s vs %.3f s: ratio %.3f\n",
            t1p, t1, t1p / t1))

ref <- Sys.getenv("KB_REF_STEIN_THINNING")
py <- Sys.getenv("KB_PYTHON", Sys.which("python3"))
if (nzchar(ref) && nzchar(py)) {
  f <- tempfile(fileext = ".csv")
  utils::write.table(x, f, sep = ",", row.names = FALSE, col.names = FALSE)
  code <- sprintf(paste(
    "import sys, time, numpy as np",
    "sys.path.insert(0, '%s')",
    "from stein_thinning.thinning import thin",
    "x = np.loadtxt('%s', delimiter=',')",
    "c = time.process_time(); t = time.time()",
    "idx = thin(x, -x, %d, preconditioner='med')",
    "print(time.time() - t); print(' '.join(str(i + 1) for i in idx))",
    "print(time.process_time() - c)",
    sep = "\n"), ref, f, m)
  out <- system2(py, c("-c", shQuote(code)), stdout = TRUE)
  t_ref <- as.numeric(out[1L])
  same <- identical(as.integer(strsplit(out[2L], " ")[[1L]]), th1$index)
  cat(sprintf("  reference Python: %.2f s: ratio %.1fx (goal >= 20), 2 threads %.1fx; same indices: %s\n",
              t_ref, t_ref / t1, t_ref / t2, same))
  # CPU time too: on a loaded machine the wall-time ratio mostly measures
  # the scheduler (both sides run on one core)
  cpu <- function(nt) min(replicate(3L, {
    st <- system.time(stein_thin(x, s, m, kernel, nthreads = nt,
                                 progress = FALSE))
    st[["user.self"]] + st[["sys.self"]]
  }))
  c1 <- cpu(1L)
  c2 <- cpu(2L)
  c_ref <- as.numeric(out[3L])
  cat(sprintf("  CPU time: Python %.2f s, here %.3f s (%.2f ns/evaluation): ratio %.1fx\n",
              c_ref, c1, ns(c1, n, m), c_ref / c1))
  cat(sprintf("  CPU time on 2 threads (both threads' time): %.3f s: ratio %.1fx\n",
              c2, c_ref / c2))
} else {
  cat("  reference Python not timed (set KB_REF_STEIN_THINNING to its package directory)\n")
}

# Regularised Stein thinning (Benard et al. 2023): the same loop with the
# Laplacian and entropic terms; their cost is the log density and 2 d extra
# score evaluations (central differences) per point, measured against
# plain Stein thinning in this run on a Gaussian target (a vectorised
# kb_target, as a user would pass).
tg <- gaussian_target(rep(0, d))
t_plain <- best_time(stein_thin(x, tg, m, kernel = kernel, nthreads = 1,
                                progress = FALSE))
t_reg <- best_time(stein_thin(x, tg, m, kernel = kernel, nthreads = 1,
                              regularize = TRUE, progress = FALSE))
cat(sprintf(paste0("  regularize = TRUE vs FALSE (target score, 1 thread): ",
                   "%.3f s vs %.3f s: ratio %.2f\n"), t_reg, t_plain,
            t_reg / t_plain))
