//! Event counters and pageblock types through the public API.

use zonealloc::*;

#[test]
fn fallbacks_and_claims_are_counted() {
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        pcp: PcpConfig {
            enabled: false,
            ..PcpConfig::default()
        },
        ..Config::with_bytes(64 << 20)
    })
    .unwrap();
    // Every pageblock starts Movable: the first unmovable allocation must fall back
    // and, being unmovable, claims a whole pageblock.
    let before = za.zone_events()[0];
    assert_eq!(before.fallbacks, 0);
    let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    let after = za.zone_events()[0];
    assert_eq!(after.fallbacks, 1);
    assert_eq!(after.pageblocks_claimed, 1);
    assert_eq!(after.pgalloc, 1);
    assert_eq!(za.pageblock_migratetype(p), Some(Migratetype::Unmovable));
    // Later unmovable allocations use the claimed block: no new fallback.
    let q = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    assert_eq!(za.zone_events()[0].fallbacks, 1);
    za.free_pages(p, Order(0)).unwrap();
    za.free_pages(q, Order(0)).unwrap();
    assert_eq!(za.zone_events()[0].pgfree, 2);
    assert_eq!(za.pageblock_migratetype(Pfn(1 << 40)), None);
}
