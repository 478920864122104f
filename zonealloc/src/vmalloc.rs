//! vmalloc: virtually contiguous areas built from scattered frames (`mm/vmalloc.c`).
//!
//! Layer above the page allocator, reached only through its public API
//! (`alloc_pages`, `split_page`, `alloc_pages_bulk`, `free_pages_bulk`,
//! `free_pages`). A `VmallocSpace` owns a range of virtual addresses (KVA) and hands
//! out pieces of it, each backed by a page array. Its own locks, taken in this order
//! and never while a lock of the page allocator is held: a CPU's `vm_map_ram` slot,
//! the block registry, the KVA lock (free tree plus busy map), one block's state.
//! Page allocation, freeing and `mmap` calls run with none of them held.
//!
//! # Virtual addresses
//!
//! Free KVA lives in a `FreeAreaTree` (see `vmap_tree`): an AVL tree of free areas
//! keyed by address and augmented with each subtree's largest free size, Linux's
//! `free_vmap_area_root`. An allocation takes the lowest area that fits size plus
//! alignment slack in one root-to-leaf descent and clips the request out of it; a
//! free merges the range with its address neighbours. Both are O(log n) in the
//! number of free areas. Busy areas sit in a `BTreeMap` by start address (Linux's
//! busy tree), so `vfree` finds its area in O(log n). Every `vmalloc` and `vmap`
//! area is followed by one unmapped guard page, as Linux does without
//! `VM_NO_GUARD` (`VmallocConfig::guard_pages`). Freed KVA is reusable at once:
//! there are no TLBs to flush lazily, so there is no lazy purge.
//!
//! Linux takes the range before the pages. So does a mapped space here (the pages
//! are mapped into the range before the area is published), and so does any
//! space whose free tree had no room for the request when the KVA lock was last
//! released: a call that fails for lack of address space then touches no page.
//! Otherwise, with nothing to map, `vmalloc` takes the pages first and then the
//! range and the busy entry in one hold of the lock, where the range-first order
//! needs two.
//!
//! # The page array (`vm_area_alloc_pages`, Linux 6.19+)
//!
//! ```text
//!   1. high orders first:  order = min(ilog2(remaining), max_order, ceiling)
//!                          alloc_pages(gfp | NOWARN | NORETRY, order)
//!                          fail -> ceiling = order - 1;  ok -> split_page, append
//!                          the 2^order order-0 entries in ascending pfn order
//!   2. order-0 bulk:       alloc_pages_bulk in requests of at most 100 pages,
//!                          until a request comes back short
//!   3. single pages:       alloc_pages(gfp, page order) until done, or fail the call
//! ```
//!
//! Step 1 makes most of the array runs of consecutive frames, which `vfree` can
//! give back as whole blocks. `VmallocConfig::high_order_first = false` gives the
//! pre-6.19 array (steps 2 and 3 only). `vmalloc_huge` uses pageblock-order pages
//! (the PMD size on x86-64) when the request is at least that large: the size is
//! rounded up to whole pageblocks, the address aligned to one, and step 3 runs at
//! the pageblock order; if that fails it falls back to small pages, as Linux does.
//!
//! # vfree
//!
//! `VfreeMode::Bulk` (the 2026 kernel's `vfree`) hands the whole array to
//! `free_pages_bulk`, which frees each run of consecutive frames as the largest
//! aligned blocks (orders 1-3 and the pageblock order to the per-CPU lists, the
//! others to the buddy). `VfreeMode::PerPage` is the kernel up to 6.19: one
//! `free_pages(pfn, Order(0))` per entry, every page an order-0 free to this CPU's
//! list. Both are real options; benchmarks compare them.
//!
//! # Mappings
//!
//! On a memfd-backed arena (`VmallocSpace::new_mapped`) the range is a `PROT_NONE`
//! reservation and each area's frames are really mapped there, one
//! `mmap(MAP_FIXED | MAP_SHARED)` per run of consecutive frames: a write through the
//! vmalloc address lands in the frame that `page_address` shows. Unmapping maps
//! `PROT_NONE` over the area again. Everywhere else (abstract frames, a kernel
//! supplying its own backend, `VmallocSpace::new`) there is nothing to map: the
//! space hands out the address range and the page array, and `VmArea::is_mapped`
//! says which case holds.
//!
//! # vm_map_ram
//!
//! Mappings of at most `VMAP_MAX_ALLOC` pages come from per-CPU blocks (Linux's
//! `vmap_block`): each CPU carves its current block of KVA with a bump pointer, in
//! power-of-two page counts, under its own lock; the KVA lock is taken only to get
//! a new block. A full block is retired, and returned to the free tree when its last
//! mapping goes. Such mappings have no guard page. Larger ones get an area of their
//! own.
//!
//! # Thread safety
//!
//! `VmallocSpace` is `Send + Sync` and every method takes `&self`. The KVA lock is
//! held only for the tree and busy-map operations (O(log n) each), never across
//! page allocation or `mmap`.

use alloc::boxed::Box;
use alloc::collections::btree_map::Entry;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ptr::NonNull;

use crate::allocate::Head;
use crate::allocator::ZoneAllocator;
#[cfg(feature = "std")]
use crate::arena::{Arena, ArenaWindow};
use crate::backend::Backend;
use crate::check::InvariantViolation;
use crate::error::FreeError;
use crate::fault::FaultSite;
use crate::frame::FrameState;
use crate::free::{Holder, Via};
use crate::gfp::Gfp;
use crate::sync::{AtomicU64, Lock, LockGuard, Ordering};
use crate::types::{Order, Pfn};
use crate::vmap_tree::FreeAreaTree;

/// Largest `vm_map_ram` served from the per-CPU blocks, in pages (`VMAP_MAX_ALLOC`,
/// `BITS_PER_LONG` in Linux).
pub const VMAP_MAX_ALLOC: usize = 64;

/// Largest `alloc_pages_bulk` request of the page-array builder (Linux bounds the
/// time spent with preemption off the same way).
pub const VMALLOC_BULK_MAX: usize = 100;

/// `VMALLOC_START` of x86-64 with 4-level page tables.
const DEFAULT_START: usize = if usize::BITS >= 64 {
    0xffff_c900_0000_0000_u64 as usize
} else {
    0xc000_0000
};

/// 32 TiB, x86-64's vmalloc space (256 MiB on 32-bit targets).
const DEFAULT_SIZE: usize = if usize::BITS >= 64 {
    (1_u64 << 45) as usize
} else {
    256 << 20
};

// -----------------------------------------------------------------------------
// Configuration, handles, errors
// -----------------------------------------------------------------------------

/// How `vfree` returns an area's pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum VfreeMode {
    /// `free_pages_bulk` (2026): each run of consecutive frames goes back as the
    /// largest aligned blocks, so a split order-9 block is freed as one order-9
    /// block.
    #[default]
    Bulk,
    /// Linux up to 6.19: `free_pages(pfn, Order(0))` for every page, in array order.
    PerPage,
}

/// Options of a `VmallocSpace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmallocConfig {
    /// First address of the range (`VMALLOC_START`); page aligned. Ignored by
    /// `new_mapped`, which reserves its range wherever the OS puts it.
    pub start: usize,
    /// Bytes in the range; `None` is 32 TiB for `new` and four times the arena
    /// (at least 64 MiB) for `new_mapped`.
    pub size_bytes: Option<usize>,
    /// One unmapped page after each `vmalloc` and `vmap` area (Linux's default;
    /// `false` is `VM_NO_GUARD`).
    pub guard_pages: bool,
    /// How `vfree` frees.
    pub vfree_mode: VfreeMode,
    /// Try high-order blocks first when building the page array (Linux 6.19+);
    /// `false` is the older order-0 bulk-then-single array.
    pub high_order_first: bool,
    /// Flags for page allocations (`GFP_KERNEL | __GFP_HIGHMEM`, as `vmalloc`).
    pub gfp: Gfp,
}

impl Default for VmallocConfig {
    fn default() -> Self {
        VmallocConfig {
            start: DEFAULT_START,
            size_bytes: None,
            guard_pages: true,
            vfree_mode: VfreeMode::Bulk,
            high_order_first: true,
            gfp: Gfp::KERNEL | Gfp::HIGHMEM,
        }
    }
}

/// What a busy area of the space is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AreaKind {
    /// `vmalloc` and friends: the space owns the pages and frees them in `vfree`.
    Vmalloc,
    /// `vmap` of the caller's pages; `vunmap` leaves them to the caller.
    Vmap,
    /// A `vm_map_ram` mapping larger than `VMAP_MAX_ALLOC` pages, with an area of
    /// its own.
    VmMapRam,
    /// A per-CPU block that small `vm_map_ram` mappings are carved from.
    VmapBlock,
}

/// A busy area: its address range and the frames behind it.
///
/// Cheap to clone (the page array is shared). It describes the area; it does not
/// own it: the area lives until `vfree`/`vunmap` of its address.
///
/// So it gives out a pointer (`as_ptr`), not a slice: any clone of it, and any
/// code that learns the address, may `vfree` the area, after which its frames go
/// back to the allocator and are handed out again, so no borrow of the bytes can
/// be tied to a `VmArea`. For safe reads and writes, allocate the area owned:
/// `VmallocSpace::vmalloc_owned` returns an `OwnedVmArea`, whose area `vfree`
/// refuses while the guard lives, and which hands out the bytes as slices
/// (`OwnedVmArea::bytes`, `bytes_mut`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmArea {
    addr: usize,
    size_bytes: usize,
    pages: Arc<[Pfn]>,
    kind: AreaKind,
    page_order: Order,
    mapped: bool,
}

