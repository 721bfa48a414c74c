//! The QPs tab: one row per QP or endpoint (unattributed traffic always last), and the selected
//! row in detail on tall terminals.

use super::{ctx, dash_if_empty, num, opt_rank};
use crate::app::{App, Tab};
use crate::model::{EndpointRow, ViewModel};
use crate::units;
use crate::widgets::section::{section, title_line};
use crate::widgets::table::{Col, Key, render_table, sort_rows, sort_rows_front};
use crate::widgets::text::styled;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

super::traffic!(
    EndpointRow,
    totals(tx_bytes, rx_bytes),
    now(tx_bps, rx_bps),
    window(tx_bps_window, rx_bps_window)
);

/// The columns; "WRs out" only where some row is a queue sigmatop follows (verbs QPs).
///
/// At 80 columns (the ssh case) what stays is whose row it is (host, rank, pid), what it is
/// (QPN/ep, peer), its rates and work outstanding (ops/s, posted, WRs out); the layer (one value
/// on most jobs), doorbells, type and state go first, then the window's rates, the totals and
/// the opcode mix (issue 39, items 3 and 7).
fn endpoint_cols(app: &App, queues: bool) -> Vec<Col<EndpointRow>> {
    let [tx_now, rx_now] = super::now_rate_cols(app);
    let [tx_window, rx_window] = super::window_rate_cols(app, 6);
    let [sent_total, received_total] = super::total_cols(app, 7);
    [
        Col::<EndpointRow>::left(
            "host",
            0,
            14,
            |r, _| Span::raw(r.host.clone()),
            |r| Key::Str(&r.host),
        ),
        Col::right(
            "rank",
            1,
            5,
            |r, _| num(opt_rank(r.rank)),
            |r| Key::Num(r.rank.map(f64::from).unwrap_or(f64::MAX)),
        ),
        Col::right(
            "pid",
            2,
            8,
            // The unattributed row is its process's too: its pid tells two of them apart.
            |r, _| num(r.pid.to_string()),
            |r| Key::Num(f64::from(r.pid)),
        ),
        // "libfabric" is the longest name (`--layers`' names, issue 39 item 5).
        Col::left(
            "layer",
            3,
            9,
            |r, _| Span::raw(r.layer.clone()),
            |r| Key::Str(&r.layer),
        ),
        Col::<EndpointRow>::left(
            "QPN/ep",
            0,
            14,
            // Whose unattributed traffic it is, also where the pid column does not fit.
            |r, c| {
                if r.unattributed {
                    styled(format!("pid {}", r.pid), c.th.warn)
                } else {
                    Span::raw(r.local_id.clone())
                }
            },
            |r| Key::Str(&r.local_id),
        )
        .mid(),
        // Wide enough for an untraced peer's address (`fe80::2c9:300:0:18 qp 0x100`); cut in
        // the middle, where its ends (the network, the QPN) tell peers apart.
        Col::<EndpointRow>::left(
            "peer",
            1,
            28,
            |r, c| {
                if r.unattributed {
                    styled("(unattributed)".into(), c.th.warn)
                } else {
                    Span::raw(r.peer.label())
                }
            },
            |r| Key::Text(r.peer.label()),
        )
        .mid(),
        Col::left(
            "type",
            4,
            10,
            |r, _| Span::raw(dash_if_empty(&r.transport)),
            |r| Key::Str(&r.transport),
        ),
        Col::left(
            "state",
            5,
            6,
            |r, _| Span::raw(dash_if_empty(&r.state)),
            |r| Key::Str(&r.state),
        ),
        tx_now,
        rx_now,
        tx_window,
        rx_window,
        sent_total,
        received_total,
        Col::right(
            "ops/s",
            1,
            7,
            |r, _| num(units::si(r.ops_per_s)),
            |r| Key::Num(r.ops_per_s),
        ),
        Col::left(
            "ops by opcode",
            8,
            30,
            |r, _| Span::raw(units::mix(&r.ops_by_opcode, 3)),
            |r| Key::Num(r.ops_by_opcode.iter().map(|o| o.1 as f64).sum()),
        ),
        Col::right(
            "db/s",
            4,
            7,
            |r, _| {
                num(r
                    .doorbells_per_s
                    .map(units::si)
                    .unwrap_or_else(|| "—".into()))
            },
            |r| Key::Num(r.doorbells_per_s.unwrap_or(-1.0)),
        ),
    ]
    .into_iter()
    .chain(queues.then(|| {
        Col::<EndpointRow>::right(
            "WRs out",
            2,
            8,
            // Send work outstanding, and for how long none of it completed.
            // One width for every row ("WRs out" and its sort mark: 8), so that sorting by it
            // never moves it off screen.
            |r, c| match &r.queue {
                Some(q) if q.sq_outstanding > 0 => {
                    let text = format!(
                        "{:>8}",
                        format!(
                            "{} {}",
                            units::count(q.sq_outstanding),
                            units::secs(q.sq_stalled_s)
                        )
                    );
                    if q.stalled {
                        styled(text, c.th.error)
                    } else {
                        num(text)
                    }
                }
                Some(_) => num(format!("{:>8}", "0")),
                None => num(format!("{:>8}", "—")),
            },
            |r| {
                Key::Num(
                    r.queue
                        .as_ref()
                        .map_or(-1.0, |q| q.sq_outstanding as f64 + q.sq_stalled_s * 1e12),
                )
            },
        )
    }))
    .chain([
        // Receive work requests posted and not completed.
        Col::<EndpointRow>::right(
            "posted",
            2,
            9,
            |r, _| num(r.posted.map(units::count).unwrap_or_else(|| "—".into())),
            |r| Key::Num(r.posted.map(|p| p as f64).unwrap_or(-1.0)),
        ),
        Col::<EndpointRow>::left(
            "",
            0,
            8,
            // The core's mark, from the rule the warnings follow (a silent process, a QP that
            // waits on the far end a warning names, an idle QP with receives posted).
            |r, c| {
                if r.queue.as_ref().is_some_and(|q| q.stalled) {
                    return styled("⚠ stall".into(), c.th.error);
                }
                if r.mark.is_empty() {
                    Span::raw("")
                } else {
                    styled(format!("⚠ {}", r.mark), c.th.warn)
                }
            },
            |r| {
                if r.queue.as_ref().is_some_and(|q| q.stalled) {
                    Key::Str("~stall")
                } else {
                    Key::Str(&r.mark)
                }
            },
        ),
    ])
    .collect()
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Qps.index();
    let cols = endpoint_cols(app, vm.endpoints.iter().any(|r| r.queue.is_some()));
    // Unattributed traffic always sits at the bottom, whatever the sort. Of the (possibly
    // thousands of) other rows, only those up to the cursor's page need to be in order.
    let (mut rows, mut unattributed): (Vec<&EndpointRow>, Vec<&EndpointRow>) = vm
        .endpoints
        .iter()
        .filter(|r| filter.endpoint(r))
        .partition(|r| !r.unattributed);
    let (col, desc) = (app.sort[t].column, app.sort[t].descending);
    let front = app.selected[t].saturating_add(area.height as usize);
    sort_rows_front(&mut rows, &cols, col, desc, front);
    if rows.len() < front {
        sort_rows(&mut unattributed, &cols, col, desc);
    }

    let detail_h: u16 = if area.height >= 30 { 7 } else { 0 };
    let [top, bottom] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(detail_h)]).areas(area);
    // The count is of QPs and endpoints, as in the header; each process's unattributed row is
    // counted apart.
    let attributed = vm.endpoints.iter().filter(|e| !e.unattributed).count();
    let attributed_shown = rows.len();
    let unattr_rows = unattributed.len();
    let unattr: f64 = vm
        .endpoints
        .iter()
        .filter(|e| e.unattributed)
        .map(|e| e.tx_bps + e.rx_bps)
        .sum();
    let extra = match (unattr_rows, unattr > 0.0) {
        // Said, not shown as rows of zeros (issue 39, item 7).
        _ if !vm.endpoints.is_empty() && !vm.endpoints.iter().any(|e| e.unattributed) => {
            "none unattributed".to_string()
        }
        (0, _) => String::new(),
        (n, false) => format!("+ {n} unattributed row{} (last)", units::plural(n as u64)),
        (n, true) => format!(
            "+ {n} unattributed row{} (last): {}",
            units::plural(n as u64),
            units::rate_unit(unattr, app.units)
        ),
    };
    rows.append(&mut unattributed);
    let block = section(
        th,
        title_line(th, "QPs & endpoints", attributed_shown, attributed, &extra),
    );
    let inner = block.inner(top);
    frame.render_widget(block, top);
    let c = ctx(app);
    render_table(
        frame,
        inner,
        &c,
        &cols,
        &rows,
        Some((app.sort[t].column, app.sort[t].descending)),
        Some(app.selected[t]),
        true,
    );
    if detail_h > 0 {
        let sel = app.selected[t].min(rows.len().saturating_sub(1));
        if let Some(r) = rows.get(sel) {
            endpoint_detail(frame, bottom, app, r);
        }
    }
}

