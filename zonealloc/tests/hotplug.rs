//! Memory offlining and onlining: a range leaves its zone (its movable blocks
//! moved out through their owner) and comes back; ranges that cannot go are
//! refused with nothing changed; owners that refuse or panic leave every frame
//! free or owned.

#[path = "support/induced_panic.rs"]
mod induced_panic;
#[path = "support/page_owner.rs"]
mod page_owner;
#[path = "support/rng.rs"]
mod rng;

use std::sync::Arc;

use zonealloc::{Config, FreeError, Gfp, OfflineError, Order, Pfn, ZoneAllocator};

use page_owner::{fill_movable, Owner};

/// 64 MiB: 16384 frames, 32 pageblocks.
const BYTES: u64 = 64 << 20;
const PB: u64 = 512;

fn allocator() -> ZoneAllocator {
    ZoneAllocator::new(Config {
        nr_cpus: 2,
        ..Config::with_bytes(BYTES)
    })
    .unwrap()
}

/// Every frame is free, offline, or one of `owned`.
fn ledger(za: &ZoneAllocator, owned: u64, offline: u64) {
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.allocated_pages, owned);
    assert_eq!(r.offline_pages, offline);
    assert_eq!(r.free_pages + r.allocated_pages, za.managed_pages());
}

#[test]
fn a_free_range_goes_offline_and_comes_back() {
    let za = allocator();
    let managed = za.managed_pages();
    let buddy = za.buddyinfo();
    let marks = za.watermarks(za.zones().next().unwrap().0).unwrap();
    let start = Pfn(8 * PB);
    za.offline_pages(start, 4 * PB).unwrap();
    assert_eq!(za.managed_pages(), managed - 4 * PB);
    ledger(&za, 0, 4 * PB);
    let zi = za.zoneinfo();
    assert_eq!(zi.zones[0].present, managed - 4 * PB);
    assert_eq!(zi.zones[0].managed, managed - 4 * PB);
    assert_eq!(za.free_pages(start, Order(0)), Err(FreeError::Hole(start)));
    // No allocation reaches the range.
    let mut got = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NOWAIT, Order(0)) {
        assert!(
            !(start.0..start.0 + 4 * PB).contains(&p.0),
            "{p} is offline"
        );
        got.push(p);
    }
    for p in got {
        za.free_pages(p, Order(0)).unwrap();
    }
    assert_eq!(
        za.offline_pages(start, PB),
        Err(OfflineError::Hole(start)),
        "offline twice"
    );
    // The smaller zone's watermarks are recomputed from its managed pages.
    let id = za.zones().next().unwrap().0;
    assert!(
        za.watermarks(id).unwrap()[2] < marks[2],
        "high watermark lowered"
    );
    za.online_pages(start, 4 * PB).unwrap();
    assert_eq!(za.watermarks(id).unwrap(), marks, "and restored");
    assert_eq!(
        za.online_pages(start, PB),
        Err(OfflineError::NotOffline(start))
    );
    assert_eq!(za.managed_pages(), managed);
    ledger(&za, 0, 0);
    za.drain_all_pages();
    assert_eq!(za.buddyinfo(), buddy, "merged back whole");
}

#[test]
fn movable_blocks_are_moved_out_first() {
    let za = allocator();
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    // One page in eight kept: every pageblock holds some.
    fill_movable(&za, &owner, |p| p.0 % 8 == 0);
    let owned = owner.pages.lock().unwrap().len() as u64;
    let start = Pfn(16 * PB);
    let in_range = |p: &Pfn| (start.0..start.0 + 2 * PB).contains(&p.0);
    assert!(owner.pages.lock().unwrap().iter().any(in_range));
    za.offline_pages(start, 2 * PB).unwrap();
    assert!(!owner.pages.lock().unwrap().iter().any(in_range));
    assert_eq!(owner.pages.lock().unwrap().len() as u64, owned);
    assert!(za.compaction_stats().pgmigrate_success >= 2 * PB / 8);
    ledger(&za, owned, 2 * PB);
    za.online_pages(start, 2 * PB).unwrap();
    ledger(&za, owned, 0);
    for p in owner.pages.lock().unwrap().drain() {
        za.free_pages(p, Order(0)).unwrap();
    }
    ledger(&za, 0, 0);
}

