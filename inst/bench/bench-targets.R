# Targets and utilities, each against a plain-R version measured in the
# same run: the Goodwin log posterior + score (our C Dormand-Prince with
# sensitivities vs a plain-R fixed-step RK4 of the same 10 ODEs at a step
# of similar accuracy), the logistic-regression target (one vectorised
# batch vs one point per call) and wasserstein2() (C Hungarian vs a
# plain-R Hungarian with vectorised inner loops), and rbm_target() (its
# vectorised score and all-chains Gibbs sampler vs one point or chain at a
# time).
# Run: Rscript inst/bench/bench-targets.R
suppressMessages(library(kernbayes))
elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  force(expr)
  proc.time()[["elapsed"]] - t0
}

# ---- Goodwin ------------------------------------------------------------------
theta0 <- c(1, 3, 2, 0.5)
times <- 41:80
set.seed(1)
y <- goodwin_simulate(theta0, times, sd = 0.1)
tg <- goodwin_target(y, times, sd = 0.1)
# plain R: state (x1, x2) and sensitivities S (2 x 4), RK4 with step h
gw_rhs <- function(z, th) {
  x1 <- z[1]; x2 <- z[2]; S <- matrix(z[3:10], 2)
  a1 <- th[1]; a2 <- th[2]; k1 <- th[3]; al <- th[4]
  den <- 1 + a2 * x2^10
  f <- c(a1 / den - al * x1, k1 * x1 - al * x2)
  J <- matrix(c(-al, k1, -a1 * a2 * 10 * x2^9 / den^2, -al), 2)
  dfdth <- matrix(c(1 / den, 0, -a1 * x2^10 / den^2, 0, 0, x1, -x1, -x2), 2)
  c(f, J %*% S + dfdth)
}
gw_plain <- function(q, h = 0.01) {
  th <- exp(q)
  z <- numeric(10)
  t <- 0
  out <- matrix(0, length(times), 10)
  for (i in seq_along(times)) {
    nst <- round((times[i] - t) / h)
    for (k in seq_len(nst)) {
      k1 <- gw_rhs(z, th)
      k2 <- gw_rhs(z + h / 2 * k1, th)
      k3 <- gw_rhs(z + h / 2 * k2, th)
      k4 <- gw_rhs(z + h * k3, th)
      z <- z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    }
    t <- times[i]
    out[i, ] <- z
  }
  r <- y - out[, 1:2]
  pm <- digamma(2); ps <- sqrt(trigamma(2))
  ld <- sum(stats::dnorm(r, sd = 0.1, log = TRUE)) +
    sum(stats::dnorm(q, pm, ps, log = TRUE))
  g <- numeric(4)
  for (j in 1:4) {
    Sj <- out[, 2 + (j - 1) * 2 + 1:2]
    g[j] <- sum(r * Sj) / 0.01 * th[j]
  }
  list(log_density = ld, score = g - (q - pm) / ps^2)
}
q <- log(theta0) + 0.05
m <- 20
t_c <- elapsed(for (i in 1:m) {
  target_log_density(tg, q + i * 1e-4)
  target_score(tg, q + i * 1e-4)
}) / m
t_r <- elapsed(for (i in 1:2) pr <- gw_plain(q)) / 2
cat(sprintf(paste0("Goodwin log density + score (40 times): C %.3f ms, plain-R RK4 ",
                   "(h = 0.01) %.0f ms: ratio %.0fx; score difference %.1e\n"),
            1e3 * t_c, 1e3 * t_r, t_r / t_c,
            max(abs(pr$score - target_score(tg, q)))))

# ---- logistic regression ----------------------------------------------------------
if (requireNamespace("MASS", quietly = TRUE)) {
  tr <- MASS::Pima.tr
  lt <- logistic_regression_target(tr[, 1:7], tr$type, prior_sd = 5)
  B <- matrix(stats::rnorm(1000 * lt$dim, sd = 0.3), 1000)
  t_v <- elapsed(for (i in 1:10) target_score(lt, B)) / 10
  one <- function(b) drop(lt$score(matrix(b, 1)))
  t_1 <- elapsed(for (i in seq_len(nrow(B))) one(B[i, ]))
  cat(sprintf(paste0("logistic regression (Pima, 8 coefficients), score at 1000 ",
                     "points: one batch %.4f s, one point per call %.3f s: ratio %.0fx\n"),
              t_v, t_1, t_1 / t_v))
}

