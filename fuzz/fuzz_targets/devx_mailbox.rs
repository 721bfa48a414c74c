//! Fuzz target: the devx command mailbox decoders (CREATE_QP, modify, destroy, devx UAR) and their encoders.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop::decode::harness::devx_mailbox(data);
});
