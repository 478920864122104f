//! Command-line front ends of the library, shared by the `zonealloc-trace` binary and
//! the `zonealloc` command (`zonealloc replay`, `zonealloc map`,
//! `zonealloc fragbench`): argument types (clap) and the commands they run.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::fragbench::{self, FragOptions, PictureOut};
use crate::layout::{HoleModel, ZoneLayout};
use crate::maps::{self, MapOptions};
use crate::reader::ReadOptions;
use crate::replay::{self, ReplayOptions};

/// `println!` that ignores a closed stdout (`... | head` must not panic).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Where zoneinfo's missing pages go.
#[derive(Clone, Copy, ValueEnum)]
pub enum Holes {
    /// Holes of spanned - managed pages (only what the buddy allocator holds).
    Managed,
    /// Holes of spanned - present pages.
    Present,
}

/// Arguments `replay` and `map` share.
#[derive(Args)]
pub struct TraceArgs {
    /// The trace: `perf script` or trace_pipe text, plain, xz or gzip.
    trace: PathBuf,
    /// The traced machine's /proc/zoneinfo (default: the built-in Linux 6.18 machine of
    /// the shared traces, or --zone).
    #[arg(long)]
    zoneinfo: Option<PathBuf>,
    /// A zone `[NODE/]TYPE:START_PFN:SPANNED[:PRESENT[:MANAGED]]`; repeat for more.
    #[arg(long = "zone")]
    zones: Vec<String>,
    /// Where zoneinfo's missing pages go.
    #[arg(long, value_enum, default_value = "managed")]
    holes: Holes,
    /// CPUs (default: the zoneinfo's, 2 for the built-in machine; with --zone, the
    /// largest CPU id among the first 65,536 events plus one, at most 256). Events on
    /// other CPUs are skipped and counted.
    #[arg(long)]
    cpus: Option<usize>,
    /// Replay with mobility grouping off.
    #[arg(long)]
    no_grouping: bool,
    /// Start cold: empty per-CPU lists, pre-trace frees skipped (default: warm, from
    /// the zoneinfo's per-CPU counts, pre-trace frees replayed from a pool).
    #[arg(long)]
    cold: bool,
    /// Do not decay the per-CPU lists' `high` at each whole second of trace time
    /// (default: decay, as Linux's vmstat worker does).
    #[arg(long)]
    no_decay: bool,
    /// The capture's directory with the kernel's layout and snapshots
    /// (`layout.txt.xz`, `buddyinfo.txt`, `pagetypeinfo.txt`, `snapshots.txt`,
    /// `zoneinfo.txt`; default: the trace's own directory, when it has them). The
    /// replay then starts from the kernel's layout and compares its free memory
    /// with the kernel's at each snapshot.
    #[arg(long)]
    layout_dir: Option<PathBuf>,
    /// Ignore the kernel's layout even where the trace's directory has one (the
    /// warm start from zoneinfo and a pool, as for a trace without a layout).
    #[arg(long)]
    no_layout: bool,
    /// Seed of the order in which the warm start from the layout frees the
    /// kernel's free blocks (their order on its lists is not in the layout):
    /// replaying with a few seeds shows how much the result depends on it.
    #[arg(long, default_value_t = 1)]
    start_seed: u64,
    /// Stop at the first malformed line instead of skipping it.
    #[arg(long)]
    strict: bool,
    /// Replay only the first N events.
    #[arg(long)]
    max_events: Option<u64>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory for the pictures (`replay` draws them only when given).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Arguments of `replay`.
#[derive(Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// After the replay, time `xz -dc TRACE > /dev/null` (best of 3) and print the
    /// replay's end-to-end time next to it.
    #[arg(long)]
    vs_xz: bool,
}

/// Arguments of `map`.
#[derive(Args)]
pub struct MapArgs {
    #[command(flatten)]
    trace: TraceArgs,
}

/// Arguments of `fragbench`.
#[derive(Args)]
pub struct FragArgs {
    /// Also replay this trace as the second workload.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Seed of the synthetic workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Synthetic zone size in MiB.
    #[arg(long, default_value_t = 1024)]
    zone_mib: u64,
    /// Long-lived unmovable + reclaimable memory, % of the zone.
    #[arg(long, default_value_t = 10.0)]
    pinned_percent: f64,
    /// Memory in use during the churn, % of the zone.
    #[arg(long, default_value_t = 90.0)]
    occupancy_percent: f64,
    /// Movable operations per page of the zone.
    #[arg(long, default_value_t = 4.0)]
    ops_per_page: f64,
    /// CI scale: a 256 MiB zone, 2 ops per page.
    #[arg(long)]
    quick: bool,
    /// Leave out the buddy_system_allocator peer.
    #[arg(long)]
    no_peer: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory for the zone maps and charts.
    #[arg(long, default_value = "trace-out")]
    out: PathBuf,
    /// Draw no pictures.
    #[arg(long)]
    no_pictures: bool,
}

