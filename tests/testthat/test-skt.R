# stein_kernel_thin() and stratified_round(): the rounding against its
# defining properties, KT-SWAP over all rows (kb_kt_refine) against a
# plain-R version written from its description, the end-to-end result
# against closed-form Stein kernel sums, and the debiasing goal (a chain
# with its burn-in kept).

# ---- independent plain-R references ------------------------------------------

# The Langevin Stein kernel of IMQ phi(r) = (c^2 + r)^beta, r = |x - y|^2
# (L = I), from the formula
# k_p = s_x's_y phi + 2 phi' u'(s_y - s_x) - 4 phi'' |u|^2 - 2 d phi',
# u = x - y, one pair at a time.
skt_ref_kp <- function(x, s, c = 1, beta = -0.5) {
  n <- nrow(x)
  d <- ncol(x)
  K <- matrix(0, n, n)
  for (i in seq_len(n)) {
    for (j in seq_len(n)) {
      u <- x[i, ] - x[j, ]
      r <- sum(u^2)
      b <- c^2 + r
      phi <- b^beta
      phi1 <- beta * b^(beta - 1)
      phi2 <- beta * (beta - 1) * b^(beta - 2)
      K[i, j] <- sum(s[i, ] * s[j, ]) * phi +
        2 * phi1 * sum(u * (s[j, ] - s[i, ])) - 4 * phi2 * r - 2 * d * phi1
    }
  }
  K
}

# KSD^2 of the equally weighted multiset `idx` (V-statistic).
skt_ref_ksd2 <- function(K, idx) {
  tot <- 0
  for (a in idx) for (b in idx) tot <- tot + K[a, b]
  tot / length(idx)^2
}

# KT-SWAP over all rows: for a = 1..m in turn, c[a] becomes the row i of the
# whole sample that minimises the KSD^2 of the coreset with c[a] replaced by
# i (the first such i on ties; the search sees the coreset as already
# updated at 1..a-1).
skt_ref_refine <- function(K, cand) {
  n <- nrow(K)
  cc <- cand
  for (a in seq_along(cc)) {
    v <- numeric(n)
    for (i in seq_len(n)) {
      ci <- cc
      ci[a] <- i
      v[i] <- skt_ref_ksd2(K, ci)
    }
    cc[a] <- which(v == min(v))[1L]
  }
  cc
}

# Greedy Stein thinning with repeats (Riabiz et al.): step j adds the row
# minimising k_p(x_i, x_i) + 2 sum_{l < j} k_p(x_i, x_{pi_l}).
skt_ref_stein_thin <- function(K, m) {
  idx <- integer(0)
  for (j in seq_len(m)) {
    crit <- diag(K) + 2 * (if (length(idx)) rowSums(K[, idx, drop = FALSE]) else 0)
    idx <- c(idx, which.min(crit))
  }
  idx
}

skt_resolved <- function(x, s) {
  kernbayes:::stein_setup(x, s, imq_kernel(), FALSE, rows = seq_len(nrow(x)))
}

# ---- 1. stratified_round ----------------------------------------------------

test_that("stratified_round: length N, sorted, rows in range, floors kept", {
  sr <- kernbayes:::stratified_round
  set.seed(11)
  for (rep in 1:30) {
    n <- sample(3:12, 1)
    w <- rexp(n)
    w[sample(n, 1)] <- 0            # a row of zero weight is never drawn
    w <- w / sum(w)
    N <- sample(c(4L, 16L, 37L, 64L), 1)
    r <- sr(w, N)
    expect_length(r, N)
    expect_false(is.unsorted(r))
    expect_true(all(r >= 1 & r <= n & r == round(r)))
    cnt <- tabulate(r, n)
    expect_equal(sum(cnt), N)
    expect_true(all(cnt >= floor(N * w)))
    expect_true(all(cnt[w == 0] == 0))
    # the remainder rows: N - sum(floor(N w)) of them, on top of the floors
    expect_equal(sum(cnt - floor(N * w)), N - sum(floor(N * w)))
  }
})

