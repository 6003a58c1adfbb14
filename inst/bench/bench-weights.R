# Benchmark of ksd_weights() (issue 16, part 2): the C active-set solver of
# src/weights.c against quadprog::solve.QP (dense constraint matrix, and
# solve.QP.compact) and the previous R active-set loop, on the same Stein
# kernel matrix (IMQ, 2-d Gaussian sample, exact draws), in one run:
# n = 500 and 1000 against the others, n = 5000 ours alone.  quadprog needs
# a positive definite matrix: it gets K + 1e-12 max(K_ii) I, the ridge our
# solver works with; objectives are compared on K.
# Run: R_LIBS=... Rscript inst/bench/bench-weights.R
# Measured (2 cores shared with other jobs, load 2.5-4, one thread):
#   n = 500:  ksd_weights 0.01 s, solver 0.006 s; solve.QP 0.54 s (ratio
#             90), solve.QP.compact 0.29 s (48), previous R loop 0.56 s (94)
#   n = 1000: ksd_weights 0.05 s, solver 0.04 s; solve.QP 24.6 s (649),
#             solve.QP.compact 12.4 s (327), previous R loop 6.3 s (166)
#   n = 5000: ksd_weights 2.98 s (Stein matrix 1.25 s, solver 1.63 s, 291
#             gradients, support 932)
#   objectives: ours below solve.QP's by 2e-14 (n = 500) and 1.1e-13
#   (n = 1000) relative; KKT residuals 3-6e-15 of max K_ii.
library(kernbayes)

local({  # the reference solvers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("bench", package = "kernbayes"), "ref-weights.R"),
    local = FALSE)
})

obj <- function(K, w) drop(crossprod(w, K %*% w))
kkt <- function(K, w) {
  g <- drop(K %*% w)
  lam <- sum(w * g)
  max(pmax(lam - g, 0), abs(g[w > 0] - lam)) / max(diag(K))
}
el <- function(expr) system.time(expr)[["elapsed"]]

cat("load:", system("uptime", intern = TRUE), "\n")
tg <- gaussian_target(c(0, 0))
for (n in c(500L, 1000L, 5000L)) {
  set.seed(n)
  x <- sample_target(tg, n)
  t_all <- el(w_all <- ksd_weights(x, tg, nthreads = 1, progress = FALSE, standardize = FALSE))
  t_K <- el(K <- stein_kernel_matrix(x, tg, nthreads = 1, standardize = FALSE))
  # ours: the median of 5 runs below n = 5000 (tens of milliseconds)
  reps <- if (n < 5000L) 5L else 1L
  t_rep <- numeric(reps)
  for (r in seq_len(reps)) {
    t_rep[r] <- el(w <- kernbayes:::simplex_weights(K, nthreads = 1L))
  }
  t_ours <- stats::median(t_rep)
  o <- obj(K, as.numeric(w))
  cat(sprintf(paste0("n = %d: ksd_weights %.2f s (Stein matrix %.2f s, ",
                     "solver %.2f s: %d entering steps, support %d, KKT ",
                     "residual %.1e of max K_ii)\n"),
              n, t_all, t_K, t_ours, attr(w, "iterations"),
              attr(w, "support"), kkt(K, as.numeric(w))))
  if (n <= 1000L) {
    t_qd <- el(wqd <- qp_dense(K))
    t_qc <- el(wqc <- qp_compact(K))
    t_old <- el(wo <- old_simplex_qp(K))
    cat(sprintf(paste0("  quadprog::solve.QP %.2f s (ratio %.0f), ",
                       "solve.QP.compact %.2f s (ratio %.0f), previous R ",
                       "loop %.2f s (ratio %.0f)\n"),
                t_qd, t_qd / t_ours, t_qc, t_qc / t_ours, t_old,
                t_old / t_ours))
    cat(sprintf(paste0("  objective: ours %.12g, relative to solve.QP %.1e, ",
                       "to compact %.1e, to the R loop %.1e\n"),
                o, o / obj(K, wqd) - 1, o / obj(K, wqc) - 1,
                o / obj(K, wo) - 1))
  }
  rm(K)
  invisible(gc())
}
