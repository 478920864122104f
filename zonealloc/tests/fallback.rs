//! The choice between the per-CPU stacks and the per-CPU lists' try-lock path, and
//! the two paths agreeing.
//!
//! The stacks need glibc's rseq registration and the kernel's membarrier; the
//! choice is made once per process. `ZONEALLOC_EXPECT_STACKS=0` (set by CI when it
//! runs the suites with `GLIBC_TUNABLES=glibc.pthread.rseq=0`) and `=1` make the
//! first test check the choice; without it the test only reports it.

use zonealloc::*;

#[path = "support/settled.rs"]
mod support;
use support::settled;

fn za(rseq: bool) -> ZoneAllocator {
    ZoneAllocator::new(Config {
        pcp: PcpConfig {
            rseq,
            ..PcpConfig::default()
        },
        ..Config::with_bytes(32 << 20)
    })
    .unwrap()
}

#[test]
fn the_process_gets_the_path_it_should() {
    let on = za(true).uses_cpu_stacks();
    match std::env::var("ZONEALLOC_EXPECT_STACKS").as_deref() {
        Ok("0") => assert!(!on, "the stacks are on, but glibc registered no rseq area"),
        Ok("1") => assert!(on, "the stacks are off on a system that should have them"),
        _ => println!("per-CPU stacks: {}", if on { "on" } else { "off" }),
    }
    // Whatever the process has, the configuration can turn them off, and a hook
    // or a debug mode that touches pages does too.
    assert!(!za(false).uses_cpu_stacks());
    let hooked = ZoneAllocator::new(Config {
        cpu_id: Some(|| 0),
        ..Config::with_bytes(32 << 20)
    })
    .unwrap();
    assert!(!hooked.uses_cpu_stacks());
    let poisoned = ZoneAllocator::new(Config {
        debug: DebugConfig {
            poison: true,
            ..DebugConfig::default()
        },
        ..Config::with_bytes(32 << 20)
    })
    .unwrap();
    assert!(!poisoned.uses_cpu_stacks());
}

/// The same calls on both paths give the same answers: blocks of every per-CPU
/// order and the pageblock order come back aligned, a second free is refused,
/// frees of the wrong order and of tails are refused, and everything merges back.
#[test]
fn both_paths_answer_alike() {
    for rseq in [true, false] {
        let za = za(rseq);
        let mut held = Vec::new();
        for order in [0u8, 1, 2, 3, 9, 0, 0, 3] {
            let p = za.alloc_pages(Gfp::KERNEL, Order(order)).unwrap();
            assert!(p.is_aligned(Order(order)));
            held.push((p, Order(order)));
        }
        let (p9, _) = held[4];
        assert_eq!(
            za.free_pages(p9, Order(8)),
            Err(FreeError::WrongOrder {
                pfn: p9,
                given: Order(8),
                actual: Order(9)
            })
        );
        assert!(za.free_pages(p9.add(1), Order(0)).is_err(), "a tail");
        for &(p, o) in &held {
            za.free_pages(p, o).unwrap();
            assert_eq!(za.free_pages(p, o), Err(FreeError::AlreadyFree(p)));
            assert!(za.get_page(p).is_err());
        }
        let r = za.check_invariants().unwrap();
        assert_eq!(r.allocated_pages, 0);
        assert_eq!(za.nr_free_pages() + za.nr_pcp_pages(), za.managed_pages());
        settled(&za);
    }
}

/// `put_page` of a block's last reference frees it on the current CPU's stack, as
/// `free_pages` does; references taken with `get_page` keep it allocated until
/// then.
#[test]
fn the_last_put_page_frees_like_free_pages() {
    for rseq in [true, false] {
        let za = za(rseq);
        let p = za.alloc_pages(Gfp::KERNEL, Order(0)).unwrap();
        za.get_page(p).unwrap();
        assert_eq!(za.put_page(p), Ok(false));
        assert_eq!(za.page_count(p), Ok(1));
        assert_eq!(za.put_page(p), Ok(true));
        assert!(matches!(
            za.frame_state(p),
            Some(FrameState::PerCpu { .. } | FrameState::Free { .. })
        ));
        assert_eq!(za.put_page(p), Err(FreeError::AlreadyFree(p)));
        settled(&za);
    }
}
