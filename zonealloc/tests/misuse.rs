//! Regression tests for holes that misuse of the public API found: each test is named
//! after what it caught, and each failed before its fix.

use std::sync::{Arc, Barrier};

use zonealloc::*;

fn abstract_za(bytes: u64) -> ZoneAllocator {
    ZoneAllocator::new(Config {
        nr_cpus: 2,
        ..Config::with_bytes(bytes)
    })
    .unwrap()
}

fn arena_za(bytes: u64) -> ZoneAllocator<Arena> {
    ZoneAllocator::with_arena(
        Config {
            nr_cpus: 2,
            ..Config::with_bytes(bytes)
        },
        ArenaOptions::default(),
    )
    .unwrap()
}

#[path = "support/settled.rs"]
mod support;
use support::settled;

// -----------------------------------------------------------------------------
// 1. Aliasing `&mut [u8]` from safe code
// -----------------------------------------------------------------------------

#[test]
fn raw_free_behind_a_live_guard_is_refused() {
    let za = arena_za(16 << 20);
    let mut g = za.alloc_block(Gfp::KERNEL, Order(2)).unwrap();
    let (pfn, order) = (g.pfn(), g.order());
    let before = za.state_digest();
    assert_eq!(za.free_pages(pfn, order), Err(FreeError::Guarded(pfn)));
    assert_eq!(
        za.free_pages_on(1, pfn, order),
        Err(FreeError::Guarded(pfn))
    );
    assert_eq!(za.put_page(pfn), Err(FreeError::Guarded(pfn)));
    assert_eq!(za.get_page(pfn), Err(FreeError::Guarded(pfn)));
    assert_eq!(za.split_page(pfn, order), Err(FreeError::Guarded(pfn)));
    assert_eq!(
        za.state_digest(),
        before,
        "a refused call changed the state"
    );
    // The block was not freed, so no later allocation can hand it out again while
    // the guard's slice is alive.
    let bytes = g.bytes_mut().unwrap();
    bytes.fill(0xA5);
    let others: Vec<_> = (0..64)
        .map(|_| za.alloc_block(Gfp::KERNEL, Order(2)).unwrap())
        .collect();
    assert!(others.iter().all(|o| o.pfn() != pfn));
    assert!(g.bytes().unwrap().iter().all(|&b| b == 0xA5));
    drop(others);
    // Given back to the raw API, the block frees normally.
    let (p, o) = g.into_raw();
    za.free_pages(p, o).unwrap();
    settled(&za);
}

#[test]
fn two_guards_over_one_block_are_refused() {
    let za = arena_za(16 << 20);
    let pfn = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
    // SAFETY: this test owns the block's only reference and touches its memory only
    // through the guard.
    let g = unsafe { PageBlock::from_raw(&za, pfn, Order(1)) }.unwrap();
    // SAFETY: the call is refused before it could create a second guard.
    let second = unsafe { PageBlock::from_raw(&za, pfn, Order(1)) };
    assert_eq!(second.err(), Some(FreeError::Guarded(pfn)));
    // From a block allocated through `alloc_block`, too.
    let h = za.alloc_block(Gfp::KERNEL, Order(0)).unwrap();
    // SAFETY: as above, refused.
    let again = unsafe { PageBlock::from_raw(&za, h.pfn(), Order(0)) };
    assert_eq!(again.err(), Some(FreeError::Guarded(h.pfn())));
    // Wrong order and free frames are refused as by `free_pages`.
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    // SAFETY: refused.
    let wrong = unsafe { PageBlock::from_raw(&za, p, Order(1)) };
    assert!(matches!(
        wrong.err(),
        Some(FreeError::Misaligned { .. } | FreeError::WrongOrder { .. })
    ));
    za.free_pages(p, Order(0)).unwrap();
    drop((g, h));
    settled(&za);
}

#[test]
fn guarded_pages_are_refused_by_the_bulk_and_fragment_frees() {
    let za = arena_za(16 << 20);
    let g = za.alloc_block(Gfp::KERNEL, Order(0)).unwrap();
    let p = g.pfn();
    assert_eq!(za.free_contig_range(p, 1), Err(FreeError::Guarded(p)));
    assert_eq!(za.free_pages_bulk(&[p]), Err(FreeError::Guarded(p)));
    let addr = za.page_address(p).unwrap();
    assert_eq!(za.page_frag_free(addr.as_ptr()), Err(FreeError::Guarded(p)));
    drop(g);
    settled(&za);
}

