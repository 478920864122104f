//! The real-memory backend: an mmap'd arena whose frames a program can write to.
//!
//! Part of the crate's small unsafe island (with the prefetch hint in `frame`): this
//! module owns one mapping per run of frames that the configuration's zones cover
//! (adjacent zones share a run; the gaps between distant zones are not mapped), and
//! turns frame numbers into pointers into them. Frames in holes are mapped but never
//! handed out, so they cost no physical memory. The mappings are released when the
//! arena is dropped, which happens only after the allocator that owns it is gone.
//!
//! # Two kinds of arena
//!
//! By default the mapping is anonymous and private. With `ArenaOptions::memfd` the
//! frames live in a memfd (`memfd_create`, a shmem file sized to the arena) mapped
//! `MAP_SHARED`: frame `pfn` is then the file page at `Arena::file_offset(pfn)`
//! (the zones' runs of frames one after another), and the same frame can be mapped a second
//! time at another address. That is what vmalloc needs to make scattered frames
//! appear as one contiguous virtual range, as the kernel's page tables do:
//! an `ArenaWindow` reserves a `PROT_NONE` range and maps runs of frames into it
//! with `mmap(MAP_FIXED | MAP_SHARED, memfd, offset)`.
//!
//! ```text
//!   arena (MAP_SHARED memfd)   | f0 | f1 | f2 | f3 | f4 | f5 | f6 | f7 |
//!                                          \________/        |
//!   window (PROT_NONE reserve) | .. | f2 | f3 | f6 | guard | .. |
//!                                   one mmap    one mmap
//! ```
//!
//! Caveat of the memfd mode: shmem pages get transparent huge pages only when
//! `/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows it (`advise` with
//! `huge_pages`, or `always`/`within_size`); the default `never` means 4 KiB pages
//! whatever `huge_pages` says. Every window mapping is a VMA of its own unless it
//! continues its neighbour, so heavily fragmented page arrays can reach
//! `vm.max_map_count` (65530 by default); a failed map is reported, not hidden.

#![allow(unsafe_code)]

use core::ptr::NonNull;
#[cfg(target_os = "linux")]
use std::os::fd::FromRawFd;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

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
    /// Back the frames with a memfd mapped `MAP_SHARED` instead of anonymous private
    /// memory, so they can also be mapped elsewhere (vmalloc's contiguous views,
    /// `VmallocSpace::new_mapped`). Linux only. See the [module
    /// documentation](crate::arena) for the transparent-huge-page caveat of shmem.
    pub memfd: bool,
    /// How free page reporting with `Reporter::Backend` gives pages back (see
    /// [`Discard`]). A memfd arena always punches the pages out of its file
    /// (`MADV_REMOVE`): the other two leave a shared file's pages in place.
    pub discard: Discard,
    /// Bind each node's zones to the host's node of the same number (`mbind`,
    /// `MPOL_BIND`), so that a node's frames really are that node's memory; a
    /// configuration from `numa::HostTopology::config` numbers its nodes as the
    /// host does. Linux only; a node the host does not have fails the mapping
    /// (`ConfigError::Backend`).
    pub bind_nodes: bool,
}

/// The `madvise` advice an arena gives back reported free pages with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Discard {
    /// `MADV_DONTNEED`: the pages leave the resident set at once, and read as
    /// zeroes when next touched (a fault and a zeroed page each).
    #[default]
    DontNeed,
    /// `MADV_FREE`: the kernel takes the pages only under memory pressure, so they
    /// stay in the resident set (counted as `LazyFree` in `smaps`) until then; a
    /// page written before that is kept, at no fault. Contents read as zeroes or
    /// as they were.
    Free,
}

/// One run of consecutive frames that zones cover, mapped in one piece.
#[derive(Clone, Copy, Debug)]
struct Segment {
    first_pfn: u64,
    nr_frames: u64,
    /// Address of `first_pfn`'s page.
    base: NonNull<u8>,
    /// Offset of `first_pfn`'s page in the memfd (memfd mode; 0 otherwise).
    file_off: u64,
}

