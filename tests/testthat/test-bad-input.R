# The standing bad-input campaign: every exported
# function against wrong types and shapes, NA/NaN/Inf, 0/1/2 rows, d = 1,
# duplicated rows, extreme scales, bad counts and thread counts, closures
# that misbehave, objects of the wrong class or with edited fields, and
# "every argument is checked before expensive work".  Each case expects a
# classed error (kb_error_*, the argument or the cause named), an error of
# the user's closure passed through with the closure named, or a correct
# result.  The machinery is in helper-bad-input.R; crash-prone cases run in
# a fresh R process (skipped on CRAN and under valgrind).

bi_env <- new.env(parent = environment())
local(envir = bi_env, {
  set.seed(1)
  X <- matrix(rnorm(40), 20)            # 20 x 2
  S <- -X                               # scores of N(0, I)
  X1 <- matrix(rnorm(10), 10)           # d = 1
  S1 <- -X1
  Xna <- X; Xna[3, 2] <- NA
  Xnan <- X; Xnan[4, 1] <- NaN
  Xinf <- X; Xinf[5, 1] <- Inf
  Sna <- S; Sna[6, 1] <- NA
  X0 <- matrix(numeric(0), 0, 2)
  Xdup <- X[c(1, 1, 2), ]               # a repeated row
  Sdup <- S[c(1, 1, 2), ]
  Xsame <- X[rep(1, 5), ]               # all rows equal
  Ssame <- S[rep(1, 5), ]
  Xbig <- X; Xbig[7, ] <- c(1e155, 0)   # squared distances overflow
  Sbig <- -Xbig
  tg2 <- gaussian_target(c(0, 0))
  tg1 <- gaussian_target(0)
  # closures that misbehave
  sc_err <- function(x) stop("boom")
  sc_warn <- function(x) { warning("careful"); -x }
  sc_len <- function(x) c(-x, 0)
  sc_chr <- function(x) as.character(-x)
  sc_na <- function(x) rep(NA_real_, length(x))
  sc_null <- function(x) NULL
  sc_int <- function(x) -round(x) * 0L + 0L
  # counting closures: how often a closure ran before an error
  cnt <- new.env()
  cnt$n <- 0
  sc_cnt <- function(x) { cnt$n <- cnt$n + 1; -x }
  ld_cnt <- function(x) { cnt$n <- cnt$n + 1; -sum(x^2) / 2 }
  tg_cnt <- kb_target(ld_cnt, sc_cnt, dim = 2)
  # run a call that must fail on argument `arg` without calling the
  # counting closures
  counted <- function(expr) {
    cnt$n <- 0
    e <- tryCatch(expr, error = function(e) e)
    list(calls = cnt$n, cond = e)
  }
  before <- function(arg) function(v) {
    if (v$calls != 0) return(sprintf("the closure ran %d times before the error",
                                     v$calls))
    if (!inherits(v$cond, "kb_error_arg")) {
      return(paste("no kb_error_arg:", if (inherits(v$cond, "condition"))
        conditionMessage(v$cond) else "no error"))
    }
    if (!grepl(paste0("'", arg, "'"), conditionMessage(v$cond), fixed = TRUE)) {
      return(paste("message does not name", arg, ":", conditionMessage(v$cond)))
    }
    TRUE
  }
  # ksd of one row, IMQ(c = 1, beta = -1/2), L = I: sqrt(|s|^2 + d)
  ksd1 <- function(s) sqrt(sum(s^2) + length(s))
  same_as <- function(call) {
    call <- substitute(call)
    function(v) {
      b <- eval(call, bi_env)
      a <- all.equal(v, b, tolerance = 1e-8, check.attributes = FALSE)
      if (isTRUE(a)) TRUE else paste(a, collapse = "; ")
    }
  }
  near <- function(b, tol = 1e-8) function(v) bi_near(v, b, tol)
  kmod <- function(...) {
    k <- imq_kernel()
    m <- list(...)
    for (nm in names(m)) k[nm] <- list(m[[nm]])
    k
  }
})

bi_total <- 0L
bi_add <- function(group, cases) {
  bi_total <<- bi_total + bi_run_group(group, cases, bi_env)
}
Q <- quote
C <- bi_case

# ---- the x / score battery shared by the Stein-kernel functions -------------

bi_xs_cases <- function(fn, extra = list(), standardize = TRUE,
                        nthreads = TRUE, kernel = TRUE) {
  mk <- function(...) {
    a <- utils::modifyList(c(list(x = quote(X), score = quote(S)), extra),
                           list(...))
    as.call(c(as.name(fn), a))
  }
  base <- mk()
  same <- function(call) {
    force(call)
    function(v) {
      b <- eval(call, bi_env)
      a <- all.equal(v, b, tolerance = 1e-8, check.attributes = FALSE)
      if (isTRUE(a)) TRUE else paste(a, collapse = "; ")
    }
  }
  cs <- list(
    C("x_chr", mk(x = "a"), bi_arg("x")),
    C("x_list", mk(x = list(1, 2)), bi_arg("x")),
    C("x_NA", mk(x = quote(Xna)), bi_arg("x", "NA")),
    C("x_NaN", mk(x = quote(Xnan)), bi_arg("x", "NaN")),
    C("x_Inf", mk(x = quote(Xinf)), bi_arg("x", "Inf")),
    C("x_0rows", mk(x = quote(X0), score = quote(X0)), bi_arg("x")),
    C("x_0cols", mk(x = quote(matrix(numeric(0), 20, 0)),
                    score = quote(matrix(numeric(0), 20, 0))), bi_arg("x")),
    C("score_missing", mk(score = NULL), bi_arg("score")),
    C("score_rows", mk(score = quote(S[-1, ])), bi_arg("score")),
    C("score_cols", mk(score = quote(S[, 1, drop = FALSE])), bi_arg("score")),
    C("score_NA", mk(score = quote(Sna)), bi_arg("score", "NA")),
    C("score_chr", mk(score = "a"), bi_arg("score")),
    C("score_closure_error", mk(score = quote(sc_err)), bi_cb("score", "boom")),
    C("score_closure_warns", mk(score = quote(sc_warn)),
      bi_warn("warning", "careful", same(base))),
    C("score_closure_length", mk(score = quote(sc_len)),
      bi_err("kb_error_callback", "'score'.*length")),
    C("score_closure_chr", mk(score = quote(sc_chr)),
      bi_err("kb_error_callback", "'score'.*numeric")),
    C("score_closure_NA", mk(score = quote(sc_na)),
      bi_err("kb_error_callback", "'score'.*(NA|non-finite)")),
    C("score_closure_NULL", mk(score = quote(sc_null)),
      bi_err("kb_error_callback", "'score'")),
    C("score_target_dim", mk(score = quote(tg1)),
      bi_any(bi_arg("score"), bi_arg("x", "dimension"))),
    C("score_is_target", mk(score = quote(tg2)), bi_ok(same(base))),
    C("row_overflow", mk(x = quote(Xbig), score = quote(Sbig)),
      bi_num("row")),
    C("scale_1e300", mk(x = quote(X * 1e300), score = quote(S * 1e300)),
      bi_num()),
    C("kernel_chr", mk(kernel = "imq"), bi_arg("kernel")),
    C("kernel_unclassed", mk(kernel = quote(unclass(imq_kernel()))),
      bi_arg("kernel")),
    C("kernel_edit_beta", mk(kernel = quote(kmod(beta = 2))), bi_arg("kernel")),
    C("kernel_edit_type", mk(kernel = quote(kmod(type = "foo"))),
      bi_arg("kernel")),
    C("kernel_edit_c", mk(kernel = quote(kmod(c = NA_real_))), bi_arg("kernel")),
    C("kernel_edit_precon", mk(kernel = quote(kmod(precon = "bogus"))),
      bi_any(bi_arg("kernel"), bi_arg("precon"))),
    C("kernel_precon_tiny", mk(kernel = quote(imq_kernel(precon = 1e-320))),
      bi_any(bi_arg("precon"), bi_num())),
    C("kernel_precon_matrix_dim", mk(kernel = quote(imq_kernel(precon = diag(3)))),
      bi_arg("precon")),
    C("kernel_precon_not_pd",
      mk(kernel = quote(imq_kernel(precon = matrix(c(1, 2, 2, 1), 2)))),
      bi_arg("precon", "positive definite")),
    C("kernel_smpcov_2rows", mk(x = quote(X[1:2, ]), score = quote(S[1:2, ]),
                                kernel = quote(imq_kernel(precon = "smpcov"))),
      bi_arg("precon")),
    C("kernel_med_same_rows", mk(x = quote(Xsame), score = quote(Ssame),
                                 kernel = quote(imq_kernel(precon = "med"))),
      bi_any(bi_arg("precon"), bi_arg("x", "constant"))),
    C("kernel_smpcov_1e300", mk(x = quote(X * 1e300), score = quote(S / 1e300),
                                kernel = quote(imq_kernel(precon = "smpcov"))),
      bi_any(bi_ok(function(v) bi_all_finite(v)), bi_num(),
             bi_arg("x", "smpcov.*rescale x")))
  )
  if (!kernel) cs <- Filter(function(z) !startsWith(z$id, "kernel_"), cs)
  if (nthreads) {
    cs <- c(cs, list(
      C("nthreads_0", mk(nthreads = 0), bi_arg("nthreads")),
      C("nthreads_neg", mk(nthreads = -1), bi_arg("nthreads")),
      C("nthreads_frac", mk(nthreads = 2.5), bi_arg("nthreads")),
      C("nthreads_NA", mk(nthreads = NA), bi_arg("nthreads")),
      C("nthreads_chr", mk(nthreads = "2"), bi_arg("nthreads")),
      C("nthreads_too_big", mk(nthreads = 1e10), bi_arg("nthreads")),
      C("nthreads_huge_capped", mk(nthreads = 1e6), bi_ok(same(base))),
      C("nthreads_checked_first", as.call(list(quote(counted),
                                               mk(score = quote(sc_cnt),
                                                  nthreads = 0))),
        bi_ok(quote(before("nthreads"))))
    ))
  }
  if (standardize) {
    cs <- c(cs, list(
      C("standardize_NA", mk(standardize = NA), bi_arg("standardize")),
      C("standardize_chr", mk(standardize = "yes"), bi_arg("standardize")),
      C("standardize_const_col", mk(x = quote(cbind(X[, 1], 1)),
                                    score = quote(S), standardize = TRUE),
        bi_arg("x", "constant"))
    ))
  }
  # the checkers given as quoted calls are built in bi_env
  lapply(cs, function(z) {
    if (z$expect$type == "value" && is.call(z$expect$check)) {
      z$expect$check <- eval(z$expect$check, bi_env)
    }
    z
  })
}

# ---- Stein kernels, KSD, thinning -------------------------------------------

bi_add("stein_kernel_matrix", c(bi_xs_cases("stein_kernel_matrix"), list(
  C("value_1row", Q(stein_kernel_matrix(X[1, , drop = FALSE], S[1, , drop = FALSE], standardize = FALSE)),
    bi_ok(Q(near(ksd1(S[1, ])^2)))),
  C("value_dup_rows", Q(stein_kernel_matrix(Xdup, Sdup)),
    bi_ok(function(v) bi_near(v[1, ], v[2, ]))),
  C("value_d1", Q(stein_kernel_matrix(X1, S1, standardize = FALSE)),
    bi_ok(function(v) if (!isSymmetric(v)) "not symmetric" else
      bi_near(diag(v), bi_env$S1^2 + 1))),
  C("value_vector_x_d1", Q(stein_kernel_matrix(as.vector(X1), as.vector(S1))),
    bi_ok(Q(same_as(stein_kernel_matrix(X1, S1))))),
  C("scale_1e-300", Q(stein_kernel_matrix(X * 1e-300, S * 1e-300, standardize = FALSE)),
    bi_ok(Q(near(matrix(2, 20, 20))))),
  C("data_frame_x", Q(stein_kernel_matrix(as.data.frame(X), S)),
    bi_ok(Q(same_as(stein_kernel_matrix(X, S))))),
  C("data_frame_chr_col", Q(stein_kernel_matrix(data.frame(a = 1:3, b = letters[1:3]),
                                                 S[1:3, ])),
    bi_arg("x", "numeric"))
)))

bi_add("ksd", c(bi_xs_cases("ksd"), list(
  C("value_1row", Q(ksd(X[1, , drop = FALSE], S[1, , drop = FALSE], standardize = FALSE)),
    bi_ok(Q(near(ksd1(S[1, ]))))),
  C("value_2rows", Q(ksd(X[1:2, ], S[1:2, ])),
    bi_ok(Q(near(sqrt(mean(stein_kernel_matrix(X[1:2, ], S[1:2, ]))))))),
  C("value_dup_rows_as_weights", Q(ksd(Xdup, Sdup, standardize = FALSE)),
    bi_ok(Q(same_as(ksd(X[1:2, ], S[1:2, ], weights = c(2, 1), standardize = FALSE))))),
  C("value_d1", Q(ksd(X1, S1)),
    bi_ok(Q(near(sqrt(mean(stein_kernel_matrix(X1, S1))))))),
  C("scale_1e-300", Q(ksd(X * 1e-300, S * 1e-300, standardize = FALSE)), bi_ok(Q(near(sqrt(2))))),
  C("U_1row", Q(ksd(X[1, , drop = FALSE], S[1, , drop = FALSE], type = "U")),
    bi_arg("x")),
  C("U_value", Q(ksd(X, S, type = "U")),
    bi_ok(Q(near({K <- stein_kernel_matrix(X, S); (sum(K) - sum(diag(K))) / 380})))),
  C("type_bad", Q(ksd(X, S, type = "W")), bi_arg("type")),
  C("type_NA", Q(ksd(X, S, type = NA)), bi_arg("type")),
  C("weights_length", Q(ksd(X, S, weights = 1:3)), bi_arg("weights", "length")),
  C("weights_length_first", Q(counted(ksd(X, sc_cnt, weights = 1:3))),
    bi_ok(Q(before("weights")))),
  C("weights_NA", Q(ksd(X, S, weights = c(NA, rep(1, 19)))), bi_arg("weights")),
  C("weights_negative", Q(ksd(X, S, weights = c(-1, rep(1, 19)))),
    bi_arg("weights")),
  C("weights_zero", Q(ksd(X, S, weights = rep(0, 20))), bi_arg("weights")),
  C("weights_chr", Q(ksd(X, S, weights = rep("1", 20))), bi_arg("weights")),
  C("weights_1e308", Q(ksd(X, S, weights = rep(1e308, 20))),
    bi_ok(Q(same_as(ksd(X, S))))),
  C("weights_1e-310", Q(ksd(X, S, weights = rep(1e-310, 20))),
    bi_ok(Q(same_as(ksd(X, S))))),
  C("weights_one_row_U", Q(ksd(X, S, weights = c(1, rep(0, 19)), type = "U")),
    bi_arg("weights")),
  C("blocks_0", Q(ksd(X, S, blocks = 0)), bi_arg("blocks")),
  C("blocks_with_weights", Q(ksd(X, S, blocks = 2, weights = rep(1, 20))),
    bi_arg("blocks")),
  C("blocks_value", Q(ksd(X, S, blocks = 3)), bi_ok(Q(same_as(ksd(X, S)))))
)))

bi_add("ksd_path", c(bi_xs_cases("ksd_path"), list(
  C("value_last_is_ksd", Q(ksd_path(X, S)),
    bi_ok(function(v) bi_near(v$ksd[20], ksd(bi_env$X, bi_env$S)))),
  C("value_1row", Q(ksd_path(X[1, , drop = FALSE], S[1, , drop = FALSE], standardize = FALSE)),
    bi_ok(Q(function(v) bi_near(v$ksd, ksd1(S[1, ]))))),
  C("value_d1", Q(ksd_path(X1, S1)),
    bi_ok(function(v) bi_near(v$ksd[10], ksd(bi_env$X1, bi_env$S1))))
)))

bi_add("ksd_blocks", c(bi_xs_cases("ksd_blocks"), list(
  C("blocks_0", Q(ksd_blocks(X, S, blocks = 0)), bi_arg("blocks")),
  C("blocks_frac", Q(ksd_blocks(X, S, blocks = 1.5)), bi_arg("blocks")),
  C("blocks_NA", Q(ksd_blocks(X, S, blocks = NA)), bi_arg("blocks")),
  C("blocks_more_than_rows", Q(ksd_blocks(X[1:3, ], S[1:3, ], blocks = 10)),
    bi_ok(Q(same_as(ksd(X[1:3, ], S[1:3, ]))))),
  C("blocks_value", Q(ksd_blocks(X, S, blocks = 4)), bi_ok(Q(same_as(ksd(X, S))))),
  C("blocks_checked_first", Q(counted(ksd_blocks(X, sc_cnt, blocks = 0))),
    bi_ok(Q(before("blocks"))))
)))

# ksd_test() under a fixed seed (its bootstrap is random), without the
# deparsed data name, so that results of equivalent calls compare equal
bi_env$ksd_test_s <- function(...) {
  set.seed(1)
  r <- ksd_test(..., n_boot = 19, progress = FALSE)
  r$data.name <- NULL
  r
}
bi_add("ksd_test", c(bi_xs_cases("ksd_test_s"), list(
  C("value_stat", Q(ksd_test_s(X, S)),
    bi_ok(Q(function(v) bi_near(unname(v$statistic), 20 * ksd(X, S, type = "U"))))),
  C("type_bad", Q(ksd_test_s(X, S, type = "W")), bi_arg("type")),
  C("bootstrap_bad", Q(ksd_test_s(X, S, bootstrap = "perm")), bi_arg("bootstrap")),
  C("n_boot_0", Q(ksd_test(X, S, n_boot = 0)), bi_arg("n_boot")),
  C("n_boot_frac", Q(ksd_test(X, S, n_boot = 1.5)), bi_arg("n_boot")),
  C("wild_bad", Q(ksd_test_s(X, S, wild = "normal")), bi_arg("wild")),
  C("change_prob_0", Q(ksd_test_s(X, S, wild = "markov", change_prob = 0)),
    bi_arg("change_prob")),
  C("change_prob_unused", Q(ksd_test_s(X, S, change_prob = 0.1,
                                       bootstrap = "multinomial")),
    bi_arg("change_prob")),
  C("change_prob_rademacher", Q(ksd_test_s(X, S, change_prob = 0.1,
                                           wild = "rademacher")),
    bi_arg("change_prob")),
  C("wild_multinomial", Q(ksd_test_s(X, S, wild = "markov",
                                     bootstrap = "multinomial")),
    bi_arg("wild")),
  C("by_chain_unlabelled", Q(ksd_test_s(X, S, by_chain = TRUE)),
    bi_arg("by_chain")),
  C("by_chain_NA", Q(ksd_test_s(X, S, by_chain = NA)), bi_arg("by_chain")),
  C("test_bad", Q(ksd_test_s(X, S, test = "linear")), bi_arg("test")),
  C("n_lags_0", Q(ksd_test_s(X, S, test = "incomplete", n_lags = 0)),
    bi_arg("n_lags")),
  C("n_lags_frac", Q(ksd_test_s(X, S, n_lags = 2.5)), bi_arg("n_lags")),
  C("incomplete_V", Q(ksd_test_s(X, S, test = "incomplete", type = "V")),
    bi_arg("type")),
  C("incomplete_short", Q(ksd_test_s(X, S, test = "incomplete")),
    bi_arg("x")),
  C("one_row", Q(ksd_test_s(X[1, , drop = FALSE], S[1, , drop = FALSE])),
    bi_arg("x")),
  C("n_boot_checked_first", Q(counted(ksd_test(X, sc_cnt, n_boot = 0))),
    bi_ok(Q(before("n_boot"))))
)))

# fssd_test() likewise (random locations and null draws)
bi_env$fssd_test_s <- function(...) {
  set.seed(1)
  r <- fssd_test(..., n_simulate = 19)
  r$data.name <- NULL
  r
}
bi_add("fssd_test", c(bi_xs_cases("fssd_test_s", list(locations = "rand"),
                                        standardize = FALSE, kernel = FALSE), list(
  C("value_stat", Q(fssd_test_s(X, S, locations = rbind(c(0, 0), c(1, 1)),
                                 bandwidth = 1)),
    bi_ok(Q(function(v) {
      tau <- do.call(cbind, lapply(0:1, function(v0) {
        D <- X - v0
        kv <- exp(-rowSums(D^2) / 2)
        (S * kv - D * kv) / sqrt(2 * ncol(X))
      }))
      bi_near(unname(v$statistic),
              (sum(colSums(tau)^2) - sum(tau^2)) / 19)
    }))),
  C("locations_bad", Q(fssd_test_s(X, S, locations = "grid")), bi_arg("locations")),
  C("locations_cols", Q(fssd_test_s(X, S, locations = matrix(0, 1, 7))),
    bi_arg("locations")),
  C("n_locations_0", Q(fssd_test_s(X, S, n_locations = 0)), bi_arg("n_locations")),
  C("train_frac_1", Q(fssd_test_s(X, S, train_frac = 1)), bi_arg("train_frac")),
  C("train_frac_tiny", Q(fssd_test_s(X, S, train_frac = 0.01)), bi_arg("train_frac")),
  C("bandwidth_0", Q(fssd_test_s(X, S, bandwidth = 0)), bi_arg("bandwidth")),
  C("n_simulate_0", Q(fssd_test(X, S, n_simulate = 0)), bi_arg("n_simulate")),
  C("one_row", Q(fssd_test_s(X[1, , drop = FALSE], S[1, , drop = FALSE],
                             locations = "rand")), bi_arg("x")),
  C("n_locations_checked_first", Q(counted(fssd_test(X, sc_cnt, n_locations = 0))),
    bi_ok(Q(before("n_locations"))))
)))

