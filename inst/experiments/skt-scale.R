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
#   SKT_BIG       "0" skips 2^16 and 2^18 (default: run them)
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
    out <- rbind(out, row_of(kind, d, n, seed, route, r$val$m,
                             length(r$val$coreset) %||% n, kr, r$time))
  }
  rbind(out, yardsticks(smp, st, r$val$m, kind, d, n, seed))
}

`%||%` <- function(a, b) if (is.null(a) || length(a) == 0L) b else a

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

args <- commandArgs(trailingOnly = TRUE)
if (length(args) >= 1L && args[1] == "--big") {
  res <- run_big(args[2], as.integer(args[3]), as.integer(args[4]),
                 as.integer(args[5]))
  utils::write.csv(res, args[6], row.names = FALSE)
  quit(save = "no")
}

outdir <- if (length(args) >= 1L) args[1] else "inst/extdata"
seeds <- seq_len(as.integer(Sys.getenv("SKT_SEEDS", "3")))
seeds14 <- seq_len(as.integer(Sys.getenv("SKT_SEEDS14", "1")))
tab <- NULL
for (kind in c("chain", "wide")) for (d in c(2L, 4L)) {
  for (n in 2^(12:14)) {
    for (seed in if (n == 2^14) seeds14 else seeds) {
      tab <- rbind(tab, run_small(kind, d, as.integer(n), seed))
      cat(sprintf("%s d=%d n=%d seed=%d done\n", kind, d, n, seed))
    }
  }
}
if (Sys.getenv("SKT_BIG", "1") != "0") {
  me <- sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE))
  for (kind in c("chain", "wide")) for (n in 2^c(16, 18)) {
    f <- tempfile(fileext = ".csv")
    system2(file.path(R.home("bin"), "Rscript"),
            c(me, "--big", kind, 4L, as.integer(n), 1L, f))
    tab <- rbind(tab, utils::read.csv(f))
    cat(sprintf("%s d=4 n=%d (coreset route, fresh process) done\n", kind, n))
  }
}
dir.create(outdir, showWarnings = FALSE, recursive = TRUE)
utils::write.csv(tab, file.path(outdir, "skt-scale.csv"), row.names = FALSE)

# ---- ratios measured in this run ---------------------------------------------
wide_tab <- reshape(tab[, c("kind", "d", "n", "seed", "route", "ksd", "time")],
                    idvar = c("kind", "d", "n", "seed"), timevar = "route",
                    direction = "wide")
both <- wide_tab[!is.na(wide_tab$ksd.full), ]
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
cat(sprintf("\nbenchmark: at n = 2^13 the full path takes %.1fx the coreset route's time\n",
            mean(t13$time.full / t13$time.compress)))
