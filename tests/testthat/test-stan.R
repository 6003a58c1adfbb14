# Stan fits as targets: rstan's own functions, an independent log density
# and finite differences, the scales round trip, order of draws, errors.

schools_lp <- function(u) {
  # eight schools on (mu, log tau, theta), up to a constant, by hand:
  # normal(mu | 0, 5), half-Cauchy(tau | 0, 5), normal(theta | mu, tau),
  # normal(y | theta, sigma), and the Jacobian of tau = exp(u[2]): + u[2]
  mu <- u[1]
  tau <- exp(u[2])
  theta <- u[3:10]
  stats::dnorm(mu, 0, 5, log = TRUE) + stats::dcauchy(tau, 0, 5, log = TRUE) +
    sum(stats::dnorm(theta, mu, tau, log = TRUE)) +
    sum(stats::dnorm(schools_data$y, theta, schools_data$sigma, log = TRUE)) +
    u[2]
}

test_that("stan_target gives rstan's log density and score with names", {
  fit <- stan_test_fit("schools")
  tg <- stan_target(fit)
  expect_s3_class(tg, "kb_target")
  expect_identical(tg$dim, 10L)
  expect_true(tg$vectorized)
  expect_false(tg$fd_score)
  u <- unconstrain_draws(fit)
  nm <- c("mu", "log(tau)", paste0("theta[", 1:8, "]"))
  expect_identical(colnames(u), nm)
  u <- u[seq(1, nrow(u), length.out = 15), ]
  lp <- target_log_density(tg, u)
  sc <- target_score(tg, u)
  expect_identical(colnames(sc), nm)
  for (i in seq_len(nrow(u))) {
    expect_equal(lp[i], rstan::log_prob(fit, u[i, ], adjust_transform = TRUE),
                 tolerance = 1e-10)
    g <- rstan::grad_log_prob(fit, u[i, ], adjust_transform = TRUE)
    expect_equal(unname(sc[i, ]), as.vector(g), tolerance = 1e-10)
  }
  # one point as a vector
  expect_equal(tg$log_density(u[1, ]), lp[1], tolerance = 1e-14)
})

test_that("target_score names its columns after a Stan target's coordinates", {
  fit <- stan_test_fit("schools")
  tg <- stan_target(fit)
  nm <- c("mu", "log(tau)", paste0("theta[", 1:8, "]"))
  expect_identical(tg$names, nm)
  u <- unconstrain_draws(fit)[1:3, ]
  # x without column names: the target's names are kept
  sc <- target_score(tg, unname(u))
  expect_identical(dimnames(sc), list(NULL, nm))
  expect_equal(unname(sc), unname(target_score(tg, u)), tolerance = 0)
  # one point as a vector, and a data frame
  expect_identical(colnames(target_score(tg, unname(u[1, ]))), nm)
  expect_identical(colnames(target_score(tg, as.data.frame(u))), nm)
  # x's own names win
  v <- u
  colnames(v) <- paste0("u", 1:10)
  expect_identical(colnames(target_score(tg, v)), paste0("u", 1:10))
  # and the scores computed for a matrix sample carry them too
  sm <- kernbayes:::as_sample(unname(u), tg)
  expect_identical(colnames(kernbayes:::resolve_score(sm$score, sm$x)), nm)
})

test_that("eight schools: the log density agrees with the model by hand", {
  fit <- stan_test_fit("schools")
  tg <- stan_target(fit)
  u <- unconstrain_draws(fit)[c(1, 20, 40, 77, 120, 150), ]
  lp <- target_log_density(tg, u)
  hand <- apply(u, 1L, schools_lp)
  # equal up to the constant Stan drops from `~` statements
  expect_equal(diff(lp), diff(hand), tolerance = 1e-8)
  expect_lt(max(abs(diff(lp) - diff(hand))), 1e-8)
  # the Jacobian matters: without it the differences disagree
  expect_gt(max(abs(diff(lp) - diff(hand - u[, 2]))), 1e-3)
})

test_that("the score is the gradient of the log density (finite differences)", {
  for (name in c("schools", "shapes")) {
    fit <- stan_test_fit(name)
    tg <- stan_target(fit)
    u <- unconstrain_draws(fit)[c(3, 60, 140), ]
    sc <- target_score(tg, u)
    h <- 1e-5
    for (i in seq_len(nrow(u))) {
      fd <- vapply(seq_len(ncol(u)), function(k) {
        e <- replace(numeric(ncol(u)), k, h)
        (tg$log_density(u[i, ] + e) - tg$log_density(u[i, ] - e)) / (2 * h)
      }, 0)
      expect_lt(max(abs(fd - sc[i, ]) / pmax(1, abs(sc[i, ]))), 1e-6)
    }
  }
})

