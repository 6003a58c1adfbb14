# Kernel thinning (KT-SPLIT + KT-SWAP) on the Stein kernel or a base
# kernel. The coin flips are drawn here with R's generator; the halving
# and swapping run in src/kt.c on the kernel matrix of the thinned rows.
# Compress++ (method = "compress++") runs in src/kt.c on the points
# themselves (kb_compresspp), with its own random numbers from R's generator.

# The number of halving rounds g and the output size m = floor(n / 2^g).
# m = NULL: g = round(log2(n) / 2), so m is about sqrt(n). A given m must be
# floor(n / 2^g) for some g >= 0.
kt_rounds <- function(m, n) {
  if (is.null(m)) {
    g <- max(0L, as.integer(round(log2(n) / 2)))
    return(list(g = g, m = n %/% 2^g))
  }
  ok <- unique(n %/% 2^(0:floor(log2(n))))
  g <- match(m, n %/% 2^(0:floor(log2(n)))) - 1L
  if (is.na(g)) {
    near <- ok[order(abs(ok - m))][seq_len(min(3L, length(ok)))]
    stop_arg("m", sprintf(paste0(
      "must be floor(nrow(x) / 2^g) for a whole g >= 0 (nrow(x) = %d); ",
      "nearest: %s"), n, paste(sort(near), collapse = ", ")))
  }
  list(g = as.integer(g), m = as.integer(m))
}

# The route of method = "kt" on n rows: the n x n kernel matrix (TRUE)
# while its 8 n^2 bytes are at most the internal option
# `kernbayes.kt_matrix_max` (default 2^25 bytes, n <= 2048: beyond it the
# rows are faster, 3-4x for the Stein kernel at 2^12-2^13 and even for a
# Gaussian; inst/bench/bench-kt.R), else kernel rows computed
# on the fly in O(n d) memory (src/kt.c, kb_kernel_thin_rows), with the
# same coresets. options(kernbayes.kt_matrix_max = 0) forces the rows
# route, Inf the matrix (tests/testthat/test-kt-memory.R).
kt_matrix_route <- function(n) {
  lim <- getOption("kernbayes.kt_matrix_max", 2^25)
  if (!is.numeric(lim) || length(lim) != 1L || is.na(lim) || lim < 0) {
    stop_arg("kernbayes.kt_matrix_max",
             "(option) must be a non-negative number of bytes")
  }
  8 * n^2 <= lim
}

# kernel_thin()'s default method is "compress++" above this many rows, where
# KT's O(n^2) time becomes prohibitive (inst/bench/bench-kt.R).
kt_default_max <- 2^15

# KT of rows `keep` (g rounds, uniforms from R's generator) on the route of
# kt_matrix_route(): the result of kb_kernel_thin and `path`, kt_path()'s.
kt_run <- function(setup, keep, stein, g, delta, swap, nthreads) {
  n <- length(keep)
  if (kt_matrix_route(n)) {
    km <- kt_kernel(setup, keep, stein, nthreads)
    u <- stats::runif(g * n / 2)
    res <- .Call(C_kb_kernel_thin, km$K, g, delta, u, km$mu, swap)
    res$path <- kt_path(km$K, km$mu, res$index)
    return(res)
  }
  u <- stats::runif(g * n / 2)
  res <- .Call(C_kb_kernel_thin_rows, setup$x[keep, , drop = FALSE],
               if (stein) setup$s[keep, , drop = FALSE], setup$kernel, u,
               list(g = g, delta = delta, swap = swap, nthreads = nthreads))
  sel <- keep[res$index]
  Ks <- kt_kernel(setup, sel, stein, nthreads)$K
  res$path <- kt_path(NULL, res$mu, res$index, Ks)
  res
}

# The kernel matrix of rows `use` and the reference's mean embedding
# (NULL: the zero measure, the Stein kernel's mean under the target).
kt_kernel <- function(setup, use, stein, nthreads) {
  if (stein) {
    K <- .Call(C_kb_stein_matrix, setup$x[use, , drop = FALSE],
               setup$s[use, , drop = FALSE], setup$kernel, nthreads)
    return(list(K = K, mu = NULL))
  }
  xr <- setup$x[use, , drop = FALSE]
  K <- .Call(C_kb_gram, xr, xr, setup$kernel, nthreads)
  list(K = K, mu = rowMeans(K))
}