impl Segment {
    fn bytes(&self, page_shift: u8) -> usize {
        (self.nr_frames << page_shift) as usize
    }
}

/// The memory backing the allocator's frames: one mapping per run of frames that the
/// configuration's zones cover, so a sparse layout (zones far apart in frame
/// numbers) maps only its zones, never the gaps between them.
#[derive(Debug)]
pub struct Arena {
    /// Sorted by `first_pfn`; no two touch (touching runs are merged into one).
    segs: alloc::boxed::Box<[Segment]>,
    /// Bytes mapped, all segments together.
    len: usize,
    page_shift: u8,
    /// The file behind the frames, in memfd mode.
    memfd: Option<OwnedFd>,
    /// The advice reported pages are discarded with.
    discard: libc::c_int,
}

// SAFETY: the arena is a plain region of memory; which thread may touch which frame
// is decided by the allocator's ownership rules, not by the arena.
unsafe impl Send for Arena {}
// SAFETY: as above; `&Arena` only hands out addresses.
unsafe impl Sync for Arena {}

/// The runs of frames `config`'s zones cover, as `(first_pfn, nr_frames)`, sorted,
/// touching runs merged. `None` if the bytes of a run do not fit in `usize`.
fn frame_runs(config: &Config) -> Option<alloc::vec::Vec<(u64, u64)>> {
    let mut runs: alloc::vec::Vec<(u64, u64)> = config
        .nodes
        .iter()
        .flat_map(|n| n.zones.iter())
        .filter(|z| z.spanned_pages > 0)
        .map(|z| (z.start_pfn.0, z.spanned_pages))
        .collect();
    runs.sort_unstable();
    let mut merged: alloc::vec::Vec<(u64, u64)> = alloc::vec::Vec::new();
    for (s, n) in runs {
        match merged.last_mut() {
            Some((ls, ln)) if *ls + *ln == s => *ln += n,
            _ => merged.push((s, n)),
        }
    }
    for &(_, n) in &merged {
        usize::try_from(n.checked_mul(1u64 << config.page_shift)?).ok()?;
    }
    Some(merged)
}

impl Arena {
    /// Maps an arena for every frame of `config`'s zones.
    ///
    /// # Errors
    /// The error of `Config::validate` for a configuration it refuses;
    /// `ConfigError::NoMemory` without zones; `ConfigError::Backend` if a mapping
    /// fails or does not fit in the address space.
    pub fn new(config: &Config, opts: ArenaOptions) -> Result<Arena, ConfigError> {
        // The sizes and alignments below shift by `page_shift` and `max_order`,
        // which only a validated configuration bounds.
        config.validate()?;
        let runs = frame_runs(config).ok_or(ConfigError::Backend)?;
        if runs.is_empty() {
            return Err(ConfigError::NoMemory);
        }
        let shift = config.page_shift;
        let len = runs
            .iter()
            .try_fold(0usize, |acc, &(_, n)| {
                acc.checked_add((n << shift) as usize)
            })
            .ok_or(ConfigError::Backend)?;
        let memfd = if opts.memfd {
            Some(create_memfd(len)?)
        } else {
            None
        };
        let discard = if memfd.is_some() {
            libc::MADV_REMOVE
        } else {
            match opts.discard {
                Discard::DontNeed => libc::MADV_DONTNEED,
                Discard::Free => libc::MADV_FREE,
            }
        };
        let mut arena = Arena {
            segs: alloc::boxed::Box::new([]),
            len,
            page_shift: shift,
            memfd,
            discard,
        };
        let mut segs = alloc::vec::Vec::with_capacity(runs.len());
        let mut file_off = 0u64;
        for (first_pfn, nr_frames) in runs {
            let bytes = (nr_frames << shift) as usize;
            let base = match map_run(&arena, config, first_pfn, bytes, file_off, opts) {
                Ok(b) => b,
                Err(e) => {
                    // Unmap what was mapped so far (Drop does it).
                    arena.segs = segs.into_boxed_slice();
                    return Err(e);
                }
            };
            segs.push(Segment {
                first_pfn,
                nr_frames,
                base,
                file_off,
            });
            file_off += bytes as u64;
        }
        arena.segs = segs.into_boxed_slice();
        if opts.bind_nodes {
            arena.bind_nodes(config)?;
        }
        Ok(arena)
    }

