//! The measurement engine: named variants, run interleaved round by round in one process.
//!
//! Every comparison in the suite goes through `Ctx::compare`. It takes a list of
//! variants (a name and a closure that performs one timed run and returns one sample)
//! and runs them in rounds: in each round every variant runs once, and the starting
//! variant rotates from round to round, so no variant always runs first or last. The
//! first `warmup` rounds are run and thrown away (caches, page faults, per-CPU list
//! `high` auto-tuning). Timings on the shared 2-core machines drift by up to 50 %
//! between runs; interleaving puts that drift into every variant's spread alike,
//! instead of into the difference between them.
//!
//! ```text
//!  round 0 (warm-up): A B C      discarded
//!  round 1:           B C A
//!  round 2:           C A B      samples: A = [a1, a2, ...], B = [...], C = [...]
//!  ...
//! ```
//!
//! A `Table` then summarises chosen variants against a baseline (its first row):
//! median, min and max of the samples, the ratio of medians to the baseline's, and a
//! significance verdict.
//!
//! # Significance
//!
//! Two-sided Mann–Whitney U test (Wilcoxon rank-sum) of each row's samples against the
//! baseline's, at α = 0.05. It assumes nothing about the distribution (timings are
//! skewed, with outliers from preemption), only that samples are independent. With
//! no ties and at most 20 samples per side the p-value is exact (the U distribution
//! counted by recursion); otherwise it comes from the normal approximation with tie
//! and continuity corrections. With 5 samples each, "significant" needs U ≤ 2: the
//! two sets of runs must be almost completely separated (exact p = 0.008 at U = 0,
//! 0.016 at U = 1, 0.032 at U = 2).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde::Serialize;

use crate::affinity;

/// Significance level of the Mann–Whitney test.
pub const ALPHA: f64 = 0.05;

/// One named way of doing the thing under test. `run` performs one timed run and
/// returns its sample, in the unit of the comparison's `Metric`.
pub struct Variant<'a> {
    /// Shown in tables, charts and the JSON file.
    pub name: String,
    run: Box<dyn FnMut() -> f64 + 'a>,
}

impl<'a> Variant<'a> {
    /// A variant named `name` whose runs are `run()`.
    pub fn new(name: impl Into<String>, run: impl FnMut() -> f64 + 'a) -> Variant<'a> {
        Variant {
            name: name.into(),
            run: Box::new(run),
        }
    }
}

/// A variant's handle, returned when it is added to `Variants`: it picks that
/// variant's samples out of the comparison's results by position, so renaming a
/// label cannot break a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantId(usize);

impl VariantId {
    /// This variant's samples among `results`, what `Ctx::compare` returned for the
    /// `Variants` that issued the handle.
    pub fn of(self, results: &[Samples]) -> &Samples {
        &results[self.0]
    }
}

/// Handles by a typed key (a setting, a thread count, a peer), for comparisons whose
/// variants are added in loops.
pub struct Handles<K>(Vec<(K, VariantId)>);

impl<K: PartialEq + std::fmt::Debug> Handles<K> {
    /// The handle of the variant added for `key`.
    ///
    /// # Panics
    /// If no variant was added for `key`: a bug of the experiment.
    pub fn get(&self, key: K) -> VariantId {
        match self.0.iter().find(|(k, _)| *k == key) {
            Some(&(_, id)) => id,
            None => panic!("no variant was added for {key:?}"),
        }
    }
}

impl<K> FromIterator<(K, VariantId)> for Handles<K> {
    fn from_iter<I: IntoIterator<Item = (K, VariantId)>>(it: I) -> Handles<K> {
        Handles(it.into_iter().collect())
    }
}

/// The variants of one comparison, each added for a `VariantId`. Passed to
/// `Ctx::compare` as a slice.
#[derive(Default)]
pub struct Variants<'a>(Vec<Variant<'a>>);

impl<'a> Variants<'a> {
    /// No variants yet.
    pub fn new() -> Variants<'a> {
        Variants(Vec::new())
    }

    /// Adds the variant named `name` whose runs are `run()`; returns its handle.
    pub fn add(&mut self, name: impl Into<String>, run: impl FnMut() -> f64 + 'a) -> VariantId {
        self.0.push(Variant::new(name, run));
        VariantId(self.0.len() - 1)
    }
}

