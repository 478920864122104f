//! Interrupts that allocate: a signal stands in for a timer interrupt.
//!
//! A kernel's timer interrupt may allocate and free pages (`Gfp::ATOMIC`) on a
//! CPU whose interrupted code is inside the allocator. Here `SIGALRM`, raised at
//! 10 kHz or more by an interval timer, is that interrupt: its handler allocates
//! and frees blocks of orders 0 to 10 while worker threads allocate and free in a
//! loop. The allocator is built with a `Platform` whose interrupt guard blocks
//! the signal (`pthread_sigmask`), as a kernel's disables interrupts, so the
//! handler never runs on a thread that holds an allocator lock. Without that
//! guard the handler sooner or later waits for a zone lock its own thread holds
//! and the process hangs (`an_unguarded_allocator_deadlocks_in_the_handler`
//! shows it does).
//!
//! The run lasts 30 s (`ZONEALLOC_IRQ_SECS` to change it); a watchdog fails the
//! test if no thread makes progress for 10 s. At the end every block is freed and
//! the ledger must be exact: every frame free, the invariants clean.

#![cfg(all(target_os = "linux", not(miri), not(loom)))]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use zonealloc::{AllocError, Config, FreeError, Gfp, Order, Pfn, Platform, ZoneAllocator};

/// The interrupt guard of this test's "kernel": blocks `SIGALRM` on the calling
/// thread, as `local_irq_save` disables interrupts on the calling CPU.
#[derive(Debug)]
struct SignalGuard;

fn sigalrm_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGALRM);
        set
    }
}

impl Platform for SignalGuard {
    fn irq_save(&self) -> usize {
        let set = sigalrm_set();
        // SAFETY: a valid set and an out-parameter for the old mask.
        unsafe {
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            usize::from(libc::sigismember(&old, libc::SIGALRM) == 1)
        }
    }

    fn irq_restore(&self, was_blocked: usize) {
        if was_blocked == 0 {
            let set = sigalrm_set();
            // SAFETY: a valid set; no old mask wanted.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        }
    }

    fn cpu_id(&self) -> usize {
        // SAFETY: no preconditions.
        unsafe { libc::sched_getcpu() }.max(0) as usize
    }
}

static GUARD: SignalGuard = SignalGuard;

/// The allocator the handler uses (set while a run is on).
static ZA: AtomicPtr<ZoneAllocator> = AtomicPtr::new(std::ptr::null_mut());
/// Blocks the handler holds, in slots: `FULL | pfn << 8 | order`, 0 for none.
const HANDLER_SLOTS: usize = 64;
/// A slot's mark that it holds a block (frame 0 at order 0 is a block too).
const FULL: u64 = 1 << 63;
static HELD: [AtomicU64; HANDLER_SLOTS] = [const { AtomicU64::new(0) }; HANDLER_SLOTS];
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);
static HANDLER_ALLOCS: AtomicU64 = AtomicU64::new(0);
static HANDLER_FAILS: AtomicU64 = AtomicU64::new(0);
static HANDLER_BAD: AtomicU64 = AtomicU64::new(0);
static PROGRESS: AtomicU64 = AtomicU64::new(0);
/// The handler calls `alloc_pages_nolock`/`free_pages_nolock` instead.
static NOLOCK: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// A small random state per thread, usable from the handler (no destructor,
    /// constant initialiser: a plain thread-local slot).
    static RNG: Cell<u64> = const { Cell::new(0) };
}

fn next_rand() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            x = 0x9e37_79b9_7f4a_7c15 ^ (&x as *const u64 as u64);
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x
    })
}

/// Orders 0 to 10, mostly small, as interrupt-time allocations are.
fn random_order(r: u64) -> Order {
    let k = r % 100;
    Order(match k {
        0..=59 => 0,
        60..=74 => 1,
        75..=84 => 2,
        85..=91 => 3,
        92..=94 => 4,
        95 => 5,
        96 => 6,
        97 => 7,
        98 => 9,
        _ => 10,
    })
}

/// Handlers running now (the end of a run waits for them).
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_alarm(_: libc::c_int) {
    // SeqCst, as the load of `ZA` and the end of a run's store and wait: a
    // handler that sees the allocator is counted before the run stops waiting.
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    alarm();
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
}

