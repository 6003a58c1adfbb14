# Particle flows (Korba, "Sampling through optimization of divergences"):
# SVGD, KSD descent, MMD and DrMMD flows, MIED.  The iteration loops are
# here; the O(n^2 d) interaction terms are in src/flows.c.

# ---- shared pieces -----------------------------------------------------------

# Particles or a target sample (as_points(); d: their dimension when the
# other set of points fixes it), at least two, on a usable scale.
flow_points <- function(x, arg, d = NULL) {
  x <- as_points(x, arg, d)
  if (nrow(x) < 2L) stop_arg(arg, "must hold at least 2 particles (rows)")
  check_flow_scale(x, arg)
  x
}

# Squared distances between the points must neither overflow nor all
# underflow: coordinates up to flow_scale_limit(d), spread above 1e-150.
flow_scale_limit <- function(d) sqrt(.Machine$double.xmax / (4 * d)) / 16

check_flow_scale <- function(x, arg) {
  big <- max(abs(x))
  if (big > flow_scale_limit(ncol(x))) {
    stop_arg(arg, sprintf(paste0("has coordinates up to %s: squared distances ",
                                 "between particles would overflow; rescale ",
                                 "the problem"), format(big, digits = 3)))
  }
  spread <- max(apply(x, 2L, function(v) diff(range(v))))
  if (spread > 0 && spread < 1e-150) {
    stop_arg(arg, sprintf(paste0("spans only %s: squared distances between ",
                                 "particles underflow; rescale the problem"),
                          format(spread, digits = 3)))
  }
}

# Scores at the particles: a kb_target or a function of one point.
flow_score_fun <- function(score, d, arg = "score") {
  if (missing(score) || is.null(score)) {
    stop_arg(arg, "is missing: give a function of one point or a kb_target")
  }
  if (inherits(score, "kb_target")) {
    if (score$dim != d) {
      stop_arg(arg, sprintf("is a target of dimension %d; the particles have %d",
                            score$dim, d))
    }
    return(function(x) target_score(score, x))
  }
  if (!is.function(score)) {
    stop_arg(arg, "must be a function of one point (returning its gradient) ",
             "or a kb_target")
  }
  function(x) eval_score_rows(score, x)
}

# A kernel for the flows: resolved once on ref, and isotropic (the C layer
# uses L = lam I without a rotation).
flow_kernel <- function(kernel, ref, ref_arg = "x0") {
  if (is_user_kernel(kernel)) return(kernel)
  rk <- tryCatch(resolve_kernel(kernel, ref), kb_error_arg = function(e) {
    # a median heuristic that fails is the data's fault, not 'precon''s
    if (!identical(e$arg, "precon") || !is.character(kernel$precon)) stop(e)
    stop_arg(ref_arg, sprintf(paste0("sets the kernel bandwidth by the median ",
                                     "heuristic, which fails on it (%s); give ",
                                     "a kernel with a fixed bandwidth"),
                              sub("; x has", "; it has",
                                  sub("^'precon' = \"[a-z]+\" ", "", conditionMessage(e)))))
  })
  if (!isTRUE(rk$iso)) {
    stop_arg("kernel", "must be isotropic for particle flows (precon \"id\", ",
             "\"med\", \"sclmed\" or a number)")
  }
  # the interaction terms use lam^3 (KSD descent) and lam |x - y|^2
  lam <- rk$lambda[1L]
  if (!(lam >= 1e-100 && lam <= 1e100)) {
    h <- 1 / sqrt(lam)
    if (is.character(kernel$precon) && kernel$precon != "id") {
      stop_arg(ref_arg, sprintf(paste0("sets the kernel bandwidth %s by the ",
                                       "median heuristic: its scale is out of ",
                                       "range; rescale the problem"),
                                format(h, digits = 3)))
    }
    stop_arg("kernel", sprintf(paste0("has bandwidth %s: flows need a ",
                                      "bandwidth between 1e-50 and 1e50 ",
                                      "(rescale the problem)"),
                               format(h, digits = 3)))
  }
  rk
}

check_keep <- function(keep_every) check_count(keep_every, "keep_every", min = 0L)

# Collects iterates every keep_every iterations (0 = none), the start, and
# whatever the caller forces (the last iterate).
tracer <- function(x, keep_every) {
  if (keep_every == 0L) {
    return(list(add = function(x, t, force = FALSE) NULL,
                result = function() NULL, iters = function() NULL))
  }
  xs <- list(x)
  its <- 0L
  list(add = function(x, t, force = FALSE) {
         if ((force || t %% keep_every == 0L) && its[length(its)] != t) {
           xs[[length(xs) + 1L]] <<- x
           its <<- c(its, as.integer(t))
         }
       },
       result = function() array(unlist(xs, use.names = FALSE),
                                 c(dim(x), length(xs))),
       iters = function() its)
}

flow_stop_nonfinite <- function(t) {
  stop(kb_error(sprintf(paste0("non-finite particle positions at iteration ",
                               "%d: the flow diverged; try a smaller 'step_size'"),
                        t), "kb_error_numeric", "step_size"))
}

# The update x -> xn = x + (step) dir at iteration t: a non-finite
# direction is the kernel's or the data's fault (what describes them), a
# non-finite or absurdly far move is the step's (more than 1e6 times the
# particles' scale, at least 1, in one iteration).
flow_move <- function(x, xn, dir, t, what, step_label = "'step_size'") {
  if (!all(is.finite(dir))) {
    stop_numeric(sprintf(paste0("the %s is not finite at iteration %d (%s): ",
                                "the kernel terms overflow at the scale of ",
                                "the particles and the target; rescale the ",
                                "problem"), what$name, t, what$detail()))
  }
  if (!all(is.finite(xn))) {
    stop(kb_error(sprintf(paste0("non-finite particle positions at iteration ",
                                 "%d: the flow diverged; %s is too large"),
                          t, step_label), "kb_error_numeric", "step_size"))
  }
  mv <- max(abs(xn - x))
  ref <- max(1, abs(x))
  if (mv > 1e6 * ref) {
    stop(kb_error(sprintf(paste0("%s is too large: at iteration %d a particle ",
                                 "moved by %s, more than 1e6 times the ",
                                 "particles' scale (%s)"), step_label, t,
                          format(mv, digits = 3), format(ref, digits = 3)),
                  "kb_error_numeric", "step_size"))
  }
  big <- max(abs(xn))
  if (big > flow_scale_limit(ncol(xn))) {
    stop(kb_error(sprintf(paste0("the particles reached coordinates of %s at ",
                                 "iteration %d, where squared distances ",
                                 "overflow: the flow diverged; %s is too large"),
                          format(big, digits = 3), t, step_label),
                  "kb_error_numeric", "step_size"))
  }
  xn
}

# Adaptive step rules on a direction g (ascent or descent is the caller's):
# AdaGrad with momentum as in the reference SVGD code, plain, or Adam.
make_optimizer <- function(type, alpha = 0.9) {
  hist <- NULL
  m <- v <- NULL
  switch(type,
    adagrad = function(g, t) {
      hist <<- if (t == 1L) g^2 else alpha * hist + (1 - alpha) * g^2
      g / (1e-6 + sqrt(hist))
    },
    sgd = function(g, t) g,
    adam = function(g, t) {
      if (t == 1L) m <<- v <<- 0 * g
      m <<- 0.9 * m + 0.1 * g
      v <<- 0.999 * v + 0.001 * g^2
      (m / (1 - 0.9^t)) / (sqrt(v / (1 - 0.999^t)) + 1e-8)
    })
}

# ---- convergence rule ---------------------------------------------------------

# The particles' moments settle: the flows' stopping rule. After every
# iteration the monitor records each coordinate's mean and sd; at the end
# of each window of `flow_window` iterations it averages them over the
# window (which smooths the jitter of adaptive steps) and compares with the
# previous window's averages. The rule is met when every change, divided by
# that coordinate's sd, is below `tol`. tol = 0: no rule (all n_iter run).
flow_window <- 50L

check_tol <- function(tol) check_number(tol, "tol", lower = 0)

flow_monitor <- function(tol, n_iter) {
  if (tol == 0) {
    return(list(settled = function(x, t) FALSE,
                status = function(t) list(converged = NA, stop_iter = t,
                                          tol = tol, change = NA_real_)))
  }
  acc <- NULL
  prev <- NULL
  change <- NA_real_
  met <- FALSE
  list(settled = function(x, t) {
         m <- c(colMeans(x), sqrt(pmax(colMeans(x^2) - colMeans(x)^2, 0)))
         acc <<- if (is.null(acc)) m else acc + m
         if (t %% flow_window != 0L) return(FALSE)
         cur <- acc / flow_window
         acc <<- NULL
         if (!is.null(prev)) {
           d <- length(cur) / 2L
           sc <- cur[d + seq_len(d)]
           sc[!(sc > 0)] <- 1
           change <<- max(abs(cur - prev) / c(sc, sc))
           met <<- is.finite(change) && change < tol
         }
         prev <<- cur
         met
       },
       status = function(t) list(converged = met, stop_iter = t, tol = tol,
                                 change = change))
}

