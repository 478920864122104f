//! The allocators zonealloc is measured against, behind one small interface.
//!
//! Used by the `peers` and `replay` experiments; not an experiment itself. Every
//! allocator is wrapped in a `Peer`: allocate a block of `2^order` pages, free it,
//! say at which address it starts (to count blocks that are not naturally aligned).
//! A `SharedPeer` is an allocator that threads share; each thread works through its
//! own `view()`, which is a `Peer`.
//!
//! Each wrapper calls its crate the way the crate's documentation shows a user doing it
//! (reference/peers.md §8), with the same largest block everywhere, 4 MiB (order 10,
//! Linux's `MAX_PAGE_ORDER` and zonealloc's default), so no buddy splits or merges more
//! levels than another:
//!
//! | peer | memory | single thread | shared by threads |
//! |---|---|---|---|
//! | zonealloc | `Arena` (mmap) or abstract frames | `alloc_pages`/`free_pages` | the same (per-CPU lists) |
//! | zonealloc LocalCache | `Arena` (mmap) | `LocalCache::alloc`/`free` | one `LocalCache` per thread |
//! | bsa `FrameAllocator<11>` | abstract frame numbers | `alloc(n)`/`dealloc` | `LockedFrameAllocator` (spin) |
//! | bsa `Heap<23>` | mmap'd arena | `alloc(Layout)`/`dealloc` | `LockedHeap` (spin) |
//! | frame-alloc `SummaryBuddyAllocator<11>` | mmap'd arena (bitmap inside) | `allocate_physical` | the same (lock-free) |
//! | frame-alloc `DepotAllocator` over it | the same | the same | per-CPU magazines |
//! | offset-allocator | abstract units (frames) | `allocate(n)`/`free` | `std::sync::Mutex` |
//! | rlsf `Tlsf` | mmap'd arena | `allocate(Layout)`/`deallocate` | `std::sync::Mutex` |
//! | mimalloc | process heap | `mi_malloc_aligned`/`mi_free` | the same |
//! | jemalloc | process heap | `GlobalAlloc` with a page-aligned `Layout` | the same |
//! | mmap | the kernel | `mmap`/`munmap` | the same |
//! | limit | none | pop/push on a `Vec` per order | one `Vec` per thread |
//!
//! The `Mutex` around offset-allocator and rlsf is what their documentation tells a
//! user to add ("lock the whole pool"); bsa brings its own spin locks. The limit is
//! not an allocator: it pops and pushes frame numbers on bare vectors, the least work
//! any allocator could do, so every figure can also be read as a ratio to it.
//!
//! Every wrapper's `alloc` and `free` is `#[inline(always)]`, so that a benchmark
//! loop runs each allocator's calls as a user's loop that calls it directly does:
//! inlined as far as the allocator's own crate lets them be (a loop that calls
//! `alloc_pages`/`free_pages` itself gets them inlined). The wrappers are the
//! harness's, not the allocators': left to the compiler's weighing inside the
//! generic loops, the larger ones (zonealloc's, with its fast path inlined into
//! the wrapper; frame-alloc's `free`; the `Mutex` peers') stayed out of line, a
//! call and its register saves per allocation and per free that a direct call does
//! not pay. (Three quick runs on the Intel guest, alternating with the build that
//! left it to the compiler: zonealloc's hot pair took 0.70–0.80x the time and its
//! one-thread walk made 1.14–1.58x the calls; the other rows moved as the bare
//! `Vec`'s did.)
//!
//! This module is the experiments' unsafe island: the arena mappings (`mmap`), the
//! peers' unsafe entry points (frees, pool set-up), and the C allocators' FFI.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::Mutex;

use buddy_system_allocator::{FrameAllocator, Heap, LockedFrameAllocator, LockedHeap};
use frame_alloc::{
    CpuId, DepotAllocator, PageSize, PhysicalAllocator, Provenance, RegionInit,
    SummaryBuddyAllocator,
};
use zonealloc::{Backend, Gfp, LocalCache, Order, Pfn, ZoneAllocator};

/// Bytes per page.
pub const PAGE: usize = 4096;
/// Largest order every peer is configured for (blocks of 4 MiB).
pub const MAX_ORDER: u8 = 10;
/// Alignment of the arenas this module maps: the largest block, which frame-alloc
/// requires of its base and which lets every arena peer align every block.
pub const ARENA_ALIGN: usize = PAGE << MAX_ORDER;

