/*
 * zonealloc.h - C interface to zonealloc, Linux's zoned buddy page allocator
 * (zones, per-CPU lists, pageblocks, migratetypes, contiguous and bulk paths,
 * /proc-format statistics) as a library.
 *
 * Link with libzonealloc.a (plus the system libraries its README lists) or
 * libzonealloc.so. The library manages page frames: numbered, page-sized units
 * (4 KiB, ZONEALLOC_PAGE_SHIFT) grouped into zones on nodes. Frames are either
 * abstract numbers with nothing behind them (device memory, guest frames, buffer
 * slots you map yourself) or pages of an anonymous mapping the allocator makes
 * (ZONEALLOC_BACKING_ARENA; zonealloc_page_address gives their addresses).
 *
 * CONVENTIONS
 *
 * Status codes. Every call that can fail returns ZONEALLOC_OK (0) or a negative
 * code of enum zonealloc_error; a call that writes text returns the text's
 * length (>= 0) or a negative code. There is one code per error variant of the
 * Rust core, grouped by the type it comes from (ZONEALLOC_ERR_ALLOC_*,
 * _FREE_*, _CONTIG_*, _CONFIG_*). A failing call changes nothing: no block is
 * allocated or freed, no out parameter is written (the one exception is
 * named at zonealloc_alloc_contig_range()). The payload of the error (the
 * frame, the order, the node, the rejected value) and the core's message are
 * kept for the calling thread until its next failing call:
 * zonealloc_last_error() and zonealloc_last_error_message() read them.
 *
 * Codes every call on a handle may return, beyond those each call lists:
 *   ZONEALLOC_ERR_BAD_HANDLE  za is NULL, misaligned, or was destroyed.
 *   ZONEALLOC_ERR_PANIC       the library panicked inside the call; the panic
 *                             was caught at the boundary and never unwinds into
 *                             C. The call may have been left half done: run
 *                             zonealloc_check_invariants() before trusting the
 *                             allocator again.
 *
 * Pointers. Each pointer argument's requirements are listed with it. "Out"
 * pointers must be valid for one write of their type; those marked "may be
 * NULL" are optional. NULL where a pointer is required is refused with
 * ZONEALLOC_ERR_NULL_POINTER, a misaligned pointer with
 * ZONEALLOC_ERR_INVALID_ARGUMENT, both before anything changes. A pointer to
 * too little memory cannot be detected and is undefined behaviour.
 *
 * Handles. A handle (struct zonealloc *) comes from zonealloc_create() or
 * zonealloc_create_bytes() and is opaque. zonealloc_destroy() frees the
 * allocator but keeps a 16-byte tombstone for the life of the process, so a
 * later call through the stale pointer is refused with
 * ZONEALLOC_ERR_BAD_HANDLE rather than undefined. A pointer that never was a
 * handle cannot be detected.
 *
 * Threads. One handle may be used from any number of threads at once: every
 * call on a handle may run on any thread, concurrently with any other call on
 * the same handle, except zonealloc_destroy(), which must not overlap any
 * other call on that handle and must be its last. Blocks may be freed on
 * another thread than the one that allocated them. No call is
 * async-signal-safe: the allocator takes locks.
 *
 * Per-CPU lists. With per-CPU lists on (the default), a freed block of a small
 * order may rest on the freeing CPU's list (or, on x86-64 Linux with glibc, a
 * per-CPU stack) instead of the buddy lists: it is free, counted by
 * zonealloc_nr_pcp_pages() rather than zonealloc_nr_free_pages(), until a drain.
 * When no call is running, allocated + nr_free_pages + nr_pcp_pages ==
 * managed_pages.
 */
#ifndef ZONEALLOC_H
#define ZONEALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Constants                                                                 */
/* ------------------------------------------------------------------------- */

/* log2 of the page size: frame n starts at byte n << ZONEALLOC_PAGE_SHIFT. */
#define ZONEALLOC_PAGE_SHIFT 12

/* "No frame": an empty slot of zonealloc_alloc_pages_bulk()'s array; no frame
 * in struct zonealloc_error_info. No zone reaches this frame number. */
#define ZONEALLOC_PFN_NONE UINT64_MAX
/* "No value" in struct zonealloc_error_info's value field. */
#define ZONEALLOC_VALUE_NONE UINT64_MAX
/* "None" in a 32-bit field of struct zonealloc_error_info. */
#define ZONEALLOC_NONE UINT32_MAX

/*
 * GFP flags (get-free-pages flags): what a caller asks of an allocation, with
 * Linux's bit values (include/linux/gfp_types.h). OR them together.
 */
