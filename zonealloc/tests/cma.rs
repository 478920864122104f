//! Contiguous memory areas: only movable requests borrow an area's memory,
//! `cma_alloc` gets runs back by moving the borrowers out through their owner,
//! its pages answer to `cma_release` alone, owners that refuse, panic or re-enter
//! get a typed error, and every frame is always exactly one of free or owned
//! (by an owner or by `cma_alloc`).

#[path = "support/induced_panic.rs"]
mod induced_panic;
#[path = "support/page_owner.rs"]
mod page_owner;
#[path = "support/rng.rs"]
mod rng;

use std::sync::{Arc, Mutex};

use zonealloc::{
    CmaError, Config, ConfigError, ContigError, FreeError, Gfp, Migratetype, OfflineError, Order,
    Pfn, ZoneAllocator, ZoneConfig, ZoneType,
};

use page_owner::{fill_movable, Owner};

/// 64 MiB: 16384 frames, 32 pageblocks.
const BYTES: u64 = 64 << 20;
const PB: u64 = 512;
/// The area: 16 MiB from frame 8192 (pageblocks 16..24).
const BASE: Pfn = Pfn(8192);
const COUNT: u64 = 4096;

fn in_area(p: Pfn) -> bool {
    (BASE.0..BASE.0 + COUNT).contains(&p.0)
}

fn config() -> Config {
    Config {
        nr_cpus: 2,
        ..Config::with_bytes(BYTES).with_cma("test", BASE, COUNT)
    }
}

fn allocator() -> ZoneAllocator {
    ZoneAllocator::new(config()).unwrap()
}

/// Every frame is free or owned: `owned` by owners, `cma` of them by
/// `cma_alloc`.
fn ledger(za: &ZoneAllocator, owned: u64, cma: u64) {
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.allocated_pages, owned + cma);
    assert_eq!(r.cma_pages, cma);
    assert_eq!(r.free_pages + r.allocated_pages, za.managed_pages());
}

#[test]
fn areas_that_are_not_whole_pageblocks_of_one_zone_are_refused() {
    let bad = |c: Config, why: &str| match ZoneAllocator::new(c) {
        Err(ConfigError::Cma { why: w, .. }) => assert_eq!(w, why),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("accepted an area that is {why}"),
    };
    let base = || Config::with_bytes(BYTES);
    bad(base().with_cma("a", Pfn(100), PB), "not whole pageblocks");
    bad(base().with_cma("a", Pfn(PB), 100), "not whole pageblocks");
    bad(base().with_cma("a", Pfn(PB), 0), "not whole pageblocks");
    bad(base().with_cma("a", Pfn(1 << 20), PB), "outside every zone");
    bad(
        base().with_cma("a", Pfn(31 * PB), 2 * PB),
        "crosses its zone's end",
    );
    bad(
        base()
            .with_cma("a", Pfn(PB), 4 * PB)
            .with_cma("b", Pfn(4 * PB), PB),
        "overlaps another area",
    );
    let mut holed = base();
    holed.nodes[0].zones[0] =
        ZoneConfig::new(ZoneType::Normal, Pfn(0), 16384).with_hole(Pfn(2 * PB + 7), 3);
    bad(holed.with_cma("a", Pfn(2 * PB), PB), "overlaps a hole");
    let e = ConfigError::Cma {
        area: 1,
        why: "overlaps another area",
    };
    assert_eq!(e.to_string(), "CMA area 1: overlaps another area");
}

