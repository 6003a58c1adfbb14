# Offline thinning (R/thin.R, src/thin.c): greedy Stein thinning, its
# gradient-free variant, MMD thinning (kernel herding) and KSD-optimal
# weights.  Checked against the published selections of the reference
# implementation and against the plain-R references in helper-reference.R
# (ref_stein, ref_greedy, ref_sel_path, ref_kernel_matrix, ref_mmd2).

# A sample with unequal scales and a noisy Gaussian score, and the kernels
# under test (helper-reference.R).
thin_sample <- ref_noisy_sample
thin_kernels <- ref_kernel_cases(0.7)

read_demo <- function(file) {
  path <- test_path("fixtures", "stein-thinning-demo", file)
  unname(as.matrix(utils::read.csv(path, header = FALSE)))
}

# Expected selections of the reference Python implementation on its demo
# data (fixtures/stein-thinning-demo; 0-based there, so + 1 here).
demo_cases <- list(
  list(beta = -0.5, precon = "id", idx = c(
    68, 322, 268, 234, 161, 292, 229, 275, 259, 131, 400, 486, 207, 120, 443,
    430, 376, 411, 98, 293, 111, 372, 285, 427, 406, 246, 148, 260, 296, 208,
    79, 430, 369, 363, 462, 393, 321, 460, 373, 114)),
  list(beta = -0.75, precon = "id", idx = c(
    68, 322, 268, 234, 161, 292, 229, 276, 259, 131, 207, 431, 486, 120, 457,
    430, 412, 376, 111, 101, 97, 332, 394, 123, 429, 109, 349, 79, 466, 114,
    458, 371, 296, 284, 89, 317, 485, 392, 261, 246)),
  list(beta = -0.5, precon = "med", idx = c(
    68, 268, 214, 260, 160, 391, 261, 485, 397, 135, 260, 269, 493, 321, 469,
    56, 354, 114, 386, 323)),
  list(beta = -0.5, precon = "sclmed", idx = c(
    68, 322, 268, 226, 161, 292, 254, 302, 275, 246, 141, 261, 205, 431, 486,
    413, 457, 380, 430, 296)),
  list(beta = -0.5, precon = "smpcov", idx = c(
    68, 268, 260, 161, 215, 292, 135, 397, 78, 391, 413, 226, 295, 250, 141,
    205, 108, 292, 321, 484))
)

# ---- the reference implementation's demo data ----------------------------------

test_that("stein_thin() reproduces the reference implementation's selections on its demo data", {
  set.seed(201)
  smp <- read_demo("smp.csv")
  scr <- read_demo("scr.csv")
  expect_identical(dim(smp), c(500L, 2L))
  expect_identical(dim(scr), c(500L, 2L))
  st <- ref_standardize(smp, scr)
  for (cs in demo_cases) {
    want <- as.integer(cs$idx + 1)
    k <- imq_kernel(beta = cs$beta, precon = cs$precon)
    lab <- sprintf("beta = %s, precon = %s", cs$beta, cs$precon)
    th1 <- stein_thin(smp, scr, m = length(want), kernel = k, nthreads = 1)
    expect_identical(th1$index, want, label = lab)
    th2 <- stein_thin(smp, scr, m = length(want), kernel = k, nthreads = 2)
    expect_identical(th2$index, want, label = paste(lab, "(2 threads)"))
    expect_identical(th2$ksd, th1$ksd)
    expect_identical(unname(th1$points), smp[want, ])
    # KSD path: the reference Stein kernel on the (few) selected points only,
    # with standardisation and L resolved on the whole sample
    u <- unique(want)
    L <- ref_precon(st$x, cs$precon)
    Ku <- ref_stein_matrix(st$x[u, ], st$s[u, ], "imq", 1, cs$beta, L)
    pos <- match(want, u)
    expect_lt(rel_err(th1$ksd, ref_sel_path(Ku, pos)), 1e-12, label = lab)
  }
  # the defaults are the reference conventions (standardise, "id", IMQ(1, -1/2))
  def <- stein_thin(smp, scr, 40)
  expect_identical(def$index, as.integer(demo_cases[[1]]$idx + 1))
  expect_true(def$standardize)
  expect_false(def$unique)
  # repeats are part of the reference selection
  expect_identical(sum(duplicated(def$index)), 1L)
  expect_identical(def$index[32], def$index[16])
})

# ---- plain-R greedy reference -------------------------------------------------

test_that("stein_thin() matches a plain-R greedy: kernels x preconditioners x d x standardize x unique", {
  skip_on_cran()
  set.seed(202)
  n <- 60
  for (d in c(1, 2, 5)) {
    smp <- thin_sample(n, d)
    for (kn in names(thin_kernels)) {
      ks <- thin_kernels[[kn]]
      for (pc in c("id", "med", "smpcov")) {
        for (std in c(TRUE, FALSE)) {
          K <- ref_stein(smp$x, smp$s, ks$type, ks$c, ks$beta, pc, std)
          # m > n with repeats allowed; m < n without
          for (uq in c(FALSE, TRUE)) {
            m <- if (uq) 45 else 70
            lab <- sprintf("%s / %s / d = %d / std = %s / unique = %s", kn, pc,
                           d, std, uq)
            th <- stein_thin(smp$x, smp$s, m, kernel = ks$make(pc),
                             standardize = std, unique = uq, nthreads = 1)
            want <- ref_greedy(K, m, unique = uq)
            expect_identical(th$index, want, label = lab)
            expect_lt(rel_err(th$ksd, ref_sel_path(K, want)), 1e-12,
                      label = lab)
            expect_identical(unname(th$points), smp$x[want, , drop = FALSE])
          }
        }
      }
    }
  }
  # the object's fields
  th <- stein_thin(smp$x, smp$s, 7, kernel = imq_kernel(precon = "smpcov"),
                   standardize = FALSE, unique = TRUE)
  expect_s3_class(th, "kb_thin")
  expect_identical(th$method, "Stein thinning")
  expect_identical(c(th$n, th$d, th$m), c(60L, 5L, 7L))
  expect_identical(unname(th$sample), smp$x)
  expect_false(th$standardize)
  expect_true(th$unique)
  expect_equal(th$kernel$L, ref_precon(smp$x, "smpcov"), tolerance = 1e-12)
  expect_length(th$ksd, 7L)
})

test_that("stein_thin() across the C block size (n = 300 > 256), with 1 and 2 threads", {
  set.seed(203)
  smp <- thin_sample(300, 2)
  K <- ref_stein(smp$x, smp$s, "imq", 1, -0.5, "med", standardize = TRUE)
  for (uq in c(FALSE, TRUE)) {
    want <- ref_greedy(K, 60, unique = uq)
    th1 <- stein_thin(smp$x, smp$s, 60, imq_kernel(precon = "med"),
                      unique = uq, nthreads = 1)
    th2 <- stein_thin(smp$x, smp$s, 60, imq_kernel(precon = "med"),
                      unique = uq, nthreads = 2)
    expect_identical(th1$index, want)
    expect_identical(th2$index, want)
    expect_identical(th2$ksd, th1$ksd)
    expect_lt(rel_err(th1$ksd, ref_sel_path(K, want)), 1e-12)
  }
  # points beyond row 256 are selectable (and selected here)
  expect_true(any(want > 256))
})

test_that("stein_thin() at every vector width (blocks of 8, 4, 2 and 1 points left), both kernels, 1 and 2 threads", {
  skip_on_cran()
  # n = 1039 = 4 * 256 + 15: the last block of the kernel loop has 15
  # points, done 8, 4, 2 and 1 at a time by the vectorised IMQ loops
  # (AVX-512 and AVX2 on x86-64)
  set.seed(205)
  smp <- thin_sample(1039, 3)
  for (kn in names(thin_kernels)) {
    ks <- thin_kernels[[kn]]
    for (pc in c("med", "smpcov")) {
      K <- ref_stein(smp$x, smp$s, ks$type, ks$c, ks$beta, pc, TRUE)
      want <- ref_greedy(K, 30)
      for (nt in 1:2) {
        th <- stein_thin(smp$x, smp$s, 30, kernel = ks$make(pc), nthreads = nt)
        expect_identical(th$index, want, label = paste(kn, pc, nt))
      }
    }
  }
})

