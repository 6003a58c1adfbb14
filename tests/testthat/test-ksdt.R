# KSDT online thinning and its streaming interface (R/ksdt.R, src/ksdt.c),
# checked against the brute-force references in helper-reference.R
# (ref_ksdt()), which recompute every sum from the full Stein kernel
# matrix at every step; the samplers that feed KSDT are in test-spmcmc.R.

# ---- the reference itself ------------------------------------------------------

test_that("the vectorised reference Stein kernel equals ref_stein_matrix()", {
  set.seed(200)
  for (d in 1:3) {
    smp <- make_stream(25, d)
    for (kn in names(ksdt_kernels)) {
      k <- ksdt_kernels[[kn]]
      L <- if (d > 1) ref_spd(d) else k$L(d)
      a <- ref_stein_matrix(smp$x, smp$s, k$type, k$c, k$beta, L)
      b <- ref_stein_cross(smp$x, smp$s, type = k$type, c = k$c, beta = k$beta, L = L)
      expect_lt(rel_err(b, a), 1e-13, label = paste(kn, d))
      # a cross block
      cb <- ref_stein_cross(smp$x[1:4, , drop = FALSE], smp$s[1:4, , drop = FALSE],
                            smp$x[10:25, , drop = FALSE], smp$s[10:25, , drop = FALSE],
                            type = k$type, c = k$c, beta = k$beta, L = L)
      expect_lt(rel_err(cb, a[1:4, 10:25]), 1e-13, label = paste(kn, d, "cross"))
    }
  }
})

# ---- agreement with the brute-force reference -------------------------------

test_that("ksdt() retains exactly the reference's indices: d = 1, 2, 3, budgets x size rules x kernels", {
  skip_on_cran()
  set.seed(201)
  sizes <- c(200, 300, 400)
  for (d in 1:3) {
    smp <- make_stream(sizes[d], d)
    for (kn in names(ksdt_kernels)) {
      k <- ksdt_kernels[[kn]]
      K <- ref_stein_cross(smp$x, smp$s, type = k$type, c = k$c, beta = k$beta,
                           L = k$L(d))
      tt <- seq_len(nrow(smp$x))
      for (ci in seq_along(ksdt_configs)) {
        cfg <- ksdt_configs[[ci]]
        lab <- sprintf("d = %d, %s, config %d", d, kn, ci)
        fit <- run_cfg(smp$x, smp$s, cfg, k$make(), nthreads = 1)
        ref <- ref_ksdt_core(K, eps_fun_of(cfg$budget)(tt), fmin_fun_of(cfg)(tt))
        expect_identical(fit$index, as.double(ref$index), label = lab)
        expect_identical(fit$size, ref$size, label = lab)
        expect_identical(fit$removed, ref$removed, label = lab)
        expect_lt(rel_err(fit$ksd, ref$ksd), 1e-10, label = lab)
        expect_identical(fit$points, smp$x[ref$index, , drop = FALSE], label = lab)
        expect_identical(fit$score, smp$s[ref$index, , drop = FALSE], label = lab)
        expect_identical(fit$t, as.double(nrow(smp$x)))
        # kernel evaluations: a row per addition and per removal of an older
        # point; none for removing the new point (its row is reused)
        expect_gte(fit$evals, ref$evals_lo, label = lab)
        expect_lte(fit$evals, ref$evals_hi, label = lab)
        # the configuration thins
        expect_gt(sum(ref$removed), nrow(smp$x) / 3, label = lab)
      }
    }
  }
})

test_that("ksdt() agrees with the reference across several C blocks (dictionary of 600)", {
  skip_on_cran()
  skip_under_valgrind()
  set.seed(202)
  smp <- make_stream(800, 2, rho = 0.95)
  K <- ref_stein_cross(smp$x, smp$s)
  tt <- seq_len(800)
  for (b in c(0, 2e-4)) {
    fit <- ksdt(smp$x, smp$s, budget = b, min_size = "constant",
                min_size_coef = 600, nthreads = 2, standardize = FALSE)
    ref <- ref_ksdt_core(K, rep(b, 800), pmax(10, rep(600, 800)))
    expect_identical(fit$index, as.double(ref$index), label = paste("budget", b))
    expect_identical(fit$removed, ref$removed, label = paste("budget", b))
    expect_lt(rel_err(fit$ksd, ref$ksd), 1e-10)
    expect_identical(length(fit$index), 600L)
    # older points were removed, not only the new ones
    expect_lt(min(fit$index), 150)
    expect_gt(sum(!(seq_len(600) %in% fit$index)), 50)
  }
})

# ---- per-step properties of the package's own dictionaries ------------------

test_that("every step: KSD^2 after <= before + eps_t (budget 0: never above before), size >= min(f(t), t)", {
  set.seed(203)
  smp <- make_stream(250, 2)
  K <- ref_stein_cross(smp$x, smp$s)
  cases <- list(list(b = 0, ms = "sqrt", coef = 1),
                list(b = 2e-3, ms = "sqrt", coef = 1),
                list(b = function(t) 0.2 / t, ms = "linear", coef = 0.2),
                list(b = 1e-2, ms = function(t) 3 + sqrt(t), coef = 1))
  for (ci in seq_along(cases)) {
    cs <- cases[[ci]]
    st <- ksdt_stream(2, budget = cs$b, min_size = cs$ms, min_size_coef = cs$coef, standardize = FALSE)
    eps <- eps_fun_of(cs$b)(1:250)
    f <- ref_min_size(cs$ms, 1:250, cs$coef, 10)
    prev <- numeric(0)
    K0 <- K1 <- ksd2 <- numeric(250)
    size <- removed <- nD <- nbefore <- integer(250)
    subset <- logical(250)
    for (t in 1:250) {
      ksdt_push(st, smp$x[t, ], smp$s[t, ])
      r <- ksdt_result(st)
      D <- r$index
      # the dictionary only loses points, and gains x_t at most
      subset[t] <- all(D %in% c(prev, t))
      before <- c(prev, t)
      K0[t] <- sum(K[before, before]) / length(before)^2
      K1[t] <- sum(K[D, D]) / length(D)^2
      ksd2[t] <- r$ksd[t]^2
      size[t] <- r$size[t]
      removed[t] <- r$removed[t]
      nD[t] <- length(D)
      nbefore[t] <- length(before)
      prev <- D
    }
    lab <- paste("case", ci)
    over <- K1 - K0
    expect_true(all(subset), label = lab)
    expect_true(all(K1 <= K0 + eps + 1e-12 * K0), label = lab)
    expect_true(all(nD >= pmin(f, 1:250)), label = lab)
    expect_lt(max(abs(ksd2 - K1) / K1), 1e-12, label = lab)
    expect_identical(size, nD, label = lab)
    expect_identical(removed, nbefore - nD, label = lab)
    # the history is not rewritten by later pushes
    expect_equal(r$ksd^2, ksd2, tolerance = 0, label = lab)
    if (identical(cs$b, 0)) {
      expect_lte(max(over / K0), 1e-12)
    } else {
      # the budget was used: some prunes raised KSD^2
      expect_gt(sum(over > 0), 0, label = paste("case", ci))
    }
    expect_gt(sum(r$removed), 100, label = paste("case", ci))
  }
})

