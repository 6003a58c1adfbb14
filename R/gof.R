# Kernel goodness-of-fit tests: the KSD test with bootstrap p-values.

#' KSD goodness-of-fit test
#'
#' Tests whether a sample comes from the target whose score is given, with
#' the kernelized Stein discrepancy as statistic and a bootstrap for its
#' null distribution.
#'
#' The statistic is \eqn{T = n\,\mathrm{KSD}^2} under exactly the kernel
#' and conventions of [ksd()]: for `type = "U"`, \eqn{n U_n} with
#' \eqn{U_n = \frac{1}{n(n-1)}\sum_{i \ne j} k_p(x_i, x_j)} (`n *
#' ksd(x, score, kernel, type = "U")`, which can be negative); for `type =
#' "V"`, \eqn{n V_n} with \eqn{V_n = \frac{1}{n^2}\sum_{i,j} k_p(x_i, x_j)}
#' (`n * ksd(x, score, kernel)^2`).
#'
#' Bootstraps (each replicate a quadratic form \eqn{w^\top K_p w}, the
#' diagonal left out for `type = "U"` and kept for `"V"`):
#' * `"multinomial"` (Liu, Lee and Jordan 2016, Section 4; the bootstrap
#'   of degenerate U-statistics of Arcones and Giné 1992 and Hušková and
#'   Janssen 1993): counts \eqn{(c_1, \dots, c_n)} multinomial with \eqn{n}
#'   trials and probabilities \eqn{1/n}, weights \eqn{w_i = c_i / n - 1/n},
#'   and \eqn{T^* = n \sum_{i \ne j} w_i w_j k_p(x_i, x_j)} (for `"V"` the
#'   sum includes \eqn{i = j}). For independent draws.
#' * `"wild"` (Chwialkowski, Strathmann and Gretton 2016, Section 2.2):
#'   multipliers \eqn{W_i \in \{-1, 1\}} and \eqn{T^* = \frac{1}{n}
#'   \sum_{i,j} W_i W_j k_p(x_i, x_j)} (for `"U"` the sum leaves out
#'   \eqn{i = j}). With `wild = "rademacher"`
#'   the \eqn{W_i} are independent signs (independent samples); with
#'   `wild = "markov"` they are a Markov chain of signs, \eqn{W_1 = \pm 1}
#'   with probability 1/2 and \eqn{W_t = -W_{t-1}} with probability
#'   `change_prob`, else \eqn{W_t = W_{t-1}}, for a dependent sample such
#'   as MCMC output, run along the iterations of each chain (a fresh sign at
#'   the start of each chain). See 'Dependent samples'.
#'
#' The p-value is \eqn{(1 + \#\{b: T^*_b \ge T\}) / (B + 1)} for \eqn{B =}
#' `n_boot` replicates. All random numbers are drawn in R (set a seed with
#' [set.seed()] for a reproducible result); the result does not depend on
#' `nthreads`.
#'
#' The Stein matrix is never stored: it is evaluated once, in tiles of
#' 64 x 64 pairs of its lower triangle, and each tile is applied to all
#' replicates while it is in cache (in C, on `nthreads` threads), so memory
#' is \eqn{O(n B)} for the weights and time about \eqn{n^2 B} flops.
#'
#' @section Dependent samples:
#' Independent signs ignore the autocorrelation of a chain and make the test
#' far too liberal: on AR(1) chains with exact N(0, 1) margins (target N(0,
#' 1), V-statistic, level 0.05) Rademacher multipliers reject at a rate of
#' 0.23 (n = 200) and 0.28 (n = 1000) at AR coefficient 0.5, and 0.84 and
#' 0.87 at 0.9. Markov multipliers keep the products \eqn{W_s W_t} of nearby
#' iterations positive, so the bootstrap keeps the dependence the statistic
#' has. The theory (Chwialkowski, Sejdinovic and Gretton 2014;
#' Chwialkowski et al. 2016, Section 2.2) asks for a flip probability
#' \eqn{a_n \to 0} with \eqn{n a_n \to \infty}: the correlation length
#' \eqn{l = (1 - a_n) / a_n} of the signs must grow, but more slowly than
#' \eqn{n}. Too short a length is liberal (it ignores the dependence beyond
#' it); too long is conservative (\eqn{T^*} then copies \eqn{T}: a fixed
#' 0.02 rejected at 0.005 at n = 200). The authors' experiments used 0.1 on
#' chains thinned to a lag-one autocorrelation near 0.5; as a default, 0.1
#' rejects at 0.07-0.11 at coefficient 0.5 and 0.28-0.29 at 0.9, and
#' \eqn{n^{-1/2}} at 0.047-0.060 and 0.15-0.24. Centred multipliers
#' (\eqn{W_t - \bar W}, the 2014 paper's second version) raise the power
#' but also the level (0.08-0.12 at coefficient 0.5), and the Stein kernel
#' has mean zero under the target, so they are not used.
#'
#' The default `change_prob = NULL` therefore adapts to the sample: \eqn{l
#' = \sqrt{m \tau}} (at least 1) and `change_prob` \eqn{= 1 / (1 + l)},
#' where \eqn{m} is the (mean) length of the chains and \eqn{\tau} the
#' largest integrated autocorrelation time over the columns of the points
#' and of their scores (Geyer's initial positive sequence estimate, within
#' each chain, averaged over the chains; returned as `iact`). The
#' \eqn{\sqrt{m}} meets the rate above, and balancing the bias
#' (\eqn{\propto \tau / l}) and the noise (\eqn{\propto l / m}) of the
#' bootstrap's long-run variance gives \eqn{l \propto \sqrt{m \tau}}.
#' Measured with inst/experiments/gof-dependent.R (300 chains per cell, 200
#' at n = 5000; Monte Carlo standard error about 0.013; the table is
#' `system.file("extdata", "gof-dependent.csv", package = "kernbayes")`):
#' rejection rate under the null 0.050, 0.063 and 0.030 (n = 200, 1000,
#' 5000) at coefficient 0.5, and 0.037, 0.043 and 0.045 at 0.9, the only
#' rule measured that held the level in every case; power against a mean
#' shift of 2.5 standard errors of the chain's mean 0.59 and 0.65 (n = 200,
#' 1000) at 0.5, 0.40 and 0.57 at 0.9 (the rules with more power also
#' rejected too often under the null). With independent points
#' (\eqn{\tau \approx 1}) the flip probability is about \eqn{1 / (1 +
#' \sqrt{n})}: the default uses an independence bootstrap there (see
#' 'Default bootstrap'). On a short chain that mixes
#' slowly (a few dozen effective draws) the test has little power: thin
#' less or run longer.
#'
#' @section Default bootstrap: With `bootstrap`, `wild` and `change_prob`
#'   left out, the bootstrap follows the input, since independence
#'   bootstraps reject correct MCMC output: on 20 random-walk Metropolis
#'   chains of 1000 iterations targeting exactly N(0, I_2) (acceptance
#'   about 0.8) the multinomial bootstrap rejected all 20 at level 0.05.
#' * Labelled chains (draws objects, `mcmc.list`, a Stan or brms fit, a
#'   chain from [mala()] or [rwm()], a matrix with `chain`): the Markov wild
#'   bootstrap along each chain, each chain's flip probability from its own
#'   length and integrated autocorrelation time (see 'Dependent samples').
#' * An unlabelled sample (a matrix): its integrated autocorrelation time
#'   \eqn{\tau} (the largest Geyer estimate over the columns of the points
#'   and of their scores, rows in order) is estimated; above 1.2 the sample
#'   is taken as one chain (Markov wild bootstrap), otherwise as independent
#'   draws (multinomial bootstrap for `type = "U"`, Rademacher wild for
#'   `"V"`). The threshold is low on purpose. In
#'   inst/experiments/gof-mcmc.R (n = 1000, 200 replicates, level 0.05) the
#'   multinomial bootstrap rejected 0.09-0.105 of AR(1) chains with
#'   coefficient 0.1 (true \eqn{\tau} 1.22) and 0.62-1.00 of every RWM and
#'   MALA chain, even at \eqn{\tau} 1.9 (a rejected proposal repeats a
#'   state, and repeated pairs add \eqn{k_p(x, x) > 0} to the statistic);
#'   the estimate cannot separate such chains from independent draws (its
#'   median on independent draws is 1.08, 1.27, 1.39 at d = 2, 10, 20); and
#'   the Markov bootstrap costs little on independent draws (level
#'   0.04-0.06, power within Monte Carlo error of the multinomial's). With
#'   1.2 the default held the level (at most 0.08) in every AR(1) cell up
#'   to coefficient 0.5 and every MALA cell at d = 2; 1.5 reached 0.09, 2
#'   reached 0.16. Where the Markov bootstrap itself misses the level is
#'   listed in `vignette("kernbayes")`.
#'
#' The `method` line of the result says which bootstrap was used and why.
#' An explicit `bootstrap` (or `wild`, or `change_prob`, which imply the
#' wild bootstrap and Markov multipliers) always wins; when it assumes
#' independent draws on labelled chains or on a sample with \eqn{\tau} above
#' the threshold, the `method` line says so.
#'
#' @section Per chain: With `by_chain = TRUE` (labelled samples) each chain
#'   is tested alone, with the kernel and standardisation resolved on all
#'   chains and the bootstrap chosen for the pooled sample, and the pooled
#'   test is made too (first, then the chains in label order, all from R's
#'   generator). Each chain's p-value is that of one test: with \eqn{k}
#'   correct chains, one of them falls below 0.05 with probability about
#'   \eqn{1 - 0.95^k}.
#'
#' @section Large samples: The test above costs about \eqn{n^2 B} flops
#'   (\eqn{n = 10^5}, d = 10, \eqn{B = 1000}: 1197 s on one core). With
#'   `test = "incomplete"`, and by default (`test = "auto"`) when
#'   \eqn{n^2 B > 4 \times 10^{11}} (about a minute on one core: \eqn{n >
#'   2 \times 10^4} rows at `n_boot = 1000`), `ksd_test()` runs instead an
#'   incomplete U-statistic whose cost grows linearly in \eqn{n}: with the
#'   rows in chain order (chains one after the other), \eqn{J} = `n_lags`
#'   lags \eqn{L_1 < \dots < L_J} spread evenly over \eqn{[n/8, 3n/8]},
#'   \deqn{g_i = \frac{1}{J}\sum_{j} k_p(x_i, x_{(i + L_j) \bmod n}), \quad
#'   S = \frac{1}{n}\sum_i g_i,}
#'   an unbiased estimate of \eqn{\mathrm{KSD}^2} from \eqn{nJ} pairs whose
#'   points are at least \eqn{n/8} rows apart (no pair twice: \eqn{L + L'}
#'   stays \eqn{n/4} or more away from \eqn{n}). Under the null the Stein
#'   kernel is degenerate (\eqn{E\, k_p(x, Y) = 0} for \eqn{Y \sim p}), so two
#'   terms are correlated only when both their points are close in the
#'   chain: \eqn{\mathrm{Var}(S)} is the long-run variance of the series
#'   \eqn{g} over \eqn{n}, estimated as \eqn{\mathrm{var}(g)\,\tau_g / n}
#'   with \eqn{\tau_g} Geyer's integrated autocorrelation time of \eqn{g}
#'   (batch means were also measured: no better). The statistic is \eqn{z
#'   = S / \mathrm{sd}(S)} and the p-value \eqn{1 - \Phi(z)} (one-sided:
#'   \eqn{\mathrm{KSD}^2 \ge 0}). No bootstrap, \eqn{O(nd)} memory, \eqn{nJ}
#'   Stein kernel evaluations (\eqn{n = 10^5}, d = 10, \eqn{J = 1000}: about
#'   2 s on one core).
#'
#'   Normality needs \eqn{J} small against \eqn{n} (incomplete U-statistics
#'   of a degenerate kernel, Janson 1984): the pairs form a graph of degree
#'   \eqn{2J} whose low-frequency eigenvalues add a chi-square part, weighed
#'   by the chain's long-run variance, of about \eqn{4 J \tau^2 / (n
#'   \tau_2)} of the variance (\eqn{\tau_2 \ge \tau / 2} for AR(1) chains),
#'   and beyond that share more lags add little power. So `n_lags = NULL`
#'   takes \eqn{J = \lfloor n / (40 \tau) \rfloor} (at least 1, at most
#'   1000 and \eqn{n/8}), \eqn{\tau} the largest integrated autocorrelation
#'   time of the chains (`iact`). The shortest lag must be at least 10
#'   autocorrelation times (\eqn{n \ge 80 \tau}); a shorter sample is
#'   refused. The statistic is a U-statistic: `type = "V"` is refused. With
#'   `by_chain = TRUE` each chain gets the test its own size calls for.
#'   Measured with inst/experiments/gof-large.R (the settings of
#'   gof-mcmc.R: AR(1) at 0.5 and 0.9, RWM at acceptance 0.4, MALA at 0.6,
#'   d = 2 and 10, four RWM chains; table
#'   `system.file("extdata", "gof-large.csv", package = "kernbayes")`):
#'   rejection rate under the null at level 0.05 0.01-0.08 per cell at
#'   \eqn{n = 2 \times 10^4} (100 chains each; 0.039 over all 900), 0.067
#'   over 493 chains at \eqn{10^5} (AR(1) 0.04-0.05; MALA and RWM at d
#'   = 2 0.09 over about 100 chains each, and 0.068 each over 117 fresh
#'   chains, null z with sd 1.07 and 0.95: 0.080 and 0.078 in all, Monte
#'   Carlo SE 0.019, a slight excess that 1000 chains per cell would be
#'   needed to settle), 0 of 10 at \eqn{10^6}; power against a mean shift of
#'   3.5 standard errors of the mean of a 5000-state chain 0.80-0.99 at
#'   \eqn{2 \times 10^4} and 1 at \eqn{10^5}, where the quadratic test
#'   (Markov bootstrap, 200 replicates) had 0.16-0.54 at n = 2000 and
#'   0.60-0.85 at 5000, its level 0-0.12.
#'
#'   Why not the alternatives: the linear-time statistic of Liu et al.
#'   (2016, pairs \eqn{(x_{2i-1}, x_{2i})}) and block U-statistics over
#'   consecutive states (Zaremba et al. 2013) pair neighbouring states of a
#'   chain, which are dependent, so their terms are biased under the null;
#'   distant pairs are (nearly) independent and every row is used \eqn{2J}
#'   times.
#'
#' @section Blocks on workers: With `blocks = k`, the quadratic test's
#'   bootstrap (its tiles of row pairs, in slices fixed by \eqn{n}) and the
#'   incomplete test's row means (rows cut into \eqn{k} equal ranges) are
#'   evaluated as \eqn{k} futures on the current [future::plan()]
#'   (multisession, a cluster, a scheduler through future.batchtools) and
#'   added here in the same order as in one process, so the p-value is
#'   `identical()` under every plan. The statistic, the bootstrap weights
#'   and the autocorrelation times are computed in this process. Each
#'   future carries the sample and its scores (\eqn{16 n d} bytes) and, for
#'   the quadratic test, all the bootstrap weights (\eqn{8 n B} bytes: 160
#'   MB at \eqn{n = 2 \times 10^4}, \eqn{B = 1000}). `nthreads` threads run
#'   in each worker. Without future.apply the blocks run in turn here.
#'   Measured by inst/bench/bench-distributed.R (d = 10, 4 blocks, 2 cores
#'   shared with another job, load 3-4; table `system.file("extdata",
#'   "bench-distributed.csv", package = "kernbayes")`): the quadratic test
#'   at \eqn{n = 2 \times 10^4} (1000 replicates) took 52 s in one process,
#'   41 s on two multisession workers (0.79; 24 and 23 s of CPU each, at
#'   most 646 MB resident), 61 s on one worker and 70 and 74 s on one and
#'   two batchtools jobs; the incomplete test at \eqn{n = 10^6} (1000 lags)
#'   100 s in one process, 83 s on two workers (0.83: the row means, 77 s of
#'   CPU, are split, the setup and autocorrelation times, about 18 s, stay
#'   here), 147 and 152 s on batchtools. Two threads (`nthreads = 2`, no
#'   blocks) took 0.91 and 0.84 of one process's time. As for
#'   [ksd_blocks()], blocks are for more machines than one.
#'
#' @inheritParams ksd
#' @param type `"U"` (default; the U-statistic) or `"V"`.
#' @param bootstrap `"multinomial"` or `"wild"`; `NULL` (default): chosen
#'   from the input (see 'Default bootstrap').
#' @param n_boot Number of bootstrap replicates.
#' @param wild Multipliers of the wild bootstrap: `"rademacher"` or
#'   `"markov"`. Left out: `"rademacher"` when `bootstrap = "wild"` is
#'   given, else chosen with the bootstrap. Giving it with `bootstrap` left
#'   out asks for the wild bootstrap.
#' @param change_prob Flip probability of the Markov multipliers, in (0, 1),
#'   for every chain; giving it asks for Markov multipliers. `NULL`
#'   (default): \eqn{1 / (1 + \sqrt{m \tau})} for a chain of length
#'   \eqn{m} and integrated autocorrelation time \eqn{\tau} (see 'Dependent
#'   samples'), chain by chain.
#' @param progress Show progress, one unit per slice of rows of the
#'   bootstrap (see 'Progress' in [kernbayes-package]); default
#'   `NULL` (automatic).
#' @param by_chain If `TRUE`, a test per chain and the pooled one (see 'Per
#'   chain'); needs chain labels.
#' @param test `"auto"` (default): the quadratic (bootstrap) test, or the
#'   incomplete test when \eqn{n^2} `n_boot` exceeds \eqn{4 \times 10^{11}};
#'   `"quadratic"` or `"incomplete"` to choose (see 'Large samples').
#' @param n_lags Number of lags of the incomplete test, a count at most
#'   \eqn{n/8}; `NULL` (default): \eqn{\lfloor n / (40 \tau) \rfloor}, at
#'   most 1000 (see 'Large samples').
#' @param blocks `NULL` (default): the test runs in this process. A count:
#'   the work is cut into that many blocks evaluated with the future
#'   framework on the current [future::plan()] (see 'Blocks on workers');
#'   the result is `identical()` to the one-process test's.
#' @return An object of class `c("kb_ksd_test", "htest")`: `statistic`
#'   (named `"n KSD^2"`), `p.value`, `parameter` (the number of replicates,
#'   `n_boot`), `method` (the statistic, the bootstrap and why it was
#'   chosen), `data.name`, `estimate` (the KSD^2 U- or V-statistic), `boot`
#'   (the `n_boot` bootstrap statistics), `type`, `bootstrap`, `wild`,
#'   `change_prob` (for Markov multipliers, per chain), `iact` (the
#'   integrated autocorrelation time of each chain, always computed: it
#'   chooses the default bootstrap), `n`, `test` (`"quadratic"` or
#'   `"incomplete"`), `n_lags`, `variance` (the estimate of
#'   \eqn{\mathrm{Var}(S)}) and `tau_g` (the integrated autocorrelation time
#'   of the row means) of the incomplete test (`NULL` for the quadratic
#'   one), `kernel` (as resolved on the
#'   sample) and `standardize`. The incomplete test's `statistic` is `z`,
#'   its `parameter` `n_lags`, its `estimate` \eqn{S} and its `boot`,
#'   `bootstrap`, `wild` and `change_prob` `NULL`. `print()` adds the kernel
#'   to the `htest` print; `plot()` shows the bootstrap null with the
#'   observed statistic (the incomplete test: the N(0, 1) density and
#'   \eqn{z}).
#'   With `by_chain = TRUE`, an object of class `kb_ksd_test_by_chain`:
#'   `pooled` (the test of all chains), `chains` (a list of tests, one per
#'   chain, named by chain label), `type`, `kernel`, `standardize`, with
#'   `print()` and `as.data.frame()` (one row per chain and one `"all"`:
#'   `chain`, `n`, `statistic`, `estimate`, `iact`, `change_prob`,
#'   `p_value`).
#' @references Liu, Q., Lee, J. and Jordan, M. (2016). A kernelized Stein
#'   discrepancy for goodness-of-fit tests. *ICML*. Chwialkowski, K.,
#'   Strathmann, H. and Gretton, A. (2016). A kernel test of goodness of
#'   fit. *ICML*. Chwialkowski, K., Sejdinovic, D. and Gretton, A. (2014).
#'   A wild bootstrap for degenerate kernel tests. *NeurIPS*. Geyer, C. J.
#'   (1992). Practical Markov chain Monte Carlo. *Statistical Science* 7,
#'   473-483. Janson, S. (1984). The asymptotic distributions of incomplete
#'   U-statistics. *Z. Wahrscheinlichkeitstheorie verw. Gebiete* 66,
#'   495-505. Zaremba, W., Gretton, A. and Blaschko, M. (2013). B-test: a
#'   non-parametric, low variance kernel two-sample test. *NeurIPS*.
#' @seealso [ksd()].
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 200)
#' ksd_test(x, tg, n_boot = 200)   # independent draws: multinomial
#' # two random-walk chains: the Markov wild bootstrap along each
#' ch <- lapply(1:2, function(i) rwm(tg, x0 = c(0, 0), n_iter = 300,
#'                                    step_size = 0.5))
#' x2 <- rbind(ch[[1]]$x, ch[[2]]$x)
#' r <- ksd_test(x2, tg, n_boot = 200, chain = rep(1:2, each = 300),
#'               by_chain = TRUE)
#' r
#' as.data.frame(r)
#' t1 <- ksd_test(x + 0.5, tg, type = "V", n_boot = 200)
#' t1$p.value
#' plot(t1)
#' # the incomplete test (chosen by default above n^2 n_boot = 4e11)
#' x3 <- sample_target(tg, 5000)
#' ksd_test(x3, tg, test = "incomplete")
#' # the bootstrap in 4 blocks, futures on the current plan: the same test
#' set.seed(2); a <- ksd_test(x, tg, n_boot = 200)
#' set.seed(2); b <- ksd_test(x, tg, n_boot = 200, blocks = 4)
#' identical(a$p.value, b$p.value)
#' @export
ksd_test <- function(x, score, kernel = imq_kernel(), type = c("U", "V"),
                     bootstrap = NULL, n_boot = 1000,
                     wild = c("rademacher", "markov"), change_prob = NULL,
                     by_chain = FALSE,
                     test = c("auto", "quadratic", "incomplete"),
                     n_lags = NULL, blocks = NULL, standardize = TRUE,
                     nthreads = NULL, chain = NULL, progress = NULL) {
  dname <- paste(deparse1(substitute(x)), "against",
                 if (missing(score)) "its fit's gradients" else
                   deparse1(substitute(score)))
  type <- check_choice(type, c("U", "V"), "type")
  req <- gof_request(bootstrap, if (missing(wild)) NULL else wild,
                     change_prob)
  n_boot <- check_count(n_boot, "n_boot")
  standardize <- check_standardize(standardize)
  nthreads <- resolve_nthreads(nthreads)
  progress <- check_progress(progress)
  by_chain <- check_flag(by_chain, "by_chain")
  test <- check_choice(test, c("auto", "quadratic", "incomplete"), "test")
  if (!is.null(n_lags)) n_lags <- check_count(n_lags, "n_lags")
  if (!is.null(blocks)) blocks <- check_count(blocks, "blocks")
  check_kernel(kernel)
  smp <- as_sample(x, score, chain)
  n <- nrow(smp$x)
  if (n < 2L) stop_arg("x", "must have at least two rows for a test")
  rows <- gof_check_chains(smp, by_chain, req)
  route <- gof_route(test, n, n_boot, type, n_lags)
  if (by_chain) {
    per_route <- lapply(rows, function(r) {
      gof_route(test, length(r), n_boot, type, n_lags)
    })
  }
  if (route$test == "quadratic") {
    check_memory(gof_weight_bytes(n, n_boot), "n_boot",
                 sprintf("the bootstrap weights of %d replicates of %d rows",
                         n_boot, n),
                 paste("use fewer replicates, or test = \"incomplete\"",
                       "(no bootstrap)"))
  }
  st <- stein_setup(smp$x, smp$score, kernel, standardize,
                    rows = heuristic_rows(smp))
  iact <- gof_chain_iact(smp$x, st$score, rows)
  plan <- c(gof_plan(req, type, !is.null(smp$chain), rows, iact), route,
            list(blocks = blocks))
  if (route$test == "incomplete") gof_check_lags(n, max(iact), n_lags, "x")
  if (by_chain) {
    for (k in names(rows)) if (per_route[[k]]$test == "incomplete") {
      gof_check_lags(length(rows[[k]]), iact[k], n_lags,
                     sprintf("x (chain %s)", k))
    }
  }
  if (identical(plan$wild, "markov") || by_chain) gof_check_iact(rows, iact)
  out <- gof_run(st, rows, type, plan, n_boot, nthreads, progress)
  res <- new_ksd_test(out, plan, type, n_boot, dname, st, standardize)
  if (!by_chain) return(res)
  per <- lapply(names(rows), function(k) {
    r <- rows[[k]]
    pk <- c(plan[setdiff(names(plan), names(route))], per_route[[k]])
    pk$change_prob <- plan$change_prob[k]
    pk$iact <- iact[k]
    new_ksd_test(gof_run(gof_subset(st, r), list(seq_along(r)), type, pk,
                         n_boot, nthreads, FALSE),
                 pk, type, n_boot, sprintf("chain %s of %s", k, dname), st,
                 standardize)
  })
  names(per) <- names(rows)
  new_ksd_test_by_chain(res, per, type, st$kernel, standardize)
}

