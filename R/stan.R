# Stan and brms fits: targets on the unconstrained scale, and draws moved
# between the constrained and unconstrained scales.  rstan does the work
# (log_prob, grad_log_prob, unconstrain_pars, constrain_pars: one point per
# call); this file names the coordinates, orders the draws and checks.

#' A Stan fit as a target on the unconstrained scale
#'
#' Turns a fitted Stan model (an rstan `stanfit`, or a `brmsfit` through its
#' `$fit`) into a [kb_target] whose log density and score are those that
#' Stan's sampler works with: the log density of the *unconstrained*
#' parameters, Jacobian of the constraining transform included
#' (`rstan::log_prob(fit, u, adjust_transform = TRUE)` and
#' `rstan::grad_log_prob(fit, u, adjust_transform = TRUE)`).
#'
#' @section Why the unconstrained scale:
#' KSD and Stein thinning rest on the Stein identity \eqn{E_p[A_p f] = 0},
#' which holds on all of \eqn{R^d} when \eqn{p} is smooth and positive
#' everywhere. Constrained parameters break this: a scale `tau > 0` has a
#' density on \eqn{(0, \infty)} that need not vanish at 0 (a half-Cauchy
#' prior does not), so integration by parts leaves a boundary term and the
#' discrepancy of exact draws does not go to zero; a simplex has no density
#' on \eqn{R^K} at all. Stan samples on the unconstrained scale
#' (`log(tau)`, `logit`-type coordinates of a simplex), where the density
#' (with the Jacobian of the transform) is smooth and positive on
#' \eqn{R^d}; its gradient there is the score Stan's HMC already computes.
#' So the points (see [unconstrain_draws()]) and the scores must both be on
#' that scale; [constrain_draws()] maps selected points back.
#'
#' @section Names of the coordinates:
#' Unconstrained coordinates follow Stan's order: parameters in declaration
#' order, their coordinates in Stan's layout (arrays row-major, vectors and
#' matrices column-major). Each coordinate is named after what it is, the
#' element of the parameter through Stan's transform of it:
#'
#' | declaration | coordinate | name |
#' |---|---|---|
#' | `real mu` (no constraint) | \eqn{\mu} | `mu` |
#' | `real<lower=0> tau` | \eqn{\log \tau} | `log(tau)` |
#' | `real<lower=a> x` | \eqn{\log(x - a)} | `log(x - 1.5)`, `log(x + 2)` |
#' | `real<upper=b> x` | \eqn{\log(b - x)} | `log(-x)`, `log(3 - x)` |
#' | `real<lower=0, upper=1> p` | \eqn{\mathrm{logit}(p)} | `logit(p)` |
#' | `real<lower=a, upper=b> x` | \eqn{\mathrm{logit}((x - a)/(b - a))} | `logit(x/2)`, `logit((x + 1)/4)` |
#' | `real<offset=m, multiplier=s> x` | \eqn{(x - m)/s} | `(x - 1)/2`, `x/2` |
#' | anything else | | `unc(w)[k]`, `unc(x)` |
#'
#' with the bounds as numbers (at most 10 significant digits), and elements
#' named as Stan names them (`log(s[1])`, `B[2,1]`, `log(arr[1,2])`).
#' `unc(w)[k]` is the k-th unconstrained coordinate of parameter `w`
#' (`unc(x)` for a scalar): a coordinate that is no element of `w` through a
#' scalar transform. It names every coordinate of a parameter with fewer
#' coordinates than elements (a `simplex[K]` has K - 1, a `cov_matrix[K]`
#' K(K + 1) / 2, Cholesky factors and correlation matrices fewer too) and
#' those of `ordered`, `positive_ordered` and `unit_vector` after the ones
#' that are plain (`od[1]`, `unc(od)[2]`), and bounds that depend on other
#' parameters (`real<lower=mu> x` gives `unc(x)`).
#'
#' rstan does not report constraints, so the transforms are found from the
#' model itself: it constrains a few fixed unconstrained points (no random
#' numbers are drawn), and a coordinate is named after a transform only
#' when that transform reproduces the constrained values there to rounding
#' (which also tells arrays from matrices). If the model cannot constrain
#' those points (a transformed parameter or generated quantity that fails
#' there), every coordinate is named `unc(...)`. Where the fit stores an
#' element under another name (brms calls `b[1]` `b_x`, and its `sigma` is
#' `log(sigma)` here), that name is used; parameters brms does not store
#' keep Stan's names (`Intercept`), and [unconstrain_draws()] needs them
#' stored (`save_pars = brms::save_pars(all = TRUE)` in `brms::brm()`).
#'
#' These names travel to every result of the fit: the columns of its points
#' and scores, [print()] and [plot()], and
#' `as_draws_df(result, scale = "unconstrained")`; the constrained draws
#' (the default scale) keep the fit's own names.
#'
#' @section A fit read from a file:
#' A stanfit keeps its model instance (with the data) as an external
#' pointer, which does not survive `saveRDS()`/`readRDS()` or a new session;
#' `stan_target()` then stops with an error. Recreate the instance without
#' recompiling or resampling: `fit@.MISC <- rstan::stan(fit = fit, data =
#' data, chains = 0)@.MISC`, with the data the fit was made with (for a
#' brmsfit, `b$fit@.MISC <- rstan::stan(fit = b$fit, data =
#' brms::standata(b), chains = 0)@.MISC`). A target saved with
#' `saveRDS()` and read back (or in a new session) has lost its instance
#' too: its log density and score stop, before calling rstan, with an
#' error of class `kb_error_state` saying so (`kb_error_arg` naming
#' `target` when it is given to a function of this package); call
#' `stan_target()` again. For the same reason the target
#' cannot be used by `future` workers in other processes: [ksdt_chains()]
#' refuses it under such a plan (multisession, cluster, batchtools) before
#' any chain runs, with an error of class `kb_error_arg` naming `target`
#' (forked workers, `future::plan(future::multicore)`, share this session's
#' model and can). A fit given as `x` to [ksd_blocks()] works under any
#' plan: its draws and gradients are computed here and the workers get
#' matrices.
#'
#' @section Draws and gradients computed once:
#' The functions that take a sample with scores ([ksd()], [ksd_path()],
#' [ksd_test()], [fssd_test()], [ksd_blocks()], [stein_thin()],
#' [ksd_weights()], [ksdt()], [kernel_thin()], ...) take the fit itself as
#' `x` and use its post-warmup draws on the unconstrained scale
#' ([unconstrain_draws()]) with their gradients
#' (one `rstan::grad_log_prob()` call per draw: the costly part, in
#' proportion to the model's cost). These are computed on the first call
#' and kept, with the draws as [posterior::as_draws_df()] gives them, for
#' the next calls on the same fit: after `ksd(fit)`, `stein_thin(fit)` and
#' `ksd_test(fit)` cost what they cost on matrices (on eight schools with
#' 4000 draws the first `ksd(fit)` took about 0.5 s and the next 0.09 s,
#' the time of `ksd()` on the matrices; `stein_thin(fit, m = 20)` after it
#' 0.01 s instead of 0.37 s).
#'
#' A fit is the same when its model instance (`fit@.MISC`, which holds it)
#' is the same object and its stored draws (`fit@sim`: every draw of every
#' chain, warmup included, and their names) are `identical()`: a copy of
#' the fit with one draw changed, a fit resampled or with its instance
#' recreated is a new fit, whose draws and gradients are computed anew;
#' kept gradients are never used for other draws. The last 4 fits are kept
#' (least recently used dropped first); `options(kernbayes.stan_cache = k)`
#' keeps `k`, and `0` none. An entry holds the unconstrained draws, their
#' gradients and the constrained draws (about three times the fit's
#' post-warmup draws) and a reference to the fit's draws, which stay in
#' memory while kept; [clear_stan_cache()] drops every entry.
#'
#' @param fit A `stanfit` (rstan) or a `brmsfit` (brms) with its model
#'   instance (see "A fit read from a file"). A fit made with `chains = 0`
#'   (no draws) is fine here.
#' @return A `kb_target` (see [kb_target()]) with `dim` =
#'   `rstan::get_num_upars(fit)`, vectorised closures (one rstan call per row
#'   of a matrix of unconstrained points) and `name` "Stan model <name>".
#'   The score returns a matrix whose column names are the coordinates'
#'   names (see "Names of the coordinates").
#' @seealso [unconstrain_draws()], [constrain_draws()]; [ksd()] and
#'   [stein_thin()] take a fit directly; [clear_stan_cache()].
#' @examples
#' # not run by R CMD check: compiling the Stan model takes a minute or more
#' \dontrun{
#' if (requireNamespace("rstan", quietly = TRUE) &&
#'     nzchar(system.file("include", package = "BH"))) {
#'   code <- "
#'     parameters { real<lower=0> tau; }
#'     model { tau ~ exponential(1); }"
#'   m <- rstan::stan_model(model_code = code)   # about a minute
#'   fit <- rstan::sampling(m, seed = 1, refresh = 0, iter = 2000)
#'   tg <- stan_target(fit)
#'   u <- unconstrain_draws(fit)                 # the column log(tau)
#'   # the score of log(tau): 1 - tau (Jacobian included)
#'   print(cbind(target_score(tg, u[1:5, , drop = FALSE]), 1 - exp(u[1:5])))
#'   # exact draws of tau ~ Exp(1): on the constrained scale (score -1, a
#'   # density that is 1, not 0, at the boundary) their KSD stays near 1 as
#'   # n grows; on the unconstrained scale it goes to 0
#'   tau <- matrix(rexp(2000))
#'   c(constrained = ksd(tau, -1 + 0 * tau),
#'     unconstrained = ksd(log(tau), target_score(tg, log(tau))))
#' }
#' }
#' @export
stan_target <- function(fit) {
  sf <- stan_fit_of(fit, "fit")
  d <- stan_num_upars(sf, "fit")
  nm <- stan_upar_layout(sf)$names
  # the target keeps the model instance, not the draws
  sf@sim$samples <- NULL
  rows <- function(x) {
    if (is.null(dim(x))) x <- matrix(x, 1L)
    x
  }
  log_density <- function(x) {
    stan_check_instance(sf)
    x <- rows(x)
    vapply(seq_len(nrow(x)), function(i) {
      rstan::log_prob(sf, x[i, ], adjust_transform = TRUE, gradient = FALSE)
    }, 0)
  }
  score <- function(x) {
    stan_check_instance(sf)
    x <- rows(x)
    g <- matrix(0, nrow(x), d, dimnames = list(NULL, nm))
    for (i in seq_len(nrow(x))) {
      g[i, ] <- rstan::grad_log_prob(sf, x[i, ], adjust_transform = TRUE)
    }
    g
  }
  new_stan_target(new_target(log_density, score, d, TRUE, FALSE, NULL,
                             paste("Stan model", sf@model_name), names = nm))
}

