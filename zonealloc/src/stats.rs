//! Statistics in the kernel's own formats, read from counters, not from the lists.
//!
//! Top layer, read-only. `buddyinfo()`, `pagetypeinfo()`, `zoneinfo()` and `vmstat()`
//! return typed values whose `Display` writes `/proc/buddyinfo`, `/proc/pagetypeinfo`,
//! `/proc/zoneinfo` and `/proc/vmstat` byte for byte as Linux lays them out.
//! Public API here: those four, `free_counts`, `zone_events`, `pcp_stats`,
//! `pageblock_migratetype`, the fragmentation indices and `pagetypeinfo_walked`.
//!
//! They are built from the per-(order, migratetype) free-block counters kept on every
//! list add and remove (the per-migratetype counts proposed for Linux in 2025), so
//! they cost O(zones x orders x types)
//! and do not walk a list. Each zone's counters are read inside its sequence
//! counter's read section and re-read if a writer overlapped, so a snapshot is never
//! torn by a concurrent merge; a zone whose lock is held so much of the time that
//! `SNAPSHOT_TRIES` tries all overlap a write is read under its lock instead, in one
//! short hold, so that a reader's retries are bounded. Linux's way, walking the lists
//! under the zone lock, is kept as `pagetypeinfo_walked()`: a validator, and the
//! benchmark's "before".

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::sync::{spin_hint, Ordering};
use crate::types::Wmark;
use crate::types::{Migratetype, Order, ZoneId, ZoneType, MAX_NR_ZONES, MIGRATE_TYPES};
use crate::zone::Zone;

/// Linux caps each pagetypeinfo list walk at this many entries.
pub const PAGETYPEINFO_WALK_CAP: u64 = 100_000;

/// A consistent copy of one zone's free-list counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneFreeCounts {
    /// The zone.
    pub id: ZoneId,
    /// Free blocks per order (index) and migratetype (inner index).
    pub nr_free: Vec<[u64; MIGRATE_TYPES]>,
    /// Counted pageblocks per migratetype.
    pub nr_blocks: [u64; MIGRATE_TYPES],
    /// Free pages, isolated ones excluded (`NR_FREE_PAGES`).
    pub nr_free_pages: u64,
    /// Free pages in blocks of at least pageblock order (`NR_FREE_PAGES_BLOCKS`).
    pub nr_free_pages_blocks: u64,
    /// Free pages on HighAtomic lists.
    pub nr_free_highatomic: u64,
    /// Free pages on CMA lists (`NR_FREE_CMA_PAGES`).
    pub nr_free_cma: u64,
    /// Pages reserved as HighAtomic pageblocks.
    pub nr_reserved_highatomic: u64,
}

impl ZoneFreeCounts {
    /// Free blocks of `order`, every type; 0 for an order above the zone's
    /// `max_order` (no block of it can exist).
    pub fn blocks_at(&self, order: usize) -> u64 {
        self.nr_free.get(order).map_or(0, |row| row.iter().sum())
    }
}

/// Tries a statistics read (`buddyinfo()`, `pagetypeinfo()`, `zoneinfo()`,
/// `free_counts()` and the fragmentation indices) makes per zone inside the zone's
/// sequence-counter read section before it reads under the zone lock instead. A
/// try ends at once if a write is in progress, and the counters' loads take well
/// under a microsecond, so an idle or lightly used zone answers on the first try;
/// beside a thread that holds the zone lock nearly all the time, tries alone could
/// go on for as long as that lasts.
pub const SNAPSHOT_TRIES: u32 = 64;

/// Reads a zone's counters inside a sequence-counter read section, or, after
/// `SNAPSHOT_TRIES` tries that a write overlapped, under the zone lock (one short
/// hold, which no writer can overlap): a consistent copy either way, after a
/// bounded number of tries. Call it with no lock of the zone's held.
pub(crate) fn snapshot(z: &Zone) -> ZoneFreeCounts {
    for _ in 0..SNAPSHOT_TRIES {
        if let Some(s) = z.seq.try_read_begin() {
            let snap = read_counters(z);
            if !z.seq.read_retry(s) {
                return snap;
            }
        }
        spin_hint();
    }
    let held = z.lock();
    let snap = read_counters(z);
    drop(held);
    snap
}

