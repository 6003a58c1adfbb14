# Stein Points (R/steinpoints.R, kb_stein_cross_sums in src/stein.c):
# every chosen point checked against a brute-force minimisation of the
# criterion written in plain R from the formulas, with the independent
# Stein kernel of helper-reference.R (ref_stein_cross); quality against
# i.i.d. draws; optimisers, truncation, reproducibility and the kb_thin
# methods.

sp_mix <- function() gaussian_mixture_target(rbind(c(-1.5, 0), c(1.5, 0)))

# The target's score written out (the mixture's closure is R code of the
# package, not C).
sp_score <- function(target, x) target$score(x)

# Criterion values of candidates y at step j (points X[1..j-1] with scores
# S) from the reference Stein kernel, IMQ(c, beta) with preconditioner L.
ref_sp_criterion <- function(y, sy, X, S, j, method, c = 1, beta = -0.5,
                             L = diag(ncol(y))) {
  kd <- vapply(seq_len(nrow(y)), function(i) {
    ref_stein_pair(y[i, ], y[i, ], sy[i, ], sy[i, ], "imq", c, beta, L)
  }, 0)
  ks <- if (j > 1L) {
    rowSums(ref_stein_cross(y, sy, X[seq_len(j - 1L), , drop = FALSE],
                            S[seq_len(j - 1L), , drop = FALSE], "imq", c,
                            beta, L))
  } else 0
  if (method == "greedy") kd + 2 * ks else if (j == 1L) kd else ks
}

test_that("100 Stein points have a smaller KSD than 100 i.i.d. draws", {
  mix <- sp_mix()
  res <- vapply(1:10, function(seed) {
    set.seed(seed)
    sp <- stein_points(mix, 100, progress = FALSE)
    iid <- sample_target(mix, 100)
    # the same kernel (IMQ, L = I, no standardisation) for both
    c(sp = ksd(sp), iid = ksd(iid, mix, kernel = imq_kernel()))
  }, numeric(2))
  # measured: Stein points 0.056-0.060, i.i.d. 0.16-0.26 (10 seeds)
  expect_gte(sum(res["sp", ] < res["iid", ]), 8L)
  expect_lt(max(res["sp", ]), 0.1)
})

test_that("each chosen point minimises the criterion over its candidates (brute force)", {
  mix <- sp_mix()
  for (method in c("greedy", "herding")) {
    set.seed(11)
    sp <- stein_points(mix, 12, method = method, progress = FALSE,
                       control = list(n_candidates = 40,
                                      keep_candidates = TRUE))
    X <- unname(sp$points)
    S <- sp_score(mix, X)
    expect_equal(unname(sp$score), S, tolerance = 1e-12)
    for (j in seq_len(12)) {
      y <- sp$candidates[[j]]$x
      crit <- ref_sp_criterion(y, sp_score(mix, y), X, S, j, method)
      expect_equal(sp$candidates[[j]]$criterion, crit, tolerance = 1e-10,
                   label = sprintf("%s, step %d", method, j))
      expect_identical(X[j, ], y[which.min(crit), ],
                       label = sprintf("%s, step %d", method, j))
      expect_equal(sp$criterion[j], min(crit), tolerance = 1e-10)
    }
    # the KSD path of the points from the reference Stein kernel matrix
    K <- ref_stein_matrix(X, S)
    expect_equal(sp$ksd, ref_ksd_path(K), tolerance = 1e-10)
    expect_equal(ksd(sp), sp$ksd[12], tolerance = 1e-10)
  }
})

test_that("greedy and herding differ only by the k_p(x, x) term after step 1", {
  mix <- sp_mix()
  set.seed(3)
  g <- stein_points(mix, 10, progress = FALSE,
                    control = list(keep_candidates = TRUE))
  set.seed(3)
  h <- stein_points(mix, 10, method = "herding", progress = FALSE,
                    control = list(keep_candidates = TRUE))
  # step 1: both minimise k_p(x, x) over the same candidates
  expect_identical(g$points[1, ], h$points[1, ])
  expect_identical(g$candidates[[1]]$criterion, h$candidates[[1]]$criterion)
  # step 2 (same point 1, same random numbers): greedy adds k_p(y, y)
  y <- g$candidates[[2]]$x
  expect_identical(y, h$candidates[[2]]$x)
  sy <- sp_score(mix, y)
  kd <- vapply(seq_len(nrow(y)), function(i) {
    ref_stein_pair(y[i, ], y[i, ], sy[i, ], sy[i, ], "imq", 1, -0.5, diag(2))
  }, 0)
  expect_equal(g$candidates[[2]]$criterion,
               kd + 2 * h$candidates[[2]]$criterion, tolerance = 1e-10)
  expect_identical(g$criterion_type, "greedy")
  expect_identical(h$criterion_type, "herding")
  # herding's path is the KSD of its points too
  expect_equal(ksd(h), h$ksd[10], tolerance = 1e-10)
})

