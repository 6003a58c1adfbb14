# Helpers shared by the experiment scripts of this directory: arguments,
# the common start of a run, progress lines, timing, CSV output and
# per-group summaries, and the Gaussian toy of the KBR experiments (also
# used by the package's tests).  Each script sources this file first, from
# its own directory, so that it runs from the package's source directory
# (Rscript inst/experiments/<name>.R) and from an installed copy
# (system.file("experiments", package = "kernbayes")).  Sourcing it only
# defines functions.

# The script's positional command-line arguments over their defaults, as a
# named list of strings: exp_args(out = "x-output") gives list(out = the
# first argument, or "x-output").
exp_args <- function(...) {
  a <- list(...)
  given <- commandArgs(trailingOnly = TRUE)
  k <- seq_len(min(length(a), length(given)))
  a[k] <- given[k]
  a
}

# The start of every run: kernbayes attached, one OpenMP thread (the
# timings in the scripts' headers are single-thread: KSDT runs one small
# parallel region per step, and on a shared machine extra threads only wait
# for each other), the output directory created.  Returns `out`.
exp_start <- function(out) {
  suppressPackageStartupMessages(library(kernbayes))
  options(kernbayes.nthreads = 1L)
  dir.create(out, showWarnings = FALSE, recursive = TRUE)
  out
}

# A progress printer: say <- exp_logger(); say("n = %d", n) prints the line
# after the seconds since exp_logger() was called.
exp_logger <- function() {
  t_start <- Sys.time()
  function(...) {
    cat(sprintf("[%6.0f s] ", as.double(difftime(Sys.time(), t_start,
                                                   units = "secs"))),
        sprintf(...), "\n", sep = "")
    utils::flush.console()
  }
}

# The value of expr with its elapsed seconds in attribute "seconds"
# (exp_secs() reads it).
exp_timed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  val <- expr
  attr(val, "seconds") <- proc.time()[["elapsed"]] - t0
  val
}
exp_secs <- function(x) attr(x, "seconds")

# Write the data frames of the list `tables` (names: file names) as CSV
# files to `out`.  When the script runs from the package's source directory
# (inst/experiments below the working directory), the files named in
# `extdata` are also copied to inst/extdata, where the vignettes read them.
# Returns the paths written.
exp_write <- function(tables, out, extdata = character()) {
  files <- file.path(out, names(tables))
  for (i in seq_along(tables)) {
    # a name ending in .gz is written gzip-compressed (read.csv reads it)
    con <- if (grepl("[.]gz$", files[i])) gzfile(files[i], "w") else files[i]
    utils::write.csv(tables[[i]], con, row.names = FALSE)
    if (inherits(con, "connection")) close(con)
  }
  ext <- file.path("inst", "extdata")
  if (length(extdata) && dir.exists(file.path("inst", "experiments")) &&
      normalizePath(out) != normalizePath(ext, mustWork = FALSE)) {
    dir.create(ext, showWarnings = FALSE)
    file.copy(file.path(out, extdata), ext, overwrite = TRUE)
    files <- c(files, file.path(ext, extdata))
  }
  files
}

# One row per group of the runs `res` (the columns `by`, and method): the
# number of runs and the mean, standard error and median of res$mse, then
# the columns that extra(v, g) returns for the group's rows v and the rows
# g of every method with the same `by`.
exp_summary <- function(res, by, extra) {
  key <- unique(res[c(by, "method")])
  do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
    g <- Reduce(`&`, lapply(by, function(b) res[[b]] == key[[b]][i]))
    v <- res[g & res$method == key$method[i], ]
    data.frame(key[i, , drop = FALSE], reps = nrow(v),
               mse_mean = signif(mean(v$mse), 4),
               mse_se = signif(stats::sd(v$mse) / sqrt(nrow(v)), 3),
               mse_median = signif(stats::median(v$mse), 4),
               extra(v, res[g, ]), row.names = NULL)
  }))
}