/// The zone's counters as they are now (consistent only inside a read section or
/// under the zone lock).
fn read_counters(z: &Zone) -> ZoneFreeCounts {
    let c = &z.counters;
    let orders = z.max_order.idx() + 1;
    ZoneFreeCounts {
        id: z.id,
        nr_free: (0..orders)
            .map(|o| core::array::from_fn(|mt| c.nr_free[o][mt].get()))
            .collect(),
        nr_blocks: core::array::from_fn(|mt| c.nr_blocks[mt].get()),
        nr_free_pages: c.nr_free_pages.get(),
        nr_free_pages_blocks: c.nr_free_pages_blocks.get(),
        nr_free_highatomic: c.nr_free_highatomic.get(),
        nr_free_cma: c.nr_free_cma.get(),
        nr_reserved_highatomic: c.nr_reserved_highatomic.get(),
    }
}

/// `/proc/buddyinfo`: free blocks per order for each populated zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuddyInfo {
    /// One entry per populated zone: the zone and its free blocks per order.
    pub zones: Vec<(ZoneId, Vec<u64>)>,
}

impl fmt::Display for BuddyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (id, counts) in &self.zones {
            write!(f, "Node {}, zone {:>8} ", id.node, id.zone_type.name())?;
            for c in counts {
                write!(f, "{c:>6} ")?;
            }
            f.write_char('\n')?;
        }
        Ok(())
    }
}

/// `/proc/pagetypeinfo`: free blocks per order and migratetype, pageblocks per type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageTypeInfo {
    /// `pageblock_order`.
    pub pageblock_order: Order,
    /// One entry per populated zone.
    pub zones: Vec<ZoneFreeCounts>,
    /// Counts that hit Linux's walk cap (only from `pagetypeinfo_walked`): printed
    /// with a `>` prefix.
    pub capped: Vec<(usize, usize, usize)>,
    /// Print the `CMA` row and column, as a kernel built with CMA does: set where
    /// the allocator has a CMA area.
    pub cma: bool,
}

impl PageTypeInfo {
    /// The migratetypes printed, in the kernel's order.
    pub fn types(&self) -> impl Iterator<Item = Migratetype> + '_ {
        Migratetype::ALL
            .into_iter()
            .filter(|&mt| self.cma || mt != Migratetype::Cma)
    }
}

impl fmt::Display for PageTypeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let orders = self.zones.first().map_or(0, |z| z.nr_free.len());
        writeln!(f, "Page block order: {}", self.pageblock_order.0)?;
        writeln!(f, "Pages per block:  {}", self.pageblock_order.nr_pages())?;
        writeln!(f)?;
        write!(f, "{:<43} ", "Free pages count per migrate type at order")?;
        for o in 0..orders {
            write!(f, "{o:>6} ")?;
        }
        writeln!(f)?;
        for (zi, z) in self.zones.iter().enumerate() {
            for mt in self.types() {
                write!(
                    f,
                    "Node {:>4}, zone {:>8}, type {:>12} ",
                    z.id.node,
                    z.id.zone_type.name(),
                    mt.name()
                )?;
                for (o, counts) in z.nr_free.iter().enumerate() {
                    let capped = self.capped.contains(&(zi, o, mt.idx()));
                    write!(
                        f,
                        "{}{:>6} ",
                        if capped { ">" } else { "" },
                        counts[mt.idx()]
                    )?;
                }
                writeln!(f)?;
            }
        }
        write!(f, "\n{:<23}", "Number of blocks type ")?;
        for mt in self.types() {
            write!(f, "{:>12} ", mt.name())?;
        }
        writeln!(f)?;
        for z in &self.zones {
            write!(f, "Node {}, zone {:>8} ", z.id.node, z.id.zone_type.name())?;
            for mt in self.types() {
                write!(f, "{:>12} ", z.nr_blocks[mt.idx()])?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// One CPU's per-CPU list figures in `/proc/zoneinfo`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PagesetInfo {
    /// CPU number.
    pub cpu: usize,
    /// Pages on the CPU's lists.
    pub count: u64,
    /// Current high mark.
    pub high: u64,
    /// Refill and drain batch.
    pub batch: u64,
    /// Lower bound of the auto-tuned high mark.
    pub high_min: u64,
    /// Upper bound of the auto-tuned high mark.
    pub high_max: u64,
    /// vmstat threshold (per-CPU counter fold threshold).
    pub stat_threshold: u64,
}

/// A zone's event counters (exact totals; read without locks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneEventCounts {
    /// The zone.
    pub id: ZoneId,
    /// Pages allocated (`pgalloc_<zone>`).
    pub pgalloc: u64,
    /// Pages freed into the allocator (`pgfree`).
    pub pgfree: u64,
    /// Allocations that took memory from another migratetype's lists (each one a
    /// `mm_page_alloc_extfrag` event in Linux).
    pub fallbacks: u64,
    /// Fallbacks that claimed a whole pageblock for the requesting type.
    pub pageblocks_claimed: u64,
    /// Pageblocks turned into HighAtomic reserves.
    pub highatomic_reserved: u64,
    /// HighAtomic reserves given back.
    pub highatomic_unreserved: u64,
    /// Zone skipped by an allocation because it was below the watermark.
    pub watermark_failures: u64,
}

