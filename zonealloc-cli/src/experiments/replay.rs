//! `replay`: a real kernel's page allocations and frees replayed into zonealloc and
//! the peers that can serve them.
//!
//! The trace (`traces/linux-6.18-cargo-build/`, described in traces/README.md) is the
//! first 400,000 page-allocator tracepoint hits of a Linux 6.18 machine with 2 CPUs building a Rust program.
//! zonealloc-trace's parser reads it (xz, `perf script` text) into records; this
//! module turns the records into a flat list of operations, once and untimed:
//!
//! ```text
//!  mm_page_alloc pfn=P order=o   ->  [free of the block still held at P, if any]
//!                                    alloc(order o, the trace's CPU and gfp) into slot s(P)
//!  mm_page_free  pfn=P order=o   ->  free(slot s(P))      (P held at order o)
//!                                    nothing               (P not held: allocated before the trace)
//!  other tracepoints             ->  counted: the kernel's own refills and drains
//! ```
//!
//! What each event means is zonealloc-trace's `Action`, the one its `Replayer` acts
//! on. An allocation at a frame the trace still holds means its free was lost (perf
//! drops events when its buffer overflows): the old block is freed first. A free of
//! part of a held block (the pages of a `split_page()`d block) is counted and
//! skipped: only zonealloc can split a block, and the peers must replay the same
//! operations. Slots are dense indices into a
//! table of handles, so the timed loop does no hashing: it is the allocator's work
//! plus one array access per event.
//!
//! Variants, one process, interleaved, each starting fresh every round (building the
//! allocator is untimed; blocks still held at the end are freed untimed):
//! * the **limit**: pop/push on bare per-order vectors;
//! * **zonealloc** with the traced machine's zones (DMA, DMA32, Normal, Linux's
//!   managed sizes) and 2 CPUs, every event on the CPU the trace names
//!   (`alloc_pages_on` / `free_pages_on` with the trace's gfp flags): its per-CPU
//!   refills and drains (`pcp_stats()`) stand next to the kernel's in the same trace;
//! * **zonealloc, one zone** of the same managed size, the same calls;
//! * the peers with per-order allocation, in the thread-safe form each would need on a
//!   2-CPU machine: bsa `LockedFrameAllocator` and `LockedHeap`, frame-alloc's
//!   `DepotAllocator`, rlsf in a `Mutex`, mimalloc, jemalloc and `mmap`. Each gets an
//!   arena of the same size as zonealloc's managed pages. They ignore the CPU and gfp
//!   of an event (they have no per-CPU lists the caller can name, and no zones).
//!
//! offset-allocator is left out: it cannot align blocks, which a page allocator must.

// Unsafe only to call `Peer::free_on` with blocks this module allocated, each once.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

use zonealloc::{Config, Gfp, Pfn, ZoneAllocator, ZoneType};
use zonealloc_trace::reader::{read_all, ReadOptions};
use zonealloc_trace::{Action, HoleModel, Record, Replayer, ZoneLayout};

use super::peer_allocators::{
    bsa_locked_frame_allocator, BsaLockedHeapPeer, FaDepot, FrameAllocPeer, JeMalloc, Mapping,
    MiMalloc, Mmap, Peer, RlsfPeer, SharedPeer, VecFloor, ARENA_ALIGN, PAGE,
};
use super::peers::single_table;
use super::{Experiment, ExperimentResult};
use crate::harness::{secs_since, Ctx, Metric, Samples, Table, VariantId, Variants};

/// The experiment.
pub struct Replay;

/// The trace, relative to the workspace's root (the repository keeps it).
const TRACE_NAME: &str = "traces/linux-6.18-cargo-build/linux-6.18-cargo-build.perf.txt.xz";

