# Debiased Stein compression past 3e4 points (issue 35, item 2): the
# coreset route of stein_kernel_thin() (debias = "compress": Compress++ of
# all rows to M rows, the exact KSD-optimal simplex weights of those M
# rows, then rounding, KT and KT-SWAP over all rows as before) against the
# full-matrix path (debias = "simplex": the simplex weights of all n rows),
# on biased samples; and the coreset route alone at 2^16 and 2^18 rows,
# with its time and peak memory. Writes inst/extdata/skt-scale.csv (or
# outdir/skt-scale.csv) and prints ratios measured in the same run.
#
# Usage: Rscript inst/experiments/skt-scale.R [outdir]
#   outdir  directory for the table (default "inst/extdata")
# Environment (to shorten a run):
#   SKT_SEEDS     seeds per setting at 2^12 and 2^13 (default 3)
#   SKT_SEEDS14   seeds per setting at 2^14 (default 1: the full path needs
#                 a 2 GB matrix and minutes there)
#   SKT_SMALL     "0" skips 2^12-2^14 (default: run them)
#   SKT_BIG       "0" skips 2^16 and 2^18 (default: run them)
#   SKT_KINDS, SKT_DIMS  subsets (default "chain,wide" and "2,4")
#   SKT_LOWRANK   "1" adds low-rank SKT at 2^13 (see low_rank_debias())
#   SKT_MSWEEP    "1" adds the coreset size sweep at 2^16 (run_msweep())
# Rows are appended to the table as each case ends; the ratios are printed
# from the whole table (remove it before a fresh run).
#
# Samples (a non-Gaussian target: the mixture 0.5 N(-1.5 1, I) + 0.5
# N(1.5 1, I) in d = 2 and 4, gaussian_mixture_target()):
#   chain  one MALA chain of n states from x0 = (6, ..., 6), fixed step
#          size (0.5 in d = 2, 1 in d = 4), no warm-up: the start's
#          transient is kept and the chain, which switches modes a few
#          dozen times (d = 2) or a few times (d = 4) in 4096 steps,
#          holds the two modes in wrong proportions (about 2:1)
#   wide   n i.i.d. draws from the same mixture with component sds 1.5
#          (over-dispersed, as a too-hot tempered sample)
# Routes (all nthreads = 1, the defaults otherwise: method = "kt",
# m = n / 2^round(log2(n) / 2), IMQ kernel, standardised columns):
#   compress  stein_kernel_thin(debias = "compress")
#   full      stein_kernel_thin(debias = "simplex")
#   kt        kernel_thin(x, score, m) (plain kernel thinning: no debiasing;
#             compress++ above 2^15 rows, its default)
#   spaced    m rows equally spaced
# KSD: of the selected rows, all with the one kernel of the routes (the
# stein_setup() of the sample), checked equal to ksd() of each result.
# Peak memory (2^16, 2^18, in a fresh R process per case): the R heap's
# maximum (gc(reset = TRUE) before, gc()'s "max used" after) and the
# process's peak resident set (VmHWM, reset through /proc/self/clear_refs
# after the sample is built) while the route runs.

suppressPackageStartupMessages(library(kernbayes))
options(kernbayes.warn_distortion = FALSE)

make_sample <- function(kind, d, n, seed) {
  means <- rbind(rep(-1.5, d), rep(1.5, d))
  tg <- gaussian_mixture_target(means)
  set.seed(seed)
  if (kind == "chain") {
    ch <- mala(tg, rep(6, d), n, step_size = if (d == 2) 0.5 else 1,
               warmup = 0, progress = FALSE)
    return(list(x = ch$x, s = ch$score))
  }
  wide <- gaussian_mixture_target(means, covs = list(2.25 * diag(d),
                                                     2.25 * diag(d)))
  x <- sample_target(wide, n)
  list(x = x, s = kernbayes:::resolve_score(tg, x))
}

