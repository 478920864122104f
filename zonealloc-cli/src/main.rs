//! `zonealloc`: the benchmark suite and a statistics demo of the zonealloc crate.
//!
//! * `zonealloc bench [--quick] [--verbose] [--check] [--rounds N] [--threads LIST]
//!   [--peers LIST] [--out DIR] [EXPERIMENT...]` runs the registered experiments (all
//!   by default), each comparing variants interleaved in this one process, and writes
//!   `DIR/results.json` (every figure) and PNG charts. It prints a machine header, a
//!   line per experiment as it finishes and, at the end, every target in one table
//!   (PASS or MISS, our figure, the bound); `--verbose` also prints each experiment's
//!   parameters, tables and notes. `--quick` is CI scale (the whole suite in a few
//!   minutes); without it, full scale.
//! * `zonealloc stats` builds a small allocator, runs a mixed workload on it and
//!   prints its statistics in Linux's `/proc` formats.
//!
//! Layout: `harness` measures, `experiments` holds one file per experiment and the
//! registry, `report` prints, charts and writes JSON, `affinity` pins threads.

#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

mod affinity;
mod experiments;
mod harness;
mod report;
mod selftest;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use zonealloc::{Config, Gfp, Order, Pfn, ZoneAllocator};

use crate::experiments::REGISTRY;

/// `println!` that ignores a closed stdout (`zonealloc stats | head` must not panic).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
use crate::harness::Ctx;
use crate::report::{Machine, RunReport};

#[derive(Parser)]
#[command(
    name = "zonealloc",
    version,
    about = "zonealloc benchmark suite and statistics demo"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run benchmark experiments: before/after ratios, one process, interleaved runs.
    Bench(BenchArgs),
    /// Print buddyinfo, pagetypeinfo, zoneinfo, vmstat and fragmentation indices of a
    /// demo allocator after a mixed workload.
    Stats,
    /// Replay a Linux page-allocator trace (perf script or trace_pipe, plain, .xz or .gz)
    /// and report events, ns per event, per-CPU refills and drains next to the
    /// kernel's, and the fragmentation at the end.
    Replay(zonealloc_trace::cli::ReplayArgs),
    /// Replay a trace, then draw the zone map (PNG and SVG) and its free-blocks chart.
    Map(zonealloc_trace::cli::MapArgs),
    /// Fragmentation benchmark: order-9 success with and without mobility grouping,
    /// and with compaction; the cost of compaction per page moved.
    Fragbench(zonealloc_trace::cli::FragArgs),
    /// The reliability figures recorded by the test suites, in one table (run the
    /// tests first: `bash .ci/test`; the loom models' figures come from `.ci/run`).
    Selftest {
        /// Where the suites wrote their figures.
        #[arg(long, default_value = "target/reliability")]
        figures: PathBuf,
        /// Also require the figures only `bash .ci/run` records (the loom models).
        #[arg(long)]
        ci: bool,
    },
}

