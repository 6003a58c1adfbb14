# Offline thinning: greedy Stein thinning, its gradient-free variant, MMD
# thinning (kernel herding) and KSD-optimal weights.

check_m <- function(m, n, unique) {
  if (missing(m)) stop_arg("m", "is missing: give the number of points to select")
  m <- check_count(m, "m")
  if (unique && m > n) {
    stop_arg("m", sprintf("must be at most nrow(x) = %d when unique = TRUE", n))
  }
  m
}

# The one constructor of kb_thin. `path`: the discrepancy after each
# selected point, a one-element list named by the discrepancy (ksd or
# mmd), which names its field. `setup`: the stein_setup() of the sample
# (Stein thinning), or list(kernel, scale) (the resolved kernel and column
# scales of MMD thinning, no scores). Kept for ksd(th)
# to recompute the printed KSD exactly: the resolved kernel, the
# standardisation scale (NULL: none) and the scores of the selected points
# in the coordinates of x. `settings` (standardize, unique, ..., and chain,
# iteration, draws of the selected points when known, weights of a
# weighted selection) become fields.  `reference`: the moments the
# selection is judged against (moments.R; NULL: no report, for Stein
# Points, which select from no sample), described by `against`.
new_thin <- function(index, x, path, method, setup, settings,
                     reference = sample_moments(x),
                     against = sprintf("the sample (%d points)", nrow(x))) {
  score <- NULL
  kernel <- setup[["kernel"]]
  scale <- setup[["scale"]]
  if (!is.null(setup[["s"]])) {
    s <- setup[["s"]][index, , drop = FALSE]
    if (!is.null(kernel$Q)) s <- s %*% t(kernel$Q)
    if (!is.null(scale)) s <- sweep(s, 2L, scale, "/")
    dimnames(s) <- list(NULL, colnames(x))
    score <- s
  }
  structure(c(list(index = index, points = x[index, , drop = FALSE],
                   score = score),
              path,
              list(method = method, n = nrow(x), d = ncol(x), m = length(index),
                   kernel = kernel, scale = scale, sample = x),
              settings,
              list(moments = moment_report(x[index, , drop = FALSE],
                                           settings[["weights"]], reference,
                                           against))),
            class = "kb_thin")
}

