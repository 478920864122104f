//! zonealloc: the Linux zoned buddy page allocator as a Rust library.
//!
//! zonealloc manages *page frames*: numbered, page-sized units of memory grouped into
//! zones on nodes, as Linux's `mm/page_alloc.c` does. It hands out naturally aligned
//! blocks of `2^order` frames from per-zone buddy free lists, groups pageblocks by
//! mobility (migratetypes) to fight fragmentation, keeps Linux's watermarks and
//! reserves, and reports its state in the kernel's own `/proc` formats from counters
//! that need no lock.
//!
//! The frames can be abstract (device memory, guest frames: `AbstractFrames`) or real
//! pages of an mmap'd arena (`Arena`, with the `std` feature). Without `std` the core
//! builds for kernels, needing only `alloc`.
//!
//! ```
//! use zonealloc::{Config, Gfp, Order, ZoneAllocator};
//!
//! let za = ZoneAllocator::new(Config::with_bytes(256 << 20)).unwrap();
//! let pfn = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
//! za.free_pages(pfn, Order(0)).unwrap();
//! // A second free of the same block is refused and changes nothing.
//! assert!(za.free_pages(pfn, Order(0)).is_err());
//! print!("{}", za.buddyinfo());
//! ```
//!
//! On x86-64 Linux with glibc, `alloc_pages` and `free_pages` on the current CPU
//! go to per-CPU stacks committed with restartable sequences: no lock, and no
//! atomic read-modify-write but the free's one compare-and-swap (the double-free
//! check every free makes); `drain_all_pages` reaches everything they hold
//! ([`ZoneAllocator::uses_cpu_stacks`]). A `LocalCache` is the same fast path as an
//! object; where the stacks are missing (`no_std`, other targets) it holds blocks of
//! its own, which the allocator can still drain ([`local`]).
//!
//! ```
//! use zonealloc::{Config, Gfp, Order, ZoneAllocator};
//!
//! let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
//! let mut cache = za.local_cache(Gfp::KERNEL).unwrap();
//! let p = cache.alloc(Order(0)).unwrap();
//! cache.free(p, Order(0)).unwrap();
//! assert!(za.free_pages(p, Order(0)).is_err(), "cached: already free");
//! drop(cache); // gives its blocks back to the buddy lists
//! ```
//!
//! # The public API by task
//!
//! | task | calls | where it is documented |
//! |---|---|---|
//! | build | `ZoneAllocator::new`, `with_arena`, `with_backend`, `Config`, `Config::validate`, `setup_watermarks` | [`ZoneAllocator`], [`Config`] |
//! | allocate | `alloc_pages`, `alloc_pages_on`, `alloc_pages_node`, `alloc_block` (a `PageBlock` guard) | [`ZoneAllocator::alloc_pages`], [`PageBlock`] |
//! | the fast path as an object | `local_cache`, `local_cache_on`, `LocalCache::alloc`, `free`, `flush`, `uses_cpu_stacks`, `nr_cached_pages` | [`local`] |
//! | free and references | `free_pages`, `free_pages_on`, `put_page`, `get_page`, `page_count`, `split_page`, `block_of` | [`ZoneAllocator::free_pages`] |
//! | contiguous and bulk | `free_contig_range`, `free_pages_bulk`, `alloc_pages_bulk`, `alloc_contig_range`, `alloc_contig_pages` | [`contig`] |
//! | compaction | `set_migrator` (a `Migrate` owner), `compact_zone`, `compact_node`, `proactive_compact_node`, `fragmentation_score`, `set_extfrag_threshold`, `set_compaction_proactiveness`, `compaction_stats` | [`compaction`], [`migrate`], [`Migrate`] |
//! | fragments | `PageFragCache::alloc`, `drain`, `ZoneAllocator::page_frag_free` | [`page_frag`] |
//! | vmalloc | `VmallocSpace::vmalloc`, `vfree`, `vmalloc_owned` (an `OwnedVmArea`: `bytes`, `bytes_mut`), `vmap`, `vm_map_ram`, `vmallocinfo` | [`vmalloc`] |
//! | reclaim | `register_shrinker` (a `Shrinker`), `unregister_shrinker`, `balance_node`, `KswapdWorker`, `kswapd_pending`; `Config::watermark_boost_factor` | [`reclaim`] |
//! | memory offlining | `offline_pages`, `online_pages` | [`hotplug`] |
//! | memory that arrives | `Config::reserved`, `free_reserved_area`, `add_memory` | [`hotplug`] |
//! | hosting in a kernel | `Config::platform` (a [`Platform`]: interrupts, the CPU, a cross-CPU barrier), `with_memmap` (a [`MemMap`]: tables without the heap), `alloc_pages_nolock`, `free_pages_nolock`, `alloc_pages_pinned`, `free_pages_pinned` (a `PinnedCpu`), `metadata_bytes`; with `std`, `LinuxThreads` | [`Platform`], [`memmap`], `docs/kernel.md` |
//! | NUMA | `Config::cpu_to_node`, `Config::node_distance`, `numa_node_id`, `alloc_pages_node`; with `std`, `numa::HostTopology` and `ArenaOptions::bind_nodes` | [`Config`], `numa` |
//! | contiguous memory areas | `Config::with_cma`, `cma_area` (by name), `cma_alloc`, `cma_release`, `cma_area_info` | [`cma`] |
//! | memory back to the host or the OS | `register_page_reporting` (a `PageReporter`, or `Reporter::Backend`: `madvise` over an arena), `report_free_pages`, `PageReportingWorker`, `page_reporting_stats` | [`reporting`] |
//! | per-CPU lists | `drain_local_pages`, `drain_cpu_pages`, `drain_all_pages`, `pcp_decay`, `nr_pcp_pages`, `current_cpu` | [`ZoneAllocator::drain_all_pages`] |
//! | statistics | `buddyinfo`, `pagetypeinfo`, `zoneinfo`, `vmstat`, `free_counts`, `zone_events`, `pcp_stats`, `extfrag_index`, `unusable_index`, `watermarks`, `zones`, `frame_state`, `managed_pages`, `nr_free_pages` | [`ZoneAllocator::buddyinfo`], [`ZoneInfo`], [`VmStat`] |
//! | fork | with `std` on Unix nothing (every allocator is registered with `pthread_atfork`); a host with its own fork: `prefork`, `postfork_parent`, `postfork_child`; `KswapdWorker::is_running`, `PageReportingWorker::is_running` | [`ZoneAllocator::prefork`], "Fork" below |
//! | debugging | `check_invariants`, `state_digest`, `pagetypeinfo_walked`, `inject_faults`, `faults_injected`, `bad_page_reports` | [`ZoneAllocator::check_invariants`], [`InvariantReport`] |
//!
//! The modules with pages of their own are those a user reads about: [`arena`],
//! [`local`], [`contig`], [`compaction`], [`migrate`], [`page_frag`], [`reclaim`],
//! [`reporting`], [`hotplug`], [`cma`] and [`vmalloc`];
//! the others are internal, and their public types are re-exported here.
//!
//! # The heap: set-up only
//!
//! A kernel's heap may take its pages from this allocator, so the runtime paths
//! never call the heap: allocation and free of every order, the per-CPU lists and
//! stacks and their drains, `LocalCache` calls, the bulk and contiguous paths,
//! compaction, CMA, free page reporting passes, offlining and onlining, and
//! reclaim passes work in batches on the stack, or link what they hold through
//! the frame table (`tests/heap_free.rs` fails any call that allocates or frees
//! heap memory). Calls documented as set-up or teardown allocate and free:
//! building an allocator, `local_cache` and `with_batch` where the cache holds
//! blocks of its own, `register_page_reporting`, `register_shrinker`, and their
//! undoing (dropping, unregistering). Not heap-free: vmalloc (an area's array of
//! pages is on the heap, as in Linux), the validators and the `/proc` formatters
//! (they build text), and, while a `LocalCache` holds blocks of its own (no
//! per-CPU stacks), the calls that reach every cache (`drain_all_pages` and so
//! the allocation slow path before `NoMemory`, `pcp_decay`, `nr_cached_pages`,
//! and `alloc_contig_range`, `cma_alloc` and `offline_pages`), which gather the
//! registered caches into a list first.
//!
//! # Fork
//!
//! With `std` on Unix every allocator is safe across `fork()` while other
//! threads are inside it: each registers at construction (and unregisters when
//! dropped) in a process-wide list that one `pthread_atfork` registration walks.
//! Before the fork, [`ZoneAllocator::prefork`] takes every lock a child could
//! need, in the order the allocator's own code nests them, so no section of
//! another thread is half done in the copy; after it the parent releases them
//! ([`ZoneAllocator::postfork_parent`]) and the child
//! ([`ZoneAllocator::postfork_child`]) releases them and gives back the blocks
//! that other threads held between two states (a free between its
//! compare-and-swap and its list, an allocation between its pop and its
//! return, a block taken off the buddy lists and not yet handed out), clears the per-CPU stacks' stop and busy marks, and forgets the
//! kswapd worker. What a child can rely on:
//!
//! * its allocator state is the parent's at the fork, whole: `check_invariants`
//!   passes, and every block is free or allocated. Blocks the parent's other
//!   threads had allocated stay allocated (nothing in the child can free them);
//! * with an anonymous arena (the default) the pages are copy-on-write: the
//!   child's are its own copies, and the two allocators are independent;
//! * with a memfd arena (`ArenaOptions::memfd`) the pages are shared with the
//!   parent: both allocators would hand out the same memory, so a child must
//!   not allocate from such an arena (it may read what it inherited; `exec` or
//!   `_exit` are the other ways out);
//! * worker threads do not survive: [`KswapdWorker`] and
//!   [`PageReportingWorker`] handles inherited by the child say
//!   `is_running() == false`, dropping them joins nothing, and the child may
//!   start its own;
//! * `LocalCache`s that held blocks of their own (no per-CPU stacks) and were
//!   in use by another thread at the fork are not fixed up: their blocks stay
//!   theirs, and such a cache's lock may stay held in the child; an
//!   `alloc_contig_range` under way at the fork leaves its pageblocks isolated
//!   in the child; a fork from inside an owner's callback (a `Migrate`,
//!   `Shrinker` or `PageReporter`) waits forever in `prefork` for the lock its
//!   own thread holds.
//!
//! Without `std`, a host that forks calls the three methods itself.
//!
//! # Layers, one module each, following the allocation path
//!
//! Lowest first. A module imports only from its own row and the rows above it
//! (`tests/architecture.rs` reads this table and fails on any import that runs
//! the other way, or on files that import each other in a circle), with one
//! mutual pair kept from Linux: a zone owns its per-CPU slots (`struct zone` has
//! `per_cpu_pageset`), so `zone` names `pcp`'s slot type while `pcp` works on
//! zones.
//!
//! `ZoneAllocator` is one type with its `impl` blocks spread over a layer of its
//! own: `allocator` (the type, construction, zonelists, watermarks), `allocate`,
//! `free`, `drain` and `fast`. What it owns for the layers above it lives below
//! it (`compact_state`, `cma_state`, `reporting_state`, `local_state`,
//! `stack_limits`, and `fork`, which reaches the others' locks), so it names
//! nothing of them. The allocation slow path
//! compacts directly (`__alloc_pages_direct_compact`) through a trait: `allocate`
//! declares `DirectCompact` and `compaction` implements it. `buddy` and `isolate`
//! add zone-lock-held methods to `zone`'s `ZoneLocked` guard, and `owned`,
//! `local`, `contig`, `migrate`, `compaction`, `page_frag`, `reporting`,
//! `reclaim`, `hotplug`, `cma`, `stats` and `check` add methods to
//! `ZoneAllocator`: each extends the layer below it, never the other way.
//!
//! | module | layer |
//! |---|---|
//! | `types`, `sync`, `platform`, `hook`, `error`, `gfp`, `counter`, `fault`, `fragindex`, `migrator`, `shrinker`, `buf` | vocabulary, locks and atomics (loom-swappable), what the host tells the allocator (interrupts, the CPU, a cross-CPU barrier), calling owners' code (the rule every hook obeys), errors, GFP and `ALLOC_*` flags, statistics counters, fault injection, the fragmentation indices' arithmetic, the `Migrate` trait an owner of movable memory implements, the shrinkers and how much each is asked, a batch of blocks on the stack |
//! | `frame`, `memmap` | per-frame metadata (16 bytes), the frame state machine, intrusive lists; where the frame tables live |
//! | `config` | the configuration with every layer's tunables, and what its frame tables will take |
//! | `pageblock` | pageblock migratetypes and isolation bits |
//! | `backend`, `arena`, `os`, `stacks`, `rseq`, `numa`, `pinning` | what stands behind the frames; the current CPU; the per-CPU stacks and their pinned protocol; their restartable sequences; the host's NUMA topology and `mbind`; threads pinned to CPUs as a platform |
//! | `zone` | a zone: its lock, free lists, counters, watermark checks (and its per-CPU slots) |
//! | `buddy`, `isolate` | split, merge, fallback, highatomic reserves, pageblock isolation (zone lock held) |
//! | `pcp` | per-CPU lists: refill, flush, high auto-tuning (pcp lock, then zone lock) |
//! | `debug`, `compact_state`, `cma_state`, `reporting_state`, `local_state`, `stack_limits`, `fork` | what the allocator owns for the layers above it: poisoning, init-on-alloc/free, bad-page reports; what compaction keeps between runs; CMA areas; the page reporter and its counters; each `LocalCache`'s blocks; the per-CPU stacks' batches and limits; what `fork`'s handlers lock and fix up, and the registry of live allocators |
//! | `allocator`, `allocate`, `free`, `drain`, `fast` | `ZoneAllocator`: nodes, zonelists, watermarks; `alloc_pages`; `free_pages` and references; drains; the per-CPU stacks' fast path |
//! | `local`, `owned`, `contig`, `page_frag`, `reporting` | owner-local caches, guards (a cache's blocks too), contiguous and bulk paths, fragments, free page reporting |
//! | `migrate`, `compaction` | moving a movable block through its owner; the two scanners, suitability, deferral, direct and proactive compaction |
//! | `reclaim`, `hotplug`, `cma` | kswapd (which compacts after a watermark boost) and the shrinkers' public side; memory offlining and onlining, and contiguous memory areas (both move blocks through `migrate`) |
//! | `stats`, `check` | buddyinfo, pagetypeinfo, zoneinfo, vmstat, fragmentation indices; validators |
//! | `vmalloc`, `vmap_tree` | virtually contiguous areas; free addresses in an augmented AVL tree |

