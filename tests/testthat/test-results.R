# Results convert (posterior, coda, data frames) and their printed KSDs are
# the ones ksd(result) recomputes (issue 14, sections 3 and 4).

# ---- an independent, slow Stein kernel -------------------------------------------
# k_p(x, y) = s_x's_y phi + 2 phi' (Lu)'(s_y - s_x) - 4 phi'' u'L^2 u
#             - 2 phi' tr(L),  u = x - y, r = u'Lu,
# from k(x, y) = phi(r): grad_x k = 2 phi' Lu, grad_y k = -2 phi' Lu and
# tr(grad_x grad_y' k) = -4 phi'' u'L^2u - 2 phi' tr(L).
slow_phi <- function(type, r, c = 1, beta = -0.5) {
  if (type == "imq") {
    c((c + r)^beta, beta * (c + r)^(beta - 1),
      beta * (beta - 1) * (c + r)^(beta - 2))
  } else {
    c(exp(-r / 2), -exp(-r / 2) / 2, exp(-r / 2) / 4)
  }
}

slow_stein <- function(x, y, sx, sy, L, type = "imq") {
  u <- x - y
  Lu <- drop(L %*% u)
  p <- slow_phi(type, sum(u * Lu))
  sum(sx * sy) * p[1] + 2 * p[2] * sum(Lu * (sy - sx)) -
    4 * p[3] * sum(Lu * Lu) - 2 * p[2] * sum(diag(L))
}

# V-statistic KSD of points x with scores s, optionally weighted.
slow_ksd <- function(x, s, L, type = "imq", w = rep(1 / nrow(x), nrow(x))) {
  tot <- 0
  for (i in seq_len(nrow(x))) for (j in seq_len(nrow(x))) {
    tot <- tot + w[i] * w[j] * slow_stein(x[i, ], x[j, ], s[i, ], s[j, ], L,
                                          type)
  }
  sqrt(tot)
}

# Mean absolute deviation of each column (the standardisation scale).
slow_scale <- function(x) colMeans(abs(sweep(x, 2L, colMeans(x))))

# The number after `label` in printed output.
printed_number <- function(out, label) {
  line <- grep(label, out, fixed = TRUE, value = TRUE)[1L]
  as.numeric(sub("^([-0-9.e+]+).*$", "\\1",
                 sub(paste0(".*", label, " *"), "", line)))
}

toy_chain <- function(n = 400, seed = 1401) {
  set.seed(seed)
  tg <- gaussian_target(c(0, 1), matrix(c(1, 0.6, 0.6, 2), 2))
  list(tg = tg, ch = mala(tg, x0 = c(2, -1), n_iter = n))
}

# ---- conversions ----------------------------------------------------------------

# The variables of a draws table as a plain matrix.
frame_values <- function(df, vars) {
  m <- do.call(cbind, lapply(vars, function(v) df[[v]]))
  colnames(m) <- vars
  m
}

expect_round_trip <- function(obj, pts) {
  vars <- if (is.null(colnames(pts))) paste0("x", seq_len(ncol(pts))) else
    colnames(pts)
  df <- as.data.frame(obj)
  expect_identical(unname(frame_values(df, vars)), unname(pts))
  expect_identical(df$.draw, seq_len(nrow(pts)))
  skip_if_not_installed("posterior")
  d <- posterior::as_draws_df(obj)
  expect_s3_class(d, "draws_df")
  expect_identical(unname(frame_values(d, vars)), unname(pts))
  # provenance is no draws variable unless asked
  expect_false(any(c("source_chain", "source_iteration") %in% names(d)))
  # as.data.frame() has the columns of the draws_df with its provenance,
  # without posterior
  dd <- as.data.frame(posterior::as_draws_df(obj, source = TRUE))
  expect_identical(names(df), names(dd))
  for (nm in names(df)) expect_identical(df[[nm]], dd[[nm]], label = nm)
  dm <- posterior::as_draws_matrix(obj)
  expect_s3_class(dm, "draws_matrix")
  expect_identical(unname(unclass(dm)[, vars, drop = FALSE]), unname(pts),
                   ignore_attr = TRUE)
  expect_identical(unname(as.matrix(unclass(dm)[, vars])), unname(pts),
                   ignore_attr = TRUE)
  expect_identical(posterior::as_draws(obj), dm)
}

