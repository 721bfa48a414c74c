//! The lines at the bottom of the frame: the status line (latest error or first warning, the
//! source's notice, the loss counters), the warnings line, and the key line (or the filter prompt).

use crate::app::{App, Tab};
use crate::model::ViewModel;
use crate::theme::Theme;
use crate::units;
use crate::warnings::{Warning, WarningKind};
use crate::widgets::text::{left_right, truncate};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

/// How much of the loss counters the status line spends room on.
#[derive(Clone, Copy, PartialEq)]
enum Counters {
    /// drops, coalesced, unparsable and frames lost, zeros included.
    Wide,
    /// The same without a zero "frames lost".
    Normal,
    /// Only the counters that are not zero ("no losses" when all are): room for a notice.
    NonZero,
}

fn counters<'a>(th: &Theme, vm: &ViewModel, form: Counters) -> Vec<Span<'a>> {
    let s = &vm.status;
    let item = |name: &str, n: u64| -> Vec<Span<'a>> {
        let style = if n > 0 { th.warn } else { th.dim };
        vec![
            Span::styled(format!("{name} "), th.dim),
            Span::styled(units::count(n), style),
        ]
    };
    let losses = [
        ("drops", s.dropped_events, true),
        ("coalesced", s.coalesced_doorbells, true),
        ("unparsable", s.unparsable_wqes, true),
        ("frames lost", s.frames_lost, form == Counters::Wide),
    ];
    let mut v = Vec::new();
    for (name, n, shown) in losses {
        if n > 0 || (shown && form != Counters::NonZero) {
            if !v.is_empty() {
                v.push(Span::styled(" · ", th.dim));
            }
            v.extend(item(name, n));
        }
    }
    if v.is_empty() {
        v.push(Span::styled("no losses", th.dim));
    }
    if s.errors > 0 {
        v.push(Span::styled(" · ", th.dim));
        v.push(Span::styled(units::count(s.errors), th.error));
        v.push(Span::styled(" failed", th.dim));
    }
    if s.refused > 0 {
        v.push(Span::styled(" · ", th.dim));
        v.push(Span::styled("provider busy: ", th.dim));
        v.push(Span::styled(units::count(s.refused), th.warn));
        v.push(Span::styled(" refused", th.dim));
    }
    v.push(Span::raw(" "));
    v
}

