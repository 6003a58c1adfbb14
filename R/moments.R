# What a compression did to the posterior: every result that selects or
# weights points (a thinned set, a KSDT dictionary, KSD-optimal weights)
# carries a moment report, per coordinate, of the shift of its mean in sds
# of the sample it came from and the ratio of its sd to the sample's
# (weighted when it has weights), printed by print() and summary(); a
# coordinate that moves beyond the threshold raises a warning of class
# kb_warning_distortion at the call that made the result.
#
# The reference is the sample's moments: n, column means, sds (n - 1
# denominators), skewnesses and kurtoses, kept as such (not the sample) so
# that streams and merges can combine them (moments_combine()).  Sums of
# powers are formed on deviations divided by a column scale, so that a
# sample near the largest doubles (1e300) does not overflow them.

# The distortion threshold: a coordinate is flagged when its mean moves by
# more than DISTORTION_SHIFT sample sds or its sd ratio leaves
# DISTORTION_RATIO, widened to what a random subset of the same (effective)
# size would do on draws of the sample's kurtosis with a family-wise rate
# of DISTORTION_LEVEL over the coordinates (distortion_limits()).  Set from
# inst/experiments/compression-choice.R (see its null table).
DISTORTION_SHIFT <- 0.3
DISTORTION_RATIO <- c(0.7, 1.3)
DISTORTION_LEVEL <- 0.01

# The reference moments of a sample (weights: normalised weights, NULL:
# equal; weighted sums are scaled to n rows).
sample_moments <- function(x, weights = NULL) {
  n <- nrow(x)
  w <- if (is.null(weights)) 1 else n * weights / sum(weights)
  mu <- colSums(x * w) / n
  dev <- x - rep(mu, each = n)
  # the sums on the deviations as they are (fast), unless a fourth power
  # overflows or underflows: then on the deviations divided by their
  # largest
  d2 <- dev * dev
  m2 <- colSums(w * d2)
  m4 <- colSums(w * d2 * d2)
  if (all(is.finite(m4)) && all(m2 == 0 | (m4 > 0 & m2 * m2 > 0))) {
    return(from_sums(n, mu, m2, colSums(w * d2 * dev), m4, 1))
  }
  c <- dev_scale(apply(abs(dev), 2L, max))
  dev <- dev / rep(c, each = n)
  d2 <- dev * dev
  from_sums(n, mu, colSums(w * d2), colSums(w * d2 * dev),
            colSums(w * d2 * d2), c)
}

# A positive finite column scale (1 for a constant column).
dev_scale <- function(c) {
  c[!(is.finite(c) & c > 0)] <- 1
  c
}

# Moments from the sums of 2nd-4th powers of deviations divided by c.
from_sums <- function(n, mean, m2, m3, m4, c) {
  list(n = n, mean = mean,
       sd = if (n > 1) c * sqrt(m2 / (n - 1)) else rep(NA_real_, length(mean)),
       skew = sqrt(n) * m3 / m2^1.5, kurt = n * m4 / m2^2)
}

# The sums of powers of deviations divided by c of moments r (a constant
# column, whose skewness and kurtosis are not defined, has zero sums).
to_sums <- function(r, c) {
  m2 <- if (r$n > 1) (r$n - 1) * (r$sd / c)^2 else rep(0, length(r$mean))
  m3 <- r$skew * m2^1.5 / sqrt(r$n)
  m4 <- r$kurt * m2^2 / r$n
  m3[m2 == 0] <- 0
  m4[m2 == 0] <- 0
  list(m2 = m2, m3 = m3, m4 = m4)
}

ref_sd <- function(ref) ref$sd

# Kurtosis E(x - mu)^4 / sd^4 of each column (3 for a normal).
ref_kurtosis <- function(ref) ref$kurt

# The moments of two samples pooled (Chan, Golub and LeVeque's update of the
# sums of squares, and Pebay's of the third and fourth powers), in units of
# a common column scale; either may be NULL.
moments_combine <- function(a, b) {
  if (is.null(a)) return(b)
  if (is.null(b)) return(a)
  na <- a$n
  nb <- b$n
  n <- na + nb
  c <- dev_scale(pmax(a$sd, b$sd, abs(b$mean - a$mean), na.rm = TRUE))
  d <- (b$mean - a$mean) / c
  sa <- to_sums(a, c)
  sb <- to_sums(b, c)
  from_sums(n, a$mean + (b$mean - a$mean) * nb / n,
            sa$m2 + sb$m2 + d^2 * na * nb / n,
            sa$m3 + sb$m3 + d^3 * na * nb * (na - nb) / n^2 +
              3 * d * (na * sb$m2 - nb * sa$m2) / n,
            sa$m4 + sb$m4 + d^4 * na * nb * (na^2 - na * nb + nb^2) / n^3 +
              6 * d^2 * (na^2 * sb$m2 + nb^2 * sa$m2) / n^2 +
              4 * d * (na * sb$m3 - nb * sa$m3) / n, c)
}

