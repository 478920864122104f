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

/// One colour per variant, the same variant the same colour in every chart of an
/// experiment: twelve distinct hues (Tableau 10 and two more), the baseline grey.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0x00, 0x50, 0x80),
];

/// Marker shapes, cycled with a period prime to the palette's, so no two of the
/// first 12 x 7 series share colour and shape.
#[derive(Clone, Copy)]
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

/// Draws marker `m` of colour `c` at pixel `at` on `area`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    m: Marker,
    at: (i32, i32),
    r: i32,
    c: RGBColor,
) -> ChartResult<()>
where
    DB::ErrorType: 'static,
{
    let (x, y) = at;
    match m {
        Marker::Cross => {
            area.draw(&PathElement::new(
                [(x - r, y - r), (x + r, y + r)],
                c.stroke_width(3),
            ))?;
            area.draw(&PathElement::new(
                [(x - r, y + r), (x + r, y - r)],
                c.stroke_width(3),
            ))?;
        }
        Marker::Plus => {
            area.draw(&PathElement::new(
                [(x - r - 1, y), (x + r + 1, y)],
                c.stroke_width(3),
            ))?;
            area.draw(&PathElement::new(
                [(x, y - r - 1), (x, y + r + 1)],
                c.stroke_width(3),
            ))?;
        }
        _ => {
            area.draw(&Polygon::new(marker_points(m, at, r), c.filled()))?;
        }
    }
    Ok(())
}

/// Writes the experiment's charts into `dir`: `NAME.png` (one panel per table:
/// medians as bars, min–max as whiskers, value and ratio beside each bar) and, if it
/// has a scaling series, `NAME-scaling.png`. Returns the files written.
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

/// Whether values spread over more than `decades` powers of ten (all positive ones
/// counted): such a chart gets a log axis, or the largest flatten the rest.
fn spans_decades(values: impl Iterator<Item = f64>, decades: f64) -> bool {
    let (lo, hi) = values
        .filter(|v| *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    hi > 0.0 && (hi / lo).log10() > decades
}

/// Panels of horizontal bars, one row per variant: names never overlap, and each
/// value sits at the end of its own bar.
fn tables_chart(path: &Path, r: &ExperimentResult) -> ChartResult<()> {
    let n = r.tables.len();
    let cols = n.clamp(1, 2);
    let rows = n.div_ceil(cols);
    let bars = r.tables.iter().map(|t| t.rows.len()).max().unwrap_or(1) as u32;
    let (pw, ph) = (720u32, 90 + 32 * bars);
    let root =
        BitMapBackend::new(path, (pw * cols as u32, ph * rows as u32 + 60)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "{}: median of runs (bar), min–max (whisker), ratio to the first row (* significant)",
            r.name
        ),
        (FONT, 22),
    )?;
    let panels = root.split_evenly((rows, cols));
    // One colour per variant across the panels: `bsa Heap (spin)` is `bsa Heap`.
    let base = |v: &str| -> String { v.split(" (").next().unwrap_or(v).to_string() };
    let mut names: Vec<String> = Vec::new();
    for t in &r.tables {
        for row in &t.rows {
            if !names.contains(&base(&row.variant)) {
                names.push(base(&row.variant));
            }
        }
    }
    for (panel, t) in panels.iter().zip(&r.tables) {
        let colours: Vec<RGBColor> = t
            .rows
            .iter()
            .map(|row| {
                let k = names
                    .iter()
                    .position(|n| *n == base(&row.variant))
                    .unwrap_or(0);
                PALETTE[k % PALETTE.len()]
            })
            .collect();
        if spans_decades(t.rows.iter().flat_map(|r| [r.min, r.max]), 1.5) {
            let lo = t
                .rows
                .iter()
                .flat_map(|r| [r.min, r.median])
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            let hi = t.rows.iter().map(|r| r.max).fold(0.0, f64::max);
            let floor = 10f64.powf((lo.log10() - 0.3).floor());
            // Room right of the largest bar for its label: two decades and more.
            let top = hi * 200.0;
            table_panel(
                panel,
                t,
                &colours,
                (floor..top).log_scale(),
                floor,
                true,
                top,
            )?;
        } else {
            let hi = t.rows.iter().map(|r| r.max).fold(0.0, f64::max);
            let top = if hi > 0.0 { hi * 1.7 } else { 1.0 };
            table_panel(panel, t, &colours, 0f64..top, 0.0, false, top)?;
        }
    }
    root.present()?;
    Ok(())
}

