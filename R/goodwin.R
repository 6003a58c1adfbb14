# The Goodwin oscillator: an ODE parameter-inference target.
# The solver, its sensitivities and the log posterior are in src/goodwin.c.

goodwin_par_names <- c("a1", "a2", "k1", "alpha")

#' The Goodwin oscillator posterior
#'
#' An ODE parameter-inference target: the posterior of the log-parameters of
#' a two-species Goodwin oscillator (Goodwin 1965) observed with Gaussian
#' noise, the benchmark of Chen et al. (2019, Sec. 5) and Riabiz et al.
#' (2022, Appendix S5.2). `goodwin_target()` returns a [kb_target()] with
#' exact, vectorised log density and score computed in C; `goodwin_solve()`
#' solves the ODE and `goodwin_simulate()` draws noisy observations.
#'
#' @section Model:
#' With \eqn{\theta = (a_1, a_2, k_1, \alpha)}, all positive, and Hill
#' exponent \eqn{\rho = 10},
#' \deqn{x_1' = a_1 / (1 + a_2 x_2^\rho) - \alpha x_1, \qquad
#'       x_2' = k_1 x_1 - \alpha x_2, \qquad x(0) = (0, 0).}{
#'       x1' = a1 / (1 + a2 x2^rho) - alpha x1,
#'       x2' = k1 x1 - alpha x2,  x(0) = (0, 0).}
#' Both species are observed at `times`, \eqn{y_{is} = x_s(t_i; \theta) +
#' \sigma_s \epsilon_{is}} with independent standard normal
#' \eqn{\epsilon_{is}} and known noise sd \eqn{\sigma_s} (`sd`).
#'
#' The target lives on \eqn{q = \log \theta}{q = log(theta)} (`dim = 4`, columns in the
#' order a1, a2, k1, alpha), so that samplers move freely on
#' \eqn{R^4}. The prior makes the \eqn{q_j} independent
#' \eqn{N(m_j, s_j^2)} (`prior_mean`, `prior_sd`), that is \eqn{\theta_j}
#' log-normal; since the prior is stated directly for \eqn{q}, no Jacobian
#' term is needed: the log density is
#' \deqn{\sum_{i,s} \log N(y_{is}; x_s(t_i; e^q), \sigma_s^2) +
#'       \sum_j \log N(q_j; m_j, s_j^2),}{
#'       sum_{i,s} log N(y_is; x_s(t_i; exp(q)), sd_s^2)
#'       + sum_j log N(q_j; m_j, s_j^2),}
#' normalising constants included (the evidence is not). The score uses the
#' forward sensitivities \eqn{S = \partial x / \partial \theta}{S = dx/dtheta}, integrated
#' with the state (\eqn{S' = (\partial f / \partial x) S + \partial f /
#' \partial \theta}{S' = (df/dx) S + df/dtheta}, ten ODEs in all), and the chain rule
#' \eqn{\partial / \partial q_j = \theta_j \partial / \partial \theta_j}{d/dq_j = theta_j d/dtheta_j}: it
#' is the exact gradient of the computed log density up to the solver's
#' tolerance, not a finite difference.
#'
#' The ODE is solved by an adaptive Dormand-Prince 5(4) Runge-Kutta method
#' (Hairer, Norsett and Wanner 1993, Sec. II.5) with error control on state
#' and sensitivities (weights `atol + rtol * |z|`) that steps exactly onto
#' each observation time. After 100000 steps, which happens where the ODE
#' is stiff (very large \eqn{\alpha}, \eqn{a_1} or \eqn{k_1}), far
#' outside the posterior of the example data, or over a very long time
#' span (about \eqn{t > 2 \times 10^5} at the example's \eqn{\theta}),
#' `goodwin_solve()` stops with
#' an error naming the parameters, while the target gives the point log
#' density `-Inf` and score 0, so that a sampler rejects it and goes on.
#'
#' @section Choices and sources:
#' The setting was checked against the authors' MATLAB code for Chen
#' et al. (2019) (repository `wilson-ye-chen/sp-mcmc`, files
#' `src/lib/ODE_Goodwin_Oscillator.m` with `g = 2` and
#' `src/ppr/genpts_ode.m`): data-generating parameter
#' \eqn{\theta = (1, 3, 2, 0.5)}, observation times \eqn{41, 42, \dots, 80}
#' (40 times), both species observed, noise sd 0.1, \eqn{x(0) = 0},
#' \eqn{\rho = 10}, target on \eqn{\log \theta}{log(theta)}. That code puts independent
#' Gamma(2, 1) priors on \eqn{\theta_j} (with the log-Jacobian added); here
#' the prior is log-normal instead, and the defaults
#' `prior_mean = digamma(2)` (0.4228) and `prior_sd = sqrt(trigamma(2))`
#' (0.8031) match the mean and variance of \eqn{\log \theta_j}{log(theta_j)} under
#' Gamma(2, 1). The exact text of Riabiz et al. (2022), Appendix S5.2, and
#' their data set were not available to check; their chains are for the
#' same model and may use a different data set, times or prior. The
#' example data below are simulated with `set.seed(1)`, not the authors'
#' data.
#'
#' @param y Observations: a numeric matrix (or data frame) with
#'   `length(times)` rows and 2 columns, the noisy values of \eqn{x_1} and
#'   \eqn{x_2} at `times` (see 'Points and samples' in [kernbayes-package]).
#' @param times Observation times: finite, non-negative and strictly
#'   increasing.
#' @param sd Noise standard deviation, known: one value for both species or
#'   one per species.
#' @param prior_mean,prior_sd Means and standard deviations of the normal
#'   priors on \eqn{\log a_1, \log a_2, \log k_1, \log \alpha}{log(a1), log(a2), log(k1), log(alpha)}: one value
#'   for all four or a vector of 4. The defaults moment-match the Gamma(2, 1)
#'   priors of Chen et al. (2019); see "Choices and sources".
#' @param rtol,atol Relative and absolute error tolerances of the ODE
#'   solver. The defaults make solver error negligible against `sd`.
#' @return `goodwin_target()`: a [kb_target()] of dimension 4 on
#'   \eqn{\log \theta}{log(theta)} with vectorised closures (each call solves the ODE
#'   once per row; the log density and the score of the same points share
#'   one solve) and no exact sampler.
#' @references
#' Chen, W. Y., Barp, A., Briol, F.-X., Gorham, J., Girolami, M., Mackey,
#' L. and Oates, C. J. (2019). Stein point Markov chain Monte Carlo.
#' *ICML*, PMLR 97, 1011--1021.
#'
#' Goodwin, B. C. (1965). Oscillatory behavior in enzymatic control
#' processes. *Advances in Enzyme Regulation* 3, 425--437.
#'
#' Hairer, E., Norsett, S. P. and Wanner, G. (1993). *Solving Ordinary
#' Differential Equations I*, 2nd ed. Springer.
#'
#' Riabiz, M., Chen, W. Y., Cockayne, J., Swietach, P., Niederer, S. A.,
#' Mackey, L. and Oates, C. J. (2022). Optimal thinning of MCMC output.
#' *JRSS B* 84(4), 1059--1081. \doi{10.1111/rssb.12503}
#' @seealso [kb_target()], [mala()], [stein_thin()].
#' @examples
#' # data as in Chen et al. (2019): theta = (1, 3, 2, 0.5), t = 41..80,
#' # sd = 0.1 (simulated here, with seed 1)
#' theta0 <- c(a1 = 1, a2 = 3, k1 = 2, alpha = 0.5)
#' times <- 41:80
#' set.seed(1)
#' y <- goodwin_simulate(theta0, times, sd = 0.1)
#' tg <- goodwin_target(y, times, sd = 0.1)
#' tg
#' q <- rbind(log(theta0), log(theta0) + 0.01)
#' target_log_density(tg, q)
#' target_score(tg, q)
#' # a short MALA run started at the truth
#' ch <- mala(tg, x0 = log(theta0), n_iter = 200)
#' colMeans(exp(ch$x))
#' @export
goodwin_target <- function(y, times, sd = 0.1, prior_mean = digamma(2),
                           prior_sd = sqrt(trigamma(2)), rtol = 1e-8,
                           atol = 1e-10) {
  times <- check_goodwin_times(times)
  y <- check_goodwin_y(y, length(times))
  sd <- check_goodwin_sd(sd)
  prior_mean <- check_goodwin_prior(prior_mean, "prior_mean", positive = FALSE)
  prior_sd <- check_goodwin_prior(prior_sd, "prior_sd", positive = TRUE)
  rtol <- check_number(rtol, "rtol", lower = 0, upper = 1, lower_open = TRUE,
                       upper_open = TRUE)
  atol <- check_number(atol, "atol", lower = 0, lower_open = TRUE)
  # samplers ask for the log density and the score at the same points; both
  # come from one solve, so remember the last batch
  cache <- new.env(parent = emptyenv())
  posterior <- function(x) {
    x <- as_row_matrix(x, 4L)
    storage.mode(x) <- "double"
    if (!identical(cache$x, x)) {
      cache$val <- .Call(C_kb_goodwin_logpost, x, y, times, sd, prior_mean,
                         prior_sd, rtol, atol)
      cache$x <- x
    }
    cache$val
  }
  log_density <- function(x) posterior(x)$log_density
  score <- function(x) posterior(x)$score
  new_target(log_density, score, 4L, vectorized = TRUE, fd_score = FALSE,
             sampler = NULL, name = "Goodwin oscillator")
}

