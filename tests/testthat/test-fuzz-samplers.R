# Robustness and correctness audit of the samplers and targets (mala, rwm,
# the built-in targets, Goodwin, ksdt_sample, sp_mcmc, ksdt_chains,
# stein_points): edge sizes, misbehaving closures, extreme steps, bad input.
# Numbers are checked against plain-R transcriptions of the formulas of
# DESIGN.md and the man pages written for this file (fzm_*: no helper shared
# with the C code or other test files).

# ---- plain-R reference -------------------------------------------------------

# One RWM or MALA chain with a fixed step, drawing from R's generator in the
# order ?rwm's sampler does: d normals, then (unless the proposal has log
# density -Inf, or is accepted outright) one uniform; the closures are
# called in the same order (log p at the proposal, then for MALA its score;
# RWM takes the score of each new state for the output, once).
fzm_chain <- function(ld, sc, x0, n, h, mala = TRUE) {
  x <- x0
  lp <- ld(x)
  s <- if (mala) sc(x)
  out <- matrix(NA_real_, n, length(x0))
  acc <- 0
  for (i in seq_len(n)) {
    z <- stats::rnorm(length(x))
    y <- if (mala) x + h^2 / 2 * s + h * z else x + h * z
    lpy <- ld(y)
    la <- -Inf
    if (lpy > -Inf) {
      la <- lpy - lp
      if (mala) {
        sy <- sc(y)
        la <- la - sum((x - y - h^2 / 2 * sy)^2) / (2 * h^2) +
          sum((y - x - h^2 / 2 * s)^2) / (2 * h^2)
      }
    }
    if (la >= 0 || log(stats::runif(1)) < la) {
      x <- y
      lp <- lpy
      s <- if (mala) sy
      acc <- acc + 1
    }
    if (is.null(s)) s <- sc(x)
    out[i, ] <- x
  }
  list(x = out, accept_rate = acc / n)
}

# ---- closures that draw random numbers ----------------------------------------

test_that("a closure drawing from R's generator continues the sampler's stream (no replayed numbers)", {
  # the closures draw one uniform per call (as a Monte Carlo integral
  # inside a log density would); they used to restart from the state at
  # the start of the .Call and replay the sampler's own numbers, which
  # biased the chain (RWM on N(0, 1): variance 0.81 over 20000 iterations)
  draws <- numeric(0)
  ld <- function(x) {
    draws[length(draws) + 1L] <<- stats::runif(1)
    -sum(x^2) / 2
  }
  sc <- function(x) {
    draws[length(draws) + 1L] <<- stats::runif(1)
    -x
  }
  tg <- kb_target(ld, sc, dim = 2)
  for (mala in c(TRUE, FALSE)) {
    f <- if (mala) kernbayes::mala else rwm
    set.seed(41)
    ch <- f(tg, c(0.3, -0.2), 60, step_size = 0.9, progress = FALSE)
    u_pkg <- stats::runif(1)
    d_pkg <- draws
    draws <- numeric(0)
    set.seed(41)
    rf <- fzm_chain(ld, sc, c(0.3, -0.2), 60, 0.9, mala)
    u_ref <- stats::runif(1)
    expect_equal(ch$x, rf$x, tolerance = 1e-12, ignore_attr = TRUE)
    expect_identical(ch$accept_rate, rf$accept_rate)
    expect_identical(d_pkg, draws)
    expect_identical(u_pkg, u_ref)
    expect_false(anyDuplicated(d_pkg) > 0)
    draws <- numeric(0)
  }
  # ksdt_sample() runs the same sampler: its chain is rwm()'s
  set.seed(42)
  ch <- rwm(tg, c(0.3, -0.2), 40, step_size = 0.9, progress = FALSE)
  set.seed(42)
  ks <- ksdt_sample(tg, c(0.3, -0.2), 40, sampler = "rwm", step_size = 0.9,
                    kernel = imq_kernel(precon = "id"), progress = FALSE)
  expect_equal(ks$points, ch$x[ks$index, , drop = FALSE], ignore_attr = TRUE)
})

# ---- step sizes ---------------------------------------------------------------

test_that("MALA with a tiny step accepts (h^2 underflowed: every ratio was 0/0)", {
  tg <- gaussian_target(c(0, 0))
  for (h in c(1e-200, 1e-170, 1e-158)) {
    set.seed(43)
    # away from 0 the proposal rounds to the state: log alpha is exactly 0
    ch <- mala(tg, c(0.5, -0.3), 30, step_size = h, progress = FALSE)
    expect_identical(ch$accept_rate, 1)
    expect_identical(ch$x[30, ], c(0.5, -0.3))
    # at 0 it moves by h z, accepted (alpha = exp(O(h^2)))
    set.seed(43)
    ch <- mala(tg, c(0, 0), 30, step_size = h, progress = FALSE)
    expect_gt(ch$accept_rate, 0.9)
    expect_true(all(ch$x[30, ] != 0) && all(abs(ch$x) < 50 * h))
  }
})
