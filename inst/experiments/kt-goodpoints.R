# Kernel thinning and Compress++ against the reference implementation
# (issue 17): kernbayes' kernel_thin() and goodpoints (microsoft/goodpoints,
# Python + Cython) on the same inputs with the same Gaussian kernel. The
# algorithms are randomised (kernbayes draws its coin flips from R's
# generator, goodpoints from numpy's), so the comparison is of the
# distributions of the achieved MMD over seeds, not of the indices.
#
# Usage: Rscript inst/experiments/kt-goodpoints.R [mode] [outdir]
#   mode    "quick" (n = 2^10, 2^12; 10 seeds; about 1 min) or "full"
#           (n = 2^10, 2^12, 2^14; 20 seeds, KT at n = 2^14
#           KT_GP_SEEDS14 seeds, default 8; 13 min CPU)
#   outdir  directory for the results (default "kt-goodpoints-output")
# Environment:
#   KB_PYTHON       the python3 to use (default: "python3" on the PATH,
#                   then /usr/bin/python3; the first that imports numpy
#                   and goodpoints)
#   GOODPOINTS_PATH a directory holding a built goodpoints package (the
#                   repository with its Cython extensions built in place,
#                   `python3 setup.py build_ext --inplace`), put on
#                   PYTHONPATH; empty: goodpoints must be importable as is
# Without a python3 that imports numpy and goodpoints the goodpoints runs
# are skipped with a message and only kernbayes and the uniform subsample
# run. Python is never a dependency of the package.
#
# Design: i.i.d. N(0, I_d) samples, d = 2, 4, one data set per (n, d)
# (the same for every method, seed and implementation). One Gaussian
# kernel per data set: bandwidth h = the median pairwise distance of at
# most 1000 evenly spaced rows (computed here with dist()), k(x, y) =
# exp(-|x - y|^2 / (2 h^2)): gaussian_kernel(bandwidth = h) in kernbayes,
# k_param = 2 h^2 in goodpoints (exp(-|x - y|^2 / k_param)). Output size m =
# sqrt(n) throughout (n is a power of 4, so nothing is trimmed). Methods:
#   kt          kernel_thin(x, m = sqrt(n), kernel, method = "kt") against
#               goodpoints kt.thin(X, log2(sqrt(n)), k, k, delta = 0.5,
#               store_K = True) (target KT: KT-SPLIT on k itself, then
#               KT-SWAP to the sample, repeats allowed, in both)
#   kt_split    KT-SPLIT alone: kernel_thin(swap = FALSE) (its first
#               coreset) against goodpoints kt.split(...)[0] (n <= 2^12)
#   cpp_g0, cpp_g4   Compress++ with oversampling g = 0 and 4, num_bins = 4:
#               kernel_thin(method = "compress++", oversample = g) against
#               goodpoints compress.compresspp_kt(X, b"gaussian", [k_param],
#               g, num_bins = 4, delta = 0.5) (kernbayes side only when the
#               installed kernel_thin() has method "compress++")
#   uniform     m rows drawn without replacement (the Monte Carlo baseline)
# Seeds 1..S: set.seed(s) before kernel_thin(), seed = s in goodpoints.
# For every coreset: the MMD to the full sample under the kernel above,
# computed here from scratch (MMD^2 = mean k(S, S) - 2 mean k(S, X) + mean
# k(X, X), no kernbayes code), and the seconds of the call (kernbayes:
# kernel_thin(), which also forms the kernel matrix and the MMD path of the
# selection; goodpoints: the Python call alone, timed in Python, without
# the interpreter's start and the CSV exchange). One thread.
#
# Writes outdir/kt-goodpoints-runs.csv (one row per implementation, method,
# n, d and seed: m, mmd, seconds) and outdir/kt-goodpoints.csv (per cell:
# median and IQR of the MMD and median seconds per implementation, and the
# two-sided Wilcoxon rank-sum p-value kernbayes vs goodpoints); in full
# mode from the source directory the runs also go, gzip-compressed, to
# inst/extdata/kt-goodpoints.csv.gz (read.csv() reads it as it is).
#
# Results (R 4.2.2, goodpoints 56062e9 built with Debian's numpy 1.24.2
# and Cython 0.29.32; one thread on a shared two-core machine at load 3-6;
# full run 26.5 min wall (1588 s); quick 1.1 min), after the KT-SPLIT
# threshold fix (round j at delta 2^j / g on n / 2^j points, goodpoints'
# split_K). Median MMD (kernbayes / goodpoints), Wilcoxon p, 20 seeds (KT
# at n = 16384: 8):
#   d = 2, n = 1024:  kt .0106/.0119 p .36; kt_split .0677/.0644 p .80;
#                     cpp_g0 .0316/.0332 p .84; cpp_g4 = kt (falls back)
#   d = 2, n = 4096:  kt .00469/.00494 p .99; kt_split .0359/.0371 p .93;
#                     cpp_g0 .0185/.0179 p .66; cpp_g4 .00514/.00563 p .38
#   d = 2, n = 16384: kt .00276/.00273 p .96; cpp_g0 .0093/.0087 p .41;
#                     cpp_g4 .00292/.00280 p .62
#   d = 4, n = 1024:  kt .0208/.0207 p .99; kt_split .0753/.0721 p .78;
#                     cpp_g0 .0449/.0403 p .014
#   d = 4, n = 4096:  kt .00996/.0102 p .90; kt_split .0457/.0460 p .97;
#                     cpp_g0 .0240/.0242 p 1.0; cpp_g4 .0106/.0108 p .64
#   d = 4, n = 16384: kt .00542/.00550 p .80; cpp_g0 .0147/.0149 p .66;
#                     cpp_g4 .00595/.00590 p .53
#   Uniform subsample: .045-.101. One p below .05 in 21 comparisons (cpp_g0
#   at d = 4, n = 1024), about what chance gives. Before the threshold fix
#   (the streaming split_X's 2^j): kt_split 12-19% worse than goodpoints in
#   every cell and cpp_g4 at d = 4, n = 16384 3% worse (p .009, 60 seeds).
# Seconds (median, kernbayes / goodpoints): kt 1.7-2.7 / 1.2-2.2 at n =
# 4096 and 18-20 / 15-51 at 16384 (kernbayes includes forming the kernel
# matrix and the MMD path); cpp_g4 at 16384 2.3-4.3 / 1.8-2.5; cpp_g0 below
# 0.07 in both.
here <- tryCatch(dirname(normalizePath(sys.frame(1)$ofile)),
                 error = function(e) NULL)