bi_add("ksd_weights", c(bi_xs_cases("ksd_weights"), list(
  C("nonneg_NA", Q(ksd_weights(X, S, nonneg = NA)), bi_arg("nonneg")),
  C("value_simplex", Q(ksd_weights(X, S)),
    bi_ok(function(v) isTRUE(all(v >= 0)) && bi_near(sum(v), 1))),
  C("value_affine_sum1", Q(ksd_weights(X, S, nonneg = FALSE)),
    bi_ok(function(v) bi_near(sum(v), 1))),
  C("value_1row", Q(ksd_weights(X[1, , drop = FALSE], S[1, , drop = FALSE], standardize = FALSE)),
    bi_ok(Q(function(v) bi_near(c(v, attr(v, "ksd")), c(1, ksd1(S[1, ])))))),
  C("value_all_rows_equal", Q(ksd_weights(Xsame, Ssame, standardize = FALSE)),
    bi_ok(function(v) bi_near(v, rep(0.2, 5)))),
  C("value_dup_rows_share", Q(ksd_weights(Xdup, Sdup)),
    bi_ok(function(v) bi_near(v[1], v[2]))),
  C("value_d1", Q(ksd_weights(X1, S1)), bi_ok(function(v) bi_near(sum(v), 1)))
)))

bi_add("stein_thin", c(bi_xs_cases("stein_thin", list(m = 3)), list(
  C("m_0", Q(stein_thin(X, S, 0)), bi_arg("m")),
  C("m_frac", Q(stein_thin(X, S, 2.5)), bi_arg("m")),
  C("m_NA", Q(stein_thin(X, S, NA)), bi_arg("m")),
  C("m_missing", Q(stein_thin(X, S)), bi_arg("m")),
  C("m_gt_n_unique", Q(stein_thin(X, S, 21, unique = TRUE)), bi_arg("m")),
  C("m_checked_first", Q(counted(stein_thin(X, sc_cnt, 0))), bi_ok(Q(before("m")))),
  C("unique_NA", Q(stein_thin(X, S, 3, unique = NA)), bi_arg("unique")),
  C("value_m_gt_n", Q(stein_thin(X[1:3, ], S[1:3, ], 7)),
    bi_ok(function(v) length(v$index) == 7 && all(v$index %in% 1:3))),
  C("value_first_is_best_diag", Q(stein_thin(X, S, 1, standardize = FALSE)),
    bi_ok(function(v) v$index == which.min(diag(stein_kernel_matrix(bi_env$X, bi_env$S))))),
  C("value_dup_rows", Q(stein_thin(Xsame, Ssame, 3, standardize = FALSE)),
    bi_ok(function(v) all(v$index %in% 1:5) && length(v$index) == 3)),
  C("value_1row", Q(stein_thin(X[1, , drop = FALSE], S[1, , drop = FALSE], 2,
                               standardize = FALSE)),
    bi_ok(function(v) identical(as.numeric(v$index), c(1, 1)))),
  C("value_d1", Q(stein_thin(X1, S1, 4)),
    bi_ok(function(v) length(unique(v$index)) >= 1 && all(v$index %in% 1:10)))
)))

bi_add("stein_thin_gf", list(
  C("dots_bad_name", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S, 3, foo = 1)),
    bi_arg("...")),
  C("dots_unnamed", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S, 3, 1)),
    bi_arg("...")),
  C("log_density_length", Q(stein_thin_gf(X, rep(0, 3), rep(0, 20), S, 3)),
    bi_arg("log_density", "length")),
  C("log_density_NA", Q(stein_thin_gf(X, c(NA, rep(0, 19)), rep(0, 20), S, 3)),
    bi_arg("log_density")),
  C("log_density_chr", Q(stein_thin_gf(X, rep("0", 20), rep(0, 20), S, 3)),
    bi_arg("log_density")),
  C("log_q_closure_error", Q(stein_thin_gf(X, rep(0, 20), sc_err, S, 3)),
    bi_cb("log_q", "boom")),
  C("log_q_closure_length", Q(stein_thin_gf(X, rep(0, 20), function(x) 1:2, S, 3)),
    bi_err("kb_error_callback", "'log_q'.*length")),
  C("log_q_closure_NaN", Q(stein_thin_gf(X, rep(0, 20), function(x) NaN, S, 3)),
    bi_err("kb_error_callback", "'log_q'")),
  C("score_q_missing", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), NULL, 3)),
    bi_arg("score_q")),
  C("score_q_dims", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S[-1, ], 3)),
    bi_arg("score_q")),
  C("m_0", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S, 0)), bi_arg("m")),
  C("range_cap_0", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S, 3, range_cap = 0)),
    bi_arg("range_cap")),
  C("range_cap_checked_first",
    Q(counted(stein_thin_gf(X, ld_cnt, rep(0, 20), S, 3, range_cap = -1))),
    bi_ok(Q(before("range_cap")))),
  C("kernel_checked_first",
    Q(counted(stein_thin_gf(X, ld_cnt, rep(0, 20), S, 3, kernel = "imq"))),
    bi_ok(Q(before("kernel")))),
  C("nthreads_checked_first",
    Q(counted(stein_thin_gf(X, ld_cnt, rep(0, 20), S, 3, nthreads = 0))),
    bi_ok(Q(before("nthreads")))),
  C("standardize_NA", Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S, 3,
                                      standardize = NA)), bi_arg("standardize")),
  C("value_equal_weights_is_stein_thin",
    Q(stein_thin_gf(X, rep(0, 20), rep(0, 20), S, 5)),
    bi_ok(function(v) identical(v$index, stein_thin(bi_env$X, bi_env$S, 5)$index))),
  C("wide_log_weights_warn", Q(stein_thin_gf(X, rep(0, 20), c(20, rep(0, 19)), S, 3)),
    bi_warn("warning", "range_cap"))
))

bi_add("kernel_thin", list(
  C("x_chr", Q(kernel_thin("a")), bi_arg("x")),
  C("x_NA", Q(kernel_thin(Xna, S)), bi_arg("x", "NA")),
  C("x_Inf", Q(kernel_thin(Xinf)), bi_arg("x", "Inf")),
  C("x_0rows", Q(kernel_thin(X0, X0)), bi_arg("x")),
  C("score_rows", Q(kernel_thin(X, S[-1, ])), bi_arg("score")),
  C("score_NA", Q(kernel_thin(X, Sna)), bi_arg("score")),
  C("score_err", Q(kernel_thin(X, sc_err)), bi_cb("score", "boom")),
  C("m_0", Q(kernel_thin(X, S, m = 0)), bi_arg("m")),
  C("m_frac", Q(kernel_thin(X, S, m = 2.5)), bi_arg("m")),
  C("m_not_halving", Q(kernel_thin(X, S, m = 7)), bi_arg("m", "floor")),
  C("m_gt_n", Q(kernel_thin(X, S, m = 21)), bi_arg("m")),
  C("swap_NA", Q(kernel_thin(X, S, swap = NA)), bi_arg("swap")),
  C("delta_0", Q(kernel_thin(X, S, delta = 0)), bi_arg("delta")),
  C("delta_1", Q(kernel_thin(X, S, delta = 1)), bi_arg("delta")),
  C("method_bad", Q(kernel_thin(X, S, method = "kt2")), bi_arg("method")),
  C("kernel_bad", Q(kernel_thin(X, S, kernel = list())), bi_arg("kernel")),
  C("standardize_NA", Q(kernel_thin(X, S, standardize = NA)), bi_arg("standardize")),
  C("nthreads_0", Q(kernel_thin(X, S, nthreads = 0)), bi_arg("nthreads")),
  C("m_checked_first", Q(counted(kernel_thin(X, sc_cnt, m = 7))), bi_ok(Q(before("m")))),
  C("delta_checked_first", Q(counted(kernel_thin(X, sc_cnt, delta = 2))),
    bi_ok(Q(before("delta")))),
  C("med_all_rows_equal", Q(kernel_thin(Xsame, standardize = FALSE)), bi_arg("precon")),
  C("value_1row", Q(kernel_thin(X[1, , drop = FALSE], S[1, , drop = FALSE], standardize = FALSE)),
    bi_ok(function(v) identical(v$index, 1L))),
  C("value_m_n", Q(kernel_thin(X, S, m = 20)),
    bi_ok(function(v) v$m == 20 && v$rounds == 0 && identical(v$index, 1:20))),
  C("value_d1", Q(kernel_thin(X1, S1)), bi_ok(function(v) all(v$index %in% 1:10))),
  C("value_dup", Q(kernel_thin(Xdup, Sdup, m = 1)), bi_ok(function(v) v$m == 1))
))

bi_add("stein_kernel_thin", list(
  C("score_missing", Q(stein_kernel_thin(X)), bi_arg("score", "missing")),
  C("score_NULL", Q(stein_kernel_thin(X, NULL)), bi_arg("score")),
  C("m_0", Q(stein_kernel_thin(X, S, m = 0)), bi_arg("m")),
  C("m_frac", Q(stein_kernel_thin(X, S, m = 2.5)), bi_arg("m")),
  C("m_NA", Q(stein_kernel_thin(X, S, m = NA)), bi_arg("m")),
  C("m_not_halving", Q(stein_kernel_thin(X, S, m = 7)), bi_arg("m", "floor")),
  C("m_gt_n", Q(stein_kernel_thin(X, S, m = 21)), bi_arg("m")),
  C("m_cpp_not_pow2", Q(stein_kernel_thin(X, S, m = 3, method = "compress++")),
    bi_arg("m", "power of 2")),
  C("m_cpp_too_big", Q(stein_kernel_thin(X, S, m = 8, method = "compress++")),
    bi_arg("m", "power of 2")),
  C("debias_bad", Q(stein_kernel_thin(X, S, debias = "simplx")), bi_arg("debias")),
  C("method_bad", Q(stein_kernel_thin(X, S, method = "compress")), bi_arg("method")),
  C("weighted_NA", Q(stein_kernel_thin(X, S, weighted = NA)), bi_arg("weighted")),
  C("weighted_chr", Q(stein_kernel_thin(X, S, weighted = "yes")), bi_arg("weighted")),
  C("delta_0", Q(stein_kernel_thin(X, S, delta = 0)), bi_arg("delta")),
  C("delta_1", Q(stein_kernel_thin(X, S, delta = 1)), bi_arg("delta")),
  C("delta_NA", Q(stein_kernel_thin(X, S, delta = NA)), bi_arg("delta")),
  C("oversample_neg", Q(stein_kernel_thin(X, S, oversample = -1)), bi_arg("oversample")),
  C("oversample_13", Q(stein_kernel_thin(X, S, oversample = 13)), bi_arg("oversample")),
  C("oversample_NA", Q(stein_kernel_thin(X, S, oversample = NA)), bi_arg("oversample")),
  C("oversample_frac", Q(stein_kernel_thin(X, S, oversample = 1.5)), bi_arg("oversample")),
  C("standardize_NA", Q(stein_kernel_thin(X, S, standardize = NA)), bi_arg("standardize")),
  C("kernel_bad", Q(stein_kernel_thin(X, S, kernel = "imq")), bi_arg("kernel")),
  C("nthreads_0", Q(stein_kernel_thin(X, S, nthreads = 0)), bi_arg("nthreads")),
  C("x_NA", Q(stein_kernel_thin(Xna, S)), bi_arg("x", "NA")),
  C("x_Inf", Q(stein_kernel_thin(Xinf, S)), bi_arg("x", "Inf")),
  C("x_chr", Q(stein_kernel_thin("a", S)), bi_arg("x")),
  C("x_3rows", Q(stein_kernel_thin(X[1:3, ], S[1:3, ])), bi_arg("x", "4 rows")),
  C("x_3rows_cpp", Q(stein_kernel_thin(X[1:3, ], S[1:3, ], method = "compress++")),
    bi_arg("x", "4 rows")),
  C("score_rows", Q(stein_kernel_thin(X, S[-1, ])), bi_arg("score")),
  C("score_NA", Q(stein_kernel_thin(X, Sna)), bi_arg("score", "NA")),
  C("score_err", Q(stein_kernel_thin(X, sc_err)), bi_cb("score", "boom")),
  # every argument is checked before the score closure runs
  C("m_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, m = 7))),
    bi_ok(Q(before("m")))),
  C("m_cpp_checked_first",
    Q(counted(stein_kernel_thin(X, sc_cnt, m = 8, method = "compress++"))),
    bi_ok(Q(before("m")))),
  C("debias_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, debias = "x"))),
    bi_ok(Q(before("debias")))),
  C("method_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, method = "x"))),
    bi_ok(Q(before("method")))),
  C("weighted_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, weighted = NA))),
    bi_ok(Q(before("weighted")))),
  C("delta_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, delta = 2))),
    bi_ok(Q(before("delta")))),
  C("oversample_checked_first",
    Q(counted(stein_kernel_thin(X, sc_cnt, oversample = 13))),
    bi_ok(Q(before("oversample")))),
  C("x_NA_checked_first", Q(counted(stein_kernel_thin(Xna, sc_cnt))),
    bi_ok(Q(before("x")))),
  C("x_3rows_checked_first", Q(counted(stein_kernel_thin(X[1:3, ], sc_cnt))),
    bi_ok(Q(before("x")))),
  C("nthreads_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, nthreads = 0))),
    bi_ok(Q(before("nthreads")))),
  C("kernel_checked_first", Q(counted(stein_kernel_thin(X, sc_cnt, kernel = "imq"))),
    bi_ok(Q(before("kernel")))),
  C("value_target", Q(stein_kernel_thin(X, tg2, m = 5, standardize = FALSE)),
    bi_ok(function(v) v$m == 5 && all(v$index %in% 1:20))),
  C("value_4rows", Q(stein_kernel_thin(X[1:4, ], S[1:4, ], m = 1)),
    bi_ok(function(v) v$m == 1 && v$index %in% 1:4)),
  C("value_d1", Q(stein_kernel_thin(X1, S1, m = 5)),
    bi_ok(function(v) v$m == 5 && all(v$index %in% 1:10))),
  C("value_dup_rows", Q(stein_kernel_thin(Xsame, Ssame, m = 5, standardize = FALSE,
                                          debias = "stein")),
    bi_ok(function(v) identical(sort(v$index), rep(v$index[1], 5))))
))

bi_add("kernel_thin (compress++)", list(
  C("m_not_pow2", Q(kernel_thin(X, S, m = 3, method = "compress++")),
    bi_arg("m", "power of 2")),
  C("m_too_big", Q(kernel_thin(X, S, m = 8, method = "compress++")),
    bi_arg("m", "power of 2")),
  C("m_0", Q(kernel_thin(X, S, m = 0, method = "compress++")), bi_arg("m")),
  C("m_frac", Q(kernel_thin(X, S, m = 2.5, method = "compress++")), bi_arg("m")),
  C("m_too_big_no_score", Q(kernel_thin(X, m = 16, method = "compress++")),
    bi_arg("m", "power of 2")),
  C("oversample_neg", Q(kernel_thin(X, S, method = "compress++", oversample = -1)),
    bi_arg("oversample")),
  C("oversample_13", Q(kernel_thin(X, S, method = "compress++", oversample = 13)),
    bi_arg("oversample")),
  C("oversample_NA", Q(kernel_thin(X, S, method = "compress++", oversample = NA)),
    bi_arg("oversample")),
  C("oversample_chr", Q(kernel_thin(X, S, method = "compress++", oversample = "1")),
    bi_arg("oversample")),
  C("x_3rows", Q(kernel_thin(X[1:3, ], S[1:3, ], method = "compress++")),
    bi_arg("x", "4 rows")),
  C("x_3rows_no_score", Q(kernel_thin(X[1:3, ], method = "compress++")),
    bi_arg("x", "4 rows")),
  C("delta_1", Q(kernel_thin(X, S, method = "compress++", delta = 1)), bi_arg("delta")),
  C("m_checked_first",
    Q(counted(kernel_thin(X, sc_cnt, m = 8, method = "compress++"))),
    bi_ok(Q(before("m")))),
  C("oversample_checked_first",
    Q(counted(kernel_thin(X, sc_cnt, method = "compress++", oversample = 13))),
    bi_ok(Q(before("oversample")))),
  C("x_3rows_checked_first",
    Q(counted(kernel_thin(X[1:3, ], sc_cnt, method = "compress++"))),
    bi_ok(Q(before("x")))),
  C("value_4rows", Q(kernel_thin(X[1:4, ], S[1:4, ], method = "compress++")),
    bi_ok(function(v) v$m == 2 && all(v$index %in% 1:4))),
  C("value_direct_fallback", Q(kernel_thin(X, S, m = 4, method = "compress++",
                                           oversample = 3)),
    bi_ok(function(v) v$m == 4 && all(v$index %in% 1:20)))
))

bi_add("mmd_thin", list(
  C("x_chr", Q(mmd_thin("a", 2)), bi_arg("x")),
  C("x_NA", Q(mmd_thin(Xna, 2)), bi_arg("x")),
  C("m_0", Q(mmd_thin(X, 0)), bi_arg("m")),
  C("m_gt_n", Q(mmd_thin(X, 21)), bi_arg("m")),
  C("embed_size_0", Q(mmd_thin(X, 2, embed_size = 0)), bi_arg("embed_size")),
  C("embed_size_frac", Q(mmd_thin(X, 2, embed_size = 2.5)), bi_arg("embed_size")),
  C("embed_size_NA", Q(mmd_thin(X, 2, embed_size = NA)), bi_arg("embed_size")),
  C("standardize_NA", Q(mmd_thin(X, 2, standardize = NA)), bi_arg("standardize")),
  C("unique_NA", Q(mmd_thin(X, 2, unique = NA)), bi_arg("unique")),
  C("kernel_bad", Q(mmd_thin(X, 2, kernel = list())), bi_arg("kernel")),
  C("nthreads_0", Q(mmd_thin(X, 2, nthreads = 0)), bi_arg("nthreads")),
  C("nthreads_NA", Q(mmd_thin(X, 2, nthreads = NA)), bi_arg("nthreads")),
  C("med_all_rows_equal", Q(mmd_thin(Xsame, 2, standardize = FALSE)), bi_arg("precon")),
  C("value_unique", Q(mmd_thin(X, 20)),
    bi_ok(function(v) setequal(v$index, 1:20) && v$mmd[20] < 1e-6)),
  C("value_1row", Q(mmd_thin(X[1, , drop = FALSE], 1,
                             kernel = gaussian_kernel(bandwidth = 1), standardize = FALSE)),
    bi_ok(function(v) v$index == 1 && bi_near(v$mmd, 0))),
  C("value_d1", Q(mmd_thin(X1, 3)), bi_ok(function(v) all(v$index %in% 1:10))),
  C("scale_1e300", Q(mmd_thin(X * 1e300, 5)),
    bi_any(bi_ok(function(v) identical(v$index, mmd_thin(bi_env$X, 5)$index)),
           bi_num(), bi_arg("x", "median.*rescale x"))),
  C("scale_1e-300", Q(mmd_thin(X * 1e-300, 5)),
    bi_any(bi_ok(function(v) identical(v$index, mmd_thin(bi_env$X, 5)$index)),
           bi_num(), bi_arg("x", "median.*rescale x")))
))

# ---- kernels -----------------------------------------------------------------

bi_add("imq_kernel / gaussian_kernel", list(
  C("c_0", Q(imq_kernel(c = 0)), bi_arg("c")),
  C("c_NA", Q(imq_kernel(c = NA)), bi_arg("c")),
  C("c_chr", Q(imq_kernel(c = "1")), bi_arg("c")),
  C("c_vector", Q(imq_kernel(c = 1:2)), bi_arg("c")),
  C("c_Inf", Q(imq_kernel(c = Inf)), bi_arg("c")),
  C("beta_0", Q(imq_kernel(beta = 0)), bi_arg("beta")),
  C("beta_-1", Q(imq_kernel(beta = -1)), bi_arg("beta")),
  C("beta_NaN", Q(imq_kernel(beta = NaN)), bi_arg("beta")),
  C("precon_name", Q(imq_kernel(precon = "foo")), bi_arg("precon")),
  C("precon_NA_chr", Q(imq_kernel(precon = NA_character_)), bi_arg("precon")),
  C("precon_two_names", Q(imq_kernel(precon = c("id", "med"))), bi_arg("precon")),
  C("precon_0", Q(imq_kernel(precon = 0)), bi_arg("precon")),
  C("precon_neg", Q(imq_kernel(precon = -1)), bi_arg("precon")),
  C("precon_list", Q(imq_kernel(precon = list(1))), bi_arg("precon")),
  C("precon_matrix_nonsquare", Q(imq_kernel(precon = matrix(1, 2, 3))),
    bi_arg("precon")),
  C("precon_matrix_NA", Q(imq_kernel(precon = matrix(NA_real_, 2, 2))),
    bi_arg("precon")),
  C("precon_1e-320", Q(imq_kernel(precon = 1e-320)),
    bi_any(bi_arg("precon"),
           bi_ok(function(v) isTRUE(tryCatch(is.finite(ksd(bi_env$X, bi_env$S, v)),
                                             error = function(e) FALSE))))),
  C("bandwidth_0", Q(gaussian_kernel(bandwidth = 0)), bi_arg("bandwidth")),
  C("bandwidth_neg", Q(gaussian_kernel(bandwidth = -1)), bi_arg("bandwidth")),
  C("bandwidth_NA", Q(gaussian_kernel(bandwidth = NA)), bi_arg("bandwidth")),
  C("bandwidth_chr", Q(gaussian_kernel(bandwidth = "1")), bi_arg("bandwidth")),
  C("bandwidth_1e-200", Q(gaussian_kernel(bandwidth = 1e-200)), bi_arg("bandwidth")),
  C("bandwidth_1e300", Q(gaussian_kernel(bandwidth = 1e300)), bi_arg("bandwidth")),
  C("gaussian_precon_bad", Q(gaussian_kernel(precon = "foo")), bi_arg("precon")),
  C("value_imq", Q(imq_kernel(c = 2, beta = -0.25)),
    bi_ok(function(v) inherits(v, "kb_kernel") && v$c == 2 && v$beta == -0.25))
))

