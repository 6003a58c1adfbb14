# Base kernels (IMQ, Gaussian) and their preconditioners.  A kernel object
# only records the choice; resolve_kernel() turns it into numbers for a given
# sample, once, so that the heuristics see the sample they are applied to.

#' Kernel objects
#'
#' Radial base kernels \eqn{k(x, y) = \phi(r)} in the preconditioned squared
#' distance \eqn{r = (x - y)^\top L (x - y)}, where \eqn{L} is a symmetric
#' positive definite matrix (an inverse squared length-scale). The inverse
#' multi-quadric (IMQ) kernel has \eqn{\phi(r) = (c + r)^\beta}; the Gaussian
#' kernel has \eqn{\phi(r) = \exp(-r/2)}.
#'
#' The preconditioner `precon` chooses \eqn{L}:
#' * `"id"`: \eqn{L = I}.
#' * `"med"`: \eqn{L = I / m^2}, with \eqn{m} the median pairwise Euclidean
#'   distance between the rows of the sample (at most 1000 evenly spaced rows,
#'   `floor(seq(0, n - 1, length.out = 1000)) + 1`, when `n > 1000`).
#' * `"sclmed"`: \eqn{L = I \log(\min(1000, n)) / m^2}.
#' * `"smpcov"`: \eqn{L} is the inverse of the sample covariance matrix.
#' * a positive number `h2`: \eqn{L = I / h2}.
#' * a `d x d` symmetric positive definite matrix: \eqn{L} itself.
#'
#' Heuristics are resolved against the sample the kernel is applied to, after
#' standardisation when that is requested. These conventions follow the
#' reference implementation of Stein thinning (Riabiz et al., 2022).
#'
#' @param c IMQ offset, a positive number.
#' @param beta IMQ exponent, in (-1, 0).
#' @param precon The preconditioner: `"id"`, `"med"`, `"sclmed"`,
#'   `"smpcov"`, a positive number or a symmetric positive definite matrix.
#' @param bandwidth Gaussian bandwidth \eqn{\sigma}; when given, it overrides
#'   `precon` with \eqn{L = I / \sigma^2}. Both \eqn{\sigma^2} and
#'   \eqn{1/\sigma^2} must be finite normal doubles (\eqn{\sigma} from
#'   about `7.5e-155` to `6.7e153`); a numeric `precon` likewise from about
#'   `5.6e-309` to `4.5e307`.
#' @return An object of class `kb_kernel`.
#' @references Riabiz, M., Chen, W. Y., Cockayne, J., Swietach, P., Niederer,
#'   S. A., Mackey, L. and Oates, C. J. (2022). Optimal thinning of MCMC
#'   output. *JRSS B*, 84(4), 1059-1081.
#' @examples
#' imq_kernel()
#' imq_kernel(beta = -0.75, precon = "med")
#' gaussian_kernel(bandwidth = 2)
#' @export
imq_kernel <- function(c = 1, beta = -0.5, precon = "id") {
  c <- check_number(c, "c", lower = 0, lower_open = TRUE)
  beta <- check_number(beta, "beta", lower = -1, upper = 0,
                       lower_open = TRUE, upper_open = TRUE)
  structure(list(type = "imq", c = c, beta = beta,
                 precon = check_precon(precon)),
            class = c("kb_imq", "kb_kernel"))
}

#' @rdname imq_kernel
#' @export
gaussian_kernel <- function(precon = "med", bandwidth = NULL) {
  if (!is.null(bandwidth)) {
    bandwidth <- check_number(bandwidth, "bandwidth", lower = 0,
                              lower_open = TRUE)
    precon <- bandwidth^2
    if (!is.finite(precon) || !is.finite(1 / precon) ||
        1 / precon < .Machine$double.xmin) {
      stop_arg("bandwidth", sprintf(paste0(
        "= %s is out of range: L = I / bandwidth^2 %s; give a bandwidth ",
        "between %s and %s (rescale the data if needed)"),
        format(bandwidth, digits = 3),
        if (!is.finite(1 / precon)) "overflows" else "underflows",
        format(sqrt(1 / .Machine$double.xmax), digits = 3),
        format(sqrt(1 / .Machine$double.xmin), digits = 3)))
    }
  }
  structure(list(type = "gaussian", precon = check_precon(precon),
                 bandwidth = bandwidth),
            class = c("kb_gaussian", "kb_kernel"))
}

precon_names <- c("id", "med", "sclmed", "smpcov")

