# Base kernels (R/kernels.R, src/kernels.c): constructors, phi and its
# radial derivatives, the derivative identities used by the Stein kernel,
# and the preconditioner heuristics.

# ---- constructors and print --------------------------------------------------

test_that("imq_kernel() records its parameters", {
  k <- imq_kernel()
  expect_s3_class(k, "kb_kernel")
  expect_identical(k$type, "imq")
  expect_identical(k$c, 1)
  expect_identical(k$beta, -0.5)
  expect_identical(k$precon, "id")

  k2 <- imq_kernel(c = 2L, beta = -0.75, precon = "sclmed")
  expect_identical(k2$c, 2)
  expect_identical(k2$beta, -0.75)
  expect_identical(k2$precon, "sclmed")

  L <- matrix(c(2, 0.5, 0.5, 1), 2)
  expect_identical(imq_kernel(precon = L)$precon, L)
  expect_identical(imq_kernel(precon = 3)$precon, 3)
})

test_that("gaussian_kernel() records its parameters; bandwidth overrides precon", {
  k <- gaussian_kernel()
  expect_s3_class(k, "kb_kernel")
  expect_identical(k$type, "gaussian")
  expect_identical(k$precon, "med")
  expect_null(k$bandwidth)
  kb <- gaussian_kernel(precon = "smpcov", bandwidth = 2)
  expect_identical(kb$precon, 4)
  expect_identical(kb$bandwidth, 2)
  # and the resolved L is I / bandwidth^2
  x <- matrix(c(1, 2, 3, 5, 6, 9), 3, byrow = TRUE)
  expect_equal(kernbayes:::resolve_kernel(kb, x)$L, diag(2) / 4,
               tolerance = 1e-15)
})

test_that("kernel print methods", {
  expect_snapshot({
    imq_kernel()
    imq_kernel(c = 2, beta = -0.75, precon = "med")
    imq_kernel(precon = 0.5)
    imq_kernel(precon = diag(2))
    gaussian_kernel()
    gaussian_kernel(bandwidth = 2)
  })
  utils::capture.output(vis <- withVisible(print(imq_kernel())))
  expect_false(vis$visible)
  out <- utils::capture.output(k <- print(imq_kernel(beta = -0.3)))
  expect_identical(k, imq_kernel(beta = -0.3))
  expect_match(paste(out, collapse = "\n"), "-0.3", fixed = TRUE)
})

# ---- phi and its radial derivatives -----------------------------------------

# imq_kernel() only accepts -1 < beta < 0 (DESIGN.md); the C layer has a
# dedicated code path for beta = -1/2 and the general pow() path.  Kernel
# objects built by hand (bypassing the constructor's check) also exercise the
# boundary beta = -1 through the general path.
imq_raw <- function(c, beta, precon = "id") {
  structure(list(type = "imq", c = c, beta = beta, precon = precon),
            class = c("kb_imq", "kb_kernel"))
}
imq_any <- function(c, beta, precon = "id") {
  if (beta > -1) imq_kernel(c = c, beta = beta, precon = precon)
  else imq_raw(c, beta, precon)
}

imq_params <- list(c(c = 1, beta = -0.5), c(c = 1, beta = -1),
                   c(c = 0.3, beta = -0.3), c(c = 2.5, beta = -0.75),
                   c(c = 0.7, beta = -0.5), c(c = 3, beta = -1),
                   c(c = 1e-3, beta = -0.999), c(c = 1, beta = -1e-3))

test_that("kernel_phi() agrees with the closed forms (IMQ and Gaussian)", {
  set.seed(1)
  # odd lengths exercise vector tails; > 256 values cross C block boundaries
  r <- c(0, 1e-8, 0.1, 0.5, 1, 2.5, 10, 1e3, stats::rexp(593, 0.2))
  for (p in imq_params) {
    got <- kernbayes:::kernel_phi(imq_any(p[["c"]], p[["beta"]]), r)
    want <- ref_phi("imq", r, p[["c"]], p[["beta"]])
    expect_identical(dim(got), c(length(r), 3L))
    expect_identical(colnames(got), c("phi", "dphi", "d2phi"))
    for (j in 1:3) {
      expect_lt(max(abs(got[, j] - want[, j]) / abs(want[, j])), 1e-13,
                label = sprintf("IMQ c=%g beta=%g column %d", p[["c"]],
                                p[["beta"]], j))
    }
  }
  got <- kernbayes:::kernel_phi(gaussian_kernel(), r[r < 600])
  want <- ref_phi("gaussian", r[r < 600])
  for (j in 1:3) {
    expect_lt(max(abs(got[, j] - want[, j]) / abs(want[, j])), 1e-14)
  }
})

