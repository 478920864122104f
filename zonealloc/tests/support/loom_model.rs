//! Test support, included by the loom suites with `#[path]` (not part of the
//! library): runs one model, counts the executions loom explores, records them with
//! the suite's reliability figures and prints them.
//!
//! The including crate must also include `support/figures.rs` as `mod figures`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Runs `f` under loom with preemption bound `bound` (unless the environment sets
/// one) and at least `max_branches` branches per execution.
pub fn run<F>(name: &str, bound: usize, max_branches: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    b.max_branches = b.max_branches.max(max_branches);
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let t0 = Instant::now();
    b.check(move || {
        r.fetch_add(1, Ordering::Relaxed);
        f();
    });
    crate::figures::record(
        &format!("loom-{name}"),
        env!("CARGO_MANIFEST_DIR"),
        &[
            (
                format!("loom_executions:{name}"),
                runs.load(Ordering::Relaxed) as u64,
            ),
            ("violations".into(), 0),
            ("frames_lost".into(), 0),
        ],
    );
    println!(
        "loom[{name}]: {} executions explored (preemption bound {:?}), {:.1} s, violations 0, \
         leaked frames 0",
        runs.load(Ordering::Relaxed),
        b.preemption_bound,
        t0.elapsed().as_secs_f64()
    );
}

/// The loom suites' allocator: one Normal zone of `frames` frames from pfn 0,
/// `max_order` and pageblocks of order 2, 2 CPUs, no mobility grouping, no
/// watermarks, per-CPU lists off (each suite turns on what its protocol needs).
#[allow(dead_code)] // Each suite uses the helpers it needs.
pub fn tiny_config(frames: u64) -> zonealloc::Config {
    use zonealloc::{Config, Order, PcpConfig, Pfn, ZoneType};
    Config {
        max_order: Order(2),
        pageblock_order: Order(2),
        nr_cpus: 2,
        mobility_grouping: false,
        min_free_kbytes: Some(0),
        pcp: PcpConfig {
            enabled: false,
            ..PcpConfig::default()
        },
        ..Config::single_zone(ZoneType::Normal, Pfn(0), frames)
    }
}