test_that("stratified_round: remainder shares that sum past 1 before the last row", {
  # 131069 equal remainders and a last row of weight 0: the cumulative
  # shares reach 1 + 4.4e-16 at row 131069 even with long double sums (in
  # double precision, as on arm64, far smaller samples do), and setting the
  # last share to 1 left them unsorted: findInterval() stopped
  sr <- kernbayes:::stratified_round
  k <- 131069
  w <- c(rep(1, k), 0) / k
  set.seed(3)
  for (N in c(1L, 2L, 5L)) {
    r <- sr(w, N)
    expect_length(r, N)
    expect_false(is.unsorted(r))
    expect_true(all(r >= 1 & r <= k))
  }
})

test_that("stratified_round: counts within the stratified bounds", {
  # Li, Dwivedi and Mackey's rounding draws one uniform per stratum of the
  # remainders (not one shared uniform, systematic), so a row whose
  # remainder interval (narrower than one stratum) straddles a boundary may
  # get two extra copies: counts lie in [floor(N w), floor(N w) + 2], and a
  # count 1.1 away from N w occurs (w = (.45, .45, .1), N = 2).
  sr <- kernbayes:::stratified_round
  set.seed(3)
  w <- c(0.45, 0.45, 0.1)
  cnt <- replicate(500, tabulate(sr(w, 2L), 3))
  expect_true(all(cnt >= floor(2 * w) & cnt <= floor(2 * w) + 2))
  expect_true(any(cnt[2, ] == 2))
  set.seed(12)
  for (rep in 1:30) {
    n <- sample(3:12, 1)
    w <- rexp(n); w <- w / sum(w)
    N <- sample(c(4L, 16L, 37L, 64L), 1)
    cnt <- tabulate(sr(w, N), n)
    expect_true(all(cnt >= floor(N * w) & cnt <= floor(N * w) + 2))
    expect_equal(sum(cnt), N)
  }
})

test_that("stratified_round: exact when N w is integral", {
  sr <- kernbayes:::stratified_round
  set.seed(5)
  w <- c(1, 2, 3, 2, 0) / 8
  for (N in c(8L, 16L, 64L)) {
    r <- sr(w, N)
    expect_identical(as.numeric(tabulate(r, 5)), N * w)
    expect_identical(as.integer(r), rep.int(1:5, N * w))
  }
  # all mass on one row
  expect_identical(as.integer(sr(c(0, 1, 0), 7L)), rep(2L, 7))
  # uniform weights, N = n: every row once
  expect_identical(as.integer(sr(rep(0.1, 10), 10L)), 1:10)
})

test_that("stratified_round is unbiased: mean count of row i is N w_i", {
  sr <- kernbayes:::stratified_round
  set.seed(2024)
  w <- c(0.05, 0.13, 0.31, 0.07, 0.22, 0.02, 0.2)
  N <- 10L
  R <- 4000
  cnt <- t(vapply(seq_len(R), function(k) tabulate(sr(w, N), 7), numeric(7)))
  mu <- colMeans(cnt)
  # counts are floor(N w_i) + Bernoulli-like parts: sd <= 1; 5 standard
  # errors from the sample sd (at least 0.5 / sqrt(R))
  se <- pmax(apply(cnt, 2, sd), 0.5) / sqrt(R)
  expect_true(all(abs(mu - N * w) < 5 * se))
  # and the total is always N
  expect_true(all(rowSums(cnt) == N))
})

# ---- 2. KT-SWAP over all rows (kb_kt_refine) -------------------------------

test_that("the closed-form Stein kernel matches stein_kernel_matrix (L = I)", {
  set.seed(21)
  x <- matrix(rnorm(30), 15)
  s <- -x %*% diag(c(1, 2))
  K <- skt_ref_kp(x, s)
  expect_equal(unname(stein_kernel_matrix(x, s, imq_kernel(), FALSE, nthreads = 1)),
               K, tolerance = 1e-12)
})