# A target's model instance is an external pointer of rstan's that
# saveRDS()/readRDS() and a new session leave invalid; rstan then fails
# with "the model object is not created or not valid".  Checked (one cheap
# call into the instance) before rstan evaluates anything: an error naming
# `arg` when given (check_target()), else a kb_error_state (the target's
# closures called directly).
stan_check_instance <- function(sf, arg = NULL) {
  ok <- tryCatch(is.numeric(rstan::get_num_upars(sf)),
                 error = function(e) FALSE)
  if (ok) return(invisible(sf))
  why <- paste0("model instance is no longer valid (a target saved and ",
                "reloaded with saveRDS()/readRDS(), or made in another R ",
                "session, keeps no model): call stan_target(fit) again in ",
                "this session")
  if (is.null(arg)) stop_state("the Stan target's ", why)
  stop_arg(arg, "is a Stan target whose ", why)
}

# check_target() of a target from stan_target(): its model instance, found
# in its closures' environment.
check_stan_target <- function(target, arg) {
  sf <- environment(target$log_density)[["sf"]]
  if (inherits(sf, "stanfit")) stan_check_instance(sf, arg)
  invisible(target)
}

# The one constructor of kb_stan_target: a kb_target (new_target()) whose
# closures work only in this process (check_target_futures()).
new_stan_target <- function(target) {
  structure(target, class = c("kb_stan_target", class(target)))
}