test_that("the reported KSD equals the KSD of the dictionary recomputed from scratch over 10^4 steps", {
  set.seed(204)
  n <- 10000
  smp <- make_stream(n, 3, rho = 0.9, start = 3, noise = 0)
  kern <- imq_kernel(c = 0.8, beta = -0.4, precon = 0.8)
  # chunks of uneven sizes, checked after every chunk
  st <- ksdt_stream(3, budget = function(t) 0.1 / t, kernel = kern, standardize = FALSE)
  cuts <- sort(unique(c(0, sample(seq_len(n - 1), 60), n)))
  for (k in seq_len(length(cuts) - 1)) {
    rows <- (cuts[k] + 1):cuts[k + 1]
    ksdt_push(st, smp$x[rows, , drop = FALSE], smp$s[rows, , drop = FALSE])
    r <- ksdt_result(st)
    want <- sqrt(mean(stein_kernel_matrix(r$points, r$score, kern, standardize = FALSE)))
    expect_lt(abs(utils::tail(r$ksd, 1) - want) / want, 1e-9,
              label = sprintf("after %d states", cuts[k + 1]))
    expect_equal(length(r$ksd), cuts[k + 1])
  }
  # a single run, also with a large dictionary (linear rule, 4 blocks)
  for (ms in c("sqrt", "linear")) {
    fit <- ksdt(smp$x, smp$s, min_size = ms, min_size_coef = 0.1, kernel = kern,
                nthreads = 2, standardize = FALSE)
    want <- sqrt(mean(stein_kernel_matrix(fit$points, fit$score, kern, standardize = FALSE)))
    expect_lt(abs(utils::tail(fit$ksd, 1) - want) / want, 1e-9, label = ms)
    expect_identical(length(fit$ksd), as.integer(n))
    expect_gt(sum(fit$removed), n / 2)
  }
  expect_gt(length(fit$index), 900)
})

# ---- equivalent ways of feeding a stream, threads ------------------------------

test_that("pushing one row at a time, in chunks, or all at once gives what ksdt() gives", {
  set.seed(205)
  smp <- make_stream(300, 2)
  colnames(smp$x) <- c("a", "b")
  args <- list(budget = function(t) 0.01 / sqrt(t), min_size = function(t) 8 + t / 10,
               min_size_floor = 12, kernel = gaussian_kernel(precon = 2),
               standardize = FALSE)
  whole <- do.call(ksdt, c(list(smp$x, smp$s), args))
  fields <- c("points", "score", "index", "ksd", "size", "removed", "t", "evals")
  st1 <- do.call(ksdt_stream, c(list(2), args))
  for (t in 1:300) ksdt_push(st1, smp$x[t, , drop = FALSE], smp$s[t, , drop = FALSE])
  st2 <- do.call(ksdt_stream, c(list(2), args))
  for (rows in split(1:300, rep(1:7, c(1, 2, 60, 77, 100, 50, 10)))) {
    ksdt_push(st2, smp$x[rows, , drop = FALSE], smp$s[rows, , drop = FALSE])
  }
  st3 <- do.call(ksdt_stream, c(list(2), args))
  ksdt_push(st3, smp$x, smp$s)
  for (st in list(st1, st2, st3)) {
    r <- ksdt_result(st)
    expect_identical(r[fields], whole[fields])
  }
  expect_identical(colnames(whole$points), c("a", "b"))
  expect_gt(sum(whole$removed), 100)
  # the score as a function or a kb_target
  tg <- gaussian_target(c(0, 0))
  a <- ksdt(smp$x, tg, kernel = imq_kernel(), standardize = FALSE)
  b <- ksdt(smp$x, -smp$x, kernel = imq_kernel(), standardize = FALSE)
  c2 <- ksdt(smp$x, function(x) -x, kernel = imq_kernel(), standardize = FALSE)
  expect_identical(a$index, b$index)
  expect_equal(a$ksd, b$ksd, tolerance = 1e-14)
  expect_identical(c2$index, b$index)
})

test_that("1 and 2 threads give identical results (dictionary over 2048 points)", {
  # the C loops go parallel only for large dictionaries (2048 points and
  # more with KB_PAR_MIN_EVALS = 65536); few parallel steps, because on a
  # loaded machine every parallel region can wait for a descheduled thread
  set.seed(206)
  smp <- make_stream(2300, 2, rho = 0.9)
  a <- ksdt(smp$x, smp$s, budget = 1e-5, min_size = "constant", min_size_coef = 2100,
            nthreads = 1)
  b <- ksdt(smp$x, smp$s, budget = 1e-5, min_size = "constant", min_size_coef = 2100,
            nthreads = 2)
  expect_gte(length(a$index), 2100)
  expect_gt(sum(a$removed), 100)
  fields <- c("points", "score", "index", "ksd", "size", "removed", "evals")
  expect_identical(a[fields], b[fields])
  tg <- gaussian_target(c(0, 0))
  set.seed(207)
  a <- ksdt_sample(tg, c(1, 1), 2220, step_size = 1, candidates = 2, min_size = "constant",
                   min_size_coef = 2100, nthreads = 1)
  set.seed(207)
  b <- ksdt_sample(tg, c(1, 1), 2220, step_size = 1, candidates = 2, min_size = "constant",
                   min_size_coef = 2100, nthreads = 2)
  expect_gte(length(a$index), 2100)
  expect_gt(sum(a$removed), 50)
  expect_identical(a[fields], b[fields])
})

