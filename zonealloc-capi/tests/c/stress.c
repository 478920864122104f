/*
 * stress.c - four threads allocate and free through the C interface, with an
 * exact ledger, and try double frees on their own and on others' blocks.
 *
 * The allocator: one node, a DMA32 zone of 64 MiB with a hole, and a Normal
 * zone of 128 MiB starting at an unaligned frame; 4 CPUs, per-CPU lists on.
 *
 * Each round has two phases, separated by barriers:
 *   A. Every thread allocates (orders 0..10, weighted to small ones, some in
 *      bulk, some from DMA32) and frees its blocks, hands some to a shared
 *      exchange and frees blocks other threads handed over (never its own).
 *   B. Nothing allocates. Every thread frees a few of its blocks, then frees
 *      each again: the second free (and a put_page) must be refused with
 *      ZONEALLOC_ERR_FREE_ALREADY_FREE, naming the block. After a barrier each
 *      thread tries the same on the next thread's blocks.
 * (Double frees are tried only while nothing allocates: a block allocated
 * again in between belongs to its new owner, and freeing it would not be a
 * double free.)
 *
 * The ledger holds one byte per frame: set when a block is allocated (it must
 * have been clear), cleared before the block is freed (it must have been set).
 * At the end every block is freed, the lists drained, and the program checks
 * nr_free_pages == managed_pages, check_invariants, and a clear ledger. It
 * prints buddyinfo and a summary, and exits 0 only if nothing failed.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zonealloc.h"

#define NR_THREADS 4
#define ROUNDS 200
#define OPS_PER_ROUND 2000
#define MAX_HELD 256
#define EXCHANGE_CAP 512
#define DOUBLE_FREES_PER_ROUND 6
#define BULK 8

#define DMA32_START 4096u
#define DMA32_PAGES 16384u
#define HOLE_START 8000u
#define HOLE_PAGES 100u
#define NORMAL_START (0x100000u + 5u)
#define NORMAL_PAGES 32768u
#define LEDGER_PAGES (NORMAL_START + NORMAL_PAGES)

struct block {
    uint64_t pfn;
    uint32_t order;
    int owner; /* the thread that allocated it */
};

static struct zonealloc *za;
static atomic_uchar *ledger;
static atomic_ulong failures;
static pthread_barrier_t barrier;

static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block exchange[EXCHANGE_CAP];
static int exchange_len;

/* Blocks each thread freed in phase B, for the next thread to free again. */
static struct block freed_in_b[NR_THREADS][DOUBLE_FREES_PER_ROUND];
static int nr_freed_in_b[NR_THREADS];

struct counters {
    unsigned long allocs, nomem, frees, cross_frees, bulk_pages;
    unsigned long double_frees, cross_double_frees, put_page_refusals;
    unsigned long ledger_checks;
};

struct thread {
    int id;
    uint64_t rng;
    struct block held[MAX_HELD];
    int nheld;
    struct counters c;
};

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    atomic_fetch_add(&failures, 1);
}

static uint64_t next(struct thread *t)
{
    /* xorshift64* */
    t->rng ^= t->rng >> 12;
    t->rng ^= t->rng << 25;
    t->rng ^= t->rng >> 27;
    return t->rng * 0x2545f4914f6cdd1dull;
}

/* Orders 0..10, weighted to the small ones (per mille). */
static uint32_t pick_order(struct thread *t)
{
    static const unsigned cumulative[11] = {450, 600, 700, 780, 840, 880, 910, 940, 960, 980, 1000};
    unsigned r = (unsigned)(next(t) % 1000);
    uint32_t o = 0;
    while (r >= cumulative[o])
        o++;
    return o;
}

static int in_zone(uint64_t pfn, uint64_t nr, uint64_t start, uint64_t pages)
{
    return pfn >= start && pfn + nr <= start + pages;
}

