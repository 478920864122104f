//! The allocator's frame tables in their own address space, as Linux's
//! vmemmap: `zonealloc::MemMap` over page tables the kernel builds.
//!
//! zonealloc lays each zone's frame table (16 bytes a frame) out as one run of
//! address space and asks its `MemMap` for two things: `reserve` a run that
//! reads as zeroes (a hole's state), and `populate` the parts of it that hold
//! present memory (whole memory sections) with writable memory. Here:
//!
//! * **reserve** takes the next run of `[VMEMMAP_START, +512 GiB)` (one PML4
//!   entry of the kernel's page tables, shared by every CPU), 2 MiB aligned,
//!   and points each of its page-directory entries at one shared page table
//!   whose 512 entries all map one shared zero frame, read-only. A run of any
//!   size costs its page directories and nothing else.
//! * **populate** gives each page of the range that still maps the zero frame
//!   a frame of its own, zeroed, read-write; a page-directory entry that still
//!   points at the shared page table first gets a private copy of it. Pages
//!   already populated keep their contents. Then every CPU drops its cached
//!   translations (`cpu::flush_tlb_everywhere`): these pages were present before
//!   (the zero frame), so a CPU may hold the old translation. While the
//!   allocator is being built, the other CPUs wait for the kernel's go and run no
//!   allocator code, so the bootstrap processor flushes only its own TLB per
//!   `populate` and every CPU's once when construction ends (`end_construction`):
//!   one round of NMIs instead of one per section.
//!
//! ```text
//!   PML4[468] -> PDPT -> PD ─┬─ PDE -> zero PT (shared) ── every PTE -> zero frame (RO)
//!                            └─ PDE -> private PT ─┬─ PTE -> zero frame (RO)    hole section
//!                                                  └─ PTE -> own frame (RW)     present section
//! ```
//!
//! Frames come, as memblock gives them before there is a page allocator, from
//! per-node pools the kernel carved out of usable RAM at boot and reserved
//! (`Config::reserved`: present, never managed while they hold tables); each
//! zone's table takes its frames from its own node's pool (Linux places each
//! node's `struct page`s on that node). The pools are sized with room to spare;
//! what construction did not use is given back (`close_pools`). Memory that
//! arrives later brings its own tables: the kernel lends the first frames of the
//! new range (`lend`, as Linux's `memmap_on_memory`), and adds the rest.
//!
//! Used by the bootstrap processor alone, from construction and from the
//! hot-add, behind `MEMMAP`'s lock.

use core::ptr::NonNull;

use spin::Mutex;

use crate::consts::{MAX_NODES, PAGE_BYTES};
use crate::cpu;

/// The frame tables' address space: PML4 slot 468, where Linux's x86-64
/// vmemmap lives too.
pub const VMEMMAP_START: u64 = 0xffff_ea00_0000_0000;
/// One PML4 entry's worth.
const VMEMMAP_BYTES: u64 = 1 << 39;
const LARGE: u64 = 2 << 20;

const PRESENT: u64 = 1 << 0;
const WRITABLE: u64 = 1 << 1;
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Most zones (tables) the map keeps track of.
const MAX_TABLES: usize = MAX_NODES * 4;

/// The map, once built (before the allocator).
pub static MEMMAP: Mutex<Option<VmemMap>> = Mutex::new(None);

/// Frames handed out from a physical range `[next, end)`, lowest first.
#[derive(Clone, Copy, Debug, Default)]
struct Pool {
    start: u64,
    next: u64,
    end: u64,
}

impl Pool {
    fn new(start: u64, end: u64) -> Pool {
        Pool {
            start,
            next: start,
            end,
        }
    }

    fn take(&mut self) -> Option<u64> {
        if self.next + PAGE_BYTES > self.end {
            return None;
        }
        let f = self.next;
        self.next += PAGE_BYTES;
        Some(f)
    }

    fn used(&self) -> u64 {
        (self.next - self.start) / PAGE_BYTES
    }
}

/// What the map has used, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Frames backing frame tables, per node.
    pub table_frames: [u64; MAX_NODES],
    /// Frames holding page tables (directories and tables), per node.
    pub pt_frames: [u64; MAX_NODES],
    /// Frames taken from another node's pool (its own was empty).
    pub off_node: u64,
    /// Frames taken from lent memory (memory that arrived).
    pub lent: u64,
    /// Address space reserved, bytes.
    pub reserved_bytes: u64,
    /// `populate` calls.
    pub populates: u64,
    /// TLB shootdowns of every CPU (one for all of construction).
    pub shootdowns: u64,
}

/// The kernel's `MemMap` (see the module documentation).
pub struct VmemMap {
    next_va: u64,
    pdpt: u64,
    zero_frame: u64,
    zero_pt: u64,
    pools: [Pool; MAX_NODES],
    loan: Option<Pool>,
    /// Reserved runs `[start, end)` and the node whose frames back them.
    tables: [(u64, u64, u16); MAX_TABLES],
    nr_tables: usize,
    usage: Usage,
    /// While the allocator is built: other CPUs' flushes wait for
    /// `end_construction`; `pending` says one is due.
    constructing: bool,
    pending: bool,
}

