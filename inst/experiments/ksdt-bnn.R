# KSDT on a Bayesian neural network in a PCA subspace, a stand-in for
# Hawkins, Koppel and Zhang, "Online, informative MCMC thinning with
# kernelized Stein discrepancy", Figs. 5-6 (top-1 agreement and total
# variation of the predictive against a long reference run, against the
# number of points kept; MALA and SPMCMC-MALA, no pruning / KSDT-SQRT /
# KSDT-LINEAR, mean over 5 chains). Not a reproduction: data set, network,
# subspace and sampler differ (below).
#
# Usage: Rscript inst/experiments/ksdt-bnn.R [outdir]
#   outdir  directory for the results (default "ksdt-bnn-output")
# Environment (to shorten the run for testing, or for the sensitivity
# settings):
#   KSDT_BNN_N      MALA iterations per chain (default 4000; at least 100)
#   KSDT_BNN_REF    iterations of each of the 4 reference chains (default
#                   40000; at least 1000)
#   KSDT_BNN_SEEDS  chains per temperature (default 5)
#   KSDT_BNN_T      temperatures, comma-separated (default "600,1": the
#                   setting the vignette leads with, then the untempered
#                   posterior)
#   KSDT_BNN_BASIS  "unit" (default: the principal directions unscaled, so
#                   that z is in weight units) or "sd" (scaled by the
#                   iterates' sd along them, the previous default: there
#                   the N(0, 10 I) prior is on a scale 12-31 times
#                   narrower in weight units and at T = 600 the posterior
#                   is nearly the prior, sds 2.94-3.15 against 3.16)
#
# Setting. The paper's networks (FRN-ResNet-20 on CIFAR-10, CNN-LSTM on
# IMDB) and their 2-d curve subspaces are out of reach here; this is the
# same construction on a small scale, all in plain R:
# - data: mlbench's Vehicle silhouettes (846 rows, 18 features, 4 classes;
#   our choice: a real tabular set with two hard-to-separate classes, opel
#   and saab), split after set.seed(1) into 600 training and 246 test rows,
#   features standardised by the training means and sds;
# - network: one hidden layer of 16 tanh units, softmax output (372
#   weights); log likelihood sum_i log softmax(f(x_i; w))_{y_i} over the
#   whole training set, divided by a temperature T; T = 600 first (the
#   authors' code uses a mini-batch mean of the log likelihood, i.e. a
#   tempered, stochastic-gradient posterior: T = 600, the training-set
#   size, is that tempering), then T = 1 (the exact posterior), exact in
#   both, so that MALA is exact and the score is in closed form;
# - subspace (Izmailov et al. 2020, "Subspace inference for Bayesian deep
#   learning", the PCA subspace): SGD with batch 50, fixed learning rate 0.2
#   and weight decay 2e-3 (our choice: the largest rate that stayed stable,
#   test accuracy about 0.83), 1000 warm-up epochs, then one iterate per epoch
#   over 100 epochs; w_hat = their mean (SWA), the k = 5 leading principal
#   directions as an orthonormal basis P (the authors' curve subspace is
#   2-d; 5 is the PCA subspace's usual rank; unit-length directions are
#   our choice, which puts the prior below in weight units: with the
#   directions scaled by the iterates' sds, 0.03-0.08, the prior was so
#   narrow in weight space that at T = 600 the posterior was nearly the
#   prior);
# - posterior on the coefficients z (w = w_hat + P z): prior N(0, 10 I)
#   (the authors' PRIOR_VARIANCE = 10), log density and score in closed
#   form (back-propagation, checked here by central finite differences);
#   the coordinates are then whitened by the mean and covariance of a pilot
#   MALA chain (3000 iterations, from z = 0, seed 4), z = m + R u, so that
#   one MALA step size suits every direction (the posterior sds in z range
#   over 1.7-3.1 at T = 600 and 0.025-0.29 at T = 1);
# - reference: 4 MALA chains of KSDT_BNN_REF iterations (seeds 101-104,
#   step adapted over 1000 discarded warm-up iterations); its predictive is
#   the mean test-set class probabilities over every 5th state (the
#   paper's reference: 20,000 samples of the authors' Langevin sampler;
#   40,000 per chain here, as 10,000 left each chain 0.006-0.010 in total
#   variation from the pooled predictive at T = 600, the size of the
#   differences between methods);
# - chains: KSDT_BNN_SEEDS MALA chains of KSDT_BNN_N iterations (seeds
#   1, 2, ...; adapted step, 1000 discarded warm-up iterations; the
#   paper's: 5 chains of 2000 steps), all from u = 0 (the pilot mean);
# - kernel: IMQ (c = 1, beta = -1/2) with L = I / med^2, med the median
#   distance between 1000 reference states (the authors: IMQ with L = I,
#   and RBF; we run IMQ only);
# - methods (column `method`), each judged at 25 checkpoints t (target
#   evaluations, log-spaced from 20 to KSDT_BNN_N, rounded to multiples of
#   5): "raw" (the first t states), "ksdt-linear" (KSDT with budget 0 and
#   minimum size t / 2, the authors' "linear" rule) and "ksdt-sqrt"
#   (sqrt(t log t)), both with floor 5 as the authors'; "thin-linear",
#   "thin-sqrt" (standard thinning: equally spaced states, as many as KSDT
#   kept at t); the SP-MCMC variants over blocks of 5 consecutive states of
#   the same chain (ksdt(candidates = 5), the authors' addition_rule =
#   'spmcmc' with 5 samples per step): "sp" (no pruning: minimum size =
#   number of blocks), "sp-ksdt-linear", "sp-ksdt-sqrt" (the rules counting
#   blocks), with "sp-thin-linear" and "sp-thin-sqrt" (standard thinning
#   to their sizes), and "thin-5" (every 5th state, the authors'
#   addition_rule = 'thin').
# Yardsticks on the 246 test rows, for the predictive q of a point set
# (mean softmax over its points) against the reference's p: top-1
# agreement mean(argmax q = argmax p) and total variation
# mean_i (1/2) sum_c |q_ic - p_ic| (the authors' bnn_metrics.py); against
# the true test labels, accuracy (argmax q = label) and the expected
# calibration error (10 equal-width bins of the confidence max_c q_ic, the
# usual choice: the authors' bin count was not checked); and the KSD with
# the fixed kernel. The reference's own accuracy and ECE, the posterior sds
# and means in z and how much a single state's predictive differs from the pooled
# one are in ksdt-bnn-reference.csv.
#
# Writes to outdir: ksdt-bnn-results.csv (one row per chain, method and
# checkpoint), ksdt-bnn-reference.csv (the reference chains: step,
# acceptance, each chain's agreement and TV against the pooled reference),
# ksdt-bnn.csv.gz (gzip-compressed; per temperature, method and checkpoint:
# means and standard errors over the chains) and ksdt-bnn-paired.csv (at the
# last checkpoint, each KSDT variant minus standard thinning to the same
# size and minus the raw chain's first as many states, paired by chain); the
# last two are copied, with ksdt-bnn-reference.csv, to inst/extdata/ when
# the script is run from the package's source directory.
#
# Results (R 4.2.2, one thread, nice, 2 cores shared with other jobs, load
# average 3.6-11.5 during the run; wall time 18 min 4 s: SGD 3 s; T = 600:
# pilot 7 s, reference 4 x 40,000 iterations 299 s, five chains with KSDT
# 22-28 s each; T = 1: pilot 15 s, reference 496 s, chains 21-30 s; peak
# memory 1.5 GB). SWA weights: test accuracy 0.813; iterate sds along the
# PCs 0.080-0.032. Score vs finite differences: relative 1.1e-10 (T = 600),
# 3.9e-10 (T = 1).
# How far the posterior is from the prior, and how much the predictive
# varies over it (pooled reference, 32,000 states; prior sd 3.16, mean 0):
#   T     sds in z    |means| in z  accuracy  ECE     state TV  top differs  contested
#   600   1.66-3.07   0.38-0.96     0.728     0.139   0.406     0.375        1.00
#   1     0.027-0.29  0.006-0.22    0.825     0.054   0.022     0.028        0.24
# (state TV: a single state's predictive against the pooled one; top
# differs: share of test rows where a state's top class is not the pooled
# one's; contested: share of test rows where the states are not unanimous.)
# At T = 600 the likelihood narrows the posterior in some directions (sd
# 1.66, about half the prior's) and hardly in another (3.07), and moves its
# mean by 0.4-1.0; a single state changes the top class on 37.5% of the
# test rows, and the model average is less accurate (0.728) than the SWA
# weights (0.813). At T = 1 the posterior is far inside the prior but the
# predictive varies little (a state changes 2.8% of the top classes).
# Reference noise (each reference chain against the pooled predictive):
# T = 600: TV 0.0041-0.0047, agreement 0.976-1; T = 1: TV 0.00012-0.00017,
# agreement 1 (an exploratory run with 4 x 10,000 at T = 600: TV
# 0.0061-0.0105, agreement 0.972-0.992).
# At t = 4000 evaluations, means over 5 chains (se); accuracy and ECE of
# the set's predictive on the 246 test rows (the reference's: above):
#   T = 600        points  agreement      TV               accuracy        ECE
#   raw            4000    0.971 (0.002)  0.0142 (0.0019)  0.720 (0.005)   0.125 (0.004)
#   ksdt-linear    2000    0.983 (0.003)  0.0072 (0.0005)  0.730 (0.002)   0.137 (0.002)
#   thin-linear    2000    0.967 (0.003)  0.0147 (0.0021)  0.720 (0.004)   0.128 (0.004)
#   sp              800    0.980 (0.003)  0.0088 (0.0007)  0.733 (0.004)   0.138 (0.005)
#   thin-5          800    0.964 (0.002)  0.0176 (0.0022)  0.720 (0.005)   0.135 (0.005)
#   ksdt-sqrt       183    0.970 (0.002)  0.0124 (0.0007)  0.725 (0.004)   0.137 (0.004)
#   thin-sqrt       183    0.946 (0.005)  0.0298 (0.0022)  0.729 (0.008)   0.133 (0.008)
#   sp-ksdt-sqrt     74    0.966 (0.002)  0.0186 (0.0004)  0.731 (0.007)   0.136 (0.009)
#   sp-thin-sqrt     74    0.896 (0.020)  0.0568 (0.0069)  0.716 (0.005)   0.103 (0.008)
#   T = 1 (untempered; the predictive varies little)
#   raw            4000    0.998 (0.001)  0.00058 (0.00009) 0.823         0.0554 (0.0011)
#   ksdt-linear    2000    0.998 (0.001)  0.00015 (0.00001) 0.824         0.0556 (0.0010)
#   thin-linear    2000    0.998 (0.001)  0.00059 (0.00010) 0.823         0.0564 (0.0010)
#   ksdt-sqrt       183    0.998 (0.001)  0.00019 (0.00002) 0.823         0.0564 (0.0010)
#   thin-sqrt       183    0.996 (0.002)  0.00157 (0.00022) 0.821         0.0524 (0.0020)
#   sp-ksdt-sqrt     74    0.998 (0.001)  0.00031 (0.00001) 0.823         0.0565 (0.0010)
#   sp-thin-sqrt     74    0.997 (0.002)  0.00251 (0.00036) 0.822         0.0522 (0.0019)
# Paired by chain, KSDT has the lower TV than standard thinning to its size
# and than the chain's first as many states in 5 of 5 chains for every
# variant at both temperatures. T = 600, KSDT minus standard thinning:
# ksdt-sqrt TV -0.0175 (se 0.0026), agreement +0.024 (0.006); ksdt-linear
# -0.0075 (0.0021), +0.015 (0.005); sp-ksdt-sqrt -0.038 (0.007), +0.070
# (0.019); against the chain's first 183 states ksdt-sqrt -0.048 (0.008),
# +0.087 (0.029). T = 1: ksdt-sqrt vs thinning -0.0014 (0.0002), agreement
# +0.002 (0.002). Accuracy (0.716-0.733 at T = 600, 0.821-0.824 at T = 1)
# does not separate the methods beyond a few test rows; at T = 600 the
# KSDT sets' ECE (0.136-0.138) is nearer the reference's 0.139 than the
# chain's (0.125) and standard thinning's (0.103-0.135).
# Along the way (T = 600): agreement climbs from 0.75 (the chain's first
# 20 states) to 0.97; KSDT-SQRT with 52 points (t = 440) has TV 0.028 and
# agreement 0.957, where the chain needs 401 states for that TV and 2570
# for that agreement; KSDT-SQRT's final TV (0.0124, 183 points) and
# KSDT-LINEAR's from 533 points on are below the whole 4000-state chain's.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
out <- exp_start(exp_args(out = "ksdt-bnn-output")$out)
n_chain <- as.integer(Sys.getenv("KSDT_BNN_N", "4000"))
n_ref <- as.integer(Sys.getenv("KSDT_BNN_REF", "40000"))
n_seeds <- as.integer(Sys.getenv("KSDT_BNN_SEEDS", "5"))
basis_scale <- match.arg(Sys.getenv("KSDT_BNN_BASIS", "unit"), c("unit", "sd"))
n_pilot <- 3000L
temperatures <- as.numeric(strsplit(Sys.getenv("KSDT_BNN_T", "600,1"), ",")[[1]])
stopifnot(n_chain >= 100L, n_ref >= 1000L, n_seeds >= 1L,
          length(temperatures) >= 1L, all(temperatures > 0))
