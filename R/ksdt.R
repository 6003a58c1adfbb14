# KSDT: online KSD thinning (Hawkins, Koppel & Zhang).  One C state (an
# external pointer) serves ksdt() over a whole stream, ksdt_sample() and the
# user-facing stream (ksdt_stream / ksdt_push / ksdt_result).

# Minimum dictionary size f(t) as a vectorised function of t, floored.
make_min_size <- function(min_size, coef, floor) {
  coef <- check_number(coef, "min_size_coef", lower = 0)
  floor <- check_number(floor, "min_size_floor", lower = 1)
  f <- if (is.function(min_size)) {
    min_size
  } else {
    rule <- check_choice(min_size, c("sqrt", "linear", "constant"), "min_size")
    switch(rule,
           sqrt = function(t) coef * sqrt(t * log(t)),
           linear = function(t) coef * t,
           constant = function(t) rep(coef, length(t)))
  }
  force(f)
  function(t) pmax(floor, eval_schedule(f, t, "min_size"))
}

# Budget eps_t as a vectorised function of t.
make_budget <- function(budget) {
  if (is.function(budget)) {
    return(function(t) eval_schedule(budget, t, "budget"))
  }
  budget <- check_number(budget, "budget", lower = 0)
  function(t) rep(budget, length(t))
}

# Evaluate a user schedule f(t): one vectorised call if it returns a value
# per t, else one call per t.  Values must be finite and >= 0.
eval_schedule <- function(f, t, arg) {
  # a schedule written for one t (say with `if`) may fail or return one
  # value on a vector of t: then call it once per t
  v <- tryCatch(f(t), error = function(e) NULL)
  if (!(is.numeric(v) && length(v) == length(t))) {
    v <- vapply(t, function(ti) {
      vi <- tryCatch(f(ti), error = function(e) {
        stop(sprintf("'%s' failed at t = %s: %s", arg, format(ti),
                     conditionMessage(e)), call. = FALSE)
      })
      if (!is.numeric(vi) || length(vi) != 1L) {
        stop_arg(arg, sprintf("must return one number for each t; got %s at t = %s",
                              class(vi)[1L], format(ti)))
      }
      vi
    }, 0)
  }
  if (anyNA(v) || any(!is.finite(v)) || any(v < 0)) {
    bad <- which(is.na(v) | !is.finite(v) | v < 0)[1L]
    stop_arg(arg, sprintf("must return finite numbers >= 0; got %s at t = %s",
                          format(v[bad]), format(t[bad])))
  }
  as.double(v)
}

#' Online KSD thinning (KSDT)
#'
#' Thins a stream of states (an MCMC chain, in order) online: each new state
#' is added to a dictionary, then states whose removal raises the squared
#' KSD of the dictionary by at most the budget \eqn{\epsilon_t} are removed,
#' greedily, while the dictionary keeps at least \eqn{f(t)} points (Hawkins,
#' Koppel and Zhang). The dictionary's Gram matrix is never formed: each step
#' costs \eqn{O(|D| d)} time and memory.
#'
#' `ksdt()` runs over an existing stream (the rows of `x` in order). For a
#' sampler of your own (Stan, nimble, ...), create a stream with
#' `ksdt_stream()`, feed it with `ksdt_push()` as states arrive and read it
#' with `ksdt_result()`; pushing the rows of `x` one at a time or all at
#' once gives exactly what `ksdt(x, score)` gives (with a fixed
#' preconditioner; a heuristic one is resolved on the first push).
#'
#' @param x The stream: an `n x d` matrix of states in order (or a data
#'   frame, `coda::mcmc`, posterior draws).
#' @param score Scores at the rows of `x`: a matrix, a function of one point
#'   or a [kb_target()].
#' @param budget The budget \eqn{\epsilon_t \ge 0}: a number, or a function
#'   of the step \eqn{t}.
#' @param min_size The minimum size rule \eqn{f(t)}: `"sqrt"`
#'   (\eqn{a\sqrt{t \log t}}), `"linear"` (\eqn{a t}), `"constant"`
#'   (\eqn{a}), or a function of \eqn{t}.
#' @param min_size_coef The coefficient \eqn{a}.
#' @param min_size_floor The dictionary is never pruned below this size.
#' @param kernel A base kernel; default [imq_kernel()].
#' @param nthreads Number of OpenMP threads; default
#'   `getOption("kernbayes.nthreads", 1)`.
#' @param progress Show progress (throttled to one line a second); default
#'   `interactive()`.
#' @return An object of class `kb_ksdt`: `points` and `score` (the
#'   dictionary, in stream order), `index` (the position in the stream of
#'   each retained point), and per step `ksd` (KSD of the dictionary),
#'   `size` and `removed`; also `evals` (kernel evaluations), `kernel` and
#'   the settings. It has `print`, `summary` and `plot` methods.
#' @references Hawkins, C., Koppel, A. and Zhang, Z. Online, informative
#'   MCMC thinning with kernelized Stein discrepancy.
#' @seealso [ksdt_sample()], [stein_thin()].
#' @examples
#' set.seed(1)
#' # an AR(1) chain with a standard Gaussian target, started at (4, 4)
#' x <- matrix(0, 2000, 2)
#' x[1, ] <- 4
#' for (t in 2:2000) x[t, ] <- 0.9 * x[t - 1, ] + sqrt(0.19) * rnorm(2)
#' fit <- ksdt(x, -x)
#' fit
#' plot(fit)
#' @export
ksdt <- function(x, score, budget = 0, min_size = "sqrt", min_size_coef = 1,
                 min_size_floor = 10, kernel = imq_kernel(), nthreads = NULL,
                 progress = interactive()) {
  x <- as_points(x)
  s <- resolve_score(score, x)
  st <- ksdt_stream(ncol(x), budget = budget, min_size = min_size,
                    min_size_coef = min_size_coef,
                    min_size_floor = min_size_floor, kernel = kernel,
                    nthreads = nthreads, progress = progress)
  ksdt_stream_resolve(st, x)
  ksdt_push(st, x, s)
  out <- ksdt_result(st)
  out
}

