# Many chains and many machines: KSDT runs dispatched with the future
# framework and merged dictionaries.

# ---- merging dictionaries ---------------------------------------------------

# `args`: the name of each dictionary's argument, for messages.
check_dicts <- function(dicts, args = rep("...", length(dicts))) {
  ok <- vapply(dicts, inherits, TRUE, "kb_ksdt")
  if (!all(ok)) {
    i <- which(!ok)[1L]
    stop_arg(args[i], sprintf("must be KSDT results (kb_ksdt objects) to be merged; argument %d is a %s",
                              i, class(dicts[[i]])[1L]))
  }
  for (i in seq_along(dicts)) {
    z <- dicts[[i]]
    p <- z$points
    s <- z$score
    if (!is.matrix(p) || !is.numeric(p) || !is.matrix(s) || !is.numeric(s) ||
        !identical(dim(p), dim(s)) || !is.numeric(z$d) || length(z$d) != 1L ||
        ncol(p) != z$d || anyNA(p) || anyNA(s) || any(!is.finite(p)) ||
        any(!is.finite(s)) || !is.list(z$kernel)) {
      stop_arg(args[i], sprintf(paste0("has been edited: dictionary %d's points, scores, ",
                                       "dimension or kernel do not fit together"), i))
    }
  }
  d <- vapply(dicts, function(z) as.integer(z$d), 1L)
  if (any(d != d[1L])) {
    i <- which(d != d[1L])[1L]
    stop_arg(args[i], sprintf(paste0("must be dictionaries of one dimension; they have %s: ",
                                     "they cannot come from the same target"),
                              paste(d, collapse = ", ")))
  }
  sz <- vapply(dicts, function(z) nrow(z$points), 1L)
  if (any(sz == 0L)) {
    i <- which(sz == 0L)[1L]
    stop_arg(args[i], sprintf("must be non-empty dictionaries; dictionary %d is empty", i))
  }
  invisible(dicts)
}

same_kernel <- function(a, b) {
  identical(a$type, b$type) && identical(a$c, b$c) && identical(a$beta, b$beta) &&
    identical(a$lambda, b$lambda) && identical(a$Q, b$Q)
}

