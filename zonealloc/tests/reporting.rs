//! Free page reporting: what a pass reports, that it reports each free block once
//! until reused, that a reported frame stays free, and that reporters which panic,
//! refuse or call back into the allocator change nothing they should not.

#[path = "support/induced_panic.rs"]
mod induced_panic;
#[path = "support/rng.rs"]
mod rng;

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use zonealloc::reporting::{
    PageReporter, ReportRefused, Reporter, ReportingConfig, ReportingError,
};
use zonealloc::{
    ArenaOptions, Config, DebugConfig, FrameState, FreeError, Gfp, OfflineError, Order, Pfn,
    ZoneAllocator,
};

use induced_panic::induced_panic;

/// 256 MiB of 4 KiB frames: 128 pageblocks, far above the low watermark plus a
/// batch of order-9 blocks.
const BYTES: u64 = 256 << 20;

/// A reporter that records every batch it is given.
#[derive(Default)]
struct Recorder {
    batches: Mutex<Vec<Vec<(Pfn, Order)>>>,
}

impl Recorder {
    fn blocks(&self) -> Vec<(Pfn, Order)> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .copied()
            .collect()
    }
    fn clear(&self) {
        self.batches.lock().unwrap().clear();
    }
}

impl PageReporter for Recorder {
    fn report(&self, blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused> {
        self.batches.lock().unwrap().push(blocks.to_vec());
        Ok(())
    }
}

fn cfg(capacity: usize) -> ReportingConfig {
    ReportingConfig {
        capacity,
        ..ReportingConfig::default()
    }
}

fn with_recorder(capacity: usize) -> (ZoneAllocator, Arc<Recorder>) {
    let za = ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap();
    let rec = Arc::new(Recorder::default());
    za.register_page_reporting(Reporter::Hook(rec.clone()), cfg(capacity))
        .unwrap();
    (za, rec)
}

/// Free pages on the buddy lists in blocks of at least `order`.
fn free_in_blocks_of(za: &ZoneAllocator, order: usize) -> u64 {
    za.free_counts()
        .iter()
        .map(|z| {
            (order..z.nr_free.len())
                .map(|o| {
                    // The isolate lists (the last type) hold no reportable memory.
                    let n: u64 = z.nr_free[o][..z.nr_free[o].len() - 1].iter().sum();
                    n << o
                })
                .sum::<u64>()
        })
        .sum()
}

/// Every frame's state, the free counters and the reported pages: what a refused
/// or unwound pass must leave as it found.
fn observable(za: &ZoneAllocator) -> (Vec<Option<FrameState>>, String, u64) {
    let frames = (0..za.managed_pages())
        .map(|p| za.frame_state(Pfn(p)))
        .collect();
    (
        frames,
        format!("{:?}", za.free_counts()),
        za.page_reporting_stats().reported_pages,
    )
}

#[test]
fn a_pass_reports_every_free_block_of_the_order_once() {
    let (za, rec) = with_recorder(32);
    let expected = free_in_blocks_of(&za, 9);
    assert!(expected > 0);
    let s = za.report_free_pages().unwrap();
    assert_eq!(s.pages, expected);
    let blocks = rec.blocks();
    assert_eq!(blocks.len() as u64, s.blocks);
    assert!(blocks.iter().all(|&(p, o)| o.0 >= 9 && p.is_aligned(o)));
    let mut sorted = blocks.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        blocks.len(),
        "a block reported twice in one pass"
    );
    assert!(
        rec.batches.lock().unwrap().iter().all(|b| b.len() <= 32),
        "a batch above the capacity"
    );
    let r = za.check_invariants().unwrap();
    assert_eq!(r.reported_pages, expected);
    assert_eq!(za.page_reporting_stats().reported_pages, expected);
    assert!(!za.page_reporting_pending());
    // Nothing new: the second pass reports nothing.
    rec.clear();
    assert_eq!(za.report_free_pages().unwrap().pages, 0);
    assert!(rec.blocks().is_empty());
}