#' Move Stan draws between the constrained and unconstrained scales
#'
#' `unconstrain_draws()` maps constrained parameter values (the draws of a
#' fit, or values given) to points of the unconstrained space of
#' [stan_target()]; `constrain_draws()` maps unconstrained points back to
#' all the fit's quantities. Both use rstan's `unconstrain_pars()` /
#' `constrain_pars()`, one draw at a time.
#'
#' @param fit A `stanfit` or `brmsfit` with its model instance (see
#'   [stan_target()]).
#' @param draws `NULL` for all post-warmup draws of `fit` (chain 1 in
#'   iteration order, then chain 2, ..., as [posterior::as_draws_df()] orders
#'   them); or constrained values of the parameters: a posterior draws
#'   object, a data frame or a matrix with columns named as Stan names the
#'   elements (`mu`, `theta[1]`, `B[2,1]`; other columns are ignored), or a
#'   named list of one value per parameter (one point; arrays in Stan's
#'   shape or flattened column-major).
#' @param upars Unconstrained points: a matrix (or data frame) with one row
#'   per point and one column per unconstrained coordinate, columns unnamed
#'   or named as `unconstrain_draws()` names them; a vector is one point
#'   (its names, if it has them, are matched in the same way); or a
#'   posterior draws object of them (its variables are the columns, its
#'   `.chain`, `.iteration` and `.draw` are not). Points of another width
#'   than the fit's number of unconstrained coordinates are an error
#'   naming `upars` and that number.
#' @return `unconstrain_draws()`: an `n x d` matrix, `d =
#'   rstan::get_num_upars(fit)`, with column names as described in
#'   [stan_target()]. `constrain_draws()`: a [posterior::draws_df()] with one
#'   row per row of `upars` (chain 1, iterations 1..n) and a column per
#'   element of the parameters, transformed parameters and generated
#'   quantities (generated quantities that use random numbers are fresh
#'   draws, not those of the fit).
#' @examples
#' # not run by R CMD check: compiling the Stan model takes a minute or more
#' \dontrun{
#' if (requireNamespace("rstan", quietly = TRUE) &&
#'     requireNamespace("posterior", quietly = TRUE) &&
#'     nzchar(system.file("include", package = "BH"))) {
#'   code <- "
#'     parameters { simplex[3] w; real<lower=0> s; }
#'     model { w ~ dirichlet(rep_vector(2, 3)); s ~ lognormal(0, 1); }"
#'   m <- rstan::stan_model(model_code = code)
#'   fit <- rstan::sampling(m, seed = 1, refresh = 0, chains = 2, iter = 400)
#'   u <- unconstrain_draws(fit)   # columns unc(w)[1], unc(w)[2], log(s)
#'   print(head(u))
#'   print(constrain_draws(fit, u[1:3, ]))
#'   unconstrain_draws(fit, list(w = c(0.2, 0.3, 0.5), s = 1))
#' }
#' }
#' @export
unconstrain_draws <- function(fit, draws = NULL) {
  sf <- stan_fit_of(fit, "fit")
  stan_num_upars(sf, "fit")
  lay <- stan_upar_layout(sf)
  vals <- if (is.null(draws)) {
    stan_check_draws(sf, "fit")
    a <- rstan::extract(sf, permuted = FALSE, inc_warmup = FALSE)
    # iterations x chains x elements -> rows chain-major
    a <- matrix(a, dim(a)[1L] * dim(a)[2L], dim(a)[3L],
                dimnames = list(NULL, dimnames(a)[[3L]]))
    stan_stored_values(a, lay, "fit")
  } else {
    stan_constrained_values(draws, lay, "draws")
  }
  stan_unconstrain_rows(sf, vals, lay, if (is.null(draws)) "fit" else "draws")
}

# For a message on upars of the wrong width: the named columns that are
# not unconstrained coordinates (constrained draws' lp__, tau, ...).
stan_extra_columns <- function(cn, nm) {
  extra <- setdiff(cn, nm)
  if (!length(extra)) return("")
  sprintf(" (%s not among the unconstrained coordinates%s)",
          paste(utils::head(extra, 4L), collapse = ", "),
          if (length(extra) > 4L) ", ..." else "")
}

