# user_kernel(): kernels given by R functions in mmd_flow() and dmmd_flow().

# The Gaussian kernel exp(-|x - y|^2 / (2 h^2)) written out in R, with its
# gradient in both forms user_kernel() takes (no package helpers).
gauss_r <- function(h, weighted) {
  kmat <- function(x, y) {
    K <- matrix(0, nrow(x), nrow(y))
    for (i in seq_len(nrow(x))) for (j in seq_len(nrow(y))) {
      K[i, j] <- exp(-sum((x[i, ] - y[j, ])^2) / (2 * h^2))
    }
    K
  }
  garr <- function(x, y) {
    K <- kmat(x, y)
    G <- array(0, c(nrow(x), nrow(y), ncol(x)))
    for (k in seq_len(ncol(x))) G[, , k] <- -outer(x[, k], y[, k], "-") / h^2 * K
    G
  }
  if (weighted) {
    user_kernel(kmat, function(x, y, w) {
      G <- garr(x, y)
      out <- matrix(0, nrow(x), ncol(x))
      for (k in seq_len(ncol(x))) out[, k] <- G[, , k] %*% w
      out
    }, name = "Gaussian in R")
  } else {
    user_kernel(kmat, garr)
  }
}

test_that("a user kernel reimplementing the Gaussian gives gaussian_kernel()'s flows", {
  set.seed(11)
  y <- matrix(rnorm(40), 20)
  x0 <- matrix(rnorm(30, 1.5), 15)
  h <- 0.7
  for (weighted in c(FALSE, TRUE)) {
    uk <- gauss_r(h, weighted)
    set.seed(5)
    a <- mmd_flow(x0, y, kernel = gaussian_kernel(bandwidth = h), n_iter = 25,
                  step_size = 2, noise = 0.3, keep_every = 5, progress = FALSE)
    set.seed(5)
    b <- mmd_flow(x0, y, kernel = uk, n_iter = 25, step_size = 2, noise = 0.3,
                  keep_every = 5, progress = FALSE)
    expect_lt(max(abs(a$x - b$x)), 1e-12)
    expect_lt(max(abs(a$trace - b$trace)), 1e-12)
    expect_lt(max(abs(a$objective - b$objective)), 1e-12)
    set.seed(6)
    # step 0.05 (the old default, = lambda): with the new default (1) the
    # two kernels' last-bit differences grow to 2e-7 in 25 steps
    a <- dmmd_flow(x0, y, lambda = 0.05, kernel = gaussian_kernel(bandwidth = h),
                   n_iter = 25, step_size = 0.05, noise = function(t) 0.2 / t,
                   progress = FALSE)
    set.seed(6)
    b <- dmmd_flow(x0, y, lambda = 0.05, kernel = uk, n_iter = 25,
                   step_size = 0.05, noise = function(t) 0.2 / t,
                   progress = FALSE)
    expect_lt(max(abs(a$x - b$x)), 1e-12)
    expect_lt(max(abs(a$objective - b$objective)), 1e-12)
    expect_identical(b$settings$kernel, uk)
  }
})

# A kernel that is not radial: k(x, y) = mean_s tanh(a_s'x) tanh(a_s'y)
# (a random-feature kernel), gradient in weighted form.
feature_kernel <- function(A) {
  ph <- function(x) tanh(x %*% t(A))
  user_kernel(function(x, y) ph(x) %*% t(ph(y)) / nrow(A),
              function(x, y, w) {
                v <- as.vector(crossprod(ph(y), w))
                ((1 - ph(x)^2) * rep(v, each = nrow(x))) %*% A / nrow(A)
              })
}

test_that("the witness gradients of a user kernel match finite differences", {
  set.seed(12)
  A <- matrix(rnorm(18), 6)
  uk <- feature_kernel(A)
  x <- matrix(rnorm(12), 4)
  y <- matrix(rnorm(15, 0.5), 5)
  z <- matrix(rnorm(9), 3)
  w <- kernbayes:::mmd_witness(z, x, y, uk)
  wd <- kernbayes:::dmmd_witness(z, x, y, 0.1, uk)
  e <- 1e-6
  for (k in 1:3) {
    zp <- z
    zm <- z
    zp[, k] <- zp[, k] + e
    zm[, k] <- zm[, k] - e
    fd <- (kernbayes:::mmd_witness(zp, x, y, uk)$value -
             kernbayes:::mmd_witness(zm, x, y, uk)$value) / (2 * e)
    expect_equal(w$grad[, k], fd, tolerance = 1e-7)
    fdd <- (kernbayes:::dmmd_witness(zp, x, y, 0.1, uk)$value -
              kernbayes:::dmmd_witness(zm, x, y, 0.1, uk)$value) / (2 * e)
    expect_equal(wd$grad[, k], fdd, tolerance = 1e-6)
  }
  # the witness value against the formula, written out
  K <- function(a, b) tanh(a %*% t(A)) %*% t(tanh(b %*% t(A))) / nrow(A)
  expect_equal(w$value, rowMeans(K(z, x)) - rowMeans(K(z, y)), tolerance = 1e-14)
})

