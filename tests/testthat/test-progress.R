# One progress reporter: shown when progress = TRUE, absent when FALSE,
# results identical either way; futures relay it through progressr.

progress_lines <- function(expr) {
  msgs <- character()
  value <- withCallingHandlers(expr, message = function(m) {
    msgs <<- c(msgs, conditionMessage(m))
    invokeRestart("muffleMessage")
  })
  list(value = value, text = paste(msgs, collapse = ""))
}

test_that("the reporter draws a counted line and nothing when off", {
  r <- progress_lines({
    p <- kernbayes:::progress_reporter(10, "work", TRUE)
    for (i in 1:10) p$tick(i)
    p$done()
  })
  expect_match(r$text, "work: 1 of 10 \\(( )*10%\\)")
  expect_match(r$text, "work: 10 of 10 \\(100%\\)")
  expect_match(r$text, "\n$")
  off <- progress_lines({
    p <- kernbayes:::progress_reporter(10, "work", FALSE)
    for (i in 1:10) p$tick(i)
    p$done()
    p$callback()
  })
  expect_identical(off$text, "")
  expect_null(off$value)
  expect_error(kernbayes:::progress_reporter(10, "work", NA), class = "kb_error_arg",
               regexp = "'progress'")
})

test_that("progress shows in every long-running function and never changes results", {
  skip_on_cran()
  set.seed(1)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 400)
  y <- x[, 1] + rnorm(400, sd = 0.5)
  runs <- list(
    mala = function(p) { set.seed(2); mala(tg, c(1, 1), 300, progress = p) },
    rwm = function(p) { set.seed(2); rwm(tg, c(1, 1), 300, step_size = 1, progress = p) },
    ksd = function(p) ksd(x, tg, progress = p),
    ksd_U_weighted = function(p) ksd(x, tg, type = "U", weights = seq_len(400), progress = p),
    ksd_blocks = function(p) ksd_blocks(x, tg, blocks = 3, progress = p),
    stein_thin = function(p) stein_thin(x, tg, 20, progress = p),
    stein_thin_gf = function(p) stein_thin_gf(x, tg, tg, tg, 10, progress = p),
    mmd_thin = function(p) mmd_thin(x, 20, progress = p),
    ksd_weights = function(p) ksd_weights(x[1:60, ], tg, progress = p),
    kbr = function(p) kbr(x[, 1], y, eps = 0.01, delta = 1e-3, progress = p),
    kbr_lowrank = function(p) kbr(x[, 1], y, eps = 0.01, delta = 1e-3, rank = 20,
                                  progress = p),
    kbr_cv = function(p) kbr_cv(x[1:100, 1], y[1:100], folds = 3, progress = p),
    kbr_filter = function(p) kbr_filter(x[1:101, 1], y[1:101], y[200:220], progress = p),
    kbr_filter_lowrank = function(p) kbr_filter(x[1:101, 1], y[1:101], y[200:220],
                                                rank = 10, progress = p),
    svgd = function(p) svgd(x[1:30, ], tg, n_iter = 5, progress = p),
    fssd_test = function(p) { set.seed(5); fssd_test(x, tg, n_locations = 3,
                                                     max_iter = 5, progress = p) },
    ksdt = function(p) ksdt(x, tg, progress = p),
    ksdt_sample = function(p) { set.seed(3); ksdt_sample(tg, c(0, 0), 200, step_size = 1,
                                                         progress = p) },
    ksdt_chains = function(p) { set.seed(4); ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 100,
                                                         progress = p) })
  for (nm in names(runs)) {
    on <- progress_lines(runs[[nm]](TRUE))
    off <- progress_lines(runs[[nm]](FALSE))
    expect_true(nchar(on$text) > 0, label = paste(nm, "shows progress"))
    expect_match(on$text, "[0-9] of [0-9]|: [0-9]", label = nm)
    expect_identical(off$text, "", label = paste(nm, "is silent with progress = FALSE"))
    a <- on$value
    b <- off$value
    if (is.list(a)) a$elapsed <- b$elapsed <- NULL
    expect_identical(a, b, label = paste(nm, "result with progress"))
  }
})

