# One standardisation convention (issue 30): every function that measures or
# compresses a sample takes `standardize = TRUE` by default, i.e. each
# column divided by its mean absolute deviation and the scores multiplied by
# it, computed once on the whole (pooled) sample. Checked against the
# plain-R standardisation of helper-reference.R (ref_standardize()).

# A 3-d sample on very different scales (sds 1, 0.01, 50) with its Gaussian
# score, and its plain-R standardisation.
std_sample <- function(n = 120, seed = 301) {
  set.seed(seed)
  sd <- c(1, 0.01, 50)
  x <- matrix(stats::rnorm(n * 3), n, 3) * rep(sd * 1.3, each = n)
  s <- -x / rep(sd^2, each = n)
  list(x = x, s = s, st = ref_standardize(x, s))
}

test_that("standardize defaults to TRUE everywhere a sample is measured or compressed", {
  fns <- list(ksd = ksd, ksd_path = ksd_path, ksd_blocks = ksd_blocks,
              ksd_test = ksd_test, ksd_weights = ksd_weights,
              stein_kernel_matrix = stein_kernel_matrix,
              stein_thin = stein_thin, mmd_thin = mmd_thin,
              kernel_thin = kernel_thin,
              stein_kernel_thin = stein_kernel_thin, ksdt = ksdt,
              ksdt_stream = ksdt_stream, ksdt_sample = ksdt_sample,
              sp_mcmc = sp_mcmc)
  for (nm in names(fns)) {
    expect_identical(formals(fns[[nm]])$standardize, TRUE, label = nm)
  }
  # stein_thin_gf() takes it in `...`: standardised unless told otherwise
  d <- std_sample(40)
  tg <- gaussian_target(c(0, 0, 0), diag(c(1, 1e-4, 2500)))
  gf <- stein_thin_gf(d$x, log_density = tg, log_q = tg, score_q = tg, m = 5,
                      progress = FALSE)
  expect_equal(gf$scale, d$st$scale, tolerance = 1e-14)
  # ksdt_chains() passes it to ksdt_sample(): each chain is standardised
  set.seed(302)
  ch <- ksdt_chains(gaussian_target(c(0, 0), diag(c(1, 1e-4))),
                    rbind(c(0, 0), c(0.5, 0)), 60, step_size = 0.01,
                    warmup = 50, merge = "none", progress = FALSE)
  for (z in ch$chains) expect_length(z$scale, 2L)
})