#' Kernel thinning
#'
#' Compresses a sample of \eqn{n} points to \eqn{m = n / 2^g} points by
#' kernel thinning (Dwivedi and Mackey, 2021, 2022): KT-SPLIT divides the
#' sample into \eqn{2^g} candidate coresets in \eqn{g} rounds of kernel
#' halving, each round sending one point of every consecutive pair to
#' each half by a signed coin flip whose bias (the self-balancing Hilbert
#' walk, failure probability `delta`) keeps the halves' kernel mean
#' embeddings close; KT-SWAP then takes the candidate (or the standard
#' thinning of every \eqn{2^g}-th point) with the smallest MMD to the
#' reference and improves it by replacing each point in turn with the input
#' point that minimises the MMD (any input point, so a point may end up
#' selected more than once: `index` may repeat rows). The MMD of the
#' result is
#' \eqn{O(\sqrt{\log n / n})} for \eqn{m = \sqrt n}, against
#' \eqn{n^{-1/4}} for a uniform subsample.
#'
#' With a `score` the kernel is the Stein kernel of `kernel` (default
#' [imq_kernel()]) and the reference the target itself (the Stein kernel
#' has mean zero under it), so KT minimises the KSD ("target KT"). Without
#' one the kernel is `kernel` (default `gaussian_kernel(precon = "med")`)
#' and the reference the sample's mean embedding (the MMD to the sample).
#' Both KT-SPLIT and KT-SWAP use this kernel.
#'
#' Size: `m = NULL` takes \eqn{g = \mathrm{round}(\log_2(n) / 2)} rounds
#' and \eqn{m = \lfloor n / 2^g \rfloor}, about \eqn{\sqrt n}; a given `m`
#' must be \eqn{\lfloor n / 2^g \rfloor} for some \eqn{g \ge 0}. When
#' \eqn{2^g} does not divide \eqn{n}, only the first \eqn{2^g m} rows are
#' thinned and the last \eqn{n - 2^g m < 2^g} rows are dropped, as in the
#' reference implementation (`goodpoints`); the MMD reference is then the
#' thinned rows.
#'
#' Cost (`method = "kt"`): \eqn{O(n^2)} kernel evaluations and operations.
#' Up to 2048 thinned rows the kernel matrix is formed (\eqn{8 n^2}
#' bytes); beyond, KT-SPLIT and KT-SWAP compute the kernel values they
#' need on the fly in \eqn{O(n d)} memory, with the same result (and
#' faster: the matrix no longer goes through memory). Without `method`,
#' samples of more than \eqn{2^{15}} = 32768 rows are thinned by
#' `"compress++"` (near-linear time; KT on \eqn{2^{16}} rows takes about
#' 4x as long as on \eqn{2^{15}}) when `m` is a size it gives (see
#' 'Compress++'), by `"kt"` otherwise and for smaller samples. The \eqn{g n / 2} coin flips are uniforms from
#' R's generator, so `set.seed()` reproduces a run.
#'
#' @section Compress++:
#' `method = "compress++"` (Shetty, Dwivedi and Mackey, 2022) brings the
#' cost down to \eqn{O(4^{g'} n \log n)} kernel evaluations for
#' oversampling parameter \eqn{g'} = `oversample`, with memory for the
#' points and one kernel matrix of at most \eqn{2^{g'+2} \sqrt n} points.
#' The sample is cut to \eqn{N = 2^k} rows (the largest power of 2 in
#' \eqn{n}; standard thinning from the end when \eqn{N < n}, as the
#' reference implementation does to a power of 4), split into 4 (even
#' \eqn{k}) or 8 (odd \eqn{k}) consecutive bins of a power of 4 rows, and
#' each bin is compressed recursively: Compress halves the concatenation of
#' the compressed quarters of its input (a bin of \eqn{4^{g'+1}} rows is
#' halved directly), so a bin of \eqn{s} rows leaves
#' \eqn{2^{g'}\sqrt s}. Each halving is one round of kernel halving on the
#' node's kernel matrix with failure probability \eqn{\delta_c s^2 /
#' (4^{g'+1} (\log_2(s_b)/2 - g') N)} (\eqn{s_b} the bin size), then, with
#' `swap`, the better of that half and every second point (by MMD to the
#' node's points), improved by swaps with the other half, and finally the
#' half or its complement with probability 1/2 each (a four-point node
#' takes its best pairing directly). The concatenated bin outputs are
#' thinned to `m` by kernel thinning (KT-SPLIT and KT-SWAP over them, with
#' failure probability \eqn{\delta_t}); \eqn{\delta} is split between
#' the stages as in the reference implementation. `m` is a power of 2, at
#' most \eqn{2^{\lfloor k/2 \rfloor}} (the default). With a score the
#' final swap targets the target (KSD); without one it targets the
#' compressed points' empirical measure, and `mmd` is the MMD to them (the
#' MMD to all \eqn{N} rows would cost \eqn{N^2} evaluations). Larger
#' `oversample` is closer to full kernel thinning and \eqn{4^{g'}}
#' slower; the default 1 thins \eqn{n = 2^{20}} points in 4 dimensions in
#' about 4 seconds on one thread. Bins too small for the oversampling
#' (\eqn{N / \mathrm{bins} < 4^{g'+1}}) fall back to kernel thinning of
#' the \eqn{N} rows. Random numbers: R's uniforms, drawn in C in a fixed
#' order (the node halvings depth first, then the final thinning's).
#'
#' @inheritParams stein_kernel_matrix
#' @param score `NULL` (MMD to the sample with a base kernel) or the score
#'   of the target, as for [stein_thin()] (KSD with the Stein kernel).
#' @param m The number of points: for `"kt"` \eqn{\lfloor n / 2^g
#'   \rfloor}, for `"compress++"` a power of 2 up to
#'   \eqn{2^{\lfloor k/2 \rfloor}}; `NULL` (default): about \eqn{\sqrt n}
#'   (see Details).
#' @param kernel A base kernel; `NULL` (default): [imq_kernel()] with a
#'   score, `gaussian_kernel(precon = "med")` without.
#' @param method `"kt"` (kernel thinning) or `"compress++"` (near-linear
#'   time; see the section Compress++); default `"kt"` up to \eqn{2^{15}}
#'   rows of `x`, `"compress++"` above.
#' @param oversample Compress++'s oversampling parameter \eqn{g' \ge 0}
#'   (default 1; ignored by `"kt"`).
#' @param weights Weights of the rows (non-negative, normalised to sum 1)
#'   or `NULL` (equal). Weighted input is first rounded to an equally
#'   weighted multiset of the thinned size (\eqn{2^g m} rows for `"kt"`,
#'   \eqn{2^k} for `"compress++"`) by stratified rounding, remainders first
#'   (one uniform per stratum, as in Li, Dwivedi and Mackey, 2024), which is
#'   then thinned; without a score the MMD reference is that multiset.
#' @param swap Run KT-SWAP (default `TRUE`); `FALSE` returns KT-SPLIT's
#'   first coreset. With \eqn{g = 0} (`m = nrow(x)`) the whole sample is
#'   returned unchanged, as in the reference implementation.
#' @param delta KT-SPLIT's failure probability, in (0, 1) (default 0.5, as
#'   in the reference implementation); a halving in round \eqn{j} of
#'   \eqn{g} (on \eqn{n/2^j} points) uses \eqn{\delta 2^j / g}.
#' @param chain Chain labels, as for [stein_thin()].
#' @param progress Show progress (see 'Progress' in [kernbayes-package]):
#'   Compress++'s rows compressed so far; default `NULL` (automatic).
#'   Ctrl-C interrupts within a second either way.
#' @return A `kb_thin` (see [stein_thin()]) with `method` "kernel
#'   thinning", the path `ksd` (with a score) or `mmd` (without) of the
#'   first \eqn{j} selected points, and `rounds` (\eqn{g}), `used` (the
#'   number of thinned rows), `swap`, `delta`, `kt_method`, and for
#'   `"kt"` `coresets` (KT-SPLIT's \eqn{2^g} candidates, an \eqn{m \times
#'   2^g} matrix of row indices), for `"compress++"` `oversample` and
#'   `compress` (the rows Compress kept, which the final thinning chose
#'   from; absent when it fell back to kernel thinning); with `weights`,
#'   `multiset` (the rows of the rounded sample, which `index`,
#'   `coresets` and `compress` point into through the row numbers of `x`).
#' @references Dwivedi, R. and Mackey, L. (2021). Kernel thinning. *COLT*
#'   (*JMLR* 2024). Dwivedi, R. and Mackey, L. (2022). Generalized kernel
#'   thinning. *ICLR*.
#' @seealso [stein_thin()], [mmd_thin()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 1024)
#' kt <- kernel_thin(x, tg)          # 32 points
#' kt
#' u <- x[sample(1024, 32), ]
#' c(kt = ksd(kt$points, tg), uniform = ksd(u, tg))
#' kernel_thin(x, m = 64)            # MMD to the sample, Gaussian kernel
#' y <- sample_target(tg, 2^14)
#' kernel_thin(y, tg, method = "compress++")   # 128 points, near-linear time
#' @export
kernel_thin <- function(x, score = NULL, m = NULL, kernel = NULL,
                        method = c("kt", "compress++"), weights = NULL,
                        swap = TRUE, delta = 0.5, oversample = 1L,
                        standardize = TRUE,
                        nthreads = NULL, chain = NULL,
                        progress = NULL) {
  auto_method <- missing(method)
  a <- kt_check_args(method, delta, oversample, standardize, progress)
  method <- a$method; delta <- a$delta; oversample <- a$oversample
  standardize <- a$standardize; progress <- a$progress
  swap <- check_flag(swap, "swap")
  if (!is.null(m)) m <- check_count(m, "m")
  nthreads <- resolve_nthreads(nthreads)
  stein <- !is.null(score)
  if (is.null(kernel)) {
    kernel <- if (stein) imq_kernel() else gaussian_kernel(precon = "med")
  }
  check_kernel(kernel)
  smp <- if (stein) as_sample(x, score, chain)
         else as_sample(x, NULL, chain, gradients = FALSE)
  x <- smp$x
  n <- nrow(x)
  if (n < 1L) stop_arg("x", "must have at least one row")
  if (!is.null(weights)) weights <- check_weights(weights, n)
  # the default above kt_default_max rows: Compress++ when it can give the
  # size asked for (a power of 2 for it), else KT on kernel rows
  if (auto_method && n > kt_default_max &&
      !inherits(tryCatch(cpp_size(m, n, oversample), error = function(e) e),
                "error")) {
    method <- "compress++"
  }
  if (method == "compress++") {
    size <- cpp_size(m, n, oversample)
    used <- size$N
  } else {
    size <- kt_rounds(m, n)
    used <- size$m * 2^size$g
  }
  kmax <- if (method == "kt" || size$direct) used else size$M
  if (kt_matrix_route(kmax)) {
    check_memory(8 * 1.1 * kmax^2, "x", "the kernel matrix of kernel thinning",
                 hint = paste0("method = \"compress++\" thins in O(n) memory ",
                               "(or option 'kernbayes.kt_matrix_max' = 0: ",
                               "KT with kernel rows on the fly)"))
  }
  if (stein) {
    setup <- stein_setup(x, smp$score, kernel, standardize,
                         rows = heuristic_rows(smp))
  } else {
    scale <- standardize_scale(standardize, x)
    xs <- scale_points(x, scale)
    rk <- resolve_kernel(kernel, xs, rows = heuristic_rows(smp))
    setup <- list(x = in_basis(xs, rk), kernel = rk, scale = scale)
  }
  extra <- list()
  # weighted input: an equally weighted multiset of `used` rows instead
  rows <- if (!is.null(weights)) stratified_round(weights, used)
  if (method == "kt" || size$direct) {
    keep <- rows %||% if (method == "kt") seq_len(used) else size$keep
    res <- kt_run(setup, keep, stein, size$g, delta, swap, nthreads)
    index <- keep[res$index]
    path <- res$path
    extra$coresets <- matrix(keep[res$coresets], nrow(res$coresets))
  } else {
    keep <- rows %||% size$keep
    prog <- progress_reporter(length(keep), "Compress++: rows", progress)
    ctl <- list(g = oversample, r = size$r, delta = delta, swap = swap,
                nthreads = nthreads, progress = prog$callback())
    res <- .Call(C_kb_compresspp, setup$x[keep, , drop = FALSE],
                 if (stein) setup$s[keep, , drop = FALSE], setup$kernel, ctl)
    prog$done()
    index <- keep[res$index]
    extra$compress <- keep[res$compress]
    path <- kt_sel_path(setup, index, extra$compress, stein, nthreads)
  }
  out <- new_thin(index, x,
           stats::setNames(list(path), if (stein) "ksd" else "mmd"),
           if (method == "kt") "kernel thinning" else "Compress++ (kernel thinning)",
           if (stein) setup else setup[c("kernel", "scale")],
           c(list(standardize = !is.null(setup$scale), unique = FALSE, swap = swap,
                  delta = delta, rounds = size$g, used = used,
                  multiset = rows,
                  kt_method = method,
                  oversample = if (method == "compress++") oversample),
             extra, sample_labels(smp, index)),
           reference = sample_moments(x, weights),
           against = sprintf("the %ssample (%d points)",
                             if (is.null(weights)) "" else "weighted ", n))
  warn_distortion(out, "kernel_thin")
}