test_that("every result class converts its points exactly", {
  toy <- toy_chain()
  ch <- toy$ch
  tg <- toy$tg
  expect_round_trip(ch, ch$x)
  th <- stein_thin(ch$x, ch$score, 15)
  expect_round_trip(th, ch$x[th$index, ])
  mm <- mmd_thin(ch$x, 12)
  expect_round_trip(mm, ch$x[mm$index, ])
  kt <- ksdt(ch$x, ch$score, progress = FALSE)
  expect_round_trip(kt, kt$points)
  set.seed(3)
  ks <- ksdt_sample(tg, c(0, 0), 300, progress = FALSE)
  expect_round_trip(ks, ks$points)
  sp <- sp_mcmc(tg, c(0, 0), 20, progress = FALSE)
  expect_round_trip(sp, sp$points)
  kt2 <- ksdt(ch$x[201:400, ] + 0.01, ch$score[201:400, ], progress = FALSE)
  mg <- c(kt, kt2)
  expect_round_trip(mg, mg$points)
  mg2 <- c(kt, kt2, how = "stein_thin", m = 8)
  expect_round_trip(mg2, mg2$points)
  set.seed(4)
  kc <- ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 200)
  expect_round_trip(kc, kc$merged$points)
  set.seed(5)
  pa <- svgd(matrix(stats::rnorm(20), 10), tg, n_iter = 5, progress = FALSE)
  expect_round_trip(pa, pa$x)
  # column names become the variables
  named <- ch
  colnames(named$x) <- c("alpha", "beta")
  expect_identical(names(as.data.frame(named))[1:2], c("alpha", "beta"))
})

test_that("a chain keeps .chain and .iteration; coda::as.mcmc is right", {
  ch <- toy_chain(200)$ch
  df <- as.data.frame(ch)
  expect_identical(df$.chain, rep(1L, 200))
  expect_identical(df$.iteration, 1:200)
  expect_false(any(c("source_chain", "source_iteration") %in% names(df)))
  lab <- ch
  lab$chain <- rep(3L, 200)
  lab$iteration <- 1:200
  expect_identical(as.data.frame(lab)$.chain, rep(3L, 200))
  skip_if_not_installed("posterior")
  d <- posterior::as_draws_df(ch)
  expect_identical(posterior::niterations(d), 200L)
  expect_identical(posterior::nchains(d), 1L)

  skip_if_not_installed("coda")
  # coda's default method made an "mcmc" of the list's fields (mcpar 1..10)
  old <- coda:::as.mcmc.default(unclass(ch))
  expect_false(identical(coda::mcpar(old), c(1, 200, 1)))
  m <- coda::as.mcmc(ch)
  expect_s3_class(m, "mcmc")
  expect_identical(coda::mcpar(m), c(1, 200, 1))
  expect_identical(unname(unclass(m)[, ]), unname(ch$x), ignore_attr = TRUE)
  expect_identical(coda::varnames(m), c("x1", "x2"))
  expect_identical(coda::niter(m), 200L)
  late <- ch
  late$iteration <- 101:300
  expect_identical(coda::mcpar(coda::as.mcmc(late)), c(101, 300, 1))
  late$iteration[5] <- 1L
  expect_error(coda::as.mcmc(late), class = "kb_error_arg")
})

