# Many chains and many machines: ksdt_chains() runs KSDT chains with the
# future framework and merges their dictionaries (R/merge.R); the
# kb_ksdt_chains class.

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
#' Standardisation: with `standardize = TRUE` ([ksdt_sample()]'s default)
#' each chain takes its column scales from its own pilot chain, as it does
#' a heuristic preconditioner, and the merge then standardises by the mean
#' absolute deviations of the union of the dictionaries (see [c.kb_ksdt()];
#' without the message `c()` gives). Give `standardize = ` a vector of scales (say from a
#' short [rwm()] run) for one standardisation throughout.
#'
#' A chain that fails (an error in the target's closures, say) does not
#' lose the others: its error is reported in a warning with the chain
#' number and kept in `errors`, and the merge uses the chains that
#' finished.
#'
#' @param target A [kb_target()].
#' @param x0 Starting points, one row per chain: a vector is one chain when
#'   the target's dimension is above 1, and one start per element when it
#'   is 1 (see 'Points and samples' in [kernbayes-package]).
#' @param n_iter Iterations per chain.
#' @param ... Further arguments to [ksdt_sample()] (`sampler`, `step_size`,
#'   `min_size` or `size`, `kernel`, `regularize`, ...).
#' @param merge `"ksdt"` (merge the dictionaries by a KSDT pass),
#'   `"stein_thin"` (Stein thinning of their union to `merge_size` points)
#'   or `"none"`.
#' @param merge_size For `merge = "stein_thin"` (an error with another
#'   `merge`): the size of the merged Stein thinning.
#' @param nthreads Threads per chain.
#' @param progress Show progress, one unit per finished chain (see
#'   'Progress' in [kernbayes-package]); chains run in future workers report
#'   through progressr. Default `NULL` (automatic).
#' @section Running on a cluster:
#' The chains (like the blocks of [ksd_blocks()] and the folds of
#' [kbr_cv()]) are futures, so the code that runs them on this machine
#' runs them on a cluster scheduler once a plan says so, through
#' future.batchtools and a batchtools template, a job script with
#' placeholders. The package ships a minimal one for Slurm,
#' `system.file("templates", "slurm.tmpl", package = "kernbayes")`
#' (resources: `ncpus`, `memory` in MB, `walltime` in seconds, `partition`,
#' `modules`); copy and edit it for a site's needs. On the cluster's login
#' node:
#' ```
#' future::plan(future.batchtools::batchtools_slurm,
#'   template = system.file("templates", "slurm.tmpl", package = "kernbayes"),
#'   resources = list(ncpus = 4, memory = 4000, walltime = 3600))
#' set.seed(1)
#' fit <- ksdt_chains(tg, x0, n_iter = 1e5, nthreads = 4)
#' ```
#' Each chain is then one Slurm job (`nthreads` matching `ncpus`); the
#' chains are the same as with the sequential plan for the same seed (the
#' tests check this with `future.batchtools::batchtools_local`, which runs
#' the jobs as local processes). Progress of jobs is relayed through
#' progressr when the jobs finish. Other schedulers (SGE, LSF, PBS/Torque)
#' work the same way with their batchtools template and plan.
#'
#' A Stan target ([stan_target()]) cannot travel to future workers in other
#' processes (multisession, cluster, batchtools): it holds the fit's model
#' instance, an external pointer that does not survive serialisation.
#' `ksdt_chains()` refuses it under such a plan before any chain runs (an
#' error of class `kb_error_arg` naming `target`); run it with a sequential
#' or multicore plan (forked workers share the session's memory). Where
#' the workers need only the draws and their gradients, the fit itself
#' works under any plan: [ksd_blocks()] on a fit computes them in this
#' session and sends the workers matrices.
#'
#' @return An object of class `kb_ksdt_chains`: `chains` (the `kb_ksdt` of
#'   each chain; `NULL` for a failed one), `errors` (the failed chains'
#'   conditions, named by chain number), `merged` (a `kb_ksdt`, or `NULL`
#'   with `merge = "none"` or when the merge fails, e.g. a `merge_size`
#'   above the number of distinct points of the chains' dictionaries: a
#'   warning says why, and the chains are kept;
#'   its `chain` and `iteration` give the chain and iteration of each kept
#'   point, as do each chain's),
#'   `elapsed` (seconds); `print`, `summary` and `plot` methods.
#' @examples
#' tg <- gaussian_mixture_target(means = rbind(c(-2, 0), c(2, 0)))
#' set.seed(1)
#' fit <- ksdt_chains(tg, x0 = rbind(c(-2, 0), c(2, 0)), n_iter = 500)
#' fit
#' # not run by R CMD check: starting two background R sessions takes
#' # seconds (10 s on a busy machine), more than the chains
#' \dontrun{
#' if (requireNamespace("future", quietly = TRUE)) {
#'   oplan <- future::plan(future::multisession, workers = 2)
#'   set.seed(1)
#'   fit2 <- ksdt_chains(tg, x0 = rbind(c(-2, 0), c(2, 0)), n_iter = 500)
#'   future::plan(oplan)
#'   identical(fit$merged$points, fit2$merged$points)
#' }
#' }
#' @export
ksdt_chains <- function(target, x0, n_iter, ...,
                        merge = c("ksdt", "stein_thin", "none"),
                        merge_size = NULL, nthreads = 1,
                        progress = NULL) {
  check_target(target)
  check_target_futures(target, "target")
  x0 <- as_points(x0, "x0", target$dim)
  if (ncol(x0) != target$dim) {
    stop_arg("x0", sprintf("must have %d columns (the target's dimension), one row per chain; it has %d",
                           target$dim, ncol(x0)))
  }
  if (nrow(x0) < 1L) stop_arg("x0", "must have at least one row (one chain)")
  n_iter <- check_count(n_iter, "n_iter")
  merge <- check_choice(merge, c("ksdt", "stein_thin", "none"), "merge")
  nthreads <- check_count(nthreads, "nthreads")
  progress <- check_progress(progress)
  dots <- list(...)
  allowed <- setdiff(names(formals(ksdt_sample)),
                     c("target", "x0", "n_iter", "nthreads", "progress"))
  nm <- names(dots)
  if (length(dots) && (is.null(nm) || any(nm == "") || !all(nm %in% allowed))) {
    bad <- if (is.null(nm) || any(nm == "")) "an unnamed argument" else
      paste(sQuote(setdiff(nm, allowed), FALSE), collapse = ", ")
    stop_arg("...", "must be named arguments of ksdt_sample() (",
             paste(allowed, collapse = ", "), "); got ", bad)
  }
  if (anyDuplicated(nm)) {
    stop_arg("...", "must name each argument of ksdt_sample() once; ",
             sQuote(nm[anyDuplicated(nm)], FALSE), " is given twice")
  }
  if (!is.null(merge_size)) {
    if (merge != "stein_thin") {
      stop_arg("merge_size", "is used only with merge = \"stein_thin\" ",
               "(the size of the merged Stein thinning)")
    }
    merge_size <- check_count(merge_size, "merge_size")
  }
  # every argument checked before any chain runs: each start, the rest,
  # then (the first closure calls) the log density at each start: a chain
  # cannot start where it is -Inf
  for (i in seq_len(nrow(x0))) check_x0(x0[i, ], target)
  ksdt_sample_check(c(list(target = target, x0 = x0[1L, ], n_iter = n_iter,
                           nthreads = nthreads, progress = FALSE), dots))
  lp <- target_log_density(target, x0)
  if (!all(is.finite(lp))) {
    i <- which(!is.finite(lp))[1L]
    stop_arg("x0", sprintf(paste0("row %d is a start where the target's log ",
                                  "density is %s; start every chain where ",
                                  "it is finite"), i, format(lp[i])))
  }
  if ("step" %in% names(dots)) {
    # reported once above, not again by every worker
    dots$step_size <- dots$step
    dots$step <- NULL
  }
  run_one <- function(i, relay) {
    # each chain's report is kept; the merged dictionary's is warned of
    r <- tryCatch(suppressWarnings(
      do.call(ksdt_sample, c(list(target = target, x0 = x0[i, ],
                                  n_iter = n_iter, nthreads = nthreads,
                                  progress = FALSE), dots)),
      classes = "kb_warning_distortion"), error = function(e) e)
    relay(1)
    r
  }
  t0 <- proc.time()[["elapsed"]]
  res <- progress_lapply(seq_len(nrow(x0)), run_one, nrow(x0),
                         "KSDT chains", progress, seed = TRUE)
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
  chains <- lapply(seq_along(res), function(i) {
    z <- res[[i]]
    if (inherits(z, "error")) return(NULL)
    z$chain <- rep(i, length(z$index))
    z$iteration <- z$index
    z
  })
  ok <- chains[!failed]
  # a merge that fails (a merge_size above the number of distinct points,
  # known only now) must not lose the chains: they are returned without a
  # merged dictionary, with a warning
  merged <- if (merge == "none") NULL else if (length(ok) == 1L) ok[[1L]] else
    tryCatch(merge_dicts(ok, how = merge, size = merge_size,
                         nthreads = nthreads,
                         arg_names = list(how = "merge", size = "merge_size"),
                         quiet_scales = TRUE),
             kb_error = function(e) {
               warning(sprintf(paste0(
                 "the chains' dictionaries were not merged (%s); the ",
                 "chains are kept in $chains, and c() merges them (see ",
                 "?c.kb_ksdt)"), conditionMessage(e)), call. = FALSE)
               NULL
             })
  if (!is.null(merged$source)) {
    merged$source$dictionary <- which(!failed)[merged$source$dictionary]
    merged$chain <- merged$source$dictionary
    merged$iteration <- merged$source$index
  }
  out <- new_ksdt_chains(chains, errors, merged, merge, n_iter, x0, elapsed)
  if (!is.null(merged)) warn_distortion(merged, "ksdt_chains")
  out
}

