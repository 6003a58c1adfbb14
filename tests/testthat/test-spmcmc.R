# ksdt_sample() and Stein Point MCMC (R/spmcmc.R, src/spmcmc.c): against
# the brute-force sampler reference in helper-reference.R
# (ref_ksdt_sampler()), a plain-R SP-MCMC written from scratch, and
# ksdt() on the same chain.

# ---- ksdt_sample and Stein Point MCMC ----------------------------------------------

test_that("ksdt_sample() with one candidate is ksdt() on the chain mala()/rwm() would give", {
  tg <- gaussian_target(c(1, -1), matrix(c(1, 0.5, 0.5, 2), 2))
  for (smp in c("mala", "rwm")) {
    f <- if (smp == "mala") mala else rwm
    set.seed(210)
    ks <- ksdt_sample(tg, c(3, 3), 600, sampler = smp, step_size = 0.9, budget = 1e-3,
                      min_size = "linear", min_size_coef = 0.1, standardize = FALSE)
    set.seed(210)
    ch <- f(tg, c(3, 3), 600, step_size = 0.9)
    fit <- ksdt(ch$x, ch$score, budget = 1e-3, min_size = "linear",
                min_size_coef = 0.1, standardize = FALSE)
    fields <- c("points", "score", "index", "ksd", "size", "removed", "evals")
    expect_identical(ks[fields], fit[fields], label = smp)
    expect_identical(ks$accept_rate, ch$accept_rate, label = smp)
    expect_identical(ks$sampler, toupper(smp))
    expect_identical(ks$step, 0.9)
    expect_identical(ks$candidates, 1L)
    expect_s3_class(ks, "kb_ksdt")
    expect_false(inherits(ks, "kb_spmcmc"))
  }
})

test_that("sp_mcmc() is reproduced by a brute-force SP-MCMC: every start rule, MALA and RWM", {
  tg <- gaussian_target(c(1, -1), matrix(c(1, 0.5, 0.5, 2), 2))
  n <- 30
  m <- 4
  for (smp in c("mala", "rwm")) {
    for (start in c("last", "rand", "infl")) {
      lab <- paste(smp, start)
      set.seed(211)
      sp <- sp_mcmc(tg, c(3, 0), n, candidates = m, sampler = smp, start = start, step_size = 0.9, standardize = FALSE)
      u_pkg <- stats::runif(1)
      set.seed(211)
      ref <- ref_ksdt_sampler(tg, c(3, 0), n, 0.9, smp, m, start, rep(0, n),
                              rep(Inf, n))
      u_ref <- stats::runif(1)
      expect_equal(sp$points, ref$points, tolerance = 1e-12, label = lab)
      expect_equal(sp$score, ref$score, tolerance = 1e-12, label = lab)
      expect_lt(rel_err(sp$ksd, ref$ksd), 1e-12, label = lab)
      expect_identical(u_pkg, u_ref, label = lab)
      # no pruning: one point per step, in order
      expect_identical(sp$index, as.double(1:n), label = lab)
      expect_identical(sp$size, 1:n, label = lab)
      expect_identical(sp$removed, integer(n), label = lab)
      want <- sqrt(mean(stein_kernel_matrix(sp$points, sp$score, standardize = FALSE)))
      expect_lt(abs(utils::tail(sp$ksd, 1) - want) / want, 1e-12, label = lab)
      # m candidates per step, each scored against the dictionary
      expect_gte(sp$evals, m * (n + n * (n - 1) / 2), label = lab)
      expect_lte(sp$evals, m * (n + n * (n - 1) / 2) + 1, label = lab)
      expect_s3_class(sp, c("kb_spmcmc", "kb_ksdt"), exact = TRUE)
      expect_identical(sp$candidates, as.integer(m))
      expect_identical(sp$start, start)
    }
  }
  # the selection rule does something: the points differ from the chain's
  # m-th states, and a different rule gives a different point set
  set.seed(212)
  a <- sp_mcmc(tg, c(3, 0), n, candidates = m, start = "last", step_size = 0.9, standardize = FALSE)
  set.seed(212)
  ch <- mala(tg, c(3, 0), n * m, step_size = 0.9)
  expect_false(isTRUE(all.equal(a$points, ch$x[seq(m, n * m, by = m), ])))
})