/// Split blocks whose pages have no word of their own yet (`split_page` records
/// the split in the head alone) move out page by page, each page a block of its
/// own, and every page stays the owner's.
#[test]
fn lazily_split_blocks_are_moved_out_page_by_page() {
    let za = allocator();
    let owner = Arc::new(Owner::default());
    za.set_migrator(Some(owner.clone()));
    let mut blocks = Vec::new();
    while let Ok(b) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NOWAIT, Order(3)) {
        za.split_page(b, Order(3)).unwrap();
        blocks.push(b);
    }
    // One block in four kept, the rest freed whole.
    for (i, &b) in blocks.iter().enumerate() {
        if i % 4 == 0 {
            owner.pages.lock().unwrap().extend((0..8).map(|k| b.add(k)));
        } else {
            za.free_contig_range(b, 8).unwrap();
        }
    }
    let owned = owner.pages.lock().unwrap().len() as u64;
    let start = Pfn(16 * PB);
    let in_range = |p: &Pfn| (start.0..start.0 + 2 * PB).contains(&p.0);
    let moving = owner
        .pages
        .lock()
        .unwrap()
        .iter()
        .filter(|p| in_range(p))
        .count() as u64;
    assert!(moving >= 8);
    za.offline_pages(start, 2 * PB).unwrap();
    assert!(!owner.pages.lock().unwrap().iter().any(in_range));
    assert_eq!(owner.pages.lock().unwrap().len() as u64, owned);
    assert!(za.compaction_stats().pgmigrate_success >= moving);
    ledger(&za, owned, 2 * PB);
    za.online_pages(start, 2 * PB).unwrap();
    for p in owner.pages.lock().unwrap().drain() {
        za.free_pages(p, Order(0)).unwrap();
    }
    ledger(&za, 0, 0);
}