bi_add("kernel_matrix", list(
  C("x_chr", Q(kernel_matrix("a")), bi_arg("x")),
  C("x_NA", Q(kernel_matrix(Xna)), bi_arg("x")),
  C("x_0rows", Q(kernel_matrix(X0)), bi_arg("x")),
  C("y_cols", Q(kernel_matrix(X, X1)), bi_arg("y")),
  C("y_NaN", Q(kernel_matrix(X, Xnan)), bi_arg("y")),
  C("kernel_bad", Q(kernel_matrix(X, kernel = "gaussian")), bi_arg("kernel")),
  C("kernel_edit_type", Q(kernel_matrix(X, kernel = kmod(type = "foo"))),
    bi_arg("kernel")),
  C("med_1row", Q(kernel_matrix(X[1, , drop = FALSE])), bi_arg("precon")),
  C("med_rows_equal", Q(kernel_matrix(Xsame)), bi_arg("precon")),
  C("nthreads_0", Q(kernel_matrix(X, nthreads = 0)), bi_arg("nthreads")),
  C("nthreads_-1", Q(kernel_matrix(X, nthreads = -1)), bi_arg("nthreads")),
  C("nthreads_2.5", Q(kernel_matrix(X, nthreads = 2.5)), bi_arg("nthreads")),
  C("nthreads_NA", Q(kernel_matrix(X, nthreads = NA)), bi_arg("nthreads")),
  C("nthreads_1e10", Q(kernel_matrix(X, nthreads = 1e10)), bi_arg("nthreads")),
  C("nthreads_huge", Q(kernel_matrix(X, nthreads = 1e6)),
    bi_ok(Q(same_as(kernel_matrix(X))))),
  C("value_2rows_med", Q(kernel_matrix(X[1:2, ])),
    bi_ok(function(v) bi_near(v, matrix(c(1, exp(-0.5), exp(-0.5), 1), 2)))),
  C("value_d1", Q(kernel_matrix(X1, kernel = gaussian_kernel(bandwidth = 1))),
    bi_ok(function(v) bi_near(v, exp(-as.matrix(dist(bi_env$X1))^2 / 2)))),
  C("value_vector_x", Q(kernel_matrix(c(0, 1, 3), kernel = gaussian_kernel(bandwidth = 1))),
    bi_ok(function(v) bi_near(v[1, 2], exp(-0.5)))),
  C("scale_1e300_med", Q(kernel_matrix(X * 1e300)),
    bi_any(bi_ok(Q(same_as(kernel_matrix(X)))), bi_num(),
           bi_arg("x", "median.*rescale x"))),
  C("scale_1e-300_med", Q(kernel_matrix(X * 1e-300)),
    bi_any(bi_ok(Q(same_as(kernel_matrix(X)))), bi_num(),
           bi_arg("x", "median.*rescale x"))),
  C("precon_not_pd", Q(kernel_matrix(X, kernel = imq_kernel(precon = -diag(2)))),
    bi_arg("precon")),
  C("precon_not_symmetric",
    Q(kernel_matrix(X, kernel = imq_kernel(precon = matrix(c(1, 0, 0.5, 1), 2)))),
    bi_arg("precon", "symmetric"))
))

# ---- targets -----------------------------------------------------------------

bi_add("kb_target", list(
  C("log_density_not_fn", Q(kb_target(1, dim = 2)), bi_arg("log_density")),
  C("score_not_fn", Q(kb_target(ld_cnt, score = 1, dim = 2)), bi_arg("score")),
  C("dim_missing", Q(kb_target(ld_cnt, sc_cnt)), bi_arg("dim")),
  C("dim_0", Q(kb_target(ld_cnt, sc_cnt, dim = 0)), bi_arg("dim")),
  C("dim_frac", Q(kb_target(ld_cnt, sc_cnt, dim = 1.5)), bi_arg("dim")),
  C("dim_NA", Q(kb_target(ld_cnt, sc_cnt, dim = NA)), bi_arg("dim")),
  C("dim_chr", Q(kb_target(ld_cnt, sc_cnt, dim = "2")), bi_arg("dim")),
  C("vectorized_NA", Q(kb_target(ld_cnt, sc_cnt, dim = 2, vectorized = NA)),
    bi_arg("vectorized")),
  C("name_number", Q(kb_target(ld_cnt, sc_cnt, dim = 2, name = 1)), bi_arg("name")),
  C("value_fd_score", Q(target_score(kb_target(function(x) -sum(x^2) / 2, dim = 2),
                                     X[1:3, ])),
    bi_ok(Q(near(S[1:3, ], 1e-6)))),
  C("value_fd_score_vectorized",
    Q(target_score(kb_target(function(x) -rowSums(x^2) / 2, dim = 2,
                             vectorized = TRUE), X[1:3, ])),
    bi_ok(Q(near(S[1:3, ], 1e-6))))
))

bi_add("target_score / target_log_density", list(
  C("target_list", Q(target_score(list(dim = 2), X)), bi_arg("target")),
  C("target_edit_dim_chr", Q(target_score(modifyList(tg2, list(dim = "a")), X)),
    bi_arg("target")),
  C("target_edit_dim_3",
    Q(target_score(structure(modifyList(unclass(tg2), list(dim = 3L)),
                             class = "kb_target"), cbind(X, 0))),
    bi_any(bi_cb("score"), bi_arg("target"))),
  C("target_edit_score_NULL",
    Q(target_score(structure(modifyList(unclass(tg2), list(score = NULL)),
                             class = "kb_target"), X)),
    bi_arg("target")),
  C("target_edit_vectorized_NA",
    Q(target_score(structure(modifyList(unclass(tg2), list(vectorized = NA)),
                             class = "kb_target"), X)),
    bi_arg("target")),
  C("target_edit_ld_chr",
    Q(target_log_density(structure(modifyList(unclass(tg2), list(log_density = "f")),
                                   class = "kb_target"), X)),
    bi_arg("target")),
  C("x_cols", Q(target_score(tg2, X1)), bi_arg("x", "columns")),
  C("x_NA", Q(target_score(tg2, Xna)), bi_arg("x")),
  C("x_0rows", Q(target_score(tg2, X0)), bi_arg("x")),
  C("x_chr", Q(target_log_density(tg2, "a")), bi_arg("x")),
  C("value_vector_point", Q(target_score(tg2, c(1, 2))),
    bi_ok(function(v) bi_near(v, matrix(c(-1, -2), 1)))),
  C("value_vector_d1", Q(target_score(tg1, c(1, 2, 3))),
    bi_ok(function(v) is.matrix(v) && bi_near(v, -(1:3)))),
  C("value_log_density_d1", Q(target_log_density(tg1, 0)),
    bi_ok(function(v) bi_near(v, dnorm(0, log = TRUE)))),
  C("value_scale_1e300", Q(target_score(tg2, X * 1e300)),
    bi_ok(Q(near(-X * 1e300)))),
  C("score_closure_error", Q(target_score(kb_target(ld_cnt, sc_err, dim = 2), X)),
    bi_cb("score", "boom")),
  C("score_closure_length", Q(target_score(kb_target(ld_cnt, sc_len, dim = 2), X)),
    bi_err("kb_error_callback", "'score'.*length")),
  C("score_closure_NA", Q(target_score(kb_target(ld_cnt, sc_na, dim = 2), X)),
    bi_err("kb_error_callback", "'score'.*row 1")),
  C("score_closure_chr", Q(target_score(kb_target(ld_cnt, sc_chr, dim = 2), X)),
    bi_err("kb_error_callback", "'score'")),
  C("score_closure_int", Q(target_score(kb_target(ld_cnt, function(x) c(1L, 2L),
                                                  dim = 2), X[1:2, ])),
    bi_ok(function(v) bi_near(v, matrix(c(1, 1, 2, 2), 2)))),
  C("score_closure_warns", Q(target_score(kb_target(ld_cnt, sc_warn, dim = 2), X)),
    bi_warn("warning", "careful", Q(near(S)))),
  C("log_density_NA", Q(target_log_density(kb_target(function(x) NA, dim = 1), 1)),
    bi_err("kb_error_callback", "'log_density'")),
  C("log_density_plus_Inf", Q(target_log_density(kb_target(function(x) Inf, dim = 1), 1)),
    bi_err("kb_error_callback", "'log_density'")),
  C("log_density_minus_Inf", Q(target_log_density(kb_target(function(x) -Inf, dim = 1), 1:2)),
    bi_ok(function(v) identical(v, c(-Inf, -Inf)))),
  C("log_density_length2", Q(target_log_density(kb_target(function(x) 1:2, dim = 1), 1)),
    bi_err("kb_error_callback", "'log_density'.*length")),
  C("log_density_error", Q(target_log_density(kb_target(sc_err, dim = 1), 1)),
    bi_cb("log_density", "boom")),
  C("vec_score_dims", Q(target_score(kb_target(ld_cnt, function(x) x[, 1], dim = 2,
                                               vectorized = TRUE), X)),
    bi_err("kb_error_callback", "'score'")),
  C("vec_score_NaN", Q(target_score(kb_target(ld_cnt, function(x) x * NaN, dim = 2,
                                              vectorized = TRUE), X)),
    bi_err("kb_error_callback", "'score'.*row 1")),
  C("vec_score_error", Q(target_score(kb_target(ld_cnt, sc_err, dim = 2,
                                                vectorized = TRUE), X)),
    bi_cb("score", "boom")),
  C("vec_log_density_length", Q(target_log_density(kb_target(function(x) 1, dim = 2,
                                                             vectorized = TRUE), X)),
    bi_err("kb_error_callback", "'log_density'")),
  C("vec_log_density_NaN", Q(target_log_density(kb_target(function(x) x[, 1] * NaN,
                                                          dim = 2, vectorized = TRUE), X)),
    bi_err("kb_error_callback", "'log_density'.*row 1"))
))

bi_add("sample_target", list(
  C("target_bad", Q(sample_target(list(), 2)), bi_arg("target")),
  C("n_0", Q(sample_target(tg2, 0)), bi_arg("n")),
  C("n_frac", Q(sample_target(tg2, 2.5)), bi_arg("n")),
  C("n_NA", Q(sample_target(tg2, NA)), bi_arg("n")),
  C("n_neg", Q(sample_target(tg2, -1)), bi_arg("n")),
  C("n_1e10", Q(sample_target(tg2, 1e10)), bi_arg("n")),
  C("no_sampler", Q(sample_target(tg_cnt, 2)), bi_arg("target", "sampler")),
  C("value_1", Q(sample_target(tg2, 1)),
    bi_ok(function(v) is.matrix(v) && all(dim(v) == c(1, 2)) && all(is.finite(v)))),
  C("value_d1", Q(sample_target(tg1, 3)),
    bi_ok(function(v) is.matrix(v) && all(dim(v) == c(3, 1))))
))

bi_add("gaussian_target / gaussian_mixture_target", list(
  C("mean_NA", Q(gaussian_target(c(0, NA))), bi_arg("mean")),
  C("mean_chr", Q(gaussian_target("0")), bi_arg("mean")),
  C("mean_empty", Q(gaussian_target(numeric(0))), bi_arg("mean")),
  C("mean_Inf", Q(gaussian_target(Inf)), bi_arg("mean")),
  C("cov_not_pd", Q(gaussian_target(c(0, 0), matrix(c(1, 2, 2, 1), 2))),
    bi_arg("cov", "positive definite")),
  C("cov_zero", Q(gaussian_target(0, 0)), bi_arg("cov")),
  C("cov_neg", Q(gaussian_target(0, -1)), bi_arg("cov")),
  C("cov_dims", Q(gaussian_target(c(0, 0), diag(3))), bi_arg("cov")),
  C("cov_asym", Q(gaussian_target(c(0, 0), matrix(c(1, 0, 0.5, 1), 2))),
    bi_arg("cov", "symmetric")),
  C("cov_NA", Q(gaussian_target(c(0, 0), c(1, NA))), bi_arg("cov")),
  C("value_cov_1e-300", Q(target_score(gaussian_target(0, 1e-300), 1)),
    bi_ok(function(v) bi_near(v, -1e300))),
  C("value_cov_1e300", Q(target_log_density(gaussian_target(0, 1e300), 0)),
    bi_ok(function(v) bi_near(v, dnorm(0, sd = 1e150, log = TRUE)))),
  C("means_chr", Q(gaussian_mixture_target("a")), bi_arg("means")),
  C("means_ragged", Q(gaussian_mixture_target(list(0, c(0, 0)))), bi_arg("means")),
  C("means_NA", Q(gaussian_mixture_target(matrix(c(0, NA), 1))), bi_arg("means")),
  C("covs_count", Q(gaussian_mixture_target(rbind(0, 1), covs = list(1, 1, 1))),
    bi_arg("covs")),
  C("covs_not_pd", Q(gaussian_mixture_target(rbind(0, 1), covs = list(1, -1))),
    bi_arg("covs[[2]]")),
  C("weights_length", Q(gaussian_mixture_target(rbind(0, 1), weights = 1)),
    bi_arg("weights")),
  C("weights_neg", Q(gaussian_mixture_target(rbind(0, 1), weights = c(1, -1))),
    bi_arg("weights")),
  C("weights_zero", Q(gaussian_mixture_target(rbind(0, 1), weights = c(0, 0))),
    bi_arg("weights")),
  C("weights_1e308", Q(target_log_density(gaussian_mixture_target(rbind(0, 1),
                                          weights = c(1e308, 1e308)), 0.5)),
    bi_ok(Q(same_as(target_log_density(gaussian_mixture_target(rbind(0, 1)), 0.5))))),
  C("value_one_component", Q(target_log_density(gaussian_mixture_target(matrix(0, 1, 2)), X)),
    bi_ok(Q(same_as(target_log_density(tg2, X))))),
  C("value_far_point", Q(target_score(gaussian_mixture_target(rbind(0, 1)), 1e5)),
    bi_ok(function(v) is.finite(v) && v < 0))
))

bi_add("rbm_target", list(
  C("B_vector", Q(rbm_target(1:6, rep(0, 6), 0)), bi_arg("B")),
  C("B_NA", Q(rbm_target(matrix(c(1, NA), 2, 1), c(0, 0), 0)), bi_arg("B")),
  C("B_0cols", Q(rbm_target(matrix(0, 2, 0), c(0, 0), numeric(0))), bi_arg("B")),
  C("b_length", Q(rbm_target(matrix(1, 2, 1), 0, 0)), bi_arg("b")),
  C("c_Inf", Q(rbm_target(matrix(1, 2, 1), c(0, 0), Inf)), bi_arg("c")),
  C("burnin_neg", Q(rbm_target(matrix(1, 2, 1), c(0, 0), 0, burnin = -1)),
    bi_arg("burnin")),
  C("value_far_point", Q(target_score(rbm_target(matrix(1, 2, 1), c(0, 0), 0),
                                      c(1e5, -1e5))),
    bi_ok(function(v) all(is.finite(v))))
))

bi_add("logistic_regression_target", list(
  C("X_chr", Q(logistic_regression_target("a", 1)), bi_arg("X")),
  C("X_NA", Q(logistic_regression_target(Xna, rep(0:1, 10))), bi_arg("X")),
  C("X_0rows", Q(logistic_regression_target(X0, integer(0))), bi_arg("X")),
  C("y_length", Q(logistic_regression_target(X, 0:1)), bi_arg("y")),
  C("y_values", Q(logistic_regression_target(X, rep(1:2, 10))), bi_arg("y")),
  C("y_NA", Q(logistic_regression_target(X, c(NA, rep(0:1, length.out = 19)))),
    bi_arg("y")),
  C("y_factor3", Q(logistic_regression_target(X, factor(rep(1:3, length.out = 20)))),
    bi_arg("y")),
  C("prior_sd_0", Q(logistic_regression_target(X, rep(0:1, 10), prior_sd = 0)),
    bi_arg("prior_sd")),
  C("intercept_NA", Q(logistic_regression_target(X, rep(0:1, 10), intercept = NA)),
    bi_arg("intercept")),
  C("scale_NA", Q(logistic_regression_target(X, rep(0:1, 10), scale = NA)),
    bi_arg("scale")),
  C("X_1row", Q(target_log_density(logistic_regression_target(X[1, , drop = FALSE], 1),
                                   c(0, 0, 0))),
    bi_any(bi_ok(function(v) bi_near(v, -log(2))), bi_arg("X"))),
  C("value_const_column", Q(target_score(logistic_regression_target(cbind(X, 1),
                                                                    rep(0:1, 10)),
                                         rep(0, 4))),
    bi_ok(function(v) all(is.finite(v)) && all(dim(v) == c(1, 4)))),
  C("value_logical_y", Q(logistic_regression_target(X, rep(c(TRUE, FALSE), 10))$y),
    bi_ok(function(v) bi_near(v, rep(1:0, 10)))),
  C("value_large_eta", Q(target_log_density(logistic_regression_target(X, rep(0:1, 10),
                                                                     scale = FALSE),
                                            c(0, 1e300, 0))),
    bi_ok(function(v) identical(v, -Inf) || (is.finite(v) && v < -1e299)))
))

# ---- samplers ------------------------------------------------------------------

bi_mcmc_cases <- function(fn) {
  mk <- function(...) {
    a <- utils::modifyList(list(target = quote(tg2), x0 = c(0, 0), n_iter = 5,
                                step_size = 0.5), list(...))
    as.call(c(as.name(fn), a))
  }
  list(
    C("target_list", mk(target = quote(list(dim = 2))), bi_arg("target")),
    C("target_edit_dim", mk(target = quote(modifyList(tg2, list(dim = 0)))),
      bi_arg("target")),
    C("x0_length", mk(x0 = c(0, 0, 0)), bi_arg("x0")),
    C("x0_NA", mk(x0 = c(0, NA)), bi_arg("x0")),
    C("x0_chr", mk(x0 = c("0", "0")), bi_arg("x0")),
    C("n_iter_0", mk(n_iter = 0), bi_arg("n_iter")),
    C("n_iter_frac", mk(n_iter = 2.5), bi_arg("n_iter")),
    C("n_iter_NA", mk(n_iter = NA), bi_arg("n_iter")),
    C("n_iter_1e10", mk(n_iter = 1e10), bi_arg("n_iter")),
    C("step_size_0", mk(step_size = 0), bi_arg("step_size")),
    C("step_size_Inf", mk(step_size = Inf), bi_arg("step_size")),
    C("step_size_NA", mk(step_size = NA), bi_arg("step_size")),
    C("warmup_neg", mk(warmup = -1), bi_arg("warmup")),
    C("warmup_0_adapt", mk(step_size = NULL, warmup = 0), bi_arg("warmup")),
    C("target_accept_1", mk(target_accept = 1), bi_arg("target_accept")),
    C("target_accept_checked_first",
      as.call(list(quote(counted), mk(target = quote(tg_cnt), target_accept = 2))),
      bi_ok(quote(before("target_accept")))),
    C("log_density_error", mk(target = quote(kb_target(sc_err, function(x) -x, dim = 2))),
      bi_cb("log_density", "boom")),
    C("log_density_NA_at_x0", mk(target = quote(kb_target(function(x) NA_real_,
                                                          function(x) -x, dim = 2))),
      bi_err("kb_error_callback", "'log_density'")),
    C("log_density_-Inf_at_x0", mk(target = quote(kb_target(function(x) -Inf,
                                                            function(x) -x, dim = 2))),
      bi_any(bi_arg("x0"), bi_err("kb_error_callback", "'log_density'"))),
    C("score_length", mk(target = quote(kb_target(ld_cnt, sc_len, dim = 2))),
      bi_err("kb_error_callback", "'score'.*length")),
    C("vec_log_density_length", mk(target = quote(kb_target(function(x) 1:3,
                                                            function(x) -x, dim = 2,
                                                            vectorized = TRUE))),
      bi_err("kb_error_callback", "'log_density'")),
    C("step_size_1e300", mk(step_size = 1e300, n_iter = 100),
      bi_any(bi_warn("warning", "step_size", function(v) all(v$x == 0)), bi_arg("step_size"))),
    C("value_1iter", mk(n_iter = 1),
      bi_ok(function(v) all(dim(v$x) == c(1, 2)) && all(is.finite(v$x)))),
    C("log_density_warns", mk(target = quote(kb_target(function(x) {
        warning("careful"); -sum(x^2) / 2 }, function(x) -x, dim = 2))),
      bi_warn("warning", "careful", function(v) all(dim(v$x) == c(5, 2)))),
    C("value_d1", mk(target = quote(tg1), x0 = 0, n_iter = 10),
      bi_ok(function(v) all(dim(v$x) == c(10, 1)))),
    C("value_scale_1e300_x0", mk(x0 = c(1e300, 0), n_iter = 20),
      bi_any(bi_ok(function(v) all(is.finite(v$x)), warn = TRUE), bi_arg("x0"),
             bi_num()))
  )
}
bi_add("rwm", bi_mcmc_cases("rwm"))
bi_add("mala", bi_mcmc_cases("mala"))

