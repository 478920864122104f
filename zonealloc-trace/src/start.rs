//! The warm start from the kernel's own layout: zonealloc put into the state the
//! traced kernel was in when its trace started.
//!
//! Middle layer: reads `kpage` (the frames), `kstate` (pagetypeinfo's counts), the
//! zoneinfo `layout` and the trace's first records; drives a `ZoneAllocator`
//! through its public API only. `replay` calls `StartPlan::infer` and then
//! `StartPlan::apply` before the first record.
//!
//! # What is exact and what is inferred
//!
//! | part | how | exact? |
//! |---|---|---|
//! | zones, holes, reserved frames | zoneinfo's spans; frames flagged `NOPAGE`, `OFFLINE`, `RESERVED`, and the zone's `spanned - present` frames at its end | exact |
//! | memory not initialised yet | a lazily initialised zone reads as zeros past its initialised part: offline at the start, brought online when the trace frees it (the kernel's deferred initialisation frees it as max-order blocks) | exact to a section |
//! | free buddy blocks | every `BUDDY` frame, split into the largest aligned blocks (`kpage`) | exact, as far as the snapshot is consistent |
//! | which frames are allocated | every other frame of the zone | exact |
//! | their blocks' orders | not in the layout; a pre-trace free names its order, and is replayed at it | from the trace |
//! | per-CPU list pages | blank frames the trace allocates, or flushes, on a CPU before it frees or refills them were on that CPU's lists; their order is the event's | inferred, exact for what the trace uses |
//! | their place on the list | allocated ones at the head in the order used, flushed ones at the tail in the order flushed | inferred |
//! | pageblock types | the type the trace names for a block (refills and flushes name the block's type, a fallback names the type it took from), nearest the start; the other blocks by what their pages hold, to pagetypeinfo's counts | named: exact; the rest inferred |
//! | free-list order | not in the layout: the free blocks are freed in a fixed shuffled order | not known |
//!
//! # Putting zonealloc into that state
//!
//! Only the public API:
//! 1. zonealloc is built with the kernel's zones (real start frames and spans), the
//!    absent frames as holes and the kernel's `min_free_kbytes`; the frames not
//!    initialised yet are taken offline (`offline_pages`).
//! 2. Every managed frame is allocated (`alloc_contig_range`, in runs between
//!    holes): zonealloc now holds the whole zone, as order-0 pages.
//! 3. Each pageblock of another type than movable is given its type the way Linux
//!    gives it: its frames are freed (the only free memory of the zone), and an
//!    allocation of that type with `__GFP_MEMALLOC` falls back to it and claims the
//!    block; the block is then taken again (`alloc_contig_range` keeps the type).
//! 4. The kernel's free blocks are freed (`free_contig_range_on`, one block each,
//!    at its order), and the per-CPU lists drained: they merge exactly where the
//!    kernel's had, since a block never merges with a buddy that is not wholly free.
//! 5. Each CPU's `high` is grown toward the kernel's (allocating order-0 pages
//!    refills the lists, and each refill raises `high`, as in Linux), the lists are
//!    drained, and the per-CPU list pages the trace told are freed onto them in
//!    order: those flushed later first (they go to the tail), those allocated later
//!    last (they end at the head, the first allocated on top).
//!
//! What remains allocated is memory the kernel had allocated: a trace's free of it
//! (a *pre-trace free*) frees exactly those frames, at the order the trace names.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use zonealloc::{
    Config, Gfp, Migratetype, NodeConfig, Order, Pfn, ZoneAllocator, ZoneConfig, ZoneType,
};

use crate::event::{Event, Record};
use crate::kpage::{Census, FrameClass, LayoutZone, PageLayout};
use crate::kstate::{type_index, Shape};
use crate::layout::{ZoneLayout, ZoneSpec};

/// Frames per memory section on x86-64 (128 MiB): a lazily initialised zone grows
/// by whole sections.
pub const SECTION_PAGES: u64 = 32768;

/// Why a warm start from the layout could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartError(pub String);

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// Where a pageblock's type came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TypeSource {
    /// A trace event named it.
    Named,
    /// Inferred from its pages and pagetypeinfo's counts.
    Inferred,
}

/// One zone as the warm start builds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZonePlan {
    /// The zone, as zoneinfo gives it.
    pub spec: ZoneSpec,
    /// Frames that are not the allocator's, `(start, frames)`, ascending.
    pub holes: Vec<(u64, u64)>,
    /// Frames not initialised yet (offline at the start), `(start, frames)`.
    pub uninit: Option<(u64, u64)>,
    /// The free buddy blocks, `(first frame, order)`, ascending.
    pub free_blocks: Vec<(u64, u8)>,
    /// Type of each pageblock of the zone, from the one holding `spec.start_pfn`.
    pub block_types: Vec<Migratetype>,
    /// Where each type came from.
    pub type_source: Vec<TypeSource>,
    /// Frames per class in the initialised part.
    pub census: Census,
}

impl ZonePlan {
    /// The index into `block_types` of the pageblock holding `pfn`.
    pub fn block_index(&self, pfn: u64, pageblock_order: u8) -> usize {
        ((pfn >> pageblock_order) - (self.spec.start_pfn >> pageblock_order)) as usize
    }

    /// Managed frames: not holes, initialised.
    pub fn managed(&self) -> u64 {
        self.spec.spanned
            - self.holes.iter().map(|h| h.1).sum::<u64>()
            - self.uninit.map_or(0, |u| u.1)
    }

    /// The managed runs `(start, frames)` between the holes, up to the
    /// uninitialised part.
    pub fn managed_runs(&self) -> Vec<(u64, u64)> {
        let end = self
            .uninit
            .map_or(self.spec.start_pfn + self.spec.spanned, |u| u.0);
        let mut out = Vec::new();
        let mut p = self.spec.start_pfn;
        for &(h, n) in &self.holes {
            if h > p && p < end {
                out.push((p, h.min(end) - p));
            }
            p = p.max(h + n);
        }
        if p < end {
            out.push((p, end - p));
        }
        out
    }
}

/// One block that sat on a CPU's per-CPU list when the trace started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PcpEntry {
    /// First frame.
    pub pfn: u64,
    /// Order.
    pub order: u8,
}

/// A CPU's per-CPU lists in one zone when the trace started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuLists {
    /// Blocks the trace allocated from the lists, in the order it did (the first
    /// was on top).
    pub head: Vec<PcpEntry>,
    /// Blocks the trace flushed from the lists, in the order it did (the first was
    /// at the bottom).
    pub tail: Vec<PcpEntry>,
    /// Pages zoneinfo counted that the trace never used: frames that are blank
    /// and that no event names, put on the order-0 list of the type this CPU
    /// allocates least (where they sit, as the kernel's did), so that the lists
    /// hold what zoneinfo counted.
    pub fillers: Vec<u64>,
    /// Pages on the lists then, zoneinfo's `count`.
    pub count: u64,
    /// zoneinfo's `high`.
    pub high: u64,
}