#[test]
fn only_movable_requests_borrow_the_area() {
    let za = allocator();
    assert_eq!(za.pageblock_migratetype(BASE), Some(Migratetype::Cma));
    assert_eq!(
        za.pageblock_migratetype(Pfn(BASE.0 - 1)),
        Some(Migratetype::Movable)
    );
    let managed = za.managed_pages();
    let mut kernel = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NOWAIT, Order(0)) {
        assert!(!in_area(p), "an unmovable page at {p} in the area");
        kernel.push(p);
    }
    // The unmovable requests stopped at the watermark with the area left out of
    // their free pages (`nr_free_cma`).
    assert!(kernel.len() as u64 <= managed - COUNT);
    let zi = za.zoneinfo().to_string();
    assert!(zi.contains("\n        cma      4096\n"), "{zi}");
    let vm = za.vmstat();
    let free_cma = vm.get("nr_free_cma").unwrap();
    assert!(free_cma > COUNT - 64, "the area is still free: {free_cma}");
    // Movable requests take it.
    let mut movable = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
        movable.push(p);
    }
    // Down to the min watermark, which the area's free pages now count toward.
    let min = za.watermarks(za.zones().next().unwrap().0).unwrap()[0];
    let borrowed = movable.iter().filter(|&&p| in_area(p)).count() as u64;
    assert!(
        borrowed + min + 64 >= COUNT,
        "{borrowed} borrowed, min {min}"
    );
    ledger(&za, (kernel.len() + movable.len()) as u64, 0);
    for p in kernel.into_iter().chain(movable) {
        za.free_pages(p, Order(0)).unwrap();
    }
    ledger(&za, 0, 0);
}

/// One CPU, and 48 of the zone's 64 MiB a CMA area: more than half its free pages
/// are CMA's.
fn big_area() -> ZoneAllocator {
    ZoneAllocator::new(Config {
        nr_cpus: 1,
        ..Config::with_bytes(BYTES).with_cma("big", Pfn(4096), 12288)
    })
    .unwrap()
}

#[test]
fn movable_requests_take_the_area_first_when_it_holds_most_free_memory() {
    // 48 MiB of the 64 are the area: more than half the free pages are CMA's.
    let za = big_area();
    let p = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
    assert!(p.0 >= 4096, "{p} is outside the area");
    let q = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(4)).unwrap();
    assert!(q.0 >= 4096, "{q} is outside the area");
    za.free_pages(p, Order(0)).unwrap();
    za.free_pages(q, Order(4)).unwrap();
    // A small area is used only once the movable memory outside it is gone.
    let small = allocator();
    let r = small.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
    assert!(!in_area(r), "{r} is inside the area");
    small.free_pages(r, Order(0)).unwrap();
}

#[test]
fn cma_alloc_moves_the_borrowers_out() {
    let za = allocator();
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    // Every page movable and owned; then a quarter freed, so that there is room
    // to move to, and the area stays full of borrowed pages.
    fill_movable(&za, &owner, |p| in_area(p) || p.0 % 4 != 0);
    let borrowed = owner
        .pages
        .lock()
        .unwrap()
        .iter()
        .filter(|&&p| in_area(p))
        .count();
    assert!(
        borrowed as u64 > COUNT / 2,
        "{borrowed} pages of the area borrowed"
    );
    let owned = owner.pages.lock().unwrap().len() as u64;
    ledger(&za, owned, 0);
    let run = za.cma_alloc(0, 1024, Order(10)).unwrap();
    assert!(in_area(run) && run.0.is_multiple_of(1024));
    let pages = owner.pages.lock().unwrap();
    assert!(
        !pages.iter().any(|p| (run.0..run.0 + 1024).contains(&p.0)),
        "a borrower is left in the run"
    );
    assert_eq!(pages.len() as u64, owned, "every borrower moved, none lost");
    drop(pages);
    ledger(&za, owned, 1024);
    let info = za.cma_area_info(0).unwrap();
    assert_eq!(
        (info.name.as_str(), info.base, info.count),
        ("test", BASE, COUNT)
    );
    assert_eq!((info.allocated, info.alloc_pages_success), (1024, 1024));
    assert!(za.compaction_stats().pgmigrate_success > 0);
    // The kernel's formats of a kernel built with CMA.
    let vm = za.vmstat();
    assert_eq!(vm.get("cma_alloc_success"), Some(1));
    assert_eq!(vm.get("cma_alloc_fail"), Some(0));
    let pti = za.pagetypeinfo().to_string();
    assert!(pti.contains("type          CMA "), "{pti}");
    assert!(
        pti.contains("   HighAtomic          CMA      Isolate "),
        "{pti}"
    );
    // The blocks row reads back by column: the area's 8 pageblocks are CMA's.
    let row: Vec<u64> = pti
        .lines()
        .skip_while(|l| !l.starts_with("Number of blocks type"))
        .nth(1)
        .unwrap()
        .split_whitespace()
        .skip(4)
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(row, [0, 24, 0, 0, 8, 0], "{pti}");
    za.cma_release(0, run, 1024).unwrap();
    ledger(&za, owned, 0);
    assert_eq!(za.cma_area_info(0).unwrap().release_pages_success, 1024);
}

