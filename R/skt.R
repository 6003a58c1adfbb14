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
  # the cumulative shares, capped at 1: summed in double precision (no
  # long double, as on arm64 or under valgrind) they can pass 1 before the
  # last row, and setting the last to 1 would leave them unsorted
  cw <- pmin(cumsum(rem / sum(rem)), 1)
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
#' \eqn{n^2} kernel evaluations, \eqn{O(n)} memory); `"compress"`
#' compresses first and debiases the compressed sample: Compress++ (see
#' [kernel_thin()], the Stein kernel, its node swaps, no final thinning)
#' of the sample's \eqn{N = 2^k} rows (the largest power of 2 in \eqn{n};
#' standard thinning from the end when \eqn{N < n}) to a coreset of
#' \eqn{M} rows that keeps the sample's (biased) distribution, then the
#' exact simplex weights of those \eqn{M} rows (an \eqn{M \times M}
#' matrix). \eqn{M} = bins \eqn{\times 2^{g'} \sqrt{N / \mathrm{bins}}}
#' with the oversampling \eqn{g'} that brings it nearest to 4096 from below
#' and at most \eqn{N/2} (\eqn{M = 4096}, \eqn{g' = 2} at
#' \eqn{n = 2^{18}}). The rounded multiset has \eqn{2^g m} rows for
#' `method = "kt"` (\eqn{g} rounds; with `"compress"` the smallest
#' \eqn{2^g m \ge M}) and \eqn{2^k} for `"compress++"`. Steps (3) and (4)
#' are the same for every route; step (4) costs \eqn{O(n m)} kernel
#' evaluations in \eqn{O(n)} memory.
#'
#' `debias = NULL` (default) takes `"simplex"` up to \eqn{2^{13}} = 8192
#' rows and `"compress"` above. At \eqn{n = 2^{13}} the full path's matrix
#' is 512 MB and the defaults took about 30 s on one thread; at
#' \eqn{2^{14}} 2 GB for the matrix alone and 31-35 s (\eqn{d = 2}) to
#' 294-411 s (\eqn{d = 4}; 7-13 s for the coreset route) on a loaded
#' machine, and \eqn{2^{16}} would need 56 GB. The coreset route's KSD was
#' within 10\% of the full path's (median ratio 1.00 over 28 pairs) on
#' biased chains and over-dispersed samples at \eqn{n = 2^{12}} to
#' \eqn{2^{14}} (ratios in
#' `inst/extdata/skt-scale.csv`, `inst/experiments/skt-scale.R`), and on
#' \eqn{n = 2^{18}} points in \eqn{d = 4} (\eqn{m = 512}) it took 9 s on
#' one thread of an idle machine (36 s with 10 processes on 2 cores), with
#' a peak R heap of 353 MB and a peak resident set of 365 MB while it ran
#' (Compress++ 0.6 s, the 4096-point matrix and weights 4.3 s, the rest
#' KT of the multiset and step (4)).
#' Explicit `"simplex"` and `"stein"` keep their results (the same
#' selection for the same seed as before `"compress"` existed); a
#' `"simplex"` too large for `options(kernbayes.max_memory)` stops before
#' any allocation, naming `debias = "compress"`.
#'
#' Time: besides the coreset route, `debias = "stein", method =
#' "compress++"` avoids every \eqn{n \times n} matrix: on a 2-d chain of
#' \eqn{n = 2^{14}} states, 1.4 s against 12 s (`debias = "stein"`, KT)
#' and 22 s (the full simplex path), with the same KSD there.
#'
#' @inheritParams kernel_thin
#' @param score The score of the target (as for [stein_thin()]).
#' @param m The number of points; `NULL` (default): about \eqn{\sqrt n} (a
#'   power of 2 for `"compress++"`). For `"kt"`, \eqn{m 2^g \le n} for a
#'   whole \eqn{g}.
#' @param kernel The base kernel of the Stein kernel (default
#'   [imq_kernel()]).
#' @param debias `"simplex"`, `"stein"` or `"compress"` (see Details);
#'   `NULL` (default): `"simplex"` up to \eqn{2^{13}} rows, `"compress"`
#'   above.
#' @param method `"kt"` (kernel thinning, default) or `"compress++"`
#'   (near-linear time; see the section Compress++).
#' @param weighted Also return simplex weights on the selected points
#'   (`weights`, the KSD-optimal weights of the coreset; `ksd_weighted`,
#'   its KSD with them).
#' @param progress Show the debiasing solver's and Compress++'s progress
#'   (see 'Progress' in [kernbayes-package]); default `NULL` (automatic).
#' @return A `kb_thin` (see [stein_thin()]) with `method` "Stein kernel
#'   thinning", the KSD path of the selected points, `weights_debias` (the
#'   debiasing weights of all rows, with attribute `ksd`, zero off the
#'   coreset for `"compress"`), `debias` (the route that ran), `coreset`
#'   and `coreset_oversample` (`"compress"`: the \eqn{M} rows and
#'   \eqn{g'}; else `NULL`), `used` (the rows of the rounded multiset),
#'   `candidates` (the KSD of the refined kernel-thinning and Stein
#'   thinning coresets),
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
                              debias = NULL,
                              method = c("kt", "compress++"),
                              weighted = FALSE, delta = 0.5,
                              oversample = 1L, standardize = TRUE,
                              nthreads = NULL, chain = NULL,
                              progress = NULL) {
  if (!is.null(debias)) {
    debias <- check_choice(debias, c("simplex", "stein", "compress"), "debias")
  }
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
  debias <- debias %||% (if (n > skt_full_max()) "compress" else "simplex")
  size <- if (method == "kt") kt_rounds(m, n) else cpp_size(m, n, oversample)
  m <- size$m
  core <- if (debias == "compress") skt_coreset_size(n)
  N <- skt_multiset_size(method, size, core$M)
  if (debias == "simplex") {
    check_memory(8 * 1.75 * n^2, "x", "the Stein kernel matrix of the sample",
                 hint = paste0("debias = \"compress\" debiases a coreset of ",
                               "the sample in bounded memory"))
  }
  if (debias == "compress") {
    check_memory(8 * 1.75 * core$M^2, "x", sprintf(paste0(
      "the Stein kernel matrix of the %d-point coreset (debias = ",
      "\"compress\")"), core$M))
  }
  # KT of the multiset on its Stein matrix (always after the full simplex
  # path, which has it), or on kernel rows (the same coresets, O(N d))
  thin_kt <- method == "kt" || isTRUE(size$direct)
  kt_mat <- thin_kt && (debias == "simplex" || kt_matrix_route(N))
  if (kt_mat) {
    check_memory(8 * 1.1 * N^2, "x", "the kernel matrix of kernel thinning")
  }
  st <- stein_setup(x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  # (1) debias: weights on all rows, or on a Compress++ coreset
  db <- if (debias == "compress") skt_debias_coreset(st, core, delta, nthreads, progress)
        else skt_debias(st, debias, nthreads, progress)
  # (2) round to an equally weighted multiset of N rows
  seq_rows <- db$rows[stratified_round(db$wc, N)]
  # (3) kernel thinning of the multiset (no swap: step 4 swaps over all rows)
  if (thin_kt) {
    Ks <- if (!kt_mat) NULL
          else if (!is.null(db$K) && debias == "simplex") db$K[seq_rows, seq_rows]
          else .Call(C_kb_stein_matrix, st$x[seq_rows, , drop = FALSE],
                     st$s[seq_rows, , drop = FALSE], st$kernel, nthreads)
    db$K <- NULL
    cand_kt <- skt_split(st, seq_rows, Ks, as.integer(round(log2(N / m))),
                         delta, nthreads)
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
                used = N, weights_debias = db$w,
                coreset = if (debias == "compress") db$rows,
                coreset_oversample = core$oversample,
                candidates = c(kernel_thinning = sqrt(max(ksd2[1], 0)),
                               stein_thinning = sqrt(max(ksd2[2], 0))))
  if (weighted) extra <- c(extra, skt_weighted(Km, index, nthreads))
  out <- new_thin(index, x, list(ksd = path), "Stein kernel thinning", st,
           c(list(standardize = !is.null(st$scale), unique = FALSE), extra,
             sample_labels(smp, index)))
  warn_distortion(out, "stein_kernel_thin")
}

# Debiasing weights on all n rows: the exact KSD-optimal simplex weights
# (keeps K, the n x n Stein matrix, for the multiset's kernel thinning), or
# the counts of n steps of Stein thinning. `wc`: the weights of `rows`
# that are rounded (here all rows).
skt_debias <- function(st, debias, nthreads, progress) {
  n <- nrow(st$x)
  K <- NULL
  if (debias == "simplex") {
    K <- .Call(C_kb_stein_matrix, st$x, st$s, st$kernel, nthreads)
    w <- skt_simplex(K, nthreads, progress)
  } else {
    prog <- progress_reporter(n, "Debiasing: Stein thinning", progress)
    res <- .Call(C_kb_stein_thin, st$x, st$s, st$kernel, n, FALSE, list(),
                 nthreads, prog$callback())
    prog$done()
    w <- tabulate(res$index, n) / n
    attr(w, "ksd") <- sqrt(max(thin_path_sums(res$gain)[n], 0)) / n
  }
  list(w = w, wc = w, rows = seq_len(n), K = K)
}

# debias = "compress": Compress++ (oversampling core$oversample, the
# Stein kernel, its node swaps; no final thinning) of the sample's N = 2^k
# rows to a coreset of M rows that keeps the sample's (biased) empirical
# measure, then the exact KSD-optimal simplex weights of the coreset
# (an M x M Stein matrix). `w`: those weights on all n rows (zero off
# the coreset; attribute ksd, the weighted coreset's KSD); `wc`, `rows`:
# the coreset's weights and rows, in Compress++'s order.
skt_debias_coreset <- function(st, core, delta, nthreads, progress) {
  keep <- core$keep
  prog <- progress_reporter(length(keep), "Compress++: rows", progress)
  ctl <- list(g = core$oversample, r = 0L, delta = delta, swap = TRUE,
              nthreads = nthreads, progress = prog$callback(), final = FALSE)
  res <- .Call(C_kb_compresspp, st$x[keep, , drop = FALSE],
               st$s[keep, , drop = FALSE], st$kernel, ctl)
  prog$done()
  rows <- keep[res$compress]
  K <- .Call(C_kb_stein_matrix, st$x[rows, , drop = FALSE],
             st$s[rows, , drop = FALSE], st$kernel, nthreads)
  wc <- skt_simplex(K, nthreads, progress)
  w <- numeric(nrow(st$x))
  w[rows] <- wc
  attr(w, "ksd") <- attr(wc, "ksd")
  attr(wc, "ksd") <- NULL
  list(w = w, wc = wc, rows = rows, K = NULL)
}

# The exact KSD-optimal simplex weights of the points of the Stein matrix
# K (the solver's tiny negatives clipped, renormalised), with attribute
# ksd, the weighted points' KSD.
skt_simplex <- function(K, nthreads, progress) {
  prog <- progress_reporter(NA, "Debiasing: solver iteration", progress)
  w <- as.numeric(simplex_weights(K, nthreads, prog))
  prog$done()
  w <- pmax(w, 0) / sum(pmax(w, 0))
  attr(w, "ksd") <- sqrt(max(drop(crossprod(w, K %*% w)), 0))
  w
}

# KT-SPLIT (g rounds) of the multiset rows `seq_rows` on their Stein
# matrix Ks, or (Ks NULL) on Stein kernel rows computed on the fly (the
# same coresets, O(N d) memory: kernel_thin()'s rows route); returns the
# coreset of smallest KSD (as rows of the sample). No KT-SWAP within the
# multiset: a KT-SWAP there as well lowered the KSD but worsened every
# KSD-free yardstick (W2, errors of means and covariances; NEWS, "Kernel
# thinning, Compress++ and Stein kernel thinning").
skt_split <- function(st, seq_rows, Ks, g, delta, nthreads) {
  N <- length(seq_rows)
  u <- stats::runif(g * N / 2)
  if (!is.null(Ks)) {
    cs <- .Call(C_kb_kernel_thin, Ks, g, delta, u, NULL, FALSE)$coresets
  } else {
    cs <- .Call(C_kb_kernel_thin_rows, st$x[seq_rows, , drop = FALSE],
                st$s[seq_rows, , drop = FALSE], st$kernel, u,
                list(g = g, delta = delta, swap = FALSE,
                     nthreads = nthreads))$coresets
  }
  if (ncol(cs) > 1L) {
    v <- apply(cs, 2L, function(i) {
      if (!is.null(Ks)) return(sum(Ks[i, i]))
      r <- seq_rows[i]
      sum(.Call(C_kb_stein_matrix, st$x[r, , drop = FALSE],
                st$s[r, , drop = FALSE], st$kernel, nthreads))
    })
    cs <- cs[, which.min(v)]
  }
  seq_rows[cs]
}

# The KSD-optimal simplex weights of the selected points (weighted = TRUE):
# one weight per selected point (a repeated row shares its weight).
skt_weighted <- function(Km, index, nthreads) {
  ui <- unique(index)
  Ku <- Km[match(ui, index), match(ui, index), drop = FALSE]
  v <- as.numeric(simplex_weights(Ku, nthreads))
  pos <- match(index, ui)
  list(weights = v[pos] / tabulate(pos, nbins = length(ui))[pos],
       ksd_weighted = sqrt(max(drop(crossprod(v, Ku %*% v)), 0)))
}

# The automatic debiasing route: the exact simplex weights on the whole
# sample (debias = "simplex") up to this many rows, debias = "compress"
# above. At n = 2^13 the full path's Stein matrix is 512 MB and its solve
# about 30 s on one thread (inst/experiments/skt-scale.R); at 2^14 2 GB and
# minutes, while the coreset route is a few seconds with a KSD within a
# few per cent (NEWS). The internal option `kernbayes.skt_full_max` (rows)
# moves the switch (tests lower it to run the coreset route on small
# samples).
skt_full_max <- function() {
  lim <- getOption("kernbayes.skt_full_max", 2^13)
  if (!is.numeric(lim) || length(lim) != 1L || is.na(lim) || lim < 0) {
    stop_arg("kernbayes.skt_full_max", "(option) must be a non-negative number")
  }
  lim
}

# The Compress++ coreset of debias = "compress": the oversampling g whose
# coreset of M = bins 2^g sqrt(bin) rows (cpp_size()) comes nearest to
# the internal option `kernbayes.skt_coreset` (default 4096 rows) from
# below, and at most half the N = 2^k rows compressed (g = 0 when even
# that is larger).
skt_coreset_size <- function(n) {
  target <- getOption("kernbayes.skt_coreset", 4096)
  if (!is.numeric(target) || length(target) != 1L || is.na(target) ||
      target < 1) {
    stop_arg("kernbayes.skt_coreset", "(option) must be a positive number")
  }
  if (n < 16L) stop_arg("x", "must have at least 16 rows for debias = \"compress\"")
  g <- 0L
  repeat {
    nxt <- cpp_size(NULL, n, g + 1L)
    if (nxt$M > min(target, nxt$N / 2)) break
    g <- g + 1L
  }
  sz <- cpp_size(NULL, n, g)
  list(oversample = g, M = sz$M, keep = sz$keep)
}

# The size N of the rounded multiset: for "kt" on the coreset route (M
# given) the smallest m 2^g at least M (times the internal option
# `kernbayes.skt_multiset`, default 1, for experiments: a multiset of 2M
# rows gave the same KSD within KT's randomness, tests/testthat/test-skt.R);
# without M, m 2^g for "kt" (n when 2^g divides it); Compress++'s 2^k.
skt_multiset_size <- function(method, size, M) {
  if (method != "kt") return(size$N)
  if (is.null(M)) return(size$m * 2^size$g)
  M <- M * getOption("kernbayes.skt_multiset", 1)
  size$m * 2^max(0, ceiling(log2(M / size$m) - 1e-9))
}