#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
// Index loops over (order, migratetype) tables read like the tables they walk.
#![allow(clippy::needless_range_loop)]

extern crate alloc;
// The unit tests use std (its test harness, threads) even in the `no_std`
// configuration, whose code is otherwise what a kernel builds.
#[cfg(any(feature = "std", test))]
extern crate std;

mod allocate;
mod allocator;
#[cfg(feature = "std")]
pub mod arena;
mod backend;
mod buddy;
mod buf;
mod check;
pub mod cma;
mod cma_state;
mod compact_state;
pub mod compaction;
mod config;
pub mod contig;
mod counter;
mod debug;
mod drain;
mod error;
mod fast;
mod fault;
#[cfg(not(loom))]
mod fork;
mod fragindex;
mod frame;
mod free;
mod gfp;
mod hook;
pub mod hotplug;
mod isolate;
pub mod local;
mod local_state;
pub mod memmap;
pub mod migrate;
mod migrator;
#[cfg(all(feature = "std", target_os = "linux"))]
pub mod numa;
#[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
mod os;
mod owned;
pub mod page_frag;
mod pageblock;
mod pcp;
#[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
mod pinning;
mod platform;
pub mod reclaim;
pub mod reporting;
mod reporting_state;
#[cfg(all(
    feature = "std",
    target_os = "linux",
    target_arch = "x86_64",
    target_env = "gnu",
    not(any(loom, miri))
))]
mod rseq;
#[cfg(not(all(
    feature = "std",
    target_os = "linux",
    target_arch = "x86_64",
    target_env = "gnu",
    not(any(loom, miri))
)))]
#[path = "rseq_off.rs"]
mod rseq;
mod shrinker;
mod stack_limits;
mod stacks;
mod stats;
mod sync;
mod types;
pub mod vmalloc;
mod vmap_tree;
mod zone;