test_that("coda::as.mcmc of a compressed set or of particles is an error naming x, never a broken mcmc", {
  skip_if_not_installed("coda")
  tg <- gaussian_target(c(0, 0))
  set.seed(5)
  x <- sample_target(tg, 64)
  res <- list(
    stein_thin = stein_thin(x, tg, m = 5, progress = FALSE),
    kernel_thin = kernel_thin(x, tg, m = 16, progress = FALSE),
    ksdt = ksdt(x, tg, progress = FALSE),
    svgd = svgd(x[1:10, ], tg, n_iter = 2, step_size = 0.1))
  cls <- c(stein_thin = "kb_thin", kernel_thin = "kb_thin", ksdt = "kb_ksdt",
           svgd = "kb_particles")
  for (k in names(res)) {
    # what coda's default did: an "mcmc" whose rows are the list's fields
    old <- coda:::as.mcmc.default(unclass(res[[k]]))
    expect_false(identical(coda::niter(old), nrow(res[[k]][["points"]] %||%
                                                   res[[k]][["x"]])))
    e <- tryCatch(coda::as.mcmc(res[[k]]), error = function(e) e)
    expect_s3_class(e, "kb_error_arg")
    expect_match(conditionMessage(e), "'x' is a", fixed = TRUE, label = k)
    expect_match(conditionMessage(e), paste0("(", cls[[k]], ")"),
                 fixed = TRUE, label = k)
    expect_match(conditionMessage(e), "posterior::as_draws_df()",
                 fixed = TRUE, label = k)
  }
})

test_that("a selection is a set of points: each its own chain; provenance is no variable unless asked", {
  ch <- toy_chain(300)$ch
  th <- stein_thin(ch$x, ch$score, 25)   # repeats allowed
  df <- as.data.frame(th)
  expect_identical(df$.chain, 1:25)
  expect_identical(df$.iteration, rep(1L, 25))
  expect_identical(df$.draw, 1:25)
  expect_false("source_chain" %in% names(df))
  # labels set as the lead's labelled input sets them
  th$chain <- rep(2L, 25)
  th$iteration <- as.integer(th$index)
  df <- as.data.frame(th)
  expect_identical(df$source_chain, rep(2L, 25))
  expect_identical(df$source_iteration, as.integer(th$index))
  expect_identical(df$.chain, 1:25)
  expect_false("source_chain" %in% names(as.data.frame(th, source = FALSE)))
  # a merged dictionary: the dictionary (chain) and index of each point
  set.seed(6)
  kc <- ksdt_chains(gaussian_target(c(0, 0)), rbind(c(0, 0), c(1, 1)), 200)
  dk <- as.data.frame(kc)
  expect_identical(dk$source_chain, as.integer(kc$merged$source$dictionary))
  expect_identical(dk$source_iteration, as.integer(kc$merged$source$index))
  none <- kc
  none$merged <- NULL
  expect_error(as.data.frame(none), "merged", class = "kb_error_arg")

  skip_if_not_installed("posterior")
  # posterior renumbers a selection's iterations (what the convention avoids)
  raw <- data.frame(a = 1:3 + 0.5, .chain = 1L, .iteration = c(7L, 3L, 3L))
  expect_false(identical(posterior::as_draws_df(raw)$.iteration, c(7L, 3L, 3L)))
  d <- posterior::as_draws_df(th)
  expect_identical(posterior::nchains(d), 25L)
  expect_identical(posterior::niterations(d), 1L)
  expect_identical(d$.draw, 1:25)
  # provenance: in the draws only with source = TRUE
  expect_identical(posterior::variables(d), c("x1", "x2"))
  expect_identical(posterior::variables(posterior::as_draws_matrix(th)),
                   c("x1", "x2"))
  expect_identical(posterior::variables(posterior::as_draws(th)),
                   c("x1", "x2"))
  ds <- posterior::as_draws_df(th, source = TRUE)
  expect_identical(posterior::variables(ds),
                   c("x1", "x2", "source_chain", "source_iteration"))
  expect_identical(ds$source_iteration, as.integer(th$index))
  expect_identical(posterior::variables(posterior::as_draws_matrix(
    th, source = TRUE)), c("x1", "x2", "source_chain", "source_iteration"))
  expect_identical(posterior::variables(posterior::as_draws_df(kc)),
                   c("x1", "x2"))
})

