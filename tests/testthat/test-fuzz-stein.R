# Robustness and correctness audit of the Stein discrepancy and thinning
# API: sizes around the vector lanes (8, 4, 2, 1 points) and blocks (256),
# degenerate samples, extreme scales, bad input.  Every number is checked
# against a plain-R transcription of the formulas of DESIGN.md written for
# this file (fz_*: no helper shared with the C code or other test files).

# ---- plain-R reference -------------------------------------------------------

# phi, phi', phi'' at r (DESIGN.md, "Base kernels")
fz_phi <- function(type, r, c = 1, beta = -0.5) {
  if (type == "imq") {
    t <- c + r
    list(p0 = t^beta, p1 = beta * t^(beta - 1),
         p2 = beta * (beta - 1) * t^(beta - 2))
  } else {
    e <- exp(-r / 2)
    list(p0 = e, p1 = -e / 2, p2 = e / 4)
  }
}

# The n x n Stein kernel matrix k_p(x_i, x_j) for a full matrix L
# (DESIGN.md, "Stein kernel"); with abs = TRUE the sum of the absolute
# values of its terms, the scale its rounding errors live on.
fz_stein <- function(x, s, L, type = "imq", c = 1, beta = -0.5,
                     abs = FALSE) {
  n <- nrow(x)
  XL <- x %*% L
  SS <- tcrossprod(s)
  r <- a <- b <- aa <- matrix(0, n, n)
  for (k in seq_len(ncol(x))) {
    U <- outer(x[, k], x[, k], "-")
    LU <- outer(XL[, k], XL[, k], "-")
    V <- outer(s[, k], s[, k], function(si, sj) sj - si)
    r <- r + U * LU
    a <- a + LU * V
    b <- b + LU * LU
    aa <- aa + base::abs(LU) * outer(base::abs(s[, k]), base::abs(s[, k]), "+")
  }
  p <- fz_phi(type, r, c, beta)
  trL <- sum(diag(L))
  if (abs) {
    return(2 * base::abs(SS * p$p0) + 2 * base::abs(p$p1) * aa +
             4 * base::abs(p$p2) * b + 2 * base::abs(p$p1) * trL)
  }
  SS * p$p0 + 2 * p$p1 * a - 4 * p$p2 * b - 2 * p$p1 * trL
}

# the largest error of K against the reference, relative to the scale
fz_err <- function(K, x, s, L, type = "imq", c = 1, beta = -0.5) {
  R <- fz_stein(x, s, L, type, c, beta)
  S <- fz_stein(x, s, L, type, c, beta, abs = TRUE)
  max(ifelse(S == 0, abs(K - R), abs(K - R) / S))
}

# ---- the preconditioner's eigenvalues far from 1 -----------------------------

test_that("a non-isotropic L with eigenvalues beyond 1e-154 or 1e154 gives the right Stein kernel", {
  # u'L^2u was summed as lambda_k^2 u_k^2: lambda_k^2 underflowed (a KSD
  # 38% off at eigenvalues 1e-200, silently) or overflowed (a spurious
  # overflow error at 1e154).  Scaling x by a, the scores by 1/a and L by
  # 1/a^2 divides every term of k_p by a^2, so the KSD by a.
  set.seed(1101)
  for (d in c(2, 5, 17)) {   # the generic loop and the vector ones
    x <- matrix(rnorm(30 * d), 30, d)
    s <- -x
    L <- diag(seq(1, 2, length.out = d))
    k1 <- ksd(x, s, imq_kernel(precon = L), progress = FALSE, standardize = FALSE)
    for (a in c(1e100, 1e120, 1e-78, 1e-100)) {
      for (kern in list(imq_kernel(precon = L / a^2),
                        imq_kernel(beta = -0.3, precon = L / a^2),
                        gaussian_kernel(precon = L / a^2))) {
        xa <- x * a
        sa <- s / a
        K <- stein_kernel_matrix(xa, sa, kern, standardize = FALSE)
        type <- kern$type
        cc <- if (type == "imq") kern$c else 1
        bb <- if (type == "imq") kern$beta else -0.5
        expect_lt(fz_err(K, xa, sa, L / a^2, type, cc, bb), 1e-12)
      }
      expect_equal(ksd(xa, sa, imq_kernel(precon = L / a^2),
                       progress = FALSE, standardize = FALSE) * a, k1, tolerance = 1e-12)
      # the sample's own covariance, on the scale of the data
      expect_equal(ksd(x * a, s / a, imq_kernel(precon = "smpcov"),
                       progress = FALSE, standardize = FALSE) * a,
                   ksd(x, s, imq_kernel(precon = "smpcov"), progress = FALSE, standardize = FALSE),
                   tolerance = 1e-12)
    }
    th <- stein_thin(x * 1e100, s / 1e100, 5, imq_kernel(precon = L / 1e200),
                     standardize = FALSE)
    expect_identical(th$index, stein_thin(x, s, 5, imq_kernel(precon = L),
                                          standardize = FALSE)$index)
  }
})