/// The page-aligned `Layout` of an order-`o` block, `o <= MAX_ORDER` (heap peers).
const LAYOUTS: [Layout; MAX_ORDER as usize + 1] = {
    let mut l = [Layout::new::<u8>(); MAX_ORDER as usize + 1];
    let mut o = 0;
    while o <= MAX_ORDER as usize {
        l[o] = match Layout::from_size_align(PAGE << o, PAGE << o) {
            Ok(x) => x,
            Err(_) => panic!("a power of two up to 4 MiB is a valid layout"),
        };
        o += 1;
    }
    l
};

/// One allocator as a single thread uses it.
pub trait Peer {
    /// What an allocation returns and a free takes back.
    type Handle: Copy;

    /// A block of `2^order` pages, or `None` when the allocator has none.
    fn alloc(&mut self, order: u8) -> Option<Self::Handle>;

    /// Returns a block.
    ///
    /// # Safety
    /// `h` came from this allocator's `alloc` (or `alloc_on`) with the same `order`
    /// and has not been freed since.
    unsafe fn free(&mut self, h: Self::Handle, order: u8);

    /// The block's first byte, as an address in the allocator's space (frame
    /// numbers times the page size for peers without memory), to check alignment.
    fn addr(&self, h: Self::Handle) -> u64;

    /// As `alloc`, for an event of a trace recorded on `cpu` with flags `gfp`.
    /// Peers without per-CPU lists or zones ignore both.
    #[inline(always)]
    fn alloc_on(&mut self, _cpu: usize, _gfp: Gfp, order: u8) -> Option<Self::Handle> {
        self.alloc(order)
    }

    /// As `free`, for an event of a trace recorded on `cpu`.
    ///
    /// # Safety
    /// As `free`.
    #[inline(always)]
    unsafe fn free_on(&mut self, _cpu: usize, h: Self::Handle, order: u8) {
        // SAFETY: the caller keeps `free`'s contract.
        unsafe { self.free(h, order) }
    }
}

/// One allocator shared by threads; each thread works through its own view.
pub trait SharedPeer: Sync {
    /// What one thread uses.
    type View<'a>: Peer
    where
        Self: 'a;

    /// A view for the calling thread.
    fn view(&self) -> Self::View<'_>;
}

/// Whether the block at `addr` of `order` is not naturally aligned.
pub fn misaligned(addr: u64, order: u8) -> bool {
    addr & ((PAGE as u64) << order).wrapping_sub(1) != 0
}

// -----------------------------------------------------------------------------
// Arena mappings
// -----------------------------------------------------------------------------

/// An anonymous private mapping whose usable part starts `align`-aligned.
pub struct Mapping {
    map: NonNull<u8>,
    map_len: usize,
    start: NonNull<u8>,
    len: usize,
}

// SAFETY: a plain region of memory; which thread touches which byte is decided by
// the allocator that manages it.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out addresses.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes aligned to `align` (a power of two), faulted in up front when
    /// `populate` (`MAP_POPULATE`), else on first touch (`MAP_NORESERVE`).
    ///
    /// # Panics
    /// If the kernel refuses the mapping.
    pub fn new(len: usize, align: usize, populate: bool) -> Mapping {
        assert!(align.is_power_of_two() && align >= PAGE);
        let map_len = len + align;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing
        // aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap of {map_len} bytes failed");
        let map = NonNull::new(p.cast::<u8>()).expect("mmap does not return null");
        let pad = (align - (p as usize & (align - 1))) & (align - 1);
        // SAFETY: `pad < align`, so `start` lies inside the `len + align` bytes mapped.
        let start = unsafe { map.add(pad) };
        Mapping {
            map,
            map_len,
            start,
            len,
        }
    }

    /// The first usable byte (its provenance exposed, for frame-alloc).
    pub fn start(&self) -> NonNull<u8> {
        self.start.as_ptr().expose_provenance();
        self.start
    }

    /// Usable bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; its owner (the peer that
        // managed it) is dropped with or before it.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

// -----------------------------------------------------------------------------
// The limit: bare vectors
// -----------------------------------------------------------------------------

