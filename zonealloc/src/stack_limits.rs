//! How much the per-CPU stacks hold: their batches, limits and caps, how a run
//! of refills or flushes moves the limits, and setting them up on a zone.
//!
//! Layer above `pcp`, below the allocator: it reads a zone's stacks (`rseq`)
//! and the per-CPU list indices (`pcp`), and calls nothing else. The
//! allocator builds the stacks with its zones and resets their limits with the
//! per-CPU lists' `high` (`reset_limits`, under the CPU's pcp lock); the fast
//! path (`fast`) sizes each refill and flush with the rest, and a `LocalCache`
//! (`local`) follows the same limit rules for its own blocks. How a refill and
//! a flush use them is told at the top of `fast`.

use crate::pcp::pindex_to_order;
use crate::stacks::{CpuStacks, Stacks, STACK_CAP};
use crate::sync::Ordering;
use crate::types::{Order, NR_PCP_LISTS, PAGE_ALLOC_COSTLY_ORDER};
use crate::zone::Zone;

/// Blocks of order 0 a refill takes and a flush gives back; halved per order.
pub(crate) const STACK_BATCH: usize = 32;
/// Blocks of pageblock order a refill takes and a flush gives back.
const STACK_BATCH_PAGEBLOCK: usize = 8;
/// The most batches a stack holds before a free flushes, and a refill takes.
pub(crate) const MAX_BATCHES: u8 = 8;
/// Batches a stack holds at first.
pub(crate) const MIN_BATCHES: u8 = 2;

/// The limit of a stack or a `LocalCache` order (batches held before a free
/// flushes) after a refill: doubled, up to `MAX_BATCHES`, if flushes came since the
/// last refill (`flush_run`): they gave back what was wanted again. The run of
/// flushes starts again at 0.
#[inline]
pub(crate) fn limit_after_refill(limit: u8, flush_run: u8) -> u8 {
    if flush_run > 0 {
        (limit * 2).min(MAX_BATCHES)
    } else {
        limit
    }
}

/// The next refill's `alloc_factor` after one that took `batch << factor`: one
/// more, while that stays within `MAX_BATCHES` batches (Linux's
/// `pcp->alloc_factor`).
#[inline]
pub(crate) fn factor_after_refill(factor: u8, current: u8) -> u8 {
    if 2usize << factor <= MAX_BATCHES as usize {
        factor + 1
    } else {
        current
    }
}

/// `(limit, flush_run)` after a flush: a run of flushes longer than the limit in
/// batches, with no refill between them, halves the limit (down to
/// `MIN_BATCHES`): the owner is giving memory back, not swinging.
#[inline]
pub(crate) fn limit_after_flush(limit: u8, flush_run: u8) -> (u8, u8) {
    let run = flush_run + 1;
    if run > limit {
        ((limit / 2).max(MIN_BATCHES), 0)
    } else {
        (limit, run)
    }
}

/// The batch of stack `p`.
#[inline]
pub(crate) fn batch_of(p: usize, pageblock_order: Order) -> usize {
    let order = pindex_to_order(p, pageblock_order);
    if order.0 > PAGE_ALLOC_COSTLY_ORDER {
        STACK_BATCH_PAGEBLOCK
    } else {
        (STACK_BATCH >> order.0).max(1)
    }
}

/// The most blocks stack `p` may hold, and a refill take: a quarter of the CPU's
/// `high_max` (1/8 of the zone split between the CPUs, as Linux bounds a CPU's
/// lists), at least one block, at most `STACK_CAP`. A small zone's stacks so hold
/// a small share of it; a pageblock-order stack in a zone of a few pageblocks per
/// CPU holds one.
#[inline]
pub(crate) fn cap_of(high_max: u64, order: Order) -> usize {
    ((high_max / 4) >> order.0).clamp(1, STACK_CAP as u64 / 2) as usize
}

/// Builds `z`'s stacks for `nr_cpus` CPUs (their limits are set with the per-CPU
/// lists', by `reset_limits`), used with restartable sequences, or `pinned`;
/// `false` if the process cannot use them.
pub(crate) fn build_stacks(z: &mut Zone, nr_cpus: usize, pinned: bool) -> bool {
    z.stacks = if pinned {
        Stacks::pinned(nr_cpus)
    } else {
        Stacks::rseq(nr_cpus)
    };
    z.stacks.on()
}

/// Sets the stacks of CPU `cpu`'s lists to their starting limits within the bound
/// `high_max` gives (see `cap_of`). The caller holds the CPU's pcp lock.
pub(crate) fn reset_limits(z: &Zone, cpu: usize, high_max: u64) {
    for cs in stacks_of(z, cpu) {
        for p in 0..NR_PCP_LISTS {
            let order = pindex_to_order(p, z.pageblock_order);
            let t = &cs.tune[p];
            t.limit.store(MIN_BATCHES, Ordering::Relaxed);
            t.flush_run.store(0, Ordering::Relaxed);
            t.alloc_factor.store(0, Ordering::Relaxed);
            let lim = batch_of(p, z.pageblock_order) * MIN_BATCHES as usize;
            cs.set_lim(p, lim.min(cap_of(high_max, order)) as u32);
        }
    }
}

/// The stacks belonging to CPU `cpu`'s lists (stack `i` to CPU `i % nr_cpus`).
pub(crate) fn stacks_of(z: &Zone, cpu: usize) -> impl Iterator<Item = &CpuStacks> {
    (cpu..z.stacks.len())
        .step_by(z.pcp.len().max(1))
        .filter_map(|i| z.stacks.cpu(i))
}