# ---- more reference ----------------------------------------------------------

fz_std <- function(x, s) {
  scl <- apply(x, 2, function(v) mean(abs(v - mean(v))))
  list(x = sweep(x, 2, scl, "/"), s = sweep(s, 2, scl, "*"))
}

# L of a preconditioner choice on (standardised) points (DESIGN.md)
fz_L <- function(precon, x) {
  d <- ncol(x)
  n <- nrow(x)
  if (is.matrix(precon)) return(precon)
  if (is.numeric(precon)) return(diag(1 / precon, d))
  med <- function() stats::median(as.vector(stats::dist(x)))
  switch(precon, id = diag(d), med = diag(1 / med()^2, d),
         sclmed = diag(log(min(1000, n)) / med()^2, d),
         smpcov = solve(stats::cov(x)))
}

fz_ksd <- function(K, w = NULL) {
  if (is.null(w)) return(sqrt(max(sum(K) / nrow(K)^2, 0)))
  w <- w / sum(w)
  sqrt(max(drop(t(w) %*% K %*% w), 0))
}

# the KSD of the first j of the points idx (repeats allowed), every j
fz_path <- function(K, idx) {
  Ks <- K[idx, idx, drop = FALSE]
  Ks[upper.tri(Ks)] <- 0
  sqrt(pmax(cumsum(2 * rowSums(Ks) - diag(Ks)), 0)) / seq_along(idx)
}

fz_ksd_u <- function(K) {
  n <- nrow(K)
  (sum(K) - sum(diag(K))) / (n * (n - 1))
}

# greedy selection (DESIGN.md, "Greedy Stein thinning"): obj_i plus
# `extra` minus `lin_coef` j lin_i at step j; first index on ties
fz_greedy <- function(K, m, unique = FALSE, extra = 0, lin = 0,
                      lin_coef = 0) {
  obj <- diag(K) + extra
  idx <- integer(m)
  taken <- rep(FALSE, nrow(K))
  for (j in seq_len(m)) {
    v <- obj - lin_coef * j * lin
    if (unique) v[taken] <- Inf
    i <- which(v == min(v))[1L]
    idx[j] <- i
    taken[i] <- TRUE
    obj <- obj + 2 * K[, i]
  }
  idx
}

# KSDT (DESIGN.md): add, then remove the point whose removal gives the
# smallest KSD^2 (the oldest on ties) while that is <= K0 + eps and
# n - 1 >= f(t).  With candidates > 1, each block offers its row
# minimising k_p(c, c) + 2 sum_D k_p(c, x_j).
fz_ksdt <- function(K, fmin, eps = 0, cand = 1) {
  D <- integer(0)
  blocks <- split(seq_len(nrow(K)), ceiling(seq_len(nrow(K)) / cand))
  ksd <- size <- numeric(length(blocks))
  for (t in seq_along(blocks)) {
    b <- blocks[[t]]
    crit <- diag(K)[b] + 2 * (if (length(D)) colSums(K[D, b, drop = FALSE]) else 0)
    D <- c(D, b[which(crit == min(crit))[1L]])
    K0 <- sum(K[D, D]) / length(D)^2
    repeat {
      n <- length(D)
      if (n < 2 || n - 1 < fmin(t)) break
      v <- (sum(K[D, D]) - 2 * rowSums(K[D, D, drop = FALSE]) + diag(K)[D]) /
        (n - 1)^2
      j <- which(v == min(v))
      j <- j[which.min(D[j])]
      if (v[j] <= K0 + eps) D <- D[-j] else break
    }
    ksd[t] <- sqrt(max(sum(K[D, D]), 0)) / length(D)
    size[t] <- length(D)
  }
  list(index = sort(D), ksd = ksd, size = size)
}