// -----------------------------------------------------------------------------
// 2. Arena length overflow over a sparse layout
// -----------------------------------------------------------------------------

fn two_nodes(a: (u64, u64), b: (u64, u64)) -> Config {
    Config {
        nodes: vec![
            NodeConfig {
                zones: vec![ZoneConfig::new(ZoneType::Normal, Pfn(a.0), a.1)],
            },
            NodeConfig {
                zones: vec![ZoneConfig::new(ZoneType::Normal, Pfn(b.0), b.1)],
            },
        ],
        nr_cpus: 1,
        min_free_kbytes: Some(0),
        ..Config::default()
    }
}

#[test]
fn zone_past_the_byte_address_space_is_refused() {
    // pfn 2^52 << 12 is 2^64: its byte address does not fit.
    let c = two_nodes((0, 4096), (1 << 52, 16));
    assert!(matches!(
        c.validate(),
        Err(ConfigError::PfnTooLarge { node: 1, .. })
    ));
    assert!(ZoneAllocator::with_arena(c, ArenaOptions::default()).is_err());
    let c = Config {
        page_shift: 30,
        ..two_nodes((0, 16), ((1 << 34) - 8, 16))
    };
    assert!(matches!(c.validate(), Err(ConfigError::PfnTooLarge { .. })));
}

#[test]
fn arena_over_zones_far_apart_maps_only_the_zones() {
    let far = 1u64 << 40;
    let za = ZoneAllocator::with_arena(two_nodes((0, 65536), (far, 16)), ArenaOptions::default())
        .unwrap();
    assert_eq!(za.backend().nr_frames(), 65536 + 16);
    assert_eq!(za.backend().len_bytes(), (65536 + 16) << 12);
    let a = za.page_address(Pfn(0)).unwrap();
    let b = za.page_address(Pfn(far)).unwrap();
    assert_ne!(a, b);
    assert_eq!(za.page_address(Pfn(65536)), None, "the gap has no memory");
    assert_eq!(za.page_address(Pfn(far + 16)), None);
    assert_eq!(za.backend().pfn_of_addr(b.as_ptr()), Some(Pfn(far)));
    // Write every byte of an order-10 block and every block of the far zone.
    let mut big = za.alloc_block(Gfp::KERNEL, Order(10)).unwrap();
    assert!(big.pfn().0 < 65536);
    big.bytes_mut().unwrap().fill(1);
    let mut small = Vec::new();
    while let Ok(p) = za.alloc_pages_node(1, Gfp::KERNEL | Gfp::THISNODE, Order(0)) {
        assert!(p.0 >= far && p.0 < far + 16);
        // SAFETY: this test owns the page's only reference and uses only the guard.
        let mut blk = unsafe { PageBlock::from_raw(&za, p, Order(0)) }.unwrap();
        blk.bytes_mut().unwrap().fill(2);
        small.push(blk);
    }
    assert_eq!(small.len(), 16);
    assert!(big.bytes().unwrap().iter().all(|&x| x == 1));
    for s in &small {
        assert!(s.bytes().unwrap().iter().all(|&x| x == 2));
    }
}

// -----------------------------------------------------------------------------
// 3. A fragment freed twice
// -----------------------------------------------------------------------------

#[test]
fn fragment_freed_twice_is_refused_and_drop_does_not_panic() {
    let za = arena_za(16 << 20);
    let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    let f = cache.alloc(100, 8).unwrap();
    let pfn = za.backend().pfn_of_addr(f.as_ptr()).unwrap();
    za.page_frag_free(f.as_ptr()).unwrap();
    let d = za.state_digest();
    assert_eq!(
        za.page_frag_free(f.as_ptr()),
        Err(FreeError::AlreadyFree(pfn))
    );
    assert_eq!(za.state_digest(), d, "the refused free changed the state");
    // The cache still works, and dropping it frees the block without a panic.
    let g = cache.alloc(100, 8).unwrap();
    za.page_frag_free(g.as_ptr()).unwrap();
    drop(cache);
    settled(&za);
}

