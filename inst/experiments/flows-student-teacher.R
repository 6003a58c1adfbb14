# The student-teacher network of Arbel, Korba, Salim & Gretton (2019),
# "Maximum mean discrepancy gradient flow" (Sec. 5, App. G), as rerun by
# Chen et al. (2024), "(De)-regularized maximum mean discrepancy gradient
# flow": MMD flow without and with noise injection, and DrMMD flow, on the
# neurons of a two-layer network, through user_kernel().
#
# Usage: Rscript flows-student-teacher.R [mode] [output] [seeds] [n_iter]
#                                        [eps] [lambdas] [seed_from]
#   mode       "full" (default: the settings below), "quick" (100
#              iterations, 1 seed, all 18 runs: about 40 s) or "report" (no
#              runs: the report below on output/flows-student-teacher.csv.gz)
#   output     directory for flows-student-teacher.csv.gz (gzip; default
#              "."); a full
#              run from the package source also copies it to inst/extdata
#              (not when seed_from is given: a part of a split run)
#   seeds      number of seeds (default 10)
#   n_iter     iterations per run (default 200)
#   eps        the MMD flow's step size (default 3)
#   lambdas    DrMMD's lambda values, comma-separated (default the talk's
#              sweep 1e-5, 1e-4, ..., 1e2)
#   seed_from  first seed (default 1): a run split over two processes runs
#              seeds 1-5 and 6-10 ("... full a 5 500 3 '' 1" and
#              "... full b 5 500 3 '' 6"); the two CSVs bound by rows are
#              the full run's (each seed's runs depend on the seed only)
#
# The setting (from the authors' code, MichaelArbel/MMD-gradient-flow,
# and its copy in hudsonchen/DrMMD/student_teacher: train_student_teacher.py,
# networks.py, losses.py, trainer.py; the talk's slides 9 and 25 state the
# kernel and "same setting as [Arbel et al., 2019]"):
#   inputs x uniform on the unit sphere of R^50 (d_int = 50);
#   a particle z = (W1, w2), W1 a 3 x 50 matrix, w2 in R^3 (H = 3):
#     D = 153 coordinates; psi(x, z) = exp(-(w2' relu(W1 x))^2 / sigma^2),
#     sigma = 2 (the authors' "quadexp" output non-linearity), no biases;
#   the teacher is ONE such particle (M = 1), weights N(0, 1); the student
#     the average of psi over n particles, weights N(0.001, 1);
#   the loss E_x[(f_student(x) - f_teacher(x))^2] is MMD^2 between the
#     particles and the teacher for k(z, z') = E_x[psi(x, z) psi(x, z')]
#     (the authors log half of it, "0.5 * mean((y - f)^2)"; we report the
#     MMD^2 itself);
#   noise injection: z_i + beta u_i with beta_0 = 1, halved every 1000
#     epochs in Arbel et al. (every 500 in the DrMMD configs; one epoch =
#     10 mini-batch steps);
#   MMD flow step: the authors' SGD lr = 0.1 on 0.5 MMD^2 is the step
#     epsilon = 0.05 of mmd_flow() (x <- x - epsilon grad f(z), no factor 2);
#   DrMMD: their update is lr (1 + lambda) grad h, ours step_size * 2 (1 +
#     lambda) grad h (?dmmd_flow), so step_size = lr / 2; their sweep:
#     lambda 1e-4 .. 1e3, lr 0.01 .. 10, with and without noise. The
#     teacher (M = 1) is passed as two equal rows (the flows need two; the
#     empirical measure, hence MMD and DrMMD, is the same).
# Scaled down (our choice, to fit the 18 runs x 10 seeds into 35 min on a
# shared 2-core machine): the authors run n = 1000 particles for 1e5 (MMD)
# or 1.5e5 (DrMMD) mini-batch steps of 100 inputs from a training set of
# 1000, on a GPU; we run n = 100 particles, full-batch on a fixed training
# sample of N = 250 inputs (the kernel is a fixed function in the flows:
# its expectation over x is the mean over this sample), for 200 iterations
# of step epsilon = 3 (flow time 600, against the authors' 1e5 * 0.05 =
# 5000; the earlier 3-seed version ran 500). The noise halves every n_iter
# / 5 iterations, so that the schedule spans the run as the authors' spans
# theirs. DrMMD runs the talk's sweep lambda = 1e-5, 1e-4, ..., 1e2, each
# without and with noise, with step_size = epsilon / 2 * min(lambda, 1)
# (the update grows like 1 / lambda: the authors' rule of scaling the
# learning rate by lambda). Cost: a noisy DrMMD run takes about twice a
# noiseless one (the gradient at the noisy points is a second pair of
# kernel sums).
#
# Every n_iter / 20 iterations: test = MMD^2 on 500 test inputs drawn
# afresh, valid = MMD^2 on another 500 fresh inputs (used only to choose
# lambda), train = MMD^2 on the training inputs (the MMD flow's objective).
# Writes flows-student-teacher.csv.gz (gzip-compressed; read.csv() reads it
# as it is): method, lambda, noise, seed, iter, train, valid, test.
#
# Seeds: seed s draws the data, test inputs, teacher, start and validation
# inputs from set.seed(2019 + s) (the same for every method: comparisons
# are paired by seed); the noise draws follow in the same stream.
#
# Results (10 seeds, 200 iterations; run split over two processes, seeds
# 1-5 and 6-10, as under Usage, then bound by rows; one thread each,
# reference BLAS, nice): 21 min 20 s wall on the shared two-core machine
# (load average 2.6-3.9; each process got about half a core). The gradient
# check prints a relative error of about 5e-8. Final test MMD^2, mean (se)
# over seeds; start 0.065:
#   MMD 0.0310 (0.0085), MMD + noise 0.0300 (0.0079);
#   DrMMD lambda 1e-5 .. 1e2: 0.0996 0.0995 0.0986 0.0908 0.0533 0.0291
#     0.0306 0.0309; with noise: 0.1009 0.1008 0.1000 0.0927 0.0543
#     0.0272 0.0294 0.0299.
# Paired by seed (difference, se, geometric-mean ratio; p of paired t,
# Wilcoxon, sign test; seeds better):
#   DrMMD + noise (1) vs MMD          -0.0038 0.0018 0.89; 0.062 0.006 0.021; 9/10
#   DrMMD + noise (1) vs MMD + noise  -0.0028 0.0012 0.92; 0.049 0.014 0.021; 9/10
#   DrMMD (1) vs MMD                  -0.0019 0.0009 0.94; 0.067 0.027 0.11;  8/10
#   MMD + noise vs MMD                -0.0010 0.0007 0.98; 0.19  0.037 0.11;  8/10
#   noise vs none, DrMMD lambda 1     -0.0020 0.0011 0.95; 0.11  0.004 0.021; 9/10
#   noise vs none, lambda <= 0.1: noise worse (ratios 1.01-1.03, at most
#   3/10 better; lambda 0.01: 0/10, p 0.002).
# lambda cross-fitted on the validation inputs (odd seeds chosen on the
# even and back) picks 1 in both halves. Only DrMMD + noise at lambda = 1
# beats both MMD flows on all rank and sign tests; noise on the MMD flow
# is within noise (2%). Small lambda is slow under the step rule, not
# better. The earlier 3-seed, 500-iteration version (6 min 55 s) had
# "noise helps" and "DrMMD + noise best" on paired t of 1.1 and 1.45.
local({  # the shared helpers, next to this script (or installed)
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f[1L]) else
    system.file("experiments", package = "kernbayes"), "common.R"))
})
a <- exp_args(mode = "full", out = ".", seeds = "10", n_iter = "", eps = "",
              lambdas = "", seed_from = "")