# ---- SP-MCMC "infl": an independent plain-R emulation ------------------------

# Stein Point MCMC from the paper and the authors' code, written here from
# scratch (not from ref_ksdt_sampler): IMQ Stein kernel (c = 1, beta = -1/2,
# L = I) written out, MALA steps with the package's use of R's generator
# (ref_mcmc_step), the start of each step by rule, the candidate minimising
# k(y, y) + 2 sum_{x in X} k(y, x) added, and the chain continued from it.
plain_spmcmc <- function(target, x0, n, m, h, start) {
  kimq <- function(x, sx, y, sy) {
    u <- x - y
    r <- sum(u * u)
    sum(sx * sy) * (1 + r)^-0.5 - (1 + r)^-1.5 * sum(u * (sy - sx)) -
      3 * r * (1 + r)^-2.5 + length(x) * (1 + r)^-1.5
  }
  X <- S <- matrix(NA_real_, 0, length(x0))
  st <- ref_mcmc_init(target, x0, "mala")
  for (t in seq_len(n)) {
    if (t > 1 && start == "infl") {
      k <- nrow(X)
      G <- matrix(0, k, k)
      for (i in seq_len(k)) for (j in seq_len(k)) G[i, j] <- kimq(X[i, ], S[i, ], X[j, ], S[j, ])
      infl <- rowSums(G) + colSums(G) - diag(G)
      i0 <- which.min(infl)
      st <- list(x = X[i0, ], lp = ref_log_density(target, X[i0, ]), s = S[i0, ])
    }
    best <- NULL
    for (c in seq_len(m)) {
      st <- ref_mcmc_step(st, target, h, "mala")
      f <- kimq(st$x, st$s, st$x, st$s)
      for (i in seq_len(nrow(X))) f <- f + 2 * kimq(st$x, st$s, X[i, ], S[i, ])
      if (is.null(best) || f < best$f) best <- list(f = f, st = st)
    }
    st <- best$st
    X <- rbind(X, st$x)
    S <- rbind(S, st$s)
  }
  list(points = X, score = S)
}

test_that("sp_mcmc(start = \"infl\") restarts from the least influential point (plain-R emulation)", {
  tg <- gaussian_target(c(0.5, -0.5))
  n <- 25
  # the emulation is checked first where the start rule plays no part
  for (start in c("last", "infl")) {
    set.seed(301)
    sp <- sp_mcmc(tg, c(3, 3), n, candidates = 4, start = start, step_size = 0.7,
                  standardize = FALSE)
    set.seed(301)
    em <- plain_spmcmc(tg, c(3, 3), n, 4, 0.7, start)
    expect_equal(sp$points, em$points, tolerance = 1e-12, label = start)
    expect_equal(sp$score, em$score, tolerance = 1e-12, label = start)
  }
  # the review's repro: the inverted rule (argmax) ended at KSD 1.26
  tg0 <- gaussian_target(c(0, 0))
  k <- vapply(c("last", "infl"), function(st) {
    set.seed(1)
    utils::tail(sp_mcmc(tg0, c(5, 5), 300, candidates = 5, start = st, step_size = 0.5,
                        standardize = FALSE)$ksd, 1)
  }, 0)
  expect_lt(k[["infl"]], 0.1)
  expect_lt(k[["infl"]], 2 * k[["last"]])
})