# Merge KSDT dictionaries: order them by KSD (best first), keep the best
# whole, drop exact repeats of points already in the union, and run one
# KSDT pass over the union with a constant minimum size equal to the best
# dictionary's size, so that the best dictionary is the starting state and
# every later point is kept only if it does not raise the KSD by more than
# the budget.  how = "stein_thin" instead picks `size` points greedily.
merge_dicts <- function(dicts, how = c("ksdt", "stein_thin"), size = NULL,
                        budget = 0, nthreads = 1L, args = NULL,
                        how_arg = "how", size_arg = "size") {
  how <- check_choice(how, c("ksdt", "stein_thin"), how_arg)
  check_dicts(dicts, args %||% rep("...", length(dicts)))
  if (how == "stein_thin" && !is.null(size)) size <- check_count(size, size_arg)
  budget <- check_number(budget, "budget", lower = 0)
  rk <- dicts[[1L]]$kernel
  if (!all(vapply(dicts, function(z) same_kernel(z$kernel, rk), TRUE))) {
    # heuristic preconditioners were resolved per run: one kernel for all
    allx <- do.call(rbind, lapply(dicts, `[[`, "points"))
    rk <- resolve_kernel(rk$kernel, allx)
    message("merge: the dictionaries' kernels differ (a heuristic resolved ",
            "per run); using one kernel resolved on the union of their points")
  }
  k <- vapply(dicts, function(z) ksd_resolved(z$points, z$score, rk, nthreads), 0)
  o <- order(k)
  pts <- scr <- NULL
  src <- data.frame(dictionary = integer(0), index = numeric(0))
  for (i in o) {
    p <- dicts[[i]]$points
    s <- dicts[[i]]$score
    keep <- rep(TRUE, nrow(p))
    if (!is.null(pts)) {
      keep <- !duplicated(rbind(pts, p))[nrow(pts) + seq_len(nrow(p))]
    }
    pts <- rbind(pts, p[keep, , drop = FALSE])
    scr <- rbind(scr, s[keep, , drop = FALSE])
    src <- rbind(src, data.frame(dictionary = rep(i, sum(keep)),
                                 index = dicts[[i]]$index[keep]))
  }
  best_n <- nrow(dicts[[o[1L]]]$points)
  if (how == "ksdt") {
    st <- ksdt_stream(ncol(pts), budget = budget, min_size = "constant",
                      min_size_coef = best_n, min_size_floor = 1,
                      kernel = rk$kernel, nthreads = nthreads, progress = FALSE)
    st$rk <- rk
    st$ptr <- .Call(C_kb_ksdt_new, rk, st$dim)
    st$colnames <- colnames(dicts[[1L]]$points)
    push_rows(st, pts, scr)
    res <- ksdt_result(st)
    res$source <- src[res$index, , drop = FALSE]
    rownames(res$source) <- NULL
  } else {
    if (is.null(size)) size <- best_n
    size <- check_count(size, size_arg, max = nrow(pts))
    th <- stein_thin(pts, scr, size, kernel = rk$kernel, standardize = FALSE,
                     unique = TRUE, nthreads = nthreads)
    res <- structure(list(points = pts[th$index, , drop = FALSE],
                          score = scr[th$index, , drop = FALSE],
                          index = th$index, ksd = th$ksd,
                          size = seq_along(th$index), t = nrow(pts),
                          d = ncol(pts), kernel = th$kernel,
                          method = "Stein thinning of the merged dictionaries",
                          source = src[th$index, , drop = FALSE]),
                     class = "kb_ksdt")
    rownames(res$source) <- NULL
  }
  res$merged_from <- length(dicts)
  res$input_ksd <- k
  if (how == "ksdt") res$method <- "KSDT merge"
  res
}

#' Merge KSDT dictionaries
#'
#' Combines dictionaries made anywhere (different chains, machines or days)
#' into one: the dictionaries are ordered by their KSD, the best is kept
#' whole, exact repeats of points already included are dropped, and one
#' KSDT pass over the union with a constant minimum size equal to the best
#' dictionary's size adds the other points, keeping a point only while the
#' KSD does not rise by more than the budget. The merged KSD is therefore
#' no worse than the best input's by more than the budget per point, and
#' merging a dictionary with itself returns it unchanged. `how =
#' "stein_thin"` instead selects `size` distinct points of the union by
#' greedy Stein thinning.
#'
#' All dictionaries must have the same dimension and should come from the
#' same target (their scores are used as they are). When their kernels
#' differ (a heuristic preconditioner resolved on each run), one kernel is
#' resolved on the union of their points, with a message.
#'
#' @param x,y,... `kb_ksdt` results ([ksdt()], [ksdt_sample()],
#'   [ksdt_result()], [ksdt_chains()]'s `chains`).
#' @param how `"ksdt"` or `"stein_thin"`.
#' @param size For `"stein_thin"`: the number of points (default: the size
#'   of the best dictionary).
#' @param budget For `"ksdt"`: the KSDT budget of the merging pass.
#' @param nthreads Threads.
#' @return A `kb_ksdt` object; `source` gives, for each kept point, the
#'   dictionary it came from (its position among the arguments) and its
#'   index there; `input_ksd` the inputs' KSDs under the merging kernel.
#' @examples
#' tg <- gaussian_target(c(0, 0))
#' set.seed(1)
#' a <- ksdt(sample_target(tg, 500), tg, progress = FALSE)
#' b <- ksdt(sample_target(tg, 500), tg, progress = FALSE)
#' m <- c(a, b)
#' m
#' c(a = a$ksd[length(a$ksd)], b = b$ksd[length(b$ksd)],
#'   merged = m$ksd[length(m$ksd)])
#' @export
c.kb_ksdt <- function(..., how = c("ksdt", "stein_thin"), size = NULL,
                      budget = 0, nthreads = 1) {
  dicts <- list(...)
  if (length(dicts) == 1L) return(dicts[[1L]])
  merge_dicts(dicts, how = how, size = size, budget = budget,
              nthreads = check_count(nthreads, "nthreads"))
}