check_precon <- function(precon) {
  if (is.character(precon)) {
    if (length(precon) != 1L || is.na(precon) || !precon %in% precon_names) {
      stop_arg("precon", "must be one of ",
               paste(dQuote(precon_names, FALSE), collapse = ", "),
               ", a positive number or a positive definite matrix")
    }
    return(precon)
  }
  if (is.numeric(precon) && is.null(dim(precon))) {
    precon <- check_number(precon, "precon", lower = 0, lower_open = TRUE)
    if (!is.finite(1 / precon) || 1 / precon < .Machine$double.xmin) {
      stop_arg("precon", sprintf(paste0(
        "= %s is out of range: L = I / precon %s; give a number between ",
        "%s and %s (rescale the data if needed)"), format(precon, digits = 3),
        if (is.finite(1 / precon)) "underflows" else "overflows",
        format(1 / .Machine$double.xmax, digits = 3),
        format(1 / .Machine$double.xmin, digits = 3)))
    }
    return(precon)
  }
  if (is.matrix(precon) && is.numeric(precon)) {
    if (nrow(precon) != ncol(precon) || nrow(precon) < 1L) {
      stop_arg("precon", "must be a square matrix")
    }
    if (anyNA(precon) || any(!is.finite(precon))) {
      stop_arg("precon", "must not contain NA, NaN or Inf")
    }
    storage.mode(precon) <- "double"
    return(precon)
  }
  stop_arg("precon", "must be one of ",
           paste(dQuote(precon_names, FALSE), collapse = ", "),
           ", a positive number or a positive definite matrix")
}

describe_precon <- function(precon) {
  if (is.character(precon)) return(dQuote(precon, FALSE))
  if (is.matrix(precon)) {
    return(sprintf("user matrix (%d x %d)", nrow(precon), ncol(precon)))
  }
  sprintf("I / %s", format(precon, digits = 4))
}

#' @export
print.kb_kernel <- function(x, ...) {
  if (x$type == "imq") {
    cat(sprintf("IMQ kernel: phi(r) = (%s + r)^(%s)\n", format(x$c),
                format(x$beta)))
  } else {
    cat("Gaussian kernel: phi(r) = exp(-r / 2)\n")
  }
  cat("  r = (x - y)' L (x - y), L =", describe_precon(x$precon), "\n")
  invisible(x)
}

# Median pairwise Euclidean distance, on at most 1000 evenly spaced rows.
# Data so large or so small that squared distances over- or underflow are
# scaled by a power of two (exact) first.
median_distance <- function(x, rows = NULL) {
  n <- nrow(x)
  if (!is.null(rows)) {
    x <- x[rows, , drop = FALSE]
  } else if (n > 1000L) {
    x <- x[floor(seq(0, n - 1, length.out = 1000L)) + 1L, , drop = FALSE]
  }
  sc <- max(abs(x))
  if (sc > 0 && (sc > 1e150 || sc < 1e-150)) {
    p2 <- 2^floor(log2(sc))
    x <- x / p2
  } else {
    p2 <- 1
  }
  # without its attributes: median() of the classed "dist" object would
  # fully order() it; of the plain vector it is a partial sort (the same
  # value).  attributes<- on the fresh vector does not copy it.
  dd <- stats::dist(x)
  attributes(dd) <- NULL
  stats::median(dd) * p2
}

# Sample covariance as eigenvalues and eigenvectors, with the same exact
# power-of-two scaling for data whose products over- or underflow.
cov_eigen <- function(x) {
  sc <- max(abs(x))
  p2 <- if (sc > 0 && (sc > 1e150 || sc < 1e-150)) 2^floor(log2(sc)) else 1
  e <- sym_eigen(stats::cov(x / p2), "sample covariance")
  list(values = e$values, vectors = e$vectors, p2 = p2)
}

sym_eigen <- function(A, what) .Call(C_kb_eigen_sym, A, what)

