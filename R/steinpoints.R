# Stein Points (Chen, Mackey, Gorham, Briol & Oates, ICML 2018): a point
# set built one point at a time, each new point minimising a KSD criterion
# against the points so far, over Monte Carlo candidates, Nelder-Mead runs
# started at the best candidates, or a fixed grid.  The loop is in R (all
# random numbers from R, so set.seed() reproduces a run; an interrupt stops
# it between steps or inside the C sums); the Stein kernel sums of
# candidates against the points are one .Call per step
# (kb_stein_cross_sums, src/stein.c).

sp_control_names <- c("n_candidates", "mu0", "cov0", "lambda", "alpha",
                      "n_starts", "reltol", "maxit", "lower", "upper",
                      "grid_size", "keep_candidates")

#' Stein Points
#'
#' Builds a set of `m` points that approximates a target known through its
#' score, by choosing each point to minimise the kernelized Stein
#' discrepancy (KSD) of the set (Chen et al., 2018). Unlike [stein_thin()],
#' nothing is sampled first: the points are found by optimisation over the
#' whole space.
#'
#' With \eqn{k_p} the Stein kernel of `kernel` and \eqn{x_1, \dots,
#' x_{j-1}} the points so far, point \eqn{j} minimises
#' * `"greedy"` (Stein Greedy): \eqn{k_p(x, x) + 2 \sum_{i<j} k_p(x_i, x)}
#'   (equivalently \eqn{k_p(x, x)/2 + \sum_{i<j} k_p(x_i, x)}), the
#'   increase of \eqn{j^2 \mathrm{KSD}^2}, so that each step is the
#'   greedy minimiser of the KSD of the first \eqn{j} points;
#' * `"herding"` (Stein Herding, a conditional gradient or Frank-Wolfe
#'   step): \eqn{\sum_{i<j} k_p(x_i, x)}; the first point minimises
#'   \eqn{k_p(x, x)}.
#'
#' The minimisation over \eqn{x} is approximate, by `optimizer`:
#' * `"mc"`: the best of `n_candidates` Monte Carlo candidates, drawn as in
#'   the authors' adaptive proposal: with probability \eqn{\alpha_j} all
#'   from the initial Gaussian \eqn{N(\mu_0, \Sigma_0)}, otherwise from
#'   the mixture of Gaussians \eqn{N(x_i, \lambda I)} centred at the points
#'   so far (a point chosen uniformly for each candidate). The first point
#'   always uses the initial Gaussian.
#' * `"nm"`: the same candidates, then [stats::optim()] Nelder-Mead runs
#'   started at the `n_starts` best of them; the best end point is taken.
#'   Each function evaluation is one score evaluation. Nelder-Mead can
#'   only improve on its start, so the criterion reached is never worse
#'   than that of `"mc"` with the same candidates (`criterion_start` keeps
#'   the best candidate's value).
#' * `"grid"`: the best point of a fixed grid of `grid_size` points per
#'   coordinate over the box `lower`-`upper` (dimension 1 to 3 only). The
#'   scores on the grid are computed once and the criterion is updated by
#'   one row of Stein kernel values per step, so a step costs one pass over
#'   the grid.
#'
#' `control` settings (defaults in brackets): `n_candidates` \[100\];
#' `mu0` \[0\], the mean of the initial Gaussian; `cov0` \[5\], its
#' covariance (a variance, a vector of variances or a matrix); `lambda`
#' \[0.5\], the variance of the mixture components; `alpha`, the
#' probability of drawing from the initial Gaussian at step \eqn{j}: one
#' number, a vector of length `m` or a function of \eqn{(j, m)}, by default
#' the schedule of the authors' experiments, \eqn{\alpha_j = 1 -
#' \mathrm{logistic}(8 (2 (j - 1)/(m - 1) - 1))}, from about 1 to about 0;
#' `n_starts` \[3\], `reltol` \[1e-4\] and `maxit` \[200\] for `"nm"`;
#' `lower`, `upper` \[\eqn{\mu_0 \mp 3} standard deviations of
#' \eqn{\Sigma_0}\] and `grid_size` \[1001, 101 or 31 in dimension 1, 2 or
#' 3\] for `"grid"`; `keep_candidates` \[`FALSE`\]: keep each step's
#' candidates and their criterion values (`"mc"`, `"nm"`). The
#' authors' Monte Carlo settings were 20 candidates, \eqn{\lambda} 0.5 or
#' 1; 100 candidates are the default here because the kernel sums cost
#' little next to the gain in the criterion (see the package's
#' `inst/bench/bench-steinpoints.R`).
#'
#' The kernel must not depend on a sample, as nothing is sampled: the
#' default is the IMQ kernel with \eqn{L = I} (`precon = "id"`), and a
#' median heuristic (`"med"`, `"sclmed"`, `"smpcov"`) is refused; give a
#' bandwidth as a number (\eqn{L = I / h^2}) or a matrix instead. No
#' standardisation is applied: points, scores and the KSD are in the
#' target's coordinates.
#'
#' Truncation: the convergence theorems of Chen et al. (2018) assume
#' \eqn{E_P[\exp(c_2 k_p(Z, Z))] < \infty} for some \eqn{c_2 > 0} and
#' restrict the search at step \eqn{j} to \eqn{\{x : k_p(x, x) \le
#' R_j^2\}}, with \eqn{R_j^2} between \eqn{2 \log(j) / c_2} and \eqn{2
#' \log(m) / c_2} (the rule as the CRAN package steinsampling states it;
#' the full text of the theorems was not at hand when this was written,
#' so check their exact conditions in the paper before relying on the
#' guarantee). `truncation = "lower"` uses \eqn{R_j^2 = 2 \log(j) /
#' c_2}, `"upper"` \eqn{R_j^2 = 2 \log(m) / c_2}; candidates (or
#' Nelder-Mead points, or grid points) outside the set are never chosen,
#' from step 2 on (the first point is unrestricted). The default `"none"`
#' restricts nothing, as in the authors' experiments. For the IMQ kernel
#' \eqn{k_p(x, x) = \phi(0) |\nabla \log p(x)|^2 - 2 \phi'(0)
#' \mathrm{tr}(L)}, so the set bounds the score; for a standard Gaussian
#' target any \eqn{c_2 < 1/2} satisfies the assumption.
#'
#' @param target A [kb_target()] (its score is evaluated at the candidate
#'   points; vectorised targets are evaluated one batch per step).
#' @param m Number of points.
#' @param n Deprecated name of `m` (a message once per session).
#' @param method `"greedy"` (default) or `"herding"`; see Details.
#' @param optimizer `"mc"` (default), `"nm"` or `"grid"`; see Details.
#' @param kernel A base kernel with a fixed preconditioner: [imq_kernel()]
#'   (default, \eqn{L = I}) or [gaussian_kernel()] with a `bandwidth` or a
#'   numeric `precon`.
#' @param control A named list of settings (see Details).
#' @param truncation `"none"` (default), `"lower"` or `"upper"`: the
#'   truncation rule of the paper (see Details).
#' @param c2 For `truncation`: the positive constant \eqn{c_2}.
#' @param nthreads Number of OpenMP threads for the kernel sums; default
#'   `getOption("kernbayes.nthreads", 1)`.
#' @param progress Show progress (see 'Progress' in [kernbayes-package]);
#'   default `NULL` (automatic).
#' @return An object of class `kb_stein_points`, inheriting from `kb_thin`
#'   (so [ksd()], `print`, `summary`, `plot`, `as_draws_df()` and
#'   `as.data.frame()` work as for a thinned set; see
#'   [as_draws.kb_result]): `points` (`m x d`, in
#'   order of selection), `score` (the scores at the points), `ksd` (the
#'   KSD of the first \eqn{j} points, \eqn{j = 1, \dots, m}), `criterion`
#'   (the criterion value of each chosen point), `criterion_start` (`"nm"`:
#'   the best candidate's value before Nelder-Mead), `n_eval` (score
#'   evaluations per step; the grid's are counted at step 1), `radius2`
#'   (\eqn{R_j^2} per step, `NULL` without truncation), `method`,
#'   `criterion_type`, `optimizer`, `kernel` (resolved), `scale` (`NULL`:
#'   no standardisation), `control` (the settings used), `index`
#'   (\eqn{1, \dots, m}) and `sample` (the points), and with
#'   `keep_candidates` a list `candidates` of each step's candidates
#'   (`x`, `criterion`).
#' @references Chen, W. Y., Mackey, L., Gorham, J., Briol, F.-X. and
#'   Oates, C. J. (2018). Stein Points. *ICML*, PMLR 80, 844-853.
#'   Chen, W. Y., Barp, A., Briol, F.-X., Gorham, J., Girolami, M.,
#'   Mackey, L. and Oates, C. J. (2019). Stein Point Markov chain Monte
#'   Carlo. *ICML* (the adaptive Monte Carlo proposal and its schedule).
#' @seealso [stein_thin()] (selection from a sample), [sp_mcmc()] (new
#'   points from Markov chain moves), [ksd()].
#' @examples
#' set.seed(1)
#' mix <- gaussian_mixture_target(rbind(c(-1.5, 0), c(1.5, 0)))
#' sp <- stein_points(mix, 30)
#' sp
#' iid <- sample_target(mix, 30)
#' c(stein_points = ksd(sp), iid = ksd(iid, mix))
#' plot(sp)
#' @export
stein_points <- function(target, m, method = c("greedy", "herding"),
                         optimizer = c("mc", "nm", "grid"),
                         kernel = imq_kernel(), control = list(),
                         truncation = c("none", "lower", "upper"), c2 = NULL,
                         nthreads = NULL, progress = NULL, n) {
  if (!missing(n)) m <- deprecated_arg("n", "m", "stein_points", n, missing(m))
  # every argument is checked before the score runs
  if (missing(target)) stop_arg("target", "is missing: give a kb_target")
  check_target(target)
  d <- as.integer(target$dim)
  if (missing(m)) stop_arg("m", "is missing: give the number of points")
  n <- check_count(m, "m")
  method <- check_choice(method, c("greedy", "herding"), "method")
  optimizer <- check_choice(optimizer, c("mc", "nm", "grid"), "optimizer")
  if (optimizer == "grid" && d > 3L) {
    stop_arg("optimizer", sprintf(paste0(
      "= \"grid\" is for dimension 1 to 3; the target has dimension %d: ",
      "use \"mc\" or \"nm\""), d))
  }
  rk <- sp_kernel(kernel, d)
  truncation <- check_choice(truncation, c("none", "lower", "upper"),
                             "truncation")
  if (truncation != "none") {
    if (is.null(c2)) {
      stop_arg("c2", sprintf(paste0("is needed with truncation = \"%s\": ",
                                    "give the positive constant c2 of the ",
                                    "radius R_j^2 = 2 log(.) / c2"),
                             truncation))
    }
    c2 <- check_number(c2, "c2", lower = 0, lower_open = TRUE)
  } else if (!is.null(c2)) {
    stop_arg("c2", "is only used with truncation = \"lower\" or \"upper\"")
  }
  ctl <- sp_control(control, d, n, optimizer)
  nthreads <- resolve_nthreads(nthreads)
  prog <- progress_reporter(n, "Stein Points", progress)
  radius2 <- if (truncation == "none") NULL else
    2 * log(if (truncation == "lower") seq_len(n) else rep(max(n, 1L), n)) / c2
  run <- list(target = target, rk = rk, d = d, n = n, method = method,
              ctl = ctl, radius2 = radius2, nthreads = nthreads)
  res <- if (optimizer == "grid") sp_grid(run, prog) else
    sp_search(run, optimizer, prog)
  prog$done()
  out <- new_thin(seq_len(n), res$x,
                  list(ksd = sqrt(pmax(cumsum(res$gain), 0)) / seq_len(n)),
                  sprintf("Stein Points (%s, %s)", method, switch(optimizer,
                    mc = "Monte Carlo", nm = "Nelder-Mead", grid = "grid")),
                  list(kernel = rk, scale = NULL, s = in_basis(res$s, rk)),
                  list(standardize = FALSE, unique = FALSE), reference = NULL)
  new_stein_points(out, res, list(
    radius2 = radius2, criterion_type = method, optimizer = optimizer,
    truncation = if (truncation == "none") NULL else
      list(rule = truncation, c2 = c2),
    control = ctl))
}