impl CpuLists {
    /// Pages the trace told of.
    pub fn told_pages(&self) -> u64 {
        self.head
            .iter()
            .chain(&self.tail)
            .map(|e| 1u64 << e.order)
            .sum()
    }
}

/// Everything the warm start needs, inferred from the files and the trace.
#[derive(Clone, Debug)]
pub struct StartPlan {
    /// Trace time the replay starts at: the end of the layout read.
    pub start_ns: u64,
    /// The zones.
    pub zones: Vec<ZonePlan>,
    /// Per zone (index into `zones`) and CPU: the per-CPU lists.
    pub lists: Vec<Vec<CpuLists>>,
    /// `min_free_kbytes`.
    pub min_free_kbytes: Option<u64>,
    /// CPUs.
    pub nr_cpus: usize,
    /// `pageblock_order`.
    pub pageblock_order: u8,
    /// `MAX_PAGE_ORDER`.
    pub max_order: u8,
}

/// Tells, from the trace, for one pageblock.
#[derive(Clone, Copy, Debug, Default)]
struct Told {
    /// The type named nearest the start: (distance in ns, type).
    named: Option<(u64, Migratetype)>,
    /// Order-0 and higher allocations seen in the block, per `TYPES` index.
    votes: [u32; 4],
}

/// What the trace tells the warm start, read from its records a chunk at a time
/// (the whole trace, before the replay: a per-CPU list page can first be used
/// late): the types of the pageblocks it names, and the per-CPU list pages each
/// CPU allocates or flushes before any free or refill of them.
pub struct Observer {
    start_ns: u64,
    pb: u8,
    nr_cpus: usize,
    /// The layout as it stood at its end (`correct_window`).
    page: PageLayout,
    /// Each zone's span, in zoneinfo's order.
    spans: Vec<(u64, u64)>,
    /// One bit per trace frame: some event since the start named it.
    touched: Vec<u64>,
    /// What the trace tells of each pageblock, by absolute pageblock number.
    told: HashMap<u64, Told>,
    /// Per zone and CPU: list pages allocated (head) and flushed (tail).
    lists: Vec<Vec<(Vec<PcpEntry>, Vec<PcpEntry>)>>,
    /// Per CPU: order-0 allocations since the start, per `TYPES`.
    allocs: Vec<[u64; 4]>,
}

impl Observer {
    /// An observer of the trace of `layout`'s machine, whose page layout is
    /// `page`; `first` are the trace's first records, which must cover the
    /// layout's read (they correct it, see `correct_window`; pass them to
    /// `observe` too).
    ///
    /// # Errors
    /// A layout with no end time.
    pub fn new(
        layout: &ZoneLayout,
        page: &PageLayout,
        first: &[Record],
        nr_cpus: usize,
    ) -> Result<Observer, StartError> {
        let pb: u8 = 9;
        let start_ns = page
            .end_ns
            .ok_or_else(|| StartError("the layout has no end_time".into()))?;
        let end = layout.end_pfn().unwrap_or(0);
        Ok(Observer {
            start_ns,
            pb,
            nr_cpus,
            page: correct_window(page, first, pb),
            spans: layout
                .zones
                .iter()
                .map(|z| (z.start_pfn, z.start_pfn + z.spanned))
                .collect(),
            touched: vec![0; end.div_ceil(64) as usize],
            told: HashMap::new(),
            lists: vec![vec![(Vec::new(), Vec::new()); nr_cpus]; layout.zones.len()],
            allocs: vec![[0; 4]; nr_cpus],
        })
    }

    fn note(&mut self, pfn: u64, t: u64, mt: Option<Migratetype>, vote: bool) {
        let Some(mt) = mt else { return };
        let e = self.told.entry(pfn >> self.pb).or_default();
        if vote {
            if let Some(i) = type_index(mt) {
                e.votes[i] += 1;
            }
            return;
        }
        let d = t.abs_diff(self.start_ns);
        // Before the start, the latest naming wins; after it, the earliest.
        if e.named.is_none_or(|(d0, _)| d < d0) {
            e.named = Some((d, mt));
        }
    }

    /// Whether any frame of `[pfn, pfn + 2^order)` was touched since the start;
    /// marks them all.
    fn touch(&mut self, pfn: u64, order: u8) -> bool {
        let mut was = false;
        for p in pfn..pfn + (1u64 << order) {
            match self.touched.get_mut((p >> 6) as usize) {
                Some(w) => {
                    was |= *w >> (p & 63) & 1 != 0;
                    *w |= 1 << (p & 63);
                }
                None => was = true,
            }
        }
        was
    }

    /// Reads what `records` tell (in trace order, chunk after chunk).
    pub fn observe(&mut self, records: &[Record]) {
        let (start_ns, pb) = (self.start_ns, self.pb);
        for r in records {
            // Types: any time, the naming nearest the start wins.
            match r.event {
                Event::AllocZoneLocked {
                    pfn, migratetype, ..
                }
                | Event::PcpuDrain {
                    pfn, migratetype, ..
                } => self.note(pfn, r.time_ns, migratetype, false),
                Event::AllocExtfrag {
                    pfn,
                    fallback_migratetype,
                    alloc_migratetype,
                    change_ownership,
                    ..
                } => {
                    // The block was of the fallback type up to this event; after a
                    // claim, of the type asked for.
                    let mt = if r.time_ns < start_ns && change_ownership {
                        alloc_migratetype
                    } else {
                        fallback_migratetype
                    };
                    self.note(pfn, r.time_ns, mt, false);
                }
                Event::Alloc {
                    pfn: Some(pfn),
                    migratetype,
                    ..
                } => self.note(pfn, r.time_ns, migratetype, true),
                _ => {}
            }
            if r.time_ns < start_ns {
                continue;
            }
            // Per-CPU list pages: the first event at a frame since the start.
            let cpu = r.cpu as usize;
            if let Event::Alloc {
                order: 0,
                migratetype: Some(mt),
                ..
            } = r.event
            {
                if let (Some(a), Some(t)) = (self.allocs.get_mut(cpu), type_index(mt)) {
                    a[t] += 1;
                }
            }
            let (pfn, order, head) = match r.event {
                Event::Alloc {
                    pfn: Some(pfn),
                    order,
                    ..
                } => (pfn, order, Some(true)),
                Event::PcpuDrain { pfn, order, .. } => (pfn, order, Some(false)),
                Event::Free { pfn, order } | Event::AllocZoneLocked { pfn, order, .. } => {
                    (pfn, order, None)
                }
                _ => continue,
            };
            if self.touch(pfn, order) {
                continue;
            }
            let Some(head) = head else { continue };
            if cpu >= self.nr_cpus || !(order <= 3 || order == pb) {
                continue;
            }
            let page = &self.page;
            if !(pfn..pfn + (1u64 << order)).all(|p| page.class(p) == FrameClass::Blank) {
                continue;
            }
            let Some(zi) = self.spans.iter().position(|&(s, e)| pfn >= s && pfn < e) else {
                continue;
            };
            let e = PcpEntry { pfn, order };
            let l = &mut self.lists[zi][cpu];
            if head {
                l.0.push(e);
            } else {
                l.1.push(e);
            }
        }
    }
}