# The Gaussian toy of the KBR experiments: (X, Y) ~ N((0, 1), Sigma) in
# R^d x R^d with A a 2d x 2d matrix of N(0, 1) entries drawn after
# set.seed(seed) and, by `cov`, Sigma = A'A + 2 I ("paper": the covariance
# of Fukumizu, Song and Gretton's Sec. 5.1 as two readings of the paper
# recall it; its text was not retrievable here) or Sigma = A'A / (2 d) + 2 I
# ("scaled": the package's first reading, the same A for the same seed:
# A'A / (2d) is of order 1 against the noise 2 I, and the exact posterior's
# total variance is 0.97 of the prior's at every d, against 0.90 at d = 2
# and 0.62 at d = 64 with "paper"; means over gauss_toy(d, 100 d + r), r =
# 1..10); the prior is N(0, V), V = Sigma_XX / 2.  The exact posterior of x
# given y is N(P B' Se^{-1} (y - 1), P), with B = Sigma_YX Sigma_XX^{-1},
# Se = Sigma_YY - B Sigma_XY (p(y | x) = N(1 + B x, Se)) and P = (V^{-1} +
# B' Se^{-1} B)^{-1}.  Returns samplers of the joint, the prior and the
# likelihood, and the exact posterior mean.
gauss_toy <- function(d, seed, cov = c("paper", "scaled")) {
  cov <- match.arg(cov)
  set.seed(seed)
  A <- matrix(stats::rnorm(4 * d * d), 2 * d)
  S <- crossprod(A) / (if (cov == "scaled") 2 * d else 1) + 2 * diag(2 * d)
  ix <- seq_len(d)
  iy <- d + seq_len(d)
  B <- S[iy, ix] %*% solve(S[ix, ix])
  Se <- S[iy, iy] - B %*% S[ix, iy]
  V <- S[ix, ix] / 2
  P <- solve(solve(V) + t(B) %*% solve(Se, B))
  list(
    joint = function(n) {
      z <- matrix(stats::rnorm(n * 2 * d), n) %*% chol(S)
      list(x = z[, ix, drop = FALSE], y = z[, iy, drop = FALSE] + 1)
    },
    prior = function(n) matrix(stats::rnorm(n * d), n) %*% chol(V),
    lik = function(x) {
      sweep(x %*% t(B), 2, 1, "+") +
        matrix(stats::rnorm(length(x)), nrow(x)) %*% chol(Se)
    },
    post_mean = function(y) t(P %*% t(B) %*% solve(Se, t(y - 1)))
  )
}

# The KSDT authors' PruningContainer (colehawkins/KSD-Thinning,
# ksdp/pruning_container.py with full_mat = False, as toy/main.py runs it),
# transcribed in plain R for ksdt-mixtures-authors.R and ksdt-growth-alpha.R,
# with its bookkeeping slip as an option.  Not part of the package, whose
# ksdt() is exact (the scripts check that the corrected transcription
# returns ksdt()'s dictionary).
# Stein kernel k_p(y_i, p_j) of the rows of Y (scores SY) against the rows
# of P (scores G): IMQ (1 + r^2)^(-1/2) or RBF exp(-r^2 / 2)
stein_cross <- function(Y, SY, P, G, type) {
  D1 <- outer(Y[, 1], P[, 1], "-")
  D2 <- outer(Y[, 2], P[, 2], "-")
  r2 <- D1 * D1 + D2 * D2
  ss <- tcrossprod(SY, G)
  dsy <- D1 * SY[, 1] + D2 * SY[, 2]                     # (y - p) . s_y
  dsx <- sweep(D1, 2L, G[, 1], "*") + sweep(D2, 2L, G[, 2], "*")  # . s_p
  if (type == "imq") {
    k <- 1 / sqrt(1 + r2)
    q <- k / (1 + r2)
    ss * k + q * (dsy - dsx) + 2 * q - 3 * q * r2 / (1 + r2)
  } else {
    k <- exp(-r2 / 2)
    ss * k + k * (dsy - dsx) + k * (2 - r2)
  }
}
stein_self <- function(SY) rowSums(SY * SY) + 2  # both kernels, d = 2

