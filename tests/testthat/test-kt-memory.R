# kernel_thin(method = "kt") on kernel rows computed on the fly (O(n d)
# memory, src/kt.c kb_kernel_thin_rows) against the n x n kernel matrix:
# the same coresets for the same seed.  The route is forced by the internal
# option kernbayes.kt_matrix_max (bytes of the matrix; 0: rows, Inf:
# matrix; R/kt.R kt_matrix_route()).

kt_by_route <- function(lim, x, ...) {
  old <- options(kernbayes.kt_matrix_max = lim)
  on.exit(options(old))
  set.seed(11)
  kernel_thin(x, ..., method = "kt")
}

test_that("the kernel functions give the matrix entries wherever a point sits", {
  # the premise of the rows route: a value depends neither on the point's
  # place in a row nor on which point is the row point
  set.seed(5)
  x <- matrix(rnorm(300 * 3), 300)
  st <- kernbayes:::stein_setup(x, -x, imq_kernel(), TRUE)
  K <- .Call(kernbayes:::C_kb_stein_matrix, st$x, st$s, st$kernel, 1L)
  r <- c(300:1, 5, 5)
  Kr <- .Call(kernbayes:::C_kb_stein_matrix, st$x[r, ], st$s[r, ],
              st$kernel, 1L)
  expect_identical(K[r, r], Kr)
  G <- .Call(kernbayes:::C_kb_gram, st$x, st$x, st$kernel, 1L)
  expect_identical(G, t(G))
  expect_identical(G[r, r], .Call(kernbayes:::C_kb_gram, st$x[r, ],
                                  st$x[r, ], st$kernel, 1L))
})

test_that("KT on kernel rows on the fly equals KT on the kernel matrix", {
  tg <- gaussian_target(c(0, 0, 0))
  for (n in c(256, 2048)) {
    set.seed(n)
    x <- sample_target(tg, n)
    w <- runif(n)
    cases <- list(list(), list(score = tg), list(swap = FALSE),
                  list(score = tg, swap = FALSE), list(weights = w),
                  list(score = tg, weights = w, m = 16L),
                  list(kernel = imq_kernel(), m = n / 4))
    if (n > 256) cases <- cases[1:2]
    for (a in cases) {
      fly <- do.call(kt_by_route, c(list(0, x), a))
      mat <- do.call(kt_by_route, c(list(Inf, x), a))
      lab <- paste(n, paste(names(a), collapse = "+"))
      expect_identical(fly$index, mat$index, label = lab)
      expect_identical(fly$coresets, mat$coresets, label = lab)
      expect_identical(fly, mat, label = lab)
    }
  }
})

test_that("the route option is checked and a matrix too large names compress++", {
  x <- matrix(rnorm(256 * 2), 256)
  expect_error(kt_by_route("a", x), "kt_matrix_max")
  old <- options(kernbayes.max_memory = 1e5)
  on.exit(options(old))
  expect_error(kt_by_route(Inf, x), "would need.*compress\\+\\+")
  expect_silent(kt_by_route(0, x))
})

test_that("the default method is compress++ only above 2^15 rows", {
  expect_identical(kernbayes:::kt_default_max, 2^15)
  set.seed(1)
  x <- matrix(rnorm(64 * 2), 64)
  set.seed(2)
  a <- kernel_thin(x)
  set.seed(2)
  expect_identical(a, kernel_thin(x, method = "kt"))
})

test_that("the rows route refuses a Stein kernel that is not finite, as the matrix route does", {
  # the matrix route checks the whole matrix; the rows route checks the
  # diagonal, which bounds every entry of a positive definite kernel
  set.seed(6)
  x <- matrix(rnorm(64 * 2), 64)
  s <- -x
  s[17, ] <- c(1e200, -1e200)
  for (lim in c(0, Inf)) {
    expect_error(kt_by_route(lim, x, s, m = 16, standardize = FALSE),
                 class = "kb_error_numeric", regexp = "not finite|non-finite|overflows")
  }
})

test_that("the default above 2^15 rows is Compress++ only for a size it can give", {
  skip_on_cran()
  set.seed(8)
  n <- 2^15 + 64
  x <- matrix(rnorm(n * 2), n)
  # 513 = n / 64 is a KT size, not a Compress++ one (a power of 2): KT on
  # kernel rows, where it used to stop with Compress++'s size error
  old <- options(kernbayes.warn_distortion = FALSE)
  on.exit(options(old))
  r <- kernel_thin(x, m = 513)
  expect_length(r$index, 513L)
  expect_identical(r$kt_method, "kt")
  expect_identical(kernel_thin(x, m = 128)$kt_method, "compress++")
})