/// What a command returns: success, or an error to print.
pub type Res = Result<(), Box<dyn std::error::Error>>;

/// The capture directory whose layout to start from, if any (see
/// `TraceArgs::layout_dir`).
fn layout_dir_of(a: &TraceArgs) -> Option<PathBuf> {
    if a.no_layout || a.cold {
        return None;
    }
    if let Some(d) = &a.layout_dir {
        return Some(d.clone());
    }
    let dir = a.trace.parent()?;
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    ["layout.txt.xz", "layout.txt"]
        .iter()
        .any(|n| dir.join(n).exists())
        .then(|| dir.to_path_buf())
}

fn layout_of(a: &TraceArgs) -> Result<ZoneLayout, Box<dyn std::error::Error>> {
    if a.zoneinfo.is_none() && a.zones.is_empty() {
        // A capture's own zoneinfo, read with its layout.
        if let Some(d) = layout_dir_of(a) {
            let z = d.join("zoneinfo.txt");
            if z.exists() {
                return Ok(ZoneLayout::from_zoneinfo(&z)?);
            }
        }
    }
    if let Some(p) = &a.zoneinfo {
        if !a.zones.is_empty() {
            return Err("give --zoneinfo or --zone, not both".into());
        }
        return Ok(ZoneLayout::from_zoneinfo(p)?);
    }
    if a.zones.is_empty() {
        return Ok(ZoneLayout::linux_6_18_trace_machine());
    }
    let zones = a
        .zones
        .iter()
        .map(|s| ZoneLayout::parse_zone_arg(s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ZoneLayout {
        zones,
        nr_cpus: None,
        min_free_kbytes: None,
    })
}

fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> Res {
    let s = serde_json::to_string_pretty(v)?;
    std::fs::write(path, s + "\n")?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `replay`: the report, pictures only with `--out`.
pub fn replay_cmd(a: &ReplayArgs) -> Res {
    run_trace(&a.trace, false, a.vs_xz)
}

/// `map`: the replay's pictures.
pub fn map_cmd(a: &MapArgs) -> Res {
    run_trace(&a.trace, true, false)
}

/// Replays the trace; prints the report unless `map`, draws the pictures where
/// `map` or `--out` asks, times `xz -dc` against it with `vs_xz`.
fn run_trace(a: &TraceArgs, map: bool, vs_xz: bool) -> Res {
    let start = match layout_dir_of(a) {
        Some(d) => replay::StartFiles::in_dir(&d)?,
        None => None,
    };
    let opts = ReplayOptions {
        layout: layout_of(a)?,
        holes: match a.holes {
            Holes::Managed => HoleModel::Managed,
            Holes::Present => HoleModel::Present,
        },
        nr_cpus: a.cpus,
        mobility_grouping: !a.no_grouping,
        read: ReadOptions {
            strict: a.strict,
            ..ReadOptions::default()
        },
        max_events: a.max_events,
        warm: !a.cold,
        decay: !a.no_decay,
        start,
        start_seed: a.start_seed,
        ..ReplayOptions::default()
    };
    let (report, state) = replay::run_with_state(&a.trace, &opts)?;
    if !map {
        out!("{report}");
    } else if let Some(note) = report.parse.skipped_note(&report.trace) {
        eprintln!("{note}");
    }
    if let Some(shape) = &report.shape {
        // The shape chart is the comparison's picture: drawn whenever there is
        // one, into --out or ./trace-out.
        let dir = a.out.clone().unwrap_or_else(|| PathBuf::from("trace-out"));
        std::fs::create_dir_all(&dir)?;
        let moments: Vec<_> = shape
            .start
            .iter()
            .chain(&shape.seconds)
            .chain(&shape.end)
            .cloned()
            .collect();
        let zone = busiest_zone(&moments);
        let chart = dir.join(format!("{}-shape.png", stem_of(&a.trace)));
        maps::render_shape_chart(
            &moments,
            zone,
            &chart,
            &format!(
                "{}: free blocks at orders 3, 6, 9 in {}, kernel (dashed) and zonealloc",
                stem_of(&a.trace),
                zone.name()
            ),
        )?;
        out!("shape chart: {}", chart.display());
    }
    if vs_xz {
        compare_with_xz(&a.trace, report.timing.end_to_end_ns)?;
    }
    if let Some(j) = &a.json {
        write_json(j, &report)?;
    }
    let dir = match (&a.out, map) {
        (Some(d), _) => d.clone(),
        (None, true) => PathBuf::from("trace-out"),
        (None, false) => return Ok(()),
    };
    std::fs::create_dir_all(&dir)?;
    let owners: Vec<_> = state.live_blocks().collect();
    let stem = stem_of(&a.trace);
    let grouping = if a.no_grouping {
        "no grouping"
    } else {
        "mobility grouping"
    };
    let za = state.allocator();
    let mut zone_index = 0;
    for ext in ["png", "svg"] {
        let path = dir.join(format!("{stem}-map.{ext}"));
        let m = maps::render_zone_map(
            za,
            &path,
            &MapOptions {
                title: format!("{stem} replayed into zonealloc ({grouping}), end of trace"),
                owners: &owners,
                note: Some(format!(
                    "zonealloc's own placement, from an empty zone{};\n\
                     a trace gives the order of use, not where the kernel put each page",
                    if a.cold {
                        ""
                    } else {
                        " with warm per-CPU lists"
                    }
                )),
                ..MapOptions::default()
            },
        )?;
        zone_index = za
            .buddyinfo()
            .zones
            .iter()
            .position(|z| z.0 == m.zone)
            .unwrap_or(0);
        out!("zone map: {}", path.display());
    }
    let zone_name = za
        .buddyinfo()
        .zones
        .get(zone_index)
        .map_or("?".to_string(), |z| z.0.zone_type.to_string());
    let chart = dir.join(format!("{stem}-buddyinfo.png"));
    maps::render_buddyinfo_chart(
        state.samples(),
        zone_index,
        &chart,
        &format!(
            "Free blocks per order during the replay of {stem} (zone {zone_name}, {grouping})"
        ),
        maps::XAxis::TraceSeconds,
    )?;
    out!("buddyinfo chart: {}", chart.display());
    Ok(())
}

/// A trace file's name without `.perf.txt.xz` and the like.
fn stem_of(trace: &Path) -> &str {
    trace
        .file_name()
        .and_then(|s| s.to_str())
        .map_or("trace", |s| {
            let s = s.strip_suffix(".xz").unwrap_or(s);
            let s = s.strip_suffix(".gz").unwrap_or(s);
            let s = s.strip_suffix(".txt").unwrap_or(s);
            s.strip_suffix(".perf").unwrap_or(s)
        })
}

/// The zone whose free blocks at the charted orders changed most in the kernel's
/// snapshots (the highest zone on a tie).
fn busiest_zone(moments: &[crate::compare::Moment]) -> zonealloc::ZoneType {
    let zones: Vec<zonealloc::ZoneType> = moments
        .first()
        .map(|m| m.kernel.zones.iter().map(|z| z.zone).collect())
        .unwrap_or_default();
    let change = |zt: zonealloc::ZoneType| -> u64 {
        let at = |m: &crate::compare::Moment, o: usize| {
            m.kernel
                .zones
                .iter()
                .find(|z| z.zone == zt)
                .and_then(|z| z.free.get(o).copied())
                .unwrap_or(0)
        };
        moments
            .windows(2)
            .map(|w| {
                maps::SHAPE_ORDERS
                    .iter()
                    .map(|&o| at(&w[0], o).abs_diff(at(&w[1], o)))
                    .sum::<u64>()
            })
            .sum()
    };
    zones
        .into_iter()
        .max_by_key(|&z| (change(z), z))
        .unwrap_or(zonealloc::ZoneType::Normal)
}

/// Times `xz -dc trace > /dev/null` three times and prints the best next to the
/// replay's end-to-end time.
fn compare_with_xz(trace: &Path, replay_ns: u64) -> Res {
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let st = std::process::Command::new("xz")
            .arg("-dc")
            .arg(trace)
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("running xz -dc {}: {e}", trace.display()))?;
        if !st.success() {
            return Err(format!("xz -dc {}: {st}", trace.display()).into());
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let replay = replay_ns as f64 / 1e9;
    out!(
        "vs xz: `xz -dc {} > /dev/null` takes {best:.3} s (best of 3); this replay took {replay:.3} s end to end = {:.2}x xz",
        trace.display(),
        replay / best
    );
    Ok(())
}

/// `fragbench`: order-9 success with and without mobility grouping.
pub fn fragbench_cmd(a: &FragArgs) -> Res {
    let mut o = FragOptions {
        seed: a.seed,
        zone_bytes: a.zone_mib << 20,
        pinned_percent: a.pinned_percent,
        occupancy_percent: a.occupancy_percent,
        ops_per_page: a.ops_per_page,
        trace: a.trace.clone(),
        peer: !a.no_peer,
        ..FragOptions::default()
    };
    if a.quick {
        o.zone_bytes = 256 << 20;
        o.ops_per_page = 2.0;
    }
    let out = if a.no_pictures {
        None
    } else {
        std::fs::create_dir_all(&a.out)?;
        Some(PictureOut { dir: a.out.clone() })
    };
    let report = fragbench::run(&o, out.as_ref())?;
    out!("{report}");
    if let Some(j) = &a.json {
        write_json(j, &report)?;
    }
    Ok(())
}
