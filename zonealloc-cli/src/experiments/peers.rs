//! `peers`: zonealloc against the other page and block allocators, same workloads,
//! same arena size, one process, variants interleaved.
//!
//! The peers and how each is called are in `peer_allocators` (reference/peers.md §8):
//! buddy_system_allocator's `FrameAllocator` and `Heap`, frame-alloc's
//! `DepotAllocator` and bare `SummaryBuddyAllocator`, offset-allocator, rlsf,
//! mimalloc (`mi_malloc_aligned`), jemalloc (tikv-jemallocator, page-aligned
//! `Layout`s) and raw `mmap`/`munmap`. Every table's first row is the *limit*: the same
//! workload popping and pushing frame numbers on bare `Vec`s, so each figure is also
//! a ratio to that floor. Every arena is 256 MiB (65,536 pages), mapped with
//! `MAP_POPULATE` so page faults stay out of the timings; zonealloc runs over its own
//! `Arena` (populated) with its default `Config`.
//!
//! Workloads (each peer runs the identical sequence, a fixed seed):
//!
//! 1. **Hot pair**: allocate an order-0 block and free it at once; ns per pair.
//! 2. **Fill/drain**: allocate order-0 blocks until the arena is full (or the peer
//!    fails), then free them all in a shuffled order (the shuffle is untimed); ns per
//!    call (allocations + frees). A note gives each peer's two halves apart: median
//!    ns per allocation of the fill and per free of the drain. Another gives the
//!    fill's last sixteenth of the arena against its first fifteen, ns per call; for
//!    zonealloc's rows that is a target (at most 2x: no cliff where the fill meets
//!    the watermarks).
//! 3. **Mixed**: orders 0..=9 drawn geometrically (order `o` with probability
//!    `2^-(o+1)`), a live set of at most 2,048 blocks, allocate or free a random live
//!    block with equal odds; ns per call.
//! 4. **Threads**: 1, 2, 4 and N threads (`--threads`), each keeping a window of up to 64 live order-0
//!    blocks (the `pcp` experiment's walk: free the newest 7 times in 8); total calls
//!    per second. Single-threaded peers are wrapped as their documentation tells a
//!    user to: bsa in its own `Locked*` spin locks, offset-allocator and rlsf in a
//!    `std::sync::Mutex`.
//! 5. **Capacity**: a fresh instance filled at order 0, then another at order 9,
//!    until the first failure: the share of the arena handed out as blocks.
//! 6. **Misaligned**: in one untimed pass of the mixed workload, blocks whose address
//!    is not a multiple of their size.
//!
//! Targets (peers.md §7): ≤ 20 ns hot pair, ≤ 30 ns mixed, ≤ 50 ns fill/drain,
//! zonealloc's `alloc_pages` and its `LocalCache` each first in every timed
//! table, 100 % of the arena at orders 0 and 9.

// Unsafe only to call `Peer::free` with blocks this module allocated, each once.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use zonealloc::{Arena, ArenaOptions, Config, Gfp, ZoneAllocator};

use super::peer_allocators::{
    bsa_frame_allocator, bsa_locked_frame_allocator, misaligned, BsaFrameAllocator, BsaHeapPeer,
    BsaLockedHeapPeer, FaDepot, FaSummary, FrameAllocPeer, JeMalloc, MiArenaPeer, MiMalloc, Mmap,
    OffsetPeer, Peer, PerThreadFloor, RlsfPeer, SharedPeer, VecFloor, Za, ZaLocal, ZaLocalShared,
    PAGE,
};
use super::seed_util::Rng;
use super::{Experiment, ExperimentResult, Point, Scaling, Series, Target};
use crate::harness::{
    median, secs_since, Ctx, Handles, Metric, Row, Samples, Table, VariantId, Variants, Workers,
};

/// The experiment.
pub struct Peers;

/// Every arena: 256 MiB.
const ARENA_BYTES: usize = 256 << 20;
const ARENA_FRAMES: u64 = (ARENA_BYTES / PAGE) as u64;
/// Live blocks at most in the mixed workload.
const MIXED_LIVE: usize = 2048;
/// Highest order of the mixed workload.
const MIXED_MAX_ORDER: u8 = 9;
/// Live blocks per thread in the thread runs.
const WINDOW: usize = 64;
/// mmap/munmap cost ~1.5 µs a call: it does this fraction of the calls of the hot
/// and mixed runs (per-call figures are unaffected; the run stays short).
const MMAP_DIV: u64 = 20;
/// bsa `Heap`'s free walks its free list (O(free blocks), bsa#11): its fill/drain
/// covers this fraction of the arena, said in the output.
const BSA_HEAP_FILL_DIV: u64 = 16;
const SEED: u64 = 0x5eed_0f9e;

const HOT_TARGET_NS: f64 = 20.0;
const MIXED_TARGET_NS: f64 = 30.0;
const FILL_TARGET_NS: f64 = 50.0;
/// The fill's last sixteenth may cost at most this many times its first fifteen a
/// call: no cliff near the watermark.
const FILL_TAIL_MAX: f64 = 2.0;

/// The rows of every table, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Id {
    Limit,
    Zonealloc,
    ZaLocal,
    BsaFrame,
    BsaHeap,
    FaDepot,
    FaSummary,
    Offset,
    Rlsf,
    MiMalloc,
    JeMalloc,
    Mmap,
}

impl Id {
    const ALL: [Id; 12] = [
        Id::Limit,
        Id::Zonealloc,
        Id::ZaLocal,
        Id::BsaFrame,
        Id::BsaHeap,
        Id::FaDepot,
        Id::FaSummary,
        Id::Offset,
        Id::Rlsf,
        Id::MiMalloc,
        Id::JeMalloc,
        Id::Mmap,
    ];

