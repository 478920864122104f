//! The kernel's page layout when a trace starts: `/proc/kpageflags` and
//! `/proc/kpagecount` as `traces/capture.sh` stores them (`layout.txt.xz`), and what
//! they tell about each frame, each buddy block and each pageblock.
//!
//! Bottom layer, plain data: reads a file, answers questions about frames. The warm
//! start (`start`) turns the answers into a zonealloc state.
//!
//! # The file
//!
//! Text, xz-compressed or plain: `#` comments, `begin_time`/`end_time` (the trace
//! clock, seconds, when the read began and ended), then per zone a line
//! `zone NAME START_PFN FRAMES` followed by runs `LENGTH MASK` (hex) that cover its
//! `FRAMES` frames from `START_PFN` on. A mask holds the kpageflags bits the replay
//! reads ([`bits`]) and whether kpagecount was non-zero. Frames of a zone past its
//! `FRAMES` were not read: the capture stops a section (128 MiB) into zeros past the
//! zone's managed pages, where a kernel that initialises its memory map lazily has
//! not initialised it yet.
//!
//! # What a frame's flags tell
//!
//! | mask | class | exact? |
//! |---|---|---|
//! | `BUDDY` | free, on the buddy lists (Linux 6.x flags every page of a free block, not only its head) | exact |
//! | `NOPAGE`, `OFFLINE`, `RESERVED` | not the allocator's (a hole, offline, memblock-reserved) | exact |
//! | `SLAB`, `PGTABLE` | allocated, kernel memory: tells an unmovable (or reclaimable) pageblock | exact that it is allocated; the type is a hint |
//! | `LRU`, `ANON`, `SWAPBACKED`, `UNEVICTABLE`, mapped | allocated, user memory: tells a movable pageblock | likewise |
//! | no flag, count 0 | *blank*: on a per-CPU list, or allocated by the kernel with nothing to show for it (vmalloc, page_frag, a buffer), or memory not initialised yet | inferred from the trace |
//! | other flags | allocated, no tell | exact that it is allocated |
//!
//! The buddy blocks are exact too, though their orders are not in the file: a free
//! block's buddy is never wholly free in a consistent snapshot (the two would have
//! merged), so the free frames split in one way only, into the largest naturally
//! aligned blocks (`free_blocks`). Where the snapshot is not consistent (the read
//! takes about a second, and the machine runs on) the split is what the kernel's
//! next merge would make of it.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::Serialize;

/// The bits of a layout mask (`traces/capture.sh` writes them).
pub mod bits {
    /// kpageflags `BUDDY`: the frame is in a free block on the buddy lists.
    pub const BUDDY: u16 = 0x1;
    /// kpageflags `NOPAGE`: no memory behind the frame.
    pub const NOPAGE: u16 = 0x2;
    /// kpageflags `OFFLINE`: offlined (memory hot-unplug, a balloon).
    pub const OFFLINE: u16 = 0x4;
    /// kpageflags `RESERVED` (bit 32): memblock-reserved, never the allocator's.
    pub const RESERVED: u16 = 0x8;
    /// kpageflags `SLAB`.
    pub const SLAB: u16 = 0x10;
    /// kpageflags `PGTABLE`.
    pub const PGTABLE: u16 = 0x20;
    /// kpageflags `LRU`.
    pub const LRU: u16 = 0x40;
    /// kpageflags `ANON`.
    pub const ANON: u16 = 0x80;
    /// kpageflags `SWAPBACKED`.
    pub const SWAPBACKED: u16 = 0x100;
    /// kpageflags `COMPOUND_HEAD`.
    pub const HEAD: u16 = 0x200;
    /// kpageflags `COMPOUND_TAIL`.
    pub const TAIL: u16 = 0x400;
    /// kpageflags `UNEVICTABLE`.
    pub const UNEVICTABLE: u16 = 0x800;
    /// kpagecount non-zero: mapped into some process.
    pub const MAPPED: u16 = 0x1000;
    /// Every bit a layout file may use.
    pub const ALL: u16 = 0x1FFF;
    /// Not in files: set by the warm start on a frame the trace shows allocated
    /// after the layout read it (see `start`); an allocation with no tell.
    pub const ALLOCATED_SINCE: u16 = 0x4000;
}

/// What one frame's mask says (see the module documentation's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum FrameClass {
    /// Not the allocator's: a hole, offline, reserved, or not read.
    Absent,
    /// Free on the buddy lists.
    Free,
    /// No flag and not mapped: a per-CPU list page, an untold allocation, or memory
    /// not initialised yet.
    Blank,
    /// Allocated, kernel memory (slab, page table).
    Unmovable,
    /// Allocated, user memory (LRU, anonymous, swap-backed, mapped).
    Movable,
    /// Allocated, no tell.
    Other,
}

