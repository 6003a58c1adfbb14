# Stein kernel thinning (Li, Dwivedi and Mackey, 2024): debias (simplex
# weights minimising the KSD, or Stein thinning's counts), round the weights
# to an equal-weight multiset, kernel-thin it (KT or Compress++ on the Stein
# kernel, src/kt.c), then refine the candidates over the whole sample
# (kb_kt_refine) next to a Stein thinning baseline.

# Stratified rounding with residuals first: floor(N w_i) copies of row i,
# then N - sum(floor(N w)) rows drawn by stratified sampling (one uniform
# per stratum, as Li, Dwivedi and Mackey's reference code) from the
# remainders; unbiased, each count in [floor(N w), floor(N w) + 2].
# Returns sorted row indices (length N).
stratified_round <- function(w, N) {
  base <- floor(w * N)
  seq0 <- rep.int(seq_along(w), base)
  left <- N - length(seq0)
  if (left <= 0L) return(sort(seq0)[seq_len(N)])
  rem <- pmax(w * N - base, 0)
  if (!(sum(rem) > 0)) rem <- w
  cw <- cumsum(rem / sum(rem))
  cw[length(cw)] <- 1
  u <- (seq_len(left) - 1 + stats::runif(left)) / left
  sort(c(seq0, findInterval(u, cw, left.open = TRUE) + 1L))
}

