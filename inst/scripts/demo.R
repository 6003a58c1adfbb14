# kernbayes demo: the main job.
# Usage: Rscript demo.R [output-directory]
# A MALA chain on the posterior of the Goodwin oscillator (four ODE
# parameters, data simulated as in Chen et al. 2019) is compressed to the
# size of its online KSDT dictionary by several methods, and every set is
# judged by its KSD under one fixed kernel and by the errors of its
# posterior means and sds against a precise reference: 4 long MALA chains
# computed once by inst/experiments/goodwin-reference.R and shipped in
# inst/extdata/goodwin-reference.csv, with their ESS.  Prints a summary and
# writes plots to PNG files.
suppressPackageStartupMessages(library(kernbayes))
args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args)) args[[1L]] else "demo-output"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
nt <- 2L

# The compression methods, in the order they are reported; the first is
# the one the demo leads with (its result is printed and plotted).
methods <- c("kernel_thin", "ksdt", "stein_thin", "stein_kernel_thin",
             "spaced")

ref_file <- system.file("extdata", "goodwin-reference.csv", package = "kernbayes")
if (!nzchar(ref_file)) stop("goodwin-reference.csv is missing from the installed kernbayes")
ref <- utils::read.csv(ref_file)

# data: theta = (a1, a2, k1, alpha) = (1, 3, 2, 0.5), both species observed
# at t = 41..80 with noise sd 0.1; the target's coordinates are log theta
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
colnames(chain$x) <- ref$parameter
cat("\n")
print(chain)
cat(sprintf("(%.1f s, %.0f microseconds per iteration with an ODE solve)\n",
            t_mala[["elapsed"]], 1e6 * t_mala[["elapsed"]] / (n + 1000)))

# 2. One fixed kernel for every selection and every KSD below: IMQ with
# L = I / med^2, med the median distance between states of the chain ("med"
# would recompute the median on each set and make the KSDs incomparable).
# KSDT thins the chain online (one pass, square-root size rule); its size m
# is the size of every other set.
med <- stats::median(stats::dist(chain$x[seq(1L, n, length.out = 1000L), ]))
kernel <- imq_kernel(precon = med^2)
# Each compression result reports its effect on the moments against the
# sample it came from (compression_moments()), and warns when a coordinate
# moves beyond its threshold; the demo collects those warnings and reports
# them beside the reference below.
flagged <- list()
collect <- function(k, expr) {
  withCallingHandlers(expr, kb_warning_distortion = function(w) {
    flagged[[k]] <<- w$moments
    invokeRestart("muffleWarning")
  })
}
t_ksdt <- system.time(
  kt <- collect("ksdt", ksdt(chain$x, chain$score, kernel = kernel,
                             progress = FALSE, standardize = FALSE)))
m <- nrow(kt$points)

# 3. The other sets of m points. Kernel thinning forms the n x n Stein
# kernel matrix (3.2 GB for the whole chain), so it and Stein kernel
# thinning thin 8 m equally spaced states by 3 halvings.
every <- round(seq(n / m, n, length.out = m))
sub <- round(seq(n / (8 * m), n, length.out = 8L * m))
select <- list(
  kernel_thin = function() kernel_thin(
    chain$x[sub, ], chain$score[sub, ], m = m, kernel = kernel,
    standardize = FALSE, nthreads = nt),
  ksdt = function() kt,
  stein_thin = function() stein_thin(
    chain$x, chain$score, m, kernel = kernel, standardize = FALSE,
    nthreads = nt),
  stein_kernel_thin = function() stein_kernel_thin(
    chain$x[sub, ], chain$score[sub, ], m = m, kernel = kernel,
    standardize = FALSE, nthreads = nt),
  spaced = function() list(points = chain$x[every, ],
                           score = chain$score[every, ]))
label <- c(kernel_thin = "kernel_thin", ksdt = "ksdt (online)",
           stein_thin = "stein_thin", stein_kernel_thin = "stein_kernel_thin",
           spaced = sprintf("every %.0fth state", n / m))
stopifnot(all(methods %in% names(select)))
secs <- setNames(numeric(length(methods)), methods)
secs[["ksdt"]] <- t_ksdt[["elapsed"]]
res <- list()
for (k in methods) {
  if (k != "ksdt") {
    secs[[k]] <- system.time(
      res[[k]] <- collect(k, select[[k]]()))[["elapsed"]]
  }
  else res[[k]] <- kt
}
lead <- res[[methods[1L]]]
cat(sprintf("\nThe chain compressed to %d points (the KSDT dictionary's size) by %s():\n\n",
            m, methods[1L]))
print(lead)

# 4. The yardsticks. KSD under the one kernel (ksd(result) recomputes a
# result's KSD under the kernel it selected with, which is `kernel` here);
# errors of the posterior means in reference sds and the ratios of the
# posterior sds to the reference's, per coordinate.
ksd_of <- function(p, s) ksd(p, s, kernel, nthreads = nt, standardize = FALSE)
moments <- function(p) {
  e <- (colMeans(p) - ref$mean) / ref$sd
  c(rms = sqrt(mean(e^2)), max = max(abs(e)),
    setNames(apply(p, 2L, stats::sd) / ref$sd, ref$parameter))
}
t_raw <- system.time(k_raw <- ksd_of(chain$x, chain$score))
sets <- c(list(chain = chain$x), lapply(res, function(r) r$points))
ksds <- c(k_raw, vapply(methods, function(k) {
  r <- res[[k]]
  if (inherits(r, c("kb_thin", "kb_ksdt"))) ksd(r) else ksd_of(r$points, r$score)
}, 0))
mom <- t(vapply(sets, moments, numeric(2L + nrow(ref))))
sd_cols <- paste0("sd_", names(theta0))
tab <- data.frame(set = c(sprintf("chain (%d states)", n), label[methods]),
                  KSD = ksds, mean_rms = mom[, "rms"], mean_max = mom[, "max"],
                  setNames(as.data.frame(mom[, ref$parameter, drop = FALSE]),
                           sd_cols),
                  secs = c(t_mala[["elapsed"]], secs[methods]),
                  row.names = NULL)
