# Benchmark: kernel_thin() (KT-SPLIT + KT-SWAP, src/kt.c) against the
# plain-R transcription kept in tests/testthat/test-kt.R (its kt_ref_*
# functions, read from the source tree), on the same input and the same
# coin flips in this run; both are handed the same kernel matrix for the
# ratio of the thinning itself, and kernel_thin() is also timed end to end
# (kernel matrix included).  N(0, I_2), Stein kernel (IMQ) and Gaussian
# kernel (MMD to the sample), n = 2^10 by default (KB_BENCH_N, a power of
# two; the R transcription is slow beyond 2^11).  Run from the package
# root: Rscript inst/bench/bench-kt.R
suppressPackageStartupMessages(library(kernbayes))
ref <- new.env()
local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  root <- if (length(f)) file.path(dirname(f[1L]), "..", "..") else "."
  ex <- parse(file.path(root, "tests", "testthat", "test-kt.R"))
  for (e in ex) {
    if (is.call(e) && identical(e[[1L]], as.name("<-")) &&
        startsWith(as.character(e[[2L]]), "kt_ref_")) eval(e, ref)
  }
})
n <- as.integer(Sys.getenv("KB_BENCH_N", "1024"))
g <- as.integer(round(log2(n) / 2))
set.seed(1)
x <- matrix(rnorm(2 * n), n)
best_time <- function(expr, reps = 3L) {
  e <- substitute(expr)
  pf <- parent.frame()
  min(replicate(reps, system.time(eval(e, pf))[["elapsed"]]))
}
for (stein in c(TRUE, FALSE)) {
  score <- if (stein) -x
  K <- if (stein) stein_kernel_matrix(x, score) else
    kernel_matrix(x, kernel = gaussian_kernel(precon = "med"))
  mu <- if (!stein) rowMeans(K)
  set.seed(2)
  u <- runif(g * n / 2)
  t_c <- best_time(.Call(kernbayes:::C_kb_kernel_thin, K, g, 0.5,
                                       u, mu, TRUE))
  t_r <- best_time({
    cs <- ref$kt_ref_split(K, g, 0.5, u)
    idx <- ref$kt_ref_swap(K, cs, mu)
  }, reps = 1L)
  res <- .Call(kernbayes:::C_kb_kernel_thin, K, g, 0.5, u, mu, TRUE)
  set.seed(2)
  t_all <- best_time({ set.seed(2); th <- kernel_thin(x, score) })
  cat(sprintf(paste0("%s: n = %d, m = %d: C %.4f s, plain R %.3f s, ratio %.0fx",
                     " (same output: %s); kernel_thin() end to end %.4f s\n"),
              if (stein) "Stein kernel (KSD)" else "Gaussian kernel (MMD)",
              n, n / 2^g, t_c, t_r, t_r / t_c,
              identical(res$index, as.integer(idx)), t_all))
}
