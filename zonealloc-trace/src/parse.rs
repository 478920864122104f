//! One trace line to one `Record`: the `perf script` and ftrace `trace_pipe` grammars.
//!
//! Bottom layer, pure functions over bytes (a COMM need not be UTF-8). The two
//! formats differ only in the prefix before the event:
//!
//! ```text
//! perf script:  " lto cgu.08.rcgu 17760 [001]   813.358157:   kmem:mm_page_alloc: page=... pfn=..."
//!                 `---- COMM ----' `PID' `CPU'  `-- TIME --'  `-- EVENT --------'  `-- key=value ... --'
//! trace_pipe:   "  cc1-4242  [001] d..1. 813.358157: mm_page_alloc: page=... pfn=..."
//!                 `COMM-PID'  `CPU' FLAGS `-- TIME --' `-- EVENT -'
//! ```
//!
//! A COMM may hold spaces, dashes and brackets, so the parser anchors on the CPU
//! field: the first `[digits]` that is followed by an optional flags word and then a
//! `seconds.fraction:` timestamp. Everything after the timestamp is the event name
//! (with or without a `system:` prefix) and its `key=value` payload.

use zonealloc::Gfp;

use crate::event::{migratetype_from_kernel, Event, EventKind};
use crate::gfp_names::parse_gfp_flags;

/// What a line holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An event the replay understands.
    Event {
        /// The `[CPU]` field.
        cpu: u32,
        /// Timestamp in nanoseconds.
        time_ns: u64,
        /// The payload.
        event: Event,
    },
    /// A well-formed event of another tracepoint (ignored by the replay).
    Other,
    /// An empty line or a `#` comment (trace_pipe and perf headers).
    Blank,
}

/// Why a line could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError(pub String);

fn err<T>(why: impl Into<String>) -> Result<T, LineError> {
    Err(LineError(why.into()))
}

/// The last `gfp_flags` value seen and its flags: consecutive allocations mostly
/// share their flags, and splitting and looking up the symbols was a tenth of the
/// parsing time. Only values whose every symbol is known are kept, so each unknown
/// symbol is still reported every time it is seen.
#[derive(Clone, Debug, Default)]
pub struct GfpCache {
    text: Vec<u8>,
    gfp: Option<Gfp>,
}

/// Parses one line (without its newline). `unknown_gfp` is called with each
/// `gfp_flags` symbol the mapping does not know.
///
/// # Errors
/// A `LineError` naming what is missing or wrong.
pub fn parse_line(line: &[u8], unknown_gfp: impl FnMut(&str)) -> Result<Parsed, LineError> {
    parse_line_cached(line, &mut GfpCache::default(), unknown_gfp)
}

/// `parse_line` with a `GfpCache` kept between lines.
///
/// # Errors
/// As `parse_line`.
pub fn parse_line_cached(
    line: &[u8],
    cache: &mut GfpCache,
    unknown_gfp: impl FnMut(&str),
) -> Result<Parsed, LineError> {
    let line = trim(line);
    if line.is_empty() || line[0] == b'#' {
        return Ok(Parsed::Blank);
    }
    let Some((cpu, time_ns, rest)) = find_prefix(line) else {
        return err("no `[CPU] seconds.fraction:` prefix");
    };
    let rest = trim_start(rest);
    // The event name runs to the first ':' followed by a space or the line's end.
    let mut end = None;
    for (i, &b) in rest.iter().enumerate() {
        if b == b':' && rest.get(i + 1).is_none_or(|c| c.is_ascii_whitespace()) {
            end = Some(i);
            break;
        }
        if b.is_ascii_whitespace() {
            break;
        }
    }
    let Some(end) = end else {
        return err("no `event:` after the timestamp");
    };
    let full = &rest[..end];
    let name = match full.iter().rposition(|&b| b == b':') {
        Some(p) => &full[p + 1..],
        None => full,
    };
    let Some(kind) = EventKind::from_name(name) else {
        return Ok(Parsed::Other);
    };
    let payload = &rest[end + 1..];
    let event = parse_payload(kind, payload, cache, unknown_gfp)?;
    Ok(Parsed::Event {
        cpu,
        time_ns,
        event,
    })
}

