//! The pinned fast path: threads that claim a CPU each (`LinuxThreads::pin`)
//! allocate and free through their CPU's stacks with no lock, while other
//! threads drain every CPU (stopping the stacks through `membarrier`), free
//! blocks across CPUs, and a signal handler on the pinned threads allocates
//! through the same token (an interrupt of a section takes the lists). The
//! ledger must be exact and no block handed out twice.

#![cfg(all(target_os = "linux", not(miri), not(loom)))]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use zonealloc::{Config, Gfp, LinuxThreads, Order, Pfn, ZoneAllocator};

static THREADS: LinuxThreads = LinuxThreads;

/// Claims `cpu` for this thread, waiting while another test of this file holds it.
fn claim(cpu: usize) -> zonealloc::PinnedThread {
    loop {
        match LinuxThreads::pin(cpu) {
            Ok(p) => return p,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Err(e) => panic!("cannot pin to CPU {cpu}: {e}"),
        }
    }
}

fn pinned_za(bytes: u64) -> ZoneAllocator {
    let nr_cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let za = ZoneAllocator::new(Config {
        nr_cpus,
        platform: Some(&THREADS),
        ..Config::with_bytes(bytes)
    })
    .unwrap();
    assert!(
        !za.uses_cpu_stacks(),
        "no restartable sequences with a platform"
    );
    za
}

