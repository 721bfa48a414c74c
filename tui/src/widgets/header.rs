//! The two lines at the top of the frame: the header (job size, source, totals) and the tab bar
//! (window, clock, history position, pause). Each picks the richest form that fits the width.

use crate::app::{App, Tab};
use crate::model::ViewModel;
use crate::units;
use crate::widgets::text::left_right;
use ratatui::text::{Line, Span};

pub(crate) fn header_line<'a>(app: &App, vm: &'a ViewModel, w: usize) -> Line<'a> {
    let th = &app.theme;
    let h = &vm.header;
    let sep = || Span::styled(" · ", th.dim);
    // Stepping back through a live view's history is not live (issue 39, item 7: the header
    // said `live` in green at an earlier sample).
    let in_past = vm.history_len > 0 && vm.history_pos + 1 < vm.history_len;
    let (source, source_style) = match h.source.as_str() {
        "" => ("no source".to_string(), th.text),
        "live" if in_past => ("history, not live".to_string(), th.warn),
        "live" => ("live".to_string(), th.ok),
        s => (s.to_string(), th.text),
    };
    let title = Span::styled(" sigmatop ", th.title);
    let n = |v: u32, one: &str, many: &str| format!("{v} {}", if v == 1 { one } else { many });
    // The rows by kind ("16 endpoints · 4 workers"), all of them or only the first.
    let kinds = |all: bool| -> Vec<Span<'a>> {
        let mut v = Vec::new();
        if h.row_kinds.is_empty() {
            v.push(Span::raw(format!("{} QPs", units::count(u64::from(h.qps)))));
        }
        for (i, (noun, c)) in h.row_kinds.iter().enumerate() {
            if i > 0 {
                if !all {
                    break;
                }
                v.push(sep());
            }
            v.push(Span::raw(format!("{} {noun}", units::count(u64::from(*c)))));
        }
        v
    };
    let full = vec![
        title.clone(),
        Span::raw(" "),
        Span::raw(n(h.nodes, "node", "nodes")),
        sep(),
        Span::raw(n(h.ranks, "rank", "ranks")),
        sep(),
        Span::raw(n(h.processes, "proc", "procs")),
        sep(),
    ];
    let mut full = full;
    full.extend(kinds(true));
    if !h.mode.is_empty() {
        full.push(sep());
        full.push(Span::raw(format!("mode {}", h.mode)));
    }
    full.push(sep());
    full.push(Span::styled(source.clone(), source_style));
    let medium = |all: bool| {
        let mut v = vec![
            title.clone(),
            Span::raw(" "),
            Span::raw(n(h.nodes, "node", "nodes")),
            sep(),
            Span::raw(n(h.ranks, "rank", "ranks")),
            sep(),
        ];
        v.extend(kinds(all));
        v.push(sep());
        v.push(Span::styled(source.clone(), source_style));
        v
    };
    let narrow = |all: bool| {
        let mut v = vec![
            title.clone(),
            Span::raw(" "),
            Span::raw(format!("{}n", h.nodes)),
            sep(),
            Span::raw(format!("{}r", h.ranks)),
            sep(),
        ];
        v.extend(kinds(all));
        v.push(sep());
        v.push(Span::styled(source.clone(), source_style));
        v
    };
    let short = vec![title.clone(), Span::styled(source.clone(), source_style)];
    let totals = vec![
        Span::styled(
            format!("▲ {}", units::rate_unit(h.tx_bps, app.units)),
            th.tx,
        ),
        Span::raw("  "),
        Span::styled(
            format!("▼ {}", units::rate_unit(h.rx_bps, app.units)),
            th.rx,
        ),
        Span::raw(" "),
    ];
    // Every kind of row is named before the words "nodes" and "ranks" are kept: "20 QPs" for a
    // job of 16 endpoints and 4 workers would say what it is not.
    for left in [
        full,
        medium(true),
        narrow(true),
        medium(false),
        narrow(false),
        short.clone(),
    ] {
        if let Some(l) = left_right(left, totals.clone(), w) {
            return l;
        }
    }
    Line::from(short)
}

pub(crate) fn tab_line(app: &App, vm: &ViewModel, w: usize) -> Line<'static> {
    let th = &app.theme;
    let tabs = |compact: bool| -> Vec<Span<'static>> {
        let mut v = Vec::new();
        for t in Tab::ALL {
            let title = if compact {
                match t {
                    Tab::Overview => "Overview",
                    Tab::Collectives => "Coll",
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
    } else if let Some(s) = h.window_span_s {
        // The job is younger than the window: its averages are over this long, for everyone.
        window.push_str(&if h.window == "all" {
            format!(" ({})", units::secs(s))
        } else {
            format!(" ({} so far)", units::secs(s))
        });
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
            let text = match h.snapshot_lag_s {
                // Each process at its own latest snapshot: say how far apart they may be.
                Some(lag) if detail >= 3 && lag > 0.0 => format!(
                    "◀ sample {pos}/{len}, each process's snapshot ≤ {} before",
                    units::secs(lag)
                ),
                _ if detail >= 2 => format!("◀ sample {pos}/{len}"),
                _ => format!("◀ {pos}/{len}"),
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