/// The floor: frame numbers popped from and pushed onto one `Vec` per order.
///
/// Not an allocator: the vector of order `o` starts with every order-`o` block of
/// `nr_frames` frames, and the orders' blocks overlap. It does what the workload asks
/// with the least work possible (a bounds check and a load or store), so a peer's
/// figure divided by this one is its cost over doing nothing.
pub struct VecFloor {
    stacks: Vec<Vec<u64>>,
}

impl VecFloor {
    /// Vectors holding every block of every order of `nr_frames` frames.
    pub fn new(nr_frames: u64) -> VecFloor {
        VecFloor {
            stacks: (0..=MAX_ORDER)
                .map(|o| (0..nr_frames >> o).rev().map(|i| i << o).collect())
                .collect(),
        }
    }
}

impl Peer for VecFloor {
    type Handle = u64;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<u64> {
        self.stacks[order as usize].pop()
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: u64, order: u8) {
        self.stacks[order as usize].push(h);
    }

    fn addr(&self, h: u64) -> u64 {
        h * PAGE as u64
    }
}

/// The floor for threads: each thread gets vectors of its own, no sharing at all.
pub struct PerThreadFloor {
    /// Frames in each thread's vectors.
    pub nr_frames: u64,
}

impl SharedPeer for PerThreadFloor {
    type View<'a> = VecFloor;

    fn view(&self) -> VecFloor {
        VecFloor::new(self.nr_frames)
    }
}

// -----------------------------------------------------------------------------
// zonealloc
// -----------------------------------------------------------------------------

/// zonealloc through its public API: `alloc_pages(Gfp::KERNEL, order)` /
/// `free_pages`, on the CPU the thread runs on; `alloc_pages_on` / `free_pages_on`
/// with the trace's CPU and flags in a replay.
pub struct Za<'a, B: Backend>(pub &'a ZoneAllocator<B>);

impl<B: Backend> Peer for Za<'_, B> {
    type Handle = Pfn;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<Pfn> {
        self.0.alloc_pages(Gfp::KERNEL, Order(order)).ok()
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: Pfn, order: u8) {
        let r = self.0.free_pages(h, Order(order));
        debug_assert!(r.is_ok(), "zonealloc refused a free: {r:?}");
    }

    fn addr(&self, h: Pfn) -> u64 {
        self.0
            .backend()
            .page_address(h)
            .map_or(h.0 * PAGE as u64, |p| p.as_ptr() as u64)
    }

    #[inline(always)]
    fn alloc_on(&mut self, cpu: usize, gfp: Gfp, order: u8) -> Option<Pfn> {
        self.0.alloc_pages_on(cpu, gfp, Order(order)).ok()
    }

    #[inline(always)]
    unsafe fn free_on(&mut self, cpu: usize, h: Pfn, order: u8) {
        let r = self.0.free_pages_on(cpu, h, Order(order));
        debug_assert!(r.is_ok(), "zonealloc refused a free: {r:?}");
    }
}

impl<B: Backend + Sync> SharedPeer for ZoneAllocator<B> {
    type View<'a>
        = Za<'a, B>
    where
        Self: 'a;

    fn view(&self) -> Za<'_, B> {
        Za(self)
    }
}

/// zonealloc through a `LocalCache` of `Gfp::KERNEL` blocks that the thread owns:
/// refilled in batches from the CPU's per-CPU list or the buddy lists, flushed in
/// batches to the buddy lists, no lock on the common path (the double-free check
/// stays: one compare-and-swap a free).
pub struct ZaLocal<'a, B: Backend>(pub LocalCache<'a, B>);

impl<B: Backend> Peer for ZaLocal<'_, B> {
    type Handle = Pfn;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<Pfn> {
        self.0.alloc(Order(order)).ok()
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: Pfn, order: u8) {
        let r = self.0.free(h, Order(order));
        debug_assert!(r.is_ok(), "zonealloc refused a free: {r:?}");
    }

    fn addr(&self, h: Pfn) -> u64 {
        Za(self.0.allocator()).addr(h)
    }
}

/// One `ZoneAllocator` whose threads each take their own `LocalCache`.
pub struct ZaLocalShared<B: Backend>(pub ZoneAllocator<B>);

impl<B: Backend + Sync> SharedPeer for ZaLocalShared<B> {
    type View<'a>
        = ZaLocal<'a, B>
    where
        Self: 'a;

    fn view(&self) -> ZaLocal<'_, B> {
        ZaLocal(
            self.0
                .local_cache(Gfp::KERNEL)
                .expect("a Gfp::KERNEL cache over a Normal zone"),
        )
    }
}

