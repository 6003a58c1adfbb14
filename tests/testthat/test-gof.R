# The KSD goodness-of-fit test (R/gof.R, src/gof.c): its statistic against
# ksd(), its bootstrap against a plain-R transcription of the formulas with
# the same random weights, level and power, threads and seeds, bad input.

gof_sample <- function(n, d = 2, seed = 1) {
  set.seed(seed)
  matrix(rnorm(n * d), n, d)
}

# Plain R from the formulas (Liu et al. 2016, Chwialkowski et al. 2016):
# K the Stein matrix, W an n x B matrix of weights (one replicate a column).
ref_boot <- function(K, W, type, bootstrap) {
  n <- nrow(K)
  vapply(seq_len(ncol(W)), function(b) {
    w <- W[, b]
    tot <- 0
    for (i in seq_len(n)) for (j in seq_len(n)) {
      if (type == "U" && i == j) next
      tot <- tot + w[i] * w[j] * K[i, j]
    }
    if (bootstrap == "multinomial") n * tot else tot / n
  }, 0)
}

test_that("the statistic is n times ksd()'s U- or squared V-statistic (IMQ, Gaussian, preconditioners)", {
  x <- gof_sample(80, 3) * c(1, 2, 0.5)
  x <- x + 0.2
  s <- -x
  kernels <- list(imq = imq_kernel(), imq_med = imq_kernel(precon = "med"),
                  gauss = gaussian_kernel(precon = "med"),
                  gauss_smpcov = gaussian_kernel(precon = "smpcov"))
  for (kn in names(kernels)) {
    k <- kernels[[kn]]
    for (std in c(FALSE, TRUE)) {
      tu <- ksd_test(x, s, k, type = "U", n_boot = 9, standardize = std,
                     progress = FALSE)
      tv <- ksd_test(x, s, k, type = "V", n_boot = 9, standardize = std,
                     progress = FALSE)
      u <- 80 * ksd(x, s, k, type = "U", standardize = std)
      v <- 80 * ksd(x, s, k, standardize = std)^2
      expect_equal(unname(tu$statistic), u, tolerance = 1e-12, label = kn)
      expect_equal(unname(tv$statistic), v, tolerance = 1e-12, label = kn)
      expect_named(tu$statistic, "n KSD^2")
      expect_s3_class(tu, "htest")
      # independent draws: the multinomial bootstrap (U) and the Rademacher
      # wild one (V), unless their estimated dependence passes 1.2
      dep <- max(tu$iact) > 1.2
      expect_identical(tu$bootstrap, if (dep) "wild" else "multinomial")
      expect_identical(c(tv$bootstrap, tv$wild),
                       c("wild", if (dep) "markov" else "rademacher"))
    }
  }
})

test_that("the bootstrap statistics match a plain-R transcription with the same weights", {
  n <- 70
  x <- gof_sample(n, 2, seed = 4) + 0.3
  s <- -x
  B <- 13   # not a multiple of the packed block of 8
  for (k in list(imq_kernel(), gaussian_kernel(precon = "med"))) {
    K <- stein_kernel_matrix(x, s, k)
    # multinomial, U and V
    for (type in c("U", "V")) {
      set.seed(11)
      r <- ksd_test(x, s, k, type = type, bootstrap = "multinomial",
                    n_boot = B, progress = FALSE)
      set.seed(11)
      W <- (stats::rmultinom(B, n, rep(1 / n, n)) - 1) / n
      expect_equal(r$boot, ref_boot(K, W, type, "multinomial"),
                   tolerance = 1e-10)
      expect_equal(r$p.value, (1 + sum(r$boot >= r$statistic)) / (B + 1))
    }
    # Rademacher wild, V and U
    for (type in c("V", "U")) {
      set.seed(12)
      r <- ksd_test(x, s, k, type = type, bootstrap = "wild", n_boot = B,
                    progress = FALSE)
      set.seed(12)
      W <- matrix(ifelse(stats::runif(n * B) < 0.5, -1, 1), n, B)
      expect_equal(r$boot, ref_boot(K, W, type, "wild"), tolerance = 1e-10)
    }
    # Markov wild: W_1 = +-1, then a flip with probability change_prob
    set.seed(13)
    r <- ksd_test(x, s, k, type = "V", wild = "markov", change_prob = 0.2,
                  n_boot = B, progress = FALSE)
    set.seed(13)
    first <- ifelse(stats::runif(B) < 0.5, -1, 1)
    u <- matrix(stats::runif(n * B), n, B)
    W <- matrix(0, n, B)
    for (b in seq_len(B)) {
      W[1, b] <- first[b]
      for (t in 2:n) W[t, b] <- if (u[t, b] < 0.2) -W[t - 1, b] else W[t - 1, b]
    }
    expect_equal(r$boot, ref_boot(K, W, "V", "wild"), tolerance = 1e-10)
    expect_identical(r$change_prob, c(all = 0.2))
  }
})

