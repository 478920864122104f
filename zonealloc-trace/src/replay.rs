//! Replaying a kernel page-allocator trace into a zonealloc instance.
//!
//! Top layer: reads records through `reader`, drives a `ZoneAllocator` through its
//! public API only, and reports. Each event runs on the CPU the trace names
//! (`alloc_pages_on` / `free_pages_on`).
//!
//! # What each event does
//!
//! | event | replay |
//! |---|---|
//! | `mm_page_alloc` | `alloc_pages_on(cpu, gfp, order)`; the trace pfn is mapped to zonealloc's |
//! | `mm_page_free` | `free_pages_on(cpu, mapped pfn, order)` |
//! | `mm_page_free_batched` | nothing: the same free as its `mm_page_free` (counted) |
//! | `mm_page_alloc_zone_locked` | the kernel's own refill (counted, compared); frees a block still held there |
//! | `mm_page_pcpu_drain` | the kernel's own flush (counted, compared); frees a block still held there |
//! | `mm_page_alloc_extfrag` | nothing: the kernel's own fallback (counted, compared) |
//!
//! The gfp flags are the trace's, with the mobility bits set from its `migratetype`
//! field (`gfp_names::effective_gfp`).
//!
//! # Starting where the traced machine was
//!
//! A replay into a fresh allocator starts with empty per-CPU lists, and every
//! allocation of the first thousands refills them; the traced kernel had thousands
//! of pages on them. With `ReplayOptions::warm` (the default) the replay starts from
//! the machine's zoneinfo instead: its watermarks (`min_free_kbytes`, which sets each
//! list's `high_min`), each CPU's `count` split between the list orders by what the
//! trace's first refills show (`warm_state`), and each CPU's `high` grown toward the
//! zoneinfo's (`Replayer::warm_start`). The free-page count is not copied: a
//! snapshot is rarely of the trace's first instant, and a zone filled to it would run
//! dry where the kernel did not.
//!
//! # Frames the trace does not explain
//!
//! A trace is a window: blocks freed in it may have been allocated before it began,
//! and perf drops events when its buffer overflows. So:
//! * a free of a pfn with no mapping is a *pre-trace free*: the kernel freed it like
//!   any other block of its order (onto a per-CPU list where the order has one, else
//!   to the buddy lists), so (warm) the replay frees an aligned block of the same
//!   order, carved from a pool of pages standing for pre-trace memory, on the same
//!   CPU with `free_contig_range_on` (cold: counted, skipped);
//! * a free of part of a mapped block (a `split_page()`d block freed page by page) is
//!   replayed as `split_page` of the mapped block, then frees of the pages named;
//! * the kernel reusing frames the replay still holds means their free was lost: an
//!   allocation at the same head (an *implicit free*) or overlapping a held block, a
//!   refill or high-order take (`mm_page_alloc_zone_locked`), or a flush
//!   (`mm_page_pcpu_drain`) of them frees the held blocks first, on that CPU, when
//!   the event is seen;
//! * an allocation the kernel failed (`pfn=-1`) is counted and not replayed; one that
//!   fails in zonealloc is counted, and its later free skipped.
//!
//! # Timing
//!
//! Records are parsed into a compact `Vec` a chunk at a time (65,536 by default, 3 MB
//! that stay in cache), then replayed; only the replay loop is timed, never the
//! parsing, and never the `buddyinfo()` samples taken between segments for the
//! charts. The report also gives the end-to-end time, file opened to last event.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use zonealloc::{
    pcp_order_slot, unusable_free_index, Config, ConfigError, Gfp, Migratetype, Order, PcpCpuStats,
    Pfn, ZoneAllocator, MIGRATE_TYPES, PCP_ORDER_SLOTS,
};

use crate::action::Action;
use crate::compare::{Fallbacks, Moment, ShapeComparison};
use crate::event::{EventCounts, EventKind, Record};
use crate::kpage::PageLayout;
use crate::kstate::{type_index, Shape, Snapshots, ZoneShape, TYPES};
use crate::layout::{HoleModel, ZoneLayout};
use crate::reader::{ParseStats, ReadOptions, TraceError, TraceReader};
use crate::start::{Pretrace, StartPlan, StartReport};

// -----------------------------------------------------------------------------
// Options and errors
// -----------------------------------------------------------------------------

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The zones to replay into.
    pub layout: ZoneLayout,
    /// How zoneinfo's missing pages become holes.
    pub holes: HoleModel,
    /// CPUs; `None`: the layout's, else the largest CPU id in the first chunk plus one
    /// (at most `MAX_AUTO_CPUS`), as `run_with_state` says.
    pub nr_cpus: Option<usize>,
    /// zonealloc's mobility grouping (default on, as in Linux).
    pub mobility_grouping: bool,
    /// Malformed-line handling.
    pub read: ReadOptions,
    /// Records parsed per timed chunk.
    pub chunk_events: usize,
    /// Events between two `buddyinfo()` samples (0: no samples). The interval
    /// doubles whenever 1,000 samples have been taken.
    pub sample_every: u64,
    /// Stop after this many records.
    pub max_events: Option<u64>,
    /// Start from the traced machine's state where the layout gives it: the per-CPU
    /// lists filled to its zoneinfo's `count:` (see `Replayer::warm_start`), and
    /// pre-trace frees replayed from a pool of pages (`Replayer::set_pretrace_pool`).
    /// Off: empty lists, pre-trace frees skipped.
    pub warm: bool,
    /// Decay each CPU's per-CPU `high` at each whole second of trace time
    /// (`Replayer::set_decay`), as Linux's vmstat worker does (`decay_pcp_high()`):
    /// lists a burst grew shrink back, and their pages go back to the buddy lists.
    pub decay: bool,
    /// The kernel's own state to start from and to compare with (a capture's
    /// `layout.txt.xz`, `pagetypeinfo.txt`, `snapshots.txt`): with it and `warm`,
    /// the replay starts where the kernel was when its layout was read (`start`)
    /// and reports its free memory beside the kernel's (`compare`).
    pub start: Option<StartFiles>,
    /// Seed of the order the warm start frees the kernel's free blocks in (their
    /// order on the kernel's lists is not known).
    pub start_seed: u64,
}

/// The files of a capture that give the kernel's own state (see
/// `traces/capture.sh`).
#[derive(Clone, Debug)]
pub struct StartFiles {
    /// The page layout when the trace started.
    pub page: PageLayout,
    /// buddyinfo and pagetypeinfo read right after it.
    pub at_start: Shape,
    /// The once-a-second snapshots and the end, when captured.
    pub snapshots: Option<Snapshots>,
}