#[test]
fn without_an_area_the_formats_are_those_of_a_kernel_without_cma() {
    let za = ZoneAllocator::new(Config::with_bytes(BYTES)).unwrap();
    let pti = za.pagetypeinfo().to_string();
    assert!(!pti.contains("CMA"), "{pti}");
    assert!(za.vmstat().get("cma_alloc_success").is_none());
    assert_eq!(za.vmstat().get("nr_free_cma"), Some(0));
    assert_eq!(za.cma_alloc(0, 1, Order(0)), Err(CmaError::NoArea(0)));
    assert_eq!(za.nr_cma_areas(), 0);
}

#[test]
fn cma_pages_answer_to_cma_release_alone() {
    let za = allocator();
    let run = za.cma_alloc(0, 16, Order(0)).unwrap();
    let digest = za.state_digest();
    assert_eq!(za.free_pages(run, Order(0)), Err(FreeError::Busy(run)));
    assert_eq!(za.put_page(run), Err(FreeError::Busy(run)));
    assert_eq!(za.get_page(run), Err(FreeError::Busy(run)));
    assert_eq!(za.free_contig_range(run, 16), Err(FreeError::Busy(run)));
    assert_eq!(za.free_pages_bulk(&[run]), Err(FreeError::Busy(run)));
    assert_eq!(za.split_page(run, Order(0)), Err(FreeError::Busy(run)));
    // Releases that do not match what was handed out.
    assert_eq!(za.cma_release(1, run, 16), Err(CmaError::NoArea(1)));
    assert_eq!(za.cma_release(0, run, 0), Err(CmaError::InvalidRequest));
    assert_eq!(
        za.cma_release(0, Pfn(BASE.0 - 1), 2),
        Err(CmaError::InvalidRequest)
    );
    assert_eq!(
        za.cma_release(0, Pfn(BASE.0 + COUNT - 1), 2),
        Err(CmaError::InvalidRequest)
    );
    assert_eq!(
        za.cma_release(0, run, 17),
        Err(CmaError::NotAllocated(run.add(16)))
    );
    assert_eq!(za.state_digest(), digest, "refused calls changed nothing");
    // In part, then the rest; twice is refused.
    za.cma_release(0, run, 4).unwrap();
    assert_eq!(za.cma_release(0, run, 4), Err(CmaError::NotAllocated(run)));
    za.cma_release(0, run.add(4), 12).unwrap();
    ledger(&za, 0, 0);
}

#[test]
fn runs_are_aligned_and_the_area_runs_out() {
    let za = allocator();
    assert_eq!(za.cma_alloc(0, 0, Order(0)), Err(CmaError::InvalidRequest));
    assert_eq!(
        za.cma_alloc(0, COUNT + 1, Order(0)),
        Err(CmaError::InvalidRequest)
    );
    assert_eq!(za.cma_alloc(0, 1, Order(64)), Err(CmaError::InvalidRequest));
    let mut runs = Vec::new();
    loop {
        match za.cma_alloc(0, 300, Order(9)) {
            Ok(p) => {
                assert!(in_area(p) && in_area(p.add(299)) && p.0 % 512 == 0);
                runs.push(p);
            }
            Err(e) => {
                assert_eq!(e, CmaError::NoSpace);
                break;
            }
        }
    }
    assert_eq!(runs.len(), 8, "one run per 512-aligned start");
    // The gaps are still free and had at order 0.
    let gap = za.cma_alloc(0, 212, Order(0)).unwrap();
    assert_eq!(gap, runs[0].add(300));
    ledger(&za, 0, 8 * 300 + 212);
    assert_eq!(za.vmstat().get("cma_alloc_fail"), Some(1));
    for p in runs {
        za.cma_release(0, p, 300).unwrap();
    }
    za.cma_release(0, gap, 212).unwrap();
    ledger(&za, 0, 0);
    // The whole area at once, merged back.
    let all = za.cma_alloc(0, COUNT, Order(0)).unwrap();
    assert_eq!(all, BASE);
    za.cma_release(0, all, COUNT).unwrap();
}

