//! Compaction under load, with an exact ledger (testing plan §2): worker threads
//! allocate and free movable and unmovable blocks (order-9 movable requests compact
//! directly) while a compaction thread runs `compact_zone` and proactive compaction
//! over the same zone, moving the workers' movable blocks through their owner. The
//! compaction thread waits for 500 worker operations between runs, so that the
//! workers' direct compaction gets the zone's compaction lock too.
//!
//! # The ledger
//!
//! `ledger[pfn]` is 0 when no block of the test holds frame `pfn`, else 1 + the id of
//! the block that does. An allocation CASes each frame 0 -> id (a failure is a frame
//! handed out twice: to two callers, or as a migration target while allocated); a
//! free CASes id -> 0 *before* the allocator is told. The owner's callback moves a
//! block's ledger entry under the owner's table lock: it claims the target's frames
//! (CAS 0 -> id: a target that is anyone's allocation fails it) and releases the
//! source's before compaction frees the source. So a frame is never free in the
//! allocator and owned in the ledger at once, and a frame owned twice is caught.
//! An error from any call on a block the test holds is a violation too.
//!
//! At the end: every thread joined, `check_invariants()`, the validator's allocated
//! pages equal the ledger's, free + owned = managed, every owned movable block is an
//! allocated head with one reference at the pfn the owner's table names, and pages
//! were in fact moved (otherwise the test would prove nothing).
//!
//! `cargo test --release -p zonealloc --test compaction_stress -- --nocapture`
//! prints the figures; `ZONEALLOC_STRESS_SCALE=N` multiplies the operations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use zonealloc::*;

#[path = "support/figures.rs"]
mod figures;
#[path = "support/induced_panic.rs"]
mod induced;
use induced::induced_panic;
#[path = "support/settled.rs"]
mod support;
use support::settled;

const FRAMES: u64 = 8192;
const WORKERS: usize = 3;
const BASE_OPS: u64 = 200_000;

struct Shared {
    za: ZoneAllocator,
    ledger: Vec<AtomicU64>,
    owner: Arc<Owner>,
    next_id: AtomicU64,
    violations: Mutex<Vec<String>>,
    checks: AtomicU64,
    /// Operations the workers have run (the compaction thread paces itself by it).
    progress: AtomicU64,
}

/// The owner of the movable blocks: id -> (pfn, order) and pfn -> id. With
/// `panic_one_in` set, one callback in that many panics (before it changes
/// anything), at random.
struct Owner {
    table: Mutex<Table>,
    shared: std::sync::OnceLock<std::sync::Weak<Shared>>,
    panic_one_in: Option<u64>,
    calls: AtomicU64,
    panics: AtomicU64,
}

impl Owner {
    fn new(panic_one_in: Option<u64>) -> Owner {
        Owner {
            table: Mutex::new(Table::default()),
            shared: std::sync::OnceLock::new(),
            panic_one_in,
            calls: AtomicU64::new(0),
            panics: AtomicU64::new(0),
        }
    }
}

#[derive(Default)]
struct Table {
    by_id: HashMap<u64, (Pfn, Order)>,
    by_pfn: HashMap<u64, u64>,
}

impl Migrate for Owner {
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        let mut call = self.calls.fetch_add(1, Ordering::Relaxed);
        if self
            .panic_one_in
            .is_some_and(|n| step(&mut call).is_multiple_of(n))
        {
            self.panics.fetch_add(1, Ordering::Relaxed);
            induced_panic();
        }
        let Some(sh) = self.shared.get().and_then(|w| w.upgrade()) else {
            return MigrateOutcome::Refused;
        };
        let mut t = self.table.lock().unwrap();
        let Some(id) = t.by_pfn.remove(&m.source().0) else {
            return MigrateOutcome::Refused;
        };
        let order = m.order();
        sh.claim(m.target(), order, id);
        sh.release(m.source(), order, id);
        t.by_pfn.insert(m.target().0, id);
        t.by_id.insert(id, (m.target(), order));
        MigrateOutcome::Moved
    }
}