impl<'a> std::ops::Deref for Variants<'a> {
    type Target = [Variant<'a>];

    fn deref(&self) -> &[Variant<'a>] {
        &self.0
    }
}

impl<'a> std::ops::DerefMut for Variants<'a> {
    fn deref_mut(&mut self) -> &mut [Variant<'a>] {
        &mut self.0
    }
}

/// What a sample measures.
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    /// What is measured, e.g. "ns per order-0 alloc+free pair".
    pub name: String,
    /// Unit shown after numbers, e.g. "ns" or "M ops/s".
    pub unit: String,
    /// Whether smaller values are better (times) or larger (throughputs).
    pub lower_is_better: bool,
    /// Which way is better in words, where it is neither lower nor higher (a count
    /// that should match a reference's): "nearest the kernel's is better".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub better: Option<String>,
}

impl Metric {
    /// A time-like metric: lower is better.
    pub fn lower(name: &str, unit: &str) -> Metric {
        Metric {
            name: name.into(),
            unit: unit.into(),
            lower_is_better: true,
            better: None,
        }
    }

    /// A count that should match the baseline's (the first row): nearest is better,
    /// as `better` says. Rows are ranked as for a time.
    pub fn nearest(name: &str, unit: &str, better: &str) -> Metric {
        Metric {
            better: Some(better.into()),
            ..Metric::lower(name, unit)
        }
    }

    /// A throughput-like metric: higher is better.
    pub fn higher(name: &str, unit: &str) -> Metric {
        Metric {
            name: name.into(),
            unit: unit.into(),
            lower_is_better: false,
            better: None,
        }
    }
}

/// The samples of one variant from one `Ctx::compare` call, in run order.
#[derive(Clone, Debug, Serialize)]
pub struct Samples {
    /// The variant's name.
    pub variant: String,
    /// One value per measured round (warm-up rounds excluded).
    pub values: Vec<f64>,
}

impl Samples {
    /// Median (mean of the two middle values for an even count).
    pub fn median(&self) -> f64 {
        median(&self.values)
    }

    /// Smallest sample.
    pub fn min(&self) -> f64 {
        self.values.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Largest sample.
    pub fn max(&self) -> f64 {
        self.values
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max)
    }
}

/// Median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Whether a timed run of `threads` threads pins one per CPU of `cpus`: only when
/// there are that many CPUs (more threads than CPUs are left to the scheduler).
fn pinned(threads: usize, cpus: &[usize]) -> bool {
    threads <= cpus.len()
}

/// The default thread counts: 1, 2, 4 and the number of CPUs the process may use.
pub fn default_threads(nr_cpus: usize) -> Vec<usize> {
    let mut t = vec![1, 2, 4];
    if nr_cpus > 0 && !t.contains(&nr_cpus) {
        t.push(nr_cpus);
    }
    t.sort_unstable();
    t
}

/// Run settings shared by every comparison of a suite run, and the progress display.
pub struct Ctx {
    /// Quick mode (CI scale) rather than full scale.
    pub quick: bool,
    /// Measured rounds per comparison.
    pub rounds: usize,
    /// Discarded rounds before them.
    pub warmup: usize,
    /// Thread counts of the threaded experiments, ascending.
    pub threads: Vec<usize>,
    /// The CPUs this process may run on (empty if unknown): thread `i` of a run of
    /// at most that many threads is pinned to `cpus[i]`.
    pub cpus: Vec<usize>,
    /// The other allocators the `peers` experiment runs beside zonealloc, by
    /// `--peers` key; empty: all of them.
    pub peers: Vec<String>,
    progress: ProgressBar,
    /// Prefix of the progress message, e.g. "[1/3] pcp".
    label: String,
}

impl Ctx {
    /// Settings for quick (`quick = true`) or full scale.
    pub fn new(quick: bool, progress: ProgressBar) -> Ctx {
        let cpus = affinity::allowed_cpus();
        Ctx {
            quick,
            rounds: if quick { 5 } else { 11 },
            warmup: 1,
            threads: default_threads(cpus.len()),
            cpus,
            peers: Vec::new(),
            progress,
            label: String::new(),
        }
    }