test_that("kernel_phi() ignores the preconditioner and has exact values at 0", {
  expect_equal(unname(kernbayes:::kernel_phi(imq_kernel(c = 4, beta = -0.5,
                                                        precon = "med"), 0)),
               matrix(c(0.5, -0.0625, 0.75 / 32), 1), tolerance = 1e-15)
  expect_equal(unname(kernbayes:::kernel_phi(imq_raw(2, -1), 0)),
               matrix(c(0.5, -0.25, 0.25), 1), tolerance = 1e-15)
  expect_equal(unname(kernbayes:::kernel_phi(gaussian_kernel(), c(0, 2))),
               cbind(exp(c(0, -1)), -exp(c(0, -1)) / 2, exp(c(0, -1)) / 4),
               tolerance = 1e-15)
})

test_that("phi' and phi'' match central finite differences", {
  r <- c(0, 0.05, 0.3, 1, 2, 7.5, 30)
  check_fd <- function(kernel, label) {
    h <- 1e-5 * pmax(1, r)
    p <- kernbayes:::kernel_phi(kernel, r)
    pp <- kernbayes:::kernel_phi(kernel, r + h)
    pm <- kernbayes:::kernel_phi(kernel, r - h)
    d1 <- (pp[, "phi"] - pm[, "phi"]) / (2 * h)
    d2 <- (pp[, "dphi"] - pm[, "dphi"]) / (2 * h)
    expect_lt(max(abs(d1 - p[, "dphi"]) / abs(p[, "dphi"])), 1e-6,
              label = paste(label, "phi'"))
    expect_lt(max(abs(d2 - p[, "d2phi"]) / abs(p[, "d2phi"])), 1e-6,
              label = paste(label, "phi''"))
  }
  for (p in imq_params[1:6]) {
    check_fd(imq_any(p[["c"]], p[["beta"]]),
             sprintf("IMQ(c=%g, beta=%g)", p[["c"]], p[["beta"]]))
  }
  check_fd(gaussian_kernel(), "Gaussian")
})

# ---- gradients of k(x, y) = phi((x - y)' L (x - y)) -------------------------

# k(x, y) for one pair, built on the package's phi.
pkg_k <- function(kernel, L) {
  function(x, y) {
    u <- x - y
    kernbayes:::kernel_phi(kernel, sum(u * (L %*% u)))[1, "phi"]
  }
}

# Numerical grad_x k, grad_y k and tr(d^2 k / dx dy) (the mixed Hessian).
num_derivs <- function(k, x, y, h = 1e-4) {
  d <- length(x)
  gx <- gy <- mixed <- numeric(d)
  E <- diag(h, d)
  for (a in seq_len(d)) {
    gx[a] <- (k(x + E[, a], y) - k(x - E[, a], y)) / (2 * h)
    gy[a] <- (k(x, y + E[, a]) - k(x, y - E[, a])) / (2 * h)
    mixed[a] <- (k(x + E[, a], y + E[, a]) - k(x + E[, a], y - E[, a]) -
                   k(x - E[, a], y + E[, a]) + k(x - E[, a], y - E[, a])) /
      (4 * h^2)
  }
  list(gx = gx, gy = gy, tr = sum(mixed))
}

kernels_for_fd <- list(
  imq_a = imq_kernel(),
  imq_b = imq_raw(c = 1, beta = -1),
  imq_c = imq_kernel(c = 0.5, beta = -0.3),
  imq_d = imq_kernel(c = 2, beta = -0.75),
  gauss = gaussian_kernel()
)