# ---- KSDT ----------------------------------------------------------------------

bi_add("ksdt", c(bi_xs_cases("ksdt", list(progress = FALSE), standardize = FALSE), list(
  C("budget_neg", Q(ksdt(X, S, budget = -1)), bi_arg("budget")),
  C("budget_NA", Q(ksdt(X, S, budget = NA)), bi_arg("budget")),
  C("budget_fn_NA", Q(ksdt(X, S, budget = function(t) NA, progress = FALSE)),
    bi_err("kb_error_callback", "'budget'")),
  C("budget_fn_error", Q(ksdt(X, S, budget = sc_err, progress = FALSE)),
    bi_cb("budget", "boom")),
  C("budget_fn_chr", Q(ksdt(X, S, budget = function(t) "a", progress = FALSE)),
    bi_err("kb_error_callback", "'budget'")),
  C("min_size_name", Q(ksdt(X, S, min_size = "cubic")), bi_arg("min_size")),
  C("min_size_fn_neg", Q(ksdt(X, S, min_size = function(t) -t, progress = FALSE)),
    bi_err("kb_error_callback", "'min_size'")),
  C("min_size_coef_neg", Q(ksdt(X, S, min_size_coef = -1)), bi_arg("min_size_coef")),
  C("min_size_floor_0", Q(ksdt(X, S, min_size_floor = 0)), bi_arg("min_size_floor")),
  C("progress_NA", Q(ksdt(X, S, progress = NA)), bi_arg("progress")),
  C("budget_checked_first", Q(counted(ksdt(X, sc_cnt, budget = -1))),
    bi_ok(Q(before("budget")))),
  C("value_1row", Q(ksdt(X[1, , drop = FALSE], S[1, , drop = FALSE], progress = FALSE, standardize = FALSE)),
    bi_ok(Q(function(v) v$index == 1 && bi_near(v$ksd, ksd1(S[1, ]))))),
  C("value_ksd_is_dictionary_ksd", Q(ksdt(X, S, progress = FALSE, standardize = FALSE)),
    bi_ok(function(v) bi_near(v$ksd[20], ksd(v$points, v$score, standardize = FALSE)))),
  C("value_dup_rows", Q(ksdt(Xsame, Ssame, progress = FALSE, standardize = FALSE)),
    bi_ok(function(v) bi_near(v$ksd[5], ksd(v$points, v$score, standardize = FALSE)))),
  C("value_d1", Q(ksdt(X1, S1, progress = FALSE)),
    bi_ok(function(v) bi_near(v$ksd[10], ksd(v$points, v$score))))
)))

bi_add("ksdt_stream / ksdt_push / ksdt_result", list(
  C("dim_0", Q(ksdt_stream(0)), bi_arg("dim")),
  C("dim_NA", Q(ksdt_stream(NA)), bi_arg("dim")),
  C("budget_chr", Q(ksdt_stream(2, budget = "a")), bi_arg("budget")),
  C("kernel_chr", Q(ksdt_stream(2, kernel = "imq")), bi_arg("kernel")),
  C("kernel_edit", Q(ksdt_stream(2, kernel = kmod(beta = 3))), bi_arg("kernel")),
  C("nthreads_0", Q(ksdt_stream(2, nthreads = 0)), bi_arg("nthreads")),
  C("nthreads_NA", Q(ksdt_stream(2, nthreads = NA)), bi_arg("nthreads")),
  C("progress_chr", Q(ksdt_stream(2, progress = "no")), bi_arg("progress")),
  C("push_not_stream", Q(ksdt_push(list(), X, S)), bi_arg("stream")),
  C("push_x_cols", Q(ksdt_push(ksdt_stream(2), X1, S1)), bi_arg("x")),
  C("push_x_NA", Q(ksdt_push(ksdt_stream(2), Xna, S)), bi_arg("x")),
  C("push_score_dims", Q(ksdt_push(ksdt_stream(2), X, S[-1, ])), bi_arg("score")),
  C("push_score_closure_error", Q(ksdt_push(ksdt_stream(2), X, sc_err)),
    bi_cb("score", "boom")),
  C("push_overflow_row", Q(ksdt_push(ksdt_stream(2, progress = FALSE), Xbig, Sbig)),
    bi_num("row")),
  C("push_score_closure_warns", Q(ksdt_result(ksdt_push(ksdt_stream(2, progress = FALSE),
                                                         X, sc_warn))),
    bi_warn("warning", "careful", Q(same_as(ksdt(X, S, progress = FALSE))))),
  C("push_vector_point", Q(ksdt_result(ksdt_push(ksdt_stream(2, progress = FALSE, standardize = FALSE),
                                                 c(1, 2), c(-1, -2)))),
    bi_ok(function(v) bi_near(v$points, c(1, 2)))),
  C("push_in_pieces", Q({
      st <- ksdt_stream(2, progress = FALSE, standardize = FALSE)
      ksdt_push(st, X[1:7, ], S[1:7, ])
      ksdt_push(st, X[8:20, ], S[8:20, ])
      ksdt_result(st)
    }), bi_ok(Q(same_as(ksdt(X, S, progress = FALSE, standardize = FALSE))))),
  C("rejected_push_leaves_stream", Q({
      st <- ksdt_stream(2, kernel = imq_kernel(precon = "smpcov"), progress = FALSE)
      e <- tryCatch(ksdt_push(st, X, S / max(abs(S)) * 1.5e308),
                    error = function(e) e)
      ksdt_push(st, X, S)
      list(e = e, r = ksdt_result(st))
    }), bi_ok(function(v) {
      if (!inherits(v$e, "kb_error")) return("the bad push was not a kb_error")
      bi_near(v$r$ksd, ksdt(bi_env$X, bi_env$S, kernel = imq_kernel(precon = "smpcov"),
                            progress = FALSE)$ksd)
    })),
  C("rejected_closure_push_leaves_stream", Q({
      st <- ksdt_stream(2, progress = FALSE, standardize = FALSE)
      ksdt_push(st, X[1:5, ], S[1:5, ])
      e <- tryCatch(ksdt_push(st, X[6:20, ], sc_err), error = function(e) e)
      ksdt_push(st, X[6:20, ], S[6:20, ])
      ksdt_result(st)
    }), bi_ok(Q(same_as(ksdt(X, S, progress = FALSE, standardize = FALSE))))),
  C("push_stream_edit_dim", Q({
      st <- ksdt_stream(2, progress = FALSE)
      st$dim <- "two"
      ksdt_push(st, X, S)
    }), bi_any(bi_arg("stream"), bi_state())),
  C("result_empty", Q(ksdt_result(ksdt_stream(2))),
    bi_any(bi_arg("stream"), bi_state())),
  C("result_not_stream", Q(ksdt_result(ksdt(X, S, progress = FALSE))), bi_arg("stream"))
))

bi_ksdt_sample_cases <- function(fn) {
  mk <- function(...) {
    a <- utils::modifyList(list(target = quote(tg2), x0 = c(0, 0), n_iter = 10,
                                step_size = 0.5, progress = FALSE), list(...))
    as.call(c(as.name(fn), a))
  }
  cs <- Filter(Negate(is.null), list(
    C("target_bad", mk(target = 1), bi_arg("target")),
    C("x0_length", mk(x0 = 1), bi_arg("x0")),
    C("n_iter_0", mk(n_iter = 0), bi_arg("n_iter")),
    C("n_iter_NA", mk(n_iter = NA), bi_arg("n_iter")),
    C("sampler_bad", mk(sampler = "hmc"), bi_arg("sampler")),
    if (fn == "sp_mcmc") C("start_bad", mk(start = "first"), bi_arg("start")),
    C("step_size_neg", mk(step_size = -1), bi_arg("step_size")),
    C("warmup_1", mk(step_size = NULL, warmup = 1), bi_arg("warmup")),
    C("target_accept_0", mk(target_accept = 0), bi_arg("target_accept")),
    C("kernel_bad", mk(kernel = "imq"), bi_arg("kernel")),
    C("nthreads_0", mk(nthreads = 0), bi_arg("nthreads")),
    C("nthreads_checked_first",
      as.call(list(quote(counted), mk(target = quote(tg_cnt), nthreads = 0))),
      bi_ok(quote(before("nthreads")))),
    C("n_iter_checked_first",
      as.call(list(quote(counted), mk(target = quote(tg_cnt), step_size = NULL, n_iter = 0))),
      bi_ok(quote(before("n_iter")))),
    C("score_error", mk(target = quote(kb_target(ld_cnt, sc_err, dim = 2))),
      bi_cb("score", "boom")),
    C("score_NA", mk(target = quote(kb_target(ld_cnt, sc_na, dim = 2))),
      bi_err("kb_error_callback", "'score'")),
    C("value_1iter", mk(n_iter = 1, standardize = FALSE),
      bi_ok(Q(function(v) if (nrow(v$points) != 1) "not one point" else
        bi_near(v$ksd, ksd1(v$score))))),
    C("value_d1", mk(target = quote(tg1), x0 = 0, standardize = FALSE),
      bi_ok(function(v) bi_near(v$ksd[length(v$ksd)], ksd(v$points, v$score, standardize = FALSE))))
  ))
  if (fn == "ksdt_sample") {
    cs <- c(cs, list(
      C("candidates_0", mk(candidates = 0), bi_arg("candidates")),
      C("budget_neg", mk(budget = -1), bi_arg("budget")),
      C("min_size_floor_0", mk(min_size_floor = 0), bi_arg("min_size_floor"))))
  } else {
    cs <- c(cs, list(C("candidates_0", mk(candidates = 0), bi_arg("candidates")),
                     C("candidates_NA", mk(candidates = NA), bi_arg("candidates"))))
  }
  cs
}
bi_add("ksdt_sample", bi_ksdt_sample_cases("ksdt_sample"))
bi_add("sp_mcmc", bi_ksdt_sample_cases("sp_mcmc"))

# ---- Stein Points ----------------------------------------------------------------

bi_add("stein_points", list(
  C("target_missing", Q(stein_points()), bi_arg("target")),
  C("target_number", Q(stein_points(1, 3)), bi_arg("target")),
  C("m_missing", Q(counted(stein_points(tg_cnt))), bi_ok(Q(before("m")))),
  C("m_0", Q(counted(stein_points(tg_cnt, 0))), bi_ok(Q(before("m")))),
  C("m_NA", Q(stein_points(tg2, NA)), bi_arg("m")),
  C("m_frac", Q(stein_points(tg2, 2.5)), bi_arg("m")),
  C("method_bad", Q(counted(stein_points(tg_cnt, 3, method = "fw"))),
    bi_ok(Q(before("method")))),
  C("optimizer_bad", Q(counted(stein_points(tg_cnt, 3, optimizer = "pso"))),
    bi_ok(Q(before("optimizer")))),
  C("grid_d4", Q(stein_points(gaussian_target(rep(0, 4)), 3, optimizer = "grid")),
    bi_arg("optimizer", "dimension")),
  C("kernel_chr", Q(counted(stein_points(tg_cnt, 3, kernel = "imq"))),
    bi_ok(Q(before("kernel")))),
  C("kernel_med", Q(counted(stein_points(tg_cnt, 3, kernel = imq_kernel(precon = "med")))),
    bi_ok(Q(before("kernel")))),
  C("kernel_smpcov", Q(stein_points(tg2, 3, kernel = gaussian_kernel())),
    bi_arg("kernel", "heuristic")),
  C("kernel_dim", Q(stein_points(tg2, 3, kernel = imq_kernel(precon = diag(3)))),
    bi_arg("kernel")),
  C("control_unnamed", Q(counted(stein_points(tg_cnt, 3, control = list(5)))),
    bi_ok(Q(before("control")))),
  C("control_unknown", Q(stein_points(tg2, 3, control = list(n_cand = 5))),
    bi_arg("control", "n_cand")),
  C("control_n_candidates_0", Q(counted(stein_points(tg_cnt, 3,
                                                     control = list(n_candidates = 0)))),
    bi_ok(Q(before("control$n_candidates")))),
  C("control_mu0_len", Q(stein_points(tg2, 3, control = list(mu0 = 1:3))),
    bi_arg("control$mu0")),
  C("control_mu0_Inf", Q(stein_points(tg2, 3, control = list(mu0 = c(0, Inf)))),
    bi_arg("control$mu0")),
  C("control_cov0_neg", Q(stein_points(tg2, 3, control = list(cov0 = -1))),
    bi_arg("control$cov0")),
  C("control_cov0_asym", Q(stein_points(tg2, 3, control = list(cov0 = matrix(c(1, 0.5, 0, 1), 2)))),
    bi_arg("control$cov0")),
  C("control_lambda_0", Q(stein_points(tg2, 3, control = list(lambda = 0))),
    bi_arg("control$lambda")),
  C("control_alpha_2", Q(stein_points(tg2, 3, control = list(alpha = 2))),
    bi_arg("control$alpha")),
  C("control_alpha_len", Q(stein_points(tg2, 3, control = list(alpha = c(1, 0)))),
    bi_arg("control$alpha")),
  C("control_alpha_fun_NA", Q(counted(stein_points(tg_cnt, 3,
                                                   control = list(alpha = function(j, n) NA)))),
    bi_ok(Q(before("control$alpha")))),
  C("control_n_starts", Q(stein_points(tg2, 3, optimizer = "nm",
                                       control = list(n_candidates = 2, n_starts = 3))),
    bi_arg("control$n_starts")),
  C("control_maxit_0", Q(stein_points(tg2, 3, control = list(maxit = 0))),
    bi_arg("control$maxit")),
  C("control_box", Q(stein_points(tg2, 3, optimizer = "grid",
                                  control = list(lower = 1, upper = c(2, 0)))),
    bi_arg("control$upper")),
  C("control_grid_size_1", Q(stein_points(tg2, 3, optimizer = "grid",
                                          control = list(grid_size = 1))),
    bi_arg("control$grid_size")),
  C("control_grid_memory", Q(stein_points(gaussian_target(c(0, 0, 0)), 3,
                                          optimizer = "grid",
                                          control = list(grid_size = 1e5))),
    bi_arg("control$grid_size", "memory")),
  C("control_keep_NA", Q(stein_points(tg2, 3, control = list(keep_candidates = NA))),
    bi_arg("control$keep_candidates")),
  C("truncation_bad", Q(stein_points(tg2, 3, truncation = "soft")),
    bi_arg("truncation")),
  C("c2_missing", Q(counted(stein_points(tg_cnt, 3, truncation = "lower"))),
    bi_ok(Q(before("c2")))),
  C("c2_neg", Q(stein_points(tg2, 3, truncation = "upper", c2 = -1)), bi_arg("c2")),
  C("c2_unused", Q(stein_points(tg2, 3, c2 = 1)), bi_arg("c2")),
  C("nthreads_0", Q(counted(stein_points(tg_cnt, 3, nthreads = 0))),
    bi_ok(Q(before("nthreads")))),
  C("progress_NA", Q(counted(stein_points(tg_cnt, 3, progress = NA))),
    bi_ok(Q(before("progress")))),
  C("score_error", Q(stein_points(kb_target(function(x) 0, sc_err, dim = 2), 3,
                                  progress = FALSE)),
    bi_cb("score")),
  C("score_NaN", Q(stein_points(kb_target(function(x) 0, function(x) c(NaN, 0), dim = 2),
                                3, progress = FALSE)),
    bi_cb("score")),
  C("truncation_infeasible", Q(stein_points(tg2, 3, truncation = "lower", c2 = 1e6,
                                            progress = FALSE)),
    bi_state("c2")),
  C("value_n1", Q(stein_points(tg1, 1, progress = FALSE)),
    bi_ok(function(v) identical(dim(v$points), c(1L, 1L)) && length(v$ksd) == 1L)),
  C("value_grid_d1", Q(stein_points(tg1, 4, optimizer = "grid", progress = FALSE)),
    bi_ok(function(v) all(abs(v$points) <= 3 * sqrt(5) + 1e-12))),
  C("value_nm_d1", Q(stein_points(tg1, 3, optimizer = "nm", progress = FALSE)),
    bi_ok(function(v) all(v$criterion <= v$criterion_start)))
))

# ---- chains and merging -------------------------------------------------------

local(envir = bi_env, {
  set.seed(2)
  r1 <- ksdt(X[1:10, ], S[1:10, ], progress = FALSE, standardize = FALSE)
  r2 <- ksdt(X[11:20, ], S[11:20, ], progress = FALSE, standardize = FALSE)
  r3 <- ksdt(cbind(X, 0)[1:5, ], cbind(S, 0)[1:5, ], progress = FALSE,
             standardize = FALSE)
})

bi_add("ksdt_chains", list(
  C("target_bad", Q(ksdt_chains(1, rbind(c(0, 0)), 5)), bi_arg("target")),
  C("x0_cols", Q(ksdt_chains(tg2, matrix(0, 2, 3), 5)), bi_arg("x0")),
  C("x0_NA", Q(ksdt_chains(tg2, rbind(c(0, NA)), 5)), bi_arg("x0")),
  C("n_iter_0", Q(ksdt_chains(tg2, rbind(c(0, 0)), 0)), bi_arg("n_iter")),
  C("merge_bad", Q(ksdt_chains(tg2, rbind(c(0, 0)), 5, merge = "all")), bi_arg("merge")),
  C("nthreads_0", Q(ksdt_chains(tg2, rbind(c(0, 0)), 5, nthreads = 0)),
    bi_arg("nthreads")),
  C("merge_size_0_first", Q(counted(ksdt_chains(tg_cnt, rbind(c(0, 0), c(1, 1)), 5,
                                                 step_size = 0.5, progress = FALSE,
                                                 merge = "stein_thin",
                                                 merge_size = 0))),
    bi_ok(Q(before("merge_size")))),
  C("dots_bad_value_first", Q(counted(ksdt_chains(tg_cnt, rbind(c(0, 0), c(1, 1)), 5,
                                                   step_size = 0.5, candidates = 0))),
    bi_ok(Q(before("candidates")))),
  C("dots_unknown_name", Q(ksdt_chains(tg2, rbind(c(0, 0)), 5, step_size = 0.5, foo = 1)),
    bi_any(bi_arg("foo"), bi_arg("..."))),
  C("value_two_chains", Q(ksdt_chains(tg2, rbind(c(0, 0), c(1, 1)), 10, step_size = 0.5,
                                      merge = "none")),
    bi_ok(function(v) length(v$chains) == 2 && !length(v$errors)))
))

bi_add("c / merge (kb_ksdt)", list(
  C("c_not_ksdt", Q(c(r1, "a")), bi_arg("...")),
  C("c_dims", Q(c(r1, r3)), bi_any(bi_arg("..."), bi_arg("y"))),
  C("merge_not_ksdt", Q(merge(r1, list())), bi_arg("y")),
  C("how_bad", Q(c(r1, r2, how = "union")), bi_arg("how")),
  C("m_0", Q(c(r1, r2, how = "stein_thin", m = 0)), bi_arg("m")),
  C("nthreads_0", Q(c(r1, r2, nthreads = 0)), bi_arg("nthreads")),
  C("budget_neg", Q(c(r1, r2, budget = -1)), bi_arg("budget")),
  C("edited_points", Q(c(r1, modifyList(r2, list(points = r2$points[, 1, drop = FALSE])))),
    bi_any(bi_arg("..."), bi_state())),
  C("value_single", Q(c(r1)), bi_ok(Q(same_as(r1)))),
  C("value_merge", Q(c(r1, r2)),
    bi_ok(function(v) bi_near(v$ksd[length(v$ksd)],
                              ksd(v$points, v$score, standardize = FALSE)))),
  C("value_merge_self", Q(merge(r1, r1)),
    bi_ok(function(v) nrow(v$points) == nrow(bi_env$r1$points)))
))

# ---- particle flows ------------------------------------------------------------

bi_flow_common <- function(fn, extra) {
  mk <- function(...) {
    a <- utils::modifyList(c(list(x0 = quote(X[1:8, ])), extra,
                             list(n_iter = 3, progress = FALSE)), list(...))
    as.call(c(as.name(fn), a))
  }
  list(
    C("x0_1row", mk(x0 = quote(X[1, , drop = FALSE])), bi_arg("x0")),
    C("x0_NA", mk(x0 = quote(Xna[1:8, ])), bi_arg("x0")),
    C("x0_chr", mk(x0 = "a"), bi_arg("x0")),
    C("n_iter_0", mk(n_iter = 0), bi_arg("n_iter")),
    C("n_iter_frac", mk(n_iter = 1.5), bi_arg("n_iter")),
    C("keep_every_neg", mk(keep_every = -1), bi_arg("keep_every")),
    C("progress_NA", mk(progress = NA), bi_arg("progress")),
    C("nthreads_0", mk(nthreads = 0), bi_arg("nthreads")),
    C("nthreads_NA", mk(nthreads = NA), bi_arg("nthreads")),
    C("value_trace", mk(keep_every = 1),
      bi_ok(function(v) all(dim(v$trace)[1:2] == c(8, 2)) && dim(v$trace)[3] >= 2 &&
              all(is.finite(v$trace))))
  )
}