test_that("posterior reports no R-hat or ESS of a selection's order", {
  skip_if_not_installed("posterior")
  toy <- toy_chain(300)
  ch <- toy$ch
  th <- stein_thin(ch$x, ch$score, 25)
  th$chain <- rep(1L, 25)
  th$iteration <- as.integer(th$index)
  kt <- ksdt(ch$x, ch$score, progress = FALSE)
  set.seed(5)
  pa <- svgd(matrix(stats::rnorm(20), 10), toy$tg, n_iter = 5,
             progress = FALSE)
  # what the old convention (one chain of the stored order) gave: numbers
  old <- posterior::as_draws_df(data.frame(x1 = th$points[, 1],
                                           .chain = 1L, .iteration = 1:25))
  expect_true(is.finite(suppressWarnings(posterior::summarise_draws(old))$rhat[1]))
  for (obj in list(th, kt, pa)) {
    # posterior's own default on the draws: convergence measures NA
    s <- posterior::summarise_draws(posterior::as_draws_df(obj))
    expect_identical(s$variable, c("x1", "x2"))
    expect_true(all(is.na(s$rhat)))
    expect_true(all(is.na(s$ess_bulk)))
    expect_true(all(is.na(s$ess_tail)))
    expect_true(all(is.finite(s$mean)))
    s <- posterior::summarise_draws(posterior::as_draws_matrix(obj))
    expect_true(all(is.na(s$rhat)))
    # the method for the result: no convergence columns at all
    r <- posterior::summarise_draws(obj)
    expect_s3_class(r, "draws_summary")
    expect_identical(names(r), c("variable", "mean", "median", "sd", "mad",
                                 "q5", "q95"))
    p <- if (inherits(obj, "kb_particles")) obj$x else obj$points
    ref <- posterior::summarise_draws(posterior::as_draws_df(obj),
                                      "mean", "median", "sd", "mad",
                                      "quantile2")
    for (v in names(r)[-1]) {
      expect_equal(as.numeric(r[[v]]), as.numeric(ref[[v]]),
                   tolerance = 1e-12, info = v)
    }
    expect_equal(as.numeric(r$mean), unname(colMeans(p)), tolerance = 1e-14)
  }
  # a chain keeps posterior's default, diagnostics included
  sc <- suppressWarnings(posterior::summarise_draws(ch))  # ESS capped
  expect_true(all(is.finite(sc$rhat)))
  # ksdt_chains: its merged dictionary
  set.seed(6)
  kc <- ksdt_chains(toy$tg, rbind(c(0, 0), c(1, 1)), 200)
  expect_equal(as.numeric(posterior::summarise_draws(kc)$mean),
               unname(colMeans(kc$merged$points)), tolerance = 1e-14)
  # functions given are posterior's, on the one-iteration chains
  f <- posterior::summarise_draws(th, "mean", "rhat", "ess_bulk")
  expect_identical(names(f), c("variable", "mean", "rhat", "ess_bulk"))
  expect_true(all(is.na(f$rhat)))
})

