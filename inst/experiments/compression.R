# Distribution compression (issue 17): kernel thinning (KT), Compress++ and
# Stein kernel thinning against uniform subsampling, standard thinning and
# greedy Stein thinning, on i.i.d. draws (the rate study) and on a biased
# chain with its burn-in (the Goodwin study).
#
# Usage: Rscript inst/experiments/compression.R [outdir] [size]
#   outdir  directory for the results (default "compression-output")
#   size    "full" (default) or "quick" (smaller n and fewer seeds; a quick
#           run does not copy its summaries to inst/extdata)
#
# (a) Rates. i.i.d. N(0, I_2), n = 2^8, 2^10, ..., 2^16 (quick: to 2^12),
#   m = sqrt(n) points, 10 seeds (quick: 3). Methods: "uniform" (m rows
#   drawn without replacement), "standard" (every sqrt(n)-th row), "stein"
#   (stein_thin), "kt" (kernel_thin with the score: KT on the Stein kernel,
#   only n <= 2^14, it forms the n x n matrix), "cpp1" and "cpp2"
#   (kernel_thin(method = "compress++") with the score, oversample 1 and 2),
#   "cpp1_gauss" (Compress++ without a score: Gaussian kernel, bandwidth 1,
#   MMD to the sample). Every Stein method uses the measuring kernel
#   itself: IMQ (c = 1, beta = -1/2), L = I.
#   Yardsticks: KSD under that kernel; the MMD to N(0, I_2) itself under
#   the Gaussian kernel k(x, y) = exp(-|x - y|^2 / 2), in closed form: for
#   P = N(0, I_d) and bandwidth l, E k(x, X) = (l^2 / (l^2 + 1))^(d/2)
#   exp(-|x|^2 / (2 (l^2 + 1))) and E k(X, X') = (l^2 / (l^2 + 2))^(d/2),
#   so with l = 1, d = 2: MMD^2 = mean_ij k(x_i, x_j) - mean_i exp(-|x_i|^2
#   / 4) + 1/3; W2 (exact, wasserstein2) to m fresh exact draws (its floor
#   is the W2 between two exact samples of size m, row "exact"); the
#   moment errors |mean| and ||mean(x x') - I||_F; seconds per call. Slopes:
#   least squares of log(median KSD) and log(median MMD) on log(n).
#   Theory: KT and Compress++ O(n^-1/2) up to log factors for m = sqrt(n);
#   a uniform (or, on i.i.d. draws, standard) subsample of sqrt(n) points
#   n^-1/4.
#
# (b) Goodwin. The posterior of the Goodwin oscillator (data as in
#   ksdt-goodwin.R: theta = (1, 3, 2, 0.5), times 41:80, sd 0.1, set.seed(1))
#   sampled by RWM with the step ksdt-goodwin.R's adaptation found (0.1228),
#   started at log(theta) + (2, -2, 2, -2), far in the tail (log density
#   about -8e5 there against about 70 at the mode), and *no* warm-up
#   discarded: about 100 burn-in states with huge scores stay in the
#   sample. n = 2^13 states per chain (quick 2^12), 5 chains (quick 3),
#   m = 32, 64, 128 (Compress++ needs m <= 2^floor(log2(n)/2), 64 here, so
#   its m = 128 rows are missing). n = 2^14 was the plan; there one
#   stein_kernel_thin(debias = "simplex") took 56 s (KT) and 33 s
#   (Compress++), mostly the simplex weights, too slow for 3 m x 5 chains.
#   Methods: "uniform", "standard", "stein", "kt", "cpp" (oversample 1),
#   "skt" and "skt_cpp" (stein_kernel_thin, debias = "simplex", method "kt"
#   and "compress++"), all with one fixed kernel, the one of
#   ksdt-goodwin.R: IMQ, L = I / med^2, med = 1.47692.
#   Yardsticks: KSD under that kernel; against a reference of 4 MALA chains
#   from log(theta), each 5e4 states after 1000 adaptive warm-up steps
#   (quick 1.25e4), pooled (the posterior mixes slowly: half-chain means of
#   one 5e4 chain differ by up to half a posterior sd, so the reference
#   also records the standard error of its mean from the 4 chain means):
#   the mean error |(mean - mean_ref) / sd_ref| and the sd error
#   |sd / sd_ref - 1| (Euclidean norms over the 4 coordinates), and W2
#   between the selection and m equally spaced states of the reference run
#   (coordinates divided by sd_ref); seconds per call. Rows "chain" (all n
#   states, burn-in included) and "chain_burned" (states 1001 to n) are the
#   whole chain, not m points: the floor of the mean and sd errors, which
#   the chain's own Monte Carlo error sets.
#
# Writes to outdir: compression-rates-runs.csv and compression-goodwin-runs.csv
# (one row per seed, n or m, and method), compression-rates.csv and
# compression-goodwin.csv (medians over the seeds), compression-slopes.csv
# (the fitted slopes) and compression-goodwin-ref.csv (the reference mean
# and sd); from the source directory a full run copies the summaries,
# slopes and reference to inst/extdata/.
#
# Results (R 4.2.2, one thread, a shared two-core machine at load 4-5):
#   full run 597 s (rates 305 s, of which KT at n = 2^14 27 s per call;
#   Goodwin reference 46 s, the 5 chains x 3 m 245 s); quick run 82 s.
# (a) median KSD at n = 2^14 (m = 128): kt 0.0294, cpp2 0.0329, cpp1
#   0.0352, stein 0.0359, cpp1_gauss 0.0813, uniform 0.183, standard 0.180,
#   exact 0.168; at 2^16 (m = 256): cpp2 0.0170, cpp1 0.0184, stein 0.0200,
#   uniform 0.113. Fitted slopes, KSD / MMD to N(0, I) (theory):
#   kt -0.462 / -0.562 (-1/2; 2^8..2^14), cpp1 -0.446 / -0.517, cpp2
#   -0.454 / -0.542 (-1/2), stein -0.434 / -0.473, cpp1_gauss -0.335 /
#   -0.474 (-1/2 in its own kernel), uniform -0.274 / -0.272, standard
#   -0.240 / -0.238, exact -0.229 / -0.208 (-1/4). Seconds per call at
#   2^16: cpp1 0.16, cpp2 0.61, stein 0.17.
# (b) Goodwin, n = 2^13, medians over 5 chains, KSD / mean error / sd
#   error (sd units) / seconds:
#   m = 32:  uniform 4.98/0.37/0.30, standard 4.21/0.49/0.28, stein
#            0.70/0.15/0.17/0.004, kt 0.65/0.26/0.23/4.1, cpp
#            0.74/0.27/0.34/0.01, skt 0.56/0.15/0.23/7.9, skt_cpp
#            0.52/0.16/0.18/4.7
#   m = 64:  uniform 3.82/0.67/0.24, standard 2.86/0.46/0.25, stein
#            0.65/0.17/0.15, kt 0.46/0.18/0.18/3.8, cpp 0.62/0.12/0.16,
#            skt 0.38/0.08/0.09/7.6, skt_cpp 0.38/0.12/0.10/5.4
#   m = 128: uniform 4.56/0.35/0.26, standard 2.79/0.48/0.26, stein
#            0.61/0.14/0.12, kt 0.77/0.15/0.17/4.6, skt 0.23/0.07/0.12/6.7
#   the chain after 1000 states: KSD 0.93, mean error 0.55, sd error 0.25.
#   KT at m = 128 is worse than at 64: 0.77-1.03 on 3 chains (0.27, 0.33
#   on the others), its selections keeping burn-in states whose Stein
#   kernel terms cancel (see the vignette).
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(out = "compression-output", size = "full")
out <- exp_start(a$out)
full <- match.arg(a$size, c("full", "quick")) == "full"
say <- exp_logger()

