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

# N = 2^floor(log2 n) rows kept by standard thinning from the end (the
# spec's 18:35 update: a power of 2, not of 4).
cpp_ref_keep <- function(n) {
  N <- 1
  while (2 * N <= n) N <- 2 * N
  rev(as.integer(seq(n - 1, 0, length.out = N))) + 1L
}

# The kernel of the call, resolved on all n rows, then trimmed to `keep`.
cpp_ref_kernel <- function(x, score, keep) {
  K <- if (is.null(score)) {
    kernel_matrix(x, kernel = gaussian_kernel(precon = "med"))
  } else {
    stein_kernel_matrix(x, score, standardize = FALSE)
  }
  K[keep, keep, drop = FALSE]
}

# Kernel halving, KT-SPLIT, the MMD and KT-SWAP on a kernel matrix:
# kt_ref_halve(), kt_ref_split(), kt_ref_mmd2(), kt_ref_swap() of
# helper-kt-ref.R (the transcription of method "kt").

# Halve(S) of a Compress node: S positions into K; returns half of S, in
# order. Two readings of the specification are fixed here (see the notes):
# - the unique swap replaces core[a] by the non-coreset point with the
#   LOWEST stat, if that is strictly below stat[core[a]] (the first such
#   point among equal lows); the spec's words "the first with stat strictly
#   below" are read as in goodpoints' refine (unique = TRUE), a running
#   minimum started at stat[core[a]];
# - rel(L) and rel(Bs) are equal in exact arithmetic when L is the odd
#   positions (complementary halves have the same MMD to the node's
#   points); the package then keeps L without comparing (pinned, so that
#   rounding does not decide); otherwise rel is compared as kt_ref_mmd2()
#   sums it.
cpp_ref_node <- function(K, S, st) {
  s <- length(S)
  KS <- K[S, S, drop = FALSE]
  if (s == 4) {
    u <- runif(1)
    A <- KS[2, 3] + KS[1, 4]
    B <- KS[1, 2] + KS[3, 4]
    C <- KS[1, 3] + KS[2, 4]
    pair <- if (A < B) {
      if (A < C) c(1L, 4L) else c(1L, 3L)
    } else if (B < C) c(1L, 2L) else c(1L, 3L)
    if (u >= 0.5) pair <- setdiff(1:4, pair)
    return(S[sort(pair)])
  }
  u <- runif(s / 2)
  delta_h <- st$halve_prob * s^2
  h <- kt_ref_halve(KS, seq_len(s), 2 * log(2 * s / delta_h), u)
  core <- h[[1]]
  non <- h[[2]]
  if (st$swap) {
    mp <- s / 2
    mu <- numeric(s)
    for (i in seq_len(s)) {
      r <- 0
      for (j in seq_len(s)) r <- r + KS[i, j]
      mu[i] <- r / s
    }
    Bs <- seq(2L, s, by = 2L)
    odd <- seq(1L, s - 1L, by = 2L)
    if (!identical(as.integer(core), odd) &&
        !(kt_ref_mmd2(KS, core, mu) < kt_ref_mmd2(KS, Bs, mu))) {
      core <- Bs
      non <- seq(1L, s - 1L, by = 2L)
    }
    stat <- numeric(s)
    for (i in seq_len(s)) {
      r <- 0
      for (c in core) r <- r + KS[i, c]
      stat[i] <- KS[i, i] / mp + 2 * (r / mp - mu[i])
    }
    for (a in seq_len(mp)) {
      cur <- core[a]
      stat <- stat - KS[cur, ] * 2 / mp
      best <- 0L
      low <- stat[cur]
      for (b in seq_along(non)) {
        if (stat[non[b]] < low) { low <- stat[non[b]]; best <- b }
      }
      if (best > 0L) {
        core[a] <- non[best]
        non[best] <- cur
      }
      stat <- stat + KS[core[a], ] * 2 / mp
    }
  }
  v <- runif(1)
  if (v > 0.5) S[non] else S[core]
}

cpp_ref_compress <- function(K, S, st) {
  if (length(S) == st$base) return(cpp_ref_node(K, S, st))
  q <- length(S) / 4
  D <- unlist(lapply(0:3, function(i) {
    cpp_ref_compress(K, S[i * q + seq_len(q)], st)
  }))
  cpp_ref_node(K, D, st)
}

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