test_that("standardised results are the unstandardised computation on x / scale with scores * scale", {
  d <- std_sample()
  st <- d$st
  # ksd, all three statistics, and the plain-R Stein kernel
  K <- ref_stein_matrix(st$x, st$s)
  expect_equal(ksd(d$x, d$s), ref_ksd(K), tolerance = 1e-12)
  expect_equal(ksd(d$x, d$s, type = "U"), ref_ksd(K, "U"), tolerance = 1e-11)
  expect_equal(ksd(d$x, d$s), ksd(st$x, st$s, standardize = FALSE),
               tolerance = 1e-13)
  expect_equal(stein_kernel_matrix(d$x, d$s), K, tolerance = 1e-12)
  # a heuristic preconditioner is resolved on the standardised sample
  km <- imq_kernel(precon = "med")
  expect_equal(ksd(d$x, d$s, km),
               ref_ksd(ref_stein(d$x, d$s, precon = "med", standardize = TRUE)),
               tolerance = 1e-12)
  # ksd_path
  p <- ksd_path(d$x, d$s)
  expect_lt(rel_err(p$ksd, ref_ksd_path(K)), 1e-12)
  expect_equal(p$scale, st$scale, tolerance = 1e-14)
  expect_true(p$standardize)
  # ksd_test's statistic (n times the U-statistic)
  tt <- ksd_test(d$x, d$s, n_boot = 9, progress = FALSE)
  expect_equal(unname(tt$statistic), nrow(d$x) * ref_ksd(K, "U"),
               tolerance = 1e-11)
  expect_true(tt$standardize)
  # ksdt: the same stream on the standardised data; its KSD trace is the
  # plain-R KSD of each dictionary
  k1 <- ksdt(d$x, d$s, progress = FALSE)
  k0 <- ksdt(st$x, st$s, standardize = FALSE, progress = FALSE)
  expect_identical(k1$index, k0$index)
  expect_equal(k1$ksd, k0$ksd, tolerance = 1e-13)
  expect_equal(k1$scale, st$scale, tolerance = 1e-14)
  expect_null(k0$scale)
  expect_equal(utils::tail(k1$ksd, 1),
               ref_ksd(K[k1$index, k1$index, drop = FALSE]), tolerance = 1e-12)
  expect_equal(ksd(k1), utils::tail(k1$ksd, 1), tolerance = 1e-13)
  expect_output(print(k1), "standardised columns")
  # kernel thinning, Stein kernel and (default Gaussian, precon "med") base
  # kernel, with the same coin flips
  st96 <- ref_standardize(d$x[1:96, ], d$s[1:96, ])
  set.seed(303)
  a <- kernel_thin(d$x[1:96, ], d$s[1:96, ])
  set.seed(303)
  b <- kernel_thin(st96$x, st96$s, standardize = FALSE)
  expect_identical(a$index, b$index)
  expect_equal(a$ksd, b$ksd, tolerance = 1e-12)
  expect_equal(a$scale, st96$scale, tolerance = 1e-14)
  expect_equal(ksd(a), utils::tail(a$ksd, 1), tolerance = 1e-12)
  set.seed(304)
  a <- kernel_thin(d$x[1:96, ], m = 12)
  set.seed(304)
  b <- kernel_thin(st96$x, m = 12, standardize = FALSE)
  expect_identical(a$index, b$index)
  expect_equal(a$mmd, b$mmd, tolerance = 1e-12)
  expect_equal(a$kernel$L, b$kernel$L, tolerance = 1e-13)
  expect_equal(a$scale, st96$scale, tolerance = 1e-14)
})

test_that("standardize takes column scales, checked against the dimension", {
  d <- std_sample(60)
  sc <- c(2, 0.5, 10)
  n <- nrow(d$x)
  xs <- d$x / rep(sc, each = n)
  ss <- d$s * rep(sc, each = n)
  expect_equal(ksd(d$x, d$s, standardize = sc),
               ksd(xs, ss, standardize = FALSE), tolerance = 1e-13)
  th <- stein_thin(d$x, d$s, 5, standardize = sc)
  expect_identical(th$scale, sc)
  expect_equal(ksd(th), utils::tail(th$ksd, 1), tolerance = 1e-13)
  for (bad in list(c(1, 2), c(1, 0, 1), c(1, NA, 1), c(1, Inf, 1), "a")) {
    expect_error(ksd(d$x, d$s, standardize = bad), class = "kb_error_arg",
                 regexp = "'standardize'")
  }
  expect_error(ksdt_stream(3, standardize = c(1, 2)), class = "kb_error_arg",
               regexp = "'standardize'")
})

