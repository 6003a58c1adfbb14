# Power of kernel goodness-of-fit tests on the Gaussian-Bernoulli restricted
# Boltzmann machine (RBM), the benchmark of Liu, Lee and Jordan (2016,
# Sec. 6) and Jitkrittum, Xu, Szabo, Fukumizu and Gretton (2017, Sec. 5):
# rejection rate at level 0.05 against the standard deviation sigma_per of
# a Gaussian perturbation of the RBM's weight matrix. The live, short
# version is in vignette("kernbayes"), "Goodness-of-fit tests".
#
# Usage: Rscript inst/experiments/gof-rbm.R [mode] [outdir] [tests]
#   mode    "full" (default: 5 sets of chains x 20 replicates = 100 per
#           sigma_per) or "quick" (2 x 5 = 10 per sigma_per)
#   outdir  directory for the results (default "gof-rbm-output")
#   tests   "all" (default: every test below that the installed kernbayes
#           has) or a comma-separated list, e.g. "FSSD-opt,FSSD-rand"
# Every sample is drawn after its own set.seed(), so the samples do not
# depend on which tests run: a run with some tests replaces their rows in
# outdir/gof-rbm-runs.csv (from an earlier run of the same mode) and keeps
# the other tests' rows, and the summary covers all of them.
#
# Setting (as in the papers' code, kgof, ex2_prob_params.py, problem
# "gbrbm_dx50_dh40"): d = 50 visible and dh = 40 hidden units; B has
# independent entries +-1 with probability 1/2, b and c standard normal
# (drawn once, seed 2016); the model p is the RBM (B, b, c) and the sample,
# n = 1000 points, comes from the RBM (B + sigma_per E, b, c), E a d x dh
# matrix of standard normals drawn once with B (so sigma_per = 0 is the
# null, and the curve follows one perturbation direction; kgof draws a new
# model and perturbation for each sigma_per). kgof writes the joint density
# as exp(x'Bh / 2 + b'x + c'h - |x|^2 / 2): its RBM (B, b, c) is
# rbm_target(B / 2, b, c) here, and so is the perturbation. Grid: kgof's
# sigma_per = 0, 0.01, 0.02, 0.04 plus 0.005 and 0.015, where the power
# changes (kgof also has 0.06; at 0.04 every test here already rejects
# every time).
#
# Sampling: block Gibbs as in kgof, n = 1000 chains in parallel from
# N(0, I), 2000 burn-in sweeps; a sample is the chains' visible states, so
# its n points are independent. To afford 100 replicates, each set of
# chains gives 20 consecutive replicates, 20 sweeps apart (the chains are
# continued with target$gibbs()); the 5 sets per sigma_per are independent.
# Replicates of one set share the chains' slowly moving modes, so the
# table reports two Monte Carlo standard errors of a rejection rate: the
# binomial sqrt(p (1 - p) / R), and the standard deviation of the 5 sets'
# rates over sqrt(5) (honest under that dependence, but itself noisy).
#
# Tests (level 0.05, each on the whole sample of n = 1000 unless stated):
#   KSD-U      ksd_test(type = "U"), multinomial bootstrap (Liu et al.)
#   KSD-V      ksd_test(type = "V"), Rademacher wild bootstrap
#              (Chwialkowski et al. 2016)
#   both with the papers' kernel, Gaussian with the median heuristic
#   (gaussian_kernel()), 1000 bootstrap replicates;
#   FSSD-opt   fssd_test(locations = "opt"), J = 5 locations and the
#              bandwidth optimised on 20% of the sample (50 L-BFGS-B
#              iterations, regulariser 0.01, as kgof), tested on the rest
#   FSSD-rand  fssd_test(locations = "rand"), J = 5 random locations from
#              a normal fitted to the sample, median bandwidth
#   (the FSSD rows appear when the installed kernbayes has fssd_test()).
#
# Writes to outdir: gof-rbm-runs.csv (one row per sigma_per, set, replicate
# and test: p-value, rejection, seconds) and gof-rbm.csv (per sigma_per and
# test: replicates, rejection rate, its two standard errors, mean seconds
# per test), which is also copied to inst/extdata/ when the script is run
# from the package's source directory.
#
# Results (R 4.2.2, a two-core machine shared with other jobs, one thread;
# full mode: wall time 30 min 3 s, of which Gibbs sampling 631 s; 16.9 min
# of CPU time). Rejection rate at level 0.05 over 100 replicates, with
# the larger of the two Monte Carlo standard errors:
#   sigma_per  KSD-U        KSD-V        FSSD-opt     FSSD-rand
#   0          0.04 (0.02)  0.03 (0.02)  0.03 (0.02)  0.04 (0.02)
#   0.005      0.14 (0.04)  0.11 (0.03)  0.09 (0.03)  0.10 (0.03)
#   0.01       0.39 (0.06)  0.39 (0.06)  0.22 (0.04)  0.25 (0.04)
#   0.015      0.85 (0.04)  0.84 (0.04)  0.53 (0.05)  0.59 (0.05)
#   0.02       1.00 (0)     1.00 (0)     0.81 (0.04)  0.97 (0.02)
#   0.04       1.00 (0)     1.00 (0)     1.00 (0)     1.00 (0)
# Mean seconds per test (wall, under load): KSD-U 0.71, KSD-V 0.69,
# FSSD-opt 0.29, FSSD-rand 0.26. All four tests hold the level; the
# quadratic-time KSD tests are the most powerful (U and V alike), FSSD-rand
# comes next and FSSD-opt, which tests 800 of the 1000 points, last. The
# Gibbs chains are not fully mixed after 2000 sweeps (in a check on an RBM
# drawn the same way with another seed, the mean of |x|^2 over 1000 chains
# was 1463 after 2000 sweeps and 1471 after 4000), but no test detected it
# at sigma_per = 0.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(mode = "full", out = "gof-rbm-output", tests = "all")
if (!a$mode %in% c("full", "quick")) stop("mode must be \"full\" or \"quick\"")
out <- exp_start(a$out)
quick <- a$mode == "quick"
n_sets <- if (quick) 2L else 5L
per_set <- if (quick) 5L else 20L
gap <- 20L
burnin <- 2000L
n <- 1000L
d <- 50L
dh <- 40L
alpha <- 0.05
sigmas <- c(0, 0.005, 0.01, 0.015, 0.02, 0.04)
say <- exp_logger()

