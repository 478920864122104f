//! Boot memory: the firmware's memory map from the Multiboot information, what
//! the kernel reserves inside RAM for itself, the RAM it declares absent (memory
//! that arrives later), and an early allocator over what is left (as Linux's
//! memblock).
//!
//! Built by the bootstrap processor before there is a heap, so everything here
//! lives in fixed-size arrays. The lists, all of whole pages:
//!
//! * `regions`: the BIOS (E820) map as the loader passed it: usable, reserved,
//!   ACPI reclaimable, ACPI NVS, defective; byte ranges, as given.
//! * `ram`: frames of the map's usable entries, trimmed inward to whole pages,
//!   without page 0 (the firmware's, and under an identity map a null pointer's
//!   target: Linux trims it too, so its DMA zone starts at frame 1), merged.
//! * `absent`: RAM the kernel treats as not there yet: holes of their zones,
//!   added later with `add_memory` (memory that arrives).
//! * `reserved`: what the kernel keeps inside RAM: the image, the boot
//!   information, the AP trampoline, the heap, the frame tables and their page
//!   tables. Present to the allocator, not managed by it (`Config::reserved`),
//!   until released; `released` lists what was given back after boot.
//! * `usable`: `ram - absent - reserved`: exactly the frames the allocator
//!   manages (at boot, and those released since).
//!
//! ```text
//!   ram:       [------------------------------------------------------)
//!   reserved:    [img]   [heap]           [tables]
//!   absent:                                          [ arrives later )
//!   usable:    [-)     [-)    [----------)        [-)
//! ```

use core::cell::Cell;

use multiboot::information::{MemoryManagement, MemoryType, Multiboot, PAddr, SIGNATURE_EAX};
use spin::Once;

use crate::boot;
use crate::consts::PAGE_BYTES;
use crate::serial::println;

/// The boot memory, final once what boot alone needed is released (set by the
/// bootstrap processor before the stress; read by the blocks' checks).
pub static BOOT: Once<BootMemory> = Once::new();

const MAX_REGIONS: usize = 64;
const MAX_RESERVED: usize = 32;
const MAX_RANGES: usize = 96;
const MAX_ABSENT: usize = 4;
const CMDLINE_BYTES: usize = 256;

/// A memory map entry's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// RAM the OS may use.
    Usable,
    /// Reserved by the firmware or a device.
    Reserved,
    /// ACPI tables, reclaimable once read.
    AcpiReclaimable,
    /// ACPI non-volatile storage.
    AcpiNvs,
    /// Bad RAM.
    Defective,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Usable => "usable",
            Kind::Reserved => "reserved",
            Kind::AcpiReclaimable => "ACPI data",
            Kind::AcpiNvs => "ACPI NVS",
            Kind::Defective => "unusable",
        }
    }
}

/// One entry of the firmware's map: bytes `[start, end)`.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Its type.
    pub kind: Kind,
}

/// How long the kernel keeps a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// For as long as the kernel runs.
    Kept,
    /// Until the kernel is up (the application processors started, the
    /// allocator built): then given to the allocator (`free_reserved_area`).
    Boot,
}

/// A range the kernel keeps for itself: bytes `[start, end)`, page aligned.
#[derive(Clone, Copy, Debug)]
pub struct Reservation {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// What it holds.
    pub what: &'static str,
    /// Whether it is released after boot.
    pub lifetime: Lifetime,
}

const NO_RESERVATION: Reservation = Reservation {
    start: 0,
    end: 0,
    what: "",
    lifetime: Lifetime::Kept,
};

/// Sorted, disjoint frame ranges `[start, end)` in a fixed array.
#[derive(Clone, Copy)]
pub struct Ranges {
    r: [(u64, u64); MAX_RANGES],
    len: usize,
}

impl Ranges {
    const fn new() -> Ranges {
        Ranges {
            r: [(0, 0); MAX_RANGES],
            len: 0,
        }
    }