fn table_panel<DB, X>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    t: &Table,
    colours: &[RGBColor],
    x: X,
    floor: f64,
    log: bool,
    top: f64,
) -> ChartResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let n = t.rows.len() as u32;
    let names: Vec<String> = t.rows.iter().map(|r| r.variant.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}{}", t.id, if log { " (log scale)" } else { "" }),
            (FONT, 20),
        )
        .margin(10)
        .margin_right(16)
        .x_label_area_size(40)
        .y_label_area_size(235)
        .build_cartesian_2d(x, (0..n.saturating_sub(1)).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n as usize)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_label_formatter(&|v| num(*v))
        .x_desc(&t.metric.unit)
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 17))
        .draw()?;
    let at = |v: f64| if log { v.max(floor) } else { v };
    chart.draw_series(t.rows.iter().zip(0u32..).map(|(r, i)| {
        let mut bar = Rectangle::new(
            [
                (floor, SegmentValue::Exact(i)),
                (at(r.median), SegmentValue::Exact(i + 1)),
            ],
            colours[i as usize].mix(0.8).filled(),
        );
        bar.set_margin(5, 5, 0, 0);
        bar
    }))?;
    chart.draw_series(t.rows.iter().zip(0u32..).map(|(r, i)| {
        ErrorBar::new_horizontal(
            SegmentValue::CenterOf(i),
            at(r.min),
            at(r.median),
            at(r.max),
            BLACK.stroke_width(2),
            10,
        )
    }))?;
    chart.draw_series(t.rows.iter().zip(0u32..).map(|(r, i)| {
        let ratio = if r.ratio.is_finite() {
            format!("  {:.2}x{}", r.ratio, if r.significant { "*" } else { "" })
        } else {
            String::new()
        };
        let label = format!("{} {}{ratio}", num(r.median), t.metric.unit);
        // Clear of the whisker's cap.
        let x = if log {
            at(r.max) * 1.3
        } else {
            at(r.max) + top * 0.015
        };
        Text::new(
            format!(" {label}"),
            (x, SegmentValue::CenterOf(i)),
            TextStyle::from((FONT, 16).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        )
    }))?;
    Ok(())
}

/// Colour and marker of the `k`-th series of a scaling chart (the palette's grey is
/// left to the tables' baseline).
fn series_style(k: usize) -> (RGBColor, Marker) {
    (PALETTE[(k + 1) % PALETTE.len()], MARKERS[k % MARKERS.len()])
}

