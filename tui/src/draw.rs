//! Drawing: the frame around every view (header, tab bar, status and warnings, footer), the help
//! overlay, the filter prompt, and the shared table and text helpers. The views live in `views`.
//! Everything is a function of (App, ViewModel, frame size): no clock, no I/O.

use crate::app::{App, Tab};
use crate::fmt;
use crate::model::ViewModel;
use crate::theme::Theme;
use crate::views;
use crate::warnings::{self, Warning, WarningKind};
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, HighlightSpacing, Paragraph, Row, Table, TableState,
};
use std::cmp::Ordering;
use unicode_width::UnicodeWidthStr;

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
    let warns = warnings::compute(vm, &app.warning_config);
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
    views::draw_body(frame, rows[2], app, vm, &warns);
    if tall {
        // The Overview lists the warnings in its own box: the line only counts them there.
        let line = if app.tab == Tab::Overview && !warns.is_empty() {
            Line::from(Span::styled(
                format!(
                    " ⚠ {} warning{}, listed above",
                    warns.len(),
                    if warns.len() == 1 { "" } else { "s" }
                ),
                th.warn,
            ))
        } else {
            warnings_line(th, &warns, w)
        };
        frame.render_widget(Paragraph::new(line), rows[3]);
        frame.render_widget(Paragraph::new(status_line(th, vm, None, true, w)), rows[4]);
        frame.render_widget(Paragraph::new(footer_line(app, w)), rows[5]);
    } else {
        // On short terminals an error takes the footer's line (keys stay behind `?`); a notice
        // never does: it shares the status line.
        let msg = vm.status.message.as_deref().filter(|_| !app.filter_editing);
        frame.render_widget(
            Paragraph::new(status_line(th, vm, Some(&warns), msg.is_none(), w)),
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
        draw_help(frame, area, app);
    }
}

// ---------------------------------------------------------------- frame lines

/// Joins a left and a right part with padding; None when they do not fit in `width`.
fn left_right<'a>(left: Vec<Span<'a>>, right: Vec<Span<'a>>, width: usize) -> Option<Line<'a>> {
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

fn header_line<'a>(app: &App, vm: &'a ViewModel, w: usize) -> Line<'a> {
    let th = &app.theme;
    let h = &vm.header;
    let sep = || Span::styled(" · ", th.dim);
    let source_style = if h.source == "live" { th.ok } else { th.text };
    let source = if h.source.is_empty() {
        "no source".to_string()
    } else {
        h.source.clone()
    };
    let title = Span::styled(" sigmatop ", th.title);
    let n = |v: u32, one: &str, many: &str| format!("{v} {}", if v == 1 { one } else { many });
    let full = vec![
        title.clone(),
        Span::raw(" "),
        Span::raw(n(h.nodes, "node", "nodes")),
        sep(),
        Span::raw(n(h.ranks, "rank", "ranks")),
        sep(),
        Span::raw(n(h.processes, "proc", "procs")),
        sep(),
        Span::raw(format!("{} QPs", fmt::count(u64::from(h.qps)))),
    ];
    let mut full = full;
    if !h.mode.is_empty() {
        full.push(sep());
        full.push(Span::raw(format!("mode {}", h.mode)));
    }
    full.push(sep());
    full.push(Span::styled(source.clone(), source_style));
    let medium = vec![
        title.clone(),
        Span::raw(" "),
        Span::raw(n(h.nodes, "node", "nodes")),
        sep(),
        Span::raw(n(h.ranks, "rank", "ranks")),
        sep(),
        Span::raw(format!("{} QPs", fmt::count(u64::from(h.qps)))),
        sep(),
        Span::styled(source.clone(), source_style),
    ];
    let narrow = vec![
        title.clone(),
        Span::raw(" "),
        Span::raw(format!("{}n", h.nodes)),
        sep(),
        Span::raw(format!("{}r", h.ranks)),
        sep(),
        Span::raw(format!("{} QPs", fmt::count(u64::from(h.qps)))),
        sep(),
        Span::styled(source.clone(), source_style),
    ];
    let short = vec![title, Span::styled(source.clone(), source_style)];
    let totals = vec![
        Span::styled(format!("▲ {}", fmt::rate_unit(h.tx_bps, app.units)), th.tx),
        Span::raw("  "),
        Span::styled(format!("▼ {}", fmt::rate_unit(h.rx_bps, app.units)), th.rx),
        Span::raw(" "),
    ];
    for left in [full, medium, narrow, short.clone()] {
        if let Some(l) = left_right(left, totals.clone(), w) {
            return l;
        }
    }
    Line::from(short)
}

