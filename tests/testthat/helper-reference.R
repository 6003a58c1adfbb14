# Independent, deliberately slow plain-R reference implementation of the
# formulas in DESIGN.md ("Base kernels", "Stein kernel", "Preconditioner
# heuristics").  Nothing here calls kernbayes: the tests compare the package
# against these functions.

# phi, phi', phi'' of a radial kernel at r (an n x 3 matrix).
#   IMQ:      phi(r) = (c + r)^beta
#   Gaussian: phi(r) = exp(-r / 2)
ref_phi <- function(type, r, c = 1, beta = -0.5) {
  type <- match.arg(type, c("imq", "gaussian"))
  if (type == "imq") {
    t <- c + r
    cbind(phi = t^beta,
          dphi = beta * t^(beta - 1),
          d2phi = beta * (beta - 1) * t^(beta - 2))
  } else {
    e <- exp(-r / 2)
    cbind(phi = e, dphi = -e / 2, d2phi = e / 4)
  }
}

# Median of the pairwise Euclidean distances between the rows of x, on at
# most 1000 rows: floor(seq(0, n - 1, length.out = 1000)) + 1 when n > 1000.
ref_median_distance <- function(x) {
  n <- nrow(x)
  if (n > 1000) {
    x <- x[floor(seq(0, n - 1, length.out = 1000)) + 1, , drop = FALSE]
  }
  m <- nrow(x)
  dists <- vector("list", m - 1)
  for (i in seq_len(m - 1)) {
    others <- x[(i + 1):m, , drop = FALSE]
    diffs <- sweep(others, 2, x[i, ])
    dists[[i]] <- sqrt(rowSums(diffs^2))
  }
  stats::median(unlist(dists))
}

# The preconditioner L for sample x.
ref_precon <- function(x, precon) {
  n <- nrow(x)
  d <- ncol(x)
  if (is.character(precon)) {
    return(switch(precon,
      id = diag(1, d),
      med = diag(1, d) / ref_median_distance(x)^2,
      sclmed = diag(1, d) * log(min(1000, n)) / ref_median_distance(x)^2,
      smpcov = solve(stats::cov(x)),
      stop("unknown precon")))
  }
  if (is.matrix(precon)) return(precon)
  diag(1, d) / precon
}

# Standardisation: scl_j = mean_i |x_ij - mean_j|; x / scl, s * scl.
ref_standardize <- function(x, s) {
  scl <- apply(x, 2, function(col) mean(abs(col - mean(col))))
  n <- nrow(x)
  list(x = x / matrix(scl, n, ncol(x), byrow = TRUE),
       s = s * matrix(scl, n, ncol(x), byrow = TRUE),
       scale = scl)
}

# k_p(x, y) for one pair.
ref_stein_pair <- function(x, y, sx, sy, type, c, beta, L) {
  u <- x - y
  Lu <- L %*% u
  r <- sum(u * Lu)
  p <- ref_phi(type, r, c, beta)
  sum(sx * sy) * p[1, "phi"] +
    2 * p[1, "dphi"] * sum(Lu * (sy - sx)) -
    4 * p[1, "d2phi"] * sum(Lu * Lu) -
    2 * p[1, "dphi"] * sum(diag(L))
}

# The n x n Stein kernel matrix, a plain double loop.
ref_stein_matrix <- function(x, s, type = "imq", c = 1, beta = -0.5,
                             L = diag(ncol(x))) {
  n <- nrow(x)
  K <- matrix(NA_real_, n, n)
  for (i in seq_len(n)) {
    for (j in i:n) {
      # k_p is symmetric: compute the upper triangle, mirror it
      K[i, j] <- K[j, i] <- ref_stein_pair(x[i, ], x[j, ], s[i, ], s[j, ],
                                           type, c, beta, L)
    }
  }
  K
}

# Everything from the raw sample: optional standardisation, then the
# preconditioner resolved on the (standardised) sample, then the matrix.
ref_stein <- function(x, s, type = "imq", c = 1, beta = -0.5,
                      precon = "id", standardize = FALSE) {
  if (standardize) {
    st <- ref_standardize(x, s)
    x <- st$x
    s <- st$s
  }
  L <- ref_precon(x, precon)
  ref_stein_matrix(x, s, type, c, beta, L)
}