/// A `vmalloc` area owned by a guard (`VmallocSpace::vmalloc_owned`): it derefs
/// to the area's `VmArea` and frees the area when dropped.
///
/// The guard is the area's only owner: while it lives, `vfree` of the area's
/// address is refused (`VmallocError::Owned`), `vunmap` and `vm_unmap_ram`
/// refuse a `vmalloc` area (`WrongKind`), and the area's frames answer to
/// `vfree` alone (the raw API, caches and guards refuse them). The space
/// outlives the guard, which borrows it. So on a mapped space
/// (`VmallocSpace::new_mapped`) the guard hands out the area's bytes as slices,
/// `bytes` to `&self` and `bytes_mut` to `&mut self`, with no `unsafe`; other
/// pointers to the same memory (`as_ptr`, `page_address` of its frames, a
/// `vmap` of them) can only be dereferenced by `unsafe` code, whose contract
/// forbids reaching an area another owner holds.
pub struct OwnedVmArea<'v, 'a, B: Backend> {
    space: &'v VmallocSpace<'a, B>,
    /// `Some` until `into_area` or the drop takes it.
    area: Option<VmArea>,
}

impl<B: Backend> OwnedVmArea<'_, '_, B> {
    /// Gives up the guard without freeing: the area is the caller's to `vfree`,
    /// which accepts its address again.
    pub fn into_area(mut self) -> VmArea {
        let a = self.area.take().expect(HELD);
        self.space.disown(a.addr());
        a
    }

    /// The area's `size_bytes()` bytes, if the space maps its areas (`None` on a
    /// space that hands out addresses only, where `is_mapped` is `false`).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let area = vm.vmalloc_owned(4096).unwrap();
    /// assert!(area.bytes().is_none()); // abstract frames: nothing to read
    /// ```
    #[allow(unsafe_code)]
    pub fn bytes(&self) -> Option<&[u8]> {
        let (p, len) = self.memory()?;
        // SAFETY: as in `bytes_mut`; `&self` makes the borrow shared, and no
        // `&mut` borrow of the guard can exist beside it.
        Some(unsafe { core::slice::from_raw_parts(p.as_ptr(), len) })
    }

    /// The area's bytes, writable, if the space maps its areas (see `bytes`).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let opts = ArenaOptions { memfd: true, ..Default::default() };
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), opts).unwrap();
    /// let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    /// let mut area = vm.vmalloc_owned(3 * 4096).unwrap();
    /// let bytes = area.bytes_mut().unwrap(); // 12 KiB, no unsafe
    /// bytes.fill(0);
    /// bytes[4096..4100].copy_from_slice(b"page");
    /// assert_eq!(&area.bytes().unwrap()[4096..4100], b"page");
    /// // While the guard lives, the area cannot be freed by its address.
    /// assert!(vm.vfree(area.addr()).is_err());
    /// drop(area); // frees it
    /// ```
    #[allow(unsafe_code)]
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        let (p, len) = self.memory()?;
        // SAFETY: the area is mapped: `map_pages` mapped its frames, read and
        // write, at `addr .. addr + size_bytes` (whole pages, one per entry of
        // its page array) before the area was published, and only its removal
        // from the busy map unmaps them. That removal is `vfree`'s, which
        // refuses a guarded area to every caller but this guard's drop
        // (`vunmap` and `vm_unmap_ram` refuse a `vmalloc` area), and the space
        // cannot be dropped before the guard, which borrows it. The frames carry
        // `FLAG_VMALLOC`, so nothing but that `vfree` frees them or hands them to
        // another owner. Other pointers to these bytes can only be read or
        // written through in `unsafe` code, which may not touch memory another
        // owner holds; `&mut self` makes this borrow exclusive among safe ones.
        Some(unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// The area's first byte and its size, if it is mapped.
    fn memory(&self) -> Option<(NonNull<u8>, usize)> {
        let a = self.area.as_ref().expect(HELD);
        Some((a.as_ptr()?, a.size_bytes))
    }
}

/// An `OwnedVmArea` holds its area from its creation until `into_area` or its
/// drop, which consume it.
const HELD: &str = "an OwnedVmArea holds its area until it is consumed";

impl<B: Backend> core::ops::Deref for OwnedVmArea<'_, '_, B> {
    type Target = VmArea;

    fn deref(&self) -> &VmArea {
        self.area.as_ref().expect(HELD)
    }
}

impl<B: Backend> Drop for OwnedVmArea<'_, '_, B> {
    fn drop(&mut self) {
        if let Some(a) = self.area.take() {
            // The area's pages answer to vmalloc alone, so the free cannot be
            // refused for them; a drop has no one to report to in any case. If
            // the OS refused to unmap it, the area stays live: it is left to
            // `vfree` by address, which may try again.
            if let Err(VmallocError::MapFailed { .. }) = self.space.vfree_by(a.addr(), Owner::Guard)
            {
                self.space.disown(a.addr());
            }
        }
    }
}

impl<B: Backend> fmt::Debug for OwnedVmArea<'_, '_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedVmArea").field(&self.area).finish()
    }
}

impl VmArea {
    /// First address of the area.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Usable bytes (whole pages; the guard page is not included). For a
    /// `VmapBlock`, the whole block.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    /// Pages in the area.
    pub fn nr_pages(&self) -> usize {
        self.pages.len()
    }

    /// The frames behind the area, page by page (`vm_struct::pages`). Empty for a
    /// `VmapBlock`.
    pub fn pages(&self) -> &[Pfn] {
        &self.pages
    }

    /// What the area is.
    pub fn kind(&self) -> AreaKind {
        self.kind
    }

    /// Order of the blocks the pages were allocated as at least
    /// (`vm_struct::page_order`): the pageblock order for a huge `vmalloc`, else 0.
    pub fn page_order(&self) -> Order {
        self.page_order
    }

    /// Whether the frames are really mapped at `addr` (a memfd arena), so that the
    /// address can be dereferenced.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// The address as a pointer, if the area is mapped. Reading and writing through
    /// it is the caller's `unsafe` business, as with `page_address`.
    pub fn as_ptr(&self) -> Option<NonNull<u8>> {
        if self.mapped {
            NonNull::new(self.addr as *mut u8)
        } else {
            None
        }
    }
}

/// Why a vmalloc call was refused. Nothing was changed, except where a variant
/// says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmallocError {
    /// A size (or page count) of zero.
    ZeroSize,
    /// The alignment is not a power of two.
    InvalidAlign(usize),
    /// More pages than the allocator manages (Linux's `totalram_pages()` check).
    TooLarge {
        /// Pages asked for.
        nr_pages: u64,
    },
    /// No free range of the space is large enough.
    NoVirtualSpace {
        /// Pages of address space asked for, guard included.
        nr_pages: u64,
    },
    /// The page allocator ran out; every page taken for the call was given back.
    NoMemory {
        /// Pages asked for.
        nr_pages: u64,
    },
    /// No live area of the right family starts at this address (never allocated,
    /// already freed, not the first address, or outside the space).
    UnknownAddress(usize),
    /// `vfree` of an area an `OwnedVmArea` guard owns: the guard frees it when
    /// dropped, or hands it over with `into_area`.
    Owned(usize),
    /// The area at this address is of another kind (e.g. `vfree` of a `vmap`).
    WrongKind {
        /// The address.
        addr: usize,
        /// What the area is.
        kind: AreaKind,
    },
    /// `vm_unmap_ram` with another page count than the mapping has.
    WrongCount {
        /// The address.
        addr: usize,
        /// Pages mapped there.
        expected: usize,
        /// Pages given.
        given: usize,
    },
    /// A frame of a caller's page array is in no zone, a hole, or bad.
    BadPage(Pfn),
    /// The OS refused to map or unmap (`errno`, 0 if none was set).
    MapFailed {
        /// The area's address.
        addr: usize,
        /// The OS error number.
        errno: i32,
    },
    /// The configuration's range is empty, misaligned or overflows.
    InvalidConfig,
    /// `new_mapped` on an arena without a memfd (see `ArenaOptions::memfd`), or the
    /// address range could not be reserved.
    NotMappable,
    /// `vfree` found frames of the area that were not its own any more (no public
    /// call can free them behind its back: they carry vmalloc's owner mark). The
    /// area is gone and every frame still owned was freed; the first refusal is
    /// reported.
    PageFree {
        /// The area's address.
        addr: usize,
        /// What the page allocator said.
        error: FreeError,
    },
}

impl fmt::Display for VmallocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmallocError::ZeroSize => f.write_str("size of zero"),
            VmallocError::InvalidAlign(a) => write!(f, "alignment {a:#x} is not a power of two"),
            VmallocError::TooLarge { nr_pages } => {
                write!(f, "{nr_pages} pages is more than the allocator manages")
            }
            VmallocError::NoVirtualSpace { nr_pages } => {
                write!(f, "no free virtual range of {nr_pages} pages")
            }
            VmallocError::NoMemory { nr_pages } => {
                write!(f, "out of memory building an array of {nr_pages} pages")
            }
            VmallocError::UnknownAddress(a) => write!(f, "no live area at {a:#x}"),
            VmallocError::Owned(a) => write!(f, "the area at {a:#x} is owned by a guard"),
            VmallocError::WrongKind { addr, kind } => {
                write!(f, "the area at {addr:#x} is a {kind:?} area")
            }
            VmallocError::WrongCount {
                addr,
                expected,
                given,
            } => write!(
                f,
                "the mapping at {addr:#x} has {expected} pages, not {given}"
            ),
            VmallocError::BadPage(p) => write!(f, "pfn {p} is not a page of any zone"),
            VmallocError::MapFailed { addr, errno } => {
                write!(f, "mapping at {addr:#x} failed (errno {errno})")
            }
            VmallocError::InvalidConfig => f.write_str("invalid vmalloc range"),
            VmallocError::NotMappable => f.write_str(
                "the arena cannot map a vmalloc range: build the allocator with \
                 `ZoneAllocator::with_arena(config, ArenaOptions { memfd: true, .. })` \
                 (or use `VmallocSpace::new` for addresses without mappings)",
            ),
            VmallocError::PageFree { addr, error } => {
                write!(f, "vfree({addr:#x}): a page was not ours to free: {error}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for VmallocError {}

/// What `VmallocSpace::check_invariants` looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmallocReport {
    /// Free areas in the tree.
    pub free_areas: u64,
    /// Busy areas (vm_map_ram blocks included).
    pub busy_areas: u64,
    /// Pages owned by `vmalloc` areas.
    pub vmalloc_pages: u64,
    /// Live `vm_map_ram` blocks.
    pub ram_blocks: u64,
    /// Individual assertions evaluated (tree checks included).
    pub checks: u64,
}

// -----------------------------------------------------------------------------
// Internal state
// -----------------------------------------------------------------------------

/// A busy area as the space records it.
struct Busy {
    /// Pages of address space taken from the tree, guard included.
    nr_vpn: u64,
    area: VmArea,
    /// An `OwnedVmArea` owns the area: only its drop may take it out.
    owned: bool,
}

/// Who asks to take a busy area out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// A call by address (`vfree`, `vunmap`, `vm_unmap_ram`), refused for an
    /// owned area.
    Anyone,
    /// The area's `OwnedVmArea`, dropped.
    Guard,
}

