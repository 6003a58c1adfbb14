# Benchmark: time and peak memory against the sample size n, for the
# routines a large posterior sample meets: ksd(), stein_thin() (m = 256),
# ksdt(), kernel_thin() (KT and Compress++), stein_kernel_thin() (its
# defaults), ksd_test() (its defaults; and the quadratic test forced) and
# kbr() (full and rank = 100; one fit at eps = delta = 0.01: the default
# tuning adds a cross-validation on subsamples of 400 points, a cost that
# does not grow with n).  Each (routine, n) runs in a fresh R process
# (Rscript on this file with --case), so that its peak resident memory
# (VmHWM, which includes R itself, about 60-100 MB, and the sample; the
# resident memory just before the call is recorded as before_mb) is its
# own; one thread (nthreads = 1) everywhere, and time is the call's CPU
# time (user + system; the elapsed time is recorded too), so that the
# curves show the algorithms, not the load of a shared machine.  Sizes are powers of 2 from 2^10,
# doubling while a call took less than KB_SCALE_BUDGET CPU seconds (default
# 40)
# and up to each routine's largest n (below); the sample: n i.i.d. draws
# of N(0, I_4) and their scores (kbr: y = x + N(0, 0.5^2 I_4) noise, one
# observation).
#
# Prints, for every routine: time and peak memory at each n, the ratio of
# the time at its largest n to the time at n / 16 (16x the data: a linear
# routine gives about 16, a quadratic one 256), and the slopes of log time
# and of log memory (the peak above R's own) against log n fitted over its
# largest four sizes.  Writes
# the table to KB_SCALE_OUT (default bench-scale.csv in the working
# directory); inst/extdata/bench-scale.csv, drawn in vignette("kernbayes"),
# section "Large posteriors", is this script's output.
# KB_SCALE_ONLY (routines, comma-separated), KB_SCALE_MINLOG and
# KB_SCALE_MAXLOG (log2 of the smallest and largest n) run a part.  The
# routines whose default changes route with n (stein_kernel_thin(),
# ksd_test()) were run with KB_SCALE_BUDGET=150 so that the curve goes past
# the slow sizes just below their switch.
# Run: Rscript inst/bench/bench-scale.R  (about 20-30 minutes)
args <- commandArgs(trailingOnly = TRUE)

# ---- one case, in its own process ----------------------------------------
run_case <- function(routine, n) {
  suppressPackageStartupMessages(library(kernbayes))
  options(kernbayes.nthreads = 1)
  set.seed(1)
  d <- 4L
  x <- matrix(stats::rnorm(n * d), n, d)
  s <- -x
  if (routine %in% c("kbr", "kbr_rank")) {
    y <- x + matrix(stats::rnorm(n * d, sd = 0.5), n, d)
  }
  gc(reset = TRUE)
  base <- vm_field("VmRSS")
  call <- switch(routine,
    ksd = quote(ksd(x, s)),
    stein_thin = quote(stein_thin(x, s, m = 256, progress = FALSE)),
    ksdt = quote(ksdt(x, s, progress = FALSE)),
    kernel_thin_kt = quote(kernel_thin(x, s, method = "kt",
                                       progress = FALSE)),
    kernel_thin_cpp = quote(kernel_thin(x, s, method = "compress++",
                                        progress = FALSE)),
    stein_kernel_thin = quote(stein_kernel_thin(x, s, progress = FALSE)),
    ksd_test = quote(ksd_test(x, s, progress = FALSE)),
    ksd_test_quadratic = quote(ksd_test(x, s, n_boot = 1000,
                                        progress = FALSE,
                                        test = "quadratic")),
    kbr = quote(posterior_mean(kbr(x, y, eps = 0.01, delta = 0.01,
                                   progress = FALSE), rep(0, d))),
    kbr_rank = quote(posterior_mean(kbr(x, y, eps = 0.01, delta = 0.01,
                                        rank = 100, progress = FALSE),
                                    rep(0, d))),
    stop("unknown routine ", routine))
  # a routine's argument that this build does not have (e.g. the test
  # choice) drops the case
  if (routine == "ksd_test_quadratic" &&
      !"test" %in% names(formals(ksd_test))) {
    cat("NA NA NA NA NA\n")
    return(invisible())
  }
  tm <- system.time(suppressMessages(suppressWarnings(eval(call))))
  cpu <- tm[["user.self"]] + tm[["sys.self"]]
  hwm <- vm_field("VmHWM")
  heap <- sum(gc()[, 6L])   # R heap peak (MB), since the reset
  cat(cpu, hwm, heap, base, tm[["elapsed"]], "\n")
}

