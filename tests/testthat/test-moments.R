# What a compression did to the moments (R/moments.R): the report of every
# compression result against an independent computation from the formulas,
# the distortion warning (fires on the funnel, silent on Gaussian draws),
# KSD weights on results and one sample grammar.

# ---- independent reference: moments from the formulas ------------------------------

# Per column: the set's (weighted) mean and sd with the reliability-weights
# denominator sum(w) - sum(w^2) / sum(w), and the sample's mean and sd.
ref_report <- function(points, sample, w = NULL) {
  if (is.null(w)) w <- rep(1, nrow(points))
  out <- NULL
  for (k in seq_len(ncol(points))) {
    p <- points[, k]
    mu <- sum(w * p) / sum(w)
    v <- sum(w * (p - mu)^2) / (sum(w) - sum(w^2) / sum(w))
    s <- sample[, k]
    ms <- mean(s)
    ss <- sqrt(sum((s - ms)^2) / (length(s) - 1))
    out <- rbind(out, data.frame(mean = mu, sd = sqrt(v), ref_mean = ms,
                                 ref_sd = ss, shift = (mu - ms) / ss,
                                 sd_ratio = sqrt(v) / ss))
  }
  out
}

# The sd-ratio limits by the formula: quantiles of sqrt(chi^2_nu / nu),
# nu = 2 (m - 1) / (kurtosis - 1), at the Bonferroni level 0.01 / (2 d).
ref_limits <- function(sample, m) {
  d <- ncol(sample)
  a <- 0.01 / (2 * d)
  t(apply(sample, 2L, function(s) {
    kap <- mean((s - mean(s))^4) / mean((s - mean(s))^2)^2
    nu <- 2 * (m - 1) / (kap - 1)
    c(lower = min(0.7, sqrt(qchisq(a, nu) / nu)),
      upper = max(1.3, sqrt(qchisq(1 - a, nu) / nu)))
  }))
}

# Skewness and kurtosis of each column, E(x - mu)^k / sigma^k with
# population moments.
ref_shape <- function(x) {
  list(skew = unname(apply(x, 2, function(s) mean((s - mean(s))^3) / mean((s - mean(s))^2)^1.5)),
       kurt = unname(apply(x, 2, function(s) mean((s - mean(s))^4) / mean((s - mean(s))^2)^2)))
}

funnel_draws <- function(n, seed) {
  set.seed(seed)
  v <- rnorm(n, 0, 3)
  x <- cbind(v = v, x1 = rnorm(n, 0, exp(v / 2)), x2 = rnorm(n, 0, exp(v / 2)))
  s <- cbind(v = -v / 9 - 1 + (x[, 2]^2 + x[, 3]^2) * exp(-v) / 2,
             x1 = -x[, 2] * exp(-v), x2 = -x[, 3] * exp(-v))
  list(x = x, s = s)
}

quiet <- function(expr) {
  suppressWarnings(expr, classes = "kb_warning_distortion")
}

test_that("the moment report of a thinned set is the formulas' (unweighted and weighted)", {
  set.seed(501)
  tg <- gaussian_target(c(1, -2), matrix(c(1, 0.6, 0.6, 4), 2))
  x <- sample_target(tg, 1500)
  th <- quiet(stein_thin(x, tg, m = 40))
  r <- compression_moments(th)
  ref <- ref_report(x[th$index, ], x)
  for (k in names(ref)) expect_equal(r[[k]], ref[[k]], tolerance = 1e-12)
  lim <- ref_limits(x, 40)
  expect_equal(r$lower, unname(lim[, "lower"]), tolerance = 1e-12)
  expect_equal(r$upper, unname(lim[, "upper"]), tolerance = 1e-12)
  expect_equal(attr(r, "size"), 40)
  expect_equal(attr(r, "shift_limit"),
               max(0.3, qnorm(1 - 0.01 / 4) * sqrt(1 / 40 - 1 / 1500)))
  # weights given to summary()
  w <- runif(40)
  sw <- summary(th, weights = w)
  ref <- ref_report(x[th$index, ], x, w)
  for (k in names(ref)) expect_equal(sw$moments[[k]], ref[[k]], tolerance = 1e-12)
  expect_equal(sw$kish, sum(w)^2 / sum(w^2), tolerance = 1e-12)
  expect_equal(attr(sw$moments, "size"), sum(w)^2 / sum(w^2), tolerance = 1e-12)
  expect_output(print(sw), "Kish effective size")
  expect_output(print(th), "moments vs the sample \\(1500 points\\)")
})