# KSD from a Stein kernel matrix.
#  V: sqrt(sum K / n^2); weighted V: sqrt(sum w_i w_j K_ij), w normalised;
#  U: sum_{i != j} K / (n (n - 1)); weighted U: sum_{i != j} w_i w_j K /
#     sum_{i != j} w_i w_j.
ref_ksd <- function(K, type = "V", weights = NULL) {
  n <- nrow(K)
  if (is.null(weights)) weights <- rep(1, n)
  w <- weights / sum(weights)
  W <- outer(w, w)
  if (type == "V") return(sqrt(max(sum(W * K), 0)))
  off <- row(K) != col(K)
  sum((W * K)[off]) / sum(W[off])
}

# KSD (V) of the first j rows for every j, from the full matrix.
ref_ksd_path <- function(K) {
  vapply(seq_len(nrow(K)), function(j) {
    sqrt(max(sum(K[seq_len(j), seq_len(j)]), 0)) / j
  }, numeric(1))
}

# Relative discrepancy: max abs difference over max abs value.
rel_err <- function(a, b) {
  max(abs(a - b)) / max(abs(b))
}

# Plain-R Gaussian log density (no mvtnorm).
ref_dmvnorm_log <- function(x, mean, cov) {
  x <- matrix(x, ncol = length(mean))
  P <- solve(cov)
  ld <- as.numeric(determinant(cov, logarithm = TRUE)$modulus)
  d <- length(mean)
  apply(x, 1, function(xi) {
    z <- xi - mean
    -0.5 * d * log(2 * pi) - 0.5 * ld - 0.5 * sum(z * (P %*% z))
  })
}

# Central finite-difference gradient of a scalar function at a point.
ref_num_grad <- function(f, x, h = 1e-5) {
  vapply(seq_along(x), function(k) {
    e <- replace(numeric(length(x)), k, h)
    (f(x + e) - f(x - e)) / (2 * h)
  }, numeric(1))
}

# A random symmetric positive definite matrix, well conditioned.
ref_spd <- function(d, scale = 1) {
  A <- matrix(stats::rnorm(d * d), d, d)
  scale * (crossprod(A) / d + diag(0.5, d))
}

# A sample with unequal scales and a noisy Gaussian score (generic values:
# greedy choices have no accidental near-ties).
ref_noisy_sample <- function(n, d) {
  x <- matrix(stats::rnorm(n * d), n, d) %*% diag(seq(1, 3, length.out = d), d)
  x <- sweep(x, 2, seq(-1, 1, length.out = d), "+")
  s <- -x + matrix(stats::rnorm(n * d, sd = 0.3), n, d)
  list(x = x, s = s)
}

# Kernels under test: a constructor of the package kernel for a given
# preconditioner, and the parameters the reference needs; c_pow is the c
# of the IMQ kernel with a power other than -1/2.
ref_kernel_cases <- function(c_pow) {
  list(
    imq = list(make = function(pc) imq_kernel(precon = pc),
               type = "imq", c = 1, beta = -0.5),
    imq_pow = list(make = function(pc) imq_kernel(c = c_pow, beta = -0.3,
                                                   precon = pc),
                   type = "imq", c = c_pow, beta = -0.3),
    gauss = list(make = function(pc) gaussian_kernel(precon = pc),
                 type = "gaussian", c = 1, beta = -0.5)
  )
}

# ---- greedy thinning (DESIGN.md, "Greedy Stein thinning") ----------------------

# Greedy selection on a symmetric n x n matrix K (a Stein kernel matrix, a
# reweighted one, or a base kernel matrix for MMD):
#   obj_i = K_ii; at step j pick argmin_i (obj_i - 2 j mu_i) (mu = 0 for
#   Stein thinning), the first index on ties, skipping taken points when
#   unique; then obj_i += 2 K_{i, picked}.
ref_greedy <- function(K, m, unique = FALSE, mu = NULL) {
  n <- nrow(K)
  obj <- diag(K)
  taken <- rep(FALSE, n)
  idx <- integer(m)
  for (j in seq_len(m)) {
    v <- if (is.null(mu)) obj else obj - 2 * j * mu
    if (unique) v[taken] <- Inf
    i <- which.min(v)  # which.min returns the first minimum
    idx[j] <- i
    taken[i] <- TRUE
    obj <- obj + 2 * K[, i]
  }
  idx
}