# The checks kernel_thin() and stein_kernel_thin() share.
kt_check_args <- function(method, delta, oversample, standardize, progress) {
  oversample <- check_count(oversample, "oversample", min = 0L)
  if (oversample > 12L) stop_arg("oversample", "must be at most 12")
  list(method = check_choice(method, c("kt", "compress++"), "method"),
       delta = check_number(delta, "delta", 0, 1, lower_open = TRUE,
                            upper_open = TRUE),
       oversample = oversample,
       standardize = check_standardize(standardize),
       progress = check_progress(progress))
}

# Compress++ sizes: N = 2^k rows kept by standard thinning from the end
# (goodpoints keeps a power of 4; a power of 2 drops at most half), 4 bins
# (k even) or 8 (k odd) of N / nb rows, m = 2^floor(k/2) / 2^r; `direct`:
# bins smaller than 4^(oversample + 1), so plain KT of the N rows (g
# rounds); M: the size of Compress's output.
cpp_size <- function(m, n, oversample) {
  if (n < 4L) stop_arg("x", "must have at least 4 rows for Compress++")
  k <- floor(log2(n) + 1e-9)
  N <- as.integer(2^k)
  m0 <- as.integer(2^(k %/% 2))
  if (is.null(m)) m <- m0
  r <- match(m, m0 %/% 2^(0:(k %/% 2))) - 1L
  if (is.na(r)) {
    stop_arg("m", sprintf(paste0(
      "must be a power of 2 at most %d for Compress++ (2^floor(k/2), where ",
      "N = 2^k = %d is the largest power of 2 in nrow(x) = %d)"), m0, N, n))
  }
  keep <- if (N == n) seq_len(n)
          else rev(as.integer(seq(n - 1, 0, length.out = N))) + 1L
  nb <- if (k %% 2L == 0L) 4L else 8L
  bin <- N %/% nb
  M <- as.integer(nb * 2^oversample * sqrt(bin))
  list(N = N, r = r, m = as.integer(m), keep = keep,
       g = as.integer(round(log2(N / m))), direct = bin < 4^(oversample + 1),
       M = M)
}