# Turn a kernel object into the numbers the C layer uses for sample x:
# L = Q diag(lambda) Q'.  Points are handed to C in the eigenbasis (x Q),
# where L is diagonal; iso means L = lambda I and no rotation.  `arg` names
# the sample in messages.
# A kernel object as imq_kernel() or gaussian_kernel() make it (an edited
# one is rejected naming the argument); no data needed.
check_kernel <- function(kernel) {
  if (inherits(kernel, "kb_user_kernel")) {
    stop_arg("kernel", "is a user_kernel(), which only mmd_flow() and ",
             "dmmd_flow() take; use imq_kernel() or gaussian_kernel()")
  }
  if (!inherits(kernel, "kb_kernel")) {
    stop_arg("kernel", "must be a kernel object such as imq_kernel() or ",
             "gaussian_kernel()")
  }
  # an edited kernel object must still be one the C layer can use
  if (!(identical(kernel$type, "imq") || identical(kernel$type, "gaussian"))) {
    stop_arg("kernel", "has an unknown type; make it with imq_kernel() or ",
             "gaussian_kernel()")
  }
  if (kernel$type == "imq") {
    ok <- function(v) is.numeric(v) && length(v) == 1L && is.finite(v)
    if (!ok(kernel$c) || !(kernel$c > 0) || !ok(kernel$beta) ||
        !(kernel$beta < 0)) {
      stop_arg("kernel", "has IMQ parameters out of range (c > 0 and ",
               "beta < 0 are needed); make it with imq_kernel()")
    }
  }
  check_precon(kernel$precon)
  invisible(kernel)
}

# `rows`: the rows the median heuristics use (default: at most 1000 evenly
# spaced rows; heuristic_rows() for several chains).
resolve_kernel <- function(kernel, x, arg = "x", rows = NULL) {
  check_kernel(kernel)
  n <- nrow(x)
  d <- ncol(x)
  precon <- check_precon(kernel$precon)
  iso <- TRUE
  Q <- NULL
  if (is.character(precon)) {
    if (precon != "id" && n < 2L) {
      stop_arg("precon", sprintf("= \"%s\" needs at least two rows of %s",
                                 precon, arg))
    }
    lambda <- switch(precon,
      id = 1,
      med = ,
      sclmed = {
        m <- median_distance(x, rows)
        if (!(m > 0)) {
          stop_arg("precon", sprintf(paste0("= \"%s\" needs a positive median ",
                                            "distance; %s has too few distinct ",
                                            "rows"), precon, arg))
        }
        l <- if (precon == "med") 1 / m^2 else log(min(1000, n)) / m^2
        if (!is.finite(l) || !(l >= .Machine$double.xmin)) {
          stop_arg(arg, sprintf(paste0(
            "has a median pairwise distance of %s: L = I / median^2 of ",
            "precon = \"%s\" %s; rescale %s"), format(m, digits = 3), precon,
            if (is.finite(l)) "underflows" else "overflows", arg))
        }
        l
      },
      smpcov = {
        e <- cov_eigen(x)
        if (!all(e$values > 1e-12 * max(abs(e$values), 0))) {
          stop_arg("precon", "= \"smpcov\" needs a positive definite sample ",
                   "covariance; ", arg, " has too few distinct rows or ",
                   "collinear columns")
        }
        iso <- FALSE
        Q <- e$vectors
        l <- 1 / e$values / e$p2 / e$p2
        if (!all(is.finite(l) & l >= .Machine$double.xmin)) {
          # standard deviations are representable when the data are
          stop_arg(arg, sprintf(paste0(
            "has principal standard deviations of %s to %s: the inverse ",
            "sample covariance of precon = \"smpcov\" %s; rescale %s"),
            format(sqrt(min(e$values)) * e$p2, digits = 3),
            format(sqrt(max(e$values)) * e$p2, digits = 3),
            if (any(!is.finite(l))) "overflows" else "underflows", arg))
        }
        l
      })
  } else if (is.matrix(precon)) {
    if (nrow(precon) != d) {
      stop_arg("precon", sprintf("must be a %d x %d matrix (ncol(%s) = %d)",
                                 d, d, arg, d))
    }
    if (max(abs(precon - t(precon))) > 1e-10 * max(abs(precon))) {
      stop_arg("precon", "must be a symmetric matrix")
    }
    # halves first: the sum of two huge entries would overflow
    precon <- precon / 2 + t(precon) / 2
    dg <- diag(precon)
    if (all(precon[upper.tri(precon)] == 0)) {
      lambda <- dg
    } else {
      e <- sym_eigen(precon, "precon")
      lambda <- e$values
      Q <- e$vectors
    }
    if (!all(lambda > 0)) stop_arg("precon", "must be positive definite")
    iso <- is.null(Q) && all(lambda == lambda[1L])
    if (iso) lambda <- lambda[1L]
  } else {
    lambda <- 1 / precon
  }
  # the C layer relies on a finite positive L with a finite trace
  if (!all(is.finite(lambda) & lambda >= .Machine$double.xmin) ||
      !is.finite(if (iso) lambda * d else sum(lambda))) {
    stop_arg("precon", sprintf(paste0(
      "gives a preconditioner L whose eigenvalues (%s to %s) or trace ",
      "are not finite positive numbers; rescale it"),
      format(min(lambda), digits = 3), format(max(lambda), digits = 3)))
  }
  L <- if (iso) {
    diag(lambda, d)
  } else if (is.null(Q)) {
    diag(lambda, d)
  } else {
    Q %*% (lambda * t(Q))
  }
  structure(list(type = kernel$type,
                 c = if (kernel$type == "imq") kernel$c else 1,
                 beta = if (kernel$type == "imq") kernel$beta else -0.5,
                 lambda = as.double(lambda), iso = iso, Q = Q, L = L,
                 kernel = kernel),
            class = "kb_resolved_kernel")
}