test_that("summarise_draws() of a weighted set is weighted", {
  skip_if_not_installed("posterior")
  ch <- toy_chain(300)$ch
  th <- stein_thin(ch$x, ch$score, 20, unique = TRUE)
  w <- as.double(ksd_weights(th$points, th$score))
  wn <- w / sum(w)
  r <- posterior::summarise_draws(th, weights = w)
  th$weights <- w
  expect_identical(posterior::summarise_draws(th), r)
  p <- th$points
  mu <- colSums(wn * p)
  expect_equal(as.numeric(r$mean), unname(mu), tolerance = 1e-12)
  sdw <- sqrt(colSums(wn * sweep(p, 2L, mu)^2) / (1 - sum(wn^2)))
  expect_equal(as.numeric(r$sd), unname(sdw), tolerance = 1e-12)
  # by hand: the quantiles of the weighted ECDF's placement
  wq <- kernbayes:::weighted_quantile
  expect_equal(wq(c(3, 1, 2), c(0.25, 0.5, 0.25), 0.5), 1 + 0.5 / 0.6,
               tolerance = 1e-14)
  # the interpolation between order statistics magnifies the weights'
  # rounding: without long double sums (arm64, valgrind) the medians differ
  # by 2e-14 relative
  expect_equal(as.numeric(r$median), apply(p, 2L, wq, wn, 0.5),
               tolerance = 1e-10)
  expect_equal(as.numeric(r$q5), apply(p, 2L, wq, wn, 0.05),
               tolerance = 1e-10)
  # symmetric, R's type 7 for equal weights, zero weights ignored
  v <- stats::rnorm(30)
  u <- stats::runif(30)
  expect_equal(wq(-v, u, 0.2), -wq(v, u, 0.8), tolerance = 1e-12)
  expect_equal(wq(v, rep(1 / 30, 30), c(0.05, 0.5, 0.9)),
               unname(stats::quantile(v, c(0.05, 0.5, 0.9))),
               tolerance = 1e-12)
  expect_equal(wq(c(v, 100), c(rep(1 / 30, 30), 0), 0.9),
               wq(v, rep(1 / 30, 30), 0.9), tolerance = 1e-14)
  expect_equal(kernbayes:::weighted_mad(v, rep(1 / 30, 30)), stats::mad(v),
               tolerance = 1e-12)
  # posterior's functions ignore weights: refused on a weighted set
  expect_error(posterior::summarise_draws(th, "mean"), "'weights'",
               class = "kb_error_arg")
  expect_error(posterior::summarise_draws(th, weights = w, "mean"),
               "resample_draws", class = "kb_error_arg")
})

test_that("weights travel as posterior weights; Kish's size is reported", {
  ch <- toy_chain(300)$ch
  th <- stein_thin(ch$x, ch$score, 20, unique = TRUE)
  w <- ksd_weights(th$points, th$score)
  df <- as.data.frame(th, weights = w)
  expect_identical(df$.log_weight, log(as.double(w)))
  expect_error(as.data.frame(th, weights = w[-1]), "'weights'",
               class = "kb_error_arg")
  expect_error(as.data.frame(th, weights = -w), "'weights'",
               class = "kb_error_arg")
  th$weights <- as.double(w)
  expect_identical(as.data.frame(th)$.log_weight, log(as.double(w)))
  kish <- sum(w)^2 / sum(w^2)
  expect_equal(summary(th)$kish, kish, tolerance = 1e-14)
  out <- utils::capture.output(print(th))
  expect_true(any(grepl("Kish effective size", out)))
  expect_equal(printed_number(out, "Kish effective size"), signif(kish, 4))
  expect_true(any(grepl("Kish", utils::capture.output(print(summary(th))))))
  kt <- ksdt(ch$x, ch$score, progress = FALSE)
  kt$weights <- rep(1, nrow(kt$points))
  expect_equal(summary(kt)$kish, nrow(kt$points))
  expect_true(any(grepl("Kish", utils::capture.output(print(kt)))))
  skip_if_not_installed("posterior")
  d <- posterior::as_draws_df(th)
  expect_equal(stats::weights(d), as.double(w) / sum(w), tolerance = 1e-14)
  pm <- th$points
  colnames(pm) <- c("x1", "x2")
  d2 <- posterior::weight_draws(posterior::as_draws_df(pm), as.double(w))
  expect_equal(stats::weights(d), stats::weights(d2), tolerance = 1e-14)
  expect_equal(stats::weights(posterior::as_draws_matrix(th)),
               as.double(w) / sum(w), tolerance = 1e-14)
})