out <- exp_start(a$out)
say <- exp_logger()
quick <- identical(a$mode, "quick")
n_seeds <- if (quick) 1L else as.integer(a$seeds)
n_iter <- if (nzchar(a$n_iter)) as.integer(a$n_iter) else if (quick) 100L else 200L
every <- max(1L, n_iter %/% 20L)
eps <- if (nzchar(a$eps)) as.numeric(a$eps) else 3
n_part <- 100L
n_train <- 250L
n_valid <- 500L
p <- 50L
H <- 3L
D <- H * p + H
sigma2 <- 4

sphere <- function(N) {
  x <- matrix(stats::rnorm(N * p), N)
  x / sqrt(rowSums(x^2))
}

# The network's pieces on inputs X for particles Z (rows): the hidden
# pre-activations A[[h]] (N x n), the output pre-activation u and psi.
features <- function(Z, X) {
  u <- 0
  A <- vector("list", H)
  for (h in seq_len(H)) {
    A[[h]] <- X %*% t(Z[, (h - 1L) * p + seq_len(p), drop = FALSE])
    u <- u + pmax(A[[h]], 0) * rep(Z[, H * p + h], each = nrow(X))
  }
  list(A = A, u = u, psi = exp(-u^2 / sigma2))
}

# k(z, z') = mean over X of psi(x, z) psi(x, z'), with the weighted
# gradient sums sum_j w_j grad_z k(z_i, z'_j) = mean_x v(x) grad psi(x,
# z_i), v = Psi' w. A two-entry cache: within an iteration the flows ask
# for the same particles several times.
network_kernel <- function(X) {
  N <- nrow(X)
  cache <- list()
  feat <- function(Z) {
    for (cz in cache) if (identical(cz$Z, Z)) return(cz$f)
    f <- features(Z, X)
    cache <<- c(list(list(Z = Z, f = f)), cache)[seq_len(min(3L, length(cache) + 1L))]
    f
  }
  user_kernel(
    fun = function(x, y) crossprod(feat(x)$psi, feat(y)$psi) / N,
    grad = function(x, y, w) {
      v <- as.vector(feat(y)$psi %*% w)
      f <- feat(x)
      C <- v * f$psi * (-2 * f$u / sigma2) / N
      g <- matrix(0, nrow(x), D)
      for (h in seq_len(H)) {
        g[, H * p + h] <- colSums(C * pmax(f$A[[h]], 0))
        g[, (h - 1L) * p + seq_len(p)] <- crossprod(C * (f$A[[h]] > 0), X) *
          x[, H * p + h]
      }
      g
    }, name = "two-layer network")
}

