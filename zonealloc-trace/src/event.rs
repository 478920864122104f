//! The trace's vocabulary: one compact `Record` per kernel tracepoint hit.
//!
//! Bottom layer, plain data. The parser (`parse`) produces records, the reader
//! (`reader`) streams them, the replay (`replay`) consumes them. A record is at most 48 bytes,
//! so a parsed chunk of a million events costs 48 MB and the timed replay loop reads
//! memory, not text.

use serde::Serialize;
use zonealloc::{Gfp, Migratetype};

/// The six page-allocator tracepoints of `include/trace/events/kmem.h` that a replay
/// understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum EventKind {
    /// `mm_page_alloc`: a block handed out by `__alloc_pages()`.
    Alloc,
    /// `mm_page_free`: a block returned (every free, batched or not).
    Free,
    /// `mm_page_free_batched`: emitted *in addition to* `mm_page_free` by the batched
    /// release path; not a second free.
    FreeBatched,
    /// `mm_page_alloc_zone_locked`: a block taken from the buddy lists under the zone
    /// lock (`percpu_refill=1`: to refill a per-CPU list).
    AllocZoneLocked,
    /// `mm_page_pcpu_drain`: a block flushed from a per-CPU list to the buddy lists.
    PcpuDrain,
    /// `mm_page_alloc_extfrag`: a fallback that took memory of another migratetype.
    AllocExtfrag,
}

impl EventKind {
    /// Every kind, in the order reports print them.
    pub const ALL: [EventKind; 6] = [
        EventKind::Alloc,
        EventKind::Free,
        EventKind::FreeBatched,
        EventKind::AllocZoneLocked,
        EventKind::PcpuDrain,
        EventKind::AllocExtfrag,
    ];

    /// The tracepoint's name (`mm_page_alloc`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "mm_page_alloc",
            EventKind::Free => "mm_page_free",
            EventKind::FreeBatched => "mm_page_free_batched",
            EventKind::AllocZoneLocked => "mm_page_alloc_zone_locked",
            EventKind::PcpuDrain => "mm_page_pcpu_drain",
            EventKind::AllocExtfrag => "mm_page_alloc_extfrag",
        }
    }

    /// The kind named `name` (without the `kmem:` system prefix).
    pub fn from_name(name: &[u8]) -> Option<EventKind> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.name().as_bytes() == name)
    }

    /// Index into per-kind tables.
    pub const fn idx(self) -> usize {
        self as usize
    }
}

/// One tracepoint hit's payload. Frame numbers are the traced machine's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `mm_page_alloc`.
    Alloc {
        /// First frame of the block; `None` when the kernel's allocation failed
        /// (`pfn=0xffffffffffffffff`, `page=(nil)`).
        pfn: Option<u64>,
        /// Order of the block.
        order: u8,
        /// `gfp_flags`, as far as zonealloc has the flags (see `gfp_names`).
        gfp: Gfp,
        /// The `migratetype` field; `None` for -1 (unknown) or an unknown value.
        migratetype: Option<Migratetype>,
    },
    /// `mm_page_free`.
    Free {
        /// First frame of the block.
        pfn: u64,
        /// Order of the block.
        order: u8,
    },
    /// `mm_page_free_batched` (the same free as a preceding `mm_page_free`).
    FreeBatched {
        /// First frame of the block.
        pfn: u64,
        /// Order of the block (0 in kernels that do not print it).
        order: u8,
    },
    /// `mm_page_alloc_zone_locked`.
    AllocZoneLocked {
        /// First frame of the block.
        pfn: u64,
        /// Order of the block.
        order: u8,
        /// Its migratetype.
        migratetype: Option<Migratetype>,
        /// Taken to refill a per-CPU list.
        percpu_refill: bool,
    },
    /// `mm_page_pcpu_drain`.
    PcpuDrain {
        /// First frame of the block.
        pfn: u64,
        /// Order of the block.
        order: u8,
        /// Its migratetype.
        migratetype: Option<Migratetype>,
    },
    /// `mm_page_alloc_extfrag`.
    AllocExtfrag {
        /// First frame of the block taken.
        pfn: u64,
        /// Order asked for.
        alloc_order: u8,
        /// Order of the foreign block that was split.
        fallback_order: u8,
        /// Type asked for.
        alloc_migratetype: Option<Migratetype>,
        /// Type the memory was taken from.
        fallback_migratetype: Option<Migratetype>,
        /// The pageblock changed owner (claimed).
        change_ownership: bool,
    },
}

impl Event {
    /// The first frame the event names (`None` for a failed allocation).
    pub const fn pfn(&self) -> Option<u64> {
        match *self {
            Event::Alloc { pfn, .. } => pfn,
            Event::Free { pfn, .. }
            | Event::FreeBatched { pfn, .. }
            | Event::AllocZoneLocked { pfn, .. }
            | Event::PcpuDrain { pfn, .. }
            | Event::AllocExtfrag { pfn, .. } => Some(pfn),
        }
    }

    /// The tracepoint this payload came from.
    pub const fn kind(&self) -> EventKind {
        match self {
            Event::Alloc { .. } => EventKind::Alloc,
            Event::Free { .. } => EventKind::Free,
            Event::FreeBatched { .. } => EventKind::FreeBatched,
            Event::AllocZoneLocked { .. } => EventKind::AllocZoneLocked,
            Event::PcpuDrain { .. } => EventKind::PcpuDrain,
            Event::AllocExtfrag { .. } => EventKind::AllocExtfrag,
        }
    }
}

/// One event as it stands in the trace: where (CPU), when, what, and its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Line number in the trace file, from 1.
    pub line: u64,
    /// The `[CPU]` field.
    pub cpu: u32,
    /// The timestamp, in nanoseconds.
    pub time_ns: u64,
    /// The payload.
    pub event: Event,
}

/// Events per kind: `counts[EventKind::idx()]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts(pub [u64; 6]);

impl EventCounts {
    /// Counts one event of `kind`.
    #[inline]
    pub fn add(&mut self, kind: EventKind) {
        self.0[kind.idx()] += 1;
    }

    /// Events of `kind`.
    pub fn get(&self, kind: EventKind) -> u64 {
        self.0[kind.idx()]
    }

    /// Events of every kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl Serialize for EventCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(6))?;
        for k in EventKind::ALL {
            m.serialize_entry(k.name(), &self.get(k))?;
        }
        m.end()
    }
}

/// The kernel's migratetype numbering (`enum migratetype` without CMA): 0 unmovable,
/// 1 movable, 2 reclaimable, 3 highatomic; anything else (-1, CMA, isolate) is `None`.
pub fn migratetype_from_kernel(v: i64) -> Option<Migratetype> {
    match v {
        0 => Some(Migratetype::Unmovable),
        1 => Some(Migratetype::Movable),
        2 => Some(Migratetype::Reclaimable),
        3 => Some(Migratetype::HighAtomic),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_compact() {
        assert!(core::mem::size_of::<Record>() <= 48);
    }

    #[test]
    fn kinds_round_trip_through_names() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_name(k.name().as_bytes()), Some(k));
        }
        assert_eq!(EventKind::from_name(b"mm_page_alloc_foo"), None);
    }
}