# The one constructor of kb_ksd_test_by_chain: the pooled test, the test of
# each chain (named by chain), the statistic's type, the resolved kernel
# and the standardisation.
new_ksd_test_by_chain <- function(pooled, chains, type, kernel, standardize) {
  structure(list(pooled = pooled, chains = chains, type = type,
                 kernel = kernel, standardize = standardize),
            class = "kb_ksd_test_by_chain")
}

# The bootstrap the caller asked for: bootstrap and wild as given (NULL
# when left out: chosen from the sample), change_prob.  Leaving bootstrap
# out but giving wild (or change_prob) asks for the wild bootstrap (with
# Markov multipliers for change_prob).
gof_request <- function(bootstrap, wild, change_prob) {
  if (!is.null(bootstrap)) {
    bootstrap <- check_choice(bootstrap, c("multinomial", "wild"),
                              "bootstrap")
  }
  if (!is.null(wild)) wild <- check_choice(wild, c("rademacher", "markov"),
                                           "wild")
  if (!is.null(change_prob)) {
    change_prob <- check_number(change_prob, "change_prob", 0, 1,
                                lower_open = TRUE, upper_open = TRUE)
    if (identical(bootstrap, "multinomial") ||
        identical(wild, "rademacher")) {
      stop_arg("change_prob", "is only used with bootstrap = \"wild\" and ",
               "wild = \"markov\"")
    }
    bootstrap <- "wild"
    wild <- "markov"
  }
  if (identical(bootstrap, "multinomial") && !is.null(wild)) {
    stop_arg("wild", "is only used with bootstrap = \"wild\"")
  }
  if (is.null(bootstrap) && !is.null(wild)) bootstrap <- "wild"
  if (identical(bootstrap, "wild") && is.null(wild)) wild <- "rademacher"
  list(bootstrap = bootstrap, wild = wild, change_prob = change_prob)
}

