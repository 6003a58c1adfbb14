# Benchmark: the distributed path (futures) against one process.
#
# ksd_blocks() (the KSD V-statistic's double sum cut into row blocks, each
# block a future), ksdt_chains() (one future per chain) and ksd_test(blocks
# = 4) (the bootstrap's tiles or the incomplete test's rows in 4 futures)
# run under
#   process       no futures: ksd_blocks() / ksdt_chains() in this R process
#                 with a sequential plan;
#   threads-2     the same in this process on 2 OpenMP threads (nthreads =
#                 2), the alternative to workers on one machine;
#   multisession  future::multisession with 2 workers, and one worker of
#                 the same kind (future::cluster; multisession with one
#                 worker runs sequentially): background R sessions on this
#                 machine, started before the clock runs;
#   batchtools    future.batchtools::batchtools_multicore with 1 and 2
#                 workers: a file registry, every future a batchtools job
#                 in its own process, standing in for a cluster scheduler.
# For each: the elapsed time, the ratio to one process (printed), the CPU
# time of this process and of each worker during the run (on a machine
# shared with other jobs the elapsed time of 2 workers is inflated, while
# the largest worker's CPU time is what 2 idle cores would need), the peak
# resident memory of each worker process (both sampled every 0.2 s with ps
# from a background shell; the main process is reported apart), the 1-min
# load average, and whether the result is identical() to one process.  The row blocks are fixed (4), so
# the sums are added in the same order under every plan and the KSD is the
# same to the last bit; ksdt_chains() draws each chain from its own
# L'Ecuyer stream (future.seed), so its dictionaries are the same too.
#
# Environment: KB_BENCH_N (draws for the large case, default 1e6),
# KB_BENCH_SMALL (sizes for the break-even scan of ksd_blocks, default
# "1e4,3e4,1e5,3e5"), KB_BENCH_CONFIGS (default all; e.g.
# "process,multisession-2"), KB_BENCH_PARTS ("ksd,ksdt,test", default
# all), KB_BENCH_TEST_N (draws of the quadratic ksd_test(), default 2e4),
# KB_BENCH_OUT (a CSV to append the rows to).
# Run: Rscript inst/bench/bench-distributed.R
suppressPackageStartupMessages(library(kernbayes))
stopifnot(requireNamespace("future", quietly = TRUE),
          requireNamespace("future.apply", quietly = TRUE),
          requireNamespace("future.batchtools", quietly = TRUE))
options(future.cache.path = tempfile("kb-bench-batchtools-"))

d <- 10L
n_big <- as.numeric(Sys.getenv("KB_BENCH_N", "1e6"))
small <- as.numeric(strsplit(Sys.getenv("KB_BENCH_SMALL",
                                         "1e4,3e4,1e5,3e5"), ",")[[1L]])
all_configs <- paste0("process,threads-2,multisession-1,multisession-2,",
                      "batchtools-1,batchtools-2")
configs <- strsplit(Sys.getenv("KB_BENCH_CONFIGS", all_configs), ",")[[1L]]
# the configurations run at n_big (each one-process run there takes about
# half an hour at 1e6)
big_configs <- strsplit(Sys.getenv("KB_BENCH_BIG_CONFIGS", all_configs),
                        ",")[[1L]]
threads_of <- function(cfg) if (cfg == "threads-2") 2L else 1L
parts <- strsplit(Sys.getenv("KB_BENCH_PARTS", "ksd,ksdt,test"),
                  ",")[[1L]]
n_test <- as.numeric(Sys.getenv("KB_BENCH_TEST_N", "2e4"))
out_csv <- Sys.getenv("KB_BENCH_OUT", "")
blocks <- 4L

