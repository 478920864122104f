//! Debug modes and fault injection: page poisoning, init-on-alloc/free, bad-page
//! reports, and failures injected at chosen call sites.
//!
//! Hooks on the allocator's prepare steps: `free_prepare` runs when a block's last
//! reference is dropped (before it reaches a per-CPU or buddy list), `alloc_check`
//! when a block is handed out. No lock is held in either; the block is owned by the
//! caller.
//!
//! * **Poisoning** (Linux's `page_poison`): freed pages are filled with `PAGE_POISON`
//!   (0xaa) and checked on allocation; a byte that changed means someone wrote to
//!   memory after freeing it. The block is then reported (pfn, offset, byte found)
//!   and taken out of circulation (`Bad` state, never handed out again), and the
//!   allocation retries, as Linux's `check_new_pages` does.
//! * **init_on_free / init_on_alloc**: zero pages when freed / when allocated.
//! * **Fault injection** (Linux's `fail_page_alloc`): each `FaultSite` can be told to
//!   fail every n-th call, to prove that every caller unwinds cleanly.
//!
//! Poisoning and the init modes need a backend with memory (the arena); on abstract
//! frames they do nothing.

use alloc::vec::Vec;

use crate::allocator::ZoneAllocator;
use crate::backend::Backend;
use crate::frame::{Word, TAG_BAD};
use crate::sync::{AtomicU64, Lock, Ordering};
use crate::types::{Order, Pfn};
use crate::zone::Zone;

/// The byte freed pages are filled with (Linux's `PAGE_POISON`).
pub const PAGE_POISON: u8 = 0xaa;

/// Debug options (`Config::debug`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugConfig {
    /// Fill freed pages with `PAGE_POISON` and check it on allocation.
    pub poison: bool,
    /// Zero every page when it is allocated.
    pub init_on_alloc: bool,
    /// Zero every page when it is freed (takes precedence over poisoning).
    pub init_on_free: bool,
}

/// A call site where a failure can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultSite {
    /// Every page allocation (`alloc_pages` and everything built on it).
    Alloc = 0,
    /// A per-CPU list refill from the buddy lists (`rmqueue_bulk`).
    PcpRefill = 1,
    /// The backing pages of a vmalloc area.
    VmallocBacking = 2,
    /// A page_frag cache refill.
    FragRefill = 3,
}

/// Number of fault sites.
pub const NR_FAULT_SITES: usize = 4;

impl FaultSite {
    /// Every site.
    pub const ALL: [FaultSite; NR_FAULT_SITES] = [
        FaultSite::Alloc,
        FaultSite::PcpRefill,
        FaultSite::VmallocBacking,
        FaultSite::FragRefill,
    ];
}

/// Per-site injection state. Relaxed atomics: a fault plan is a test harness
/// setting, and the counters only need to be exact totals.
#[derive(Default)]
pub(crate) struct Faults {
    every: [AtomicU64; NR_FAULT_SITES],
    calls: [AtomicU64; NR_FAULT_SITES],
    injected: [AtomicU64; NR_FAULT_SITES],
    armed: AtomicU64,
}

/// What poisoning found on a block being allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadPageReport {
    /// The block's first frame.
    pub pfn: Pfn,
    /// The block's order.
    pub order: Order,
    /// Byte offset of the first corrupted byte from the block's start.
    pub offset: usize,
    /// The byte found there.
    pub found: u8,
}

/// Debug state kept by the allocator.
#[derive(Default)]
pub(crate) struct DebugState {
    pub faults: Faults,
    pub bad_pages: Lock<Vec<BadPageReport>>,
}

impl Faults {
    /// Whether this call at `site` should fail.
    #[inline]
    pub(crate) fn should_fail(&self, site: FaultSite) -> bool {
        // Fast path: one relaxed load when no site is armed.
        if self.armed.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let i = site as usize;
        let every = self.every[i].load(Ordering::Relaxed);
        if every == 0 {
            return false;
        }
        let n = self.calls[i].fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(every) {
            self.injected[i].fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }
}

impl<B: Backend> ZoneAllocator<B> {
    /// Makes every `every`-th call at `site` fail (0 turns the site off).
    pub fn inject_faults(&self, site: FaultSite, every: u64) {
        let f = &self.debug.faults;
        f.every[site as usize].store(every, Ordering::Relaxed);
        f.calls[site as usize].store(0, Ordering::Relaxed);
        let armed = f
            .every
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .count();
        f.armed.store(armed as u64, Ordering::Relaxed);
    }

    /// Failures injected so far at `site`.
    pub fn faults_injected(&self, site: FaultSite) -> u64 {
        self.debug.faults.injected[site as usize].load(Ordering::Relaxed)
    }

    /// Whether this call at `site` should fail (for the layers built on the core).
    #[inline]
    pub(crate) fn should_fail(&self, site: FaultSite) -> bool {
        self.debug.faults.should_fail(site)
    }

    /// Blocks reported bad (and taken out of circulation) so far.
    pub fn bad_page_reports(&self) -> Vec<BadPageReport> {
        self.debug.bad_pages.lock().clone()
    }

    /// Brings the initially free memory into the state the debug checks expect, as
    /// Linux's boot-time frees do: poisoned, or zeroed for `init_on_free`.
    pub(crate) fn init_free_memory(&self) {
        let d = self.config.debug;
        let byte = if d.init_on_free {
            if self.backend.initially_zero() {
                return;
            }
            0
        } else if d.poison {
            PAGE_POISON
        } else {
            return;
        };
        for (_, start, spanned, _) in self.zones() {
            for p in start.0..start.0 + spanned {
                if !matches!(
                    self.frame_state(Pfn(p)),
                    Some(crate::frame::FrameState::Hole)
                ) {
                    self.backend.fill_pages(Pfn(p), 1, byte);
                }
            }
        }
    }

    /// `free_pages_prepare()`'s debug part: zero or poison a block being freed.
    #[inline]
    pub(crate) fn free_prepare(&self, pfn: Pfn, order: Order) {
        let d = self.config.debug;
        if d.init_on_free {
            self.backend.zero_pages(pfn, order.nr_pages());
        } else if d.poison {
            self.backend.fill_pages(pfn, order.nr_pages(), PAGE_POISON);
        }
    }

    /// `check_new_pages()` and `post_alloc_hook()`'s debug part: verify the poison
    /// of a block being allocated (reporting and retiring it if corrupted) and zero
    /// it if asked. Returns `false` if the block was retired.
    #[inline]
    pub(crate) fn alloc_check(&self, z: &Zone, pfn: Pfn, order: Order) -> bool {
        let d = self.config.debug;
        if d.poison || d.init_on_free {
            let expect = if d.init_on_free { 0 } else { PAGE_POISON };
            if let Some((offset, found)) = self.backend.find_mismatch(pfn, order.nr_pages(), expect)
            {
                self.debug.bad_pages.lock().push(BadPageReport {
                    pfn,
                    order,
                    offset,
                    found,
                });
                z.frames
                    .set_word(z.idx(pfn), Word::new(TAG_BAD, order.0, 0, 0));
                return false;
            }
        }
        if d.init_on_alloc && !d.init_on_free {
            self.backend.zero_pages(pfn, order.nr_pages());
        }
        true
    }
}