# The rows of each chain (chain_rows()), after the checks that need only
# the labels: by_chain needs labels; a test per chain, or Markov
# multipliers along each chain, need every chain to have two rows.
gof_check_chains <- function(smp, by_chain, req) {
  if (by_chain && is.null(smp$chain)) {
    stop_arg("by_chain", "needs chain labels: give x as a draws or ",
             "mcmc.list object, a Stan fit or a kb_chain, or give 'chain'")
  }
  rows <- chain_rows(smp)
  short <- lengths(rows) < 2L
  if (any(short) && (by_chain || !identical(req$bootstrap, "multinomial") &&
                     !identical(req$wild, "rademacher"))) {
    stop_arg(if (by_chain) "by_chain" else "x", sprintf(paste0(
      "has a chain of one row (chain %s): a test per chain, and the Markov ",
      "bootstrap along each chain, need at least two rows per chain; drop ",
      "the chain, or give bootstrap = \"multinomial\""),
      names(rows)[which(short)[1L]]))
  }
  rows
}

# A chain of fewer than GOF_MIN_ESS effective draws (its length over its
# integrated autocorrelation time; Geyer's estimate stays below about a
# third of the length, so "shorter than its autocorrelation time" is
# caught as a handful of effective draws): neither its dependence nor its
# fit can be judged.
GOF_MIN_ESS <- 5

