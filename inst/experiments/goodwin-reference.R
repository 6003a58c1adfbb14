# The reference posterior moments of the demo (inst/scripts/demo.R, `make
# demo`): the Goodwin oscillator with the demo's data, sampled by long MALA
# runs, computed once and shipped as inst/extdata/goodwin-reference.csv, so
# that the demo judges its point sets against moments whose own Monte Carlo
# error is small against the errors it reports (issue 31, item 6).  The
# demo's earlier yardstick, one MALA run of 30,000 iterations, had a
# smallest bulk ESS of 29: an error of about 0.18 posterior sd in its own
# means, as large as the differences it was meant to judge.
#
# Usage: Rscript inst/experiments/goodwin-reference.R [outdir] [size]
#   outdir  directory for the results (default "goodwin-reference-output")
#   size    "full" (default) or "quick" (4 chains of 4 x 12,500 iterations,
#           for testing; a quick run does not copy to inst/extdata)
#
# Setting: the demo's data (theta = (a1, a2, k1, alpha) = (1, 3, 2, 0.5),
# both species at t = 41..80, noise sd 0.1, simulated after
# set.seed(20261129); goodwin_target(y, times, sd = 0.1)), whose
# coordinates are log a1, log a2, log k1, log alpha. A pilot MALA run
# (set.seed(1), from the prior mean as the demo starts, step adapted over
# 1000 discarded warm-up iterations, 5000 kept) gives 4 starting points,
# its states 1250, 2500, 3750 and 5000. From each, an independent MALA
# chain (its own seed, 100 + chain, and its own RNG stream) adapts its step
# as mala() does (Robbins-Monro towards acceptance 0.574) over 2000
# discarded warm-up iterations, then runs with that step fixed in segments
# of n_seg iterations, each continuing from the last state. The chains
# advance segment by segment together so that the convergence diagnostics
# can be recorded as they grow: after each segment, the smallest bulk and
# tail ESS and the largest R-hat over the 4 coordinates
# (posterior::ess_bulk, ess_tail, rhat on the chains x iterations array).
# Only the states are kept (4 doubles per iteration).
#
# Writes to outdir: goodwin-reference.csv, one row per coordinate:
# parameter ("log(a1)", ...), mean, sd, mcse_mean and mcse_sd
# (posterior::mcse_mean, mcse_sd), mcse_mean_sd (mcse_mean / sd: the
# reference's own error of a mean in posterior sds), ess_bulk, ess_tail,
# rhat, q05 and q95, mean_exp and mcse_mean_exp (the mean of theta itself,
# natural scale), and the run's settings repeated on every row: chains,
# iterations (per chain, warm-up excluded), warmup, step (the chains' steps
# after adaptation, separated by spaces), accept_rate (pooled), seconds
# (of sampling, the pilot included);
# copied to inst/extdata/ by a full run from the package's source
# directory. goodwin-reference-trace.csv: the diagnostics after each
# segment (iterations per chain, smallest ess_bulk and ess_tail, largest
# rhat, largest mcse_mean in posterior sds).
#
# Results (R 4.2.2, one thread, nice -n 5 on a shared two-core machine at
# load 3-4): full run 1362 s (sampling 1205 s, about 0.3 ms per iteration
# with an ODE solve; the final summaries 150 s). Steps 0.0667-0.0706,
# acceptance 0.551. MALA mixes slowly here (log k1 and log alpha lie on a
# thin ridge, correlation near 1): about 250 iterations per effective draw.
# Smallest bulk ESS / tail ESS / largest R-hat / largest MCSE of a mean in
# posterior sds, by iterations per chain:
#     250,000:  989 / 2091 / 1.0048 / 0.032
#     500,000: 1993 / 3366 / 1.0022 / 0.022
#     750,000: 3126 / 5641 / 1.0013 / 0.018
#   1,000,000: 4091 / 7421 / 1.0009 / 0.016
# so 4 x 250,000 iterations reach ESS 1000 (MCSE 0.03 sd) and the shipped
# 4 x 1,000,000 have MCSE 0.016 sd. Posterior means (sd) of log a1, log a2,
# log k1, log alpha: 0.294 (0.589), 0.633 (0.660), 1.158 (0.495), -0.181
# (0.494); of theta: 1.60, 2.33, 3.60, 0.942 (truth 1, 3, 2, 0.5).

local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(out = "goodwin-reference-output", size = "full")
out <- exp_start(a$out)
full <- match.arg(a$size, c("full", "quick")) == "full"
say <- exp_logger()
if (!requireNamespace("posterior", quietly = TRUE)) {
  stop("the posterior package is needed for the ESS and R-hat")
}

n_chains <- 4L
n_seg <- if (full) 250000L else 12500L  # iterations per chain per segment
n_segs <- 4L
n_warm <- 2000L
pars <- sprintf("log(%s)", c("a1", "a2", "k1", "alpha"))

