# kernbayes demo: the main job on a built-in default.
# Usage: Rscript demo.R [output-directory]
# Runs MALA on a built-in target (a two-component Gaussian mixture) from a
# poor starting point, measures the chain with the kernelized Stein
# discrepancy and its KSD path, compresses it to 100 points with Stein
# thinning, MMD thinning and KSDT (online), compares them with exact draws
# and with keeping every 40th state, prints a summary and writes plots.
suppressPackageStartupMessages(library(kernbayes))
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[[1L]] else "demo-output"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
set.seed(20261129)

target <- gaussian_mixture_target(
  means = rbind(c(-1.5, 0), c(1.5, 0.5)),
  covs = list(diag(c(0.6, 1)), matrix(c(0.8, 0.3, 0.3, 0.5), 2)),
  weights = c(0.4, 0.6))
print(target)
kernel <- imq_kernel(precon = "med")
n <- 4000L

# 1. an MCMC run with its burn-in kept
chain <- mala(target, x0 = c(6, -5), n_iter = n, step = 0.9)
cat("\n")
print(chain)
t_path <- system.time(path <- ksd_path(chain$x, chain$score, kernel,
                                       nthreads = 2L))
cat("\n")
print(summary(path))
cat(sprintf("(%.0f Stein kernel evaluations in %.2f s)\n", n * (n + 1) / 2,
            t_path[["elapsed"]]))

# 2. compress to m = 100 points in four ways
m <- 100L
exact <- sample_target(target, n)
th <- stein_thin(chain$x, chain$score, m, nthreads = 2L)
mt <- mmd_thin(chain$x, m, nthreads = 2L)
kt <- ksdt(chain$x, chain$score, min_size = "constant", min_size_coef = m,
           progress = FALSE)
every <- chain$x[seq(1L, n, length.out = m), ]
cat("\n")
print(th)
cat("\n")
print(kt)
k_of <- function(p) ksd(p, target, kernel)
res <- data.frame(
  set = c(sprintf("whole chain (%d states)", n),
          sprintf("exact draws (%d)", n),
          "every 40th state", "Stein thinning", "MMD thinning",
          "KSDT (online, one pass)", "Stein thinning + KSD weights"),
  points = c(n, n, m, m, m, length(kt$index), m),
  KSD = c(k_of(chain$x), k_of(exact), k_of(every), k_of(th$points),
          k_of(mt$points), k_of(kt$points),
          attr(ksd_weights(th$points, target, kernel), "ksd")))
cat("\nKSD (IMQ, median preconditioner) of each set:\n")
print(res, row.names = FALSE, digits = 4)

png_path <- file.path(out, "ksd-path.png")
grDevices::png(png_path, width = 900, height = 600, res = 110)
plot(path, main = "KSD path of a MALA chain started at (6, -5)")
invisible(grDevices::dev.off())
png_thin <- file.path(out, "stein-thinning.png")
grDevices::png(png_thin, width = 1100, height = 500, res = 110)
plot(th)
invisible(grDevices::dev.off())
png_ksdt <- file.path(out, "ksdt.png")
grDevices::png(png_ksdt, width = 1400, height = 450, res = 110)
plot(kt)
invisible(grDevices::dev.off())
cat(sprintf("\nwrote %s, %s and %s\n", png_path, png_thin, png_ksdt))