# The one constructor of kb_stein_points: the kb_thin of the points
# (new_thin()) with the search's record (`res`: criterion,
# criterion_start, n_eval, candidates) and its settings (radius2,
# criterion_type, optimizer, truncation, NULL for none, and control).
new_stein_points <- function(thin, res, settings) {
  out <- c(unclass(thin),
           list(criterion = res$criterion,
                criterion_start = res$criterion_start, n_eval = res$n_eval,
                radius2 = settings$radius2,
                criterion_type = settings$criterion_type,
                optimizer = settings$optimizer,
                truncation = settings$truncation,
                control = settings$control, candidates = res$candidates))
  structure(out, class = c("kb_stein_points", class(thin)))
}

# The kernel of a Stein Points run, resolved without a sample: heuristics
# that need one are refused.
sp_kernel <- function(kernel, d) {
  check_kernel(kernel)
  if (is.character(kernel$precon) && kernel$precon != "id") {
    stop_arg("kernel", sprintf(paste0(
      "has precon = \"%s\", a heuristic computed on a sample; Stein Points ",
      "have none: give precon = \"id\", a number h2 (L = I / h2) or a ",
      "matrix (or gaussian_kernel(bandwidth = ))"), kernel$precon))
  }
  if (is.matrix(kernel$precon) && nrow(kernel$precon) != d) {
    stop_arg("kernel", sprintf(paste0("has a %d x %d preconditioner; the ",
                                      "target has dimension %d"),
                               nrow(kernel$precon), ncol(kernel$precon), d))
  }
  resolve_kernel(kernel, matrix(0, 1L, d), arg = "the target")
}

