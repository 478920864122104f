//! The experiments of `zonealloc bench`, and the result type they all return.
//!
//! An experiment reproduces one seed benchmark (or answers one design question) as
//! before/after comparisons run by `Ctx::compare`. It returns an `ExperimentResult`:
//! its tables, the targets it checks, its parameters and notes, and optionally a
//! thread-scaling series. `report` prints, charts and serialises every result the same
//! way, so an experiment only measures.
//!
//! # Adding an experiment
//!
//! 1. Write `experiments/NAME.rs` with a unit struct implementing `Experiment`.
//! 2. Add `pub mod NAME;` below and `&NAME::TheStruct` to `REGISTRY`.
//!
//! `zonealloc bench NAME` then runs it alone, and `zonealloc bench` with the others.
//! Keep its quick mode (`ctx.quick`) well under a minute: the whole quick suite is
//! what CI runs, and it has to stay under 3 minutes.

use serde::Serialize;

use crate::harness::{mann_whitney_p, Ctx, Samples, Table, ALPHA};

pub mod cma;
pub mod contig;
pub mod hotplug;
pub mod page_fault1;
pub mod page_frag;
pub mod page_owner;
pub mod pagetypeinfo;
pub mod pcp;
pub mod peer_allocators;
pub mod peers;
pub mod reclaim;
pub mod replay;
pub mod reporting;
pub mod seed_util;
pub mod vmalloc;

/// Every experiment, in the order `zonealloc bench` runs them.
pub static REGISTRY: &[&dyn Experiment] = &[
    &pcp::Pcp,
    &contig::Contig,
    &vmalloc::Vmalloc,
    &page_fault1::PageFault1,
    &page_frag::PageFrag,
    &pagetypeinfo::Pagetypeinfo,
    &reporting::Reporting,
    &reclaim::Reclaim,
    &hotplug::Hotplug,
    &cma::Cma,
    &peers::Peers,
    &replay::Replay,
];

/// Finds a registered experiment by name.
pub fn find(name: &str) -> Option<&'static dyn Experiment> {
    REGISTRY.iter().copied().find(|e| e.name() == name)
}

/// One experiment of the suite.
pub trait Experiment: Sync {
    /// Short name, used on the command line and for output files.
    fn name(&self) -> &'static str;
    /// One line: what it measures and which seed it reproduces.
    fn description(&self) -> &'static str;
    /// Runs the experiment at the scale `ctx` says.
    fn run(&self, ctx: &mut Ctx) -> ExperimentResult;
}

/// What one experiment measured: serialised whole into `results.json`.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentResult {
    /// The experiment's name.
    pub name: String,
    /// The experiment's description.
    pub description: String,
    /// Settings that the figures depend on (sizes, durations, allocator tunables).
    pub params: Vec<Param>,
    /// Comparison tables, in the order printed.
    pub tables: Vec<Table>,
    /// Targets checked against the measurements.
    pub targets: Vec<Target>,
    /// Observations that qualify the figures (e.g. how much a workload flushed).
    pub notes: Vec<String>,
    /// Thread-scaling series, charted separately.
    pub scaling: Option<Scaling>,
    /// The variant (by name, up to any " (...)") a summary chart compares every other
    /// row of a table with, where that is not each table's first row: `peers` sets
    /// zonealloc, so that its chart reads as each peer against zonealloc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_reference: Option<String>,
    /// Wall time of the experiment, seconds.
    pub elapsed_s: f64,
    /// Chart files written for this experiment (filled in by `report`).
    pub charts: Vec<String>,
}

impl ExperimentResult {
    /// An empty result for experiment `e`.
    pub fn new(e: &dyn Experiment) -> ExperimentResult {
        ExperimentResult {
            name: e.name().to_owned(),
            description: e.description().to_owned(),
            params: Vec::new(),
            tables: Vec::new(),
            targets: Vec::new(),
            notes: Vec::new(),
            scaling: None,
            summary_reference: None,
            elapsed_s: 0.0,
            charts: Vec::new(),
        }
    }

    /// Records a parameter.
    pub fn param(&mut self, name: &str, value: impl ToString) {
        self.params.push(Param {
            name: name.to_owned(),
            value: value.to_string(),
        });
    }
}

/// A setting an experiment's figures depend on.
#[derive(Clone, Debug, Serialize)]
pub struct Param {
    /// What it is, e.g. "hot pair: pairs per run".
    pub name: String,
    /// Its value, as printed.
    pub value: String,
}