    /// Sets the thread counts (deduplicated, ascending, zero dropped); an empty
    /// list keeps the default.
    pub fn set_threads(&mut self, mut threads: Vec<usize>) {
        threads.retain(|&t| t > 0);
        threads.sort_unstable();
        threads.dedup();
        if !threads.is_empty() {
            self.threads = threads;
        }
    }

    /// What the threaded runs did, for the report's notes.
    pub fn pinning_note(&self) -> String {
        let n = self.cpus.len();
        let (pinned, shared): (Vec<usize>, Vec<usize>) =
            self.threads.iter().partition(|&&t| pinned(t, &self.cpus));
        let list = |v: &[usize]| {
            v.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !pinned.is_empty() {
            parts.push(format!(
                "{} thread(s): one thread per CPU, pinned (thread i on CPU {:?}[i])",
                list(&pinned),
                self.cpus
            ));
        }
        if !shared.is_empty() {
            parts.push(format!(
                "{} thread(s): more threads than the {n} CPUs this process may use, not \
                 pinned (the threads share the CPUs)",
                list(&shared)
            ));
        }
        parts.join("; ")
    }

    /// Picks the quick-mode or the full-scale value of a size.
    pub fn scale<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }

    /// Sets the prefix of the progress message (the experiment being run).
    pub fn set_label(&mut self, label: String) {
        self.label = label;
    }

    /// Shows a message under the progress bar (set-up steps that take a while).
    pub fn status(&self, what: &str) {
        self.progress.set_message(format!("{}: {what}", self.label));
    }

    /// Runs `variants` interleaved: `warmup + rounds` rounds, each running every
    /// variant once, starting one variant later each round. Returns each variant's
    /// measured samples, in the order the variants were given.
    pub fn compare(&mut self, what: &str, variants: &mut [Variant<'_>]) -> Vec<Samples> {
        let k = variants.len();
        let total = (self.warmup + self.rounds) * k;
        self.progress.set_length(total as u64);
        self.progress.set_position(0);
        self.progress.set_message(format!("{}: {what}", self.label));
        let mut out: Vec<Samples> = variants
            .iter()
            .map(|v| Samples {
                variant: v.name.clone(),
                values: Vec::with_capacity(self.rounds),
            })
            .collect();
        for round in 0..self.warmup + self.rounds {
            for i in 0..k {
                let vi = (round + i) % k;
                let value = (variants[vi].run)();
                if round >= self.warmup {
                    out[vi].values.push(value);
                }
                self.progress.inc(1);
            }
        }
        out
    }
}

/// Seconds since `t` as f64.
pub fn secs_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// A multi-threaded timed run: worker threads released together by a barrier, each
/// timing its own loop.
///
/// Each worker is pinned (when `pin_to` names CPUs), prepares its untimed state,
/// waits at the barrier, then reads the clock, runs its loop and reads the clock
/// again. The run lasts from the first worker's start to the last worker's end: the
/// clock is never read by the main thread, which may wait for a CPU after the
/// barrier and would start it late.
pub struct Workers<'c> {
    threads: usize,
    /// Thread `i` runs on `pin_to[i % len]`; empty: not pinned.
    pin_to: &'c [usize],
    /// `Some(d)`: the main thread raises the stop flag `d` after the release;
    /// `None`: each worker's loop ends by itself.
    stop_after: Option<Duration>,
}

impl Workers<'static> {
    /// `threads` unpinned workers whose loops run until told to stop, `dur` after the
    /// release.
    pub fn for_duration(threads: usize, dur: Duration) -> Workers<'static> {
        Workers {
            threads,
            pin_to: &[],
            stop_after: Some(dur),
        }
    }
}