impl Shared {
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn claim(&self, pfn: Pfn, order: Order, id: u64) {
        self.transfer(pfn, order, 0, id + 1, |p, cur| {
            format!(
                "frame {p} of block {id} at {pfn} order {order} already owned by {}",
                cur - 1
            )
        });
    }

    fn release(&self, pfn: Pfn, order: Order, id: u64) {
        self.transfer(pfn, order, id + 1, 0, |p, cur| {
            format!("frame {p} of block {id}: ledger says {cur}")
        });
    }

    /// Moves every frame of the block from ledger value `from` to `to`, reporting
    /// each frame that held something else.
    fn transfer(
        &self,
        pfn: Pfn,
        order: Order,
        from: u64,
        to: u64,
        what: impl Fn(u64, u64) -> String,
    ) {
        for p in pfn.0..pfn.0 + order.nr_pages() {
            self.checks.fetch_add(1, Ordering::Relaxed);
            if let Err(cur) = self.ledger[p as usize].compare_exchange(
                from,
                to,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                self.violation(what(p, cur));
            }
        }
    }

    /// The end-of-run checks (per-CPU lists drained): no violation, the
    /// validator's allocated pages are the ledger's, free + owned = managed.
    #[track_caller]
    fn assert_exact(&self, report: &InvariantReport) {
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "{violations:#?}");
        let owned = self.owned();
        assert_eq!(report.allocated_pages, owned, "validator vs ledger");
        assert_eq!(
            self.za.nr_free_pages() + owned,
            self.za.managed_pages(),
            "frames lost"
        );
    }

    fn owned(&self) -> u64 {
        self.ledger
            .iter()
            .filter(|t| t.load(Ordering::Relaxed) != 0)
            .count() as u64
    }
}

/// A zone of `FRAMES` frames for `cpus` CPUs with its ledger, `owner` its
/// registered migrator.
fn new_shared(owner: &Arc<Owner>, cpus: usize) -> Arc<Shared> {
    let sh = Arc::new(Shared {
        za: ZoneAllocator::new(Config {
            nr_cpus: cpus,
            min_free_kbytes: Some(0),
            ..Config::single_zone(ZoneType::Normal, Pfn(0), FRAMES)
        })
        .unwrap(),
        ledger: (0..FRAMES).map(|_| AtomicU64::new(0)).collect(),
        owner: owner.clone(),
        next_id: AtomicU64::new(0),
        violations: Mutex::new(Vec::new()),
        checks: AtomicU64::new(0),
        progress: AtomicU64::new(0),
    });
    owner.shared.set(Arc::downgrade(&sh)).ok().unwrap();
    sh.za.set_migrator(Some(owner.clone()));
    sh
}

/// `base` operations times `ZONEALLOC_STRESS_SCALE` (default 1).
fn scaled(base: u64) -> u64 {
    let scale = std::env::var("ZONEALLOC_STRESS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1u64);
    base * scale
}

/// A worker thread's body.
type Worker<'a> = Box<dyn FnOnce() + Send + 'a>;

/// Runs `workers` to their end while one more thread compacts the zone through
/// the owner (the whole zone every third run, else for order 9) and proactively,
/// then leaves it to the workers' direct compaction for 500 of their operations.
/// Returns the compaction runs. An answer of `compact_zone` other than `Ok` (or
/// `OwnerPanicked`, for an owner that panics) is a violation.
fn beside_compaction(sh: &Shared, workers: Vec<Worker<'_>>) -> u64 {
    sh.za.set_compaction_proactiveness(90).unwrap();
    let id = sh.za.zone_id_of(Pfn(0)).unwrap();
    let panics = sh.owner.panic_one_in.is_some();
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let workers: Vec<_> = workers.into_iter().map(|w| s.spawn(w)).collect();
        let compactor = s.spawn(|| {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                let order = if n.is_multiple_of(3) {
                    None
                } else {
                    Some(Order(9))
                };
                match sh.za.compact_zone(id, order, &*sh.owner) {
                    Ok(_) => {}
                    Err(CompactError::OwnerPanicked) if panics => {}
                    Err(e) => sh.violation(format!("compact_zone: {e}")),
                }
                sh.za.proactive_compact_node(0);
                n += 1;
                let until = sh.progress.load(Ordering::Relaxed) + 500;
                while sh.progress.load(Ordering::Relaxed) < until && !done.load(Ordering::Relaxed) {
                    thread::yield_now();
                }
            }
            n
        });
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        compactor.join().unwrap()
    })
}