# The one constructor of a flow's result (class kb_particles): the final
# particles, the trace, the objective per iteration and its name, the
# method and the number of iterations, then named fields in `...`:
# settings, target, y (NULL when the flow has none), convergence (the
# flow_monitor()'s status, or L-BFGS-B's), n_iter_max (the cap) and any
# more.
new_particles <- function(x, tr, objective, objective_name, method, n_iter,
                          ...) {
  if (!is.null(dimnames(x)) && all(vapply(dimnames(x), is.null, TRUE))) {
    dimnames(x) <- NULL
  }
  fields <- list(settings = NULL, target = NULL, y = NULL, convergence = NULL,
                 n_iter_max = n_iter)
  extra <- list(...)
  fields[names(extra)] <- extra
  structure(c(list(x = x, trace = tr$result(), trace_iter = tr$iters(),
                   objective = objective, objective_name = objective_name,
                   method = method, n_iter = n_iter), fields),
            class = "kb_particles")
}

# ---- SVGD --------------------------------------------------------------------

#' Stein variational gradient descent
#'
#' Moves a set of particles towards a target given by its score (Liu and
#' Wang, 2016). Each iteration computes, at the current particles
#' \eqn{x_1, \dots, x_n} with scores \eqn{s_j}, the direction
#' \deqn{\phi(x_i) = \frac{1}{n} \sum_j \left[k(x_j, x_i) s_j + \nabla_{x_j}
#' k(x_j, x_i)\right]}{phi(x_i) = (1/n) sum_j [k(x_j, x_i) s_j + grad_{x_j}
#' k(x_j, x_i)]}
#' with the Gaussian kernel \eqn{k(x, y) = \exp(-|x - y|^2 / (2 h^2))}, and
#' moves the particles along it.
#'
#' The defaults follow the original algorithm: the bandwidth
#' \eqn{h^2 = 0.5\, \mathrm{med} / \log(n + 1)}, where med is the median of
#' all \eqn{n^2} entries of the matrix of squared distances (its zero
#' diagonal included), recomputed every iteration; and AdaGrad with
#' momentum: \eqn{H = \phi^2} at the first iteration, then \eqn{H \leftarrow
#' \alpha H + (1 - \alpha) \phi^2}, and \eqn{x \leftarrow x + \epsilon\,
#' \phi / (10^{-6} + \sqrt{H})}, elementwise (the reference code's step
#' \eqn{\epsilon} is \eqn{10^{-3}}; the default here is 0.05, see 'Stopping
#' and defaults'). `optimizer = "sgd"` uses
#' \eqn{x \leftarrow x + \epsilon \phi}; `"adam"` the Adam rule (0.9,
#' 0.999, \eqn{10^{-8}}).
#'
#' The objective recorded at each iteration is the squared kernel Stein
#' discrepancy (V-statistic) of the particles for the same Gaussian kernel;
#' it comes out of the terms the update needs, at almost no cost.
#'
#' Nothing of size \eqn{n^2} is kept, with either bandwidth: the median is
#' selected exactly (the same number a full sort would give) in passes that
#' recompute the pair distances, count them against a bracket sampled from
#' 16384 pairs and keep only the few inside it (a histogram narrows the
#' bracket when they are many), and each iteration's direction recomputes
#' the distances in tiles. Memory is \eqn{O(n d)} plus at most about 8 MB a
#' thread. The number of particles is limited by R's integer row count and
#' by time: an iteration costs \eqn{O(n^2 d)}; measured on one thread at
#' \eqn{n = 10^5}, \eqn{d = 2}: about a minute (57 s of CPU time, 16 s of
#' it the median).
#' Work that would need more memory than the option `kernbayes.max_memory`
#' (bytes, default 16 GiB) stops before allocating anything. Every flow can be
#' interrupted (Ctrl-C) within a fraction of a second; an interrupted call
#' returns nothing.
#'
#' @param x0 Initial particles: an `n x d` matrix (a vector is `n`
#'   particles in \eqn{d = 1}; see 'Points and samples' in [kernbayes-package]), \eqn{n \ge 2};
#'   or a Stan fit (`stanfit`, `brmsfit`): the particles start at its
#'   unconstrained draws, the target is the fit's ([stan_target()]) unless
#'   one is given, and the result also has `draws`, the final particles as
#'   constrained draws ([constrain_draws()]).
#' @param target The target: a [kb_target()], or (the flows that use only
#'   the score, `svgd()` and `ksd_descent()`) a function of one point
#'   returning the gradient of the log density; may be left out when `x0`
#'   is a Stan fit. (`mied()` uses the log density too, so it needs a
#'   `kb_target`.)
#' @param score Deprecated name of `target` (`svgd()`, `ksd_descent()`; a
#'   message once per session).
#' @section Stopping and defaults: Every flow stops when the particles'
#'   moments settle, and `n_iter` is a cap. After each iteration the flow
#'   records each coordinate's mean and sd; at the end of every window of
#'   50 iterations it averages them over the window (smoothing the jitter
#'   of adaptive steps) and compares the averages with those of the
#'   previous window: the rule is met when every change, divided by that
#'   coordinate's sd, is below `tol` (default 0.01: one hundredth of an sd
#'   in 50 iterations). The result's `convergence` records whether it was
#'   met (`converged`), at which iteration (`stop_iter`) and the last
#'   change; `print()` says so ("stopped at iteration k: moments settled" or
#'   "reached n_iter = N without settling: increase n_iter"). `tol = 0`
#'   runs all `n_iter` iterations (exactly the iterates of a fixed-length
#'   run). A slowly creeping flow can meet the rule before it arrives: a
#'   small `tol` guards against that.
#'
#'   SVGD's default step 0.05 (with AdaGrad, which moves each coordinate by
#'   about the step per iteration) replaces the reference code's 0.001,
#'   with which 1000 iterations move a particle by about one unit. Measured
#'   over seeds 1 to 10, 200 particles from \eqn{N(0, I)}, defaults only:
#'   on a Gaussian with sds 1 and 3 (correlation 0.8) the particles' sds
#'   end at 0.99 and 0.99 of the target's (0.74 and 0.56 with the old
#'   defaults), stopping after 225 iterations on average; on the banana
#'   \eqn{x_1 \sim N(0, 1)}, \eqn{x_2 | x_1 \sim N(x_1^2 - 1, 1)} (sds 1
#'   and \eqn{\sqrt 3 = 1.73}) at 0.98 and 0.92 (old: 0.90 and 0.76)
#'   after 220; on a Gaussian with sds 5 and 4 and mean (1, -2) at 0.98 and
#'   0.98 (old: 0.35 and 0.42) after 350, about a third of the old
#'   defaults' time (their 1000 iterations).
#'
#'   The other flows with their defaults, same start, 5 seeds (200 target
#'   draws for the MMD flow), particle sd / target sd on the three targets
#'   (Gaussian sds 1 / 3; sds 5 / 4; banana): `ksd_descent()` 0.97 / 0.97,
#'   0.78-0.79 / 0.81-0.82 (the KSD with a fixed kernel underspreads a wide
#'   target), 0.96 / 0.88; `mmd_flow()` 0.98-1.09 / 0.93-1.00, 0.87-0.97 /
#'   0.92-1.07, 0.96-1.06 / 0.85-1.05; `dmmd_flow()` (sd / the draws' sd,
#'   10 seeds) 0.98-1.00 / 0.96-0.99, 0.93-0.97 / 0.92-0.98, 0.97-1.00 /
#'   0.92-0.99; `mied()` 1.05 / 1.11, and with the cap 2000 (seed 1)
#'   0.98 / 0.99 and on the banana 1.28 / 1.55: the Riesz energy at 200 particles spreads a
#'   curved, skewed target too wide (1.41 / 1.82 at 100 particles, 1.23 /
#'   1.54 at 500: a finite-sample effect that shrinks slowly), where the
#'   Gaussian mollifier at scale 0.3 gives 1.02 / 0.96.
#'
#'   On two Stan posteriors (eight schools, non-centred, \eqn{d = 10}; a
#'   nearly separated logistic regression, \eqn{d = 4}; 200 particles, 3
#'   seeds, `inst/experiments/flows-stan-posterior.R` and
#'   `vignette("particle-flows")`) the defaults keep the means within 0.5
#'   reference sd from a short NUTS run, with four shortfalls: SVGD's sds
#'   at 0.75 of the reference in \eqn{d = 10} (its loss of spread with
#'   dimension: 0.73 on \eqn{N(0, I_{10})}, whatever the step or `tol`);
#'   MIED's Riesz energy spreading coordinates of unequal scale up to 2.5
#'   times too wide; the MMD and DrMMD flows from \eqn{N(0, I)} stranding
#'   a sixth of the particles out of the kernel's reach (the stopping rule
#'   then reports them settled: start them near the posterior, or widen
#'   the kernel); and KSD descent's L-BFGS cap reached with final
#'   particles.
#' @param n_iter The largest number of iterations (see 'Stopping and
#'   defaults').
#' @param tol Tolerance of the stopping rule: the flow stops when, over a
#'   window of 50 iterations, the particles' mean and sd of every
#'   coordinate (averaged over the window) change by less than `tol` times
#'   that coordinate's sd. 0: run all `n_iter` iterations.
#' @param step_size Step size \eqn{\epsilon}.
#' @param bandwidth `"median"` or a fixed bandwidth \eqn{h}, between 1e-50 and 1e50.
#' @param optimizer `"adagrad"` (default), `"sgd"` or `"adam"`.
#' @param alpha AdaGrad momentum, in \eqn{[0, 1)}.
#' @param keep_every Keep the particles every `keep_every` iterations in
#'   `$trace` (0: no trace). The start and the last iteration are always kept.
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `NULL` (automatic).
#' @param step Deprecated name of `step_size`.
#' @param nthreads Threads for the interaction terms.
#' @return An object of class `kb_particles`: `x` (final particles),
#'   `trace` (`n x d x K` array or `NULL`) and `trace_iter`, `objective`
#'   (one value per iteration, at the positions before that iteration's
#'   update), `objective_name`, `bandwidth` (the \eqn{h} of each iteration),
#'   `method`, `n_iter` (the iterations run), `n_iter_max` (the cap),
#'   `convergence` (a list: `converged`, `NA` with `tol = 0`; `stop_iter`;
#'   `tol`; `change`, the last window's largest relative change),
#'   `settings`, and `target` when `target` is a `kb_target`;
#'   `print`, `summary`, `plot` and `as.matrix` methods.
#' @references Liu, Q. and Wang, D. (2016). Stein variational gradient
#'   descent: a general purpose Bayesian inference algorithm. *NeurIPS*.
#' @seealso [ksd_descent()], [mmd_flow()], [dmmd_flow()], [mied()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(1, -1), diag(c(1, 0.5)))
#' fit <- svgd(matrix(rnorm(100), 50), tg, n_iter = 300, step_size = 0.1,
#'             progress = FALSE)
#' fit
#' colMeans(fit$x)
#' @export
svgd <- function(x0, target, n_iter = 1000, step_size = 0.05,
                 bandwidth = "median", optimizer = c("adagrad", "sgd", "adam"),
                 alpha = 0.9, keep_every = 0, tol = 0.01, nthreads = NULL,
                 progress = NULL, step, score) {
  if (!missing(score)) {
    target <- deprecated_arg("score", "target", "svgd", score, missing(target))
  }
  if (is_stan_fit(x0)) {
    return(stan_flow(rename_call_arg(match.call(), "score", "target"),
                     parent.frame(), x0, "target"))
  }
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "svgd", step,
                                missing(step_size))
  }
  step <- step_size
  x <- flow_points(x0, "x0")
  sfun <- flow_score_fun(target, ncol(x), "target")
  n_iter <- check_count(n_iter, "n_iter")
  tol <- check_tol(tol)
  step <- check_number(step, "step_size", lower = 0, lower_open = TRUE)
  if (identical(bandwidth, "median")) {
    h_in <- -1
  } else {
    if (!is.numeric(bandwidth)) {
      stop_arg("bandwidth", "must be \"median\" or a positive number")
    }
    h_in <- check_number(bandwidth, "bandwidth", lower = 0, lower_open = TRUE)
    # the kernel terms use h^2 and 1 / h^4
    if (h_in < 1e-50 || h_in > 1e50) {
      stop_arg("bandwidth", sprintf(paste0("must be between 1e-50 and 1e50; ",
                                           "got %s (rescale the problem)"),
                                    format(h_in, digits = 3)))
    }
  }
  optimizer <- check_choice(optimizer, c("adagrad", "sgd", "adam"), "optimizer")
  alpha <- check_number(alpha, "alpha", lower = 0, upper = 1, upper_open = TRUE)
  keep_every <- check_keep(keep_every)
  nt <- resolve_nthreads(nthreads)
  opt <- make_optimizer(optimizer, alpha)
  tr <- tracer(x, keep_every)
  pb <- progress_reporter(n_iter, "SVGD", progress)
  on.exit(pb$done())
  mon <- flow_monitor(tol, n_iter)
  obj <- hs <- numeric(n_iter)
  for (t in seq_len(n_iter)) {
    s <- sfun(x)
    r <- .Call(C_kb_svgd_phi, x, s, h_in, nt)
    obj[t] <- r$ksd2
    hs[t] <- r$h
    xn <- x + step * opt(r$phi, t)
    x <- flow_move(x, xn, r$phi, t, list(
      name = "SVGD direction",
      detail = function() sprintf("bandwidth %s, particles within [%s, %s], scores up to %s",
                                  format(r$h, digits = 3), format(min(x), digits = 3),
                                  format(max(x), digits = 3),
                                  format(max(abs(s)), digits = 3))))
    settled <- mon$settled(x, t)
    tr$add(x, t, force = t == n_iter || settled)
    pb$tick(t)
    if (settled) break
  }
  new_particles(x, tr, obj[seq_len(t)], "KSD^2", "SVGD", t,
                settings = list(step = step, bandwidth = bandwidth,
                                optimizer = optimizer, alpha = alpha),
                target = if (inherits(target, "kb_target")) target,
                bandwidth = hs[seq_len(t)],
                convergence = mon$status(t), n_iter_max = n_iter)
}