## (a) rates ---------------------------------------------------------------
rate_exps <- if (full) seq(8L, 16L, by = 2L) else seq(8L, 12L, by = 2L)
rate_seeds <- if (full) 10L else 3L
kt_max <- 2^14
kimq <- imq_kernel(precon = 1)
kgauss <- gaussian_kernel(precon = 1)

# MMD to N(0, I_2) under exp(-|x - y|^2 / 2), closed form (header)
mmd_gauss <- function(p) {
  K <- exp(-as.matrix(stats::dist(p))^2 / 2)
  sqrt(max(mean(K) - mean(exp(-rowSums(p^2) / 4)) + 1 / 3, 0))
}
rate_row <- function(e, seed, meth, p, fresh, secs) {
  data.frame(log2n = e, n = 2^e, m = nrow(p), seed = seed, method = meth,
             ksd = ksd(p, -p, kimq, standardize = FALSE), mmd = mmd_gauss(p),
             w2 = as.numeric(wasserstein2(p, fresh)),
             mean_err = sqrt(sum(colMeans(p)^2)),
             mom2_err = sqrt(sum((crossprod(p) / nrow(p) - diag(2))^2)),
             seconds = secs)
}
say("(a) rates: N(0, I_2), n = 2^%s, %d seeds",
    paste(rate_exps, collapse = ", 2^"), rate_seeds)