impl<'c> Workers<'c> {
    /// `threads` workers whose loops run until told to stop, `dur` after the
    /// release: pinned one per CPU of `cpus` when there are that many, else left to
    /// the scheduler (a run with more threads than CPUs shares them).
    pub fn timed(threads: usize, dur: Duration, cpus: &'c [usize]) -> Workers<'c> {
        let w = Workers::for_duration(threads, dur);
        if pinned(threads, cpus) {
            w.pinned_to(cpus)
        } else {
            w
        }
    }

    /// The same workers, thread `i` pinned to `cpus[i % cpus.len()]` (not pinned
    /// when `cpus` is empty).
    pub fn pinned_to<'d>(self, cpus: &'d [usize]) -> Workers<'d> {
        Workers {
            threads: self.threads,
            pin_to: cpus,
            stop_after: self.stop_after,
        }
    }

    /// `threads` workers running loops of fixed length, thread `i` pinned to
    /// `cpus[i % cpus.len()]` (not pinned when `cpus` is empty).
    pub fn pinned(threads: usize, cpus: &'c [usize]) -> Workers<'c> {
        Workers {
            threads,
            pin_to: cpus,
            stop_after: None,
        }
    }

    /// Runs the workers: thread `i` builds its state with `prepare(i)` (untimed), then
    /// its timed loop `work(i, &mut state, stop)` returns what it counted (calls,
    /// pages). Returns millions counted per second, all threads.
    pub fn throughput<S>(
        &self,
        prepare: impl Fn(usize) -> S + Sync,
        work: impl Fn(usize, &mut S, &AtomicBool) -> u64 + Sync,
    ) -> f64 {
        let stop = AtomicBool::new(false);
        let start = Barrier::new(self.threads + 1);
        let runs: Vec<(u64, Instant, Instant)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|i| {
                    let (stop, start, prepare, work) = (&stop, &start, &prepare, &work);
                    let cpu = (!self.pin_to.is_empty()).then(|| self.pin_to[i % self.pin_to.len()]);
                    s.spawn(move || {
                        if let Some(cpu) = cpu {
                            affinity::pin_current_thread(cpu);
                        }
                        let mut state = prepare(i);
                        start.wait();
                        let t0 = Instant::now();
                        let n = work(i, &mut state, stop);
                        (n, t0, Instant::now())
                    })
                })
                .collect();
            start.wait();
            if let Some(dur) = self.stop_after {
                std::thread::sleep(dur);
                stop.store(true, Ordering::Relaxed);
            }
            handles
                .into_iter()
                .map(|h| h.join().expect("worker thread"))
                .collect()
        });
        let first = runs.iter().map(|r| r.1).min().expect("at least one thread");
        let last = runs.iter().map(|r| r.2).max().expect("at least one thread");
        let counted: u64 = runs.iter().map(|r| r.0).sum();
        counted as f64 / (last - first).as_secs_f64() / 1e6
    }
}

/// One row of a comparison table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Variant name.
    pub variant: String,
    /// Measured samples.
    pub samples: Vec<f64>,
    /// Median of the samples.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// `median / baseline median` (1 for the baseline itself).
    pub ratio: f64,
    /// Two-sided Mann–Whitney p-value against the baseline (`None` for the baseline).
    pub p_value: Option<f64>,
    /// `p_value < ALPHA`.
    pub significant: bool,
    /// "baseline", "better", "worse", "no significant difference", or "failed".
    pub verdict: String,
    /// Why the variant's figure is no result (it failed every request, it has no
    /// data): charts draw it as failed, never as the best. `None`: a result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// A comparison table: variants against the first row (the baseline).
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    /// Short identifier, unique within the experiment (used in JSON and charts).
    pub id: String,
    /// One-line description printed above the table.
    pub title: String,
    /// What the samples measure.
    pub metric: Metric,
    /// Rows, the baseline first.
    pub rows: Vec<Row>,
    /// The comparison in a few words, for people (a chart's row label); the title
    /// keeps the exact names (a kernel test's parameters). `None`: from the title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The panel of a summary chart this table belongs to, in words (`None`: the
    /// title's text before its first ": ").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The posting's own figure for this comparison, in times better (its
    /// baseline's time over its after's), which a summary chart marks beside ours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub posted_gain: Option<f64>,
}