test_that("points whose sum overflows are finite; a non-finite entry is named", {
  # as_points() checks finiteness by a sum first, then entry by entry
  set.seed(207)
  smp <- thin_sample(40, 2)
  x <- smp$x
  x[1:2, 1] <- c(1.7e308, 1.7e308)
  expect_identical(kernbayes:::as_points(x), x)
  expect_true(kernbayes:::all_finite(x))
  expect_false(kernbayes:::all_finite(c(x, NaN)))
  expect_false(kernbayes:::all_finite(c(x, -Inf)))
  x[3, 2] <- Inf
  expect_error(stein_thin(x, smp$s, 5), "must not contain NA, NaN or Inf \\(row 3, column 2\\)")
})

test_that("stein_thin() breaks ties by the first index, also across the threads' ranges", {
  set.seed(204)
  smp <- thin_sample(30, 2)
  # row i + 30 is an exact copy of row i: every copy ties with its original,
  # and with 2 threads the two copies lie in different threads' ranges
  x <- rbind(smp$x, smp$x)
  s <- rbind(smp$s, smp$s)
  K <- ref_stein(x, s, "imq", 1, -0.5, "med", standardize = TRUE)
  for (nt in 1:2) {
    th <- stein_thin(x, s, 40, imq_kernel(precon = "med"), nthreads = nt)
    expect_identical(th$index, ref_greedy(K, 40))
    expect_true(all(th$index <= 30))
    thu <- stein_thin(x, s, 60, imq_kernel(precon = "med"), unique = TRUE,
                      nthreads = nt)
    expect_identical(thu$index, ref_greedy(K, 60, unique = TRUE))
    # a copy is only ever taken after its original
    expect_true(all(match(1:30, thu$index) < match(31:60, thu$index)))
  }
})

test_that("stein_thin() with d = 1 accepts vectors and a kb_target", {
  set.seed(205)
  tg <- gaussian_target(0.5, 2)
  x <- sample_target(tg, 80)
  s <- target_score(tg, x)
  K <- ref_stein(x, s, "imq", 1, -0.5, "med", standardize = TRUE)
  want <- ref_greedy(K, 25)
  th <- stein_thin(x, s, 25, imq_kernel(precon = "med"))
  expect_identical(th$index, want)
  expect_identical(stein_thin(as.numeric(x), as.numeric(s), 25,
                              imq_kernel(precon = "med"))$index, want)
  expect_identical(stein_thin(x, tg, 25, imq_kernel(precon = "med"))$index,
                   want)
  # a one-point score closure, or a non-vectorised kb_target, in d = 1
  expect_identical(stein_thin(x, function(z) -(z - 0.5) / 2, 25,
                              imq_kernel(precon = "med"))$index, want)
  t1 <- kb_target(function(z) -(z - 0.5)^2 / 4, function(z) -(z - 0.5) / 2,
                  dim = 1)
  expect_identical(stein_thin(x, t1, 25, imq_kernel(precon = "med"))$index,
                   want)
})

# ---- gradient-free Stein thinning -------------------------------------------

test_that("stein_thin_gf() with q = p is stein_thin()", {
  set.seed(206)
  tg <- gaussian_target(c(0.5, -0.5), matrix(c(1, 0.3, 0.3, 2), 2))
  x <- rbind(cbind(seq(4, 1, length.out = 20), 3), sample_target(tg, 130))
  lp <- target_log_density(tg, x)
  s <- target_score(tg, x)
  for (uq in c(FALSE, TRUE)) {
    k <- imq_kernel(precon = "med")
    th <- stein_thin(x, s, 30, k, unique = uq)
    # targets, vectors, closures
    g1 <- stein_thin_gf(x, log_density = tg, log_q = tg, score_q = tg, m = 30,
                        kernel = k, unique = uq)
    g2 <- stein_thin_gf(x, log_density = lp, log_q = lp, score_q = s, m = 30,
                        kernel = k, unique = uq, nthreads = 2)
    g3 <- stein_thin_gf(x, function(z) target_log_density(tg, z),
                        function(z) target_log_density(tg, z),
                        function(z) drop(target_score(tg, z)), 30,
                        kernel = k, unique = uq)
    for (g in list(g1, g2, g3)) {
      expect_identical(g$index, th$index)
      expect_identical(g$ksd, th$ksd)
      expect_identical(g$w, rep(0, 150))
      expect_identical(g$unique, uq)
    }
    # normalising constants do not matter (up to the rounding of lp + 3 - lp)
    g4 <- stein_thin_gf(x, lp + 3, lp - 2, s, 30, kernel = k, unique = uq)
    expect_identical(g4$index, th$index)
    expect_lt(rel_err(g4$ksd, th$ksd), 1e-12)
    expect_lt(max(g4$w), 1e-12)
    expect_identical(g1$method, "gradient-free Stein thinning")
  }
})

test_that("stein_thin_gf() with a proxy matches a plain-R reweighted greedy", {
  set.seed(207)
  mu <- c(1, -1)
  S <- matrix(c(1.5, 0.6, 0.6, 1), 2)
  tg <- gaussian_target(mu, S)
  x <- sample_target(tg, 120)
  # proxy: a diagonal Gaussian fitted to the sample
  qm <- colMeans(x)
  qv <- apply(x, 2, stats::var)
  q <- gaussian_target(qm, diag(qv))
  lp <- ref_dmvnorm_log(x, mu, S)
  lq <- ref_dmvnorm_log(x, qm, diag(qv))
  sq <- -sweep(x, 2, qm) / matrix(qv, nrow(x), 2, byrow = TRUE)
  w <- lq - lp
  w <- w - min(w)
  expect_lt(max(w), 10)
  expect_gt(max(w), 0.5)
  for (std in c(TRUE, FALSE)) {
    for (pc in c("id", "med")) {
      Kq <- ref_stein(x, sq, "imq", 1, -0.5, pc, std)
      Kw <- Kq * outer(exp(w), exp(w))
      for (uq in c(FALSE, TRUE)) {
        lab <- sprintf("precon %s std %s unique %s", pc, std, uq)
        want <- ref_greedy(Kw, 40, unique = uq)
        g <- stein_thin_gf(x, lp, lq, sq, 40, kernel = imq_kernel(precon = pc),
                           standardize = std, unique = uq)
        expect_identical(g$index, want, label = lab)
        expect_lt(rel_err(g$ksd, ref_sel_path(Kw, want)), 1e-12, label = lab)
        expect_equal(g$w, w, tolerance = 1e-12)
        # the same through kb_targets
        gt <- stein_thin_gf(x, tg, q, q, 40, kernel = imq_kernel(precon = pc),
                            standardize = std, unique = uq)
        expect_identical(gt$index, want, label = lab)
        expect_lt(rel_err(gt$ksd, g$ksd), 1e-12)
      }
    }
  }
  # the reweighting matters: plain Stein thinning with the proxy's score
  # selects differently
  expect_false(identical(stein_thin(x, sq, 40)$index,
                         stein_thin_gf(x, lp, lq, sq, 40)$index))
})

test_that("stein_thin_gf() warns on a wide range of log weights; range_cap clips them", {
  set.seed(208)
  x <- matrix(stats::rnorm(200), 100, 2)
  s <- -x
  lp <- -rowSums(x^2) / 2
  # proxy N(1, 0.5^2 I): log q - log p spans far more than 10
  lq <- -rowSums((x - 1)^2) / (2 * 0.25)
  sq <- -(x - 1) / 0.25
  w <- lq - lp
  w <- w - min(w)
  expect_gt(max(w), 10)
  expect_warning(g <- stein_thin_gf(x, lp, lq, sq, 20),
                 sprintf("span %.1f \\(> 10\\).*'range_cap'", max(w)))
  K <- ref_stein(x, sq, standardize = TRUE)
  want <- ref_greedy(K * outer(exp(w), exp(w)), 20)
  expect_identical(g$index, want)
  # capped at 4: no warning, weights clipped, selection from clipped weights
  expect_no_warning(gc <- stein_thin_gf(x, lp, lq, sq, 20, range_cap = 4))
  wc <- pmin(w, 4)
  expect_equal(gc$w, wc, tolerance = 1e-12)
  expect_identical(max(gc$w), 4)
  expect_gt(sum(gc$w == 4), 5)
  Kc <- K * outer(exp(wc), exp(wc))
  wantc <- ref_greedy(Kc, 20)
  expect_identical(gc$index, wantc)
  expect_lt(rel_err(gc$ksd, ref_sel_path(Kc, wantc)), 1e-12)
  expect_false(identical(gc$index, g$index))
  # the threshold is a range of 10: 12 warns, 9 does not
  r1 <- diff(range(x[, 1]))
  expect_warning(stein_thin_gf(x, lp, lp + 12 / r1 * x[, 1], s, 5),
                 "span 12\\.0 \\(> 10\\)")
  expect_no_warning(g9 <- stein_thin_gf(x, lp, lp + 9 / r1 * x[, 1], s, 5))
  expect_equal(max(g9$w), 9, tolerance = 1e-12)
  # a cap above the range changes nothing
  lq2 <- lp + 0.1 * x[, 1]
  g0 <- stein_thin_gf(x, lp, lq2, s, 15)
  expect_identical(stein_thin_gf(x, lp, lq2, s, 15, range_cap = 100)$index,
                   g0$index)
  expect_identical(stein_thin_gf(x, lp, lq2, s, 15, range_cap = 100)$w, g0$w)
})

