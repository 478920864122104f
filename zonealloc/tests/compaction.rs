//! Compaction: movable blocks moved through their owner so that high orders come back
//! while memory is in use; the isolate-migrate-putback protocol at the public API;
//! suitability, deferral and proactive compaction.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use zonealloc::*;

#[path = "support/settled.rs"]
mod support;
use support::settled;

/// 16 MiB, one zone of 4096 frames: eight pageblocks of 512.
const FRAMES: u64 = 4096;

fn config() -> Config {
    Config {
        nr_cpus: 1,
        min_free_kbytes: Some(0),
        ..Config::single_zone(ZoneType::Normal, Pfn(0), FRAMES)
    }
}

fn arena() -> ZoneAllocator<Arena> {
    ZoneAllocator::with_arena(config(), ArenaOptions::default()).unwrap()
}

/// The owner of the test's movable pages: pfn -> the byte its page is filled with.
#[derive(Default)]
struct Owner {
    live: Mutex<HashMap<u64, u8>>,
}

impl Migrate for Owner {
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        let mut live = self.live.lock().unwrap();
        let Some(tag) = live.remove(&m.source().0) else {
            return MigrateOutcome::Refused;
        };
        m.copy_contents();
        live.insert(m.target().0, tag);
        MigrateOutcome::Moved
    }
}

/// An owner that never lets a block move.
struct Pinned;
impl Migrate for Pinned {}

fn fill(za: &ZoneAllocator<Arena>, pfn: u64, byte: u8) {
    let p = za.page_address(Pfn(pfn)).unwrap();
    // SAFETY: the arena maps 4 KiB at every frame's address for the allocator's
    // life, and the test owns the page (allocated, in the owner's table).
    unsafe { std::ptr::write_bytes(p.as_ptr(), byte, 4096) };
}

fn page(za: &ZoneAllocator<Arena>, pfn: u64) -> &[u8] {
    let p = za.page_address(Pfn(pfn)).unwrap();
    // SAFETY: as in `fill`; nothing writes the page while the slice lives.
    unsafe { std::slice::from_raw_parts(p.as_ptr(), 4096) }
}

/// Fills the zone with movable order-0 pages, each filled with its tag, and frees
/// three of every four: every pageblock keeps 128 pages, so no order-9 block is
/// free while 3072 frames are. Returns the owner holding the rest.
fn fragment<B: Backend>(za: &ZoneAllocator<B>, mut fill_tag: impl FnMut(u64, u8)) -> Owner {
    let owner = Owner::default();
    let mut got = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
        got.push(p);
    }
    za.drain_all_pages();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
        got.push(p);
    }
    assert_eq!(got.len() as u64, FRAMES, "the whole zone allocated");
    let mut live = owner.live.lock().unwrap();
    for p in got {
        if p.0 % 4 == 0 {
            let tag = (p.0 % 251) as u8 + 1;
            fill_tag(p.0, tag);
            live.insert(p.0, tag);
        } else {
            za.free_pages(p, Order(0)).unwrap();
        }
    }
    drop(live);
    za.drain_all_pages();
    owner
}

#[track_caller]
fn contents_intact(za: &ZoneAllocator<Arena>, owner: &Owner) {
    let live = owner.live.lock().unwrap();
    assert_eq!(live.len() as u64, FRAMES / 4);
    for (&p, &tag) in live.iter() {
        assert_eq!(
            za.frame_state(Pfn(p)),
            Some(FrameState::Allocated {
                order: Order(0),
                refcount: 1
            })
        );
        assert!(
            page(za, p).iter().all(|&b| b == tag),
            "page {p} lost its contents"
        );
    }
}

fn free_all<B: Backend>(za: &ZoneAllocator<B>, owner: &Owner) {
    for (&p, _) in owner.live.lock().unwrap().iter() {
        za.free_pages(Pfn(p), Order(0)).unwrap();
    }
}

