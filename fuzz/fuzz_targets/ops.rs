//! Arbitrary operation sequences over every public entry point.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zonealloc_fuzz::run(data, false);
});
