//! Reclaim: shrinkers asked by direct reclaim and by kswapd, watermark boosting,
//! and shrinkers that panic, lie or call back into the allocator. Every test ends
//! with an exact ledger: each frame is free, in the pool, or held by the test.

#[path = "support/induced_panic.rs"]
mod induced_panic;
#[path = "support/rng.rs"]
mod rng;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use zonealloc::reclaim::{
    KswapdWorker, ReclaimError, ShrinkControl, Shrinker, ShrinkerConfig, DEF_PRIORITY,
};
use zonealloc::{AllocError, Config, Gfp, Order, Pfn, ZoneAllocator};

use induced_panic::induced_panic;

/// 16 MiB: 4096 frames.
const BYTES: u64 = 16 << 20;

/// What a pool shrinker does when asked to scan.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Honest,
    /// Says it freed what it was asked, frees nothing.
    Lies,
    PanicsInScan,
    PanicsInCount,
    /// Says it holds `u64::MAX` pages, frees nothing.
    Overstates,
}

/// A buffer pool: pages it caches, which it frees when asked.
struct Pool {
    za: Mutex<Option<Arc<ZoneAllocator>>>,
    cached: Mutex<Vec<Pfn>>,
    mode: Mode,
    scans: AtomicU64,
    /// Scans running on any thread now: never more than one per thread's reclaim.
    depth: AtomicU32,
    /// Allocate a page from inside `scan` (and keep it cached).
    allocates: AtomicBool,
}

impl Pool {
    fn new(za: &Arc<ZoneAllocator>, mode: Mode) -> Arc<Pool> {
        Arc::new(Pool {
            za: Mutex::new(Some(za.clone())),
            cached: Mutex::new(Vec::new()),
            mode,
            scans: AtomicU64::new(0),
            depth: AtomicU32::new(0),
            allocates: AtomicBool::new(false),
        })
    }

    /// Caches pages taken without reclaim until the zone refuses (min watermark).
    fn fill(&self, za: &ZoneAllocator) {
        let mut c = self.cached.lock().unwrap();
        while let Ok(p) = za.alloc_pages(Gfp::NOWAIT, Order(0)) {
            c.push(p);
        }
    }

    fn len(&self) -> u64 {
        self.cached.lock().unwrap().len() as u64
    }

