//! Stress test of the per-CPU stacks behind `alloc_pages` / `free_pages` (the
//! restartable-sequence fast path, `src/rseq.rs` and `src/fast.rs`), with the
//! cases that path has to survive forced on purpose:
//!
//! * **migration**: a migrator thread re-pins every worker with
//!   `sched_setaffinity` to one random CPU of those the process may use (now and
//!   then to all of them), so threads change CPU inside a push or a pop;
//! * **signals**: a signaller thread sends `SIGUSR1` (a no-op handler,
//!   `SA_RESTART`) to the workers with `pthread_kill`, so the kernel aborts
//!   sequences half done;
//! * **remote stops**: a drainer thread calls `drain_all_pages`,
//!   `drain_cpu_pages`, `pcp_decay`, `zoneinfo`, `nr_pcp_pages` and
//!   `check_invariants`, each of which stops a CPU's stacks with `membarrier`
//!   and moves their blocks to its lists while the workers push and pop;
//! * **cross-CPU frees**: blocks travel between workers through shared slots and
//!   are often freed at once by the thread that takes them out, on another CPU
//!   than the one that allocated them;
//! * **oversubscription**: 4 workers plus the three threads above on a 2-core
//!   machine, so threads are preempted inside sequences too.
//!
//! # The ledger
//!
//! `ledger[pfn]` is 0 while no test thread owns frame `pfn`, else the tag of the
//! thread that allocated its block. An allocation CASes every frame of the block
//! 0 -> tag (a failure is a block handed out twice); whoever frees a block CASes
//! every frame tag -> 0 *before* calling `free_pages`, so a frame is never free in
//! the allocator and owned in the ledger at once, and `free_pages` of a block the
//! harness holds must return `Ok`. Violations are collected (workers never panic,
//! so no thread is left waiting) and fail the test at the end.
//!
//! # The tests
//!
//! * `rseq_stress_ledger`: the random mix above against the ledger.
//! * `rseq_double_free_races`: pairs of threads free the same freshly allocated
//!   block at the same moment (a per-block rendezvous), with the migrator and the
//!   signaller running and a drainer calling `drain_all_pages` without pause;
//!   exactly one free must win, the other must get `FreeError::AlreadyFree(pfn)`
//!   (no allocation happens while a round's frees run, so the block is free,
//!   whole or merged into a larger free block, which `error.rs` documents as
//!   `AlreadyFree`). Blocks freed by one thread only, racing the drains, must all
//!   succeed. (This test found losers told `TailPage` while a flush was merging
//!   their order-0 block: `classify` now looks at the block itself too.)
//! * `rseq_pinned_cpu_uses_its_stack`: on a thread pinned to one CPU, a freed
//!   block is on that CPU's stack: the per-CPU *list* path (`alloc_pages_on`)
//!   does not see it, the next `alloc_pages` hands it back, and after
//!   `drain_all_pages` it is in a free buddy block. The first test runs the same
//!   check on every CPU after its storm (no CPU may be left stopped).
//!
//! Each ends at a quiet point with every thread joined: everything freed,
//! `nr_free_pages + nr_pcp_pages == managed_pages`, `drain_all_pages`,
//! `check_invariants` clean with nothing allocated, every ledger entry 0, and
//! `vmstat`'s `pgalloc_*` summed minus `pgfree` equal to 0.
//!
//! Without the fast path (`uses_cpu_stacks()` false: no glibc rseq area, e.g.
//! `GLIBC_TUNABLES=glibc.pthread.rseq=0`, or under valgrind) the tests run the
//! same storm through the per-CPU lists, pass, and say that the fast path was off.
//!
//! # Running
//!
//! `cargo test --release -p zonealloc --test rseq_stress -- --nocapture` prints the
//! figures. `ZONEALLOC_RSEQ_STRESS_SCALE=N` multiplies the operations and rounds;
//! `ZONEALLOC_RSEQ_STRESS_SEED` changes the seed.

#![cfg(all(feature = "std", target_os = "linux"))]

#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Barrier, Mutex, MutexGuard, Once};
use std::thread;
use std::time::{Duration, Instant};

use zonealloc::{AllocError, Config, FrameState, FreeError, Gfp, Order, Pfn, ZoneAllocator};

// -----------------------------------------------------------------------------
// Parameters
// -----------------------------------------------------------------------------

/// The zone: 64 MiB, 16384 frames of 4 KiB, 32 pageblocks.
const ZONE_BYTES: u64 = 64 << 20;
/// Worker threads of the ledger test: twice the cores of the CI machine.
const WORKERS: usize = 4;
/// Operations per worker at scale 1.
const BASE_OPS_PER_WORKER: u64 = 24_000_000;
/// Blocks one worker holds at most before it must free.
const HOLD_CAP: usize = 160;
/// Shared slots through which blocks change hands.
const SLOTS: usize = 64;
/// Pairs of racing threads in the double-free test.
const PAIRS: usize = 2;
/// Rounds of the double-free test at scale 1.
const BASE_ROUNDS: u64 = 14_000;
/// Blocks each pair races on per round.
const RACED_PER_ROUND: usize = 24;
/// Blocks each racing thread frees alone per round (racing only the drains).
const SOLO_PER_ROUND: usize = 8;
/// The pageblock order of the default configuration.
const PAGEBLOCK_ORDER: Order = Order(9);
/// Ledger tag of the test's main thread.
const MAIN_TAG: u8 = 100;
/// A progress counter standing still this long fails the test.
const WATCHDOG_STALL: Duration = Duration::from_secs(20);

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        }
        Err(_) => default,
    }
}

fn scale() -> u64 {
    env_u64("ZONEALLOC_RSEQ_STRESS_SCALE", 1).max(1)
}

fn seed() -> u64 {
    env_u64("ZONEALLOC_RSEQ_STRESS_SEED", 0x0072_7365_7121_2026)
}

/// The tests share the machine one at a time: they re-pin threads, and the
/// watchdog and the figures would be disturbed by a sibling.
static MACHINE: Mutex<()> = Mutex::new(());

fn machine() -> MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}

fn new_allocator() -> ZoneAllocator {
    ZoneAllocator::new(Config::with_bytes(ZONE_BYTES)).expect("64 MiB default config")
}

fn report_fast_path(name: &str, za: &ZoneAllocator) {
    if za.uses_cpu_stacks() {
        println!("{name}: fast path ON (per-CPU stacks with restartable sequences)");
    } else {
        println!(
            "{name}: fast path OFF (uses_cpu_stacks() is false: no rseq area or no \
             membarrier RSEQ); the storm ran through the per-CPU lists only"
        );
    }
}

// -----------------------------------------------------------------------------
// Random numbers (`Rng`: support/rng.rs)
// -----------------------------------------------------------------------------

/// Mostly order 0; orders 1..=3; now and then a whole pageblock.
fn pick_order(rng: &mut Rng) -> Order {
    match rng.below(1000) {
        0..=759 => Order(0),
        760..=989 => Order(1 + rng.below(3) as u8),
        _ => PAGEBLOCK_ORDER,
    }
}

