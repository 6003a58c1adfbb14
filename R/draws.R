# Labelled samples: what a user hands over as a sample (a matrix, a data
# frame, coda or posterior draws, a Stan fit) with its chain and iteration
# labels, and the scores that go with it, matched row for row.  The
# functions that take `x` and `score` start here (as_sample()); the points
# rule itself is as_points() in utils.R.

is_stan_fit <- function(x) inherits(x, c("stanfit", "brmsfit"))

# Chain and iteration labels carried by x (posterior draws, coda mcmc or
# mcmc.list, a data frame with .chain/.iteration columns), one per row of
# as_points(x), or NULL.  Draws whose every chain has one iteration (how
# as_draws_df() gives a selection, a dictionary or particles: see
# results.R) are a set of points without chain structure: NULL.
draws_labels <- function(x) {
  if (inherits(x, "mcmc.list")) {
    n <- vapply(x, NROW, 1L)
    return(list(chain = rep(seq_along(x), n),
                iteration = unlist(lapply(n, seq_len), use.names = FALSE)))
  }
  if (inherits(x, "draws") || has_draws_columns(x)) {
    if (!requireNamespace("posterior", quietly = TRUE)) return(NULL)
    df <- posterior::as_draws_df(x)
    if (nrow(df) > 1L && !anyDuplicated(df$.chain)) return(NULL)
    return(list(chain = as.integer(df$.chain),
                iteration = as.integer(df$.iteration)))
  }
  NULL
}

has_draws_columns <- function(x) {
  is.data.frame(x) && any(c(".chain", ".iteration", ".draw") %in% names(x))
}

# Chain labels given as an argument (for a matrix): one per row, whole
# numbers (kept as they are: 0-based labels stay 0, 1, ...), or a factor or
# strings (numbered 1, 2, ... in order of first appearance); iterations
# count the rows of each chain in their order.
chain_labels <- function(chain, n) {
  if (!(is.numeric(chain) || is.factor(chain) || is.character(chain))) {
    stop_arg("chain", sprintf(paste0(
      "must be a vector of chain labels (whole numbers, strings or a ",
      "factor), one per row of x; got an object of class %s"),
      class(chain)[1L]))
  }
  if (length(chain) != n) {
    stop_arg("chain", sprintf(paste0("must have one label per row of x ",
                                     "(%d); it has %d"), n, length(chain)))
  }
  if (anyNA(chain)) stop_arg("chain", "must not contain NA")
  if (is.numeric(chain) && any(chain != round(chain))) {
    stop_arg("chain", "must contain whole numbers, a factor or strings")
  }
  if (is.numeric(chain) && any(abs(chain) > .Machine$integer.max)) {
    stop_arg("chain", "must contain whole numbers within R's integer range ",
             "(or strings or a factor)")
  }
  # numbers are the user's labels and are kept (renumbering 0-based labels
  # 1, 2, ... made every chain's reported label one off)
  ch <- if (is.numeric(chain)) chain else {
    v <- as.character(chain)
    match(v, unique(v))
  }
  it <- stats::ave(seq_len(n), ch, FUN = seq_along)
  list(chain = as.integer(ch), iteration = as.integer(it))
}