test_that("a sample of more than one tile row and many replicates matches R matrix algebra", {
  n <- 203
  x <- gof_sample(n, 3, seed = 5)
  s <- -x
  K <- stein_kernel_matrix(x, s)
  set.seed(3)
  r <- ksd_test(x, s, bootstrap = "multinomial", n_boot = 101,
                progress = FALSE)
  set.seed(3)
  W <- (stats::rmultinom(101, n, rep(1 / n, n)) - 1) / n
  ref <- n * (colSums(W * (K %*% W)) - colSums(W^2 * diag(K)))
  expect_equal(r$boot, ref, tolerance = 1e-10)
})

test_that("the register-blocked bootstrap equals the previous kernel (route \"reference\") for every bootstrap, statistic and chain layout", {
  # gof_quad()'s two C kernels sum each replicate in the same order: the
  # same bits (here; the bootstrap statistics to 1e-12 where a compiler
  # contracts them differently) and the same p-values.  n = 50-500: tile
  # edges (a last tile of 1, 13, 52 rows), one and several chains.
  run <- function(route, args, seed) {
    old <- options(kernbayes.gof_route = route)
    on.exit(options(old))
    set.seed(seed)
    do.call(ksd_test, args)
  }
  cases <- list(
    list(n = 50, type = "U", bootstrap = "multinomial"),
    list(n = 129, type = "V", bootstrap = "wild", wild = "rademacher"),
    list(n = 257, type = "U", bootstrap = "wild", wild = "rademacher"),
    list(n = 500, type = "V", bootstrap = "wild", wild = "markov"),
    list(n = 181, type = "U", chains = 1),
    list(n = 308, type = "V", chains = 3),
    list(n = 244, type = "U", chains = 4, by_chain = TRUE))
  for (i in seq_along(cases)) {
    cs <- cases[[i]]
    x <- gof_sample(cs$n, 3, seed = 40 + i) + 0.05
    args <- list(x = x, score = -x, type = cs$type, n_boot = 77,
                 nthreads = 1 + i %% 2, progress = FALSE,
                 bootstrap = cs$bootstrap, wild = cs$wild,
                 chain = if (!is.null(cs$chains))
                   rep(seq_len(cs$chains), length.out = cs$n),
                 by_chain = isTRUE(cs$by_chain))
    args <- args[!vapply(args, is.null, TRUE)]
    a <- run("blocked", args, i)
    b <- run("reference", args, i)
    tests <- if (isTRUE(cs$by_chain)) {
      Map(list, c(list(a$pooled), a$chains), c(list(b$pooled), b$chains))
    } else list(list(a, b))
    for (ab in tests) {
      expect_identical(ab[[1]]$p.value, ab[[2]]$p.value)
      expect_identical(ab[[1]]$statistic, ab[[2]]$statistic)
      expect_equal(ab[[1]]$boot, ab[[2]]$boot, tolerance = 1e-12)
    }
    if (isTRUE(cs$chains > 1)) {
      expect_identical(if (isTRUE(cs$by_chain)) a$pooled$wild else a$wild,
                       "markov")
    }
  }
  expect_error(run("fast", list(x = gof_sample(20), score = -gof_sample(20),
                                n_boot = 5, progress = FALSE), 1),
               "kernbayes.gof_route")
})