#' @rdname goodwin_target
#' @param theta The parameter \eqn{(a_1, a_2, k_1, \alpha)} on the natural
#'   (not log) scale: 4 positive numbers.
#' @param sensitivities Whether to return the sensitivities
#'   \eqn{\partial x_s(t_i) / \partial \theta_j}{dx_s(t_i)/dtheta_j} as well.
#' @return `goodwin_solve()`: the noise-free trajectory, a
#'   `length(times) x 2` matrix with columns `x1` and `x2`; with
#'   `sensitivities = TRUE` a list with that matrix as `x` and a
#'   `length(times) x 2 x 4` array `sens`.
#' @export
goodwin_solve <- function(theta, times, sensitivities = FALSE, rtol = 1e-8,
                          atol = 1e-10) {
  theta <- check_goodwin_theta(theta)
  times <- check_goodwin_times(times)
  sensitivities <- check_flag(sensitivities, "sensitivities")
  rtol <- check_number(rtol, "rtol", lower = 0, upper = 1, lower_open = TRUE,
                       upper_open = TRUE)
  atol <- check_number(atol, "atol", lower = 0, lower_open = TRUE)
  out <- .Call(C_kb_goodwin_solve, theta, times, rtol, atol)
  colnames(out$x) <- c("x1", "x2")
  if (!sensitivities) return(out$x)
  dimnames(out$sens) <- list(NULL, c("x1", "x2"), goodwin_par_names)
  out
}