gof_check_iact <- function(rows, iact) {
  short <- lengths(rows) < GOF_MIN_ESS * iact
  if (any(short)) {
    i <- which(short)[1L]
    stop_arg("x", sprintf(paste0(
      "has a chain too short for its integrated autocorrelation time ",
      "(chain %s: %d rows, time %s, %s effective draws; at least %d are ",
      "needed): the test cannot tell its dependence from a misfit; run the ",
      "chain longer or drop it"), names(rows)[i], length(rows[[i]]),
      format(iact[i], digits = 3),
      format(length(rows[[i]]) / iact[i], digits = 2), GOF_MIN_ESS))
  }
  invisible()
}

# Integrated autocorrelation time of each chain: the largest over the
# columns of its points and of their scores (gof_iact()), named by chain.
gof_chain_iact <- function(x, score, rows) {
  vapply(rows, function(r) {
    max(apply(cbind(x[r, , drop = FALSE], score[r, , drop = FALSE]), 2L,
              gof_iact))
  }, 0)
}

# Above this integrated autocorrelation time (the largest Geyer estimate
# over the columns of the points and of their scores) an unlabelled sample
# is taken as one chain.  Set low by inst/experiments/gof-mcmc.R: the
# estimate cannot tell independent draws (median 1.08, 1.27, 1.39 at d = 2,
# 10, 20, n = 1000) from AR(1) at 0.1 (true 1.22, estimates 1.35, 1.59), on
# which the multinomial bootstrap already rejects 0.09-0.105, while the
# Markov bootstrap on independent draws costs little (level 0.04-0.06,
# power within Monte Carlo error of the multinomial's).
GOF_IACT_THRESHOLD <- 1.2

