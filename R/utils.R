# Argument checks and conversions shared by the user-facing functions.
# Every message names the argument and says what was expected.

# Errors are classed conditions: "kb_error_arg" (an argument is wrong),
# "kb_error_numeric" (a computation overflowed or lost its meaning),
# "kb_error_callback" (a user closure failed or returned something wrong),
# "kb_error_state" (an object cannot be used as it is) and
# "kb_error_internal"; all inherit from "kb_error".  `arg` names the
# argument when there is one.
kb_error <- function(message, class = NULL, arg = NULL) {
  structure(class = c(class, "kb_error", "error", "condition"),
            list(message = message, call = NULL, arg = arg))
}

stop_arg <- function(arg, ...) {
  stop(kb_error(sprintf("'%s' %s", arg, paste0(...)), "kb_error_arg", arg))
}

# A user function given as an argument failed or returned something
# unusable.
stop_callback <- function(arg, ...) {
  stop(kb_error(sprintf("'%s' %s", arg, paste0(...)), "kb_error_callback", arg))
}

stop_numeric <- function(...) {
  stop(kb_error(paste0(...), "kb_error_numeric"))
}

stop_state <- function(...) {
  stop(kb_error(paste0(...), "kb_error_state"))
}

# Called from C (kb_signal in util.c): raise a classed error with a message
# formatted there.
kb_signal <- function(message, class) {
  stop(kb_error(message, class))
}

check_number <- function(x, arg, lower = -Inf, upper = Inf,
                         lower_open = FALSE, upper_open = FALSE) {
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || !is.finite(x)) {
    stop_arg(arg, "must be a single finite number")
  }
  bad_low <- if (lower_open) x <= lower else x < lower
  bad_up <- if (upper_open) x >= upper else x > upper
  if (bad_low || bad_up) {
    # an infinite bound is never included (the number must be finite)
    lb <- if (lower_open || is.infinite(lower)) "(" else "["
    ub <- if (upper_open || is.infinite(upper)) ")" else "]"
    stop_arg(arg, sprintf("must be in %s%s, %s%s; got %s", lb,
                          format(lower), format(upper), ub, format(x)))
  }
  as.double(x)
}

check_count <- function(x, arg, min = 1L, max = .Machine$integer.max) {
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || !is.finite(x) ||
      x != round(x) || x < min) {
    stop_arg(arg, sprintf("must be a single whole number >= %d", min))
  }
  if (x > max) {
    stop_arg(arg, sprintf("must be at most %s; got %s", format(max),
                          format(x)))
  }
  as.integer(x)
}

# match.arg() with a message naming the argument; the first choice is the
# default when the whole choice vector is passed.
check_choice <- function(x, choices, arg) {
  if (identical(x, choices)) return(choices[1L])
  if (!is.character(x) || length(x) != 1L || is.na(x) || !x %in% choices) {
    stop_arg(arg, "must be one of ",
             paste(dQuote(choices, FALSE), collapse = ", "))
  }
  x
}

check_flag <- function(x, arg) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) {
    stop_arg(arg, "must be TRUE or FALSE")
  }
  x
}

# Thread count: the argument, else the option kernbayes.nthreads, else 1.
resolve_nthreads <- function(nthreads) {
  if (is.null(nthreads)) nthreads <- getOption("kernbayes.nthreads", 1L)
  check_count(nthreads, "nthreads")
}

# The team a region asking for nthreads threads would get now: fewer when
# the machine's load leaves fewer idle cores, unless the option
# kernbayes.follow_load is FALSE (src/runtime.c, read by every C entry that
# takes a thread count; ?kernbayes, "Threads").
thread_team <- function(nthreads = 2L) {
  .Call(C_kb_thread_team, as.integer(nthreads))
}

# The instruction sets the C core's hot loops use (src/kernels.h): 2
# AVX-512F, 1 AVX2, 0 the baseline (SSE2 on x86-64). simd_level() returns
# c(used = , machine = ) as they were; simd_level(0) caps the loops at the
# baseline (for the tests, which run every copy and compare the results;
# every level gives the same numbers, bit for bit).
simd_level <- function(level = NULL) {
  if (!is.null(level)) level <- as.integer(level)
  out <- .Call(C_kb_simd, level)
  names(out) <- c("used", "machine")
  invisible(out)
}