# KSD (Stein) of the first j selected points, or (base kernel) their MMD to
# the reference rows `ref` (Compress++: its intermediate coreset, whose
# empirical measure the final KT-SWAP targets; the MMD to all N rows would
# cost N^2 kernel evaluations).
kt_sel_path <- function(setup, index, ref, stein, nthreads) {
  xs <- setup$x[index, , drop = FALSE]
  if (stein) {
    K <- .Call(C_kb_stein_matrix, xs, setup$s[index, , drop = FALSE],
               setup$kernel, nthreads)
    return(kt_path(K, NULL, seq_along(index)))
  }
  xr <- setup$x[ref, , drop = FALSE]
  Kr <- .Call(C_kb_gram, xr, xr, setup$kernel, nthreads)
  G <- .Call(C_kb_gram, xr, xs, setup$kernel, nthreads)
  K <- .Call(C_kb_gram, xs, xs, setup$kernel, nthreads)
  j <- seq_along(index)
  lower <- K
  lower[upper.tri(lower, diag = TRUE)] <- 0
  S <- cumsum(2 * rowSums(lower) + diag(K))
  sqrt(pmax(S / j^2 - 2 * cumsum(colMeans(G)) / j + mean(Kr), 0))
}

# KSD (mu NULL) or MMD of the first j selected points, j = 1..m; Ks: the
# kernel matrix of the selected points (K NULL: given, same entries).
kt_path <- function(K, mu, index, Ks = K[index, index, drop = FALSE]) {
  lower <- Ks
  lower[upper.tri(lower, diag = TRUE)] <- 0
  S <- cumsum(2 * rowSums(lower) + diag(Ks))
  j <- seq_along(index)
  if (is.null(mu)) return(sqrt(pmax(S, 0)) / j)
  sqrt(pmax(S / j^2 - 2 * cumsum(mu[index]) / j + mean(mu), 0))
}
