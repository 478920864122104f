//! The real-memory backend: an mmap'd arena whose frames a program can write to.
//!
//! Part of the crate's small unsafe island (with the prefetch hint in `frame`): this
//! module owns one anonymous private mapping covering every frame of the
//! configuration, `[lowest start_pfn, highest end_pfn)`, and turns frame numbers into
//! pointers into it. Frames in holes are mapped but never handed out, so they cost no
//! physical memory. The mapping is released when the arena is dropped, which happens
//! only after the allocator that owns it is gone.

#![allow(unsafe_code)]

use core::ptr::NonNull;

use crate::backend::Backend;
use crate::config::{Config, ConfigError};
use crate::types::Pfn;

/// Options of an `Arena`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArenaOptions {
    /// Ask the kernel for transparent huge pages (`MADV_HUGEPAGE`).
    pub huge_pages: bool,
    /// Fault every page in at creation (`MAP_POPULATE`), so first touches cost
    /// nothing later.
    pub populate: bool,
}

/// An anonymous memory mapping backing the allocator's frames.
#[derive(Debug)]
pub struct Arena {
    base: NonNull<u8>,
    len: usize,
    first_pfn: u64,
    nr_frames: u64,
    page_shift: u8,
}

// SAFETY: the arena is a plain region of memory; which thread may touch which frame
// is decided by the allocator's ownership rules, not by the arena.
unsafe impl Send for Arena {}
// SAFETY: as above; `&Arena` only hands out addresses.
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps an arena for every frame of `config`.
    ///
    /// # Errors
    /// `ConfigError::Backend` if the mapping fails (size or address space).
    pub fn new(config: &Config, opts: ArenaOptions) -> Result<Arena, ConfigError> {
        let (lo, hi) = config
            .nodes
            .iter()
            .flat_map(|n| n.zones.iter())
            .filter(|z| z.spanned_pages > 0)
            .fold((u64::MAX, 0u64), |(lo, hi), z| {
                (lo.min(z.start_pfn.0), hi.max(z.end_pfn().0))
            });
        if lo >= hi {
            return Err(ConfigError::NoMemory);
        }
        let nr_frames = hi - lo;
        let len =
            usize::try_from(nr_frames << config.page_shift).map_err(|_| ConfigError::Backend)?;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if opts.populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing
        // aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ConfigError::Backend);
        }
        if opts.huge_pages {
            // SAFETY: advice on the mapping just created; failure only means no THP.
            unsafe {
                libc::madvise(p, len, libc::MADV_HUGEPAGE);
            }
        }
        Ok(Arena {
            base: NonNull::new(p.cast::<u8>()).ok_or(ConfigError::Backend)?,
            len,
            first_pfn: lo,
            nr_frames,
            page_shift: config.page_shift,
        })
    }

    /// The bytes of frames `[pfn, pfn + nr)`, clamped to the arena: a pointer into
    /// the mapping and a length that stays inside it.
    fn frames_bytes(&self, pfn: Pfn, nr: u64) -> Option<(*mut u8, usize)> {
        let p = self.page_address(pfn)?;
        let i = pfn.0 - self.first_pfn;
        let nr = nr.min(self.nr_frames - i);
        Some((p.as_ptr(), (nr << self.page_shift) as usize))
    }

    /// Bytes mapped.
    pub fn len_bytes(&self) -> usize {
        self.len
    }

    /// The frame whose page contains `addr`, if it lies in the arena.
    pub fn pfn_of_addr(&self, addr: *const u8) -> Option<Pfn> {
        let off = (addr as usize).checked_sub(self.base.as_ptr() as usize)?;
        (off < self.len).then(|| Pfn(self.first_pfn + (off >> self.page_shift) as u64))
    }
}

// SAFETY: every frame of `[first_pfn, first_pfn + nr_frames)` maps to its own
// `1 << page_shift` bytes of the mapping, in frame order, for the arena's lifetime.
unsafe impl Backend for Arena {
    #[inline]
    fn page_address(&self, pfn: Pfn) -> Option<NonNull<u8>> {
        let i = pfn.0.checked_sub(self.first_pfn)?;
        if i >= self.nr_frames {
            return None;
        }
        // SAFETY: `i < nr_frames`, so the offset stays inside the mapping of
        // `nr_frames << page_shift` bytes.
        Some(unsafe { self.base.add((i << self.page_shift) as usize) })
    }

    fn zero_pages(&self, pfn: Pfn, nr: u64) {
        self.fill_pages(pfn, nr, 0);
    }

    fn fill_pages(&self, pfn: Pfn, nr: u64, byte: u8) {
        if let Some((p, len)) = self.frames_bytes(pfn, nr) {
            // SAFETY: `frames_bytes` keeps the range inside the mapping, and the
            // caller owns the frames (see `Backend::fill_pages`), so no one else
            // reads or writes them now.
            unsafe { core::ptr::write_bytes(p, byte, len) };
        }
    }

    fn find_mismatch(&self, pfn: Pfn, nr: u64, byte: u8) -> Option<(usize, u8)> {
        let (p, len) = self.frames_bytes(pfn, nr)?;
        // SAFETY: `frames_bytes` keeps the range inside the mapping; the caller owns
        // the frames, so nobody writes them while we read.
        let s = unsafe { core::slice::from_raw_parts(p, len) };
        s.iter().position(|&b| b != byte).map(|i| (i, s[i]))
    }

    fn initially_zero(&self) -> bool {
        true
    }

    fn page_size(&self) -> Option<usize> {
        Some(1 << self.page_shift)
    }

    fn pfn_of_addr(&self, addr: *const u8) -> Option<Pfn> {
        Arena::pfn_of_addr(self, addr)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`; the arena is dropped
        // only with its allocator, so no block of it is still handed out through the
        // allocator's API.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
