//! What compaction keeps between runs, held by the allocator: per zone the
//! scanners' cached positions, the skip hints and the deferral state (behind the
//! zone's compaction lock), the registered migrator, the two tunables and the
//! counters of `/proc/vmstat`.
//!
//! Below the allocator so that the allocator can own it without reaching up;
//! `compaction` (above) is the only module that reads or changes it.

use alloc::boxed::Box;
use alloc::sync::Arc;

use crate::counter::Counter;
use crate::migrator::Migrate;
use crate::sync::{AtomicU32, Lock, TryLock};
use crate::zone::Zone;

/// Default `extfrag_threshold` (Linux's `sysctl_extfrag_threshold`).
pub const EXTFRAG_THRESHOLD_DEFAULT: u32 = 500;
/// Largest `extfrag_threshold` (the fragmentation index's range).
pub const EXTFRAG_THRESHOLD_MAX: u32 = 1000;
/// Default `compaction_proactiveness` (Linux's `sysctl_compaction_proactiveness`).
pub const COMPACTION_PROACTIVENESS_DEFAULT: u32 = 20;

/// Per-zone compaction state, behind the zone's compaction lock.
pub(crate) struct ZoneCompact {
    /// `compact_cached_migrate_pfn`: where the migration scanner resumes.
    pub(crate) migrate_pfn: u64,
    /// `compact_cached_free_pfn`: the pageblock the free scanner resumes at.
    pub(crate) free_pfn: u64,
    /// One skip hint per pageblock (`PB_migrate_skip`).
    pub(crate) skip: Box<[bool]>,
    /// The last run completed: clear the hints before the next.
    pub(crate) blockskip_flush: bool,
    /// `compact_considered`, `compact_defer_shift`, `compact_order_failed`.
    pub(crate) considered: u32,
    pub(crate) defer_shift: u32,
    pub(crate) order_failed: u8,
}

/// Counters any thread bumps (relaxed `inc`: statistics, ordered with nothing).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) migrate_scanned: Counter,
    pub(crate) free_scanned: Counter,
    pub(crate) isolated: Counter,
    pub(crate) stall: Counter,
    pub(crate) fail: Counter,
    pub(crate) success: Counter,
    pub(crate) migrated: Counter,
    pub(crate) refused: Counter,
}

/// The allocator's compaction state: one entry per zone, the registered migrator,
/// the tunables and the counters.
pub(crate) struct CompactState {
    pub(crate) zones: Box<[TryLock<ZoneCompact>]>,
    pub(crate) migrator: Lock<Option<Arc<dyn Migrate>>>,
    /// `extfrag_threshold` (relaxed: a tunable read once per decision).
    pub(crate) extfrag_threshold: AtomicU32,
    /// `compaction_proactiveness` (relaxed, as above).
    pub(crate) proactiveness: AtomicU32,
    pub(crate) counters: Counters,
    /// Migration callbacks running now, any thread's (see `hook::InCallback`).
    pub(crate) callbacks: AtomicU32,
}

impl CompactState {
    /// State for `zones`, scanners at the zone edges, nothing deferred.
    pub(crate) fn new(zones: &[Zone]) -> CompactState {
        CompactState {
            zones: zones
                .iter()
                .map(|z| {
                    // Process context only: an interrupt's allocation never
                    // compacts (its GFP cannot block).
                    TryLock::new(
                        ZoneCompact {
                            migrate_pfn: z.start_pfn,
                            free_pfn: last_block(z),
                            skip: (0..z.blocks.len()).map(|_| false).collect(),
                            blockskip_flush: false,
                            considered: 0,
                            defer_shift: 0,
                            order_failed: u8::MAX,
                        },
                        None,
                    )
                })
                .collect(),
            migrator: Lock::new(None, None),
            extfrag_threshold: AtomicU32::new(EXTFRAG_THRESHOLD_DEFAULT),
            proactiveness: AtomicU32::new(COMPACTION_PROACTIVENESS_DEFAULT),
            counters: Counters::default(),
            callbacks: AtomicU32::new(0),
        }
    }
}

/// First frame of the zone's last pageblock (where the free scanner starts).
pub(crate) fn last_block(z: &Zone) -> u64 {
    let pb_nr = z.pageblock_order.nr_pages();
    (z.end_pfn().saturating_sub(1) & !(pb_nr - 1)).max(z.start_pfn & !(pb_nr - 1))
}