test_that("kb_kt_refine equals the plain-R KT-SWAP over all rows", {
  set.seed(31)
  n <- 60L
  x <- rbind(matrix(rnorm(2 * (n - 10)), ncol = 2),
             matrix(rnorm(20, 3), ncol = 2))          # 10 biased rows
  s <- -x
  K <- skt_ref_kp(x, s)
  st <- skt_resolved(x, s)
  for (m in c(1L, 4L, 8L)) {
    cands <- cbind(sample(n, m, replace = TRUE), sample(n - 10, m) + 10L)
    storage.mode(cands) <- "integer"
    out <- .Call(kernbayes:::C_kb_kt_refine, st$x, st$s, st$kernel, cands, 1L)
    ref <- cbind(skt_ref_refine(K, cands[, 1]), skt_ref_refine(K, cands[, 2]))
    expect_identical(out, matrix(as.integer(ref), m))
    # a swap never increases the KSD
    for (c in 1:2) {
      expect_lte(skt_ref_ksd2(K, out[, c]), skt_ref_ksd2(K, cands[, c]) + 1e-12)
    }
  }
  # repeated rows in a candidate, two threads
  cands <- matrix(c(5L, 5L, 5L, 60L, 1L, 2L), 3)
  expect_identical(
    .Call(kernbayes:::C_kb_kt_refine, st$x, st$s, st$kernel, cands, 2L),
    cbind(as.integer(skt_ref_refine(K, cands[, 1])),
          as.integer(skt_ref_refine(K, cands[, 2]))))
})

test_that("kb_kt_refine: one point goes to the row of smallest k_p(x, x)", {
  # m = 1: KSD^2 of {i} is k_p(x_i, x_i) = |s_i|^2 + 2 d for IMQ(1, -1/2)
  set.seed(41)
  x <- matrix(rnorm(40), 20)
  s <- -x
  st <- skt_resolved(x, s)
  out <- .Call(kernbayes:::C_kb_kt_refine, st$x, st$s, st$kernel,
               matrix(c(3L, 17L), 1), 1L)
  expect_identical(out, matrix(rep(which.min(rowSums(s^2)), 2), 1))
})

# ---- 3. stein_kernel_thin end to end ----------------------------------------

skt_data <- function(seed, n = 256L) {
  set.seed(seed)
  x <- rbind(matrix(rnorm(2 * 32, 3), ncol = 2),   # 32 burn-in rows
             matrix(rnorm(2 * (n - 32)), ncol = 2))
  list(x = x, s = -x)
}

test_that("stein_kernel_thin: size, range, reproducibility, KSD path", {
  dd <- skt_data(51)
  set.seed(1)
  a <- stein_kernel_thin(dd$x, dd$s, m = 16, nthreads = 1)
  set.seed(1)
  b <- stein_kernel_thin(dd$x, dd$s, m = 16, nthreads = 1)
  expect_identical(a$index, b$index)
  expect_s3_class(a, "kb_thin")
  expect_equal(a$m, 16L)
  expect_length(a$index, 16L)
  expect_true(all(a$index >= 1 & a$index <= 256))
  expect_identical(unname(a$points), dd$x[a$index, ])
  expect_equal(a$used, 256)              # m 2^g rows rounded from the weights
  expect_length(a$ksd, 16L)
  expect_equal(a$ksd[16], as.numeric(ksd(a)), tolerance = 1e-10)
  # the debiasing weights: a probability vector with its KSD attached
  w <- a$weights_debias
  expect_length(w, 256L)
  expect_true(all(w >= 0))
  expect_equal(sum(w), 1, tolerance = 1e-12)
  # the burn-in rows get little weight
  expect_lt(sum(w[1:32]), 0.05)
  # the two candidates; the result is the better one
  expect_named(a$candidates, c("kernel_thinning", "stein_thinning"))
  expect_equal(as.numeric(ksd(a)), min(a$candidates), tolerance = 1e-10)
  # default m: about sqrt(n)
  set.seed(2)
  expect_equal(stein_kernel_thin(dd$x, dd$s, nthreads = 1)$m, 16L)
})

