# The finite-set Stein discrepancy (FSSD) test of Jitkrittum, Xu, Szabo,
# Fukumizu and Gretton (2017): Stein features at J test locations, an
# unbiased statistic linear in n, an asymptotic weighted chi-square null,
# and locations and bandwidth chosen on a training split for power.

#' Linear-time kernel goodness-of-fit test (FSSD)
#'
#' The finite-set Stein discrepancy test of Jitkrittum et al. (2017): the
#' Stein witness of the sample is evaluated at a few test locations instead
#' of over all pairs, so the test costs \eqn{O(n J d)} instead of the
#' \eqn{O(n^2 d)} of [ksd_test()], and the chosen locations show where the
#' sample departs from the target.
#'
#' With the Gaussian kernel \eqn{k(x, v) = \exp(-\|x - v\|^2 / (2 h^2))}
#' (bandwidth \eqn{h}, as [gaussian_kernel()]) and locations \eqn{v_1,
#' \dots, v_J}, each point has the feature vector \eqn{\tau(x) \in
#' R^{dJ}} made of the blocks \eqn{\xi(x, v_j) / \sqrt{dJ}}, \eqn{\xi(x, v) =
#' k(x, v) s(x) + \nabla_x k(x, v)}, with \eqn{s} the score. The population
#' FSSD\eqn{^2} is \eqn{\|E_q \tau(X)\|^2}, zero when the sample's law
#' \eqn{q} is the target (and, for almost every choice of locations, only
#' then). The statistic is \eqn{n \widehat{\mathrm{FSSD}^2}} with the
#' unbiased estimate \eqn{\frac{1}{n(n-1)} \sum_{i \ne j} \tau(x_i)^\top
#' \tau(x_j)} (which can be negative). Under the null it converges to
#' \eqn{\sum_i \omega_i (Z_i^2 - 1)}, \eqn{Z_i} standard normal and
#' \eqn{\omega_i} the eigenvalues of the covariance of \eqn{\tau(X)}; the
#' p-value simulates this sum `n_simulate` times with the eigenvalues of
#' the sample covariance of the features (as the paper does) and is
#' \eqn{(1 + \#\{T^* \ge T\}) / (n_{sim} + 1)}.
#'
#' Locations:
#' * `"opt"` (default): the sample is split at random; on the training part
#'   (`train_frac` of the rows) the locations and the bandwidth maximise the
#'   power criterion \eqn{\widehat{\mathrm{FSSD}^2} / \sqrt{\hat\sigma^2_{H_1}
#'   + \gamma}}, \eqn{\hat\sigma^2_{H_1} = 4 \hat\mu^\top \hat\Sigma
#'   \hat\mu} the variance of the statistic's normal limit under the
#'   alternative and \eqn{\gamma =} `reg`. Start: locations drawn from a
#'   normal fitted to the training part, the bandwidth the best of
#'   \eqn{m \cdot 2^{\{-1.5, -0.75, 0, 0.75, 1.5\}}} (\eqn{m} the median
#'   pairwise distance); then L-BFGS-B ([stats::optim()], `max_iter`
#'   iterations, analytic gradient) with \eqn{h \in [m / 10, 10 m]} and the
#'   locations within 100 standard deviations of the data's range. The test
#'   uses the other rows only, so the null holds given the chosen locations.
#'   When the training part has at most as many rows as `x` has columns,
#'   the locations cannot be fitted (the criterion is flat in most of the
#'   \eqn{J d} directions and L-BFGS-B ran for minutes): the test falls
#'   back to `"rand"` with a warning of class `kb_warning_fssd`.
#' * `"rand"`: locations drawn from a normal fitted to the whole sample,
#'   bandwidth the median pairwise distance, and the whole sample tested.
#'   (The fitted normal's variances get a jitter of 1e-6, or 1% of the
#'   largest variance when that is smaller, so that data of any scale get
#'   locations among them.)
#'
#' With fewer tested rows than features (\eqn{n < dJ}) the covariance's
#' eigenvalues come from the \eqn{n \times n} Gram matrix of the centred
#' features (the same nonzero eigenvalues; the rest are zero).
#' * a \eqn{J \times d} matrix: these locations, the bandwidth given or the
#'   median distance, the whole sample tested.
#'
#' The null is the i.i.d. one: for MCMC output, thin the chain until it is
#' nearly independent or use [ksd_test()] with the Markov wild bootstrap.
#'
#' @inheritParams ksd
#' @param n_locations Number of test locations \eqn{J} (for `"opt"` and
#'   `"rand"`).
#' @param locations `"opt"` (default), `"rand"`, or a numeric matrix of
#'   locations (one per row, as many columns as `x`).
#' @param train_frac Fraction of the rows, in (0, 1), on which `"opt"`
#'   chooses the locations and bandwidth; the test uses the rest.
#' @param bandwidth Gaussian bandwidth \eqn{h > 0}; `NULL` (default):
#'   optimised (`"opt"`) or the median pairwise distance. A number fixes it
#'   (`"opt"` then optimises the locations only); one whose square
#'   underflows or overflows (below about 1e-154 or above 1e154) is an
#'   error, before any work.
#' @param n_simulate Draws from the asymptotic null.
#' @param reg The regulariser \eqn{\gamma} of the power criterion.
#' @param max_iter Iterations of L-BFGS-B for `"opt"`.
#' @param nthreads Threads for the statistic and the feature covariance (one
#'   pass over the rows in C; the result does not depend on it); default
#'   `getOption("kernbayes.nthreads", 1)`.
#' @param progress Show progress by stage (locations, statistic, null; see
#'   'Progress' in [kernbayes-package]); default `NULL` (automatic).
#' @return An object of class `c("kb_fssd_test", "htest")`: `statistic`
#'   (named `"n FSSD^2"`), `p.value`, `parameter` (the number of locations
#'   `J`), `estimate` (the unbiased FSSD^2), `method`, `data.name`,
#'   `locations` (the \eqn{J \times d} matrix), `bandwidth`, `null` (the
#'   simulated null statistics), `eigenvalues`, `n` (rows tested),
#'   `train` (the training rows, for `"opt"`), `criterion` (the power
#'   criterion on the training rows at the start and at the optimum) and
#'   `convergence` (of [stats::optim()]). `print()` adds the bandwidth and
#'   split; `plot()` shows the simulated null with the observed statistic.
#' @references Jitkrittum, W., Xu, W., Szabo, Z., Fukumizu, K. and Gretton,
#'   A. (2017). A linear-time kernel goodness-of-fit test. *NeurIPS*.
#' @seealso [ksd_test()] for the quadratic-time test with a bootstrap null.
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 500)
#' fssd_test(x, tg, n_locations = 5)
#' y <- cbind(x[, 1], x[, 2] / 2)   # too narrow in the second coordinate
#' t1 <- fssd_test(y, tg, n_locations = 5)
#' t1$p.value
#' t1$locations
#' plot(t1)
#' @export
fssd_test <- function(x, score, n_locations = 10,
                      locations = c("opt", "rand"), train_frac = 0.2,
                      bandwidth = NULL, n_simulate = 3000, reg = 0.01,
                      max_iter = 100, nthreads = NULL, chain = NULL,
                      progress = NULL) {
  dname <- paste(deparse1(substitute(x)), "against",
                 if (missing(score)) "its fit's gradients" else
                   deparse1(substitute(score)))
  n_locations <- check_count(n_locations, "n_locations")
  if (is.character(locations)) {
    mode <- check_choice(locations, c("opt", "rand"), "locations")
    V <- NULL
  } else {
    mode <- "given"
    V <- check_locations(locations)
  }
  train_frac <- check_number(train_frac, "train_frac", 0, 1,
                             lower_open = TRUE, upper_open = TRUE)
  if (!is.null(bandwidth)) {
    bandwidth <- check_number(bandwidth, "bandwidth", lower = 0,
                              lower_open = TRUE)
    # the kernel divides by h^2: it must neither underflow nor overflow
    if (!(bandwidth^2 >= .Machine$double.xmin) || !is.finite(bandwidth^2)) {
      stop_arg("bandwidth", sprintf(paste0(
        "= %s cannot be used: its square %s, so the Gaussian kernel and its ",
        "gradient are not finite; give a bandwidth between 1e-150 and ",
        "1e150 (rescale x if its scale is beyond that)"),
        format(bandwidth, digits = 3),
        if (bandwidth < 1) "underflows to 0" else "overflows"))
    }
  }
  n_simulate <- check_count(n_simulate, "n_simulate")
  reg <- check_number(reg, "reg", lower = 0)
  max_iter <- check_count(max_iter, "max_iter", min = 0L)
  nthreads <- resolve_nthreads(nthreads)
  check_progress(progress)
  smp <- as_sample(x, score, chain)
  x <- smp$x
  check_score(smp$score, x)
  n <- nrow(x)
  d <- ncol(x)
  if (!is.null(V) && ncol(V) != d) {
    stop_arg("locations", sprintf("must have %d columns (as x); got %d", d,
                                  ncol(V)))
  }
  if (mode == "opt") {
    n_train <- round(train_frac * n)
    if (n_train < 2L || n - n_train < 2L) {
      stop_arg("train_frac", sprintf(paste0(
        "= %s splits the %d rows of x into %d training and %d test rows; ",
        "both need at least 2"), format(train_frac), n, n_train,
        n - n_train))
    }
    if (n_train <= d) {
      # J d locations fitted to fewer points than coordinates: the
      # criterion is flat in most directions and L-BFGS-B spends minutes
      # on noise
      fssd_warn_fallback(sprintf(paste0(
        "fssd_test: the training split has %d rows for %d dimensions (at ",
        "most as many rows as dimensions): the locations cannot be ",
        "optimised; using random locations (locations = \"rand\") on ",
        "the whole sample instead"), n_train, d))
      mode <- "rand"
    }
  }
  if (mode != "opt" && n < 2L) {
    stop_arg("x", "must have at least two rows for a test")
  }
  check_memory(8 * 3 * n * d * (if (is.null(V)) n_locations else nrow(V)),
               "n_locations", "the features of the sample")
  # the bandwidth heuristic's data must be usable before the score runs
  if (is.null(bandwidth)) m_all <- fssd_median(x, "x")
  s <- resolve_score(smp$score, x)
  if (any(!is.finite(s))) {
    stop_callback("score", "must be finite at every row of x")
  }
  # by stage: choosing the locations, the statistic, the null
  pb <- progress_reporter(3L, "FSSD test", progress)
  on.exit(pb$done())
  pb$tick(0L, "locations")

  train <- NULL
  crit <- NULL
  conv <- NULL
  if (mode == "opt") {
    train <- sort(sample.int(n, n_train))
    xt <- x[train, , drop = FALSE]
    st <- s[train, , drop = FALSE]
    m <- if (is.null(bandwidth)) fssd_median(xt, "x") else bandwidth
    V <- gaussian_fit_draw(xt, n_locations)
    h <- bandwidth
    if (is.null(h)) {
      grid <- m * 2^c(-1.5, -0.75, 0, 0.75, 1.5)
      vals <- vapply(grid, function(g) fssd_criterion(xt, st, V, g, reg)$value,
                     0)
      h <- grid[which.max(vals)]
    }
    opt <- fssd_optimize(xt, st, V, h, is.null(bandwidth), m, reg, max_iter)
    V <- opt$locations
    h <- opt$bandwidth
    crit <- c(start = opt$start, optimum = opt$value)
    conv <- opt$convergence
    x <- x[-train, , drop = FALSE]
    s <- s[-train, , drop = FALSE]
  } else {
    if (mode == "rand") V <- gaussian_fit_draw(x, n_locations)
    h <- if (is.null(bandwidth)) m_all else bandwidth
  }
  pb$tick(1L, "statistic")
  mom <- .Call(C_kb_fssd_moments, x, s, V, h, nthreads)
  if (!(mom$sumsq > 0)) {
    stop_numeric("the Stein features vanish at every tested row: the ",
                 "locations are too far from the sample for the bandwidth ",
                 format(h, digits = 3), "; give locations or a bandwidth")
  }
  nt <- nrow(x)
  est <- (sum(mom$sum^2) - mom$sumsq) / (nt * (nt - 1))
  stat <- nt * est
  ev <- fssd_eigenvalues(mom$cov, x, s, V, h)
  pb$tick(2L, "null")
  null <- fssd_simulate_null(ev, n_simulate)
  pb$tick(3L)
  colnames(V) <- colnames(smp$x)
  new_fssd_test(list(stat = stat, est = est, n = nt), null, ev, V, dname,
                list(bandwidth = h, train = train, criterion = crit,
                     convergence = conv, reg = reg, choice = mode))
}