# KSD of rows idx with the routes' kernel (setup st)
ksd_rows <- function(st, idx) {
  K <- .Call(kernbayes:::C_kb_stein_matrix, st$x[idx, , drop = FALSE],
             st$s[idx, , drop = FALSE], st$kernel, 1L)
  sqrt(max(sum(K), 0)) / length(idx)
}

timed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  val <- expr
  list(val = val, time = proc.time()[["elapsed"]] - t0)
}

row_of <- function(kind, d, n, seed, route, m, M, ksd, time, heap = NA,
                   hwm = NA) {
  data.frame(kind = kind, d = d, n = n, seed = seed, route = route, m = m,
             M = M, ksd = ksd, time = time, heap_mb = heap, hwm_mb = hwm)
}

yardsticks <- function(smp, st, m, kind, d, n, seed) {
  k <- timed(kernel_thin(smp$x, smp$s, m = m, nthreads = 1, progress = FALSE))
  kk <- ksd_rows(st, k$val$index)
  stopifnot(isTRUE(all.equal(kk, as.numeric(ksd(k$val)), tolerance = 1e-8)))
  sp <- unique(round(seq(1, n, length.out = m)))
  rbind(row_of(kind, d, n, seed, "kt", m, NA, kk, k$time),
        row_of(kind, d, n, seed, "spaced", m, NA, ksd_rows(st, sp), 0))
}

run_small <- function(kind, d, n, seed) {
  smp <- make_sample(kind, d, n, seed)
  st <- kernbayes:::stein_setup(smp$x, smp$s, imq_kernel(), TRUE,
                                rows = seq_len(n))
  out <- NULL
  for (route in c("compress", "full")) {
    set.seed(seed)
    r <- timed(stein_kernel_thin(smp$x, smp$s, nthreads = 1, progress = FALSE,
                                 debias = if (route == "full") "simplex"
                                          else "compress"))
    kr <- ksd_rows(st, r$val$index)
    stopifnot(isTRUE(all.equal(kr, as.numeric(ksd(r$val)), tolerance = 1e-8)))
    M <- if (route == "full") n else length(r$val$coreset)
    out <- rbind(out, row_of(kind, d, n, seed, route, r$val$m, M, kr,
                             r$time))
  }
  rbind(out, yardsticks(smp, st, r$val$m, kind, d, n, seed))
}

# One big case, meant for a fresh process (peak memory of this route only)
run_big <- function(kind, d, n, seed) {
  smp <- make_sample(kind, d, n, seed)
  st <- kernbayes:::stein_setup(smp$x, smp$s, imq_kernel(), TRUE,
                                rows = seq_len(n))
  invisible(gc(reset = TRUE))
  hwm_reset <- tryCatch({writeLines("5", "/proc/self/clear_refs"); TRUE},
                        error = function(e) FALSE, warning = function(w) FALSE)
  set.seed(seed)
  r <- timed(stein_kernel_thin(smp$x, smp$s, nthreads = 1, progress = FALSE))
  g <- gc()
  heap <- sum(g[, 6L])
  hwm <- as.numeric(sub("[^0-9]*([0-9]+).*", "\\1",
                        grep("VmHWM", readLines("/proc/self/status"),
                             value = TRUE))) / 1024
  if (!hwm_reset) hwm <- NA
  kr <- ksd_rows(st, r$val$index)
  stopifnot(r$val$debias == "compress")
  rbind(row_of(kind, d, n, seed, "compress", r$val$m, length(r$val$coreset),
               kr, r$time, heap, hwm),
        yardsticks(smp, st, r$val$m, kind, d, n, seed))
}