fn step(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One worker: a random mix of movable and unmovable allocations and frees.
fn worker(sh: &Shared, cpu: usize, seed: u64, ops: u64) {
    let mut rng = seed;
    let mut unmovable: Vec<(u64, Pfn, Order)> = Vec::new();
    let mut movable: Vec<u64> = Vec::new();
    for _ in 0..ops {
        sh.progress.fetch_add(1, Ordering::Relaxed);
        let r = step(&mut rng);
        match r % 100 {
            0..=39 => {
                let order = match (r >> 8) % 100 {
                    0..=79 => Order(0),
                    80..=95 => Order(((r >> 16) % 4) as u8 + 1),
                    _ => Order(9),
                };
                let Ok(p) = sh.za.alloc_pages_on(cpu, Gfp::HIGHUSER_MOVABLE, order) else {
                    continue;
                };
                let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
                sh.claim(p, order, id);
                let mut t = sh.owner.table.lock().unwrap();
                t.by_id.insert(id, (p, order));
                t.by_pfn.insert(p.0, id);
                movable.push(id);
            }
            40..=47 => {
                let order = Order(((r >> 8) % 3) as u8);
                let Ok(p) = sh.za.alloc_pages_on(cpu, Gfp::KERNEL, order) else {
                    continue;
                };
                let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
                sh.claim(p, order, id);
                unmovable.push((id, p, order));
            }
            48..=87 if !movable.is_empty() => {
                let id = movable.swap_remove((r >> 8) as usize % movable.len());
                let (p, order) = {
                    let mut t = sh.owner.table.lock().unwrap();
                    let (p, order) = t.by_id.remove(&id).expect("the owner's block");
                    t.by_pfn.remove(&p.0);
                    sh.release(p, order, id);
                    (p, order)
                };
                if let Err(e) = sh.za.free_pages_on(cpu, p, order) {
                    sh.violation(format!("free of movable block {id} at {p}: {e}"));
                }
            }
            _ if !unmovable.is_empty() => {
                let (id, p, order) = unmovable.swap_remove((r >> 8) as usize % unmovable.len());
                sh.release(p, order, id);
                if let Err(e) = sh.za.free_pages_on(cpu, p, order) {
                    sh.violation(format!("free of unmovable block {id} at {p}: {e}"));
                }
            }
            _ => {}
        }
    }
    for (id, p, order) in unmovable {
        sh.release(p, order, id);
        if let Err(e) = sh.za.free_pages_on(cpu, p, order) {
            sh.violation(format!("final free of {p}: {e}"));
        }
    }
    // Movable blocks stay with the owner until the end-of-test check.
}

#[test]
fn compaction_beside_allocating_and_freeing_threads_keeps_the_ledger_exact() {
    let ops = scaled(BASE_OPS);
    let owner = Arc::new(Owner::new(None));
    let sh = new_shared(&owner, WORKERS);
    let id = sh.za.zone_id_of(Pfn(0)).unwrap();
    let workers: Vec<Worker<'_>> = (0..WORKERS)
        .map(|cpu| {
            let sh = &sh;
            Box::new(move || worker(sh, cpu, 0x5eed + cpu as u64, ops)) as Worker<'_>
        })
        .collect();
    let runs = beside_compaction(&sh, workers);
    // One more run with the workers gone: it must still leave the ledger exact.
    sh.za.compact_zone(id, None, &*owner).unwrap();
    sh.za.drain_all_pages();

    let violations = sh.violations.lock().unwrap().clone();
    let stats = sh.za.compaction_stats();
    let report = sh.za.check_invariants().unwrap();
    let owned = sh.owned();
    let table = sh.owner.table.lock().unwrap();
    let mut states_checked = 0u64;
    for (&bid, &(p, order)) in table.by_id.iter() {
        assert_eq!(
            sh.za.frame_state(p),
            Some(FrameState::Allocated { order, refcount: 1 }),
            "block {bid}"
        );
        assert_eq!(sh.ledger[p.0 as usize].load(Ordering::Relaxed), bid + 1);
        states_checked += 1;
    }
    drop(table);
    println!(
        "compaction stress: {WORKERS} workers x {ops} ops, {runs} compaction runs beside them; \
         {} pages moved, {} refused, {} isolated; direct compactions {} \
         ({} succeeded); {} ledger checks, {states_checked} live blocks checked, violations {}",
        stats.pgmigrate_success,
        stats.pgmigrate_fail,
        stats.compact_isolated,
        stats.compact_stall,
        stats.compact_success,
        sh.checks.load(Ordering::Relaxed),
        violations.len()
    );
    sh.assert_exact(&report);
    assert!(
        stats.pgmigrate_success > 0,
        "nothing was moved: the test proved nothing"
    );
    figures::record(
        "stress-compaction",
        env!("CARGO_MANIFEST_DIR"),
        &[
            ("operations".into(), WORKERS as u64 * ops + runs),
            ("threads".into(), WORKERS as u64 + 1),
            ("invariant_checks".into(), 1),
            (
                "invariant_assertions".into(),
                sh.checks.load(Ordering::Relaxed) + states_checked,
            ),
            ("pages_migrated".into(), stats.pgmigrate_success),
            ("violations".into(), violations.len() as u64),
            (
                "frames_lost".into(),
                sh.za.managed_pages() - (sh.za.nr_free_pages() + owned),
            ),
        ],
    );

    sh.za.set_migrator(None);
    let mut t = sh.owner.table.lock().unwrap();
    for (bid, (p, order)) in t.by_id.drain() {
        sh.release(p, order, bid);
        sh.za.free_pages(p, order).unwrap();
    }
    drop(t);
    settled(&sh.za);
}

/// An owner that serialises its reference changes with its callback (one lock) and
/// keeps, per block, the references it holds: 1 or 2.
#[derive(Default)]
struct Counted {
    table: Mutex<CountedTable>,
}

/// pfn -> id, and id -> (pfn, references held).
type CountedTable = (HashMap<u64, usize>, Vec<(Pfn, u32)>);

impl Migrate for Counted {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let mut t = self.table.lock().unwrap();
        let Some(id) = t.0.remove(&old.0) else {
            return MigrateOutcome::Refused;
        };
        t.0.insert(new.0, id);
        t.1[id].0 = new;
        MigrateOutcome::Moved
    }
}

