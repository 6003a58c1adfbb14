/* The runtime policy, written once: how many threads a piece of work gets,
 * per-thread scratch, and how often a long computation looks for a user
 * interrupt.  Work is counted in "units", about one floating-point
 * operation on one coordinate of one pair of points (1-2 ns): a base
 * kernel evaluation in d dimensions costs about d + 4 units, a Stein
 * kernel evaluation about 3 d + 8. */
#ifndef KB_RUNTIME_H
#define KB_RUNTIME_H

#include "kernbayes.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this much work a parallel region costs more than it saves (and
 * spins idly on a busy machine): run it on one thread. */
#define KB_PAR_MIN_WORK 5e5

/* Work between two interrupt checks: about 0.05-0.1 s on one core. */
#define KB_TICK_WORK 5e7

/* Work units one call of an R closure counts for in a ticker: a whole
 * tick, so that a loop calling closures checks for an interrupt after each
 * call (R sees one raised while its code runs by itself; one raised in C
 * between two calls, or delivered late, is then seen at the next step). */
#define KB_CLOSURE_WORK KB_TICK_WORK

/* The user's thread count (an R integer) capped to [1, processors]. */
int kb_nthreads(SEXP nthreads);

/* Regions that run once per step of a sequential loop (a KSDT pass over
 * the dictionary, a greedy thinning step) open from this much work (a
 * Stein kernel row of 1000 points at d = 4, about 5 us): opening a region
 * of 2 threads costs about 2 us, so a smaller step gains nothing from a
 * second thread; the load-following team (kb_team) keeps such regions
 * off a busy machine. */
#define KB_PAR_MIN_STEP 2e4

/* The team the machine's load leaves room for, at most nt (runtime.c):
 * the cores minus those that other processes kept busy over the last
 * 0.1 s or more (Linux: /proc/stat less this process's CPU time; at the
 * first call, or after 0.5 s without one, the processes running now from
 * /proc/loadavg), rounded, at least 1.  Sampled at most every 0.1 s;
 * elsewhere, or with following switched off, nt.  On a busy machine a
 * region waits at its barrier for a descheduled thread (a time slice,
 * milliseconds), which is why a team larger than the idle cores never
 * pays for regions of step size. */
int kb_team(int nt);

/* Threads for a region doing `work` units: one when too little (below
 * `min`, KB_PAR_MIN_WORK or KB_PAR_MIN_STEP), else kb_team(nt). */
static inline int kb_threads_min(int nt, double work, double min)
{
    return nt > 1 && work >= min ? kb_team(nt) : 1;
}

static inline int kb_threads_for(int nt, double work)
{
    return kb_threads_min(nt, work, KB_PAR_MIN_WORK);
}

/* The calling thread's number inside a parallel region (0 outside). */
static inline int kb_thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Per-thread scratch: nt slices of `per` doubles (R_alloc: freed when the
 * .Call returns, or on an error). */
typedef struct {
    double *base;
    size_t per;
} kb_scratch;

kb_scratch kb_scratch_alloc(size_t per, int nt);

/* This thread's slice. */
static inline double *kb_scratch_mine(kb_scratch s)
{
    return s.base + s.per * (size_t) kb_thread_id();
}

/* A slice of scratch laid out as named arrays: a list of parts (the
 * pointer to set, and the length in elements; an int array takes
 * ceil(len / 2) doubles), which kb_layout_size() totals and
 * kb_layout_carve() assigns in list order (consecutive parts are
 * adjacent).  Sizing and carving read the same list, so they cannot
 * disagree. */
typedef struct {
    double **d;
    int **i;
    size_t len;
} kb_part;

#define KB_DOUBLES(ptr, n) ((kb_part) {.d = &(ptr), .i = NULL, \
                                       .len = (size_t) (n)})
#define KB_INTS(ptr, n) ((kb_part) {.d = NULL, .i = &(ptr), \
                                    .len = (size_t) (n)})

size_t kb_layout_size(const kb_part *p, int np);
/* Sets the parts' pointers into w; returns the end of the last part. */
double *kb_layout_carve(double *w, const kb_part *p, int np);

/* Chunks for loops that run in parallel: the end of the chunk of items
 * starting at i0 (and before end) when each item costs `per_item` units,
 * so that a chunk is about KB_TICK_WORK.  The caller checks for an
 * interrupt (kb_check_interrupt) between chunks, outside the region. */