# Points and samples: the one rule turning what a user gives as points into
# a numeric n x d matrix, one point per row (documented in ?kernbayes,
# "Points and samples").  A matrix is n x d; a data frame (numeric or
# logical columns), a coda::mcmc / mcmc.list or a posterior draws object is
# converted to its matrix of draws.  A plain numeric vector is
#   * one point (1 x length) where the caller takes one point (`one`), or
#     where the points' dimension d is known and above 1 (a vector of
#     length d is one point of dimension d);
#   * a sample of one-dimensional points (length x 1) otherwise: where d is
#     1 or not fixed by anything else.
# `d`: the dimension the caller knows (a target's, a stream's, the columns
# of a matching sample), or NULL; the caller checks ncol() against it, with
# its own message.  With `one`, the result must have one row.
as_points <- function(x, arg = "x", d = NULL, one = FALSE) {
  if (is_kb_result(x)) {
    # the package's own results: their points (a merged dictionary's)
    x <- result_points(result_set(x, arg))
  } else if (inherits(x, "mcmc.list")) {
    x <- do.call(rbind, lapply(x, as.matrix))
  } else if (inherits(x, "mcmc")) {
    x <- as.matrix(x)
    attr(x, "mcpar") <- NULL
  } else if (inherits(x, "draws")) {
    if (!requireNamespace("posterior", quietly = TRUE)) {
      stop_arg(arg, "is a posterior draws object but package 'posterior' ",
               "is not installed")
    }
    if (is.data.frame(x)) check_point_columns(x, arg)
    x <- posterior::as_draws_matrix(x)
    x <- unclass(x)[, , drop = FALSE]
    attr(x, "nchains") <- NULL
  } else if (is.data.frame(x)) {
    # the labels of a data frame of draws are not coordinates
    x <- x[setdiff(names(x), c(".chain", ".iteration", ".draw"))]
    check_point_columns(x, arg)
    x <- as.matrix(x)
  } else if (is.numeric(x) && is.null(dim(x))) {
    x <- vector_points(x, d, one)
  }
  if (!is.matrix(x) || !(is.numeric(x) || is.logical(x))) {
    stop_arg(arg, "must be a numeric matrix, a data frame of numbers, ",
             "a coda 'mcmc' object or a posterior draws object")
  }
  if (nrow(x) < 1L || ncol(x) < 1L) {
    stop_arg(arg, "must have at least one row and one column")
  }
  if (one && nrow(x) != 1L) {
    stop_arg(arg, sprintf("must be one point (a vector or a one-row matrix); it has %d rows",
                          nrow(x)))
  }
  if (".log_weight" %in% colnames(x)) {
    # posterior::weight_draws()'s importance weights are not a coordinate,
    # and dropping them would silently ignore them
    stop_arg(arg, "carries importance weights (a .log_weight variable, as ",
             "from posterior::weight_draws()); drop that variable from the ",
             "draws and give the weights, exp(.log_weight) normalised, as ",
             "'weights' to the functions that take them")
  }
  if (!is.double(x)) storage.mode(x) <- "double"
  if (!all_finite(x)) {
    bad <- which(!is.finite(x), arr.ind = TRUE)[1L, ]
    stop_arg(arg, sprintf("must not contain NA, NaN or Inf (row %d, column %d)",
                          bad[1L], bad[2L]))
  }
  # dimnames(x) <- ... copies a matrix the caller also holds: only when the
  # row names (or the names of the dimnames) are to go
  dn <- dimnames(x)
  if (!is.null(dn) && !identical(dn, list(NULL, dn[[2L]]))) {
    dimnames(x) <- list(NULL, dn[[2L]])
  }
  x
}

# The columns of a data frame of points (draws_df included, its label
# columns aside) must be numbers: a clear error before any coercion.
check_point_columns <- function(x, arg) {
  x <- unclass(x)[setdiff(names(x), c(".chain", ".iteration", ".draw"))]
  ok <- vapply(x, function(col) is.numeric(col) || is.logical(col), TRUE)
  if (!all(ok)) {
    stop_arg(arg, "must contain only numeric columns; column(s) ",
             paste(sQuote(names(x)[!ok], FALSE), collapse = ", "),
             " are not numeric")
  }
  invisible(NULL)
}