# The one entry for samples with scores: x (anything as_points() takes, a
# stanfit / brmsfit, a kb_chain: one labelled chain with its scores, or a
# thinned set, KSDT dictionary or particles: unlabelled points with their
# scores when they carry them), score (a matrix or draws object of gradients, a
# function, a kb_target; missing for a Stan fit), chain (labels for a
# matrix).  Returns a kb_sample: x, score (a matrix when the gradients were
# given or computed, else what the user gave), chain and iteration (NULL
# without labels), draws (constrained draws of a Stan fit) and target (the
# Stan fit's kb_target).  gradients = FALSE: a Stan fit's gradients are not
# computed (score NULL), for functions that need no scores (mmd_thin()).
# A Stan fit's sample is computed once and kept (stan_sample()).
as_sample <- function(x, score, chain = NULL, arg = "x", score_arg = "score",
                      progress = FALSE, gradients = TRUE) {
  if (is_stan_fit(x)) {
    if (!missing(score) && !is.null(score)) {
      stop_arg(score_arg, "must be left out when ", arg, " is a Stan fit: ",
               "the gradients are computed from the fit")
    }
    if (!is.null(chain)) {
      stop_arg("chain", "must be NULL when ", arg, " is a Stan fit (its ",
               "own chains are used)")
    }
    s <- stan_sample(x, progress = progress, gradients = gradients)
    return(new_sample(s$x, s$score, s$chain, s$iteration, s$draws, s$target))
  }
  if (inherits(x, "kb_chain")) {
    if (!is.null(chain)) {
      stop_arg("chain", "must be NULL when ", arg, " is a chain from mala() ",
               "or rwm() (it is one chain)")
    }
    # one chain, labelled as such; its own scores unless others are given
    pts <- x[["x"]]
    if (missing(score) || is.null(score)) score <- x[["score"]]
    lab <- list(chain = rep(1L, nrow(pts)), iteration = seq_len(nrow(pts)))
    s <- match_score(score, pts, lab, score_arg)
    return(new_sample(pts, s, lab$chain, lab$iteration, NULL, NULL))
  }
  if (inherits(x, c("kb_thin", "kb_ksdt", "kb_ksdt_chains", "kb_particles"))) {
    if (!is.null(chain)) {
      stop_arg("chain", "must be NULL when ", arg, " is a ",
               describe_result_class(x), ": its points are not a chain")
    }
    # a set of points, unlabelled (a selection or particles is not a
    # chain); its own scores unless others are given
    set <- result_set(x, arg)
    pts <- result_points(set)
    if (missing(score) || is.null(score)) {
      score <- if (!inherits(set, "kb_particles")) set[["score"]]
    }
    s <- match_score(score, pts, NULL, score_arg)
    return(new_sample(pts, s, NULL, NULL, set[["draws"]], NULL))
  }
  lab <- draws_labels(x)
  pts <- as_points(x, arg)
  if (!is.null(chain)) {
    if (!is.null(lab)) {
      stop_arg("chain", "must be NULL when ", arg, " carries its own chain ",
               "labels (a draws or mcmc.list object)")
    }
    lab <- chain_labels(chain, nrow(pts))
  }
  if (missing(score)) score <- NULL
  s <- match_score(score, pts, lab, score_arg)
  new_sample(pts, s, lab$chain, lab$iteration, NULL, NULL)
}

new_sample <- function(x, score, chain, iteration, draws, target) {
  structure(list(x = x, score = score, chain = chain, iteration = iteration,
                 draws = draws, target = target), class = "kb_sample")
}

n_chains <- function(smp) if (is.null(smp$chain)) 1L else length(unique(smp$chain))

# Scores given as gradients, matched to the rows of x.  A draws object (or
# mcmc.list, or data frame with .chain/.iteration) of gradients is matched
# by its chain and iteration labels and its variable names; a plain matrix
# must be in the row order of x: for multi-chain draws, chain after chain
# (the order of posterior::as_draws_matrix()), and the common mistake of
# the iteration-major order is caught by the Stein identity
# (score_order_check()).  Functions and targets pass through.
match_score <- function(score, x, lab, arg) {
  if (is.null(score) || is.function(score) || inherits(score, "kb_target")) {
    return(score)
  }
  if (inherits(score, c("draws", "mcmc.list", "mcmc")) ||
      has_draws_columns(score)) {
    return(match_score_draws(score, x, lab, arg))
  }
  if (!(is.data.frame(score) || is.matrix(score) || is.numeric(score))) {
    return(score)   # check_score() words the error
  }
  s <- score_points(score, x, arg)
  if (!is.null(colnames(s)) && !is.null(colnames(x)) &&
      !identical(colnames(s), colnames(x))) {
    stop_arg(arg, "has columns named ", paste(colnames(s), collapse = ", "),
             " but x has ", paste(colnames(x), collapse = ", "),
             ": give them in the same order")
  }
  if (!is.null(lab)) score_order_check(x, s, lab, arg)
  s
}

match_score_draws <- function(score, x, lab, arg) {
  slab <- draws_labels(score)
  s <- as_points(score, arg, ncol(x))
  if (is.null(lab) && is.null(slab)) {
    # both sets of points without chains: matched row for row
    return(match_score(unclass(s), x, NULL, arg))
  }
  if (is.null(lab)) {
    stop_arg(arg, "is a draws object with chain and iteration labels, but ",
             "x has none: give x as a draws object too, or both as matrices")
  }
  if (nrow(s) != nrow(x)) {
    stop_arg(arg, sprintf("has %d draws; x has %d", nrow(s), nrow(x)))
  }
  cx <- colnames(x)
  cs <- colnames(s)
  if (!is.null(cx) && !is.null(cs)) {
    if (!setequal(cx, cs) || anyDuplicated(cs)) {
      stop_arg(arg, "must have the same variables as x (",
               paste(cx, collapse = ", "), "); it has ",
               paste(cs, collapse = ", "))
    }
    s <- s[, cx, drop = FALSE]
  } else if (ncol(s) != ncol(x)) {
    stop_arg(arg, sprintf("must have %d variables (as x); it has %d",
                          ncol(x), ncol(s)))
  }
  kx <- paste(lab$chain, lab$iteration)
  ks <- paste(slab$chain, slab$iteration)
  if (anyDuplicated(ks)) {
    stop_arg(arg, "has repeated (chain, iteration) labels")
  }
  i <- match(kx, ks)
  if (anyNA(i)) {
    j <- which(is.na(i))[1L]
    stop_arg(arg, sprintf(paste0("has no gradient for chain %d, iteration %d ",
                                 "of x: the draws do not match"),
                          lab$chain[j], lab$iteration[j]))
  }
  s <- s[i, , drop = FALSE]
  dimnames(s) <- list(NULL, cx)
  s
}

