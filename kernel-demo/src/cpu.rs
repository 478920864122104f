//! What the page allocator asks of the kernel about CPUs: interrupt state, the
//! current CPU and its node, a barrier on another CPU; and the TLB shootdown
//! the frame tables' mapping needs.
//!
//! Each service is a plain function with the shape of the allocator's
//! `Platform` trait (`irq_save() -> usize`, `irq_restore(usize)` in `irq`,
//! `cpu_id() -> usize`, `sync_cpu(usize) -> bool` here), and `KernelPlatform`
//! implements the trait with them. The allocator gets `PLATFORM`
//! (`Config::platform`) and takes every lock an interrupt's call may take with
//! interrupts disabled through it, so the timer handler allocates and frees
//! while the CPU it interrupted may be inside the allocator.
//!
//! # The per-CPU area
//!
//! Each CPU's `GS` base points at its `PerCpu` entry, whose first word is the
//! CPU's index (0 for the bootstrap processor, then in start-up order), so the
//! index is one load, `mov %gs:0, reg`, and needs no CPU feature (`rdgsbase`
//! needs FSGSBASE, which QEMU's default CPU model lacks).

use core::arch::asm;
use core::sync::atomic::{fence, AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};

use x86_64::registers::model_specific::GsBase;
use x86_64::VirtAddr;

use crate::consts::{MAX_CPUS, SYNC_VECTOR};
use crate::exit::{exit, Exit};
use crate::serial::fatal_print;
use crate::{apic, irq, time};

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
    /// TLB shootdown requests made of this CPU (see `flush_tlb_everywhere`).
    flush_requested: AtomicU64,
    /// Highest shootdown request this CPU has flushed for.
    flush_done: AtomicU64,
    /// Its NUMA node (`cpu_to_node`), from the SRAT; relaxed: set before the
    /// allocator is built and the CPUs are let go (a barrier orders them).
    node: AtomicU16,
}

