# The KSD test at large n (issue 35, item 3): level and power of the
# incomplete test of ksd_test() (test = "incomplete": an incomplete
# U-statistic over n_lags cyclic lags in [n/8, 3n/8], normal null with the
# variance from the integrated autocorrelation time of its row means) on
# the settings of gof-mcmc.R, beside the quadratic test (its default Markov
# wild bootstrap, n_boot = 200) at sizes where that runs in reasonable time.
#
# Usage: Rscript inst/experiments/gof-large.R [outdir]
# Environment:
#   GOF_LARGE_STAGES  comma-separated stages, by default all, in order:
#     inc2e4   incomplete, n = 2e4, every setting (GOF_LARGE_REPS, 100)
#     quad2e3  quadratic, n = 2000, n_boot = 200 (50)
#     inc1e5   incomplete, n = 1e5 (30)
#     quad5e3  quadratic, n = 5000, n_boot = 200 (30)
#     inc1e6   incomplete, n = 1e6, AR(1) 0.5, d = 2 (20)
#     more2e4  incomplete, n = 2e4, data sets 101-200
#   GOF_LARGE_SUMMARY_ONLY=1  only the summary of the rows in outdir
# Resumable: each data set's rows are appended to gof-large-runs.csv as it
# finishes; a rerun skips the (cell, replicate) pairs already there.
#
# Settings (as gof-mcmc.R): chains targeting N(0, I_d), d = 2 and 10:
# AR(1) with exact N(0, 1) margins at a = 0.5 and 0.9; RWM tuned to
# acceptance 0.4 and MALA to 0.6 (the package's adaptation, then a fixed
# step; tau_s, the IACT of a coordinate, from a pilot chain of 5000
# states); and 4 RWM chains of n / 4 (d = 2) labelled by `chain`. Each data
# set is one chain (or four), started at a draw from N(0, I_d). Hypotheses
# on the same chain: "null" (score -x) and "shift" (the first coordinate
# shifted by 3.5 sqrt(tau_s / 5000), 3.5 standard errors of the mean of a
# chain of 5000 states, the same alternative at every n; score of N(0, I)
# at the shifted points). Level 0.05. The incomplete test is computed
# through the package's internals (the same steps as ksd_test(), checked
# against it on the first data set) so that its row means g give two
# variance estimates: "geyer" (var(g) tau_g / n, tau_g by Geyer's initial
# positive sequence: the package's) and "bm" (batch means, batches of
# floor(sqrt(n)) rows). One thread, nice 5.
#
# inst/extdata/gof-large.csv (issue 35): four processes at once, one thread
# each, nice 5, on 2 shared cores at load 5-7 (stages inc2e4 + quad2e3 +
# part of quad5e3; inc1e5, stopped after 20 data sets per cell; inc1e6 with
# GOF_LARGE_REPS=10; quad5e3 with GOF_LARGE_REPS=20), 62 minutes wall; then
# 14 minutes more of inc1e5, data sets 21-100, for the four d = 2
# single-chain settings (two processes; the stage's sets and reps edited
# in a copy of this script); the runs files concatenated (duplicated seeds
# dropped) and summarised with GOF_LARGE_SUMMARY_ONLY=1.  Replication
# (session 17): stage inc1e5 with sets = 3:4 (RWM and MALA, d = 2, one
# chain) and reps = 101:300 in a copy, one process, stopped by a timeout
# after replicates 101-217: null rejection 8/117 = 0.068 in each cell
# (Geyer; batch means 0.068 and 0.060), null z sd 1.07 (MALA) and 0.95
# (RWM); with the first ~100: 17/213 = 0.080 and 17/217 = 0.078; those
# rows are not in inst/extdata/gof-large.csv.  Rejection rate at 0.05 (MC SE, data sets);
# incomplete with the package's Geyer variance; quadratic with n_boot = 200:
#   hyp   chain  set  d  ch  inc 2e4        inc 1e5       quad 2e3      quad 5e3
#   null  ar1   0.5   2  1   0.03 (.02,100) 0.04 (.02,97) 0.04 (.03,50) 0.05 (.05,20)
#   null  ar1   0.5  10  1   0.04 (.02,100) 0.05 (.05,20) 0.02 (.02,50) 0.05 (.05,20)
#   null  ar1   0.9   2  1   0.05 (.02,100) 0.05 (.02,100)0.04 (.03,50) 0.00 (.00,20)
#   null  ar1   0.9  10  1   0.08 (.03,100) 0.05 (.05,20) 0.06 (.03,50) 0.10 (.07,20)
#   null  mala  0.6   2  1   0.04 (.02,100) 0.09 (.03,96) 0.08 (.04,50) 0.05 (.05,20)
#   null  mala  0.6  10  1   0.02 (.01,100) 0.00 (.00,20) 0.04 (.03,50) 0.05 (.05,20)
#   null  rwm   0.4   2  1   0.05 (.02,100) 0.09 (.03,100)0.12 (.05,50) 0.10 (.07,20)
#   null  rwm   0.4   2  4   0.01 (.01,100) 0.10 (.07,20) 0.04 (.03,50) 0.05 (.05,20)
#   null  rwm   0.4  10  1   0.03 (.02,100) 0.10 (.07,20) 0.00 (.00,50) 0.10 (.07,20)
#   shift ar1   0.5   2  1   0.98 (.01,100) 1.00 (.00,20) 0.54 (.07,50) 0.80 (.09,20)
#   shift ar1   0.5  10  1   0.86 (.03,100) 1.00 (.00,20) 0.40 (.07,50) 0.75 (.10,20)
#   shift ar1   0.9   2  1   0.99 (.01,100) 1.00 (.00,20) 0.30 (.06,50) 0.85 (.08,20)
#   shift ar1   0.9  10  1   0.80 (.04,100) 1.00 (.00,20) 0.24 (.06,50) 0.60 (.11,20)
#   shift mala  0.6   2  1   0.91 (.03,100) 1.00 (.00,20) 0.42 (.07,50) 0.80 (.09,20)
#   shift mala  0.6  10  1   0.87 (.03,100) 1.00 (.00,20) 0.26 (.06,50) 0.60 (.11,20)
#   shift rwm   0.4   2  1   0.99 (.01,100) 1.00 (.00,20) 0.42 (.07,50) 0.85 (.08,20)
#   shift rwm   0.4   2  4   0.97 (.02,100) 1.00 (.00,20) 0.52 (.07,50) 0.85 (.08,20)
#   shift rwm   0.4  10  1   0.81 (.04,100) 1.00 (.00,20) 0.16 (.05,50) 0.80 (.09,20)
# Pooled over the null cells: incomplete 0.039 at n = 2e4 (900 chains; MC
# SE 0.006), 0.067 at 1e5 (493; 0.011: AR(1) at the level, 0.04-0.05 over
# 100 chains each at d = 2, but MALA and RWM at d = 2 0.09 over 96-100
# chains each, MC SE 0.03: a mild excess on MCMC chains at 1e5, open), 0/10
# at 1e6 (AR(1) 0.5, d = 2; power 10/10). Batch means: 0.046 at 2e4 (0.09
# at AR(1) 0.9, d = 10, against 0.08 for Geyer's), 0.069 at 1e5; Geyer's
# is the package's. Default lags: 6-315 at 2e4 (fewest on RWM at d = 10,
# IACT about 46), 47-1000 at 1e5.
suppressMessages(library(kernbayes))
args <- commandArgs(TRUE)
out <- if (length(args) >= 1L) args[1L] else "gof-large-output"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
runs_file <- file.path(out, "gof-large-runs.csv")
say <- function(...) cat(format(Sys.time(), "%H:%M:%S"), sprintf(...), "\n")