bi_add("svgd", c(bi_flow_common("svgd", list(target = quote(tg2))), list(
  C("target_missing", Q(svgd(X, n_iter = 2)), bi_arg("target")),
  C("target_matrix", Q(svgd(X, S, n_iter = 2)), bi_arg("target")),
  C("target_dim", Q(svgd(X, tg1, n_iter = 2)), bi_arg("target")),
  C("score_closure_error", Q(svgd(X, sc_err, n_iter = 2)), bi_cb("score", "boom")),
  C("score_closure_length", Q(svgd(X, sc_len, n_iter = 2)),
    bi_err("kb_error_callback", "'score'.*length")),
  C("step_size_0", Q(svgd(X, tg2, step_size = 0)), bi_arg("step_size")),
  C("bandwidth_chr", Q(svgd(X, tg2, bandwidth = "silverman")), bi_arg("bandwidth")),
  C("bandwidth_0", Q(svgd(X, tg2, bandwidth = 0)), bi_arg("bandwidth")),
  C("optimizer_bad", Q(svgd(X, tg2, optimizer = "rmsprop")), bi_arg("optimizer")),
  C("alpha_1", Q(svgd(X, tg2, alpha = 1)), bi_arg("alpha")),
  C("checked_first", Q(counted(svgd(X, sc_cnt, n_iter = 2, alpha = 2))),
    bi_ok(Q(before("alpha")))),
  C("score_closure_warns", Q(svgd(X, sc_warn, n_iter = 2, progress = FALSE)),
    bi_warn("warning", "careful", Q(function(v) bi_near(v$x, svgd(X, tg2, n_iter = 2,
                                                                  progress = FALSE)$x)))),
  C("value_d1", Q(svgd(X1, tg1, n_iter = 3, progress = FALSE)),
    bi_ok(function(v) all(dim(v$x) == c(10, 1)) && all(is.finite(v$x)))),
  C("value_2_particles", Q(svgd(X[1:2, ], tg2, n_iter = 3, progress = FALSE)),
    bi_ok(function(v) all(is.finite(v$x)))),
  C("particles_coincide", Q(svgd(Xsame, tg2, n_iter = 3, progress = FALSE)),
    bi_any(bi_ok(function(v) all(is.finite(v$x))), bi_arg("x0"), bi_arg("bandwidth"),
           bi_num("particles coincide; give a numeric 'bandwidth'"))),
  C("scale_1e300", Q(svgd(X * 1e300, tg2, n_iter = 2, progress = FALSE)),
    bi_any(bi_ok(function(v) all(is.finite(v$x))), bi_num(),
           bi_arg("x0", "would overflow; rescale")))
)))

bi_add("ksd_descent", c(bi_flow_common("ksd_descent", list(target = quote(tg2))), list(
  C("score_jacobian_not_fn", Q(ksd_descent(X, tg2, score_jacobian = 1)),
    bi_arg("score_jacobian")),
  C("score_jacobian_length", Q(ksd_descent(X, tg2, score_jacobian = function(x) 1,
                                           n_iter = 2, progress = FALSE)),
    bi_err("kb_error_callback", "'score_jacobian'.*length")),
  C("score_jacobian_error", Q(ksd_descent(X, tg2, score_jacobian = sc_err,
                                          n_iter = 2, progress = FALSE)),
    bi_cb("score_jacobian", "boom")),
  C("method_bad", Q(ksd_descent(X, tg2, method = "newton")), bi_arg("method")),
  C("step_size_neg", Q(ksd_descent(X, tg2, method = "gd", step_size = -1)), bi_arg("step_size")),
  C("kernel_smpcov", Q(ksd_descent(X, tg2, kernel = imq_kernel(precon = "smpcov"))),
    bi_arg("kernel")),
  C("checked_first", Q(counted(ksd_descent(X, sc_cnt, n_iter = 0))),
    bi_ok(Q(before("n_iter")))),
  C("value_gd_decreases", Q(ksd_descent(X[1:6, ] + 2, tg2, method = "gd", n_iter = 5,
                                        progress = FALSE)),
    bi_ok(function(v) v$objective[length(v$objective)] < v$objective[1]))
)))

bi_add("mmd_flow", c(bi_flow_common("mmd_flow", list(y = quote(X))), list(
  C("y_cols", Q(mmd_flow(X, X1, n_iter = 2)), bi_arg("y")),
  C("y_NA", Q(mmd_flow(X, Xna, n_iter = 2)), bi_arg("y")),
  C("step_size_0", Q(mmd_flow(X, X, step_size = 0)), bi_arg("step_size")),
  C("noise_neg", Q(mmd_flow(X, X, noise = -1)), bi_arg("noise")),
  C("noise_fn_NA", Q(mmd_flow(X, X + 1, n_iter = 2, noise = function(t) NA,
                              progress = FALSE)),
    bi_err("kb_error_callback", "'noise'")),
  C("noise_fn_error", Q(mmd_flow(X, X + 1, n_iter = 2, noise = sc_err,
                                 progress = FALSE)),
    bi_cb("noise", "boom")),
  C("kernel_smpcov", Q(mmd_flow(X, X, kernel = gaussian_kernel(precon = "smpcov"))),
    bi_arg("kernel")),
  C("kernel_bad", Q(mmd_flow(X, X, kernel = 1)), bi_arg("kernel")),
  C("y_rows_equal_med", Q(mmd_flow(X, Xsame, n_iter = 2, progress = FALSE)),
    bi_any(bi_arg("precon"), bi_arg("y", "median heuristic"))),
  C("value_d1", Q(mmd_flow(X1, X1 + 1, n_iter = 3, progress = FALSE)),
    bi_ok(function(v) all(dim(v$x) == c(10, 1)) && all(is.finite(v$x)) &&
            mean(v$x) > mean(bi_env$X1))),
  C("value_at_target", Q(mmd_flow(X, X, n_iter = 2, progress = FALSE)),
    bi_ok(function(v) bi_near(v$x, bi_env$X) && bi_near(v$objective, c(0, 0))))
)))

bi_add("dmmd_flow", c(bi_flow_common("dmmd_flow", list(y = quote(X))), list(
  C("lambda_0", Q(dmmd_flow(X, X, lambda = 0)), bi_arg("lambda")),
  C("lambda_NA", Q(dmmd_flow(X, X, lambda = NA)), bi_arg("lambda")),
  C("lambda_tiny", Q(dmmd_flow(X, X[c(1, 1, 2:20), ], lambda = 1e-300, n_iter = 2,
                               progress = FALSE)),
    bi_arg("lambda")),
  C("lambda_1e300", Q(dmmd_flow(X + 1, X, lambda = 1e300, n_iter = 3, progress = FALSE)),
    bi_any(bi_ok(function(v) max(abs(v$x)) < 10), bi_num(), bi_arg("lambda"))),
  C("step_size_0", Q(dmmd_flow(X, X, step_size = 0)), bi_arg("step_size"))
)))

local(envir = bi_env, {
  uk_fun <- function(x, y) exp(-pmax(outer(rowSums(x^2), rowSums(y^2), "+") -
                                       2 * tcrossprod(x, y), 0) / 2)
  uk_grad <- function(x, y, w) {
    Kw <- uk_fun(x, y) * rep(w, each = nrow(x))
    Kw %*% y - rowSums(Kw) * x
  }
  uk <- user_kernel(uk_fun, uk_grad)
})
bi_add("user_kernel", list(
  C("fun_missing", Q(user_kernel(grad = uk_grad)), bi_arg("fun")),
  C("fun_number", Q(user_kernel(1, uk_grad)), bi_arg("fun")),
  C("fun_one_arg", Q(user_kernel(function(x) x, uk_grad)), bi_arg("fun")),
  C("grad_missing", Q(user_kernel(uk_fun)), bi_arg("grad")),
  C("grad_chr", Q(user_kernel(uk_fun, "grad")), bi_arg("grad")),
  C("name_NA", Q(user_kernel(uk_fun, uk_grad, name = NA_character_)), bi_arg("name")),
  C("fun_error", Q(mmd_flow(X, X + 1, kernel = user_kernel(function(x, y) stop("boom"), uk_grad),
                            n_iter = 2, progress = FALSE)),
    bi_cb("fun", "boom")),
  C("fun_NA", Q(mmd_flow(X, X + 1, kernel = user_kernel(function(x, y)
    uk_fun(x, y) * NA, uk_grad), n_iter = 2, progress = FALSE)),
    bi_err("kb_error_callback", "'kernel' fun\\(x, y\\) returned a non-finite")),
  C("grad_dims", Q(dmmd_flow(X, X + 1, kernel = user_kernel(uk_fun, function(x, y, w)
    t(uk_grad(x, y, w))), n_iter = 2, progress = FALSE)),
    bi_err("kb_error_callback", "'kernel' grad\\(x, y, w\\) returned")),
  C("in_ksd", Q(ksd(X, S, kernel = uk)), bi_arg("kernel", "user_kernel")),
  C("in_mmd_thin", Q(mmd_thin(X, 3, kernel = uk)), bi_arg("kernel")),
  C("value_gaussian", Q(mmd_flow(X, X + 1, kernel = uk, n_iter = 3, progress = FALSE)),
    bi_ok(function(v) bi_near(v$x, mmd_flow(bi_env$X, bi_env$X + 1,
                                             kernel = gaussian_kernel(bandwidth = 1),
                                             n_iter = 3, progress = FALSE)$x)))
))

bi_add("mied", c(bi_flow_common("mied", list(target = quote(tg2))), list(
  C("target_bad", Q(mied(X, function(x) -x)), bi_arg("target")),
  C("target_dim", Q(mied(X, tg1)), bi_arg("target")),
  C("s_le_d", Q(mied(X, tg2, s = 2)), bi_arg("s")),
  C("mollifier_scale_neg", Q(mied(X, tg2, mollifier_scale = -1)), bi_arg("mollifier_scale")),
  C("eps_and_mollifier_scale", Q(mied(X, tg2, eps = 1, mollifier_scale = 1)), bi_arg("eps")),
  C("mollifier_bad", Q(mied(X, tg2, mollifier = "cauchy")), bi_arg("mollifier")),
  C("mollifier_scale_missing", Q(mied(X, tg2, mollifier = "gaussian")), bi_arg("mollifier_scale")),
  C("mollifier_scale_0", Q(mied(X, tg2, mollifier = "laplace", mollifier_scale = 0)), bi_arg("mollifier_scale")),
  C("mollifier_s", Q(mied(X, tg2, mollifier = "gaussian", mollifier_scale = 1, s = 3)), bi_arg("s")),
  C("step_size_0", Q(mied(X, tg2, step_size = 0)), bi_arg("step_size")),
  C("optimizer_bad", Q(mied(X, tg2, optimizer = "adagrad")), bi_arg("optimizer")),
  C("checked_first", Q(counted(mied(X, tg_cnt, n_iter = 2, mollifier_scale = -1))),
    bi_ok(Q(before("mollifier_scale")))),
  C("log_density_-Inf", Q(mied(X[1:5, ], kb_target(function(x) if (x[1] > 0) -Inf else 0,
                                                     function(x) 0 * x, dim = 2),
                               n_iter = 2, progress = FALSE)),
    bi_any(bi_arg("x0", "row"), bi_err("kb_error_callback", "'log_density'.*row"),
           bi_num("log density is -Inf at particle [0-9]"))),
  C("particles_coincide", Q(mied(Xsame, tg2, n_iter = 2, progress = FALSE)),
    bi_any(bi_ok(function(v) all(is.finite(v$x))), bi_arg("x0"))),
  C("constraint_list", Q(mied(X, tg2, constraint = list(fun = sum))),
    bi_arg("constraint")),
  C("constraint_edited", Q(mied(X, tg2, constraint = structure(
    list(fun = sum, grad = sum, type = "both", alpha = 1), class = "kb_constraint"))),
    bi_arg("constraint")),
  C("constraint_eq_d1", Q(mied(X1, tg1, constraint = mied_constraint(
    function(x) x[, 1], function(x) 1 + 0 * x, "eq"))), bi_arg("constraint")),
  C("constraint_eq_s", Q(mied(X, tg2, s = 1, constraint = mied_constraint(
    function(x) rowSums(x^2) - 1, function(x) 2 * x, "eq"))), bi_arg("s")),
  C("constraint_fun_err", Q(mied(X, tg2, n_iter = 2, progress = FALSE,
                                 constraint = mied_constraint(sc_err, function(x) x))),
    bi_cb("constraint", "boom")),
  C("constraint_fun_len", Q(mied(X, tg2, n_iter = 2, progress = FALSE,
                                 constraint = mied_constraint(sum, function(x) x))),
    bi_cb("constraint", "20 numbers")),
  C("constraint_fun_NA", Q(mied(X, tg2, n_iter = 2, progress = FALSE,
                                constraint = mied_constraint(
                                  function(x) rep(NA_real_, nrow(x)), function(x) x))),
    bi_cb("constraint", "non-finite")),
  C("constraint_grad_dim", Q(mied(X, tg2, n_iter = 2, progress = FALSE,
                                  constraint = mied_constraint(
                                    function(x) x[, 1], function(x) x[, 1]))),
    bi_cb("constraint", "20 x 2"))
)))

bi_add("mied_constraint", list(
  C("fun_missing", Q(mied_constraint()), bi_arg("fun")),
  C("fun_number", Q(mied_constraint(1, function(x) x)), bi_arg("fun")),
  C("grad_missing", Q(mied_constraint(function(x) x[, 1])), bi_arg("grad")),
  C("type_bad", Q(mied_constraint(sum, sum, type = "le")), bi_arg("type")),
  C("alpha_0", Q(mied_constraint(sum, sum, alpha = 0)), bi_arg("alpha")),
  C("alpha_NA", Q(mied_constraint(sum, sum, alpha = NA)), bi_arg("alpha")),
  C("alpha_Inf", Q(mied_constraint(sum, sum, alpha = Inf)), bi_arg("alpha")),
  C("value", Q(mied_constraint(sum, sum, "eq", 2)),
    bi_ok(function(v) inherits(v, "kb_constraint") && v$type == "eq" && v$alpha == 2))
))

# ---- kernel Bayes' rule ---------------------------------------------------------

local(envir = bi_env, {
  set.seed(21)
  kx <- rnorm(40)
  ky <- kx + rnorm(40, sd = 0.5)
  fit <- kbr(kx, ky, eps = 0.01, delta = 0.01)
  fit_lr <- kbr(kx, ky, eps = 0.01, delta = 0.01, rank = 10)
  kx200 <- rnorm(200)
  ky200 <- kx200 + rnorm(200, sd = 0.5)
})

bi_add("kbr", list(
  C("x_chr", Q(kbr("a", ky, eps = 0.01, delta = 0.01)), bi_arg("x")),
  C("x_NA", Q(kbr(c(NA, kx[-1]), ky, eps = 0.01, delta = 0.01)), bi_arg("x")),
  C("y_rows", Q(kbr(kx, ky[-1], eps = 0.01, delta = 0.01)), bi_arg("y")),
  C("prior_cols", Q(kbr(kx, ky, prior = X, eps = 0.01, delta = 0.01)), bi_arg("prior")),
  C("prior_weights_length", Q(kbr(kx, ky, prior_weights = 1, eps = 0.01, delta = 0.01)),
    bi_arg("prior_weights")),
  C("prior_weights_NA", Q(kbr(kx, ky, prior_weights = c(NA, rep(1, 39)), eps = 0.01,
                              delta = 0.01)), bi_arg("prior_weights")),
  C("prior_weights_zero", Q(kbr(kx, ky, prior_weights = rep(0, 40), eps = 0.01,
                                delta = 0.01)), bi_arg("prior_weights")),
  C("prior_weights_1e308", Q(posterior_mean(kbr(kx, ky, prior_weights = rep(1e308, 40),
                                                eps = 0.01, delta = 0.01), 0.5)),
    bi_any(bi_ok(Q(same_as(posterior_mean(kbr(kx, ky, prior_weights = rep(1, 40) / 40,
                                               eps = 0.01, delta = 0.01), 0.5)))),
           bi_arg("prior_weights"))),
  C("eps_0", Q(kbr(kx, ky, eps = 0, delta = 0.01)), bi_arg("eps")),
  C("delta_neg", Q(kbr(kx, ky, eps = 0.01, delta = -1)), bi_arg("delta")),
  C("delta_NA", Q(kbr(kx, ky, eps = 0.01, delta = NA)), bi_arg("delta")),
  C("rank_0", Q(kbr(kx, ky, eps = 0.01, delta = 0.01, rank = 0)), bi_arg("rank")),
  C("rank_gt_n", Q(kbr(kx, ky, eps = 0.01, delta = 0.01, rank = 41)), bi_arg("rank")),
  C("tol_neg", Q(kbr(kx, ky, eps = 0.01, delta = 0.01, tol = -1)), bi_arg("tol")),
  C("method_bad", Q(kbr(kx, ky, method = "exact")), bi_arg("method")),
  C("kernel_x_imq", Q(kbr(kx, ky, kernel_x = imq_kernel(), eps = 0.01, delta = 0.01)),
    bi_arg("kernel_x")),
  C("kernel_y_chr", Q(kbr(kx, ky, kernel_y = "gauss", eps = 0.01, delta = 0.01)),
    bi_arg("kernel_y")),
  C("nthreads_0", Q(kbr(kx, ky, eps = 0.01, delta = 0.01, nthreads = 0)),
    bi_arg("nthreads")),
  C("nthreads_0_cv", Q(kbr(kx, ky, nthreads = 0)), bi_arg("nthreads")),
  C("cv_points_4", Q(kbr(kx, ky, cv_points = 4)), bi_arg("cv_points")),
  C("cv_points_chr", Q(kbr(kx, ky, cv_points = "all")), bi_arg("cv_points")),
  C("cv_points_NA", Q(kbr(kx, ky, cv_points = NA)), bi_arg("cv_points")),
  C("n4_default_eps", Q(kbr(kx[1:4], ky[1:4])),
    bi_any(bi_arg("eps"), bi_arg("x"))),
  C("x_1row", Q(kbr(1, 1, eps = 0.01, delta = 0.01)),
    bi_any(bi_arg("x"), bi_arg("precon"), bi_arg("kernel_x"))),
  C("x_rows_equal", Q(kbr(rep(1, 5), 1:5, eps = 0.01, delta = 0.01)),
    bi_any(bi_arg("x"), bi_arg("precon"), bi_arg("kernel_x"))),
  C("lowrank_tiny_delta", Q(posterior_mean(kbr(kx200, ky200, eps = 1e-2, delta = 1e-10,
                                                method = "iw", rank = 50), 1)),
    bi_any(bi_ok(Q(function(v) abs(v - posterior_mean(kbr(kx200, ky200, eps = 1e-2,
                                                         delta = 1e-10, method = "iw"),
                                                     1)) < 0.2)),
           bi_num())),
  C("scale_1e300", Q(posterior_mean(kbr(kx * 1e300, ky, eps = 0.01, delta = 0.01), 0.5)),
    bi_any(bi_ok(Q(function(v) bi_near(v / 1e300, posterior_mean(fit, 0.5), 1e-6))),
           bi_num(), bi_arg("x", "would overflow; rescale"))),
  C("value_posterior_mean_d1", Q(posterior_mean(fit, c(-1, 1))),
    bi_ok(function(v) all(dim(v) == c(2, 1)) && v[1] < v[2]))
))

bi_add("posterior_mean / posterior_expect / preimage / predict", list(
  C("fit_bad", Q(posterior_mean(list(), 1)), bi_arg("fit")),
  C("y_new_cols", Q(posterior_mean(fit, X)), bi_arg("newdata")),
  C("y_new_NA", Q(posterior_mean(fit, NA_real_)), bi_arg("newdata")),
  C("y_new_chr", Q(posterior_mean(fit, "a")), bi_arg("newdata")),
  C("y_new_far_warns", Q(posterior_mean(fit, 1e6)), bi_warn("warning", "far")),
  C("lowrank_value", Q(posterior_mean(fit_lr, 0.5)),
    bi_ok(Q(function(v) abs(v - posterior_mean(fit, 0.5)) < 0.1))),
  C("f_not_fn", Q(posterior_expect(fit, 1, 2)), bi_arg("f")),
  C("f_error", Q(posterior_expect(fit, 1, sc_err)), bi_cb("f", "boom")),
  C("f_NULL", Q(posterior_expect(fit, 1, sc_null)),
    bi_err("kb_error_callback", "'f'")),
  C("f_NA", Q(posterior_expect(fit, 1, function(x) NA)),
    bi_err("kb_error_callback", "'f'")),
  C("f_chr", Q(posterior_expect(fit, 1, function(x) "a")),
    bi_err("kb_error_callback", "'f'")),
  C("f_ragged", Q(posterior_expect(fit, 1, function(x) seq_len(1 + (x > 0)))),
    bi_err("kb_error_callback", "'f'")),
  C("f_value_identity", Q(posterior_expect(fit, c(-1, 1), function(x) x)),
    bi_ok(Q(same_as(posterior_mean(fit, c(-1, 1), weights = "nonnegative"))))),
  C("f_value_identity_signed", Q(posterior_expect(fit, c(-1, 1), function(x) x,
                                                  weights = "signed")),
    bi_ok(Q(same_as(posterior_mean(fit, c(-1, 1)))))),
  C("weights_bad", Q(posterior_mean(fit, 1, weights = "none")), bi_arg("weights")),
  C("newdata_far_NA", Q(posterior_sd(fit, 1e6)), bi_warn("warning", "far")),
  C("preimage_max_iter_0", Q(preimage(fit, 1, max_iter = 0)), bi_arg("max_iter")),
  C("preimage_tol_NA", Q(preimage(fit, 1, tol = NA)), bi_arg("tol")),
  C("preimage_fit_bad", Q(preimage(1, 1)), bi_arg("fit")),
  C("preimage_value", Q(preimage(fit, 0.5)),
    bi_ok(function(v) all(dim(v) == c(1, 1)) && is.finite(v) && abs(v) < 3)),
  C("predict_weights_columns", Q(predict(fit, c(0, 1, 2))),
    bi_ok(function(v) all(dim(v) == c(40, 3)))),
  C("fit_edit_method", Q(posterior_mean(modifyList(fit, list(method = "foo")), 1)),
    bi_any(bi_arg("fit"), bi_state())),
  C("fit_edit_x_rows", Q(posterior_mean(modifyList(fit, list(x = fit$x[1:5, , drop = FALSE])), 1)),
    bi_any(bi_arg("fit"), bi_state()))
))

