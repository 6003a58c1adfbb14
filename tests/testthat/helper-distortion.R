# The moment report's distortion warning (kb_warning_distortion) is tested
# in test-moments.R, which switches it on where it is the subject; the
# other tests assert the numbers of selections on small or random samples,
# where it would only add noise to the log.
options(kernbayes.warn_distortion = FALSE)