# Weighted mean and sd of the rows of p (weights w normalised; NULL:
# equal): the sd with the reliability-weights correction
# 1 / (1 - sum w^2), which is the (m - 1) denominator for equal weights.
set_moments <- function(p, w = NULL) {
  m <- nrow(p)
  w <- if (is.null(w)) rep(1 / m, m) else w / sum(w)
  mu <- colSums(p * w)
  denom <- 1 - sum(w^2)
  dev <- sweep(p, 2L, mu)
  c <- dev_scale(apply(abs(dev), 2L, max))
  v <- if (denom > 1e-12) colSums(w * sweep(dev, 2L, c, "/")^2) / denom else
    rep(NA_real_, ncol(p))
  # signed weights (nonneg = FALSE) can make the second moment negative
  v[!is.na(v) & v < 0] <- NA_real_
  list(mean = mu, sd = c * sqrt(v), size = 1 / sum(w^2))
}

# The limits of a set of effective size m_eff in d coordinates, from a
# sample of n: the fixed threshold, widened to the (DISTORTION_LEVEL /
# (2 d)) tails of a random subset's mean shift (normal, sd sqrt(1 / m -
# 1 / n), with the finite-population correction) and sd ratio (s^2 / sigma^2
# as chi^2_nu / nu with nu = 2 (m - 1) / (kurtosis - 1), which matches its
# variance and is m - 1 for a normal); one pair of ratio limits per
# coordinate.
distortion_limits <- function(m_eff, d, kurtosis, n = Inf) {
  a <- DISTORTION_LEVEL / (2 * d)
  m <- max(m_eff, 2)
  k <- kurtosis
  k[!is.finite(k) | k <= 1] <- 3
  nu <- 2 * (m - 1) / (k - 1)
  list(shift = max(DISTORTION_SHIFT,
                   stats::qnorm(1 - a) * sqrt(max(1 / m - 1 / n, 0))),
       lower = pmin(DISTORTION_RATIO[1L], sqrt(stats::qchisq(a, nu) / nu)),
       upper = pmax(DISTORTION_RATIO[2L],
                    sqrt(stats::qchisq(1 - a, nu) / nu)))
}

# The report of a set of points p (weights w, NULL: equal) against the
# reference moments ref (sample_moments()); `against` says what the
# reference is ("the sample (4000 points)").  A data frame with one row per
# coordinate: variable, mean, sd (of the set), ref_mean, ref_sd, shift
# ((mean - ref_mean) / ref_sd), sd_ratio, lower and upper (the sd ratio's
# limits) and flagged; attributes against, reference (ref), size (the
# set's effective size) and shift_limit.
moment_report <- function(p, w, ref, against) {
  if (is.null(ref)) return(NULL)
  s <- set_moments(p, w)
  rsd <- ref_sd(ref)
  shift <- (s$mean - ref$mean) / rsd
  ratio <- s$sd / rsd
  # a constant reference column: no scale to judge in
  shift[!is.finite(shift)] <- NA_real_
  ratio[!is.finite(ratio)] <- NA_real_
  lim <- distortion_limits(s$size, ncol(p), ref_kurtosis(ref), ref$n)
  flag <- (!is.na(shift) & abs(shift) > lim$shift) |
    (!is.na(ratio) & (ratio < lim$lower | ratio > lim$upper))
  structure(data.frame(variable = point_names(p), mean = s$mean, sd = s$sd,
                       ref_mean = ref$mean, ref_sd = rsd, shift = shift,
                       sd_ratio = ratio, lower = lim$lower, upper = lim$upper,
                       flagged = flag, stringsAsFactors = FALSE,
                       row.names = NULL),
            against = against, reference = ref, size = s$size,
            shift_limit = lim$shift, class = c("kb_moments", "data.frame"))
}