#[test]
fn order9_fails_without_compaction_and_succeeds_with_it_contents_moved_intact() {
    let za = arena();
    let owner = Arc::new(fragment(&za, |p, t| fill(&za, p, t)));
    assert!(za.nr_free_pages() >= 3 * FRAMES / 4 - 8);
    let thp = Gfp::HIGHUSER_MOVABLE | Gfp::COMP;
    // No migrator registered: no direct compaction, the request fails.
    assert!(za.alloc_pages(thp, Order(9)).is_err());
    assert_eq!(za.compaction_stats().compact_stall, 0);

    za.set_migrator(Some(owner.clone()));
    let huge = za
        .alloc_pages(thp, Order(9))
        .expect("direct compaction made a block");
    za.set_migrator(None);

    let s = za.compaction_stats();
    assert_eq!(
        (s.compact_stall, s.compact_success, s.compact_fail),
        (1, 1, 0)
    );
    // One pageblock's 128 pages had to move, at least.
    assert!(s.pgmigrate_success >= 128, "{s:?}");
    assert_eq!(s.pgmigrate_fail, 0);
    assert!(
        s.compact_migrate_scanned >= 512 && s.compact_free_scanned > 0,
        "{s:?}"
    );
    assert!(
        s.compact_isolated >= 2 * s.pgmigrate_success,
        "sources and targets: {s:?}"
    );
    let vm = za.vmstat();
    assert_eq!(vm.get("compact_success"), Some(1));
    assert_eq!(vm.get("pgmigrate_success"), Some(s.pgmigrate_success));
    za.check_invariants().unwrap();
    contents_intact(&za, &owner);

    za.free_pages(huge, Order(9)).unwrap();
    free_all(&za, &owner);
    settled(&za);
}

#[test]
fn full_compaction_packs_movable_pages_at_the_zone_end() {
    let za = arena();
    let owner = fragment(&za, |p, t| fill(&za, p, t));
    let id = za.zone_id_of(Pfn(0)).unwrap();
    let r = za.compact_zone(id, None, &owner).unwrap();
    assert_eq!(r.result, Some(CompactResult::Complete));
    assert_eq!(r.pages_moved, r.blocks_moved);
    za.check_invariants().unwrap();
    contents_intact(&za, &owner);
    // 1024 pages fit in two pageblocks: at least five of the eight are free now.
    let free_blocks = za.buddyinfo().zones[0].1[9] + 2 * za.buddyinfo().zones[0].1[10];
    assert!(free_blocks >= 5, "{}", za.buddyinfo());
    free_all(&za, &owner);
    settled(&za);
}

#[test]
fn a_refusing_owner_keeps_every_page_where_it_was() {
    let za = arena();
    let owner = fragment(&za, |p, t| fill(&za, p, t));
    let before: Vec<_> = (0..FRAMES).map(|p| za.frame_state(Pfn(p))).collect();
    let id = za.zone_id_of(Pfn(0)).unwrap();
    let r = za.compact_zone(id, Some(Order(9)), &Pinned).unwrap();
    assert_eq!(r.result, Some(CompactResult::Complete));
    assert_eq!(r.pages_moved, 0);
    assert!(r.pages_refused > 0);
    za.check_invariants().unwrap();
    let allocated = |v: &Option<FrameState>| matches!(v, Some(FrameState::Allocated { .. }));
    for (p, was) in before.iter().enumerate() {
        assert_eq!(
            allocated(was),
            allocated(&za.frame_state(Pfn(p as u64))),
            "frame {p}"
        );
    }
    contents_intact(&za, &owner);
    free_all(&za, &owner);
    settled(&za);
}

/// An owner that frees the block it is asked to move, then refuses: Linux's page
/// freed under migration.
struct FreesFirst<'a> {
    za: &'a ZoneAllocator<Arena>,
    owner: &'a Owner,
    checked: Mutex<u64>,
}