# all(is.finite(x)) for a double vector or matrix, in one pass and without
# a logical copy when all is finite: a sum (in long double) of finite
# numbers is finite unless it overflows when rounded to double.
all_finite <- function(x) is.finite(sum(x)) || all(is.finite(x))

# The shape of a plain vector in as_points()'s rule (no checks: the
# vectorised closures of the built-in targets call it on every point).
vector_points <- function(v, d = NULL, one = FALSE) {
  if (one || (!is.null(d) && d > 1L)) {
    matrix(v, nrow = 1L, dimnames = list(NULL, names(v)))
  } else {
    matrix(v, ncol = 1L)
  }
}

# The scores of a one-point closure at every row of x, checked in C: an
# n x d matrix.
eval_score_rows <- function(f, x, what = "score", rows_of = "x") {
  g <- eval_rows(f, x, ncol(x), what, rows_of = rows_of)
  if (is.matrix(g)) g else matrix(g, ncol = 1L)
}

check_weights <- function(weights, n, arg = "weights") {
  if (!is.numeric(weights) || length(weights) != n) {
    stop_arg(arg, sprintf("must be a numeric vector of length nrow(x) = %d", n))
  }
  if (anyNA(weights) || any(!is.finite(weights))) {
    stop_arg(arg, "must not contain NA, NaN or Inf")
  }
  if (any(weights < 0)) stop_arg(arg, "must be non-negative")
  weights <- as.double(weights)
  s <- sum(weights)
  if (!(s > 0)) stop_arg(arg, "must have a positive sum")
  if (!is.finite(s)) {
    # the total overflows: divide by the largest weight first (the sum of
    # the scaled weights is at most n), then normalise
    weights <- weights / max(weights)
    s <- sum(weights)
  }
  weights / s
}

# Evaluate a one-point closure f (length-d vector -> length len_out) at every
# row of x, in C with checks on every result.
# With allow_neginf, -Inf results are accepted (a log density outside the
# support); NA, NaN and +Inf never are.  `rows_of` names the rows in
# messages ("at row i of <rows_of>"): the caller's own name for x.
eval_rows <- function(f, x, len_out, what, allow_neginf = FALSE,
                      rows_of = "x") {
  if (!is.function(f)) stop_arg(what, "must be a function")
  env <- new.env(parent = baseenv())
  assign(what, f, envir = env)
  .Call(C_kb_eval_rows, x, as.integer(len_out), what, env, allow_neginf,
        rows_of)
}

# Refuse work whose arrays would need more than the option
# kernbayes.max_memory (bytes; default 16 GiB) before allocating any of
# them: an error naming the argument that sets the size and the memory.
check_memory <- function(bytes, arg, what, hint = NULL) {
  lim <- getOption("kernbayes.max_memory", 2^34)
  if (!is.numeric(lim) || length(lim) != 1L || is.na(lim) || !(lim > 0)) {
    stop_arg("kernbayes.max_memory", "(option) must be a positive number of bytes")
  }
  if (bytes > lim) {
    stop_arg(arg, sprintf("is too large: %s would need %s of memory, more than %s (option 'kernbayes.max_memory')%s",
                          what, format_bytes(bytes), format_bytes(lim),
                          if (is.null(hint)) "" else paste0("; ", hint)))
  }
  invisible(bytes)
}

format_bytes <- function(b) {
  u <- c("bytes", "KB", "MB", "GB", "TB", "PB")
  k <- max(0, min(length(u) - 1, floor(log(max(b, 1), 1024))))
  if (k == 0) sprintf("%.0f bytes", b) else sprintf("%.1f %s", b / 1024^k, u[k + 1])
}

# lapply through future.apply when it is installed (any plan: sequential,
# multisession, cluster, batchtools), plain lapply otherwise.
kb_lapply <- function(X, FUN, seed = FALSE) {
  if (requireNamespace("future.apply", quietly = TRUE)) {
    future.apply::future_lapply(X, FUN, future.seed = seed)
  } else {
    lapply(X, FUN)
  }
}

`%||%` <- function(a, b) if (is.null(a)) b else a
