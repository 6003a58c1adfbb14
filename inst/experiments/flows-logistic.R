# Bayesian logistic regression on the Pima Indians diabetes data (MASS::Pima.tr
# for training, MASS::Pima.te for testing): SVGD particles against a long MALA
# chain thinned by Stein thinning, and against the same chain thinned by
# keeping equally spaced states.
#
# Usage: Rscript flows-logistic.R [repeats] [output-directory]
#   repeats  independent repetitions (default 10)
#   output   directory for flows-logistic.csv (default ".")
#
# Target: logistic_regression_target(Pima.tr[, 1:7], Pima.tr$type,
# prior_sd = 5): an intercept and the seven covariates, centred and scaled,
# N(0, 5^2) priors; d = 8. The reference posterior is a MALA chain of
# 200,000 iterations. In each repetition:
#   MALA       a chain of 100,000 iterations from 0 (step adapted over 1000
#              warm-up iterations), thinned to m points by stein_thin() and,
#              for comparison, to m equally spaced states (m = 50, 100, 200)
#   SVGD       n particles from N(0, I), 3000 iterations, step 0.05 (AdaGrad
#              with momentum, median bandwidth), n = 50, 100, 200
# Reported per point set: test accuracy (predictive probability > 0.5),
# mean test log predictive density, the KSD (IMQ kernel, length-scale fixed
# from the reference chain), the largest error of the posterior means in
# units of the reference posterior sd, and the mean ratio of the
# posterior sds to the reference.
#
# Writes flows-logistic.csv: one row per repetition, method and size, and
# rows with repeat 0 for the reference chain and the maximum-likelihood fit.
# inst/extdata/flows-logistic.csv came from `Rscript flows-logistic.R`
# (5.3 min on a shared two-core machine).
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(repeats = "10", out = ".")
R <- as.integer(a$repeats)
out <- exp_start(a$out)
if (!requireNamespace("MASS", quietly = TRUE)) stop("needs package MASS")

tr <- MASS::Pima.tr
te <- MASS::Pima.te
tg <- logistic_regression_target(tr[, 1:7], tr$type, prior_sd = 5)
y_te <- te$type == "Yes"
print(tg)

set.seed(0)
t0 <- proc.time()[["elapsed"]]
ref_chain <- mala(tg, x0 = rep(0, tg$dim), n_iter = 200000)
t_ref <- proc.time()[["elapsed"]] - t0
ref_mean <- colMeans(ref_chain$x)
ref_sd <- apply(ref_chain$x, 2, sd)
med <- median(dist(ref_chain$x[seq(1, 200000, by = 200), ]))
k_ksd <- imq_kernel(precon = med^2)
cat(sprintf(paste0("reference chain: 200000 MALA iterations in %.1f s, ",
                   "acceptance %.2f\n"), t_ref, ref_chain$accept_rate))

evaluate <- function(b) {
  p <- tg$predict(b, te[, 1:7])
  c(accuracy = mean((p > 0.5) == y_te),
    log_pred = mean(ifelse(y_te, log(p), log1p(-p))),
    ksd = ksd(b, tg, k_ksd, standardize = FALSE),
    mean_err = max(abs(colMeans(b) - ref_mean) / ref_sd),
    sd_ratio = mean(apply(b, 2, sd) / ref_sd))
}
row_of <- function(rep, method, size, b, secs) {
  data.frame(rep = rep, method = method, size = size, t(signif(evaluate(b), 5)),
             seconds = round(secs, 2))
}

# the reference chain itself (its 200,000 states) and the MLE
fit_glm <- stats::glm(type ~ ., data = tr, family = stats::binomial)
p_glm <- stats::predict(fit_glm, te, type = "response")
res <- list(
  row_of(0L, "reference MALA chain", 200000L,
         ref_chain$x[seq(1, 200000, by = 20), ], t_ref),
  data.frame(rep = 0L, method = "maximum likelihood (glm)", size = 1L,
             accuracy = signif(mean((p_glm > 0.5) == y_te), 5),
             log_pred = signif(mean(ifelse(y_te, log(p_glm),
                                           log1p(-p_glm))), 5),
             ksd = NA, mean_err = NA, sd_ratio = NA, seconds = NA))

sizes <- c(50L, 100L, 200L)
t_all <- proc.time()[["elapsed"]]
for (r in seq_len(R)) {
  set.seed(r)
  t0 <- proc.time()[["elapsed"]]
  ch <- mala(tg, x0 = rep(0, tg$dim), n_iter = 100000)
  t_chain <- proc.time()[["elapsed"]] - t0
  for (m in sizes) {
    t0 <- proc.time()[["elapsed"]]
    th <- stein_thin(ch$x, ch$score, m = m)
    t_th <- proc.time()[["elapsed"]] - t0
    res[[length(res) + 1L]] <- row_of(r, "MALA + Stein thinning", m,
                                      th$points, t_chain + t_th)
    idx <- round(seq(100000 / m, 100000, length.out = m))
    res[[length(res) + 1L]] <- row_of(r, "MALA, equally spaced", m,
                                      ch$x[idx, ], t_chain)
  }
  for (n in sizes) {
    t0 <- proc.time()[["elapsed"]]
    sv <- svgd(matrix(rnorm(n * tg$dim), n), tg, n_iter = 3000, step_size = 0.05,
               progress = FALSE, tol = 0)
    res[[length(res) + 1L]] <- row_of(r, "SVGD", n, sv$x,
                                      proc.time()[["elapsed"]] - t0)
  }
  tab <- do.call(rbind, res)
  written <- exp_write(list("flows-logistic.csv" = tab), out)
  cur <- tab[tab$rep == r & tab$size == 100L, ]
  cat(sprintf("repeat %2d: accuracy (m or n = 100) %s; %.0f s so far\n", r,
              paste(sprintf("%s %.3f", cur$method, cur$accuracy),
                    collapse = ", "),
              proc.time()[["elapsed"]] - t_all))
}

tab <- do.call(rbind, res)
rep_rows <- tab[tab$rep > 0L, ]
agg <- stats::aggregate(cbind(accuracy, log_pred, ksd, mean_err, sd_ratio,
                              seconds) ~ method + size, data = rep_rows,
                        FUN = mean)
cat(sprintf("\nMeans over %d repetitions:\n", R))
print(agg[order(agg$size, agg$method), ], row.names = FALSE, digits = 3)
cat("\nReference and maximum likelihood:\n")
print(tab[tab$rep == 0L, ], row.names = FALSE, digits = 3)
cat(sprintf("\nTotal %.0f s. Wrote %s\n",
            proc.time()[["elapsed"]] - t_all + t_ref, written))