impl StartPlan {
    /// Infers the start from the zoneinfo read at the start (`layout`), the page
    /// layout (`page`), pagetypeinfo's state then (`types`) and the trace's
    /// records (`records`, from its first, those before the start included): an
    /// `Observer` over them, then `from_observer`.
    ///
    /// # Errors
    /// A zone of the zoneinfo that the layout did not read, or a layout with no
    /// end time.
    pub fn infer(
        layout: &ZoneLayout,
        page: &PageLayout,
        types: &Shape,
        records: &[Record],
        nr_cpus: usize,
    ) -> Result<StartPlan, StartError> {
        let mut o = Observer::new(layout, page, records, nr_cpus)?;
        o.observe(records);
        StartPlan::from_observer(layout, types, o)
    }

    /// The start, from what an `Observer` read of the whole trace.
    ///
    /// # Errors
    /// A zone of the zoneinfo that the layout did not read.
    pub fn from_observer(
        layout: &ZoneLayout,
        types: &Shape,
        o: Observer,
    ) -> Result<StartPlan, StartError> {
        let pb = o.pb;
        let max_order: u8 = 10;
        let (start_ns, nr_cpus) = (o.start_ns, o.nr_cpus);
        let page = &o.page;
        let mut zones = Vec::new();
        for spec in &layout.zones {
            let lz = page.zone(spec.zone_type.name()).ok_or_else(|| {
                StartError(format!(
                    "the layout did not read zone {}",
                    spec.zone_type.name()
                ))
            })?;
            zones.push(zone_plan(spec, lz, max_order));
        }
        for z in zones.iter_mut() {
            let target = types
                .zone(z.spec.node, z.spec.zone_type)
                .map_or([0; 4], |s| s.blocks);
            let lz = page.zone(z.spec.zone_type.name()).ok_or_else(|| {
                StartError(format!(
                    "the layout did not read zone {}",
                    z.spec.zone_type.name()
                ))
            })?;
            assign_types(z, lz, &o.told, target, pb);
        }
        let mut lists: Vec<Vec<CpuLists>> = zones
            .iter()
            .zip(o.lists)
            .map(|(z, per_cpu)| {
                per_cpu
                    .into_iter()
                    .enumerate()
                    .map(|(cpu, (head, tail))| CpuLists {
                        head,
                        tail,
                        fillers: Vec::new(),
                        count: z.spec.pcp_count.get(cpu).copied().unwrap_or(0),
                        high: z.spec.pcp_high.get(cpu).copied().unwrap_or(0),
                    })
                    .collect()
            })
            .collect();
        // Fillers: per zone, the blank frames no event names, by pageblock type,
        // handed out lowest first.
        for (zi, z) in zones.iter().enumerate() {
            let init_end = z.uninit.map_or(z.spec.start_pfn + z.spec.spanned, |u| u.0);
            let mut spare: [Vec<u64>; 3] = Default::default();
            let Some(lz) = page.zone(z.spec.zone_type.name()) else {
                continue;
            };
            for p in z.spec.start_pfn..init_end {
                if lz.class(p) != FrameClass::Blank
                    || o.touched
                        .get((p >> 6) as usize)
                        .is_some_and(|w| w >> (p & 63) & 1 != 0)
                {
                    continue;
                }
                let mt = z.block_types[z.block_index(p, pb)];
                if let Some(t) = pcp_list_type(mt) {
                    spare[t].push(p);
                }
            }
            for t in &mut spare {
                t.reverse();
            }
            for (cpu, l) in lists[zi].iter_mut().enumerate() {
                let want = l.count.saturating_sub(l.told_pages());
                let a = o.allocs.get(cpu).copied().unwrap_or([0; 4]);
                // The list type this CPU allocates least from, then the others.
                let mut order: Vec<usize> = (0..3).collect();
                order.sort_by_key(|&t| (a[t], t));
                for t in order {
                    while (l.fillers.len() as u64) < want {
                        match spare[t].pop() {
                            Some(p) => l.fillers.push(p),
                            None => break,
                        }
                    }
                }
            }
        }
        Ok(StartPlan {
            start_ns,
            zones,
            lists,
            min_free_kbytes: layout.min_free_kbytes,
            nr_cpus,
            pageblock_order: pb,
            max_order,
        })
    }

    /// The allocator configuration: the kernel's zones, with their holes.
    pub fn config(&self) -> Config {
        let nr_nodes = self
            .zones
            .iter()
            .map(|z| z.spec.node as usize + 1)
            .max()
            .unwrap_or(1);
        let mut nodes = vec![NodeConfig::default(); nr_nodes];
        let mut zs: Vec<&ZonePlan> = self.zones.iter().collect();
        zs.sort_by_key(|z| (z.spec.node, z.spec.zone_type));
        for z in zs {
            // A zone that starts inside a pageblock (DMA at frame 1) starts at the
            // pageblock's first frame here, the frames before its start a hole:
            // the same frames, but its first pageblock lies wholly in the zone,
            // so that it can be given its type (a claim refuses a pageblock that
            // crosses the zone's edge, as Linux's does).
            let pb_pages = 1u64 << self.pageblock_order;
            let start = z.spec.start_pfn / pb_pages * pb_pages;
            let lead = z.spec.start_pfn - start;
            let mut c = ZoneConfig::new(z.spec.zone_type, Pfn(start), z.spec.spanned + lead);
            if lead > 0 {
                c.holes.push((Pfn(start), lead));
            }
            c.holes.extend(z.holes.iter().map(|&(p, n)| (Pfn(p), n)));
            // Adjacent holes as one.
            let mut merged: Vec<(Pfn, u64)> = Vec::new();
            for (p, n) in c.holes {
                match merged.last_mut() {
                    Some(last) if last.0 .0 + last.1 == p.0 => last.1 += n,
                    _ => merged.push((p, n)),
                }
            }
            c.holes = merged;
            nodes[z.spec.node as usize].zones.push(c);
        }
        Config {
            nodes,
            nr_cpus: self.nr_cpus.max(1),
            min_free_kbytes: self.min_free_kbytes,
            ..Config::default()
        }
    }