test_that("unconstrained names follow the transforms; matrices column-major", {
  fit <- stan_test_fit("shapes")
  u <- unconstrain_draws(fit)
  expect_identical(ncol(u), as.integer(rstan::get_num_upars(fit)))
  expect_identical(colnames(u),
                   c("unc(w)[1]", "unc(w)[2]", "log(s[1])", "log(s[2])",
                     "B[1,1]", "B[2,1]",
                     "B[1,2]", "B[2,2]", "B[1,3]", "B[2,3]", "a"))
  dr <- posterior::as_draws_df(fit)
  # bounded and unbounded coordinates are log(s) and the values themselves
  expect_equal(unname(u[, "log(s[2])"]), log(dr[["s[2]"]]), tolerance = 1e-12)
  expect_equal(unname(u[, "B[2,1]"]), dr[["B[2,1]"]], tolerance = 1e-14)
  # the closure names its columns itself (target_score() takes x's names)
  expect_identical(colnames(stan_target(fit)$score(unname(u[1:2, ]))),
                   colnames(u))
})

test_that("the transform of a coordinate is recognised and named (no fit)", {
  tr <- kernbayes:::stan_transform
  nm <- kernbayes:::stan_transform_name
  u <- c(-1.4, -0.7, 0.1, 0.5, 1.2, -0.2)
  expect_identical(tr(u, u), list(type = "identity"))
  expect_identical(nm(tr(u, exp(u)), "tau"), "log(tau)")
  expect_identical(nm(tr(u, 1.5 + exp(u)), "lo"), "log(lo - 1.5)")
  expect_identical(nm(tr(u, -2 + exp(u)), "x"), "log(x + 2)")
  expect_identical(nm(tr(u, -exp(u)), "x"), "log(-x)")
  expect_identical(nm(tr(u, 3 - exp(u)), "x"), "log(3 - x)")
  expect_identical(nm(tr(u, -2 - exp(u)), "up"), "log(-2 - up)")
  expect_identical(nm(tr(u, stats::plogis(u)), "p"), "logit(p)")
  expect_identical(nm(tr(u, 2 * stats::plogis(u)), "p"), "logit(p/2)")
  expect_identical(nm(tr(u, -1 + 4 * stats::plogis(u)), "r[2]"),
                   "logit((r[2] + 1)/4)")
  expect_identical(nm(tr(u, 1 + 2 * u), "om"), "(om - 1)/2")
  expect_identical(nm(tr(u, 2 * u), "om"), "om/2")
  expect_identical(nm(tr(u, u - 0.5), "om"), "om + 0.5")
  # no scalar transform: a bound that moves, a cube, a decreasing map
  expect_null(tr(u, u^2 + exp(u)))
  expect_null(tr(u, u^3))
  expect_null(tr(u, -u))
  expect_null(tr(u, c(exp(u[-1]), NA)))
  # Stan's layouts of a parameter's coordinates: a vector or matrix
  # column-major, an array row-major, an array of vectors by array row
  ord <- kernbayes:::stan_element_orders
  expect_identical(ord(integer(0)), list(1L))
  expect_identical(ord(3L), list(1:3))
  expect_identical(ord(c(2L, 3L)), list(1:6, c(1L, 3L, 5L, 2L, 4L, 6L)))
  expect_identical(ord(c(2L, 3L, 2L))[[2L]],
                   c(1L, 7L, 3L, 9L, 5L, 11L, 2L, 8L, 4L, 10L, 6L, 12L))
})

