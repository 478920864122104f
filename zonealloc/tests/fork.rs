//! `fork()` while other threads are inside the allocator.
//!
//! The parent runs three threads that allocate and free orders 0 to 3 and 9 on
//! one allocator (so blocks sit on the per-CPU lists and stacks, frozen between a
//! free's compare-and-swap and its push, or popped and not yet handed out) and a
//! fourth that calls `drain_all_pages` in a loop (so CPUs' stacks are stopped and
//! pcp and zone locks held), and forks `FORKS` children from the main thread.
//! Each child, under `alarm(10)` (a hang kills it), allocates and frees, drains,
//! runs `check_invariants()` and checks the ledger: the parent's threads owned
//! some blocks at the fork, which the child cannot free, so what it checks is
//! that every managed page is either allocated or free, and that the free ones
//! are exactly what the counters say. It exits 0. The parent waits for each
//! child, asserts that it exited 0, then stops its threads, frees everything and
//! checks its own exact ledger.
//!
//! `ZONEALLOC_FORK_CHILDREN=N` changes the number of children; CI also runs the
//! test with glibc's rseq registration off (`GLIBC_TUNABLES=glibc.pthread.rseq=0`),
//! where the per-CPU lists take every call.

#![cfg(target_os = "linux")]

#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zonealloc::{Config, Gfp, KswapdWorker, Order, PageReportingWorker, Pfn, ZoneAllocator};

const ORDERS: [u8; 5] = [0, 1, 2, 3, 9];

fn children() -> usize {
    std::env::var("ZONEALLOC_FORK_CHILDREN")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// Forks; runs `child` in the child and exits with its result (1 on a panic),
/// never returning there. Returns the child's pid in the parent.
fn fork_child(child: impl FnOnce() -> Result<(), String>) -> libc::pid_t {
    // SAFETY: the child calls only the allocator (made fork-safe by its
    // handlers), the heap (glibc's malloc handles fork), and `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid > 0 {
        return pid;
    }
    // SAFETY: plain system calls.
    unsafe { libc::alarm(10) };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child));
    let code = match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("fork child: {e}");
            2
        }
        Err(_) => 1,
    };
    // SAFETY: ends the child without running the parent's exit handlers.
    unsafe { libc::_exit(code) }
}