#[test]
fn a_block_handed_out_is_reported_again_after_its_free() {
    let (za, rec) = with_recorder(32);
    za.report_free_pages().unwrap();
    let before = za.page_reporting_stats().reported_pages;
    rec.clear();
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let after_alloc = za.page_reporting_stats().reported_pages;
    assert!(
        after_alloc < before,
        "the split block is no longer reported"
    );
    za.check_invariants().unwrap();
    // Only what the allocation took is unreported: the next pass reports it
    // (minus the page itself, which is in use).
    let again = za.report_free_pages().unwrap();
    assert!(again.pages > 0);
    assert!(rec
        .blocks()
        .iter()
        .all(|&(h, o)| !(h.0..h.0 + o.nr_pages()).contains(&p.0)));
    za.free_pages(p, Order(0)).unwrap();
    za.drain_all_pages();
    assert!(
        za.page_reporting_pending(),
        "the merged block waits for a pass"
    );
    rec.clear();
    za.report_free_pages().unwrap();
    assert!(rec
        .blocks()
        .iter()
        .any(|&(h, o)| (h.0..h.0 + o.nr_pages()).contains(&p.0)));
    assert_eq!(
        za.page_reporting_stats().reported_pages,
        free_in_blocks_of(&za, 9)
    );
    za.check_invariants().unwrap();
}

