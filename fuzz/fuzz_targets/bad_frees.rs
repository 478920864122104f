//! Operation sequences interleaved with bad calls of every kind.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zonealloc_fuzz::run(data, true);
});