/// A target from the issue tracker, checked against a measured figure.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// What is checked, e.g. "hot order-0 pair, PCP on, 1 thread".
    pub what: String,
    /// The measured value (a median, or a ratio of medians).
    pub measured: f64,
    /// Unit of `measured` and `threshold`.
    pub unit: String,
    /// The bound.
    pub threshold: f64,
    /// `true`: pass when `measured <= threshold`; `false`: when `>=`.
    pub at_most: bool,
    /// Whether the measurement meets the bound.
    pub pass: bool,
    /// The two-sided Mann–Whitney p-value, where the target also requires the
    /// difference to be significant (`and_significant`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// The id of the table the target reads on, for the charts: in that table's
    /// panel where the units agree (a bound in ns on a table in ns), and, for a
    /// ratio ("x"), as a mark at that ratio on the table's row of a summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// What `Target::and_significant` appends to `what`, up to the p-value.
pub const SIGNIFICANT_SUFFIX: &str = "; significant at p < ";

impl Target {
    /// Checks `measured <= threshold`.
    pub fn at_most(what: &str, measured: f64, threshold: f64, unit: &str) -> Target {
        Target {
            what: what.to_owned(),
            measured,
            unit: unit.to_owned(),
            threshold,
            at_most: true,
            pass: measured <= threshold,
            p_value: None,
            table: None,
        }
    }

    /// Checks `measured >= threshold`.
    pub fn at_least(what: &str, measured: f64, threshold: f64, unit: &str) -> Target {
        Target {
            what: what.to_owned(),
            measured,
            unit: unit.to_owned(),
            threshold,
            at_most: false,
            pass: measured >= threshold,
            p_value: None,
            table: None,
        }
    }

    /// Also requires the difference between `before` and `after` to be
    /// significant (two-sided Mann–Whitney, p below the harness's α), as a seed's
    /// reported improvement is: a median past the bound by chance is no pass.
    /// `what` gains the p-value (after `SIGNIFICANT_SUFFIX`), and `p_value` holds it.
    pub fn and_significant(mut self, before: &Samples, after: &Samples) -> Target {
        let p = mann_whitney_p(&after.values, &before.values);
        let p_text = seed_util::p_text(p);
        self.what
            .push_str(&format!("{SIGNIFICANT_SUFFIX}{ALPHA} ({p_text})"));
        self.pass &= p < ALPHA;
        self.p_value = Some(p);
        self
    }

    /// The same target, read on table `id` by the charts.
    pub fn on_table(mut self, id: &str) -> Target {
        self.table = Some(id.to_owned());
        self
    }

    /// `what` without the significance clause `and_significant` added.
    pub fn what_alone(&self) -> &str {
        match self.p_value {
            Some(_) => self
                .what
                .split_once(SIGNIFICANT_SUFFIX)
                .map_or(self.what.as_str(), |(w, _)| w),
            None => &self.what,
        }
    }
}

/// A metric against the number of threads, one series per variant.
#[derive(Clone, Debug, Serialize)]
pub struct Scaling {
    /// Chart title.
    pub title: String,
    /// Y axis: the metric, with its unit.
    pub y_label: String,
    /// One line per variant.
    pub series: Vec<Series>,
}

/// One variant's points in a `Scaling` chart.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    /// Variant name (legend).
    pub name: String,
    /// Whether the others are compared with this one (drawn dashed, named as the
    /// baseline).
    pub baseline: bool,
    /// One point per thread count.
    pub points: Vec<Point>,
}

/// The samples of one variant at one thread count, summarised.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Threads.
    pub threads: u32,
    /// Median of the samples.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

impl Point {
    /// The point of `threads` threads summarising `samples`.
    pub fn of(threads: usize, samples: &crate::harness::Samples) -> Point {
        Point {
            threads: threads as u32,
            median: samples.median(),
            min: samples.min(),
            max: samples.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(values: &[f64]) -> Samples {
        Samples {
            variant: "v".to_owned(),
            values: values.to_vec(),
        }
    }

    #[test]
    fn a_target_that_needs_significance_misses_on_a_lucky_median() {
        let before = samples(&[10.0, 12.0, 9.0, 11.0, 13.0, 10.5, 11.5]);
        // The medians differ by 10 %, the rounds overlap: no pass.
        let mixed = samples(&[11.0, 13.0, 9.5, 12.1, 14.0, 10.0, 12.5]);
        let t = Target::at_least("x", 10.0, 7.0, "%").and_significant(&before, &mixed);
        assert!(!t.pass, "{t:?}");
        assert!(t.what.contains("p="), "{}", t.what);
        assert_eq!(t.what_alone(), "x");
        assert!(t.p_value.is_some_and(|p| p >= ALPHA));
        // Every round of `after` above every round of `before`: a pass.
        let apart = samples(&[20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0]);
        let t = Target::at_least("x", 10.0, 7.0, "%").and_significant(&before, &apart);
        assert!(t.pass, "{t:?}");
        // Significant but short of the bound: still a miss.
        let t = Target::at_least("x", 5.0, 7.0, "%").and_significant(&before, &apart);
        assert!(!t.pass, "{t:?}");
    }
}