#[test]
fn detached_block_refuses_a_free_after_its_last_fragment() {
    let za = arena_za(16 << 20);
    let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    let a = cache.alloc(64, 8).unwrap();
    let b = cache.alloc(64, 8).unwrap();
    drop(cache); // the block now belongs to its two fragments
    za.page_frag_free(a.as_ptr()).unwrap();
    za.page_frag_free(b.as_ptr()).unwrap(); // the last one frees the block
    assert!(za.page_frag_free(b.as_ptr()).is_err());
    assert!(za.page_frag_free(a.as_ptr()).is_err());
    settled(&za);
}

#[test]
fn cache_block_is_refused_by_the_raw_api() {
    let za = arena_za(16 << 20);
    let mut cache = PageFragCache::with_refill_order(&za, Gfp::ATOMIC, Order(0));
    let f = cache.alloc(64, 8).unwrap();
    let pfn = za.backend().pfn_of_addr(f.as_ptr()).unwrap();
    assert_eq!(za.free_pages(pfn, Order(0)), Err(FreeError::Busy(pfn)));
    assert_eq!(za.put_page(pfn), Err(FreeError::Busy(pfn)));
    assert_eq!(za.free_contig_range(pfn, 1), Err(FreeError::Busy(pfn)));
    za.page_frag_free(f.as_ptr()).unwrap();
    drop(cache);
    settled(&za);
}

// -----------------------------------------------------------------------------
// 4. Fragment size overflow
// -----------------------------------------------------------------------------

#[test]
fn fragment_size_overflow_is_refused() {
    let za = arena_za(16 << 20);
    let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    let first = cache.alloc(100, 1).unwrap();
    for size in [usize::MAX - 50, usize::MAX, (32 << 10) + 1, 1 << 40] {
        assert_eq!(
            cache.alloc(size, 1),
            Err(FragError::TooLarge),
            "size {size}"
        );
    }
    assert_eq!(cache.alloc(8, 1 << 63), Err(FragError::BadAlign));
    assert_eq!(cache.alloc(8, 8192), Err(FragError::BadAlign));
    let next = cache.alloc(100, 1).unwrap();
    let (a, b) = (first.as_ptr() as usize, next.as_ptr() as usize);
    assert!(
        a + 100 <= b || b + 100 <= a,
        "fragments overlap: {a:#x} {b:#x}"
    );
    // A fragment as large as the block fits a fresh cache's block.
    let mut fresh = PageFragCache::new(&za, Gfp::ATOMIC);
    let whole = fresh.alloc(32 << 10, 1).unwrap();
    for f in [first, next, whole] {
        za.page_frag_free(f.as_ptr()).unwrap();
    }
    drop((cache, fresh));
    settled(&za);
}

// -----------------------------------------------------------------------------
// 5. alloc_contig_pages with a huge count
// -----------------------------------------------------------------------------

#[test]
fn alloc_contig_pages_with_a_huge_count_is_refused() {
    let za = abstract_za(64 << 20);
    let before = za.state_digest();
    for nr in [(1u64 << 63) + 1, u64::MAX, 1 << 62, za.managed_pages() + 1] {
        assert_eq!(
            za.alloc_contig_pages(nr, Gfp::KERNEL, 0),
            Err(ContigError::NoMemory)
        );
    }
    assert_eq!(za.state_digest(), before);
}

// -----------------------------------------------------------------------------
// 6. Configurations that passed validate() and then panicked or wrapped
// -----------------------------------------------------------------------------