# KSD path of a selection: sqrt(sum_{a, b <= j} K[sel_a, sel_b]) / j.
ref_sel_path <- function(K, idx) {
  vapply(seq_along(idx), function(j) {
    s <- idx[seq_len(j)]
    sqrt(max(sum(K[s, s, drop = FALSE]), 0)) / j
  }, numeric(1))
}

# Base kernel matrix k(x_i, y_j) = phi((x_i - y_j)' L (x_i - y_j)).
ref_kernel_matrix <- function(x, y, type = "gaussian", c = 1, beta = -0.5,
                              L = diag(ncol(x))) {
  K <- matrix(NA_real_, nrow(x), nrow(y))
  for (i in seq_len(nrow(x))) {
    u <- sweep(y, 2, x[i, ])
    r <- rowSums((u %*% L) * u)
    K[i, ] <- ref_phi(type, r, c, beta)[, "phi"]
  }
  K
}

# Squared MMD between the rows of a and b, from their kernel matrices.
ref_mmd2 <- function(Kaa, Kab, Kbb) mean(Kaa) - 2 * mean(Kab) + mean(Kbb)

# ---- KSDT, samplers and SP-MCMC (DESIGN.md, "KSDT", "Samplers", "Stein Point MCMC")

# Vectorised Stein kernel k_p(x_i, y_j) (n x m) from the same formula as
# ref_stein_pair(); y = x gives the full matrix.  Validated against
# ref_stein_matrix() in test-ksdt.R.
ref_stein_cross <- function(x, s, y = x, sy = s, type = "imq", c = 1,
                            beta = -0.5, L = diag(ncol(x))) {
  x <- matrix(x, ncol = ncol(L))
  s <- matrix(s, ncol = ncol(L))
  y <- matrix(y, ncol = ncol(L))
  sy <- matrix(sy, ncol = ncol(L))
  d <- ncol(x)
  n <- nrow(x)
  m <- nrow(y)
  U <- lapply(seq_len(d), function(k) outer(x[, k], y[, k], "-"))
  LU <- lapply(seq_len(d), function(k) {
    acc <- matrix(0, n, m)
    for (l in seq_len(d)) acc <- acc + L[k, l] * U[[l]]
    acc
  })
  r <- Reduce(`+`, Map(`*`, U, LU))
  p <- ref_phi(type, as.vector(r), c, beta)
  phi <- matrix(p[, "phi"], n, m)
  dphi <- matrix(p[, "dphi"], n, m)
  d2phi <- matrix(p[, "d2phi"], n, m)
  ss <- s %*% t(sy)
  lus <- Reduce(`+`, lapply(seq_len(d), function(k) {
    LU[[k]] * (matrix(sy[, k], n, m, byrow = TRUE) - s[, k])
  }))
  luu <- Reduce(`+`, lapply(LU, function(a) a * a))
  ss * phi + 2 * dphi * lus - 4 * d2phi * luu - 2 * dphi * sum(diag(L))
}

# Minimum size f(t) of a rule, floored, written from DESIGN.md.
ref_min_size <- function(rule, t, coef = 1, floor = 10) {
  v <- if (is.function(rule)) {
    vapply(t, rule, numeric(1))
  } else {
    switch(rule,
           sqrt = coef * sqrt(t * log(t)),
           linear = coef * t,
           constant = rep(coef, length(t)))
  }
  pmax(floor, v)
}