#define ZONEALLOC_GFP_DMA 0x01u              /* only ZONEALLOC_ZONE_DMA */
#define ZONEALLOC_GFP_HIGHMEM 0x02u          /* may use highmem (and, with MOVABLE, the movable zone) */
#define ZONEALLOC_GFP_DMA32 0x04u            /* only zones up to ZONEALLOC_ZONE_DMA32 */
#define ZONEALLOC_GFP_MOVABLE 0x08u          /* movable memory: movable migratetype */
#define ZONEALLOC_GFP_RECLAIMABLE 0x10u      /* reclaimable memory: reclaimable migratetype */
#define ZONEALLOC_GFP_HIGH 0x20u             /* high priority: may use part of the reserve */
#define ZONEALLOC_GFP_IO 0x40u               /* may start I/O (kept for parity; no effect) */
#define ZONEALLOC_GFP_FS 0x80u               /* may call the filesystem (kept for parity; no effect) */
#define ZONEALLOC_GFP_ZERO 0x100u            /* zero the memory (arena backing) */
#define ZONEALLOC_GFP_DIRECT_RECLAIM 0x400u  /* may block; without it the request is atomic */
#define ZONEALLOC_GFP_KSWAPD_RECLAIM 0x800u  /* may wake background reclaim */
#define ZONEALLOC_GFP_NOWARN 0x2000u         /* do not report failure */
#define ZONEALLOC_GFP_NORETRY 0x10000u       /* no retry after draining lists and reserves */
#define ZONEALLOC_GFP_COMP 0x40000u          /* compound block (kept for parity; no effect) */
#define ZONEALLOC_GFP_MEMALLOC 0x20000u      /* may ignore every watermark */
#define ZONEALLOC_GFP_NOMEMALLOC 0x80000u    /* never the emergency reserves */
#define ZONEALLOC_GFP_THISNODE 0x200000u     /* only the caller's node */
#define ZONEALLOC_GFP_THISZONE 0x40000000u   /* only the preferred zone: no fallback */

#define ZONEALLOC_GFP_KERNEL 0xcc0u          /* DIRECT_RECLAIM | KSWAPD_RECLAIM | IO | FS */
#define ZONEALLOC_GFP_ATOMIC 0x820u          /* HIGH | KSWAPD_RECLAIM */
#define ZONEALLOC_GFP_NOWAIT 0x800u          /* KSWAPD_RECLAIM */
#define ZONEALLOC_GFP_USER 0xcc0u            /* as KERNEL */
#define ZONEALLOC_GFP_HIGHUSER_MOVABLE 0xccau /* KERNEL | HIGHMEM | MOVABLE */

/* Zone types, lowest first (struct zonealloc_zone_config's zone_type). */
enum zonealloc_zone_type {
    ZONEALLOC_ZONE_DMA = 0,     /* frames below 16 MiB on x86 */
    ZONEALLOC_ZONE_DMA32 = 1,   /* frames below 4 GiB */
    ZONEALLOC_ZONE_NORMAL = 2,  /* ordinary memory */
    ZONEALLOC_ZONE_HIGHMEM = 3, /* memory without a permanent kernel mapping */
    ZONEALLOC_ZONE_MOVABLE = 4, /* memory only movable allocations may use */
};

/* What stands behind the frames (struct zonealloc_config's backing). */
enum zonealloc_backing {
    /* Abstract frame numbers: the allocator hands out numbers only. */
    ZONEALLOC_BACKING_FRAMES = 0,
    /* An anonymous mapping covering the zones, made by zonealloc_create() and
     * unmapped by zonealloc_destroy(); zonealloc_page_address() gives each
     * frame's address. */
    ZONEALLOC_BACKING_ARENA = 1,
};

/* ------------------------------------------------------------------------- */
/* Status codes                                                              */
/* ------------------------------------------------------------------------- */

enum zonealloc_error {
    ZONEALLOC_OK = 0,

    /* The interface itself. */
    ZONEALLOC_ERR_BAD_HANDLE = -1,       /* handle NULL, misaligned or destroyed */
    ZONEALLOC_ERR_NULL_POINTER = -2,     /* a required pointer argument is NULL */
    ZONEALLOC_ERR_INVALID_ARGUMENT = -3, /* misaligned pointer, unknown zone type or
                                            backing, array longer than memory */
    ZONEALLOC_ERR_PANIC = -4,            /* a panic inside the library, caught */
    ZONEALLOC_ERR_NO_ADDRESS = -5,       /* abstract frames have no address */
    ZONEALLOC_ERR_HOST_MEMORY = -6,      /* the process heap refused working memory */
    ZONEALLOC_ERR_INVARIANT = -7,        /* zonealloc_check_invariants found a fault */

    /* AllocError: an allocation failed. */
    ZONEALLOC_ERR_ALLOC_NO_MEMORY = -101,        /* no eligible zone had a free block
                                                    of the order within its watermarks */
    ZONEALLOC_ERR_ALLOC_INVALID_ORDER = -102,    /* order above max_order */
    ZONEALLOC_ERR_ALLOC_INVALID_NODE = -103,     /* the node does not exist */
    ZONEALLOC_ERR_ALLOC_NO_ELIGIBLE_ZONE = -104, /* the GFP zone selection and node
                                                    leave no populated zone */