    /// Short name (table rows, chart bars).
    fn name(self) -> &'static str {
        match self {
            Id::Limit => "limit (Vec)",
            Id::Zonealloc => "zonealloc",
            Id::ZaLocal => "zonealloc LocalCache",
            Id::BsaFrame => "bsa Frame",
            Id::BsaHeap => "bsa Heap",
            Id::FaDepot => "fa Depot",
            Id::FaSummary => "fa Summary",
            Id::Offset => "offset-alloc",
            Id::Rlsf => "rlsf",
            Id::MiMalloc => "mimalloc",
            Id::JeMalloc => "jemalloc",
            Id::Mmap => "mmap",
        }
    }

    /// What `zonealloc bench --peers` calls the row; `None` for the limit and
    /// zonealloc's two rows, which every run has.
    fn key(self) -> Option<&'static str> {
        Some(match self {
            Id::Limit | Id::Zonealloc | Id::ZaLocal => return None,
            Id::BsaFrame => "bsa-frame",
            Id::BsaHeap => "bsa-heap",
            Id::FaDepot => "fa-depot",
            Id::FaSummary => "fa-summary",
            Id::Offset => "offset",
            Id::Rlsf => "rlsf",
            Id::MiMalloc => "mimalloc",
            Id::JeMalloc => "jemalloc",
            Id::Mmap => "mmap",
        })
    }

    /// The limit and zonealloc's rows: in every run.
    fn always(self) -> bool {
        self.key().is_none()
    }

    /// Name in the thread runs, with the lock a user adds.
    fn threaded_name(self) -> &'static str {
        match self {
            Id::Limit => "limit (Vec/thread)",
            Id::BsaFrame => "bsa Frame (spin)",
            Id::BsaHeap => "bsa Heap (spin)",
            Id::Offset => "offset-alloc (Mutex)",
            Id::Rlsf => "rlsf (Mutex)",
            _ => self.name(),
        }
    }

    /// What the row is, in full.
    fn what(self) -> &'static str {
        match self {
            Id::Limit => "pop/push frame numbers on one bare Vec per order (no allocator)",
            Id::Zonealloc => "ZoneAllocator::with_arena, default Config, alloc_pages(Gfp::KERNEL)",
            Id::ZaLocal => {
                "the same allocator type, one LocalCache(Gfp::KERNEL) per thread (its own instance)"
            }
            Id::BsaFrame => {
                "buddy_system_allocator 0.13 FrameAllocator<11> (abstract frames; threads: LockedFrameAllocator)"
            }
            Id::BsaHeap => {
                "buddy_system_allocator 0.13 Heap<23> over the arena, page-aligned Layouts (threads: LockedHeap)"
            }
            Id::FaDepot => {
                "frame-alloc 0.1 DepotAllocator<SummaryBuddyAllocator<11>, sched_getcpu, 8 slots>"
            }
            Id::FaSummary => "frame-alloc 0.1 SummaryBuddyAllocator<11> (lock-free bitmap buddy)",
            Id::Offset => {
                "offset-allocator 0.2, units = frames, allocate(2^order) (threads: std Mutex)"
            }
            Id::Rlsf => "rlsf 0.2.3 Tlsf<u32, u16, 28, 16> over the arena (threads: std Mutex)",
            Id::MiMalloc => {
                "libmimalloc-sys 0.1.49 (mimalloc 3.x) mi_malloc_aligned/mi_free, process heap"
            }
            Id::JeMalloc => {
                "tikv-jemallocator 0.7 (jemalloc 5.3) GlobalAlloc, Layout(size, align = size)"
            }
            Id::Mmap => "libc mmap/munmap, one anonymous mapping per block",
        }
    }
}

/// The other allocators `zonealloc bench --peers` may name.
pub fn peer_keys() -> impl Iterator<Item = &'static str> {
    Id::ALL.into_iter().filter_map(Id::key)
}

/// The rows of this run, in table order: the limit and zonealloc's two, and the
/// other allocators `--peers` names (all of them when it names none).
fn chosen(peers: &[String]) -> Vec<Id> {
    Id::ALL
        .into_iter()
        .filter(|&id| match id.key() {
            None => true,
            Some(k) => peers.is_empty() || peers.iter().any(|p| p == k),
        })
        .collect()
}

