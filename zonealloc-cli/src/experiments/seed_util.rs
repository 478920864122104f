//! Small helpers shared by the seed experiments (`contig`, `vmalloc`, `page_fault1`,
//! `page_frag`, `pagetypeinfo`): a seeded generator (also the one of `pcp` and
//! `peers`), per-round ratios, the "seed vs ours" note, and a few facts about the
//! machine (last-level cache, resident memory).
//!
//! Nothing here measures; the experiments time through `Ctx::compare`.

use crate::affinity;
use crate::harness::{mann_whitney_p, Samples, ALPHA};

/// xorshift64*: a small deterministic generator, one per thread or per test.
///
/// Not zonealloc-trace's `SplitMix64`: the workloads of `pcp`, `peers` and the seed
/// experiments are defined by this stream, and a seed must keep naming the same one.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// "s" unless `n` is 1.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Speed-up of `after` over `before`, round by round: both ran in the same round of
/// the same `Ctx::compare` call, so each round gives one ratio (`before / after` for
/// times, `after / before` for throughputs). Returns (median, min, max) of those
/// ratios: the spread that the ratio of medians hides.
pub fn round_speedups(before: &Samples, after: &Samples, lower_is_better: bool) -> (f64, f64, f64) {
    let mut r: Vec<f64> = before
        .values
        .iter()
        .zip(&after.values)
        .map(|(&b, &a)| if lower_is_better { b / a } else { a / b })
        .collect();
    r.sort_by(f64::total_cmp);
    let med = crate::harness::median(&r);
    (
        med,
        r.first().copied().unwrap_or(f64::NAN),
        r.last().copied().unwrap_or(f64::NAN),
    )
}

/// Speed-up of `after` over `before` as a ratio of medians (> 1: `after` is better).
pub fn median_speedup(before: &Samples, after: &Samples, lower_is_better: bool) -> f64 {
    if lower_is_better {
        before.median() / after.median()
    } else {
        after.median() / before.median()
    }
}

/// "2.31x (per round 2.10x – 2.52x; significant, p=0.008)": the ratio of medians,
/// the spread of the per-round ratios, and the Mann–Whitney verdict of the tables.
pub fn speedup_text(before: &Samples, after: &Samples, lower_is_better: bool) -> String {
    let (_, lo, hi) = round_speedups(before, after, lower_is_better);
    format!(
        "{:.2}x (per round {lo:.2}x – {hi:.2}x; {})",
        median_speedup(before, after, lower_is_better),
        significance_text(before, after)
    )
}

/// "p<0.001" or "p=0.421".
pub fn p_text(p: f64) -> String {
    if p < 0.001 {
        "p<0.001".to_owned()
    } else {
        format!("p={p:.3}")
    }
}

/// "significant, p=0.008" or "not significant, p=0.421" (two-sided Mann–Whitney at
/// the harness's α).
pub fn significance_text(before: &Samples, after: &Samples) -> String {
    let p = mann_whitney_p(&after.values, &before.values);
    let p_text = p_text(p);
    if p < ALPHA {
        format!("significant, {p_text}")
    } else {
        format!("not significant, {p_text}")
    }
}

/// Size of the last-level (L3) cache of CPU 0 in bytes, from sysfs, if it says.
pub fn llc_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size").ok()?;
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// Resident memory of this process in bytes (/proc/self/statm), 0 if unknown.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Bytes as "16 GiB", "32 MiB", "512 KiB".
pub fn bytes_text(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 {
        format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
    } else {
        format!("{} KiB", b >> 10)
    }
}

/// Runs `f` on a fresh thread pinned to `cpu` (if the kernel accepts it) and returns
/// its result: a single-threaded run gets a fixed CPU, so its per-CPU lists do not
/// change under it, without pinning the caller (which runs every experiment).
pub fn on_cpu<T: Send>(cpu: Option<usize>, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            if let Some(c) = cpu {
                affinity::pin_current_thread(c);
            }
            f()
        })
        .join()
        .expect("benchmark thread")
    })
}

/// How a run's threads are pinned to `cpus` (this process's CPUs), for a parameter:
/// `describe(cpus)`, or that they are not pinned when the kernel would not say.
pub fn pinning_text(cpus: &[usize], describe: impl FnOnce(&[usize]) -> String) -> String {
    if cpus.is_empty() {
        "no (affinity unknown)".to_owned()
    } else {
        describe(cpus)
    }
}

/// The first CPU this process may use (`None` if the kernel would not say).
pub fn first_cpu() -> Option<usize> {
    affinity::allowed_cpus().first().copied()
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn rng_stream_is_fixed() {
        // The workloads are defined by this stream: it must not change.
        let mut r = Rng::new(7);
        assert_eq!(
            [r.next(), r.next(), r.next()],
            [
                0x671e_db9d_e9e9_afb7,
                0x67e5_3669_d5fb_6b34,
                0x974e_a030_4616_1d80
            ]
        );
    }
}