# Brute-force KSDT (Algorithms 1-2) on a precomputed n x n Stein kernel
# matrix K of the whole stream, recomputing every sum from K at every step.
# eps, fmin: budget and minimum size per step.  The dictionary is kept as
# stream indices in "slot" order, emulating the package's storage (a removed
# slot is filled by the last one), which only matters for ref_ksdt_sampler's
# "rand" start; ties in the removal criterion go to the smaller stream index.
# Returns the final dictionary (sorted stream indices), per step ksd, size,
# removed, K0 (KSD^2 before the prune) and K1 (after), the dictionary after
# every step (in slot order) and bounds on the kernel evaluations.
ref_ksdt_core <- function(K, eps, fmin, steps = nrow(K), keep_dicts = FALSE) {
  D <- integer(0)
  out <- list(ksd = numeric(steps), size = integer(steps),
              removed = integer(steps), K0 = numeric(steps),
              K1 = numeric(steps), dicts = if (keep_dicts) vector("list", steps),
              evals_lo = 0, evals_hi = 0)
  for (t in seq_len(steps)) {
    st <- ref_ksdt_step(D, t, K, eps[t], fmin[t])
    D <- st$D
    out$ksd[t] <- sqrt(max(st$K1, 0))
    out$size[t] <- length(D)
    out$removed[t] <- st$removed
    out$K0[t] <- st$K0
    out$K1[t] <- st$K1
    out$evals_lo <- out$evals_lo + st$evals_lo
    out$evals_hi <- out$evals_hi + st$evals_hi
    if (keep_dicts) out$dicts[[t]] <- D
  }
  out$index <- sort(D)
  out$D <- D
  out
}

# One KSDT step: add stream index t to the dictionary D (slot order), prune.
# Also counts the kernel evaluations an implementation that reuses the new
# point's row needs: k(x_t, x_t) and one per dictionary point for the
# addition; for removing an older point its row against the dictionary
# (evals_hi counts the point itself, evals_lo does not); nothing for
# removing x_t.
ref_ksdt_step <- function(D, t, K, eps, fmin) {
  evals_lo <- evals_hi <- 1 + length(D)
  D <- c(D, t)
  n <- length(D)
  K0 <- sum(K[D, D]) / n^2
  removed <- 0L
  while (n >= 2 && n - 1 >= fmin) {
    KD <- K[D, D, drop = FALSE]
    S <- sum(KD)
    vals <- (S - 2 * rowSums(KD) + diag(KD)) / (n - 1)^2
    cand <- which(vals == min(vals))
    j <- cand[which.min(D[cand])]  # ties: the smaller stream index
    if (!(vals[j] <= K0 + eps)) break
    if (D[j] != t) {
      evals_lo <- evals_lo + n - 1
      evals_hi <- evals_hi + n
    }
    D[j] <- D[n]
    D <- D[-n]
    n <- n - 1
    removed <- removed + 1L
  }
  list(D = D, K0 = K0, K1 = sum(K[D, D]) / length(D)^2, removed = removed,
       evals_lo = evals_lo, evals_hi = evals_hi)
}

# Brute-force KSDT over a stream, from the points, scores and kernel numbers.
ref_ksdt <- function(x, s, eps_fun, fmin_fun, type = "imq", c = 1,
                     beta = -0.5, L = diag(ncol(x)), keep_dicts = FALSE) {
  t <- seq_len(nrow(x))
  K <- ref_stein_cross(x, s, type = type, c = c, beta = beta, L = L)
  ref_ksdt_core(K, eps_fun(t), fmin_fun(t), keep_dicts = keep_dicts)
}

# Plain-R MALA / RWM with the same use of R's generator as src/samplers.c:
# d normal draws for the proposal, then one uniform unless log alpha >= 0.
# A state is list(x, lp, s); s is the score at x (NULL when unknown, RWM).
ref_log_density <- function(target, x) {
  if (target$vectorized) target$log_density(matrix(x, 1L)) else target$log_density(x)
}
ref_score <- function(target, x) {
  as.vector(if (target$vectorized) target$score(matrix(x, 1L)) else target$score(x))
}
ref_mala_logq <- function(to, from, sfrom, h) {
  u <- to - from - 0.5 * h * h * sfrom
  -sum(u * u) / (2 * h * h)
}
ref_mcmc_step <- function(state, target, h, sampler) {
  z <- stats::rnorm(length(state$x))
  if (sampler == "mala") {
    y <- state$x + 0.5 * h * h * state$s + h * z
  } else {
    y <- state$x + h * z
  }
  lpy <- ref_log_density(target, y)
  loga <- -Inf
  sy <- NULL
  if (lpy > -Inf) {
    loga <- lpy - state$lp
    if (sampler == "mala") {
      sy <- ref_score(target, y)
      loga <- loga + ref_mala_logq(state$x, y, sy, h) -
        ref_mala_logq(y, state$x, state$s, h)
    }
  }
  alpha <- if (loga >= 0) 1 else exp(loga)
  accept <- loga >= 0 || log(stats::runif(1)) < loga
  if (accept) state <- list(x = y, lp = lpy, s = sy)
  state$alpha <- alpha
  state$accept <- accept
  state
}
ref_mcmc_init <- function(target, x0, sampler) {
  list(x = as.double(x0), lp = ref_log_density(target, x0),
       s = if (sampler == "mala") ref_score(target, x0))
}