#' @rdname c.kb_ksdt
#' @export
merge.kb_ksdt <- function(x, y, ..., how = c("ksdt", "stein_thin"),
                          size = NULL, budget = 0, nthreads = 1) {
  dicts <- c(list(x, y), list(...))
  merge_dicts(dicts, how = how, size = size, budget = budget,
              nthreads = check_count(nthreads, "nthreads"),
              args = c("x", "y", rep("...", length(dicts) - 2L)))
}

# ---- many chains ---------------------------------------------------------------

#' KSDT on several chains, in parallel with the future framework
#'
#' Runs one [ksdt_sample()] chain per row of `x0` (its starting point),
#' dispatched with `future.apply::future_lapply()`, so that the same code
#' runs sequentially, on local cores (`future::plan(multisession)`), on a
#' set of machines (`plan(cluster)`) or on a scheduler
#' (future.batchtools), and merges the chains' dictionaries into one (see
#' [c.kb_ksdt()]).
#'
#' Random numbers come from parallel-safe L'Ecuyer-CMRG streams, one per
#' chain (`future.seed = TRUE`): for a given [set.seed()] the chains are the
#' same whatever the plan and the number of workers. Without future.apply
#' installed the chains run in turn in this process, with R's current
#' generator (reproducible, but different from the future path).
#'
#' Threads: each chain uses `nthreads` OpenMP threads (default 1), so a
#' plan with \eqn{k} workers on \eqn{k} cores uses them all without
#' oversubscription; with a sequential plan, `nthreads = 2` is the way to
#' use two cores.
#'
#' A chain that fails (an error in the target's closures, say) does not
#' lose the others: its error is reported in a warning with the chain
#' number and kept in `errors`, and the merge uses the chains that
#' finished.
#'
#' @param target A [kb_target()].
#' @param x0 Starting points, one row per chain (a vector is one chain).
#' @param n_iter Iterations per chain.
#' @param ... Further arguments to [ksdt_sample()] (`sampler`, `step`,
#'   `min_size`, `kernel`, ...).
#' @param merge `"ksdt"` (merge the dictionaries by a KSDT pass),
#'   `"stein_thin"` (Stein thinning of their union to `merge_size` points)
#'   or `"none"`.
#' @param merge_size For `merge = "stein_thin"`.
#' @param nthreads Threads per chain.
#' @return An object of class `kb_ksdt_chains`: `chains` (the `kb_ksdt` of
#'   each chain; `NULL` for a failed one), `errors` (the failed chains'
#'   conditions, named by chain number), `merged` (a `kb_ksdt`, or `NULL`),
#'   `elapsed` (seconds); `print`, `summary` and `plot` methods.
#' @examples
#' tg <- gaussian_mixture_target(means = rbind(c(-2, 0), c(2, 0)))
#' set.seed(1)
#' fit <- ksdt_chains(tg, x0 = rbind(c(-2, 0), c(2, 0)), n_iter = 2000)
#' fit
#' \donttest{
#' if (requireNamespace("future", quietly = TRUE)) {
#'   oplan <- future::plan(future::multisession, workers = 2)
#'   set.seed(1)
#'   fit2 <- ksdt_chains(tg, x0 = rbind(c(-2, 0), c(2, 0)), n_iter = 2000)
#'   future::plan(oplan)
#'   identical(fit$merged$points, fit2$merged$points)
#' }
#' }
#' @export
ksdt_chains <- function(target, x0, n_iter, ...,
                        merge = c("ksdt", "stein_thin", "none"),
                        merge_size = NULL, nthreads = 1) {
  check_target(target)
  if (is.numeric(x0) && is.null(dim(x0)) && length(x0) == target$dim) {
    x0 <- matrix(x0, nrow = 1L)
  }
  x0 <- as_points(x0, "x0")
  if (ncol(x0) != target$dim) {
    stop_arg("x0", sprintf("must have %d columns (the target's dimension), one row per chain; it has %d",
                           target$dim, ncol(x0)))
  }
  if (nrow(x0) < 1L) stop_arg("x0", "must have at least one row (one chain)")
  n_iter <- check_count(n_iter, "n_iter")
  merge <- check_choice(merge, c("ksdt", "stein_thin", "none"), "merge")
  nthreads <- check_count(nthreads, "nthreads")
  dots <- list(...)
  if (!is.null(dots$progress)) dots$progress <- NULL
  allowed <- setdiff(names(formals(ksdt_sample)),
                     c("target", "x0", "n_iter", "nthreads", "progress"))
  nm <- names(dots)
  if (length(dots) && (is.null(nm) || !all(nm %in% allowed))) {
    bad <- if (is.null(nm)) "an unnamed argument" else
      paste(sQuote(setdiff(nm, allowed), FALSE), collapse = ", ")
    stop_arg("...", "must be named arguments of ksdt_sample() (",
             paste(allowed, collapse = ", "), "); got ", bad)
  }
  if (merge == "stein_thin" && !is.null(merge_size)) {
    merge_size <- check_count(merge_size, "merge_size")
  }
  # every argument checked before any chain runs: each start, then the rest
  for (i in seq_len(nrow(x0))) check_x0(x0[i, ], target)
  do.call(ksdt_sample_check, c(list(target = target, x0 = x0[1L, ],
                                    n_iter = n_iter, nthreads = nthreads,
                                    progress = FALSE), dots))
  run_one <- function(i) {
    tryCatch(do.call(ksdt_sample, c(list(target = target, x0 = x0[i, ],
                                         n_iter = n_iter, nthreads = nthreads,
                                         progress = FALSE), dots)),
             error = function(e) e)
  }
  t0 <- proc.time()[["elapsed"]]
  res <- kb_lapply(seq_len(nrow(x0)), run_one, seed = TRUE)
  elapsed <- proc.time()[["elapsed"]] - t0
  failed <- vapply(res, inherits, TRUE, "error")
  errors <- res[failed]
  names(errors) <- which(failed)
  if (all(failed)) {
    stop(kb_error(sprintf("all %d chains failed; chain 1: %s", length(res),
                          conditionMessage(res[[1L]])), "kb_error_callback"))
  }
  if (any(failed)) {
    warning(sprintf(paste0("chain%s %s failed (%s); the results of the other ",
                           "%d chains are kept"),
                    if (sum(failed) > 1L) "s" else "",
                    paste(which(failed), collapse = ", "),
                    conditionMessage(res[[which(failed)[1L]]]), sum(!failed)),
            call. = FALSE)
  }
  chains <- lapply(res, function(z) if (inherits(z, "error")) NULL else z)
  ok <- chains[!failed]
  merged <- if (merge == "none") NULL else if (length(ok) == 1L) ok[[1L]] else
    merge_dicts(ok, how = merge, size = merge_size, nthreads = nthreads,
                how_arg = "merge", size_arg = "merge_size")
  if (!is.null(merged$source)) {
    merged$source$dictionary <- which(!failed)[merged$source$dictionary]
  }
  structure(list(chains = chains, errors = errors, merged = merged,
                 merge = merge, n_iter = n_iter, x0 = x0, elapsed = elapsed,
                 workers = if (requireNamespace("future", quietly = TRUE))
                   future::nbrOfWorkers() else 1L),
            class = "kb_ksdt_chains")
}

