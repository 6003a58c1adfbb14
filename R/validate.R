# Result objects checked before their methods use them.  A result is a
# list of fields that fit together (a selection's indices within its
# sample, its points with d columns, a test's null of n_boot statistics);
# one edited by hand (x$index <- x$index[-1], x$points <- x$points[, 1],
# r$boot <- numeric(0), class(th) <- "kb_ksdt") used to print, plot or
# convert into something that disagreed with it, or failed deep inside
# with a message of R's ("argument is of length zero", "need finite 'xlim'
# values").  Every print, summary, plot and conversion method calls
# check_result() first, which reads the class's field rules in
# result_specs and raises a kb_error_arg naming the object and the field.

# ---- field rules --------------------------------------------------------------
# A rule is function(v, x): NULL when the field's value v fits the object
# x, else what v should be.  The checker reports a missing field (NULL)
# itself unless the rule is optional (vf_opt()).  Sizes are a field's name
# (its value in x) or a function of x with a "what" attribute naming it.

vf_size <- function(s, x) {
  if (is.function(s)) s(x) else if (is.character(s)) x[[s]] else s
}

vf_size_name <- function(s, x) {
  if (is.numeric(s)) return(format(s))
  sprintf("%s = %s", if (is.function(s)) attr(s, "what") else s,
          format(vf_size(s, x)))
}

# The number of rows of a field, as a size.
vf_rows <- function(field) {
  structure(function(x) NROW(x[[field]]), what = sprintf("nrow(%s)", field))
}

# The length of a field, as a size.
vf_len <- function(field) {
  structure(function(x) length(x[[field]]),
            what = sprintf("length(%s)", field))
}

# A test's parameter (n_boot, J), as a size.
vf_parameter <- function(what) {
  structure(function(x) x[["parameter"]][[1L]], what = what)
}

# A field that may be NULL (absent on some routes); rules that handle
# NULL themselves are marked optional with vf_nullable().
vf_opt <- function(rule) {
  vf_nullable(function(v, x) if (is.null(v)) NULL else rule(v, x))
}
vf_nullable <- function(rule) structure(rule, optional = TRUE)

vf_whole <- function(v) is.numeric(v) && !anyNA(v) && all(is.finite(v)) &&
  all(v == round(v))

vf_count <- function(min = 0) function(v, x) {
  if (length(v) == 1L && vf_whole(v) && v >= min) return(NULL)
  sprintf("must be one whole number of at least %d", min)
}

vf_number <- function(lower = -Inf, upper = Inf) function(v, x) {
  if (is.numeric(v) && length(v) == 1L && is.finite(v) && v >= lower &&
      v <= upper) return(NULL)
  if (is.finite(lower) || is.finite(upper)) {
    return(sprintf("must be one finite number in [%s, %s]", format(lower),
                   format(upper)))
  }
  "must be one finite number"
}

vf_string <- function() function(v, x) {
  if (is.character(v) && length(v) == 1L && !is.na(v)) NULL else
    "must be one string"
}

vf_flag <- function() function(v, x) {
  if (is.logical(v) && length(v) == 1L && !is.na(v)) NULL else
    "must be TRUE or FALSE"
}

vf_class <- function(cls) function(v, x) {
  if (inherits(v, cls)) NULL else sprintf("must be a %s object", cls)
}

vf_list <- function() function(v, x) if (is.list(v)) NULL else "must be a list"

# A numeric vector of length len (NULL: any length, at least min_len),
# finite when asked.
vf_numeric <- function(len = NULL, finite = FALSE, min_len = 0L) {
  function(v, x) {
    ok_len <- if (is.null(len)) length(v) >= min_len else
      length(v) == vf_size(len, x)
    if (is.numeric(v) && is.null(dim(v)) && ok_len &&
        (!finite || all(is.finite(v)))) return(NULL)
    sprintf("must be a numeric vector%s%s", if (finite) " of finite values"
            else "", if (is.null(len)) {
              if (min_len > 0L) sprintf(" of length at least %d", min_len) else ""
            } else sprintf(" of length %s", vf_size_name(len, x)))
  }
}

# A numeric matrix with the given numbers of rows and columns (NULL: any).
vf_matrix <- function(rows = NULL, cols = NULL) function(v, x) {
  ok <- is.matrix(v) && is.numeric(v) &&
    (is.null(rows) || nrow(v) == vf_size(rows, x)) &&
    (is.null(cols) || ncol(v) == vf_size(cols, x))
  if (ok) return(NULL)
  dims <- c(if (!is.null(rows)) paste(vf_size_name(rows, x), "rows"),
            if (!is.null(cols)) paste(vf_size_name(cols, x), "columns"))
  paste0("must be a numeric matrix",
         if (length(dims)) paste(" with", paste(dims, collapse = " and ")))
}