# ---- duplicated states and the tie rule ------------------------------------------

test_that("exact ties: the point with the smaller stream index is removed, as in the reference", {
  # points in {0, 1} with zero scores and L = 3: k_p(0, 0) = 3 and
  # k_p(0, 1) = -15/32 exactly, so all sums are exact and duplicates tie
  kern <- imq_kernel(precon = matrix(3, 1, 1))
  K2 <- stein_kernel_matrix(matrix(c(0, 1)), matrix(0, 2, 1), kern, standardize = FALSE)
  expect_identical(as.vector(K2), c(3, -15 / 32, -15 / 32, 3))
  # a constant stream (a chain that never moves): every removal ties, and
  # KSD^2 after = before (removal allowed with budget 0: "<=")
  x <- matrix(0, 12, 1)
  fit <- ksdt(x, x, min_size = "constant", min_size_coef = 3, min_size_floor = 1,
              kernel = kern, standardize = FALSE)
  expect_identical(fit$index, c(10, 11, 12))
  expect_identical(fit$size, c(1:3, rep(3L, 9)))
  expect_identical(fit$removed, c(0L, 0L, 0L, rep(1L, 9)))
  expect_equal(fit$ksd, rep(sqrt(3), 12), tolerance = 1e-15)
  # a random 0/1 stream: which duplicate goes matters for the indices
  set.seed(208)
  for (rule in list(list(ms = "constant", coef = 6), list(ms = "linear", coef = 0.25),
                    list(ms = "sqrt", coef = 1))) {
    x <- matrix(sample(0:1, 80, TRUE, prob = c(0.6, 0.4)), ncol = 1)
    for (b in c(0, 0.05)) {
      lab <- paste(rule$ms, b)
      fit <- ksdt(x, 0 * x, budget = b, min_size = rule$ms, min_size_coef = rule$coef,
                  min_size_floor = 2, kernel = kern, standardize = FALSE)
      K <- ref_stein_cross(x, 0 * x, L = matrix(3))
      fmin <- ref_min_size(rule$ms, 1:80, rule$coef, 2)
      ref <- ref_ksdt_core(K, rep(b, 80), fmin)
      expect_identical(fit$index, as.double(ref$index), label = lab)
      expect_equal(fit$ksd, ref$ksd, tolerance = 1e-14, label = lab)
      # the case matters: breaking ties towards the newer point gives others
      Kr <- K[80:1, 80:1]
      alt <- sort(81 - ref_ksdt_core(Kr, rep(b, 80), fmin)$index)
      expect_false(identical(alt, ref$index), label = lab)
    }
  }
})

test_that("exact ties across C blocks (dictionary of 600): the oldest tying point is removed", {
  skip_on_cran()
  skip_under_valgrind()
  kern <- imq_kernel(precon = matrix(3, 1, 1))
  # more than one block's worth (256) of removals, so that the oldest
  # points end up in several blocks
  x <- matrix(0, 1000, 1)
  for (nt in 1:2) {
    fit <- ksdt(x, x, min_size = "constant", min_size_coef = 600, min_size_floor = 1,
                kernel = kern, nthreads = nt, standardize = FALSE)
    expect_identical(fit$index, as.double(401:1000))
  }
  set.seed(227)
  x <- matrix(sample(0:1, 1000, TRUE, prob = c(0.7, 0.3)), ncol = 1)
  fit <- ksdt(x, 0 * x, budget = 0.01, min_size = "constant", min_size_coef = 600,
              min_size_floor = 1, kernel = kern, nthreads = 2, standardize = FALSE)
  K <- ref_stein_cross(x, 0 * x, L = matrix(3))
  ref <- ref_ksdt_core(K, rep(0.01, 1000), rep(600, 1000))
  expect_identical(fit$index, as.double(ref$index))
  expect_gt(sum(ref$removed), 300)
})

test_that("a stream with repeated states (MCMC rejections) is thinned as in the reference", {
  set.seed(209)
  base <- make_stream(150, 2)
  reps <- sample(1:3, 150, TRUE)
  x <- base$x[rep(1:150, reps), ]
  s <- base$s[rep(1:150, reps), ]
  n <- nrow(x)
  K <- ref_stein_cross(x, s)
  for (b in c(0, 1e-3)) {
    fit <- ksdt(x, s, budget = b, min_size = "sqrt", standardize = FALSE)
    ref <- ref_ksdt_core(K, rep(b, n), ref_min_size("sqrt", 1:n, 1, 10))
    # duplicates are interchangeable: compare the states kept
    expect_identical(sort(canonical_index(x, fit$index)),
                     sort(canonical_index(x, ref$index)))
    expect_identical(fit$points, x[fit$index, ])
    expect_identical(fit$size, ref$size)
    expect_lt(rel_err(fit$ksd, ref$ksd), 1e-10)
    want <- sqrt(mean(stein_kernel_matrix(fit$points, fit$score, standardize = FALSE)))
    expect_lt(abs(utils::tail(fit$ksd, 1) - want) / want, 1e-12)
  }
})

# ---- KSDT with the SP-MCMC addition rule over a given chain ------------------

# Brute force, every KSD from scratch: blocks of rows (a list of index
# vectors); each offers its row minimising K[c, c] + 2 sum_D K[c, D] (first
# on ties); then greedy removals while the KSD^2 without a point is at most
# the KSD^2 just after the addition plus eps, down to fmin points, the
# point of smallest stream index on ties.
# With `reg` (list(lap, logp, w): per-row Laplacian terms and log densities,
# w(t) the weight on log p) the regularised candidate rule of Benard,
# Staber & Da Veiga (2023): K[c, c] + lap_c - w(|D| + 1) logp_c + 2 sum_D
# K[c, D].  Also returns the row chosen in each block.
brute_ksdt_blocks <- function(K, blocks, eps, fmin, reg = NULL) {
  D <- integer(0)
  ksd <- numeric(length(blocks))
  size <- integer(length(blocks))
  chosen <- integer(length(blocks))
  ksd2 <- function(I) sum(K[I, I]) / length(I)^2
  for (b in seq_along(blocks)) {
    rows <- blocks[[b]]
    crit <- vapply(rows, function(c) K[c, c] + 2 * sum(K[c, D]), 0)
    if (!is.null(reg)) {
      crit <- crit + reg$lap[rows] - reg$w(length(D) + 1) * reg$logp[rows]
    }
    chosen[b] <- rows[which.min(crit)]
    D <- sort(c(D, chosen[b]))
    K0 <- ksd2(D)
    while (length(D) >= 2 && length(D) - 1 >= fmin[b]) {
      v <- vapply(seq_along(D), function(i) ksd2(D[-i]), 0)
      j <- which.min(v)
      if (v[j] > K0 + eps[b]) break
      D <- D[-j]
    }
    ksd[b] <- sqrt(max(ksd2(D), 0))
    size[b] <- length(D)
  }
  list(index = as.double(D), ksd = ksd, size = size, chosen = chosen)
}