test_that("constrained draws are the default when a result has them", {
  skip_if_not_installed("posterior")
  ch <- toy_chain(300)$ch
  th <- stein_thin(ch$x, ch$score, 10)
  cons <- posterior::as_draws_df(data.frame(sigma = exp(th$points[, 1]),
                                            mu = th$points[, 2],
                                            .chain = 1L, .iteration = 1:10))
  th$draws <- cons
  d <- posterior::as_draws_df(th)
  expect_identical(posterior::variables(d), c("sigma", "mu"))
  expect_identical(d$sigma, exp(th$points[, 1]))
  du <- posterior::as_draws_df(th, scale = "unconstrained")
  expect_identical(posterior::variables(du), c("x1", "x2"))
  expect_identical(du$x1, th$points[, 1])
  expect_error(as.data.frame(th, scale = "natural"), "'scale'",
               class = "kb_error_arg")
  th$draws <- cons[1:5, ]
  expect_error(as.data.frame(th), "draws", class = "kb_error_arg")
  # without draws, both scales give the points
  th$draws <- NULL
  expect_identical(as.data.frame(th, scale = "constrained")$x1, th$points[, 1])
})

# ---- summary of a chain -----------------------------------------------------------

test_that("summary(kb_chain) reports posterior's R-hat and ESS", {
  ch <- toy_chain(500)$ch
  sm <- summary(ch)
  expect_equal(sm$table$mean, unname(colMeans(ch$x)))
  skip_if_not_installed("posterior")
  ref <- posterior::summarise_draws(posterior::as_draws_matrix(ch$x), "rhat",
                                    "ess_bulk", "ess_tail")
  expect_identical(sm$table$rhat, as.double(ref$rhat))
  expect_identical(sm$table$ess_bulk, as.double(ref$ess_bulk))
  expect_identical(sm$table$ess_tail, as.double(ref$ess_tail))
  expect_identical(sm$table$rhat[1], posterior::rhat(ch$x[, 1]))
  out <- utils::capture.output(print(sm))
  expect_true(any(grepl("ess_bulk", out)))
})

# ---- printed KSD == ksd(result) == the formula ----------------------------------------

test_that("Stein thinning: the printed KSD is ksd(result) and the formula", {
  ch <- toy_chain(300)$ch
  x <- ch$x
  s <- ch$score
  for (precon in list("id", "med", "smpcov")) {
    th <- stein_thin(x, s, 12, kernel = imq_kernel(precon = precon))
    out <- utils::capture.output(print(th))
    expect_true(any(grepl("standardised columns", out)))
    v <- ksd(th)
    expect_identical(format(v, digits = 6),
                     format(th$ksd[12], digits = 6))
    expect_equal(printed_number(out, "KSD of the selected points:"),
                 as.numeric(format(v, digits = 6)))
    expect_equal(v, th$ksd[12], tolerance = 1e-10)
    # independently: MAD scale, the kernel's L on the standardised sample
    sc <- slow_scale(x)
    xs <- sweep(x, 2L, sc, "/")
    L <- switch(precon, id = diag(2),
                med = diag(2) / stats::median(stats::dist(xs))^2,
                smpcov = solve(stats::cov(xs)))
    f <- slow_ksd(xs[th$index, ], sweep(s[th$index, ], 2L, sc, "*"), L)
    expect_equal(v, f, tolerance = 1e-10)
    # the selected points' scores are kept in the coordinates of x
    expect_equal(th$score, s[th$index, ], tolerance = 1e-12,
                 ignore_attr = TRUE)
  }
  # not standardised
  th <- stein_thin(x, s, 10, standardize = FALSE)
  expect_true(any(grepl("not standardised",
                        utils::capture.output(print(th)))))
  expect_equal(ksd(th), slow_ksd(x[th$index, ], s[th$index, ], diag(2)),
               tolerance = 1e-10)
  expect_equal(ksd(th), th$ksd[10], tolerance = 1e-10)
  # the default ksd() of the same points is another number: other kernel
  expect_false(isTRUE(all.equal(ksd(stein_thin(x, s, 10)),
                                ksd(x[stein_thin(x, s, 10)$index, ],
                                    s[stein_thin(x, s, 10)$index, ]))))
  expect_error(ksd(th, kernel = imq_kernel()), "'kernel'",
               class = "kb_error_arg")
  expect_error(ksd(th, standardize = TRUE), "'kernel'",
               class = "kb_error_arg")
  expect_identical(as.double(ksd(th)), ksd(th))
  # weighted and U-statistics under the result's kernel
  w <- seq_len(10)
  expect_equal(ksd(th, weights = w),
               slow_ksd(x[th$index, ], s[th$index, ], diag(2), w = w / sum(w)),
               tolerance = 1e-10)
  expect_equal(ksd(th, type = "U"),
               ksd(x[th$index, ], s[th$index, ], type = "U", standardize = FALSE),
               tolerance = 1e-12)
})

