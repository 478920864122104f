//! The traced machine's zones: from its `/proc/zoneinfo`, the command line, or built in.
//!
//! Bottom layer, plain data. A `ZoneLayout` lists each zone's `start_pfn`, `spanned`,
//! `present` and `managed` pages as Linux reports them, and turns into a
//! `zonealloc::Config`.
//!
//! # Holes
//!
//! zonealloc knows frames that exist (`present`) and frames that do not (holes); it
//! has no "present but reserved" state. Linux's buddy allocator only ever holds
//! `managed` pages: `present - managed` are the memmap, the kernel image, memblock
//! reservations, which never reach the free lists. So by default
//! (`HoleModel::Managed`) a zone gets `spanned - managed` frames of hole, and with
//! `HoleModel::Present` only `spanned - present`. Where the real holes lie is not in
//! zoneinfo; the model puts them in one run **at the end of the zone**, which keeps
//! the populated part contiguous from `start_pfn` (the layout a zone map shows best)
//! and leaves every pageblock but the last whole. The zone ends with that last
//! pageblock: a hole past it would change nothing but the metadata to build.

use std::fmt;
use std::path::Path;

use serde::{Serialize, Serializer};
use zonealloc::{Config, NodeConfig, Pfn, ZoneConfig, ZoneType};

/// Frames per pageblock (order 9, as on the traced machines): trailing holes are cut
/// at this granularity.
const PAGEBLOCK_PAGES: u64 = 512;

/// Where zoneinfo's missing pages go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum HoleModel {
    /// Holes of `spanned - managed` pages: only what the buddy allocator manages.
    #[default]
    Managed,
    /// Holes of `spanned - present` pages: reserved pages become allocatable.
    Present,
}

/// One zone as `/proc/zoneinfo` describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneSpec {
    /// Node id.
    pub node: u16,
    /// Zone type.
    #[serde(serialize_with = "zone_name")]
    pub zone_type: ZoneType,
    /// `start_pfn`.
    pub start_pfn: u64,
    /// `spanned` pages.
    pub spanned: u64,
    /// `present` pages.
    pub present: u64,
    /// `managed` pages.
    pub managed: u64,
    /// Pages on each CPU's per-CPU lists when the zoneinfo was read (its pagesets'
    /// `count:`), one entry per CPU; empty when unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pcp_count: Vec<u64>,
    /// Each CPU's auto-tuned `high:` then, one entry per CPU; empty when unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pcp_high: Vec<u64>,
}

fn zone_name<S: Serializer>(t: &ZoneType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(t.name())
}

impl ZoneSpec {
    /// Frames that exist for zonealloc under `holes`.
    pub fn populated(&self, holes: HoleModel) -> u64 {
        match holes {
            HoleModel::Managed => self.managed.min(self.spanned),
            HoleModel::Present => self.present.min(self.spanned),
        }
    }

    /// The zonealloc zone: the populated frames from `start_pfn`, the missing ones as
    /// one hole at the end, cut at the end of the pageblock that holds the last
    /// populated frame. Frames past it would be hole only: they change no allocation
    /// (watermarks and per-CPU limits follow the managed pages) and would cost their
    /// metadata (4.98 M frames of the traced machine's Normal zone: most of a
    /// replay's start-up time).
    pub fn zone_config(&self, holes: HoleModel) -> ZoneConfig {
        let pop = self.populated(holes);
        let spanned = pop.next_multiple_of(PAGEBLOCK_PAGES).min(self.spanned);
        let z = ZoneConfig::new(self.zone_type, Pfn(self.start_pfn), spanned);
        if pop < spanned {
            z.with_hole(Pfn(self.start_pfn + pop), spanned - pop)
        } else {
            z
        }
    }
}

/// Why a layout was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LayoutError {}

/// The zones of a machine, node by node, lowest zone first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneLayout {
    /// Populated zones (spanned > 0).
    pub zones: Vec<ZoneSpec>,
    /// CPUs of the machine, when known (a zoneinfo's per-CPU pagesets).
    pub nr_cpus: Option<usize>,
    /// `min_free_kbytes`, when known: the sum of the zones' `min` watermarks in KiB
    /// (Linux spreads it over the zones by managed pages, so the sum gives it back).
    /// It sets the watermarks, and through the low watermark each per-CPU list's
    /// `high_min`. A kernel with THP raises it well above the default.
    pub min_free_kbytes: Option<u64>,
}

fn zone_type_named(name: &str) -> Option<ZoneType> {
    ZoneType::ALL
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(name))
}