test_that("grad_x k = 2 phi' L u, grad_y k = -2 phi' L u and the trace of the mixed Hessian", {
  set.seed(2)
  L <- matrix(c(1.2, 0.4, -0.3,
                0.4, 0.9, 0.2,
                -0.3, 0.2, 0.7), 3)
  for (nm in names(kernels_for_fd)) {
    kern <- kernels_for_fd[[nm]]
    k <- pkg_k(kern, L)
    for (rep in 1:3) {
      x <- stats::rnorm(3)
      y <- stats::rnorm(3)
      u <- x - y
      r <- sum(u * (L %*% u))
      p <- kernbayes:::kernel_phi(kern, r)
      nd <- num_derivs(k, x, y)
      gx <- as.numeric(2 * p[, "dphi"] * L %*% u)
      tr <- -4 * p[, "d2phi"] * sum((L %*% u)^2) - 2 * p[, "dphi"] * sum(diag(L))
      expect_lt(max(abs(nd$gx - gx)) / max(abs(gx)), 1e-6, label = nm)
      expect_lt(max(abs(nd$gy + gx)) / max(abs(gx)), 1e-6, label = nm)
      # the two terms of the trace can nearly cancel: scale by their size
      tr_scale <- 4 * abs(p[, "d2phi"]) * sum((L %*% u)^2) +
        2 * abs(p[, "dphi"]) * sum(diag(L))
      expect_lt(abs(nd$tr - tr) / tr_scale, 1e-6, label = nm)
    }
  }
})

test_that("stein_kernel_matrix() on two points equals the Stein kernel built from numerical derivatives", {
  set.seed(3)
  L <- matrix(c(1.5, -0.6, -0.6, 0.8), 2)
  for (nm in names(kernels_for_fd)) {
    base <- kernels_for_fd[[nm]]
    kern <- if (base$type == "imq") {
      imq_any(base$c, base$beta, precon = L)
    } else {
      gaussian_kernel(precon = L)
    }
    k <- pkg_k(base, L)
    for (rep in 1:3) {
      x <- stats::rnorm(2)
      y <- stats::rnorm(2)
      sx <- stats::rnorm(2)
      sy <- stats::rnorm(2)
      nd <- num_derivs(k, x, y)
      want <- sum(sx * sy) * k(x, y) + sum(sx * nd$gy) + sum(sy * nd$gx) +
        nd$tr
      K <- stein_kernel_matrix(rbind(x, y), rbind(sx, sy), kernel = kern, standardize = FALSE)
      scale <- abs(sum(sx * sy) * k(x, y)) + abs(sum(sx * nd$gy)) +
        abs(sum(sy * nd$gx)) + abs(nd$tr)
      expect_lt(abs(K[1, 2] - want) / scale, 1e-6, label = nm)
      expect_identical(K[1, 2], K[2, 1])
      # the diagonal: |s_x|^2 phi(0) - 2 phi'(0) tr(L)
      p0 <- kernbayes:::kernel_phi(base, 0)
      expect_equal(K[1, 1], sum(sx^2) * p0[[1, "phi"]] -
                     2 * p0[[1, "dphi"]] * sum(diag(L)), tolerance = 1e-13)
    }
  }
})

# ---- preconditioner heuristics ----------------------------------------------