#' @rdname ksdt
#' @param dim Dimension of the states.
#' @return `ksdt_stream()`: a `kb_ksdt_stream` object (modified in place by
#'   `ksdt_push()`).
#' @export
ksdt_stream <- function(dim, budget = 0, min_size = "sqrt", min_size_coef = 1,
                        min_size_floor = 10, kernel = imq_kernel(),
                        nthreads = NULL, progress = interactive()) {
  dim <- check_count(dim, "dim")
  if (!inherits(kernel, "kb_kernel")) {
    stop_arg("kernel", "must be a kernel object such as imq_kernel()")
  }
  st <- new.env(parent = emptyenv())
  st$dim <- dim
  st$budget_fun <- make_budget(budget)
  st$min_size_fun <- make_min_size(min_size, min_size_coef, min_size_floor)
  st$settings <- list(budget = budget, min_size = min_size,
                      min_size_coef = min_size_coef,
                      min_size_floor = min_size_floor)
  st$kernel <- kernel
  st$rk <- NULL
  st$ptr <- NULL
  st$nthreads <- resolve_nthreads(nthreads)
  st$progress <- check_flag(progress, "progress")
  st$colnames <- NULL
  class(st) <- "kb_ksdt_stream"
  st
}

# Resolve the kernel (heuristics on the given rows) and create the C state.
ksdt_stream_resolve <- function(st, x) {
  if (!is.null(st$ptr)) return(invisible(st))
  if (is.character(st$kernel$precon) && st$kernel$precon != "id" &&
      nrow(x) < 2L) {
    stop_arg("x", sprintf(paste0("must have at least two rows in the first ",
                                 "push to resolve precon = \"%s\""),
                          st$kernel$precon))
  }
  st$rk <- resolve_kernel(st$kernel, x)
  st$ptr <- .Call(C_kb_ksdt_new, st$rk, st$dim)
  st$colnames <- colnames(x)
  invisible(st)
}

# States seen so far (0 before the first push).
stream_t <- function(stream) {
  if (is.null(stream$ptr)) 0 else .Call(C_kb_ksdt_info, stream$ptr)[[1L]]
}

check_stream <- function(stream) {
  if (!inherits(stream, "kb_ksdt_stream")) {
    stop_arg("stream", "must be a KSDT stream from ksdt_stream()")
  }
  stream
}