impl Table {
    /// Summarises `samples` (the baseline first), each row renamed to its label.
    pub fn new(id: &str, title: &str, metric: Metric, samples: &[(&str, &Samples)]) -> Table {
        let base = samples[0].1;
        let base_median = base.median();
        let rows = samples
            .iter()
            .enumerate()
            .map(|(i, (label, s))| {
                let med = s.median();
                let (p_value, significant, verdict) = if i == 0 {
                    (None, false, "baseline".to_owned())
                } else {
                    let p = mann_whitney_p(&s.values, &base.values);
                    let sig = p < ALPHA;
                    let better = if metric.lower_is_better {
                        med < base_median
                    } else {
                        med > base_median
                    };
                    let verdict = match (sig, better) {
                        (false, _) => "no significant difference",
                        (true, true) => "better",
                        (true, false) => "worse",
                    };
                    (Some(p), sig, verdict.to_owned())
                };
                Row {
                    variant: (*label).to_owned(),
                    samples: s.values.clone(),
                    median: med,
                    min: s.min(),
                    max: s.max(),
                    ratio: med / base_median,
                    p_value,
                    significant,
                    verdict,
                    failed: None,
                }
            })
            .collect();
        Table {
            id: id.to_owned(),
            title: title.to_owned(),
            metric,
            rows,
            label: None,
            group: None,
            posted_gain: None,
        }
    }

    /// The same table with the posting's figure for it, `gain` times better.
    pub fn posted(mut self, gain: f64) -> Table {
        self.posted_gain = Some(gain);
        self
    }

    /// The same table with a label for people (`label`).
    pub fn labelled(mut self, label: impl Into<String>) -> Table {
        self.label = Some(label.into());
        self
    }

    /// The same table in the summary panel named `group`.
    pub fn grouped(mut self, group: impl Into<String>) -> Table {
        self.group = Some(group.into());
        self
    }

    /// Marks row `i` as failed, `why` (e.g. "0 % of requests satisfied"): its figure
    /// stays in the table and the JSON, but it is no result and no row compares
    /// with it as better or worse.
    pub fn mark_failed(&mut self, i: usize, why: impl Into<String>) {
        if let Some(r) = self.rows.get_mut(i) {
            r.failed = Some(why.into());
            r.verdict = "failed".to_owned();
            r.significant = false;
        }
    }
}

// -----------------------------------------------------------------------------
// Mann–Whitney U
// -----------------------------------------------------------------------------

/// Two-sided p-value of the Mann–Whitney U test of `a` against `b`.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 {
        return 1.0;
    }
    // Midranks of the pooled samples.
    let mut pooled: Vec<(f64, usize)> = a
        .iter()
        .map(|&x| (x, 0))
        .chain(b.iter().map(|&x| (x, 1)))
        .collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = pooled.len();
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0; // sum of t^3 - t over tie groups
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let midrank = (i + j) as f64 / 2.0 + 1.0;
        for p in &pooled[i..=j] {
            if p.1 == 0 {
                rank_sum_a += midrank;
            }
        }
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let u1 = rank_sum_a - (n1 * (n1 + 1)) as f64 / 2.0;
    let u = u1.min((n1 * n2) as f64 - u1);
    if tie_term == 0.0 && n1 <= 20 && n2 <= 20 {
        let dist = u_distribution(n1, n2);
        let total: f64 = dist.iter().sum();
        let lower: f64 = dist[..=(u as usize)].iter().sum();
        return (2.0 * lower / total).min(1.0);
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let mean = n1f * n2f / 2.0;
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = ((mean - u).abs() - 0.5).max(0.0) / var.sqrt();
    (2.0 * normal_sf(z)).min(1.0)
}

/// Counts of the arrangements of `n1` + `n2` distinct values giving each U, 0..=n1*n2
/// (the recursion f(n1, n2, u) = f(n1 - 1, n2, u - n2) + f(n1, n2 - 1, u)).
fn u_distribution(n1: usize, n2: usize) -> Vec<f64> {
    let max_u = n1 * n2;
    // table[j][u] for the current i, j = 0..=n2.
    let mut prev: Vec<Vec<f64>> = (0..=n2)
        .map(|_| {
            let mut v = vec![0.0; max_u + 1];
            v[0] = 1.0;
            v
        })
        .collect();
    for _i in 1..=n1 {
        let mut cur: Vec<Vec<f64>> = vec![vec![0.0; max_u + 1]; n2 + 1];
        cur[0][0] = 1.0;
        for j in 1..=n2 {
            for u in 0..=max_u {
                let from_a = if u >= j { prev[j][u - j] } else { 0.0 };
                cur[j][u] = from_a + cur[j - 1][u];
            }
        }
        prev = cur;
    }
    prev.swap_remove(n2)
}