test_that("futures relay progress through progressr under multisession", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_if_not_installed("progressr")
  skip_on_cran()
  set.seed(1)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 300)
  oplan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(oplan), add = TRUE)
  count_updates <- function(expr) {
    n <- 0
    value <- withCallingHandlers(
      suppressMessages(expr),
      progression = function(p) if (identical(p$type, "update")) n <<- n + p$amount)
    list(value = value, n = n)
  }
  r <- count_updates(ksd_blocks(x, tg, blocks = 3, progress = TRUE))
  expect_equal(r$n, 3)
  expect_identical(r$value, ksd_blocks(x, tg, blocks = 3, progress = FALSE))
  set.seed(5)
  r <- count_updates(ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 100, progress = TRUE))
  expect_equal(r$n, 2)
  set.seed(5)
  plain <- ksdt_chains(tg, rbind(c(0, 0), c(1, 1)), 100, progress = FALSE)
  expect_identical(r$value$merged, plain$merged)
  r <- count_updates(kbr_cv(x[, 1], x[, 2], folds = 3, progress = TRUE))
  expect_equal(r$n, 3)
  # with progress = FALSE nothing is signalled
  r <- count_updates(ksd_blocks(x, tg, blocks = 3, progress = FALSE))
  expect_equal(r$n, 0)
  # a user's progressr handler sees the same updates
  seen <- 0
  h <- progressr::make_progression_handler("count", reporter = list(
    update = function(config, state, progression, ...) seen <<- seen + 1),
    enable = TRUE, target = "void")
  suppressMessages(progressr::with_progress(
    ksd_blocks(x, tg, blocks = 3, progress = TRUE), handlers = h, enable = TRUE))
  expect_gte(seen, 3)
})

# ---- which display: progressr's, the line, or none (issue 30) ---------------

# messages (the line) and progression updates seen while running expr
progress_seen <- function(expr) {
  msgs <- character()
  updates <- 0
  value <- withCallingHandlers(expr, message = function(m) {
    msgs <<- c(msgs, conditionMessage(m))
    invokeRestart("muffleMessage")
  }, progression = function(p) {
    if (identical(p$type, "update")) updates <<- updates + 1
  })
  list(value = value, text = paste(msgs, collapse = ""), updates = updates)
}

# expr inside progressr::with_progress() with a handler that shows nothing
with_void_handler <- function(expr) {
  h <- progressr::make_progression_handler("void", reporter = list(),
                                           enable = TRUE, target = "void")
  progressr::with_progress(expr, handlers = h, enable = TRUE)
}

# code run as if the session were (not) interactive
with_interactive <- function(value, code) {
  ns <- asNamespace("kernbayes")
  old <- get("is_interactive", envir = ns)
  unlockBinding("is_interactive", ns)
  assign("is_interactive", function() value, envir = ns)
  on.exit({
    assign("is_interactive", old, envir = ns)
    lockBinding("is_interactive", ns)
  })
  code
}

progress_runs <- function() {
  set.seed(1)
  tg <- gaussian_target(c(0, 0))
  x <- sample_target(tg, 300)
  list(
    ksd = function(p) ksd(x, tg, progress = p),
    stein_thin = function(p) stein_thin(x, tg, 10, progress = p),
    mala = function(p) { set.seed(2); mala(tg, c(1, 1), 200, progress = p) },
    ksd_blocks = function(p) ksd_blocks(x, tg, blocks = 2, progress = p),
    ksdt = function(p) ksdt(x, tg, progress = p))
}

