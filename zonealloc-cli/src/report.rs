//! Reporting: the machine header, tables on the terminal, `results.json`, PNG charts.
//!
//! Everything here reads `ExperimentResult`s and never measures. The machine header
//! comes from `/proc/cpuinfo`, `/proc/meminfo`, `/proc/sys/kernel/osrelease` (what
//! `uname -r` prints), the CPUs this process may use, and the `rustc --version` that
//! `build.rs` recorded. Charts are drawn with plotters' bitmap backend and the DejaVu
//! Sans font embedded in the binary, so they need no system font.

use std::fmt::Write as _;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use crate::experiments::{ExperimentResult, Point, Scaling, Series, Target};
use crate::harness::{mann_whitney_p, Row, Table, ALPHA};

// -----------------------------------------------------------------------------
// Machine header
// -----------------------------------------------------------------------------

/// The machine and build a run was made on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs this process may run on (`nproc`).
    pub cpus: usize,
    /// `MemTotal` from /proc/meminfo, bytes.
    pub mem_total_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// `rustc --version` of the compiler that built this binary.
    pub rustc: String,
    /// Cargo profile of this binary ("release" or "debug").
    pub build_profile: String,
    /// zonealloc-cli version.
    pub version: String,
    /// 1-minute load average when the run started (/proc/loadavg).
    pub load_avg_start: f64,
}

/// The 1-minute load average (0 if unknown).
pub fn load_avg() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

impl Machine {
    /// Reads the machine's description.
    pub fn detect() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_bytes = meminfo
            .lines()
            .find_map(|l| {
                let rest = l.strip_prefix("MemTotal:")?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024);
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_total_bytes,
            kernel,
            rustc: env!("ZONEALLOC_RUSTC_VERSION").to_owned(),
            build_profile: env!("ZONEALLOC_BUILD_PROFILE").to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            load_avg_start: load_avg(),
        }
    }

    /// The header printed above the tables.
    pub fn header(&self) -> String {
        format!(
            "machine: {}, {} CPUs, {:.1} GiB RAM, Linux {}, load average {:.2} at start\n\
             build:   {}, {} profile, zonealloc-cli {}",
            self.cpu_model,
            self.cpus,
            self.mem_total_bytes as f64 / (1u64 << 30) as f64,
            self.kernel,
            self.load_avg_start,
            self.rustc,
            self.build_profile,
            self.version
        )
    }
}

// -----------------------------------------------------------------------------
// Terminal tables
// -----------------------------------------------------------------------------

/// A number with about four significant digits.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn significance(r: &Row) -> String {
    match r.p_value {
        None => "-".into(),
        Some(p) if p < 0.001 => format!("{} (p<0.001)", if r.significant { "yes" } else { "no" }),
        Some(p) => format!("{} (p={p:.3})", if r.significant { "yes" } else { "no" }),
    }
}

/// Lays out `cells` (the first row is the header) in aligned columns; numeric-looking
/// columns are right-aligned.
fn columns(cells: &[Vec<String>], right: &[bool]) -> String {
    let ncol = cells.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..ncol)
        .map(|c| {
            cells
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in cells {
        out.push_str("  ");
        for (c, cell) in row.iter().enumerate() {
            let pad = width[c] - cell.chars().count();
            if right.get(c).copied().unwrap_or(false) {
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if c + 1 < row.len() {
                    out.push_str(&" ".repeat(pad));
                }
            }
            if c + 1 < row.len() {
                out.push_str("   ");
            }
        }
        out.push('\n');
    }
    out
}

/// One comparison table, seed style.
pub fn format_table(t: &Table) -> String {
    let better = match &t.metric.better {
        Some(words) => words.as_str(),
        None if t.metric.lower_is_better => "lower is better",
        None => "higher is better",
    };
    let mut cells = vec![vec![
        "variant".to_owned(),
        format!("median {}", t.metric.unit),
        "min – max".to_owned(),
        "ratio".to_owned(),
        "significant".to_owned(),
        "verdict".to_owned(),
    ]];
    for r in &t.rows {
        cells.push(vec![
            r.variant.clone(),
            num(r.median),
            format!("{} – {}", num(r.min), num(r.max)),
            format!("{:.3}", r.ratio),
            significance(r),
            r.verdict.clone(),
        ]);
    }
    format!(
        "{} ({better}; ratio = median / first row's)\n{}",
        t.title,
        columns(&cells, &[false, true, true, true, false, false])
    )
}

fn format_targets(targets: &[Target]) -> String {
    let mut cells = vec![vec![
        "target".to_owned(),
        "measured".to_owned(),
        "bound".to_owned(),
        "result".to_owned(),
    ]];
    for t in targets {
        cells.push(vec![
            t.what.clone(),
            format!("{} {}", num(t.measured), t.unit),
            format!(
                "{} {} {}",
                if t.at_most { "≤" } else { "≥" },
                num(t.threshold),
                t.unit
            ),
            if t.pass { "PASS" } else { "MISS" }.to_owned(),
        ]);
    }
    columns(&cells, &[false, true, true, false])
}

/// Everything an experiment reports, as printed on the terminal.
pub fn format_experiment(r: &ExperimentResult) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n=== {}: {}", r.name, r.description);
    for p in &r.params {
        let _ = writeln!(s, "  {}: {}", p.name, p.value);
    }
    for t in &r.tables {
        let _ = write!(s, "\n{}", format_table(t));
    }
    if !r.targets.is_empty() {
        let _ = write!(s, "\ntargets\n{}", format_targets(&r.targets));
    }
    if !r.notes.is_empty() {
        s.push('\n');
        for n in &r.notes {
            let _ = writeln!(s, "  note: {n}");
        }
    }
    let _ = writeln!(s, "  ({} took {:.1} s)", r.name, r.elapsed_s);
    s
}

/// The default output's line for experiment `k` of `n` once it has run: how long it
/// took and what it produced, or why it produced nothing.
pub fn progress_line(k: usize, n: usize, r: &ExperimentResult) -> String {
    let width = n.to_string().len();
    let head = format!("[{k:>width$}/{n}] {:<12} {:>6.1} s", r.name, r.elapsed_s);
    if r.tables.is_empty() {
        let why = r.notes.first().map_or("", String::as_str);
        return format!("{head}  no figures: {why}");
    }
    let passed = r.targets.iter().filter(|t| t.pass).count();
    let targets = match r.targets.len() {
        0 => "no targets".to_owned(),
        t => format!(
            "{t} target{}: {passed} PASS, {} MISS",
            if t == 1 { "" } else { "s" },
            t - passed
        ),
    };
    format!(
        "{head}  {} table{}, {targets}",
        r.tables.len(),
        if r.tables.len() == 1 { "" } else { "s" }
    )
}

/// Widest "target" column of the summary, characters: longer texts wrap.
const SUMMARY_WHAT_CHARS: u32 = 80;

/// A target's text for the summary table: without the significance clause, and
/// without a closing parenthesis that only repeats what the table's other columns
/// say (the posting's bound, "median", "ratio of medians"). results.json keeps it
/// whole.
fn summary_what(t: &Target) -> &str {
    let what = t.what_alone().trim_end();
    match what.rfind(" (") {
        Some(i) if what.ends_with(')') => {
            let inner = &what[i + 2..what.len() - 1];
            let repeats = inner.starts_with("seed")
                || inner.contains("; seed")
                || inner == "median"
                || inner == "ratio of medians";
            if repeats {
                &what[..i]
            } else {
                what
            }
        }
        _ => what,
    }
}

/// Every experiment's targets in one table, the default output's end: experiment,
/// what is checked, PASS or MISS, our figure (with its p-value where the target
/// needs significance) and the target.
pub fn format_summary(results: &[ExperimentResult]) -> String {
    let mut cells = vec![vec![
        "experiment".to_owned(),
        "target".to_owned(),
        "result".to_owned(),
        "ours".to_owned(),
        "target".to_owned(),
    ]];
    let chars = |s: &str| s.chars().count() as u32;
    for r in results {
        for t in &r.targets {
            let ours = match t.p_value {
                Some(p) if p < 0.001 => format!("{} (p<0.001)", target_value(t.measured, &t.unit)),
                Some(p) => format!("{} (p={p:.3})", target_value(t.measured, &t.unit)),
                None => target_value(t.measured, &t.unit),
            };
            let bound = format!(
                "{} {}{}",
                if t.at_most { "≤" } else { "≥" },
                target_value(t.threshold, &t.unit),
                if t.p_value.is_some() {
                    format!(", p < {ALPHA}")
                } else {
                    String::new()
                }
            );
            let what = wrap_words(summary_what(t), SUMMARY_WHAT_CHARS, &chars);
            for (k, line) in what.into_iter().enumerate() {
                cells.push(if k == 0 {
                    vec![
                        r.name.clone(),
                        line,
                        if t.pass { "PASS" } else { "MISS" }.to_owned(),
                        ours.clone(),
                        bound.clone(),
                    ]
                } else {
                    vec![String::new(), format!("  {line}")]
                });
            }
        }
    }
    if cells.len() == 1 {
        return "targets: none among the experiments run\n".to_owned();
    }
    format!(
        "targets (ours: the median of this run's rounds, or a ratio of medians; each \
         target's source and full text in results.json)\n{}",
        columns(&cells, &[false, false, false, true, false])
    )
}

/// A target's figure with its unit, four significant digits at most: "16.94 ns",
/// "-9.1 %", "1.91x", "0.004", "20 ns".
fn target_value(v: f64, unit: &str) -> String {
    let n = if v.is_finite() {
        sig_digits(round_sig(v, 4), 4)
    } else {
        format!("{v}")
    };
    match unit {
        "" => n,
        "x" => format!("{n}x"),
        u => format!("{n} {u}"),
    }
}

// -----------------------------------------------------------------------------
// results.json
// -----------------------------------------------------------------------------

/// The whole run, as written to `results.json`.
#[derive(Serialize)]
pub struct RunReport<'a> {
    /// "quick" or "full".
    pub mode: &'static str,
    /// Measured rounds per comparison.
    pub rounds: usize,
    /// Discarded warm-up rounds per comparison.
    pub warmup_rounds: usize,
    /// How `significant` is decided.
    pub significance_test: String,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix_s: u64,
    /// Wall time of the whole run, seconds.
    pub elapsed_s: f64,
    /// 1-minute load average when the run ended (other processes competing for the
    /// CPUs depress multi-thread figures).
    pub load_avg_end: f64,
    /// Where and with what it ran.
    pub machine: &'a Machine,
    /// Every experiment's figures.
    pub experiments: &'a [ExperimentResult],
}

/// The significance rule, as recorded in the JSON file.
pub fn significance_rule() -> String {
    format!(
        "two-sided Mann-Whitney U against the first row, alpha = {ALPHA} \
         (exact without ties for up to 20 samples per side, else normal approximation)"
    )
}

/// Writes `results.json` into `dir`; returns its path.
///
/// # Errors
/// I/O errors creating or writing the file.
pub fn write_json(dir: &Path, report: &RunReport<'_>) -> std::io::Result<PathBuf> {
    let path = dir.join("results.json");
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    fs::write(&path, json + "\n")?;
    Ok(path)
}

// -----------------------------------------------------------------------------
// Charts
// -----------------------------------------------------------------------------
//
// The rules every chart follows, each a small pure function below with its tests:
// - a value axis has at most `MAX_TICKS` ticks, fewer where their labels would not fit
//   the width (`linear_ticks`, `log_axis`, `labels_fit`);
// - a linear axis runs from 0 to the first tick at or above the largest value, ticks
//   a round step apart (`STEPS`; `nice_upper_bound`: within 1.25x of the largest
//   value);
// - values that span decades get a log axis, drawn as dots (never bars from an
//   arbitrary base), the axis label saying "log scale";
// - numbers are compact, with SI suffixes (5k, 1.5M) and times in the unit that suits
//   them (20 ns, 1.2 µs) (`si_label`, `si_value`); zero is "0";
// - titles come from the tables (what, parameters, unit), wrapped and if need be set
//   smaller to fit the width, never cut (`fit_title`);
// - every chart names its baseline and says in words which way is better, and
//   prints the figures a reader asks for (the medians, with their units) beside the
//   ratios;
// - a variant that failed (no request satisfied, no data) is drawn as failed: a red
//   cross and why, never a bar or a dot that could read as the best; a ratio of 0 or
//   to a baseline of 0 is not printed;
// - an experiment of more than `SUMMARY_OVER` panels gets a summary in NAME.png (each
//   panel's variants against its baseline, or against the experiment's reference
//   variant, as dots in "times better", with the targets that read on that axis; row
//   labels in words, the tables' own titles keep the exact names) and its panels in
//   NAME-detail.png;
// - a scaling chart has a linear axis from 0, each series its own colour and marker,
//   whiskers set a little apart, and each series' medians in its legend entry;
// - zonealloc's variants are drawn heavier than the peers it is compared with, the
//   baseline or limit grey; legends sit beside or above the plots, never on them.

static DEJAVU_SANS: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FONT: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded file is a valid TrueType font; a failure would only lose text.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, DEJAVU_SANS);
    });
}

type ChartResult<T> = Result<T, Box<dyn std::error::Error>>;
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The most ticks on a value axis.
const MAX_TICKS: usize = 6;
/// An experiment with more panels than this gets a summary chart and a detail chart.
const SUMMARY_OVER: usize = 8;
/// Width of one panel of a tables chart.
const PANEL_W: u32 = 720;
/// Width of a summary chart.
const SUMMARY_W: u32 = 1440;
/// Font size of tick labels, variant names and values.
const LABEL_PX: u32 = 15;
/// Least gap between two tick labels, pixels.
const TICK_GAP: u32 = 14;

// --- Numbers -------------------------------------------------------------------

