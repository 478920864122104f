//! Statistics counters: one type, one ordering story.
//!
//! Bottom layer. A `Counter` is a 64-bit atomic that lock-free readers load with
//! `Relaxed` ordering: a statistic needs atomicity (no torn or lost value), not
//! ordering with the memory around it. There are two ways to write one:
//!
//! * `add`: by the counter's single writer, the holder of the lock that owns it (the
//!   zone lock for a zone's free counts, a CPU's pcp lock for its list counts). A
//!   relaxed load and store, no locked instruction; no update is lost because no one
//!   else writes.
//! * `inc`: for counters any thread may bump (the zone's vmstat events). A relaxed
//!   `fetch_add`: exact totals for one locked instruction.
//!
//! A reader that needs several of a zone's counters consistent with each other (a
//! pagetypeinfo snapshot) reads them inside the zone's sequence-counter read section,
//! which every zone-lock hold brackets as a write section; one counter alone needs
//! nothing more.

use crate::sync::{AtomicU64, Ordering};

/// A statistics counter (see the module documentation for who may write it how).
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    /// The current value (relaxed).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Adds `d` (wrapping). Only the counter's single writer may call it.
    #[inline]
    pub fn add(&self, d: i64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(d as u64), Ordering::Relaxed);
    }

    /// Sets the value. Only the counter's single writer may call it.
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Adds `n` from any thread (one relaxed `fetch_add`).
    #[inline]
    pub fn inc(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

impl Default for Counter {
    fn default() -> Counter {
        Counter::new()
    }
}

/// An array of counters at zero.
pub(crate) fn counters<const N: usize>() -> [Counter; N] {
    core::array::from_fn(|_| Counter::new())
}
