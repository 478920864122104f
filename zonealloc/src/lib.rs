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
//! # Layers, one module each, following the allocation path
//!
//! | module | layer |
//! |---|---|
//! | `frame` | per-frame metadata (16 bytes), the frame state machine, intrusive lists |
//! | `pageblock` | pageblock migratetypes and isolation |
//! | `zone` | a zone: its lock, free lists, counters, watermark checks |
//! | `buddy` | split, merge, fallback, highatomic reserves (zone lock held) |
//! | `isolate` | pageblock isolation for contiguous allocation |
//! | `contig` | `free_contig_range`, bulk free/alloc, `alloc_contig_range` |
//! | `page_frag` | page fragment cache with the reference-bias trick |
//! | `vmalloc`, `vmap_tree` | virtually contiguous areas; free addresses in an augmented AVL tree |
//! | `pcp` | per-CPU lists: refill, flush, high auto-tuning (pcp lock, then zone lock) |
//! | `allocator` | nodes, zonelists, `alloc_pages`/`free_pages`/references |
//! | `stats` | buddyinfo, pagetypeinfo, zoneinfo, vmstat, fragmentation indices |
//! | `debug` | poisoning, init-on-alloc/free, bad-page reports |
//! | `fault` | fault injection at chosen call sites |
//! | `check` | `check_invariants()`, `state_digest()` |
//! | `backend`, `arena`, `os` | what stands behind the frames; the current CPU |

#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
// Index loops over (order, migratetype) tables read like the tables they walk.
#![allow(clippy::needless_range_loop)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod allocator;
#[cfg(feature = "std")]
mod arena;
mod backend;
mod buddy;
mod check;
mod config;
mod contig;
mod counter;
mod debug;
mod error;
mod fault;
mod frame;
mod gfp;
mod isolate;
#[cfg(all(feature = "std", target_os = "linux", not(any(loom, miri))))]
mod os;
mod owned;
mod page_frag;
mod pageblock;
mod pcp;
mod stats;
mod sync;
mod types;
mod vmalloc;
mod vmap_tree;
mod zone;

pub use allocator::ZoneAllocator;
#[cfg(feature = "std")]
pub use arena::{Arena, ArenaOptions};
pub use backend::{AbstractFrames, Backend};
pub use check::{InvariantReport, InvariantViolation};
pub use config::{
    Config, ConfigError, DebugConfig, FragFreePath, NodeConfig, PcpConfig, ZoneConfig,
    MIN_FREE_KBYTES_MAX, PCP_TUNABLE_MAX, WATERMARK_SCALE_FACTOR_MAX,
};
pub use contig::ContigError;
pub use debug::{BadPageReport, PAGE_POISON};
pub use error::{AllocError, FreeError};
pub use fault::FaultSite;
pub use frame::FrameState;
pub use gfp::Gfp;
pub use owned::PageBlock;
pub use page_frag::{FragError, PageFragCache, PAGE_FRAG_CACHE_MAX_SIZE};
pub use pcp::PAGE_ALLOC_COSTLY_ORDER;
pub use stats::{
    fragmentation_index, unusable_free_index, BuddyInfo, FragmentationIndex, PageTypeInfo,
    PagesetInfo, PcpCpuStats, PcpStatsZone, VmStat, ZoneEventCounts, ZoneFreeCounts, ZoneInfo,
    ZoneInfoZone, PAGETYPEINFO_WALK_CAP,
};
pub use types::{Migratetype, Order, Pfn, ZoneId, ZoneType, MAX_ORDER_LIMIT, MIGRATE_TYPES};
pub use vmalloc::{
    AreaKind, VfreeMode, VmArea, VmallocConfig, VmallocError, VmallocReport, VmallocSpace,
    VMALLOC_BULK_MAX, VMAP_MAX_ALLOC,
};
pub use vmap_tree::{FreeAreaTree, TreeError, TreeViolation};
pub use zone::chunks;