impl Experiment for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn description(&self) -> &'static str {
        "a real Linux 6.18 page-allocator trace (cargo build, 2 CPUs) replayed into zonealloc \
         and the peers: ns per event; zonealloc's per-CPU refills and drains next to the kernel's"
    }

    fn run(&self, ctx: &mut Ctx) -> ExperimentResult {
        let mut res = ExperimentResult::new(self);
        let Some(path) = trace_path() else {
            res.notes.push(format!(
                "trace not found (set ZONEALLOC_TRACE, or run from a checkout that has \
                 {TRACE_NAME}): nothing measured"
            ));
            return res;
        };
        res.param("trace", path.display());
        ctx.status("reading and parsing the trace (untimed)");
        let t = Instant::now();
        // Events on CPUs past MAX_AUTO_CPUS are skipped (and counted), so a stray
        // `[9999]` in a trace cannot make every peer build ten thousand CPUs.
        let read = ReadOptions {
            nr_cpus: Some(zonealloc_trace::replay::MAX_AUTO_CPUS),
            ..ReadOptions::default()
        };
        let (records, stats) = match read_all(&path, read) {
            Ok(x) => x,
            Err(e) => {
                res.notes
                    .push(format!("reading the trace failed: {e}: nothing measured"));
                return res;
            }
        };
        res.param(
            "trace: events read (zonealloc-trace's parser), seconds to parse",
            format!("{}, {:.2}", records.len(), secs_since(t)),
        );
        if stats.skipped() > 0 {
            res.notes.push(format!(
                "the parser skipped {} lines ({} malformed, {} on a CPU past {})",
                stats.skipped(),
                stats.malformed,
                stats.cpu_out_of_range,
                zonealloc_trace::replay::MAX_AUTO_CPUS
            ));
        }
        let prep = prepare(&records);
        record_preparation(&mut res, &prep);
        measure(ctx, &mut res, &records, &prep);
        res
    }
}

/// `$ZONEALLOC_TRACE`, else the repository's trace: in the workspace this binary was
/// built from, or (a binary moved elsewhere) under the current directory.
fn trace_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ZONEALLOC_TRACE") {
        return Some(PathBuf::from(p));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    [workspace.join(TRACE_NAME), PathBuf::from(TRACE_NAME)]
        .into_iter()
        .find(|p| p.is_file())
}

// -----------------------------------------------------------------------------
// Records to operations (untimed)
// -----------------------------------------------------------------------------

/// One replayed call.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Allocate into `slot`.
    Alloc {
        slot: u32,
        cpu: u16,
        order: u8,
        gfp: Gfp,
    },
    /// Free the block in `slot`.
    Free { slot: u32, cpu: u16, order: u8 },
}

/// The operations and what the trace held besides.
#[derive(Debug, Default)]
struct Prepared {
    ops: Vec<Op>,
    /// Slots used at most (size of the handle table).
    slots: usize,
    nr_cpus: usize,
    events: u64,
    allocs: u64,
    frees: u64,
    /// Allocations at a frame still held: the held block is freed first.
    implicit_frees: u64,
    /// Frees of frames not held: allocated before the trace began.
    pretrace_frees: u64,
    /// Frees of part of a held block (split pages): skipped.
    partial_frees: u64,
    /// Frees at a larger order than the block held: skipped.
    order_mismatch: u64,
    /// Allocations the kernel itself failed (`pfn=-1`): not replayed.
    kernel_failed: u64,
    free_batched: u64,
    kernel_refill_blocks: u64,
    kernel_zone_locked_other: u64,
    kernel_drain_blocks: u64,
    /// Most pages held at once.
    peak_pages: u64,
}

/// Highest order a trace block can have (the traced kernel's `MAX_PAGE_ORDER`): how
/// far up a partial free looks for the block it falls inside.
const TRACE_MAX_ORDER: u8 = 10;

