//! The Overview: one row per traced process, the bandwidth over time, and the live warnings.

use super::{ctx, num, opt_rank};
use crate::app::{App, Tab};
use crate::model::{ProcessRow, ViewModel};
use crate::units;
use crate::warnings::Warning;
use crate::widgets::section::{section, title_line};
use crate::widgets::sparkline::spark;
use crate::widgets::table::{Col, Key, render_table, sort_rows};
use crate::widgets::text::styled;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};

super::traffic!(ProcessRow, totals(tx_bytes, rx_bytes), now(tx_bps, rx_bps));

/// "ibverbs,libfabric": the layer names as `--layers`, the QPs tab and the filter spell them.
fn layer_list(layers: &[String]) -> String {
    layers.join(",")
}

fn process_cols(app: &App) -> Vec<Col<ProcessRow>> {
    let [tx_now, rx_now] = super::now_rate_cols(app);
    let [sent_total, received_total] = super::total_cols(app, 3);
    vec![
        Col::left(
            "host",
            0,
            16,
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
            "rank",
            0,
            6,
            |r, _| match (r.rank, r.child_of_rank) {
                (None, Some(parent)) => num(format!("↳{parent}")),
                (rank, _) => num(opt_rank(rank)),
            },
            // A rank's forked children sort right after it.
            |r| {
                Key::Num(
                    r.rank
                        .map(f64::from)
                        .or(r.child_of_rank.map(|p| f64::from(p) + 0.5))
                        .unwrap_or(f64::MAX),
                )
            },
        ),
        Col::left(
            "mode",
            4,
            9,
            |r, _| Span::raw(r.mode.clone()),
            |r| Key::Str(&r.mode),
        ),
        Col::left(
            "layers",
            5,
            28,
            |r, _| Span::raw(layer_list(&r.layers)),
            |r| Key::Text(layer_list(&r.layers)),
        ),
        tx_now,
        rx_now,
        sent_total,
        received_total,
        Col::right(
            "ops/s",
            1,
            8,
            |r, _| num(units::si(r.ops_per_s)),
            |r| Key::Num(r.ops_per_s),
        ),
        Col::right(
            "drops",
            2,
            9,
            |r, c| {
                styled(
                    units::count(r.drops),
                    if r.drops > 0 { c.th.warn } else { c.th.dim },
                )
            },
            |r| Key::Num(r.drops as f64),
        ),
        Col::left(
            "state",
            1,
            12,
            |r, c| {
                if !r.end.is_empty() {
                    styled(r.end.clone(), c.th.error)
                } else if r.exited {
                    styled("exited".into(), c.th.dim)
                } else if let Some(s) = r.silent_s {
                    styled(super::silent_label(s), c.th.warn)
                } else {
                    styled("up".into(), c.th.ok)
                }
            },
            |r| {
                Key::Num(if r.exited {
                    1.0
                } else if r.silent_s.is_some() {
                    2.0
                } else {
                    0.0
                })
            },
        ),
    ]
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel, warns: &[Warning]) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Overview.index();
    let cols = process_cols(app);
    let mut rows: Vec<&ProcessRow> = vm.processes.iter().filter(|r| filter.process(r)).collect();
    sort_rows(&mut rows, &cols, app.sort[t].column, app.sort[t].descending);

    // Heights: the bandwidth panel needs 3 lines, the warnings panel wants one per warning; the
    // process table takes what it needs of the rest and the bandwidth panel grows into what is left.
    let h = area.height;
    let bw_min = 3u16;
    // No box when there is nothing to warn about: the warnings line below says "✓ no warnings"
    // once, and the bandwidth panel gets the room.
    let warn_want = if warns.is_empty() {
        0
    } else {
        warns.len() as u16 + 1
    };
    let table_want = (rows.len() as u16 + 2).max(3);
    let warn_h = warn_want.min(h.saturating_sub(bw_min + 4)).min(9);
    let table_h = table_want.min(h.saturating_sub(bw_min + warn_h));
    let [top, mid, bottom] = Layout::vertical([
        Constraint::Length(table_h),
        Constraint::Min(bw_min),
        Constraint::Length(warn_h),
    ])
    .areas(area);
    let exited = vm.processes.iter().filter(|p| p.exited).count();
    let silent = vm
        .processes
        .iter()
        .filter(|p| !p.exited && p.silent_s.is_some())
        .count();
    let mut notes: Vec<String> = Vec::new();
    if silent > 0 {
        notes.push(format!("{silent} silent"));
    }
    if exited > 0 {
        notes.push(format!("{exited} exited, totals kept"));
    }
    let extra = notes.join(", ");
    let block = section(
        th,
        title_line(th, "Processes", rows.len(), vm.processes.len(), &extra),
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

    // Bandwidth over time.
    let hist = &vm.bandwidth_history;
    let max = hist
        .iter()
        .flat_map(|(a, b)| [*a, *b])
        .fold(0.0f64, f64::max);
    let block = section(
        th,
        Line::from(vec![
            Span::styled(" Bandwidth ", th.title),
            Span::styled(
                format!(
                    "{} samples · peak {} ",
                    hist.len(),
                    units::rate_unit(max, app.units)
                ),
                th.dim,
            ),
        ]),
    );
    let inner = block.inner(mid);
    let (tx_now, rx_now) = (vm.header.tx_bps, vm.header.rx_bps);
    let label_w = 20usize;
    let spark_w = (inner.width as usize).saturating_sub(label_w + 1);
    // The time the chart spans (issue 39, item 7: it had no time axis): in the title where the
    // chart is two rows, on an axis line under it where it is tall.
    let step = vm.bandwidth_interval_s;
    let tall = inner.height >= 7 && step > 0.0;
    let shown = hist.len().min(if inner.height < 6 {
        spark_w
    } else {
        (inner.width as usize).saturating_sub(label_w)
    });
    let block = if step > 0.0 && shown > 0 {
        section(
            th,
            Line::from(vec![
                Span::styled(" Bandwidth ", th.title),
                Span::styled(
                    format!(
                        "last {} · {} a column · peak {} ",
                        units::secs(shown as f64 * step),
                        units::nanos(step * 1e9),
                        units::rate_unit(max, app.units)
                    ),
                    th.dim,
                ),
            ]),
        )
    } else {
        block
    };
    let inner = block.inner(mid);
    frame.render_widget(block, mid);
    let label = |arrow: &str, v: f64| format!(" {arrow} {:>12}  ", units::rate_unit(v, app.units));
    // Each row is scaled to its own largest sample on screen, and its "max" line says that one
    // (issue 39, item 2: it said the larger of ▲ and ▼ under both).
    let row_max = |pick: usize, n: usize| {
        hist[hist.len().saturating_sub(n)..]
            .iter()
            .map(|h| if pick == 0 { h.0 } else { h.1 })
            .fold(0.0f64, f64::max)
    };
    if inner.height < 6 {
        let tx: Vec<f64> = hist.iter().map(|h| h.0).collect();
        let rx: Vec<f64> = hist.iter().map(|h| h.1).collect();
        let lines = vec![
            Line::from(vec![
                Span::styled(label("▲ tx", tx_now), th.tx),
                Span::styled(spark(&tx, row_max(0, spark_w), spark_w), th.tx),
            ]),
            Line::from(vec![
                Span::styled(label("▼ rx", rx_now), th.rx),
                Span::styled(spark(&rx, row_max(1, spark_w), spark_w), th.rx),
            ]),
        ];
        frame.render_widget(Paragraph::new(lines), inner);
    } else {
        let [charts, axis] =
            Layout::vertical([Constraint::Min(2), Constraint::Length(u16::from(tall))])
                .areas(inner);
        if tall {
            let w = (axis.width as usize).saturating_sub(label_w);
            frame.render_widget(
                Paragraph::new(Line::from(vec![
                    Span::raw(" ".repeat(label_w)),
                    Span::styled(time_axis(w, step, hist.len()), th.dim),
                ])),
                axis,
            );
        }
        let [a, b] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(charts);
        for (area, arrow, pick, style, now) in [
            (a, "▲ tx", 0usize, th.tx, tx_now),
            (b, "▼ rx", 1usize, th.rx, rx_now),
        ] {
            let [l, r] =
                Layout::horizontal([Constraint::Length(label_w as u16), Constraint::Min(1)])
                    .areas(area);
            let n = r.width as usize;
            let max = row_max(pick, n);
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from(Span::styled(label(arrow, now), style)),
                    Line::from(Span::styled(
                        format!("   max {}", units::rate_unit(max, app.units)),
                        th.dim,
                    )),
                ]),
                l,
            );
            let start = hist.len().saturating_sub(n);
            // Scaled to kilo-units so the integer sparkline keeps three digits of precision.
            // Newest sample at the right edge, as in the one-line sparkline: a short history
            // grows from the right instead of sitting by the label.
            let data: Vec<u64> = std::iter::repeat_n(0, n - (hist.len() - start))
                .chain(hist[start..].iter().map(|h| {
                    let v = if pick == 0 { h.0 } else { h.1 };
                    (v / max.max(1.0) * 1000.0).round() as u64
                }))
                .collect();
            frame.render_widget(Sparkline::default().data(&data).max(1000).style(style), r);
        }
    }

    if warn_h > 0 {
        let block = section(
            th,
            Line::from(vec![
                Span::styled(" Warnings ", th.title),
                Span::styled(format!("{} ", warns.len()), th.dim),
            ]),
        );
        let inner = block.inner(bottom);
        frame.render_widget(block, bottom);
        let room = inner.height as usize;
        let mut lines: Vec<Line> = if warns.is_empty() {
            vec![Line::from(Span::styled(" ✓ none", th.ok))]
        } else {
            warns
                .iter()
                .map(|w| Line::from(Span::styled(format!(" ⚠ {}", w.message), th.warn)))
                .collect()
        };
        if lines.len() > room && room > 0 {
            let hidden = lines.len() - room + 1;
            lines.truncate(room - 1);
            lines.push(Line::from(Span::styled(
                format!("   … {hidden} more",),
                th.dim,
            )));
        }
        frame.render_widget(Paragraph::new(lines), inner);
    }
}