#' Stein thinning
#'
#' Selects `m` points of a sample (typically MCMC output) that greedily
#' minimise the kernelized Stein discrepancy to the target: at step \eqn{j}
#' the point \eqn{x_i} minimising \eqn{k_p(x_i, x_i) + 2\sum_{l < j}
#' k_p(x_i, x_{\pi_l})} is added (Riabiz et al., 2022). Points far from the
#' target's mass, such as burn-in, are left out automatically. The cost is
#' \eqn{nm} Stein kernel evaluations and \eqn{O(nd)} memory.
#'
#' The defaults reproduce the reference implementation: columns standardised
#' by their mean absolute deviation, preconditioner `"id"`, IMQ kernel with
#' \eqn{c = 1}, \eqn{\beta = -1/2}, repeated points allowed, and the first
#' index on ties.
#'
#' Greedy KSD minimisation has known pathologies (Bénard, Staber and Da
#' Veiga, 2023): it under-weights well-separated modes (on a mixture with
#' weights 0.2 and 0.8 it put 0.38-0.53 of 200 points in the heavy mode, in
#' 5 samples of 5000 exact draws) and favours points where \eqn{\log p}
#' is convex. `regularize` adds their fix to the greedy objective: at step
#' \eqn{t} the point minimising \deqn{k_p(x, x) + \Delta^+ \log p(x) -
#' \lambda t \log p(x) + 2 \sum_{l < t} k_p(x, x_{\pi_l}),} with the
#' Laplacian correction \eqn{\Delta^+ \log p(x) = \sum_k \max(0,
#' \partial^2_{kk} \log p(x))} and the entropic term of weight
#' \eqn{\lambda} (`TRUE`: \eqn{1/m}, the paper's default). On the mixture
#' above the regularised selection put 0.69-0.82 (mean 0.74) in the heavy
#' mode. \eqn{\log p} comes from `log_density`, else from the target
#' (`score` a [kb_target()] or `x` a Stan fit); the Hessian diagonal from
#' `hessian_diag`, else by central differences of the score function or
#' target (\eqn{2d} more score evaluations per point). With standardised
#' columns (\eqn{x_k / \sigma_k}) the Laplacian term is taken in those
#' coordinates, \eqn{\sum_k \sigma_k^2 \max(0, \partial^2_{kk} \log
#' p)}, as the Stein kernel is. The `ksd` path is the plain KSD of the
#' selected points. [ksdt()] offers the same rule for its choice among
#' candidates (`ksdt(x, score, candidates = m, regularize = )`, with
#' \eqn{t = |D| + 1} and, for `TRUE`, \eqn{\lambda = 1/t}: see
#' 'Regularised candidate rule' in [ksdt()]), and so do [ksdt_sample()]
#' and [sp_mcmc()] for their MCMC candidates (`regularize = `); KSDT's
#' add-and-prune steps compare the KSD of dictionaries and are not
#' regularised, and `ksdt_push()` does not offer it.
#'
#' @inheritParams stein_kernel_matrix
#' @inheritParams ksd
#' @param m Number of points to select.
#' @param unique If `TRUE`, never select a point twice (then `m <= n`).
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `NULL` (automatic).
#' @param regularize `FALSE` (default: the reference algorithm), `TRUE`
#'   (regularised Stein thinning with \eqn{\lambda = 1/m}) or a positive
#'   \eqn{\lambda}; see Details.
#' @param log_density For `regularize`: \eqn{\log p} (up to a constant)
#'   at the rows of `x` (a vector), or a function of one point; `NULL`
#'   (default): from the target.
#' @param hessian_diag For `regularize`: the diagonal of the Hessian of
#'   \eqn{\log p} at the rows of `x` (an \eqn{n \times d} matrix), or a
#'   function of one point returning \eqn{d} values; `NULL` (default):
#'   central differences of the score (a function or target).
#' @return An object of class `kb_thin`: a list with `index` (1-based row
#'   indices in selection order), `points` (the `m x d` selected rows),
#'   `score` (the scores of the selected points, `m x d`, in the
#'   coordinates of `x`), `ksd` (the KSD of the first \eqn{j} selected
#'   points, \eqn{j = 1..m}), `method`, `n`, `d`, `m`, `kernel` (as
#'   resolved on the sample), `scale` (the column scales of the
#'   standardisation, `NULL` without it), `sample` and the settings; for
#'   labelled input (several chains, a Stan fit) `chain` and `iteration` of
#'   each selected point, and for a Stan fit `draws`, the selected draws on
#'   the constrained scale. The selection is made over all chains together.
#'   `kernel`, `scale` and `score` let [ksd()] recompute the printed KSD
#'   (`ksd(th)`) and compare it with the whole sample's (`ksd(th,
#'   reference = x)`). It has `print`, `summary` and `plot` methods, and
#'   converts to posterior draws and data frames (`as_draws_df()`,
#'   `as_draws_matrix()`, `as.data.frame()`: see [as_draws.kb_result]).
#' @references Riabiz, M., Chen, W. Y., Cockayne, J., Swietach, P., Niederer,
#'   S. A., Mackey, L. and Oates, C. J. (2022). Optimal thinning of MCMC
#'   output. *JRSS B*, 84(4), 1059-1081. Bénard, C., Staber, B. and Da
#'   Veiga, S. (2023). Kernel Stein discrepancy thinning: a theoretical
#'   perspective of pathologies and a practical fix with regularization.
#'   *NeurIPS*.
#' @seealso [stein_thin_gf()], [mmd_thin()], [ksd_weights()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' # a chain-like sample with a burn-in far from the target
#' x <- rbind(cbind(seq(6, 2, length.out = 50), 2), sample_target(tg, 950))
#' th <- stein_thin(x, tg, m = 30)
#' th
#' plot(th)
#' # a mixture whose light mode greedy thinning over-weights
#' mix <- gaussian_mixture_target(rbind(c(-3, 0), c(3, 0)), weights = c(0.2, 0.8))
#' y <- sample_target(mix, 2000)
#' mean(y[stein_thin(y, mix, 100)$index, 1] > 0)
#' mean(y[stein_thin(y, mix, 100, regularize = TRUE)$index, 1] > 0)
#' @export
stein_thin <- function(x, score, m, kernel = imq_kernel(), unique = FALSE,
                       regularize = FALSE, log_density = NULL,
                       hessian_diag = NULL, standardize = TRUE,
                       nthreads = NULL, chain = NULL, progress = NULL) {
  unique <- check_flag(unique, "unique")
  lambda <- check_regularize(regularize)
  # m is checked before a Stan fit's gradients are computed; its bound
  # (unique = TRUE) once the sample's size is known
  if (missing(m)) stop_arg("m", "is missing: give the number of points to select")
  m <- check_count(m, "m")
  smp <- as_sample(x, score, chain)
  x <- smp$x
  m <- check_m(m, nrow(x), unique)
  nthreads <- resolve_nthreads(nthreads)
  reg <- if (!is.null(lambda)) {
    reg_sources(smp, log_density, hessian_diag)
  }
  prog <- progress_reporter(m, "Stein thinning", progress)
  st <- stein_setup(x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  ctl <- list()
  if (!is.null(lambda)) {
    ctl <- list(lap = laplacian_plus(reg$hessian, x, st$scale),
                logp = resolve_log_density(reg$log_density, x, "log_density"),
                lambda = if (identical(lambda, "default")) 1 / m else lambda)
  }
  res <- .Call(C_kb_stein_thin, st$x, st$s, st$kernel, m, unique, ctl,
               nthreads, prog$callback())
  prog$done()
  path <- sqrt(pmax(thin_path_sums(res$gain), 0)) / seq_len(m)
  out <- new_thin(res$index, x, list(ksd = path), if (is.null(lambda)) "Stein thinning"
           else "regularised Stein thinning", st,
           c(list(standardize = !is.null(st$scale), unique = unique,
                  regularize = if (is.null(lambda)) FALSE else ctl$lambda),
             sample_labels(smp, res$index)))
  warn_distortion(out, "stein_thin")
}

# regularize: FALSE (none: NULL), TRUE ("default": lambda = 1 / m) or a
# positive lambda.
check_regularize <- function(regularize) {
  if (isFALSE(regularize)) return(NULL)
  if (isTRUE(regularize)) return("default")
  if (is.numeric(regularize) && length(regularize) == 1L) {
    return(check_number(regularize, "regularize", lower = 0,
                        lower_open = TRUE))
  }
  stop_arg("regularize", "must be FALSE, TRUE or a positive number (the ",
           "weight lambda of the entropic term)")
}

# Where regularised Stein thinning takes log p and the Hessian diagonal of
# log p from, checked before anything is evaluated: the arguments, else the
# target (a kb_target score or a Stan fit's target); the Hessian diagonal
# by finite differences of a score function or target.
reg_sources <- function(smp, log_density, hessian_diag) {
  x <- smp$x
  tg <- if (inherits(smp$score, "kb_target")) smp$score else smp$target
  if (is.null(log_density)) {
    if (is.null(tg)) {
      stop_arg("log_density", "is needed with 'regularize' when the score ",
               "is not a kb_target: give log p at the rows of x (a vector) ",
               "or a function of one point")
    }
    log_density <- tg
  }
  check_log_density(log_density, x, "log_density")
  if (is.null(hessian_diag)) {
    src <- if (!is.null(tg)) tg else if (is.function(smp$score)) smp$score
    if (is.null(src)) {
      stop_arg("hessian_diag", "is needed with 'regularize' when the score ",
               "is a matrix: give the diagonal of the Hessian of log p at ",
               "the rows of x (an n x d matrix) or a function of one point")
    }
    hessian_diag <- structure(list(score = src), class = "kb_fd_hessian")
  } else if (is.function(hessian_diag)) {
    hessian_diag <- hessian_diag
  } else {
    h <- as_points(hessian_diag, "hessian_diag", ncol(x))
    if (!identical(dim(h), dim(x))) {
      stop_arg("hessian_diag", sprintf(paste0(
        "must have the dimensions of x (%d x %d); it is %d x %d"), nrow(x),
        ncol(x), nrow(h), ncol(h)))
    }
    hessian_diag <- h
  }
  list(log_density = log_density, hessian = hessian_diag)
}

# The Laplacian term of Benard et al. (2023), sum_k max(0, d^2 log p /
# dx_k^2), in the coordinates the Stein kernel is computed in: with
# standardised columns (x / scale) each term is multiplied by scale_k^2.
laplacian_plus <- function(hessian, x, scale) {
  H <- if (inherits(hessian, "kb_fd_hessian")) {
    fd_hessian_diag(hessian$score, x)
  } else if (is.function(hessian)) {
    eval_rows(hessian, x, ncol(x), "hessian_diag")
  } else {
    hessian
  }
  if (any(!is.finite(H))) {
    stop_arg("hessian_diag", sprintf(
      "must be finite (NA, NaN or Inf at row %d)", first_bad_row(H)))
  }
  Hp <- pmax(H, 0)
  if (!is.null(scale)) Hp <- sweep(Hp, 2L, scale^2, "*")
  rowSums(Hp)
}

# Central differences of the score along each coordinate:
# H_kk(x) ~ (s_k(x + h e_k) - s_k(x - h e_k)) / (2 h), h relative to |x_k|.
fd_hessian_diag <- function(score, x) {
  H <- x
  for (k in seq_len(ncol(x))) {
    h <- fd_step(x[, k])
    xp <- xm <- x
    xp[, k] <- x[, k] + h
    xm[, k] <- x[, k] - h
    H[, k] <- (resolve_score(score, xp)[, k] - resolve_score(score, xm)[, k]) /
      (xp[, k] - xm[, k])
  }
  H
}

# Running sums of the greedy gains, the squared discrepancy times j^2 of
# the first j selected points: finite terms can still overflow their sum.
thin_path_sums <- function(gain) {
  cs <- cumsum(gain)
  if (!all(is.finite(cs))) {
    stop_numeric(sprintf(paste0(
      "the discrepancy of the first %d selected points overflows: scale ",
      "the data or the kernel"), which(!is.finite(cs))[1L]))
  }
  cs
}

# Check a log density argument (vector, one-point function or kb_target)
# without evaluating it.
check_log_density <- function(f, x, arg) {
  n <- nrow(x)
  if (inherits(f, "kb_target")) {
    if (!identical(as.integer(f$dim), ncol(x))) {
      stop_arg("x", sprintf(paste0("must have %d columns (the dimension of ",
                                   "'%s'); it has %d"), as.integer(f$dim),
                            arg, ncol(x)))
    }
  } else if (is.numeric(f) && is.null(dim(f))) {
    if (length(f) != n) {
      stop_arg(arg, sprintf("must have length nrow(x) = %d; it has %d", n,
                            length(f)))
    }
  } else if (!is.function(f)) {
    stop_arg(arg, "must be a numeric vector of log densities at the rows of ",
             "x, a function or a kb_target")
  }
  invisible(f)
}

# Log densities at the rows of x from a vector, a one-point function or a
# kb_target.
resolve_log_density <- function(f, x, arg) {
  check_log_density(f, x, arg)
  if (inherits(f, "kb_target")) {
    v <- target_log_density(f, x)
  } else if (is.function(f)) {
    v <- eval_rows(f, x, 1L, arg)
  } else {
    v <- as.double(f)
  }
  if (anyNA(v) || any(!is.finite(v))) {
    stop_arg(arg, sprintf("must be finite (NA, NaN or Inf at row %d)",
                          which(!is.finite(v))[1L]))
  }
  v
}

#' Gradient-free Stein thinning
#'
#' Stein thinning for targets whose score is unavailable or expensive
#' (Fisher et al., 2021): the Stein kernel of a proxy \eqn{q} with a known
#' score, reweighted by \eqn{q/p}, i.e.
#' \eqn{k_q(x_i, x_j) \exp(w_i + w_j)} with \eqn{w = \log q - \log p} shifted
#' to minimum 0. Only the (unnormalised) log density of the target \eqn{p}
#' is needed. A common proxy is a Gaussian fitted to the sample.
#'
#' Large ranges of \eqn{w} make a few points dominate; a warning is given
#' when the range exceeds 10, and `range_cap` clips \eqn{w} at that value.
#'
#' @inheritParams stein_thin
#' @param log_density Log density of the target at the rows of `x` (a
#'   vector), or a function of one point or a [kb_target()] to evaluate it.
#' @param log_p Deprecated name of `log_density` (a message once per
#'   session).
#' @param log_q,score_q Log density and score of the proxy at the rows of
#'   `x`: vectors / matrices, functions of one point or a [kb_target()]
#'   (give the same target for both).
#' @param ... Further arguments to [stein_thin()]: `kernel`, `standardize`,
#'   `unique`, `nthreads`, `chain`, `progress`.
#' @param range_cap `NULL`, or a positive number at which the shifted log
#'   weights are clipped.
#' @return A `kb_thin` object as from [stein_thin()], with the log weights
#'   `w` added; `ksd` is the path of the gradient-free discrepancy.
#' @references Fisher, M. A., Nolan, T., Graham, M., Prangle, D. and
#'   Oates, C. J. (2021). Measure transport with kernel Stein discrepancy.
#'   *AISTATS*.
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0), diag(c(1, 2)))
#' x <- sample_target(tg, 500)
#' q <- gaussian_target(colMeans(x), cov(x))   # proxy fitted to the sample
#' th <- stein_thin_gf(x, log_density = tg, log_q = q, score_q = q, m = 20)
#' th$index
#' @export
stein_thin_gf <- function(x, log_density, log_q, score_q, m, ...,
                          range_cap = NULL, log_p) {
  if (!missing(log_p)) {
    log_density <- deprecated_arg("log_p", "log_density", "stein_thin_gf",
                                  log_p, missing(log_density))
  }
  dots <- list(...)
  bad <- setdiff(names(dots), c("kernel", "standardize", "unique", "nthreads",
                                "chain", "progress"))
  if (length(bad) || (length(dots) && is.null(names(dots)))) {
    stop_arg("...", "takes only kernel, standardize, unique, nthreads, chain and progress")
  }
  kernel <- if (is.null(dots$kernel)) imq_kernel() else dots$kernel
  standardize <- check_standardize(if (is.null(dots$standardize)) TRUE else
                                     dots$standardize)
  unique <- check_flag(if (is.null(dots$unique)) FALSE else dots$unique,
                       "unique")
  nthreads <- resolve_nthreads(dots$nthreads)
  smp <- as_sample(x, NULL, dots$chain)
  x <- smp$x
  m <- check_m(m, nrow(x), unique)
  prog <- progress_reporter(m, "gradient-free Stein thinning",
                            dots$progress)
  if (!is.null(range_cap)) {
    range_cap <- check_number(range_cap, "range_cap", lower = 0,
                              lower_open = TRUE)
  }
  # every argument is checked before any closure runs
  check_log_density(log_density, x, "log_density")
  check_log_density(log_q, x, "log_q")
  check_score(score_q, x, "score_q")
  if (!inherits(kernel, "kb_kernel")) {
    stop_arg("kernel", "must be a kernel object such as imq_kernel() or ",
             "gaussian_kernel()")
  }
  lp <- resolve_log_density(log_density, x, "log_density")
  lq <- resolve_log_density(log_q, x, "log_q")
  w <- lq - lp
  if (any(!is.finite(w))) {
    stop_numeric(sprintf(paste0("log q - log p overflows at row %d (log_q = ",
                                "%s, log_density = %s): rescale the log densities"),
                         which(!is.finite(w))[1L],
                         format(lq[!is.finite(w)][1L], digits = 3),
                         format(lp[!is.finite(w)][1L], digits = 3)))
  }
  w <- w - min(w)
  if (!is.null(range_cap)) w <- pmin(w, range_cap)
  if (max(w) > 709) {
    stop_numeric(sprintf(paste0(
      "the log weights log q - log p span %s: their exp() overflows; set ",
      "'range_cap' (at most 354 keeps exp(w_i + w_j) finite)"),
      format(max(w), digits = 4)))
  }
  if (is.null(range_cap) && max(w) > 10) {
    warning(sprintf(paste0("the log weights log q - log p span %.1f (> 10): ",
                           "a few points dominate; consider a better proxy ",
                           "or 'range_cap'"), max(w)), call. = FALSE)
  }
  st <- stein_setup(x, score_q, kernel, standardize, "score_q",
                    rows = heuristic_rows(smp))
  res <- .Call(C_kb_stein_thin, st$x, st$s, st$kernel, m, unique,
               list(w = w), nthreads, prog$callback())
  prog$done()
  path <- sqrt(pmax(thin_path_sums(res$gain), 0)) / seq_len(m)
  # judged against the sample from the proxy q: moving its moments towards
  # p is the method's purpose, so a shift is reported but not warned of
  out <- new_thin(res$index, x, list(ksd = path), "gradient-free Stein thinning",
                  st, c(list(standardize = !is.null(st$scale), unique = unique),
                        sample_labels(smp, res$index)),
                  against = sprintf("the sample from the proxy q (%d points)",
                                    nrow(x)))
  out$w <- w
  out
}