/// Waits for `pid`; its exit status, or a description of how it ended.
fn wait_child(pid: libc::pid_t) -> Result<(), String> {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is ours to write.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid {
        return Err(format!("waitpid: {r}"));
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else if libc::WIFSIGNALED(status) {
        Err(format!("child killed by signal {}", libc::WTERMSIG(status)))
    } else {
        Err(format!("child exited with {}", libc::WEXITSTATUS(status)))
    }
}

/// One step of a random walk over `held`: allocates a block of one of
/// `ORDERS` when `alloc` (a failed allocation is skipped), else frees a random
/// held block, if any.
fn step(
    za: &ZoneAllocator,
    rng: &mut Rng,
    held: &mut Vec<(Pfn, Order)>,
    alloc: bool,
) -> Result<(), String> {
    if alloc {
        let o = Order(ORDERS[rng.below(ORDERS.len() as u64) as usize]);
        if let Ok(p) = za.alloc_pages(Gfp::KERNEL, o) {
            held.push((p, o));
        }
    } else if !held.is_empty() {
        let k = rng.below(held.len() as u64) as usize;
        let (p, o) = held.swap_remove(k);
        za.free_pages(p, o)
            .map_err(|e| format!("free {p:?}: {e:?}"))?;
    }
    Ok(())
}

/// A violation with the states of the 32 frames around it.
fn around(za: &ZoneAllocator, v: zonealloc::InvariantViolation) -> String {
    let p = v.pfn.map_or(0, |p| p.0);
    let frames: Vec<String> = (p.saturating_sub(16) & !15..(p & !15) + 16)
        .map(|q| format!("{q:#x}:{:?}", za.frame_state(Pfn(q))))
        .collect();
    format!("{v:?} {frames:?}")
}

/// What a child does: checks the allocator as the fork left it, allocates and
/// frees, drains, and checks it again.
fn child_work(za: &ZoneAllocator) -> Result<(), String> {
    // The allocator as the fork left it, before the child touches it: a block
    // a parent thread held between two states shows here, not hidden by what
    // the child does next.
    za.check_invariants()
        .map_err(|v| format!("at the fork: {}", around(za, v)))?;
    let mut rng = Rng::new(std::process::id() as u64);
    let mut held: Vec<(Pfn, Order)> = Vec::with_capacity(256);
    for _ in 0..2000 {
        let alloc = held.len() < 200 && rng.below(3) != 0;
        step(za, &mut rng, &mut held, alloc)?;
    }
    let mine: u64 = held.iter().map(|&(_, o)| o.nr_pages()).sum();
    za.drain_all_pages();
    let r = za.check_invariants().map_err(|v| around(za, v))?;
    let managed = za.managed_pages();
    if r.allocated_pages + r.free_pages + r.pcp_pages + r.cached_pages != managed {
        return Err(format!("ledger: {r:?}, managed {managed}"));
    }
    if za.nr_free_pages() + r.allocated_pages != managed || r.pcp_pages != 0 {
        return Err(format!(
            "after a drain: free {} + allocated {} != managed {managed} (pcp {})",
            za.nr_free_pages(),
            r.allocated_pages,
            r.pcp_pages
        ));
    }
    if r.allocated_pages < mine {
        return Err(format!(
            "{mine} pages held, {} allocated",
            r.allocated_pages
        ));
    }
    for (p, o) in held {
        za.free_pages(p, o)
            .map_err(|e| format!("free {p:?}: {e:?}"))?;
    }
    za.drain_all_pages();
    let r2 = za.check_invariants().map_err(|v| format!("{v:?}"))?;
    if r2.allocated_pages + mine != r.allocated_pages {
        return Err(format!(
            "freed {mine} pages: allocated {} -> {}",
            r.allocated_pages, r2.allocated_pages
        ));
    }
    Ok(())
}

#[test]
fn children_forked_under_load_find_a_whole_allocator() {
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(64 << 20)).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let (za, stop, ops) = (za.clone(), stop.clone(), ops.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(0x5eed + t);
            let mut held: Vec<(Pfn, Order)> = Vec::with_capacity(512);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let alloc = held.len() < 400 && rng.below(2) == 0;
                step(&za, &mut rng, &mut held, alloc).unwrap();
                n += 1;
            }
            for (p, o) in held {
                za.free_pages(p, o).unwrap();
            }
            ops.fetch_add(n, Ordering::Relaxed);
        }));
    }
    let drains = Arc::new(AtomicU64::new(0));
    {
        let (za, stop, drains) = (za.clone(), stop.clone(), drains.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                za.drain_all_pages();
                drains.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
        }));
    }
    // Let the threads fill their lists first.
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    let n = children();
    let mut failures = Vec::new();
    for i in 0..n {
        let z = za.clone();
        let pid = fork_child(move || child_work(&z));
        if let Err(e) = wait_child(pid) {
            failures.push(format!("child {i}: {e}"));
        }
    }
    let forked = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    println!(
        "fork: {n} children in {:.2} s ({:.1} ms each), per-CPU stacks {}, {} parent ops, {} drains",
        forked.as_secs_f64(),
        forked.as_secs_f64() * 1e3 / n.max(1) as f64,
        if za.uses_cpu_stacks() { "on" } else { "off" },
        ops.load(Ordering::Relaxed),
        drains.load(Ordering::Relaxed),
    );
    assert!(
        failures.is_empty(),
        "{} failed: {failures:#?}",
        failures.len()
    );
    // The parent's own exact ledger: every block freed, nothing lost.
    za.drain_all_pages();
    za.check_invariants().unwrap();
    assert_eq!(za.nr_free_pages(), za.managed_pages());
}

#[test]
fn workers_do_not_survive_a_fork() {
    let za = Arc::new(ZoneAllocator::new(Config::with_bytes(32 << 20)).unwrap());
    let mut kswapd = Some(KswapdWorker::spawn(&za).unwrap());
    let mut reporting = Some(PageReportingWorker::spawn(&za, Duration::from_millis(5)).unwrap());
    assert!(kswapd.as_ref().unwrap().is_running());
    assert!(reporting.as_ref().unwrap().is_running());
    let z = &za;
    let (k, r) = (&mut kswapd, &mut reporting);
    let pid = fork_child(move || {
        let (kswapd, reporting) = (k.take().unwrap(), r.take().unwrap());
        if kswapd.is_running() || reporting.is_running() {
            return Err("a parent's worker says it runs in the child".into());
        }
        // Dropping the handles joins nothing (a join would wait forever) and
        // leaves the child's allocator free to start its own kswapd.
        drop(kswapd);
        drop(reporting);
        let own = KswapdWorker::spawn(z).map_err(|e| format!("{e:?}"))?;
        if !own.is_running() {
            return Err("the child's own kswapd does not run".into());
        }
        drop(own);
        z.check_invariants().map_err(|v| format!("{v:?}"))?;
        Ok(())
    });
    wait_child(pid).unwrap();
    // The parent's workers run on (the child's copies were dropped only there).
    assert!(kswapd.as_ref().unwrap().is_running());
    assert!(reporting.as_ref().unwrap().is_running());
    assert!(
        KswapdWorker::spawn(&za).is_err(),
        "the parent's kswapd slot was cleared"
    );
    drop(kswapd);
    assert!(KswapdWorker::spawn(&za).is_ok());
}
