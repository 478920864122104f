//! Fragmentation quality: a stress-highalloc analogue, with and without mobility
//! grouping, and with compaction.
//!
//! Top layer. Two workloads fragment a zone; then, as mmtests' stress-highalloc did
//! (seed-benchmarks.md §6), the bench asks for as many order-9 (pageblock) blocks as
//! it can get, with `GFP_HIGHUSER_MOVABLE`, first *under load* and then *at rest*
//! (the movable memory freed: what reclaim would give back). Under load, only the
//! subject with a migrator can move the movable memory out of the way (direct
//! compaction); whatever is missing at rest is permanent fragmentation: pageblocks
//! pinned by a few unmovable pages, which no compaction can move.
//!
//! ```text
//!  synthetic:  time ───────────────────────────────────────────────▶
//!              movable churn  ▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒  (to ~90% of memory)
//!              pinned (U/R)   ▂▂▃▃▄▄▅▅▆▆▇▇██  long-lived, grown evenly to X%
//!              short-lived U  ╷ ╷╷ ╷  ╷╷ ╷ ╷  temporary kernel allocations
//!              ─▶ pass 1 (under load) ─▶ free movable + short-lived ─▶ pass 2 (at rest)
//! ```
//!
//! * **synthetic**: a seeded operation sequence (`SplitMix64`) over a zone of
//!   `zone_bytes`: movable blocks (mostly order 0, some up to order 9, like THPs)
//!   churn at ~`occupancy_percent` of memory while long-lived unmovable and
//!   reclaimable blocks (orders 0–3) grow to `pinned_percent` of memory, spread
//!   evenly over the run, and short-lived unmovable blocks come and go. The sequence
//!   is generated once and fed unchanged to every subject.
//! * **trace**: the real kernel trace replayed (`replay::Replayer`) into one Normal
//!   zone sized to 1.2x the trace's peak of live pages, so the zone is under
//!   pressure as the machine was; at rest, the live movable blocks are freed.
//!
//! Subjects: zonealloc with its default `Config` (mobility grouping on); the same
//! with compaction: a migrator (`BenchOwner`) owns every movable block by handle,
//! so direct compaction can move blocks while they are allocated (throughout the
//! synthetic workload; on the trace, from the end of the replay on, since the
//! replayer's own table cannot follow a moved block); zonealloc with
//! `mobility_grouping: false`; and, for the synthetic workload, the
//! `buddy_system_allocator` crate's `FrameAllocator`: a plain binary buddy that always
//! takes the lowest address, with no grouping, no watermarks and no per-CPU lists. It
//! answers whether "no grouping" results are an artefact of zonealloc's no-grouping
//! mode or what any buddy allocator without grouping gets.
//!
//! Success rate = order-9 blocks obtained / `floor(free pages / 512)` (the blocks
//! free memory could hold with no fragmentation at all). Unusable free space index
//! at order 9 = share of free memory in blocks below order 9 (§8.5), measured just
//! before each pass. Each pass also reports the latency of each order-9 attempt
//! (percentiles: with direct compaction, and without) and the pages compaction
//! moved per block obtained (`pgmigrate_success`, with `compact_migrate_scanned`
//! and `compact_isolated` as Linux reports them). A last section measures the cost
//! of compaction per page moved.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use buddy_system_allocator::FrameAllocator;
use serde::Serialize;
use zonealloc::{
    unusable_free_index, ArenaOptions, Config, Gfp, Migrate, MigrateOutcome, Migratetype, Order,
    Pfn, ZoneAllocator, ZoneType,
};

use crate::event::{Event, Record};
use crate::layout::{HoleModel, ZoneLayout};
use crate::reader::{read_all, ReadOptions};
use crate::replay::{BuddySample, Replayer};
use crate::replay::{ReplayError, MAX_AUTO_CPUS};
use crate::rng::SplitMix64;

/// The order asked for in the passes (x86-64's pageblock and THP order).
pub const HIGHALLOC_ORDER: u8 = 9;
const MAX_ORDER: u8 = 10;

// -----------------------------------------------------------------------------
// Options and results
// -----------------------------------------------------------------------------

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragOptions {
    /// Seed of the synthetic workload.
    pub seed: u64,
    /// Size of the synthetic workload's zone.
    pub zone_bytes: u64,
    /// Long-lived unmovable + reclaimable memory at the end, % of the zone.
    pub pinned_percent: f64,
    /// Memory in use during the churn, % of the zone.
    pub occupancy_percent: f64,
    /// Length of the churn: movable operations per page of the zone.
    pub ops_per_page: f64,
    /// CPUs (operations are spread over them at random).
    pub nr_cpus: usize,
    /// The trace for the second workload (`None`: synthetic only).
    pub trace: Option<PathBuf>,
    /// Run the `buddy_system_allocator` peer on the synthetic workload.
    pub peer: bool,
    /// `buddyinfo()` samples per workload run (for the charts).
    pub samples: u64,
}

/// The smallest synthetic zone `fragbench` runs on: eight pageblocks, so that the
/// workload's pinned share and its churn each have whole pageblocks to fill.
pub const FRAG_MIN_ZONE_BYTES: u64 = 16 << 20;

impl FragOptions {
    /// Checks every option against its range before anything runs.
    ///
    /// # Errors
    /// `ReplayError::Options` naming the first option out of range.
    pub fn check(&self) -> Result<(), ReplayError> {
        let bad = |what: String| Err(ReplayError::Options(what));
        if self.zone_bytes < FRAG_MIN_ZONE_BYTES {
            return bad(format!(
                "zone of {} MiB: the synthetic workload needs at least {} MiB",
                self.zone_bytes >> 20,
                FRAG_MIN_ZONE_BYTES >> 20
            ));
        }
        let percent = |name: &str, v: f64| -> Result<(), ReplayError> {
            if (0.0..=100.0).contains(&v) {
                Ok(())
            } else {
                bad(format!("{name} {v}: a percentage of the zone, 0 to 100"))
            }
        };
        percent("pinned percent", self.pinned_percent)?;
        percent("occupancy percent", self.occupancy_percent)?;
        if !(self.ops_per_page.is_finite() && self.ops_per_page >= 0.0) {
            return bad(format!(
                "ops per page {}: a finite number, 0 or more",
                self.ops_per_page
            ));
        }
        Ok(())
    }
}

impl Default for FragOptions {
    fn default() -> FragOptions {
        FragOptions {
            seed: 42,
            zone_bytes: 1 << 30,
            pinned_percent: 10.0,
            occupancy_percent: 90.0,
            ops_per_page: 4.0,
            nr_cpus: 2,
            trace: None,
            peer: true,
            samples: 200,
        }
    }
}