# ---- KSD descent -------------------------------------------------------------

# J_i' v_i for every particle: from the user's Jacobian, or a central
# difference of the score along v_i (the Jacobian of a score is the Hessian
# of the log density, so J' v = J v: two score calls per particle).
jac_t_v <- function(x, v, sfun, score_jacobian) {
  d <- ncol(x)
  if (!is.null(score_jacobian)) {
    J <- eval_rows(score_jacobian, x, d * d, "score_jacobian")
    J <- matrix(J, nrow(x))
    out <- matrix(0, nrow(x), d)
    for (b in seq_len(d)) {
      out[, b] <- rowSums(J[, (b - 1L) * d + seq_len(d), drop = FALSE] * v)
    }
    return(out)
  }
  nv <- sqrt(rowSums(v^2))
  u <- v / ifelse(nv > 0, nv, 1)
  h <- fd_step(sqrt(rowSums(x^2)))
  (sfun(x + h * u) - sfun(x - h * u)) / (2 * h) * nv
}

# KSD^2 of the particles and its gradient in their positions (for tests and
# ksd_descent): kernel a kb_kernel (resolved on x) or a resolved kernel.
ksd_objective <- function(x, score, kernel = imq_kernel(), score_jacobian = NULL,
                          nthreads = NULL) {
  x <- flow_points(x, "x")
  rk <- if (inherits(kernel, "kb_resolved_kernel")) kernel else flow_kernel(kernel, x)
  sfun <- flow_score_fun(score, ncol(x))
  ksd_value_grad(x, sfun, rk, score_jacobian, resolve_nthreads(nthreads))
}

ksd_value_grad <- function(x, sfun, rk, score_jacobian, nt) {
  r <- .Call(C_kb_ksd_grad, x, sfun(x), rk, nt)
  list(value = r$value, gradient = r$pos + jac_t_v(x, r$v, sfun, score_jacobian))
}