impl ZoneLayout {
    /// The machine of `traces/linux-6.18-cargo-build` (Linux 6.18, x86-64, 2 CPUs),
    /// from its zoneinfo: DMA, DMA32 and Normal on node 0.
    pub fn linux_6_18_trace_machine() -> ZoneLayout {
        let z = |zone_type, start_pfn, spanned, present, managed, pcp: [u64; 2], high: [u64; 2]| {
            ZoneSpec {
                node: 0,
                zone_type,
                start_pfn,
                spanned,
                present,
                managed,
                pcp_count: pcp.to_vec(),
                pcp_high: high.to_vec(),
            }
        };
        ZoneLayout {
            zones: vec![
                z(ZoneType::Dma, 1, 4095, 3998, 3840, [0, 0], [0, 0]),
                z(
                    ZoneType::Dma32,
                    4096,
                    1_044_480,
                    782_336,
                    772_917,
                    [0, 0],
                    [6273, 6273],
                ),
                z(
                    ZoneType::Normal,
                    1_048_576,
                    5_505_024,
                    5_505_024,
                    524_288,
                    [3978, 3539],
                    [28_672, 14_528],
                ),
            ],
            nr_cpus: Some(2),
            // min 49 + 10037 + 6808 pages of 4 KiB.
            min_free_kbytes: Some(67_576),
        }
    }

    /// One Normal zone of `nr_pages` frames at `start_pfn`, no holes.
    pub fn single(zone_type: ZoneType, start_pfn: u64, nr_pages: u64) -> ZoneLayout {
        ZoneLayout {
            zones: vec![ZoneSpec {
                node: 0,
                zone_type,
                start_pfn,
                spanned: nr_pages,
                present: nr_pages,
                managed: nr_pages,
                pcp_count: Vec::new(),
                pcp_high: Vec::new(),
            }],
            nr_cpus: None,
            min_free_kbytes: None,
        }
    }