/// One pass of order-9 allocations.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HighAllocPass {
    /// Free pages before the pass (per-CPU lists drained).
    pub free_pages: u64,
    /// `floor(free_pages / 512)`: order-9 blocks free memory could hold.
    pub possible: u64,
    /// Pageblocks with no allocated page in them (what perfect merging could give).
    pub free_pageblocks: u64,
    /// Order-9 blocks obtained.
    pub obtained: u64,
    /// `obtained / possible`, in %.
    pub success_percent: f64,
    /// Unusable free space index at order 9 before the pass (0..1).
    pub unusable_index_order9: f64,
    /// Mean time per attempt, ns.
    pub ns_per_attempt: f64,
    /// Per-attempt latency percentiles, ns (direct compaction included where the
    /// subject compacts).
    pub latency_ns: Percentiles,
    /// Pages compaction moved during the pass (`pgmigrate_success`).
    pub pages_moved: u64,
    /// `pages_moved / obtained`: the price of each order-9 block.
    pub moved_per_block: f64,
    /// `compact_migrate_scanned` during the pass.
    pub migrate_scanned: u64,
    /// `compact_isolated` during the pass (sources and targets).
    pub isolated: u64,
    /// `compact_stall` during the pass: direct compactions run.
    pub compact_stall: u64,
}

/// Latency percentiles, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Slowest.
    pub max: u64,
}

impl Percentiles {
    fn of(mut v: Vec<u64>) -> Percentiles {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Percentiles {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: v[v.len() - 1],
        }
    }
}

/// One allocator on one workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubjectResult {
    /// Which allocator.
    pub name: String,
    /// Allocations that failed during the workload.
    pub workload_alloc_failures: u64,
    /// Pageblocks holding both movable and non-movable blocks at the end of the load.
    pub mixed_pageblocks: u64,
    /// Pageblocks holding at least one long-lived non-movable page at rest.
    pub pinned_pageblocks: u64,
    /// Order-9 pass under load.
    pub under_load: HighAllocPass,
    /// Order-9 pass at rest.
    pub at_rest: HighAllocPass,
    /// Zone maps drawn at rest (PNG and SVG), if asked for.
    pub maps: Vec<String>,
    /// Free-blocks-per-order chart of the workload, if asked for.
    pub charts: Vec<String>,
    /// `buddyinfo()` over the workload: (operation, or for the trace workload its
    /// time in ns, free blocks per order).
    #[serde(skip)]
    pub samples: Vec<(u64, Vec<u64>)>,
}

/// One workload on every subject.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkloadResult {
    /// Short name.
    pub name: String,
    /// What it does, with its sizes.
    pub description: String,
    /// Pages of the zone.
    pub zone_pages: u64,
    /// Operations (allocations and frees) run.
    pub operations: u64,
    /// One entry per subject.
    pub subjects: Vec<SubjectResult>,
}

/// The benchmark's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragReport {
    /// The options.
    pub options: FragOptions,
    /// Synthetic workload.
    pub synthetic: WorkloadResult,
    /// Trace workload, if a trace was given.
    pub trace: Option<WorkloadResult>,
    /// What compaction costs per page moved.
    pub cost: CompactionCost,
}

// -----------------------------------------------------------------------------
// Subjects
// -----------------------------------------------------------------------------

/// An allocator the benchmark can drive.
trait Subject {
    fn alloc(&mut self, cpu: usize, mt: Migratetype, order: u8) -> Option<u64>;
    fn free(&mut self, cpu: usize, pfn: u64, order: u8);
    /// Per-CPU lists back to the buddy lists.
    fn settle(&mut self);
    /// Free blocks per order, if the allocator reports them.
    fn buddyinfo(&self) -> Option<Vec<u64>>;
    fn zone_allocator(&self) -> Option<&ZoneAllocator> {
        None
    }
    /// Where the block `alloc` returned `handle` for is now (compaction moves
    /// movable blocks; other subjects return frame numbers as handles).
    fn position(&self, handle: u64) -> u64 {
        handle
    }
}

fn gfp_for(mt: Migratetype) -> Gfp {
    match mt {
        Migratetype::Movable => Gfp::HIGHUSER_MOVABLE,
        Migratetype::Reclaimable => Gfp::KERNEL | Gfp::RECLAIMABLE,
        _ => Gfp::KERNEL,
    }
}

/// zonealloc as a benchmark subject, owned or borrowed (a replay's allocator).
struct ZoneSubject<Z: Borrow<ZoneAllocator>>(Z);

impl<Z: Borrow<ZoneAllocator>> Subject for ZoneSubject<Z> {
    fn alloc(&mut self, cpu: usize, mt: Migratetype, order: u8) -> Option<u64> {
        self.0
            .borrow()
            .alloc_pages_on(cpu, gfp_for(mt), Order(order))
            .ok()
            .map(|p| p.0)
    }
    fn free(&mut self, cpu: usize, pfn: u64, order: u8) {
        self.0
            .borrow()
            .free_pages_on(cpu, Pfn(pfn), Order(order))
            .expect("the benchmark frees only what it allocated");
    }
    fn settle(&mut self) {
        self.0.borrow().drain_all_pages();
    }
    fn buddyinfo(&self) -> Option<Vec<u64>> {
        zone_buddyinfo(self.0.borrow())
    }
    fn zone_allocator(&self) -> Option<&ZoneAllocator> {
        Some(self.0.borrow())
    }
}

/// Free blocks per order of the allocator's largest zone.
fn zone_buddyinfo(za: &ZoneAllocator) -> Option<Vec<u64>> {
    za.buddyinfo()
        .zones
        .into_iter()
        .max_by_key(|(_, b)| b.iter().enumerate().map(|(o, n)| n << o).sum::<u64>())
        .map(|z| z.1)
}

/// The owner of a subject's movable blocks: handle -> (current pfn, order), and the
/// handle at each pfn. Compaction moves blocks through it (abstract frames: there
/// are no contents to copy, only the references to switch).
#[derive(Default)]
struct BenchOwner {
    table: Mutex<OwnerTable>,
}

#[derive(Default)]
struct OwnerTable {
    block: HashMap<u64, (u64, u8)>,
    handle_at: HashMap<u64, u64>,
    next: u64,
}

/// Handles of movable blocks start here, above every frame number.
const HANDLE_BASE: u64 = 1 << 48;