test_that("stein_kernel_thin against closed forms (standardize = FALSE)", {
  dd <- skt_data(52, n = 128L)
  K <- skt_ref_kp(dd$x, dd$s)
  set.seed(3)
  a <- stein_kernel_thin(dd$x, dd$s, m = 16, standardize = FALSE, nthreads = 1)
  # the KSD path of the selected points, from the formula
  path <- vapply(1:16, function(j) sqrt(skt_ref_ksd2(K, a$index[1:j])), 0)
  expect_equal(a$ksd, path, tolerance = 1e-10)
  # the Stein thinning candidate: greedy Stein thinning, then KT-SWAP over
  # all rows
  st_ref <- skt_ref_refine(K, skt_ref_stein_thin(K, 16))
  expect_equal(unname(a$candidates["stein_thinning"]),
               sqrt(skt_ref_ksd2(K, st_ref)), tolerance = 1e-10)
  # the simplex weights' KSD: sqrt(w' K w)
  w <- as.numeric(a$weights_debias)
  expect_equal(attr(a$weights_debias, "ksd"), sqrt(drop(w %*% K %*% w)),
               tolerance = 1e-8)
  # and no equal-weight 16-point coreset beats the optimal weights by much:
  # the debiased KSD is at most that of the sample itself
  expect_lte(attr(a$weights_debias, "ksd"), sqrt(mean(K)) + 1e-10)
})

test_that("stein_kernel_thin: weighted, debias choices, Compress++, threads", {
  dd <- skt_data(53)
  set.seed(4)
  a <- stein_kernel_thin(dd$x, dd$s, m = 16, weighted = TRUE,
                         standardize = FALSE, nthreads = 1)
  expect_length(a$weights, 16L)
  expect_true(all(a$weights >= 0))
  expect_equal(sum(a$weights), 1, tolerance = 1e-10)
  expect_lte(a$ksd_weighted, as.numeric(ksd(a)) + 1e-12)
  # ksd_weighted is the KSD of the points under those weights
  Kp <- skt_ref_kp(a$points, -a$points)
  expect_equal(a$ksd_weighted, sqrt(drop(a$weights %*% Kp %*% a$weights)),
               tolerance = 1e-8)
  # debias = "stein": counts of n greedy steps, a probability vector
  set.seed(5)
  b <- stein_kernel_thin(dd$x, dd$s, m = 16, debias = "stein", nthreads = 1)
  expect_equal(b$debias, "stein")
  expect_equal(sum(b$weights_debias), 1, tolerance = 1e-12)
  expect_true(all(b$weights_debias * 256 == round(b$weights_debias * 256)))
  expect_equal(b$ksd[16], as.numeric(ksd(b)), tolerance = 1e-10)
  set.seed(5)
  b2 <- stein_kernel_thin(dd$x, dd$s, m = 16, debias = "simplex", nthreads = 1)
  expect_equal(b2$debias, "simplex")
  expect_equal(b2$ksd[16], as.numeric(ksd(b2)), tolerance = 1e-10)
  # Compress++: a power of 2
  dd2 <- skt_data(54, n = 1024L)
  set.seed(6)
  cp <- stein_kernel_thin(dd2$x, dd2$s, method = "compress++", nthreads = 1)
  expect_equal(cp$m, 32L)
  expect_equal(cp$kt_method, "compress++")
  set.seed(6)
  cp8 <- stein_kernel_thin(dd2$x, dd2$s, m = 8, method = "compress++",
                           nthreads = 1)
  expect_equal(cp8$m, 8L)
  expect_true(all(cp8$index >= 1 & cp8$index <= 1024))
  expect_equal(cp8$ksd[8], as.numeric(ksd(cp8)), tolerance = 1e-10)
  # threads: identical results on 1 and 2
  for (args in list(list(), list(debias = "stein"),
                    list(method = "compress++", m = 8, weighted = TRUE))) {
    set.seed(7)
    r1 <- do.call(stein_kernel_thin, c(list(dd2$x, dd2$s, nthreads = 1),
                                       if (is.null(args$m)) list(m = 32), args))
    set.seed(7)
    r2 <- do.call(stein_kernel_thin, c(list(dd2$x, dd2$s, nthreads = 2),
                                       if (is.null(args$m)) list(m = 32), args))
    expect_identical(r1$index, r2$index)
    expect_identical(r1$ksd, r2$ksd)
    expect_identical(r1$weights, r2$weights)
  }
})

# ---- 4. the debiasing goal: a chain with its burn-in kept --------------------