// -----------------------------------------------------------------------------
// buddy_system_allocator
// -----------------------------------------------------------------------------

/// bsa's `FrameAllocator` with `ORDER` 11: blocks up to 2^10 frames.
pub type BsaFrameAllocator = FrameAllocator<11>;
/// bsa's `Heap` with `ORDER` 23: blocks up to 2^22 bytes (4 MiB).
pub type BsaHeap = Heap<23>;

/// A `FrameAllocator` holding frames `[0, nr_frames)`.
pub fn bsa_frame_allocator(nr_frames: u64) -> BsaFrameAllocator {
    let mut f = FrameAllocator::<11>::new();
    f.add_frame(0, nr_frames as usize);
    f
}

/// A `LockedFrameAllocator` holding frames `[0, nr_frames)`.
pub fn bsa_locked_frame_allocator(nr_frames: u64) -> LockedFrameAllocator<11> {
    let f = LockedFrameAllocator::<11>::new();
    f.lock().add_frame(0, nr_frames as usize);
    f
}

impl Peer for BsaFrameAllocator {
    type Handle = usize;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<usize> {
        FrameAllocator::alloc(self, 1 << order)
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: usize, order: u8) {
        self.dealloc(h, 1 << order);
    }

    fn addr(&self, h: usize) -> u64 {
        (h * PAGE) as u64
    }
}

impl Peer for &LockedFrameAllocator<11> {
    type Handle = usize;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<usize> {
        self.lock().alloc(1 << order)
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: usize, order: u8) {
        self.lock().dealloc(h, 1 << order);
    }

    fn addr(&self, h: usize) -> u64 {
        (h * PAGE) as u64
    }
}

impl SharedPeer for LockedFrameAllocator<11> {
    type View<'a> = &'a LockedFrameAllocator<11>;

    fn view(&self) -> &LockedFrameAllocator<11> {
        self
    }
}

/// bsa's heap-free `Heap` over an arena of its own.
pub struct BsaHeapPeer {
    heap: BsaHeap,
    _map: Mapping,
}

impl BsaHeapPeer {
    /// A `Heap` over a fresh, populated arena of `bytes`.
    pub fn new(bytes: usize) -> BsaHeapPeer {
        let map = Mapping::new(bytes, ARENA_ALIGN, true);
        let mut heap = Heap::<23>::new();
        // SAFETY: the mapping is valid, writable, ours alone, and outlives the heap
        // (it is dropped after it, as the field order says).
        unsafe { heap.init(map.start().as_ptr() as usize, map.len()) };
        BsaHeapPeer { heap, _map: map }
    }
}

impl Peer for BsaHeapPeer {
    type Handle = NonNull<u8>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<u8>> {
        self.heap.alloc(LAYOUTS[order as usize]).ok()
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<u8>, order: u8) {
        // SAFETY: the caller passes a live block of this heap with its order, so
        // pointer and layout match the allocation.
        unsafe { self.heap.dealloc(h, LAYOUTS[order as usize]) }
    }

    fn addr(&self, h: NonNull<u8>) -> u64 {
        h.as_ptr() as u64
    }
}

/// bsa's `LockedHeap` over an arena of its own.
pub struct BsaLockedHeapPeer {
    heap: LockedHeap<23>,
    map: Mapping,
}

impl BsaLockedHeapPeer {
    /// A `LockedHeap` over a fresh, populated arena of `bytes`.
    pub fn new(bytes: usize) -> BsaLockedHeapPeer {
        Self::new_in(Mapping::new(bytes, ARENA_ALIGN, true))
    }

    /// A `LockedHeap` over `map` (a new heap: the old one's free lists are
    /// overwritten).
    pub fn new_in(map: Mapping) -> BsaLockedHeapPeer {
        let heap = LockedHeap::<23>::new();
        // SAFETY: as in `BsaHeapPeer::new`; `into_mapping` and the field order keep
        // the mapping alive as long as the heap.
        unsafe { heap.lock().init(map.start().as_ptr() as usize, map.len()) };
        BsaLockedHeapPeer { heap, map }
    }

    /// Drops the heap and returns its arena for re-use.
    pub fn into_mapping(self) -> Mapping {
        self.map
    }
}