#[test]
fn extreme_configurations_get_a_config_error() {
    let base = Config::with_bytes(16 << 20);
    let cases: Vec<(&str, Config)> = vec![
        (
            "zone ending at u64::MAX",
            Config::single_zone(ZoneType::Normal, Pfn(u64::MAX - 4096), 4096),
        ),
        (
            "min_free_kbytes u64::MAX",
            Config {
                min_free_kbytes: Some(u64::MAX),
                ..base.clone()
            },
        ),
        (
            "watermark_scale_factor u64::MAX",
            Config {
                watermark_scale_factor: u64::MAX,
                ..base.clone()
            },
        ),
        (
            "watermark_boost_factor u64::MAX",
            Config {
                watermark_boost_factor: u64::MAX,
                ..base.clone()
            },
        ),
        (
            "pcp.batch u64::MAX",
            Config {
                pcp: PcpConfig {
                    batch: Some(u64::MAX),
                    ..PcpConfig::default()
                },
                ..base.clone()
            },
        ),
        (
            "pcp.high_max u64::MAX",
            Config {
                pcp: PcpConfig {
                    high_max: Some(u64::MAX),
                    ..PcpConfig::default()
                },
                ..base.clone()
            },
        ),
        (
            "2^32 - 2 frames over a 1 GiB metadata limit",
            Config {
                metadata_limit_bytes: Some(1 << 30),
                ..Config::single_zone(ZoneType::Normal, Pfn(0), (1 << 32) - 2)
            },
        ),
    ];
    for (what, c) in cases {
        let v = c.validate();
        assert!(v.is_err(), "{what}: validate() accepted it");
        let built = ZoneAllocator::new(c);
        assert_eq!(built.err(), v.err(), "{what}");
    }
    let mut za = abstract_za(16 << 20);
    let marks = za.watermarks(za.zones().next().unwrap().0);
    assert_eq!(
        za.setup_watermarks(Some(u64::MAX)),
        Err(ConfigError::MinFreeKbytes(u64::MAX))
    );
    assert_eq!(za.watermarks(za.zones().next().unwrap().0), marks);
}

/// Memory and swap of this machine, and whether the kernel refuses allocations
/// larger than that (heuristic or strict overcommit).
fn machine_refuses_above(bytes: u64) -> bool {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib = |key: &str| -> u64 {
        meminfo
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(u64::MAX / 2048)
    };
    let total = (kib("MemTotal:") + kib("SwapTotal:")) * 1024;
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    total < bytes && mode.trim() != "1"
}

#[test]
fn metadata_the_machine_cannot_give_is_a_config_error() {
    let c = Config::single_zone(ZoneType::Normal, Pfn(0), (1 << 32) - 2);
    let bytes = c.metadata_bytes();
    // 2^30 lines of four frames, then the 126 buddy lists' sentinels (21 orders
    // by 6 migratetypes) on 32 more, and one unused line for every 512 entries.
    assert_eq!(bytes, ((1 << 30) + 32 + (1 << 23)) * 64);
    if !machine_refuses_above(bytes) {
        eprintln!("skipped: this machine could hand out {bytes} bytes");
        return;
    }
    assert!(matches!(
        ZoneAllocator::new(c).err(),
        Some(ConfigError::Metadata { .. })
    ));
}

// -----------------------------------------------------------------------------
// 7. Racing double frees through the multi-page frees
// -----------------------------------------------------------------------------

/// Two threads free the same pages at once, each through `free`; exactly one must
/// succeed every round, and no frame may be lost or freed twice.
fn racing_double_frees(rounds: usize, free: fn(&ZoneAllocator, usize, &[Pfn]) -> bool) {
    let za = Arc::new(abstract_za(64 << 20));
    let barrier = Arc::new(Barrier::new(2));
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Pfn>>(1);
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<bool>(1);
    let other = {
        let (za, barrier) = (Arc::clone(&za), Arc::clone(&barrier));
        std::thread::spawn(move || {
            while let Ok(pages) = rx.recv() {
                barrier.wait();
                done_tx.send(free(&za, 1, &pages)).unwrap();
            }
        })
    };
    let mut both = 0;
    let mut neither = 0;
    for round in 0..rounds {
        let order = Order((round % 5) as u8);
        let head = za.alloc_pages(Gfp::KERNEL, order).unwrap();
        za.split_page(head, order).unwrap();
        let pages: Vec<Pfn> = (0..order.nr_pages()).map(|i| head.add(i)).collect();
        tx.send(pages.clone()).unwrap();
        barrier.wait();
        let mine = free(&za, 0, &pages);
        let theirs = done_rx.recv().unwrap();
        both += (mine && theirs) as usize;
        neither += (!mine && !theirs) as usize;
    }
    drop(tx);
    other.join().unwrap();
    assert_eq!(
        (both, neither),
        (0, 0),
        "rounds where both or neither free won, of {rounds}"
    );
    settled(&*za);
}

