//! Owners' code cannot break the allocator: migration callbacks that panic or call
//! back into it, `Config::cpu_id` hooks that panic, and raw frees of pages a live
//! vmalloc area owns. Each case ends with every frame accounted for: the
//! invariants hold, and once the owners free what they hold every frame is free.
//!
//! A call that could hang without its fix runs on a thread of its own and is
//! waited for with a time limit, so that a regression fails instead of hanging.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zonealloc::*;

#[path = "support/induced_panic.rs"]
mod induced;
#[path = "support/settled.rs"]
mod support;
use induced::induced_panic;
use support::settled;

const FRAMES: u64 = 8192;

/// A zone of `FRAMES` frames filled with movable pages, of which the owner keeps
/// every fourth: no pageblock is free, three quarters of memory are.
fn fragmented(cfg: impl FnOnce(Config) -> Config) -> (ZoneAllocator, HashSet<u64>) {
    let za = ZoneAllocator::new(cfg(Config {
        nr_cpus: 1,
        min_free_kbytes: Some(0),
        ..Config::single_zone(ZoneType::Normal, Pfn(0), FRAMES)
    }))
    .unwrap();
    let mut pages = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
        pages.push(p);
    }
    let mut kept = HashSet::new();
    for p in pages {
        if p.0 % 4 == 0 {
            kept.insert(p.0);
        } else {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    (za, kept)
}

/// An owner's switch of its reference from `old` to `new`, if it holds `old`.
fn switch(pages: &Mutex<HashSet<u64>>, old: Pfn, new: Pfn) -> MigrateOutcome {
    let mut pages = pages.lock().unwrap();
    if pages.remove(&old.0) {
        pages.insert(new.0);
        MigrateOutcome::Moved
    } else {
        MigrateOutcome::Refused
    }
}

/// An owner of movable pages whose callback panics on its `panic_on`-th call
/// (and on every call after it when `every_after` is set).
struct PanicsOnCall {
    panic_on: u64,
    every_after: bool,
    calls: AtomicU64,
    pages: Mutex<HashSet<u64>>,
}

impl PanicsOnCall {
    fn new(pages: HashSet<u64>, panic_on: u64, every_after: bool) -> PanicsOnCall {
        PanicsOnCall {
            panic_on,
            every_after,
            calls: AtomicU64::new(0),
            pages: Mutex::new(pages),
        }
    }

    /// Frees every page the owner holds; each free must succeed.
    fn free_all(&self, za: &ZoneAllocator) {
        for p in self.pages.lock().unwrap().drain() {
            assert_eq!(za.free_pages(Pfn(p), Order(0)), Ok(()), "owner's page {p}");
        }
    }
}

impl Migrate for PanicsOnCall {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if call == self.panic_on || (self.every_after && call > self.panic_on) {
            induced_panic();
        }
        switch(&self.pages, old, new)
    }
}

#[test]
fn a_migration_callback_that_panics_loses_no_frame() {
    let (za, kept) = fragmented(|c| c);
    let owner = PanicsOnCall::new(kept, 11, false);
    let zone = za.zone_id_of(Pfn(0)).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| za.compact_zone(zone, None, &owner)));
    assert_eq!(
        r.ok(),
        Some(Err(CompactError::OwnerPanicked)),
        "the panic is caught and answered"
    );
    assert!(owner.calls.load(Ordering::Relaxed) >= 11);
    za.check_invariants().unwrap();
    // The run stopped at the panic; a later one goes on with the same owner.
    let later = za.compact_zone(zone, None, &owner).unwrap();
    assert!(later.pages_moved > 0);
    owner.free_all(&za);
    settled(&za);
}

#[test]
fn a_registered_owner_that_panics_under_direct_compaction_loses_no_frame() {
    let (za, kept) = fragmented(|c| c);
    let owner = Arc::new(PanicsOnCall::new(kept, 3, true));
    za.set_migrator(Some(owner.clone()));
    let r = catch_unwind(AssertUnwindSafe(|| {
        za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9))
    }));
    let got = r.expect("no panic reaches the allocating caller");
    assert!(
        owner.calls.load(Ordering::Relaxed) >= 3,
        "the owner was called"
    );
    assert!(za.compaction_stats().compact_stall > 0);
    if let Ok(p) = got {
        za.free_pages(p, Order(9)).unwrap();
    }
    za.check_invariants().unwrap();
    za.set_migrator(None);
    owner.free_all(&za);
    settled(&za);
}

/// An owner whose callback compacts the same allocator again, every way there is.
struct Reenters {
    za: Arc<ZoneAllocator>,
    pages: Mutex<HashSet<u64>>,
    answers: Mutex<Vec<String>>,
}