impl Peer for &BsaLockedHeapPeer {
    type Handle = NonNull<u8>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<u8>> {
        self.heap.lock().alloc(LAYOUTS[order as usize]).ok()
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<u8>, order: u8) {
        // SAFETY: as in `BsaHeapPeer::free`.
        unsafe { self.heap.lock().dealloc(h, LAYOUTS[order as usize]) }
    }

    fn addr(&self, h: NonNull<u8>) -> u64 {
        h.as_ptr() as u64
    }
}

impl SharedPeer for BsaLockedHeapPeer {
    type View<'a> = &'a BsaLockedHeapPeer;

    fn view(&self) -> &BsaLockedHeapPeer {
        self
    }
}

// -----------------------------------------------------------------------------
// frame-alloc
// -----------------------------------------------------------------------------

/// frame-alloc's `Provenance` for a pool that is one live allocation whose provenance
/// was exposed (`Mapping::start`): its README's "recover exposed provenance" story,
/// as its own example does for host memory.
pub struct ExposedProvenance;

// SAFETY: `create` recovers the provenance `Mapping::start` exposed for the whole
// mapping, so the pointer covers every contiguous run inside it; `destroy` only reads
// the address back, which is all this story needs.
unsafe impl Provenance for ExposedProvenance {
    unsafe fn create(phys: usize) -> NonNull<u8> {
        NonNull::new(std::ptr::with_exposed_provenance_mut(phys))
            .expect("frame-alloc never asks for address 0")
    }

    unsafe fn destroy<T>(ptr: NonNull<T>) -> usize {
        ptr.addr().get()
    }
}

/// frame-alloc's `CpuId` in user space: the CPU the thread runs on now.
pub struct SchedCpu;

impl CpuId for SchedCpu {
    fn current_cpu() -> usize {
        // SAFETY: `sched_getcpu` takes no arguments and only reads the rseq area or
        // asks the kernel.
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).unwrap_or(0)
    }
}

const FA_BASE: PageSize = PageSize::from_log2(12);
/// The bare lock-free bitmap buddy, orders 0..=10.
pub type FaSummary = SummaryBuddyAllocator<11, ExposedProvenance>;
/// Per-CPU order-0 magazines (8 slots, frame-alloc's default depths) over it.
pub type FaDepot = DepotAllocator<FaSummary, SchedCpu, 8>;

/// A frame-alloc allocator of type `A` over an arena of its own.
pub struct FrameAllocPeer<A> {
    a: Box<A>,
    map: Mapping,
}

impl FrameAllocPeer<FaSummary> {
    /// A `SummaryBuddyAllocator` over a fresh arena of `bytes`.
    pub fn summary(bytes: usize, populate: bool) -> FrameAllocPeer<FaSummary> {
        FrameAllocPeer::init(
            Box::new(SummaryBuddyAllocator::new(FA_BASE)),
            Mapping::new(bytes, ARENA_ALIGN, populate),
        )
    }
}

impl FrameAllocPeer<FaDepot> {
    /// A `DepotAllocator` over a `SummaryBuddyAllocator` over a fresh arena of `bytes`.
    pub fn depot(bytes: usize, populate: bool) -> FrameAllocPeer<FaDepot> {
        Self::depot_in(Mapping::new(bytes, ARENA_ALIGN, populate))
    }

    /// The same over `map` (re-used between replays: frame-alloc keeps no state
    /// outside the pool and the struct, so a new allocator over old memory starts
    /// fresh).
    pub fn depot_in(map: Mapping) -> FrameAllocPeer<FaDepot> {
        FrameAllocPeer::init(
            Box::new(DepotAllocator::new(
                FA_BASE,
                SummaryBuddyAllocator::new(FA_BASE),
            )),
            map,
        )
    }
}

impl<A: RegionInit> FrameAllocPeer<A> {
    fn init(a: Box<A>, map: Mapping) -> FrameAllocPeer<A> {
        // SAFETY: single-threaded, once, before any allocation; the base is 4 MiB
        // aligned (the largest block) and the region is ours alone, reachable through
        // `ExposedProvenance` (its provenance was exposed by `start()`), and outlives
        // the allocator (`into_mapping` and drop order keep it so).
        unsafe { a.init_region(map.start().as_ptr() as usize, map.len()) };
        FrameAllocPeer { a, map }
    }

    /// Drops the allocator and returns its arena for re-use.
    pub fn into_mapping(self) -> Mapping {
        drop(self.a);
        self.map
    }
}