#' @rdname ksdt
#' @param stream A stream from `ksdt_stream()`.
#' @return `ksdt_push()`: the stream, invisibly. A push whose states or
#'   scores are invalid is rejected as a whole, before anything changes.
#' @export
ksdt_push <- function(stream, x, score) {
  check_stream(stream)
  if (is.numeric(x) && is.null(dim(x)) && length(x) == stream$dim) {
    x <- matrix(x, nrow = 1L)
  }
  x <- as_points(x)
  if (ncol(x) != stream$dim) {
    stop_arg("x", sprintf("must have %d columns (the stream's dimension); it has %d",
                          stream$dim, ncol(x)))
  }
  if (is.numeric(score) && is.null(dim(score)) && nrow(x) == 1L &&
      length(score) == stream$dim) {
    score <- matrix(score, nrow = 1L)
  }
  s <- resolve_score(score, x)
  # everything that can fail comes before the stream changes
  t0 <- stream_t(stream)
  t <- t0 + seq_len(nrow(x))
  eps <- stream$budget_fun(t)
  fmin <- stream$min_size_fun(t)
  ksdt_stream_resolve(stream, x)
  prog <- if (stream$progress) ksdt_progress(t0, nrow(x)) else NULL
  .Call(C_kb_ksdt_push, stream$ptr, x, s, in_basis(x, stream$rk),
        in_basis(s, stream$rk), eps, fmin, stream$nthreads, prog)
  if (!is.null(prog)) cat("\n")
  invisible(stream)
}

ksdt_progress <- function(t0, m) {
  function(i, size, ksd) {
    cat(sprintf("\rKSDT: step %.0f of %.0f (%3.0f%%), dictionary %d, KSD %.4g   ",
                t0 + i, t0 + m, 100 * i / m, as.integer(size), ksd))
    utils::flush.console()
  }
}

#' @rdname ksdt
#' @export
ksdt_result <- function(stream) {
  check_stream(stream)
  if (is.null(stream$ptr)) {
    stop_arg("stream", "is empty: push states with ksdt_push() first")
  }
  r <- .Call(C_kb_ksdt_result, stream$ptr)
  o <- order(r$index)
  pts <- r$points[o, , drop = FALSE]
  scr <- r$score[o, , drop = FALSE]
  colnames(pts) <- colnames(scr) <- stream$colnames
  structure(c(list(points = pts, score = scr, index = r$index[o],
                   ksd = r$ksd, size = as.integer(r$size),
                   removed = as.integer(r$removed), t = r$t, d = stream$dim,
                   evals = r$evals, kernel = stream$rk),
              stream$settings),
            class = "kb_ksdt")
}

#' @export
print.kb_ksdt_stream <- function(x, ...) {
  if (is.null(x$ptr)) {
    cat(sprintf("KSDT stream, dimension %d: empty\n", x$dim))
  } else {
    r <- .Call(C_kb_ksdt_info, x$ptr)
    cat(sprintf("KSDT stream, dimension %d: %.0f states seen, %.0f kept, KSD %s\n",
                x$dim, r[[1L]], r[[2L]], format(r[[3L]], digits = 5)))
  }
  invisible(x)
}

describe_schedule <- function(x, what) {
  if (is.function(x)) "user function" else format(x)
}

#' @export
print.kb_ksdt <- function(x, ...) {
  cat(sprintf("%s: %d of %.0f states kept, dimension %d\n",
              x$method %||% "KSDT", length(x$index), x$t, x$d))
  if (!is.null(x$sampler)) {
    cat(sprintf("  sampler: %s, step %s, acceptance rate %.3f%s\n", x$sampler,
                format(x$step, digits = 4), x$accept_rate,
                if (x$candidates > 1L) sprintf("; %d candidates per step, start \"%s\"",
                                               x$candidates, x$start) else ""))
  }
  cat("  kernel:", describe_resolved(x$kernel), "\n")
  if (!inherits(x, "kb_spmcmc")) {
    ms <- if (is.function(x$min_size)) "user function" else
      sprintf("%s (coef %s, floor %s)", x$min_size, format(x$min_size_coef),
              format(x$min_size_floor))
    cat(sprintf("  budget: %s; minimum size: %s\n",
                describe_schedule(x$budget), ms))
  }
  cat(sprintf("  KSD of the dictionary: %s; %.0f kernel evaluations\n",
              format(utils::tail(x$ksd, 1L), digits = 6), x$evals))
  invisible(x)
}

#' @export
summary.kb_ksdt <- function(object, ...) {
  T <- length(object$ksd)
  at <- unique(pmin(T, round(10^seq(0, log10(max(T, 1)), length.out = 6))))
  structure(list(method = object$method %||% "KSDT", t = object$t,
                 d = object$d, kept = length(object$index),
                 at = at, ksd = object$ksd[at], size = object$size[at],
                 removed = sum(object$removed),
                 kernel = describe_resolved(object$kernel),
                 oldest = if (length(object$index)) min(object$index) else NA,
                 evals = object$evals),
            class = "summary.kb_ksdt")
}