    /// Reads a `/proc/zoneinfo` file.
    ///
    /// # Errors
    /// I/O errors and what `from_zoneinfo_str` refuses.
    pub fn from_zoneinfo(path: &Path) -> Result<ZoneLayout, LayoutError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LayoutError(format!("{}: {e}", path.display())))?;
        ZoneLayout::from_zoneinfo_str(&text)
            .map_err(|e| LayoutError(format!("{}: {}", path.display(), e.0)))
    }

    /// Parses `/proc/zoneinfo` text: each `Node N, zone NAME` section's `spanned`,
    /// `present`, `managed` and `start_pfn`. Empty zones and zone types zonealloc does
    /// not have (`Device`) are left out.
    ///
    /// # Errors
    /// A section without one of the four values, or no populated zone.
    pub fn from_zoneinfo_str(text: &str) -> Result<ZoneLayout, LayoutError> {
        struct Section {
            node: u16,
            name: String,
            vals: [Option<u64>; 4],
            pcp_count: Vec<u64>,
            pcp_high: Vec<u64>,
            min: Option<u64>,
        }
        let mut sections: Vec<Section> = Vec::new();
        // `cpu: N` lines of the current section's pagesets; the machine's CPU count is
        // the most any zone lists.
        let (mut cpus, mut max_cpus) = (0usize, 0usize);
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with("cpu:") {
                cpus += 1;
                max_cpus = max_cpus.max(cpus);
                continue;
            }
            if let Some(rest) = t.strip_prefix("Node ") {
                let (n, z) = rest
                    .split_once(", zone")
                    .ok_or_else(|| LayoutError(format!("zoneinfo line {}: bad header", i + 1)))?;
                let node = n
                    .trim()
                    .parse()
                    .map_err(|_| LayoutError(format!("zoneinfo line {}: bad node", i + 1)))?;
                cpus = 0;
                sections.push(Section {
                    node,
                    name: z.trim().to_string(),
                    vals: [None; 4],
                    pcp_count: Vec::new(),
                    pcp_high: Vec::new(),
                    min: None,
                });
                continue;
            }
            let Some(cur) = sections.last_mut() else {
                continue;
            };
            let mut words = t.split_whitespace();
            let (Some(k), Some(v)) = (words.next(), words.next()) else {
                continue;
            };
            if k == "min" {
                cur.min = Some(
                    v.parse()
                        .map_err(|_| LayoutError(format!("zoneinfo line {}: bad min", i + 1)))?,
                );
                continue;
            }
            if k == "count:" && cpus > 0 {
                let v = v
                    .parse()
                    .map_err(|_| LayoutError(format!("zoneinfo line {}: bad count", i + 1)))?;
                cur.pcp_count.resize(cpus - 1, 0);
                cur.pcp_count.push(v);
                continue;
            }
            if k == "high:" && cpus > 0 {
                let v = v
                    .parse()
                    .map_err(|_| LayoutError(format!("zoneinfo line {}: bad high", i + 1)))?;
                cur.pcp_high.resize(cpus - 1, 0);
                cur.pcp_high.push(v);
                continue;
            }
            let slot = match k {
                "spanned" => 0,
                "present" => 1,
                "managed" => 2,
                "start_pfn:" => 3,
                _ => continue,
            };
            let v = v
                .parse()
                .map_err(|_| LayoutError(format!("zoneinfo line {}: bad number", i + 1)))?;
            cur.vals[slot] = Some(v);
        }
        let mut zones = Vec::new();
        // Sum of the populated zones' `min` watermarks, in pages.
        let mut min_pages = 0u64;
        for s in sections {
            let [Some(spanned), Some(present), Some(managed), start] = s.vals else {
                return Err(LayoutError(format!(
                    "zoneinfo: node {} zone {} lacks spanned/present/managed",
                    s.node, s.name
                )));
            };
            if spanned == 0 || managed == 0 {
                continue;
            }
            let Some(zone_type) = zone_type_named(&s.name) else {
                continue;
            };
            let start_pfn = start.ok_or_else(|| {
                LayoutError(format!("zoneinfo: zone {} has no start_pfn", s.name))
            })?;
            min_pages += s.min.unwrap_or(0);
            zones.push(ZoneSpec {
                node: s.node,
                zone_type,
                start_pfn,
                spanned,
                present,
                managed,
                pcp_count: s.pcp_count,
                pcp_high: s.pcp_high,
            });
        }
        if zones.is_empty() {
            return Err(LayoutError("zoneinfo: no populated zone".into()));
        }
        let nr_cpus = (max_cpus > 0).then_some(max_cpus);
        let min_free_kbytes = (min_pages > 0).then_some(min_pages * 4);
        Ok(ZoneLayout {
            zones,
            nr_cpus,
            min_free_kbytes,
        })
    }

    /// Parses a zone given on the command line:
    /// `[NODE/]TYPE:START_PFN:SPANNED[:PRESENT[:MANAGED]]`, e.g. `Normal:1048576:524288`
    /// or `0/DMA32:4096:1044480:782336:772917`. Numbers may be `0x` hex.
    ///
    /// # Errors
    /// A field that does not parse.
    pub fn parse_zone_arg(s: &str) -> Result<ZoneSpec, LayoutError> {
        let bad = |why: &str| LayoutError(format!("zone `{s}`: {why}"));
        let (node, rest) = match s.split_once('/') {
            Some((n, r)) => (n.parse().map_err(|_| bad("bad node"))?, r),
            None => (0, s),
        };
        let mut f = rest.split(':');
        let zone_type = f
            .next()
            .and_then(zone_type_named)
            .ok_or_else(|| bad("unknown zone type (DMA, DMA32, Normal, HighMem, Movable)"))?;
        let num = |x: Option<&str>| -> Result<Option<u64>, LayoutError> {
            match x {
                None => Ok(None),
                Some(v) => {
                    let r = match v.strip_prefix("0x") {
                        Some(h) => u64::from_str_radix(h, 16),
                        None => v.parse(),
                    };
                    r.map(Some).map_err(|_| bad("bad number"))
                }
            }
        };
        let start_pfn = num(f.next())?.ok_or_else(|| bad("no START_PFN"))?;
        let spanned = num(f.next())?.ok_or_else(|| bad("no SPANNED"))?;
        let present = num(f.next())?.unwrap_or(spanned);
        let managed = num(f.next())?.unwrap_or(present);
        if f.next().is_some() {
            return Err(bad("too many fields"));
        }
        Ok(ZoneSpec {
            node,
            zone_type,
            start_pfn,
            spanned,
            present,
            managed,
            pcp_count: Vec::new(),
            pcp_high: Vec::new(),
        })
    }

    /// The zone whose per-CPU lists held the most pages when the zoneinfo was read:
    /// its per-CPU `count:` and `high:` (empty when unknown).
    pub fn busiest_pcp(&self) -> (&[u64], &[u64]) {
        self.zones
            .iter()
            .max_by_key(|z| z.pcp_count.iter().sum::<u64>())
            .map_or((&[], &[]), |z| (&z.pcp_count, &z.pcp_high))
    }

    /// One past the last frame of the last zone (`None` without zones).
    pub fn end_pfn(&self) -> Option<u64> {
        self.zones.iter().map(|z| z.start_pfn + z.spanned).max()
    }

    /// Frames zonealloc will manage under `holes`.
    pub fn populated(&self, holes: HoleModel) -> u64 {
        self.zones.iter().map(|z| z.populated(holes)).sum()
    }

    /// The allocator configuration: these zones under `holes`, `nr_cpus` CPUs, and
    /// zonealloc's defaults (Linux's) for everything else.
    pub fn config(&self, holes: HoleModel, nr_cpus: usize) -> Config {
        let nr_nodes = self
            .zones
            .iter()
            .map(|z| z.node as usize + 1)
            .max()
            .unwrap_or(1);
        let mut nodes = vec![NodeConfig::default(); nr_nodes];
        let mut zones = self.zones.clone();
        zones.sort_by_key(|z| (z.node, z.zone_type));
        for z in &zones {
            nodes[z.node as usize].zones.push(z.zone_config(holes));
        }
        Config {
            nodes,
            nr_cpus: nr_cpus.max(1),
            min_free_kbytes: self.min_free_kbytes,
            ..Config::default()
        }
    }
}