# A field of /proc/self/status in MB (VmHWM: peak resident memory; VmRSS:
# resident now).
vm_field <- function(name) {
  status <- readLines("/proc/self/status")
  as.numeric(gsub("[^0-9]", "", grep(paste0("^", name), status,
                                     value = TRUE))) / 1024
}

if (length(args) == 3L && args[1L] == "--case") {
  run_case(args[2L], as.numeric(args[3L]))
  quit(save = "no")
}

# ---- the driver -----------------------------------------------------------
budget <- as.numeric(Sys.getenv("KB_SCALE_BUDGET", "40"))
out <- Sys.getenv("KB_SCALE_OUT", "bench-scale.csv")
self <- normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(),
                                               value = TRUE)))
# each routine's largest n (log2)
top <- c(ksd = 17, stein_thin = 20, ksdt = 20, kernel_thin_kt = 16,
         kernel_thin_cpp = 20, stein_kernel_thin = 18, ksd_test = 20,
         ksd_test_quadratic = 15, kbr = 13, kbr_rank = 18)
only <- Sys.getenv("KB_SCALE_ONLY", "")
if (nzchar(only)) top <- top[strsplit(only, ",")[[1L]]]
top[] <- pmin(top, as.numeric(Sys.getenv("KB_SCALE_MAXLOG", "20")))
from <- as.numeric(Sys.getenv("KB_SCALE_MINLOG", "10"))

rows <- list()
for (r in names(top)) {
  for (k in from:top[[r]]) {
    n <- 2^k
    res <- system2(file.path(R.home("bin"), "Rscript"),
                   c(shQuote(self), "--case", r, n), stdout = TRUE,
                   stderr = FALSE)
    v <- suppressWarnings(as.numeric(strsplit(trimws(tail(res, 1L)),
                                              " +")[[1L]]))
    if (length(v) != 5L || is.na(v[1L])) {
      cat(sprintf("%-19s n = 2^%d: not run (%s)\n", r, k,
                  paste(tail(res, 1L), collapse = " ")))
      break
    }
    rows[[length(rows) + 1L]] <- data.frame(routine = r, n = n,
      seconds = v[1L], peak_mb = v[2L], heap_mb = v[3L], before_mb = v[4L],
      elapsed = v[5L])
    cat(sprintf(paste0("%-19s n = 2^%-2d CPU %9.3f s (elapsed %9.3f s)  ",
                       "peak %7.0f MB  R heap %7.0f MB\n"),
                r, k, v[1L], v[5L], v[2L], v[3L]))
    if (v[1L] > budget) break
  }
}
tab <- do.call(rbind, rows)
utils::write.csv(tab, out, row.names = FALSE)

# memory above R's own: the smallest peak of the run less 1 MB stands for
# an R process with a small sample
base0 <- min(tab$peak_mb) - 1
cat(sprintf(paste0("\nRatios and slopes (log-log, over each routine's largest",
                   " four sizes; memory: the peak above R's own %.0f MB):\n"),
            base0))
for (r in unique(tab$routine)) {
  t <- tab[tab$routine == r, ]
  big <- max(t$n)
  ratio <- t$seconds[t$n == big] / t$seconds[t$n == big / 16]
  fit <- utils::tail(t, 4L)
  slope_t <- unname(stats::coef(stats::lm(log(seconds) ~ log(n), fit))[2L])
  slope_m <- unname(stats::coef(stats::lm(log(peak_mb - base0) ~ log(n),
                                          fit))[2L])
  cat(sprintf(paste0("%-19s largest n 2^%d: time(2^%d) / time(2^%d) = %7.1f;",
                     " slope time %.2f, peak memory %.2f\n"),
              r, log2(big), log2(big), log2(big) - 4,
              if (length(ratio)) ratio else NA, slope_t, slope_m))
}
