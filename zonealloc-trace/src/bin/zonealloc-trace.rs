//! `zonealloc-trace`: replay a kernel page-allocator trace into zonealloc, run the
//! fragmentation benchmark, draw zone maps.
//!
//! * `zonealloc-trace replay TRACE [--zoneinfo FILE | --zone SPEC...] [--json FILE] [--out DIR]`
//! * `zonealloc-trace fragbench [--trace TRACE] [--quick] [--json FILE] [--out DIR]`
//! * `zonealloc-trace map TRACE [--zoneinfo FILE] [--out DIR]`
//!
//! Everything is a call into the `zonealloc_trace` library; this file only parses
//! flags and prints.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use zonealloc_trace::cli::{fragbench_cmd, map_cmd, replay_cmd, FragArgs, MapArgs, ReplayArgs};

#[derive(Parser)]
#[command(
    name = "zonealloc-trace",
    version,
    about = "Replay Linux page-allocator traces into zonealloc; fragmentation benchmark; zone maps"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay a perf script / trace_pipe trace (plain, .xz or .gz) and report.
    Replay(ReplayArgs),
    /// Fragmentation benchmark: order-9 success with and without mobility grouping.
    Fragbench(FragArgs),
    /// Replay a trace, then draw the busiest zone's map and its buddyinfo chart.
    Map(MapArgs),
}

fn main() -> ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::Replay(a) => replay_cmd(&a),
        Cmd::Map(a) => map_cmd(&a),
        Cmd::Fragbench(a) => fragbench_cmd(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zonealloc-trace: {e}");
            ExitCode::FAILURE
        }
    }
}