    /// The zone plan holding `pfn`.
    pub fn zone_of(&self, pfn: u64) -> Option<usize> {
        self.zones
            .iter()
            .position(|z| pfn >= z.spec.start_pfn && pfn < z.spec.start_pfn + z.spec.spanned)
    }
}

/// The layout as it stood at its end: the read takes a second or two and the
/// machine runs on, so a frame read early may have left or joined the buddy lists
/// before the read ended. The trace records every such move with its time; each
/// one that came after its frame was read (`PageLayout::read_time`) and before
/// the read ended is applied to the frame: a refill or a buddy allocation takes
/// it off the lists (onto a per-CPU list, or to its caller: blank either way), a
/// flush or a free of an order without per-CPU lists puts it back, a free of
/// another order puts it on a per-CPU list (blank), an allocation makes it
/// allocated.
pub fn correct_window(page: &PageLayout, records: &[Record], pb: u8) -> PageLayout {
    use crate::kpage::bits::{ALLOCATED_SINCE, BUDDY};
    let mut out = page.clone();
    let (Some(b), Some(e)) = (page.begin_ns, page.end_ns) else {
        return out;
    };
    for r in records.iter().filter(|r| r.time_ns >= b && r.time_ns < e) {
        let (pfn, order, mask) = match r.event {
            Event::AllocZoneLocked { pfn, order, .. } => (pfn, order, 0),
            Event::PcpuDrain { pfn, order, .. } => (pfn, order, BUDDY),
            Event::Free { pfn, order } if order <= 3 || order == pb => (pfn, order, 0),
            Event::Free { pfn, order } => (pfn, order, BUDDY),
            Event::Alloc {
                pfn: Some(pfn),
                order,
                ..
            } => (pfn, order, ALLOCATED_SINCE),
            _ => continue,
        };
        if page.read_time(pfn).is_some_and(|t| t < r.time_ns) {
            for p in pfn..pfn + (1u64 << order) {
                out.set_mask(p, mask);
            }
        }
    }
    out
}

/// Holes, the uninitialised part, the free blocks and the census of one zone.
fn zone_plan(spec: &ZoneSpec, lz: &LayoutZone, max_order: u8) -> ZonePlan {
    let start = spec.start_pfn;
    let end = start + spec.spanned;
    // Past the last frame with any content, the zone reads as zeros or was not
    // read: its `spanned - present` missing frames go at its end (where x86's hole
    // below 4 GiB is), the rest, from the next section on, is not initialised.
    let content_end = lz.end_of_content().max(start);
    let missing = spec.spanned.saturating_sub(spec.present);
    let hole_tail = (end - missing).max(content_end);
    let uninit_start = content_end
        .next_multiple_of(SECTION_PAGES)
        .clamp(content_end, hole_tail);
    let uninit = (uninit_start < hole_tail).then(|| (uninit_start, hole_tail - uninit_start));
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let push = |p: u64, n: u64, holes: &mut Vec<(u64, u64)>| {
        if n == 0 {
            return;
        }
        match holes.last_mut() {
            Some(last) if last.0 + last.1 == p => last.1 += n,
            _ => holes.push((p, n)),
        }
    };
    // Absent frames (and frames not read) below the uninitialised part.
    let mut p = start;
    while p < uninit_start {
        if lz.class(p) == FrameClass::Absent {
            let s = p;
            while p < uninit_start && lz.class(p) == FrameClass::Absent {
                p += 1;
            }
            push(s, p - s, &mut holes);
        } else {
            p += 1;
        }
    }
    push(hole_tail, end - hole_tail, &mut holes);
    let free_blocks = lz
        .free_blocks(max_order)
        .into_iter()
        .filter(|&(p, o)| p >= start && p + (1u64 << o) <= uninit_start)
        .collect();
    let census = Census::of(lz, start, uninit_start - start);
    ZonePlan {
        spec: spec.clone(),
        holes,
        uninit,
        free_blocks,
        block_types: Vec::new(),
        type_source: Vec::new(),
        census,
    }
}

/// Gives every pageblock of `z` a type: the one the trace named, else inferred so
/// that the zone's counts per type come to pagetypeinfo's (`target`). Of the
/// blocks not named, those with the most pages of kernel memory (and allocations
/// of kernel memory in the trace) become unmovable or reclaimable, reclaimable
/// first where the trace allocated reclaimable memory there; the rest movable.
fn assign_types(
    z: &mut ZonePlan,
    lz: &LayoutZone,
    told: &HashMap<u64, Told>,
    target: [u64; 4],
    pb: u8,
) {
    let first = z.spec.start_pfn >> pb;
    let init_end = z.uninit.map_or(z.spec.start_pfn + z.spec.spanned, |u| u.0);
    let last = (init_end.max(z.spec.start_pfn + 1) - 1) >> pb;
    let n = (last + 1 - first) as usize;
    // Blocks past the initialised part are movable, and counted by nobody.
    let total = ((z.spec.start_pfn + z.spec.spanned - 1) >> pb) + 1 - first;
    z.block_types = vec![Migratetype::Movable; total as usize];
    z.type_source = vec![TypeSource::Inferred; total as usize];
    let mut count = [0u64; 4];
    let mut open: Vec<(usize, i64, i64)> = Vec::new();
    for i in 0..n {
        let b = first + i as u64;
        let t = told.get(&b).copied().unwrap_or_default();
        if let Some((_, mt)) = t.named {
            z.block_types[i] = mt;
            z.type_source[i] = TypeSource::Named;
            if let Some(k) = type_index(mt) {
                count[k] += 1;
            }
            continue;
        }
        let lo = (b << pb).max(z.spec.start_pfn);
        let hi = ((b + 1) << pb).min(init_end);
        let c = Census::of(lz, lo, hi - lo);
        if c.absent as u64 == hi - lo {
            continue;
        }
        let v = t.votes;
        // Kernel memory against user memory, a trace allocation weighing like a
        // page of the layout.
        let kernel = i64::from(c.unmovable) + i64::from(v[0] + v[2]);
        let user = i64::from(c.movable) + i64::from(v[1]);
        open.push((i, kernel - user, i64::from(v[2]) - i64::from(v[0])));
    }
    let need = |k: usize, count: &[u64; 4]| target[k].saturating_sub(count[k]) as usize;
    let nonmovable = need(0, &count) + need(2, &count);
    open.sort_by_key(|&(i, score, _)| (std::cmp::Reverse(score), i));
    let mut chosen: Vec<(usize, i64, i64)> = open.iter().take(nonmovable).copied().collect();
    chosen.sort_by_key(|&(i, _, recl)| (std::cmp::Reverse(recl), i));
    let reclaimable = need(2, &count);
    for (k, &(i, _, _)) in chosen.iter().enumerate() {
        z.block_types[i] = if k < reclaimable {
            Migratetype::Reclaimable
        } else {
            Migratetype::Unmovable
        };
    }
}