# ---- unique ---------------------------------------------------------------------

test_that("unique = TRUE never repeats; m = n gives a permutation", {
  set.seed(209)
  smp <- read_demo("smp.csv")
  scr <- read_demo("scr.csv")
  ref1 <- as.integer(demo_cases[[1]]$idx + 1)
  thu <- stein_thin(smp, scr, 40, unique = TRUE)
  expect_identical(anyDuplicated(thu$index), 0L)
  # identical to the reference selection up to its first repeat (step 32)
  expect_identical(thu$index[1:31], ref1[1:31])
  expect_false(thu$index[32] == ref1[32])

  smp2 <- thin_sample(50, 3)
  for (nt in 1:2) {
    th <- stein_thin(smp2$x, smp2$s, 50, imq_kernel(precon = "med"),
                     unique = TRUE, nthreads = nt)
    expect_identical(sort(th$index), 1:50)
    # the path ends at the KSD of the whole sample
    expect_equal(th$ksd[50], ksd(smp2$x, smp2$s, imq_kernel(precon = "med"),
                                 standardize = TRUE), tolerance = 1e-12)
    lp <- -rowSums(smp2$x^2) / 2
    g <- stein_thin_gf(smp2$x, lp, lp + 0.2 * smp2$x[, 1], smp2$s, 50,
                       unique = TRUE, nthreads = nt)
    expect_identical(sort(g$index), 1:50)
    mm <- mmd_thin(smp2$x, 50, nthreads = nt)
    expect_identical(sort(mm$index), 1:50)
    expect_lt(mm$mmd[50], 1e-6)
  }
  # MMD thinning never repeats by default, but may when asked
  mm <- mmd_thin(smp2$x, 30)
  expect_identical(anyDuplicated(mm$index), 0L)
  expect_true(mm$unique)
  mr <- mmd_thin(smp2$x, 80, unique = FALSE)
  expect_length(mr$index, 80L)
  # with repeats allowed the greedy path is the unique one up to the first
  # repeat
  r1 <- which(duplicated(mr$index))[1]
  expect_gt(r1, 2)
  expect_identical(mr$index[seq_len(r1 - 1)],
                   mmd_thin(smp2$x, r1 - 1)$index)
})

# ---- burn-in ----------------------------------------------------------------------

test_that("Stein thinning leaves out a long burn-in", {
  set.seed(210)
  # 300 rows drifting from (10, 10) to the mode, then 1000 exact draws
  drift <- seq(10, 0, length.out = 300)
  burn <- cbind(drift, drift) + matrix(stats::rnorm(600, sd = 0.3), 300)
  x <- rbind(burn, matrix(stats::rnorm(2000), 1000))
  for (k in list(imq_kernel(), imq_kernel(precon = "med"))) {
    th <- stein_thin(x, -x, 50, kernel = k)
    expect_gt(min(th$index), 200)
    # and beats the naive choice of the last 50 rows, measured with the same
    # Stein kernel (standardisation and L of the whole sample)
    st <- ref_standardize(x, -x)
    last <- 1251:1300
    Kl <- ref_stein_matrix(st$x[last, ], st$s[last, ], "imq", 1, -0.5,
                           th$kernel$L)
    expect_lt(th$ksd[50], ref_ksd(Kl))
  }
})

# ---- MMD thinning -----------------------------------------------------------------

# Plain-R kernel herding: kernel resolved on the (optionally standardised)
# sample, embedding on the evenly spaced rows.
ref_mmd_thin <- function(x, m, type, c, beta, precon, embed_size, unique,
                         standardize) {
  if (standardize) x <- ref_standardize(x, x)$x
  n <- nrow(x)
  rows <- if (n > embed_size) {
    floor(seq(0, n - 1, length.out = embed_size)) + 1
  } else {
    seq_len(n)
  }
  L <- ref_precon(x, precon)
  Kxx <- ref_kernel_matrix(x, x, type, c, beta, L)
  mu <- rowMeans(Kxx[, rows, drop = FALSE])
  idx <- ref_greedy(Kxx, m, unique, mu)
  path <- vapply(seq_len(m), function(j) {
    s <- idx[seq_len(j)]
    sqrt(max(ref_mmd2(Kxx[s, s, drop = FALSE], Kxx[s, rows, drop = FALSE],
                      Kxx[rows, rows, drop = FALSE]), 0))
  }, numeric(1))
  list(index = idx, mmd = path, rows = rows)
}

test_that("mmd_thin() matches plain-R kernel herding, with a full and a subsampled embedding", {
  set.seed(211)
  smp <- thin_sample(80, 2)
  smp3 <- thin_sample(70, 3)
  cases <- list(
    list(x = smp$x, k = gaussian_kernel(), type = "gaussian", c = 1,
         beta = -0.5, pc = "med", std = FALSE),
    list(x = smp3$x, k = imq_kernel(c = 0.7, beta = -0.3, precon = "id"),
         type = "imq", c = 0.7, beta = -0.3, pc = "id", std = TRUE),
    list(x = smp3$x, k = gaussian_kernel(precon = "smpcov"), type = "gaussian",
         c = 1, beta = -0.5, pc = "smpcov", std = FALSE)
  )
  for (cs in cases) {
    for (es in c(10000, 80, 25)) {
      for (uq in c(TRUE, FALSE)) {
        m <- if (uq) 30 else 90
        lab <- sprintf("%s / %s / embed %d / unique %s", cs$type, cs$pc, es, uq)
        want <- ref_mmd_thin(cs$x, m, cs$type, cs$c, cs$beta, cs$pc, es, uq,
                             cs$std)
        th <- mmd_thin(cs$x, m, kernel = cs$k, embed_size = es, unique = uq,
                       standardize = cs$std)
        expect_identical(th$index, want$index, label = lab)
        expect_lt(max(abs(th$mmd^2 - want$mmd^2)), 1e-12, label = lab)
        expect_identical(th$embed_size, length(want$rows))
        expect_identical(unname(th$points), cs$x[want$index, , drop = FALSE])
        if (es == 25) {
          th2 <- mmd_thin(cs$x, m, kernel = cs$k, embed_size = es,
                          unique = uq, standardize = cs$std, nthreads = 2)
          expect_identical(th2$index, th$index)
          expect_identical(th2$mmd, th$mmd)
        }
      }
    }
  }
  # the subsampled embedding is a different target
  a <- mmd_thin(smp$x, 30, embed_size = 25)
  b <- mmd_thin(smp$x, 30)
  expect_false(identical(a$index, b$index))
  expect_identical(b$method, "MMD thinning")
  expect_null(b$ksd)
  expect_identical(b$embed_size, 80L)
})