# A whole chain: warmup iterations (adapting log h by Robbins-Monro with
# gain (i + 1)^-0.6 towards target_accept when adapt), then n_iter kept.
ref_chain <- function(target, x0, n_iter, step, sampler = "mala", warmup = 0,
                      adapt = FALSE, target_accept = 0.574) {
  st <- ref_mcmc_init(target, x0, sampler)
  h <- step
  for (i in seq_len(warmup)) {
    st <- ref_mcmc_step(st, target, h, sampler)
    if (adapt) h <- h * exp((st$alpha - target_accept) / (i^0.6))
  }
  d <- length(x0)
  x <- matrix(NA_real_, n_iter, d)
  acc <- 0
  for (i in seq_len(n_iter)) {
    st <- ref_mcmc_step(st, target, h, sampler)
    acc <- acc + st$accept
    x[i, ] <- st$x
  }
  list(x = x, step = h, accept_rate = acc / n_iter)
}

# KSDT with an MCMC sampler inside and the SP-MCMC selection rule: each step
# runs `candidates` moves from a start ("last": the chain as it is, i.e. the
# last added point; "rand": the point in slot floor(U * n) of the
# dictionary; "infl": the least influential point, first on ties) and adds the
# candidate minimising k_p(y, y) + 2 sum_D k_p(y, x) (first on ties), then
# prunes with eps[t], fmin[t] (fmin = Inf: SP-MCMC, no pruning).  With
# candidates = 1 it is KSDT on the plain chain.  Brute force throughout.
# With `reg` (list(lap, w): lap(x) the Laplacian term at a point, w(t) the
# weight on log p) the regularised candidate rule of Benard, Staber & Da
# Veiga (2023): lap(y) - w(|D| + 1) log p(y) added to the criterion.
ref_ksdt_sampler <- function(target, x0, n_iter, step, sampler, candidates,
                             start, eps, fmin, type = "imq", c = 1,
                             beta = -0.5, L = diag(length(x0)), reg = NULL) {
  kp <- function(a, sa, b, sb) {
    ref_stein_cross(a, sa, b, sb, type = type, c = c, beta = beta, L = L)
  }
  d <- length(x0)
  X <- matrix(NA_real_, n_iter, d)
  S <- matrix(NA_real_, n_iter, d)
  K <- matrix(NA_real_, n_iter, n_iter)
  D <- integer(0)
  st <- ref_mcmc_init(target, x0, sampler)
  ksd <- numeric(n_iter)
  size <- integer(n_iter)
  for (t in seq_len(n_iter)) {
    if (candidates > 1 && length(D) > 0 && start != "last") {
      if (start == "rand") {
        j <- min(floor(stats::runif(1) * length(D)), length(D) - 1) + 1
      } else {
        # least influence (Chen et al.'s code): sum_j k(x_i, x_j) +
        # sum_j k(x_j, x_i) - k(x_i, x_i), smallest first
        KD <- K[D, D, drop = FALSE]
        j <- which.min(rowSums(KD) + colSums(KD) - diag(KD))
      }
      st <- list(x = X[D[j], ], lp = ref_log_density(target, X[D[j], ]),
                 s = S[D[j], ])
    }
    cx <- matrix(NA_real_, candidates, d)
    cs <- matrix(NA_real_, candidates, d)
    crit <- numeric(candidates)
    states <- vector("list", candidates)
    for (k in seq_len(candidates)) {
      st <- ref_mcmc_step(st, target, step, sampler)
      if (is.null(st$s)) st$s <- ref_score(target, st$x)
      states[[k]] <- st
      cx[k, ] <- st$x
      cs[k, ] <- st$s
      crit[k] <- kp(st$x, st$s, st$x, st$s) +
        if (length(D)) 2 * sum(kp(st$x, st$s, X[D, , drop = FALSE],
                                  S[D, , drop = FALSE])) else 0
      if (!is.null(reg)) {
        crit[k] <- crit[k] + reg$lap(st$x) - reg$w(length(D) + 1) *
          ref_log_density(target, st$x)
      }
    }
    b <- which.min(crit)
    st <- states[[b]]
    X[t, ] <- cx[b, ]
    S[t, ] <- cs[b, ]
    # the new row and column of the stream's Stein kernel matrix
    K[t, seq_len(t)] <- K[seq_len(t), t] <-
      kp(X[t, ], S[t, ], X[seq_len(t), , drop = FALSE], S[seq_len(t), , drop = FALSE])
    r <- ref_ksdt_step(D, t, K, eps[t], fmin[t])
    D <- r$D
    ksd[t] <- sqrt(max(r$K1, 0))
    size[t] <- length(D)
  }
  idx <- sort(D)
  list(index = idx, points = X[idx, , drop = FALSE],
       score = S[idx, , drop = FALSE], ksd = ksd, size = size, stream = X)
}