if (is.null(here)) {
  f <- grep("^--file=", commandArgs(FALSE), value = TRUE)
  here <- if (length(f)) dirname(normalizePath(sub("^--file=", "", f[1]))) else
    "inst/experiments"
}
source(file.path(here, "common.R"))
a <- exp_args(mode = "quick", out = "kt-goodpoints-output")
if (!a$mode %in% c("quick", "full")) stop("mode must be \"quick\" or \"full\"")
full <- a$mode == "full"
out <- exp_start(a$out)
say <- exp_logger()

ns <- if (full) 4^(5:7) else 4^(5:6)
ds <- c(2L, 4L)
n_seeds <- if (full) 20L else 10L
seeds14 <- as.integer(Sys.getenv("KT_GP_SEEDS14", "8"))
seeds_for <- function(method, n) {
  if (method == "kt_split" && n >= 4^7) return(integer())
  seq_len(if (method == "kt" && n >= 4^7) min(seeds14, n_seeds) else n_seeds)
}
gs <- c(0L, 4L)
has_cpp <- "oversample" %in% names(formals(kernbayes::kernel_thin))
if (!has_cpp) {
  say("kernel_thin() has no Compress++ yet: kernbayes runs KT only")
}

# --- goodpoints: which python, if any ---------------------------------
gp_script <- file.path(here, "kt-goodpoints.py")
gp_path <- Sys.getenv("GOODPOINTS_PATH")
gp_env <- if (nzchar(gp_path)) {
  paste0("PYTHONPATH=", shQuote(paste(c(gp_path, Sys.getenv("PYTHONPATH")),
                                      collapse = .Platform$path.sep)))
} else character()
find_python <- function() {
  cand <- c(Sys.getenv("KB_PYTHON"), Sys.which("python3"), "/usr/bin/python3")
  cand <- unique(cand[nzchar(cand) & file.exists(cand)])
  for (py in cand) {
    ok <- suppressWarnings(system2(py, c("-c", shQuote(
      "import numpy, goodpoints.kt, goodpoints.compress")),
      stdout = FALSE, stderr = FALSE, env = gp_env))
    if (identical(as.integer(ok), 0L)) return(py)
  }
  NULL
}
python <- if (file.exists(gp_script)) find_python()
if (is.null(python)) {
  say(paste("goodpoints not available (no python3 importing numpy and",
            "goodpoints; set KB_PYTHON / GOODPOINTS_PATH): skipping it"))
} else {
  say("goodpoints via %s (PYTHONPATH += %s)", python,
      if (nzchar(gp_path)) gp_path else "nothing")
}