# The same report for other weights on the same points.
moment_reweight <- function(r, p, w) {
  if (is.null(r)) return(NULL)
  moment_report(p, w, attr(r, "reference"), attr(r, "against"))
}

# The one-line account of a report for print() methods.
moments_line <- function(r) {
  if (is.null(r)) return(invisible())
  sh <- abs(r$shift)
  if (all(is.na(sh))) {
    cat(sprintf("  moments vs %s: not comparable (constant columns)\n",
                attr(r, "against")))
    return(invisible())
  }
  i <- which.max(sh)
  rr <- r$sd_ratio
  ok <- !is.na(rr)
  lo <- if (any(ok)) which(ok)[which.min(rr[ok])] else NA
  hi <- if (any(ok)) which(ok)[which.max(rr[ok])] else NA
  cat(sprintf(paste0("  moments vs %s: largest mean shift %s sd (%s); sd ",
                     "ratios %s (%s) to %s (%s)%s\n"),
              attr(r, "against"), format(r$shift[i], digits = 2),
              r$variable[i], fmt_ratio(rr[lo]), r$variable[lo] %||% "",
              fmt_ratio(rr[hi]), r$variable[hi] %||% "",
              if (any(r$flagged)) sprintf(
                ": %d coordinate%s moved beyond the threshold (summary() lists them)",
                sum(r$flagged), if (sum(r$flagged) > 1L) "s" else "")
              else ""))
  invisible()
}

fmt_ratio <- function(v) if (length(v) && !is.na(v)) format(v, digits = 3) else "NA"

#' @export
print.kb_moments <- function(x, digits = 3, ...) {
  cat(sprintf(paste0("Moments of the set (effective size %s) vs %s; shift ",
                     "in sds of the sample; * beyond |shift| %s or outside ",
                     "the sd ratio limits\n"),
              format(attr(x, "size"), digits = 4), attr(x, "against"),
              format(attr(x, "shift_limit"), digits = 2)))
  df <- data.frame(variable = x$variable, mean = signif(x$mean, digits),
                   sd = signif(x$sd, digits),
                   sample_mean = signif(x$ref_mean, digits),
                   sample_sd = signif(x$ref_sd, digits),
                   shift = round(x$shift, 3), sd_ratio = round(x$sd_ratio, 3),
                   limits = sprintf("[%.2f, %.2f]", x$lower, x$upper),
                   flag = ifelse(x$flagged, "*", ""))
  print(df, row.names = FALSE)
  invisible(x)
}