fn pick_gfp(rng: &mut Rng) -> Gfp {
    if rng.below(2) == 0 {
        Gfp::KERNEL
    } else {
        Gfp::HIGHUSER_MOVABLE
    }
}

// -----------------------------------------------------------------------------
// Signals, CPUs, threads
// -----------------------------------------------------------------------------

/// `SIGUSR1`s handled, all threads.
static SIGNALS_HANDLED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// `SIGUSR1`s handled on this thread (read around each call to spot the calls
    /// a signal landed in).
    static MY_SIGNALS: AtomicU64 = const { AtomicU64::new(0) };
}

/// The no-op handler: counts, nothing else (atomics only: async-signal-safe).
extern "C" fn on_sigusr1(_sig: libc::c_int) {
    SIGNALS_HANDLED.fetch_add(1, Ordering::Relaxed);
    MY_SIGNALS.with(|n| n.fetch_add(1, Ordering::Relaxed));
}

fn install_sigusr1_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed `sigaction` is a valid empty one; the handler is an
        // `extern "C" fn(c_int)` that only touches atomics, and `SA_RESTART`
        // keeps interrupted system calls going.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            let r = libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
            assert_eq!(r, 0, "sigaction(SIGUSR1)");
        }
    });
}

fn my_signals() -> u64 {
    MY_SIGNALS.with(|n| n.load(Ordering::Relaxed))
}

/// The CPU this thread runs on (from glibc's rseq area where it has one).
fn os_cpu() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::sched_getcpu() }
}

fn gettid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() }
}

fn empty_cpu_set() -> libc::cpu_set_t {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    unsafe { std::mem::zeroed() }
}

