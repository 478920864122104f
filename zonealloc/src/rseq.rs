//! Per-CPU stacks committed with restartable sequences: the front of the per-CPU
//! lists, where `alloc_pages` and `free_pages` take no lock and make no atomic
//! read-modify-write of their own.
//!
//! Part of the unsafe island. x86-64 Linux with glibc 2.35 or later, `std`, not
//! under loom or Miri; everywhere else `Stacks` is empty and every call goes to
//! the per-CPU lists' try-lock path (see `pcp`), which stays the model for loom.
//!
//! # Layout
//! Each zone has one `CpuStacks` per CPU: for every per-CPU list index (order and
//! migratetype, as `pcp::order_to_pindex`), an array of free blocks' frame
//! indices and one 64-bit word that holds the stack's length (low 16 bits) and the
//! pushes made on it since the zone was built (the rest). A push or a pop is a
//! restartable sequence that reads the thread's CPU from glibc's rseq area,
//! checks that CPU's `stopped` flag, and commits with one store of that word;
//! if the thread is preempted, migrated or signalled before that store, the kernel
//! restarts it from the top. So no two threads ever interleave inside one CPU's
//! stack, and no atomic read-modify-write is needed.
//!
//! ```text
//!   free:  CAS Alloc -> Pcp (the one point that decides ownership) -> push
//!   alloc: pop -> store Alloc
//!   full:  pop a batch (one sequence), merge it under the zone lock
//!   empty: take a batch from the buddy lists (zone lock), push it (one sequence)
//!   stop:  set `stopped`, membarrier(PRIVATE_EXPEDITED_RSEQ, that CPU): from then
//!          on no sequence commits on that CPU, and the stopper owns its stacks
//! ```
//!
//! Pops are not counted at all: per stack, pops = pushes + blocks put on by
//! refills - blocks taken off by flushes and stops - length (`CpuStacks::pops`).
//! The refill/flush counters are updated after their sequence commits, so the
//! figure is exact once the stack is quiet.

#![allow(unsafe_code)]

use core::sync::atomic::{AtomicU8, Ordering};

use crate::stacks::{
    CpuStacks, Miss, Mode, Stacks, OFF_LIM, OFF_SLOTS, OFF_WORDS, STACK_CAP, STRIDE, STRIDE_SHIFT,
};

/// The head of every sequence: arms the thread's rseq area with the sequence's
/// descriptor (label 9; the kernel clears it on an abort, so a restart at label 2
/// arms it again), reads the CPU the thread runs on, and leaves `{c}` pointing at
/// that CPU's `CpuStacks`, or leaves for label 7 if the CPU has none or is
/// stopped. `{rs}` is glibc's `__rseq_offset` (the area is at that offset from the
/// thread pointer, `%fs`); `{s}` points at the stacks' address and count, its
/// first two words (`Stacks` or `Bulk`).
macro_rules! enter {
    () => {
        concat!(
            "2:\n",
            "lea {t}, [rip + 9f]\n",
            "mov qword ptr fs:[{rs} + 8], {t}\n",
            "3:\n",
            "mov {c:e}, dword ptr fs:[{rs} + 4]\n",
            "cmp {c}, qword ptr [{s} + 8]\n",
            "jae 7f\n",
            "shl {c}, {shift}\n",
            "add {c}, qword ptr [{s}]\n",
            "cmp dword ptr [{c}], 0\n",
            "jne 7f\n",
        )
    };
}

/// The abort handler, after the sequence's last jump out: the signature glibc
/// registered (as the operand of a `ud1`, so that the bytes disassemble), then
/// label 5, which restarts the sequence.
macro_rules! abort {
    () => {
        concat!(
            ".byte 0x0f, 0xb9, 0x3d\n",
            ".long 0x53053053\n",
            "5:\n",
            "jmp 2b\n",
        )
    };
}

/// The sequence's `struct rseq_cs` in the `__rseq_cs` section: version and flags
/// 0, the start (label 3), the length up to just past the commit (label 4), and
/// the abort handler (label 5).
macro_rules! descriptor {
    () => {
        concat!(
            ".pushsection __rseq_cs, \"aw\"\n",
            ".balign 32\n",
            "9:\n",
            ".long 0, 0\n",
            ".quad 3b, 4b - 3b, 5b\n",
            ".popsection\n",
        )
    };
}

/// Whether this process can use the stacks: glibc registered an rseq area for
/// the calling thread and the kernel accepted the membarrier registration.
/// Decided once per process.
fn available() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0);
    match STATE.load(Ordering::Acquire) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let ok = probe();
    STATE.store(if ok { 1 } else { 2 }, Ordering::Release);
    ok
}