test_that("SKT beats Stein thinning and KT on a chain with its burn-in", {
  skip_on_cran()
  # RWM (step 0.2: a burn-in of about 270-340 states) on a correlated 2-d
  # Gaussian started at (15, 15), all 4096 states kept. (With step 0.5 the
  # burn-in is about 100 states and W2, dominated by the 64 points'
  # quantisation error, no longer separates the methods: medians 0.246 /
  # 0.244 / 0.245 for SKT / Stein thinning / KT, while the KSD still does:
  # 0.049 / 0.080 / 0.057.) Every method is judged by one kernel (IMQ, L = I, no
  # standardisation) and by W2 to an exact sample of 1024 points (the
  # m = 64 points each repeated 16 times; exact assignment).
  Sig <- matrix(c(1, 0.8, 0.8, 1), 2)
  tg <- gaussian_target(c(0, 0), Sig)
  set.seed(99)
  ref <- sample_target(tg, 1024)
  res <- matrix(NA_real_, 5, 6,
                dimnames = list(NULL, c("ksd_skt", "ksd_st", "ksd_kt",
                                        "w2_skt", "w2_st", "w2_kt")))
  for (seed in 1:5) {
    set.seed(seed)
    ch <- rwm(tg, c(15, 15), 4096, step_size = 0.2, progress = FALSE)
    x <- ch$x
    s <- ch$score
    a <- stein_kernel_thin(x, s, m = 64)
    b <- stein_thin(x, s, 64)
    k <- kernel_thin(x, s, m = 64)
    q <- function(o) c(ksd(x[o$index, ], s[o$index, ], kernel = imq_kernel(),
                           standardize = FALSE),
                       as.numeric(wasserstein2(x[rep(o$index, 16), ], ref)))
    v <- rbind(q(a), q(b), q(k))
    res[seed, ] <- c(v[, 1], v[, 2])
  }
  med <- apply(res, 2, stats::median)
  if (nzchar(Sys.getenv("KB_SKT_REPORT"))) print(rbind(res, median = med))
  expect_lt(med[["ksd_skt"]], med[["ksd_st"]])
  expect_lt(med[["ksd_skt"]], med[["ksd_kt"]])
  expect_lt(med[["w2_skt"]], med[["w2_st"]])
  expect_lt(med[["w2_skt"]], med[["w2_kt"]])
})

# ---- 5. the coreset route (debias = "compress", issue 35) --------------------
# The internal options kernbayes.skt_full_max (the automatic switch: the
# full-matrix path up to this many rows, default 2^13) and
# kernbayes.skt_coreset (the coreset size aimed at, default 4096) are
# lowered here so that the coreset route runs on small samples.

# The automatic result and the one of an explicit `debias`, same seed.
skt_auto_vs <- function(dd, debias) {
  set.seed(1)
  a <- stein_kernel_thin(dd$x, dd$s, m = 16, nthreads = 1)
  set.seed(1)
  b <- stein_kernel_thin(dd$x, dd$s, m = 16, debias = debias, nthreads = 1)
  expect_identical(a, b)
  expect_equal(a$debias, debias)
  a
}

test_that("the automatic debiasing: full path up to the switch, coreset above", {
  dd <- skt_data(61, n = 256L)
  op <- options(kernbayes.skt_full_max = 256, kernbayes.skt_coreset = 64)
  on.exit(options(op), add = TRUE)
  a <- skt_auto_vs(dd, "simplex")
  expect_null(a$coreset)
  expect_output(print(a), "simplex weights of the whole sample")
  options(kernbayes.skt_full_max = 255)   # restored by the on.exit above
  c <- skt_auto_vs(dd, "compress")
  expect_length(c$coreset, 64L)
  expect_equal(c$coreset_oversample, 1L)
  expect_equal(c$used, 64)                   # the multiset: m 2^g >= M rows
  w <- c$weights_debias
  expect_length(w, 256L)
  expect_equal(sum(w), 1, tolerance = 1e-12)
  expect_true(all(w[-c$coreset] == 0))
  expect_output(print(c), "64-point Compress\\+\\+ coreset \\(oversample 1\\)")
  expect_equal(c$ksd[16], as.numeric(ksd(c)), tolerance = 1e-10)
  # threads: identical results on 1 and 2
  set.seed(1)
  c3 <- stein_kernel_thin(dd$x, dd$s, m = 16, nthreads = 2)
  expect_identical(c$index, c3$index)
  expect_identical(c$weights_debias, c3$weights_debias)
  # Compress++ of the multiset as well
  set.seed(2)
  cp <- stein_kernel_thin(dd$x, dd$s, method = "compress++", nthreads = 1)
  expect_equal(cp$debias, "compress")
  expect_equal(cp$m, 16L)
  expect_equal(cp$used, 256L)
})