impl Experiment for Peers {
    fn name(&self) -> &'static str {
        "peers"
    }

    fn description(&self) -> &'static str {
        "zonealloc vs buddy_system_allocator, frame-alloc, offset-allocator, rlsf, mimalloc, \
         jemalloc and mmap: hot pair, fill/drain, mixed orders, 1/2/4/N threads, capacity, \
         alignment; each a ratio to a bare-Vec limit"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        // The summary chart reads as every allocator against zonealloc's alloc_pages.
        res.summary_reference = Some(Id::Zonealloc.name().to_owned());
        let ids = chosen(&ctx.peers);
        res.param("arena (every peer)", format!("{} MiB", ARENA_BYTES >> 20));
        for &id in &ids {
            res.param(&format!("peer {}", id.name()), id.what());
        }
        if !ctx.peers.is_empty() {
            res.notes.push(format!(
                "peers: only {} ran beside zonealloc (--peers); every \"best peer\" below is \
                 the best of those",
                ids.iter()
                    .filter(|id| !id.always())
                    .map(|id| id.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        single_threaded(ctx, &mut res, &ids);
        threads(ctx, &mut res, &ids);
        capacity(ctx, &mut res, &ids);
        res
    }
}

// -----------------------------------------------------------------------------
// Workloads
// -----------------------------------------------------------------------------

/// A workload one peer runs once per round; returns the round's sample.
trait Workload {
    fn run<P: Peer>(&self, id: Id, p: &mut P) -> f64;
}

/// ns per order-0 allocation + free pair, `n` pairs back to back.
struct HotPair {
    n: u64,
}

impl Workload for HotPair {
    fn run<P: Peer>(&self, id: Id, p: &mut P) -> f64 {
        let n = if id == Id::Mmap {
            self.n / MMAP_DIV
        } else {
            self.n
        };
        let t = Instant::now();
        for _ in 0..n {
            let h = p.alloc(0).expect("hot pair: the arena is all free");
            // SAFETY: just allocated at order 0.
            unsafe { p.free(black_box(h), 0) };
        }
        secs_since(t) * 1e9 / n as f64
    }
}

/// Fill the arena at order 0, free everything in a shuffled order: ns per call.
/// Records, per run, how many blocks each peer got and what each half cost.
struct FillDrain {
    runs: RefCell<Vec<FillRun>>,
}

/// One fill/drain run of one peer.
struct FillRun {
    id: Id,
    got: u64,
    want: u64,
    /// ns per allocation of the fill.
    fill_ns: f64,
    /// ns per free of the shuffled drain.
    drain_ns: f64,
    /// ns per allocation in the last sixteenth of the arena over ns per allocation
    /// in its first fifteen sixteenths (`None` if the peer stopped before the last
    /// sixteenth): a cost cliff near the end of the fill, where zonealloc meets its
    /// watermarks, shows here.
    tail_ratio: Option<f64>,
}

/// The fill's allocations that count as its last sixteenth: from `want`'s fifteen
/// sixteenths on.
fn tail_start(want: u64) -> u64 {
    want - want / 16
}

/// ns per call over `[0, split)` and over `[split, got)` (the call that failed, if
/// any, is timed with the second part), as the second over the first; `None` when
/// the fill ended before `split`.
fn tail_ratio(got: u64, split: u64, head_secs: f64, tail_secs: f64) -> Option<f64> {
    if split == 0 || got <= split {
        return None;
    }
    let head = head_secs / split as f64;
    let tail = tail_secs / (got - split) as f64;
    Some(tail / head)
}

impl FillDrain {
    fn target_blocks(id: Id) -> u64 {
        if id == Id::BsaHeap {
            ARENA_FRAMES / BSA_HEAP_FILL_DIV
        } else {
            ARENA_FRAMES
        }
    }
}

impl Workload for FillDrain {
    fn run<P: Peer>(&self, id: Id, p: &mut P) -> f64 {
        let want = Self::target_blocks(id);
        let mut live: Vec<P::Handle> = Vec::with_capacity(want as usize);
        // Two loops, timed apart: the fill's first fifteen sixteenths, then the rest.
        let split = tail_start(want);
        let t = Instant::now();
        let mut failed = false;
        while (live.len() as u64) < split {
            match p.alloc(0) {
                Some(h) => live.push(h),
                None => {
                    failed = true;
                    break;
                }
            }
        }
        let head = secs_since(t);
        let t = Instant::now();
        while !failed && (live.len() as u64) < want {
            match p.alloc(0) {
                Some(h) => live.push(h),
                None => break,
            }
        }
        let tail = secs_since(t);
        let fill = head + tail;
        let got = live.len() as u64;
        let mut rng = Rng::new(SEED);
        for i in (1..live.len()).rev() {
            live.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        let t = Instant::now();
        for &h in &live {
            // SAFETY: each handle was allocated at order 0 above and is freed once.
            unsafe { p.free(h, 0) };
        }
        let drain = secs_since(t);
        let per_call = |secs: f64| secs * 1e9 / got.max(1) as f64;
        let run = FillRun {
            id,
            got,
            want,
            fill_ns: per_call(fill),
            drain_ns: per_call(drain),
            tail_ratio: tail_ratio(got, split, head, tail),
        };
        // As many frees as allocations: the mean of the halves is the mean per call.
        let ns = (run.fill_ns + run.drain_ns) / 2.0;
        self.runs.borrow_mut().push(run);
        ns
    }
}

/// The fill/drain table's two halves apart, per peer in table order: median ns
/// per allocation of the fill and per free of the drain over the measured rounds
/// (each peer's first `warmup` runs are the harness's warm-up rounds and left out).
fn fill_drain_halves(runs: &[FillRun], ids: &[Id], warmup: usize) -> String {
    let parts: Vec<String> = ids
        .iter()
        .filter_map(|&id| {
            let mine = runs.iter().filter(|r| r.id == id).skip(warmup);
            let (fill, drain): (Vec<f64>, Vec<f64>) = mine.map(|r| (r.fill_ns, r.drain_ns)).unzip();
            (!fill.is_empty())
                .then(|| format!("{} {:.1} / {:.1}", id.name(), median(&fill), median(&drain)))
        })
        .collect();
    format!(
        "fill/drain, the halves apart (median ns per allocation of the fill / per free \
         of the shuffled drain): {}",
        parts.join("; ")
    )
}

/// The fill's last sixteenth against the rest, per peer in table order: the median
/// over the measured rounds of `FillRun::tail_ratio` (runs that stopped before the
/// last sixteenth left out; each peer's first `warmup` runs too). Returns the note
/// and each peer's median.
fn fill_tails(runs: &[FillRun], ids: &[Id], warmup: usize) -> (String, Vec<(Id, f64)>) {
    let medians: Vec<(Id, f64)> = ids
        .iter()
        .filter_map(|&id| {
            let mine: Vec<f64> = runs
                .iter()
                .filter(|r| r.id == id)
                .skip(warmup)
                .filter_map(|r| r.tail_ratio)
                .collect();
            (!mine.is_empty()).then(|| (id, median(&mine)))
        })
        .collect();
    let parts: Vec<String> = medians
        .iter()
        .map(|&(id, r)| format!("{} {r:.2}x", id.name()))
        .collect();
    let note = format!(
        "fill/drain: the fill's last sixteenth against the rest (median over the rounds of \
         ns per allocation in the arena's last 1/16 over ns per allocation in its first \
         15/16, the failed call included; above 1 the fill slows near its end): {}",
        parts.join("; ")
    );
    (note, medians)
}

/// The mixed-order walk: ns per call. Records failed allocations per peer.
struct Mixed {
    ops: u64,
    failures: RefCell<Vec<(Id, u64)>>,
}

/// Order with probability 2^-(o+1), the rest at `MIXED_MAX_ORDER`.
#[inline]
fn geometric_order(r: u64) -> u8 {
    (r | (1 << MIXED_MAX_ORDER)).trailing_zeros() as u8
}

/// `ops` steps of the mixed walk on `p`; `check` is called with every allocation.
/// Returns (seconds, failed allocations). Frees what is left afterwards, untimed.
fn mixed_walk<P: Peer>(
    p: &mut P,
    ops: u64,
    mut check: impl FnMut(&P, P::Handle, u8),
) -> (f64, u64) {
    let mut rng = Rng::new(SEED ^ 0x3);
    let mut live: Vec<(P::Handle, u8)> = Vec::with_capacity(MIXED_LIVE);
    let mut failures = 0;
    let t = Instant::now();
    for _ in 0..ops {
        let r = rng.next();
        if live.is_empty() || (live.len() < MIXED_LIVE && r & 1 == 0) {
            let o = geometric_order(r >> 1);
            match p.alloc(o) {
                Some(h) => {
                    check(p, h, o);
                    live.push((h, o));
                }
                None => failures += 1,
            }
        } else {
            let (h, o) = live.swap_remove(((r >> 16) % live.len() as u64) as usize);
            // SAFETY: a live block, allocated at order `o`, freed once.
            unsafe { p.free(h, o) };
        }
    }
    let secs = secs_since(t);
    for (h, o) in live {
        // SAFETY: as above.
        unsafe { p.free(h, o) };
    }
    (secs, failures)
}

impl Mixed {
    fn ops_for(&self, id: Id) -> u64 {
        if id == Id::Mmap {
            self.ops / MMAP_DIV
        } else {
            self.ops
        }
    }
}

impl Workload for Mixed {
    fn run<P: Peer>(&self, id: Id, p: &mut P) -> f64 {
        let ops = self.ops_for(id);
        let (secs, failures) = mixed_walk(p, ops, |_, _, _| {});
        self.failures.borrow_mut().push((id, failures));
        secs * 1e9 / ops as f64
    }
}

/// One untimed mixed pass counting misaligned blocks: (allocations, misaligned).
struct MisalignedCheck {
    ops: u64,
    counts: RefCell<Vec<(Id, u64, u64)>>,
}

impl Workload for MisalignedCheck {
    fn run<P: Peer>(&self, id: Id, p: &mut P) -> f64 {
        let ops = if id == Id::Mmap {
            self.ops / MMAP_DIV
        } else {
            self.ops
        };
        let (mut allocs, mut bad) = (0u64, 0u64);
        mixed_walk(p, ops, |p, h, o| {
            allocs += 1;
            bad += u64::from(misaligned(p.addr(h), o));
        });
        self.counts.borrow_mut().push((id, allocs, bad));
        bad as f64
    }
}

// -----------------------------------------------------------------------------
// 1–3 and 6: single thread
// -----------------------------------------------------------------------------

/// One instance of every chosen peer, as a single thread uses it (`None` for a
/// peer the run leaves out: its arena is never mapped).
struct Singles {
    floor: VecFloor,
    za: ZoneAllocator<Arena>,
    za_local: ZoneAllocator<Arena>,
    bsa_frame: Option<BsaFrameAllocator>,
    bsa_heap: Option<BsaHeapPeer>,
    fa_depot: Option<FrameAllocPeer<FaDepot>>,
    fa_summary: Option<FrameAllocPeer<FaSummary>>,
    offset: Option<OffsetPeer>,
    rlsf: Option<RlsfPeer>,
    mimalloc: Option<MiMalloc>,
    jemalloc: Option<JeMalloc>,
    mmap: Option<Mmap>,
}

/// `make()` when the run has peer `id`, else `None` (nothing built).
fn built<T>(chosen: &[Id], id: Id, make: impl FnOnce() -> T) -> Option<T> {
    chosen.contains(&id).then(make)
}

fn zonealloc_arena(config: Config) -> ZoneAllocator<Arena> {
    ZoneAllocator::with_arena(
        config,
        ArenaOptions {
            populate: true,
            ..ArenaOptions::default()
        },
    )
    .expect("a 256 MiB arena maps")
}

impl Singles {
    fn new(chosen: &[Id]) -> Singles {
        Singles {
            floor: VecFloor::new(ARENA_FRAMES),
            za: zonealloc_arena(Config::with_bytes(ARENA_BYTES as u64)),
            za_local: zonealloc_arena(Config::with_bytes(ARENA_BYTES as u64)),
            bsa_frame: built(chosen, Id::BsaFrame, || bsa_frame_allocator(ARENA_FRAMES)),
            bsa_heap: built(chosen, Id::BsaHeap, || BsaHeapPeer::new(ARENA_BYTES)),
            fa_depot: built(chosen, Id::FaDepot, || {
                FrameAllocPeer::depot(ARENA_BYTES, true)
            }),
            fa_summary: built(chosen, Id::FaSummary, || {
                FrameAllocPeer::summary(ARENA_BYTES, true)
            }),
            offset: built(chosen, Id::Offset, || OffsetPeer::new(ARENA_FRAMES)),
            rlsf: built(chosen, Id::Rlsf, || RlsfPeer::new(ARENA_BYTES, true)),
            mimalloc: built(chosen, Id::MiMalloc, || MiMalloc),
            jemalloc: built(chosen, Id::JeMalloc, || JeMalloc),
            mmap: built(chosen, Id::Mmap, || Mmap),
        }
    }

    /// One runner per peer built, each running `w` on its peer once per call.
    fn runners<'a, W: Workload>(&'a mut self, w: &'a W) -> Vec<(Id, Runner<'a>)> {
        let Singles {
            floor,
            za,
            za_local,
            bsa_frame,
            bsa_heap,
            fa_depot,
            fa_summary,
            offset,
            rlsf,
            mimalloc,
            jemalloc,
            mmap,
        } = self;
        fn runner<'a>(id: Id, r: impl FnMut() -> f64 + 'a) -> (Id, Runner<'a>) {
            (id, Box::new(r))
        }
        /// The runner of a peer the run built, if it did.
        fn built_runner<'a, W: Workload, P: Peer>(
            w: &'a W,
            id: Id,
            p: &'a mut Option<P>,
        ) -> Option<(Id, Runner<'a>)> {
            let p = p.as_mut()?;
            Some(runner(id, move || w.run(id, p)))
        }
        [
            Some(runner(Id::Limit, move || w.run(Id::Limit, floor))),
            Some(runner(Id::Zonealloc, move || {
                w.run(Id::Zonealloc, &mut Za(&*za))
            })),
            // A cache per run, as a thread would keep one; its drop at the end of
            // the run gives its blocks back, untimed.
            Some(runner(Id::ZaLocal, move || {
                let mut c = ZaLocal(za_local.local_cache(Gfp::KERNEL).expect("Normal zone"));
                w.run(Id::ZaLocal, &mut c)
            })),
            built_runner(w, Id::BsaFrame, bsa_frame),
            built_runner(w, Id::BsaHeap, bsa_heap),
            fa_depot
                .as_mut()
                .map(|p| runner(Id::FaDepot, move || w.run(Id::FaDepot, &mut p.view()))),
            fa_summary
                .as_mut()
                .map(|p| runner(Id::FaSummary, move || w.run(Id::FaSummary, &mut p.view()))),
            built_runner(w, Id::Offset, offset),
            built_runner(w, Id::Rlsf, rlsf),
            built_runner(w, Id::MiMalloc, mimalloc),
            built_runner(w, Id::JeMalloc, jemalloc),
            built_runner(w, Id::Mmap, mmap),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The runners as harness variants, with every row's handle.
    fn variants<'a, W: Workload>(&'a mut self, w: &'a W) -> (Variants<'a>, Handles<Id>) {
        let mut variants = Variants::new();
        let ids: Handles<Id> = self
            .runners(w)
            .into_iter()
            .map(|(id, r)| (id, variants.add(id.name(), r)))
            .collect();
        (variants, ids)
    }
}

/// One timed run of one peer.
type Runner<'a> = Box<dyn FnMut() -> f64 + 'a>;

/// A table of every peer's samples, the limit first.
fn peer_table(id: &str, title: &str, metric: Metric, s: &[Samples]) -> Table {
    let rows: Vec<(&str, &Samples)> = s.iter().map(|x| (x.variant.as_str(), x)).collect();
    Table::new(id, title, metric, &rows)
}

/// One single-threaded comparison of every peer: its table, and its target on
/// zonealloc's median.
struct Comparison<'s> {
    /// What the progress line says.
    what: &'s str,
    /// Table id.
    id: &'s str,
    /// Table title.
    title: &'s str,
    /// What the samples measure.
    metric: Metric,
    /// What the target checks.
    target: &'s str,
    /// zonealloc's median at most this, ns.
    bound_ns: f64,
}