# ---- low-rank debiasing, for comparison (SKT_LOWRANK = "1") -----------------
# Li, Dwivedi and Mackey's (2024) other sub-quadratic route, as read from
# the paper (plain R, not the authors' code): Low-rank debiasing, T
# adaptive rounds, each a randomly pivoted Cholesky factor F (n x r) of the
# Stein kernel matrix with pivots drawn with probability proportional to
# w_i times the residual diagonal (weighted RPCholesky), then accelerated
# entropic mirror descent on w' F F' w over the simplex from the current
# w; then the package's steps (2)-(4) on the weights (rounding to n rows,
# KT-SPLIT on kernel rows, KT-SWAP of it and of the Stein thinning baseline
# over all rows). Our choices: r = 2 sqrt(n), T = 7, 300 mirror steps.
lr_col <- function(st, p) {
  .Call(kernbayes:::C_kb_stein_cross_sums, st$x, st$s,
        st$x[p, , drop = FALSE], st$s[p, , drop = FALSE], st$kernel, 1L)
}

lr_rpchol <- function(st, w, r, dg) {
  n <- nrow(st$x)
  F <- matrix(0, n, r)
  res <- dg
  for (j in seq_len(r)) {
    pr <- pmax(w * res, 0)
    if (!(sum(pr) > 0)) return(F[, seq_len(j - 1L), drop = FALSE])
    p <- sample.int(n, 1L, prob = pr)
    col <- lr_col(st, p)$sums
    if (j > 1L) col <- col - F[, seq_len(j - 1L), drop = FALSE] %*% F[p, seq_len(j - 1L)]
    if (!(col[p] > 0)) return(F[, seq_len(j - 1L), drop = FALSE])
    F[, j] <- col / sqrt(col[p])
    res <- pmax(res - F[, j]^2, 0)
  }
  F
}

lr_amd <- function(F, w, steps) {
  L <- 2 * max(rowSums(F^2))
  x <- z <- w
  for (k in seq_len(steps)) {
    th <- 2 / (k + 1)
    y <- (1 - th) * x + th * z
    g <- 2 * drop(F %*% crossprod(F, y))
    z <- z * exp(-(g - min(g)) / (L * th))
    z <- z / sum(z)
    x <- (1 - th) * x + th * z
  }
  x
}

low_rank_debias <- function(st, r, rounds = 7L, steps = 300L) {
  n <- nrow(st$x)
  dg <- lr_col(st, 1L)$diag
  w <- rep(1 / n, n)
  for (t in seq_len(rounds)) w <- lr_amd(lr_rpchol(st, w, r, dg), w, steps)
  w
}

# Low-rank SKT: LD weights, then the package's steps (2)-(4) (internal
# helpers of R/skt.R, as stein_kernel_thin() runs them for debias = "stein").
low_rank_skt <- function(st, m, seed) {
  n <- nrow(st$x)
  set.seed(seed)
  w <- low_rank_debias(st, as.integer(2 * sqrt(n)))
  g <- as.integer(round(log2(n / m)))
  rows <- kernbayes:::stratified_round(w, n)
  cand <- kernbayes:::skt_split(st, rows, NULL, g, 0.5, 1L)
  base <- .Call(kernbayes:::C_kb_stein_thin, st$x, st$s, st$kernel, m, FALSE,
                list(), 1L, NULL)$index
  cands <- .Call(kernbayes:::C_kb_kt_refine, st$x, st$s, st$kernel,
                 cbind(as.integer(cand), as.integer(base)), 1L)
  k <- apply(cands, 2L, function(i) ksd_rows(st, i))
  list(index = cands[, which.min(k)], w = w)
}

run_lowrank <- function(kind, d, n, seed) {
  smp <- make_sample(kind, d, n, seed)
  st <- kernbayes:::stein_setup(smp$x, smp$s, imq_kernel(), TRUE,
                                rows = seq_len(n))
  m <- n %/% 2^round(log2(n) / 2)
  lr <- timed(low_rank_skt(st, m, seed))
  row_of(kind, d, n, seed, "lowrank", m, as.integer(2 * sqrt(n)),
         ksd_rows(st, lr$val$index), lr$time)
}