    /// Binds each node's zones to the host node of the same number.
    fn bind_nodes(&self, config: &Config) -> Result<(), ConfigError> {
        for (nid, node) in config.nodes.iter().enumerate() {
            for z in node.zones.iter().filter(|z| z.spanned_pages > 0) {
                let (p, len) = self
                    .frames_bytes(z.start_pfn, z.spanned_pages)
                    .ok_or(ConfigError::Backend)?;
                let nid = u16::try_from(nid).map_err(|_| ConfigError::Backend)?;
                // SAFETY: `[p, p + len)` lies in one of this arena's mappings.
                unsafe { crate::numa::bind(p, len, nid) }.map_err(|_| ConfigError::Backend)?;
            }
        }
        Ok(())
    }

    /// The memfd behind the frames, if the arena was created with
    /// `ArenaOptions::memfd`. Frame `pfn` is at `file_offset(pfn)`.
    pub fn memfd(&self) -> Option<BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.memfd.as_ref().map(|f| f.as_fd())
    }

    /// The offset of frame `pfn`'s page in the memfd (memfd mode), or in the
    /// concatenation of the arena's mappings: the zones' runs of frames, lowest first.
    pub fn file_offset(&self, pfn: Pfn) -> Option<u64> {
        let s = self.segment(pfn.0)?;
        Some(s.file_off + ((pfn.0 - s.first_pfn) << self.page_shift))
    }

    /// The first frame of the arena (the lowest `start_pfn` of the configuration).
    pub fn first_pfn(&self) -> Pfn {
        Pfn(self.segs.first().map_or(0, |s| s.first_pfn))
    }

    /// Frames mapped: every frame of every zone, holes included, and none between
    /// zones.
    pub fn nr_frames(&self) -> u64 {
        self.segs.iter().map(|s| s.nr_frames).sum()
    }

    /// The segment holding frame `pfn`.
    #[inline]
    fn segment(&self, pfn: u64) -> Option<&Segment> {
        let s = if self.segs.len() == 1 {
            &self.segs[0]
        } else {
            let i = self
                .segs
                .partition_point(|s| s.first_pfn <= pfn)
                .checked_sub(1)?;
            &self.segs[i]
        };
        (pfn.wrapping_sub(s.first_pfn) < s.nr_frames).then_some(s)
    }

    /// The bytes of frames `[pfn, pfn + nr)`, clamped to `pfn`'s run of frames: a
    /// pointer into the mapping and a length that stays inside it.
    fn frames_bytes(&self, pfn: Pfn, nr: u64) -> Option<(*mut u8, usize)> {
        let s = self.segment(pfn.0)?;
        let i = pfn.0 - s.first_pfn;
        let nr = nr.min(s.nr_frames - i);
        let p = self.page_address(pfn)?;
        Some((p.as_ptr(), (nr << self.page_shift) as usize))
    }

    /// Bytes mapped.
    pub fn len_bytes(&self) -> usize {
        self.len
    }

    /// The frame whose page contains `addr`, if it lies in the arena.
    fn pfn_of_addr(&self, addr: *const u8) -> Option<Pfn> {
        let a = addr as usize;
        self.segs.iter().find_map(|s| {
            let off = a.checked_sub(s.base.as_ptr() as usize)?;
            (off < s.bytes(self.page_shift))
                .then(|| Pfn(s.first_pfn + (off >> self.page_shift) as u64))
        })
    }
}

