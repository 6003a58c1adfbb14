# Stan models for test-stan.R, compiled once per test run (each compile
# takes about a minute) and kept with their fits in stan_cache.  Tests skip,
# saying why, on CRAN, when rstan is missing or a model does not compile.

stan_cache <- new.env(parent = emptyenv())

stan_codes <- list(
  # eight schools, centred
  schools = "
    data { int<lower=0> J; real y[J]; real<lower=0> sigma[J]; }
    parameters { real mu; real<lower=0> tau; real theta[J]; }
    model {
      mu ~ normal(0, 5);
      tau ~ cauchy(0, 5);
      theta ~ normal(mu, tau);
      y ~ normal(theta, sigma);
    }",
  # constrained types whose unconstrained size differs (simplex), bounds on
  # a vector, a matrix (column-major names), transformed parameters and
  # generated quantities
  shapes = "
    data { int N; vector[N] y; }
    parameters { simplex[3] w; vector<lower=0>[2] s; matrix[2, 3] B; real a; }
    transformed parameters { real ws = w[1] * s[1] + a; }
    model {
      w ~ dirichlet(rep_vector(2, 3));
      s ~ lognormal(0, 1);
      to_vector(B) ~ normal(0, 1);
      a ~ normal(0, 1);
      y ~ normal(ws, 1);
    }
    generated quantities { real yrep = normal_rng(ws, 1); }",
  # one parameter per transform, for the names of unconstrained
  # coordinates: bounds (numbers, data, another parameter), offset and
  # multiplier, ordered, a 2-d array (row-major in Stan's layout) and an
  # array of vectors
  transforms = "
    data { real L; }
    parameters {
      real mu;
      real<lower=0> tau;
      real<lower=1.5> lo;
      real<upper=-2> up;
      real<lower=0, upper=1> p;
      real<lower=-1, upper=3> r;
      real<offset=1, multiplier=2> om;
      real<lower=mu> dep;
      real<lower=L> dl;
      ordered[2] od;
      real<lower=0> arr[2, 3];
      vector<lower=0>[2] va[2];
    }
    model {
      mu ~ normal(0, 1);
      tau ~ exponential(1);
      lo ~ normal(2, 1);
      up ~ normal(-3, 1);
      om ~ normal(1, 2);
      dep ~ normal(mu + 1, 1);
      dl ~ normal(L + 1, 1);
      od ~ normal(0, 1);
      to_array_1d(arr) ~ exponential(1);
      for (k in 1:2) va[k] ~ exponential(1);
    }")

schools_data <- list(J = 8L, y = c(28, 8, -3, 7, -1, 1, 18, 12),
                     sigma = c(15, 10, 16, 11, 9, 11, 10, 18))
stan_data <- list(schools = schools_data,
                  shapes = list(N = 3L, y = c(0.5, 1, 1.5)),
                  transforms = list(L = 0.25))

# The compiled model `name`, or a skip saying why there is none.  Not on
# CRAN: compiling a model takes a minute or more of CPU (the full suite,
# NOT_CRAN=true in make check and CI, compiles them).
stan_test_model <- function(name) {
  testthat::skip_on_cran()
  testthat::skip_if_not_installed("rstan")
  if (!nzchar(system.file("include", package = "BH"))) {
    testthat::skip(paste("BH headers missing (Debian's r-cran-bh has none),",
                         "rstan cannot compile: run make setup"))
  }
  key <- paste0("model_", name)
  if (is.null(stan_cache[[key]])) {
    # all models at once, two compilers in parallel where forking works
    # (the transforms model only when asked: one test file uses it)
    todo <- names(stan_codes)[vapply(paste0("model_", names(stan_codes)),
                                     function(k) is.null(stan_cache[[k]]),
                                     TRUE)]
    todo <- todo[todo != "transforms" | todo == name]
    compile <- function(nm) tryCatch(
      suppressMessages(suppressWarnings(
        rstan::stan_model(model_code = stan_codes[[nm]], model_name = nm))),
      error = function(e) e)
    # rstan asks pkgbuild whether a compiler works; asked here once, the
    # answer is cached for the forked compilers (which would print the test)
    if (requireNamespace("pkgbuild", quietly = TRUE)) pkgbuild::has_compiler()
    ms <- if (.Platform$OS.type == "unix") {
      parallel::mclapply(todo, compile, mc.cores = 2L)
    } else lapply(todo, compile)
    for (i in seq_along(todo)) {
      m <- ms[[i]]
      if (!inherits(m, c("stanmodel", "error"))) {
        m <- simpleError(paste("compilation process failed:", format(m)))
      }
      stan_cache[[paste0("model_", todo[i])]] <- m
    }
  }
  m <- stan_cache[[key]]
  if (inherits(m, "error")) {
    testthat::skip(paste("the Stan model", name, "did not compile:",
                         conditionMessage(m)))
  }
  m
}

# A small fit of model `name` (post-warmup draws: chains x draws), cached.
stan_test_fit <- function(name, chains = 3L, draws = 50L) {
  m <- stan_test_model(name)
  key <- paste0("fit_", name, "_", chains, "_", draws)
  if (is.null(stan_cache[[key]])) {
    stan_cache[[key]] <- suppressWarnings(
      rstan::sampling(m, data = stan_data[[name]], chains = chains,
                      iter = 2L * draws, warmup = draws, seed = 14L,
                      refresh = 0))
  }
  stan_cache[[key]]
}

# The same model with its data but no draws (chains = 0).
stan_test_nodraws <- function(name) {
  m <- stan_test_model(name)
  key <- paste0("nodraws_", name)
  if (is.null(stan_cache[[key]])) {
    stan_cache[[key]] <- suppressMessages(
      rstan::sampling(m, data = stan_data[[name]], chains = 0L))
  }
  stan_cache[[key]]
}
