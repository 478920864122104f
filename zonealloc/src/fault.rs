//! Fault injection (Linux's `fail_page_alloc`): each `FaultSite` can be told to fail
//! every n-th call, to prove that every caller unwinds cleanly.
//!
//! Bottom layer (it needs only atomics), so every layer with a site (the allocator,
//! the per-CPU refill, vmalloc's backing, page_frag's refill) asks it directly.

use crate::sync::{AtomicU64, Ordering};

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

impl Faults {
    /// Whether any site is armed (one relaxed load).
    #[inline(always)]
    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed) != 0
    }

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

impl Faults {
    /// Makes every `every`-th call at `site` fail (0 turns the site off).
    pub(crate) fn inject(&self, site: FaultSite, every: u64) {
        self.every[site as usize].store(every, Ordering::Relaxed);
        self.calls[site as usize].store(0, Ordering::Relaxed);
        let armed = self
            .every
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .count();
        self.armed.store(armed as u64, Ordering::Relaxed);
    }

    /// Failures injected so far at `site`.
    pub(crate) fn injected(&self, site: FaultSite) -> u64 {
        self.injected[site as usize].load(Ordering::Relaxed)
    }
}