set.seed(2016)
B <- matrix(sample(c(-1, 1), d * dh, replace = TRUE), d, dh)
b <- stats::rnorm(d)
c0 <- stats::rnorm(dh)
E <- matrix(stats::rnorm(d * dh), d, dh)
p <- rbm_target(B / 2, b, c0, burnin = burnin)

# The tests: each a function of the sample returning its p-value; two more
# when fssd_test() is there.
tests <- list(
  "KSD-U" = function(x) {
    ksd_test(x, p, gaussian_kernel(), type = "U", n_boot = 1000,
             progress = FALSE, standardize = FALSE)$p.value
  },
  "KSD-V" = function(x) {
    ksd_test(x, p, gaussian_kernel(), type = "V", bootstrap = "wild",
             wild = "rademacher", n_boot = 1000, progress = FALSE, standardize = FALSE)$p.value
  })
if (exists("fssd_test", envir = asNamespace("kernbayes"))) {
  fssd <- get("fssd_test", envir = asNamespace("kernbayes"))
  tests[["FSSD-opt"]] <- function(x) {
    fssd(x, p, n_locations = 5, locations = "opt", train_frac = 0.2,
         max_iter = 50)$p.value
  }
  tests[["FSSD-rand"]] <- function(x) {
    fssd(x, p, n_locations = 5, locations = "rand")$p.value
  }
}

if (a$tests != "all") {
  want <- trimws(strsplit(a$tests, ",")[[1L]])
  if (!all(want %in% names(tests))) {
    stop("unknown or unavailable tests: ",
         paste(setdiff(want, names(tests)), collapse = ", "))
  }
  tests <- tests[want]
}