test_that("results are identical on 1 and 2 threads, with and without progress, and reproducible under set.seed()", {
  x <- gof_sample(300, 2, seed = 6)
  run <- function(nt, type = "U", progress = FALSE) {
    set.seed(21)
    ksd_test(x, -x, type = type, n_boot = 200, nthreads = nt,
             progress = progress)
  }
  for (type in c("U", "V")) {
    a <- run(1, type)
    expect_identical(run(2, type)$boot, a$boot)
    expect_identical(run(1, type)$boot, a$boot)
    expect_identical(run(2, type)$p.value, a$p.value)
  }
  expect_identical(suppressMessages(run(1, progress = TRUE))$boot, run(1)$boot)
  set.seed(1)
  a <- ksd_test(x, -x, n_boot = 50, progress = FALSE)
  b <- ksd_test(x, -x, n_boot = 50, progress = FALSE)
  expect_false(identical(a$boot, b$boot))
})

test_that("x and score as everywhere else: a kb_target, a closure, a data frame", {
  tg <- gaussian_target(c(0, 0))
  x <- gof_sample(60, 2, seed = 7)
  run <- function(...) {
    set.seed(2)
    ksd_test(..., n_boot = 30, progress = FALSE)
  }
  ref <- run(x, -x)
  for (r in list(run(x, tg), run(x, function(z) -z),
                 run(as.data.frame(x), -x))) {
    expect_equal(r$statistic, ref$statistic, tolerance = 1e-12)
    expect_equal(r$boot, ref$boot, tolerance = 1e-12)
  }
})

test_that("print and plot", {
  x <- gof_sample(50, 2, seed = 8)
  set.seed(1)
  r <- ksd_test(x, -x, n_boot = 20, progress = FALSE)
  out <- capture.output(print(r))
  expect_true(any(grepl("KSD goodness-of-fit test", out)))
  expect_true(any(grepl("kernel: IMQ", out)))
  expect_true(any(grepl("n KSD^2", out, fixed = TRUE)))
  f <- tempfile(fileext = ".pdf")
  grDevices::pdf(f)
  expect_identical(plot(r), r)
  grDevices::dev.off()
  unlink(f)
})

test_that("level under the null: i.i.d. N(0, I_2), n = 100, 300 data sets", {
  skip_on_cran()
  tg <- gaussian_target(c(0, 0))
  for (cfg in list(list(type = "U", bootstrap = "multinomial"),
                   list(type = "V", bootstrap = "wild"))) {
    set.seed(100)
    p <- vapply(1:300, function(r) {
      x <- matrix(rnorm(200), 100, 2)
      ksd_test(x, tg, type = cfg$type, bootstrap = cfg$bootstrap,
               n_boot = 200, progress = FALSE)$p.value
    }, 0)
    rate <- mean(p <= 0.05)
    expect_gte(rate, 0.015, label = paste(cfg$type, cfg$bootstrap))
    expect_lte(rate, 0.095, label = paste(cfg$type, cfg$bootstrap))
  }
})

test_that("power: a mean shift of 0.5 and a Student-t(3) sample against N(0, I_2), n = 200", {
  skip_on_cran()
  tg <- gaussian_target(c(0, 0))
  set.seed(200)
  for (alt in c("shift", "t3")) {
    for (type in c("U", "V")) {
      p <- vapply(1:20, function(r) {
        x <- if (alt == "shift") matrix(rnorm(400), 200, 2) + 0.5 else
          matrix(stats::rt(400, df = 3), 200, 2)
        ksd_test(x, tg, type = type, n_boot = 200, progress = FALSE)$p.value
      }, 0)
      # measured over 100 data sets: shift 1.00 (U and V), t3 0.90 (U),
      # 0.94 (V)
      expect_gte(mean(p <= 0.05), if (alt == "shift") 0.95 else 0.7,
                 label = paste(alt, type))
    }
  }
})

