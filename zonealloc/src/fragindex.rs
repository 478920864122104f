//! Fragmentation indices: arithmetic on a zone's free blocks per order.
//!
//! Vocabulary layer: pure functions, no allocator state. `stats` prints them
//! (debugfs `extfrag/unusable_index` and `extfrag/extfrag_index`) and `compaction`
//! decides with them whether a failure is one of fragmentation
//! (`compaction_suitable`) and how fragmented a zone is (the proactive score).

/// `fill_contig_page_info()` for one order from a zone's counters:
/// `(free_pages, free_blocks_total, free_blocks_suitable)`.
/// Sums that would pass `u64::MAX` (counts no zone can have) stop there.
pub fn contig_page_info(nr_free_by_order: &[u64], order: usize) -> (u64, u64, u64) {
    let mut free_pages = 0u64;
    let mut total = 0u64;
    let mut suitable = 0u64;
    for (o, &n) in nr_free_by_order.iter().enumerate() {
        total = total.saturating_add(n);
        free_pages = free_pages.saturating_add(shl_saturating(n, o));
        if o >= order {
            suitable = suitable.saturating_add(shl_saturating(n, o - order));
        }
    }
    (free_pages, total, suitable)
}

/// `n << shift`, or `u64::MAX` where that does not fit.
fn shl_saturating(n: u64, shift: usize) -> u64 {
    match u32::try_from(shift) {
        Ok(s) if s < 64 && n <= u64::MAX >> s => n << s,
        _ if n == 0 => 0,
        _ => u64::MAX,
    }
}

/// `unusable_free_index()`: thousandths of free memory unusable for `order`.
pub fn unusable_free_index(nr_free_by_order: &[u64], order: usize) -> i64 {
    let (free, _, suitable) = contig_page_info(nr_free_by_order, order);
    if free == 0 {
        return 1000;
    }
    let unusable = free.saturating_sub(shl_saturating(suitable, order));
    (u128::from(unusable) * 1000 / u128::from(free)) as i64
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
    let requested = u128::from(shl_saturating(1, order));
    let scaled = (1000 + u128::from(free) * 1000 / requested) / u128::from(total);
    1000i64.saturating_sub(i64::try_from(scaled).unwrap_or(i64::MAX))
}