/// One CPU's per-CPU list activity in one zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PcpCpuStats {
    /// Pages on the CPU's lists now.
    pub count: u64,
    /// Pages allocated from the lists.
    pub pgalloc: u64,
    /// Pages freed to the lists.
    pub pgfree: u64,
    /// Refills from the buddy lists (`rmqueue_bulk` calls).
    pub refills: u64,
    /// Blocks taken by refills (Linux traces each as `mm_page_alloc_zone_locked`
    /// with `percpu_refill=1`).
    pub refill_blocks: u64,
    /// Flushes to the buddy lists (`free_pcppages_bulk` calls).
    pub drains: u64,
    /// Blocks flushed (each a `mm_page_pcpu_drain` event in Linux).
    pub drain_blocks: u64,
    /// `refill_blocks` per list order (`pcp_order_slot`): orders 0 to 3
    /// (`PAGE_ALLOC_COSTLY_ORDER`), then the pageblock order.
    pub refill_blocks_by_order: [u64; crate::pcp::PCP_ORDER_SLOTS],
    /// `drain_blocks` per list order, as `refill_blocks_by_order`.
    pub drain_blocks_by_order: [u64; crate::pcp::PCP_ORDER_SLOTS],
}

/// Per-CPU list activity of one zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcpStatsZone {
    /// The zone.
    pub id: ZoneId,
    /// One entry per CPU.
    pub cpus: Vec<PcpCpuStats>,
}

/// One zone of `/proc/zoneinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneInfoZone {
    /// The zone.
    pub id: ZoneId,
    /// Free pages (`pages free`).
    pub free: u64,
    /// Watermark boost (`watermark_boost`; 0 unless `Config::watermark_boost_factor`
    /// is set, see `reclaim`).
    pub boost: u64,
    /// `[min, low, high, promo]` watermarks, the boost included (Linux's
    /// `wmark_pages()`).
    pub watermarks: [u64; 4],
    /// Spanned frames, holes included.
    pub spanned: u64,
    /// Present frames.
    pub present: u64,
    /// Managed frames.
    pub managed: u64,
    /// Frames of CMA areas (`cma`).
    pub cma: u64,
    /// `lowmem_reserve[]` ("protection").
    pub protection: [u64; MAX_NR_ZONES],
    /// Zone counters printed as `nr_*` lines, in Linux's order.
    pub counters: Vec<(&'static str, u64)>,
    /// Per-CPU list figures.
    pub pagesets: Vec<PagesetInfo>,
    /// First frame.
    pub start_pfn: u64,
}

/// `/proc/zoneinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneInfo {
    /// Every zone, populated or not, node by node.
    pub zones: Vec<ZoneInfoZone>,
}

