//! zonealloc-trace: real Linux page-allocator traces replayed into zonealloc, a
//! fragmentation-quality benchmark, and pictures of zones.
//!
//! * `reader` / `parse`: `perf script` and ftrace `trace_pipe` text of the six
//!   page-allocator tracepoints, plain, xz or gzip, decoded on a second thread and
//!   parsed in place, one pass; bad files refused by name.
//! * `layout`: the traced machine's zones, watermarks and per-CPU lists from its
//!   `/proc/zoneinfo`.
//! * `action`: what each event asks of a replay (shared with `zonealloc bench`).
//! * `replay`: every event on the CPU the trace names; counts, ns per event,
//!   per-CPU refills and drains next to the kernel's, the fragmentation at the end.
//! * `fragbench`: a stress-highalloc analogue: fragment a zone, free the movable
//!   memory, count the order-9 blocks still to be had; with and without mobility
//!   grouping, and a plain buddy allocator as a peer.
//! * `maps`: PNG/SVG zone maps (one cell per pageblock) and free-blocks-per-order
//!   charts.
//!
//! ```no_run
//! use std::path::Path;
//! use zonealloc_trace::replay::{self, ReplayOptions};
//!
//! let report = replay::run(
//!     Path::new("traces/linux-6.18-cargo-build/linux-6.18-cargo-build.perf.txt.xz"),
//!     &ReplayOptions::default(),
//! )
//! .unwrap();
//! println!("{report}");
//! ```
//!
//! Only zonealloc's public API is used.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
pub mod cli;
pub mod compare;
pub mod event;
pub mod fragbench;
pub mod gfp_names;
pub mod kpage;
pub mod kstate;
pub mod layout;
pub mod maps;
pub mod parse;
pub mod reader;
pub mod replay;
pub mod rng;
pub mod shadow;
pub mod start;

pub use action::Action;
pub use event::{Event, EventKind, Record};
pub use layout::{HoleModel, ZoneLayout, ZoneSpec};
pub use reader::{ParseStats, ReadOptions, TraceError, TraceReader};
pub use replay::{ReplayOptions, ReplayReport, Replayer};