# Runs goodpoints' METHOD on x for the given seeds; a list of
# list(index = 1-based rows, seconds) per seed, NULL on failure.
run_gp <- function(x, method, k_param, g, seeds) {
  inp <- tempfile(fileext = ".csv")
  res <- tempfile(fileext = ".csv")
  on.exit(unlink(c(inp, res)))
  writeLines(do.call(paste, c(lapply(seq_len(ncol(x)), function(j)
    sprintf("%.17g", x[, j])), sep = ",")), inp)
  st <- system2(python, c(shQuote(gp_script), shQuote(inp), shQuote(res),
                          method, sprintf("%.17g", k_param), g,
                          paste(seeds, collapse = ",")),
                env = gp_env, stdout = "", stderr = "")
  if (!identical(as.integer(st), 0L) || !file.exists(res)) {
    say("goodpoints %s failed (status %s)", method, st)
    return(NULL)
  }
  r <- utils::read.csv(res)
  lapply(seeds, function(s) {
    v <- r[r$seed == s, ]
    list(index = v$index + 1L, seconds = v$seconds[1])
  })
}

# --- the yardstick: MMD to the full sample, from scratch ---------------
# sum of k(A[i, ], B[j, ]) over all i, j, in blocks of rows of A, with
# k(a, b) = exp(-|a|^2 / (2 h^2)) exp(-|b|^2 / (2 h^2)) exp(a.b / h^2)
# (exact algebra; the factors stay in range for N(0, I) data and the median
# bandwidth, and it is 6x faster than forming |a - b|^2 in R)
ksum <- function(A, B, h, block = 1024L) {
  wa <- exp(-rowSums(A^2) / (2 * h^2))
  wb <- exp(-rowSums(B^2) / (2 * h^2))
  Bs <- B / h^2
  tot <- 0
  for (s in seq(1L, nrow(A), by = block)) {
    i <- s:min(nrow(A), s + block - 1L)
    E <- exp(tcrossprod(A[i, , drop = FALSE], Bs))
    tot <- tot + sum(wa[i] * (E %*% wb))
  }
  tot
}
mmd_to <- function(x, kxx, h) {
  function(idx) {
    S <- x[idx, , drop = FALSE]
    m <- nrow(S)
    v <- ksum(S, S, h) / m^2 - 2 * ksum(S, x, h) / (m * nrow(x)) + kxx
    sqrt(max(v, 0))
  }
}

