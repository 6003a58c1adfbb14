# Filters for state-space models: the KBR filter (kbr_filter(), full and
# low-rank paths, on the pieces of R/kbr.R) and the Kalman filter baseline,
# with the kb_filter class.

#' KBR filter for state-space models
#'
#' The kernel Bayes' rule filter (Fukumizu et al., 2013, Section 4.3) for a
#' state-space model known only through training trajectories of hidden
#' states and observations \eqn{(X_t, Y_t)}, \eqn{t = 1, \dots, T + 1}. The
#' transition is the conditional kernel embedding learned from the pairs
#' \eqn{(X_t, X_{t+1})} (Gram matrix \eqn{G_{XX_+}} of \eqn{k(X_i,
#' X_{j+1})}), the observation model the pairs \eqn{(X_t, Y_t)}. Each step
#' predicts the prior weights from the last posterior, \eqn{m = G_{XX_+}
#' (G_X + T\epsilon I)^{-1} G_X \alpha}, and applies kernel Bayes' rule to
#' the new observation; the filtered state is \eqn{\sum_i \alpha_i X_i}.
#'
#' **Several trajectories.** With lists of trajectories, the transition
#' pairs \eqn{(X_t, X_{t+1})} and observation pairs \eqn{(X_t, Y_t)},
#' \eqn{t = 1, \dots, T_k}, of each trajectory \eqn{k} are pooled: \eqn{T
#' = \sum_k T_k}, and no pair joins the end of one trajectory to the start of
#' the next.
#'
#' **Spread.** `sd` is the weighted standard deviation of the training
#' states under the step's weights projected onto the probability simplex
#' (the nonnegative weights of [posterior_expect()], as in
#' [posterior_sd()]): the spread of the kernel estimate of the filtering
#' distribution, not an exact posterior sd. `mean` keeps the signed weights
#' (the estimator of the paper).
#'
#' @param x_train,y_train The training trajectory: hidden states and
#'   observations, `(T + 1)` rows each (a vector is a one-dimensional
#'   trajectory; see 'Points and samples' in [kernbayes-package]); or lists
#'   of such trajectories, the `k`-th of `y_train` with as many rows as the
#'   `k`-th of `x_train` (at least 2), all of one state and one observation
#'   dimension.
#' @param y_obs The observations to filter, one row per time step (a
#'   vector is one observation when `y_train` has more than one column).
#' @inheritParams kbr
#' @param eps,delta Regularisers in the operator convention of [kbr()] (no
#'   dependence on the training length); defaults 1e-3 and 1e-4. To tune
#'   them, `f <- kbr(x_train, y_train, method = "iw")` chooses them by
#'   [kbr()]'s default cross-validation on the observation pairs; pass
#'   `eps = f$eps, delta = f$delta`. On a linear Gaussian model (8 seeds,
#'   `inst/experiments/kbr-filter-cv.R`) that pick's filtering error was
#'   1.02 times the best of a 3 x 3 grid known from the truth (1.00-1.05),
#'   the fixed defaults' 1.09, and [kbr_cv()]'s own picks 1.16-2.17.
#' @param method `"iw"` (default) or `"kbr"`; see [kbr()]. The `"kbr"`
#'   form with small regularisers can diverge when the observations leave
#'   the range of the training trajectory; the default stays stable there
#'   (measurements in the package's NEWS).
#' @param rank Which path: `NULL` (default) chooses; `Inf` forces the full
#'   path; a whole number from 1 to `T` takes the low-rank path with factors
#'   of at most that many columns. The full path factorises a `T x T` matrix
#'   at every step (\eqn{O(T^3)} per step); the low-rank path uses pivoted
#'   incomplete Cholesky factors of rank \eqn{r} of \eqn{G_X} and
#'   \eqn{G_Y} (Nystrom approximations) and costs \eqn{O(T r^2 + r^3)} per
#'   step (one \eqn{r \times r} cross-product and eigendecomposition; the rest is
#'   \eqn{O(T r)}). With `NULL`, the low-rank path is taken when `T > 300`
#'   and factors of at most `min(200, T %/% 8)` columns reach `tol`, the full
#'   path otherwise (smaller `T`, or a kernel too narrow for a small rank).
#'   Measured on a noisy rotation (factors of rank 30-40; package NEWS,
#'   `inst/bench/bench-kbr.R`), the low-rank path was faster from `T = 200`
#'   (method `"iw"`) or `T = 100` (`"kbr"`), 4-19 times at `T = 300` and
#'   17-110 times at `T = 1000`-`2000`; it agreed with the full path to
#'   about the tolerance (filtered means within 4e-5).
#' @param tol Tolerance of the incomplete Cholesky (largest residual
#'   diagonal), in \eqn{[0, 1)}; also the accuracy the automatic choice asks
#'   of the factors.
#' @param progress Show progress (see 'Progress' in [kernbayes-package]):
#'   the time steps of the low-rank path; the full path is one call.
#'   Default `NULL` (automatic).
#' @return An object of class `kb_filter`: `mean` (filtered states, one row
#'   per observation), `sd` (their spread, the same shape; see 'Spread'),
#'   `weights` (the `T x n_obs` posterior weights on the training states,
#'   in the order of the stacked trajectories), `n_trajectories`, `path`
#'   (`"full"` or `"lowrank"`), settings; `print` and `plot` methods. The posterior weights of a step sum to about 1; an
#'   observation far from the training `y` can make them vanish, at its
#'   step and (method `"kbr"` above all, whose weights then shrink
#'   geometrically) at every later one. A step whose weights have lost
#'   their mass (sum of \eqn{|w_i|} below \eqn{10^{-3}}) has no filtered
#'   state: its row of `mean` is `NA`, with a warning naming the first such
#'   step (its `weights` are kept).
#' @seealso [kalman_filter()] for linear Gaussian models.
#' @examples
#' set.seed(1)
#' sim <- function(T) {
#'   x <- numeric(T); x[1] <- rnorm(1)
#'   for (t in 2:T) x[t] <- 0.9 * x[t - 1] + rnorm(1, sd = 0.3)
#'   list(x = x, y = x + rnorm(T, sd = 0.5))
#' }
#' tr <- sim(301)
#' te <- sim(100)
#' f <- kbr_filter(tr$x, tr$y, te$y)
#' sqrt(mean((f$mean - te$x)^2))   # filtered
#' sqrt(mean((te$y - te$x)^2))     # raw observations
#' # two training runs, and the band mean -/+ 2 sd
#' tr2 <- sim(201)
#' f2 <- kbr_filter(list(tr$x, tr2$x), list(tr$y, tr2$y), te$y)
#' plot(f2, truth = te$x)
#' @export
kbr_filter <- function(x_train, y_train, y_obs, kernel_x = gaussian_kernel(),
                       kernel_y = gaussian_kernel(), eps = 1e-3, delta = 1e-4,
                       method = c("iw", "kbr"), rank = NULL, tol = 1e-6,
                       nthreads = NULL, progress = NULL) {
  method <- check_choice(method, c("iw", "kbr"), "method")
  progress <- check_progress(progress)
  tr <- filter_trajectories(x_train, y_train)
  X <- tr$X
  Xp <- tr$Xp
  Y <- tr$Y
  yo <- as_obs(y_obs, "y_obs", ncol(Y))
  if (ncol(yo) != ncol(Y)) {
    stop_arg("y_obs", sprintf("must have %d columns, like y_train", ncol(Y)))
  }
  eps <- check_number(eps, "eps", lower = 0, lower_open = TRUE)
  delta <- check_number(delta, "delta", lower = 0, lower_open = TRUE)
  # the Gaussian kernel's diagonal is 1: a tolerance of 1 leaves no column
  tol <- check_number(tol, "tol", lower = 0, upper = 1, upper_open = TRUE)
  check_gaussian(kernel_x, "kernel_x")
  check_gaussian(kernel_y, "kernel_y")
  T <- nrow(X)
  auto <- is.null(rank)
  if (!auto) {
    if (!is.numeric(rank) || length(rank) != 1L || is.na(rank)) {
      stop_arg("rank", paste0("must be NULL (automatic), Inf (the full path) ",
                              "or a whole number from 1 to the number of ",
                              "transitions"))
    }
    if (!identical(as.double(rank), Inf)) rank <- check_count(rank, "rank", max = T)
  }
  nthreads <- resolve_nthreads(nthreads)
  rkx <- resolve_data_kernel(kernel_x, X, "kernel_x", "x_train")
  rky <- resolve_data_kernel(kernel_y, Y, "kernel_y", "y_train")
  if (auto && T > kbr_filter_crossover) {
    # the low-rank path when factors of at most min(200, T / 8) columns
    # reach the tolerance; otherwise (a narrow kernel) the full path
    rmax <- min(kbr_filter_auto_rank, T %/% 8L)
    Lx <- incomplete_cholesky(rkx, X, tol, rmax)
    Ly <- incomplete_cholesky(rky, Y, tol, rmax)
    if (max(attr(Lx, "residual"), attr(Ly, "residual")) <= tol) rank <- rmax
  }
  full <- is.null(rank) || identical(as.double(rank), Inf)
  if (full) {
    # G_X, G_XX+, G_Y, a copy for the Cholesky factor and two for the
    # weights' factorisation, all T x T
    check_memory(8 * (6 * T^2 + 2 * T * nrow(yo)), "x_train",
                 sprintf("the full KBR filter with %d transitions", T),
                 "give 'rank' for the low-rank path")
  }
  Ky <- gram(rky, Y, yo, nthreads)
  warn_far(Ky)
  a0 <- rep(1 / T, T)
  if (full) {
    prog <- progress_reporter(1, "KBR filter (full path, one solve per step)",
                              progress)
    on.exit(prog$done())
    prog$tick(0)
    W <- .Call(C_kb_kbr_filter, gram(rkx, X, X, nthreads),
               gram(rkx, X, Xp, nthreads), gram(rky, Y, Y, nthreads), Ky, a0,
               eps, delta, method)
    prog$tick(1)
    if (!all(is.finite(W))) {
      t <- which(!is.finite(colSums(W)))[1L]
      stop_numeric(sprintf(paste0("the KBR filter's weights are not finite ",
                                  "at step %d; increase 'eps' or 'delta'"), t))
    }
  } else {
    if (!auto) {
      Lx <- incomplete_cholesky(rkx, X, tol, rank)
      Ly <- incomplete_cholesky(rky, Y, tol, rank)
    }
    # Nystrom features: k(X_i, X_{j+1}) ~ Lx[i, ] Fp[, j], k_Y(Y_i, y_t) ~
    # Ly[i, ] Fo[, t]; every step then stays in the spans of the factors
    warn_coarse(c(x = attr(Lx, "residual"), y = attr(Ly, "residual")),
                c(ncol(Lx), ncol(Ly)))
    Fp <- lowrank_features(rkx, X, Lx, Xp, nthreads)
    Fo <- lowrank_features(rky, Y, Ly, yo, nthreads)
    sx <- svd(Lx)
    dx <- sx$d / (sx$d^2 + T * eps)
    ridge_x <- function(b) {     # (Lx Lx' + T eps I)^{-1} Lx b, O(T r)
      drop(sx$u %*% (dx * crossprod(sx$v, b)))
    }
    W <- matrix(0, T, nrow(yo))
    a <- a0
    prog <- progress_reporter(nrow(yo), "KBR filter: time step", progress)
    on.exit(prog$done())
    for (t in seq_len(nrow(yo))) {
      prog$tick(t - 1)
      v <- ridge_x(crossprod(Lx, a))          # (G_X + T eps I)^{-1} G_X a
      mu <- T * ridge_x(Fp %*% v)             # T (G_X + T eps I)^{-1} G_XX+ v
      a <- lowrank_step(Ly, mu, delta, method, Fo[, t])
      # posterior weights sum to about 1; a low-rank factor that misses
      # much of G_X makes mu, and then the weights, grow geometrically
      if (!all(is.finite(a)) || sum(abs(a)) > 1e6) {
        stop_numeric(sprintf(paste0(
          "the low-rank KBR filter broke down at step %d (sum of |weights| ",
          "%.3g, largest |mu| %.3g; the rank-%d factor of G_X leaves a ",
          "residual of %.2g); increase 'rank', 'eps' or 'delta', or use the ",
          "full path"), t, sum(abs(a)), max(abs(mu)), ncol(Lx),
          attr(Lx, "residual")))
      }
      W[, t] <- a
    }
    prog$tick(nrow(yo))
  }
  mean <- crossprod(W, X)
  colnames(mean) <- colnames(X)
  # weights that lost their mass (healthy steps: sum |w| >= 1 or so) give
  # a mean shrunk towards 0, not a filtered state: NA, and a warning unless
  # warn_far() above already named every such step's observation
  gone <- which(colSums(abs(W)) < kbr_filter_min_mass)
  if (length(gone)) {
    mean[gone, ] <- NA
    far <- which(apply(Ky, 2L, max) < 1e-8)
    late <- setdiff(gone, far)
    if (length(late)) {
      warning(sprintf(paste0(
        "the posterior weights vanished (sum of |weights| below %g) at %d ",
        "step(s), first at step %d: their filtered means are NA; an ",
        "observation far from the training y (largest kernel value at step ",
        "%d: %.2g) leaves too little mass%s; use a wider kernel_y%s"),
        kbr_filter_min_mass, length(gone), gone[1L], gone[1L],
        max(Ky[, gone[1L]]),
        if (method == "kbr") ", and the \"kbr\" form shrinks it further at every later step" else "",
        if (method == "kbr") ", a larger delta or method = \"iw\"" else " or a larger delta"),
      call. = FALSE)
    }
  }
  # the spread of the filtered state from the weights projected onto the
  # probability simplex (as posterior_sd()); NA where the mean is NA
  sd <- posterior_spread(nonnegative_weights(W), X)
  sd[is.na(mean)] <- NA_real_
  colnames(sd) <- colnames(X)
  new_filter(mean, sd, sprintf("KBR filter (%s, %s)", method,
                                if (full) "full path" else
                                  sprintf("low rank %d/%d", ncol(Lx), ncol(Ly))),
             weights = W,
             kbr = list(n_trajectories = tr$n_traj, eps = eps, delta = delta,
                        T_train = T, path = if (full) "full" else "lowrank",
                        rank_x = if (full) NULL else ncol(Lx),
                        rank_y = if (full) NULL else ncol(Ly),
                        residual = if (full) NULL else
                          c(x = attr(Lx, "residual"), y = attr(Ly, "residual"))))
}