#[test]
fn references_taken_before_the_callback_move_with_the_block() {
    // The owner takes and drops a second reference on its blocks, under its lock,
    // while compaction moves them. A reference taken after compaction isolated a
    // block but before the owner's callback ran must arrive on the new block: a
    // count taken too early frees the block under its owner (then hands it out
    // again) or leaves it one reference it never loses.
    let za = ZoneAllocator::new(Config {
        nr_cpus: 2,
        ..Config::with_bytes(32 << 20)
    })
    .unwrap();
    let zone = za.zone_id_of(Pfn(0)).unwrap();
    let mut moved = 0;
    let changes = AtomicU64::new(0);
    for round in 0..6u64 {
        let owner = Counted::default();
        let mut all = Vec::new();
        while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
            all.push(p);
        }
        {
            let mut t = owner.table.lock().unwrap();
            for p in all {
                if p.0 % 4 == 0 {
                    let id = t.1.len();
                    t.1.push((p, 1));
                    t.0.insert(p.0, id);
                } else {
                    za.free_pages(p, Order(0)).unwrap();
                }
            }
        }
        let stop = AtomicBool::new(false);
        let errors = AtomicU64::new(0);
        // The owner starts first, so that its changes overlap the compactions.
        let started = AtomicBool::new(false);
        moved += thread::scope(|s| {
            s.spawn(|| {
                let mut rng = round;
                let n = owner.table.lock().unwrap().1.len();
                started.store(true, Ordering::Release);
                while !stop.load(Ordering::Relaxed) {
                    let id = step(&mut rng) as usize % n;
                    let mut t = owner.table.lock().unwrap();
                    let (p, refs) = t.1[id];
                    let ok = if refs == 1 {
                        za.get_page(p).is_ok()
                    } else {
                        za.put_page(p) == Ok(false)
                    };
                    if ok {
                        t.1[id].1 = 3 - refs;
                        changes.fetch_add(1, Ordering::Relaxed);
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            while !started.load(Ordering::Acquire) {
                thread::yield_now();
            }
            let mut moved = 0;
            for _ in 0..4 {
                moved += za.compact_zone(zone, None, &owner).unwrap().pages_moved;
            }
            stop.store(true, Ordering::Relaxed);
            moved
        });
        assert_eq!(
            errors.load(Ordering::Relaxed),
            0,
            "the owner's calls were refused"
        );
        let t = owner.table.lock().unwrap();
        for &(p, refs) in &t.1 {
            assert_eq!(za.page_count(p), Ok(refs), "block at {p}");
        }
        for &(p, refs) in &t.1 {
            for _ in 0..refs {
                za.put_page(p).unwrap();
            }
        }
    }
    let changes = changes.load(Ordering::Relaxed);
    println!("{moved} pages moved, {changes} reference changes beside them");
    assert!(
        moved > 0 && changes > 0,
        "compaction moved nothing or the owner changed nothing: the test proves nothing"
    );
    settled(&za);
}

/// Refuses every move, after a moment (as an owner taking its own locks would), so
/// that compaction holds each block it isolates for a while.
struct SlowPinned;

impl Migrate for SlowPinned {
    fn relocate(&self, _: Pfn, _: Pfn, _: Order) -> MigrateOutcome {
        thread::sleep(std::time::Duration::from_micros(50));
        MigrateOutcome::Refused
    }
}

#[test]
fn movable_vmalloc_beside_compaction_loses_no_frame() {
    // vmalloc with a movable `gfp` splits the high-order blocks it allocates; a
    // compaction thread can isolate such a block between the allocation and the
    // split, which then answers `Busy`. The block must be split once compaction
    // lets go, or given back: never dropped (frames lost for good) nor asserted
    // impossible.
    let za = ZoneAllocator::new(Config {
        nr_cpus: 2,
        ..Config::with_bytes(4 << 20)
    })
    .unwrap();
    let zone = za.zones().next().unwrap().0;
    {
        let cfg = VmallocConfig {
            gfp: Gfp::HIGHUSER_MOVABLE,
            ..Default::default()
        };
        let vm = VmallocSpace::new(&za, cfg).unwrap();
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _ = za.compact_zone(zone, None, &SlowPinned);
                }
            });
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        for i in 0..20_000usize {
                            let a = vm.vmalloc((2 + i % 15) * 4096).unwrap();
                            vm.vfree(a.addr()).unwrap();
                        }
                    })
                })
                .collect();
            let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
            stop.store(true, Ordering::Relaxed);
            for r in results {
                if let Err(e) = r {
                    std::panic::resume_unwind(e);
                }
            }
        });
        vm.check_invariants().unwrap();
    }
    settled(&za);
}