test_that("heuristics on the 3 x 2 sample (1,2), (3,5), (6,9)", {
  x <- matrix(c(1, 2, 3, 5, 6, 9), 3, byrow = TRUE)
  rk <- function(precon) kernbayes:::resolve_kernel(imq_kernel(precon = precon), x)
  # pairwise distances sqrt(13), sqrt(74), 5: median 5
  expect_equal(rk("med")$L, diag(2) / 25, tolerance = 1e-15)
  expect_equal(rk("sclmed")$L, diag(2) * log(3) / 25, tolerance = 1e-15)
  expect_equal(rk("id")$L, diag(2), tolerance = 0)
  expect_equal(rk("smpcov")$L, solve(stats::cov(x)), tolerance = 1e-12)
  expect_equal(rk(0.25)$L, diag(2) * 4, tolerance = 1e-15)
  A <- matrix(c(2, 0.5, 0.5, 1), 2)
  expect_equal(rk(A)$L, A, tolerance = 1e-14)
  expect_equal(rk(diag(c(2, 3)))$L, diag(c(2, 3)), tolerance = 0)
  expect_equal(kernbayes:::resolve_kernel(gaussian_kernel(), x)$L,
               diag(2) / 25, tolerance = 1e-15)
  expect_equal(kernbayes:::resolve_kernel(gaussian_kernel(precon = "sclmed"), x)$L,
               diag(2) * log(3) / 25, tolerance = 1e-15)
  # the reference agrees on this example too
  expect_equal(ref_precon(x, "med"), diag(2) / 25, tolerance = 1e-15)
  expect_equal(ref_precon(x, "sclmed"), diag(2) * log(3) / 25, tolerance = 1e-15)
})

test_that("heuristics agree with the reference for random samples", {
  set.seed(4)
  for (d in c(1, 2, 5)) {
    x <- matrix(stats::rnorm(40 * d), 40, d) %*% diag(seq_len(d), d)
    for (pc in c("id", "med", "sclmed", "smpcov")) {
      got <- kernbayes:::resolve_kernel(imq_kernel(precon = pc), x)$L
      expect_lt(rel_err(got, ref_precon(x, pc)), 1e-12,
                label = sprintf("%s d=%d", pc, d))
    }
  }
})

test_that("n > 1000: med / sclmed use the evenly spaced subsample of 1000 rows", {
  set.seed(5)
  n <- 1500
  x <- matrix(stats::rnorm(n * 2), n, 2)
  # rows outside the subsample are pushed far away: the full-sample median
  # would be much larger
  keep <- floor(seq(0, n - 1, length.out = 1000)) + 1
  x[-keep, ] <- x[-keep, ] * 10
  med_sub <- ref_median_distance(x)
  expect_gt(stats::median(stats::dist(x)) / med_sub, 1.5)
  got <- kernbayes:::resolve_kernel(imq_kernel(precon = "med"), x)$L
  expect_lt(rel_err(got, diag(2) / med_sub^2), 1e-12)
  expect_lt(rel_err(got, ref_precon(x, "med")), 1e-12)
  got <- kernbayes:::resolve_kernel(gaussian_kernel(precon = "sclmed"), x)$L
  expect_lt(rel_err(got, diag(2) * log(1000) / med_sub^2), 1e-12)
})

test_that("n = 1000 uses every row and log(1000)", {
  set.seed(6)
  x <- matrix(stats::rnorm(2000), 1000, 2)
  m <- stats::median(stats::dist(x))
  got <- kernbayes:::resolve_kernel(imq_kernel(precon = "sclmed"), x)$L
  expect_lt(rel_err(got, diag(2) * log(1000) / m^2), 1e-12)
})

# ---- bad input ----------------------------------------------------------------

test_that("imq_kernel() rejects bad c and beta", {
  expect_error(imq_kernel(c = 0), "'c'")
  expect_error(imq_kernel(c = -1), "'c'")
  expect_error(imq_kernel(c = NA), "'c'")
  expect_error(imq_kernel(c = NaN), "'c'")
  expect_error(imq_kernel(c = Inf), "'c'")
  expect_error(imq_kernel(c = "1"), "'c'")
  expect_error(imq_kernel(c = c(1, 2)), "'c'")
  expect_error(imq_kernel(c = numeric(0)), "'c'")
  expect_error(imq_kernel(beta = 0), "'beta'")
  expect_error(imq_kernel(beta = -1), "'beta'")
  expect_error(imq_kernel(beta = 0.5), "'beta'")
  expect_error(imq_kernel(beta = -1.5), "'beta'")
  expect_error(imq_kernel(beta = NA_real_), "'beta'")
  expect_error(imq_kernel(beta = "-0.5"), "'beta'")
})