# ---- kernel Bayes' rule (DESIGN.md, "Kernel Bayes' rule") ---------------------

# Gaussian Gram matrix exp(-|x_i - y_j|^2 / (2 s^2)), from dist() only.
ref_gauss_gram <- function(x, y = x, s) {
  x <- matrix(x, ncol = if (is.matrix(x)) ncol(x) else 1L)
  y <- matrix(y, ncol = ncol(x))
  d2 <- as.matrix(stats::dist(rbind(x, y)))^2
  d2 <- d2[seq_len(nrow(x)), nrow(x) + seq_len(nrow(y)), drop = FALSE]
  exp(-d2 / (2 * s^2))
}

# Median heuristic bandwidth (median pairwise distance, n <= 1000).
ref_med_bw <- function(x) {
  stats::median(stats::dist(matrix(x, ncol = if (is.matrix(x)) ncol(x) else 1L)))
}

# KBR posterior weights (n x n_new) written from the formulas with solve():
# m = G_XU gamma, mu = n (G_X + n eps I)^{-1} m;
# "kbr": W = L G_Y ((L G_Y)^2 + delta I)^{-1} L K_Y, L = diag(mu);
# "iw":  W = D^(1/2) (D^(1/2) G_Y D^(1/2) + delta I)^{-1} D^(1/2) K_Y,
#        D = diag(max(mu, 0)).
ref_kbr_mu <- function(Gx, m, eps) {
  n <- nrow(Gx)
  drop(solve(Gx + n * eps * diag(n), n * m))
}
ref_kbr_R <- function(Gy, mu, delta, method = "kbr") {
  n <- nrow(Gy)
  if (method == "kbr") {
    LG <- diag(mu) %*% Gy
    LG %*% solve(LG %*% LG + n^2 * delta * diag(n)) %*% diag(mu)
  } else {
    s <- sqrt(pmax(mu, 0))
    Ds <- diag(s)
    Ds %*% solve(Ds %*% Gy %*% Ds + n * delta * diag(n)) %*% Ds
  }
}
ref_kbr <- function(x, y, y_new, prior = x, gamma = NULL, sx, sy, eps, delta,
                    method = "kbr") {
  x <- as.matrix(x)
  y <- as.matrix(y)
  prior <- as.matrix(prior)
  if (is.null(gamma)) gamma <- rep(1 / nrow(prior), nrow(prior))
  m <- drop(ref_gauss_gram(x, prior, sx) %*% gamma)
  mu <- ref_kbr_mu(ref_gauss_gram(x, x, sx), m, eps)
  R <- ref_kbr_R(ref_gauss_gram(y, y, sy), mu, delta, method)
  list(mu = mu, W = R %*% ref_gauss_gram(y, y_new, sy))
}