impl fmt::Display for ZoneInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in &self.zones {
            write!(f, "Node {}, zone {:>8}", z.id.node, z.id.zone_type.name())?;
            write!(f, "\n  pages free     {}", z.free)?;
            write!(f, "\n        boost    {}", z.boost)?;
            write!(f, "\n        min      {}", z.watermarks[0])?;
            write!(f, "\n        low      {}", z.watermarks[1])?;
            write!(f, "\n        high     {}", z.watermarks[2])?;
            write!(f, "\n        promo    {}", z.watermarks[3])?;
            write!(f, "\n        spanned  {}", z.spanned)?;
            write!(f, "\n        present  {}", z.present)?;
            write!(f, "\n        managed  {}", z.managed)?;
            write!(f, "\n        cma      {}", z.cma)?;
            write!(f, "\n        protection: ({}", z.protection[0])?;
            for p in &z.protection[1..] {
                write!(f, ", {p}")?;
            }
            f.write_char(')')?;
            if z.present == 0 {
                f.write_char('\n')?;
                continue;
            }
            for (name, v) in &z.counters {
                write!(f, "\n      {name:<12} {v}")?;
            }
            write!(f, "\n  pagesets")?;
            for p in &z.pagesets {
                write!(f, "\n    cpu: {}", p.cpu)?;
                write!(f, "\n              count:    {}", p.count)?;
                write!(f, "\n              high:     {}", p.high)?;
                write!(f, "\n              batch:    {}", p.batch)?;
                write!(f, "\n              high_min: {}", p.high_min)?;
                write!(f, "\n              high_max: {}", p.high_max)?;
                write!(f, "\n  vm stats threshold: {}", p.stat_threshold)?;
            }
            write!(f, "\n  node_unreclaimable:  {}", 0)?;
            write!(f, "\n  start_pfn:           {}", z.start_pfn)?;
            f.write_char('\n')?;
        }
        Ok(())
    }
}

/// `/proc/vmstat`: `name value` lines, the kernel's names in the kernel's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmStat {
    /// The counters.
    pub entries: Vec<(String, u64)>,
}

impl VmStat {
    /// The value of counter `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.entries.iter().find(|(n, _)| n == name).map(|e| e.1)
    }
}

impl fmt::Display for VmStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, v) in &self.entries {
            writeln!(f, "{n} {v}")?;
        }
        Ok(())
    }
}

/// Fragmentation indices per order (debugfs `extfrag/unusable_index` and
/// `extfrag/extfrag_index`), in thousandths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentationIndex {
    /// One entry per populated zone: the zone and its index per order.
    pub zones: Vec<(ZoneId, Vec<i64>)>,
    /// Whether this is the extfrag index (printed `%2d.%03d`) rather than the
    /// unusable free space index (`%d.%03d`).
    pub extfrag: bool,
}

impl fmt::Display for FragmentationIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (id, idx) in &self.zones {
            write!(f, "Node {}, zone {:>8} ", id.node, id.zone_type.name())?;
            for &i in idx {
                // Linux prints index / 1000 and index % 1000 with C's truncating
                // division and remainder, as Rust's are: -1000 reads "-1.000" and
                // -500 reads " 0.-500", signs and all.
                if self.extfrag {
                    write!(f, "{:>2}.{:03} ", i / 1000, i % 1000)?;
                } else {
                    write!(f, "{}.{:03} ", i / 1000, i % 1000)?;
                }
            }
            f.write_char('\n')?;
        }
        Ok(())
    }
}

// The indices are arithmetic on free-block counts, shared with compaction's
// suitability check: they live in `fragindex`, below both.
pub use crate::fragindex::{fragmentation_index, unusable_free_index};

impl<B: Backend> ZoneAllocator<B> {
    fn populated(&self) -> impl Iterator<Item = &Zone> {
        self.zones.iter().filter(|z| z.present > 0)
    }

    /// A consistent copy of every populated zone's free-list counters, lock-free.
    pub fn free_counts(&self) -> Vec<ZoneFreeCounts> {
        self.populated().map(snapshot).collect()
    }

    /// `/proc/buddyinfo`, from the counters (see `snapshot`).
    pub fn buddyinfo(&self) -> BuddyInfo {
        BuddyInfo {
            zones: self
                .populated()
                .map(|z| {
                    let s = snapshot(z);
                    let per_order = (0..s.nr_free.len()).map(|o| s.blocks_at(o)).collect();
                    (z.id, per_order)
                })
                .collect(),
        }
    }