# The eigenvalues of the q x q feature covariance (q = dJ, divisor n - 1),
# largest first.  With fewer rows than features its rank is below n: its
# nonzero eigenvalues are those of the n x n Gram matrix of the centred
# features, an O(n^2 q + n^3) eigenproblem instead of O(q^3) (d = 200, J =
# 10: 23 s for q = 2000), padded with zeros to q.
fssd_eigenvalues <- function(cov, x, s, V, h) {
  n <- nrow(x)
  q <- ncol(cov)
  if (n >= q) {
    return(sort(pmax(sym_eigen(cov, "feature covariance")$values, 0),
                decreasing = TRUE))
  }
  tau <- fssd_features(x, s, V, h)
  tc <- tau - rep(colMeans(tau), each = n)
  ev <- sym_eigen(tcrossprod(tc) / (n - 1), "feature Gram matrix")$values
  c(sort(pmax(ev, 0), decreasing = TRUE), numeric(q - n))
}

# A classed warning (kb_warning_fssd) for a choice fssd_test() made
# instead of the caller's.
fssd_warn_fallback <- function(msg) {
  warning(structure(class = c("kb_warning_fssd", "warning", "condition"),
                    list(message = msg, call = NULL)))
}

# The one constructor of kb_fssd_test: `value`, the statistic n FSSD^2
# (`stat`), the estimate FSSD^2 (`est`) and the number of test rows (`n`);
# the simulated null and the eigenvalues it came from; the locations; the
# data's name; `fit`, how the locations and bandwidth were chosen
# (bandwidth, train, criterion, convergence, reg, choice).
new_fssd_test <- function(value, null, eigenvalues, locations, dname, fit) {
  J <- nrow(locations)
  stat <- value[["stat"]]
  structure(list(
    statistic = c("n FSSD^2" = stat),
    parameter = c(J = J),
    p.value = (1 + sum(null >= stat)) / (length(null) + 1),
    estimate = c("FSSD^2" = value[["est"]]),
    method = sprintf("FSSD goodness-of-fit test (%s locations, J = %d)",
                     switch(fit$choice, opt = "optimised", rand = "random",
                            given = "given"), J),
    data.name = dname, locations = locations, bandwidth = fit$bandwidth,
    null = null, eigenvalues = eigenvalues, n = value[["n"]],
    train = fit$train, criterion = fit$criterion,
    convergence = fit$convergence, reg = fit$reg, choice = fit$choice),
    class = c("kb_fssd_test", "htest"))
}

