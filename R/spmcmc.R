# Samplers with KSDT inside: ksdt_sample() (one chain, each block of
# `candidates` states offering its best to KSDT) and Stein Point MCMC
# (sp_mcmc(): fresh moves from a chosen start, no pruning).  The chain runs
# in C (src/spmcmc.c) and feeds the stream of R/ksdt.R.

start_rules <- c("last", "rand", "infl")

# The settings of a sampler run over a stream, as one list `run`: sampler
# ("mala" or "rwm"), step (NULL: adapted by a pilot), candidates per step,
# start rule and restart (SP-MCMC's fresh moves), warmup, target_accept,
# fmin (a constant minimum size; NULL: the stream's schedule), regularize
# (check_regularize()'s value: the regularised candidate rule), method (the
# result's name), and for the result: fields (replacing settings of the
# stream) and class.
sampler_run <- function(run) {
  defaults <- list(step = NULL, candidates = 1, start = "last",
                   restart = FALSE, warmup = NULL, target_accept = NULL,
                   fmin = NULL, method = "KSDT", fields = list(),
                   class = NULL, regularize = NULL)
  defaults[names(run)] <- run
  defaults
}

# Every argument of a sampler run checked (and the schedules evaluated)
# before any work: ksdt_chains() calls this once before starting chains.
check_ksdt_sampler <- function(target, x0, n_iter, stream, run) {
  run <- sampler_run(run)
  sampler <- run$sampler
  fmin <- run$fmin
  step <- run$step
  warmup <- run$warmup
  target_accept <- run$target_accept
  check_target(target)
  x0 <- check_x0(x0, target)
  n_iter <- check_count(n_iter, "n_iter")
  candidates <- check_count(run$candidates, "candidates")
  if (!is.null(run$regularize) && candidates < 2L) {
    stop_arg("regularize", "changes the choice among candidates: it needs ",
             "candidates > 1")
  }
  if (as.double(n_iter) * candidates > .Machine$integer.max) {
    stop_arg("n_iter", "times the number of candidates must be below 2^31")
  }
  if (is.null(target_accept)) target_accept <- if (sampler == "mala") 0.574 else 0.234
  target_accept <- check_number(target_accept, "target_accept", lower = 0,
                                upper = 1, lower_open = TRUE,
                                upper_open = TRUE)
  if (!is.null(step)) step <- check_step(step)
  warmup <- if (is.null(warmup)) 1000L else check_count(warmup, "warmup", 2L)
  heuristic <- (is.character(stream$kernel$precon) &&
                  stream$kernel$precon != "id") || isTRUE(stream$standardize)
  t <- stream_t(stream) + seq_len(n_iter)
  eps <- stream$budget_fun(t)
  fm <- if (is.null(fmin)) stream$min_size_fun(t) else rep(fmin, n_iter)
  list(x0 = x0, n_iter = n_iter, candidates = candidates, sampler = sampler,
       target_accept = target_accept, step = step, warmup = warmup,
       pilot = is.null(step) || heuristic, eps = eps, fmin = as.double(fm))
}