impl FrameClass {
    /// The class of a mask.
    pub fn of(mask: u16) -> FrameClass {
        use bits::*;
        if mask & (NOPAGE | OFFLINE | RESERVED) != 0 {
            FrameClass::Absent
        } else if mask & BUDDY != 0 {
            FrameClass::Free
        } else if mask & (SLAB | PGTABLE) != 0 {
            FrameClass::Unmovable
        } else if mask & (LRU | ANON | SWAPBACKED | UNEVICTABLE | MAPPED) != 0 {
            FrameClass::Movable
        } else if mask == 0 {
            FrameClass::Blank
        } else {
            FrameClass::Other
        }
    }
}

/// Why a layout file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KpageError(pub String);

impl fmt::Display for KpageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KpageError {}

/// One zone's frames as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutZone {
    /// The zone's name (`DMA`, `DMA32`, `Normal`, ...).
    pub name: String,
    /// Its first frame.
    pub start_pfn: u64,
    /// One mask per frame read, from `start_pfn` on.
    pub masks: Vec<u16>,
}

impl LayoutZone {
    /// One past the last frame read.
    pub fn end_read(&self) -> u64 {
        self.start_pfn + self.masks.len() as u64
    }

    /// The mask of `pfn`, `None` outside what was read.
    #[inline]
    pub fn mask(&self, pfn: u64) -> Option<u16> {
        let i = pfn.checked_sub(self.start_pfn)?;
        self.masks.get(usize::try_from(i).ok()?).copied()
    }

    /// The class of `pfn` (`Absent` outside what was read).
    pub fn class(&self, pfn: u64) -> FrameClass {
        self.mask(pfn).map_or(FrameClass::Absent, FrameClass::of)
    }

    /// One past the last frame read that is not blank: where the initialised part
    /// of a lazily initialised zone ends (the frames past it read as zeros).
    pub fn end_of_content(&self) -> u64 {
        let last = self.masks.iter().rposition(|&m| m != 0);
        self.start_pfn + last.map_or(0, |i| i as u64 + 1)
    }

    /// The free buddy blocks, `(first frame, order)`, ascending: each run of free
    /// frames split into the largest naturally aligned blocks of at most
    /// `max_order` (see the module documentation for why the split is the kernel's).
    pub fn free_blocks(&self, max_order: u8) -> Vec<(u64, u8)> {
        let mut out = Vec::new();
        let mut i = 0;
        let n = self.masks.len();
        while i < n {
            if FrameClass::of(self.masks[i]) != FrameClass::Free {
                i += 1;
                continue;
            }
            let run_start = i;
            while i < n && FrameClass::of(self.masks[i]) == FrameClass::Free {
                i += 1;
            }
            let (mut p, end) = (self.start_pfn + run_start as u64, self.start_pfn + i as u64);
            while p < end {
                let align = if p == 0 { 63 } else { p.trailing_zeros() };
                let fit = 63 - (end - p).leading_zeros();
                let order = align.min(fit).min(u32::from(max_order)) as u8;
                out.push((p, order));
                p += 1u64 << order;
            }
        }
        out
    }
}

/// A layout file: the frames of each zone when the trace started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageLayout {
    /// When the read began, trace clock, ns.
    pub begin_ns: Option<u64>,
    /// When it ended, trace clock, ns: the replay starts here.
    pub end_ns: Option<u64>,
    /// The zones, as listed.
    pub zones: Vec<LayoutZone>,
}

impl PageLayout {
    /// When `pfn` was read, trace clock, ns: the read went through the zones in
    /// order at a steady pace, so a frame's time is interpolated from its place
    /// among all frames read. `None` without both times or outside what was read.
    pub fn read_time(&self, pfn: u64) -> Option<u64> {
        let (b, e) = (self.begin_ns?, self.end_ns?);
        let total: u64 = self.zones.iter().map(|z| z.masks.len() as u64).sum();
        let mut before = 0u64;
        for z in &self.zones {
            if z.mask(pfn).is_some() {
                let i = before + (pfn - z.start_pfn);
                let span = u128::from(e.saturating_sub(b));
                return Some(b + (span * u128::from(i) / u128::from(total.max(1))) as u64);
            }
            before += z.masks.len() as u64;
        }
        None
    }

    /// Sets the mask of `pfn` (nothing outside what was read).
    pub fn set_mask(&mut self, pfn: u64, mask: u16) {
        for z in &mut self.zones {
            if let Some(i) = pfn.checked_sub(z.start_pfn) {
                if let Some(m) = z.masks.get_mut(i as usize) {
                    *m = mask;
                    return;
                }
            }
        }
    }