test_that("a full preconditioner and the Gaussian kernel enter the criterion as in the reference", {
  mix <- sp_mix()
  L <- solve(matrix(c(1.5, 0.4, 0.4, 0.8), 2))
  set.seed(4)
  sp <- stein_points(mix, 6, kernel = imq_kernel(c = 2, beta = -0.7,
                                                 precon = L),
                     progress = FALSE,
                     control = list(n_candidates = 30, keep_candidates = TRUE))
  X <- unname(sp$points)
  S <- sp_score(mix, X)
  for (j in 1:6) {
    y <- sp$candidates[[j]]$x
    crit <- ref_sp_criterion(y, sp_score(mix, y), X, S, j, "greedy", c = 2,
                             beta = -0.7, L = L)
    expect_equal(sp$candidates[[j]]$criterion, crit, tolerance = 1e-9)
  }
  expect_equal(ksd(sp), sp$ksd[6], tolerance = 1e-10)
  set.seed(4)
  gk <- stein_points(mix, 5, kernel = gaussian_kernel(bandwidth = 1.3),
                     progress = FALSE)
  G <- ref_stein_cross(unname(gk$points), sp_score(mix, unname(gk$points)),
                       type = "gaussian", L = diag(2) / 1.3^2)
  expect_equal(gk$ksd, ref_ksd_path(G), tolerance = 1e-10)
})

test_that("the grid optimiser takes the brute-force minimiser over the whole grid (d = 1, 2)", {
  # every step of a grid run against the criterion over the whole grid
  # (rows of `grid` in expand.grid() order), and the run's KSD path
  check_grid <- function(sp, target, grid, method) {
    sg <- sp_score(target, grid)
    X <- unname(sp$points)
    S <- sp_score(target, X)
    for (j in seq_len(nrow(X))) {
      crit <- ref_sp_criterion(grid, sg, X, S, j, method)
      expect_equal(X[j, ], grid[which.min(crit), ],
                   label = sprintf("d = %d, step %d", ncol(X), j))
      expect_equal(sp$criterion[j], min(crit), tolerance = 1e-10)
    }
    expect_equal(sp$ksd, ref_ksd_path(ref_stein_matrix(X, S)),
                 tolerance = 1e-10)
  }
  g1 <- gaussian_target(0.5, 2)
  sp <- stein_points(g1, 15, optimizer = "grid", progress = FALSE,
                     control = list(grid_size = 61, lower = -4, upper = 5))
  check_grid(sp, g1, matrix(seq(-4, 5, length.out = 61), ncol = 1), "greedy")
  expect_identical(sp$n_eval, c(61L, integer(14)))
  # an asymmetric mixture: no ties between mirror-image grid points
  mix <- gaussian_mixture_target(rbind(c(-1.5, 0.3), c(1.5, -0.2)),
                                 weights = c(0.3, 0.7))
  sp2 <- stein_points(mix, 10, method = "herding", optimizer = "grid",
                      progress = FALSE,
                      control = list(grid_size = 21, lower = c(-4, -3),
                                     upper = c(4, 3)))
  grid2 <- as.matrix(expand.grid(seq(-4, 4, length.out = 21),
                                 seq(-3, 3, length.out = 21)))
  check_grid(sp2, mix, unname(grid2), "herding")
})

test_that("Nelder-Mead improves on the best Monte Carlo candidate", {
  mix <- sp_mix()
  set.seed(5)
  nm <- stein_points(mix, 25, optimizer = "nm", progress = FALSE)
  expect_true(all(nm$criterion <= nm$criterion_start))
  # strictly better at most steps
  expect_gt(mean(nm$criterion < nm$criterion_start - 1e-8), 0.8)
  expect_true(all(nm$n_eval > 100L))
  # its chosen values are the criterion at its points (reference kernel)
  X <- unname(nm$points)
  S <- sp_score(mix, X)
  for (j in c(1, 2, 10, 25)) {
    crit <- ref_sp_criterion(X[j, , drop = FALSE], S[j, , drop = FALSE], X,
                             S, j, "greedy")
    expect_equal(nm$criterion[j], crit, tolerance = 1e-10)
  }
  # against "mc" with the same random numbers: the same candidates at step
  # 1, then a lower criterion there
  set.seed(5)
  mc <- stein_points(mix, 1, progress = FALSE)
  expect_equal(nm$criterion_start[1], mc$criterion[1])
  expect_lt(nm$criterion[1], mc$criterion[1])
  # one dimension: no warning from optim()
  expect_no_warning(stein_points(gaussian_target(0), 5, optimizer = "nm",
                                 progress = FALSE))
})

