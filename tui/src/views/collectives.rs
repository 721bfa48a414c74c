//! The Collectives tab (`c`): NCCL collectives per communicator and collective (count, bytes,
//! algorithm, protocol, channels, time, bus bandwidth), each communicator's arrival spread with
//! its straggler, and each rank's progress (the collective open on it, how often it came last).

use super::{ctx, num};
use crate::app::{App, Tab};
use crate::model::{CollRankRow, CollRow, ViewModel};
use crate::units;
use crate::widgets::section::{section, title_line};
use crate::widgets::table::{Col, Key, render_table, sort_rows};
use crate::widgets::text::styled;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

fn coll_cols(app: &App) -> Vec<Col<CollRow>> {
    let v = app.units.volume();
    let u = app.units.rate();
    vec![
        Col::left(
            "comm",
            0,
            8,
            |r, _| Span::raw(r.comm.clone()),
            |r| Key::Str(&r.comm),
        ),
        Col::right(
            "ranks",
            2,
            5,
            |r, _| num(r.ranks.clone()),
            |r| Key::Str(&r.ranks),
        ),
        Col::left(
            "collective",
            0,
            13,
            |r, _| Span::raw(r.func.clone()),
            |r| Key::Str(&r.func),
        ),
        Col::left(
            "algo",
            1,
            6,
            |r, _| Span::raw(r.algo.clone()),
            |r| Key::Str(&r.algo),
        ),
        Col::left(
            "proto",
            1,
            6,
            |r, _| Span::raw(r.proto.clone()),
            |r| Key::Str(&r.proto),
        ),
        Col::right(
            "ch",
            2,
            3,
            |r, _| num(r.channels.to_string()),
            |r| Key::Num(f64::from(r.channels)),
        ),
        Col::right(
            "count",
            0,
            8,
            |r, _| num(units::count(r.count)),
            |r| Key::Num(r.count as f64),
        ),
        Col::right(
            format!("{v}/rank"),
            0,
            10,
            |r, c| num(units::volume(r.bytes as f64, c.app.units)),
            |r| Key::Num(r.bytes as f64),
        ),
        Col::right(
            "time",
            0,
            7,
            |r, _| num(units::nanos(r.time_s * 1e9)),
            |r| Key::Num(r.time_s),
        ),
        Col::right(
            format!("busbw {u}"),
            0,
            11,
            |r, c| styled(units::rate(r.busbw_bps, c.app.units), c.th.tx),
            |r| Key::Num(r.busbw_bps),
        ),
        Col::right(
            "open",
            0,
            5,
            |r, c| {
                if r.open > 0 {
                    styled(r.open.to_string(), c.th.warn)
                } else {
                    num("0".into())
                }
            },
            |r| Key::Num(r.open as f64),
        ),
    ]
}