    /// Gives every cached page back, and drops the pool's allocator reference.
    fn empty(&self) {
        let za = self.za.lock().unwrap().take().unwrap();
        for p in self.cached.lock().unwrap().drain(..) {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
}

impl Shrinker for Pool {
    fn count(&self, _: &ShrinkControl) -> u64 {
        if self.mode == Mode::PanicsInCount {
            induced_panic();
        }
        if self.mode == Mode::Lies {
            return 1 << 20;
        }
        if self.mode == Mode::Overstates {
            return u64::MAX;
        }
        self.len()
    }

    fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
        assert!(sc.nr_to_scan > 0 && sc.priority <= DEF_PRIORITY);
        let d = self.depth.fetch_add(1, Ordering::SeqCst);
        self.scans.fetch_add(1, Ordering::Relaxed);
        let za = self.za.lock().unwrap().clone();
        let r = match self.mode {
            Mode::PanicsInScan => {
                self.depth.fetch_sub(1, Ordering::SeqCst);
                induced_panic()
            }
            Mode::Lies => Some(sc.nr_to_scan),
            Mode::Overstates => Some(0),
            _ => {
                let za = za.expect("the pool is live while registered");
                if self.allocates.load(Ordering::Relaxed) {
                    // Allocating from inside reclaim: served without reclaim in
                    // turn, so this scan is never re-entered on this thread.
                    if let Ok(p) = za.alloc_pages(Gfp::KERNEL, Order(0)) {
                        za.free_pages(p, Order(0)).unwrap();
                    }
                    assert_eq!(za.balance_node(0), Err(ReclaimError::Reentered));
                }
                let mut c = self.cached.lock().unwrap();
                let n = (sc.nr_to_scan as usize).min(c.len());
                for p in c.drain(..n) {
                    za.free_pages(p, Order(0)).unwrap();
                }
                Some(n as u64)
            }
        };
        assert_eq!(d, 0, "a scan re-entered on its own thread");
        self.depth.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

fn allocator() -> Arc<ZoneAllocator> {
    Arc::new(ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap())
}

/// Ledger: every frame is free (buddy or per-CPU), in `pool`, or in `held`.
fn ledger(za: &ZoneAllocator, pool: u64, held: u64) {
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.allocated_pages, pool + held, "allocated = pool + held");
    assert_eq!(r.free_pages + r.allocated_pages, za.managed_pages());
}

fn vm(za: &ZoneAllocator, name: &str) -> u64 {
    za.vmstat().get(name).unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn without_a_shrinker_the_cache_is_lost_memory() {
    let za = allocator();
    let pool = Pool::new(&za, Mode::Honest);
    pool.fill(&za);
    // Below the min watermark only reserves are left: a 64-page request fails.
    let r = za.alloc_pages(Gfp::KERNEL, Order(6));
    assert_eq!(r, Err(AllocError::NoMemory { order: Order(6) }));
    assert_eq!(vm(&za, "allocstall_normal"), 0);
    ledger(&za, pool.len(), 0);
    pool.empty();
}

#[test]
fn direct_reclaim_takes_memory_back_from_the_shrinker() {
    let za = allocator();
    let pool = Pool::new(&za, Mode::Honest);
    let id = za.register_shrinker(pool.clone(), ShrinkerConfig::default());
    pool.fill(&za);
    let before = pool.len();
    let p = za.alloc_pages(Gfp::KERNEL, Order(6)).unwrap();
    assert!(pool.len() < before, "the pool gave pages back");
    assert_eq!(vm(&za, "allocstall_normal"), 1);
    let steal = vm(&za, "pgsteal_direct");
    assert_eq!(steal, before - pool.len());
    assert!(vm(&za, "pgscan_direct") >= steal);
    assert_eq!(vm(&za, "slabs_scanned"), vm(&za, "pgscan_direct"));
    ledger(&za, pool.len(), 64);
    za.free_pages(p, Order(6)).unwrap();
    // A GFP without direct reclaim does not reclaim.
    pool.fill(&za);
    let stalls = vm(&za, "allocstall_normal");
    assert!(za.alloc_pages(Gfp::NOWAIT, Order(6)).is_err());
    assert_eq!(vm(&za, "allocstall_normal"), stalls);
    za.unregister_shrinker(id).unwrap();
    assert_eq!(
        za.unregister_shrinker(id),
        Err(ReclaimError::UnknownShrinker)
    );
    ledger(&za, pool.len(), 0);
    pool.empty();
}

#[test]
fn shrinkers_that_panic_or_lie_cost_no_frame_and_no_hang() {
    for mode in [Mode::PanicsInScan, Mode::PanicsInCount, Mode::Lies] {
        let za = allocator();
        let bad = Pool::new(&za, mode);
        za.register_shrinker(bad.clone(), ShrinkerConfig::default());
        bad.fill(&za);
        // Only the bad shrinker: the request fails, in bounded time.
        assert_eq!(
            za.alloc_pages(Gfp::KERNEL, Order(6)),
            Err(AllocError::NoMemory { order: Order(6) })
        );
        ledger(&za, bad.len(), 0);
        // Beside an honest one, which still gets asked.
        let good = Pool::new(&za, Mode::Honest);
        za.register_shrinker(good.clone(), ShrinkerConfig::default());
        for p in bad.cached.lock().unwrap().drain(..) {
            good.cached.lock().unwrap().push(p);
        }
        let p = za.alloc_pages(Gfp::KERNEL, Order(6)).unwrap();
        assert!(good.scans.load(Ordering::Relaxed) > 0);
        ledger(&za, good.len(), 64);
        za.free_pages(p, Order(6)).unwrap();
        good.empty();
        bad.za.lock().unwrap().take();
    }
}

#[test]
fn a_shrinker_that_overstates_what_it_holds_is_asked_a_bounded_number_of_times() {
    let za = allocator();
    let bad = Pool::new(&za, Mode::Overstates);
    za.register_shrinker(bad.clone(), ShrinkerConfig::default());
    bad.fill(&za);
    assert_eq!(
        za.alloc_pages(Gfp::KERNEL, Order(6)),
        Err(AllocError::NoMemory { order: Order(6) })
    );
    // One `scan` a priority (its first frees nothing), one pass (nothing freed).
    let scans = bad.scans.load(Ordering::Relaxed);
    assert!(
        (1..=u64::from(DEF_PRIORITY) + 1).contains(&scans),
        "{scans} scans"
    );
    assert_eq!(za.balance_node(0).unwrap().freed, 0);
    ledger(&za, bad.len(), 0);
    bad.empty();
}

#[test]
fn a_shrinker_may_allocate_and_register_from_inside_its_scan() {
    let za = allocator();
    let pool = Pool::new(&za, Mode::Honest);
    pool.allocates.store(true, Ordering::Relaxed);
    let id = za.register_shrinker(pool.clone(), ShrinkerConfig::default());
    pool.fill(&za);
    let p = za.alloc_pages(Gfp::KERNEL, Order(6)).unwrap();
    assert!(pool.scans.load(Ordering::Relaxed) > 0);
    assert_eq!(
        vm(&za, "allocstall_normal"),
        1,
        "the scan's own allocation did not reclaim"
    );
    ledger(&za, pool.len(), 64);
    za.free_pages(p, Order(6)).unwrap();
    za.unregister_shrinker(id).unwrap();
    pool.empty();
}

#[test]
fn balance_node_reclaims_to_the_high_watermark() {
    let za = allocator();
    let pool = Pool::new(&za, Mode::Honest);
    za.register_shrinker(pool.clone(), ShrinkerConfig::default());
    assert!(!za.kswapd_pending(0));
    // The allocations that fail at the end of the fill entered the slow path
    // with `__GFP_KSWAPD_RECLAIM`: they woke kswapd.
    pool.fill(&za);
    assert!(za.kswapd_pending(0));
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let r = za.balance_node(0).unwrap();
    assert!(r.balanced && r.freed > 0, "{r:?}");
    assert!(!za.kswapd_pending(0));
    let high = za.watermarks(za.zones().next().unwrap().0).unwrap()[2];
    assert!(za.nr_free_pages() > high);
    assert_eq!(vm(&za, "pageoutrun"), 1);
    assert_eq!(vm(&za, "pgsteal_kswapd"), r.freed);
    assert_eq!(za.balance_node(7), Err(ReclaimError::NoNode));
    // Balanced already: nothing asked.
    let again = za.balance_node(0).unwrap();
    assert_eq!((again.scanned, again.priority), (0, DEF_PRIORITY));
    ledger(&za, pool.len(), 1);
    za.free_pages(p, Order(0)).unwrap();
    pool.empty();
}

#[cfg(not(miri))]
#[test]
fn the_kswapd_worker_balances_after_a_wake_up() {
    let za = allocator();
    let pool = Pool::new(&za, Mode::Honest);
    za.register_shrinker(pool.clone(), ShrinkerConfig::default());
    let w = KswapdWorker::spawn(&za).unwrap();
    assert!(matches!(
        KswapdWorker::spawn(&za),
        Err(ReclaimError::AlreadyRunning)
    ));
    pool.fill(&za);
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while vm(&za, "pageoutrun") == 0 || za.kswapd_pending(0) {
        assert!(std::time::Instant::now() < deadline, "kswapd never ran");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    drop(w);
    // Dropped: another may start.
    drop(KswapdWorker::spawn(&za).unwrap());
    ledger(&za, pool.len(), 1);
    za.free_pages(p, Order(0)).unwrap();
    pool.empty();
}

/// Fills the zone with movable pages and keeps one in every 16: every pageblock
/// is movable and partly used, so the unmovable page then allocated is claimed
/// from one (a fallback). Returns the pages kept, the unmovable one last.
fn fragment_and_fall_back(za: &ZoneAllocator) -> Vec<Pfn> {
    let mut movable = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
        movable.push(p);
    }
    let mut kept = Vec::new();
    for p in movable {
        if p.0 % 16 == 0 {
            kept.push(p);
        } else {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    za.drain_all_pages();
    kept.push(za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap());
    kept
}

#[test]
fn a_fallback_boosts_the_watermarks_until_kswapd_resets_them() {
    let config = |factor| Config {
        watermark_boost_factor: factor,
        nr_cpus: 1,
        ..Config::with_bytes(64 << 20)
    };
    let za = Arc::new(ZoneAllocator::new(config(15_000)).unwrap());
    let id = za.zones().next().unwrap().0;
    let base = za.watermarks(id).unwrap();
    let kept = fragment_and_fall_back(&za);
    assert!(vm(&za, "pgalloc_normal") > 0);
    let info = za.zoneinfo();
    let boost = info.zones.iter().find(|z| z.id == id).unwrap().boost;
    assert!(boost >= 512, "a pageblock's boost at least, got {boost}");
    let boosted = za.watermarks(id).unwrap();
    assert_eq!(
        boosted[0],
        base[0] + boost,
        "wmark_pages() includes the boost"
    );
    assert!(za
        .zoneinfo()
        .to_string()
        .contains(&format!("boost    {boost}")));
    assert!(za.kswapd_pending(0), "a boost wakes kswapd");
    let r = za.balance_node(0).unwrap();
    assert!(r.boost_reset);
    assert_eq!(za.watermarks(id).unwrap(), base);
    for p in kept {
        za.free_pages(p, Order(0)).unwrap();
    }
    ledger(&za, 0, 0);
    // Off by default: the same workload boosts nothing.
    let plain = ZoneAllocator::new(config(0)).unwrap();
    let kept = fragment_and_fall_back(&plain);
    assert!(plain.zoneinfo().zones.iter().all(|z| z.boost == 0));
    assert_eq!(plain.watermarks(id).unwrap(), base);
    for p in kept {
        plain.free_pages(p, Order(0)).unwrap();
    }
}

/// A shrinker for the property test: frees its pages through any thread's call.
struct Cache {
    za: Mutex<Option<Arc<ZoneAllocator>>>,
    pages: Mutex<Vec<(Pfn, Order)>>,
}

impl Shrinker for Cache {
    fn count(&self, _: &ShrinkControl) -> u64 {
        self.pages
            .lock()
            .unwrap()
            .iter()
            .map(|&(_, o)| o.nr_pages())
            .sum()
    }
    fn scan(&self, sc: &ShrinkControl) -> Option<u64> {
        let za = self.za.lock().unwrap().clone()?;
        let mut freed = 0;
        let mut c = self.pages.lock().unwrap();
        while freed < sc.nr_to_scan {
            let Some((p, o)) = c.pop() else { break };
            za.free_pages(p, o).unwrap();
            freed += o.nr_pages();
        }
        Some(freed)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Whatever the mix of cached and held allocations, frees and kswapd runs: an
    /// allocation fails only if the cache is empty and the zone short, and every
    /// frame stays exactly one of free, cached or held.
    #[test]
    fn every_frame_is_free_cached_or_held(ops in prop::collection::vec((0u8..4, 0u8..4, any::<u16>()), 1..200)) {
        let za = Arc::new(ZoneAllocator::new(Config::with_bytes(8 << 20)).unwrap());
        let cache = Arc::new(Cache { za: Mutex::new(Some(za.clone())), pages: Mutex::new(Vec::new()) });
        za.register_shrinker(cache.clone(), ShrinkerConfig { batch: 16, ..ShrinkerConfig::default() });
        let mut held: Vec<(Pfn, Order)> = Vec::new();
        for (what, order, pick) in ops {
            let o = Order(order);
            match what {
                0 => {
                    // Cache as much as the zone gives without reclaim.
                    for _ in 0..64 {
                        match za.alloc_pages(Gfp::NOWAIT, o) {
                            Ok(p) => cache.pages.lock().unwrap().push((p, o)),
                            Err(_) => break,
                        }
                    }
                }
                1 => match za.alloc_pages(Gfp::KERNEL, o) {
                    Ok(p) => held.push((p, o)),
                    Err(_) => {
                        // Reclaim had nothing left to take.
                        prop_assert_eq!(cache.count(&ShrinkControl { gfp: Gfp::KERNEL, nid: 0, nr_to_scan: 0, priority: 0 }), 0);
                    }
                },
                2 => if !held.is_empty() {
                    let (p, o) = held.swap_remove(pick as usize % held.len());
                    za.free_pages(p, o).unwrap();
                },
                _ => { za.balance_node(0).unwrap(); }
            }
            let cached: u64 = cache.pages.lock().unwrap().iter().map(|&(_, o)| o.nr_pages()).sum();
            let mine: u64 = held.iter().map(|&(_, o)| o.nr_pages()).sum();
            za.drain_all_pages();
            let r = za.check_invariants().unwrap();
            prop_assert_eq!(r.allocated_pages, cached + mine);
            prop_assert_eq!(r.free_pages + r.allocated_pages, za.managed_pages());
        }
        for (p, o) in held { za.free_pages(p, o).unwrap(); }
        for (p, o) in cache.pages.lock().unwrap().drain(..) { za.free_pages(p, o).unwrap(); }
        cache.za.lock().unwrap().take();
    }
}

#[test]
fn threads_allocating_beside_a_shrinking_cache_lose_nothing() {
    let za = allocator();
    let cache = Arc::new(Cache {
        za: Mutex::new(Some(za.clone())),
        pages: Mutex::new(Vec::new()),
    });
    za.register_shrinker(cache.clone(), ShrinkerConfig::default());
    let w = KswapdWorker::spawn(&za).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (za, cache) = (za.clone(), cache.clone());
            std::thread::spawn(move || {
                let mut rng = rng::Rng::new(t + 1);
                let mut held: Vec<(Pfn, Order)> = Vec::new();
                for _ in 0..5_000 {
                    let o = Order(rng.below(3) as u8);
                    match rng.below(3) {
                        0 => {
                            if let Ok(p) = za.alloc_pages(Gfp::NOWAIT, o) {
                                cache.pages.lock().unwrap().push((p, o));
                            }
                        }
                        1 => {
                            if let Ok(p) = za.alloc_pages(Gfp::KERNEL, o) {
                                held.push((p, o));
                            }
                        }
                        _ => {
                            if let Some((p, o)) = held.pop() {
                                za.free_pages(p, o).unwrap();
                            }
                        }
                    }
                }
                held
            })
        })
        .collect();
    let mut held = Vec::new();
    for t in threads {
        held.extend(t.join().unwrap());
    }
    drop(w);
    let cached: u64 = cache.count(&ShrinkControl {
        gfp: Gfp::KERNEL,
        nid: 0,
        nr_to_scan: 0,
        priority: 0,
    });
    let mine: u64 = held.iter().map(|&(_, o): &(Pfn, Order)| o.nr_pages()).sum();
    ledger(&za, cached, mine);
    for (p, o) in held {
        za.free_pages(p, o).unwrap();
    }
    for (p, o) in cache.pages.lock().unwrap().drain(..) {
        za.free_pages(p, o).unwrap();
    }
    cache.za.lock().unwrap().take();
    ledger(&za, 0, 0);
}
