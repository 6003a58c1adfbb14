# Particle flows: seconds per iteration at n = 1000 particles, d = 2 and 50,
# for svgd, mmd_flow and ksd_descent on 1 and 2 threads, the ratio of
# svgd against a vectorised plain-R SVGD update measured in the same run,
# mmd_flow with a user_kernel() (the Gaussian in R) against the built-in, and
# one mmd_flow step at n = M = 2000 (d = 2, 10) with the particles' own sums
# by symmetry against the previous cross sums of x against x, and the SVGD
# median bandwidth (against plain R, and its share of an iteration).
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

# A user_kernel() (R closures) against the built-in Gaussian kernel in C:
# mmd_flow at n = M = 1000, d = 2 and 50, the same flow (checked) in R.
gauss_user <- function(h) {
  kmat <- function(x, y) {
    exp(-pmax(outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y),
              0) / (2 * h^2))
  }
  user_kernel(kmat, function(x, y, w) {
    Kw <- kmat(x, y) * rep(w, each = nrow(x))
    (Kw %*% y - rowSums(Kw) * x) / h^2
  })
}
for (d in c(2L, 50L)) {
  set.seed(2)
  x0 <- matrix(stats::rnorm(n * d), n)
  y <- matrix(stats::rnorm(n * d, 1), n)
  it <- 10L
  h <- sqrt(d)
  t_c <- elapsed(fc <- mmd_flow(x0, y, gaussian_kernel(bandwidth = h),
                                n_iter = it, progress = FALSE,
                                nthreads = 1L)) / it
  t_u <- elapsed(fu <- mmd_flow(x0, y, gauss_user(h), n_iter = it,
                                progress = FALSE)) / it
  stopifnot(max(abs(fc$x - fu$x)) < 1e-8)
  cat(sprintf(paste0("d = %d, n = M = %d: mmd_flow built-in Gaussian %.4f s/it ",
                     "(1 thread), user_kernel() in R %.4f s/it (%.1fx the ",
                     "built-in)\n"), d, n, t_c, t_u, t_u / t_c))
}

# One mmd_flow step at n = M = 2000: the particles' own kernel sums by
# symmetry (each pair's phi, phi' once; what mmd_flow() runs) against the
# previous way, the cross sums of x against x (every pair twice), both with
# the same cross sums against y; and the x-x sums alone. Per call, the best
# of 7 repeats of 4 calls each, the two ways alternating (so that the load
# of a shared machine falls on both); results checked equal.
step_old <- function(x, y, rk, nt) {
  ax <- kernbayes:::cross_kernel(x, x, rep(1 / nrow(x), nrow(x)), rk, nt)
  ay <- kernbayes:::cross_kernel(x, y, rep(1 / nrow(y), nrow(y)), rk, nt)
  x - (ax$grad - ay$grad)
}
step_new <- function(x, y, rk, nt) {
  ax <- kernbayes:::self_kernel(x, rep(1 / nrow(x), nrow(x)), rk, nt)
  ay <- kernbayes:::cross_kernel(x, y, rep(1 / nrow(y), nrow(y)), rk, nt)
  x - (ax$grad - ay$grad)
}
best2 <- function(f_new, f_old, reps = 7L, calls = 4L) {
  tm <- vapply(seq_len(reps), function(r) {
    c(elapsed(for (k in seq_len(calls)) f_new()),
      elapsed(for (k in seq_len(calls)) f_old())) / calls
  }, numeric(2))
  apply(tm, 1L, min)
}
n2 <- 2000L
for (d in c(2L, 10L)) {
  set.seed(3)
  x0 <- matrix(stats::rnorm(n2 * d), n2)
  y <- matrix(stats::rnorm(n2 * d, 1), n2)
  for (kern in list(gaussian_kernel(), imq_kernel())) {
    rk <- kernbayes:::flow_kernel(kern, y)
    for (nt in threads) {
      xo <- step_old(x0, y, rk, nt)
      xn <- step_new(x0, y, rk, nt)
      stopifnot(max(abs(xo - xn)) < 1e-12 * max(abs(x0 - xo)) + 1e-15)
      w <- rep(1 / n2, n2)
      s <- best2(function() kernbayes:::self_kernel(x0, w, rk, nt),
                 function() kernbayes:::cross_kernel(x0, x0, w, rk, nt))
      s_n <- s[1]
      s_o <- s[2]
      s <- best2(function() step_new(x0, y, rk, nt),
                 function() step_old(x0, y, rk, nt))
      t_n <- s[1]
      t_o <- s[2]
      t_f <- elapsed(mmd_flow(x0, y, kern, n_iter = 5L, progress = FALSE,
                              nthreads = nt)) / 5
      cat(sprintf(paste0("d = %2d, n = M = %d, %-8s %d thread%s: x-x sums %.4f s ",
                         "(symmetric) vs %.4f s (cross): %.2fx; mmd_flow step ",
                         "%.4f vs %.4f s: %.2fx; mmd_flow %.4f s/it\n"),
                  d, n2, rk$type, nt, if (nt > 1L) "s" else " ", s_n, s_o,
                  s_o / s_n, t_n, t_o, t_o / t_n, t_f))
    }
  }
}