test_that("the scale is computed once on all chains pooled, whatever their order", {
  set.seed(305)
  # three chains of different spreads and centres
  ch <- lapply(1:3, function(k) {
    matrix(stats::rnorm(80, mean = k, sd = k), 40, 2) * rep(c(1, 0.01), each = 40)
  })
  tg <- gaussian_target(c(2, 0.02), diag(c(4, 4e-4)))
  x <- do.call(rbind, ch)
  lab <- rep(1:3, each = 40)
  # the same chains in another order (chain 3 first, chain 1 last)
  o <- c(81:120, 41:80, 1:40)
  xo <- x[o, ]
  lo <- c(rep(1, 40), rep(2, 40), rep(3, 40))
  pooled <- ref_standardize(x, x)$scale
  sc <- ksd_path(x, tg, chain = lab)$scale
  expect_equal(sc, pooled, tolerance = 1e-14)
  expect_identical(ksd_path(xo, tg, chain = lo)$scale, sc)
  expect_identical(stein_thin(xo, tg, 5, chain = lo)$scale, sc)
  expect_identical(kernel_thin(xo, tg, chain = lo)$scale, sc)
  expect_identical(mmd_thin(xo, 5, chain = lo)$scale, sc)
  # not the scale of any one chain
  for (k in 1:3) {
    expect_false(isTRUE(all.equal(ref_standardize(ch[[k]], ch[[k]])$scale, sc)))
  }
  # ksdt: every chain's stream uses the pooled scale; the merged result is
  # the same whatever the chain order
  k1 <- ksdt(x, tg, chain = lab, progress = FALSE)
  k2 <- ksdt(xo, tg, chain = lo, progress = FALSE)
  expect_identical(k1$scale, sc)
  expect_identical(k2$scale, sc)
  for (k in 1:3) {
    one <- ksdt(ch[[k]], tg, standardize = sc, progress = FALSE)
    expect_identical(k1$per_chain[[k]]$index, one$index)
    expect_equal(k1$per_chain[[k]]$ksd, one$ksd, tolerance = 1e-14)
    expect_identical(k1$per_chain[[k]]$scale, sc)
  }
  key <- function(p) sort(apply(p, 1L, paste, collapse = ","))
  expect_identical(key(k1$points), key(k2$points))
  expect_equal(ksd(k1), utils::tail(k1$ksd, 1), tolerance = 1e-13)
  # ksd by chain: each chain's KSD under the pooled scale
  bc <- ksd(x, tg, chain = lab, by_chain = TRUE)
  for (k in 1:3) {
    expect_equal(bc$ksd[k], ksd(ch[[k]], tg, standardize = sc),
                 tolerance = 1e-13)
  }
  expect_equal(ksd(xo, tg, chain = lo, by_chain = TRUE)$ksd[4], bc$ksd[4],
               tolerance = 1e-13)
})

test_that("a stream takes the scales of its first push, or the scales given", {
  d <- std_sample(80)
  st <- ksdt_stream(3, progress = FALSE)
  expect_error(ksdt_push(st, d$x[1, ], d$s[1, ]), class = "kb_error_arg",
               regexp = "at least two rows.*standardize")
  # the rejected push left the stream unresolved
  expect_null(st$scale)
  ksdt_push(st, d$x[1:30, ], d$s[1:30, ])
  ksdt_push(st, d$x[31:80, ], d$s[31:80, ])
  r <- ksdt_result(st)
  expect_equal(r$scale, ref_standardize(d$x[1:30, ], d$s[1:30, ])$scale,
               tolerance = 1e-14)
  expect_equal(ksd(r), utils::tail(r$ksd, 1), tolerance = 1e-13)
  # all rows in the first push: ksdt() exactly
  st <- ksdt_stream(3, progress = FALSE)
  ksdt_push(st, d$x, d$s)
  full <- ksdt(d$x, d$s, progress = FALSE)
  expect_identical(ksdt_result(st)$index, full$index)
  expect_identical(ksdt_result(st)$ksd, full$ksd)
  # given scales: one row at a time is ksdt() with those scales
  st <- ksdt_stream(3, standardize = full$scale, progress = FALSE)
  for (i in seq_len(nrow(d$x))) ksdt_push(st, d$x[i, ], d$s[i, ])
  r1 <- ksdt_result(st)
  expect_identical(r1$index, full$index)
  expect_identical(r1$ksd, full$ksd)
  expect_identical(r1$scale, full$scale)
})

