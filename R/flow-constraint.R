# Constraints for mied(): the dynamic barrier of Gong and Liu (2021), as
# Li et al. (2023) use it for constrained sampling.  One constraint, an
# inequality g(x) <= 0 or an equality h(x) = 0 (taken as g = h^2 <= 0),
# applied to each particle's descent direction in R: O(n d) an iteration
# beside the O(n^2 d) interaction terms.

#' A constraint for MIED
#'
#' Describes one constraint on the particles of [mied()]: an inequality
#' \eqn{g(x) \le 0} (`type = "ineq"`) or an equality \eqn{h(x) = 0}
#' (`type = "eq"`). MIED handles it by the dynamic barrier of Gong and Liu
#' (2021), as Li et al. (2023) do: each particle's descent direction
#' \eqn{v_i} (the gradient of the log energy) is replaced by
#' \deqn{v_i + \lambda_i \nabla g(x_i), \quad \lambda_i = \max\left(0,
#' \frac{\alpha\, g(x_i) - \langle v_i, \nabla g(x_i)\rangle}{|\nabla
#' g(x_i)|^2}\right),}{v_i + lambda_i grad g(x_i), lambda_i = max(0,
#' (alpha g(x_i) - <v_i, grad g(x_i)>) / |grad g(x_i)|^2),}
#' the closest direction to \eqn{v_i} along which \eqn{g} decreases at
#' least at the rate \eqn{\alpha g(x_i)} (\eqn{\lambda_i = 0} where the
#' gradient of \eqn{g} vanishes). Outside the feasible set the particles
#' are pushed back; inside, a particle moves freely unless it heads for
#' the boundary faster than the barrier allows. An equality is the
#' inequality \eqn{g = h^2 \le 0}, with \eqn{\nabla g = 2 h \nabla h} (the
#' authors' code merges equalities the same way). As in the authors'
#' code, the optimizer (Adam by default) acts on the corrected direction.
#'
#' @param fun The constraint function on all particles at once: given the
#'   `n x d` matrix of particles, it returns the `n` values \eqn{g(x_i)}
#'   (or \eqn{h(x_i)}).
#' @param grad Its gradient, also on all particles: given the `n x d`
#'   matrix, it returns the `n x d` matrix whose row \eqn{i} is
#'   \eqn{\nabla g(x_i)} (or \eqn{\nabla h(x_i)}).
#' @param type `"ineq"` (\eqn{g \le 0}, default) or `"eq"` (\eqn{h = 0}).
#' @param alpha The barrier's rate \eqn{\alpha > 0} (default 1, the
#'   authors' setting).
#' @return An object of class `kb_constraint` for the `constraint`
#'   argument of [mied()].
#' @references Gong, C. and Liu, X. (2021). Bi-objective trade-off with
#'   dynamic barrier gradient descent. *NeurIPS*.
#'
#'   Li, L., Liu, Q., Korba, A., Yurochkin, M. and Solomon, J. (2023).
#'   Sampling with mollified interaction energy descent. *ICLR*.
#' @seealso [mied()]
#' @examples
#' # the unit circle as an equality, the unit disc as an inequality
#' circle <- mied_constraint(function(x) rowSums(x^2) - 1,
#'                           function(x) 2 * x, type = "eq")
#' disc <- mied_constraint(function(x) rowSums(x^2) - 1, function(x) 2 * x)
#' circle
#' @export
mied_constraint <- function(fun, grad, type = c("ineq", "eq"), alpha = 1) {
  if (missing(fun) || !is.function(fun)) {
    stop_arg("fun", "must be a function of the n x d matrix of particles ",
             "returning n values")
  }
  if (missing(grad) || !is.function(grad)) {
    stop_arg("grad", "must be a function of the n x d matrix of particles ",
             "returning the n x d matrix of gradients")
  }
  type <- check_choice(type, c("ineq", "eq"), "type")
  alpha <- check_number(alpha, "alpha", lower = 0, lower_open = TRUE)
  structure(list(fun = fun, grad = grad, type = type, alpha = alpha),
            class = "kb_constraint")
}