impl Migrate for FreesFirst<'_> {
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        let old = m.source();
        if self.owner.live.lock().unwrap().remove(&old.0).is_none() {
            return MigrateOutcome::Refused;
        }
        // Isolated: compaction holds a reference, so the owner's free only drops
        // the owner's; the block is not free yet, and cannot be freed twice.
        assert_eq!(
            self.za.frame_state(old),
            Some(FrameState::Allocated {
                order: Order(0),
                refcount: 2
            })
        );
        assert_eq!(self.za.split_page(old, Order(0)), Err(FreeError::Busy(old)));
        // The owner's free, through the raw API or a `LocalCache` (which must not
        // keep the block: compaction's reference is still on it).
        let mut cache = self.za.local_cache_on(0, Gfp::HIGHUSER_MOVABLE).unwrap();
        if old.0.is_multiple_of(8) {
            cache.free(old, Order(0)).unwrap();
        } else {
            self.za.free_pages(old, Order(0)).unwrap();
        }
        assert_eq!(cache.cached_pages(), 0);
        assert_eq!(cache.free(old, Order(0)), Err(FreeError::AlreadyFree(old)));
        drop(cache);
        assert_eq!(
            self.za.free_pages(old, Order(0)),
            Err(FreeError::AlreadyFree(old))
        );
        assert_eq!(
            self.za.free_pages_bulk(&[old]),
            Err(FreeError::AlreadyFree(old))
        );
        assert_eq!(self.za.put_page(old), Err(FreeError::AlreadyFree(old)));
        assert!(matches!(
            self.za.frame_state(old),
            Some(FrameState::Allocated { refcount: 1, .. })
        ));
        *self.checked.lock().unwrap() += 1;
        MigrateOutcome::Refused
    }
}

#[test]
fn a_block_freed_while_isolated_is_freed_by_putback_exactly_once() {
    let za = arena();
    let owner = fragment(&za, |p, t| fill(&za, p, t));
    let f = FreesFirst {
        za: &za,
        owner: &owner,
        checked: Mutex::new(0),
    };
    let id = za.zone_id_of(Pfn(0)).unwrap();
    let r = za.compact_zone(id, Some(Order(9)), &f).unwrap();
    let checked = *f.checked.lock().unwrap();
    assert!(
        checked >= 128,
        "a whole pageblock's pages were freed under it"
    );
    assert_eq!(r.pages_freed, checked);
    let report = za.check_invariants().unwrap();
    assert_eq!(
        report.allocated_pages,
        owner.live.lock().unwrap().len() as u64
    );
    // The freed pages merged: a free order-9 block exists now.
    assert!(za
        .alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9))
        .is_ok_and(|p| {
            za.free_pages(p, Order(9)).unwrap();
            true
        }));
    free_all(&za, &owner);
    settled(&za);
}

#[test]
fn bad_compaction_calls_are_refused_and_change_nothing() {
    let za = ZoneAllocator::new(config()).unwrap();
    let owner = fragment(&za, |_, _| {});
    let digest = za.state_digest();
    let id = za.zone_id_of(Pfn(0)).unwrap();
    let bogus = ZoneId {
        node: 3,
        zone_type: ZoneType::Normal,
    };
    assert_eq!(
        za.compact_zone(bogus, None, &owner),
        Err(CompactError::NoZone)
    );
    assert_eq!(
        za.compact_zone(id, Some(Order(11)), &owner),
        Err(CompactError::InvalidOrder(Order(11)))
    );
    assert_eq!(za.compact_node(1, None, &owner), Err(CompactError::NoZone));
    assert_eq!(
        za.set_extfrag_threshold(1001),
        Err(CompactError::OutOfRange(1001))
    );
    assert_eq!(
        za.set_compaction_proactiveness(101),
        Err(CompactError::OutOfRange(101))
    );
    assert_eq!(za.extfrag_threshold(), EXTFRAG_THRESHOLD_DEFAULT);
    assert_eq!(
        za.compaction_proactiveness(),
        COMPACTION_PROACTIVENESS_DEFAULT
    );
    assert_eq!(za.state_digest(), digest);
    assert_eq!(za.compaction_stats(), CompactStats::default());
    free_all(&za, &owner);
    settled(&za);
}