    /// `/proc/pagetypeinfo`, from the counters: O(zones x orders x types), without
    /// the zone lock unless the zone is too busy for a lock-free read (see
    /// `snapshot`).
    pub fn pagetypeinfo(&self) -> PageTypeInfo {
        PageTypeInfo {
            pageblock_order: self.config.pageblock_order,
            zones: self.free_counts(),
            capped: Vec::new(),
            cma: self.cma.enabled(),
        }
    }

    /// `/proc/pagetypeinfo` the way Linux builds it: walking every free list under
    /// the zone lock, one order per lock hold, each walk capped at 100,000 entries;
    /// pageblocks counted by reading every block's type. Cost: O(free blocks +
    /// pageblocks), with the zone lock held. Kept as a validator of the counters and
    /// as the "before" of the `pagetypeinfo` benchmark (Linux's way).
    pub fn pagetypeinfo_walked(&self) -> PageTypeInfo {
        let mut zones = Vec::new();
        let mut capped = Vec::new();
        for (zi, z) in self.populated().enumerate() {
            let orders = z.max_order.idx() + 1;
            let mut nr_free = alloc::vec![[0u64; MIGRATE_TYPES]; orders];
            for (o, row) in nr_free.iter_mut().enumerate() {
                let zl = z.lock();
                for mt in 0..MIGRATE_TYPES {
                    let mut n = 0;
                    for _ in zl.area.lists[o][mt].iter(&z.frames) {
                        n += 1;
                        if n >= PAGETYPEINFO_WALK_CAP {
                            capped.push((zi, o, mt));
                            break;
                        }
                    }
                    row[mt] = n;
                }
            }
            let mut nr_blocks = [0u64; MIGRATE_TYPES];
            let pb_nr = z.pageblock_order.nr_pages();
            let mut p = z.start_pfn;
            while p < z.end_pfn() {
                let pfn = crate::types::Pfn(p);
                if z.frames.word(z.idx(pfn)).tag() != crate::frame::Tag::Hole {
                    nr_blocks[z.blocks.migratetype(pfn).idx()] += 1;
                }
                p += pb_nr;
            }
            let s = snapshot(z);
            zones.push(ZoneFreeCounts {
                nr_free,
                nr_blocks,
                ..s
            });
        }
        PageTypeInfo {
            pageblock_order: self.config.pageblock_order,
            zones,
            capped,
            cma: self.cma.enabled(),
        }
    }

    /// `/proc/zoneinfo` for every zone, populated or not.
    pub fn zoneinfo(&self) -> ZoneInfo {
        ZoneInfo {
            zones: self
                .zones
                .iter()
                .map(|z| {
                    let s = snapshot(z);
                    ZoneInfoZone {
                        id: z.id,
                        free: s.nr_free_pages,
                        boost: z.watermark_boost.load(Ordering::Relaxed),
                        watermarks: [
                            z.wmark(Wmark::Min),
                            z.wmark(Wmark::Low),
                            z.wmark(Wmark::High),
                            z.wmark(Wmark::Promo),
                        ],
                        spanned: z.spanned,
                        present: z.present_now(),
                        managed: z.managed_now(),
                        cma: z.cma_pages,
                        protection: core::array::from_fn(|j| {
                            z.lowmem_reserve[j].load(Ordering::Relaxed)
                        }),
                        counters: alloc::vec![
                            ("nr_free_pages", s.nr_free_pages),
                            ("nr_free_pages_blocks", s.nr_free_pages_blocks),
                            ("nr_free_cma", s.nr_free_cma),
                        ],
                        pagesets: self.pagesets(z),
                        start_pfn: z.start_pfn,
                    }
                })
                .collect(),
        }
    }

    /// Per-CPU list figures of a zone, read under each CPU's pcp lock in turn.
    fn pagesets(&self, z: &Zone) -> Vec<PagesetInfo> {
        (0..z.pcp.len())
            .map(|cpu| {
                let p = z.pcp_lock_lists(cpu);
                // Pinned stacks keep running: their blocks are read where they are.
                let pinned = if z.stacks.mode() == crate::stacks::Mode::Pinned {
                    crate::fast::stack_pages(z, cpu)
                } else {
                    0
                };
                PagesetInfo {
                    cpu,
                    // The lists (the stacks moved onto them by the lock, or
                    // pinned and read as they are) and the `LocalCache`s refilled
                    // from them.
                    count: p.pcp.count + pinned + self.cached_pages_of(z, cpu),
                    high: p.pcp.high,
                    batch: p.pcp.batch,
                    high_min: p.pcp.high_min,
                    high_max: p.pcp.high_max,
                    // Per-CPU counters here are exact and never folded: no threshold.
                    stat_threshold: 0,
                }
            })
            .collect()
    }

