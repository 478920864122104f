//! Test support, included by suites with `#[path]` (not part of the library):
//! panics a test induces in owner code on purpose, kept off standard error.

use std::sync::Once;

/// The message of every induced panic.
pub const INDUCED: &str = "induced panic in owner code";

/// Panics with `INDUCED`, after making sure such panics print nothing (other
/// panics still reach the previous hook).
pub fn induced_panic() -> ! {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&INDUCED) {
                previous(info);
            }
        }));
    });
    std::panic::panic_any(INDUCED)
}
