//! The kernel's own free-memory state during a trace: `/proc/buddyinfo` and
//! `/proc/pagetypeinfo` as text, and the once-a-second series `traces/capture.sh`
//! keeps (`snapshots.txt`), each stamped with the trace's clock.
//!
//! Bottom layer, plain data: parses text, nothing else. The comparison (`compare`)
//! sets these beside zonealloc's state at the same moments.
//!
//! `snapshots.txt` is a sequence of sections: `=== snapshot N time=SECONDS` followed
//! by buddyinfo and pagetypeinfo text, and one `=== end time=SECONDS` with the same
//! and then `=== zoneinfo` and `=== vmstat` sections. `#` lines are comments.

use std::fmt;
use std::path::Path;

use serde::Serialize;
use zonealloc::{Migratetype, ZoneType};

/// Why a /proc text or a snapshot file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KstateError(pub String);

impl fmt::Display for KstateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KstateError {}

/// The migratetypes a comparison keeps, in pagetypeinfo's order. CMA and
/// Isolate rows (a kernel's pagetypeinfo may print them) are read and dropped.
pub const TYPES: [Migratetype; 4] = [
    Migratetype::Unmovable,
    Migratetype::Movable,
    Migratetype::Reclaimable,
    Migratetype::HighAtomic,
];

/// Index into `TYPES`, `None` for a type a comparison does not keep.
pub fn type_index(mt: Migratetype) -> Option<usize> {
    TYPES.iter().position(|&t| t == mt)
}

fn type_named(name: &str) -> Option<Migratetype> {
    Migratetype::ALL
        .into_iter()
        .find(|m| m.name().eq_ignore_ascii_case(name))
}

fn zone_named(name: &str) -> Option<ZoneType> {
    ZoneType::ALL
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(name))
}

/// One zone's free memory at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneShape {
    /// Node.
    pub node: u16,
    /// Zone.
    #[serde(serialize_with = "zone_type_name")]
    pub zone: ZoneType,
    /// Free blocks per order (buddyinfo).
    pub free: Vec<u64>,
    /// Free blocks per migratetype (`TYPES`) and order (pagetypeinfo); empty when
    /// only buddyinfo was read.
    pub free_by_type: Vec<Vec<u64>>,
    /// Pageblocks per migratetype (`TYPES`); zeros when unknown.
    pub blocks: [u64; 4],
}

fn zone_type_name<S: serde::Serializer>(t: &ZoneType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(t.name())
}

impl ZoneShape {
    /// Free pages (`sum free[o] << o`).
    pub fn free_pages(&self) -> u64 {
        self.free.iter().enumerate().map(|(o, &n)| n << o).sum()
    }
}

/// Every zone's free memory at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Trace clock, ns (0 where unknown).
    pub time_ns: u64,
    /// Populated zones, in /proc's order.
    pub zones: Vec<ZoneShape>,
}

impl Shape {
    /// The zone `(node, zone)`.
    pub fn zone(&self, node: u16, zone: ZoneType) -> Option<&ZoneShape> {
        self.zones.iter().find(|z| z.node == node && z.zone == zone)
    }
}

/// `Node N, zone NAME` at the start of a line: the node, the zone and the rest.
fn node_zone(line: &str) -> Option<(u16, &str, &str)> {
    let rest = line.strip_prefix("Node ")?;
    let (n, rest) = rest.split_once(',')?;
    let rest = rest.trim_start().strip_prefix("zone")?;
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(rest.len());
    Some((n.trim().parse().ok()?, &rest[..end], &rest[end..]))
}

fn numbers(s: &str) -> Option<Vec<u64>> {
    // pagetypeinfo prints `>100000` where its walk stopped: read the bound.
    s.split_whitespace()
        .map(|w| w.trim_start_matches('>').parse().ok())
        .collect()
}

/// Parses `/proc/buddyinfo` text; in a snapshot, the lines before pagetypeinfo's
/// (`Page block order:`) only.
///
/// # Errors
/// A `Node` line whose zone or counts do not parse.
pub fn parse_buddyinfo(text: &str) -> Result<Shape, KstateError> {
    let mut s = Shape::default();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("Page block order") {
            break;
        }
        if !line.starts_with("Node ") {
            continue;
        }
        let bad = || KstateError(format!("buddyinfo line {}: {line}", i + 1));
        let (node, name, rest) = node_zone(line).ok_or_else(bad)?;
        let zone = zone_named(name).ok_or_else(bad)?;
        s.zones.push(ZoneShape {
            node,
            zone,
            free: numbers(rest).ok_or_else(bad)?,
            free_by_type: Vec::new(),
            blocks: [0; 4],
        });
    }
    Ok(s)
}

