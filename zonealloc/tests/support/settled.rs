//! Test support, included by suites with `#[path]` (not part of the library): the
//! end-of-test check that every frame is free again.

use zonealloc::{Backend, ZoneAllocator};

/// Every frame is free again, on the buddy lists, and the structures are sound.
#[track_caller]
pub fn settled<B: Backend>(za: &ZoneAllocator<B>) {
    za.drain_all_pages();
    let r = za.check_invariants().unwrap();
    assert_eq!(r.allocated_pages, 0, "frames still allocated");
    assert_eq!(za.nr_free_pages(), za.managed_pages(), "frames lost");
}