# The coreset size: the route at 2^16 rows (seed 1) with M aimed at 1024
# to 8192 rows (SKT_MSWEEP = "1"; route "compress_M<M>" in the table).
run_msweep <- function(kind, d, Ms) {
  n <- 2^16
  smp <- make_sample(kind, d, n, 1L)
  st <- kernbayes:::stein_setup(smp$x, smp$s, imq_kernel(), TRUE,
                                rows = seq_len(n))
  out <- NULL
  for (M in Ms) {
    old <- options(kernbayes.skt_coreset = M)
    set.seed(1)
    r <- timed(stein_kernel_thin(smp$x, smp$s, nthreads = 1, progress = FALSE))
    options(old)
    out <- rbind(out, row_of(kind, d, n, 1L, paste0("compress_M", M),
                             r$val$m, length(r$val$coreset),
                             ksd_rows(st, r$val$index), r$time))
  }
  out
}

args <- commandArgs(trailingOnly = TRUE)
if (length(args) >= 1L && args[1] == "--big") {
  res <- run_big(args[2], as.integer(args[3]), as.integer(args[4]),
                 as.integer(args[5]))
  utils::write.csv(res, args[6], row.names = FALSE)
  quit(save = "no")
}

outdir <- if (length(args) >= 1L) args[1] else "inst/extdata"
out_csv <- file.path(outdir, "skt-scale.csv")
dir.create(outdir, showWarnings = FALSE, recursive = TRUE)
# each case's rows are appended as it ends (a long run can be read, or
# split over processes, by SKT_SMALL / SKT_BIG / SKT_KINDS / SKT_DIMS)
append_rows <- function(rows) {
  if (!file.exists(out_csv)) {
    utils::write.csv(rows, out_csv, row.names = FALSE)
  } else {
    utils::write.table(rows, out_csv, sep = ",", row.names = FALSE,
                       col.names = FALSE, append = TRUE)
  }
}
seeds <- seq_len(as.integer(Sys.getenv("SKT_SEEDS", "3")))
seeds14 <- seq_len(as.integer(Sys.getenv("SKT_SEEDS14", "1")))
kinds <- strsplit(Sys.getenv("SKT_KINDS", "chain,wide"), ",")[[1]]
dims <- as.integer(strsplit(Sys.getenv("SKT_DIMS", "2,4"), ",")[[1]])
if (Sys.getenv("SKT_SMALL", "1") != "0") {
  for (kind in kinds) for (d in dims) for (n in 2^(12:14)) {
    for (seed in if (n == 2^14) seeds14 else seeds) {
      append_rows(run_small(kind, d, as.integer(n), seed))
      cat(sprintf("%s d=%d n=%d seed=%d done\n", kind, d, n, seed))
    }
  }
}
if (Sys.getenv("SKT_BIG", "1") != "0") {
  me <- sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE))
  for (kind in kinds) for (n in 2^c(16, 18)) {
    f <- tempfile(fileext = ".csv")
    system2(file.path(R.home("bin"), "Rscript"),
            c(me, "--big", kind, 4L, as.integer(n), 1L, f))
    append_rows(utils::read.csv(f))
    cat(sprintf("%s d=4 n=%d (coreset route, fresh process) done\n", kind, n))
  }
}
if (Sys.getenv("SKT_LOWRANK", "0") == "1") {
  for (kind in kinds) for (d in dims) for (seed in seeds) {
    append_rows(run_lowrank(kind, d, 2^13, seed))
    cat(sprintf("low-rank %s d=%d n=8192 seed=%d done\n", kind, d, seed))
  }
}
if (Sys.getenv("SKT_MSWEEP", "0") == "1") {
  for (kind in kinds) for (d in dims) {
    append_rows(run_msweep(kind, d, if (d == 2) 2^(10:12) else 2^(10:13)))
    cat(sprintf("M sweep %s d=%d done\n", kind, d))
  }
}
tab <- utils::read.csv(out_csv)
tab <- tab[!grepl("^compress_M", tab$route), ]   # reported apart, below