# MMD^2 between particles Z and the teacher on inputs X (the squared error
# of the student network).
net_error <- function(Z, teacher, X) {
  mean((rowMeans(features(Z, X)$psi) - features(teacher, X)$psi[, 1L])^2)
}

# The kernel's gradient against central differences of its matrix, on a
# few coordinates (own seed: the runs below set theirs).
local({
  set.seed(1)
  X <- sphere(50L)
  k <- network_kernel(X)
  z <- matrix(stats::rnorm(3L * D), 3L)
  y <- matrix(stats::rnorm(4L * D), 4L)
  w <- stats::runif(4L)
  g <- k$grad(z, y, w)
  e <- 1e-6
  err <- max(vapply(c(1L, 77L, D - 2L, D), function(j) {
    zp <- zm <- z
    zp[, j] <- zp[, j] + e
    zm[, j] <- zm[, j] - e
    fd <- ((k$fun(zp, y) - k$fun(zm, y)) %*% w) / (2 * e)
    max(abs(g[, j] - fd)) / max(abs(fd), 1e-8)
  }, 0))
  say("network kernel gradient vs central differences: max relative error %.1e", err)
  stopifnot(err < 1e-5)
})

# The report on the final iteration: per run, the mean and standard error
# over seeds of the test error; then paired comparisons by seed (difference
# a - b of final test errors: mean, se, paired t, exact Wilcoxon
# signed-rank and sign-test p-values, two-sided; and the geometric mean
# of the ratios a / b with a paired t test on their logs, since the seeds'
# errors differ by orders of magnitude). DrMMD's "best lambda" is
# cross-fitted: the seeds are split into odd and even; each half uses the
# lambda with the lowest mean validation error (separate inputs, never the
# test inputs) on the other half, so no seed's lambda is chosen on its own
# runs.
st_report <- function(res) {
  fin <- res[res$iter == max(res$iter), ]
  fin$run <- ifelse(is.na(fin$lambda), fin$method,
                    sprintf("%s, lambda = %g", fin$method, fin$lambda))
  tab <- do.call(rbind, lapply(split(fin, factor(fin$run, unique(fin$run))),
    function(d) data.frame(run = d$run[1L], seeds = nrow(d),
                           test = mean(d$test), se = sd(d$test) / sqrt(nrow(d)),
                           valid = mean(d$valid), train = mean(d$train))))
  rownames(tab) <- NULL
  print(tab, digits = 3)
  by_seed <- function(m, l) {
    d <- fin[fin$method == m & (if (is.na(l)) is.na(fin$lambda) else
      !is.na(fin$lambda) & fin$lambda == l), ]
    setNames(d$test, d$seed)
  }
  seeds <- sort(unique(fin$seed))
  xfit <- function(m) {  # cross-fitted DrMMD: each seed's test error
    dr <- fin[fin$method == m, ]
    half <- seeds %% 2L
    out <- setNames(numeric(length(seeds)), seeds)
    chosen <- character()
    for (h in 0:1) {
      other <- dr[dr$seed %in% seeds[half != h], ]
      mv <- tapply(other$valid, other$lambda, mean)
      l <- as.numeric(names(mv)[which.min(mv)])
      chosen <- c(chosen, format(l))
      mine <- as.character(seeds[half == h])
      out[mine] <- by_seed(m, l)[mine]
    }
    attr(out, "chosen") <- paste(chosen, collapse = "/")
    out
  }
  cmp <- function(name, x, y) {
    k <- intersect(names(x), names(y))
    dd <- x[k] - y[k]
    data.frame(comparison = name, n = length(dd), mean_a = mean(x[k]),
               mean_b = mean(y[k]), diff = mean(dd), se = sd(dd) / sqrt(length(dd)),
               t = mean(dd) / (sd(dd) / sqrt(length(dd))),
               p_t = stats::t.test(dd)$p.value,
               ratio = exp(mean(log(x[k] / y[k]))),
               p_t_log = stats::t.test(log(x[k] / y[k]))$p.value,
               p_wilcoxon = suppressWarnings(stats::wilcox.test(dd)$p.value),
               a_better = sprintf("%d of %d", sum(dd < 0), length(dd)),
               p_sign = stats::binom.test(sum(dd < 0), sum(dd != 0))$p.value)
  }
  ls <- sort(unique(fin$lambda[!is.na(fin$lambda)]))
  xd <- xfit("DrMMD")
  xn <- xfit("DrMMD + noise")
  tests <- rbind(
    cmp("MMD + noise vs MMD", by_seed("MMD + noise", NA), by_seed("MMD", NA)),
    cmp("DrMMD lambda 1 vs MMD", by_seed("DrMMD", 1), by_seed("MMD", NA)),
    cmp("DrMMD + noise lambda 1 vs MMD", by_seed("DrMMD + noise", 1),
        by_seed("MMD", NA)),
    cmp("DrMMD + noise lambda 1 vs MMD + noise", by_seed("DrMMD + noise", 1),
        by_seed("MMD + noise", NA)),
    cmp(sprintf("DrMMD cross-fitted (%s) vs MMD", attr(xd, "chosen")), xd,
        by_seed("MMD", NA)),
    cmp(sprintf("DrMMD + noise cross-fitted (%s) vs MMD + noise",
                attr(xn, "chosen")), xn, by_seed("MMD + noise", NA)),
    cmp(sprintf("DrMMD + noise cross-fitted (%s) vs MMD", attr(xn, "chosen")),
        xn, by_seed("MMD", NA)),
    do.call(rbind, lapply(ls, function(l)
      cmp(sprintf("noise vs none, DrMMD lambda %g", l),
          by_seed("DrMMD + noise", l), by_seed("DrMMD", l)))))
  print(tests, digits = 3)
  invisible(list(table = tab, tests = tests))
}