say <- exp_logger()
if (!requireNamespace("mlbench", quietly = TRUE)) {
  stop("ksdt-bnn.R needs the mlbench package (the Vehicle data)")
}

## Data ---------------------------------------------------------------------
vehicle <- local({
  e <- new.env()
  utils::data("Vehicle", package = "mlbench", envir = e)
  e$Vehicle
})
set.seed(1)
split <- sample(nrow(vehicle))
tr <- split[1:600]
te <- split[-(1:600)]
feat <- as.matrix(vehicle[, 1:18])
mu <- colMeans(feat[tr, ])
sds <- apply(feat[tr, ], 2L, stats::sd)
std <- function(rows) cbind(sweep(sweep(feat[rows, ], 2L, mu), 2L, sds, "/"), 1)
x_tr <- std(tr)  # a column of ones carries the hidden layer's biases
x_te <- std(te)
y_tr <- as.integer(vehicle$Class[tr])
y_te <- as.integer(vehicle$Class[te])
n_hidden <- 16L
n_class <- nlevels(vehicle$Class)
n_in <- ncol(x_tr)                       # 18 features + 1
n_w1 <- n_in * n_hidden
n_w <- n_w1 + (n_hidden + 1L) * n_class  # 372 weights

## The network ----------------------------------------------------------------
# w = c(W1, W2): W1 is n_in x n_hidden (last row: biases), W2 is
# (n_hidden + 1) x n_class (last row: biases). Hidden a = tanh(x W1),
# logits l = (a, 1) W2.
net_layers <- function(w, x) {
  w1 <- matrix(w[seq_len(n_w1)], n_in)
  w2 <- matrix(w[-seq_len(n_w1)], n_hidden + 1L)
  a <- tanh(x %*% w1)
  a1 <- cbind(a, 1)
  l <- a1 %*% w2
  l <- l - l[cbind(seq_len(nrow(l)), max.col(l, "first"))]
  e <- exp(l)
  list(w2 = w2, a = a, a1 = a1, l = l, se = .rowSums(e, nrow(e), n_class),
       e = e)
}
# class probabilities of the rows of x
net_probs <- function(w, x) {
  f <- net_layers(w, x)
  f$e / f$se
}
# log likelihood sum_i log softmax(l_i)_{y_i} and its gradient in w
# (back-propagation: dl = onehot(y) - softmax, da = dl W2' (1 - a^2))
net_loglik <- function(w, x, y) {
  f <- net_layers(w, x)
  iy <- cbind(seq_along(y), y)
  g <- -f$e / f$se
  g[iy] <- g[iy] + 1
  dz <- tcrossprod(g, f$w2[seq_len(n_hidden), , drop = FALSE]) * (1 - f$a^2)
  list(value = sum(f$l[iy] - log(f$se)),
       grad = c(crossprod(x, dz), crossprod(f$a1, g)))
}