/// Status line: loss counters always on the right; on the left the latest error (✗, when
/// `with_error`; short terminals show it in the footer instead), or (when `warns` is given, on
/// short terminals) the first warning, then the source's notice (» in the normal text colour).
pub(crate) fn status_line<'a>(
    th: &Theme,
    vm: &'a ViewModel,
    warns: Option<&[Warning]>,
    with_error: bool,
    w: usize,
) -> Line<'a> {
    let notice_w = vm.status.notice.as_ref().map_or(0, |n| n.width() + 4);
    // A hung collective, first of the warnings shown here: the counters keep only what is not
    // zero, so that the warning names the ranks it waits for.
    let hung = warns.is_some_and(|ws| ws.iter().any(|w| w.kind.urgent()));
    // A warning on the left is worth more than counters that say 0 (issue 39, item 3: a warning
    // was cut to "node2 … (+5 more)" to keep "drops 0 · coalesced 0 · unparsable 0").
    let warned = warns.is_some_and(|ws| ws.iter().any(|w| w.kind != WarningKind::Drops))
        && !(with_error && vm.status.message.is_some());
    let form = if (hung || warned) && w < 120 {
        Counters::NonZero
    } else if w >= 120 {
        Counters::Wide
    } else {
        Counters::Normal
    };
    let mut right = counters(th, vm, form);
    if hung && w < 120 && right.iter().map(|s| s.width()).sum::<usize>() + 52 > w {
        right = vec![
            Span::styled("drops ", th.dim),
            Span::styled(units::count(vm.status.dropped_events), th.warn),
        ];
        // Failed operations stay in sight beside a stall or a hang (they may be its cause).
        if vm.status.errors > 0 {
            right.push(Span::styled(" · ", th.dim));
            right.push(Span::styled(units::count(vm.status.errors), th.error));
            right.push(Span::styled(" failed", th.dim));
        }
        right.push(Span::raw(" "));
    }
    let mut rw: usize = right.iter().map(|s| s.width()).sum();
    // A notice names things a person needs whole (the program's state, its log file): zero loss
    // counters give way to it, "frames lost" first (a count that is not zero always stays).
    for smaller in [Counters::Normal, Counters::NonZero] {
        if form == Counters::Wide || (form == Counters::Normal && smaller == Counters::NonZero) {
            if notice_w == 0 || rw + notice_w + 16 <= w {
                break;
            }
            right = counters(th, vm, smaller);
            rw = right.iter().map(|s| s.width()).sum();
        }
    }
    let room = w.saturating_sub(rw + 2);
    let mut all_clear = false;
    let mut left: Vec<Span> = if let Some(msg) = vm.status.message.as_ref().filter(|_| with_error) {
        vec![Span::styled(
            format!(" ✗ {}", truncate(msg, room.saturating_sub(3))),
            th.error,
        )]
    } else if let Some(ws) = warns {
        // Drops are already in the counters on the right: show the first other warning.
        let first = ws
            .iter()
            .find(|w| w.kind == WarningKind::StalledEdge)
            .or_else(|| ws.iter().find(|w| w.kind == WarningKind::HungCollective))
            .or_else(|| ws.iter().find(|w| w.kind != WarningKind::Drops))
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
                format!(" ⚠ {} warning{}", ws.len(), units::plural(ws.len() as u64)),
                th.warn,
            )],
            Some(first) => {
                let more = if ws.len() > 1 {
                    format!(" (+{} more)", ws.len() - 1)
                } else {
                    String::new()
                };
                let fits = room.saturating_sub(3 + more.width());
                let message = if first.message.width() > fits && !first.short.is_empty() {
                    &first.short
                } else {
                    &first.message
                };
                let text = truncate(message, fits);
                vec![
                    Span::styled(format!(" ⚠ {text}"), th.warn),
                    Span::styled(more, th.dim),
                ]
            }
        }
    } else if vm.status.errors > 0 {
        // Not "no errors" while operations failed (the warnings above say which).
        all_clear = true;
        vec![Span::styled(
            format!(
                " ✗ {} failed operation{}",
                units::count(vm.status.errors),
                units::plural(vm.status.errors)
            ),
            th.error,
        )]
    } else {
        all_clear = true;
        vec![Span::styled(" ✓ no errors", th.ok)]
    };
    if let Some(n) = &vm.status.notice {
        // "✓ no errors" gives way to a notice that would otherwise be cut.
        if all_clear && left.iter().map(|s| s.width()).sum::<usize>() + notice_w + 3 > room {
            left.clear();
        }
        let used: usize = left.iter().map(|s| s.width()).sum();
        let space = room.saturating_sub(used + 3);
        if space >= 8 {
            left.push(Span::styled("  » ", th.key));
            left.push(Span::styled(truncate(n, space), th.text));
        }
    }
    left_right(left, right.clone(), w).unwrap_or_else(|| Line::from(right))
}

pub(crate) fn warnings_line<'a>(th: &Theme, warns: &[Warning], w: usize) -> Line<'a> {
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

pub(crate) fn footer_line(app: &App, w: usize) -> Line<'static> {
    let th = &app.theme;
    if app.filter_editing {
        let mut spans = vec![
            Span::styled(" / ", th.key),
            Span::styled(app.filter.clone(), th.text),
            Span::styled("▏", th.key),
        ];
        let used = 4 + app.filter.width();
        match app.parsed_filter().unknown_keys_message() {
            Some(m) => spans.push(Span::styled(
                truncate(&format!("  ✗ {m}"), w.saturating_sub(used)),
                th.error,
            )),
            None => {
                let hint = "  Enter keep · Esc cancel · host= rank= pid= qpn= layer= op= gpu= peer= type= state= (~ substring) or text";
                spans.push(Span::styled(truncate(hint, w.saturating_sub(used)), th.dim));
            }
        }
        return Line::from(spans);
    }
    if let Some(f) = &app.flash {
        return Line::from(Span::styled(
            truncate(&format!(" » {f}"), w.saturating_sub(1)),
            th.key,
        ));
    }
    let tab = app.tab;
    let table = matches!(tab, Tab::Overview | Tab::Qps | Tab::Gpus | Tab::Nodes);
    // (key, what, priority: lower shows first when space is short)
    let mut items: Vec<(&str, &str, u8)> = vec![("q", "quit", 0)];
    if let Some(l) = &app.interrupt_label {
        items.push(("^C", l, 0));
    }
    items.push(("?", "help", 0));
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
        // An unknown key goes before the key hints: it is why the rows may be missing.
        if let Some(m) = app.parsed_filter().unknown_keys_message() {
            let m = truncate(&format!("✗ {m} "), budget);
            budget = budget.saturating_sub(m.width());
            spans.push(Span::styled(m, th.error));
        }
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