# The one constructor of kb_filter, for kbr_filter() and kalman_filter():
# the filtered means and sds (a row per time step) and the filter's name;
# `weights` (the KBR filter's posterior weights, a column per step), `cov`
# (the Kalman filter's covariances) and `kbr`, the KBR filter's settings
# (n_trajectories, eps, delta, T_train, path, rank_x, rank_y, residual).
# Every result has every field, NULL where its filter has none.
new_filter <- function(mean, sd, method, weights = NULL, cov = NULL,
                       kbr = list()) {
  kbr_fields <- c("n_trajectories", "eps", "delta", "T_train", "path",
                  "rank_x", "rank_y", "residual")
  structure(c(list(mean = mean, sd = sd, weights = weights, cov = cov,
                   method = method),
              lapply(stats::setNames(kbr_fields, kbr_fields),
                     function(f) kbr[[f]])),
            class = "kb_filter")
}

# The training trajectories of kbr_filter(): one (matrices or vectors) or
# several (lists of matrices). The transitions (X_t, X_{t+1}) and the
# observation pairs (X_t, Y_t), t = 1..T_k, of each trajectory, stacked; no
# pair crosses from one trajectory to the next.
filter_trajectories <- function(x_train, y_train) {
  is_list <- function(v) is.list(v) && !is.data.frame(v)
  if (is_list(x_train) || is_list(y_train)) {
    if (!is_list(x_train)) {
      stop_arg("x_train", "must be a list of trajectories, like y_train")
    }
    if (!is_list(y_train)) {
      stop_arg("y_train", "must be a list of trajectories, like x_train")
    }
    if (!length(x_train)) {
      stop_arg("x_train", "is an empty list: give at least one trajectory")
    }
    if (length(y_train) != length(x_train)) {
      stop_arg("y_train", sprintf(paste0("must have one trajectory per ",
                                         "trajectory of x_train (%d); it has %d"),
                                  length(x_train), length(y_train)))
    }
  } else {
    x_train <- list(x_train)
    y_train <- list(y_train)
  }
  K <- length(x_train)
  lab <- function(arg, k) if (K == 1L) arg else sprintf("%s[[%d]]", arg, k)
  xs <- ys <- vector("list", K)
  for (k in seq_len(K)) {
    xs[[k]] <- as_obs(x_train[[k]], lab("x_train", k),
                      if (k > 1L) ncol(xs[[1L]]))
    ys[[k]] <- as_obs(y_train[[k]], lab("y_train", k),
                      if (k > 1L) ncol(ys[[1L]]))
    if (k > 1L && ncol(xs[[k]]) != ncol(xs[[1L]])) {
      stop_arg("x_train", sprintf(paste0("trajectories must have one state ",
                                         "dimension: trajectory 1 has %d ",
                                         "columns, trajectory %d has %d"),
                                  ncol(xs[[1L]]), k, ncol(xs[[k]])))
    }
    if (k > 1L && ncol(ys[[k]]) != ncol(ys[[1L]])) {
      stop_arg("y_train", sprintf(paste0("trajectories must have one ",
                                         "observation dimension: trajectory ",
                                         "1 has %d columns, trajectory %d has %d"),
                                  ncol(ys[[1L]]), k, ncol(ys[[k]])))
    }
    if (nrow(xs[[k]]) != nrow(ys[[k]])) {
      stop_arg(lab("y_train", k), sprintf(
        "must have as many rows as %s (%d); it has %d", lab("x_train", k),
        nrow(xs[[k]]), nrow(ys[[k]])))
    }
    if (nrow(xs[[k]]) < 2L) {
      stop_arg(lab("x_train", k), paste0("must have at least 2 rows (one ",
                                         "transition)"))
    }
  }
  first <- lapply(xs, function(v) v[-nrow(v), , drop = FALSE])
  X <- do.call(rbind, first)
  if (nrow(X) < 2L) {
    stop_arg("x_train", "must have at least 3 rows (2 transitions in all)")
  }
  list(X = X,
       Xp = do.call(rbind, lapply(xs, function(v) v[-1L, , drop = FALSE])),
       Y = do.call(rbind, lapply(ys, function(v) v[-nrow(v), , drop = FALSE])),
       n_traj = K)
}

