# Streams, kernels and settings shared by test-ksdt.R and test-spmcmc.R.

# An AR(1) stream for a standard Gaussian target started away from the mode,
# with slightly wrong (noisy) scores so that the kernel values are generic.
make_stream <- function(n, d, rho = 0.8, start = 2, noise = 0.2) {
  x <- matrix(0, n, d)
  x[1, ] <- start
  for (t in 2:n) x[t, ] <- rho * x[t - 1, ] + sqrt(1 - rho^2) * stats::rnorm(d)
  list(x = x, s = -x + noise * matrix(stats::rnorm(n * d), n, d))
}

const_fun <- function(v) function(t) rep(v, length(t))

# Package kernels with the numbers the reference needs (fixed preconditioners).
ksdt_kernels <- list(
  imq_id = list(make = function() imq_kernel(), type = "imq", c = 1,
                beta = -0.5, L = function(d) diag(d)),
  imq_num = list(make = function() imq_kernel(c = 0.8, beta = -0.3, precon = 0.6),
                 type = "imq", c = 0.8, beta = -0.3, L = function(d) diag(d) / 0.6),
  gauss_num = list(make = function() gaussian_kernel(precon = 1.5),
                   type = "gaussian", c = 1, beta = -0.5,
                   L = function(d) diag(d) / 1.5)
)

# Budgets x minimum-size rules; every budget kind and every rule appears.
ksdt_configs <- list(
  list(budget = 0, min_size = "sqrt", coef = 1, floor = 10),
  list(budget = 1e-3, min_size = "linear", coef = 0.5, floor = 10),
  list(budget = function(t) 0.05 / t, min_size = "constant", coef = 20, floor = 10),
  list(budget = 0, min_size = function(t) 5 + t^0.6, coef = 1, floor = 10),
  list(budget = 1e-3, min_size = "sqrt", coef = 2, floor = 5),
  list(budget = function(t) 1e-3 * log(t + 1), min_size = "linear", coef = 0.3,
       floor = 1)
)

eps_fun_of <- function(b) if (is.function(b)) b else const_fun(b)
fmin_fun_of <- function(cfg) {
  function(t) ref_min_size(cfg$min_size, t, cfg$coef, cfg$floor)
}
run_cfg <- function(x, s, cfg, kernel, ...) {
  ksdt(x, s, budget = cfg$budget, min_size = cfg$min_size,
       min_size_coef = cfg$coef, min_size_floor = cfg$floor, kernel = kernel,
       ..., standardize = FALSE)
}

# Map each stream index to the first index holding the same state: two
# retained duplicates are interchangeable.
canonical_index <- function(x, idx) {
  key <- apply(x, 1, function(r) paste(format(r, digits = 17), collapse = " "))
  match(key, key)[idx]
}

# The (x, y) of every graphics::lines() call made while evaluating expr, on
# a null device: what a plot method draws as lines.
record_lines <- function(expr) {
  got <- list()
  keep <- function(x, y = NULL, ...) {
    got[[length(got) + 1L]] <<- list(x = x, y = y)
  }
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  suppressMessages(trace("lines", where = asNamespace("graphics"),
                         print = FALSE, tracer = bquote(.(keep)(x, ...))))
  on.exit(suppressMessages(untrace("lines", where = asNamespace("graphics"))),
          add = TRUE)
  force(expr)
  got
}

# Whether one of the recorded lines is y against its steps 1..length(y).
has_line <- function(drawn, y) {
  any(vapply(drawn, function(l) {
    identical(as.numeric(l$y), as.numeric(y)) &&
      identical(as.numeric(l$x), as.numeric(seq_along(y)))
  }, TRUE))
}