test_that("ksdt_sample(candidates = m) is ksdt(candidates = m) on the same, never restarted, chain", {
  tg <- gaussian_target(c(1, -1), matrix(c(1, 0.5, 0.5, 2), 2))
  n <- 60
  m <- 3
  for (smp in c("mala", "rwm")) {
    set.seed(213)
    ks <- ksdt_sample(tg, c(2, 2), n, sampler = smp, step_size = 1, candidates = m,
                      budget = 1e-3, min_size = "constant", min_size_coef = 15, standardize = FALSE)
    u_pkg <- stats::runif(1)
    set.seed(213)
    ch <- ref_chain(tg, c(2, 2), n * m, 1, smp)
    u_ref <- stats::runif(1)
    expect_identical(u_pkg, u_ref, label = smp)
    s <- t(apply(ch$x, 1, function(z) ref_score(tg, z)))
    fit <- ksdt(ch$x, s, budget = 1e-3, min_size = "constant",
                min_size_coef = 15, candidates = m, standardize = FALSE)
    expect_identical(ks$index, fit$index, label = smp)
    expect_identical(ks$size, fit$size, label = smp)
    expect_lt(rel_err(ks$ksd, fit$ksd), 1e-12, label = smp)
    expect_equal(ks$points, ch$x[ks$index, ], tolerance = 1e-12, label = smp)
    expect_identical(ks$n_offered, as.double(n * m))
    expect_identical(ks$t, as.double(n))
    expect_identical(ks$candidates, as.integer(m))
    expect_null(ks$start)
    expect_equal(ks$accept_rate, ch$accept_rate, tolerance = 1e-12)
  }
})

test_that("the pilot run adapts the step over warmup and resolves heuristic preconditioners", {
  tg <- gaussian_target(c(1, -1), matrix(c(1, 0.5, 0.5, 2), 2))
  # adapted step: a pilot of `warmup` adapting and `warmup` kept iterations
  set.seed(214)
  sp <- sp_mcmc(tg, c(2, 2), 20, candidates = 3, warmup = 150, standardize = FALSE)
  set.seed(214)
  pilot <- ref_chain(tg, c(2, 2), 150, 2.38 / sqrt(2) * 0.5, "mala", warmup = 150,
                     adapt = TRUE, target_accept = 0.574)
  ref <- ref_ksdt_sampler(tg, pilot$x[150, ], 20, pilot$step, "mala", 3, "last",
                          rep(0, 20), rep(Inf, 20))
  expect_equal(sp$step, pilot$step, tolerance = 1e-13)
  expect_equal(sp$points, ref$points, tolerance = 1e-12)
  # RWM adapts towards its own target_accept
  set.seed(215)
  ks <- ksdt_sample(tg, c(2, 2), 100, sampler = "rwm", warmup = 120,
                    target_accept = 0.3, min_size = "constant", min_size_coef = 12, standardize = FALSE)
  set.seed(215)
  pilot <- ref_chain(tg, c(2, 2), 120, 2.38 / sqrt(2), "rwm", warmup = 120,
                     adapt = TRUE, target_accept = 0.3)
  ref <- ref_ksdt_sampler(tg, pilot$x[120, ], 100, pilot$step, "rwm", 1, "last",
                          rep(0, 100), ref_min_size("constant", 1:100, 12, 10))
  expect_equal(ks$step, pilot$step, tolerance = 1e-13)
  expect_lt(rel_err(ks$ksd, ref$ksd), 1e-10)
  expect_identical(sort(canonical_index(ref$stream, ks$index)),
                   sort(canonical_index(ref$stream, ref$index)))
  # a heuristic preconditioner with a given step: resolved on the pilot sample
  set.seed(216)
  sp <- sp_mcmc(tg, c(2, 2), 20, candidates = 3, step_size = 0.8, warmup = 200,
                kernel = imq_kernel(precon = "med"), standardize = FALSE)
  set.seed(216)
  pilot <- ref_chain(tg, c(2, 2), 200, 0.8, "mala", warmup = 200)
  med <- ref_median_distance(pilot$x)
  expect_equal(sp$kernel$lambda, 1 / med^2, tolerance = 1e-12)
  ref <- ref_ksdt_sampler(tg, pilot$x[200, ], 20, 0.8, "mala", 3, "last",
                          rep(0, 20), rep(Inf, 20), L = diag(2) / med^2)
  expect_equal(sp$points, ref$points, tolerance = 1e-12)
  expect_lt(rel_err(sp$ksd, ref$ksd), 1e-10)
  expect_identical(sp$step, 0.8)
})


