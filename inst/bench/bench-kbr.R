# Benchmark: kernel Bayes' rule.  Prints, in one run: the full fit for
# n = 2000 against a plain-R implementation with solve() (ratio), the split
# between our code (Gram matrices) and the LAPACK solves, the low-rank path
# for n = 2000, 4000, 8000 at rank 100 (time should grow about linearly in
# n), and the KBR filter per step, full vs low-rank path, for T = 100 to
# 2000 with the crossover.
suppressPackageStartupMessages(library(kernbayes))
set.seed(1)
elapsed <- function(expr) {
  e <- substitute(expr)
  pf <- parent.frame()
  system.time(eval(e, pf))[["elapsed"]]
}
toy <- function(n) {
  x <- matrix(stats::rnorm(2 * n), n)
  y <- x + matrix(stats::rnorm(2 * n, sd = 0.5), n)
  list(x = x, y = y)
}
n <- 2000L
d <- toy(n)
ynew <- toy(100)$y
eps <- 1e-3
delta <- 1e-4   # operator convention (scaled by n^2 in the solve)

# plain R, from the formulas, with solve()
kbr_plain_r <- function(x, y, ynew, eps, delta) {
  n <- nrow(x)
  med <- function(z) {   # the package's convention: at most 1000 rows
    if (nrow(z) > 1000) z <- z[floor(seq(0, nrow(z) - 1, length.out = 1000)) + 1, ]
    stats::median(stats::dist(z))
  }
  gk <- function(a, b, s) {
    d2 <- outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b)
    exp(-pmax(d2, 0) / (2 * s^2))
  }
  sx <- med(x)
  sy <- med(y)
  Gx <- gk(x, x, sx)
  Gy <- gk(y, y, sy)
  m <- rowMeans(Gx)
  mu <- n * solve(Gx + n * eps * diag(n), m)
  B <- mu * Gy
  R <- B %*% solve(B %*% B + n^2 * delta * diag(n), diag(mu))
  R %*% gk(y, ynew, sy)
}
t_r <- elapsed(W_r <- kbr_plain_r(d$x, d$y, ynew, eps, delta))
t_c <- elapsed({
  fit <- kbr(d$x, d$y, eps = eps, delta = delta)
  W_c <- predict(fit, ynew)
})
stopifnot(max(abs(W_c - W_r)) < 1e-6 * max(abs(W_r)))

# split: Gram matrices (our C) vs the solves (LAPACK through our C)
rkx <- kernbayes:::resolve_kernel(gaussian_kernel(), d$x)
rky <- kernbayes:::resolve_kernel(gaussian_kernel(), d$y)
t_gram <- elapsed({
  gx <- kernbayes:::gram(rkx, d$x)
  gy <- kernbayes:::gram(rky, d$y)
})
t_solve <- elapsed(res <- .Call(kernbayes:::C_kb_kbr_fit, gx, rowMeans(gx), gy,
                                eps, delta, "kbr"))
cat(sprintf("full KBR, n = %d, 100 observations: %.2f s vs plain R %.2f s: ratio %.1fx\n",
            n, t_c, t_r, t_r / t_c))
cat(sprintf("  Gram matrices (C): %.3f s; fit solves (LAPACK): %.3f s; the rest: %.3f s\n",
            t_gram, t_solve, max(t_c - t_gram - t_solve, 0)))

cat("low-rank KBR, rank 100, 100 observations:\n")
prev <- NA
for (nn in c(2000L, 4000L, 8000L)) {
  dd <- toy(nn)
  t_l <- elapsed({
    f <- kbr(dd$x, dd$y, eps = eps, delta = delta, rank = 100, tol = 0)
    predict(f, ynew)
  })
  cat(sprintf("  n = %5d: %.3f s%s\n", nn, t_l,
              if (is.na(prev)) "" else sprintf(" (x%.2f for twice the n)", t_l / prev)))
  prev <- t_l
}

# The KBR filter, full vs low-rank path, on the noisy rotation of
# Fukumizu et al. (2013, Sec. 5.3, case a; inst/experiments/kbr-rotation-filter.R)
# with median bandwidths and the default tol (factors of rank ~30-40): time
# per step for T = 100 ... 2000 training transitions, both methods, and the
# crossover (the smallest T of the grid from which the low-rank path is
# faster at every larger T). kbr_filter() picks the low-rank path by
# default above T = 300.
rot <- function(T) {
  g <- function(th) cbind(cos(th), sin(th))
  x <- matrix(0, T, 2)
  x[1, ] <- g(stats::runif(1, -pi, pi)) + stats::rnorm(2, sd = 0.2)
  for (t in 2:T) x[t, ] <- g(atan2(x[t - 1, 2], x[t - 1, 1]) + 0.3) + stats::rnorm(2, sd = 0.2)
  list(x = x, y = x + matrix(stats::rnorm(2 * T, sd = 0.2), T))
}
te <- rot(20)
Ts <- c(100L, 200L, 300L, 500L, 1000L, 2000L)
cat("KBR filter, noisy rotation, 20 steps: seconds per step\n")
ratios <- list()
for (method in c("iw", "kbr")) {
  ratios[[method]] <- numeric(0)
  for (T in Ts) {
    tr <- rot(T + 1L)
    # fewer steps for the slow full path at large T (its cost per step is flat)
    nf <- if (T >= 1000L) 4L else 20L
    t_full <- elapsed(f0 <- kbr_filter(tr$x, tr$y, te$y[seq_len(nf), ],
                                       method = method, rank = Inf)) / nf
    t_low <- elapsed(f1 <- kbr_filter(tr$x, tr$y, te$y, method = method,
                                      rank = min(200L, T))) / 20
    ratios[[method]] <- c(ratios[[method]], t_full / t_low)
    cat(sprintf("  %-3s T = %4d: full %.4f, low rank %.4f (ranks %d/%d): ratio %.1fx; max |mean diff| %.1e\n",
                method, T, t_full, t_low, f1$rank_x, f1$rank_y, t_full / t_low,
                max(abs(f1$mean[seq_len(nf), ] - f0$mean))))
  }
  win <- ratios[[method]] > 1
  k <- if (all(win)) 1L else if (!win[length(win)]) NA else max(which(!win)) + 1L
  cat(sprintf("  %s: low rank faster from T = %s of the grid on\n", method,
              if (is.na(k)) "none" else Ts[k]))
}