# The bootstrap used: the request where it is complete, else chosen from
# the sample (labelled chains, or an unlabelled sample whose integrated
# autocorrelation time exceeds GOF_IACT_THRESHOLD: Markov multipliers;
# otherwise the independence bootstrap of the statistic's type), with the
# reason in words, and for Markov multipliers the flip probability of each
# chain.
gof_plan <- function(req, type, labelled, rows, iact) {
  k <- length(rows)
  tau <- max(iact)
  dependent <- labelled || tau > GOF_IACT_THRESHOLD
  why <- if (labelled) {
    if (k > 1L) sprintf("%d chains", k) else "one chain"
  } else {
    sprintf("integrated autocorrelation time %s %s %s, %s",
            format(tau, digits = 3), if (dependent) ">" else "<=",
            GOF_IACT_THRESHOLD,
            if (dependent) "a dependent sample" else "independent draws")
  }
  if (is.null(req$bootstrap)) {
    bootstrap <- if (dependent || type == "V") "wild" else "multinomial"
    wild <- if (bootstrap == "wild") {
      if (dependent) "markov" else "rademacher"
    }
    reason <- if (labelled && k > 1L) paste0(why, ", multipliers along each")
      else why
  } else {
    bootstrap <- req$bootstrap
    wild <- req$wild
    indep <- bootstrap == "multinomial" || wild == "rademacher"
    reason <- if (indep && dependent) {
      paste0("as requested; it assumes independent draws, and this sample ",
             "has ", why)
    } else "as requested"
  }
  cp <- NULL
  if (identical(wild, "markov")) {
    cp <- if (is.null(req$change_prob)) {
      mapply(gof_change_prob, lengths(rows), iact)
    } else rep(req$change_prob, k)
    names(cp) <- names(rows)
  }
  list(bootstrap = bootstrap, wild = wild, change_prob = cp, iact = iact,
       reason = reason)
}

# Rows r of a Stein setup, as a setup of their own (same kernel and scale).
gof_subset <- function(st, r) {
  st$x <- st$x[r, , drop = FALSE]
  st$s <- st$s[r, , drop = FALSE]
  st$n <- length(r)
  st
}

# The statistic, its estimate, the bootstrap statistics and the p-value of
# the test on the rows of a Stein setup (rows: the rows of each chain).
gof_run <- function(st, rows, type, plan, n_boot, nthreads, progress) {
  if (identical(plan$test, "incomplete")) {
    return(gof_run_lags(st, c(plan, list(progress = progress)), nthreads))
  }
  n <- st$n
  est <- ksd_of_rows(st, seq_len(n), NULL, type, nthreads)
  if (type == "V") est <- est^2
  stat <- n * est
  Wp <- gof_packed_weights(n, n_boot, plan,
                           rep(plan$change_prob, lengths(rows)), rows)
  q <- gof_quad(st, Wp, n_boot, nthreads, progress, plan$blocks)
  boot <- if (type == "U") q$quad - q$diag else q$quad
  boot <- if (plan$bootstrap == "multinomial") n * boot else boot / n
  if (any(!is.finite(boot))) {
    stop_numeric("a bootstrap statistic is not finite: scale the data or ",
                 "the kernel")
  }
  list(test = "quadratic", statistic = stat, estimate = est, boot = boot,
       n = n, p.value = (1 + sum(boot >= stat)) / (n_boot + 1))
}

# The one constructor of kb_ksd_test: gof_run()'s result `out`, the
# bootstrap plan, the statistic's type, the number of replicates, the
# data's name and the Stein setup (its kernel and scale).
new_ksd_test <- function(out, plan, type, n_boot, dname, st, standardize) {
  inc <- out$test == "incomplete"
  if (inc) {
    plan$bootstrap <- plan$wild <- plan$change_prob <- NULL
    method <- sprintf(paste0(
      "KSD goodness-of-fit test (incomplete U-statistic over %d cyclic lags ",
      "in [n/8, 3n/8], normal null, variance from the integrated ",
      "autocorrelation time %s of the row means: %s)"), out$n_lags,
      format(out$tau_g, digits = 3), plan$test_why)
  } else {
    boot_name <- if (plan$bootstrap == "wild") {
      paste(if (plan$wild == "markov") "Markov" else "Rademacher", "wild")
    } else "multinomial"
    method <- sprintf(
      "KSD goodness-of-fit test (%s-statistic, %s bootstrap: %s)", type,
      boot_name, plan$reason)
  }
  structure(list(
    statistic = if (inc) c(z = out$statistic) else
      c("n KSD^2" = out$statistic),
    parameter = if (inc) c(n_lags = out$n_lags) else c(n_boot = n_boot),
    p.value = out$p.value,
    estimate = stats::setNames(out$estimate, if (inc) {
      "KSD^2 (incomplete U-statistic)"
    } else paste0("KSD^2 (", type, "-statistic)")),
    method = method, data.name = dname, boot = out$boot, type = type,
    bootstrap = plan$bootstrap, wild = plan$wild,
    change_prob = plan$change_prob, iact = plan$iact, n = out$n,
    test = out$test, n_lags = out$n_lags, variance = out$variance,
    tau_g = out$tau_g, kernel = st$kernel,
    standardize = !is.null(st$scale)),
    class = c("kb_ksd_test", "htest"))
}

# The n x n_boot bootstrap weights, all drawn with R's generator: centred
# multinomial weights (counts / n - 1 / n), or wild multipliers (i.i.d.
# Rademacher signs, or a Markov chain of signs down each column, along the
# iterations of each chain: `rows`, the rows of each chain in iteration
# order, as chain_rows() gives them; each chain after the first starts with
# a fresh fair sign, drawn from the same uniform as a flip would be, so
# that a single chain in row order consumes the same random numbers).
# `first`: the Markov multipliers' first signs when drawn already (by
# gof_packed_weights(), which draws them all before the blocks).
gof_weights <- function(n, n_boot, bootstrap, wild, change_prob,
                        rows = NULL, first = NULL) {
  if (bootstrap == "multinomial") {
    return((stats::rmultinom(n_boot, n, rep(1 / n, n)) - 1) / n)
  }
  if (wild == "rademacher") {
    return(matrix(ifelse(stats::runif(n * n_boot) < 0.5, -1, 1), n, n_boot))
  }
  if (is.null(first)) first <- ifelse(stats::runif(n_boot) < 0.5, -1, 1)
  u <- matrix(stats::runif(n * n_boot), n, n_boot)
  flip <- u < change_prob
  flip[1L, ] <- FALSE
  if (length(rows) > 1L) {
    starts <- cumsum(lengths(rows))[-length(rows)] + 1L
    flip[starts, ] <- u[starts, , drop = FALSE] < 0.5
  }
  # W_t = W_1 (-1)^(number of flips up to t)
  parity <- apply(flip, 2L, cumsum) %% 2L
  if (n == 1L) parity <- matrix(parity, 1L)
  W <- sweep(1 - 2 * parity, 2L, first, "*")
  if (length(rows) > 1L) W[unlist(rows, use.names = FALSE), ] <- W
  W
}

# Replicates drawn and packed at a time by gof_packed_weights(): a
# multiple of GOF_RB, so that blocks fill whole packed blocks.
GOF_DRAW_BLOCK <- 64L

# The weights of gof_weights() packed for src/gof.c (replicate r of packed
# block bb, row j at r + GOF_RB (j + n bb); replicates beyond n_boot are
# zero), drawn GOF_DRAW_BLOCK replicates at a time so that the n x n_boot
# matrix and its temporaries are never held: the same random numbers in the
# same order as one gof_weights() call (multinomial counts and uniforms are
# drawn column after column; the Markov first signs of all replicates
# come first), so the same weights.
gof_packed_weights <- function(n, n_boot, plan, change_prob, rows) {
  nbb <- (n_boot + GOF_RB - 1L) %/% GOF_RB
  Wp <- numeric(GOF_RB * as.double(n) * nbb)
  markov <- identical(plan$wild, "markov")
  first <- if (markov) ifelse(stats::runif(n_boot) < 0.5, -1, 1)
  for (c0 in seq(0L, n_boot - 1L, by = GOF_DRAW_BLOCK)) {
    b <- min(GOF_DRAW_BLOCK, n_boot - c0)
    W <- gof_weights(n, b, plan$bootstrap, plan$wild, change_prob, rows,
                     if (markov) first[c0 + seq_len(b)])
    k <- (b + GOF_RB - 1L) %/% GOF_RB
    if (k * GOF_RB > b) W <- cbind(W, matrix(0, n, k * GOF_RB - b))
    at <- GOF_RB * as.double(n) * (c0 %/% GOF_RB)
    Wp[at + seq_len(GOF_RB * n * k)] <-
      aperm(array(W, c(n, GOF_RB, k)), c(2L, 1L, 3L))
  }
  Wp
}

