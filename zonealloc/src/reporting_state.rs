//! Free page reporting as the allocator holds it: the reporter an owner
//! registers (`PageReporter`, `Reporter`), and the registration and counters
//! kept between passes.
//!
//! Below the allocator so that the allocator can own it without reaching up;
//! `reporting` (above) runs the passes over it and re-exports the owner's types
//! at `zonealloc::reporting`. The registration is behind its own lock, which no
//! pass holds while a reporter runs; the counters are relaxed events.

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::counter::Counter;
use crate::sync::{AtomicBool, Lock};
use crate::types::{Order, Pfn};

/// An owner's reporter: told of free blocks it may take the memory of.
pub trait PageReporter: Send + Sync {
    /// Reports `blocks`, each `(head, order)`, free and reserved for this call:
    /// no one allocates them until it returns. `Ok` marks them reported (not
    /// offered again until reused); `Err` gives them back unreported and ends the
    /// pass. Called with no allocator lock held.
    ///
    /// # Errors
    /// The reporter's refusal.
    fn report(&self, blocks: &[(Pfn, Order)]) -> Result<(), ReportRefused>;
}

/// A reporter's refusal of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportRefused;

/// Who is told of free blocks.
#[derive(Clone)]
pub enum Reporter {
    /// The backend gives the blocks' memory back itself (`Backend::discard_pages`):
    /// over an arena, `madvise`.
    Backend,
    /// An owner's reporter.
    Hook(Arc<dyn PageReporter>),
}

impl core::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Reporter::Backend => f.write_str("Backend"),
            Reporter::Hook(_) => f.write_str("Hook(..)"),
        }
    }
}

/// The registered reporter with its order.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) how: Reporter,
    pub(crate) order: Order,
    pub(crate) capacity: usize,
    /// Which registration this is: a pass stops when it is no longer current.
    pub(crate) epoch: u64,
}

/// The allocator's reporting state.
pub(crate) struct ReportingState {
    pub(crate) registered: Lock<Option<Registered>>,
    pub(crate) epochs: crate::sync::AtomicU64,
    pub(crate) running: AtomicBool,
    /// The blocks of the batch a pass hands the reporter: room for `capacity`
    /// of them, allocated at registration (empty while none is registered). A
    /// pass takes the buffer out for its run (`running` admits one at a time) and
    /// puts it back, so no lock is held while the reporter runs and no pass
    /// calls the heap.
    pub(crate) batch: Lock<Vec<(Pfn, Order)>>,
    pub(crate) passes: Counter,
    pub(crate) batches: Counter,
    pub(crate) blocks: Counter,
    pub(crate) pages: Counter,
    pub(crate) refused: Counter,
    pub(crate) panicked: Counter,
}

impl ReportingState {
    pub(crate) fn new() -> ReportingState {
        ReportingState {
            // Process context only (registration and reporting passes).
            registered: Lock::new(None, None),
            epochs: crate::sync::AtomicU64::new(0),
            running: AtomicBool::new(false),
            batch: Lock::new(Vec::new(), None),
            passes: Counter::new(),
            batches: Counter::new(),
            blocks: Counter::new(),
            pages: Counter::new(),
            refused: Counter::new(),
            panicked: Counter::new(),
        }
    }
}