# The SVGD median bandwidth, selected without keeping the pair distances
# (src/flows.c, svgd_median): (1) against a plain-R median of the n^2
# squared distances (stats::dist(), the full matrix kept) at n = 3000,
# d = 2, the two alternating, best of 5, CPU and elapsed time; (2) its
# share of an SVGD iteration (the median bandwidth against a fixed one, the
# same direction) at n = 2000 and 10000, 1 thread.
cpu_wall <- function(expr) {
  t <- system.time(force(expr))
  c(cpu = t[["user.self"]], wall = t[["elapsed"]])
}
med_plain_r <- function(x) stats::median(as.matrix(stats::dist(x))^2)
med_c <- function(x, nt) .Call(kernbayes:::C_kb_svgd_median, x, 0, NULL, nt)
load_now <- function() sub(".*load average: ", "", system("uptime", intern = TRUE))
set.seed(4)
n3 <- 3000L
x3 <- matrix(stats::rnorm(2 * n3), n3)
stopifnot(abs(med_c(x3, 1L) / med_plain_r(x3) - 1) < 1e-12)
tm <- vapply(1:5, function(r) {
  c(cpu_wall(for (k in 1:10) med_c(x3, 1L)) / 10, cpu_wall(med_plain_r(x3)))
}, numeric(4))
b <- apply(tm, 1L, min)
cat(sprintf(paste0("svgd median, n = %d, d = 2, 1 thread: %.4f s CPU (%.4f s ",
                   "elapsed), plain R dist() + median %.3f s CPU (%.3f s): ",
                   "%.0fx (CPU), %.0fx (elapsed); load %s\n"),
            n3, b[1], b[2], b[3], b[4], b[3] / b[1], b[4] / b[2], load_now()))
for (n4 in c(2000L, 10000L)) {
  set.seed(5)
  x4 <- matrix(stats::rnorm(2 * n4), n4)
  h <- .Call(kernbayes:::C_kb_svgd_phi, x4, -x4, -1, 1L)$h
  reps <- if (n4 > 5000L) 3L else 10L
  calls <- if (n4 > 5000L) 1L else 10L
  tm <- vapply(seq_len(reps), function(r) {
    c(cpu_wall(for (k in seq_len(calls))
                 .Call(kernbayes:::C_kb_svgd_phi, x4, -x4, -1, 1L)),
      cpu_wall(for (k in seq_len(calls))
                 .Call(kernbayes:::C_kb_svgd_phi, x4, -x4, h, 1L))) / calls
  }, numeric(4))
  b <- apply(tm, 1L, min)
  cat(sprintf(paste0("svgd iteration, n = %d, d = 2, 1 thread: median bandwidth ",
                     "%.4f s CPU (%.4f elapsed), fixed bandwidth %.4f s CPU ",
                     "(%.4f): the median adds %.0f%% (CPU); load %s\n"),
              n4, b[1], b[2], b[3], b[4], 100 * (b[1] / b[3] - 1), load_now()))
}