    /// The ranges, sorted.
    pub fn as_slice(&self) -> &[(u64, u64)] {
        &self.r[..self.len]
    }

    fn push(&mut self, s: u64, e: u64) -> Result<(), Error> {
        if s >= e {
            return Ok(());
        }
        if self.len == MAX_RANGES {
            return Err("memory in more pieces than the kernel keeps");
        }
        self.r[self.len] = (s, e);
        self.len += 1;
        Ok(())
    }

    /// Sorts and merges touching or overlapping ranges.
    fn normalize(&mut self) {
        let n = self.len;
        self.r[..n].sort_unstable();
        let mut m = 0;
        for i in 0..n {
            let (s, e) = self.r[i];
            if m > 0 && self.r[m - 1].1 >= s {
                self.r[m - 1].1 = self.r[m - 1].1.max(e);
            } else {
                self.r[m] = (s, e);
                m += 1;
            }
        }
        self.len = m;
    }

    /// Removes `[cs, ce)` from every range.
    fn subtract(&mut self, cs: u64, ce: u64) -> Result<(), Error> {
        if cs >= ce {
            return Ok(());
        }
        let mut out = Ranges::new();
        for &(s, e) in self.as_slice() {
            out.push(s, e.min(cs))?;
            out.push(s.max(ce), e)?;
        }
        out.normalize();
        *self = out;
        Ok(())
    }

    /// Whether `[s, e)` lies inside one range.
    pub fn contains(&self, s: u64, e: u64) -> bool {
        let r = self.as_slice();
        let i = r.partition_point(|&(rs, _)| rs <= s);
        i > 0 && e <= r[i - 1].1
    }
}