# Shared driver of ksdt_sample() and sp_mcmc(): an optional pilot run
# (step-size adaptation, preconditioner heuristics), then the C loop.
run_ksdt_sampler <- function(target, x0, n_iter, stream, run) {
  run <- sampler_run(run)
  a <- check_ksdt_sampler(target, x0, n_iter, stream, run)
  start <- run$start
  restart <- run$restart
  x0 <- a$x0
  step <- a$step
  pilot <- NULL
  if (a$pilot) {
    # pilot chain: adapts the step (when not given) and supplies the sample
    # that the column scales (standardize = TRUE) and preconditioner
    # heuristics are resolved on; it is not returned
    pilot <- run_mcmc(a$sampler, target, x0, a$warmup,
                      list(step = step, warmup = a$warmup,
                           target_accept = a$target_accept, scores = FALSE,
                           progress = FALSE))
    step <- pilot$step
    x0 <- pilot$x[a$warmup, ]
  }
  t0 <- stream_t(stream)
  prog <- progress_reporter(t0 + a$n_iter, paste0(run$method, ": steps"),
                            stream$progress)
  on.exit(prog$done())
  res <- NULL
  with_stream(stream, {
    ksdt_stream_resolve(stream, if (is.null(pilot)) matrix(x0, 1L) else pilot$x)
    res <- .Call(C_kb_ksdt_sample, stream$ptr, closure_env(target),
                 c(list(sampler = a$sampler, vectorized = target$vectorized,
                        x0 = as.double(x0), n_iter = a$n_iter, step = step,
                        candidates = a$candidates, start = start,
                        restart = restart, eps = as.double(a$eps),
                        fmin = a$fmin, Q = stream$rk$Q,
                        scale = stream$scale,
                        nthreads = stream$nthreads,
                        progress = prog$callback(t0)),
                   reg_weight(run$regularize)))
  })
  # the sample the dictionary is judged against: every state the chain
  # visited (ksdt_sample()), or for Stein Point MCMC, whose states are moves
  # from its own points and no sample of the target, the pilot chain
  ref <- if (!restart) {
    list(reference = chain_moments(res),
         against = sprintf("the chain's %.0f states", res$n))
  } else if (!is.null(pilot)) {
    list(reference = sample_moments(pilot$x),
         against = sprintf("the pilot chain's %d states", nrow(pilot$x)))
  }
  ksdt_reg_label(
    do.call(stream_result, c(list(stream, sampler = toupper(run$sampler),
                                  step = res$step,
                                  accept_rate = res$accept_rate,
                                  candidates = a$candidates,
                                  start = if (restart) start,
                                  method = run$method),
                             run$fields,
                             list(class = run$class,
                                  reference = ref$reference %||% FALSE,
                                  against = ref$against))),
    reg_weight(run$regularize))
}

# The moments of the states a sampler visited (C's running sums; none when
# they overflowed).
chain_moments <- function(res) {
  r <- from_sums(res$n, res$mean, res$m2, res$m3, res$m4, 1)
  if (!all_finite(unlist(r[c("mean", "sd")]))) FALSE else r
}