    /* FreeError: a free, a reference change or a split was refused. */
    ZONEALLOC_ERR_FREE_OUT_OF_RANGE = -201,      /* the frame is in no zone */
    ZONEALLOC_ERR_FREE_HOLE = -202,              /* the frame is a hole or reserved */
    ZONEALLOC_ERR_FREE_TAIL_PAGE = -203,         /* inside an allocated block, not its head */
    ZONEALLOC_ERR_FREE_ALREADY_FREE = -204,      /* the block is free (on a buddy or per-CPU
                                                    list, or inside a free block) */
    ZONEALLOC_ERR_FREE_WRONG_ORDER = -205,       /* allocated with another order */
    ZONEALLOC_ERR_FREE_MISALIGNED = -206,        /* the frame is not aligned to the order */
    ZONEALLOC_ERR_FREE_INVALID_ORDER = -207,     /* order above max_order */
    ZONEALLOC_ERR_FREE_BUSY = -208,              /* owned by another layer, or in a state
                                                    the call cannot take (a split block) */
    ZONEALLOC_ERR_FREE_REFCOUNT_OVERFLOW = -209, /* more than 2^30 references */
    ZONEALLOC_ERR_FREE_CROSSES_ZONE = -210,      /* the range leaves its zone */
    ZONEALLOC_ERR_FREE_BAD_PAGE = -211,          /* taken out of circulation as bad */
    ZONEALLOC_ERR_FREE_FOREIGN_ADDRESS = -212,   /* not the allocator's address */
    ZONEALLOC_ERR_FREE_GUARDED = -213,           /* owned by a guard of the Rust API */

    /* ContigError: a contiguous allocation failed. */
    ZONEALLOC_ERR_CONTIG_INVALID_RANGE = -301, /* empty, reversed or in no zone; or no
                                                  such node, or a count of 0 */
    ZONEALLOC_ERR_CONTIG_CROSSES_ZONE = -302,  /* the range crosses a zone boundary */
    ZONEALLOC_ERR_CONTIG_BUSY = -303,          /* a frame is in use, a hole, bad, or
                                                  in a CMA area */
    ZONEALLOC_ERR_CONTIG_ISOLATED = -304,      /* another caller is isolating a
                                                  pageblock of the range */
    ZONEALLOC_ERR_CONTIG_NO_MEMORY = -305,     /* no free run of that length */

    /* ConfigError: a configuration was refused. */
    ZONEALLOC_ERR_CONFIG_PAGE_SHIFT = -401,             /* page shift outside 10..=30 */
    ZONEALLOC_ERR_CONFIG_MAX_ORDER = -402,              /* max_order above 20 */
    ZONEALLOC_ERR_CONFIG_PAGEBLOCK_ORDER = -403,        /* pageblock_order above max_order */
    ZONEALLOC_ERR_CONFIG_NO_MEMORY = -404,              /* no node, or no frame in any zone */
    ZONEALLOC_ERR_CONFIG_ZONE_ORDER = -405,             /* a node's zones not in ascending
                                                           zone type order */
    ZONEALLOC_ERR_CONFIG_ZONE_TOO_LARGE = -406,         /* a zone of 2^32 - 1 frames or more */
    ZONEALLOC_ERR_CONFIG_PFN_TOO_LARGE = -407,          /* a zone past the 64-bit byte
                                                           address space */
    ZONEALLOC_ERR_CONFIG_HOLE_OUTSIDE_ZONE = -408,      /* a hole reaches outside its zone */
    ZONEALLOC_ERR_CONFIG_OVERLAP = -409,                /* two zones share frames */
    ZONEALLOC_ERR_CONFIG_BACKEND = -410,                /* the arena could not be mapped */
    ZONEALLOC_ERR_CONFIG_NR_CPUS = -411,                /* nr_cpus above 4096 */
    ZONEALLOC_ERR_CONFIG_MIN_FREE_KBYTES = -412,        /* min_free_kbytes above INT32_MAX */
    ZONEALLOC_ERR_CONFIG_WATERMARK_SCALE_FACTOR = -413, /* (not settable from C) */
    ZONEALLOC_ERR_CONFIG_WATERMARK_BOOST_FACTOR = -414, /* (not settable from C) */
    ZONEALLOC_ERR_CONFIG_PCP = -415,                    /* (not settable from C) */
    ZONEALLOC_ERR_CONFIG_CMA = -416,                    /* (not settable from C) */
    ZONEALLOC_ERR_CONFIG_METADATA = -417,               /* the per-frame metadata (16 bytes a
                                                           frame) could not be allocated */
    ZONEALLOC_ERR_CONFIG_NUMA = -418,                   /* (not settable from C) */
    ZONEALLOC_ERR_CONFIG_RESERVED = -419,               /* (not settable from C) */
};

/*
 * The payload of the calling thread's last error (zonealloc_last_error()).
 * Fields the error does not name hold ZONEALLOC_PFN_NONE,
 * ZONEALLOC_VALUE_NONE or ZONEALLOC_NONE.
 */