/// Unmovable traffic through a `LocalCache` on CPU `cpu`, ledger kept.
fn cache_worker(sh: &Shared, cpu: usize, seed: u64, ops: u64) {
    let mut rng = seed;
    let mut cache = sh.za.local_cache_on(cpu, Gfp::KERNEL).unwrap();
    let mut held: Vec<(u64, Pfn, Order)> = Vec::new();
    for _ in 0..ops {
        sh.progress.fetch_add(1, Ordering::Relaxed);
        let r = step(&mut rng);
        if r % 100 < 55 || held.is_empty() {
            let order = Order(((r >> 8) % 3) as u8);
            let Ok(p) = cache.alloc(order) else { continue };
            let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
            sh.claim(p, order, id);
            held.push((id, p, order));
        } else {
            let (id, p, order) = held.swap_remove((r >> 8) as usize % held.len());
            sh.release(p, order, id);
            if let Err(e) = cache.free(p, order) {
                sh.violation(format!("cache free of {p}: {e}"));
            }
        }
    }
    for (id, p, order) in held {
        sh.release(p, order, id);
        if let Err(e) = cache.free(p, order) {
            sh.violation(format!("final cache free of {p}: {e}"));
        }
    }
}

/// Unmovable traffic through `PageBlock` guards, ledger kept.
fn guard_worker(sh: &Shared, seed: u64, ops: u64) {
    let mut rng = seed;
    let mut held: Vec<(u64, PageBlock<'_, AbstractFrames>)> = Vec::new();
    for _ in 0..ops {
        sh.progress.fetch_add(1, Ordering::Relaxed);
        let r = step(&mut rng);
        if r % 100 < 55 || held.is_empty() {
            let order = Order(((r >> 8) % 4) as u8);
            let Ok(g) = sh.za.alloc_block(Gfp::KERNEL, order) else {
                continue;
            };
            let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
            sh.claim(g.pfn(), order, id);
            held.push((id, g));
        } else {
            let (id, g) = held.swap_remove((r >> 8) as usize % held.len());
            sh.release(g.pfn(), g.order(), id);
            drop(g);
        }
    }
    for (id, g) in held {
        sh.release(g.pfn(), g.order(), id);
    }
}

#[test]
fn a_panicking_owner_beside_raw_cache_and_guard_traffic_loses_no_frame() {
    let ops = scaled(BASE_OPS / 2);
    let owner = Arc::new(Owner::new(Some(20)));
    let sh = new_shared(&owner, 4);
    let id = sh.za.zone_id_of(Pfn(0)).unwrap();
    let runs = {
        let sh = &sh;
        let workers: Vec<Worker<'_>> = vec![
            Box::new(move || worker(sh, 0, 0xfeed, ops)),
            Box::new(move || worker(sh, 1, 0xbeef, ops)),
            Box::new(move || cache_worker(sh, 2, 0xcafe, ops)),
            Box::new(move || guard_worker(sh, 0xf00d, ops)),
        ];
        beside_compaction(sh, workers)
    };
    // However the threads interleaved, the owner is called now: it is given every
    // fourth page of the memory left, the rest freed, and the zone compacted
    // until a callback has panicked (each panics one time in 20).
    let mut rest = Vec::new();
    while let Ok(p) = sh
        .za
        .alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0))
    {
        rest.push(p);
    }
    for p in rest {
        if p.0 % 4 != 0 {
            sh.za.free_pages(p, Order(0)).unwrap();
            continue;
        }
        let bid = sh.next_id.fetch_add(1, Ordering::Relaxed);
        sh.claim(p, Order(0), bid);
        let mut t = owner.table.lock().unwrap();
        t.by_id.insert(bid, (p, Order(0)));
        t.by_pfn.insert(p.0, bid);
    }
    for _ in 0..200 {
        if owner.panics.load(Ordering::Relaxed) > 0 {
            break;
        }
        match sh.za.compact_zone(id, None, &*owner) {
            Ok(_) | Err(CompactError::OwnerPanicked) => {}
            Err(e) => sh.violation(format!("compact_zone: {e}")),
        }
    }
    sh.za.set_migrator(None);
    sh.za.drain_all_pages();
    let violations = sh.violations.lock().unwrap().clone();
    let stats = sh.za.compaction_stats();
    let report = sh.za.check_invariants().unwrap();
    let panics = owner.panics.load(Ordering::Relaxed);
    println!(
        "panicking-owner stress: 4 workers (2 raw, 1 cache, 1 guard) x {ops} ops, {runs} compaction \
         runs; {panics} of {} callbacks panicked, {} pages moved, {} refused; {} ledger checks, \
         violations {}",
        owner.calls.load(Ordering::Relaxed),
        stats.pgmigrate_success,
        stats.pgmigrate_fail,
        sh.checks.load(Ordering::Relaxed),
        violations.len()
    );
    sh.assert_exact(&report);
    assert!(panics > 0, "no callback panicked: the test proved nothing");
    assert!(stats.pgmigrate_success > 0, "nothing was moved");
    let mut t = owner.table.lock().unwrap();
    for (bid, (p, order)) in t.by_id.drain() {
        assert_eq!(
            sh.za.frame_state(p),
            Some(FrameState::Allocated { order, refcount: 1 }),
            "block {bid}"
        );
        sh.release(p, order, bid);
        sh.za.free_pages(p, order).unwrap();
    }
    drop(t);
    settled(&sh.za);
}