/* The block was just allocated: every frame of it must have been unowned. */
static void ledger_take(struct thread *t, uint64_t pfn, uint32_t order, uint32_t gfp)
{
    uint64_t nr = 1ull << order;
    if (pfn & (nr - 1))
        fail("thread %d: pfn %#" PRIx64 " misaligned for order %u", t->id, pfn, order);
    int dma32 = in_zone(pfn, nr, DMA32_START, DMA32_PAGES);
    if (!dma32 && !in_zone(pfn, nr, NORMAL_START, NORMAL_PAGES)) {
        fail("thread %d: block %#" PRIx64 "/%u outside every zone", t->id, pfn, order);
        return;
    }
    if ((gfp & ZONEALLOC_GFP_DMA32) && !dma32)
        fail("thread %d: GFP_DMA32 block %#" PRIx64 " outside DMA32", t->id, pfn);
    if (dma32 && pfn < HOLE_START + HOLE_PAGES && pfn + nr > HOLE_START)
        fail("thread %d: block %#" PRIx64 "/%u overlaps the hole", t->id, pfn, order);
    for (uint64_t p = pfn; p < pfn + nr; p++) {
        if (atomic_exchange(&ledger[p], 1) != 0)
            fail("thread %d: frame %#" PRIx64 " handed out twice", t->id, p);
    }
    t->c.ledger_checks += nr;
}

/* The block is about to be freed: every frame of it must be owned. */
static void ledger_release(struct thread *t, const struct block *b)
{
    uint64_t nr = 1ull << b->order;
    for (uint64_t p = b->pfn; p < b->pfn + nr; p++) {
        if (atomic_exchange(&ledger[p], 0) != 1)
            fail("thread %d: frame %#" PRIx64 " freed but not owned", t->id, p);
    }
    t->c.ledger_checks += nr;
}

static void free_block(struct thread *t, const struct block *b)
{
    ledger_release(t, b);
    int rc = zonealloc_free_pages(za, b->pfn, b->order);
    if (rc != ZONEALLOC_OK)
        fail("thread %d: free of %#" PRIx64 "/%u: %s", t->id, b->pfn, b->order,
             zonealloc_strerror(rc));
    t->c.frees++;
    if (b->owner != t->id)
        t->c.cross_frees++;
}

static struct block take_held(struct thread *t, int i)
{
    struct block b = t->held[i];
    t->held[i] = t->held[--t->nheld];
    return b;
}

static void hold(struct thread *t, uint64_t pfn, uint32_t order, uint32_t gfp)
{
    ledger_take(t, pfn, order, gfp);
    t->held[t->nheld++] = (struct block){pfn, order, t->id};
    t->c.allocs++;
}

static void alloc_one(struct thread *t)
{
    uint64_t r = next(t) % 10;
    uint32_t gfp = r == 0 ? ZONEALLOC_GFP_KERNEL | ZONEALLOC_GFP_DMA32
                 : r < 4  ? ZONEALLOC_GFP_HIGHUSER_MOVABLE
                          : ZONEALLOC_GFP_KERNEL;
    uint32_t order = pick_order(t);
    uint64_t pfn;
    int rc = zonealloc_alloc_pages(za, gfp, order, &pfn);
    if (rc == ZONEALLOC_OK)
        hold(t, pfn, order, gfp);
    else if (rc == ZONEALLOC_ERR_ALLOC_NO_MEMORY)
        t->c.nomem++;
    else
        fail("thread %d: alloc order %u: %s", t->id, order, zonealloc_strerror(rc));
}

static void alloc_bulk(struct thread *t)
{
    uint64_t pfns[BULK];
    size_t filled = 0;
    for (int i = 0; i < BULK; i++)
        pfns[i] = ZONEALLOC_PFN_NONE;
    int rc = zonealloc_alloc_pages_bulk(za, ZONEALLOC_GFP_KERNEL, pfns, BULK, &filled);
    if (rc != ZONEALLOC_OK) {
        fail("thread %d: bulk: %s", t->id, zonealloc_strerror(rc));
        return;
    }
    size_t seen = 0;
    for (int i = 0; i < BULK; i++) {
        if (pfns[i] == ZONEALLOC_PFN_NONE)
            continue;
        seen++;
        hold(t, pfns[i], 0, ZONEALLOC_GFP_KERNEL);
        t->c.bulk_pages++;
    }
    if (seen != filled)
        fail("thread %d: bulk said %zu filled, %zu slots hold pages", t->id, filled, seen);
    if (filled < BULK)
        t->c.nomem++;
}