# `control` checked and completed with its defaults.
sp_control <- function(control, d, n, optimizer) {
  if (!is.list(control) || (length(control) && (is.null(names(control)) ||
                                                any(names(control) == "")))) {
    stop_arg("control", "must be a named list (see ?stein_points)")
  }
  bad <- setdiff(names(control), sp_control_names)
  if (length(bad)) {
    stop_arg("control", sprintf("has unknown setting(s) %s; known: %s",
                                paste(sQuote(bad, FALSE), collapse = ", "),
                                paste(sp_control_names, collapse = ", ")))
  }
  arg <- function(nm) sprintf("control$%s", nm)
  get <- function(nm, default) if (is.null(control[[nm]])) default else
    control[[nm]]
  ctl <- list()
  ctl$n_candidates <- check_count(get("n_candidates", 100L),
                                  arg("n_candidates"))
  mu0 <- get("mu0", rep(0, d))
  if (is.numeric(mu0) && length(mu0) == 1L) mu0 <- rep(mu0, d)
  if (!is.numeric(mu0) || length(mu0) != d || any(!is.finite(mu0))) {
    stop_arg(arg("mu0"), sprintf("must be %d finite numbers (or one)", d))
  }
  ctl$mu0 <- as.double(mu0)
  cv <- check_cov(get("cov0", 5), d, arg("cov0"))
  ctl$cov0 <- cv$cov
  ctl$chol0 <- cv$chol
  ctl$lambda <- check_number(get("lambda", 0.5), arg("lambda"), lower = 0,
                             lower_open = TRUE)
  alpha <- get("alpha", NULL)
  ctl$alpha <- if (is.null(alpha)) {
    if (n > 1L) 1 - stats::plogis(8 * (2 * (seq_len(n) - 1) / (n - 1) - 1))
    else 1
  } else if (is.function(alpha)) {
    a <- vapply(seq_len(n), function(j) {
      v <- tryCatch(alpha(j, n), error = function(e) {
        stop_arg(arg("alpha"), sprintf("failed at step j = %d: %s", j,
                                       conditionMessage(e)))
      })
      if (!is.numeric(v) || length(v) != 1L || is.na(v)) NA_real_ else v
    }, 0)
    a
  } else if (is.numeric(alpha) && length(alpha) %in% c(1L, n)) {
    rep_len(as.double(alpha), n)
  } else {
    stop_arg(arg("alpha"), sprintf(paste0(
      "must be a probability, a vector of %d probabilities or a function ",
      "of (j, n)"), n))
  }
  if (anyNA(ctl$alpha) || any(ctl$alpha < 0 | ctl$alpha > 1)) {
    stop_arg(arg("alpha"), "must give probabilities in [0, 1] at every step")
  }
  ctl$n_starts <- check_count(get("n_starts", 3L), arg("n_starts"))
  if (optimizer == "nm" && ctl$n_starts > ctl$n_candidates) {
    stop_arg(arg("n_starts"), sprintf(
      "must be at most control$n_candidates = %d", ctl$n_candidates))
  }
  ctl$reltol <- check_number(get("reltol", 1e-4), arg("reltol"), lower = 0)
  ctl$maxit <- check_count(get("maxit", 200L), arg("maxit"))
  sd0 <- sqrt(diag(ctl$cov0))
  box <- function(nm, default) {
    v <- get(nm, default)
    if (is.numeric(v) && length(v) == 1L) v <- rep(v, d)
    if (!is.numeric(v) || length(v) != d || any(!is.finite(v))) {
      stop_arg(arg(nm), sprintf("must be %d finite numbers (or one)", d))
    }
    as.double(v)
  }
  ctl$lower <- box("lower", ctl$mu0 - 3 * sd0)
  ctl$upper <- box("upper", ctl$mu0 + 3 * sd0)
  if (any(!(ctl$upper > ctl$lower))) {
    stop_arg(arg("upper"), "must be above control$lower in every coordinate")
  }
  gs <- get("grid_size", c(1001L, 101L, 31L)[min(d, 3L)])
  ctl$grid_size <- check_count(gs, arg("grid_size"), min = 2L)
  if (optimizer == "grid") {
    check_memory(8 * (2 * d + 3) * as.double(ctl$grid_size)^d,
                 arg("grid_size"), sprintf("a grid of %.0f points",
                                           as.double(ctl$grid_size)^d))
  }
  ctl$keep_candidates <- check_flag(get("keep_candidates", FALSE),
                                    arg("keep_candidates"))
  ctl
}