fn rank_cols() -> Vec<Col<CollRankRow>> {
    vec![
        Col::left(
            "comm",
            0,
            8,
            |r, _| Span::raw(r.comm.clone()),
            |r| Key::Str(&r.comm),
        ),
        Col::right(
            "rank",
            0,
            5,
            |r, _| num(r.rank.to_string()),
            |r| Key::Num(f64::from(r.rank)),
        ),
        Col::left(
            "host",
            1,
            14,
            |r, _| Span::raw(r.host.clone()),
            |r| Key::Str(&r.host),
        ),
        Col::right(
            "pid",
            3,
            8,
            |r, _| num(r.pid.to_string()),
            |r| Key::Num(f64::from(r.pid)),
        ),
        Col::right(
            "started",
            2,
            8,
            |r, _| num(units::count(r.started)),
            |r| Key::Num(r.started as f64),
        ),
        Col::right(
            "done",
            0,
            8,
            |r, _| num(units::count(r.completed)),
            |r| Key::Num(r.completed as f64),
        ),
        Col::left(
            "open",
            0,
            22,
            |r, c| {
                if r.open.is_empty() {
                    styled("—".into(), c.th.dim)
                } else {
                    let s = format!("{} {}", r.open, units::nanos(r.open_s * 1e9));
                    if r.hung {
                        styled(s, c.th.warn)
                    } else {
                        Span::raw(s)
                    }
                }
            },
            |r| Key::Num(r.open_s),
        ),
        Col::right(
            "last×",
            1,
            6,
            |r, _| num(r.last_arrivals.to_string()),
            |r| Key::Num(r.last_arrivals as f64),
        ),
        Col::right(
            "lag",
            1,
            7,
            |r, _| num(units::nanos(r.mean_lag_s * 1e9)),
            |r| Key::Num(r.mean_lag_s),
        ),
        Col::left(
            "state",
            0,
            14,
            |r, c| {
                if r.state.is_empty() {
                    styled("reporting".into(), c.th.ok)
                } else if r.state.starts_with("silent") {
                    styled(r.state.clone(), c.th.error)
                } else {
                    styled(r.state.clone(), c.th.dim)
                }
            },
            |r| Key::Str(&r.state),
        ),
        Col::left(
            "waits (closest to the cause first)",
            3,
            90,
            |r, c| {
                if r.waits.is_empty() {
                    styled("—".into(), c.th.dim)
                } else if r.waits_hot {
                    styled(r.waits.clone(), c.th.warn)
                } else {
                    Span::raw(r.waits.clone())
                }
            },
            |r| Key::Str(&r.waits),
        ),
    ]
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let m = &vm.collectives;
    let t = Tab::Collectives.index();
    let cols = coll_cols(app);
    let mut rows: Vec<&CollRow> = m.rows.iter().collect();
    sort_rows(&mut rows, &cols, app.sort[t].column, app.sort[t].descending);
    let rcols = rank_cols();
    let ranks: Vec<&CollRankRow> = m.ranks.iter().collect();
    let gpu_lines = m.arrivals.iter().filter(|a| a.gpu_collectives > 0).count();
    let arr_h = (m.arrivals.len() + gpu_lines).max(1) as u16 + 1;
    let [top, mid, bottom] = Layout::vertical([
        Constraint::Max(rows.len().max(1) as u16 + 2),
        Constraint::Length(arr_h),
        Constraint::Min(3),
    ])
    .areas(area);
    // What the figures miss, only where something is missing: events of types the plugin does
    // not read take nothing from them (`report` counts them).
    let lost: Vec<String> = [
        (m.dropped_records, "NCCL records dropped"),
        (m.untracked, "events of calls never seen start"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("⚠ {} {what}", units::count(*n)))
    .collect();
    let losses = if lost.is_empty() {
        "count, bytes per rank · the slowest rank's time".into()
    } else {
        lost.join(" · ")
    };
    let block = section(
        th,
        title_line(th, "Collectives", rows.len(), m.rows.len(), &losses),
    );
    let inner = block.inner(top);
    frame.render_widget(block, top);
    if m.rows.is_empty() {
        let text = match &app.collectives_hint {
            Some(h) => format!(" {h}"),
            None => {
                " no NCCL collectives seen (NCCL_PROFILER_PLUGIN: `sigmatop run` sets it)".into()
            }
        };
        frame.render_widget(
            Paragraph::new(Span::styled(text, th.dim)).wrap(ratatui::widgets::Wrap { trim: false }),
            inner,
        );
    } else {
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
    }
    let block = section(
        th,
        Line::from(vec![
            Span::styled(" Arrival ", th.title),
            Span::styled(
                "spread between the first and last rank, latest collectives ",
                th.dim,
            ),
        ]),
    );
    let inner = block.inner(mid);
    frame.render_widget(block, mid);
    let lines: Vec<Line> = if m.arrivals.is_empty() {
        vec![Line::from(Span::styled(" —", th.dim))]
    } else {
        let mut lines = Vec::new();
        for a in &m.arrivals {
            let gpu = a.gpu_collectives > 0;
            let mut spans = vec![
                Span::raw(format!(" {} ", a.comm)),
                Span::styled(format!("{:<12} ", a.name), th.dim),
                Span::raw(format!(
                    "{}{} compared · median {} · max ",
                    if gpu { "host calls: " } else { "" },
                    a.collectives,
                    units::nanos(a.median_spread_s * 1e9)
                )),
                Span::styled(units::nanos(a.max_spread_s * 1e9), th.warn),
            ];
            if let Some(r) = a.max_last_rank {
                spans.push(Span::raw(" last: "));
                spans.push(Span::styled(format!("r{r}"), th.warn));
            }
            lines.push(Line::from(spans));
            if gpu {
                let mut spans = vec![
                    Span::raw(format!(" {} ", a.comm)),
                    Span::styled(format!("{:<12} ", a.name), th.dim),
                    Span::raw(format!(
                        "GPU kernels: {} compared · median {} · max ",
                        a.gpu_collectives,
                        units::nanos(a.gpu_median_spread_s * 1e9)
                    )),
                    Span::styled(units::nanos(a.gpu_max_spread_s * 1e9), th.warn),
                ];
                if let Some(r) = a.gpu_max_last_rank {
                    spans.push(Span::raw(" last: "));
                    spans.push(Span::styled(format!("r{r}"), th.warn));
                }
                lines.push(Line::from(spans));
            }
        }
        lines
    };
    frame.render_widget(Paragraph::new(lines), inner);
    let block = section(
        th,
        title_line(
            th,
            "Ranks",
            ranks.len(),
            m.ranks.len(),
            // Not "Ranks 2 · hung after ..." (read as two ranks hung, issue 39 item 7).
            &format!("a collective open over {:.1}s counts as hung", m.hang_s),
        ),
    );
    let inner = block.inner(bottom);
    frame.render_widget(block, bottom);
    let c = ctx(app);
    render_table(frame, inner, &c, &rcols, &ranks, None, None, false);
}