test_that("kernel constructors reject bad preconditioners", {
  expect_error(imq_kernel(precon = "foo"), "'precon'")
  expect_error(imq_kernel(precon = c("id", "med")), "'precon'")
  expect_error(imq_kernel(precon = NA_character_), "'precon'")
  expect_error(imq_kernel(precon = NA), "'precon'")
  expect_error(imq_kernel(precon = 0), "'precon'")
  expect_error(imq_kernel(precon = -2), "'precon'")
  expect_error(imq_kernel(precon = Inf), "'precon'")
  expect_error(imq_kernel(precon = c(1, 2)), "'precon'")
  expect_error(imq_kernel(precon = list(1)), "'precon'")
  expect_error(imq_kernel(precon = matrix(1, 2, 3)), "'precon'")
  expect_error(imq_kernel(precon = matrix(c(1, NA, NA, 1), 2)), "'precon'")
  expect_error(imq_kernel(precon = matrix(c(1, Inf, Inf, 1), 2)), "'precon'")
  expect_error(gaussian_kernel(precon = "median"), "'precon'")
  expect_error(gaussian_kernel(bandwidth = 0), "'bandwidth'")
  expect_error(gaussian_kernel(bandwidth = -1), "'bandwidth'")
  expect_error(gaussian_kernel(bandwidth = NA), "'bandwidth'")
})

test_that("resolve_kernel() rejects preconditioners that do not fit the sample", {
  set.seed(7)
  x <- matrix(stats::rnorm(20), 10, 2)
  rk <- function(k, x) kernbayes:::resolve_kernel(k, x)
  expect_error(rk(imq_kernel(precon = diag(3)), x), "'precon'")
  expect_error(rk(imq_kernel(precon = matrix(c(1, 0.5, 0, 1), 2)), x),
               "'precon'.*symmetric")
  expect_error(rk(imq_kernel(precon = matrix(c(1, 2, 2, 1), 2)), x),
               "'precon'.*positive definite")
  expect_error(rk(imq_kernel(precon = diag(c(1, -1))), x),
               "'precon'.*positive definite")
  expect_error(rk(imq_kernel(precon = diag(c(1, 0))), x),
               "'precon'.*positive definite")
  expect_error(rk(imq_kernel(precon = matrix(0, 2, 2)), x), "'precon'")
  expect_error(rk("imq", x), "'kernel'")
  expect_error(rk(list(type = "imq", c = 1, beta = -0.5, precon = "id"), x),
               "'kernel'")
})

test_that("heuristics fail clearly on degenerate samples", {
  x1 <- matrix(c(1, 2), 1)
  xsame <- matrix(c(1, 2), 5, 2, byrow = TRUE)
  xcol <- cbind(1:6, 2 * (1:6) + 1)
  rk <- function(pc, x) kernbayes:::resolve_kernel(imq_kernel(precon = pc), x)
  for (pc in c("med", "sclmed", "smpcov")) {
    expect_error(rk(pc, x1), "'precon'", label = pc)
  }
  expect_error(rk("med", xsame), "'precon'.*med")
  expect_error(rk("sclmed", xsame), "'precon'.*sclmed")
  expect_error(rk("smpcov", xsame), "'precon'.*smpcov")
  expect_error(rk("smpcov", xcol), "'precon'.*smpcov")
  # "id" is fine on one row
  expect_equal(rk("id", x1)$L, diag(2), tolerance = 0)
})

# ---- out-of-range scales name the user's argument ---------------------------

test_that("bandwidths and numeric preconditioners whose L over- or underflows are rejected, naming them", {
  for (bw in c(1e-200, 1e-155, 1e154, 1e200)) {
    expect_error(gaussian_kernel(bandwidth = bw), class = "kb_error_arg",
                 regexp = "^'bandwidth' = .* out of range")
  }
  expect_error(gaussian_kernel(bandwidth = 1e-200), regexp = "overflows")
  expect_error(gaussian_kernel(bandwidth = 1e200), regexp = "underflows")
  for (pc in c(1e-320, 1e-310, 1e308)) {
    expect_error(imq_kernel(precon = pc), class = "kb_error_arg",
                 regexp = "^'precon' = .* out of range")
  }
  # the ends of the range work, and give L = I / precon exactly
  x <- matrix(c(0, 1, 3), ncol = 1)
  expect_equal(kernel_matrix(x, kernel = gaussian_kernel(bandwidth = 1e-150)),
               diag(3))
  expect_equal(kernel_matrix(x * 1e150,
                             kernel = gaussian_kernel(bandwidth = 1e150)),
               unname(exp(-as.matrix(stats::dist(x))^2 / 2)),
               tolerance = 1e-14)
  rk <- kernbayes:::resolve_kernel(imq_kernel(precon = 1e-300), x)
  expect_equal(rk$lambda, 1e300)
})

