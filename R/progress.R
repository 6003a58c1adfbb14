# Progress: one reporter for every function that can run for more than a
# couple of seconds, and its relay through progressr for work that runs in
# future workers.
#
# progress_reporter(total, label, show) returns a reporter r:
#   r$tick(done = NULL, status = NULL)  `done` units of `total` are done (NULL:
#                                       one more than before); `status` a
#                                       short string shown after the count
#   r$add(amount)                       `amount` more units are done
#   r$done()                            ends the line (once)
#   r$show                              whether anything is shown
#   r$callback(offset = 0)              a function(i, size, ksd) for the C
#                                       loops (kb_call_progress: i units done
#                                       after `offset`; size and ksd, NA when
#                                       unknown, are shown), or NULL
# The line goes to stderr as a message (suppressMessages() silences it),
# "label: done of total (pct%) status", redrawn in place at most about twice
# a second and always at the first and last tick.  With show = FALSE every
# method is a no-op and callback() is NULL, so the C loops and the R loops
# take their default path unchanged.
progress_reporter <- function(total, label, show) {
  show <- check_flag(show, "progress")
  noop <- function(...) invisible(NULL)
  if (!show) {
    return(list(tick = noop, add = noop, done = noop, show = FALSE,
                callback = function(offset = 0) NULL))
  }
  total <- as.double(total)
  state <- new.env(parent = emptyenv())
  state$done <- 0
  state$last <- -Inf
  state$drawn <- FALSE
  state$shown <- NA_real_
  state$closed <- FALSE
  draw <- function(status) {
    known <- is.finite(total) && total > 0
    count <- if (known) {
      sprintf("%s of %s (%3.0f%%)", format_count(state$done),
              format_count(total), 100 * min(state$done / total, 1))
    } else format_count(state$done)
    msg <- sprintf("\r%s: %s%s   ", label, count,
                   if (is.null(status)) "" else paste0(", ", status))
    message(msg, appendLF = FALSE)
    utils::flush.console()
    state$drawn <- TRUE
    state$shown <- state$done
  }
  tick <- function(done = NULL, status = NULL) {
    if (state$closed) return(invisible(NULL))
    state$done <- if (is.null(done)) state$done + 1 else as.double(done)
    now <- proc.time()[["elapsed"]]
    last <- is.finite(total) && state$done >= total
    if (!state$drawn || (last && state$done != state$shown) ||
        now - state$last >= 0.5) {
      state$last <- now
      draw(status)
    }
    invisible(NULL)
  }
  list(tick = tick,
       add = function(amount = 1) tick(state$done + amount),
       done = function() {
         if (!state$closed && state$drawn) message("")
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

format_count <- function(x) formatC(x, format = "d", big.mark = ",")

# Run tasks with kb_lapply() (futures when future.apply is installed) and
# report their progress: FUN(x, relay) calls relay(amount) as units of its
# work are done (`total` units over all tasks).  Inside a future worker the
# relay signals progressr conditions (when progressr is installed), which
# the future framework passes back to the calling session while the tasks
# run: there they advance this session's reporter, and any progressr
# handler the user enabled (progressr::with_progress(),
# progressr::handlers(global = TRUE)) sees them too.  Without progressr the
# reporter advances for tasks run in this session (a sequential plan) and
# at the end for the others.  With show = FALSE, relay is a no-op and no
# condition is signalled.
progress_lapply <- function(X, FUN, total, label, show, seed = FALSE) {
  rep <- progress_reporter(total, label, show)
  on.exit(rep$done())
  if (!rep$show) {
    return(kb_lapply(X, function(x) FUN(x, function(amount = 1) NULL),
                     seed = seed))
  }
  if (requireNamespace("progressr", quietly = TRUE)) {
    p <- progressr::progressor(steps = total, label = label, enable = TRUE,
                               on_exit = FALSE)
    id <- environment(p)$progressor_uuid
    relay <- function(amount = 1) p(amount = amount)
    res <- withCallingHandlers(
      kb_lapply(X, function(x) FUN(x, relay), seed = seed),
      progression = function(c) {
        if (identical(c$progressor_uuid, id) && identical(c$type, "update")) {
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