# The one constructor of kb_ksdt_chains: each chain's dictionary (NULL for
# a chain that failed), the errors, the merged dictionary (NULL: none),
# the merge rule, the run's settings and time, and the futures' workers.
new_ksdt_chains <- function(chains, errors, merged, merge, n_iter, x0,
                            elapsed) {
  structure(list(chains = chains, errors = errors, merged = merged,
                 merge = merge, n_iter = n_iter, x0 = x0, elapsed = elapsed,
                 workers = if (requireNamespace("future", quietly = TRUE))
                   future::nbrOfWorkers() else 1L),
            class = "kb_ksdt_chains")
}

final_ksd <- function(z) if (is.null(z)) NA_real_ else z$ksd[length(z$ksd)]

#' @export
summary.kb_ksdt_chains <- function(object, ...) {
  check_result(object, "object")
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
  check_result(x)
  print(summary(x))
  if (length(x$errors)) {
    cat("errors:\n")
    for (nm in names(x$errors)) {
      cat(sprintf("  chain %s: %s\n", nm, conditionMessage(x$errors[[nm]])))
    }
  }
  invisible(x)
}

#' @rdname plot.kb_ksdt
#' @export
plot.kb_ksdt_chains <- function(x, which = 1:3, ...) {
  check_result(x)
  ok <- which(!vapply(x$chains, is.null, TRUE))
  chains <- x$chains[ok]
  merged <- x$merged
  st <- list(ksd = lapply(chains, `[[`, "ksd"),
             size = lapply(chains, `[[`, "size"),
             final = if (!is.null(merged$streams)) merged$streams$final,
             label = paste("chain", ok),
             point = if (!is.null(merged)) match(merged[["chain"]], ok))
  plot_streams(st, merged, which, dicts = chains, ...)
  invisible(x)
}