test_that("every compression result carries its report against the sample it came from", {
  set.seed(502)
  tg <- gaussian_target(c(0, 0), diag(c(1, 9)))
  x <- sample_target(tg, 1024)
  s <- tg$score(x)
  sets <- list(
    stein_thin = quiet(stein_thin(x, s, m = 30)),
    stein_thin_gf = quiet(stein_thin_gf(x, log_density = function(z) tg$log_density(z),
                                        log_q = function(z) tg$log_density(z),
                                        score_q = tg, m = 30)),
    mmd_thin = quiet(mmd_thin(x, m = 30)),
    kernel_thin = quiet(kernel_thin(x, m = 32)),
    stein_kernel_thin = quiet(stein_kernel_thin(x, s, m = 32)),
    ksdt = quiet(ksdt(x, s)))
  for (nm in names(sets)) {
    th <- sets[[nm]]
    r <- compression_moments(th)
    expect_s3_class(r, "kb_moments")
    P <- th$points
    ref <- ref_report(P, x, th[["weights"]])
    expect_equal(r$shift, ref$shift, tolerance = 1e-10, info = nm)
    expect_equal(r$sd_ratio, ref$sd_ratio, tolerance = 1e-10, info = nm)
    expect_equal(attr(r, "reference")$n, 1024, info = nm)
  }
  expect_match(attr(compression_moments(sets$stein_thin_gf), "against"), "proxy q")
  # kernel_thin of a weighted sample is judged against the weighted sample
  w <- runif(1024)
  kt <- quiet(kernel_thin(x, m = 32, weights = w))
  r <- compression_moments(kt)
  # the weighted sample as n rows of frequency weights n w / sum(w)
  wn <- w / sum(w)
  mu <- colSums(x * wn)
  sdw <- sqrt(colSums(1024 * wn * sweep(x, 2, mu)^2) / 1023)
  expect_equal(r$ref_mean, unname(mu), tolerance = 1e-12)
  expect_equal(r$ref_sd, unname(sdw), tolerance = 1e-12)
  # Stein Points select from no sample: no report
  sp <- stein_points(tg, 5, control = list(n_candidates = 20))
  expect_null(compression_moments(sp))
})