/* Phase A: the mixed workload. */
static void phase_a(struct thread *t)
{
    for (int op = 0; op < OPS_PER_ROUND; op++) {
        uint64_t r = next(t) % 100;
        if (r < 42 && t->nheld < MAX_HELD) {
            alloc_one(t);
        } else if (r < 45 && t->nheld <= MAX_HELD - BULK) {
            alloc_bulk(t);
        } else if (r < 85 && t->nheld > 0) {
            struct block b = take_held(t, (int)(next(t) % (uint64_t)t->nheld));
            free_block(t, &b);
        } else if (r < 92 && t->nheld > 0) {
            /* Hand a block to whichever thread takes it. */
            struct block b = take_held(t, (int)(next(t) % (uint64_t)t->nheld));
            pthread_mutex_lock(&exchange_lock);
            int queued = exchange_len < EXCHANGE_CAP;
            if (queued)
                exchange[exchange_len++] = b;
            pthread_mutex_unlock(&exchange_lock);
            if (!queued)
                free_block(t, &b);
        } else {
            /* Free a block another thread handed over (the newest such). */
            struct block b;
            int got = 0;
            pthread_mutex_lock(&exchange_lock);
            for (int i = exchange_len - 1; i >= 0 && !got; i--) {
                if (exchange[i].owner != t->id) {
                    b = exchange[i];
                    exchange[i] = exchange[--exchange_len];
                    got = 1;
                }
            }
            pthread_mutex_unlock(&exchange_lock);
            if (got)
                free_block(t, &b);
        }
    }
}

/* A block known to be free must be refused, by free_pages and put_page. */
static void expect_already_free(struct thread *t, const struct block *b)
{
    struct zonealloc_error_info info;
    int rc = zonealloc_free_pages(za, b->pfn, b->order);
    if (rc != ZONEALLOC_ERR_FREE_ALREADY_FREE) {
        fail("thread %d: double free of %#" PRIx64 "/%u answered %d (%s)", t->id, b->pfn,
             b->order, rc, zonealloc_strerror(rc));
        return;
    }
    if (zonealloc_last_error(&info) != rc || info.pfn != b->pfn)
        fail("thread %d: last error does not name %#" PRIx64, t->id, b->pfn);
    t->c.double_frees++;
    rc = zonealloc_put_page(za, b->pfn, NULL);
    if (rc != ZONEALLOC_ERR_FREE_ALREADY_FREE)
        fail("thread %d: put_page of free %#" PRIx64 " answered %s", t->id, b->pfn,
             zonealloc_strerror(rc));
    else
        t->c.put_page_refusals++;
}

/* Phase B: free a few blocks, then free each again. */
static void phase_b(struct thread *t)
{
    int n = 0;
    while (n < DOUBLE_FREES_PER_ROUND && t->nheld > 0) {
        struct block b = take_held(t, (int)(next(t) % (uint64_t)t->nheld));
        free_block(t, &b);
        freed_in_b[t->id][n++] = b;
    }
    nr_freed_in_b[t->id] = n;
    for (int i = 0; i < n; i++)
        expect_already_free(t, &freed_in_b[t->id][i]);
    pthread_barrier_wait(&barrier);
    /* The next thread's blocks, from this thread. */
    int other = (t->id + 1) % NR_THREADS;
    for (int i = 0; i < nr_freed_in_b[other]; i++) {
        expect_already_free(t, &freed_in_b[other][i]);
        t->c.cross_double_frees++;
    }
}

static void *run(void *arg)
{
    struct thread *t = arg;
    for (int round = 0; round < ROUNDS; round++) {
        phase_a(t);
        pthread_barrier_wait(&barrier);
        phase_b(t);
        pthread_barrier_wait(&barrier);
    }
    while (t->nheld > 0) {
        struct block b = take_held(t, t->nheld - 1);
        free_block(t, &b);
    }
    return NULL;
}

static int build(void)
{
    static const struct zonealloc_hole hole = {HOLE_START, HOLE_PAGES};
    struct zonealloc_zone_config zones[2] = {
        {ZONEALLOC_ZONE_DMA32, DMA32_START, DMA32_PAGES, &hole, 1},
        {ZONEALLOC_ZONE_NORMAL, NORMAL_START, NORMAL_PAGES, NULL, 0},
    };
    struct zonealloc_node_config node = {zones, 2};
    struct zonealloc_config cfg;
    int rc = zonealloc_config_init(&cfg);
    if (rc == ZONEALLOC_OK) {
        cfg.nodes = &node;
        cfg.nr_nodes = 1;
        cfg.nr_cpus = NR_THREADS;
        rc = zonealloc_create(&cfg, &za);
    }
    if (rc != ZONEALLOC_OK) {
        char msg[256];
        zonealloc_last_error_message(msg, sizeof msg);
        fprintf(stderr, "zonealloc_create: %s (%s)\n", zonealloc_strerror(rc), msg);
    }
    return rc;
}

