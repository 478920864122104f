//! A block the stress or a timer handler holds: where it must lie, the tags
//! that prove it had one owner at a time, and the free that hands it back.
//!
//! Every block handed out must lie in usable RAM, outside everything the
//! kernel still reserves (or in memory that has arrived, `hotadd`), and below
//! the limit of the zone its GFP allows (`claim`). Its first and last words get
//! a tag (CPU, timer handler or not, sequence number) when it is allocated,
//! checked when it is freed (`release`): a block handed to two owners at once
//! shows as a changed tag. Any failure prints what it saw and ends the run with
//! its own status. The stress and the timer handler both hold blocks, so this
//! lies below both.

use zonealloc::{Order, Pfn, PinnedCpu, ZoneAllocator};

use crate::bootmem::BOOT;
use crate::consts::PAGE_BYTES;
use crate::exit::Exit;
use crate::hotadd;

/// A block held by the stress or a timer handler.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    /// First frame.
    pub pfn: u64,
    /// Its order.
    pub order: u8,
    /// The tag written into its first and last words.
    pub tag: u64,
}

impl Block {
    /// Frames in the block.
    pub fn nr_pages(&self) -> u64 {
        1 << self.order
    }

    fn words(&self) -> (*mut u64, *mut u64) {
        let first = self.pfn * PAGE_BYTES;
        let last = (self.pfn + self.nr_pages()) * PAGE_BYTES - 8;
        (first as *mut u64, last as *mut u64)
    }
}

/// A block's tag: its CPU, whether a timer handler took it, a sequence number.
pub fn tag(cpu: usize, irq: bool, seq: u64) -> u64 {
    ((cpu as u64) << 56) | (u64::from(irq) << 55) | (seq & ((1 << 55) - 1))
}

/// Prints a failure seen on this CPU, without the console lock (another CPU, or
/// the code this handler interrupted, may hold it), and ends the run with
/// `$why`.
macro_rules! fail {
    ($why:expr, $($arg:tt)*) => {{
        $crate::serial::fatal(format_args!(
            "\nFAIL ({:?}) on cpu {}: {}\n",
            $why,
            $crate::cpu::this_cpu(),
            format_args!($($arg)*)
        ));
        $crate::exit::exit($why)
    }};
}

// The stress fails the same way.
pub(crate) use fail;

/// Checks that a block just allocated lies in usable RAM, outside the kernel's
/// reservations and below `ceiling_pfn`, then tags it.
pub fn claim(block: &Block, ceiling_pfn: u64) {
    let boot = BOOT.get().expect("boot memory is set before the stress");
    if !boot.is_usable(block.pfn, block.nr_pages()) && !hotadd::arrived(block.pfn, block.nr_pages())
    {
        fail!(
            Exit::BlockOutsideRam,
            "block pfn {:#x} order {} is not usable RAM (a hole or the kernel's own)",
            block.pfn,
            block.order
        );
    }
    if block.pfn + block.nr_pages() > ceiling_pfn {
        fail!(
            Exit::BlockOutsideRam,
            "block pfn {:#x} order {} lies above its GFP's zone limit (pfn {:#x})",
            block.pfn,
            block.order,
            ceiling_pfn
        );
    }
    let (first, last) = block.words();
    // SAFETY: the block is usable RAM (checked above), identity mapped, and ours
    // alone until we free it: the allocator just handed it out.
    unsafe {
        first.write_volatile(block.tag);
        last.write_volatile(!block.tag);
    }
}

/// Which free call a release makes.
#[derive(Clone, Copy, Debug)]
pub enum Via<'a> {
    /// `free_pages`.
    Locking,
    /// `free_pages_nolock`.
    NoLock,
    /// `free_pages_pinned` with this CPU's token.
    Pinned(&'a PinnedCpu),
}

/// Checks a held block's tags, then frees it through `via`.
pub fn release(za: &ZoneAllocator, block: Block, via: Via<'_>) {
    let (first, last) = block.words();
    // SAFETY: the block is held by the caller (claimed, not yet freed).
    let (a, b) = unsafe { (first.read_volatile(), last.read_volatile()) };
    if a != block.tag || b != !block.tag {
        fail!(
            Exit::Corruption,
            "block pfn {:#x} order {}: tags {:#x}/{:#x}, expected {:#x}/{:#x}",
            block.pfn,
            block.order,
            a,
            b,
            block.tag,
            !block.tag
        );
    }
    let freed = match via {
        Via::Locking => za.free_pages(Pfn(block.pfn), Order(block.order)),
        Via::NoLock => za.free_pages_nolock(Pfn(block.pfn), Order(block.order)),
        Via::Pinned(pin) => za.free_pages_pinned(pin, Pfn(block.pfn), Order(block.order)),
    };
    if let Err(e) = freed {
        fail!(
            Exit::FreeRefused,
            "free of held block pfn {:#x} order {} refused: {e}",
            block.pfn,
            block.order
        );
    }
}