#[derive(Args)]
struct BenchArgs {
    /// CI scale: the whole suite in under 3 minutes (default: full scale).
    #[arg(long)]
    quick: bool,
    /// Directory for results.json and the charts.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Measured rounds per comparison (default: 5 quick, 11 full; at least 5).
    #[arg(long, value_parser = clap::value_parser!(u16).range(5..))]
    rounds: Option<u16>,
    /// Thread counts of the threaded experiments, comma-separated (default: 1, 2, 4
    /// and the number of CPUs this process may use). A run of at most that many
    /// threads pins one thread per CPU.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Vec<u16>,
    /// The other allocators the `peers` experiment builds and runs beside zonealloc's
    /// rows and the limit, comma-separated (default: all). Its targets then compare
    /// with the best of these.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(experiments::peers::peer_keys())
    )]
    peers: Vec<String>,
    /// List the experiments and exit.
    #[arg(long)]
    list: bool,
    /// Fail unless every experiment produced figures (a table with rows, and its
    /// chart): what CI checks.
    #[arg(long)]
    check: bool,
    /// Also print each experiment's parameters, tables and notes as it finishes
    /// (default: one line per experiment, then the targets' table; every figure is in
    /// results.json either way).
    #[arg(long, short)]
    verbose: bool,
    /// Experiments to run (default: all, in registry order).
    experiments: Vec<String>,
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Bench(args) => bench(args),
        Cmd::Stats => {
            stats();
            ExitCode::SUCCESS
        }
        Cmd::Replay(a) => done(zonealloc_trace::cli::replay_cmd(&a)),
        Cmd::Map(a) => done(zonealloc_trace::cli::map_cmd(&a)),
        Cmd::Fragbench(a) => done(zonealloc_trace::cli::fragbench_cmd(&a)),
        Cmd::Selftest { figures, ci } => {
            if selftest::run(&figures, ci) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Exit status of a trace command, printing its error.
fn done(r: zonealloc_trace::cli::Res) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zonealloc: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: BenchArgs) -> ExitCode {
    if args.list {
        for e in REGISTRY {
            out!("{:<12} {}", e.name(), e.description());
        }
        return ExitCode::SUCCESS;
    }
    let mut selected = Vec::new();
    for name in &args.experiments {
        match experiments::find(name) {
            Some(e) => selected.push(e),
            None => {
                let known: Vec<&str> = REGISTRY.iter().map(|e| e.name()).collect();
                eprintln!(
                    "zonealloc bench: no experiment named {name:?} (known: {})",
                    known.join(", ")
                );
                return ExitCode::from(2);
            }
        }
    }
    if selected.is_empty() {
        selected = REGISTRY.to_vec();
    }
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("zonealloc bench: cannot create {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }

    let machine = Machine::detect();
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let progress = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} runs  {msg}  ({elapsed})")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    let mut ctx = Ctx::new(args.quick, progress.clone());
    if let Some(r) = args.rounds {
        ctx.rounds = r.into();
    }
    ctx.set_threads(args.threads.iter().map(|&t| t.into()).collect());
    ctx.peers = args.peers.clone();
    out!(
        "zonealloc bench: {} scale, {} measured rounds (+{} warm-up) per comparison, variants interleaved",
        if args.quick { "quick" } else { "full" },
        ctx.rounds,
        ctx.warmup
    );
    out!("{}", machine.header());
    out!("threads: {}", ctx.pinning_note());
    if machine.load_avg_start > 0.5 {
        out!(
            "warning: load average {:.2}: other processes are using the CPUs; \
             multi-thread figures will be low and noisy",
            machine.load_avg_start
        );
    }
    if machine.build_profile != "release" {
        out!("warning: not a release build; run with `cargo run --release` for real figures");
    }

    let t_all = Instant::now();
    let mut results = Vec::new();
    for (i, e) in selected.iter().enumerate() {
        progress.set_prefix(format!("[{}/{}] {}", i + 1, selected.len(), e.name()));
        ctx.set_label(e.name().to_owned());
        let t = Instant::now();
        let mut r = e.run(&mut ctx);
        r.elapsed_s = t.elapsed().as_secs_f64();
        match report::write_charts(&args.out, &r) {
            Ok(files) => r.charts = files.iter().map(|p| p.display().to_string()).collect(),
            Err(err) => eprintln!("zonealloc bench: charts of {}: {err}", r.name),
        }
        let text = if args.verbose {
            report::format_experiment(&r)
        } else {
            report::progress_line(i + 1, selected.len(), &r)
        };
        progress.suspend(|| out!("{}", text.trim_end()));
        results.push(r);
    }
    progress.finish_and_clear();
    out!("\n{}", report::format_summary(&results).trim_end());

    let run = RunReport {
        mode: if args.quick { "quick" } else { "full" },
        rounds: ctx.rounds,
        warmup_rounds: ctx.warmup,
        significance_test: report::significance_rule(),
        started_unix_s,
        elapsed_s: t_all.elapsed().as_secs_f64(),
        load_avg_end: report::load_avg(),
        machine: &machine,
        experiments: &results,
    };
    let missed = results
        .iter()
        .flat_map(|r| &r.targets)
        .filter(|t| !t.pass)
        .count();
    out!(
        "\n{} experiment(s) in {:.1} s; targets: {} PASS, {missed} MISS",
        results.len(),
        run.elapsed_s,
        results.iter().flat_map(|r| &r.targets).count() - missed
    );
    match report::write_json(&args.out, &run) {
        Ok(path) => out!("results: {}", path.display()),
        Err(e) => {
            eprintln!("zonealloc bench: cannot write results.json: {e}");
            return ExitCode::FAILURE;
        }
    }
    let charts: Vec<String> = results
        .iter()
        .flat_map(|r| &r.charts)
        .map(|c| {
            let p = std::path::Path::new(c);
            p.file_name()
                .map_or(c.clone(), |f| f.to_string_lossy().into_owned())
        })
        .collect();
    // NAME.png for each experiment (where every one has it), the others by name.
    let every = results
        .iter()
        .all(|r| charts.iter().any(|c| *c == format!("{}.png", r.name)));
    let named: Vec<&str> = charts
        .iter()
        .map(|c| c.trim_end_matches(".png"))
        .filter(|c| !every || !results.iter().any(|r| r.name == *c))
        .collect();
    out!(
        "charts:  {} PNG file{} in {}:{}",
        charts.len(),
        if charts.len() == 1 { "" } else { "s" },
        args.out.display(),
        match (every, named.is_empty()) {
            (true, true) => " NAME.png for each experiment",
            (true, false) => " NAME.png for each experiment, and",
            (false, _) => "",
        }
    );
    if !named.is_empty() {
        out!("         {}", named.join(", "));
    }
    if args.check {
        let empty: Vec<&str> = results
            .iter()
            .filter(|r| {
                r.tables.is_empty()
                    || r.tables.iter().any(|t| t.rows.is_empty())
                    || r.charts.is_empty()
            })
            .map(|r| r.name.as_str())
            .collect();
        if !empty.is_empty() {
            eprintln!("zonealloc bench: no figures from: {}", empty.join(", "));
            return ExitCode::FAILURE;
        }
        out!("check: every experiment produced its tables and charts");
    }
    ExitCode::SUCCESS
}