# An AR(1) chain with exact N(0, 1) margins: x_1 ~ N(0, 1), x_t = a x_{t-1}
# + sqrt(1 - a^2) e_t.
ar1_chain <- function(n, a) {
  e <- rnorm(n)
  x <- numeric(n)
  x[1] <- e[1]
  for (t in 2:n) x[t] <- a * x[t - 1] + sqrt(1 - a^2) * e[t]
  matrix(x, n, 1)
}

test_that("dependent samples: the Markov wild bootstrap holds its level on an AR(1) chain and Rademacher does not", {
  skip_on_cran()
  # AR(1) coefficient 0.5 (integrated autocorrelation time 3), n = 200,
  # target N(0, 1), V-statistic, 200 replicates, level 0.05, 300 chains.
  # inst/experiments/gof-dependent.R measured over 300 chains: Markov with
  # the default flip probability 0.050, Rademacher 0.233 (independent signs
  # ignore the dependence and reject about a quarter of the time); with
  # this seed 0.047 and 0.280.
  set.seed(300)
  p <- vapply(1:300, function(r) {
    x <- ar1_chain(200, 0.5)
    c(markov = ksd_test(x, -x, type = "V", wild = "markov", n_boot = 200,
                        progress = FALSE)$p.value,
      rademacher = ksd_test(x, -x, type = "V", bootstrap = "wild",
                            n_boot = 200, progress = FALSE)$p.value)
  }, numeric(2))
  rate <- rowMeans(p <= 0.05)
  expect_gte(rate[["markov"]], 0.015)
  expect_lte(rate[["markov"]], 0.095)
  expect_gt(rate[["rademacher"]], 0.15)
})

test_that("the default flip probability follows the sample's dependence, chain by chain", {
  set.seed(31)
  x <- ar1_chain(2000, 0.5)
  r <- ksd_test(x, -x, type = "V", wild = "markov", n_boot = 20,
                progress = FALSE)
  # integrated autocorrelation time of an AR(1) chain: (1 + a) / (1 - a)
  expect_equal(unname(r$iact), 3, tolerance = 0.25)
  expect_equal(r$change_prob, 1 / (1 + sqrt(2000 * r$iact)))
  # two chains interleaved in the rows: each is followed in its own order,
  # each with its own flip probability
  ch <- rep(1:2, 1000)
  x2 <- x
  x2[ch == 1, ] <- ar1_chain(1000, 0.9)
  x2[ch == 2, ] <- ar1_chain(1000, 0.6)
  r2 <- ksd_test(x2, -x2, type = "V", wild = "markov", n_boot = 20,
                 chain = ch, progress = FALSE)
  expect_named(r2$iact, c("1", "2"))
  expect_equal(unname(r2$iact), c(19, 4), tolerance = 0.3)
  expect_equal(r2$change_prob, 1 / (1 + sqrt(1000 * r2$iact)))
  # the iact of each chain is Geyer's, the largest over points and scores
  expect_equal(unname(r2$iact[1]),
               kernbayes:::gof_iact(x2[ch == 1, 1]))
  # the multipliers: one sign chain per chain, each started afresh
  set.seed(5)
  a <- kernbayes:::gof_weights(10, 3, "wild", "markov", 0.2)
  set.seed(5)
  expect_identical(kernbayes:::gof_weights(10, 3, "wild", "markov", 0.2,
                               list(all = 1:10)), a)
  W <- kernbayes:::gof_weights(10, 400, "wild", "markov", 1e-12,
                   list(seq(1, 10, 2), seq(2, 10, 2)))
  expect_true(all(W[seq(1, 10, 2), ] == rep(W[1, ], each = 5)))
  expect_true(all(W[seq(2, 10, 2), ] == rep(W[2, ], each = 5)))
  expect_gt(mean(W[1, ] != W[2, ]), 0.4)
})

test_that("gof_iact: integrated autocorrelation times of AR(1) series", {
  set.seed(32)
  expect_equal(kernbayes:::gof_iact(ar1_chain(5000, 0.8)[, 1]), 9,
               tolerance = 0.2)
  expect_lt(kernbayes:::gof_iact(rnorm(5000)), 1.2)
  # n times the FFT length overflowed an integer beyond n = 32767
  expect_lt(kernbayes:::gof_iact(rnorm(40000)), 1.2)
  expect_identical(kernbayes:::gof_iact(rep(1, 10)), 1)
  expect_identical(kernbayes:::gof_iact((-1)^(1:100)), 1)
})