test_that("streams, samplers and merges judge against every state they saw", {
  set.seed(503)
  tg <- gaussian_target(c(1, -1), matrix(c(1, 0.5, 0.5, 2), 2))
  ch <- mala(tg, c(3, 3), 900, step_size = 0.9)
  # a stream fed in three pushes: the moments of all 900 rows
  st <- ksdt_stream(2, standardize = FALSE)
  for (r in list(1:200, 201:555, 556:900)) {
    ksdt_push(st, ch$x[r, ], ch$score[r, ])
  }
  res <- ksdt_result(st)
  ref <- ref_report(res$points, ch$x)
  expect_equal(compression_moments(res)$shift, ref$shift, tolerance = 1e-10)
  expect_equal(compression_moments(res)$sd_ratio, ref$sd_ratio, tolerance = 1e-10)
  rr <- attr(compression_moments(res), "reference")
  expect_equal(rr$skew, ref_shape(ch$x)$skew, tolerance = 1e-10)
  expect_equal(rr$kurt, ref_shape(ch$x)$kurt, tolerance = 1e-10)
  # ksdt_sample(): every state of the chain (the moments are accumulated in
  # C, one state at a time)
  set.seed(210)
  ks <- ksdt_sample(tg, c(3, 3), 600, step_size = 0.9, standardize = FALSE)
  set.seed(210)
  ch2 <- mala(tg, c(3, 3), 600, step_size = 0.9)
  rk <- attr(compression_moments(ks), "reference")
  expect_equal(rk$n, 600)
  expect_equal(rk$mean, unname(colMeans(ch2$x)), tolerance = 1e-12)
  expect_equal(rk$sd, unname(apply(ch2$x, 2, sd)), tolerance = 1e-12)
  expect_equal(rk$skew, ref_shape(ch2$x)$skew, tolerance = 1e-10)
  expect_equal(rk$kurt, ref_shape(ch2$x)$kurt, tolerance = 1e-10)
  # with candidates: all states, not only those offered
  set.seed(211)
  ks3 <- ksdt_sample(tg, c(3, 3), 200, step_size = 0.9, candidates = 3,
                     standardize = FALSE)
  set.seed(211)
  ch3 <- mala(tg, c(3, 3), 600, step_size = 0.9)
  expect_equal(attr(compression_moments(ks3), "reference")$mean,
               unname(colMeans(ch3$x)), tolerance = 1e-12)
  # sp_mcmc(): the pilot chain, said so
  sp <- sp_mcmc(tg, c(0, 0), 30, warmup = 200)
  expect_match(attr(compression_moments(sp), "against"), "pilot chain's 200 states")
  # a merge: the dictionaries' samples pooled
  a <- ksdt(ch$x[1:450, ], ch$score[1:450, ], standardize = FALSE)
  b <- ksdt(ch$x[451:900, ], ch$score[451:900, ], standardize = FALSE)
  m <- merge(a, b)
  ref <- ref_report(m$points, ch$x)
  expect_equal(compression_moments(m)$shift, ref$shift, tolerance = 1e-10)
  expect_equal(compression_moments(m)$sd_ratio, ref$sd_ratio, tolerance = 1e-10)
  # several chains in one ksdt(): the whole sample
  kc <- ksdt(ch$x, ch$score, chain = rep(1:3, each = 300), standardize = FALSE)
  ref <- ref_report(kc$points, ch$x)
  expect_equal(compression_moments(kc)$sd_ratio, ref$sd_ratio, tolerance = 1e-10)
})

test_that("the report is finite for samples near the largest doubles and combines exactly", {
  set.seed(509)
  x <- matrix(rnorm(200), 100) * 1e300
  r <- kernbayes:::sample_moments(x)
  expect_true(all(is.finite(unlist(r))))
  expect_equal(r$sd, apply(x / 1e300, 2, sd) * 1e300, tolerance = 1e-12)
  expect_equal(r$kurt, ref_shape(x / 1e300)$kurt, tolerance = 1e-10)
  # pooling two parts in any split is the moments of the whole
  y <- matrix(rexp(300) * 5 + 3, 100)
  for (k in c(1, 2, 37, 99)) {
    a <- kernbayes:::sample_moments(y[1:k, , drop = FALSE])
    b <- kernbayes:::sample_moments(y[-(1:k), , drop = FALSE])
    ab <- kernbayes:::moments_combine(a, b)
    whole <- kernbayes:::sample_moments(y)
    for (f in c("mean", "sd", "skew", "kurt")) {
      expect_equal(ab[[f]], whole[[f]], tolerance = 1e-12, info = paste(k, f))
    }
  }
  f <- funnel_draws(100, 1)
  th <- quiet(stein_thin(f$x * 1e299, f$s / 1e299, m = 10))
  expect_true(all(is.finite(as.matrix(compression_moments(th)[, c("mean", "sd", "shift", "sd_ratio")]))))
})