struct zonealloc_error_info {
    uint64_t pfn;          /* the frame named: the block, the first bad frame of a
                              range, the frame an invariant is broken at */
    uint64_t value;        /* the rejected value of a configuration error (nr_cpus,
                              min_free_kbytes, metadata bytes, ...) or the foreign
                              address */
    int code;              /* the status code (enum zonealloc_error) */
    uint32_t order;        /* the order given, asked for, or configured */
    uint32_t actual_order; /* the block's own order (ZONEALLOC_ERR_FREE_WRONG_ORDER) */
    uint32_t node;         /* the node */
    uint32_t zone_type;    /* the zone type (enum zonealloc_zone_type) */
};

/* ------------------------------------------------------------------------- */
/* Configuration                                                             */
/* ------------------------------------------------------------------------- */

/* A hole: nr_pages frames from start_pfn with no memory behind them. */
struct zonealloc_hole {
    uint64_t start_pfn;
    uint64_t nr_pages;
};

/* One zone: a range of frames of one zone type, possibly with holes. */
struct zonealloc_zone_config {
    uint32_t zone_type;                  /* enum zonealloc_zone_type */
    uint64_t start_pfn;                  /* first frame; need not be aligned */
    uint64_t spanned_pages;              /* frames spanned, holes included */
    const struct zonealloc_hole *holes;  /* nr_holes holes; NULL if nr_holes is 0 */
    size_t nr_holes;
};

/* One node: its zones, lowest zone type first. Node i has id i. */
struct zonealloc_node_config {
    const struct zonealloc_zone_config *zones; /* nr_zones zones; NULL if 0 */
    size_t nr_zones;
};

/*
 * A whole configuration. Fill it with zonealloc_config_init() first, then set
 * the nodes and whatever else differs from the defaults. Settings C does not
 * see (watermark factors, lowmem reserves, debug modes, ...) keep the Rust
 * core's defaults.
 */
struct zonealloc_config {
    const struct zonealloc_node_config *nodes; /* nr_nodes nodes; NULL if 0 */
    size_t nr_nodes;
    uint32_t nr_cpus;         /* CPUs with per-CPU lists; 0 (default): the machine's */
    uint32_t max_order;       /* largest block order, MAX_PAGE_ORDER (default 10,
                                 at most 20) */
    uint32_t pageblock_order; /* pageblock_order (default 9, at most max_order) */
    uint32_t pcp_enabled;     /* non-zero (default): per-CPU lists on; 0: every
                                 allocation and free takes the zone lock */
    int64_t min_free_kbytes;  /* negative (default): computed from the zone sizes
                                 as Linux does */
    uint32_t backing;         /* enum zonealloc_backing (default FRAMES) */
};

/* Opaque allocator handle. */
struct zonealloc;

/* ------------------------------------------------------------------------- */
/* Construction and destruction                                              */
/* ------------------------------------------------------------------------- */

/**
 * zonealloc_config_init - fill a configuration with the defaults.
 * @cfg: out: the configuration. Must not be NULL.
 *
 * No nodes, nr_cpus 0 (the machine's), max_order 10, pageblock_order 9,
 * per-CPU lists on, min_free_kbytes computed (-1), abstract frames.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT
 * (misaligned @cfg).
 * Threads: any thread; touches only *@cfg.
 */
int zonealloc_config_init(struct zonealloc_config *cfg);

/**
 * zonealloc_create - build an allocator from a configuration.
 * @cfg: the configuration; it and every array it points to (nodes, their
 *       zones, the zones' holes) must be readable for their stated lengths and
 *       not change during the call. Not kept after the call. Must not be NULL.
 * @out: out: the new handle. Must not be NULL. Written only on success.
 *
 * Every frame of every zone, holes excepted, starts free. With
 * ZONEALLOC_BACKING_ARENA the zones' spans are mapped first.
 *
 * Errors: one ZONEALLOC_ERR_CONFIG_* code per problem the core finds (the
 * first found; the last error names the node, zone type or value),
 * ZONEALLOC_ERR_NULL_POINTER (@cfg, @out, or an array with a non-zero length),
 * ZONEALLOC_ERR_INVALID_ARGUMENT (an unknown zone type or backing, a
 * misaligned pointer), ZONEALLOC_ERR_PANIC.
 * Threads: any thread, concurrently with any call.
 */
int zonealloc_create(const struct zonealloc_config *cfg, struct zonealloc **out);

/**
 * zonealloc_create_bytes - build an allocator over one Normal zone of @bytes.
 * @bytes:   the zone's size, rounded down to whole pages; it starts at frame 0.
 * @backing: enum zonealloc_backing.
 * @out:     out: the new handle. Must not be NULL. Written only on success.
 *
 * Every other setting is zonealloc_config_init()'s default.
 *
 * Errors: ZONEALLOC_ERR_CONFIG_NO_MEMORY (@bytes below a page), another
 * ZONEALLOC_ERR_CONFIG_* code, ZONEALLOC_ERR_NULL_POINTER,
 * ZONEALLOC_ERR_INVALID_ARGUMENT (an unknown @backing), ZONEALLOC_ERR_PANIC.
 * Threads: any thread, concurrently with any call.
 */
