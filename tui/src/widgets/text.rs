//! Text that fits: cutting to a display width (at the end or in the middle), and a line with a left
//! and a right part.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

/// Joins a left and a right part with padding; None when they do not fit in `width`.
pub(crate) fn left_right<'a>(
    left: Vec<Span<'a>>,
    right: Vec<Span<'a>>,
    width: usize,
) -> Option<Line<'a>> {
    let lw: usize = left.iter().map(|s| s.width()).sum();
    let rw: usize = right.iter().map(|s| s.width()).sum();
    if lw + rw + usize::from(rw > 0) > width {
        return None;
    }
    let mut spans = left;
    spans.push(Span::raw(" ".repeat(width - lw - rw)));
    spans.extend(right);
    Some(Line::from(spans))
}

/// Truncates to `w` display columns, ending in "…" when cut.
pub(crate) fn truncate(s: &str, w: usize) -> String {
    if s.width() <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + cw + 1 > w {
            break;
        }
        out.push(c);
        used += cw;
    }
    out.push('…');
    out
}

/// Truncates to `w` display columns by cutting the middle: keeps the start and the end, which is
/// what tells ids like "ep@0x7f660e39f058" and "worker@0x55d1c2a0" apart. The start ends at a
/// boundary ('@', '#', ':', '.', '/', a space) when one falls within three fifths of the width,
/// so that a name is never cut mid-word ("worker@…fdf010", not "worke…07fdf010"; issue 39,
/// item 3); otherwise it is the first two fifths.
pub(crate) fn truncate_mid(s: &str, w: usize) -> String {
    if s.width() <= w {
        return s.to_string();
    }
    if w < 5 {
        return truncate(s, w);
    }
    let mut head_w = (w - 1) * 2 / 5;
    let mut used = 0;
    for c in s.chars() {
        used += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used > (w - 1) * 3 / 5 {
            break;
        }
        if matches!(c, '@' | '#' | ':' | '.' | '/' | ' ') {
            head_w = used;
        }
    }
    let tail_w = w - 1 - head_w;
    let mut head = String::new();
    let mut used = 0;
    for c in s.chars() {
        let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + cw > head_w {
            break;
        }
        head.push(c);
        used += cw;
    }
    let mut tail: Vec<char> = Vec::new();
    let mut used = 0;
    for c in s.chars().rev() {
        let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + cw > tail_w {
            break;
        }
        tail.push(c);
        used += cw;
    }
    head.push('…');
    head.extend(tail.into_iter().rev());
    head
}

/// Style helpers for cells.
pub(crate) fn styled(s: String, st: Style) -> Span<'static> {
    Span::styled(s, st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate_mid("ep@0x7f660e39f058", 14), "ep@…660e39f058");
        assert_eq!(truncate_mid("worker@0x7f6607fdf010", 14), "worker@…fdf010");
        // No boundary early enough: the first two fifths.
        assert_eq!(truncate_mid("abcdefghijklmnopq", 11), "abcd…lmnopq");
        assert_eq!(truncate_mid("ep@0x7f660e39f058", 17), "ep@0x7f660e39f058");
        assert_eq!(truncate_mid("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