# Scores of the target at the rows of y, and the Stein kernel sums of y
# against the points so far (rows 1..m of P, S, in the kernel's basis).
# `rows_of` names y's rows in the score's messages (stein_points() has no
# x: its rows are candidate points).
sp_eval <- function(run, y, P, S, m, rows_of) {
  s <- target_score_rows(run$target, y, rows_of)
  dimnames(s) <- NULL
  rk <- run$rk
  k <- .Call(C_kb_stein_cross_sums, in_basis(y, rk), in_basis(s, rk),
             P[seq_len(m), , drop = FALSE], S[seq_len(m), , drop = FALSE],
             rk, run$nthreads)
  list(s = s, sums = k$sums, diag = k$diag)
}

# The criterion of step j from the sums (Inf outside the truncation set).
sp_criterion <- function(run, k, j) {
  crit <- if (run$method == "greedy") k$diag + 2 * k$sums else
    if (j == 1L) k$diag else k$sums
  if (!is.null(run$radius2) && j > 1L) {
    crit[k$diag > run$radius2[j]] <- Inf
  }
  crit
}

# The Monte Carlo candidates of step j (the authors' adaptive proposal).
sp_candidates <- function(run, X, j) {
  ctl <- run$ctl
  N <- ctl$n_candidates
  d <- run$d
  if (j == 1L || stats::runif(1L) <= ctl$alpha[j]) {
    z <- matrix(stats::rnorm(N * d), N, d) %*% ctl$chol0
    sweep(z, 2L, ctl$mu0, "+")
  } else {
    i <- sample.int(j - 1L, N, replace = TRUE)
    X[i, , drop = FALSE] + sqrt(ctl$lambda) * matrix(stats::rnorm(N * d), N, d)
  }
}