#[test]
fn extfrag_threshold_1000_leaves_a_fragmented_zone_alone() {
    let za = ZoneAllocator::new(config()).unwrap();
    let owner = Arc::new(fragment(&za, |_, _| {}));
    za.set_migrator(Some(owner.clone()));
    za.set_extfrag_threshold(1000).unwrap();
    assert!(za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9)).is_err());
    assert_eq!(
        za.compaction_stats().compact_stall,
        0,
        "not suitable: not tried"
    );
    // An order at or below PAGE_ALLOC_COSTLY_ORDER never compacts directly.
    za.set_extfrag_threshold(0).unwrap();
    assert!(za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(3)).is_err());
    assert_eq!(za.compaction_stats().compact_stall, 0);
    // Nor a request that may not block.
    assert!(za
        .alloc_pages(Gfp::ATOMIC | Gfp::MOVABLE, Order(9))
        .is_err());
    assert_eq!(za.compaction_stats().compact_stall, 0);
    let p = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9)).unwrap();
    assert_eq!(za.compaction_stats().compact_success, 1);
    za.set_migrator(None);
    za.free_pages(p, Order(9)).unwrap();
    free_all(&za, &owner);
    settled(&za);
}

#[test]
fn failed_direct_compaction_is_deferred_twice_as_long_each_time() {
    let za = ZoneAllocator::new(config()).unwrap();
    let owner = fragment(&za, |_, _| {});
    za.set_migrator(Some(Arc::new(Pinned)));
    for _ in 0..10 {
        assert!(za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9)).is_err());
    }
    // Runs at attempts 1, 3 and 7: each failure doubles the attempts skipped.
    let s = za.compaction_stats();
    assert_eq!(
        (s.compact_stall, s.compact_fail, s.compact_success),
        (3, 3, 0)
    );
    za.set_migrator(None);
    free_all(&za, &owner);
    settled(&za);
}

#[test]
fn proactive_compaction_lowers_the_fragmentation_score() {
    let za = arena();
    let owner = Arc::new(fragment(&za, |p, t| fill(&za, p, t)));
    let before = za.fragmentation_score(0).unwrap();
    assert!(before > 90, "score {before}");
    assert_eq!(za.proactive_compact_node(0), None, "no migrator");
    za.set_migrator(Some(owner.clone()));
    za.set_compaction_proactiveness(0).unwrap();
    assert_eq!(za.proactive_compact_node(0), None, "turned off");
    za.set_compaction_proactiveness(COMPACTION_PROACTIVENESS_DEFAULT)
        .unwrap();
    let r = za
        .proactive_compact_node(0)
        .expect("score above the high mark");
    assert!(r.pages_moved > 0);
    let after = za.fragmentation_score(0).unwrap();
    assert!(after <= 80, "score {before} -> {after}");
    assert_eq!(za.proactive_compact_node(0), None, "nothing left to do");
    za.set_migrator(None);
    za.check_invariants().unwrap();
    contents_intact(&za, &owner);
    free_all(&za, &owner);
    settled(&za);
}

/// Allocates the whole zone unmovable and frees all of it but one page in four of
/// its lower half: blocks 0-3 become Unmovable pageblocks with holes of order 0 and
/// 1, blocks 4-7 are free. Returns the pages kept.
fn pin_lower_half<B: Backend>(za: &ZoneAllocator<B>) -> Vec<Pfn> {
    let mut unmovable = Vec::new();
    loop {
        match za.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, Order(0)) {
            Ok(p) => unmovable.push(p),
            Err(_) if za.drain_all_pages() > 0 => {}
            Err(_) => break,
        }
    }
    assert_eq!(unmovable.len() as u64, FRAMES);
    unmovable.retain(|&p| {
        let keep = p.0 < FRAMES / 2 && p.0 % 4 == 0;
        if !keep {
            za.free_pages(p, Order(0)).unwrap();
        }
        keep
    });
    za.drain_all_pages();
    unmovable
}

/// Allocates the free upper half (blocks 4-7) as movable order-0 pages.
fn alloc_upper_half<B: Backend>(za: &ZoneAllocator<B>) -> Vec<u64> {
    (0..FRAMES / 2)
        .map(|_| {
            let p = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(0)).unwrap();
            assert!(
                p.0 >= FRAMES / 2,
                "movable page {p} among the pinned pageblocks"
            );
            p.0
        })
        .collect()
}