check_locations <- function(V) {
  if (is.data.frame(V)) V <- as.matrix(V)
  if (!is.numeric(V) || !is.matrix(V) || nrow(V) < 1L || ncol(V) < 1L) {
    stop_arg("locations", "must be \"opt\", \"rand\" or a numeric matrix ",
             "with one location per row")
  }
  if (any(!is.finite(V))) stop_arg("locations", "must be finite")
  storage.mode(V) <- "double"
  V
}

fssd_median <- function(x, arg) {
  m <- median_distance(x)
  if (!(m > 0) || !is.finite(m)) {
    stop_arg(arg, "needs a positive median pairwise distance for the ",
             "bandwidth; it has too few distinct rows")
  }
  m
}

# J locations drawn from the normal fitted to the rows of x (covariance
# eigenvalues clipped at 0, plus 1e-6 on the diagonal, or 1% of the
# largest eigenvalue when that is smaller).
gaussian_fit_draw <- function(x, J) {
  d <- ncol(x)
  mu <- colMeans(x)
  # the covariance of x / p2 (p2 a power of two when x^2 would overflow)
  e <- cov_eigen(x)
  # the jitter 1e-6 (variance), at most 1% of the largest variance: an
  # absolute one would put the locations of data of tiny scale (1e-100)
  # millions of bandwidths away
  jit <- min(1e-6, 0.01 * max(e$values, 0))
  sd <- e$p2 * sqrt(pmax(e$values, 0) + jit)
  z <- matrix(stats::rnorm(J * d), J, d)
  sweep(z %*% (t(e$vectors) * sd), 2L, mu, "+")
}

