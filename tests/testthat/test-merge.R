# Merging KSDT dictionaries (R/merge.R): c() / merge() of kb_ksdt results.

test_that("merging dictionaries: recomputed KSD, no worse than the best, idempotent, sources", {
  tg <- gaussian_target(c(0, 0))
  set.seed(802)
  a <- ksdt(sample_target(tg, 600), tg, progress = FALSE, standardize = FALSE)
  b <- ksdt(sample_target(tg, 600), tg, progress = FALSE, standardize = FALSE)
  fin <- function(z) z$ksd[length(z$ksd)]
  m <- c(a, b)
  expect_s3_class(m, "kb_ksdt")
  # the merged KSD is the KSD of its points, recomputed from scratch
  expect_equal(fin(m), ksd(m$points, m$score, imq_kernel(), standardize = FALSE), tolerance = 1e-12)
  # no worse than the better input (budget 0)
  expect_lte(fin(m), min(fin(a), fin(b)) * (1 + 1e-12))
  expect_equal(sort(m$input_ksd), sort(c(fin(a), fin(b))), tolerance = 1e-12)
  # merge() is the same operation
  expect_identical(merge(a, b)$points, m$points)
  # with a budget the merged KSD may rise, by at most the budget per point
  mb <- c(a, b, budget = 1e-4)
  added <- nrow(b$points)
  expect_lte(fin(mb)^2, min(fin(a), fin(b))^2 + added * 1e-4)
  # merging a dictionary with itself changes nothing
  aa <- c(a, a)
  expect_identical(aa$points, a$points)
  expect_equal(fin(aa), fin(a), tolerance = 1e-12)
  # sources point back to the inputs
  src <- m$source
  expect_identical(nrow(src), nrow(m$points))
  for (i in seq_len(nrow(src))) {
    d <- list(a, b)[[src$dictionary[i]]]
    j <- match(src$index[i], d$index)
    expect_identical(unname(m$points[i, ]), unname(d$points[j, ]))
  }
  # Stein thinning of the union to a given size
  st <- c(a, b, how = "stein_thin", m = 40)
  expect_identical(nrow(st$points), 40L)
  expect_equal(fin(st), ksd(st$points, st$score, imq_kernel(), standardize = FALSE), tolerance = 1e-10)
  expect_false(anyDuplicated(st$points) > 0)
})

test_that("a merged dictionary keeps and plots the streams it was merged from", {
  tg <- gaussian_target(c(0, 0))
  set.seed(811)
  a <- ksdt(sample_target(tg, 400), tg, progress = FALSE, standardize = FALSE)
  b <- ksdt(sample_target(tg, 300), tg, progress = FALSE, standardize = FALSE)
  for (m in list(c(a, b), c(a, b, how = "stein_thin", m = 20))) {
    st <- m$streams
    expect_identical(st$ksd, list(a$ksd, b$ksd))
    expect_identical(st$size, list(a$size, b$size))
    expect_identical(st$label, c("dictionary 1", "dictionary 2"))
    expect_identical(st$final, m$input_ksd)
    # each merged point is a point of the stream it is said to come from
    expect_identical(st$point, as.integer(m$source$dictionary))
    for (i in seq_len(nrow(m$points))) {
      d <- list(a, b)[[st$point[i]]]$points
      expect_true(any(colSums(abs(t(d) - m$points[i, ])) == 0))
    }
    # the plot shows the streams' traces, not the merge's own
    drawn <- record_lines(plot(m, which = 1))
    expect_true(has_line(drawn, a$ksd))
    expect_true(has_line(drawn, b$ksd))
    expect_false(has_line(drawn, m$ksd))
    drawn <- record_lines(plot(m, which = 2))
    expect_true(has_line(drawn, a$size))
    expect_true(has_line(drawn, b$size))
    expect_false(has_line(drawn, m$size))
    grDevices::pdf(NULL)
    expect_identical(plot(m), m)
    grDevices::dev.off()
  }
  # streams labelled by their chain when each is one chain's
  a$chain <- rep(3L, length(a$index))
  a$iteration <- a$index
  b$chain <- rep(1L, length(b$index))
  b$iteration <- b$index
  expect_identical(c(b, a)$streams$label, c("chain 1", "chain 3"))
  # a one-stream dictionary has no streams: its plot is its own trace
  expect_null(a[["streams"]])
  # ksdt() on several chains: one stream per chain, kept in per_chain
  x <- sample_target(tg, 600)
  k3 <- ksdt(x, tg, chain = rep(1:3, each = 200), progress = FALSE)
  expect_identical(k3$streams$label, paste("chain", 1:3))
  drawn <- record_lines(plot(k3, which = 1:3))
  for (z in k3$per_chain) {
    expect_true(has_line(drawn, z$ksd))
    expect_true(has_line(drawn, z$size))
  }
  expect_false(has_line(drawn, k3$ksd))
})

test_that("merging: bad input (dimension, empty dictionary, wrong class)", {
  tg2 <- gaussian_target(c(0, 0))
  tg3 <- gaussian_target(c(0, 0, 0))
  set.seed(803)
  a <- ksdt(sample_target(tg2, 100), tg2, progress = FALSE)
  b <- ksdt(sample_target(tg3, 100), tg3, progress = FALSE)
  expect_error(c(a, b), "dictionaries of one dimension; they have 2, 3", class = "kb_error_arg")
  e <- a
  e$points <- e$points[0, , drop = FALSE]
  e$score <- e$score[0, , drop = FALSE]
  expect_error(c(a, e), "dictionary 2 is empty")
  expect_error(merge(a, list(1)), "kb_ksdt")
  expect_error(c(a, a, how = "stein_thin", m = 10^6), "'m' must be at most", class = "kb_error_arg")
})