#[test]
fn registration_is_checked() {
    let za = ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap();
    assert_eq!(za.report_free_pages(), Err(ReportingError::NotRegistered));
    assert_eq!(
        za.unregister_page_reporting(),
        Err(ReportingError::NotRegistered)
    );
    let max = za.config().max_order;
    assert_eq!(
        za.register_page_reporting(
            Reporter::Hook(Arc::new(Recorder::default())),
            ReportingConfig {
                order: Some(Order(max.0 + 1)),
                capacity: 1
            }
        ),
        Err(ReportingError::InvalidOrder(Order(max.0 + 1)))
    );
    for bad in [0, zonealloc::PAGE_REPORTING_CAPACITY_MAX + 1] {
        assert_eq!(
            za.register_page_reporting(Reporter::Hook(Arc::new(Recorder::default())), cfg(bad)),
            Err(ReportingError::InvalidCapacity(bad))
        );
    }
    // Abstract frames have nothing to give back.
    assert_eq!(
        za.register_page_reporting(Reporter::Backend, cfg(1)),
        Err(ReportingError::NoDiscard)
    );
    assert_eq!(za.page_reporting_stats().order, None);
    za.register_page_reporting(Reporter::Hook(Arc::new(Recorder::default())), cfg(1))
        .unwrap();
    assert_eq!(
        za.register_page_reporting(Reporter::Hook(Arc::new(Recorder::default())), cfg(1)),
        Err(ReportingError::AlreadyRegistered)
    );
    assert_eq!(
        za.page_reporting_stats().order,
        Some(za.config().pageblock_order)
    );
    za.report_free_pages().unwrap();
    assert!(za.page_reporting_stats().reported_pages > 0);
    za.unregister_page_reporting().unwrap();
    assert_eq!(za.page_reporting_stats().reported_pages, 0);
    za.check_invariants().unwrap();
    // A poisoned arena would read discarded pages as bad.
    let poisoned = ZoneAllocator::with_arena(
        Config {
            debug: DebugConfig {
                poison: true,
                ..DebugConfig::default()
            },
            ..Config::with_bytes(64 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    assert_eq!(
        poisoned.register_page_reporting(Reporter::Backend, cfg(1)),
        Err(ReportingError::Poisoning)
    );
}

#[test]
fn a_small_zone_below_the_gate_reports_nothing() {
    // 64 MiB is 32 blocks of order 9: the default capacity's gate (low watermark
    // plus 32 blocks) is never passed, as in Linux; a capacity of 8 passes it.
    let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    let rec = Arc::new(Recorder::default());
    za.register_page_reporting(Reporter::Hook(rec.clone()), cfg(32))
        .unwrap();
    assert_eq!(za.report_free_pages().unwrap().pages, 0);
    za.unregister_page_reporting().unwrap();
    za.register_page_reporting(Reporter::Hook(rec), cfg(8))
        .unwrap();
    assert!(za.report_free_pages().unwrap().pages > 0);
    za.check_invariants().unwrap();
}

/// A reporter that refuses, or panics, on its `n`th call.
struct FailsOn {
    n: usize,
    panic: bool,
    calls: Mutex<usize>,
}

impl PageReporter for FailsOn {
    fn report(&self, _blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused> {
        let mut c = self.calls.lock().unwrap();
        *c += 1;
        if *c == self.n {
            drop(c);
            if self.panic {
                induced_panic();
            }
            return Err(ReportRefused);
        }
        Ok(())
    }
}

#[test]
fn a_reporter_that_refuses_or_panics_gets_its_batch_back_unreported() {
    for panic in [false, true] {
        let za = ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap();
        let r = Arc::new(FailsOn {
            n: 2,
            panic,
            calls: Mutex::new(0),
        });
        za.register_page_reporting(Reporter::Hook(r.clone()), cfg(4))
            .unwrap();
        // The first batch is accepted, the second refused (or unwound).
        let first = {
            // What the failing batch must leave: the state after one accepted
            // batch. Measured on a twin allocator whose reporter stops after one.
            let twin = ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap();
            let t = Arc::new(FailsOn {
                n: 2,
                panic: false,
                calls: Mutex::new(0),
            });
            twin.register_page_reporting(Reporter::Hook(t), cfg(4))
                .unwrap();
            assert_eq!(twin.report_free_pages(), Err(ReportingError::Refused));
            observable(&twin)
        };
        let want = if panic {
            ReportingError::OwnerPanicked
        } else {
            ReportingError::Refused
        };
        assert_eq!(za.report_free_pages(), Err(want));
        assert_eq!(observable(&za), first, "panic {panic}");
        let st = za.page_reporting_stats();
        assert_eq!(
            (st.batches, st.blocks),
            (2, 4),
            "one batch accepted, of four blocks"
        );
        assert_eq!(st.reported_pages, st.pages);
        assert_eq!(
            (st.refused, st.panicked),
            (u64::from(!panic), u64::from(panic))
        );
        za.check_invariants().unwrap();
        // The next pass picks up where this one stopped.
        za.report_free_pages().unwrap();
        assert_eq!(
            za.page_reporting_stats().reported_pages,
            free_in_blocks_of(&za, 9)
        );
        za.check_invariants().unwrap();
    }
}

/// A reporter that calls back into the allocator from inside its report.
struct Reentrant {
    za: Mutex<Option<Arc<ZoneAllocator>>>,
    seen: Mutex<Vec<String>>,
}

impl PageReporter for Reentrant {
    fn report(&self, blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused> {
        let za = self.za.lock().unwrap().clone().unwrap();
        let mut seen = self.seen.lock().unwrap();
        // A pass from inside the pass.
        seen.push(format!("{:?}", za.report_free_pages()));
        // The batch is free but on no list: a free of it is refused, an
        // allocation never returns it.
        let (h, o) = blocks[0];
        assert_eq!(za.free_pages(h, o), Err(FreeError::AlreadyFree(h)));
        let p = za.alloc_pages(Gfp::KERNEL, Order(9)).unwrap();
        assert!(blocks
            .iter()
            .all(|&(b, bo)| !(b.0..b.0 + bo.nr_pages()).contains(&p.0)));
        za.free_pages(p, Order(9)).unwrap();
        // The checker counts the batch as reporting, not as lost.
        let r = za.check_invariants().unwrap();
        let out: u64 = blocks.iter().map(|&(_, o)| o.nr_pages()).sum();
        assert_eq!(r.reporting_pages, out);
        // A contiguous allocation over the batch fails without waiting for it.
        seen.push(format!(
            "{:?}",
            za.alloc_contig_range(h, Pfn(h.0 + 1)).is_err()
        ));
        // Unregistering from inside ends the pass after this batch.
        seen.push(format!("{:?}", za.unregister_page_reporting()));
        Ok(())
    }
}

#[test]
fn a_reporter_may_call_the_allocator() {
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap());
    let r = Arc::new(Reentrant {
        za: Mutex::new(Some(za.clone())),
        seen: Mutex::new(Vec::new()),
    });
    za.register_page_reporting(Reporter::Hook(r.clone()), cfg(2))
        .unwrap();
    let s = za.report_free_pages().unwrap();
    assert_eq!(s.batches, 1, "unregistered inside the first batch");
    assert_eq!(
        *r.seen.lock().unwrap(),
        ["Err(Busy)", "true", "Ok(())"].map(String::from)
    );
    // Unregistered: the batch went back unmarked.
    assert_eq!(za.page_reporting_stats().reported_pages, 0);
    za.drain_all_pages();
    let c = za.check_invariants().unwrap();
    assert_eq!(c.free_pages + c.pcp_pages, za.managed_pages());
    *r.za.lock().unwrap() = None;
}

#[cfg(target_os = "linux")]
#[test]
fn an_arena_block_reported_reads_as_zeroes_when_reused() {
    let za =
        ZoneAllocator::with_arena(Config::with_bytes(64 << 20), ArenaOptions::default()).unwrap();
    za.register_page_reporting(Reporter::Backend, cfg(4))
        .unwrap();
    let mut b = za.alloc_block(Gfp::KERNEL, Order(9)).unwrap();
    let pfn = b.pfn();
    b.bytes_mut().unwrap().fill(0xa5);
    drop(b);
    za.drain_all_pages();
    za.report_free_pages().unwrap();
    // Take every order-9 block until the written one comes back.
    let mut held = Vec::new();
    loop {
        let b = za
            .alloc_block(Gfp::KERNEL, Order(9))
            .expect("the written block comes back before memory runs out");
        if b.pfn() == pfn {
            assert!(b.bytes().unwrap().iter().all(|&x| x == 0));
            break;
        }
        held.push(b);
    }
    drop(held);
    za.check_invariants().unwrap();
}

#[test]
fn passes_beside_allocating_threads_lose_and_duplicate_nothing() {
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap());
    let rec = Arc::new(Checking {
        za: Mutex::new(Some(za.clone())),
    });
    za.register_page_reporting(Reporter::Hook(rec.clone()), cfg(4))
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Passes run so far: the workers go on until 20 have run beside them, however
    // the threads are scheduled.
    let passes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let za = za.clone();
            let passes = passes.clone();
            std::thread::spawn(move || {
                let mut rng = rng::Rng::new(t);
                let mut held: Vec<(Pfn, Order)> = Vec::new();
                let mut ops = 0u64;
                while ops < 20_000 || passes.load(std::sync::atomic::Ordering::Relaxed) < 20 {
                    ops += 1;
                    if held.len() < 64 && rng.chance(55) {
                        let o = Order([0, 0, 0, 1, 3, 9, 10][rng.below(7) as usize]);
                        if let Ok(p) = za.alloc_pages(Gfp::KERNEL, o) {
                            held.push((p, o));
                        }
                    } else if !held.is_empty() {
                        let i = rng.below(held.len() as u64) as usize;
                        let (p, o) = held.swap_remove(i);
                        za.free_pages(p, o).unwrap();
                    }
                }
                for (p, o) in held {
                    za.free_pages(p, o).unwrap();
                }
            })
        })
        .collect();
    let reporter = {
        let za = za.clone();
        let stop = stop.clone();
        let passes = passes.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                za.report_free_pages().unwrap();
                passes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reporter.join().unwrap();
    assert!(passes.load(std::sync::atomic::Ordering::Relaxed) >= 20);
    za.drain_all_pages();
    let c = za.check_invariants().unwrap();
    assert_eq!(c.free_pages, za.managed_pages(), "every frame free again");
    za.report_free_pages().unwrap();
    assert_eq!(
        za.page_reporting_stats().reported_pages,
        free_in_blocks_of(&za, 9)
    );
    *rec.za.lock().unwrap() = None;
}

/// A reporter that checks, while it runs, that every frame of its batch is free
/// and the pass's alone.
struct Checking {
    za: Mutex<Option<Arc<ZoneAllocator>>>,
}

impl PageReporter for Checking {
    fn report(&self, blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused> {
        let za = self.za.lock().unwrap().clone();
        if let Some(za) = za {
            for &(h, o) in blocks {
                assert_eq!(za.frame_state(h), Some(FrameState::Frozen { order: o }));
                for p in h.0 + 1..h.0 + o.nr_pages() {
                    assert_eq!(za.frame_state(Pfn(p)), Some(FrameState::Tail));
                }
            }
        }
        Ok(())
    }
}

#[cfg(not(miri))]
#[test]
fn the_worker_reports_after_a_free_and_stops_when_dropped() {
    use zonealloc::reporting::PageReportingWorker;
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap());
    let rec = Arc::new(Recorder::default());
    za.register_page_reporting(Reporter::Hook(rec.clone()), cfg(32))
        .unwrap();
    let w = PageReportingWorker::spawn(&za, std::time::Duration::from_millis(5)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while za.page_reporting_stats().reported_pages < free_in_blocks_of(&za, 9) {
        assert!(std::time::Instant::now() < deadline, "the worker never ran");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(w);
    let passes = za.page_reporting_stats().passes;
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(za.page_reporting_stats().passes, passes, "stopped");
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u8),
    Free(usize),
    Pass,
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::sample::select(vec![0u8, 0, 1, 2, 3, 8, 9, 10]).prop_map(Op::Alloc),
        3 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::Pass),
        1 => Just(Op::Drain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the order of allocations, frees, drains and passes: every block
    /// reported is free (none of the model's owned frames), a pass leaves every
    /// free block of the order on the lists reported, a pass right after it
    /// reports nothing, and the checker's ledger holds after every step.
    #[test]
    fn reported_frames_are_always_free(ops in prop::collection::vec(op(), 1..120)) {
        let (za, rec) = with_recorder(3);
        let mut owned: Vec<(Pfn, Order)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(o) => {
                    if let Ok(p) = za.alloc_pages(Gfp::KERNEL, Order(o)) {
                        owned.push((p, Order(o)));
                    }
                }
                Op::Free(i) => {
                    if !owned.is_empty() {
                        let (p, o) = owned.swap_remove(i % owned.len());
                        za.free_pages(p, o).unwrap();
                    }
                }
                Op::Drain => {
                    za.drain_all_pages();
                }
                Op::Pass => {
                    rec.clear();
                    za.report_free_pages().unwrap();
                    for (h, o) in rec.blocks() {
                        for &(p, po) in &owned {
                            let disjoint = h.0 + o.nr_pages() <= p.0 || p.0 + po.nr_pages() <= h.0;
                            prop_assert!(disjoint, "reported {h}/{o} overlaps owned {p}/{po}");
                        }
                    }
                    prop_assert_eq!(za.page_reporting_stats().reported_pages, free_in_blocks_of(&za, 9));
                    rec.clear();
                    prop_assert_eq!(za.report_free_pages().unwrap().pages, 0);
                }
            }
            let r = za.check_invariants().unwrap();
            prop_assert!(r.reported_pages <= r.free_pages);
            prop_assert_eq!(r.reporting_pages, 0);
        }
    }
}

/// Reports blocks at once, but holds the one at `hold`: says it has it
/// (`reached`), then waits for the test (`go`).
struct Holding {
    hold: Pfn,
    reached: std::sync::Barrier,
    go: Arc<std::sync::Barrier>,
}

impl PageReporter for Holding {
    fn report(&self, blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused> {
        if blocks.iter().any(|&(p, _)| p == self.hold) {
            self.reached.wait();
            self.go.wait();
        }
        Ok(())
    }
}

/// An owner of one movable page that waits for the test before moving it.
struct SlowOwner {
    page: Mutex<Pfn>,
    go: Arc<std::sync::Barrier>,
}

impl zonealloc::Migrate for SlowOwner {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> zonealloc::MigrateOutcome {
        self.go.wait();
        let mut p = self.page.lock().unwrap();
        if *p == old {
            *p = new;
            zonealloc::MigrateOutcome::Moved
        } else {
            zonealloc::MigrateOutcome::Refused
        }
    }
}

#[test]
fn a_block_above_pageblock_order_put_back_in_parts_is_not_marked_whole() {
    // Reporting order 10, pageblocks of order 9. While an order-10 block B is out
    // with its reporter, another thread takes B's upper pageblock and the next one
    // offline (isolating them, then waiting in an owner's migration callback), so
    // that B goes back as two order-9 halves that cannot merge: neither half may
    // be marked as a reported order-10 unit.
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap());
    // A movable page at the start of an order-10 block, with a free order-10 block
    // below it.
    let mut spare = Vec::new();
    let p = loop {
        let p = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
        if p.0.is_multiple_of(1024) && p.0 >= 4096 {
            break p;
        }
        spare.push(p);
    };
    for q in spare {
        za.free_pages(q, Order(0)).unwrap();
    }
    za.drain_all_pages();
    let b = Pfn(p.0 - 1024);
    assert_eq!(
        za.frame_state(b),
        Some(FrameState::Free { order: Order(10) })
    );
    let go = Arc::new(std::sync::Barrier::new(3));
    let rep = Arc::new(Holding {
        hold: b,
        reached: std::sync::Barrier::new(2),
        go: go.clone(),
    });
    za.register_page_reporting(
        Reporter::Hook(rep.clone()),
        ReportingConfig {
            order: Some(Order(10)),
            capacity: 1,
        },
    )
    .unwrap();
    let owner = Arc::new(SlowOwner {
        page: Mutex::new(p),
        go: go.clone(),
    });
    za.set_migrator(Some(owner.clone()));
    let offliner = {
        let za = za.clone();
        let rep = rep.clone();
        std::thread::spawn(move || {
            rep.reached.wait();
            za.offline_pages(Pfn(b.0 + 512), 1024)
        })
    };
    let pass = {
        let za = za.clone();
        std::thread::spawn(move || za.report_free_pages())
    };
    // Both wait at `go`: the reporter with B out, the offlining inside the owner's
    // callback with both pageblocks isolated. Release them together.
    go.wait();
    pass.join().unwrap().unwrap();
    let off = offliner.join().unwrap();
    assert!(
        matches!(off, Ok(()) | Err(OfflineError::Busy(_))),
        "{off:?}"
    );
    za.drain_all_pages();
    za.check_invariants().unwrap();
    if off.is_ok() {
        za.online_pages(Pfn(b.0 + 512), 1024).unwrap();
    }
    za.set_migrator(None);
    let q = *owner.page.lock().unwrap();
    za.free_pages(q, Order(0)).unwrap();
    za.check_invariants().unwrap();
}