#' @rdname unconstrain_draws
#' @export
constrain_draws <- function(fit, upars) {
  sf <- stan_fit_of(fit, "fit")
  d <- stan_num_upars(sf, "fit")
  if (!requireNamespace("posterior", quietly = TRUE)) {
    stop_arg("fit", "cannot be turned into draws: package 'posterior' is ",
             "not installed")
  }
  lay <- stan_upar_layout(sf)
  nm <- lay$names
  if (missing(upars)) stop_arg("upars", "is missing: give unconstrained points")
  if (inherits(upars, "draws")) {
    # a posterior draws object (df, matrix, array, list, rvars): its
    # variables, without the .chain / .iteration / .draw columns that
    # as.matrix() of a draws_df would count as coordinates
    upars <- posterior::as_draws_matrix(upars)
    upars <- matrix(as.numeric(upars), nrow(upars),
                    dimnames = list(NULL, posterior::variables(upars)))
  }
  if (is.data.frame(upars)) {
    ok <- vapply(upars, is.numeric, TRUE)
    if (!all(ok)) stop_arg("upars", "must contain only numeric columns")
    upars <- as.matrix(upars)
  }
  if (is.numeric(upars) && is.null(dim(upars))) {
    # one point; its names, if any, are matched like a matrix's columns
    upars <- matrix(upars, 1L, dimnames = list(NULL, names(upars)))
  }
  if (!is.matrix(upars) || !is.numeric(upars)) {
    stop_arg("upars", "must be a numeric matrix of unconstrained points ",
             "(one row per point), a data frame or one point as a vector")
  }
  if (ncol(upars) != d) {
    stop_arg("upars", sprintf(paste0("must have %d columns, one per ",
                                     "unconstrained parameter of the fit; ",
                                     "it has %d%s"), d, ncol(upars),
                              stan_extra_columns(colnames(upars), nm)))
  }
  cn <- colnames(upars)
  if (!is.null(cn) && !identical(cn, nm)) {
    if (!setequal(cn, nm) || anyDuplicated(cn)) {
      # a constrained element's name for the coordinate of its transform
      el <- lay$label(unlist(lapply(lay$pars, function(p) {
        stan_flat_names(p, lay$dims[[p]])
      }), use.names = FALSE))
      hint <- ""
      for (e in setdiff(intersect(cn, el), nm)) {
        co <- nm[stan_mentions(nm, e)]
        if (length(co) == 1L) {
          hint <- sprintf(": the coordinate of '%s' is '%s'", e, co)
          break
        }
      }
      stop_arg("upars", "has column names that are not the fit's ",
               "unconstrained coordinates (", stan_name_list(nm), "; ",
               "named after their transforms, see ?stan_target)", hint)
    }
    upars <- upars[, nm, drop = FALSE]
  }
  if (nrow(upars) < 1L) stop_arg("upars", "must have at least one row")
  if (any(!is.finite(upars))) {
    stop_arg("upars", "must not contain NA, NaN or Inf")
  }
  storage.mode(upars) <- "double"
  out <- NULL
  i <- 0L
  tryCatch(for (i in seq_len(nrow(upars))) {
    v <- rstan::constrain_pars(sf, upars[i, ])
    if (is.null(out)) {
      cols <- lay$label(unlist(lapply(names(v), function(p) {
        stan_flat_names(p, as.integer(sf@par_dims[[p]]))
      }), use.names = FALSE))
      out <- matrix(NA_real_, nrow(upars), length(cols),
                    dimnames = list(NULL, cols))
    }
    out[i, ] <- unlist(v, use.names = FALSE)
  }, error = function(e) {
    stop_arg("upars", sprintf("row %d cannot be constrained: %s", i,
                              trimws(conditionMessage(e))))
  })
  # finite unconstrained values whose transform overflows (log(tau) = 800)
  # give parameters of Inf or NaN
  pv <- out[, intersect(lay$columns, colnames(out)), drop = FALSE]
  if (!all_finite(pv)) {
    bad <- which(!is.finite(pv), arr.ind = TRUE)[1L, ]
    stop_arg("upars", sprintf(paste0(
      "row %d constrains to a non-finite value of '%s' (%s): its ",
      "unconstrained coordinates are too large for the transform"),
      bad[1L], colnames(pv)[bad[2L]], format(pv[bad[1L], bad[2L]])))
  }
  posterior::as_draws_df(out)
}

# Internal: what the functions that take x and score make of a Stan fit (the
# fields of a kb_sample, as_sample()'s result in draws.R).  x: unconstrained
# post-warmup draws, chain-major as posterior::as_draws_df() orders them;
# score: the gradients there (Jacobian included); chain, iteration: integer
# labels per row; draws: posterior::as_draws_df() of the stanfit (the fit's
# names, lp__ kept), one row per row of x; target: stan_target().  All of it is
# kept in stan_memo (below) and reused while the fit is the same, so that
# ksd(fit), stein_thin(fit), ... on one fit evaluate its gradients once.
stan_sample <- function(fit, progress = NULL, gradients = TRUE) {
  sf <- stan_fit_of(fit, "x")
  d <- stan_num_upars(sf, "x")
  stan_check_draws(sf, "x")
  progress <- check_progress(progress)
  if (!requireNamespace("posterior", quietly = TRUE)) {
    stop_arg("x", "is a Stan fit but package 'posterior' is not installed")
  }
  s <- stan_memo_get(sf)
  if (is.null(s)) {
    lay <- stan_upar_layout(sf)
    draws <- posterior::as_draws_df(sf)
    vals <- stan_stored_values(as.matrix(as.data.frame(draws)), lay, "x")
    s <- list(x = stan_unconstrain_rows(sf, vals, lay, "x"), score = NULL,
              chain = as.integer(draws$.chain),
              iteration = as.integer(draws$.iteration), draws = draws,
              target = stan_target(sf))
  }
  if (gradients && is.null(s$score)) {
    s$score <- stan_gradients(sf, s$x, progress)
  }
  stan_memo_put(sf, s)
  if (!gradients) s$score <- NULL
  s
}

# The gradients of the log density (Jacobian included) at the rows of x,
# one rstan call per row; the only place a fit's gradients are evaluated
# (stan_memo$evaluations counts the rows, for the tests).
stan_gradients <- function(sf, x, progress) {
  n <- nrow(x)
  score <- matrix(0, n, ncol(x), dimnames = list(NULL, colnames(x)))
  prog <- progress_reporter(n, "Stan gradients", progress)
  on.exit(prog$done())
  for (i in seq_len(n)) {
    score[i, ] <- rstan::grad_log_prob(sf, x[i, ], adjust_transform = TRUE)
    prog$tick(i)
  }
  stan_memo$evaluations <- stan_memo$evaluations + n
  score
}

# ---- the fits' samples, kept: gradients are evaluated once per fit -----------