test_that("the distortion warning fires on the funnel and stays silent on Gaussian draws", {
  # (helper-distortion.R switches it off for the other tests)
  old <- options(kernbayes.warn_distortion = TRUE)
  on.exit(options(old), add = TRUE)
  f <- funnel_draws(4000, 504)
  expect_warning(th <- stein_thin(f$x, f$s, m = 100),
                 class = "kb_warning_distortion")
  r <- compression_moments(th)
  expect_true(r$flagged[r$variable == "v"])
  expect_lt(r$sd_ratio[1], 0.7)
  w <- tryCatch(stein_thin(f$x, f$s, m = 100), kb_warning_distortion = function(w) w)
  expect_match(conditionMessage(w), "stein_thin\\(\\) moved [1-3] of 3 coordinates away from the moments of the sample \\(4000 points\\)")
  expect_match(conditionMessage(w), "v \\(shift")
  expect_match(conditionMessage(w), "kernel_thin\\(\\)")
  expect_s3_class(w$moments, "kb_moments")
  # the option silences it
  options(kernbayes.warn_distortion = FALSE)
  expect_silent(stein_thin(f$x, f$s, m = 100))
  options(kernbayes.warn_distortion = TRUE)
  # Gaussian draws: no method warns, over several samples and sizes
  for (seed in 1:3) for (d in c(2, 8)) {
    set.seed(510 + seed)
    tg <- gaussian_target(rep(0, d), diag(seq_len(d)))
    x <- sample_target(tg, 1024)
    s <- tg$score(x)
    for (m in c(32, 128)) {
      expect_warning(stein_thin(x, s, m = m), NA)
      expect_warning(kernel_thin(x, s, m = m), NA)
      expect_warning(x[seq(1, 1024, length.out = m), ], NA)
    }
    expect_warning(ksdt(x, s), NA)
  }
})

test_that("random subsets of Gaussian draws are flagged at about the design rate", {
  skip_on_cran()
  set.seed(505)
  flagged <- 0
  total <- 0
  for (d in c(2, 20)) {
    x <- matrix(rnorm(4000 * d), 4000)
    ref <- kernbayes:::sample_moments(x)
    for (m in c(20, 100)) for (i in 1:150) {
      r <- kernbayes:::moment_report(x[sample(4000, m), , drop = FALSE], NULL,
                                     ref, "s")
      flagged <- flagged + any(r$flagged)
      total <- total + 1
    }
  }
  # design: 1% family-wise; the normal approximations of small subsets
  # measured 0-4% per cell (m = 20..200, d = 2..20)
  expect_lt(flagged / total, 0.05)
})

test_that("ksd_weights() of a result uses its kernel and standardisation", {
  set.seed(506)
  tg <- gaussian_target(c(0, 1), matrix(c(2, 0.3, 0.3, 1), 2))
  x <- sample_target(tg, 800)
  s <- tg$score(x)
  ch <- mala(tg, c(0, 0), 600, step_size = 1)
  res <- list(quiet(stein_thin(x, s, m = 40)),
              quiet(stein_thin(x, s, m = 40, standardize = FALSE,
                               kernel = imq_kernel(precon = "med"))),
              quiet(kernel_thin(x, s, m = 50)),
              quiet(ksdt(x, s)),
              quiet(ksdt(ch)),
              quiet(stein_kernel_thin(x, s, m = 50)))
  for (th in res) {
    w <- quiet(ksd_weights(th))
    expect_s3_class(w, "kb_weights")
    expect_length(w, nrow(th$points))
    expect_equal(sum(w), 1)
    expect_equal(attr(w, "ksd"), ksd(th, weights = as.numeric(w)), tolerance = 1e-8)
    # the independent route: the Stein matrix of the result's points in the
    # standardised coordinates, and the quadratic form
    # (the kernel with its resolved preconditioner as a fixed matrix)
    sc <- th[["scale"]] %||% rep(1, 2)
    kern <- th$kernel$kernel
    kern$precon <- th$kernel$L
    K <- stein_kernel_matrix(sweep(th$points, 2, sc, "/"),
                             sweep(th$score, 2, sc, "*"), kern,
                             standardize = FALSE)
    expect_equal(attr(w, "ksd"), sqrt(drop(crossprod(as.numeric(w), K %*% as.numeric(w)))),
                 tolerance = 1e-8)
    expect_lte(attr(w, "ksd"), ksd(th) + 1e-12)
    # the report of the weighted set, against the result's sample
    r <- attr(w, "moments")
    expect_equal(attr(r, "reference"), attr(compression_moments(th), "reference"))
    expect_equal(r$mean, unname(colSums(th$points * as.numeric(w))), tolerance = 1e-12)
    expect_output(print(w), "Kish effective size")
    expect_output(print(summary(w)), "KSD-optimal weights")
    expect_equal(summary(th, weights = w)$kish,
                 sum(w)^2 / sum(as.numeric(w)^2), tolerance = 1e-12)
  }
  # an MMD-thinning result needs the score
  mt <- quiet(mmd_thin(x, m = 20))
  expect_error(ksd_weights(mt), class = "kb_error_arg", regexp = "score")
  w <- quiet(ksd_weights(mt, tg))
  expect_equal(attr(w, "ksd"), ksd(mt, tg, weights = as.numeric(w)), tolerance = 1e-8)
  # a kernel or standardize with a result is refused, naming it
  expect_error(ksd_weights(res[[1]], kernel = gaussian_kernel()),
               class = "kb_error_arg", regexp = "'kernel'")
  expect_error(ksd_weights(res[[1]], standardize = FALSE),
               class = "kb_error_arg", regexp = "'standardize'")
  expect_error(ksd_weights(res[[1]], s[1:40, ]), class = "kb_error_arg",
               regexp = "'score'")
  # weights travel to the draws
  skip_if_not_installed("posterior")
  w <- quiet(ksd_weights(res[[1]]))
  df <- posterior::as_draws_df(res[[1]], weights = w)
  expect_equal(exp(df$.log_weight) / sum(exp(df$.log_weight)),
               as.numeric(w), tolerance = 1e-12)
})

