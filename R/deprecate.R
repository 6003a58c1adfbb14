# Renamed arguments: the old name keeps working, with a message once per
# session and name.
#
# deprecated_arg(old, new, fun, value, new_missing): called when
# `old` was given to `fun`; returns the value to use for `new`.  Giving
# both is an error naming both.
deprecated_arg <- function(old, new, fun, value, new_missing = TRUE) {
  if (!new_missing) {
    stop_arg(old, sprintf("is the old name of '%s' in %s(); give only '%s'",
                          new, fun, new))
  }
  key <- paste0(fun, ":", old)
  if (is.null(deprecation_seen[[key]])) {
    deprecation_seen[[key]] <- TRUE
    message(kb_deprecation(sprintf(
      "%s(): argument '%s' is deprecated; use '%s' instead (this message is shown once per session)",
      fun, old, new)))
  }
  value
}

# Names already reported in this session.
deprecation_seen <- new.env(parent = emptyenv())

kb_deprecation <- function(msg) {
  structure(class = c("kb_deprecated", "message", "condition"),
            list(message = paste0(msg, "\n"), call = NULL))
}

# `call` with its argument `old` renamed `new`: a call re-evaluated after a
# deprecated name was resolved (a flow's Stan dispatch) gives the new name.
rename_call_arg <- function(call, old, new) {
  i <- match(old, names(call))
  if (!is.na(i)) names(call)[i] <- new
  call
}