R_xlen_t kb_chunk_end(R_xlen_t i0, R_xlen_t end, double per_item);

/* R_CheckUserInterrupt(), named so that every check in the package is one
 * of two spellings: this between chunks, or kb_tick() in serial loops. */
static inline void kb_check_interrupt(void)
{
    R_CheckUserInterrupt();
}

/* Ticker for serial loops: add the work done, and the ticker checks for an
 * interrupt each time KB_TICK_WORK units have accumulated (and returns 1
 * then, else 0).  Never inside a parallel region. */
typedef struct {
    double acc;
} kb_ticker;

#define KB_TICKER_INIT {0.0}

static inline int kb_tick(kb_ticker *t, double work)
{
    t->acc += work;
    if (t->acc < KB_TICK_WORK)
        return 0;
    t->acc = 0.0;
    R_CheckUserInterrupt();
    return 1;
}

/* A loop over items i = first..last-1 (rows, columns, tiles) run in chunks
 * of about KB_TICK_WORK units (and at least nt x dynamic items, so that
 * every thread has work when single items exceed a tick): each chunk is
 * one parallel region of
 * kb_threads_for(nt, its work) threads; between chunks, outside the region,
 * after() (when given) looks at the chunk's results and may stop the loop,
 * and kb_check_interrupt() runs.  item() gets this thread's slice of
 * scratch (NULL when scratch.per is 0) and must not call the R API. */
typedef struct {
    int nt;                   /* the thread cap (kb_nthreads) */
    double cost0, cost1;      /* item i costs cost0 + cost1 i units (>= 1) */
    int dynamic;              /* 0: schedule(static); k > 0: (dynamic, k) */
    kb_scratch scratch;
    void (*item)(void *ctx, R_xlen_t i, double *scratch);
    /* the first item of [i0, i1) whose result is bad, or -1 */
    R_xlen_t (*after)(void *ctx, R_xlen_t i0, R_xlen_t i1);
    void *ctx;
} kb_loop;

/* Runs the loop; returns -1, or the item after() reported (the items after
 * that chunk are then not visited). */
R_xlen_t kb_loop_run(const kb_loop *L, R_xlen_t first, R_xlen_t last);

/* Triangle tiles: the pairs of n points cut into tiles of B x B pairs
 * (T = ceil(n / B) tiles a side); the tiles (I, J) of one triangle, each
 * pair once, are the items of a loop.  Two numberings: upper, I <= J row
 * after row ((0, 0), (0, 1), ..., (1, 1), ...); lower, J <= I row after
 * row, t = I (I + 1) / 2 + J ((0, 0), (1, 0), (1, 1), (2, 0), ...). */
static inline R_xlen_t kb_tiles_side(R_xlen_t n, int B)
{
    return (n + B - 1) / B;
}

void kb_tile_upper(R_xlen_t T, R_xlen_t t, R_xlen_t *I, R_xlen_t *J);
void kb_tile_lower(R_xlen_t t, R_xlen_t *I, R_xlen_t *J);

/* A reduction in a fixed order: each item of a loop leaves its partial
 * sums (per doubles) in its own slot, kb_slot(S, i), of a ring of cap
 * slots; kb_slot_loop_run() runs the items in batches of cap and after
 * each batch calls merge(ctx, i, slot) for its items in item order, so
 * the totals do not depend on the team or the schedule. */
typedef struct {
    double *slots;            /* cap x per doubles */
    size_t per;
    R_xlen_t cap;
    void (*merge)(void *ctx, R_xlen_t i, const double *slot);
} kb_slots;

static inline double *kb_slot(const kb_slots *S, R_xlen_t i)
{
    return S->slots + (size_t) (i % S->cap) * S->per;
}

/* Allocates the ring (R_alloc). */
void kb_slots_alloc(kb_slots *S, size_t per, R_xlen_t cap);

/* Runs L over [first, last) batch by batch, merging each batch (L's
 * after() still checks every chunk); returns as kb_loop_run (the batch of
 * a bad item is not merged). */
R_xlen_t kb_slot_loop_run(const kb_loop *L, const kb_slots *S,
                          R_xlen_t first, R_xlen_t last);

/* The items of the loop's first chunk over [first, last): the most any
 * chunk holds when cost1 >= 0 (for results kept per item until after()
 * takes them). */
R_xlen_t kb_loop_chunk_items(const kb_loop *L, R_xlen_t first, R_xlen_t last);

#endif