/// A demo allocator (256 MiB, abstract frames) left fragmented by a seeded mix of
/// allocations and frees, printed in Linux's formats.
fn stats() {
    let za = ZoneAllocator::new(Config::with_bytes(256 << 20)).expect("valid configuration");
    let gfps = [
        Gfp::KERNEL,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::KERNEL | Gfp::RECLAIMABLE,
    ];
    let mut rng = crate::experiments::seed_util::Rng::new(42);
    let mut next = move || rng.next();
    // Fill 60 % of the zone with blocks of orders 0..=4 (mostly small) of the three
    // ordinary migratetypes, then free every block with probability 1/3.
    let mut live: Vec<(Pfn, Order)> = Vec::new();
    let mut used = 0;
    while used < za.managed_pages() * 6 / 10 {
        let r = next();
        let order = Order([0, 0, 0, 0, 0, 1, 1, 2, 3, 4][(r % 10) as usize]);
        let pfn = za
            .alloc_pages(gfps[(r >> 32) as usize % 3], order)
            .expect("40 % of the zone stays free");
        live.push((pfn, order));
        used += order.nr_pages();
    }
    live.retain(|&(pfn, order)| {
        let keep = next() % 3 != 0;
        if !keep {
            za.free_pages(pfn, order).expect("freeing a live block");
        }
        keep
    });
    let in_use: u64 = live.iter().map(|(_, o)| o.nr_pages()).sum();
    out!(
        "demo allocator: 256 MiB of abstract frames; a mixed workload left {} blocks \
         ({in_use} pages) allocated\n",
        live.len()
    );
    out!("== /proc/buddyinfo\n{}", za.buddyinfo());
    out!("== /proc/pagetypeinfo\n{}", za.pagetypeinfo());
    out!("== /proc/zoneinfo\n{}", za.zoneinfo());
    out!("== /proc/vmstat\n{}", za.vmstat());
    out!("== extfrag/unusable_index\n{}", za.unusable_index());
    out!("== extfrag/extfrag_index\n{}", za.extfrag_index());
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn an_unknown_flag_is_not_answered_with_an_unrelated_one() {
        let e = Cli::try_parse_from(["zonealloc", "bench", "--bogus"])
            .err()
            .expect("an unknown flag is an error");
        let text = e.to_string();
        assert!(text.contains("--bogus"), "{text}");
        assert!(!text.contains("--rounds"), "{text}");
    }

    #[test]
    fn the_peers_option_names_every_peer_the_experiment_knows() {
        let mut cli = Cli::command();
        let bench = cli.find_subcommand_mut("bench").expect("a bench command");
        let help = bench.render_long_help().to_string();
        for key in experiments::peers::peer_keys() {
            assert!(help.contains(key), "--peers help leaves out {key}");
        }
    }

    #[test]
    fn the_peers_option_takes_a_comma_separated_list() {
        let cli = Cli::try_parse_from(["zonealloc", "bench", "--peers", "fa-summary,mmap"])
            .expect("parses");
        let Cmd::Bench(args) = cli.cmd else {
            panic!("not the bench command");
        };
        assert_eq!(args.peers, ["fa-summary", "mmap"]);
    }

    #[test]
    fn the_peers_option_refuses_an_unknown_name() {
        let err = Cli::try_parse_from(["zonealloc", "bench", "--peers", "fa-summary,bogus"])
            .err()
            .expect("an unknown peer is refused");
        assert_eq!(err.exit_code(), 2);
    }
}