# The coreset route written from its description, on plain-R steps:
# Compress (helper-kt-ref.R's transcription, from the Compress++ spec) of
# the N = 2^k kept rows with the oversampling g whose coreset size
# bins 2^g sqrt(bin) is the largest at most min(target, N / 2); the
# KSD-optimal simplex weights of the coreset by quadprog's dual QP (not
# the package's active-set solver); stratified rounding (one uniform per
# stratum of the remainders) to the smallest m 2^r >= M rows, sorted by
# coreset position; KT-SPLIT (kt_ref_split) in r rounds, the coreset of
# smallest KSD; greedy Stein thinning; KT-SWAP of both over all rows
# (skt_ref_refine); the better one.
skt_ref_coreset_route <- function(x, s, m, target, seed) {
  n <- nrow(x)
  K <- stein_kernel_matrix(x, s, standardize = FALSE, nthreads = 1)
  keep <- cpp_ref_keep(n)
  N <- length(keep)
  k <- round(log2(N))
  nb <- if (k %% 2 == 0) 4 else 8
  bin <- N / nb
  g <- 0
  while (nb * 2^(g + 1) * sqrt(bin) <= min(target, N / 2)) g <- g + 1
  base <- 4^(g + 1)
  halve_prob <- 0.5 * (1 - (g + log2(nb) / 2) /
    ((g + log2(nb) / 2) + 2^(g + log2(nb) / 2) * (k / 2 - g - log2(nb) / 2))) /
    base / (log2(bin) / 2 - g) / N
  st <- list(base = base, swap = TRUE, halve_prob = halve_prob)
  KN <- K[keep, keep]
  set.seed(seed)
  C <- unlist(lapply(seq_len(nb) - 1, function(b) {
    cpp_ref_compress(KN, b * bin + seq_len(bin), st)
  }))
  rows <- keep[C]
  M <- length(rows)
  KC <- K[rows, rows]
  qp <- quadprog::solve.QP(2 * (KC + 1e-12 * max(diag(KC)) * diag(M)),
                           numeric(M), cbind(1, diag(M)), c(1, numeric(M)),
                           meq = 1)
  w <- pmax(qp$solution, 0)
  w <- w / sum(w)
  Nr <- m
  while (Nr < M) Nr <- 2 * Nr
  cnt <- floor(w * Nr)
  left <- Nr - sum(cnt)
  pos <- rep(seq_len(M), cnt)
  if (left > 0) {
    rem <- w * Nr - cnt
    cw <- cumsum(rem / sum(rem))
    cw[M] <- 1
    u <- (seq_len(left) - 1 + runif(left)) / left
    pos <- sort(c(pos, vapply(u, function(v) which(cw >= v)[1], 1L)))
  }
  mult <- rows[pos]
  r <- round(log2(Nr / m))
  u <- runif(r * Nr / 2)
  cs <- kt_ref_split(K[mult, mult], r, 0.5, u)
  v <- apply(cs, 2, function(i) sum(K[mult[i], mult[i]]))
  cand <- mult[cs[, which.min(v)]]
  c1 <- skt_ref_refine(K, cand)
  c2 <- skt_ref_refine(K, skt_ref_stein_thin(K, m))
  list(index = if (skt_ref_ksd2(K, c2) < skt_ref_ksd2(K, c1)) c2 else c1,
       rows = rows, w = w, g = g)
}