/// A page-table entry at `index` of the table at physical `table`.
fn entry(table: u64, index: u64) -> *mut u64 {
    (table + index * 8) as *mut u64
}

fn read(table: u64, index: u64) -> u64 {
    // SAFETY: `table` is a page-table frame the map owns (or the kernel's PML4),
    // identity mapped; `index < 512`.
    unsafe { entry(table, index).read_volatile() }
}

fn write(table: u64, index: u64, value: u64) {
    // SAFETY: as `read`; the map is the only writer of these entries (behind
    // `MEMMAP`'s lock).
    unsafe { entry(table, index).write_volatile(value) }
}

fn zero_frame(frame: u64) {
    // SAFETY: a frame the map just took from a pool or a loan: RAM, identity
    // mapped, used by nothing else.
    unsafe { core::ptr::write_bytes(frame as *mut u8, 0, PAGE_BYTES as usize) };
}

fn pml4() -> u64 {
    x86_64::registers::control::Cr3::read_raw()
        .0
        .start_address()
        .as_u64()
}

impl VmemMap {
    /// A map over per-node pools (`pools[n]`: physical bytes `[start, end)`,
    /// empty for a node with none); a zone's table is backed from its node's
    /// pool (`MemMap::reserve` names the zone). Takes its shared frames (the zero frame,
    /// the zero page table, the page-directory pointer table) from node 0's
    /// pool and installs the PML4 entry.
    ///
    /// # Errors
    /// Node 0's pool cannot give the three frames, or the PML4 slot is taken.
    pub fn new(pools: &[(u64, u64)]) -> Result<VmemMap, &'static str> {
        let mut m = VmemMap {
            next_va: VMEMMAP_START,
            pdpt: 0,
            zero_frame: 0,
            zero_pt: 0,
            pools: [Pool::default(); MAX_NODES],
            loan: None,
            tables: [(0, 0, 0); MAX_TABLES],
            nr_tables: 0,
            usage: Usage::default(),
            constructing: true,
            pending: false,
        };
        for (p, &(s, e)) in m.pools.iter_mut().zip(pools) {
            *p = Pool::new(s, e);
        }
        let slot = (VMEMMAP_START >> 39) & 511;
        if read(pml4(), slot) & PRESENT != 0 {
            return Err("the frame tables' PML4 slot is in use");
        }
        const NO_FRAME: &str = "no frame for the frame tables' page tables";
        m.zero_frame = m.take_pt(0).ok_or(NO_FRAME)?;
        m.zero_pt = m.take_pt(0).ok_or(NO_FRAME)?;
        m.pdpt = m.take_pt(0).ok_or(NO_FRAME)?;
        for i in 0..512 {
            write(m.zero_pt, i, m.zero_frame | PRESENT);
        }
        // Not present before: no CPU can hold a translation of it.
        write(pml4(), slot, m.pdpt | PRESENT | WRITABLE);
        Ok(m)
    }

    /// A zeroed frame for node `node`: from the loan while there is one, else
    /// the node's pool, else any pool.
    fn take(&mut self, node: u16) -> Option<u64> {
        let f = if let Some(l) = self.loan.as_mut().and_then(Pool::take) {
            self.usage.lent += 1;
            l
        } else if let Some(f) = self.pools.get_mut(node as usize).and_then(Pool::take) {
            f
        } else {
            let f = self.pools.iter_mut().find_map(Pool::take)?;
            self.usage.off_node += 1;
            f
        };
        zero_frame(f);
        Some(f)
    }

    fn take_pt(&mut self, node: u16) -> Option<u64> {
        let f = self.take(node)?;
        self.usage.pt_frames[node as usize] += 1;
        Some(f)
    }

    /// The page directory covering `va` (allocated from `node`'s pool if the
    /// page-directory pointer table has none yet).
    fn pd_of(&mut self, va: u64, node: u16) -> Option<u64> {
        let i = (va >> 30) & 511;
        let e = read(self.pdpt, i);
        if e & PRESENT != 0 {
            return Some(e & ADDR_MASK);
        }
        let pd = self.take_pt(node)?;
        write(self.pdpt, i, pd | PRESENT | WRITABLE);
        Some(pd)
    }

    /// The node whose frames back the table holding `va`.
    fn node_of(&self, va: u64) -> u16 {
        self.tables[..self.nr_tables]
            .iter()
            .find(|t| t.0 <= va && va < t.1)
            .map_or(0, |t| t.2)
    }

    /// Lends physical bytes `[start, start + frames pages)` (memory that has
    /// arrived and is not yet the allocator's) for the tables `populate`
    /// backs until `end_loan`.
    pub fn lend(&mut self, start: u64, frames: u64) {
        self.loan = Some(Pool::new(start, start + frames * PAGE_BYTES));
    }

    /// Ends the loan; returns the frames it gave, from its start.
    pub fn end_loan(&mut self) -> u64 {
        self.loan.take().map_or(0, |l| l.used())
    }

    /// The unused part of each node's pool, `(node, start, end)` in bytes, and
    /// closes the pools: after construction nothing more is taken from them
    /// (the kernel gives these bytes to the allocator).
    pub fn close_pools(&mut self) -> [(u16, u64, u64); MAX_NODES] {
        let mut out = [(0, 0, 0); MAX_NODES];
        for (n, (p, o)) in self.pools.iter_mut().zip(out.iter_mut()).enumerate() {
            *o = (n as u16, p.next, p.end);
            p.end = p.next;
        }
        out
    }

    /// The allocator is built: every CPU drops the translations `populate`
    /// changed meanwhile (before any other CPU may use the allocator), and from
    /// now on each `populate` flushes every CPU before it returns.
    pub fn end_construction(&mut self) {
        if self.pending {
            self.usage.shootdowns += 1;
            cpu::flush_tlb_everywhere();
        }
        self.constructing = false;
        self.pending = false;
    }

    /// What the map has used so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Frames the tables of `frames` frames of new memory can take at most,
    /// page tables included: whole sections (16 bytes a frame and a 64-byte line
    /// in 512 frames' worth), rounded out to pages at both ends, and a page table
    /// for every 2 MiB of them plus one at each end.
    pub fn frames_for(frames: u64) -> u64 {
        let s = zonealloc::SECTION_FRAMES;
        let sections = frames.div_ceil(s) + 1;
        let bytes = sections * (s * 16 + s / 512 * 64);
        bytes.div_ceil(PAGE_BYTES) + 2 * sections + bytes.div_ceil(LARGE) + 2
    }
}

