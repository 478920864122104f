//! Ending the run: QEMU's isa-debug-exit device, one status per outcome.
//!
//! Writing `v` to port 0xf4 ends QEMU with exit status `(v << 1) | 1`. The values
//! start at 0x10 so that no outcome reads as one of QEMU's own statuses (0 for a
//! clean shutdown, which is also what a triple fault gives under `-no-reboot`,
//! 1 for its errors); run.sh knows the table.

use x86_64::instructions::port::Port;

use crate::serial::fatal_print;

/// Why the kernel stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Exit {
    /// Every check passed (QEMU exits with 33).
    Pass = 0x10,
    /// A Rust panic, the allocation-failure handler's included (35).
    Panic = 0x11,
    /// A CPU exception: page fault, general protection, double fault... (37).
    Exception = 0x12,
    /// The boot information is missing or unusable (39).
    BootInfo = 0x13,
    /// An application processor did not come up, or the MADT could not be read (41).
    Smp = 0x14,
    /// The zones or the heap could not be set up, or `ZoneAllocator::new` refused
    /// the configuration (43).
    Setup = 0x15,
    /// An allocation the stress expected to succeed failed (45).
    AllocFailed = 0x16,
    /// A free of a held block was refused (47).
    FreeRefused = 0x17,
    /// A second free of a freed block was not refused with `AlreadyFree` (49).
    DoubleFree = 0x18,
    /// A block's tag words changed while it was held: two owners at once (51).
    Corruption = 0x19,
    /// A block lies outside usable RAM or over the kernel's own memory (53).
    BlockOutsideRam = 0x1a,
    /// The page ledger does not balance (55).
    Ledger = 0x1b,
    /// `check_invariants()` reported a violation (57).
    Invariants = 0x1c,
    /// The run did not finish within the watchdog's time (59).
    Watchdog = 0x1d,
    /// A stack's lowest word was overwritten (61).
    StackOverflow = 0x1e,
    /// Reserved memory could not be released, or arriving memory added, or the
    /// zone did not grow by it (63).
    Memory = 0x1f,
}

/// Ends the run with `why`'s status. Never returns: if the device is missing
/// (QEMU started without it), the CPU halts with interrupts off.
pub fn exit(why: Exit) -> ! {
    let mut port = Port::<u32>::new(0xf4);
    // SAFETY: port 0xf4 is the isa-debug-exit device (or nothing); writing to it
    // touches no memory.
    unsafe { port.write(why as u32) };
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

/// Prints a failure found on CPU 0 outside the stress and ends the run with `why`.
pub fn fail_with(why: Exit, what: &str) -> ! {
    fatal_print!("\nFAIL ({why:?}): {what}\n");
    exit(why)
}