/// Upper tail of the standard normal distribution, P(Z > z).
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Complementary error function (Numerical Recipes' Chebyshev fit, |error| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_p_values_for_five_against_five() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 7.0, 8.0, 9.0, 10.0];
        // U = 0: 2 arrangements of 252 are as extreme (both tails).
        assert!((mann_whitney_p(&a, &b) - 2.0 / 252.0).abs() < 1e-12);
        // U = 2: P(U <= 2) = (1 + 1 + 2) / 252 per tail.
        let c = [1.0, 2.0, 3.0, 4.0, 7.5];
        assert!((mann_whitney_p(&c, &b) - 8.0 / 252.0).abs() < 1e-12);
        // Identical distributions interleaved: far from significant.
        let d = [1.5, 6.5, 3.5, 8.5, 9.5];
        assert!(mann_whitney_p(&d, &b) > 0.3);
    }

    #[test]
    fn ties_use_the_normal_approximation() {
        let a = [1.0; 6];
        let b = [1.0; 6];
        assert!((mann_whitney_p(&a, &b) - 1.0).abs() < 1e-9);
        let c = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0];
        let d = [3.0, 3.0, 3.0, 4.0, 4.0, 4.0];
        assert!(mann_whitney_p(&c, &d) < 0.01);
    }

    #[test]
    fn u_distribution_sums_to_the_binomial() {
        let d = u_distribution(5, 5);
        assert_eq!(d.iter().sum::<f64>(), 252.0);
        assert_eq!(d[0], 1.0);
        assert_eq!(d[1], 1.0);
        assert_eq!(d[2], 2.0);
        assert_eq!(d[25], 1.0);
    }

    #[test]
    fn rounds_rotate_the_first_variant() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut ctx = Ctx::new(true, ProgressBar::hidden());
        let mut vs = [
            Variant::new("a", || {
                order.borrow_mut().push('a');
                1.0
            }),
            Variant::new("b", || {
                order.borrow_mut().push('b');
                2.0
            }),
        ];
        let s = ctx.compare("t", &mut vs);
        assert_eq!(s[0].values.len(), ctx.rounds);
        assert_eq!(s[1].median(), 2.0);
        let o: String = order.borrow().iter().collect();
        assert!(o.starts_with("abbaab"));
    }

    #[test]
    fn workers_run_each_thread_once_and_stop_when_told() {
        let runs = std::sync::atomic::AtomicUsize::new(0);
        let rate = Workers::pinned(3, &[]).throughput(
            |i| i,
            |i, state, _| {
                assert_eq!(*state, i);
                runs.fetch_add(1, Ordering::Relaxed);
                1000
            },
        );
        assert_eq!(runs.load(Ordering::Relaxed), 3);
        assert!(rate > 0.0 && rate.is_finite());
        let rate = Workers::for_duration(2, Duration::from_millis(10)).throughput(
            |_| (),
            |_, _, stop| {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    std::hint::spin_loop();
                }
                n
            },
        );
        assert!(rate > 0.0 && rate.is_finite());
    }

    #[test]
    fn handles_pick_their_variants_samples_whatever_the_names() {
        let mut ctx = Ctx::new(true, ProgressBar::hidden());
        let mut vs = Variants::new();
        let a = vs.add("same label", || 1.0);
        let b = vs.add("same label", || 2.0);
        let keyed: Handles<u8> = [(7, b), (3, a)].into_iter().collect();
        let s = ctx.compare("t", &mut vs);
        assert_eq!(a.of(&s).median(), 1.0);
        assert_eq!(keyed.get(7).of(&s).median(), 2.0);
        assert_eq!(keyed.get(3), a);
    }

    #[test]
    fn table_ratio_and_verdict() {
        let base = Samples {
            variant: "x".into(),
            values: vec![10.0, 11.0, 12.0, 10.5, 11.5],
        };
        let fast = Samples {
            variant: "y".into(),
            values: vec![5.0, 5.5, 6.0, 5.2, 5.1],
        };
        let t = Table::new(
            "t",
            "t",
            Metric::lower("ns", "ns"),
            &[("base", &base), ("fast", &fast)],
        );
        assert_eq!(t.rows[0].verdict, "baseline");
        assert_eq!(t.rows[1].verdict, "better");
        assert!((t.rows[1].ratio - 5.2 / 11.0).abs() < 1e-12);
    }
}