fz_kernels <- list(
  imq = function(p) imq_kernel(precon = p),
  imq2 = function(p) imq_kernel(c = 0.7, beta = -0.75, precon = p),
  gau = function(p) gaussian_kernel(precon = p))

fz_params <- function(k) {
  list(type = k$type, c = if (k$type == "imq") k$c else 1,
       beta = if (k$type == "imq") k$beta else -0.5)
}

# Checks inside the long loops are logged, and each test expects an empty
# log at its end: one testthat expectation per test instead of hundreds
# (their bookkeeping took most of this file's time).
fz_log <- new.env()
fz_log$bad <- character()
fz_fail <- function(what, label) {
  fz_log$bad <- c(fz_log$bad, paste(what, paste(label, collapse = " ")))
}
fz_identical <- function(object, expected, label = "") {
  if (!identical(object, expected)) fz_fail("not identical:", label)
}
fz_equal <- function(object, expected, tolerance = sqrt(.Machine$double.eps),
                     label = "") {
  ok <- all.equal(object, expected, tolerance = tolerance)
  if (!isTRUE(ok)) fz_fail(paste("not equal:", ok[1]), label)
}
fz_lt <- function(object, bound, label = "") {
  if (!isTRUE(object < bound)) fz_fail(paste(format(object), ">=", bound), label)
}
fz_gte <- function(object, bound, label = "") {
  if (!isTRUE(object >= bound)) fz_fail(paste(format(object), "<", bound), label)
}
fz_true <- function(object, label = "") {
  if (!isTRUE(object)) fz_fail("not TRUE:", label)
}
fz_error <- function(object, regexp = "", class = "error", label = "") {
  e <- tryCatch({
    object
    NULL
  }, error = function(e) e)
  if (is.null(e)) {
    fz_fail("no error:", label)
  } else if (!inherits(e, class) || !grepl(regexp, conditionMessage(e))) {
    fz_fail(paste0("wrong error (", class(e)[1], ": ", conditionMessage(e), "):"),
            label)
  }
}
fz_done <- function() {
  bad <- fz_log$bad
  fz_log$bad <- character()
  expect_identical(head(bad, 10), character())
}

# ---- Stein matrix, KSD and path at the lane and block edges ------------------

