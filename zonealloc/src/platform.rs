//! The platform: what the code that hosts the allocator tells it about where it runs.
//!
//! Bottom layer, beside `sync`: the locks call it, and nothing here calls anything
//! of the allocator's. A kernel implements `Platform` once and hands a `&'static`
//! reference to it in `Config::platform`; a program that has no interrupts and
//! whose threads the operating system schedules needs none (`None`, the default:
//! today's locks, at today's speed).
//!
//! # What the allocator asks of it
//!
//! * **Interrupts.** Every lock the allocator takes (the zone locks, the per-CPU
//!   list locks, and every other lock of its own) is taken between `irq_save` and
//!   `irq_restore`, as Linux takes the zone lock with `spin_lock_irqsave`. So while
//!   a CPU holds an allocator lock no interrupt runs on it, and an interrupt
//!   handler that allocates (`Gfp::ATOMIC`) or frees never waits for a lock its
//!   own CPU holds. What runs with interrupts disabled is bounded: one buddy
//!   operation, one refill or flush of a per-CPU batch, one statistics snapshot;
//!   owners' callbacks (`Migrate`, `Shrinker`, `PageReporter`) always run with
//!   every allocator lock released and the interrupt state the caller had.
//! * **The current CPU.** `cpu_id` picks which per-CPU lists a call uses, and
//!   through `Config::cpu_to_node` which node's zones it tries first
//!   (`numa_node_id()`). Any answer is safe: a stale one only picks other lists to
//!   try.
//! * **A barrier on another CPU.** `sync_cpu` makes a CPU pass a full memory
//!   barrier outside any section that uses its per-CPU stacks, and waits for it
//!   (an inter-processor interrupt whose handler acknowledges, as Linux's
//!   `smp_call_function_single(.., wait)`). A thread that drains another CPU's
//!   stacks needs it when callers use the pinned fast path
//!   (`ZoneAllocator::alloc_pages_pinned`); a platform that cannot says so
//!   (`can_sync_cpu`, `false` by default), and the pinned fast path is then off.
//!
//! ```
//! use zonealloc::{Config, Gfp, Order, Platform, ZoneAllocator};
//!
//! /// A single-CPU machine whose interrupt flag lives in a cell (a real kernel
//! /// would use `pushfq; cli` and `popfq`).
//! #[derive(Debug)]
//! struct Uniprocessor;
//!
//! impl Platform for Uniprocessor {
//!     fn cpu_id(&self) -> usize {
//!         0
//!     }
//! }
//!
//! static PLATFORM: Uniprocessor = Uniprocessor;
//! let config = Config { nr_cpus: 1, platform: Some(&PLATFORM), ..Config::with_bytes(16 << 20) };
//! let za = ZoneAllocator::new(config).unwrap();
//! let p = za.alloc_pages(Gfp::ATOMIC, Order(0)).unwrap();
//! za.free_pages(p, Order(0)).unwrap();
//! ```

/// What the allocator needs from the machine it runs on (see the module
/// documentation). Every method may be called from any context the allocator's
/// callers run in, interrupt handlers included, with or without an allocator lock
/// held; none may call the allocator, block or panic.
pub trait Platform: Sync + core::fmt::Debug {
    /// Disables interrupts on the calling CPU and returns the state to restore
    /// (`local_irq_save()`: on x86-64 `pushfq; pop; cli`). Calls nest: each
    /// `irq_restore` gets back the value its `irq_save` returned. The default does
    /// nothing, for a program whose code is never interrupted by code that
    /// allocates.
    #[inline]
    fn irq_save(&self) -> usize {
        0
    }

    /// Restores the interrupt state `irq_save` returned (`local_irq_restore()`).
    #[inline]
    fn irq_restore(&self, state: usize) {
        let _ = state;
    }

    /// The CPU the caller runs on (`smp_processor_id()`), any number: the
    /// allocator takes it modulo `Config::nr_cpus`.
    fn cpu_id(&self) -> usize;

    /// Whether `sync_cpu` works on this platform. With it, the allocator gives
    /// each CPU per-CPU stacks that the holder of a `PinnedCpu` token uses with
    /// no lock and no atomic read-modify-write (`alloc_pages_pinned`,
    /// `free_pages_pinned`); without it (the default) those calls take the
    /// per-CPU lists.
    fn can_sync_cpu(&self) -> bool {
        false
    }

    /// Makes CPU `cpu` execute a full memory barrier at a point where it is not
    /// inside a pinned section, and returns once it has: `true` if it did,
    /// `false` if it cannot now (that CPU's stacks are then left as they are for
    /// this drain). A kernel sends an inter-processor interrupt whose handler
    /// executes a fence and acknowledges (a pinned section runs with
    /// preemption off, so the interrupt lands outside it, or the section checks
    /// in time); a program calls `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`.
    /// It may be called with interrupts disabled and with allocator locks held:
    /// an implementation that waits for an acknowledgement must meanwhile serve
    /// the requests addressed to its own CPU, so that two CPUs syncing each other
    /// never deadlock. Called only where `can_sync_cpu` answers `true`.
    fn sync_cpu(&self, cpu: usize) -> bool {
        let _ = cpu;
        false
    }
}

/// Interrupts disabled through a platform, restored on drop: the irq-save half of a
/// lock guard. With no platform it holds nothing and costs nothing.
#[must_use = "interrupts are restored when this is dropped"]
pub(crate) struct IrqSaved {
    platform: Option<&'static dyn Platform>,
    state: usize,
}

impl IrqSaved {
    /// Disables interrupts through `platform`, if there is one.
    #[inline(always)]
    pub(crate) fn save(platform: Option<&'static dyn Platform>) -> IrqSaved {
        let state = match platform {
            Some(p) => p.irq_save(),
            None => 0,
        };
        IrqSaved { platform, state }
    }
}

impl Drop for IrqSaved {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(p) = self.platform {
            p.irq_restore(self.state);
        }
    }
}