test_that("unconstrained coordinates are named after their transforms", {
  fit <- stan_test_fit("transforms", chains = 1L, draws = 40L)
  u <- unconstrain_draws(fit)
  arr <- paste0("arr[", rep(1:2, each = 3), ",", rep(1:3, 2), "]")
  va <- paste0("va[", rep(1:2, each = 2), ",", rep(1:2, 2), "]")
  nm <- c("mu", "log(tau)", "log(lo - 1.5)", "log(-2 - up)", "logit(p)",
          "logit((r + 1)/4)", "(om - 1)/2", "unc(dep)", "log(dl - 0.25)",
          "od[1]", "unc(od)[2]", paste0("log(", c(arr, va), ")"))
  expect_identical(colnames(u), nm)
  expect_identical(stan_target(fit)$names, nm)
  # each name is what the coordinate is (an array's elements row-major:
  # they were named column-major before, log(arr[2,1]) for log(arr[1,2]))
  d <- posterior::as_draws_df(fit)
  want <- list(mu = d$mu, "log(tau)" = log(d$tau),
               "log(lo - 1.5)" = log(d$lo - 1.5),
               "log(-2 - up)" = log(-2 - d$up), "logit(p)" = stats::qlogis(d$p),
               "logit((r + 1)/4)" = stats::qlogis((d$r + 1) / 4),
               "(om - 1)/2" = (d$om - 1) / 2, "unc(dep)" = log(d$dep - d$mu),
               "log(dl - 0.25)" = log(d$dl - 0.25), "od[1]" = d[["od[1]"]],
               "unc(od)[2]" = log(d[["od[2]"]] - d[["od[1]"]]))
  for (e in c(arr, va)) want[[sprintf("log(%s)", e)]] <- log(d[[e]])
  for (v in nm) {
    expect_equal(unname(u[, v]), want[[v]], tolerance = 1e-10, info = v)
  }
  # constrain_draws() takes the named columns in any order
  back <- constrain_draws(fit, u[1:5, rev(nm)])
  expect_equal(back[["arr[1,2]"]], d[["arr[1,2]"]][1:5], tolerance = 1e-12)
  expect_equal(back$r, d$r[1:5], tolerance = 1e-12)
  # the names travel to results: points, unconstrained draws, the
  # constrained draws keep the fit's names
  th <- stein_thin(fit, m = 5, progress = FALSE)
  expect_identical(colnames(th$points), nm)
  expect_identical(colnames(th$score), nm)
  du <- posterior::as_draws_df(th, scale = "unconstrained")
  expect_identical(posterior::variables(du), nm)
  expect_identical(posterior::variables(posterior::as_draws_matrix(
    th, scale = "unconstrained")), nm)
  expect_true(all(c("tau", "arr[1,2]") %in%
                    posterior::variables(posterior::as_draws_df(th))))
  expect_identical(names(as.data.frame(th, scale = "unconstrained"))[1:21], nm)
  kt <- ksdt(fit, progress = FALSE)
  expect_identical(colnames(kt$points), nm)
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_silent(plot(th))
  expect_silent(plot(kt))
})

test_that("constrain_draws and unconstrain_draws round-trip the fit's draws", {
  for (name in c("schools", "shapes")) {
    fit <- stan_test_fit(name)
    dr <- posterior::as_draws_df(fit)
    u <- unconstrain_draws(fit)
    expect_identical(nrow(u), nrow(dr))
    # from the draws object, a data frame and a matrix: the same points
    expect_equal(unconstrain_draws(fit, dr), u, tolerance = 1e-15)
    expect_equal(unconstrain_draws(fit, as.data.frame(dr)), u,
                 tolerance = 1e-15)
    expect_equal(unconstrain_draws(fit, posterior::as_draws_matrix(dr)), u,
                 tolerance = 1e-15)
    back <- constrain_draws(fit, u)
    expect_s3_class(back, "draws_df")
    keep <- setdiff(posterior::variables(dr), c("lp__", "yrep"))
    expect_identical(setdiff(posterior::variables(back), "yrep"), keep)
    for (v in keep) {
      expect_equal(back[[v]], dr[[v]], tolerance = 1e-12, info = v)
      expect_lt(max(abs(back[[v]] - dr[[v]])), 1e-12 * max(1, abs(dr[[v]])))
    }
    # and back again
    expect_lt(max(abs(unconstrain_draws(fit, back) - u)), 1e-12)
  }
  # a named list is one point; arrays in shape or flattened
  fit <- stan_test_fit("shapes")
  p <- list(w = c(0.2, 0.3, 0.5), s = c(1, 2), B = matrix(1:6, 2), a = 0.1)
  u1 <- unconstrain_draws(fit, p)
  expect_identical(dim(u1), c(1L, 11L))
  expect_equal(unname(u1[1, 3:11]), c(0, log(2), 1:6, 0.1), tolerance = 1e-15)
  p$B <- 1:6
  expect_identical(unconstrain_draws(fit, p), u1)
  cd <- constrain_draws(fit, u1)
  expect_equal(cd[["B[1,2]"]], 3)
  expect_equal(cd[["w[3]"]], 0.5, tolerance = 1e-14)
  expect_equal(cd$ws, 0.2 * 1 + 0.1, tolerance = 1e-14)
  expect_true("yrep" %in% names(cd))
  # columns named in another order are put in the fit's order
  expect_equal(constrain_draws(fit, u1[, 11:1, drop = FALSE])[["B[1,2]"]], 3)
})