# The samples of the last few fits (LRU, most recent first; option
# kernbayes.stan_cache, default 4, 0 keeps none).  An entry is valid for a
# stanfit with the same model instance (the environment sf@.MISC, where
# rstan keeps it, and the instance itself: a fit whose instance is
# recreated is a new fit) and identical sf@sim (every stored draw, warmup
# and post-warmup, the chains and their order, the names): identical() is
# immediate for the unchanged fit (the same vector) and a full comparison
# for a modified copy, so a changed draw is never served stale gradients.
# An entry keeps the fit's sim (shared with the fit while it exists, not
# copied) beside x, score and draws.
stan_memo <- new.env(parent = emptyenv())
stan_memo$entries <- list()
stan_memo$evaluations <- 0

stan_memo_size <- function() {
  k <- getOption("kernbayes.stan_cache", 4L)
  if (!is.numeric(k) || length(k) != 1L || is.na(k) || k < 0 ||
      k != round(k)) {
    stop_arg("kernbayes.stan_cache", "(option) must be a whole number of ",
             "fits to keep, 0 to keep none")
  }
  k
}

stan_memo_match <- function(e, sf) {
  identical(e$misc, sf@.MISC) &&
    identical(e$instance, sf@.MISC$stan_fit_instance) &&
    identical(e$sim, sf@sim)
}

stan_memo_get <- function(sf) {
  if (stan_memo_size() == 0) return(NULL)
  for (e in stan_memo$entries) {
    if (stan_memo_match(e, sf)) return(e$sample)
  }
  NULL
}

stan_memo_put <- function(sf, s) {
  k <- stan_memo_size()
  old <- stan_memo$entries
  keep <- old[!vapply(old, stan_memo_match, TRUE, sf)]
  if (k == 0) {
    stan_memo$entries <- list()
    return(invisible(NULL))
  }
  e <- list(misc = sf@.MISC, instance = sf@.MISC$stan_fit_instance,
            sim = sf@sim, sample = s)
  stan_memo$entries <- utils::head(c(list(e), keep), k)
  invisible(NULL)
}

#' Forget the draws and gradients kept from Stan fits
#'
#' The functions that take a Stan or brms fit as `x` ([ksd()],
#' [ksd_test()], [stein_thin()], [ksdt()], ...) evaluate its unconstrained
#' draws and their gradients once and keep them for the next call on the
#' same fit (see "Draws and gradients computed once" in [stan_target()]).
#' `clear_stan_cache()` drops what is kept, e.g. to free the memory.
#'
#' @return The number of fits forgotten, invisibly.
#' @seealso [stan_target()]; `options(kernbayes.stan_cache = 0)` keeps
#'   nothing.
#' @examples
#' clear_stan_cache()
#' @export
clear_stan_cache <- function() {
  n <- length(stan_memo$entries)
  stan_memo$entries <- list()
  invisible(n)
}

# TRUE when the future framework evaluates kb_lapply()'s tasks in this
# process or in forks of it, where the closures of a Stan target (rstan's
# model instance, an external pointer) work; FALSE for workers in other
# processes (multisession, cluster, callr, batchtools, ...), which get the
# target without its model.
futures_share_process <- function() {
  if (!requireNamespace("future.apply", quietly = TRUE)) return(TRUE)
  inherits(future::plan(), c("sequential", "uniprocess", "multicore"))
}

# A kb_error_arg naming arg when a Stan target would be sent to future
# workers in other processes (rstan's own error there is "the model object
# is not created or not valid", chain after chain).
check_target_futures <- function(target, arg) {
  if (inherits(target, "kb_stan_target") && !futures_share_process()) {
    stop_arg(arg, "is a Stan target (stan_target()), whose model exists ",
             "only in this R session: the workers of the current future ",
             "plan run in other processes and cannot evaluate it; use ",
             "future::plan(future::sequential), or ",
             "future::plan(future::multicore) (forked workers) where ",
             "forking is supported")
  }
  invisible(target)
}

# ---- internals ---------------------------------------------------------------

# The stanfit of a stanfit or brmsfit, else a kb_error_arg naming arg.
stan_fit_of <- function(fit, arg) {
  if (missing(fit)) {
    stop_arg(arg, "is missing: give a stanfit (rstan) or a brmsfit (brms)")
  }
  if (inherits(fit, "stanmodel")) {
    stop_arg(arg, "is a compiled Stan model without data or draws; fit it ",
             "first, e.g. rstan::sampling(model, data = data)")
  }
  if (inherits(fit, "brmsfit")) {
    if (!inherits(fit$fit, "stanfit")) {
      stop_arg(arg, "is a brmsfit without a Stan fit (made with ",
               "empty = TRUE or by another backend?); fit it with ",
               "backend = \"rstan\"")
    }
    if (identical(fit$backend, "cmdstanr")) {
      stop_arg(arg, "is a brmsfit made with backend = \"cmdstanr\", whose ",
               "Stan fit has no model to evaluate; fit it with ",
               "backend = \"rstan\"")
    }
    fit <- fit$fit
  } else if (!inherits(fit, "stanfit")) {
    stop_arg(arg, "must be a stanfit (rstan) or a brmsfit (brms); got ",
             "an object of class ", paste(class(fit), collapse = "/"))
  }
  if (!requireNamespace("rstan", quietly = TRUE)) {
    stop_arg(arg, "is a Stan fit but package 'rstan' is not installed")
  }
  fit
}

# Number of unconstrained parameters; the model instance must be alive.
stan_num_upars <- function(sf, arg) {
  d <- tryCatch(rstan::get_num_upars(sf), error = function(e) NULL)
  if (is.null(d)) {
    stop_arg(arg, "has no Stan model instance (a fit read from a file, ",
             "made in another R session or from CmdStan CSV files?); ",
             "recreate it with ",
             "fit@.MISC <- rstan::stan(fit = fit, data = data, ",
             "chains = 0)@.MISC (for a brmsfit b: b$fit@.MISC <- ",
             "rstan::stan(fit = b$fit, data = brms::standata(b), ",
             "chains = 0)@.MISC)")
  }
  if (d < 1L) stop_arg(arg, "has no parameters to sample")
  as.integer(d)
}

