# Merging KSDT dictionaries made anywhere (chains, machines, days): c() and
# merge() methods for kb_ksdt, and merge_dicts(), which ksdt_chains() uses.

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
  # the same variables in the same order: a dictionary whose columns are
  # named otherwise would be merged coordinate by coordinate under the
  # first one's names
  nms <- lapply(dicts, function(z) colnames(z$points))
  named <- which(!vapply(nms, is.null, TRUE))
  for (i in named[-1L]) {
    if (!identical(nms[[i]], nms[[named[1L]]])) {
      stop_arg(args[i], sprintf(paste0(
        "must have the variables of the other dictionaries in the same ",
        "order: dictionary %d has %s, dictionary %d has %s"), named[1L],
        paste(nms[[named[1L]]], collapse = ", "), i,
        paste(nms[[i]], collapse = ", ")))
    }
  }
  sz <- vapply(dicts, function(z) nrow(z$points), 1L)
  if (any(sz == 0L)) {
    i <- which(sz == 0L)[1L]
    stop_arg(args[i], sprintf("must be non-empty dictionaries; dictionary %d is empty", i))
  }
  invisible(dicts)
}

# Dictionaries made with different kernels (as given: the type, its
# parameters or a fixed preconditioner or bandwidth) are not merged: one
# kernel would silently replace the other's.  Only the resolution of the
# same kernel on different points (a median heuristic) may differ.
check_dict_kernels <- function(dicts, args) {
  spec <- function(z) z$kernel$kernel
  k1 <- spec(dicts[[1L]])
  if (is.null(k1)) return(invisible(dicts))
  for (i in seq_along(dicts)[-1L]) {
    ki <- spec(dicts[[i]])
    if (!is.null(ki) && !identical(unclass(ki), unclass(k1))) {
      desc <- function(k) paste(trimws(utils::capture.output(print(k))),
                                collapse = ", ")
      stop_arg(args[i], sprintf(paste0(
        "was made with another kernel than dictionary 1: dictionary 1 has ",
        "%s; dictionary %d has %s. Dictionaries of different kernels ",
        "cannot be merged (one kernel would replace the other's): make them ",
        "with the same kernel"), desc(k1), i, desc(ki)))
    }
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
# `quiet_scales`: no message when only the column scales differ (the
# chains of ksdt_chains(), each standardised on its pilot, as documented
# there).  `arg_names`: the caller's names of the dictionaries (`dicts`,
# default "..."), of `how` and of `size`, for the messages.
merge_dicts <- function(dicts, how = c("ksdt", "stein_thin"), size = NULL,
                        budget = 0, nthreads = 1L, arg_names = list(),
                        quiet_scales = FALSE) {
  how <- check_choice(how, c("ksdt", "stein_thin"), arg_names$how %||% "how")
  check_dicts(dicts, arg_names$dicts %||% rep("...", length(dicts)))
  if (how == "stein_thin" && !is.null(size)) {
    size <- check_count(size, arg_names$size %||% "size")
  }
  budget <- check_number(budget, "budget", lower = 0)
  rk <- dicts[[1L]]$kernel
  check_dict_kernels(dicts, arg_names$dicts %||% rep("...", length(dicts)))
  scale <- dicts[[1L]][["scale"]]
  same_k <- all(vapply(dicts, function(z) same_kernel(z$kernel, rk), TRUE))
  same_s <- all(vapply(dicts, function(z) identical(z[["scale"]], scale), TRUE))
  if (!same_k || !same_s) {
    # the same kernel, its heuristic preconditioner or the column scales
    # resolved per run (each chain's pilot): one kernel and one
    # standardisation for all
    allx <- do.call(rbind, lapply(dicts, `[[`, "points"))
    if (!is.null(scale)) scale <- standardize_columns(allx)$scale
    rk <- resolve_kernel(rk$kernel, scale_points(allx, scale))
    if (!same_k || !quiet_scales) {
      what <- c(if (!same_k) "its preconditioner (a median heuristic)",
                if (!same_s) "the column scales (standardize = TRUE)")
      message("merge: the dictionaries were made with the same kernel, but ",
              paste(what, collapse = " and "), " were fitted on each run's ",
              "points; using one kernel and standardisation resolved on the ",
              "union of their points")
    }
  }
  k <- vapply(dicts, function(z) {
    ksd_resolved(scale_points(z$points, scale), scale_scores(z$score, scale),
                 rk, nthreads)
  }, 0)
  o <- order(k)
  pts <- scr <- NULL
  # pos: the row of each point in its dictionary (for its labels)
  src <- data.frame(dictionary = integer(0), index = numeric(0),
                    pos = integer(0))
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
                                 index = dicts[[i]]$index[keep],
                                 pos = which(keep)))
  }
  best_n <- nrow(dicts[[o[1L]]]$points)
  if (how == "ksdt") {
    st <- ksdt_stream(ncol(pts), budget = budget, min_size = "constant",
                      min_size_coef = best_n, min_size_floor = 1,
                      kernel = rk$kernel, nthreads = nthreads, progress = FALSE,
                      standardize = scale %||% FALSE)
    stream_attach(st, rk, colnames(dicts[[1L]]$points), scale)
    push_rows(st, pts, scr)
    res <- stream_result(st, method = "KSDT merge",
                         merged_from = length(dicts), input_ksd = k)
    rows <- res$index
  } else {
    if (is.null(size)) size <- best_n
    size <- check_count(size, arg_names$size %||% "size", max = nrow(pts))
    # judged below against the dictionaries' samples, not their union
    th <- suppressWarnings(
      stein_thin(pts, scr, size, kernel = rk$kernel,
                 standardize = scale %||% FALSE, unique = TRUE,
                 nthreads = nthreads),
      classes = "kb_warning_distortion")
    res <- new_ksdt(pts[th$index, , drop = FALSE], scr[th$index, , drop = FALSE],
                    th$index, th$ksd, seq_along(th$index), th$kernel,
                    t = nrow(pts),
                    method = "Stein thinning of the merged dictionaries",
                    merged_from = length(dicts), input_ksd = k)
    res$scale <- th[["scale"]]
    rows <- th$index
  }
  res$source <- merge_source(src, rows)
  res$moments <- merged_report(res$points, dicts)
  res$streams <- merge_streams(dicts, k, src$dictionary[rows])
  merge_labels(res, dicts, src[rows, , drop = FALSE])
}