/// Everything behind the KVA lock.
struct Kva {
    /// Free address space, in virtual page numbers.
    free: FreeAreaTree,
    /// Busy areas by first virtual page number.
    busy: BusyMap,
}

/// The busy areas by first virtual page number: an ordered map from each
/// area's first page to its slot in a slab of `Busy` records, whose free slots
/// are reused. The tree moves 4-byte slot numbers, not the records: an insert
/// and a remove cost about half what they do with the records in the tree's
/// nodes (`vmalloc` and `vfree` each make one under the KVA lock).
#[derive(Default)]
struct BusyMap {
    index: BTreeMap<u64, u32>,
    slots: Vec<Option<Busy>>,
    /// Slots whose record was removed, reused first.
    vacant: Vec<u32>,
}

impl BusyMap {
    /// Records `b` as the area at `vpn`; the record it replaces, if any.
    fn insert(&mut self, vpn: u64, b: Busy) -> Option<Busy> {
        // One descent of the tree, as for the records in it.
        let e = match self.index.entry(vpn) {
            Entry::Occupied(e) => return self.slots[*e.get() as usize].replace(b),
            Entry::Vacant(e) => e,
        };
        let i = match self.vacant.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(b);
                i
            }
            None => {
                self.slots.push(Some(b));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 busy areas")
            }
        };
        e.insert(i);
        None
    }

    /// Takes the record of the area at `vpn` out.
    fn remove(&mut self, vpn: &u64) -> Option<Busy> {
        let i = self.index.remove(vpn)?;
        self.vacant.push(i);
        self.slots[i as usize].take()
    }

    /// Takes the record of the area at `vpn` out if `check` accepts it, with one
    /// descent of the tree; `Ok(None)` if no area starts there.
    fn take_if<E>(
        &mut self,
        vpn: u64,
        check: impl FnOnce(&Busy) -> Result<(), E>,
    ) -> Result<Option<Busy>, E> {
        let Entry::Occupied(e) = self.index.entry(vpn) else {
            return Ok(None);
        };
        let i = *e.get();
        let slot = &mut self.slots[i as usize];
        check(slot.as_ref().expect("the index names only occupied slots"))?;
        e.remove();
        self.vacant.push(i);
        Ok(slot.take())
    }

    fn slot(&self, i: u32) -> &Busy {
        self.slots[i as usize]
            .as_ref()
            .expect("the index names only occupied slots")
    }

    /// The record of the area at `vpn`.
    fn get(&self, vpn: &u64) -> Option<&Busy> {
        self.index.get(vpn).map(|&i| self.slot(i))
    }

    /// The record of the area at `vpn`, to change.
    fn get_mut(&mut self, vpn: &u64) -> Option<&mut Busy> {
        let &i = self.index.get(vpn)?;
        self.slots[i as usize].as_mut()
    }

    /// The area with the highest first page at or below `vpn`.
    fn floor(&self, vpn: u64) -> Option<(u64, &Busy)> {
        let (&start, &i) = self.index.range(..=vpn).next_back()?;
        Some((start, self.slot(i)))
    }

    /// Every area, lowest first.
    fn iter(&self) -> impl Iterator<Item = (u64, &Busy)> + '_ {
        self.index.iter().map(|(&vpn, &i)| (vpn, self.slot(i)))
    }

    fn len(&self) -> usize {
        self.index.len()
    }
}

/// The `kva` lock held. Its release first stores the free tree's largest area in
/// `VmallocSpace::largest_free`, so the value is exact whenever no one holds
/// the lock.
struct KvaGuard<'s> {
    kva: LockGuard<'s, Kva>,
    largest_free: &'s AtomicU64,
}

impl core::ops::Deref for KvaGuard<'_> {
    type Target = Kva;
    fn deref(&self) -> &Kva {
        &self.kva
    }
}

impl core::ops::DerefMut for KvaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Kva {
        &mut self.kva
    }
}

impl Drop for KvaGuard<'_> {
    fn drop(&mut self) {
        // Under the lock still: the guard inside is dropped after this.
        self.largest_free
            .store(self.kva.free.largest(), Ordering::Relaxed);
    }
}

/// One live small `vm_map_ram` mapping inside a block.
struct RamAlloc {
    /// Pages mapped.
    count: u64,
    /// Pages of the block it took (`count` rounded up to a power of two).
    reserved: u64,
    /// A `vm_unmap_ram` of it is in progress: it is no longer live, but its pages
    /// are not unmapped yet, so the block must not go.
    unmapping: bool,
}

/// State of a `vm_map_ram` block, behind the block's lock.
///
/// The block goes back to the free tree exactly once: when it is retired with no
/// mapping in it, or when its last mapping goes after it was retired. Both happen
/// under this lock, so one caller sees the transition.
struct BlockState {
    /// Pages carved so far (bump pointer; space is not reused inside a block).
    used: u64,
    /// Mappings by page offset in the block.
    live: BTreeMap<u64, RamAlloc>,
    /// No CPU will carve from the block again.
    retired: bool,
}

/// A block of KVA carved into small `vm_map_ram` mappings (`struct vmap_block`).
struct VmapBlock {
    /// First virtual page number.
    vpn: u64,
    state: Lock<BlockState>,
}

/// A virtual address space with vmalloc, vmap and vm_map_ram over a
/// `ZoneAllocator`. See the [module documentation](crate::vmalloc).
///
/// # Examples
/// ```
/// use zonealloc::{Config, VmallocConfig, VmallocSpace, ZoneAllocator};
/// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
/// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
/// let area = vm.vmalloc(100 << 10).unwrap(); // 25 pages
/// assert_eq!(area.nr_pages(), 25);
/// assert!(!area.is_mapped()); // abstract frames: numbers only
/// vm.vfree(area.addr()).unwrap();
/// ```
pub struct VmallocSpace<'a, B: Backend> {
    za: &'a ZoneAllocator<B>,
    cfg: VmallocConfig,
    page_shift: u32,
    /// First virtual page number of the range.
    start_vpn: u64,
    /// Virtual pages in the range.
    nr_vpn: u64,
    kva: Lock<Kva>,
    /// The free tree's largest area in pages, stored at the end of every hold of
    /// the `kva` lock (`KvaGuard`): `vmalloc_pages` reads it without the lock to
    /// choose its order of work. A hint: a stale value changes which path runs,
    /// never what is correct.
    largest_free: AtomicU64,
    /// Live `vm_map_ram` blocks by first virtual page number.
    blocks: Lock<BTreeMap<u64, Arc<VmapBlock>>>,
    /// Each CPU's current `vm_map_ram` block.
    percpu: Box<[Lock<Option<Arc<VmapBlock>>>]>,
    /// Pages in a `vm_map_ram` block (`VMAP_BBMAP_BITS`), a power of two.
    block_pages: u64,
    /// Pages owned by `vmalloc` areas (`NR_VMALLOC`). Written only under the `kva`
    /// lock, with the area's entry in the busy map (`add_vmalloc_pages`), so a
    /// load and a store do without a read-modify-write; read anywhere (Relaxed: a
    /// statistic, exact at quiescent points and under the lock).
    nr_vmalloc_pages: AtomicU64,
    /// The reservation the areas are mapped into, on a memfd arena.
    #[cfg(feature = "std")]
    window: Option<ArenaWindow>,
}

impl<B: Backend> fmt::Debug for VmallocSpace<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VmallocSpace")
            .field("start", &self.vpn_to_addr(self.start_vpn))
            .field("nr_pages", &self.nr_vpn)
            .field("mapped", &self.is_mapped())
            .field("config", &self.cfg)
            .finish()
    }
}

// -----------------------------------------------------------------------------
// Construction
// -----------------------------------------------------------------------------

impl<'a, B: Backend> VmallocSpace<'a, B> {
    /// A space over `config.start .. + size_bytes` that hands out address ranges
    /// and page arrays without mapping anything (any backend).
    ///
    /// # Errors
    /// `InvalidConfig` if the range is misaligned, empty or overflows.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(16 << 20)).unwrap();
    /// let cfg = VmallocConfig { start: 0x1000_0000, size_bytes: Some(1 << 30), ..Default::default() };
    /// let vm = VmallocSpace::new(&za, cfg).unwrap();
    /// assert_eq!(vm.vmalloc(4096).unwrap().addr(), 0x1000_0000);
    /// ```
    pub fn new(za: &'a ZoneAllocator<B>, config: VmallocConfig) -> Result<Self, VmallocError> {
        let shift = u32::from(za.config().page_shift);
        let size = config.size_bytes.unwrap_or(DEFAULT_SIZE);
        let page_mask = (1usize << shift) - 1;
        if config.start & page_mask != 0 || size >> shift == 0 {
            return Err(VmallocError::InvalidConfig);
        }
        config
            .start
            .checked_add(size)
            .ok_or(VmallocError::InvalidConfig)?;
        Ok(Self::build(
            za,
            config,
            (config.start >> shift) as u64,
            (size >> shift) as u64,
        ))
    }

