# kernel_thin(method = "compress++"): the C code against an independent
# plain-R transcription (cpp_ref_*, below) on the same uniforms, the size
# and bin structure of the intermediate coreset, quality against uniform
# subsampling, argument checks and reproducibility (issue 17).

# A plain-R transcription of Compress++ written from the specification in
# the issue-17 notes (Shetty, Dwivedi and Mackey, ICLR 2022, as kernbayes
# implements it), not from src/kt.c. Everything works on positions 1..N of
# the kept rows; K is the N x N kernel matrix of those rows. Uniforms are
# drawn with runif() in the specification's order, so after set.seed(s)
# the result is the one kernel_thin() gives after set.seed(s). Loops are
# explicit, sums are added in index order.

# The kernel of the call, resolved on all n rows, then trimmed to `keep`.
cpp_ref_kernel <- function(x, score, keep) {
  K <- if (is.null(score)) {
    kernel_matrix(x, kernel = gaussian_kernel(precon = "med"))
  } else {
    stein_kernel_matrix(x, score, standardize = FALSE)
  }
  K[keep, keep, drop = FALSE]
}

# cpp_ref_keep(), cpp_ref_node() and cpp_ref_compress() are in
# helper-kt-ref.R (shared with test-skt.R's coreset route).

# Compress++ of the N x N kernel matrix K (N = 2^k) to m points (NULL:
# 2^floor(k/2)) with oversampling g: nb = 4 bins (k even) or 8 (k odd) of
# consecutive positions. Returns positions into 1..N: `index` and, in
# case B, the intermediate coreset `compress`.
cpp_ref_compresspp <- function(K, g, m, swap, stein, delta = 0.5) {
  N <- nrow(K)
  k <- round(log2(N))
  nb <- if (k %% 2 == 0) 4 else 8
  bin <- N / nb
  if (is.null(m)) m <- 2^(k %/% 2)
  base <- 4^(g + 1)
  if (bin < base) {
    rounds <- round(log2(N / m))
    u <- runif(rounds * N / 2)
    cs <- kt_ref_split(K, rounds, delta, u)
    idx <- if (swap) kt_ref_swap(K, cs, if (!stein) rowMeans(K)) else cs[, 1]
    return(list(index = idx, compress = NULL))
  }
  hh <- g + log2(nb) / 2
  ls <- k / 2
  thin_frac <- hh / (hh + 2^hh * (ls - hh))
  delta_t <- delta * thin_frac
  delta_c <- delta * (1 - thin_frac)
  st <- list(base = base, swap = swap,
             halve_prob = delta_c / base / (log2(bin) / 2 - g) / N)
  C <- unlist(lapply(seq_len(nb) - 1, function(b) {
    cpp_ref_compress(K, b * bin + seq_len(bin), st)
  }))
  KC <- K[C, C, drop = FALSE]
  M <- length(C)
  rounds <- round(log2(M / m))
  u <- runif(rounds * M / 2)
  cs <- kt_ref_split(KC, rounds, delta_t, u)
  sel <- if (swap) kt_ref_swap(KC, cs, if (!stein) rowMeans(KC)) else cs[, 1]
  list(index = C[sel], compress = C)
}

# kernel_thin() and the transcription on the same seed; indices into x.
cpp_ref_pair <- function(x, score, g, m, swap, seed) {
  keep <- cpp_ref_keep(nrow(x))
  K <- cpp_ref_kernel(x, score, keep)
  set.seed(seed)
  th <- kernel_thin(x, score, method = "compress++", oversample = g, m = m,
                    swap = swap, delta = 0.5, standardize = FALSE)
  set.seed(seed)
  ref <- cpp_ref_compresspp(K, g, m, swap, !is.null(score))
  list(th = th, index = keep[ref$index],
       compress = if (!is.null(ref$compress)) keep[ref$compress])
}

# The default size 2^floor(k / 2) of N = 2^k kept rows.
cpp_ref_m0 <- function(N) 2^(round(log2(N)) %/% 2)

test_that("Compress++ matches the R transcription on the same uniforms", {
  skip_on_cran()
  # 256, 1024: 4 bins; 128, 1000 (trimmed to 512): 8 bins; n = 128 with
  # g = 2 falls back to kernel thinning (bins of 16 < 4^3)
  for (n in c(256, 1024, 1000, 128)) {
    N <- length(cpp_ref_keep(n))
    for (stein in c(TRUE, FALSE)) {
      set.seed(n + stein)
      x <- matrix(rnorm(2 * n), n)
      score <- if (stein) -x
      for (swap in c(TRUE, FALSE)) {
        for (g in 0:2) {
          for (m in list(NULL, cpp_ref_m0(N) / 2)) {
            seed <- 100 * g + 10 * swap + length(m)
            r <- cpp_ref_pair(x, score, g, m, swap, seed)
            info <- sprintf("n = %d, stein = %s, swap = %s, g = %d, m = %s",
                            n, stein, swap, g,
                            if (is.null(m)) "NULL" else m)
            expect_identical(r$th$index, as.integer(r$index), info = info)
            if (!is.null(r$compress)) {
              expect_identical(r$th$compress, as.integer(r$compress),
                               info = info)
            } else {
              expect_null(r$th$compress, info = info)
            }
            expect_length(r$th$index, if (is.null(m)) cpp_ref_m0(N) else m)
          }
        }
      }
    }
  }
})