no_feasible <- function(run, j, what) {
  stop_state(sprintf(paste0(
    "no %s at step %d satisfies the truncation k_p(x, x) <= R_j^2 = %s: ",
    "decrease c2, or move the search (control$mu0, control$cov0, ",
    "control$lower / upper) where the score is smaller"), what, j,
    format(run$radius2[j], digits = 4)))
}

# Steps of the "mc" and "nm" optimisers.
sp_search <- function(run, optimizer, prog) {
  n <- run$n
  d <- run$d
  rk <- run$rk
  X <- S <- matrix(0, n, d)          # points and scores
  P <- Sb <- matrix(0, n, d)         # the same in the kernel's basis
  gain <- crit_val <- numeric(n)
  start <- if (optimizer == "nm") numeric(n)
  n_eval <- integer(n)
  cands <- if (run$ctl$keep_candidates) vector("list", n)
  for (j in seq_len(n)) {
    m <- j - 1L
    y <- sp_candidates(run, X, j)
    k <- sp_eval(run, y, P, Sb, m,
                 sprintf("the candidate points of step %d", j))
    crit <- sp_criterion(run, k, j)
    n_eval[j] <- nrow(y)
    if (!any(is.finite(crit))) no_feasible(run, j, "candidate")
    if (!is.null(cands)) cands[[j]] <- list(x = y, criterion = crit)
    best <- which.min(crit)
    x <- y[best, ]
    s <- k$s[best, ]
    v <- crit[best]
    kd <- k$diag[best]
    ks <- k$sums[best]
    if (optimizer == "nm") {
      start[j] <- v
      o <- sp_nelder_mead(run, y, crit, P, Sb, m, j)
      n_eval[j] <- n_eval[j] + o$n_eval
      if (o$value < v) {
        x <- o$x
        s <- o$s
        v <- o$value
        kd <- o$diag
        ks <- o$sums
      }
    }
    X[j, ] <- x
    S[j, ] <- s
    P[j, ] <- in_basis(matrix(x, 1L), rk)
    Sb[j, ] <- in_basis(matrix(s, 1L), rk)
    crit_val[j] <- v
    gain[j] <- kd + 2 * ks
    if (!is.finite(sum(gain[seq_len(j)]))) {
      stop_numeric(sprintf(paste0("the KSD of the first %d Stein points ",
                                  "overflows: rescale the target or the ",
                                  "kernel"), j))
    }
    prog$tick(j, sprintf("KSD %.4g", sqrt(max(sum(gain[seq_len(j)]), 0)) / j))
  }
  colnames(X) <- colnames(S) <- run$target$names
  list(x = X, s = S, gain = gain, criterion = crit_val,
       criterion_start = start, n_eval = n_eval, candidates = cands)
}

