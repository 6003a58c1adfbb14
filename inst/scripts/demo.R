# kernbayes demo: the main job on a built-in default.
# Usage: Rscript demo.R [output-directory]
# Takes a sample from a built-in target (exact draws from a two-component
# Gaussian mixture), computes its kernelized Stein discrepancy and KSD path,
# compares it with a biased sample, thins it to 100 points (Stein and MMD
# thinning), prints a summary and writes plots.
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

n <- 4000L
x <- sample_target(target, n)
# a biased sample: the same draws, with only the second component kept
x_biased <- x[x[, 1L] > 0, , drop = FALSE][seq_len(n / 4), ]
kernel <- imq_kernel(precon = "med")
cat("\nkernel: ")
print(kernel)

t_path <- system.time(path <- ksd_path(x, target, kernel, nthreads = 2L))
cat("\n")
print(summary(path))
cat(sprintf("\n(%d x %d sample, %.0f kernel evaluations in %.2f s)\n", n,
            ncol(x), n * (n + 1) / 2, t_path[["elapsed"]]))

cat(sprintf("\nKSD (V-statistic), exact draws:          %.5f\n",
            ksd(x, target, kernel)))
cat(sprintf("KSD^2 (U-statistic), exact draws:        %.6f\n",
            ksd(x, target, kernel, type = "U")))
cat(sprintf("KSD, %4d draws from one component only: %.5f\n",
            nrow(x_biased), ksd(x_biased, target, kernel)))
cat(sprintf("KSD, first %4d exact draws:             %.5f\n",
            nrow(x_biased), path$ksd[nrow(x_biased)]))

# Thinning: keep 100 of the 4000 points.  Stein thinning uses the score;
# MMD thinning only the sample; both beat keeping every 40th point.
m <- 100L
th <- stein_thin(x, target, m, nthreads = 2L)
cat("\n")
print(th)
mt <- mmd_thin(x, m, nthreads = 2L)
every <- x[seq(1L, n, length.out = m), ]
cat(sprintf("\nKSD of %d points: Stein thinning %.4f, MMD thinning %.4f, every %dth point %.4f\n",
            m, ksd(th$points, target, kernel), ksd(mt$points, target, kernel),
            n / m, ksd(every, target, kernel)))
w <- ksd_weights(th$points, target, kernel)
cat(sprintf("KSD of the Stein-thinned points with KSD-optimal weights: %.4f\n",
            attr(w, "ksd")))

png_thin <- file.path(out, "stein-thinning.png")
grDevices::png(png_thin, width = 1100, height = 500, res = 110)
plot(th)
invisible(grDevices::dev.off())
cat(sprintf("wrote %s\n", png_thin))

png_file <- file.path(out, "ksd-path.png")
grDevices::png(png_file, width = 900, height = 600, res = 110)
plot(path, main = "KSD path: exact draws from a Gaussian mixture")
invisible(grDevices::dev.off())
cat(sprintf("\nwrote %s\n", png_file))