rows <- list()
for (e in rate_exps) {
  n <- 2^e
  m <- as.integer(2^(e / 2))
  for (seed in seq_len(rate_seeds)) {
    set.seed(1000 * e + seed)
    x <- matrix(stats::rnorm(2 * n), n)
    s <- -x
    fresh <- matrix(stats::rnorm(2 * m), m)
    sel <- list(
      exact = exp_timed(list(points = matrix(stats::rnorm(2 * m), m))),
      uniform = exp_timed(list(index = sample.int(n, m))),
      standard = exp_timed(list(index = seq(n / m, n, by = n / m))),
      stein = exp_timed(stein_thin(x, s, m, kernel = kimq,
                                   standardize = FALSE, progress = FALSE)),
      cpp1 = exp_timed(kernel_thin(x, s, m, kernel = kimq,
                                   method = "compress++", oversample = 1, standardize = FALSE)),
      cpp2 = exp_timed(kernel_thin(x, s, m, kernel = kimq,
                                   method = "compress++", oversample = 2, standardize = FALSE)),
      cpp1_gauss = exp_timed(kernel_thin(x, NULL, m, kernel = kgauss,
                                         method = "compress++",
                                         oversample = 1, standardize = FALSE)))
    if (n <= kt_max) {
      sel$kt <- exp_timed(kernel_thin(x, s, m, kernel = kimq, standardize = FALSE))
    }
    for (meth in names(sel)) {
      r <- sel[[meth]]
      p <- if (!is.null(r$points)) r$points else x[r$index, , drop = FALSE]
      rows[[length(rows) + 1L]] <- rate_row(e, seed, meth, p, fresh,
                                            exp_secs(r))
    }
  }
  say("n = 2^%d (m = %d) done", e, m)
}
rates_runs <- do.call(rbind, rows)
rate_cols <- c("ksd", "mmd", "w2", "mean_err", "mom2_err", "seconds")
rate_key <- unique(rates_runs[c("method", "log2n", "n", "m")])
rates <- do.call(rbind, lapply(seq_len(nrow(rate_key)), function(i) {
  v <- rates_runs[rates_runs$method == rate_key$method[i] &
                    rates_runs$log2n == rate_key$log2n[i], ]
  md <- vapply(rate_cols, function(cn) signif(stats::median(v[[cn]]), 4), 0)
  data.frame(rate_key[i, ], seeds = nrow(v), t(md), row.names = NULL)
}))
rates <- rates[order(rates$method, rates$n), ]
slope_of <- function(v, col) {
  if (!all(v[[col]] > 0)) return(NA_real_)
  unname(stats::coef(stats::lm(log(v[[col]]) ~ log(v$n)))[2])
}
theory <- c(exact = -0.25, uniform = -0.25, standard = -0.25, stein = NA,
            kt = -0.5, cpp1 = -0.5, cpp2 = -0.5, cpp1_gauss = -0.5)
