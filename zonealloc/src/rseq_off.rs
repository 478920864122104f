//! No restartable sequences on this target (not x86-64 Linux with glibc and
//! `std`, or under loom or Miri): the sequences' operations find no stacks, and
//! every call that would use them takes the per-CPU lists' try-lock path (or,
//! with a platform, the pinned stacks of `stacks`). The same interface as
//! `rseq.rs`, with nothing behind it.

use crate::stacks::{CpuStacks, Miss, Stacks};

impl Stacks {
    /// No stacks for restartable sequences here.
    pub(crate) fn rseq(_nr_cpus: usize) -> Stacks {
        Stacks::none()
    }

    #[inline(always)]
    pub(crate) fn pop(&self, _p: usize) -> Result<u32, Miss> {
        Err(Miss::Off)
    }

    #[inline(always)]
    pub(crate) fn push(&self, _p: usize, _idx: u32) -> Result<(), Miss> {
        Err(Miss::Off)
    }

    pub(crate) fn push_all(&self, _p: usize, _blocks: &[u32]) -> Option<usize> {
        None
    }

    pub(crate) fn pop_many(
        &self,
        _p: usize,
        _out: &mut [core::mem::MaybeUninit<u32>],
    ) -> Option<(usize, usize)> {
        None
    }

    pub(crate) fn stop(&self, _cpu: usize) -> Option<&CpuStacks> {
        None
    }

    pub(crate) fn resume(&self, _cpu: usize) {}
}
