//! Fragmentation indices: arithmetic on a zone's free blocks per order.
//!
//! Vocabulary layer: pure functions, no allocator state. `stats` prints them
//! (debugfs `extfrag/unusable_index` and `extfrag/extfrag_index`) and `compaction`
//! decides with them whether a failure is one of fragmentation
//! (`compaction_suitable`) and how fragmented a zone is (the proactive score).

/// `fill_contig_page_info()` for one order from a zone's counters:
/// `(free_pages, free_blocks_total, free_blocks_suitable)`.
pub fn contig_page_info(nr_free_by_order: &[u64], order: usize) -> (u64, u64, u64) {
    let mut free_pages = 0;
    let mut total = 0;
    let mut suitable = 0;
    for (o, &n) in nr_free_by_order.iter().enumerate() {
        total += n;
        free_pages += n << o;
        if o >= order {
            suitable += n << (o - order);
        }
    }
    (free_pages, total, suitable)
}

/// `unusable_free_index()`: thousandths of free memory unusable for `order`.
pub fn unusable_free_index(nr_free_by_order: &[u64], order: usize) -> i64 {
    let (free, _, suitable) = contig_page_info(nr_free_by_order, order);
    if free == 0 {
        return 1000;
    }
    ((free - (suitable << order)) * 1000 / free) as i64
}

/// `__fragmentation_index()`: toward 0, a failure at `order` would be for lack of
/// memory; toward 1000, for fragmentation; -1000 if a suitable block exists.
pub fn fragmentation_index(nr_free_by_order: &[u64], order: usize) -> i64 {
    let (free, total, suitable) = contig_page_info(nr_free_by_order, order);
    if total == 0 {
        return 0;
    }
    if suitable > 0 {
        return -1000;
    }
    let requested = 1u64 << order;
    1000 - ((1000 + free * 1000 / requested) / total) as i64
}
