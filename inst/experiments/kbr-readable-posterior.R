# Readable KBR posteriors (issue 33, items 1, 2 and 4): how the signed
# weights of kernel Bayes' rule, their projection onto the probability
# simplex (the default of posterior_expect()) and the positive part
# renormalised (not offered) estimate event probabilities, sds and 95%
# intervals on a 1-d toy with an exact posterior, and how often the KBR
# filter's band mean -/+ 2 sd covers the hidden state.
#
# Usage: Rscript inst/experiments/kbr-readable-posterior.R   (about a minute)
#
# Toy: X ~ N(0, 1), Y = X + N(0, 0.5^2); the posterior given y is N(0.8 y,
# 0.2). 41 observations on [-2.5, 2.5]; 5 seeds; n = 300 and 1000; three
# (eps, delta) settings; median bandwidths. Event: X > 0, exact
# pnorm(0.8 y / sqrt(0.2)).
library(kernbayes)

positive_part <- function(w) pmax(w, 0) / sum(pmax(w, 0))

rows <- NULL
for (seed in 1:5) for (n in c(300, 1000)) {
  set.seed(seed)
  x <- rnorm(n)
  y <- x + rnorm(n, sd = 0.5)
  for (s in list(c(1e-3, 1e-5), c(1e-2, 1e-4), c(1e-1, 1e-2))) {
    fit <- kbr(x, y, eps = s[1], delta = s[2])
    yg <- seq(-2.5, 2.5, length.out = 41)
    W <- predict(fit, yg)
    ests <- list(signed = W, projection = predict(fit, yg, weights = "nonnegative"),
                 positive_part = apply(W, 2, positive_part))
    pe <- stats::pnorm(0.8 * yg / sqrt(0.2))
    for (e in names(ests)) {
      V <- ests[[e]]
      p <- colSums(V * (x > 0))
      m <- colSums(V * x)
      sdv <- sqrt(pmax(colSums(V * x^2) - m^2, 0))
      cover <- if (e == "signed") NA else mean(sapply(seq_along(yg), function(j) {
        o <- order(x)
        cw <- cumsum(V[o, j])
        lo <- x[o][which(cw >= 0.025)[1]]
        hi <- x[o][which(cw >= 0.975)[1]]
        stats::pnorm(hi, 0.8 * yg[j], sqrt(0.2)) - stats::pnorm(lo, 0.8 * yg[j], sqrt(0.2))
      }))
      rows <- rbind(rows, data.frame(
        seed = seed, n = n, eps = s[1], delta = s[2], estimator = e,
        p_rmse = sqrt(mean((p - pe)^2)), p_min = min(p), p_max = max(p),
        mean_rmse = sqrt(mean((m - 0.8 * yg)^2)), sd_mean = mean(sdv),
        exact_mass_in_95 = cover,
        negative_share = mean(colSums(pmax(-W, 0)) / colSums(abs(W))),
        negative_count = mean(W < 0)))
    }
  }
}
options(width = 160)
cat("Event probabilities, posterior means, sds (exact 0.447) and the exact\n",
    "posterior mass inside the weighted 95% interval; means over 5 seeds:\n", sep = "")
print(aggregate(cbind(p_rmse, p_min, p_max, mean_rmse, sd_mean, exact_mass_in_95,
                      negative_share, negative_count) ~ estimator + n + eps,
                data = rows, FUN = mean, na.action = na.pass), digits = 3)

cat("\nThe issue's example (n = 300, seed 1, eps 0.01, delta 1e-4):\n")
set.seed(1)
x <- rnorm(300)
y <- x + rnorm(300, sd = 0.5)
fit <- kbr(x, y, eps = 0.01, delta = 1e-4)
yq <- c(-2, 0, 1.5)
print(rbind(projection = posterior_expect(fit, yq, function(x) x > 0)[, 1],
            signed = posterior_expect(fit, yq, function(x) x > 0, weights = "signed")[, 1],
            exact = stats::pnorm(0.8 * yq / sqrt(0.2))), digits = 3)

cat("\nKBR filter band mean -/+ 2 sd: share of hidden states inside, AR(1)\n",
    "x_t = 0.9 x_{t-1} + N(0, 0.3^2), y_t = x_t + N(0, 0.5^2), trained on two\n",
    "runs of 151 steps, 100 test steps, defaults; 10 seeds:\n", sep = "")
sim <- function(T) {
  x <- numeric(T)
  x[1] <- rnorm(1)
  for (t in 2:T) x[t] <- 0.9 * x[t - 1] + rnorm(1, sd = 0.3)
  list(x = x, y = x + rnorm(T, sd = 0.5))
}
cov <- sapply(1:10, function(seed) {
  set.seed(100 + seed)
  tr <- list(sim(151), sim(151))
  te <- sim(100)
  f <- kbr_filter(lapply(tr, `[[`, "x"), lapply(tr, `[[`, "y"), te$y)
  kf <- kalman_filter(te$y, A = 0.9, C = 1, Q = 0.09, R = 0.25)
  c(kbr = mean(abs(te$x - f$mean) <= 2 * f$sd),
    kalman = mean(abs(te$x - kf$mean) <= 2 * kf$sd),
    kbr_sd = mean(f$sd), kalman_sd = mean(kf$sd))
})
print(round(rowMeans(cov), 3))
print(round(apply(cov, 1, range), 3))