fn endpoint_detail(frame: &mut Frame, area: Rect, app: &App, r: &EndpointRow) {
    let th = &app.theme;
    let u = app.units;
    let what = if r.unattributed {
        "unattributed traffic".to_string()
    } else {
        format!("{} {}", r.layer, r.local_id)
    };
    let block = section(
        th,
        Line::from(vec![
            Span::styled(format!(" {what} "), th.title),
            Span::styled("selected row ", th.dim),
        ]),
    );
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let rank = r.rank.map(|r| format!(" rank {r}")).unwrap_or_default();
    let mut lines = vec![
        Line::from(vec![
            Span::raw(format!(" {}{} pid {}", r.host, rank, r.pid)),
            Span::styled("  →  ", th.dim),
            Span::raw(r.peer.label()),
            Span::styled(
                format!(
                    "   {} {}",
                    dash_if_empty(&r.transport),
                    dash_if_empty(&r.state)
                ),
                th.dim,
            ),
        ]),
        Line::from(vec![Span::styled(
            format!(
                " ▲ tx  now {:>11}   {} avg {:>11}   total {:>9}",
                units::rate_unit(r.tx_bps, u),
                app.window.label(),
                units::rate_unit(r.tx_bps_window, u),
                units::volume_unit(r.tx_bytes as f64, u)
            ),
            th.tx,
        )]),
        Line::from(vec![Span::styled(
            format!(
                " ▼ rx  now {:>11}   {} avg {:>11}   total {:>9}",
                units::rate_unit(r.rx_bps, u),
                app.window.label(),
                units::rate_unit(r.rx_bps_window, u),
                units::volume_unit(r.rx_bytes as f64, u)
            ),
            th.rx,
        )]),
    ];
    let ops: Vec<String> = r
        .ops_by_opcode
        .iter()
        .map(|(n, c)| format!("{n} {}", units::count(*c)))
        .collect();
    lines.push(Line::from(vec![
        Span::styled(" ops by opcode (since start): ", th.dim),
        Span::raw(if ops.is_empty() {
            "—".to_string()
        } else {
            ops.join(" · ")
        }),
    ]));
    let mut rates = vec![
        Span::styled(" ops/s ", th.dim),
        Span::raw(units::si(r.ops_per_s)),
        Span::styled("   doorbells/s ", th.dim),
        Span::raw(
            r.doorbells_per_s
                .map(units::si)
                .unwrap_or_else(|| "—".into()),
        ),
    ];
    match &r.queue {
        // A queue sigmatop follows: its outstanding work, receives included.
        Some(q) => {
            rates.push(Span::styled("  ·", th.dim));
            rates.extend(queue_spans(app, q));
        }
        None => {
            rates.push(Span::styled("   receives posted, not completed ", th.dim));
            rates.push(Span::raw(
                r.posted.map(units::count).unwrap_or_else(|| "—".into()),
            ));
        }
    }
    lines.push(Line::from(rates));
    // What it waits on comes right after whose row it is: the pane is 5 lines high.
    if !r.waits_on.is_empty() {
        lines.insert(
            1,
            Line::from(vec![
                Span::styled(
                    if r.mark == "silent" {
                        " ⚠ "
                    } else {
                        " ⚠ waits on "
                    },
                    th.warn,
                ),
                Span::styled(r.waits_on.clone(), th.warn),
            ]),
        );
    }
    if r.errors > 0 {
        lines.push(Line::from(vec![
            Span::styled(" failed: ", th.dim),
            Span::styled(units::count(r.errors), th.error),
            Span::styled(
                if r.errors == 1 {
                    " operation reported an error (an error completion, a failed call or endpoint)"
                } else {
                    " operations reported an error (error completions, failed calls or endpoints)"
                },
                th.dim,
            ),
        ]));
    }
    if r.refused > 0 {
        lines.push(Line::from(vec![
            Span::styled(" provider busy: ", th.dim),
            Span::styled(units::count(r.refused), th.warn),
            Span::styled(
                " posts refused (retried by the program; not counted as operations)",
                th.dim,
            ),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The selected QP's queues: " send 12 out, none completed 4.1s (oldest 4.1s) of 1,000 posted ·
/// receive 382 out (oldest 9.8s) · last completion 4.1s ago · transport retry exceeded 1, flushed
/// 127".
fn queue_spans<'a>(app: &App, q: &crate::model::QueueRow) -> Vec<Span<'a>> {
    let th = &app.theme;
    let mut v = vec![Span::styled(" send ", th.dim)];
    if q.blind {
        v.push(Span::raw(format!(
            "{} posted, completions not seen (extended CQ)",
            units::count(q.sq_posted)
        )));
    } else if q.sq_outstanding > 0 {
        let style = if q.stalled { th.error } else { th.text };
        v.push(Span::styled(
            format!(
                "{} out, none completed {} (oldest {})",
                units::count(q.sq_outstanding),
                units::secs(q.sq_stalled_s),
                units::secs(q.sq_oldest_s)
            ),
            style,
        ));
        v.push(Span::styled(
            format!(" of {} posted", units::count(q.sq_posted)),
            th.dim,
        ));
    } else {
        v.push(Span::raw(format!("{} done", units::count(q.sq_completed))));
    }
    v.push(Span::styled(" · receive ", th.dim));
    if q.rq_outstanding > 0 {
        v.push(Span::raw(format!(
            "{} out (oldest {})",
            units::count(q.rq_outstanding),
            units::secs(q.rq_oldest_s)
        )));
    } else {
        v.push(Span::raw("0 out"));
    }
    v.push(Span::styled(" · last completion ", th.dim));
    v.push(Span::raw(match q.last_completion_s {
        Some(s) => format!("{} ago", units::secs(s)),
        None => "none yet".into(),
    }));
    if q.health != "live" && !q.health.is_empty() {
        v.push(Span::styled(format!(" · {}", q.health), th.error));
    }
    if !q.errors.is_empty() {
        let e: Vec<String> = q
            .errors
            .iter()
            .map(|(n, c)| format!("{n} {}", units::count(*c)))
            .collect();
        v.push(Span::styled(format!(" · {}", e.join(", ")), th.error));
    }
    v
}