test_that("bad input: every argument checked, naming it, before the score closure runs", {
  x <- gof_sample(20, 2)
  calls <- 0
  sc <- function(z) { calls <<- calls + 1; -z }
  bad <- list(
    type = list(type = "W"), bootstrap = list(bootstrap = "perm"),
    bootstrap = list(bootstrap = NA), n_boot = list(n_boot = 0),
    n_boot = list(n_boot = 2.5), n_boot = list(n_boot = NA),
    wild = list(wild = "gauss"), change_prob = list(change_prob = 0),
    change_prob = list(change_prob = 1), change_prob = list(change_prob = NA),
    change_prob = list(change_prob = 0.1, wild = "rademacher"),
    change_prob = list(change_prob = 0.1, bootstrap = "multinomial"),
    standardize = list(standardize = NA), nthreads = list(nthreads = 0),
    progress = list(progress = "yes"), kernel = list(kernel = "imq"),
    kernel = list(kernel = NULL), chain = list(chain = 1:3))
  for (i in seq_along(bad)) {
    arg <- names(bad)[i]
    err <- tryCatch(do.call(ksd_test, c(list(x, sc), bad[[i]])),
                    error = function(e) e)
    expect_s3_class(err, "kb_error_arg")
    expect_match(conditionMessage(err), paste0("'", arg, "'"), fixed = TRUE,
                 label = arg)
  }
  expect_identical(calls, 0)
  expect_error(ksd_test(x[1, , drop = FALSE], -x[1, , drop = FALSE]),
               class = "kb_error_arg")
  expect_error(ksd_test(x, -x[-1, ]), class = "kb_error_arg")
  expect_error(ksd_test(x), class = "kb_error_arg")
  old <- options(kernbayes.max_memory = 1e5)
  on.exit(options(old))
  expect_error(ksd_test(x, sc, n_boot = 1000), "n_boot",
               class = "kb_error_arg")
  # the error names the route that fits
  expect_error(ksd_test(x, sc, n_boot = 1000), "test = \"incomplete\"",
               class = "kb_error_arg")
  expect_identical(calls, 0)
  options(old)
  xb <- x
  xb[7, ] <- c(1e155, 0)
  expect_error(ksd_test(xb, -xb, n_boot = 10, progress = FALSE),
               class = "kb_error_numeric")
})

# ---- the default bootstrap follows the input (issue 30) ----------------------

# n rows of a random-walk Metropolis chain on N(0, I_d), started at a draw
# from the target: exact up to its dependence.
rwm_rows <- function(n, d = 2, step = 1) {
  tg <- gaussian_target(rep(0, d))
  rwm(tg, x0 = rnorm(d), n_iter = n, step_size = step)$x
}

test_that("default bootstrap: independence for independent draws, Markov for chains", {
  tg <- gaussian_target(c(0, 0))
  set.seed(41)
  x <- sample_target(tg, 300)
  r <- ksd_test(x, tg, n_boot = 20, progress = FALSE)
  expect_identical(r$bootstrap, "multinomial")
  expect_lte(r$iact[[1]], 1.2)
  expect_match(r$method, "<= 1.2, independent draws", fixed = TRUE)
  rv <- ksd_test(x, tg, type = "V", n_boot = 20, progress = FALSE)
  expect_identical(c(rv$bootstrap, rv$wild), c("wild", "rademacher"))
  # a chain given as a plain matrix: its serial dependence is found
  ch <- rwm_rows(300)
  r <- ksd_test(ch, tg, n_boot = 20, progress = FALSE)
  expect_identical(c(r$bootstrap, r$wild), c("wild", "markov"))
  expect_gt(r$iact[[1]], 1.2)
  expect_match(r$method, "> 1.2, a dependent sample", fixed = TRUE)
  expect_equal(r$change_prob, c(all = 1 / (1 + sqrt(300 * r$iact[[1]]))))
  # labelled input is taken as chains whatever its dependence
  lab <- rep(1:2, each = 150)
  for (type in c("U", "V")) {
    r <- ksd_test(x, tg, type = type, chain = lab, n_boot = 20,
                  progress = FALSE)
    expect_identical(c(r$bootstrap, r$wild), c("wild", "markov"))
    expect_match(r$method, "2 chains, multipliers along each", fixed = TRUE)
    expect_named(r$change_prob, c("1", "2"))
  }
  # a chain from rwm(): one chain with its own scores
  set.seed(42)
  kc <- rwm(tg, x0 = c(0, 0), n_iter = 200, step_size = 0.5)
  r <- ksd_test(kc, n_boot = 20, progress = FALSE)
  expect_identical(r$wild, "markov")
  expect_match(r$method, "one chain", fixed = TRUE)
  expect_equal(r$statistic, ksd_test(kc$x, kc$score, n_boot = 5,
                                     progress = FALSE)$statistic)
})

