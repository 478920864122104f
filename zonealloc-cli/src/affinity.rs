//! CPU affinity: which CPUs this process may use, and pinning a thread to one.
//!
//! The only unsafe code of the crate: two libc calls on a `cpu_set_t` owned by the
//! caller's stack frame. Pinning only affects scheduling; the allocator still finds
//! the thread's CPU itself, as it would for any user thread.

#![allow(unsafe_code)]

/// The CPUs this process may run on, ascending (empty if the kernel would not say).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain bits; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is a valid, writable `cpu_set_t` of
    // the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, inside the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`. Returns whether the kernel accepted it.
pub fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: as in `allowed_cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above); `set` is ours.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid `cpu_set_t` of that size.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}