# The automatic choice of kbr_filter(): the low-rank path above this many
# transitions (measured: inst/bench/bench-kbr.R, NEWS), when factors of rank
# at most min(kbr_filter_auto_rank, T / 8) reach the tolerance.
kbr_filter_crossover <- 300L
# A step's posterior weights with less total |mass| than this have vanished
# (healthy runs keep sum |w| above 1: tests/testthat/test-fuzz-kbr-flows.R).
kbr_filter_min_mass <- 1e-3
kbr_filter_auto_rank <- 200L

# One low-rank filter step: the posterior weights lowrank_operator(Ly, mu,
# delta, method) %*% f for one observation's features f, without forming
# the T x r operator: one r x r crossprod of the factor weighted by mu
# (O(T r^2) in BLAS), its eigendecomposition (O(r^3)), and O(T r) to apply
# the factors to vectors. With M = Ly' diag(w) Ly = V diag(e) V':
# "kbr" (w = mu): mu * Ly V diag(e / (e^2 + T^2 delta)) V' f;
# "iw" (w = max(mu, 0) = s^2, H = s Ly, H'H = M): s (H H' + T delta I)^{-1}
#   H f = s H (H'H + T delta I)^{-1} f = w * Ly V diag(1 / (e + T delta)) V' f.
# Both factors stay bounded as delta -> 0 on the directions that matter (e /
# (e^2 + c) <= 1 / (2 sqrt(c)); in "iw", H V diag(1 / (e + c)) has column
# norms sqrt(e) / (e + c), the SVD form's s / (s^2 + c)).
lowrank_step <- function(Ly, mu, delta, method, f) {
  n <- nrow(Ly)
  w <- if (method == "kbr") mu else pmax(mu, 0)
  e <- eigen(crossprod(Ly, w * Ly), symmetric = TRUE)
  h <- if (method == "kbr") e$values / (e$values^2 + n^2 * delta) else
    1 / (pmax(e$values, 0) + n * delta)
  w * drop(Ly %*% (e$vectors %*% (h * crossprod(e$vectors, f))))
}