stan_check_draws <- function(sf, arg) {
  n <- if (sf@mode == 0L) sum(sf@sim$n_save - sf@sim$warmup2) else 0
  if (sf@mode != 0L || !(n > 0)) {
    stop_arg(arg, "has no draws after warmup (a fit made with chains = 0, ",
             "test_grad = TRUE, or whose sampling failed); sample first")
  }
  invisible(sf)
}

# The unconstrained coordinates of a fit: the parameters (in declaration
# order), the columns of their constrained elements in Stan's names, the
# dimensions and the coordinate names (rule in ?stan_target).  Stan's list
# of unconstrained names ("w.1", "w.2", "s") gives each parameter's
# unconstrained size; Stan identifiers contain no '.'.
stan_upar_layout <- function(sf) {
  un <- tryCatch(sf@.MISC$stan_fit_instance$unconstrained_param_names(FALSE,
                                                                      FALSE),
                 error = function(e) NULL)
  if (is.null(un)) {
    stop(kb_error(paste0("this version of rstan does not give the names of ",
                         "unconstrained parameters"), "kb_error_state"))
  }
  base <- sub("\\..*$", "", un)
  pars <- unique(base)
  dims <- lapply(pars, function(p) as.integer(sf@par_dims[[p]]))
  names(dims) <- pars
  label <- stan_labels(sf)
  columns <- label(unlist(lapply(pars, function(p) {
    stan_flat_names(p, dims[[p]])
  }), use.names = FALSE))
  nms <- stan_upar_names(sf, pars, dims, base, label)
  list(pars = pars, dims = dims, columns = columns, names = nms,
       label = label)
}

# The names of the unconstrained coordinates, after the transform Stan
# applies to each (rule in ?stan_target, "Names of the coordinates").
# rstan exposes no parameter constraints (only names and dimensions), so the
# transform of each element is found numerically: the fit's model constrains
# a few fixed unconstrained points (stan_probe()), and an element whose
# constrained values c and unconstrained coordinate u satisfy one of Stan's
# scalar transforms exactly (to rounding) on all of them is named after it
# (stan_transform()); anything else (a bound that depends on another
# parameter, ordered, unit_vector, and every parameter with fewer
# coordinates than elements: simplex, Cholesky factors, covariance and
# correlation matrices) is `unc(p)[k]`, the k-th unconstrained coordinate of
# p (`unc(p)` for a scalar).  Never a parameter's own name for a coordinate
# that is not that parameter.
#
# Which element a coordinate belongs to is found the same way: Stan lays
# out arrays row-major and vectors and matrices column-major, and the
# names rstan gives (and par_dims) do not tell `real a[2, 2]` from
# `matrix[2, 2] a`: the layout whose elements match the most coordinates
# is taken (stan_element_orders(); column-major first on a tie).
stan_upar_names <- function(sf, pars, dims, base, label) {
  probe <- stan_probe(sf, pars, dims, length(base))
  unlist(lapply(pars, function(p) {
    cols <- which(base == p)
    k <- length(cols)
    generic <- if (k == 1L && !length(dims[[p]])) sprintf("unc(%s)", p) else
      sprintf("unc(%s)[%d]", p, seq_len(k))
    if (k != prod(dims[[p]]) || is.null(probe)) return(generic)
    el <- label(stan_flat_names(p, dims[[p]]))
    best <- NULL
    for (ord in stan_element_orders(dims[[p]])) {
      trs <- lapply(seq_len(k), function(j) {
        stan_transform(probe$u[, cols[j]], probe$c[[p]][, ord[j]])
      })
      hits <- sum(!vapply(trs, is.null, TRUE))
      if (is.null(best) || hits > best$hits) {
        best <- list(hits = hits, trs = trs, ord = ord)
      }
      if (hits == k) break
    }
    vapply(seq_len(k), function(j) {
      tr <- best$trs[[j]]
      if (is.null(tr)) generic[j] else
        stan_transform_name(tr, el[best$ord[j]])
    }, "")
  }), use.names = FALSE)
}

# Candidate orders of a parameter's unconstrained coordinates, as
# column-major positions of its elements: its first `a` dimensions an
# array (row-major), the rest a vector or matrix (column-major; at most 2),
# for each possible a; column-major (a = 0, or a = 1 and one dimension)
# first.
stan_element_orders <- function(dims) {
  k <- length(dims)
  if (k <= 1L) return(list(seq_len(max(1L, prod(dims)))))
  stride <- cumprod(c(1L, dims[-k]))
  orders <- lapply(c(0L, max(1L, k - 2L):k), function(a) {
    if (a == 0L && k > 2L) return(NULL)
    inner <- if (a < k) as.matrix(expand.grid(lapply(dims[(a + 1L):k],
                                                      seq_len))) else
      matrix(0L, 1L, 0L)
    outer <- if (a > 0L) {
      g <- as.matrix(expand.grid(lapply(rev(dims[seq_len(a)]), seq_len)))
      g[, rev(seq_len(a)), drop = FALSE]
    } else matrix(0L, 1L, 0L)
    rows <- expand.grid(i = seq_len(nrow(inner)), o = seq_len(nrow(outer)))
    tup <- cbind(outer[rows$o, , drop = FALSE], inner[rows$i, , drop = FALSE])
    as.integer(drop((tup - 1L) %*% stride) + 1L)
  })
  unique(orders[!vapply(orders, is.null, TRUE)])
}

# Which names mention element e as a whole (tau in log(tau), not in
# tau2; theta[1] in log(theta[1]), not in theta[10]).
stan_mentions <- function(names, e) {
  esc <- gsub("([][(){}.\\^$*+?|])", "\\\\\\1", e)
  grepl(paste0("(^|[^A-Za-z0-9_.])", esc, "($|[^A-Za-z0-9_.[])"), names)
}