tab[-1L] <- lapply(tab[-1L], round, digits = 3)

cat(sprintf(paste0(
  "\nReference: %d MALA chains of %s iterations each, computed once by\n",
  "inst/experiments/goodwin-reference.R: smallest bulk ESS %.0f, smallest tail\n",
  "ESS %.0f, largest R-hat %.4f; its own error of a mean is at most %.3f sd,\n",
  "so mean errors that differ by less than about %.2f sd are not told apart.\n"),
  ref$chains[1L], format(ref$iterations[1L], big.mark = ","),
  min(ref$ess_bulk), min(ref$ess_tail), max(ref$rhat), max(ref$mcse_mean_sd),
  2 * max(ref$mcse_mean_sd)))
if (requireNamespace("posterior", quietly = TRUE)) {
  ess_chain <- min(summary(chain)$table$ess_bulk)
  cat(sprintf(paste0(
    "The demo's chain has a smallest bulk ESS of %.0f: the standard error of its\n",
    "means is about %.2f sd. Equally spaced states inherit that error; a selection\n",
    "by the KSD uses the scores too and can correct part of it.\n"),
    ess_chain, 1 / sqrt(ess_chain)))
}
cat(sprintf(paste0(
  "\n%d points per set. KSD: under the one kernel (IMQ, L = I / %.3f^2) every set\n",
  "was selected with. mean_rms / mean_max: root mean square / largest error of\n",
  "the posterior means of log theta, in reference sds. sd_a1 ... sd_alpha: the\n",
  "posterior sd of each log parameter / the reference's (1 is right). secs: to\n",
  "select (the chain: to sample). kernel_thin and stein_kernel_thin thin %d\n",
  "equally spaced states by 3 halvings (the Stein kernel matrix of all %d\n",
  "would take %.1f GB).\n"), m, med, 8L * m, n, 8 * as.double(n)^2 / 1e9))
print(tab, row.names = FALSE)
cat(sprintf("(the raw chain's KSD took %.1f s: %.0f Stein kernel evaluations)\n",
            t_raw[["elapsed"]], as.double(n)^2))

# the moment reports' warnings, read against the reference
if (length(flagged)) {
  cat(paste0(
    "\nThe moment report of each result (compression_moments()) compares it with\n",
    "the sample it came from; these moved a coordinate beyond its threshold and\n",
    "warned (class kb_warning_distortion):\n"))
  for (k in names(flagged)) {
    r <- flagged[[k]]
    f <- which(r$flagged)
    cat(sprintf("  %-18s %s\n", label[[k]], paste(sprintf(
      "%s: mean %+.2f sd of the sample, sd ratio %.2f", r$variable[f],
      r$shift[f], r$sd_ratio[f]), collapse = "; ")))
  }
  err <- (colMeans(chain$x) - ref$mean) / ref$sd
  i <- which.max(abs(err))
  cat(sprintf(paste0(
    "Against the reference it is the chain that is off (its mean of %s by\n",
    "%+.2f reference sds; bulk ESS %.0f): the scores moved these sets towards\n",
    "the posterior (mean errors in the table above). The report measures a\n",
    "change, not an error: a precise reference, or a longer run, tells which.\n"),
    ref$parameter[i], err[i], if (exists("ess_chain")) ess_chain else NA))
}

cat("\nposterior means of theta (natural scale):\n")
nat <- rbind(reference = ref$mean_exp, `raw chain` = colMeans(exp(chain$x)),
             t(vapply(methods, function(k) colMeans(exp(res[[k]]$points)),
                      numeric(nrow(ref)))),
             truth = theta0)
rownames(nat)[seq_along(methods) + 2L] <- label[methods]
colnames(nat) <- names(theta0)
print(nat, digits = 3)

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
both <- rbind(chain$x, lead$points)
colnames(both) <- ref$parameter
graphics::pairs(both, pch = c(rep(46L, n), rep(19L, m)),
                col = c(rep(grDevices::adjustcolor("grey40", 0.3), n),
                        rep("red", m)), cex = c(rep(1, n), rep(0.5, m)),
                main = sprintf("MALA chain (grey) and %s (red)",
                               label[[methods[1L]]]))
invisible(grDevices::dev.off())

png_fit <- file.path(out, "goodwin-fit.png")
grDevices::png(png_fit, width = 1100, height = 500, res = 110)
graphics::par(mfrow = c(1, 2))
tt <- seq(0, 80, by = 0.25)
for (s in 1:2) {
  graphics::plot(times, y[, s], pch = 19, cex = 0.6, xlab = "t",
                 ylab = sprintf("x%d", s), xlim = range(tt),
                 ylim = range(y[, s], goodwin_solve(theta0, tt)[, s]),
                 main = sprintf("species %d: data (t > 40), 30 fits from %s()",
                                s, methods[1L]))
  for (i in round(seq(1L, m, length.out = min(30L, m)))) {
    sol <- goodwin_solve(exp(lead$points[i, ]), tt)
    graphics::lines(tt, sol[, s], col = grDevices::adjustcolor("red", 0.3))
  }
}
invisible(grDevices::dev.off())
cat(sprintf("\nwrote %s, %s, %s and %s\n", png_ksdt, png_path, png_pairs,
            png_fit))
