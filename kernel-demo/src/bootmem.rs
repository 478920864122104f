//! Boot memory: the firmware's memory map from the Multiboot information, the
//! ranges the kernel itself uses, and what is left for the page allocator.
//!
//! Built by the bootstrap processor before there is a heap, so everything here
//! lives in fixed-size arrays. Three lists:
//!
//! * `regions`: the BIOS (E820) map as the loader passed it: usable, reserved,
//!   ACPI reclaimable, ACPI NVS, defective; byte ranges, as given.
//! * `reserved`: what the kernel keeps for itself inside usable RAM: the image
//!   (code, data, bss with its stacks and page tables), the boot information, the
//!   AP trampoline, the heap, and page 0 (firmware-owned, as Linux treats it,
//!   and under an identity map a null pointer's target).
//! * `usable`: frame ranges `[start_pfn, end_pfn)` of usable RAM, whole pages
//!   only, less every reservation: exactly the frames the allocator may hand out.

use core::cell::Cell;

use multiboot::information::{MemoryManagement, MemoryType, Multiboot, PAddr, SIGNATURE_EAX};

use crate::boot;

/// Bytes in a page frame.
pub const PAGE_BYTES: u64 = 4096;

const MAX_REGIONS: usize = 64;
const MAX_RESERVED: usize = 32;
const MAX_USABLE: usize = 96;

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

/// A range the kernel keeps for itself: bytes `[start, end)`, page aligned.
#[derive(Clone, Copy, Debug)]
pub struct Reservation {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// What it holds.
    pub what: &'static str,
}

/// The memory map, the kernel's reservations, and the usable frames they leave.
pub struct BootMemory {
    regions: [Region; MAX_REGIONS],
    nr_regions: usize,
    reserved: [Reservation; MAX_RESERVED],
    nr_reserved: usize,
    usable: [(u64, u64); MAX_USABLE],
    nr_usable: usize,
}

/// Why the boot memory could not be read or kept.
pub type Error = &'static str;