#' The effect of a compression on the moments
#'
#' Every result that selects or weights points of a sample reports what it
#' did to the posterior's moments: for each coordinate, the shift of the
#' set's mean in standard deviations of the sample it came from, and the
#' ratio of the set's standard deviation to the sample's (weighted means
#' and sds where the set has weights). `print()` shows the largest shift and
#' the range of the sd ratios, `summary()` the table, and
#' `compression_moments()` returns it.
#'
#' A coordinate is flagged when its mean moves by more than 0.3 sample sds
#' or its sd ratio leaves \eqn{[0.7, 1.3]}, limits that are widened for
#' small sets to what a random subset of the same effective size \eqn{m}
#' would do, with a 1% chance over all \eqn{d} coordinates together: the
#' shift limit is at least the \eqn{1 - 0.005/d} normal quantile times
#' \eqn{\sqrt{1/m - 1/n}} (\eqn{n} the sample's size), and the sd ratio limits at least the \eqn{0.005/d} and
#' \eqn{1 - 0.005/d} quantiles of \eqn{\sqrt{\chi^2_\nu / \nu}},
#' \eqn{\nu = 2(m - 1)/(\kappa - 1)}, \eqn{\kappa} the coordinate's
#' kurtosis in the sample (\eqn{\nu = m - 1} for a normal): the
#' distribution of a random subset's variance ratio with its variance
#' matched, so that a heavy-tailed coordinate, whose sd a small subset
#' cannot pin down, is not flagged for that alone. The call that made the result then
#' warns with a condition of class `kb_warning_distortion` (inheriting from
#' `warning`), naming the coordinates; `options(kernbayes.warn_distortion =
#' FALSE)` silences it, as does `suppressWarnings(..., classes =
#' "kb_warning_distortion")`. The report is computed in any case.
#'
#' The reference is the sample the set came from: the rows of `x` (all
#' chains pooled) for [stein_thin()], [stein_thin_gf()], [mmd_thin()],
#' [kernel_thin()], [stein_kernel_thin()], [ksd_weights()] and [ksdt()];
#' every state the chain visited for [ksdt_sample()] and [ksdt_chains()]
#' (all chains pooled for the merged dictionary); the pilot chain for
#' [sp_mcmc()], whose own states are not a sample of the target; every row
#' pushed for a stream's [ksdt_result()]. Weights from `ksd_weights(th)` on
#' a result are judged against the result's own reference.
#'
#' Greedy KSD selection ([stein_thin()], KSDT) is known to under-represent
#' the tails and light modes (it favours high-density points); in the
#' comparison of `vignette("kernbayes")` (section 'Choosing a compression
#' method, measured') [kernel_thin()] kept the moments best.
#'
#' @param x A thinned set (`kb_thin`), a KSDT result (`kb_ksdt`, or a
#'   `kb_ksdt_chains` with a merged dictionary) or weights from
#'   [ksd_weights()].
#' @return A data frame of class `kb_moments`, one row per coordinate:
#'   `variable`, `mean` and `sd` of the set, `ref_mean` and `ref_sd` of the
#'   sample, `shift` (\eqn{(\text{mean} - \text{ref\_mean}) /
#'   \text{ref\_sd}}), `sd_ratio`, its limits `lower` and `upper`, and
#'   `flagged`; attributes `against` (what the reference is), `reference`
#'   (the sample's size, means, sds, skewnesses and kurtoses), `size` (the set's
#'   effective size, Kish's for weights) and `shift_limit`. `NULL` when the
#'   result has no reference (Stein Points, or an `sp_mcmc()` run without a
#'   pilot chain).
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0), diag(c(1, 4)))
#' x <- sample_target(tg, 2000)
#' th <- suppressWarnings(stein_thin(x, tg, m = 40))
#' compression_moments(th)
#' kt <- kernel_thin(x, m = 125)
#' compression_moments(kt)
#' @export
compression_moments <- function(x) {
  if (inherits(x, "kb_ksdt_chains")) x <- result_set(x)
  if (!(inherits(x, c("kb_thin", "kb_ksdt", "kb_weights")))) {
    stop_arg("x", sprintf(paste0("must be a thinned set, a KSDT result or ",
                                 "weights from ksd_weights(); got an object ",
                                 "of class %s"), class(x)[1L]))
  }
  if (inherits(x, "kb_weights")) attr(x, "moments") else x[["moments"]]
}

# Raise the distortion warning of a result (`what`: the function's name)
# when its report flags a coordinate, unless switched off.  Returns x.
warn_distortion <- function(x, what) {
  r <- if (inherits(x, "kb_ksdt_chains")) x[["merged"]][["moments"]] else
    compression_moments(x)
  if (is.null(r) || !any(r$flagged) ||
      isFALSE(getOption("kernbayes.warn_distortion", TRUE))) {
    return(x)
  }
  f <- which(r$flagged)
  k <- utils::head(f[order(-pmax(abs(r$shift[f]),
                                 abs(log(r$sd_ratio[f])), na.rm = TRUE))], 5L)
  desc <- sprintf("%s (shift %s sd, sd ratio %s)", r$variable[k],
                  format(round(r$shift[k], 2), nsmall = 2),
                  fmt_ratio_vec(r$sd_ratio[k]))
  more <- if (length(f) > length(k)) sprintf(" and %d more", length(f) - length(k))
  else ""
  msg <- sprintf(paste0(
    "%s() moved %d of %d coordinates away from the moments of %s: %s%s. ",
    "Either the selection distorts the posterior (greedy KSD selection, ",
    "stein_thin() and KSDT, under-represents tails and light modes; ",
    "kernel_thin() kept the moments best in the package's comparison, ",
    "vignette(\"kernbayes\")), or the sample itself is off (a short or ",
    "poorly mixing chain) and the scores moved the set towards the target: ",
    "compare with a longer run. See compression_moments(); ",
    "options(kernbayes.warn_distortion = FALSE) silences this warning."),
    what, length(f), nrow(r), attr(r, "against"), paste(desc, collapse = "; "),
    more)
  warning(structure(class = c("kb_warning_distortion", "warning", "condition"),
                    list(message = msg, call = NULL, moments = r)))
  x
}

fmt_ratio_vec <- function(v) vapply(v, fmt_ratio, "")