impl OwnerTable {
    fn insert(&mut self, pfn: u64, order: u8) -> u64 {
        let h = HANDLE_BASE + self.next;
        self.next += 1;
        self.block.insert(h, (pfn, order));
        self.handle_at.insert(pfn, h);
        h
    }

    fn remove(&mut self, h: u64) -> Option<(u64, u8)> {
        let (p, o) = self.block.remove(&h)?;
        self.handle_at.remove(&p);
        Some((p, o))
    }
}

impl Migrate for BenchOwner {
    fn relocate(&self, old: Pfn, new: Pfn, order: Order) -> MigrateOutcome {
        let mut t = self.table.lock().expect("owner table");
        let Some(h) = t.handle_at.remove(&old.0) else {
            return MigrateOutcome::Refused;
        };
        t.handle_at.insert(new.0, h);
        t.block.insert(h, (new.0, order.0));
        MigrateOutcome::Moved
    }
}

/// zonealloc with a registered migrator: movable allocations are the owner's,
/// named by handles, and direct compaction may move them.
struct CompactSubject {
    za: ZoneAllocator,
    owner: Arc<BenchOwner>,
}

impl CompactSubject {
    fn new(config: Config) -> CompactSubject {
        let za = ZoneAllocator::new(config).expect("valid config");
        let owner = Arc::new(BenchOwner::default());
        za.set_migrator(Some(owner.clone()));
        CompactSubject { za, owner }
    }
}

impl Subject for CompactSubject {
    fn alloc(&mut self, cpu: usize, mt: Migratetype, order: u8) -> Option<u64> {
        let p = self
            .za
            .alloc_pages_on(cpu, gfp_for(mt), Order(order))
            .ok()?
            .0;
        if mt != Migratetype::Movable {
            return Some(p);
        }
        Some(
            self.owner
                .table
                .lock()
                .expect("owner table")
                .insert(p, order),
        )
    }
    fn free(&mut self, cpu: usize, h: u64, order: u8) {
        let p = if h >= HANDLE_BASE {
            let (p, o) = self
                .owner
                .table
                .lock()
                .expect("owner table")
                .remove(h)
                .expect("a live handle");
            debug_assert_eq!(o, order);
            p
        } else {
            h
        };
        self.za
            .free_pages_on(cpu, Pfn(p), Order(order))
            .expect("the benchmark frees only what it allocated");
    }
    fn settle(&mut self) {
        self.za.drain_all_pages();
    }
    fn buddyinfo(&self) -> Option<Vec<u64>> {
        zone_buddyinfo(&self.za)
    }
    fn zone_allocator(&self) -> Option<&ZoneAllocator> {
        Some(&self.za)
    }
    fn position(&self, h: u64) -> u64 {
        if h < HANDLE_BASE {
            return h;
        }
        self.owner.table.lock().expect("owner table").block[&h].0
    }
}

/// `buddy_system_allocator::FrameAllocator` with max order 10, like the zone.
struct BuddyPeer(FrameAllocator<{ MAX_ORDER as usize + 1 }>);

impl Subject for BuddyPeer {
    fn alloc(&mut self, _cpu: usize, _mt: Migratetype, order: u8) -> Option<u64> {
        self.0.alloc(1 << order).map(|p| p as u64)
    }
    fn free(&mut self, _cpu: usize, pfn: u64, order: u8) {
        self.0.dealloc(pfn as usize, 1 << order);
    }
    fn settle(&mut self) {}
    fn buddyinfo(&self) -> Option<Vec<u64>> {
        None
    }
}

// -----------------------------------------------------------------------------
// The synthetic workload
// -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Movable,
    Pinned,
    Short,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc {
        id: u32,
        cpu: u8,
        mt: Migratetype,
        order: u8,
    },
    Free {
        id: u32,
        cpu: u8,
    },
}

struct Workload {
    ops: Vec<Op>,
    /// Per id: class, migratetype, order.
    handles: Vec<(Class, Migratetype, u8)>,
}

/// A pool of live ids with O(1) random removal.
#[derive(Default)]
struct Pool {
    ids: Vec<u32>,
    pages: u64,
}

impl Pool {
    fn take_random(&mut self, rng: &mut SplitMix64) -> Option<u32> {
        if self.ids.is_empty() {
            return None;
        }
        let i = rng.below(self.ids.len() as u64) as usize;
        Some(self.ids.swap_remove(i))
    }
}

fn pick_order(rng: &mut SplitMix64, table: &[(u8, f64)]) -> u8 {
    let mut x = rng.unit();
    for &(o, p) in table {
        if x < p {
            return o;
        }
        x -= p;
    }
    table[0].0
}

/// Movable orders: mostly single pages, some folios, ~1% THPs (by count).
const MOVABLE_ORDERS: [(u8, f64); 6] = [
    (0, 0.86),
    (1, 0.04),
    (2, 0.04),
    (3, 0.03),
    (4, 0.02),
    (9, 0.01),
];
/// Long-lived kernel memory: slab pages, page tables, mostly order 0.
const PINNED_ORDERS: [(u8, f64); 4] = [(0, 0.85), (1, 0.08), (2, 0.05), (3, 0.02)];
/// Short-lived kernel memory.
const SHORT_ORDERS: [(u8, f64); 2] = [(0, 0.9), (1, 0.1)];