#[test]
fn racing_free_contig_range_calls_have_one_winner() {
    racing_double_frees(20_000, |za, _, p| {
        za.free_contig_range(p[0], p.len() as u64).is_ok()
    });
}

#[test]
fn racing_free_pages_bulk_calls_have_one_winner() {
    // One side lists the pages backwards: the claim order is still ascending.
    racing_double_frees(20_000, |za, side, p| {
        if side == 0 {
            za.free_pages_bulk(p).is_ok()
        } else {
            let rev: Vec<Pfn> = p.iter().rev().copied().collect();
            za.free_pages_bulk(&rev).is_ok()
        }
    });
}

#[test]
fn racing_bulk_and_contiguous_frees_have_one_winner() {
    racing_double_frees(20_000, |za, side, p| {
        if side == 0 {
            za.free_contig_range(p[0], p.len() as u64).is_ok()
        } else {
            za.free_pages_bulk(p).is_ok()
        }
    });
}

#[test]
fn bad_page_late_in_a_bulk_free_restores_the_pages_taken() {
    let za = abstract_za(64 << 20);
    let head = za.alloc_pages(Gfp::KERNEL, Order(3)).unwrap();
    za.split_page(head, Order(3)).unwrap();
    za.get_page(head.add(2)).unwrap(); // one page with two references
    za.free_pages(head.add(7), Order(0)).unwrap(); // and the last one already free
    let before = za.state_digest();
    assert_eq!(
        za.free_contig_range(head, 8),
        Err(FreeError::AlreadyFree(head.add(7)))
    );
    let pages: Vec<Pfn> = (0..8).rev().map(|i| head.add(i)).collect();
    assert_eq!(
        za.free_pages_bulk(&pages),
        Err(FreeError::AlreadyFree(head.add(7)))
    );
    assert_eq!(
        za.state_digest(),
        before,
        "a refused multi-page free changed the state"
    );
    za.free_contig_range(head, 7).unwrap();
    assert_eq!(za.page_count(head.add(2)), Ok(1));
    za.free_pages(head.add(2), Order(0)).unwrap();
    settled(&za);
}

// -----------------------------------------------------------------------------
// 8. alloc_contig_range's state on failure
// -----------------------------------------------------------------------------

#[test]
fn busy_alloc_contig_range_changes_nothing() {
    let za = abstract_za(64 << 20);
    // Pages resting on a per-CPU list, and an allocated page inside the range.
    let parked: Vec<Pfn> = (0..8)
        .map(|_| za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap())
        .collect();
    let busy = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    for &p in &parked {
        za.free_pages(p, Order(0)).unwrap();
    }
    assert!(za.nr_pcp_pages() > 0);
    let start = Pfn(busy.0.saturating_sub(600));
    let before = za.state_digest();
    assert_eq!(
        za.alloc_contig_range(start, busy.add(600)),
        Err(ContigError::Busy(busy))
    );
    assert_eq!(
        za.state_digest(),
        before,
        "a refused alloc_contig_range changed the state"
    );
    za.free_pages(busy, Order(0)).unwrap();
    settled(&za);
}

/// A one-CPU allocator, a `LocalCache` holding one free block of `order`, and CPU
/// 0's list holding pages (what a drain would give back): the cache, the block and
/// the list's pages.
fn a_cached_block_beside_a_list(
    za: &ZoneAllocator,
    order: Order,
) -> (LocalCache<'_, AbstractFrames>, Pfn, u64) {
    let mut cache = za.local_cache_on(0, Gfp::KERNEL).unwrap();
    let held = cache.alloc(order).unwrap();
    cache.free(held, order).unwrap(); // free, but the cache's
    let parked: Vec<Pfn> = (0..8)
        .map(|_| za.alloc_pages_on(0, Gfp::KERNEL, Order(0)).unwrap())
        .collect();
    for &p in &parked {
        za.free_pages_on(0, p, Order(0)).unwrap();
    }
    let pcp = za.nr_pcp_pages();
    assert!(pcp > 0);
    (cache, held, pcp)
}

