//! The kernel heap: a first-fit linked-list heap over one small region of RAM
//! reserved at boot, behind a spinlock taken with interrupts disabled, counting
//! what it serves.
//!
//! The page allocator's frame tables do not come from here (see `vmemmap`): the
//! heap holds only its structures (zones, per-CPU slots and pinned stacks,
//! pageblock bits, zonelists), made at construction, and the kernel's own few
//! allocations (configuration vectors, statistics text, the stress's arrays).
//! The counters tell the largest single allocation and whether the allocator's
//! alloc and free paths touch the heap once built (they must not: the timer
//! handler allocates).

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::{AtomicU64, Ordering};

use linked_list_allocator::Heap;
use spin::Mutex;

use crate::irq;

/// The global allocator.
pub struct KernelHeap {
    heap: Mutex<Heap>,
    /// Allocations served (relaxed: a statistic, read after the CPUs meet at a
    /// barrier).
    allocs: AtomicU64,
    /// Most bytes in use at once (relaxed, updated under the heap lock).
    peak: AtomicU64,
    /// The largest single allocation, bytes (relaxed, as `peak`).
    largest: AtomicU64,
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap {
    heap: Mutex::new(Heap::empty()),
    allocs: AtomicU64::new(0),
    peak: AtomicU64::new(0),
    largest: AtomicU64::new(0),
};

/// Hands `[start, start + bytes)` to the heap.
///
/// # Safety
/// The range is RAM, identity mapped, used by nothing else for as long as the
/// kernel runs (reserved from the allocator), and this is called once.
pub unsafe fn init(start: u64, bytes: u64) {
    // SAFETY: the caller's promise.
    unsafe { HEAP.heap.lock().init(start as *mut u8, bytes as usize) };
}

/// Heap statistics.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Allocations served.
    pub allocs: u64,
    /// Bytes in use.
    pub used: u64,
    /// Most bytes in use at once.
    pub peak: u64,
    /// The largest single allocation.
    pub largest: u64,
    /// The heap's size.
    pub size: u64,
}

/// The heap's statistics now.
pub fn stats() -> Stats {
    irq::without_interrupts(|| {
        let h = HEAP.heap.lock();
        Stats {
            allocs: HEAP.allocs.load(Ordering::Relaxed),
            used: h.used() as u64,
            peak: HEAP.peak.load(Ordering::Relaxed),
            largest: HEAP.largest.load(Ordering::Relaxed),
            size: h.size() as u64,
        }
    })
}

// SAFETY: `Heap` hands out disjoint, suitably aligned blocks of the region it was
// given and takes back exactly what it handed out; the mutex serialises it, taken
// with interrupts disabled so that no handler can wait for it on its own CPU.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        irq::without_interrupts(|| {
            let mut h = self.heap.lock();
            match h.allocate_first_fit(layout) {
                Ok(p) => {
                    self.allocs.fetch_add(1, Ordering::Relaxed);
                    self.peak.fetch_max(h.used() as u64, Ordering::Relaxed);
                    self.largest
                        .fetch_max(layout.size() as u64, Ordering::Relaxed);
                    p.as_ptr()
                }
                Err(()) => null_mut(),
            }
        })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            irq::without_interrupts(|| {
                // SAFETY: `ptr` came from `alloc` with this layout (GlobalAlloc's
                // contract).
                unsafe { self.heap.lock().deallocate(p, layout) };
            });
        }
    }
}