fn tab_line(app: &App, vm: &ViewModel, w: usize) -> Line<'static> {
    let th = &app.theme;
    let tabs = |compact: bool| -> Vec<Span<'static>> {
        let mut v = Vec::new();
        for t in Tab::ALL {
            let title = if compact {
                match t {
                    Tab::Overview => "Overview",
                    other => other.title(),
                }
            } else {
                t.title()
            };
            if t == app.tab {
                v.push(Span::styled(
                    format!("[{} {}]", t.key(), title),
                    th.tab_active,
                ));
            } else {
                v.push(Span::styled(format!(" {}", t.key()), th.key));
                v.push(Span::styled(format!(" {title} "), th.tab));
            }
            if !compact {
                v.push(Span::raw(" "));
            }
        }
        v
    };
    let h = &vm.header;
    let mut window = format!("window {}", app.window.label());
    if !h.window.is_empty() && h.window != app.window.label() {
        window.push_str(&format!(" (data {})", h.window));
    }
    let in_past = vm.history_len > 0 && vm.history_pos + 1 < vm.history_len;
    let (pos, len) = (vm.history_pos + 1, vm.history_len);
    // detail 3: window, clock, history, pause; 2: window, history, pause; 1: short window, history,
    // pause; 0: history and pause only (what the user most needs to know: this is not live).
    let right = |detail: u8| -> Vec<Span<'static>> {
        let mut v: Vec<Span<'static>> = Vec::new();
        let sep = Span::styled(" · ", th.dim);
        let push = |v: &mut Vec<Span<'static>>, s: Span<'static>| {
            if !v.is_empty() {
                v.push(sep.clone());
            }
            v.push(s);
        };
        match detail {
            0 => {}
            1 => push(&mut v, Span::raw(app.window.label().to_string())),
            _ => push(&mut v, Span::raw(window.clone())),
        }
        if detail >= 3 && !h.clock.is_empty() {
            push(&mut v, Span::raw(h.clock.clone()));
        }
        if in_past {
            let text = if detail >= 2 {
                format!("◀ sample {pos}/{len}")
            } else {
                format!("◀ {pos}/{len}")
            };
            push(&mut v, Span::styled(text, th.warn));
        }
        if app.paused {
            push(&mut v, Span::styled("‖ PAUSED", th.warn));
        }
        v.push(Span::raw(" "));
        v
    };
    let mut start = vec![Span::raw(" ")];
    for (compact, detail) in [
        (false, 3),
        (false, 2),
        (false, 1),
        (true, 3),
        (true, 2),
        (true, 1),
        (true, 0),
    ] {
        let mut left = start.clone();
        left.extend(tabs(compact));
        if let Some(l) = left_right(left, right(detail), w) {
            return l;
        }
    }
    start.extend(tabs(true));
    Line::from(start)
}

fn counters<'a>(th: &Theme, vm: &ViewModel, wide: bool) -> Vec<Span<'a>> {
    let s = &vm.status;
    let item = |name: &str, n: u64| -> Vec<Span<'a>> {
        let style = if n > 0 { th.warn } else { th.dim };
        vec![
            Span::styled(format!("{name} "), th.dim),
            Span::styled(fmt::count(n), style),
        ]
    };
    let mut v = Vec::new();
    v.extend(item("drops", s.dropped_events));
    v.push(Span::styled(" · ", th.dim));
    v.extend(item("coalesced", s.coalesced_doorbells));
    v.push(Span::styled(" · ", th.dim));
    v.extend(item("unparsable", s.unparsable_wqes));
    if wide || s.frames_lost > 0 {
        v.push(Span::styled(" · ", th.dim));
        v.extend(item("frames lost", s.frames_lost));
    }
    v.push(Span::raw(" "));
    v
}

