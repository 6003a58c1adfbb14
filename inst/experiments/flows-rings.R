# The three-ring experiment of Chen et al. (2024), "(De)-regularized maximum
# mean discrepancy gradient flow": DrMMD flow against MMD flow.
#
# Usage: Rscript flows-rings.R [n_iter] [output-directory] [config-regex]
#   n_iter     iterations per run (default 30000; the paper runs 1e5)
#   output     directory for flows-rings.csv (default ".")
#   regex      run only the configurations whose label matches; their rows
#              replace those of the same configurations in an existing
#              output file (e.g. to extend two runs to 1e5 iterations)
#
# Target: 300 points equally spaced on three circles of radius 0.3 centred
# at (0, 0), (0, -0.75), (0, -1.5) (100 per circle, as in the authors'
# code). Start: 300 particles from N((0, -0.3), 0.01^2 I). Gaussian kernel
# exp(-|x - y|^2 / (2 s^2)) with the authors' s = 0.15, and with the
# package's median heuristic (s = 0.73 here). Plain gradient steps; for
# DrMMD the authors' learning rate lr is scaled by lambda, step_size = lr *
# lambda (see ?dmmd_flow). Every `every` iterations the particles are
# compared with the target:
#   w2_fresh   W2 (exact, wasserstein2) to fresh uniform samples of the
#              rings, 300 points each, averaged over 5 samples
#   w2_target  W2 to the 300 target points the flow sees (the paper's plot)
#   mmd2_fresh squared MMD (V-statistic, Gaussian kernel s = 0.15) to a
#              fresh sample of 3000 points
#   stray      number of particles farther than 0.15 from every target point
# Rows with flow "reference" give the floors: a fresh 300-point sample in
# place of the particles (w2_fresh, mmd2_fresh), and the target points
# themselves.
#
# Two more configurations, with ten times larger steps for the narrow kernel,
# run for at most 5000 iterations.
#
# Writes flows-rings.csv: one row per configuration and checkpoint.
# inst/extdata/flows-rings.csv came from `Rscript flows-rings.R` (13.5 min
# on a shared two-core machine) followed by `Rscript flows-rings.R 100000 .
# '^s=0.15 (MMD step=0.1|DrMMD lambda=0.001 lr=0.1)$'` (7 min).
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(n_iter = "30000", out = ".", only = "")
n_iter <- as.integer(a$n_iter)
out <- exp_start(a$out)
only <- a$only
every <- if (n_iter >= 20000L) 1000L else max(1L, n_iter %/% 20L)

rings_grid <- function(m) {
  th <- 2 * pi * (seq_len(m) - 1) / m
  circ <- cbind(0.3 * cos(th), 0.3 * sin(th))
  rbind(circ, sweep(circ, 2, c(0, 0.75)), sweep(circ, 2, c(0, 1.5)))
}
rings_sample <- function(n) {
  k <- sample(0:2, n, replace = TRUE)
  th <- runif(n, 0, 2 * pi)
  cbind(0.3 * cos(th), 0.3 * sin(th) - 0.75 * k)
}

set.seed(20240923)
y <- rings_grid(100)
x0 <- cbind(rnorm(300, 0, 0.01), rnorm(300, -0.3, 0.01))
fresh_w2 <- lapply(1:5, function(i) rings_sample(300))
fresh_mmd <- rings_sample(3000)
k_eval <- gaussian_kernel(bandwidth = 0.15)
kyy <- mean(vapply(split(seq_len(3000), rep(1:3, each = 1000)), function(i) {
  mean(kernel_matrix(fresh_mmd[i, ], fresh_mmd, k_eval))
}, 0))

metrics <- function(x) {
  near <- sqrt(apply(outer(x[, 1], y[, 1], "-")^2 +
                       outer(x[, 2], y[, 2], "-")^2, 1, min))
  c(w2_fresh = mean(vapply(fresh_w2, function(z) wasserstein2(x, z), 0)),
    w2_target = as.numeric(wasserstein2(x, y)),
    mmd2_fresh = mean(kernel_matrix(x, kernel = k_eval)) -
      2 * mean(kernel_matrix(x, fresh_mmd, k_eval)) + kyy,
    stray = sum(near > 0.15))
}

