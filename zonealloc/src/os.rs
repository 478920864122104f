//! Operating-system services for `std` builds on Linux: which CPU is this thread on.
//!
//! Part of the unsafe island. The fast way reads the `cpu_id` field of the thread's
//! rseq area, which glibc (2.35+) registers for every thread and the kernel rewrites
//! whenever the thread is scheduled; the slow way is `sched_getcpu()`. Either answer
//! may be stale a moment later (the thread can migrate); callers only use it to pick
//! which per-CPU lists to *try*, so a stale answer costs speed, never correctness.

#![allow(unsafe_code)]

/// `sched_getcpu()`, or 0 if it fails.
#[inline]
pub(crate) fn sched_getcpu() -> usize {
    // SAFETY: `sched_getcpu` has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as usize
}

#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
extern "C" {
    /// Offset of the rseq area from the thread pointer (glibc 2.35+, in ld.so).
    static __rseq_offset: isize;
    /// Size of the registered rseq area; 0 if glibc did not register one.
    static __rseq_size: u32;
}

/// The current CPU from the rseq area, if glibc registered one.
#[inline]
pub(crate) fn rseq_cpu_id() -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    {
        // SAFETY: both are plain data exported by glibc, written once before `main`.
        let (size, offset) = unsafe { (__rseq_size, __rseq_offset) };
        if size == 0 {
            return None;
        }
        let tp: usize;
        // SAFETY: on x86-64 Linux the first word of the TCB at %fs:0 holds the
        // thread pointer itself; reading it has no side effects.
        unsafe {
            core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
        };
        let area = tp.wrapping_add_signed(offset) as *const u32;
        // SAFETY: glibc registered an rseq area of `size` (>= 8) bytes at
        // `tp + offset` for this thread; `cpu_id` is its second u32. The kernel
        // writes it asynchronously, hence the volatile read.
        let cpu = unsafe { core::ptr::read_volatile(area.add(1)) };
        // Negative values mean "not registered" or "registration failed".
        (cpu as i32 >= 0).then_some(cpu as usize)
    }
    #[cfg(not(all(target_arch = "x86_64", target_env = "gnu")))]
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn rseq_agrees_with_sched_getcpu() {
        // Both are snapshots; retry a few times in case the thread migrated between
        // the two reads.
        let Some(_) = super::rseq_cpu_id() else {
            return;
        };
        let agreed = (0..100).any(|_| super::rseq_cpu_id() == Some(super::sched_getcpu()));
        assert!(agreed);
    }
}
