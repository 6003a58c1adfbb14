/* Optimal assignment (the linear sum assignment problem): the O(n^3)
 * Hungarian method in its shortest-augmenting-path form with dual
 * potentials, on which Jonker and Volgenant (1987) build (see Burkard,
 * Dell'Amico and Martello, "Assignment Problems", SIAM 2009, ch. 4).  Used
 * by wasserstein2() for the exact W2 distance between equal-size point
 * sets. */
#include "kernbayes.h"
#include "args.h"
#include "runtime.h"
#include "entries.h"

/* Minimise sum_j C[j, a_j] over permutations a of 0..n-1, for an n x n
 * column-major cost matrix C.  On return a[j] is the 0-based column of row
 * j.  Columns are inserted one at a time; each insertion grows a shortest
 * path tree (Dijkstra on reduced costs C[j, i] - u_i - v_j >= 0) over the
 * rows until it reaches a free row, then flips the path and updates the
 * potentials u (columns) and v (rows).  Scanning column i reads C[, i],
 * which is contiguous.  Arrays below are 1-based with index 0 a sentinel
 * for "no row / no column yet". */
static int assign_lsap(const double *C, int n, int *a)
{
    double *u = (double *) R_alloc((size_t) n + 1, sizeof(double));
    double *v = (double *) R_alloc((size_t) n + 1, sizeof(double));
    double *minv = (double *) R_alloc((size_t) n + 1, sizeof(double));
    int *p = (int *) R_alloc((size_t) n + 1, sizeof(int));   /* row -> col */
    int *way = (int *) R_alloc((size_t) n + 1, sizeof(int)); /* tree parent */
    char *used = R_alloc((size_t) n + 1, sizeof(char));
    for (int j = 0; j <= n; j++) {
        u[j] = v[j] = 0.0;
        p[j] = way[j] = 0;
    }
    kb_ticker tk = KB_TICKER_INIT;
    for (int i = 1; i <= n; i++) {
        p[0] = i;
        int j0 = 0;
        for (int j = 0; j <= n; j++) {
            minv[j] = R_PosInf;
            used[j] = 0;
        }
        do {
            used[j0] = 1;
            int i0 = p[j0], j1 = -1;
            const double *col = C + (size_t) (i0 - 1) * (size_t) n;
            const double ui0 = u[i0];
            double delta = R_PosInf;
            for (int j = 1; j <= n; j++) {
                if (used[j])
                    continue;
                double cur = col[j - 1] - ui0 - v[j];
                if (cur < minv[j]) {
                    minv[j] = cur;
                    way[j] = j0;
                }
                if (minv[j] < delta || j1 < 0) {
                    delta = minv[j];
                    j1 = j;
                }
            }
            if (j1 < 0 || !R_FINITE(delta))
                return 1;
            for (int j = 0; j <= n; j++) {
                if (used[j]) {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            kb_tick(&tk, 5.0 * n);    /* each pass costs O(n) */
        } while (p[j0] != 0);
        do {
            int j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
        } while (j0 != 0);
    }
    for (int j = 1; j <= n; j++)
        a[j - 1] = p[j] - 1;
    return 0;
}

/* .Call entry: cost, an n x n double matrix of finite values; returns the
 * 1-based column assigned to each row. */
SEXP kb_assign(SEXP cost)
{
    int n = kb_arg_square(cost, "cost");
    const double *C = REAL(cost);
    if (kb_first_nonfinite(C, XLENGTH(cost)) >= 0)
            kb_error_numeric(_("the assignment costs (squared distances) "
                               "are not all finite"));
    SEXP out = PROTECT(Rf_allocVector(INTSXP, n));
    int *a = INTEGER(out);
    if (n > 0) {
        if (assign_lsap(C, n, a))
            KB_INTERNAL("assignment found no augmenting path");
        for (int j = 0; j < n; j++)
            a[j] += 1;
    }
    UNPROTECT(1);
    return out;
}