s_med <- median(dist(y))
cfgs <- list(
  list(label = "s=0.15 MMD step=0.1", flow = "MMD", s = 0.15, lambda = NA,
       step_size = 0.1, noise = 0),
  list(label = "s=0.15 MMD+noise0.05 step=0.1", flow = "MMD + noise", s = 0.15,
       lambda = NA, step_size = 0.1, noise = 0.05),
  list(label = "s=0.15 DrMMD lambda=0.001 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 1e-3, step_size = 1e-4, noise = 0),
  list(label = "s=0.15 DrMMD lambda=0.01 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 1e-2, step_size = 1e-3, noise = 0),
  list(label = "s=0.15 DrMMD lambda=0.1 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 0.1, step_size = 1e-2, noise = 0),
  list(label = "s=0.15 DrMMD lambda=1 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 1, step_size = 0.1, noise = 0),
  list(label = "s=median MMD step=1", flow = "MMD", s = s_med, lambda = NA,
       step_size = 1, noise = 0),
  list(label = "s=median DrMMD lambda=0.001 lr=1", flow = "DrMMD", s = s_med,
       lambda = 1e-3, step_size = 1e-3, noise = 0),
  # ten times larger steps with the narrow kernel: short runs, to show
  # what happens (the DrMMD one is the package's default step_size = lambda)
  list(label = "s=0.15 MMD step=1", flow = "MMD", s = 0.15, lambda = NA,
       step_size = 1, noise = 0, max_iter = 5000L),
  list(label = "s=0.15 DrMMD lambda=0.001 lr=1", flow = "DrMMD", s = 0.15,
       lambda = 1e-3, step_size = 1e-3, noise = 0, max_iter = 5000L))
if (nzchar(only)) cfgs <- Filter(function(cf) grepl(only, cf$label), cfgs)

row_of <- function(cf, iter, m, secs) {
  data.frame(config = cf$label, flow = cf$flow, bandwidth = signif(cf$s, 4),
             lambda = cf$lambda, step_size = cf$step, noise = cf$noise,
             iter = iter, w2_fresh = signif(m[["w2_fresh"]], 5),
             w2_target = signif(m[["w2_target"]], 5),
             mmd2_fresh = signif(m[["mmd2_fresh"]], 5), stray = m[["stray"]],
             seconds = round(secs, 1))
}

# the floors
set.seed(1)
ref <- rbind(row_of(list(label = "fresh sample", flow = "reference", s = NA,
                         lambda = NA, step_size = NA, noise = NA), 0,
                    metrics(rings_sample(300)), 0),
             row_of(list(label = "target points", flow = "reference", s = NA,
                         lambda = NA, step_size = NA, noise = NA), 0, metrics(y), 0))
print(ref[, c("config", "w2_fresh", "w2_target", "mmd2_fresh", "stray")],
      digits = 3)
res <- list(ref)
out_file <- file.path(out, "flows-rings.csv")
if (nzchar(only) && file.exists(out_file)) {
  old <- utils::read.csv(out_file)
  for (nm in setdiff(names(ref), names(old))) old[[nm]] <- NA
  old <- old[names(ref)]
  keep <- old$flow != "reference" &
    !old$config %in% vapply(cfgs, `[[`, "", "label")
  res <- c(res, split(old[keep, ], factor(old$config[keep],
                                          unique(old$config[keep]))))
}
t_all <- proc.time()[["elapsed"]]
for (cf in cfgs) {
  n_run <- min(n_iter, if (is.null(cf$max_iter)) n_iter else cf$max_iter)
  cat(sprintf("\n%s, %d iterations\n", cf$label, n_run))
  kern <- gaussian_kernel(bandwidth = cf$s)
  noise <- if (cf$noise > 0) local({
    b <- cf$noise
    function(t) b
  }) else 0
  x <- x0
  t0 <- proc.time()[["elapsed"]]
  rows <- list(row_of(cf, 0, metrics(x), 0))
  done <- 0L
  status <- "ok"
  # chunks of `every` iterations: these plain-step flows keep no state but
  # the particles, so the chunks continue the run exactly
  while (done < n_run) {
    k <- min(every, n_run - done)
    fit <- tryCatch(
      if (cf$flow == "DrMMD") {
        dmmd_flow(x, y, lambda = cf$lambda, kernel = kern, n_iter = k,
                  step_size = cf$step, progress = FALSE)
      } else {
        mmd_flow(x, y, kernel = kern, n_iter = k, step_size = cf$step,
                 noise = noise, progress = FALSE)
      }, error = function(e) e)
    if (inherits(fit, "error")) {
      status <- conditionMessage(fit)
      cat("  stopped:", status, "\n")
      break
    }
    x <- fit$x
    done <- done + k
    m <- metrics(x)
    secs <- proc.time()[["elapsed"]] - t0
    rows[[length(rows) + 1L]] <- row_of(cf, done, m, secs)
    if (done %% (5L * every) == 0L || done == n_run) {
      cat(sprintf(paste0("  iter %6d  W2 fresh %.4f  W2 target %.4f  ",
                         "MMD^2 %.2e  stray %3d  %s %.3g  (%.0f s)\n"),
                  done, m[["w2_fresh"]], m[["w2_target"]], m[["mmd2_fresh"]],
                  as.integer(m[["stray"]]), fit$objective_name,
                  fit$objective[length(fit$objective)], secs))
    }
  }
  res[[length(res) + 1L]] <- do.call(rbind, rows)
  exp_write(list("flows-rings.csv" = do.call(rbind, res)), out)
}
tab <- do.call(rbind, res)
last <- do.call(rbind, lapply(split(tab, tab$config), function(d) d[nrow(d), ]))
last <- last[order(last$w2_fresh), ]
cat("\nFinal W2 and MMD^2, best first:\n")
print(last[, c("config", "iter", "w2_fresh", "w2_target", "mmd2_fresh",
               "stray", "seconds")], row.names = FALSE, digits = 3)
cat(sprintf("\nTotal %.0f s. Wrote %s\n", proc.time()[["elapsed"]] - t_all,
            out_file))
