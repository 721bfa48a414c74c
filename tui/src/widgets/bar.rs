//! One value drawn in block characters: a horizontal bar, or a heat shade for a matrix cell.

/// A horizontal bar of `frac` (0..=1) in `width` cells, with eighth-block precision.
pub(crate) fn bar(frac: f64, width: usize) -> String {
    const PART: [&str; 8] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];
    let f = if frac.is_finite() {
        frac.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let eighths = (f * width as f64 * 8.0).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    s.push_str(PART[eighths % 8]);
    s
}

/// Shade characters for heat levels 0..=4; always drawn with the theme's ramp.
pub(crate) const SHADES: [&str; 5] = ["·", "░", "▒", "▓", "█"];

/// Heat level 0..=4 of `v` relative to `max` (0 only for no traffic).
pub(crate) fn heat_level(v: f64, max: f64) -> usize {
    if v <= 0.0 || max <= 0.0 || !v.is_finite() {
        0
    } else {
        1 + (((v / max) * 4.0).floor() as usize).min(3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_heat() {
        assert_eq!(heat_level(0.0, 10.0), 0);
        assert_eq!(heat_level(1.0, 10.0), 1);
        assert_eq!(heat_level(10.0, 10.0), 4);
        assert_eq!(bar(0.5, 4), "██");
        assert_eq!(bar(1.0 / 16.0, 2), "▏");
    }
}
