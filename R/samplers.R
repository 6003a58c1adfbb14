# MCMC samplers driven by a target's R closures: random walk Metropolis and
# MALA, with optional step-size adaptation during a warm-up.

# Environment binding the target's closures under the names the C layer
# calls them by.
closure_env <- function(target) {
  env <- new.env(parent = baseenv())
  assign("log_density", target$log_density, envir = env)
  assign("score", target$score, envir = env)
  env
}

# A start: one point of the target's dimension (as_points() with one =
# TRUE: a vector of length d or a one-row matrix), as a named vector.
check_x0 <- function(x0, target) {
  d <- target$dim
  ok <- is.numeric(x0) && length(x0) == d && !anyNA(x0) && all(is.finite(x0))
  if (ok && !is.null(dim(x0))) ok <- nrow(x0) == 1L
  if (!ok) {
    stop_arg("x0", sprintf(paste0("must be a finite numeric vector of length ",
                                  "%d (the target's dimension), or a one-row ",
                                  "matrix"), d))
  }
  x0 <- as_points(x0, "x0", d, one = TRUE)
  stats::setNames(x0[1L, ], colnames(x0))
}

# A given step size: positive, and small enough that MALA's move by
# step^2 / 2 times the score stays finite (mala(), rwm(), ksdt_sample(),
# sp_mcmc()).
check_step <- function(step) {
  step <- check_number(step, "step_size", lower = 0, lower_open = TRUE)
  if (step > 1e150) {
    stop_arg("step_size", sprintf(paste0("is too large: %s; proposals would ",
                                         "leave the finite range"),
                                  format(step)))
  }
  step
}

# A chain of `sampler` ("rwm" or "mala") from x0. `chain`, the chain's
# settings: step (NULL: adapted), warmup, target_accept, scores (whether
# the scores of the states are kept) and progress.
run_mcmc <- function(sampler, target, x0, n_iter, chain) {
  step <- chain$step
  warmup <- chain$warmup
  check_target(target)
  x0 <- check_x0(x0, target)
  n_iter <- check_count(n_iter, "n_iter")
  # the states, scores and log densities kept
  check_memory(8 * as.double(n_iter) * (2 * target$dim + 1), "n_iter",
               sprintf("a chain of %.0f states", as.double(n_iter)))
  adapt <- is.null(step)
  if (adapt) {
    step <- 2.38 / sqrt(target$dim) * if (sampler == "mala") 0.5 else 1
  } else {
    step <- check_step(step)
  }
  if (is.null(warmup)) warmup <- if (adapt) min(1000L, n_iter) else 0L
  warmup <- check_count(warmup, "warmup", min = 0L)
  if (adapt && warmup < 1L) {
    stop_arg("warmup", "must be at least 1 when the step size is adapted")
  }
  target_accept <- check_number(chain$target_accept, "target_accept", lower = 0,
                                upper = 1, lower_open = TRUE,
                                upper_open = TRUE)
  prog <- progress_reporter(warmup + n_iter, toupper(sampler), chain$progress)
  res <- .Call(C_kb_mcmc, closure_env(target),
               list(sampler = sampler, vectorized = target$vectorized,
                    x0 = x0, n_iter = n_iter, step = step, warmup = warmup,
                    adapt = adapt, target_accept = target_accept,
                    scores = chain$scores, progress = prog$callback()))
  prog$done()
  colnames(res$x) <- names(x0)
  if (n_iter >= 100L && res$accept_rate < 0.01) {
    warning(sprintf(paste0("the %s chain accepted %.2g%% of its proposals (step ",
                           "%s): it barely moved; try a smaller 'step_size', a warm-up ",
                           "(step_size = NULL) or a better 'x0'"),
                    toupper(sampler), 100 * res$accept_rate,
                    format(res$step, digits = 3)), call. = FALSE)
  }
  new_chain(res, adapt, warmup, toupper(sampler), n_iter, target$dim)
}

# The one constructor of kb_chain: the states, scores and log densities,
# acceptance rate and final step of `res` (src/samplers.c's result), and
# the run's settings.
new_chain <- function(res, adapted, warmup, sampler, n_iter, d) {
  structure(list(x = res$x, score = res$score, log_density = res$log_density,
                 accept_rate = res$accept_rate, step = res$step,
                 adapted = adapted, warmup = warmup, sampler = sampler,
                 n_iter = n_iter, d = d),
            class = "kb_chain")
}