/// One thread's handle on a frame-alloc allocator.
pub struct FaView<'a, A>(&'a A);

impl<A: PhysicalAllocator> Peer for FaView<'_, A> {
    type Handle = usize;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<usize> {
        let n = NonZeroUsize::new(1 << order).expect("2^order is not zero");
        // Under contention `allocate_physical` may fail spuriously; its README says
        // callers that must not fail early should retry.
        for _ in 0..64 {
            if let Ok(a) = self.0.allocate_physical(FA_BASE, n) {
                return Some(a);
            }
        }
        None
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: usize, order: u8) {
        let n = NonZeroUsize::new(1 << order).expect("2^order is not zero");
        // SAFETY: the caller passes a live block of this allocator with its order:
        // the address, page size and count of the allocation.
        unsafe { self.0.deallocate_physical(FA_BASE, n, h) }
    }

    fn addr(&self, h: usize) -> u64 {
        h as u64
    }
}

impl<A: PhysicalAllocator + Sync> SharedPeer for FrameAllocPeer<A> {
    type View<'a>
        = FaView<'a, A>
    where
        Self: 'a;

    fn view(&self) -> FaView<'_, A> {
        FaView(&self.a)
    }
}

// -----------------------------------------------------------------------------
// offset-allocator
// -----------------------------------------------------------------------------

/// offset-allocator over `nr_frames` units, one unit a frame.
pub struct OffsetPeer(offset_allocator::Allocator<u32>);

impl OffsetPeer {
    /// An allocator of `nr_frames` units with nodes for every frame to be a block
    /// (it needs one node per block and per free range: twice the frames, at least
    /// its default of 128 Ki).
    pub fn new(nr_frames: u64) -> OffsetPeer {
        let n = u32::try_from(nr_frames).expect("offset-allocator sizes are u32");
        OffsetPeer(offset_allocator::Allocator::with_max_allocs(
            n,
            n.saturating_mul(2).max(128 * 1024),
        ))
    }
}

impl Peer for OffsetPeer {
    type Handle = offset_allocator::Allocation<u32>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<Self::Handle> {
        self.0.allocate(1 << order)
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: Self::Handle, _order: u8) {
        self.0.free(h);
    }

    fn addr(&self, h: Self::Handle) -> u64 {
        u64::from(h.offset) * PAGE as u64
    }
}

impl Peer for &Mutex<OffsetPeer> {
    type Handle = offset_allocator::Allocation<u32>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<Self::Handle> {
        self.lock().expect("not poisoned").0.allocate(1 << order)
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: Self::Handle, _order: u8) {
        self.lock().expect("not poisoned").0.free(h);
    }

    fn addr(&self, h: Self::Handle) -> u64 {
        u64::from(h.offset) * PAGE as u64
    }
}

impl SharedPeer for Mutex<OffsetPeer> {
    type View<'a> = &'a Mutex<OffsetPeer>;

    fn view(&self) -> &Mutex<OffsetPeer> {
        self
    }
}

// -----------------------------------------------------------------------------
// rlsf
// -----------------------------------------------------------------------------

/// rlsf's TLSF with FLLEN 28 (blocks up to 8 GiB) and 16 second-level lists.
type TlsfPool = rlsf::Tlsf<'static, u32, u16, 28, 16>;

/// rlsf over an arena of its own.
pub struct RlsfPeer {
    tlsf: TlsfPool,
    map: Mapping,
}

// SAFETY: the pool's raw pointers point into `map`, which moves with it; rlsf's
// documentation leaves locking to the user, which `Mutex<RlsfPeer>` does.
unsafe impl Send for RlsfPeer {}

impl RlsfPeer {
    /// A TLSF pool over a fresh arena of `bytes`.
    pub fn new(bytes: usize, populate: bool) -> RlsfPeer {
        Self::new_in(Mapping::new(bytes, ARENA_ALIGN, populate))
    }

    /// A TLSF pool over `map` (a new pool: the old one's headers are overwritten).
    pub fn new_in(map: Mapping) -> RlsfPeer {
        let mut tlsf = TlsfPool::new();
        let block = NonNull::slice_from_raw_parts(map.start(), map.len());
        // SAFETY: the mapping is ours alone and outlives the pool (`into_mapping`
        // and the field order keep it so).
        let r = unsafe { tlsf.insert_free_block_ptr(block) };
        assert!(r.is_some(), "the arena is large enough for a pool");
        RlsfPeer { tlsf, map }
    }