test_that("ksdt(candidates = m) matches a brute-force KSDT over blocks of m rows", {
  smp <- make_stream(203, 2, rho = 0.85)
  K <- ref_stein_cross(smp$x, smp$s)
  for (m in c(1L, 3L, 5L)) {
    blocks <- split(seq_len(203), ceiling(seq_len(203) / m))
    nb <- length(blocks)
    fit <- ksdt(smp$x, smp$s, budget = 1e-3, min_size = "constant",
                min_size_coef = 12, candidates = m, standardize = FALSE)
    ref <- brute_ksdt_blocks(K, blocks, rep(1e-3, nb), rep(12, nb))
    lab <- paste("m =", m)
    expect_identical(fit$index, ref$index, label = lab)
    expect_identical(fit$size, ref$size, label = lab)
    expect_lt(rel_err(fit$ksd, ref$ksd), 1e-10, label = lab)
    expect_equal(fit$points, smp$x[fit$index, ], tolerance = 0, label = lab)
    # t counts blocks, n_offered rows; the last block (203 = 40 * 5 + 3) as it is
    expect_identical(fit$t, as.double(nb), label = lab)
    expect_identical(fit$n_offered, 203, label = lab)
    expect_length(fit$ksd, nb)
  }
  # a schedule of t sees block numbers
  fit <- ksdt(smp$x, smp$s, min_size = function(t) 5 + t / 10, candidates = 4, standardize = FALSE)
  blocks <- split(seq_len(203), ceiling(seq_len(203) / 4))
  ref <- brute_ksdt_blocks(K, blocks, rep(0, 51), pmax(10, 5 + (1:51) / 10))
  expect_identical(fit$index, ref$index)
  expect_lt(rel_err(fit$ksd, ref$ksd), 1e-10)
})

test_that("ksdt_push(candidates = m): blocks within each push, indices over the whole stream", {
  smp <- make_stream(120, 2)
  K <- ref_stein_cross(smp$x, smp$s)
  full <- ksdt(smp$x, smp$s, candidates = 4, min_size = "constant", min_size_coef = 12, standardize = FALSE)
  # pushes of multiples of m reproduce ksdt()
  st <- ksdt_stream(2, min_size = "constant", min_size_coef = 12, standardize = FALSE)
  for (r in list(1:40, 41:44, 45:120)) ksdt_push(st, smp$x[r, ], smp$s[r, ], candidates = 4)
  expect_identical(ksdt_result(st)[c("index", "ksd", "size", "points")],
                   full[c("index", "ksd", "size", "points")])
  # otherwise each push ends with its own incomplete block
  st <- ksdt_stream(2, min_size = "constant", min_size_coef = 12, standardize = FALSE)
  ksdt_push(st, smp$x[1:7, ], smp$s[1:7, ], candidates = 4)
  ksdt_push(st, smp$x[8:120, ], smp$s[8:120, ], candidates = 4)
  blocks <- c(list(1:4, 5:7), split(8:120, ceiling(seq_along(8:120) / 4)))
  ref <- brute_ksdt_blocks(K, blocks, rep(0, length(blocks)), rep(12, length(blocks)))
  r <- ksdt_result(st)
  expect_identical(r$index, ref$index)
  expect_lt(rel_err(r$ksd, ref$ksd), 1e-10)
  expect_identical(r$n_offered, 120)
  expect_error(ksdt_push(st, smp$x, smp$s, candidates = 0), "'candidates'",
               class = "kb_error_arg")
  expect_error(ksdt(smp$x, smp$s, candidates = 2.5, standardize = FALSE), "'candidates'",
               class = "kb_error_arg")
})

# ---- bad input ---------------------------------------------------------------------

test_that("ksdt() and ksdt_stream() reject bad settings with messages naming them", {
  set.seed(217)
  smp <- make_stream(20, 2)
  x <- smp$x
  s <- smp$s
  expect_error(ksdt(x, s, budget = -1), "'budget'")
  expect_error(ksdt(x, s, budget = NA), "'budget'")
  expect_error(ksdt(x, s, budget = c(0, 1)), "'budget'")
  expect_error(ksdt(x, s, budget = "a"), "'budget'")
  expect_error(ksdt(x, s, budget = function(t) -t), "'budget'.*>= 0.*t = 1")
  expect_error(ksdt(x, s, budget = function(t) ifelse(t > 7, -1, 0)), "'budget'.*t = 8")
  expect_error(ksdt(x, s, budget = function(t) stop("oops")), "'budget'.*oops")
  expect_error(ksdt(x, s, min_size = function(t) rep("a", length(t))), "'min_size'")
  expect_error(ksdt(x, s, min_size = function(t) rep(NA, length(t))), "'min_size'")
  expect_error(ksdt(x, s, min_size = function(t) rep(NA_real_, length(t))), "'min_size'")
  expect_error(ksdt(x, s, min_size = function(t) rep(Inf, length(t))), "'min_size'")
  expect_error(ksdt(x, s, min_size = function(t) list(t)), "'min_size'")
  expect_error(ksdt(x, s, min_size = function(t) NULL), "'min_size'")
  expect_error(ksdt(x, s, min_size = "log"), "'min_size'")
  expect_error(ksdt(x, s, min_size_coef = -1), "'min_size_coef'")
  expect_error(ksdt(x, s, min_size_floor = 0.5), "'min_size_floor'")
  expect_error(ksdt(x, s, min_size_floor = NA), "'min_size_floor'")
  expect_error(ksdt(x, s, kernel = "imq"), "'kernel'")
  expect_error(ksdt(x, s, nthreads = 0), "'nthreads'")
  expect_error(ksdt(x, s, progress = NA), "'progress'")
  xb <- x
  xb[3, 2] <- NaN
  expect_error(ksdt(xb, s), "'x'.*row 3, column 2")
  sb <- s
  sb[5, 1] <- Inf
  expect_error(ksdt(x, sb), "'score'.*row 5, column 1")
  expect_error(ksdt(x, s[1:5, ]), "'score'")
  expect_error(ksdt(x, function(x) c(x, 1)), "'score'")
  expect_error(ksdt_stream(0), "'dim'")
  expect_error(ksdt_stream(2, kernel = list()), "'kernel'")
  expect_error(ksdt_stream(2, budget = -0.1), "'budget'")
  expect_error(ksdt_stream(2, min_size_floor = 0), "'min_size_floor'")
  expect_error(ksdt_push(list(ptr = 1), x, s), "'stream'")
  expect_error(ksdt_push(x, x, s), "'stream'")
  expect_error(ksdt_result(list()), "'stream'")
  expect_error(ksdt_result(ksdt_stream(2)), "'stream' is empty")
})