# The Gaussian kernel of squared bandwidth w between the rows of x and one
# location v, and its Stein feature: with U = x - v (a row per point) and
# r2 = |U|^2, k = exp(-r2 / (2 w)) and xi = k s + grad_x k = k E, E = s -
# U / w. The features and the power criterion's gradient both take k and E
# from here.
fssd_kernel_at <- function(x, s, v, w) {
  U <- x - rep(v, each = nrow(x))
  r2 <- rowSums(U * U)
  list(U = U, r2 = r2, k = exp(-r2 / (2 * w)), E = s - U / w)
}

# The n x dJ feature matrix: block j (columns (j-1)d + 1..jd) holds
# xi(x_i, v_j) / sqrt(dJ), xi = k s + grad_x k, k Gaussian of bandwidth h.
fssd_features <- function(x, s, V, h) {
  d <- ncol(x)
  J <- nrow(V)
  w <- h^2
  out <- matrix(0, nrow(x), d * J)
  for (j in seq_len(J)) {
    kj <- fssd_kernel_at(x, s, V[j, ], w)
    out[, (j - 1L) * d + seq_len(d)] <- kj$k * kj$E
  }
  out / sqrt(d * J)
}

# Unbiased FSSD^2: (||sum tau||^2 - sum ||tau_i||^2) / (n (n - 1)).
fssd_ustat <- function(tau) {
  n <- nrow(tau)
  (sum(colSums(tau)^2) - sum(tau * tau)) / (n * (n - 1))
}