/// The best of the other allocators by `better` (`f64::min` for times, `max` for
/// rates): neither the limit nor zonealloc's own rows, nor mmap (a system call per
/// block is no peer for a page allocator's fast path).
fn best_peer(ids: &[Id], value: impl Fn(Id) -> f64, better: fn(f64, f64) -> f64) -> (f64, Id) {
    ids.iter()
        .filter(|&&id| !id.always() && id != Id::Mmap)
        .map(|&id| (value(id), id))
        .fold((f64::NAN, Id::Limit), |a, b| {
            if a.0.is_nan() || better(a.0, b.0) == b.0 {
                b
            } else {
                a
            }
        })
}

/// Runs `w` on every peer of `singles`, interleaved, and records the comparison `c`.
fn compare_peers<W: Workload>(
    ctx: &mut Ctx,
    res: &mut ExperimentResult,
    singles: &mut Singles,
    chosen: &[Id],
    w: &W,
    c: Comparison<'_>,
) {
    let (mut variants, ids) = singles.variants(w);
    let s = ctx.compare(c.what, &mut variants);
    drop(variants);
    let median = |id: Id| ids.get(id).of(&s).median();
    res.targets
        .push(Target::at_most(c.target, median(Id::Zonealloc), c.bound_ns, "ns").on_table(c.id));
    let (best, best_id) = best_peer(chosen, median, f64::min);
    // `--peers mmap` alone leaves no allocator to lead.
    if !best.is_nan() {
        for id in [Id::Zonealloc, Id::ZaLocal] {
            res.targets.push(Target::at_most(
                &format!(
                    "{} first in {}: its median / the best peer's ({})",
                    id.name(),
                    c.what,
                    best_id.name()
                ),
                median(id) / best,
                1.0,
                "x",
            ));
        }
    }
    res.tables.push(peer_table(c.id, c.title, c.metric, &s));
}