    /// Drops the pool and returns its arena for re-use.
    pub fn into_mapping(self) -> Mapping {
        self.map
    }
}

impl Peer for RlsfPeer {
    type Handle = NonNull<u8>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<u8>> {
        self.tlsf.allocate(LAYOUTS[order as usize])
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<u8>, order: u8) {
        // SAFETY: the caller passes a live block of this pool with its order, so the
        // alignment is the one it was allocated with.
        unsafe { self.tlsf.deallocate(h, PAGE << order) }
    }

    fn addr(&self, h: NonNull<u8>) -> u64 {
        h.as_ptr() as u64
    }
}

impl Peer for &Mutex<RlsfPeer> {
    type Handle = NonNull<u8>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<u8>> {
        self.lock().expect("not poisoned").alloc(order)
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<u8>, order: u8) {
        // SAFETY: the caller keeps `free`'s contract.
        unsafe { self.lock().expect("not poisoned").free(h, order) }
    }

    fn addr(&self, h: NonNull<u8>) -> u64 {
        h.as_ptr() as u64
    }
}

impl SharedPeer for Mutex<RlsfPeer> {
    type View<'a> = &'a Mutex<RlsfPeer>;

    fn view(&self) -> &Mutex<RlsfPeer> {
        self
    }
}

// -----------------------------------------------------------------------------
// mimalloc, jemalloc, mmap
// -----------------------------------------------------------------------------

/// mimalloc's process heap: `mi_malloc_aligned(size, size)` / `mi_free`.
#[derive(Clone, Copy)]
pub struct MiMalloc;

impl Peer for MiMalloc {
    type Handle = NonNull<c_void>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<c_void>> {
        // SAFETY: a size and a power-of-two alignment; no pointer is passed in.
        NonNull::new(unsafe { libmimalloc_sys::mi_malloc_aligned(PAGE << order, PAGE << order) })
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<c_void>, _order: u8) {
        // SAFETY: the caller passes a live block from `mi_malloc_aligned`.
        unsafe { libmimalloc_sys::mi_free(h.as_ptr()) }
    }

    fn addr(&self, h: NonNull<c_void>) -> u64 {
        h.as_ptr() as u64
    }
}

impl SharedPeer for MiMalloc {
    type View<'a> = MiMalloc;

    fn view(&self) -> MiMalloc {
        MiMalloc
    }
}

/// mimalloc confined to an exclusive arena of the experiment's size
/// (`mi_manage_os_memory_ex` + `mi_heap_new_in_arena`): its capacity figures.
///
/// The arena's memory is never unmapped: mimalloc has no call to give an arena back,
/// and keeps its bookkeeping inside it.
pub struct MiArenaPeer {
    heap: *mut libmimalloc_sys::mi_heap_t,
}

impl MiArenaPeer {
    /// A heap allocating only in a new exclusive arena of `bytes`, or `None` (with
    /// the reason) if mimalloc refuses the arena.
    pub fn new(bytes: usize) -> Result<MiArenaPeer, String> {
        // SAFETY: no arguments; reads a constant.
        let min = unsafe { libmimalloc_sys::mi_arena_min_size() };
        if bytes < min {
            return Err(format!(
                "arena of {bytes} bytes below mi_arena_min_size {min}"
            ));
        }
        let map = Mapping::new(bytes, 64 << 20, false);
        let mut id: libmimalloc_sys::mi_arena_id_t = std::ptr::null_mut();
        // SAFETY: the region is mapped, writable, zero (fresh anonymous memory) and
        // handed to mimalloc for good (`forget` below); `id` is a valid out-pointer.
        let ok = unsafe {
            libmimalloc_sys::mi_manage_os_memory_ex(
                map.start().as_ptr().cast(),
                map.len(),
                true,
                false,
                true,
                -1,
                true,
                &mut id,
            )
        };
        if !ok {
            return Err("mi_manage_os_memory_ex refused the region".into());
        }
        std::mem::forget(map);
        // SAFETY: `id` names the arena just created.
        let heap = unsafe { libmimalloc_sys::mi_heap_new_in_arena(id) };
        if heap.is_null() {
            return Err("mi_heap_new_in_arena returned null".into());
        }
        Ok(MiArenaPeer { heap })
    }
}