fssd_simulate_null <- function(ev, n_simulate) {
  ev <- ev[ev > 0]
  if (!length(ev)) return(numeric(n_simulate))
  out <- numeric(n_simulate)
  # blocks of at most ~1e6 normals
  bs <- max(1L, floor(1e6 / length(ev)))
  for (st in seq(1L, n_simulate, by = bs)) {
    b <- min(bs, n_simulate - st + 1L)
    z <- matrix(stats::rnorm(length(ev) * b), length(ev), b)
    out[st + seq_len(b) - 1L] <- colSums(ev * (z * z - 1))
  }
  out
}

# The power criterion FSSD^2_U / sqrt(sigma2 + reg), sigma2 = 4 mu' Sigma mu
# (mu the feature mean, Sigma their covariance with divisor n), and its
# gradient in the locations V (J x d) and the bandwidth h.
fssd_criterion <- function(x, s, V, h, reg, gradient = FALSE) {
  n <- nrow(x)
  d <- ncol(x)
  J <- nrow(V)
  tau <- fssd_features(x, s, V, h)
  mu <- colMeans(tau)
  est <- fssd_ustat(tau)
  e <- drop(tau %*% mu) - sum(mu * mu)
  sig2 <- 4 * mean(e * e)
  S <- sqrt(sig2 + reg)
  value <- est / S
  if (!gradient) return(list(value = value))
  # dF/dtau_i = (dest/dtau_i) / S - est / (2 S^3) dsig2/dtau_i with
  # dest/dtau_i = 2 (n mu - tau_i) / (n (n - 1)) and
  # dsig2/dtau_i = (8 / n) (e_i mu + tau' e / n).
  te <- drop(crossprod(tau, e)) / n
  G <- (2 * (n * rep(mu, each = n) - tau) / (n * (n - 1))) / S -
    est / (2 * S^3) * (8 / n) * (e %o% mu + rep(te, each = n))
  G <- G / sqrt(d * J)
  w <- h^2
  gV <- matrix(0, J, d)
  gw <- 0
  for (j in seq_len(J)) {
    g <- G[, (j - 1L) * d + seq_len(d), drop = FALSE]
    kj <- fssd_kernel_at(x, s, V[j, ], w)
    U <- kj$U
    k <- kj$k
    eg <- rowSums(kj$E * g)
    gV[j, ] <- (crossprod(U, k * eg) + colSums(k * g)) / w
    gw <- gw + sum(k * (kj$r2 / (2 * w^2) * eg + rowSums(U * g) / w^2))
  }
  list(value = value, gV = gV, gh = gw * 2 * h)
}