# Row indices: len whole numbers in 1..upper.
vf_index <- function(len, upper) function(v, x) {
  if (is.numeric(v) && is.null(dim(v)) && length(v) == vf_size(len, x) &&
      vf_whole(v) && all(v >= 1 & v <= vf_size(upper, x))) return(NULL)
  sprintf("must be %s row numbers in 1..%s", vf_size_name(len, x),
          vf_size_name(upper, x))
}

# Labels or draws of the points, one per point (a vector, or a table's
# rows).
vf_per_point <- function(len) function(v, x) {
  if (NROW(v) == vf_size(len, x)) NULL else
    sprintf("must have one entry per point (%s)", vf_size_name(len, x))
}

# A result of class cls whose own fields fit together.
vf_result <- function(cls) function(v, x) {
  if (!inherits(v, cls)) return(sprintf("must be a %s object", cls))
  p <- result_problem(v)
  if (is.null(p)) NULL else sprintf("is a %s whose field '%s' %s", cls,
                                    p$field, p$why)
}

# A list of results of class cls (NULL entries allowed when null_ok).
vf_results <- function(cls, null_ok = FALSE) function(v, x) {
  if (!is.list(v)) return(sprintf("must be a list of %s objects", cls))
  one <- vf_result(cls)
  for (i in seq_along(v)) {
    if (null_ok && is.null(v[[i]])) next
    why <- one(v[[i]], x)
    if (!is.null(why)) return(sprintf("has element %d that %s", i, why))
  }
  NULL
}

# A selection's discrepancy path: ksd or mmd, one finite value per point.
vf_path <- function(other) vf_nullable(function(v, x) {
  if (is.null(v) && is.null(x[[other]])) {
    return(sprintf("is missing, and so is '%s': a selection has one of them",
                   other))
  }
  if (is.null(v)) NULL else vf_numeric("m", finite = TRUE)(v, x)
})

# A quadratic KSD test's bootstrap statistics: n_boot finite numbers (the
# incomplete test has none).
vf_boot <- function() vf_nullable(function(v, x) {
  if (identical(x[["test"]], "incomplete")) return(NULL)
  vf_numeric(vf_parameter("n_boot"), finite = TRUE)(v, x)
})

# ---- the fields of each class ----------------------------------------------------
# Checked in this order, so that a size is checked before the fields it
# measures.  A class listed here and its subclasses' entries all apply.

result_specs <- list(
  kb_thin = list(
    method = vf_string(), n = vf_count(1), d = vf_count(1), m = vf_count(),
    index = vf_index("m", "n"), points = vf_matrix("m", "d"),
    sample = vf_matrix("n", "d"), score = vf_opt(vf_matrix("m", "d")),
    ksd = vf_path("mmd"), mmd = vf_path("ksd"),
    kernel = vf_class("kb_resolved_kernel"), scale = vf_opt(vf_numeric("d")),
    unique = vf_flag(), chain = vf_opt(vf_per_point("m")),
    iteration = vf_opt(vf_per_point("m")), draws = vf_opt(vf_per_point("m")),
    weights = vf_opt(vf_numeric("m")), moments = vf_opt(vf_class("kb_moments"))),
  kb_stein_points = list(n_eval = vf_numeric(), optimizer = vf_string()),
  kb_ksdt = list(
    d = vf_count(1), points = vf_matrix(cols = "d"),
    score = vf_matrix(vf_rows("points"), "d"),
    index = vf_numeric(vf_rows("points")), ksd = vf_numeric(),
    size = vf_numeric(vf_len("ksd")), t = vf_number(0),
    evals = vf_opt(vf_number(0)),
    kernel = vf_class("kb_resolved_kernel"), scale = vf_opt(vf_numeric("d")),
    method = vf_opt(vf_string()), chain = vf_opt(vf_per_point(vf_len("index"))),
    iteration = vf_opt(vf_per_point(vf_len("index"))),
    draws = vf_opt(vf_per_point(vf_len("index"))),
    weights = vf_opt(vf_numeric(vf_len("index"))),
    moments = vf_opt(vf_class("kb_moments"))),
  kb_chain = list(
    d = vf_count(1), x = vf_matrix(cols = "d"),
    score = vf_matrix(vf_rows("x"), "d"),
    log_density = vf_opt(vf_numeric(vf_rows("x"))), sampler = vf_string(),
    accept_rate = vf_number(0, 1), step = vf_number(0), n_iter = vf_count(),
    chain = vf_opt(vf_per_point(vf_rows("x"))),
    iteration = vf_opt(vf_per_point(vf_rows("x"))),
    draws = vf_opt(vf_per_point(vf_rows("x")))),
  kb_particles = list(
    x = vf_matrix(), method = vf_string(), n_iter = vf_count(),
    objective = vf_opt(vf_numeric()), draws = vf_opt(vf_per_point(vf_rows("x"))),
    weights = vf_opt(vf_numeric(vf_rows("x")))),
  kb_ksdt_chains = list(
    chains = vf_results("kb_ksdt", null_ok = TRUE),
    merged = vf_opt(vf_result("kb_ksdt")), merge = vf_string()),
  kb_ksd_test = list(
    statistic = vf_number(), parameter = vf_number(0), p.value = vf_number(0, 1),
    estimate = vf_numeric(1L), method = vf_string(), n = vf_count(1),
    test = vf_string(), boot = vf_boot(),
    kernel = vf_class("kb_resolved_kernel"), standardize = vf_flag()),
  kb_ksd_test_by_chain = list(
    pooled = vf_result("kb_ksd_test"), chains = vf_results("kb_ksd_test"),
    type = vf_string(), kernel = vf_class("kb_resolved_kernel"),
    standardize = vf_flag()),
  kb_fssd_test = list(
    statistic = vf_number(), parameter = vf_count(1), p.value = vf_number(0, 1),
    estimate = vf_numeric(1L), method = vf_string(), n = vf_count(1),
    locations = vf_matrix(vf_parameter("J")),
    bandwidth = vf_number(0), null = vf_numeric(finite = TRUE, min_len = 1L))
)