impl StartFiles {
    /// The capture's files in `dir`: `layout.txt.xz` (or `layout.txt`),
    /// `buddyinfo.txt` and `pagetypeinfo.txt`, and `snapshots.txt` if there.
    /// `Ok(None)` when there is no layout file.
    ///
    /// # Errors
    /// A file that is there but does not read or parse.
    pub fn in_dir(dir: &Path) -> Result<Option<StartFiles>, String> {
        let layout = ["layout.txt.xz", "layout.txt"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.exists());
        let Some(layout) = layout else {
            return Ok(None);
        };
        let page = PageLayout::read(&layout).map_err(|e| e.to_string())?;
        let read = |n: &str| {
            let p = dir.join(n);
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let mut at_start =
            crate::kstate::parse_buddyinfo(&read("buddyinfo.txt")?).map_err(|e| e.to_string())?;
        crate::kstate::add_pagetypeinfo(&mut at_start, &read("pagetypeinfo.txt")?)
            .map_err(|e| e.to_string())?;
        at_start.time_ns = page.end_ns.unwrap_or(0);
        let snaps = dir.join("snapshots.txt");
        let snapshots = if snaps.exists() {
            Some(Snapshots::read(&snaps).map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(Some(StartFiles {
            page,
            at_start,
            snapshots,
        }))
    }
}

impl Default for ReplayOptions {
    fn default() -> ReplayOptions {
        ReplayOptions {
            layout: ZoneLayout::linux_6_18_trace_machine(),
            holes: HoleModel::Managed,
            nr_cpus: None,
            mobility_grouping: true,
            read: ReadOptions::default(),
            chunk_events: 1 << 16,
            sample_every: 2000,
            max_events: None,
            warm: true,
            decay: true,
            start: None,
            start_seed: 1,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug)]
pub enum ReplayError {
    /// Reading the trace failed.
    Trace(TraceError),
    /// The layout made no valid allocator.
    Config(ConfigError),
    /// An option out of its range (what is wrong, and the range).
    Options(String),
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Trace(e) => e.fmt(f),
            ReplayError::Config(e) => write!(f, "zone layout: {e}"),
            ReplayError::Options(e) => write!(f, "bad option: {e}"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<TraceError> for ReplayError {
    fn from(e: TraceError) -> ReplayError {
        ReplayError::Trace(e)
    }
}

impl From<ConfigError> for ReplayError {
    fn from(e: ConfigError) -> ReplayError {
        ReplayError::Config(e)
    }
}

// -----------------------------------------------------------------------------
// The replay state
// -----------------------------------------------------------------------------

/// The first whole second of trace time after `t`: when the vmstat worker next
/// runs. Linux queues it with `round_jiffies_relative(HZ)`, which rounds the
/// timer to a whole second of jiffies (less a skew of 3 jiffies per CPU number).
/// That the trace clock's whole seconds are close to jiffies' is observed, not
/// derived (jiffies start at `INITIAL_JIFFIES`, not at 0): in the tuning traces the
/// worker's flushes (`kworker` drains of at most `batch << 5` pages) fall 30 to
/// 110 ms past a whole second of the trace clock.
fn next_whole(t: u64) -> u64 {
    (t / DECAY_INTERVAL_NS)
        .saturating_add(1)
        .saturating_mul(DECAY_INTERVAL_NS)
}

/// This thread's time on a CPU so far, ns (the first field of Linux's
/// `/proc/thread-self/schedstat`); `None` where there is no such file. Beside the
/// loop's wall time it tells how much of it the thread actually ran: on a machine
/// shared with other work the two part.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Fibonacci hashing of a frame number: one multiply, enough for the pfn map.
#[derive(Default)]
pub struct PfnHasher(u64);

impl Hasher for PfnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type PfnMap<V> = HashMap<u64, V, BuildHasherDefault<PfnHasher>>;
type PfnSet = HashSet<u64, BuildHasherDefault<PfnHasher>>;

/// A block the trace allocated and zonealloc holds for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Live {
    zpfn: u64,
    order: u8,
    mt: Migratetype,
}

/// The blocks held for the trace, indexed by trace frame: one word a frame, in
/// a table as long as the traced machine's frames. The word of a held block's
/// head packs its zonealloc frame, order and type (`HELD`); the word of each
/// other frame of a held block of order > 0 names its head (`COVERED`). The two
/// never meet on one frame: a block is held only after every held block that
/// overlaps it was freed. A frame past the table (a trace whose frames the
/// layout does not cover) goes to hash maps instead. A lookup is one load, where
/// two hash maps took a hash and a probe each.
struct Held {
    table: Vec<u64>,
    far_heads: PfnMap<Live>,
    far_covered: PfnMap<u64>,
    len: usize,
    covered_len: usize,
}

/// Records whose table words `Held::warm` reads ahead of replaying them: enough
/// misses in flight to fill the memory system's queues, few enough lines to stay
/// in the first-level cache.
const WARM_AHEAD: usize = 32;

/// `Held::table` words: a held block's head, and a frame inside one.
const HELD: u64 = 1 << 63;
const COVERED: u64 = 1 << 62;
/// A zonealloc frame number fits: `pfn << page_shift` fits in 64 bits, and a
/// page is at least 1 KiB.
const ZPFN_BITS: u32 = 54;
const ORDER_SHIFT: u32 = ZPFN_BITS;
const MT_SHIFT: u32 = ZPFN_BITS + 5;

impl Held {
    /// Tables for trace frames below `frames`.
    fn new(frames: u64) -> Held {
        let n = usize::try_from(frames).unwrap_or(0).min(1 << 32);
        let mut table = vec![0; n];
        // A word of each page written once here, so that the replay loop takes no
        // page fault on the table (`vec!` of zeros maps its pages on first write).
        // `black_box` keeps the compiler from dropping stores of a zero it knows
        // is there.
        for w in table.iter_mut().step_by(512) {
            *w = std::hint::black_box(0);
        }
        Held {
            table,
            far_heads: PfnMap::default(),
            far_covered: PfnMap::default(),
            len: 0,
            covered_len: 0,
        }
    }

    /// Reads the table words of the records' frames, all at once: the loads do
    /// not wait on one another, so their cache misses overlap, where the replay,
    /// one record after the other, would take them one at a time. What is read is
    /// thrown away; the lines stay in cache for `apply`.
    #[inline]
    fn warm(&self, records: &[Record]) {
        let mut x = 0u64;
        for r in records {
            if let Some(p) = r.event.pfn() {
                if let Some(&w) = self.table.get(p as usize) {
                    x ^= w;
                }
            }
        }
        std::hint::black_box(x);
    }

    #[inline]
    fn pack(l: Live) -> u64 {
        debug_assert!(l.zpfn < 1 << ZPFN_BITS && l.order < 32);
        HELD | (u64::from(l.mt.idx() as u8) << MT_SHIFT)
            | (u64::from(l.order) << ORDER_SHIFT)
            | l.zpfn
    }

    #[inline]
    fn unpack(w: u64) -> Live {
        Live {
            zpfn: w & ((1 << ZPFN_BITS) - 1),
            order: ((w >> ORDER_SHIFT) & 31) as u8,
            mt: Migratetype::from_idx(((w >> MT_SHIFT) & 7) as usize)
                .unwrap_or(Migratetype::Movable),
        }
    }

    #[inline]
    fn get(&self, pfn: u64) -> Option<Live> {
        match self.table.get(pfn as usize) {
            Some(&w) => (w & HELD != 0).then(|| Held::unpack(w)),
            None => self.far_heads.get(&pfn).copied(),
        }
    }

    #[inline]
    fn insert(&mut self, pfn: u64, l: Live) {
        let prev = match self.table.get_mut(pfn as usize) {
            Some(w) => {
                debug_assert!(*w & COVERED == 0, "a head inside another held block");
                core::mem::replace(w, Held::pack(l)) != 0
            }
            None => self.far_heads.insert(pfn, l).is_some(),
        };
        if !prev {
            self.len += 1;
        }
    }

    #[inline]
    fn remove(&mut self, pfn: u64) -> Option<Live> {
        let l = match self.table.get_mut(pfn as usize) {
            Some(w) if *w & HELD != 0 => Some(Held::unpack(core::mem::take(w))),
            Some(_) => None,
            None => self.far_heads.remove(&pfn),
        }?;
        self.len -= 1;
        Some(l)
    }

    #[inline]
    fn covered_get(&self, pfn: u64) -> Option<u64> {
        match self.table.get(pfn as usize) {
            Some(&w) => (w & COVERED != 0).then_some(w & !COVERED),
            None => self.far_covered.get(&pfn).copied(),
        }
    }

    #[inline]
    fn covered_insert(&mut self, pfn: u64, head: u64) {
        let prev = match self.table.get_mut(pfn as usize) {
            Some(w) => {
                debug_assert!(*w & HELD == 0, "a held head inside another held block");
                core::mem::replace(w, COVERED | head) != 0
            }
            None => self.far_covered.insert(pfn, head).is_some(),
        };
        if !prev {
            self.covered_len += 1;
        }
    }

    #[inline]
    fn covered_remove(&mut self, pfn: u64) {
        let was = match self.table.get_mut(pfn as usize) {
            Some(w) if *w & COVERED != 0 => core::mem::take(w) != 0,
            Some(_) => false,
            None => self.far_covered.remove(&pfn).is_some(),
        };
        if was {
            self.covered_len -= 1;
        }
    }

    /// Every held block, by trace frame of its head: the table's in ascending
    /// order, then the hash map's.
    fn iter(&self) -> impl Iterator<Item = (u64, Live)> + '_ {
        self.table
            .iter()
            .enumerate()
            .filter(|(_, &w)| w & HELD != 0)
            .map(|(p, &w)| (p as u64, Held::unpack(w)))
            .chain(self.far_heads.iter().map(|(&p, &l)| (p, l)))
    }
}

/// What the replay did with the events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplayCounts {
    /// `mm_page_alloc` events replayed as `alloc_pages_on`.
    pub allocs: u64,
    /// Of those, allocations zonealloc failed.
    pub alloc_failures: u64,
    /// Failures per order (index).
    pub alloc_failures_by_order: Vec<u64>,
    /// `mm_page_alloc` events of allocations the kernel itself failed (not replayed).
    pub kernel_failed_allocs: u64,
    /// Allocations at a pfn still mapped: the old block was freed first.
    pub implicit_frees: u64,
    /// Held blocks an allocation overlapped without starting at their head (a
    /// split or merged block whose free was lost): freed first.
    pub overlap_frees: u64,
    /// Held blocks the kernel took from its buddy lists (`mm_page_alloc_zone_locked`),
    /// so free in the kernel: freed when the event was seen.
    pub lost_frees_at_zone_locked: u64,
    /// Held blocks the kernel flushed from a per-CPU list (`mm_page_pcpu_drain`), so
    /// free in the kernel: freed when the event was seen.
    pub lost_frees_at_drain: u64,
    /// `mm_page_free` events replayed as `free_pages_on`.
    pub frees: u64,
    /// Frees of blocks allocated before the trace began: replayed as frees of pages
    /// from the pre-trace pool (`pretrace_pool`), else skipped.
    pub frees_pretrace: u64,
    /// Of those, replayed.
    pub frees_pretrace_replayed: u64,
    /// Max-order blocks allocated and split to stand for memory in use before the
    /// trace (the pool that pre-trace frees are taken from).
    pub pretrace_pool_blocks: u64,
    /// Frees of blocks whose allocation failed in zonealloc (skipped).
    pub frees_of_failed_allocs: u64,
    /// Frees of part of a mapped block, replayed after `split_page`.
    pub split_frees: u64,
    /// Frees of a larger order than the mapped block (skipped).
    pub free_order_mismatch: u64,
    /// Frees zonealloc refused (a bug if non-zero).
    pub free_errors: u64,
    /// `mm_page_free_batched` events (each the same free as an `mm_page_free`).
    pub free_batched: u64,
    /// Calls into zonealloc (`alloc_pages_on`, `free_pages_on`, `split_page`) for
    /// the trace's events (the warm start before the first event not counted).
    pub allocator_calls: u64,
    /// Pages put on the per-CPU lists before the first event (warm start).
    pub warm_pcp_pages: u64,
    /// `decay_pcp_high()` runs on a CPU, at most once per whole second of trace
    /// time (`ReplayOptions::decay`).
    pub decays: u64,
    /// Records before the replay's start (the end of the layout read): not
    /// replayed.
    pub before_start: u64,
    /// Frees of the kernel's memory in use at the start that freed exactly the
    /// frames the trace names (warm start from the layout).
    pub pretrace_frees_exact: u64,
    /// Of the pre-trace frees, those of frames zonealloc did not hold for the
    /// kernel (free in the layout, or freed already): what was held of them was
    /// freed.
    pub pretrace_frees_partial: u64,
    /// Frames brought online: the kernel's deferred memory map initialisation
    /// freeing them for the first time.
    pub onlined_pages: u64,
    /// Frames zonealloc held for the kernel that the kernel then allocated,
    /// refilled or flushed (so they were free there: a free the trace lost, or a
    /// per-CPU list page the warm start did not know): freed first.
    pub pretrace_reused: u64,
}

/// One `buddyinfo()` sample.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuddySample {
    /// Records replayed before the sample.
    pub event: u64,
    /// Trace time of the last record, ns since the first record.
    pub trace_time_ns: u64,
    /// Free blocks per order, one vector per populated zone (as `buddyinfo()`).
    pub free_blocks: Vec<Vec<u64>>,
}

/// A trace being replayed into a zonealloc instance.
pub struct Replayer {
    za: ZoneAllocator,
    /// Held blocks by the trace pfn of their head, and every other trace pfn of
    /// held blocks of order > 0, to its block's head.
    live: Held,
    failed: PfnSet,
    /// zonealloc order-0 pages standing for memory in use before the trace, as
    /// naturally aligned runs: `pool[o]` holds the first pages of runs of `2^o`.
    pool: Vec<Vec<u64>>,
    /// Replay pre-trace frees from `pool` (else skip them).
    pretrace_pool: bool,
    /// Per-CPU list figures when the trace's first event was replayed (after the warm
    /// start): the report gives what the trace did since.
    pcp_baseline: Vec<Vec<PcpCpuStats>>,
    counts: ReplayCounts,
    kernel: KernelCounts,
    events: EventCounts,
    replay_time: Duration,
    /// On-CPU time of the replay loop (`thread_cpu_ns`), where the system tells it.
    replay_cpu_ns: Option<u64>,
    first_time_ns: Option<u64>,
    last_time_ns: u64,
    samples: Vec<BuddySample>,
    sample_every: u64,
    next_sample: u64,
    replayed: u64,
    pageblocks_at_start: Vec<[u64; MIGRATE_TYPES]>,
    /// Per CPU: the trace time of its next `decay_pcp_high()` (`set_decay`); empty
    /// when off.
    next_decay_ns: Vec<Option<u64>>,
    /// `Config::max_order` and `pageblock_order`, at hand for the loop.
    max_order: u8,
    pageblock_order: Order,
    /// Warm start from the kernel's layout: the frames zonealloc holds for the
    /// kernel's memory in use (empty otherwise).
    pretrace: Pretrace,
    /// Records before this trace time are not replayed (the layout's end).
    start_ns: u64,
    /// Ranges offline at the start (not initialised in the kernel yet).
    uninit: Vec<(u64, u64)>,
    /// Trace times to sample the shape at (`set_shape_times`), and the next one.
    shape_times: Vec<u64>,
    next_shape: usize,
    /// The shape samples: zonealloc's state, its fallbacks and the kernel's.
    shape_samples: Vec<(Shape, Fallbacks, Fallbacks)>,
    /// zonealloc's fallbacks and claims before the first record (the warm start
    /// makes some).
    fallback_baseline: (u64, u64),
    /// What the warm start from the layout did.
    start_report: Option<StartReport>,
    /// zonealloc's state right after the warm start.
    start_shape: Option<Shape>,
    /// Per zone, the frames whose pageblocks the kernel counts (from its start to
    /// its missing frames, less what is not initialised): empty but for a warm
    /// start from the layout.
    counted: Vec<(zonealloc::ZoneType, u64, u64)>,
}

/// Linux's `sysctl_stat_interval`: the vmstat worker runs once a second on each
/// CPU.
const DECAY_INTERVAL_NS: u64 = 1_000_000_000;

impl Replayer {
    /// A replay into a fresh allocator built from `config`; `sample_every` as in
    /// `ReplayOptions`.
    ///
    /// # Errors
    /// The configuration's first problem.
    pub fn new(config: Config, sample_every: u64) -> Result<Replayer, ConfigError> {
        // The traced machine's frames: the zones' end (the replay's layout is the
        // trace's).
        let end_pfn = config
            .nodes
            .iter()
            .flat_map(|n| n.zones.iter())
            .map(|z| z.end_pfn().0)
            .max()
            .unwrap_or(0);
        Replayer::with_trace_frames(config, sample_every, end_pfn)
    }

    /// A replay into a fresh allocator built from `config`, of a trace whose frames
    /// lie below `trace_frames`: the table of held blocks covers them all, so
    /// that every lookup is one load (a zoneinfo layout cuts a zone's hole, which
    /// a trace's frames lie past; `new` sizes the table by the configuration).
    ///
    /// # Errors
    /// The configuration's first problem.
    pub fn with_trace_frames(
        config: Config,
        sample_every: u64,
        trace_frames: u64,
    ) -> Result<Replayer, ConfigError> {
        let end_pfn = trace_frames;
        let za = ZoneAllocator::new(config)?;
        let max_order = za.config().max_order.0 as usize;
        let za_pb = za.config().pageblock_order;
        let pageblocks_at_start = za.free_counts().iter().map(|z| z.nr_blocks).collect();
        let pcp_baseline = za.pcp_stats().into_iter().map(|z| z.cpus).collect();
        let mut r = Replayer {
            za,
            live: Held::new(end_pfn),
            failed: PfnSet::default(),
            pool: Vec::new(),
            pretrace_pool: false,
            pcp_baseline,
            counts: ReplayCounts {
                alloc_failures_by_order: vec![0; max_order + 1],
                ..ReplayCounts::default()
            },
            kernel: KernelCounts::default(),
            events: EventCounts::default(),
            replay_time: Duration::ZERO,
            replay_cpu_ns: Some(0),
            first_time_ns: None,
            last_time_ns: 0,
            samples: Vec::new(),
            sample_every,
            next_sample: 0,
            replayed: 0,
            pageblocks_at_start,
            next_decay_ns: Vec::new(),
            max_order: max_order as u8,
            pageblock_order: za_pb,
            pretrace: Pretrace::default(),
            start_ns: 0,
            uninit: Vec::new(),
            shape_times: Vec::new(),
            next_shape: 0,
            shape_samples: Vec::new(),
            fallback_baseline: (0, 0),
            start_report: None,
            start_shape: None,
            counted: Vec::new(),
        };
        if sample_every > 0 {
            r.sample();
            r.next_sample = sample_every;
        }
        Ok(r)
    }

    /// The allocator.
    pub fn allocator(&self) -> &ZoneAllocator {
        &self.za
    }

    /// What the replay has done so far.
    pub fn counts(&self) -> &ReplayCounts {
        &self.counts
    }

    /// Blocks held for the trace now: zonealloc's head, order and migratetype.
    pub fn live_blocks(&self) -> impl Iterator<Item = (Pfn, Order, Migratetype)> + '_ {
        self.live
            .iter()
            .map(|(_, l)| (Pfn(l.zpfn), Order(l.order), l.mt))
    }

    /// The `buddyinfo()` samples taken so far.
    pub fn samples(&self) -> &[BuddySample] {
        &self.samples
    }

    /// Replays `records` in order. Only the replay loop is timed; `buddyinfo()`
    /// samples are taken between timed segments.
    pub fn replay(&mut self, records: &[Record]) {
        // On-CPU time for the whole call: the samples between segments (a few
        // microseconds each) are in it, the reads of the clock are not.
        let c0 = thread_cpu_ns();
        self.replay_records(records);
        self.replay_cpu_ns = match (self.replay_cpu_ns, c0, thread_cpu_ns()) {
            (Some(sum), Some(a), Some(b)) => Some(sum + b.saturating_sub(a)),
            _ => None,
        };
    }

    fn replay_records(&mut self, records: &[Record]) {
        let mut rest = records;
        while !rest.is_empty() {
            let mut n = if self.sample_every == 0 {
                rest.len()
            } else {
                ((self.next_sample - self.replayed) as usize).min(rest.len())
            };
            if let Some(&t) = self.shape_times.get(self.next_shape) {
                // Records are in time order (perf sorts them): those before `t`.
                let k = rest.partition_point(|r| r.time_ns < t);
                if k == 0 {
                    self.sample_shape();
                    continue;
                }
                n = n.min(k);
            }
            let (seg, tail) = rest.split_at(n);
            let t0 = Instant::now();
            for group in seg.chunks(WARM_AHEAD) {
                self.live.warm(group);
                for r in group {
                    self.apply(r);
                }
            }
            self.replay_time += t0.elapsed();
            self.replayed += seg.len() as u64;
            if let Some(last) = seg.last() {
                self.first_time_ns.get_or_insert(seg[0].time_ns);
                self.last_time_ns = last.time_ns;
            }
            if self.sample_every > 0 && self.replayed >= self.next_sample {
                self.sample();
                if self.samples.len() >= 1000 {
                    // Keep the series bounded: every other sample, twice the interval.
                    let mut i = 0;
                    self.samples.retain(|_| {
                        i += 1;
                        i % 2 == 1
                    });
                    self.sample_every *= 2;
                }
                self.next_sample = self.replayed + self.sample_every;
            }
            rest = tail;
        }
    }

    /// Samples the shape at the next of `shape_times` (outside the timed loop).
    fn sample_shape(&mut self) {
        let t = self.shape_times.get(self.next_shape).copied().unwrap_or(0);
        self.next_shape += 1;
        let mut s = self.shape_now();
        s.time_ns = t;
        let za = self.zonealloc_fallbacks();
        let k = Fallbacks {
            total: self.kernel.extfrag,
            claimed: self.kernel.extfrag_change_ownership,
            fragmenting: Some(self.kernel.extfrag_fragmenting),
        };
        self.shape_samples.push((s, za, k));
    }

    /// zonealloc's free memory now; with a warm start from the layout, its
    /// pageblocks counted the kernel's way (see `kernel_block_counts`).
    fn shape_now(&self) -> Shape {
        let mut s = shape_of(&self.za);
        for (zt, counts) in self.kernel_block_counts() {
            if let Some(z) = s.zones.iter_mut().find(|z| z.zone == zt) {
                z.blocks = counts;
            }
        }
        s
    }

    /// Pageblocks per type counted as Linux's pagetypeinfo counts them: from the
    /// zone's first frame (not the first pageblock boundary) a pageblock at a time,
    /// each present and initialised one, reserved frames and all (zonealloc's own
    /// counters leave out pageblocks that begin in a hole).
    fn kernel_block_counts(&self) -> Vec<(zonealloc::ZoneType, [u64; 4])> {
        let pb = self.za.config().pageblock_order.nr_pages();
        self.counted
            .iter()
            .map(|&(zt, start, end)| {
                let mut c = [0u64; 4];
                let mut p = start;
                while p < end {
                    let offline = self.uninit.iter().any(|&(s, n)| p >= s && p < s + n);
                    if !offline {
                        if let Some(t) = self.za.pageblock_migratetype(Pfn(p)).and_then(type_index)
                        {
                            c[t] += 1;
                        }
                    }
                    p += pb;
                }
                (zt, c)
            })
            .collect()
    }

    /// zonealloc's fallbacks and claims since the first record.
    fn zonealloc_fallbacks(&self) -> Fallbacks {
        let ev = self.za.zone_events();
        let total: u64 = ev.iter().map(|e| e.fallbacks).sum();
        let claimed: u64 = ev.iter().map(|e| e.pageblocks_claimed).sum();
        Fallbacks {
            total: total - self.fallback_baseline.0.min(total),
            claimed: claimed - self.fallback_baseline.1.min(claimed),
            fragmenting: None,
        }
    }

    /// Samples zonealloc's shape at each of `times` (trace clock, ns, ascending)
    /// as the replay passes it; `finish_shapes` takes those the trace does not
    /// reach.
    pub fn set_shape_times(&mut self, times: Vec<u64>) {
        self.shape_times = times;
        self.next_shape = 0;
    }

    /// Takes the shape samples the trace ended before.
    pub fn finish_shapes(&mut self) {
        while self.next_shape < self.shape_times.len() {
            self.sample_shape();
        }
    }

    /// The shape samples taken so far, with zonealloc's fallbacks and the
    /// kernel's at each.
    pub fn shape_samples(&self) -> &[(Shape, Fallbacks, Fallbacks)] {
        &self.shape_samples
    }

    fn sample(&mut self) {
        let first = self.first_time_ns.unwrap_or(self.last_time_ns);
        self.samples.push(BuddySample {
            event: self.replayed,
            trace_time_ns: self.last_time_ns.saturating_sub(first),
            free_blocks: self.za.buddyinfo().zones.into_iter().map(|z| z.1).collect(),
        });
    }

    /// Turns on (or off) the vmstat worker's decay of each CPU's `high`: at each
    /// whole second of trace time (see `next_whole`), the replay calls
    /// `pcp_decay_cpu` for a CPU before applying that CPU's next record, as Linux's
    /// deferrable vmstat work runs when the CPU next runs.
    pub fn set_decay(&mut self, on: bool) {
        self.next_decay_ns = if on {
            vec![None; self.za.config().nr_cpus]
        } else {
            Vec::new()
        };
    }

    /// Runs the vmstat worker's decay on the record's CPU if its second is up.
    #[inline]
    fn tick(&mut self, r: &Record) {
        let n = self.next_decay_ns.len();
        if n == 0 {
            return;
        }
        let cpu = r.cpu as usize % n;
        match self.next_decay_ns[cpu] {
            None => self.next_decay_ns[cpu] = Some(next_whole(r.time_ns)),
            Some(t) if r.time_ns >= t => {
                self.za.pcp_decay_cpu(cpu);
                self.counts.decays += 1;
                self.next_decay_ns[cpu] = Some(next_whole(r.time_ns));
            }
            Some(_) => {}
        }
    }

    /// Replays one record (untimed).
    #[inline]
    pub fn apply(&mut self, r: &Record) {
        if r.time_ns < self.start_ns {
            self.counts.before_start += 1;
            return;
        }
        self.tick(r);
        self.events.add(r.event.kind());
        let cpu = r.cpu as usize;
        let live = &self.live;
        let action = Action::of_covered(
            &r.event,
            self.max_order,
            |p| live.get(p).map(|l| l.order),
            |p| live.covered_get(p),
        );
        match action {
            Action::KernelFailedAlloc => self.counts.kernel_failed_allocs += 1,
            Action::Alloc {
                pfn,
                order,
                gfp,
                implicit_free,
            } => {
                if !self.pretrace.is_empty() {
                    self.reclaim_kernel_frames(cpu, pfn, order);
                }
                if implicit_free {
                    if let Some(old) = self.release(pfn) {
                        self.counts.implicit_frees += 1;
                        self.free_block(cpu, old);
                    }
                }
                if order > 0 {
                    self.counts.overlap_frees += self.free_overlapping(cpu, pfn, order);
                } else if self.live.covered_len > 0 {
                    // Order 0, its head already checked: only a larger block around it.
                    if let Some(head) = self.live.covered_get(pfn) {
                        if let Some(l) = self.release(head) {
                            self.counts.overlap_frees += 1;
                            self.free_block(cpu, l);
                        }
                    }
                }
                self.alloc(cpu, pfn, order, gfp);
            }
            Action::Free { pfn, .. } => {
                if let Some(l) = self.release(pfn) {
                    self.counts.frees += 1;
                    self.free_block(cpu, l);
                }
            }
            Action::OrderMismatch => self.counts.free_order_mismatch += 1,
            Action::PartialFree { head, pfn, order } => {
                if let Some(l) = self.live.get(head) {
                    self.split_and_free(cpu, head, l, pfn, order);
                }
            }
            Action::Unheld { pfn, order } => {
                if self.failed.remove(&pfn) {
                    self.counts.frees_of_failed_allocs += 1;
                } else {
                    self.counts.frees_pretrace += 1;
                    if !self.pretrace.is_empty() {
                        self.free_kernel_frames(cpu, pfn, order);
                    } else if self.pretrace_pool {
                        self.free_pretrace(cpu, order);
                    }
                }
            }
            Action::FreeBatched => self.counts.free_batched += 1,
            Action::KernelZoneLocked {
                pfn,
                order,
                percpu_refill,
            } => {
                if percpu_refill {
                    self.kernel.refill_blocks += 1;
                    let k = &mut self.kernel.refill_blocks_by_cpu;
                    if k.len() <= cpu {
                        k.resize(cpu + 1, 0);
                    }
                    k[cpu] += 1;
                    let slot = pcp_order_slot(Order(order), self.pageblock_order);
                    bump(&mut self.kernel.refill_by_cpu_order, cpu, slot);
                } else {
                    self.kernel.zone_locked_other += 1;
                }
                if !self.pretrace.is_empty() {
                    self.reclaim_kernel_frames(cpu, pfn, order);
                }
                if self.holds_any(pfn, order) {
                    self.counts.lost_frees_at_zone_locked += self.free_overlapping(cpu, pfn, order);
                }
            }
            Action::KernelDrain { pfn, order } => {
                self.kernel.drain_blocks += 1;
                let k = &mut self.kernel.drain_blocks_by_cpu;
                if k.len() <= cpu {
                    k.resize(cpu + 1, 0);
                }
                k[cpu] += 1;
                let slot = pcp_order_slot(Order(order), self.pageblock_order);
                bump(&mut self.kernel.drain_by_cpu_order, cpu, slot);
                if !self.pretrace.is_empty() {
                    self.reclaim_kernel_frames(cpu, pfn, order);
                }
                if self.holds_any(pfn, order) {
                    self.counts.lost_frees_at_drain += self.free_overlapping(cpu, pfn, order);
                }
            }
            Action::KernelFallback {
                fallback_order,
                change_ownership,
            } => {
                self.kernel.extfrag += 1;
                if fallback_order < self.pageblock_order.0 {
                    self.kernel.extfrag_fragmenting += 1;
                }
                if change_ownership {
                    self.kernel.extfrag_change_ownership += 1;
                }
            }
        }
    }

    /// Holds `l` for the trace block at `pfn`.
    #[inline]
    fn hold(&mut self, pfn: u64, l: Live) {
        if l.order > 0 {
            for p in pfn + 1..pfn + (1u64 << l.order) {
                self.live.covered_insert(p, pfn);
            }
        }
        self.live.insert(pfn, l);
    }

    /// Stops holding the trace block whose head is `pfn`.
    #[inline]
    fn release(&mut self, pfn: u64) -> Option<Live> {
        let l = self.live.remove(pfn)?;
        if l.order > 0 {
            for p in pfn + 1..pfn + (1u64 << l.order) {
                self.live.covered_remove(p);
            }
        }
        Some(l)
    }

    /// Whether any held block overlaps the trace frames `[pfn, pfn + 2^order)`
    /// (exact for order 0, a cheap first test for higher orders).
    #[inline]
    fn holds_any(&self, pfn: u64, order: u8) -> bool {
        order > 0 || self.live.get(pfn).is_some() || self.live.covered_get(pfn).is_some()
    }

    /// Frees every held block that overlaps the trace frames `[pfn, pfn + 2^order)`:
    /// the kernel is handing those frames out again, or moving them between its free
    /// lists, so their frees were lost. Returns how many blocks were freed.
    fn free_overlapping(&mut self, cpu: usize, pfn: u64, order: u8) -> u64 {
        let mut n = 0;
        // A block that starts before the range and reaches into it holds `pfn`.
        if let Some(head) = self.live.covered_get(pfn) {
            if let Some(l) = self.release(head) {
                self.free_block(cpu, l);
                n += 1;
            }
        }
        for p in pfn..pfn + (1u64 << order) {
            if let Some(l) = self.release(p) {
                self.free_block(cpu, l);
                n += 1;
            }
        }
        n
    }

    /// A free of the kernel's memory in use at the start (warm start from the
    /// layout): frees exactly the frames named, on `cpu`, as one block of `order`
    /// where zonealloc holds them all (as the kernel freed them). Frames not
    /// initialised yet come online instead (the kernel's deferred memory map
    /// initialisation frees them as max-order blocks). Otherwise what is held of
    /// the range is freed, and the free counted as partial.
    fn free_kernel_frames(&mut self, cpu: usize, pfn: u64, order: u8) {
        let n = 1u64 << order;
        if self.pretrace.all(pfn, n) {
            self.counts.allocator_calls += 1;
            if self.za.free_contig_range_on(cpu, Pfn(pfn), n).is_ok() {
                self.pretrace.set_range(pfn, n, false);
                self.counts.pretrace_frees_exact += 1;
                self.counts.frees_pretrace_replayed += 1;
            } else {
                self.counts.free_errors += 1;
            }
            return;
        }
        let pb = self.za.config().pageblock_order.nr_pages();
        if let Some(i) = self
            .uninit
            .iter()
            .position(|&(s, m)| pfn >= s && pfn + n <= s + m)
        {
            // Whole pageblocks (deferred initialisation frees max-order blocks):
            // online them; the rest of the range stays offline.
            let lo = pfn / pb * pb;
            let hi = (pfn + n).next_multiple_of(pb);
            self.counts.allocator_calls += 1;
            if self.za.online_pages(Pfn(lo), hi - lo).is_ok() {
                self.counts.onlined_pages += hi - lo;
                self.counts.frees_pretrace_replayed += 1;
                let (s, m) = self.uninit[i];
                self.uninit.remove(i);
                if lo > s {
                    self.uninit.push((s, lo - s));
                }
                if hi < s + m {
                    self.uninit.push((hi, s + m - hi));
                }
                return;
            }
        }
        self.counts.pretrace_frees_partial += 1;
        for (s, m) in self.pretrace.runs(pfn, n) {
            self.counts.allocator_calls += 1;
            if self.za.free_contig_range_on(cpu, Pfn(s), m).is_ok() {
                self.pretrace.set_range(s, m, false);
            }
        }
    }

    /// The kernel is allocating, refilling or flushing `[pfn, pfn + 2^order)`, so
    /// those frames were free there: any of them zonealloc still holds for the
    /// kernel's memory in use are freed first, on `cpu`.
    #[inline]
    fn reclaim_kernel_frames(&mut self, cpu: usize, pfn: u64, order: u8) {
        let n = 1u64 << order;
        if !(pfn..pfn + n).any(|p| self.pretrace.get(p)) {
            return;
        }
        for (s, m) in self.pretrace.runs(pfn, n) {
            self.counts.allocator_calls += 1;
            if self.za.free_contig_range_on(cpu, Pfn(s), m).is_ok() {
                self.pretrace.set_range(s, m, false);
                self.counts.pretrace_reused += m;
            }
        }
    }

    /// Starts from the kernel's own layout (see `start`): applies `plan` to the
    /// fresh allocator (built from `plan.config()`), holds what stays allocated
    /// for the kernel, and from then on replays records from `plan.start_ns` on.
    ///
    /// # Errors
    /// What `StartPlan::apply` refuses.
    pub fn layout_start(
        &mut self,
        plan: &StartPlan,
        seed: u64,
    ) -> Result<&StartReport, crate::start::StartError> {
        let end = self.live.table.len() as u64;
        self.pretrace = Pretrace::new(end);
        let rep = plan.apply(&self.za, &mut self.pretrace, seed)?;
        self.start_ns = plan.start_ns;
        self.uninit = plan.zones.iter().filter_map(|z| z.uninit).collect();
        self.pcp_baseline = self.za.pcp_stats().into_iter().map(|z| z.cpus).collect();
        self.pageblocks_at_start = self.za.free_counts().iter().map(|z| z.nr_blocks).collect();
        let ev = self.za.zone_events();
        self.fallback_baseline = (
            ev.iter().map(|e| e.fallbacks).sum(),
            ev.iter().map(|e| e.pageblocks_claimed).sum(),
        );
        self.counts.warm_pcp_pages = self.za.nr_pcp_pages();
        self.counted = plan
            .zones
            .iter()
            .map(|z| {
                let end = z
                    .holes
                    .last()
                    .map_or(z.spec.start_pfn + z.spec.spanned, |h| {
                        if h.0 + h.1 == z.spec.start_pfn + z.spec.spanned {
                            h.0
                        } else {
                            z.spec.start_pfn + z.spec.spanned
                        }
                    });
                (z.spec.zone_type, z.spec.start_pfn, end)
            })
            .collect();
        let mut s = self.shape_now();
        s.time_ns = plan.start_ns;
        self.start_shape = Some(s);
        self.pretrace_pool = false;
        Ok(self.start_report.insert(rep))
    }

    /// The comparison of zonealloc's shape with the kernel's `snaps`, from the
    /// samples taken at their times (`set_shape_times`); the kernel's state right
    /// after the layout (`at_start`) beside zonealloc's after the warm start.
    pub fn shape_comparison(&self, snaps: &Snapshots, at_start: Option<&Shape>) -> ShapeComparison {
        let t0 = self.start_ns;
        let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
        let sample_at = |t: u64| self.shape_samples.iter().find(|(s, _, _)| s.time_ns == t);
        let moment = |k: &Shape| -> Option<Moment> {
            let (z, zf, kf) = sample_at(k.time_ns)?;
            Some(Moment {
                seconds: secs(k.time_ns),
                kernel: k.clone(),
                zonealloc: z.clone(),
                kernel_fallbacks: *kf,
                zonealloc_fallbacks: *zf,
            })
        };
        let mut c = ShapeComparison {
            start: match (at_start, &self.start_shape) {
                (Some(k), Some(z)) => Some(Moment {
                    seconds: 0.0,
                    kernel: k.clone(),
                    zonealloc: z.clone(),
                    kernel_fallbacks: Fallbacks::default(),
                    zonealloc_fallbacks: Fallbacks::default(),
                }),
                _ => None,
            },
            seconds: snaps
                .seconds
                .iter()
                .filter(|k| k.time_ns >= t0)
                .filter_map(moment)
                .collect(),
            end: snaps.end.as_ref().and_then(moment),
            ..ShapeComparison::default()
        };
        c.evaluate();
        c
    }

    /// What the warm start from the layout did, if there was one.
    pub fn start_report(&self) -> Option<&StartReport> {
        self.start_report.as_ref()
    }

    /// A free of a block allocated before the trace: frees an aligned run of
    /// `2^order` pool pages on `cpu` with `free_contig_range_on`, which frees it as
    /// one block of `order`, as the kernel freed the block: onto `cpu`'s per-CPU
    /// list of that order where there is one, else to the buddy lists. Takes
    /// another max-order block into the pool when no run is left.
    fn free_pretrace(&mut self, cpu: usize, order: u8) {
        // Above zonealloc's max order (a trace of a machine with a larger
        // `MAX_PAGE_ORDER`): as many max-order runs.
        let max = self.za.config().max_order.0.min(order);
        for _ in 0..1u64 << (order - max) {
            let Some(z) = self.pool_run(cpu, max) else {
                return;
            };
            self.counts.allocator_calls += 1;
            if self
                .za
                .free_contig_range_on(cpu, Pfn(z), 1u64 << max)
                .is_err()
            {
                self.counts.free_errors += 1;
            }
        }
        self.counts.frees_pretrace_replayed += 1;
    }

    /// The first page of an aligned run of `2^order` pool pages, taken out of the
    /// pool: the smallest run of at least that order, halved down to it (the
    /// upper halves stay in the pool). `None` if the pool is dry and zonealloc has
    /// no max-order block to add, or `order` is above max order.
    fn pool_run(&mut self, cpu: usize, order: u8) -> Option<u64> {
        let max = self.za.config().max_order.0;
        if order > max {
            return None;
        }
        if self.pool.len() <= max as usize {
            self.pool.resize(max as usize + 1, Vec::new());
        }
        let from = match (order..=max).find(|&o| !self.pool[o as usize].is_empty()) {
            Some(o) => o,
            None if self.grow_pool(cpu) => max,
            None => return None,
        };
        let z = self.pool[from as usize].pop()?;
        for o in (order..from).rev() {
            self.pool[o as usize].push(z + (1u64 << o));
        }
        Some(z)
    }

    /// Takes one max-order movable block for the pre-trace pool and splits it into
    /// order-0 pages. Max order has no per-CPU list, so the per-CPU figures do not
    /// see it. False if zonealloc has no such block.
    fn grow_pool(&mut self, cpu: usize) -> bool {
        let max = self.za.config().max_order;
        self.counts.allocator_calls += 2;
        let Ok(z) = self.za.alloc_pages_on(cpu, Gfp::HIGHUSER_MOVABLE, max) else {
            return false;
        };
        if self.za.split_page(z, max).is_err() {
            self.counts.free_errors += 1;
            return false;
        }
        self.counts.pretrace_pool_blocks += 1;
        self.pool[max.idx()].push(z.0);
        true
    }

    /// `alloc_pages_on` for the trace frame `pfn`: the block is held for it, or the
    /// failure is counted and its later free skipped.
    fn alloc(&mut self, cpu: usize, pfn: u64, order: u8, gfp: Gfp) {
        self.counts.allocs += 1;
        self.counts.allocator_calls += 1;
        match self.za.alloc_pages_on(cpu, gfp, Order(order)) {
            Ok(z) => {
                if !self.failed.is_empty() {
                    self.failed.remove(&pfn);
                }
                self.hold(
                    pfn,
                    Live {
                        zpfn: z.0,
                        order,
                        mt: gfp.migratetype(),
                    },
                );
            }
            Err(_) => {
                self.counts.alloc_failures += 1;
                if let Some(c) = self.counts.alloc_failures_by_order.get_mut(order as usize) {
                    *c += 1;
                }
                self.failed.insert(pfn);
            }
        }
    }

    fn free_block(&mut self, cpu: usize, l: Live) {
        self.counts.allocator_calls += 1;
        if self
            .za
            .free_pages_on(cpu, Pfn(l.zpfn), Order(l.order))
            .is_err()
        {
            self.counts.free_errors += 1;
        }
    }

    /// `split_page()` the mapped block at `head`, then free the pages of
    /// `[pfn, pfn + 2^order)` one by one.
    fn split_and_free(&mut self, cpu: usize, head: u64, l: Live, pfn: u64, order: u8) {
        self.counts.split_frees += 1;
        self.counts.allocator_calls += 1;
        if self.za.split_page(Pfn(l.zpfn), Order(l.order)).is_err() {
            self.counts.free_errors += 1;
            return;
        }
        self.release(head);
        for i in 0..1u64 << l.order {
            self.hold(
                head + i,
                Live {
                    zpfn: l.zpfn + i,
                    order: 0,
                    mt: l.mt,
                },
            );
        }
        for p in pfn..pfn + (1u64 << order) {
            if let Some(piece) = self.release(p) {
                self.free_block(cpu, piece);
            }
        }
    }

    /// Replays pre-trace frees (`mm_page_free` of a block the trace never
    /// allocated) as frees of pool pages (see `free_pretrace`), instead of skipping
    /// them.
    pub fn set_pretrace_pool(&mut self, on: bool) {
        self.pretrace_pool = on;
    }

    /// Starts the per-CPU lists warm (see `WarmCpu`): on each CPU, order-0 pages on
    /// the order-0 lists of each type as `WarmCpu::by_type` gives them (where it
    /// does not, split between the migratetypes as `mix`, weights per
    /// `Migratetype::idx()`), blocks of orders 1–3 on the lists of their types
    /// likewise (else movable), pageblock-order blocks on that list, and the
    /// auto-tuned `high` grown toward the traced machine's.
    ///
    /// zonealloc's `high` is tuned, not set, so it is grown the way Linux grows it:
    /// each CPU allocates order-0 pages (every refill raises `high` by a batch while
    /// the zone is above its high watermark) until `high` reaches the target or
    /// `high_max`. Then the lists are drained, and the pages and blocks wanted are
    /// freed back onto them; the rest go back to the buddy lists. The per-CPU
    /// figures the report gives start after this. Returns the pages on the lists
    /// afterwards.
    pub fn warm_start(&mut self, warm: &[WarmCpu], mix: &[u64; MIGRATE_TYPES]) -> u64 {
        let total: u64 = mix.iter().sum();
        let nr_cpus = self.za.config().nr_cpus;
        let pb = self.za.config().pageblock_order;
        let zone = self.busiest_zone();
        let high_of = |za: &ZoneAllocator, cpu: usize| {
            za.zoneinfo()
                .zones
                .iter()
                .find(|z| Some(z.id) == zone)
                .and_then(|z| z.pagesets.get(cpu))
                .map_or((0, 0), |p| (p.high, p.high_max))
        };
        for (cpu, w) in warm.iter().enumerate().take(nr_cpus) {
            let mut held = Vec::new();
            let mut want = w.blocks[0];
            // The first round puts each type's own pages on its list where the trace
            // told them (`WarmCpu::by_type`); later rounds, which only grow
            // `high`, and a CPU the trace told nothing of, split by `mix`.
            let typed_order = |o: usize| w.by_type[o].iter().sum::<u64>() == w.blocks[o];
            let by_type = typed_order(0);
            loop {
                let before = held.len();
                let first_round = before == 0;
                for mt in Migratetype::ALL {
                    let typed = pcp_type_slot(mt).map_or(0, |t| w.by_type[0][t]);
                    let share = if by_type && first_round {
                        typed
                    } else {
                        (want * mix[mt.idx()])
                            .checked_div(total)
                            .unwrap_or(u64::from(mt == Migratetype::Movable) * want)
                    };
                    let gfp = crate::gfp_names::effective_gfp(Gfp::KERNEL, Some(mt));
                    for _ in 0..share {
                        match self.za.alloc_pages_on(cpu, gfp, Order(0)) {
                            Ok(p) => held.push(p),
                            Err(_) => break,
                        }
                    }
                }
                let (high, high_max) = high_of(&self.za, cpu);
                if high >= w.high.min(high_max) || held.len() == before {
                    break;
                }
                want = 4096;
            }
            // Orders 1-3 by type where the warm state has the types, else movable,
            // the type of most such blocks; pageblock-order blocks movable.
            const PCP_TYPES: [Migratetype; 3] = [
                Migratetype::Unmovable,
                Migratetype::Movable,
                Migratetype::Reclaimable,
            ];
            let mut plan = Vec::new();
            for o in 1..4usize {
                if typed_order(o) {
                    for (t, &mt) in PCP_TYPES.iter().enumerate() {
                        let gfp = crate::gfp_names::effective_gfp(Gfp::KERNEL, Some(mt));
                        plan.push((Order(o as u8), gfp, w.by_type[o][t]));
                    }
                } else {
                    plan.push((Order(o as u8), Gfp::HIGHUSER_MOVABLE, w.blocks[o]));
                }
            }
            plan.push((pb, Gfp::HIGHUSER_MOVABLE, w.pageblock_blocks));
            let mut blocks = Vec::new();
            for (order, gfp, n) in plan {
                for _ in 0..n {
                    match self.za.alloc_pages_on(cpu, gfp, order) {
                        Ok(p) => blocks.push((p, order)),
                        Err(_) => break,
                    }
                }
            }
            // Beyond what is wanted, back to the buddy lists; what the last refills
            // left on the lists too; then exactly the blocks wanted onto the lists.
            let keep = held.len().min(w.blocks[0] as usize);
            for &p in &held[keep..] {
                let _ = self.za.free_pages_on(cpu, p, Order(0));
            }
            self.za.drain_cpu_pages(cpu);
            for &(p, order) in &blocks {
                let _ = self.za.free_pages_on(cpu, p, order);
            }
            for &p in held[..keep].iter().rev() {
                let _ = self.za.free_pages_on(cpu, p, Order(0));
            }
        }
        self.pcp_baseline = self.za.pcp_stats().into_iter().map(|z| z.cpus).collect();
        self.counts.warm_pcp_pages = self.za.nr_pcp_pages();
        self.counts.warm_pcp_pages
    }

    /// The zone order-0 movable allocations come from first (the highest populated
    /// zone of the first node).
    fn busiest_zone(&self) -> Option<zonealloc::ZoneId> {
        self.za
            .zoneinfo()
            .zones
            .iter()
            .filter(|z| z.managed > 0)
            .map(|z| z.id)
            .max_by_key(|id| (std::cmp::Reverse(id.node), id.zone_type))
    }

    /// Frees every live block of a migratetype in `types` (the "reclaim" of a
    /// stress-highalloc pass at rest), then drains every CPU's lists. Returns the
    /// pages freed.
    pub fn free_live(&mut self, types: &[Migratetype]) -> u64 {
        let victims: Vec<(u64, Live)> = self
            .live
            .iter()
            .filter(|(_, l)| types.contains(&l.mt))
            .collect();
        let mut pages = 0;
        for (p, l) in victims {
            self.release(p);
            pages += 1u64 << l.order;
            self.free_block(0, l);
        }
        self.za.drain_all_pages();
        pages
    }

    /// The report: counts, timing, per-CPU list activity next to the kernel's,
    /// fallbacks, and the fragmentation state now.
    pub fn report(
        &self,
        trace: &str,
        layout: &ZoneLayout,
        holes: HoleModel,
        parse: ParseStats,
    ) -> ReplayReport {
        let za = &self.za;
        let pcp = za.pcp_stats();
        let mut zones_pcp = Vec::new();
        let mut tot = PcpTotals::default();
        let mut by_cpu = vec![0u64; za.config().nr_cpus];
        let mut drains_by_cpu = vec![0u64; za.config().nr_cpus];
        let mut refills_by_order = vec![[0u64; PCP_ORDER_SLOTS]; za.config().nr_cpus];
        let mut drains_by_order = vec![[0u64; PCP_ORDER_SLOTS]; za.config().nr_cpus];
        for (zi, z) in pcp.iter().enumerate() {
            let mut t = PcpTotals {
                zone: format!("{}", z.id.zone_type),
                ..PcpTotals::default()
            };
            for (ci, c) in z.cpus.iter().enumerate() {
                // What the trace did: the figures since the warm start.
                let b = self
                    .pcp_baseline
                    .get(zi)
                    .and_then(|b| b.get(ci))
                    .copied()
                    .unwrap_or_default();
                t.refills += c.refills - b.refills;
                t.refill_blocks += c.refill_blocks - b.refill_blocks;
                if let Some(x) = by_cpu.get_mut(ci) {
                    *x += c.refill_blocks - b.refill_blocks;
                }
                t.drains += c.drains - b.drains;
                t.drain_blocks += c.drain_blocks - b.drain_blocks;
                if let Some(x) = drains_by_cpu.get_mut(ci) {
                    *x += c.drain_blocks - b.drain_blocks;
                }
                for o in 0..PCP_ORDER_SLOTS {
                    if let Some(x) = refills_by_order.get_mut(ci) {
                        x[o] += c.refill_blocks_by_order[o] - b.refill_blocks_by_order[o];
                    }
                    if let Some(x) = drains_by_order.get_mut(ci) {
                        x[o] += c.drain_blocks_by_order[o] - b.drain_blocks_by_order[o];
                    }
                }
                t.pages_on_lists += c.count;
            }
            tot.refills += t.refills;
            tot.refill_blocks += t.refill_blocks;
            tot.drains += t.drains;
            tot.drain_blocks += t.drain_blocks;
            tot.pages_on_lists += t.pages_on_lists;
            zones_pcp.push(t);
        }
        tot.zone = "all".into();
        let (refill_blocks, drain_blocks) = (tot.refill_blocks, tot.drain_blocks);
        let counts = za.free_counts();
        let pageblocks = counts
            .iter()
            .zip(&self.pageblocks_at_start)
            .map(|(z, start)| PageblockTypes {
                zone: format!("{}", z.id.zone_type),
                at_start: type_counts(start),
                at_end: type_counts(&z.nr_blocks),
            })
            .collect();
        let pageblock_order = za.config().pageblock_order.idx();
        let end = EndState {
            nr_free_pages: za.nr_free_pages(),
            pagesets: za
                .zoneinfo()
                .zones
                .iter()
                .flat_map(|z| {
                    z.pagesets
                        .iter()
                        .filter(|p| p.count + p.high > 0)
                        .map(move |p| (z.id.zone_type.to_string(), p.cpu, p.count, p.high))
                })
                .collect(),
            kernel_pagesets: Vec::new(),
            nr_pcp_pages: za.nr_pcp_pages(),
            live_blocks: self.live.len as u64,
            live_pages: self.live.iter().map(|(_, l)| 1u64 << l.order).sum(),
            pool_pages: self
                .pool
                .iter()
                .enumerate()
                .map(|(o, runs)| (runs.len() as u64) << o)
                .sum(),
            unusable_index_pageblock_order: za
                .buddyinfo()
                .zones
                .iter()
                .map(|(id, b)| {
                    (
                        format!("{}", id.zone_type),
                        unusable_free_index(b, pageblock_order) as f64 / 1000.0,
                    )
                })
                .collect(),
            buddyinfo: za.buddyinfo().to_string(),
            pagetypeinfo: za.pagetypeinfo().to_string(),
            unusable_index: za.unusable_index().to_string(),
            extfrag_index: za.extfrag_index().to_string(),
        };
        let events = self.replayed;
        let ns = self.replay_time.as_nanos() as f64;
        let c = &self.counts;
        let za_frees = c.frees
            + c.split_frees
            + c.frees_pretrace_replayed
            + c.implicit_frees
            + c.overlap_frees
            + c.lost_frees_at_zone_locked
            + c.lost_frees_at_drain;
        ReplayReport {
            trace: trace.to_string(),
            layout: layout.clone(),
            holes,
            nr_cpus: za.config().nr_cpus,
            mobility_grouping: za.config().mobility_grouping,
            managed_pages: za.managed_pages(),
            parse,
            events: self.events,
            counts: self.counts.clone(),
            timing: Timing {
                events,
                replay_ns: self.replay_time.as_nanos() as u64,
                replay_cpu_ns: self.replay_cpu_ns,
                ns_per_event: if events > 0 { ns / events as f64 } else { 0.0 },
                ns_per_allocator_call: if self.counts.allocator_calls > 0 {
                    ns / self.counts.allocator_calls as f64
                } else {
                    0.0
                },
                trace_span_ns: self
                    .last_time_ns
                    .saturating_sub(self.first_time_ns.unwrap_or(self.last_time_ns)),
                end_to_end_ns: 0,
            },
            pcp: PcpComparison {
                zonealloc: tot,
                zonealloc_by_zone: zones_pcp,
                kernel_refill_blocks: self.kernel.refill_blocks,
                kernel_zone_locked_other: self.kernel.zone_locked_other,
                kernel_drain_blocks: self.kernel.drain_blocks,
                zonealloc_refill_blocks_by_cpu: by_cpu,
                kernel_refill_blocks_by_cpu: {
                    let mut k = self.kernel.refill_blocks_by_cpu.clone();
                    k.resize(za.config().nr_cpus.max(k.len()), 0);
                    k
                },
                zonealloc_drain_blocks_by_cpu: drains_by_cpu,
                kernel_drain_blocks_by_cpu: {
                    let mut k = self.kernel.drain_blocks_by_cpu.clone();
                    k.resize(za.config().nr_cpus.max(k.len()), 0);
                    k
                },
                zonealloc_refill_blocks_by_cpu_order: refills_by_order,
                kernel_refill_blocks_by_cpu_order: {
                    let mut k = self.kernel.refill_by_cpu_order.clone();
                    k.resize(za.config().nr_cpus.max(k.len()), [0; PCP_ORDER_SLOTS]);
                    k
                },
                zonealloc_drain_blocks_by_cpu_order: drains_by_order,
                kernel_drain_blocks_by_cpu_order: {
                    let mut k = self.kernel.drain_by_cpu_order.clone();
                    k.resize(za.config().nr_cpus.max(k.len()), [0; PCP_ORDER_SLOTS]);
                    k
                },
                allocs: c.allocs,
                kernel_frees: self.events.get(EventKind::Free),
                zonealloc_frees: za_frees,
                refill_ratio: ratio(refill_blocks, c.allocs, self.kernel.refill_blocks, c.allocs),
                drain_ratio: ratio(
                    drain_blocks,
                    za_frees,
                    self.kernel.drain_blocks,
                    self.events.get(EventKind::Free),
                ),
                drain_ratio_raw: ratio(drain_blocks, 1, self.kernel.drain_blocks, 1),
            },
            fallback: FallbackComparison {
                kernel_extfrag: self.kernel.extfrag,
                kernel_extfrag_fragmenting: self.kernel.extfrag_fragmenting,
                kernel_extfrag_change_ownership: self.kernel.extfrag_change_ownership,
                // Since the first record (a warm start from the layout claims).
                zonealloc_extfrag: Some(self.zonealloc_fallbacks().total),
                zonealloc_claimed: self.zonealloc_fallbacks().claimed,
                pageblock_types: pageblocks,
            },
            end,
            samples: self.samples.clone(),
            start: self.start_report.clone(),
            shape: None,
        }
    }
}

/// `(a / a_per) / (b / b_per)`, `None` when a rate is undefined or `b` is zero.
fn ratio(a: u64, a_per: u64, b: u64, b_per: u64) -> Option<f64> {
    (a_per > 0 && b > 0 && b_per > 0).then(|| (a as f64 / a_per as f64) / (b as f64 / b_per as f64))
}

/// zonealloc's free memory now, as the kernel's snapshots give it: free blocks per
/// order, per type (`kstate::TYPES`) and order, pageblocks per type.
pub fn shape_of(za: &ZoneAllocator) -> Shape {
    Shape {
        time_ns: 0,
        zones: za
            .free_counts()
            .into_iter()
            .map(|z| {
                let mut by_type = vec![vec![0u64; z.nr_free.len()]; TYPES.len()];
                let mut blocks = [0u64; 4];
                for mt in Migratetype::ALL {
                    if let Some(t) = type_index(mt) {
                        blocks[t] = z.nr_blocks[mt.idx()];
                        for (o, row) in z.nr_free.iter().enumerate() {
                            by_type[t][o] = row[mt.idx()];
                        }
                    }
                }
                ZoneShape {
                    node: z.id.node,
                    zone: z.id.zone_type,
                    free: (0..z.nr_free.len()).map(|o| z.blocks_at(o)).collect(),
                    free_by_type: by_type,
                    blocks,
                }
            })
            .collect(),
    }
}

/// Pageblocks per type, CMA only where there are some (a replay's zones have no
/// CMA area, as the traced kernel's had none).
fn type_counts(c: &[u64; MIGRATE_TYPES]) -> Vec<(String, u64)> {
    Migratetype::ALL
        .iter()
        .filter(|m| **m != Migratetype::Cma || c[m.idx()] > 0)
        .map(|m| (m.name().to_string(), c[m.idx()]))
        .collect()
}

// -----------------------------------------------------------------------------
// The warm start
// -----------------------------------------------------------------------------

/// What one CPU's per-CPU lists held when the trace began (`Replayer::warm_start`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WarmCpu {
    /// Blocks on the lists of each order 0..=3 (`PAGE_ALLOC_COSTLY_ORDER`).
    pub blocks: [u64; 4],
    /// Of `blocks[o]`, the blocks on the unmovable, movable and reclaimable lists
    /// of order `o` (Linux's per-CPU list types), where they add up to it; else the
    /// replay splits order 0 by the trace's mix of types, and takes higher orders
    /// movable.
    pub by_type: [[u64; 3]; 4],
    /// Pageblock-order blocks on the pageblock-order list.
    pub pageblock_blocks: u64,
    /// The auto-tuned `high` to grow toward.
    pub high: u64,
}