    fn build(za: &'a ZoneAllocator<B>, cfg: VmallocConfig, start_vpn: u64, nr_vpn: u64) -> Self {
        let nr_cpus = za.config().nr_cpus.max(1);
        // VMAP_BBMAP_BITS: the space split 16 ways per CPU, clamped to
        // [2 * VMAP_MAX_ALLOC, 1024] pages; a power of two here, for alignment.
        let per_cpu = nr_vpn / (nr_cpus as u64).next_power_of_two() / 16;
        let block_pages = 1u64 << per_cpu.clamp(2 * VMAP_MAX_ALLOC as u64, 1024).ilog2();
        VmallocSpace {
            za,
            cfg,
            page_shift: u32::from(za.config().page_shift),
            start_vpn,
            nr_vpn,
            // vmalloc and vfree run in process context only.
            kva: Lock::new(
                Kva {
                    free: FreeAreaTree::with_range(start_vpn, nr_vpn),
                    busy: BusyMap::default(),
                },
                None,
            ),
            largest_free: AtomicU64::new(nr_vpn),
            blocks: Lock::new(BTreeMap::new(), None),
            percpu: (0..nr_cpus).map(|_| Lock::new(None, None)).collect(),
            block_pages,
            nr_vmalloc_pages: AtomicU64::new(0),
            #[cfg(feature = "std")]
            window: None,
        }
    }

    /// The allocator the space takes its pages from.
    pub fn allocator(&self) -> &'a ZoneAllocator<B> {
        self.za
    }

    /// The options the space was built with.
    pub fn config(&self) -> &VmallocConfig {
        &self.cfg
    }

    /// Whether areas are really mapped (a memfd arena), so their addresses can be
    /// dereferenced.
    pub fn is_mapped(&self) -> bool {
        #[cfg(feature = "std")]
        return self.window.is_some();
        #[cfg(not(feature = "std"))]
        false
    }

    /// The address range of the space, `(start, size_bytes)`.
    pub fn range(&self) -> (usize, usize) {
        (
            self.vpn_to_addr(self.start_vpn),
            (self.nr_vpn << self.page_shift) as usize,
        )
    }

    /// Pages in one `vm_map_ram` block.
    pub fn vmap_block_pages(&self) -> usize {
        self.block_pages as usize
    }
}

#[cfg(feature = "std")]
impl<'a> VmallocSpace<'a, Arena> {
    /// A space whose areas are really mapped: reserves an address range
    /// (`PROT_NONE`) and maps every area's frames into it, so writes through a
    /// vmalloc address land in the frames. The arena must be memfd-backed
    /// (`ArenaOptions { memfd: true, .. }`). `config.start` is ignored.
    ///
    /// # Errors
    /// `NotMappable` if the arena has no memfd or the range cannot be reserved;
    /// `InvalidConfig` for a zero size.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let opts = ArenaOptions { memfd: true, ..Default::default() };
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), opts).unwrap();
    /// let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    /// let area = vm.vmalloc(3 * 4096).unwrap();
    /// let p = area.as_ptr().unwrap();
    /// // SAFETY: the area is mapped, 3 pages long, and owned by this code until vfree.
    /// unsafe { p.as_ptr().add(4096).write(7) };
    /// let frame = za.page_address(area.pages()[1]).unwrap();
    /// // SAFETY: the frame is the area's second page; nothing else writes to it.
    /// assert_eq!(unsafe { frame.as_ptr().read() }, 7);
    /// vm.vfree(area.addr()).unwrap();
    /// ```
    pub fn new_mapped(
        za: &'a ZoneAllocator<Arena>,
        config: VmallocConfig,
    ) -> Result<Self, VmallocError> {
        let arena = za.backend();
        let size = config
            .size_bytes
            .unwrap_or_else(|| arena.len_bytes().saturating_mul(4).max(64 << 20));
        if size >> za.config().page_shift == 0 {
            return Err(VmallocError::InvalidConfig);
        }
        let page = 1usize << za.config().page_shift;
        // Align the base to the largest block and to a vm_map_ram block, so that
        // virtual alignment follows physical alignment (huge mappings are possible).
        let align = page << za.config().max_order.0.max(10);
        let window =
            ArenaWindow::reserve(arena, size, align).map_err(|_| VmallocError::NotMappable)?;
        let shift = u32::from(za.config().page_shift);
        let (start_vpn, nr_vpn) = (
            (window.base() >> shift) as u64,
            (window.len() >> shift) as u64,
        );
        let mut vm = Self::build(za, config, start_vpn, nr_vpn);
        vm.cfg.start = window.base();
        vm.cfg.size_bytes = Some(window.len());
        vm.window = Some(window);
        Ok(vm)
    }
}

// -----------------------------------------------------------------------------
// vmalloc / vfree
// -----------------------------------------------------------------------------

impl<'a, B: Backend> VmallocSpace<'a, B> {
    /// `vmalloc()`: `size` bytes (rounded up to pages) of virtually contiguous
    /// memory from any frames, with a guard page after it.
    ///
    /// # Errors
    /// `ZeroSize`; `TooLarge` above the managed pages; `NoVirtualSpace`;
    /// `NoMemory` (every page taken is given back); `MapFailed` on a mapped space.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Order, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let area = vm.vmalloc(513 * 4096).unwrap();
    /// // High orders first: an order-9 block split into 512 pages, then one more.
    /// assert_eq!(area.nr_pages(), 513);
    /// assert!(area.pages()[..512].windows(2).all(|w| w[1].0 == w[0].0 + 1));
    /// vm.vfree(area.addr()).unwrap();
    /// ```
    pub fn vmalloc(&self, size: usize) -> Result<VmArea, VmallocError> {
        self.vmalloc_node_range(size, 1, self.cfg.gfp, false, Owner::Anyone)
    }

    /// As `vmalloc`, the area owned by the returned guard, which frees it
    /// (`vfree`) when dropped. Until then `vfree` of its address is refused
    /// (`VmallocError::Owned`), and on a mapped space the guard gives out the
    /// area's bytes as slices (`OwnedVmArea::bytes_mut`).
    ///
    /// # Errors
    /// As `vmalloc`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, VmallocConfig, VmallocError, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let addr = {
    ///     let area = vm.vmalloc_owned(3 * 4096).unwrap();
    ///     assert_eq!(area.nr_pages(), 3);
    ///     area.addr()
    /// }; // freed here
    /// assert_eq!(vm.vfree(addr), Err(VmallocError::UnknownAddress(addr)));
    /// ```
    pub fn vmalloc_owned(&self, size: usize) -> Result<OwnedVmArea<'_, 'a, B>, VmallocError> {
        let area = self.vmalloc_node_range(size, 1, self.cfg.gfp, false, Owner::Guard)?;
        Ok(OwnedVmArea {
            space: self,
            area: Some(area),
        })
    }

    /// `vzalloc()`: as `vmalloc`, the memory zeroed.
    ///
    /// # Errors
    /// As `vmalloc`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{ArenaOptions, Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let opts = ArenaOptions { memfd: true, ..Default::default() };
    /// let za = ZoneAllocator::with_arena(Config::with_bytes(16 << 20), opts).unwrap();
    /// let vm = VmallocSpace::new_mapped(&za, VmallocConfig::default()).unwrap();
    /// let area = vm.vzalloc(10_000).unwrap();
    /// let p = area.as_ptr().unwrap().as_ptr();
    /// // SAFETY: the area is mapped and owned here; 3 pages cover 10 000 bytes.
    /// assert!((0..10_000).all(|i| unsafe { p.add(i).read() } == 0));
    /// vm.vfree(area.addr()).unwrap();
    /// ```
    pub fn vzalloc(&self, size: usize) -> Result<VmArea, VmallocError> {
        self.vmalloc_node_range(size, 1, self.cfg.gfp | Gfp::ZERO, false, Owner::Anyone)
    }

    /// `vmalloc_huge()`: as `vmalloc`, preferring pageblock-order pages (huge pages)
    /// when `size` is at least a pageblock: the size is rounded up to whole
    /// pageblocks and the address aligned to one. Falls back to small pages when
    /// huge ones run out, as Linux does.
    ///
    /// # Errors
    /// As `vmalloc`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Order, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let area = vm.vmalloc_huge(3 << 20).unwrap(); // 1.5 pageblocks
    /// assert_eq!(area.page_order(), Order(9));
    /// assert_eq!(area.nr_pages(), 1024); // rounded up to two pageblocks
    /// assert_eq!(area.addr() % (2 << 20), 0);
    /// vm.vfree(area.addr()).unwrap();
    /// ```
    pub fn vmalloc_huge(&self, size: usize) -> Result<VmArea, VmallocError> {
        self.vmalloc_node_range(size, 1, self.cfg.gfp, true, Owner::Anyone)
    }

    /// `__vmalloc_node(size, align, ..)`: as `vmalloc`, the address aligned to
    /// `align` bytes (a power of two; anything up to a page is a page).
    ///
    /// # Errors
    /// `InvalidAlign` if `align` is not a power of two; otherwise as `vmalloc`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let a = vm.vmalloc(4096).unwrap();
    /// let b = vm.vmalloc_align(4096, 1 << 20).unwrap();
    /// assert_eq!(b.addr() % (1 << 20), 0);
    /// assert!(vm.vmalloc_align(4096, 3).is_err());
    /// vm.vfree(a.addr()).unwrap();
    /// vm.vfree(b.addr()).unwrap();
    /// ```
    pub fn vmalloc_align(&self, size: usize, align: usize) -> Result<VmArea, VmallocError> {
        self.vmalloc_node_range(size, align, self.cfg.gfp, false, Owner::Anyone)
    }