fn single_threaded(ctx: &mut Ctx, res: &mut ExperimentResult, ids: &[Id]) {
    let hot_n: u64 = ctx.scale(400_000, 2_000_000);
    let mixed_ops: u64 = ctx.scale(300_000, 1_000_000);
    res.param("hot pair: pairs per run (mmap: 1/20)", hot_n);
    res.param(
        "fill/drain: order-0 blocks per run (bsa Heap: 1/16)",
        ARENA_FRAMES,
    );
    res.param(
        "mixed: calls per run (mmap: 1/20), orders 0..=9 geometric, live blocks at most",
        format!("{mixed_ops}, {MIXED_LIVE}"),
    );
    ctx.status("mapping and populating the arenas");
    let mut singles = Singles::new(ids);

    let hot = HotPair { n: hot_n };
    compare_peers(
        ctx,
        res,
        &mut singles,
        ids,
        &hot,
        Comparison {
            what: "hot order-0 pair",
            id: "hot-pair",
            title: "hot pair: ns per order-0 alloc+free pair, 1 thread, 256 MiB arena",
            metric: Metric::lower("ns per order-0 alloc+free pair", "ns"),
            target: "zonealloc: hot order-0 alloc+free pair (median)",
            bound_ns: HOT_TARGET_NS,
        },
    );

    let fill = FillDrain {
        runs: RefCell::new(Vec::new()),
    };
    compare_peers(
        ctx,
        res,
        &mut singles,
        ids,
        &fill,
        Comparison {
            what: "fill/drain",
            id: "fill-drain",
            title: "fill/drain: ns per call, fill 256 MiB at order 0 then free in shuffled order",
            metric: Metric::lower("ns per alloc or free call", "ns"),
            target: "zonealloc: fill the arena at order 0, free shuffled, per call (median)",
            bound_ns: FILL_TARGET_NS,
        },
    );
    let runs = fill.runs.borrow();
    res.notes.push(fill_drain_halves(&runs, ids, ctx.warmup));
    let (note, tails) = fill_tails(&runs, ids, ctx.warmup);
    res.notes.push(note);
    for (id, ratio) in tails {
        if id.always() && id != Id::Limit {
            res.targets.push(Target::at_most(
                &format!(
                    "{}: the fill's last sixteenth, ns per call / its first fifteen's (no cliff)",
                    id.name()
                ),
                ratio,
                FILL_TAIL_MAX,
                "x",
            ));
        }
    }
    let mut seen = Vec::new();
    for &FillRun { id, got, want, .. } in runs.iter() {
        if got < want && !seen.contains(&id) {
            seen.push(id);
            let why = match id {
                Id::Zonealloc | Id::ZaLocal => {
                    " (the default Config keeps Linux's min watermark free)"
                }
                Id::FaDepot | Id::FaSummary => " (its bitmap is carved from the arena)",
                Id::Rlsf => " (a page-aligned block costs it a second page for its header)",
                _ => "",
            };
            res.notes.push(format!(
                "fill/drain: {} stopped at {got} of {want} order-0 blocks ({:.1} %){why}: its \
                 per-call figure covers the calls it could make",
                id.name(),
                got as f64 * 100.0 / want as f64
            ));
        }
    }
    if ids.contains(&Id::BsaHeap) {
        res.notes.push(format!(
            "fill/drain: bsa Heap fills only 1/{BSA_HEAP_FILL_DIV} of the arena ({} blocks): its \
             free walks the whole free list of the order (O(free blocks), bsa issue #11), so its \
             figure would be far higher at the full fill",
            ARENA_FRAMES / BSA_HEAP_FILL_DIV
        ));
    }

    let mixed = Mixed {
        ops: mixed_ops,
        failures: RefCell::new(Vec::new()),
    };
    compare_peers(
        ctx,
        res,
        &mut singles,
        ids,
        &mixed,
        Comparison {
            what: "mixed orders",
            id: "mixed",
            title: "mixed orders 0..=9 (geometric), at most 2048 live blocks: ns per alloc or free call",
            metric: Metric::lower("ns per alloc or free call", "ns"),
            target: "zonealloc: mixed orders 0..9, live set <= 2048, per call (median)",
            bound_ns: MIXED_TARGET_NS,
        },
    );
    let mut total: Vec<(Id, u64)> = Vec::new();
    for &(id, f) in mixed.failures.borrow().iter() {
        match total.iter_mut().find(|x| x.0 == id) {
            Some(x) => x.1 += f,
            None => total.push((id, f)),
        }
    }
    for (id, f) in total.into_iter().filter(|x| x.1 > 0) {
        res.notes.push(format!(
            "mixed: {} failed {f} allocations over all rounds (skipped; the walk went on)",
            id.name()
        ));
    }

    ctx.status("misaligned-block check");
    let check = MisalignedCheck {
        ops: mixed_ops,
        counts: RefCell::new(Vec::new()),
    };
    for (_, mut run) in singles.runners(&check) {
        run();
    }
    let rows: Vec<(String, f64)> = check
        .counts
        .borrow()
        .iter()
        .map(|&(id, allocs, bad)| {
            if bad > 0 {
                res.notes.push(format!(
                    "misaligned: {} returned {bad} of {allocs} blocks not aligned to their size{}",
                    id.name(),
                    match id {
                        Id::Offset => " (it has no alignment: offset-allocator#3)",
                        Id::Mmap => " (mmap aligns to the page only)",
                        _ => "",
                    }
                ));
            }
            (id.name().to_owned(), bad as f64)
        })
        .collect();
    res.tables.push(
        single_table(
            "misaligned",
            &format!(
                "misaligned blocks in one untimed mixed pass of {mixed_ops} calls (mmap 1/20): \
             address not a multiple of the block size (ratio not meaningful: the limit is 0)"
            ),
            Metric::lower("blocks not naturally aligned", "blocks"),
            &rows,
        )
        .labelled("misaligned blocks in a mixed pass"),
    );
}