/// The records as operations on slots, with what the trace held besides; each
/// event's meaning is zonealloc-trace's `Action`, as for its `Replayer`.
fn prepare(records: &[Record]) -> Prepared {
    let mut p = Prepared {
        events: records.len() as u64,
        ..Prepared::default()
    };
    let mut held: HashMap<u64, (u32, u8)> = HashMap::new();
    let mut free_slots: Vec<u32> = Vec::new();
    let (mut pages, mut max_cpu) = (0u64, 0u16);
    for r in records {
        // The experiment's operations keep the CPU in 16 bits (the trace's are 0-1).
        let cpu = u16::try_from(r.cpu).unwrap_or(u16::MAX);
        max_cpu = max_cpu.max(cpu);
        let action = Action::of(&r.event, TRACE_MAX_ORDER, |pfn| {
            held.get(&pfn).map(|&(_, o)| o)
        });
        match action {
            Action::KernelFailedAlloc => p.kernel_failed += 1,
            Action::Alloc {
                pfn,
                order,
                gfp,
                implicit_free,
            } => {
                if implicit_free {
                    if let Some((slot, o)) = held.remove(&pfn) {
                        p.implicit_frees += 1;
                        p.ops.push(Op::Free {
                            slot,
                            cpu,
                            order: o,
                        });
                        free_slots.push(slot);
                        pages -= 1 << o;
                    }
                }
                let slot = free_slots.pop().unwrap_or_else(|| {
                    p.slots += 1;
                    p.slots as u32 - 1
                });
                held.insert(pfn, (slot, order));
                pages += 1 << order;
                p.peak_pages = p.peak_pages.max(pages);
                p.allocs += 1;
                p.ops.push(Op::Alloc {
                    slot,
                    cpu,
                    order,
                    gfp,
                });
            }
            Action::Free { pfn, order } => {
                if let Some((slot, _)) = held.remove(&pfn) {
                    free_slots.push(slot);
                    pages -= 1 << order;
                    p.frees += 1;
                    p.ops.push(Op::Free { slot, cpu, order });
                }
            }
            Action::OrderMismatch => p.order_mismatch += 1,
            Action::PartialFree { .. } => p.partial_frees += 1,
            Action::Unheld { .. } => p.pretrace_frees += 1,
            Action::FreeBatched => p.free_batched += 1,
            Action::KernelZoneLocked { percpu_refill, .. } => {
                if percpu_refill {
                    p.kernel_refill_blocks += 1;
                } else {
                    p.kernel_zone_locked_other += 1;
                }
            }
            Action::KernelDrain { .. } => p.kernel_drain_blocks += 1,
            Action::KernelFallback { .. } => {}
        }
    }
    p.nr_cpus = max_cpu as usize + 1;
    p
}

fn record_preparation(res: &mut ExperimentResult, p: &Prepared) {
    res.param(
        "replayed calls: allocations + frees (of which implicit frees)",
        format!(
            "{} + {} ({})",
            p.allocs,
            p.frees + p.implicit_frees,
            p.implicit_frees
        ),
    );
    res.param(
        "not replayed: pre-trace frees, partial (split-page) frees, order mismatches, \
         kernel-failed allocations, mm_page_free_batched duplicates",
        format!(
            "{}, {}, {}, {}, {}",
            p.pretrace_frees, p.partial_frees, p.order_mismatch, p.kernel_failed, p.free_batched
        ),
    );
    res.param(
        "peak pages held by the trace, CPUs in the trace",
        format!("{}, {}", p.peak_pages, p.nr_cpus),
    );
    if p.partial_frees > 0 {
        res.notes.push(format!(
            "{} frees of part of a held block (split pages) were skipped by every variant alike",
            p.partial_frees
        ));
    }
}

// -----------------------------------------------------------------------------
// The timed replay
// -----------------------------------------------------------------------------

/// What one replay did.
struct Replayed<H> {
    /// ns per replayed call.
    ns: f64,
    /// Allocations that failed (their frees were skipped).
    failed: u64,
    /// Blocks still held for the trace at its end, with their orders.
    held: Vec<Option<(H, u8)>>,
}