    /// `vfree()`: unmaps the `vmalloc` area starting at `addr`, gives its pages back
    /// (as `VmallocConfig::vfree_mode` says) and its address range to the free tree.
    ///
    /// # Errors
    /// `UnknownAddress` if no live area starts at `addr` (a second `vfree`, an
    /// address inside an area, a stranger); `WrongKind` for a `vmap` or
    /// `vm_map_ram` area; `Owned` for an area an `OwnedVmArea` owns; nothing
    /// changes then. `MapFailed` if unmapping failed
    /// (the area stays live). `PageFree` if some frame of the area was not the
    /// area's any more (the area is gone, every frame still owned freed); the
    /// public API cannot bring that about, since every raw path refuses an area's
    /// pages (`FreeError::Busy`).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, VmallocConfig, VmallocError, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let area = vm.vmalloc(8192).unwrap();
    /// vm.vfree(area.addr()).unwrap();
    /// assert_eq!(vm.vfree(area.addr()), Err(VmallocError::UnknownAddress(area.addr())));
    /// ```
    pub fn vfree(&self, addr: usize) -> Result<(), VmallocError> {
        self.vfree_by(addr, Owner::Anyone)
    }

    /// `vfree` by `who`: only the guard of an owned area frees it.
    fn vfree_by(&self, addr: usize, who: Owner) -> Result<(), VmallocError> {
        let (vpn, busy) = self.take_busy(addr, AreaKind::Vmalloc, None, who)?;
        self.unmap_or_restore(vpn, &busy)?;
        let freed = self.free_page_array(&busy.area.pages);
        self.release_taken(vpn, &busy);
        freed.map_err(|error| VmallocError::PageFree { addr, error })
    }

