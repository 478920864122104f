//! What each trace event asks of a replay, decided in one place.
//!
//! Middle layer, between the records (`event`) and the replays that act on them:
//! `Replayer` (this crate) and the `replay` experiment of `zonealloc bench`. They
//! keep different state (a map of zonealloc's blocks; slots of a handle table) but
//! read the trace alike: `Action::of` maps one event, given which trace frames the
//! replay holds and at what order, to what the replay must do.
//!
//! | event | held at the event's pfn | action |
//! |---|---|---|
//! | `mm_page_alloc`, `pfn=-1` | | `KernelFailedAlloc`: not replayed |
//! | `mm_page_alloc` | nothing | `Alloc` |
//! | `mm_page_alloc` | a block (its free was lost) | `Alloc` with `implicit_free`: free it first |
//! | `mm_page_free` | a block of that order | `Free` |
//! | `mm_page_free` | a block of a smaller order | `OrderMismatch`: skipped |
//! | `mm_page_free` | inside a larger held block | `PartialFree` (a `split_page()`d block) |
//! | `mm_page_free` | nothing | `Unheld`: allocated before the trace (or failed in the replay) |
//! | `mm_page_alloc_zone_locked`, `mm_page_pcpu_drain` | | counted: the kernel's own work; a block held there was freed unseen |
//! | the other two | | counted: the kernel's own work |

use zonealloc::Gfp;

use crate::event::Event;
use crate::gfp_names::effective_gfp;

/// What a replay does with one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// An allocation the kernel itself failed (`pfn=-1`): counted, not replayed.
    KernelFailedAlloc,
    /// Allocate a block of `order` with `gfp` (the trace's flags with the mobility of
    /// its `migratetype` field) for the trace frame `pfn`.
    Alloc {
        /// First frame of the block in the trace.
        pfn: u64,
        /// Order of the block.
        order: u8,
        /// The flags to allocate with.
        gfp: Gfp,
        /// The replay still holds a block at `pfn`: the kernel freed it unseen (a lost
        /// event), so that block is freed first.
        implicit_free: bool,
    },
    /// Free the block held at `pfn`, of this `order`.
    Free {
        /// First frame of the block in the trace.
        pfn: u64,
        /// Order of the block.
        order: u8,
    },
    /// A free at a larger order than the block held at its frame: skipped.
    OrderMismatch,
    /// A free of part of the block held at `head`: the pages of a `split_page()`d
    /// block freed one by one.
    PartialFree {
        /// First frame of the held block.
        head: u64,
        /// First frame freed.
        pfn: u64,
        /// Order of the part freed.
        order: u8,
    },
    /// A free of a frame the replay does not hold: allocated before the trace began,
    /// or an allocation that failed in the replay.
    Unheld {
        /// The frame freed.
        pfn: u64,
        /// Order of the block freed.
        order: u8,
    },
    /// `mm_page_free_batched`: the same free as its `mm_page_free`, counted only.
    FreeBatched,
    /// `mm_page_alloc_zone_locked`: the kernel took a block from its buddy lists
    /// (`percpu_refill`: to refill a per-CPU list). Counted; and a block the replay
    /// still holds there was freed unseen (a lost event).
    KernelZoneLocked {
        /// First frame of the block.
        pfn: u64,
        /// Order of the block.
        order: u8,
        /// Taken to refill a per-CPU list.
        percpu_refill: bool,
    },
    /// `mm_page_pcpu_drain`: the kernel flushed a block from a per-CPU list. Counted;
    /// and a block the replay still holds there was freed unseen (a lost event).
    KernelDrain {
        /// First frame of the block.
        pfn: u64,
        /// Order of the block.
        order: u8,
    },
    /// `mm_page_alloc_extfrag`: the kernel fell back to another migratetype, counted
    /// only.
    KernelFallback {
        /// Order of the foreign block that was split.
        fallback_order: u8,
        /// The pageblock changed owner (claimed).
        change_ownership: bool,
    },
}

impl Action {
    /// The action for `event`. `held(pfn)` is the order of the block the replay holds
    /// with its first frame at trace frame `pfn`, if any; `max_order` bounds the search
    /// for the head of a block that a partial free falls inside.
    #[inline]
    pub fn of(event: &Event, max_order: u8, held: impl Fn(u64) -> Option<u8>) -> Action {
        match *event {
            Event::Alloc {
                pfn,
                order,
                gfp,
                migratetype,
            } => match pfn {
                None => Action::KernelFailedAlloc,
                Some(pfn) => Action::Alloc {
                    pfn,
                    order,
                    gfp: effective_gfp(gfp, migratetype),
                    implicit_free: held(pfn).is_some(),
                },
            },
            Event::Free { pfn, order } => free_action(pfn, order, max_order, held),
            Event::FreeBatched { .. } => Action::FreeBatched,
            Event::AllocZoneLocked {
                pfn,
                order,
                percpu_refill,
                ..
            } => Action::KernelZoneLocked {
                pfn,
                order,
                percpu_refill,
            },
            Event::PcpuDrain { pfn, order, .. } => Action::KernelDrain { pfn, order },
            Event::AllocExtfrag {
                fallback_order,
                change_ownership,
                ..
            } => Action::KernelFallback {
                fallback_order,
                change_ownership,
            },
        }
    }
}

