//! Fuzz entry point for the theme file parser, shared by the cargo-fuzz target `theme` in the
//! core's `fuzz/` and its `tests/io_corpus.rs`.
//!
//! A panic here is a bug in [`Theme::parse`] (or in an invariant below), never an expected outcome.

use ratatui::style::{Color, Style};

use crate::Theme;

const ORIGIN: &str = "theme fuzz.toml";

/// Input: any bytes, read as a theme file the way `--theme FILE` does once they are text (invalid
/// UTF-8 is replaced). Errors are one line that starts with the origin; a theme that parses has a
/// ramp of at least 2 entries and only the 16 ANSI colours.
pub fn theme(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Theme::parse(&text, ORIGIN) {
        Err(e) => {
            assert!(e.0.starts_with(ORIGIN), "{e}");
            assert!(!e.0.contains('\n'), "multi-line error: {e:?}");
        }
        Ok(t) => {
            assert!(t.ramp.len() >= 2, "{t:?}");
            for s in t.all_styles() {
                assert!(only_ansi(&s), "{s:?}");
            }
            assert_eq!(t.heat(usize::MAX), t.ramp[t.ramp.len() - 1]);
            assert_eq!(t.heat(0), t.ramp[0]);
        }
    }
}

fn only_ansi(s: &Style) -> bool {
    [s.fg, s.bg]
        .into_iter()
        .flatten()
        .all(|c| !matches!(c, Color::Rgb(..) | Color::Indexed(_)))
}