/// Adds `/proc/pagetypeinfo` text to `s` (which buddyinfo gave its zones): free
/// blocks per type and order, and pageblocks per type. A zone only pagetypeinfo
/// names is added with its free blocks summed over the types.
///
/// # Errors
/// A line of either table that does not parse.
pub fn add_pagetypeinfo(s: &mut Shape, text: &str) -> Result<(), KstateError> {
    // The block-count table's column names, once its header is seen.
    let mut columns: Option<Vec<Option<Migratetype>>> = None;
    // Lines before the free-count table's header (a snapshot's buddyinfo) are not
    // pagetypeinfo's.
    let mut started = false;
    for (i, line) in text.lines().enumerate() {
        let bad = || KstateError(format!("pagetypeinfo line {}: {line}", i + 1));
        if line.starts_with("Free pages count per migrate type") {
            started = true;
            continue;
        }
        if let Some(h) = line.strip_prefix("Number of blocks type") {
            columns = Some(h.split_whitespace().map(type_named).collect());
            continue;
        }
        if !started || !line.starts_with("Node ") {
            continue;
        }
        let (node, name, rest) = node_zone(line).ok_or_else(bad)?;
        let zone = zone_named(name).ok_or_else(bad)?;
        let z = match s
            .zones
            .iter()
            .position(|z| z.node == node && z.zone == zone)
        {
            Some(i) => &mut s.zones[i],
            None => {
                s.zones.push(ZoneShape {
                    node,
                    zone,
                    free: Vec::new(),
                    free_by_type: Vec::new(),
                    blocks: [0; 4],
                });
                s.zones.last_mut().ok_or_else(bad)?
            }
        };
        if let Some(cols) = &columns {
            let n = numbers(rest).ok_or_else(bad)?;
            for (mt, v) in cols.iter().zip(n) {
                if let Some(t) = mt.and_then(type_index) {
                    z.blocks[t] = v;
                }
            }
        } else {
            // `, type NAME  counts...`
            let rest = rest.trim_start_matches(',').trim_start();
            let rest = rest.strip_prefix("type").ok_or_else(bad)?;
            let mut w = rest.split_whitespace();
            let mt = w.next().and_then(type_named).ok_or_else(bad)?;
            let counts: Vec<u64> = numbers(&w.collect::<Vec<_>>().join(" ")).ok_or_else(bad)?;
            if let Some(t) = type_index(mt) {
                if z.free_by_type.is_empty() {
                    z.free_by_type = vec![vec![0; counts.len()]; TYPES.len()];
                }
                z.free_by_type[t] = counts;
            }
        }
    }
    for z in &mut s.zones {
        if z.free.is_empty() && !z.free_by_type.is_empty() {
            let orders = z.free_by_type.iter().map(Vec::len).max().unwrap_or(0);
            z.free = (0..orders)
                .map(|o| {
                    z.free_by_type
                        .iter()
                        .map(|r| r.get(o).copied().unwrap_or(0))
                        .sum()
                })
                .collect();
        }
    }
    Ok(())
}

/// The once-a-second series of a capture, and its end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Snapshots {
    /// The per-second snapshots, in time order.
    pub seconds: Vec<Shape>,
    /// The snapshot at the end of the workload.
    pub end: Option<Shape>,
    /// `/proc/zoneinfo` at the end.
    #[serde(skip)]
    pub end_zoneinfo: Option<String>,
    /// `/proc/vmstat` at the end.
    #[serde(skip)]
    pub end_vmstat: Option<String>,
}