pub use allocator::ZoneAllocator;
#[cfg(feature = "std")]
pub use arena::{Arena, ArenaOptions, Discard};
pub use backend::{AbstractFrames, Backend};
pub use check::{InvariantReport, InvariantViolation};
pub use cma::{CmaAreaInfo, CmaError};
pub use compaction::{
    CompactError, CompactReport, CompactResult, CompactStats, COMPACTION_PROACTIVENESS_DEFAULT,
    EXTFRAG_THRESHOLD_DEFAULT, EXTFRAG_THRESHOLD_MAX,
};
pub use config::{
    CmaConfig, Config, ConfigError, DebugConfig, FragFreePath, NodeConfig, PcpConfig, ZoneConfig,
    MIN_FREE_KBYTES_MAX, PCP_TUNABLE_MAX, WATERMARK_BOOST_FACTOR_MAX, WATERMARK_SCALE_FACTOR_MAX,
};
pub use contig::ContigError;
pub use debug::{BadPageReport, PAGE_POISON};
pub use error::{AllocError, FreeError};
pub use fault::FaultSite;
pub use frame::{FrameState, REFCOUNT_MAX};
pub use gfp::Gfp;
pub use hotplug::OfflineError;
pub use local::{LocalCache, LOCAL_CACHE_BATCH, LOCAL_CACHE_MAX_BATCHES};
pub use memmap::{MemMap, StaticMemMap, SECTION_FRAMES};
pub use migrator::{Migrate, MigrateOutcome, Migration};
pub use owned::PageBlock;
pub use page_frag::{FragError, Fragment, PageFragCache, PAGE_FRAG_CACHE_MAX_SIZE};
pub use pcp::{pcp_order_slot, PCP_ORDER_SLOTS};
#[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
pub use pinning::{LinuxThreads, PinnedThread};
pub use platform::Platform;
#[cfg(all(feature = "std", not(loom)))]
pub use reclaim::KswapdWorker;
pub use reclaim::{
    BalanceReport, ReclaimError, ShrinkControl, Shrinker, ShrinkerConfig, ShrinkerId,
};
#[cfg(all(feature = "std", not(loom)))]
pub use reporting::PageReportingWorker;
pub use reporting::{
    PageReporter, ReportRefused, ReportSummary, Reporter, ReportingConfig, ReportingError,
    ReportingStats, PAGE_REPORTING_CAPACITY, PAGE_REPORTING_CAPACITY_MAX,
};
pub use stacks::PinnedCpu;
pub use stats::{
    fragmentation_index, unusable_free_index, BuddyInfo, FragmentationIndex, PageTypeInfo,
    PagesetInfo, PcpCpuStats, PcpStatsZone, VmStat, ZoneEventCounts, ZoneFreeCounts, ZoneInfo,
    ZoneInfoZone, PAGETYPEINFO_WALK_CAP, SNAPSHOT_TRIES,
};
pub use types::{
    Migratetype, Order, Pfn, ZoneId, ZoneType, MAX_ORDER_LIMIT, MIGRATE_TYPES,
    PAGE_ALLOC_COSTLY_ORDER,
};
pub use vmalloc::{
    AreaKind, OwnedVmArea, VfreeMode, VmArea, VmallocConfig, VmallocError, VmallocReport,
    VmallocSpace, VMALLOC_BULK_MAX, VMAP_MAX_ALLOC,
};
pub use vmap_tree::{FreeAreaTree, TreeError, TreeViolation};
pub use zone::chunks;