slopes <- do.call(rbind, lapply(split(rates, rates$method), function(v) {
  data.frame(method = v$method[1], n_min = min(v$n), n_max = max(v$n),
             slope_ksd = round(slope_of(v, "ksd"), 3),
             slope_mmd = round(slope_of(v, "mmd"), 3),
             slope_mean_err = round(slope_of(v, "mean_err"), 3),
             slope_seconds = round(slope_of(v, "seconds"), 3),
             theory = theory[[v$method[1]]])
}))
rownames(slopes) <- NULL
print(rates, row.names = FALSE)
print(slopes, row.names = FALSE)

## (b) Goodwin -------------------------------------------------------------
g_n <- if (full) 2^13 else 2^12
g_seeds <- if (full) 5L else 3L
g_ms <- c(32L, 64L, 128L)
n_ref <- if (full) 5e4 else 1.25e4   # per reference chain
n_ref_chains <- 4L
rwm_step <- 0.1228
kgood <- imq_kernel(precon = 1.47692^2)
gw <- exp_goodwin()
theta0 <- gw$theta0
times <- gw$times
y <- gw$y
target <- gw$target
x0 <- gw$x0
x_start <- x0 + c(2, -2, 2, -2)

say("(b) Goodwin: reference, %d MALA chains of %d states", n_ref_chains,
    as.integer(n_ref))
ref_runs <- lapply(seq_len(n_ref_chains), function(i) {
  set.seed(200 + i)
  exp_timed(mala(target, x0, n_iter = n_ref, progress = FALSE))
})
ref_x <- do.call(rbind, lapply(ref_runs, function(r) r$x))
ref_mean <- colMeans(ref_x)
ref_sd <- apply(ref_x, 2, stats::sd)
# the standard error of the pooled mean from the spread of the chain means
ref_se <- apply(sapply(ref_runs, function(r) colMeans(r$x)), 1,
                stats::sd) / sqrt(n_ref_chains)
ref_pts <- function(m) {
  ref_x[round(seq(nrow(ref_x) / m, nrow(ref_x), length.out = m)), ,
        drop = FALSE]
}
say("reference: %.0f s; mean %s (se %s); sd %s",
    sum(vapply(ref_runs, exp_secs, 0)),
    paste(signif(ref_mean, 3), collapse = " "),
    paste(signif(ref_se, 2), collapse = " "),
    paste(signif(ref_sd, 3), collapse = " "))