impl Snapshots {
    /// Reads a `snapshots.txt`.
    ///
    /// # Errors
    /// I/O, and what `parse` refuses, naming the file.
    pub fn read(path: &Path) -> Result<Snapshots, KstateError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| KstateError(format!("{}: {e}", path.display())))?;
        Snapshots::parse(&text).map_err(|e| KstateError(format!("{}: {}", path.display(), e.0)))
    }

    /// Parses a `snapshots.txt` (see the module documentation). A snapshot whose
    /// time is `?` (its marker was lost) is left out.
    ///
    /// # Errors
    /// A section header or a /proc table that does not parse.
    pub fn parse(text: &str) -> Result<Snapshots, KstateError> {
        let mut out = Snapshots::default();
        // (header, body) of each section.
        let mut sections: Vec<(&str, String)> = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            if let Some(h) = line.strip_prefix("=== ") {
                sections.push((h, String::new()));
            } else if let Some((_, body)) = sections.last_mut() {
                body.push_str(line);
                body.push('\n');
            }
        }
        let time_of = |h: &str| -> Result<Option<u64>, KstateError> {
            let t = h
                .split_whitespace()
                .find_map(|w| w.strip_prefix("time="))
                .ok_or_else(|| KstateError(format!("section `{h}` has no time=")))?;
            if t == "?" {
                return Ok(None);
            }
            crate::parse::seconds_to_ns(t)
                .map(Some)
                .ok_or_else(|| KstateError(format!("section `{h}`: bad time")))
        };
        let shape = |h: &str, body: &str| -> Result<Option<Shape>, KstateError> {
            let Some(t) = time_of(h)? else {
                return Ok(None);
            };
            let mut s = parse_buddyinfo(body)?;
            add_pagetypeinfo(&mut s, body)?;
            s.time_ns = t;
            Ok(Some(s))
        };
        for (h, body) in &sections {
            if h.starts_with("snapshot ") {
                if let Some(s) = shape(h, body)? {
                    out.seconds.push(s);
                }
            } else if h.starts_with("end") {
                out.end = shape(h, body)?;
            } else if h.starts_with("zoneinfo") {
                out.end_zoneinfo = Some(body.clone());
            } else if h.starts_with("vmstat") {
                out.end_vmstat = Some(body.clone());
            } else {
                return Err(KstateError(format!("unknown section `=== {h}`")));
            }
        }
        out.seconds.sort_by_key(|s| s.time_ns);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDDYINFO: &str = "\
Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 
Node 0, zone   Normal      7      2      1      0      0      0      0      0      0      0      1 
";
    const PAGETYPEINFO: &str = "\
Page block order: 9
Pages per block:  512

Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 
Node    0, zone      DMA, type    Unmovable      0      0      0      0      0      0      0      0      1      0      0 
Node    0, zone      DMA, type      Movable      0      0      0      0      0      0      0      0      0      1      3 
Node    0, zone      DMA, type  Reclaimable      0      0      0      0      0      0      0      0      0      0      0 
Node    0, zone      DMA, type   HighAtomic      0      0      0      0      0      0      0      0      0      0      0 
Node    0, zone      DMA, type      Isolate      0      0      0      0      0      0      0      0      0      0      0 
Node    0, zone   Normal, type    Unmovable      5      0      0      0      0      0      0      0      0      0      0 
Node    0, zone   Normal, type      Movable      2      2      1      0      0      0      0      0      0      0      1 
Node    0, zone   Normal, type  Reclaimable      0      0      0      0      0      0      0      0      0      0      0 
Node    0, zone   Normal, type   HighAtomic      0      0      0      0      0      0      0      0      0      0      0 
Node    0, zone   Normal, type      Isolate      0      0      0      0      0      0      0      0      0      0      0 

Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate 
Node 0, zone      DMA            1            7            0            0            0 
Node 0, zone   Normal          141         1241           90            0            0 
";

    #[test]
    fn buddyinfo_and_pagetypeinfo_read_back() {
        let mut s = parse_buddyinfo(BUDDYINFO).unwrap();
        add_pagetypeinfo(&mut s, PAGETYPEINFO).unwrap();
        let n = s.zone(0, ZoneType::Normal).unwrap();
        assert_eq!(n.free, vec![7, 2, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(n.free_pages(), 7 + 4 + 4 + 1024);
        assert_eq!(n.blocks, [141, 1241, 90, 0]);
        assert_eq!(n.free_by_type[0][0], 5);
        assert_eq!(n.free_by_type[1][10], 1);
        let d = s.zone(0, ZoneType::Dma).unwrap();
        assert_eq!(d.blocks, [1, 7, 0, 0]);
        assert_eq!(d.free_by_type[0][8], 1);
    }

    #[test]
    fn snapshot_series_with_times() {
        let text = format!(
            "# comment\n=== snapshot 1 time=100.5\n{BUDDYINFO}{PAGETYPEINFO}\
             === snapshot 2 time=?\n{BUDDYINFO}\
             === snapshot 3 time=101.500001\n{BUDDYINFO}\
             === end time=101.75\n{BUDDYINFO}{PAGETYPEINFO}=== zoneinfo\nNode 0, zone DMA\n=== vmstat\nnr_free_pages 1\n"
        );
        let s = Snapshots::parse(&text).unwrap();
        assert_eq!(s.seconds.len(), 2, "the one without a time is left out");
        assert_eq!(s.seconds[0].time_ns, 100_500_000_000);
        assert_eq!(s.seconds[1].time_ns, 101_500_001_000);
        assert!(s.seconds[1].zones[1].free_by_type.is_empty());
        let end = s.end.unwrap();
        assert_eq!(end.time_ns, 101_750_000_000);
        assert_eq!(end.zones[1].blocks[2], 90);
        assert_eq!(s.end_vmstat.as_deref(), Some("nr_free_pages 1\n"));
        assert!(s.end_zoneinfo.is_some());
    }

    #[test]
    fn bad_text_is_refused() {
        assert!(parse_buddyinfo("Node 0, zone Weird 1 2 3\n").is_err());
        assert!(parse_buddyinfo("Node 0, zone Normal 1 x 3\n").is_err());
        assert!(Snapshots::parse("=== snapshot 1\nNode 0, zone DMA 1\n").is_err());
        assert!(Snapshots::parse("=== mystery time=1.0\n").is_err());
        let mut s = Shape::default();
        assert!(add_pagetypeinfo(
            &mut s,
            "Free pages count per migrate type at order 0 1\nNode 0, zone Normal, kind X 1 2\n"
        )
        .is_err());
    }
}
