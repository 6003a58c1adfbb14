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

# The minimum size settings from `size` (a constant dictionary size, f(t) =
# size with the floor at size) or from min_size, min_size_coef and
# min_size_floor (`given`: which of those three the caller was given; they
# and `size` are mutually exclusive).
size_rule <- function(size, min_size, coef, floor, given) {
  if (is.null(size)) {
    return(list(min_size = min_size, coef = coef, floor = floor))
  }
  if (any(given)) {
    stop_arg("size", "sets a constant minimum size: give either 'size' or ",
             paste(sQuote(c("min_size", "min_size_coef", "min_size_floor")[given],
                          FALSE), collapse = ", "), ", not both")
  }
  size <- as.double(check_count(size, "size"))
  list(min_size = "constant", coef = size, floor = size)
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
        stop_callback(arg, sprintf("failed at t = %s: %s", format(ti),
                                   conditionMessage(e)))
      })
      if (!is.numeric(vi) || length(vi) != 1L) {
        stop_callback(arg, sprintf("must return one number for each t; got %s at t = %s",
                                   class(vi)[1L], format(ti)))
      }
      vi
    }, 0)
  }
  if (anyNA(v) || any(!is.finite(v)) || any(v < 0)) {
    bad <- which(is.na(v) | !is.finite(v) | v < 0)[1L]
    stop_callback(arg, sprintf("must return finite numbers >= 0; got %s at t = %s",
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
#' once gives exactly what `ksdt(x, score)` gives when the stream's
#' standardisation and preconditioner are fixed (`standardize = ksdt(x,
#' score)$scale` or `FALSE`, and a numeric preconditioner). With
#' `standardize = TRUE` (default) `ksdt()` divides by the column scales of
#' the whole of `x`, a stream by those of its first push (which must then
#' have at least two rows), and a heuristic preconditioner is resolved on
#' the same rows.
#'
#' @inheritParams stein_kernel_matrix
#' @param x The stream: an `n x d` matrix of states in order (or a data
#'   frame, `coda::mcmc`, posterior draws; for `ksdt()` also a Stan fit). A vector is `n` one-dimensional
#'   states for `ksdt()`, and one state of the stream's dimension (when
#'   above 1) for `ksdt_push()`; see 'Points and samples' in [kernbayes-package].
#' @param score Scores at the rows of `x`: a matrix (a vector as for `x`,
#'   of the dimension of `x`), a function of one point or a [kb_target()];
#'   for `ksdt()` also a draws object of gradients, or left out when `x` is
#'   a Stan fit (see [ksd()]).
#' @param chain For `ksdt()`: chain labels of the rows of a matrix `x` (see
#'   [ksd()]). Several chains (labelled, or a draws object or Stan fit) are
#'   never run as one stream: each chain is thinned by its own stream, all
#'   with one kernel and one standardisation resolved on the whole sample
#'   (all chains pooled), and the dictionaries are
#'   merged as by [c.kb_ksdt()] (ordered by their KSD), so the result does
#'   not depend on the order of the chains. It then has `per_chain` (each
#'   chain's `kb_ksdt`), `source` (the chain and index there of each kept
#'   point), and `chain` and `iteration` of each kept point.
#' @param budget The budget \eqn{\epsilon_t \ge 0}: a number, or a function
#'   of the step \eqn{t}.
#' @param min_size The minimum size rule \eqn{f(t)}: `"sqrt"`
#'   (\eqn{a\sqrt{t \log t}}), `"linear"` (\eqn{a t}), `"constant"`
#'   (\eqn{a}), or a function of \eqn{t}.
#' @param min_size_coef The coefficient \eqn{a}.
#' @param min_size_floor The dictionary is never pruned below this size.
#' @param size A constant minimum dictionary size \eqn{f(t) = } `size`:
#'   short for `min_size = "constant", min_size_coef = size, min_size_floor
#'   = size`, and an error together with any of those three. With the
#'   default budget 0 the dictionary still grows when keeping a point
#'   lowers the KSD; with a large budget (say `1e10`) it is pruned to `size`
#'   points at every step.
#' @param kernel A base kernel; default [imq_kernel()].
#' @param candidates Block length \eqn{m}: with \eqn{m > 1}, each block of
#'   \eqn{m} consecutive rows (the last one possibly shorter) offers KSDT
#'   only its row \eqn{c} minimising \eqn{k_p(c, c) + 2\sum_{j \in D}
#'   k_p(c, x_j)} against the current dictionary \eqn{D} (the Stein Point
#'   MCMC rule, as in the KSDT paper's "SPMCMC" variants; the first row on
#'   ties). The step \eqn{t} then counts blocks, and `index` still refers
#'   to rows of the whole stream. In `ksdt_push()` blocks do not straddle
#'   pushes: push multiples of \eqn{m} rows to reproduce `ksdt()`.
#' @param regularize For `ksdt()` with `candidates` \eqn{> 1}: `FALSE`
#'   (default: the rule above), `TRUE` or a positive \eqn{\lambda}: the
#'   regularised candidate rule (see 'Regularised candidate rule').
#' @param log_density,hessian_diag For `regularize`: \eqn{\log p} at the
#'   rows of `x` (a vector, or a function of one point) and the diagonal of
#'   its Hessian (an \eqn{n \times d} matrix, or a function of one point),
#'   as in [stein_thin()]; `NULL` (default): from the target, and the
#'   Hessian diagonal by central differences of the score (\eqn{2d} more
#'   score evaluations per row).
#' @param nthreads Number of OpenMP threads; default
#'   `getOption("kernbayes.nthreads", 1)`.
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `NULL` (automatic).
#' @section Regularised candidate rule: Bénard, Staber and Da Veiga (2023)
#'   add to greedy Stein thinning's objective a Laplacian correction and an
#'   entropic term (see [stein_thin()]). Of KSDT it is the candidate rule
#'   that is such a greedy step, and there it carries over: with
#'   `regularize`, each block offers its row \eqn{c} minimising
#'   \deqn{k_p(c, c) + \Delta^+ \log p(c) - w_t \log p(c) + 2\sum_{j \in
#'   D} k_p(c, x_j),} \eqn{\Delta^+ \log p(c) = \sum_k \max(0,
#'   \partial^2_{kk} \log p(c))} in the coordinates of the Stein kernel
#'   (with standardisation, \eqn{\sum_k \sigma_k^2 \max(0,
#'   \partial^2_{kk} \log p)}, as in [stein_thin()]), with \eqn{t = |D| + 1}, the size the dictionary would
#'   have, in the role of the greedy step. A number \eqn{\lambda} gives
#'   \eqn{w_t = \lambda t}, as in [stein_thin()]. KSDT has no final size
#'   \eqn{m} for the paper's default \eqn{\lambda = 1/m}, so `TRUE` takes
#'   \eqn{\lambda = 1/t} at every step, i.e. \eqn{w_t = 1}: each step
#'   weighs \eqn{\log p} as the last step of a greedy selection of the
#'   dictionary's size does under the paper's default (a fixed
#'   \eqn{\lambda} would make the weight grow without bound as the
#'   dictionary grows). Where it does not carry over: the additions and
#'   removals of KSDT compare the KSD of dictionaries and are unchanged, so
#'   with `candidates = 1` there is nothing to regularise (an error); the
#'   result's `ksd` is the plain KSD of the dictionary. The rule is offered
#'   by `ksdt()`, [ksdt_sample()] and [sp_mcmc()] (and [ksdt_chains()]
#'   through `ksdt_sample()`), not by `ksdt_push()` (it takes no log
#'   densities or Hessians: run `ksdt()` on the rows).
#'
#'   Measured on the mixture `gaussian_mixture_target(means = rbind(c(-3,
#'   0), c(3, 0)), weights = c(0.2, 0.8))`, 5000 exact draws streamed in
#'   blocks of 5 (`size = 100`, `candidates = 5`, 5 seeds): plain KSDT's
#'   dictionary put 0.79-0.85 (mean 0.82) of its points in the heavy mode,
#'   the regularised one 0.86-0.94 (mean 0.91). KSDT's candidate rule does
#'   not under-weight the heavy mode as greedy Stein thinning does (0.38-0.53
#'   there), and the entropic term, which favours high density,
#'   over-weights it; with the default `"sqrt"` schedule (about 56 points)
#'   both keep almost only the heavy mode (plain 1.00 in all 5 seeds,
#'   regularised 0.99-1.00). So the rule is not a remedy for KSDT on
#'   mixtures; it is there for the other pathology the paper treats, points
#'   where \eqn{\log p} is convex (the Laplacian term).
#' @return An object of class `kb_ksdt`: `points` and `score` (the
#'   dictionary, in stream order), `index` (the position in the stream of
#'   each retained point), and per step `ksd` (KSD of the dictionary),
#'   `size` and `removed`; also `t` (steps), `n_offered` (rows of the stream
#'   taken), `evals` (kernel evaluations), `kernel`, `scale` (the column
#'   scales of the standardisation; absent without it) and the settings
#'   (with the regularised rule, `regularize`: `TRUE` or \eqn{\lambda}). It
#'   has `print`, `summary` and `plot` methods.
#' @references Hawkins, C., Koppel, A. and Zhang, Z. Online, informative
#'   MCMC thinning with kernelized Stein discrepancy.
#'
#'   Bénard, C., Staber, B. and Da Veiga, S. (2023). Kernel Stein
#'   discrepancy thinning: a theoretical perspective of pathologies and a
#'   practical fix with regularization. *NeurIPS*.
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
#' # the regularised candidate rule, log p and its Hessian from a target
#' tg <- gaussian_target(c(0, 0))
#' ksdt(x, tg, candidates = 5, regularize = TRUE)
#' @export
ksdt <- function(x, score, budget = 0, min_size = "sqrt", min_size_coef = 1,
                 min_size_floor = 10, size = NULL, kernel = imq_kernel(),
                 candidates = 1, regularize = FALSE, log_density = NULL,
                 hessian_diag = NULL, standardize = TRUE, nthreads = NULL,
                 chain = NULL, progress = NULL) {
  candidates <- check_count(candidates, "candidates")
  progress <- check_progress(progress)
  lambda <- check_regularize(regularize)
  if (!is.null(lambda) && candidates < 2L) {
    stop_arg("regularize", "changes the choice among candidates: it needs ",
             "candidates > 1 (with candidates = 1 every row is offered)")
  }
  f <- size_rule(size, min_size, min_size_coef, min_size_floor,
                 c(!missing(min_size), !missing(min_size_coef),
                   !missing(min_size_floor)))
  smp <- as_sample(x, score, chain, progress = progress)
  x <- smp$x
  src <- if (!is.null(lambda)) reg_sources(smp, log_density, hessian_diag)
  new_stream <- function(std = standardize) {
    ksdt_stream(ncol(x), budget = budget, min_size = f$min_size,
                min_size_coef = f$coef, min_size_floor = f$floor,
                kernel = kernel, nthreads = nthreads, progress = progress,
                standardize = std)
  }
  new_stream()   # checks every setting before the score closure runs
  # the column scales of the whole sample (all chains pooled), given to
  # every stream as numbers
  scale <- standardize_scale(standardize, x)
  std <- scale %||% FALSE
  st <- new_stream(std)
  s <- resolve_score(smp$score, x)
  reg <- if (!is.null(lambda)) ksdt_reg(src, x, lambda, scale)
  if (n_chains(smp) < 2L) {
    push_rows(st, x, s, candidates, reg = reg)
    res <- ksdt_reg_label(
      stream_result(st, against = sprintf("the sample (%d points)", nrow(x))),
      reg)
    return(warn_distortion(label_ksdt(res, smp, res$index), "ksdt"))
  }
  res <- ksdt_reg_label(ksdt_by_chain(smp, s, function() new_stream(std),
                                      candidates, st$nthreads, reg), reg)
  warn_distortion(res, "ksdt")
}

# The regularised candidate rule's terms at the rows of x (Benard, Staber &
# Da Veiga 2023): the Laplacian term in the coordinates of the Stein kernel
# (x divided by the column scales `scale`, NULL: none) and log p, and the
# weight on log p as the C feed takes it:
# `lambda` (weight lambda t, t = |D| + 1) or `adaptive` (weight 1, i.e.
# lambda = 1 / t: each step weighs log p as the last step of greedy
# thinning to the size the dictionary would have).
ksdt_reg <- function(src, x, lambda, scale) {
  c(list(lap = laplacian_plus(src$hessian, x, scale),
         logp = resolve_log_density(src$log_density, x, "log_density")),
    reg_weight(lambda))
}

# The weight on log p of the regularised candidate rule as the C feed takes
# it (kb_ksdt_feed_ctl): from check_regularize()'s value ("default":
# adaptive, lambda = 1 / t; a number: lambda; NULL: no rule).
reg_weight <- function(lambda) {
  if (is.null(lambda)) return(NULL)
  if (identical(lambda, "default")) list(adaptive = TRUE) else
    list(lambda = lambda)
}

# A regularised result says so (an unregularised one is left as it was).
ksdt_reg_label <- function(res, reg) {
  if (is.null(reg)) return(res)
  res$regularize <- if (isTRUE(reg$adaptive)) TRUE else reg$lambda
  res$method <- paste(res$method %||% "KSDT",
                      "(regularised candidate rule)")
  res
}

# KSDT on several chains: one stream per chain, all with the kernel
# resolved on the whole sample (the same evenly spaced iterations of each
# chain; `new_stream()` gives streams with the column scales of the whole
# sample), merged by merge_dicts(), which orders the dictionaries by their
# KSD: the result does not depend on the order of the chains.
ksdt_by_chain <- function(smp, s, new_stream, candidates, nthreads,
                          reg = NULL) {
  x <- smp$x
  st <- new_stream()
  scale <- standardize_scale(st$standardize, x)
  rk <- resolve_kernel(st$kernel, scale_points(x, scale),
                       rows = heuristic_rows(smp))
  rows <- chain_rows(smp)
  dicts <- lapply(rows, function(r) {
    sc <- new_stream()
    stream_attach(sc, rk, colnames(x), scale)
    rg <- reg
    if (!is.null(rg)) rg[c("lap", "logp")] <- list(reg$lap[r], reg$logp[r])
    push_rows(sc, x[r, , drop = FALSE], s[r, , drop = FALSE], candidates,
              reg = rg)
    d <- ksdt_result(sc)
    label_ksdt(d, smp, r[d$index])
  })
  res <- merge_dicts(unname(dicts), how = "ksdt", nthreads = nthreads)
  src <- res$source
  row <- mapply(function(k, i) rows[[k]][i], src$dictionary, src$index)
  res$source <- data.frame(chain = names(rows)[src$dictionary],
                           index = src$index)
  res$method <- sprintf("KSDT on %d chains, merged", length(rows))
  res$per_chain <- stats::setNames(dicts, names(rows))
  # the merged result reports the whole sample and the user's settings
  res$n_offered <- res$t <- nrow(x)
  res$evals <- res$evals + sum(vapply(dicts, function(d) d$evals, 0))
  res[names(st$settings)] <- st$settings
  label_ksdt(res, smp, row)
}

# The chain, iteration and constrained draws of a KSDT result's points
# (`rows`: their rows in the sample).
label_ksdt <- function(res, smp, rows) {
  lab <- sample_labels(smp, rows)
  res$chain <- lab$chain
  res$iteration <- lab$iteration
  res$draws <- lab$draws
  res
}

#' @rdname ksdt
#' @param dim Dimension of the states.
#' @return `ksdt_stream()`: a `kb_ksdt_stream` object (modified in place by
#'   `ksdt_push()`).
#' @export
ksdt_stream <- function(dim, budget = 0, min_size = "sqrt", min_size_coef = 1,
                        min_size_floor = 10, size = NULL, kernel = imq_kernel(),
                        standardize = TRUE, nthreads = NULL,
                        progress = NULL) {
  dim <- check_count(dim, "dim")
  f <- size_rule(size, min_size, min_size_coef, min_size_floor,
                 c(!missing(min_size), !missing(min_size_coef),
                   !missing(min_size_floor)))
  min_size <- f$min_size
  min_size_coef <- f$coef
  min_size_floor <- f$floor
  check_kernel(kernel)
  if (!is.character(kernel$precon)) {
    # a fixed preconditioner (a number or matrix) is checked against dim
    # now, not at the first push: after ksdt_sample()'s pilot chain, or
    # after every chain's pilot in ksdt_chains()
    resolve_kernel(kernel, matrix(0, 1L, dim))
  }
  st <- new.env(parent = emptyenv())
  st$dim <- dim
  st$budget_fun <- make_budget(budget)
  st$min_size_fun <- make_min_size(min_size, min_size_coef, min_size_floor)
  st$settings <- list(budget = budget, min_size = min_size,
                      min_size_coef = min_size_coef,
                      min_size_floor = min_size_floor)
  st$kernel <- kernel
  st$standardize <- check_standardize(standardize, dim)
  st$scale <- NULL
  st$rk <- NULL
  st$ptr <- NULL
  st$nthreads <- resolve_nthreads(nthreads)
  st$progress <- check_progress(progress)
  st$colnames <- NULL
  class(st) <- "kb_ksdt_stream"
  st
}

# Resolve the column scales (standardize = TRUE: those of the given rows)
# and the kernel (heuristics on the given rows, standardised) and create the
# C state.
ksdt_stream_resolve <- function(st, x) {
  if (!is.null(st$ptr)) return(invisible(st))
  if (is.character(st$kernel$precon) && st$kernel$precon != "id" &&
      nrow(x) < 2L) {
    stop_arg("x", sprintf(paste0("must have at least two rows in the first ",
                                 "push to resolve precon = \"%s\""),
                          st$kernel$precon))
  }
  if (isTRUE(st$standardize) && nrow(x) < 2L) {
    stop_arg("x", paste0("must have at least two rows in the first push to ",
                         "resolve the column scales of standardize = TRUE ",
                         "(or give the stream its scales: standardize = a ",
                         "vector, or FALSE)"))
  }
  scale <- standardize_scale(st$standardize, x)
  stream_attach(st, resolve_kernel(st$kernel, scale_points(x, scale)),
                colnames(x), scale)
}

# Give a stream its resolved kernel and column scales (NULL: none) and
# create its C state: the only place a stream's dictionary is made.
stream_attach <- function(st, rk, colnames = NULL, scale = NULL) {
  st$ptr <- .Call(C_kb_ksdt_new, rk, st$dim)
  st$rk <- rk
  st$scale <- scale
  st$colnames <- colnames
  invisible(st)
}

# Undo ksdt_stream_resolve() when the first push or run took nothing, so
# that a rejected first push does not fix the kernel on the rejected rows.
ksdt_stream_unresolve <- function(st) {
  if (!is.null(st$ptr) && stream_info(st)[["offered"]] == 0) {
    st$ptr <- NULL
    st$rk <- NULL
    st$scale <- NULL
    st$colnames <- NULL
  }
  invisible(st)
}

stream_info <- function(stream) {
  if (is.null(stream$ptr)) {
    return(c(t = 0, size = 0, ksd = NA_real_, offered = 0))
  }
  r <- .Call(C_kb_ksdt_info, stream$ptr)
  names(r) <- c("t", "size", "ksd", "offered")
  r
}

# Steps taken so far (0 before the first push).
stream_t <- function(stream) stream_info(stream)[["t"]]

# Run `expr` (a push or a sampler over the stream): a first run that fails
# or is interrupted before taking anything leaves the stream unresolved.
# With `announce` (the number of rows pushed), an interrupted push says how
# many rows were taken.
with_stream <- function(stream, expr, announce = NULL) {
  fresh <- is.null(stream$ptr)
  before <- stream_info(stream)[["offered"]]
  done <- FALSE
  on.exit(if (!done && fresh) ksdt_stream_unresolve(stream))
  withCallingHandlers(expr, interrupt = function(e) {
    if (is.null(announce)) return()
    taken <- stream_info(stream)[["offered"]] - before
    message(sprintf(paste0("ksdt_push() interrupted: %.0f of %.0f rows were ",
                           "taken; the stream has now taken %.0f rows ",
                           "(ksdt_result(stream)$n_offered): push x[-(1:%.0f), ] ",
                           "to resume"),
                    taken, announce, before + taken, taken))
  })
  done <- TRUE
  invisible(stream)
}

check_stream <- function(stream) {
  if (!inherits(stream, "kb_ksdt_stream") || !is.environment(stream)) {
    stop_arg("stream", "must be a KSDT stream from ksdt_stream()")
  }
  d <- stream$dim
  if (!is.numeric(d) || length(d) != 1L || is.na(d) || d < 1 || d != round(d) ||
      !is.function(stream$budget_fun) || !is.function(stream$min_size_fun) ||
      !inherits(stream$kernel, "kb_kernel")) {
    stop_arg("stream", "has been edited: its dimension, schedules or kernel ",
             "are not those of a stream from ksdt_stream()")
  }
  if (!is.null(stream$ptr) && .Call(C_kb_ksdt_dim, stream$ptr) != d) {
    stop_arg("stream", sprintf("has been edited: its dimension is %s but its states have %d",
                               format(d), .Call(C_kb_ksdt_dim, stream$ptr)))
  }
  stream
}

#' @rdname ksdt
#' @param stream A stream from `ksdt_stream()`.
#' @return `ksdt_push()`: the stream, invisibly. A push whose states or
#'   scores are invalid, or whose Stein kernel values \eqn{k_p(x_i, x_i)}
#'   overflow, is rejected as a whole, before anything changes (a rejected
#'   first push does not fix the kernel's preconditioner either). A Stein
#'   kernel value between a new row and the dictionary that overflows, or an
#'   interrupt (Ctrl-C), stops a push after the rows (blocks) before it were
#'   taken: the error or message says how many, and
#'   `ksdt_result(stream)$n_offered` counts the rows the stream has taken, so
#'   pushing the rest resumes the stream exactly. A closure or progress
#'   function cannot push to the stream it is being called from.
#' @export
ksdt_push <- function(stream, x, score, candidates = 1) {
  check_stream(stream)
  push_rows(stream, x, score, candidates, announce = TRUE)
  invisible(stream)
}

# The work of ksdt_push(); `announce`: say how many rows an interrupt left
# taken (for a stream the user holds); `reg`: the regularised candidate
# rule's terms, one per row of x (ksdt_reg()), or NULL.
push_rows <- function(stream, x, score, candidates = 1, announce = FALSE,
                      reg = NULL) {
  candidates <- check_count(candidates, "candidates")
  x <- as_points(x, "x", stream$dim)
  if (ncol(x) != stream$dim) {
    stop_arg("x", sprintf("must have %d columns (the stream's dimension); it has %d",
                          stream$dim, ncol(x)))
  }
  # everything that can fail comes before the stream changes, the cheap
  # checks before the score closure runs
  t0 <- stream_t(stream)
  nb <- (nrow(x) + candidates - 1L) %/% candidates
  t <- t0 + seq_len(nb)
  eps <- stream$budget_fun(t)
  fmin <- stream$min_size_fun(t)
  s <- resolve_score(score, x)
  offered <- stream_info(stream)[["offered"]]
  prog <- progress_reporter(offered + nrow(x), "KSDT: rows", stream$progress)
  on.exit(prog$done())
  # the moments of the rows taken (all of them, or those before an
  # interrupt or error), the reference of the dictionary's moment report
  on.exit(stream_add_moments(stream, x, offered), add = TRUE)
  with_stream(stream, {
    ksdt_stream_resolve(stream, x)
    .Call(C_kb_ksdt_push, stream$ptr,
          list(x, s, in_basis(scale_points(x, stream$scale), stream$rk),
               in_basis(scale_scores(s, stream$scale), stream$rk)),
          c(list(eps = as.double(eps), fmin = as.double(fmin),
                 candidates = candidates, nthreads = stream$nthreads,
                 progress = prog$callback(offered)), reg))
  }, if (announce) nrow(x))
  invisible(stream)
}

# Add the rows of x the stream took since it had `before` offered rows to
# its running moments.
stream_add_moments <- function(stream, x, before) {
  taken <- stream_info(stream)[["offered"]] - before
  if (taken > 0) {
    stream$moments <- moments_combine(
      stream$moments, sample_moments(x[seq_len(taken), , drop = FALSE]))
  }
  invisible(stream)
}

#' @rdname ksdt
#' @export
ksdt_result <- function(stream) {
  check_stream(stream)
  if (is.null(stream$ptr)) {
    stop_arg("stream", "is empty: push states with ksdt_push() first")
  }
  stream_result(stream)
}

# The kb_ksdt of a resolved stream's dictionary (in stream order) and trace,
# with its settings; named fields in `...` are added, or replace settings of
# the same name (NULL ones are left out).  Its moment report is against
# `reference` (moments.R), by default the rows pushed to the stream (FALSE:
# none), described by `against`.
stream_result <- function(stream, ..., class = NULL,
                          reference = stream$moments, against = NULL) {
  r <- .Call(C_kb_ksdt_result, stream$ptr)
  o <- order(r$index)
  pts <- r$points[o, , drop = FALSE]
  scr <- r$score[o, , drop = FALSE]
  colnames(pts) <- colnames(scr) <- stream$colnames
  fields <- c(list(removed = as.integer(r$removed), t = r$t,
                   n_offered = r$n_offered, evals = r$evals),
              stream$settings, if (!is.null(stream$scale))
                list(scale = stream$scale))
  extra <- list(...)
  extra <- extra[!vapply(extra, is.null, TRUE)]
  fields[names(extra)] <- extra
  if (isFALSE(reference)) reference <- NULL
  if (!is.null(reference)) {
    fields$moments <- moment_report(
      pts, NULL, reference,
      against %||% sprintf("the %.0f rows pushed", reference$n))
  }
  do.call(new_ksdt, c(list(points = pts, score = scr, index = r$index[o],
                           ksd = r$ksd, size = as.integer(r$size),
                           kernel = stream$rk),
                      fields, list(class = class)))
}

# The one constructor of a KSDT result (class kb_ksdt, with `class` before
# it): a dictionary (points and their scores, one row each, and each
# point's index in its stream), the per-step trace of the dictionary's KSD
# and size, the resolved kernel, and further named fields (t, n_offered,
# evals, the settings, method, source, sampler, ...).
new_ksdt <- function(points, score, index, ksd, size, kernel, ...,
                     class = NULL) {
  extra <- list(...)
  if (length(extra) && (is.null(names(extra)) || any(names(extra) == "") ||
                        anyDuplicated(names(extra)))) {
    stop(kb_error("new_ksdt: extra fields must have distinct names",
                  "kb_error_internal"))
  }
  structure(c(list(points = points, score = score, index = index, ksd = ksd,
                   size = size), extra,
              list(d = ncol(points), kernel = kernel)),
            class = c(class, "kb_ksdt"))
}

#' @export
print.kb_ksdt_stream <- function(x, ...) {
  if (is.null(x$ptr)) {
    cat(sprintf("KSDT stream, dimension %d: empty\n", x$dim))
  } else {
    r <- stream_info(x)
    cat(sprintf("KSDT stream, dimension %d: %.0f states seen, %.0f kept, KSD %s\n",
                x$dim, r[["offered"]], r[["size"]], format(r[["ksd"]], digits = 5)))
  }
  invisible(x)
}

describe_schedule <- function(x, what) {
  if (is.function(x)) "user function" else format(x)
}

#' @export
print.kb_ksdt <- function(x, ...) {
  check_result(x)
  seen <- x$n_offered %||% x$t
  cat(sprintf("%s: %d of %.0f states kept%s, dimension %d\n",
              x$method %||% "KSDT", length(x$index), seen,
              if (seen != x$t) sprintf(" (%.0f steps)", x$t) else "", x$d))
  if (!is.null(x$sampler)) {
    cand <- if (x$candidates <= 1L) "" else if (is.null(x$start)) {
      sprintf("; the best of each %d consecutive states", x$candidates)
    } else {
      sprintf("; %d candidates per step, start \"%s\"", x$candidates, x$start)
    }
    cat(sprintf("  sampler: %s, step %s, acceptance rate %.3f%s\n", x$sampler,
                format(x$step, digits = 4), x$accept_rate, cand))
  }
  cat("  kernel:", describe_ksd_kernel(x$kernel, x[["scale"]]), "\n")
  if (!inherits(x, "kb_spmcmc")) {
    ms <- if (is.function(x$min_size)) "user function" else
      sprintf("%s (coef %s, floor %s)", x$min_size, format(x$min_size_coef),
              format(x$min_size_floor))
    cat(sprintf("  budget: %s; minimum size: %s\n",
                describe_schedule(x$budget), ms))
  }
  cat(sprintf(paste0("  KSD of the dictionary: %s (this kernel; ksd(x) ",
                     "recomputes it); %.0f kernel evaluations\n"),
              format(utils::tail(x$ksd, 1L), digits = 6), x$evals))
  w <- x[["weights"]]
  if (!is.null(w)) {
    cat(sprintf("  weights: Kish effective size %s of %d\n",
                format(kish_size(w), digits = 4), length(x$index)))
  }
  moments_line(x[["moments"]])
  invisible(x)
}

#' Summaries of a KSDT result
#'
#' The run's settings, the KSD of the dictionary along the run and the
#' dictionary's effect on the moments (see [compression_moments()]): per
#' coordinate its mean and sd beside the sample's, the mean shift in sample
#' sds and the sd ratio. With `weights` (for instance from
#' `ksd_weights(object)`), the weighted dictionary: Kish's effective sample
#' size and weighted means and sds.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param object A `kb_ksdt` object.
#' @param weights Weights on the dictionary's points (one per point,
#'   non-negative; normalised), or `NULL` (default: the result's own
#'   weights, if any).
#' @param ... Ignored.
#' @return An object of class `summary.kb_ksdt`, with a print method.
#' @export
summary.kb_ksdt <- function(object, weights = NULL, ...) {
  check_result(object, "object")
  mom <- object[["moments"]]
  if (!is.null(weights)) {
    weights <- check_result_weights(weights, length(object$index))
    mom <- moment_reweight(mom, object$points, weights)
  }
  w <- weights %||% object[["weights"]]
  T <- length(object$ksd)
  at <- unique(pmin(T, round(10^seq(0, log10(max(T, 1)), length.out = 6))))
  structure(list(method = object$method %||% "KSDT", t = object$t,
                 d = object$d, kept = length(object$index),
                 at = at, ksd = object$ksd[at], size = object$size[at],
                 removed = sum(object$removed),
                 kernel = describe_ksd_kernel(object$kernel, object[["scale"]]),
                 kish = if (!is.null(w)) kish_size(w),
                 moments = mom,
                 oldest = if (length(object$index)) min(object$index) else NA,
                 span = if (!is.null(object[["chain"]])) describe_span(object),
                 evals = object$evals),
            class = "summary.kb_ksdt")
}

#' @export
print.summary.kb_ksdt <- function(x, ...) {
  cat(sprintf("%s: %.0f states, %d kept, %.0f removed, d = %d\n", x$method,
              x$t, x$kept, x$removed, x$d))
  if (!is.null(x$kish)) {
    cat(sprintf("  weighted: Kish effective size %s\n",
                format(x$kish, digits = 4)))
  }
  cat("  kernel:", x$kernel, "\n")
  cat("  KSD of the dictionary at step t (this kernel):\n")
  print(data.frame(t = x$at, size = x$size, ksd = signif(x$ksd, 5)),
        row.names = FALSE)
  if (!is.null(x$span)) {
    cat(sprintf("  %s; kernel evaluations: %.0f\n", x$span, x$evals))
  } else {
    cat(sprintf("  oldest retained state: %s; kernel evaluations: %.0f\n",
                format(x$oldest), x$evals))
  }
  if (!is.null(x$moments)) print(x$moments)
  invisible(x)
}

#' Plot a KSDT run
#'
#' Three panels: the KSD of the dictionary against the step (log-log), the
#' dictionary size against the step, and the retained points over the
#' first two coordinates.
#'
#' A merged dictionary ([c()][c.kb_ksdt], [merge()][c.kb_ksdt], [ksdt()] on
#' several chains, [ksdt_chains()]) is shown through the streams it was
#' merged from, one line per stream (chain, or input dictionary), not the
#' merging pass (whose steps run over the union of the dictionaries, an
#' order of no meaning): 1, each stream's KSD per step with the merged
#' dictionary's final KSD as a dashed line and, as a circle at the end of
#' each line, that stream's final dictionary measured under the merged
#' dictionary's kernel (the dashed line's scale; streams standardised on
#' their own pilots, as in [ksdt_chains()], trace their KSD on their own
#' scales); 2, each stream's size per step with the merged size dashed; 3,
#' the merged points coloured by the stream they came from (over the
#' streams' own dictionaries, in light colours, where the result keeps
#' them).
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_ksdt` or `kb_ksdt_chains` object.
#' @param which Panels to draw: 1, 2, 3 or several.
#' @param ... Ignored, except by the first panel of a merged dictionary
#'   (graphical parameters).
#' @return `x`, invisibly.
#' @export
plot.kb_ksdt <- function(x, which = 1:3, ...) {
  check_result(x)
  if (!is.null(x[["streams"]])) {
    plot_streams(x[["streams"]], x, which, dicts = x[["per_chain"]], ...)
    return(invisible(x))
  }
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
                     xlab = "stream index", ylab = point_names(p)[1L],
                     main = "retained points")
    }
  }
  invisible(x)
}
