//! `docs/ab-cache.sh`'s program: the `LocalCache` fill and shuffled drain of two
//! versions of zonealloc (`zonealloc_base`, `zonealloc_new`) in one process, each
//! over its own 256 MiB zone of abstract frames, interleaved chunk by chunk.
//!
//! A round fills both zones at order 0 through a fresh cache each, `CHUNK` calls
//! of one version then `CHUNK` of the other (which goes first alternates), shuffles
//! both lists of blocks with the same seed, and frees them the same way. Each
//! chunk's time is paired with the other version's chunk beside it, a few
//! microseconds apart, so both see the same state of the machine; the medians of
//! the chunk-by-chunk ratios are what the program is for. Round 0 is a warm-up.
//!
//! With `fresh`, every round runs on two new zones and leaves the old ones
//! untouched (leaked, never dropped): for a version whose drain leaves its lists
//! unusable, as a probe that leaves part of the work out does.
//!
//! usage: ab-cache [ROUNDS] [fresh]

use std::time::Instant;

/// Calls per chunk.
const CHUNK: usize = 1024;

fn shuffle(v: &mut [u64], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `n` calls of `f`.
fn timed(n: usize, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e9 / n.max(1) as f64
}

#[derive(Default)]
struct Figures {
    base: Vec<f64>,
    new: Vec<f64>,
    ratio: Vec<f64>,
}

impl Figures {
    fn push(&mut self, base: f64, new: f64) {
        self.base.push(base);
        self.new.push(new);
        self.ratio.push(new / base);
    }

    fn line(&mut self, what: &str) -> String {
        let n = self.ratio.len();
        let (b, nw, r) = (
            median(&mut self.base),
            median(&mut self.new),
            median(&mut self.ratio),
        );
        let (lo, hi) = (self.ratio[n / 10], self.ratio[n - 1 - n / 10]);
        format!(
            "{what}: base {b:.2} ns, new {nw:.2} ns a call; new / base chunk by chunk: \
             median {r:.3} (10th-90th percentile {lo:.3}-{hi:.3}, {n} pairs)"
        )
    }
}

fn main() {
    let usage = || -> ! {
        eprintln!("usage: ab-cache [ROUNDS] [fresh] (ROUNDS a positive number)");
        std::process::exit(2)
    };
    let mut args = std::env::args().skip(1);
    let rounds: usize = match args.next() {
        None => 6,
        Some(s) => s.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| usage()),
    };
    let fresh = match args.next().as_deref() {
        None => false,
        Some("fresh") => true,
        Some(_) => usage(),
    };
    let zone_a = || {
        zonealloc_base::ZoneAllocator::new(zonealloc_base::Config::with_bytes(256 << 20))
            .expect("a 256 MiB zone")
    };
    let zone_b = || {
        zonealloc_new::ZoneAllocator::new(zonealloc_new::Config::with_bytes(256 << 20))
            .expect("a 256 MiB zone")
    };
    // `fresh` leaks each round's zones: `Box::leak` gives them the program's
    // lifetime, so a cache over one may be forgotten rather than dropped.
    let (mut a, mut b) = (
        &*Box::leak(Box::new(zone_a())),
        &*Box::leak(Box::new(zone_b())),
    );
    let (mut fill, mut drain) = (Figures::default(), Figures::default());
    let mut la: Vec<u64> = Vec::with_capacity(1 << 16);
    let mut lb: Vec<u64> = Vec::with_capacity(1 << 16);
    for r in 0..=rounds {
        if fresh && r > 0 {
            (a, b) = (Box::leak(Box::new(zone_a())), Box::leak(Box::new(zone_b())));
        }
        let mut ca = a.local_cache(zonealloc_base::Gfp::KERNEL).expect("KERNEL");
        let mut cb = b.local_cache(zonealloc_new::Gfp::KERNEL).expect("KERNEL");
        la.clear();
        lb.clear();
        let (mut full_a, mut full_b) = (false, false);
        let mut k = 0;
        while !(full_a && full_b) {
            let mut fill_a = || {
                timed(CHUNK, || {
                    for _ in 0..CHUNK {
                        match ca.alloc(zonealloc_base::Order(0)) {
                            Ok(p) => la.push(p.0),
                            Err(_) => return full_a = true,
                        }
                    }
                })
            };
            let mut fill_b = || {
                timed(CHUNK, || {
                    for _ in 0..CHUNK {
                        match cb.alloc(zonealloc_new::Order(0)) {
                            Ok(p) => lb.push(p.0),
                            Err(_) => return full_b = true,
                        }
                    }
                })
            };
            let (ta, tb) = if k % 2 == 0 {
                let ta = fill_a();
                (ta, fill_b())
            } else {
                let tb = fill_b();
                (fill_a(), tb)
            };
            k += 1;
            if r > 0 && !(full_a || full_b) {
                fill.push(ta, tb);
            }
        }
        assert_eq!(la.len(), lb.len(), "the two zones hold the same blocks");
        let seed = 0x9e37_79b9_7f4a_7c15 ^ r as u64;
        shuffle(&mut la, seed);
        shuffle(&mut lb, seed);
        for (k, (xa, xb)) in la.chunks(CHUNK).zip(lb.chunks(CHUNK)).enumerate() {
            let free_a = |ca: &mut zonealloc_base::LocalCache<'_, _>| {
                timed(xa.len(), || {
                    for &p in xa {
                        ca.free(zonealloc_base::Pfn(p), zonealloc_base::Order(0))
                            .expect("each block is freed once");
                    }
                })
            };
            let free_b = |cb: &mut zonealloc_new::LocalCache<'_, _>| {
                timed(xb.len(), || {
                    for &p in xb {
                        cb.free(zonealloc_new::Pfn(p), zonealloc_new::Order(0))
                            .expect("each block is freed once");
                    }
                })
            };
            let (ta, tb) = if k % 2 == 0 {
                let ta = free_a(&mut ca);
                (ta, free_b(&mut cb))
            } else {
                let tb = free_b(&mut cb);
                (free_a(&mut ca), tb)
            };
            if r > 0 && xa.len() == CHUNK {
                drain.push(ta, tb);
            }
        }
        if fresh {
            // Dropped, a cache would flush into lists the probe may have broken.
            std::mem::forget(ca);
            std::mem::forget(cb);
        }
    }
    println!("{}", fill.line("fill"));
    println!("{}", drain.line("drain"));
}