test_that("stan_sample gives the kb_sample fields in as_draws_df's order", {
  fit <- stan_test_fit("schools", chains = 3L)
  s <- kernbayes:::stan_sample(fit, progress = FALSE)
  expect_named(s, c("x", "score", "chain", "iteration", "draws", "target"))
  dr <- posterior::as_draws_df(fit)
  expect_identical(s$draws, dr)
  expect_identical(s$chain, as.integer(dr$.chain))
  expect_identical(s$iteration, as.integer(dr$.iteration))
  expect_identical(s$chain, rep(1:3, each = 50L))
  expect_identical(s$iteration, rep(1:50, 3L))
  # x row i is draw i: mu as is, tau on the log scale
  expect_identical(unname(s$x[, "mu"]), dr$mu)
  expect_equal(unname(s$x[, "log(tau)"]), log(dr$tau), tolerance = 1e-14)
  expect_equal(s$x, unconstrain_draws(fit), tolerance = 0)
  # chain-major as rstan's own array
  a <- as.array(fit)
  expect_identical(unname(s$x[51:100, "theta[3]"]), unname(a[, 2, "theta[3]"]))
  expect_s3_class(s$target, "kb_target")
  expect_equal(s$score, target_score(s$target, s$x), tolerance = 1e-14)
  expect_identical(colnames(s$score), colnames(s$x))
  # the gradients show progress when they are computed (not when kept)
  clear_stan_cache()
  msgs <- capture_messages(kernbayes:::stan_sample(fit, progress = TRUE))
  expect_match(paste(msgs, collapse = ""),
               "Stan gradients: 150 of 150 \\(100%\\)")
  expect_silent(kernbayes:::stan_sample(fit, progress = TRUE))
})

test_that("Stan inputs are checked with errors naming the argument", {
  fit <- stan_test_fit("schools")
  expect_error(stan_target(1), class = "kb_error_arg", regexp = "'fit'.*stanfit")
  expect_error(stan_target(lm(dist ~ speed, cars)), class = "kb_error_arg",
               regexp = "class lm")
  expect_error(stan_target(stan_test_model("schools")), class = "kb_error_arg",
               regexp = "'fit' is a compiled Stan model")
  expect_error(kernbayes:::stan_sample(list(), FALSE), class = "kb_error_arg",
               regexp = "'x' must be a stanfit")
  expect_error(kernbayes:::stan_sample(fit, progress = NA), class = "kb_error_arg",
               regexp = "'progress'")
  # no draws: fine as a target, not as a sample
  f0 <- stan_test_nodraws("schools")
  tg <- stan_target(f0)
  u <- unconstrain_draws(fit)[1:3, ]
  expect_equal(target_log_density(tg, u),
               target_log_density(stan_target(fit), u), tolerance = 1e-14)
  expect_error(unconstrain_draws(f0), class = "kb_error_arg",
               regexp = "'fit' has no draws")
  expect_error(kernbayes:::stan_sample(f0, FALSE), class = "kb_error_arg",
               regexp = "'x' has no draws")
  # a fit read back from a file has lost its model instance
  path <- tempfile(fileext = ".rds")
  saveRDS(fit, path)
  old <- readRDS(path)
  expect_error(stan_target(old), class = "kb_error_arg",
               regexp = "'fit' has no Stan model instance")
  expect_error(kernbayes:::stan_sample(old, FALSE), class = "kb_error_arg",
               regexp = "'x' has no Stan model instance")
  # ... and the documented fix restores it without resampling
  old@.MISC <- suppressMessages(
    rstan::stan(fit = old, data = schools_data, chains = 0))@.MISC
  expect_equal(unconstrain_draws(old), unconstrain_draws(fit), tolerance = 0)
  unlink(path)
  # upars
  expect_error(constrain_draws(fit), class = "kb_error_arg", regexp = "'upars'")
  expect_error(constrain_draws(fit, u[, 1:9]), class = "kb_error_arg",
               regexp = "'upars' must have 10 columns")
  expect_error(constrain_draws(fit, replace(u, 2, NaN)), class = "kb_error_arg",
               regexp = "'upars' must not contain")
  expect_error(constrain_draws(fit, "a"), class = "kb_error_arg",
               regexp = "'upars' must be a numeric matrix")
  bad <- u
  colnames(bad)[1] <- "nu"
  expect_error(constrain_draws(fit, bad), class = "kb_error_arg",
               regexp = "'upars' has column names.*mu, log\\(tau\\).*named after")
  # the constrained names are not the coordinates' names
  colnames(bad)[1:2] <- c("mu", "tau")
  expect_error(constrain_draws(fit, bad), class = "kb_error_arg",
               regexp = "'upars' has column names.*'tau' is 'log\\(tau\\)'")
  # draws
  dr <- posterior::as_draws_df(fit)
  expect_error(unconstrain_draws(fit, as.data.frame(dr)[, -2]),
               class = "kb_error_arg", regexp = "'draws' lacks the column.*tau")
  expect_error(unconstrain_draws(fit, list(mu = 1, tau = 1)),
               class = "kb_error_arg", regexp = "'draws' lacks the parameter.*theta")
  expect_error(unconstrain_draws(fit, list(mu = 1, tau = 1, theta = 1:7)),
               class = "kb_error_arg", regexp = "'draws' element 'theta'.*8 values")
  expect_error(unconstrain_draws(fit, list(mu = 1, tau = -1, theta = 1:8)),
               class = "kb_error_arg",
               regexp = "'draws' row 1 cannot be unconstrained")
  expect_error(unconstrain_draws(fit, "a"), class = "kb_error_arg",
               regexp = "'draws' must be NULL")
  d2 <- as.data.frame(dr)
  d2$tau[3] <- NA
  expect_error(unconstrain_draws(fit, d2), class = "kb_error_arg",
               regexp = "'draws' has a non-finite value \\(row 3, column 'tau'\\)")
  fs <- stan_test_fit("shapes")
  expect_error(unconstrain_draws(fs, list(w = c(0.2, 0.3, 0.6), s = c(1, 2),
                                          B = 1:6, a = 0)),
               class = "kb_error_arg", regexp = "simplex")
})

