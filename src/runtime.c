/* The runtime policy (runtime.h): thread counts, scratch, chunks. */
#include "runtime.h"
#include "args.h"

int kb_nthreads(SEXP nthreads)
{
    int nt = kb_scalar_int(nthreads, "nthreads");
    if (nt < 1)
        nt = 1;
#ifdef _OPENMP
    int np = omp_get_num_procs();
    if (nt > np)
        nt = np;
#else
    nt = 1;
#endif
    return nt;
}

kb_scratch kb_scratch_alloc(size_t per, int nt)
{
    kb_scratch s;
    s.per = per;
    s.base = (double *) R_alloc(per * (size_t) (nt > 0 ? nt : 1),
                                sizeof(double));
    return s;
}

R_xlen_t kb_chunk_end(R_xlen_t i0, R_xlen_t end, double per_item)
{
    double c = KB_TICK_WORK / (per_item > 1.0 ? per_item : 1.0);
    R_xlen_t m = c < 1.0 ? 1 : c > (double) (end - i0) ? end - i0 :
        (R_xlen_t) c;
    return i0 + m;
}