#' Kalman filter
#'
#' The exact filter for the linear Gaussian state-space model
#' \eqn{x_{t+1} = A x_t + N(0, Q)}, \eqn{y_t = C x_t + N(0, R)},
#' \eqn{x_1 \sim N(m_0, P_0)}: a baseline for [kbr_filter()].
#'
#' @param y Observations, one row per time step (a vector is a
#'   one-dimensional series; see 'Points and samples' in [kernbayes-package]).
#' @param A,C,Q,R Model matrices (numbers are taken as 1 x 1 matrices); `Q`
#'   and `R` are covariances (symmetric, positive semi-definite).
#' @param m0,P0 Mean and covariance of the first state; default the
#'   stationary distribution when it exists, else zero mean and identity.
#' @return A `kb_filter` with `mean` (filtered means \eqn{E[x_t | y_{1:t}]}),
#'   `sd` (filtered sds, the square roots of the diagonals of `cov`) and
#'   `cov` (a list of filtered covariances).
#' @examples
#' kalman_filter(c(1, 0.5, 0.2), A = 0.9, C = 1, Q = 0.1, R = 0.2)$mean
#' @export
kalman_filter <- function(y, A, C, Q, R, m0 = NULL, P0 = NULL) {
  y <- as_obs(y, "y")
  as_mat <- function(M, arg) {
    M <- if (is.numeric(M) && is.null(dim(M))) {
      if (length(M) == 1L) matrix(M) else diag(M)
    } else M
    if (!is.matrix(M) || !is.numeric(M) || anyNA(M) || any(!is.finite(M))) {
      stop_arg(arg, "must be a finite numeric matrix")
    }
    M
  }
  A <- as_mat(A, "A")
  C <- as_mat(C, "C")
  Q <- as_mat(Q, "Q")
  R <- as_mat(R, "R")
  d <- nrow(A)
  if (ncol(A) != d || any(dim(Q) != d)) {
    stop_arg("A", sprintf("and 'Q' must be d x d matrices (A is %d x %d, Q is %d x %d)",
                          nrow(A), ncol(A), nrow(Q), ncol(Q)))
  }
  if (ncol(C) != d || nrow(C) != ncol(y)) {
    stop_arg("C", sprintf("must be %d x %d", ncol(y), d))
  }
  if (any(dim(R) != ncol(y))) {
    stop_arg("R", sprintf("must be a %d x %d matrix (dy x dy)", ncol(y), ncol(y)))
  }
  check_cov_matrix(Q, "Q")
  check_cov_matrix(R, "R")
  if (is.null(m0)) m0 <- rep(0, d)
  if (!is.numeric(m0) || length(m0) != d || anyNA(m0) || any(!is.finite(m0))) {
    stop_arg("m0", sprintf("must be a finite numeric vector of length %d", d))
  }
  if (is.null(P0)) {
    # stationary covariance: P = A P A' + Q (vec form), when |eig(A)| < 1
    if (all(Mod(eigen(A, only.values = TRUE)$values) < 1)) {
      P0 <- matrix(solve(diag(d * d) - kronecker(A, A), as.vector(Q)), d)
      P0 <- (P0 + t(P0)) / 2
    } else {
      P0 <- diag(d)
    }
  }
  P0 <- as_mat(P0, "P0")
  if (any(dim(P0) != d)) stop_arg("P0", sprintf("must be a %d x %d matrix", d, d))
  check_cov_matrix(P0, "P0")
  n <- nrow(y)
  mean <- matrix(0, n, d)
  covs <- vector("list", n)
  m <- m0
  P <- P0
  for (t in seq_len(n)) {
    if (t > 1L) {
      m <- drop(A %*% m)
      P <- A %*% P %*% t(A) + Q
    }
    S <- C %*% P %*% t(C) + R
    if (!all(is.finite(S)) || !all(is.finite(P))) {
      stop_numeric(sprintf(paste0("the Kalman filter overflowed at step %d: ",
                                  "scale the data and the model matrices"), t))
    }
    Si <- tryCatch(solve(S), error = function(e) NULL)
    if (is.null(Si)) {
      stop_numeric(sprintf(paste0("the innovation covariance C P C' + R is ",
                                  "singular at step %d: make 'R' positive ",
                                  "definite"), t))
    }
    K <- P %*% t(C) %*% Si
    m <- m + drop(K %*% (y[t, ] - C %*% m))
    P <- (diag(d) - K %*% C) %*% P
    if (!all(is.finite(m)) || !all(is.finite(P))) {
      stop_numeric(sprintf(paste0("the Kalman filter overflowed at step %d: ",
                                  "scale the data and the model matrices"), t))
    }
    mean[t, ] <- m
    covs[[t]] <- P
  }
  sd <- t(vapply(covs, function(P) sqrt(pmax(diag(P), 0)), numeric(d)))
  if (d == 1L) sd <- matrix(sd, ncol = 1L)
  new_filter(mean, sd, "Kalman filter", cov = covs)
}