/// A table of single measurements (deterministic figures), the first row the baseline.
pub(super) fn single_table(id: &str, title: &str, metric: Metric, rows: &[(String, f64)]) -> Table {
    let base = rows.first().map_or(f64::NAN, |r| r.1);
    Table {
        id: id.to_owned(),
        title: title.to_owned(),
        metric,
        rows: rows
            .iter()
            .enumerate()
            .map(|(i, (name, v))| Row {
                variant: name.clone(),
                samples: vec![*v],
                median: *v,
                min: *v,
                max: *v,
                ratio: if base != 0.0 { v / base } else { f64::NAN },
                p_value: None,
                significant: false,
                verdict: if i == 0 {
                    "baseline".into()
                } else {
                    "single measurement".into()
                },
                failed: None,
            })
            .collect(),
        label: None,
        group: None,
        posted_gain: None,
    }
}

// -----------------------------------------------------------------------------
// 4: threads
// -----------------------------------------------------------------------------

/// One thread's random walk over a window of at most `WINDOW` order-0 blocks until
/// `stop` (the `pcp` experiment's walk). Returns the calls made.
fn window_walk<P: Peer>(p: &mut P, seed: u64, stop: &AtomicBool) -> u64 {
    let mut rng = Rng::new(seed);
    let mut live: Vec<P::Handle> = Vec::with_capacity(WINDOW);
    let mut ops = 0u64;
    loop {
        if ops.is_multiple_of(256) && stop.load(Ordering::Relaxed) {
            break;
        }
        let r = rng.next();
        if live.is_empty() || (live.len() < WINDOW && r & 1 == 0) {
            match p.alloc(0) {
                Some(h) => live.push(h),
                None => panic!("thread walk: the arena holds far more than the windows"),
            }
        } else {
            // The newest block 7 times in 8, a random live one otherwise.
            let i = if (r >> 1) & 7 == 0 {
                (r >> 8) as usize % live.len()
            } else {
                live.len() - 1
            };
            let h = live.swap_remove(i);
            // SAFETY: a live order-0 block of this allocator, freed once.
            unsafe { p.free(h, 0) };
        }
        ops += 1;
    }
    for h in live {
        // SAFETY: as above.
        unsafe { p.free(h, 0) };
    }
    ops
}

/// `threads` threads walking `s` for `dur` (pinned as `Workers::timed` does):
/// millions of calls per second, all threads.
fn throughput<S: SharedPeer>(
    s: &S,
    threads: usize,
    dur: Duration,
    cpus: &[usize],
    seed: u64,
) -> f64 {
    Workers::timed(threads, dur, cpus).throughput(
        |_| s.view(),
        |i, v, stop| window_walk(v, seed ^ ((i as u64 + 1) << 32), stop),
    )
}

/// One instance of every chosen peer, shared by threads (`None`: left out).
struct Shareds {
    floor: PerThreadFloor,
    za: ZoneAllocator<Arena>,
    za_local: ZaLocalShared<Arena>,
    bsa_frame: Option<buddy_system_allocator::LockedFrameAllocator<11>>,
    bsa_heap: Option<BsaLockedHeapPeer>,
    fa_depot: Option<FrameAllocPeer<FaDepot>>,
    fa_summary: Option<FrameAllocPeer<FaSummary>>,
    offset: Option<Mutex<OffsetPeer>>,
    rlsf: Option<Mutex<RlsfPeer>>,
    mimalloc: Option<MiMalloc>,
    jemalloc: Option<JeMalloc>,
    mmap: Option<Mmap>,
}

/// Adds to `variants` the thread run of peer `id` (instance `s`) at `t` threads when
/// the run has that peer (`s` is `Some`); returns its handle, keyed by peer and
/// thread count.
fn shared_variant<'a, S: SharedPeer>(
    variants: &mut Variants<'a>,
    id: Id,
    s: Option<&'a S>,
    t: usize,
    dur: Duration,
    cpus: &'a [usize],
) -> Option<((Id, usize), VariantId)> {
    let s = s?;
    let mut round = 0u64;
    let handle = variants.add(format!("{} {t}t", id.threaded_name()), move || {
        round += 1;
        throughput(s, t, dur, cpus, SEED ^ (round << 8))
    });
    Some(((id, t), handle))
}