test_that("mmd_thin() beats every-k-th thinning; its path ends at the MMD to the sample", {
  set.seed(212)
  n <- 1000
  m <- 50
  ar1 <- matrix(0, n, 2)
  for (t in 2:n) ar1[t, ] <- 0.95 * ar1[t - 1, ] + sqrt(1 - 0.95^2) * stats::rnorm(2)
  sets <- list(
    gaussian = matrix(stats::rnorm(2 * n), n, 2),
    mixture = rbind(matrix(stats::rnorm(1400), ncol = 2),
                    matrix(stats::rnorm(600, mean = 4), ncol = 2))[sample(n), ],
    ar1 = ar1
  )
  for (nm in names(sets)) {
    x <- sets[[nm]]
    th <- mmd_thin(x, m, nthreads = 2, standardize = FALSE)
    L <- ref_precon(x, "med")
    expect_equal(th$kernel$L, L, tolerance = 1e-12)
    Kxx <- ref_kernel_matrix(x, x, "gaussian", L = L)
    mmd <- function(id) sqrt(ref_mmd2(Kxx[id, id], Kxx[id, ], Kxx))
    herd <- mmd(th$index)
    expect_equal(th$mmd[m], herd, tolerance = 1e-9, label = nm)
    every_k <- mmd(seq(n / m, n, by = n / m))
    expect_lt(herd, 0.5 * every_k, label = nm)
  }
  # with a subsampled embedding the path ends at the MMD to those rows
  x <- sets$mixture
  th <- mmd_thin(x, m, embed_size = 200, standardize = FALSE)
  rows <- floor(seq(0, n - 1, length.out = 200)) + 1
  L <- ref_precon(x, "med")
  s <- th$index
  want <- sqrt(ref_mmd2(ref_kernel_matrix(x[s, ], x[s, ], L = L),
                        ref_kernel_matrix(x[s, ], x[rows, ], L = L),
                        ref_kernel_matrix(x[rows, ], x[rows, ], L = L)))
  expect_equal(th$mmd[m], want, tolerance = 1e-9)
})

# ---- KSD-optimal weights ----------------------------------------------------------

test_that("ksd_weights(): simplex constraints, KKT conditions, better than uniform", {
  set.seed(213)
  tg <- gaussian_target(c(0, 0))
  for (cfg in list(list(x = sample_target(tg, 30), k = imq_kernel(), pc = "id",
                        type = "imq"),
                   list(x = sample_target(tg, 40) + 0.5,
                        k = gaussian_kernel(precon = "med"), pc = "med",
                        type = "gaussian"))) {
    x <- cfg$x
    s <- -x
    w <- ksd_weights(x, s, cfg$k, standardize = FALSE)
    expect_length(w, nrow(x))
    expect_equal(sum(w), 1, tolerance = 1e-12)
    expect_true(all(w >= 0))
    expect_lt(sum(w > 0), nrow(x))  # the constraint is active somewhere
    K <- ref_stein(x, s, cfg$type, precon = cfg$pc)
    wk <- as.numeric(w)
    v <- drop(crossprod(wk, K %*% wk))
    expect_equal(attr(w, "ksd"), sqrt(v), tolerance = 1e-10)
    expect_equal(attr(w, "ksd"), ksd(x, s, cfg$k, weights = wk, standardize = FALSE),
                 tolerance = 1e-10)
    expect_lt(attr(w, "ksd"), ksd(x, s, cfg$k, standardize = FALSE))
    # KKT for min w'Kw on the simplex: 2(Kw)_i >= 2 w'Kw, equality on the support
    g <- drop(K %*% wk)
    tol <- 1e-8 * max(abs(diag(K)))
    expect_gt(min(2 * g - 2 * v), -tol)
    expect_lt(max(abs(2 * g[wk > 0] - 2 * v)), tol)
  }
})

test_that("ksd_weights(nonneg = FALSE) is the closed form K^-1 1 / 1'K^-1 1", {
  set.seed(214)
  x <- matrix(stats::rnorm(24, mean = 0.8), 12, 2)
  s <- -x
  K <- ref_stein(x, s)
  z <- solve(K, rep(1, 12))
  want <- z / sum(z)
  w <- ksd_weights(x, s, nonneg = FALSE, standardize = FALSE)
  expect_equal(as.numeric(w), want, tolerance = 1e-8)
  expect_equal(sum(w), 1, tolerance = 1e-12)
  expect_equal(attr(w, "ksd"), sqrt(1 / sum(z)), tolerance = 1e-8)
  # the unconstrained optimum is at most the constrained one
  wn <- ksd_weights(x, s, standardize = FALSE)
  expect_lte(attr(w, "ksd"), attr(wn, "ksd") * (1 + 1e-10))
  expect_true(any(w < 0))
  expect_true(all(wn >= 0))
  # kernel and standardize are passed on
  Ks <- ref_stein(x, s, "gaussian", precon = "sclmed", standardize = TRUE)
  zs <- solve(Ks, rep(1, 12))
  ws <- ksd_weights(x, s, gaussian_kernel(precon = "sclmed"), nonneg = FALSE,
                    standardize = TRUE)
  expect_equal(as.numeric(ws), zs / sum(zs), tolerance = 1e-8)
})

test_that("ksd_weights(): duplicate rows share their weight equally", {
  set.seed(215)
  base <- matrix(stats::rnorm(40), 20, 2)
  wb <- ksd_weights(base, -base, standardize = FALSE)
  # copy the two rows with the largest weights: one twice, one once
  top <- order(wb, decreasing = TRUE)[1:2]
  expect_gt(wb[top[2]], 0.05)
  a <- top[1]
  b <- top[2]
  x <- rbind(base, base[c(a, b, b), ])
  s <- -x
  w <- ksd_weights(x, s, standardize = FALSE)
  expect_equal(w[c(a, 21)], rep(wb[a] / 2, 2), tolerance = 1e-12)
  expect_equal(w[c(b, 22, 23)], rep(wb[b] / 3, 3), tolerance = 1e-12)
  expect_identical(w[22], w[23])
  expect_equal(as.numeric(w[-c(a, b, 21:23)]), as.numeric(wb[-c(a, b)]),
               tolerance = 1e-12)
  expect_equal(sum(w), 1, tolerance = 1e-12)
  expect_equal(attr(w, "ksd"), attr(wb, "ksd"), tolerance = 1e-12)
  expect_equal(attr(w, "ksd"), ksd(x, s, weights = as.numeric(w), standardize = FALSE),
               tolerance = 1e-10)
  # the same point with a different score is a different point: the copy no
  # longer shares the original's weight
  s2 <- s
  s2[21, ] <- s2[21, ] + 0.5
  w2 <- ksd_weights(x, s2, standardize = FALSE)
  expect_gt(abs(w2[a] - w2[21]), 1e-3)
})

test_that("ksd_weights() with duplicates and a sample-dependent kernel optimises the sample's own KSD", {
  # DESIGN.md: heuristic preconditioners (and the standardisation) are
  # resolved on the sample the kernel is applied to, i.e. all rows of x.
  # Merging duplicates is only a device to make K invertible; the weights
  # must still be optimal for, and attr "ksd" equal to, the KSD of x.
  set.seed(216)
  base <- matrix(stats::rnorm(40), 20, 2)
  x <- rbind(base, base[c(2, 5, 5), ])
  s <- -x
  for (cfg in list(list(k = imq_kernel(precon = "med"), std = FALSE,
                        pc = "med"),
                   list(k = imq_kernel(), std = TRUE, pc = "id"))) {
    w <- ksd_weights(x, s, cfg$k, standardize = cfg$std)
    wk <- as.numeric(w)
    expect_equal(attr(w, "ksd"),
                 ksd(x, s, cfg$k, weights = wk, standardize = cfg$std),
                 tolerance = 1e-10)
    K <- ref_stein(x, s, precon = cfg$pc, standardize = cfg$std)
    g <- drop(K %*% wk)
    v <- sum(wk * g)
    expect_gt(min(2 * g - 2 * v), -1e-8 * max(abs(diag(K))))
  }
})

# ---- methods --------------------------------------------------------------------