test_that("an MMD flow with a user kernel follows the update written out", {
  set.seed(13)
  A <- matrix(rnorm(12), 6)
  uk <- feature_kernel(A)
  y <- matrix(rnorm(14), 7)
  x <- x0 <- matrix(rnorm(10, 1), 5)
  ph <- function(x) tanh(x %*% t(A))
  for (t in 1:4) {
    g <- matrix(0, 5, 2)
    for (i in 1:5) {
      # grad_x mean_j k(x, x_j) - mean_m k(x, y_m), one particle at a time
      dphi <- (1 - ph(x[i, , drop = FALSE])^2)
      v <- colMeans(ph(x)) - colMeans(ph(y))
      g[i, ] <- (dphi * v) %*% A / nrow(A)
    }
    x <- x - 3 * g
  }
  f <- mmd_flow(x0, y, kernel = uk, n_iter = 4, step_size = 3, progress = FALSE)
  expect_equal(f$x, x, tolerance = 1e-13)
  K <- function(a, b) ph(a) %*% t(ph(b)) / nrow(A)
  expect_equal(f$objective[1L], mean(K(x0, x0)) - 2 * mean(K(x0, y)) +
                 mean(K(y, y)), tolerance = 1e-13)
})

test_that("user_kernel() and the flows check what they are given", {
  expect_error(user_kernel(1, function(x, y) 1), class = "kb_error_arg")
  expect_error(user_kernel(1, function(x, y) 1), "'fun'")
  expect_error(user_kernel(function(x, y) 1), "'grad'")
  expect_error(user_kernel(function(x, y) 1, function(x) 1), "'grad'")
  expect_error(user_kernel(function(x) 1, function(x, y) 1), "'fun'")
  expect_error(user_kernel(function(x, y) 1, function(x, y) 1, name = 2), "'name'")
  expect_output(print(gauss_r(1, TRUE)), "Gaussian in R")
  set.seed(14)
  y <- matrix(rnorm(20), 10)
  x0 <- matrix(rnorm(10), 5)
  good <- gauss_r(1, TRUE)
  flow <- function(k) mmd_flow(x0, y, kernel = k, n_iter = 2, progress = FALSE)
  # wrong dimensions, not numeric, not finite: callback errors naming 'kernel'
  k1 <- user_kernel(function(x, y) good$fun(x, y)[, -1], good$grad)
  expect_error(flow(k1), class = "kb_error_callback")
  expect_error(flow(k1), "'kernel' fun\\(x, y\\) returned a numeric matrix of dimensions 10 x 9; expected 10 x 10")
  k2 <- user_kernel(function(x, y) { K <- good$fun(x, y); K[1, 1] <- NaN; K }, good$grad)
  expect_error(flow(k2), "'kernel' fun\\(x, y\\) returned a non-finite value")
  k3 <- user_kernel(good$fun, function(x, y, w) matrix(0, nrow(x), 3))
  expect_error(flow(k3), "grad\\(x, y, w\\) returned a numeric matrix of dimensions 10 x 3; expected 10 x 2")
  k4 <- user_kernel(good$fun, function(x, y) array(0, c(nrow(x), nrow(y))))
  expect_error(flow(k4), "grad\\(x, y\\) returned a numeric matrix of dimensions 10 x 10; expected 10 x 10 x 2")
  k5 <- user_kernel(good$fun, function(x, y, w) "a")
  expect_error(flow(k5), "returned a character object")
  k6 <- user_kernel(good$fun, function(x, y, w) matrix(Inf, nrow(x), 2))
  expect_error(flow(k6), "'kernel' grad\\(x, y, w\\) returned a non-finite value")
  # only the MMD flows take a user kernel
  expect_error(kernel_matrix(y, kernel = good), "'kernel' is a user_kernel\\(\\)")
  expect_error(mmd_flow(x0, y, kernel = list(), n_iter = 2), "'kernel'")
})