int zonealloc_create_bytes(uint64_t bytes, uint32_t backing, struct zonealloc **out);

/**
 * zonealloc_destroy - free an allocator.
 * @za: the handle, from zonealloc_create*(). NULL is refused.
 *
 * Frees the allocator whatever it still has allocated (with an arena, the
 * mapping goes, so no address it gave may be used afterwards). The handle stays
 * a 16-byte tombstone: every later call with it, a second destroy included,
 * answers ZONEALLOC_ERR_BAD_HANDLE.
 *
 * Errors: ZONEALLOC_ERR_BAD_HANDLE (NULL, misaligned, already destroyed),
 * ZONEALLOC_ERR_PANIC.
 * Threads: any thread, but no other call on @za may run while it runs or start
 * after it: it must be the handle's last call. Of two racing destroys exactly
 * one succeeds.
 */
int zonealloc_destroy(struct zonealloc *za);

/* ------------------------------------------------------------------------- */
/* Blocks and references                                                     */
/* ------------------------------------------------------------------------- */

/**
 * zonealloc_alloc_pages - allocate a block of 2^@order frames.
 * @za:    the handle.
 * @gfp:   ZONEALLOC_GFP_* flags (ZONEALLOC_GFP_KERNEL for an ordinary request).
 * @order: the block's order, 0..max_order.
 * @pfn:   out: the block's first frame. Must not be NULL.
 *
 * The block is naturally aligned (its first frame a multiple of 2^@order) and
 * has one reference. Free it with zonealloc_free_pages() at the same order.
 * Tries node 0's zonelist from the highest zone @gfp allows, through the
 * calling CPU's per-CPU lists for small orders.
 *
 * Errors: ZONEALLOC_ERR_ALLOC_NO_MEMORY (even after draining per-CPU lists
 * and reserves), ZONEALLOC_ERR_ALLOC_INVALID_ORDER,
 * ZONEALLOC_ERR_ALLOC_NO_ELIGIBLE_ZONE, ZONEALLOC_ERR_NULL_POINTER,
 * ZONEALLOC_ERR_INVALID_ARGUMENT, and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_alloc_pages(struct zonealloc *za, uint32_t gfp, uint32_t order, uint64_t *pfn);

/**
 * zonealloc_alloc_pages_node - allocate a block, preferring node @nid.
 * @za:    the handle.
 * @nid:   the node whose zonelist to start from.
 * @gfp:   ZONEALLOC_GFP_* flags; with ZONEALLOC_GFP_THISNODE, only @nid.
 * @order: the block's order, 0..max_order.
 * @pfn:   out: the block's first frame. Must not be NULL.
 *
 * As zonealloc_alloc_pages() (Linux's alloc_pages_node()).
 *
 * Errors: as zonealloc_alloc_pages(), and ZONEALLOC_ERR_ALLOC_INVALID_NODE.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_alloc_pages_node(struct zonealloc *za, uint32_t nid, uint32_t gfp, uint32_t order,
                               uint64_t *pfn);

/**
 * zonealloc_free_pages - drop a reference on a block, freeing it at zero.
 * @za:    the handle.
 * @pfn:   the block's first frame.
 * @order: the order it was allocated (or split) with.
 *
 * Linux's __free_pages(). Any thread may free a block any other allocated.
 * A block already free is refused with ZONEALLOC_ERR_FREE_ALREADY_FREE and
 * nothing changes; of two threads freeing one block at once exactly one
 * succeeds. A second free after the block was allocated again (to anyone, at
 * the same frame and order) cannot be told from a free by its new owner.
 *
 * Errors: ZONEALLOC_ERR_FREE_ALREADY_FREE, _OUT_OF_RANGE, _HOLE, _TAIL_PAGE,
 * _WRONG_ORDER, _MISALIGNED, _INVALID_ORDER, _BUSY, _BAD_PAGE (all
 * ZONEALLOC_ERR_FREE_*), and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_free_pages(struct zonealloc *za, uint64_t pfn, uint32_t order);

/**
 * zonealloc_get_page - add a reference to an allocated block.
 * @za:  the handle.
 * @pfn: the block's first frame.
 *
 * Each reference needs its own zonealloc_put_page() or zonealloc_free_pages().
 *
 * Errors: ZONEALLOC_ERR_FREE_REFCOUNT_OVERFLOW (beyond 2^30 references), and
 * the ZONEALLOC_ERR_FREE_* codes of a frame that is not an allocated block's
 * head (_ALREADY_FREE, _OUT_OF_RANGE, _HOLE, _TAIL_PAGE, _BUSY, _BAD_PAGE),
 * and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_get_page(struct zonealloc *za, uint64_t pfn);

/**
 * zonealloc_put_page - drop a reference on an allocated block.
 * @za:    the handle.
 * @pfn:   the block's first frame.
 * @freed: out: 1 if that was the last reference and the block was freed, 0
 *         otherwise. May be NULL.
 *
 * Linux's put_page(): the block's order is its own, not the caller's.
 *
 * Errors: the ZONEALLOC_ERR_FREE_* codes of zonealloc_get_page() but the
 * overflow, ZONEALLOC_ERR_INVALID_ARGUMENT (misaligned @freed), and the codes
 * common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_put_page(struct zonealloc *za, uint64_t pfn, int *freed);

/**
 * zonealloc_page_count - read an allocated block's reference count.
 * @za:    the handle.
 * @pfn:   the block's first frame.
 * @count: out: its references. Must not be NULL.
 *
 * Errors: the ZONEALLOC_ERR_FREE_* codes of a frame that is not an allocated
 * block's head, ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT,
 * and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy(); the
 * count may change as soon as it is read.
 */
