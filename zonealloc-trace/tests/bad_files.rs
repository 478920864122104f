//! Every command over files that are not good traces: each gets a clear error that
//! names the file (and the line, where there is one) and a non-zero exit, or a
//! counted skip in a report that says so; none panics.
//!
//! The commands run as the `zonealloc-trace` binary, which shares every command with
//! `zonealloc replay`, `map` and `fragbench`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const GOOD: &str = "\
 cc 1 [000] 1.000001: kmem:mm_page_alloc: page=0x100010 pfn=0x100010 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 cc 1 [001] 1.000002: kmem:mm_page_alloc: page=0x100011 pfn=0x100011 order=0 migratetype=0 gfp_flags=GFP_KERNEL
 cc 1 [001] 1.000003: kmem:mm_page_free: page=0x100010 pfn=0x100010 order=0
";

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("zonealloc-bad-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str], file: &Path, dir: &Dir) -> Output {
    let out = dir.0.join("pictures");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zonealloc-trace"));
    match args[0] {
        "fragbench" => cmd.args([
            "fragbench",
            "--zone-mib",
            "16",
            "--ops-per-page",
            "0.5",
            "--no-peer",
            "--no-pictures",
            "--trace",
        ]),
        "map" => cmd.args(["map", "--out"]).arg(&out),
        c => cmd.arg(c),
    };
    cmd.arg(file).args(&args[1..]).output().unwrap()
}

/// Runs `cmd` on `file`: it must fail, without a panic, with an error that names
/// the file and contains `needle`.
#[track_caller]
fn refused(cmd: &str, file: &Path, dir: &Dir, needle: &str) {
    let o = run(&[cmd], file, dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "{cmd} {}: exit 0\n{err}",
        file.display()
    );
    assert!(!err.contains("panicked"), "{cmd}: {err}");
    assert!(
        err.contains(&file.display().to_string()),
        "{cmd}: error does not name the file: {err}"
    );
    assert!(err.contains(needle), "{cmd}: error lacks {needle:?}: {err}");
}

const COMMANDS: [&str; 3] = ["replay", "map", "fragbench"];

#[test]
fn empty_file_is_refused_by_every_command() {
    let d = Dir::new("empty");
    let f = d.file("e.txt", b"");
    for c in COMMANDS {
        refused(c, &f, &d, "the file is empty: no page-allocator events");
    }
}

#[test]
fn prose_is_refused_with_its_first_bad_line() {
    let d = Dir::new("readme");
    let f = d.file(
        "README.md",
        b"# Traces\n\nThese files are traces of the page allocator.\n",
    );
    for c in COMMANDS {
        refused(
            c,
            &f,
            &d,
            "first skipped line 3: no `[CPU] seconds.fraction:` prefix",
        );
    }
}

#[test]
fn random_bytes_are_refused_and_not_echoed() {
    let d = Dir::new("random");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..50_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let f = d.file("random.bin", &bytes);
    for c in COMMANDS {
        refused(c, &f, &d, "no page-allocator events");
        let o = run(&[c], &f, &d);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.trim_end()
                .chars()
                .all(|c| c.is_ascii_graphic() || c == ' '),
            "{c}: bytes other than printable ASCII reach the terminal: {err}"
        );
    }
}

#[test]
fn missing_file_is_named() {
    let d = Dir::new("missing");
    let f = d.0.join("no-such-trace.txt");
    for c in COMMANDS {
        refused(c, &f, &d, "No such file");
    }
}

#[test]
fn zstd_is_named_as_unsupported() {
    let d = Dir::new("zstd");
    // A zstd frame header: magic, then a frame header descriptor.
    let f = d.file(
        "t.txt.zst",
        &[0x28, 0xB5, 0x2F, 0xFD, 0x24, 0x04, 0x00, 0x00],
    );
    for c in COMMANDS {
        refused(c, &f, &d, "zstd file, which is not read here");
    }
}

#[test]
fn gzip_is_read() {
    let d = Dir::new("gzip");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(GOOD.as_bytes()).unwrap();
    let f = d.file("t.txt.gz", &enc.finish().unwrap());
    let o = run(&["replay"], &f, &d);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("3 events") && text.contains("(gzip)"),
        "{text}"
    );
}