# L-BFGS-B on (h, V) (or V only), maximising the power criterion.
fssd_optimize <- function(x, s, V0, h0, opt_h, m, reg, max_iter) {
  J <- nrow(V0)
  d <- ncol(V0)
  sdx <- apply(x, 2L, stats::sd)
  lo_v <- rep(apply(x, 2L, min) - 100 * sdx, each = J)
  hi_v <- rep(apply(x, 2L, max) + 100 * sdx, each = J)
  unpack <- function(p) {
    if (opt_h) list(h = p[1L], V = matrix(p[-1L], J, d)) else
      list(h = h0, V = matrix(p, J, d))
  }
  cache <- new.env()
  eval_at <- function(p) {
    if (!identical(cache$p, p)) {
      u <- unpack(p)
      cache$r <- fssd_criterion(x, s, u$V, u$h, reg, gradient = TRUE)
      cache$p <- p
    }
    cache$r
  }
  fn <- function(p) {
    v <- -eval_at(p)$value
    if (!is.finite(v)) stop_numeric("the FSSD power criterion is not finite")
    v
  }
  gr <- function(p) {
    r <- eval_at(p)
    -(if (opt_h) c(r$gh, r$gV) else as.double(r$gV))
  }
  p0 <- if (opt_h) c(h0, V0) else as.double(V0)
  lower <- if (opt_h) c(m / 10, lo_v) else lo_v
  upper <- if (opt_h) c(10 * m, hi_v) else hi_v
  p0 <- pmin(pmax(p0, lower), upper)
  start <- -fn(p0)
  if (max_iter == 0L) {
    u <- unpack(p0)
    return(list(locations = u$V, bandwidth = u$h, value = start,
                start = start, convergence = 0L))
  }
  o <- stats::optim(p0, fn, gr, method = "L-BFGS-B", lower = lower,
                    upper = upper,
                    control = list(maxit = max_iter, factr = 1e-5 /
                                     .Machine$double.eps, pgtol = 1e-7))
  u <- unpack(o$par)
  list(locations = u$V, bandwidth = u$h, value = -o$value, start = start,
       convergence = o$convergence)
}

#' @export
print.kb_fssd_test <- function(x, ...) {
  check_result(x)
  NextMethod()
  cat(sprintf("Gaussian kernel, bandwidth %s; %d rows tested%s\n",
              format(x$bandwidth, digits = 4), x$n,
              if (!is.null(x$train)) sprintf(
                ", %d rows chose the locations (power criterion %s -> %s)",
                length(x$train), format(x$criterion[1], digits = 3),
                format(x$criterion[2], digits = 3)) else ""))
  invisible(x)
}

#' Plot the null distribution of an FSSD test
#'
#' A histogram of the draws from the asymptotic null with the observed
#' statistic as a vertical line.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_fssd_test` object from [fssd_test()].
#' @param breaks Passed to [graphics::hist()].
#' @param ... Further arguments to [graphics::hist()].
#' @return `x`, invisibly.
#' @export
plot.kb_fssd_test <- function(x, breaks = 40, ...) {
  check_result(x)
  plot_null(null_stats = x$null, observed = unname(x$statistic),
            title = sprintf("FSSD test: asymptotic null (p = %s)",
                            format(x$p.value, digits = 3)),
            axis_label = "n FSSD^2", label = "simulated null",
            breaks = breaks, ...)
  invisible(x)
}

# A histogram of simulated null statistics with the observed statistic:
# the caller's defaults for the title, axis label and legend label, any
# graphics::hist() argument in ... taking precedence.
plot_null <- function(null_stats, observed, title, axis_label, label, breaks,
                      ...) {
  args <- utils::modifyList(list(
    main = title, xlab = axis_label, xlim = range(c(null_stats, observed)),
    col = "grey85", border = "grey50"), list(...))
  do.call(graphics::hist, c(list(x = null_stats, breaks = breaks), args))
  graphics::abline(v = observed, col = "red", lwd = 2)
  graphics::legend("topright", legend = c(label, "observed"),
                   fill = c("grey85", NA), border = c("grey50", NA),
                   col = c(NA, "red"), lwd = c(NA, 2), bty = "n")
}

#' @rdname result_tables
#' @export
as.data.frame.kb_fssd_test <- function(x, row.names = NULL, optional = FALSE,
                                       ...) {
  check_result(x)
  test_frame(x, row.names)
}

#' @rdname result_tables
#' @export
summary.kb_fssd_test <- function(object, ...) {
  check_result(object, "object")
  test_frame(object)
}