/// `v` rounded to `sig` significant digits.
fn round_sig(v: f64, sig: usize) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(v.abs().log10().floor() as i32 + 1 - sig as i32);
    (v / scale).round() * scale
}

/// `v` with at most `sig` significant digits, trailing zeros dropped: "2.5", "10",
/// "0.25".
fn sig_digits(v: f64, sig: usize) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor() as i32;
    let decimals = (sig as i32 - 1 - mag).max(0) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Nanoseconds in one `unit`, if `unit` is a time.
fn time_unit_ns(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1.0),
        "µs" | "us" => Some(1e3),
        "ms" => Some(1e6),
        "s" => Some(1e9),
        _ => None,
    }
}

/// `v` (in `unit`) to `sig` significant digits: a time in the unit that keeps it at
/// 1 or more ("1.2 µs" for 1200 ns, "500 ns" for 0.5 µs), anything else with an SI
/// suffix and no unit ("15k", "1.5M", "0.25"; no suffix where the unit has its own
/// prefix: 1180 M ops/s). Zero is "0".
fn compact(v: f64, unit: &str, sig: usize) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let r = round_sig(v, sig);
    let at_least = |x: f64, d: f64| x.abs() >= d * (1.0 - 1e-9);
    if let Some(f) = time_unit_ns(unit) {
        let ns = r * f;
        let (div, name) = [(1e9, "s"), (1e6, "ms"), (1e3, "µs")]
            .into_iter()
            .find(|&(d, _)| at_least(ns, d))
            .unwrap_or((1.0, "ns"));
        return format!("{} {name}", sig_digits(ns / div, sig));
    }
    // A unit that has its own prefix ("M ops/s", "MiB") takes no second one: 1180, not 1.18k.
    let prefixed = matches!(unit.as_bytes(), [b'k' | b'M' | b'G', b' ' | b'/', ..])
        || ["KiB", "MiB", "GiB"].iter().any(|p| unit.starts_with(p));
    let (div, suffix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|&(d, _)| !prefixed && at_least(r, d))
        .unwrap_or((1.0, ""));
    format!("{}{suffix}", sig_digits(r / div, sig))
}

/// A tick label: `v` compactly, a time with its unit ("20 ns", "1.2 µs"), any other
/// number with an SI suffix ("0", "5k", "1.5M"; the unit is in the axis label).
fn si_label(v: f64, unit: &str) -> String {
    compact(v, unit, 3)
}

/// A value with its unit, three significant digits: "29.8 µs", "49.7k blocks",
/// "4.08 M/s", "2.74x", "0 blocks".
fn si_value(v: f64, unit: &str) -> String {
    let c = compact(v, unit, 3);
    if (time_unit_ns(unit).is_some() && v != 0.0) || unit.is_empty() || !v.is_finite() {
        c
    } else if unit == "x" {
        format!("{c}x")
    } else {
        format!("{c} {unit}")
    }
}

/// A ratio as "0.43x", "0.0046x", "12.5x", "1438x", with "*" when significant.
fn ratio_label(ratio: f64, significant: bool) -> String {
    if !ratio.is_finite() {
        return String::new();
    }
    let digits = if ratio >= 100.0 {
        0
    } else if ratio >= 10.0 {
        1
    } else {
        2
    };
    let r = if ratio == 0.0 {
        "0".to_owned()
    } else if ratio < 0.1 {
        // Two significant digits, so that a small ratio does not read 0.00x.
        sig_digits(ratio, 2)
    } else {
        format!("{ratio:.digits$}")
    };
    format!("{r}x{}", if significant { "*" } else { "" })
}

// --- Axes ------------------------------------------------------------------------

/// Spacings of linear ticks (times a power of ten), the roundest first.
const STEPS: [f64; 9] = [1.0, 2.0, 5.0, 2.5, 4.0, 3.0, 1.5, 6.0, 8.0];

/// Ticks of a linear axis from 0 that ends on a tick at or above `max`: at most
/// `max_ticks` of them, evenly spaced by one of `STEPS`. The roundest spacing that
/// gives at least four ticks and ends within 20 % of `max` wins; failing that, the
/// one ending nearest above `max` (never 25 % above with six ticks).
fn linear_ticks(max: f64, max_ticks: usize) -> Vec<f64> {
    let intervals = max_ticks.max(2) - 1;
    if max.is_nan() || max <= 0.0 || max.is_infinite() {
        return (0..=intervals.min(4)).map(|i| i as f64 * 0.25).collect();
    }
    let p = 10f64.powf((max / intervals as f64).log10().floor());
    // (step, intervals) of every spacing that keeps to the count, roundest first.
    let fits: Vec<(f64, usize)> = STEPS
        .iter()
        .flat_map(|m| [m * p, m * p * 10.0])
        .filter_map(|step| {
            // A maximum on a tick (to rounding) ends the axis there.
            let n = ((max / step) * (1.0 - 1e-12)).ceil().max(1.0) as usize;
            (n <= intervals).then_some((step, n))
        })
        .collect();
    let top = |&(s, n): &(f64, usize)| s * n as f64;
    let (step, n) = fits
        .iter()
        .find(|c| c.1 >= intervals.min(3) && top(c) <= max * 1.2)
        .or_else(|| fits.iter().min_by(|a, b| top(a).total_cmp(&top(b))))
        .copied()
        // 10p is at least max / intervals, so some spacing always fits.
        .unwrap_or((max, 1));
    (0..=n).map(|i| i as f64 * step).collect()
}

/// The upper end of a linear axis from 0 holding `max`, with at most `max_ticks` ticks.
fn nice_upper_bound(max: f64, max_ticks: usize) -> f64 {
    linear_ticks(max, max_ticks).last().copied().unwrap_or(1.0)
}

/// The largest of 1, 2 or 5 times a power of ten at or below `v` (> 0).
fn floor_125(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * p)
        .find(|x| *x <= v * (1.0 + 1e-9))
        .unwrap_or(p)
}

/// The smallest of 1, 2 or 5 times a power of ten at or above `v` (> 0).
fn ceil_125(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|x| *x >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// A log axis holding `lo..=hi` (both > 0): it runs from the 1-2-5 value at or below
/// `lo` to the one at or above `hi`; its ticks are 1, 2 and 5 times the powers of ten
/// inside when they are at most `max_ticks`, else the powers of ten (every second,
/// third… when those are still too many). Returns (low end, high end, ticks).
fn log_axis(lo: f64, hi: f64, max_ticks: usize) -> (f64, f64, Vec<f64>) {
    let a = floor_125(lo);
    let mut b = ceil_125(hi.max(lo));
    if b <= a * (1.0 + 1e-9) {
        b = ceil_125(a * 1.01);
    }
    let k0 = (a.log10() - 1e-9).floor() as i32;
    let k1 = (b.log10() + 1e-9).floor() as i32;
    let inside = |v: &f64| *v >= a * (1.0 - 1e-9) && *v <= b * (1.0 + 1e-9);
    let all: Vec<f64> = (k0..=k1)
        .flat_map(|k| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(k)))
        .filter(inside)
        .collect();
    let decades: Vec<f64> = (k0..=k1).map(|k| 10f64.powi(k)).filter(inside).collect();
    let ticks = if all.len() <= max_ticks || decades.len() < 2 {
        // Under a decade and a half, the 1-2-5 values (at most five of them).
        all.into_iter().take(max_ticks.max(2)).collect()
    } else if decades.len() <= max_ticks {
        decades
    } else {
        let every = decades.len().div_ceil(max_ticks.max(1));
        decades.into_iter().step_by(every).collect()
    };
    (a, b, ticks)
}

/// A value axis: linear from 0, or logarithmic, with its ticks.
#[derive(Clone, Debug)]
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Axis {
    /// A linear axis from 0 to `nice_upper_bound(max)`.
    fn linear(max: f64, max_ticks: usize) -> Axis {
        Axis {
            log: false,
            lo: 0.0,
            hi: nice_upper_bound(max, max_ticks),
            ticks: linear_ticks(max, max_ticks),
        }
    }

    /// A log axis holding `lo..=hi`, a little room either side for the dots.
    fn log(lo: f64, hi: f64, max_ticks: usize) -> Axis {
        let (lo, hi, ticks) = log_axis(lo / 1.15, hi * 1.15, max_ticks);
        Axis {
            log: true,
            lo,
            hi,
            ticks,
        }
    }

    /// The axis for `values` (non-finite ones ignored), logarithmic if `log`, with as
    /// many ticks (up to `MAX_TICKS`) as fit `width` pixels with labels in `unit`.
    fn fit(values: &[f64], log: bool, unit: &str, width: u32) -> Axis {
        let finite = || values.iter().copied().filter(|v| v.is_finite());
        let max = finite().fold(0.0, f64::max);
        let min_pos = finite().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let make = |n: usize| {
            if log && min_pos.is_finite() {
                Axis::log(min_pos, max, n)
            } else {
                Axis::linear(max, n)
            }
        };
        let measure = |s: &str| text_width(s, LABEL_PX);
        (2..=MAX_TICKS)
            .rev()
            .map(make)
            .find(|a| labels_fit(a, unit, width, &measure))
            .unwrap_or_else(|| make(2))
    }

    /// Where `v` sits on the drawing coordinate (log10 of it on a log axis, values at
    /// or below the low end pinned to it).
    fn pos(&self, v: f64) -> f64 {
        if self.log {
            v.max(self.lo).log10()
        } else {
            v
        }
    }

    /// The value at drawing coordinate `c`.
    fn value_at(&self, c: f64) -> f64 {
        if self.log {
            10f64.powf(c)
        } else {
            c
        }
    }

    /// The coordinate plotters draws with: the axis' span and ticks.
    fn ranged(&self) -> Ticked {
        Ticked {
            lo: self.pos(self.lo),
            hi: self.pos(self.hi),
            ticks: self.ticks.iter().map(|t| self.pos(*t)).collect(),
        }
    }
}

/// Whether the tick labels of `axis` (in `unit`) stand apart on an axis `width`
/// pixels long: neighbours at least `TICK_GAP` pixels apart, by `measure`.
fn labels_fit(axis: &Axis, unit: &str, width: u32, measure: &dyn Fn(&str) -> u32) -> bool {
    let (lo, hi) = (axis.pos(axis.lo), axis.pos(axis.hi));
    if hi <= lo {
        return false;
    }
    let placed: Vec<(f64, f64)> = axis
        .ticks
        .iter()
        .map(|t| {
            let x = (axis.pos(*t) - lo) / (hi - lo) * f64::from(width);
            (x, f64::from(measure(&si_label(*t, unit))))
        })
        .collect();
    placed
        .windows(2)
        .all(|w| w[1].0 - w[0].0 >= (w[0].1 + w[1].1) / 2.0 + f64::from(TICK_GAP))
}

/// A linear drawing coordinate with the ticks given (plotters would pick its own).
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        let f = if span > 0.0 {
            (v - self.lo) / span
        } else {
            0.5
        };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// Whether values spread over more than `decades` powers of ten (all positive ones
/// counted): such a chart gets a log axis, or the largest flatten the rest.
fn spans_decades(values: impl Iterator<Item = f64>, decades: f64) -> bool {
    let (lo, hi) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    hi > 0.0 && (hi / lo).log10() > decades
}

/// The label of a value axis: the metric, its unit where the ticks do not carry it
/// (times do: "time per test call", ticks "5 ms"), and "log scale" when it is.
fn axis_desc(name: &str, unit: &str, log: bool) -> String {
    let base = if time_unit_ns(unit).is_some() {
        match name.strip_prefix(unit).and_then(|r| r.strip_prefix(' ')) {
            Some(rest) => format!("time {rest}"),
            None => name.to_owned(),
        }
    } else if unit.is_empty() || name.contains(unit) {
        name.to_owned()
    } else {
        format!("{name} ({unit})")
    };
    if log {
        format!("{base} (log scale)")
    } else {
        base
    }
}

// --- Text ------------------------------------------------------------------------

/// Width of `text` in pixels at `size`.
fn text_width(text: &str, size: u32) -> u32 {
    (FONT, f64::from(size))
        .into_font()
        .box_size(text)
        .map_or_else(|_| text.chars().count() as u32 * size * 6 / 10, |(w, _)| w)
}

