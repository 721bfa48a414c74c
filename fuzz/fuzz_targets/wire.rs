//! Fuzz target: the live-protocol frame decoder (wire::Decoder) over a stream split arbitrarily.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop::harness_io::wire(data);
});