#' Sampling with KSDT inside, and Stein Point MCMC
#'
#' `ksdt_sample()` runs an MCMC sampler ([mala()] or [rwm()]) on a target and
#' thins its states online with KSDT (see [ksdt()]): the chain's states are
#' never all stored, only the dictionary. With `candidates = m > 1`, the
#' chain runs `m` iterations per KSDT step and, of each block of `m`
#' consecutive states, offers KSDT the one that minimises \eqn{k_p(y, y) +
#' 2\sum_{x \in D} k_p(y, x)} against the current dictionary \eqn{D} (the
#' Stein Point MCMC rule, as in the KSDT paper's "SPMCMC" variants); the
#' chain itself is never restarted, so the result equals
#' `ksdt(chain, candidates = m)` on the same chain.
#'
#' `sp_mcmc()` is Stein Point MCMC (Chen et al., 2019): each step runs
#' `candidates` fresh MCMC moves from a start chosen by `start`, adds the candidate that
#' minimises the same criterion, continues from it, and never removes a
#' point, so that after `n_iter` steps the point set has `n_iter` points.
#' Start rules: `"last"` continues from the last added point, `"rand"` from
#' a uniformly random point of the set, `"infl"` from the point of least
#' influence, \eqn{\arg\min_i \sum_j k_p(x_i, x_j) + \sum_j k_p(x_j, x_i)
#' - k_p(x_i, x_i)} (as in the authors' code; the oldest point on ties).
#'
#' Both offer the regularised candidate rule of [ksdt()] (`regularize`;
#' Bénard, Staber and Da Veiga, 2023; see 'Regularised candidate rule'
#' there), with `candidates` \eqn{> 1}: each candidate's \eqn{\log p} is
#' the sampler's, and its Laplacian term comes from central differences of
#' the target's score, \eqn{2d} more score evaluations per candidate. For
#' `sp_mcmc()`, which never prunes, \eqn{t = |D| + 1} is the step: the
#' rule is then the paper's greedy step over MCMC candidates (and `TRUE`
#' weighs \eqn{\log p} by 1 where the paper's \eqn{\lambda = 1/m} would
#' give \eqn{t/m}). `ksdt_sample(regularize = )` equals `ksdt(chain$x,
#' target, candidates = m, regularize = )` on the same chain.
#'
#' When `step_size` is `NULL`, `standardize = TRUE` (the default), or the
#' kernel's preconditioner is a heuristic, a pilot chain of `warmup`
#' iterations (default 1000) is run first: it adapts the step size (when
#' not given) and is the sample the column scales of the standardisation
#' (the mean absolute deviation of each coordinate over the pilot's states)
#' and the heuristic are resolved on; it is discarded and the run starts
#' from its last state. The scales are then fixed for the whole run (the
#' result's `scale`); give them as numbers (`standardize = ` a vector) to
#' run without a pilot when `step_size` is given.
#'
#' @inheritParams ksdt
#' @inheritParams rwm
#' @param n_iter Number of KSDT (or SP-MCMC) steps; the chain runs
#'   `n_iter * candidates` iterations.
#' @param sampler `"mala"` (default) or `"rwm"`.
#' @param candidates Number of candidates per step: for `ksdt_sample()`,
#'   consecutive chain states of which the best is offered (1: plain KSDT
#'   on the chain); for `sp_mcmc()`, fresh MCMC moves of which the best is
#'   added.
#' @param start Start rule of `sp_mcmc()`'s moves.
#' @param regularize `FALSE` (default), `TRUE` or a positive
#'   \eqn{\lambda}: the regularised candidate rule (needs `candidates`
#'   \eqn{> 1}); see Details and [ksdt()].
#' @param target_accept Acceptance rate for the pilot's adaptation; default
#'   0.574 (MALA) or 0.234 (RWM).
#' @return A `kb_ksdt` object (see [ksdt()]) with, in addition, `sampler`,
#'   `step` (the sampler's final step size), `accept_rate`, `candidates` and (for `sp_mcmc()`) `start`;
#'   `index` counts chain iterations for `ksdt_sample()` and steps for `sp_mcmc()`. For `sp_mcmc()` the class is
#'   `c("kb_spmcmc", "kb_ksdt")`.
#' @references Chen, W. Y., Barp, A., Briol, F.-X., Gorham, J., Girolami,
#'   M., Mackey, L. and Oates, C. J. (2019). Stein point Markov chain Monte
#'   Carlo. *ICML*.
#'
#'   Hawkins, C., Koppel, A. and Zhang, Z. Online, informative MCMC thinning
#'   with kernelized Stein discrepancy.
#' @examples
#' set.seed(1)
#' tg <- gaussian_mixture_target(rbind(c(-2, 0), c(2, 0)))
#' fit <- ksdt_sample(tg, x0 = c(0, 0), n_iter = 2000, step_size = 1)
#' fit
#' sp <- sp_mcmc(tg, x0 = c(0, 0), n_iter = 100, candidates = 5, step_size = 1)
#' sp
#' @export
ksdt_sample <- function(target, x0, n_iter, sampler = c("mala", "rwm"),
                        step_size = NULL, candidates = 1,
                        budget = 0, min_size = "sqrt", min_size_coef = 1,
                        min_size_floor = 10, size = NULL, kernel = imq_kernel(),
                        warmup = NULL, target_accept = NULL,
                        regularize = FALSE, standardize = TRUE,
                        nthreads = NULL, progress = NULL, step) {
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "ksdt_sample", step,
                                missing(step_size))
  }
  f <- size_rule(size, min_size, min_size_coef, min_size_floor,
                 c(!missing(min_size), !missing(min_size_coef),
                   !missing(min_size_floor)))
  a <- ksdt_sample_setup(list(
    target = target, sampler = sampler, step = step_size,
    candidates = candidates, budget = budget, min_size = f$min_size,
    min_size_coef = f$coef, min_size_floor = f$floor, kernel = kernel,
    warmup = warmup, target_accept = target_accept, nthreads = nthreads,
    progress = progress, regularize = regularize, standardize = standardize))
  warn_distortion(run_ksdt_sampler(target, x0, n_iter, a$stream, a$run),
                  "ksdt_sample")
}