settings <- data.frame(
  sampler = c("ar1", "ar1", "rwm", "mala", "ar1", "ar1", "rwm", "mala",
              "rwm"),
  setting = c(0.5, 0.9, 0.4, 0.6, 0.5, 0.9, 0.4, 0.6, 0.4),
  d = c(2, 2, 2, 2, 10, 10, 10, 10, 2),
  chains = c(1, 1, 1, 1, 1, 1, 1, 1, 4), stringsAsFactors = FALSE)
reps <- as.integer(Sys.getenv("GOF_LARGE_REPS", "0"))
stages <- list(
  inc2e4 = list(test = "incomplete", n = 2e4, sets = 1:9, reps = 1:100),
  quad2e3 = list(test = "quadratic", n = 2000, sets = 1:9, reps = 1:50),
  inc1e5 = list(test = "incomplete", n = 1e5, sets = 1:9, reps = 1:30),
  quad5e3 = list(test = "quadratic", n = 5000, sets = 1:9, reps = 1:30),
  inc1e6 = list(test = "incomplete", n = 1e6, sets = 1, reps = 1:20),
  more2e4 = list(test = "incomplete", n = 2e4, sets = 1:9, reps = 101:200))
want <- strsplit(Sys.getenv("GOF_LARGE_STAGES", paste(names(stages),
                                                      collapse = ",")),
                 ",")[[1L]]