# Nelder-Mead runs from the best candidates of step j: the best end point
# (its score and sums kept from the evaluation that found it).
sp_nelder_mead <- function(run, y, crit, P, Sb, m, j) {
  ctl <- run$ctl
  starts <- order(crit)[seq_len(ctl$n_starts)]
  starts <- starts[is.finite(crit[starts])]
  best <- list(value = Inf)
  count <- 0L
  f <- function(z) {
    count <<- count + 1L
    k <- sp_eval(run, matrix(z, 1L), P, Sb, m,
                 sprintf("the Nelder-Mead trial points of step %d", j))
    v <- sp_criterion(run, k, j)
    if (v < best$value) {
      best <<- list(value = v, x = z, s = k$s[1L, ], diag = k$diag,
                    sums = k$sums)
    }
    v
  }
  for (i in starts) {
    withCallingHandlers(
      stats::optim(y[i, ], f, method = "Nelder-Mead",
                   control = list(reltol = ctl$reltol, maxit = ctl$maxit)),
      warning = function(w) {
        # optim() warns that one-dimensional Nelder-Mead is unreliable:
        # here it only polishes the best candidates
        if (grepl("one-dimensional", conditionMessage(w), fixed = TRUE)) {
          invokeRestart("muffleWarning")
        }
      })
  }
  best$n_eval <- count
  best
}

