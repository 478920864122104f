//! What an owner of movable memory implements so that compaction can move its
//! blocks: the `Migrate` trait, the `Migration` it is handed, and its answer.
//!
//! Bottom layer: plain types only. The allocator keeps the registered migrator
//! (`compact_state`); `migrate` runs the isolate-migrate-putback protocol around
//! each call, and its module documentation has a runnable example.

use crate::types::{Order, Pfn};

/// What the owner did with a block compaction asked it to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateOutcome {
    /// The contents are in the new block and every reference of the owner now names
    /// it; the owner will never use the old block again.
    Moved,
    /// The block stays where it is (pinned, in use, or no longer the owner's).
    Refused,
}

/// One block to move: what the owner's `Migrate::migrate` is given.
pub struct Migration<'a> {
    pub(crate) old: Pfn,
    pub(crate) new: Pfn,
    pub(crate) order: Order,
    pub(crate) copy: &'a dyn Fn(Pfn, Pfn, u64) -> bool,
}

impl Migration<'_> {
    /// The head of the block to move.
    pub fn source(&self) -> Pfn {
        self.old
    }

    /// The head of the block to move it to (same order, allocated to the owner).
    pub fn target(&self) -> Pfn {
        self.new
    }

    /// The order of both blocks.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Copies the old block's contents into the new one through the backend;
    /// `false` if frames have no contents (abstract frames: the owner moves its
    /// data itself).
    pub fn copy_contents(&self) -> bool {
        (self.copy)(self.old, self.new, self.order.nr_pages())
    }
}

/// An owner of movable memory: moves its blocks when compaction asks.
///
/// Register one with `ZoneAllocator::set_migrator` (used by direct and proactive
/// compaction) or pass one to `compact_zone`/`compact_node`. Compaction calls it
/// from the compacting thread, without any allocator lock held, for blocks
/// allocated with a movable GFP (`Gfp::MOVABLE`) that carry no guard.
///
/// # Contract
/// * Refuse blocks you do not hold (they may be someone else's movable memory, or
///   yours freed a moment ago).
/// * Serialize the call with your own frees and reference changes of the block
///   (a lock, as Linux's migration holds the page lock). Between the call and its
///   return, do not free or reference the old block by another path.
/// * Return `Moved` only once your references name the new block. The new block
///   arrives with as many references as you held on the old one when the call
///   began (those you took or dropped before it, after compaction picked the
///   block, included), and keeps any you take or drop on it from then on, even
///   before compaction has seen the call return; from the return on compaction
///   frees the old block, and using it is a use after free.
///
/// Breaking the contract can corrupt only the owner's data: the allocator's own
/// state (every frame free exactly once or owned exactly once) holds whatever the
/// callback does.
///
/// # Panics and re-entry
/// A callback that panics is taken as `Refused` (with `std` the allocator catches
/// the unwind after the panic hook has reported it): the block stays where it was,
/// the target goes back, the run ends, and `compact_zone`/`compact_node` answer
/// `CompactError::OwnerPanicked`; direct compaction stops calling the owner for
/// that allocation. Without `std` nothing can catch it: build with
/// `panic = "abort"`, as kernels do. A callback may call the allocator (allocate,
/// free, take references); explicit compaction of a zone being compacted answers
/// `CompactError::Reentered`, since it would wait on the callback's own run.
pub trait Migrate: Send + Sync {
    /// Switches the owner's references from `old` to `new` (blocks of `2^order`
    /// frames), after the contents were copied; `Refused` to keep the block where it
    /// is. The default refuses: an owner implements this or `migrate`.
    fn relocate(&self, old: Pfn, new: Pfn, order: Order) -> MigrateOutcome {
        let _ = (old, new, order);
        MigrateOutcome::Refused
    }

    /// Moves one block. The default copies the contents through the backend (an
    /// `Arena` copies the bytes; abstract frames copy nothing) and then calls
    /// `relocate`. Override it to copy under your own lock, or to move data the
    /// allocator cannot see.
    fn migrate(&self, m: &Migration<'_>) -> MigrateOutcome {
        m.copy_contents();
        self.relocate(m.source(), m.target(), m.order())
    }
}
