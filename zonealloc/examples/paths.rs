//! Runs one allocation path `N` times, for counting what a call costs with a tool
//! that counts the whole process (`docs/count-paths.sh` runs it under cachegrind
//! at `N` and `2N` and divides the difference by `N`, so set-up cancels out).
//!
//! ```text
//! cargo run --release -p zonealloc --example paths -- PATH N
//! ```
//!
//! PATH is one of:
//! * `local-pair`: `LocalCache::alloc` + `free` of one order-0 block, `N` pairs;
//! * `pcp-pair`: `alloc_pages_on` + `free_pages_on` (CPU 0), `N` pairs;
//! * `local-fill`: `N` order-0 allocations through a `LocalCache` from a fresh zone;
//! * `local-drain`: `N` order-0 pages allocated, shuffled, then freed through a
//!   `LocalCache` (the allocations are counted too: subtract `local-fill`);
//! * `pcp-fill`, `pcp-drain`: the same through `alloc_pages_on` / `free_pages_on`;
//! * `raw-pair`, `raw-fill`, `raw-drain`: the same through `alloc_pages` /
//!   `free_pages` on the CPU the thread runs on (the per-CPU stacks where the
//!   process has restartable sequences; cachegrind has none, so under it these
//!   take the per-CPU lists' try-lock path).
//!
//! With `PATHS_STACKS=0` the allocator is built without the per-CPU stacks
//! (`PcpConfig::rseq` off): the raw paths take the lists, and a `LocalCache`
//! holds blocks of its own, as on targets without restartable sequences.
//!
//! With `PATHS_NS=1` it also prints the wall-clock nanoseconds per call (the
//! whole run divided by `N`: set-up included, so use a large `N`), for paths that
//! tools cannot count.

use std::hint::black_box;

use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};

fn shuffled(mut v: Vec<Pfn>) -> Vec<Pfn> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: paths PATH N (see the source for the paths)");
        std::process::exit(2);
    };
    // 1 GiB of abstract frames: room for the fills, and the same zone every time.
    let stacks = std::env::var_os("PATHS_STACKS").is_none_or(|v| v != "0");
    let za = ZoneAllocator::new(Config {
        nr_cpus: 1,
        pcp: zonealloc::PcpConfig {
            rseq: stacks,
            ..Default::default()
        },
        ..Config::with_bytes(1 << 30)
    })
    .expect("a 1 GiB zone");
    let order = Order(0);
    let t0 = std::time::Instant::now();
    match path.as_str() {
        "local-pair" => {
            let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
            for _ in 0..n {
                let p = c.alloc(order).unwrap();
                c.free(black_box(p), order).unwrap();
            }
        }
        "pcp-pair" => {
            for _ in 0..n {
                let p = za.alloc_pages_on(0, Gfp::KERNEL, order).unwrap();
                za.free_pages_on(0, black_box(p), order).unwrap();
            }
        }
        "local-fill" | "local-drain" => {
            let mut c = za.local_cache_on(0, Gfp::KERNEL).unwrap();
            let got: Vec<Pfn> = (0..n).map(|_| c.alloc(order).unwrap()).collect();
            if path == "local-drain" {
                for p in shuffled(got) {
                    c.free(p, order).unwrap();
                }
            } else {
                black_box(got);
            }
        }
        "pcp-fill" | "pcp-drain" => {
            let got: Vec<Pfn> = (0..n)
                .map(|_| za.alloc_pages_on(0, Gfp::KERNEL, order).unwrap())
                .collect();
            if path == "pcp-drain" {
                for p in shuffled(got) {
                    za.free_pages_on(0, p, order).unwrap();
                }
            } else {
                black_box(got);
            }
        }
        "raw-pair" => {
            for _ in 0..n {
                let p = za.alloc_pages(Gfp::KERNEL, order).unwrap();
                za.free_pages(black_box(p), order).unwrap();
            }
        }
        "raw-fill" | "raw-drain" => {
            let got: Vec<Pfn> = (0..n)
                .map(|_| za.alloc_pages(Gfp::KERNEL, order).unwrap())
                .collect();
            if path == "raw-drain" {
                for p in shuffled(got) {
                    za.free_pages(p, order).unwrap();
                }
            } else {
                black_box(got);
            }
        }
        other => {
            eprintln!("unknown path {other:?}");
            std::process::exit(2);
        }
    }
    if std::env::var_os("PATHS_NS").is_some_and(|v| v == "1") {
        println!(
            "{path}: {:.1} ns per call",
            t0.elapsed().as_nanos() as f64 / n as f64
        );
    }
}