final_ksd <- function(z) if (is.null(z)) NA_real_ else z$ksd[length(z$ksd)]

#' @export
summary.kb_ksdt_chains <- function(object, ...) {
  tab <- data.frame(
    chain = seq_along(object$chains),
    kept = vapply(object$chains, function(z) if (is.null(z)) NA_integer_ else
      nrow(z$points), 1L),
    ksd = vapply(object$chains, final_ksd, 0),
    accept_rate = vapply(object$chains, function(z) if (is.null(z)) NA_real_
                         else z$accept_rate %||% NA_real_, 0),
    status = ifelse(vapply(object$chains, is.null, TRUE), "failed", "ok"))
  if (!is.null(object$merged)) {
    tab <- rbind(tab, data.frame(chain = NA_integer_,
                                 kept = nrow(object$merged$points),
                                 ksd = final_ksd(object$merged),
                                 accept_rate = NA_real_,
                                 status = sprintf("merged (%s)", object$merge)))
  }
  structure(list(table = tab, n_iter = object$n_iter, elapsed = object$elapsed,
                 workers = object$workers), class = "summary.kb_ksdt_chains")
}

#' @export
print.summary.kb_ksdt_chains <- function(x, ...) {
  cat(sprintf("KSDT on %d chains of %d iterations (%.1f s, %s worker%s)\n",
              sum(!is.na(x$table$chain)), x$n_iter, x$elapsed,
              format(x$workers), if (x$workers == 1) "" else "s"))
  print(x$table, row.names = FALSE, digits = 4)
  invisible(x)
}

