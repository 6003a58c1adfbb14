# Shared by test-kt.R, test-compress.R and inst/bench/bench-kt.R (which
# reads the kt_ref_* definitions from this file in the source tree).

# A plain-R transcription of kernel thinning on a kernel matrix K, written
# from the pseudocode of Dwivedi and Mackey (Algorithm 1a, KT-SPLIT with the
# self-balancing Hilbert walk; Algorithm 1b, KT-SWAP) and the reference
# implementation's adaptive threshold, with the flips u laid out as
# kernel_thin() draws them: round j, coreset c, pair p at
# u[j n / 2 + c s / 2 + p + 1] (s = n / 2^j).  Loops are explicit so the
# sums are added in the same order as src/kt.c.
kt_ref_halve <- function(K, P, logmult, u) {
  s <- length(P)
  L <- R <- integer(s / 2)
  sig2 <- 0
  for (p in seq_len(s / 2)) {
    x1 <- P[2 * p - 1]; x2 <- P[2 * p]
    b2 <- K[x1, x1] + K[x2, x2] - 2 * K[x1, x2]
    a <- max(sqrt(sig2 * b2 * logmult), b2)
    if (sig2 == 0) {
      sig2 <- b2
    } else if (a != 0) {
      upd <- 0.5 + (b2 / (2 * a) - 1) * sig2 / a
      if (upd > 0) sig2 <- sig2 + 2 * b2 * upd
    }
    if (a == 0) a <- 1
    alpha <- 0
    for (c in seq_len(p - 1)) {
      alpha <- alpha + ((K[x1, R[c]] - K[x2, R[c]]) - (K[x1, L[c]] - K[x2, L[c]]))
    }
    if (u[p] <= 0.5 * (1 - alpha / a)) {
      L[p] <- x2; R[p] <- x1
    } else {
      L[p] <- x1; R[p] <- x2
    }
  }
  list(L, R)
}

kt_ref_split <- function(K, g, delta, u) {
  n <- nrow(K)
  sets <- list(seq_len(n))
  logmult <- 2 * log(2 * n * g / delta)
  for (j in seq_len(g) - 1L) {
    s <- n / 2^j
    new <- list()
    for (c in seq_along(sets)) {
      off <- j * n / 2 + (c - 1) * s / 2
      h <- kt_ref_halve(K, sets[[c]], logmult - j * 4 * log(2),
                        u[off + seq_len(s / 2)])
      new <- c(new, h)
    }
    sets <- new
  }
  do.call(cbind, sets)
}

kt_ref_mmd2 <- function(K, C, mu) {
  m <- length(C)
  cc <- 0
  ca <- 0
  for (a in seq_len(m)) {
    r <- 0
    for (b in seq_len(m)) r <- r + K[C[a], C[b]]
    cc <- cc + r / m
    if (!is.null(mu)) ca <- ca + mu[C[a]]
  }
  (cc - 2 * ca) / m
}

kt_ref_swap <- function(K, cs, mu) {
  n <- nrow(K)
  m <- nrow(cs)
  best <- n - (m - seq_len(m)) * (n / m)
  bv <- kt_ref_mmd2(K, best, mu)
  for (c in seq_len(ncol(cs))) {
    v <- kt_ref_mmd2(K, cs[, c], mu)
    if (v < bv) { bv <- v; best <- cs[, c] }
  }
  mu0 <- if (is.null(mu)) numeric(n) else mu
  stat <- numeric(n)
  for (i in seq_len(n)) {
    r <- 0
    for (a in seq_len(m)) r <- r + K[i, best[a]]
    stat[i] <- K[i, i] / m - 2 * mu0[i] + 2 * (r / m)
  }
  for (a in seq_len(m)) {
    stat <- stat - K[, best[a]] * (2 / m)
    best[a] <- which.min(stat)
    stat <- stat + K[, best[a]] * (2 / m)
  }
  best
}

# ---- Compress (Shetty, Dwivedi and Mackey, ICLR 2022) ------------------------
# A plain-R transcription of Compress++'s Compress step written from the
# specification in the issue-17 notes (Shetty, Dwivedi and Mackey, ICLR
# 2022, as kernbayes implements it), not from src/kt.c; used by
# test-compress.R (cpp_ref_compresspp()) and by test-skt.R (the coreset of
# stein_kernel_thin(debias = "compress")). Everything works on positions
# 1..N of the kept rows; K is the N x N kernel matrix of those rows.
# Uniforms are drawn with runif() in the specification's order. Loops are
# explicit, sums are added in index order.

# N = 2^floor(log2 n) rows kept by standard thinning from the end (the
# spec's 18:35 update: a power of 2, not of 4).
cpp_ref_keep <- function(n) {
  N <- 1
  while (2 * N <= n) N <- 2 * N
  rev(as.integer(seq(n - 1, 0, length.out = N))) + 1L
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