/// A time axis `w` columns wide, one sample of `step` seconds a column, the newest at the right
/// edge ("0s"): labels at round ages ("-10s"), at least 10 columns apart, over the `samples`
/// columns that hold data.
fn time_axis(w: usize, step: f64, samples: usize) -> String {
    let mut line = vec![' '; w];
    if w == 0 || step <= 0.0 {
        return String::new();
    }
    let span = w.min(samples).saturating_sub(1) as f64 * step;
    let every = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    ]
    .into_iter()
    .find(|s| s / step >= 10.0)
    .unwrap_or(3600.0);
    let mut age = 0.0;
    while age <= span {
        let label = if age == 0.0 {
            "0s".to_string()
        } else if age < 59.5 {
            format!("-{age:.0}s")
        } else {
            format!("-{}", units::secs(age))
        };
        let n = label.chars().count();
        // The label ends at its column (the right edge for "0s").
        let end = w - 1 - ((age / step).round() as usize).min(w - 1);
        if end + 1 >= n {
            let start = end + 1 - n;
            if line[start..=end].iter().all(|c| *c == ' ') && (start == 0 || line[start - 1] == ' ')
            {
                for (c, ch) in line[start..=end].iter_mut().zip(label.chars()) {
                    *c = ch;
                }
            }
        }
        age += every;
    }
    line.into_iter().collect()
}
