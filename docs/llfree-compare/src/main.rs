//! zonealloc's raw API beside LLFree, round by round in one process (see README.md).

use std::time::Instant;

use llfree::{Alloc, Classing, FrameId, Init, LLFree, MetaData};
use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};

/// 1 GiB of 4 KiB frames.
const FRAMES: usize = 1 << 18;

/// The same xorshift shuffle for both allocators' blocks.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

#[allow(unsafe_code)]
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is an empty set; the call reads it only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// ns per call over `n` calls started at `t`.
fn per_call(t: Instant, n: usize) -> f64 {
    t.elapsed().as_secs_f64() * 1e9 / n.max(1) as f64
}

fn main() {
    pin_to_cpu0();
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(7);
    let only9 = std::env::var_os("ONLY9").is_some();
    let (classing, request) = Classing::simple(2);
    let size = LLFree::metadata_size(&classing, FRAMES);
    let ll = LLFree::new(FRAMES, Init::FreeAll, &classing, MetaData::alloc(&size))
        .expect("LLFree over 1 GiB");
    let za = ZoneAllocator::new(Config::with_bytes((FRAMES as u64) << 12)).expect("1 GiB zone");
    println!("zonealloc on the per-CPU stacks: {}", za.uses_cpu_stacks());

    let orders: &[usize] = if only9 { &[9] } else { &[0, 9] };
    // [llfree, zonealloc][order index][alloc, free]: ns per call, one per round.
    let mut t = vec![vec![[Vec::new(), Vec::new()]; orders.len()]; 2];
    let mut lv: Vec<FrameId> = Vec::with_capacity(FRAMES);
    let mut zv: Vec<Pfn> = Vec::with_capacity(FRAMES);
    for r in 0..rounds {
        for (k, &o) in orders.iter().enumerate() {
            let seed = 77 + r as u64;
            lv.clear();
            let s = Instant::now();
            while let Ok((f, _)) = ll.get(None, request(o, 0)) {
                lv.push(f);
            }
            t[0][k][0].push(per_call(s, lv.len()));
            shuffle(&mut lv, seed);
            let s = Instant::now();
            for &f in &lv {
                ll.put(f, request(o, 0)).expect("LLFree frees its own frame");
            }
            t[0][k][1].push(per_call(s, lv.len()));

            zv.clear();
            let s = Instant::now();
            while let Ok(p) = za.alloc_pages(Gfp::KERNEL, Order(o as u8)) {
                zv.push(p);
            }
            t[1][k][0].push(per_call(s, zv.len()));
            shuffle(&mut zv, seed);
            let s = Instant::now();
            for &p in &zv {
                za.free_pages(p, Order(o as u8)).expect("each block is freed once");
            }
            t[1][k][1].push(per_call(s, zv.len()));
            if r == 0 {
                println!(
                    "order {o}: LLFree {} blocks, zonealloc {} (its watermark reserve kept)",
                    lv.len(),
                    zv.len()
                );
            }
        }
    }
    println!("ns per call, median (min-max) of {rounds} rounds, 1 GiB, one thread on CPU 0");
    for (k, &o) in orders.iter().enumerate() {
        for (j, what) in ["alloc", "free, shuffled"].iter().enumerate() {
            let mut med = [0.0; 2];
            let mut cells = Vec::new();
            for a in 0..2 {
                let v = &mut t[a][k][j];
                v.sort_by(f64::total_cmp);
                med[a] = v[v.len() / 2];
                cells.push(format!("{:6.1} ({:.1}-{:.1})", med[a], v[0], v[v.len() - 1]));
            }
            println!(
                "order {o} {what:15} LLFree {}  zonealloc {}  ratio {:.2}",
                cells[0],
                cells[1],
                med[1] / med[0]
            );
        }
    }
}