int main(void)
{
    static struct thread threads[NR_THREADS];
    pthread_t tids[NR_THREADS];

    if (build() != ZONEALLOC_OK)
        return 1;
    ledger = calloc(LEDGER_PAGES, sizeof *ledger);
    if (!ledger)
        return 1;
    pthread_barrier_init(&barrier, NULL, NR_THREADS);
    for (int i = 0; i < NR_THREADS; i++) {
        threads[i].id = i;
        threads[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        if (pthread_create(&tids[i], NULL, run, &threads[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    struct counters sum = {0};
    for (int i = 0; i < NR_THREADS; i++) {
        pthread_join(tids[i], NULL);
        struct counters *c = &threads[i].c;
        sum.allocs += c->allocs;
        sum.nomem += c->nomem;
        sum.frees += c->frees;
        sum.cross_frees += c->cross_frees;
        sum.bulk_pages += c->bulk_pages;
        sum.double_frees += c->double_frees;
        sum.cross_double_frees += c->cross_double_frees;
        sum.put_page_refusals += c->put_page_refusals;
        sum.ledger_checks += c->ledger_checks;
    }
    /* What is still in the exchange, freed from the main thread. */
    struct thread main_thread = {.id = NR_THREADS};
    while (exchange_len > 0)
        free_block(&main_thread, &exchange[--exchange_len]);
    sum.frees += main_thread.c.frees;
    sum.cross_frees += main_thread.c.cross_frees;
    sum.ledger_checks += main_thread.c.ledger_checks;
    if (sum.allocs != sum.frees)
        fail("%lu allocations but %lu frees", sum.allocs, sum.frees);
    unsigned long still_owned = 0;
    for (uint64_t p = 0; p < LEDGER_PAGES; p++)
        still_owned += atomic_load(&ledger[p]);
    if (still_owned)
        fail("%lu frames still owned in the ledger", still_owned);

    uint64_t drained = 0, nr_free = 0, managed = 0, pcp = 0, checks = 0;
    if (zonealloc_drain_all_pages(za, &drained) != ZONEALLOC_OK ||
        zonealloc_nr_free_pages(za, &nr_free) != ZONEALLOC_OK ||
        zonealloc_managed_pages(za, &managed) != ZONEALLOC_OK ||
        zonealloc_nr_pcp_pages(za, &pcp) != ZONEALLOC_OK)
        fail("counts: %s", zonealloc_strerror(zonealloc_last_error(NULL)));
    if (nr_free != managed || pcp != 0)
        fail("after the drain: nr_free_pages %" PRIu64 ", managed_pages %" PRIu64
             ", nr_pcp_pages %" PRIu64, nr_free, managed, pcp);
    int rc = zonealloc_check_invariants(za, &checks);
    if (rc != ZONEALLOC_OK) {
        char msg[512];
        zonealloc_last_error_message(msg, sizeof msg);
        fail("check_invariants: %s: %s", zonealloc_strerror(rc), msg);
    }

    char text[4096];
    int64_t len = zonealloc_buddyinfo(za, text, sizeof text);
    if (len < 0 || (size_t)len >= sizeof text)
        fail("buddyinfo: %" PRId64, len);
    else
        fputs(text, stdout);
    if (zonealloc_destroy(za) != ZONEALLOC_OK || zonealloc_destroy(za) != ZONEALLOC_ERR_BAD_HANDLE)
        fail("destroy, then destroy again");

    unsigned long nfail = atomic_load(&failures);
    printf("stress: %d threads x %d rounds: %lu allocations (%lu pages in bulk, %lu out of "
           "memory), %lu frees (%lu on another thread than the allocating one); %lu double "
           "frees refused with ZONEALLOC_ERR_FREE_ALREADY_FREE (%lu from another thread) and "
           "%lu put_page refusals; %lu ledger checks; drained %" PRIu64 ", nr_free_pages %"
           PRIu64 " == managed_pages %" PRIu64 "; check_invariants %s (%" PRIu64
           " checks); %lu failures\n",
           NR_THREADS, ROUNDS, sum.allocs, sum.bulk_pages, sum.nomem, sum.frees,
           sum.cross_frees, sum.double_frees, sum.cross_double_frees, sum.put_page_refusals,
           sum.ledger_checks, drained, nr_free, managed, rc == ZONEALLOC_OK ? "OK" : "FAILED",
           checks, nfail);
    pthread_barrier_destroy(&barrier);
    free(ledger);
    return nfail == 0 ? 0 : 1;
}