# The streams behind a merged dictionary, for plot(): each input
# dictionary's KSD and size per step (under its own kernel), its KSD under
# the merging kernel (`final`, the scale of the merged dictionary's KSD),
# its label (its chain when its points are of one chain, else its position
# among the inputs) and, for each merged point, the input it came from.
merge_streams <- function(dicts, input_ksd, from) {
  label <- vapply(seq_along(dicts), function(i) {
    ch <- unique(dicts[[i]][["chain"]])
    if (length(ch) == 1L) paste("chain", ch) else paste("dictionary", i)
  }, "")
  list(ksd = lapply(dicts, `[[`, "ksd"), size = lapply(dicts, `[[`, "size"),
       final = input_ksd, label = label, point = as.integer(from))
}

# The picture of a merged dictionary: the streams it was merged from, not
# the merge's own pass (whose steps are the union's points, an order of no
# meaning).  Panels (which): 1, each stream's KSD per step (log-log) with
# the merged dictionary's final KSD as a dashed line and each stream's
# final dictionary under the merging kernel as a circle at its last step
# (the line's scale: streams standardised or preconditioned on their own
# pilots have traces on their own scales); 2, each stream's size per step
# with the merged size dashed; 3, the merged points coloured by the stream
# they came from (over the streams' dictionaries in light colours where
# known; first two coordinates, or the value against the point for d = 1).
plot_streams <- function(st, merged, which = 1:3, dicts = NULL, ...) {
  k <- length(st$ksd)
  cols <- grDevices::hcl.colors(max(k, 2L), "Dark 3")[seq_len(k)]
  if (length(which) > 1L) {
    op <- graphics::par(mfrow = c(1L, length(which)))
    on.exit(graphics::par(op))
  }
  steps <- max(1L, vapply(st$ksd, length, 1L))
  fin <- if (is.null(merged)) NA_real_ else merged$ksd[length(merged$ksd)]
  if (1L %in% which) {
    all_ksd <- c(unlist(st$ksd), st$final, fin)
    rng <- range(all_ksd[is.finite(all_ksd) & all_ksd > 0])
    graphics::plot(NA, xlim = c(1, steps), ylim = rng, log = "xy",
                   xlab = "step of each stream", ylab = "KSD of the dictionary",
                   main = "KSD per stream", ...)
    for (i in seq_len(k)) {
      graphics::lines(seq_along(st$ksd[[i]]), st$ksd[[i]], col = cols[i])
      if (!is.null(st$final)) {
        graphics::points(length(st$ksd[[i]]), st$final[i], col = cols[i])
      }
    }
    if (is.finite(fin)) graphics::abline(h = fin, lty = 2)
    graphics::legend("topright", c(st$label, if (is.finite(fin)) "merged"),
                     col = c(cols, if (is.finite(fin)) "black"),
                     lty = c(rep(1, k), if (is.finite(fin)) 2),
                     bty = "n", cex = 0.8)
  }
  if (2L %in% which) {
    m <- if (is.null(merged)) NA_integer_ else nrow(merged$points)
    graphics::plot(NA, xlim = c(1, steps),
                   ylim = range(1, unlist(st$size), m, na.rm = TRUE),
                   xlab = "step of each stream", ylab = "dictionary size",
                   main = "size per stream")
    for (i in seq_len(k)) {
      graphics::lines(seq_along(st$size[[i]]), st$size[[i]], col = cols[i])
    }
    if (!is.na(m)) graphics::abline(h = m, lty = 2)
  }
  if (3L %in% which && !is.null(merged)) {
    p <- merged$points
    cn <- point_names(p)
    pc <- cols[st$point]
    if (ncol(p) >= 2L) {
      back <- if (!is.null(dicts)) lapply(dicts, function(z) z$points)
      allp <- do.call(rbind, c(list(p[, 1:2, drop = FALSE]),
                               lapply(back, function(b) b[, 1:2, drop = FALSE])))
      graphics::plot(allp[, 1L], allp[, 2L], type = "n", xlab = cn[1L],
                     ylab = cn[2L], main = "merged points by stream")
      for (i in seq_along(back)) {
        graphics::points(back[[i]][, 1:2, drop = FALSE], pch = 19, cex = 0.5,
                         col = grDevices::adjustcolor(cols[i], 0.25))
      }
      graphics::points(p[, 1L], p[, 2L], pch = 19, col = pc)
    } else {
      graphics::plot(seq_len(nrow(p)), p[, 1L], pch = 19, col = pc,
                     xlab = "merged point", ylab = cn[1L],
                     main = "merged points by stream")
    }
  }
  invisible(NULL)
}