/// One CPU, without the per-CPU stacks, so that a `LocalCache` holds blocks of
/// its own.
fn one_cpu() -> ZoneAllocator {
    ZoneAllocator::new(Config {
        nr_cpus: 1,
        pcp: PcpConfig {
            rseq: false,
            ..PcpConfig::default()
        },
        ..Config::with_bytes(64 << 20)
    })
    .unwrap()
}

#[test]
fn alloc_contig_range_over_a_local_cache_block_and_a_busy_page_changes_nothing() {
    // A cached block is no obstacle (the call drains the caches), but a range that
    // also holds an allocated page is refused before anything is drained.
    let za = one_cpu();
    let (cache, held, _) = a_cached_block_beside_a_list(&za, Order(0));
    let busy = za.alloc_pages_on(0, Gfp::KERNEL, Order(0)).unwrap();
    let (start, end) = (held.min(busy), Pfn(held.0.max(busy.0) + 1));
    let (before, pcp) = (za.state_digest(), za.nr_pcp_pages());
    let r = za.alloc_contig_range(start, end);
    assert!(matches!(r, Err(ContigError::Busy(_))), "{r:?}");
    assert_eq!(
        (za.state_digest(), za.nr_pcp_pages()),
        (before, pcp),
        "a range with an allocated page was refused only after draining"
    );
    assert!(
        za.nr_cached_pages() > 0,
        "the cache was drained for a refused range"
    );
    za.free_pages_on(0, busy, Order(0)).unwrap();
    drop(cache);
    settled(&za);
}

#[test]
fn alloc_contig_range_from_a_tail_of_a_local_cache_block_takes_it() {
    // The range starts inside a cached block of order 1: its first frame is a
    // tail, whose block the pre-check finds cached, so the caches are drained.
    let za = one_cpu();
    let (cache, held, _) = a_cached_block_beside_a_list(&za, Order(1));
    za.alloc_contig_range(held.add(1), held.add(2)).unwrap();
    assert_eq!(za.nr_cached_pages(), 0);
    za.free_contig_range(held.add(1), 1).unwrap();
    drop(cache);
    settled(&za);
}

// -----------------------------------------------------------------------------
// 9. A refused multi-page free and the owner of one of its pages
// -----------------------------------------------------------------------------

#[test]
fn refused_contig_free_does_not_hide_a_page_from_its_owner() {
    // One thread keeps calling `free_contig_range(x, 2)` where `x + 1` is already
    // free, so every call is refused. `x` belongs to the other thread, whose
    // reference changes on it must all go through: a refused call takes nothing,
    // not even for a moment.
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        ..Config::with_bytes(16 << 20)
    })
    .unwrap();
    let x = za.alloc_pages(Gfp::KERNEL, Order(1)).unwrap();
    za.split_page(x, Order(1)).unwrap();
    za.free_pages(x.add(1), Order(0)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let refused = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(za.free_contig_range(x, 2).is_err());
                assert!(za.free_pages_bulk(&[x, x.add(1)]).is_err());
            }
        });
        let mut refused = 0u32;
        for _ in 0..200_000 {
            match za.get_page(x) {
                Ok(()) => assert_eq!(za.put_page(x), Ok(false)),
                Err(_) => refused += 1,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        refused
    });
    assert_eq!(refused, 0, "the owner's get_page was refused");
    assert_eq!(za.page_count(x), Ok(1));
    za.free_pages(x, Order(0)).unwrap();
    settled(&za);
}

// -----------------------------------------------------------------------------
// 10. Compaction's own reference
// -----------------------------------------------------------------------------

/// A migrator whose callback frees the block it is asked to move, then frees it
/// again by its address through `page_frag_free`.
struct FreesTwiceInCallback<'a> {
    za: &'a ZoneAllocator<Arena>,
    seen: std::sync::Mutex<Option<(Pfn, bool, bool, bool)>>,
}

impl Migrate for FreesTwiceInCallback<'_> {
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        let mut seen = self.seen.lock().unwrap();
        if seen.is_none() {
            let old = m.source();
            let first = self.za.free_pages(old, Order(0)).is_ok();
            let again = self.za.free_pages(old, Order(0)).is_ok();
            let addr = self.za.page_address(old).unwrap().as_ptr();
            let by_address = self.za.page_frag_free(addr).is_ok();
            *seen = Some((old, first, again, by_address));
        }
        MigrateOutcome::Refused
    }
}

