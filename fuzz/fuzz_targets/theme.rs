//! Fuzz target: the theme file parser (sigmatop_tui::Theme::parse).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sigmatop_tui::harness::theme(data);
});