#' KSD descent
#'
#' Moves particles to minimise the squared kernel Stein discrepancy of
#' their empirical measure (Korba et al., 2021): \eqn{F(x_1, \dots, x_n) =
#' \frac{1}{n^2}\sum_{i,j} u_p(x_i, x_j)}, the V-statistic of [ksd()], over
#' all positions at once.
#'
#' The gradient of \eqn{F} involves the Jacobian of the score \eqn{J(x)}
#' (the Hessian of the log density): \eqn{\partial F / \partial x_i} is a
#' sum over \eqn{j} of derivatives of the Stein kernel in its first
#' argument with the scores held fixed, plus \eqn{J(x_i)^\top v_i}. With
#' `score_jacobian = NULL`, \eqn{J(x_i)^\top v_i = J(x_i) v_i} (the
#' Hessian is symmetric) is a central difference of the score along
#' \eqn{v_i}: two score evaluations per particle and iteration.
#'
#' The kernel is fixed for the whole run: its bandwidth (for `precon =
#' "med"` or `"sclmed"`) is set from `x0`. Only isotropic kernels are
#' supported. The result keeps it: `ksd(fit)` (score by default the
#' flow's [kb_target()]) is the square root of the KSD^2 that `print(fit)`
#' shows at the final particles (`fit$final_objective`).
#'
#' `"lbfgs"` stops by L-BFGS-B's own rule (relative reduction of \eqn{F}
#' below `factr` times the machine epsilon; `convergence$converged` is
#' [stats::optim()]'s code 0) and ignores `tol`; `"gd"` stops by the
#' moments rule of [svgd()] (`tol`) or when the line search finds no
#' decrease.
#'
#' @inheritParams svgd
#' @param score_jacobian `NULL`, or a function of one point returning the
#'   `d x d` Jacobian of the score.
#' @param kernel The base kernel, [imq_kernel()] (default) or
#'   [gaussian_kernel()], isotropic.
#' @param method `"lbfgs"` ([stats::optim()]'s L-BFGS-B on the flattened
#'   particles; `n_iter` is its iteration limit) or `"gd"` (gradient
#'   descent).
#' @param step_size For `"gd"`: the step size, or `NULL` for a backtracking
#'   line search (start at twice the last accepted step, halve until \eqn{F}
#'   decreases). Ignored by `"lbfgs"`.
#' @return A `kb_particles` object (see [svgd()]); `objective` holds
#'   \eqn{F} at every iteration (`"gd"`) or at every function evaluation
#'   (`"lbfgs"`, which evaluates at trial points too; the last entry is at
#'   the final particles); `trace` likewise; `final_objective`, \eqn{F}
#'   at the final particles; `ksd_kernel`, the kernel [ksd()] uses on the
#'   result.
#' @references Korba, A., Aubin-Frankowski, P.-C., Majewski, S. and Ablin,
#'   P. (2021). Kernel Stein discrepancy descent. *ICML*.
#' @examples
#' set.seed(2)
#' tg <- gaussian_target(c(0, 0))
#' fit <- ksd_descent(matrix(rnorm(40, sd = 3), 20), tg,
#'                    score_jacobian = function(x) -diag(2), n_iter = 100,
#'                    progress = FALSE)
#' fit
#' @export
ksd_descent <- function(x0, target, score_jacobian = NULL,
                        kernel = imq_kernel(), method = c("lbfgs", "gd"),
                        n_iter = 1000, step_size = NULL, keep_every = 0,
                        tol = 0.01, nthreads = NULL, progress = NULL, step,
                        score) {
  if (!missing(score)) {
    target <- deprecated_arg("score", "target", "ksd_descent", score,
                             missing(target))
  }
  if (is_stan_fit(x0)) {
    return(stan_flow(rename_call_arg(match.call(), "score", "target"),
                     parent.frame(), x0, "target"))
  }
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "ksd_descent", step,
                                missing(step_size))
  }
  step <- step_size
  x <- flow_points(x0, "x0")
  n <- nrow(x)
  d <- ncol(x)
  sfun <- flow_score_fun(target, d, "target")
  if (!is.null(score_jacobian) && !is.function(score_jacobian)) {
    stop_arg("score_jacobian", "must be a function of one point or NULL")
  }
  if (!inherits(kernel, "kb_kernel")) {
    stop_arg("kernel", "must be a kernel object such as imq_kernel() or ",
             "gaussian_kernel()")
  }
  method <- check_choice(method, c("lbfgs", "gd"), "method")
  n_iter <- check_count(n_iter, "n_iter")
  tol <- check_tol(tol)
  if (!is.null(step)) step <- check_number(step, "step_size", lower = 0, lower_open = TRUE)
  keep_every <- check_keep(keep_every)
  nt <- resolve_nthreads(nthreads)
  check_progress(progress)
  # the kernel (a median over the particles) once every argument is checked
  rk <- flow_kernel(kernel, x)
  tr <- tracer(x, keep_every)
  pb <- progress_reporter(n_iter, "KSD descent", progress)
  on.exit(pb$done())
  vg <- function(x) {
    r <- ksd_value_grad(x, sfun, rk, score_jacobian, nt)
    if (!is.finite(r$value) || !all(is.finite(r$gradient))) {
      stop_numeric(sprintf(paste0(
        "the KSD or its gradient is not finite (kernel bandwidth %s, ",
        "particles within [%s, %s]): the kernel terms overflow at the scale ",
        "of the particles and the target; rescale the problem"),
        format(1 / sqrt(rk$lambda[1L]), digits = 3), format(min(x), digits = 3),
        format(max(x), digits = 3)))
    }
    r
  }
  if (method == "gd") {
    mon <- flow_monitor(tol, n_iter)
    obj <- numeric(n_iter)
    a <- 0.5
    cur <- vg(x)
    done <- n_iter
    for (t in seq_len(n_iter)) {
      obj[t] <- cur$value
      if (is.null(step)) {
        a <- 2 * a
        repeat {
          xn <- x - a * cur$gradient
          if (!all(is.finite(xn))) flow_stop_nonfinite(t)
          if (max(abs(xn)) > flow_scale_limit(d)) {
            # the line search's trial step overshoots: halve it
            a <- a / 2
            next
          }
          nxt <- vg(xn)
          if (nxt$value < cur$value || a < 1e-12) break
          a <- a / 2
        }
        if (!(nxt$value < cur$value)) {
          done <- t
          break
        }
      } else {
        xn <- flow_move(x, x - step * cur$gradient, cur$gradient, t,
                        list(name = "KSD gradient", detail = function() ""))
        nxt <- vg(xn)
      }
      x <- xn
      cur <- nxt
      settled <- mon$settled(x, t)
      tr$add(x, t, force = t == n_iter || settled)
      pb$tick(t)
      if (settled) {
        done <- t
        break
      }
    }
    obj <- obj[seq_len(done)]
    if (done < n_iter) tr$add(x, done, force = TRUE)
    conv <- mon$status(done)
    if (isFALSE(conv$converged) && done < n_iter) {
      # the line search found no decrease: a stationary point of F
      conv$converged <- TRUE
      conv$rule <- "line search"
    }
    final <- cur$value
  } else {
    obj <- numeric(0)
    cache <- new.env()
    evals <- 0L
    fg <- function(p) {
      if (!identical(p, cache$p)) {
        xp <- matrix(p, n, d)
        if (!all(is.finite(xp))) flow_stop_nonfinite(length(obj) + 1L)
        r <- vg(xp)
        cache$p <- p
        cache$r <- r
        evals <<- evals + 1L
        obj[evals] <<- r$value
        if (keep_every > 0L && evals %% keep_every == 0L) tr$add(xp, evals)
      }
      cache$r
    }
    res <- stats::optim(as.vector(x), function(p) fg(p)$value,
                        function(p) as.vector(fg(p)$gradient),
                        method = "L-BFGS-B", control = list(maxit = n_iter))
    # the value at the returned particles (L-BFGS-B may end on another
    # evaluation): the last entry of the objective
    final <- fg(res$par)$value
    x <- matrix(res$par, n, d, dimnames = dimnames(x))
    tr$add(x, evals, force = TRUE)
    pb$tick(n_iter)
    conv <- list(converged = res$convergence == 0L, stop_iter = evals,
                 tol = NA_real_, change = NA_real_, rule = "lbfgs",
                 message = res$message %||% "")
  }
  new_particles(x, tr, obj, "KSD^2", sprintf("KSD descent (%s)", method),
                if (method == "gd") length(obj) else n_iter,
                settings = list(method = method, step = step, kernel = kernel,
                                jacobian = if (is.null(score_jacobian))
                                  "finite differences" else "given"),
                target = if (inherits(target, "kb_target")) target,
                convergence = conv, n_iter_max = n_iter,
                # ksd(fit) judges the particles under this kernel (not
                # standardised), reproducing final_objective
                ksd_kernel = list(kernel = rk, scale = NULL),
                final_objective = final)
}

# ---- MMD and DrMMD flows -----------------------------------------------------

# For each row z_i of z: sum_j w_j k(z_i, x_j) and its gradient in z_i;
# a user_kernel() in R, the built-in kernels in C.
cross_kernel <- function(z, x, w, rk, nt) {
  if (is_user_kernel(rk)) return(user_cross(rk, z, x, w))
  .Call(C_kb_cross_kernel, z, x, w, rk, nt)
}

# cross_kernel(x, x, w, rk, nt), each pair's kernel terms computed once in C.
self_kernel <- function(x, w, rk, nt) {
  if (is_user_kernel(rk)) return(user_cross(rk, x, x, w))
  .Call(C_kb_self_kernel, x, w, rk, nt)
}

flow_gram <- function(rk, y, nt) {
  if (is_user_kernel(rk)) user_gram(rk, y, y) else gram(rk, y, y, nt)
}

# How a flow's error message describes its kernel.
describe_flow_kernel <- function(rk) {
  if (is_user_kernel(rk)) return(sprintf("user kernel \"%s\"", rk$name))
  sprintf("kernel bandwidth %s", format(1 / sqrt(rk$lambda[1L]), digits = 3))
}

# The MMD witness f(z) = mean_j k(z, x_j) - mean_m k(z, y_m) and its
# gradient (tests and mmd_flow).
mmd_witness <- function(z, x, y, kernel, nthreads = NULL) {
  nt <- resolve_nthreads(nthreads)
  rk <- if (inherits(kernel, "kb_resolved_kernel")) kernel else flow_kernel(kernel, y)
  a <- cross_kernel(z, x, rep(1 / nrow(x), nrow(x)), rk, nt)
  b <- cross_kernel(z, y, rep(1 / nrow(y), nrow(y)), rk, nt)
  list(value = a$value - b$value, grad = a$grad - b$grad)
}

# DrMMD witness h(z) = (g(z) - k(z, Y) beta) / lambda, beta = (K_yy + M
# lambda I)^{-1} g(Y), g the MMD witness.
dmmd_witness <- function(z, x, y, lambda, kernel, nthreads = NULL) {
  nt <- resolve_nthreads(nthreads)
  rk <- if (inherits(kernel, "kb_resolved_kernel")) kernel else flow_kernel(kernel, y)
  st <- dmmd_setup(y, lambda, rk, nt)
  w <- dmmd_weights(x, y, st, rk, nt)
  a <- cross_kernel(z, x, rep(1 / nrow(x), nrow(x)), rk, nt)
  b <- cross_kernel(z, y, w$wy, rk, nt)
  list(value = (a$value - b$value) / lambda, grad = (a$grad - b$grad) / lambda)
}

dmmd_setup <- function(y, lambda, rk, nt) {
  M <- nrow(y)
  Kyy <- flow_gram(rk, y, nt)
  A <- Kyy
  diag(A) <- diag(A) + M * lambda
  R <- tryCatch(chol(A), error = function(e) {
    stop_arg("lambda", "is too small: K_yy + M lambda I is not numerically ",
             "positive definite; increase it")
  })
  list(R = R, rowmean = rowMeans(Kyy), kyy = mean(Kyy), lambda = lambda)
}

# beta and the weights on y of the DrMMD witness at the particles x.
dmmd_weights <- function(x, y, st, rk, nt) {
  M <- nrow(y)
  gY <- cross_kernel(y, x, rep(1 / nrow(x), nrow(x)), rk, nt)$value - st$rowmean
  beta <- backsolve(st$R, backsolve(st$R, gY, transpose = TRUE))
  list(gY = gY, beta = beta, wy = 1 / M + beta)
}

