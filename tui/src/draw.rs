//! The frame around every view: header and tab bar on top, the current view's body, the status,
//! warnings and key lines at the bottom, and the help overlay. Everything is a function of (App,
//! ViewModel, frame size): no clock, no I/O. The pieces are in `widgets`, the bodies in `views`.

use crate::app::{App, Tab};
use crate::model::ViewModel;
use crate::views;
use crate::widgets::footer::{footer_line, status_line, warnings_line};
use crate::widgets::header::{header_line, tab_line};
use crate::widgets::text::truncate;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
/// Smallest frame the dashboard draws into; below it, a one-line notice.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

/// Draws one frame of the dashboard: a function of the UI state, the view model and the frame size.
pub fn draw(frame: &mut Frame, app: &App, vm: &ViewModel) {
    let area = frame.area();
    let th = &app.theme;
    frame.render_widget(Block::new().style(th.text), area);
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "sigmatop needs {MIN_WIDTH}×{MIN_HEIGHT}, have {}×{}",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(truncate(&msg, area.width as usize)), area);
        return;
    }
    let warns = &vm.warnings;
    let tall = area.height >= 30;
    let mut constraints = vec![
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
    ];
    if tall {
        constraints.push(Constraint::Length(1));
    }
    constraints.push(Constraint::Length(1));
    constraints.push(Constraint::Length(1));
    let rows = Layout::vertical(constraints).split(area);
    let w = area.width as usize;

    frame.render_widget(Paragraph::new(header_line(app, vm, w)), rows[0]);
    frame.render_widget(Paragraph::new(tab_line(app, vm, w)), rows[1]);
    views::draw_body(frame, rows[2], app, vm, warns);
    if tall {
        // The Overview lists the warnings in its own box: the line only counts them there.
        let line = if app.tab == Tab::Overview && !warns.is_empty() {
            Line::from(Span::styled(
                format!(
                    " ⚠ {} warning{}, listed above",
                    warns.len(),
                    crate::units::plural(warns.len() as u64)
                ),
                th.warn,
            ))
        } else {
            warnings_line(th, warns, w)
        };
        frame.render_widget(Paragraph::new(line), rows[3]);
        frame.render_widget(Paragraph::new(status_line(th, vm, None, true, w)), rows[4]);
        frame.render_widget(Paragraph::new(footer_line(app, w)), rows[5]);
    } else {
        // On short terminals an error takes the footer's line (keys stay behind `?`); a notice
        // never does: it shares the status line.
        let msg = vm.status.message.as_deref().filter(|_| !app.filter_editing);
        frame.render_widget(
            Paragraph::new(status_line(th, vm, Some(warns), msg.is_none(), w)),
            rows[3],
        );
        let footer = match msg {
            Some(m) => Line::from(Span::styled(
                format!(" ✗ {}", truncate(m, w.saturating_sub(3))),
                th.error,
            )),
            None => footer_line(app, w),
        };
        frame.render_widget(Paragraph::new(footer), rows[4]);
    }
    if app.help {
        views::draw_help(frame, area, app);
    }
}