test_that("truncation keeps every point j >= 2 within k_p(x, x) <= R_j^2", {
  mix <- sp_mix()
  for (rule in c("lower", "upper")) {
    set.seed(6)
    sp <- stein_points(mix, 30, truncation = rule, c2 = 0.3,
                       progress = FALSE,
                       control = list(keep_candidates = TRUE))
    r2 <- 2 * log(if (rule == "lower") 1:30 else rep(30, 30)) / 0.3
    expect_equal(sp$radius2, r2)
    S <- sp_score(mix, unname(sp$points))
    kd <- rowSums(S^2) + 2        # IMQ(1, -1/2), L = I: |s|^2 + d
    expect_true(all(kd[-1] <= r2[-1]))
    for (j in 2:30) {
      y <- sp$candidates[[j]]$x
      sy <- sp_score(mix, y)
      out <- rowSums(sy^2) + 2 > r2[j]
      expect_true(all(is.infinite(sp$candidates[[j]]$criterion[out])))
      expect_true(all(is.finite(sp$candidates[[j]]$criterion[!out])))
    }
    expect_output(print(sp), "truncation")
  }
  # the grid and Nelder-Mead honour it too
  sg <- stein_points(mix, 10, optimizer = "grid", truncation = "lower",
                     c2 = 0.3, progress = FALSE)
  Sg <- sp_score(mix, unname(sg$points))
  expect_true(all((rowSums(Sg^2) + 2)[-1] <= 2 * log(2:10) / 0.3))
  set.seed(7)
  sn <- stein_points(mix, 10, optimizer = "nm", truncation = "lower",
                     c2 = 0.3, progress = FALSE)
  Sn <- sp_score(mix, unname(sn$points))
  expect_true(all((rowSums(Sn^2) + 2)[-1] <= 2 * log(2:10) / 0.3 + 1e-12))
  # nothing feasible: a state error naming the remedy
  set.seed(6)
  expect_error(stein_points(mix, 5, truncation = "lower", c2 = 100,
                            progress = FALSE),
               class = "kb_error_state", regexp = "c2")
})

test_that("set.seed() reproduces a run; threads do not change it", {
  mix <- sp_mix()
  for (opt in c("mc", "nm")) {
    set.seed(8)
    a <- stein_points(mix, 15, optimizer = opt, progress = FALSE)
    set.seed(8)
    b <- stein_points(mix, 15, optimizer = opt, progress = FALSE,
                      nthreads = 2)
    expect_identical(a$points, b$points)
    expect_identical(a$ksd, b$ksd)
    set.seed(9)
    c <- stein_points(mix, 15, optimizer = opt, progress = FALSE)
    expect_false(identical(a$points, c$points))
  }
  # the random numbers are R's: the same candidates from the documented
  # proposal, written out here (step 1: N(mu0, cov0))
  set.seed(10)
  sp <- stein_points(mix, 2, progress = FALSE,
                     control = list(n_candidates = 7, mu0 = c(1, 2),
                                    cov0 = c(4, 9), keep_candidates = TRUE))
  set.seed(10)
  z <- matrix(rnorm(14), 7, 2) %*% diag(c(2, 3))
  expect_equal(sp$candidates[[1]]$x, sweep(z, 2L, c(1, 2), "+"))
  # step 2: alpha_2 decides between the two proposals with one uniform
  u <- runif(1)
  alpha2 <- 1 - plogis(8 * (2 * 1 / 1 - 1))
  if (u <= alpha2) {
    z2 <- matrix(rnorm(14), 7, 2) %*% diag(c(2, 3))
    expect_equal(sp$candidates[[2]]$x, sweep(z2, 2L, c(1, 2), "+"))
  } else {
    i <- sample.int(1L, 7, replace = TRUE)
    y2 <- sp$points[i, , drop = FALSE] + sqrt(0.5) * matrix(rnorm(14), 7, 2)
    expect_equal(unname(sp$candidates[[2]]$x), unname(y2))
  }
})