# ---- wasserstein2 --------------------------------------------------------------------
# plain-R Hungarian (shortest augmenting paths with potentials), O(n^3)
hungarian_r <- function(C) {
  n <- nrow(C)
  u <- numeric(n + 1); v <- numeric(n + 1)
  p <- integer(n + 1); way <- integer(n + 1)
  for (i in 1:n) {
    p[1] <- i; j0 <- 1
    minv <- rep(Inf, n + 1); used <- rep(FALSE, n + 1)
    repeat {
      used[j0] <- TRUE
      i0 <- p[j0]
      js <- which(!used[-1]) + 1
      cur <- C[i0, js - 1] - u[i0] - v[js]
      upd <- cur < minv[js]
      minv[js[upd]] <- cur[upd]
      way[js[upd]] <- j0
      k <- which.min(minv[js])
      delta <- minv[js][k]
      j1 <- js[k]
      idx <- which(used)
      u[p[idx]] <- u[p[idx]] + delta
      v[idx] <- v[idx] - delta
      minv[js] <- minv[js] - delta
      j0 <- j1
      if (p[j0] == 0) break
    }
    repeat {
      j1 <- way[j0]
      p[j0] <- p[j1]
      j0 <- j1
      if (j0 == 1) break
    }
  }
  a <- integer(n)
  a[p[-1]] <- 1:n
  a
}
n <- 400
set.seed(3)
xa <- matrix(stats::rnorm(2 * n), n)
xb <- matrix(stats::rnorm(2 * n), n)
t_w <- elapsed(w <- wasserstein2(xa, xb))
C <- as.matrix(stats::dist(rbind(xa, xb)))[1:n, n + 1:n]^2
t_h <- elapsed(a <- hungarian_r(C))
w_r <- sqrt(mean(C[cbind(1:n, a)]))
cat(sprintf(paste0("wasserstein2, n = %d in 2-d: C %.3f s, plain-R Hungarian %.2f s: ",
                   "ratio %.0fx; distances %.10f vs %.10f\n"),
            n, t_w, t_h, t_h / t_w, as.double(w), w_r))

# ---- Gaussian-Bernoulli RBM ----------------------------------------------------
# rbm_target(): score of 1000 points in one vectorised call vs one point per
# call, and its block Gibbs sampler (all chains as matrix operations) vs a
# plain-R loop over chains, d = 50 visible, 40 hidden, 200 sweeps.
d <- 50; dh <- 40
set.seed(4)
B <- matrix(sample(c(-1, 1), d * dh, replace = TRUE), d, dh) / 2
b <- stats::rnorm(d); c0 <- stats::rnorm(dh)
rbm <- rbm_target(B, b, c0, burnin = 199)
xr <- matrix(stats::rnorm(1000 * d), 1000)
t_s <- elapsed(s_v <- target_score(rbm, xr))
t_s1 <- elapsed(s_1 <- t(apply(xr, 1, function(p) {
  b - p + drop(B %*% tanh(drop(crossprod(B, p)) + c0))
})))
cat(sprintf(paste0("rbm_target score, 1000 points, d = %d: vectorised %.4f s, ",
                   "per point %.3f s: ratio %.0fx; max difference %.1e\n"),
            d, t_s, t_s1, t_s1 / t_s, max(abs(s_v - s_1))))
nch <- 200
t_g <- elapsed(sample_target(rbm, nch))
gibbs_one <- function(sweeps) {
  x <- stats::rnorm(d)
  for (k in seq_len(sweeps)) {
    p1 <- stats::plogis(2 * (drop(crossprod(B, x)) + c0))
    h <- 2 * (stats::runif(dh) < p1) - 1
    x <- drop(B %*% h) + b + stats::rnorm(d)
  }
  x
}
t_g1 <- elapsed(for (i in seq_len(nch)) gibbs_one(200))
cat(sprintf(paste0("rbm_target Gibbs, %d chains x 200 sweeps: all chains at once ",
                   "%.2f s, chain by chain %.2f s: ratio %.1fx\n"),
            nch, t_g, t_g1, t_g1 / t_g))