/// Replays `ops` into `p`; only the loop is timed.
fn replay<P: Peer>(p: &mut P, ops: &[Op], slots: usize) -> Replayed<P::Handle> {
    let mut held: Vec<Option<(P::Handle, u8)>> = vec![None; slots];
    let mut failed = 0u64;
    let t = Instant::now();
    for op in ops {
        match *op {
            Op::Alloc {
                slot,
                cpu,
                order,
                gfp,
            } => {
                let h = p.alloc_on(cpu as usize, gfp, order);
                failed += u64::from(h.is_none());
                held[slot as usize] = h.map(|h| (h, order));
            }
            Op::Free { slot, cpu, order } => {
                if let Some((h, o)) = held[slot as usize].take() {
                    debug_assert_eq!(o, order);
                    // SAFETY: the block in this slot was allocated at `order` by `p`
                    // and `take` empties the slot, so it is freed once.
                    unsafe { p.free_on(cpu as usize, h, order) };
                }
            }
        }
    }
    Replayed {
        ns: secs_since(t) * 1e9 / ops.len().max(1) as f64,
        failed,
        held,
    }
}

/// Frees the blocks a replay left held (untimed), for allocators that live on
/// between rounds; the others are dropped with their arena state instead.
fn free_held<P: Peer>(p: &mut P, held: Vec<Option<(P::Handle, u8)>>) {
    for (h, o) in held.into_iter().flatten() {
        // SAFETY: a live block of `p` (the replay that returned `held` allocated it
        // at order `o` and did not free it), freed once.
        unsafe { p.free(h, o) };
    }
}

/// zonealloc's per-CPU list activity, summed over zones and CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PcpTotals {
    refills: u64,
    refill_blocks: u64,
    drains: u64,
    drain_blocks: u64,
    on_lists: u64,
}

fn pcp_totals<B: zonealloc::Backend>(za: &ZoneAllocator<B>) -> PcpTotals {
    let mut t = PcpTotals::default();
    for c in za.pcp_stats().iter().flat_map(|z| z.cpus.iter()) {
        t.refills += c.refills;
        t.refill_blocks += c.refill_blocks;
        t.drains += c.drains;
        t.drain_blocks += c.drain_blocks;
        t.on_lists += c.count;
    }
    t
}

/// Replays into a fresh zonealloc built from `config` each run; keeps the per-CPU
/// list totals of every run. Each run returns ns per call and failed allocations.
fn zonealloc_runner<'a>(
    config: Config,
    prep: &'a Prepared,
    pcp: &'a RefCell<Vec<PcpTotals>>,
) -> impl FnMut() -> (f64, u64) + 'a {
    move || {
        let za = ZoneAllocator::new(config.clone()).expect("the trace's layout is valid");
        let r = replay(&mut za.view(), &prep.ops, prep.slots);
        // Counted before anything else touches the lists; the allocator is then
        // dropped with the blocks it still holds for the trace.
        pcp.borrow_mut().push(pcp_totals(&za));
        (r.ns, r.failed)
    }
}

/// Allocations each replay variant failed, summed over all its rounds.
#[derive(Default)]
struct Failures(Vec<(VariantId, Rc<Cell<u64>>)>);

impl Failures {
    /// Adds the variant `name` to `variants`: its runs return ns per call (the
    /// sample) and failed allocations (summed here).
    fn add<'a>(
        &mut self,
        variants: &mut Variants<'a>,
        name: &str,
        mut run: impl FnMut() -> (f64, u64) + 'a,
    ) -> VariantId {
        let failed = Rc::new(Cell::new(0));
        let tally = Rc::clone(&failed);
        let id = variants.add(name, move || {
            let (ns, n) = run();
            tally.set(tally.get() + n);
            ns
        });
        self.0.push((id, failed));
        id
    }

    /// A note per variant that failed allocations, in the order they were added.
    fn notes(&self, res: &mut ExperimentResult, s: &[Samples]) {
        for (id, failed) in &self.0 {
            if failed.get() > 0 {
                res.notes.push(format!(
                    "{}: {} allocations failed over all rounds (their frees skipped)",
                    id.of(s).variant,
                    failed.get()
                ));
            }
        }
    }
}