#' MMD thinning (kernel herding on the sample)
#'
#' Selects `m` points of a sample greedily minimising the maximum mean
#' discrepancy to the whole sample; no score is needed. At step \eqn{j} the
#' point minimising \eqn{k(x_i, x_i) + 2\sum_{l<j} k(x_i, x_{\pi_l}) -
#' 2 j \mu(x_i)} is added, where \eqn{\mu} is the sample's kernel mean
#' embedding, computed on at most `embed_size` evenly spaced rows.
#'
#' @inheritParams stein_thin
#' @param x The sample: an `n x d` numeric matrix, a data frame of numbers,
#'   a `coda::mcmc` or `mcmc.list`, a posterior draws object (a vector is
#'   `n` one-dimensional points; see 'Points and samples' in
#'   [kernbayes-package]), or a Stan fit (`stanfit` or `brmsfit`), whose
#'   post-warm-up draws are taken on the unconstrained scale (no gradients
#'   are computed: MMD thinning needs no score). Draws objects, `mcmc.list`
#'   and Stan fits keep their chain and iteration labels (rows chain after
#'   chain, as [posterior::as_draws_matrix()] stacks them).
#' @param kernel A base kernel; default Gaussian with the median heuristic.
#' @param embed_size Maximum number of rows for the mean embedding.
#' @param unique Never select a point twice (default `TRUE`).
#' @return A `kb_thin` object (see [stein_thin()]) whose path is `mmd`, the
#'   MMD between the first \eqn{j} selected points and the embedding rows,
#'   and without `score` (MMD thinning uses none; `scale` is that of the
#'   standardisation, `NULL` without it).
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(2000), ncol = 2)
#' th <- mmd_thin(x, 25)
#' tail(th$mmd, 1)
#' @export
mmd_thin <- function(x, m, kernel = gaussian_kernel(precon = "med"),
                     embed_size = 10000, unique = TRUE, standardize = TRUE,
                     nthreads = NULL, chain = NULL, progress = NULL) {
  smp <- as_sample(x, NULL, chain, gradients = FALSE)
  x <- smp$x
  n <- nrow(x)
  unique <- check_flag(unique, "unique")
  m <- check_m(m, n, unique)
  if (is.numeric(embed_size) && length(embed_size) == 1L &&
      isTRUE(is.finite(embed_size) && embed_size > n)) {
    embed_size <- n   # any size beyond n means the whole sample
  }
  embed_size <- check_count(embed_size, "embed_size")
  scale <- standardize_scale(standardize, x)
  nthreads <- resolve_nthreads(nthreads)
  xs <- scale_points(x, scale)
  rk <- resolve_kernel(kernel, xs, rows = heuristic_rows(smp))
  xr <- in_basis(xs, rk)
  rows <- if (n > embed_size) {
    floor(seq(0, n - 1, length.out = embed_size)) + 1
  } else {
    seq_len(n)
  }
  prog <- progress_reporter(m, "MMD thinning", progress)
  res <- .Call(C_kb_mmd_thin, xr, xr[rows, , drop = FALSE], rk, m, unique,
               nthreads, prog$callback())
  prog$done()
  j <- seq_len(m)
  mmd2 <- cumsum(res$gain) / j^2 - 2 * cumsum(res$mu[res$index]) / j +
    mean(res$mu[rows])
  out <- new_thin(res$index, x, list(mmd = sqrt(pmax(mmd2, 0))), "MMD thinning",
           list(kernel = rk, scale = scale),
           c(list(standardize = !is.null(scale), unique = unique,
                  embed_size = length(rows)), sample_labels(smp, res$index)))
  warn_distortion(out, "mmd_thin")
}

