//! `Buf`: a few values on the stack, for moving a batch of blocks.
//!
//! Vocabulary layer; calls nothing of the allocator's. A refill or a flush of
//! the per-CPU lists and stacks (`pcp`, `fast`) gathers its blocks here; the
//! buffer is the caller's own, so no lock guards it. Part of the unsafe island:
//! the entries past the length are never read.

use core::mem::MaybeUninit;

/// Up to `N` values on the stack, uninitialised past the length: a refill or a
/// flush moves a few blocks through a buffer sized for the most a stack holds, and
/// zeroing all of it cost more than the move (a pageblock-order flush of two blocks
/// wrote 6 KiB of zeros).
pub(crate) struct Buf<T: Copy, const N: usize> {
    v: [MaybeUninit<T>; N],
    len: usize,
}

#[allow(unsafe_code)]
impl<T: Copy, const N: usize> Buf<T, N> {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Buf {
            v: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Appends `x`; panics when full.
    #[inline(always)]
    pub(crate) fn push(&mut self, x: T) {
        self.v[self.len].write(x);
        self.len += 1;
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` entries were written (`push`, `extend_with`).
        unsafe { core::slice::from_raw_parts(self.v.as_ptr().cast::<T>(), self.len) }
    }

    /// Lets `fill` write up to `max` entries after the last one and say how many
    /// it wrote (`None`: none).
    ///
    /// # Safety
    /// `fill` must have written the first `k` entries of the slice it was given
    /// when it returns `Some((_, k))`.
    #[inline(always)]
    pub(crate) unsafe fn extend_with<R>(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [MaybeUninit<T>]) -> Option<(R, usize)>,
    ) -> Option<(R, usize)> {
        let end = (self.len + max).min(N);
        let got = fill(&mut self.v[self.len..end]);
        if let Some((_, k)) = &got {
            assert!(*k <= end - self.len);
            self.len += k;
        }
        got
    }
}
