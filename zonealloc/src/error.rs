//! Typed errors of the public API.
//!
//! Every error is returned before anything changes: a call that fails leaves every
//! structure of the allocator exactly as it was.

use core::fmt;

use crate::types::{Order, Pfn};

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// No eligible zone had a free block of the order within its watermarks, even after
    /// draining the per-CPU lists and the highatomic reserves.
    NoMemory {
        /// The order asked for.
        order: Order,
    },
    /// The order is above the configured `max_order`.
    InvalidOrder(Order),
    /// The node does not exist.
    InvalidNode(u16),
    /// The request's zone selection and node leave no populated zone to try.
    NoEligibleZone,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::NoMemory { order } => write!(f, "out of memory at order {order}"),
            AllocError::InvalidOrder(o) => write!(f, "order {o} above max_order"),
            AllocError::InvalidNode(n) => write!(f, "no node {n}"),
            AllocError::NoEligibleZone => f.write_str("no eligible zone for the request"),
        }
    }
}

/// Why a free, a reference change or a split was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// The frame is in no zone.
    OutOfRange(Pfn),
    /// The frame is a hole or reserved: it never belonged to the allocator.
    Hole(Pfn),
    /// The frame is inside an allocated block but is not its first frame.
    TailPage(Pfn),
    /// The block is already free (in the buddy lists or a per-CPU list), or inside a
    /// free block.
    AlreadyFree(Pfn),
    /// The block was allocated with another order.
    WrongOrder {
        /// The block.
        pfn: Pfn,
        /// The order the caller gave.
        given: Order,
        /// The order the block has.
        actual: Order,
    },
    /// The frame is not aligned to the order given.
    Misaligned {
        /// The frame.
        pfn: Pfn,
        /// The order given.
        order: Order,
    },
    /// The order is above the configured `max_order`.
    InvalidOrder(Order),
    /// The frame is owned by a layer that frees it itself (a page_frag cache, a live
    /// vmalloc area: every raw path refuses their blocks) or is in a state the call
    /// cannot accept (e.g. `split_page` of a split page).
    Busy(Pfn),
    /// The reference count would overflow.
    RefcountOverflow(Pfn),
    /// A range crosses a zone boundary or runs past the end of the zone.
    CrossesZone(Pfn),
    /// The frame was taken out of circulation after a bad-page report.
    BadPage(Pfn),
    /// The address is not in the allocator's memory.
    ForeignAddress(usize),
    /// The block belongs to a live `PageBlock` guard: only the guard frees it or
    /// changes its references (drop it, or take the block back with `into_raw`).
    Guarded(Pfn),
}

impl FreeError {
    /// The frame the error is about.
    pub fn pfn(&self) -> Pfn {
        match *self {
            FreeError::OutOfRange(p)
            | FreeError::Hole(p)
            | FreeError::TailPage(p)
            | FreeError::AlreadyFree(p)
            | FreeError::Busy(p)
            | FreeError::RefcountOverflow(p)
            | FreeError::CrossesZone(p)
            | FreeError::BadPage(p)
            | FreeError::Guarded(p) => p,
            FreeError::WrongOrder { pfn, .. } | FreeError::Misaligned { pfn, .. } => pfn,
            FreeError::InvalidOrder(_) | FreeError::ForeignAddress(_) => Pfn(0),
        }
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::OutOfRange(p) => write!(f, "pfn {p} is in no zone"),
            FreeError::Hole(p) => write!(f, "pfn {p} is a hole"),
            FreeError::TailPage(p) => write!(f, "pfn {p} is a tail page"),
            FreeError::AlreadyFree(p) => write!(f, "pfn {p} is already free"),
            FreeError::WrongOrder { pfn, given, actual } => {
                write!(
                    f,
                    "pfn {pfn} freed at order {given}, allocated at order {actual}"
                )
            }
            FreeError::Misaligned { pfn, order } => {
                write!(f, "pfn {pfn} is not aligned to order {order}")
            }
            FreeError::InvalidOrder(o) => write!(f, "order {o} above max_order"),
            FreeError::Busy(p) => write!(f, "pfn {p} is not in a state this call accepts"),
            FreeError::RefcountOverflow(p) => write!(f, "pfn {p}: reference count overflow"),
            FreeError::CrossesZone(p) => write!(f, "range at pfn {p} crosses a zone boundary"),
            FreeError::BadPage(p) => write!(f, "pfn {p} was reported bad"),
            FreeError::ForeignAddress(a) => write!(f, "address {a:#x} is not the allocator's"),
            FreeError::Guarded(p) => write!(f, "pfn {p} is owned by a PageBlock guard"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AllocError {}
#[cfg(feature = "std")]
impl std::error::Error for FreeError {}