#' @export
print.kb_ksdt_chains <- function(x, ...) {
  print(summary(x))
  if (length(x$errors)) {
    cat("errors:\n")
    for (nm in names(x$errors)) {
      cat(sprintf("  chain %s: %s\n", nm, conditionMessage(x$errors[[nm]])))
    }
  }
  invisible(x)
}

#' @export
plot.kb_ksdt_chains <- function(x, ...) {
  ok <- which(!vapply(x$chains, is.null, TRUE))
  cols <- grDevices::hcl.colors(max(length(x$chains), 2L), "Dark 3")
  op <- graphics::par(mfrow = c(1L, if (x$chains[[ok[1L]]]$d >= 2L) 2L else 1L))
  on.exit(graphics::par(op))
  rng <- range(unlist(lapply(x$chains[ok], function(z) z$ksd)),
               final_ksd(x$merged), na.rm = TRUE)
  graphics::plot(NA, xlim = c(1, x$n_iter), ylim = rng, log = "xy",
                 xlab = "iteration", ylab = "KSD of the dictionary",
                 main = "KSDT per chain", ...)
  for (i in ok) graphics::lines(seq_along(x$chains[[i]]$ksd), x$chains[[i]]$ksd,
                                col = cols[i])
  if (!is.null(x$merged)) {
    graphics::abline(h = final_ksd(x$merged), lty = 2)
  }
  graphics::legend("topright", c(paste("chain", ok),
                                 if (!is.null(x$merged)) "merged"),
                   col = c(cols[ok], if (!is.null(x$merged)) "black"),
                   lty = c(rep(1, length(ok)), if (!is.null(x$merged)) 2),
                   bty = "n", cex = 0.8)
  if (x$chains[[ok[1L]]]$d >= 2L) {
    allp <- do.call(rbind, lapply(x$chains[ok], `[[`, "points"))
    graphics::plot(allp[, 1L], allp[, 2L], type = "n", xlab = "x1", ylab = "x2",
                   main = "dictionaries (first two coordinates)")
    for (i in ok) graphics::points(x$chains[[i]]$points[, 1:2, drop = FALSE],
                                   col = grDevices::adjustcolor(cols[i], 0.6),
                                   pch = 19, cex = 0.5)
    if (!is.null(x$merged)) {
      graphics::points(x$merged$points[, 1:2, drop = FALSE], pch = 1, cex = 0.9)
    }
  }
  invisible(x)
}