# KSDT over blocks of m rows of x (scores sx). rule "authors": candidate
# criterion k_p(c, c) + sum_D k_p(c, x); "sp": k_p(c, c) + 2 sum_D.
# slip = TRUE: a removed point's row is subtracted once from the others'
# contributions. first = "draw": the first row is the first point and
# blocks start at row 2 (toy/main.py); "block": the first block's best row
# by k_p(c, c) (the package). min size max(f(step), 10), step = 0, 1, ...
authors_ksdt <- function(x, sx, type = "imq", m = 5L, rule = "authors",
                         slip = TRUE, first = "draw", f = function(s) 0) {
  off <- if (first == "draw") 1L else m
  nb <- (nrow(x) - off) %/% m
  b <- if (first == "draw") 1L else
    which.min(stein_self(sx[seq_len(m), , drop = FALSE]))
  P <- x[b, , drop = FALSE]
  G <- sx[b, , drop = FALSE]
  rs <- ct <- stein_self(G)
  size <- ksd2 <- numeric(nb)
  for (s in seq_len(nb) - 1L) {
    r <- off + s * m + seq_len(m)
    Y <- x[r, , drop = FALSE]
    SY <- sx[r, , drop = FALSE]
    Kc <- stein_cross(Y, SY, P, G, type)
    dg <- stein_self(SY)
    crit <- dg + (if (rule == "authors") 1 else 2) * rowSums(Kc)
    b <- which.min(crit)
    row <- Kc[b, ]
    ct <- c(ct + 2 * row, 2 * sum(row) + dg[b])
    rs <- c(rs + row, sum(row) + dg[b])
    P <- rbind(P, Y[b, ])
    G <- rbind(G, SY[b, ])
    mn <- max(f(s), 10)
    n <- nrow(P)
    if (n > mn) {  # prune_to_cutoff(cutoff = 0, min_samples = mn)
      init <- sum(rs) / n^2
      k2 <- init
      repeat {
        if (n - 1 < mn) break
        i <- which.max(ct)
        k2 <- (n^2 * k2 - ct[i]) / (n - 1)^2
        if (k2 > init) break
        rem <- drop(stein_cross(P[i, , drop = FALSE], G[i, , drop = FALSE],
                                P, G, type))
        ct <- ct - (if (slip) 1 else 2) * rem
        rs <- rs - rem
        P <- P[-i, , drop = FALSE]
        G <- G[-i, , drop = FALSE]
        ct <- ct[-i]
        rs <- rs[-i]
        n <- n - 1L
      }
    }
    size[s + 1L] <- n
    ksd2[s + 1L] <- sum(rs) / n^2
  }
  list(points = P, size = size, ksd = sqrt(pmax(ksd2, 0)))
}

# The Goodwin posterior of the KSDT and compression experiments (and of
# vignette("online-thinning")): theta = (1, 3, 2, 0.5), both species at
# t = 41..80 with noise sd 0.1, data drawn after set.seed(1) (so the global
# random stream continues as if the lines were written out in the script).
exp_goodwin <- function() {
  theta0 <- c(a1 = 1, a2 = 3, k1 = 2, alpha = 0.5)
  times <- 41:80
  set.seed(1)
  y <- goodwin_simulate(theta0, times, sd = 0.1)
  list(theta0 = theta0, times = times, y = y,
       target = goodwin_target(y, times, sd = 0.1), x0 = log(theta0))
}

# The moment errors of a point set under exp_goodwin()'s posterior, against
# the reference moments compression.R stores (4 MALA chains of 5e4 states,
# inst/extdata/compression-goodwin-ref.csv, read from the package sources
# when run there, else installed): a function of an n x 4 matrix giving
# mean_err = |(mean - mean_ref) / sd_ref| and sd_err = |sd / sd_ref - 1|
# (Euclidean norms over the 4 log-parameters; sd_err NA for one point).
exp_goodwin_moments <- function() {
  f <- file.path("inst", "extdata", "compression-goodwin-ref.csv")
  if (!file.exists(f)) {
    f <- system.file("extdata", "compression-goodwin-ref.csv",
                     package = "kernbayes")
  }
  ref <- utils::read.csv(f)
  stopifnot(nrow(ref) == 4L)
  function(p) {
    c(mean_err = sqrt(sum(((colMeans(p) - ref$mean) / ref$sd)^2)),
      sd_err = if (nrow(p) > 1L)
        sqrt(sum((apply(p, 2, stats::sd) / ref$sd - 1)^2)) else NA_real_)
  }
}

# Neal's funnel in d = 3 (v ~ N(0, 9), x_k | v ~ N(0, e^v)) as a vectorised
# kb_target with its exact score (thin-pathologies.R, compression-choice.R).
funnel_target <- function() {
  kb_target(
    log_density = function(z) {
      v <- z[, 1]
      -v^2 / 18 - v - rowSums(z[, -1, drop = FALSE]^2) * exp(-v) / 2
    },
    score = function(z) {
      v <- z[, 1]
      x <- z[, -1, drop = FALSE]
      cbind(-v / 9 - 1 + rowSums(x^2) * exp(-v) / 2, -x * exp(-v))
    },
    dim = 3, vectorized = TRUE, name = "funnel")
}