#[test]
fn pinned_threads_allocate_through_their_stacks_and_drains_reach_them() {
    let za = pinned_za(128 << 20);
    if !za.pinned_available() {
        eprintln!("skipped: membarrier(PRIVATE_EXPEDITED) is refused here");
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = AtomicBool::new(false);
    // Blocks handed from one thread to another to free.
    let exchange: Mutex<Vec<(Pfn, Order)>> = Mutex::new(Vec::new());
    let ops = AtomicU64::new(0);
    let drains = AtomicU64::new(0);
    let seen = Mutex::new(HashSet::new());
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (za, stop, exchange, ops, seen) = (&za, &stop, &exchange, &ops, &seen);
            s.spawn(move || {
                let pinned = claim(cpu);
                let pin = pinned.token();
                let mut held: Vec<(Pfn, Order)> = Vec::new();
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ cpu as u64;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 200_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let order = Order([0, 0, 0, 0, 1, 2, 3, 9][(x >> 40) as usize % 8]);
                    if held.len() < 64 && x & 1 == 0 {
                        if let Ok(p) = za.alloc_pages_pinned(pin, Gfp::KERNEL | Gfp::NORETRY, order)
                        {
                            assert!(
                                seen.lock().unwrap().insert(p),
                                "{p:?} handed out while another holds it"
                            );
                            held.push((p, order));
                        }
                    } else if let Some((p, o)) = held.pop() {
                        if x % 8 == 1 {
                            exchange.lock().unwrap().push((p, o));
                        } else {
                            seen.lock().unwrap().remove(&p);
                            za.free_pages_pinned(pin, p, o).unwrap();
                        }
                    }
                    // Free what another thread handed over, on this CPU.
                    if x % 16 == 3 {
                        if let Some((p, o)) = exchange.lock().unwrap().pop() {
                            seen.lock().unwrap().remove(&p);
                            za.free_pages_pinned(pin, p, o).unwrap();
                        }
                    }
                    n += 1;
                }
                for (p, o) in held {
                    seen.lock().unwrap().remove(&p);
                    za.free_pages_pinned(pin, p, o).unwrap();
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        // A drainer: stops every CPU's stacks again and again.
        let (za, stop, drains) = (&za, &stop, &drains);
        s.spawn(move || {
            for _ in 0..300 {
                za.drain_all_pages();
                drains.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    for (p, o) in exchange.into_inner().unwrap() {
        za.free_pages(p, o).unwrap();
    }
    println!(
        "{} pinned operations on {cpus} CPUs beside {} drains",
        ops.load(Ordering::Relaxed),
        drains.load(Ordering::Relaxed)
    );
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
    za.check_invariants().unwrap();
}

static SIG_ZA: std::sync::atomic::AtomicPtr<ZoneAllocator> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static SIG_HELD: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];
static SIG_RUNS: AtomicU64 = AtomicU64::new(0);
static IN_SIG: AtomicUsize = AtomicUsize::new(0);
const FULL: u64 = 1 << 63;

extern "C" fn on_signal(_: libc::c_int) {
    IN_SIG.fetch_add(1, Ordering::SeqCst);
    let za = SIG_ZA.load(Ordering::SeqCst);
    if !za.is_null() {
        // SAFETY: set to a live allocator while the signals come.
        let za = unsafe { &*za };
        // The interrupted thread's CPU: it claimed one, and the handler runs on
        // the same thread, so it nests inside (or between) that thread's calls.
        let cpu = THREADS_CPU.with(|c| c.get());
        if cpu != usize::MAX {
            // SAFETY: this handler runs on the thread holding the claim for
            // `cpu` and runs to its end before that thread goes on.
            let pin = unsafe { zonealloc::PinnedCpu::new(cpu) };
            let n = SIG_RUNS.fetch_add(1, Ordering::Relaxed) as usize;
            let slot = &SIG_HELD[n % SIG_HELD.len()];
            let old = slot.swap(0, Ordering::AcqRel);
            if old != 0 {
                za.free_pages_pinned(&pin, Pfn(old & !FULL), Order(0))
                    .unwrap();
            }
            if let Ok(p) = za.alloc_pages_pinned(&pin, Gfp::ATOMIC, Order(0)) {
                let prev = slot.swap(FULL | p.0, Ordering::AcqRel);
                if prev != 0 {
                    za.free_pages_pinned(&pin, Pfn(prev & !FULL), Order(0))
                        .unwrap();
                }
            }
        }
    }
    IN_SIG.fetch_sub(1, Ordering::SeqCst);
}

thread_local! {
    static THREADS_CPU: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// A signal handler that uses the pinned entry points of the thread it
/// interrupts: a section it breaks into is left alone (the handler takes the
/// lists), so nothing is lost or handed out twice.
#[test]
fn a_handler_interrupting_a_pinned_section_takes_the_lists() {
    let za = Box::new(pinned_za(64 << 20));
    if !za.pinned_available() {
        return;
    }
    SIG_ZA.store(&*za as *const ZoneAllocator as *mut _, Ordering::SeqCst);
    // SAFETY: a plain handler, SA_RESTART, empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let cpus = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(2);
    let stop = AtomicBool::new(false);
    let tids: Mutex<Vec<libc::pthread_t>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (za, stop, tids) = (&za, &stop, &tids);
            s.spawn(move || {
                let pinned = claim(cpu);
                THREADS_CPU.with(|c| c.set(cpu));
                // SAFETY: no preconditions.
                tids.lock().unwrap().push(unsafe { libc::pthread_self() });
                let pin = pinned.token();
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..32 {
                        held.push(za.alloc_pages_pinned(pin, Gfp::KERNEL, Order(0)).unwrap());
                    }
                    for p in held.drain(..) {
                        za.free_pages_pinned(pin, p, Order(0)).unwrap();
                    }
                }
                // No more signals use this thread's CPU.
                THREADS_CPU.with(|c| c.set(usize::MAX));
            });
        }
        let (stop, tids) = (&stop, &tids);
        s.spawn(move || {
            while tids.lock().unwrap().len() < cpus {
                std::thread::yield_now();
            }
            let tids = tids.lock().unwrap().clone();
            for i in 0..200_000u32 {
                // SAFETY: the threads live until `stop` is set.
                unsafe { libc::pthread_kill(tids[i as usize % tids.len()], libc::SIGUSR1) };
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    SIG_ZA.store(std::ptr::null_mut(), Ordering::SeqCst);
    while IN_SIG.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    for slot in &SIG_HELD {
        let v = slot.swap(0, Ordering::AcqRel);
        if v != 0 {
            za.free_pages(Pfn(v & !FULL), Order(0)).unwrap();
        }
    }
    println!(
        "{} handler runs on pinned threads",
        SIG_RUNS.load(Ordering::Relaxed)
    );
    assert!(SIG_RUNS.load(Ordering::Relaxed) > 1000);
    za.drain_all_pages();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
    za.check_invariants().unwrap();
}

#[test]
fn a_cpu_is_claimed_by_one_thread_at_a_time() {
    let a = claim(0);
    std::thread::scope(|s| {
        s.spawn(|| assert!(LinuxThreads::pin(0).is_err()));
    });
    // One claim a thread.
    assert!(LinuxThreads::pin(1).is_err());
    drop(a);
    std::thread::scope(|s| {
        s.spawn(|| assert!(LinuxThreads::pin(0).is_ok()));
    });
}