/// The per-CPU list type of a migratetype: 0 unmovable, 1 movable, 2
/// reclaimable (Linux's `MIGRATE_PCPTYPES`); `None` for the others, whose pages
/// travel on the movable list.
fn pcp_type_slot(mt: Migratetype) -> Option<usize> {
    match mt {
        Migratetype::Unmovable => Some(0),
        Migratetype::Movable => Some(1),
        Migratetype::Reclaimable => Some(2),
        _ => None,
    }
}

/// The per-CPU lists at the start of a trace, from the machine's zoneinfo (`count`
/// and `high` of each CPU in the zone that held the most) and the trace's own
/// first records:
///
/// * zoneinfo's `count` is every list together; the trace tells what each list
///   held, a list being an order (0..=3, or the pageblock order) and a type
///   (unmovable, movable, reclaimable), as in Linux. A CPU's first refill of a list
///   (`mm_page_alloc_zone_locked` with `percpu_refill=1`, which names both) comes
///   when that list is empty, so the blocks it allocated minus those it freed before
///   then is what the list held at the start. A list never refilled in `first`
///   held at least its largest such deficit. An allocation names its list; a free
///   goes to the list of its pageblock's type, taken from the last allocation seen
///   in that pageblock (movable if none).
/// * What zoneinfo's count leaves over goes to the order-0 lists of the types this
///   CPU allocated but never refilled, in proportion to those allocations; if there
///   are none, in whole pageblocks to the pageblock-order list (the only other list
///   that holds thousands of pages).
pub fn warm_state(
    count: &[u64],
    high: &[u64],
    first: &[Record],
    nr_cpus: usize,
    pageblock_order: u8,
) -> Vec<WarmCpu> {
    use crate::event::Event;
    use std::collections::HashMap;
    // Per CPU, type and list (orders 0..=3, then the pageblock order): the running
    // balance of blocks, the largest deficit, and the deficit at the first refill.
    const LISTS: usize = 5;
    const TYPES: usize = 3;
    let slot = |order: u8| match order {
        0..=3 => Some(order as usize),
        o if o == pageblock_order => Some(4),
        _ => None,
    };
    let type_of = |mt: Option<Migratetype>| mt.and_then(pcp_type_slot).unwrap_or(1);
    let idx = |cpu: usize, t: usize, l: usize| (cpu * TYPES + t) * LISTS + l;
    let n = nr_cpus * TYPES * LISTS;
    let mut balance = vec![0i64; n];
    let mut deficit = vec![0u64; n];
    let mut at_refill: Vec<Option<u64>> = vec![None; n];
    // Order-0 allocations per CPU and type; the type of each pageblock seen.
    let mut allocs = vec![[0u64; TYPES]; nr_cpus];
    let mut block_type: HashMap<u64, usize> = HashMap::new();
    for r in first {
        let cpu = r.cpu as usize;
        if cpu >= nr_cpus {
            continue;
        }
        let (order, t, step) = match r.event {
            Event::Alloc {
                pfn: Some(pfn),
                order,
                migratetype,
                ..
            } => {
                let t = type_of(migratetype);
                block_type.insert(pfn >> pageblock_order, t);
                if order == 0 {
                    allocs[cpu][t] += 1;
                }
                (order, t, -1)
            }
            Event::Free { pfn, order } => {
                let t = block_type
                    .get(&(pfn >> pageblock_order))
                    .copied()
                    .unwrap_or(1);
                (order, t, 1)
            }
            Event::AllocZoneLocked {
                order,
                migratetype,
                percpu_refill: true,
                ..
            } => (order, type_of(migratetype), 0),
            _ => continue,
        };
        let Some(l) = slot(order) else { continue };
        // Linux keeps two pageblock-order lists, movable and the rest.
        let t = if l == 4 && t != 1 { 0 } else { t };
        let i = idx(cpu, t, l);
        if at_refill[i].is_some() {
            continue;
        }
        if step == 0 {
            // The deepest point so far, which includes the balance now: where a
            // refill finds the balance above it, an event is missing.
            at_refill[i] = Some(deficit[i]);
        } else {
            balance[i] += step;
            deficit[i] = deficit[i].max(balance[i].min(0).unsigned_abs());
        }
    }
    (0..nr_cpus)
        .map(|cpu| {
            let c = count.get(cpu).copied().unwrap_or(0);
            let at =
                |t: usize, l: usize| at_refill[idx(cpu, t, l)].unwrap_or(deficit[idx(cpu, t, l)]);
            let all = |l: usize| (0..TYPES).map(|t| at(t, l)).sum::<u64>();
            let mut w = WarmCpu {
                blocks: [all(0), all(1), all(2), all(3)],
                by_type: core::array::from_fn(|o| [at(0, o), at(1, o), at(2, o)]),
                pageblock_blocks: all(4),
                high: high.get(cpu).copied().unwrap_or(0),
            };
            let pages = |w: &WarmCpu| {
                (0..4).map(|o| w.blocks[o] << o).sum::<u64>()
                    + (w.pageblock_blocks << pageblock_order)
            };
            // Never more than zoneinfo counted: trim from the top order down.
            while pages(&w) > c {
                if w.pageblock_blocks > 0 {
                    w.pageblock_blocks -= 1;
                } else if let Some(o) = (0..4).rev().find(|&o| w.blocks[o] > 0) {
                    w.blocks[o] -= 1;
                    let t = (0..TYPES).max_by_key(|&t| w.by_type[o][t]).unwrap_or(1);
                    w.by_type[o][t] -= 1;
                } else {
                    break;
                }
            }
            let rest = c - pages(&w);
            // The types this CPU allocated at order 0 without ever refilling them.
            let open: Vec<usize> = (0..TYPES)
                .filter(|&t| at_refill[idx(cpu, t, 0)].is_none() && allocs[cpu][t] > 0)
                .collect();
            // Not 0: every open type has allocations.
            let weight: u64 = open.iter().map(|&t| allocs[cpu][t]).sum();
            if !open.is_empty() {
                let mut given = 0;
                for &t in &open {
                    let share = rest * allocs[cpu][t] / weight;
                    w.by_type[0][t] += share;
                    given += share;
                }
                // The rounding's remainder to the type allocated most.
                let top = *open.iter().max_by_key(|&&t| allocs[cpu][t]).unwrap_or(&1);
                w.by_type[0][top] += rest - given;
                w.blocks[0] += rest;
            } else if (0..TYPES).all(|t| allocs[cpu][t] == 0 && at_refill[idx(cpu, t, 0)].is_none())
            {
                // Nothing allocated at order 0 here: the order-0 lists, by the mix.
                w.blocks[0] += rest;
                w.by_type[0] = [0; 3];
            } else {
                w.pageblock_blocks += rest >> pageblock_order;
            }
            w
        })
        .collect()
}