# Set the plan of a configuration; returns the pids of its persistent
# workers (multisession, started here, before the clock runs; batchtools
# starts a process per job, which is part of its cost).
set_plan <- function(cfg) {
  kind <- sub("-[0-9]+$", "", cfg)
  w <- if (grepl("-[0-9]+$", cfg)) as.integer(sub("^.*-", "", cfg)) else 1L
  switch(kind,
    process = , threads = future::plan(future::sequential),
    # multisession with one worker is sequential in the future package;
    # cluster starts the same kind of background R session for any count
    multisession = if (w == 1L) future::plan(future::cluster, workers = 1L)
                   else future::plan(future::multisession, workers = w),
    batchtools = future::plan(future.batchtools::batchtools_multicore,
                              workers = w))
  if (kind != "multisession") return(integer())
  setdiff(unique(unlist(future.apply::future_lapply(seq_len(4L * w),
    function(i) {
      Sys.sleep(0.2)
      Sys.getpid()
    }))), Sys.getpid())
}

# Peak RSS (MB) of the workers while expr ran: the given pids and every
# descendant of this process (batchtools' forked jobs), sampled with ps
# every 0.2 s from a background shell.
with_rss <- function(expr, pids) {
  log <- tempfile("kb-rss-")
  me <- Sys.getpid()
  cmd <- sprintf(paste0(
    "while kill -0 %d 2>/dev/null && [ ! -e %s.stop ]; do ",
    "ps -eo pid=,ppid=,rss=,times= >> %s; sleep 0.2; done"), me, log, log)
  system2("bash", c("-c", shQuote(cmd)), wait = FALSE)
  Sys.sleep(0.3)
  p0 <- proc.time()
  value <- force(expr)
  p1 <- proc.time()
  elapsed <- p1[["elapsed"]] - p0[["elapsed"]]
  main_cpu <- sum(p1[c("user.self", "sys.self")] -
                  p0[c("user.self", "sys.self")])
  file.create(paste0(log, ".stop"))
  Sys.sleep(0.5)
  tab <- utils::read.table(log, col.names = c("pid", "ppid", "rss", "cpu"))
  kids <- me
  repeat {
    more <- setdiff(unique(tab$pid[tab$ppid %in% kids]), kids)
    if (!length(more)) break
    kids <- c(kids, more)
  }
  keep <- tab$pid %in% c(setdiff(kids, me), pids)
  tab <- tab[keep, , drop = FALSE]
  # ps and the shell that samples are descendants too: only R-sized ones
  peak <- if (nrow(tab)) tapply(tab$rss, tab$pid, max) / 1024 else numeric()
  # CPU seconds each worker spent during the run (a persistent worker's
  # earlier time taken off; ps counts whole seconds)
  cpu <- if (nrow(tab)) {
    tapply(tab$cpu, tab$pid, function(v) max(v) - if (length(v) > 1L)
      min(v) else 0)
  } else numeric()
  big <- names(peak)[peak > 30]
  peak <- peak[big]
  cpu <- cpu[big]
  # the machine's 1-minute load average at the end (this run's own
  # processes included): other jobs on the machine show up above 1 or 2
  load <- as.numeric(strsplit(readLines("/proc/loadavg"), " ")[[1L]][1L])
  list(value = value, elapsed = elapsed, main_cpu = main_cpu,
       workers_mb = sort(peak, decreasing = TRUE),
       workers_cpu = sort(cpu, decreasing = TRUE), load = load)
}

rows <- list()
record <- function(part, n, cfg, r, ref, same) {
  wmb <- r$workers_mb
  row <- data.frame(part = part, n = n, d = d, config = cfg,
                    elapsed = r$elapsed,
                    worker_peak_mb = if (length(wmb)) max(wmb) else NA,
                    n_worker_procs = length(wmb),
                    main_cpu = r$main_cpu,
                    worker_cpu_max = if (length(wmb)) max(r$workers_cpu) else NA,
                    worker_cpu_sum = if (length(wmb)) sum(r$workers_cpu) else NA,
                    identical = same, load1 = r$load,
                    stringsAsFactors = FALSE)
  rows[[length(rows) + 1L]] <<- row
  cat(sprintf(paste0("%-5s n = %-8s %-15s %8.2f s  CPU main %7.1f s, ",
                     "workers %s s  worker peak %6s MB (%d procs)  ",
                     "identical: %s  load %.1f\n"),
              part, format(n, scientific = TRUE), cfg, r$elapsed,
              r$main_cpu, if (length(wmb)) paste(r$workers_cpu,
                                                 collapse = "+") else "-",
              if (length(wmb)) format(round(max(wmb))) else "-",
              length(wmb), same, r$load))
  if (nzchar(out_csv)) {
    utils::write.table(row, out_csv, sep = ",", row.names = FALSE,
                       col.names = !file.exists(out_csv),
                       append = file.exists(out_csv))
  }
}

