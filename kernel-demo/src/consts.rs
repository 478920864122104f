//! The kernel's shared numbers: the static arrays' bounds, the page size and the
//! interrupt vectors. Imports nothing, so that every layer may use them.
//!
//! The addresses that the boot code itself embodies (the identity map's size,
//! the trampoline's page) stay beside that code, in `boot`, which imports
//! nothing either.

/// Most CPUs the kernel starts (the static per-CPU arrays' length).
pub const MAX_CPUS: usize = 16;

/// Most nodes the kernel keeps (the topology's and the frame-table pools' arrays).
pub const MAX_NODES: usize = 8;

/// Bytes of a page, and of a frame.
pub const PAGE_BYTES: u64 = 4096;

/// The local APIC timer's vector.
pub const TIMER_VECTOR: u8 = 0x40;

/// The vector of `cpu::sync_cpu`'s IPI.
pub const SYNC_VECTOR: u8 = 0x41;

/// The local APIC's spurious-interrupt vector.
pub const SPURIOUS_VECTOR: u8 = 0xff;