test_that("an explicit bootstrap wins, and its method line says when it assumes independence", {
  tg <- gaussian_target(c(0, 0))
  set.seed(43)
  ch <- rwm_rows(300)
  r <- ksd_test(ch, tg, bootstrap = "multinomial", n_boot = 20,
                progress = FALSE)
  expect_identical(r$bootstrap, "multinomial")
  expect_match(r$method, "as requested; it assumes independent draws",
               fixed = TRUE)
  r <- ksd_test(ch, tg, bootstrap = "wild", n_boot = 20, progress = FALSE)
  expect_identical(r$wild, "rademacher")
  # wild or change_prob alone ask for the wild bootstrap
  r <- ksd_test(ch, tg, wild = "markov", n_boot = 20, progress = FALSE)
  expect_identical(c(r$bootstrap, r$wild), c("wild", "markov"))
  expect_match(r$method, "as requested)", fixed = TRUE)
  r <- ksd_test(ch, tg, change_prob = 0.1, n_boot = 20, progress = FALSE)
  expect_identical(c(r$bootstrap, r$wild), c("wild", "markov"))
  expect_identical(r$change_prob, c(all = 0.1))
  x <- sample_target(tg, 300)
  r <- ksd_test(x, tg, bootstrap = "multinomial", n_boot = 20,
                progress = FALSE)
  expect_match(r$method, if (max(r$iact) > 1.2) "as requested; it assumes"
               else "as requested)", fixed = TRUE)
})

# Integrated autocorrelation time from its definition, written apart from
# gof_iact(): autocorrelations by direct sums, Geyer's initial positive
# sequence of pair sums, the largest over the columns of x and of -x (the
# score of N(0, I) is -x, whose autocorrelations are those of x).
gof_iact_ref <- function(x) {
  one <- function(v) {
    n <- length(v)
    v <- v - mean(v)
    g <- vapply(0:(n - 1), function(h) sum(v[1:(n - h)] * v[(1 + h):n]) / n, 0)
    rho <- g / g[1]
    tot <- 0
    for (k in seq_len(n %/% 2)) {
      p <- rho[2 * k - 1] + rho[2 * k]
      if (p <= 0) break
      tot <- tot + p
    }
    max(1, 2 * tot - 1)
  }
  max(apply(x, 2, one))
}