fn alarm() {
    let za = ZA.load(Ordering::SeqCst);
    if za.is_null() {
        return;
    }
    // SAFETY: the pointer is set to a live allocator for the run and cleared (with
    // the timer stopped and every handler finished) before it is dropped.
    let za = unsafe { &*za };
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
    let r = next_rand();
    let slot = &HELD[(r >> 32) as usize % HANDLER_SLOTS];
    // Free what the slot held, then allocate into it.
    let nolock = NOLOCK.load(Ordering::Relaxed);
    let old = slot.swap(0, Ordering::AcqRel);
    if old != 0 {
        let (pfn, order) = (Pfn((old & !FULL) >> 8), Order(old as u8));
        let freed = if nolock {
            za.free_pages_nolock(pfn, order)
        } else {
            za.free_pages(pfn, order)
        };
        if freed.is_err() {
            HANDLER_BAD.fetch_add(1, Ordering::Relaxed);
        }
    }
    let order = random_order(r);
    let got = if nolock {
        za.alloc_pages_nolock(Gfp::ATOMIC, None, order)
    } else {
        za.alloc_pages(Gfp::ATOMIC, order)
    };
    match got {
        Ok(p) => {
            HANDLER_ALLOCS.fetch_add(1, Ordering::Relaxed);
            let prev = slot.swap(FULL | p.0 << 8 | order.0 as u64, Ordering::AcqRel);
            if prev != 0 {
                // Another thread's handler filled the slot meanwhile.
                if za
                    .free_pages_nolock(Pfn((prev & !FULL) >> 8), Order(prev as u8))
                    .is_err()
                {
                    HANDLER_BAD.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(AllocError::NoMemory { .. }) => {
            HANDLER_FAILS.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            HANDLER_BAD.fetch_add(1, Ordering::Relaxed);
        }
    }
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

fn install_handler() {
    // SAFETY: a plain handler, no flags but SA_RESTART, an empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
    }
}

fn set_timer(interval_us: i64) {
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: interval_us as libc::suseconds_t,
    };
    let it = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: a valid timer value; no old value wanted.
    unsafe {
        assert_eq!(
            libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()),
            0
        )
    };
}

fn run_secs() -> u64 {
    std::env::var("ZONEALLOC_IRQ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// Allocates and frees in a loop until `stop`: blocks of orders 0 to 10 held in a
/// window, a free at the wrong order tried now and then (refused).
fn worker(za: &ZoneAllocator, stop: &AtomicBool) -> (u64, u64) {
    let mut held: Vec<(Pfn, Order)> = Vec::with_capacity(256);
    let (mut ops, mut refused) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let r = next_rand();
        if held.len() < 200 && (r & 1 == 0 || held.is_empty()) {
            let order = random_order(r >> 8);
            if let Ok(p) = za.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, order) {
                held.push((p, order));
            }
        } else {
            let (p, o) = held.swap_remove((r >> 16) as usize % held.len());
            // A second free while the block is still out is refused. (Once it
            // is freed, another thread or a handler may take it again at once,
            // and a second free would then be theirs: not tried.)
            if r.is_multiple_of(64) {
                match za.free_pages(p, Order(o.0 + 1)) {
                    Err(FreeError::WrongOrder { .. } | FreeError::Misaligned { .. })
                    | Err(FreeError::InvalidOrder(_)) => refused += 1,
                    other => panic!("a free of {p:?} at the wrong order answered {other:?}"),
                }
            }
            za.free_pages(p, o).expect("a held block frees");
        }
        ops += 1;
        if ops % 1024 == 0 {
            PROGRESS.fetch_add(1, Ordering::Relaxed);
        }
    }
    for (p, o) in held {
        za.free_pages(p, o).expect("a held block frees");
    }
    (ops, refused)
}

/// Runs workers and the handler for `secs` over an allocator with `platform`,
/// the handler calling the try-only entry points with `nolock`; exits the
/// process with `HUNG` if no thread makes progress for 10 s.
fn run(platform: Option<&'static dyn Platform>, secs: u64, nolock: bool) {
    NOLOCK.store(nolock, Ordering::Relaxed);
    let nr_cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let config = Config {
        nr_cpus,
        platform,
        ..Config::with_bytes(256 << 20)
    };
    let za = Box::new(ZoneAllocator::new(config).unwrap());
    if platform.is_some() {
        assert!(
            !za.uses_cpu_stacks(),
            "with a platform, calls take the locked paths"
        );
    }
    ZA.store(&*za as *const ZoneAllocator as *mut _, Ordering::Release);
    install_handler();
    let stop = AtomicBool::new(false);
    let done = AtomicUsize::new(0);
    let threads = nr_cpus * 2;
    let start = Instant::now();
    // 25 µs asked (40 kHz): signals that find one pending merge, and at least
    // 10 kHz must arrive.
    set_timer(25);
    // The watchdog and this thread never take the "interrupt": a handler stuck
    // on one of them could not report the hang.
    // SAFETY: a valid set; no old mask wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &sigalrm_set(), std::ptr::null_mut()) };
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    // Workers take the signal (the mask is inherited: clear it).
                    // SAFETY: a valid set; no old mask wanted.
                    unsafe {
                        libc::pthread_sigmask(
                            libc::SIG_UNBLOCK,
                            &sigalrm_set(),
                            std::ptr::null_mut(),
                        )
                    };
                    let r = worker(&za, &stop);
                    done.fetch_add(1, Ordering::Relaxed);
                    r
                })
            })
            .collect();
        // The watchdog: progress every 10 s at the latest, or the run has hung.
        let mut last = PROGRESS.load(Ordering::Relaxed);
        let mut last_change = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(200));
            let now = PROGRESS.load(Ordering::Relaxed);
            if now != last {
                last = now;
                last_change = Instant::now();
            } else if last_change.elapsed() > Duration::from_secs(10) {
                eprintln!("no progress for 10 s: the allocator hangs");
                std::process::exit(HUNG);
            }
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    set_timer(0);
    let elapsed = start.elapsed().as_secs_f64();
    // Every handler has returned once the timer is off and the threads joined; the
    // slots hold what the handlers still have.
    // A signal may still be on its way to a thread that takes it (the test
    // harness's own threads do): handlers that saw the allocator finish first.
    ZA.store(std::ptr::null_mut(), Ordering::SeqCst);
    while IN_HANDLER.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    for slot in &HELD {
        let v = slot.swap(0, Ordering::AcqRel);
        if v != 0 {
            za.free_pages(Pfn((v & !FULL) >> 8), Order(v as u8))
                .unwrap();
        }
    }
    let interrupts = INTERRUPTS.load(Ordering::Relaxed);
    let ops: u64 = results.iter().map(|r| r.0).sum();
    let refused: u64 = results.iter().map(|r| r.1).sum();
    println!(
        "{secs} s: {interrupts} interrupts ({:.1} kHz), {} allocations in them ({} failed), \
         {ops} worker operations on {threads} threads, {refused} frees at a wrong order refused",
        interrupts as f64 / elapsed / 1e3,
        HANDLER_ALLOCS.load(Ordering::Relaxed),
        HANDLER_FAILS.load(Ordering::Relaxed),
    );
    assert_eq!(
        HANDLER_BAD.load(Ordering::Relaxed),
        0,
        "a handler's call failed"
    );
    assert!(
        interrupts as f64 >= 0.8 * 10_000.0 * secs as f64,
        "fewer than 10 kHz of interrupts: {interrupts} in {secs} s"
    );
    za.drain_all_pages();
    let check = za.check_invariants();
    assert_eq!(
        za.nr_free_pages(),
        za.managed_pages(),
        "a frame is lost ({} on per-CPU lists; invariants: {check:?})",
        za.nr_pcp_pages()
    );
    check.unwrap();
}