impl Drop for MiArenaPeer {
    fn drop(&mut self) {
        // SAFETY: the heap was created by `mi_heap_new_in_arena`, is used by this
        // thread only, and its blocks are not used after this.
        unsafe { libmimalloc_sys::mi_heap_destroy(self.heap) }
    }
}

impl Peer for MiArenaPeer {
    type Handle = NonNull<c_void>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<c_void>> {
        // SAFETY: a live heap of this thread, a size and a power-of-two alignment.
        NonNull::new(unsafe {
            libmimalloc_sys::mi_heap_malloc_aligned(self.heap, PAGE << order, PAGE << order)
        })
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<c_void>, _order: u8) {
        // SAFETY: the caller passes a live block of this heap.
        unsafe { libmimalloc_sys::mi_free(h.as_ptr()) }
    }

    fn addr(&self, h: NonNull<c_void>) -> u64 {
        h.as_ptr() as u64
    }
}

/// jemalloc through tikv-jemallocator's `GlobalAlloc` with a page-aligned `Layout`
/// (`mallocx(size, MALLOCX_ALIGN(size))` / `sdallocx`).
#[derive(Clone, Copy)]
pub struct JeMalloc;

impl Peer for JeMalloc {
    type Handle = NonNull<u8>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<u8>> {
        // SAFETY: the layout has a non-zero size.
        NonNull::new(unsafe { tikv_jemallocator::Jemalloc.alloc(LAYOUTS[order as usize]) })
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<u8>, order: u8) {
        // SAFETY: the caller passes a live block allocated with this very layout.
        unsafe { tikv_jemallocator::Jemalloc.dealloc(h.as_ptr(), LAYOUTS[order as usize]) }
    }

    fn addr(&self, h: NonNull<u8>) -> u64 {
        h.as_ptr() as u64
    }
}

impl SharedPeer for JeMalloc {
    type View<'a> = JeMalloc;

    fn view(&self) -> JeMalloc {
        JeMalloc
    }
}

/// The kernel: one anonymous `mmap` per block, `munmap` to free it.
#[derive(Clone, Copy)]
pub struct Mmap;

impl Peer for Mmap {
    type Handle = NonNull<c_void>;

    #[inline(always)]
    fn alloc(&mut self, order: u8) -> Option<NonNull<c_void>> {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE << order,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            None
        } else {
            NonNull::new(p)
        }
    }

    #[inline(always)]
    unsafe fn free(&mut self, h: NonNull<c_void>, order: u8) {
        // SAFETY: the caller passes a live mapping of `PAGE << order` bytes.
        unsafe {
            libc::munmap(h.as_ptr(), PAGE << order);
        }
    }

    fn addr(&self, h: NonNull<c_void>) -> u64 {
        h.as_ptr() as u64
    }
}

impl SharedPeer for Mmap {
    type View<'a> = Mmap;

    fn view(&self) -> Mmap {
        Mmap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every peer hands out and takes back blocks of every order, aligned where it
    /// promises to be.
    fn round_trip<P: Peer>(p: &mut P, aligned: bool) {
        for o in 0..=MAX_ORDER {
            let h = p.alloc(o).expect("an empty allocator has a block");
            assert!(!aligned || !misaligned(p.addr(h), o), "order {o}");
            // SAFETY: just allocated with this order.
            unsafe { p.free(h, o) };
        }
    }

    #[test]
    fn every_peer_round_trips() {
        const BYTES: usize = 64 << 20;
        let frames = (BYTES / PAGE) as u64;
        round_trip(&mut VecFloor::new(frames), true);
        round_trip(&mut bsa_frame_allocator(frames), true);
        round_trip(&mut (&bsa_locked_frame_allocator(frames)), true);
        round_trip(&mut BsaHeapPeer::new(BYTES), true);
        round_trip(&mut FrameAllocPeer::summary(BYTES, false).view(), true);
        round_trip(&mut FrameAllocPeer::depot(BYTES, false).view(), true);
        round_trip(&mut OffsetPeer::new(frames), false);
        round_trip(&mut RlsfPeer::new(BYTES, false), true);
        round_trip(&mut MiMalloc, true);
        round_trip(&mut JeMalloc, true);
        round_trip(&mut Mmap, false);
        let za = ZoneAllocator::new(zonealloc::Config::with_bytes(BYTES as u64)).unwrap();
        round_trip(&mut za.view(), true);
    }
}