test_that("ksdt_sample() and sp_mcmc() take the scales of their pilot, or the scales given", {
  tg <- gaussian_target(c(0, 0), diag(c(1, 1e-4)))
  x0 <- c(0.5, 0.005)
  # given scales and step: no pilot, and the run is ksdt() with those scales
  # on the same chain, bit for bit
  sc <- c(0.8, 0.008)
  for (smp in c("mala", "rwm")) {
    set.seed(306)
    ks <- ksdt_sample(tg, x0, 120, sampler = smp, step_size = 0.005,
                      standardize = sc, progress = FALSE)
    set.seed(306)
    ch <- ref_chain(tg, x0, 120, 0.005, smp)
    fit <- ksdt(ch$x, tg, standardize = sc, progress = FALSE)
    expect_identical(ks$index, fit$index, label = smp)
    expect_identical(ks$ksd, fit$ksd, label = smp)
    expect_identical(ks$scale, sc, label = smp)
  }
  # the regularised candidate rule: the Laplacian term in the standardised
  # coordinates, as ksdt() takes it
  set.seed(307)
  ks <- ksdt_sample(tg, x0, 40, step_size = 0.005, candidates = 3,
                    regularize = 0.05, standardize = sc, progress = FALSE)
  set.seed(307)
  ch <- ref_chain(tg, x0, 120, 0.005, "mala")
  fit <- ksdt(ch$x, tg, candidates = 3, regularize = 0.05, standardize = sc,
              progress = FALSE)
  expect_identical(ks$index, fit$index)
  expect_identical(ks$ksd, fit$ksd)
  # default: the mean absolute deviations of the pilot chain
  set.seed(308)
  ks <- ksdt_sample(tg, x0, 60, step_size = 0.005, warmup = 200,
                    progress = FALSE)
  set.seed(308)
  pilot <- ref_chain(tg, x0, 200, 0.005, "mala", warmup = 200)
  expect_equal(ks$scale, ref_standardize(pilot$x, pilot$x)$scale,
               tolerance = 1e-12)
  expect_equal(ksd(ks), utils::tail(ks$ksd, 1), tolerance = 1e-13)
  set.seed(309)
  sp <- sp_mcmc(tg, x0, 20, candidates = 3, step_size = 0.005, warmup = 200,
                progress = FALSE)
  set.seed(309)
  pilot <- ref_chain(tg, x0, 200, 0.005, "mala", warmup = 200)
  expect_equal(sp$scale, ref_standardize(pilot$x, pilot$x)$scale,
               tolerance = 1e-12)
  expect_equal(ksd(sp), utils::tail(sp$ksd, 1), tolerance = 1e-13)
  expect_output(print(sp), "standardised columns")
})

test_that("merging dictionaries with different scales standardises the union", {
  d <- std_sample(100)
  a <- ksdt(d$x[1:50, ], d$s[1:50, ], progress = FALSE)
  b <- ksdt(d$x[51:100, ], d$s[51:100, ], progress = FALSE)
  expect_false(identical(a$scale, b$scale))
  expect_message(m <- c(a, b), "column scales \\(standardize = TRUE\\) were fitted on each run")
  u <- rbind(a$points, b$points)
  expect_equal(m$scale, ref_standardize(u, u)$scale, tolerance = 1e-14)
  expect_equal(ksd(m), utils::tail(m$ksd, 1), tolerance = 1e-13)
  expect_message(m2 <- c(a, b, how = "stein_thin"), "column scales \\(standardize = TRUE\\) were fitted on each run")
  expect_identical(m2$scale, m$scale)
  expect_equal(ksd(m2), utils::tail(m2$ksd, 1), tolerance = 1e-13)
  # the same scales: no message, kept
  a2 <- ksdt(d$x[1:50, ], d$s[1:50, ], standardize = a$scale, progress = FALSE)
  b2 <- ksdt(d$x[51:100, ], d$s[51:100, ], standardize = a$scale,
             progress = FALSE)
  expect_silent(m3 <- c(a2, b2))
  expect_identical(m3$scale, a$scale)
})