# --- the runs ------------------------------------------------------------
runs <- list()
add <- function(impl, method, n, d, seed, idx, secs, mmd) {
  runs[[length(runs) + 1L]] <<- data.frame(
    impl = impl, method = method, n = n, d = d, seed = seed,
    m = length(idx), mmd = mmd(idx), seconds = round(secs, 4))
}
for (n in ns) for (d in ds) {
  set.seed(1000L + 10L * as.integer(log2(n)) + d)
  x <- matrix(stats::rnorm(n * d), n, d)
  rows <- floor(seq(0, n - 1, length.out = min(n, 1000))) + 1
  h <- stats::median(stats::dist(x[rows, , drop = FALSE]))
  k_param <- 2 * h^2
  kern <- gaussian_kernel(bandwidth = h)
  m <- as.integer(round(sqrt(n)))
  kxx <- ksum(x, x, h) / n^2
  mmd <- mmd_to(x, kxx, h)
  say("n = %d, d = %d: h = %.4f, m = %d", n, d, h, m)

  for (s in seeds_for("uniform", n)) {
    set.seed(s)
    t <- exp_timed(sample.int(n, m))
    add("R", "uniform", n, d, s, t, exp_secs(t), mmd)
  }
  methods <- c(kt = -1L, kt_split = -1L, cpp_g0 = 0L, cpp_g4 = 4L)
  for (meth in names(methods)) {
    g <- methods[[meth]]
    sd <- seeds_for(meth, n)
    if (!length(sd)) next
    if (meth %in% c("kt", "kt_split") || has_cpp) {
      for (s in sd) {
        set.seed(s)
        r <- if (meth == "kt") {
          exp_timed(kernel_thin(x, m = m, kernel = kern, method = "kt", standardize = FALSE))
        } else if (meth == "kt_split") {
          exp_timed(kernel_thin(x, m = m, kernel = kern, method = "kt",
                                swap = FALSE, standardize = FALSE))
        } else {
          exp_timed(kernel_thin(x, m = m, kernel = kern,
                                method = "compress++", oversample = g, standardize = FALSE))
        }
        add("kernbayes", meth, n, d, s, r$index, exp_secs(r), mmd)
      }
      say("  kernbayes %s: %d seeds", meth, length(sd))
    }
    if (!is.null(python)) {
      gp <- if (meth == "kt") {
        run_gp(x, "kt", k_param, as.integer(log2(n / m)), sd)
      } else if (meth == "kt_split") {
        run_gp(x, "split", k_param, as.integer(log2(n / m)), sd)
      } else run_gp(x, "compresspp", k_param, g, sd)
      for (i in seq_along(gp)) {
        add("goodpoints", meth, n, d, sd[i], gp[[i]]$index,
            gp[[i]]$seconds, mmd)
      }
      say("  goodpoints %s: %d seeds", meth, length(gp))
    }
  }
}
runs <- do.call(rbind, runs)

# --- summary -------------------------------------------------------------
cells <- unique(runs[c("method", "n", "d")])
summ <- do.call(rbind, lapply(seq_len(nrow(cells)), function(i) {
  v <- runs[runs$method == cells$method[i] & runs$n == cells$n[i] &
              runs$d == cells$d[i], ]
  one <- function(impl) {
    w <- v[v$impl %in% impl, ]
    if (!nrow(w)) return(c(reps = 0, med = NA, iqr = NA, sec = NA))
    c(reps = nrow(w), med = stats::median(w$mmd), iqr = stats::IQR(w$mmd),
      sec = stats::median(w$seconds))
  }
  kb <- one(c("kernbayes", "R"))
  gp <- one("goodpoints")
  a <- v$mmd[v$impl == "kernbayes"]
  b <- v$mmd[v$impl == "goodpoints"]
  p <- if (length(a) > 1 && length(b) > 1) {
    stats::wilcox.test(a, b)$p.value
  } else NA
  data.frame(cells[i, ], m = v$m[1], reps_kb = kb[["reps"]],
             mmd_med_kb = signif(kb[["med"]], 4),
             mmd_iqr_kb = signif(kb[["iqr"]], 3),
             reps_gp = gp[["reps"]], mmd_med_gp = signif(gp[["med"]], 4),
             mmd_iqr_gp = signif(gp[["iqr"]], 3),
             p_wilcox = signif(p, 3), sec_kb = signif(kb[["sec"]], 3),
             sec_gp = signif(gp[["sec"]], 3), row.names = NULL)
}))
summ <- summ[order(summ$d, summ$n, match(summ$method,
                                         c("uniform", "kt", "kt_split",
                                           "cpp_g0", "cpp_g4"))), ]
tabs <- list(`kt-goodpoints-runs.csv` = runs, `kt-goodpoints.csv` = summ)
files <- exp_write(tabs, out)
if (full && dir.exists(file.path("inst", "experiments"))) {
  dir.create(file.path("inst", "extdata"), showWarnings = FALSE)
  con <- gzfile(file.path("inst", "extdata", "kt-goodpoints.csv.gz"), "w")
  utils::write.csv(runs, con, row.names = FALSE)
  close(con)
  files <- c(files, file.path("inst", "extdata", "kt-goodpoints.csv.gz"))
}
op <- options(width = 160)
print(summ, row.names = FALSE)
options(op)
say("wrote %s", paste(files, collapse = ", "))