    /// Reads a layout file, xz-compressed or plain.
    ///
    /// # Errors
    /// I/O, decompression, and what `parse` refuses; each names the file.
    pub fn read(path: &Path) -> Result<PageLayout, KpageError> {
        let err = |e: String| KpageError(format!("{}: {e}", path.display()));
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        let text = if bytes.starts_with(&[0xFD, b'7', b'z', b'X', b'Z', 0]) {
            let mut s = String::new();
            liblzma::read::XzDecoder::new(&bytes[..])
                .read_to_string(&mut s)
                .map_err(|e| err(e.to_string()))?;
            s
        } else {
            String::from_utf8(bytes).map_err(|_| err("not text".into()))?
        };
        PageLayout::parse(&text).map_err(|e| err(e.0))
    }

    /// Parses the text of a layout file (see the module documentation).
    ///
    /// # Errors
    /// A line that does not parse, a run before any `zone` line, a zone whose runs
    /// do not add up to its frames, a mask with bits the format does not have.
    pub fn parse(text: &str) -> Result<PageLayout, KpageError> {
        let mut l = PageLayout {
            begin_ns: None,
            end_ns: None,
            zones: Vec::new(),
        };
        // Frames each zone was declared with.
        let mut declared: Vec<u64> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let bad = |why: &str| KpageError(format!("line {}: {why}: {line}", i + 1));
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let w: Vec<&str> = t.split_whitespace().collect();
            match w[0] {
                "begin_time" | "end_time" => {
                    let ns = w.get(1).and_then(|s| crate::parse::seconds_to_ns(s));
                    if w.get(1) != Some(&"?") && ns.is_none() {
                        return Err(bad("bad time"));
                    }
                    if w[0] == "begin_time" {
                        l.begin_ns = ns;
                    } else {
                        l.end_ns = ns;
                    }
                }
                "zone" => {
                    let [_, name, start, n] = w[..] else {
                        return Err(bad("want `zone NAME START_PFN FRAMES`"));
                    };
                    let start = start.parse().map_err(|_| bad("bad start pfn"))?;
                    let n: u64 = n.parse().map_err(|_| bad("bad frame count"))?;
                    if let (Some(z), Some(&d)) = (l.zones.last(), declared.last()) {
                        if z.masks.len() as u64 != d {
                            return Err(bad("the previous zone's runs do not cover it"));
                        }
                    }
                    l.zones.push(LayoutZone {
                        name: name.to_string(),
                        start_pfn: start,
                        masks: Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(1 << 26)),
                    });
                    declared.push(n);
                }
                _ => {
                    let [len, mask] = w[..] else {
                        return Err(bad("want `LENGTH MASK`"));
                    };
                    let len: u64 = len.parse().map_err(|_| bad("bad run length"))?;
                    let mask = u16::from_str_radix(mask, 16).map_err(|_| bad("bad mask"))?;
                    if mask & !bits::ALL != 0 {
                        return Err(bad("unknown mask bits"));
                    }
                    let (Some(z), Some(&d)) = (l.zones.last_mut(), declared.last()) else {
                        return Err(bad("a run before any zone"));
                    };
                    if z.masks.len() as u64 + len > d {
                        return Err(bad("runs past the zone's frames"));
                    }
                    z.masks.resize(z.masks.len() + len as usize, mask);
                }
            }
        }
        if let (Some(z), Some(&d)) = (l.zones.last(), declared.last()) {
            if z.masks.len() as u64 != d {
                return Err(KpageError(format!(
                    "zone {}: runs cover {} of its {d} frames",
                    z.name,
                    z.masks.len()
                )));
            }
        }
        if l.zones.is_empty() {
            return Err(KpageError("no zone".into()));
        }
        Ok(l)
    }

    /// The zone read under `name`.
    pub fn zone(&self, name: &str) -> Option<&LayoutZone> {
        self.zones
            .iter()
            .find(|z| z.name.eq_ignore_ascii_case(name))
    }

    /// The class of `pfn` in whichever zone holds it.
    pub fn class(&self, pfn: u64) -> FrameClass {
        self.zones
            .iter()
            .find_map(|z| z.mask(pfn))
            .map_or(FrameClass::Absent, FrameClass::of)
    }
}

/// What a pageblock's frames were when the trace started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Census {
    /// Free (buddy) frames.
    pub free: u32,
    /// Blank frames.
    pub blank: u32,
    /// Frames with an unmovable tell (slab, page table).
    pub unmovable: u32,
    /// Frames with a movable tell.
    pub movable: u32,
    /// Other allocated frames.
    pub other: u32,
    /// Frames that are not the allocator's.
    pub absent: u32,
}

