# Constrained MIED: the cost of the dynamic barrier. Seconds per iteration
# of mied() with and without a constraint (the unit sphere, d = 3) at
# n = 200, 1000 and 4000 particles, and the ratio of the package's
# vectorised barrier against a per-particle plain-R loop of its formula,
# measured in the same run. The barrier is O(n d) in R beside the
# O(n^2 d) interaction terms in C, so its share falls as n grows.
# Run: Rscript inst/bench/bench-mied-constraint.R
# Measured on the shared 2-core machine (load average 12, one thread; noisy):
#   n = 200: 0.011 s/iteration, 0.018 with the sphere; barrier 149x the loop
#   n = 1000: 0.21 and 0.24; n = 4000: 3.3 and 3.8 (the R closures of the
#   target and the constraint are most of the difference at small n)
suppressMessages(library(kernbayes))
options(kernbayes.nthreads = 1L)
elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}
# the barrier one particle at a time, from its formula
barrier_loop <- function(v, g, dg, alpha) {
  for (i in seq_len(nrow(v))) {
    nn <- sum(dg[i, ]^2)
    lam <- if (nn > 0) max(0, (alpha * g[i] - sum(v[i, ] * dg[i, ])) / nn) else 0
    v[i, ] <- v[i, ] + lam * dg[i, ]
  }
  v
}
vmf <- kb_target(function(x) 5 * x[, 3], function(x) cbind(0 * x[, 1:2], 5),
                 dim = 3, vectorized = TRUE)
sphere <- mied_constraint(function(x) rowSums(x^2) - 1, function(x) 2 * x,
                          type = "eq")
for (n in c(200L, 1000L, 4000L)) {
  set.seed(1)
  x0 <- matrix(stats::rnorm(3 * n), n)
  it <- if (n <= 1000L) 50L else 5L
  t0 <- elapsed(mied(x0, vmf, n_iter = it, step_size = 0.01,
                     progress = FALSE)) / it
  t1 <- elapsed(mied(x0, vmf, n_iter = it, step_size = 0.01,
                     constraint = sphere, progress = FALSE)) / it
  v <- matrix(stats::rnorm(3 * n), n)
  ce <- kernbayes:::constraint_eval(sphere, x0, 1L)
  reps <- 20L
  tv <- elapsed(for (r in seq_len(reps))
    b1 <- kernbayes:::barrier_direction(v, ce, 1)) / reps
  tl <- elapsed(for (r in seq_len(reps)) b2 <- barrier_loop(v, ce$g, ce$dg, 1)) / reps
  stopifnot(max(abs(b1 - b2)) < 1e-12)
  cat(sprintf(paste0("n = %4d: mied %.4f s/iteration, with the sphere %.4f ",
                     "(x%.2f); barrier vectorised %.2e s, loop %.2e s ",
                     "(ratio %.1f)\n"), n, t0, t1, t1 / t0, tv, tl, tl / tv))
}