/// The exit status of a run whose watchdog saw it hang.
const HUNG: i32 = 42;

#[test]
fn interrupts_that_allocate_never_hang_and_lose_nothing() {
    run(Some(&GUARD), run_secs(), false);
}

/// Runs this test binary again with `ZONEALLOC_IRQ_CHILD=mode`, filtered to
/// `test`, and returns its exit code, killing it after 120 s.
fn child(test: &str, mode: &str) -> Option<i32> {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("ZONEALLOC_IRQ_CHILD", mode)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the child run neither finished nor reported its hang in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The try-only entry points need no interrupt guard: with none, a handler
/// that allocates and frees only through `alloc_pages_nolock` and
/// `free_pages_nolock` never waits for a lock its own thread holds (in a child
/// process, as the run below, which hangs with the ordinary calls).
#[test]
fn try_only_calls_need_no_guard() {
    if std::env::var("ZONEALLOC_IRQ_CHILD").as_deref() == Ok("nolock") {
        run(None, run_secs().min(15), true);
        return;
    }
    assert_eq!(child("try_only_calls_need_no_guard", "nolock"), Some(0));
}

/// The same run with no interrupt guard, in a child process: it must hang (the
/// handler waits for a lock its own thread holds), which shows that the guarded
/// run above passes because of the guard, not because the window is too small
/// to hit.
#[test]
fn an_unguarded_allocator_deadlocks_in_the_handler() {
    if std::env::var("ZONEALLOC_IRQ_CHILD").as_deref() == Ok("unguarded") {
        run(None, 60, false);
        return;
    }
    assert_eq!(
        child(
            "an_unguarded_allocator_deadlocks_in_the_handler",
            "unguarded"
        ),
        Some(HUNG),
        "the unguarded run was expected to hang"
    );
}
