# Benchmark: KSDT over a 4-dimensional stream of 2,000,000 states (an AR(1)
# chain, coefficient 0.9, standard Gaussian target, started at (3, 3, 3, 3)),
# budget 0, min_size = "sqrt" (coef 1).  Prints seconds on 1 and 2 threads,
# the final dictionary size, kernel evaluations, nanoseconds per evaluation
# next to the KSD benchmark's figure measured in this run (same kernel,
# n = 20000), and the ratio against a plain-R implementation of the same
# algorithm (vectorised over the dictionary) on a shorter stream.
# Goals: < 60 s on 2 threads; 2 threads never slower than 1 (issue 36,
# which accepted that a KSDT step of 5-8 us cannot gain issue 19's 1.5x on
# this VM): on an idle machine 1-thread / 2-thread time >= 0.95, and with
# one competing CPU-bound process (started here) 2-thread / 1-thread time
# <= 1.3; per-evaluation cost within 1.3x of the KSD benchmark's.
# KB_BENCH_T=500000 is the issue's stream.  The 2-thread run uses the team the machine's load leaves
# (?kernbayes, "Threads"): on a busy machine it runs as 1 thread; the load
# average and the CPU time are printed beside the wall times.
# KB_BENCH_FIXED=1 fixes the team (options(kernbayes.follow_load = FALSE)).
suppressPackageStartupMessages(library(kernbayes))
set.seed(1)
T <- as.integer(Sys.getenv("KB_BENCH_T", "2000000"))
d <- 4L
ar1 <- function(T) {
  e <- matrix(stats::rnorm(T * d), T, d) * sqrt(1 - 0.81)
  e[1, ] <- 3
  apply(e, 2L, function(col) as.numeric(stats::filter(col, 0.9, "recursive")))
}
x <- ar1(T)
s <- -x

# KSD benchmark figure, measured in this run
xk <- matrix(stats::rnorm(20000 * d), ncol = d)
tk <- system.time(ksd(xk, -xk, nthreads = 1L, standardize = FALSE))[["elapsed"]]
ns_ksd <- 1e9 * tk / (20000 * 20001 / 2)

if (Sys.getenv("KB_BENCH_FIXED") == "1") options(kernbayes.follow_load = FALSE)
load_now <- function() {
  if (file.exists("/proc/loadavg")) readLines("/proc/loadavg")[1] else "?"
}
run <- function(nt) {
  load <- load_now()
  t <- system.time(fit <- ksdt(x, s, nthreads = nt, progress = FALSE, standardize = FALSE))
  list(time = t[["elapsed"]], cpu = t[["user.self"]] + t[["sys.self"]],
       load = load, fit = fit)
}
# KB_BENCH_THREADS=1 skips the 2-thread run (meaningless on a loaded machine)
r1 <- run(1L)
two <- Sys.getenv("KB_BENCH_THREADS", "2") != "1"
r2 <- if (two) run(2L) else list(time = NA_real_, cpu = NA_real_, load = "")
if (two) stopifnot(identical(r1$fit$index, r2$fit$index))
# the same pair with one competing CPU-bound process (a shell busy loop,
# killed on exit); KB_BENCH_COMPETE=0 skips it
compete <- two && Sys.getenv("KB_BENCH_COMPETE", "1") != "0"
if (compete) {
  busy <- as.integer(system("(while :; do :; done) >/dev/null 2>&1 & echo $!",
                            intern = TRUE))
  rc <- tryCatch({
    Sys.sleep(0.5)
    list(one = run(1L), two = run(2L))
  }, finally = tools::pskill(busy))
  stopifnot(identical(rc$one$fit$index, rc$two$fit$index))
}
ns1 <- 1e9 * r1$time / r1$fit$evals

# plain-R KSDT (same rules), vectorised over the dictionary
ksdt_plain_r <- function(x, s) {
  imq_row <- function(xi, si, X, S) {
    u <- -sweep(X, 2, xi)                    # x_i - X_j
    v <- sweep(S, 2, si)                     # S_j - s_i
    t <- 1 + rowSums(u^2)
    drop(S %*% si) * t^-0.5 - t^-1.5 * rowSums(u * v) - 3 * t^-2.5 * rowSums(u^2) +
      t^-1.5 * ncol(X)
  }
  X <- S <- NULL
  r <- kd <- numeric(0)
  tot <- 0
  for (t in seq_len(nrow(x))) {
    xt <- x[t, ]
    st <- s[t, ]
    kt <- sum(st^2) + 2 * 0.5 * ncol(x) * 1
    row <- if (length(r)) imq_row(xt, st, X, S) else numeric(0)
    r <- c(r + row, sum(row) + kt)
    kd <- c(kd, kt)
    X <- rbind(X, xt)
    S <- rbind(S, st)
    tot <- tot + 2 * sum(row) + kt
    n <- length(r)
    K0 <- tot / n^2
    fmin <- max(10, sqrt(t * log(t)))
    while (n - 1 >= fmin) {
      j <- which.min(kd - 2 * r)
      if ((tot - 2 * r[j] + kd[j]) / (n - 1)^2 > K0) break
      rowj <- imq_row(X[j, ], S[j, ], X, S)
      tot <- tot - 2 * r[j] + kd[j]
      r <- (r - rowj)[-j]
      kd <- kd[-j]
      X <- X[-j, , drop = FALSE]
      S <- S[-j, , drop = FALSE]
      n <- n - 1
    }
  }
  nrow(X)
}
T_r <- 20000L
t_r <- system.time(size_r <- ksdt_plain_r(x[1:T_r, ], s[1:T_r, ]))[["elapsed"]]
t_c <- system.time(fit_r <- ksdt(x[1:T_r, ], s[1:T_r, ], nthreads = 1L,
                                 progress = FALSE, standardize = FALSE))[["elapsed"]]
stopifnot(size_r == length(fit_r$index))

cat(sprintf("ksdt, IMQ precon = \"id\", d = %d, stream of %d states, budget 0, min_size sqrt\n",
            d, T))
cat(sprintf("  1 thread : %7.2f s (CPU %.2f s; load %s)\n", r1$time, r1$cpu,
            r1$load))
cat(sprintf("  2 threads: %7.2f s (CPU %.2f s; load %s) (goal < 60)\n",
            r2$time, r2$cpu, r2$load))
cat(sprintf(paste0("  1-thread / 2-thread time %.2f (goal >= 0.95 on an idle ",
                   "machine: 2 threads never slower)\n"), r1$time / r2$time))
if (compete) {
  cat(sprintf(paste0("  with one competing process: 1 thread %.2f s, 2 threads ",
                     "%.2f s (loads %s / %s)\n"), rc$one$time, rc$two$time,
              rc$one$load, rc$two$load))
  cat(sprintf("  2-thread / 1-thread time %.2f (goal <= 1.3)\n",
              rc$two$time / rc$one$time))
}
cat(sprintf("  final dictionary size %d; %.4g kernel evaluations\n",
            length(r1$fit$index), r1$fit$evals))
cat(sprintf("  %.2f ns/evaluation on 1 thread vs %.2f ns in ksd(): ratio %.2f (goal <= 1.3)\n",
            ns1, ns_ksd, ns1 / ns_ksd))
cat(sprintf("  plain R on the first %d states: %.2f s vs %.3f s here: ratio %.0fx\n",
            T_r, t_r, t_c, t_r / t_c))
