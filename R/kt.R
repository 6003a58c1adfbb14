# Kernel thinning (KT-SPLIT + KT-SWAP) on the Stein kernel or a base
# kernel. The coin flips are drawn here with R's generator; the halving
# and swapping run in src/kt.c on the kernel matrix of the thinned rows.
# Compress++ and Stein kernel thinning (issue 17) will reuse kt_rounds()
# and kt_kernel() on groups of rows.

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
#' point that minimises the MMD. The MMD of the result is
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
#' Cost: the kernel matrix of the thinned rows is formed (\eqn{n^2}
#' kernel evaluations and \eqn{8 n^2} bytes; option
#' `kernbayes.max_memory`), KT-SPLIT and KT-SWAP then take
#' \eqn{O(n^2)} operations. The \eqn{g n / 2} coin flips are uniforms from
#' R's generator, so `set.seed()` reproduces a run.
#'
#' @inheritParams stein_kernel_matrix
#' @param score `NULL` (MMD to the sample with a base kernel) or the score
#'   of the target, as for [stein_thin()] (KSD with the Stein kernel).
#' @param m The number of points, \eqn{\lfloor n / 2^g \rfloor}; `NULL`
#'   (default): about \eqn{\sqrt n} (see Details).
#' @param kernel A base kernel; `NULL` (default): [imq_kernel()] with a
#'   score, `gaussian_kernel(precon = "med")` without.
#' @param method `"kt"` (the only method so far; Compress++ will follow).
#' @param swap Run KT-SWAP (default `TRUE`); `FALSE` returns KT-SPLIT's
#'   first coreset. With \eqn{g = 0} (`m = nrow(x)`) the whole sample is
#'   returned unchanged, as in the reference implementation.
#' @param delta KT-SPLIT's failure probability, in (0, 1) (default 0.5, as
#'   in the reference implementation).
#' @param standardize Standardise the columns first (default `FALSE`).
#' @param chain Chain labels, as for [stein_thin()].
#' @return A `kb_thin` (see [stein_thin()]) with `method` "kernel
#'   thinning", the path `ksd` (with a score) or `mmd` (without) of the
#'   first \eqn{j} selected points, and `rounds` (\eqn{g}), `used` (the
#'   number of thinned rows), `swap`, `delta`, `coresets` (KT-SPLIT's
#'   \eqn{2^g} candidates, an \eqn{m \times 2^g} matrix of row indices).
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
#' @export
kernel_thin <- function(x, score = NULL, m = NULL, kernel = NULL,
                        method = "kt", swap = TRUE, delta = 0.5,
                        standardize = FALSE, nthreads = NULL, chain = NULL) {
  method <- check_choice(method, "kt", "method")
  swap <- check_flag(swap, "swap")
  delta <- check_number(delta, "delta", 0, 1, lower_open = TRUE,
                        upper_open = TRUE)
  standardize <- check_flag(standardize, "standardize")
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
  size <- kt_rounds(m, n)
  used <- size$m * 2^size$g
  check_memory(8 * 1.1 * used^2, "x", "the kernel matrix of kernel thinning")
  if (stein) {
    setup <- stein_setup(x, smp$score, kernel, standardize,
                         rows = heuristic_rows(smp))
  } else {
    xs <- if (standardize) standardize_columns(x)$x else x
    rk <- resolve_kernel(kernel, xs, rows = heuristic_rows(smp))
    setup <- list(x = in_basis(xs, rk), kernel = rk)
  }
  km <- kt_kernel(setup, seq_len(used), stein, nthreads)
  u <- stats::runif(size$g * used / 2)
  res <- .Call(C_kb_kernel_thin, km$K, size$g, delta, u, km$mu, swap)
  index <- res$index
  path <- kt_path(km$K, km$mu, index)
  new_thin(index, x, path, if (stein) "ksd" else "mmd", "kernel thinning",
           if (stein) setup else setup$kernel,
           c(list(standardize = standardize, unique = FALSE, swap = swap,
                  delta = delta, rounds = size$g, used = used,
                  coresets = res$coresets),
             sample_labels(smp, index)))
}

# KSD (mu NULL) or MMD of the first j selected points, j = 1..m.
kt_path <- function(K, mu, index) {
  Ks <- K[index, index, drop = FALSE]
  lower <- Ks
  lower[upper.tri(lower, diag = TRUE)] <- 0
  S <- cumsum(2 * rowSums(lower) + diag(Ks))
  j <- seq_along(index)
  if (is.null(mu)) return(sqrt(pmax(S, 0)) / j)
  sqrt(pmax(S / j^2 - 2 * cumsum(mu[index]) / j + mean(mu), 0))
}
