/* The runtime policy (runtime.h): thread counts, scratch, chunks, and the
 * team that follows the machine's load. */
#ifdef __linux__
#define _GNU_SOURCE        /* sched_getaffinity, CPU_ISSET */
#include <sched.h>
#endif
#include <math.h>
#include "runtime.h"
#include "args.h"
#include "entries.h"
#ifdef __linux__
#include <stdio.h>
#include <time.h>
#include <sys/times.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

/* The load-following team (kb_team).  Touched only by the main thread,
 * outside parallel regions. */
static struct {
    int follow;           /* 0: every region gets the threads asked for
                           * (option kernbayes.follow_load, kb_nthreads) */
    int cap;              /* the team the last sample allowed */
    double t;             /* when that sample was taken (s; < 0: never) */
    double busy, self;    /* machine's busy and this process's CPU ticks */
} team = {1, 1, -1.0, 0.0, 0.0};

#ifdef __linux__
static double now_coarse(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/* Busy ticks since boot (user, system, irq, softirq, steal: a vCPU that
 * the host took is not free either; nice only when this process is niced
 * itself: a niced process yields its core to ours almost entirely, and our
 * own time is counted as nice when we are) of the cores this process may
 * run on, and their number; 0 on failure. */
static int machine_busy(double *busy, int *ncpu)
{
    int nice = getpriority(PRIO_PROCESS, 0) > 0;
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
        return 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    double b = 0.0;
    while (fgets(line, sizeof(line), f)) {
        int cpu;
        unsigned long long v[8] = {0};
        if (strncmp(line, "cpu", 3) != 0)
            break;                     /* the cpu lines come first */
        if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu",
                   &cpu, v, v + 1, v + 2, v + 3, v + 4, v + 5, v + 6,
                   v + 7) != 9 || cpu < 0 || cpu >= CPU_SETSIZE ||
            !CPU_ISSET(cpu, &mask))
            continue;                  /* the total line, or not ours */
        b += (double) v[0] + (double) v[2] + (double) v[5] + (double) v[6] +
            (double) v[7] + (nice ? (double) v[1] : 0.0);
        n++;
    }
    fclose(f);
    *busy = b;
    *ncpu = n;
    return n > 0;
}

/* Threads of the machine running or runnable now, this one included (the
 * fourth field of /proc/loadavg); -1 on failure. */
static int running_now(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return -1;
    double a[3];
    int r, tot, k = fscanf(f, "%lf %lf %lf %d/%d", a, a + 1, a + 2, &r, &tot);
    fclose(f);
    return k == 5 ? r : -1;
}

/* The team the load allows now (nt when it cannot be read). */
static int team_sample(double now, int nt)
{
    struct tms tb;
    int ncpu;
    double busy, self = times(&tb) == (clock_t) -1 ? -1.0 :
        (double) tb.tms_utime + (double) tb.tms_stime;
    double prev = team.t;
    int fresh = prev >= 0 && now - prev <= 0.5;
    team.t = now;
    if (self < 0 || !machine_busy(&busy, &ncpu))
        return nt;
    double others;
    if (!fresh) {
        /* no recent sample to take a difference from: the threads running
         * now besides this one, in proportion to the cores we may use */
        int r = running_now();
        long on = sysconf(_SC_NPROCESSORS_ONLN);
        others = r > 1 ? (r - 1.0) * (on > ncpu ? (double) ncpu / on : 1.0)
            : 0.0;
    } else {
        others = ((busy - team.busy) - (self - team.self)) /
            ((now - prev) * (double) sysconf(_SC_CLK_TCK));
    }
    team.busy = busy;
    team.self = self;
    double free = (double) ncpu - others;
    return free < 1.5 ? 1 : (int) (free + 0.5);
}
#endif

int kb_team(int nt)
{
    if (!team.follow || nt < 2)
        return nt;
#ifdef __linux__
    double now = now_coarse();
    if (team.t < 0 || now - team.t >= 0.1)
        team.cap = team_sample(now, nt);
    return nt < team.cap ? nt : team.cap;
#else
    return nt;
#endif
}

/* .Call entry: the team a region asking for nthreads would get now. */
SEXP kb_thread_team(SEXP nthreads)
{
    return Rf_ScalarInteger(kb_team(kb_nthreads(nthreads)));
}

/* The option kernbayes.follow_load (NULL: TRUE), read by every entry
 * that takes a thread count, so that a change applies at the next call. */