test_that("a brmsfit works through its Stan fit", {
  skip_on_cran()
  skip_if_not_installed("brms")
  stan_test_model("schools")  # skips without rstan or BH headers
  b <- stan_cache$brms
  if (is.null(b)) {
    set.seed(1)
    d <- data.frame(y = stats::rnorm(20, 1), x = stats::rnorm(20))
    b <- stan_cache$brms <- tryCatch(suppressMessages(suppressWarnings(
      brms::brm(y ~ x, data = d, chains = 2, iter = 200, refresh = 0,
                seed = 1, silent = 2, backend = "rstan"))),
      error = function(e) e)
  }
  if (inherits(b, "error")) skip(paste("brms did not fit:", conditionMessage(b)))
  # a target needs no stored draws; brms' names where it renames (b_x)
  tg <- stan_target(b)
  expect_identical(tg$dim, as.integer(rstan::get_num_upars(b$fit)))
  expect_identical(colnames(tg$score(c(0, 1, 0))),
                   c("b_x", "Intercept", "log(sigma)"))
  # brms does not store Intercept by default: the draws cannot be mapped
  expect_error(kernbayes:::stan_sample(b, progress = FALSE),
               class = "kb_error_arg", regexp = "'x' does not store.*save_pars")
  ba <- suppressMessages(suppressWarnings(
    stats::update(b, save_pars = brms::save_pars(all = TRUE), refresh = 0,
                  seed = 1, silent = 2, recompile = FALSE)))
  s <- kernbayes:::stan_sample(ba, progress = FALSE)
  expect_identical(nrow(s$x), 200L)
  expect_identical(colnames(s$x), c("b_x", "Intercept", "log(sigma)"))
  expect_identical(s$chain, rep(1:2, each = 100L))
  expect_equal(unname(s$x[, "b_x"]), s$draws$b_x, tolerance = 0)
  expect_equal(unname(s$x[, "log(sigma)"]), log(s$draws$sigma),
               tolerance = 1e-14)
  expect_equal(s$score[5, ],
               setNames(as.vector(rstan::grad_log_prob(ba$fit, s$x[5, ])),
                        colnames(s$x)), tolerance = 1e-10)
  back <- constrain_draws(ba, s$x)
  for (v in c("b_x", "Intercept", "sigma", "b_Intercept", "lprior")) {
    expect_lt(max(abs(back[[v]] - s$draws[[v]])), 1e-12)
  }
})

# ---- a Stan fit wherever a sample with scores is taken ----------------------