/// Status line: loss counters always on the right; on the left the latest error (✗, when
/// `with_error`; short terminals show it in the footer instead), or (when `warns` is given, on
/// short terminals) the first warning, then the source's notice (» in the normal text colour).
fn status_line<'a>(
    th: &Theme,
    vm: &'a ViewModel,
    warns: Option<&[Warning]>,
    with_error: bool,
    w: usize,
) -> Line<'a> {
    let right = counters(th, vm, w >= 120);
    let rw: usize = right.iter().map(|s| s.width()).sum();
    let room = w.saturating_sub(rw + 2);
    let mut left: Vec<Span> = if let Some(msg) = vm.status.message.as_ref().filter(|_| with_error) {
        vec![Span::styled(
            format!(" ✗ {}", truncate(msg, room.saturating_sub(3))),
            th.error,
        )]
    } else if let Some(ws) = warns {
        // Drops are already in the counters on the right: show the first other warning.
        let first = ws
            .iter()
            .find(|w| w.kind != WarningKind::Drops)
            .or(ws.first());
        // With a notice to show as well and too little room for both, the warnings shrink to
        // their count (the list is on the Overview).
        let notice_w = vm
            .status
            .notice
            .as_ref()
            .map_or(0, |n| n.width().min(30) + 4);
        let full_w = first.map_or(0, |f| f.message.width() + 14);
        match first {
            None => vec![Span::styled(" ✓ no warnings", th.ok)],
            Some(_) if notice_w > 0 && full_w + notice_w > room => vec![Span::styled(
                format!(
                    " ⚠ {} warning{}",
                    ws.len(),
                    if ws.len() == 1 { "" } else { "s" }
                ),
                th.warn,
            )],
            Some(first) => {
                let more = if ws.len() > 1 {
                    format!(" (+{} more)", ws.len() - 1)
                } else {
                    String::new()
                };
                let text = truncate(&first.message, room.saturating_sub(3 + more.width()));
                vec![
                    Span::styled(format!(" ⚠ {text}"), th.warn),
                    Span::styled(more, th.dim),
                ]
            }
        }
    } else {
        vec![Span::styled(" ✓ no errors", th.ok)]
    };
    if let Some(n) = &vm.status.notice {
        let used: usize = left.iter().map(|s| s.width()).sum();
        let space = room.saturating_sub(used + 3);
        if space >= 8 {
            left.push(Span::styled("  » ", th.key));
            left.push(Span::styled(truncate(n, space), th.text));
        }
    }
    left_right(left, right.clone(), w).unwrap_or_else(|| Line::from(right))
}

fn warnings_line<'a>(th: &Theme, warns: &[Warning], w: usize) -> Line<'a> {
    if warns.is_empty() {
        return Line::from(Span::styled(" ✓ no warnings", th.ok));
    }
    let mut spans = vec![Span::styled(" ⚠ ", th.warn)];
    let mut used = 3;
    for (i, wn) in warns.iter().enumerate() {
        let rest = warns.len() - i - 1;
        let tail = if rest > 0 {
            format!(" (+{rest} more)").width()
        } else {
            0
        };
        let sep = if i > 0 { 3 } else { 0 };
        let need = sep + wn.message.width();
        if used + need + tail > w {
            let shown = i;
            spans.push(Span::styled(
                format!(" (+{} more)", warns.len() - shown),
                th.dim,
            ));
            break;
        }
        if i > 0 {
            spans.push(Span::styled(" · ", th.dim));
        }
        spans.push(Span::styled(wn.message.clone(), th.warn));
        used += need;
    }
    Line::from(spans)
}