describe_noise <- function(b) {
  if (is.null(b)) return("NULL")
  if (length(b) != 1L) return(sprintf("a %s vector of length %d", typeof(b), length(b)))
  format(b)
}

noise_level <- function(noise) {
  if (is.function(noise)) {
    return(function(t) {
      b <- noise(t)
      if (!is.numeric(b) || length(b) != 1L || !is.finite(b) || b < 0) {
        stop_callback("noise", sprintf(paste0("returned %s at iteration %d; ",
                                              "expected one number >= 0"),
                                       describe_noise(b), t))
      }
      b
    })
  }
  noise <- check_number(noise, "noise", lower = 0)
  function(t) noise / sqrt(t)
}

# The MMD flow (lambda NULL) or the DrMMD flow; `opts`: noise, keep_every,
# progress, nthreads, lambda, step_label (how an error names the step size)
# and label (of the progress line).
run_mmd_flow <- function(x0, y, kernel, n_iter, step, opts) {
  noise <- opts$noise
  keep_every <- opts$keep_every
  progress <- opts$progress
  nthreads <- opts$nthreads
  lambda <- opts$lambda
  step_label <- opts$step_label %||% "'step_size'"
  x <- flow_points(x0, "x0")
  y <- flow_points(y, "y", ncol(x))
  if (ncol(y) != ncol(x)) {
    stop_arg("y", sprintf("must have %d columns, like x0; it has %d",
                          ncol(x), ncol(y)))
  }
  if (!inherits(kernel, "kb_kernel") && !is_user_kernel(kernel)) {
    stop_arg("kernel", "must be a kernel object such as gaussian_kernel() ",
             "or user_kernel()")
  }
  n_iter <- check_count(n_iter, "n_iter")
  tol <- check_tol(opts$tol)
  step <- check_number(step, "step_size", lower = 0, lower_open = TRUE)
  beta_t <- noise_level(noise)
  keep_every <- check_keep(keep_every)
  nt <- resolve_nthreads(nthreads)
  check_progress(progress)
  n <- nrow(x)
  M <- nrow(y)
  if (!is.null(lambda)) {
    # K_yy, its regularised copy and its Cholesky factor, M x M each
    check_memory(8 * 3 * M^2, "y",
                 sprintf("dmmd_flow() with a target sample of %d points", M))
  }
  rk <- flow_kernel(kernel, y, "y")
  wx <- rep(1 / n, n)
  wy <- rep(1 / M, M)
  st <- if (is.null(lambda)) {
    list(kyy = mean(self_kernel(y, wy, rk, nt)$value))
  } else {
    dmmd_setup(y, lambda, rk, nt)
  }
  tr <- tracer(x, keep_every)
  pb <- progress_reporter(n_iter, opts$label, progress)
  on.exit(pb$done())
  mon <- flow_monitor(tol, n_iter)
  obj <- numeric(n_iter)
  for (t in seq_len(n_iter)) {
    ax <- self_kernel(x, wx, rk, nt)
    if (!is.null(lambda)) {
      w <- dmmd_weights(x, y, st, rk, nt)
      ay <- cross_kernel(x, y, w$wy, rk, nt)
      # mean K_xy from g(Y) = K_yx 1/n - K_yy 1/M
      mmd2 <- mean(ax$value) - 2 * mean(w$gY + st$rowmean) + st$kyy
      obj[t] <- (1 + lambda) / lambda * (mmd2 - sum(w$gY * w$beta))
      wyt <- w$wy
    } else {
      ay <- cross_kernel(x, y, wy, rk, nt)
      obj[t] <- mean(ax$value) - 2 * mean(ay$value) + st$kyy
      wyt <- wy
    }
    b <- beta_t(t)
    if (b > 0) {
      z <- x + b * matrix(stats::rnorm(length(x)), n)
      grad <- cross_kernel(z, x, wx, rk, nt)$grad - cross_kernel(z, y, wyt, rk, nt)$grad
    } else {
      grad <- ax$grad - ay$grad
    }
    if (!is.null(lambda)) grad <- 2 * (1 + lambda) / lambda * grad
    x <- flow_move(x, x - step * grad, grad, t, list(
      name = if (is.null(lambda)) "MMD witness gradient" else "DrMMD witness gradient",
      detail = function() describe_flow_kernel(rk)),
      step_label)
    settled <- mon$settled(x, t)
    tr$add(x, t, force = t == n_iter || settled)
    pb$tick(t)
    if (settled) break
  }
  list(x = x, tr = tr, obj = obj[seq_len(t)], y = y, kernel = rk,
       convergence = mon$status(t), n_iter = n_iter)
}

#' MMD and DrMMD gradient flows towards a target sample
#'
#' `mmd_flow()` moves particles \eqn{x_i} down the gradient of the maximum
#' mean discrepancy to a target sample \eqn{y_1, \dots, y_M} (Arbel et al.,
#' 2019): with the witness \eqn{f(z) = \frac{1}{n}\sum_j k(z, x_j) -
#' \frac{1}{M}\sum_m k(z, y_m)}, each iteration sets \eqn{x_i \leftarrow x_i
#' - \epsilon \nabla f(z_i)} (no factor \eqn{2}), where \eqn{z_i = x_i +
#' \beta_t u_i}, \eqn{u_i \sim N(0, I)}, is the noise-injected position
#' (\eqn{\beta_t = } `noise` \eqn{/\sqrt{t}}, or `noise(t)` for a function;
#' `noise = 0`: \eqn{z_i = x_i}).
#'
#' `dmmd_flow()` is the de-regularised MMD (DrMMD) flow of Chen et al.
#' (2024): with \eqn{g} the MMD witness above and \eqn{\beta = (K_{yy} +
#' M\lambda I)^{-1} g(Y)} (one Cholesky factorisation, reused), the DrMMD
#' witness is \eqn{h(z) = (g(z) - k(z, Y)\beta) / \lambda}, the objective
#' \eqn{\mathrm{DrMMD} = \frac{1 + \lambda}{\lambda} (\mathrm{MMD}^2 -
#' g(Y)^\top\beta)}, and the update \eqn{x_i \leftarrow x_i - \epsilon\, 2 (1
#' + \lambda) \nabla h(z_i)}, the gradient of its first variation. As
#' \eqn{\lambda \to \infty}, \eqn{\lambda / (2(1 + \lambda))} times this
#' update tends to the MMD-flow update. Since \eqn{\nabla h} grows like
#' \eqn{1/\lambda} for small \eqn{\lambda}, the authors' experiments scale
#' their learning rate by \eqn{\lambda}: to follow that convention pass
#' `step_size = lr * lambda`. The default `step_size = NULL` is \eqn{\lambda}
#' (learning rate 1 in that convention): a step that does not shrink with a
#' small \eqn{\lambda} diverges at once. With a narrow kernel even `step_size` =
#' \eqn{\lambda} can scatter particles out of the kernel's reach, where
#' they stay without any non-finite value to stop the run, and a smaller
#' step (such as \eqn{0.1 \lambda}) is needed (`vignette("particle-flows")`
#' compares the settings on the three-ring target).
#'
#' The kernel is resolved once on `y` (the median heuristic of
#' [gaussian_kernel()] uses the target sample) and must be isotropic.
#' Each iteration costs \eqn{O((n + M) n d)} kernel terms (\eqn{O((n +
#' M)^2 d)} for DrMMD).
#'
#' @inheritParams svgd
#' @param y The target sample, `M x d` (`d` is that of `x0`; see
#'   'Points and samples' in [kernbayes-package]), or a Stan fit (its
#'   unconstrained draws).
#' @param kernel The kernel, [gaussian_kernel()] by default (isotropic), or
#'   a [user_kernel()] (R functions; its gradient is taken from its `grad`).
#' @param noise Noise injection level \eqn{\beta_0 \ge 0}, or a function
#'   of the iteration \eqn{t} returning \eqn{\beta_t}.
#' @param lambda The DrMMD regulariser, \eqn{\lambda > 0}.
#' @param step_size Step size \eqn{\epsilon}; for `dmmd_flow()` `NULL` means
#'   \eqn{\epsilon = \min(25\lambda, 1)} (measured: with \eqn{\lambda =
#'   10^{-3}} and 200 particles from \eqn{N(0, I)} towards 200 draws, the
#'   particles' sds end within 8% of the draws' on a correlated Gaussian
#'   with sds 1 / 3, a banana with sds 1 / 1.73 and a Gaussian with sds
#'   5 / 4, 10 seeds each, stopping after 250-950 iterations; the earlier
#'   default \eqn{\epsilon = \lambda} ended at 0.73-0.87 / 0.55-0.65 of
#'   the sds on the first; the cap 1 because a step of 2 diverged at
#'   \eqn{\lambda = 0.1} in one of two seeds).
#' @return A `kb_particles` object (see [svgd()]) with `objective` the
#'   squared MMD (V-statistic) or the DrMMD of the particles at each
#'   iteration, before its update, and `y`.
#' @references Arbel, M., Korba, A., Salim, A. and Gretton, A. (2019).
#'   Maximum mean discrepancy gradient flow. *NeurIPS*. Chen, Z., Mustafi,
#'   A., Glaser, P., Korba, A., Gretton, A. and Sriperumbudur, B. K. (2024).
#'   (De)-regularized maximum mean discrepancy gradient flow. *arXiv
#'   2409.14980*.
#' @examples
#' set.seed(3)
#' y <- matrix(rnorm(200), 100)
#' fit <- mmd_flow(matrix(rnorm(60, 3), 30), y, n_iter = 200, step_size = 5,
#'                 progress = FALSE)
#' fit
#' fd <- dmmd_flow(matrix(rnorm(60, 3), 30), y, lambda = 0.1, n_iter = 200,
#'                 step_size = 0.5, progress = FALSE)
#' fd
#' @export
mmd_flow <- function(x0, y, kernel = gaussian_kernel(), n_iter = 1000,
                     step_size = 1, noise = 0, keep_every = 0, tol = 0.01,
                     nthreads = NULL, progress = NULL, step) {
  if (is_stan_fit(x0)) return(stan_flow(match.call(), parent.frame(), x0, NULL))
  y <- stan_points(y)
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "mmd_flow", step,
                                missing(step_size))
  }
  step <- step_size
  r <- run_mmd_flow(x0, y, kernel, n_iter, step,
                    list(noise = noise, keep_every = keep_every,
                         progress = progress, nthreads = nthreads,
                         tol = tol, label = "MMD flow"))
  new_particles(r$x, r$tr, r$obj, "MMD^2", "MMD flow", length(r$obj),
                settings = list(step = step, noise = noise, kernel = kernel), y = r$y,
                convergence = r$convergence, n_iter_max = r$n_iter)
}