/// Finds the CPU field and the timestamp; returns them and the text after the
/// timestamp's colon.
fn find_prefix(line: &[u8]) -> Option<(u32, u64, &[u8])> {
    let mut from = 0;
    while let Some(off) = memchr::memchr(b'[', &line[from..]) {
        let open = from + off;
        from = open + 1;
        let close = line[open + 1..].iter().position(|&b| b == b']')?;
        let digits = &line[open + 1..open + 1 + close];
        let Some(cpu) = parse_dec(digits).and_then(|c| u32::try_from(c).ok()) else {
            continue;
        };
        let after = &line[open + 2 + close..];
        if after.first().is_some_and(|b| !b.is_ascii_whitespace()) {
            continue;
        }
        // perf: TIME:   trace_pipe: FLAGS TIME:
        let (w1, r1) = word(after);
        if let Some(t) = timestamp(w1) {
            return Some((cpu, t, r1));
        }
        let (w2, r2) = word(r1);
        if let Some(t) = timestamp(w2) {
            return Some((cpu, t, r2));
        }
    }
    None
}

/// The next whitespace-delimited word and the text after it.
fn word(s: &[u8]) -> (&[u8], &[u8]) {
    let s = trim_start(s);
    let n = s
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(s.len());
    (&s[..n], &s[n..])
}

/// `SECONDS.FRACTION` (as `perf script` prints a time stamp, without its colon) in
/// nanoseconds, on the same clock and with the same rounding as the records'
/// `time_ns`; `None` if it does not parse.
pub fn seconds_to_ns(s: &str) -> Option<u64> {
    let mut w = s.as_bytes().to_vec();
    w.push(b':');
    timestamp(&w)
}

/// `SECONDS.FRACTION:` in nanoseconds (fraction of 1 to 9 digits).
fn timestamp(w: &[u8]) -> Option<u64> {
    let w = w.strip_suffix(b":")?;
    let dot = w.iter().position(|&b| b == b'.')?;
    let secs = parse_dec(&w[..dot])?;
    let frac = &w[dot + 1..];
    if frac.is_empty() || frac.len() > 9 {
        return None;
    }
    let f = parse_dec(frac)?;
    let scale = 10u64.pow(9 - frac.len() as u32);
    secs.checked_mul(1_000_000_000)?.checked_add(f * scale)
}

/// The fields each event needs, read from `key=value` words.
fn parse_payload(
    kind: EventKind,
    payload: &[u8],
    cache: &mut GfpCache,
    mut unknown_gfp: impl FnMut(&str),
) -> Result<Event, LineError> {
    let mut pfn: Option<u64> = None;
    let mut pfn_failed = false;
    let mut order: Option<u8> = None;
    let mut mt: Option<i64> = None;
    let mut gfp: Option<Gfp> = None;
    let mut refill: Option<bool> = None;
    let mut alloc_order: Option<u8> = None;
    let mut fallback_order: Option<u8> = None;
    let mut alloc_mt: Option<i64> = None;
    let mut fallback_mt: Option<i64> = None;
    let mut change: Option<bool> = None;
    for tok in payload.split(|b| b.is_ascii_whitespace()) {
        let Some(eq) = tok.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (k, v) = (&tok[..eq], &tok[eq + 1..]);
        let bad = || LineError(format!("bad value in `{}`", String::from_utf8_lossy(tok)));
        match k {
            b"pfn" => {
                let p = parse_num(v).ok_or_else(bad)?;
                // `page_to_pfn()` of NULL is printed as -1UL.
                if p == u64::MAX {
                    pfn_failed = true;
                } else {
                    pfn = Some(p);
                }
            }
            b"order" => order = Some(parse_order(v).ok_or_else(bad)?),
            b"migratetype" => mt = Some(parse_int(v).ok_or_else(bad)?),
            b"gfp_flags" => {
                if cache.gfp.is_some() && cache.text == v {
                    gfp = cache.gfp;
                } else {
                    let s = core::str::from_utf8(v).map_err(|_| bad())?;
                    let mut unknown = false;
                    let g = parse_gfp_flags(s, |sym| {
                        unknown = true;
                        unknown_gfp(sym);
                    });
                    cache.text.clear();
                    cache.text.extend_from_slice(v);
                    cache.gfp = (!unknown).then_some(g);
                    gfp = Some(g);
                }
            }
            b"percpu_refill" => refill = Some(parse_int(v).ok_or_else(bad)? != 0),
            b"alloc_order" => alloc_order = Some(parse_order(v).ok_or_else(bad)?),
            b"fallback_order" => fallback_order = Some(parse_order(v).ok_or_else(bad)?),
            b"alloc_migratetype" => alloc_mt = Some(parse_int(v).ok_or_else(bad)?),
            b"fallback_migratetype" => fallback_mt = Some(parse_int(v).ok_or_else(bad)?),
            b"change_ownership" => change = Some(parse_int(v).ok_or_else(bad)? != 0),
            _ => {}
        }
    }
    let need = |what: &str| LineError(format!("{}: no `{what}=`", kind.name()));
    let pfn_req = || pfn.ok_or_else(|| need("pfn"));
    Ok(match kind {
        EventKind::Alloc => {
            if pfn.is_none() && !pfn_failed {
                return Err(need("pfn"));
            }
            Event::Alloc {
                pfn,
                order: order.ok_or_else(|| need("order"))?,
                gfp: gfp.ok_or_else(|| need("gfp_flags"))?,
                migratetype: mt.and_then(migratetype_from_kernel),
            }
        }
        EventKind::Free => Event::Free {
            pfn: pfn_req()?,
            order: order.ok_or_else(|| need("order"))?,
        },
        EventKind::FreeBatched => Event::FreeBatched {
            pfn: pfn_req()?,
            order: order.unwrap_or(0),
        },
        EventKind::AllocZoneLocked => Event::AllocZoneLocked {
            pfn: pfn_req()?,
            order: order.ok_or_else(|| need("order"))?,
            migratetype: mt.and_then(migratetype_from_kernel),
            percpu_refill: refill.ok_or_else(|| need("percpu_refill"))?,
        },
        EventKind::PcpuDrain => Event::PcpuDrain {
            pfn: pfn_req()?,
            order: order.ok_or_else(|| need("order"))?,
            migratetype: mt.and_then(migratetype_from_kernel),
        },
        EventKind::AllocExtfrag => Event::AllocExtfrag {
            pfn: pfn_req()?,
            alloc_order: alloc_order.ok_or_else(|| need("alloc_order"))?,
            fallback_order: fallback_order.ok_or_else(|| need("fallback_order"))?,
            alloc_migratetype: alloc_mt.and_then(migratetype_from_kernel),
            fallback_migratetype: fallback_mt.and_then(migratetype_from_kernel),
            change_ownership: change.unwrap_or(false),
        },
    })
}