    /// The effective migratetype of the pageblock holding `pfn` (`Isolate` while
    /// isolated), or `None` if `pfn` is in no zone. Lock-free; may be a moment stale.
    pub fn pageblock_migratetype(&self, pfn: crate::types::Pfn) -> Option<Migratetype> {
        let z = self.zone_of(pfn)?;
        Some(z.blocks.migratetype(pfn))
    }

    /// Event counters of every populated zone, per-CPU list activity included.
    pub fn zone_events(&self) -> Vec<ZoneEventCounts> {
        let ev = |c: &crate::counter::Counter| c.get();
        self.populated()
            .map(|z| {
                let e = &z.events;
                let (pcp_alloc, pcp_free) = pcp_events(z);
                ZoneEventCounts {
                    id: z.id,
                    pgalloc: ev(&e.pgalloc) + pcp_alloc,
                    pgfree: ev(&e.pgfree) + pcp_free,
                    fallbacks: ev(&e.extfrag),
                    pageblocks_claimed: ev(&e.claims),
                    highatomic_reserved: ev(&e.highatomic_reserve),
                    highatomic_unreserved: ev(&e.highatomic_unreserve),
                    watermark_failures: ev(&e.wmark_fail),
                }
            })
            .collect()
    }

    /// Per-CPU list activity of every zone and CPU.
    pub fn pcp_stats(&self) -> Vec<PcpStatsZone> {
        self.zones
            .iter()
            .filter(|z| z.present > 0)
            .map(|z| PcpStatsZone {
                id: z.id,
                cpus: z
                    .pcp
                    .iter()
                    .enumerate()
                    .map(|(cpu, s)| PcpCpuStats {
                        count: s.stats.count.get() + crate::fast::stack_pages(z, cpu),
                        pgalloc: s.stats.pgalloc.get() + crate::fast::stack_events(z, cpu).0,
                        pgfree: s.stats.pgfree.get() + crate::fast::stack_events(z, cpu).1,
                        refills: s.stats.refills.get(),
                        refill_blocks: s.stats.refill_blocks.get(),
                        drains: s.stats.drains.get(),
                        drain_blocks: s.stats.drain_blocks.get(),
                        refill_blocks_by_order: s
                            .stats
                            .refill_blocks_by_order
                            .each_ref()
                            .map(|c| c.get()),
                        drain_blocks_by_order: s
                            .stats
                            .drain_blocks_by_order
                            .each_ref()
                            .map(|c| c.get()),
                    })
                    .collect(),
            })
            .collect()
    }