/// Blocks 0-3 hold one unmovable page in four (Unmovable pageblocks, 384 free
/// frames each); blocks 4-7 hold movable pages, seven in eight. Emptying block 4
/// takes 448 targets, and the 192 free frames of blocks 5-7 above it are too few:
/// the scanners meet. The last priority goes on with the holes of the pinned blocks
/// below, and the request succeeds.
#[test]
fn the_last_priority_uses_the_holes_of_pinned_pageblocks_below_the_meeting_point() {
    let za = ZoneAllocator::new(config()).unwrap();
    let unmovable = pin_lower_half(&za);
    let half = FRAMES / 2;
    let owner = Arc::new(Owner::default());
    {
        let mut live = owner.live.lock().unwrap();
        live.extend(alloc_upper_half(&za).into_iter().map(|p| (p, 0)));
        live.retain(|&p, _| {
            let keep = p % 8 != 0;
            if !keep {
                za.free_pages(Pfn(p), Order(0)).unwrap();
            }
            keep
        });
    }
    za.drain_all_pages();
    assert_eq!(za.buddyinfo().zones[0].1[9], 0);
    za.set_migrator(Some(owner.clone()));
    let huge = za
        .alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9))
        .expect("compaction past the meeting point");
    za.set_migrator(None);
    za.check_invariants().unwrap();
    let live = owner.live.lock().unwrap();
    assert_eq!(live.len() as u64, half / 8 * 7);
    // Some pages moved into the pinned pageblocks' holes.
    assert!(
        live.keys().any(|&p| p < half),
        "no page moved below the meeting point"
    );
    for &p in live.keys() {
        assert!(matches!(
            za.frame_state(Pfn(p)),
            Some(FrameState::Allocated { refcount: 1, .. })
        ));
    }
    drop(live);
    za.free_pages(huge, Order(9)).unwrap();
    free_all(&za, &owner);
    for p in unmovable {
        za.free_pages(p, Order(0)).unwrap();
    }
    settled(&za);
}

/// Free pages of a highatomic pageblock do not make a zone suitable for compaction:
/// Linux's `compaction_suitable` is an order-0 watermark test without the reserve
/// flags, which leaves them out, and compaction takes no target there. The zone
/// below has fewer ordinary free pages than the low watermark plus twice the block,
/// and more than that with the free highatomic pageblock counted: the order-9
/// request must not compact.
#[test]
fn free_highatomic_pages_do_not_make_a_zone_suitable_for_compaction() {
    // 256 MiB: a zone reserves highatomic pageblocks only up to 1 % of its pages.
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        min_free_kbytes: Some(0),
        pcp: PcpConfig {
            enabled: false,
            ..PcpConfig::default()
        },
        ..Config::single_zone(ZoneType::Normal, Pfn(0), 65536)
    })
    .unwrap();
    // A high-order atomic allocation reserves its pageblock as HighAtomic.
    let a = za.alloc_pages(Gfp::ATOMIC, Order(1)).unwrap();
    za.free_pages(a, Order(1)).unwrap();
    let highatomic = za.free_counts()[0].nr_free_highatomic;
    assert_eq!(highatomic, 512, "one free highatomic pageblock");
    let owner = Arc::new(Owner::default());
    let mut live = owner.live.lock().unwrap();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
        live.insert(p.0, 0);
    }
    // Ordinary free pages: single-page holes, one page in four, up to 64 short of
    // the limit.
    let low = za
        .zoneinfo()
        .zones
        .iter()
        .find(|z| z.present > 0)
        .unwrap()
        .watermarks[1];
    let limit = low + 2 * Order(9).nr_pages();
    let mut holes: Vec<u64> = live.keys().copied().filter(|p| p % 4 == 0).collect();
    holes.sort_unstable();
    for p in holes {
        if za.free_counts()[0].nr_free_pages - highatomic >= limit - 64 {
            break;
        }
        live.remove(&p);
        za.free_pages(Pfn(p), Order(0)).unwrap();
    }
    let free = za.free_counts()[0].nr_free_pages;
    assert!(
        free - highatomic <= limit && free > limit,
        "{free} free, limit {limit}"
    );
    drop(live);
    za.set_migrator(Some(owner.clone()));
    let stalls = za.compaction_stats().compact_stall;
    let r = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(9));
    za.set_migrator(None);
    assert_eq!(
        za.compaction_stats().compact_stall,
        stalls,
        "compacted a zone whose free memory above the limit is highatomic"
    );
    assert!(r.is_err());
    za.check_invariants().unwrap();
    free_all(&za, &owner);
}

