//! Kernel stacks: statically allocated (they live in the image's bss, which the
//! page allocator never sees), painted with a pattern so that the deepest use and
//! an overflow into the lowest word can be read off afterwards.

use core::cell::UnsafeCell;

/// The paint: a word no stack frame is likely to hold.
const PAINT: u64 = 0x5a5a_a5a5_5a5a_a5a5;

/// A stack of `N` bytes, 16-byte aligned.
#[repr(C, align(16))]
pub struct Stack<const N: usize>(UnsafeCell<[u8; N]>);

// SAFETY: a stack's bytes are used by one CPU at a time (the one running on it);
// the type only hands out its addresses.
unsafe impl<const N: usize> Sync for Stack<N> {}

impl<const N: usize> Stack<N> {
    /// A zeroed stack (placed in bss).
    pub const fn new() -> Self {
        Stack(UnsafeCell::new([0; N]))
    }

    /// Its lowest address.
    pub fn bottom(&self) -> u64 {
        self.0.get() as u64
    }

    /// One past its highest address: the initial stack pointer.
    pub fn top(&self) -> u64 {
        self.bottom() + N as u64
    }
}

/// Paints `[bottom, top)` with the pattern.
///
/// # Safety
/// `[bottom, top)` is a stack area no one is using (below the current stack
/// pointer with a margin, if it is the caller's own stack), 8-byte aligned.
pub unsafe fn paint(bottom: u64, top: u64) {
    let mut p = bottom;
    while p < top {
        // SAFETY: the caller gives us the range, unused and aligned.
        unsafe { (p as *mut u64).write_volatile(PAINT) };
        p += 8;
    }
}

/// Bytes of `[bottom, top)` ever used, judged by the paint; `None` if the lowest
/// word is overwritten (the stack overflowed, or came close enough to count).
pub fn used(bottom: u64, top: u64) -> Option<u64> {
    // SAFETY: reading a stack area of this kernel (identity mapped, static).
    let read = |p: u64| unsafe { (p as *const u64).read_volatile() };
    if read(bottom) != PAINT {
        return None;
    }
    let mut p = bottom;
    while p < top && read(p) == PAINT {
        p += 8;
    }
    Some(top - p)
}