extern "C" {
    /// Offset of the rseq area from the thread pointer (glibc 2.35+, in ld.so).
    static __rseq_offset: isize;
    /// Size of the registered rseq area; 0 if glibc did not register one.
    static __rseq_size: u32;
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_uint = 1;

/// `membarrier(PRIVATE_EXPEDITED_RSEQ)` on CPU `cpu`: every restartable sequence
/// of this process running there now restarts. Falls back to every CPU (a CPU
/// that is not online runs no sequence, and older kernels lack the CPU flag), then
/// registers again and retries (in case the registration is missing: the kernel
/// keeps it across `fork`, and Linux 6.18 answers a child's
/// `PRIVATE_EXPEDITED_RSEQ` without a new registration, but an older or other
/// kernel may not). `false` if the kernel refuses all of them.
fn restart_sequences(cpu: usize) -> bool {
    let membarrier = |cmd: libc::c_int, flags: libc::c_uint, cpu: libc::c_int| {
        // SAFETY: membarrier takes plain integers and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, flags, cpu) == 0 }
    };
    let all = || membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0);
    membarrier(
        MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
        MEMBARRIER_CMD_FLAG_CPU,
        cpu as libc::c_int,
    ) || all()
        || (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) && all())
}

fn probe() -> bool {
    // SAFETY: plain data exported by glibc, written once before `main`.
    let size = unsafe { __rseq_size };
    // The original ABI's 20 bytes: cpu_id_start, cpu_id, rseq_cs, flags.
    if size < 20 {
        return false;
    }
    // SAFETY: the area is registered (size above); reading `cpu_id` has no
    // side effects.
    let cpu = unsafe { core::ptr::read_volatile(area().add(4) as *const u32) };
    if (cpu as i32) < 0 {
        return false;
    }
    // SAFETY: membarrier takes plain integers; registering twice is harmless.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    };
    r == 0
}

/// glibc's `__rseq_offset`: the calling thread's rseq area is at this offset from
/// its thread pointer (`%fs` on x86-64).
#[inline(always)]
fn rseq_offset() -> isize {
    // SAFETY: plain data exported by glibc, written once before `main`.
    unsafe { __rseq_offset }
}