/// What applying a plan did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StartReport {
    /// Frames taken offline (not initialised yet).
    pub offline_frames: u64,
    /// Frames allocated as the kernel's memory in use.
    pub allocated_frames: u64,
    /// Pageblocks given a type other than movable, per `TYPES`.
    pub retyped: [u64; 4],
    /// Of those, blocks whose claim failed (left movable).
    pub retype_failures: u64,
    /// Free blocks freed, and pages in them.
    pub free_blocks: u64,
    /// Pages in them.
    pub free_pages: u64,
    /// Free blocks zonealloc refused (should be 0).
    pub free_errors: u64,
    /// Per-CPU list pages put on the lists, per CPU.
    pub pcp_pages: Vec<u64>,
    /// zoneinfo's per-CPU count, per CPU (all zones).
    pub pcp_count: Vec<u64>,
    /// zonealloc's per-CPU `high` after the warm start, per CPU (the busiest
    /// zone's), and zoneinfo's.
    pub pcp_high: Vec<(u64, u64)>,
    /// Pages on zonealloc's per-CPU lists after the warm start, per CPU.
    pub pcp_after: Vec<u64>,
    /// Pageblocks per type that the trace named, per `TYPES`, and inferred.
    pub named_types: [u64; 4],
    /// Pageblocks per type inferred, per `TYPES`.
    pub inferred_types: [u64; 4],
}

/// The state the replay keeps of the kernel's memory in use before the trace: one
/// bit per trace frame, set while zonealloc holds the frame for the kernel.
#[derive(Clone, Debug, Default)]
pub struct Pretrace {
    words: Vec<u64>,
}

impl Pretrace {
    /// Bits for frames below `frames`.
    pub fn new(frames: u64) -> Pretrace {
        Pretrace {
            words: vec![0; usize::try_from(frames.div_ceil(64)).unwrap_or(0)],
        }
    }

    /// Whether any bit is set at all.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Whether `pfn` is held.
    #[inline]
    pub fn get(&self, pfn: u64) -> bool {
        self.words
            .get((pfn >> 6) as usize)
            .is_some_and(|w| w >> (pfn & 63) & 1 != 0)
    }

    /// Marks `[pfn, pfn + n)` held (`on`) or not.
    pub fn set_range(&mut self, pfn: u64, n: u64, on: bool) {
        for p in pfn..pfn + n {
            if let Some(w) = self.words.get_mut((p >> 6) as usize) {
                if on {
                    *w |= 1 << (p & 63);
                } else {
                    *w &= !(1 << (p & 63));
                }
            }
        }
    }

    /// Whether every frame of `[pfn, pfn + n)` is held.
    pub fn all(&self, pfn: u64, n: u64) -> bool {
        (pfn..pfn + n).all(|p| self.get(p))
    }

    /// The held runs of `[pfn, pfn + n)`, `(start, frames)`.
    pub fn runs(&self, pfn: u64, n: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut p = pfn;
        while p < pfn + n {
            if self.get(p) {
                let s = p;
                while p < pfn + n && self.get(p) {
                    p += 1;
                }
                out.push((s, p - s));
            } else {
                p += 1;
            }
        }
        out
    }
}

/// The per-CPU list type of a pageblock type (Linux's three; the others' pages
/// go on the movable list): index into `TYPES`.
fn pcp_list_type(mt: Migratetype) -> Option<usize> {
    match mt {
        Migratetype::Unmovable => Some(0),
        Migratetype::Reclaimable => Some(2),
        Migratetype::Movable | Migratetype::HighAtomic | Migratetype::Cma => Some(1),
        Migratetype::Isolate => None,
    }
}

/// The allocation flags that reach zone `zt` first, of type `mt`, with no
/// watermark in the way.
fn gfp_for(zt: ZoneType, mt: Migratetype) -> Gfp {
    let zone = match zt {
        ZoneType::Dma => Gfp::DMA,
        ZoneType::Dma32 => Gfp::DMA32,
        _ => Gfp::empty(),
    };
    crate::gfp_names::effective_gfp(Gfp::KERNEL | zone | Gfp::MEMALLOC | Gfp::THISZONE, Some(mt))
}