# The moment report of a merged dictionary: against the dictionaries'
# samples pooled, when every dictionary has a report (else none).
merged_report <- function(p, dicts) {
  reps <- lapply(dicts, `[[`, "moments")
  if (any(vapply(reps, is.null, TRUE))) return(NULL)
  ref <- Reduce(moments_combine, lapply(reps, attr, "reference"))
  moment_report(p, NULL, ref, sprintf("the %d dictionaries' samples (%.0f points)",
                                      length(dicts), ref$n))
}

# For each point of a merged dictionary (`index`: rows of the union), the
# dictionary it came from and its index there.
merge_source <- function(src, index) {
  out <- src[index, c("dictionary", "index"), drop = FALSE]
  rownames(out) <- NULL
  out
}

# The chain, iteration and constrained draws of the merged points, carried
# from the dictionaries (`from`: the dictionary and row there of each
# point) when every dictionary has them; without them a merged point's
# provenance is its `source` (dictionary and index).
merge_labels <- function(res, dicts, from) {
  has <- function(field) {
    all(vapply(dicts, function(z) !is.null(z[[field]]), TRUE))
  }
  pick <- function(get) {
    unlist(Map(function(i, p) get(dicts[[i]])[p], from$dictionary, from$pos),
           use.names = FALSE)
  }
  if (has("chain") && has("iteration")) {
    res$chain <- as.integer(pick(function(z) z[["chain"]]))
    res$iteration <- as.integer(pick(function(z) z[["iteration"]]))
  }
  if (has("draws")) {
    reserved <- c(".chain", ".iteration", ".draw", ".log_weight")
    vars <- lapply(dicts, function(z) setdiff(names(z[["draws"]]), reserved))
    if (all(vapply(vars, identical, TRUE, vars[[1L]]))) {
      vals <- lapply(vars[[1L]], function(v) {
        pick(function(z) unclass(z[["draws"]])[[v]])
      })
      df <- structure(stats::setNames(vals, vars[[1L]]), class = "data.frame",
                      row.names = seq_len(nrow(from)))
      res$draws <- if (requireNamespace("posterior", quietly = TRUE)) {
        posterior::as_draws_df(df)
      } else df
    }
  }
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
#' "stein_thin"` instead selects `m` distinct points of the union by
#' greedy Stein thinning.
#'
#' All dictionaries must have the same dimension (and, where they name
#' their columns, the same names in the same order) and should come from the
#' same target (their scores are used as they are). When their kernels or
#' column scales differ (a heuristic preconditioner or `standardize = TRUE`
#' resolved on each run, e.g. on each chain's pilot in [ksdt_chains()]),
#' one kernel and one standardisation are resolved on the union of their
#' points, with a message: the mean absolute deviation scales of the union
#' when the first dictionary is standardised, none when it is not.
#' Dictionaries made with different kernels (another type, other
#' parameters, or another fixed preconditioner or bandwidth, e.g.
#' [imq_kernel()] and `gaussian_kernel(bandwidth = 1)`) are an error naming
#' the argument: one kernel would silently replace the other's; make them
#' with the same kernel.
#'
#' @param x,y,... `kb_ksdt` results ([ksdt()], [ksdt_sample()],
#'   [ksdt_result()], [ksdt_chains()]'s `chains`).
#' @param how `"ksdt"` or `"stein_thin"`.
#' @param m For `"stein_thin"`: the number of points (default: the size
#'   of the best dictionary).
#' @param size Deprecated name of `m` (a message once per session).
#' @param budget For `"ksdt"`: the KSDT budget of the merging pass.
#' @param nthreads Threads.
#' @return A `kb_ksdt` object; `source` gives, for each kept point, the
#'   dictionary it came from (its position among the arguments) and its
#'   index there; `input_ksd` the inputs' KSDs under the merging kernel.
#'   When every dictionary has them, each point keeps its `chain` and
#'   `iteration` labels and its constrained `draws` (dictionaries of a Stan
#'   fit with the same variables), so that [as.data.frame()] and
#'   [posterior::as_draws_df()] report the point's own chain and its
#'   constrained values; `streams` keeps each input's KSD and size per step,
#'   which [plot()][plot.kb_ksdt] shows.
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
c.kb_ksdt <- function(..., how = c("ksdt", "stein_thin"), m = NULL,
                      budget = 0, nthreads = 1, size) {
  if (!missing(size)) m <- deprecated_arg("size", "m", "c", size, is.null(m))
  dicts <- list(...)
  if (length(dicts) == 1L) {
    # nothing to merge, but the arguments are checked as for several
    check_choice(how, c("ksdt", "stein_thin"), "how")
    if (!is.null(m)) check_count(m, "m")
    check_number(budget, "budget", lower = 0)
    check_count(nthreads, "nthreads")
    check_dicts(dicts)
    return(dicts[[1L]])
  }
  merge_dicts(dicts, how = how, size = m, budget = budget,
              nthreads = check_count(nthreads, "nthreads"),
              arg_names = list(size = "m"))
}

#' @rdname c.kb_ksdt
#' @export
merge.kb_ksdt <- function(x, y, ..., how = c("ksdt", "stein_thin"),
                          m = NULL, budget = 0, nthreads = 1, size) {
  if (!missing(size)) m <- deprecated_arg("size", "m", "merge", size, is.null(m))
  dicts <- c(list(x, y), list(...))
  merge_dicts(dicts, how = how, size = m, budget = budget,
              nthreads = check_count(nthreads, "nthreads"),
              arg_names = list(dicts = c("x", "y",
                                         rep("...", length(dicts) - 2L)),
                               size = "m"))
}
