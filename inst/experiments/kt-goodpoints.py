#!/usr/bin/env python3
# The reference side of inst/experiments/kt-goodpoints.R (issue 17): runs
# the reference implementation of kernel thinning and Compress++
# (goodpoints, Dwivedi & Mackey; Shetty, Dwivedi & Mackey) on points read
# from a CSV file and writes the selected row indices (0-based).
#
# Not part of the package's code: the R script calls it with system2() when
# a python3 with numpy and a built goodpoints is available (goodpoints on
# PYTHONPATH), and skips the comparison otherwise.
#
# Usage: python3 kt-goodpoints.py INPUT OUTPUT METHOD K_PARAM G SEEDS [DELTA]
#   INPUT    CSV of the points, one row per point, no header
#   OUTPUT   CSV written: seed,seconds,index (one row per selected point,
#            index 0-based into INPUT, in goodpoints' order)
#   METHOD   "kt": goodpoints.kt.thin(X, G, k, k, delta, seed,
#              store_K = True) (KT-SPLIT with G halving rounds on the
#              kernel k itself, i.e. target KT, then KT-SWAP to the sample,
#              unique = False), floor(n / 2^G) points;
#            "split": goodpoints.kt.split(X, G, k, delta, seed,
#              store_K = True)[0] (KT-SPLIT alone, its first coreset, as
#              kernel_thin(swap = FALSE) returns);
#            "compresspp": goodpoints.compress.compresspp_kt(X, b"gaussian",
#              k_params = [K_PARAM], g = G, num_bins = 4, delta, seed),
#              sqrt(n') points (n' the largest power of 4 <= n)
#   K_PARAM  the Gaussian kernel k(x, y) = exp(-|x - y|^2 / K_PARAM); a
#            kernbayes gaussian_kernel(bandwidth = h), exp(-|x - y|^2 /
#            (2 h^2)), is K_PARAM = 2 h^2
#   G        halving rounds (kt) or oversampling parameter g (compresspp)
#   SEEDS    comma-separated integer seeds, one run each
#   DELTA    failure probability (default 0.5, both functions' default)
#
# seconds: the wall time of the goodpoints call alone (for "kt" it includes
# forming the kernel matrix, as kernel_thin's timing does).
import sys
import time

import numpy as np
from goodpoints import kt, compress


def main(argv):
    if len(argv) not in (7, 8):
        sys.stderr.write(
            "usage: kt-goodpoints.py INPUT OUTPUT METHOD K_PARAM G SEEDS "
            "[DELTA]\n")
        return 2
    inp, out, method = argv[1], argv[2], argv[3]
    k_param = float(argv[4])
    g = int(argv[5])
    seeds = [int(s) for s in argv[6].split(",") if s != ""]
    delta = float(argv[7]) if len(argv) == 8 else 0.5
    X = np.loadtxt(inp, delimiter=",", ndmin=2)

    def gauss(y, Z):
        # goodpoints' kernel convention: kernel(y, X) -> k(y, X[i]) for all i
        return np.exp(-np.sum((Z - y) ** 2, axis=1) / k_param)

    rows = []
    for seed in seeds:
        t0 = time.perf_counter()
        if method == "kt":
            idx = kt.thin(X, g, gauss, gauss, delta=delta, seed=seed,
                          store_K=True)
        elif method == "split":
            idx = kt.split(X, g, gauss, delta=delta, seed=seed,
                           store_K=True)[0]
        elif method == "compresspp":
            idx = compress.compresspp_kt(X, b"gaussian",
                                         k_params=np.array([k_param]), g=g,
                                         num_bins=4, delta=delta, seed=seed)
        else:
            sys.stderr.write("unknown method %r\n" % method)
            return 2
        secs = time.perf_counter() - t0
        rows.extend("%d,%.6f,%d" % (seed, secs, int(i)) for i in idx)
    with open(out, "w") as f:
        f.write("seed,seconds,index\n")
        f.write("\n".join(rows))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