# The default flip probability of the Markov multipliers for chains of
# length m with integrated autocorrelation time tau: the multipliers'
# correlation length l = (1 - p) / p is set to sqrt(m tau) (at least 1), so
# p = 1 / (1 + l).  l grows like sqrt(m) (the rate of Chwialkowski et al.:
# p -> 0, m p -> infinity) and with the sample's dependence; see
# inst/experiments/gof-dependent.R for the measured level and power.
gof_change_prob <- function(m, tau) {
  1 / (1 + max(1, sqrt(m * tau)))
}

# The incomplete test (test = "incomplete"; 'Large samples' in ?ksd_test).
# test = "auto" runs it when the quadratic test's work, n^2 n_boot
# pair-replicates, exceeds GOF_QUAD_MAX: 4e11, about a minute on one core
# (bench-gof.R: 12.6 s at n = 1e4 and 112 s at 3e4, n_boot = 1000, d = 10,
# one thread), so n > 2e4 at the default n_boot = 1000.  The internal
# option kernbayes.gof_quad_max replaces the figure (tests lower it).
GOF_QUAD_MAX <- 4e11

# Its shortest lag, n / 8 rows, must be at least GOF_LAG_IACT integrated
# autocorrelation times, so that the two points of a pair are independent
# for practical purposes (AR(1) at 0.9: correlation 0.9^190 = 2e-9 there).
GOF_LAG_IACT <- 10

# Default number of lags: floor(n / (GOF_LAG_DIV tau)), at most
# GOF_LAG_MAX.  More lags add a chi-square part (the graph of pairs has
# degree 2 J, its low-frequency eigenvalues weigh the chain's long-run
# variance tau^2 against the Gaussian part's tau_2 n / J): its share of
# the variance is about J tau^2 / (D tau_2) for lags spread over D = n / 4
# rows, with tau_2 >= tau / 2 for AR(1) chains, so that J = n / (40 tau)
# keeps it near 0.1-0.2 (skewness about 0.1-0.25, a level error of at most
# about 0.01); more lags add little power past that (the noise reaches the
# complete statistic's order, tau / n).
GOF_LAG_DIV <- 40
GOF_LAG_MAX <- 1000L

# Which test runs (test as checked; n rows; n_boot; type; n_lags as given
# or NULL), with the reason in words, as plan fields: test, test_why,
# n_lags.  The incomplete statistic is U-type: type = "V" is refused there.
gof_route <- function(test, n, n_boot, type, n_lags) {
  big <- as.double(n)^2 * n_boot
  lim <- getOption("kernbayes.gof_quad_max", GOF_QUAD_MAX)
  if (test == "auto") {
    test <- if (big > lim) "incomplete" else "quadratic"
    why <- sprintf("n^2 n_boot = %s %s %s (test = \"auto\")",
                   format(big, digits = 3), if (big > lim) ">" else "<=",
                   format(lim, digits = 3))
  } else why <- "as requested"
  if (test == "incomplete" && type == "V") {
    stop_arg("type", sprintf(paste0(
      "must be \"U\" for the incomplete test (%s): its statistic is a ",
      "U-statistic over distant pairs, with no diagonal; use type = \"U\", ",
      "or test = \"quadratic\" for the V-statistic"), why))
  }
  list(test = test, test_why = why, n_lags = n_lags)
}

# Bytes of R heap the quadratic test's bootstrap weights take at their
# peak: the packed n x n_boot doubles (gof_packed_weights()) and the
# temporaries of one block of GOF_DRAW_BLOCK replicates, with the garbage
# R's collector lets pile up meanwhile.  Fitted to gc()'s "max used" at n =
# 2e4 (Markov multipliers, the largest; 200, 1000, 3000 replicates: 114,
# 338, 859 MB, i.e. 14 bytes per n n_boot and 3.2 KB per row) and rounded
# up.  Before the weights were drawn in blocks they took 24
# (multinomial), 36 (Rademacher) and 48 (Markov) bytes per n n_boot, the
# 4.6 GB measured at n = 1e5, 1000 replicates, against an estimate of 2.4.
gof_weight_bytes <- function(n, n_boot) {
  as.double(n) * (16 * (n_boot + 8) + 4000)
}

# The lags' condition (see GOF_LAG_IACT) for n rows with integrated
# autocorrelation time tau, and n_lags at most n / 8 (distinct lags over
# n / 4 rows, at least two rows apart).
gof_check_lags <- function(n, tau, n_lags, arg) {
  if (n / 8 < GOF_LAG_IACT * tau) {
    stop_arg(arg, sprintf(paste0(
      "is too short for the incomplete test (%d rows, integrated ",
      "autocorrelation time %s: its shortest lag, n / 8 = %d rows, must be ",
      "at least %d times that time, so n at least %.0f); run the chain ",
      "longer, or use test = \"quadratic\""), n, format(tau, digits = 3),
      n %/% 8L, GOF_LAG_IACT, ceiling(8 * GOF_LAG_IACT * tau)))
  }
  if (!is.null(n_lags) && n_lags > n %/% 8L) {
    stop_arg("n_lags", sprintf(paste0(
      "must be at most n / 8 = %d for %d rows (distinct lags in [n/8, ",
      "3n/8])"), n %/% 8L, n))
  }
  invisible()
}

# J lags spread evenly over [n/8, 3n/8] (distinct for J <= n / 8).
gof_lags <- function(n, J) {
  as.integer(floor(n / 8 + (n / 4) * (seq_len(J) - 0.5) / J))
}

# g_i = (1/J) sum_j k_p(x_i, x_{(i + L_j) mod n}) in C (src/gof.c).  With
# `blocks` (a count), the rows are cut into that many ranges of equal work,
# each a future (every row costs J evaluations); each g_i is computed as in
# one call, so g is the same to the last bit.
gof_lag_means <- function(st, lags, nthreads, blocks = NULL,
                          progress = FALSE) {
  if (is.null(blocks)) {
    return(.Call(C_kb_gof_lags, st$x, st$s, st$kernel, as.integer(lags),
                 nthreads, NULL))
  }
  b <- unique(round(seq(0, st$n, length.out = min(blocks, st$n) + 1L)))
  ranges <- lapply(seq_len(length(b) - 1L), function(i) b[i + 0:1])
  one <- lag_block_task(st$x, st$s, st$kernel, as.integer(lags), nthreads)
  unlist(progress_lapply(ranges, one, length(ranges),
                         "KSD test: row blocks", progress))
}

# The task of one row range of the incomplete test (see block_sums_task()
# for why it is built apart from the caller's environment).
lag_block_task <- function(X, S, K, lags, nthreads) {
  force(X)
  force(S)
  force(K)
  force(lags)
  force(nthreads)
  function(r, relay) {
    v <- .Call(C_kb_gof_lags, X, S, K, lags, nthreads, as.double(r))
    relay(1)
    v
  }
}