fn generate(o: &FragOptions, nr_pages: u64) -> Workload {
    let mut rng = SplitMix64::new(o.seed);
    let mut ops = Vec::new();
    let mut handles = Vec::new();
    let cpus = o.nr_cpus.clamp(1, 256) as u64;
    let steps = (o.ops_per_page * nr_pages as f64) as u64;
    let pinned_final = (o.pinned_percent / 100.0 * nr_pages as f64) as u64;
    let occupancy = (o.occupancy_percent / 100.0 * nr_pages as f64) as u64;
    let short_cap = nr_pages / 200;
    let mut movable = Pool::default();
    let mut short = Pool::default();
    let mut pinned_pages = 0u64;
    let new = |class, mt, order, rng: &mut SplitMix64, ops: &mut Vec<Op>, handles: &mut Vec<_>| {
        let id = handles.len() as u32;
        handles.push((class, mt, order));
        ops.push(Op::Alloc {
            id,
            cpu: rng.below(cpus) as u8,
            mt,
            order,
        });
        id
    };
    for s in 0..steps {
        // Long-lived unmovable/reclaimable memory grows evenly over the run.
        let pinned_target = pinned_final * (s + 1) / steps;
        while pinned_pages < pinned_target {
            let mt = if rng.chance(0.7) {
                Migratetype::Unmovable
            } else {
                Migratetype::Reclaimable
            };
            let order = pick_order(&mut rng, &PINNED_ORDERS);
            new(Class::Pinned, mt, order, &mut rng, &mut ops, &mut handles);
            pinned_pages += 1 << order;
        }
        // Short-lived unmovable allocations come and go.
        if rng.chance(0.03) {
            if short.pages >= short_cap {
                let id = short.take_random(&mut rng).expect("non-empty");
                short.pages -= 1 << handles[id as usize].2;
                ops.push(Op::Free {
                    id,
                    cpu: rng.below(cpus) as u8,
                });
            }
            let order = pick_order(&mut rng, &SHORT_ORDERS);
            let id = new(
                Class::Short,
                Migratetype::Unmovable,
                order,
                &mut rng,
                &mut ops,
                &mut handles,
            );
            short.ids.push(id);
            short.pages += 1 << order;
        }
        // Movable churn around the occupancy target.
        if movable.pages + pinned_pages + short.pages >= occupancy {
            if let Some(id) = movable.take_random(&mut rng) {
                movable.pages -= 1 << handles[id as usize].2;
                ops.push(Op::Free {
                    id,
                    cpu: rng.below(cpus) as u8,
                });
            }
        } else {
            let order = pick_order(&mut rng, &MOVABLE_ORDERS);
            let id = new(
                Class::Movable,
                Migratetype::Movable,
                order,
                &mut rng,
                &mut ops,
                &mut handles,
            );
            movable.ids.push(id);
            movable.pages += 1 << order;
        }
    }
    Workload { ops, handles }
}

/// A subject's run of the workload: where each handle lives.
struct Placement {
    pfn: Vec<Option<u64>>,
    failures: u64,
    samples: Vec<(u64, Vec<u64>)>,
}

fn run_ops(s: &mut dyn Subject, w: &Workload, samples: u64) -> Placement {
    let mut pfn = vec![None; w.handles.len()];
    let mut failures = 0;
    let every = (w.ops.len() as u64 / samples.max(1)).max(1);
    let mut out = Vec::new();
    for (i, op) in w.ops.iter().enumerate() {
        if samples > 0 && (i as u64).is_multiple_of(every) {
            if let Some(b) = s.buddyinfo() {
                out.push((i as u64, b));
            }
        }
        match *op {
            Op::Alloc { id, cpu, mt, order } => match s.alloc(cpu as usize, mt, order) {
                Some(p) => pfn[id as usize] = Some(p),
                None => failures += 1,
            },
            Op::Free { id, cpu } => {
                if let Some(p) = pfn[id as usize].take() {
                    s.free(cpu as usize, p, w.handles[id as usize].2);
                }
            }
        }
    }
    if let Some(b) = s.buddyinfo() {
        out.push((w.ops.len() as u64, b));
    }
    Placement {
        pfn,
        failures,
        samples: out,
    }
}

// -----------------------------------------------------------------------------
// Measuring
// -----------------------------------------------------------------------------

/// Free blocks per order of a binary buddy with full merging over `[0, nr_pages)`
/// whose allocated blocks are `allocated` (pfn relative to the zone start, order):
/// the maximal aligned free blocks, up to `MAX_ORDER`.
fn free_histogram(nr_pages: u64, allocated: impl Iterator<Item = (u64, u8)>) -> Vec<u64> {
    let mut used = vec![false; nr_pages as usize];
    for (p, o) in allocated {
        for f in p..(p + (1 << o)).min(nr_pages) {
            used[f as usize] = true;
        }
    }
    // prefix[i] = used frames below i.
    let mut prefix = vec![0u32; nr_pages as usize + 1];
    for i in 0..nr_pages as usize {
        prefix[i + 1] = prefix[i] + u32::from(used[i]);
    }
    let mut hist = vec![0u64; MAX_ORDER as usize + 1];
    fn walk(prefix: &[u32], start: u64, order: u8, end: u64, hist: &mut [u64]) {
        let len = 1u64 << order;
        if start >= end {
            return;
        }
        let stop = (start + len).min(end);
        let used = prefix[stop as usize] - prefix[start as usize];
        if start + len <= end && used == 0 {
            hist[order as usize] += 1;
        } else if used as u64 == stop - start {
            // Fully allocated.
        } else if order > 0 {
            walk(prefix, start, order - 1, end, hist);
            walk(prefix, start + len / 2, order - 1, end, hist);
        }
    }
    let top = 1u64 << MAX_ORDER;
    let mut s = 0;
    while s < nr_pages {
        walk(&prefix, s, MAX_ORDER, nr_pages, &mut hist);
        s += top;
    }
    hist
}

fn pageblocks_without(nr_pages: u64, allocated: impl Iterator<Item = (u64, u8)>) -> u64 {
    let nr_pb = nr_pages >> HIGHALLOC_ORDER;
    let mut busy = vec![false; nr_pb as usize];
    for (p, o) in allocated {
        let first = p >> HIGHALLOC_ORDER;
        let last = (p + (1 << o) - 1) >> HIGHALLOC_ORDER;
        for b in first..=last.min(nr_pb.saturating_sub(1)) {
            busy[b as usize] = true;
        }
    }
    busy.iter().filter(|&&b| !b).count() as u64
}