/// `text` in lines no wider than `width` by `measure`, broken at spaces; a word wider
/// than `width` has a line of its own (a title is never cut).
fn wrap_words(text: &str, width: u32, measure: &dyn Fn(&str) -> u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if line.is_empty() || measure(&candidate) <= width {
            line = candidate;
        } else {
            lines.push(std::mem::replace(&mut line, word.to_owned()));
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// A title set in `width` pixels: the largest of `sizes` (largest first) whose lines
/// are at most `max_lines` and each fits, else the smallest with as many lines as it
/// takes. Returns (size, lines).
fn fit_title(
    text: &str,
    width: u32,
    sizes: &[u32],
    max_lines: usize,
    measure: &dyn Fn(&str, u32) -> u32,
) -> (u32, Vec<String>) {
    for &size in sizes {
        let m = |s: &str| measure(s, size);
        let lines = wrap_words(text, width, &m);
        if lines.len() <= max_lines && lines.iter().all(|l| m(l) <= width) {
            return (size, lines);
        }
    }
    let size = sizes.last().copied().unwrap_or(12);
    (size, wrap_words(text, width, &|s| measure(s, size)))
}

/// Pixels taken by `lines` lines of text at `size`.
fn lines_height(size: u32, lines: usize) -> u32 {
    lines as u32 * (size + size / 4) + 8
}

/// Draws `lines` centred on `area`, from `top`.
fn draw_centred(area: &Area<'_>, lines: &[String], size: u32, top: i32) -> ChartResult<()> {
    let (w, _) = area.dim_in_pixel();
    let step = (size + size / 4) as i32;
    for (i, l) in lines.iter().enumerate() {
        area.draw(&Text::new(
            l.clone(),
            (w as i32 / 2, top + i as i32 * step),
            (FONT, size)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    Ok(())
}

/// Sets `title` across the top of `area` (wrapped, shrunk to fit); returns the area
/// below it.
fn titled<'a>(
    area: &Area<'a>,
    title: &str,
    sizes: &[u32],
    max_lines: usize,
) -> ChartResult<Area<'a>> {
    let (w, _) = area.dim_in_pixel();
    let (size, lines) = fit_title(title, w.saturating_sub(24), sizes, max_lines, &text_width);
    draw_centred(area, &lines, size, 6)?;
    let h = lines_height(size, lines.len()) + 4;
    Ok(area.clone().margin(h, 0, 0, 0))
}

// --- Colours and markers -----------------------------------------------------------

/// zonealloc's own variants where peers are compared: strong, distinct hues.
const ZONEALLOC: [RGBColor; 4] = [
    RGBColor(0xd6, 0x1a, 0x1a),
    RGBColor(0x11, 0x4f, 0xc4),
    RGBColor(0x8e, 0x24, 0xaa),
    RGBColor(0xf0, 0x7c, 0x00),
];

/// Variants of an experiment without peers (all zonealloc's): Tableau's strong hues.
const STRONG: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The peers zonealloc is compared with: hues of their own, none near zonealloc's red
/// and blue, each also told apart by its marker; drawn lighter than zonealloc's.
const MUTED: [RGBColor; 10] = [
    RGBColor(0xe0, 0x8a, 0x00),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0xa8, 0xa8, 0x10),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x00, 0x6d, 0x5b),
    RGBColor(0x5b, 0x5b, 0x9e),
    RGBColor(0xb8, 0x7a, 0x4a),
];

/// The baseline row of a table, and the "limit" series.
const BASELINE: RGBColor = RGBColor(0x70, 0x70, 0x70);

/// Marker shapes, cycled with a period prime to the palettes', so no two series of
/// one chart share colour and shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marker {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Cross,
    Plus,
}

const MARKERS: [Marker; 7] = [
    Marker::Circle,
    Marker::Square,
    Marker::TriangleUp,
    Marker::Diamond,
    Marker::TriangleDown,
    Marker::Cross,
    Marker::Plus,
];

/// How a variant is drawn relative to the others.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tier {
    /// The row others are compared with, or a "limit" that is no allocator.
    Baseline,
    /// zonealloc (or, without peers, every variant).
    Strong,
    /// A peer.
    Muted,
}

/// Colour, marker and weight of one variant, the same in every chart of an experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Style {
    colour: RGBColor,
    marker: Marker,
    tier: Tier,
}

impl Style {
    fn line_width(self) -> u32 {
        match self.tier {
            Tier::Strong => 4,
            Tier::Baseline | Tier::Muted => 2,
        }
    }

    fn marker_size(self) -> i32 {
        match self.tier {
            Tier::Strong => 7,
            Tier::Baseline | Tier::Muted => 5,
        }
    }
}

/// A variant's allocator: `bsa Heap (spin)` is `bsa Heap`, one colour.
fn family(variant: &str) -> &str {
    variant.split(" (").next().unwrap_or(variant)
}

fn is_zonealloc(family: &str) -> bool {
    family.starts_with("zonealloc")
}

/// The styles of an experiment's variants, by family.
struct Styles(Vec<(String, Style)>);

impl Styles {
    /// Styles for `names` (families, first appearance first); `baselines` are the
    /// families that head a table. Where zonealloc is compared with peers, its
    /// variants get `ZONEALLOC` and the peers `MUTED`; otherwise all get `STRONG`.
    fn new(names: &[String], baselines: &[String]) -> Styles {
        let is_base = |n: &str| baselines.iter().any(|b| b == n) || n.starts_with("limit");
        let peers = names.iter().any(|n| is_zonealloc(n))
            && names.iter().any(|n| !is_zonealloc(n) && !is_base(n));
        let (mut z, mut m, mut s, mut b) = (0, 0, 0, 0);
        let mut out = Vec::new();
        for n in names {
            let next = |k: &mut usize| {
                *k += 1;
                *k - 1
            };
            let style = if is_base(n) {
                let k = next(&mut b);
                Style {
                    colour: BASELINE,
                    marker: MARKERS[k % MARKERS.len()],
                    tier: Tier::Baseline,
                }
            } else if peers && is_zonealloc(n) {
                let k = next(&mut z);
                Style {
                    colour: ZONEALLOC[k % ZONEALLOC.len()],
                    marker: MARKERS[k % MARKERS.len()],
                    tier: Tier::Strong,
                }
            } else if peers {
                // Peers start at the square: the circle is zonealloc's.
                let k = next(&mut m);
                Style {
                    colour: MUTED[k % MUTED.len()],
                    marker: MARKERS[(k + 1) % MARKERS.len()],
                    tier: Tier::Muted,
                }
            } else {
                let k = next(&mut s);
                Style {
                    colour: STRONG[k % STRONG.len()],
                    marker: MARKERS[k % MARKERS.len()],
                    tier: Tier::Strong,
                }
            };
            out.push((n.clone(), style));
        }
        Styles(out)
    }

    /// The styles of every variant of `r`, its tables' and its scaling series'.
    fn of_experiment(r: &ExperimentResult) -> Styles {
        let mut names: Vec<String> = Vec::new();
        let mut add = |n: &str| {
            if !names.iter().any(|x| x == n) {
                names.push(n.to_owned());
            }
        };
        for t in &r.tables {
            for row in &t.rows {
                add(family(&row.variant));
            }
        }
        for s in r.scaling.iter().flat_map(|s| &s.series) {
            add(family(&s.name));
        }
        // A baseline is a family that heads every table it appears in; one that is
        // compared in some tables keeps a colour of its own (a panel greys its first
        // row anyway).
        let baselines: Vec<String> = names
            .iter()
            .filter(|n| {
                r.tables.iter().all(|t| {
                    t.rows
                        .iter()
                        .skip(1)
                        .all(|row| family(&row.variant) != n.as_str())
                })
            })
            .filter(|n| {
                r.tables.iter().any(|t| {
                    t.rows
                        .first()
                        .is_some_and(|b| family(&b.variant) == n.as_str())
                })
            })
            .cloned()
            .collect();
        Styles::new(&names, &baselines)
    }

    fn of(&self, variant: &str) -> Style {
        let f = family(variant);
        self.0.iter().find(|(n, _)| n == f).map_or(
            Style {
                colour: BASELINE,
                marker: Marker::Circle,
                tier: Tier::Baseline,
            },
            |(_, s)| *s,
        )
    }
}

/// The marker's outline around `(x, y)` in pixels, `r` its half size.
fn marker_points(m: Marker, (x, y): (i32, i32), r: i32) -> Vec<(i32, i32)> {
    match m {
        Marker::Circle => (0..=16)
            .map(|i| {
                let a = f64::from(i) * std::f64::consts::TAU / 16.0;
                (
                    x + (f64::from(r) * a.cos()).round() as i32,
                    y + (f64::from(r) * a.sin()).round() as i32,
                )
            })
            .collect(),
        Marker::Square => vec![
            (x - r, y - r),
            (x + r, y - r),
            (x + r, y + r),
            (x - r, y + r),
        ],
        Marker::TriangleUp => vec![(x, y - r - 1), (x + r + 1, y + r), (x - r - 1, y + r)],
        Marker::TriangleDown => vec![(x, y + r + 1), (x + r + 1, y - r), (x - r - 1, y - r)],
        Marker::Diamond => vec![
            (x, y - r - 2),
            (x + r + 1, y),
            (x, y + r + 2),
            (x - r - 1, y),
        ],
        Marker::Cross | Marker::Plus => Vec::new(),
    }
}

/// Draws marker `m` of colour `c` at pixel `at` of `area`, filled or (`filled`
/// false) as an outline.
fn draw_marker(
    area: &Area<'_>,
    m: Marker,
    at: (i32, i32),
    r: i32,
    c: RGBColor,
    filled: bool,
) -> ChartResult<()> {
    let (x, y) = at;
    let w = (r / 3).max(2) as u32;
    match m {
        Marker::Cross => {
            for (a, b) in [
                ((x - r, y - r), (x + r, y + r)),
                ((x - r, y + r), (x + r, y - r)),
            ] {
                area.draw(&PathElement::new([a, b], c.stroke_width(w + 1)))?;
            }
        }
        Marker::Plus => {
            for (a, b) in [
                ((x - r - 1, y), (x + r + 1, y)),
                ((x, y - r - 1), (x, y + r + 1)),
            ] {
                area.draw(&PathElement::new([a, b], c.stroke_width(w + 1)))?;
            }
        }
        _ => {
            let mut pts = marker_points(m, at, r);
            if filled {
                area.draw(&Polygon::new(pts, c.filled()))?;
            } else {
                area.draw(&Polygon::new(pts.clone(), WHITE.filled()))?;
                pts.push(pts[0]);
                area.draw(&PathElement::new(pts, c.stroke_width(w)))?;
            }
        }
    }
    Ok(())
}

/// `chart`'s pixel for `(x, y)`, relative to `area`.
fn pixel_in<X, Y>(
    chart: &ChartContext<'_, BitMapBackend<'_>, Cartesian2d<X, Y>>,
    area: &Area<'_>,
    at: (f64, f64),
) -> (i32, i32)
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let (x, y) = chart.backend_coord(&at);
    let (bx, by) = area.get_base_pixel();
    (x - bx, y - by)
}

// --- Writing the charts ----------------------------------------------------------

/// Writes the experiment's charts into `dir` and returns the files written:
/// `NAME.png`, one panel per table (median bar, or dot on a log axis; min–max
/// whisker; value and ratio beside it); past `SUMMARY_OVER` tables, `NAME.png` is a
/// summary (each table's variants against its baseline) and the panels go to
/// `NAME-detail.png`; with a scaling series, `NAME-scaling.png`.
///
/// # Errors
/// Drawing or encoding errors.
pub fn write_charts(dir: &Path, r: &ExperimentResult) -> ChartResult<Vec<PathBuf>> {
    register_font();
    let styles = Styles::of_experiment(r);
    let mut files = Vec::new();
    if !r.tables.is_empty() {
        let main = dir.join(format!("{}.png", r.name));
        if r.tables.len() > SUMMARY_OVER {
            let detail_name = format!("{}-detail.png", r.name);
            let detail = dir.join(&detail_name);
            summary_chart(&main, r, &styles, &detail_name)?;
            tables_chart(&detail, r, &styles)?;
            files.push(main);
            files.push(detail);
        } else {
            tables_chart(&main, r, &styles)?;
            files.push(main);
        }
    }
    if let Some(s) = &r.scaling {
        let path = dir.join(format!("{}-scaling.png", r.name));
        scaling_chart(&path, s, &styles)?;
        files.push(path);
    }
    Ok(files)
}

/// Height of one row of a panel, pixels.
const ROW_H: u32 = 30;
/// Height of the tick labels and axis label under a plot.
const X_AREA_H: u32 = 50;

/// Title of a table's panel: the table's own (what, parameters, unit).
fn panel_title(t: &Table) -> String {
    if t.title.trim().is_empty() {
        t.id.clone()
    } else {
        t.title.clone()
    }
}

/// Font size and lines of a panel title `w` pixels wide.
fn panel_title_lines(t: &Table, w: u32) -> (u32, Vec<String>) {
    fit_title(
        &panel_title(t),
        w.saturating_sub(24),
        &[17, 15, 14, 13],
        2,
        &text_width,
    )
}

/// Height of table `t`'s panel `w` pixels wide.
fn panel_height(t: &Table, w: u32) -> u32 {
    let (size, lines) = panel_title_lines(t, w);
    lines_height(size, lines.len()) + t.rows.len() as u32 * ROW_H + X_AREA_H + 14
}

/// Panels of horizontal bars (or dots on a log axis), one row per variant, the
/// baseline on top: names never overlap, each value and ratio in a column right of
/// the plot.
fn tables_chart(path: &Path, r: &ExperimentResult, styles: &Styles) -> ChartResult<()> {
    let n = r.tables.len();
    let cols = n.clamp(1, 2);
    let width = PANEL_W * cols as u32;
    let mut firsts: Vec<&str> = r
        .tables
        .iter()
        .filter_map(|t| t.rows.first())
        .map(|row| row.variant.as_str())
        .collect();
    firsts.dedup();
    let baseline = match firsts[..] {
        [one] => format!("the baseline, {one} (each panel's first row)"),
        _ => "each panel's first row, its baseline".to_owned(),
    };
    let baseline = if r.tables.iter().any(|t| panel_baseline(t) > 0) {
        format!("{baseline}, or where that failed the first row that did not")
    } else {
        baseline
    };
    let title = format!(
        "{}: the median of the runs as a bar (a dot on a log axis), their range as a \
         whisker; right of each plot the median and its ratio to {baseline} (* \
         significant, p < {ALPHA}); each axis says which way is better",
        r.name
    );
    let (tsize, tlines) = fit_title(&title, width - 24, &[19, 17, 15], 3, &text_width);
    let title_h = lines_height(tsize, tlines.len()) + 6;
    let grid_rows: Vec<&[Table]> = r.tables.chunks(cols).collect();
    let heights: Vec<u32> = grid_rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|t| panel_height(t, PANEL_W))
                .max()
                .unwrap_or(100)
        })
        .collect();
    let height = title_h + heights.iter().sum::<u32>();
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    draw_centred(&root, &tlines, tsize, 6)?;
    let mut rest = root.clone().margin(title_h, 0, 0, 0);
    for (row, h) in grid_rows.iter().zip(&heights) {
        let (this, below) = rest.split_vertically(*h);
        for (k, t) in row.iter().enumerate() {
            let (_, right) = this.split_horizontally(PANEL_W * k as u32);
            let (panel, _) = right.split_horizontally(PANEL_W);
            let targets: Vec<&Target> = r
                .targets
                .iter()
                .filter(|g| g.table.as_deref() == Some(t.id.as_str()) && g.unit == t.metric.unit)
                .collect();
            table_panel(&panel, t, styles, &targets)?;
        }
        rest = below;
    }
    root.present()?;
    Ok(())
}

