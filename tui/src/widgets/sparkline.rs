//! A one-line text sparkline (for rows of text; the Overview's tall one is ratatui's `Sparkline`).

/// A one-line text sparkline of `values` scaled to `max`, newest at the right, `width` cells.
pub(crate) fn spark(values: &[f64], max: f64, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let start = values.len().saturating_sub(width);
    let mut s: String = values[start..]
        .iter()
        .map(|&v| {
            if v <= 0.0 || max <= 0.0 || !v.is_finite() {
                ' '
            } else {
                let i = ((v / max) * 8.0).ceil() as usize;
                BARS[i.clamp(1, 8) - 1]
            }
        })
        .collect();
    let n = values.len() - start;
    if n < width {
        s = format!("{}{}", " ".repeat(width - n), s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_at_the_right() {
        assert_eq!(spark(&[0.0, 1.0, 8.0], 8.0, 4), "  ▁█");
    }
}
