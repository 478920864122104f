//! The demo (`cargo run --release --example demo`): a tour of zonealloc over
//! real memory, then a measurement of what building an allocator costs.
//!
//! Part 1 maps a 64 MiB arena, allocates blocks of orders 0..=4 and all three ordinary
//! migratetypes, writes a pattern into every page and reads it back, frees part of the
//! blocks, and prints the statistics in Linux's `/proc` formats: buddyinfo,
//! pagetypeinfo, zoneinfo, vmstat, and the unusable-free and extfrag indices.
//!
//! Part 2 times `ZoneAllocator::new` over 1, 4 and 16 GiB worth of abstract frames (5
//! builds each: the first, and the median) and prints the cost per frame: the frame
//! table (16 bytes a frame) is allocated and scanned, and every frame is freed into the
//! buddy lists in the largest aligned blocks.
//!
//! Run: `cargo run --release --example demo` (a few seconds).

use std::time::Instant;

use zonealloc::{ArenaOptions, Config, Gfp, Order, PageBlock, ZoneAllocator};

const ARENA_BYTES: u64 = 64 << 20;
const INIT_SIZES_GIB: [u64; 3] = [1, 4, 16];
const INIT_RUNS: usize = 5;

fn main() {
    arena_tour();
    init_cost();
}

/// A small deterministic generator (xorshift64*), so every run does the same thing.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn section(title: &str) {
    println!("\n==== {title} ====");
}

fn arena_tour() {
    let za = ZoneAllocator::with_arena(Config::with_bytes(ARENA_BYTES), ArenaOptions::default())
        .expect("map the arena");
    section(&format!(
        "arena: {} MiB, {} frames of {} bytes",
        ARENA_BYTES >> 20,
        za.managed_pages(),
        za.config().page_size()
    ));

    // Allocate until about half the arena is in use: a mix of orders (mostly small,
    // as in the traced kernel) and of migratetypes.
    let gfps = [
        ("Unmovable", Gfp::KERNEL),
        ("Movable", Gfp::HIGHUSER_MOVABLE),
        ("Reclaimable", Gfp::KERNEL | Gfp::RECLAIMABLE),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut blocks: Vec<PageBlock<'_, _>> = Vec::new();
    let mut pages = 0u64;
    let mut per_type = [0u64; 3];
    while pages < za.managed_pages() / 2 {
        let r = rng.next();
        let order = Order(match r % 16 {
            0..=9 => 0,
            10..=12 => 1,
            13 => 2,
            14 => 3,
            _ => 4,
        });
        let t = ((r >> 8) % 3) as usize;
        let mut block = za
            .alloc_block(gfps[t].1, order)
            .expect("half the arena is free");
        // Write the block's pfn into every byte-aligned word of its memory.
        let pfn = block.pfn().get();
        let bytes = block.bytes_mut().expect("arena frames have memory");
        for w in bytes.chunks_exact_mut(8) {
            w.copy_from_slice(&pfn.to_le_bytes());
        }
        pages += order.nr_pages();
        per_type[t] += order.nr_pages();
        blocks.push(block);
    }
    println!(
        "allocated {} blocks, {pages} pages ({} Unmovable, {} Movable, {} Reclaimable)",
        blocks.len(),
        per_type[0],
        per_type[1],
        per_type[2]
    );

    // Read every pattern back: no two live blocks share memory.
    for b in &mut blocks {
        let pfn = b.pfn().get();
        let bytes = b.bytes_mut().unwrap();
        assert!(bytes
            .chunks_exact(8)
            .all(|w| u64::from_le_bytes(w.try_into().unwrap()) == pfn));
    }
    println!("patterns verified in all {} blocks", blocks.len());

    // Free two blocks out of three (dropping the guard frees the block): what stays
    // allocated pins the free memory around it into small pieces.
    let mut k = 0;
    blocks.retain(|_| {
        k += 1;
        k % 3 == 0
    });
    let kept: u64 = blocks.iter().map(|b| b.order().nr_pages()).sum();
    println!(
        "freed 2 blocks in 3: {} blocks, {kept} pages still allocated",
        blocks.len()
    );
    let report = za.check_invariants().expect("invariants hold");
    println!("check_invariants: {report:?}");

    section("/proc/buddyinfo");
    print!("{}", za.buddyinfo());
    section("/proc/pagetypeinfo");
    print!("{}", za.pagetypeinfo());
    section("/proc/zoneinfo");
    print!("{}", za.zoneinfo());
    section("/proc/vmstat");
    print!("{}", za.vmstat());
    section("extfrag/unusable_index");
    print!("{}", za.unusable_index());
    section("extfrag/extfrag_index");
    print!("{}", za.extfrag_index());

    drop(blocks);
    za.check_invariants().expect("invariants hold");
    section("after freeing everything: /proc/buddyinfo");
    print!("{}", za.buddyinfo());
}

fn init_cost() {
    section(&format!(
        "init cost: ZoneAllocator::new over abstract frames, {INIT_RUNS} builds per size"
    ));
    // The first build of a size maps its frame table fresh from the kernel and pays a
    // page fault per 4 KiB of it; later builds may reuse memory the C allocator kept
    // (tables up to its 32 MiB mmap threshold). Both figures are printed.
    println!(
        "{:>8} {:>10} {:>10} {:>14} {:>10} {:>16}",
        "size", "frames", "first ms", "first ns/frame", "median ms", "median ns/frame"
    );
    for gib in INIT_SIZES_GIB {
        let config = Config::with_bytes(gib << 30);
        let times: Vec<f64> = (0..INIT_RUNS)
            .map(|_| {
                let t = Instant::now();
                let za = ZoneAllocator::new(config.clone()).expect("valid config");
                let dt = t.elapsed().as_secs_f64();
                assert_eq!(za.nr_free_pages(), za.managed_pages());
                drop(za);
                dt
            })
            .collect();
        let first = times[0];
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[INIT_RUNS / 2];
        let frames = ((gib << 30) >> 12) as f64;
        println!(
            "{:>4} GiB {:>10} {:>10.1} {:>14.2} {:>10.1} {:>16.2}",
            gib,
            frames,
            first * 1e3,
            first * 1e9 / frames,
            median * 1e3,
            median * 1e9 / frames
        );
    }
}
