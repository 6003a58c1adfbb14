# wasserstein2() and the assignment solver behind it (src/assign.c): against
# brute force over all permutations, the sorted matching in one dimension,
# invariances, and errors.

# All permutations of 1..n, one per row (n! rows).
brute_perms <- function(n) {
  if (n == 1L) return(matrix(1L, 1L, 1L))
  p <- brute_perms(n - 1L)
  do.call(rbind, lapply(seq_len(n), function(k) {
    cbind(k, matrix(setdiff(seq_len(n), k)[p], nrow(p)))
  }))
}

# Smallest total cost sum_i C[i, perm_i] over all permutations.
brute_assign <- function(C) {
  n <- nrow(C)
  P <- brute_perms(n)
  tot <- rowSums(matrix(C[cbind(rep(seq_len(n), each = nrow(P)), as.vector(P))],
                        nrow(P)))
  list(cost = min(tot), perm = P[which.min(tot), ])
}

sq_cost <- function(x, y) {
  x <- as.matrix(x)
  y <- as.matrix(y)
  D <- matrix(0, nrow(x), nrow(y))
  for (k in seq_len(ncol(x))) D <- D + outer(x[, k], y[, k], "-")^2
  D
}

assign_cost <- function(C, perm) sum(C[cbind(seq_len(nrow(C)), perm)])

test_that("wasserstein2() equals brute force over all permutations (n <= 7, d = 1, 2)", {
  set.seed(800)
  for (n in 1:7) {
    for (d in 1:2) {
      for (rep in 1:3) {
        x <- matrix(rnorm(n * d), n, d)
        y <- matrix(rnorm(n * d, mean = 0.5, sd = 1.5), n, d)
        bf <- brute_assign(sq_cost(x, y))
        w <- wasserstein2(x, y)
        lab <- sprintf("n = %d, d = %d, case %d", n, d, rep)
        expect_equal(as.numeric(w), sqrt(bf$cost / n), tolerance = 1e-12,
                     label = lab)
        perm <- attr(w, "assignment")
        expect_type(perm, "integer")
        expect_setequal(perm, seq_len(n))
        # continuous data: the optimal permutation is unique
        expect_identical(perm, as.integer(bf$perm), label = lab)
      }
    }
  }
})

test_that("the assignment solver is optimal on general cost matrices, with ties and negative costs", {
  set.seed(801)
  for (n in 2:7) {
    for (rep in 1:4) {
      C <- switch(rep,
        matrix(runif(n * n), n),
        matrix(as.double(sample(0:3, n * n, replace = TRUE)), n),  # ties
        matrix(rnorm(n * n, sd = 100), n),               # negative costs
        matrix(1, n, n))                                 # all equal
      perm <- .Call(kernbayes:::C_kb_assign, C)
      expect_setequal(perm, seq_len(n))
      expect_equal(assign_cost(C, perm), brute_assign(C)$cost,
                   tolerance = 1e-12, label = sprintf("n = %d, case %d", n, rep))
    }
  }
  # a known optimum: an anti-diagonal of zeros in a matrix of ones
  C <- 1 - diag(6)[, 6:1]
  expect_identical(.Call(kernbayes:::C_kb_assign, C), 6:1)
  expect_identical(.Call(kernbayes:::C_kb_assign, matrix(0, 0, 0)), integer(0))
})

test_that("no swap of two pairs improves a large assignment (n = 300, d = 2)", {
  set.seed(802)
  n <- 300
  x <- matrix(rnorm(2 * n), n)
  y <- cbind(runif(n, -2, 2), rexp(n))
  w <- wasserstein2(x, y)
  p <- attr(w, "assignment")
  C <- sq_cost(x, y)
  cur <- C[cbind(seq_len(n), p)]
  # gain of swapping the partners of i and j: C[i, p_j] + C[j, p_i] - cur_i - cur_j
  A <- C[, p]
  gain <- A + t(A) - outer(cur, cur, "+")
  expect_gte(min(gain), -1e-10)
  expect_equal(as.numeric(w)^2, mean(cur), tolerance = 1e-12)
})

test_that("in one dimension wasserstein2() is the sorted matching (n = 200)", {
  set.seed(803)
  for (rep in 1:3) {
    a <- rnorm(200)
    b <- c(rexp(100), runif(100, -3, 0))
    w <- wasserstein2(a, b)
    expect_equal(as.numeric(w), sqrt(mean((sort(a) - sort(b))^2)),
                 tolerance = 1e-12)
    # the assignment pairs ranks
    p <- attr(w, "assignment")
    expect_identical(rank(b)[p], rank(a))
  }
})