# KBR filter from the formulas: X, Y the first T training rows, X+ rows
# 2..T+1; alpha_0 = 1/T; each step v = (G_X + T eps I)^{-1} G_X alpha,
# m = G_XX+ v, mu = T (G_X + T eps I)^{-1} m, alpha = R(mu) k_Y(y_t).
ref_kbr_filter <- function(x_train, y_train, y_obs, sx, sy, eps, delta,
                           method = "kbr") {
  # one trajectory or a list of them; the pairs of each trajectory are
  # stacked, none joining the end of one to the start of the next
  if (!is.list(x_train)) {
    x_train <- list(x_train)
    y_train <- list(y_train)
  }
  X <- Xp <- Y <- NULL
  for (k in seq_along(x_train)) {
    xk <- as.matrix(x_train[[k]])
    yk <- as.matrix(y_train[[k]])
    Tk <- nrow(xk) - 1L
    X <- rbind(X, xk[seq_len(Tk), , drop = FALSE])
    Xp <- rbind(Xp, xk[1L + seq_len(Tk), , drop = FALSE])
    Y <- rbind(Y, yk[seq_len(Tk), , drop = FALSE])
  }
  y_obs <- matrix(y_obs, ncol = ncol(Y))
  Gy <- ref_gauss_gram(Y, Y, sy)
  W <- ref_filter_steps(ref_gauss_gram(X, X, sx), ref_gauss_gram(X, Xp, sx),
                        ref_gauss_gram(Y, y_obs, sy), eps,
                        function(mu) ref_kbr_R(Gy, mu, delta, method))
  mean <- crossprod(W, X)
  # spread: weighted sd under the weights projected onto the simplex
  sd <- matrix(NA_real_, ncol(W), ncol(X))
  for (t in seq_len(ncol(W))) {
    v <- ref_simplex_proj(W[, t])
    for (k in seq_len(ncol(X))) {
      m <- sum(v * X[, k])
      sd[t, k] <- sqrt(sum(v * (X[, k] - m)^2))
    }
  }
  list(weights = W, mean = mean, sd = sd, X = X)
}

# Euclidean projection of w onto the probability simplex, by bisection on
# the shift theta of v = max(w - theta, 0), sum(v) = 1 (sum(v) decreases in
# theta; bracketed by min(w) - 1 and max(w)).
ref_simplex_proj <- function(w) {
  lo <- min(w) - 1
  hi <- max(w)
  for (i in 1:200) {
    th <- (lo + hi) / 2
    if (sum(pmax(w - th, 0)) > 1) lo <- th else hi <- th
  }
  pmax(w - (lo + hi) / 2, 0)
}

# Weighted quantile from the definition: the smallest x_i whose weighted
# CDF sum_{j: x_j <= x_i} v_j reaches p.
ref_wquantile <- function(x, v, p) {
  Fx <- vapply(x, function(xi) sum(v[x <= xi]), 0)
  min(x[Fx >= p - 1e-12])
}

# The steps of the KBR filter on given matrices: Gx = G_X (T x T), Gxx =
# G_XX+ (k(X_i, X_{j+1})), Ky = k_Y(Y_i, y_t) (one column per observation)
# and R(mu), the posterior operator; the T x n_obs posterior weights.
ref_filter_steps <- function(Gx, Gxx, Ky, eps, R) {
  T <- nrow(Gx)
  A <- Gx + T * eps * diag(T)
  a <- rep(1 / T, T)
  W <- matrix(NA_real_, T, ncol(Ky))
  for (t in seq_len(ncol(Ky))) {
    v <- solve(A, Gx %*% a)
    mu <- drop(T * solve(A, Gxx %*% v))
    a <- drop(R(mu) %*% Ky[, t])
    W[, t] <- a
  }
  W
}

# Plain Kalman filter, x_{t+1} = A x_t + N(0, Q), y_t = C x_t + N(0, R),
# x_1 ~ N(m0, P0); filtered means E[x_t | y_1..t] (rows).
ref_kalman <- function(y, A, C, Q, R, m0, P0) {
  y <- as.matrix(y)
  m <- m0
  P <- P0
  out <- matrix(NA_real_, nrow(y), length(m0))
  for (t in seq_len(nrow(y))) {
    if (t > 1) {
      m <- A %*% m
      P <- A %*% P %*% t(A) + Q
    }
    S <- C %*% P %*% t(C) + R
    K <- P %*% t(C) %*% solve(S)
    m <- m + K %*% (y[t, ] - C %*% m)
    P <- P - K %*% C %*% P
    out[t, ] <- m
  }
  out
}

