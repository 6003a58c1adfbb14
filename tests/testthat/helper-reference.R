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