# From ksdt_sample()'s arguments but x0 and n_iter (a named list `a`): a new
# stream and the run's settings (see sampler_run()), the sampler, the target
# and the stream's arguments checked.
ksdt_sample_setup <- function(a) {
  sampler <- check_choice(a$sampler, c("mala", "rwm"), "sampler")
  lambda <- check_regularize(a$regularize %||% FALSE)
  check_target(a$target)
  st <- ksdt_stream(a$target$dim, budget = a$budget, min_size = a$min_size,
                    min_size_coef = a$min_size_coef,
                    min_size_floor = a$min_size_floor, kernel = a$kernel,
                    nthreads = a$nthreads, progress = a$progress,
                    standardize = a$standardize %||% TRUE)
  list(stream = st,
       run = list(sampler = sampler, step = a$step, candidates = a$candidates,
                  warmup = a$warmup, target_accept = a$target_accept,
                  regularize = lambda))
}

# ksdt_sample()'s checks alone, for a named list of its arguments (the
# others take its defaults): ksdt_chains() runs them before any chain.
ksdt_sample_check <- function(args) {
  f <- formals(ksdt_sample)
  given <- !vapply(f, identical, TRUE, quote(expr = ))
  a <- lapply(f[given], eval, envir = environment(ksdt_sample))
  a[names(args)] <- args
  if ("step" %in% names(args)) {
    a$step_size <- deprecated_arg("step", "step_size", "ksdt_sample",
                                  args$step, !"step_size" %in% names(args))
  }
  f <- size_rule(a$size, a$min_size, a$min_size_coef, a$min_size_floor,
                 c("min_size", "min_size_coef", "min_size_floor") %in%
                   names(args))
  a$step <- a$step_size
  a$min_size <- f$min_size
  a$min_size_coef <- f$coef
  a$min_size_floor <- f$floor
  s <- ksdt_sample_setup(a)
  check_ksdt_sampler(a$target, a$x0, a$n_iter, s$stream, s$run)
  invisible(TRUE)
}

#' @rdname ksdt_sample
#' @param m Deprecated name of `candidates` in `sp_mcmc()`.
#' @param step Deprecated name of `step_size`.
#' @export
sp_mcmc <- function(target, x0, n_iter, candidates = 10,
                    sampler = c("mala", "rwm"),
                    start = c("last", "rand", "infl"), kernel = imq_kernel(),
                    step_size = NULL, warmup = NULL, target_accept = NULL,
                    regularize = FALSE, standardize = TRUE,
                    nthreads = NULL, progress = NULL, m, step) {
  if (!missing(m)) {
    candidates <- deprecated_arg("m", "candidates", "sp_mcmc", m,
                                 missing(candidates))
  }
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "sp_mcmc", step,
                                missing(step_size))
  }
  sampler <- check_choice(sampler, c("mala", "rwm"), "sampler")
  start <- check_choice(start, start_rules, "start")
  lambda <- check_regularize(regularize)
  check_target(target)
  m <- check_count(candidates, "candidates")
  st <- ksdt_stream(target$dim, kernel = kernel, nthreads = nthreads,
                    progress = progress, standardize = standardize)
  res <- run_ksdt_sampler(target, x0, n_iter, st, list(
    sampler = sampler, step = step_size, candidates = m, start = start,
    restart = TRUE, warmup = warmup, target_accept = target_accept,
    fmin = Inf, regularize = lambda, method = "Stein Point MCMC",
    fields = list(budget = NA, min_size = "none (no pruning)"),
    class = "kb_spmcmc"))
  warn_distortion(res, "sp_mcmc")
}