#' @export
print.kb_constraint <- function(x, ...) {
  cat(sprintf("MIED constraint: %s, dynamic barrier alpha = %s\n",
              if (x$type == "eq") "h(x) = 0" else "g(x) <= 0",
              format(x$alpha)))
  invisible(x)
}

# The constraint argument of mied(): NULL or a kb_constraint whose fields
# are still usable (it is a list the user can edit).
check_constraint <- function(con, d) {
  if (is.null(con)) return(NULL)
  if (!inherits(con, "kb_constraint")) {
    stop_arg("constraint", "must be NULL or a mied_constraint() object")
  }
  ok <- is.function(con$fun) && is.function(con$grad) &&
    (identical(con$type, "ineq") || identical(con$type, "eq"))
  ok <- ok && is.numeric(con$alpha) && length(con$alpha) == 1L &&
    isTRUE(con$alpha > 0 && is.finite(con$alpha))
  if (!ok) {
    stop_arg("constraint", "is not a valid mied_constraint() object: build ",
             "it again with mied_constraint()")
  }
  if (con$type == "eq" && d < 2L) {
    stop_arg("constraint", "is an equality in dimension 1 (a set of points): ",
             "equalities need d >= 2")
  }
  con
}

# The constraint at the particles: its values (g or h), the barrier
# function g (h^2 for an equality) and its gradient, and the violation
# (max g+ or max |h|).  Calls of the user's functions are checked.
constraint_eval <- function(con, x, t) {
  n <- nrow(x)
  d <- ncol(x)
  at <- if (t > 0L) sprintf(" (iteration %d)", t) else ""
  call_fun <- function(f, what) {
    tryCatch(f(x), error = function(e) {
      stop_callback("constraint", sprintf("'%s' failed%s: %s", what, at,
                                          conditionMessage(e)))
    })
  }
  v <- call_fun(con$fun, "fun")
  if (!is.numeric(v) || length(v) != n) {
    stop_callback("constraint", sprintf(paste0(
      "'fun' must return %d numbers for a %d x %d matrix of particles%s"),
      n, n, d, at))
  }
  v <- as.double(v)
  if (!all(is.finite(v))) {
    stop_callback("constraint", sprintf(
      "'fun' returned a non-finite value at particle %d%s",
      which(!is.finite(v))[1L], at))
  }
  gr <- call_fun(con$grad, "grad")
  if (d == 1L && is.numeric(gr) && is.null(dim(gr))) gr <- matrix(gr, ncol = 1L)
  if (!is.matrix(gr) || !is.numeric(gr) || any(dim(gr) != c(n, d))) {
    stop_callback("constraint", sprintf(paste0(
      "'grad' must return a %d x %d numeric matrix for a %d x %d matrix of ",
      "particles%s"), n, d, n, d, at))
  }
  storage.mode(gr) <- "double"
  dimnames(gr) <- NULL
  if (!all(is.finite(gr))) {
    stop_callback("constraint", sprintf(
      "'grad' returned a non-finite value at particle %d%s",
      which(!is.finite(gr), arr.ind = TRUE)[1L, 1L], at))
  }
  if (con$type == "eq") {
    list(value = v, g = v^2, dg = 2 * v * gr, violation = max(abs(v)))
  } else {
    list(value = v, g = v, dg = gr, violation = max(0, v))
  }
}

# The dynamic barrier on descent directions v (n x d): v + lambda dg with
# lambda = max(0, (alpha g - <v, dg>) / |dg|^2), 0 where dg = 0.
barrier_direction <- function(v, ce, alpha) {
  nrm2 <- rowSums(ce$dg^2)
  lam <- (alpha * ce$g - rowSums(v * ce$dg)) / nrm2
  lam[!(nrm2 > 0) | !(lam > 0)] <- 0
  v + lam * ce$dg
}