/// The memory map, the kernel's reservations, and the usable frames they leave.
pub struct BootMemory {
    regions: [Region; MAX_REGIONS],
    nr_regions: usize,
    ram: Ranges,
    absent: [(u64, u64, &'static str); MAX_ABSENT],
    nr_absent: usize,
    reserved: [Reservation; MAX_RESERVED],
    nr_reserved: usize,
    released: [Reservation; MAX_RESERVED],
    nr_released: usize,
    usable: Ranges,
    cmdline: [u8; CMDLINE_BYTES],
    cmdline_len: usize,
}

/// Why the boot memory could not be read or kept.
pub type Error = &'static str;

/// The Multiboot parser's view of physical memory: the identity map, recording
/// every page it reads so that the boot information can be kept out of the
/// allocator until the kernel is done with it.
struct Identity {
    touched: [Cell<(u64, u64)>; 16],
    nr_touched: Cell<usize>,
    overflow: Cell<bool>,
}

impl Identity {
    fn touch(&self, addr: u64, len: usize) {
        let start = addr & !(PAGE_BYTES - 1);
        let end = (addr + len.max(1) as u64).next_multiple_of(PAGE_BYTES);
        let n = self.nr_touched.get();
        for t in &self.touched[..n] {
            let (s, e) = t.get();
            if start <= e && s <= end {
                t.set((s.min(start), e.max(end)));
                return;
            }
        }
        if n == self.touched.len() {
            self.overflow.set(true);
            return;
        }
        self.touched[n].set((start, end));
        self.nr_touched.set(n + 1);
    }
}

impl MemoryManagement for Identity {
    unsafe fn paddr_to_slice(&self, addr: PAddr, length: usize) -> Option<&'static [u8]> {
        if addr == 0 || addr.saturating_add(length as u64) > boot::IDENTITY_MAPPED_BYTES {
            return None;
        }
        self.touch(addr, length);
        // SAFETY: the address is identity mapped (checked against the mapped
        // range above) and the loader's information is never written.
        Some(unsafe { core::slice::from_raw_parts(addr as *const u8, length) })
    }

    unsafe fn allocate(&mut self, _length: usize) -> Option<(PAddr, &mut [u8])> {
        None
    }

    unsafe fn deallocate(&mut self, _addr: PAddr) {}
}

impl BootMemory {
    /// Reads the memory map and the command line from the Multiboot information
    /// at `info` (the loader passed `magic` in `%eax`), and reserves the image,
    /// the boot information and the trampoline page.
    ///
    /// # Errors
    /// Not booted by a Multiboot loader, no memory map, or more entries than the
    /// fixed arrays hold.
    #[link_section = ".init.text"]
    pub fn from_multiboot(magic: u32, info: u32) -> Result<BootMemory, Error> {
        if magic != SIGNATURE_EAX {
            return Err("not started by a Multiboot loader (bad magic in %eax)");
        }
        let mut identity = Identity {
            touched: [const { Cell::new((0, 0)) }; 16],
            nr_touched: Cell::new(0),
            overflow: Cell::new(false),
        };
        let mut bm = BootMemory {
            regions: [Region {
                start: 0,
                end: 0,
                kind: Kind::Reserved,
            }; MAX_REGIONS],
            nr_regions: 0,
            ram: Ranges::new(),
            absent: [(0, 0, ""); MAX_ABSENT],
            nr_absent: 0,
            reserved: [NO_RESERVATION; MAX_RESERVED],
            nr_reserved: 0,
            released: [NO_RESERVATION; MAX_RESERVED],
            nr_released: 0,
            usable: Ranges::new(),
            cmdline: [0; CMDLINE_BYTES],
            cmdline_len: 0,
        };
        {
            // SAFETY: `info` is the physical address the Multiboot loader passed
            // in `%ebx` (the magic says so), identity mapped; `Identity` returns
            // slices of it only within the mapped range.
            let mb = unsafe { Multiboot::from_ptr(u64::from(info), &mut identity) }
                .ok_or("no Multiboot information")?;
            let regions = mb
                .memory_regions()
                .ok_or("no memory map in the boot information")?;
            for r in regions {
                if bm.nr_regions == MAX_REGIONS {
                    return Err("more memory map entries than the kernel keeps");
                }
                let kind = match r.memory_type() {
                    MemoryType::Available => Kind::Usable,
                    MemoryType::ACPI => Kind::AcpiReclaimable,
                    MemoryType::NVS => Kind::AcpiNvs,
                    MemoryType::Defect => Kind::Defective,
                    MemoryType::Reserved => Kind::Reserved,
                };
                let start = r.base_address();
                let end = start.saturating_add(r.length());
                if end > start {
                    bm.regions[bm.nr_regions] = Region { start, end, kind };
                    bm.nr_regions += 1;
                }
            }
            // The command line is copied: its page is given back after boot.
            if let Some(line) = mb.command_line() {
                let n = line.len().min(CMDLINE_BYTES);
                bm.cmdline[..n].copy_from_slice(&line.as_bytes()[..n]);
                bm.cmdline_len = n;
            }
        }
        if identity.overflow.get() {
            return Err("boot information scattered over too many ranges");
        }
        bm.regions[..bm.nr_regions].sort_unstable_by_key(|r| r.start);
        for r in &bm.regions[..bm.nr_regions] {
            if r.kind == Kind::Usable {
                let s = r.start.div_ceil(PAGE_BYTES).max(1);
                let e = (r.end / PAGE_BYTES).min(boot::IDENTITY_MAPPED_BYTES / PAGE_BYTES);
                bm.ram.push(s, e)?;
            }
        }
        bm.ram.normalize();

        let (image_start, image_end) = boot::kernel_image();
        bm.reserve(
            image_start,
            image_end,
            "kernel image, stacks, page tables",
            Lifetime::Kept,
        )?;
        bm.reserve(
            boot::TRAMPOLINE_ADDR,
            boot::TRAMPOLINE_ADDR + PAGE_BYTES,
            "AP trampoline",
            Lifetime::Boot,
        )?;
        for t in &identity.touched[..identity.nr_touched.get()] {
            let (s, e) = t.get();
            bm.reserve(s, e, "boot information", Lifetime::Boot)?;
        }
        Ok(bm)
    }

