//! The platform of a Linux program whose threads pin themselves to CPUs: the
//! pinned fast path in user space, where a thread pinned alone to a CPU stands
//! in for a kernel's "preemption off".
//!
//! `std` on Linux only. `LinuxThreads` implements `Platform`: no interrupts to
//! keep out (a program's signal handlers that allocate need a guard of their
//! own, see `Platform::irq_save`), the CPU a thread claimed or the operating
//! system's, and `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` as the barrier
//! on another CPU (it reaches every running thread of the process, wherever it
//! runs). `LinuxThreads::pin` claims a CPU for the calling thread alone, pins
//! the thread to it, and hands out the `PinnedCpu` token safely: no other thread
//! can hold a claim on that CPU meanwhile.
//!
//! ```no_run
//! use zonealloc::{Config, Gfp, LinuxThreads, Order, ZoneAllocator};
//!
//! static THREADS: LinuxThreads = LinuxThreads;
//! let za = ZoneAllocator::new(Config { platform: Some(&THREADS), ..Config::with_bytes(64 << 20) }).unwrap();
//! assert!(za.pinned_available());
//! let pinned = LinuxThreads::pin(0).unwrap();
//! let p = za.alloc_pages_pinned(pinned.token(), Gfp::KERNEL, Order(0)).unwrap();
//! za.free_pages_pinned(pinned.token(), p, Order(0)).unwrap();
//! ```

#![allow(unsafe_code)]

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::platform::Platform;
use crate::stacks::PinnedCpu;

/// CPUs a thread can claim.
const MAX_CPUS: usize = 4096;

/// Which CPUs a thread has claimed (`LinuxThreads::pin`).
static CLAIMED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

std::thread_local! {
    /// The CPU this thread claimed, `usize::MAX` for none.
    static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Whether this process registered for `MEMBARRIER_CMD_PRIVATE_EXPEDITED`:
/// 0 not tried, 1 yes, 2 refused.
static REGISTERED: AtomicU8 = AtomicU8::new(0);

fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier takes plain integers and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        ) == 0
    }
}

/// The platform of a Linux program whose threads pin themselves (see the module
/// documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct LinuxThreads;

impl LinuxThreads {
    /// Claims CPU `cpu` for the calling thread alone and pins the thread to it
    /// (`sched_setaffinity`); the returned guard holds the `PinnedCpu` token and
    /// gives the claim up when dropped (the affinity stays).
    ///
    /// # Errors
    /// `AddrInUse` if another thread holds a claim on `cpu` (or this one holds a
    /// claim already), `InvalidInput` past 4096 CPUs, or what
    /// `sched_setaffinity` answered (a CPU the process may not run on).
    pub fn pin(cpu: usize) -> std::io::Result<PinnedThread> {
        use std::io::{Error, ErrorKind};
        if cpu >= MAX_CPUS {
            return Err(Error::from(ErrorKind::InvalidInput));
        }
        if MINE.with(|m| m.get()) != usize::MAX
            || CLAIMED[cpu]
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return Err(Error::from(ErrorKind::AddrInUse));
        }
        // SAFETY: a zeroed set with one CPU added; the call changes only this
        // thread's affinity.
        let r = unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set)
        };
        if r != 0 {
            let e = Error::last_os_error();
            CLAIMED[cpu].store(false, Ordering::Release);
            return Err(e);
        }
        MINE.with(|m| m.set(cpu));
        // SAFETY: this thread alone holds the claim on `cpu` until the guard
        // drops (the guard is not `Send`), so no other thread makes a token for
        // it through this type; the barrier (`membarrier`) reaches the thread
        // wherever it runs.
        let token = unsafe { PinnedCpu::new(cpu) };
        Ok(PinnedThread { token })
    }
}

/// A CPU claimed by the calling thread (`LinuxThreads::pin`).
#[derive(Debug)]
pub struct PinnedThread {
    token: PinnedCpu,
}

impl PinnedThread {
    /// The token for `alloc_pages_pinned` and `free_pages_pinned`.
    pub fn token(&self) -> &PinnedCpu {
        &self.token
    }
}

impl Drop for PinnedThread {
    fn drop(&mut self) {
        MINE.with(|m| m.set(usize::MAX));
        CLAIMED[self.token.cpu()].store(false, Ordering::Release);
    }
}

impl Platform for LinuxThreads {
    fn cpu_id(&self) -> usize {
        let mine = MINE.with(|m| m.get());
        if mine != usize::MAX {
            return mine;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_getcpu() }.max(0) as usize
    }

    fn can_sync_cpu(&self) -> bool {
        match REGISTERED.load(Ordering::Acquire) {
            1 => true,
            2 => false,
            _ => {
                let ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
                REGISTERED.store(if ok { 1 } else { 2 }, Ordering::Release);
                ok
            }
        }
    }

    fn sync_cpu(&self, _cpu: usize) -> bool {
        self.can_sync_cpu() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
    }
}
