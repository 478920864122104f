//! Starting the application processors: INIT, then two start-up IPIs, one CPU at
//! a time, each on its own static stack.
//!
//! The bootstrap processor copies the trampoline (see `boot`) to
//! `TRAMPOLINE_ADDR`, then for each local APIC id the MADT lists: sets the next
//! CPU index and stack, sends INIT, waits 10 ms, sends a start-up IPI, waits
//! 200 us, sends the second one if the CPU has not yet answered, and waits up to
//! a second for it to mark itself online. The new CPU comes through real and
//! protected mode into long mode on the boot page tables and lands in the
//! kernel's `ap_main` (main.rs), whose first step is `ap_setup`: it loads its
//! GDT, TSS and IDT, sets its `GS` base, enables its local APIC and marks itself
//! online, then waits for the kernel's go with interrupts enabled (it takes IPIs
//! from then on).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::consts::MAX_CPUS;
use crate::exit::{exit, Exit};
use crate::serial::println;
use crate::stack::{self, Stack};
use crate::{apic, boot, cpu, gdt, interrupts, time};

/// Bytes of each application processor's stack.
pub const AP_STACK_BYTES: usize = 64 << 10;

static AP_STACKS: [Stack<AP_STACK_BYTES>; MAX_CPUS] = [const { Stack::new() }; MAX_CPUS];

/// The index the CPU being started takes; written before its INIT, read by it
/// in `ap_main` (the IPIs order the two).
static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

/// Set (release) once the allocator and the stress are ready; the application
/// processors wait for it (acquire).
static GO: AtomicBool = AtomicBool::new(false);

/// How long a starting CPU may take to mark itself online.
const START_TIMEOUT_US: u64 = 1_000_000;

/// The stack range `[bottom, top)` of CPU `cpu` (the bootstrap processor's is in
/// the image's bss, set up by `boot`).
pub fn stack_of(cpu: usize) -> (u64, u64) {
    if cpu == 0 {
        let bottom = boot::boot_stack_bottom_addr();
        (bottom, bottom + boot::BOOT_STACK_BYTES as u64)
    } else {
        (AP_STACKS[cpu].bottom(), AP_STACKS[cpu].top())
    }
}

/// Starts every CPU in `apic_ids` but the caller's; returns how many CPUs run,
/// the caller included. Ends the run with `Exit::Smp` if one fails to come up.
#[link_section = ".init.text"]
pub fn start_aps(apic_ids: &[u32]) -> usize {
    let tramp = boot::trampoline();
    assert!(tramp.len() <= 4096);
    // SAFETY: the trampoline page is reserved for this (see `bootmem`), identity
    // mapped, and no one else uses it.
    unsafe {
        core::ptr::copy_nonoverlapping(
            tramp.as_ptr(),
            boot::TRAMPOLINE_ADDR as *mut u8,
            tramp.len(),
        );
    }
    let me = apic::id();
    let mut nr_cpus = 1;
    for &id in apic_ids {
        if id == me {
            continue;
        }
        if nr_cpus == MAX_CPUS {
            break;
        }
        let index = nr_cpus;
        let (bottom, top) = stack_of(index);
        // SAFETY: the stack is this CPU's own, not yet in use.
        unsafe { stack::paint(bottom, top) };
        boot::AP_STACK_TOP.store(top, Ordering::SeqCst);
        NEXT_INDEX.store(index, Ordering::SeqCst);

        apic::send_init(id);
        time::delay_us(10_000);
        apic::send_startup(id, (boot::TRAMPOLINE_ADDR >> 12) as u8);
        time::delay_us(200);
        if !cpu::is_online(index) {
            apic::send_startup(id, (boot::TRAMPOLINE_ADDR >> 12) as u8);
        }
        let start = time::tsc();
        while !cpu::is_online(index) {
            if time::tsc_to_us(time::tsc() - start) > START_TIMEOUT_US {
                println!("cpu {index} (local APIC id {id}) did not come up");
                exit(Exit::Smp);
            }
            core::hint::spin_loop();
        }
        nr_cpus += 1;
    }
    nr_cpus
}

/// Lets the application processors go on to the stress.
pub fn release_aps() {
    GO.store(true, Ordering::Release);
}

/// An application processor's set-up, the first thing its `ap_main` does (on
/// its own stack): returns its CPU index once the kernel lets it go.
pub fn ap_setup() -> usize {
    let index = NEXT_INDEX.load(Ordering::SeqCst);
    gdt::load(index);
    cpu::init_this_cpu(index);
    interrupts::load_idt();
    apic::enable();
    cpu::mark_online(apic::id());
    // Interrupts on while it waits: its timer is not started yet, but the
    // bootstrap processor's barriers (`cpu::sync_cpu`, which building and
    // resizing the allocator's pinned per-CPU stacks make) come by IPI.
    interrupts::enable();
    while !GO.load(Ordering::Acquire) {
        core::hint::spin_loop();
    }
    index
}