#[test]
fn page_frag_free_cannot_drop_compactions_reference() {
    let za = ZoneAllocator::with_arena(
        Config {
            nr_cpus: 1,
            ..Config::with_bytes(16 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    // Movable pages everywhere, every fourth kept: compaction has blocks to move.
    let mut all = Vec::new();
    while let Ok(p) = za.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::NORETRY, Order(0)) {
        all.push(p);
    }
    let (kept, gone): (Vec<Pfn>, Vec<Pfn>) = all.into_iter().partition(|p| p.0 % 4 == 0);
    for p in gone {
        za.free_pages(p, Order(0)).unwrap();
    }
    let zone = za.zone_id_of(kept[0]).unwrap();
    let m = FreesTwiceInCallback {
        za: &za,
        seen: std::sync::Mutex::new(None),
    };
    za.compact_zone(zone, None, &m).unwrap();
    let (old, first, again, by_address) = m.seen.lock().unwrap().expect("no migration");
    assert!(first, "the owner's one free was refused");
    assert!(!again, "free_pages took compaction's reference");
    assert!(!by_address, "page_frag_free took compaction's reference");
    for p in kept.into_iter().filter(|&p| p != old) {
        za.free_pages(p, Order(0)).unwrap();
    }
    settled(&za);
}

// -----------------------------------------------------------------------------
// 11. Bad input to constructors, drops and public helpers
// -----------------------------------------------------------------------------

#[test]
fn with_arena_refuses_what_validate_refuses() {
    for c in [
        Config {
            max_order: Order(100),
            ..Config::with_bytes(16 << 20)
        },
        Config {
            page_shift: 64,
            ..Config::with_bytes(16 << 20)
        },
        Config {
            max_order: Order(60),
            ..Config::with_bytes(16 << 20)
        },
    ] {
        let e = c.validate().unwrap_err();
        assert_eq!(Arena::new(&c, ArenaOptions::default()).err(), Some(e));
        assert_eq!(
            ZoneAllocator::with_arena(c, ArenaOptions::default()).err(),
            Some(e)
        );
    }
}

#[test]
fn a_vmalloc_page_cannot_be_freed_behind_the_spaces_back() {
    let za = abstract_za(16 << 20);
    let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    let area = vm.vmalloc(2 * 4096).unwrap();
    let stolen = area.pages()[0];
    assert_eq!(
        za.free_pages(stolen, Order(0)),
        Err(FreeError::Busy(stolen))
    );
    drop(vm); // frees both of the area's pages
    settled(&za);
}

#[test]
fn public_arithmetic_helpers_saturate() {
    let c: Vec<(Pfn, Order)> = chunks(Pfn(u64::MAX), 1, Order(10)).collect();
    assert_eq!(c, vec![(Pfn(u64::MAX), Order(0))]);
    let c: Vec<(Pfn, Order)> = chunks(Pfn(u64::MAX - 1), 10, Order(10)).collect();
    assert_eq!(c, vec![(Pfn(u64::MAX - 1), Order(1))]);
    assert_eq!(fragmentation_index(&[1], 64), 0);
    assert_eq!(fragmentation_index(&[u64::MAX], 1), 500);
    assert_eq!(unusable_free_index(&[0; 65], 0), 1000);
    assert_eq!(unusable_free_index(&[1; 70], 3), 0);
}

#[test]
fn overlapping_holes_count_each_frame_once() {
    // Two holes over the same 3,072 of 4,096 frames leave 1,024 present: not
    // `NoMemory` for 6,144 frames of holes.
    let mut c = Config::with_bytes(16 << 20);
    let zone = &mut c.nodes[0].zones[0];
    zone.holes = vec![(Pfn(0), 3072), (Pfn(1024), 2048)];
    assert_eq!(c.validate(), Ok(()));
    let za = ZoneAllocator::new(c).unwrap();
    assert_eq!(za.managed_pages(), 1024);
    settled(&za);
}