# The results that hold no points: tests per chain, paths, comparisons,
# cross-validations, filters and weights (kb_ksd_by_chain, a data frame,
# and kb_weights, a vector, keep their fields as attributes: "@name").
vf_self_len <- structure(function(x) length(x), what = "its length")

result_specs <- c(result_specs, list(
  kb_ksd_path = list(
    n = vf_count(1), d = vf_count(1), ksd = vf_numeric("n"),
    kernel = vf_class("kb_resolved_kernel"), standardize = vf_flag(),
    scale = vf_opt(vf_numeric("d")), chain = vf_opt(vf_per_point("n")),
    iteration = vf_opt(vf_per_point("n"))),
  kb_ksd_compare = list(
    ksd = vf_number(), reference = vf_number(), m = vf_count(1),
    n = vf_count(1), kernel = vf_string()),
  kb_kbr_cv = list(
    table = vf_class("data.frame"), best = vf_class("data.frame"),
    folds = vf_count(1), criterion = vf_string()),
  kb_filter = list(
    method = vf_string(), mean = vf_matrix(),
    sd = vf_matrix(vf_rows("mean"), structure(function(x) ncol(x$mean),
                                              what = "ncol(mean)"))),
  kb_ksd_by_chain = list(
    "@kernel" = vf_class("kb_resolved_kernel"), "@type" = vf_string(),
    "@n_boot" = vf_opt(vf_count())),
  kb_weights = list(
    "." = vf_numeric(), "@chain" = vf_opt(vf_per_point(vf_self_len)),
    "@iteration" = vf_opt(vf_per_point(vf_self_len)),
    "@moments" = vf_opt(vf_class("kb_moments")))
))

# The classes whose fields are attributes of a vector or data frame.
result_attr_classes <- c("kb_ksd_by_chain", "kb_weights")

# A field of x: "@name" an attribute, "." the values, else an element.
result_field <- function(x, f) {
  if (startsWith(f, "@")) return(attr(x, substring(f, 2L), exact = TRUE))
  if (f == ".") return(as.vector(unclass(x)))
  x[[f]]
}

# ---- the check -------------------------------------------------------------------

# NULL when x's fields fit together, else list(class, field, why) for the
# first that does not.
result_problem <- function(x) {
  classes <- rev(intersect(class(x), names(result_specs)))
  for (k in classes) {
    if (!is.list(x) && !k %in% result_attr_classes) {
      return(list(class = k, field = NULL,
                  why = sprintf("is of type %s, not a list of fields",
                                typeof(x))))
    }
    spec <- result_specs[[k]]
    for (f in names(spec)) {
      v <- result_field(x, f)
      rule <- spec[[f]]
      why <- if (is.null(v) && !isTRUE(attr(rule, "optional"))) "is missing"
        else rule(v, x)
      if (!is.null(why)) return(list(class = k, field = f, why = why))
    }
  }
  NULL
}

# Called first by every method of a result class: an error naming `arg`
# and the field when the object has been edited so that its fields no
# longer fit together.
check_result <- function(x, arg = "x") {
  p <- result_problem(x)
  if (is.null(p)) return(invisible(x))
  if (is.null(p$field)) {
    stop_arg(arg, sprintf("has been edited: it has class %s but %s",
                          p$class, p$why))
  }
  what <- if (p$field == ".") "values" else if (startsWith(p$field, "@"))
    sprintf("attribute '%s'", substring(p$field, 2L)) else
    sprintf("field '%s'", p$field)
  stop_arg(arg, sprintf(paste0("has been edited: its %s %s, so its ",
                               "fields do not fit together as those of a %s ",
                               "result do"), what, p$why, p$class))
}
