//! Reporting: the machine header, tables on the terminal, `results.json`, PNG charts.
//!
//! Everything here reads `ExperimentResult`s and never measures. The machine header
//! comes from `/proc/cpuinfo`, `/proc/meminfo`, `/proc/sys/kernel/osrelease` (what
//! `uname -r` prints), the CPUs this process may use, and the `rustc --version` that
//! `build.rs` recorded. Charts are drawn with plotters' bitmap backend and the DejaVu
//! Sans font embedded in the binary, so they need no system font.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use crate::experiments::{ExperimentResult, Scaling, Target};
use crate::harness::{Row, Table, ALPHA};

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
    let better = if t.metric.lower_is_better {
        "lower is better"
    } else {
        "higher is better"
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

const PALETTE: [RGBColor; 6] = [
    RGBColor(0x80, 0x80, 0x80),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
];

/// Writes the experiment's charts into `dir`: `NAME.png` (one panel per table:
/// medians as bars, min–max as whiskers, ratios on top) and, if it has a scaling
/// series, `NAME-scaling.png`. Returns the files written.
///
/// # Errors
/// Drawing or encoding errors.
pub fn write_charts(dir: &Path, r: &ExperimentResult) -> ChartResult<Vec<PathBuf>> {
    register_font();
    let mut files = Vec::new();
    if !r.tables.is_empty() {
        let path = dir.join(format!("{}.png", r.name));
        tables_chart(&path, r)?;
        files.push(path);
    }
    if let Some(s) = &r.scaling {
        let path = dir.join(format!("{}-scaling.png", r.name));
        scaling_chart(&path, s)?;
        files.push(path);
    }
    Ok(files)
}

fn tables_chart(path: &Path, r: &ExperimentResult) -> ChartResult<()> {
    let n = r.tables.len();
    let cols = n.clamp(1, 3);
    let rows = n.div_ceil(cols);
    let (pw, ph) = (560u32, 380u32);
    let root =
        BitMapBackend::new(path, (pw * cols as u32, ph * rows as u32 + 50)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "{}: median of runs, whiskers min–max, ratio to the first bar (* significant)",
            r.name
        ),
        (FONT, 22),
    )?;
    let panels = root.split_evenly((rows, cols));
    for (panel, t) in panels.iter().zip(&r.tables) {
        table_panel(panel, t)?;
    }
    root.present()?;
    Ok(())
}

fn table_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    t: &Table,
) -> ChartResult<()>
where
    DB::ErrorType: 'static,
{
    let n = t.rows.len() as u32;
    let top = t.rows.iter().map(|r| r.max).fold(0.0, f64::max);
    let ymax = if top > 0.0 { top * 1.2 } else { 1.0 };
    let names: Vec<String> = t.rows.iter().map(|r| r.variant.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&t.id, (FONT, 17))
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(60)
        // Integer ranges are inclusive in plotters: 0..n-1 makes n segments.
        .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0f64..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n as usize)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc(&t.metric.unit)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()?;
    chart.draw_series(t.rows.iter().zip(0u32..).map(|(r, i)| {
        let color = PALETTE[i as usize % PALETTE.len()];
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), r.median),
            ],
            color.mix(0.75).filled(),
        );
        bar.set_margin(0, 0, 18, 18);
        bar
    }))?;
    chart.draw_series(t.rows.iter().zip(0u32..).map(|(r, i)| {
        ErrorBar::new_vertical(
            SegmentValue::CenterOf(i),
            r.min,
            r.median,
            r.max,
            BLACK.stroke_width(2),
            14,
        )
    }))?;
    chart.draw_series(t.rows.iter().zip(0u32..).map(|(r, i)| {
        let label = format!(
            "{} {}  {:.2}x{}",
            num(r.median),
            t.metric.unit,
            r.ratio,
            if r.significant { "*" } else { "" }
        );
        Text::new(
            label,
            (SegmentValue::CenterOf(i), r.max + ymax * 0.03),
            TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
        )
    }))?;
    Ok(())
}

fn scaling_chart(path: &Path, s: &Scaling) -> ChartResult<()> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let xmax = s
        .series
        .iter()
        .flat_map(|x| x.points.iter().map(|p| p.threads))
        .max()
        .unwrap_or(1);
    let top = s
        .series
        .iter()
        .flat_map(|x| x.points.iter().map(|p| p.max))
        .fold(0.0, f64::max);
    let ymax = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(&s.title, (FONT, 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5f64..xmax as f64 + 0.5, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_labels(xmax as usize + 1)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-9 && *x >= 1.0 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .x_desc("threads")
        .y_desc(&s.y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;
    for (k, series) in s.series.iter().enumerate() {
        let color = PALETTE[(k + 1) % PALETTE.len()];
        let pts: Vec<(f64, f64)> = series
            .points
            .iter()
            .map(|p| (f64::from(p.threads), p.median))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))?
            .label(series.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))?;
        chart.draw_series(series.points.iter().map(|p| {
            ErrorBar::new_vertical(
                f64::from(p.threads),
                p.min,
                p.median,
                p.max,
                color.stroke_width(2),
                12,
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