test_that("ksd and friends take a Stan fit: rstan's own draws and gradients", {
  fit <- stan_test_fit("schools", chains = 3L)
  # direct computation with rstan's functions: unconstrained draws from the
  # fit's constrained ones, gradients by grad_log_prob
  d <- as.data.frame(posterior::as_draws_df(fit))
  pars <- c("mu", "tau", paste0("theta[", 1:8, "]"))
  u <- t(vapply(seq_len(nrow(d)), function(i) {
    rstan::unconstrain_pars(fit, list(mu = d$mu[i], tau = d$tau[i],
                                      theta = unlist(d[i, pars[-(1:2)]])))
  }, numeric(10)))
  g <- t(apply(u, 1L, function(v) {
    as.double(rstan::grad_log_prob(fit, v, adjust_transform = TRUE))
  }))
  ref <- ref_stein_matrix(u, g)
  expect_lt(rel_err(ksd(fit, standardize = FALSE, progress = FALSE),
                    ref_ksd(ref)), 1e-10)
  by <- ksd(fit, by_chain = TRUE, standardize = FALSE, progress = FALSE)
  for (c in 1:3) {
    r <- d$.chain == c
    expect_lt(rel_err(by$ksd[c], ref_ksd(ref[r, r])), 1e-10)
  }
  expect_equal(by$chain, c("1", "2", "3", "all"))
  # 50 draws per chain are too few for the default test of these chains
  expect_error(ksd_test(fit, n_boot = 9, progress = FALSE),
               class = "kb_error_arg", regexp = "chain too short")
  p <- ksd_path(fit, standardize = FALSE)
  r1 <- d$.chain == 1
  expect_lt(rel_err(p$ksd[r1], ref_ksd_path(ref[r1, r1])), 1e-10)
  # a score given with a Stan fit is refused: the fit supplies it
  expect_error(ksd(fit, g), class = "kb_error_arg",
               regexp = "'score' must be left out when x is a Stan fit")
  expect_error(ksd(fit, chain = rep(1, nrow(u))), class = "kb_error_arg",
               regexp = "'chain' must be NULL")
})

test_that("results from a Stan fit carry chains, iterations and constrained draws", {
  fit <- stan_test_fit("schools", chains = 3L)
  d <- as.data.frame(posterior::as_draws_df(fit))
  th <- stein_thin(fit, m = 20, progress = FALSE)
  expect_equal(th[["chain"]], d$.chain[th$index])
  expect_equal(th[["iteration"]], d$.iteration[th$index])
  expect_equal(th[["draws"]]$tau, d$tau[th$index])
  expect_equal(th$points[, "log(tau)"], log(d$tau[th$index]), tolerance = 1e-12,
               ignore_attr = TRUE)
  # the conversion gives the constrained draws by default
  cd <- posterior::as_draws_df(th)
  expect_identical(cd$tau, d$tau[th$index])
  expect_false("source_chain" %in% names(cd))
  expect_identical(posterior::as_draws_df(th, source = TRUE)$source_chain,
                   d$.chain[th$index])
  kt <- ksdt(fit, progress = FALSE)
  expect_equal(length(kt[["per_chain"]]), 3L)
  row <- match(paste(kt[["chain"]], kt[["iteration"]]),
               paste(d$.chain, d$.iteration))
  expect_false(anyNA(row))
  expect_equal(kt[["draws"]]$mu, d$mu[row])
  # flows start from the fit's draws and return constrained particles
  sv <- svgd(fit, n_iter = 3, progress = FALSE)
  expect_equal(dim(sv$x), c(nrow(d), 10L))
  expect_equal(sv[["draws"]]$tau, exp(sv$x[, "log(tau)"]), tolerance = 1e-12)
})

test_that("mmd_thin takes a Stan fit without computing its gradients", {
  fit <- stan_test_fit("schools", chains = 3L)
  d <- as.data.frame(posterior::as_draws_df(fit))
  u <- unconstrain_draws(fit)
  # the sample mmd_thin() builds has no scores (none were computed)
  smp <- kernbayes:::as_sample(fit, NULL, gradients = FALSE)
  expect_null(smp$score)
  expect_equal(smp$x, u, tolerance = 0)
  th <- mmd_thin(fit, 10, progress = FALSE)
  expect_null(th[["score"]])
  ref <- mmd_thin(u, 10, chain = d$.chain, progress = FALSE)
  expect_identical(th$index, ref$index)
  expect_equal(th$points, u[th$index, ], tolerance = 0)
  expect_identical(th[["chain"]], d$.chain[th$index])
  expect_identical(th[["iteration"]], d$.iteration[th$index])
  expect_identical(th[["draws"]]$tau, d$tau[th$index])
})

# ---- a fit's draws and gradients, computed once (issue 30) -------------------

# gradient evaluations (rows) made by expr
stan_evaluations <- function(expr) {
  n0 <- kernbayes:::stan_memo$evaluations
  force(expr)
  kernbayes:::stan_memo$evaluations - n0
}