#' @rdname mmd_flow
#' @export
dmmd_flow <- function(x0, y, lambda = 1e-3, kernel = gaussian_kernel(),
                      n_iter = 1000, step_size = NULL, noise = 0,
                      keep_every = 0, tol = 0.01, nthreads = NULL,
                      progress = NULL, step) {
  if (is_stan_fit(x0)) return(stan_flow(match.call(), parent.frame(), x0, NULL))
  y <- stan_points(y)
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "dmmd_flow", step,
                                missing(step_size))
  }
  step <- step_size
  lambda <- check_number(lambda, "lambda", lower = 0, lower_open = TRUE)
  step_label <- "'step_size'"
  if (is.null(step)) {
    step <- min(25 * lambda, 1)
    step_label <- sprintf("the step size (by default min(25 lambda, 1) = %s)",
                          format(step))
  }
  r <- run_mmd_flow(x0, y, kernel, n_iter, step,
                    list(noise = noise, keep_every = keep_every,
                         progress = progress, nthreads = nthreads,
                         lambda = lambda, step_label = step_label,
                         tol = tol, label = "DrMMD flow"))
  new_particles(r$x, r$tr, r$obj, "DrMMD", "DrMMD flow", length(r$obj),
                settings = list(step = step, noise = noise, kernel = kernel,
                                lambda = lambda), y = r$y,
                convergence = r$convergence, n_iter_max = r$n_iter)
}

# ---- MIED --------------------------------------------------------------------

# The log density at the particles; -Inf (outside the support) is an error
# naming the particle: the energy weights each pair by p^(-1/2).
mied_log_density <- function(target, x, t) {
  ld <- target_log_density(target, x)
  if (any(ld == -Inf)) {
    i <- which(ld == -Inf)[1L]
    stop_numeric(sprintf(paste0("the log density is -Inf at particle %d%s: ",
                                "it is outside the target's support; %s"), i,
                         if (t > 1L) sprintf(" (iteration %d)", t) else "",
                         if (t > 1L) "try a smaller 'step_size'" else
                           "start every particle inside the support"))
  }
  ld
}

mied_objective <- function(x, target, s = NULL, mollifier_scale = 1e-8,
                           nthreads = NULL,
                           mollifier = "riesz") {
  x <- flow_points(x, "x")
  check_target(target)
  if (is.null(s)) s <- ncol(x) + 1e-4
  r <- .Call(C_kb_mied_grad, x, -mied_log_density(target, x, 0L),
             target_score(target, x), mollifier, as.double(s),
             as.double(mollifier_scale), resolve_nthreads(nthreads))
  list(value = r$value, gradient = r$grad)
}