/// The row of `t` a panel's ratios are to: the first that did not fail.
fn panel_baseline(t: &Table) -> usize {
    t.rows.iter().position(|r| r.failed.is_none()).unwrap_or(0)
}

/// The value column's text for a table row: median with unit, ratio to the panel's
/// baseline (none where it says nothing: a ratio of 0, a baseline of 0); "failed"
/// and why, for a row that failed.
fn value_label(t: &Table, i: usize, log: bool) -> String {
    let r = &t.rows[i];
    if let Some(why) = &r.failed {
        return format!("failed: {why}");
    }
    let b = panel_baseline(t);
    let base = &t.rows[b];
    let ratio = r.median / base.median;
    let ratio = if i == b {
        "baseline".to_owned()
    } else if ratio == 0.0 || base.median == 0.0 {
        String::new()
    } else {
        ratio_label(ratio, differs(base, r) == Some(true))
    };
    let off = if log && r.median <= 0.0 {
        " (off the log axis)"
    } else {
        ""
    };
    format!("{}{off}  {ratio}", si_value(r.median, &t.metric.unit))
        .trim_end()
        .to_owned()
}

/// The bounds of `targets` (in the table's unit), each once, ascending.
fn target_bounds(targets: &[&Target]) -> Vec<(f64, bool)> {
    let mut b: Vec<(f64, bool)> = targets
        .iter()
        .filter(|t| t.threshold.is_finite())
        .map(|t| (t.threshold, t.at_most))
        .collect();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    b.dedup();
    b
}

/// One table's panel, with the targets that read on it (same unit) as dashed lines.
fn table_panel(
    area: &Area<'_>,
    t: &Table,
    styles: &Styles,
    targets: &[&Target],
) -> ChartResult<()> {
    let (w, h) = area.dim_in_pixel();
    // A panel in a grid row of taller ones keeps its own height (its bars as thick).
    let (area, _) = area.split_vertically(panel_height(t, w).min(h));
    let area = &area;
    let (size, lines) = panel_title_lines(t, w);
    draw_centred(area, &lines, size, 4)?;
    let body = area
        .clone()
        .margin(lines_height(size, lines.len()), 0, 0, 0);
    let n = t.rows.len();
    let unit = t.metric.unit.as_str();
    // A failed row's figure is no result: it does not stretch the axis.
    let bounds = target_bounds(targets);
    let values: Vec<f64> = t
        .rows
        .iter()
        .filter(|r| r.failed.is_none())
        .flat_map(|r| [r.min, r.median, r.max])
        .chain(bounds.iter().map(|b| b.0))
        .collect();
    // Shares stay linear: 0 % (often the best) has no place on a log axis.
    let log = unit != "%" && spans_decades(values.iter().copied(), 1.5);
    let labels: Vec<String> = (0..n).map(|i| value_label(t, i, log)).collect();
    let names_w = t
        .rows
        .iter()
        .map(|r| text_width(&r.variant, LABEL_PX))
        .max()
        .unwrap_or(0)
        .saturating_add(26)
        .min(w * 45 / 100);
    let value_w = labels
        .iter()
        .map(|l| text_width(l, LABEL_PX))
        .max()
        .unwrap_or(0)
        + 24;
    let plot_w = w.saturating_sub(names_w + value_w + 8).max(80);
    let axis = Axis::fit(&values, log, unit, plot_w);
    let mut desc = format!(
        "{}: {}",
        axis_desc(&t.metric.name, unit, log),
        match &t.metric.better {
            Some(words) => words.as_str(),
            None if t.metric.lower_is_better => "lower is better",
            None => "higher is better",
        }
    );
    if !bounds.is_empty() {
        let list: Vec<String> = bounds
            .iter()
            .map(|(v, at_most)| {
                format!(
                    "{} {}",
                    if *at_most { "≤" } else { "≥" },
                    si_value(*v, unit)
                )
            })
            .collect();
        desc.push_str(&format!("; red dashes: target {}", list.join(", ")));
    }
    let desc_px = [LABEL_PX, 14, 13, 12, 11]
        .into_iter()
        .find(|s| text_width(&desc, *s) <= plot_w + 2 * names_w.min(value_w))
        .unwrap_or(11);
    let centres: Vec<f64> = (0..n).map(|i| (n - i) as f64 - 0.5).collect();
    let mut chart = ChartBuilder::on(&body)
        .margin_top(2)
        .margin_bottom(8)
        .margin_left(4)
        .margin_right(value_w)
        .x_label_area_size(X_AREA_H - 4)
        .y_label_area_size(names_w)
        .build_cartesian_2d(
            axis.ranged(),
            Ticked {
                lo: 0.0,
                hi: n as f64,
                ticks: centres,
            },
        )?;
    let name_at = |y: &f64| {
        let i = (n as f64 - 0.5 - y).round();
        if i >= 0.0 {
            t.rows.get(i as usize).map(|r| r.variant.clone())
        } else {
            None
        }
        .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .bold_line_style(BLACK.mix(0.12))
        .y_label_formatter(&name_at)
        .x_label_formatter(&|x| si_label(axis.value_at(*x), unit))
        .x_desc(desc)
        .label_style((FONT, LABEL_PX))
        .axis_desc_style((FONT, desc_px))
        .draw()?;
    let plot_right = chart.plotting_area().get_pixel_range().0.end - body.get_base_pixel().0;
    for (v, _) in &bounds {
        chart.draw_series(std::iter::once(DashedPathElement::new(
            vec![(axis.pos(*v), 0.0), (axis.pos(*v), n as f64)],
            7,
            5,
            TARGET.stroke_width(2),
        )))?;
    }
    let b = panel_baseline(t);
    for (i, r) in t.rows.iter().enumerate() {
        let y = (n - i) as f64 - 0.5;
        let style = if i == b {
            Style {
                colour: BASELINE,
                ..styles.of(&r.variant)
            }
        } else {
            styles.of(&r.variant)
        };
        let (_, py) = pixel_in(&chart, &body, (axis.pos(axis.lo), y));
        if r.failed.is_some() {
            let (px, _) = pixel_in(&chart, &body, (axis.pos(axis.lo), y));
            draw_failed(&body, (px + 12, py), 7)?;
            body.draw(&Text::new(
                labels[i].clone(),
                (plot_right + 10, py),
                (FONT, LABEL_PX)
                    .into_font()
                    .color(&FAILED)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
            continue;
        }
        if r.median.is_finite() && !log {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(axis.pos(0.0), y - 0.34), (axis.pos(r.median), y + 0.34)],
                style.colour.mix(0.85).filled(),
            )))?;
        }
        if r.min.is_finite() && r.max.is_finite() && r.max > r.min {
            let (a, b) = (axis.pos(r.min), axis.pos(r.max));
            chart.draw_series(
                [
                    vec![(a, y), (b, y)],
                    vec![(a, y - 0.18), (a, y + 0.18)],
                    vec![(b, y - 0.18), (b, y + 0.18)],
                ]
                .into_iter()
                .map(|p| PathElement::new(p, BLACK.stroke_width(2))),
            )?;
        }
        if log && r.median > 0.0 && r.median.is_finite() {
            let at = pixel_in(&chart, &body, (axis.pos(r.median), y));
            draw_marker(&body, Marker::Circle, at, 8, BLACK, true)?;
            draw_marker(&body, Marker::Circle, at, 6, style.colour, true)?;
        }
        body.draw(&Text::new(
            labels[i].clone(),
            (plot_right + 10, py),
            (FONT, LABEL_PX)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

// --- Summary -----------------------------------------------------------------------

/// How many times better `row` is than `base`, a row of the same table: base /
/// median where lower is better, median / base where higher is; above 1 is better.
/// `None` where that is no number, or either row failed.
fn gain(t: &Table, base: &Row, row: &Row) -> Option<f64> {
    if row.failed.is_some() || base.failed.is_some() {
        return None;
    }
    let g = if t.metric.lower_is_better {
        base.median / row.median
    } else {
        row.median / base.median
    };
    (g.is_finite() && g >= 0.0).then_some(g)
}

/// Whether `row` differs significantly from `base` (rows of one table), by the
/// Mann–Whitney test of their samples; `None` for single measurements, which have
/// no spread to test (a deterministic count, a capacity).
fn differs(base: &Row, row: &Row) -> Option<bool> {
    if base.samples.len() < 2 || row.samples.len() < 2 {
        return None;
    }
    Some(mann_whitney_p(&row.samples, &base.samples) < ALPHA)
}

/// The row a summary compares table `t`'s other rows with: the experiment's
/// `summary_reference` where the table has that variant, else the first row.
fn reference_row(t: &Table, reference: Option<&str>) -> usize {
    reference
        .and_then(|f| t.rows.iter().position(|r| family(&r.variant) == f))
        .unwrap_or(0)
}

/// Where a target reads on the gain axis of a summary: a "change" in % is the gain
/// less one (the experiments define it as baseline / after − 1 for times, after /
/// baseline − 1 for rates), a "speed-up" in x is the gain. Other targets (absolute
/// times, capacities, ratios between different tables) are not drawn there.
fn target_gain(t: &Target) -> Option<f64> {
    if t.unit == "%" && t.what.contains("change") {
        Some(1.0 + t.threshold / 100.0)
    } else if t.unit == "x" && t.what.contains("speed-up") {
        Some(t.threshold)
    } else {
        None
    }
}

/// The tables split by the text before the first ": " of their titles ("sim",
/// "mapped") when that makes 2 to 4 groups of at least 2 tables each; otherwise one
/// group, without a name.
fn group_tables(tables: &[Table]) -> Vec<(Option<String>, Vec<&Table>)> {
    let mut groups: Vec<(Option<String>, Vec<&Table>)> = Vec::new();
    for t in tables {
        let prefix = t.title.split_once(": ").map(|(p, _)| p.to_owned());
        match groups.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, g)) => g.push(t),
            None => groups.push((prefix, vec![t])),
        }
    }
    let named = groups.iter().all(|(p, g)| p.is_some() && g.len() >= 2);
    if named && (2..=4).contains(&groups.len()) {
        groups
    } else {
        vec![(None, tables.iter().collect())]
    }
}

/// A table's row label in the summary: its label for people where it has one;
/// otherwise its title less the group's name, or (without groups) its title up to
/// the first ": " (what and parameters, not the metric).
fn summary_label(t: &Table, group: Option<&str>) -> String {
    if let Some(l) = &t.label {
        return l.clone();
    }
    let title = panel_title(t);
    match group {
        Some(g) => title
            .strip_prefix(g)
            .and_then(|s| s.strip_prefix(": "))
            .unwrap_or(&title)
            .to_owned(),
        None => title.split(": ").next().unwrap_or(&title).to_owned(),
    }
}

/// Two figures of one unit, "before → after": "338 ns → 16.9 ns", "10.2 → 60.4 M
/// ops/s".
fn pair_text(a: f64, b: f64, unit: &str) -> String {
    if time_unit_ns(unit).is_some() || unit.is_empty() {
        format!("{} → {}", si_value(a, unit), si_value(b, unit))
    } else {
        format!("{} → {}", compact(a, unit, 3), si_value(b, unit))
    }
}

/// The most rows in one summary panel (more are split into panels side by side).
const SUMMARY_ROWS: usize = 18;

/// One panel of the summary: a name and its tables.
struct SummaryPanel<'a> {
    /// The title prefix that grouped its tables (targets name it).
    key: Option<String>,
    /// What the panel shows, in words.
    name: Option<String>,
    tables: Vec<&'a Table>,
}

/// An entry of a legend.
enum Key {
    /// A variant's marker, filled.
    Dot(Style, String),
    /// A line (colour, dashed).
    Line(RGBColor, bool, String),
    /// A hollow marker.
    Hollow(String),
    /// The cross of a failed variant.
    Failed(String),
    /// The posting's own figure: a hollow diamond.
    Posted(String),
}

fn key_text(key: &Key) -> &str {
    match key {
        Key::Dot(_, t) | Key::Line(_, _, t) | Key::Hollow(t) | Key::Failed(t) | Key::Posted(t) => t,
    }
}

/// Where each of `keys` goes in a legend `width` pixels wide, left to right and
/// wrapping to new lines (`measure` gives a text's width): the centre-left points of
/// their glyphs, and the height the legend takes.
fn legend_layout(
    keys: &[Key],
    width: u32,
    measure: &dyn Fn(&str) -> u32,
) -> (Vec<(i32, i32)>, u32) {
    let line_h = 26;
    let (mut x, mut y) = (12i32, 14i32);
    let mut at = Vec::new();
    for key in keys {
        let item_w = 40 + measure(key_text(key)) as i32 + 24;
        if x > 12 && x + item_w > width as i32 - 12 {
            x = 12;
            y += line_h;
        }
        at.push((x, y));
        x += item_w;
    }
    (at, y as u32 + 16)
}

/// Colour of what failed.
const FAILED: RGBColor = RGBColor(0xb0, 0x00, 0x20);

/// Draws the cross of a failed variant at `at`.
fn draw_failed(area: &Area<'_>, at: (i32, i32), r: i32) -> ChartResult<()> {
    draw_marker(area, Marker::Cross, at, r, FAILED, true)
}

/// Colour of the posting's own figures.
const POSTED: RGBColor = RGBColor(0x30, 0x30, 0x30);

/// Draws the mark of a posting's own figure at `at`: a hollow diamond.
fn draw_posted(area: &Area<'_>, at: (i32, i32)) -> ChartResult<()> {
    draw_marker(area, Marker::Diamond, at, 6, POSTED, false)
}

