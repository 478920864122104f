//! What the page allocator asks of the kernel about CPUs: interrupt state, the
//! current CPU and its node, and a barrier on another CPU.
//!
//! Each service is a plain function with the shape of the allocator's
//! `Platform` trait (`irq_save() -> usize`, `irq_restore(usize)`,
//! `cpu_id() -> usize`, `sync_cpu(usize) -> bool`), and `KernelPlatform`
//! implements the trait with them. Stage 1 hands the allocator only `this_cpu`
//! (`Config::cpu_id`); `sync_cpu` runs at every checkpoint of the stress. With
//! the `timer-alloc` feature the allocator gets `PLATFORM` (`Config::platform`)
//! and takes every lock of its own with interrupts disabled through it.
//!
//! # The per-CPU area
//!
//! Each CPU's `GS` base points at its `PerCpu` entry, whose first word is the
//! CPU's index (0 for the bootstrap processor, then in start-up order), so the
//! index is one load, `mov %gs:0, reg`, and needs no CPU feature (`rdgsbase`
//! needs FSGSBASE, which QEMU's default CPU model lacks).

use core::arch::asm;
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

use x86_64::registers::model_specific::GsBase;
use x86_64::VirtAddr;

use crate::apic;
use crate::interrupts::SYNC_VECTOR;

/// Most CPUs the kernel starts (the static per-CPU arrays' length).
pub const MAX_CPUS: usize = 16;

/// One CPU's entry in the per-CPU area.
#[repr(C)]
pub struct PerCpu {
    /// This CPU's index; at offset 0, where `this_cpu` reads it through `GS`.
    index: usize,
    /// Its local APIC id, once it is online.
    apic_id: AtomicU32,
    /// Set (release) by the CPU itself once its GDT, IDT and local APIC are set
    /// up; read (acquire) by the CPU that started it and by `sync_cpu`.
    online: AtomicBool,
    /// Barrier requests made of this CPU (see `sync_cpu`).
    sync_requested: AtomicU64,
    /// Highest request this CPU has passed a barrier for.
    sync_done: AtomicU64,
}

impl PerCpu {
    const fn new(index: usize) -> PerCpu {
        PerCpu {
            index,
            apic_id: AtomicU32::new(0),
            online: AtomicBool::new(false),
            sync_requested: AtomicU64::new(0),
            sync_done: AtomicU64::new(0),
        }
    }
}

const fn per_cpu_area() -> [PerCpu; MAX_CPUS] {
    let mut area = [const { PerCpu::new(0) }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        area[i].index = i;
        i += 1;
    }
    area
}

static PER_CPU: [PerCpu; MAX_CPUS] = per_cpu_area();

/// Points this CPU's `GS` base at entry `index` of the per-CPU area. The first
/// thing each CPU does in Rust, after loading its GDT (loading a segment
/// register would reset the base).
pub fn init_this_cpu(index: usize) {
    assert!(index < MAX_CPUS);
    GsBase::write(VirtAddr::from_ptr(&PER_CPU[index]));
}

/// Records that this CPU is up, with its local APIC id.
pub fn mark_online(apic_id: u32) {
    let me = &PER_CPU[this_cpu()];
    me.apic_id.store(apic_id, Ordering::Relaxed);
    // Release: publishes the APIC id and everything the CPU set up before.
    me.online.store(true, Ordering::Release);
}

/// Whether CPU `cpu` has come up.
pub fn is_online(cpu: usize) -> bool {
    cpu < MAX_CPUS && PER_CPU[cpu].online.load(Ordering::Acquire)
}

/// The local APIC id of CPU `cpu`, if it is online.
pub fn apic_id_of(cpu: usize) -> Option<u32> {
    is_online(cpu).then(|| PER_CPU[cpu].apic_id.load(Ordering::Relaxed))
}

/// (b) The index of the CPU this runs on, `0..nr_cpus`: Linux's
/// `smp_processor_id()`, and the allocator's `Config::cpu_id`. A caller that can
/// be moved to another CPU gets an answer that may be stale by the time it is
/// used; the allocator only uses it to pick per-CPU lists, where any answer is
/// safe. (This kernel never moves a thread.)
#[inline]
pub fn this_cpu() -> usize {
    let index: usize;
    // SAFETY: `GS` base points at this CPU's `PerCpu` (set by `init_this_cpu`
    // before any code that calls this runs), whose first field is the index.
    unsafe {
        asm!("mov {}, gs:[0]", out(reg) index, options(nostack, readonly, preserves_flags));
    }
    index
}