impl Migrate for Reenters {
    fn relocate(&self, old: Pfn, new: Pfn, _order: Order) -> MigrateOutcome {
        let zone = self.za.zone_id_of(Pfn(0)).unwrap();
        let node = self.za.compact_node(0, None, self);
        let same_zone = self.za.compact_zone(zone, Some(Order(9)), self);
        // Direct and proactive compaction pass over the zone being compacted.
        let direct = self.za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9));
        if let Ok(p) = direct {
            self.za.free_pages(p, Order(9)).unwrap();
        }
        self.za.proactive_compact_node(0);
        self.answers
            .lock()
            .unwrap()
            .push(format!("{node:?} {same_zone:?}"));
        switch(&self.pages, old, new)
    }
}

#[test]
fn compacting_from_inside_the_callback_is_refused_not_a_hang() {
    let (za, kept) = fragmented(|c| c);
    let za = Arc::new(za);
    let owner = Arc::new(Reenters {
        za: za.clone(),
        pages: Mutex::new(kept),
        answers: Mutex::new(Vec::new()),
    });
    za.set_migrator(Some(owner.clone()));
    za.set_compaction_proactiveness(90).unwrap();
    let (tx, rx) = mpsc::channel();
    let (za2, owner2) = (za.clone(), owner.clone());
    std::thread::spawn(move || {
        let zone = za2.zone_id_of(Pfn(0)).unwrap();
        let r = za2.compact_zone(zone, None, &*owner2);
        tx.send(r).unwrap();
    });
    let r = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("compact_zone returned: no deadlock on re-entry");
    let report = r.unwrap();
    assert!(report.pages_moved > 0);
    let answers = owner.answers.lock().unwrap().clone();
    assert!(!answers.is_empty());
    let refused = format!(
        "{:?} {:?}",
        Err::<CompactReport, _>(CompactError::Reentered),
        Err::<CompactReport, _>(CompactError::Reentered)
    );
    assert!(answers.iter().all(|a| *a == refused), "{answers:?}");
    za.set_migrator(None);
    za.check_invariants().unwrap();
    for p in owner.pages.lock().unwrap().drain() {
        za.free_pages(Pfn(p), Order(0)).unwrap();
    }
    settled(&za);
}