test_that("heuristics on data too large or too small for L name 'x' with its scale", {
  set.seed(8)
  X <- matrix(stats::rnorm(40), 20)
  rk <- function(pc, x) kernbayes:::resolve_kernel(imq_kernel(precon = pc), x)
  for (pc in c("med", "sclmed")) {
    expect_error(rk(pc, X * 1e200), class = "kb_error_arg",
                 regexp = "^'x' has a median pairwise distance of [0-9.]+e\\+200.*underflows; rescale x")
    expect_error(rk(pc, X * 1e-170), class = "kb_error_arg",
                 regexp = "^'x' has a median pairwise distance of [0-9.]+e-170.*overflows; rescale x")
  }
  expect_error(rk("smpcov", X * 1e200), class = "kb_error_arg",
               regexp = "^'x' has principal standard deviations of [0-9.]+e\\+200 to [0-9.]+e\\+200.*underflows; rescale x")
  expect_error(rk("smpcov", X * 1e-170), class = "kb_error_arg",
               regexp = "^'x' has principal standard deviations of [0-9.]+e-170 to [0-9.]+e-170.*overflows; rescale x")
  # through the user functions, with the reported example
  expect_error(ksd(X * 1e200, -X, imq_kernel(precon = "med"), standardize = FALSE),
               class = "kb_error_arg", regexp = "^'x'.*rescale x")
  expect_error(kernel_matrix(X * 1e-200), class = "kb_error_arg",
               regexp = "^'x'.*rescale x")
  # the median and the covariance are found for data near the limits
  m <- stats::median(stats::dist(X))
  expect_equal(rk("med", X * 2^500)$lambda, 1 / (m * 2^500)^2,
               tolerance = 1e-14)
  expect_equal(rk("smpcov", X * 2^-500)$L,
               solve(stats::cov(X)) * 2^1000, tolerance = 1e-12)
  # a user matrix with eigenvalues or a trace beyond doubles
  expect_error(rk(matrix(c(1.5e308, 1e308, 1e308, 1.5e308), 2), X),
               class = "kb_error_arg", regexp = "^'precon'")
  expect_error(rk(diag(c(1e-310, 1)), X), class = "kb_error_arg",
               regexp = "^'precon'")
  expect_error(rk(diag(c(1e308, 1e308)), X), class = "kb_error_arg",
               regexp = "^'precon'.*trace")
})

test_that("edited kernel objects are rejected, naming 'kernel' or 'precon'", {
  x <- matrix(stats::rnorm(20), 10)
  s <- -x
  k <- imq_kernel()
  for (edit in list(list(type = "foo"), list(type = NULL), list(c = 0),
                    list(c = NULL), list(c = "1"), list(beta = 0.5),
                    list(beta = NA_real_), list(beta = c(-1, -2)))) {
    ke <- utils::modifyList(k, edit)
    class(ke) <- class(k)
    expect_error(ksd(x, s, ke), class = "kb_error_arg", regexp = "^'kernel'")
    expect_error(stein_thin(x, s, 3, ke), class = "kb_error_arg",
                 regexp = "^'kernel'")
  }
  ke <- k
  ke$precon <- 1e-320
  expect_error(ksd(x, s, ke), class = "kb_error_arg", regexp = "^'precon'")
  ke$precon <- "median"
  expect_error(kernel_matrix(x, kernel = ke), class = "kb_error_arg",
               regexp = "^'precon'")
  kg <- gaussian_kernel()
  kg$precon <- -1
  expect_error(mmd_thin(x, 3, kernel = kg), class = "kb_error_arg",
               regexp = "^'precon'")
})
