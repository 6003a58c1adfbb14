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

/* The end of the chunk starting at i0 for items of cost cost0 + cost1 i,
 * and the chunk's work. */
static R_xlen_t loop_chunk_end(const kb_loop *L, R_xlen_t i0, R_xlen_t end,
                               double *work)
{
    R_xlen_t i = i0;
    double w = 0.0;
    if (L->cost1 == 0.0) {
        i = kb_chunk_end(i0, end, L->cost0);
        w = (double) (i - i0) * L->cost0;
    } else {
        while (i < end && w < KB_TICK_WORK) {
            double c = L->cost0 + L->cost1 * (double) i;
            w += c > 1.0 ? c : 1.0;
            i++;
        }
    }
    *work = w;
    return i;
}

static inline void loop_item(const kb_loop *L, R_xlen_t i)
{
    L->item(L->ctx, i, L->scratch.per ? kb_scratch_mine(L->scratch) : NULL);
}

R_xlen_t kb_loop_run(const kb_loop *L, R_xlen_t first, R_xlen_t last)
{
    for (R_xlen_t i0 = first; i0 < last; ) {
        double work;
        R_xlen_t i1 = loop_chunk_end(L, i0, last, &work);
        int nt = kb_threads_for(L->nt, work), dyn = L->dynamic;
        if (dyn > 0) {
#pragma omp parallel for num_threads(nt) schedule(dynamic, dyn)
            for (R_xlen_t i = i0; i < i1; i++)
                loop_item(L, i);
        } else {
#pragma omp parallel for num_threads(nt) schedule(static)
            for (R_xlen_t i = i0; i < i1; i++)
                loop_item(L, i);
        }
        if (L->after) {
            R_xlen_t bad = L->after(L->ctx, i0, i1);
            if (bad >= 0)
                return bad;
        }
        kb_check_interrupt();
        i0 = i1;
    }
    return -1;
}