#' @export
print.kb_thin <- function(x, ...) {
  check_result(x)
  path <- if (is.null(x$ksd)) x$mmd else x$ksd
  what <- if (is.null(x$ksd)) "MMD" else "KSD"
  cat(sprintf("%s: %d of %d points in dimension %d\n", x$method, x$m, x$n,
              x$d))
  cat("  kernel:", describe_ksd_kernel(x$kernel, x[["scale"]]), "\n")
  cat(sprintf("  repeats allowed: %s; distinct points: %d\n",
              if (x$unique) "no" else "yes", length(unique(x$index))))
  cat(sprintf("  %s of the selected points: %s (this kernel%s)\n", what,
              format(path[x$m], digits = 6),
              if (what == "KSD") "; ksd(x) recomputes it" else ""))
  db <- x[["debias"]]
  if (!is.null(db)) {
    cat(sprintf("  debiasing: %s\n", switch(db,
      simplex = "KSD-optimal simplex weights of the whole sample",
      stein = "Stein thinning counts of the whole sample",
      compress = sprintf(paste0("KSD-optimal simplex weights of a %d-point ",
                                "Compress++ coreset (oversample %d)"),
                         length(x$coreset), x$coreset_oversample))))
  }
  w <- x[["weights"]]
  if (!is.null(w)) {
    cat(sprintf("  weights: Kish effective size %s of %d\n",
                format(kish_size(w), digits = 4), x$m))
  }
  moments_line(x[["moments"]])
  k <- min(10L, x$m)
  cat(sprintf("  first %d indices: %s%s\n", k,
              paste(x$index[seq_len(k)], collapse = " "),
              if (x$m > k) " ..." else ""))
  invisible(x)
}