#[test]
fn ranges_that_cannot_go_are_refused_with_nothing_changed() {
    let za = allocator();
    let u = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let ub = Pfn(u.0 & !(PB - 1));
    let d = za.state_digest();
    // Bad ranges.
    assert_eq!(
        za.offline_pages(Pfn(3), PB),
        Err(OfflineError::InvalidRange)
    );
    assert_eq!(
        za.offline_pages(Pfn(0), 100),
        Err(OfflineError::InvalidRange)
    );
    assert_eq!(za.offline_pages(Pfn(0), 0), Err(OfflineError::InvalidRange));
    assert_eq!(
        za.offline_pages(Pfn(31 * PB), 2 * PB),
        Err(OfflineError::CrossesZone(Pfn(32 * PB)))
    );
    assert_eq!(
        za.offline_pages(Pfn(1 << 40), PB),
        Err(OfflineError::InvalidRange)
    );
    // An unmovable page.
    assert_eq!(za.offline_pages(ub, PB), Err(OfflineError::NotMovable(u)));
    assert_eq!(za.state_digest(), d, "refusals changed nothing");
    // A movable page and no migrator.
    let m = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
    let mb = Pfn(m.0 & !(PB - 1));
    let d2 = za.state_digest();
    assert_eq!(za.offline_pages(mb, PB), Err(OfflineError::NoMigrator));
    assert_eq!(za.state_digest(), d2);
    za.free_pages(m, Order(0)).unwrap();
    // A guarded block cannot move either.
    let g = za.alloc_block(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
    let gb = Pfn(g.pfn().0 & !(PB - 1));
    let d3 = za.state_digest();
    assert_eq!(
        za.offline_pages(gb, PB),
        Err(OfflineError::NotMovable(g.pfn()))
    );
    assert_eq!(za.state_digest(), d3);
    drop(g);
    za.free_pages(u, Order(0)).unwrap();
    ledger(&za, 0, 0);
}

#[test]
fn an_owner_that_refuses_or_panics_gets_the_range_back() {
    for panic in [false, true] {
        let za = allocator();
        let owner = Arc::new(Owner {
            refuse: !panic,
            panic_at: panic.then_some(3),
            ..Owner::default()
        });
        za.set_migrator(Some(owner.clone()));
        fill_movable(&za, &owner, |p| p.0 % 8 == 0);
        let owned = owner.pages.lock().unwrap().len() as u64;
        let managed = za.managed_pages();
        let start = Pfn(4 * PB);
        let e = za.offline_pages(start, 2 * PB).unwrap_err();
        assert!(
            matches!(
                e,
                OfflineError::OwnerRefused(_) | OfflineError::OwnerPanicked(_)
            ),
            "{e:?}"
        );
        assert_eq!(za.managed_pages(), managed);
        ledger(&za, owned, 0);
        // Nothing is left isolated: the range serves allocations again.
        for p in owner.pages.lock().unwrap().drain() {
            za.free_pages(p, Order(0)).unwrap();
        }
        za.set_migrator(None);
        za.offline_pages(start, 2 * PB).unwrap();
        za.online_pages(start, 2 * PB).unwrap();
        ledger(&za, 0, 0);
    }
}

#[test]
fn offlining_beside_allocating_threads_loses_nothing() {
    let za = Arc::new(allocator());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (za, stop) = (za.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = rng::Rng::new(t + 7);
                let mut held: Vec<(Pfn, Order)> = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if held.len() < 128 && rng.chance(55) {
                        let o = Order(rng.below(4) as u8);
                        if let Ok(p) = za.alloc_pages(Gfp::KERNEL, o) {
                            held.push((p, o));
                        }
                    } else if let Some((p, o)) = held.pop() {
                        za.free_pages(p, o).unwrap();
                    }
                }
                for (p, o) in held {
                    za.free_pages(p, o).unwrap();
                }
            })
        })
        .collect();
    let mut went = 0;
    for i in 0..200u64 {
        let start = Pfn((i % 30) * PB);
        match za.offline_pages(start, 2 * PB) {
            Ok(()) => {
                went += 1;
                za.online_pages(start, 2 * PB).unwrap();
            }
            Err(OfflineError::NotMovable(_) | OfflineError::Busy(_)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(went > 0, "some range went offline");
    ledger(&za, 0, 0);
}

mod property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Allocate order `o`, movable (owned through the owner) or not.
        Alloc(u8, bool),
        Free(usize),
        Offline(u64, u64),
        Online(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, any::<bool>()).prop_map(|(o, m)| Op::Alloc(o, m)),
            3 => any::<usize>().prop_map(Op::Free),
            1 => (0u64..32, 1u64..4).prop_map(|(b, n)| Op::Offline(b, n)),
            1 => any::<usize>().prop_map(Op::Online),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever the mix of allocations, frees, offlinings and onlinings: an
        /// offlining succeeds only with no unmovable block in its range and leaves
        /// no owned block there, a refused one changes no frame's owner, and every
        /// frame is always exactly one of free, owned or offline.
        #[test]
        fn every_frame_is_free_owned_or_offline(ops in prop::collection::vec(op(), 1..80)) {
            let za = allocator();
            let owner = Arc::new(Owner::default());
            za.set_migrator(Some(owner.clone()));
            let mut unmovable: Vec<(Pfn, Order)> = Vec::new();
            let mut offline: Vec<(Pfn, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(o, movable) => {
                        if movable {
                            if let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)) {
                                owner.pages.lock().unwrap().insert(p);
                            }
                        } else if let Ok(p) = za.alloc_pages(Gfp::KERNEL, Order(o)) {
                            unmovable.push((p, Order(o)));
                        }
                    }
                    Op::Free(i) => {
                        let mut pages = owner.pages.lock().unwrap();
                        if i % 2 == 0 && !unmovable.is_empty() {
                            let (p, o) = unmovable.swap_remove(i % unmovable.len());
                            za.free_pages(p, o).unwrap();
                        } else if let Some(&p) = pages.iter().nth(i % pages.len().max(1)) {
                            pages.remove(&p);
                            za.free_pages(p, Order(0)).unwrap();
                        }
                    }
                    Op::Offline(b, n) => {
                        let start = Pfn(b * PB);
                        let nr = n * PB;
                        let hit = |p: Pfn, o: Order| p.0 < start.0 + nr && start.0 < p.0 + o.nr_pages();
                        let blocked = unmovable.iter().any(|&(p, o)| hit(p, o));
                        match za.offline_pages(start, nr) {
                            Ok(()) => {
                                prop_assert!(!blocked, "offlined over an unmovable block");
                                let pages = owner.pages.lock().unwrap();
                                prop_assert!(!pages.iter().any(|&p| hit(p, Order(0))));
                                offline.push((start, nr));
                            }
                            Err(OfflineError::NotMovable(_)) => prop_assert!(blocked),
                            Err(OfflineError::CrossesZone(_) | OfflineError::Hole(_)) => {}
                            Err(e) => prop_assert!(false, "unexpected {e:?}"),
                        }
                    }
                    Op::Online(i) => {
                        if !offline.is_empty() {
                            let (s, n) = offline.swap_remove(i % offline.len());
                            za.online_pages(s, n).unwrap();
                        }
                    }
                }
                let owned = owner.pages.lock().unwrap().len() as u64
                    + unmovable.iter().map(|&(_, o)| o.nr_pages()).sum::<u64>();
                let off: u64 = offline.iter().map(|&(_, n)| n).sum();
                ledger(&za, owned, off);
            }
        }
    }
}
