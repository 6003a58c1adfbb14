# The hot loops' copies for wider instruction sets (AVX2, AVX-512F; chosen
# at run time, src/kernels.h) promise the baseline's numbers bit for bit:
# no FMA, the same operations in the same order.  simd_level() caps the
# copies, so every one runs here whatever the CPU the tests run on; each
# result is compared with the baseline's (level 0) by identical().  On a
# machine without AVX2 or AVX-512 the higher levels fall back to what it
# has and the comparison still holds.

simd_results <- function(f) {
  on.exit(kernbayes:::simd_level(2L))
  lapply(0:2, function(l) {
    kernbayes:::simd_level(l)
    f()
  })
}

expect_same_at_every_level <- function(f) {
  r <- simd_results(f)
  expect_identical(r[[2]], r[[1]])
  expect_identical(r[[3]], r[[1]])
}

test_that("simd_level() caps, reports and restores the copies' level", {
  lv <- kernbayes:::simd_level()
  expect_named(lv, c("used", "machine"))
  expect_true(lv[["machine"]] %in% 0:2)
  kernbayes:::simd_level(0L)
  expect_identical(kernbayes:::simd_level()[["used"]], 0L)
  kernbayes:::simd_level(2L)
  expect_identical(kernbayes:::simd_level()[["used"]], lv[["machine"]])
  expect_error(kernbayes:::simd_level(3L), "level")
  expect_error(kernbayes:::simd_level(NA_integer_), "level")
  expect_identical(kernbayes:::simd_level()[["used"]], lv[["machine"]])
})

test_that("Stein kernel sums agree at every level (IMQ half, IMQ, Gaussian; d = 1..17)", {
  set.seed(11)
  kernels <- list(imq_kernel(), imq_kernel(precon = "med"),
                  imq_kernel(beta = -0.3), imq_kernel(c = 2.5, precon = "med"),
                  gaussian_kernel())
  for (d in c(1L, 2L, 3L, 4L, 5L, 8L, 16L, 17L)) for (n in c(13L, 261L)) {
    x <- matrix(rnorm(n * d), n)
    s <- -x + 0.1
    w <- runif(n)
    expect_same_at_every_level(function()
      lapply(kernels, function(k) c(ksd(x, s, k), ksd(x, s, k, weights = w),
                                    ksd(x, s, k, type = "U"))))
  }
})

test_that("Stein and base kernel matrices, KSD paths and weights agree at every level", {
  set.seed(12)
  x <- matrix(rnorm(300 * 4), ncol = 4)
  s <- -x
  expect_same_at_every_level(function() list(
    stein_kernel_matrix(x[1:37, ], s[1:37, ]),
    stein_kernel_matrix(x[1:37, 1:3], s[1:37, 1:3], imq_kernel(precon = "med")),
    kernel_matrix(x[1:50, ], kernel = imq_kernel()),
    kernel_matrix(x[1:50, ], x[51:90, ], kernel = imq_kernel(precon = "med")),
    ksd_path(x, s),
    ksd_path(x[, 1:2], s[, 1:2], gaussian_kernel()),
    ksd_weights(x[1:60, ], s[1:60, ], progress = FALSE)))
})

test_that("greedy thinning (Stein and MMD) picks the same points at every level", {
  set.seed(13)
  x <- matrix(rnorm(600 * 4), ncol = 4)
  s <- -x
  expect_same_at_every_level(function() list(
    unclass(stein_thin(x, s, 30, progress = FALSE)),
    unclass(stein_thin(x[, 1:3], s[, 1:3], 25, regularize = TRUE,
                       log_density = -rowSums(x[, 1:3]^2) / 2,
                       hessian_diag = matrix(-1, nrow(x), 3),
                       progress = FALSE)),
    unclass(stein_thin(x[1:263, 1:2], s[1:263, 1:2], 40,
                       kernel = gaussian_kernel(), progress = FALSE)),
    unclass(mmd_thin(x[1:400, 1:2], 20, progress = FALSE)),
    unclass(mmd_thin(x[1:300, ], 15, kernel = imq_kernel(), progress = FALSE))))
})

test_that("KSDT keeps the same dictionary at every level", {
  set.seed(14)
  x <- matrix(rnorm(3000 * 2), ncol = 2)
  x[, 1] <- cumsum(x[, 1]) / 30
  s <- -x
  expect_same_at_every_level(function() list(
    unclass(ksdt(x, s, progress = FALSE)),
    unclass(ksdt(x[1:1500, ], s[1:1500, ], budget = 1e-4,
                 kernel = imq_kernel(precon = "med"), progress = FALSE))))
})
