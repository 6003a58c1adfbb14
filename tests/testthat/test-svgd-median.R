# The SVGD median bandwidth (src/flows.c, svgd_median): the exact median of
# all n^2 squared distances (zero diagonal included), selected in passes
# that keep no pair distances.  The reference is plain R from the
# definition: the n (n - 1) / 2 squared distances summed coordinate by
# coordinate (the same numbers, bit for bit, as |x_i - x_j|^2 in C), each
# twice, with n zeros, and stats::median().

ref_median_sq <- function(x) {
  n <- nrow(x)
  i <- rep(seq_len(n - 1L), (n - 1L):1L)
  j <- sequence((n - 1L):1L, from = 2:n)
  d2 <- 0
  for (k in seq_len(ncol(x))) d2 <- d2 + (x[i, k] - x[j, k])^2
  stats::median(c(rep(0, n), rep(d2, 2)))
}

# the internal entry: cap (values a thread may collect; 0 the default) and a
# first interval instead of the sampled bracket steer the passes
med_c <- function(x, cap = 0, bracket = NULL, nthreads = 1L) {
  .Call(kernbayes:::C_kb_svgd_median, x, cap, bracket, nthreads)
}

svgd_h <- function(x, nthreads = 1L) {
  tg <- kb_target(function(x) -rowSums(x^2) / 2, function(x) -x,
                  dim = ncol(x), vectorized = TRUE)
  svgd(x, tg, n_iter = 1, progress = FALSE, nthreads = nthreads)$bandwidth
}

median_cases <- function() {
  set.seed(2031)
  list(odd = matrix(rnorm(2 * 201), 201),             # n^2 odd: one rank
       even = matrix(rnorm(3 * 200), 200),            # two middle ranks
       n2 = matrix(rnorm(4), 2), n3 = matrix(rnorm(3), 3),
       n5 = matrix(rnorm(10), 5),                     # few pairs
       dup = matrix(rep(c(0, 1, 5), length.out = 600), 300),
       dup_half = rbind(matrix(0, 150, 2), matrix(rnorm(400), 200)),
       ints = matrix(as.numeric(sample(0:3, 600, TRUE)), 300),
       heavy = matrix(stats::rcauchy(800)^3, 400),
       far = rbind(matrix(rnorm(200), 100), matrix(rnorm(200) + 1e6, 100)),
       tiny = cbind(rnorm(300), rnorm(300) * 1e-150))
}

test_that("the median equals plain R's, bit for bit: odd and even n, ties, few pairs, heavy tails", {
  for (nm in names(median_cases())) {
    x <- median_cases()[[nm]]
    r <- ref_median_sq(x)
    expect_identical(med_c(x), r, label = nm)
    # and, to rounding (dist() takes a square root), the median of dist()^2
    n <- nrow(x)
    expect_equal(med_c(x), stats::median(c(rep(0, n), rep(as.vector(stats::dist(x))^2, 2))),
                 tolerance = 1e-12, label = nm)
    # the bandwidth svgd() uses, from the same median
    expect_identical(svgd_h(x), sqrt(0.5 * r / log(nrow(x) + 1)), label = nm)
  }
})

test_that("every path of the selection gives the same median: bracket misses, histogram passes, 1 and 2 threads", {
  skip_on_cran()
  cases <- median_cases()
  # overflowed squared distances (Inf) above a finite median (svgd() itself
  # refuses such particles; the selection must still end, exactly)
  set.seed(2033)
  cases$overflow <- matrix(c(rnorm(80), rnorm(20) * 1e200), 100)
  for (nm in names(cases)) {
    x <- cases[[nm]]
    r <- ref_median_sq(x)
    m <- 0.5 * r
    # brackets that miss below, above, hold nothing, hold everything
    brs <- list(NULL, c(0, 0), c(1e9, 2e9), c(m, m), c(2 * r + 1, Inf),
                c(-1, Inf), c(0, 1e300))
    for (br in brs) {
      for (cap in c(0, 1, 7, 100)) {     # small caps: histogram refinements
        for (nt in 1:2) {
          expect_identical(med_c(x, cap, br, nt), r,
                           label = sprintf("%s, cap %d, %d threads, bracket %s", nm,
                                           cap, nt, paste(br, collapse = " ")))
        }
      }
    }
  }
})

test_that("the median at a size where the passes refine a histogram, against a closed form", {
  # points 0, 1, ..., n - 1 on a line: the squared distance k^2 has n - k
  # pairs, so the median of the n^2 entries is known by counting, and the
  # distances tie heavily
  closed_form <- function(n) {
    k <- seq_len(n - 1)
    cum <- n + 2 * cumsum(n - k)        # entries <= k^2 (zeros included)
    at <- function(r) if (r <= n) 0 else k[which(cum >= r)[1]]^2
    nn <- n * n
    if (nn %% 2 == 1) at((nn + 1) / 2) else (at(nn / 2) + at(nn / 2 + 1)) / 2
  }
  for (n in c(3000, 3001)) {
    x <- matrix(as.numeric(seq_len(n) - 1), n)
    expect_identical(med_c(x), closed_form(n))
    expect_identical(med_c(x, cap = 50, nthreads = 2L), closed_form(n))
    expect_identical(med_c(x, cap = 50, bracket = c(0, 1)), closed_form(n))
  }
  # points in general position: the sampled bracket, then collection or
  # histogram passes
  set.seed(2032)
  x <- matrix(rnorm(2 * 2500), 2500)
  r <- ref_median_sq(x)
  expect_identical(med_c(x), r)
  expect_identical(med_c(x, cap = 1000, nthreads = 2L), r)
})

test_that("svgd() with the median bandwidth runs above 65536 particles", {
  skip_on_cran()
  # about 10-20 s: one iteration at n = 65537 in d = 1, the closed-form
  # median of equally spaced points
  n <- 65537
  x <- matrix(as.numeric(seq_len(n) - 1), n)
  k <- seq_len(n - 1)
  cum <- n + 2 * cumsum(n - k)
  med <- k[which(cum >= (n * n + 1) / 2)[1]]^2
  expect_identical(svgd_h(x, nthreads = 2L), sqrt(0.5 * med / log(n + 1)))
})