# The incomplete test on a Stein setup: S = mean(g) estimates KSD^2 (each
# pair's points at least n / 8 rows apart, no diagonal); under the null the
# pairs' terms are uncorrelated unless both their points are close in the
# chain, so Var(S) is the long-run variance of the series g over n,
# var(g) tau_g / n with tau_g Geyer's integrated autocorrelation time of g
# (gof_iact); z = S / sd(S), one-sided normal p-value.
gof_run_lags <- function(st, plan, nthreads) {
  n <- st$n
  J <- plan$n_lags %||%
    min(GOF_LAG_MAX, n %/% 8L,
        max(1L, floor(n / (GOF_LAG_DIV * max(plan$iact)))))
  g <- gof_lag_means(st, gof_lags(n, J), nthreads, plan$blocks,
                     plan$progress)
  est <- mean(g)
  tau_g <- gof_iact(g)
  v <- stats::var(g) * tau_g / n
  if (!(v > 0)) {
    stop_numeric("the incomplete statistic's terms do not vary: the test ",
                 "needs a sample whose Stein kernel values differ")
  }
  z <- est / sqrt(v)
  list(test = "incomplete", statistic = z, estimate = est, boot = NULL,
       n = n, n_lags = as.integer(J), variance = v, tau_g = tau_g,
       p.value = stats::pnorm(z, lower.tail = FALSE))
}

# Rows per tile and replicates per packed block of src/gof.c.
GOF_TILE <- 64L
GOF_RB <- 8L

# Internal option kernbayes.gof_route: "blocked" (default; src/gof.c's
# tile_apply, register blocks of 4 rows x 4 replicates) or "reference" (its
# previous kernel, tile_apply_ref, 4 rows x 8 replicates, kept so that the
# tests can check that the two give the same bootstrap bit for bit).
gof_route_ref <- function() {
  route <- getOption("kernbayes.gof_route", "blocked")
  check_choice(route, c("blocked", "reference"), "kernbayes.gof_route") ==
    "reference"
}

# The quadratic forms w_b' K_p w_b (quad) and their diagonal parts
# sum_i w_ib^2 k_p(x_i, x_i) (diag) for the B replicates w_b packed in Wp
# (gof_packed_weights()), in C on the Stein setup st.  The tiles of the lower triangle are cut into slices that
# depend on n only (progress between slices; at most 2000 tiles' partial
# sums in memory), so the result depends on neither progress nor threads.
# With `blocks` (a count), consecutive slices are grouped into that many
# futures; the slices' sums are added in slice order here, as in one
# process, so the bootstrap is the same to the last bit.
gof_quad <- function(st, Wp, B, nthreads, progress, blocks = NULL) {
  n <- st$n
  nbb <- (B + GOF_RB - 1L) %/% GOF_RB
  nrb <- (n + GOF_TILE - 1) %/% GOF_TILE
  ntile <- nrb * (nrb + 1) / 2
  k <- min(ntile, max(50, ceiling(ntile / 2000)))
  cuts <- unique(round(seq(0, ntile, length.out = k + 1L)))
  ref <- as.double(gof_route_ref())
  one <- quad_slices_task(st$x, st$s, st$kernel, Wp, cuts, nthreads, ref)
  ns <- length(cuts) - 1L
  if (is.null(blocks)) {
    rep <- progress_reporter(ns, "KSD test: bootstrap", progress)
    on.exit(rep$done())
    parts <- one(seq_len(ns), function(amount = 1) rep$add(amount))
  } else {
    groups <- split(seq_len(ns), ceiling(seq_len(ns) * min(blocks, ns) / ns))
    parts <- unlist(progress_lapply(unname(groups), one, ns,
                                    "KSD test: bootstrap blocks", progress),
                    recursive = FALSE)
  }
  quad <- diag <- numeric(nbb * GOF_RB)
  for (v in parts) {
    quad <- quad + v$quad
    diag <- diag + v$diag
  }
  list(quad = quad[seq_len(B)], diag = diag[seq_len(B)])
}

# The task of a group of slices of the bootstrap's tiles (slices i: tiles
# cuts[i] to cuts[i + 1] - 1), a list of each slice's sums; built apart from
# the caller's environment (see block_sums_task()).
quad_slices_task <- function(X, S, K, Wp, cuts, nthreads, ref) {
  force(X)
  force(S)
  force(K)
  force(Wp)
  force(cuts)
  force(nthreads)
  force(ref)
  function(idx, relay) {
    lapply(idx, function(i) {
      v <- .Call(C_kb_gof_quad, X, S, K, Wp, cuts[i], cuts[i + 1L],
                 nthreads, ref)
      relay(1)
      v
    })
  }
}

#' @export
print.kb_ksd_test <- function(x, ...) {
  check_result(x)
  NextMethod()
  cat("kernel:", describe_resolved(x$kernel),
      if (isTRUE(x$standardize)) "(columns standardised)" else "", "\n")
  invisible(x)
}

#' @export
print.kb_ksd_test_by_chain <- function(x, digits = 4, ...) {
  check_result(x)
  p <- x$pooled
  cat(sprintf("KSD goodness-of-fit test per chain (%s-statistic, %s)\n",
              x$type, sub("^KSD goodness-of-fit test \\([UV]-statistic, ", "",
                          sub("\\)$", "", p$method))))
  cat("  kernel:", describe_resolved(x$kernel),
      if (isTRUE(x$standardize)) "(columns standardised)" else "", "\n")
  tab <- as.data.frame(x)
  num <- vapply(tab, is.numeric, TRUE) & names(tab) != "n"
  tab[num] <- lapply(tab[num], signif, digits)
  print(tab, row.names = FALSE)
  tests <- c(x$chains, list(all = p))
  inc <- vapply(tests, function(r) identical(r$test, "incomplete"), TRUE)
  size <- if (!any(inc)) sprintf("%d replicates each", p$parameter[[1L]])
    else if (all(inc)) "incomplete tests (normal null)"
    else sprintf("incomplete tests for %s, %d replicates for the others",
                 paste(names(tests)[inc], collapse = ", "),
                 n_boot_of(tests[!inc]))
  cat(sprintf(paste0("  %s; \"all\" tests the chains pooled. ",
                     "Each p-value is for one chain: with %d chains, ",
                     "expect one below %.2g about %.0f%% of the time when ",
                     "all are right.\n"),
              size, length(x$chains), 0.05,
              100 * (1 - 0.95^length(x$chains))))
  invisible(x)
}

# The replicates of the quadratic tests among `tests`.
n_boot_of <- function(tests) tests[[1L]]$parameter[[1L]]

#' @export
as.data.frame.kb_ksd_test_by_chain <- function(x, row.names = NULL,
                                               optional = FALSE, ...) {
  check_result(x)
  tests <- c(x$chains, list(all = x$pooled))
  field <- function(what) vapply(tests, function(r) {
    v <- r[[what]]
    if (length(v) == 1L) unname(v) else NA_real_
  }, 0)
  # the pooled row's dependence is that of its chains (above)
  data.frame(chain = names(tests), n = as.integer(field("n")),
             statistic = field("statistic"), estimate = field("estimate"),
             iact = field("iact"), change_prob = field("change_prob"),
             p_value = field("p.value"), row.names = row.names,
             stringsAsFactors = FALSE)
}