test_that("a rejected push changes nothing in the stream", {
  set.seed(218)
  smp <- make_stream(60, 2)
  st <- ksdt_stream(2, budget = function(t) ifelse(t > 50, -1, 1e-3),
                    min_size = function(t) ifelse(t > 45 & t < 48, NA, 5 + sqrt(t)),
                    kernel = imq_kernel(precon = "med"))
  ksdt_push(st, smp$x[1:30, ], smp$s[1:30, ])
  before <- ksdt_result(st)
  xb <- smp$x[31:40, ]
  xb[4, 1] <- Inf
  sb <- smp$s[31:40, ]
  sb[7, 2] <- NA
  expect_error(ksdt_push(st, xb, smp$s[31:40, ]), "'x'")
  expect_error(ksdt_push(st, smp$x[31:40, ], sb), "'score'")
  expect_error(ksdt_push(st, smp$x[31:40, 1], smp$s[31:40, 1]), "'x'.*2 columns")
  expect_error(ksdt_push(st, cbind(smp$x[31:40, ], 0), cbind(smp$s[31:40, ], 0)),
               "'x'.*2 columns")
  expect_error(ksdt_push(st, c(1, 2, 3), c(1, 2, 3)), "'x'")
  expect_error(ksdt_push(st, smp$x[31:40, ], smp$s[31:39, ]), "'score'")
  expect_error(ksdt_push(st, smp$x[31:40, ], function(x) stop("no score")), "no score")
  # min_size NA at t = 46, 47; budget < 0 from t = 51
  expect_error(ksdt_push(st, smp$x[31:50, ], smp$s[31:50, ]), "'min_size'.*t = 46")
  expect_identical(ksdt_result(st), before)
  # the stream carries on exactly as one that never saw the failures
  ksdt_push(st, smp$x[31:45, ], smp$s[31:45, ])
  st3 <- ksdt_stream(2, budget = function(t) ifelse(t > 50, -1, 1e-3),
                     min_size = function(t) ifelse(t > 45 & t < 48, NA, 5 + sqrt(t)),
                     kernel = imq_kernel(precon = "med"))
  ksdt_push(st3, smp$x[1:30, ], smp$s[1:30, ])
  ksdt_push(st3, smp$x[31:45, ], smp$s[31:45, ])
  after <- ksdt_result(st)
  expect_identical(after, ksdt_result(st3))
  expect_identical(after$t, 45)
  expect_gt(sum(after$removed), 10)
  expect_error(ksdt_push(st, smp$x[46:50, ], smp$s[46:50, ]), "'min_size'.*t = 46")
  expect_error(ksdt_push(st, smp$x[46:60, ], smp$s[46:60, ]), "'budget'.*t = 51")
  expect_identical(ksdt_result(st), after)
})

test_that("a rejected first push leaves the stream empty and unresolved", {
  # the push is rejected (budget < 0 from t = 6) after the kernel has been
  # resolved on its rows: the stream must stay as it was
  set.seed(219)
  smp <- make_stream(20, 2)
  bud <- function(t) ifelse(t > 5, -1, 0)
  st <- ksdt_stream(2, budget = bud, kernel = gaussian_kernel())
  expect_error(ksdt_push(st, smp$x[11:20, ], smp$s[11:20, ]), "'budget'.*t = 6")
  expect_error(ksdt_result(st), "'stream' is empty")
  ksdt_push(st, smp$x[1:5, ], smp$s[1:5, ])
  fresh <- ksdt_stream(2, budget = bud, kernel = gaussian_kernel())
  ksdt_push(fresh, smp$x[1:5, ], smp$s[1:5, ])
  # the median heuristic is resolved on the first accepted push
  expect_identical(ksdt_result(st)$kernel$lambda, ksdt_result(fresh)$kernel$lambda)
  expect_identical(ksdt_result(st)$ksd, ksdt_result(fresh)$ksd)
})

test_that("budget and min_size functions written for a single t work (one call per t)", {
  # the documented schedule is "a function of t"; a function using `if`
  # cannot take a vector of t and must be called once per t
  set.seed(220)
  smp <- make_stream(200, 2)
  ms_scalar <- function(t) if (t < 50) 10 else 10 + sqrt(t - 50)
  ms_vector <- function(t) ifelse(t < 50, 10, 10 + sqrt(pmax(t - 50, 0)))
  b_scalar <- function(t) if (t < 100) 0 else 1e-3
  b_vector <- function(t) ifelse(t < 100, 0, 1e-3)
  want <- ksdt(smp$x, smp$s, budget = b_vector, min_size = ms_vector, standardize = FALSE)
  # one push per state calls the schedules with a single t
  st <- ksdt_stream(2, budget = b_scalar, min_size = ms_scalar, standardize = FALSE)
  for (t in 1:200) ksdt_push(st, smp$x[t, ], smp$s[t, ])
  expect_identical(ksdt_result(st)$index, want$index)
  got <- ksdt(smp$x, smp$s, budget = b_scalar, min_size = ms_scalar, standardize = FALSE)
  expect_identical(got$index, want$index)
  expect_identical(got$ksd, want$ksd)
})

# ---- print, summary, plot ------------------------------------------------------------