#' @rdname goodwin_target
#' @return `goodwin_simulate()`: a `length(times) x 2` matrix of noisy
#'   observations (columns `x1`, `x2`): the trajectory plus independent
#'   normal noise drawn with [stats::rnorm()] (all of `x1`'s noise first),
#'   so [set.seed()] makes it reproducible.
#' @export
goodwin_simulate <- function(theta, times, sd = 0.1, rtol = 1e-8,
                             atol = 1e-10) {
  sd <- check_goodwin_sd(sd)
  x <- goodwin_solve(theta, times, rtol = rtol, atol = atol)
  n <- nrow(x)
  x + matrix(stats::rnorm(2L * n), n, 2L) * rep(sd, each = n)
}

check_goodwin_theta <- function(theta, arg = "theta") {
  if (!is.numeric(theta) || length(theta) != 4L || anyNA(theta) ||
      any(!is.finite(theta)) || any(theta <= 0)) {
    stop_arg(arg, "must be 4 finite positive numbers (a1, a2, k1, alpha)")
  }
  as.double(theta)
}

check_goodwin_times <- function(times, arg = "times") {
  if (!is.numeric(times) || length(times) < 1L || anyNA(times) ||
      any(!is.finite(times))) {
    stop_arg(arg, "must be a non-empty numeric vector of finite values")
  }
  if (any(times < 0)) stop_arg(arg, "must be non-negative (x(0) = 0 at t = 0)")
  if (is.unsorted(times, strictly = TRUE)) {
    stop_arg(arg, "must be strictly increasing")
  }
  as.double(times)
}

# The observations: a sample of 2-d points (as_points() with d = 2), one
# row per time.
check_goodwin_y <- function(y, n, arg = "y") {
  y <- as_points(y, arg, 2L)
  if (ncol(y) != 2L || nrow(y) != n) {
    stop_arg(arg, sprintf(paste0("must be a numeric matrix with 2 columns ",
                                 "(x1, x2) and length(times) = %d rows"), n))
  }
  dimnames(y) <- NULL
  y
}

check_goodwin_sd <- function(sd, arg = "sd") {
  if (!is.numeric(sd) || !length(sd) %in% 1:2 || anyNA(sd) ||
      any(!is.finite(sd)) || any(sd <= 0)) {
    stop_arg(arg, "must be one or two (per species) finite positive numbers")
  }
  rep_len(as.double(sd), 2L)
}

check_goodwin_prior <- function(v, arg, positive) {
  if (!is.numeric(v) || !length(v) %in% c(1L, 4L) || anyNA(v) ||
      any(!is.finite(v)) || (positive && any(v <= 0))) {
    stop_arg(arg, sprintf("must be one or 4 finite %snumbers",
                          if (positive) "positive " else ""))
  }
  rep_len(as.double(v), 4L)
}
