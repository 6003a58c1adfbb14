# Progress: one reporter for every function that can run for more than a
# couple of seconds, and its relay through progressr for work that runs in
# future workers.
#
# Every exported `progress` is NULL (automatic), TRUE or FALSE, and names
# one display (progress_display(), the rule stated in 'Progress' in
# ?kernbayes-package): progressr's, when a progressr handler is active
# (progressr::handlers(global = TRUE), or inside progressr::with_progress());
# else this package's line on stderr, when progress is TRUE or (NULL) the
# session is interactive; else none.  Never both.
#
# progress_reporter(total, label, show) returns a reporter r:
#   r$tick(done = NULL, status = NULL)  `done` units of `total` are done (NULL:
#                                       one more than before); `status` a
#                                       short string shown after the count
#   r$add(amount)                       `amount` more units are done
#   r$done()                            ends the display (once)
#   r$show                              whether anything is shown
#   r$callback(offset = 0)              a function(i, size, ksd) for the C
#                                       loops (kb_call_progress: i units done
#                                       after `offset`; size and ksd, NA when
#                                       unknown, are shown), or NULL
# The line goes to stderr as a message (suppressMessages() silences it),
# "label: done of total (pct%) status", redrawn in place at most about twice
# a second and always at the first and last tick.  progressr gets an update
# (a progression condition) at most about five times a second and at the
# first and last tick, so a tick stays cheap either way.  With nothing to
# show every method is a no-op and callback() is NULL, so the C loops and
# the R loops take their default path unchanged.
progress_reporter <- function(total, label, show) {
  switch(progress_display(show),
         none = progress_none(),
         line = progress_line(total, label),
         progressr = progress_progressr(total, label))
}

# NULL, TRUE or FALSE, else a kb_error_arg naming 'progress'.
check_progress <- function(progress) {
  if (is.null(progress)) return(NULL)
  if (!is.logical(progress) || length(progress) != 1L || is.na(progress)) {
    stop_arg("progress", "must be TRUE, FALSE or NULL (automatic: see ",
             "'Progress' in ?kernbayes-package)")
  }
  progress
}

# Which display a `progress` value gives now: "none", "line" or
# "progressr".
progress_display <- function(show) {
  show <- check_progress(show)
  if (isFALSE(show)) return("none")
  if (progressr_active()) return("progressr")
  if (isTRUE(show) || is_interactive()) "line" else "none"
}

# interactive(), a binding of its own so that tests can stand in for an
# interactive session
is_interactive <- function() interactive()

# Whether a progressr handler would show progression conditions signalled
# here: progressr's global handler is registered
# (progressr::handlers(global = TRUE)) or a progressr::with_progress() call
# is on the stack.  Either needs progressr loaded; it is not loaded for
# the question.
progressr_active <- function() {
  if (!isNamespaceLoaded("progressr")) return(FALSE)
  if (isTRUE(tryCatch(progressr::handlers(global = NA),
                      error = function(e) FALSE))) {
    return(TRUE)
  }
  wp <- progressr::with_progress
  for (i in seq_len(sys.nframe())) {
    if (identical(sys.function(i), wp)) return(TRUE)
  }
  FALSE
}

progress_none <- function() {
  noop <- function(...) invisible(NULL)
  list(tick = noop, add = noop, done = noop, show = FALSE,
       callback = function(offset = 0) NULL)
}

# The methods common to both displays around draw(state, status, last), which
# shows the state when due (state$done units done; last: the final tick).
progress_methods <- function(total, draw, finish) {
  state <- new.env(parent = emptyenv())
  state$done <- 0
  state$closed <- FALSE
  tick <- function(done = NULL, status = NULL) {
    if (state$closed) return(invisible(NULL))
    state$done <- if (is.null(done)) state$done + 1 else as.double(done)
    draw(state, status, is.finite(total) && state$done >= total)
    invisible(NULL)
  }
  list(tick = tick,
       add = function(amount = 1) tick(state$done + amount),
       done = function() {
         if (!state$closed) finish(state)
         state$closed <- TRUE
         invisible(NULL)
       },
       show = TRUE,
       callback = function(offset = 0) {
         function(i, size, ksd) {
           tick(offset + i, if (is.na(ksd)) NULL else
             sprintf("size %.0f, KSD %.4g", size, ksd))
         }
       })
}

