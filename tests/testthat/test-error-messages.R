# The error messages of every export, in one snapshot file
# (_snaps/error-messages.md) so that a reviewer reads them together: for each
# export one or two typical bad calls (a wrong type, a wrong dimension, an
# out-of-range number).  test-bad-input.R checks the classes and the named
# argument of many more cases; this file fixes the wording.  Arguments are
# passed by name; tiny inputs only (the whole file runs in seconds).

em_x <- cbind(seq(-1, 1, length.out = 10), cos(1:10))
em_s <- -em_x
em_tg <- gaussian_target(mean = c(0, 0))
em_kx <- seq(-1, 1, length.out = 12)
em_ky <- sin(em_kx)

test_that("kernels: error messages", {
  expect_snapshot(error = TRUE, imq_kernel(c = -1))
  expect_snapshot(error = TRUE, imq_kernel(beta = 0.5))
  expect_snapshot(error = TRUE, gaussian_kernel(bandwidth = "a"))
  expect_snapshot(error = TRUE, kernel_matrix(x = "a"))
  expect_snapshot(error = TRUE, kernel_matrix(x = em_x, y = em_x[, 1]))
  expect_snapshot(error = TRUE, user_kernel(fun = 1))
  expect_snapshot(error = TRUE, stein_kernel_matrix(x = em_x, score = em_s[-1, ]))
})

test_that("KSD and its tests: error messages", {
  expect_snapshot(error = TRUE, ksd(x = "a", score = em_s))
  expect_snapshot(error = TRUE, ksd(x = em_x, score = em_s[, 1]))
  expect_snapshot(error = TRUE, ksd_path(x = em_x, score = em_s[-1, ]))
  expect_snapshot(error = TRUE, ksd_blocks(x = em_x, score = em_s, blocks = 0))
  expect_snapshot(error = TRUE, ksd_test(x = em_x, score = em_s, n_boot = -1))
  expect_snapshot(error = TRUE, ksd_test(x = list(), score = em_s))
  expect_snapshot(error = TRUE, ksd_test(x = em_x, score = em_s,
                                         test = "incomplete"))
  expect_snapshot(error = TRUE, ksd_test(x = em_x, score = em_s,
                                         test = "incomplete", n_lags = 1.5))
  expect_snapshot(error = TRUE, ksd_test(x = em_x, score = em_s,
                                         test = "incomplete", type = "V"))
  expect_snapshot(error = TRUE, ksd_test(x = em_x, score = em_s,
                                         test = "bootstrap"))
  expect_snapshot(error = TRUE, fssd_test(x = em_x, score = em_s, train_frac = 2))
  expect_snapshot(error = TRUE, compression_moments(x = 1))
})

test_that("thinning and weights: error messages", {
  expect_snapshot(error = TRUE, stein_thin(x = em_x, score = em_s, m = 0))
  expect_snapshot(error = TRUE, stein_thin(x = em_x, score = em_s[, 1], m = 2))
  expect_snapshot(error = TRUE, stein_thin_gf(x = "a"))
  expect_snapshot(error = TRUE, mmd_thin(x = em_x, m = -1))
  expect_snapshot(error = TRUE, mmd_thin(x = "a", m = 2))
  expect_snapshot(error = TRUE, ksd_weights(x = em_x, score = em_s[-1, ]))
  expect_snapshot(error = TRUE, ksd_weights(x = em_x, score = em_s, nonneg = NA))
  expect_snapshot(error = TRUE, kernel_thin(x = em_x, score = em_s, m = 20))
  expect_snapshot(error = TRUE, kernel_thin(x = em_x, score = em_s, m = 2, delta = 2))
  expect_snapshot(error = TRUE,
    stein_kernel_thin(x = em_x, score = em_s, m = 2, debias = "x"))
  expect_snapshot(error = TRUE,
    stein_kernel_thin(x = em_x, score = em_s[-1, ], m = 2))
})