## SGD iterates and the PCA subspace -----------------------------------------
sgd_lr <- 0.2
sgd_wd <- 2e-3
sgd_batch <- 50L
sgd_warmup <- 1000L
sgd_keep <- 100L
set.seed(2)
w <- stats::rnorm(n_w, sd = c(rep(1 / sqrt(n_in), n_w1),
                              rep(1 / sqrt(n_hidden + 1), n_w - n_w1)))
iterates <- matrix(0, sgd_keep, n_w)
for (ep in seq_len(sgd_warmup + sgd_keep)) {
  o <- sample(length(y_tr))
  for (b in seq_len(length(y_tr) %/% sgd_batch)) {
    r <- o[(b - 1L) * sgd_batch + seq_len(sgd_batch)]
    g <- net_loglik(w, x_tr[r, , drop = FALSE], y_tr[r])$grad
    w <- w + sgd_lr * (g / sgd_batch - sgd_wd * w)
  }
  if (ep > sgd_warmup) iterates[ep - sgd_warmup, ] <- w
}
w_hat <- colMeans(iterates)
pca <- svd(sweep(iterates, 2L, w_hat), nu = 0L, nv = 5L)
k <- 5L
sd_pc <- pca$d[seq_len(k)] / sqrt(sgd_keep - 1)
basis <- if (basis_scale == "sd") {
  sweep(pca$v[, seq_len(k)], 2L, sd_pc, "*")  # n_w x k
} else {
  pca$v[, seq_len(k)]  # orthonormal: z is in weight units
}
accuracy <- function(prob, y) mean(max.col(prob, "first") == y)
say(paste("SGD: %d + %d epochs; SWA weights: train accuracy %.3f, test %.3f;",
          "iterate sds along the %d PCs %s"), sgd_warmup, sgd_keep,
    accuracy(net_probs(w_hat, x_tr), y_tr), accuracy(net_probs(w_hat, x_te), y_te),
    k, paste(signif(sd_pc, 3), collapse = ", "))