test_that("ksdt_sample() and sp_mcmc() reject bad arguments with messages naming them", {
  tg <- gaussian_target(c(0, 0))
  expect_error(ksdt_sample(tg, c(0, 0, 0), 10, step_size = 1), "'x0'")
  expect_error(sp_mcmc(tg, c(0, NA), 10, step_size = 1), "'x0'")
  tb <- kb_target(function(x) if (x[1] < 0) -Inf else -sum(x^2) / 2,
                  function(x) -x, dim = 2)
  expect_error(ksdt_sample(tb, c(-1, 0), 10, step_size = 1), "'x0'.*finite")
  expect_error(sp_mcmc(tb, c(-1, 0), 10, step_size = 1), "'x0'.*finite")
  expect_error(ksdt_sample(tg, c(0, 0), 0, step_size = 1), "'n_iter'")
  expect_error(sp_mcmc(tg, c(0, 0), 0, step_size = 1), "'n_iter'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 0), "'step_size'")
  expect_error(sp_mcmc(tg, c(0, 0), 10, step_size = -2), "'step_size'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, candidates = 0), "'candidates'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, candidates = 2.5), "'candidates'")
  expect_error(sp_mcmc(tg, c(0, 0), 10, candidates = 0, step_size = 1), "'candidates'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, sampler = "hmc"), "'sampler'")
  expect_error(sp_mcmc(tg, c(0, 0), 10, step_size = 1, sampler = "hmc"), "'sampler'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, start = "rand"), "unused argument")
  expect_error(sp_mcmc(tg, c(0, 0), 10, step_size = 1, start = c("last", "rand")), "'start'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, budget = -1), "'budget'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, budget = function(t) -t),
               "'budget'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1,
                           min_size = function(t) rep("a", length(t))), "'min_size'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, min_size_floor = 0),
               "'min_size_floor'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, warmup = 1), "'warmup'")
  expect_error(ksdt_sample(list(), c(0, 0), 10, step_size = 1), "'target'")
  expect_error(sp_mcmc(tg, c(0, 0), 10, step_size = 1, kernel = "imq"), "'kernel'")
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, nthreads = 0), "'nthreads'")
  # a log density failing mid-run: the error names the closure
  n_ld <- 0
  te <- kb_target(function(x) {
    n_ld <<- n_ld + 1
    if (n_ld > 40) stop("density broke")
    -sum(x^2) / 2
  }, function(x) -x, dim = 2)
  set.seed(221)
  e <- expect_error(ksdt_sample(te, c(0, 0), 100, step_size = 1), "density broke")
  expect_match(paste(deparse(conditionCall(e)), collapse = ""), "^log_density\\(")
  n_ld <- 0
  e <- expect_error(sp_mcmc(te, c(0, 0), 100, step_size = 1), "density broke")
  expect_match(paste(deparse(conditionCall(e)), collapse = ""), "^log_density\\(")
  tn <- kb_target(function(x) -sum(x^2) / 2,
                  function(x) if (x[1] > 1) c(NaN, 0) else -x, dim = 2)
  set.seed(222)
  expect_error(sp_mcmc(tn, c(0, 0), 200, step_size = 1), "'score' returned a non-finite")
})

test_that("target_accept is checked even when the step is given", {
  set.seed(228)
  tg <- gaussian_target(c(0, 0))
  expect_error(ksdt_sample(tg, c(0, 0), 10, step_size = 1, target_accept = 3),
               "'target_accept'")
  expect_error(sp_mcmc(tg, c(0, 0), 10, step_size = 1, target_accept = -1),
               "'target_accept'")
})

# ---- the regularised candidate rule (Benard, Staber & Da Veiga 2023) ----------