#' Mollified interaction energy descent
#'
#' MIED (Li et al., 2023) moves particles to minimise a mollified
#' interaction energy whose minimisers approach the target as the
#' mollifier sharpens. With a mollifier \eqn{\phi_\epsilon} and
#' \eqn{V = -\log p}, the energy of particles \eqn{x_1, \dots, x_n} is
#' \deqn{E = \frac{1}{n^2}\sum_{i, j} \phi_\epsilon(x_i - x_j)
#' e^{(V(x_i) + V(x_j))/2},}{E = (1/n^2) sum_{i, j} phi_eps(x_i - x_j)
#' exp((V(x_i) + V(x_j))/2),}
#' with the Riesz mollifier \eqn{(|u|^2 + \epsilon^2)^{-s/2}} (default),
#' the Gaussian \eqn{\exp(-|u|^2 / (2\epsilon^2))} or the Laplace
#' \eqn{\exp(-|u| / \epsilon)} (the three of Li et al.; their
#' normalising constants, which depend on \eqn{\epsilon}, \eqn{s} and
#' \eqn{d} only, are left out of `objective`). The Gaussian and Laplace
#' energies include the pairs \eqn{i = j}, whose terms
#' \eqn{\phi(0)/p(x_i)} hold the particles in (without them those
#' energies fall to 0 as the particles spread out); the Riesz energy
#' leaves them out (they are infinite at \eqn{\epsilon = 0}, and its
#' slowly decaying pair terms confine the particles by themselves). This
#' is a discrete form of \eqn{\iint \phi_\epsilon(x - y) (p(x)
#' p(y))^{-1/2} d\mu(x) d\mu(y)}, and the particles descend \eqn{\log E}
#' (computed stably in the log domain) with Adam (default) or plain
#' gradient steps. The mollifier repels particles from each other; the
#' factor \eqn{p^{-1/2}} makes low-density regions expensive. The cap
#' `n_iter` defaults to 2000, the authors' number of iterations at their
#' step 0.01 (with 1000 a Gaussian with sds 5 and 4 had not settled:
#' 0.91 / 0.98 of the sds; see 'Stopping and defaults' in [svgd()] for the
#' defaults measured on three targets, and a banana that the Riesz energy
#' spreads too wide at a few hundred particles).
#'
#' @inheritParams svgd
#' @param target A [kb_target()] (log density and score are both used),
#'   or a Stan fit (its [stan_target()]).
#' @param mollifier `"riesz"` (default), `"gaussian"` or `"laplace"`.
#'   The Riesz mollifier works with any small `mollifier_scale` (the
#'   default's \eqn{10^{-8}}); the Gaussian and Laplace ones need a scale
#'   `mollifier_scale` of
#'   about the particles' spacing, which you must give (there is no
#'   default that suits every target and number of particles; see the
#'   mollifier comparison in `vignette("particle-flows")`).
#' @param s Riesz exponent, above \eqn{d}; default \eqn{d + 10^{-4}}
#'   (Riesz mollifier only).
#'   With a small `eps` the particles are in the hypersingular regime,
#'   whose limiting density is proportional to \eqn{p^{d/s}}, so `s` close
#'   to \eqn{d} is needed to target \eqn{p} itself (larger `s` spreads the
#'   particles wider than \eqn{p}; measurements in the package's NEWS).
#' @param mollifier_scale Mollifier scale \eqn{\epsilon} (all three
#'   mollifiers): for the Riesz mollifier \eqn{\ge 0} (default
#'   \eqn{10^{-8}}; pairs \eqn{i = j} are excluded, so 0 is allowed while
#'   particles are distinct), for the Gaussian and Laplace ones \eqn{> 0}
#'   and required. Formerly `eps` (renamed: in the package,
#'   `eps` is [kbr()]'s regulariser).
#' @param eps Deprecated name of `mollifier_scale` (a message once per
#'   session).
#' @param optimizer `"adam"` (default) or `"sgd"`.
#' @param constraint `NULL` (default: unconstrained) or a
#'   [mied_constraint()]: an inequality \eqn{g(x) \le 0} or an equality
#'   \eqn{h(x) = 0} that the particles are driven to satisfy by the dynamic
#'   barrier of Gong and Liu (2021), as in Li et al. (2023, Sec. 4). The
#'   target is then the restriction of `target`'s density to the
#'   constraint set (on an equality, to the surface, with its area
#'   measure); `target` must be defined on the whole space (or at least
#'   wherever the particles go). With an equality the particles live on a
#'   set of dimension \eqn{d - 1}, so `s` must exceed \eqn{d - 1} and
#'   defaults to \eqn{d - 1 + 10^{-4}} (the authors' choice: the
#'   dimension of the constraint set).
#' @return A `kb_particles` object (see [svgd()]) with `objective` the log
#'   energy at each iteration, before its update. With a constraint, also
#'   `violation`: its violation (largest \eqn{\max(g, 0)}, or largest
#'   \eqn{|h|}, over the particles) before each iteration and, last, at
#'   the final particles (`n_iter + 1` values); `settings$constraint` holds
#'   the constraint.
#' @references Li, L., Liu, Q., Korba, A., Yurochkin, M. and Solomon, J.
#'   (2023). Sampling with mollified interaction energy descent. *ICLR*.
#'
#'   Gong, C. and Liu, X. (2021). Bi-objective trade-off with dynamic
#'   barrier gradient descent. *NeurIPS*.
#' @examples
#' set.seed(4)
#' tg <- gaussian_target(c(0, 0), diag(c(1, 0.25)))
#' fit <- mied(matrix(rnorm(200), 100), tg, n_iter = 300, step_size = 0.05,
#'             progress = FALSE)
#' colMeans(fit$x)
#' cov(fit$x)
#'
#' # the Gaussian mollifier needs a scale of about the particles' spacing
#' # (too small and they crowd the mode, too large and the narrow
#' # coordinate shrinks)
#' fg <- mied(matrix(rnorm(200), 100), tg, n_iter = 300, step_size = 0.05,
#'            mollifier = "gaussian", mollifier_scale = 0.25, progress = FALSE)
#' sqrt(diag(cov(fg$x)))   # target: 1 and 0.5 (here about 0.95 and 0.47)
#'
#' # von Mises-Fisher on the unit circle: exp(2 x_1) restricted to |x| = 1
#' vmf <- kb_target(function(x) 2 * x[, 1],
#'                  function(x) cbind(2, 0 * x[, 2]), dim = 2,
#'                  vectorized = TRUE)
#' circle <- mied_constraint(function(x) rowSums(x^2) - 1,
#'                           function(x) 2 * x, type = "eq")
#' fc <- mied(matrix(rnorm(100), 50), vmf, n_iter = 200, step_size = 0.02,
#'            constraint = circle, progress = FALSE)
#' fc$violation[length(fc$violation)]   # largest | |x| - 1 | at the end
#' mean(fc$x[, 1])     # exact: besselI(2, 1) / besselI(2, 0) = 0.698
#' @export
mied <- function(x0, target, n_iter = 2000, step_size = 0.01, s = NULL,
                 mollifier_scale = NULL, optimizer = c("adam", "sgd"),
                 keep_every = 0, constraint = NULL,
                 mollifier = c("riesz", "gaussian", "laplace"), tol = 0.01,
                 nthreads = NULL, progress = NULL, step, eps) {
  if (is_stan_fit(x0)) return(stan_flow(match.call(), parent.frame(), x0, "target"))
  if (is_stan_fit(target)) target <- stan_target(target)
  if (!missing(step)) {
    step_size <- deprecated_arg("step", "step_size", "mied", step,
                                missing(step_size))
  }
  if (!missing(eps)) {
    # renamed: kbr()'s eps is a regulariser
    mollifier_scale <- deprecated_arg("eps", "mollifier_scale", "mied", eps,
                                      missing(mollifier_scale))
  }
  eps <- mollifier_scale
  step <- step_size
  x <- flow_points(x0, "x0")
  check_target(target)
  if (target$dim != ncol(x)) {
    stop_arg("target", sprintf("has dimension %d; the particles have %d",
                               target$dim, ncol(x)))
  }
  n_iter <- check_count(n_iter, "n_iter")
  tol <- check_tol(tol)
  step <- check_number(step, "step_size", lower = 0, lower_open = TRUE)
  con <- check_constraint(constraint, ncol(x))
  # the dimension of the set the particles live on: one less on an equality
  dm <- ncol(x) - as.integer(!is.null(con) && con$type == "eq")
  mollifier <- check_choice(mollifier, c("riesz", "gaussian", "laplace"),
                            "mollifier")
  if (mollifier == "riesz") {
    s <- if (is.null(s)) dm + 1e-4 else
      check_number(s, "s", lower = dm, lower_open = TRUE)
    eps <- if (is.null(eps)) 1e-8 else
      check_number(eps, "mollifier_scale", lower = 0)
  } else {
    if (!is.null(s)) {
      stop_arg("s", sprintf(paste0("is the Riesz exponent; the %s mollifier ",
                                   "has none (leave 's' out)"), mollifier))
    }
    if (is.null(eps)) {
      stop_arg("mollifier_scale", sprintf(paste0(
        "must be given for the %s mollifier: a scale > 0 of about the ",
        "particles' spacing"), mollifier))
    }
    eps <- check_number(eps, "mollifier_scale", lower = 0, lower_open = TRUE)
    s <- NA_real_
  }
  s_c <- if (is.na(s)) 0 else s  # the C layer reads s for Riesz only
  optimizer <- check_choice(optimizer, c("adam", "sgd"), "optimizer")
  keep_every <- check_keep(keep_every)
  nt <- resolve_nthreads(nthreads)
  check_progress(progress)
  opt <- make_optimizer(optimizer)
  tr <- tracer(x, keep_every)
  pb <- progress_reporter(n_iter, "MIED", progress)
  on.exit(pb$done())
  mon <- flow_monitor(tol, n_iter)
  obj <- numeric(n_iter)
  viol <- if (is.null(con)) NULL else numeric(n_iter + 1L)
  for (t in seq_len(n_iter)) {
    ld <- mied_log_density(target, x, t)
    r <- .Call(C_kb_mied_grad, x, -ld, target_score(target, x), mollifier,
               s_c, eps, nt)
    obj[t] <- r$value
    dir <- r$grad
    if (!is.null(con)) {
      ce <- constraint_eval(con, x, t)
      viol[t] <- ce$violation
      dir <- barrier_direction(dir, ce, con$alpha)
    }
    x <- flow_move(x, x - step * opt(dir, t), dir, t, list(
      name = "MIED gradient",
      detail = function() sprintf("particles within [%s, %s]",
                                  format(min(x), digits = 3),
                                  format(max(x), digits = 3))))
    settled <- mon$settled(x, t)
    tr$add(x, t, force = t == n_iter || settled)
    pb$tick(t)
    if (settled) break
  }
  settings <- list(step = step, mollifier = mollifier, s = s,
                   mollifier_scale = eps, optimizer = optimizer)
  obj <- obj[seq_len(t)]
  if (is.null(con)) {
    return(new_particles(x, tr, obj, "log energy", "MIED", t,
                         settings = settings, target = target,
                         convergence = mon$status(t), n_iter_max = n_iter))
  }
  viol <- viol[seq_len(t + 1L)]
  viol[t + 1L] <- constraint_eval(con, x, t)$violation
  new_particles(x, tr, obj, "log energy", "MIED", t,
                convergence = mon$status(t), n_iter_max = n_iter,
                settings = c(settings, list(constraint = con)),
                target = target, violation = viol)
}

# ---- methods -----------------------------------------------------------------

# A kb_particles object as its methods need it: a numeric matrix of
# particles and a numeric objective.
check_particles <- function(x, arg = "x") {
  p <- x[["x"]]
  if (!inherits(x, "kb_particles") || !is.matrix(p) || !is.numeric(p) ||
      nrow(p) < 1L || ncol(p) < 1L ||
      !is.numeric(x[["objective"]]) || !is.character(x[["method"]])) {
    stop_arg(arg, "must be a kb_particles object from svgd(), ksd_descent(), ",
             "mmd_flow(), dmmd_flow() or mied() (its particles 'x', a numeric ",
             "matrix, and its 'objective')")
  }
  invisible(x)
}

# One line on how the flow stopped (NULL for objects made before the rule).
describe_convergence <- function(x) {
  cv <- x[["convergence"]]
  if (is.null(cv)) return(NULL)
  cap <- x[["n_iter_max"]] %||% x[["n_iter"]]
  if (identical(cv$rule, "lbfgs")) {
    return(if (isTRUE(cv$converged))
      sprintf("L-BFGS-B converged after %d evaluations (%s)", cv$stop_iter,
              cv$message)
    else sprintf(paste0("L-BFGS-B did not converge within n_iter = %d ",
                        "iterations (%d evaluations; %s): increase n_iter"),
                 cap, cv$stop_iter, cv$message))
  }
  if (identical(cv$rule, "line search")) {
    return(sprintf(paste0("stopped at iteration %d: the line search found ",
                          "no decrease"), cv$stop_iter))
  }
  if (is.na(cv$converged)) {
    return(sprintf("ran all n_iter = %d iterations (tol = 0: no convergence rule)",
                   cap))
  }
  if (cv$converged) {
    return(sprintf(paste0("stopped at iteration %d: moments settled (change ",
                          "%s%% of the sd over %d iterations, tol %s%%)"),
                   cv$stop_iter, format(100 * cv$change, digits = 2),
                   flow_window, format(100 * cv$tol)))
  }
  sprintf(paste0("reached n_iter = %d without settling: increase n_iter ",
                 "(last change %s%% of the sd over %d iterations, tol %s%%)"),
          cap, format(100 * cv$change, digits = 2), flow_window,
          format(100 * cv$tol))
}

#' @export
print.kb_particles <- function(x, ...) {
  check_result(x)
  check_particles(x)
  cat(sprintf("%s: %d particles in %d dimension%s, %d iteration%s\n", x$method,
              nrow(x$x), ncol(x$x), if (ncol(x$x) == 1L) "" else "s",
              x$n_iter, if (x$n_iter == 1L) "" else "s"))
  conv <- describe_convergence(x)
  if (!is.null(conv)) cat("  ", conv, "\n", sep = "")
  ob <- x$objective
  fin <- x[["final_objective"]]
  if (!is.null(fin)) {
    cat(sprintf("  %s: %s at the start, %s at the final particles (KSD %s = ksd(fit))\n",
                x$objective_name, format(ob[1L], digits = 4),
                format(fin, digits = 4), format(sqrt(max(fin, 0)), digits = 4)))
  } else if (length(ob)) {
    cat(sprintf("  %s: %s at the start, %s at the last iteration\n",
                x$objective_name, format(ob[1L], digits = 4),
                format(ob[length(ob)], digits = 4)))
  }
  if (identical(x$objective_name, "KSD^2")) cat(particles_ksd_kernel(x), "\n")
  if (!is.null(x$violation)) {
    cat(sprintf("  constraint violation: %s at the start, %s at the end\n",
                format(x$violation[1L], digits = 3),
                format(x$violation[length(x$violation)], digits = 3)))
  }
  if (!is.null(x$trace)) {
    cat(sprintf("  trace: %d iterates kept\n", dim(x$trace)[3L]))
  }
  invisible(x)
}