say(paste("RBM d = %d, dh = %d, n = %d, burn-in %d sweeps; %d sets x %d",
          "replicates (%d sweeps apart) per sigma_per; tests %s"),
    d, dh, n, burnin, n_sets, per_set, gap, paste(names(tests), collapse = ", "))
runs <- list()
t_gibbs <- 0
for (k in seq_along(sigmas)) {
  s <- sigmas[k]
  q <- rbm_target((B + s * E) / 2, b, c0, burnin = burnin)
  for (set in seq_len(n_sets)) {
    set.seed(100000L * k + 1000L * set)
    x <- exp_timed(sample_target(q, n))
    t_gibbs <- t_gibbs + exp_secs(x)
    for (r in seq_len(per_set)) {
      if (r > 1L) {
        set.seed(100000L * k + 1000L * set + r)
        x <- exp_timed(q$gibbs(x, gap))
        t_gibbs <- t_gibbs + exp_secs(x)
      }
      # the tests' random numbers (bootstrap, splits) from their own seed
      set.seed(100000L * k + 1000L * set + 500L + r)
      for (m in names(tests)) {
        pv <- exp_timed(tests[[m]](x))
        runs[[length(runs) + 1L]] <- data.frame(
          sigma_per = s, set = set, replicate = r, test = m,
          p_value = as.double(pv), reject = as.double(pv) <= alpha,
          seconds = exp_secs(pv))
      }
    }
    v <- do.call(rbind, runs)
    v <- v[v$sigma_per == s & v$set == set, ]
    say("sigma_per = %.3f, set %d: rejections %s", s, set,
        paste(sprintf("%s %d/%d", names(tests),
                      vapply(names(tests), function(m) sum(v$reject[v$test == m]), 1L),
                      per_set), collapse = ", "))
  }
}
runs <- do.call(rbind, runs)
runs$mode <- a$mode
old_file <- file.path(out, "gof-rbm-runs.csv")
if (file.exists(old_file)) {
  old <- utils::read.csv(old_file, stringsAsFactors = FALSE)
  old <- old[old$mode == a$mode & !old$test %in% names(tests), ]
  if (nrow(old)) {
    say("keeping the rows of %s from %s", paste(unique(old$test), collapse = ", "),
        old_file)
    runs <- rbind(old[names(runs)], runs)
  }
}
tests_all <- unique(runs$test)

key <- unique(runs[c("sigma_per", "test")])
summ <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  v <- runs[runs$sigma_per == key$sigma_per[i] & runs$test == key$test[i], ]
  rate <- mean(v$reject)
  set_rates <- tapply(v$reject, v$set, mean)
  data.frame(key[i, ], n = n, reps = nrow(v), sets = length(set_rates),
             rejection = rate,
             se_binom = signif(sqrt(rate * (1 - rate) / nrow(v)), 3),
             se_sets = signif(stats::sd(set_rates) / sqrt(length(set_rates)), 3),
             seconds = signif(mean(v$seconds), 3), row.names = NULL)
}))
summ <- summ[order(match(summ$test, c("KSD-U", "KSD-V", "FSSD-opt", "FSSD-rand")),
                   summ$sigma_per), ]
written <- exp_write(list("gof-rbm-runs.csv" = runs, "gof-rbm.csv" = summ),
                     out, extdata = "gof-rbm.csv")

cat("\nRejection rate at level 0.05 (MC standard error: max of binomial and",
    "between-set)\n")
tab <- sapply(tests_all, function(m) {
  v <- summ[summ$test == m, ]
  sprintf("%.2f (%.2f)", v$rejection, pmax(v$se_binom, v$se_sets))
})
dimnames(tab) <- list(paste("sigma_per =", sigmas), tests_all)
print(noquote(tab))
cat("\nMean seconds per test:",
    paste(sprintf("%s %.2f", tests_all,
                  vapply(tests_all, function(m) mean(runs$seconds[runs$test == m]), 1)),
          collapse = ", "), "\n")
say("Gibbs sampling %.0f s in all; done; wrote %s", t_gibbs,
    paste(written, collapse = ", "))