/// Order-9 allocations until the first failure. Returns the pass and the blocks.
fn highalloc_pass(
    s: &mut dyn Subject,
    nr_pages: u64,
    base: u64,
    held: &[(u64, u8)],
) -> (HighAllocPass, Vec<u64>) {
    s.settle();
    let hist = s
        .buddyinfo()
        .unwrap_or_else(|| free_histogram(nr_pages, held.iter().map(|&(p, o)| (p - base, o))));
    let free_pages: u64 = hist.iter().enumerate().map(|(o, n)| n << o).sum();
    let possible = free_pages >> HIGHALLOC_ORDER;
    let free_pageblocks = pageblocks_without(nr_pages, held.iter().map(|&(p, o)| (p - base, o)));
    let mut got = Vec::new();
    let stats = |s: &dyn Subject| {
        s.zone_allocator()
            .map(|za| za.compaction_stats())
            .unwrap_or_default()
    };
    let before = stats(s);
    let mut lat = Vec::new();
    let t0 = Instant::now();
    loop {
        let a = Instant::now();
        let r = s.alloc(0, Migratetype::Movable, HIGHALLOC_ORDER);
        lat.push(a.elapsed().as_nanos() as u64);
        match r {
            Some(p) => got.push(p),
            None => break,
        }
        if got.len() as u64 > nr_pages >> HIGHALLOC_ORDER {
            break;
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / lat.len() as f64;
    let after = stats(s);
    let obtained = got.len() as u64;
    let pages_moved = after.pgmigrate_success - before.pgmigrate_success;
    (
        HighAllocPass {
            free_pages,
            possible,
            free_pageblocks,
            obtained,
            success_percent: if possible > 0 {
                100.0 * obtained as f64 / possible as f64
            } else {
                0.0
            },
            unusable_index_order9: unusable_free_index(&hist, HIGHALLOC_ORDER as usize) as f64
                / 1000.0,
            ns_per_attempt: ns,
            latency_ns: Percentiles::of(lat),
            pages_moved,
            moved_per_block: if obtained > 0 {
                pages_moved as f64 / obtained as f64
            } else {
                0.0
            },
            migrate_scanned: after.compact_migrate_scanned - before.compact_migrate_scanned,
            isolated: after.compact_isolated - before.compact_isolated,
            compact_stall: after.compact_stall - before.compact_stall,
        },
        got,
    )
}

fn mixed_pageblocks(blocks: impl Iterator<Item = (u64, u8, bool)>) -> u64 {
    use std::collections::HashMap;
    let mut m: HashMap<u64, (bool, bool)> = HashMap::new();
    for (p, o, movable) in blocks {
        if o >= HIGHALLOC_ORDER {
            continue;
        }
        let e = m.entry(p >> HIGHALLOC_ORDER).or_default();
        if movable {
            e.0 = true;
        } else {
            e.1 = true;
        }
    }
    m.values().filter(|&&(a, b)| a && b).count() as u64
}

fn pinned_pageblocks(blocks: impl Iterator<Item = (u64, u8)>) -> u64 {
    let mut v: Vec<u64> = blocks.map(|(p, _)| p >> HIGHALLOC_ORDER).collect();
    v.sort_unstable();
    v.dedup();
    v.len() as u64
}

/// Where to draw pictures, and a file-name prefix.
#[derive(Clone, Debug)]
pub struct PictureOut {
    /// Directory.
    pub dir: PathBuf,
}

/// What to draw for one subject.
struct Picture<'a> {
    file: &'a str,
    /// The subject's name (it may hold a colon: `mobility_grouping: false`).
    name: &'a str,
    title: &'a str,
    note: Option<String>,
    owners: &'a [(Pfn, Order, Migratetype)],
    /// `(x, free blocks per order)`: x is an operation count, or trace
    /// nanoseconds with `XAxis::TraceSeconds`.
    samples: &'a [(u64, Vec<u64>)],
    x: crate::maps::XAxis<'a>,
}

fn draw(out: Option<&PictureOut>, s: &dyn Subject, pic: &Picture<'_>, r: &mut SubjectResult) {
    let Picture {
        file,
        name,
        title,
        owners,
        samples,
        x,
        ..
    } = *pic;
    let Some(out) = out else { return };
    if let Some(za) = s.zone_allocator() {
        for ext in ["png", "svg"] {
            let path = out.dir.join(format!("{file}-map.{ext}"));
            let opts = crate::maps::MapOptions {
                title: title.to_string(),
                owners,
                note: pic.note.clone(),
                ..crate::maps::MapOptions::default()
            };
            match crate::maps::render_zone_map(za, &path, &opts) {
                Ok(_) => r.maps.push(path.display().to_string()),
                Err(e) => eprintln!("zone map {}: {e}", path.display()),
            }
        }
    }
    if !samples.is_empty() {
        let path = out.dir.join(format!("{file}-buddyinfo.png"));
        let series: Vec<BuddySample> = samples
            .iter()
            .map(|(i, b)| BuddySample {
                event: *i,
                trace_time_ns: *i,
                free_blocks: vec![b.clone()],
            })
            .collect();
        let chart_title = format!(
            "Free blocks per order, {} workload, {name}",
            file.split('-').next().unwrap_or(file),
        );
        match crate::maps::render_buddyinfo_chart(&series, 0, &path, &chart_title, x) {
            Ok(()) => r.charts.push(path.display().to_string()),
            Err(e) => eprintln!("chart {}: {e}", path.display()),
        }
    }
}

fn synthetic(o: &FragOptions, out: Option<&PictureOut>) -> WorkloadResult {
    let nr_pages = (o.zone_bytes >> 12) & !((1 << MAX_ORDER) - 1);
    let w = generate(o, nr_pages);
    let mut subjects: Vec<(String, String, Box<dyn Subject>)> = Vec::new();
    let cfg = |grouping: bool| Config {
        nr_cpus: o.nr_cpus.max(1),
        mobility_grouping: grouping,
        ..Config::single_zone(ZoneType::Normal, Pfn(0), nr_pages)
    };
    subjects.push((
        "zonealloc, mobility grouping (default Config)".into(),
        "synthetic-grouping".into(),
        Box::new(ZoneSubject(
            ZoneAllocator::new(cfg(true)).expect("valid config"),
        )),
    ));
    subjects.push((
        "zonealloc, mobility grouping + compaction (migrator)".into(),
        "synthetic-compaction".into(),
        Box::new(CompactSubject::new(cfg(true))),
    ));
    subjects.push((
        "zonealloc, mobility_grouping: false".into(),
        "synthetic-nogrouping".into(),
        Box::new(ZoneSubject(
            ZoneAllocator::new(cfg(false)).expect("valid config"),
        )),
    ));
    if o.peer {
        let mut fa = FrameAllocator::new();
        fa.add_frame(0, nr_pages as usize);
        subjects.push((
            "buddy_system_allocator 0.13 FrameAllocator (no grouping)".into(),
            "synthetic-peer".into(),
            Box::new(BuddyPeer(fa)),
        ));
    }
    let mut results = Vec::new();
    for (name, file, mut s) in subjects {
        let placement = run_ops(s.as_mut(), &w, o.samples);
        let live = |class: Option<Class>| -> Vec<(u64, u8)> {
            placement
                .pfn
                .iter()
                .enumerate()
                .filter_map(|(id, p)| {
                    let (c, _, order) = w.handles[id];
                    p.filter(|_| class.is_none_or(|k| k == c))
                        .map(|p| (p, order))
                })
                .collect()
        };
        let mixed = mixed_pageblocks(placement.pfn.iter().enumerate().filter_map(|(id, p)| {
            p.map(|p| {
                (
                    s.position(p),
                    w.handles[id].2,
                    w.handles[id].0 == Class::Movable,
                )
            })
        }));
        // Pass 1: under load (positions as they are now: compaction moves blocks).
        let held: Vec<(u64, u8)> = live(None)
            .into_iter()
            .map(|(h, o)| (s.position(h), o))
            .collect();
        let (under_load, got) = highalloc_pass(s.as_mut(), nr_pages, 0, &held);
        for p in got {
            s.free(0, p, HIGHALLOC_ORDER);
        }
        // Reclaim: free the movable and short-lived memory.
        for (id, p) in placement.pfn.iter().enumerate() {
            let (c, _, order) = w.handles[id];
            if let (Some(p), true) = (p, c != Class::Pinned) {
                s.free(0, *p, order);
            }
        }
        let pinned = live(Some(Class::Pinned));
        let pinned_pbs = pinned_pageblocks(pinned.iter().copied());
        s.settle();
        let mut r = SubjectResult {
            name,
            workload_alloc_failures: placement.failures,
            mixed_pageblocks: mixed,
            pinned_pageblocks: pinned_pbs,
            under_load,
            at_rest: HighAllocPass::default(),
            maps: Vec::new(),
            charts: Vec::new(),
            samples: placement.samples,
        };
        let owners: Vec<(Pfn, Order, Migratetype)> = placement
            .pfn
            .iter()
            .enumerate()
            .filter_map(|(id, p)| {
                let (c, mt, order) = w.handles[id];
                p.filter(|_| c == Class::Pinned)
                    .map(|p| (Pfn(p), Order(order), mt))
            })
            .collect();
        let title = format!(
            "{}: {} MiB zone at rest ({}% pinned, seed {})",
            r.name,
            nr_pages >> 8,
            o.pinned_percent,
            o.seed
        );
        let samples = r.samples.clone();
        let name = r.name.clone();
        let pic = Picture {
            file: &file,
            name: &name,
            title: &title,
            note: None,
            owners: &owners,
            samples: &samples,
            x: crate::maps::XAxis::Events("operations of the workload"),
        };
        draw(out, s.as_ref(), &pic, &mut r);
        // Pass 2: at rest.
        let (at_rest, _) = highalloc_pass(s.as_mut(), nr_pages, 0, &pinned);
        r.at_rest = at_rest;
        results.push(r);
    }
    WorkloadResult {
        name: "synthetic".into(),
        description: format!(
            "seed {}, zone {} MiB ({} pages), movable churn at {}% occupancy for {} ops/page, long-lived unmovable+reclaimable grown to {}%, short-lived unmovable up to 0.5%, {} CPUs",
            o.seed,
            nr_pages >> 8,
            nr_pages,
            o.occupancy_percent,
            o.ops_per_page,
            o.pinned_percent,
            o.nr_cpus
        ),
        zone_pages: nr_pages,
        operations: w.ops.len() as u64,
        subjects: results,
    }
}

// -----------------------------------------------------------------------------
// The trace workload
// -----------------------------------------------------------------------------

/// Largest number of pages the trace holds at once (allocations it made, minus
/// their frees), by the same rules as the replay.
pub fn peak_live_pages(records: &[Record]) -> u64 {
    use std::collections::HashMap;
    let mut live: HashMap<u64, u8> = HashMap::new();
    let (mut cur, mut peak) = (0u64, 0u64);
    for r in records {
        match r.event {
            Event::Alloc {
                pfn: Some(p),
                order,
                ..
            } => {
                if let Some(o) = live.insert(p, order) {
                    cur -= 1 << o;
                }
                cur += 1 << order;
                peak = peak.max(cur);
            }
            Event::Free { pfn, .. } => {
                if let Some(o) = live.remove(&pfn) {
                    cur -= 1 << o;
                }
            }
            _ => {}
        }
    }
    peak
}

/// Reads the whole trace of the trace workload (before any work, so a bad file is
/// refused at once).
fn read_trace(path: &Path) -> Result<Vec<Record>, ReplayError> {
    let read = ReadOptions {
        nr_cpus: Some(MAX_AUTO_CPUS),
        ..ReadOptions::default()
    };
    let (records, stats) = read_all(path, read)?;
    if let Some(note) = stats.skipped_note(&path.display().to_string()) {
        eprintln!("{note}");
    }
    Ok(records)
}

fn trace_workload(
    path: &Path,
    records: &[Record],
    o: &FragOptions,
    out: Option<&PictureOut>,
) -> Result<WorkloadResult, ReplayError> {
    let peak = peak_live_pages(records);
    // Room for the peak and a fifth more, and never less than a few max-order blocks
    // (a trace of frees only holds nothing at its peak).
    let nr_pages = ((peak as f64 * 1.2) as u64)
        .max(4 << MAX_ORDER)
        .next_multiple_of(1 << MAX_ORDER);
    let start = 1u64 << 20;
    let layout = ZoneLayout::single(ZoneType::Normal, start, nr_pages);
    let nr_cpus = records
        .iter()
        .map(|r| r.cpu as usize + 1)
        .max()
        .unwrap_or(1);
    let mut subjects = Vec::new();
    for (grouping, compaction, name, file) in [
        (
            true,
            false,
            "zonealloc, mobility grouping (default Config)",
            "trace-grouping",
        ),
        (
            true,
            true,
            "zonealloc, grouping + compaction (migrator after replay)",
            "trace-compaction",
        ),
        (
            false,
            false,
            "zonealloc, mobility_grouping: false",
            "trace-nogrouping",
        ),
    ] {
        let mut config = layout.config(HoleModel::Managed, nr_cpus);
        config.mobility_grouping = grouping;
        let every = (records.len() as u64 / o.samples.max(1)).max(1);
        let mut rp = Replayer::new(config, every)?;
        rp.replay(records);
        // With compaction, the live movable blocks pass to an owner that compaction
        // moves them through; the replayer's own table cannot follow a moved block,
        // so the migrator is registered only once the replay is over.
        let owner = compaction.then(|| {
            let owner = Arc::new(BenchOwner::default());
            {
                let mut t = owner.table.lock().expect("owner table");
                for (p, ord, mt) in rp.live_blocks() {
                    if mt == Migratetype::Movable {
                        t.insert(p.0, ord.0);
                    }
                }
            }
            rp.allocator().set_migrator(Some(owner.clone()));
            owner
        });
        let held: Vec<(u64, u8)> = rp.live_blocks().map(|(p, ord, _)| (p.0, ord.0)).collect();
        let mixed = mixed_pageblocks(
            rp.live_blocks()
                .map(|(p, ord, mt)| (p.0 - start, ord.0, mt == Migratetype::Movable)),
        );
        let failures = rp.counts().alloc_failures;
        let samples: Vec<(u64, Vec<u64>)> = rp
            .samples()
            .iter()
            .map(|s| {
                let biggest = s
                    .free_blocks
                    .iter()
                    .max_by_key(|b| b.len())
                    .cloned()
                    .unwrap_or_default();
                (s.trace_time_ns, biggest)
            })
            .collect();
        let under_load = {
            let mut s = ZoneSubject(rp.allocator());
            let (pass, got) = highalloc_pass(&mut s, nr_pages, start, &held);
            for &p in &got {
                s.free(0, p, HIGHALLOC_ORDER);
            }
            pass
        };
        match &owner {
            Some(owner) => {
                // Reclaim through the owner, which knows where its blocks are now.
                let za = rp.allocator();
                za.set_migrator(None);
                let blocks: Vec<(u64, u8)> = owner
                    .table
                    .lock()
                    .expect("owner table")
                    .block
                    .drain()
                    .map(|(_, b)| b)
                    .collect();
                for (p, ord) in blocks {
                    za.free_pages(Pfn(p), Order(ord))
                        .expect("the owner frees only its blocks");
                }
                za.drain_all_pages();
            }
            None => {
                rp.free_live(&[Migratetype::Movable]);
            }
        }
        let unmovable = || rp.live_blocks().filter(|b| b.2 != Migratetype::Movable);
        let pinned: Vec<(u64, u8)> = unmovable().map(|(p, ord, _)| (p.0, ord.0)).collect();
        let owners: Vec<(Pfn, Order, Migratetype)> = unmovable().collect();
        let mut r = SubjectResult {
            name: name.into(),
            workload_alloc_failures: failures,
            mixed_pageblocks: mixed,
            pinned_pageblocks: pinned_pageblocks(pinned.iter().map(|&(p, o)| (p - start, o))),
            under_load,
            at_rest: HighAllocPass::default(),
            maps: Vec::new(),
            charts: Vec::new(),
            samples,
        };
        let mut s = ZoneSubject(rp.allocator());
        let title = format!("{name}: trace replayed, movable memory freed");
        let samples = r.samples.clone();
        let pic = Picture {
            file,
            name,
            title: &title,
            note: Some(
                "zonealloc's own placement, from an empty zone;\n\
                 a trace gives the order of use, not where the kernel put each page"
                    .into(),
            ),
            owners: &owners,
            samples: &samples,
            x: crate::maps::XAxis::TraceSeconds,
        };
        draw(out, &s, &pic, &mut r);
        let (at_rest, _) = highalloc_pass(&mut s, nr_pages, start, &pinned);
        r.at_rest = at_rest;
        subjects.push(r);
    }
    Ok(WorkloadResult {
        name: "trace".into(),
        description: format!(
            "{} replayed into one Normal zone of {} pages (1.2x the trace's peak of {} live pages), {} CPUs; at rest = the trace's live movable blocks freed",
            path.display(),
            nr_pages,
            peak,
            nr_cpus
        ),
        zone_pages: nr_pages,
        operations: records.len() as u64,
        subjects,
    })
}

/// Runs the benchmark: the synthetic workload on every subject and, if
/// `o.trace` is set, the trace workload; draws maps and charts into `out`.
///
/// # Errors
/// An option out of range (`FragOptions::check`), reading the trace (see
/// `TraceReader`), or a trace that makes no valid zone.
pub fn run(o: &FragOptions, out: Option<&PictureOut>) -> Result<FragReport, ReplayError> {
    o.check()?;
    let records = o.trace.as_deref().map(read_trace).transpose()?;
    let synthetic = synthetic(o, out);
    let trace = match (&o.trace, &records) {
        (Some(p), Some(r)) => Some(trace_workload(p, r, o, out)?),
        _ => None,
    };
    let cost = compaction_cost(o.zone_bytes.min(256 << 20));
    Ok(FragReport {
        options: o.clone(),
        synthetic,
        trace,
        cost,
    })
}

// -----------------------------------------------------------------------------
// The cost of compaction
// -----------------------------------------------------------------------------

/// What compaction costs: a zone whose every pageblock keeps one movable page in
/// four compacted whole (`compact_zone(None)`), over abstract frames (switching
/// references only) and over a populated arena (the 4 KiB copies too). The owner
/// keeps a hash table of its pages, as a real one would.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompactionCost {
    /// Pages of the zone.
    pub zone_pages: u64,
    /// One row per backend.
    pub rows: Vec<CostRow>,
}

