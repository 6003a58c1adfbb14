# Machinery of the bad-input campaign (test-bad-input.R): a case is an id,
# an expression (a quoted call evaluated among the fixtures below, or, for
# crash-prone cases, R code run in a fresh R process) and an expectation.
# Every name here starts with bi_ so as not to clash with other helpers.

# ---- expectations ------------------------------------------------------------

# A classed error whose message matches regexp (case-sensitive, perl).
bi_err <- function(class, regexp) list(type = "error", class = class,
                                       regexp = regexp)
# A bad argument: class kb_error_arg, the argument named as 'arg' in the
# message, and optionally more text.
bi_arg <- function(arg, regexp = NULL) {
  bi_err("kb_error_arg", paste0("'", bi_rx(arg), "'",
                                if (!is.null(regexp)) paste0(".*", regexp)))
}
bi_num <- function(regexp = NULL) bi_err("kb_error_numeric", regexp %||% "")
bi_state <- function(regexp = NULL) bi_err("kb_error_state", regexp %||% "")
# An error from or about a user closure: either a kb_error_callback whose
# message names the closure, or the closure's own error passed through with
# the closure named in its call or message; regexp must match the message.
bi_cb <- function(name, regexp = "") list(type = "callback", name = name,
                                         regexp = regexp)
# A classed warning (the call may also return; check, if given, is applied
# to the value).
bi_warn <- function(class, regexp, check = NULL) {
  list(type = "warning", class = class, regexp = regexp, check = check)
}
# A correct result: check(value) returns TRUE, or a string saying what is
# wrong.  No warning may be signalled unless warn = TRUE.
bi_ok <- function(check, warn = FALSE) list(type = "value", check = check,
                                           warn = warn)
# Either of several expectations.
bi_any <- function(...) list(type = "any", options = list(...))

bi_rx <- function(s) gsub("([][{}()+*^$.|\\\\?])", "\\\\\\1", s)

`%||%` <- function(a, b) if (is.null(a)) b else a

# ---- cases -------------------------------------------------------------------

bi_case <- function(id, expr, expect) {
  list(id = id, expr = expr, expect = expect, sub = FALSE)
}
# A crash-prone case: code is run by Rscript after bi_sub_preamble.
bi_sub <- function(id, code, expect, timeout = 60) {
  list(id = id, expr = code, expect = expect, sub = TRUE, timeout = timeout)
}

# ---- running -----------------------------------------------------------------

# Evaluate a case; returns list(kind = "error" | "value", cond, value,
# warnings).
bi_eval <- function(expr, env) {
  warns <- list()
  out <- tryCatch({
    v <- withCallingHandlers(
      eval(expr, env),
      warning = function(w) {
        warns[[length(warns) + 1L]] <<- w
        invokeRestart("muffleWarning")
      },
      message = function(m) invokeRestart("muffleMessage"))
    list(kind = "value", value = v)
  }, error = function(e) list(kind = "error", cond = e))
  out$warnings <- warns
  out
}

bi_sub_preamble <- paste(
  "suppressPackageStartupMessages(library(kernbayes))",
  "set.seed(1)",
  "X <- matrix(rnorm(40), 20); S <- -X",
  "tg2 <- gaussian_target(c(0, 0))",
  sep = "\n")