test_that("print, summary, plot and as_draws_matrix of kb_thin", {
  set.seed(217)
  smp <- read_demo("smp.csv")
  scr <- read_demo("scr.csv")
  th <- stein_thin(smp, scr, 20, imq_kernel(precon = "med"))
  x <- cbind(sin(1:60), cos(0.7 * (1:60)))
  mm <- mmd_thin(x, 8, standardize = FALSE)
  lp <- -rowSums(x^2) / 2
  gf <- stein_thin_gf(x, lp, lp + 0.1 * x[, 1], -x, 5, unique = TRUE)
  expect_snapshot({
    print(th)
    summary(th)
    mm
    summary(mm)
    gf
  })
  sm <- summary(th)
  expect_s3_class(sm, "summary.kb_thin")
  expect_identical(sm$distinct, 19L)
  expect_identical(sm$final, th$ksd[20])
  expect_identical(sm$first, 56L + 1L)
  expect_identical(sm$last, 493L + 1L)
  expect_equal(sm$mean_selected, colMeans(smp[th$index, ]), tolerance = 1e-14)
  expect_identical(summary(mm)$what, "MMD")
  utils::capture.output(vis <- withVisible(print(th)))
  expect_false(vis$visible)
  expect_identical(vis$value, th)

  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_invisible(plot(th))
  expect_identical(plot(mm, which = 2), mm)
  expect_identical(plot(gf, which = 1), gf)
  th1 <- stein_thin(x[, 1], -x[, 1], 5)
  expect_identical(plot(th1), th1)

  skip_if_not_installed("posterior")
  dm <- posterior::as_draws_matrix(th)
  expect_s3_class(dm, "draws_matrix")
  expect_identical(posterior::variables(dm), c("x1", "x2"))
  expect_identical(posterior::ndraws(dm), 20L)
  expect_equal(unname(unclass(dm)[, , drop = TRUE]), smp[th$index, ],
               ignore_attr = TRUE)
  df <- data.frame(alpha = x[, 1], beta = x[, 2])
  thd <- stein_thin(df, -x, 6)
  dmd <- posterior::as_draws_matrix(thd)
  expect_identical(posterior::variables(dmd), c("alpha", "beta"))
  expect_equal(as.numeric(dmd[, "beta"]), x[thd$index, 2])
  expect_s3_class(posterior::as_draws(thd), "draws_matrix")
  # a posterior draws object is accepted as the sample
  thp <- stein_thin(posterior::as_draws_matrix(df), -x, 6)
  expect_identical(thp$index, thd$index)
})

# ---- bad input --------------------------------------------------------------------

test_that("bad x and score are rejected, naming them", {
  set.seed(218)
  x <- matrix(stats::rnorm(40), 20, 2)
  s <- -x
  lp <- -rowSums(x^2) / 2
  for (bad in list(NA_real_, NaN, Inf, -Inf)) {
    xb <- x
    xb[3, 2] <- bad
    expect_error(stein_thin(xb, s, 5), "'x'.*\\(row 3, column 2\\)")
    expect_error(stein_thin_gf(xb, lp, lp, s, 5), "'x'.*\\(row 3, column 2\\)")
    expect_error(mmd_thin(xb, 5), "'x'.*\\(row 3, column 2\\)")
    expect_error(ksd_weights(xb, s), "'x'.*\\(row 3, column 2\\)")
    sb <- s
    sb[4, 1] <- bad
    expect_error(stein_thin(x, sb, 5), "'score'")
    expect_error(stein_thin_gf(x, lp, lp, sb, 5), "'score_q'")
    expect_error(ksd_weights(x, sb), "'score'")
  }
  for (xb in list(matrix("a", 20, 2), list(x), NULL, matrix(numeric(0), 0, 2),
                  data.frame(a = 1:20, b = letters[1:20]))) {
    expect_error(stein_thin(xb, s, 5), "'x'")
    expect_error(mmd_thin(xb, 5), "'x'")
  }
  expect_error(stein_thin(x, s[-1, ], 5), "'score'.*20 x 2")
  expect_error(stein_thin(x, cbind(s, 1), 5), "'score'.*20 x 2")
  expect_error(stein_thin(x, t(s), 5), "'score'")
  expect_error(stein_thin(x, as.numeric(s), 5), "'score'")
  expect_error(stein_thin(x, m = 5), "'score'")
  expect_error(stein_thin(x, function(z) c(z, 1), 5), "'score'.*length 3")
  expect_error(stein_thin(x, gaussian_target(c(0, 0, 0)), 5), "'x'.*3 columns")
  expect_error(stein_thin_gf(x, lp, lp, s[, 1], 5), "'score_q'")
  expect_error(ksd_weights(x, s[-1, ]), "'score'.*20 x 2")
  expect_error(stein_thin(x, s, 5, kernel = "imq"), "'kernel'")
  expect_error(mmd_thin(x, 5, kernel = imq_kernel), "'kernel'")
  expect_error(stein_thin(x, s, 5, standardize = NA), "'standardize'")
  expect_error(mmd_thin(x, 5, standardize = "yes"), "'standardize'")
  expect_error(stein_thin(x, s, 5, unique = NA), "'unique'")
  expect_error(mmd_thin(x, 5, unique = c(TRUE, FALSE)), "'unique'")
  expect_error(stein_thin_gf(x, lp, lp, s, 5, unique = "no"), "'unique'")
  expect_error(ksd_weights(x, s, nonneg = NA), "'nonneg'")
  for (nt in list(0, 1.5, NA, "2")) {
    expect_error(stein_thin(x, s, 5, nthreads = nt), "'nthreads'")
    expect_error(mmd_thin(x, 5, nthreads = nt), "'nthreads'")
    expect_error(stein_thin_gf(x, lp, lp, s, 5, nthreads = nt), "'nthreads'")
  }
  xc <- cbind(x[, 1], 3)
  expect_error(stein_thin(xc, -xc, 5), "'x'.*constant column \\(2\\)")
  expect_error(mmd_thin(xc, 5, standardize = TRUE), "'x'.*constant column")
})

test_that("bad m and embed_size are rejected, naming them", {
  set.seed(219)
  x <- matrix(stats::rnorm(40), 20, 2)
  s <- -x
  lp <- -rowSums(x^2) / 2
  for (mb in list(0, -1, 2.5, NA, NA_integer_, "3", c(2, 3), Inf, TRUE,
                  NULL)) {
    expect_error(stein_thin(x, s, mb), "'m'")
    expect_error(stein_thin_gf(x, lp, lp, s, mb), "'m'")
    expect_error(mmd_thin(x, mb), "'m'")
  }
  expect_error(stein_thin(x, s), "[\"']m[\"']")
  expect_error(stein_thin(x, s, 21, unique = TRUE),
               "'m' must be at most nrow\\(x\\) = 20 when unique = TRUE")
  expect_error(stein_thin_gf(x, lp, lp, s, 21, unique = TRUE), "'m'.*20")
  expect_error(mmd_thin(x, 21), "'m'.*20")
  # m > n is fine when repeats are allowed
  expect_length(stein_thin(x, s, 21)$index, 21L)
  expect_length(mmd_thin(x, 21, unique = FALSE)$index, 21L)
  expect_identical(stein_thin(x, s, 20, unique = TRUE)$m, 20L)
  for (eb in list(0, -5, 2.5, NA, "10", c(5, 10), Inf)) {
    expect_error(mmd_thin(x, 5, embed_size = eb), "'embed_size'")
  }
})

test_that("m and embed_size beyond the integer range: a clean error or the documented meaning", {
  set.seed(220)
  x <- matrix(stats::rnorm(40), 20, 2)
  s <- -x
  # an error that names 'm', and nothing else signalled first
  for (uq in c(FALSE, TRUE)) {
    cnd <- tryCatch(stein_thin(x, s, 3e9, unique = uq), condition = identity)
    expect_s3_class(cnd, "error")
    expect_match(conditionMessage(cnd), "'m'")
  }
  # embed_size is a maximum: a huge value means all rows
  expect_identical(mmd_thin(x, 5, embed_size = 1e10)$index,
                   mmd_thin(x, 5)$index)
})