int zonealloc_page_count(const struct zonealloc *za, uint64_t pfn, uint32_t *count);

/**
 * zonealloc_split_page - split an allocated block into order-0 pages.
 * @za:    the handle.
 * @pfn:   the block's first frame.
 * @order: the order it was allocated with.
 *
 * Afterwards each of the 2^@order frames is an order-0 page with one reference
 * (the first keeps the references the block had): free them one by one with
 * zonealloc_free_pages(..., 0), or as a run with zonealloc_free_contig_range()
 * or zonealloc_free_pages_bulk().
 *
 * Errors: ZONEALLOC_ERR_FREE_WRONG_ORDER, _MISALIGNED, _INVALID_ORDER, _BUSY
 * (already split), and the codes of a frame that is not an allocated block's
 * head (all ZONEALLOC_ERR_FREE_*), and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_split_page(struct zonealloc *za, uint64_t pfn, uint32_t order);

/**
 * zonealloc_page_address - the address of a frame's page (arena backing).
 * @za:   the handle.
 * @pfn:  any frame of a zone.
 * @addr: out: the page's first byte; the pages of a zone are consecutive.
 *        Must not be NULL.
 *
 * The memory is the allocator's mapping: read and write the pages of blocks
 * you hold, not others, and none after zonealloc_destroy().
 *
 * Errors: ZONEALLOC_ERR_NO_ADDRESS (abstract frames),
 * ZONEALLOC_ERR_FREE_OUT_OF_RANGE (@pfn in no zone),
 * ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT, and the codes
 * common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_page_address(const struct zonealloc *za, uint64_t pfn, void **addr);

/* ------------------------------------------------------------------------- */
/* Contiguous and bulk                                                       */
/* ------------------------------------------------------------------------- */

/**
 * zonealloc_alloc_contig_range - allocate exactly the frames [@start, @end).
 * @za:    the handle.
 * @start: the first frame.
 * @end:   one past the last frame; the range may have any length.
 *
 * Each frame becomes an order-0 page with one reference; free them with
 * zonealloc_free_contig_range(). The range's pageblocks are isolated while the
 * call works and this zone's per-CPU lists are drained into them. A range with
 * a frame in use fails before anything is isolated; one whose free frame
 * another thread takes meanwhile fails after that drain (no frame changes
 * owner, as with Linux's alloc_contig_range()).
 *
 * Errors: ZONEALLOC_ERR_CONTIG_INVALID_RANGE, _CROSSES_ZONE, _BUSY (the last
 * error's pfn is the first frame in use), _ISOLATED (all
 * ZONEALLOC_ERR_CONTIG_*), and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_alloc_contig_range(struct zonealloc *za, uint64_t start, uint64_t end);

/**
 * zonealloc_alloc_contig_pages - find and allocate @nr_pages contiguous frames.
 * @za:       the handle.
 * @nr_pages: frames wanted, any count from 1.
 * @gfp:      ZONEALLOC_GFP_* flags: the highest zone, ZONEALLOC_GFP_THISNODE.
 * @nid:      the node whose zonelist to search.
 * @pfn:      out: the run's first frame. Must not be NULL.
 *
 * Scans the eligible zones for a free run aligned to @nr_pages rounded up to a
 * power of two (at most a pageblock). Free with zonealloc_free_contig_range().
 *
 * Errors: ZONEALLOC_ERR_CONTIG_NO_MEMORY, ZONEALLOC_ERR_CONTIG_INVALID_RANGE
 * (@nr_pages 0 or no node @nid), ZONEALLOC_ERR_NULL_POINTER,
 * ZONEALLOC_ERR_INVALID_ARGUMENT, and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_alloc_contig_pages(struct zonealloc *za, uint64_t nr_pages, uint32_t gfp,
                                 uint32_t nid, uint64_t *pfn);

/**
 * zonealloc_free_contig_range - free a run of order-0 pages.
 * @za:       the handle.
 * @pfn:      the first page.
 * @nr_pages: pages in the run.
 *
 * Drops one reference on each page; those that reach zero are freed as the
 * largest naturally aligned blocks. For runs from zonealloc_alloc_contig_*()
 * and split blocks. All or nothing: with any bad page, nothing changes.
 *
 * Errors: ZONEALLOC_ERR_FREE_CROSSES_ZONE, _OUT_OF_RANGE, and the
 * ZONEALLOC_ERR_FREE_* code of the first page that is not an allocated order-0
 * page (the last error's pfn names it), and the codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy(); of
 * two calls freeing one page, exactly one succeeds.
 */