// -----------------------------------------------------------------------------
// The report
// -----------------------------------------------------------------------------

/// Adds one to `v[cpu][slot]`, growing `v` to the CPU.
fn bump(v: &mut Vec<[u64; PCP_ORDER_SLOTS]>, cpu: usize, slot: usize) {
    if v.len() <= cpu {
        v.resize(cpu + 1, [0; PCP_ORDER_SLOTS]);
    }
    v[cpu][slot] += 1;
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct KernelCounts {
    refill_blocks: u64,
    /// Refill blocks per CPU (grown on demand).
    refill_blocks_by_cpu: Vec<u64>,
    zone_locked_other: u64,
    drain_blocks: u64,
    /// Drain blocks per CPU (the CPU each `mm_page_pcpu_drain` was recorded on;
    /// grown on demand).
    drain_blocks_by_cpu: Vec<u64>,
    /// Refill and drain blocks per CPU and list order (`PCP_ORDER_SLOTS`).
    refill_by_cpu_order: Vec<[u64; PCP_ORDER_SLOTS]>,
    drain_by_cpu_order: Vec<[u64; PCP_ORDER_SLOTS]>,
    extfrag: u64,
    extfrag_fragmenting: u64,
    extfrag_change_ownership: u64,
}

/// Time spent in the replay loop.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    /// Records replayed.
    pub events: u64,
    /// Wall time of the replay loop, parsing and sampling excluded.
    pub replay_ns: u64,
    /// The time the replaying thread was on a CPU while it replayed (Linux's
    /// schedstat; `None` elsewhere): the loop's cost without the time other work
    /// held the CPU, the `buddyinfo()` samples between segments included.
    pub replay_cpu_ns: Option<u64>,
    /// `replay_ns / events`.
    pub ns_per_event: f64,
    /// `replay_ns / allocator_calls`.
    pub ns_per_allocator_call: f64,
    /// Trace time from the first to the last record.
    pub trace_span_ns: u64,
    /// Wall time from opening the file to the end of the replay: reading,
    /// decompressing, parsing, building the allocator, replaying (not the report).
    pub end_to_end_ns: u64,
}