test_that("Stein matrix, KSD (V, U, weights with zeros) and path match the formulas at every lane edge, d 1-9 and 12", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1102)
  precs <- list("id", "med", "sclmed", "smpcov", 0.37, "mat")
  i <- 0
  for (n in c(1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33)) {
    for (d in c(1:9, 12)) {
      i <- i + 1
      # every kernel, preconditioner and standardisation in turn
      kn <- names(fz_kernels)[i %% 3 + 1]
      pr <- precs[[i %% 6 + 1]]
      std <- i %% 4 < 2 && n > 1
      if (n < 2 && !identical(pr, 0.37)) pr <- "id"
      if (identical(pr, "smpcov") && n <= d + 1) pr <- "med"
      if (identical(pr, "mat")) {
        A <- matrix(rnorm(d * d), d)
        pr <- crossprod(A) + diag(d)
      }
      x <- matrix(rnorm(n * d), n, d)
      s <- -x + matrix(rnorm(n * d, sd = 0.3), n, d)
      k <- fz_kernels[[kn]](pr)
      lab <- paste(n, d, kn, format(pr)[1], std)
      K <- stein_kernel_matrix(x, s, k, standardize = std, nthreads = 1)
      fz_identical(stein_kernel_matrix(x, s, k, standardize = std,
                                           nthreads = 2), K, label = lab)
      xs <- x
      ss <- s
      if (std) {
        z <- fz_std(x, s)
        xs <- z$x
        ss <- z$s
      }
      L <- fz_L(pr, xs)
      p <- fz_params(k)
      fz_lt(fz_err(K, xs, ss, L, p$type, p$c, p$beta), 1e-11, label = lab)
      R <- fz_stein(xs, ss, L, p$type, p$c, p$beta)
      w <- runif(n)
      if (n > 2) w[c(1, n)] <- 0
      fz_equal(ksd(x, s, k, standardize = std, nthreads = 2,
                       progress = FALSE), fz_ksd(R), tolerance = 1e-11,
                   label = lab)
      fz_equal(ksd(x, s, k, weights = w, standardize = std,
                       progress = FALSE), fz_ksd(R, w), tolerance = 1e-11,
                   label = lab)
      if (n > 1) {
        scale <- sum(fz_stein(xs, ss, L, p$type, p$c, p$beta, abs = TRUE)) / n^2
        fz_lt(abs(ksd(x, s, k, type = "U", standardize = std,
                          progress = FALSE) - fz_ksd_u(R)) / scale, 1e-11,
                  label = lab)
        # sum_{i != j} w_i w_j k_p / sum_{i != j} w_i w_j
        W <- outer(w, w)
        diag(W) <- 0
        if (n > 3) {
          fz_lt(abs(ksd(x, s, k, weights = w, type = "U", standardize = std,
                            progress = FALSE) - sum(W * R) / sum(W)) / scale,
                    1e-10, label = lab)
        }
      }
      path <- ksd_path(x, s, k, standardize = std)$ksd
      want <- vapply(seq_len(n), function(j) fz_ksd(R[1:j, 1:j, drop = FALSE]), 0)
      fz_equal(path, want, tolerance = 1e-11, label = lab)
    }
  }
  fz_done()
})

test_that("a Stein kernel value is the same in every vector lane (permuted rows)", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  # k_p(x, y) is computed from u = x - y and s_y - s_x, whose signs flip
  # together, so the pair gives the same bits wherever it falls: in the
  # 8-wide (AVX-512), 4-wide (AVX2) or scalar part of a block
  set.seed(1103)
  for (n in c(15, 31, 270)) {
    for (d in c(1, 2, 4, 7, 16, 17)) {
      x <- matrix(rnorm(n * d), n, d)
      s <- -x + 0.1 * rnorm(n * d)
      for (pr in list("id", diag(runif(d, 0.2, 3), d), "med")) {
        for (kn in names(fz_kernels)) {
          k <- fz_kernels[[kn]](pr)
          K <- stein_kernel_matrix(x, s, k)
          p <- sample(n)
          fz_identical(stein_kernel_matrix(x[p, , drop = FALSE],
                                               s[p, , drop = FALSE], k),
                           K[p, p], label = paste(n, d, kn))
        }
      }
    }
  }
  fz_done()
})

test_that("stein_thin() and mmd_thin() pick what the greedy rule picks, m in 1, 2, n - 1, n, 1 and 2 threads", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1104)
  for (n in c(1, 2, 3, 5, 8, 9, 16, 17, 33, 255, 256, 257, 513)) {
    d <- if (n > 100) 3 else n %% 5 + 1
    x <- matrix(rnorm(n * d), n, d)
    s <- -x + matrix(rnorm(n * d, sd = 0.3), n, d)
    k <- fz_kernels[[n %% 3 + 1]]("id")
    p <- fz_params(k)
    K <- fz_stein(x, s, diag(d), p$type, p$c, p$beta)
    G <- fz_phi(p$type, as.matrix(stats::dist(x))^2 / 1.7, p$c, p$beta)$p0
    kg <- k
    kg$precon <- 1.7
    for (m in unique(c(1, 2, max(1, n - 1), n))) {
      for (uq in c(FALSE, TRUE)) {
        if (uq && m > n) next
        lab <- paste(n, d, m, uq)
        th <- stein_thin(x, s, m, k, standardize = FALSE, unique = uq,
                         nthreads = 1, progress = FALSE)
        fz_identical(th$index, fz_greedy(K, m, uq), label = lab)
        fz_identical(stein_thin(x, s, m, k, standardize = FALSE,
                                    unique = uq, nthreads = 2,
                                    progress = FALSE)$index, th$index)
        fz_equal(th$ksd, fz_path(K, th$index), tolerance = 1e-10,
                     label = lab)
        # kernel herding: obj_i = k_ii + 2 sum_sel k - 2 j mean_l k(x_i, x_l)
        mt <- mmd_thin(x, m, kg, unique = uq, nthreads = 2, progress = FALSE, standardize = FALSE)
        fz_identical(mt$index, fz_greedy(G, m, uq, lin = rowMeans(G),
                                             lin_coef = 2), label = lab)
      }
    }
  }
  fz_done()
})