# A covariance matrix: symmetric and positive semi-definite.
check_cov_matrix <- function(M, arg) {
  sc <- max(1, abs(M))
  if (max(abs(M - t(M))) > 1e-10 * sc) stop_arg(arg, "must be symmetric (a covariance matrix)")
  ev <- eigen(M, symmetric = TRUE, only.values = TRUE)$values
  if (min(ev) < -1e-10 * max(abs(ev), 1e-300)) {
    stop_arg(arg, sprintf(paste0("must be positive semi-definite (a covariance ",
                                 "matrix); its smallest eigenvalue is %s"),
                          format(min(ev), digits = 3)))
  }
  invisible(M)
}

#' @export
print.kb_filter <- function(x, ...) {
  check_result(x)
  if (!inherits(x, "kb_filter") || !is.matrix(x$mean)) {
    stop_arg("x", "must be a filter result (kbr_filter() or kalman_filter())")
  }
  cat(sprintf("%s: %d time steps, state dimension %d\n", x$method,
              nrow(x$mean), ncol(x$mean)))
  if (!is.null(x$eps)) {
    ntr <- if (is.null(x$n_trajectories)) 1L else x$n_trajectories
    cat(sprintf("  trained on %d transitions%s; eps = %s, delta = %s\n",
                x$T_train, if (ntr > 1L) sprintf(" of %d trajectories", ntr) else "",
                format(x$eps), format(x$delta)))
  }
  gone <- which(is.na(x$mean[, 1L]))
  if (length(gone)) {
    cat(sprintf(paste0("  no filtered state at %d step(s), first at step %d ",
                       "(the posterior weights vanished)\n"), length(gone),
                gone[1L]))
  }
  invisible(x)
}