#' Summaries of a thinned set
#'
#' The settings and discrepancy of a thinned set, where its points came from
#' (chains and iterations for labelled input, else rows of the sample) and
#' its effect on the moments (see [compression_moments()]): per coordinate
#' the mean and sd of the set beside the sample's, the mean shift in sample
#' sds and the sd ratio. With `weights` (for instance from
#' `ksd_weights(object)`), the weighted set: Kish's effective sample size
#' \eqn{(\sum w)^2 / \sum w^2} and weighted means and sds.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param object A `kb_thin` object.
#' @param weights Weights on the set's points (one per point, non-negative;
#'   normalised), or `NULL` (default: the result's own weights, if any).
#' @param ... Ignored.
#' @return An object of class `summary.kb_thin`, with a print method.
#' @export
summary.kb_thin <- function(object, weights = NULL, ...) {
  check_result(object, "object")
  path <- if (is.null(object$ksd)) object$mmd else object$ksd
  own <- object[["weights"]]
  mom <- object[["moments"]]
  if (!is.null(weights)) {
    weights <- check_result_weights(weights, object$m)
    mom <- moment_reweight(mom, object$points, weights)
  }
  w <- weights %||% own
  structure(list(method = object$method, n = object$n, d = object$d,
                 m = object$m, distinct = length(unique(object$index)),
                 kish = if (!is.null(w)) kish_size(w),
                 given_weights = !is.null(weights),
                 what = if (is.null(object$ksd)) "MMD" else "KSD",
                 final = path[object$m],
                 kernel = describe_ksd_kernel(object$kernel, object[["scale"]]),
                 span = describe_span(object),
                 first = min(object$index), last = max(object$index),
                 moments = mom,
                 mean_sample = colMeans(object$sample),
                 mean_selected = colMeans(object$points)),
            class = "summary.kb_thin")
}

# Where a selection's points came from: chains and iterations when it knows
# them, else rows of the sample.
describe_span <- function(x) {
  ch <- x[["chain"]]
  it <- x[["iteration"]]
  if (!is.null(ch) && !is.null(it) && length(ch) == length(x$index)) {
    by <- split(as.double(it), ch)
    return(sprintf("points from %d chain%s: %s", length(by),
                   if (length(by) > 1L) "s" else "",
                   paste(sprintf("chain %s: %d points, iterations %.0f to %.0f",
                                 names(by), lengths(by),
                                 vapply(by, min, 0), vapply(by, max, 0)),
                         collapse = "; ")))
  }
  if (!length(x$index)) return("no points")
  sprintf("selected rows of the sample span %d to %d", min(x$index),
          max(x$index))
}