/// Maps `bytes` for the run of frames from `first_pfn` (at `file_off` of the memfd in
/// memfd mode), at an address aligned like the frame numbers up to the largest
/// block, so that a block of order `max_order` at an aligned pfn is aligned in memory
/// too (for huge pages and for callers that rely on natural alignment).
fn map_run(
    arena: &Arena,
    config: &Config,
    first_pfn: u64,
    bytes: usize,
    file_off: u64,
    opts: ArenaOptions,
) -> Result<NonNull<u8>, ConfigError> {
    let mut flags = libc::MAP_NORESERVE;
    flags |= if arena.memfd.is_some() {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    };
    if opts.populate {
        flags |= libc::MAP_POPULATE;
    }
    let fd = arena.memfd.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let file_off = libc::off_t::try_from(file_off).map_err(|_| ConfigError::Backend)?;
    // Reserve enough address space to choose an aligned start, map there, give back
    // the slack.
    let align = (1usize << config.page_shift) << config.max_order.0;
    let phase = (first_pfn as usize).wrapping_shl(u32::from(config.page_shift)) & (align - 1);
    let reserve_len = bytes.checked_add(align).ok_or(ConfigError::Backend)?;
    // SAFETY: a fresh inaccessible reservation at an address of the kernel's choosing
    // aliases no Rust object.
    let r = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            reserve_len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return Err(ConfigError::Backend);
    }
    let r = r as usize;
    let start = (r.wrapping_sub(phase)).next_multiple_of(align) + phase;
    let start = if start < r { start + align } else { start };
    // SAFETY: `[start, start + bytes)` lies inside the reservation just made
    // (`start - r < align`), which nothing else uses, so MAP_FIXED replaces only our
    // own inaccessible pages.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_FIXED,
            fd,
            file_off,
        )
    };
    // SAFETY: unmapping the unused head and tail of our own reservation.
    unsafe {
        if start > r {
            libc::munmap(r as *mut libc::c_void, start - r);
        }
        let end = start + bytes;
        if r + reserve_len > end {
            libc::munmap(end as *mut libc::c_void, r + reserve_len - end);
        }
    }
    if p == libc::MAP_FAILED {
        // SAFETY: the middle of the reservation, still ours.
        unsafe { libc::munmap(start as *mut libc::c_void, bytes) };
        return Err(ConfigError::Backend);
    }
    if opts.huge_pages {
        // SAFETY: advice on the mapping just created; failure only means no THP.
        unsafe {
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        }
    }
    NonNull::new(p.cast::<u8>()).ok_or(ConfigError::Backend)
}