#' Plot the bootstrap null of a KSD test
#'
#' A histogram of the bootstrap statistics with the observed statistic as a
#' vertical line.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x A `kb_ksd_test` object from [ksd_test()].
#' @param breaks Passed to [graphics::hist()].
#' @param ... Further arguments to [graphics::hist()].
#' @return `x`, invisibly.
#' @export
plot.kb_ksd_test <- function(x, breaks = 40, ...) {
  check_result(x)
  if (identical(x$test, "incomplete")) {
    z <- unname(x$statistic)
    lim <- range(c(-4, 4, z))
    args <- utils::modifyList(list(
      main = sprintf("KSD test (incomplete): N(0, 1) null (p = %s)",
                     format(x$p.value, digits = 3)),
      xlab = "z", ylab = "density", xlim = lim), list(...))
    do.call(graphics::curve, c(list(expr = quote(stats::dnorm(x)),
                                    from = lim[1L], to = lim[2L]), args))
    graphics::abline(v = z, col = "red", lwd = 2)
    graphics::legend("topright", legend = c("N(0, 1) null", "observed z"),
                     col = c("black", "red"), lwd = c(1, 2), bty = "n")
    return(invisible(x))
  }
  plot_null(null_stats = x$boot, observed = unname(x$statistic),
            title = sprintf("KSD test: bootstrap null (p = %s)",
                            format(x$p.value, digits = 3)),
            axis_label = "n KSD^2", label = "bootstrap", breaks = breaks,
            ...)
  invisible(x)
}

# Integrated autocorrelation time of a series, tau = 1 + 2 sum_{h >= 1}
# rho_h, by Geyer's (1992) initial positive sequence: the sums rho_{2k} +
# rho_{2k+1} are added while positive.  Autocovariances by FFT; at least 1
# (anticorrelated and constant series count as independent).
gof_iact <- function(v) {
  n <- length(v)
  # scale-free: divided by its largest magnitude first, so that neither the
  # mean nor the FFT's squared moduli overflow (points of 1e300)
  big <- max(abs(v))
  if (is.finite(big) && big > 0) v <- v / big
  v <- v - mean(v)
  if (n < 4L || !any(v != 0)) return(1)
  m <- stats::nextn(2L * n)
  f <- stats::fft(c(v, numeric(m - n)))
  # n m in doubles: as integers it overflows from about n = 32768 (NA,
  # and ksd_test() failed on samples that large)
  acov <- Re(stats::fft(Mod(f)^2, inverse = TRUE))[seq_len(n)] /
    (as.double(n) * m)
  rho <- acov / acov[1L]
  k <- seq_len(n %/% 2L)
  pairs <- rho[2L * k - 1L] + rho[2L * k]
  stop_at <- match(TRUE, pairs <= 0, nomatch = length(pairs) + 1L) - 1L
  max(1, -1 + 2 * sum(pairs[seq_len(stop_at)]))
}

#' Tables, summaries and plots of results that are not draws
#'
#' `as.data.frame()`, `summary()` and `plot()` for the results that hold no
#' points of a posterior: goodness-of-fit tests ([ksd_test()],
#' [fssd_test()]), KSD paths and comparisons ([ksd_path()], [ksd()] with
#' `reference`), KBR cross-validation ([kbr_cv()]), filters
#' ([kbr_filter()], [kalman_filter()]) and KSD-optimal weights
#' ([ksd_weights()]).
#'
#' These classes have no `posterior::as_draws_df()` method on purpose: a
#' test holds a statistic and its null, a path or comparison KSD values, a
#' cross-validation a table of settings, a filter the posterior mean and sd
#' at each time (a KBR fit, [kbr()], holds signed weights over its prior
#' points, not draws: its posteriors are read with [posterior_mean()],
#' [posterior_sd()] and [predict()][predict.kb_kbr]). KSD-optimal weights
#' are a vector without the points they weigh: give them to the result's
#' conversion, `posterior::as_draws_df(th, weights = w)` (see
#' [as_draws.kb_result]), which attaches them as `.log_weight`.
#'
#' The object is checked first: a result whose fields have been edited so
#' that they no longer fit together (lengths, indices, columns, a field
#' removed or a class changed) is an error of class `kb_error_arg` naming
#' it and the field.
#'
#' @param x,object A result: `kb_ksd_test`, `kb_ksd_test_by_chain`,
#'   `kb_fssd_test`, `kb_ksd_path`, `kb_ksd_compare`, `kb_kbr_cv`,
#'   `kb_filter` or `kb_weights`.
#' @param row.names,optional Ignored (for [as.data.frame()]).
#' @param ... Ignored by `as.data.frame()` and `summary()`; passed to the
#'   graphics functions by `plot()`.
#' @return `as.data.frame()`: a data frame. A test: one row (`n`,
#'   `statistic`, `estimate`, the null's size (`n_boot` for [ksd_test()],
#'   the number of locations `J` for [fssd_test()]), `p_value` and
#'   `method`); a test
#'   per chain: one row per chain and `"all"`; a KSD path: `m` and `ksd`;
#'   a comparison: `set`, `points` and `ksd`; a cross-validation: its
#'   table of settings and criterion; a filter: `time`, then `mean_<v>` and
#'   `sd_<v>` for each state variable; weights: `point`, `weight` and, for
#'   labelled input, `chain` and `iteration`. `summary()`: the table of
#'   `as.data.frame()` (a cross-validation's ordered by its criterion, best
#'   first). `plot()`: `x`, invisibly; a test per chain: each chain's
#'   p-value (and the pooled test's) with a line at 0.05; weights: the
#'   weight of each point, with the equal weight \eqn{1/n} as a line.
#' @name result_tables
#' @examples
#' set.seed(1)
#' tg <- gaussian_target(c(0, 0))
#' x <- sample_target(tg, 200)
#' tt <- ksd_test(x, tg, n_boot = 100, progress = FALSE)
#' as.data.frame(tt)
#' summary(tt)
#' ft <- fssd_test(x, tg, n_locations = 3)
#' as.data.frame(ft)
#' summary(ft)
#' tc <- ksd_test(x, tg, n_boot = 100, chain = rep(1:2, each = 100),
#'                by_chain = TRUE, progress = FALSE)
#' summary(tc)
#' plot(tc)
#' head(as.data.frame(ksd_path(x, tg)))
#' th <- stein_thin(x, tg, 10, progress = FALSE)
#' as.data.frame(ksd(th, reference = x[1:10, ], score = tg))
#' w <- ksd_weights(th)
#' head(as.data.frame(w))
#' plot(w)
#' xs <- rnorm(100)
#' ys <- xs + rnorm(100, sd = 0.3)
#' cv <- kbr_cv(xs, ys, folds = 3, progress = FALSE)
#' head(summary(cv))
#' kf <- kalman_filter(cumsum(rnorm(20)), A = 1, C = 1, Q = 1, R = 1)
#' head(as.data.frame(kf))
NULL

# The one row of a test's table: its statistic and estimate, the size of
# its null (the parameter) and the p-value.
test_frame <- function(x, row.names = NULL) {
  par <- x[["parameter"]]
  out <- data.frame(n = as.integer(x[["n"]]),
                    statistic = unname(x[["statistic"]]),
                    estimate = unname(x[["estimate"]]))
  out[[names(par)[1L]]] <- unname(par)[1L]
  out$p_value <- x[["p.value"]]
  out$method <- x[["method"]]
  if (!is.null(row.names)) row.names(out) <- row.names
  out
}

#' @rdname result_tables
#' @export
as.data.frame.kb_ksd_test <- function(x, row.names = NULL, optional = FALSE,
                                      ...) {
  check_result(x)
  test_frame(x, row.names)
}

#' @rdname result_tables
#' @export
summary.kb_ksd_test <- function(object, ...) {
  check_result(object, "object")
  test_frame(object)
}

#' @rdname result_tables
#' @export
summary.kb_ksd_test_by_chain <- function(object, ...) {
  check_result(object, "object")
  as.data.frame(object)
}

#' @rdname result_tables
#' @export
plot.kb_ksd_test_by_chain <- function(x, ...) {
  check_result(x)
  tab <- as.data.frame(x)
  plot_with(graphics::dotchart, list(
    x = tab$p_value, labels = tab$chain, xlim = c(0, 1),
    xlab = "p-value", main = "KSD test per chain"), list(...))
  graphics::abline(v = 0.05, lty = 2)
  invisible(x)
}
