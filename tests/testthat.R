library(testthat)
library(kernbayes)

test_check("kernbayes")