seed_of <- function(id, rep) {
  v <- utf8ToInt(id)
  as.integer((sum(v * seq_along(v)) * 7919 + rep) %% 2147483647)
}
set_id <- function(i) with(settings[i, ], sprintf("%s%s_d%d_c%d", sampler,
                                                   setting, d, chains))

steps_file <- file.path(out, "gof-large-steps.csv")
tune <- function(i) {
  s <- settings[i, ]
  set.seed(seed_of(paste0("tune_", set_id(i)), 0L))
  if (s$sampler == "ar1") {
    return(data.frame(step = NA, tau_s = (1 + s$setting) / (1 - s$setting)))
  }
  tg <- gaussian_target(rep(0, s$d))
  run <- if (s$sampler == "rwm") rwm else mala
  a <- run(tg, stats::rnorm(s$d), 2000L, step_size = NULL, warmup = 2000L,
           target_accept = s$setting, progress = FALSE)
  p <- run(tg, stats::rnorm(s$d), 5000L, step_size = a$step, progress = FALSE)
  data.frame(step = a$step, tau_s = mean(apply(p$x, 2L, kernbayes:::gof_iact)))
}
steps <- if (file.exists(steps_file)) utils::read.csv(steps_file) else {
  v <- do.call(rbind, lapply(seq_len(nrow(settings)), tune))
  utils::write.csv(v, steps_file, row.names = FALSE)
  v
}

ar1 <- function(n, d, a) {
  e <- matrix(stats::rnorm(n * d), n, d)
  e[-1L, ] <- e[-1L, ] * sqrt(1 - a^2)
  apply(e, 2L, function(v) stats::filter(v, a, method = "recursive"))
}
draw <- function(i, n) {
  s <- settings[i, ]
  m <- n %/% s$chains
  xs <- lapply(seq_len(s$chains), function(k) {
    if (s$sampler == "ar1") return(ar1(m, s$d, s$setting))
    run <- if (s$sampler == "rwm") rwm else mala
    run(gaussian_target(rep(0, s$d)), stats::rnorm(s$d), m,
        step_size = steps$step[i], progress = FALSE)$x
  })
  list(x = do.call(rbind, xs),
       chain = if (s$chains > 1L) rep(seq_len(s$chains), each = m))
}

# The incomplete test through the internals of ksd_test(): p-values with
# both variance estimates.
inc_test <- function(x, s, chain) {
  smp <- kernbayes:::as_sample(x, s, chain)
  st <- kernbayes:::stein_setup(smp$x, smp$score, imq_kernel(), TRUE,
                                rows = kernbayes:::heuristic_rows(smp))
  rows <- kernbayes:::chain_rows(smp)
  iact <- kernbayes:::gof_chain_iact(smp$x, st$score, rows)
  n <- nrow(x)
  kernbayes:::gof_check_lags(n, max(iact), NULL, "x")
  J <- min(kernbayes:::GOF_LAG_MAX, n %/% 8L,
           max(1L, floor(n / (kernbayes:::GOF_LAG_DIV * max(iact)))))
  g <- kernbayes:::gof_lag_means(st, kernbayes:::gof_lags(n, J), 1L)
  S <- mean(g)
  tau_g <- kernbayes:::gof_iact(g)
  b <- floor(sqrt(n))
  bm <- colMeans(matrix(g[seq_len(b * (n %/% b))], b))
  c(p_geyer = stats::pnorm(S / sqrt(stats::var(g) * tau_g / n),
                           lower.tail = FALSE),
    p_bm = stats::pnorm(S / sqrt(stats::var(bm) / length(bm)),
                        lower.tail = FALSE),
    J = J, tau_g = tau_g, iact = max(iact))
}