## The posterior on the subspace ----------------------------------------------
prior_var <- 10
# The target at temperature `temp` in coordinates u, z = z0 + R u, w = w_hat
# + P z: log p(u) = loglik(w) / temp - |z|^2 / (2 prior_var), score R' (P'
# dloglik/dw / temp - z / prior_var). One forward-backward pass serves the
# log density and the score at the same point (MALA asks for both).
subspace_target <- function(temp, z0, R) {
  pr <- basis %*% R
  w0 <- w_hat + drop(basis %*% z0)
  last <- NULL
  val <- NULL
  at <- function(u) {
    if (!identical(u, last)) {
      z <- z0 + drop(R %*% u)
      f <- net_loglik(w0 + drop(pr %*% u), x_tr, y_tr)
      val <<- list(ld = f$value / temp - sum(z^2) / (2 * prior_var),
                   score = drop(crossprod(pr, f$grad) / temp -
                                  crossprod(R, z) / prior_var))
      last <<- u + 0
    }
    val
  }
  tg <- kb_target(function(u) at(u)$ld, function(u) at(u)$score, dim = k)
  tg$weights <- function(u) w0 + drop(pr %*% u)  # the network's weights
  tg$coef <- function(u) z0 + drop(R %*% u)       # the PCA coefficients z
  tg
}
# the score against central finite differences of the log density
fd_check <- function(tg, u) {
  h <- 1e-5
  fd <- vapply(seq_len(k), function(j) {
    e <- h * (seq_len(k) == j)
    (tg$log_density(u + e) - tg$log_density(u - e)) / (2 * h)
  }, 0)
  max(abs(fd - tg$score(u))) / max(abs(fd))
}
# the whitened target at temperature temp: a pilot MALA chain in z gives
# the mean and covariance
whitened_target <- function(temp) {
  tg_z <- subspace_target(temp, rep(0, k), diag(k))
  set.seed(3)
  rel <- fd_check(tg_z, stats::rnorm(k))
  set.seed(4)
  pilot <- mala(tg_z, rep(0, k), n_pilot, progress = FALSE)
  tg <- subspace_target(temp, colMeans(pilot$x), t(chol(stats::cov(pilot$x))))
  set.seed(5)
  rel <- max(rel, fd_check(tg, stats::rnorm(k)))
  say(paste("T = %g: pilot MALA in z: step %.3g, acceptance %.3f, posterior",
            "sds %s; score against finite differences: max relative",
            "difference %.2g"), temp, pilot$step, pilot$accept_rate,
      paste(signif(apply(pilot$x, 2L, stats::sd), 3), collapse = ", "), rel)
  stopifnot(rel < 1e-5)
  tg
}

