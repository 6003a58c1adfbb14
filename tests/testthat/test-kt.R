# kernel_thin(): the C code against a plain-R transcription (kt_ref_*,
# helper-kt-ref.R) on the same coin flips, and the quality goal of issue 17.

# The transcription kt_ref_* is in helper-kt-ref.R (shared with
# test-compress.R and inst/bench/bench-kt.R).

kt_same_flips <- function(x, score, m, swap, seed) {
  n <- nrow(x)
  set.seed(seed)
  th <- kernel_thin(x, score, m = m, swap = swap, standardize = FALSE)
  g <- th$rounds
  set.seed(seed)
  u <- runif(g * n / 2)
  K <- if (is.null(score)) {
    kernel_matrix(x, kernel = gaussian_kernel(precon = "med"))
  } else {
    stein_kernel_matrix(x, score, standardize = FALSE)
  }
  mu <- if (is.null(score)) rowMeans(K)
  cs <- kt_ref_split(K, g, 0.5, u)
  list(th = th, cs = cs, idx = if (swap) kt_ref_swap(K, cs, mu) else cs[, 1])
}

test_that("KT-SPLIT and KT-SWAP match the R transcription on the same flips", {
  for (n in c(64, 256)) {
    for (stein in c(TRUE, FALSE)) {
      set.seed(n)
      x <- matrix(rnorm(2 * n), n)
      score <- if (stein) -x
      for (swap in c(TRUE, FALSE)) {
        r <- kt_same_flips(x, score, NULL, swap, seed = 10 + n)
        expect_identical(r$th$coresets, r$cs)
        expect_identical(r$th$index, as.integer(r$idx))
        expect_equal(r$th$m, as.integer(sqrt(n)))
      }
      r <- kt_same_flips(x, score, n / 4, TRUE, seed = 3)
      expect_identical(r$th$index, as.integer(r$idx))
    }
  }
})

test_that("kernel_thin is reproducible, sized as documented, and a kb_thin", {
  set.seed(2)
  x <- matrix(rnorm(2 * 100), 100)
  set.seed(5); a <- kernel_thin(x, -x, standardize = FALSE)
  set.seed(5); b <- kernel_thin(x, -x, standardize = FALSE)
  expect_identical(a$index, b$index)
  expect_s3_class(a, "kb_thin")
  # n = 100: g = round(log2(100) / 2) = 3, m = 12, the last 4 rows dropped
  expect_equal(c(a$rounds, a$m, a$used), c(3, 12, 96))
  expect_true(all(a$index <= 96))
  expect_equal(a$ksd[a$m], ksd(a), tolerance = 1e-10)
  expect_equal(kernel_thin(x, m = 25, standardize = FALSE)$m, 25L)
  expect_error(kernel_thin(x, m = 30, standardize = FALSE), class = "kb_error_arg", regexp = "'m'")
  expect_output(print(a), "kernel thinning: 12 of 100")
  expect_s3_class(summary(a), "summary.kb_thin")
  expect_equal(nrow(as.data.frame(a)), 12)
  m <- kernel_thin(x, standardize = FALSE)
  # the kernel is resolved on all rows, the reference is the 96 thinned
  K <- kernel_matrix(x, kernel = gaussian_kernel(precon = "med"))[1:96, 1:96]
  w <- tabulate(m$index, 96) / m$m - 1 / 96
  expect_equal(m$mmd[m$m], sqrt(max(0, sum(w * (K %*% w)))), tolerance = 1e-8)
})

test_that("kernel_thin standardises, plots and keeps the whole input at g = 0", {
  set.seed(4)
  x <- cbind(rnorm(64, sd = 10), rnorm(64))
  s <- -sweep(x, 2L, c(100, 1), "/")
  set.seed(1)
  a <- kernel_thin(x, s, standardize = TRUE)
  expect_equal(a$ksd[a$m], ksd(a), tolerance = 1e-10)
  expect_false(is.null(a$scale))
  pdf(NULL)
  expect_no_error(plot(a))
  dev.off()
  expect_identical(kernel_thin(x, s, m = 64)$index, 1:64)
})

test_that("bad input is named before any kernel work", {
  x <- matrix(rnorm(40), 20)
  cnt <- 0
  sc <- function(p) { cnt <<- cnt + 1; -p }
  for (call in list(quote(kernel_thin(x, sc, m = 0)),
                    quote(kernel_thin(x, sc, m = 2.5)),
                    quote(kernel_thin(x, sc, swap = NA)),
                    quote(kernel_thin(x, sc, delta = 1)),
                    quote(kernel_thin(x, sc, delta = NA)),
                    quote(kernel_thin(x, sc, method = "compress")),
                    quote(kernel_thin(x, sc, kernel = list())),
                    quote(kernel_thin(x, sc, standardize = NA)),
                    quote(kernel_thin(x, sc, nthreads = 0)),
                    quote(kernel_thin(x, sc, m = 7)))) {
    expect_error(eval(call), class = "kb_error_arg")
  }
  expect_equal(cnt, 0)
  expect_error(kernel_thin("a"), class = "kb_error_arg", regexp = "'x'")
  xna <- x; xna[3, 1] <- NA
  expect_error(kernel_thin(xna), class = "kb_error_arg", regexp = "'x'")
  expect_error(kernel_thin(x, x[-1, ]), class = "kb_error_arg",
               regexp = "'score'")
})

test_that("KT halves the KSD of a uniform subsample (issue 17 goal)", {
  skip_on_cran()
  n <- 2^12
  r <- sapply(1:7, function(s) {
    set.seed(s)
    x <- matrix(rnorm(2 * n), n)
    k <- kernel_thin(x, -x)
    u <- sample(n, k$m)
    c(kt = ksd(k$points, -k$points), unif = ksd(x[u, ], -x[u, ]))
  })
  med <- apply(r, 1, median)
  expect_lt(med[["kt"]], 0.5 * med[["unif"]])
})

test_that("weighted input is rounded to a multiset and debiases", {
  set.seed(11)
  x <- matrix(rnorm(2 * 64), 64)
  w <- rep(c(2, 0), 32)                # N w integral for N = 64: no draws
  set.seed(1)
  a <- kernel_thin(x, -x, weights = w)
  expect_identical(a$multiset, rep(seq(1L, 63L, by = 2L), each = 2L))
  expect_true(all(a$index %in% a$multiset))
  expect_error(kernel_thin(x, -x, weights = rep(-1, 64)), class = "kb_error_arg",
               regexp = "'weights'")
  expect_error(kernel_thin(x, -x, weights = 1:3), class = "kb_error_arg",
               regexp = "'weights'")
  # importance weights turn an N(1, I) sample into N(0, I): thinned with
  # the base kernel (MMD to the weighted sample), the points' mean moves
  # from about (1, 1) to about (0, 0)
  skip_on_cran()
  r <- sapply(1:5, function(s) {
    set.seed(s)
    y <- matrix(rnorm(2 * 1024, mean = 1), 1024)
    iw <- exp(-rowSums(y))                # N(0, I) / N(1, I), up to a constant
    k0 <- kernel_thin(y)
    k1 <- kernel_thin(y, weights = iw)
    c1 <- kernel_thin(y, weights = iw, method = "compress++")
    c(plain = sqrt(sum(colMeans(k0$points)^2)),
      weighted = sqrt(sum(colMeans(k1$points)^2)),
      cpp = sqrt(sum(colMeans(c1$points)^2)))
  })
  med <- apply(r, 1, median)
  expect_gt(med[["plain"]], 1.2)
  expect_lt(med[["weighted"]], 0.3)
  expect_lt(med[["cpp"]], 0.3)
})