# This package's line on stderr.
progress_line <- function(total, label) {
  total <- as.double(total)
  last <- -Inf
  drawn <- FALSE
  shown <- NA_real_
  draw <- function(state, status, final) {
    now <- proc.time()[["elapsed"]]
    if (drawn && !(final && state$done != shown) && now - last < 0.5) return()
    last <<- now
    known <- is.finite(total) && total > 0
    count <- if (known) {
      sprintf("%s of %s (%3.0f%%)", format_count(state$done),
              format_count(total), 100 * min(state$done / total, 1))
    } else format_count(state$done)
    message(sprintf("\r%s: %s%s   ", label, count,
                    if (is.null(status)) "" else paste0(", ", status)),
            appendLF = FALSE)
    utils::flush.console()
    drawn <<- TRUE
    shown <<- state$done
  }
  progress_methods(total, draw, function(state) if (drawn) message(""))
}

# progressr's display: one progressor, updates of the units done since the
# last one.  An unknown total (NA) is one step, reached at the end; the
# count travels in the message.
progress_progressr <- function(total, label) {
  total <- as.double(total)
  known <- is.finite(total) && total >= 0
  p <- progressr::progressor(steps = if (known) total else 1, label = label,
                             on_exit = FALSE)
  sent <- 0
  last <- -Inf
  draw <- function(state, status, final) {
    now <- proc.time()[["elapsed"]]
    if (!final && now - last < 0.2) return()
    last <<- now
    amount <- if (known) max(state$done - sent, 0) else 0
    msg <- if (known) status else
      paste0(label, ": ", format_count(state$done),
             if (!is.null(status)) paste0(", ", status))
    p(message = if (is.null(msg)) character(0L) else msg, amount = amount)
    sent <<- sent + amount
  }
  finish <- function(state) {
    if (known && state$done > sent) {
      p(amount = state$done - sent)
      sent <<- state$done
    }
    p(type = "finish")
  }
  progress_methods(total, draw, finish)
}

format_count <- function(x) formatC(x, format = "d", big.mark = ",")

# Run tasks with kb_lapply() (futures when future.apply is installed) and
# report their progress: FUN(x, relay) calls relay(amount) as units of its
# work are done (`total` units over all tasks).  Inside a future worker the
# relay signals progressr conditions (when progressr is installed), which
# the future framework passes back to the calling session while the tasks
# run.  With progressr's display (a handler is active) they go to the
# handler and nothing else; with this package's line they advance the line
# as they arrive.  Without progressr the line advances for tasks run in
# this session (a sequential plan) and at the end for the others.  With
# nothing to show, relay is a no-op and no condition is signalled.
progress_lapply <- function(X, FUN, total, label, show, seed = FALSE) {
  mode <- progress_display(show)
  if (mode == "none") {
    return(kb_lapply(X, function(x) FUN(x, function(amount = 1) NULL),
                     seed = seed))
  }
  if (mode == "progressr") {
    p <- progressr::progressor(steps = total, label = label, on_exit = FALSE)
    on.exit(p(type = "finish"))
    relay <- function(amount = 1) p(amount = amount)
    return(kb_lapply(X, function(x) FUN(x, relay), seed = seed))
  }
  rep <- progress_line(total, label)
  on.exit(rep$done())
  if (requireNamespace("progressr", quietly = TRUE)) {
    p <- progressr::progressor(steps = total, label = label, enable = TRUE,
                               on_exit = FALSE)
    # this call's updates, told from any other progressor's by a class of
    # their own (progressr's public API: progression()'s `class`, which a
    # progressor passes on); a condition that lost the class would only
    # leave the line to advance at the end (rep$tick(total) below)
    tag <- relay_class()
    relay <- function(amount = 1) p(amount = amount, class = tag)
    res <- withCallingHandlers(
      kb_lapply(X, function(x) FUN(x, relay), seed = seed),
      progression = function(c) {
        if (inherits(c, tag) && identical(c$type, "update")) {
          rep$add(c$amount %||% 1)
        }
      })
    p(type = "finish")
  } else {
    pid <- Sys.getpid()
    relay <- function(amount = 1) if (Sys.getpid() == pid) rep$add(amount)
    res <- kb_lapply(X, function(x) FUN(x, relay), seed = seed)
  }
  rep$tick(total)
  res
}

# A condition class unique to one progress_lapply() call in this session
# (a counter, so that no random number is drawn).
relay_class <- function() {
  relay_state$n <- relay_state$n + 1
  sprintf("kb_progress_relay_%.0f", relay_state$n)
}
relay_state <- new.env(parent = emptyenv())
relay_state$n <- 0