test_that("gradient-free and MMD thinning: ksd(result) is documented", {
  ch <- toy_chain(300)$ch
  x <- ch$x
  q <- gaussian_target(colMeans(x), stats::cov(x))
  gf <- stein_thin_gf(x, log_density = toy_chain(300)$tg, log_q = q, score_q = q,
                      m = 8)
  expect_equal(ksd(gf), gf$ksd[8], tolerance = 1e-10)
  mm <- mmd_thin(x, 8, standardize = TRUE)
  expect_error(ksd(mm), "MMD", class = "kb_error_arg")
  out <- utils::capture.output(print(mm))
  expect_true(any(grepl("Gaussian", out) & grepl("standardised columns", out)))
  # with a score: the KSD under its Gaussian kernel and standardisation
  tg <- toy_chain(300)$tg
  sc <- slow_scale(x)
  xs <- sweep(x, 2L, sc, "/")
  L <- diag(2) / stats::median(stats::dist(xs))^2
  f <- slow_ksd(xs[mm$index, ], sweep(ch$score[mm$index, ], 2L, sc, "*"), L,
                type = "gaussian")
  expect_equal(ksd(mm, tg), f, tolerance = 1e-10)
  expect_equal(ksd(mm, ch$score[mm$index, ]), f, tolerance = 1e-10)
})

test_that("KSDT and KSD paths: the printed KSD is ksd(result) and the formula", {
  toy <- toy_chain(400)
  ch <- toy$ch
  kt <- ksdt(ch$x, ch$score, kernel = imq_kernel(precon = "med"),
             progress = FALSE, standardize = FALSE)
  out <- utils::capture.output(print(kt))
  expect_true(any(grepl("not standardised", out)))
  v <- ksd(kt)
  expect_equal(v, utils::tail(kt$ksd, 1), tolerance = 1e-10)
  expect_equal(printed_number(out, "KSD of the dictionary:"),
               as.numeric(format(v, digits = 6)))
  L <- diag(2) / stats::median(stats::dist(ch$x))^2
  expect_equal(v, slow_ksd(kt$points, kt$score, L), tolerance = 1e-10)
  expect_true(any(grepl("not standardised",
                        utils::capture.output(print(summary(kt))))))
  set.seed(8)
  kc <- ksdt_chains(toy$tg, rbind(c(0, 0), c(1, 1)), 200)
  expect_equal(ksd(kc), utils::tail(kc$merged$ksd, 1), tolerance = 1e-10)
  mg <- c(kc$chains[[1]], kc$chains[[2]], how = "stein_thin", m = 10)
  expect_equal(ksd(mg), utils::tail(mg$ksd, 1), tolerance = 1e-10)

  p <- ksd_path(ch$x[1:100, ], ch$score[1:100, ], standardize = TRUE)
  out <- utils::capture.output(print(p))
  expect_true(any(grepl("standardised columns", out)))
  expect_equal(printed_number(out, "KSD of all 100 points:"),
               signif(ksd(ch$x[1:100, ], ch$score[1:100, ],
                          standardize = TRUE), 6))
  expect_true(any(grepl("standardised columns",
                        utils::capture.output(print(summary(p))))))
  # chains are judged with ksd()'s arguments, as their matrix would be
  expect_identical(ksd(ch), ksd(ch$x, ch$score))
  expect_identical(ksd(ch, kernel = imq_kernel(precon = "med"),
                       standardize = TRUE),
                   ksd(ch$x, ch$score, imq_kernel(precon = "med"),
                       standardize = TRUE))
})