# Stein's identity E_p[s(x)'(x - c)] = -d holds for the scores of the
# points they belong to, and fails (about 0) when scores are paired with
# the wrong points.  For multi-chain x with a score matrix, the given row
# order is compared with the iteration-major order (chains interleaved, the
# order of a draws array flattened the other way round); when only the
# latter satisfies the identity, the scores are in the wrong order.
score_order_check <- function(x, s, lab, arg) {
  k <- length(unique(lab$chain))
  n <- nrow(x)
  # chains numbered 1..k in the order they come in the rows (their labels
  # need not be 1..k: chains 2 and 4 of a subset, 0-based labels), the
  # order in which interleaved scores of the same chains would come
  cr <- match(lab$chain, unique(lab$chain))
  if (k < 2L || n %% k != 0L || any(tabulate(cr, k) != n / k)) {
    return(invisible())
  }
  xc <- x - rep(colMeans(x), each = n)
  ident <- function(sc) -sum(sc * xc) / (n * ncol(x))
  # iteration-major: the row of (chain c, t-th iteration) is (t - 1) k + c
  o <- order(cr, lab$iteration)
  tr <- integer(n)
  tr[o] <- sequence(tabulate(cr, k))   # rank of each row within its chain
  alt <- s[(tr - 1L) * k + cr, , drop = FALSE]
  g <- ident(s)
  a <- ident(alt)
  if (is.finite(g) && is.finite(a) && abs(a - 1) < 0.25 && abs(g - 1) > 0.5) {
    stop_arg(arg, sprintf(paste0(
      "does not seem to be in the row order of x: x holds %d chains one ",
      "after the other (the order of posterior::as_draws_matrix()), and the ",
      "scores look iteration-major (chains interleaved). Stein's identity ",
      "E[score'(x - mean)] = -d gives %.2f d for the rows as given and %.2f d ",
      "for the iteration-major order. Reorder the scores, or give them as a ",
      "draws object with the same chains and iterations as x"), k, -g, -a))
  }
  invisible()
}

# The rows the median heuristics of a kernel use: at most 1000 evenly
# spaced rows (resolve_kernel()'s default) for one chain; for several, the
# same number of evenly spaced iterations of each chain, so that the
# kernel does not depend on the order in which the chains come.
heuristic_rows <- function(smp) {
  k <- n_chains(smp)
  if (k < 2L) return(NULL)
  per <- max(2L, 1000L %/% k)
  unlist(lapply(chain_rows(smp), function(r) {
    if (length(r) <= per) r else r[floor(seq(0, length(r) - 1, length.out = per)) + 1L]
  }), use.names = FALSE)
}

# Row numbers of each chain, in iteration order, chains in label order.
chain_rows <- function(smp) {
  if (is.null(smp$chain)) return(list(all = seq_len(nrow(smp$x))))
  o <- order(smp$chain, smp$iteration)
  split(o, smp$chain[o])
}

# The labels (and constrained draws) of some rows of a sample, as the
# fields a result carries for its points.
sample_labels <- function(smp, rows) {
  list(chain = if (!is.null(smp$chain)) smp$chain[rows],
       iteration = if (!is.null(smp$iteration)) smp$iteration[rows],
       draws = if (!is.null(smp$draws)) smp$draws[rows, ])
}

# A flow started from a Stan fit (`x0`): the same call on the fit's
# unconstrained draws, with the fit's target as `score_arg` when that was
# not given; the particles also come as constrained draws (`draws`).
stan_flow <- function(call, env, fit, score_arg = NULL) {
  call$x0 <- unconstrain_draws(fit)
  if (!is.null(score_arg) && is.null(call[[score_arg]])) {
    call[[score_arg]] <- stan_target(fit)
  }
  res <- eval(call, env)
  # particles whose transform overflows cannot be constrained: the flow's
  # work is kept, without draws, with a warning saying why
  res$draws <- tryCatch(constrain_draws(fit, res$x), kb_error_arg = function(e) {
    warning(sprintf(paste0("the particles are returned without constrained ",
                           "draws: %s"), conditionMessage(e)), call. = FALSE)
    NULL
  })
  res
}

# Points given as a Stan fit (a flow's target sample y): its unconstrained
# draws.
stan_points <- function(x) if (is_stan_fit(x)) unconstrain_draws(x) else x