# Run a subprocess case: the child writes what happened to an RDS file.
bi_eval_sub <- function(code, timeout) {
  out <- tempfile(fileext = ".rds")
  script <- tempfile(fileext = ".R")
  on.exit(unlink(c(out, script)))
  writeLines(c(bi_sub_preamble,
    sprintf("bi_code <- %s", deparse1(code)),
    "warns <- list()",
    "res <- tryCatch({",
    "  v <- withCallingHandlers(eval(parse(text = bi_code)),",
    "    warning = function(w) { warns[[length(warns) + 1L]] <<- w;",
    "                            invokeRestart('muffleWarning') },",
    "    message = function(m) invokeRestart('muffleMessage'))",
    "  list(kind = 'value', value = v)",
    "}, error = function(e) list(kind = 'error', cond = e))",
    "res$warnings <- lapply(warns, function(w) { w$call <- NULL; w })",
    sprintf("saveRDS(res, %s)", deparse1(out))), script)
  lib <- paste(.libPaths(), collapse = .Platform$path.sep)
  rscript <- file.path(R.home("bin"), "Rscript")
  # on unix, cap the child's memory (4 GB) so that a runaway allocation
  # fails at once instead of swapping
  txt <- suppressWarnings(if (.Platform$OS.type == "unix") {
    system2("/bin/sh", c("-c", shQuote(sprintf(
      "ulimit -v 4194304 2>/dev/null; exec %s --vanilla %s",
      shQuote(rscript), shQuote(script)))),
      stdout = TRUE, stderr = TRUE, timeout = timeout,
      env = paste0("R_LIBS=", shQuote(lib)))
  } else {
    system2(rscript, c("--vanilla", shQuote(script)), stdout = TRUE,
            stderr = TRUE, timeout = timeout,
            env = paste0("R_LIBS=", shQuote(lib)))
  })
  status <- attr(txt, "status") %||% 0L
  if (!file.exists(out)) {
    return(list(kind = "crash", status = status,
                output = paste(utils::tail(txt, 5L), collapse = "\n")))
  }
  readRDS(out)
}

bi_describe <- function(r) {
  switch(r$kind,
    error = sprintf("error <%s>: %s", paste(class(r$cond), collapse = "/"),
                    conditionMessage(r$cond)),
    value = {
      s <- tryCatch(paste(utils::capture.output(utils::str(r$value,
                                                           max.level = 1L,
                                                           list.len = 4L,
                                                           vec.len = 2L)),
                          collapse = " "), error = function(e) "<value>")
      paste0("value ", substr(s, 1L, 200L),
             if (length(r$warnings)) paste0(" with warning: ",
                                            conditionMessage(r$warnings[[1L]])))
    },
    crash = sprintf("process ended abnormally (status %s): %s", r$status,
                    r$output))
}

bi_match <- function(regexp, msg) {
  is.null(regexp) || !nzchar(regexp) || grepl(regexp, msg, perl = TRUE)
}

# NULL if r meets the expectation ex, else a string saying why not.
bi_judge <- function(r, ex) {
  if (ex$type == "any") {
    why <- lapply(ex$options, function(o) bi_judge(r, o))
    if (any(vapply(why, is.null, TRUE))) return(NULL)
    return(paste(unlist(why), collapse = " | OR | "))
  }
  got <- bi_describe(r)
  if (ex$type == "error") {
    if (r$kind == "error" && inherits(r$cond, ex$class) &&
        bi_match(ex$regexp, conditionMessage(r$cond))) return(NULL)
    return(sprintf("expected error <%s> matching /%s/; got %s", ex$class,
                   ex$regexp, got))
  }
  if (ex$type == "callback") {
    if (r$kind == "error") {
      msg <- conditionMessage(r$cond)
      call <- paste(deparse(conditionCall(r$cond)), collapse = " ")
      named <- grepl(ex$name, msg, fixed = TRUE) ||
        startsWith(call, paste0(ex$name, "("))
      if (named && bi_match(ex$regexp, msg) &&
          (inherits(r$cond, "kb_error_callback") ||
           !inherits(r$cond, "kb_error"))) return(NULL)
    }
    return(sprintf(paste0("expected an error from or about closure '%s' ",
                          "matching /%s/; got %s"), ex$name, ex$regexp, got))
  }
  if (ex$type == "warning") {
    ok <- vapply(r$warnings, function(w) inherits(w, ex$class) &&
                   bi_match(ex$regexp, conditionMessage(w)), TRUE)
    if (any(ok)) {
      if (is.null(ex$check)) return(NULL)
      if (r$kind != "value") return(paste("warned as expected, then", got))
      chk <- ex$check(r$value)
      if (isTRUE(chk)) return(NULL)
      return(paste("warned as expected, but the value is wrong:", chk))
    }
    return(sprintf("expected warning <%s> matching /%s/; got %s", ex$class,
                   ex$regexp, got))
  }
  # value
  if (r$kind != "value") return(paste("expected a value; got", got))
  if (length(r$warnings) && !isTRUE(ex$warn)) {
    return(paste("expected a value without warnings; got", got))
  }
  chk <- tryCatch(ex$check(r$value),
                  error = function(e) paste("checker failed:",
                                            conditionMessage(e)))
  if (isTRUE(chk)) return(NULL)
  paste("wrong value:", if (is.character(chk)) chk else "check is FALSE",
        "; got", got)
}

