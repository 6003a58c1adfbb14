# Why `standardize = TRUE` is the default (issue 30): the KSD with and
# without standardisation on a 2-d Gaussian target whose coordinates have
# standard deviations 1 and 0.01. The numbers are those of 'Standardisation'
# in ?kernbayes.
#
# Usage: Rscript inst/experiments/standardisation.R
#
# Prints (2000 points each):
#   exact    five sets of exact draws: the KSD unstandardised and
#            standardised, and after shifting coordinate 1 by 0.5 or
#            coordinate 2 by 0.005 (half a standard deviation each)
#   coords   the KSD of each coordinate alone (exact draws, the last set)
#   chains   four rwm() chains (step size adapted): both KSDs, the sample
#            standard deviations and the acceptance rate
library(kernbayes)

tg <- gaussian_target(c(0, 0), diag(c(1, 0.01^2)))
both <- function(x, s) {
  c(plain = ksd(x, s, standardize = FALSE, progress = FALSE),
    std = ksd(x, s, standardize = TRUE, progress = FALSE))
}

set.seed(1)
exact <- t(sapply(1:5, function(i) {
  y <- sample_target(tg, 2000)
  y1 <- y
  y1[, 1] <- y1[, 1] + 0.5
  y2 <- y
  y2[, 2] <- y2[, 2] + 0.005
  c(both(y, target_score(tg, y)), both(y1, target_score(tg, y1)),
    both(y2, target_score(tg, y2)))
}))
colnames(exact) <- c("plain", "std", "plain_shift1", "std_shift1",
                     "plain_shift2", "std_shift2")
cat("exact draws:\n")
print(signif(exact, 3))
cat("means:\n")
print(signif(colMeans(exact), 3))

y <- sample_target(tg, 2000)
s <- target_score(tg, y)
cat("each coordinate alone (exact draws):\n")
print(signif(rbind(coord1 = both(y[, 1], s[, 1]),
                   coord2 = both(y[, 2], s[, 2])), 3))

chains <- t(sapply(1:4, function(i) {
  ch <- rwm(tg, x0 = c(0, 0), n_iter = 2000, progress = FALSE)
  c(both(ch$x, ch$score), sd1 = sd(ch$x[, 1]), sd2 = sd(ch$x[, 2]),
    accept = ch$accept_rate)
}))
cat("rwm chains:\n")
print(signif(chains, 3))