test_that("the Markov bootstrap takes every score form and gives one answer", {
  skip_if_not_installed("posterior")
  tg <- gaussian_target(c(0, 0))
  set.seed(44)
  x <- rbind(rwm_rows(150), rwm_rows(150))
  lab <- rep(1:2, each = 150)
  s <- -x
  # draws objects of points and of gradients (array: iterations x chains x
  # variables)
  arr <- function(m) {
    a <- array(0, c(150, 2, 2), dimnames = list(NULL, NULL, c("a", "b")))
    for (c in 1:2) a[, c, ] <- m[lab == c, ]
    posterior::as_draws_array(a)
  }
  forms <- list(
    matrix = list(x, s, lab),
    target = list(x, tg, lab),
    closure = list(x, function(z) -z, lab),
    draws = list(arr(x), arr(s), NULL))
  for (bs in list(list(), list(bootstrap = "multinomial"),
                  list(bootstrap = "wild"), list(wild = "markov"))) {
    res <- lapply(forms, function(f) {
      set.seed(7)
      do.call(ksd_test, c(list(f[[1]], f[[2]], chain = f[[3]], n_boot = 30,
                               progress = FALSE), bs))
    })
    for (k in names(forms)[-1]) {
      expect_equal(res[[k]]$statistic, res$matrix$statistic,
                   tolerance = 1e-12, label = k)
      expect_equal(res[[k]]$boot, res$matrix$boot, tolerance = 1e-12,
                   label = k)
      expect_equal(unname(res[[k]]$iact), unname(res$matrix$iact),
                   label = k)
      expect_identical(res[[k]]$p.value, res$matrix$p.value, label = k)
    }
  }
  # an unlabelled chain with a target or a closure (these failed in the IACT
  # step before)
  for (sc in list(tg, function(z) -z)) {
    r <- ksd_test(x[lab == 1, ], sc, wild = "markov", n_boot = 20,
                  progress = FALSE)
    expect_equal(unname(r$iact), unname(gof_iact_ref(x[lab == 1, ])))
  }
})

test_that("MCMC output of the right target: the default holds the level where the multinomial bootstrap fails", {
  skip_on_cran()
  # 40 random-walk Metropolis chains of 1000 iterations on N(0, I_2), step
  # 0.4 (acceptance about 0.8, integrated autocorrelation time about 30),
  # 200 replicates, level 0.05.  The issue's report: the multinomial
  # bootstrap rejected 20 of 20 such chains.  Under the null the default's
  # rejections are Binomial(40, <= ~0.05): P(X >= 7) < 0.01 at 0.05.
  tg <- gaussian_target(c(0, 0))
  set.seed(45)
  p <- vapply(1:40, function(i) {
    x <- rwm_rows(1000, step = 0.4)
    c(default = ksd_test(x, tg, n_boot = 200, progress = FALSE)$p.value,
      multinomial = ksd_test(x, tg, bootstrap = "multinomial", n_boot = 200,
                             progress = FALSE)$p.value)
  }, numeric(2))
  rej <- rowSums(p <= 0.05)
  expect_lte(rej[["default"]], 6)
  expect_gte(rej[["multinomial"]], 30)
  # power: the same kind of chains, on a target whose mean is off by 0.5
  # (about 2.7 standard errors of a chain's mean in each coordinate)
  set.seed(46)
  pw <- vapply(1:20, function(i) {
    x <- rwm_rows(1000, step = 0.4) + 0.5
    ksd_test(x, tg, n_boot = 200, progress = FALSE)$p.value
  }, 0)
  expect_gte(sum(pw <= 0.05), 14)
})

test_that("by_chain: a test per chain and the pooled one, each as ksd_test on its rows", {
  tg <- gaussian_target(c(0, 0))
  set.seed(47)
  x <- rbind(rwm_rows(200), rwm_rows(120), rwm_rows(160))
  lab <- rep(c(3, 1, 2), c(200, 120, 160))   # labels need not come in order
  B <- 25
  set.seed(8)
  r <- ksd_test(x, tg, chain = lab, by_chain = TRUE, n_boot = B,
                standardize = FALSE, progress = FALSE)
  expect_s3_class(r, "kb_ksd_test_by_chain")
  expect_named(r$chains, c("1", "2", "3"))
  set.seed(8)
  pooled <- ksd_test(x, tg, chain = lab, n_boot = B, standardize = FALSE,
                     progress = FALSE)
  expect_identical(r$pooled$boot, pooled$boot)
  # the chains' bootstraps follow the pooled one's random numbers (a sign
  # and n uniforms per replicate), in label order
  for (c in c("1", "2", "3")) {
    rows <- which(lab == as.numeric(c))
    one <- ksd_test(x[rows, ], tg, wild = "markov", n_boot = B,
                    standardize = FALSE, progress = FALSE, chain = rep(1, length(rows)))
    expect_equal(r$chains[[c]]$statistic, one$statistic, tolerance = 1e-12)
    expect_equal(unname(r$chains[[c]]$iact), unname(one$iact))
    expect_equal(unname(r$chains[[c]]$change_prob), unname(one$change_prob))
  }
  set.seed(8)
  stats::runif(B + nrow(x) * B)
  stats::runif(B + 120 * B)
  rows2 <- which(lab == 2)
  two <- ksd_test(x[rows2, ], tg, wild = "markov", n_boot = B,
                  standardize = FALSE, progress = FALSE)
  expect_equal(r$chains[["2"]]$boot, two$boot, tolerance = 1e-12)
  df <- as.data.frame(r)
  expect_identical(names(df), c("chain", "n", "statistic", "estimate", "iact",
                                "change_prob", "p_value"))
  expect_identical(df$chain, c("1", "2", "3", "all"))
  expect_identical(df$n, c(120L, 160L, 200L, 480L))
  expect_equal(df$p_value[4], r$pooled$p.value)
  expect_equal(df$iact[1:3], unname(r$pooled$iact))
  expect_true(is.na(df$iact[4]))
  expect_output(print(r), "KSD goodness-of-fit test per chain")
  expect_output(print(r), "all")
})