fn measure(ctx: &mut Ctx, res: &mut ExperimentResult, records: &[Record], prep: &Prepared) {
    let layout = ZoneLayout::linux_6_18_trace_machine();
    let trace_config = layout.config(HoleModel::Managed, prep.nr_cpus);
    let managed: u64 = layout.zones.iter().map(|z| z.managed).sum();
    let one_zone = Config {
        nr_cpus: prep.nr_cpus,
        ..Config::single_zone(ZoneType::Normal, Pfn(0), managed)
    };
    let arena_bytes = (managed as usize) * PAGE;
    res.param(
        "arena (every variant): the traced machine's managed pages",
        format!(
            "{managed} pages ({:.2} GiB)",
            arena_bytes as f64 / (1u64 << 30) as f64
        ),
    );
    ctx.status("building the arenas");
    let pcp = RefCell::new(Vec::new());
    let pcp_one = RefCell::new(Vec::new());
    let mut failures = Failures::default();

    let mut floor = VecFloor::new(managed);
    // Arenas mapped once, untouched until used (MAP_NORESERVE: 5 GiB each would not
    // fit populated); the warm-up round faults in what a replay touches, and later
    // rounds build their allocator over the same memory.
    let mut heap_map = Some(Mapping::new(arena_bytes, ARENA_ALIGN, false));
    let mut depot_map = Some(Mapping::new(arena_bytes, ARENA_ALIGN, false));
    let mut rlsf_map = Some(Mapping::new(arena_bytes, ARENA_ALIGN, false));
    let ops = &prep.ops;
    let slots = prep.slots;

    let mut variants = Variants::new();
    let v = &mut variants;
    failures.add(v, "limit (Vec)", || {
        let r = replay(&mut floor, ops, slots);
        free_held(&mut floor, r.held);
        (r.ns, r.failed)
    });
    let zonealloc = failures.add(
        v,
        "zonealloc",
        zonealloc_runner(trace_config.clone(), prep, &pcp),
    );
    failures.add(
        v,
        "zonealloc 1 zone",
        zonealloc_runner(one_zone, prep, &pcp_one),
    );
    failures.add(v, "bsa Frame (spin)", || {
        let f = bsa_locked_frame_allocator(managed);
        let r = replay(&mut f.view(), ops, slots);
        (r.ns, r.failed)
    });
    // bsa's Heap frees in O(free blocks) (bsa#11): a few seconds per replay here, so
    // it runs at full scale only.
    if !ctx.quick {
        failures.add(v, "bsa Heap (spin)", || {
            let h = BsaLockedHeapPeer::new_in(heap_map.take().expect("arena"));
            let r = replay(&mut h.view(), ops, slots);
            heap_map = Some(h.into_mapping());
            (r.ns, r.failed)
        });
    } else {
        res.notes.push(
            "bsa Heap (spin) is left out in quick mode: its free walks the free list of the \
             order (O(free blocks), bsa#11), seconds per replay; it runs at full scale"
                .into(),
        );
    }
    failures.add(v, "fa Depot", || {
        let d = FrameAllocPeer::<FaDepot>::depot_in(depot_map.take().expect("arena"));
        let r = replay(&mut d.view(), ops, slots);
        depot_map = Some(d.into_mapping());
        (r.ns, r.failed)
    });
    failures.add(v, "rlsf (Mutex)", || {
        let r = Mutex::new(RlsfPeer::new_in(rlsf_map.take().expect("arena")));
        let x = replay(&mut r.view(), ops, slots);
        rlsf_map = Some(r.into_inner().expect("not poisoned").into_mapping());
        (x.ns, x.failed)
    });
    failures.add(v, "mimalloc", || {
        let r = replay(&mut MiMalloc, ops, slots);
        free_held(&mut MiMalloc, r.held);
        (r.ns, r.failed)
    });
    failures.add(v, "jemalloc", || {
        let r = replay(&mut JeMalloc, ops, slots);
        free_held(&mut JeMalloc, r.held);
        (r.ns, r.failed)
    });
    failures.add(v, "mmap", || {
        let r = replay(&mut Mmap, ops, slots);
        free_held(&mut Mmap, r.held);
        (r.ns, r.failed)
    });
    let s = ctx.compare("replay", &mut variants);
    drop(variants);
    let rows: Vec<(&str, &Samples)> = s.iter().map(|x| (x.variant.as_str(), x)).collect();
    res.tables.push(Table::new(
        "replay",
        &format!(
            "replay of {} trace events ({} allocator calls): ns per replayed alloc or free call, \
             1 thread",
            prep.events,
            prep.ops.len()
        ),
        Metric::lower("ns per replayed alloc or free call", "ns"),
        &rows,
    ));
    let zmed = zonealloc.of(&s).median();
    res.notes.push(format!(
        "zonealloc: {zmed:.1} ns per call is {:.1} ns per trace event ({} events, {} calls)",
        zmed * prep.ops.len() as f64 / prep.events as f64,
        prep.events,
        prep.ops.len()
    ));
    failures.notes(res, &s);

    pcp_figures(res, prep, &pcp.borrow(), &pcp_one.borrow());
    cross_check(ctx, res, records, trace_config);
}