// SAFETY: every frame of each segment `[first_pfn, first_pfn + nr_frames)` maps to
// its own `1 << page_shift` bytes of that segment's mapping, in frame order, for the
// arena's lifetime; segments do not overlap, and frames outside them have no address.
unsafe impl Backend for Arena {
    #[inline]
    fn page_address(&self, pfn: Pfn) -> Option<NonNull<u8>> {
        let s = self.segment(pfn.0)?;
        let i = pfn.0 - s.first_pfn;
        // SAFETY: `i < nr_frames` (checked by `segment`), so the offset stays inside
        // the segment's mapping of `nr_frames << page_shift` bytes.
        Some(unsafe { s.base.add((i << self.page_shift) as usize) })
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

    fn copy_pages(&self, from: Pfn, to: Pfn, nr: u64) -> bool {
        let (Some((src, len)), Some((dst, dst_len))) =
            (self.frames_bytes(from, nr), self.frames_bytes(to, nr))
        else {
            return false;
        };
        if len != dst_len {
            return false;
        }
        // SAFETY: `frames_bytes` keeps both ranges inside the mapping; the caller owns
        // both blocks for the copy (see `Backend::copy_pages`) and they are distinct
        // blocks of the allocator, so the ranges do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(src.cast_const(), dst, len) };
        true
    }

    fn pfn_of_addr(&self, addr: *const u8) -> Option<Pfn> {
        Arena::pfn_of_addr(self, addr)
    }

    fn can_discard(&self) -> bool {
        true
    }

    fn discard_pages(&self, pfn: Pfn, nr: u64) -> bool {
        let Some((p, len)) = self.frames_bytes(pfn, nr) else {
            return false;
        };
        // SAFETY: advice on a range inside the arena's own mapping
        // (`frames_bytes`); the frames are free and reserved for the call (see
        // `Backend::discard_pages`), so no reference into them is live, and the
        // advice only drops contents, which the contract allows.
        unsafe { libc::madvise(p.cast(), len, self.discard) == 0 }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for s in self.segs.iter() {
            // SAFETY: unmaps exactly a mapping created in `new`; the arena is dropped
            // only with its allocator, so no block of it is still handed out through
            // the allocator's API.
            unsafe {
                libc::munmap(s.base.as_ptr().cast(), s.bytes(self.page_shift));
            }
        }
    }
}

/// A new memfd of `len` bytes (zero-filled, pages allocated on first touch).
#[cfg(target_os = "linux")]
fn create_memfd(len: usize) -> Result<OwnedFd, ConfigError> {
    let name = c"zonealloc-arena";
    // SAFETY: `name` is a valid NUL-terminated string; the flags are valid.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(ConfigError::Backend);
    }
    // SAFETY: `fd` was just returned by `memfd_create` and is owned by no one else.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(len).map_err(|_| ConfigError::Backend)?;
    // SAFETY: `ftruncate` on a descriptor we own; no memory is touched.
    if unsafe { libc::ftruncate(file.as_raw_fd(), len) } != 0 {
        return Err(ConfigError::Backend);
    }
    Ok(file)
}

/// memfd is Linux's; elsewhere the memfd mode is refused.
#[cfg(not(target_os = "linux"))]
fn create_memfd(_len: usize) -> Result<OwnedFd, ConfigError> {
    Err(ConfigError::Backend)
}

// -----------------------------------------------------------------------------
// Windows: a second, rearrangeable view of a memfd arena's frames
// -----------------------------------------------------------------------------

/// A reserved range of virtual addresses into which runs of a memfd arena's frames
/// are mapped (`PROT_NONE` everywhere else): the page tables of vmalloc.
///
/// The window holds its own duplicate of the arena's memfd, so its mappings stay
/// valid whatever order the two are dropped in; dropping the window unmaps all of
/// it. Only raw addresses into the window are ever handed out.
#[derive(Debug)]
pub(crate) struct ArenaWindow {
    base: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
    /// The arena's runs of frames as `(first_pfn, nr_frames, file_off)`.
    runs: alloc::boxed::Box<[(u64, u64, u64)]>,
    page_shift: u8,
}

// SAFETY: the window is address space plus a file descriptor; what may be written
// through it is decided by the vmalloc layer's ownership rules.
unsafe impl Send for ArenaWindow {}
// SAFETY: as above; `&ArenaWindow` only maps and unmaps inside its own reservation,
// and the kernel serialises concurrent `mmap` calls.
unsafe impl Sync for ArenaWindow {}