if (identical(a$mode, "report")) {  # the report on an existing CSV in `out`
  st_report(utils::read.csv(file.path(out, "flows-student-teacher.csv.gz")))
  quit(save = "no")
}
lambdas <- if (nzchar(a$lambdas)) as.numeric(strsplit(a$lambdas, ",")[[1L]]) else
  10^(-5:2)
half <- n_iter %/% 5L
noise_fun <- function(t) 0.5^(t %/% half)
cfgs <- c(list(list(method = "MMD", lambda = NA, noise = 0),
               list(method = "MMD + noise", lambda = NA, noise = 1)),
          lapply(lambdas, function(l) list(method = "DrMMD", lambda = l, noise = 0)),
          lapply(lambdas, function(l) list(method = "DrMMD + noise", lambda = l,
                                          noise = 1)))
seed_ids <- if (nzchar(a$seed_from)) as.integer(a$seed_from) - 1L + seq_len(n_seeds) else
  seq_len(n_seeds)

rows <- list()
for (s in seed_ids) {
  for (cf in cfgs) {
    # the same data, teacher, start (and validation inputs) for every
    # method of a seed: the comparisons below are paired by seed
    set.seed(2019 + s)
    X <- sphere(n_train)
    Xv <- sphere(n_valid)
    teacher <- matrix(stats::rnorm(D), 1L)
    Z0 <- matrix(stats::rnorm(n_part * D, 0.001), n_part)
    Xs <- sphere(n_valid)  # validation inputs: only for choosing lambda
    kern <- network_kernel(X)
    Y <- rbind(teacher, teacher)
    nz <- if (cf$noise > 0) noise_fun else 0
    fit <- exp_timed(tryCatch(if (is.na(cf$lambda)) {
      mmd_flow(Z0, Y, kernel = kern, n_iter = n_iter, step_size = eps,
               noise = nz, keep_every = every, progress = FALSE, tol = 0)
    } else {
      dmmd_flow(Z0, Y, lambda = cf$lambda, kernel = kern, n_iter = n_iter,
                step_size = eps / 2 * min(cf$lambda, 1), noise = nz,
                keep_every = every, progress = FALSE, tol = 0)
    }, kb_error = function(e) e))
    if (inherits(fit, "kb_error")) {
      say("seed %d %s lambda=%s: stopped: %s", s, cf$method, cf$lambda,
          conditionMessage(fit))
      next
    }
    its <- fit$trace_iter
    err_on <- function(Xe) vapply(seq_along(its), function(k)
      net_error(fit$trace[, , k], teacher, Xe), 0)
    te <- err_on(Xv)
    rows[[length(rows) + 1L]] <- data.frame(
      method = cf$method, lambda = cf$lambda, noise = cf$noise, seed = s,
      iter = its, train = signif(err_on(X), 5), valid = signif(err_on(Xs), 5),
      test = signif(te, 5))
    say("seed %d %-13s lambda=%-5s test %.3g -> %.3g (min %.3g), %.0f s",
        s, cf$method, format(cf$lambda), te[1L], te[length(te)], min(te),
        exp_secs(fit))
  }
}
res <- do.call(rbind, rows)
exp_write(list("flows-student-teacher.csv.gz" = res), out,
          extdata = if (quick || nzchar(a$seed_from)) character() else
            "flows-student-teacher.csv.gz")
st_report(res)