fn footer_line(app: &App, w: usize) -> Line<'static> {
    let th = &app.theme;
    if app.filter_editing {
        let mut spans = vec![
            Span::styled(" / ", th.key),
            Span::styled(app.filter.clone(), th.text),
            Span::styled("▏", th.key),
        ];
        let hint = "  Enter keep · Esc cancel · host= rank= pid= qpn= layer= op= gpu= peer= type= state= (~ substring) or text";
        let used = 4 + app.filter.width();
        spans.push(Span::styled(truncate(hint, w.saturating_sub(used)), th.dim));
        return Line::from(spans);
    }
    let tab = app.tab;
    let table = matches!(tab, Tab::Overview | Tab::Qps | Tab::Gpus | Tab::Nodes);
    // (key, what, priority: lower shows first when space is short)
    let mut items: Vec<(&str, &str, u8)> = vec![("q", "quit", 0), ("?", "help", 0)];
    items.push(("/", "filter", 1));
    if table {
        items.push(("s/S", "sort", 2));
    }
    items.push(("space", if app.paused { "resume" } else { "pause" }, 1));
    items.push(("←/→", "window", 2));
    items.push(("[ ]", "history", 3));
    if tab == Tab::Matrix {
        items.push(("m", "rank/GPU/node", 1));
        items.push(("< >", "columns", 2));
        items.push(("r", if app.matrix_rate { "bytes" } else { "rate" }, 1));
    }
    if tab != Tab::Doorbells {
        items.push(("d", "doorbells", 3));
    }
    items.push(("u", "bits/bytes", 4));
    items.push(("t", "theme", 4));
    items.push(("j/k", "move", 5));

    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut budget = w.saturating_sub(1);
    if !app.filter.is_empty() {
        let f = format!(" filter: {} ", app.filter);
        let f = truncate(&f, budget.saturating_sub(12));
        budget = budget.saturating_sub(f.width() + 11);
        spans.push(Span::styled(f, th.warn));
        spans.push(Span::styled("(Esc clears) ", th.dim));
    }
    let cost = |k: &str, d: &str| k.width() + d.width() + 3;
    let mut keep = vec![false; items.len()];
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (items[i].2, i));
    for i in order {
        let c = cost(items[i].0, items[i].1);
        if c <= budget {
            keep[i] = true;
            budget -= c;
        }
    }
    for (i, (k, d, _)) in items.iter().enumerate() {
        if keep[i] {
            spans.push(Span::styled(format!(" {k}"), th.key));
            spans.push(Span::styled(format!(" {d} "), th.dim));
        }
    }
    Line::from(spans)
}

fn draw_help(frame: &mut Frame, area: Rect, app: &App) {
    let th = &app.theme;
    let cfg = &app.warning_config;
    let k = |s: &str| Span::styled(format!("{s:<10}"), th.title);
    let t = |s: String| Span::raw(s);
    let lines: Vec<Line> = vec![
        Line::from(vec![
            k("Views"),
            t("1 Overview 2 QPs 3 GPUs 4 Nodes 5 Matrix d Doorbells".into()),
        ]),
        Line::from(vec![
            k(""),
            t("Tab / Shift-Tab next / previous view".into()),
        ]),
        Line::from(vec![
            k("Move"),
            t("j/k or ↑/↓ row · PgUp/PgDn page · g/G first/last".into()),
        ]),
        Line::from(vec![
            k("Sort"),
            t("s next column · S reverse (▾ descending, ▴ ascending)".into()),
        ]),
        Line::from(vec![
            k("Filter"),
            t("/ then rank=3 host=node2 qpn=0x2a40 layer=ucx op=write".into()),
        ]),
        Line::from(vec![
            k(""),
            t("key=v exact, key~v substring, or any text; all must match".into()),
        ]),
        Line::from(vec![
            k(""),
            t("Enter keeps, Esc cancels; Esc later clears the filter".into()),
        ]),
        Line::from(vec![
            k("Time"),
            t("space pause view (collection goes on) · ←/→ w window".into()),
        ]),
        Line::from(vec![
            k(""),
            t("[ ] step back/forward in history ({ } by 10) · +/- speed".into()),
        ]),
        Line::from(vec![
            k("Display"),
            t("u bytes/bits · t theme · m matrix kind · r rate/bytes".into()),
        ]),
        Line::from(vec![
            k(""),
            t("< > or h l scroll matrix columns that do not fit".into()),
        ]),
        Line::from(vec![k("Quit"), t("q or Ctrl-C".into())]),
        Line::from(""),
        Line::from(vec![
            k("Columns"),
            t("▲ tx = sent by this row (egress), ▼ rx = received".into()),
        ]),
        Line::from(vec![
            k(""),
            t("B/s bytes per second, SI prefixes (k = 1000); b/s bits".into()),
        ]),
        Line::from(vec![
            k(""),
            t("ops/s work requests · db/s doorbells · WR posted work".into()),
        ]),
        Line::from(vec![
            k("Counters"),
            t("drops: events lost to full rings · coalesced: doorbells".into()),
        ]),
        Line::from(vec![
            k(""),
            t("seen as one · unparsable: WQEs that could not be decoded".into()),
        ]),
        Line::from(vec![
            k("Warnings"),
            t(format!(
                "▲/▼ skew ≥ {:.1}× mean · idle QP with posted WR · ≥ {} db/s",
                cfg.skew_ratio,
                fmt::si(cfg.doorbell_storm_per_s)
            )),
        ]),
    ];
    let want_w = 72u16;
    let want_h = lines.len() as u16 + 2;
    let w = want_w.min(area.width.saturating_sub(2));
    let h = want_h.min(area.height.saturating_sub(2));
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, r);
    let block = Block::bordered()
        .border_style(th.title)
        .style(th.text)
        .title(Span::styled(" sigmatop help ", th.title))
        .title_bottom(Line::from(Span::styled(" Esc or ? closes ", th.dim)).right_aligned());
    frame.render_widget(Paragraph::new(lines).block(block), r);
}