# Fixed probe points on the unconstrained scale (no random numbers: a Weyl
# sequence in [-1.5, 1.5], then the same at a fifth of the size, so that
# every coordinate takes distinct values and the coordinates vary
# independently) and the constrained parameters there, one matrix per
# parameter (rows: probes; columns: elements, column-major).  Probes that
# the model cannot constrain (a transformed parameter or generated quantity
# that fails there) are dropped; NULL with fewer than 5 left.
stan_probe <- function(sf, pars, dims, d) {
  i <- rep(seq_len(6L), 2L)
  spread <- rep(c(1.5, 0.3), each = 6L)
  u <- outer(i, seq_len(d), function(a, b) {
    (a * 0.7548776662 + b * 0.5698402910) %% 1
  })
  u <- spread * (2 * u - 1)
  vals <- lapply(seq_len(nrow(u)), function(r) {
    tryCatch(rstan::constrain_pars(sf, u[r, ]), error = function(e) NULL)
  })
  ok <- !vapply(vals, is.null, TRUE)
  if (sum(ok) < 5L) return(NULL)
  c_par <- lapply(pars, function(p) {
    do.call(rbind, lapply(vals[ok], function(v) as.vector(v[[p]])))
  })
  names(c_par) <- pars
  list(u = u[ok, , drop = FALSE], c = c_par)
}

# Which of Stan's scalar transforms maps the unconstrained values u to the
# constrained values c (vectors over the probes), with its constants:
# list(type, a, b) for identity, affine (offset a, multiplier b: c = a + b
# u), lower (c = a + exp(u)), upper (c = b - exp(u)) and lower-upper (c = a +
# (b - a) inv_logit(u)); NULL for none.  Constants within rounding of 0 (or
# a multiplier of 1) are snapped to them.
stan_transform <- function(u, c) {
  if (anyNA(c) || any(!is.finite(c))) return(NULL)
  tol <- 1e-9 * (1 + max(abs(c)))
  fits <- function(pred) all(abs(pred - c) <= tol)
  snap <- function(z, to = 0) if (abs(z - to) <= tol) to else z
  if (fits(u)) return(list(type = "identity"))
  # two probes far apart fix the constants of a two-constant form
  i <- which.min(u)
  j <- which.max(u)
  linear <- function(g) {
    b <- (c[j] - c[i]) / (g[j] - g[i])
    a <- c[i] - b * g[i]
    if (is.finite(b) && b > 0 && fits(a + b * g)) c(a, b) else NULL
  }
  ab <- linear(u)
  if (!is.null(ab)) {
    return(list(type = "affine", a = snap(ab[1L]), b = snap(ab[2L], 1)))
  }
  a <- stats::median(c - exp(u))
  if (fits(a + exp(u))) return(list(type = "lower", a = snap(a)))
  b <- stats::median(c + exp(u))
  if (fits(b - exp(u))) return(list(type = "upper", b = snap(b)))
  ab <- linear(stats::plogis(u))
  if (!is.null(ab)) {
    a <- snap(ab[1L])
    return(list(type = "lower-upper", a = a, b = a + snap(ab[2L], 1)))
  }
  NULL
}

# The name of an unconstrained coordinate with transform tr of the element
# named e: e (identity), log(e), log(e - a), log(b - e), logit(e),
# logit((e - a)/(b - a)), (e - a)/b (offset a, multiplier b).
stan_transform_name <- function(tr, e) {
  num <- function(z) format(signif(z, 10), digits = 10)
  # e - a, written e + |a| for a < 0
  minus <- function(e, a) {
    if (a == 0) e else if (a > 0) sprintf("%s - %s", e, num(a)) else
      sprintf("%s + %s", e, num(-a))
  }
  paren <- function(x, a) if (a == 0) x else sprintf("(%s)", x)
  switch(tr$type,
    identity = e,
    affine = {
      x <- minus(e, tr$a)
      if (tr$b == 1) x else sprintf("%s/%s", paren(x, tr$a), num(tr$b))
    },
    lower = sprintf("log(%s)", minus(e, tr$a)),
    upper = sprintf("log(%s)", if (tr$b == 0) paste0("-", e) else
      sprintf("%s - %s", num(tr$b), e)),
    "lower-upper" = {
      x <- minus(e, tr$a)
      w <- tr$b - tr$a
      sprintf("logit(%s)", if (w == 1) x else
        sprintf("%s/%s", paren(x, tr$a), num(w)))
    })
}

# The fit's names of the elements Stan names "b[1]": brms renames the
# stored draws ("b_x") but not the parameters (pars_oi, dims_oi), so the
# names are matched by position; elements not stored keep Stan's names.
stan_labels <- function(sf) {
  pars <- sf@sim$pars_oi
  stan <- unlist(lapply(pars, function(p) {
    stan_flat_names(p, as.integer(sf@sim$dims_oi[[p]]))
  }), use.names = FALSE)
  shown <- sf@sim$fnames_oi
  if (length(stan) != length(shown)) shown <- stan
  function(x) {
    i <- match(x, stan)
    ifelse(is.na(i), x, shown[i])
  }
}

# The stored draws of the parameters as rows (chain-major), columns
# lay$columns; brms does not store some parameters unless asked.
stan_stored_values <- function(vals, lay, arg) {
  miss <- setdiff(lay$columns, colnames(vals))
  if (length(miss)) {
    stop_arg(arg, "does not store the draws of ", stan_name_list(miss),
             ", which are needed to unconstrain its draws (brms leaves ",
             "some parameters out: fit with save_pars = ",
             "brms::save_pars(all = TRUE))")
  }
  vals[, lay$columns, drop = FALSE]
}