/// One backend's run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostRow {
    /// The backend.
    pub backend: String,
    /// Pages moved.
    pub pages_moved: u64,
    /// Wall time of the run, ns.
    pub ns: u64,
    /// `ns / pages_moved`.
    pub ns_per_page: f64,
    /// `compact_migrate_scanned`, `compact_free_scanned`, `compact_isolated`.
    pub migrate_scanned: u64,
    /// See `migrate_scanned`.
    pub free_scanned: u64,
    /// See `migrate_scanned`.
    pub isolated: u64,
    /// Order-9 blocks free before and after.
    pub order9_before: u64,
    /// See `order9_before`.
    pub order9_after: u64,
}

/// An owner that copies through the backend (the trait's default) and keeps
/// pfn -> tag, so the run pays for the table an owner needs.
#[derive(Default)]
struct CopyOwner {
    live: Mutex<HashMap<u64, u64>>,
}

impl Migrate for CopyOwner {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let mut t = self.live.lock().expect("owner table");
        match t.remove(&old.0) {
            Some(tag) => {
                t.insert(new.0, tag);
                MigrateOutcome::Moved
            }
            None => MigrateOutcome::Refused,
        }
    }
}

fn cost_run<B: zonealloc::Backend>(za: &ZoneAllocator<B>, backend: &str) -> CostRow {
    let owner = CopyOwner::default();
    let mut got = Vec::new();
    while let Ok(p) = za.alloc_pages_on(0, Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
        got.push(p);
    }
    {
        let mut t = owner.live.lock().expect("owner table");
        for p in got {
            if p.0 % 4 == 0 {
                t.insert(p.0, p.0);
            } else {
                za.free_pages_on(0, p, Order(0)).expect("allocated");
            }
        }
    }
    za.drain_all_pages();
    let order9 = |za: &ZoneAllocator<B>| {
        za.buddyinfo()
            .zones
            .iter()
            .map(|(_, b)| {
                b.iter()
                    .skip(HIGHALLOC_ORDER as usize)
                    .enumerate()
                    .map(|(k, n)| n << k)
                    .sum::<u64>()
            })
            .sum::<u64>()
    };
    let before = order9(za);
    let id = za.zone_id_of(Pfn(0)).expect("zone");
    let t0 = Instant::now();
    let r = za.compact_zone(id, None, &owner).expect("valid zone");
    let ns = t0.elapsed().as_nanos() as u64;
    CostRow {
        backend: backend.into(),
        pages_moved: r.pages_moved,
        ns,
        ns_per_page: ns as f64 / r.pages_moved.max(1) as f64,
        migrate_scanned: r.migrate_scanned,
        free_scanned: r.free_scanned,
        isolated: r.isolated,
        order9_before: before,
        order9_after: order9(za),
    }
}