#' @export
print.summary.kb_thin <- function(x, ...) {
  cat(sprintf("%s: %d of %d points (%d distinct), d = %d\n", x$method, x$m,
              x$n, x$distinct, x$d))
  if (!is.null(x$kish)) {
    cat(sprintf("  %sweighted: Kish effective size %s\n",
                if (isTRUE(x$given_weights)) "given weights: " else "",
                format(x$kish, digits = 4)))
  }
  cat("  kernel:", x$kernel, "\n")
  cat(sprintf("  %s of the selection: %s (this kernel%s)\n", x$what,
              format(x$final, digits = 6),
              if (isTRUE(x$given_weights)) ", unweighted" else ""))
  cat(sprintf("  %s\n", x$span))
  if (!is.null(x$moments)) {
    print(x$moments)
  } else {
    tab <- rbind(sample = x$mean_sample, selected = x$mean_selected)
    cat("  column means:\n")
    print(signif(tab, 4))
  }
  invisible(x)
}

#' Plot a thinned sample
#'
#' Two panels: the selected points over the sample (the first two
#' coordinates, or the index plot when \eqn{d = 1}), and the discrepancy of
#' the first \eqn{j} selected points.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_thin` object.
#' @param which Which panels: 1 (points), 2 (path) or both.
#' @param ... Further arguments to [plot.default()] for the points panel.
#' @return `x`, invisibly.
#' @export
plot.kb_thin <- function(x, which = 1:2, ...) {
  check_result(x)
  if (length(which) > 1L) {
    op <- graphics::par(mfrow = c(1L, length(which)))
    on.exit(graphics::par(op))
  }
  if (1L %in% which) {
    s <- x$sample
    if (x$d == 1L) {
      graphics::plot(seq_len(x$n), s[, 1L], col = "grey70", pch = 20,
                     xlab = "row", ylab = colnames(s)[1L] %||% "x1",
                     main = x$method, ...)
      graphics::points(x$index, x$points[, 1L], col = "red", pch = 19)
    } else {
      cn <- colnames(s) %||% paste0("x", seq_len(x$d))
      graphics::plot(s[, 1L], s[, 2L], col = "grey70", pch = 20,
                     xlab = cn[1L], ylab = cn[2L], main = x$method, ...)
      graphics::points(x$points[, 1L], x$points[, 2L], col = "red", pch = 19)
    }
  }
  if (2L %in% which) {
    path <- if (is.null(x$ksd)) x$mmd else x$ksd
    # a log axis needs positive values: an exact fit (a discrepancy of 0,
    # e.g. m = n or a one-point sample) is drawn on a linear axis
    graphics::plot(seq_len(x$m), path, type = "l",
                   log = if (all(path > 0)) "y" else "",
                   xlab = "number of selected points",
                   ylab = if (is.null(x$ksd)) "MMD" else "KSD",
                   main = "discrepancy of the selection")
  }
  invisible(x)
}