test_that("bad log_density, log_q, range_cap and ... of stein_thin_gf() are rejected, naming them", {
  set.seed(221)
  x <- matrix(stats::rnorm(40), 20, 2)
  s <- -x
  lp <- -rowSums(x^2) / 2
  expect_error(stein_thin_gf(x, lp[-1], lp, s, 5),
               "'log_density' must have length nrow\\(x\\) = 20; it has 19")
  expect_error(stein_thin_gf(x, lp, c(lp, 0), s, 5), "'log_q'.*= 20; it has 21")
  for (bad in list(NA_real_, NaN, Inf, -Inf)) {
    expect_error(stein_thin_gf(x, replace(lp, 7, bad), lp, s, 5),
                 "'log_density' must be finite.*row 7")
    expect_error(stein_thin_gf(x, lp, replace(lp, 7, bad), s, 5),
                 "'log_q' must be finite.*row 7")
  }
  for (bad in list(matrix(lp), "a", list(lp), as.character(lp), NULL)) {
    expect_error(stein_thin_gf(x, bad, lp, s, 5), "'log_density'")
    expect_error(stein_thin_gf(x, lp, bad, s, 5), "'log_q'")
  }
  # closures: errors, wrong length, non-finite values
  err <- tryCatch(stein_thin_gf(x, function(z) stop("boom"), lp, s, 5),
                  error = identity)
  expect_match(conditionMessage(err), "boom")
  expect_match(deparse(conditionCall(err))[1], "^log_density\\(")
  err <- tryCatch(stein_thin_gf(x, lp, function(z) stop("bang"), s, 5),
                  error = identity)
  expect_match(conditionMessage(err), "bang")
  expect_match(deparse(conditionCall(err))[1], "^log_q\\(")
  expect_error(stein_thin_gf(x, function(z) c(1, 2), lp, s, 5),
               "'log_density'.*length 2.*row 1")
  expect_error(stein_thin_gf(x, function(z) if (z[1] == x[4, 1]) NaN else 0,
                             lp, s, 5), "'log_density'.*non-finite.*row 4")
  expect_error(stein_thin_gf(x, lp, function(z) "a", s, 5), "'log_q'")
  expect_error(stein_thin_gf(x, gaussian_target(c(0, 0, 0)), lp, s, 5),
               "'x'.*3 columns")
  # range_cap
  for (rc in list(0, -1, NA, Inf, "1", c(1, 2))) {
    expect_error(stein_thin_gf(x, lp, lp, s, 5, range_cap = rc), "'range_cap'")
  }
  expect_error(stein_thin_gf(x, lp, lp, s, 5, range_cap = 0),
               "'range_cap' must be in \\(0, Inf\\); got 0")
  # ... takes only kernel, standardize, unique, nthreads, progress
  expect_error(stein_thin_gf(x, lp, lp, s, 5, foo = 1),
               "'\\.\\.\\.' takes only kernel, standardize, unique, nthreads, chain and progress")
  expect_error(stein_thin_gf(x, lp, lp, s, 5, TRUE), "'\\.\\.\\.'")
  expect_error(stein_thin_gf(x, lp, lp, s, 5, unique = TRUE, embed_size = 3),
               "'\\.\\.\\.'")
  expect_error(stein_thin_gf(x, lp, lp, s, 5, kernel = "imq"), "'kernel'")
  expect_error(stein_thin_gf(x, lp, lp, s, 5, standardize = NA),
               "'standardize'")
})

# ---- overflow and argument order ---------------------------------------------------

test_that("an overflowing Stein kernel in thinning is a kb_error_numeric naming the rows", {
  set.seed(1)
  x <- matrix(stats::rnorm(40), 20)
  s <- -x
  x[7, ] <- c(1e155, 0)
  # row 17 is selected first; adding its row overflows the objective of row 7
  for (nt in 1:2) {
    expect_error(stein_thin(x, s, 5, standardize = FALSE, nthreads = nt),
                 class = "kb_error_numeric",
                 regexp = "Stein kernel of rows 7 and 17 overflows")
    expect_error(stein_thin(x, s, 5, standardize = FALSE, unique = TRUE,
                            nthreads = nt),
                 class = "kb_error_numeric", regexp = "rows 7 and 17")
  }
  # standardising by the far row's scale makes the scores overflow their own
  # diagonal terms
  expect_error(stein_thin(x, s, 5), class = "kb_error_numeric",
               regexp = "rows ([0-9]+) and \\1 overflows")
  lp <- rep(0, 20)
  expect_error(stein_thin_gf(x, lp, lp, s, 5, standardize = FALSE),
               class = "kb_error_numeric", regexp = "rows 7 and 17")
  expect_error(ksd_weights(x, s, standardize = FALSE), class = "kb_error_numeric",
               regexp = "Stein kernel of rows 1 and 7 overflows")
  # with repeated rows merged for the solve, rows are still those of x
  xd <- rbind(x[1, ], x[-7, ][1:5, ], x[7, ])
  sd <- rbind(s[1, ], s[-7, ][1:5, ], s[7, ])
  expect_error(ksd_weights(xd, sd, standardize = FALSE), class = "kb_error_numeric",
               regexp = "rows 1 and 7 overflows")
  expect_error(ksd_weights(xd[-1, ], sd[-1, ], standardize = FALSE), class = "kb_error_numeric",
               regexp = "rows 1 and 6 overflows")
  # the base kernel is bounded: MMD thinning gives finite answers
  th <- mmd_thin(x, 5, kernel = imq_kernel(), standardize = FALSE)
  expect_true(all(is.finite(th$mmd)))
})

test_that("overflow in the second thread's range of points is found and named", {
  # n >= 8192: the greedy step runs on 2 threads, each over half the points
  set.seed(4)
  n <- 9000
  x <- matrix(stats::rnorm(2 * n), n)
  s <- -x
  x[8000, ] <- c(0, 1e155)
  first <- stein_thin(x[-8000, ], s[-8000, ], 1, standardize = FALSE)$index
  for (nt in 1:2) {
    expect_error(stein_thin(x, s, 3, standardize = FALSE, nthreads = nt),
                 class = "kb_error_numeric",
                 regexp = sprintf("rows %d and 8000 overflows", first))
  }
  s[8500, ] <- c(1e200, 0)
  expect_error(stein_thin(x, s, 3, standardize = FALSE, nthreads = 2),
               class = "kb_error_numeric", regexp = "rows 8500 and 8500 ")
})

test_that("finite greedy terms whose sums overflow are an error, not an Inf path", {
  # k_p(x_i, x_i) = 1.44e308 + 1 for both points, k_p(x_1, x_2) ~ 1.4e305
  x <- matrix(c(0, 1e3), 2)
  s <- matrix(1.2e154, 2, 1)
  expect_error(stein_thin(x, s, 2, standardize = FALSE, unique = TRUE),
               class = "kb_error_numeric",
               regexp = "discrepancy of the first 2 selected points overflows")
  # without unique, the objective of row 1 itself overflows at step 2
  expect_error(stein_thin(x, s, 2, standardize = FALSE),
               class = "kb_error_numeric",
               regexp = "greedy objective of row 1 overflows after 1 selected")
  # with unique, an overflow confined to a selected point's objective (never
  # read again) is no error: the answer is the plain-R greedy's
  s2 <- matrix(c(2.47e153, 2.49e153), 2, 1)
  K <- ref_stein(x, s2)
  expect_true(all(is.finite(K)))
  th <- stein_thin(x, s2, 2, standardize = FALSE, unique = TRUE)
  expect_identical(th$index, ref_greedy(K, 2, unique = TRUE))
  expect_equal(th$ksd, ref_sel_path(K, th$index), tolerance = 1e-12)
})

test_that("gradient-free weights that overflow are a kb_error_numeric naming range_cap", {
  set.seed(3)
  x <- matrix(stats::rnorm(40), 20)
  s <- -x
  lq <- rep(0, 20)
  # exp(w) itself overflows
  expect_error(stein_thin_gf(x, replace(lq, 3, -800), lq, s, 5),
               class = "kb_error_numeric", regexp = "'range_cap'")
  # exp(w_i + w_j) overflows in the objective of row 3
  expect_error(suppressWarnings(
    stein_thin_gf(x, replace(lq, 3, -400), lq, s, 5)),
    class = "kb_error_numeric", regexp = "rows 3 and 3 times the weights.*'range_cap'")
  # range_cap fixes it
  th <- stein_thin_gf(x, replace(lq, 3, -400), lq, s, 5, range_cap = 50)
  expect_true(all(is.finite(th$ksd)))
  # log q - log p itself overflows
  expect_error(stein_thin_gf(x, replace(lq, 4, -1.5e308),
                             replace(lq, 4, 1.5e308), s, 5),
               class = "kb_error_numeric", regexp = "overflows at row 4")
})