bi_add("kbr_cv", list(
  C("folds_1", Q(kbr_cv(kx, ky, folds = 1)), bi_arg("folds")),
  C("folds_gt_n", Q(kbr_cv(kx, ky, folds = 41)), bi_arg("folds")),
  C("folds_NA", Q(kbr_cv(kx, ky, folds = NA)), bi_arg("folds")),
  C("grid_list", Q(kbr_cv(kx, ky, grid = list(eps = 1, delta = 1))), bi_arg("grid")),
  C("grid_eps_0", Q(kbr_cv(kx, ky, grid = data.frame(eps = 0, delta = 1))), bi_arg("grid")),
  C("grid_empty", Q(kbr_cv(kx, ky, grid = data.frame(eps = numeric(0), delta = numeric(0)))),
    bi_arg("grid")),
  C("grid_sigma_chr", Q(kbr_cv(kx, ky, grid = data.frame(eps = 1, delta = 1, sigma_x = "a"))),
    bi_arg("grid")),
  C("criterion_bad", Q(kbr_cv(kx, ky, criterion = "aic")), bi_arg("criterion")),
  C("method_bad", Q(kbr_cv(kx, ky, method = "x")), bi_arg("method")),
  C("seed_NA", Q(kbr_cv(kx, ky, grid = data.frame(eps = 0.1, delta = 0.1), seed = "a")),
    bi_arg("seed")),
  C("refit_NA", Q(kbr_cv(kx, ky, grid = data.frame(eps = 0.1, delta = 0.1), refit = NA)),
    bi_any(bi_arg("refit"), bi_ok(function(v) is.null(v$fit)))),
  C("dots_bad_first", Q(kbr_cv(kx, ky, grid = data.frame(eps = 0.1, delta = 0.1),
                               rank = 0)),
    bi_arg("rank")),
  C("y_rows", Q(kbr_cv(kx, ky[-1])), bi_arg("y")),
  C("value_best_in_grid", Q(kbr_cv(kx, ky, grid = data.frame(eps = c(0.1, 0.01), delta = 0.1),
                                   folds = 2, refit = FALSE)),
    bi_ok(function(v) v$best$eps %in% c(0.1, 0.01) && all(is.finite(v$table$criterion))))
))

bi_add("kbr_filter", list(
  C("x_train_2rows", Q(kbr_filter(1:2, 1:2, 1)), bi_arg("x_train")),
  C("y_train_rows", Q(kbr_filter(kx, ky[-1], 1)), bi_arg("y_train")),
  C("y_obs_cols", Q(kbr_filter(kx, ky, X)), bi_arg("y_obs")),
  C("y_obs_NA", Q(kbr_filter(kx, ky, NA_real_)), bi_arg("y_obs")),
  C("eps_0", Q(kbr_filter(kx, ky, 1, eps = 0)), bi_arg("eps")),
  C("delta_Inf", Q(kbr_filter(kx, ky, 1, delta = Inf)), bi_arg("delta")),
  C("rank_0", Q(kbr_filter(kx, ky, 1, rank = 0)), bi_arg("rank")),
  C("method_bad", Q(kbr_filter(kx, ky, 1, method = "ukf")), bi_arg("method")),
  C("kernel_x_imq", Q(kbr_filter(kx, ky, 1, kernel_x = imq_kernel())), bi_arg("kernel_x")),
  C("nthreads_0", Q(kbr_filter(kx, ky, 1, nthreads = 0)), bi_arg("nthreads")),
  C("value", Q(kbr_filter(kx, ky, c(0, 1))),
    bi_ok(function(v) all(dim(v$mean) == c(2, 1)) && all(is.finite(v$mean))))
))

bi_add("kalman_filter", list(
  C("y_NA", Q(kalman_filter(c(1, NA), 1, 1, 1, 1)), bi_arg("y")),
  C("A_nonsquare", Q(kalman_filter(1:3, matrix(1, 1, 2), 1, 1, 1)), bi_arg("A")),
  C("A_chr", Q(kalman_filter(1:3, "a", 1, 1, 1)), bi_arg("A")),
  C("C_dims", Q(kalman_filter(1:3, 1, matrix(1, 1, 2), 1, 1)), bi_arg("C")),
  C("Q_neg", Q(kalman_filter(1:3, 1, 1, -5, 1)), bi_arg("Q")),
  C("Q_asym", Q(kalman_filter(1:3, diag(2), matrix(1, 1, 2), matrix(c(1, 0, 1, 1), 2), 1)),
    bi_arg("Q")),
  C("R_neg", Q(kalman_filter(1:3, 1, 1, 1, -1)), bi_arg("R")),
  C("R_dims", Q(kalman_filter(1:3, 1, 1, 1, diag(2))), bi_arg("R")),
  C("m0_length", Q(kalman_filter(1:3, 1, 1, 1, 1, m0 = c(0, 0))), bi_arg("m0")),
  C("P0_neg", Q(kalman_filter(1:3, 1, 1, 1, 1, P0 = -1)), bi_arg("P0")),
  C("value_one_step", Q(kalman_filter(1, 1, 1, 1, 1, m0 = 0, P0 = 1)$mean),
    bi_ok(function(v) bi_near(v, 0.5))),
  C("value_unstable_A", Q(kalman_filter(1:3, 2, 1, 1, 1)$mean),
    bi_ok(function(v) all(is.finite(v))))
))

# ---- Goodwin oscillator ---------------------------------------------------------

local(envir = bi_env, {
  th0 <- c(1, 3, 2, 0.5)
  gy <- goodwin_solve(th0, 1:5) + 0.01
  gw <- goodwin_target(gy, 1:5)
})

bi_add("goodwin_solve / goodwin_simulate / goodwin_target", list(
  C("theta_length", Q(goodwin_solve(c(1, 3, 2), 1:5)), bi_arg("theta")),
  C("theta_neg", Q(goodwin_solve(c(1, 3, -2, 0.5), 1:5)), bi_arg("theta")),
  C("theta_NA", Q(goodwin_solve(c(1, 3, NA, 0.5), 1:5)), bi_arg("theta")),
  C("theta_chr", Q(goodwin_solve(as.character(th0), 1:5)), bi_arg("theta")),
  C("times_unsorted", Q(goodwin_solve(th0, c(2, 1))), bi_arg("times")),
  C("times_dup", Q(goodwin_solve(th0, c(1, 1))), bi_arg("times")),
  C("times_neg", Q(goodwin_solve(th0, -1)), bi_arg("times")),
  C("times_empty", Q(goodwin_solve(th0, numeric(0))), bi_arg("times")),
  C("times_Inf", Q(goodwin_solve(th0, Inf)), bi_arg("times")),
  C("sensitivities_NA", Q(goodwin_solve(th0, 1:5, sensitivities = NA)),
    bi_arg("sensitivities")),
  C("rtol_0", Q(goodwin_solve(th0, 1:5, rtol = 0)), bi_arg("rtol")),
  C("rtol_1", Q(goodwin_solve(th0, 1:5, rtol = 1)), bi_arg("rtol")),
  C("atol_neg", Q(goodwin_solve(th0, 1:5, atol = -1)), bi_arg("atol")),
  C("stiff_theta", Q(goodwin_solve(c(1e6, 3, 2, 1e6), 1:5)),
    bi_num("theta")),
  C("huge_theta", Q(goodwin_solve(c(1e300, 3, 2, 0.5), 1:2)), bi_num("theta")),
  C("tiny_tols", Q(goodwin_solve(th0, 1:5, rtol = 1e-300, atol = 1e-300)),
    bi_any(bi_num("rtol"), bi_ok(function(v) all(is.finite(v))))),
  C("times_1e300", Q(goodwin_solve(th0, c(1, 1e300))),
    bi_any(bi_num(), bi_ok(function(v) all(is.finite(v))))),
  C("value_time_0", Q(goodwin_solve(th0, 0)),
    bi_ok(function(v) all(v == 0) && all(dim(v) == c(1, 2)))),
  C("value_sens", Q(goodwin_solve(th0, 1:3, sensitivities = TRUE)),
    bi_ok(function(v) all(dim(v$sens) == c(3, 2, 4)) && all(is.finite(v$sens)))),
  C("simulate_sd_0", Q(goodwin_simulate(th0, 1:5, sd = 0)), bi_arg("sd")),
  C("simulate_sd_3", Q(goodwin_simulate(th0, 1:5, sd = c(1, 1, 1))), bi_arg("sd")),
  C("simulate_theta_bad", Q(goodwin_simulate(1, 1:5)), bi_arg("theta")),
  C("target_y_rows", Q(goodwin_target(gy[-1, ], 1:5)), bi_arg("y")),
  C("target_y_cols", Q(goodwin_target(gy[, 1], 1:5)), bi_arg("y")),
  C("target_y_NA", Q(goodwin_target(rbind(gy[-1, ], NA), 1:5)), bi_arg("y")),
  C("target_prior_sd_0", Q(goodwin_target(gy, 1:5, prior_sd = 0)), bi_arg("prior_sd")),
  C("target_prior_mean_3", Q(goodwin_target(gy, 1:5, prior_mean = 1:3)),
    bi_arg("prior_mean")),
  C("target_sd_NA", Q(goodwin_target(gy, 1:5, sd = NA)), bi_arg("sd")),
  C("target_atol_0", Q(goodwin_target(gy, 1:5, atol = 0)), bi_arg("atol")),
  C("target_far_point", Q(target_log_density(gw, rbind(log(th0), c(40, 0, 0, 40)))),
    bi_ok(function(v) is.finite(v[1]) && identical(v[2], -Inf))),
  C("target_inf_theta", Q(target_log_density(gw, rbind(c(1000, 0, 0, 0)))),
    bi_ok(function(v) identical(v, -Inf))),
  C("target_score_far_point", Q(target_score(gw, rbind(c(40, 0, 0, 40)))),
    bi_ok(function(v) all(v == 0))),
  C("target_x_cols", Q(target_score(gw, X)), bi_arg("x")),
  C("target_value", Q(target_score(gw, rbind(log(th0)))),
    bi_ok(function(v) all(dim(v) == c(1, 4)) && all(is.finite(v))))
))

# ---- Wasserstein ------------------------------------------------------------------

bi_add("wasserstein2", list(
  C("x_chr", Q(wasserstein2("a", 1)), bi_arg("x")),
  C("x_NA", Q(wasserstein2(Xna, X)), bi_arg("x")),
  C("y_Inf", Q(wasserstein2(X, Xinf)), bi_arg("y")),
  C("x_0rows", Q(wasserstein2(X0, X0)), bi_arg("x")),
  C("y_cols", Q(wasserstein2(X, cbind(X, 0))), bi_arg("y", "column")),
  C("y_rows", Q(wasserstein2(X, X[-1, ])), bi_arg("y", "rows")),
  C("x_particles_edited", Q(wasserstein2(structure(list(x = NULL), class = "kb_particles"), X)),
    bi_arg("x")),
  C("value_self_permuted", Q(wasserstein2(X, X[20:1, ])),
    bi_ok(function(v) bi_near(v, 0) && identical(attr(v, "assignment"), 20:1))),
  C("value_vectors_are_columns", Q(wasserstein2(c(0, 0), c(3, 4))),
    bi_ok(function(v) bi_near(v, sqrt(12.5)))),
  C("value_1point", Q(wasserstein2(matrix(c(0, 0), 1), matrix(c(3, 4), 1))),
    bi_ok(function(v) bi_near(v, 5))),
  C("value_d1_sorted", Q(wasserstein2(X1, X1^2)),
    bi_ok(function(v) bi_near(v, sqrt(mean((sort(bi_env$X1) - sort(bi_env$X1^2))^2))))),
  C("value_dup_rows", Q(wasserstein2(Xsame, Xsame + 1)),
    bi_ok(function(v) bi_near(v, sqrt(2)))),
  C("value_particles", Q(wasserstein2(svgd(X, tg2, n_iter = 1, progress = FALSE), X)),
    bi_ok(function(v) is.finite(v) && v < 0.1)),
  C("scale_1e300", Q(wasserstein2(X * 1e300, (X + 1) * 1e300)),
    bi_ok(function(v) bi_near(v / 1e300, sqrt(2)))),
  C("scale_1e-300", Q(wasserstein2(X * 1e-300, (X + 1) * 1e-300)),
    bi_ok(function(v) bi_near(v / 1e-300, sqrt(2)))),
  C("scale_mixed", Q(wasserstein2(rbind(c(0, 0), c(1e300, 0)), rbind(c(1e300, 0), c(1, 0)))),
    bi_ok(function(v) bi_near(v, sqrt(0.5))))
))

# ---- crash-prone cases, each in its own R process ----------------------------------