test_that("KSDT, streams and samplers: error messages", {
  expect_snapshot(error = TRUE, ksdt(x = em_x, score = em_s, budget = -1))
  expect_snapshot(error = TRUE, ksdt(x = em_x, score = em_s[, 2]))
  expect_snapshot(error = TRUE, ksdt_stream(dim = 0))
  expect_snapshot(error = TRUE, ksdt_push(stream = list(), x = em_x, score = em_s))
  expect_snapshot(error = TRUE,
    ksdt_push(stream = ksdt_stream(dim = 2), x = em_x[, 1], score = em_s[, 1]))
  expect_snapshot(error = TRUE, ksdt_result(stream = 1))
  expect_snapshot(error = TRUE,
    ksdt_sample(target = em_tg, x0 = c(0, 0), n_iter = -5))
  expect_snapshot(error = TRUE,
    ksdt_sample(target = em_tg, x0 = c(0, 0, 0), n_iter = 10))
  expect_snapshot(error = TRUE,
    ksdt_chains(target = em_tg, x0 = "a", n_iter = 10))
  expect_snapshot(error = TRUE, sp_mcmc(target = 1, x0 = c(0, 0), n_iter = 10))
  expect_snapshot(error = TRUE,
    sp_mcmc(target = em_tg, x0 = c(0, 0), n_iter = 0))
  expect_snapshot(error = TRUE, mala(target = em_tg, x0 = c(0, 0), n_iter = 0))
  expect_snapshot(error = TRUE, mala(target = em_tg, x0 = c(0, 0, 0), n_iter = 5))
  expect_snapshot(error = TRUE,
    rwm(target = em_tg, x0 = c(0, 0), n_iter = 5, step_size = -1))
  expect_snapshot(error = TRUE, rwm(target = "a", x0 = c(0, 0), n_iter = 5))
  # stein_points(): only `target` (its size argument is being renamed)
  expect_snapshot(error = TRUE, stein_points(target = "a"))
})

test_that("targets: error messages", {
  expect_snapshot(error = TRUE, gaussian_target(mean = "a"))
  expect_snapshot(error = TRUE, gaussian_target(mean = c(0, 0), cov = diag(3)))
  expect_snapshot(error = TRUE,
    gaussian_mixture_target(means = list(c(0, 0)), covs = list(diag(2)),
                            weights = c(-1)))
  expect_snapshot(error = TRUE, gaussian_mixture_target(means = "a"))
  expect_snapshot(error = TRUE, kb_target(log_density = 1))
  expect_snapshot(error = TRUE, kb_target(log_density = function(x) 0, dim = 0))
  expect_snapshot(error = TRUE,
    logistic_regression_target(X = em_x, y = rep(2, 10)))
  expect_snapshot(error = TRUE,
    logistic_regression_target(X = em_x, y = rep(0, 9)))
  expect_snapshot(error = TRUE,
    rbm_target(B = 1:6, b = rep(0, 6), c = 0))
  expect_snapshot(error = TRUE,
    rbm_target(B = matrix(1, 2, 1), b = 0, c = 0))
  expect_snapshot(error = TRUE, target_score(target = 1, x = c(0, 0)))
  expect_snapshot(error = TRUE, target_score(target = em_tg, x = c(0, 0, 0)))
  expect_snapshot(error = TRUE, target_log_density(target = em_tg, x = "a"))
  expect_snapshot(error = TRUE, sample_target(target = em_tg, n = -1))
  expect_snapshot(error = TRUE, goodwin_target(y = "a", times = 1:3))
  expect_snapshot(error = TRUE,
    goodwin_solve(theta = rep(0.1, 3), times = 1:3))
  expect_snapshot(error = TRUE,
    goodwin_simulate(theta = rep(0.1, 4), times = -(1:3), sd = 0.1))
})

test_that("Stan interop: error messages", {
  expect_snapshot(error = TRUE, stan_target(fit = 1))
  expect_snapshot(error = TRUE, unconstrain_draws(fit = "a", draws = em_x))
  expect_snapshot(error = TRUE, constrain_draws(fit = list(), upars = em_x))
  # clear_stan_cache() takes no argument: nothing to get wrong
})