test_that("the result works with the kb_thin methods and conversions", {
  mix <- sp_mix()
  set.seed(12)
  sp <- stein_points(mix, 20, progress = FALSE)
  expect_s3_class(sp, c("kb_stein_points", "kb_thin"))
  expect_identical(dim(sp$points), c(20L, 2L))
  expect_identical(sp$index, 1:20)
  expect_equal(sum(sp$n_eval), 2000)
  expect_output(print(sp), "Stein Points \\(greedy, Monte Carlo\\): 20 points")
  expect_output(print(summary(sp)), "KSD of the first j points")
  pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(sp), sp)
  df <- as.data.frame(sp)
  expect_identical(nrow(df), 20L)
  expect_equal(unname(as.matrix(df[, 1:2])), unname(sp$points))
  cmp <- ksd(sp, reference = sample_target(mix, 50), score = mix)
  expect_s3_class(cmp, "kb_ksd_compare")
  expect_equal(unname(as.double(cmp)[1]), sp$ksd[20], tolerance = 1e-10)
  if (requireNamespace("posterior", quietly = TRUE)) {
    dr <- posterior::as_draws_df(sp)
    expect_identical(posterior::ndraws(dr), 20L)
  }
  # a one-dimensional target and a single point
  one <- stein_points(gaussian_target(0), 1, progress = FALSE)
  expect_identical(dim(one$points), c(1L, 1L))
  expect_equal(one$ksd, sqrt(one$score[1]^2 + 1))
})

test_that("progress is reported on stderr when asked for", {
  mix <- sp_mix()
  set.seed(13)
  msgs <- capture_messages(stein_points(mix, 5, progress = TRUE))
  expect_true(any(grepl("Stein Points: 5 of 5", msgs, fixed = TRUE)))
  expect_silent(stein_points(mix, 5, progress = FALSE))
})

test_that("bad input is refused naming the argument before the score runs", {
  calls <- 0
  tg <- kb_target(function(x) -sum(x^2) / 2,
                  function(x) { calls <<- calls + 1; -x }, dim = 2)
  bad <- list(
    target = quote(stein_points(list(), 5)),
    m = quote(stein_points(tg, 0)),
    m = quote(stein_points(tg)),
    method = quote(stein_points(tg, 5, method = "fw")),
    optimizer = quote(stein_points(tg, 5, optimizer = "pso")),
    optimizer = quote(stein_points(gaussian_target(rep(0, 4)), 5,
                                   optimizer = "grid")),
    kernel = quote(stein_points(tg, 5, kernel = imq_kernel(precon = "med"))),
    kernel = quote(stein_points(tg, 5, kernel = "imq")),
    kernel = quote(stein_points(tg, 5, kernel = imq_kernel(precon = diag(3)))),
    control = quote(stein_points(tg, 5, control = list(5))),
    control = quote(stein_points(tg, 5, control = list(ncand = 5))),
    `control$n_candidates` = quote(stein_points(tg, 5, control = list(n_candidates = 0))),
    `control$mu0` = quote(stein_points(tg, 5, control = list(mu0 = 1:3))),
    `control$cov0` = quote(stein_points(tg, 5, control = list(cov0 = -1))),
    `control$lambda` = quote(stein_points(tg, 5, control = list(lambda = 0))),
    `control$alpha` = quote(stein_points(tg, 5, control = list(alpha = 2))),
    `control$alpha` = quote(stein_points(tg, 5, control = list(alpha = function(j, n) NA))),
    `control$n_starts` = quote(stein_points(tg, 5, optimizer = "nm",
                                            control = list(n_candidates = 5, n_starts = 6))),
    `control$upper` = quote(stein_points(tg, 5, optimizer = "grid",
                                         control = list(lower = 1, upper = 0))),
    `control$grid_size` = quote(stein_points(tg, 5, optimizer = "grid",
                                             control = list(grid_size = 1))),
    `control$keep_candidates` = quote(stein_points(tg, 5, control = list(keep_candidates = NA))),
    truncation = quote(stein_points(tg, 5, truncation = "soft")),
    c2 = quote(stein_points(tg, 5, truncation = "lower")),
    c2 = quote(stein_points(tg, 5, truncation = "lower", c2 = -1)),
    c2 = quote(stein_points(tg, 5, c2 = 1)),
    nthreads = quote(stein_points(tg, 5, nthreads = 0)),
    progress = quote(stein_points(tg, 5, progress = NA)))
  for (i in seq_along(bad)) {
    calls <- 0
    arg <- names(bad)[i]
    expect_error(eval(bad[[i]]), class = "kb_error_arg",
                 regexp = paste0("'", arg, "'"), fixed = TRUE,
                 label = deparse(bad[[i]]))
    expect_identical(calls, 0, label = paste("score calls before the error on", arg))
  }
})