#' Random walk Metropolis and MALA
#'
#' Markov chains for a [kb_target()], driven by its R closures: random walk
#' Metropolis (proposal \eqn{y = x + h z}) and the Metropolis-adjusted
#' Langevin algorithm (\eqn{y = x + \frac{h^2}{2}\nabla\log p(x) + h z}),
#' \eqn{z} standard normal. Scores are stored with the states, ready for
#' [ksd()], [stein_thin()] or [ksdt()].
#'
#' With `step_size = NULL` the step size \eqn{h} is adapted during `warmup`
#' iterations (Robbins-Monro on \eqn{\log h} towards `target_accept`), which
#' are then discarded; with a given `step_size`, `warmup` iterations (default 0)
#' are discarded without adaptation. Randomness comes from R's generator, so
#' [set.seed()] reproduces a run; the target's closures may draw from it
#' too (a Monte Carlo integral inside a log density): they continue the
#' chain's stream.
#'
#' @param target A [kb_target()].
#' @param x0 Starting point: a vector of length `target$dim` or a one-row
#'   matrix (see 'Points and samples' in [kernbayes-package]); its log density must be finite.
#' @param n_iter Number of iterations returned.
#' @param step_size Step size \eqn{h}, or `NULL` to adapt it.
#' @param warmup Iterations run first and discarded (default 1000 or
#'   `n_iter`, whichever is smaller, when adapting; else 0).
#' @param target_accept Acceptance rate aimed at when adapting (0.234 for
#'   RWM, 0.574 for MALA).
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `NULL` (automatic).
#' @param step Deprecated name of `step_size`.
#' @return An object of class `kb_chain`: `x` (`n_iter x d` states), `score`,
#'   `log_density`, `accept_rate`, `step` (the final step size), and settings; with
#'   `print`, `summary` and `plot` methods.
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0), diag(c(1, 4)))
#' ch <- mala(tg, x0 = c(3, 3), n_iter = 2000)
#' ch
#' colMeans(ch$x)
#' @export
rwm <- function(target, x0, n_iter, step_size = NULL, warmup = NULL,
                target_accept = 0.234, progress = NULL, step) {
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "rwm", step,
                                missing(step_size))
  }
  run_mcmc("rwm", target, x0, n_iter,
           list(step = step_size, warmup = warmup,
                target_accept = target_accept, scores = TRUE,
                progress = progress))
}

#' @rdname rwm
#' @export
mala <- function(target, x0, n_iter, step_size = NULL, warmup = NULL,
                 target_accept = 0.574, progress = NULL, step) {
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "mala", step,
                                missing(step_size))
  }
  run_mcmc("mala", target, x0, n_iter,
           list(step = step_size, warmup = warmup,
                target_accept = target_accept, scores = TRUE,
                progress = progress))
}

#' @export
print.kb_chain <- function(x, ...) {
  check_result(x)
  cat(sprintf("%s chain: %d iterations in dimension %d\n", x$sampler,
              x$n_iter, x$d))
  cat(sprintf("  step %s (%s); acceptance rate %.3f\n",
              format(x$step, digits = 4),
              if (x$adapted) sprintf("adapted over %d warm-up iterations", x$warmup)
              else "given", x$accept_rate))
  invisible(x)
}

#' Summary of a chain
#'
#' Means, standard deviations and 5% / 95% quantiles of each coordinate
#' and, when the posterior package is installed, its convergence
#' diagnostics: split R-hat and the bulk and tail effective sample sizes
#' (`posterior::rhat()`, `ess_bulk()`, `ess_tail()`, as
#' [posterior::summarise_draws()] computes them on the chain).
#'
#' @param object A `kb_chain`.
#' @param ... Ignored.
#' @return A `summary.kb_chain` object: `chain` and `table` (one row per
#'   coordinate: `mean`, `sd`, `q05`, `q95`, and with posterior `rhat`,
#'   `ess_bulk`, `ess_tail`).
#' @export
summary.kb_chain <- function(object, ...) {
  check_result(object, "object")
  x <- object$x
  tab <- data.frame(mean = colMeans(x), sd = apply(x, 2L, stats::sd),
                    q05 = apply(x, 2L, stats::quantile, 0.05),
                    q95 = apply(x, 2L, stats::quantile, 0.95))
  rownames(tab) <- point_names(x)
  if (requireNamespace("posterior", quietly = TRUE)) {
    dg <- posterior::summarise_draws(as_draws_df.kb_chain(object),
                                     "rhat", "ess_bulk", "ess_tail")
    # summarise_draws() returns pillar-classed numbers: keep the doubles
    tab$rhat <- as.double(dg$rhat)
    tab$ess_bulk <- as.double(dg$ess_bulk)
    tab$ess_tail <- as.double(dg$ess_tail)
  }
  structure(list(chain = object, table = tab), class = "summary.kb_chain")
}

#' @export
print.summary.kb_chain <- function(x, ...) {
  print(x$chain)
  print(signif(x$table, 4))
  if (is.null(x$table$rhat)) {
    cat("(install 'posterior' for R-hat and effective sample sizes)\n")
  }
  invisible(x)
}

#' Trace plots of a chain
#'
#' @param x A `kb_chain`.
#' @param which Coordinates to plot (at most 4 by default).
#' @param ... Ignored.
#' @return `x`, invisibly.
#' @export
plot.kb_chain <- function(x, which = seq_len(min(4L, x$d)), ...) {
  check_result(x)
  if (!is.numeric(which) || length(which) < 1L || anyNA(which) ||
      any(which != round(which)) || any(which < 1 | which > x$d)) {
    stop_arg("which", sprintf("must be coordinates of the chain: whole numbers in 1..%d",
                              x$d))
  }
  op <- graphics::par(mfrow = c(length(which), 1L), mar = c(3, 4, 1, 1))
  on.exit(graphics::par(op))
  cn <- colnames(x$x) %||% paste0("x", seq_len(x$d))
  for (k in which) {
    graphics::plot(x$x[, k], type = "l", xlab = "", ylab = cn[k])
  }
  invisible(x)
}