# test-set class probabilities of the states (rows of u), one row per state
# (the n_te x n_class matrix flattened)
state_probs <- function(target, u) {
  t(vapply(seq_len(nrow(u)), function(i) {
    as.vector(net_probs(target$weights(u[i, ]), x_te))
  }, numeric(nrow(x_te) * n_class)))
}
# expected calibration error of class probabilities prob (rows) for labels
# y: the confidence max_c prob_ic binned into `bins` equal-width bins on
# [0, 1]; sum over bins of (share of rows) x |accuracy - mean confidence|
# (Guo et al. 2017; 10 bins, the usual choice: the authors' bin count was
# not checked)
ece <- function(prob, y, bins = 10L) {
  conf <- prob[cbind(seq_len(nrow(prob)), max.col(prob, "first"))]
  hit <- max.col(prob, "first") == y
  b <- pmin(pmax(ceiling(conf * bins), 1L), bins)
  sum(vapply(split(seq_along(conf), b), function(i) {
    length(i) * abs(mean(hit[i]) - mean(conf[i]))
  }, 0)) / length(conf)
}
# predictive q (flattened n_te x n_class matrix) against the reference's p:
# top-1 agreement and total variation (the authors' bnn_metrics.py), and
# against the true test labels: accuracy and ECE
agree_tv <- function(q, p) {
  q <- matrix(q, ncol = n_class)
  p <- matrix(p, ncol = n_class)
  c(agreement = mean(max.col(q, "first") == max.col(p, "first")),
    tv = mean(rowSums(abs(q - p))) / 2, accuracy = accuracy(q, y_te),
    ece = ece(q, y_te))
}