#' @export
print.summary.kb_ksdt <- function(x, ...) {
  cat(sprintf("%s: %.0f states, %d kept, %.0f removed, d = %d\n", x$method,
              x$t, x$kept, x$removed, x$d))
  cat("  kernel:", x$kernel, "\n")
  print(data.frame(step = x$at, size = x$size, ksd = signif(x$ksd, 5)),
        row.names = FALSE)
  cat(sprintf("  oldest retained state: %s; kernel evaluations: %.0f\n",
              format(x$oldest), x$evals))
  invisible(x)
}

#' Plot a KSDT run
#'
#' Three panels: the KSD of the dictionary against the step (log-log), the
#' dictionary size against the step, and the retained points over the
#' first two coordinates.
#'
#' @param x A `kb_ksdt` object.
#' @param which Panels to draw: 1, 2, 3 or several.
#' @param ... Ignored.
#' @return `x`, invisibly.
#' @export
plot.kb_ksdt <- function(x, which = 1:3, ...) {
  if (length(which) > 1L) {
    op <- graphics::par(mfrow = c(1L, length(which)))
    on.exit(graphics::par(op))
  }
  t <- seq_along(x$ksd)
  if (1L %in% which) {
    graphics::plot(t, x$ksd, type = "l", log = "xy", xlab = "step t",
                   ylab = "KSD of the dictionary", main = "KSD")
  }
  if (2L %in% which) {
    graphics::plot(t, x$size, type = "l", xlab = "step t",
                   ylab = "dictionary size", main = "size")
  }
  if (3L %in% which) {
    p <- x$points
    if (ncol(p) >= 2L) {
      graphics::plot(p[, 1L], p[, 2L], pch = 19, col = "red",
                     xlab = colnames(p)[1L] %||% "x1",
                     ylab = colnames(p)[2L] %||% "x2",
                     main = "retained points")
    } else {
      graphics::plot(x$index, p[, 1L], pch = 19, col = "red",
                     xlab = "stream index", ylab = "x1",
                     main = "retained points")
    }
  }
  invisible(x)
}

start_rules <- c("last", "rand", "infl")

# Shared driver of ksdt_sample() and sp_mcmc(): an optional pilot run
# (step-size adaptation, preconditioner heuristics), then the C loop.
run_ksdt_sampler <- function(target, x0, n_iter, sampler, step, candidates,
                             start, kernel, warmup, target_accept, stream,
                             fmin, nthreads, progress, method) {
  check_target(target)
  x0 <- check_x0(x0, target)
  n_iter <- check_count(n_iter, "n_iter")
  candidates <- check_count(candidates, "candidates")
  type <- if (sampler == "mala") 2L else 1L
  if (is.null(target_accept)) target_accept <- if (type == 2L) 0.574 else 0.234
  target_accept <- check_number(target_accept, "target_accept", lower = 0,
                                upper = 1, lower_open = TRUE,
                                upper_open = TRUE)
  heuristic <- is.character(kernel$precon) && kernel$precon != "id"
  pilot <- NULL
  if (is.null(step) || heuristic) {
    # pilot chain: adapts the step (when not given) and supplies the sample
    # that preconditioner heuristics are resolved on; it is not returned
    nw <- if (is.null(warmup)) 1000L else check_count(warmup, "warmup", 2L)
    pilot <- run_mcmc(type, target, x0, nw, step, nw, target_accept,
                      scores = FALSE)
    step <- pilot$step
    x0 <- pilot$x[nw, ]
  } else {
    step <- check_number(step, "step", lower = 0, lower_open = TRUE)
  }
  t0 <- stream_t(stream)
  t <- t0 + seq_len(n_iter)
  eps <- stream$budget_fun(t)
  fm <- if (is.null(fmin)) stream$min_size_fun(t) else rep(fmin, n_iter)
  ksdt_stream_resolve(stream, if (is.null(pilot)) matrix(x0, 1L) else pilot$x)
  prog <- if (stream$progress) ksdt_progress(t0, n_iter) else NULL
  res <- .Call(C_kb_ksdt_sample, stream$ptr, closure_env(target),
               target$vectorized, type, x0, n_iter, step, candidates,
               match(start, start_rules), eps, as.double(fm), stream$rk$Q,
               stream$nthreads, prog)
  if (!is.null(prog)) cat("\n")
  out <- ksdt_result(stream)
  out$sampler <- toupper(sampler)
  out$step <- res$step
  out$accept_rate <- res$accept_rate
  out$candidates <- candidates
  out$start <- start
  out$method <- method
  out
}

