//! The page fragment cache: carving, recycling, cross-thread frees, bad frees.

use std::sync::mpsc;

use zonealloc::*;

fn arena(path: FragFreePath) -> ZoneAllocator<Arena> {
    ZoneAllocator::with_arena(
        Config {
            nr_cpus: 2,
            frag_free_path: path,
            ..Config::with_bytes(16 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap()
}

#[path = "support/settled.rs"]
mod support;
use support::settled;

#[test]
fn fragments_are_carved_without_overlap_and_recycled() {
    let za = arena(FragFreePath::default());
    let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    // 32 KiB block, 1000-byte fragments aligned to 8: 32 per block.
    for round in 0..4 {
        let frags: Vec<_> = (0..32).map(|_| cache.alloc(1000, 8).unwrap()).collect();
        for (i, f) in frags.iter().enumerate() {
            // SAFETY: each fragment is 1000 writable bytes owned by this test.
            unsafe { f.as_ptr().write_bytes(i as u8, 1000) };
        }
        for (i, f) in frags.iter().enumerate() {
            // SAFETY: as above; no fragment overlaps another, so the bytes survive.
            assert_eq!(unsafe { *f.as_ptr().add(999) }, i as u8, "round {round}");
        }
        for f in frags {
            za.page_frag_free(f.as_ptr()).unwrap();
        }
    }
    // Every fragment came back before the block ran out: recycled in place.
    let (refills, recycles) = cache.refill_counts();
    assert_eq!(refills, 1);
    assert_eq!(recycles, 3);
    drop(cache);
    settled(&za);
}

#[test]
fn block_outlives_cache_until_last_fragment() {
    let za = arena(FragFreePath::default());
    let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    let keep = cache.alloc(64, 64).unwrap();
    drop(cache);
    // The block is still allocated: one fragment is out.
    let pfn = za.backend().pfn_of_addr(keep.as_ptr()).unwrap();
    assert!(za.block_of(pfn).is_ok());
    za.page_frag_free(keep.as_ptr()).unwrap();
    settled(&za);
    // A second free of the same fragment is refused now that the block is free.
    assert!(matches!(
        za.page_frag_free(keep.as_ptr()),
        Err(FreeError::AlreadyFree(_))
    ));
}

#[test]
fn foreign_and_bad_pointers_are_refused() {
    let za = arena(FragFreePath::default());
    let local = 0u64;
    let d = za.state_digest();
    assert!(matches!(
        za.page_frag_free(&local as *const u64 as *const u8),
        Err(FreeError::ForeignAddress(_))
    ));
    let free_page = za.page_address(Pfn(100)).unwrap();
    assert!(za.page_frag_free(free_page.as_ptr()).is_err());
    assert_eq!(za.state_digest(), d);
    let abstract_za = ZoneAllocator::new(Config::with_bytes(1 << 20)).unwrap();
    let mut c = PageFragCache::new(&abstract_za, Gfp::ATOMIC);
    assert_eq!(c.alloc(10, 1), Err(FragError::NoAddresses));
}

#[test]
fn large_and_misaligned_requests() {
    let za = arena(FragFreePath::default());
    let mut cache = PageFragCache::with_refill_order(&za, Gfp::ATOMIC, Order(0));
    assert_eq!(cache.alloc(8, 3), Err(FragError::BadAlign));
    let a = cache.alloc(3000, 1).unwrap();
    // Does not fit in the rest of the page and is larger than a page: refused.
    assert_eq!(cache.alloc(5000, 1), Err(FragError::TooLarge));
    za.page_frag_free(a.as_ptr()).unwrap();
    drop(cache);
    settled(&za);
}

/// Linux's page_frag_test: one thread carves, another frees, through a ring.
fn cross_thread(path: FragFreePath, refill_order: Order) {
    let za = arena(path);
    let (tx, rx) = mpsc::sync_channel::<usize>(512);
    std::thread::scope(|s| {
        let za = &za;
        s.spawn(move || {
            for a in rx {
                za.page_frag_free(a as *const u8).unwrap();
            }
        });
        let mut cache = PageFragCache::with_refill_order(za, Gfp::ATOMIC, refill_order);
        for i in 0..100_000usize {
            let size = 64 + (i * 37) % 1500;
            let f = cache.alloc(size, 64).unwrap();
            tx.send(f.as_ptr() as usize).unwrap();
        }
        drop(tx);
    });
    settled(&za);
}

#[test]
fn cross_thread_frees_every_path() {
    for path in [
        FragFreePath::Zone,
        FragFreePath::PcpOrder0,
        FragFreePath::PcpAll,
    ] {
        cross_thread(path, Order(0));
        cross_thread(path, Order(3));
    }
}

#[test]
fn arena_addresses_are_aligned_like_frame_numbers() {
    for start in [0u64, 3, 1000] {
        let za = ZoneAllocator::with_arena(
            Config::single_zone(ZoneType::Normal, Pfn(start), 8192),
            ArenaOptions::default(),
        )
        .unwrap();
        let order = za.config().max_order;
        let p = za.alloc_pages(Gfp::KERNEL, order).unwrap();
        let addr = za.page_address(p).unwrap().as_ptr() as usize;
        assert_eq!(addr % (4096 << order.0), 0, "start {start}");
        za.free_pages(p, order).unwrap();
    }
}

#[test]
fn fragments_owned_by_guards_free_themselves() {
    let za = arena(FragFreePath::default());
    let mut cache = PageFragCache::new(&za, Gfp::ATOMIC);
    let mut held = Vec::new();
    for i in 0..2000usize {
        let f = cache.alloc_frag(100 + i % 1400, 8).unwrap();
        assert_eq!(f.len(), 100 + i % 1400);
        held.push(f);
        if held.len() > 50 {
            held.swap_remove(i % held.len()); // dropped: freed
        }
    }
    // One handed over to the raw API and freed there.
    let raw = held.pop().unwrap().into_raw();
    assert_eq!(za.page_frag_free(raw.as_ptr()), Ok(()));
    drop(held);
    drop(cache);
    settled(&za);
}
