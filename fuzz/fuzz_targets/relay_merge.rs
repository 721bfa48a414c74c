//! Fuzz target: several relay streams (`sigmatop attach HOST...`) merged into one model, their
//! bytes interleaved arbitrarily; a refused host must leave the others untouched.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop::harness_io::relay_merge(data);
});