# One line describing a kernel resolved on a sample, e.g.
# 'IMQ (c = 1, beta = -0.5), L = 0.1027 I (precon "med")'.
describe_resolved <- function(rk) {
  k <- rk$kernel
  kname <- if (k$type == "imq") {
    sprintf("IMQ (c = %s, beta = %s)", format(k$c), format(k$beta))
  } else {
    "Gaussian"
  }
  Ltxt <- if (rk$iso) {
    sprintf("%s I", format(rk$lambda, digits = 4))
  } else if (is.null(rk$Q)) {
    sprintf("diag(%s)", paste(format(rk$lambda, digits = 4), collapse = ", "))
  } else {
    sprintf("a full %d x %d matrix, eigenvalues %s", nrow(rk$L), ncol(rk$L),
            paste(format(rev(rk$lambda), digits = 3), collapse = ", "))
  }
  sprintf("%s, L = %s (precon %s)", kname, Ltxt, describe_precon(k$precon))
}

#' @export
print.kb_resolved_kernel <- function(x, ...) {
  cat("Kernel resolved on a sample:", describe_resolved(x), "\n")
  invisible(x)
}

# Points (or scores) in the eigenbasis of L.
in_basis <- function(x, rk) if (is.null(rk$Q)) x else x %*% rk$Q

# phi, phi', phi'' of a kernel at the values r (internal; used by tests).
kernel_phi <- function(kernel, r) {
  kernel$precon <- "id"
  rk <- resolve_kernel(kernel, matrix(0, 1L, 1L))
  out <- .Call(C_kb_phi, rk, as.double(r))
  colnames(out) <- c("phi", "dphi", "d2phi")
  out
}

# phi(0) = k(x, x) of a resolved kernel.
resolved_phi0 <- function(rk) .Call(C_kb_phi, rk, 0)[[1L]]

#' Kernel (Gram) matrix
#'
#' The matrix of base kernel values \eqn{k(x_i, y_j) = \phi(r_{ij})} between
#' the rows of `x` and of `y`.
#'
#' @param x An `n x d` numeric matrix (or data frame, ...; a vector is `n`
#'   one-dimensional points, see 'Points and samples' in [kernbayes-package]).
#' @param y An `m x d` matrix (a vector is one point when `d > 1`), or
#'   `NULL` for `x` itself.
#' @param kernel A kernel object; a heuristic preconditioner is resolved on
#'   `x`.
#' @param nthreads Number of OpenMP threads.
#' @return An `n x m` matrix.
#' @examples
#' x <- matrix(c(0, 1, 3), ncol = 1)
#' kernel_matrix(x, kernel = gaussian_kernel(bandwidth = 1))
#' exp(-as.matrix(dist(x))^2 / 2)
#' @export
kernel_matrix <- function(x, y = NULL, kernel = gaussian_kernel(),
                          nthreads = NULL) {
  x <- as_points(x)
  y <- if (is.null(y)) x else as_points(y, "y", ncol(x))
  if (ncol(y) != ncol(x)) {
    stop_arg("y", sprintf("must have %d columns, like x; it has %d", ncol(x),
                          ncol(y)))
  }
  nthreads <- resolve_nthreads(nthreads)
  rk <- resolve_kernel(kernel, x)
  gram(rk, x, y, nthreads)
}

# Gram matrix of a resolved kernel (internal: no argument checks).
gram <- function(rk, x, y = x, nthreads = NULL) {
  .Call(C_kb_gram, in_basis(x, rk), in_basis(y, rk), rk,
        resolve_nthreads(nthreads))
}
