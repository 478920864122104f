//! A pool of worker threads, each with its own `LocalCache` moved in, writing the
//! blocks it allocates through guards: no `unsafe`, no lifetime puzzles.
//!
//! `std::thread::spawn` needs what it moves to live for the whole program, and a
//! cache borrows its allocator; so the allocator lives in a `static` (`OnceLock`),
//! which is what a process-wide page allocator is anyway. Scoped threads
//! (`std::thread::scope`) take a cache of an allocator on the stack just as well
//! (see `LocalCache::alloc_block`).
//!
//! Run: `cargo run --release --example threads`.

use std::sync::OnceLock;
use std::thread;

use zonealloc::{Arena, ArenaOptions, Config, Gfp, Order, ZoneAllocator};

static ALLOCATOR: OnceLock<ZoneAllocator<Arena>> = OnceLock::new();

const THREADS: usize = 4;
const BLOCKS: usize = 10_000;

fn main() {
    let za = ALLOCATOR.get_or_init(|| {
        let config = Config {
            nr_cpus: THREADS,
            ..Config::with_bytes(64 << 20)
        };
        ZoneAllocator::with_arena(config, ArenaOptions::default()).expect("a 64 MiB arena")
    });
    let workers: Vec<_> = (0..THREADS)
        .map(|cpu| {
            // The cache is made here and moved into its thread.
            let mut cache = za.local_cache_on(cpu, Gfp::KERNEL).expect("a cache");
            thread::spawn(move || {
                let mut written = 0usize;
                for i in 0..BLOCKS {
                    let order = Order((i % 3) as u8);
                    let mut block = cache.alloc_block(order).expect("memory");
                    let bytes = block.data_mut();
                    bytes.fill(cpu as u8);
                    written += bytes.len();
                    cache.free_block(block).expect("the guard's own block");
                }
                written
            })
        })
        .collect();
    let written: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    za.drain_all_pages();
    println!(
        "{THREADS} threads wrote {} MiB through guarded blocks; free again: {} of {} pages",
        written >> 20,
        za.nr_free_pages(),
        za.managed_pages()
    );
    assert_eq!(za.nr_free_pages(), za.managed_pages());
}