// ---------------------------------------------------------------- shared helpers

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

/// Truncates to `w` display columns by cutting the middle: keeps the first two fifths and the end,
/// which is what tells ids like "ep@0x7f660e39f058" and "worker@0x55d1c2a0" apart.
pub(crate) fn truncate_mid(s: &str, w: usize) -> String {
    if s.width() <= w {
        return s.to_string();
    }
    if w < 5 {
        return truncate(s, w);
    }
    let head_w = (w - 1) * 2 / 5;
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

/// A sort key of one cell: a number, a borrowed field, or text made for the purpose.
#[derive(Clone, Debug)]
pub(crate) enum Key<'a> {
    Num(f64),
    Str(&'a str),
    Text(String),
}

fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut ai, mut bi) = (a.chars().peekable(), b.chars().peekable());
    loop {
        match (ai.peek().copied(), bi.peek().copied()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let mut na = String::new();
                while let Some(c) = ai.peek().copied().filter(char::is_ascii_digit) {
                    na.push(c);
                    ai.next();
                }
                let mut nb = String::new();
                while let Some(c) = bi.peek().copied().filter(char::is_ascii_digit) {
                    nb.push(c);
                    bi.next();
                }
                let o = na
                    .trim_start_matches('0')
                    .len()
                    .cmp(&nb.trim_start_matches('0').len())
                    .then_with(|| na.trim_start_matches('0').cmp(nb.trim_start_matches('0')));
                if o != Ordering::Equal {
                    return o;
                }
            }
            (Some(x), Some(y)) => {
                let o = x.to_ascii_lowercase().cmp(&y.to_ascii_lowercase());
                if o != Ordering::Equal {
                    return o;
                }
                ai.next();
                bi.next();
            }
        }
    }
}

impl Key<'_> {
    fn text(&self) -> Option<&str> {
        match self {
            Key::Num(_) => None,
            Key::Str(s) => Some(s),
            Key::Text(s) => Some(s),
        }
    }

    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Num(a), Key::Num(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            (Key::Num(_), _) => Ordering::Less,
            (_, Key::Num(_)) => Ordering::Greater,
            _ => natural_cmp(self.text().unwrap_or(""), other.text().unwrap_or("")),
        }
    }
}

/// Rendering context shared by the column functions.
pub(crate) struct Ctx<'a> {
    pub th: &'a Theme,
    pub app: &'a App,
    /// Mean of the table's main figure (for "× mean" cells); 0 when unused.
    pub mean: f64,
    /// Mean of the ingress figure (for "▼ × mean" cells); 0 when unused.
    pub mean_in: f64,
    /// Max of the table's main figure (for bars); 0 when unused.
    pub max: f64,
}

/// One column of a table.
pub(crate) struct Col<R> {
    pub title: String,
    /// Lower shows first when the terminal is narrow; 0 is never dropped.
    pub prio: u8,
    pub right: bool,
    pub max: u16,
    /// Cut too-long cells in the middle ("ep@0x7f…39f058"): for ids whose ends tell them apart.
    pub mid: bool,
    pub cell: fn(&R, &Ctx) -> Span<'static>,
    pub key: fn(&R) -> Key<'_>,
}