test_that("thinning checks every argument before any closure runs", {
  calls <- 0
  score <- function(p) {
    calls <<- calls + 1
    -p
  }
  logd <- function(p) {
    calls <<- calls + 1
    -sum(p^2) / 2
  }
  x <- matrix(stats::rnorm(20), 10)
  lp <- -rowSums(x^2) / 2
  expect_error(stein_thin(x, score, 5, nthreads = 0), class = "kb_error_arg",
               regexp = "'nthreads'")
  expect_error(stein_thin(x, score, 5, standardize = NA),
               class = "kb_error_arg", regexp = "'standardize'")
  expect_error(stein_thin(x, score, 5, kernel = "imq"),
               class = "kb_error_arg", regexp = "'kernel'")
  expect_error(stein_thin(x * 1e200, score, 5, standardize = FALSE,
                          kernel = imq_kernel(precon = "med")),
               class = "kb_error_arg", regexp = "'x'")
  expect_error(stein_thin(x, score, 5, kernel = imq_kernel(precon = diag(3))),
               class = "kb_error_arg", regexp = "'precon'")
  expect_error(stein_thin_gf(x, logd, logd, score, 5, range_cap = -1),
               class = "kb_error_arg", regexp = "'range_cap'")
  expect_error(stein_thin_gf(x, logd, lp[-1], score, 5),
               class = "kb_error_arg", regexp = "'log_q'")
  expect_error(stein_thin_gf(x, logd, logd, -x[-1, ], 5),
               class = "kb_error_arg", regexp = "'score_q'")
  expect_error(stein_thin_gf(x, logd, logd, score, 5, kernel = "imq"),
               class = "kb_error_arg", regexp = "'kernel'")
  expect_error(stein_thin_gf(x, logd, logd, score, 5, standardize = NA),
               class = "kb_error_arg", regexp = "'standardize'")
  expect_error(stein_thin_gf(x, logd, logd, score, 5, nthreads = 0),
               class = "kb_error_arg", regexp = "'nthreads'")
  expect_error(stein_thin_gf(x, logd, gaussian_target(c(0, 0, 0)), score, 5),
               class = "kb_error_arg", regexp = "'x'.*3")
  expect_error(ksd_weights(x, score, nthreads = 0), class = "kb_error_arg",
               regexp = "'nthreads'")
  expect_error(ksd_weights(x, score, nonneg = NA), class = "kb_error_arg",
               regexp = "'nonneg'")
  expect_error(ksd_weights(x, score, kernel = gaussian_kernel(bandwidth = 1e160)),
               class = "kb_error_arg", regexp = "'bandwidth'")
  expect_identical(calls, 0)
})

test_that("thinning at extreme scales: 1e300 and 1e-300 data, d = 1, two rows", {
  set.seed(5)
  x <- matrix(stats::rnorm(60), 30)
  s <- -x
  # standardisation removes a common scale exactly (powers of two)
  for (p2 in c(2^1000, 2^-1000)) {
    expect_identical(stein_thin(x * p2, s / p2, 6)$index,
                     stein_thin(x, s, 6)$index)
  }
  # without it the median heuristic cannot serve such data: named error
  expect_error(stein_thin(x * 1e300, s, 4, standardize = FALSE,
                          kernel = imq_kernel(precon = "med")),
               class = "kb_error_arg", regexp = "'x'.*underflows")
  expect_error(stein_thin(x * 1e-300, s, 4, standardize = FALSE,
                          kernel = imq_kernel(precon = "med")),
               class = "kb_error_arg", regexp = "'x'.*overflows")
  expect_error(mmd_thin(x * 1e300, 4, standardize = FALSE), class = "kb_error_arg",
               regexp = "'x'.*median pairwise distance of [0-9.]+e\\+300")
  # d = 1 and two rows
  x1 <- matrix(c(-1, 2), 2)
  th <- stein_thin(x1, -x1, 3, standardize = FALSE)
  K <- ref_stein(x1, -x1)
  expect_identical(th$index, ref_greedy(K, 3))
  expect_equal(th$ksd, ref_sel_path(K, ref_greedy(K, 3)), tolerance = 1e-12)
  w <- ksd_weights(x1, -x1, standardize = FALSE)
  expect_equal(sum(w), 1)
  expect_equal(attr(w, "ksd"), sqrt(drop(t(w) %*% K %*% w)), tolerance = 1e-12)
})

# ---- regularised Stein thinning (Benard, Staber & Da Veiga 2023) -----------

# From the paper (Sec. 3.1): at step t the point minimising
# k_p(x, x) + lap(x) - lambda t log p(x) + 2 sum_{j < t} k_p(x, x_j),
# lap(x) = sum_k max(0, d^2 log p / dx_k^2).
ref_reg_greedy <- function(K, m, lap, logp, lambda, unique = FALSE) {
  n <- nrow(K)
  acc <- numeric(n)
  taken <- rep(FALSE, n)
  idx <- integer(m)
  for (t in seq_len(m)) {
    v <- diag(K) + lap - lambda * t * logp + 2 * acc
    if (unique) v[taken] <- Inf
    i <- which.min(v)
    idx[t] <- i
    taken[i] <- TRUE
    acc <- acc + K[, i]
  }
  idx
}

test_that("regularised Stein thinning follows the paper's greedy rule index for index", {
  skip_on_cran()
  # tg, mx, x, s, H, lp
  list2env(reg_mix_sample(250, 8), environment())
  expect_equal(lp - mean(lp), target_log_density(tg, x) -
                 mean(target_log_density(tg, x)), tolerance = 1e-10)
  for (std in c(FALSE, TRUE)) {
    K <- ref_stein(x, s, standardize = std)
    scl <- if (std) ref_standardize(x, s)$scale else c(1, 1)
    lap <- rowSums(sweep(pmax(H, 0), 2, scl^2, "*"))
    for (uq in c(FALSE, TRUE)) for (lam in list(TRUE, 0.05)) {
      m <- 40
      th <- stein_thin(x, s, m, standardize = std, unique = uq,
                       regularize = lam, log_density = lp, hessian_diag = H,
                       progress = FALSE)
      lambda <- if (isTRUE(lam)) 1 / m else lam
      want <- ref_reg_greedy(K, m, lap, lp, lambda, uq)
      expect_identical(th$index, want)
      expect_equal(th$ksd, ref_sel_path(K, want), tolerance = 1e-10)
      expect_identical(th$regularize, lambda)
      expect_identical(th$method, "regularised Stein thinning")
    }
    # log p and the Hessian from the target (finite differences of its
    # score): the same selection
    th_t <- stein_thin(x, tg, 40, standardize = std, regularize = TRUE,
                       progress = FALSE)
    expect_identical(th_t$index, ref_reg_greedy(K, 40, lap, lp, 1 / 40))
  }
  # the Laplacian term from finite differences of the score
  expect_equal(kernbayes:::laplacian_plus(
    structure(list(score = tg), class = "kb_fd_hessian"), x, NULL),
    rowSums(pmax(H, 0)), tolerance = 1e-6)
  # a one-point closure for the score and for the Hessian diagonal
  f <- function(p) drop(target_score(tg, matrix(p, 1)))
  hf <- function(p) drop(mx$hess(matrix(p, 1)))
  th_f <- stein_thin(x, f, 30, regularize = 0.1, log_density = lp,
                     hessian_diag = hf, progress = FALSE)
  K <- ref_stein(x, s, standardize = TRUE)
  lap <- rowSums(sweep(pmax(H, 0), 2, ref_standardize(x, s)$scale^2, "*"))
  expect_identical(th_f$index, ref_reg_greedy(K, 30, lap, lp, 0.1))
  # regularize = FALSE is plain Stein thinning
  expect_identical(stein_thin(x, s, 30, regularize = FALSE,
                              progress = FALSE)$index, ref_greedy(K, 30))
})

test_that("regularised Stein thinning restores the mode weights of a mixture", {
  tg <- gaussian_mixture_target(means = rbind(c(-3, 0), c(3, 0)),
                                weights = c(0.2, 0.8))
  frac <- sapply(1:5, function(seed) {
    set.seed(seed)
    x <- sample_target(tg, 5000)
    c(plain = mean(x[stein_thin(x, tg, 200, progress = FALSE)$index, 1] > 0),
      reg = mean(x[stein_thin(x, tg, 200, regularize = TRUE,
                              progress = FALSE)$index, 1] > 0))
  })
  # measured: plain 0.38-0.53 (mean 0.48), regularised 0.69-0.82 (mean 0.74)
  expect_lt(mean(frac["plain", ]), 0.6)
  expect_gt(mean(frac["reg", ]), 0.65)
  expect_true(all(frac["reg", ] > frac["plain", ]))
})

test_that("regularised Stein thinning checks its arguments before the score runs", {
  b <- reg_bad_input(2)
  x <- b$x
  s <- b$s
  f <- b$f
  e <- b$e
  e(stein_thin(x, f, 5, regularize = -1, log_density = rep(0, 30)), "regularize")
  e(stein_thin(x, f, 5, regularize = "yes"), "regularize")
  e(stein_thin(x, f, 5, regularize = NA), "regularize")
  e(stein_thin(x, f, 5, regularize = TRUE), "log_density")
  e(stein_thin(x, f, 5, regularize = TRUE, log_density = 1:3), "log_density")
  e(stein_thin(x, f, 5, regularize = TRUE, log_density = rep(0, 30),
               hessian_diag = matrix(0, 30, 3)), "hessian_diag")
  expect_identical(b$calls(), 0)
  e(stein_thin(x, s, 5, regularize = TRUE, log_density = rep(0, 30)),
    "hessian_diag")
  e(stein_thin(x, s, 5, regularize = TRUE, log_density = c(NA, rep(0, 29)),
               hessian_diag = matrix(0, 30, 2)), "log_density")
  e(stein_thin(x, s, 5, regularize = TRUE, log_density = rep(0, 30),
               hessian_diag = matrix(NA_real_, 30, 2)), "hessian_diag")
})

