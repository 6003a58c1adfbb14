# Kernel goodness-of-fit tests: the KSD test with bootstrap p-values.

#' KSD goodness-of-fit test
#'
#' Tests whether a sample comes from the target whose score is given, with
#' the kernelized Stein discrepancy as statistic and a bootstrap for its
#' null distribution.
#'
#' The statistic is \eqn{T = n\,\mathrm{KSD}^2} under exactly the kernel
#' and conventions of [ksd()]: for `type = "U"`, \eqn{n U_n} with
#' \eqn{U_n = \frac{1}{n(n-1)}\sum_{i \ne j} k_p(x_i, x_j)} (`n *
#' ksd(x, score, kernel, type = "U")`, which can be negative); for `type =
#' "V"`, \eqn{n V_n} with \eqn{V_n = \frac{1}{n^2}\sum_{i,j} k_p(x_i, x_j)}
#' (`n * ksd(x, score, kernel)^2`).
#'
#' Bootstraps (each replicate a quadratic form \eqn{w^\top K_p w}, the
#' diagonal left out for `type = "U"` and kept for `"V"`):
#' * `"multinomial"` (Liu, Lee and Jordan 2016, Section 4; the bootstrap
#'   of degenerate U-statistics of Arcones and Giné 1992 and Hušková and
#'   Janssen 1993): counts \eqn{(c_1, \dots, c_n)} multinomial with \eqn{n}
#'   trials and probabilities \eqn{1/n}, weights \eqn{w_i = c_i / n - 1/n},
#'   and \eqn{T^* = n \sum_{i \ne j} w_i w_j k_p(x_i, x_j)} (for `"V"` the
#'   sum includes \eqn{i = j}). Default for `type = "U"`.
#' * `"wild"` (Chwialkowski, Strathmann and Gretton 2016, Section 2.2):
#'   multipliers \eqn{W_i \in \{-1, 1\}} and \eqn{T^* = \frac{1}{n}
#'   \sum_{i,j} W_i W_j k_p(x_i, x_j)} (for `"U"` the sum leaves out
#'   \eqn{i = j}). Default for `type = "V"`. With `wild = "rademacher"`
#'   the \eqn{W_i} are independent signs (independent samples); with
#'   `wild = "markov"` they are a Markov chain of signs, \eqn{W_1 = \pm 1}
#'   with probability 1/2 and \eqn{W_t = -W_{t-1}} with probability
#'   `change_prob`, else \eqn{W_t = W_{t-1}}, for a dependent sample such
#'   as MCMC output, run along the iterations of each chain (a fresh sign at
#'   the start of each chain). See 'Dependent samples'.
#'
#' The p-value is \eqn{(1 + \#\{b: T^*_b \ge T\}) / (B + 1)} for \eqn{B =}
#' `n_boot` replicates. All random numbers are drawn in R (set a seed with
#' [set.seed()] for a reproducible result); the result does not depend on
#' `nthreads`.
#'
#' The Stein matrix is never stored: it is evaluated once, in tiles of
#' 64 x 64 pairs of its lower triangle, and each tile is applied to all
#' replicates while it is in cache (in C, on `nthreads` threads), so memory
#' is \eqn{O(n B)} for the weights and time about \eqn{n^2 B} flops.
#'
#' @section Dependent samples:
#' Independent signs ignore the autocorrelation of a chain and make the test
#' far too liberal: on AR(1) chains with exact N(0, 1) margins (target N(0,
#' 1), V-statistic, level 0.05) Rademacher multipliers reject at a rate of
#' 0.23 (n = 200) and 0.28 (n = 1000) at AR coefficient 0.5, and 0.84 and
#' 0.87 at 0.9. Markov multipliers keep the products \eqn{W_s W_t} of nearby
#' iterations positive, so the bootstrap keeps the dependence the statistic
#' has. The theory (Chwialkowski, Sejdinovic and Gretton 2014;
#' Chwialkowski et al. 2016, Section 2.2) asks for a flip probability
#' \eqn{a_n \to 0} with \eqn{n a_n \to \infty}: the correlation length
#' \eqn{l = (1 - a_n) / a_n} of the signs must grow, but more slowly than
#' \eqn{n}. Too short a length is liberal (it ignores the dependence beyond
#' it); too long is conservative (\eqn{T^*} then copies \eqn{T}: a fixed
#' 0.02 rejected at 0.005 at n = 200). The authors' experiments used 0.1 on
#' chains thinned to a lag-one autocorrelation near 0.5; as a default, 0.1
#' rejects at 0.07-0.11 at coefficient 0.5 and 0.28-0.29 at 0.9, and
#' \eqn{n^{-1/2}} at 0.047-0.060 and 0.15-0.24. Centred multipliers
#' (\eqn{W_t - \bar W}, the 2014 paper's second version) raise the power
#' but also the level (0.08-0.12 at coefficient 0.5), and the Stein kernel
#' has mean zero under the target, so they are not used.
#'
#' The default `change_prob = NULL` therefore adapts to the sample: \eqn{l
#' = \sqrt{m \tau}} (at least 1) and `change_prob` \eqn{= 1 / (1 + l)},
#' where \eqn{m} is the (mean) length of the chains and \eqn{\tau} the
#' largest integrated autocorrelation time over the columns of the points
#' and of their scores (Geyer's initial positive sequence estimate, within
#' each chain, averaged over the chains; returned as `iact`). The
#' \eqn{\sqrt{m}} meets the rate above, and balancing the bias
#' (\eqn{\propto \tau / l}) and the noise (\eqn{\propto l / m}) of the
#' bootstrap's long-run variance gives \eqn{l \propto \sqrt{m \tau}}.
#' Measured with inst/experiments/gof-dependent.R (300 chains per cell, 200
#' at n = 5000; Monte Carlo standard error about 0.013; the table is
#' `system.file("extdata", "gof-dependent.csv", package = "kernbayes")`):
#' rejection rate under the null 0.050, 0.063 and 0.030 (n = 200, 1000,
#' 5000) at coefficient 0.5, and 0.037, 0.043 and 0.045 at 0.9, the only
#' rule measured that held the level in every case; power against a mean
#' shift of 2.5 standard errors of the chain's mean 0.59 and 0.65 (n = 200,
#' 1000) at 0.5, 0.40 and 0.57 at 0.9 (the rules with more power also
#' rejected too often under the null). With independent points
#' (\eqn{\tau \approx 1}) the flip probability is about \eqn{1 / (1 +
#' \sqrt{n})}: use `wild = "rademacher"` there. On a short chain that mixes
#' slowly (a few dozen effective draws) the test has little power: thin
#' less or run longer.
#'
#' @inheritParams ksd
#' @param type `"U"` (default; the U-statistic) or `"V"`.
#' @param bootstrap `"multinomial"` or `"wild"`; `NULL` (default):
#'   `"multinomial"` for `type = "U"`, `"wild"` for `type = "V"`.
#' @param n_boot Number of bootstrap replicates.
#' @param wild Multipliers of the wild bootstrap: `"rademacher"` (default)
#'   or `"markov"`; only used with `bootstrap = "wild"`.
#' @param change_prob Flip probability of the Markov multipliers, in (0, 1);
#'   `NULL` (default): \eqn{1 / (1 + \sqrt{m \tau})} for chains of length
#'   \eqn{m} and integrated autocorrelation time \eqn{\tau} (see
#'   'Dependent samples'). Only used with `wild = "markov"`.
#' @param progress Show progress, one unit per slice of rows of the
#'   bootstrap (see 'Progress' in [kernbayes-package]); default
#'   `interactive()`.
#' @return An object of class `c("kb_ksd_test", "htest")`: `statistic`
#'   (named `"n KSD^2"`), `p.value`, `parameter` (the number of replicates,
#'   `n_boot`), `method`, `data.name`, `estimate` (the KSD^2 U- or
#'   V-statistic), `boot` (the `n_boot` bootstrap statistics), `type`,
#'   `bootstrap`, `wild`, `change_prob`, `iact` (for Markov multipliers:
#'   the integrated autocorrelation time the default flip probability uses),
#'   `n`, `kernel` (as resolved on the
#'   sample) and `standardize`. `print()` adds the kernel to the `htest`
#'   print; `plot()` shows the bootstrap null with the observed statistic.
#' @references Liu, Q., Lee, J. and Jordan, M. (2016). A kernelized Stein
#'   discrepancy for goodness-of-fit tests. *ICML*. Chwialkowski, K.,
#'   Strathmann, H. and Gretton, A. (2016). A kernel test of goodness of
#'   fit. *ICML*. Chwialkowski, K., Sejdinovic, D. and Gretton, A. (2014).
#'   A wild bootstrap for degenerate kernel tests. *NeurIPS*. Geyer, C. J.
#'   (1992). Practical Markov chain Monte Carlo. *Statistical Science* 7,
#'   473-483.
#' @seealso [ksd()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 200)
#' ksd_test(x, tg, n_boot = 200)
#' t1 <- ksd_test(x + 0.5, tg, type = "V", n_boot = 200)
#' t1$p.value
#' plot(t1)
#' @export
ksd_test <- function(x, score, kernel = imq_kernel(), type = c("U", "V"),
                     bootstrap = NULL, n_boot = 1000,
                     wild = c("rademacher", "markov"), change_prob = NULL,
                     standardize = TRUE, nthreads = NULL,
                     progress = interactive(), chain = NULL) {
  dname <- paste(deparse1(substitute(x)), "against",
                 if (missing(score)) "its fit's gradients" else
                   deparse1(substitute(score)))
  type <- check_choice(type, c("U", "V"), "type")
  bootstrap <- if (is.null(bootstrap)) {
    if (type == "U") "multinomial" else "wild"
  } else check_choice(bootstrap, c("multinomial", "wild"), "bootstrap")
  n_boot <- check_count(n_boot, "n_boot")
  wild <- check_choice(wild, c("rademacher", "markov"), "wild")
  if (!is.null(change_prob)) {
    change_prob <- check_number(change_prob, "change_prob", 0, 1,
                                lower_open = TRUE, upper_open = TRUE)
    if (bootstrap != "wild" || wild != "markov") {
      stop_arg("change_prob", "is only used with bootstrap = \"wild\" and ",
               "wild = \"markov\"")
    }
  }
  standardize <- check_standardize(standardize)
  nthreads <- resolve_nthreads(nthreads)
  progress <- check_flag(progress, "progress")
  check_kernel(kernel)
  smp <- as_sample(x, score, chain)
  n <- nrow(smp$x)
  if (n < 2L) stop_arg("x", "must have at least two rows for a test")
  check_memory(8 * 3 * n * (n_boot + 8), "n_boot",
               sprintf("the bootstrap weights of %d replicates of %d rows",
                       n_boot, n), "use fewer replicates")
  st <- stein_setup(smp$x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  est <- ksd_of_rows(st, seq_len(n), NULL, type, nthreads)
  if (type == "V") est <- est^2
  stat <- n * est
  markov <- bootstrap == "wild" && wild == "markov"
  rows <- if (markov) chain_rows(smp)
  iact <- if (markov) gof_sample_iact(smp, rows)
  if (markov && is.null(change_prob)) {
    change_prob <- gof_change_prob(n / length(rows), iact)
  }
  W <- gof_weights(n, n_boot, bootstrap, wild, change_prob, rows)
  q <- gof_quad(st, W, nthreads, progress)
  boot <- if (type == "U") q$quad - q$diag else q$quad
  boot <- if (bootstrap == "multinomial") n * boot else boot / n
  if (any(!is.finite(boot))) {
    stop_numeric("a bootstrap statistic is not finite: scale the data or ",
                 "the kernel")
  }
  structure(list(
    statistic = c("n KSD^2" = stat),
    parameter = c(n_boot = n_boot),
    p.value = (1 + sum(boot >= stat)) / (n_boot + 1),
    estimate = stats::setNames(est, paste0("KSD^2 (", type, "-statistic)")),
    method = sprintf("KSD goodness-of-fit test (%s-statistic, %s bootstrap)",
                     type, if (bootstrap == "wild") paste(wild, "wild") else
                       bootstrap),
    data.name = dname, boot = boot, type = type, bootstrap = bootstrap,
    wild = if (bootstrap == "wild") wild, change_prob = change_prob,
    iact = iact, n = n,
    kernel = st$kernel, standardize = !is.null(st$scale)),
    class = c("kb_ksd_test", "htest"))
}

# The n x n_boot bootstrap weights, all drawn with R's generator: centred
# multinomial weights (counts / n - 1 / n), or wild multipliers (i.i.d.
# Rademacher signs, or a Markov chain of signs down each column, along the
# iterations of each chain: `rows`, the rows of each chain in iteration
# order, as chain_rows() gives them; each chain after the first starts with
# a fresh fair sign, drawn from the same uniform as a flip would be, so
# that a single chain in row order consumes the same random numbers).
gof_weights <- function(n, n_boot, bootstrap, wild, change_prob,
                        rows = NULL) {
  if (bootstrap == "multinomial") {
    return((stats::rmultinom(n_boot, n, rep(1 / n, n)) - 1) / n)
  }
  if (wild == "rademacher") {
    return(matrix(ifelse(stats::runif(n * n_boot) < 0.5, -1, 1), n, n_boot))
  }
  first <- ifelse(stats::runif(n_boot) < 0.5, -1, 1)
  u <- matrix(stats::runif(n * n_boot), n, n_boot)
  flip <- u < change_prob
  flip[1L, ] <- FALSE
  if (length(rows) > 1L) {
    starts <- cumsum(lengths(rows))[-length(rows)] + 1L
    flip[starts, ] <- u[starts, , drop = FALSE] < 0.5
  }
  # W_t = W_1 (-1)^(number of flips up to t)
  parity <- apply(flip, 2L, cumsum) %% 2L
  if (n == 1L) parity <- matrix(parity, 1L)
  W <- sweep(1 - 2 * parity, 2L, first, "*")
  if (length(rows) > 1L) W[unlist(rows, use.names = FALSE), ] <- W
  W
}

# The sample's dependence for the Markov multipliers: the largest
# integrated autocorrelation time over the columns of the points and of
# their scores, within each chain (rows in iteration order), averaged over
# the chains.
gof_sample_iact <- function(smp, rows) {
  mean(vapply(rows, function(r) {
    max(apply(cbind(smp$x[r, , drop = FALSE], smp$score[r, , drop = FALSE]),
              2L, gof_iact))
  }, 0))
}

# The default flip probability of the Markov multipliers for chains of
# length m with integrated autocorrelation time tau: the multipliers'
# correlation length l = (1 - p) / p is set to sqrt(m tau) (at least 1), so
# p = 1 / (1 + l).  l grows like sqrt(m) (the rate of Chwialkowski et al.:
# p -> 0, m p -> infinity) and with the sample's dependence; see
# inst/experiments/gof-dependent.R for the measured level and power.
gof_change_prob <- function(m, tau) {
  1 / (1 + max(1, sqrt(m * tau)))
}

# Rows per tile and replicates per packed block of src/gof.c.
GOF_TILE <- 64L
GOF_RB <- 8L

# The quadratic forms w_b' K_p w_b (quad) and their diagonal parts
# sum_i w_ib^2 k_p(x_i, x_i) (diag) for the columns w_b of W, in C on the
# Stein setup st.  The tiles of the lower triangle are cut into slices that
# depend on n only (progress between slices; at most 2000 tiles' partial
# sums in memory), so the result depends on neither progress nor threads.
gof_quad <- function(st, W, nthreads, progress) {
  n <- nrow(W)
  B <- ncol(W)
  nbb <- (B + GOF_RB - 1L) %/% GOF_RB
  if (nbb * GOF_RB > B) W <- cbind(W, matrix(0, n, nbb * GOF_RB - B))
  # packed: replicate r of block bb, row j at r + RB (j + n bb)
  Wp <- as.double(aperm(array(W, c(n, GOF_RB, nbb)), c(2L, 1L, 3L)))
  rm(W)
  nrb <- (n + GOF_TILE - 1) %/% GOF_TILE
  ntile <- nrb * (nrb + 1) / 2
  k <- min(ntile, max(50, ceiling(ntile / 2000)))
  cuts <- unique(round(seq(0, ntile, length.out = k + 1L)))
  rep <- progress_reporter(length(cuts) - 1L, "KSD test: bootstrap",
                           progress)
  on.exit(rep$done())
  quad <- diag <- numeric(nbb * GOF_RB)
  for (i in seq_len(length(cuts) - 1L)) {
    v <- .Call(C_kb_gof_quad, st$x, st$s, st$kernel, Wp, cuts[i],
               cuts[i + 1L], nthreads)
    quad <- quad + v$quad
    diag <- diag + v$diag
    rep$add(1)
  }
  list(quad = quad[seq_len(B)], diag = diag[seq_len(B)])
}

#' @export
print.kb_ksd_test <- function(x, ...) {
  NextMethod()
  cat("kernel:", describe_resolved(x$kernel),
      if (isTRUE(x$standardize)) "(columns standardised)" else "", "\n")
  invisible(x)
}

#' Plot the bootstrap null of a KSD test
#'
#' A histogram of the bootstrap statistics with the observed statistic as a
#' vertical line.
#'
#' @param x A `kb_ksd_test` object from [ksd_test()].
#' @param breaks Passed to [graphics::hist()].
#' @param ... Further arguments to [graphics::hist()].
#' @return `x`, invisibly.
#' @export
plot.kb_ksd_test <- function(x, breaks = 40, ...) {
  plot_null(null_stats = x$boot, observed = unname(x$statistic),
            title = sprintf("KSD test: bootstrap null (p = %s)",
                            format(x$p.value, digits = 3)),
            axis_label = "n KSD^2", label = "bootstrap", breaks = breaks,
            ...)
  invisible(x)
}

# Integrated autocorrelation time of a series, tau = 1 + 2 sum_{h >= 1}
# rho_h, by Geyer's (1992) initial positive sequence: the sums rho_{2k} +
# rho_{2k+1} are added while positive.  Autocovariances by FFT; at least 1
# (anticorrelated and constant series count as independent).
gof_iact <- function(v) {
  n <- length(v)
  v <- v - mean(v)
  if (n < 4L || !any(v != 0)) return(1)
  m <- stats::nextn(2L * n)
  f <- stats::fft(c(v, numeric(m - n)))
  acov <- Re(stats::fft(Mod(f)^2, inverse = TRUE))[seq_len(n)] / (n * m)
  rho <- acov / acov[1L]
  k <- seq_len(n %/% 2L)
  pairs <- rho[2L * k - 1L] + rho[2L * k]
  stop_at <- match(TRUE, pairs <= 0, nomatch = length(pairs) + 1L) - 1L
  max(1, -1 + 2 * sum(pairs[seq_len(stop_at)]))
}