#' Sampling with KSDT inside, and Stein Point MCMC
#'
#' `ksdt_sample()` runs an MCMC sampler ([mala()] or [rwm()]) on a target and
#' thins its states online with KSDT (see [ksdt()]): the chain's states are
#' never all stored, only the dictionary. With `candidates > 1`, each step
#' runs `candidates` MCMC moves from a start chosen by `start` and offers
#' KSDT the candidate that minimises \eqn{k_p(y, y) + 2\sum_{x \in D}
#' k_p(y, x)} (the Stein Point MCMC rule), as in the KSDT paper.
#'
#' `sp_mcmc()` is Stein Point MCMC (Chen et al., 2019): the same selection
#' rule with `m` candidates per step and no pruning, so that after
#' `n_iter` steps the point set has `n_iter` points.
#'
#' Start rules: `"last"` continues from the last added point, `"rand"` from
#' a uniformly random dictionary point, `"infl"` from the most influential
#' one, \eqn{\arg\max_i 2 r_i - k_p(x_i, x_i)} with \eqn{r_i} its row sum.
#'
#' When `step` is `NULL`, or the kernel's preconditioner is a heuristic, a
#' pilot chain of `warmup` iterations (default 1000) is run first: it
#' adapts the step size and is the sample the heuristic is resolved on; it
#' is discarded and the run starts from its last state.
#'
#' @inheritParams ksdt
#' @inheritParams rwm
#' @param sampler `"mala"` (default) or `"rwm"`.
#' @param candidates Number of MCMC moves per step (1: plain KSDT on the
#'   chain).
#' @param start Start rule for the moves when `candidates > 1`.
#' @param target_accept Acceptance rate for the pilot's adaptation; default
#'   0.574 (MALA) or 0.234 (RWM).
#' @return A `kb_ksdt` object (see [ksdt()]) with, in addition, `sampler`,
#'   `step`, `accept_rate`, `candidates` and `start`. For `sp_mcmc()` the
#'   class is `c("kb_spmcmc", "kb_ksdt")`.
#' @references Chen, W. Y., Barp, A., Briol, F.-X., Gorham, J., Girolami,
#'   M., Mackey, L. and Oates, C. J. (2019). Stein point Markov chain Monte
#'   Carlo. *ICML*.
#' @examples
#' set.seed(1)
#' tg <- gaussian_mixture_target(rbind(c(-2, 0), c(2, 0)))
#' fit <- ksdt_sample(tg, x0 = c(0, 0), n_iter = 2000, step = 1)
#' fit
#' sp <- sp_mcmc(tg, x0 = c(0, 0), n_iter = 100, m = 5, step = 1)
#' sp
#' @export
ksdt_sample <- function(target, x0, n_iter, sampler = c("mala", "rwm"),
                        step = NULL, candidates = 1, start = "last",
                        budget = 0, min_size = "sqrt", min_size_coef = 1,
                        min_size_floor = 10, kernel = imq_kernel(),
                        warmup = NULL, target_accept = NULL, nthreads = NULL,
                        progress = interactive()) {
  sampler <- check_choice(sampler, c("mala", "rwm"), "sampler")
  start <- check_choice(start, start_rules, "start")
  check_target(target)
  st <- ksdt_stream(target$dim, budget = budget, min_size = min_size,
                    min_size_coef = min_size_coef,
                    min_size_floor = min_size_floor, kernel = kernel,
                    nthreads = nthreads, progress = progress)
  run_ksdt_sampler(target, x0, n_iter, sampler, step, candidates, start,
                   kernel, warmup, target_accept, st, NULL, nthreads,
                   progress, "KSDT")
}

#' @rdname ksdt_sample
#' @param m Number of candidates per step.
#' @export
sp_mcmc <- function(target, x0, n_iter, m = 10, sampler = c("mala", "rwm"),
                    start = c("last", "rand", "infl"), kernel = imq_kernel(),
                    step = NULL, warmup = NULL, target_accept = NULL,
                    nthreads = NULL, progress = interactive()) {
  sampler <- check_choice(sampler, c("mala", "rwm"), "sampler")
  start <- check_choice(start, start_rules, "start")
  check_target(target)
  m <- check_count(m, "m")
  st <- ksdt_stream(target$dim, kernel = kernel, nthreads = nthreads,
                    progress = progress)
  out <- run_ksdt_sampler(target, x0, n_iter, sampler, step, m, start,
                          kernel, warmup, target_accept, st, Inf, nthreads,
                          progress, "Stein Point MCMC")
  out$budget <- NA
  out$min_size <- "none (no pruning)"
  class(out) <- c("kb_spmcmc", "kb_ksdt")
  out
}