test_that("ksd_weights() on a sample keeps its attributes and reports the weighted set", {
  set.seed(507)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 60)
  w <- ksd_weights(x, tg)
  expect_s3_class(w, "kb_weights")
  expect_equal(attr(w, "ksd"), ksd(x, tg, weights = as.numeric(w)), tolerance = 1e-8)
  r <- attr(w, "moments")
  ref <- ref_report(x, x, as.numeric(w))
  expect_equal(r$shift, ref$shift, tolerance = 1e-12)
  expect_equal(r$sd_ratio, ref$sd_ratio, tolerance = 1e-12)
  expect_match(attr(r, "against"), "unweighted sample")
})

test_that("every function takes the package's own results as samples", {
  set.seed(508)
  tg <- gaussian_target(c(0, 0), diag(c(1, 2)))
  ch <- mala(tg, c(0, 0), 400, step_size = 1)
  th <- quiet(stein_thin(ch, m = 64))
  kt <- quiet(ksdt(ch))
  pf <- svgd(th$points, tg, n_iter = 5, step_size = 0.01)
  forms <- list(chain = ch, thin = th, ksdt = kt, particles = pf)
  for (nm in names(forms)) {
    obj <- forms[[nm]]
    P <- if (nm == "chain") ch$x else if (nm == "particles") pf$x else obj$points
    # the scores the object carries: tg$score(P) can differ from them in
    # the last bit (a batch of 64 rows against the chain's 400), and KSDT's
    # choices follow such differences
    S <- if (is.null(obj$score)) tg$score(P) else obj$score
    sc <- if (nm == "particles") tg else NULL
    # the same numbers as for the plain matrix
    k_obj <- if (nm %in% c("thin", "ksdt")) ksd(P, S) else ksd(obj, tg)
    expect_equal(k_obj, ksd(P, S), tolerance = 1e-10, info = nm)
    expect_equal(ksd_path(obj, sc)$ksd, ksd_path(P, S)$ksd, tolerance = 1e-10,
                 info = nm)
    expect_equal(quiet(stein_thin(obj, sc, m = 8))$index,
                 quiet(stein_thin(P, S, m = 8))$index, info = nm)
    expect_equal(quiet(mmd_thin(obj, m = 8))$index,
                 quiet(mmd_thin(P, m = 8))$index, info = nm)
    set.seed(1)
    a <- quiet(kernel_thin(obj))$index
    set.seed(1)
    expect_equal(a, quiet(kernel_thin(P))$index, info = nm)
    expect_equal(quiet(ksdt(obj, sc))$index, quiet(ksdt(P, S))$index, info = nm)
    expect_equal(as.numeric(quiet(ksd_weights(P, S))),
                 as.numeric(quiet(if (nm %in% c("thin", "ksdt"))
                   ksd_weights(P, S) else ksd_weights(obj, sc))),
                 tolerance = 1e-10, info = nm)
    set.seed(2)
    t1 <- ksd_test(obj, sc, n_boot = 50, bootstrap = "multinomial")
    set.seed(2)
    t2 <- ksd_test(P, S, n_boot = 50, bootstrap = "multinomial")
    expect_equal(t1$statistic, t2$statistic, info = nm)
    expect_equal(t1$p.value, t2$p.value, info = nm)
  }
  # a selection is not a chain
  expect_error(stein_thin(th, m = 4, chain = rep(1:2, 32)), class = "kb_error_arg",
               regexp = "'chain'.*not a chain")
  # particles carry no scores
  expect_error(ksd_path(pf), class = "kb_error_arg", regexp = "score")
  # flows start from a result
  expect_equal(svgd(th, tg, n_iter = 2, step_size = 0.01)$x,
               svgd(th$points, tg, n_iter = 2, step_size = 0.01)$x)
  # reference = a chain or a result
  cmp <- ksd(th, reference = ch)
  expect_equal(cmp$reference, ksd(ch$x, ch$score, kernel = th$kernel$kernel,
                                  standardize = th$scale), tolerance = 1e-10)
  expect_equal(ksd(th, reference = kt)$reference,
               ksd(kt$points, kt$score, kernel = th$kernel$kernel,
                   standardize = th$scale), tolerance = 1e-10)
})