/// The calling thread's rseq area.
fn area() -> *mut u8 {
    let tp: usize;
    // SAFETY: on x86-64 Linux the first word of the TCB at %fs:0 holds the thread
    // pointer itself; reading it has no side effects.
    unsafe {
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp.wrapping_add_signed(rseq_offset()) as *mut u8
}

/// Arguments of the bulk sequences, read from memory inside them; the first two
/// words are laid out as `Stacks`' (see `enter!`).
#[repr(C)]
struct Bulk {
    base: *const CpuStacks,
    n: u64,
    woff: u64,
    soff: u64,
    buf: *mut u32,
    k: u64,
}

impl Stacks {
    /// Stacks for every CPU the system may bring online, and at least `nr_cpus`,
    /// if this process can use restartable sequences; none otherwise. Stack `i`
    /// belongs to the per-CPU lists of CPU `i % nr_cpus`.
    pub(crate) fn rseq(nr_cpus: usize) -> Stacks {
        if !available() {
            return Stacks::none();
        }
        // SAFETY: sysconf has no preconditions.
        let conf = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let n = nr_cpus.max(conf.clamp(1, 4096) as usize);
        Stacks::of(Stacks::build(n), Mode::Rseq, rseq_offset())
    }

    fn index_of(&self, c: *const CpuStacks) -> usize {
        (c as usize - self.cpus.as_ptr() as usize) / STRIDE
    }

    /// Pops a frame index from stack `p` of the CPU the thread runs on.
    #[inline(always)]
    pub(crate) fn pop(&self, p: usize) -> Result<u32, Miss> {
        let out: u64;
        let c: usize;
        // SAFETY: the sequence reads the thread's own rseq area (registered: the
        // stacks exist only if `available()`), checks the CPU against the number
        // of stacks, and reads and writes only inside `CpuStacks` of that CPU at
        // offsets below its size (`p < NR_PCP_LISTS`, length below `STACK_CAP`).
        // Its descriptor lies in `__rseq_cs` with the abort signature before the
        // abort label, as the kernel requires.
        unsafe {
            core::arch::asm!(
                "mov {rs}, qword ptr [{s} + 16]",
                enter!(),
                "mov {w}, qword ptr [{c} + {p}*8 + {words}]",
                "test {w:x}, {w:x}",
                "jz 6f",
                "sub {w}, 1",
                // The slot: stack `p`'s first, plus the new length.
                "mov {t}, {p}",
                "shl {t}, {cap_shift}",
                "movzx {out:e}, {w:x}",
                "add {t}, {out}",
                "mov {out:e}, dword ptr [{c} + {t}*4 + {slots}]",
                "mov qword ptr [{c} + {p}*8 + {words}], {w}",
                "4:",
                "jmp 8f",
                abort!(),
                "6:",
                "mov {out}, -2",
                "jmp 8f",
                "7:",
                "mov {out}, -1",
                "8:",
                descriptor!(),
                rs = out(reg) _,
                s = in(reg) self as *const Stacks,
                p = in(reg) p,
                cap_shift = const STACK_CAP.trailing_zeros(),
                shift = const STRIDE_SHIFT,
                words = const OFF_WORDS,
                slots = const OFF_SLOTS,
                t = out(reg) _,
                c = out(reg) c,
                w = out(reg) _,
                out = out(reg) out,
                options(nostack),
            );
        }
        match out as i64 {
            -1 => Err(Miss::Off),
            -2 => Err(Miss::Cpu(self.index_of(c as *const CpuStacks))),
            _ => Ok(out as u32),
        }
    }

    /// Pushes frame index `idx` on stack `p` of the CPU the thread runs on,
    /// counting it as a free.
    #[inline(always)]
    pub(crate) fn push(&self, p: usize, idx: u32) -> Result<(), Miss> {
        let st: u64;
        let c: usize;
        // SAFETY: as `pop`; the length is checked against `lim`, which is at most
        // `STACK_CAP`, before the slot at that length is written.
        unsafe {
            core::arch::asm!(
                "mov {rs}, qword ptr [{s} + 16]",
                enter!(),
                "mov {w}, qword ptr [{c} + {p}*8 + {words}]",
                "movzx {t:e}, {w:x}",
                "cmp {t:e}, dword ptr [{c} + {p}*4 + {lim}]",
                "jae 6f",
                // The slot: stack `p`'s first, plus the length.
                "mov {st}, {p}",
                "shl {st}, {cap_shift}",
                "add {t}, {st}",
                "mov dword ptr [{c} + {t}*4 + {slots}], {idx:e}",
                "add {w}, 0x10001",
                "mov qword ptr [{c} + {p}*8 + {words}], {w}",
                "4:",
                "xor {st:e}, {st:e}",
                "jmp 8f",
                abort!(),
                "6:",
                "mov {st:e}, 1",
                "jmp 8f",
                "7:",
                "mov {st:e}, 2",
                "8:",
                descriptor!(),
                rs = out(reg) _,
                s = in(reg) self as *const Stacks,
                p = in(reg) p,
                cap_shift = const STACK_CAP.trailing_zeros(),
                idx = in(reg) idx,
                shift = const STRIDE_SHIFT,
                words = const OFF_WORDS,
                slots = const OFF_SLOTS,
                lim = const OFF_LIM,
                t = out(reg) _,
                c = out(reg) c,
                w = out(reg) _,
                st = out(reg) st,
                options(nostack),
            );
        }
        match st {
            0 => Ok(()),
            1 => Err(Miss::Cpu(self.index_of(c as *const CpuStacks))),
            _ => Err(Miss::Off),
        }
    }

    /// Pushes all of `blocks` (frame indices) on stack `p` of the CPU the thread
    /// runs on, or none of them (no room below `STACK_CAP`, CPU stopped or out of
    /// range). Returns the CPU.
    pub(crate) fn push_all(&self, p: usize, blocks: &[u32]) -> Option<usize> {
        if blocks.is_empty() || blocks.len() > STACK_CAP {
            return None;
        }
        let args = Bulk {
            base: self.cpus.as_ptr(),
            n: self.cpus.len() as u64,
            woff: (OFF_WORDS + p * 8) as u64,
            soff: (OFF_SLOTS + p * STACK_CAP * 4) as u64,
            buf: blocks.as_ptr() as *mut u32,
            k: blocks.len() as u64,
        };
        let c: usize;
        let st: u64;
        // SAFETY: as `pop`; `len + k <= STACK_CAP` is checked before any slot is
        // written, the slots written lie past the committed length (invisible
        // until the commit), and `buf` holds `k` indices.
        unsafe {
            core::arch::asm!(
                enter!(),
                "mov {t}, qword ptr [{s} + 16]",
                "mov {w}, qword ptr [{c} + {t}]",
                "movzx {t:e}, {w:x}",
                "mov {j}, {t}",
                "add {j}, qword ptr [{s} + 40]",
                "cmp {j}, {cap}",
                "ja 7f",
                "lea {t}, [{c} + {t}*4]",
                "add {t}, qword ptr [{s} + 24]",
                "xor {j:e}, {j:e}",
                "mov {e}, qword ptr [{s} + 32]",
                "22:",
                "cmp {j}, qword ptr [{s} + 40]",
                "jae 23f",
                "mov {w:e}, dword ptr [{e} + {j}*4]",
                "mov dword ptr [{t} + {j}*4], {w:e}",
                "add {j}, 1",
                "jmp 22b",
                "23:",
                // The word again (nothing on this CPU commits inside our section).
                "mov {t}, qword ptr [{s} + 16]",
                "mov {w}, qword ptr [{c} + {t}]",
                "add {w}, qword ptr [{s} + 40]",
                "mov qword ptr [{c} + {t}], {w}",
                "4:",
                "xor {st:e}, {st:e}",
                "jmp 8f",
                abort!(),
                "7:",
                "mov {st:e}, 1",
                "8:",
                descriptor!(),
                rs = in(reg) rseq_offset(),
                s = in(reg) &args,
                shift = const STRIDE_SHIFT,
                cap = const STACK_CAP,
                t = out(reg) _,
                c = out(reg) c,
                w = out(reg) _,
                j = out(reg) _,
                e = out(reg) _,
                st = out(reg) st,
                options(nostack),
            );
        }
        (st == 0).then(|| self.index_of(c as *const CpuStacks))
    }

    /// Pops up to `out.len()` frame indices (the top of the stack) from stack `p` of
    /// the CPU the thread runs on into the start of `out`. Returns the CPU and how
    /// many it popped (possibly none: that many entries of `out` are written), or
    /// `None` for a stopped or out-of-range CPU.
    pub(crate) fn pop_many(
        &self,
        p: usize,
        out: &mut [core::mem::MaybeUninit<u32>],
    ) -> Option<(usize, usize)> {
        let args = Bulk {
            base: self.cpus.as_ptr(),
            n: self.cpus.len() as u64,
            woff: (OFF_WORDS + p * 8) as u64,
            soff: (OFF_SLOTS + p * STACK_CAP * 4) as u64,
            buf: out.as_mut_ptr().cast::<u32>(),
            k: out.len().min(STACK_CAP) as u64,
        };
        let c: usize;
        let got: u64;
        // SAFETY: as `pop`; it copies `j <= len` slots below the committed length
        // into `buf`, which has room for `k >= j`, and commits `len - j`.
        unsafe {
            core::arch::asm!(
                enter!(),
                "mov {t}, qword ptr [{s} + 16]",
                "mov {w}, qword ptr [{c} + {t}]",
                "movzx {t:e}, {w:x}",
                "mov {j}, qword ptr [{s} + 40]",
                "cmp {t}, {j}",
                "cmovb {j}, {t}",
                "sub {t}, {j}",
                "lea {t}, [{c} + {t}*4]",
                "add {t}, qword ptr [{s} + 24]",
                "mov {e}, qword ptr [{s} + 32]",
                "mov {got}, {j}",
                "22:",
                "test {j}, {j}",
                "jz 23f",
                "sub {j}, 1",
                "mov {w:e}, dword ptr [{t} + {j}*4]",
                "mov dword ptr [{e} + {j}*4], {w:e}",
                "jmp 22b",
                "23:",
                "mov {t}, qword ptr [{s} + 16]",
                "mov {w}, qword ptr [{c} + {t}]",
                "sub {w}, {got}",
                "mov qword ptr [{c} + {t}], {w}",
                "4:",
                "jmp 8f",
                abort!(),
                "7:",
                "mov {got}, -1",
                "8:",
                descriptor!(),
                rs = in(reg) rseq_offset(),
                s = in(reg) &args,
                shift = const STRIDE_SHIFT,
                t = out(reg) _,
                c = out(reg) c,
                w = out(reg) _,
                j = out(reg) _,
                e = out(reg) _,
                got = out(reg) got,
                options(nostack),
            );
        }
        (got as i64 >= 0).then(|| (self.index_of(c as *const CpuStacks), got as usize))
    }

    /// Stops CPU `cpu`'s stacks: when this returns, no sequence commits on them
    /// until `resume`, and the caller may change them. The caller holds the CPU's
    /// pcp lock, so no two stoppers meet.
    pub(crate) fn stop(&self, cpu: usize) -> Option<&CpuStacks> {
        let c = self.cpus.get(cpu)?;
        c.stopped.store(1, Ordering::SeqCst);
        // Any sequence that read `stopped` as 0 and has not committed yet runs on
        // that CPU now or was preempted inside its section: the membarrier
        // restarts the first kind, the kernel the second on its way back.
        if !restart_sequences(cpu) {
            // Nothing else can keep a running sequence from committing into
            // stacks this thread is about to take: carrying on could hand a block
            // out twice.
            std::eprintln!(
                "zonealloc: membarrier(PRIVATE_EXPEDITED_RSEQ) refused after its \
                 registration succeeded; the per-CPU stacks cannot be stopped"
            );
            std::process::abort();
        }
        core::sync::atomic::fence(Ordering::SeqCst);
        Some(c)
    }

    /// Lets CPU `cpu`'s sequences commit again.
    pub(crate) fn resume(&self, cpu: usize) {
        if let Some(c) = self.cpus.get(cpu) {
            c.stopped.store(0, Ordering::Release);
        }
    }
}