impl Action {
    /// `of`, for a replay that also knows, for any frame inside a held block of
    /// order > 0 other than its first, that block's first frame (`head_of`): a
    /// free inside a held block then costs one look-up instead of one per order.
    #[inline]
    pub fn of_covered(
        event: &Event,
        max_order: u8,
        held: impl Fn(u64) -> Option<u8>,
        head_of: impl Fn(u64) -> Option<u64>,
    ) -> Action {
        match *event {
            Event::Free { pfn, order } => match held(pfn) {
                Some(o) if o == order => Action::Free { pfn, order },
                Some(o) if o < order => Action::OrderMismatch,
                // The first part of a larger held block.
                Some(_) => Action::PartialFree {
                    head: pfn,
                    pfn,
                    order,
                },
                None => match head_of(pfn) {
                    Some(head) if held(head).is_some_and(|ho| ho > order) => {
                        Action::PartialFree { head, pfn, order }
                    }
                    _ => Action::Unheld { pfn, order },
                },
            },
            _ => Action::of(event, max_order, held),
        }
    }
}

/// The action for `mm_page_free` of `[pfn, pfn + 2^order)`: the block held there,
/// a mismatch, part of a larger held block, or nothing held.
#[inline]
fn free_action(pfn: u64, order: u8, max_order: u8, held: impl Fn(u64) -> Option<u8>) -> Action {
    match held(pfn) {
        Some(o) if o == order => return Action::Free { pfn, order },
        Some(o) if o < order => return Action::OrderMismatch,
        _ => {}
    }
    for o in (order + 1)..=max_order {
        let head = pfn & !((1u64 << o) - 1);
        if held(head).is_some_and(|ho| ho >= o) {
            return Action::PartialFree { head, pfn, order };
        }
    }
    Action::Unheld { pfn, order }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(pfn: u64, order: u8) -> Event {
        Event::Free { pfn, order }
    }

    #[test]
    fn frees_by_what_is_held() {
        // An order-2 block held at frame 8.
        let held = |p: u64| (p == 8).then_some(2);
        assert_eq!(
            Action::of(&free(8, 2), 10, held),
            Action::Free { pfn: 8, order: 2 }
        );
        assert_eq!(Action::of(&free(8, 3), 10, held), Action::OrderMismatch);
        for (pfn, order) in [(8, 0), (9, 0), (10, 1)] {
            assert_eq!(
                Action::of(&free(pfn, order), 10, held),
                Action::PartialFree {
                    head: 8,
                    pfn,
                    order
                }
            );
        }
        assert_eq!(
            Action::of(&free(12, 0), 10, held),
            Action::Unheld { pfn: 12, order: 0 }
        );
    }

    #[test]
    fn the_covered_look_up_answers_as_the_search() {
        // An order-3 block held at 16 (frames 17..24 covered), an order-0 at 5.
        let held = |p: u64| match p {
            16 => Some(3),
            5 => Some(0),
            _ => None,
        };
        let head_of = |p: u64| (17..24).contains(&p).then_some(16);
        for pfn in 0..40 {
            for order in 0..4 {
                let e = free(pfn, order);
                assert_eq!(
                    Action::of_covered(&e, 10, held, head_of),
                    Action::of(&e, 10, held),
                    "{pfn} {order}"
                );
            }
        }
    }

    #[test]
    fn allocation_at_a_held_frame_frees_it_first() {
        let alloc = |pfn| Event::Alloc {
            pfn,
            order: 0,
            gfp: Gfp::KERNEL,
            migratetype: None,
        };
        let held = |p: u64| (p == 5).then_some(0);
        let implicit = |pfn| match Action::of(&alloc(Some(pfn)), 10, held) {
            Action::Alloc { implicit_free, .. } => implicit_free,
            a => panic!("{a:?}"),
        };
        assert!(implicit(5));
        assert!(!implicit(6));
        assert_eq!(
            Action::of(&alloc(None), 10, held),
            Action::KernelFailedAlloc
        );
    }
}