bi_add("subprocess: external pointers, re-entry, sizes", list(
  bi_sub("stream_reloaded_push", "
    st <- ksdt_stream(2, progress = FALSE); ksdt_push(st, X, S)
    f <- tempfile(); saveRDS(st, f); st2 <- readRDS(f)
    ksdt_push(st2, X, S)", bi_any(bi_state(), bi_arg("stream"))),
  bi_sub("stream_reloaded_result", "
    st <- ksdt_stream(2, progress = FALSE); ksdt_push(st, X, S)
    f <- tempfile(); saveRDS(st, f); st2 <- readRDS(f)
    ksdt_result(st2)", bi_any(bi_state(), bi_arg("stream"))),
  bi_sub("stream_reloaded_print", "
    st <- ksdt_stream(2, progress = FALSE); ksdt_push(st, X, S)
    f <- tempfile(); saveRDS(st, f); st2 <- readRDS(f)
    print(st2)", bi_any(bi_state(), bi_arg("stream"),
                        bi_ok(function(v) TRUE))),
  bi_sub("stream_ptr_edited", "
    st <- ksdt_stream(2, progress = FALSE); ksdt_push(st, X, S)
    st$ptr <- 'junk'
    ksdt_push(st, X, S)", bi_any(bi_state(), bi_arg("stream"))),
  bi_sub("stream_ptr_other_object", "
    st <- ksdt_stream(2, progress = FALSE); ksdt_push(st, X, S)
    st$ptr <- new.env()
    ksdt_result(st)", bi_any(bi_state(), bi_arg("stream"))),
  bi_sub("stream_reentry_from_closure", "
    grab <- function() {
      for (f in rev(sys.frames()))
        if (exists('stream', envir = f, inherits = FALSE) &&
            inherits(get('stream', envir = f), 'kb_ksdt_stream'))
          return(get('stream', envir = f))
      NULL
    }
    tgr <- kb_target(function(x) -sum(x^2) / 2, function(x) {
      s <- grab()
      if (!is.null(s) && !is.null(s$ptr)) ksdt_push(s, rbind(x), rbind(-x))
      -x
    }, dim = 2)
    ksdt_sample(tgr, c(0, 0), 20, step_size = 0.5, progress = FALSE)",
    bi_any(bi_state(), bi_cb("score", "(in use|busy|re-?ent)"))),
  bi_sub("kbr_fit_edited_mu", "
    set.seed(1); x <- rnorm(30); y <- x + rnorm(30)
    fit <- kbr(x, y, eps = 0.01, delta = 0.01)
    fit$mu <- fit$mu[1:3]
    posterior_mean(fit, 0)", bi_any(bi_arg("fit"), bi_state())),
  bi_sub("kbr_fit_edited_factor", "
    set.seed(1); x <- rnorm(30); y <- x + rnorm(30)
    fit <- kbr(x, y, eps = 0.01, delta = 0.01)
    fit$factor <- NULL; fit$ipiv <- 1:2
    posterior_mean(fit, 0)", bi_any(bi_arg("fit"), bi_state())),
  bi_sub("kbr_fit_reloaded", "
    set.seed(1); x <- rnorm(30); y <- x + rnorm(30)
    fit <- kbr(x, y, eps = 0.01, delta = 0.01)
    f <- tempfile(); saveRDS(fit, f); fit2 <- readRDS(f)
    c(posterior_mean(fit2, 0) - posterior_mean(fit, 0))",
    bi_ok(function(v) v == 0)),
  bi_sub("ksdt_result_reloaded", "
    r <- ksdt(X, S, progress = FALSE)
    f <- tempfile(); saveRDS(r, f); r2 <- readRDS(f)
    c(r, r2)$ksd", bi_ok(function(v) all(is.finite(v)))),
  bi_sub("resolved_kernel_edited", "
    p <- ksd_path(X, S)
    k <- p$kernel; k$lambda <- numeric(0)
    kernbayes:::ksd_resolved(X, S, k)", bi_any(bi_arg("kernel"), bi_state(),
                                               bi_err("kb_error", ""))),
  bi_sub("sample_target_2e9", "sample_target(tg2, 2e9)",
    bi_any(bi_arg("n"), bi_err("error", "cannot allocate"))),
  bi_sub("nthreads_max_int", "
    c(ksd(X, S, nthreads = .Machine$integer.max) - ksd(X, S))",
    bi_ok(function(v) v == 0)),
  bi_sub("closure_longjmp_in_thread_region", "
    tgw <- kb_target(function(x) -sum(x^2) / 2, function(x) { if (x[1] > 1) stop('late'); -x },
                     dim = 2)
    ksd(X, tgw, nthreads = 2)", bi_cb("score", "late"))
))

# ---- labelled samples: chain, by_chain, reference, progress, size --------------

local(envir = bi_env, {
  ch2 <- rep(1:2, each = 10)            # two chains of 10 rows
  X_orig <- X + 0                       # copies: inputs must come back unchanged
  S_orig <- S + 0
  Xn <- X; colnames(Xn) <- c("a", "b")
  Sn <- S; colnames(Sn) <- c("a", "b")
  th5 <- stein_thin(X, S, 5, progress = FALSE)
  has_posterior <- requireNamespace("posterior", quietly = TRUE)
  if (has_posterior) {
    # the same 20 rows as 2 chains x 10 iterations (chain-major)
    Xd <- posterior::as_draws_array(array(X, c(10, 2, 2),
                                          dimnames = list(NULL, NULL, c("a", "b"))))
    Sd <- posterior::as_draws_array(array(S, c(10, 2, 2),
                                          dimnames = list(NULL, NULL, c("a", "b"))))
    Sd_renamed <- posterior::rename_variables(Sd, c = a)
    Sd_short <- posterior::as_draws_array(array(S[1:18, ], c(9, 2, 2),
                                                dimnames = list(NULL, NULL, c("a", "b"))))
    Sd_extra <- posterior::as_draws_array(array(cbind(S, 1), c(10, 2, 3),
                                                dimnames = list(NULL, NULL, c("a", "b", "c"))))
    Sd_4chains <- posterior::as_draws_array(array(S, c(5, 4, 2),
                                                  dimnames = list(NULL, NULL, c("a", "b"))))
    # the scores of Xd in the iteration-major order (chains interleaved)
    S_itmajor <- S[c(rbind(1:10, 11:20)), ]
  }
})

# cases every function with a `chain` argument shares: fn(X, <score>, ...)
bi_chain_cases <- function(fn, pre = list(), score = TRUE) {
  mk <- function(...) {
    a <- c(list(quote(X)), if (score) list(quote(sc_cnt)), pre,
           if (fn == "ksdt" && !"progress" %in% names(list(...)))
             list(progress = FALSE), list(...))
    as.call(c(as.name(fn), a))
  }
  cnt <- function(...) as.call(list(quote(counted), mk(...)))
  cs <- list(
    C("chain_length", cnt(chain = 1:3), bi_ok(Q(before("chain")))),
    C("chain_NA", cnt(chain = quote(c(NA, ch2[-1]))), bi_ok(Q(before("chain")))),
    C("chain_frac", cnt(chain = quote(ch2 + 0.5)), bi_ok(Q(before("chain")))),
    C("chain_list", cnt(chain = quote(as.list(ch2))), bi_ok(Q(before("chain")))),
    C("chain_logical", cnt(chain = quote(ch2 == 1)), bi_ok(Q(before("chain")))),
    C("chain_length_msg", mk(chain = 1:3), bi_arg("chain", "one label per row of x \\(20\\); it has 3")),
    C("chain_type_msg", mk(chain = quote(ch2 == 1)), bi_arg("chain", "class logical")),
    C("progress_NA", cnt(progress = NA), bi_ok(Q(before("progress")))),
    C("progress_chr", cnt(progress = "no"), bi_ok(Q(before("progress")))),
    C("progress_vector", cnt(progress = c(TRUE, FALSE)), bi_ok(Q(before("progress"))))
  )
  if (isTRUE(bi_env$has_posterior)) {
    mkd <- function(s = quote(Sd), x = quote(Xd), ...) {
      a <- c(list(x), if (score) list(s), pre,
             if (fn == "ksdt") list(progress = FALSE), list(...))
      as.call(c(as.name(fn), a))
    }
    cs <- c(cs, list(
      C("chain_with_draws", mkd(chain = quote(ch2)),
        bi_arg("chain", "carries its own chain labels"))
    ))
    if (score) {
      cs <- c(cs, list(
        C("score_draws_names", mkd(quote(Sd_renamed)),
          bi_arg("score", "same variables")),
        C("score_draws_rows", mkd(quote(Sd_short)),
          bi_arg("score", "18 draws; x has 20")),
        C("score_draws_extra_variable", mkd(quote(Sd_extra)),
          bi_arg("score", "same variables")),
        C("score_draws_other_chains", mkd(quote(Sd_4chains)),
          bi_arg("score", "no gradient for chain 1, iteration 6")),
        C("score_draws_x_matrix", mkd(quote(Sd), quote(X)),
          bi_arg("score", "x has none")),
        C("score_iteration_major", mkd(quote(S_itmajor)),
          bi_arg("score", "row order of x")),
        C("value_draws_scores", mkd(),
          bi_ok(as.call(list(quote(same_as), as.call(c(
            as.name(fn), list(quote(Xn), quote(Sn)), pre,
            if (fn == "ksdt") list(progress = FALSE),
            list(chain = quote(ch2))))))))
      ))
    }
  }
  cs
}

bi_add("chain / progress / score draws: ksd", bi_chain_cases("ksd"))
bi_add("chain / progress / score draws: ksd_path", bi_chain_cases("ksd_path")[
  -(8:10)])   # ksd_path has no progress argument
bi_add("chain / progress / score draws: ksd_blocks",
       bi_chain_cases("ksd_blocks", list(blocks = 2)))
bi_add("chain / progress / score draws: stein_thin",
       bi_chain_cases("stein_thin", list(m = 3)))
bi_add("chain / progress / score draws: ksd_weights", bi_chain_cases("ksd_weights"))
bi_add("chain / progress / score draws: ksdt", bi_chain_cases("ksdt"))
bi_add("chain / progress: mmd_thin",
       bi_chain_cases("mmd_thin", list(m = 3), score = FALSE))

bi_add("ksd: by_chain and reference", list(
  C("by_chain_NA", Q(counted(ksd(X, sc_cnt, by_chain = NA))),
    bi_ok(Q(before("by_chain")))),
  C("by_chain_chr", Q(counted(ksd(X, sc_cnt, by_chain = "yes"))),
    bi_ok(Q(before("by_chain")))),
  C("by_chain_no_labels", Q(counted(ksd(X, sc_cnt, by_chain = TRUE))),
    bi_ok(Q(before("by_chain")))),
  C("by_chain_with_blocks", Q(counted(ksd(X, sc_cnt, chain = ch2, by_chain = TRUE,
                                            blocks = 2))),
    bi_ok(Q(before("blocks")))),
  C("by_chain_zero_weight_chain", Q(ksd(X, S, chain = ch2, by_chain = TRUE,
                                        weights = rep(1:0, each = 10))),
    bi_arg("weights", "every chain")),
  C("by_chain_value", Q(ksd(X, S, chain = ch2, by_chain = TRUE,
                            standardize = FALSE)),
    bi_ok(function(v) bi_near(v$ksd, c(ksd(bi_env$X[1:10, ], bi_env$S[1:10, ],
                                           standardize = FALSE),
                                       ksd(bi_env$X[11:20, ], bi_env$S[11:20, ],
                                           standardize = FALSE),
                                       ksd(bi_env$X, bi_env$S,
                                           standardize = FALSE))))),
  C("reference_for_a_sample", Q(counted(ksd(X, sc_cnt, reference = X))),
    bi_ok(Q(before("reference")))),
  C("result_by_chain", Q(ksd(th5, by_chain = TRUE)), bi_arg("by_chain", "result")),
  C("result_chain", Q(ksd(th5, chain = 1:5)), bi_arg("chain", "result")),
  C("result_progress_NA", Q(ksd(th5, progress = NA)), bi_arg("progress")),
  C("result_reference_chr", Q(counted(ksd(th5, sc_cnt, reference = "a"))),
    bi_ok(Q(before("reference")))),
  C("result_reference_cols", Q(counted(ksd(th5, sc_cnt, reference = cbind(X, 0)))),
    bi_ok(Q(before("reference")))),
  C("result_reference_NA", Q(counted(ksd(th5, sc_cnt, reference = Xna))),
    bi_ok(Q(before("reference")))),
  C("result_reference_weights", Q(counted(ksd(th5, sc_cnt, reference = X,
                                              weights = rep(1, 5)))),
    bi_ok(Q(before("reference")))),
  C("result_reference_U", Q(counted(ksd(th5, sc_cnt, reference = X, type = "U"))),
    bi_ok(Q(before("reference")))),
  C("result_reference_no_score", Q(ksd(th5, reference = X)),
    bi_arg("score", "is missing")),
  C("result_reference_score_rows", Q(ksd(th5, S[-1, ], reference = X)),
    bi_arg("score", "dimensions")),
  C("result_reference_value", Q(ksd(th5, S, reference = X)),
    bi_ok(function(v) bi_near(as.double(v), c(ksd(bi_env$th5),
                                                              # stein_thin's defaults
                                              ksd(bi_env$X, bi_env$S,
                                                  standardize = TRUE)),
                              1e-6)))
))

bi_add("ksdt: size", list(
  C("size_0", Q(counted(ksdt(X, sc_cnt, size = 0, progress = FALSE))),
    bi_ok(Q(before("size")))),
  C("size_NA", Q(counted(ksdt(X, sc_cnt, size = NA, progress = FALSE))),
    bi_ok(Q(before("size")))),
  C("size_frac", Q(counted(ksdt(X, sc_cnt, size = 2.5, progress = FALSE))),
    bi_ok(Q(before("size")))),
  C("size_chr", Q(counted(ksdt(X, sc_cnt, size = "5", progress = FALSE))),
    bi_ok(Q(before("size")))),
  C("size_vector", Q(counted(ksdt(X, sc_cnt, size = 1:2, progress = FALSE))),
    bi_ok(Q(before("size")))),
  C("size_and_min_size", Q(counted(ksdt(X, sc_cnt, size = 5, min_size = "sqrt",
                                        progress = FALSE))),
    bi_ok(Q(before("size")))),
  C("size_and_coef", Q(ksdt(X, S, size = 5, min_size_coef = 2, progress = FALSE)),
    bi_arg("size", "min_size_coef")),
  C("size_and_floor", Q(ksdt(X, S, size = 5, min_size_floor = 2, progress = FALSE)),
    bi_arg("size", "min_size_floor")),
  C("size_value", Q(ksdt(X, S, size = 5, progress = FALSE)),
    bi_ok(Q(same_as(ksdt(X, S, min_size = "constant", min_size_coef = 5,
                         min_size_floor = 5, progress = FALSE)))))
))

bi_add("labelled samples: inputs unchanged", list(
  # every failing and succeeding call above left its inputs as they were
  C("X_S_unchanged", Q(identical(X, X_orig) && identical(S, S_orig)),
    bi_ok(isTRUE))
))

# ---- Stan fits (helper-stan.R compiles the models once per run) ----------------

bi_stan_cases <- list(
  C("target_missing", Q(stan_target()), bi_arg("fit", "missing")),
  C("target_number", Q(stan_target(1)), bi_arg("fit", "stanfit")),
  C("target_stanmodel", Q(stan_target(sfit_model)), bi_arg("fit", "compiled Stan model")),
  C("target_draws", Q(stan_target(sfit_draws)), bi_arg("fit", "stanfit")),
  C("target_no_draws_ok", Q(stan_target(sfit_nodraws)),
    bi_ok(function(v) v$dim == 10L)),
  C("target_x_cols", Q(target_score(stan_target(sfit), matrix(0, 2, 3))),
    bi_arg("x", "10 columns")),
  C("unc_missing", Q(unconstrain_draws()), bi_arg("fit", "missing")),
  C("unc_stanmodel", Q(unconstrain_draws(sfit_model)), bi_arg("fit", "compiled Stan model")),
  C("unc_no_draws", Q(unconstrain_draws(sfit_nodraws)), bi_arg("fit", "no draws")),
  C("unc_draws_chr", Q(unconstrain_draws(sfit, "a")), bi_arg("draws")),
  C("unc_draws_vector", Q(unconstrain_draws(sfit, 1:10)), bi_arg("draws")),
  C("unc_draws_unnamed_matrix", Q(unconstrain_draws(sfit, matrix(1, 2, 10))),
    bi_arg("draws", "lacks the column")),
  C("unc_draws_missing_column", Q(unconstrain_draws(sfit, sfit_df[, -1])),
    bi_arg("draws", "lacks the column.*mu")),
  C("unc_draws_0_rows", Q(unconstrain_draws(sfit, sfit_df[0, ])),
    bi_arg("draws", "at least one row")),
  C("unc_draws_NA", Q(unconstrain_draws(sfit, within(sfit_df, mu[2] <- NA))),
    bi_arg("draws", "non-finite.*row 2")),
  C("unc_draws_out_of_support", Q(unconstrain_draws(sfit, within(sfit_df, tau[2] <- -1))),
    bi_arg("draws", "row 2")),
  C("unc_draws_chr_column", Q(unconstrain_draws(sfit, within(sfit_df, mu <- "a"))),
    bi_arg("draws", "numeric")),
  C("unc_list_unnamed", Q(unconstrain_draws(sfit, list(1, 2))), bi_arg("draws", "name")),
  C("unc_list_lacks", Q(unconstrain_draws(sfit, list(mu = 1))), bi_arg("draws", "tau")),
  C("unc_list_length", Q(unconstrain_draws(sfit, list(mu = 1, tau = 1, theta = 1:3))),
    bi_arg("draws", "theta")),
  C("unc_list_chr", Q(unconstrain_draws(sfit, list(mu = "a", tau = 1, theta = 1:8))),
    bi_arg("draws", "mu")),
  C("unc_simplex_off", Q(unconstrain_draws(sfit_shapes, list(w = c(0.5, 0.6, 0.1),
                                                            s = c(1, 1), B = matrix(0, 2, 3),
                                                            a = 0))),
    bi_arg("draws")),
  C("unc_value_list", Q(unconstrain_draws(sfit, list(mu = 1, tau = 2, theta = 1:8))),
    bi_ok(function(v) bi_near(v, c(1, log(2), 1:8)))),
  C("con_missing_upars", Q(constrain_draws(sfit)), bi_arg("upars", "missing")),
  C("con_number", Q(constrain_draws(1, sfit_u)), bi_arg("fit")),
  C("con_stanmodel", Q(constrain_draws(sfit_model, sfit_u)), bi_arg("fit", "compiled Stan model")),
  C("con_chr", Q(constrain_draws(sfit, "a")), bi_arg("upars", "numeric")),
  C("con_list", Q(constrain_draws(sfit, as.list(sfit_u[1, ]))), bi_arg("upars")),
  C("con_logical", Q(constrain_draws(sfit, matrix(TRUE, 2, 10))), bi_arg("upars")),
  C("con_df_chr", Q(constrain_draws(sfit, data.frame(a = rep("x", 10)))),
    bi_arg("upars", "numeric")),
  C("con_cols", Q(constrain_draws(sfit, sfit_u[, -1])), bi_arg("upars", "10 columns.*9")),
  C("con_vector_length", Q(constrain_draws(sfit, 1:3)), bi_arg("upars", "10 columns")),
  C("con_names", Q(constrain_draws(sfit, `colnames<-`(sfit_u, c("zz", colnames(sfit_u)[-1])))),
    bi_arg("upars", "column names")),
  C("con_dup_names", Q(constrain_draws(sfit, `colnames<-`(sfit_u, rep(colnames(sfit_u)[1], 10)))),
    bi_arg("upars", "column names")),
  C("con_0_rows", Q(constrain_draws(sfit, sfit_u[0, ])), bi_arg("upars", "row")),
  C("con_NA", Q(constrain_draws(sfit, `[<-`(sfit_u, 1, 1, NA))), bi_arg("upars", "NA")),
  C("con_Inf", Q(constrain_draws(sfit, `[<-`(sfit_u, 1, 1, Inf))), bi_arg("upars", "Inf")),
  C("con_value_roundtrip", Q(unconstrain_draws(sfit, constrain_draws(sfit, sfit_u[1:3, ]))),
    bi_ok(function(v) bi_near(v, bi_env$sfit_u[1:3, ]))),
  C("ksd_fit_with_score", Q(ksd(sfit, -sfit_u)), bi_arg("score", "left out")),
  C("ksd_fit_with_chain", Q(ksd(sfit, chain = rep(1, nrow(sfit_u)))),
    bi_arg("chain", "Stan fit")),
  C("ksd_fit_reference", Q(ksd(sfit, reference = sfit_u)), bi_arg("reference")),
  C("ksd_fit_by_chain_NA", Q(ksd(sfit, by_chain = NA)), bi_arg("by_chain")),
  C("ksd_fit_progress_NA", Q(ksd(sfit, progress = NA)), bi_arg("progress")),
  C("ksd_fit_no_draws", Q(ksd(sfit_nodraws, progress = FALSE)), bi_arg("x", "no draws")),
  C("ksd_fit_weights", Q(ksd(sfit, weights = 1:3, progress = FALSE)), bi_arg("weights")),
  C("ksd_path_fit_with_score", Q(ksd_path(sfit, -sfit_u)), bi_arg("score", "left out")),
  C("thin_fit_m_missing", Q(stein_thin(sfit, progress = FALSE)), bi_arg("m", "missing")),
  C("thin_fit_m_0", Q(stein_thin(sfit, m = 0, progress = FALSE)), bi_arg("m")),
  C("thin_fit_chain", Q(stein_thin(sfit, m = 3, chain = 1, progress = FALSE)),
    bi_arg("chain")),
  C("mmd_fit_chain", Q(mmd_thin(sfit, 3, chain = 1, progress = FALSE)), bi_arg("chain")),
  C("weights_fit_nonneg_NA", Q(ksd_weights(sfit, nonneg = NA, progress = FALSE)),
    bi_arg("nonneg")),
  C("ksdt_fit_size_0", Q(ksdt(sfit, size = 0, progress = FALSE)), bi_arg("size")),
  C("ksdt_fit_with_score", Q(ksdt(sfit, -sfit_u, progress = FALSE)),
    bi_arg("score", "left out")),
  C("fit_unchanged", Q(identical(sfit@sim, sfit_sim) &&
                         identical(sort(ls(sfit@.MISC)), sfit_misc) &&
                         identical(unconstrain_draws(sfit), sfit_u)),
    bi_ok(isTRUE))
)

test_that("Stan fits: stan_target, unconstrain_draws, constrain_draws, fits as x", {
  skip_if_not_installed("rstan")
  skip_if_not_installed("posterior")
  sf <- stan_test_fit("schools")
  sh <- stan_test_fit("shapes")
  nd <- stan_test_nodraws("schools")
  bi_env$sfit <- sf
  bi_env$sfit_shapes <- sh
  bi_env$sfit_nodraws <- nd
  bi_env$sfit_model <- rstan::get_stanmodel(sf)
  bi_env$sfit_draws <- posterior::as_draws_df(sf)
  bi_env$sfit_u <- unconstrain_draws(sf)
  bi_env$sfit_df <- as.data.frame(posterior::as_draws_df(sf))
  bi_env$sfit_sim <- sf@sim
  bi_env$sfit_misc <- sort(ls(sf@.MISC))
  bi_total <<- bi_total + bi_run_cases("Stan fits", bi_resolve_cases(bi_stan_cases, bi_env),
                                       bi_env)
})

# ---- reliability round 3 (issue 36): cases 1-3, 5, 6, 9-11 ----

local(envir = bi_env, {
  set.seed(1)
  X50 <- matrix(rnorm(100), 50)         # 50 x 2 N(0, I) draws
  S50 <- -X50
  # a score that fails at its 5th call (the counter reset by the case)
  nth <- new.env()
  nth$n <- 0
  sc_5th <- function(x) {
    nth$n <- nth$n + 1
    if (nth$n == 5) c(NA, 0) else -x
  }
  tg_5th <- kb_target(function(x) -sum(x^2) / 2, sc_5th, dim = 2)
  tg_dim3 <- gaussian_target(c(0, 0))
  tg_dim3$dim <- 3L                     # edited by hand
  # fssd_test() with n >> d: the values before issue 36 (optimised
  # locations; unchanged by the fallback for n_train <= d)
  fssd_n400 <- c(p = 0.8253915361546151352, stat = -0.0043541650383296148,
                 h = 0.9971361647126290029)
})
# TRUE when every check is, else the first check's complaint
bi_and_all <- function(...) {
  bad <- Filter(function(z) !isTRUE(z), list(...))
  if (length(bad)) bad[[1L]] else TRUE
}

bi_add("reliability round 3 (issue 36)", list(
  # 1: at scores 1e100 against points 1e-100 (no standardisation) the
  # optimal weights' w'Kw is below the rounding error of its entries
  C("r3_weights_scale_refused",
    Q(ksd_weights(X50 * 1e-100, -X50 * 1e100, standardize = FALSE)),
    bi_num("rounding error.*points \\(scale ~[0-9.]+e-10[01]\\).*scores \\(scale ~[0-9.]+e\\+(99|100)\\)")),
  C("r3_weights_scale_standardised",
    Q(list(w = ksd_weights(X50 * 1e-100, -X50 * 1e100),
           k = ksd(X50 * 1e-100, -X50 * 1e100,
                   weights = ksd_weights(X50 * 1e-100, -X50 * 1e100)))),
    bi_ok(function(v) bi_and_all(bi_near(attr(v$w, "ksd"), v$k),
                              bi_near(v$k, attr(ksd_weights(bi_env$X50, bi_env$S50),
                                                "ksd"), 1e-6)))),
  C("r3_ksd_scale_uniform_ok",
    Q(ksd(X50 * 1e-100, -X50 * 1e100, standardize = FALSE)),
    bi_ok(function(v) bi_near(v * 1e-100, sqrt(sum(colMeans(bi_env$S50)^2)), 1e-6))),
  # 2: explicit kernels that differ are not merged under one
  C("r3_merge_explicit_kernels",
    Q(merge(ksdt(X50[1:25, ], S50[1:25, ], progress = FALSE),
            ksdt(X50[26:50, ], S50[26:50, ], progress = FALSE,
                 kernel = gaussian_kernel(bandwidth = 1)))),
    bi_arg("y", "another kernel.*IMQ.*Gaussian.*same kernel")),
  C("r3_merge_heuristic_kernels",
    Q(merge(ksdt(X50[1:25, ], S50[1:25, ], progress = FALSE,
                 kernel = imq_kernel(precon = "med")),
            ksdt(X50[26:50, ], S50[26:50, ], progress = FALSE,
                 kernel = imq_kernel(precon = "med")))),
    bi_ok(function(v) bi_near(v$ksd[length(v$ksd)], ksd(v)))),
  # 3: prior weights whose sum overflows are normalised by their maximum
  C("r3_kbr_prior_weights_1e308",
    Q(kbr(X50[, 1], X50[, 2], prior_weights = rep(1e308, 50), eps = 0.1,
          delta = 0.1)),
    bi_ok(function(v) {
      b <- kbr(bi_env$X50[, 1], bi_env$X50[, 2], prior_weights = rep(1, 50),
               eps = 0.1, delta = 0.1)
      bi_and_all(bi_near(v$prior_weights, rep(1 / 50, 50), 1e-15),
              bi_near(posterior_mean(v, c(-1, 0.5, 2)),
                      posterior_mean(b, c(-1, 0.5, 2)), 1e-12))
    })),
  # 6: data of scale 1e-100 with scores 1e100: the locations' fit no
  # longer adds an absolute jitter; the test is that of the unscaled data
  C("r3_fssd_scale_1e-100",
    Q({
      set.seed(3)
      fssd_test(X50 * 1e-100, -X50 * 1e100, locations = "rand")
    }),
    bi_ok(function(v) {
      set.seed(3)
      b <- fssd_test(bi_env$X50, bi_env$S50, locations = "rand")
      bi_and_all(bi_near(v$p.value, b$p.value),
              bi_near(v$bandwidth * 1e100, b$bandwidth, 1e-12),
              bi_near(unname(v$statistic) * 1e-200, unname(b$statistic), 0.01))
    })),
  C("r3_fssd_scale_1e-100_opt",
    Q({
      set.seed(3)
      fssd_test(X50 * 1e-100, -X50 * 1e100)
    }),
    bi_ok(function(v) v$p.value >= 0 && v$p.value <= 1 &&
            is.finite(v$statistic))),
  C("r3_fssd_bandwidth_1e-300",
    Q(counted(fssd_test(X50, sc_cnt, bandwidth = 1e-300))),
    bi_ok(Q(before("bandwidth")))),
  C("r3_fssd_bandwidth_1e-300_message", Q(fssd_test(X50, S50, bandwidth = 1e-300)),
    bi_arg("bandwidth", "square underflows")),
  C("r3_fssd_bandwidth_1e200", Q(fssd_test(X50, S50, bandwidth = 1e200)),
    bi_arg("bandwidth", "square overflows")),
  # 9: a target whose dim was edited by hand
  C("r3_target_dim_edited", Q(target_score(tg_dim3, cbind(X50, 0))),
    bi_arg("target", "has been edited: its field 'dim' \\(3\\) and its closures \\(made for dimension 2\\) do not fit together")),
  C("r3_target_dim_edited_sample", Q(sample_target(tg_dim3, 5)),
    bi_arg("target", "has been edited")),
  C("r3_target_dim_edited_ksd", Q(ksd(X50, tg_dim3)),
    bi_arg("score", "has been edited: its field 'dim' \\(3\\)")),
  C("r3_target_other_edit_ok",
    Q(target_score(`$<-`(gaussian_target(c(0, 0)), "name", "renamed"), X50)),
    bi_ok(function(v) bi_near(v, -bi_env$X50))),
  # 10: stein_points() names its own rows, not an 'x' it does not have
  C("r3_stein_points_row_mc",
    Q({
      nth$n <- 0
      stein_points(tg_5th, 3, progress = FALSE)
    }),
    bi_err("kb_error_callback",
           "^'score' returned a non-finite value.* at row 5 of the candidate points of step 1$")),
  C("r3_stein_points_row_grid",
    Q({
      nth$n <- 0
      stein_points(tg_5th, 3, optimizer = "grid", progress = FALSE)
    }),
    bi_err("kb_error_callback", "at row 5 of the grid of candidate points$")),
  C("r3_target_score_row_x",
    Q({
      nth$n <- 0
      target_score(tg_5th, X50)
    }),
    bi_err("kb_error_callback", "at row 5 of x$")),
  # 11: fewer training rows than dimensions: random locations, with a
  # classed warning; the eigenvalues from the n x n Gram matrix
  C("r3_fssd_d200_n40",
    Q({
      set.seed(2)
      x <- matrix(rnorm(40 * 200), 40)
      fssd_test(x, -x)
    }),
    bi_warn("kb_warning_fssd",
            "training split has 8 rows for 200 dimensions.*random locations",
            function(v) is.numeric(v$p.value) && v$p.value >= 0 &&
              v$p.value <= 1 && v$choice == "rand" &&
              length(v$eigenvalues) == 2000L)),
  C("r3_fssd_n400_unchanged",
    Q({
      set.seed(5)
      y <- matrix(rnorm(2000), 400)
      set.seed(6)
      fssd_test(y, -y)
    }),
    bi_ok(function(v) bi_near(c(v$p.value, v$statistic, v$bandwidth),
                              bi_env$fssd_n400, 1e-14))),
  C("r3_fssd_gram_eigenvalues",
    Q({
      set.seed(7)
      z <- matrix(rnorm(90), 30)
      fssd_test(z, -z, locations = matrix(rnorm(30), 10), bandwidth = 1)
    }),
    bi_ok(function(v) {
      set.seed(7)
      z <- matrix(rnorm(90), 30)
      V <- matrix(rnorm(30), 10)
      tau <- kernbayes:::fssd_features(z, -z, V, 1)
      bi_near(v$eigenvalues, pmax(sort(eigen(stats::cov(tau))$values,
                                       decreasing = TRUE), 0), 1e-12)
    }))
))

# 5: constrain_draws() with points of the wrong width for the model (the
# Stan fits of helper-stan.R, compiled once per run)
bi_r3_stan_cases <- list(
  C("r3_con_wrong_width", Q(constrain_draws(r3_fit, r3_u[, 1:9])),
    bi_arg("upars", "must have 10 columns, one per unconstrained parameter.*it has 9")),
  C("r3_con_other_model", Q(constrain_draws(r3_fit, r3_u_shapes)),
    bi_arg("upars", "must have 10 columns.*it has 11")),
  C("r3_con_constrained_draws", Q(constrain_draws(r3_fit, posterior::as_draws_df(r3_fit))),
    bi_arg("upars", "must have 10 columns.*it has 11 \\(.*lp__ not among")),
  C("r3_con_draws_df_value",
    Q(constrain_draws(r3_fit, posterior::as_draws_df(as.data.frame(r3_u[1:3, ])))),
    bi_ok(function(v) bi_near(unconstrain_draws(bi_env$r3_fit, v),
                              bi_env$r3_u[1:3, ]))),
  C("r3_con_draws_array_value",
    Q(constrain_draws(r3_fit, posterior::as_draws_array(posterior::as_draws_matrix(r3_u[1:3, ])))),
    bi_ok(function(v) bi_near(unconstrain_draws(bi_env$r3_fit, v),
                              bi_env$r3_u[1:3, ])))
)

test_that("reliability round 3 (issue 36): constrain_draws widths", {
  skip_if_not_installed("rstan")
  skip_if_not_installed("posterior")
  bi_env$r3_fit <- stan_test_fit("schools")
  bi_env$r3_u <- unconstrain_draws(bi_env$r3_fit)
  bi_env$r3_u_shapes <- unconstrain_draws(stan_test_fit("shapes"))
  bi_total <<- bi_total + bi_run_cases("reliability round 3 (issue 36): Stan",
                                       bi_resolve_cases(bi_r3_stan_cases, bi_env),
                                       bi_env)
})

test_that("the campaign has its cases", {
  # a campaign that lost its cases would pass silently
  expect_gt(bi_total, 400L)
})

# ---- reliability round 3 (issue 36): cases 4, 7, 8 ----
# Result objects edited by hand (fields that no longer fit together, a
# field removed, a class changed) are refused by every print, summary, plot
# and conversion method with a kb_error_arg naming the object and the
# field, before anything is drawn or converted (cases 4 and 8); a Stan
# target saved and reloaded says so before rstan is called (case 7).

local(envir = bi_env, {
  set.seed(3)
  r3_lab <- rep(1:2, each = 10)
  r3_quiet <- function(expr) suppressWarnings(suppressMessages(expr))
  r3_th <- r3_quiet(stein_thin(X, S, 5, chain = r3_lab, progress = FALSE))
  r3_kt <- r3_quiet(kernel_thin(X, S, chain = r3_lab, progress = FALSE))
  r3_skt <- r3_quiet(stein_kernel_thin(X, S, chain = r3_lab, progress = FALSE))
  r3_mt <- r3_quiet(mmd_thin(X, 5, progress = FALSE))
  r3_sp <- r3_quiet(stein_points(tg2, 4, progress = FALSE))
  r3_kd <- r3_quiet(ksdt(X, S, chain = r3_lab, progress = FALSE))
  r3_ch <- mala(tg2, c(0, 0), 30)
  r3_pt <- svgd(X, tg2, n_iter = 3)
  r3_kc <- r3_quiet(ksdt_chains(tg2, matrix(0, 2, 2), 30, progress = FALSE))
  r3_tt <- ksd_test(X, S, n_boot = 20, progress = FALSE)
  r3_xl <- matrix(rnorm(400), 200)
  r3_ti <- ksd_test(r3_xl, -r3_xl, test = "incomplete", progress = FALSE)
  r3_tb <- ksd_test(X, S, n_boot = 20, chain = r3_lab, by_chain = TRUE,
                    progress = FALSE)
  r3_ft <- fssd_test(X, S, n_locations = 2, locations = "rand")
  # obj with one field replaced (NULL removes it)
  r3_set <- function(obj, field, value) {
    obj[field] <- list(value)
    if (is.null(value)) obj[[field]] <- NULL
    obj
  }
  # a field inside a field (path: list("chains", 1, "kernel"))
  r3_set_in <- function(obj, path, value) {
    if (length(path) == 1L) return(r3_set(obj, path[[1L]], value))
    obj[[path[[1L]]]] <- r3_set_in(obj[[path[[1L]]]], path[-1L], value)
    obj
  }
  r3_recl <- function(obj, cls) { class(obj) <- cls; obj }
  r3_na_stat <- function(r) { r$statistic[] <- NA; r }
  # a method's output, printed to nowhere
  r3_out <- function(expr) utils::capture.output(expr)
})

# The edited field's message.
r3_edit <- function(field, arg = "x") {
  bi_arg(arg, paste0("has been edited: its field '", bi_rx(field), "'"))
}

# The edits of case 4 on a selection `obj` (a quoted name), each through
# every method.
r3_selection_cases <- function(obj) {
  o <- as.name(obj)
  edits <- list(
    chain_short = list(bquote(r3_set(.(o), "chain", .(o)[["chain"]][-1])), "chain"),
    index_dropped = list(bquote(r3_set(.(o), "index", .(o)$index[-1])), "index"),
    points_one_column = list(bquote(r3_set(.(o), "points",
                                           .(o)$points[, 1, drop = FALSE])), "points"),
    index_past_n = list(bquote(r3_set(.(o), "index", .(o)$index + .(o)$n)), "index"))
  methods <- list(
    as_draws_df = function(e) bquote(posterior::as_draws_df(.(e))),
    as_draws_matrix = function(e) bquote(posterior::as_draws_matrix(.(e))),
    summary = function(e) bquote(summary(.(e))),
    print = function(e) bquote(r3_out(print(.(e)))),
    plot = function(e) bquote(plot(.(e))),
    as.data.frame = function(e) bquote(as.data.frame(.(e))),
    ksd = function(e) bquote(ksd(.(e))))
  out <- list()
  for (en in names(edits)) for (mn in names(methods)) {
    ed <- edits[[en]]
    arg <- if (mn == "summary") "object" else "x"
    out[[length(out) + 1L]] <- C(paste(obj, en, mn, sep = "_"),
                                 methods[[mn]](ed[[1L]]), r3_edit(ed[[2L]], arg))
  }
  out
}

bi_add("round 3, case 4: edited selections (stein_thin, kernel_thin, stein_kernel_thin)",
       c(r3_selection_cases("r3_th"), r3_selection_cases("r3_kt"),
         r3_selection_cases("r3_skt")))

bi_add("round 3, case 4: edited results of the other classes", list(
  C("mmd_thin_mmd_short", Q(summary(r3_set(r3_mt, "mmd", r3_mt$mmd[-1]))),
    r3_edit("mmd", "object")),
  C("mmd_thin_no_path", Q(r3_out(print(r3_set(r3_mt, "mmd", NULL)))),
    r3_edit("ksd")),
  C("stein_points_n_eval", Q(r3_out(print(r3_set(r3_sp, "n_eval", "a")))),
    r3_edit("n_eval")),
  C("stein_points_points", Q(summary(r3_set(r3_sp, "points", r3_sp$points[-1, ]))),
    r3_edit("points", "object")),
  C("ksdt_index_short", Q(posterior::as_draws_df(r3_set(r3_kd, "index", r3_kd$index[-1]))),
    r3_edit("index")),
  C("ksdt_points_one_column", Q(summary(r3_set(r3_kd, "points",
                                                r3_kd$points[, 1, drop = FALSE]))),
    r3_edit("points", "object")),
  C("ksdt_chain_short", Q(as.data.frame(r3_set(r3_kd, "chain", r3_kd[["chain"]][-1]))),
    r3_edit("chain")),
  C("ksdt_size_short", Q(plot(r3_set(r3_kd, "size", r3_kd$size[-1]))), r3_edit("size")),
  C("chain_score_rows", Q(posterior::as_draws_matrix(r3_set(r3_ch, "score",
                                                              r3_ch$score[-1, ]))),
    r3_edit("score")),
  C("chain_x_one_column", Q(summary(r3_set(r3_ch, "x", r3_ch$x[, 1, drop = FALSE]))),
    r3_edit("x", "object")),
  C("chain_log_density", Q(plot(r3_set(r3_ch, "log_density", 1:3))),
    r3_edit("log_density")),
  C("chain_as_mcmc", Q(coda::as.mcmc(r3_set(r3_ch, "sampler", NULL))),
    r3_edit("sampler")),
  C("particles_x_vector", Q(posterior::as_draws_df(r3_set(r3_pt, "x", r3_pt$x[, 1]))),
    r3_edit("x")),
  C("particles_weights", Q(as.data.frame(r3_set(r3_pt, "weights", 1:3))),
    r3_edit("weights")),
  C("particles_method", Q(r3_out(print(r3_set(r3_pt, "method", NULL)))),
    r3_edit("method")),
  C("chains_merged_edited", Q(posterior::as_draws_df(r3_set_in(r3_kc, list("merged", "index"),
                                        r3_kc$merged$index[-1]))), r3_edit("merged")),
  C("chains_chain_edited", Q(summary(r3_set_in(r3_kc, list("chains", 2, "points"),
                        r3_kc$chains[[2]]$points[, 1, drop = FALSE]))),
    r3_edit("chains", "object")),
  C("valid_selection_converts", Q(nrow(as.data.frame(r3_kt)) == r3_kt$m),
    bi_ok(isTRUE)),
  C("valid_chain_converts", Q(nrow(as.data.frame(r3_ch)) == 30L), bi_ok(isTRUE))
))

bi_add("round 3, case 8: tests and selections edited before their methods", list(
  C("ksd_test_plot_empty_boot", Q(plot(r3_set(r3_tt, "boot", numeric(0)))),
    r3_edit("boot")),
  C("ksd_test_plot_NA_statistic", Q(plot(r3_na_stat(r3_tt))), r3_edit("statistic")),
  C("ksd_test_print_no_kernel", Q(r3_out(print(r3_set(r3_tt, "kernel", NULL)))),
    r3_edit("kernel")),
  C("ksd_test_summary_no_p", Q(summary(r3_set(r3_tt, "p.value", NULL))),
    r3_edit("p.value", "object")),
  C("ksd_test_df_NA_statistic", Q(as.data.frame(r3_na_stat(r3_tt))),
    r3_edit("statistic")),
  C("ksd_test_incomplete_plot_NA", Q(plot(r3_na_stat(r3_ti))), r3_edit("statistic")),
  C("by_chain_print_pooled", Q(r3_out(print(r3_set_in(r3_tb, list("pooled", "boot"), numeric(0))))),
    r3_edit("pooled")),
  C("by_chain_df_chain", Q(as.data.frame(r3_set_in(r3_tb, list("chains", 1, "kernel"), NULL))),
    r3_edit("chains")),
  C("by_chain_summary_no_kernel", Q(summary(r3_set(r3_tb, "kernel", NULL))),
    r3_edit("kernel", "object")),
  C("by_chain_plot_NA", Q(plot(r3_set_in(r3_tb, "pooled", r3_na_stat(r3_tb$pooled)))),
    r3_edit("pooled")),
  C("fssd_plot_empty_null", Q(plot(r3_set(r3_ft, "null", numeric(0)))),
    r3_edit("null")),
  C("fssd_plot_NA_statistic", Q(plot(r3_na_stat(r3_ft))), r3_edit("statistic")),
  C("fssd_print_no_bandwidth", Q(r3_out(print(r3_set(r3_ft, "bandwidth", NULL)))),
    r3_edit("bandwidth")),
  C("fssd_summary_locations", Q(summary(r3_set(r3_ft, "locations", r3_ft$locations[-1, ,
                                                                     drop = FALSE]))),
    r3_edit("locations", "object")),
  C("fssd_df_NA_statistic", Q(as.data.frame(r3_na_stat(r3_ft))), r3_edit("statistic")),
  C("thin_plot_no_sample", Q(plot(r3_set(r3_th, "sample", NULL))), r3_edit("sample")),
  C("thin_plot_NA_path", Q(plot(r3_set(r3_th, "ksd", c(NA, r3_th$ksd[-1])))),
    r3_edit("ksd")),
  C("thin_as_ksdt_print", Q(r3_out(print(r3_recl(r3_th, "kb_ksdt")))), r3_edit("size")),
  C("thin_as_ksdt_summary", Q(summary(r3_recl(r3_th, "kb_ksdt"))),
    r3_edit("size", "object")),
  C("thin_as_test_print", Q(r3_out(print(r3_recl(r3_th, c("kb_ksd_test", "htest"))))),
    r3_edit("statistic")),
  C("test_as_thin_print", Q(r3_out(print(r3_recl(r3_tt, "kb_thin")))),
    r3_edit("d")),
  C("thin_unclassed_list", Q(r3_out(print(r3_recl(1:3, "kb_thin")))),
    bi_arg("x", "has been edited: it has class kb_thin but is of type integer")),
  C("valid_test_table", Q(as.data.frame(r3_tt)$n == 20L), bi_ok(isTRUE)),
  C("valid_incomplete_table", Q(summary(r3_ti)$n == 200L), bi_ok(isTRUE)),
  C("valid_fssd_table", Q(as.data.frame(r3_ft)$J == 2), bi_ok(isTRUE))
))

local(envir = bi_env, {
  set.seed(4)
  r3_path <- ksd_path(X, S)
  r3_cmp <- ksd(r3_th, reference = X[1:5, ], score = tg2)
  r3_w <- ksd_weights(r3_th)
  r3_kf <- kalman_filter(cumsum(rnorm(15)), A = 1, C = 1, Q = 1, R = 1)
  r3_xs <- rnorm(40)
  r3_cv <- kbr_cv(r3_xs, r3_xs + rnorm(40, sd = 0.3), folds = 3, progress = FALSE)
  r3_bc <- ksd(X, S, chain = r3_lab, by_chain = TRUE)
  r3_fit <- kbr(r3_xs, r3_xs + rnorm(40), eps = 0.01, delta = 0.01)
  r3_attr <- function(obj, which, value) { attr(obj, which) <- value; obj }
})

bi_add("round 3, case 4: edited results without points", list(
  C("path_ksd_short", Q(r3_out(print(r3_set(r3_path, "ksd", r3_path$ksd[-1])))),
    r3_edit("ksd")),
  C("path_summary_no_kernel", Q(summary(r3_set(r3_path, "kernel", NULL))),
    r3_edit("kernel", "object")),
  C("path_df_n", Q(as.data.frame(r3_set(r3_path, "n", 1e6))), r3_edit("ksd")),
  C("compare_no_ksd", Q(r3_out(print(r3_set(r3_cmp, "ksd", NULL)))), r3_edit("ksd")),
  C("compare_df_m", Q(as.data.frame(r3_set(r3_cmp, "m", -1))), r3_edit("m")),
  C("weights_chain_short", Q(as.data.frame(r3_attr(r3_w, "chain", attr(r3_w, "chain")[-1]))),
    bi_arg("x", "has been edited: its attribute 'chain'")),
  C("weights_values_chr", Q(r3_out(print(r3_recl(as.character(r3_w), "kb_weights")))),
    bi_arg("x", "has been edited: its values")),
  C("filter_sd_rows", Q(as.data.frame(r3_set(r3_kf, "sd", r3_kf$sd[-1, , drop = FALSE]))),
    r3_edit("sd")),
  C("filter_plot_method", Q(plot(r3_set(r3_kf, "method", NULL))), r3_edit("method")),
  C("cv_folds_chr", Q(r3_out(print(r3_set(r3_cv, "folds", "a")))), r3_edit("folds")),
  C("cv_summary_table", Q(summary(r3_set(r3_cv, "table", 1:3))),
    r3_edit("table", "object")),
  C("by_chain_ksd_no_kernel", Q(r3_out(print(r3_attr(r3_bc, "kernel", NULL)))),
    bi_arg("x", "has been edited: its attribute 'kernel'")),
  C("kbr_print_mu", Q(r3_out(print(r3_set(r3_fit, "mu", r3_fit$mu[1:3])))),
    bi_state("'x' is not a kbr\\(\\) fit.*'mu'")),
  C("valid_weights_table", Q(nrow(as.data.frame(r3_w)) == r3_th$m), bi_ok(isTRUE)),
  C("valid_path_table", Q(nrow(as.data.frame(r3_path)) == 20L), bi_ok(isTRUE))
))

test_that("round 3, case 7: a Stan target saved and reloaded says so", {
  skip_on_cran()
  skip_if(nzchar(Sys.getenv("KB_VALGRIND")), "subprocess cases under valgrind")
  skip_if_not_installed("rstan")
  sf <- stan_test_fit("schools")
  tgs <- stan_target(sf)
  f <- tempfile(fileext = ".rds")
  on.exit(unlink(f), add = TRUE)
  saveRDS(tgs, f)
  bi_env$r3_tgs <- tgs
  load <- sprintf("tg <- readRDS(%s)\n", deparse(f))
  sub <- function(id, code, ex) bi_sub(id, paste0(load, code), ex)
  why <- "saved and\\s+reloaded"
  cases <- list(
    C("same_process_log_density", Q(target_log_density(r3_tgs, rep(0, 10))),
      bi_ok(function(v) length(v) == 1L && is.finite(v))),
    sub("reloaded_log_density_closure", "tg$log_density(rep(0, 10))", bi_state(why)),
    sub("reloaded_score_closure", "tg$score(rep(0, 10))", bi_state(why)),
    sub("reloaded_target_log_density", "target_log_density(tg, rep(0, 10))",
        bi_arg("target", why)),
    sub("reloaded_target_score", "target_score(tg, rep(0, 10))",
        bi_arg("target", why)),
    sub("reloaded_mala", "mala(tg, rep(0, 10), 5)", bi_arg("target", why)),
    sub("reloaded_ksd", "ksd(matrix(rnorm(50), 5, 10), tg)",
        bi_any(bi_arg("score", why), bi_arg("target", why), bi_state(why))))
  bi_run_cases("round 3, case 7: reloaded Stan target", cases, bi_env)
})

test_that("case 12: ksd_test()'s bootstrap stops at Ctrl-C (issue 36)", {
  # n = 3000, 4000 replicates: SIGINT 0.5 s into the call (while the
  # bootstrap weights are drawn or the tiles summed) stops it; the child
  # reports the interrupt and exits by itself.  Measured when the case was
  # added (1, 2 and 3 s into the call, d = 2 and 10, 1 and 2 threads,
  # Rademacher, Markov and multinomial weights, load 3-4 on 2 cores): it
  # stopped 0.05-0.26 s after the interrupt (the campaign's 1.0-3.5 s were
  # from before the weights were drawn 64 replicates at a time).
  skip_on_cran()
  skip_under_valgrind()
  skip_on_os("windows")
  r <- run_interrupted_child(c(
    "set.seed(1); x <- matrix(rnorm(3000 * 2), 3000)",
    "report('started')",
    "res <- ksd_test(x, -x, n_boot = 4000, progress = FALSE)"))
  expect_true(any(grepl("^INTERRUPTED", r$lines)),
              label = paste(r$lines, collapse = "; "))
  expect_false(any(grepl("^RETURNED", r$lines)))
  expect_false(is.na(r$seconds))      # liveness only: it exited by itself
})
