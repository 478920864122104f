//! zonealloc's C interface: `libzonealloc.a`, `libzonealloc.so` and
//! `include/zonealloc.h`.
//!
//! Every function of the header is an `extern "C"` function here, under the same
//! name, over one `zonealloc_core::ZoneAllocator` per handle. The header is the
//! reference for C callers: what each call does, its errors, which pointers it
//! takes and from which threads. `tests/header.rs` keeps it in step with this
//! crate: the same functions with the same parameter types, the same structs,
//! and the same values for every code and constant.
//!
//! # Conventions
//!
//! * A call returns `ZONEALLOC_OK` (0) or a negative status code; a call that
//!   writes text returns the text's full length or a negative code. Answers go
//!   through out pointers, checked before the call changes anything.
//! * Each error variant of the core (`AllocError`, `FreeError`, `ContigError`,
//!   `ConfigError`) has a code of its own ([`Status`]); its payload is kept as
//!   the calling thread's last error (`zonealloc_last_error`).
//! * No panic crosses the boundary: each body runs in `catch_unwind`, and a panic
//!   answers `ZONEALLOC_ERR_PANIC`.
//! * A handle is `Sync`: any thread may call on it, concurrently, except
//!   `zonealloc_destroy`, which must be the last call. A destroyed handle, NULL
//!   and a misaligned pointer are refused (`ZONEALLOC_ERR_BAD_HANDLE`).
//!
//! # Layers, one module each
//!
//! | module | layer |
//! |---|---|
//! | `consts` | the header's constants, taken from the core |
//! | `status` | status codes, the mapping of every core error variant, the thread's last error |
//! | `handle`, `ptr` | the handle and the guard every call runs in; checks of C pointers, text buffers |
//! | `config` | the C configuration structs, `zonealloc_create*`, `zonealloc_destroy` |
//! | `pages`, `contig` | single blocks and references; contiguous and bulk paths |
//! | `stats`, `errors` | drains, counts, `/proc` texts, `check_invariants`; reading errors |

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

mod config;
mod consts;
mod contig;
mod errors;
mod handle;
mod pages;
mod ptr;
mod stats;
mod status;

pub use config::{
    zonealloc_config, zonealloc_config_init, zonealloc_create, zonealloc_create_bytes,
    zonealloc_destroy, zonealloc_hole, zonealloc_node_config, zonealloc_zone_config,
};
pub use consts::{
    page_shift, zone_type_c_name, BACKINGS, GFP_FLAGS, ZONEALLOC_BACKING_ARENA,
    ZONEALLOC_BACKING_FRAMES, ZONEALLOC_NONE, ZONEALLOC_PFN_NONE, ZONEALLOC_VALUE_NONE,
};
pub use contig::{
    zonealloc_alloc_contig_pages, zonealloc_alloc_contig_range, zonealloc_alloc_pages_bulk,
    zonealloc_free_contig_range, zonealloc_free_pages_bulk,
};
pub use errors::{zonealloc_last_error, zonealloc_last_error_message, zonealloc_strerror};
pub use handle::zonealloc;
pub use pages::{
    zonealloc_alloc_pages, zonealloc_alloc_pages_node, zonealloc_free_pages, zonealloc_get_page,
    zonealloc_page_address, zonealloc_page_count, zonealloc_put_page, zonealloc_split_page,
};
pub use stats::{
    zonealloc_buddyinfo, zonealloc_check_invariants, zonealloc_drain_all_pages,
    zonealloc_drain_local_pages, zonealloc_managed_pages, zonealloc_nr_free_pages,
    zonealloc_nr_pcp_pages, zonealloc_pagetypeinfo, zonealloc_vmstat, zonealloc_zoneinfo,
};
pub use status::{zonealloc_error_info, Status};