test_that("the functions on one fit evaluate its gradients once", {
  fit <- stan_test_fit("schools", chains = 3L)
  clear_stan_cache()
  n <- stan_evaluations({
    k <- ksd(fit, progress = FALSE)
    th <- stein_thin(fit, m = 10, progress = FALSE)
    te <- ksd_test(fit, bootstrap = "multinomial", n_boot = 19,
                   progress = FALSE)
    kt <- ksdt(fit, progress = FALSE)
    kp <- ksd_path(fit)
    kb <- ksd(fit, by_chain = TRUE, progress = FALSE)
  })
  expect_identical(n, 150)
  # the same results as from fits computed afresh (nothing kept)
  old <- options(kernbayes.stan_cache = 0)
  on.exit(options(old), add = TRUE)
  expect_identical(stan_evaluations(k0 <- ksd(fit, progress = FALSE)), 150)
  expect_identical(length(kernbayes:::stan_memo$entries), 0L)
  expect_identical(k, k0)
  th0 <- stein_thin(fit, m = 10, progress = FALSE)
  expect_identical(th$index, th0$index)
  expect_identical(kt$ksd, ksdt(fit, progress = FALSE)$ksd)
  expect_identical(stan_evaluations(ksd(fit, progress = FALSE)), 150)
})

test_that("a fit whose draws or model change gets its own gradients", {
  fit <- stan_test_fit("schools", chains = 3L)
  clear_stan_cache()
  s <- kernbayes:::stan_sample(fit, progress = FALSE)
  expect_identical(stan_evaluations(kernbayes:::stan_sample(fit, progress = FALSE)), 0)
  # one post-warmup draw changed (iterations 51..100 of 100 are kept)
  f2 <- fit
  f2@sim$samples[[2]]$mu[60] <- f2@sim$samples[[2]]$mu[60] + 0.25
  expect_identical(stan_evaluations(s2 <- kernbayes:::stan_sample(f2, progress = FALSE)),
                   150)
  row <- 50L + 10L  # chain 2, iteration 60 - 50
  expect_equal(unname(s2$x[row, "mu"]), unname(s$x[row, "mu"]) + 0.25,
               tolerance = 1e-14)
  expect_equal(s2$score, target_score(s2$target, s2$x), tolerance = 1e-14)
  expect_false(isTRUE(all.equal(s2$score[row, ], s$score[row, ])))
  expect_false(identical(ksd(f2, progress = FALSE), ksd(fit, progress = FALSE)))
  # a copy with the same draws is the same fit; a changed warmup draw, or a
  # recreated model instance, is not
  f3 <- fit
  expect_identical(stan_evaluations(kernbayes:::stan_sample(f3, progress = FALSE)), 0)
  f3@sim$samples[[1]]$tau[3] <- 1
  expect_identical(stan_evaluations(kernbayes:::stan_sample(f3, progress = FALSE)), 150)
  f4 <- fit
  f4@.MISC <- suppressMessages(
    rstan::stan(fit = fit, data = schools_data, chains = 0))@.MISC
  expect_identical(stan_evaluations(s4 <- kernbayes:::stan_sample(f4, progress = FALSE)),
                   150)
  expect_identical(s4$score, s$score)
})

test_that("the kept fits are bounded, can be cleared, and gradients = FALSE waits", {
  fit <- stan_test_fit("schools", chains = 3L)
  f2 <- fit
  f2@sim$samples[[1]]$mu[80] <- 0
  old <- options(kernbayes.stan_cache = 1)
  on.exit(options(old), add = TRUE)
  clear_stan_cache()
  # mmd_thin needs no gradients: none computed, the draws kept
  expect_identical(stan_evaluations(mmd_thin(fit, 5, progress = FALSE)), 0)
  expect_identical(stan_evaluations(ksd(fit, progress = FALSE)), 150)
  expect_identical(stan_evaluations(ksd(f2, progress = FALSE)), 150)
  # one fit kept: f2 pushed fit out
  expect_identical(stan_evaluations(ksd(fit, progress = FALSE)), 150)
  expect_identical(stan_evaluations(ksd(fit, progress = FALSE)), 0)
  expect_identical(clear_stan_cache(), 1L)
  expect_identical(clear_stan_cache(), 0L)
  expect_identical(stan_evaluations(ksd(fit, progress = FALSE)), 150)
  options(kernbayes.stan_cache = -1)
  expect_error(ksd(fit, progress = FALSE), class = "kb_error_arg",
               regexp = "kernbayes.stan_cache")
})