/// The Multiboot parser's view of physical memory: the identity map, recording
/// every page it reads so that the boot information can be kept out of the
/// allocator.
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
    /// Reads the memory map from the Multiboot information at `info` (the loader
    /// passed `magic` in `%eax`), and reserves the image, the boot information,
    /// the trampoline page and page 0.
    ///
    /// # Errors
    /// Not booted by a Multiboot loader, no memory map, or more entries than the
    /// fixed arrays hold.
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
            reserved: [Reservation {
                start: 0,
                end: 0,
                what: "",
            }; MAX_RESERVED],
            nr_reserved: 0,
            usable: [(0, 0); MAX_USABLE],
            nr_usable: 0,
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
            // Read the command line too, so its bytes count as touched.
            let _ = mb.command_line();
        }
        if identity.overflow.get() {
            return Err("boot information scattered over too many ranges");
        }
        bm.regions[..bm.nr_regions].sort_unstable_by_key(|r| r.start);

        let (image_start, image_end) = boot::kernel_image();
        bm.reserve(0, PAGE_BYTES, "page 0 (firmware, null)")?;
        bm.reserve(image_start, image_end, "kernel image, stacks, page tables")?;
        bm.reserve(
            boot::TRAMPOLINE_ADDR,
            boot::TRAMPOLINE_ADDR + PAGE_BYTES,
            "AP trampoline",
        )?;
        for t in &identity.touched[..identity.nr_touched.get()] {
            let (s, e) = t.get();
            bm.reserve(s, e, "boot information")?;
        }
        Ok(bm)
    }

    /// The firmware's map, by address.
    pub fn regions(&self) -> &[Region] {
        &self.regions[..self.nr_regions]
    }

    /// The kernel's reservations, in the order they were made.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reserved[..self.nr_reserved]
    }

    /// Usable frame ranges `[start_pfn, end_pfn)`, sorted and disjoint.
    pub fn usable_frames(&self) -> &[(u64, u64)] {
        &self.usable[..self.nr_usable]
    }

    /// The first usable frame and one past the last.
    pub fn frame_span(&self) -> Option<(u64, u64)> {
        let u = self.usable_frames();
        Some((u.first()?.0, u.last()?.1))
    }

    /// Usable frames in all.
    pub fn nr_usable_frames(&self) -> u64 {
        self.usable_frames().iter().map(|&(s, e)| e - s).sum()
    }

    /// Whether frames `[pfn, pfn + nr)` are all usable RAM outside every
    /// reservation.
    pub fn is_usable(&self, pfn: u64, nr: u64) -> bool {
        let u = self.usable_frames();
        // The last range starting at or before `pfn`.
        let i = u.partition_point(|&(s, _)| s <= pfn);
        i > 0 && pfn + nr <= u[i - 1].1
    }

    /// Keeps bytes `[start, end)` (rounded out to pages) from the allocator.
    ///
    /// # Errors
    /// More reservations, or more usable pieces, than the fixed arrays hold.
    pub fn reserve(&mut self, start: u64, end: u64, what: &'static str) -> Result<(), Error> {
        if self.nr_reserved == MAX_RESERVED {
            return Err("more reservations than the kernel keeps");
        }
        self.reserved[self.nr_reserved] = Reservation {
            start: start & !(PAGE_BYTES - 1),
            end: end.next_multiple_of(PAGE_BYTES),
            what,
        };
        self.nr_reserved += 1;
        self.recompute_usable()
    }

    /// Rebuilds `usable` from the map and the reservations: usable regions
    /// trimmed inward to whole pages, each reservation cut out.
    fn recompute_usable(&mut self) -> Result<(), Error> {
        let mut out = [(0u64, 0u64); MAX_USABLE];
        let mut n = 0;
        for r in &self.regions[..self.nr_regions] {
            if r.kind != Kind::Usable {
                continue;
            }
            let s = r.start.div_ceil(PAGE_BYTES);
            let e = (r.end / PAGE_BYTES).min(boot::IDENTITY_MAPPED_BYTES / PAGE_BYTES);
            if s >= e {
                continue;
            }
            if n == MAX_USABLE {
                return Err("usable RAM in more pieces than the kernel keeps");
            }
            out[n] = (s, e);
            n += 1;
        }
        for res in &self.reserved[..self.nr_reserved] {
            let (rs, re) = (res.start / PAGE_BYTES, res.end / PAGE_BYTES);
            let mut next = [(0u64, 0u64); MAX_USABLE];
            let mut m = 0;
            for &(s, e) in &out[..n] {
                for piece in [(s, e.min(rs)), (s.max(re), e)] {
                    if piece.0 < piece.1 {
                        if m == MAX_USABLE {
                            return Err("usable RAM in more pieces than the kernel keeps");
                        }
                        next[m] = piece;
                        m += 1;
                    }
                }
            }
            out = next;
            n = m;
        }
        out[..n].sort_unstable();
        // Adjacent firmware entries of usable RAM read as one range.
        let mut merged = 0;
        for i in 0..n {
            if merged > 0 && out[merged - 1].1 == out[i].0 {
                out[merged - 1].1 = out[i].1;
            } else {
                out[merged] = out[i];
                merged += 1;
            }
        }
        self.usable = out;
        self.nr_usable = merged;
        Ok(())
    }

    /// The highest `bytes` (page aligned) of usable RAM that fit in one usable
    /// range below `limit`: where memblock would place an early allocation.
    pub fn highest_free(&self, bytes: u64, limit: u64) -> Option<u64> {
        let pages = bytes.div_ceil(PAGE_BYTES);
        let limit_pfn = limit / PAGE_BYTES;
        self.usable_frames().iter().rev().find_map(|&(s, e)| {
            let e = e.min(limit_pfn);
            (e >= s + pages).then(|| (e - pages) * PAGE_BYTES)
        })
    }

    /// Prints the map as Linux's boot log does, then the reservations.
    pub fn print(&self) {
        crate::println!("BIOS memory map (Multiboot):");
        for r in self.regions() {
            crate::println!(
                "  [mem {:#018x}-{:#018x}] {}",
                r.start,
                r.end - 1,
                r.kind.name()
            );
        }
        crate::println!("kept from the allocator (holes):");
        for r in self.reservations() {
            crate::println!(
                "  [mem {:#018x}-{:#018x}] {} ({} KiB)",
                r.start,
                r.end - 1,
                r.what,
                (r.end - r.start) >> 10
            );
        }
    }
}