#[test]
fn one_bad_cpu_is_a_counted_skip_not_an_abort() {
    let d = Dir::new("cpu");
    for cpu in ["9999", "300", "2"] {
        let text = format!(
            "{GOOD} cc 1 [{cpu}] 1.000004: kmem:mm_page_free: page=0x100011 pfn=0x100011 order=0\n"
        );
        let f = d.file("t.txt", text.as_bytes());
        // The built-in layout is the traced machine: 2 CPUs.
        let o = run(&["replay"], &f, &d);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains("2 CPUs"), "{out}");
        assert!(out.contains("1 on a CPU out of range"), "{out}");
        assert!(
            out.contains(&format!(
                ":line 4: CPU {cpu}, but the traced machine has 2 CPUs"
            )),
            "{out}"
        );
        // Strict mode stops there, naming file and line.
        let o = run(&["replay", "--strict"], &f, &d);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(
            err.contains(&format!("{}:4: CPU {cpu}", f.display())),
            "{err}"
        );
    }
}

#[test]
fn a_cut_last_line_is_reported_not_replayed() {
    let d = Dir::new("cut");
    let text = format!(
        "{GOOD} cc 1 [001] 1.000004: kmem:mm_page_free: page=0x100011 pfn=0x100011 order=1"
    );
    let f = d.file("t.txt", text.as_bytes());
    let o = run(&["replay"], &f, &d);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("1 cut-short last line"), "{out}");
    assert!(out.contains("3 events"), "{out}");
    assert!(out.contains(":line 4: cut short"), "{out}");
}

#[test]
fn a_good_trace_still_replays_in_every_command() {
    let d = Dir::new("good");
    let f = d.file("t.txt", GOOD.as_bytes());
    for c in COMMANDS {
        let o = run(&[c], &f, &d);
        assert!(
            o.status.success(),
            "{c}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn a_bad_zoneinfo_is_named_with_its_line() {
    let d = Dir::new("zoneinfo");
    let f = d.file("t.txt", GOOD.as_bytes());
    for (name, text, needle) in [
        ("empty-zoneinfo", "", "no populated zone"),
        (
            "bad-zoneinfo",
            "Node 0, zone   Normal\n        spanned  lots\n",
            "zoneinfo line 2: bad number",
        ),
    ] {
        let z = d.file(name, text.as_bytes());
        let o = Command::new(env!("CARGO_BIN_EXE_zonealloc-trace"))
            .arg("replay")
            .arg("--zoneinfo")
            .arg(&z)
            .arg(&f)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(&z.display().to_string()), "{err}");
        assert!(err.contains(needle), "{err}");
    }
}

/// `fragbench` options out of range: a clear error, no panic, a non-zero exit.
#[test]
fn fragbench_options_out_of_range_are_refused() {
    for (args, needle) in [
        (&["--zone-mib", "0"][..], "zone of 0 MiB"),
        (&["--zone-mib", "1"][..], "zone of 1 MiB"),
        (&["--pinned-percent", "200"][..], "pinned percent 200"),
        (&["--occupancy-percent=-5"][..], "occupancy percent -5"),
        (&["--ops-per-page", "NaN"][..], "ops per page NaN"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_zonealloc-trace"))
            .args(["fragbench", "--no-peer", "--no-pictures"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: exit 0");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: error lacks {needle:?}: {err}"
        );
    }
}

/// `map` offers only the options it uses: `--vs-xz` times a replay, not a map.
#[test]
fn map_help_lists_only_its_own_options() {
    let help = |cmd: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_zonealloc-trace"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(help("replay").contains("--vs-xz"));
    assert!(!help("map").contains("--vs-xz"));
    assert!(help("map").contains("--zoneinfo"));
}

/// A compressed trace cut short says so, for xz and gzip alike.
#[test]
fn a_truncated_compressed_trace_is_named_as_such() {
    let d = Dir::new("truncated");
    let text = GOOD.repeat(2000);
    for (ext, tool) in [("xz", "xz"), ("gz", "gzip")] {
        let Ok(mut child) = Command::new(tool)
            .arg("-c")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("{tool} not found: skipped");
            continue;
        };
        let mut stdin = child.stdin.take().unwrap();
        let body = text.clone();
        let writer = std::thread::spawn(move || stdin.write_all(body.as_bytes()).unwrap());
        let packed = child.wait_with_output().unwrap().stdout;
        writer.join().unwrap();
        let f = d.file(&format!("cut.txt.{ext}"), &packed[..packed.len() / 2]);
        refused("replay", &f, &d, "the compressed stream ends early");
    }
}

/// `map` and `fragbench` print no report, so they say in one line what they
/// skipped.
#[test]
fn map_and_fragbench_say_what_they_skipped() {
    let d = Dir::new("skipped");
    let f = d.file(
        "one-bad.txt",
        format!("{GOOD}this line is not an event\n").as_bytes(),
    );
    for cmd in ["map", "fragbench"] {
        let o = run(&[cmd], &f, &d);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{cmd}: {err}");
        assert!(
            err.contains("skipped 1 lines (1 malformed"),
            "{cmd} does not say what it skipped: {err}"
        );
    }
}