impl StartPlan {
    /// Puts `za` (built from `config()`) into the kernel's state at the start; sets
    /// `pretrace` for every frame left allocated for the kernel. See the module
    /// documentation for the steps.
    ///
    /// # Errors
    /// A step zonealloc refused that leaves no sensible state (offlining or taking
    /// a run of frames).
    pub fn apply(
        &self,
        za: &ZoneAllocator,
        pretrace: &mut Pretrace,
        seed: u64,
    ) -> Result<StartReport, StartError> {
        let mut rep = StartReport {
            pcp_pages: vec![0; self.nr_cpus],
            pcp_count: vec![0; self.nr_cpus],
            pcp_high: vec![(0, 0); self.nr_cpus],
            ..StartReport::default()
        };
        let pb = self.pageblock_order;
        // 1. Offline what is not initialised.
        for z in &self.zones {
            if let Some((p, n)) = z.uninit {
                za.offline_pages(Pfn(p), n).map_err(|e| {
                    StartError(format!(
                        "offlining {n} frames at {p} ({}): {e}",
                        z.spec.zone_type
                    ))
                })?;
                rep.offline_frames += n;
            }
        }
        // 2. Everything managed, allocated.
        for z in &self.zones {
            for (p, n) in z.managed_runs() {
                za.alloc_contig_range(Pfn(p), Pfn(p + n)).map_err(|e| {
                    StartError(format!(
                        "taking frames {p}..{} ({}): {e}",
                        p + n,
                        z.spec.zone_type
                    ))
                })?;
                pretrace.set_range(p, n, true);
                rep.allocated_frames += n;
            }
        }
        // 3. Pageblock types.
        for z in &self.zones {
            let runs = z.managed_runs();
            let init_end = z.uninit.map_or(z.spec.start_pfn + z.spec.spanned, |u| u.0);
            for (i, &mt) in z.block_types.iter().enumerate() {
                let src = z
                    .type_source
                    .get(i)
                    .copied()
                    .unwrap_or(TypeSource::Inferred);
                if ((z.spec.start_pfn >> pb) + i as u64) << pb >= init_end {
                    // Not initialised: movable, and counted by nobody.
                    continue;
                }
                if let Some(k) = type_index(mt) {
                    match src {
                        TypeSource::Named => rep.named_types[k] += 1,
                        TypeSource::Inferred => rep.inferred_types[k] += 1,
                    }
                }
                if mt == Migratetype::Movable {
                    continue;
                }
                let b = ((z.spec.start_pfn >> pb) + i as u64) << pb;
                let block_runs = clip_runs(&runs, b, b + (1u64 << pb));
                if block_runs.is_empty() {
                    continue;
                }
                if retype(za, z.spec.zone_type, mt, &block_runs, pb) {
                    if let Some(k) = type_index(mt) {
                        rep.retyped[k] += 1;
                    }
                } else {
                    rep.retype_failures += 1;
                }
            }
        }
        // 4. The kernel's free blocks, in a shuffled order (the lists' order is not
        //    in the layout), then drained into the buddy lists.
        let mut free: Vec<(u64, u8)> = self
            .zones
            .iter()
            .flat_map(|z| z.free_blocks.iter().copied())
            .collect();
        let mut rng = crate::rng::SplitMix64::new(seed);
        for i in (1..free.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            free.swap(i, j);
        }
        for (k, &(p, o)) in free.iter().enumerate() {
            let n = 1u64 << o;
            if za.free_contig_range_on(k % self.nr_cpus, Pfn(p), n).is_ok() {
                pretrace.set_range(p, n, false);
                rep.free_blocks += 1;
                rep.free_pages += n;
            } else {
                rep.free_errors += 1;
            }
        }
        za.drain_all_pages();
        // 5. The per-CPU lists.
        for (zi, z) in self.zones.iter().enumerate() {
            for (cpu, l) in self.lists[zi].iter().enumerate() {
                rep.pcp_count[cpu] += l.count;
                if l.count == 0 && l.head.is_empty() && l.tail.is_empty() {
                    continue;
                }
                grow_high(za, cpu, z.spec.zone_type, l.high, pretrace);
                let mut put = |e: &PcpEntry, pretrace: &mut Pretrace| {
                    let n = 1u64 << e.order;
                    if pretrace.all(e.pfn, n) && za.free_contig_range_on(cpu, Pfn(e.pfn), n).is_ok()
                    {
                        pretrace.set_range(e.pfn, n, false);
                        rep.pcp_pages[cpu] += n;
                    }
                };
                for e in &l.tail {
                    put(e, pretrace);
                }
                for &p in &l.fillers {
                    put(&PcpEntry { pfn: p, order: 0 }, pretrace);
                }
                for e in l.head.iter().rev() {
                    put(e, pretrace);
                }
                let (h, _) = pcp_high_of(za, cpu, z.spec.zone_type);
                if l.count >= rep.pcp_high[cpu].1 {
                    rep.pcp_high[cpu] = (h, l.high);
                }
            }
        }
        rep.pcp_after = (0..self.nr_cpus)
            .map(|cpu| {
                za.pcp_stats()
                    .iter()
                    .filter_map(|z| z.cpus.get(cpu))
                    .map(|c| c.count)
                    .sum()
            })
            .collect();
        Ok(rep)
    }
}

/// The parts of `runs` inside `[lo, hi)`.
fn clip_runs(runs: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    runs.iter()
        .filter_map(|&(p, n)| {
            let s = p.max(lo);
            let e = (p + n).min(hi);
            (s < e).then_some((s, e - s))
        })
        .collect()
}

/// Gives the pageblock whose managed frames are `runs` (all allocated) the type
/// `mt`: frees them, has an allocation of that type claim the block, gives that
/// back and takes the frames again. False if the claim did not happen.
fn retype(za: &ZoneAllocator, zt: ZoneType, mt: Migratetype, runs: &[(u64, u64)], pb: u8) -> bool {
    for &(p, n) in runs {
        if za.free_contig_range_on(0, Pfn(p), n).is_err() {
            return false;
        }
    }
    za.drain_all_pages();
    // The largest free block of the pageblock is the first the claim looks at.
    let order = runs
        .iter()
        .map(|&(_, n)| 63 - n.leading_zeros())
        .max()
        .unwrap_or(0)
        .min(u32::from(pb)) as u8;
    let got = za.alloc_pages_on(0, gfp_for(zt, mt), Order(order));
    let base = runs[0].0 >> pb << pb;
    let claimed = za.pageblock_migratetype(Pfn(base)) == Some(mt);
    if let Ok(p) = got {
        let _ = za.free_pages_on(0, p, Order(order));
    }
    za.drain_all_pages();
    for &(p, n) in runs {
        // Cannot fail: the frames are free again and nobody else allocates.
        let _ = za.alloc_contig_range(Pfn(p), Pfn(p + n));
    }
    claimed
}

/// `cpu`'s `high` and `high_max` in zone `zt`.
fn pcp_high_of(za: &ZoneAllocator, cpu: usize, zt: ZoneType) -> (u64, u64) {
    za.zoneinfo()
        .zones
        .iter()
        .find(|z| z.id.zone_type == zt)
        .and_then(|z| z.pagesets.get(cpu))
        .map_or((0, 0), |p| (p.high, p.high_max))
}