fn cpu_set_of(cpus: &[usize]) -> libc::cpu_set_t {
    let mut set = empty_cpu_set();
    for &c in cpus {
        // SAFETY: `c < CPU_SETSIZE` (it came from `CPU_ISSET` on such a set).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// The affinity mask of thread `tid` (0: the calling thread).
fn get_affinity(tid: libc::pid_t) -> libc::cpu_set_t {
    let mut set = empty_cpu_set();
    // SAFETY: `set` is a writable `cpu_set_t` of the size passed.
    let r =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        r,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    set
}

/// Sets the affinity of thread `tid` (0: the calling thread).
fn set_affinity(tid: libc::pid_t, set: &libc::cpu_set_t) -> bool {
    // SAFETY: `set` is a readable `cpu_set_t` of the size passed.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    let set = get_affinity(0);
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c < CPU_SETSIZE`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    assert!(!cpus.is_empty(), "no CPU in this process's affinity mask");
    cpus
}

/// The thread identities the migrator and the signaller aim at.
struct Targets {
    /// Linux TIDs; 0 for none.
    tids: Vec<AtomicI32>,
    /// `pthread_t`s; valid while the thread is not joined (the test keeps every
    /// target alive until the signaller is joined).
    threads: Vec<AtomicU64>,
}

impl Targets {
    fn new(n: usize) -> Targets {
        Targets {
            tids: (0..n).map(|_| AtomicI32::new(0)).collect(),
            threads: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Called by target `i` itself as it starts.
    fn register(&self, i: usize) {
        // SAFETY: no preconditions.
        let me = unsafe { libc::pthread_self() };
        self.threads[i].store(me as u64, Ordering::Release);
        self.tids[i].store(gettid(), Ordering::Release);
    }

    fn unregister(&self, i: usize) {
        self.tids[i].store(0, Ordering::Release);
        self.threads[i].store(0, Ordering::Release);
    }
}

/// Clears a target's registration when its thread leaves, also while unwinding.
struct Leaving<'a> {
    targets: &'a Targets,
    i: usize,
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.targets.unregister(self.i);
    }
}

/// Counts a thread's work finished when dropped (explicitly, or while unwinding).
struct Finished<'a>(&'a AtomicU64);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// Waits for `release`: a target stays alive (its `pthread_t` valid) until the
/// signaller is joined.
fn wait_for(release: &AtomicBool) {
    while !release.load(Ordering::Acquire) {
        thread::sleep(Duration::from_millis(1));
    }
}

#[derive(Default)]
struct NoiseCounts {
    repins: AtomicU64,
    spreads: AtomicU64,
    repin_failures: AtomicU64,
    signals_sent: AtomicU64,
    signal_failures: AtomicU64,
}

/// Re-pins every target to one random allowed CPU (one time in eight to all of
/// them) until `stop`.
fn migrator(targets: &Targets, cpus: &[usize], stop: &AtomicBool, n: &NoiseCounts, seed: u64) {
    let mut rng = Rng::new(seed);
    let all = cpu_set_of(cpus);
    while !stop.load(Ordering::Acquire) {
        for t in &targets.tids {
            let tid = t.load(Ordering::Acquire);
            if tid == 0 {
                continue;
            }
            let spread = rng.below(8) == 0;
            let set = if spread {
                all
            } else {
                cpu_set_of(&[*rng.pick(cpus)])
            };
            if set_affinity(tid, &set) {
                n.repins.fetch_add(1, Ordering::Relaxed);
                if spread {
                    n.spreads.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                n.repin_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        thread::sleep(Duration::from_micros(100 + rng.below(200)));
    }
}

/// Sends `SIGUSR1` to every target until `stop`.
fn signaller(targets: &Targets, stop: &AtomicBool, n: &NoiseCounts, seed: u64) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Acquire) {
        for t in &targets.threads {
            let th = t.load(Ordering::Acquire);
            if th == 0 {
                continue;
            }
            // SAFETY: `th` is the `pthread_t` of a thread of this test that is not
            // joined yet (targets outlive the signaller), and the handler for
            // `SIGUSR1` is installed.
            let r = unsafe { libc::pthread_kill(th as libc::pthread_t, libc::SIGUSR1) };
            if r == 0 {
                n.signals_sent.fetch_add(1, Ordering::Relaxed);
            } else {
                n.signal_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        thread::sleep(Duration::from_micros(20 + rng.below(80)));
    }
}

// -----------------------------------------------------------------------------
// Watchdog
// -----------------------------------------------------------------------------

/// Sets its flags when dropped, also while unwinding, so that no helper thread
/// waits for ever after a failed assertion.
struct SetOnDrop<'a>(&'a [&'a AtomicBool]);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        for f in self.0 {
            f.store(true, Ordering::Release);
        }
    }
}

/// Ends the test process with a message if `progress` stands still for
/// `WATCHDOG_STALL` before `done`.
fn watchdog(name: &str, progress: &AtomicU64, done: &AtomicBool, phase: &Mutex<&'static str>) {
    let mut last = progress.load(Ordering::Relaxed);
    let mut since = Instant::now();
    while !done.load(Ordering::Acquire) {
        thread::sleep(Duration::from_millis(20));
        let now = progress.load(Ordering::Relaxed);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= WATCHDOG_STALL {
            let phase = *phase.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!(
                "{name}: WATCHDOG: no progress for {:?} during {phase} (counter stuck at \
                 {now}): a thread is stuck in the allocator (deadlock or livelock)",
                since.elapsed()
            );
            std::process::exit(101);
        }
    }
}

fn set_phase(phase: &Mutex<&'static str>, progress: &AtomicU64, what: &'static str) {
    *phase.lock().unwrap_or_else(|e| e.into_inner()) = what;
    progress.fetch_add(1, Ordering::Relaxed);
}

// -----------------------------------------------------------------------------
// The ledger
// -----------------------------------------------------------------------------

/// A block the harness holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    pfn: u64,
    order: u8,
    /// Ledger tag of the thread that allocated it.
    tag: u8,
}

impl Held {
    /// Slot encoding: never 0 (bit 63 set).
    fn encode(self) -> u64 {
        debug_assert!(self.pfn < 1 << 40);
        1 << 63 | u64::from(self.tag) << 48 | self.pfn << 8 | u64::from(self.order)
    }

    fn decode(v: u64) -> Held {
        Held {
            pfn: (v >> 8) & ((1 << 40) - 1),
            order: v as u8,
            tag: (v >> 48) as u8,
        }
    }
}

struct Ledger {
    base: u64,
    frames: Vec<AtomicU8>,
    violations: AtomicU64,
    first: Mutex<Vec<String>>,
}

impl Ledger {
    fn new(za: &ZoneAllocator) -> Ledger {
        let base = za.zones().map(|(_, s, _, _)| s.0).min().unwrap();
        let end = za.zones().map(|(_, s, n, _)| s.0 + n).max().unwrap();
        Ledger {
            base,
            frames: (base..end).map(|_| AtomicU8::new(0)).collect(),
            violations: AtomicU64::new(0),
            first: Mutex::new(Vec::new()),
        }
    }

    #[cold]
    fn violation(&self, what: String) {
        self.violations.fetch_add(1, Ordering::Relaxed);
        let mut v = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() < 12 {
            eprintln!("VIOLATION: {what}");
            v.push(what);
        }
    }

    fn frames_of(&self, pfn: u64, order: u8) -> std::ops::Range<usize> {
        let i = (pfn - self.base) as usize;
        i..i + (1usize << order)
    }

    /// Takes a freshly allocated block: every frame 0 -> `tag`.
    fn claim(&self, za: &ZoneAllocator, pfn: Pfn, order: Order, tag: u8) -> bool {
        if !pfn.is_aligned(order) || za.zone_id_of(pfn).is_none() {
            self.violation(format!(
                "allocation returned {pfn} order {order}: not a block"
            ));
            return false;
        }
        let mut ok = true;
        for k in self.frames_of(pfn.0, order.0) {
            // AcqRel: pairs with the release of the previous owner, through the
            // allocator's own synchronisation.
            if let Err(cur) =
                self.frames[k].compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
            {
                self.violation(format!(
                    "double allocation: frame {:#x} of block {pfn} order {order} (for tag \
                     {tag}) is still owned by tag {cur}",
                    self.base + k as u64
                ));
                ok = false;
            }
        }
        ok
    }

    /// Gives a block up before it is freed: every frame `tag` -> 0.
    fn release(&self, h: Held) {
        for k in self.frames_of(h.pfn, h.order) {
            if let Err(cur) =
                self.frames[k].compare_exchange(h.tag, 0, Ordering::AcqRel, Ordering::Acquire)
            {
                self.violation(format!(
                    "ledger: frame {:#x} of block {:#x} order {} is owned by tag {cur}, not {}",
                    self.base + k as u64,
                    h.pfn,
                    h.order,
                    h.tag
                ));
            }
        }
    }

    #[track_caller]
    fn assert_clean(&self, name: &str) {
        let n = self.violations.load(Ordering::Relaxed);
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(n, 0, "{name}: {n} violations, first: {:#?}", *first);
    }

    #[track_caller]
    fn assert_all_zero(&self, name: &str) {
        if let Some(k) = self
            .frames
            .iter()
            .position(|t| t.load(Ordering::Acquire) != 0)
        {
            panic!(
                "{name}: ledger frame {:#x} still owned by tag {} at the end",
                self.base + k as u64,
                self.frames[k].load(Ordering::Relaxed)
            );
        }
    }
}

// -----------------------------------------------------------------------------
// Checks at quiet points
// -----------------------------------------------------------------------------

fn pgalloc_minus_pgfree(za: &ZoneAllocator) -> i64 {
    let vm = za.vmstat();
    let alloc: u64 = vm
        .entries
        .iter()
        .filter(|(k, _)| k.starts_with("pgalloc_"))
        .map(|(_, v)| v)
        .sum();
    alloc as i64 - vm.get("pgfree").expect("vmstat has pgfree") as i64
}

/// Whether `pfn` is the head of a free buddy block or lies inside one.
fn in_free_buddy_block(za: &ZoneAllocator, pfn: Pfn) -> bool {
    (0..=za.config().max_order.0).any(|o| {
        let head = Pfn(pfn.0 & !((1u64 << o) - 1));
        matches!(za.frame_state(head), Some(FrameState::Free { order }) if order.0 >= o)
    })
}

/// Everything is freed and every thread joined: the allocator is whole again.
#[track_caller]
fn final_checks(name: &str, za: &ZoneAllocator, ledger: &Ledger) {
    ledger.assert_clean(name);
    ledger.assert_all_zero(name);
    let managed = za.managed_pages();
    let (free, pcp) = (za.nr_free_pages(), za.nr_pcp_pages());
    assert_eq!(
        free + pcp,
        managed,
        "{name}: before the drain, free {free} + pcp {pcp} != managed {managed}"
    );
    za.drain_all_pages();
    let rep = za
        .check_invariants()
        .unwrap_or_else(|v| panic!("{name}: check_invariants at the end: {v}"));
    assert_eq!(rep.allocated_pages, 0, "{name}: frames still allocated");
    assert_eq!(
        rep.pcp_pages, 0,
        "{name}: validator finds per-CPU pages after a drain"
    );
    assert_eq!(za.nr_pcp_pages(), 0, "{name}: per-CPU pages after a drain");
    assert_eq!(
        za.nr_free_pages() + za.nr_pcp_pages(),
        managed,
        "{name}: after the drain, frames lost"
    );
    assert_eq!(rep.free_pages, managed, "{name}: validator's free pages");
    assert_eq!(
        pgalloc_minus_pgfree(za),
        0,
        "{name}: vmstat pgalloc_* - pgfree with nothing allocated"
    );
}

/// Restores the calling thread's affinity mask when dropped.
struct Pinned(libc::cpu_set_t);

impl Pinned {
    /// Pins the calling thread to `cpu` and waits until it runs there.
    fn to(cpu: usize) -> Pinned {
        let old = get_affinity(0);
        assert!(set_affinity(0, &cpu_set_of(&[cpu])), "pin to CPU {cpu}");
        let t0 = Instant::now();
        while os_cpu() != cpu as i32 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "never ran on CPU {cpu}"
            );
            thread::yield_now();
        }
        Pinned(old)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        set_affinity(0, &self.0);
    }
}

/// On a thread pinned to `cpu`, with nothing else running: a freed order-0 block
/// goes to that CPU's stack (the list path does not see it, the next pop hands it
/// back) or, without stacks, to its list; after `drain_all_pages` it is in a free
/// buddy block. Returns what it saw, for the report.
fn pinned_cpu_check(name: &str, za: &ZoneAllocator, ledger: &Ledger, cpu: usize) -> String {
    let _pin = Pinned::to(cpu);
    za.drain_all_pages();
    assert_eq!(
        za.nr_pcp_pages(),
        0,
        "{name}: CPU {cpu}: pcp pages after a drain"
    );
    let list_cpu = za.current_cpu();
    let take = |gfp: Gfp, on_list: bool| -> Held {
        let r = if on_list {
            za.alloc_pages_on(list_cpu, gfp, Order(0))
        } else {
            za.alloc_pages(gfp, Order(0))
        };
        let pfn = r.unwrap_or_else(|e| panic!("{name}: CPU {cpu}: order-0 alloc: {e}"));
        assert!(
            ledger.claim(za, pfn, Order(0), MAIN_TAG),
            "{name}: CPU {cpu}"
        );
        Held {
            pfn: pfn.0,
            order: 0,
            tag: MAIN_TAG,
        }
    };
    let give = |h: Held| {
        ledger.release(h);
        za.free_pages(Pfn(h.pfn), Order(h.order))
            .unwrap_or_else(|e| panic!("{name}: CPU {cpu}: free of a held block: {e}"));
    };
    // A free may find the stack at its limit and flush (the block then goes to
    // the buddy lists with what the flush took, and the stack keeps its limit
    // less a batch), so if the first free flushed, the second finds room.
    let a = take(Gfp::KERNEL, false);
    let b = take(Gfp::KERNEL, false);
    give(a);
    let (x, spare) = if za.frame_state(Pfn(a.pfn)) == Some(FrameState::PerCpu { order: Order(0) }) {
        (a, Some(b))
    } else {
        give(b);
        (b, None)
    };
    assert_eq!(
        za.frame_state(Pfn(x.pfn)),
        Some(FrameState::PerCpu { order: Order(0) }),
        "{name}: CPU {cpu}: a block freed on a pinned thread is not per-CPU"
    );
    // The list path of the same CPU: with stacks it cannot see the block.
    let y = take(Gfp::KERNEL, true);
    let seen = if za.uses_cpu_stacks() {
        assert_ne!(
            y.pfn, x.pfn,
            "{name}: CPU {cpu}: the list path handed out a block the stack holds"
        );
        assert_eq!(
            za.frame_state(Pfn(x.pfn)),
            Some(FrameState::PerCpu { order: Order(0) }),
            "{name}: CPU {cpu}: block left the stack under a list allocation"
        );
        let z = take(Gfp::KERNEL, false);
        assert_eq!(
            z.pfn, x.pfn,
            "{name}: CPU {cpu}: the fast path did not pop the block just pushed \
             (stack stopped, or the free did not go through the stack)"
        );
        give(z);
        "stack"
    } else {
        assert_eq!(
            y.pfn, x.pfn,
            "{name}: CPU {cpu}: without stacks the free goes to the list's head"
        );
        "list"
    };
    give(y);
    if let Some(b) = spare {
        give(b);
    }
    za.drain_all_pages();
    assert_eq!(za.nr_pcp_pages(), 0, "{name}: CPU {cpu}: after the drain");
    assert!(
        in_free_buddy_block(za, Pfn(x.pfn)),
        "{name}: CPU {cpu}: after drain_all_pages {:#x} is {:?}, not in a free buddy block",
        x.pfn,
        za.frame_state(Pfn(x.pfn))
    );
    format!("cpu{cpu}:{seen}")
}

// -----------------------------------------------------------------------------
// Test 1: the random mix against the ledger
// -----------------------------------------------------------------------------

#[derive(Default, Clone, Debug)]
struct Counts {
    ops: u64,
    allocs: u64,
    alloc_pages: u64,
    pageblock_allocs: u64,
    alloc_failures: u64,
    /// `NoMemory` answers by order: 0, 1..=3, pageblock.
    failures_by_order: [u64; 3],
    frees: u64,
    cross_thread_frees: u64,
    transfers: u64,
    inspections: u64,
    /// Alloc/free calls during which this thread handled a signal.
    signalled_calls: u64,
    /// Alloc/free calls that began on one CPU and ended on another.
    migrated_calls: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.ops += o.ops;
        self.allocs += o.allocs;
        self.alloc_pages += o.alloc_pages;
        self.pageblock_allocs += o.pageblock_allocs;
        self.alloc_failures += o.alloc_failures;
        for (a, b) in self.failures_by_order.iter_mut().zip(o.failures_by_order) {
            *a += b;
        }
        self.frees += o.frees;
        self.cross_thread_frees += o.cross_thread_frees;
        self.transfers += o.transfers;
        self.inspections += o.inspections;
        self.signalled_calls += o.signalled_calls;
        self.migrated_calls += o.migrated_calls;
    }
}

/// Runs one allocator call, noting whether a signal landed in it or the thread
/// changed CPU across it.
#[inline]
fn watched<T>(c: &mut Counts, f: impl FnOnce() -> T) -> T {
    let (cpu0, sig0) = (os_cpu(), my_signals());
    let r = f();
    if my_signals() != sig0 {
        c.signalled_calls += 1;
    }
    if os_cpu() != cpu0 {
        c.migrated_calls += 1;
    }
    r
}

struct Storm<'a> {
    za: &'a ZoneAllocator,
    ledger: Ledger,
    slots: Vec<AtomicU64>,
    targets: Targets,
    progress: AtomicU64,
    finished: AtomicU64,
    release: AtomicBool,
    counts: Mutex<Counts>,
}

impl Storm<'_> {
    fn free(&self, h: Held, me: u8, c: &mut Counts) {
        self.ledger.release(h);
        let (pfn, order) = (Pfn(h.pfn), Order(h.order));
        if let Err(e) = watched(c, || self.za.free_pages(pfn, order)) {
            self.ledger
                .violation(format!("free_pages({pfn}, {order}) of a held block: {e:?}"));
        }
        c.frees += 1;
        if h.tag != me {
            c.cross_thread_frees += 1;
        }
    }

    fn alloc(&self, rng: &mut Rng, me: u8, held: &mut Vec<Held>, c: &mut Counts) {
        let order = pick_order(rng);
        let gfp = pick_gfp(rng);
        match watched(c, || self.za.alloc_pages(gfp, order)) {
            Ok(pfn) => {
                if self.ledger.claim(self.za, pfn, order, me) {
                    held.push(Held {
                        pfn: pfn.0,
                        order: order.0,
                        tag: me,
                    });
                }
                c.allocs += 1;
                c.alloc_pages += order.nr_pages();
                if order == PAGEBLOCK_ORDER {
                    c.pageblock_allocs += 1;
                }
            }
            Err(AllocError::NoMemory { .. }) => {
                c.alloc_failures += 1;
                c.failures_by_order[match order.0 {
                    0 => 0,
                    1..=3 => 1,
                    _ => 2,
                }] += 1;
            }
            Err(e) => self
                .ledger
                .violation(format!("alloc_pages({gfp:?}, {order}): {e}")),
        }
    }

    /// Swaps a held block (or nothing) with a random slot; what comes out is
    /// freed at once half the time, else kept.
    fn transfer(
        &self,
        rng: &mut Rng,
        me: u8,
        held: &mut Vec<Held>,
        give: Option<Held>,
        c: &mut Counts,
    ) {
        let slot = rng.pick(&self.slots);
        // AcqRel: the receiver sees the giver's ledger writes.
        let got = slot.swap(give.map_or(0, Held::encode), Ordering::AcqRel);
        if got != 0 {
            let h = Held::decode(got);
            if rng.below(2) == 0 {
                self.free(h, me, c);
            } else {
                held.push(h);
            }
        }
    }

    fn inspect(&self, h: Held) {
        let want = Some(FrameState::Allocated {
            order: Order(h.order),
            refcount: 1,
        });
        let got = self.za.frame_state(Pfn(h.pfn));
        if got != want {
            self.ledger.violation(format!(
                "held block {:#x} order {} has state {got:?}",
                h.pfn, h.order
            ));
        }
    }

    fn worker(&self, i: usize, ops: u64, seed: u64) {
        let me = (i + 1) as u8;
        self.targets.register(i);
        let _leaving = Leaving {
            targets: &self.targets,
            i,
        };
        let finished = Finished(&self.finished);
        let mut rng = Rng::new(seed);
        let mut held: Vec<Held> = Vec::with_capacity(HOLD_CAP + 8);
        let mut c = Counts::default();
        for n in 0..ops {
            if n % 256 == 255 {
                self.progress.fetch_add(1, Ordering::Relaxed);
            }
            let mut r = rng.below(100);
            if held.is_empty() {
                r = 0;
            } else if held.len() >= HOLD_CAP {
                r = 50;
            }
            match r {
                0..=44 => self.alloc(&mut rng, me, &mut held, &mut c),
                45..=74 => {
                    let h = held.swap_remove(rng.below(held.len() as u64) as usize);
                    self.free(h, me, &mut c);
                }
                75..=95 => {
                    let give = if rng.below(2) == 0 {
                        Some(held.swap_remove(rng.below(held.len() as u64) as usize))
                    } else {
                        None
                    };
                    self.transfer(&mut rng, me, &mut held, give, &mut c);
                    c.transfers += 1;
                }
                _ => {
                    self.inspect(*rng.pick(&held));
                    c.inspections += 1;
                }
            }
        }
        c.ops = ops;
        for h in held.drain(..) {
            self.free(h, me, &mut c);
        }
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(&c);
        drop(finished);
        wait_for(&self.release);
    }
}

#[derive(Default)]
struct DrainCounts {
    drain_all: AtomicU64,
    drain_cpu: AtomicU64,
    decays: AtomicU64,
    pcp_reads: AtomicU64,
    zoneinfo_reads: AtomicU64,
    checks: AtomicU64,
    checks_failed: AtomicU64,
    first_check_failure: Mutex<Option<String>>,
}

/// Remote operations on every CPU's stacks while the workers run.
fn drainer(za: &ZoneAllocator, ledger: &Ledger, stop: &AtomicBool, d: &DrainCounts, seed: u64) {
    let mut rng = Rng::new(seed);
    let nr_cpus = za.config().nr_cpus as u64;
    let managed = za.managed_pages();
    while !stop.load(Ordering::Acquire) {
        match rng.below(16) {
            0..=3 => {
                za.drain_all_pages();
                d.drain_all.fetch_add(1, Ordering::Relaxed);
            }
            4..=7 => {
                za.drain_cpu_pages(rng.below(nr_cpus) as usize);
                d.drain_cpu.fetch_add(1, Ordering::Relaxed);
            }
            8..=9 => {
                za.pcp_decay();
                d.decays.fetch_add(1, Ordering::Relaxed);
            }
            10..=12 => {
                // A lock-free sum of per-CPU figures read one after another: a block
                // moving between them meanwhile can be counted twice, never more.
                let pcp = za.nr_pcp_pages();
                if pcp > 2 * managed {
                    ledger.violation(format!("nr_pcp_pages {pcp} > 2 x managed {managed}"));
                }
                d.pcp_reads.fetch_add(1, Ordering::Relaxed);
            }
            13..=14 => {
                // Each figure is read consistently (the free count from a
                // snapshot, each CPU's count under its lock), but one after
                // another, so only each on its own is bounded.
                let zi = za.zoneinfo();
                for z in &zi.zones {
                    let worst = z.pagesets.iter().map(|p| p.count).max().unwrap_or(0);
                    if z.free > managed || worst > managed {
                        ledger.violation(format!(
                            "zoneinfo: free {} or a CPU's count {worst} above managed {managed}",
                            z.free
                        ));
                    }
                }
                d.zoneinfo_reads.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                // Meaningful only at quiet points (a block may be between its
                // freeze and a list): run for the stops it makes, results kept.
                d.checks.fetch_add(1, Ordering::Relaxed);
                if let Err(v) = za.check_invariants() {
                    d.checks_failed.fetch_add(1, Ordering::Relaxed);
                    let mut f = d
                        .first_check_failure
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    f.get_or_insert_with(|| v.to_string());
                }
            }
        }
        thread::sleep(Duration::from_micros(rng.below(400)));
    }
}

#[test]
fn rseq_stress_ledger() {
    const NAME: &str = "rseq_stress_ledger";
    let _machine = machine();
    install_sigusr1_handler();
    let t0 = Instant::now();
    let cpus = allowed_cpus();
    let scale = scale();
    let seed = seed();
    let ops = BASE_OPS_PER_WORKER * scale;
    let za = new_allocator();
    report_fast_path(NAME, &za);
    let storm = Storm {
        za: &za,
        ledger: Ledger::new(&za),
        slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        targets: Targets::new(WORKERS),
        progress: AtomicU64::new(0),
        finished: AtomicU64::new(0),
        release: AtomicBool::new(false),
        counts: Mutex::new(Counts::default()),
    };
    let noise = NoiseCounts::default();
    let drains = DrainCounts::default();
    let stop_noise = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let phase = Mutex::new("the storm");
    let signals0 = SIGNALS_HANDLED.load(Ordering::Relaxed);
    thread::scope(|s| {
        s.spawn(|| watchdog(NAME, &storm.progress, &done, &phase));
        let flags = [&stop_noise, &storm.release, &done];
        let _on_exit = SetOnDrop(&flags);
        let mut workers = Vec::new();
        for i in 0..WORKERS {
            let storm = &storm;
            let wseed = seed ^ ((i as u64 + 1) * 0x9e37_79b9_7f4a_7c15);
            workers.push(s.spawn(move || storm.worker(i, ops, wseed)));
        }
        let (st, n, cpus) = (&storm, &noise, &cpus[..]);
        let noisy = [
            s.spawn(|| migrator(&st.targets, cpus, &stop_noise, n, seed ^ 0x6d69)),
            s.spawn(|| signaller(&st.targets, &stop_noise, n, seed ^ 0x7369)),
            s.spawn(|| drainer(st.za, &st.ledger, &stop_noise, &drains, seed ^ 0x6472)),
        ];
        while storm.finished.load(Ordering::Acquire) < WORKERS as u64 {
            thread::sleep(Duration::from_millis(2));
        }
        set_phase(
            &phase,
            &storm.progress,
            "joining the migrator, signaller and drainer",
        );
        stop_noise.store(true, Ordering::Release);
        for h in noisy {
            h.join().expect("a noise thread panicked");
            storm.progress.fetch_add(1, Ordering::Relaxed);
        }
        set_phase(&phase, &storm.progress, "joining the workers");
        storm.release.store(true, Ordering::Release);
        for h in workers {
            h.join().expect("a worker panicked");
            storm.progress.fetch_add(1, Ordering::Relaxed);
        }
        set_phase(&phase, &storm.progress, "the checks at the end");

        // Quiet: what the slots still hold is freed from here.
        let mut freed = 0;
        for slot in &storm.slots {
            let v = slot.swap(0, Ordering::AcqRel);
            if v != 0 {
                let h = Held::decode(v);
                storm.ledger.release(h);
                za.free_pages(Pfn(h.pfn), Order(h.order))
                    .unwrap_or_else(|e| panic!("{NAME}: free of slot block {h:?}: {e}"));
                freed += 1;
            }
        }
        storm.ledger.assert_clean(NAME);
        let pcp = za.nr_pcp_pages();
        println!(
            "{NAME}: {freed} blocks left in slots freed; per-CPU pages before the drain: {pcp}"
        );
        if za.uses_cpu_stacks() && freed > 0 {
            assert!(
                pcp > 0,
                "{NAME}: frees on the fast path left nothing per-CPU"
            );
        }
        assert_eq!(
            za.nr_free_pages() + pcp,
            za.managed_pages(),
            "{NAME}: everything freed, but free + pcp != managed"
        );
        // No CPU was left stopped by the storm's drains: each CPU's stack works.
        let seen: Vec<String> = cpus
            .iter()
            .take(8)
            .map(|&cpu| pinned_cpu_check(NAME, &za, &storm.ledger, cpu))
            .collect();
        println!("{NAME}: pinned checks: {}", seen.join(" "));
        final_checks(NAME, &za, &storm.ledger);
    });
    let c = storm.counts.lock().unwrap().clone();
    let handled = SIGNALS_HANDLED.load(Ordering::Relaxed) - signals0;
    println!(
        "{NAME}: {} workers x {ops} ops on CPUs {cpus:?} (nr_cpus {}), seed {seed:#x}, {:.2?}",
        WORKERS,
        za.config().nr_cpus,
        t0.elapsed()
    );
    println!(
        "{NAME}: allocs {} ({} pages, {} pageblocks, {} NoMemory: order 0 {}, orders 1-3 {}, \
         pageblock {}), frees {} ({} by another thread than the allocator), transfers {}, \
         inspections {}",
        c.allocs,
        c.alloc_pages,
        c.pageblock_allocs,
        c.alloc_failures,
        c.failures_by_order[0],
        c.failures_by_order[1],
        c.failures_by_order[2],
        c.frees,
        c.cross_thread_frees,
        c.transfers,
        c.inspections
    );
    println!(
        "{NAME}: re-pins {} ({} to all CPUs, {} refused), alloc/free calls that changed CPU {}; \
         signals sent {} ({} refused), handled {handled}, alloc/free calls a signal landed in {}",
        noise.repins.load(Ordering::Relaxed),
        noise.spreads.load(Ordering::Relaxed),
        noise.repin_failures.load(Ordering::Relaxed),
        c.migrated_calls,
        noise.signals_sent.load(Ordering::Relaxed),
        noise.signal_failures.load(Ordering::Relaxed),
        c.signalled_calls
    );
    println!(
        "{NAME}: concurrent drain_all_pages {}, drain_cpu_pages {}, pcp_decay {}, nr_pcp_pages {}, \
         zoneinfo {}, check_invariants {} ({} not clean mid-storm{})",
        drains.drain_all.load(Ordering::Relaxed),
        drains.drain_cpu.load(Ordering::Relaxed),
        drains.decays.load(Ordering::Relaxed),
        drains.pcp_reads.load(Ordering::Relaxed),
        drains.zoneinfo_reads.load(Ordering::Relaxed),
        drains.checks.load(Ordering::Relaxed),
        drains.checks_failed.load(Ordering::Relaxed),
        drains
            .first_check_failure
            .lock()
            .unwrap()
            .as_ref()
            .map_or(String::new(), |f| format!(", first: {f}"))
    );
    assert_eq!(c.ops, ops * WORKERS as u64);
    assert!(c.cross_thread_frees > 0, "{NAME}: no block changed hands");
}

// -----------------------------------------------------------------------------
// Test 2: racing double frees, and frees racing drain_all_pages
// -----------------------------------------------------------------------------

/// One side's free of a raced block.
#[derive(Clone, Copy, Debug)]
struct Raced {
    result: Result<(), FreeError>,
    other_in_flight: bool,
}

/// One pair's blocks of the current round.
struct Pair {
    /// Raced blocks, encoded; published by side 0 before the round's start.
    blocks: Vec<AtomicU64>,
    /// Per raced block: arrivals at the rendezvous.
    arrived: Vec<AtomicU32>,
    /// Per raced block: frees that returned (to tell overlapping races apart).
    returned: Vec<AtomicU32>,
    /// Per side: each raced free's result this round, and whether the other
    /// side's free had not returned yet when this one began.
    results: [Mutex<Vec<Raced>>; 2],
}

#[derive(Default)]
struct RaceCounts {
    races: AtomicU64,
    /// Races where the loser began before the winner had returned.
    overlapping: AtomicU64,
    already_free: AtomicU64,
    won_by_side: [AtomicU64; 2],
    solo_frees: AtomicU64,
    /// Frees (raced or solo) that began or ended while a drain_all_pages ran.
    frees_during_drain: AtomicU64,
    drains: AtomicU64,
    signalled_frees: AtomicU64,
    migrated_frees: AtomicU64,
    alloc_failures: AtomicU64,
}

struct Races<'a> {
    za: &'a ZoneAllocator,
    ledger: Ledger,
    pairs: Vec<Pair>,
    targets: Targets,
    start: Barrier,
    end: Barrier,
    progress: AtomicU64,
    finished: AtomicU64,
    release: AtomicBool,
    /// Odd while a drain_all_pages runs; bumped before and after each.
    drain_gen: AtomicU64,
    n: RaceCounts,
}

/// Waits until `parties` threads arrived at `counter` (spins, then yields: the
/// other party may be preempted on a machine with fewer cores than threads).
fn meet(counter: &AtomicU32, parties: u32) {
    counter.fetch_add(1, Ordering::AcqRel);
    let mut spins = 0u32;
    while counter.load(Ordering::Acquire) < parties {
        spins += 1;
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}

impl Races<'_> {
    fn alloc_block(&self, rng: &mut Rng, tag: u8) -> Option<Held> {
        let order = pick_order(rng);
        match self.za.alloc_pages(pick_gfp(rng), order) {
            Ok(pfn) => self.ledger.claim(self.za, pfn, order, tag).then_some(Held {
                pfn: pfn.0,
                order: order.0,
                tag,
            }),
            Err(AllocError::NoMemory { .. }) => {
                self.n.alloc_failures.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                self.ledger
                    .violation(format!("alloc_pages(.., {order}) for a race: {e}"));
                None
            }
        }
    }

    /// A free, noting whether it overlapped a drain, a signal or a migration.
    fn free(&self, h: Held) -> Result<(), FreeError> {
        let (cpu0, sig0) = (os_cpu(), my_signals());
        let g0 = self.drain_gen.load(Ordering::Acquire);
        let r = self.za.free_pages(Pfn(h.pfn), Order(h.order));
        let g1 = self.drain_gen.load(Ordering::Acquire);
        if g0 % 2 == 1 || g0 != g1 {
            self.n.frees_during_drain.fetch_add(1, Ordering::Relaxed);
        }
        if my_signals() != sig0 {
            self.n.signalled_frees.fetch_add(1, Ordering::Relaxed);
        }
        if os_cpu() != cpu0 {
            self.n.migrated_frees.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// A block the harness saw refused as a tail page is free after all (polled:
    /// a flush merging a neighbour hides heads for a moment).
    fn confirm_free(&self, pfn: Pfn, order: Order) {
        for _ in 0..1000 {
            match self.za.frame_state(pfn) {
                Some(
                    FrameState::Free { .. } | FrameState::PerCpu { .. } | FrameState::Frozen { .. },
                ) => return,
                _ if in_free_buddy_block(self.za, pfn) => return,
                _ => thread::yield_now(),
            }
        }
        self.ledger.violation(format!(
            "{pfn} order {order}: refused as a tail page, and not free either: {:?}",
            self.za.frame_state(pfn)
        ));
    }

    /// Thread `side` of pair `p`.
    fn racer(&self, p: usize, side: usize, rounds: u64, seed: u64) {
        let i = 2 * p + side;
        let tag = (i + 1) as u8;
        self.targets.register(i);
        let _leaving = Leaving {
            targets: &self.targets,
            i,
        };
        let finished = Finished(&self.finished);
        let pair = &self.pairs[p];
        let mut rng = Rng::new(seed);
        let mut solo: Vec<Held> = Vec::with_capacity(SOLO_PER_ROUND);
        let mut mine: Vec<Raced> = Vec::with_capacity(RACED_PER_ROUND);
        for _ in 0..rounds {
            // Allocation phase: nothing is freed anywhere meanwhile.
            if side == 0 {
                for k in 0..RACED_PER_ROUND {
                    pair.arrived[k].store(0, Ordering::Relaxed);
                    pair.returned[k].store(0, Ordering::Relaxed);
                    let v = self.alloc_block(&mut rng, tag).map_or(0, |h| {
                        // Given up before the race: whichever free wins, the
                        // ledger has no owner for it.
                        self.ledger.release(h);
                        h.encode()
                    });
                    pair.blocks[k].store(v, Ordering::Relaxed);
                }
            }
            solo.extend((0..SOLO_PER_ROUND).filter_map(|_| self.alloc_block(&mut rng, tag)));
            self.start.wait();
            // Free phase: nothing is allocated anywhere meanwhile, so a block freed
            // by the winner stays free (whole, or inside a merged free block).
            mine.clear();
            for k in 0..RACED_PER_ROUND {
                let v = pair.blocks[k].load(Ordering::Relaxed);
                if v == 0 {
                    mine.push(Raced {
                        result: Ok(()),
                        other_in_flight: false,
                    });
                    continue;
                }
                if k % 3 == side && !solo.is_empty() {
                    let h = solo.pop().unwrap();
                    self.ledger.release(h);
                    if let Err(e) = self.free(h) {
                        self.ledger
                            .violation(format!("solo free of held block {h:?}: {e:?}"));
                    }
                    self.n.solo_frees.fetch_add(1, Ordering::Relaxed);
                }
                meet(&pair.arrived[k], 2);
                let other_in_flight = pair.returned[k].load(Ordering::Acquire) == 0;
                let result = self.free(Held::decode(v));
                pair.returned[k].fetch_add(1, Ordering::AcqRel);
                if let Err(FreeError::TailPage(p)) = result {
                    // Nothing is allocated during this phase: the block must be free.
                    self.confirm_free(p, Order(Held::decode(v).order));
                }
                mine.push(Raced {
                    result,
                    other_in_flight,
                });
            }
            for h in solo.drain(..) {
                self.ledger.release(h);
                if let Err(e) = self.free(h) {
                    self.ledger
                        .violation(format!("solo free of held block {h:?}: {e:?}"));
                }
                self.n.solo_frees.fetch_add(1, Ordering::Relaxed);
            }
            *pair.results[side].lock().unwrap() = std::mem::take(&mut mine);
            self.end.wait();
            if side == 0 {
                self.judge(pair);
            }
            self.progress.fetch_add(1, Ordering::Relaxed);
        }
        drop(finished);
        wait_for(&self.release);
    }

    /// Both sides have freed every raced block of the round: exactly one free of
    /// each won, the other was told the block is already free.
    fn judge(&self, pair: &Pair) {
        let r0 = std::mem::take(&mut *pair.results[0].lock().unwrap());
        let r1 = std::mem::take(&mut *pair.results[1].lock().unwrap());
        if r0.len() != RACED_PER_ROUND || r1.len() != RACED_PER_ROUND {
            self.ledger.violation(format!(
                "a round's results: {} and {} of {RACED_PER_ROUND}",
                r0.len(),
                r1.len()
            ));
            return;
        }
        for (k, (x, y)) in r0.iter().zip(&r1).enumerate() {
            let v = pair.blocks[k].load(Ordering::Relaxed);
            if v == 0 {
                continue;
            }
            let h = Held::decode(v);
            let pfn = Pfn(h.pfn);
            self.n.races.fetch_add(1, Ordering::Relaxed);
            if x.other_in_flight && y.other_in_flight {
                self.n.overlapping.fetch_add(1, Ordering::Relaxed);
            }
            let (a, b) = (&x.result, &y.result);
            let loser = match (a, b) {
                (Ok(()), Err(e)) => {
                    self.n.won_by_side[0].fetch_add(1, Ordering::Relaxed);
                    e
                }
                (Err(e), Ok(())) => {
                    self.n.won_by_side[1].fetch_add(1, Ordering::Relaxed);
                    e
                }
                _ => {
                    self.ledger.violation(format!(
                        "racing frees of {pfn} order {}: results {a:?} and {b:?}, not \
                         exactly one Ok",
                        h.order
                    ));
                    continue;
                }
            };
            // The block is free when the loser looks: on a stack or list (`Pcp`),
            // being freed (`Frozen`), on the buddy lists, or merged into a larger
            // free block; `error.rs` names all of these `AlreadyFree`. `TailPage`
            // would mean a free block was not found, `WrongOrder` or `Busy` that the
            // block looked allocated: neither is right here.
            match *loser {
                FreeError::AlreadyFree(p) if p == pfn => {
                    self.n.already_free.fetch_add(1, Ordering::Relaxed);
                }
                e => self.ledger.violation(format!(
                    "losing free of {pfn} order {}: {e:?} ({e}), expected AlreadyFree({pfn})",
                    h.order
                )),
            }
        }
    }
}

/// `drain_all_pages` back to back until `stop`, with the generation odd while
/// one runs.
fn drain_loop(r: &Races<'_>, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        r.drain_gen.fetch_add(1, Ordering::AcqRel);
        r.za.drain_all_pages();
        r.drain_gen.fetch_add(1, Ordering::AcqRel);
        r.n.drains.fetch_add(1, Ordering::Relaxed);
        thread::yield_now();
    }
}

#[test]
fn rseq_double_free_races() {
    const NAME: &str = "rseq_double_free_races";
    let _machine = machine();
    install_sigusr1_handler();
    let t0 = Instant::now();
    let cpus = allowed_cpus();
    let seed = seed() ^ 0x0064_6f75_626c_6521;
    let rounds = BASE_ROUNDS * scale();
    let za = new_allocator();
    report_fast_path(NAME, &za);
    let threads = 2 * PAIRS;
    let races = Races {
        za: &za,
        ledger: Ledger::new(&za),
        pairs: (0..PAIRS)
            .map(|_| Pair {
                blocks: (0..RACED_PER_ROUND).map(|_| AtomicU64::new(0)).collect(),
                arrived: (0..RACED_PER_ROUND).map(|_| AtomicU32::new(0)).collect(),
                returned: (0..RACED_PER_ROUND).map(|_| AtomicU32::new(0)).collect(),
                results: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
            })
            .collect(),
        targets: Targets::new(threads),
        start: Barrier::new(threads),
        end: Barrier::new(threads),
        progress: AtomicU64::new(0),
        finished: AtomicU64::new(0),
        release: AtomicBool::new(false),
        drain_gen: AtomicU64::new(0),
        n: RaceCounts::default(),
    };
    let noise = NoiseCounts::default();
    let stop_noise = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let phase = Mutex::new("the races");
    let signals0 = SIGNALS_HANDLED.load(Ordering::Relaxed);
    thread::scope(|s| {
        s.spawn(|| watchdog(NAME, &races.progress, &done, &phase));
        let flags = [&stop_noise, &races.release, &done];
        let _on_exit = SetOnDrop(&flags);
        let mut racers = Vec::new();
        for p in 0..PAIRS {
            for side in 0..2 {
                let r = &races;
                let rseed = seed ^ ((2 * p + side + 1) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                racers.push(s.spawn(move || r.racer(p, side, rounds, rseed)));
            }
        }
        let (r, n, cpus) = (&races, &noise, &cpus[..]);
        let noisy = [
            s.spawn(|| migrator(&r.targets, cpus, &stop_noise, n, seed ^ 0x6d69)),
            s.spawn(|| signaller(&r.targets, &stop_noise, n, seed ^ 0x7369)),
            s.spawn(|| drain_loop(r, &stop_noise)),
        ];
        while races.finished.load(Ordering::Acquire) < threads as u64 {
            thread::sleep(Duration::from_millis(2));
        }
        set_phase(
            &phase,
            &races.progress,
            "joining the migrator, signaller and drainer",
        );
        stop_noise.store(true, Ordering::Release);
        for h in noisy {
            h.join().expect("a noise thread panicked");
            races.progress.fetch_add(1, Ordering::Relaxed);
        }
        set_phase(&phase, &races.progress, "joining the racers");
        races.release.store(true, Ordering::Release);
        for h in racers {
            h.join().expect("a racing thread panicked");
            races.progress.fetch_add(1, Ordering::Relaxed);
        }
        set_phase(&phase, &races.progress, "the checks at the end");
        final_checks(NAME, &za, &races.ledger);
    });
    let n = &races.n;
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let handled = SIGNALS_HANDLED.load(Ordering::Relaxed) - signals0;
    println!(
        "{NAME}: {PAIRS} pairs x {rounds} rounds x {RACED_PER_ROUND} blocks on CPUs {cpus:?}, \
         seed {seed:#x}, {:.2?}",
        t0.elapsed()
    );
    println!(
        "{NAME}: double-free races {} ({} overlapping in time; won by side 0: {}, side 1: {}), \
         losers told AlreadyFree {}; solo frees {}; frees overlapping a drain_all_pages {} \
         ({} drains); alloc NoMemory {}",
        ld(&n.races),
        ld(&n.overlapping),
        ld(&n.won_by_side[0]),
        ld(&n.won_by_side[1]),
        ld(&n.already_free),
        ld(&n.solo_frees),
        ld(&n.frees_during_drain),
        ld(&n.drains),
        ld(&n.alloc_failures)
    );
    println!(
        "{NAME}: re-pins {} ({} refused), frees that changed CPU {}; signals sent {}, handled \
         {handled}, frees a signal landed in {}",
        ld(&noise.repins),
        ld(&noise.repin_failures),
        ld(&n.migrated_frees),
        ld(&noise.signals_sent),
        ld(&n.signalled_frees)
    );
    assert!(ld(&n.races) > 0, "{NAME}: no race ran");
    assert_eq!(
        ld(&n.races),
        ld(&n.already_free),
        "{NAME}: every race has exactly one loser"
    );
}

// -----------------------------------------------------------------------------
// Test 3: a pinned thread's frees go through its CPU's stack
// -----------------------------------------------------------------------------

#[test]
fn rseq_pinned_cpu_uses_its_stack() {
    const NAME: &str = "rseq_pinned_cpu_uses_its_stack";
    let _machine = machine();
    let za = new_allocator();
    report_fast_path(NAME, &za);
    let ledger = Ledger::new(&za);
    let seen: Vec<String> = allowed_cpus()
        .iter()
        .take(8)
        .map(|&cpu| pinned_cpu_check(NAME, &za, &ledger, cpu))
        .collect();
    println!("{NAME}: {}", seen.join(" "));
    final_checks(NAME, &za, &ledger);
}