int zonealloc_free_contig_range(struct zonealloc *za, uint64_t pfn, uint64_t nr_pages);

/**
 * zonealloc_alloc_pages_bulk - fill an array's empty slots with order-0 pages.
 * @za:        the handle.
 * @gfp:       ZONEALLOC_GFP_* flags.
 * @pfns:      @nr slots; those holding ZONEALLOC_PFN_NONE are filled, the
 *             others kept. Read and written; NULL only if @nr is 0.
 * @nr:        slots in @pfns.
 * @nr_filled: out: slots holding a page afterwards, pre-filled ones included.
 *             Must not be NULL.
 *
 * Linux's alloc_pages_bulk(): pages come from this CPU's list under one lock
 * hold, refilled from the buddy lists. Running low on memory is not an error:
 * *@nr_filled falls short of @nr, and the unfilled slots keep
 * ZONEALLOC_PFN_NONE. Free the pages with zonealloc_free_pages_bulk() or one by
 * one at order 0.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT, and the
 * codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy(); no
 * other thread may touch @pfns during the call.
 */
int zonealloc_alloc_pages_bulk(struct zonealloc *za, uint32_t gfp, uint64_t *pfns, size_t nr,
                               size_t *nr_filled);

/**
 * zonealloc_free_pages_bulk - free an array of order-0 pages.
 * @za:   the handle.
 * @pfns: @nr order-0 pages, in any order; runs of consecutive frames are freed
 *        as large blocks. Read only; NULL only if @nr is 0.
 * @nr:   entries in @pfns.
 *
 * Drops one reference on each page. All or nothing: with any bad entry (free,
 * a hole, part of a larger block, listed more often than it has references)
 * nothing changes and the first bad page in ascending frame order is reported.
 *
 * Errors: the ZONEALLOC_ERR_FREE_* code of the first bad page,
 * ZONEALLOC_ERR_HOST_MEMORY (no room for a copy of @pfns),
 * ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT, and the codes
 * common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy(); of
 * two calls freeing one page, exactly one succeeds.
 */
int zonealloc_free_pages_bulk(struct zonealloc *za, const uint64_t *pfns, size_t nr);

/* ------------------------------------------------------------------------- */
/* Per-CPU lists and counts                                                  */
/* ------------------------------------------------------------------------- */

/**
 * zonealloc_drain_local_pages - empty the calling CPU's per-CPU lists.
 * @za:         the handle.
 * @nr_drained: out: pages returned to the buddy lists. May be NULL.
 *
 * Linux's drain_local_pages(), for the CPU the calling thread runs on now.
 *
 * Errors: ZONEALLOC_ERR_INVALID_ARGUMENT (misaligned @nr_drained), and the
 * codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_drain_local_pages(struct zonealloc *za, uint64_t *nr_drained);

/**
 * zonealloc_drain_all_pages - empty every CPU's per-CPU lists and stacks.
 * @za:         the handle.
 * @nr_drained: out: pages returned to the buddy lists. May be NULL.
 *
 * Linux's drain_all_pages(), done from the calling thread. Once no other call
 * runs, zonealloc_nr_pcp_pages() is 0 afterwards.
 *
 * Errors: ZONEALLOC_ERR_INVALID_ARGUMENT (misaligned @nr_drained), and the
 * codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_drain_all_pages(struct zonealloc *za, uint64_t *nr_drained);

/**
 * zonealloc_nr_free_pages - free frames on the buddy lists, all zones.
 * @za: the handle.
 * @nr: out: the count. Must not be NULL.
 *
 * Frames on per-CPU lists are not counted (zonealloc_nr_pcp_pages() counts
 * them). Lock-free; exact once no other call runs.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT, and the
 * codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_nr_free_pages(const struct zonealloc *za, uint64_t *nr);

/**
 * zonealloc_managed_pages - frames the allocator manages, all zones.
 * @za: the handle.
 * @nr: out: the count (present frames, holes excluded). Must not be NULL.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT, and the
 * codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_managed_pages(const struct zonealloc *za, uint64_t *nr);

/**
 * zonealloc_nr_pcp_pages - free frames held on per-CPU lists and stacks.
 * @za: the handle.
 * @nr: out: the count. Must not be NULL.
 *
 * Lock-free; exact once no other call runs.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER, ZONEALLOC_ERR_INVALID_ARGUMENT, and the
 * codes common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy().
 */
int zonealloc_nr_pcp_pages(const struct zonealloc *za, uint64_t *nr);

/* ------------------------------------------------------------------------- */
/* Statistics in the kernel's formats                                        */
/* ------------------------------------------------------------------------- */