# ---- ratios measured in this run ---------------------------------------------
wide_tab <- reshape(tab[, c("kind", "d", "n", "seed", "route", "ksd", "time")],
                    idvar = c("kind", "d", "n", "seed"), timevar = "route",
                    direction = "wide")
if (is.null(wide_tab$ksd.full)) wide_tab$ksd.full <- rep(NA_real_, nrow(wide_tab))
both <- wide_tab[!is.na(wide_tab$ksd.full), ]
if (nrow(both)) {
  agg <- aggregate(cbind(ksd_ratio = ksd.compress / ksd.full,
                         time_ratio = time.compress / time.full,
                         kt_over_full = ksd.kt / ksd.full,
                         spaced_over_full = ksd.spaced / ksd.full) ~ kind + d + n,
                   data = both, FUN = mean)
  cat("\nKSD and time, coreset route / full path (mean over seeds), with the",
      "yardsticks' KSD / full path:\n")
  print(agg, digits = 3, row.names = FALSE)
  cat(sprintf("\nall settings: KSD ratio median %.3f, range %.3f - %.3f\n",
              median(both$ksd.compress / both$ksd.full),
              min(both$ksd.compress / both$ksd.full),
              max(both$ksd.compress / both$ksd.full)))
}
big <- tab[tab$route == "compress" & tab$n >= 2^16, ]
if (nrow(big)) {
  cat("\ncoreset route at 2^16 and 2^18 (d = 4): time, KSD, peak memory\n")
  print(big[, c("kind", "n", "M", "m", "ksd", "time", "heap_mb", "hwm_mb")],
        digits = 4, row.names = FALSE)
  t14 <- tab[tab$route == "compress" & tab$n == 2^14 & tab$d == 4, ]
  for (kind in unique(big$kind)) {
    cat(sprintf("%s: time 2^18 / 2^14 (coreset route) %.2f (16x the rows)\n",
                kind, big$time[big$kind == kind & big$n == 2^18] /
                  mean(t14$time[t14$kind == kind])))
    yk <- wide_tab[wide_tab$kind == kind & wide_tab$n >= 2^16, ]
    cat(sprintf("%s: KSD kt / coreset route %s; spaced / coreset route %s\n",
                kind, paste(format(yk$ksd.kt / yk$ksd.compress, digits = 3),
                            collapse = ", "),
                paste(format(yk$ksd.spaced / yk$ksd.compress, digits = 3),
                      collapse = ", ")))
  }
}
t13 <- both[both$n == 2^13, ]
if (nrow(t13)) cat(sprintf("\nbenchmark: at n = 2^13 the full path takes %.1fx the coreset route's time\n",
            mean(t13$time.full / t13$time.compress)))
if (!is.null(wide_tab$ksd.lowrank) && any(!is.na(wide_tab$ksd.lowrank))) {
  lr <- wide_tab[!is.na(wide_tab$ksd.lowrank), ]
  cat("\nlow-rank SKT at 2^13 (per kind and d, mean over seeds):\n")
  print(aggregate(cbind(lowrank_over_compress = ksd.lowrank / ksd.compress,
                        lowrank_over_full = ksd.lowrank / ksd.full,
                        time_lowrank_over_compress = time.lowrank / time.compress)
                  ~ kind + d, data = lr, FUN = mean, na.action = na.pass),
        digits = 3, row.names = FALSE)
}
msw <- utils::read.csv(out_csv)
msw <- msw[grepl("^compress_M", msw$route), ]
if (nrow(msw)) {
  cat("\ncoreset size M at 2^16 (seed 1): KSD and time against M = 4096\n")
  for (key in unique(paste(msw$kind, msw$d))) {
    v <- msw[paste(msw$kind, msw$d) == key, ]
    ref <- v[v$M == 4096, ]
    print(data.frame(setting = key, M = v$M, ksd_ratio = v$ksd / ref$ksd,
                     time_ratio = v$time / ref$time), digits = 3,
          row.names = FALSE)
  }
}