fn trim(s: &[u8]) -> &[u8] {
    let s = trim_start(s);
    let n = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |p| p + 1);
    &s[..n]
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    &s[n..]
}

/// Unsigned decimal, at most 19 digits.
fn parse_dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(b - b'0');
    }
    Some(v)
}

/// `0x` hex or decimal.
fn parse_num(s: &[u8]) -> Option<u64> {
    match s.strip_prefix(b"0x") {
        Some(h) if !h.is_empty() && h.len() <= 16 => {
            let mut v = 0u64;
            for &b in h {
                let d = (b as char).to_digit(16)?;
                v = (v << 4) | u64::from(d);
            }
            Some(v)
        }
        Some(_) => None,
        None => parse_dec(s),
    }
}

/// Signed decimal (`migratetype=-1`).
fn parse_int(s: &[u8]) -> Option<i64> {
    match s.strip_prefix(b"-") {
        Some(d) => parse_dec(d).and_then(|v| i64::try_from(v).ok()).map(|v| -v),
        None => parse_dec(s).and_then(|v| i64::try_from(v).ok()),
    }
}

/// An order: a small non-negative number.
fn parse_order(s: &[u8]) -> Option<u8> {
    parse_dec(s)
        .and_then(|v| u8::try_from(v).ok())
        .filter(|&o| o < 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zonealloc::Migratetype;

    #[track_caller]
    fn ok(line: &str) -> Parsed {
        parse_line(line.as_bytes(), |s| panic!("unknown gfp {s}")).unwrap()
    }

    #[test]
    fn perf_script_line_with_spaces_in_comm() {
        let p = ok(" lto cgu.08.rcgu 17760 [001]   813.358157:             kmem:mm_page_alloc: page=0x1b34a0 pfn=0x1b34a0 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_ZERO|__GFP_COMP");
        assert_eq!(
            p,
            Parsed::Event {
                cpu: 1,
                time_ns: 813_358_157_000,
                event: Event::Alloc {
                    pfn: Some(0x1b34a0),
                    order: 0,
                    gfp: Gfp::HIGHUSER_MOVABLE | Gfp::ZERO | Gfp::COMP,
                    migratetype: Some(Migratetype::Movable),
                },
            }
        );
    }

    #[test]
    fn trace_pipe_line() {
        let p = ok("  cc1-4242  [003] d..1. 813.358157: mm_page_free: page=0000000012345678 pfn=0x1b34a0 order=2");
        assert_eq!(
            p,
            Parsed::Event {
                cpu: 3,
                time_ns: 813_358_157_000,
                event: Event::Free {
                    pfn: 0x1b34a0,
                    order: 2
                },
            }
        );
    }

    #[test]
    fn comm_with_brackets_and_dashes() {
        let p = ok("  [weird] comm-1 [1]-99  [000] ..... 1.5: mm_page_pcpu_drain: page=0x1 pfn=0x10 order=0 migratetype=1");
        assert!(matches!(
            p,
            Parsed::Event {
                cpu: 0,
                time_ns: 1_500_000_000,
                event: Event::PcpuDrain { pfn: 16, .. }
            }
        ));
    }

    #[test]
    fn zone_locked_extfrag_and_batched() {
        let p = ok("perf 1 [000] 1.000001: kmem:mm_page_alloc_zone_locked: page=0x1 pfn=0x1c4d12 order=1 migratetype=1 percpu_refill=1");
        assert!(matches!(
            p,
            Parsed::Event {
                event: Event::AllocZoneLocked {
                    percpu_refill: true,
                    order: 1,
                    ..
                },
                ..
            }
        ));
        let p = ok("x 1 [001] 2.0: kmem:mm_page_alloc_extfrag: page=0x1 pfn=0x200 alloc_order=0 fallback_order=9 pageblock_order=9 alloc_migratetype=0 fallback_migratetype=1 fragmenting=0 change_ownership=1");
        assert!(matches!(
            p,
            Parsed::Event {
                event: Event::AllocExtfrag {
                    fallback_order: 9,
                    change_ownership: true,
                    alloc_migratetype: Some(Migratetype::Unmovable),
                    ..
                },
                ..
            }
        ));
        let p = ok("x 1 [001] 2.0: kmem:mm_page_free_batched: page=0x1 pfn=0x200 order=0");
        assert!(matches!(
            p,
            Parsed::Event {
                event: Event::FreeBatched { pfn: 0x200, .. },
                ..
            }
        ));
    }

    #[test]
    fn failed_kernel_allocation_has_no_pfn() {
        let p = ok("x 1 [001] 2.0: kmem:mm_page_alloc: page=(nil) pfn=0xffffffffffffffff order=9 migratetype=1 gfp_flags=GFP_TRANSHUGE");
        assert!(matches!(
            p,
            Parsed::Event {
                event: Event::Alloc { pfn: None, .. },
                ..
            }
        ));
    }

    #[test]
    fn the_gfp_cache_gives_the_same_flags_and_reports_every_unknown_symbol() {
        let mut cache = GfpCache::default();
        let mut unknown = Vec::new();
        let line = |flags: &str| {
            format!("x 1 [000] 1.0: kmem:mm_page_alloc: pfn=0x10 order=0 migratetype=1 gfp_flags={flags}")
        };
        let mut gfps = Vec::new();
        for flags in [
            "GFP_KERNEL",
            "GFP_KERNEL",
            "GFP_HIGHUSER_MOVABLE|__GFP_ZERO",
            "GFP_KERNEL|__GFP_FROB",
            "GFP_KERNEL|__GFP_FROB",
            "GFP_KERNEL",
        ] {
            let fresh = parse_line(line(flags).as_bytes(), |_| {}).unwrap();
            let cached = parse_line_cached(line(flags).as_bytes(), &mut cache, |s| {
                unknown.push(s.to_string())
            })
            .unwrap();
            assert_eq!(fresh, cached, "{flags}");
            gfps.push(cached);
        }
        assert_eq!(gfps[0], gfps[1]);
        assert_ne!(gfps[1], gfps[2]);
        assert_eq!(unknown, ["__GFP_FROB", "__GFP_FROB"]);
    }

    #[test]
    fn blanks_comments_and_other_events() {
        assert_eq!(ok(""), Parsed::Blank);
        assert_eq!(ok("# tracer: nop"), Parsed::Blank);
        assert_eq!(
            ok("x 1 [000] 1.0: kmem:kmalloc: call_site=foo ptr=0x1 bytes_req=8"),
            Parsed::Other
        );
    }

    #[test]
    fn malformed_lines_say_why() {
        for bad in [
            "garbage",
            "x 1 [000] notatime: kmem:mm_page_free: pfn=0x1 order=0",
            "x 1 [000] 1.0: kmem:mm_page_free: pfn=0xZZ order=0",
            "x 1 [000] 1.0: kmem:mm_page_free: pfn=0x10",
            "x 1 [000] 1.0: kmem:mm_page_alloc: pfn=0x10 order=0",
        ] {
            assert!(parse_line(bad.as_bytes(), |_| {}).is_err(), "{bad}");
        }
    }
}