# the demo's data, exactly as inst/scripts/demo.R makes them
theta0 <- c(a1 = 1, a2 = 3, k1 = 2, alpha = 0.5)
times <- 41:80
set.seed(20261129)
y <- goodwin_simulate(theta0, times, sd = 0.1)
target <- goodwin_target(y, times, sd = 0.1)

t_start <- proc.time()[["elapsed"]]
set.seed(1)
pilot <- mala(target, x0 = rep(digamma(2), 4), n_iter = 5000L,
              progress = FALSE)
starts <- pilot$x[c(1250L, 2500L, 3750L, 5000L), , drop = FALSE]
say("pilot: step %.4f, acceptance %.3f", pilot$step, pilot$accept_rate)

# each chain keeps its own RNG stream between segments
seeds <- lapply(seq_len(n_chains), function(i) {
  set.seed(100L + i)
  get(".Random.seed", envir = globalenv())
})
draws <- array(NA_real_, c(n_seg * n_segs, n_chains, 4L),
               dimnames = list(NULL, NULL, pars))
last <- starts
steps <- rep(NA_real_, n_chains)
accepted <- 0
trace <- list()
for (s in seq_len(n_segs)) {
  rows <- (s - 1L) * n_seg + seq_len(n_seg)
  for (i in seq_len(n_chains)) {
    assign(".Random.seed", seeds[[i]], envir = globalenv())
    ch <- if (s == 1L) {
      mala(target, x0 = last[i, ], n_iter = n_seg, warmup = n_warm,
           progress = FALSE)
    } else {
      mala(target, x0 = last[i, ], n_iter = n_seg, step_size = steps[i],
           progress = FALSE)
    }
    seeds[[i]] <- get(".Random.seed", envir = globalenv())
    if (s == 1L) steps[i] <- ch$step
    draws[rows, i, ] <- ch$x
    last[i, ] <- ch$x[n_seg, ]
    accepted <- accepted + ch$accept_rate * n_seg
  }
  n_now <- s * n_seg
  x <- draws[seq_len(n_now), , , drop = FALSE]
  diag <- vapply(seq_len(4L), function(j) {
    xj <- x[, , j]
    c(ess_bulk = posterior::ess_bulk(xj), ess_tail = posterior::ess_tail(xj),
      rhat = posterior::rhat(xj),
      mcse_sd = posterior::mcse_mean(xj) / stats::sd(as.vector(xj)))
  }, c(ess_bulk = 0, ess_tail = 0, rhat = 0, mcse_sd = 0))
  trace[[s]] <- data.frame(
    iterations = n_now, ess_bulk_min = min(diag["ess_bulk", ]),
    ess_tail_min = min(diag["ess_tail", ]), rhat_max = max(diag["rhat", ]),
    mcse_mean_sd_max = max(diag["mcse_sd", ]),
    seconds = proc.time()[["elapsed"]] - t_start)
  say("%d iterations per chain: bulk ESS >= %.0f, tail ESS >= %.0f, R-hat <= %.4f, MCSE <= %.3f sd",
      n_now, trace[[s]]$ess_bulk_min, trace[[s]]$ess_tail_min,
      trace[[s]]$rhat_max, trace[[s]]$mcse_mean_sd_max)
}
seconds <- proc.time()[["elapsed"]] - t_start
n_iter <- n_seg * n_segs

summ <- do.call(rbind, lapply(seq_len(4L), function(j) {
  xj <- draws[, , j]
  ej <- exp(xj)
  sdj <- stats::sd(as.vector(xj))
  q <- stats::quantile(xj, c(0.05, 0.95), names = FALSE)
  data.frame(parameter = pars[j], mean = mean(xj), sd = sdj,
             mcse_mean = posterior::mcse_mean(xj),
             mcse_sd = posterior::mcse_sd(xj),
             mcse_mean_sd = posterior::mcse_mean(xj) / sdj,
             ess_bulk = posterior::ess_bulk(xj),
             ess_tail = posterior::ess_tail(xj),
             rhat = posterior::rhat(xj), q05 = q[1L], q95 = q[2L],
             mean_exp = mean(ej), mcse_mean_exp = posterior::mcse_mean(ej))
}))
summ <- cbind(
  summ, chains = n_chains, iterations = n_iter, warmup = n_warm,
  step = paste(format(steps, digits = 4), collapse = " "),
  accept_rate = round(accepted / (n_chains * n_iter), 4),
  seconds = round(seconds))
num <- vapply(summ, is.double, TRUE) &
  !names(summ) %in% c("chains", "iterations", "warmup", "seconds")
summ[num] <- lapply(summ[num], signif, digits = 6)
trace <- do.call(rbind, trace)
print(summ, row.names = FALSE)
print(trace, row.names = FALSE)
files <- exp_write(list("goodwin-reference.csv" = summ,
                        "goodwin-reference-trace.csv" = trace), out,
                   extdata = if (full) "goodwin-reference.csv" else character())
say("%.0f s; wrote %s", seconds, paste(files, collapse = ", "))