impl PerCpu {
    const fn new(index: usize) -> PerCpu {
        PerCpu {
            index,
            apic_id: AtomicU32::new(0),
            online: AtomicBool::new(false),
            sync_requested: AtomicU64::new(0),
            sync_done: AtomicU64::new(0),
            flush_requested: AtomicU64::new(0),
            flush_done: AtomicU64::new(0),
            node: AtomicU16::new(0),
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

/// (b) The NUMA node of CPU `cpu` (`cpu_to_node()`), as the SRAT lists its
/// local APIC id (node 0 without an SRAT); the allocator gets the same table
/// (`Config::cpu_to_node`).
pub fn cpu_to_node(cpu: usize) -> u16 {
    PER_CPU
        .get(cpu)
        .map_or(0, |c| c.node.load(Ordering::Relaxed))
}

/// Records CPU `cpu`'s node (the bootstrap processor, before the CPUs are let go).
pub fn set_node(cpu: usize, node: u16) {
    PER_CPU[cpu].node.store(node, Ordering::Relaxed);
}

/// Counters of the cross-CPU services (relaxed: statistics, read at the end).
pub struct CrossCpuStats {
    /// `sync_cpu` calls that waited for another CPU.
    pub syncs: AtomicU64,
    /// Barrier requests a CPU served for others while it waited in `sync_cpu`.
    pub served_while_waiting: AtomicU64,
    /// `sync_cpu` calls whose target had not answered the IPI in
    /// `SYNC_ESCALATE_US` and was sent an NMI.
    pub escalated: AtomicU64,
    /// TLB shootdowns (`flush_tlb_everywhere`) and the NMIs they sent.
    pub shootdowns: AtomicU64,
    /// See `shootdowns`.
    pub shootdown_nmis: AtomicU64,
    /// Microseconds the shootdowns waited for the other CPUs.
    pub shootdown_us: AtomicU64,
}

/// The cross-CPU services' counters.
pub static CROSS: CrossCpuStats = CrossCpuStats {
    syncs: AtomicU64::new(0),
    served_while_waiting: AtomicU64::new(0),
    escalated: AtomicU64::new(0),
    shootdowns: AtomicU64::new(0),
    shootdown_nmis: AtomicU64::new(0),
    shootdown_us: AtomicU64::new(0),
};

/// How long `sync_cpu` waits for the IPI's acknowledgement before it sends the
/// target an NMI, which reaches it even with interrupts disabled.
const SYNC_ESCALATE_US: u64 = 100_000;

/// How long a TLB shootdown waits for a CPU before the run is declared broken.
const SHOOTDOWN_TIMEOUT_US: u64 = 2_000_000;

/// (c) Makes CPU `cpu` execute a full memory barrier (`mfence` semantics, a
/// SeqCst fence) after this call began, and waits until it has: an IPI whose
/// handler runs the fence and acknowledges (Linux's
/// `smp_call_function_single(cpu, .., wait = 1)`). Returns `false` if `cpu` is
/// not online. For the calling CPU itself, a fence.
///
/// Safe with interrupts disabled, and with locks held that the target may be
/// spinning on:
/// * while it waits, the caller serves the barrier requests addressed to its own
///   CPU (`serve_sync`: a fence and an acknowledgement), so two CPUs that sync
///   each other with interrupts disabled, or a ring of them, never deadlock;
/// * a target that has not acknowledged after `SYNC_ESCALATE_US` (it spins with
///   interrupts disabled, on a lock the caller holds or on anything else) gets
///   an NMI, whose handler serves the same request.
///
/// The barrier a target passes is at an instruction boundary of whatever it
/// was running: between two calls when the IPI lands with interrupts enabled,
/// or, with the NMI, anywhere; the pinned sections' protocol needs only that
/// the fence happens after the call began (see zonealloc's `stacks`).
///
/// Concurrent callers share handler runs: a request numbered `r` is done when
/// the target has served it after seeing requests `>= r`. The server reads the
/// request count (acquire) before its fence and publishes it (release,
/// `fetch_max`) after; the caller's `fetch_add` precedes its IPI, so a run that
/// counts for it fenced after the call began.
pub fn sync_cpu(cpu: usize) -> bool {
    let me = this_cpu();
    if cpu == me {
        fence(Ordering::SeqCst);
        return true;
    }
    if !is_online(cpu) {
        return false;
    }
    let target = &PER_CPU[cpu];
    let r = target.sync_requested.fetch_add(1, Ordering::AcqRel) + 1;
    let apic_id = target.apic_id.load(Ordering::Relaxed);
    apic::send_ipi(apic_id, SYNC_VECTOR);
    CROSS.syncs.fetch_add(1, Ordering::Relaxed);
    let start = time::tsc();
    let mut escalated = false;
    while target.sync_done.load(Ordering::Acquire) < r {
        if serve_sync() {
            CROSS.served_while_waiting.fetch_add(1, Ordering::Relaxed);
        }
        if !escalated && time::tsc_to_us(time::tsc() - start) > SYNC_ESCALATE_US {
            escalated = true;
            CROSS.escalated.fetch_add(1, Ordering::Relaxed);
            apic::send_nmi(apic_id);
        }
        core::hint::spin_loop();
    }
    true
}

/// `sync_cpu` for every online CPU; returns how many passed the barrier.
pub fn sync_all_cpus(nr_cpus: usize) -> usize {
    (0..nr_cpus).filter(|&c| sync_cpu(c)).count()
}

/// Serves the barrier requests made of this CPU, if any: reads the count, runs
/// the fence, publishes the count. Returns whether there was one. Called by the
/// IPI's handler, the NMI's, and `sync_cpu`'s wait.
pub fn serve_sync() -> bool {
    let me = &PER_CPU[this_cpu()];
    let seen = me.sync_requested.load(Ordering::Acquire);
    if seen <= me.sync_done.load(Ordering::Relaxed) {
        return false;
    }
    fence(Ordering::SeqCst);
    me.sync_done.fetch_max(seen, Ordering::Release);
    true
}

/// Reloads `cr3`: drops every TLB entry and paging-structure cache entry of
/// this CPU (the kernel maps nothing global).
pub fn flush_local_tlb() {
    // SAFETY: writes back the same page-table root; it only drops cached
    // translations.
    unsafe {
        asm!("mov {t}, cr3", "mov cr3, {t}", t = out(reg) _, options(nostack, preserves_flags));
    }
}

/// Makes every online CPU drop its cached translations, after a present
/// page-table entry changed (the frame tables' address space, where pages that
/// read one shared zero frame get frames of their own: see `vmemmap`): this
/// CPU reloads `cr3`, every other one does in its NMI handler, and this waits
/// for each. NMIs, because the caller may hold an allocator lock with interrupts
/// disabled (zonealloc backs frame tables under the zone lock in `add_memory`)
/// while the other CPUs spin on that lock with theirs disabled too.
pub fn flush_tlb_everywhere() {
    flush_local_tlb();
    CROSS.shootdowns.fetch_add(1, Ordering::Relaxed);
    let me = this_cpu();
    let mut waiting = [0u64; MAX_CPUS];
    for (c, w) in waiting.iter_mut().enumerate() {
        if c == me || !is_online(c) {
            continue;
        }
        let pc = &PER_CPU[c];
        *w = pc.flush_requested.fetch_add(1, Ordering::AcqRel) + 1;
        apic::send_nmi(pc.apic_id.load(Ordering::Relaxed));
        CROSS.shootdown_nmis.fetch_add(1, Ordering::Relaxed);
    }
    let start = time::tsc();
    for (c, &r) in waiting.iter().enumerate() {
        while r != 0 && PER_CPU[c].flush_done.load(Ordering::Acquire) < r {
            // A CPU waiting in `sync_cpu` on this one is served meanwhile.
            serve_sync();
            if time::tsc_to_us(time::tsc() - start) > SHOOTDOWN_TIMEOUT_US {
                fatal_print!("\nFAIL (Smp): cpu {c} did not acknowledge a TLB shootdown\n");
                exit(Exit::Smp);
            }
            core::hint::spin_loop();
        }
    }
    let waited = time::tsc_to_us(time::tsc() - start);
    CROSS.shootdown_us.fetch_add(waited, Ordering::Relaxed);
}

/// The NMI's handler (everything masked): serves TLB shootdowns and barrier
/// requests made of this CPU. Returns whether it served anything (an NMI may
/// find its request served by an earlier one).
pub fn on_nmi() -> bool {
    let me = &PER_CPU[this_cpu()];
    let mut served = false;
    let seen = me.flush_requested.load(Ordering::Acquire);
    if seen > me.flush_done.load(Ordering::Relaxed) {
        flush_local_tlb();
        me.flush_done.fetch_max(seen, Ordering::Release);
        served = true;
    }
    served | serve_sync()
}

/// The kernel as the allocator's `Platform`: the functions above.
#[derive(Debug)]
pub struct KernelPlatform;

/// What `Config::platform` points at.
pub static PLATFORM: KernelPlatform = KernelPlatform;

impl zonealloc::Platform for KernelPlatform {
    #[inline]
    fn irq_save(&self) -> usize {
        irq::irq_save()
    }

    #[inline]
    fn irq_restore(&self, state: usize) {
        irq::irq_restore(state)
    }

    #[inline]
    fn cpu_id(&self) -> usize {
        this_cpu()
    }

    fn can_sync_cpu(&self) -> bool {
        true
    }

    fn sync_cpu(&self, cpu: usize) -> bool {
        sync_cpu(cpu)
    }
}

/// The IPI handler's half of `sync_cpu` (interrupts disabled).
pub fn on_sync_ipi() {
    serve_sync();
}