impl Timing {
    /// Events per second of the replay loop.
    pub fn loop_events_per_s(&self) -> f64 {
        per_s(self.events, self.replay_ns)
    }

    /// Events per second end to end.
    pub fn end_to_end_events_per_s(&self) -> f64 {
        per_s(self.events, self.end_to_end_ns)
    }
}

fn per_s(n: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        n as f64 * 1e9 / ns as f64
    }
}

/// Per-CPU list activity of some zones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PcpTotals {
    /// Zone name, or "all".
    pub zone: String,
    /// Refills (`rmqueue_bulk` calls).
    pub refills: u64,
    /// Blocks taken by refills (the kernel's `mm_page_alloc_zone_locked`
    /// `percpu_refill=1` events).
    pub refill_blocks: u64,
    /// Flushes (`free_pcppages_bulk` calls).
    pub drains: u64,
    /// Blocks flushed (the kernel's `mm_page_pcpu_drain` events).
    pub drain_blocks: u64,
    /// Pages on the lists at the end.
    pub pages_on_lists: u64,
}

/// zonealloc's per-CPU list activity next to the kernel's in the same trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PcpComparison {
    /// zonealloc, all zones.
    pub zonealloc: PcpTotals,
    /// zonealloc, per zone.
    pub zonealloc_by_zone: Vec<PcpTotals>,
    /// zonealloc's refill blocks per CPU, all zones.
    pub zonealloc_refill_blocks_by_cpu: Vec<u64>,
    /// The kernel's refill blocks per CPU.
    pub kernel_refill_blocks_by_cpu: Vec<u64>,
    /// zonealloc's drain blocks per CPU, all zones.
    pub zonealloc_drain_blocks_by_cpu: Vec<u64>,
    /// The kernel's drain blocks per CPU (the CPU the event was recorded on).
    pub kernel_drain_blocks_by_cpu: Vec<u64>,
    /// Per CPU, the refill blocks of each list order: orders 0 to 3, then the
    /// pageblock order (`PcpCpuStats::refill_blocks_by_order`), zonealloc's and the
    /// kernel's.
    pub zonealloc_refill_blocks_by_cpu_order: Vec<[u64; PCP_ORDER_SLOTS]>,
    /// The kernel's refill blocks per CPU and list order.
    pub kernel_refill_blocks_by_cpu_order: Vec<[u64; PCP_ORDER_SLOTS]>,
    /// Per CPU, the drain blocks of each list order, as the refills.
    pub zonealloc_drain_blocks_by_cpu_order: Vec<[u64; PCP_ORDER_SLOTS]>,
    /// The kernel's drain blocks per CPU and list order.
    pub kernel_drain_blocks_by_cpu_order: Vec<[u64; PCP_ORDER_SLOTS]>,
    /// The kernel's `mm_page_alloc_zone_locked` events with `percpu_refill=1`.
    pub kernel_refill_blocks: u64,
    /// The kernel's `mm_page_alloc_zone_locked` events with `percpu_refill=0`
    /// (high-order blocks taken straight from the buddy lists).
    pub kernel_zone_locked_other: u64,
    /// The kernel's `mm_page_pcpu_drain` events.
    pub kernel_drain_blocks: u64,
    /// Allocations: the trace's `mm_page_alloc` events the kernel served, each
    /// replayed once.
    pub allocs: u64,
    /// The kernel's frees (`mm_page_free` events).
    pub kernel_frees: u64,
    /// zonealloc's frees for the trace: replayed, split, pre-trace (from the pool),
    /// and the blocks whose frees were lost (implicit, overlap, zone-locked, drain).
    pub zonealloc_frees: u64,
    /// zonealloc's refill blocks per allocation over the kernel's (`None` when the
    /// kernel refilled nothing).
    pub refill_ratio: Option<f64>,
    /// zonealloc's drain blocks per free over the kernel's (`None` when the kernel
    /// drained nothing): each side's drains divided by its own frees, zonealloc's
    /// counting the frees the replay recovered (`zonealloc_frees`).
    pub drain_ratio: Option<f64>,
    /// zonealloc's drain blocks over the kernel's, raw (`None` when the kernel
    /// drained nothing).
    pub drain_ratio_raw: Option<f64>,
}