test_that("a Stan target is refused by workers in other processes, a fit is not", {
  skip_on_cran()
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  fit <- stan_test_fit("schools", chains = 3L)
  tg <- stan_target(fit)
  expect_s3_class(tg, c("kb_stan_target", "kb_target"))
  # the row-block tasks carry the matrices and kernel, not the caller's frame
  task <- kernbayes:::block_sums_task(1, 2, 3, 1L)
  expect_setequal(ls(environment(task)), c("X", "S", "K", "nthreads"))
  x0 <- unconstrain_draws(fit)[c(1, 60), ]
  oplan <- future::plan(future::sequential)
  on.exit(future::plan(oplan), add = TRUE)
  set.seed(1)
  ch <- ksdt_chains(tg, x0, 20, step_size = 0.1, progress = FALSE)
  expect_length(ch$errors, 0L)
  future::plan(future::multicore, workers = 2)
  expect_true(kernbayes:::futures_share_process())
  future::plan(future::multisession, workers = 2)
  expect_false(kernbayes:::futures_share_process())
  expect_error(ksdt_chains(tg, x0, 20, step_size = 0.1, progress = FALSE),
               class = "kb_error_arg", regexp = "'target' is a Stan target")
  # a fit as x: draws and gradients computed here, matrices sent
  expect_equal(ksd_blocks(fit, blocks = 2, progress = FALSE),
               ksd(fit, progress = FALSE), tolerance = 1e-12)
})

test_that("ksd_test of a fit: the Markov wild bootstrap along its chains, as on its draws and gradients", {
  fit <- stan_test_fit("schools", chains = 3L, draws = 400L)
  u <- unconstrain_draws(fit)
  g <- target_score(stan_target(fit), u)
  ch <- posterior::as_draws_df(fit)$.chain
  set.seed(3)
  tf <- ksd_test(fit, n_boot = 30, standardize = FALSE, progress = FALSE)
  set.seed(3)
  tm <- ksd_test(u, g, chain = ch, n_boot = 30, standardize = FALSE,
                 progress = FALSE)
  expect_identical(c(tf$bootstrap, tf$wild), c("wild", "markov"))
  expect_match(tf$method, "3 chains, multipliers along each", fixed = TRUE)
  expect_equal(tf$statistic, tm$statistic, tolerance = 1e-10)
  expect_equal(tf$boot, tm$boot, tolerance = 1e-10)
  expect_equal(tf$iact, tm$iact, tolerance = 1e-10)
  set.seed(3)
  tb <- ksd_test(fit, n_boot = 30, standardize = FALSE, by_chain = TRUE,
                 progress = FALSE)
  expect_equal(tb$pooled$boot, tf$boot)
  expect_identical(as.data.frame(tb)$chain, c("1", "2", "3", "all"))
})

test_that("a fit's thinned set reports its moments on the unconstrained scale and takes the fit as reference", {
  fit <- stan_test_fit("schools", chains = 2L, draws = 200L)
  u <- unconstrain_draws(fit)
  th <- suppressWarnings(stein_thin(fit, m = 20), classes = "kb_warning_distortion")
  r <- compression_moments(th)
  expect_identical(r$variable, colnames(u))
  expect_equal(r$ref_mean, unname(colMeans(u)), tolerance = 1e-12)
  expect_equal(r$sd_ratio, unname(apply(u[th$index, ], 2, sd) / apply(u, 2, sd)),
               tolerance = 1e-12)
  expect_match(kernbayes:::describe_span(th), "points from [12] chain")
  # the fit as reference: its unconstrained draws and gradients
  cmp <- ksd(th, reference = fit)
  tg <- stan_target(fit)
  expect_equal(cmp$reference, ksd(u, tg, standardize = th$scale), tolerance = 1e-10)
  # and the selection as a sample of its own
  w <- suppressWarnings(ksd_weights(th), classes = "kb_warning_distortion")
  expect_equal(attr(w, "ksd"), ksd(th, weights = as.numeric(w)), tolerance = 1e-8)
  expect_equal(ksd_path(th)$ksd, ksd_path(th$points, th$score)$ksd, tolerance = 1e-12)
})

test_that("stein_kernel_thin() takes a Stan fit without a score", {
  fit <- stan_test_fit("schools", chains = 2L, draws = 200L)
  set.seed(4)
  a <- suppressWarnings(stein_kernel_thin(fit, m = 25), classes = "kb_warning_distortion")
  set.seed(4)
  b <- suppressWarnings(stein_kernel_thin(fit, NULL, m = 25), classes = "kb_warning_distortion")
  expect_identical(a$index, b$index)
  expect_length(a$index, 25)
})