test_that("stein_kernel_thin() takes a chain or a result without a score argument", {
  set.seed(512)
  tg <- gaussian_target(c(0, 0))
  ch <- mala(tg, c(0, 0), 512, step_size = 1)
  set.seed(3)
  a <- quiet(stein_kernel_thin(ch, m = 32))
  set.seed(3)
  b <- quiet(stein_kernel_thin(ch$x, ch$score, m = 32))
  expect_identical(a$index, b$index)
  mt <- quiet(mmd_thin(ch, m = 64))
  expect_error(stein_kernel_thin(mt, m = 16), class = "kb_error_arg",
               regexp = "'score' is missing")
})

test_that("reference moments agree on ordinary, tiny and huge scales", {
  set.seed(513)
  y <- matrix(rexp(600) * 2 - 1, 200)
  base <- kernbayes:::sample_moments(y)
  for (s in c(1e-150, 1e-60, 1e60, 1e150)) {
    r <- kernbayes:::sample_moments(y * s)
    expect_equal(r$sd / s, base$sd, tolerance = 1e-12, info = format(s))
    expect_equal(r$kurt, base$kurt, tolerance = 1e-10, info = format(s))
    expect_equal(r$skew, base$skew, tolerance = 1e-10, info = format(s))
  }
  expect_equal(base$kurt, ref_shape(y)$kurt, tolerance = 1e-12)
})

test_that("bad input to the moment report and weighted summaries names the argument", {
  expect_error(compression_moments(1:3), class = "kb_error_arg", regexp = "'x'")
  expect_error(compression_moments(list(points = 1)), class = "kb_error_arg",
               regexp = "'x' must be a thinned set")
  set.seed(514)
  x <- matrix(rnorm(200), 100)
  th <- quiet(stein_thin(x, -x, m = 10))
  expect_error(summary(th, weights = rep(1, 9)), class = "kb_error_arg",
               regexp = "'weights'.*one weight per point \\(10\\)")
  expect_error(summary(th, weights = c(-1, rep(1, 9))), class = "kb_error_arg",
               regexp = "'weights'")
  kt <- quiet(ksdt(x, -x))
  expect_error(summary(kt, weights = "a"), class = "kb_error_arg", regexp = "'weights'")
  # a rejected call leaves the result as it was
  before <- th
  try(summary(th, weights = rep(1, 9)), silent = TRUE)
  expect_identical(th, before)
})