# The reference of a target: 4 MALA chains; returns the pooled predictive,
# the kernel (median heuristic on 1000 of its states) and a table
reference <- function(target, temp) {
  runs <- lapply(101:104, function(seed) {
    set.seed(seed)
    ch <- exp_timed(mala(target, rep(0, k), n_ref, progress = FALSE))
    keep <- seq(5L, n_ref, by = 5L)
    sp <- state_probs(target, ch$x[keep, , drop = FALSE])
    list(chain = ch, x = ch$x[keep, , drop = FALSE], probs = sp,
         pred = colMeans(sp))
  })
  pred <- Reduce(`+`, lapply(runs, `[[`, "pred")) / length(runs)
  top <- max.col(matrix(pred, ncol = n_class), "first")
  # how much the predictive varies over the posterior: each state's
  # predictive against the pooled one (mean TV, share of test rows whose
  # top class differs) and the share of test rows on which the states'
  # top classes are not unanimous
  spread <- function(sp) {
    tops <- vapply(seq_len(nrow(sp)), function(i) {
      max.col(matrix(sp[i, ], ncol = n_class), "first")
    }, integer(length(top)))                       # n_te x states
    c(state_tv = mean(abs(sweep(sp, 2L, pred))) * n_class / 2,
      state_disagree = mean(tops != top),
      contested = mean(rowSums(tops != top) > 0))
  }
  tab <- do.call(rbind, lapply(seq_along(runs), function(i) {
    r <- runs[[i]]
    z <- t(apply(r$x, 1L, target$coef))
    zsd <- apply(z, 2L, stats::sd)
    zm <- abs(colMeans(z))
    data.frame(temperature = temp, chain = 100L + i, n = n_ref,
               step_size = r$chain$step, accept_rate = r$chain$accept_rate,
               t(agree_tv(r$pred, pred)), t(spread(r$probs)),
               sd_z_min = min(zsd), sd_z_max = max(zsd),
               abs_mean_z_min = min(zm), abs_mean_z_max = max(zm),
               sd_prior = sqrt(prior_var), seconds = exp_secs(r$chain))
  }))
  pooled <- data.frame(temperature = temp, chain = NA_integer_,
                       n = length(runs) * n_ref, step_size = NA_real_,
                       accept_rate = NA_real_,
                       t(agree_tv(pred, pred)),
                       t(spread(do.call(rbind, lapply(runs, `[[`, "probs")))),
                       sd_z_min = NA_real_, sd_z_max = NA_real_,
                       abs_mean_z_min = NA_real_, abs_mean_z_max = NA_real_,
                       sd_prior = sqrt(prior_var), seconds = NA_real_)
  zall <- t(apply(do.call(rbind, lapply(runs, `[[`, "x")), 1L, target$coef))
  zsd <- apply(zall, 2L, stats::sd)
  pooled$sd_z_min <- min(zsd)
  pooled$sd_z_max <- max(zsd)
  pooled$abs_mean_z_min <- min(abs(colMeans(zall)))
  pooled$abs_mean_z_max <- max(abs(colMeans(zall)))
  tab <- rbind(tab, pooled)  # the last row (chain NA): the pooled reference
  x <- do.call(rbind, lapply(runs, `[[`, "x"))
  med <- stats::median(stats::dist(x[round(seq(1, nrow(x), length.out = 1000)), ]))
  say(paste("T = %g: reference 4 x %d MALA iterations (%.0f s), test accuracy",
            "%.3f, ECE %.4f; posterior sds in z %.3g-%.3g (prior %.3g), |means|",
            "%.3g-%.3g; a",
            "state's predictive against the pooled one: TV %.4f, top class",
            "differs on %.4f of test rows, states not unanimous on %.3f;",
            "each chain against the pooled predictive: agreement %s, TV",
            "%s; kernel IMQ, L = I / med^2 with med = %.4g"), temp, n_ref,
      sum(tab$seconds, na.rm = TRUE), pooled$accuracy, pooled$ece,
      pooled$sd_z_min, pooled$sd_z_max, sqrt(prior_var),
      pooled$abs_mean_z_min, pooled$abs_mean_z_max, pooled$state_tv,
      pooled$state_disagree, pooled$contested,
      paste(signif(tab$agreement[1:4], 4), collapse = ", "),
      paste(signif(tab$tv[1:4], 3), collapse = ", "), med)
  list(pred = pred, kernel = imq_kernel(precon = med^2), table = tab)
}