// SAFETY: `reserve` hands out disjoint runs of the vmemmap slot, 2 MiB aligned,
// that no one else maps, never unmapped: every page maps the zero frame, read-only,
// so every byte is readable and reads as zero. `populate` maps, over every page of
// the range that still maps the zero frame, a frame of its own, zeroed before it
// is mapped, read-write, and leaves pages already populated as they are; it
// returns `true` only once every page of the range is writable for the calling
// CPU and every other CPU has dropped the old translations
// (`flush_tlb_everywhere`), or, during construction, cannot run allocator code
// before `end_construction` makes it drop them. The frames come from memory the
// kernel reserved from the allocator (the pools) or memory not yet given to it
// (a loan), never from memory the allocator manages.
unsafe impl zonealloc::MemMap for VmemMap {
    fn reserve(&mut self, zone: zonealloc::ZoneId, bytes: usize) -> Option<NonNull<u8>> {
        let va = self.next_va.next_multiple_of(LARGE);
        let end = va.checked_add(bytes as u64)?;
        if end > VMEMMAP_START + VMEMMAP_BYTES || self.nr_tables == MAX_TABLES {
            return None;
        }
        // The table is backed from its zone's node's pool.
        let k = self.nr_tables;
        let node = zone.node;
        let mut chunk = va;
        while chunk < end {
            let pd = self.pd_of(chunk, node)?;
            // Not present before: no flush needed.
            write(pd, (chunk >> 21) & 511, self.zero_pt | PRESENT);
            chunk += LARGE;
        }
        self.tables[k] = (va, end, node);
        self.nr_tables += 1;
        self.next_va = end;
        self.usage.reserved_bytes += end - va;
        NonNull::new(va as *mut u8)
    }

    fn populate(&mut self, addr: NonNull<u8>, bytes: usize) -> bool {
        self.usage.populates += 1;
        let first = addr.as_ptr() as u64 & !(PAGE_BYTES - 1);
        let end = (addr.as_ptr() as u64 + bytes as u64).next_multiple_of(PAGE_BYTES);
        let node = self.node_of(first);
        let mut changed = false;
        let mut ok = true;
        let mut va = first;
        while va < end {
            let Some(pd) = self.pd_of(va, node) else {
                ok = false;
                break;
            };
            let di = (va >> 21) & 511;
            let pde = read(pd, di);
            if pde & PRESENT == 0 {
                // Outside every reservation: the caller broke the contract.
                ok = false;
                break;
            }
            let pt = if pde & ADDR_MASK == self.zero_pt {
                let Some(pt) = self.take_pt(node) else {
                    ok = false;
                    break;
                };
                for i in 0..512 {
                    write(pt, i, self.zero_frame | PRESENT);
                }
                write(pd, di, pt | PRESENT | WRITABLE);
                changed = true;
                pt
            } else {
                pde & ADDR_MASK
            };
            let ti = (va >> 12) & 511;
            if read(pt, ti) & ADDR_MASK == self.zero_frame {
                let Some(f) = self.take(node) else {
                    ok = false;
                    break;
                };
                self.usage.table_frames[node as usize] += 1;
                write(pt, ti, f | PRESENT | WRITABLE);
                changed = true;
            }
            va += PAGE_BYTES;
        }
        if changed && self.constructing {
            cpu::flush_local_tlb();
            self.pending = true;
        } else if changed {
            self.usage.shootdowns += 1;
            cpu::flush_tlb_everywhere();
        }
        ok
    }
}
