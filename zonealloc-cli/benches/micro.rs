//! Criterion micro-benchmarks of single allocator paths.
//!
//! `cargo bench -p zonealloc-cli --bench micro [FILTER]`. Each benchmark times one
//! path on one thread over abstract frames (no memory behind them), so what is timed
//! is the allocator's own work:
//!
//! * `pair/order0-pcp-on`, `pair/order0-pcp-off`: `alloc_pages` + `free_pages` of one
//!   order-0 page, back to back (per-CPU lists on, and off: zone lock every call).
//! * `pair/order3`, `pair/order9`: the same for order 3 (largest ordinary per-CPU
//!   order) and order 9 (pageblock order, which has its own per-CPU lists).
//! * `free-split-order9/page-by-page`: `free_pages` of the 512 pages of an order-9
//!   block made independent by `split_page` (seed (a)'s "before"); the allocation and
//!   split are set-up, not timed.
//! * `stats/*`: `buddyinfo()` and `pagetypeinfo()` (lock-free counters) against
//!   `pagetypeinfo_walked()` (list walks under the zone lock, Linux's way) on a 4 GiB
//!   zone fragmented into about 260,000 free blocks (seed (e)).
//!
//! The suite-level comparisons, interleaved and with ratios, are `zonealloc bench`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use zonealloc::{Config, Gfp, Order, PcpConfig, Pfn, ZoneAllocator, ZoneType};

/// 1 GiB: Linux's formulas give `batch` 63 from this size up.
const ZONE_PAGES: u64 = 1 << 18;
/// 4 GiB, for the statistics benchmarks.
const STATS_ZONE_PAGES: u64 = 1 << 20;

fn allocator(nr_pages: u64, pcp: PcpConfig) -> ZoneAllocator {
    ZoneAllocator::new(Config {
        pcp,
        ..Config::single_zone(ZoneType::Normal, Pfn(0), nr_pages)
    })
    .expect("a single-zone configuration is valid")
}

fn pair(za: &ZoneAllocator, order: Order) {
    let pfn = za
        .alloc_pages(Gfp::KERNEL, order)
        .expect("the zone is nearly empty");
    za.free_pages(black_box(pfn), order)
        .expect("freeing the block just allocated");
}

fn pairs(c: &mut Criterion) {
    let on = allocator(ZONE_PAGES, PcpConfig::default());
    let off = allocator(
        ZONE_PAGES,
        PcpConfig {
            enabled: false,
            ..PcpConfig::default()
        },
    );
    let mut g = c.benchmark_group("pair");
    g.bench_function("order0-pcp-on", |b| b.iter(|| pair(&on, Order(0))));
    g.bench_function("order0-pcp-off", |b| b.iter(|| pair(&off, Order(0))));
    g.bench_function("order3", |b| b.iter(|| pair(&on, Order(3))));
    g.bench_function("order9", |b| b.iter(|| pair(&on, Order(9))));
    g.finish();
}

fn free_split(c: &mut Criterion) {
    let za = allocator(ZONE_PAGES, PcpConfig::default());
    let order = Order(9);
    let mut g = c.benchmark_group("free-split-order9");
    g.bench_function("page-by-page", |b| {
        b.iter_batched(
            || {
                let pfn = za
                    .alloc_pages(Gfp::KERNEL, order)
                    .expect("64 order-9 blocks fit many times over");
                za.split_page(pfn, order).expect("splitting a fresh block");
                pfn
            },
            |pfn| {
                for i in 0..order.nr_pages() {
                    za.free_pages(pfn.add(i), Order(0))
                        .expect("freeing a split page");
                }
            },
            // At most 64 blocks (32768 pages) set up at once.
            BatchSize::NumIterations(64),
        );
    });
    g.finish();
}

/// Leaves the zone with many short free lists spread over every order and type:
/// allocates about 60 % of it in blocks of orders 0..=3 of the three ordinary
/// migratetypes, then frees a pseudo-random half of them.
fn fragmented(nr_pages: u64) -> (ZoneAllocator, Vec<(Pfn, Order)>) {
    let za = allocator(nr_pages, PcpConfig::default());
    let gfps = [
        Gfp::KERNEL,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::KERNEL | Gfp::RECLAIMABLE,
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut live = Vec::new();
    let mut pages = 0;
    while pages < nr_pages * 6 / 10 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let order = Order((x % 4) as u8);
        let pfn = za
            .alloc_pages(gfps[(x >> 8) as usize % 3], order)
            .expect("40 % of the zone stays free");
        live.push((pfn, order));
        pages += order.nr_pages();
    }
    let mut kept = Vec::new();
    for (i, (pfn, order)) in live.into_iter().enumerate() {
        if (i as u64).wrapping_mul(0x9e37_79b9) >> 7 & 1 == 0 {
            za.free_pages(pfn, order).expect("freeing a live block");
        } else {
            kept.push((pfn, order));
        }
    }
    za.drain_all_pages();
    (za, kept)
}

fn stats(c: &mut Criterion) {
    let (za, _kept) = fragmented(STATS_ZONE_PAGES);
    let mut g = c.benchmark_group("stats");
    g.bench_function("buddyinfo", |b| b.iter(|| black_box(za.buddyinfo())));
    g.bench_function("pagetypeinfo", |b| b.iter(|| black_box(za.pagetypeinfo())));
    g.bench_function("pagetypeinfo_walked", |b| {
        b.iter(|| black_box(za.pagetypeinfo_walked()))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = micro;
    config = config();
    targets = pairs, free_split, stats
}
criterion_main!(micro);