/// Draws `keys` at the places `legend_layout` gave.
fn draw_legend(area: &Area<'_>, keys: &[Key], at: &[(i32, i32)]) -> ChartResult<()> {
    for (key, &(x, y)) in keys.iter().zip(at) {
        match key {
            Key::Dot(s, _) => {
                draw_marker(area, s.marker, (x + 16, y), s.marker_size(), s.colour, true)?;
            }
            Key::Line(c, dashed, _) => {
                if *dashed {
                    area.draw(&DashedPathElement::new(
                        [(x + 2, y), (x + 32, y)],
                        6,
                        4,
                        c.stroke_width(3),
                    ))?;
                } else {
                    area.draw(&PathElement::new(
                        [(x + 2, y), (x + 32, y)],
                        c.stroke_width(2),
                    ))?;
                }
            }
            Key::Hollow(_) => {
                draw_marker(area, Marker::Circle, (x + 16, y), 6, BASELINE, false)?;
            }
            Key::Failed(_) => draw_failed(area, (x + 16, y), 6)?,
            Key::Posted(_) => draw_posted(area, (x + 16, y))?,
        }
        area.draw(&Text::new(
            key_text(key).to_owned(),
            (x + 40, y),
            (FONT, LABEL_PX)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// The style of the dot of a row that compares one setting with its baseline (the
/// row's label names both): one colour for all such rows, whatever their variants.
const PAIR_STYLE: Style = Style {
    colour: RGBColor(0x1f, 0x4e, 0x9c),
    marker: Marker::Circle,
    tier: Tier::Strong,
};

/// How a summary reads: against what each row's dots are placed.
struct Reading<'a> {
    /// The experiment's `summary_reference`: every row against that variant.
    reference: Option<&'a str>,
}

impl Reading<'_> {
    /// Whether `t` compares exactly one setting with its baseline.
    fn pair(&self, t: &Table) -> bool {
        self.reference.is_none() && t.rows.len() == 2
    }

    /// The reference row of `t`.
    fn base<'t>(&self, t: &'t Table) -> &'t Row {
        &t.rows[reference_row(t, self.reference)]
    }

    /// The rows of `t` drawn as dots: all but the reference.
    fn others<'t>(&self, t: &'t Table) -> impl Iterator<Item = &'t Row> + 't {
        let k = reference_row(t, self.reference);
        t.rows
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != k)
            .map(|(_, r)| r)
    }

    /// The style of the dot of `row`, of table `t`.
    fn style(&self, styles: &Styles, t: &Table, row: &Row) -> Style {
        if self.pair(t) {
            PAIR_STYLE
        } else {
            styles.of(&row.variant)
        }
    }

    /// The text right of a row's plot: the figures a reader asks for.
    fn value_text(&self, t: &Table) -> String {
        let base = self.base(t);
        let unit = t.metric.unit.as_str();
        if self.pair(t) {
            let row = self.others(t).next().expect("a pair has a second row");
            return match &row.failed {
                Some(why) => format!("{} → failed: {why}", si_value(base.median, unit)),
                None => format!(
                    "{}  {}",
                    pair_text(base.median, row.median, unit),
                    gain(t, base, row)
                        .map(|g| ratio_label(g, differs(base, row) == Some(true)))
                        .unwrap_or_default()
                ),
            };
        }
        if self.reference.is_some() {
            return format!("{}: {}", family(&base.variant), si_value(base.median, unit));
        }
        // Several settings against one baseline: every median, in table order.
        let others: Vec<String> = self
            .others(t)
            .map(|row| match row.failed {
                Some(_) => "failed".to_owned(),
                None => compact(row.median, unit, 3),
            })
            .collect();
        let base_text = if time_unit_ns(unit).is_some() {
            si_value(base.median, unit)
        } else {
            compact(base.median, unit, 3)
        };
        let tail = if time_unit_ns(unit).is_some() || unit.is_empty() {
            String::new()
        } else {
            format!(" {unit}")
        };
        format!("{base_text} → {}{tail}", others.join(" / "))
    }
}

/// One dot per variant and table: each table's variants against its baseline (or
/// the experiment's reference variant), a panel per group of tables, the targets
/// that read on that axis as dashed lines; the legend above the panels.
fn summary_chart(
    path: &Path,
    r: &ExperimentResult,
    styles: &Styles,
    detail_name: &str,
) -> ChartResult<()> {
    let reference = r.summary_reference.as_deref();
    // Tables whose reference is 0, failed or no number have no ratio to show.
    let shown: Vec<Table> = r
        .tables
        .iter()
        .filter(|t| {
            let b = &t.rows[reference_row(t, reference).min(t.rows.len().saturating_sub(1))];
            t.rows.len() > 1 && b.failed.is_none() && b.median.is_finite() && b.median > 0.0
        })
        .cloned()
        .collect();
    let reading = Reading { reference };
    let pairs = shown.iter().filter(|t| reading.pair(t)).count();
    let left_out: Vec<String> = r
        .tables
        .iter()
        .filter(|t| !shown.iter().any(|s| s.id == t.id))
        .map(|t| summary_label(t, None))
        .collect();
    let mut panels: Vec<SummaryPanel<'_>> = Vec::new();
    for (key, tables) in group_tables(&shown) {
        let name = key.as_ref().map(|k| {
            tables
                .iter()
                .find_map(|t| t.group.clone())
                .unwrap_or(k.clone())
        });
        let parts = tables.len().div_ceil(SUMMARY_ROWS);
        let per = tables.len().div_ceil(parts.max(1));
        for chunk in tables.chunks(per.max(1)) {
            panels.push(SummaryPanel {
                key: key.clone(),
                name: name.clone(),
                tables: chunk.to_vec(),
            });
        }
    }
    let targets: Vec<(&Target, f64)> = r
        .targets
        .iter()
        .filter(|t| t.table.is_none())
        .filter_map(|t| target_gain(t).map(|g| (t, g)))
        .collect();
    // Ratios that read on one row: a mark on that row.
    let row_targets: Vec<&Target> = r
        .targets
        .iter()
        .filter(|t| t.unit == "x" && shown.iter().any(|s| Some(&s.id) == t.table.as_ref()))
        .collect();
    // Legend: the dot of a pair's row, each variant's of the other rows (zonealloc's
    // first), hollow, failed, the line at 1, the targets.
    let mut keys: Vec<Key> = Vec::new();
    let mut pair_names: Vec<(&str, &str)> = shown
        .iter()
        .filter(|t| reading.pair(t))
        .map(|t| (t.rows[1].variant.as_str(), t.rows[0].variant.as_str()))
        .collect();
    pair_names.sort_unstable();
    pair_names.dedup();
    match pair_names[..] {
        [] => {}
        [(v, b)] => keys.push(Key::Dot(PAIR_STYLE, format!("{v} against {b} (= 1)"))),
        _ => keys.push(Key::Dot(
            PAIR_STYLE,
            "the setting a row names first, against the second (= 1)".into(),
        )),
    }
    let mut variants: Vec<String> = Vec::new();
    for t in shown.iter().filter(|t| !reading.pair(t)) {
        for row in reading.others(t) {
            if !variants.iter().any(|v| v == family(&row.variant)) {
                variants.push(family(&row.variant).to_owned());
            }
        }
    }
    variants.sort_by_key(|v| styles.of(v).tier != Tier::Strong);
    keys.extend(variants.iter().map(|v| {
        let text = if v.starts_with("limit") {
            format!("{v}: no allocator, a bare Vec")
        } else {
            v.clone()
        };
        Key::Dot(styles.of(v), text)
    }));
    keys.push(Key::Hollow(format!(
        "hollow: not significant (p ≥ {ALPHA})"
    )));
    if shown
        .iter()
        .any(|t| reading.others(t).any(|row| row.failed.is_some()))
    {
        keys.push(Key::Failed("failed: no result".into()));
    }
    let mut baselines: Vec<&str> = shown
        .iter()
        .map(|t| family(&reading.base(t).variant))
        .collect();
    baselines.dedup();
    let one = match (reference, &baselines[..]) {
        (Some(f), _) => f.to_owned(),
        (None, [b]) => (*b).to_owned(),
        _ => "the row's baseline".to_owned(),
    };
    if shown.iter().any(|t| t.posted_gain.is_some()) {
        keys.push(Key::Posted("the posting's own figure".into()));
    }
    keys.push(Key::Line(BLACK, false, format!("1 = {one}")));
    for t in &row_targets {
        keys.push(Key::Line(
            TARGET,
            true,
            format!(
                "on its row, target {} {}: {}",
                if t.at_most { "≤" } else { "≥" },
                ratio_label(t.threshold, false),
                t.what_alone()
            ),
        ));
    }
    for (t, g) in &targets {
        keys.push(Key::Line(
            TARGET,
            true,
            format!(
                "target {} {}: {}",
                if t.at_most { "≤" } else { "≥" },
                ratio_label(*g, false),
                t.what_alone()
            ),
        ));
    }
    let all_lower = shown.iter().all(|t| t.metric.lower_is_better);
    let all_higher = shown.iter().all(|t| !t.metric.lower_is_better);
    let (b, v) = match reference {
        Some(f) => (f, "the other's"),
        None => ("baseline", "the setting's"),
    };
    let rule = if all_lower {
        format!("{b}'s time ÷ {v}")
    } else if all_higher {
        format!("{v} rate ÷ {b}'s")
    } else {
        format!("{b}'s time ÷ {v}, or {v} rate or share ÷ {b}'s")
    };
    let mut title = match reference {
        Some(f) => format!(
            "{}: every allocator against {f} (= 1), workload by workload: right of 1 is \
             better than {f} (faster, or more of the arena), left of 1 worse. Beside each \
             row, {f}'s own figure. Each row has its own panel in {detail_name}",
            r.name
        ),
        None => format!(
            "{}: each row's setting against its baseline (= 1), in times better: right \
             of 1 is better, left of 1 worse. Beside each row, the medians as measured \
             ({}). Each row has its own panel in {detail_name}",
            r.name,
            if pairs == shown.len() {
                "baseline → setting"
            } else {
                "baseline → setting, or baseline → each setting, as the row names them"
            }
        ),
    };
    if !left_out.is_empty() {
        title.push_str(&format!(
            ". Not here, as {} is 0 or failed there: {}",
            reference.unwrap_or("the baseline"),
            left_out.join("; ")
        ));
    }

    // Sizes: the row label column is as wide as the widest label allows, up to half
    // a panel; labels wrap past that.
    let width = SUMMARY_W;
    let panel_w = width / panels.len().max(1) as u32;
    let (tsize, tlines) = fit_title(&title, width - 24, &[19, 17, 15], 3, &text_width);
    let title_h = lines_height(tsize, tlines.len()) + 4;
    let (legend_at, legend_h) = legend_layout(&keys, width, &|s| text_width(s, LABEL_PX));
    let layouts: Vec<(u32, Vec<Vec<String>>)> = panels
        .iter()
        .map(|p| {
            let labels: Vec<String> = p
                .tables
                .iter()
                .map(|t| {
                    let l = summary_label(t, p.key.as_deref());
                    if reading.pair(t) && t.label.is_none() {
                        format!("{l}: {} vs {}", t.rows[1].variant, t.rows[0].variant)
                    } else {
                        l
                    }
                })
                .collect();
            let widest = labels
                .iter()
                .map(|l| text_width(l, LABEL_PX))
                .max()
                .unwrap_or(0);
            let names_w = (widest + 16).min(panel_w * 2 / 5);
            let wrapped = labels
                .iter()
                .map(|l| wrap_words(l, names_w - 16, &|s| text_width(s, LABEL_PX)))
                .collect();
            (names_w, wrapped)
        })
        .collect();
    let row_h = layouts
        .iter()
        .flat_map(|(_, w)| w.iter().map(Vec::len))
        .max()
        .map_or(ROW_H, |lines| ROW_H.max(lines as u32 * 18 + 8));
    let rows = panels.iter().map(|p| p.tables.len()).max().unwrap_or(1) as u32;
    let value_texts: Vec<Vec<String>> = panels
        .iter()
        .map(|p| p.tables.iter().map(|t| reading.value_text(t)).collect())
        .collect();
    let widest_values = value_texts
        .iter()
        .flatten()
        .map(|l| text_width(l, LABEL_PX))
        .max()
        .unwrap_or(0)
        + 20;
    // One axis for every panel, so that their dots compare: every gain, 1 and the
    // targets, ticks for the narrowest plot.
    let mut values: Vec<f64> = shown
        .iter()
        .flat_map(|t| {
            let base = reading.base(t);
            reading.others(t).filter_map(move |row| gain(t, base, row))
        })
        .chain(targets.iter().map(|(_, g)| *g))
        .chain(row_targets.iter().map(|t| t.threshold))
        .chain(shown.iter().filter_map(|t| t.posted_gain))
        .collect();
    values.push(1.0);
    let log = spans_decades(values.iter().copied(), 1.0);
    let widest_names = layouts.iter().map(|(w, _)| *w).max().unwrap_or(0);
    let axis = Axis::fit(
        &values,
        log,
        "",
        panel_w
            .saturating_sub(widest_names + widest_values + 8)
            .max(80),
    );
    let panel_title_h = if panels.iter().any(|p| p.name.is_some()) {
        30
    } else {
        0
    };
    let height = title_h + legend_h + panel_title_h + rows * row_h + X_AREA_H + 20;

    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    draw_centred(&root, &tlines, tsize, 6)?;
    let below = root.clone().margin(title_h, 0, 0, 0);
    draw_legend(&below, &keys, &legend_at)?;
    let below = below.margin(legend_h, 0, 0, 0);
    let desc = axis_desc(
        &format!(
            "times better than {}: {rule}",
            reference.unwrap_or("the baseline")
        ),
        "",
        log,
    );
    for (k, (p, (names_w, labels))) in panels.iter().zip(&layouts).enumerate() {
        let (_, right) = below.split_horizontally(panel_w * k as u32);
        let (area, _) = right.split_horizontally(panel_w);
        if let Some(name) = &p.name {
            draw_centred(&area, std::slice::from_ref(name), 17, 2)?;
        }
        let body = area.clone().margin(panel_title_h, 0, 0, 0);
        let lines: Vec<f64> = targets
            .iter()
            .filter(|(t, _)| match &p.key {
                Some(n) => {
                    t.what.starts_with(&format!("{n}:"))
                        || !panels
                            .iter()
                            .filter_map(|q| q.key.as_deref())
                            .any(|q| t.what.starts_with(&format!("{q}:")))
                }
                None => true,
            })
            .map(|(_, g)| *g)
            .collect();
        let rows = PanelRows {
            names_w: *names_w,
            labels,
            values: &value_texts[k],
            value_w: widest_values,
            targets: p
                .tables
                .iter()
                .map(|t| {
                    row_targets
                        .iter()
                        .filter(|g| g.table.as_ref() == Some(&t.id))
                        .map(|g| g.threshold)
                        .collect()
                })
                .collect(),
        };
        summary_panel(&body, p, styles, &reading, &rows, &lines, &axis, &desc)?;
    }
    root.present()?;
    Ok(())
}