/// (b) The NUMA node of CPU `cpu` (`cpu_to_node()`). Always node 0 here: the
/// kernel reads no SRAT, and QEMU runs without `-numa`, so all memory is one
/// node, as the allocator's configuration says.
pub fn cpu_to_node(cpu: usize) -> u16 {
    let _ = cpu;
    0
}

/// (a) Disables interrupts on this CPU and returns the state to restore
/// (`local_irq_save()`: `pushfq; pop; cli`). Calls nest.
#[inline]
pub fn irq_save() -> usize {
    let flags: u64;
    // SAFETY: reads RFLAGS through the stack and clears IF. No `nomem`: the asm
    // is also a compiler barrier, so no memory access moves out of the section.
    unsafe { asm!("pushfq", "pop {}", "cli", out(reg) flags) };
    flags as usize
}

/// (a) Restores the interrupt state `irq_save` returned
/// (`local_irq_restore()`): re-enables interrupts if they were enabled then.
#[inline]
pub fn irq_restore(state: usize) {
    const IF: usize = 1 << 9;
    if state & IF != 0 {
        // SAFETY: sets IF only; a compiler barrier like `irq_save`.
        unsafe { asm!("sti") };
    }
}

/// Runs `f` with interrupts disabled on this CPU, restoring the previous state.
#[inline]
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let state = irq_save();
    let r = f();
    irq_restore(state);
    r
}

/// (c) Makes CPU `cpu` execute a full memory barrier (`mfence` semantics, a
/// SeqCst fence) after this call began, and waits until it has: an IPI whose
/// handler runs the fence and acknowledges (Linux's
/// `smp_call_function_single(cpu, .., wait = 1)`). Returns `false` if `cpu` is
/// not online. For the calling CPU itself, a fence.
///
/// The target must take the interrupt: a caller must not wait on a CPU that is
/// itself waiting, with interrupts disabled, for the caller. Called with
/// interrupts disabled it is still safe as long as no two CPUs sync each other
/// at once that way.
///
/// Concurrent callers share handler runs: a request numbered `r` is done when the
/// target has run the handler after seeing requests `>= r`. The handler reads the
/// request count (acquire) before its fence and publishes it (release,
/// `fetch_max`) after; the caller's `fetch_add` precedes its IPI, so a handler
/// run that counts for it fenced after the call began.
pub fn sync_cpu(cpu: usize) -> bool {
    if cpu == this_cpu() {
        fence(Ordering::SeqCst);
        return true;
    }
    if !is_online(cpu) {
        return false;
    }
    let target = &PER_CPU[cpu];
    let r = target.sync_requested.fetch_add(1, Ordering::AcqRel) + 1;
    apic::send_ipi(target.apic_id.load(Ordering::Relaxed), SYNC_VECTOR);
    while target.sync_done.load(Ordering::Acquire) < r {
        core::hint::spin_loop();
    }
    true
}

/// `sync_cpu` for every online CPU; returns how many passed the barrier.
pub fn sync_all_cpus(nr_cpus: usize) -> usize {
    (0..nr_cpus).filter(|&c| sync_cpu(c)).count()
}

/// The kernel as the allocator's `Platform`: the functions above.
#[derive(Debug)]
pub struct KernelPlatform;

/// What `Config::platform` points at (with the `timer-alloc` feature).
pub static PLATFORM: KernelPlatform = KernelPlatform;

impl zonealloc::Platform for KernelPlatform {
    #[inline]
    fn irq_save(&self) -> usize {
        irq_save()
    }

    #[inline]
    fn irq_restore(&self, state: usize) {
        irq_restore(state)
    }

    #[inline]
    fn cpu_id(&self) -> usize {
        this_cpu()
    }

    fn sync_cpu(&self, cpu: usize) -> bool {
        sync_cpu(cpu)
    }
}

/// The IPI handler's half of `sync_cpu` (interrupts disabled).
pub fn on_sync_ipi() {
    let me = &PER_CPU[this_cpu()];
    let seen = me.sync_requested.load(Ordering::Acquire);
    fence(Ordering::SeqCst);
    me.sync_done.fetch_max(seen, Ordering::Release);
}