test_that("ksd(result, reference =) compares under one kernel in one line", {
  toy <- toy_chain(200)
  ch <- toy$ch
  th <- stein_thin(ch$x, ch$score, 10, kernel = imq_kernel(precon = "med"))
  cmp <- ksd(th, reference = ch)
  expect_s3_class(cmp, "kb_ksd_compare")
  sc <- slow_scale(ch$x)
  xs <- sweep(ch$x, 2L, sc, "/")
  L <- diag(2) / stats::median(stats::dist(xs))^2
  expect_equal(cmp$ksd, ksd(th), tolerance = 1e-15)
  expect_equal(cmp$reference,
               slow_ksd(xs, sweep(ch$score, 2L, sc, "*"), L),
               tolerance = 1e-10)
  expect_identical(ksd(th, reference = ch$x, score = ch$score)$reference,
                   cmp$reference)
  expect_equal(ksd(th, toy$tg, reference = ch$x)$reference, cmp$reference,
               tolerance = 1e-12)
  out <- utils::capture.output(print(cmp))
  expect_length(out, 1L)
  expect_match(out, "vs .* \\(reference, 200 points\\).*standardised columns")
  expect_identical(unname(as.double(cmp)), c(cmp$ksd, cmp$reference))
  expect_error(ksd(th, reference = ch$x), "'score'", class = "kb_error_arg")
  mm <- mmd_thin(ch$x, 8)
  expect_error(ksd(mm, ch$score[mm$index, ], reference = ch$x), "'score'",
               class = "kb_error_arg")
  expect_s3_class(ksd(mm, toy$tg, reference = ch), "kb_ksd_compare")
})

test_that("particles print their KSD^2 kernel; ksd(particles) needs a score unless the flow had a kb_target", {
  tg <- gaussian_target(c(0, 0))
  set.seed(9)
  x0 <- matrix(stats::rnorm(20), 10)
  pa <- svgd(x0, tg, n_iter = 3, progress = FALSE)
  out <- utils::capture.output(print(pa))
  expect_true(any(grepl("KSD^2 kernel: Gaussian", out, fixed = TRUE) &
                    grepl("not standardised", out)))
  kd <- ksd_descent(x0, tg, n_iter = 3, method = "gd", progress = FALSE)
  out <- utils::capture.output(print(summary(kd)))
  expect_true(any(grepl("KSD^2 kernel: IMQ", out, fixed = TRUE) &
                    grepl("not standardised", out)))
  # a flow's kb_target is the default score; a score function is not kept
  expect_identical(ksd(pa), ksd(pa$x, tg))
  pf <- svgd(x0, function(x) -x, n_iter = 3, progress = FALSE)
  expect_error(ksd(pf), "'score'", class = "kb_error_arg")
  expect_identical(ksd(pa, tg), ksd(pa$x, tg))
})

test_that("a KSD comparison as a data frame", {
  set.seed(14)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 100)
  th <- stein_thin(x, tg, 8, progress = FALSE)
  cmp <- ksd(th, reference = x[1:8, ], score = tg)
  df <- as.data.frame(cmp)
  expect_identical(df$ksd, c(cmp$ksd, cmp$reference))
  expect_identical(df$points, c(8L, 8L))
  expect_identical(df$set, c("set", "reference"))
})
