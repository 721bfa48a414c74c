//! Fuzz target: the record readers: event blocks (codec::decode_block), thread event files and process files.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop::harness_io::record(data);
});