# Plain-R Nystrom approximation: greedy pivots on the residual diagonal
# diag(G - G[, P] G[P, P]^{-1} G[P, ]) (first maximum), and the
# approximations G[, P] G[P, P]^{-1} G[P, B] of the columns B.
ref_nystrom_pivots <- function(G, tol, r) {
  P <- integer(0)
  dg <- diag(G)
  for (j in seq_len(r)) {
    p <- which.max(dg)
    if (dg[p] <= tol) break
    P <- c(P, p)
    dg <- diag(G) - rowSums(G[, P, drop = FALSE] *
                              t(solve(G[P, P, drop = FALSE], G[P, , drop = FALSE])))
    dg[P] <- 0
  }
  P
}
ref_nystrom <- function(G, P, B = G) {
  G[, P, drop = FALSE] %*% solve(G[P, P, drop = FALSE], B[P, , drop = FALSE])
}
# The "iw" operator D^(1/2) (D^(1/2) G D^(1/2) + n delta I)^{-1} D^(1/2) by a
# symmetric eigen-decomposition (solve() on the nearly singular matrix
# loses 2 digits at delta = 1e-10; ref_kbr_R uses it)
ref_iw_R <- function(G, mu, delta) {
  n <- nrow(G)
  s <- sqrt(pmax(mu, 0))
  M <- s * t(s * G)
  e <- eigen((M + t(M)) / 2, symmetric = TRUE)
  s * t(s * (e$vectors %*% ((1 / (e$values + n * delta)) * t(e$vectors))))
}

# Statistical tests on large samples add nothing to a memory check but take
# most of its time: `make valgrind` sets KB_VALGRIND and skips them.
skip_under_valgrind <- function() {
  skip_if(nzchar(Sys.getenv("KB_VALGRIND")), "large statistical test, skipped under valgrind")
}

# A Gaussian mixture with identity covariances (regularised Stein thinning
# and KSDT's regularised candidate rule): log density and the Hessian
# diagonal of log p from the density's own derivatives.
reg_mix <- function(means, weights) {
  dens <- function(x) {
    matrix(sapply(seq_len(nrow(means)), function(c)
      weights[c] * exp(-rowSums(sweep(x, 2, means[c, ])^2) / 2) / (2 * pi)),
      nrow(x))
  }
  list(
    logp = function(x) log(rowSums(dens(x))),
    hess = function(x) {
      D <- dens(x)
      p <- rowSums(D)
      H <- x
      for (k in seq_len(ncol(x))) {
        u <- outer(x[, k], means[, k], function(a, b) b - a) # mu_ck - x_k
        g <- rowSums(D * u) / p
        H[, k] <- rowSums(D * (u^2 - 1)) / p - g^2
      }
      H
    })
}

# Bad input to the regularised rules (stein_thin(), ksdt()): a 30 x 2
# sample x with scores s, a score closure f that counts its calls
# (calls()), and e(expr, arg), which expects a kb_error_arg naming arg.
reg_bad_input <- function(seed) {
  set.seed(seed)
  x <- matrix(rnorm(60), 30)
  calls <- 0
  list(x = x, s = -x,
       f = function(p) {
         calls <<- calls + 1
         -p
       },
       calls = function() calls,
       e = function(expr, arg) {
         err <- expect_error(expr, class = "kb_error_arg")
         expect_identical(err$arg, arg)
       })
}

# n exact draws (seed) of the mixture of the regularisation tests, means
# (-2, 0) and (2, 0.5), weights 0.3 and 0.7: the target tg, reg_mix() of
# it (mx), the draws x, their scores s, Hessian diagonals H and log
# densities lp.
reg_mix_sample <- function(n, seed) {
  means <- rbind(c(-2, 0), c(2, 0.5))
  wts <- c(0.3, 0.7)
  tg <- gaussian_mixture_target(means = means, weights = wts)
  mx <- reg_mix(means, wts)
  set.seed(seed)
  x <- sample_target(tg, n)
  list(tg = tg, mx = mx, x = x, s = target_score(tg, x), H = mx$hess(x),
       lp = mx$logp(x))
}
