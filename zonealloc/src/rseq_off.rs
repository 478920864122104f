//! No per-CPU stacks on this target (not x86-64 Linux with glibc and `std`, or
//! under loom or Miri): every call takes the per-CPU lists' try-lock path. The
//! same interface as `rseq.rs`, with nothing behind it.

#![allow(dead_code)]

use core::sync::atomic::AtomicU8;

/// Blocks one stack can hold.
pub(crate) const STACK_CAP: usize = 512;

/// Tuning of one stack.
#[derive(Default)]
pub(crate) struct Tune {
    pub limit: AtomicU8,
    pub flush_run: AtomicU8,
    pub alloc_factor: AtomicU8,
}

/// One CPU's stacks: never built here.
pub(crate) struct CpuStacks {
    pub tune: [Tune; crate::types::NR_PCP_LISTS],
    never: core::convert::Infallible,
}

impl CpuStacks {
    pub(crate) fn len(&self, _p: usize) -> u64 {
        match self.never {}
    }
    pub(crate) fn pops(&self, _p: usize) -> u64 {
        match self.never {}
    }
    pub(crate) fn pushes(&self, _p: usize) -> u64 {
        match self.never {}
    }
    pub(crate) fn set_lim(&self, _p: usize, _lim: u32) {
        match self.never {}
    }
    pub(crate) fn count_in(&self, _p: usize, _n: u64) {
        match self.never {}
    }
    pub(crate) fn count_out(&self, _p: usize, _n: u64) {
        match self.never {}
    }
    pub(crate) fn take_all_stopped(&self, _p: usize, _out: &mut alloc::vec::Vec<u32>) {
        match self.never {}
    }
}

/// Why a push or pop did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    Cpu(usize),
    Off,
}

/// No stacks.
pub(crate) struct Stacks;

impl Stacks {
    pub(crate) fn none() -> Stacks {
        Stacks
    }
    pub(crate) fn new(_nr_cpus: usize) -> Stacks {
        Stacks
    }
    #[inline(always)]
    pub(crate) fn on(&self) -> bool {
        false
    }
    pub(crate) fn len(&self) -> usize {
        0
    }
    pub(crate) fn cpu(&self, _cpu: usize) -> Option<&CpuStacks> {
        None
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