good_row <- function(seed, m, meth, p, s, secs) {
  pm <- colMeans(p)
  psd <- if (nrow(p) > 1) apply(p, 2, stats::sd) else rep(0, 4)
  data.frame(seed = seed, n = g_n, m = m, method = meth, points = nrow(p),
             ksd = ksd(p, s, kgood, standardize = FALSE),
             mean_err = sqrt(sum(((pm - ref_mean) / ref_sd)^2)),
             sd_err = sqrt(sum((psd / ref_sd - 1)^2)),
             w2 = if (nrow(p) <= 1024) as.numeric(wasserstein2(
               sweep(p, 2, ref_sd, "/"), sweep(ref_pts(m), 2, ref_sd, "/")))
               else NA_real_,
             seconds = secs)
}
m_cpp_max <- 2^floor(log2(g_n) / 2)
rows <- list()
for (seed in seq_len(g_seeds)) {
  set.seed(100 + seed)
  ch <- exp_timed(rwm(target, x_start, n_iter = g_n, step_size = rwm_step,
                      progress = FALSE))
  x <- ch$x
  s <- ch$score
  say("chain %d: %d states, acceptance %.3f, %.1f s; KSD of the chain %.3g",
      seed, g_n, ch$accept_rate, exp_secs(ch), ksd(x, s, kgood, standardize = FALSE))
  # the whole chain, and the chain after discarding 1000 states (not a
  # selection of m points: the floor of the mean and sd errors)
  all_rows <- list(chain = seq_len(g_n), chain_burned = 1001:g_n)
  chain_rows <- lapply(names(all_rows), function(meth) {
    i <- all_rows[[meth]]
    good_row(seed, length(i), meth, x[i, , drop = FALSE],
             s[i, , drop = FALSE], 0)
  })
  for (m in g_ms) {
    for (r in chain_rows) {
      r$m <- m
      rows[[length(rows) + 1L]] <- r
    }
    sel <- list(
      uniform = exp_timed(list(index = sample.int(g_n, m))),
      standard = exp_timed(list(index = seq(g_n / m, g_n, by = g_n / m))),
      stein = exp_timed(stein_thin(x, s, m, kernel = kgood,
                                   standardize = FALSE, progress = FALSE)),
      kt = exp_timed(kernel_thin(x, s, m, kernel = kgood, standardize = FALSE)),
      skt = exp_timed(stein_kernel_thin(x, s, m, kernel = kgood,
                                        standardize = FALSE)))
    if (m <= m_cpp_max) {
      sel$cpp <- exp_timed(kernel_thin(x, s, m, kernel = kgood,
                                       method = "compress++", standardize = FALSE))
      sel$skt_cpp <- exp_timed(stein_kernel_thin(x, s, m, kernel = kgood,
                                                 method = "compress++",
                                                 standardize = FALSE))
    }
    for (meth in names(sel)) {
      idx <- sel[[meth]]$index
      rows[[length(rows) + 1L]] <- good_row(seed, m, meth,
                                            x[idx, , drop = FALSE],
                                            s[idx, , drop = FALSE],
                                            exp_secs(sel[[meth]]))
    }
    say("chain %d, m = %d done (skt %.1f s)", seed, m, exp_secs(sel$skt))
  }
}
good_runs <- do.call(rbind, rows)
good_cols <- c("ksd", "mean_err", "sd_err", "w2", "seconds")
good_key <- unique(good_runs[c("method", "n", "m")])
goodwin <- do.call(rbind, lapply(seq_len(nrow(good_key)), function(i) {
  v <- good_runs[good_runs$method == good_key$method[i] &
                   good_runs$m == good_key$m[i], ]
  md <- vapply(good_cols, function(cn) signif(stats::median(v[[cn]]), 4), 0)
  data.frame(good_key[i, ], seeds = nrow(v), t(md), row.names = NULL)
}))
goodwin <- goodwin[order(goodwin$m, goodwin$ksd), ]
print(goodwin, row.names = FALSE)
ref_tab <- data.frame(parameter = names(ref_mean), mean = signif(ref_mean, 6),
                      se = signif(ref_se, 3), sd = signif(ref_sd, 6),
                      chains = n_ref_chains, states = n_ref * n_ref_chains,
                      accept_rate = signif(mean(vapply(ref_runs, function(r)
                        r$accept_rate, 0)), 4))
print(ref_tab, row.names = FALSE)

written <- exp_write(list("compression-rates-runs.csv" = rates_runs,
                          "compression-rates.csv" = rates,
                          "compression-slopes.csv" = slopes,
                          "compression-goodwin-runs.csv" = good_runs,
                          "compression-goodwin.csv" = goodwin,
                          "compression-goodwin-ref.csv" = ref_tab), out,
                     extdata = if (full) c("compression-rates.csv",
                                           "compression-slopes.csv",
                                           "compression-goodwin.csv",
                                           "compression-goodwin-ref.csv")
                               else character())
say("done; wrote %s", paste(written, collapse = ", "))