fn threads(ctx: &mut Ctx, res: &mut ExperimentResult, chosen: &[Id]) {
    let dur = Duration::from_millis(ctx.scale(60, 300));
    res.param("threads: run length (ms)", dur.as_millis());
    res.param("threads: live window per thread (order-0 blocks)", WINDOW);
    ctx.status("mapping and populating the arenas (thread runs)");
    let sh = Shareds {
        floor: PerThreadFloor { nr_frames: 4096 },
        za: zonealloc_arena(Config::with_bytes(ARENA_BYTES as u64)),
        za_local: ZaLocalShared(zonealloc_arena(Config::with_bytes(ARENA_BYTES as u64))),
        bsa_frame: built(chosen, Id::BsaFrame, || {
            bsa_locked_frame_allocator(ARENA_FRAMES)
        }),
        bsa_heap: built(chosen, Id::BsaHeap, || BsaLockedHeapPeer::new(ARENA_BYTES)),
        fa_depot: built(chosen, Id::FaDepot, || {
            FrameAllocPeer::depot(ARENA_BYTES, true)
        }),
        fa_summary: built(chosen, Id::FaSummary, || {
            FrameAllocPeer::summary(ARENA_BYTES, true)
        }),
        offset: built(chosen, Id::Offset, || {
            Mutex::new(OffsetPeer::new(ARENA_FRAMES))
        }),
        rlsf: built(chosen, Id::Rlsf, || {
            Mutex::new(RlsfPeer::new(ARENA_BYTES, true))
        }),
        mimalloc: built(chosen, Id::MiMalloc, || MiMalloc),
        jemalloc: built(chosen, Id::JeMalloc, || JeMalloc),
        mmap: built(chosen, Id::Mmap, || Mmap),
    };
    let threads = ctx.threads.clone();
    let cpus = ctx.cpus.clone();
    let mut variants = Variants::new();
    let mut ids = Vec::new();
    for &t in &threads {
        let v = &mut variants;
        ids.extend(
            [
                shared_variant(v, Id::Limit, Some(&sh.floor), t, dur, &cpus),
                shared_variant(v, Id::Zonealloc, Some(&sh.za), t, dur, &cpus),
                shared_variant(v, Id::ZaLocal, Some(&sh.za_local), t, dur, &cpus),
                shared_variant(v, Id::BsaFrame, sh.bsa_frame.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::BsaHeap, sh.bsa_heap.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::FaDepot, sh.fa_depot.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::FaSummary, sh.fa_summary.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::Offset, sh.offset.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::Rlsf, sh.rlsf.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::MiMalloc, sh.mimalloc.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::JeMalloc, sh.jemalloc.as_ref(), t, dur, &cpus),
                shared_variant(v, Id::Mmap, sh.mmap.as_ref(), t, dur, &cpus),
            ]
            .into_iter()
            .flatten(),
        );
    }
    let ids: Handles<(Id, usize)> = ids.into_iter().collect();
    let s = ctx.compare("threaded throughput", &mut variants);
    drop(variants);
    let find = |id: Id, t: usize| ids.get((id, t)).of(&s);
    let metric = || Metric::higher("alloc+free calls per second, all threads", "M ops/s");
    for &t in &threads {
        let rows: Vec<(&str, &Samples)> = chosen
            .iter()
            .map(|&id| (id.threaded_name(), find(id, t)))
            .collect();
        res.tables.push(Table::new(
            &format!("threads-{t}"),
            &format!(
                "{t} thread{}, window of {WINDOW} order-0 blocks each: M alloc+free calls/s",
                if t == 1 { "" } else { "s" }
            ),
            metric(),
            &rows,
        ));
        let (best, best_id) = best_peer(chosen, |id| find(id, t).median(), f64::max);
        for id in [Id::Zonealloc, Id::ZaLocal] {
            if !best.is_nan() {
                res.targets.push(Target::at_least(
                    &format!(
                        "{} first at {t} thread{}: its median / the best peer's ({})",
                        id.name(),
                        if t == 1 { "" } else { "s" },
                        best_id.threaded_name()
                    ),
                    find(id, t).median() / best,
                    1.0,
                    "x",
                ));
            }
        }
    }
    res.notes.push(
        "threads: bsa runs in its own Locked* types (spin::Mutex), offset-allocator and rlsf in a \
         std::sync::Mutex, as their documentation tells a user to lock them; frame-alloc's \
         SummaryBuddy is retried up to 64 times on its documented spurious OutOfMemory"
            .into(),
    );
    res.notes.push(format!("threads: {}", ctx.pinning_note()));
    res.scaling = Some(Scaling {
        title: "peers: alloc+free throughput against threads (window of 64 order-0 blocks)".into(),
        y_label: "M alloc+free calls/s".into(),
        series: chosen
            .iter()
            .map(|&id| Series {
                name: id.threaded_name().into(),
                baseline: id == Id::Limit,
                points: threads.iter().map(|&t| Point::of(t, find(id, t))).collect(),
            })
            .collect(),
    });
}

// -----------------------------------------------------------------------------
// 5: capacity
// -----------------------------------------------------------------------------

/// Allocates `order` blocks from `p` until the first failure (or a whole arena's
/// worth): the share of the arena obtained, percent.
fn fill_until_failure<P: Peer>(p: &mut P, order: u8) -> f64 {
    let max = ARENA_FRAMES >> order;
    let mut n = 0;
    while n < max && p.alloc(order).is_some() {
        n += 1;
    }
    (n << order) as f64 * 100.0 / ARENA_FRAMES as f64
}

/// A fresh instance of peer `id` filled at `order`; `None` for peers with no bound.
fn capacity_of(id: Id, order: u8) -> Option<f64> {
    Some(match id {
        Id::Limit => fill_until_failure(&mut VecFloor::new(ARENA_FRAMES), order),
        Id::Zonealloc => {
            let za = zonealloc_arena(Config::with_bytes(ARENA_BYTES as u64));
            fill_until_failure(&mut Za(&za), order)
        }
        Id::BsaFrame => fill_until_failure(&mut bsa_frame_allocator(ARENA_FRAMES), order),
        Id::BsaHeap => fill_until_failure(&mut BsaHeapPeer::new(ARENA_BYTES), order),
        Id::FaDepot => {
            fill_until_failure(&mut FrameAllocPeer::depot(ARENA_BYTES, false).view(), order)
        }
        Id::FaSummary => fill_until_failure(
            &mut FrameAllocPeer::summary(ARENA_BYTES, false).view(),
            order,
        ),
        Id::Offset => fill_until_failure(&mut OffsetPeer::new(ARENA_FRAMES), order),
        Id::Rlsf => fill_until_failure(&mut RlsfPeer::new(ARENA_BYTES, false), order),
        Id::MiMalloc => match MiArenaPeer::new(ARENA_BYTES) {
            Ok(mut a) => fill_until_failure(&mut a, order),
            Err(_) => return None,
        },
        // The cache hands out what `alloc_pages` would: the same capacity.
        Id::ZaLocal | Id::JeMalloc | Id::Mmap => return None,
    })
}