test_that("mmd_thin() on a subsample embedding: picks and MMD path as the formula says", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1111)
  for (n in c(3, 17, 300)) {
    x <- matrix(rnorm(n * 2), n, 2)
    G <- exp(-as.matrix(stats::dist(x))^2 / 0.8 / 2)
    m <- min(n, 9)
    for (es in unique(c(1, 2, 5, n))) {
      for (uq in c(TRUE, FALSE)) {
        th <- mmd_thin(x, m, gaussian_kernel(precon = 0.8), embed_size = es,
                       unique = uq, progress = FALSE, standardize = FALSE)
        rows <- if (n > es) floor(seq(0, n - 1, length.out = es)) + 1 else seq_len(n)
        mu <- rowMeans(G[, rows, drop = FALSE])
        idx <- fz_greedy(G, m, uq, lin = mu, lin_coef = 2)
        fz_identical(th$index, idx)
        mmd <- vapply(seq_len(m), function(j) {
          I <- idx[1:j]
          sqrt(max(mean(G[I, I]) - 2 * mean(G[I, rows]) + mean(G[rows, rows]), 0))
        }, 0)
        fz_lt(max(abs(th$mmd - mmd)), 1e-7)   # sqrt of a difference
      }
    }
  }
  fz_done()
})

test_that("regularised and gradient-free Stein thinning pick what their rules pick", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1105)
  for (n in c(2, 5, 17, 257)) {
    d <- 2
    x <- matrix(rnorm(n * d), n, d)
    s <- -1.3 * x
    K <- fz_stein(x, s, diag(d))
    lp <- -0.65 * rowSums(x^2)
    H <- matrix(runif(n * d, -1, 1), n, d)
    for (m in unique(c(1, n - 1, n))) {
      for (lam in list(TRUE, 0.3)) {
        th <- stein_thin(x, s, m, standardize = FALSE, regularize = lam,
                         log_density = lp, hessian_diag = H, nthreads = 2,
                         progress = FALSE)
        want <- fz_greedy(K, m, extra = rowSums(pmax(H, 0)), lin = lp,
                          lin_coef = if (isTRUE(lam)) 1 / m else lam)
        fz_identical(th$index, want)
      }
    }
    # k_q(x_i, x_j) exp(w_i + w_j), w = log q - log p shifted to min 0
    lq <- -rowSums(x^2) / 2
    lpp <- -rowSums((x - 0.3)^2) / 1.5
    w <- lq - lpp
    w <- w - min(w)
    Kq <- fz_stein(x, -x, diag(d)) * exp(outer(w, w, "+"))
    m <- min(n, 7)
    th <- stein_thin_gf(x, log_density = lpp, log_q = lq, score_q = -x, m = m,
                        standardize = FALSE, progress = FALSE)
    fz_identical(th$index, fz_greedy(Kq, m))
  }
  fz_done()
})