    /// `/proc/vmstat`: the counters this allocator keeps, under the kernel's names.
    pub fn vmstat(&self) -> VmStat {
        let mut free = 0;
        let mut blocks = 0;
        let mut cma = 0;
        let mut pgalloc = [0u64; MAX_NR_ZONES];
        let mut pgfree = 0;
        for z in self.zones.iter() {
            let s = snapshot(z);
            free += s.nr_free_pages;
            blocks += s.nr_free_pages_blocks;
            cma += s.nr_free_cma;
            let (pcp_alloc, pcp_free) = pcp_events(z);
            pgalloc[z.zone_type().idx()] += z.events.pgalloc.get() + pcp_alloc;
            pgfree += z.events.pgfree.get() + pcp_free;
        }
        let mut entries: Vec<(String, u64)> = alloc::vec![
            ("nr_free_pages".into(), free),
            ("nr_free_pages_blocks".into(), blocks),
            ("nr_free_cma".into(), cma),
        ];
        let present = |t: ZoneType| self.zones.iter().any(|z| z.zone_type() == t);
        for t in ZoneType::ALL.into_iter().filter(|&t| present(t)) {
            entries.push((
                alloc::format!("pgalloc_{}", t.vmstat_name()),
                pgalloc[t.idx()],
            ));
        }
        let r = &self.reclaim;
        for t in ZoneType::ALL.into_iter().filter(|&t| present(t)) {
            entries.push((
                alloc::format!("allocstall_{}", t.vmstat_name()),
                r.allocstall[t.idx()].get(),
            ));
        }
        entries.push(("pgfree".into(), pgfree));
        for (name, v) in [
            ("pgsteal_kswapd", &r.pgsteal_kswapd),
            ("pgsteal_direct", &r.pgsteal_direct),
            ("pgscan_kswapd", &r.pgscan_kswapd),
            ("pgscan_direct", &r.pgscan_direct),
            ("slabs_scanned", &r.shrinkers.scanned),
            ("kswapd_low_wmark_hit_quickly", &r.low_wmark_hit_quickly),
            ("kswapd_high_wmark_hit_quickly", &r.high_wmark_hit_quickly),
            ("pageoutrun", &r.pageoutrun),
        ] {
            entries.push((name.into(), v.get()));
        }
        let c = self.compaction_stats();
        for (name, v) in [
            ("pgmigrate_success", c.pgmigrate_success),
            ("pgmigrate_fail", c.pgmigrate_fail),
            ("compact_migrate_scanned", c.compact_migrate_scanned),
            ("compact_free_scanned", c.compact_free_scanned),
            ("compact_isolated", c.compact_isolated),
            ("compact_stall", c.compact_stall),
            ("compact_fail", c.compact_fail),
            ("compact_success", c.compact_success),
            ("compact_daemon_wake", r.compact_daemon_wake.get()),
        ] {
            entries.push((name.into(), v));
        }
        // A kernel built with CMA prints these after the compaction and hugetlb
        // events.
        if self.cma.enabled() {
            entries.push(("cma_alloc_success".into(), self.cma.alloc_success.get()));
            entries.push(("cma_alloc_fail".into(), self.cma.alloc_fail.get()));
        }
        VmStat { entries }
    }

    /// Unusable free space index per order for every populated zone.
    pub fn unusable_index(&self) -> FragmentationIndex {
        self.frag_index(false)
    }

    /// Extfrag (fragmentation) index per order for every populated zone.
    pub fn extfrag_index(&self) -> FragmentationIndex {
        self.frag_index(true)
    }

    fn frag_index(&self, extfrag: bool) -> FragmentationIndex {
        FragmentationIndex {
            extfrag,
            zones: self
                .populated()
                .map(|z| {
                    let s = snapshot(z);
                    let per_order: Vec<u64> =
                        (0..s.nr_free.len()).map(|o| s.blocks_at(o)).collect();
                    let idx = (0..per_order.len())
                        .map(|o| {
                            if extfrag {
                                fragmentation_index(&per_order, o)
                            } else {
                                unusable_free_index(&per_order, o)
                            }
                        })
                        .collect();
                    (z.id, idx)
                })
                .collect(),
        }
    }
}

/// Pages allocated and freed through a zone's per-CPU lists and stacks, all CPUs.
fn pcp_events(z: &Zone) -> (u64, u64) {
    (0..z.pcp.len()).fold((0, 0), |(a, f), cpu| {
        let s = &z.pcp[cpu].stats;
        let (sa, sf) = crate::fast::stack_events(z, cpu);
        (a + s.pgalloc.get() + sa, f + s.pgfree.get() + sf)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A write section that never closes (the sequence left odd, as a writer
    /// stopped inside its lock hold would leave it) makes every lock-free try
    /// fail: the snapshot then reads under the zone lock, which is free here,
    /// and returns the same counters, where a reader that only retried would
    /// wait for ever.
    #[test]
    fn a_snapshot_beside_a_write_that_never_ends_reads_under_the_lock() {
        let za: ZoneAllocator = ZoneAllocator::new(Config {
            nr_cpus: 1,
            min_free_kbytes: Some(0),
            max_order: Order(7),
            pageblock_order: Order(5),
            ..Config::with_bytes(1 << 20)
        })
        .unwrap();
        let z = &za.zones[0];
        let before = snapshot(z);
        z.seq.write_begin();
        assert_eq!(z.seq.try_read_begin(), None);
        let during = snapshot(z);
        z.seq.write_end();
        assert_eq!(during, before);
        assert!(z.seq.try_read_begin().is_some());
        assert_eq!(snapshot(z), before);
    }
}