one_set <- function(stage, sg, i, rep) {
  set.seed(seed_of(paste(set_id(i), sg$n), rep))
  t0 <- proc.time()[["elapsed"]]
  ch <- draw(i, sg$n)
  tgen <- proc.time()[["elapsed"]] - t0
  delta <- 3.5 * sqrt(steps$tau_s[i] / 5000)
  rows <- lapply(c("null", "shift"), function(hyp) {
    x <- ch$x
    if (hyp == "shift") x[, 1L] <- x[, 1L] + delta
    t1 <- proc.time()[["elapsed"]]
    v <- tryCatch(if (sg$test == "incomplete") inc_test(x, -x, ch$chain) else {
      r <- ksd_test(x, -x, n_boot = 200, test = "quadratic", nthreads = 1,
                    chain = ch$chain, progress = FALSE)
      c(p_geyer = r$p.value, p_bm = NA, J = NA, tau_g = NA, iact = max(r$iact))
    }, error = function(e) {
      say("error %s %s rep %d: %s", set_id(i), hyp, rep, conditionMessage(e))
      c(p_geyer = NA, p_bm = NA, J = NA, tau_g = NA, iact = NA)
    })
    if (stage == want[1L] && rep == sg$reps[1L] && i == sg$sets[1L] &&
        sg$test == "incomplete" && hyp == "null") {
      r <- ksd_test(x, -x, test = "incomplete", nthreads = 1,
                    chain = ch$chain)
      stopifnot(isTRUE(all.equal(r$p.value, unname(v["p_geyer"]))))
    }
    data.frame(stage = stage, set = set_id(i), sampler = settings$sampler[i],
               setting = settings$setting[i], d = settings$d[i],
               chains = settings$chains[i], n = sg$n, test = sg$test,
               hyp = hyp, rep = rep, t(v),
               secs = proc.time()[["elapsed"]] - t1, secs_gen = tgen)
  })
  do.call(rbind, rows)
}

if (!nzchar(Sys.getenv("GOF_LARGE_SUMMARY_ONLY"))) {
  done <- if (file.exists(runs_file)) utils::read.csv(runs_file)
  for (stage in want) {
    sg <- stages[[stage]]
    rr <- if (reps > 0L) utils::head(sg$reps, reps) else sg$reps
    say("stage %s: n = %g, %d sets x %d data sets", stage, sg$n,
        length(sg$sets), length(rr))
    for (rep in rr) for (i in sg$sets) {
      if (!is.null(done) && any(done$set == set_id(i) & done$n == sg$n &
                                done$test == sg$test & done$rep == rep)) next
      v <- one_set(stage, sg, i, rep)
      utils::write.table(v, runs_file, sep = ",", row.names = FALSE,
                         col.names = !file.exists(runs_file),
                         append = file.exists(runs_file))
    }
  }
}

# Summary: rejection rate at 0.05 per cell, test and variance estimate,
# with its Monte Carlo standard error.
runs <- utils::read.csv(runs_file)
long <- rbind(
  transform(runs, var_est = ifelse(test == "incomplete", "geyer", "boot"),
            p = p_geyer),
  if (any(runs$test == "incomplete")) {
    transform(runs[runs$test == "incomplete", ], var_est = "bm", p = p_bm)
  })
long <- long[!is.na(long$p), ]
key <- c("sampler", "setting", "d", "chains", "n", "test", "var_est", "hyp")
tab <- do.call(rbind, lapply(split(long, long[key], drop = TRUE), function(v) {
  r <- mean(v$p <= 0.05)
  cbind(v[1L, key], reject = r, mc_se = sqrt(r * (1 - r) / nrow(v)),
        reps = nrow(v), J = stats::median(v$J), iact = stats::median(v$iact),
        tau_g = stats::median(v$tau_g), secs = mean(v$secs))
}))
tab <- tab[do.call(order, tab[c("hyp", "sampler", "setting", "d", "chains",
                                "test", "n", "var_est")]), ]
rownames(tab) <- NULL
utils::write.csv(tab, file.path(out, "gof-large.csv"), row.names = FALSE)
if (file.exists("DESCRIPTION") && dir.exists("inst/extdata")) {
  file.copy(file.path(out, "gof-large.csv"), "inst/extdata/gof-large.csv",
            overwrite = TRUE)
}
print(tab, digits = 3)