fn capacity(ctx: &mut Ctx, res: &mut ExperimentResult, chosen: &[Id]) {
    ctx.status("capacity: filling fresh instances until the first failure");
    for order in [0u8, 9] {
        let mut rows: Vec<(String, f64)> = Vec::new();
        for &id in chosen {
            if let Some(pct) = capacity_of(id, order) {
                let name = if id == Id::MiMalloc {
                    "mimalloc (arena)".to_owned()
                } else {
                    id.name().to_owned()
                };
                rows.push((name, pct));
            }
        }
        // zonealloc without Linux's min watermark reserve: what a user who wants every
        // page of the arena configures.
        let za = zonealloc_arena(Config {
            min_free_kbytes: Some(0),
            ..Config::with_bytes(ARENA_BYTES as u64)
        });
        let no_reserve = fill_until_failure(&mut Za(&za), order);
        drop(za);
        rows.insert(2, ("zonealloc, min_free_kbytes=0".to_owned(), no_reserve));
        let default = rows[1].1;
        let id = format!("capacity-order{order}");
        res.targets.push(
            Target::at_least(
                &format!("zonealloc: arena handed out at order {order}, default Config"),
                default,
                100.0,
                "%",
            )
            .on_table(&id),
        );
        res.targets.push(
            Target::at_least(
                &format!("zonealloc: arena handed out at order {order}, min_free_kbytes=0"),
                no_reserve,
                100.0,
                "%",
            )
            .on_table(&id),
        );
        let mut table = single_table(
            &id,
            &format!(
                "capacity at order {order}: % of the 256 MiB arena handed out as order-{order} \
                 blocks before the first failure (fresh instance)"
            ),
            Metric::higher(&format!("% of the arena at order {order}"), "%"),
            &rows,
        );
        // A peer whose first request failed handed out nothing: no capacity, failed.
        for (i, (_, pct)) in rows.iter().enumerate() {
            if *pct == 0.0 {
                table.mark_failed(i, format!("its first order-{order} request failed"));
            }
        }
        res.tables.push(table);
    }
    res.notes.push(
        "capacity: jemalloc and mmap are not bounded by an arena (they take memory from the \
         kernel until the machine runs out), so they have no capacity row; mimalloc's row is \
         mimalloc confined to an exclusive arena of 256 MiB (mi_manage_os_memory_ex + \
         mi_heap_new_in_arena), its timing rows the process heap"
            .into(),
    );
    res.notes.push(
        "capacity: zonealloc's default Config keeps Linux's min watermark (min_free_kbytes from \
         the zone size) free for atomic and reserve allocations, as the kernel does; the \
         min_free_kbytes=0 row is the same allocator with that reserve set to zero"
            .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_halves_note_gives_each_peer_its_medians_without_its_warm_up_runs() {
        let run = |id, fill_ns, drain_ns| FillRun {
            id,
            got: 4,
            want: 4,
            fill_ns,
            drain_ns,
            tail_ratio: None,
        };
        // Interleaved as the harness runs them: one warm-up round, then three.
        let runs = [
            run(Id::ZaLocal, 100.0, 900.0),
            run(Id::FaSummary, 100.0, 900.0),
            run(Id::ZaLocal, 6.0, 30.0),
            run(Id::FaSummary, 22.0, 15.0),
            run(Id::ZaLocal, 7.0, 32.0),
            run(Id::FaSummary, 21.0, 14.0),
            run(Id::ZaLocal, 5.0, 31.0),
            run(Id::FaSummary, 23.0, 16.0),
        ];
        let note = fill_drain_halves(&runs, &[Id::Limit, Id::ZaLocal, Id::FaSummary], 1);
        assert!(
            note.ends_with(": zonealloc LocalCache 6.0 / 31.0; fa Summary 22.0 / 15.0"),
            "{note}"
        );
    }

    #[test]
    fn the_tail_ratio_sets_the_last_sixteenths_rate_against_the_rest() {
        assert_eq!(tail_start(65536), 61440);
        // 15 allocations in 15 s, 1 in 2 s: twice the rate a call.
        assert_eq!(tail_ratio(16, 15, 15.0, 2.0), Some(2.0));
        // A fill that failed at or before the split has no last sixteenth.
        assert_eq!(tail_ratio(15, 15, 15.0, 0.0), None);
        assert_eq!(tail_ratio(3, 15, 3.0, 0.0), None);
        assert_eq!(tail_ratio(0, 0, 0.0, 0.0), None);
    }

    #[test]
    fn the_tails_note_and_targets_take_each_peers_median_without_warm_up_or_short_runs() {
        let run = |id, tail_ratio| FillRun {
            id,
            got: 4,
            want: 4,
            fill_ns: 1.0,
            drain_ns: 1.0,
            tail_ratio,
        };
        let runs = [
            run(Id::Zonealloc, Some(90.0)),
            run(Id::FaSummary, Some(90.0)),
            run(Id::Zonealloc, Some(1.0)),
            run(Id::FaSummary, None),
            run(Id::Zonealloc, Some(3.0)),
            run(Id::FaSummary, Some(1.5)),
            run(Id::Zonealloc, Some(1.2)),
            run(Id::FaSummary, None),
        ];
        let (note, medians) = fill_tails(&runs, &[Id::Limit, Id::Zonealloc, Id::FaSummary], 1);
        assert_eq!(medians, [(Id::Zonealloc, 1.2), (Id::FaSummary, 1.5)]);
        assert!(
            note.ends_with(": zonealloc 1.20x; fa Summary 1.50x"),
            "{note}"
        );
    }

    #[test]
    fn no_choice_runs_every_row() {
        assert_eq!(chosen(&[]), Id::ALL);
    }

    #[test]
    fn a_choice_keeps_the_limit_and_zonealloc_rows_in_table_order() {
        let ids = chosen(&["mmap".to_owned(), "fa-summary".to_owned()]);
        assert_eq!(
            ids,
            [
                Id::Limit,
                Id::Zonealloc,
                Id::ZaLocal,
                Id::FaSummary,
                Id::Mmap
            ]
        );
    }

    #[test]
    fn every_other_allocator_has_its_own_key() {
        let keys: Vec<&str> = peer_keys().collect();
        // Every row but the limit and zonealloc's two.
        assert_eq!(keys.len(), Id::ALL.len() - 3);
        for (i, k) in keys.iter().enumerate() {
            assert!(!keys[..i].contains(k), "{k} twice");
            assert_eq!(chosen(&[k.to_string()]).len(), 4, "{k} picks one row");
        }
    }

    #[test]
    fn only_the_chosen_peers_are_built_and_run() {
        let ids = chosen(&["mmap".to_owned(), "offset".to_owned()]);
        let mut singles = Singles::new(&ids);
        assert!(singles.bsa_frame.is_none() && singles.bsa_heap.is_none());
        assert!(singles.fa_depot.is_none() && singles.fa_summary.is_none());
        assert!(singles.rlsf.is_none() && singles.mimalloc.is_none());
        assert!(singles.jemalloc.is_none());
        let hot = HotPair { n: 1 };
        let run: Vec<Id> = singles
            .runners(&hot)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(run, ids);
    }
}