test_that("ksdt() follows DESIGN.md's rule (budgets, minimum sizes, candidates, dictionaries past 256); pushes and threads agree", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1106)
  cfgs <- list(list(args = list(), f = function(t) max(10, sqrt(t * log(t)))),
               list(args = list(size = 3), f = function(t) 3),
               list(args = list(budget = 0.05, min_size = "linear",
                                min_size_coef = 0.3, min_size_floor = 1),
                    f = function(t) max(1, 0.3 * t), eps = 0.05))
  for (n in c(1, 2, 5, 17, 64)) {
    for (d in c(1, 4, 12)) {
      x <- matrix(rnorm(n * d), n, d)
      x[1, ] <- x[1, ] + 3
      if (n > 4) x[seq(2, n, by = 3), ] <- x[1, ]   # repeats
      s <- -x
      K <- fz_stein(x, s, diag(d))
      for (cf in cfgs) {
        for (cand in c(1, 3)) {
          lab <- paste(n, d, cand, names(cf$args)[1])
          f1 <- do.call(ksdt, c(list(x = x, score = s, candidates = cand,
                                     progress = FALSE, standardize = FALSE),
                                cf$args))
          r <- fz_ksdt(K, cf$f, if (is.null(cf$eps)) 0 else cf$eps, cand)
          fz_equal(sort(f1$index), r$index, label = lab)
          fz_equal(f1$ksd, r$ksd, tolerance = 1e-10, label = lab)
          fz_equal(as.numeric(f1$size), r$size, label = lab)
          f2 <- do.call(ksdt, c(list(x = x, score = s, candidates = cand,
                                     nthreads = 2, progress = FALSE,
                                     standardize = FALSE), cf$args))
          fz_identical(f2$index, f1$index)
          fz_identical(f2$ksd, f1$ksd)
          if (cand == 1) {
            st <- do.call(ksdt_stream, c(list(dim = d, progress = FALSE,
                                              standardize = FALSE), cf$args))
            for (i in seq_len(n)) ksdt_push(st, x[i, ], s[i, ])
            fz_identical(ksdt_result(st)$index, f1$index)
            fz_identical(ksdt_result(st)$ksd, f1$ksd)
          }
        }
      }
    }
  }
  for (n in c(256, 257, 520)) {
    x <- matrix(rnorm(n * 2), n, 2)
    s <- -x
    f1 <- ksdt(x, s, size = n - 3, budget = 1e-4, progress = FALSE, standardize = FALSE)
    r <- fz_ksdt(fz_stein(x, s, diag(2)), function(t) n - 3, 1e-4)
    fz_equal(sort(f1$index), r$index)
    fz_equal(f1$ksd, r$ksd, tolerance = 1e-10)
  }
  fz_done()
})