test_that("wasserstein2() is a metric-like, invariant quantity", {
  set.seed(804)
  n <- 60
  x <- matrix(rnorm(3 * n), n)
  y <- matrix(rnorm(3 * n, sd = 2), n) + 1
  w <- as.numeric(wasserstein2(x, y))
  # identical sets: zero, with the identity matching
  w0 <- wasserstein2(x, x)
  expect_equal(as.numeric(w0), 0)
  expect_identical(attr(w0, "assignment"), seq_len(n))
  # symmetry, and the two assignments are inverse permutations
  wyx <- wasserstein2(y, x)
  expect_equal(as.numeric(wyx), w, tolerance = 1e-12)
  expect_identical(attr(wyx, "assignment")[attr(wasserstein2(x, y), "assignment")],
                   seq_len(n))
  # order of the points does not matter
  expect_equal(as.numeric(wasserstein2(x[sample(n), ], y[sample(n), ])), w,
               tolerance = 1e-12)
  # a common translation and rotation leave it unchanged; scaling scales it
  Q <- qr.Q(qr(matrix(rnorm(9), 3)))
  shift <- c(5, -3, 100)
  expect_equal(as.numeric(wasserstein2(sweep(x %*% Q, 2, shift, "+"),
                                       sweep(y %*% Q, 2, shift, "+"))),
               w, tolerance = 1e-10)
  expect_equal(as.numeric(wasserstein2(3 * x, 3 * y)), 3 * w, tolerance = 1e-12)
  # a pure translation of a set moves it by exactly |c|
  cc <- c(0.3, -1, 2)
  expect_equal(as.numeric(wasserstein2(x, sweep(x, 2, cc, "+"))), sqrt(sum(cc^2)),
               tolerance = 1e-12)
  # triangle inequality
  z <- matrix(runif(3 * n), n)
  expect_lte(w, as.numeric(wasserstein2(x, z)) + as.numeric(wasserstein2(z, y)) +
               1e-12)
  # high-dimensional path (Gram-matrix distances) agrees with brute force
  xh <- matrix(rnorm(6 * 12), 6)
  yh <- matrix(rnorm(6 * 12), 6)
  expect_equal(as.numeric(wasserstein2(xh, yh)),
               sqrt(brute_assign(sq_cost(xh, yh))$cost / 6), tolerance = 1e-12)
})

test_that("wasserstein2() accepts kb_particles objects and data frames", {
  set.seed(805)
  y <- matrix(rnorm(40), 20)
  fit <- mmd_flow(matrix(rnorm(40, 2), 20), y, n_iter = 5, progress = FALSE)
  expect_equal(as.numeric(wasserstein2(fit, y)),
               as.numeric(wasserstein2(fit$x, y)))
  expect_equal(as.numeric(wasserstein2(y, fit)),
               as.numeric(wasserstein2(y, fit$x)))
  expect_equal(as.numeric(wasserstein2(as.data.frame(y), fit$x)),
               as.numeric(wasserstein2(y, fit$x)))
})

test_that("wasserstein2() rejects bad input, naming the argument", {
  x <- matrix(rnorm(20), 10)
  expect_error(wasserstein2(x, matrix(rnorm(18), 9)), "'y' must have as many points")
  expect_error(wasserstein2(x, matrix(rnorm(30), 10)), "'y' must have 2 columns")
  xna <- x
  xna[3, 2] <- NA
  expect_error(wasserstein2(xna, x), "'x' must not contain NA")
  expect_error(wasserstein2(x, xna), "'y' must not contain NA")
  expect_error(wasserstein2(x, x + Inf), "'y' must not contain")
  expect_error(wasserstein2("a", x), "'x' must be a numeric matrix")
  expect_error(wasserstein2(x, list(1, 2)), "'y' must be a numeric matrix")
  expect_error(wasserstein2(x, matrix(numeric(0), 0, 2)), "'y' must have at least one row")
  expect_error(wasserstein2("a", x), class = "kb_error_arg")
  expect_error(wasserstein2(x, x[-1, ]), class = "kb_error_arg")
  # the C entry re-checks what it relies on
  expect_error(.Call(kernbayes:::C_kb_assign, matrix(1:4, 2)), "numeric matrix")
  expect_error(.Call(kernbayes:::C_kb_assign, matrix(0, 2, 3)), "square")
  expect_error(.Call(kernbayes:::C_kb_assign, matrix(c(0, NA, 1, 2), 2)),
               "not all finite", class = "kb_error_numeric")
})

test_that("wasserstein2() is exact at any scale (1e300 does not overflow, 1e-300 does not give 0)", {
  set.seed(3)
  x <- matrix(rnorm(20), 10)
  y <- matrix(rnorm(20, 1), 10)
  w <- wasserstein2(x, y)
  for (a in c(1e300, 1e200, 1e-300, 1e-310)) {
    wa <- wasserstein2(x * a, y * a)
    expect_equal(as.numeric(wa) / a, as.numeric(w), tolerance = 1e-12)
    expect_identical(attr(wa, "assignment"), attr(w, "assignment"))
  }
  # opposite signs near the largest double: the differences overflow
  expect_equal(as.numeric(wasserstein2(x * 1e200, -x * 1e200)) / 1e200,
               as.numeric(wasserstein2(x, -x)), tolerance = 1e-12)
  # points 1e300 apart and points 1 apart in the same sets
  w <- wasserstein2(rbind(c(0, 0), c(1e300, 0)), rbind(c(1e300, 0), c(1, 0)))
  expect_equal(as.numeric(w), sqrt(0.5))
  expect_identical(attr(w, "assignment"), c(2L, 1L))
  # identical sets at a tiny scale
  expect_equal(as.numeric(wasserstein2(x * 1e-320, x * 1e-320)), 0)
  expect_equal(as.numeric(wasserstein2(matrix(0, 3, 2), matrix(0, 3, 2))), 0)
  # a distance beyond the largest double is a numeric error, not Inf
  expect_error(wasserstein2(c(-1.7e308, 1.7e308), c(1.7e308, 1.7e308)),
               "overflows", class = "kb_error_numeric")
})