test_that("ksdt_sample(regularize =) is ksdt(regularize =) on the same chain, bit for bit", {
  tg <- reg_mix_sample(1, 1)$tg
  for (lam in list(TRUE, 0.05)) for (smp in c("mala", "rwm")) {
    lab <- paste(smp, format(lam))
    set.seed(213)
    ks <- ksdt_sample(tg, c(2, 2), 60, sampler = smp, step_size = 1,
                      candidates = 3, budget = 1e-3, min_size = "constant",
                      min_size_coef = 15, regularize = lam, progress = FALSE, standardize = FALSE)
    set.seed(213)
    ch <- ref_chain(tg, c(2, 2), 180, 1, smp)
    # the chain's log p from the target, the Laplacian by R's central
    # differences of its score: the same numbers as the sampler's
    fit <- ksdt(ch$x, tg, budget = 1e-3, min_size = "constant",
                min_size_coef = 15, candidates = 3, regularize = lam,
                progress = FALSE, standardize = FALSE)
    expect_identical(ks$index, fit$index, label = lab)
    expect_identical(ks$ksd, fit$ksd, label = lab)
    expect_identical(ks$regularize, lam, label = lab)
    plain <- ksdt(ch$x, tg, budget = 1e-3, min_size = "constant",
                  min_size_coef = 15, candidates = 3, progress = FALSE, standardize = FALSE)
    expect_false(identical(plain$index, fit$index), label = lab)
  }
})

test_that("sp_mcmc(regularize =) follows a plain-R regularised SP-MCMC", {
  r <- reg_mix_sample(1, 1)
  tg <- r$tg
  lap <- function(x) sum(pmax(r$mx$hess(matrix(x, 1)), 0))
  for (lam in list(TRUE, 0.05)) for (start in c("last", "infl")) {
    lab <- paste(start, format(lam))
    w <- if (isTRUE(lam)) function(t) 1 else function(t) lam * t
    set.seed(217)
    sp <- sp_mcmc(tg, c(2, 2), 25, candidates = 4, start = start,
                  step_size = 0.9, regularize = lam, progress = FALSE, standardize = FALSE)
    set.seed(217)
    ref <- ref_ksdt_sampler(tg, c(2, 2), 25, 0.9, "mala", 4, start,
                            rep(0, 25), rep(Inf, 25),
                            reg = list(lap = lap, w = w))
    expect_equal(sp$points, ref$points, tolerance = 1e-12, label = lab)
    expect_lt(rel_err(sp$ksd, ref$ksd), 1e-10, label = lab)
    expect_match(sp$method, "regularised candidate rule", fixed = TRUE)
  }
  # regularize = FALSE: as before
  set.seed(218)
  a <- sp_mcmc(tg, c(2, 2), 20, candidates = 3, step_size = 0.9,
               progress = FALSE, standardize = FALSE)
  set.seed(218)
  b <- sp_mcmc(tg, c(2, 2), 20, candidates = 3, step_size = 0.9,
               regularize = FALSE, progress = FALSE, standardize = FALSE)
  expect_identical(a, b)
  expect_null(a$regularize)
})

test_that("ksdt_sample() and sp_mcmc() name a bad 'regularize' before the chain runs", {
  b <- reg_bad_input(34)
  tg <- kb_target(function(x) -sum(x^2) / 2, b$f, dim = 2)
  e <- b$e
  e(ksdt_sample(tg, c(0, 0), 10, step_size = 1, regularize = TRUE),
    "regularize")
  e(ksdt_sample(tg, c(0, 0), 10, step_size = 1, candidates = 2,
                regularize = -1), "regularize")
  e(sp_mcmc(tg, c(0, 0), 10, step_size = 1, regularize = "yes"), "regularize")
  e(sp_mcmc(tg, c(0, 0), 10, step_size = 1, candidates = 1,
            regularize = TRUE), "regularize")
  e(ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 10, step_size = 1,
                regularize = NA), "regularize")
  expect_identical(b$calls(), 0)
})