#' Plot filtered states
#'
#' One panel per coordinate: the filtered mean against the time step, a band
#' of the mean \eqn{\pm} 2 `sd` where the filter has a spread (the
#' weighted spread of [kbr_filter()], the filtered sd of
#' [kalman_filter()]), and the true states when given; a legend in the first
#' panel. Steps without a filtered state (NA) are gaps.
#'
#' @param x A `kb_filter`.
#' @param truth Optional true states, one row per time step (a matrix, or
#'   a vector for one-dimensional states; see 'Points and samples' in
#'   [kernbayes-package]).
#' @param which Coordinates to plot.
#' @param band Whether to draw the band (when `x` has `sd`).
#' @param ... Ignored.
#' @return `x`, invisibly.
#' @export
plot.kb_filter <- function(x, truth = NULL, which = seq_len(min(3L, ncol(x$mean))),
                           band = TRUE, ...) {
  check_result(x)
  if (!inherits(x, "kb_filter") || !is.matrix(x$mean)) {
    stop_arg("x", "must be a filter result (kbr_filter() or kalman_filter())")
  }
  d <- ncol(x$mean)
  if (!is.numeric(which) || !length(which) || anyNA(which) ||
      any(which != round(which)) || any(which < 1) || any(which > d)) {
    stop_arg("which", sprintf("must be coordinates between 1 and %d", d))
  }
  if (!is.logical(band) || length(band) != 1L || is.na(band)) {
    stop_arg("band", "must be TRUE or FALSE")
  }
  sd <- x$sd
  has_band <- band && is.matrix(sd) && all(dim(sd) == dim(x$mean))
  if (!is.null(truth)) {
    truth <- as_obs(truth, "truth", d)
    if (ncol(truth) != d || nrow(truth) != nrow(x$mean)) {
      stop_arg("truth", sprintf("must have %d rows and %d columns, like the filtered means",
                                nrow(x$mean), d))
    }
  }
  op <- graphics::par(mfrow = c(length(which), 1L), mar = c(4, 4, 2, 1))
  on.exit(graphics::par(op))
  steps <- seq_len(nrow(x$mean))
  nm <- colnames(x$mean)
  for (k in which) {
    m <- x$mean[, k]
    lo <- if (has_band) m - 2 * sd[, k] else NULL
    hi <- if (has_band) m + 2 * sd[, k] else NULL
    rng <- range(m, lo, hi, if (!is.null(truth)) truth[, k], na.rm = TRUE)
    if (!all(is.finite(rng))) rng <- c(-1, 1)
    graphics::plot(steps, m, type = "n", ylim = rng, xlab = "time step",
                   ylab = if (!is.null(nm) && nzchar(nm[k])) nm[k] else paste0("x", k),
                   main = if (k == which[1L]) x$method else "")
    if (has_band) {
      # one polygon per run of steps with a band (NA steps are gaps)
      ok <- is.finite(lo) & is.finite(hi)
      runs <- split(steps[ok], cumsum(c(1, diff(steps[ok]) != 1)))
      for (r in runs) {
        graphics::polygon(c(r, rev(r)), c(lo[r], rev(hi[r])), border = NA,
                          col = grDevices::adjustcolor("#D55E00", 0.2))
      }
    }
    if (!is.null(truth)) graphics::lines(steps, truth[, k], col = "grey30")
    graphics::lines(steps, m, col = "#D55E00", lwd = 2)
    if (k == which[1L]) {
      keep <- c(!is.null(truth), TRUE, has_band)
      graphics::legend("topright", c("truth", "filtered mean",
                                     "mean -/+ 2 sd")[keep],
                       col = c("grey30", "#D55E00",
                               grDevices::adjustcolor("#D55E00", 0.2))[keep],
                       lty = c(1, 1, NA)[keep], lwd = c(1, 2, NA)[keep],
                       pch = c(NA, NA, 15)[keep], pt.cex = 2, bty = "n",
                       cex = 0.8)
    }
  }
  invisible(x)
}

#' @rdname result_tables
#' @export
as.data.frame.kb_filter <- function(x, row.names = NULL, optional = FALSE,
                                    ...) {
  check_result(x)
  v <- colnames(x$mean)
  if (is.null(v)) v <- paste0("x", seq_len(ncol(x$mean)))
  mean <- stats::setNames(as.data.frame(unname(x$mean)), paste0("mean_", v))
  sd <- stats::setNames(as.data.frame(unname(x$sd)), paste0("sd_", v))
  out <- cbind(data.frame(time = seq_len(nrow(x$mean))), mean, sd)
  if (!is.null(row.names)) row.names(out) <- row.names
  out
}