test_that("particle flows: error messages", {
  expect_snapshot(error = TRUE, svgd(x0 = em_x, target = em_s, n_iter = 5))
  expect_snapshot(error = TRUE,
    svgd(x0 = em_x, target = function(x) -x, n_iter = -1))
  expect_snapshot(error = TRUE,
    ksd_descent(x0 = "a", target = function(x) -x, n_iter = 5))
  expect_snapshot(error = TRUE,
    ksd_descent(x0 = em_x, target = function(x) -x, n_iter = 5, step_size = 0))
  expect_snapshot(error = TRUE, mmd_flow(x0 = em_x, y = em_x[, 1], n_iter = 5))
  expect_snapshot(error = TRUE,
    mmd_flow(x0 = em_x, y = em_x, n_iter = 5, noise = -1))
  expect_snapshot(error = TRUE,
    dmmd_flow(x0 = em_x, y = em_x, lambda = -1, n_iter = 5))
  expect_snapshot(error = TRUE, dmmd_flow(x0 = "a", y = em_x, n_iter = 5))
  expect_snapshot(error = TRUE, mied(x0 = em_x, target = 1, n_iter = 5))
  expect_snapshot(error = TRUE,
    mied(x0 = em_x, target = em_tg, n_iter = 5, s = -1))
  expect_snapshot(error = TRUE, mied_constraint(fun = 1))
  expect_snapshot(error = TRUE,
    mied_constraint(fun = function(x) x[, 1], grad = function(x) x, type = "x"))
  expect_snapshot(error = TRUE, wasserstein2(x = em_x, y = em_x[, 1]))
  expect_snapshot(error = TRUE, wasserstein2(x = "a", y = em_x))
})

test_that("kernel Bayes' rule and filters: error messages", {
  fit <- kbr(x = em_kx, y = em_ky, eps = 0.01, delta = 0.01)
  expect_snapshot(error = TRUE, kbr(x = "a", y = em_ky, eps = 0.01, delta = 0.01))
  expect_snapshot(error = TRUE,
    kbr(x = em_kx, y = em_ky[-1], eps = 0.01, delta = 0.01))
  expect_snapshot(error = TRUE,
    kbr(x = em_kx, y = em_ky, eps = -1, delta = 0.01))
  expect_snapshot(error = TRUE, kbr_cv(x = em_kx, y = em_ky[-1]))
  expect_snapshot(error = TRUE, kbr_cv(x = em_kx, y = em_ky, folds = 1))
  expect_snapshot(error = TRUE, posterior_mean(fit = 1, newdata = 0.5))
  expect_snapshot(error = TRUE, posterior_mean(fit = fit, newdata = "a"))
  expect_snapshot(error = TRUE, posterior_sd(fit = fit, newdata = c(NA, 1)))
  expect_snapshot(error = TRUE, posterior_ci(fit = fit, newdata = 0.5, level = 2))
  expect_snapshot(error = TRUE,
    posterior_expect(fit = fit, newdata = 0.5, f = "a"))
  expect_snapshot(error = TRUE, preimage(fit = fit, newdata = 0.5, max_iter = -1))
  expect_snapshot(error = TRUE,
    kbr_filter(x_train = em_kx, y_train = em_ky[-1], y_obs = 0.5,
               eps = 0.01, delta = 0.01))
  expect_snapshot(error = TRUE,
    kbr_filter(x_train = em_kx, y_train = em_ky, y_obs = "a",
               eps = 0.01, delta = 0.01))
  expect_snapshot(error = TRUE,
    kalman_filter(y = matrix(0, 3, 1), A = diag(2), C = diag(2), Q = diag(2),
                  R = diag(1), m0 = c(0, 0), P0 = diag(2)))
  expect_snapshot(error = TRUE,
    kalman_filter(y = "a", A = 1, C = 1, Q = 1, R = 1, m0 = 0, P0 = 1))
})