    /// The kernel's command line (empty if there is none, or not UTF-8).
    pub fn cmdline(&self) -> &str {
        core::str::from_utf8(&self.cmdline[..self.cmdline_len]).unwrap_or("")
    }

    /// The firmware's map, by address.
    pub fn regions(&self) -> &[Region] {
        &self.regions[..self.nr_regions]
    }

    /// Frames of RAM, sorted and disjoint (page 0 left out).
    pub fn ram(&self) -> &[(u64, u64)] {
        self.ram.as_slice()
    }

    /// RAM declared absent: `(start_pfn, end_pfn, what)`.
    pub fn absent(&self) -> &[(u64, u64, &'static str)] {
        &self.absent[..self.nr_absent]
    }

    /// RAM less what is declared absent: the frames the zones count present.
    pub fn present(&self) -> Ranges {
        let mut p = self.ram;
        for &(s, e, _) in self.absent() {
            // Cannot fail: cutting one range out of sorted disjoint ranges adds
            // at most one piece, and `declare_absent` checked there was room.
            let _ = p.subtract(s, e);
        }
        p
    }

    /// The kernel's reservations still held, in the order they were made.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reserved[..self.nr_reserved]
    }

    /// Usable frame ranges `[start_pfn, end_pfn)`, sorted and disjoint: RAM,
    /// less what is absent and what the kernel holds.
    pub fn usable_frames(&self) -> &[(u64, u64)] {
        self.usable.as_slice()
    }

    /// The first frame of RAM and one past the last.
    pub fn frame_span(&self) -> Option<(u64, u64)> {
        let r = self.ram();
        Some((r.first()?.0, r.last()?.1))
    }

    /// Whether frames `[pfn, pfn + nr)` are all usable (see `usable_frames`).
    pub fn is_usable(&self, pfn: u64, nr: u64) -> bool {
        self.usable.contains(pfn, pfn + nr)
    }

    /// Keeps bytes `[start, end)` (rounded out to pages) from the allocator.
    ///
    /// # Errors
    /// More reservations, or more usable pieces, than the fixed arrays hold.
    pub fn reserve(
        &mut self,
        start: u64,
        end: u64,
        what: &'static str,
        lifetime: Lifetime,
    ) -> Result<(), Error> {
        if self.nr_reserved == MAX_RESERVED {
            return Err("more reservations than the kernel keeps");
        }
        self.reserved[self.nr_reserved] = Reservation {
            start: start & !(PAGE_BYTES - 1),
            end: end.next_multiple_of(PAGE_BYTES),
            what,
            lifetime,
        };
        self.nr_reserved += 1;
        self.recompute_usable()
    }

    /// Declares frames `[start_pfn, end_pfn)` of RAM absent: holes of their
    /// zone until the kernel adds them (`add_memory`).
    ///
    /// # Errors
    /// More absent ranges than the kernel keeps.
    pub fn declare_absent(
        &mut self,
        start_pfn: u64,
        end_pfn: u64,
        what: &'static str,
    ) -> Result<(), Error> {
        if self.nr_absent == MAX_ABSENT {
            return Err("more absent ranges than the kernel keeps");
        }
        self.absent[self.nr_absent] = (start_pfn, end_pfn, what);
        self.nr_absent += 1;
        self.recompute_usable()
    }