/// Pageblocks per migratetype in one zone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PageblockTypes {
    /// Zone name.
    pub zone: String,
    /// Before the replay: `(type, pageblocks)`.
    pub at_start: Vec<(String, u64)>,
    /// After it.
    pub at_end: Vec<(String, u64)>,
}

/// Fallbacks: the kernel's `mm_page_alloc_extfrag` events next to what zonealloc
/// shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FallbackComparison {
    /// The kernel's `mm_page_alloc_extfrag` events.
    pub kernel_extfrag: u64,
    /// Of those, with `fallback_order < pageblock_order` (mmtests' "fragmenting").
    pub kernel_extfrag_fragmenting: u64,
    /// Of those, with `change_ownership=1` (the pageblock was claimed).
    pub kernel_extfrag_change_ownership: u64,
    /// zonealloc's fallbacks (`zone_events()`: allocations served from another
    /// migratetype's lists, each an `mm_page_alloc_extfrag` in Linux).
    pub zonealloc_extfrag: Option<u64>,
    /// Of those, the ones that claimed the whole pageblock.
    pub zonealloc_claimed: u64,
    /// What is public: pageblocks per migratetype before and after. Every
    /// pageblock starts Movable, so Unmovable/Reclaimable blocks at the end are
    /// pageblocks that fallbacks claimed.
    pub pageblock_types: Vec<PageblockTypes>,
}