static void team_option(void)
{
    SEXP o = Rf_GetOption1(Rf_install("kernbayes.follow_load"));
    if (o == R_NilValue) {
        team.follow = 1;
        return;
    }
    if (TYPEOF(o) != LGLSXP || XLENGTH(o) != 1 || LOGICAL(o)[0] == NA_LOGICAL)
        kb_error_arg(_("the option 'kernbayes.follow_load' "
                       "must be TRUE or FALSE"));
    team.follow = LOGICAL(o)[0];
}

int kb_nthreads(SEXP nthreads)
{
    team_option();
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

static size_t part_doubles(const kb_part *p)
{
    return p->d ? p->len : (p->len + 1) / 2;
}

size_t kb_layout_size(const kb_part *p, int np)
{
    size_t n = 0;
    for (int k = 0; k < np; k++)
        n += part_doubles(p + k);
    return n;
}

double *kb_layout_carve(double *w, const kb_part *p, int np)
{
    for (int k = 0; k < np; k++) {
        if (p[k].d)
            *p[k].d = w;
        else
            *p[k].i = (int *) w;
        w += part_doubles(p + k);
    }
    return w;
}

R_xlen_t kb_chunk_end(R_xlen_t i0, R_xlen_t end, double per_item)
{
    double c = KB_TICK_WORK / (per_item > 1.0 ? per_item : 1.0);
    R_xlen_t m = c < 1.0 ? 1 : c > (double) (end - i0) ? end - i0 :
        (R_xlen_t) c;
    return i0 + m;
}

/* The end of the chunk starting at i0 for items of cost cost0 + cost1 i,
 * and the chunk's work: about KB_TICK_WORK, and at least one piece of the
 * schedule (dynamic items, or one) for each of the nt threads.  Without
 * that floor, items above a tick each (the rows of a triangle past about
 * 1e5 points, groups of 16 rows past about 8e4) made one-item chunks that
 * ran on one thread while the others waited: ksd() on 2 threads took as
 * long as on one at n = 3e5. */
static R_xlen_t loop_chunk_end(const kb_loop *L, R_xlen_t i0, R_xlen_t end,
                               double *work)
{
    const R_xlen_t least = L->nt > 1 ?
        (R_xlen_t) L->nt * (L->dynamic > 0 ? L->dynamic : 1) : 1;
    R_xlen_t i = i0;
    double w = 0.0;
    if (L->cost1 == 0.0) {
        i = kb_chunk_end(i0, end, L->cost0);
        if (i - i0 < least)
            i = end - i0 < least ? end : i0 + least;
        w = (double) (i - i0) * L->cost0;
    } else {
        while (i < end && (w < KB_TICK_WORK || i - i0 < least)) {
            double c = L->cost0 + L->cost1 * (double) i;
            w += c > 1.0 ? c : 1.0;
            i++;
        }
    }
    *work = w;
    return i;
}

R_xlen_t kb_loop_chunk_items(const kb_loop *L, R_xlen_t first, R_xlen_t last)
{
    double work;
    return loop_chunk_end(L, first, last, &work) - first;
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

void kb_tile_upper(R_xlen_t T, R_xlen_t t, R_xlen_t *I, R_xlen_t *J)
{
    R_xlen_t i = 0, rem = t;
    while (rem >= T - i) {
        rem -= T - i;
        i++;
    }
    *I = i;
    *J = i + rem;
}

void kb_tile_lower(R_xlen_t t, R_xlen_t *I, R_xlen_t *J)
{
    R_xlen_t i = (R_xlen_t) ((sqrt(8.0 * (double) t + 1.0) - 1.0) / 2.0);
    while (i * (i + 1) / 2 > t)
        i--;
    while ((i + 1) * (i + 2) / 2 <= t)
        i++;
    *I = i;
    *J = t - i * (i + 1) / 2;
}

void kb_slots_alloc(kb_slots *S, size_t per, R_xlen_t cap)
{
    S->per = per;
    S->cap = cap > 0 ? cap : 1;
    S->slots = (double *) R_alloc(per * (size_t) S->cap, sizeof(double));
}

R_xlen_t kb_slot_loop_run(const kb_loop *L, const kb_slots *S,
                          R_xlen_t first, R_xlen_t last)
{
    for (R_xlen_t t0 = first; t0 < last; t0 += S->cap) {
        R_xlen_t t1 = last - t0 > S->cap ? t0 + S->cap : last;
        R_xlen_t bad = kb_loop_run(L, t0, t1);
        if (bad >= 0)
            return bad;
        for (R_xlen_t t = t0; t < t1; t++)
            S->merge(L->ctx, t, kb_slot(S, t));
    }
    return -1;
}