#[test]
fn busy_runs_are_passed_over_and_owners_that_refuse_or_panic_get_an_error() {
    // A run with a page that cannot move is passed over.
    let za = allocator();
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    fill_movable(&za, &owner, |p| in_area(p) || p.0 % 2 == 0);
    let owned = owner.pages.lock().unwrap().len() as u64;
    // Without a migrator: no run of a full area can be had.
    za.set_migrator(None);
    assert_eq!(za.cma_alloc(0, 512, Order(9)), Err(CmaError::NoMigrator));
    ledger(&za, owned, 0);
    za.set_migrator(Some(owner.clone()));
    let run = za.cma_alloc(0, 512, Order(9)).unwrap();
    ledger(&za, owned, 512);
    za.cma_release(0, run, 512).unwrap();

    for refuse in [true, false] {
        let za = allocator();
        let owner = Arc::new(Owner {
            refuse,
            panic_at: (!refuse).then_some(3),
            ..Owner::default()
        });
        za.set_migrator(Some(owner.clone()));
        fill_movable(&za, &owner, |p| in_area(p) || p.0 % 2 == 0);
        let owned = owner.pages.lock().unwrap().len() as u64;
        let r = za.cma_alloc(0, 512, Order(9));
        if refuse {
            // Every aligned run tried, each refused.
            assert!(matches!(r, Err(CmaError::OwnerRefused(_))), "{r:?}");
            assert_eq!(*owner.calls.lock().unwrap(), 8);
        } else {
            assert!(matches!(r, Err(CmaError::OwnerPanicked(_))), "{r:?}");
            assert_eq!(
                *owner.calls.lock().unwrap(),
                3,
                "the call ended at the panic"
            );
        }
        assert_eq!(owner.pages.lock().unwrap().len() as u64, owned);
        ledger(&za, owned, 0);
        assert_eq!(za.cma_area_info(0).unwrap().alloc_pages_fail, 512);
        for p in owner.pages.lock().unwrap().drain() {
            za.free_pages(p, Order(0)).unwrap();
        }
        ledger(&za, 0, 0);
    }
}