test_that("repeated points, a constant column, far and near points, extreme scores: right values and first-index ties", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1107)
  make <- list(
    same = function(n, d) matrix(rnorm(d), n, d, byrow = TRUE),
    two = function(n, d) matrix(rnorm(2 * d), 2, d)[rep(1:2, length.out = n), , drop = FALSE],
    const = function(n, d) cbind(3, matrix(rnorm(n * (d - 1)), n, d - 1)),
    far = function(n, d) rbind(1e6, matrix(rnorm((n - 1) * d), n - 1, d)),
    near = function(n, d) 1 + 1e-12 * matrix(rnorm(n * d), n, d))
  for (nm in names(make)) {
    for (n in c(2, 9, 17)) {
      for (d in if (nm == "const") 3 else c(1, 3)) {
        x <- make[[nm]](n, d)
        for (sc in c(1, 1e100, 1e-100)) {
          s <- -x * sc
          for (kn in names(fz_kernels)) {
            k <- fz_kernels[[kn]]("id")
            p <- fz_params(k)
            lab <- paste(nm, n, d, sc, kn)
            K <- stein_kernel_matrix(x, s, k, standardize = FALSE)
            fz_lt(fz_err(K, x, s, diag(d), p$type, p$c, p$beta), 1e-11,
                      label = lab)
            R <- fz_stein(x, s, diag(d), p$type, p$c, p$beta)
            # the greedy steps and their ties, judged on the package's
            # own matrix (its values match the formula above)
            for (uq in c(FALSE, TRUE)) {
              th <- stein_thin(x, s, n, k, standardize = FALSE, unique = uq,
                               progress = FALSE)
              fz_identical(th$index, fz_greedy(K, n, uq), label = lab)
            }
            fz_equal(ksd(x, s, k, progress = FALSE, standardize = FALSE), fz_ksd(R),
                         tolerance = 1e-10, label = lab)
          }
        }
      }
    }
  }
  # standardising a constant column is refused, naming x and the column
  x <- make$const(9, 3)
  expect_error(stein_thin(x, -x, 3), class = "kb_error_arg",
               regexp = "'x' has a constant column \\(1\\)")
  expect_error(ksd(x, -x, standardize = TRUE, progress = FALSE),
               class = "kb_error_arg", regexp = "constant column")
  # the median heuristic on identical rows is refused, naming precon
  x <- make$same(9, 2)
  expect_error(ksd(x, -x, imq_kernel(precon = "med"), progress = FALSE, standardize = FALSE),
               class = "kb_error_arg", regexp = "'precon'")
  # scores whose squares overflow: an error naming the rows, not a number
  x <- matrix(rnorm(20), 10, 2)
  for (f in list(function() ksd(x, -x * 1e160, progress = FALSE, standardize = FALSE),
                 function() stein_thin(x, -x * 1e160, 3, standardize = FALSE),
                 function() ksdt(x, -x * 1e160, progress = FALSE, standardize = FALSE),
                 function() ksd_weights(x, -x * 1e160, progress = FALSE, standardize = FALSE),
                 function() ksd_test(x, -x * 1e160, n_boot = 10, progress = FALSE, standardize = FALSE))) {
    expect_error(f(), class = "kb_error_numeric", regexp = "row")
  }
  fz_done()
})

test_that("ksd_weights() solves min w'Kw over the simplex (KKT), with repeated points", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1108)
  for (n in c(1, 2, 3, 9, 17, 40)) {
    for (d in c(1, 3)) {
      x <- matrix(rnorm(n * d), n, d)
      if (n > 2) x[2, ] <- x[1, ]
      s <- -0.8 * x
      w <- ksd_weights(x, s, progress = FALSE, standardize = FALSE)
      w <- if (is.list(w)) w$weights else as.numeric(w)
      fz_identical(ksd_weights(x, s, progress = FALSE, nthreads = 2, standardize = FALSE),
                       ksd_weights(x, s, progress = FALSE, standardize = FALSE))
      K <- fz_stein(x, s, diag(d))
      g <- drop(K %*% w)
      v <- sum(w * g)
      tol <- 1e-8 * max(abs(K))
      fz_equal(sum(w), 1, tolerance = 1e-12)
      fz_true(all(w >= 0))
      fz_gte(min(g) - v, -tol)                 # no descent direction
      fz_lt(max(abs(g[w > 1e-10] - v)), 1e-6 * max(abs(K)))  # support
    }
  }
  fz_done()
})