/*
 * The four calls below write a text as the kernel's /proc file shows it, in
 * snprintf()'s convention: at most @cap - 1 bytes of it and a NUL (nothing if
 * @cap is 0; @buf may then be NULL). They return the text's full length, not
 * counting the NUL, whatever @cap is: a result >= @cap means the text was cut.
 * Each call formats a fresh snapshot, so a second call with a buffer of the
 * returned length + 1 can still be cut if the allocator changed meanwhile
 * (retry, or leave some room). A negative result is a status code.
 */

/**
 * zonealloc_buddyinfo - /proc/buddyinfo: free blocks per order, per zone.
 * @za:  the handle.
 * @buf: @cap bytes to write to; NULL only if @cap is 0.
 * @cap: bytes at @buf.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER (@buf NULL with @cap > 0), and the codes
 * common to every call, as negative results.
 * Threads: any thread, concurrently with any call but zonealloc_destroy();
 * no other thread may touch @buf during the call.
 */
int64_t zonealloc_buddyinfo(const struct zonealloc *za, char *buf, size_t cap);

/**
 * zonealloc_pagetypeinfo - /proc/pagetypeinfo: free blocks per order and
 * migratetype, and pageblocks per migratetype.
 * @za:  the handle.
 * @buf: @cap bytes to write to; NULL only if @cap is 0.
 * @cap: bytes at @buf.
 *
 * Errors: as zonealloc_buddyinfo().
 * Threads: as zonealloc_buddyinfo().
 */
int64_t zonealloc_pagetypeinfo(const struct zonealloc *za, char *buf, size_t cap);

/**
 * zonealloc_zoneinfo - /proc/zoneinfo: per zone, watermarks, counters,
 * protection and per-CPU pagesets.
 * @za:  the handle.
 * @buf: @cap bytes to write to; NULL only if @cap is 0.
 * @cap: bytes at @buf.
 *
 * Errors: as zonealloc_buddyinfo().
 * Threads: as zonealloc_buddyinfo().
 */
int64_t zonealloc_zoneinfo(const struct zonealloc *za, char *buf, size_t cap);

/**
 * zonealloc_vmstat - /proc/vmstat: the allocator's event and page counters.
 * @za:  the handle.
 * @buf: @cap bytes to write to; NULL only if @cap is 0.
 * @cap: bytes at @buf.
 *
 * Errors: as zonealloc_buddyinfo().
 * Threads: as zonealloc_buddyinfo().
 */
int64_t zonealloc_vmstat(const struct zonealloc *za, char *buf, size_t cap);

/**
 * zonealloc_check_invariants - validate every structure of the allocator.
 * @za:        the handle.
 * @nr_checks: out: assertions evaluated, written when all held. May be NULL.
 *
 * Walks every frame and every free list, zone by zone under its locks: every
 * frame is exactly one of a hole, a free block's head, an allocated block's
 * head or a tail; every free block is on the right list and has no free buddy
 * it should have merged with; counters equal a recount. O(frames).
 *
 * Errors: ZONEALLOC_ERR_INVARIANT (the first broken invariant: see
 * zonealloc_last_error_message(), and the last error's pfn),
 * ZONEALLOC_ERR_INVALID_ARGUMENT (misaligned @nr_checks), and the codes
 * common to every call.
 * Threads: any thread, concurrently with any call but zonealloc_destroy(); but
 * meaningful only while no other call runs: a block another thread is freeing
 * at that moment may read as a violation.
 */
int zonealloc_check_invariants(const struct zonealloc *za, uint64_t *nr_checks);

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

/**
 * zonealloc_strerror - describe a status code.
 * @code: a value of enum zonealloc_error (any int is accepted).
 *
 * Errors: none. Returns a static NUL-terminated string, never NULL; a fixed
 * text for codes the library does not have. Do not free it.
 * Threads: any thread, at any time; needs no handle.
 */
const char *zonealloc_strerror(int code);

/**
 * zonealloc_last_error - the calling thread's last error, with its payload.
 * @info: out: the code and the error's payload (frame, orders, node, zone
 *        type, value). May be NULL.
 *
 * The last error is that of the calling thread's most recent failing call;
 * successful calls leave it as it was, as errno.
 *
 * Errors: returns the last error's code (ZONEALLOC_OK if no call of this
 * thread failed yet); ZONEALLOC_ERR_INVALID_ARGUMENT for a misaligned @info,
 * which does not replace the last error.
 * Threads: any thread, at any time; reads only the calling thread's state.
 */
int zonealloc_last_error(struct zonealloc_error_info *info);

/**
 * zonealloc_last_error_message - the calling thread's last error in words.
 * @buf: @cap bytes to write to; NULL only if @cap is 0.
 * @cap: bytes at @buf.
 *
 * The core's message, naming the frame, order or value ("pfn 0x1200 is already
 * free"), written as the statistics calls write (snprintf()'s convention);
 * "no error" if no call of this thread failed yet.
 *
 * Errors: ZONEALLOC_ERR_NULL_POINTER (@buf NULL with @cap > 0), as a negative
 * result; it does not replace the last error.
 * Threads: any thread, at any time; reads only the calling thread's state.
 */
int64_t zonealloc_last_error_message(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* ZONEALLOC_H */