#[test]
fn an_owner_that_reenters_is_told_so() {
    let za = Arc::new(
        ZoneAllocator::new(Config {
            nr_cpus: 2,
            ..config().with_cma("other", Pfn(28 * PB), 2 * PB)
        })
        .unwrap(),
    );
    // Each move first calls `cma_alloc` on the area and records the answer; an
    // allocator walk from inside the callback is fine too.
    let answers = Arc::new(Mutex::new(Vec::new()));
    let (weak, seen) = (Arc::downgrade(&za), answers.clone());
    let owner = Arc::new(Owner {
        on_call: Some(Box::new(move || {
            if let Some(za) = weak.upgrade() {
                seen.lock().unwrap().push(za.cma_alloc(0, 1, Order(0)));
                za.check_invariants().unwrap();
            }
        })),
        ..Owner::default()
    });
    za.set_migrator(Some(owner.clone()));
    let mut held = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
        held.push(p);
    }
    for p in held {
        if in_area(p) {
            owner.pages.lock().unwrap().insert(p);
        } else {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    let owned = owner.pages.lock().unwrap().len() as u64;
    let run = za.cma_alloc(0, 64, Order(0)).unwrap();
    let answers = answers.lock().unwrap().clone();
    assert!(!answers.is_empty());
    assert!(
        answers.iter().all(|a| *a == Err(CmaError::Reentered)),
        "{answers:?}"
    );
    // Outside a callback the same call runs.
    let one = za.cma_alloc(0, 1, Order(0)).unwrap();
    ledger(&za, owned, 65);
    za.cma_release(0, one, 1).unwrap();
    za.cma_release(0, run, 64).unwrap();
    ledger(&za, owned, 0);
}

#[test]
fn offlining_and_alloc_contig_range_leave_the_area_alone() {
    let za = allocator();
    assert_eq!(
        za.offline_pages(BASE, PB),
        Err(OfflineError::NotMovable(BASE))
    );
    assert_eq!(
        za.offline_pages(Pfn(BASE.0 - PB), 2 * PB),
        Err(OfflineError::NotMovable(BASE))
    );
    assert_eq!(
        za.alloc_contig_range(Pfn(BASE.0 + 10), Pfn(BASE.0 + 20)),
        Err(ContigError::Busy(Pfn(BASE.0 + 10)))
    );
    assert_eq!(
        za.alloc_contig_range(Pfn(BASE.0 - 10), Pfn(BASE.0 + 20)),
        Err(ContigError::Busy(BASE))
    );
    // `alloc_contig_pages` finds a run outside.
    let p = za.alloc_contig_pages(PB * 2, Gfp::KERNEL, 0).unwrap();
    assert!(!in_area(p) && !in_area(p.add(PB * 2 - 1)));
    za.free_contig_range(p, PB * 2).unwrap();
    // Next to the area, offlining works.
    za.offline_pages(Pfn(BASE.0 - PB), PB).unwrap();
    za.online_pages(Pfn(BASE.0 - PB), PB).unwrap();
    ledger(&za, 0, 0);
}

#[test]
fn cma_alloc_beside_allocating_threads_loses_nothing() {
    let za = Arc::new(allocator());
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let (za, stop, owner) = (za.clone(), stop.clone(), owner.clone());
            std::thread::spawn(move || {
                let mut rng = rng::Rng::new(t + 11);
                let mut kernel: Vec<Pfn> = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if rng.chance(50) {
                        let movable = rng.chance(70);
                        let gfp = if movable {
                            Gfp::HIGHUSER_MOVABLE
                        } else {
                            Gfp::KERNEL
                        };
                        if let Ok(p) = za.alloc_pages(gfp | Gfp::NOWAIT, Order(0)) {
                            if movable {
                                owner.pages.lock().unwrap().insert(p);
                            } else {
                                assert!(!in_area(p), "unmovable page {p} in the area");
                                kernel.push(p);
                            }
                        }
                    } else if rng.chance(50) {
                        if let Some(p) = kernel.pop() {
                            za.free_pages(p, Order(0)).unwrap();
                        }
                    } else {
                        // Free one of the owner's pages, wherever it is now.
                        let mut pages = owner.pages.lock().unwrap();
                        let p = pages.iter().next().copied();
                        if let Some(p) = p {
                            pages.remove(&p);
                            drop(pages);
                            za.free_pages(p, Order(0)).unwrap();
                        }
                    }
                }
                for p in kernel {
                    za.free_pages(p, Order(0)).unwrap();
                }
            })
        })
        .collect();
    let mut got = 0;
    let mut rng = rng::Rng::new(3);
    // Until 20 runs were had (the workers keep running meanwhile), or a bound.
    for _ in 0..2000 {
        if got >= 20 {
            break;
        }
        let count = 1 + rng.below(512);
        match za.cma_alloc(0, count, Order(rng.below(10) as u8)) {
            Ok(p) => {
                got += 1;
                let pages = owner.pages.lock().unwrap();
                assert!(!pages.iter().any(|q| (p.0..p.0 + count).contains(&q.0)));
                drop(pages);
                za.cma_release(0, p, count).unwrap();
            }
            Err(CmaError::Busy(_) | CmaError::NoMemory(_) | CmaError::OwnerRefused(_)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(got > 0, "no run was had");
    let owned = owner.pages.lock().unwrap().len() as u64;
    ledger(&za, owned, 0);
}

mod property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Allocate order 0, movable (the owner's) or not.
        Alloc(bool),
        Free(usize),
        Cma(u64, u8),
        Release(usize, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => any::<bool>().prop_map(Op::Alloc),
            3 => any::<usize>().prop_map(Op::Free),
            1 => (1u64..1500, 0u8..11).prop_map(|(n, a)| Op::Cma(n, a)),
            1 => (any::<usize>(), any::<bool>()).prop_map(|(i, half)| Op::Release(i, half)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// Whatever the mix: no unmovable page lies in the area, a run
        /// `cma_alloc` hands out is aligned, inside the area and clear of the
        /// owner's pages, and every frame is exactly one of free, the owner's,
        /// an unmovable page's or `cma_alloc`'s.
        #[test]
        fn every_frame_is_free_or_owned_once(ops in prop::collection::vec(op(), 1..120)) {
            let za = allocator();
            let owner = Arc::new(Owner::default());
            za.set_migrator(Some(owner.clone()));
            let mut kernel: Vec<Pfn> = Vec::new();
            let mut runs: Vec<(Pfn, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(movable) => {
                        for _ in 0..64 {
                            let gfp = if movable { Gfp::HIGHUSER_MOVABLE } else { Gfp::KERNEL };
                            let Ok(p) = za.alloc_pages(gfp | Gfp::NOWAIT, Order(0)) else { break };
                            if movable {
                                owner.pages.lock().unwrap().insert(p);
                            } else {
                                prop_assert!(!in_area(p));
                                kernel.push(p);
                            }
                        }
                    }
                    Op::Free(i) => {
                        let mut pages = owner.pages.lock().unwrap();
                        for k in 0..32 {
                            if (i + k) % 2 == 0 && !kernel.is_empty() {
                                let p = kernel.swap_remove((i + k) % kernel.len());
                                za.free_pages(p, Order(0)).unwrap();
                            } else if let Some(&p) = pages.iter().nth((i + k) % pages.len().max(1)) {
                                pages.remove(&p);
                                za.free_pages(p, Order(0)).unwrap();
                            }
                        }
                    }
                    Op::Cma(n, a) => match za.cma_alloc(0, n, Order(a)) {
                        Ok(p) => {
                            prop_assert!(in_area(p) && in_area(p.add(n - 1)) && p.0 % (1 << a) == 0);
                            let pages = owner.pages.lock().unwrap();
                            prop_assert!(!pages.iter().any(|q| (p.0..p.0 + n).contains(&q.0)));
                            runs.push((p, n));
                        }
                        Err(CmaError::NoSpace | CmaError::NoMemory(_) | CmaError::Busy(_)) => {}
                        Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    },
                    Op::Release(i, half) => {
                        if !runs.is_empty() {
                            let k = i % runs.len();
                            let (p, n) = runs[k];
                            if half && n > 1 {
                                za.cma_release(0, p, n / 2).unwrap();
                                runs[k] = (p.add(n / 2), n - n / 2);
                            } else {
                                za.cma_release(0, p, n).unwrap();
                                runs.swap_remove(k);
                            }
                        }
                    }
                }
                let cma: u64 = runs.iter().map(|&(_, n)| n).sum();
                let owned = owner.pages.lock().unwrap().len() as u64 + kernel.len() as u64;
                ledger(&za, owned, cma);
            }
        }
    }
}

#[test]
fn over_an_arena_the_borrowers_bytes_move_with_them() {
    use zonealloc::ArenaOptions;
    let config = Config {
        nr_cpus: 1,
        ..Config::with_bytes(16 << 20).with_cma("arena", Pfn(2048), 1024)
    };
    let za = ZoneAllocator::with_arena(config, ArenaOptions::default()).unwrap();
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    let mut all = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(0)) {
        all.push(p);
    }
    for p in all {
        if p.0 % 2 == 0 {
            owner.pages.lock().unwrap().insert(p);
        } else {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    let pages: Vec<Pfn> = owner.pages.lock().unwrap().iter().copied().collect();
    for &p in &pages {
        let a = za.page_address(p).unwrap().as_ptr();
        // SAFETY: the arena maps a page at each frame's address, and this
        // allocated page is the owner's alone.
        unsafe { a.write_bytes((p.0 % 251) as u8, 4096) };
    }
    // Remember which byte each owned page holds, by its frame now.
    let tag: std::collections::HashMap<Pfn, u8> =
        pages.iter().map(|&p| (p, (p.0 % 251) as u8)).collect();
    let run = za.cma_alloc(0, 1024, Order(0)).unwrap();
    assert_eq!(run, Pfn(2048));
    let moved: Vec<Pfn> = owner.pages.lock().unwrap().iter().copied().collect();
    assert_eq!(moved.len(), pages.len());
    let mut seen: Vec<u8> = moved
        .iter()
        .map(|&p| {
            assert!(!(2048..3072).contains(&p.0), "{p} left in the run");
            // SAFETY: as above.
            unsafe { *za.page_address(p).unwrap().as_ptr().add(4095) }
        })
        .collect();
    let mut want: Vec<u8> = tag.values().copied().collect();
    seen.sort_unstable();
    want.sort_unstable();
    assert_eq!(seen, want, "every page's bytes went with it");
    za.cma_release(0, run, 1024).unwrap();
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!((r.allocated_pages, r.cma_pages), (pages.len() as u64, 0));
}

#[test]
fn an_idle_area_does_not_end_compaction_for_an_unmovable_request() {
    // Every other page outside the area held by the owner, the area free: no
    // order-4 block outside it. Free CMA blocks must not count as success for a
    // request that may not take them.
    let za = allocator();
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    fill_movable(&za, &owner, |p| !in_area(p) && p.0 % 2 == 0);
    // Whatever free blocks of order 4 or more the fill left outside the area
    // (below the watermark it stopped at) are taken, without compacting.
    za.drain_all_pages();
    let mut held = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::NOWAIT, Order(4)) {
        assert!(!in_area(p));
        held.push(p);
    }
    assert_eq!(za.compaction_stats().compact_stall, 0);
    let p = za.alloc_pages(Gfp::KERNEL, Order(4)).unwrap();
    assert!(!in_area(p), "{p}");
    let c = za.compaction_stats();
    assert!(c.compact_success >= 1 && c.pgmigrate_success > 0, "{c:?}");
    za.free_pages(p, Order(4)).unwrap();
    for q in held {
        za.free_pages(q, Order(4)).unwrap();
    }
    let owned = owner.pages.lock().unwrap().len() as u64;
    ledger(&za, owned, 0);
}

#[test]
fn bulk_movable_allocations_borrow_the_area_and_kswapd_leaves_it_out() {
    // 48 of the 64 MiB are the area: a movable bulk request takes it first.
    let za = big_area();
    let mut pages = vec![None; 64];
    assert_eq!(za.alloc_pages_bulk(Gfp::HIGHUSER_MOVABLE, &mut pages), 64);
    assert!(pages.iter().flatten().all(|p| p.0 >= 4096));
    // Unmovable pages down to the watermark outside the area: the node is short
    // for kswapd although the area is nearly all free.
    let mut kernel = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NOWAIT, Order(0)) {
        kernel.push(p);
    }
    assert!(kernel.iter().all(|p| p.0 < 4096));
    assert!(za.alloc_pages(Gfp::KERNEL, Order(0)).is_err());
    assert!(za.kswapd_pending(0), "kswapd woken with the area free");
    for p in kernel.into_iter().chain(pages.into_iter().flatten()) {
        za.free_pages(p, Order(0)).unwrap();
    }
}