test_that("the default signals progressr's conditions when a handler is active, and no line", {
  skip_if_not_installed("progressr")
  runs <- progress_runs()
  for (interactive in c(FALSE, TRUE)) with_interactive(interactive, {
    for (nm in names(runs)) {
      r <- with_void_handler(progress_seen(runs[[nm]](NULL)))
      expect_gt(r$updates, 0, label = paste(nm, "signals with a handler"))
      expect_identical(r$text, "", label = paste(nm, "shows no line with a handler"))
      # progress = TRUE: the one display is progressr's
      r <- with_void_handler(progress_seen(runs[[nm]](TRUE)))
      expect_gt(r$updates, 0, label = paste(nm, "signals with TRUE"))
      expect_identical(r$text, "", label = paste(nm, "one display with TRUE"))
      # progress = FALSE: nothing at all
      r <- with_void_handler(progress_seen(runs[[nm]](FALSE)))
      expect_identical(r$updates, 0, label = paste(nm, "silent with FALSE"))
      expect_identical(r$text, "", label = nm)
    }
  })
  # the results do not depend on the display
  expect_identical(with_void_handler(runs$ksd(NULL)), runs$ksd(FALSE))
  expect_identical(with_void_handler(runs$stein_thin(TRUE))$index,
                   runs$stein_thin(FALSE)$index)
})

test_that("without a handler the default shows the line only in an interactive session", {
  runs <- progress_runs()
  with_interactive(FALSE, for (nm in names(runs)) {
    r <- progress_seen(runs[[nm]](NULL))
    expect_identical(r$text, "", label = paste(nm, "silent when not interactive"))
    expect_identical(r$updates, 0, label = nm)
    r <- progress_seen(runs[[nm]](TRUE))
    expect_match(r$text, "[0-9] of [0-9]|: [0-9]", label = paste(nm, "line with TRUE"))
  })
  with_interactive(TRUE, {
    r <- progress_seen(runs$stein_thin(NULL))
    expect_match(r$text, "Stein thinning: 10 of 10 \\(100%\\)")
    expect_identical(r$updates, 0)
    expect_identical(progress_seen(runs$ksd(FALSE))$text, "")
  })
  expect_error(ksd(matrix(1:4, 2), function(x) -x, progress = "yes"),
               class = "kb_error_arg", regexp = "'progress' must be TRUE, FALSE or NULL")
})

test_that("an unknown total and the C loops' callback reach progressr", {
  skip_if_not_installed("progressr")
  r <- with_void_handler(progress_seen({
    p <- kernbayes:::progress_reporter(NA, "solver", NULL)
    for (i in 1:3) p$tick(i)
    p$done()
    q <- kernbayes:::progress_reporter(10, "loop", NULL)
    q$callback(2)(8, 5, 0.5)
    q$done()
  }))
  expect_gte(r$updates, 2)
  expect_identical(r$text, "")
})

test_that("global progressr handlers are honoured in a batch script without progress = TRUE", {
  skip_on_cran()
  skip_if_not_installed("progressr")
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script), add = TRUE)
  writeLines(c(
    "library(kernbayes)",
    "progressr::handlers(global = TRUE)",
    "options(progressr.enable = TRUE)  # progressr shows nothing in batch otherwise",
    "n <- 0",
    "progressr::handlers(progressr::make_progression_handler('count',",
    "  reporter = list(update = function(...) n <<- n + 1),",
    "  enable = TRUE, target = 'void'))",
    "set.seed(1)",
    "tg <- gaussian_target(c(0, 0))",
    "x <- sample_target(tg, 300)",
    "th <- stein_thin(x, tg, 10)",
    "cat('updates', n, '\\n')",
    "progressr::handlers(global = FALSE)",
    "th <- stein_thin(x, tg, 10)",
    "cat('after', n, '\\n')"), script)
  rscript <- file.path(R.home("bin"), "Rscript")
  out <- suppressWarnings(system2(
    rscript, c("--vanilla", shQuote(script)), stdout = TRUE, stderr = TRUE,
    env = paste0("R_LIBS=", shQuote(paste(.libPaths(), collapse = .Platform$path.sep)))))
  expect_null(attr(out, "status"))
  up <- as.numeric(sub("updates ", "", grep("^updates", out, value = TRUE)))
  expect_gt(up, 0)
  # the handler saw no more once the global handler was removed, and the
  # line was never printed (not interactive)
  expect_identical(as.numeric(sub("after ", "", grep("^after", out, value = TRUE))), up)
  expect_false(any(grepl("Stein thinning:", out)))
})