## The chains, thinned ----------------------------------------------------------
m_cand <- 5L
checkpoints <- unique(m_cand * round(10^seq(log10(20), log10(n_chain),
                                            length.out = 25L) / m_cand))
# the KSDT variants: minimum size rule and coefficient, candidates (block
# length); "sp" never prunes (minimum size = number of blocks)
variants <- list(
  "ksdt-linear" = list(rule = "linear", coef = 0.5, m = 1L),
  "ksdt-sqrt" = list(rule = "sqrt", coef = 1, m = 1L),
  "sp" = list(rule = "linear", coef = 1, m = m_cand),
  "sp-ksdt-linear" = list(rule = "linear", coef = 0.5, m = m_cand),
  "sp-ksdt-sqrt" = list(rule = "sqrt", coef = 1, m = m_cand))
spaced <- function(size, t) ceiling(seq_len(size) * t / size)

# One chain (seed) at temperature temp: every method at every checkpoint
chain_rows <- function(target, ref, temp, seed) {
  kernel <- ref$kernel
  set.seed(seed)
  ch <- exp_timed(mala(target, rep(0, k), n_chain, progress = FALSE))
  t0 <- proc.time()[["elapsed"]]
  probs <- state_probs(target, ch$x)
  path <- ksd_path(ch$x, ch$score, kernel, standardize = FALSE)$ksd
  t_pred <- proc.time()[["elapsed"]] - t0
  rows <- list()
  add <- function(method, t, idx, ksd) {
    rows[[length(rows) + 1L]] <<- data.frame(
      temperature = temp, seed = seed, method = method, t = t,
      size = length(idx),
      t(agree_tv(colMeans(probs[idx, , drop = FALSE]), ref$pred)), ksd = ksd)
  }
  sub_ksd <- function(idx) {
    ksd(ch$x[idx, , drop = FALSE], ch$score[idx, , drop = FALSE], kernel, standardize = FALSE)
  }
  for (t in checkpoints) {
    add("raw", t, seq_len(t), path[t])
    idx5 <- seq(m_cand, t, by = m_cand)
    add("thin-5", t, idx5, sub_ksd(idx5))
  }
  t0 <- proc.time()[["elapsed"]]
  for (nm in names(variants)) {
    v <- variants[[nm]]
    st <- ksdt_stream(k, min_size = v$rule, min_size_coef = v$coef,
                      min_size_floor = 5, kernel = kernel, progress = FALSE, standardize = FALSE)
    done <- 0L
    for (t in checkpoints) {
      r <- seq.int(done + 1L, t)
      ksdt_push(st, ch$x[r, , drop = FALSE], ch$score[r, , drop = FALSE],
                candidates = v$m)
      done <- t
      fit <- ksdt_result(st)
      add(nm, t, fit$index, fit$ksd[length(fit$ksd)])
      if (nm != "sp") {  # (sp keeps every 5th state's block: thin-5's size)
        idx <- spaced(length(fit$index), t)
        add(sub("ksdt-", "thin-", nm), t, idx, sub_ksd(idx))
      }
    }
  }
  # the raw chain with as many points as each thinned set: its first states
  sizes <- unique(vapply(rows, `[[`, 0L, "size"))
  for (s in setdiff(sizes, checkpoints)) add("raw", s, seq_len(s), path[s])
  res <- do.call(rbind, rows)
  last <- res[res$t == max(checkpoints), ]
  say(paste("T = %g, chain %d: step %.3g, acceptance %.3f (%.0f s); predictions",
            "and KSD path %.0f s; KSDT streams %.0f s; at t = %d: %s"), temp,
      seed, ch$step, ch$accept_rate, exp_secs(ch), t_pred,
      proc.time()[["elapsed"]] - t0, max(checkpoints),
      paste(sprintf("%s %d pts TV %.4f", last$method, last$size, last$tv),
            collapse = "; "))
  res
}

