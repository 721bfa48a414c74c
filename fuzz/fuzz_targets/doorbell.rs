//! Fuzz target: the 8-byte UAR doorbell word decoder and the per-QP SqTracker.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop::decode::harness::doorbell(data);
});