/// Grows `cpu`'s auto-tuned `high` in zone `zt` toward `target` the way Linux
/// grows it (each refill while the zone is above its high watermark raises `high`
/// by a batch), by allocating movable order-0 pages there, then gives the pages
/// back and drains the CPU's lists.
fn grow_high(za: &ZoneAllocator, cpu: usize, zt: ZoneType, target: u64, _pretrace: &Pretrace) {
    let high = |za: &ZoneAllocator| pcp_high_of(za, cpu, zt);
    let zone = match zt {
        ZoneType::Dma => Gfp::DMA,
        ZoneType::Dma32 => Gfp::DMA32,
        _ => Gfp::empty(),
    };
    // Movable, in this zone only, and no reclaim: a zone that cannot give the
    // pages just stops the growth.
    let gfp = Gfp::HIGHMEM | Gfp::MOVABLE | Gfp::KSWAPD_RECLAIM | Gfp::THISZONE | zone;
    let mut held = Vec::new();
    loop {
        let (h, max) = high(za);
        if h >= target.min(max) {
            break;
        }
        let before = held.len();
        for _ in 0..1024 {
            match za.alloc_pages_on(cpu, gfp, Order(0)) {
                Ok(p) if za.zone_id_of(p).is_some_and(|id| id.zone_type == zt) => held.push(p),
                Ok(p) => {
                    let _ = za.free_pages_on(cpu, p, Order(0));
                    break;
                }
                Err(_) => break,
            }
        }
        if held.len() == before || held.len() > 1 << 22 {
            break;
        }
    }
    for &p in &held {
        let _ = za.free_pages_on(cpu, p, Order(0));
    }
    za.drain_cpu_pages(cpu);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::kpage::bits::*;

    fn spec(zt: ZoneType, start: u64, spanned: u64, present: u64, managed: u64) -> ZoneSpec {
        ZoneSpec {
            node: 0,
            zone_type: zt,
            start_pfn: start,
            spanned,
            present,
            managed,
            pcp_count: vec![0, 0],
            pcp_high: vec![0, 0],
        }
    }

    fn lz(name: &str, start: u64, masks: &[(u64, u16)]) -> LayoutZone {
        let mut z = LayoutZone {
            name: name.into(),
            start_pfn: start,
            masks: Vec::new(),
        };
        for &(n, m) in masks {
            z.masks.resize(z.masks.len() + n as usize, m);
        }
        z
    }

    #[test]
    fn holes_uninitialised_part_and_free_blocks() {
        // 4 sections: a reserved run, then memory, then the last two sections
        // zeros (not initialised: present, not managed).
        let s = spec(ZoneType::Normal, 0, 4 * SECTION_PAGES, 4 * SECTION_PAGES, 0);
        let l = lz(
            "Normal",
            0,
            &[
                (256, RESERVED),
                (256, LRU),
                (1024, BUDDY),
                (SECTION_PAGES - 1536 + SECTION_PAGES - 8, LRU),
                (8, 0),
                (SECTION_PAGES + 100, 0),
            ],
        );
        let z = zone_plan(&s, &l, 10);
        assert_eq!(z.holes, vec![(0, 256)]);
        assert_eq!(z.uninit, Some((2 * SECTION_PAGES, 2 * SECTION_PAGES)));
        assert_eq!(z.free_blocks, vec![(512, 9), (1024, 9)]);
        assert_eq!(z.managed(), 2 * SECTION_PAGES - 256);
        assert_eq!(z.managed_runs(), vec![(256, 2 * SECTION_PAGES - 256)]);
    }

    #[test]
    fn missing_frames_go_to_the_end_of_the_zone() {
        // 2 sections spanned, 1.5 present: the last half section is a hole, read
        // as zeros only in part.
        let s = spec(
            ZoneType::Dma32,
            4096,
            2 * SECTION_PAGES,
            3 * SECTION_PAGES / 2,
            0,
        );
        let l = lz("DMA32", 4096, &[(3 * SECTION_PAGES / 2, BUDDY), (100, 0)]);
        let z = zone_plan(&s, &l, 10);
        assert_eq!(z.uninit, None);
        assert_eq!(
            z.holes,
            vec![(4096 + 3 * SECTION_PAGES / 2, SECTION_PAGES / 2)]
        );
        assert_eq!(z.managed(), 3 * SECTION_PAGES / 2);
    }

    fn rec(t: u64, cpu: u32, event: Event) -> Record {
        Record {
            line: 0,
            cpu,
            time_ns: t,
            event,
        }
    }

    #[test]
    fn per_cpu_list_pages_are_what_the_trace_uses_before_freeing() {
        let mut s = spec(ZoneType::Normal, 0, 1024, 1024, 1024);
        s.pcp_count = vec![10, 10];
        // Frames 0..16 blank, 16.. user memory.
        let l = lz("Normal", 0, &[(16, 0), (1008, LRU)]);
        let page = PageLayout {
            begin_ns: Some(0),
            end_ns: Some(100),
            zones: vec![l.clone()],
        };
        let layout = ZoneLayout {
            zones: vec![s],
            nr_cpus: Some(2),
            min_free_kbytes: None,
        };
        let alloc = |pfn, order| Event::Alloc {
            pfn: Some(pfn),
            order,
            gfp: Gfp::KERNEL,
            migratetype: Some(Migratetype::Movable),
        };
        let recs = vec![
            rec(50, 0, alloc(1, 0)), // before the start: not told
            rec(150, 0, alloc(2, 0)),
            rec(160, 1, alloc(4, 2)),
            rec(170, 0, Event::Free { pfn: 8, order: 0 }),
            rec(180, 0, alloc(8, 0)), // freed first: not told
            rec(
                190,
                0,
                Event::PcpuDrain {
                    pfn: 9,
                    order: 0,
                    migratetype: Some(Migratetype::Movable),
                },
            ),
            rec(200, 0, alloc(20, 0)), // user memory: not a list page
            rec(210, 0, alloc(3, 0)),
            rec(220, 0, alloc(2, 0)), // second time: not told again
        ];
        let plan = StartPlan::infer(&layout, &page, &Shape::default(), &recs, 2).unwrap();
        let lists = plan.lists;
        let e = |pfn, order| PcpEntry { pfn, order };
        assert_eq!(lists[0][0].head, vec![e(2, 0), e(3, 0)]);
        assert_eq!(lists[0][0].tail, vec![e(9, 0)]);
        assert_eq!(lists[0][1].head, vec![e(4, 2)]);
        assert_eq!(lists[0][1].told_pages(), 4);
        assert_eq!(lists[0][0].count, 10);
    }

    #[test]
    fn what_moved_while_the_layout_was_read_is_put_right() {
        // 1024 frames read from time 0 to 1024: frame p at time p.
        let l = lz("Normal", 0, &[(512, BUDDY), (512, LRU)]);
        let page = PageLayout {
            begin_ns: Some(0),
            end_ns: Some(1024),
            zones: vec![l],
        };
        let recs = vec![
            // Frame 10, read at 10 as free, refilled at 20: on a list at the end.
            rec(
                20,
                0,
                Event::AllocZoneLocked {
                    pfn: 10,
                    order: 0,
                    migratetype: Some(Migratetype::Movable),
                    percpu_refill: true,
                },
            ),
            // Frame 600 taken at 500, before its read at 600: the read saw it.
            rec(
                500,
                0,
                Event::AllocZoneLocked {
                    pfn: 600,
                    order: 0,
                    migratetype: Some(Migratetype::Movable),
                    percpu_refill: true,
                },
            ),
            // Frames 700..708 read as allocated, freed as an order-3 block at 800:
            // on a per-CPU list (order 3 has one).
            rec(800, 0, Event::Free { pfn: 700, order: 3 }),
            // Frames 768..784 freed at 900 at order 4: onto the buddy lists.
            rec(900, 0, Event::Free { pfn: 768, order: 4 }),
            // After the read: left to the replay.
            rec(2000, 0, Event::Free { pfn: 900, order: 4 }),
        ];
        let c = correct_window(&page, &recs, 9);
        assert_eq!(c.class(10), FrameClass::Blank);
        assert_eq!(c.class(11), FrameClass::Free);
        assert_eq!(c.class(600), FrameClass::Movable);
        assert_eq!(c.class(700), FrameClass::Blank);
        assert_eq!(c.class(707), FrameClass::Blank);
        assert_eq!(c.class(768), FrameClass::Free);
        assert_eq!(c.class(784), FrameClass::Movable);
        assert_eq!(c.class(900), FrameClass::Movable);
        assert_eq!(page.read_time(512), Some(512));
        assert_eq!(page.read_time(5000), None);
    }

    #[test]
    fn types_named_by_the_trace_win_and_the_rest_meet_pagetypeinfo() {
        // Four pageblocks: 0 all slab, 1 half slab, 2 user memory, 3 free.
        let s = spec(ZoneType::Normal, 0, 2048, 2048, 2048);
        let l = lz(
            "Normal",
            0,
            &[
                (512, SLAB),
                (256, SLAB),
                (256, LRU),
                (512, LRU),
                (512, BUDDY),
            ],
        );
        let mut z = zone_plan(&s, &l, 10);
        let mut told = HashMap::new();
        // The trace names block 2 reclaimable.
        told.insert(
            2,
            Told {
                named: Some((5, Migratetype::Reclaimable)),
                votes: [0; 4],
            },
        );
        // pagetypeinfo: 1 unmovable, 2 movable, 1 reclaimable.
        assign_types(&mut z, &l, &told, [1, 2, 1, 0], 9);
        assert_eq!(
            z.block_types,
            vec![
                Migratetype::Unmovable,
                Migratetype::Movable,
                Migratetype::Reclaimable,
                Migratetype::Movable
            ]
        );
        assert_eq!(z.type_source[2], TypeSource::Named);
    }

    #[test]
    fn pretrace_bits() {
        let mut p = Pretrace::new(200);
        p.set_range(10, 70, true);
        p.set_range(20, 5, false);
        assert!(p.get(10) && !p.get(20) && p.get(79) && !p.get(80));
        assert!(p.all(25, 55) && !p.all(19, 3));
        assert_eq!(p.runs(0, 100), vec![(10, 10), (25, 55)]);
        assert!(!p.get(10_000));
    }

    #[test]
    fn apply_builds_the_kernel_s_free_lists_and_types() {
        // Two zones: DMA32 at 4096 (all free) and Normal at 2 sections (4 sections
        // long), its last two sections not initialised.
        let n0 = 2 * SECTION_PAGES;
        let dma32 = spec(ZoneType::Dma32, 4096, 4096, 4096, 4096);
        let mut normal = spec(
            ZoneType::Normal,
            n0,
            4 * SECTION_PAGES,
            4 * SECTION_PAGES,
            0,
        );
        normal.pcp_count = vec![3, 0];
        normal.pcp_high = vec![600, 0];
        let l32 = lz("DMA32", 4096, &[(4096, BUDDY)]);
        // Normal: pageblock 0 slab with 3 free frames at n0 + 8, then user memory
        // with one free order-3 block, a blank page CPU 0 allocates from its list,
        // user memory to the end of the second section, and zeros past it.
        let masks = [
            (8, SLAB),
            (3, BUDDY),
            (501, SLAB),
            (1024, LRU),
            (8, BUDDY),
            (1, 0),
            (2 * SECTION_PAGES - 1545, LRU),
            (SECTION_PAGES + 5, 0),
        ];
        let ln = lz("Normal", n0, &masks);
        let page = PageLayout {
            begin_ns: Some(0),
            end_ns: Some(1000),
            zones: vec![l32, ln],
        };
        let layout = ZoneLayout {
            zones: vec![dma32, normal],
            nr_cpus: Some(2),
            min_free_kbytes: Some(1024),
        };
        let blank = n0 + 512 + 1024 + 8;
        let recs = vec![rec(
            2000,
            0,
            Event::Alloc {
                pfn: Some(blank),
                order: 0,
                gfp: Gfp::KERNEL,
                migratetype: Some(Migratetype::Movable),
            },
        )];
        let mut types = Shape::default();
        types.zones.push(crate::kstate::ZoneShape {
            node: 0,
            zone: ZoneType::Normal,
            free: vec![],
            free_by_type: vec![],
            blocks: [1, 127, 0, 0],
        });
        let plan = StartPlan::infer(&layout, &page, &types, &recs, 2).unwrap();
        assert_eq!(plan.zones[1].block_types[0], Migratetype::Unmovable);
        let za = ZoneAllocator::new(plan.config()).unwrap();
        assert_eq!(
            plan.zones[1].uninit,
            Some((n0 + 2 * SECTION_PAGES, 2 * SECTION_PAGES))
        );
        assert!(plan.zones[1].holes.is_empty());
        let mut pre = Pretrace::new(n0 + 4 * SECTION_PAGES);
        let rep = plan.apply(&za, &mut pre, 1).unwrap();
        assert_eq!(rep.retype_failures, 0);
        assert_eq!(rep.offline_frames, 2 * SECTION_PAGES);
        let bi = za.buddyinfo();
        let normal = &bi
            .zones
            .iter()
            .find(|z| z.0.zone_type == ZoneType::Normal)
            .unwrap()
            .1;
        // Three frames at n0 + 8: an order-1 and an order-0 block; then an order-3.
        assert_eq!(normal[0], 1);
        assert_eq!(normal[1], 1);
        assert_eq!(normal[3], 1);
        assert_eq!(normal.iter().sum::<u64>(), 3);
        let dma32 = &bi
            .zones
            .iter()
            .find(|z| z.0.zone_type == ZoneType::Dma32)
            .unwrap()
            .1;
        assert_eq!(dma32[10], 4);
        assert_eq!(
            za.pageblock_migratetype(Pfn(n0)),
            Some(Migratetype::Unmovable)
        );
        assert_eq!(
            za.pageblock_migratetype(Pfn(n0 + 512)),
            Some(Migratetype::Movable)
        );
        // The blank page is on CPU 0's list; the free frames are not held.
        assert_eq!(rep.pcp_pages, vec![1, 0]);
        assert!(!pre.get(blank) && !pre.get(n0 + 8) && pre.get(n0));
        assert!(matches!(
            za.frame_state(Pfn(blank)),
            Some(zonealloc::FrameState::PerCpu { .. })
        ));
        za.check_invariants().unwrap();
    }
}