test_that("Compress++ with bins below 4^(g+1) is kernel thinning of the kept rows", {
  # n = 64, 100 (trimmed to 64): 4 bins of 16; n = 128: 8 bins of 16
  for (n in c(64, 100, 128)) {
    for (stein in c(TRUE, FALSE)) {
      set.seed(n)
      x <- matrix(rnorm(2 * n), n)
      score <- if (stein) -x
      for (swap in c(TRUE, FALSE)) {
        for (m in list(NULL, 4)) {
          r <- cpp_ref_pair(x, score, 2, m, swap, seed = 7 + n)
          info <- sprintf("n = %d, stein = %s, swap = %s, m = %s", n, stein,
                          swap, if (is.null(m)) "NULL" else m)
          expect_identical(r$th$index, as.integer(r$index), info = info)
          expect_null(r$th$compress, info = info)
        }
      }
    }
  }
})

test_that("the intermediate coreset has nb 2^g sqrt(N / nb) distinct rows, equally from each bin", {
  for (n in c(1024, 1000, 2048)) {
    set.seed(3)
    x <- matrix(rnorm(2 * n), n)
    keep <- cpp_ref_keep(n)
    N <- length(keep)
    nb <- if (round(log2(N)) %% 2 == 0) 4 else 8
    for (g in 0:2) {
      set.seed(g)
      th <- kernel_thin(x, -x, method = "compress++", oversample = g)
      C <- th$compress
      M <- nb * 2^g * sqrt(N / nb)
      expect_length(C, M)
      expect_false(anyDuplicated(C) > 0)
      expect_true(all(C %in% keep))
      pos <- match(C, keep)
      bin <- (pos - 1) %/% (N / nb) + 1
      expect_equal(as.vector(table(factor(bin, seq_len(nb)))),
                   rep(M / nb, nb))
      expect_identical(as.integer(bin), rep(seq_len(nb), each = M / nb))
      expect_true(all(th$index %in% C))
      expect_length(th$index, cpp_ref_m0(N))
    }
  }
})

test_that("Compress++ halves the KSD of a uniform subsample (issue 17 goal)", {
  skip_on_cran()
  n <- 2^14
  r <- sapply(1:10, function(s) {
    set.seed(s)
    x <- matrix(rnorm(2 * n), n)
    k <- kernel_thin(x, -x, method = "compress++")   # oversample = 1
    u <- sample(n, 128)
    c(cpp = ksd(k$points, -k$points), unif = ksd(x[u, ], -x[u, ]),
      m = length(k$index))
  })
  expect_true(all(r["m", ] == 128))
  med <- apply(r, 1, median)
  expect_lt(med[["cpp"]], 0.5 * med[["unif"]])
})

test_that("Compress++ beats a uniform subsample on the base-kernel MMD", {
  skip_on_cran()
  n <- 2^12
  r <- sapply(1:7, function(s) {
    set.seed(s)
    x <- matrix(rnorm(2 * n), n)
    K <- kernel_matrix(x, kernel = gaussian_kernel(precon = "med"))
    mmd <- function(idx) {
      w <- tabulate(idx, n) / length(idx) - 1 / n
      sqrt(max(0, sum(w * (K %*% w))))
    }
    k <- kernel_thin(x, method = "compress++")
    c(cpp = mmd(k$index), unif = mmd(sample(n, length(k$index))))
  })
  med <- apply(r, 1, median)
  expect_lt(med[["cpp"]], med[["unif"]])
})

test_that("bad Compress++ arguments are named before any score call", {
  set.seed(1)
  x <- matrix(rnorm(2 * 256), 256)
  cnt <- 0
  sc <- function(p) { cnt <<- cnt + 1; -p }
  for (call in list(
    quote(kernel_thin(x, sc, method = "compress++", oversample = -1)),
    quote(kernel_thin(x, sc, method = "compress++", oversample = 1.5)),
    quote(kernel_thin(x, sc, method = "compress++", oversample = NA)),
    quote(kernel_thin(x, sc, method = "compress++", m = 12)),
    quote(kernel_thin(x, sc, method = "compress++", m = 32)),
    quote(kernel_thin(x, sc, method = "compres++")),
    quote(kernel_thin(x, sc, method = "Compress++")),
    quote(kernel_thin(x, sc, method = "compress")))) {
    expect_error(eval(call), class = "kb_error_arg")
  }
  expect_equal(cnt, 0)
})

test_that("Compress++ is reproducible under set.seed and changes with it", {
  set.seed(2)
  x <- matrix(rnorm(2 * 1024), 1024)
  run <- function(seed) {
    set.seed(seed)
    kernel_thin(x, -x, method = "compress++", oversample = 1)
  }
  a <- run(5)
  b <- run(5)
  d <- run(6)
  expect_identical(a$index, b$index)
  expect_identical(a$compress, b$compress)
  expect_false(identical(a$compress, d$compress))
  expect_false(identical(a$index, d$index))
  set.seed(5)
  e <- kernel_thin(x, -x, method = "compress++", oversample = 1, nthreads = 2)
  expect_identical(a$index, e$index)
  expect_identical(a$compress, e$compress)
})