test_that("the coreset route matches its plain-R description", {
  skip_if_not_installed("quadprog")
  op <- options(kernbayes.skt_coreset = 64)
  on.exit(options(op), add = TRUE)
  for (seed in 1:2) {
    dd <- skt_data(70 + seed, n = 256L)
    set.seed(seed)
    a <- stein_kernel_thin(dd$x, dd$s, m = 16, debias = "compress",
                           standardize = FALSE, nthreads = 1)
    ref <- skt_ref_coreset_route(dd$x, dd$s, 16, 64, seed)
    expect_identical(a$coreset, as.integer(ref$rows))
    expect_equal(a$coreset_oversample, ref$g)
    expect_equal(as.numeric(a$weights_debias[a$coreset]), ref$w,
                 tolerance = 1e-8)
    expect_identical(a$index, as.integer(ref$index))
  }
  # 8 bins (k odd), a sample trimmed to N = 2^k rows
  dd <- skt_data(75, n = 600L)
  set.seed(3)
  a <- stein_kernel_thin(dd$x, dd$s, m = 18, debias = "compress",
                         standardize = FALSE, nthreads = 1)
  ref <- skt_ref_coreset_route(dd$x, dd$s, 18, 64, 3)
  expect_identical(a$coreset, as.integer(ref$rows))
  expect_equal(as.numeric(a$weights_debias[a$coreset]), ref$w, tolerance = 1e-8)
  expect_identical(a$index, as.integer(ref$index))
})

test_that("the coreset route's KSD is close to the full path's on a biased chain", {
  skip_on_cran()
  # RWM (step 0.2) on a correlated 2-d Gaussian started at (15, 15), all
  # 2048 states kept (a burn-in of about 300 states). The coreset route
  # (M = 1024 rows: the switch lowered to 1024) against the full path, same
  # seed: over seeds 1-8 the KSD ratio was 0.81-1.41 (median 1.04; KT's
  # randomness, not a trend: the ratios of a larger multiset were
  # 0.80-1.23). KT-SPLIT of the sample as it is (no debiasing, no swap over
  # all rows) keeps the burn-in: 14-24x the coreset route's KSD.
  Sig <- matrix(c(1, 0.8, 0.8, 1), 2)
  tg <- gaussian_target(c(0, 0), Sig)
  op <- options(kernbayes.skt_full_max = 1024)
  on.exit(options(op), add = TRUE)
  res <- matrix(NA_real_, 5, 3, dimnames = list(NULL, c("coreset", "full", "split")))
  for (seed in 1:5) {
    set.seed(seed)
    ch <- rwm(tg, c(15, 15), 2048, step_size = 0.2, progress = FALSE)
    set.seed(seed)
    a <- stein_kernel_thin(ch$x, ch$score, nthreads = 1)
    expect_equal(a$debias, "compress")
    set.seed(seed)
    b <- stein_kernel_thin(ch$x, ch$score, debias = "simplex", nthreads = 1)
    k <- kernel_thin(ch$x, ch$score, m = a$m, swap = FALSE, nthreads = 1)
    res[seed, ] <- c(ksd(a), ksd(b), ksd(k))
  }
  if (nzchar(Sys.getenv("KB_SKT_REPORT"))) print(res)
  ratio <- res[, "coreset"] / res[, "full"]
  expect_true(all(ratio <= 1.6))
  expect_lte(median(ratio), 1.25)
  expect_true(all(res[, "coreset"] < 0.2 * res[, "split"]))
})

test_that("memory checks name the route that fits, before any allocation", {
  n <- 2^16
  x <- matrix(rnorm(2 * n), n)
  expect_error(stein_kernel_thin(x, -x, debias = "simplex", nthreads = 1),
               "debias = \"compress\"", class = "kb_error_arg")
  op <- options(kernbayes.max_memory = 2^26)
  on.exit(options(op), add = TRUE)
  expect_error(stein_kernel_thin(x, -x, nthreads = 1),
               "4096-point coreset \\(debias = \"compress\"\\)",
               class = "kb_error_arg")
  expect_error(stein_kernel_thin(x[1:10, ], -x[1:10, ], debias = "compress"),
               "at least 16 rows", class = "kb_error_arg")
})