test_that("print and summary of KSDT results, streams and SP-MCMC", {
  set.seed(223)
  smp <- make_stream(400, 2, noise = 0)
  fit <- ksdt(smp$x, smp$s, standardize = FALSE)
  fit2 <- ksdt(smp$x[, 1], smp$s[, 1], budget = function(t) 1 / t,
               min_size = function(t) sqrt(t), kernel = gaussian_kernel(precon = 0.5), standardize = FALSE)
  st <- ksdt_stream(2, min_size = "linear", min_size_coef = 0.2, standardize = FALSE)
  tg <- gaussian_target(c(1, -1))
  set.seed(224)
  sp <- sp_mcmc(tg, c(0, 0), 25, candidates = 3, step_size = 1, standardize = FALSE)
  set.seed(225)
  ks <- ksdt_sample(tg, c(0, 0), 300, sampler = "rwm", step_size = 1.5, candidates = 2,
                    budget = 1e-3, standardize = FALSE)
  expect_snapshot({
    fit
    summary(fit)
    fit2
    st
    ksdt_push(st, smp$x[1:50, ], smp$s[1:50, ])
    print(st)
    sp
    summary(sp)
    ks
  })
  s <- summary(fit)
  expect_identical(s$kept, length(fit$index))
  expect_equal(s$removed, 400 - length(fit$index))
  expect_identical(s$oldest, min(fit$index))
  expect_identical(s$ksd, fit$ksd[s$at])
  expect_identical(s$at[c(1, length(s$at))], c(1, 400))
})

test_that("plot of a kb_ksdt draws without error", {
  set.seed(226)
  smp <- make_stream(300, 2)
  fit <- ksdt(smp$x, smp$s)
  fit1 <- ksdt(smp$x[, 1], smp$s[, 1])
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_invisible(plot(fit))
  expect_identical(plot(fit1), fit1)
  expect_identical(plot(fit, which = 2), fit)
  expect_identical(plot(fit1, which = c(1, 3)), fit1)
})

# ---- non-finite values, rejected and interrupted pushes, re-entry -------------

test_that("a Stein kernel that overflows is an error naming the row, never KSD 0", {
  set.seed(12)
  x <- matrix(rnorm(1000), 500)
  s <- -x
  x[100, ] <- c(1e155, 0)
  # row 100's Stein kernel value overflows: an error, not a KSD of 0
  expect_error(ksdt(x, s, standardize = FALSE), class = "kb_error_numeric",
               regexp = "row 100 and the dictionary state from stream row [0-9]+ is not finite")
  # in a stream the rows before it were taken, the stream is as it was after
  # them, and pushing the rest resumes it exactly
  st <- ksdt_stream(2, standardize = FALSE)
  ksdt_push(st, x[1:60, ], s[1:60, ])
  before <- ksdt_result(st)
  expect_error(ksdt_push(st, x[61:200, ], s[61:200, ]), class = "kb_error_numeric",
               regexp = "row 40 and .* 39 rows of the stream were taken")
  r <- ksdt_result(st)
  expect_identical(r$n_offered, 99)
  ksdt_push(st, x[101:500, ], s[101:500, ])
  ref <- ksdt(x[-100, ], s[-100, ], standardize = FALSE)
  r <- ksdt_result(st)
  expect_identical(r$ksd, ref$ksd)
  expect_identical(r$points, ref$points)
  expect_true(all(r$ksd > 0))
  # a score that overflows k_p(x, x): the push is rejected as a whole
  st <- ksdt_stream(2, standardize = FALSE)
  ksdt_push(st, x[1:50, ], s[1:50, ])
  before <- ksdt_result(st)
  bad <- s[51:80, ]
  bad[5, ] <- c(-1e155, 0)
  expect_error(ksdt_push(st, x[51:80, ], bad), class = "kb_error_numeric",
               regexp = "row 5 with itself is not finite.*nothing was pushed")
  expect_identical(ksdt_result(st), before)
  # the same rule with candidates and inside the sampler
  expect_error(ksdt(x, s, candidates = 3, standardize = FALSE), class = "kb_error_numeric",
               regexp = "row 100 and")
  tb <- kb_target(function(z) -sum(z^2) / 2,
                  function(z) if (z[1] > 1.5) c(1e200, 1e200) else -z, 2)
  set.seed(3)
  expect_error(ksdt_sample(tb, c(0, 0), 500, sampler = "rwm", step_size = 1, standardize = FALSE), class = "kb_error_numeric",
               regexp = "Stein kernel of chain state [0-9]+")
})

test_that("a rejected first push does not fix the kernel on the rejected rows", {
  set.seed(5)
  x <- matrix(rnorm(200), 100)
  s <- -x
  st <- ksdt_stream(2, kernel = imq_kernel(precon = "smpcov"))
  bad <- s
  bad[5, ] <- 1.5e308
  expect_error(ksdt_push(st, 3 * x, bad), class = "kb_error_numeric",
               regexp = "not finite at row 5|row 5 with itself")
  expect_null(st$ptr)
  expect_null(st$rk)
  ksdt_push(st, x, s)
  st2 <- ksdt_stream(2, kernel = imq_kernel(precon = "smpcov"))
  ksdt_push(st2, x, s)
  expect_identical(ksdt_result(st), ksdt_result(st2))
})

test_that("a failed allocation while the dictionary grows leaves the stream consistent", {
  set.seed(6)
  x <- matrix(rnorm(400), 200)
  s <- -x
  # min size t: nothing is pruned, the dictionary grows past 64 and 128
  mk <- function() ksdt_stream(2, min_size = "linear", min_size_coef = 1, standardize = FALSE)
  st <- mk()
  ksdt_push(st, x[1:64, ], s[1:64, ])
  before <- ksdt_result(st)
  .Call(kernbayes:::C_kb_ksdt_fail_alloc, st$ptr, 1L)
  expect_error(ksdt_push(st, x[65:200, ], s[65:200, ]), class = "kb_error_memory",
               regexp = "cannot allocate .* for the dictionary")
  expect_identical(ksdt_result(st), before)
  ksdt_push(st, x[65:200, ], s[65:200, ])
  ref <- mk()
  ksdt_push(ref, x, s)
  # the dictionary bit for bit; the moment report of the pushes (pooled
  # in two parts here) to rounding
  no_mom <- function(r) { r$moments <- NULL; r }
  expect_identical(no_mom(ksdt_result(st)), no_mom(ksdt_result(ref)))
  expect_equal(ksdt_result(st)$moments, ksdt_result(ref)$moments, tolerance = 1e-10)
  expect_identical(length(ksdt_result(st)$index), 200L)
  # the history's growth too (1024 steps)
  st <- mk()
  x2 <- matrix(rnorm(2200), 1100)
  ksdt_push(st, x2[1:1000, ], -x2[1:1000, ])
  before <- ksdt_result(st)
  .Call(kernbayes:::C_kb_ksdt_fail_alloc, st$ptr, 1L)
  expect_error(ksdt_push(st, x2[1001:1100, ], -x2[1001:1100, ]),
               class = "kb_error_memory", regexp = "history")
  expect_identical(ksdt_result(st), before)
})