#' @export
summary.kb_particles <- function(object, ...) {
  check_result(object, "object")
  check_particles(object, "object")
  x <- object$x
  cn <- point_names(x)
  md <- if (nrow(x) <= 2000L) min(stats::dist(x)) else NA_real_
  cv <- if (nrow(x) > 1L) stats::cov(x) else matrix(NA_real_, ncol(x), ncol(x))
  dimnames(cv) <- list(cn, cn)
  ob <- object$objective
  end <- object[["final_objective"]] %||% ob[length(ob)]
  structure(list(method = object$method, n = nrow(x), d = ncol(x),
                 mean = stats::setNames(colMeans(x), cn),
                 sd = stats::setNames(sqrt(diag(cv)), cn), cov = cv,
                 objective = c(start = ob[1L], end = end),
                 objective_name = object$objective_name,
                 ksd_kernel = if (identical(object$objective_name, "KSD^2"))
                   particles_ksd_kernel(object),
                 convergence = describe_convergence(object),
                 min_distance = md),
            class = "summary.kb_particles")
}

#' @export
print.summary.kb_particles <- function(x, ...) {
  cat(sprintf("%s: %d particles, d = %d\n", x$method, x$n, x$d))
  if (!is.null(x$convergence)) cat(x$convergence, "\n", sep = "")
  cat(sprintf("%s: %s -> %s\n", x$objective_name,
              format(x$objective[1L], digits = 4),
              format(x$objective[2L], digits = 4)))
  if (!is.null(x$ksd_kernel)) cat(x$ksd_kernel, "\n")
  if (!is.na(x$min_distance)) {
    cat(sprintf("smallest distance between particles: %s\n",
                format(x$min_distance, digits = 4)))
  }
  cat("particles' mean and sd:\n")
  print(rbind(mean = x$mean, sd = x$sd))
  cat("particles' covariance:\n")
  print(x$cov)
  invisible(x)
}

#' @export
as.matrix.kb_particles <- function(x, ...) x$x

# The box a plot of particles shows, in d = 1 or 2: the particles' (and
# the target sample's) range, widened to where the target's density is
# above 1e-3 of its largest value on a grid. The grid starts at the
# particles' mean +- 6 sds and doubles its half-width
# while the density is not negligible at its edge (up to 9 times).
plot_box <- function(p, target, extra = NULL) {
  d <- ncol(p)
  pts <- rbind(p, extra)
  lo <- apply(pts, 2L, min)
  hi <- apply(pts, 2L, max)
  if (!inherits(target, "kb_target")) return(rbind(lo, hi))
  ctr <- colMeans(p)
  sp <- apply(p, 2L, stats::sd)
  sp[!(sp > 0)] <- pmax(1, abs(ctr[!(sp > 0)]))
  half <- 6 * sp
  ng <- if (d == 1L) 400L else 60L
  for (round in 1:10) {
    gs <- lapply(seq_len(d), function(k) seq(ctr[k] - half[k], ctr[k] + half[k],
                                             length.out = ng))
    g <- as.matrix(expand.grid(gs))
    ld <- tryCatch(target_log_density(target, g), error = function(e) NULL)
    if (is.null(ld)) break
    ld[!is.finite(ld)] <- -Inf
    if (!any(is.finite(ld))) break
    keep <- matrix(exp(ld - max(ld)) > 1e-3, nrow = nrow(g))
    at_edge <- FALSE
    for (k in seq_len(d)) {
      v <- g[keep, k]
      step <- gs[[k]][2L] - gs[[k]][1L]
      lo[k] <- min(lo[k], min(v) - step)
      hi[k] <- max(hi[k], max(v) + step)
      at_edge <- at_edge || min(v) <= gs[[k]][1L] || max(v) >= gs[[k]][ng]
    }
    if (!at_edge) break
    half <- 2 * half
  }
  rbind(lo, hi)
}

# Call a plotting function with defaults the user's arguments override.
plot_with <- function(f, defaults, dots) {
  do.call(f, utils::modifyList(defaults, dots, keep.null = TRUE))
}

#' Plot particles from a flow
#'
#' @param x A `kb_particles` object.
#' @param type `"particles"` (final particles; in 2-D over the density
#'   contours of the target when it is a [kb_target()], or over the target
#'   sample for MMD flows; in 1-D a histogram with the target density; the
#'   box covers the particles and the region where the target's density
#'   is above \eqn{10^{-3}} of its largest value, so particles that have
#'   not yet spread over the target show as such),
#'   `"trajectories"` (needs a trace: paths of the first two coordinates,
#'   or of the one coordinate against the iteration) or `"objective"`.
#' @param target Optional [kb_target()] for the contours (default: the one
#'   the flow used, if any).
#' @param ... Further graphical arguments.
#' @return `x`, invisibly.
#' @examples
#' set.seed(5)
#' tg <- gaussian_target(c(0, 0), diag(c(4, 1)))
#' fit <- svgd(matrix(rnorm(100), 50), tg, progress = FALSE)
#' plot(fit)               # particles over the target's contours
#' plot(fit, "objective")  # KSD^2 per iteration
#' @export
plot.kb_particles <- function(x, type = c("particles", "trajectories",
                                          "objective"),
                              target = x$target, ...) {
  check_result(x)
  check_particles(x)
  type <- check_choice(type, c("particles", "trajectories", "objective"), "type")
  p <- x$x
  d <- ncol(p)
  # the coordinates' names (a Stan fit's say what they are: log(tau), ...)
  cn <- point_names(p)
  if (type == "objective") {
    ob <- x$objective
    lg <- if (all(ob > 0)) "y" else ""
    plot_with(graphics::plot, list(seq_along(ob), ob, type = "l", log = lg,
                                   xlab = "iteration", ylab = x$objective_name,
                                   main = x$method), list(...))
    return(invisible(x))
  }
  if (type == "trajectories") {
    if (is.null(x$trace)) {
      stop_arg("x", "has no trace: run the flow with keep_every > 0")
    }
    tr <- x$trace
    if (d == 1L) {
      plot_with(graphics::matplot,
                list(x$trace_iter, t(tr[, 1L, ]), type = "l", lty = 1,
                     col = grDevices::adjustcolor("steelblue", 0.5),
                     xlab = "iteration", ylab = cn[1L], main = x$method),
                list(...))
    } else {
      plot_with(graphics::plot,
                list(range(tr[, 1L, ]), range(tr[, 2L, ]), type = "n",
                     xlab = cn[1L], ylab = cn[2L], main = x$method), list(...))
      for (i in seq_len(nrow(p))) {
        graphics::lines(tr[i, 1L, ], tr[i, 2L, ],
                        col = grDevices::adjustcolor("steelblue", 0.4))
      }
      graphics::points(p[, 1L], p[, 2L], pch = 19, cex = 0.5)
    }
    return(invisible(x))
  }
  if (d <= 2L) box <- plot_box(p, target, x$y)
  if (d == 1L) {
    plot_with(graphics::hist,
              list(p[, 1L], breaks = "FD", freq = FALSE, main = x$method,
                   xlab = cn[1L], col = "grey90", border = "grey60",
                   xlim = box[, 1L]), list(...))
    if (inherits(target, "kb_target")) {
      u <- graphics::par("usr")
      g <- seq(u[1L], u[2L], length.out = 400)
      ld <- target_log_density(target, matrix(g))
      dens <- exp(ld - max(ld))
      dens <- dens / (sum(dens) * (g[2L] - g[1L]))
      graphics::lines(g, dens, col = "red")
    }
    graphics::rug(p[, 1L])
    return(invisible(x))
  }
  if (d == 2L) {
    rx <- box[, 1L]
    ry <- box[, 2L]
  } else {
    rx <- range(p[, 1L], x$y[, 1L])
    ry <- range(p[, 2L], x$y[, 2L])
  }
  plot_with(graphics::plot,
            list(rx, ry, type = "n", xlab = cn[1L], ylab = cn[2L],
                 main = if (d > 2L) paste(x$method, "(first two coordinates)")
                        else x$method), list(...))
  if (!is.null(x$y)) {
    graphics::points(x$y[, 1L], x$y[, 2L], pch = 19, cex = 0.4, col = "grey70")
  }
  if (d == 2L && inherits(target, "kb_target")) {
    gx <- seq(rx[1L], rx[2L], length.out = 80)
    gy <- seq(ry[1L], ry[2L], length.out = 80)
    ld <- target_log_density(target, as.matrix(expand.grid(gx, gy)))
    graphics::contour(gx, gy, matrix(exp(ld - max(ld)), 80), add = TRUE,
                      drawlabels = FALSE, col = "grey50")
  }
  graphics::points(p[, 1L], p[, 2L], pch = 19, cex = 0.6, col = "steelblue")
  invisible(x)
}