# ---- KSD-optimal weights: the C active-set solver (src/weights.c) ---------------

# Reference solvers shared with inst/bench/bench-weights.R: qp_compact()
# (quadprog on K + 1e-12 max(K_ii) I) and old_simplex_qp() (the previous R
# implementation of ksd_weights()).
ref_weights <- new.env()
sys.source(system.file("bench", "ref-weights.R", package = "kernbayes",
                       mustWork = TRUE), envir = ref_weights)

# Plain-R projected gradient on the simplex (sort-based projection): an
# independent feasible point that the optimum cannot beat.
pg_simplex <- function(K, iter = 3000) {
  proj <- function(v) {
    u <- sort(v, decreasing = TRUE)
    cs <- cumsum(u)
    r <- max(which(u - (cs - 1) / seq_along(u) > 0))
    pmax(v - (cs[r] - 1) / r, 0)
  }
  n <- nrow(K)
  step <- 1 / (2 * max(eigen(K, symmetric = TRUE, only.values = TRUE)$values))
  w <- rep(1 / n, n)
  for (i in seq_len(iter)) w <- proj(w - step * 2 * drop(K %*% w))
  w
}

# KKT for min w'Kw on the simplex: (Kw)_i = w'Kw on the support, >= off it.
expect_kkt <- function(K, w, tol = 1e-10) {
  w <- as.numeric(w)
  g <- drop(K %*% w)
  lam <- sum(w * g)
  sc <- max(diag(K))
  expect_true(all(w >= 0))
  expect_equal(sum(w), 1, tolerance = 1e-12)
  expect_gt(min(g - lam) / sc, -tol)
  expect_lt(max(abs(g[w > 0] - lam)) / sc, tol)
}

wobj <- function(K, w) drop(crossprod(as.numeric(w), K %*% as.numeric(w)))

test_that("the C simplex solver agrees with quadprog to 1e-8 in the objective and meets KKT", {
  skip_if_not_installed("quadprog")
  set.seed(1601)
  tg <- gaussian_target(c(0, 0))
  tm <- gaussian_mixture_target(means = rbind(c(-3, 0), c(3, 0)),
                                weights = c(0.2, 0.8))
  xg <- sample_target(tg, 300)
  xm <- sample_target(tm, 200)
  x1 <- matrix(stats::rnorm(120))
  x5 <- matrix(stats::rnorm(150 * 5), 150)
  probs <- list(
    gaussian_imq = stein_kernel_matrix(xg, tg),
    gaussian_med = stein_kernel_matrix(xg[1:150, ], tg, imq_kernel(precon = "med")),
    gaussian_rbf = stein_kernel_matrix(xg[1:150, ], tg,
                                       gaussian_kernel(precon = "med")),
    mixture = stein_kernel_matrix(xm, tm),
    mixture_std = stein_kernel_matrix(xm, tm, imq_kernel(precon = "sclmed"),
                                      standardize = TRUE),
    # exact repeats: K is singular (the solver sees them unmerged)
    duplicated = stein_kernel_matrix(xg[c(1:120, 1:40, 7, 7), ], tg),
    d1 = stein_kernel_matrix(x1, -x1),
    d1_rbf = stein_kernel_matrix(x1, -x1, gaussian_kernel(precon = "med")),
    d5 = stein_kernel_matrix(x5, -x5))
  for (nm in names(probs)) {
    K <- probs[[nm]]
    w <- kernbayes:::simplex_weights(K)
    wq <- ref_weights$qp_compact(K)
    expect_equal(wobj(K, w), wobj(K, wq), tolerance = 1e-8, label = nm)
    expect_kkt(K, w)
  }
  # on unmerged repeats only the objective is determined (how a point's
  # weight splits among its copies moves only the ridge's term), which is
  # why ksd_weights() merges repeats before solving
})

test_that("the C simplex solver agrees with the previous R implementation and beats projected gradient", {
  set.seed(1602)
  tg <- gaussian_target(c(0, 0))
  for (cfg in list(list(x = sample_target(tg, 40), k = imq_kernel()),
                   list(x = sample_target(tg, 60) + 0.3,
                        k = gaussian_kernel(precon = "med")),
                   list(x = matrix(stats::rnorm(30)), k = imq_kernel()))) {
    K <- stein_kernel_matrix(cfg$x, -cfg$x, cfg$k)
    w <- as.numeric(kernbayes:::simplex_weights(K))
    wo <- ref_weights$old_simplex_qp(K)
    expect_equal(wobj(K, w), wobj(K, wo), tolerance = 1e-10)
    expect_equal(w, wo, tolerance = 1e-6)
    expect_identical(w > 0, wo > 0)
    wp <- pg_simplex(K)
    expect_lte(wobj(K, w), wobj(K, wp) * (1 + 1e-12))
    expect_equal(wobj(K, w), wobj(K, wp), tolerance = 1e-2)
  }
})

test_that("the C simplex solver: entering batches, threads, trivial sizes, bad K", {
  set.seed(1603)
  x <- matrix(stats::rnorm(800 * 5), 800)
  K <- stein_kernel_matrix(x, -x)
  w1 <- kernbayes:::simplex_weights(K, nthreads = 1L)
  w2 <- kernbayes:::simplex_weights(K, nthreads = 2L)
  expect_identical(w1, w2)
  for (b in c(1L, 16L)) {
    wb <- kernbayes:::simplex_weights(K, batch = b)
    expect_equal(wobj(K, wb), wobj(K, w1), tolerance = 1e-10)
    expect_kkt(K, wb)
  }
  expect_equal(as.numeric(kernbayes:::simplex_weights(matrix(2, 1, 1))), 1)
  K2 <- matrix(c(1, 0, 0, 3), 2)
  expect_equal(as.numeric(kernbayes:::simplex_weights(K2)), c(0.75, 0.25),
               tolerance = 1e-10)
  # a point far better than the rest carries all the weight
  K3 <- diag(c(1, 100, 100))
  K3[2, 3] <- K3[3, 2] <- 99
  w3 <- as.numeric(kernbayes:::simplex_weights(K3))
  expect_kkt(K3, w3)
  # a repeated point entering with its copy: the ridge keeps the factor
  # positive definite; without it the refactorisation fails, named
  K4 <- matrix(c(1, 0, 0, 0, 1, 1, 0, 1, 1), 3)
  w4 <- as.numeric(kernbayes:::simplex_weights(K4))
  expect_equal(wobj(K4, w4), 0.5, tolerance = 1e-10)
  expect_equal(w4, c(0.5, 0.25, 0.25), tolerance = 1e-8)
  expect_error(kernbayes:::simplex_weights(K4, ridge = 0),
               class = "kb_error_numeric", regexp = "numerically singular")
  bad <- K2
  bad[1, 2] <- NA
  expect_error(kernbayes:::simplex_weights(bad), class = "kb_error_arg",
               regexp = "'K'")
  expect_error(kernbayes:::simplex_weights(matrix(1, 2, 3)),
               class = "kb_error_arg", regexp = "'K'")
})

test_that("ksd_weights(): memory is checked before the Stein kernel matrix is formed", {
  set.seed(1604)
  x <- matrix(stats::rnorm(400), 200)
  op <- options(kernbayes.max_memory = 1e5)
  on.exit(options(op))
  expect_error(ksd_weights(x, -x), class = "kb_error_arg",
               regexp = "'x' is too large: the Stein kernel matrix of 200 distinct points")
  options(op)
  w <- ksd_weights(x, -x)
  expect_kkt(stein_kernel_matrix(x, -x), w)
})

test_that("KSD-optimal weights as a data frame and a plot", {
  set.seed(17)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 60)
  w <- ksd_weights(x, tg, chain = rep(1:2, each = 30))
  df <- as.data.frame(w)
  expect_identical(df$weight, as.numeric(w))
  expect_identical(df$chain, attr(w, "chain"))
  expect_identical(names(df), c("point", "weight", "chain", "iteration"))
  pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(w), w)
})