/// The per-CPU refill and drain tables: zonealloc's against the kernel's.
fn pcp_figures(res: &mut ExperimentResult, prep: &Prepared, runs: &[PcpTotals], one: &[PcpTotals]) {
    let Some(&last) = runs.last() else { return };
    if runs.iter().any(|r| *r != last) {
        res.notes.push(format!(
            "zonealloc's per-CPU figures differed between rounds (last shown): {runs:?}"
        ));
    }
    let one = one.last().copied().unwrap_or_default();
    res.tables.push(single_table(
        "pcp-refill",
        "per-CPU refills: blocks taken from the buddy lists to refill per-CPU lists, from a \
         cold start (kernel: mm_page_alloc_zone_locked with percpu_refill=1; zonealloc: \
         pcp_stats().refill_blocks; `zonealloc replay` starts warm, as the kernel was)",
        Metric::nearest(
            "blocks moved buddy -> per-CPU lists",
            "blocks",
            "nearest the kernel's is better",
        ),
        &[
            (
                "kernel (trace)".to_owned(),
                prep.kernel_refill_blocks as f64,
            ),
            ("zonealloc".to_owned(), last.refill_blocks as f64),
            ("zonealloc 1 zone".to_owned(), one.refill_blocks as f64),
        ],
    ));
    res.tables.push(single_table(
        "pcp-drain",
        "per-CPU drains: blocks flushed from per-CPU lists to the buddy lists, from a cold \
         start (kernel: mm_page_pcpu_drain; zonealloc: pcp_stats().drain_blocks; ratio not \
         meaningful when the kernel's count is 0)",
        Metric::nearest(
            "blocks moved per-CPU lists -> buddy",
            "blocks",
            "nearest the kernel's is better",
        ),
        &[
            ("kernel (trace)".to_owned(), prep.kernel_drain_blocks as f64),
            ("zonealloc".to_owned(), last.drain_blocks as f64),
            ("zonealloc 1 zone".to_owned(), one.drain_blocks as f64),
        ],
    ));
    res.notes.push(format!(
        "per-CPU lists, zonealloc (trace zones): {} refills moving {} blocks, {} drains moving \
         {} blocks, {} pages on the lists at the end; the kernel: {} refill blocks, {} drain \
         blocks, {} other zone-locked blocks (high orders straight from the buddy lists)",
        last.refills,
        last.refill_blocks,
        last.drains,
        last.drain_blocks,
        last.on_lists,
        prep.kernel_refill_blocks,
        prep.kernel_drain_blocks,
        prep.kernel_zone_locked_other
    ));
}

/// zonealloc-trace's own `Replayer` on the same records, once: its per-CPU counts
/// must equal ours (same calls), and its time per event includes its pfn hash map.
fn cross_check(ctx: &mut Ctx, res: &mut ExperimentResult, records: &[Record], config: Config) {
    ctx.status("cross-check with zonealloc-trace's Replayer");
    let Ok(mut rp) = Replayer::new(config, 0) else {
        return;
    };
    rp.replay(records);
    let t = pcp_totals(rp.allocator());
    let c = rp.counts();
    res.notes.push(format!(
        "cross-check: zonealloc-trace's Replayer on the same records (pfn hash map, split_page \
         for partial frees) made {} allocator calls with {} refill and {} drain blocks",
        c.allocator_calls, t.refill_blocks, t.drain_blocks
    ));
}