# ---- ksd_blocks --------------------------------------------------------
ksd_case <- function(n, configs) {
  set.seed(1)
  x <- matrix(stats::rnorm(n * d), n, d)
  s <- -x
  ref <- NULL
  for (cfg in configs) {
    pids <- set_plan(cfg)
    r <- with_rss(ksd_blocks(x, s, blocks = blocks,
                             nthreads = threads_of(cfg),
                             progress = FALSE), pids)
    if (is.null(ref)) ref <- r$value
    record("ksd", n, cfg, r, ref, identical(r$value, ref))
    future::plan(future::sequential)
  }
}

# ---- ksdt_chains -------------------------------------------------------
ksdt_case <- function(n, configs) {
  tg <- gaussian_target(rep(0, d))
  k <- 4L
  x0 <- matrix(0, k, d)
  ref <- NULL
  for (cfg in configs) {
    pids <- set_plan(cfg)
    set.seed(1)
    r <- with_rss(ksdt_chains(tg, x0 = x0, n_iter = as.integer(n / k),
                              nthreads = threads_of(cfg),
                              progress = FALSE), pids)
    pts <- r$value$merged$points
    if (is.null(ref)) ref <- pts
    record("ksdt", n, cfg, r, ref, identical(pts, ref))
    future::plan(future::sequential)
  }
}

# ---- ksd_test(blocks =) -------------------------------------------------
# The quadratic test (n_test draws, 1000 replicates) and the incomplete
# test (n_big draws, 1000 lags) in 4 blocks; "process" and "threads-2" run
# the test without blocks (no futures), the reference of identical().
test_case <- function(n, configs, test) {
  set.seed(1)
  x <- matrix(stats::rnorm(n * d), n, d)
  ref <- NULL
  for (cfg in configs) {
    pids <- set_plan(cfg)
    b <- if (cfg %in% c("process", "threads-2")) NULL else blocks
    set.seed(2)
    r <- with_rss(ksd_test(x, -x, test = test, blocks = b,
                           nthreads = threads_of(cfg), progress = FALSE),
                  pids)
    v <- r$value[c("statistic", "p.value", "boot")]
    if (is.null(ref)) ref <- v
    record(paste0("test-", test), n, cfg, r, ref, identical(v, ref))
    future::plan(future::sequential)
  }
}

if ("test" %in% parts) {
  test_case(n_test, configs, "quadratic")
  test_case(n_big, big_configs, "incomplete")
}
if ("ksdt" %in% parts) {
  ksdt_case(n_big / 10, configs)
  ksdt_case(n_big, big_configs)
}
if ("ksd" %in% parts) {
  for (n in small) ksd_case(n, configs)
  ksd_case(n_big, big_configs)
}

tab <- do.call(rbind, rows)
cat("\nTime relative to one process (same part, same n; < 1: the futures pay):\n")
for (p in unique(tab$part)) for (n in unique(tab$n[tab$part == p])) {
  sub <- tab[tab$part == p & tab$n == n, ]
  base <- sub$elapsed[sub$config == "process"]
  if (length(base) != 1L) next
  cat(sprintf("%-5s n = %-8s %s\n", p, format(n, scientific = TRUE),
              paste(sprintf("%s %.2f", sub$config, sub$elapsed / base),
                    collapse = ", ")))
}