std::thread_local! {
    /// Whether `cpu_hook` panics on this thread (tests run in parallel).
    static CPU_HOOK_PANICS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn cpu_hook() -> usize {
    if CPU_HOOK_PANICS.with(|p| p.get()) {
        induced_panic();
    }
    1
}

/// Runs `f` with `cpu_hook` panicking: it must neither panic nor fail.
#[track_caller]
fn with_panicking_cpu_hook<R: std::fmt::Debug>(what: &str, f: impl FnOnce() -> R) -> R {
    CPU_HOOK_PANICS.with(|p| p.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    CPU_HOOK_PANICS.with(|p| p.set(false));
    match r {
        Ok(r) => r,
        Err(_) => panic!("{what}: the cpu_id hook's panic reached the caller"),
    }
}

#[test]
fn a_cpu_id_hook_that_panics_leaves_no_call_half_done() {
    let za = ZoneAllocator::with_arena(
        Config {
            nr_cpus: 2,
            cpu_id: Some(cpu_hook),
            ..Config::with_bytes(16 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    // Multi-page frees: they claim pages, then free them on this CPU.
    let head = za.alloc_pages(Gfp::KERNEL, Order(4)).unwrap();
    za.split_page(head, Order(4)).unwrap();
    let r = with_panicking_cpu_hook("free_contig_range", || za.free_contig_range(head, 8));
    assert_eq!(r, Ok(()));
    let rest: Vec<Pfn> = (8..16).map(|i| head.add(i)).collect();
    let r = with_panicking_cpu_hook("free_pages_bulk", || za.free_pages_bulk(&rest));
    assert_eq!(r, Ok(()));
    // A fragment's last free freezes the block, then frees it on this CPU.
    let mut frags = PageFragCache::new(&za, Gfp::KERNEL);
    let f = frags.alloc(100, 8).unwrap();
    frags.drain();
    let r = with_panicking_cpu_hook("page_frag_free", || za.page_frag_free(f.as_ptr()));
    assert_eq!(r, Ok(()));
    // A guard's drop frees its block on this CPU.
    let g = za.alloc_block(Gfp::KERNEL, Order(1)).unwrap();
    with_panicking_cpu_hook("PageBlock::drop", || drop(g));
    // The single-block calls and the caches.
    let p = with_panicking_cpu_hook("alloc_pages", || za.alloc_pages(Gfp::KERNEL, Order(0)));
    let p = p.unwrap();
    let r = with_panicking_cpu_hook("free_pages", || za.free_pages(p, Order(0)));
    assert_eq!(r, Ok(()));
    let cache = with_panicking_cpu_hook("local_cache", || {
        let mut cache = za.local_cache(Gfp::KERNEL)?;
        let p = cache.alloc(Order(0))?;
        cache.free(p, Order(0)).unwrap();
        Ok::<(), AllocError>(())
    });
    assert_eq!(cache, Ok(()));
    // Nothing is left claimed or frozen: these answer at once.
    za.check_invariants().unwrap();
    settled(&za);
}

fn vmalloc_refusals(vfree_mode: VfreeMode) {
    let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    let vm = VmallocSpace::new(
        &za,
        VmallocConfig {
            vfree_mode,
            ..VmallocConfig::default()
        },
    )
    .unwrap();
    let v = vm.vmalloc(8 * 4096).unwrap();
    let huge = vm.vmalloc_huge(2 << 20).unwrap();
    let mut cache = za.local_cache(Gfp::KERNEL).unwrap();
    for &p in [
        v.pages()[0],
        v.pages()[7],
        huge.pages()[0],
        huge.pages()[300],
    ]
    .iter()
    {
        let busy = Err(FreeError::Busy(p));
        assert_eq!(za.free_pages(p, Order(0)), busy);
        assert_eq!(za.put_page(p).map(|_| ()), busy);
        assert_eq!(za.get_page(p), busy);
        assert_eq!(za.split_page(p, Order(0)), busy);
        assert_eq!(za.free_pages_bulk(&[p]), busy);
        assert_eq!(za.free_contig_range(p, 1), busy);
        assert_eq!(cache.free(p, Order(0)), busy);
        // SAFETY: refused before any guard is made.
        assert_eq!(
            unsafe { PageBlock::from_raw(&za, p, Order(0)) }.err(),
            Some(FreeError::Busy(p))
        );
    }
    // A bulk free of a raw run that reaches into an area changes nothing either.
    let mut raw = vec![None; 4];
    assert_eq!(za.alloc_pages_bulk(Gfp::KERNEL, &mut raw), 4);
    let raw: Vec<Pfn> = raw.into_iter().flatten().collect();
    let mut mixed = raw.clone();
    mixed.push(v.pages()[3]);
    assert_eq!(
        za.free_pages_bulk(&mixed),
        Err(FreeError::Busy(v.pages()[3]))
    );
    za.free_pages_bulk(&raw).unwrap();
    drop(cache);
    za.check_invariants().unwrap();
    vm.vfree(v.addr()).unwrap();
    vm.vfree(huge.addr()).unwrap();
    drop(vm);
    settled(&za);
}

#[test]
fn raw_frees_of_vmalloc_pages_are_refused_bulk_vfree() {
    vmalloc_refusals(VfreeMode::Bulk);
}

#[test]
fn raw_frees_of_vmalloc_pages_are_refused_per_page_vfree() {
    vmalloc_refusals(VfreeMode::PerPage);
}

#[test]
fn refusals_of_vmalloc_pages_change_nothing() {
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        ..Config::with_bytes(16 << 20)
    })
    .unwrap();
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let v = vm.vmalloc(4 * 4096).unwrap();
    let p = v.pages()[1];
    let before = za.state_digest();
    assert!(za.free_pages(p, Order(0)).is_err());
    assert!(za.put_page(p).is_err());
    assert!(za.get_page(p).is_err());
    assert!(za.free_pages_bulk(v.pages()).is_err());
    assert!(za.free_contig_range(v.pages()[0], 1).is_err());
    assert_eq!(za.state_digest(), before, "a refusal changed the allocator");
    // vfree frees exactly the area's pages: nobody else's block.
    let other = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    vm.vfree(v.addr()).unwrap();
    assert_eq!(
        za.frame_state(other),
        Some(FrameState::Allocated {
            order: Order(0),
            refcount: 1
        })
    );
    za.free_pages(other, Order(0)).unwrap();
    drop(vm);
    settled(&za);
}

#[test]
fn free_counts_of_an_order_past_max_order_are_zero() {
    let za = ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap();
    for zone in za.free_counts() {
        assert_eq!(zone.blocks_at(usize::MAX), 0);
        assert_eq!(zone.blocks_at(MAX_ORDER_LIMIT as usize + 1), 0);
        assert!(zone.blocks_at(0) + zone.blocks_at(10) > 0);
    }
}