test_that("bad input of the chain checks: unlabelled by_chain, one-row chains, chains shorter than their dependence", {
  tg <- gaussian_target(c(0, 0))
  set.seed(48)
  x <- rwm_rows(100)
  calls <- 0
  sc <- function(z) { calls <<- calls + 1; -z }
  e <- tryCatch(ksd_test(x, sc, by_chain = TRUE, progress = FALSE),
                error = function(e) e)
  expect_s3_class(e, "kb_error_arg")
  expect_match(conditionMessage(e), "'by_chain' needs chain labels")
  e <- tryCatch(ksd_test(x, sc, by_chain = NA), error = function(e) e)
  expect_s3_class(e, "kb_error_arg")
  lab <- c(rep(1, 99), 2)
  e <- tryCatch(ksd_test(x, sc, chain = lab, progress = FALSE),
                error = function(e) e)
  expect_s3_class(e, "kb_error_arg")
  expect_match(conditionMessage(e), "'x' has a chain of one row (chain 2)",
               fixed = TRUE)
  e <- tryCatch(ksd_test(x, sc, chain = lab, by_chain = TRUE,
                         bootstrap = "multinomial", progress = FALSE),
                error = function(e) e)
  expect_match(conditionMessage(e), "'by_chain' has a chain of one row",
               fixed = TRUE)
  expect_identical(calls, 0)
  # the multinomial bootstrap pools the rows: a one-row chain is fine there
  expect_s3_class(ksd_test(x, -x, chain = lab, bootstrap = "multinomial",
                           n_boot = 5, progress = FALSE), "kb_ksd_test")
  # a chain too short for its integrated autocorrelation time (a ramp of
  # 40 rows: time about 14, under 3 effective draws)
  y <- rbind(x, matrix(seq(0, 1, length.out = 40), 40, 2) + rnorm(80, sd = 0.01))
  lab <- rep(1:2, c(100, 40))
  e <- tryCatch(ksd_test(y, -y, chain = lab, n_boot = 5, progress = FALSE),
                error = function(e) e)
  expect_s3_class(e, "kb_error_arg")
  expect_match(conditionMessage(e), "'x' has a chain too short for its integrated autocorrelation time (chain 2: 40 rows",
               fixed = TRUE)
})

test_that("a KSD test's table, summary and per-chain plot", {
  set.seed(11)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 120)
  tt <- ksd_test(x, tg, n_boot = 50, progress = FALSE)
  df <- as.data.frame(tt)
  expect_identical(names(df), c("n", "statistic", "estimate", "n_boot",
                                "p_value", "method"))
  expect_identical(df$p_value, tt$p.value)
  expect_identical(df$statistic, unname(tt$statistic))
  expect_identical(summary(tt), df)
  tc <- ksd_test(x, tg, n_boot = 50, chain = rep(1:2, each = 60),
                 by_chain = TRUE, progress = FALSE)
  expect_identical(summary(tc), as.data.frame(tc))
  pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(tc), tc)
})
