//! Debug modes (poisoning, init-on-alloc/free, bad-page retirement) and fault
//! injection at every site.

#[path = "support/figures.rs"]
mod figures;

use zonealloc::*;

fn arena(debug: DebugConfig) -> ZoneAllocator<Arena> {
    ZoneAllocator::with_arena(
        Config {
            nr_cpus: 1,
            debug,
            ..Config::with_bytes(8 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap()
}

/// Writes a byte into a page the test owns or has just freed.
fn poke(za: &ZoneAllocator<Arena>, pfn: Pfn, offset: usize, byte: u8) {
    let p = za.page_address(pfn).unwrap();
    // SAFETY: the arena maps every frame; the test writes inside one page.
    unsafe { p.as_ptr().add(offset).write_volatile(byte) };
}

#[test]
fn use_after_free_is_reported_and_the_block_retired() {
    let za = arena(DebugConfig {
        poison: true,
        ..DebugConfig::default()
    });
    let pfn = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    za.free_pages(pfn, Order(0)).unwrap();
    // A write after free...
    poke(&za, pfn, 123, 0x42);
    // ...is found when the page is handed out again (LIFO: it is next).
    let again = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    assert_ne!(again, pfn, "a corrupted page must not be handed out");
    let reports = za.bad_page_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].pfn, pfn);
    assert_eq!(reports[0].offset, 123);
    assert_eq!(reports[0].found, 0x42);
    assert_eq!(za.frame_state(pfn), Some(FrameState::Bad));
    // The retired frame is neither free nor allocatable; a free of it is refused.
    assert_eq!(za.free_pages(pfn, Order(0)), Err(FreeError::BadPage(pfn)));
    za.free_pages(again, Order(0)).unwrap();
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.bad_pages, 1);
    assert_eq!(za.nr_free_pages() + 1, za.managed_pages());
}

#[test]
fn clean_frees_pass_the_poison_check() {
    let za = arena(DebugConfig {
        poison: true,
        ..DebugConfig::default()
    });
    for _ in 0..1000 {
        let p = za.alloc_pages(Gfp::KERNEL, Order(2)).unwrap();
        poke(&za, p, 0, 1);
        za.free_pages(p, Order(2)).unwrap();
    }
    assert!(za.bad_page_reports().is_empty());
}

#[test]
fn init_on_free_and_on_alloc_zero_pages() {
    for debug in [
        DebugConfig {
            init_on_alloc: true,
            ..DebugConfig::default()
        },
        DebugConfig {
            init_on_free: true,
            ..DebugConfig::default()
        },
    ] {
        let za = arena(debug);
        let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
        poke(&za, p, 7, 9);
        za.free_pages(p, Order(0)).unwrap();
        let q = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
        let bytes = za.page_address(q).unwrap();
        // SAFETY: `q` is allocated to the test; the page is readable.
        let page = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), 4096) };
        assert!(page.iter().all(|&b| b == 0), "{debug:?}");
        za.free_pages(q, Order(0)).unwrap();
    }
}

/// With every n-th call at a site failing, callers unwind: allocations fail with a
/// typed error, nothing is lost, and a final drain returns every frame.
#[test]
fn injected_faults_lose_nothing() {
    let za = ZoneAllocator::with_arena(
        Config {
            nr_cpus: 2,
            ..Config::with_bytes(16 << 20)
        },
        ArenaOptions::default(),
    )
    .unwrap();
    for site in FaultSite::ALL {
        za.inject_faults(site, 3);
    }
    let mut held = Vec::new();
    let mut failures = 0;
    for i in 0..3000u64 {
        let order = Order((i % 4) as u8);
        match za.alloc_pages_on((i % 2) as usize, Gfp::KERNEL, order) {
            Ok(p) => held.push((p, order)),
            Err(AllocError::NoMemory { .. }) => failures += 1,
            Err(e) => panic!("{e}"),
        }
        if i % 3 == 0 {
            if let Some((p, o)) = held.pop() {
                za.free_pages_on(((i / 3) % 2) as usize, p, o).unwrap();
            }
        }
        let mut bulk = vec![None; 8];
        let n = za.alloc_pages_bulk(Gfp::KERNEL, &mut bulk);
        let got: Vec<Pfn> = bulk.iter().flatten().copied().collect();
        assert_eq!(got.len(), n);
        za.free_pages_bulk(&got).unwrap();
    }
    {
        let mut cache = PageFragCache::with_refill_order(&za, Gfp::ATOMIC, Order(0));
        let mut frags = Vec::new();
        for _ in 0..200 {
            match cache.alloc(2000, 8) {
                Ok(f) => frags.push(f),
                Err(FragError::NoMemory(_)) => failures += 1,
                Err(e) => panic!("{e}"),
            }
        }
        for f in frags {
            za.page_frag_free(f.as_ptr()).unwrap();
        }
    }
    {
        let space = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
        let mut areas = Vec::new();
        for i in 0..300usize {
            match space.vmalloc((1 + i % 40) * 4096) {
                Ok(a) => areas.push(a.addr()),
                Err(_) => failures += 1,
            }
        }
        for a in areas {
            space.vfree(a).unwrap();
        }
    }
    assert!(za.faults_injected(FaultSite::VmallocBacking) > 0);
    assert!(failures > 0);
    assert!(za.faults_injected(FaultSite::Alloc) > 0);
    assert!(za.faults_injected(FaultSite::PcpRefill) > 0);
    assert!(za.faults_injected(FaultSite::FragRefill) > 0);
    let injected: Vec<(String, u64)> = FaultSite::ALL
        .iter()
        .map(|&s| (format!("faults:{s:?}"), za.faults_injected(s)))
        .collect();
    for site in FaultSite::ALL {
        za.inject_faults(site, 0);
    }
    for (p, o) in held {
        za.free_pages(p, o).unwrap();
    }
    za.drain_all_pages();
    za.check_invariants().unwrap();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
    let mut f = injected;
    f.push(("frames_lost".into(), 0));
    f.push(("violations".into(), 0));
    figures::record("faults", env!("CARGO_MANIFEST_DIR"), &f);
}