impl Census {
    /// Counts the frames `[first, first + n)` of `zone`.
    pub fn of(zone: &LayoutZone, first: u64, n: u64) -> Census {
        let mut c = Census::default();
        for p in first..first + n {
            match zone.class(p) {
                FrameClass::Absent => c.absent += 1,
                FrameClass::Free => c.free += 1,
                FrameClass::Blank => c.blank += 1,
                FrameClass::Unmovable => c.unmovable += 1,
                FrameClass::Movable => c.movable += 1,
                FrameClass::Other => c.other += 1,
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout of one zone from its masks.
    fn zone(start: u64, masks: &[(u64, u16)]) -> LayoutZone {
        let mut z = LayoutZone {
            name: "Normal".into(),
            start_pfn: start,
            masks: Vec::new(),
        };
        for &(n, m) in masks {
            z.masks.resize(z.masks.len() + n as usize, m);
        }
        z
    }

    #[test]
    fn parses_zones_and_runs() {
        let text = "# a comment\nbegin_time 12.000001\nend_time 13.5\n\
                    zone DMA 1 4\n3 8\n1 1\nzone Normal 16 8\n4 1\n2 0\n2 50\n";
        let l = PageLayout::parse(text).unwrap();
        assert_eq!(l.begin_ns, Some(12_000_001_000));
        assert_eq!(l.end_ns, Some(13_500_000_000));
        assert_eq!(l.zones.len(), 2);
        assert_eq!(l.zones[0].masks, vec![8, 8, 8, 1]);
        let n = l.zone("normal").unwrap();
        assert_eq!(n.start_pfn, 16);
        assert_eq!(n.class(16), FrameClass::Free);
        assert_eq!(n.class(20), FrameClass::Blank);
        assert_eq!(
            n.class(22),
            FrameClass::Unmovable,
            "0x50: SLAB | LRU, slab first"
        );
        assert_eq!(n.class(24), FrameClass::Absent, "past what was read");
        assert_eq!(l.class(1), FrameClass::Absent, "reserved");
        assert_eq!(l.class(4), FrameClass::Free);
        assert_eq!(n.end_of_content(), 24);
    }

    #[test]
    fn refuses_what_does_not_add_up() {
        for bad in [
            "zone Normal 0 4\n3 1\n",               // runs short of the zone
            "zone Normal 0 4\n5 1\n",               // runs past it
            "4 1\n",                                // no zone
            "zone Normal 0 4\n4 8000\n",            // unknown bits
            "zone Normal 0 4\n4 zz\n",              // not hex
            "zone Normal 0\n",                      // short zone line
            "zone DMA 0 2\n1 1\nzone N 2 2\n2 1\n", // first zone short
            "begin_time soon\nzone N 0 1\n1 1\n",
            "",
        ] {
            assert!(PageLayout::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn classes_follow_the_table() {
        use bits::*;
        assert_eq!(FrameClass::of(0), FrameClass::Blank);
        assert_eq!(FrameClass::of(BUDDY), FrameClass::Free);
        assert_eq!(FrameClass::of(BUDDY | RESERVED), FrameClass::Absent);
        assert_eq!(FrameClass::of(PGTABLE), FrameClass::Unmovable);
        assert_eq!(FrameClass::of(MAPPED), FrameClass::Movable);
        assert_eq!(FrameClass::of(ANON | HEAD), FrameClass::Movable);
        assert_eq!(FrameClass::of(TAIL), FrameClass::Other);
    }

    #[test]
    fn free_frames_split_into_the_largest_aligned_blocks() {
        use bits::BUDDY;
        // Frames 16..40 free but 21; 40.. allocated.
        let z = zone(16, &[(5, BUDDY), (1, 0x40), (18, BUDDY), (8, 0x40)]);
        assert_eq!(
            z.free_blocks(10),
            vec![(16, 2), (20, 0), (22, 1), (24, 3), (32, 3)]
        );
        // The same run under a max order of 2.
        assert_eq!(
            z.free_blocks(2),
            vec![
                (16, 2),
                (20, 0),
                (22, 1),
                (24, 2),
                (28, 2),
                (32, 2),
                (36, 2)
            ]
        );
        // Frame 0 counts as aligned to every order.
        let z0 = zone(0, &[(8, BUDDY), (1, 0)]);
        assert_eq!(z0.free_blocks(10), vec![(0, 3)]);
    }

    #[test]
    fn census_counts_each_class() {
        use bits::*;
        let z = zone(0, &[(2, BUDDY), (1, 0), (1, SLAB), (3, LRU), (1, TAIL)]);
        let c = Census::of(&z, 0, 10);
        assert_eq!(
            (c.free, c.blank, c.unmovable, c.movable, c.other, c.absent),
            (2, 1, 1, 3, 1, 2)
        );
    }
}
