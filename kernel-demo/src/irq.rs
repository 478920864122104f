//! This CPU's interrupt flag: save and disable, restore, and a closure run with
//! interrupts disabled (Linux's `local_irq_save` / `local_irq_restore`).
//!
//! The bottom of the CPU services: the local APIC (sending an IPI), the heap's
//! lock and the allocator's `Platform` (`cpu::KernelPlatform`) all take their
//! sections through it, and it imports nothing of the kernel.

use core::arch::asm;

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
