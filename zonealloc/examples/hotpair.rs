//! Quick hot-path probe: ns per order-0 alloc+free pair on one thread.
use std::time::Instant;
use zonealloc::*;
fn main() {
    for pcp in [true] {
        let za = ZoneAllocator::new(Config {
            pcp: PcpConfig {
                enabled: pcp,
                ..PcpConfig::default()
            },
            ..Config::with_bytes(1 << 30)
        })
        .unwrap();
        for _ in 0..3 {
            let n = 5_000_000;
            let t = Instant::now();
            for _ in 0..n {
                let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
                za.free_pages(p, Order(0)).unwrap();
            }
            println!(
                "pcp={pcp}: {:.1} ns/pair",
                t.elapsed().as_nanos() as f64 / n as f64
            );
        }
    }
}