/// Throughput against threads: one colour and one marker per series, a log axis
/// when the series span decades, the legend beside the plot.
fn scaling_chart(path: &Path, s: &Scaling) -> ChartResult<()> {
    let legend_w = 280u32;
    let (w, h) = (1000u32, 600u32);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&s.title, (FONT, 21))?;
    let (plot, legend) = root.split_horizontally(w - legend_w);
    let xmax = s
        .series
        .iter()
        .flat_map(|x| x.points.iter().map(|p| p.threads))
        .max()
        .unwrap_or(1);
    let all = || s.series.iter().flat_map(|x| x.points.iter());
    let log = spans_decades(all().map(|p| p.median), 1.0);
    let top = all().map(|p| p.max).fold(0.0, f64::max);
    let style = series_style;
    if log {
        let lo = all()
            .flat_map(|p| [p.min, p.median])
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let floor = lo / 1.6;
        let mut chart = ChartBuilder::on(&plot)
            .margin(16)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d(
                0.5f64..xmax as f64 + 0.5,
                (floor..top.max(floor * 10.0) * 1.5).log_scale(),
            )?;
        scaling_mesh(&mut chart, s, xmax, &format!("{} (log scale)", s.y_label))?;
        for (k, series) in s.series.iter().enumerate() {
            let (c, m) = style(k);
            scaling_series(&mut chart, series, c, m, floor)?;
        }
    } else {
        let mut chart = ChartBuilder::on(&plot)
            .margin(16)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d(
                0.5f64..xmax as f64 + 0.5,
                0f64..if top > 0.0 { top * 1.1 } else { 1.0 },
            )?;
        scaling_mesh(&mut chart, s, xmax, &s.y_label)?;
        for (k, series) in s.series.iter().enumerate() {
            let (c, m) = style(k);
            scaling_series(&mut chart, series, c, m, 0.0)?;
        }
    }
    for (k, series) in s.series.iter().enumerate() {
        let (c, m) = style(k);
        let y = 30 + k as i32 * 30;
        legend.draw(&PathElement::new([(6, y), (40, y)], c.stroke_width(3)))?;
        draw_marker(&legend, m, (23, y), 6, c)?;
        legend.draw(&Text::new(
            series.name.clone(),
            (48, y - 9),
            (FONT, 18).into_font().color(&BLACK),
        ))?;
    }
    root.present()?;
    Ok(())
}

fn scaling_mesh<DB, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    _s: &Scaling,
    xmax: u32,
    y_desc: &str,
) -> ChartResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>
        + plotters::coord::ranged1d::ValueFormatter<f64>,
{
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
        .y_label_formatter(&|y| num(*y))
        .x_desc("threads")
        .y_desc(y_desc)
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 18))
        .draw()?;
    Ok(())
}

fn scaling_series<DB, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    series: &crate::experiments::Series,
    c: RGBColor,
    m: Marker,
    floor: f64,
) -> ChartResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    let at = |v: f64| v.max(floor);
    let pts: Vec<(f64, f64)> = series
        .points
        .iter()
        .map(|p| (f64::from(p.threads), at(p.median)))
        .collect();
    chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(3)))?;
    chart.draw_series(series.points.iter().map(|p| {
        ErrorBar::new_vertical(
            f64::from(p.threads),
            at(p.min),
            at(p.median),
            at(p.max),
            c.mix(0.6).stroke_width(1),
            8,
        )
    }))?;
    let area = chart.plotting_area();
    let pixels: Vec<(i32, i32)> = pts.iter().map(|&p| area.map_coordinate(&p)).collect();
    let (dx, dy) = area.get_base_pixel();
    for (x, y) in pixels {
        let root = area.strip_coord_spec();
        draw_marker(&root, m, (x - dx, y - dy), 6, c)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_series_never_share_colour_and_marker() {
        // The peers chart has 11 series; two charts' worth must stay distinct.
        let styles: Vec<(RGBColor, usize)> = (0..24)
            .map(|k| {
                let (c, m) = series_style(k);
                (c, m as usize)
            })
            .collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // The first 11 have 11 different colours.
        for (i, a) in styles[..11].iter().enumerate() {
            assert!(styles[i + 1..11].iter().all(|b| b.0 != a.0), "series {i}");
        }
    }

    #[test]
    fn log_axis_only_for_values_spanning_decades() {
        assert!(spans_decades([1.3, 45.0, 3700.0].into_iter(), 1.5));
        assert!(!spans_decades([99.2, 100.0, 49.2].into_iter(), 1.5));
        // Zeros (a failed run, an empty capacity) do not count.
        assert!(!spans_decades([0.0, 20.0, 100.0].into_iter(), 1.5));
    }
}