/// Blocks 0-3 hold one unmovable page in four (their holes are of order 0 and 1);
/// block 4 holds a single movable block of order 2; blocks 5-7 hold movable pages
/// at every other frame. No free block of order 2 exists outside block 4, so block
/// 4 cannot be emptied. The last priority puts it back and goes on with block 5,
/// whose order-0 pages fit in the holes below it: the request succeeds.
#[test]
fn the_last_priority_passes_a_pageblock_whose_block_has_no_target() {
    let za = ZoneAllocator::new(Config {
        pcp: PcpConfig {
            enabled: false,
            ..PcpConfig::default()
        },
        ..config()
    })
    .unwrap();
    let unmovable = pin_lower_half(&za);
    let half = FRAMES / 2;
    let owner = Arc::new(Owner::default());
    let pages = alloc_upper_half(&za);
    // Block 4: four aligned frames become one order-2 block, the rest is freed.
    let pb4 = half;
    for &p in &pages {
        if (pb4..pb4 + 4).contains(&p) {
            za.free_pages(Pfn(p), Order(0)).unwrap();
        }
    }
    let big = za.alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(2)).unwrap();
    assert_eq!(
        big,
        Pfn(pb4),
        "the order-2 block goes where four frames were freed"
    );
    {
        let mut live = owner.live.lock().unwrap();
        live.insert(big.0, 0);
        for &p in &pages {
            if (pb4 + 4..pb4 + 512).contains(&p) || (p >= pb4 + 512 && p % 2 == 1) {
                za.free_pages(Pfn(p), Order(0)).unwrap();
            } else if p >= pb4 + 512 {
                live.insert(p, 0);
            }
        }
        assert_eq!(live.len() as u64, 1 + 3 * 256);
    }
    assert_eq!(za.buddyinfo().zones[0].1[9], 0);
    za.set_migrator(Some(owner.clone()));
    let huge = za
        .alloc_pages(Gfp::HIGHUSER_MOVABLE, Order(9))
        .expect("compaction past a pageblock it cannot empty");
    za.set_migrator(None);
    // Only block 5's pages moved: the targets taken in blocks 5-7 before the
    // scanners met are given back when the run reaches them, so nothing moves
    // into a block that is being emptied, or moves twice.
    assert_eq!(za.compaction_stats().pgmigrate_success, 256);
    za.check_invariants().unwrap();
    assert_eq!(
        za.frame_state(big),
        Some(FrameState::Allocated {
            order: Order(2),
            refcount: 1
        }),
        "the order-2 block stayed where it was"
    );
    let live = owner.live.lock().unwrap();
    assert_eq!(live.len() as u64, 1 + 3 * 256);
    assert!(
        live.keys().any(|&p| p < half),
        "no page moved into the holes below"
    );
    for (&p, _) in live.iter() {
        assert!(
            p + 4 <= huge.0 || p >= huge.0 + 512,
            "page {p} inside the block"
        );
        if p != big.0 {
            assert_eq!(
                za.frame_state(Pfn(p)),
                Some(FrameState::Allocated {
                    order: Order(0),
                    refcount: 1
                })
            );
        }
    }
    drop(live);
    za.free_pages(huge, Order(9)).unwrap();
    {
        let live = owner.live.lock().unwrap();
        for (&p, _) in live.iter() {
            let order = if p == big.0 { Order(2) } else { Order(0) };
            za.free_pages(Pfn(p), order).unwrap();
        }
    }
    for p in unmovable {
        za.free_pages(p, Order(0)).unwrap();
    }
    settled(&za);
}