test_that("bad points, scores, sizes and weights are errors naming the argument, for every entry", {
  fz_log$bad <- character()   # a clean log (after an aborted test)
  set.seed(1109)
  n <- 9
  x <- matrix(rnorm(n * 3), n, 3)
  s <- -x
  calls <- list(
    ksd = function(x, s, m, w) ksd(x, s, weights = w, progress = FALSE),
    path = function(x, s, m, w) ksd_path(x, s),
    matrix = function(x, s, m, w) stein_kernel_matrix(x, s),
    thin = function(x, s, m, w) stein_thin(x, s, m, unique = TRUE, progress = FALSE),
    mmd = function(x, s, m, w) mmd_thin(x, m, progress = FALSE),
    weights = function(x, s, m, w) ksd_weights(x, s, progress = FALSE),
    ksdt = function(x, s, m, w) ksdt(x, s, size = m, progress = FALSE),
    kt = function(x, s, m, w) kernel_thin(x, s, m = m, weights = w, progress = FALSE),
    test = function(x, s, m, w) ksd_test(x, s, n_boot = 10, progress = FALSE))
  put <- function(v) {
    y <- x
    y[4, 2] <- v
    y
  }
  for (f in names(calls)) {
    g <- calls[[f]]
    for (v in c(NA, NaN, Inf, -Inf)) {
      fz_error(g(put(v), s, 2, NULL), class = "kb_error_arg",
                   regexp = "'x' must not contain NA, NaN or Inf \\(row 4, column 2\\)",
                   label = f)
      if (f != "mmd") {
        fz_error(g(x, put(v), 2, NULL), class = "kb_error_arg",
                     regexp = "'score'", label = f)
      }
    }
    for (bad in list(matrix("a", n, 3), matrix(0, 0, 3), list(1, 2))) {
      fz_error(g(bad, s, 2, NULL), class = "kb_error_arg",
                   regexp = "'x'", label = f)
    }
    if (f != "mmd") {
      for (bad in list(s[-1, ], s[, -1], "a")) {
        fz_error(g(x, bad, 2, NULL), class = "kb_error_arg",
                     regexp = "'score'", label = f)
      }
      # closures returning the wrong length, NaN, or nothing numeric
      for (h in list(function(z) c(-z, 1), function(z) if (z[1] > 0) NaN * z else -z,
                     function(z) "a", function(z) NULL)) {
        fz_error(g(x, h, 2, NULL), class = "kb_error_callback",
                     regexp = "'score'", label = f)
      }
    }
    if (f %in% c("thin", "mmd", "ksdt", "kt")) {
      bad_m <- list(0, -1, NA, 1.5, "2", c(2, 3))
      if (f %in% c("thin", "mmd")) bad_m <- c(bad_m, n + 1)
      for (m in bad_m) {
        fz_error(g(x, s, m, NULL), class = "kb_error_arg",
                     regexp = if (f == "ksdt") "'size'" else "'m'", label = f)
      }
    }
    if (f %in% c("ksd", "kt")) {
      for (w in list(rep(1, n - 1), c(NA, rep(1, n - 1)), c(-1, rep(1, n - 1)),
                     rep(0, n), rep("1", n))) {
        fz_error(g(x, s, 2, w), class = "kb_error_arg",
                     regexp = "'weights'", label = f)
      }
    }
  }
  fz_done()
})

test_that("a rejected push leaves a KSDT stream as it was; after an overflow the stream resumes", {
  set.seed(1110)
  x <- matrix(rnorm(40), 20, 2)
  s <- -x
  st <- ksdt_stream(2, size = 3, progress = FALSE, standardize = FALSE)
  ksdt_push(st, x[1:6, ], s[1:6, ])
  before <- ksdt_result(st)
  for (bad in list(function() ksdt_push(st, x[7:8, ], function(z) c(z, 1)),
                   function() ksdt_push(st, x[7:8, ], function(z) NaN * z),
                   function() ksdt_push(st, x[7:8, ], s[7:9, ]),
                   function() ksdt_push(st, cbind(x[7:8, ], 1), cbind(s[7:8, ], 1)),
                   function() ksdt_push(st, rbind(x[7, ], NA), s[7:8, ]),
                   function() ksdt_push(st, x[7:8, ], s[7:8, ], candidates = 0))) {
    expect_error(bad(), class = "kb_error")
    expect_identical(ksdt_result(st), before)
  }
  # a state far out whose Stein kernel with the dictionary overflows: the
  # rows before it are taken, and pushing the rest resumes
  y <- x
  z <- s
  y[9, ] <- c(1e160, 0)
  z[9, ] <- c(1e150, 0)
  expect_error(ksdt_push(st, y[7:20, ], z[7:20, ]), class = "kb_error_numeric",
               regexp = "2 rows of the stream were taken")
  ksdt_push(st, y[10:20, ], z[10:20, ])
  ref <- ksdt_stream(2, size = 3, progress = FALSE, standardize = FALSE)
  ksdt_push(ref, x[c(1:8, 10:20), ], s[c(1:8, 10:20), ])
  expect_identical(ksdt_result(st)$points, ksdt_result(ref)$points)
  expect_identical(ksdt_result(st)$ksd, ksdt_result(ref)$ksd)
})
