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