    /// The whole `__vmalloc_node_range()`: huge attempt, then small pages.
    fn vmalloc_node_range(
        &self,
        size: usize,
        align: usize,
        gfp: Gfp,
        huge: bool,
        owner: Owner,
    ) -> Result<VmArea, VmallocError> {
        if size == 0 {
            return Err(VmallocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(VmallocError::InvalidAlign(align));
        }
        let nr_pages = (size as u64).div_ceil(1 << self.page_shift);
        if nr_pages > self.za.managed_pages() {
            return Err(VmallocError::TooLarge { nr_pages });
        }
        let align_pages = ((align >> self.page_shift) as u64).max(1);
        if huge {
            let pb = self.za.config().pageblock_order;
            let pb_nr = pb.nr_pages();
            if nr_pages >= pb_nr {
                let nr_huge = nr_pages.next_multiple_of(pb_nr);
                match self.vmalloc_pages(nr_huge, align_pages.max(pb_nr), gfp, pb, owner) {
                    Ok(area) => return Ok(area),
                    // Linux's `fail:` label: retry with small pages.
                    Err(VmallocError::NoMemory { .. } | VmallocError::NoVirtualSpace { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.vmalloc_pages(nr_pages, align_pages, gfp, Order(0), owner)
    }

    /// KVA, page array, mapping, then publication in the busy map.
    fn vmalloc_pages(
        &self,
        nr_pages: u64,
        align_pages: u64,
        gfp: Gfp,
        page_order: Order,
        owner: Owner,
    ) -> Result<VmArea, VmallocError> {
        let owned = owner == Owner::Guard;
        let nr_vpn = nr_pages + u64::from(self.cfg.guard_pages);
        // Nothing to map, and room for the area by the last hold's count: the
        // pages first, then the address range and the busy entry in one hold of
        // the KVA lock. Were the room taken meanwhile, the pages go back and the
        // call fails as it would have.
        let room = nr_vpn.saturating_add(align_pages - 1);
        if !self.is_mapped() && self.largest_free.load(Ordering::Relaxed) >= room {
            let pages = self.alloc_page_array(gfp, nr_pages, page_order)?;
            let mut kva = self.kva();
            if let Some(vpn) = kva.free.alloc(nr_vpn, align_pages) {
                let kind = AreaKind::Vmalloc;
                return Ok(self.insert_busy(&mut kva, vpn, nr_vpn, pages, kind, page_order, owned));
            }
            drop(kva);
            // As below: every page that is still ours goes back.
            let _ = self.free_page_array(&pages);
            return Err(VmallocError::NoVirtualSpace { nr_pages: nr_vpn });
        }
        let vpn = self.kva_alloc(nr_vpn, align_pages)?;
        let pages = match self.alloc_page_array(gfp, nr_pages, page_order) {
            Ok(p) => p,
            Err(e) => {
                self.kva_release(vpn, nr_vpn);
                return Err(e);
            }
        };
        if let Err(e) = self.map_pages(vpn, &pages) {
            // Pages another thread freed behind our back are refused and the rest
            // freed (`free_page_array`); the mapping's error is the one to report.
            let _ = self.free_page_array(&pages);
            self.kva_release(vpn, nr_vpn);
            return Err(e);
        }
        Ok(self.publish(vpn, nr_vpn, pages, AreaKind::Vmalloc, page_order, owned))
    }

    /// `vm_area_alloc_pages()`: `nr` order-0 page entries, from high-order blocks
    /// first, then bulk, then single allocations of `page_order` (see the module
    /// documentation). On failure every page taken is freed.
    fn alloc_page_array(
        &self,
        gfp: Gfp,
        nr: u64,
        page_order: Order,
    ) -> Result<Arc<[Pfn]>, VmallocError> {
        let za = self.za;
        // Every allocation call below counts at `FaultSite::VmallocBacking`; an
        // injected fault makes that call fail, to exercise each unwinding path.
        let inject = || za.debug.faults.should_fail(FaultSite::VmallocBacking);
        let mut pages: Vec<Pfn> = Vec::new();
        // A block of order >= 1 is vmalloc's from its allocation on, and comes
        // split (`Head::vmalloc`): only its head says so until a call on one of
        // its pages alone (see `FLAG_LAZY`), and `vfree` in bulk takes it back
        // whole. Nothing else may change it, and compaction never isolates it.
        let take = |pages: &mut Vec<Pfn>, p: Pfn, order: Order| {
            if pages.capacity() == 0 {
                pages.reserve_exact(nr as usize);
            }
            pages.extend((0..order.nr_pages()).map(|i| p.add(i)));
        };
        // 1. High orders first, lowering the ceiling on each failure.
        if self.cfg.high_order_first {
            let large_gfp = gfp | Gfp::NOWARN | Gfp::NORETRY;
            let mut ceiling = za.config().max_order.0;
            loop {
                let remaining = nr - pages.len() as u64;
                if remaining == 0 {
                    break;
                }
                let large = ceiling.min(remaining.ilog2() as u8);
                if large <= page_order.0 {
                    break;
                }
                let got = if inject() {
                    None
                } else {
                    za.alloc_pages_as(large_gfp, Order(large), Head::vmalloc(Order(large)))
                        .ok()
                };
                match got {
                    // One block for the whole area (a power-of-two size): the
                    // array is built where it stays, with no copy.
                    Some(p) if pages.is_empty() && Order(large).nr_pages() == nr => {
                        return Ok((0..nr).map(|i| p.add(i)).collect());
                    }
                    Some(p) => take(&mut pages, p, Order(large)),
                    None => ceiling = large - 1,
                }
            }
        }
        // 2. Order-0 bulk, at most VMALLOC_BULK_MAX pages a request. The slots
        // (1.6 KiB) are cleared only when step 1 left something to do.
        if page_order.0 == 0 && (pages.len() as u64) < nr {
            let mut slots = [None; VMALLOC_BULK_MAX];
            loop {
                let remaining = nr - pages.len() as u64;
                if remaining == 0 {
                    break;
                }
                let want = remaining.min(VMALLOC_BULK_MAX as u64) as usize;
                if inject() {
                    break;
                }
                let batch = &mut slots[..want];
                batch.fill(None);
                let got = za.alloc_pages_bulk_as(gfp, batch, Head::VMALLOC);
                pages.extend(batch.iter().flatten());
                if got < want {
                    break;
                }
            }
        }
        // 3. One block of `page_order` at a time.
        while (pages.len() as u64) < nr {
            let got = if inject() {
                None
            } else {
                za.alloc_pages_as(gfp, page_order, Head::vmalloc(page_order))
                    .ok()
            };
            match got {
                Some(p) => take(&mut pages, p, page_order),
                None => {
                    // As in `vmalloc_pages`: the shortage is the error to report.
                    let _ = self.free_page_array(&pages);
                    return Err(VmallocError::NoMemory { nr_pages: nr });
                }
            }
        }
        Ok(pages.into())
    }

    /// Gives an array of order-0 pages back, as the vfree mode says. Every page
    /// that can be freed is; the first refusal is returned.
    fn free_page_array(&self, pages: &[Pfn]) -> Result<(), FreeError> {
        match self.cfg.vfree_mode {
            VfreeMode::Bulk => match self
                .za
                .free_pages_bulk_by(&ascending(pages), Holder::Vmalloc)
            {
                Ok(()) => Ok(()),
                // `free_pages_bulk` changed nothing; free what is still ours.
                Err(e) => {
                    let _ = self.free_pages_each(pages);
                    Err(e)
                }
            },
            VfreeMode::PerPage => self.free_pages_each(pages),
        }
    }

    /// The pre-2026 vfree loop: one order-0 free per page.
    fn free_pages_each(&self, pages: &[Pfn]) -> Result<(), FreeError> {
        let mut first = Ok(());
        for &p in pages {
            // As `free_pages` does, page by page: the CPU read each time.
            if let Err(e) = self.za.free_pages_by(
                Via::Here(self.za.current_cpu()),
                p,
                Order(0),
                Holder::Vmalloc,
            ) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// `pages` in ascending order: as they are if they are, else a sorted copy.
/// `free_pages_bulk` takes pages in ascending order whatever the array's, and
/// reads an array out of order a window at a time (it makes no copy, so that
/// its callers' frees call no heap); vmalloc, whose areas keep their page arrays
/// on the heap, sorts them first, which is cheaper for a large area.
fn ascending(pages: &[Pfn]) -> alloc::borrow::Cow<'_, [Pfn]> {
    if pages.windows(2).all(|w| w[0] < w[1]) {
        alloc::borrow::Cow::Borrowed(pages)
    } else {
        let mut v = pages.to_vec();
        v.sort_unstable();
        alloc::borrow::Cow::Owned(v)
    }
}

// -----------------------------------------------------------------------------
// vmap / vunmap
// -----------------------------------------------------------------------------

impl<B: Backend> VmallocSpace<'_, B> {
    /// `vmap()`: maps the caller's frames, in order, at one contiguous address
    /// range (with a guard page after it). The frames stay the caller's: `vunmap`
    /// does not free them.
    ///
    /// # Errors
    /// `ZeroSize` for no pages; `BadPage` for a frame in no zone, a hole or bad;
    /// `NoVirtualSpace`; `MapFailed`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let a = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    /// let b = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    /// let area = vm.vmap(&[b, a]).unwrap();
    /// assert_eq!(vm.vmalloc_to_pfn(area.addr() + 4096), Some(a));
    /// vm.vunmap(area.addr()).unwrap();
    /// za.free_pages(a, Order(0)).unwrap();
    /// za.free_pages(b, Order(0)).unwrap();
    /// ```
    pub fn vmap(&self, pages: &[Pfn]) -> Result<VmArea, VmallocError> {
        if pages.is_empty() {
            return Err(VmallocError::ZeroSize);
        }
        self.check_user_pages(pages)?;
        let nr = pages.len() as u64;
        let nr_vpn = nr + u64::from(self.cfg.guard_pages);
        let vpn = self.kva_alloc(nr_vpn, 1)?;
        if let Err(e) = self.map_pages(vpn, pages) {
            self.kva_release(vpn, nr_vpn);
            return Err(e);
        }
        Ok(self.publish(vpn, nr_vpn, pages.into(), AreaKind::Vmap, Order(0), false))
    }

    /// `vunmap()`: removes the `vmap` mapping starting at `addr`; the frames are
    /// left to the caller.
    ///
    /// # Errors
    /// `UnknownAddress` if no live area starts at `addr`; `WrongKind` for a
    /// `vmalloc` or `vm_map_ram` area; nothing changes then. `MapFailed` if
    /// unmapping failed (the area stays live).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{AreaKind, Config, Gfp, Order, VmallocConfig, VmallocError, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let v = vm.vmalloc(4096).unwrap();
    /// assert_eq!(vm.vunmap(v.addr()), Err(VmallocError::WrongKind { addr: v.addr(), kind: AreaKind::Vmalloc }));
    /// vm.vfree(v.addr()).unwrap();
    /// ```
    pub fn vunmap(&self, addr: usize) -> Result<(), VmallocError> {
        let (vpn, busy) = self.take_busy(addr, AreaKind::Vmap, None, Owner::Anyone)?;
        self.unmap_or_restore(vpn, &busy)?;
        self.release_taken(vpn, &busy);
        Ok(())
    }

    /// Refuses frames that are in no zone, holes or bad.
    fn check_user_pages(&self, pages: &[Pfn]) -> Result<(), VmallocError> {
        for &p in pages {
            match self.za.frame_state(p) {
                None | Some(FrameState::Hole) | Some(FrameState::Bad) => {
                    return Err(VmallocError::BadPage(p))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------
// vm_map_ram / vm_unmap_ram
// -----------------------------------------------------------------------------

impl<B: Backend> VmallocSpace<'_, B> {
    /// `vm_map_ram()`: a fast mapping of the caller's frames for short-lived use.
    /// Up to `VMAP_MAX_ALLOC` pages come from this CPU's current block (no KVA lock,
    /// no guard page); larger counts get an area of their own. Undo with
    /// `vm_unmap_ram(addr, pages.len())`.
    ///
    /// # Errors
    /// `ZeroSize`; `BadPage`; `NoVirtualSpace`; `MapFailed`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let p = za.alloc_pages(Gfp::KERNEL, Order(2)).unwrap();
    /// let pages: Vec<_> = (0..4).map(|i| p.add(i)).collect();
    /// let a = vm.vm_map_ram(&pages).unwrap();
    /// let b = vm.vm_map_ram(&pages[..1]).unwrap();
    /// assert_eq!(b, a + 4 * 4096); // carved from the same block
    /// vm.vm_unmap_ram(a, 4).unwrap();
    /// vm.vm_unmap_ram(b, 1).unwrap();
    /// za.free_pages(p, Order(2)).unwrap();
    /// ```
    pub fn vm_map_ram(&self, pages: &[Pfn]) -> Result<usize, VmallocError> {
        let count = pages.len();
        if count == 0 {
            return Err(VmallocError::ZeroSize);
        }
        self.check_user_pages(pages)?;
        if count > VMAP_MAX_ALLOC {
            let nr = count as u64;
            let vpn = self.kva_alloc(nr, 1)?;
            if let Err(e) = self.map_pages(vpn, pages) {
                self.kva_release(vpn, nr);
                return Err(e);
            }
            let area = self.publish(vpn, nr, pages.into(), AreaKind::VmMapRam, Order(0), false);
            return Ok(area.addr);
        }
        let (block, off) = self.vb_alloc(count as u64)?;
        let vpn = block.vpn + off;
        if let Err(e) = self.map_pages(vpn, pages) {
            self.vb_release(&block, off);
            return Err(e);
        }
        Ok(self.vpn_to_addr(vpn))
    }

    /// `vm_unmap_ram()`: removes a `vm_map_ram` mapping of `count` pages at `addr`.
    ///
    /// # Errors
    /// `ZeroSize`; `UnknownAddress` if no live mapping starts at `addr`;
    /// `WrongCount` if it has another page count; `WrongKind` if `addr` is a
    /// `vmalloc` or `vmap` area; nothing changes then. `MapFailed` if unmapping
    /// failed (the mapping stays live).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, Gfp, Order, VmallocConfig, VmallocError, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
    /// let a = vm.vm_map_ram(&[p]).unwrap();
    /// assert!(matches!(vm.vm_unmap_ram(a, 2), Err(VmallocError::WrongCount { .. })));
    /// vm.vm_unmap_ram(a, 1).unwrap();
    /// assert_eq!(vm.vm_unmap_ram(a, 1), Err(VmallocError::UnknownAddress(a)));
    /// za.free_pages(p, Order(0)).unwrap();
    /// ```
    pub fn vm_unmap_ram(&self, addr: usize, count: usize) -> Result<(), VmallocError> {
        if count == 0 {
            return Err(VmallocError::ZeroSize);
        }
        if count > VMAP_MAX_ALLOC {
            let (vpn, busy) =
                self.take_busy(addr, AreaKind::VmMapRam, Some(count), Owner::Anyone)?;
            self.unmap_or_restore(vpn, &busy)?;
            self.release_taken(vpn, &busy);
            return Ok(());
        }
        let vpn = self
            .addr_to_vpn(addr)
            .ok_or(VmallocError::UnknownAddress(addr))?;
        let Some(block) = self.block_containing(vpn) else {
            return Err(self.not_a_block_mapping(addr));
        };
        let off = vpn - block.vpn;
        {
            let mut st = block.state.lock();
            match st.live.get_mut(&off) {
                Some(a) if !a.unmapping => {
                    if a.count != count as u64 {
                        return Err(VmallocError::WrongCount {
                            addr,
                            expected: a.count as usize,
                            given: count,
                        });
                    }
                    a.unmapping = true;
                }
                _ => return Err(VmallocError::UnknownAddress(addr)),
            }
        }
        if let Err(e) = self.unmap_pages(vpn, count as u64) {
            if let Some(a) = block.state.lock().live.get_mut(&off) {
                a.unmapping = false;
            }
            return Err(e);
        }
        self.vb_release(&block, off);
        Ok(())
    }

    /// The error for a small `vm_unmap_ram` outside every block: `WrongKind` if
    /// a busy area of another kind starts there, else `UnknownAddress`.
    fn not_a_block_mapping(&self, addr: usize) -> VmallocError {
        let kind = self
            .addr_to_vpn(addr)
            .and_then(|vpn| self.kva().busy.get(&vpn).map(|b| b.area.kind));
        match kind {
            Some(kind) => VmallocError::WrongKind { addr, kind },
            None => VmallocError::UnknownAddress(addr),
        }
    }

    /// The live block containing virtual page `vpn`.
    fn block_containing(&self, vpn: u64) -> Option<Arc<VmapBlock>> {
        let blocks = self.blocks.lock();
        let (&start, b) = blocks.range(..=vpn).next_back()?;
        (vpn - start < self.block_pages).then(|| b.clone())
    }

    /// `vb_alloc()`: carves `count` pages (rounded up to a power of two) from this
    /// CPU's block, retiring it and starting a new one when it is full. Returns the
    /// block and the page offset.
    fn vb_alloc(&self, count: u64) -> Result<(Arc<VmapBlock>, u64), VmallocError> {
        let reserved = count.next_power_of_two();
        let cpu = self.za.current_cpu() % self.percpu.len();
        let mut slot = self.percpu[cpu].lock();
        if let Some(b) = slot.as_ref() {
            let mut st = b.state.lock();
            if st.used + reserved <= self.block_pages {
                let off = st.used;
                st.used += reserved;
                st.live.insert(
                    off,
                    RamAlloc {
                        count,
                        reserved,
                        unmapping: false,
                    },
                );
                drop(st);
                return Ok((b.clone(), off));
            }
            // Full: retire it. Its space comes back when its last mapping goes.
            st.retired = true;
            let empty = st.live.is_empty();
            drop(st);
            if let Some(old) = slot.take() {
                if empty {
                    self.free_vmap_block(&old);
                }
            }
        }
        let vpn = self.kva_alloc(self.block_pages, self.block_pages)?;
        let mut live = BTreeMap::new();
        live.insert(
            0,
            RamAlloc {
                count,
                reserved,
                unmapping: false,
            },
        );
        let block = Arc::new(VmapBlock {
            vpn,
            state: Lock::new(
                BlockState {
                    used: reserved,
                    live,
                    retired: false,
                },
                None,
            ),
        });
        self.publish(
            vpn,
            self.block_pages,
            Arc::new([]),
            AreaKind::VmapBlock,
            Order(0),
            false,
        );
        self.blocks.lock().insert(vpn, block.clone());
        *slot = Some(block.clone());
        Ok((block, 0))
    }

    /// Drops the mapping at `off` of `block` (already unmapped), freeing the block
    /// if it was retired and this was its last mapping.
    fn vb_release(&self, block: &Arc<VmapBlock>, off: u64) {
        let last = {
            let mut st = block.state.lock();
            let removed = st.live.remove(&off);
            debug_assert!(removed.is_some());
            st.retired && st.live.is_empty()
        };
        if last {
            self.free_vmap_block(block);
        }
    }

    /// Returns a retired, empty block's KVA to the free tree.
    fn free_vmap_block(&self, block: &VmapBlock) {
        self.blocks.lock().remove(&block.vpn);
        let mut kva = self.kva();
        let removed = kva.busy.remove(&block.vpn);
        debug_assert!(removed.is_some());
        let r = kva.free.free(block.vpn, self.block_pages);
        debug_assert!(r.is_ok(), "{r:?}");
    }
}

// -----------------------------------------------------------------------------
// Lookup and statistics
// -----------------------------------------------------------------------------

impl<B: Backend> VmallocSpace<'_, B> {
    /// `find_vm_area()`: the busy area starting at `addr`.
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{AreaKind, Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let a = vm.vmalloc(4096).unwrap();
    /// assert_eq!(vm.area(a.addr()).unwrap().kind(), AreaKind::Vmalloc);
    /// assert!(vm.area(a.addr() + 4096).is_none());
    /// vm.vfree(a.addr()).unwrap();
    /// ```
    pub fn area(&self, addr: usize) -> Option<VmArea> {
        let vpn = self.addr_to_vpn(addr)?;
        self.kva().busy.get(&vpn).map(|b| b.area.clone())
    }

    /// `vmalloc_to_pfn()`: the frame behind any address of a `vmalloc`, `vmap` or
    /// large `vm_map_ram` area (guard pages and small `vm_map_ram` mappings have
    /// none here).
    ///
    /// # Examples
    /// ```
    /// use zonealloc::{Config, VmallocConfig, VmallocSpace, ZoneAllocator};
    /// let za = ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap();
    /// let vm = VmallocSpace::new(&za, VmallocConfig::default()).unwrap();
    /// let a = vm.vmalloc(3 * 4096).unwrap();
    /// assert_eq!(vm.vmalloc_to_pfn(a.addr() + 2 * 4096 + 5), Some(a.pages()[2]));
    /// assert_eq!(vm.vmalloc_to_pfn(a.addr() + 3 * 4096), None); // the guard page
    /// vm.vfree(a.addr()).unwrap();
    /// ```
    pub fn vmalloc_to_pfn(&self, addr: usize) -> Option<Pfn> {
        let vpn = (addr >> self.page_shift) as u64;
        let kva = self.kva();
        let (start, b) = kva.busy.floor(vpn)?;
        b.area
            .pages
            .get(usize::try_from(vpn - start).ok()?)
            .copied()
    }

    /// Every busy area, lowest address first (`/proc/vmallocinfo`'s list).
    pub fn areas(&self) -> Vec<VmArea> {
        self.kva()
            .busy
            .iter()
            .map(|(_, b)| b.area.clone())
            .collect()
    }

    /// Pages owned by `vmalloc` areas (`NR_VMALLOC`).
    pub fn nr_vmalloc_pages(&self) -> u64 {
        self.nr_vmalloc_pages.load(Ordering::Relaxed)
    }

    /// Free address space: `(total bytes, largest free range in bytes)`.
    pub fn free_space(&self) -> (u64, u64) {
        let kva = self.kva();
        (
            kva.free.free_units() << self.page_shift,
            kva.free.largest() << self.page_shift,
        )
    }

    /// The busy areas in `/proc/vmallocinfo`'s format (`0xstart-0xend size
    /// pages=N vmalloc`, without the caller and NUMA columns), one line each; the
    /// size includes the guard page, as Linux's does.
    pub fn vmallocinfo(&self) -> String {
        let kva = self.kva();
        let mut out = String::new();
        for (vpn, b) in kva.busy.iter() {
            let start = self.vpn_to_addr(vpn);
            let bytes = (b.nr_vpn << self.page_shift) as usize;
            let what = match b.area.kind {
                AreaKind::Vmalloc => "vmalloc",
                AreaKind::Vmap => "vmap",
                AreaKind::VmMapRam | AreaKind::VmapBlock => "vm_map_ram",
            };
            let pages = if b.area.pages.is_empty() {
                String::new()
            } else {
                format!(" pages={}", b.area.pages.len())
            };
            out += &format!(
                "{:#018x}-{:#018x} {:>7}{pages} {what}\n",
                start,
                start + bytes,
                bytes
            );
        }
        out
    }

    /// Checks the whole space at a quiescent point: the tree's invariants; free
    /// and busy areas tiling the range exactly; each busy area's size, guard and
    /// page array; every `vmalloc` page an allocated order-0 frame; the
    /// `nr_vmalloc_pages` counter; every `vm_map_ram` block registered, busy, and
    /// holding non-overlapping mappings inside its bump pointer.
    ///
    /// # Errors
    /// The first broken invariant.
    pub fn check_invariants(&self) -> Result<VmallocReport, InvariantViolation> {
        let mut r = VmallocReport::default();
        let fail = |what: String| InvariantViolation { pfn: None, what };
        // Lock order: per-CPU slots, block registry, KVA.
        let slots: Vec<_> = self.percpu.iter().map(|s| s.lock()).collect();
        let blocks = self.blocks.lock();
        let kva = self.kva();
        r.checks += kva
            .free
            .check_invariants()
            .map_err(|v| fail(format!("free tree: {v}")))?;
        let mut ensure = |ok: bool, what: &dyn Fn() -> String| {
            r.checks += 1;
            if ok {
                Ok(())
            } else {
                Err(fail(what()))
            }
        };
        // Free and busy areas tile [start, end) exactly.
        let mut spans: Vec<(u64, u64, bool)> =
            kva.free.iter().map(|(s, n)| (s, n, false)).collect();
        spans.extend(kva.busy.iter().map(|(s, b)| (s, b.nr_vpn, true)));
        spans.sort_unstable();
        let mut at = self.start_vpn;
        for &(s, n, busy) in &spans {
            ensure(s == at, &|| {
                format!(
                    "{} area at {:#x}: expected one at {:#x}",
                    if busy { "busy" } else { "free" },
                    self.vpn_to_addr(s),
                    self.vpn_to_addr(at)
                )
            })?;
            at = s + n;
        }
        ensure(at == self.start_vpn + self.nr_vpn, &|| {
            format!(
                "areas end at {:#x}, not the end of the range",
                self.vpn_to_addr(at)
            )
        })?;
        let guard = u64::from(self.cfg.guard_pages);
        let mut vmalloc_pages = 0;
        let mut nr_blocks = 0;
        for (vpn, b) in kva.busy.iter() {
            let a = &b.area;
            let addr = self.vpn_to_addr(vpn);
            ensure(a.addr == addr, &|| {
                format!("area {addr:#x} records {:#x}", a.addr)
            })?;
            let nr = a.pages.len() as u64;
            let expect_vpn = match a.kind {
                AreaKind::Vmalloc | AreaKind::Vmap => nr + guard,
                AreaKind::VmMapRam => nr,
                AreaKind::VmapBlock => self.block_pages,
            };
            ensure(b.nr_vpn == expect_vpn, &|| {
                format!(
                    "area {addr:#x}: {} pages of KVA, expected {expect_vpn}",
                    b.nr_vpn
                )
            })?;
            let mapped = self.is_mapped() && a.kind != AreaKind::VmapBlock;
            ensure(a.mapped == mapped, &|| {
                format!("area {addr:#x}: mapped flag disagrees with the space")
            })?;
            match a.kind {
                AreaKind::Vmalloc => {
                    vmalloc_pages += nr;
                    for &p in a.pages.iter() {
                        let st = self.za.frame_state(p);
                        ensure(
                            matches!(st, Some(FrameState::Allocated { order: Order(0), refcount }) if refcount > 0),
                            &|| format!("area {addr:#x}: page {p} is {st:?}"),
                        )?;
                    }
                    ensure(
                        a.page_order.0 == 0
                            || (vpn % a.page_order.nr_pages() == 0
                                && nr.is_multiple_of(a.page_order.nr_pages())),
                        &|| format!("huge area {addr:#x} misaligned"),
                    )?;
                }
                AreaKind::VmapBlock => {
                    nr_blocks += 1;
                    let Some(blk) = blocks.get(&vpn) else {
                        return Err(fail(format!("block {addr:#x} is busy but not registered")));
                    };
                    let st = blk.state.lock();
                    ensure(st.used <= self.block_pages, &|| {
                        format!("block {addr:#x} overfull")
                    })?;
                    let mut end = 0;
                    for (&off, m) in &st.live {
                        ensure(
                            off >= end
                                && off + m.reserved <= st.used
                                && m.count <= m.reserved
                                && !m.unmapping,
                            &|| format!("block {addr:#x}: bad mapping at page {off}"),
                        )?;
                        end = off + m.reserved;
                    }
                    let current = slots
                        .iter()
                        .any(|s| s.as_ref().is_some_and(|c| Arc::ptr_eq(c, blk)));
                    ensure(current != st.retired, &|| {
                        format!("block {addr:#x}: retired flag disagrees with the per-CPU slots")
                    })?;
                    ensure(!st.retired || !st.live.is_empty(), &|| {
                        format!("block {addr:#x}: retired and empty but not freed")
                    })?;
                }
                AreaKind::Vmap | AreaKind::VmMapRam => {}
            }
        }
        ensure(blocks.len() as u64 == nr_blocks, &|| {
            format!("{} registered blocks, {nr_blocks} busy", blocks.len())
        })?;
        ensure(vmalloc_pages == self.nr_vmalloc_pages(), &|| {
            format!(
                "vmalloc areas hold {vmalloc_pages} pages, counter says {}",
                self.nr_vmalloc_pages()
            )
        })?;
        r.free_areas = kva.free.len() as u64;
        r.busy_areas = kva.busy.len() as u64;
        r.vmalloc_pages = vmalloc_pages;
        r.ram_blocks = nr_blocks;
        Ok(r)
    }
}

// -----------------------------------------------------------------------------
// KVA and mapping helpers
// -----------------------------------------------------------------------------

impl<B: Backend> VmallocSpace<'_, B> {
    #[inline]
    fn vpn_to_addr(&self, vpn: u64) -> usize {
        (vpn << self.page_shift) as usize
    }

    /// The virtual page number of a page-aligned address inside the space.
    #[inline]
    fn addr_to_vpn(&self, addr: usize) -> Option<u64> {
        let page_mask = (1usize << self.page_shift) - 1;
        let vpn = (addr >> self.page_shift) as u64;
        (addr & page_mask == 0 && vpn.wrapping_sub(self.start_vpn) < self.nr_vpn).then_some(vpn)
    }

    /// Takes the KVA lock.
    #[inline]
    fn kva(&self) -> KvaGuard<'_> {
        KvaGuard {
            kva: self.kva.lock(),
            largest_free: &self.largest_free,
        }
    }

    /// `alloc_vmap_area()`: `nr` pages of KVA aligned to `align` pages.
    fn kva_alloc(&self, nr: u64, align: u64) -> Result<u64, VmallocError> {
        self.kva()
            .free
            .alloc(nr, align)
            .ok_or(VmallocError::NoVirtualSpace { nr_pages: nr })
    }

    /// Returns KVA to the free tree, merging with its neighbours.
    fn kva_release(&self, vpn: u64, nr: u64) {
        let r = self.kva().free.free(vpn, nr);
        debug_assert!(r.is_ok(), "{r:?}");
    }

    /// Records a busy area (owned by an `OwnedVmArea` if `owned`) and returns
    /// its handle.
    fn publish(
        &self,
        vpn: u64,
        nr_vpn: u64,
        pages: Arc<[Pfn]>,
        kind: AreaKind,
        page_order: Order,
        owned: bool,
    ) -> VmArea {
        self.insert_busy(&mut self.kva(), vpn, nr_vpn, pages, kind, page_order, owned)
    }

    /// `publish` with the KVA lock held already.
    #[allow(clippy::too_many_arguments)]
    fn insert_busy(
        &self,
        kva: &mut KvaGuard<'_>,
        vpn: u64,
        nr_vpn: u64,
        pages: Arc<[Pfn]>,
        kind: AreaKind,
        page_order: Order,
        owned: bool,
    ) -> VmArea {
        let nr_bytes = if kind == AreaKind::VmapBlock {
            nr_vpn as usize
        } else {
            pages.len()
        };
        let area = VmArea {
            addr: self.vpn_to_addr(vpn),
            size_bytes: nr_bytes << self.page_shift,
            pages,
            kind,
            page_order,
            mapped: self.is_mapped() && kind != AreaKind::VmapBlock,
        };
        if kind == AreaKind::Vmalloc {
            self.add_vmalloc_pages(kva, area.pages.len() as i64);
        }
        let old = kva.busy.insert(
            vpn,
            Busy {
                nr_vpn,
                area: area.clone(),
                owned,
            },
        );
        debug_assert!(old.is_none());
        area
    }

    /// Adds `n` to `nr_vmalloc_pages`, whose writers all hold the `kva` lock
    /// (`_kva`, the proof): a load and a store, no read-modify-write.
    #[inline]
    fn add_vmalloc_pages(&self, _kva: &KvaGuard<'_>, n: i64) {
        let c = self.nr_vmalloc_pages.load(Ordering::Relaxed);
        self.nr_vmalloc_pages
            .store(c.wrapping_add_signed(n), Ordering::Relaxed);
    }

    /// Takes the busy area of `kind` starting at `addr` out of the busy map (with
    /// `count` pages, if given; an owned area only for its guard), or explains
    /// why not, changing nothing. An area
    /// with no mapping gives its address range back in the same lock hold (there
    /// is nothing to unmap first); a mapped one keeps it until `release_taken`,
    /// after the unmapping.
    fn take_busy(
        &self,
        addr: usize,
        kind: AreaKind,
        count: Option<usize>,
        who: Owner,
    ) -> Result<(u64, Busy), VmallocError> {
        let vpn = self
            .addr_to_vpn(addr)
            .ok_or(VmallocError::UnknownAddress(addr))?;
        let mut guard = self.kva();
        let kva = &mut *guard;
        let taken = kva.busy.take_if(vpn, |b| {
            if b.area.kind != kind {
                return Err(VmallocError::WrongKind {
                    addr,
                    kind: b.area.kind,
                });
            }
            if b.owned && who != Owner::Guard {
                return Err(VmallocError::Owned(addr));
            }
            match count {
                Some(given) if b.area.pages.len() != given => Err(VmallocError::WrongCount {
                    addr,
                    expected: b.area.pages.len(),
                    given,
                }),
                _ => Ok(()),
            }
        })?;
        let Some(b) = taken else {
            return Err(VmallocError::UnknownAddress(addr));
        };
        if !b.area.mapped {
            let r = kva.free.free(vpn, b.nr_vpn);
            debug_assert!(r.is_ok(), "{r:?}");
        }
        if kind == AreaKind::Vmalloc {
            self.add_vmalloc_pages(&guard, -(b.area.pages.len() as i64));
        }
        Ok((vpn, b))
    }

    /// The area at `addr` is no longer owned by a guard (`OwnedVmArea::into_area`).
    fn disown(&self, addr: usize) {
        let b = self
            .addr_to_vpn(addr)
            .and_then(|vpn| self.kva().busy.get_mut(&vpn).map(|b| b.owned = false));
        // The guard held the area, so it is live and only the guard changes it.
        debug_assert!(b.is_some(), "an owned area at {addr:#x} is live");
    }

    /// The address range of an area `take_busy` took, back to the free tree once
    /// it is unmapped (an area with no mapping gave it back already).
    fn release_taken(&self, vpn: u64, busy: &Busy) {
        if busy.area.mapped {
            self.kva_release(vpn, busy.nr_vpn);
        }
    }

    /// Unmaps a busy area just taken out of the busy map; if the OS refuses, puts
    /// it back and reports.
    fn unmap_or_restore(&self, vpn: u64, busy: &Busy) -> Result<(), VmallocError> {
        if let Err(e) = self.unmap_pages(vpn, busy.area.pages.len() as u64) {
            // Only a mapped area can get here: it still holds its address range.
            let mut kva = self.kva();
            if busy.area.kind == AreaKind::Vmalloc {
                self.add_vmalloc_pages(&kva, busy.area.pages.len() as i64);
            }
            kva.busy.insert(
                vpn,
                Busy {
                    nr_vpn: busy.nr_vpn,
                    area: busy.area.clone(),
                    owned: busy.owned,
                },
            );
            return Err(e);
        }
        Ok(())
    }

    /// `vmap_pages_range()`: maps `pages` at virtual page `vpn`, one `mmap` per run
    /// of consecutive frames. No-op on an unmapped space. On failure nothing stays
    /// mapped.
    #[cfg_attr(not(feature = "std"), allow(clippy::unnecessary_wraps))]
    fn map_pages(&self, vpn: u64, pages: &[Pfn]) -> Result<(), VmallocError> {
        #[cfg(feature = "std")]
        if let Some(w) = &self.window {
            let mut i = 0;
            while i < pages.len() {
                let first = pages[i];
                let mut k = 1;
                while i + k < pages.len() && pages[i + k].0 == first.0 + k as u64 {
                    k += 1;
                }
                let off = self.window_offset(vpn + i as u64);
                if let Err(e) = w.map(off, first, k as u64) {
                    if i > 0 {
                        let undone = w.unmap(self.window_offset(vpn), i as u64);
                        debug_assert!(undone.is_ok());
                    }
                    return Err(VmallocError::MapFailed {
                        addr: self.vpn_to_addr(vpn),
                        errno: e.unwrap_or(0),
                    });
                }
                i += k;
            }
        }
        let _ = (vpn, pages);
        Ok(())
    }

    /// `vunmap_range()`: makes `nr` pages at `vpn` inaccessible again.
    #[cfg_attr(not(feature = "std"), allow(clippy::unnecessary_wraps))]
    fn unmap_pages(&self, vpn: u64, nr: u64) -> Result<(), VmallocError> {
        #[cfg(feature = "std")]
        if let Some(w) = &self.window {
            w.unmap(self.window_offset(vpn), nr)
                .map_err(|e| VmallocError::MapFailed {
                    addr: self.vpn_to_addr(vpn),
                    errno: e.unwrap_or(0),
                })?;
        }
        let _ = (vpn, nr);
        Ok(())
    }

    #[cfg(feature = "std")]
    fn window_offset(&self, vpn: u64) -> usize {
        ((vpn - self.start_vpn) << self.page_shift) as usize
    }
}

impl<B: Backend> Drop for VmallocSpace<'_, B> {
    /// Gives back the pages of every live `vmalloc` area (the space owns them;
    /// nothing can reach them once it is gone). `vmap` and `vm_map_ram` frames
    /// stay with their owners. The reservation, if any, is unmapped afterwards.
    fn drop(&mut self) {
        let busy = core::mem::take(&mut self.kva().busy);
        for b in busy.slots.into_iter().flatten() {
            if b.area.kind == AreaKind::Vmalloc {
                // A page that is not the area's any more (`vfree` would report
                // `PageFree`) is refused and the others freed; a drop has no one to
                // report it to.
                let _ = self.free_page_array(&b.area.pages);
            }
        }
    }
}
