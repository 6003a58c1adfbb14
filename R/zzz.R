.onLoad <- function(libname, pkgname) {
  op <- options()
  defaults <- list(kernbayes.nthreads = 1L)
  toset <- !(names(defaults) %in% names(op))
  if (any(toset)) options(defaults[toset])
  invisible()
}