test_that("a stream in use refuses re-entry from a closure", {
  set.seed(7)
  # a score closure that pushes to the stream of the running sampler
  tg <- kb_target(function(z) -sum(z^2) / 2, function(z) {
    for (f in sys.frames()) {
      if (exists("stream", envir = f, inherits = FALSE) &&
          inherits(get("stream", envir = f), "kb_ksdt_stream")) {
        ksdt_push(get("stream", envir = f), z, -z)
      }
    }
    -z
  }, 2)
  # a push from inside the stream's own closure is refused, not run
  expect_error(ksdt_sample(tg, c(0, 0), 50, step_size = 1, standardize = FALSE), class = "kb_error_state",
               regexp = "in use by a running")
  # the hold is released by the error: the same stream can be used again
  st <- ksdt_stream(2, standardize = FALSE)
  x <- matrix(rnorm(40), 20)
  ksdt_push(st, x, -x)
  expect_identical(ksdt_result(st)$n_offered, 20)
})

test_that("an interrupted push keeps whole steps, says how many rows, and resumes exactly", {
  skip_on_cran()
  skip_if(nzchar(Sys.getenv("KB_VALGRIND")), "subprocess and signals")
  skip_on_os("windows")
  dir <- tempfile("kb-intr")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE))
  child <- file.path(dir, "child.R")
  writeLines(c(
    "library(kernbayes)",
    "set.seed(1); n <- 60000; x <- matrix(rnorm(2 * n), n); s <- -x",
    "mk <- function() ksdt_stream(2, min_size = 'linear', min_size_coef = 0.5, progress = FALSE)",
    "st <- mk()",
    sprintf("writeLines(as.character(Sys.getpid()), '%s')", file.path(dir, "pid")),
    "msg <- ''",
    "r <- withCallingHandlers(tryCatch(ksdt_push(st, x, s), interrupt = function(e) 'interrupted'),",
    "  message = function(m) { msg <<- conditionMessage(m); invokeRestart('muffleMessage') })",
    "k <- ksdt_result(st)$n_offered",
    "cat('RESULT', identical(r, 'interrupted'), k, '\\n')",
    "cat('MESSAGE', msg, '\\n')",
    "if (k > 0 && k < n) {",
    "  ksdt_push(st, x[-seq_len(k), ], s[-seq_len(k), ])",
    "  ref <- mk(); ksdt_push(ref, x, s)",
    "  a <- ksdt_result(st); b <- ksdt_result(ref)",
    "  ok <- isTRUE(all.equal(a$moments, b$moments, tolerance = 1e-10))",
    "  a$moments <- b$moments <- NULL",
    "  cat('RESUMED', ok && identical(a, b), '\\n')",
    "}"), child)
  out <- file.path(dir, "out")
  libs <- paste(.libPaths(), collapse = .Platform$path.sep)
  system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", shQuote(child)),
          stdout = out, stderr = out, wait = FALSE,
          env = paste0("R_LIBS=", shQuote(libs)))
  pidf <- file.path(dir, "pid")
  for (i in 1:300) if (file.exists(pidf) && length(readLines(pidf)) == 1L) break else Sys.sleep(0.1)
  pid <- as.integer(readLines(pidf))
  Sys.sleep(0.5)
  tools::pskill(pid, tools::SIGINT)
  for (i in 1:600) if (file.exists(out) && any(grepl("^RESUMED|^RESULT FALSE", readLines(out)))) break else Sys.sleep(0.25)
  txt <- readLines(out)
  res <- strsplit(grep("^RESULT", txt, value = TRUE), " ")[[1]]
  expect_identical(res[2], "TRUE")
  k <- as.numeric(res[3])
  expect_gt(k, 0)
  expect_lt(k, 60000)
  expect_match(grep("^MESSAGE", txt, value = TRUE),
               sprintf("interrupted: %.0f of 60000 rows were taken.*x\\[-\\(1:%.0f\\), \\]", k, k))
  expect_true(any(grepl("^RESUMED TRUE", txt)))
})

# ---- the regularised candidate rule (Benard, Staber & Da Veiga 2023) ----------

