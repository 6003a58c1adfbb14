# Kernels given by R functions, for the MMD and DrMMD flows: the user's
# closures are evaluated in R (the built-in kernels stay in C) and every
# result is checked before a flow uses it.

#' A kernel given by R functions, for the MMD and DrMMD flows
#'
#' Wraps a kernel that the built-in radial kernels cannot express, such as
#' the kernel \eqn{k(z, z') = E_x[\psi(x, z) \psi(x, z')]} that turns the
#' training of a two-layer network into an MMD flow of its neurons (Arbel
#' et al., 2019), so that [mmd_flow()] and [dmmd_flow()] can run on it.
#' The functions are called in R on whole blocks of points; the built-in
#' [gaussian_kernel()] and [imq_kernel()] keep their C path. Other
#' functions of the package take only the built-in kernels.
#'
#' `fun(x, y)` receives an `n x d` matrix `x` and an `m x d` matrix `y`
#' and returns the `n x m` matrix \eqn{k(x_i, y_j)}. The gradient in the
#' first argument is given in one of two forms, chosen by the arguments of
#' `grad`:
#' * `grad(x, y)` returns the `n x m x d` array \eqn{\partial k(x_i,
#'   y_j) / \partial x_{ik}};
#' * `grad(x, y, w)` (an argument named `w`) returns the `n x d` matrix
#'   \eqn{\sum_j w_j \nabla_1 k(x_i, y_j)} for a weight vector `w` of
#'   length `m`. The flows need only these sums, and a kernel with
#'   structure computes them without the `n x m x d` array (memory
#'   \eqn{8 n m d} bytes: 1.2 GB for 1000 x 1000 points in 153
#'   dimensions).
#'
#' Results are checked at every call: a matrix (array) of the stated
#' dimensions, numeric and finite, else an error of class
#' `kb_error_callback` naming `kernel`. The kernel must be symmetric and
#' positive semi-definite for the flows to mean anything; that is not
#' checked (a [dmmd_flow()] whose regularised Gram matrix is not positive
#' definite stops with an error naming `lambda`).
#'
#' @param fun Function of `(x, y)` returning the kernel matrix.
#' @param grad Function of `(x, y)` returning the gradient array, or of
#'   `(x, y, w)` returning the weighted gradient sums (see Details).
#' @param name A short name, for printing.
#' @return An object of class `kb_user_kernel`.
#' @references Arbel, M., Korba, A., Salim, A. and Gretton, A. (2019).
#'   Maximum mean discrepancy gradient flow. *NeurIPS*.
#' @seealso [mmd_flow()], [dmmd_flow()]; `inst/experiments/flows-student-teacher.R`
#'   for the student-teacher network kernel.
#' @examples
#' # the Gaussian kernel with bandwidth 1, written in R
#' gk <- user_kernel(
#'   fun = function(x, y) exp(-outer(rowSums(x^2), rowSums(y^2), "+") / 2 +
#'                            tcrossprod(x, y)),
#'   grad = function(x, y, w) {
#'     K <- exp(-outer(rowSums(x^2), rowSums(y^2), "+") / 2 + tcrossprod(x, y))
#'     Kw <- K * rep(w, each = nrow(x))
#'     Kw %*% y - rowSums(Kw) * x
#'   }, name = "Gaussian (R)")
#' gk
#' set.seed(3)
#' y <- matrix(rnorm(100), 50)
#' fit <- mmd_flow(matrix(rnorm(40, 3), 20), y, kernel = gk, n_iter = 50,
#'                 step_size = 5, progress = FALSE)
#' fit
#' @export
user_kernel <- function(fun, grad, name = "user kernel") {
  if (missing(fun) || !is.function(fun)) {
    stop_arg("fun", "must be a function of (x, y) returning the kernel matrix")
  }
  if (missing(grad) || !is.function(grad)) {
    stop_arg("grad", "must be a function of (x, y) returning the n x m x d ",
             "gradient array, or of (x, y, w) returning the n x d weighted sums")
  }
  if (!is.character(name) || length(name) != 1L || is.na(name)) {
    stop_arg("name", "must be one string")
  }
  fa <- names(formals(fun))
  if (length(fa) < 2L && !"..." %in% fa) {
    stop_arg("fun", "must take two arguments (x, y)")
  }
  ga <- names(formals(grad))
  weighted <- "w" %in% ga
  if (length(ga) < 2L && !"..." %in% ga) {
    stop_arg("grad", "must take the arguments (x, y) or (x, y, w)")
  }
  structure(list(fun = fun, grad = grad, weighted = weighted, name = name),
            class = "kb_user_kernel")
}

#' @export
print.kb_user_kernel <- function(x, ...) {
  cat(sprintf("User kernel \"%s\" (R functions; gradient %s)\n", x$name,
              if (x$weighted) "as weighted sums grad(x, y, w)"
              else "as an array grad(x, y)"))
  invisible(x)
}

is_user_kernel <- function(kernel) inherits(kernel, "kb_user_kernel")

# Check what a user kernel's function returned: numeric, finite, of the
# expected dimensions.
check_user_result <- function(v, dims, what) {
  shape <- function(v) {
    if (!is.numeric(v)) return(sprintf("a %s object", class(v)[1L]))
    dv <- dim(v) %||% length(v)
    sprintf("a numeric %s of dimensions %s",
            if (length(dv) == 1L) "vector" else if (length(dv) == 2L) "matrix"
            else "array", paste(dv, collapse = " x "))
  }
  if (!is.numeric(v) || !identical(as.integer(dim(v)), as.integer(dims))) {
    stop_callback("kernel", sprintf("%s returned %s; expected %s", what,
                                    shape(v), paste(dims, collapse = " x ")))
  }
  if (!all(is.finite(v))) {
    bad <- which(!is.finite(v))[1L]
    stop_callback("kernel", sprintf(paste0("%s returned a non-finite value ",
                                           "(%s at position %d)"), what,
                                    format(v[bad]), bad))
  }
  storage.mode(v) <- "double"
  v
}

# The kernel matrix k(x_i, y_j), n x m.
user_gram <- function(kernel, x, y) {
  fun <- kernel$fun  # an error of the closure then shows the call fun(x, y)
  check_user_result(fun(x, y), c(nrow(x), nrow(y)), "fun(x, y)")
}

# For each row z_i: sum_j w_j k(z_i, x_j) and sum_j w_j grad_1 k(z_i, x_j)
# (the same list as the C path of cross_kernel()).
user_cross <- function(kernel, z, x, w) {
  n <- nrow(z)
  m <- nrow(x)
  d <- ncol(z)
  K <- user_gram(kernel, z, x)
  grad <- kernel$grad
  if (kernel$weighted) {
    g <- check_user_result(grad(z, x, w), c(n, d), "grad(x, y, w)")
  } else {
    G <- check_user_result(grad(z, x), c(n, m, d), "grad(x, y)")
    g <- matrix(matrix(aperm(G, c(1L, 3L, 2L)), n * d, m) %*% w, n, d)
  }
  list(value = as.vector(K %*% w), grad = unname(g))
}
