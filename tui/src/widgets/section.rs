//! A view's section: a separator line at the top with a title ("Processes 8 · 1 exited").

use crate::theme::Theme;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders};

/// A block for a view: one separator line at the top, with a title.
pub(crate) fn section<'a>(th: &Theme, title: Line<'a>) -> Block<'a> {
    Block::new()
        .borders(Borders::TOP)
        .border_style(th.dim)
        .title(title)
}

/// Title spans: " Name (shown of total) " with the filter noted.
pub(crate) fn title_line(
    th: &Theme,
    name: &str,
    shown: usize,
    total: usize,
    extra: &str,
) -> Line<'static> {
    let count = if shown == total {
        format!("{total}")
    } else {
        format!("{shown} of {total}")
    };
    let mut spans = vec![
        Span::styled(format!(" {name} "), th.title),
        Span::styled(format!("{count} "), th.dim),
    ];
    if !extra.is_empty() {
        spans.push(Span::styled(format!("· {extra} "), th.dim));
    }
    Line::from(spans)
}