# The "grid" optimiser: scores on the grid once; the criterion's sums kept
# over the grid and updated by one row of Stein kernel values per step.
sp_grid <- function(run, prog) {
  n <- run$n
  d <- run$d
  rk <- run$rk
  ctl <- run$ctl
  axes <- lapply(seq_len(d), function(k) {
    seq(ctl$lower[k], ctl$upper[k], length.out = ctl$grid_size)
  })
  G <- as.matrix(expand.grid(axes, KEEP.OUT.ATTRS = FALSE))
  dimnames(G) <- NULL
  none <- matrix(0, 0L, d)
  k <- sp_eval(run, G, none, none, 0L, "the grid of candidate points")
  Gb <- in_basis(G, rk)
  SGb <- in_basis(k$s, rk)
  sums <- numeric(nrow(G))
  idx <- integer(n)
  gain <- crit_val <- numeric(n)
  n_eval <- integer(n)
  n_eval[1L] <- nrow(G)
  for (j in seq_len(n)) {
    crit <- sp_criterion(run, list(diag = k$diag, sums = sums), j)
    if (!any(is.finite(crit))) no_feasible(run, j, "grid point")
    i <- which.min(crit)
    idx[j] <- i
    crit_val[j] <- crit[i]
    gain[j] <- k$diag[i] + 2 * sums[i]
    if (!is.finite(sum(gain[seq_len(j)]))) {
      stop_numeric(sprintf(paste0("the KSD of the first %d Stein points ",
                                  "overflows: rescale the target or the ",
                                  "kernel"), j))
    }
    if (j < n) {
      row <- .Call(C_kb_stein_cross_sums, Gb, SGb, Gb[i, , drop = FALSE],
                   SGb[i, , drop = FALSE], rk, run$nthreads)
      sums <- sums + row$sums
    }
    prog$tick(j, sprintf("KSD %.4g", sqrt(max(sum(gain[seq_len(j)]), 0)) / j))
  }
  X <- G[idx, , drop = FALSE]
  S <- k$s[idx, , drop = FALSE]
  colnames(X) <- colnames(S) <- run$target$names
  list(x = X, s = S, gain = gain, criterion = crit_val,
       criterion_start = NULL, n_eval = n_eval, candidates = NULL)
}

#' @export
print.kb_stein_points <- function(x, ...) {
  check_result(x)
  cat(sprintf("%s: %d points in dimension %d\n", x$method, x$m, x$d))
  cat("  kernel:", describe_ksd_kernel(x$kernel, NULL), "\n")
  if (!is.null(x$truncation)) {
    cat(sprintf("  truncation: \"%s\", c2 = %s (R_j^2 = 2 log(%s) / c2)\n",
                x$truncation$rule, format(x$truncation$c2),
                if (x$truncation$rule == "lower") "j" else "n"))
  }
  cat(sprintf("  score evaluations: %s\n", format_count(sum(x$n_eval))))
  cat(sprintf("  KSD of the points: %s (this kernel; ksd(x) recomputes it)\n",
              format(x$ksd[x$m], digits = 6)))
  invisible(x)
}

#' @export
summary.kb_stein_points <- function(object, ...) {
  check_result(object, "object")
  j <- unique(pmax(1L, round(object$m * c(0.1, 0.25, 0.5, 1))))
  structure(list(method = object$method, m = object$m, d = object$d,
                 kernel = describe_ksd_kernel(object$kernel, NULL),
                 n_eval = sum(object$n_eval),
                 path = stats::setNames(object$ksd[j], j),
                 mean = colMeans(object$points),
                 sd = if (object$m > 1L) apply(object$points, 2L, stats::sd)),
            class = "summary.kb_stein_points")
}

#' @export
print.summary.kb_stein_points <- function(x, ...) {
  cat(sprintf("%s: %d points, d = %d, %s score evaluations\n", x$method,
              x$m, x$d, format_count(x$n_eval)))
  cat("  kernel:", x$kernel, "\n")
  cat("  KSD of the first j points:\n")
  print(signif(x$path, 4))
  cat("  column means and standard deviations of the points:\n")
  print(signif(rbind(mean = x$mean, sd = x$sd), 4))
  invisible(x)
}
