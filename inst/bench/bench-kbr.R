# Benchmark: kernel Bayes' rule.  Prints, in one run: the full fit for
# n = 2000 against a plain-R implementation with solve() (ratio), the split
# between our code (Gram matrices) and the LAPACK solves, the low-rank path
# for n = 2000, 4000, 8000 at rank 100 (time should grow about linearly in
# n), and one KBR-filter step for T = 1000 with and without low rank.
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

# one filter step, T = 1000: a linear Gaussian state-space model
A <- matrix(c(0.9, 0.1, -0.1, 0.9), 2)
sim <- function(T) {
  x <- matrix(0, T, 2)
  x[1, ] <- stats::rnorm(2, sd = 0.5)
  for (t in 2:T) x[t, ] <- A %*% x[t - 1, ] + stats::rnorm(2, sd = sqrt(0.1))
  list(x = x, y = x + matrix(stats::rnorm(2 * T, sd = sqrt(0.2)), T))
}
tr <- sim(1001)
te <- sim(20)
t_full <- elapsed(kbr_filter(tr$x, tr$y, te$y)) / 20
t_low <- elapsed(kbr_filter(tr$x, tr$y, te$y, rank = 100)) / 20
cat(sprintf("KBR filter, T = 1000: %.3f s per step (full), %.4f s per step (rank 100): ratio %.0fx\n",
            t_full, t_low, t_full / t_low))