    /// Takes bytes `[start, end)` out of the reservations (they are the
    /// allocator's now) and records them as released under the name of the
    /// reservation they came from.
    ///
    /// # Errors
    /// More pieces than the fixed arrays hold.
    pub fn release(&mut self, start: u64, end: u64) -> Result<(), Error> {
        let mut kept = [NO_RESERVATION; MAX_RESERVED];
        let mut n = 0;
        let held = self.reserved;
        for r in &held[..self.nr_reserved] {
            let (cs, ce) = (start.max(r.start), end.min(r.end));
            if cs >= ce {
                kept[n] = *r;
                n += 1;
                continue;
            }
            if self.nr_released == MAX_RESERVED {
                return Err("more released ranges than the kernel keeps");
            }
            self.released[self.nr_released] = Reservation {
                start: cs,
                end: ce,
                ..*r
            };
            self.nr_released += 1;
            for (s, e) in [(r.start, cs), (ce, r.end)] {
                if s < e {
                    if n == MAX_RESERVED {
                        return Err("more reservations than the kernel keeps");
                    }
                    kept[n] = Reservation {
                        start: s,
                        end: e,
                        ..*r
                    };
                    n += 1;
                }
            }
        }
        self.reserved = kept;
        self.nr_reserved = n;
        self.recompute_usable()
    }

    /// Rebuilds `usable`: RAM less the absent ranges and the reservations.
    fn recompute_usable(&mut self) -> Result<(), Error> {
        let mut u = self.ram;
        for &(s, e, _) in self.absent() {
            u.subtract(s, e)?;
        }
        for r in self.reservations() {
            u.subtract(r.start / PAGE_BYTES, r.end / PAGE_BYTES)?;
        }
        self.usable = u;
        Ok(())
    }

    /// memblock's allocation: the highest `bytes` (whole pages, `align`-byte
    /// aligned) of usable frames inside one of `within` (frame ranges: a node's
    /// memory) and below the identity map's end, reserved as `what`. Returns its
    /// first byte.
    ///
    /// # Errors
    /// No usable range holds it, or the reservation arrays are full.
    pub fn alloc_top(
        &mut self,
        bytes: u64,
        align: u64,
        within: &[(u64, u64)],
        what: &'static str,
        lifetime: Lifetime,
    ) -> Result<u64, Error> {
        let pages = bytes.div_ceil(PAGE_BYTES);
        let align_pages = (align / PAGE_BYTES).max(1);
        let limit = boot::IDENTITY_MAPPED_BYTES / PAGE_BYTES;
        let mut best: Option<u64> = None;
        for &(us, ue) in self.usable_frames() {
            for &(ws, we) in within {
                let (s, e) = (us.max(ws), ue.min(we).min(limit));
                if e < s + pages {
                    continue;
                }
                let at = (e - pages) / align_pages * align_pages;
                if at >= s && best.is_none_or(|b| at > b) {
                    best = Some(at);
                }
            }
        }
        let at = best.ok_or("no usable memory left for an early allocation")?;
        self.reserve(at * PAGE_BYTES, (at + pages) * PAGE_BYTES, what, lifetime)?;
        Ok(at * PAGE_BYTES)
    }

    /// Prints the map as Linux's boot log does, then the reservations and the
    /// absent ranges.
    pub fn print(&self) {
        println!("BIOS memory map (Multiboot):");
        for r in self.regions() {
            println!(
                "  [mem {:#018x}-{:#018x}] {}",
                r.start,
                r.end - 1,
                r.kind.name()
            );
        }
        println!("reserved (present, not managed until released):");
        for r in self.reservations() {
            println!(
                "  [mem {:#018x}-{:#018x}] {} ({} KiB){}",
                r.start,
                r.end - 1,
                r.what,
                (r.end - r.start) >> 10,
                if r.lifetime == Lifetime::Boot {
                    ", released after boot"
                } else {
                    ""
                }
            );
        }
        for &(s, e, what) in self.absent() {
            println!(
                "absent (a hole of its zone until added): [mem {:#018x}-{:#018x}] {} ({} MiB)",
                s * PAGE_BYTES,
                e * PAGE_BYTES - 1,
                what,
                ((e - s) * PAGE_BYTES) >> 20
            );
        }
    }
}