#' KSD-optimal weights
#'
#' Weights \eqn{w} on the rows of a sample that minimise the weighted KSD
#' \eqn{w^\top K_p w} subject to \eqn{\sum_i w_i = 1} (and \eqn{w \ge 0}
#' when `nonneg = TRUE`), where \eqn{K_p} is the Stein kernel matrix. Useful
#' to reweight a thinned set. Repeated rows are merged before solving and
#' share their weight equally; standardisation and preconditioner
#' heuristics are computed on the whole sample, repeats included.
#'
#' \eqn{K_p} is formed once, in C (\eqn{n^2} Stein kernel evaluations and
#' \eqn{8 n^2} bytes for \eqn{n} distinct rows: 200 MB at \eqn{n = 5000},
#' checked against the option `kernbayes.max_memory` before anything is
#' computed). The non-negative problem is then solved in C by a primal
#' active-set method: the weights on the current support are the optimum
#' with the support's weights free, from a Cholesky factor of the support's
#' \eqn{K_p} that is updated (not recomputed) as points enter and leave;
#' the points that most violate the optimality conditions enter, those whose
#' weight reaches zero leave. A step costs about \eqn{n s} operations for a
#' support of \eqn{s} points (on `nthreads` threads, with the same result on
#' any number). The solver works on \eqn{K_p + \delta I} with
#' \eqn{\delta = 10^{-12} \max_i K_p(x_i, x_i)}, which keeps the factor
#' positive definite when \eqn{K_p} is numerically singular (close points,
#' smooth kernels) and moves the optimum by at most \eqn{\delta}. In the
#' tests and benchmarks (up to \eqn{n = 2000}) the result agrees with
#' `quadprog::solve.QP` to 1e-8 relative in \eqn{w^\top K_p w} (1e-13 on
#' Gaussian samples, ours the lower) and meets the optimality conditions
#' (\eqn{(K_p w)_i} equal to \eqn{w^\top K_p w} on the support and at least
#' that elsewhere) to about 1e-14 of the largest diagonal entry. Measured on
#' one thread of a shared two-core machine for a 2-d Gaussian sample and
#' the IMQ kernel: \eqn{n = 1000} in 0.05 s (`quadprog::solve.QP` 25 s,
#' the R loop of earlier versions 6.3 s), \eqn{n = 5000} in 3 s, 1.3 s of
#' it forming \eqn{K_p} (`inst/bench/bench-weights.R`); a 10-d sample of
#' 5000 points, whose optimal support has 3700 points, in 11 s.
#' The unconstrained problem is solved in closed form,
#' \eqn{w \propto K_p^{-1} 1} (in R, with a ridge only when the Cholesky
#' factorisation fails).
#'
#' @inheritParams stein_kernel_matrix
#' @inheritParams ksd
#' @param nonneg Constrain the weights to be non-negative (default `TRUE`).
#' @param progress Show progress (see 'Progress' in [kernbayes-package]):
#'   the solver's steps, with the size of the support and the KSD so far
#'   (forming the Stein kernel matrix is not reported); default
#'   `NULL` (automatic).
#' When the optimal \eqn{w^\top K_p w} is below the rounding error of its
#' own sum (less than 1e-12 of \eqn{(\sum_i w_i \sqrt{K_{p,ii}})^2}, as
#' for points of scale 1e-100 with scores of scale 1e100 and `standardize
#' = FALSE`, where the score term swamps the others), the value would be
#' noise and the call is an error of class `kb_error_numeric` naming both
#' scales; [ksd()] refuses such a V-statistic likewise.
#'
#' On a thinning or KSDT result (`ksd_weights(th)`: [stein_thin()],
#' [kernel_thin()], [ksdt()], ...), the weights are on its points, with
#' its scores, under the kernel and standardisation it was made with, so
#' that `attr(w, "ksd")` equals `ksd(th, weights = w)`; `summary(th, weights
#' = w)` then reports the weighted set and `as_draws_df(th, weights = w)`
#' keeps the weights as `.log_weight`. An MMD-thinning result carries no
#' scores: give `score` for its points.
#'
#' @param x A sample (as for [ksd()]), or a thinning or KSDT result
#'   (`kb_thin`, `kb_ksdt`, or `kb_ksdt_chains` with a merged dictionary):
#'   then `kernel` and `standardize` must be left out.
#' @return A numeric vector of class `kb_weights`, weights summing to 1, one
#'   per row of `x` (per point of a result), with attributes `ksd` (the
#'   weighted KSD), `moments` (the weighted set's moments against the
#'   sample, or against the result's sample: see [compression_moments()])
#'   and, for labelled input (several chains, a Stan fit), `chain` and
#'   `iteration`. It prints with Kish's effective size and the moment
#'   report; `as.numeric(w)` gives the plain weights.
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 40)
#' w <- ksd_weights(x, tg)
#' c(uniform = ksd(x, tg), weighted = attr(w, "ksd"))
#' @export
ksd_weights <- function(x, score, kernel = imq_kernel(), nonneg = TRUE,
                        standardize = TRUE, nthreads = NULL, chain = NULL,
                        progress = NULL) {
  nonneg <- check_flag(nonneg, "nonneg")
  nthreads <- resolve_nthreads(nthreads)
  if (inherits(x, c("kb_thin", "kb_ksdt", "kb_ksdt_chains"))) {
    if (!missing(kernel) || !missing(standardize)) {
      stop_arg(if (missing(kernel)) "standardize" else "kernel", sprintf(
        paste0("must not be given with a %s: its weights use the kernel and ",
               "standardisation it was made with (so that attr(w, \"ksd\") ",
               "equals ksd(x, weights = w)); to use another kernel give its ",
               "points, e.g. ksd_weights(x$points, x$score, kernel)"),
        class(x)[1L]))
    }
    if (!is.null(chain)) {
      stop_arg("chain", "must be NULL when x is a thinning or KSDT result")
    }
    prog <- progress_reporter(NA, "KSD weights: solver iteration", progress)
    return(warn_distortion(result_weights(x, if (missing(score)) NULL else
                                            score, nonneg, nthreads, prog),
                           "ksd_weights"))
  }
  prog <- progress_reporter(NA, "KSD weights: solver iteration", progress)
  smp <- as_sample(x, score, chain)
  # standardisation and preconditioner heuristics see the whole sample,
  # repeats included; repeats are merged only for the solve
  st <- stein_setup(smp$x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  w <- solve_ksd_weights(st$x, st$s, st$kernel, nonneg, nthreads, prog)
  attr(w, "chain") <- smp$chain
  attr(w, "iteration") <- smp$iteration
  warn_distortion(new_weights(w, smp$x, sample_moments(smp$x),
                              sprintf("the unweighted sample (%d points)",
                                      nrow(smp$x))), "ksd_weights")
}

# The weights of ksd_weights() on the rows of a set already in the Stein
# kernel's coordinates (xr, sr: standardised and rotated; rk: the resolved
# kernel), repeats merged for the solve; attribute ksd.
solve_ksd_weights <- function(xr, sr, rk, nonneg, nthreads, prog) {
  xs <- cbind(xr, sr)
  # exact (bitwise) row keys: merging must not depend on printing precision
  key <- apply(xs, 1L, function(r) paste(sprintf("%a", r), collapse = ","))
  dup <- duplicated(key)
  nu <- sum(!dup)
  # K, and the solver's packed factor of the support's K (at most half of
  # K, allocated in doublings)
  check_memory(8 * (1.75 * nu^2 + 10 * nu), "x",
               sprintf("the Stein kernel matrix of %d distinct points", nu))
  xu <- xr[!dup, , drop = FALSE]
  # C names rows of the sample, not of the merged set, in its messages
  attr(xu, "kb_rows") <- which(!dup)
  K <- .Call(C_kb_stein_matrix, xu, sr[!dup, , drop = FALSE], rk, nthreads)
  v <- if (nonneg) {
    as.numeric(simplex_weights(K, nthreads, prog))
  } else affine_qp(K)
  prog$done()
  # share each distinct point's weight among its copies
  grp <- match(key, key[!dup])
  w <- v[grp] / tabulate(grp, nbins = length(v))[grp]
  v2 <- drop(crossprod(v, K %*% v))
  check_ksd_rounding(v2, diag(K), v, xu, sr[!dup, , drop = FALSE])
  attr(w, "ksd") <- sqrt(max(v2, 0))
  w
}

# ksd_weights() of a thinning or KSDT result: on its points and scores (or
# `score` for an MMD-thinning result, which has none), under the kernel and
# column scales it was made with, judged against its own reference.
result_weights <- function(x, score, nonneg, nthreads, prog) {
  x <- result_set(x)
  P <- result_points(x)
  S <- x[["score"]]
  if (is.null(S)) {
    if (is.null(score)) {
      stop_arg("score", sprintf(paste0(
        "is missing: this %s carries no scores; give the score at its %d ",
        "points (a matrix), a function or a kb_target"), class(x)[1L],
        nrow(P)))
    }
    check_score(score, P)
    S <- resolve_score(score, P)
  } else if (!is.null(score)) {
    stop_arg("score", "must be left out: the result carries its scores")
  }
  rk <- x[["kernel"]]
  scale <- x[["scale"]]
  w <- solve_ksd_weights(in_basis(scale_points(P, scale), rk),
                         in_basis(scale_scores(S, scale), rk), rk, nonneg,
                         nthreads, prog)
  attr(w, "chain") <- x[["chain"]]
  attr(w, "iteration") <- x[["iteration"]]
  mom <- x[["moments"]]
  new_weights(w, P, attr(mom, "reference"), attr(mom, "against"))
}

# Weights as ksd_weights() returns them: class kb_weights, with their moment
# report against `ref` (the weighted points p; NULL: none).
new_weights <- function(w, p, ref, against) {
  attr(w, "moments") <- moment_report(p, as.numeric(w), ref, against)
  class(w) <- "kb_weights"
  w
}

#' @export
print.kb_weights <- function(x, ...) {
  check_result(x)
  v <- as.numeric(x)
  cat(sprintf(paste0("KSD-optimal weights on %d points: %d positive, Kish ",
                     "effective size %s, KSD %s\n"), length(v), sum(v > 0),
              format(kish_size(pmax(v, 0)), digits = 4),
              format(attr(x, "ksd"), digits = 6)))
  moments_line(attr(x, "moments"))
  print(utils::head(v, 10L))
  if (length(v) > 10L) cat(sprintf("... %d more (as.numeric(w) for all)\n",
                                   length(v) - 10L))
  invisible(x)
}

#' @export
summary.kb_weights <- function(object, ...) {
  check_result(object, "object")
  v <- as.numeric(object)
  structure(list(n = length(v), positive = sum(v > 0),
                 kish = kish_size(pmax(v, 0)), ksd = attr(object, "ksd"),
                 range = range(v), moments = attr(object, "moments")),
            class = "summary.kb_weights")
}

#' @export
print.summary.kb_weights <- function(x, ...) {
  cat(sprintf(paste0("KSD-optimal weights on %d points: %d positive, Kish ",
                     "effective size %s, KSD %s; weights from %s to %s\n"),
              x$n, x$positive, format(x$kish, digits = 4),
              format(x$ksd, digits = 6), format(x$range[1L], digits = 3),
              format(x$range[2L], digits = 3)))
  if (!is.null(x$moments)) print(x$moments)
  invisible(x)
}

#' @rdname result_tables
#' @export
as.data.frame.kb_weights <- function(x, row.names = NULL, optional = FALSE,
                                     ...) {
  check_result(x)
  out <- data.frame(point = seq_along(x), weight = as.numeric(x))
  if (!is.null(attr(x, "chain"))) out$chain <- attr(x, "chain")
  if (!is.null(attr(x, "iteration"))) out$iteration <- attr(x, "iteration")
  if (!is.null(row.names)) row.names(out) <- row.names
  out
}

#' @rdname result_tables
#' @export
plot.kb_weights <- function(x, ...) {
  check_result(x)
  v <- as.numeric(x)
  plot_with(graphics::plot, list(
    x = seq_along(v), y = v, type = "h", xlab = "point", ylab = "weight",
    main = sprintf("KSD-optimal weights (Kish effective size %s of %d)",
                   format(kish_size(pmax(v, 0)), digits = 3), length(v))),
    list(...))
  graphics::abline(h = c(0, 1 / length(v)), lty = c(1, 2), col = c("grey", "black"))
  invisible(x)
}

ridge_chol <- function(A) {
  jitter <- 0
  base <- mean(abs(diag(A)))
  if (!is.finite(base)) base <- sum(abs(diag(A)) / nrow(A))
  base <- max(base, .Machine$double.xmin)
  repeat {
    R <- tryCatch(chol(A + diag(jitter, nrow(A))), error = function(e) NULL)
    if (!is.null(R)) return(R)
    jitter <- if (jitter == 0) 1e-12 * base else jitter * 100
    if (jitter > 1e-4 * base) {
      stop_numeric("the Stein kernel matrix is numerically singular (a ",
                   "ridge of 1e-4 times its mean diagonal does not make it ",
                   "positive definite): scale the data or the kernel")
    }
  }
}

# argmin w'Kw subject to sum(w) = 1.
affine_qp <- function(K) {
  R <- ridge_chol(K)
  z <- backsolve(R, forwardsolve(t(R), rep(1, nrow(K))))
  tot <- sum(z)
  if (!is.finite(tot) || !(abs(tot) > 0) || any(!is.finite(z))) {
    stop_numeric("solving for the KSD-optimal weights overflows (K^-1 1 ",
                 "sums to ", format(tot, digits = 3), "): scale the data or ",
                 "the kernel")
  }
  z / tot
}

# argmin w'Kw subject to sum(w) = 1, w >= 0: the primal active-set method
# of src/weights.c (Cholesky factor of the support's K updated as points
# enter and leave), on K + ridge * max(diag(K)) I; tol: the stopping
# tolerance on the KKT residuals relative to the objective.  Returns the
# weights with attributes iterations, support, refactors.
simplex_weights <- function(K, nthreads = 1L, progress = NULL, ridge = 1e-12,
                            tol = 1e-10, tol_abs = 1e-15, batch = 16L) {
  n <- nrow(K)
  ctl <- list(ridge = ridge, tol = tol, tol_abs = tol_abs,
              batch = as.integer(batch),
              max_iter = as.integer(min(50 * n + 100, .Machine$integer.max)))
  cb <- if (is.null(progress)) NULL else progress$callback()
  res <- .Call(C_kb_simplex_weights, K, ctl, nthreads, cb)
  structure(res$weights, iterations = res$iterations, support = res$support,
            refactors = res$refactors)
}