impl fmt::Display for ZoneLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in &self.zones {
            writeln!(
                f,
                "  Node {}, zone {:>8}: start_pfn {:>8}  spanned {:>8}  present {:>8}  managed {:>8}",
                z.node,
                z.zone_type.name(),
                z.start_pfn,
                z.spanned,
                z.present,
                z.managed
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONEINFO: &str = "\
Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 96459
  pages free     3840
        min      49
        spanned  4095
        present  3998
        managed  3840
  pagesets
    cpu: 0
              count:    0
              high:     0
    cpu: 1
              count:    0
              high:     0
  start_pfn:           1
Node 0, zone    DMA32
  pages free     1
        min      10037
        spanned  1044480
        present  782336
        managed  772917
  pagesets
    cpu: 0
              count:    0
              high:     6273
    cpu: 1
              count:    0
              high:     6273
  start_pfn:           4096
Node 0, zone   Normal
        min      6808
        spanned  5505024
        present  5505024
        managed  524288
  pagesets
    cpu: 0
              count:    3978
              high:     28672
    cpu: 1
              count:    3539
              high:     14528
  start_pfn:           1048576
Node 0, zone  Movable
        spanned  0
        present  0
        managed  0
  start_pfn:           0
Node 0, zone   Device
        spanned  0
        present  0
        managed  0
  start_pfn:           0
";

    #[test]
    fn zoneinfo_gives_the_built_in_machine() {
        let l = ZoneLayout::from_zoneinfo_str(ZONEINFO).unwrap();
        assert_eq!(l, ZoneLayout::linux_6_18_trace_machine());
    }

    #[test]
    fn zonealloc_s_own_zoneinfo_reads_back_with_a_cma_area() {
        use zonealloc::{Config, ZoneAllocator};
        let za = ZoneAllocator::new(Config {
            nr_cpus: 2,
            ..Config::with_bytes(64 << 20).with_cma("dma", Pfn(8192), 4096)
        })
        .unwrap();
        let text = za.zoneinfo().to_string();
        assert!(text.contains("\n        cma      4096\n"));
        let l = ZoneLayout::from_zoneinfo_str(&text).unwrap();
        assert_eq!(l.nr_cpus, Some(2));
        let z = &l.zones[0];
        assert_eq!(
            (z.zone_type, z.start_pfn, z.spanned),
            (ZoneType::Normal, 0, 16384)
        );
        assert_eq!((z.present, z.managed), (16384, 16384));
    }

    #[test]
    fn holes_go_at_the_end_of_each_zone() {
        let l = ZoneLayout::linux_6_18_trace_machine();
        let c = l.config(HoleModel::Managed, 2);
        c.validate().unwrap();
        // Normal: 524,288 managed frames, a whole number of pageblocks: the
        // trailing 4.98 M hole frames are cut, none is left.
        let normal = &c.nodes[0].zones[2];
        assert_eq!(normal.spanned_pages, 524_288);
        assert!(normal.holes.is_empty());
        // DMA32: 772,917 managed frames; the hole runs to the end of their last
        // pageblock.
        let dma32 = &c.nodes[0].zones[1];
        assert_eq!(dma32.spanned_pages, 773_120);
        assert_eq!(dma32.holes, vec![(Pfn(4096 + 772_917), 203)]);
        let p = l.config(HoleModel::Present, 2);
        assert!(p.nodes[0].zones[2].holes.is_empty());
        assert_eq!(l.populated(HoleModel::Managed), 3840 + 772_917 + 524_288);
    }

    #[test]
    fn zone_arguments() {
        let z = ZoneLayout::parse_zone_arg("Normal:0x100000:524288").unwrap();
        assert_eq!(
            (z.start_pfn, z.spanned, z.managed),
            (0x100000, 524_288, 524_288)
        );
        let z = ZoneLayout::parse_zone_arg("1/dma32:4096:1044480:782336:772917").unwrap();
        assert_eq!(
            (z.node, z.zone_type, z.managed),
            (1, ZoneType::Dma32, 772_917)
        );
        assert!(ZoneLayout::parse_zone_arg("Weird:1:2").is_err());
        assert!(ZoneLayout::parse_zone_arg("Normal:1").is_err());
    }
}
