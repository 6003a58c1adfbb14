# Reference solvers of min w'Kw over the simplex {w >= 0, sum w = 1}, for
# bench-weights.R and tests/testthat/test-thin.R (which sys.source() this
# file from the installed package): quadprog's dual method (dense and
# compact constraints) and the previous R implementation of ksd_weights().
# quadprog needs a positive definite matrix: it gets K + ridge max(K_ii) I
# (ridge 1e-12, the one src/weights.c works with); objectives are compared
# on K.

qp_dense <- function(K, ridge = 1e-12) {
  n <- nrow(K)
  w <- quadprog::solve.QP(K + diag(ridge * max(diag(K)), n), rep(0, n),
                          cbind(1, diag(n)), c(1, rep(0, n)),
                          meq = 1)$solution
  w <- pmax(w, 0)
  w / sum(w)
}

qp_compact <- function(K, ridge = 1e-12) {
  n <- nrow(K)
  Amat <- matrix(0, n, n + 1L)
  Aind <- matrix(0L, n + 1L, n + 1L)
  Amat[, 1] <- 1
  Aind[1, 1] <- n
  Aind[-1, 1] <- seq_len(n)
  Amat[1, -1] <- 1
  Aind[1, -1] <- 1L
  Aind[2, -1] <- seq_len(n)
  w <- quadprog::solve.QP.compact(K + diag(ridge * max(diag(K)), n),
                                  rep(0, n), Amat, Aind, c(1, rep(0, n)),
                                  meq = 1)$solution
  w <- pmax(w, 0)
  w / sum(w)
}

# The previous implementation (kernbayes before issue 16): an R loop that
# refactorises the support's K at every step.
old_ridge_chol <- function(A) {
  jitter <- 0
  base <- mean(abs(diag(A)))
  repeat {
    R <- tryCatch(chol(A + diag(jitter, nrow(A))), error = function(e) NULL)
    if (!is.null(R)) return(R)
    jitter <- if (jitter == 0) 1e-12 * base else jitter * 100
  }
}
old_affine_qp <- function(K) {
  R <- old_ridge_chol(K)
  z <- backsolve(R, forwardsolve(t(R), rep(1, nrow(K))))
  z / sum(z)
}
old_simplex_qp <- function(K, tol = 1e-12, max_iter = 50L * nrow(K) + 100L) {
  n <- nrow(K)
  w <- numeric(n)
  i0 <- which.min(diag(K))
  w[i0] <- 1
  P <- i0
  scale <- max(abs(diag(K)))
  for (iter in seq_len(max_iter)) {
    g <- drop(K %*% w)
    lam <- sum(w * g)
    cand <- setdiff(seq_len(n), P)
    if (!length(cand)) break
    viol <- g[cand] - lam
    if (min(viol) >= -tol * scale) break
    P <- c(P, cand[which.min(viol)])
    repeat {
      z <- numeric(n)
      z[P] <- old_affine_qp(K[P, P, drop = FALSE])
      if (all(z[P] > 0)) {
        w <- z
        break
      }
      neg <- P[z[P] <= 0]
      alpha <- min(w[neg] / (w[neg] - z[neg]))
      w <- w + alpha * (z - w)
      drop_ <- P[w[P] <= tol]
      w[drop_] <- 0
      P <- setdiff(P, drop_)
      w <- w / sum(w)
    }
  }
  w
}
