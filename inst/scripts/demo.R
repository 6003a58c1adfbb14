# kernbayes demo: the main job.
# Usage: Rscript demo.R [output-directory]
# A MALA chain on the posterior of the Goodwin oscillator (four ODE
# parameters, data simulated as in Chen et al. 2019), thinned online by
# KSDT; its dictionary is compared with the raw chain, with Stein thinning
# to the same size and with equally spaced states, by the KSD under the one
# kernel both thinnings select with and by the errors of posterior means
# and sds against a separate long run.  Prints a summary and writes plots
# to PNG files.
suppressPackageStartupMessages(library(kernbayes))
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[[1L]] else "demo-output"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
nt <- 2L

# data: theta = (a1, a2, k1, alpha) = (1, 3, 2, 0.5), both species observed
# at t = 41..80 with noise sd 0.1
theta0 <- c(a1 = 1, a2 = 3, k1 = 2, alpha = 0.5)
times <- 41:80
set.seed(20261129)
y <- goodwin_simulate(theta0, times, sd = 0.1)
target <- goodwin_target(y, times, sd = 0.1)
print(target)

# 1. MALA from the prior mean, burn-in kept
n <- 20000L
t_mala <- system.time(
  chain <- mala(target, x0 = rep(digamma(2), 4), n_iter = n))
cat("\n")
print(chain)
cat(sprintf("(%.1f s, %.0f microseconds per iteration with an ODE solve)\n",
            t_mala[["elapsed"]], 1e6 * t_mala[["elapsed"]] / (n + 1000)))

# 2. KSDT over the chain as it streams in (one pass, square-root size rule).
# One fixed kernel for every comparison below: IMQ with L = I / med^2, med
# the median distance between states of the chain ("med" would recompute
# the median on each set and make the KSDs incomparable)
med <- stats::median(stats::dist(chain$x[seq(1L, n, length.out = 1000L), ]))
kernel <- imq_kernel(precon = med^2)
t_ksdt <- system.time(
  kt <- ksdt(chain$x, chain$score, kernel = kernel, progress = FALSE, standardize = FALSE))
cat("\n")
print(kt)
cat(sprintf("(%.2f s for %d states)\n", t_ksdt[["elapsed"]], n))

# 3. the same number of points by Stein thinning (offline, selecting with
# the same kernel, not standardised) and by keeping equally spaced states.
# Every set is judged with that one kernel: ksd(result) recomputes a
# result's KSD under the kernel it selected with, which is `kernel` here.
m <- nrow(kt$points)
th <- stein_thin(chain$x, chain$score, m, kernel = kernel, standardize = FALSE,
                 nthreads = nt)
every <- seq(1L, n, length.out = m)
k_of <- function(x, s) ksd(x, s, kernel, nthreads = nt, standardize = FALSE)
t_raw <- system.time(k_raw <- k_of(chain$x, chain$score))

# a KSD-free yardstick: errors of the posterior means and sds of log theta
# against a separate long run (MALA from the chain's last state, its final
# step size, no burn-in), in units of the reference's posterior sd
n_ref <- 30000L
ref <- mala(target, x0 = chain$x[n, ], n_iter = n_ref, step = chain$step)
mu_ref <- colMeans(ref$x)
sd_ref <- apply(ref$x, 2L, stats::sd)
errs <- function(x) {
  c(mean = max(abs(colMeans(x) - mu_ref) / sd_ref),
    sd = max(abs(apply(x, 2L, stats::sd) / sd_ref - 1)))
}
sets <- list(chain$x, kt$points, th$points, chain$x[every, ])
yard <- t(vapply(sets, errs, c(mean = 0, sd = 0)))
res <- data.frame(
  set = c(sprintf("raw chain (%d states)", n), "KSDT dictionary (online)",
          "Stein thinning (offline)", "equally spaced states"),
  points = c(n, m, m, m),
  KSD = c(k_raw, ksd(kt), ksd(th), k_of(chain$x[every, ], chain$score[every, ])),
  mean_err = yard[, "mean"], sd_err = yard[, "sd"])
cat("\n")
print(th)
cat(paste0("\nKSD of each set under the one kernel KSDT and Stein thinning ",
           "selected with (printed above;\nksd(kt) and ksd(th) recompute ",
           "their printed values).\n"))
cat(sprintf(paste0("mean_err / sd_err: largest error of a posterior mean / ",
                   "relative error of a posterior sd\nof log theta against ",
                   "a separate MALA run of %d iterations, in posterior sds\n"),
            n_ref))
print(res, row.names = FALSE, digits = 3)
if (requireNamespace("posterior", quietly = TRUE)) {
  ess <- min(summary(ref)$table$ess_bulk)
  cat(sprintf(paste0("(the reference's smallest bulk ESS is %.0f: its own ",
                     "error in a mean is about %.2f sd)\n"), ess, 1 / sqrt(ess)))
}
cat(sprintf("(the raw chain's KSD took %.1f s: %.0f Stein kernel evaluations)\n",
            t_raw[["elapsed"]], as.double(n)^2))
cat("\nposterior means of theta (natural scale):\n")
print(rbind(`long reference run` = colMeans(exp(ref$x)),
            `KSDT dictionary` = colMeans(exp(kt$points)),
            `Stein thinning` = colMeans(exp(th$points)),
            truth = theta0), digits = 3)

# plots
png_ksdt <- file.path(out, "ksdt.png")
grDevices::png(png_ksdt, width = 1400, height = 450, res = 110)
plot(kt)
invisible(grDevices::dev.off())

png_path <- file.path(out, "ksd-path.png")
path <- ksd_path(chain$x[seq(1L, n, by = 4L), ], chain$score[seq(1L, n, by = 4L), ],
                 kernel, nthreads = nt, standardize = FALSE)
grDevices::png(png_path, width = 900, height = 600, res = 110)
plot(path, main = "KSD path of the MALA chain (every 4th state)")
invisible(grDevices::dev.off())

png_pairs <- file.path(out, "goodwin-pairs.png")
grDevices::png(png_pairs, width = 1000, height = 1000, res = 110)
both <- rbind(chain$x, kt$points)
colnames(both) <- paste0("log ", names(theta0))
graphics::pairs(both, pch = c(rep(".", n), rep(19, m)),
                col = c(rep(grDevices::adjustcolor("grey40", 0.3), n),
                        rep("red", m)), cex = c(rep(1, n), rep(0.5, m)),
                main = "MALA chain (grey) and the KSDT dictionary (red)")
invisible(grDevices::dev.off())

png_fit <- file.path(out, "goodwin-fit.png")
grDevices::png(png_fit, width = 1100, height = 500, res = 110)
graphics::par(mfrow = c(1, 2))
tt <- seq(0, 80, by = 0.25)
for (s in 1:2) {
  graphics::plot(times, y[, s], pch = 19, cex = 0.6, xlab = "t",
                 ylab = sprintf("x%d", s), xlim = range(tt),
                 ylim = range(y[, s], goodwin_solve(theta0, tt)[, s]),
                 main = sprintf("species %d: data (t > 40) and 30 dictionary fits", s))
  for (i in seq(1L, m, length.out = min(30L, m))) {
    sol <- goodwin_solve(exp(kt$points[i, ]), tt)
    graphics::lines(tt, sol[, s], col = grDevices::adjustcolor("red", 0.3))
  }
}
invisible(grDevices::dev.off())
cat(sprintf("\nwrote %s, %s, %s and %s\n", png_ksdt, png_path, png_pairs,
            png_fit))