/// Colour of target lines.
const TARGET: RGBColor = RGBColor(0xc0, 0x00, 0x00);

/// The text around one summary panel's plot: row labels left, figures right.
struct PanelRows<'a> {
    names_w: u32,
    labels: &'a [Vec<String>],
    values: &'a [String],
    value_w: u32,
    /// Per row, the ratios of the targets that read on it.
    targets: Vec<Vec<f64>>,
}

/// One panel of the summary: a row per table, a dot per variant at its gain.
#[allow(clippy::too_many_arguments)]
fn summary_panel(
    area: &Area<'_>,
    p: &SummaryPanel<'_>,
    styles: &Styles,
    reading: &Reading<'_>,
    rows: &PanelRows<'_>,
    target_lines: &[f64],
    axis: &Axis,
    desc: &str,
) -> ChartResult<()> {
    let (w, _) = area.dim_in_pixel();
    let n = p.tables.len();
    let names_w = rows.names_w;
    let plot_w = w.saturating_sub(names_w + rows.value_w + 8).max(80);
    let log = axis.log;
    let desc_px = [LABEL_PX, 14, 13, 12, 11]
        .into_iter()
        .find(|s| text_width(desc, *s) <= plot_w + names_w)
        .unwrap_or(11);
    let mut chart = ChartBuilder::on(area)
        .margin_top(2)
        .margin_bottom(8)
        .margin_left(4)
        .margin_right(rows.value_w)
        .x_label_area_size(X_AREA_H - 4)
        .y_label_area_size(names_w)
        .build_cartesian_2d(
            axis.ranged(),
            Ticked {
                lo: 0.0,
                hi: n as f64,
                ticks: (0..n).map(|i| (n - i) as f64 - 0.5).collect(),
            },
        )?;
    chart
        .configure_mesh()
        .bold_line_style(BLACK.mix(0.12))
        .y_label_formatter(&|_| String::new())
        .x_label_formatter(&|x| si_label(axis.value_at(*x), ""))
        .x_desc(desc)
        .label_style((FONT, LABEL_PX))
        .axis_desc_style((FONT, desc_px))
        .draw()?;
    let (top, bottom) = (n as f64, 0.0);
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(axis.pos(1.0), bottom), (axis.pos(1.0), top)],
        BLACK.stroke_width(2),
    )))?;
    for g in target_lines {
        chart.draw_series(std::iter::once(DashedPathElement::new(
            vec![(axis.pos(*g), bottom), (axis.pos(*g), top)],
            8,
            5,
            TARGET.stroke_width(3),
        )))?;
    }
    let plot = chart.plotting_area().get_pixel_range();
    let (bx, _) = area.get_base_pixel();
    let (plot_left, plot_right) = (plot.0.start - bx, plot.0.end - bx);
    for (i, t) in p.tables.iter().enumerate() {
        let y = (n - i) as f64 - 0.5;
        let (_, py) = pixel_in(&chart, area, (axis.pos(axis.lo), y));
        // The row's label, right-aligned against the plot, its lines centred on the row.
        let lines = &rows.labels[i];
        let step = 18;
        let first = py - (lines.len() as i32 - 1) * step / 2;
        for (k, l) in lines.iter().enumerate() {
            area.draw(&Text::new(
                l.clone(),
                (plot_left - 10, first + k as i32 * step),
                (FONT, LABEL_PX)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
        }
        for g in &rows.targets[i] {
            chart.draw_series(std::iter::once(DashedPathElement::new(
                vec![(axis.pos(*g), y - 0.45), (axis.pos(*g), y + 0.45)],
                5,
                3,
                TARGET.stroke_width(3),
            )))?;
        }
        if let Some(g) = t.posted_gain.filter(|g| *g > 0.0 && g.is_finite()) {
            draw_posted(area, pixel_in(&chart, area, (axis.pos(g), y)))?;
        }
        let base = reading.base(t);
        // Muted dots first, zonealloc's on top.
        let mut order: Vec<&Row> = reading.others(t).collect();
        order.sort_by_key(|row| styles.of(&row.variant).tier == Tier::Strong);
        let mut failed_x = plot_left + 10;
        for row in order {
            let style = reading.style(styles, t, row);
            if row.failed.is_some() {
                // At the left end, named (the row's value column says it for a pair).
                draw_failed(area, (failed_x, py), 6)?;
                if !reading.pair(t) {
                    let name = format!("{} failed", family(&row.variant));
                    area.draw(&Text::new(
                        name.clone(),
                        (failed_x + 10, py),
                        (FONT, 13)
                            .into_font()
                            .color(&FAILED)
                            .pos(Pos::new(HPos::Left, VPos::Center)),
                    ))?;
                    failed_x += 24 + text_width(&name, 13) as i32;
                }
                continue;
            }
            let Some(g) = gain(t, base, row) else {
                continue;
            };
            if log && g <= 0.0 {
                // Zero has no place on a log axis: its marker at the left end, "0"
                // beside it.
                let at = (plot_left + 8, py);
                draw_marker(
                    area,
                    style.marker,
                    at,
                    style.marker_size(),
                    style.colour,
                    true,
                )?;
                area.draw(&Text::new(
                    "= 0",
                    (plot_left + 18, py),
                    (FONT, 13)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))?;
                continue;
            }
            let at = pixel_in(&chart, area, (axis.pos(g), y));
            draw_marker(
                area,
                style.marker,
                at,
                style.marker_size(),
                style.colour,
                differs(base, row) != Some(false),
            )?;
        }
        area.draw(&Text::new(
            rows.values[i].clone(),
            (plot_right + 10, py),
            (FONT, LABEL_PX)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

// --- Scaling ---------------------------------------------------------------------

/// Ticks of the threads axis: the thread counts measured, less any whose label would
/// crowd the one before (`pixel` maps a count to its pixel).
fn thread_ticks(counts: &[u32], pixel: &dyn Fn(u32) -> f64, min_gap: f64) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for &c in counts {
        if out.last().is_none_or(|&p| pixel(c) - pixel(p) >= min_gap) {
            out.push(c);
        }
    }
    out
}

/// A series' medians at each thread count, for its legend entry: "55.2 / 112 / 98.4".
fn medians_text(x: &Series) -> String {
    x.points
        .iter()
        .map(|p| compact(p.median, "", 3))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The order of a scaling chart's legend: the series by their median at the most
/// threads, highest first, as their lines end on the right of the plot.
fn legend_order(series: &[Series]) -> Vec<usize> {
    let last = |x: &Series| {
        x.points
            .iter()
            .max_by_key(|p| p.threads)
            .map_or(f64::NEG_INFINITY, |p| {
                if p.median.is_finite() {
                    p.median
                } else {
                    f64::NEG_INFINITY
                }
            })
    };
    let mut order: Vec<usize> = (0..series.len()).collect();
    order.sort_by(|&a, &b| last(&series[b]).total_cmp(&last(&series[a])));
    order
}

/// Throughput against threads, on a linear axis from 0 (the figures compare as
/// they are; a series near 0 reads as near 0, its figures in the legend): zonealloc's
/// series heavy, every series its own colour and marker, a limit grey and dashed.
/// Each point is the median of the runs, its whisker their range, the series set a
/// little apart at each thread count so that the whiskers do not hide each other.
/// Threads on a log2 axis when they span a factor of 8 or more. The legend beside
/// the plot, ordered as the lines end, with each series' medians.
fn scaling_chart(path: &Path, s: &Scaling, styles: &Styles) -> ChartResult<()> {
    let (w, h) = (1200u32, 640u32);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let dashed = |x: &Series| x.baseline || styles.of(&x.name).tier == Tier::Baseline;
    let baseline: Vec<&str> = s
        .series
        .iter()
        .filter(|x| dashed(x))
        .map(|x| x.name.as_str())
        .collect();
    let title = format!(
        "{}; higher is better. A point is the median of the runs, its whisker their \
         range{}",
        s.title,
        match baseline[..] {
            [] => String::new(),
            [b] => format!("; dashed: {b}, the baseline"),
            _ => format!("; dashed: {}, the baselines", baseline.join(", ")),
        }
    );
    let root = titled(&root, &title, &[20, 18, 16, 15], 2)?;
    let order = legend_order(&s.series);
    let legend_text: Vec<String> = s
        .series
        .iter()
        .map(|x| format!("{}: {}", x.name, medians_text(x)))
        .collect();
    let mut counts: Vec<u32> = s
        .series
        .iter()
        .flat_map(|x| x.points.iter().map(|p| p.threads))
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let legend_head = format!(
        "medians at {} thread{} ({})",
        counts
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" / "),
        if counts == [1] { "" } else { "s" },
        s.y_label
    );
    let legend_w = legend_text
        .iter()
        .map(|t| text_width(t, LABEL_PX))
        .chain(std::iter::once(text_width(&legend_head, LABEL_PX)))
        .max()
        .unwrap_or(0)
        .clamp(160, 420)
        + 54
        + 16;
    let (plot, legend) = root.split_horizontally(w - legend_w);

    let (tmin, tmax) = (
        counts.first().copied().unwrap_or(1).max(1),
        counts.last().copied().unwrap_or(1).max(1),
    );
    let log_x = tmax >= 8 * tmin;
    let tx = move |t: u32| {
        if log_x {
            f64::from(t.max(1)).log2()
        } else {
            f64::from(t)
        }
    };
    let (x_lo, x_hi) = if log_x {
        (tx(tmin) - 0.4, tx(tmax) + 0.4)
    } else {
        (f64::from(tmin) - 0.6, f64::from(tmax) + 0.6)
    };
    // The series side by side at a thread count: spread over a fifth of the gap
    // between the two closest counts.
    let gap = counts
        .windows(2)
        .map(|c| tx(c[1]) - tx(c[0]))
        .fold(1.0, f64::min);
    let n = s.series.len().max(1);
    let dodge = |k: usize| {
        if n == 1 {
            0.0
        } else {
            (k as f64 / (n - 1) as f64 - 0.5) * gap * 0.2
        }
    };
    let (pw, ph) = plot.dim_in_pixel();
    let x_px = |t: u32| (tx(t) - x_lo) / (x_hi - x_lo) * f64::from(pw.saturating_sub(120));
    let ticks = thread_ticks(&counts, &x_px, 36.0);

    let values: Vec<f64> = s
        .series
        .iter()
        .flat_map(|x| x.points.iter())
        .flat_map(|p| [p.min, p.median, p.max])
        .collect();
    // Vertical room: labels are one line high, so six always fit; the width check
    // uses the plot's height as its length.
    let axis = Axis::fit(&values, false, "", ph.saturating_sub(120));
    let y_label_w = axis
        .ticks
        .iter()
        .map(|t| text_width(&si_label(*t, ""), LABEL_PX + 2))
        .max()
        .unwrap_or(30)
        + 44;
    let mut chart = ChartBuilder::on(&plot)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(y_label_w)
        .build_cartesian_2d(
            Ticked {
                lo: x_lo,
                hi: x_hi,
                ticks: ticks.iter().map(|t| tx(*t)).collect(),
            },
            axis.ranged(),
        )?;
    chart
        .configure_mesh()
        .bold_line_style(BLACK.mix(0.12))
        .x_label_formatter(&|x| {
            let t = if log_x { x.exp2() } else { *x };
            format!("{:.0}", t.round())
        })
        .y_label_formatter(&|y| si_label(axis.value_at(*y), ""))
        .x_desc("threads")
        .y_desc(if s.y_label.contains("all threads") {
            s.y_label.clone()
        } else {
            format!("{}, all threads", s.y_label)
        })
        .label_style((FONT, LABEL_PX + 2))
        .axis_desc_style((FONT, LABEL_PX + 2))
        .draw()?;
    // The baseline and peers first, zonealloc's last: drawn on top.
    let mut draw_order: Vec<(usize, Style)> = s
        .series
        .iter()
        .enumerate()
        .map(|(k, x)| (k, styles.of(&x.name)))
        .collect();
    draw_order.sort_by_key(|(_, st)| match st.tier {
        Tier::Baseline => 0,
        Tier::Muted => 1,
        Tier::Strong => 2,
    });
    for &(k, style) in &draw_order {
        let series = &s.series[k];
        let x_of = |p: &Point| tx(p.threads) + dodge(k);
        let pts: Vec<(f64, f64)> = series
            .points
            .iter()
            .filter(|p| p.median.is_finite())
            .map(|p| (x_of(p), axis.pos(p.median)))
            .collect();
        for p in &series.points {
            if p.min.is_finite() && p.max.is_finite() {
                let (a, b) = (
                    pixel_in(&chart, &plot, (x_of(p), axis.pos(p.min))),
                    pixel_in(&chart, &plot, (x_of(p), axis.pos(p.max))),
                );
                let whisker = style.colour.stroke_width(2);
                for seg in [
                    [a, b],
                    [(a.0 - 4, a.1), (a.0 + 4, a.1)],
                    [(b.0 - 4, b.1), (b.0 + 4, b.1)],
                ] {
                    plot.draw(&PathElement::new(seg, whisker))?;
                }
            }
        }
        let line = style.colour.stroke_width(style.line_width());
        if dashed(series) {
            chart.draw_series(std::iter::once(DashedPathElement::new(
                pts.clone(),
                10,
                6,
                line,
            )))?;
        } else {
            chart.draw_series(std::iter::once(PathElement::new(pts.clone(), line)))?;
        }
        for &p in &pts {
            let at = pixel_in(&chart, &plot, p);
            draw_marker(
                &plot,
                style.marker,
                at,
                style.marker_size(),
                style.colour,
                true,
            )?;
        }
    }
    legend.draw(&Text::new(
        legend_head,
        (6, 22),
        (FONT, LABEL_PX)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    let step = ((h as usize - 110) / order.len().max(1)).clamp(18, 30) as i32;
    for (i, &k) in order.iter().enumerate() {
        let style = styles.of(&s.series[k].name);
        let y = 54 + i as i32 * step;
        let line = style.colour.stroke_width(style.line_width());
        if dashed(&s.series[k]) {
            legend.draw(&DashedPathElement::new([(6, y), (44, y)], 8, 5, line))?;
        } else {
            legend.draw(&PathElement::new([(6, y), (44, y)], line))?;
        }
        draw_marker(
            &legend,
            style.marker,
            (25, y),
            style.marker_size(),
            style.colour,
            true,
        )?;
        legend.draw(&Text::new(
            legend_text[k].clone(),
            (54, y),
            (FONT, LABEL_PX)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Metric;

    /// A text measure for the pure layout functions: 8 pixels a character.
    fn eight(s: &str) -> u32 {
        s.chars().count() as u32 * 8
    }

    #[test]
    fn linear_axes_have_at_most_six_ticks_and_end_near_the_data() {
        // Every maximum from 1e-3 to 1e9, about 40 a decade.
        let mut max = 1e-3;
        while max < 1e9 {
            let ticks = linear_ticks(max, MAX_TICKS);
            let top = nice_upper_bound(max, MAX_TICKS);
            assert!(
                ticks.len() <= MAX_TICKS && ticks.len() >= 2,
                "{max}: {ticks:?}"
            );
            assert_eq!(ticks[0], 0.0);
            assert!(top >= max * (1.0 - 1e-9), "{max}: ends at {top}");
            assert!(top <= max * 1.25 * (1.0 + 1e-9), "{max}: ends at {top}");
            assert_eq!(*ticks.last().unwrap(), top);
            // Evenly spaced by one of the steps.
            let step = ticks[1];
            let m = step / 10f64.powf(step.log10().floor());
            assert!(
                STEPS.iter().any(|x| (m - x).abs() < 1e-6),
                "{max}: step {step}"
            );
            max *= 1.06;
        }
        // The reported case: peers up to 10,000, not 1,000,000.
        assert_eq!(nice_upper_bound(9_870.0, 6), 10_000.0);
        assert_eq!(linear_ticks(20_000.0, 6), [0.0, 5e3, 10e3, 15e3, 20e3]);
        assert_eq!(
            linear_ticks(11_000.0, 6),
            [0.0, 2.5e3, 5e3, 7.5e3, 10e3, 12.5e3]
        );
        assert_eq!(linear_ticks(17_500.0, 6), [0.0, 5e3, 10e3, 15e3, 20e3]);
        assert_eq!(nice_upper_bound(0.0, 6), 1.0);
        // Fewer ticks where the width asks for them.
        for n in 2..=5 {
            assert!(linear_ticks(7_777.0, n).len() <= n);
        }
    }

    #[test]
    fn log_axes_tick_at_powers_of_ten_and_fit_the_data() {
        let (lo, hi, ticks) = log_axis(2.0, 2885.0, 6);
        assert_eq!((lo, hi), (2.0, 5000.0));
        assert_eq!(ticks, [10.0, 100.0, 1000.0]);
        // Under a decade and a half: 1-2-5 ticks.
        let (lo, hi, ticks) = log_axis(3.0, 40.0, 6);
        assert_eq!((lo, hi), (2.0, 50.0));
        assert_eq!(ticks, [2.0, 5.0, 10.0, 20.0, 50.0]);
        // Many decades: every second power of ten, never more than six ticks.
        let (_, _, ticks) = log_axis(1e-3, 1e9, 6);
        assert!(ticks.len() <= 6 && ticks.len() >= 2, "{ticks:?}");
        for (lo, hi) in [
            (0.2, 92.0),
            (7.0, 1108.0),
            (1.0, 1e4),
            (0.0007, 1.3),
            (5.0, 5.0),
        ] {
            let (a, b, t) = log_axis(lo, hi, 6);
            assert!(a <= lo && b >= hi && a < b, "{lo}..{hi}: {a}..{b}");
            assert!(b <= hi * 5.0 && a >= lo / 5.0, "{lo}..{hi}: {a}..{b}");
            assert!((2..=6).contains(&t.len()), "{lo}..{hi}: {t:?}");
            assert!(t.iter().all(|x| *x >= a && *x <= b));
        }
    }

    #[test]
    fn tick_labels_are_compact_with_si_suffixes_and_time_units() {
        let labels: Vec<String> = linear_ticks(20_000.0, 5)
            .iter()
            .map(|t| si_label(*t, "blocks"))
            .collect();
        assert_eq!(labels, ["0", "5k", "10k", "15k", "20k"]);
        assert_eq!(si_label(1.5e6, ""), "1.5M");
        assert_eq!(si_label(0.25, ""), "0.25");
        assert_eq!(si_label(12_500.0, ""), "12.5k");
        assert_eq!(si_label(999.96, ""), "1k");
        // Times in the unit that suits them.
        assert_eq!(si_label(20.0, "ns"), "20 ns");
        assert_eq!(si_label(1200.0, "ns"), "1.2 µs");
        assert_eq!(si_label(0.5, "µs"), "500 ns");
        assert_eq!(si_label(25_000.0, "µs"), "25 ms");
        assert_eq!(si_label(0.0, "µs"), "0");
        // The reported labels, none longer than six characters.
        for max in [300.0, 0.0003, 20_000.0, 1_234_567.0] {
            for t in linear_ticks(max, 6) {
                assert!(si_label(t, "").chars().count() <= 6, "{t}");
            }
        }
    }

    #[test]
    fn values_carry_their_unit_and_zero_is_zero() {
        assert_eq!(si_value(29.807, "µs"), "29.8 µs");
        assert_eq!(si_value(15_864.4, "ns"), "15.9 µs");
        assert_eq!(si_value(49_671.0, "blocks"), "49.7k blocks");
        assert_eq!(si_value(0.0, "blocks"), "0 blocks");
        assert_eq!(si_value(4.079, "M/s"), "4.08 M/s");
        assert_eq!(si_value(99.586, "%"), "99.6 %");
        assert_eq!(si_value(2.738, "x"), "2.74x");
        assert_eq!(si_value(1181.3, "M it/s"), "1180 M it/s");
        assert_eq!(si_value(1020.0, "MiB"), "1020 MiB");
        assert_eq!(si_label(1250.0, "M/s"), "1250");
        assert_eq!(ratio_label(1437.81, true), "1438x*");
        assert_eq!(ratio_label(0.4321, false), "0.43x");
        assert_eq!(ratio_label(0.004_61, true), "0.0046x*");
        assert_eq!(ratio_label(0.0, false), "0x");
        assert_eq!(ratio_label(f64::NAN, false), "");
    }

    #[test]
    fn tick_labels_that_would_touch_are_thinned() {
        let wide = Axis::linear(20_000.0, 6);
        assert!(labels_fit(&wide, "", 400, &eight));
        // 6 labels of up to 3 characters need 5 x (24 + 14) pixels.
        assert!(!labels_fit(&wide, "", 150, &eight));
        let t = Axis::linear(21_000.0, 6);
        assert!(!labels_fit(&t, "µs", 200, &eight));
        assert!(labels_fit(&Axis::linear(21_000.0, 3), "µs", 200, &eight));
    }

    #[test]
    fn axis_labels_name_the_metric_and_its_unit_once() {
        assert_eq!(
            axis_desc("µs per test call", "µs", false),
            "time per test call"
        );
        assert_eq!(
            axis_desc("fragments carved per second", "M/s", true),
            "fragments carved per second (M/s) (log scale)"
        );
        assert_eq!(
            axis_desc("% of the arena at order 0", "%", false),
            "% of the arena at order 0"
        );
    }

    #[test]
    fn titles_wrap_or_shrink_and_are_never_cut() {
        let text =
            "20000 x (alloc order 9, split_page, free the 512 pages), 1 thread: µs per iteration";
        let lines = wrap_words(text, 300, &eight);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| eight(l) <= 300), "{lines:?}");
        assert_eq!(lines.join(" "), text);
        // A word wider than the line gets one of its own, whole.
        let lines = wrap_words("a sim-fix_size_alloc_test-p16-h1 b", 100, &eight);
        assert_eq!(lines, ["a", "sim-fix_size_alloc_test-p16-h1", "b"]);
        // The font shrinks before a third line is needed.
        let m = |s: &str, size: u32| s.chars().count() as u32 * size / 2;
        let (size, lines) = fit_title(text, 380, &[20, 16, 12], 2, &m);
        assert!(size < 20 && lines.len() <= 2, "{size} {lines:?}");
        assert_eq!(lines.join(" "), text);
        // Where no size fits in two lines, the smallest takes more lines, nothing cut.
        let (size, lines) = fit_title(text, 120, &[20, 16, 12], 2, &m);
        assert_eq!(size, 12);
        assert_eq!(lines.join(" "), text);
    }

    #[test]
    fn log_axis_only_for_values_spanning_decades() {
        assert!(spans_decades([1.3, 45.0, 3700.0].into_iter(), 1.5));
        assert!(!spans_decades([99.2, 100.0, 49.2].into_iter(), 1.5));
        // Zeros (a failed run, an empty capacity) do not count.
        assert!(!spans_decades([0.0, 20.0, 100.0].into_iter(), 1.5));
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn zonealloc_is_strong_and_the_peers_muted() {
        let all = names(&[
            "limit",
            "zonealloc",
            "zonealloc LocalCache",
            "zonealloc, min_free_kbytes=0",
            "bsa Frame",
            "bsa Heap",
            "fa Depot",
            "fa Summary",
            "offset-alloc",
            "rlsf",
            "mimalloc",
            "jemalloc",
            "mmap",
        ]);
        let styles = Styles::new(&all, &names(&["limit"]));
        let of = |n: &str| styles.of(n);
        assert_eq!(of("limit (Vec/thread)").tier, Tier::Baseline);
        assert_eq!(of("bsa Heap (spin)"), of("bsa Heap"));
        let strong: Vec<Style> = all[1..4].iter().map(|n| of(n)).collect();
        let muted: Vec<Style> = all[4..].iter().map(|n| of(n)).collect();
        assert!(strong
            .iter()
            .all(|s| s.tier == Tier::Strong && ZONEALLOC.contains(&s.colour)));
        assert!(muted
            .iter()
            .all(|s| s.tier == Tier::Muted && MUTED.contains(&s.colour)));
        assert!(strong[0].line_width() > muted[0].line_width());
        assert!(strong[0].marker_size() > muted[0].marker_size());
        // No two series of the chart look alike.
        let looks: Vec<(RGBColor, Marker)> =
            all.iter().map(|n| (of(n).colour, of(n).marker)).collect();
        for (i, a) in looks.iter().enumerate() {
            assert!(looks[i + 1..].iter().all(|b| b != a), "{}", all[i]);
        }
        // Without peers every variant is strong, 24 of them all distinct.
        let many: Vec<String> = (0..24).map(|k| format!("variant {k}")).collect();
        let styles = Styles::new(&many, &[]);
        let looks: Vec<(RGBColor, Marker)> = many
            .iter()
            .map(|n| (styles.of(n).colour, styles.of(n).marker))
            .collect();
        for (i, a) in looks.iter().enumerate() {
            assert!(looks[i + 1..].iter().all(|b| b != a));
            assert_eq!(styles.of(&many[i]).tier, Tier::Strong);
        }
    }

    fn samples(v: &[f64]) -> crate::harness::Samples {
        crate::harness::Samples {
            variant: String::new(),
            values: v.to_vec(),
        }
    }

    fn table(id: &str, title: &str, lower: bool, rows: &[(&str, &[f64])]) -> Table {
        let metric = if lower {
            Metric::lower("µs per test call", "µs")
        } else {
            Metric::higher("calls per second", "M/s")
        };
        let s: Vec<(String, crate::harness::Samples)> = rows
            .iter()
            .map(|(n, v)| ((*n).to_owned(), samples(v)))
            .collect();
        let refs: Vec<(&str, &crate::harness::Samples)> =
            s.iter().map(|(n, v)| (n.as_str(), v)).collect();
        Table::new(id, title, metric, &refs)
    }

    #[test]
    fn gains_read_above_one_as_better_and_targets_map_onto_them() {
        let t = table(
            "a",
            "x: y",
            true,
            &[("before", &[30.0]), ("after", &[10.0])],
        );
        assert_eq!(gain(&t, &t.rows[0], &t.rows[1]), Some(3.0));
        let t = table("b", "x: y", false, &[("before", &[2.0]), ("after", &[3.0])]);
        assert_eq!(gain(&t, &t.rows[0], &t.rows[1]), Some(1.5));
        let t = table("c", "x: y", true, &[("before", &[0.0]), ("after", &[3.0])]);
        assert_eq!(gain(&t, &t.rows[0], &t.rows[1]), Some(0.0));
        let change = Target::at_least(
            "sim: smallest change among fix_size (seed: +53.55 %)",
            28.0,
            53.55,
            "%",
        );
        assert!((target_gain(&change).unwrap() - 1.5355).abs() < 1e-9);
        let speedup = Target::at_least("free_contig_range speed-up over the loop", 3.0, 5.6, "x");
        assert_eq!(target_gain(&speedup), Some(5.6));
        assert_eq!(
            target_gain(&Target::at_most("hot pair (median)", 70.0, 20.0, "ns")),
            None
        );
    }

    #[test]
    fn a_failed_variant_is_never_the_best_and_a_zero_ratio_is_not_printed() {
        // cma: alloc_contig_pages answers fast because it satisfies nothing.
        let mut t = table(
            "latency",
            "µs per request",
            true,
            &[
                ("cma_alloc", &[40.0, 41.0, 39.0, 42.0, 40.5]),
                ("alloc_contig_pages", &[1.6, 1.5, 1.7, 1.6, 1.6]),
            ],
        );
        assert_eq!(t.rows[1].verdict, "better");
        t.mark_failed(1, "0 % of requests satisfied");
        assert_eq!(t.rows[1].verdict, "failed");
        assert!(!t.rows[1].significant);
        assert_eq!(gain(&t, &t.rows[0], &t.rows[1]), None);
        assert_eq!(
            value_label(&t, 1, false),
            "failed: 0 % of requests satisfied"
        );
        // A failed first row: the ratios are to the first row that did not fail.
        let mut t = table(
            "latency",
            "ns per request",
            true,
            &[
                ("none", &[10.0]),
                ("caller", &[400.0]),
                ("reclaim", &[100.0]),
            ],
        );
        t.mark_failed(0, "every request failed");
        assert_eq!(panel_baseline(&t), 1);
        assert_eq!(value_label(&t, 1, false), "400 µs  baseline");
        assert_eq!(value_label(&t, 2, false), "100 µs  0.25x");
        // Resident memory of 0 after reporting: the figure, no "0x*".
        let t = table(
            "resident",
            "resident MiB",
            true,
            &[
                ("kept", &[1020.0, 1020.0, 1020.0, 1020.0, 1020.0]),
                ("reported", &[0.0, 0.0, 0.0, 0.0, 0.0]),
            ],
        );
        assert!(t.rows[1].significant);
        assert_eq!(value_label(&t, 1, false), "0 µs");
    }

    #[test]
    fn the_terminal_summary_has_one_line_per_target_and_strips_the_p_value() {
        let before = crate::harness::Samples {
            variant: "a".into(),
            values: vec![10.0, 11.0, 12.0, 10.5, 11.5],
        };
        let after = crate::harness::Samples {
            variant: "b".into(),
            values: vec![20.0, 21.0, 22.0, 23.0, 24.0],
        };
        let mut r = experiment("page_frag", Vec::new());
        r.targets.push(
            Target::at_least("change of median fragments/s (seed: +7 %)", 9.1, 7.0, "%")
                .and_significant(&before, &after),
        );
        r.targets
            .push(Target::at_most("hot pair (median)", 16.94, 20.0, "ns"));
        r.targets.push(Target::at_least(
            "speed-up over the loop (ratio of medians; seed 5.6x)",
            400.0,
            5.6,
            "x",
        ));
        r.targets.push(Target::at_most(
            "first in hot pair: its median / the best peer's (fa Depot)",
            0.8,
            1.0,
            "x",
        ));
        let text = format_summary(&[r]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[2].contains("PASS") && lines[2].contains("9.1 % (p=0.008)"));
        assert!(lines[2].contains("≥ 7 %, p < 0.05"), "{}", lines[2]);
        assert!(!lines[2].contains("significant at"), "{}", lines[2]);
        assert!(lines[3].contains("16.94 ns") && lines[3].contains("≤ 20 ns"));
        // What the other columns say is not repeated; a peer's name is kept.
        assert!(lines[2].contains("fragments/s ") && !lines[2].contains("seed"));
        assert!(lines[3].contains("hot pair ") && !lines[3].contains("(median)"));
        assert!(!lines[4].contains("seed") && lines[4].contains("5.6x"));
        assert!(lines[5].contains("(fa Depot)"));
        let r = experiment("replay", Vec::new());
        assert!(progress_line(12, 12, &r).contains("no figures"));
    }

    #[test]
    fn a_scaling_legend_follows_the_lines_ends() {
        let s = |name: &str, last: f64| Series {
            name: name.into(),
            baseline: false,
            points: vec![
                Point {
                    threads: 1,
                    median: 1.0,
                    min: 1.0,
                    max: 1.0,
                },
                Point {
                    threads: 4,
                    median: last,
                    min: last,
                    max: last,
                },
            ],
        };
        let series = [s("a", 5.0), s("b", 50.0), s("c", f64::NAN), s("d", 20.0)];
        assert_eq!(legend_order(&series), [1, 3, 0, 2]);
        assert_eq!(medians_text(&series[1]), "1 / 50");
    }

    #[test]
    fn summary_groups_by_title_prefix_and_labels_rows_by_case() {
        let mk = |id: &str, title: &str| table(id, title, true, &[("a", &[1.0]), ("b", &[2.0])]);
        let tables = vec![
            mk("sim-a", "sim: fix_size_alloc_test: p:1, h:0, l:5000 (usec)"),
            mk("sim-b", "sim: fix_size_alloc_test: p:4, h:0, l:5000 (usec)"),
            mk(
                "mapped-a",
                "mapped: fix_size_alloc_test: p:1, h:0, l:500 (usec)",
            ),
            mk(
                "mapped-b",
                "mapped: vm_map_ram_test: p:1, h:0, l:500 (usec)",
            ),
        ];
        let groups = group_tables(&tables);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].0.as_deref(), Some("sim"));
        assert_eq!(
            summary_label(groups[1].1[1], groups[1].0.as_deref()),
            "vm_map_ram_test: p:1, h:0, l:500 (usec)"
        );
        // Titles that share no prefix: one group, each row named by what it measures.
        let tables = vec![
            mk(
                "hot-pair",
                "hot pair: ns per order-0 alloc_pages+free_pages pair",
            ),
            mk(
                "throughput-1t",
                "throughput, 1 thread, window of 64 pages each: M calls/s",
            ),
        ];
        let groups = group_tables(&tables);
        assert_eq!(groups.len(), 1);
        assert_eq!(
            summary_label(&tables[1], None),
            "throughput, 1 thread, window of 64 pages each"
        );
    }

    #[test]
    fn legend_entries_never_run_past_the_width() {
        let keys: Vec<Key> = (0..12)
            .map(|k| Key::Line(BLACK, false, format!("allocator number {k}")))
            .collect();
        let (at, h) = legend_layout(&keys, 600, &eight);
        for (key, (x, _)) in keys.iter().zip(&at) {
            assert!(*x as u32 + 40 + eight(key_text(key)) <= 600);
        }
        assert!(h > 26 * 3);
    }

    /// Width and height of a PNG file.
    fn png_size(path: &Path) -> (u32, u32) {
        let b = fs::read(path).unwrap();
        let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        (be(16), be(20))
    }

    fn experiment(name: &str, tables: Vec<Table>) -> ExperimentResult {
        ExperimentResult {
            name: name.into(),
            description: String::new(),
            params: Vec::new(),
            tables,
            targets: Vec::new(),
            notes: Vec::new(),
            scaling: None,
            summary_reference: None,
            elapsed_s: 0.0,
            charts: Vec::new(),
        }
    }

    #[test]
    fn many_panels_get_a_summary_near_1440_by_900_and_a_detail_chart() {
        let dir = std::env::temp_dir().join(format!("zonealloc-charts-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut tables = Vec::new();
        for mode in ["sim", "mapped"] {
            for p in [1, 4, 16, 64, 256, 512, 1024, 2048] {
                for h in [0, 1] {
                    let before = 1000.0 * f64::from(p);
                    tables.push(table(
                        &format!("{mode}-fix_size-p{p}-h{h}"),
                        &format!("{mode}: fix_size_alloc_test: p:{p}, h:{h}, l:1000 (usec)"),
                        true,
                        &[
                            ("per-page vfree", &[before, before * 1.1, before * 0.9]),
                            (
                                "free_pages_bulk",
                                &[before / 2.0, before / 2.2, before / 1.8],
                            ),
                        ],
                    ));
                }
            }
        }
        let mut r = experiment("many", tables);
        r.targets.push(Target::at_least(
            "sim: smallest change among fix_size p >= 4",
            100.0,
            53.55,
            "%",
        ));
        let files = write_charts(&dir, &r).unwrap();
        assert_eq!(files, [dir.join("many.png"), dir.join("many-detail.png")]);
        let (w, h) = png_size(&files[0]);
        assert!(w <= 1440 && h <= 900, "{w}x{h}");
        // A few panels: one chart, as wide as two panels.
        let r = experiment("few", r.tables[..3].to_vec());
        let files = write_charts(&dir, &r).unwrap();
        assert_eq!(files, [dir.join("few.png")]);
        assert_eq!(png_size(&files[0]).0, 2 * PANEL_W);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scaling_chart_of_peers_is_drawn() {
        let dir = std::env::temp_dir().join(format!("zonealloc-scaling-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let series = |name: &str, base: f64| Series {
            name: name.into(),
            baseline: name.starts_with("limit"),
            points: [1u32, 2, 4, 64]
                .iter()
                .map(|&t| Point {
                    threads: t,
                    median: base * f64::from(t).sqrt(),
                    min: base * 0.9,
                    max: base * 1.1 * f64::from(t).sqrt(),
                })
                .collect(),
        };
        let mut r = experiment("scal", Vec::new());
        r.scaling = Some(Scaling {
            title: "scal: throughput against threads".into(),
            y_label: "M calls/s".into(),
            series: vec![
                series("limit (Vec/thread)", 50.0),
                series("zonealloc", 15.0),
                series("bsa Frame (spin)", 1.0),
                series("mmap", 0.2),
            ],
        });
        let files = write_charts(&dir, &r).unwrap();
        assert_eq!(png_size(&files[0]), (1200, 640));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Reads back an experiment of a `results.json` (the fields the charts use).
    fn from_json(v: &serde_json::Value) -> ExperimentResult {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
        let arr = |v: &serde_json::Value| v.as_array().cloned().unwrap_or_default();
        let mut r = experiment(&s(&v["name"]), Vec::new());
        r.description = s(&v["description"]);
        r.summary_reference = v["summary_reference"].as_str().map(str::to_owned);
        for t in arr(&v["tables"]) {
            r.tables.push(Table {
                id: s(&t["id"]),
                title: s(&t["title"]),
                metric: Metric {
                    name: s(&t["metric"]["name"]),
                    unit: s(&t["metric"]["unit"]),
                    lower_is_better: t["metric"]["lower_is_better"].as_bool().unwrap_or(true),
                    better: t["metric"]["better"].as_str().map(str::to_owned),
                },
                rows: arr(&t["rows"])
                    .iter()
                    .map(|w| Row {
                        variant: s(&w["variant"]),
                        samples: arr(&w["samples"]).iter().map(f).collect(),
                        median: f(&w["median"]),
                        min: f(&w["min"]),
                        max: f(&w["max"]),
                        ratio: f(&w["ratio"]),
                        p_value: w["p_value"].as_f64(),
                        significant: w["significant"].as_bool().unwrap_or(false),
                        verdict: s(&w["verdict"]),
                        failed: w["failed"].as_str().map(str::to_owned),
                    })
                    .collect(),
                label: t["label"].as_str().map(str::to_owned),
                group: t["group"].as_str().map(str::to_owned),
                posted_gain: t["posted_gain"].as_f64(),
            });
        }
        for t in arr(&v["targets"]) {
            r.targets.push(Target {
                what: s(&t["what"]),
                measured: f(&t["measured"]),
                unit: s(&t["unit"]),
                threshold: f(&t["threshold"]),
                at_most: t["at_most"].as_bool().unwrap_or(false),
                pass: t["pass"].as_bool().unwrap_or(false),
                p_value: t["p_value"].as_f64(),
                table: t["table"].as_str().map(str::to_owned),
            });
        }
        if v["scaling"].is_object() {
            let sc = &v["scaling"];
            r.scaling = Some(Scaling {
                title: s(&sc["title"]),
                y_label: s(&sc["y_label"]),
                series: arr(&sc["series"])
                    .iter()
                    .map(|x| Series {
                        name: s(&x["name"]),
                        baseline: x["baseline"].as_bool().unwrap_or(false),
                        points: arr(&x["points"])
                            .iter()
                            .map(|p| Point {
                                threads: p["threads"].as_u64().unwrap_or(1) as u32,
                                median: f(&p["median"]),
                                min: f(&p["min"]),
                                max: f(&p["max"]),
                            })
                            .collect(),
                    })
                    .collect(),
            });
        }
        r
    }

    /// Redraws the charts of a run without running it again:
    /// `ZONEALLOC_REDRAW=DIR/results.json cargo test -p zonealloc-cli redraw -- --ignored`
    /// writes them next to that file.
    #[test]
    #[ignore = "needs ZONEALLOC_REDRAW=path/to/results.json"]
    fn redraw_charts_of_a_results_file() {
        let path = PathBuf::from(std::env::var("ZONEALLOC_REDRAW").expect("ZONEALLOC_REDRAW"));
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        let dir = path.parent().unwrap();
        for e in json["experiments"].as_array().unwrap() {
            let files = write_charts(dir, &from_json(e)).unwrap();
            println!("{files:?}");
        }
    }
}