# Results of the last run, for the report: one row per case.
bi_results <- new.env()

# Run cases in the current test (one expectation each), recording them.
bi_run_cases <- function(group, cs, env) {
  for (cs1 in cs) {
    r <- if (cs1$sub) bi_eval_sub(cs1$expr, cs1$timeout) else
      bi_eval(cs1$expr, env)
    why <- bi_judge(r, cs1$expect)
    label <- if (cs1$sub) "<subprocess>" else
      paste(deparse(cs1$expr, width.cutoff = 500L), collapse = " ")
    assign(paste(group, cs1$id, sep = "/"), why, envir = bi_results)
    # KB_BI_REPORT=file: one line per case (group, id, PASS/FAIL, why)
    rep <- Sys.getenv("KB_BI_REPORT")
    if (nzchar(rep)) {
      cat(sprintf("%s\t%s\t%s\t%s\n", group, cs1$id,
                  if (is.null(why)) "PASS" else "FAIL",
                  gsub("[\t\n]", " ", why %||% "")),
          file = rep, append = TRUE)
    }
    expect(is.null(why),
           sprintf("[%s/%s] %s\n  %s", group, cs1$id, label, why))
  }
  invisible(length(cs))
}

# Checkers given as quoted calls are built among the fixtures.
bi_resolve_cases <- function(cases, env) {
  resolve <- function(ex) {
    if (!is.null(ex$check) && is.call(ex$check)) ex$check <- eval(ex$check, env)
    if (!is.null(ex$options)) ex$options <- lapply(ex$options, resolve)
    ex
  }
  lapply(cases, function(z) { z$expect <- resolve(z$expect); z })
}

# One test_that per group; its subprocess cases in a second one that is
# skipped under valgrind and on CRAN.
bi_run_group <- function(group, cases, env) {
  ids <- vapply(cases, `[[`, "", "id")
  stopifnot(!anyDuplicated(ids))
  run <- function(cs) bi_run_cases(group, cs, env)
  cases <- bi_resolve_cases(cases, env)
  main <- Filter(function(z) !z$sub, cases)
  sub <- Filter(function(z) z$sub, cases)
  if (length(main)) test_that(group, { run(main) })
  if (length(sub)) {
    test_that(paste(group, "(subprocess)"), {
      # run them with NOT_CRAN=true (as devtools::test() sets it)
      skip_on_cran()
      skip_if(nzchar(Sys.getenv("KB_VALGRIND")), "subprocess cases under valgrind")
      run(sub)
    })
  }
  invisible(length(cases))
}

# ---- checkers ----------------------------------------------------------------

bi_near <- function(a, b, tol = 1e-8) {
  a <- as.numeric(a)
  b <- as.numeric(b)
  if (length(a) != length(b)) return(sprintf("length %d, expected %d",
                                             length(a), length(b)))
  if (any(!is.finite(a))) return("non-finite values")
  err <- max(abs(a - b) / pmax(1, abs(b)))
  if (err <= tol) TRUE else sprintf("off by %.3g (relative)", err)
}
bi_all_finite <- function(v) {
  # the numbers of a result, in nested lists too (strings and flags aside)
  if (is.list(v)) {
    v <- unlist(rapply(unclass(v), function(z) as.double(z),
                       classes = c("numeric", "integer"), how = "unlist"))
  }
  if (is.numeric(v) && length(v) && all(is.finite(v))) TRUE else
    "not all finite"
}