/// Sorts rows by a column (stable; ties keep the source order).
pub(crate) fn sort_rows<R>(rows: &mut [&R], cols: &[Col<R>], column: usize, descending: bool) {
    sort_rows_front(rows, cols, column, descending, usize::MAX);
}

/// Like [`sort_rows`], but only the first `front` rows need to end up in order (the rows a table
/// can show: its cursor plus a page): those are exactly what a full stable sort puts there, the
/// rest are left in no particular order. With thousands of rows and a page of fifty, this is a
/// linear selection plus a small sort instead of a full sort every frame.
pub(crate) fn sort_rows_front<R>(
    rows: &mut [&R],
    cols: &[Col<R>],
    column: usize,
    descending: bool,
    front: usize,
) {
    if cols.is_empty() || rows.len() < 2 {
        return;
    }
    let c = &cols[column % cols.len()];
    // Compute each key once; the source position breaks ties, so the order is total and an
    // unstable selection gives what the stable sort gives.
    let mut keyed: Vec<(Key, usize, &R)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((c.key)(r), i, *r))
        .collect();
    let order = |a: &(Key, usize, &R), b: &(Key, usize, &R)| {
        let o = a.0.cmp(&b.0);
        let o = if descending { o.reverse() } else { o };
        o.then(a.1.cmp(&b.1))
    };
    if front < keyed.len() {
        let n = front.max(1);
        keyed.select_nth_unstable_by(n - 1, order);
        keyed[..n].sort_unstable_by(order);
    } else {
        keyed.sort_unstable_by(order);
    }
    for (slot, (_, _, r)) in rows.iter_mut().zip(keyed) {
        *slot = r;
    }
}

/// Draws rows as a table into `area` (header + rows), dropping low-priority columns that do not fit.
/// `selected` is an index into `rows`; when `track` the app learns the row count and page height.
#[allow(clippy::too_many_arguments)]
pub(crate) fn render_table<R>(
    frame: &mut Frame,
    area: Rect,
    ctx: &Ctx,
    cols: &[Col<R>],
    rows: &[&R],
    sort_col: Option<(usize, bool)>,
    selected: Option<usize>,
    track: bool,
) {
    let th = ctx.th;
    let visible = area.height.saturating_sub(1) as usize;
    if track {
        ctx.app.seen(rows.len(), visible);
    }
    let sel = selected.map(|s| s.min(rows.len().saturating_sub(1)));
    let offset = sel
        .map(|s| s.saturating_sub(visible.saturating_sub(1)))
        .unwrap_or(0);
    let slice = &rows[offset.min(rows.len())..(offset + visible).min(rows.len())];
    let sorted = sort_col.map(|(c, d)| (c % cols.len().max(1), d));
    let titles: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| match sorted {
            Some((s, d)) if s == i => format!("{}{}", c.title, if d { "▾" } else { "▴" }),
            _ => c.title.clone(),
        })
        .collect();
    let cells: Vec<Vec<Span<'static>>> = slice
        .iter()
        .map(|r| cols.iter().map(|c| (c.cell)(r, ctx)).collect())
        .collect();
    let widths: Vec<u16> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let data = cells.iter().map(|row| row[i].width()).max().unwrap_or(0);
            (data.max(titles[i].width()) as u16).min(c.max.max(titles[i].width() as u16))
        })
        .collect();
    // Pick columns by priority until the width is used up; the selection marker takes 2.
    let mut order: Vec<usize> = (0..cols.len()).collect();
    order.sort_by_key(|&i| (cols[i].prio, i));
    let mut budget = area.width.saturating_sub(2) as i32;
    let mut keep = vec![false; cols.len()];
    for i in order {
        let need = widths[i] as i32 + 1;
        if need <= budget + 1 {
            keep[i] = true;
            budget -= need;
        } else if cols[i].prio == 0 {
            keep[i] = true; // never dropped; it will be cut
            budget -= need;
        }
    }
    let shown: Vec<usize> = (0..cols.len()).filter(|&i| keep[i]).collect();
    let align = |i: usize| {
        if cols[i].right {
            Alignment::Right
        } else {
            Alignment::Left
        }
    };
    let header = Row::new(shown.iter().map(|&i| {
        let style = match sorted {
            Some((s, _)) if s == i => th.table_header.add_modifier(Modifier::UNDERLINED),
            _ => th.table_header,
        };
        Cell::from(Line::from(Span::styled(titles[i].clone(), style)).alignment(align(i)))
    }));
    let body: Vec<Row> = cells
        .into_iter()
        .map(|mut row| {
            Row::new(shown.iter().map(|&i| {
                let mut span = std::mem::take(&mut row[i]);
                let w = widths[i] as usize;
                if span.width() > w {
                    span.content = if cols[i].mid {
                        truncate_mid(&span.content, w)
                    } else {
                        truncate(&span.content, w)
                    }
                    .into();
                }
                Cell::from(Line::from(span).alignment(align(i)))
            }))
        })
        .collect();
    let constraints: Vec<Constraint> = shown
        .iter()
        .map(|&i| Constraint::Length(widths[i]))
        .collect();
    let table = Table::new(body, constraints)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(th.selected)
        .highlight_symbol("▸ ")
        .highlight_spacing(HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(sel.map(|s| s - offset));
    frame.render_stateful_widget(table, area, &mut state);
    if rows.is_empty() && area.height > 1 {
        let msg = if ctx.app.filter.is_empty() {
            "  (none yet)"
        } else {
            "  (nothing matches the filter; Esc clears it)"
        };
        let r = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(Paragraph::new(Span::styled(msg, th.dim)), r);
    }
}

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