test_that("ksdt(regularize =) follows a plain-R regularised candidate rule index for index", {
  # tg, mx, x, s, H, lp
  list2env(reg_mix_sample(203, 31), environment())
  lap <- rowSums(pmax(H, 0))  # KSDT does not standardise: the coordinates of x
  K <- ref_stein_cross(x, s)
  for (m in c(3L, 5L)) for (lam in list(TRUE, 0.05)) {
    lab <- paste("m =", m, "regularize =", format(lam))
    blocks <- split(seq_len(203), ceiling(seq_len(203) / m))
    nb <- length(blocks)
    w <- if (isTRUE(lam)) function(t) 1 else function(t) lam * t
    reg <- list(lap = lap, logp = lp, w = w)
    # no pruning: the dictionary is the selection, block by block
    sel <- ksdt(x, s, min_size = "constant", min_size_coef = 1e9,
                candidates = m, regularize = lam, log_density = lp,
                hessian_diag = H, progress = FALSE, standardize = FALSE)
    ref <- brute_ksdt_blocks(K, blocks, rep(0, nb), rep(1e9, nb), reg)
    expect_identical(sel$index, as.double(ref$chosen), label = lab)
    expect_lt(rel_err(sel$ksd, ref$ksd), 1e-10, label = lab)
    # the rule changes the selection
    plain <- brute_ksdt_blocks(K, blocks, rep(0, nb), rep(1e9, nb))
    expect_false(identical(ref$chosen, plain$chosen), label = lab)
    # with pruning
    fit <- ksdt(x, s, budget = 1e-3, min_size = "constant", min_size_coef = 12,
                candidates = m, regularize = lam, log_density = lp,
                hessian_diag = H, progress = FALSE, standardize = FALSE)
    ref <- brute_ksdt_blocks(K, blocks, rep(1e-3, nb), rep(12, nb), reg)
    expect_identical(fit$index, ref$index, label = lab)
    expect_identical(fit$size, ref$size, label = lab)
    expect_lt(rel_err(fit$ksd, ref$ksd), 1e-10, label = lab)
    expect_identical(fit$regularize, lam, label = lab)
    expect_identical(fit$method, "KSDT (regularised candidate rule)")
    # the same on two threads
    expect_identical(ksdt(x, s, budget = 1e-3, min_size = "constant",
                          min_size_coef = 12, candidates = m, regularize = lam,
                          log_density = lp, hessian_diag = H, nthreads = 2,
                          progress = FALSE, standardize = FALSE)[c("index", "ksd", "size")],
                     fit[c("index", "ksd", "size")], label = lab)
  }
  # log p and the Laplacian from the target (finite differences of its
  # score), and from one-point closures: the same selection
  blocks <- split(seq_len(203), ceiling(seq_len(203) / 4))
  ref <- brute_ksdt_blocks(K, blocks, rep(0, 51), rep(1e9, 51),
                           list(lap = lap, logp = lp, w = function(t) 1))
  a <- ksdt(x, tg, min_size = "constant", min_size_coef = 1e9, candidates = 4,
            regularize = TRUE, progress = FALSE, standardize = FALSE)
  expect_identical(a$index, as.double(ref$chosen))
  f <- function(p) drop(target_score(tg, matrix(p, 1)))
  b <- ksdt(x, f, min_size = "constant", min_size_coef = 1e9, candidates = 4,
            regularize = TRUE, log_density = function(p) mx$logp(matrix(p, 1)),
            hessian_diag = function(p) drop(mx$hess(matrix(p, 1))),
            progress = FALSE, standardize = FALSE)
  expect_identical(b$index, as.double(ref$chosen))
})

test_that("ksdt(regularize = FALSE) is plain KSDT, and several chains are regularised chain by chain", {
  # tg, mx, x, s, H, lp
  list2env(reg_mix_sample(160, 32), environment())
  base <- ksdt(x, s, candidates = 4, progress = FALSE, standardize = FALSE)
  expect_identical(ksdt(x, s, candidates = 4, regularize = FALSE,
                        progress = FALSE, standardize = FALSE), base)
  expect_identical(ksdt(x, tg, candidates = 4, regularize = FALSE,
                        progress = FALSE, standardize = FALSE), base)
  expect_null(base$regularize)
  # two chains: each chain's stream runs the rule on its own rows
  ch <- rep(1:2, each = 80)
  two <- ksdt(x, s, chain = ch, candidates = 4, regularize = 0.02,
              log_density = lp, hessian_diag = H, progress = FALSE, standardize = FALSE)
  for (k in 1:2) {
    r <- which(ch == k)
    one <- ksdt(x[r, ], s[r, ], candidates = 4, regularize = 0.02,
                log_density = lp[r], hessian_diag = H[r, ], progress = FALSE, standardize = FALSE)
    expect_identical(two$per_chain[[k]]$index, one$index)
  }
  expect_identical(two$regularize, 0.02)
  expect_match(two$method, "regularised candidate rule", fixed = TRUE)
})

test_that("ksdt(regularize =) names bad input before the score runs", {
  b <- reg_bad_input(33)
  x <- b$x
  s <- b$s
  f <- b$f
  e <- b$e
  e(ksdt(x, f, candidates = 3, regularize = -1, log_density = rep(0, 30)),
    "regularize")
  e(ksdt(x, f, candidates = 3, regularize = "yes"), "regularize")
  e(ksdt(x, f, candidates = 3, regularize = NA), "regularize")
  e(ksdt(x, f, regularize = TRUE, log_density = rep(0, 30)), "regularize")
  e(ksdt(x, f, candidates = 3, regularize = TRUE), "log_density")
  e(ksdt(x, f, candidates = 3, regularize = TRUE, log_density = 1:3),
    "log_density")
  e(ksdt(x, f, candidates = 3, regularize = TRUE, log_density = rep(0, 30),
         hessian_diag = matrix(0, 30, 3)), "hessian_diag")
  e(ksdt(x, f, candidates = 3, regularize = TRUE, log_density = rep(0, 30),
         budget = -1), "budget")
  expect_identical(b$calls(), 0)
  e(ksdt(x, s, candidates = 3, regularize = TRUE, log_density = rep(0, 30)),
    "hessian_diag")
  e(ksdt(x, s, candidates = 3, regularize = TRUE,
         log_density = c(NA, rep(0, 29)), hessian_diag = matrix(0, 30, 2)),
    "log_density")
  e(ksdt(x, s, candidates = 3, regularize = TRUE, log_density = rep(0, 30),
         hessian_diag = matrix(NA_real_, 30, 2)), "hessian_diag")
})

test_that("the regularised candidate rule on the 0.2 / 0.8 mixture: the heavy mode's share", {
  skip_under_valgrind()
  tg <- gaussian_mixture_target(means = rbind(c(-3, 0), c(3, 0)),
                                weights = c(0.2, 0.8))
  share <- function(fit) mean(fit$points[, 1] > 0)
  frac <- sapply(1:5, function(seed) {
    set.seed(seed)
    x <- sample_target(tg, 5000)
    c(plain = share(ksdt(x, tg, size = 100, candidates = 5, progress = FALSE)),
      reg = share(ksdt(x, tg, size = 100, candidates = 5, regularize = TRUE,
                       progress = FALSE)))
  })
  # measured: plain 0.79-0.85 (mean 0.82), regularised 0.86-0.94 (mean
  # 0.91): KSDT's candidate rule keeps the heavy mode near its weight, and
  # the entropic term, which pulls towards high density, over-weights it
  expect_lt(abs(mean(frac["plain", ]) - 0.8), 0.06)
  expect_gt(mean(frac["reg", ]), mean(frac["plain", ]))
})