/// Why a window operation failed: the `errno` of the system call, or `None` for an
/// argument outside the window or the arena (nothing was called then).
pub(crate) type WindowError = Option<i32>;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl ArenaWindow {
    /// Reserves `len` bytes (rounded up to pages) of address space aligned to
    /// `align` bytes (a power of two, at least a page), mapped `PROT_NONE`, for
    /// views of `arena`'s frames. `Err(None)` if the arena has no memfd.
    pub(crate) fn reserve(arena: &Arena, len: usize, align: usize) -> Result<Self, WindowError> {
        let fd = arena
            .memfd
            .as_ref()
            .ok_or(None)?
            .try_clone()
            .map_err(|e| e.raw_os_error())?;
        let page = 1usize << arena.page_shift;
        let align = align.max(page);
        if !align.is_power_of_two() {
            return Err(None);
        }
        let len = len.checked_next_multiple_of(page).ok_or(None)?;
        let span = len.checked_add(align).ok_or(None)?;
        // SAFETY: a fresh inaccessible anonymous mapping at an address of the
        // kernel's choosing aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                span,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Some(errno()));
        }
        let raw = p as usize;
        let base = raw.next_multiple_of(align);
        let (head, tail) = (base - raw, raw + span - (base + len));
        // SAFETY: both trims lie inside the reservation just made and outside
        // `[base, base + len)`; nothing refers to them.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((base + len) as *mut libc::c_void, tail);
            }
        }
        Ok(ArenaWindow {
            base: NonNull::new(base as *mut u8).ok_or(None)?,
            len,
            fd,
            runs: arena
                .segs
                .iter()
                .map(|s| (s.first_pfn, s.nr_frames, s.file_off))
                .collect(),
            page_shift: arena.page_shift,
        })
    }

    /// First address of the window.
    pub(crate) fn base(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Bytes in the window.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The byte range `[offset, offset + nr pages)` of the window, if inside it.
    fn range(&self, offset: usize, nr: u64) -> Option<(*mut libc::c_void, usize)> {
        let bytes = usize::try_from(nr)
            .ok()?
            .checked_mul(1 << self.page_shift)?;
        let page_mask = (1usize << self.page_shift) - 1;
        if offset & page_mask != 0 || bytes == 0 || offset.checked_add(bytes)? > self.len {
            return None;
        }
        Some(((self.base() + offset) as *mut libc::c_void, bytes))
    }

    /// Maps the `nr` frames from `pfn` (consecutive in the arena) at `offset`
    /// bytes into the window, read-write, with one `mmap(MAP_FIXED | MAP_SHARED)`:
    /// writes through the window land in the frames.
    pub(crate) fn map(&self, offset: usize, pfn: Pfn, nr: u64) -> Result<(), WindowError> {
        let (addr, bytes) = self.range(offset, nr).ok_or(None)?;
        // The frames must lie in one run of the arena, where the file is contiguous.
        let &(first, nr_run, run_off) = self
            .runs
            .iter()
            .find(|&&(f, n, _)| pfn.0.wrapping_sub(f) < n)
            .ok_or(None)?;
        let i = pfn.0 - first;
        if i.checked_add(nr).ok_or(None)? > nr_run {
            return Err(None);
        }
        let file_off = libc::off_t::try_from(run_off + (i << self.page_shift)).map_err(|_| None)?;
        // SAFETY: `[addr, addr + bytes)` lies inside this window's reservation (checked
        // by `range`), which the crate owns and where no Rust object lives, so
        // `MAP_FIXED` replaces only our own mapping; the file range is inside the
        // arena's memfd (checked above).
        let p = unsafe {
            libc::mmap(
                addr,
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.fd.as_raw_fd(),
                file_off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Some(errno()));
        }
        debug_assert_eq!(p, addr);
        Ok(())
    }

    /// Unmaps `nr` pages at `offset` bytes into the window by mapping fresh
    /// `PROT_NONE` memory over them (`MAP_FIXED`), keeping the reservation.
    pub(crate) fn unmap(&self, offset: usize, nr: u64) -> Result<(), WindowError> {
        let (addr, bytes) = self.range(offset, nr).ok_or(None)?;
        // SAFETY: as in `map`: the range is inside our own reservation.
        let p = unsafe {
            libc::mmap(
                addr,
                bytes,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Some(errno()));
        }
        Ok(())
    }
}

impl Drop for ArenaWindow {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation made in `reserve`; the vmalloc layer
        // drops the window last, after every area in it is gone.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