# Stan's names of the elements of a parameter, column-major: "theta[1]",
# "B[1,1]", "B[2,1]", ...; a scalar is its name.
stan_flat_names <- function(p, dims) {
  if (!length(dims)) return(p)
  if (any(dims == 0L)) return(character(0))
  idx <- as.matrix(expand.grid(lapply(dims, seq_len)))
  paste0(p, "[", apply(idx, 1L, paste, collapse = ","), "]")
}

stan_name_list <- function(nm, k = 6L) {
  paste0(paste(utils::head(nm, k), collapse = ", "),
         if (length(nm) > k) sprintf(", ... (%d in all)", length(nm)))
}

# Constrained values given by the user -> matrix with lay$columns.
stan_constrained_values <- function(draws, lay, arg) {
  if (is.list(draws) && !is.data.frame(draws) && !inherits(draws, "draws")) {
    if (is.null(names(draws)) || any(!nzchar(names(draws)))) {
      stop_arg(arg, "as a list must name its elements after the parameters (",
               paste(lay$pars, collapse = ", "), ")")
    }
    miss <- setdiff(lay$pars, names(draws))
    if (length(miss)) {
      stop_arg(arg, "lacks the parameter(s) ", paste(miss, collapse = ", "))
    }
    v <- lapply(lay$pars, function(p) {
      x <- draws[[p]]
      if (!is.numeric(x) || length(x) != max(1L, prod(lay$dims[[p]])) &&
          !(length(x) == 0L && prod(lay$dims[[p]]) == 0L)) {
        k <- as.integer(prod(lay$dims[[p]]))
        stop_arg(arg, sprintf("element '%s' must be numeric with %d value%s",
                              p, max(1L, k), if (max(1L, k) == 1L) "" else "s"))
      }
      # an array must have the parameter's shape, up to extents of 1 (a
      # 3 x 2 matrix for a 2 x 3 parameter has the right length but its
      # elements would land elsewhere); a plain vector is taken as
      # flattened column-major
      dm <- as.integer(dim(x))
      core <- function(d) d[d != 1L]
      if (length(dm) > 1L && !identical(core(dm), core(lay$dims[[p]]))) {
        stop_arg(arg, sprintf(paste0(
          "element '%s' has dimensions %s; the parameter has %s (give it in ",
          "that shape, or flattened column-major as a vector)"), p,
          paste(dm, collapse = " x "),
          if (length(lay$dims[[p]])) paste(lay$dims[[p]], collapse = " x ")
          else "none (a scalar)"))
      }
      as.vector(x)
    })
    return(matrix(unlist(v), 1L, dimnames = list(NULL, lay$columns)))
  }
  if (inherits(draws, "draws")) {
    if (!requireNamespace("posterior", quietly = TRUE)) {
      stop_arg(arg, "is a posterior draws object but package 'posterior' ",
               "is not installed")
    }
    draws <- as.data.frame(posterior::as_draws_df(draws))
  }
  if (is.matrix(draws) && is.numeric(draws)) draws <- as.data.frame(draws)
  if (!is.data.frame(draws)) {
    stop_arg(arg, "must be NULL, a posterior draws object, a data frame or ",
             "matrix with named columns, or a named list of parameter values")
  }
  miss <- setdiff(lay$columns, names(draws))
  if (length(miss)) {
    stop_arg(arg, "lacks the column(s) ", stan_name_list(miss),
             " (constrained parameters, named as Stan names them)")
  }
  v <- draws[, lay$columns, drop = FALSE]
  if (!all(vapply(v, is.numeric, TRUE))) {
    stop_arg(arg, "must have numeric parameter columns")
  }
  v <- as.matrix(v)
  if (nrow(v) < 1L) stop_arg(arg, "must have at least one row")
  v
}

# Rows of constrained values (columns lay$columns) -> unconstrained points.
stan_unconstrain_rows <- function(sf, vals, lay, arg) {
  if (any(!is.finite(vals))) {
    bad <- which(!is.finite(vals), arr.ind = TRUE)[1L, ]
    stop_arg(arg, sprintf("has a non-finite value (row %d, column '%s')",
                          bad[1L], colnames(vals)[bad[2L]]))
  }
  # where each parameter's elements sit in a row
  ends <- cumsum(vapply(lay$dims, function(dm) as.integer(prod(dm)), 1L))
  starts <- ends - vapply(lay$dims, function(dm) as.integer(prod(dm)), 1L) + 1L
  out <- matrix(0, nrow(vals), length(lay$names),
                dimnames = list(NULL, lay$names))
  idx <- lapply(seq_along(lay$pars), function(j) {
    seq.int(starts[j], length.out = ends[j] - starts[j] + 1L)
  })
  i <- 0L
  tryCatch(for (i in seq_len(nrow(vals))) {
    row <- vals[i, ]
    l <- lapply(seq_along(lay$pars), function(j) {
      dm <- lay$dims[[j]]
      if (length(dm)) array(row[idx[[j]]], dm) else row[idx[[j]]]
    })
    names(l) <- lay$pars
    out[i, ] <- rstan::unconstrain_pars(sf, l)
  }, error = function(e) {
    stop_arg(arg, sprintf("row %d cannot be unconstrained: %s", i,
                          trimws(conditionMessage(e))))
  })
  # a value on the boundary of its constraint (a scale of exactly 0, as an
  # underflowing sampler can store it; a simplex element of 0) has no
  # finite unconstrained value: rstan returns -Inf or Inf
  if (!all_finite(out)) {
    bad <- which(!is.finite(out), arr.ind = TRUE)[1L, ]
    stop_arg(arg, sprintf(paste0(
      "has a value on the boundary of its constraint (row %d): its ",
      "unconstrained coordinate '%s' is %s (a scale of exactly 0, a ",
      "simplex element of 0, ...); such a point has no density on the ",
      "unconstrained scale"), bad[1L], colnames(out)[bad[2L]],
      format(out[bad[1L], bad[2L]])))
  }
  out
}
