//! Times a `LocalCache`'s fill and shuffled drain, the two halves of `zonealloc
//! bench peers`'s fill/drain table, over several zones in one process, round by
//! round in turn. Each zone is 256 MiB of abstract frames with its own frame table;
//! a round fills one through a fresh cache at order 0, shuffles the blocks and frees
//! them all. Run it a few times in a row to see how much of the drain's spread
//! comes with the process or the moment rather than with the zone: zones that
//! differ only in where their tables lie print alike within one process.
//!
//! ```text
//! cargo run --release -p zonealloc --example drain -- [ROUNDS] [ZONES] [IDLE_MS]
//! ```
//!
//! Prints, per zone, the median ns per allocation of the fill and per free of the
//! drain over ROUNDS rounds (default 7), and the drain's fastest and slowest round.
//! Each round also times the frees alone: the same shuffled drain into a cache
//! whose batch exceeds the zone, so that no free flushes (dropping the cache gives
//! the blocks back after the clock stops). What a free costs there is the
//! compare-and-swap on its frame's state word and the push; the rest of the
//! drain's time is the flushes' merges. (Only where the process has no per-CPU
//! stacks, or with `PcpConfig::rseq` off: over the stacks a cache keeps nothing of
//! its own.)
//!
//! With IDLE_MS above 0 (default 0), every second round sleeps that long before
//! each zone's fill, as a process does between bursts of work or while another
//! allocator's round runs in a benchmark; the per-zone figures then cover the
//! rounds with no sleep, the frees alone are not timed (so that a round with no
//! sleep follows straight on from the one before), and two more lines set the
//! drain after a sleep beside the drain without one, eighth by eighth of the drain
//! (the median over zones and rounds of ns per free in each eighth of the
//! shuffled frees).

use std::time::{Duration, Instant};

use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};

/// A batch larger than a zone's frames: a cache with it holds every block freed
/// into it (its flush point is two batches).
const NO_FLUSH_BATCH: usize = 1 << 20;

fn shuffle(v: &mut [Pfn], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// Median, fastest and slowest of `v` (sorted in place).
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut arg = |default: usize| match args.next() {
        None => default,
        Some(s) => s.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| {
            eprintln!("usage: drain [ROUNDS] [ZONES] [IDLE_MS] (ROUNDS and ZONES positive)");
            std::process::exit(2);
        }),
    };
    let (rounds, zones) = (arg(7), arg(4));
    let idle_ms: u64 = match std::env::args().nth(3) {
        None => 0,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("usage: drain [ROUNDS] [ZONES] [IDLE_MS] (IDLE_MS a number, 0 for none)");
            std::process::exit(2);
        }),
    };
    let zas: Vec<ZoneAllocator> = (0..zones)
        .map(|_| ZoneAllocator::new(Config::with_bytes(256 << 20)).expect("a 256 MiB zone"))
        .collect();
    let mut live: Vec<Pfn> = Vec::with_capacity(1 << 16);
    let mut fill = vec![Vec::new(); zones];
    let mut drain = vec![Vec::new(); zones];
    let mut frees = vec![Vec::new(); zones];
    // [without a sleep before the round, with one][eighth of the drain]: ns per free.
    let mut eighths = vec![vec![Vec::new(); 8]; 2];
    let mut fill_after = vec![Vec::new(); 2];
    for r in 0..rounds {
        let slept = idle_ms > 0 && r % 2 == 1;
        for (i, za) in zas.iter().enumerate() {
            if slept {
                std::thread::sleep(Duration::from_millis(idle_ms));
            }
            live.clear();
            let mut cache = za.local_cache(Gfp::KERNEL).expect("a zone serves KERNEL");
            let t = Instant::now();
            while let Ok(p) = cache.alloc(Order(0)) {
                live.push(p);
            }
            let f = t.elapsed().as_secs_f64() * 1e9 / live.len() as f64;
            fill_after[slept as usize].push(f);
            shuffle(&mut live, 0x9e37_79b9_7f4a_7c15 ^ (r * zones + i) as u64);
            let t = Instant::now();
            for (j, part) in live.chunks(live.len().div_ceil(8).max(1)).enumerate() {
                let tj = Instant::now();
                for &p in part {
                    cache.free(p, Order(0)).expect("each block is freed once");
                }
                eighths[slept as usize][j]
                    .push(tj.elapsed().as_secs_f64() * 1e9 / part.len() as f64);
            }
            let d = t.elapsed().as_secs_f64() * 1e9 / live.len() as f64;
            drop(cache);
            if !slept {
                fill[i].push(f);
                drain[i].push(d);
            }
            if idle_ms > 0 || za.uses_cpu_stacks() {
                // The frees alone would run between one round and the next: left
                // out, so that a round with no sleep follows straight on from the
                // one before. Over the per-CPU stacks a cache holds nothing of its
                // own, so no batch keeps its frees from flushing.
                continue;
            }

            // The frees alone. Such a cache never refills, so its blocks come from
            // `alloc_pages`; an untimed pass through it first grows its stack to
            // the zone's size, so that the timed frees reallocate nothing.
            live.clear();
            let mut cache = za
                .local_cache(Gfp::KERNEL)
                .expect("a zone serves KERNEL")
                .with_batch(NO_FLUSH_BATCH);
            while let Ok(p) = cache.alloc(Order(0)) {
                live.push(p);
            }
            for &p in &live {
                cache.free(p, Order(0)).expect("each block is freed once");
            }
            for p in live.iter_mut() {
                *p = cache.alloc(Order(0)).expect("the cache holds every block");
            }
            shuffle(&mut live, 0x7f4a_7c15_9e37_79b9 ^ (r * zones + i) as u64);
            let t = Instant::now();
            for &p in &live {
                cache.free(p, Order(0)).expect("each block is freed once");
            }
            frees[i].push(t.elapsed().as_secs_f64() * 1e9 / live.len() as f64);
        }
    }
    for i in 0..zones {
        let (f, _, _) = spread(&mut fill[i]);
        let (d, lo, hi) = spread(&mut drain[i]);
        let alone = if frees[i].is_empty() {
            String::new()
        } else {
            format!(", the frees alone {:.1} ns", spread(&mut frees[i]).0)
        };
        println!("zone {i}: fill {f:.1} ns, drain {d:.1} ns ({lo:.1} – {hi:.1}){alone}");
    }
    if idle_ms > 0 {
        let labels = [
            "no sleep before".to_string(),
            format!("after a sleep of {idle_ms} ms"),
        ];
        for (k, what) in labels.iter().enumerate() {
            if fill_after[k].is_empty() {
                continue;
            }
            let (f, _, _) = spread(&mut fill_after[k]);
            let by: Vec<String> = eighths[k]
                .iter_mut()
                .filter(|v| !v.is_empty())
                .map(|v| format!("{:.1}", spread(v).0))
                .collect();
            println!(
                "{what}: fill {f:.1} ns; drain by eighths {} ns a free",
                by.join(" / ")
            );
        }
    }
}