#' Stein kernel thinning (debiased compression)
#'
#' Compresses a sample that is *biased* for the target (burn-in kept, a
#' biased sampler, a tempered chain, an approximate posterior) to `m`
#' equally weighted points with near-optimal KSD, by the pipeline of Li,
#' Dwivedi and Mackey (2024): (1) debias: weights \eqn{w} on the simplex
#' that make the weighted sample close to the target in KSD; (2) round
#' \eqn{w} to an equally weighted multiset of the sample's rows (stratified
#' rounding, remainders first); (3) kernel-thin that multiset with the
#' Stein kernel ([kernel_thin()]: KT-SPLIT and the candidate with the
#' smallest KSD, or Compress++ with its own swap); (4)
#' KT-SWAP of the result and of a Stein thinning coreset ([stein_thin()],
#' the baseline) against the target over *all* rows of the sample, keeping
#' the better. Plain kernel thinning of a biased sample inherits its bias;
#' the weights remove it first.
#'
#' Debiasing: `debias = "simplex"` solves for the KSD-optimal simplex
#' weights exactly ([ksd_weights()], its active-set solver; memory
#' \eqn{8 n^2} bytes for the Stein kernel matrix); `"stein"` uses the counts
#' of \eqn{n} steps of greedy Stein thinning with repeats (Li et al.'s SKT;
#' \eqn{n^2} kernel evaluations, \eqn{O(n)} memory). The rounded multiset
#' has \eqn{2^g m} rows for `method = "kt"` (\eqn{g} rounds) and \eqn{2^k}
#' (the largest power of 2 in \eqn{n}) for `"compress++"`.
#'
#' Time: the defaults (exact simplex weights, KT of an \eqn{n}-row
#' multiset) suit samples of a few thousand rows. For larger samples use
#' `debias = "stein", method = "compress++"`: on a 2-d chain of
#' \eqn{n = 2^{14}} states, 1.4 s against 12 s (`debias = "stein"`, KT)
#' and 22 s (the defaults), with the same KSD there.
#'
#' @inheritParams kernel_thin
#' @param score The score of the target (as for [stein_thin()]).
#' @param m The number of points; `NULL` (default): about \eqn{\sqrt n} (a
#'   power of 2 for `"compress++"`). For `"kt"`, \eqn{m 2^g \le n} for a
#'   whole \eqn{g}.
#' @param kernel The base kernel of the Stein kernel (default
#'   [imq_kernel()]).
#' @param debias `"simplex"` (default) or `"stein"` (see Details).
#' @param method `"kt"` (kernel thinning, default) or `"compress++"`
#'   (near-linear time; see the section Compress++).
#' @param weighted Also return simplex weights on the selected points
#'   (`weights`, the KSD-optimal weights of the coreset; `ksd_weighted`,
#'   its KSD with them).
#' @param progress Show the debiasing solver's and Compress++'s progress
#'   (see 'Progress' in [kernbayes-package]); default `NULL` (automatic).
#' @return A `kb_thin` (see [stein_thin()]) with `method` "Stein kernel
#'   thinning", the KSD path of the selected points, `weights_debias` (the
#'   debiasing weights of all rows, with attribute `ksd`), `candidates`
#'   (the KSD of the refined kernel-thinning and Stein thinning coresets),
#'   and with `weighted = TRUE` `weights` and `ksd_weighted`.
#' @references Li, L., Dwivedi, R. and Mackey, L. (2024). Debiased
#'   distribution compression. *ICML*.
#' @seealso [kernel_thin()], [stein_thin()], [ksd_weights()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' # a chain that starts far out: 200 states of burn-in, then the target
#' x <- rbind(matrix(rnorm(400, 4), ncol = 2), sample_target(tg, 824))
#' s <- stein_kernel_thin(x, tg)
#' s
#' c(skt = ksd(s), kt = ksd(kernel_thin(x, tg)),
#'   stein = ksd(stein_thin(x, tg, s$m)))
#' @export
stein_kernel_thin <- function(x, score, m = NULL, kernel = imq_kernel(),
                              debias = c("simplex", "stein"),
                              method = c("kt", "compress++"),
                              weighted = FALSE, delta = 0.5,
                              oversample = 1L, standardize = TRUE,
                              nthreads = NULL, chain = NULL,
                              progress = NULL) {
  debias <- check_choice(debias, c("simplex", "stein"), "debias")
  a <- kt_check_args(method, delta, oversample, standardize, progress)
  method <- a$method; delta <- a$delta; oversample <- a$oversample
  standardize <- a$standardize; progress <- a$progress
  weighted <- check_flag(weighted, "weighted")
  # a Stan fit, a chain or a result brings its own scores
  own <- is_stan_fit(x) || inherits(x, c("kb_chain", "kb_thin", "kb_ksdt",
                                         "kb_ksdt_chains"))
  if (missing(score) && !own) {
    stop_arg("score", "is missing: give the target's score")
  }
  if (!is.null(m)) m <- check_count(m, "m")
  nthreads <- resolve_nthreads(nthreads)
  check_kernel(kernel)
  smp <- as_sample(x, if (!missing(score)) score, chain)
  if (is.null(smp$score)) {
    stop_arg("score", "is missing: x carries no scores; give the target's score")
  }
  x <- smp$x
  n <- nrow(x)
  if (n < 4L) stop_arg("x", "must have at least 4 rows")
  size <- if (method == "kt") kt_rounds(m, n) else cpp_size(m, n, oversample)
  N <- if (method == "kt") size$m * 2^size$g else size$N
  if (debias == "simplex") {
    check_memory(8 * 1.75 * n^2, "x", "the Stein kernel matrix of the sample")
  }
  if (method == "kt") {
    check_memory(8 * 1.1 * N^2, "x", "the kernel matrix of kernel thinning")
  }
  st <- stein_setup(x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  m <- size$m
  # (1) debias
  if (debias == "simplex") {
    K <- .Call(C_kb_stein_matrix, st$x, st$s, st$kernel, nthreads)
    prog <- progress_reporter(NA, "Debiasing: solver iteration", progress)
    w <- as.numeric(simplex_weights(K, nthreads, prog))
    prog$done()
    w <- pmax(w, 0) / sum(pmax(w, 0))
    attr(w, "ksd") <- sqrt(max(drop(crossprod(w, K %*% w)), 0))
  } else {
    K <- NULL
    prog <- progress_reporter(n, "Debiasing: Stein thinning", progress)
    res <- .Call(C_kb_stein_thin, st$x, st$s, st$kernel, n, FALSE, list(),
                 nthreads, prog$callback())
    prog$done()
    w <- tabulate(res$index, n) / n
    attr(w, "ksd") <- sqrt(max(thin_path_sums(res$gain)[n], 0)) / n
  }
  # (2) round to an equally weighted multiset of N rows
  seq_rows <- stratified_round(w, N)
  # (3) kernel thinning of the multiset (no swap: step 4 swaps over all rows)
  if (method == "kt" || isTRUE(size$direct)) {
    g <- size$g
    Ks <- if (!is.null(K)) K[seq_rows, seq_rows]
          else .Call(C_kb_stein_matrix, st$x[seq_rows, , drop = FALSE],
                     st$s[seq_rows, , drop = FALSE], st$kernel, nthreads)
    u <- stats::runif(g * N / 2)
    # KT-SPLIT only: a KT-SWAP within the multiset as well lowered the KSD
    # but worsened every KSD-free yardstick (W2, errors of means and
    # covariances; NEWS, "Kernel thinning, Compress++ and Stein kernel
    # thinning")
    res <- .Call(C_kb_kernel_thin, Ks, g, delta, u, NULL, FALSE)
    cs <- res$coresets
    if (ncol(cs) > 1L) {
      v <- apply(cs, 2L, function(i) sum(Ks[i, i]))
      cs <- cs[, which.min(v)]
    }
    cand_kt <- seq_rows[cs]
  } else {
    prog <- progress_reporter(N, "Compress++: rows", progress)
    ctl <- list(g = oversample, r = size$r, delta = delta, swap = TRUE,
                nthreads = nthreads, progress = prog$callback())
    res <- .Call(C_kb_compresspp, st$x[seq_rows, , drop = FALSE],
                 st$s[seq_rows, , drop = FALSE], st$kernel, ctl)
    prog$done()
    cand_kt <- seq_rows[res$index]
  }
  # (4) the Stein thinning baseline, and KT-SWAP of both over all rows
  base <- .Call(C_kb_stein_thin, st$x, st$s, st$kernel, m, FALSE, list(),
                nthreads, NULL)$index
  cands <- .Call(C_kb_kt_refine, st$x, st$s, st$kernel,
                 cbind(as.integer(cand_kt), as.integer(base)), nthreads)
  ksd2 <- apply(cands, 2L, function(i) {
    Ki <- .Call(C_kb_stein_matrix, st$x[i, , drop = FALSE],
                st$s[i, , drop = FALSE], st$kernel, 1L)
    sum(Ki) / length(i)^2
  })
  pick <- if (ksd2[2] < ksd2[1]) 2L else 1L
  index <- cands[, pick]
  Km <- .Call(C_kb_stein_matrix, st$x[index, , drop = FALSE],
              st$s[index, , drop = FALSE], st$kernel, nthreads)
  path <- kt_path(Km, NULL, seq_len(m))
  extra <- list(debias = debias, kt_method = method, delta = delta,
                oversample = if (method == "compress++") oversample,
                used = N, weights_debias = w,
                candidates = c(kernel_thinning = sqrt(max(ksd2[1], 0)),
                               stein_thinning = sqrt(max(ksd2[2], 0))))
  if (weighted) {
    ui <- unique(index)
    Ku <- Km[match(ui, index), match(ui, index), drop = FALSE]
    v <- as.numeric(simplex_weights(Ku, nthreads))
    wt <- numeric(m)
    pos <- match(index, ui)
    wt <- v[pos] / tabulate(pos, nbins = length(ui))[pos]
    extra$weights <- wt
    extra$ksd_weighted <- sqrt(max(drop(crossprod(v, Ku %*% v)), 0))
  }
  out <- new_thin(index, x, list(ksd = path), "Stein kernel thinning", st,
           c(list(standardize = !is.null(st$scale), unique = FALSE), extra,
             sample_labels(smp, index)))
  warn_distortion(out, "stein_kernel_thin")
}