results <- list()
ref_tabs <- list()
for (temp in temperatures) {
  target <- whitened_target(temp)
  ref <- reference(target, temp)
  ref_tabs[[length(ref_tabs) + 1L]] <- ref$table
  for (seed in seq_len(n_seeds)) {
    results[[length(results) + 1L]] <- chain_rows(target, ref, temp, seed)
  }
}
res <- do.call(rbind, results)
rownames(res) <- NULL
ref_tab <- do.call(rbind, ref_tabs)

## Summary ------------------------------------------------------------------------
se <- function(v) stats::sd(v) / sqrt(length(v))
# means and standard errors over the chains at each checkpoint
# (the raw rows at the thinned sets' sizes have t = size, off the checkpoints)
at_cp <- res[res$t %in% checkpoints, ]
key <- unique(at_cp[c("temperature", "method", "t")])
curves <- do.call(rbind, lapply(seq_len(nrow(key)), function(i) {
  r <- at_cp[at_cp$temperature == key$temperature[i] &
               at_cp$method == key$method[i] & at_cp$t == key$t[i], ]
  data.frame(key[i, ], chains = nrow(r), size = mean(r$size),
             agreement = signif(mean(r$agreement), 5),
             agreement_se = signif(se(r$agreement), 3),
             tv = signif(mean(r$tv), 4), tv_se = signif(se(r$tv), 3),
             accuracy = signif(mean(r$accuracy), 5),
             accuracy_se = signif(se(r$accuracy), 3),
             ece = signif(mean(r$ece), 4), ece_se = signif(se(r$ece), 3),
             ksd = signif(mean(r$ksd), 4), ksd_se = signif(se(r$ksd), 3),
             row.names = NULL)
}))
# at the last checkpoint, each KSDT variant against standard thinning to the
# same size and against the raw chain's first as many states, paired by
# chain (differences KSDT minus the other: negative TV favours KSDT)
paired <- do.call(rbind, lapply(temperatures, function(temp) {
  rt <- res[res$temperature == temp, ]
  last <- rt[rt$t == max(checkpoints), ]
  do.call(rbind, lapply(names(variants), function(nm) {
    a <- last[last$method == nm, ]
    thin <- if (nm == "sp") "thin-5" else sub("ksdt-", "thin-", nm)
    do.call(rbind, lapply(c(thin, "raw"), function(other) {
      b <- t(vapply(seq_len(nrow(a)), function(i) {
        r <- rt[rt$seed == a$seed[i] & rt$method == other &
                  rt$size == a$size[i], ]
        if (other != "raw") r <- r[r$t == max(checkpoints), ]
        c(r$agreement[1], r$tv[1], r$accuracy[1], r$ece[1])
      }, c(0, 0, 0, 0)))
      data.frame(temperature = temp, method = nm, versus = other,
                 t = max(checkpoints), size = mean(a$size),
                 d_agreement = signif(mean(a$agreement - b[, 1]), 4),
                 d_agreement_se = signif(se(a$agreement - b[, 1]), 3),
                 d_tv = signif(mean(a$tv - b[, 2]), 4),
                 d_tv_se = signif(se(a$tv - b[, 2]), 3),
                 tv_wins = sum(a$tv < b[, 2]),
                 d_accuracy = signif(mean(a$accuracy - b[, 3]), 4),
                 d_accuracy_se = signif(se(a$accuracy - b[, 3]), 3),
                 d_ece = signif(mean(a$ece - b[, 4]), 4),
                 d_ece_se = signif(se(a$ece - b[, 4]), 3),
                 chains = nrow(a))
    }))
  }))
}))
written <- exp_write(list("ksdt-bnn-results.csv" = res,
                          "ksdt-bnn-reference.csv" = ref_tab,
                          "ksdt-bnn.csv.gz" = curves,
                          "ksdt-bnn-paired.csv" = paired), out,
                     extdata = c("ksdt-bnn.csv.gz", "ksdt-bnn-paired.csv",
                                 "ksdt-bnn-reference.csv"))
for (temp in temperatures) {
  cat(sprintf("\nT = %g, at t = %d (means over %d chains; se):\n", temp,
              max(checkpoints), n_seeds))
  print(curves[curves$temperature == temp & curves$t == max(checkpoints),
               -c(1L, 3L)], row.names = FALSE)
  cat("Paired differences, KSDT minus the other (TV < 0 favours KSDT):\n")
  print(paired[paired$temperature == temp, -c(1, 4)], row.names = FALSE)
}
cat("\nReference chains:\n")
print(ref_tab, row.names = FALSE, digits = 4)
say("done; wrote %s", paste(written, collapse = ", "))
