# Robustness and correctness audit of the Stein discrepancy and thinning
# API: sizes around the vector lanes (8, 4, 2, 1 points) and blocks (256),
# degenerate samples, extreme scales, bad input.  Every number is checked
# against a plain-R transcription of the formulas of DESIGN.md written for
# this file (fz_*: no helper shared with the C code or other test files).

# ---- plain-R reference -------------------------------------------------------

# phi, phi', phi'' at r (DESIGN.md, "Base kernels")
fz_phi <- function(type, r, c = 1, beta = -0.5) {
  if (type == "imq") {
    t <- c + r
    list(p0 = t^beta, p1 = beta * t^(beta - 1),
         p2 = beta * (beta - 1) * t^(beta - 2))
  } else {
    e <- exp(-r / 2)
    list(p0 = e, p1 = -e / 2, p2 = e / 4)
  }
}

# The n x n Stein kernel matrix k_p(x_i, x_j) for a full matrix L
# (DESIGN.md, "Stein kernel"); with abs = TRUE the sum of the absolute
# values of its terms, the scale its rounding errors live on.
fz_stein <- function(x, s, L, type = "imq", c = 1, beta = -0.5,
                     abs = FALSE) {
  n <- nrow(x)
  XL <- x %*% L
  SS <- tcrossprod(s)
  r <- a <- b <- aa <- matrix(0, n, n)
  for (k in seq_len(ncol(x))) {
    U <- outer(x[, k], x[, k], "-")
    LU <- outer(XL[, k], XL[, k], "-")
    V <- outer(s[, k], s[, k], function(si, sj) sj - si)
    r <- r + U * LU
    a <- a + LU * V
    b <- b + LU * LU
    aa <- aa + base::abs(LU) * outer(base::abs(s[, k]), base::abs(s[, k]), "+")
  }
  p <- fz_phi(type, r, c, beta)
  trL <- sum(diag(L))
  if (abs) {
    return(2 * base::abs(SS * p$p0) + 2 * base::abs(p$p1) * aa +
             4 * base::abs(p$p2) * b + 2 * base::abs(p$p1) * trL)
  }
  SS * p$p0 + 2 * p$p1 * a - 4 * p$p2 * b - 2 * p$p1 * trL
}

# the largest error of K against the reference, relative to the scale
fz_err <- function(K, x, s, L, type = "imq", c = 1, beta = -0.5) {
  R <- fz_stein(x, s, L, type, c, beta)
  S <- fz_stein(x, s, L, type, c, beta, abs = TRUE)
  max(ifelse(S == 0, abs(K - R), abs(K - R) / S))
}

# ---- the preconditioner's eigenvalues far from 1 -----------------------------

test_that("a non-isotropic L with eigenvalues beyond 1e-154 or 1e154 gives the right Stein kernel", {
  # u'L^2u was summed as lambda_k^2 u_k^2: lambda_k^2 underflowed (a KSD
  # 38% off at eigenvalues 1e-200, silently) or overflowed (a spurious
  # overflow error at 1e154).  Scaling x by a, the scores by 1/a and L by
  # 1/a^2 divides every term of k_p by a^2, so the KSD by a.
  set.seed(1101)
  for (d in c(2, 5, 17)) {   # the generic loop and the vector ones
    x <- matrix(rnorm(30 * d), 30, d)
    s <- -x
    L <- diag(seq(1, 2, length.out = d))
    k1 <- ksd(x, s, imq_kernel(precon = L), progress = FALSE)
    for (a in c(1e100, 1e120, 1e-78, 1e-100)) {
      for (kern in list(imq_kernel(precon = L / a^2),
                        imq_kernel(beta = -0.3, precon = L / a^2),
                        gaussian_kernel(precon = L / a^2))) {
        xa <- x * a
        sa <- s / a
        K <- stein_kernel_matrix(xa, sa, kern)
        type <- kern$type
        cc <- if (type == "imq") kern$c else 1
        bb <- if (type == "imq") kern$beta else -0.5
        expect_lt(fz_err(K, xa, sa, L / a^2, type, cc, bb), 1e-12)
      }
      expect_equal(ksd(xa, sa, imq_kernel(precon = L / a^2),
                       progress = FALSE) * a, k1, tolerance = 1e-12)
      # the sample's own covariance, on the scale of the data
      expect_equal(ksd(x * a, s / a, imq_kernel(precon = "smpcov"),
                       progress = FALSE) * a,
                   ksd(x, s, imq_kernel(precon = "smpcov"), progress = FALSE),
                   tolerance = 1e-12)
    }
    th <- stein_thin(x * 1e100, s / 1e100, 5, imq_kernel(precon = L / 1e200),
                     standardize = FALSE)
    expect_identical(th$index, stein_thin(x, s, 5, imq_kernel(precon = L),
                                          standardize = FALSE)$index)
  }
})
