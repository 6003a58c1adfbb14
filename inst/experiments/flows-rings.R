# The three-ring experiment of Chen et al. (2024), "(De)-regularized maximum
# mean discrepancy gradient flow": DrMMD flow against MMD flow.
#
# Usage: Rscript flows-rings.R [n_iter] [output-directory] [config-regex]
#                              [snapshots]
#   n_iter     iterations per run (default 30000; the paper runs 1e5)
#   output     directory for flows-rings.csv.gz (default ".")
#   regex      run only the configurations whose label matches; their rows
#              replace those of the same configurations in an existing
#              output file (e.g. to extend two runs to 1e5 iterations)
#   snapshots  comma-separated iterations (e.g. "0,100,1000,10000,30000"):
#              also write flows-rings-snapshots.csv.gz (gzip), the particles of every
#              long configuration run (not the 5000-iteration ones) at
#              those iterations (columns config, iter, x1, x2, to 0.001);
#              rows of configurations not run are kept from an existing
#              file, as for flows-rings.csv.gz
#
# Target: 300 points equally spaced on three circles of radius 0.3 centred
# at (0, 0), (0, -0.75), (0, -1.5) (100 per circle, as in the authors'
# code). Start: 300 particles from N((0, -0.3), 0.01^2 I). Gaussian kernel
# exp(-|x - y|^2 / (2 s^2)) with the authors' s = 0.15, and with the
# package's median heuristic (s = 0.73 here). Plain gradient steps; for
# DrMMD the authors' learning rate lr is scaled by lambda up to lambda = 1,
# step_size = lr * min(lambda, 1), as their run.py does for this data set
# (`args.step_size *= min(args.lmbda, 1.0)`; see ?dmmd_flow). So lambda =
# 1e-5 and 1e-4 take the steps 1e-6 and 1e-5 (the update grows like
# 1/lambda for small lambda, so the step must shrink with it), and lambda =
# 100 takes step 0.1: its update, 2 (1 + lambda) / lambda times the MMD
# witness gradient, is then about twice the MMD flow's at step 0.1, where
# lr * lambda = 10 would be 200 times it (a probe: W2 to the target points
# 11.8 after 1000 iterations, particles thrown up to 25 units away). Every
# `every` iterations the particles are
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
# Three more configurations run for at most 5000 iterations: ten times
# larger steps for the narrow kernel, and lambda = 1e-5 with the step of
# lambda = 1e-3 (lr = 10).
#
# Writes flows-rings.csv.gz (gzip-compressed; read.csv() reads it, and a
# run with a regex reads the existing file, replaces its configurations'
# rows and rewrites it): one row per configuration and checkpoint.
# inst/extdata/flows-rings.csv.gz came from `Rscript flows-rings.R` (13.5 min
# on a shared two-core machine) followed by `Rscript flows-rings.R 100000 .
# '^s=0.15 (MMD step=0.1|DrMMD lambda=0.001 lr=0.1)$'` (7 min). The lambda
# extremes came from `Rscript flows-rings.R 30000 inst/extdata '^s=0.15
# DrMMD lambda=(1e-05|1e-04|100) lr=0.1$' 0,100,1000,10000,30000` (3.6 min),
# then the particle snapshots of the MMD flow and of DrMMD with lambda =
# 1e-3 from the same call with regex '^s=0.15 (MMD step=0.1|DrMMD
# lambda=0.001 lr=0.1)$' and output /tmp/rings-snap, so as not to replace
# their 1e5-iteration rows (1.8 min; its rows equal those rows up to 30000
# iterations), its snapshots appended to the file in inst/extdata; last
# `Rscript flows-rings.R 100000 inst/extdata '^s=0.15 DrMMD
# lambda=(1e-05|1e-04) lr=(0.1|10)$' 0,100,1000,10000,30000,100000` (12.2
# min, the machine busier). All single-threaded.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(n_iter = "30000", out = ".", only = "", snapshots = "")
n_iter <- as.integer(a$n_iter)
out <- exp_start(a$out)
only <- a$only
snaps <- if (nzchar(a$snapshots)) {
  sort(unique(as.integer(strsplit(a$snapshots, ",")[[1L]])))
} else integer()
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
  # the extremes of the authors' sweep (step lr * min(lambda, 1))
  list(label = "s=0.15 DrMMD lambda=1e-05 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 1e-5, step_size = 1e-6, noise = 0),
  list(label = "s=0.15 DrMMD lambda=1e-04 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 1e-4, step_size = 1e-5, noise = 0),
  list(label = "s=0.15 DrMMD lambda=100 lr=0.1", flow = "DrMMD", s = 0.15,
       lambda = 100, step_size = 0.1, noise = 0),
  list(label = "s=median MMD step=1", flow = "MMD", s = s_med, lambda = NA,
       step_size = 1, noise = 0),
  list(label = "s=median DrMMD lambda=0.001 lr=1", flow = "DrMMD", s = s_med,
       lambda = 1e-3, step_size = 1e-3, noise = 0),
  # ten times larger steps with the narrow kernel: short runs, to show
  # what happens (the DrMMD one is the package's default step_size = lambda)
  list(label = "s=0.15 MMD step=1", flow = "MMD", s = 0.15, lambda = NA,
       step_size = 1, noise = 0, max_iter = 5000L),
  list(label = "s=0.15 DrMMD lambda=0.001 lr=1", flow = "DrMMD", s = 0.15,
       lambda = 1e-3, step_size = 1e-3, noise = 0, max_iter = 5000L),
  # is lambda = 1e-5 slow only for its step? the step of lambda = 1e-3
  list(label = "s=0.15 DrMMD lambda=1e-05 lr=10", flow = "DrMMD", s = 0.15,
       lambda = 1e-5, step_size = 1e-4, noise = 0, max_iter = 5000L))
if (nzchar(only)) cfgs <- Filter(function(cf) grepl(only, cf$label), cfgs)

row_of <- function(cf, iter, m, secs) {
  data.frame(config = cf$label, flow = cf$flow, bandwidth = signif(cf$s, 4),
             lambda = cf$lambda, step = cf$step_size, noise = cf$noise,
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
out_file <- file.path(out, "flows-rings.csv.gz")
if (nzchar(only) && file.exists(out_file)) {
  old <- utils::read.csv(out_file)
  for (nm in setdiff(names(ref), names(old))) old[[nm]] <- NA
  old <- old[names(ref)]
  keep <- old$flow != "reference" &
    !old$config %in% vapply(cfgs, `[[`, "", "label")
  res <- c(res, split(old[keep, ], factor(old$config[keep],
                                          unique(old$config[keep]))))
}
snap_file <- file.path(out, "flows-rings-snapshots.csv.gz")
snap_res <- list()
if (length(snaps) && nzchar(only) && file.exists(snap_file)) {
  old <- utils::read.csv(snap_file)
  snap_res <- list(old[!old$config %in% vapply(cfgs, `[[`, "", "label"), ])
}
snap_rows <- function(cf, iter, x) {  # 0.001: far below a plotted pixel
  data.frame(config = cf$label, iter = iter, x1 = round(x[, 1], 3),
             x2 = round(x[, 2], 3))
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
  # snapshots of the long runs only
  snap_at <- if (is.null(cf$max_iter)) snaps else integer()
  snap_cf <- if (0L %in% snap_at) list(snap_rows(cf, 0L, x)) else list()
  done <- 0L
  status <- "ok"
  # chunks of `every` iterations, cut at the snapshot iterations: these
  # plain-step flows keep no state but the particles, so the chunks continue
  # the run exactly
  while (done < n_run) {
    nxt <- c(snap_at[snap_at > done], (done %/% every + 1L) * every, n_run)
    k <- min(nxt) - done
    fit <- tryCatch(
      if (cf$flow == "DrMMD") {
        dmmd_flow(x, y, lambda = cf$lambda, kernel = kern, n_iter = k,
                  step_size = cf$step_size, progress = FALSE, tol = 0)
      } else {
        mmd_flow(x, y, kernel = kern, n_iter = k, step_size = cf$step_size,
                 noise = noise, progress = FALSE, tol = 0)
      }, error = function(e) e)
    if (inherits(fit, "error")) {
      status <- conditionMessage(fit)
      cat("  stopped:", status, "\n")
      break
    }
    x <- fit$x
    done <- done + k
    if (done %in% snap_at) {
      snap_cf[[length(snap_cf) + 1L]] <- snap_rows(cf, done, x)
    }
    if (done %% every != 0L && done != n_run) next
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
  exp_write(list("flows-rings.csv.gz" = do.call(rbind, res)), out)
  if (length(snap_cf)) {
    snap_res[[length(snap_res) + 1L]] <- do.call(rbind, snap_cf)
    exp_write(list("flows-rings-snapshots.csv.gz" = do.call(rbind, snap_res)), out)
  }
}
tab <- do.call(rbind, res)
last <- do.call(rbind, lapply(split(tab, tab$config), function(d) d[nrow(d), ]))
last <- last[order(last$w2_fresh), ]
cat("\nFinal W2 and MMD^2, best first:\n")
print(last[, c("config", "iter", "w2_fresh", "w2_target", "mmd2_fresh",
               "stray", "seconds")], row.names = FALSE, digits = 3)
cat(sprintf("\nTotal %.0f s. Wrote %s\n", proc.time()[["elapsed"]] - t_all,
            out_file))
