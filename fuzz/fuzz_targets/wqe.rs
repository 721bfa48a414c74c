//! Fuzz target: the mlx5 WQE parser and the bounded walk over a ring snapshot.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop::decode::harness::wqe(data);
});