/// The fragmentation state after the replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndState {
    /// Free pages on the buddy lists.
    pub nr_free_pages: u64,
    /// Each zone's per-CPU lists: `(zone, cpu, count, high)`, zones with lists
    /// only.
    pub pagesets: Vec<(String, usize, u64, u64)>,
    /// The kernel's, from its zoneinfo at the end of the capture, where there is
    /// one.
    pub kernel_pagesets: Vec<(String, usize, u64, u64)>,
    /// Free pages on per-CPU lists.
    pub nr_pcp_pages: u64,
    /// Blocks still held for the trace.
    pub live_blocks: u64,
    /// Pages in them.
    pub live_pages: u64,
    /// Pages of the pre-trace pool not yet freed (memory in use before the trace).
    pub pool_pages: u64,
    /// Unusable free space index at pageblock order (0..1), per zone.
    pub unusable_index_pageblock_order: Vec<(String, f64)>,
    /// `/proc/buddyinfo`.
    pub buddyinfo: String,
    /// `/proc/pagetypeinfo`.
    pub pagetypeinfo: String,
    /// debugfs `extfrag/unusable_index`.
    pub unusable_index: String,
    /// debugfs `extfrag/extfrag_index`.
    pub extfrag_index: String,
}

/// Everything a replay found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The trace's path.
    pub trace: String,
    /// The zones replayed into.
    pub layout: ZoneLayout,
    /// How holes were made.
    pub holes: HoleModel,
    /// CPUs of the allocator.
    pub nr_cpus: usize,
    /// Mobility grouping on.
    pub mobility_grouping: bool,
    /// Frames the allocator manages.
    pub managed_pages: u64,
    /// What the reader saw.
    pub parse: ParseStats,
    /// Records replayed, per kind.
    pub events: EventCounts,
    /// What the replay did with them.
    pub counts: ReplayCounts,
    /// Time in the replay loop.
    pub timing: Timing,
    /// Per-CPU refills and drains, zonealloc's and the kernel's.
    pub pcp: PcpComparison,
    /// Fallbacks.
    pub fallback: FallbackComparison,
    /// The fragmentation state at the end.
    pub end: EndState,
    /// `buddyinfo()` over the replay.
    pub samples: Vec<BuddySample>,
    /// What the warm start from the kernel's layout did, if there was one.
    pub start: Option<StartReport>,
    /// zonealloc's free memory beside the kernel's snapshots, if captured.
    pub shape: Option<ShapeComparison>,
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counts;
        let e = &self.events;
        writeln!(f, "replay of {}", self.trace)?;
        writeln!(
            f,
            "zones ({:?} hole model, {} pages managed, {} CPUs, mobility grouping {}):",
            self.holes,
            self.managed_pages,
            self.nr_cpus,
            if self.mobility_grouping { "on" } else { "off" }
        )?;
        write!(f, "{}", self.layout)?;
        let p = &self.parse;
        writeln!(
            f,
            "\nread {} lines, {:.1} MB of text{}: {} events, {} other events, {} blank/comment",
            p.lines,
            p.bytes as f64 / 1e6,
            if p.xz {
                " (xz)"
            } else if p.gzip {
                " (gzip)"
            } else {
                ""
            },
            p.events.total(),
            p.other_events,
            p.blank_lines,
        )?;
        writeln!(
            f,
            "  skipped: {} malformed, {} on a CPU out of range, {} at a pfn outside the zones{}",
            p.malformed,
            p.cpu_out_of_range,
            p.pfn_out_of_range,
            if p.truncated_last_line {
                ", 1 cut-short last line"
            } else {
                ""
            }
        )?;
        for m in &p.malformed_examples {
            writeln!(f, "  skipped {}:{m}", self.trace)?;
        }
        for (s, n) in &p.unknown_gfp_symbols {
            writeln!(f, "  unknown gfp symbol {s} x{n} (ignored)")?;
        }
        writeln!(f, "\nevents by kind          in trace   replayed as")?;
        let row = |f: &mut fmt::Formatter<'_>, k: EventKind, what: String| {
            writeln!(f, "  {:<26} {:>8}   {}", k.name(), e.get(k), what)
        };
        row(
            f,
            EventKind::Alloc,
            format!(
                "{} alloc_pages_on ({} failed), {} kernel-failed not replayed",
                c.allocs, c.alloc_failures, c.kernel_failed_allocs
            ),
        )?;
        row(
            f,
            EventKind::Free,
            format!(
                "{} free_pages_on, {} split+free, {} pre-trace skipped, {} of failed allocs, {} order mismatch",
                c.frees, c.split_frees, c.frees_pretrace, c.frees_of_failed_allocs, c.free_order_mismatch
            ),
        )?;
        row(
            f,
            EventKind::FreeBatched,
            "counted (same free as mm_page_free)".into(),
        )?;
        row(
            f,
            EventKind::AllocZoneLocked,
            "counted (kernel refills)".into(),
        )?;
        row(f, EventKind::PcpuDrain, "counted (kernel drains)".into())?;
        row(
            f,
            EventKind::AllocExtfrag,
            "counted (kernel fallbacks)".into(),
        )?;
        writeln!(
            f,
            "  lost frees, freed when the kernel reused the frames: {} at an allocation of the same block, \
             {} at an overlapping allocation, {} at mm_page_alloc_zone_locked, {} at mm_page_pcpu_drain",
            c.implicit_frees, c.overlap_frees, c.lost_frees_at_zone_locked, c.lost_frees_at_drain
        )?;
        writeln!(
            f,
            "  pre-trace frees replayed from a pool of {} max-order blocks: {} of {}; \
             warm start: {} pages on per-CPU lists; free errors: {}",
            c.pretrace_pool_blocks,
            c.frees_pretrace_replayed,
            c.frees_pretrace,
            c.warm_pcp_pages,
            c.free_errors
        )?;
        writeln!(
            f,
            "  per-CPU high decayed (decay_pcp_high, at whole seconds of trace time, on each CPU): {} times",
            c.decays
        )?;
        if c.alloc_failures > 0 {
            writeln!(
                f,
                "  zonealloc failures by order: {:?}",
                c.alloc_failures_by_order
            )?;
        }
        let t = &self.timing;
        writeln!(
            f,
            "\ntiming: {} events in {:.3} ms of replay loop = {:.1} ns/event, {:.1} M events/s; \
             {} allocator calls, {:.1} ns per call ({:.1} M calls/s); trace spans {:.3} s",
            t.events,
            t.replay_ns as f64 / 1e6,
            t.ns_per_event,
            t.loop_events_per_s() / 1e6,
            c.allocator_calls,
            t.ns_per_allocator_call,
            per_s(c.allocator_calls, t.replay_ns) / 1e6,
            t.trace_span_ns as f64 / 1e9
        )?;
        if let Some(cpu) = t.replay_cpu_ns.filter(|&c| c > 0) {
            writeln!(
                f,
                "  on a CPU {:.3} ms ({:.0} % of the loop's wall time; samples between segments in it): {:.1} ns/event, {:.1} M events/s of CPU time",
                cpu as f64 / 1e6,
                cpu as f64 * 100.0 / t.replay_ns.max(1) as f64,
                cpu as f64 / t.events.max(1) as f64,
                per_s(t.events, cpu) / 1e6
            )?;
        }
        if t.end_to_end_ns > 0 {
            writeln!(
                f,
                "  end to end (read, decompress, parse, build the allocator, replay): {:.3} s = {:.2} M events/s, {:.0} MB/s of text",
                t.end_to_end_ns as f64 / 1e9,
                t.end_to_end_events_per_s() / 1e6,
                p.bytes as f64 / 1e6 / (t.end_to_end_ns as f64 / 1e9),
            )?;
        }
        let pc = &self.pcp;
        writeln!(
            f,
            "\nper-CPU lists              zonealloc      kernel (same trace)"
        )?;
        writeln!(
            f,
            "  refill blocks          {:>12}   {:>12}  (mm_page_alloc_zone_locked percpu_refill=1)",
            pc.zonealloc.refill_blocks, pc.kernel_refill_blocks
        )?;
        writeln!(
            f,
            "  drain blocks           {:>12}   {:>12}  (mm_page_pcpu_drain)",
            pc.zonealloc.drain_blocks, pc.kernel_drain_blocks
        )?;
        writeln!(
            f,
            "  refills / drains calls {:>5} / {:<5}   zone-locked without refill: {}",
            pc.zonealloc.refills, pc.zonealloc.drains, pc.kernel_zone_locked_other
        )?;
        for z in &pc.zonealloc_by_zone {
            writeln!(
                f,
                "    {:<8} refill blocks {:>8}, drain blocks {:>8}, pages on lists now {}",
                z.zone, z.refill_blocks, z.drain_blocks, z.pages_on_lists
            )?;
        }
        let show = |r: Option<f64>| r.map_or("n/a (kernel: 0)".to_string(), |r| format!("{r:.2}x"));
        writeln!(
            f,
            "  per CPU                refill blocks: zonealloc / kernel          drain blocks: zonealloc / kernel"
        )?;
        let cpus = pc
            .zonealloc_refill_blocks_by_cpu
            .len()
            .max(pc.kernel_refill_blocks_by_cpu.len());
        for cpu in 0..cpus {
            let at = |v: &[u64]| v.get(cpu).copied().unwrap_or(0);
            let (zr, kr) = (
                at(&pc.zonealloc_refill_blocks_by_cpu),
                at(&pc.kernel_refill_blocks_by_cpu),
            );
            let (zd, kd) = (
                at(&pc.zonealloc_drain_blocks_by_cpu),
                at(&pc.kernel_drain_blocks_by_cpu),
            );
            writeln!(
                f,
                "    CPU {cpu:<4}  {zr:>12} / {kr:<12} = {:<16} {zd:>12} / {kd:<12} = {}",
                show(ratio(zr, 1, kr, 1)),
                show(ratio(zd, 1, kd, 1)),
            )?;
            let by = |v: &[[u64; PCP_ORDER_SLOTS]], o: usize| v.get(cpu).map_or(0, |a| a[o]);
            for o in 0..PCP_ORDER_SLOTS {
                let (zr, kr) = (
                    by(&pc.zonealloc_refill_blocks_by_cpu_order, o),
                    by(&pc.kernel_refill_blocks_by_cpu_order, o),
                );
                let (zd, kd) = (
                    by(&pc.zonealloc_drain_blocks_by_cpu_order, o),
                    by(&pc.kernel_drain_blocks_by_cpu_order, o),
                );
                if zr + kr + zd + kd == 0 {
                    continue;
                }
                let name = if o + 1 == PCP_ORDER_SLOTS {
                    "order pb".to_string()
                } else {
                    format!("order {o}")
                };
                writeln!(
                    f,
                    "      {name:<8}  {zr:>10} / {kr:<12} = {:<16} {zd:>12} / {kd:<12} = {}",
                    show(ratio(zr, 1, kr, 1)),
                    show(ratio(zd, 1, kd, 1)),
                )?;
            }
        }
        writeln!(
            f,
            "  refill blocks per allocation: zonealloc {:.3}, kernel {:.3}: {}",
            pc.zonealloc.refill_blocks as f64 / pc.allocs.max(1) as f64,
            pc.kernel_refill_blocks as f64 / pc.allocs.max(1) as f64,
            show(pc.refill_ratio)
        )?;
        writeln!(
            f,
            "  drain blocks per free:        zonealloc {:.3} ({} frees), kernel {:.3} ({} frees): {}",
            pc.zonealloc.drain_blocks as f64 / pc.zonealloc_frees.max(1) as f64,
            pc.zonealloc_frees,
            pc.kernel_drain_blocks as f64 / pc.kernel_frees.max(1) as f64,
            pc.kernel_frees,
            show(pc.drain_ratio)
        )?;
        writeln!(
            f,
            "  drain blocks, raw:            zonealloc {} / kernel {}: {}  (per free divides each \
             side by its own frees, zonealloc's counting the frees it recovered; raw does not)",
            pc.zonealloc.drain_blocks,
            pc.kernel_drain_blocks,
            show(pc.drain_ratio_raw)
        )?;
        let fb = &self.fallback;
        writeln!(
            f,
            "\nfallbacks: kernel mm_page_alloc_extfrag {} ({} fragmenting, {} claimed the pageblock); zonealloc: {}",
            fb.kernel_extfrag,
            fb.kernel_extfrag_fragmenting,
            fb.kernel_extfrag_change_ownership,
            match fb.zonealloc_extfrag {
                Some(n) => format!("{n} ({} claimed the pageblock); pageblock types:", fb.zonealloc_claimed),
                None => "not exposed by the library; pageblock types instead:".into(),
            }
        )?;
        for z in &fb.pageblock_types {
            write!(f, "  {:<8}", z.zone)?;
            for ((name, a), (_, b)) in z.at_start.iter().zip(&z.at_end) {
                if a != b || *a > 0 {
                    write!(f, " {name} {a}->{b}")?;
                }
            }
            writeln!(f)?;
        }
        let end = &self.end;
        writeln!(
            f,
            "\nend state: {} blocks ({} pages) held for the trace, {} pages free, {} on per-CPU lists",
            end.live_blocks, end.live_pages, end.nr_free_pages, end.nr_pcp_pages
        )?;
        if !end.pagesets.is_empty() {
            let list = |v: &[(String, usize, u64, u64)]| {
                v.iter()
                    .map(|(z, cpu, c, h)| format!("{z} CPU {cpu} {c}/{h}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                f,
                "  per-CPU lists, count/high: zonealloc {}",
                list(&end.pagesets)
            )?;
            if !end.kernel_pagesets.is_empty() {
                writeln!(
                    f,
                    "  the kernel's at the end of the capture (its zoneinfo): {}",
                    list(&end.kernel_pagesets)
                )?;
            }
        }
        for (z, u) in &end.unusable_index_pageblock_order {
            writeln!(
                f,
                "  unusable free space index at pageblock order, {z}: {u:.3}"
            )?;
        }
        writeln!(f, "\nbuddyinfo:\n{}", end.buddyinfo)?;
        writeln!(f, "pagetypeinfo:\n{}", end.pagetypeinfo)?;
        writeln!(f, "unusable_index:\n{}", end.unusable_index)?;
        write!(f, "extfrag_index:\n{}", end.extfrag_index)?;
        if let Some(st) = &self.start {
            writeln!(
                f,
                "\nwarm start from the kernel's layout: {} frames offline (not initialised), {} allocated for the \
                 kernel's memory in use, {} free blocks ({} pages) freed where the kernel had them ({} refused)",
                st.offline_frames, st.allocated_frames, st.free_blocks, st.free_pages, st.free_errors
            )?;
            let names = ["Unmovable", "Movable", "Reclaimable", "HighAtomic"];
            let list = |v: &[u64; 4]| {
                names
                    .iter()
                    .zip(v)
                    .filter(|(_, &n)| n > 0)
                    .map(|(m, n)| format!("{m} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                f,
                "  pageblock types named by the trace: {}; inferred from their pages: {}; claims that failed: {}",
                list(&st.named_types),
                list(&st.inferred_types),
                st.retype_failures
            )?;
            writeln!(
                f,
                "  per-CPU list pages put on the lists: {:?}, zoneinfo counted {:?}; on the lists after the warm \
                 start: {:?}; high, zonealloc's and zoneinfo's: {:?}",
                st.pcp_pages, st.pcp_count, st.pcp_after, st.pcp_high
            )?;
            writeln!(
                f,
                "  records before the start: {}; pre-trace frees of exactly the frames held: {}, partial: {}; \
                 pages brought online: {}; held pages the kernel reused: {}",
                c.before_start,
                c.pretrace_frees_exact,
                c.pretrace_frees_partial,
                c.onlined_pages,
                c.pretrace_reused
            )?;
        }
        if let Some(sh) = &self.shape {
            write!(f, "{sh}")?;
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------
// Entry points
// -----------------------------------------------------------------------------

/// Records the warm start reads the per-CPU lists from (`warm_state`): the first
/// 1,048,576. A list's first refill tells what it held, and on a CPU that
/// allocates little it can come late: on the `file-walk` trace CPU 0's first
/// movable order-0 refill came 4.2 s in, past the 2.8 s that 262,144 events
/// covered, and its refills read 0.74x of the kernel's instead of 1.00x. (With
/// 65,536 instead of 262,144, an earlier captured trace read 1.37x instead of
/// 1.27x.)
pub const WARM_WINDOW: usize = 1 << 20;

/// CPUs a replay builds when neither the options nor the layout say how many: the
/// largest CPU id in the first chunk plus one, at most this many. Events on other
/// CPUs are skipped and counted (`ParseStats::cpu_out_of_range`).
pub const MAX_AUTO_CPUS: usize = 256;

/// Replays the trace at `path` (plain, xz or gzip) and reports; also returns the
/// replay state (the allocator, the blocks still held) for further use.
///
/// One pass: the trace streams through in chunks of `opts.chunk_events` records,
/// decoded on a second thread while this one parses and replays. The CPU count is
/// `opts.nr_cpus`, else the layout's (a zoneinfo's per-CPU pagesets), else the
/// largest CPU id in the first chunk plus one (at most `MAX_AUTO_CPUS`). Events on a
/// CPU past that count, or (when the layout is the traced machine's, with its CPU
/// count) at a pfn past its last zone, are skipped and counted.
///
/// # Errors
/// Reading the trace (unreadable, an unsupported format, no page-allocator event at
/// all, a bad line if `opts.read.strict`), or a layout that makes no valid allocator.
pub fn run_with_state(
    path: &Path,
    opts: &ReplayOptions,
) -> Result<(ReplayReport, Replayer), ReplayError> {
    let t0 = Instant::now();
    let known_cpus = opts.nr_cpus.or(opts.layout.nr_cpus);
    let mut read = opts.read;
    read.nr_cpus = read.nr_cpus.or(known_cpus).or(Some(MAX_AUTO_CPUS));
    if opts.layout.nr_cpus.is_some() {
        // A layout that describes the traced machine (its zoneinfo, or the built-in
        // one) bounds the trace's pfns; a hand-made one is just room to replay into.
        read.end_pfn = read.end_pfn.or(opts.layout.end_pfn());
    }
    let mut reader = TraceReader::open(path, read)?;
    let limit = opts.max_events.unwrap_or(u64::MAX);
    let chunk = opts.chunk_events.max(1);
    // The warm start reads each CPU's lists from the trace's first records: the
    // first chunk is at least WARM_WINDOW long (48 MB of records) when warm.
    let first = if opts.warm {
        chunk.max(WARM_WINDOW)
    } else {
        chunk
    };
    let mut buf = Vec::with_capacity(chunk.min(1 << 20));
    if let (Some(files), true) = (&opts.start, opts.warm) {
        return run_from_layout(path, opts, files, reader, buf, first, t0);
    }
    let build = |nr_cpus| {
        let mut config = opts.layout.config(opts.holes, nr_cpus);
        config.mobility_grouping = opts.mobility_grouping;
        // The held-block table covers the traced machine's frames (its zones'
        // spans), not only the ones the replay builds.
        let frames = opts.layout.end_pfn().unwrap_or(0);
        let built = config
            .nodes
            .iter()
            .flat_map(|n| n.zones.iter())
            .map(|z| z.end_pfn().0)
            .max()
            .unwrap_or(0);
        Replayer::with_trace_frames(config, opts.sample_every, frames.max(built))
    };
    // With the CPU count known, the allocator is built while the decoder thread
    // starts on the file; else the first chunk tells the count.
    let mut rp = match known_cpus {
        Some(n) => {
            let rp = build(n)?;
            reader.read_chunk(&mut buf, (first as u64).min(limit) as usize)?;
            rp
        }
        None => {
            reader.read_chunk(&mut buf, (first as u64).min(limit) as usize)?;
            let n = buf.iter().map(|r| r.cpu as usize + 1).max().unwrap_or(1);
            reader.set_nr_cpus(n);
            build(n)?
        }
    };
    if opts.warm {
        let mut mix = [0u64; MIGRATE_TYPES];
        for r in &buf {
            if let crate::event::Event::Alloc {
                order: 0,
                migratetype: Some(mt),
                ..
            } = r.event
            {
                mix[mt.idx()] += 1;
            }
        }
        let (count, high) = opts.layout.busiest_pcp();
        let c = rp.allocator().config();
        let warm = warm_state(count, high, &buf, c.nr_cpus, c.pageblock_order.0);
        rp.warm_start(&warm, &mix);
        rp.set_pretrace_pool(true);
    }
    if opts.decay {
        rp.set_decay(true);
    }
    let mut done = buf.len() as u64;
    rp.replay(&buf);
    while done < limit {
        buf.clear();
        let want = (chunk as u64).min(limit - done) as usize;
        if reader.read_chunk(&mut buf, want)? == 0 {
            break;
        }
        done += buf.len() as u64;
        rp.replay(&buf);
    }

    if opts.sample_every > 0 && rp.samples.last().is_none_or(|s| s.event != rp.replayed) {
        rp.sample();
    }
    let wall = t0.elapsed();
    let mut report = rp.report(
        &path.display().to_string(),
        &opts.layout,
        opts.holes,
        reader.into_stats(),
    );
    report.timing.end_to_end_ns = wall.as_nanos() as u64;
    Ok((report, rp))
}

/// `run_with_state` from the kernel's own layout: the first records are read, the
/// start inferred from them and the files (`StartPlan::infer`) and applied, then
/// the whole trace replayed, the shape sampled at each snapshot's time.
fn run_from_layout(
    path: &Path,
    opts: &ReplayOptions,
    files: &StartFiles,
    mut reader: TraceReader,
    mut buf: Vec<Record>,
    first: usize,
    t0: Instant,
) -> Result<(ReplayReport, Replayer), ReplayError> {
    let limit = opts.max_events.unwrap_or(u64::MAX);
    let chunk = opts.chunk_events.max(1);
    // A first pass over the whole trace tells the start (`start::Observer`): a
    // per-CPU list page can first be used late in it.
    reader.read_chunk(&mut buf, (first as u64).min(limit) as usize)?;
    let nr_cpus = opts
        .nr_cpus
        .or(opts.layout.nr_cpus)
        .unwrap_or_else(|| buf.iter().map(|r| r.cpu as usize + 1).max().unwrap_or(1));
    reader.set_nr_cpus(nr_cpus);
    let start_err = |e: crate::start::StartError| {
        ReplayError::Options(format!("warm start from the layout: {e}"))
    };
    let mut observer =
        crate::start::Observer::new(&opts.layout, &files.page, &buf, nr_cpus).map_err(start_err)?;
    observer.observe(&buf);
    let mut seen = buf.len() as u64;
    while seen < limit {
        buf.clear();
        let want = (chunk as u64).min(limit - seen) as usize;
        if reader.read_chunk(&mut buf, want)? == 0 {
            break;
        }
        seen += buf.len() as u64;
        observer.observe(&buf);
    }
    let plan =
        StartPlan::from_observer(&opts.layout, &files.at_start, observer).map_err(start_err)?;
    // The second pass replays.
    let mut read = reader.options();
    read.nr_cpus = Some(nr_cpus);
    let mut reader = TraceReader::open(path, read)?;
    buf.clear();
    reader.read_chunk(&mut buf, (first as u64).min(limit) as usize)?;
    let mut config = plan.config();
    config.mobility_grouping = opts.mobility_grouping;
    let mut rp = Replayer::new(config, opts.sample_every)?;
    rp.layout_start(&plan, opts.start_seed)
        .map_err(|e| ReplayError::Options(format!("warm start from the layout: {e}")))?;
    if let Some(sn) = &files.snapshots {
        let mut times: Vec<u64> = sn
            .seconds
            .iter()
            .map(|s| s.time_ns)
            .chain(sn.end.iter().map(|s| s.time_ns))
            .filter(|&t| t >= plan.start_ns)
            .collect();
        times.sort_unstable();
        times.dedup();
        rp.set_shape_times(times);
    }
    if opts.decay {
        rp.set_decay(true);
    }
    // The kernel's free memory rebuilt from the trace alone, sampled at the same
    // times (outside the timed loop).
    let mut shadow = crate::shadow::Shadow::new(&plan);
    let times = rp.shape_times.clone();
    let mut rebuilt: Vec<Shape> = Vec::new();
    let mut shadow_chunk = |buf: &[Record], rebuilt: &mut Vec<Shape>| {
        for r in buf {
            while rebuilt.len() < times.len() && r.time_ns >= times[rebuilt.len()] {
                let mut s = shadow.shape();
                s.time_ns = times[rebuilt.len()];
                rebuilt.push(s);
            }
            shadow.apply(r);
        }
    };
    let mut done = buf.len() as u64;
    shadow_chunk(&buf, &mut rebuilt);
    rp.replay(&buf);
    while done < limit {
        buf.clear();
        let want = (chunk as u64).min(limit - done) as usize;
        if reader.read_chunk(&mut buf, want)? == 0 {
            break;
        }
        done += buf.len() as u64;
        shadow_chunk(&buf, &mut rebuilt);
        rp.replay(&buf);
    }
    while rebuilt.len() < times.len() {
        let mut s = shadow.shape();
        s.time_ns = times[rebuilt.len()];
        rebuilt.push(s);
    }
    rp.finish_shapes();
    if opts.sample_every > 0 && rp.samples.last().is_none_or(|s| s.event != rp.replayed) {
        rp.sample();
    }
    let wall = t0.elapsed();
    let mut report = rp.report(
        &path.display().to_string(),
        &opts.layout,
        opts.holes,
        reader.into_stats(),
    );
    report.timing.end_to_end_ns = wall.as_nanos() as u64;
    report.shape = files.snapshots.as_ref().map(|sn| {
        let mut c = rp.shape_comparison(sn, Some(&files.at_start));
        let at = |t: u64| rebuilt.iter().find(|s| s.time_ns == t).cloned();
        c.rebuilt = c
            .seconds
            .iter()
            .chain(&c.end)
            .map(|m| at(m.kernel.time_ns).unwrap_or_default())
            .collect();
        c.rebuilt_stats = Some(shadow.stats);
        c
    });
    if let Some(zi) = files
        .snapshots
        .as_ref()
        .and_then(|sn| sn.end_zoneinfo.as_deref())
        .and_then(|t| ZoneLayout::from_zoneinfo_str(t).ok())
    {
        report.end.kernel_pagesets = zi
            .zones
            .iter()
            .flat_map(|z| {
                z.pcp_count
                    .iter()
                    .zip(&z.pcp_high)
                    .enumerate()
                    .filter(|(_, (c, h))| **c + **h > 0)
                    .map(move |(cpu, (&c, &h))| (z.zone_type.to_string(), cpu, c, h))
            })
            .collect();
    }
    Ok((report, rp))
}

/// Replays the trace at `path` and reports (see `run_with_state`).
///
/// # Errors
/// As `run_with_state`.
pub fn run(path: &Path, opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    run_with_state(path, opts).map(|(r, _)| r)
}