/// Style helpers for cells.
pub(crate) fn styled(s: String, st: Style) -> Span<'static> {
    Span::styled(s, st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["node10", "node2", "node1", "Node3"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, vec!["node1", "node2", "Node3", "node10"]);
    }

    #[test]
    fn sorting_the_front_gives_the_front_of_a_full_stable_sort() {
        let cols: Vec<Col<(u32, &str)>> = vec![
            Col {
                title: "n".into(),
                prio: 0,
                right: true,
                max: 4,
                mid: false,
                cell: |r, _| Span::raw(r.0.to_string()),
                key: |r| Key::Num(f64::from(r.0 % 7)),
            },
            Col {
                title: "s".into(),
                prio: 0,
                right: false,
                max: 4,
                mid: false,
                cell: |r, _| Span::raw(r.1.to_string()),
                key: |r| Key::Str(r.1),
            },
        ];
        let names = ["b", "a10", "a2", "c", "a1"];
        let data: Vec<(u32, &str)> = (0..200u32)
            .map(|i| (i * 31 % 97, names[i as usize % names.len()]))
            .collect();
        for column in 0..2 {
            for desc in [false, true] {
                let mut full: Vec<&(u32, &str)> = data.iter().collect();
                full.sort_by(|a, b| {
                    let o = (cols[column].key)(a).cmp(&(cols[column].key)(b));
                    if desc { o.reverse() } else { o }
                });
                for front in [0, 1, 7, 50, 199, 200, 500] {
                    let mut rows: Vec<&(u32, &str)> = data.iter().collect();
                    sort_rows_front(&mut rows, &cols, column, desc, front);
                    let n = front.min(rows.len());
                    assert_eq!(
                        rows[..n],
                        full[..n],
                        "column {column} desc {desc} front {front}"
                    );
                    let mut all = rows.clone();
                    all.sort();
                    let mut want = full.clone();
                    want.sort();
                    assert_eq!(all, want, "same rows");
                }
            }
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate_mid("ep@0x7f660e39f058", 14), "ep@0x…0e39f058");
        assert_eq!(truncate_mid("ep@0x7f660e39f058", 17), "ep@0x7f660e39f058");
        assert_eq!(truncate_mid("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(spark(&[0.0, 1.0, 8.0], 8.0, 4), "  ▁█");
        assert_eq!(heat_level(0.0, 10.0), 0);
        assert_eq!(heat_level(1.0, 10.0), 1);
        assert_eq!(heat_level(10.0, 10.0), 4);
        assert_eq!(bar(0.5, 4), "██");
        assert_eq!(bar(1.0 / 16.0, 2), "▏");
    }
}
