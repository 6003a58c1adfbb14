#' kernbayes: Kernel Methods for Bayesian Computation
#'
#' Kernel methods around a posterior known through its log density and
#' score: measure how well a sample represents it (kernelized Stein
#' discrepancy), compress MCMC output offline or online, sample with
#' samplers that thin as they go, move particles towards it, and do
#' Bayesian inference from samples alone (kernel Bayes' rule). The heavy
#' loops are in C (OpenMP threads); targets are R closures, a Stan fit or
#' one of the built-in targets. This page is the map of the package; each
#' function's page has the details.
#'
#' @section Stein discrepancy:
#' * [ksd()]: the KSD of a (weighted) sample, V- or U-statistic; with
#'   `by_chain`, one per chain.
#' * [ksd_path()]: the KSD of the first \eqn{j} points for every \eqn{j},
#'   in one pass (a convergence trace).
#' * [ksd_blocks()]: the same double sum split into row blocks run as
#'   futures.
#' * [ksd_test()]: the KSD goodness-of-fit test (U- or V-statistic,
#'   multinomial or wild bootstrap p-value); [fssd_test()]: the
#'   linear-time FSSD test with optimised or random test locations.
#' * [stein_kernel_matrix()], [kernel_matrix()]: the matrices themselves;
#'   [imq_kernel()], [gaussian_kernel()]: the base kernels (preconditioner
#'   heuristics, bandwidths).
#'
#' @section Thinning and compression:
#' * [stein_thin()]: greedy Stein thinning to `m` points;
#'   [stein_thin_gf()]: its gradient-free variant (log densities and a
#'   proxy); [mmd_thin()]: MMD thinning (kernel herding) without scores.
#' * [kernel_thin()]: kernel thinning (KT-SPLIT + KT-SWAP) to about
#'   \eqn{\sqrt n} points, with the Stein kernel or a base kernel.
#' * [ksd_weights()]: KSD-optimal weights on a sample or a thinned set.
#' * [stein_points()]: Stein Points, a point set built without a sample,
#'   each point minimising a KSD criterion (greedy or herding) over Monte
#'   Carlo candidates, Nelder-Mead runs or a grid.
#' * [wasserstein2()]: the exact 2-Wasserstein distance between two
#'   equal-size point sets, a KSD-free yardstick.
#'
#' @section Choosing a compression method:
#' To compress MCMC output that is already a good sample of the posterior,
#' use [kernel_thin()] without a score (`kernel_thin(x)`,
#' `kernel_thin(fit)`): it halves the sample repeatedly, keeping each
#' half's kernel mean embedding close to the sample's, so the points keep
#' the sample's means and spreads. Measured on five samples of 4000 draws
#' compressed to about 100 points, 10 seeds each (centred eight schools, a
#' funnel, a 0.2/0.8 Gaussian mixture, an `mtcars` regression, a
#' correlated 20-d Gaussian; `inst/experiments/compression-choice.R`,
#' "Choosing a compression method, measured" in `vignette("kernbayes")`),
#' its means moved by at most 0.03 of the sample's sds (median over the
#' seeds of the largest shift; 100 equally spaced draws: 0.11-0.21) and
#' its sds stayed within 0.95-1.03 of the sample's on four targets. The
#' methods built on the Stein kernel ([stein_thin()], [ksdt()],
#' [stein_kernel_thin()], with or without [ksd_weights()]) reach smaller
#' KSDs by changing the posterior: on eight schools they moved
#' \eqn{\log\tau} by 1.1-1.4 sds and cut its sd to 0.34-0.43 of the
#' sample's, on the funnel `stein_thin()` moved \eqn{v} by 1.7 sds, on the
#' mixture by 0.7 (with `regularize = TRUE`: 0.9, 1.2 and 0.2). They are for
#' samples that are not yet good (burn-in kept, a biased sampler), where
#' the score has a bias to remove; check the moments of their result
#' against the sample. A small KSD is no evidence that a compression kept
#' the posterior. On very heavy tails no 100 points keep the sd (the
#' funnel's \eqn{x_k}: kernel thinning 0.4 of it, equally spaced draws
#' 0.8).
#'
#' @section Standardisation:
#' Every function that measures or compresses a sample ([ksd()],
#' [ksd_path()], [ksd_blocks()], [ksd_test()], [ksd_weights()],
#' [stein_kernel_matrix()], [stein_thin()], [stein_thin_gf()],
#' [mmd_thin()], [kernel_thin()], [stein_kernel_thin()], [ksdt()],
#' [ksdt_stream()], [ksdt_sample()], [sp_mcmc()], and [ksdt_chains()]
#' through `ksdt_sample()`) takes `standardize`, with one default, `TRUE`:
#' each coordinate is divided by its mean absolute deviation and the
#' scores are multiplied by the same factors (the convention of Riabiz et
#' al., 2022), computed once on the whole sample, all chains pooled, before
#' any kernel heuristic. A stream takes the scales of its first push, a
#' sampler those of its pilot chain; a vector of scales may be given
#' instead, and `FALSE` keeps the coordinates as they are (see
#' `standardize` in [ksd()]). Results keep their scales (`scale`), so that
#' `ksd(result)` recomputes their printed KSD.
#'
#' Why it is the default: the Stein kernel measures each coordinate in its
#' own units. A coordinate of scale \eqn{\sigma} enters the KSD like
#' \eqn{1/\sigma}, so without standardisation the coordinate of smallest
#' scale dominates: the KSD then mostly measures that coordinate's Monte
#' Carlo noise, misses errors in the others, and the KSDs of chains or sets
#' are not comparable. Measured on a 2-d Gaussian target with standard
#' deviations 1 and 0.01 (`gaussian_target(c(0, 0), diag(c(1, 1e-4)))`),
#' samples of 2000 points (`inst/experiments/standardisation.R`):
#' * five sets of exact draws: unstandardised KSD 1.28-3.82 (of one set,
#'   the first coordinate alone gives 0.056, the second 1.96),
#'   standardised 0.035-0.053;
#' * the same draws with the first coordinate shifted by half its standard
#'   deviation (0.5): unstandardised KSD 2.33 on average before, 2.37
#'   after, lost in the spread between draws; standardised 0.043 before,
#'   0.278 after. Shifted by half its standard deviation in the second
#'   coordinate (0.005) instead: unstandardised 41.1, standardised 0.270,
#'   the same as for the first: equal errors in units of each coordinate's
#'   spread weigh equally;
#' * four chains of [rwm()] (step size adapted, acceptance 0.21-0.25; the
#'   first coordinate mixes slowly, sample standard deviations 0.19-0.46
#'   where the target's is 1): unstandardised KSDs 3.73-5.20, overlapping
#'   the exact draws' 1.28-3.82; standardised 0.20-0.25, five to seven
#'   times the exact draws' level.
#'
#' On a brms regression whose coefficient `b_hp` has posterior standard
#' deviation 0.009 next to an intercept of 2, the unstandardised KSDs of
#' healthy chains were found to differ two-fold for the same reason (issue
#' 30). Use `standardize = FALSE` to compare with a computation that does
#' not standardise (a reference implementation), and pass the scales of
#' one sample (`standardize = fit$scale`) to judge others under them.
#'
#' @section Samplers:
#' * [mala()], [rwm()]: MALA and random walk Metropolis on a target's
#'   closures, with step-size adaptation; states come with their scores.
#' * [sp_mcmc()]: Stein Point MCMC (a point set grown by fresh moves).
#'
#' @section Online thinning (KSDT):
#' * [ksdt()]: KSDT over a stream of states (a chain, in order), with a
#'   budget and a minimum size (`min_size`, or a constant `size`).
#' * [ksdt_stream()], [ksdt_push()], [ksdt_result()]: the same for states
#'   arriving from a sampler of your own.
#' * [ksdt_sample()]: MALA or RWM with KSDT inside (the chain is never
#'   stored).
#' * [ksdt_chains()]: several KSDT chains as futures, merged;
#'   [c.kb_ksdt()] / [merge.kb_ksdt()] merge dictionaries.
#'
#' @section Kernel Bayes' rule:
#' * [kbr()]: the posterior embedding from a joint sample and a prior
#'   sample (full or low-rank path); [predict.kb_kbr()],
#'   [posterior_mean()], [posterior_expect()], [posterior_sd()],
#'   [posterior_ci()], [preimage()], [summary.kb_kbr()] and
#'   [plot.kb_kbr()] read it.
#' * [kbr_cv()]: cross-validation of bandwidths and regularisers (folds as
#'   futures).
#' * [kbr_filter()]: the KBR filter for a state-space model learnt from a
#'   training trajectory or several, with a per-step spread;
#'   [kalman_filter()]: the linear-Gaussian reference.
#'
#' @section Particle flows:
#' [svgd()] (Stein variational gradient descent), [ksd_descent()], [mmd_flow()]
#' and [dmmd_flow()] (towards a target sample), [mied()] (mollified
#' interaction energy descent): `n` particles moved towards the target; a
#' `kb_particles` result with the trace of its objective.
#'
#' @section Targets:
#' * [kb_target()]: a target from R closures (log density and score, one
#'   point or vectorised over rows); [target_log_density()],
#'   [target_score()], [sample_target()] evaluate or sample it.
#' * Built in: [gaussian_target()], [gaussian_mixture_target()],
#'   [logistic_regression_target()], [rbm_target()] (a Gaussian-Bernoulli
#'   restricted Boltzmann machine, the goodness-of-fit benchmark),
#'   [goodwin_target()] (an ODE model; with [goodwin_solve()] and
#'   [goodwin_simulate()]).
#' * Stan and brms fits: [stan_target()] makes a target of a `stanfit` or
#'   `brmsfit` on the unconstrained scale (log density and gradient from
#'   rstan, with the Jacobian adjustment); [unconstrain_draws()] and
#'   [constrain_draws()] move draws between the scales. Functions that take
#'   `x` and `score` also take the fit itself as `x`: the KSD needs the
#'   unconstrained scale, where the target's density is smooth and
#'   positive everywhere, and results carry the constrained draws as well.
#'
#' @section Conversions:
#' Results convert to the formats of the Bayesian workflow:
#' `posterior::as_draws()`, `as_draws_df()` and `as_draws_matrix()` and
#' `as.data.frame()` work on chains (`kb_chain`), thinned sets (`kb_thin`),
#' KSDT dictionaries (`kb_ksdt`) and particles (`kb_particles`), with
#' `.chain`, `.iteration` and weights where they exist; `coda::as.mcmc()`
#' on chains.
#'
#' @section Running on futures:
#' [ksdt_chains()], [ksd_blocks()] and [kbr_cv()] dispatch their tasks
#' (chains, row blocks, folds) with the future framework: the same code
#' runs sequentially, on local cores (`future::plan(future::multisession)`),
#' on several machines, or on a cluster scheduler through future.batchtools
#' (a Slurm template ships with the package; see "Running on a cluster" in
#' [ksdt_chains()]). Random numbers are parallel-safe: for a given seed the
#' results do not depend on the plan. Each task uses `nthreads` threads
#' (default 1).
#'
#' @section Progress:
#' Every function that can run for more than a couple of seconds takes
#' `progress`: `NULL` (the default: automatic), `TRUE` or `FALSE`. One
#' display at most is used, never two:
#' * progressr's, when progressr is loaded and one of its handlers is
#'   active: global handlers (`progressr::handlers(global = TRUE)`; see
#'   `progressr::handlers(global = NA)`) or inside
#'   `progressr::with_progress()`. The function then signals progressr's
#'   progression conditions (at most about five a second, always the first
#'   and last), whether the session is interactive or not, so a batch
#'   script (e.g. on future.batchtools) that enables handlers gets progress
#'   without `progress = TRUE`. How, and whether, they are shown is
#'   progressr's business (its handlers, `options(progressr.enable)`).
#' * Otherwise this package's line on stderr, "what: done of total
#'   (percent)", redrawn in place about twice a second (it is a message:
#'   `suppressMessages()` silences it), in an interactive session.
#'
#' `progress = TRUE` forces a display: progressr's when a handler is
#' active, else the line (also when not interactive). `progress = FALSE`
#' shows and signals nothing, and the computation takes its usual path;
#' the results are the same in every case. Tasks run in future workers
#' ([ksdt_chains()], [ksd_blocks()], [kbr_cv()]) report through progressr
#' (when installed): their updates reach this session while they run and
#' go to the active progressr handler, or else advance the line.
#'
#' @section Argument names:
#' One name, one meaning: `step_size` is a step size (samplers, flows),
#' `candidates` the candidates per step (KSDT samplers, SP-MCMC), `m` the
#' number of points a thinning method keeps, `size` a constant dictionary
#' size (KSDT), `n_iter` the number of iterations or steps, `nthreads` the
#' OpenMP threads, `progress` the progress line. Old names (`step`, `m` in
#' [sp_mcmc()], `fit` in [kbr_cv()]) still work, with a message once per
#' session.
#'
#' @section Vignettes:
#' `vignette("kernbayes")` (a tour), `vignette("online-thinning")` (KSDT,
#' SP-MCMC, the mixture experiments), `vignette("particle-flows")` and
#' `vignette("kernel-bayes-rule")`; `vignette(package = "kernbayes")` lists
#' them all, including the one on Stan and brms output.
#'
#' @section Threads:
#' `nthreads` is the most OpenMP threads a computation uses (capped at the
#' processors); results are identical for every thread count. A parallel
#' region gets one thread when its work is too small to pay for the team,
#' and otherwise as many as the machine's load leaves idle cores: every
#' 0.1 s (at most) the package reads how busy the other processes kept the
#' cores (on Linux from `/proc/stat`, less this process's own CPU time;
#' niced processes count only when R is niced too) and
#' uses `min(nthreads, cores - busy)` threads, rounded, at least one. On a
#' 2-core machine with one other busy process, 2 threads thus run as 1:
#' the sequential loops that open a region per step (a KSDT pass over the
#' dictionary, a greedy Stein thinning step) would otherwise wait at every
#' barrier for a thread the system had descheduled, which made KSDT 4-25
#' times slower on 2 threads than on 1. On an idle machine nothing changes.
#' A KSDT pass uses a second thread only from about 10000 dictionary points
#' (at \eqn{d = 4}): below that, two threads lost to one even on an idle
#' machine (1.9-2 times slower at 1500 points), so a typical stream runs
#' on one thread whatever `nthreads` is.
#' Set `options(kernbayes.follow_load = FALSE)` to always get the threads
#' asked for (a dedicated node); outside Linux the team is always
#' `nthreads`. OpenMP's own wait policy (`OMP_WAIT_POLICY`, `GOMP_SPINCOUNT`)
#' is read when R starts and cannot be changed by the package;
#' `OMP_WAIT_POLICY=passive` made a fixed team's loss on a busy machine
#' smaller (KSDT 2.2 instead of 6-17 times slower) without removing it
#' (`inst/bench/bench-threads.R` measures
#' every threaded function on 1 and 2 threads, with and without a competing
#' process). [kbr()]'s threads compute its Gram matrices, and its default
#' cross-validation ([kbr_cv()], method "kbr") runs its (fold, eps) pairs on
#' them; its solves use R's BLAS and LAPACK (with their own threads, if
#' any: then give `nthreads = 1`). Under a parallel future plan
#' [kbr_cv()]'s folds run as futures instead.
#'
#' @section Options:
#' * `kernbayes.nthreads`: the default of every `nthreads` argument (1).
#' * `kernbayes.follow_load`: whether parallel regions follow the machine's
#'   load (`TRUE`, the default; see "Threads").
#' * `kernbayes.max_memory`: the most memory (bytes) that one n x n workspace
#'   (KBR Gram matrices, the SVGD pair distances, DrMMD) may take; larger
#'   problems stop with an error naming the argument before allocating
#'   (default 16 GiB).
#' * `kernbayes.stan_cache`: the number of Stan or brms fits whose
#'   unconstrained draws and gradients are kept for the next call on the
#'   same fit (default 4; 0 keeps none); see "Draws and gradients computed
#'   once" in [stan_target()] and [clear_stan_cache()].
#'
#' @section Points and samples:
#' Points are the rows of a numeric matrix, `n` points in `d` dimensions
#' making an `n x d` matrix; a data frame of numbers, a `coda::mcmc` or
#' `mcmc.list` and a posterior draws object are converted to their matrix of
#' draws. A plain numeric vector is read by one rule, the same everywhere:
#' * where a function takes one point (the start `x0` of [mala()], [rwm()],
#'   [ksdt_sample()] and [sp_mcmc()]), the vector is that point;
#' * where it takes points whose dimension `d` another argument fixes (a
#'   target's in [target_score()], [target_log_density()] and
#'   [ksdt_chains()]; a stream's in [ksdt_push()]; the fit's `y` in
#'   [predict.kb_kbr()] and the posterior summaries; the first sample's for
#'   a second one, such as scores, `prior` in [kbr()], `y` in
#'   [kernel_matrix()], [wasserstein2()] and [mmd_flow()], `y_obs` in
#'   [kbr_filter()]), a vector is one point when `d > 1` (its length must
#'   be `d`) and `n` one-dimensional points when `d = 1`;
#' * elsewhere (the first sample given to [kbr()], [kbr_cv()],
#'   [kbr_filter()], [kalman_filter()], [ksd()], [stein_thin()],
#'   [kernel_thin()], [ksdt()],
#'   [kernel_matrix()], [svgd()] and the other flows), a vector is `n`
#'   one-dimensional points, an `n x 1` matrix.
#'
#' Multi-chain input (a posterior `draws_array`, `draws_df` or
#' `draws_list`, a `coda::mcmc.list`, a Stan fit) keeps its chain and
#' iteration labels: rows are stacked chain by chain, in iteration order
#' (as `posterior::as_draws_matrix()` stacks them), and results report the
#' `.chain` and `.iteration` of their points. For a plain matrix of several
#' chains, give the chain of each row with the `chain` argument. A score
#' matrix must be in the same row order as `x`.
#'
#' So `c(1, 2)` is two observations to `kbr(x = )`, and one point to
#' `target_score()` for a target of dimension 2 (two points for a target of
#' dimension 1). To give one point of dimension `d` where a sample is
#' expected, write `rbind(v)` or `matrix(v, nrow = 1)`.
#'
#' @section Errors:
#' Errors are conditions of class `"kb_error"` and one of
#' `"kb_error_arg"` (an argument is wrong; the message names it),
#' `"kb_error_numeric"` (a computation overflowed or lost its meaning; the
#' message names the rows or the cause), `"kb_error_callback"` (a user
#' function failed or returned something unusable), `"kb_error_state"` (an
#' object, such as a saved-and-reloaded KSDT stream, cannot be used),
#' `"kb_error_memory"` or `"kb_error_internal"`, so that they can be caught
#' by class with `tryCatch()`.
#'
#' @keywords internal
#' @useDynLib kernbayes, .registration = TRUE, .fixes = "C_"
"_PACKAGE"