/// Runs the cost measurement on a zone of `zone_bytes`.
pub fn compaction_cost(zone_bytes: u64) -> CompactionCost {
    let nr_pages = (zone_bytes >> 12) & !((1 << MAX_ORDER) - 1);
    let cfg = Config {
        nr_cpus: 1,
        ..Config::single_zone(ZoneType::Normal, Pfn(0), nr_pages)
    };
    let mut rows = Vec::new();
    let za = ZoneAllocator::new(cfg.clone()).expect("valid config");
    rows.push(cost_run(&za, "abstract frames (references only)"));
    // Populated up front, so that the copies are timed without first-touch faults.
    let opts = ArenaOptions {
        populate: true,
        ..ArenaOptions::default()
    };
    match ZoneAllocator::with_arena(cfg, opts) {
        Ok(za) => rows.push(cost_run(&za, "arena (4 KiB copied per page)")),
        Err(e) => eprintln!("fragbench: no arena for the cost run: {e}"),
    }
    CompactionCost {
        zone_pages: nr_pages,
        rows,
    }
}

impl fmt::Display for WorkloadResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "workload {}: {}", self.name, self.description)?;
        writeln!(f, "  {} operations", self.operations)?;
        writeln!(
            f,
            "  {:<66} {:>7} {:>7} {:>8} | {:>10} {:>7} {:>8} {:>8} {:>6} {:>9} {:>10} {:>10} {:>10}",
            "allocator",
            "fails",
            "mixed",
            "pinned",
            "pass",
            "free pb",
            "possible",
            "obtained",
            "U(9)",
            "moved/blk",
            "p50 ns",
            "p99 ns",
            "max ns"
        )?;
        for s in &self.subjects {
            for (label, p) in [("under load", &s.under_load), ("at rest", &s.at_rest)] {
                let first = label == "under load";
                writeln!(
                    f,
                    "  {:<66} {:>7} {:>7} {:>8} | {:>10} {:>7} {:>8} {:>8} {:>6.3} {:>9.1} {:>10} {:>10} {:>10}   success {:5.1}%",
                    if first { s.name.as_str() } else { "" },
                    if first { s.workload_alloc_failures.to_string() } else { String::new() },
                    if first { s.mixed_pageblocks.to_string() } else { String::new() },
                    if first { String::new() } else { s.pinned_pageblocks.to_string() },
                    label,
                    p.free_pageblocks,
                    p.possible,
                    p.obtained,
                    p.unusable_index_order9,
                    p.moved_per_block,
                    p.latency_ns.p50,
                    p.latency_ns.p99,
                    p.latency_ns.max,
                    p.success_percent
                )?;
                if p.compact_stall > 0 {
                    writeln!(
                        f,
                        "  {:<66} {:>7} {:>7} {:>8} |   compaction: {} direct runs, {} pages moved, compact_migrate_scanned {}, compact_isolated {}",
                        "", "", "", "", p.compact_stall, p.pages_moved, p.migrate_scanned, p.isolated
                    )?;
                }
            }
        }
        for s in &self.subjects {
            for m in s.maps.iter().chain(&s.charts) {
                writeln!(f, "  picture: {m}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for CompactionCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "compaction cost: compact_zone(None) over a {}-page zone whose every pageblock keeps one movable page in four",
            self.zone_pages
        )?;
        writeln!(
            f,
            "  {:<36} {:>9} {:>12} {:>10} {:>14} {:>14} {:>12} {:>14}",
            "backend",
            "moved",
            "ms",
            "ns/page",
            "migr. scanned",
            "free scanned",
            "isolated",
            "order-9 free"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "  {:<36} {:>9} {:>12.2} {:>10.1} {:>14} {:>14} {:>12} {:>7} -> {:<5}",
                r.backend,
                r.pages_moved,
                r.ns as f64 / 1e6,
                r.ns_per_page,
                r.migrate_scanned,
                r.free_scanned,
                r.isolated,
                r.order9_before,
                r.order9_after
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for FragReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fragmentation benchmark (stress-highalloc analogue): order-9 blocks with GFP_HIGHUSER_MOVABLE until the first failure"
        )?;
        writeln!(
            f,
            "  success = obtained / floor(free pages / 512); U(9) = unusable free space index at order 9 before the pass;"
        )?;
        writeln!(
            f,
            "  mixed = pageblocks holding movable and non-movable blocks under load; pinned = pageblocks holding a long-lived non-movable page at rest; free pb = pageblocks with nothing allocated\n"
        )?;
        writeln!(
            f,
            "  moved/blk = pages compaction moved per order-9 block obtained; p50/p99/max = latency of each order-9 attempt of the pass\n"
        )?;
        write!(f, "{}", self.synthetic)?;
        if let Some(t) = &self.trace {
            writeln!(f)?;
            write!(f, "{t}")?;
        }
        writeln!(f)?;
        write!(f, "{}", self.cost)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_histogram_is_the_maximal_aligned_blocks() {
        // 2048 frames, frame 5 allocated: order-10 block 1024..2048 free, and
        // 0..1024 minus frame 5 = 4 + 1 (frame 4) + ... as a buddy would hold it.
        let h = free_histogram(2048, [(5u64, 0u8)].into_iter());
        let pages: u64 = h.iter().enumerate().map(|(o, n)| n << o).sum();
        assert_eq!(pages, 2047);
        assert_eq!(h[10], 1);
        assert_eq!(h[0], 1); // frame 4
        assert_eq!(h[1], 1); // frames 6..8
        assert_eq!(h[2], 1); // frames 0..4
        assert!(h[3..10].iter().all(|&n| n == 1));
    }

    #[test]
    fn workload_is_a_function_of_the_seed() {
        let o = FragOptions {
            zone_bytes: 16 << 20,
            ..FragOptions::default()
        };
        let a = generate(&o, 4096);
        let b = generate(&o, 4096);
        assert_eq!(a.ops.len(), b.ops.len());
        assert_eq!(a.handles, b.handles);
    }
}
