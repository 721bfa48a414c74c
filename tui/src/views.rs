//! The six views (Overview, QPs, GPUs, Nodes, Matrix, Doorbells): which rows and columns each shows,
//! how they sort, and how they shrink on narrow terminals.

use crate::app::{App, MatrixKind, Tab};
use crate::draw::{
    Col, Ctx, Key, SHADES, bar, heat_level, render_table, section, sort_rows, sort_rows_front,
    spark, styled, title_line, truncate,
};
use crate::fmt;
use crate::model::{
    DoorbellRecord, DoorbellSeries, EndpointRow, GpuRow, NodeRow, ProcessRow, RankRow, ViewModel,
};
use crate::warnings::{Warning, ratios_to_mean, skew};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};
use unicode_width::UnicodeWidthStr;

/// Draws the body of the current tab into `area`.
pub(crate) fn draw_body(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    vm: &ViewModel,
    warns: &[Warning],
) {
    match app.tab {
        Tab::Overview => overview(frame, area, app, vm, warns),
        Tab::Qps => qps(frame, area, app, vm),
        Tab::Gpus => gpus(frame, area, app, vm),
        Tab::Nodes => nodes(frame, area, app, vm),
        Tab::Matrix => matrix(frame, area, app, vm),
        Tab::Doorbells => doorbells(frame, area, app, vm),
    }
}

fn ctx(app: &App) -> Ctx<'_> {
    Ctx {
        th: &app.theme,
        app,
        mean: 0.0,
        mean_in: 0.0,
        max: 0.0,
    }
}

fn opt_rank(r: Option<u32>) -> String {
    r.map(|r| r.to_string()).unwrap_or_else(|| "—".into())
}

fn num(s: String) -> Span<'static> {
    Span::raw(s)
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "—".into()
    } else {
        s.to_string()
    }
}

/// Some traced process has the layers that see GPU-initiated RDMA (so an empty GPU or doorbell
/// view means the GPUs rang nothing, not that sigmatop could not see them).
fn gpu_layers_on(vm: &ViewModel) -> bool {
    vm.processes
        .iter()
        .any(|p| p.layers.iter().any(|l| l == "mlx5") && p.layers.iter().any(|l| l == "cuda"))
}

// ---------------------------------------------------------------- Overview

/// "ibverbs,libfabric" → "ib,ofi": the layer names as the QPs tab spells them.
fn short_layers(layers: &[String]) -> String {
    layers
        .iter()
        .map(|l| match l.as_str() {
            "ibverbs" => "ib",
            "libfabric" => "ofi",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn process_cols(app: &App) -> Vec<Col<ProcessRow>> {
    let u = app.units.rate();
    vec![
        Col {
            title: "host".into(),
            prio: 0,
            right: false,
            max: 16,
            mid: false,
            cell: |r, _| Span::raw(r.host.clone()),
            key: |r| Key::Str(&r.host),
        },
        Col {
            title: "pid".into(),
            prio: 3,
            right: true,
            max: 8,
            mid: false,
            cell: |r, _| num(r.pid.to_string()),
            key: |r| Key::Num(f64::from(r.pid)),
        },
        Col {
            title: "rank".into(),
            prio: 0,
            right: true,
            max: 6,
            mid: false,
            cell: |r, _| num(opt_rank(r.rank)),
            key: |r| Key::Num(r.rank.map(f64::from).unwrap_or(f64::MAX)),
        },
        Col {
            title: "mode".into(),
            prio: 4,
            right: false,
            max: 9,
            mid: false,
            cell: |r, _| Span::raw(r.mode.clone()),
            key: |r| Key::Str(&r.mode),
        },
        Col {
            title: "layers".into(),
            prio: 5,
            right: false,
            max: 28,
            mid: false,
            cell: |r, _| Span::raw(short_layers(&r.layers)),
            key: |r| Key::Text(short_layers(&r.layers)),
        },
        Col {
            title: format!("▲ tx {u}"),
            prio: 0,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.tx_bps, c.app.units), c.th.tx),
            key: |r| Key::Num(r.tx_bps),
        },
        Col {
            title: format!("▼ rx {u}"),
            prio: 0,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.rx_bps, c.app.units), c.th.rx),
            key: |r| Key::Num(r.rx_bps),
        },
        Col {
            title: "ops/s".into(),
            prio: 1,
            right: true,
            max: 8,
            mid: false,
            cell: |r, _| num(fmt::si(r.ops_per_s)),
            key: |r| Key::Num(r.ops_per_s),
        },
        Col {
            title: "drops".into(),
            prio: 2,
            right: true,
            max: 9,
            mid: false,
            cell: |r, c| {
                styled(
                    fmt::count(r.drops),
                    if r.drops > 0 { c.th.warn } else { c.th.dim },
                )
            },
            key: |r| Key::Num(r.drops as f64),
        },
        Col {
            title: "state".into(),
            prio: 1,
            right: false,
            max: 7,
            mid: false,
            cell: |r, c| {
                if r.exited {
                    styled("exited".into(), c.th.dim)
                } else {
                    styled("up".into(), c.th.ok)
                }
            },
            key: |r| Key::Num(if r.exited { 1.0 } else { 0.0 }),
        },
    ]
}

fn overview(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel, warns: &[Warning]) {
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
    let extra = if exited > 0 {
        format!("{exited} exited, totals kept")
    } else {
        String::new()
    };
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
                    fmt::rate_unit(max, app.units)
                ),
                th.dim,
            ),
        ]),
    );
    let inner = block.inner(mid);
    frame.render_widget(block, mid);
    let (tx_now, rx_now) = (vm.header.tx_bps, vm.header.rx_bps);
    let label_w = 20usize;
    let spark_w = (inner.width as usize).saturating_sub(label_w + 1);
    let label = |arrow: &str, v: f64| format!(" {arrow} {:>12}  ", fmt::rate_unit(v, app.units));
    if inner.height < 6 {
        let tx: Vec<f64> = hist.iter().map(|h| h.0).collect();
        let rx: Vec<f64> = hist.iter().map(|h| h.1).collect();
        let lines = vec![
            Line::from(vec![
                Span::styled(label("▲ tx", tx_now), th.tx),
                Span::styled(spark(&tx, max, spark_w), th.tx),
            ]),
            Line::from(vec![
                Span::styled(label("▼ rx", rx_now), th.rx),
                Span::styled(spark(&rx, max, spark_w), th.rx),
            ]),
        ];
        frame.render_widget(Paragraph::new(lines), inner);
    } else {
        let [a, b] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(inner);
        for (area, arrow, pick, style, now) in [
            (a, "▲ tx", 0usize, th.tx, tx_now),
            (b, "▼ rx", 1usize, th.rx, rx_now),
        ] {
            let [l, r] =
                Layout::horizontal([Constraint::Length(label_w as u16), Constraint::Min(1)])
                    .areas(area);
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from(Span::styled(label(arrow, now), style)),
                    Line::from(Span::styled(
                        format!("   max {}", fmt::rate_unit(max, app.units)),
                        th.dim,
                    )),
                ]),
                l,
            );
            let n = r.width as usize;
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

// ---------------------------------------------------------------- QPs

fn endpoint_cols(app: &App) -> Vec<Col<EndpointRow>> {
    let u = app.units.rate();
    let v = app.units.volume();
    let w = app.window.label();
    vec![
        Col {
            title: "host".into(),
            prio: 0,
            right: false,
            max: 14,
            mid: false,
            cell: |r, _| Span::raw(r.host.clone()),
            key: |r| Key::Str(&r.host),
        },
        Col {
            title: "rank".into(),
            prio: 1,
            right: true,
            max: 5,
            mid: false,
            cell: |r, _| num(opt_rank(r.rank)),
            key: |r| Key::Num(r.rank.map(f64::from).unwrap_or(f64::MAX)),
        },
        Col {
            title: "pid".into(),
            prio: 6,
            right: true,
            max: 8,
            mid: false,
            cell: |r, _| {
                num(if r.unattributed {
                    "—".into()
                } else {
                    r.pid.to_string()
                })
            },
            key: |r| Key::Num(f64::from(r.pid)),
        },
        Col {
            title: "layer".into(),
            prio: 1,
            right: false,
            max: 6,
            mid: false,
            cell: |r, _| Span::raw(r.layer.clone()),
            key: |r| Key::Str(&r.layer),
        },
        Col {
            title: "QPN/ep".into(),
            prio: 0,
            right: false,
            max: 14,
            mid: true,
            cell: |r, c| {
                if r.unattributed {
                    styled("?".into(), c.th.warn)
                } else {
                    Span::raw(r.local_id.clone())
                }
            },
            key: |r| Key::Str(&r.local_id),
        },
        Col {
            title: "peer".into(),
            prio: 2,
            right: false,
            max: 22,
            mid: false,
            cell: |r, c| {
                if r.unattributed {
                    styled("(unattributed)".into(), c.th.warn)
                } else {
                    Span::raw(r.peer.label())
                }
            },
            key: |r| Key::Text(r.peer.label()),
        },
        Col {
            title: "type".into(),
            prio: 4,
            right: false,
            max: 10,
            mid: false,
            cell: |r, _| Span::raw(dash_if_empty(&r.transport)),
            key: |r| Key::Str(&r.transport),
        },
        Col {
            title: "state".into(),
            prio: 5,
            right: false,
            max: 6,
            mid: false,
            cell: |r, _| Span::raw(dash_if_empty(&r.state)),
            key: |r| Key::Str(&r.state),
        },
        Col {
            title: format!("▲ tx {u}"),
            prio: 0,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.tx_bps, c.app.units), c.th.tx),
            key: |r| Key::Num(r.tx_bps),
        },
        Col {
            title: format!("▼ rx {u}"),
            prio: 0,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.rx_bps, c.app.units), c.th.rx),
            key: |r| Key::Num(r.rx_bps),
        },
        Col {
            title: format!("▲ {w} {u}"),
            prio: 6,
            right: true,
            max: 11,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.tx_bps_window, c.app.units), c.th.tx),
            key: |r| Key::Num(r.tx_bps_window),
        },
        Col {
            title: format!("▼ {w} {u}"),
            prio: 6,
            right: true,
            max: 11,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.rx_bps_window, c.app.units), c.th.rx),
            key: |r| Key::Num(r.rx_bps_window),
        },
        Col {
            title: format!("▲ total {v}"),
            prio: 7,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| num(fmt::volume(r.tx_bytes as f64, c.app.units)),
            key: |r| Key::Num(r.tx_bytes as f64),
        },
        Col {
            title: format!("▼ total {v}"),
            prio: 7,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| num(fmt::volume(r.rx_bytes as f64, c.app.units)),
            key: |r| Key::Num(r.rx_bytes as f64),
        },
        Col {
            title: "ops/s".into(),
            prio: 1,
            right: true,
            max: 7,
            mid: false,
            cell: |r, _| num(fmt::si(r.ops_per_s)),
            key: |r| Key::Num(r.ops_per_s),
        },
        Col {
            title: "ops by opcode".into(),
            prio: 8,
            right: false,
            max: 30,
            mid: false,
            cell: |r, _| Span::raw(fmt::mix(&r.ops_by_opcode, 3)),
            key: |r| Key::Num(r.ops_by_opcode.iter().map(|o| o.1 as f64).sum()),
        },
        Col {
            title: "db/s".into(),
            prio: 2,
            right: true,
            max: 7,
            mid: false,
            cell: |r, _| num(r.doorbells_per_s.map(fmt::si).unwrap_or_else(|| "—".into())),
            key: |r| Key::Num(r.doorbells_per_s.unwrap_or(-1.0)),
        },
        Col {
            title: "posted WR".into(),
            prio: 3,
            right: true,
            max: 9,
            mid: false,
            cell: |r, _| num(r.posted.map(fmt::count).unwrap_or_else(|| "—".into())),
            key: |r| Key::Num(r.posted.map(|p| p as f64).unwrap_or(-1.0)),
        },
        Col {
            title: "".into(),
            prio: 0,
            right: false,
            max: 7,
            mid: false,
            cell: |r, c| {
                let idle = r.posted.unwrap_or(0) > 0
                    && !r.unattributed
                    && r.tx_bps == 0.0
                    && r.rx_bps == 0.0
                    && r.ops_per_s == 0.0;
                if idle {
                    styled("⚠ idle".into(), c.th.warn)
                } else {
                    Span::raw("")
                }
            },
            key: |r| Key::Num(r.posted.unwrap_or(0) as f64),
        },
    ]
}

fn qps(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Qps.index();
    let cols = endpoint_cols(app);
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
    rows.append(&mut unattributed);

    let detail_h: u16 = if area.height >= 30 { 7 } else { 0 };
    let [top, bottom] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(detail_h)]).areas(area);
    let attributed = vm.endpoints.iter().filter(|e| !e.unattributed).count();
    let unattr: f64 = vm
        .endpoints
        .iter()
        .filter(|e| e.unattributed)
        .map(|e| e.tx_bps + e.rx_bps)
        .sum();
    let extra = if unattr > 0.0 {
        format!(
            "{attributed} attributed + unattributed {} (last row)",
            fmt::rate_unit(unattr, app.units)
        )
    } else {
        String::new()
    };
    let block = section(
        th,
        title_line(
            th,
            "QPs & endpoints",
            rows.len(),
            vm.endpoints.len(),
            &extra,
        ),
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
                fmt::rate_unit(r.tx_bps, u),
                app.window.label(),
                fmt::rate_unit(r.tx_bps_window, u),
                fmt::volume_unit(r.tx_bytes as f64, u)
            ),
            th.tx,
        )]),
        Line::from(vec![Span::styled(
            format!(
                " ▼ rx  now {:>11}   {} avg {:>11}   total {:>9}",
                fmt::rate_unit(r.rx_bps, u),
                app.window.label(),
                fmt::rate_unit(r.rx_bps_window, u),
                fmt::volume_unit(r.rx_bytes as f64, u)
            ),
            th.rx,
        )]),
    ];
    let ops: Vec<String> = r
        .ops_by_opcode
        .iter()
        .map(|(n, c)| format!("{n} {}", fmt::count(*c)))
        .collect();
    lines.push(Line::from(vec![
        Span::styled(" ops by opcode (since start): ", th.dim),
        Span::raw(if ops.is_empty() {
            "—".to_string()
        } else {
            ops.join(" · ")
        }),
    ]));
    lines.push(Line::from(vec![
        Span::styled(" ops/s ", th.dim),
        Span::raw(fmt::si(r.ops_per_s)),
        Span::styled("   doorbells/s ", th.dim),
        Span::raw(r.doorbells_per_s.map(fmt::si).unwrap_or_else(|| "—".into())),
        Span::styled("   posted, not completed ", th.dim),
        Span::raw(r.posted.map(fmt::count).unwrap_or_else(|| "—".into())),
    ]));
    frame.render_widget(Paragraph::new(lines), inner);
}

// ---------------------------------------------------------------- GPUs

fn gpu_cols(app: &App) -> Vec<Col<GpuRow>> {
    let u = app.units.rate();
    let v = app.units.volume();
    vec![
        Col {
            title: "host".into(),
            prio: 0,
            right: false,
            max: 16,
            mid: false,
            cell: |r, _| Span::raw(r.host.clone()),
            key: |r| Key::Str(&r.host),
        },
        Col {
            title: "proc".into(),
            prio: 1,
            right: false,
            max: 10,
            mid: false,
            cell: |r, _| Span::raw(r.process_label()),
            key: |r| Key::Num(r.rank.map_or(1e12 + f64::from(r.pid), f64::from)),
        },
        Col {
            title: "GPU".into(),
            prio: 0,
            right: true,
            max: 4,
            mid: false,
            cell: |r, _| num(r.gpu.to_string()),
            key: |r| Key::Num(f64::from(r.gpu)),
        },
        Col {
            title: format!("▲▼ WQE {u}"),
            prio: 0,
            right: true,
            max: 12,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.bytes_per_s, c.app.units), c.th.tx),
            key: |r| Key::Num(r.bytes_per_s),
        },
        Col {
            title: "db/s".into(),
            prio: 0,
            right: true,
            max: 8,
            mid: false,
            cell: |r, _| num(fmt::si(r.doorbells_per_s)),
            key: |r| Key::Num(r.doorbells_per_s),
        },
        Col {
            title: format!("{v}/db"),
            prio: 3,
            right: true,
            max: 8,
            mid: false,
            cell: |r, c| {
                num(if r.doorbells_per_s > 0.0 {
                    fmt::volume(r.bytes_per_s / r.doorbells_per_s, c.app.units)
                } else {
                    "—".into()
                })
            },
            key: |r| Key::Num(r.bytes_per_s / r.doorbells_per_s.max(1e-9)),
        },
        Col {
            title: "in-flight WQE".into(),
            prio: 1,
            right: true,
            max: 13,
            mid: false,
            cell: |r, _| num(fmt::count(r.inflight_wqes)),
            key: |r| Key::Num(r.inflight_wqes as f64),
        },
        Col {
            title: "WQE opcode mix".into(),
            prio: 2,
            right: false,
            max: 40,
            mid: false,
            cell: |r, _| Span::raw(fmt::mix(&r.opcode_mix, 4)),
            key: |r| {
                let top = r.opcode_mix.iter().max_by_key(|o| o.1);
                Key::Text(top.map(|o| o.0.clone()).unwrap_or_default())
            },
        },
    ]
}

fn gpus(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Gpus.index();
    let cols = gpu_cols(app);
    let mut rows: Vec<&GpuRow> = vm.gpus.iter().filter(|r| filter.gpu(r)).collect();
    sort_rows(&mut rows, &cols, app.sort[t].column, app.sort[t].descending);
    let series: Vec<&DoorbellSeries> = vm
        .doorbells
        .series
        .iter()
        .filter(|s| s.gpu.is_some() && filter.series(s))
        .collect();
    let spark_h = if series.is_empty() {
        0
    } else {
        (series.len() as u16 + 1).min(area.height / 2)
    };
    let [top, bottom] = Layout::vertical([
        Constraint::Max(rows.len() as u16 + 2),
        Constraint::Length(spark_h),
    ])
    .areas(area);
    let block = section(
        th,
        title_line(
            th,
            "GPUs",
            rows.len(),
            vm.gpus.len(),
            "GPU-initiated RDMA (doorbells the GPU rang)",
        ),
    );
    let inner = block.inner(top);
    frame.render_widget(block, top);
    if vm.gpus.is_empty() {
        let text = if gpu_layers_on(vm) {
            " none: no GPU rang a doorbell; this traffic is posted by CPUs (see 2 QPs)"
        } else {
            " no GPU-initiated RDMA seen (needs the cuda and mlx5 layers)"
        };
        frame.render_widget(Paragraph::new(Span::styled(text, th.dim)), inner);
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
    if spark_h > 0 {
        let block = section(
            th,
            Line::from(vec![
                Span::styled(" Doorbell rate ", th.title),
                Span::styled("db/s over time · d for detail ", th.dim),
            ]),
        );
        let inner = block.inner(bottom);
        frame.render_widget(block, bottom);
        let lines = series
            .iter()
            .map(|s| series_line(app, s, inner.width as usize, inner.width >= 150))
            .collect::<Vec<_>>();
        frame.render_widget(Paragraph::new(lines), inner);
    }
}

// ---------------------------------------------------------------- Nodes

fn ratio_cell(v: f64, c: &Ctx) -> Span<'static> {
    ratio_of(v, c.mean, c)
}

fn ratio_in_cell(v: f64, c: &Ctx) -> Span<'static> {
    ratio_of(v, c.mean_in, c)
}

fn ratio_of(v: f64, mean: f64, c: &Ctx) -> Span<'static> {
    if mean <= 0.0 {
        return styled("—".into(), c.th.dim);
    }
    let r = v / mean;
    if r >= c.app.warning_config.skew_ratio {
        styled(format!("◀ {r:.2}×"), c.th.warn)
    } else {
        num(format!("{r:.2}×"))
    }
}

const BAR_W: usize = 20;

fn node_cols(app: &App) -> Vec<Col<NodeRow>> {
    let u = app.units.rate();
    let v = app.units.volume();
    vec![
        Col {
            title: "node".into(),
            prio: 0,
            right: false,
            max: 16,
            mid: false,
            cell: |r, _| Span::raw(r.host.clone()),
            key: |r| Key::Str(&r.host),
        },
        Col {
            title: format!("▲ egress {u}"),
            prio: 0,
            right: true,
            max: 12,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.egress_bps, c.app.units), c.th.tx),
            key: |r| Key::Num(r.egress_bps),
        },
        Col {
            title: format!("▼ ingress {u}"),
            prio: 0,
            right: true,
            max: 13,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.ingress_bps, c.app.units), c.th.rx),
            key: |r| Key::Num(r.ingress_bps),
        },
        Col {
            title: "▲ ×mean".into(),
            prio: 0,
            right: true,
            max: 8,
            mid: false,
            cell: |r, c| ratio_cell(r.egress_bps, c),
            key: |r| Key::Num(r.egress_bps),
        },
        Col {
            title: "▼ ×mean".into(),
            prio: 0,
            right: true,
            max: 8,
            mid: false,
            cell: |r, c| ratio_in_cell(r.ingress_bps, c),
            key: |r| Key::Num(r.ingress_bps),
        },
        Col {
            title: format!("▲ total {v}"),
            prio: 2,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| num(fmt::volume(r.egress_bytes as f64, c.app.units)),
            key: |r| Key::Num(r.egress_bytes as f64),
        },
        Col {
            title: format!("▼ total {v}"),
            prio: 2,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| num(fmt::volume(r.ingress_bytes as f64, c.app.units)),
            key: |r| Key::Num(r.ingress_bytes as f64),
        },
        Col {
            title: "▲ egress".into(),
            prio: 1,
            right: false,
            max: BAR_W as u16,
            mid: false,
            cell: |r, c| styled(bar(r.egress_bps / c.max.max(1e-9), BAR_W), c.th.tx),
            key: |r| Key::Num(r.egress_bps),
        },
    ]
}

fn rank_cols(app: &App) -> Vec<Col<RankRow>> {
    let u = app.units.rate();
    let v = app.units.volume();
    vec![
        Col {
            title: "rank".into(),
            prio: 0,
            right: true,
            max: 6,
            mid: false,
            cell: |r, _| num(r.rank.to_string()),
            key: |r| Key::Num(f64::from(r.rank)),
        },
        Col {
            title: format!("▲ egress {u}"),
            prio: 0,
            right: true,
            max: 12,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.egress_bps, c.app.units), c.th.tx),
            key: |r| Key::Num(r.egress_bps),
        },
        Col {
            title: format!("▼ ingress {u}"),
            prio: 0,
            right: true,
            max: 13,
            mid: false,
            cell: |r, c| styled(fmt::rate(r.ingress_bps, c.app.units), c.th.rx),
            key: |r| Key::Num(r.ingress_bps),
        },
        Col {
            title: "▲ ×mean".into(),
            prio: 0,
            right: true,
            max: 8,
            mid: false,
            cell: |r, c| ratio_cell(r.egress_bps, c),
            key: |r| Key::Num(r.egress_bps),
        },
        Col {
            title: "▼ ×mean".into(),
            prio: 0,
            right: true,
            max: 8,
            mid: false,
            cell: |r, c| ratio_in_cell(r.ingress_bps, c),
            key: |r| Key::Num(r.ingress_bps),
        },
        Col {
            title: format!("▲ total {v}"),
            prio: 2,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| num(fmt::volume(r.egress_bytes as f64, c.app.units)),
            key: |r| Key::Num(r.egress_bytes as f64),
        },
        Col {
            title: format!("▼ total {v}"),
            prio: 2,
            right: true,
            max: 10,
            mid: false,
            cell: |r, c| num(fmt::volume(r.ingress_bytes as f64, c.app.units)),
            key: |r| Key::Num(r.ingress_bytes as f64),
        },
        Col {
            title: "▲ egress".into(),
            prio: 1,
            right: false,
            max: BAR_W as u16,
            mid: false,
            cell: |r, c| styled(bar(r.egress_bps / c.max.max(1e-9), BAR_W), c.th.tx),
            key: |r| Key::Num(r.egress_bps),
        },
        Col {
            title: "host".into(),
            prio: 1,
            right: false,
            max: 16,
            mid: false,
            cell: |r, _| Span::raw(r.host.clone()),
            key: |r| Key::Str(&r.host),
        },
    ]
}

fn mean_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (mean, v.iter().copied().fold(0.0, f64::max))
}

fn nodes(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Nodes.index();
    let (col, desc) = (app.sort[t].column, app.sort[t].descending);

    // Skew summary over all rows (not the filtered ones: skew is a property of the job).
    let node_e: Vec<f64> = vm.nodes.iter().map(|n| n.egress_bps).collect();
    let rank_e: Vec<f64> = vm.ranks.iter().map(|n| n.egress_bps).collect();
    let node_i: Vec<f64> = vm.nodes.iter().map(|n| n.ingress_bps).collect();
    let rank_i: Vec<f64> = vm.ranks.iter().map(|n| n.ingress_bps).collect();
    let node_name = |s: Option<(usize, f64)>| {
        s.and_then(|(i, _)| vm.nodes.get(i))
            .map(|n| n.host.clone())
            .unwrap_or_default()
    };
    let rank_name = |s: Option<(usize, f64)>| {
        s.and_then(|(i, _)| vm.ranks.get(i))
            .map(|r| format!("rank {}", r.rank))
            .unwrap_or_default()
    };
    // One line per direction: "▲ egress skew (max/mean): nodes 2.08× node2 · ranks 1.11×".
    let mut summary: Vec<Line> = Vec::new();
    for (dir, style, nv, rv) in [
        ("▲ egress ", th.tx, &node_e, &rank_e),
        ("▼ ingress", th.rx, &node_i, &rank_i),
    ] {
        let mut spans = vec![
            Span::styled(format!(" {dir}"), style),
            Span::styled(" skew (max/mean): ", th.dim),
        ];
        let ns = skew(nv);
        let rs = skew(rv);
        for (k, (what, sk, name)) in [("nodes", ns, node_name(ns)), ("ranks", rs, rank_name(rs))]
            .into_iter()
            .enumerate()
        {
            if k > 0 {
                spans.push(Span::styled(" · ", th.dim));
            }
            match sk {
                Some((_, r)) => {
                    let hot = r >= app.warning_config.skew_ratio;
                    spans.push(Span::raw(format!("{what} ")));
                    spans.push(Span::styled(
                        format!("{r:.2}×"),
                        if hot { th.warn } else { th.ok },
                    ));
                    spans.push(Span::raw(format!(" {name}")));
                }
                None => spans.push(Span::raw(format!("{what} —"))),
            }
        }
        if summary.is_empty() {
            spans.push(Span::styled(
                format!(" · warn ≥ {:.1}×", app.warning_config.skew_ratio),
                th.dim,
            ));
        }
        summary.push(Line::from(spans));
    }

    let ncols = node_cols(app);
    let mut nrows: Vec<&NodeRow> = vm.nodes.iter().filter(|r| filter.node(r)).collect();
    sort_rows(&mut nrows, &ncols, col, desc);
    let rcols = rank_cols(app);
    let mut rrows: Vec<&RankRow> = vm.ranks.iter().filter(|r| filter.rank(r)).collect();
    sort_rows(&mut rrows, &rcols, col, desc);

    let [s, top, bottom] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Max(nrows.len() as u16 + 2),
        Constraint::Min(3),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(summary), s);

    let (mean, max) = mean_max(&node_e);
    let block = section(th, title_line(th, "Nodes", nrows.len(), vm.nodes.len(), ""));
    let inner = block.inner(top);
    frame.render_widget(block, top);
    let c = Ctx {
        mean,
        max,
        mean_in: mean_max(&node_i).0,
        ..ctx(app)
    };
    render_table(
        frame,
        inner,
        &c,
        &ncols,
        &nrows,
        Some((col, desc)),
        None,
        false,
    );

    let (mean, max) = mean_max(&rank_e);
    let block = section(th, title_line(th, "Ranks", rrows.len(), vm.ranks.len(), ""));
    let inner = block.inner(bottom);
    frame.render_widget(block, bottom);
    let c = Ctx {
        mean,
        max,
        mean_in: mean_max(&rank_i).0,
        ..ctx(app)
    };
    render_table(
        frame,
        inner,
        &c,
        &rcols,
        &rrows,
        Some((col, desc)),
        Some(app.selected[t]),
        true,
    );
}

// ---------------------------------------------------------------- Matrix

fn matrix(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let t = Tab::Matrix.index();
    let kind = app.matrix_kind_for(
        vm.matrices.node.labels.len(),
        vm.matrices.rank.labels.len(),
        vm.matrices.gpu.labels.len(),
    );
    let m = match kind {
        MatrixKind::Rank => &vm.matrices.rank,
        MatrixKind::Gpu => &vm.matrices.gpu,
        MatrixKind::Node => &vm.matrices.node,
    };
    let data = if app.matrix_rate { &m.rates } else { &m.bytes };
    let n = m.labels.len();
    let cell = |i: usize, j: usize| -> f64 {
        data.get(i)
            .and_then(|r| r.get(j))
            .copied()
            .filter(|v| v.is_finite())
            .unwrap_or(0.0)
    };
    let what = if app.matrix_rate {
        format!("rate now, {}", app.units.rate())
    } else {
        format!("{} in {} window", app.units.volume(), app.window.label())
    };
    let kind = kind.label();
    let block = section(
        th,
        Line::from(vec![
            Span::styled(format!(" {kind} × {kind} "), th.title),
            Span::styled(
                format!("row = source ▲, column = destination ▼ · {what} "),
                th.dim,
            ),
        ]),
    );
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if n == 0 {
        app.seen(0, 1);
        frame.render_widget(
            Paragraph::new(Span::styled(format!(" no {kind} matrix yet"), th.dim)),
            inner,
        );
        return;
    }
    let val = |v: f64| match app.matrix_rate {
        true => fmt::rate(v, app.units),
        false => fmt::volume(v, app.units),
    };
    let max = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| cell(i, j))
        .fold(0.0, f64::max);
    let egress: Vec<f64> = (0..n).map(|i| (0..n).map(|j| cell(i, j)).sum()).collect();
    let ingress: Vec<f64> = (0..n).map(|j| (0..n).map(|i| cell(i, j)).sum()).collect();
    let ratios = ratios_to_mean(&egress);
    let ratios_in = ratios_to_mean(&ingress);

    let label_w = m
        .labels
        .iter()
        .map(|l| l.width())
        .max()
        .unwrap_or(0)
        .clamp(9, 14); // fits "▼ ingress"
    let width = inner.width as usize;
    // Cells: "▓ 8.05G" (8 wide), " ▓8.05G" (7) or "▓8.05G" (6) when they fit, else shade only.
    const EGRESS_W: usize = 9;
    const MARK_W: usize = 8; // " ◀ 2.08×"
    let longest = m.labels.iter().map(|l| l.width() + 1).max().unwrap_or(0);
    let fixed = 1 + label_w + EGRESS_W + MARK_W;
    let (numeric, cell_w) = [8usize, 7, 6]
        .iter()
        .map(|w| (*w).max(longest))
        .find(|w| fixed + n * w <= width)
        .map(|w| (true, w))
        .unwrap_or((false, longest.clamp(3, 5)));
    // Room for " ‹12 +345›" when columns are hidden.
    let fit_cols = (width.saturating_sub(fixed + 10) / cell_w).min(n).max(1);
    let fit_cols = if fixed + n * cell_w <= width {
        n
    } else {
        fit_cols
    };
    let cut = fit_cols < n;
    // The columns shown: `fit_cols` of them from `col0` (scrolled with < >).
    let col0 = app.matrix_col.min(n - fit_cols);
    let cols = col0..col0 + fit_cols;

    let hdr = th.table_header;
    let mut head = vec![Span::styled(format!(" {:<label_w$}", "src\\dst"), hdr)];
    for l in m.labels[cols.clone()].iter() {
        let l = truncate(l, cell_w - 1);
        head.push(Span::styled(format!("{l:>cell_w$}"), hdr));
    }
    // Hidden columns on either side: "‹3 +12›".
    let more = match (cut, col0) {
        (false, _) => String::new(),
        (true, 0) => format!(" +{}›", n - fit_cols),
        (true, c) => format!(" ‹{c} +{}›", n - c - fit_cols),
    };
    let more_w = more.width();
    head.push(Span::styled(more.clone(), th.dim));
    head.push(Span::styled(format!("{:>EGRESS_W$}", "▲ egress"), hdr));

    let rows_h = (inner.height as usize).saturating_sub(3); // header, ingress, legend
    app.seen(n, rows_h);
    let sel = app.selected[t].min(n - 1);
    let offset = sel.saturating_sub(rows_h.saturating_sub(1));
    let mut lines = vec![Line::from(head)];
    for i in (offset..n).take(rows_h) {
        let label_style = if i == sel { th.selected } else { hdr };
        let mut spans = vec![
            Span::raw(" "),
            Span::styled(
                format!("{:<label_w$}", truncate(&m.labels[i], label_w)),
                label_style,
            ),
        ];
        for j in cols.clone() {
            let v = cell(i, j);
            let lvl = heat_level(v, max);
            let text = if lvl == 0 {
                format!("{:>cell_w$}", "·")
            } else if numeric {
                let gap = if cell_w >= 8 { " " } else { "" };
                let num = format!("{:>5}", val(v));
                format!("{:>cell_w$}", format!("{}{gap}{num}", SHADES[lvl]))
            } else {
                format!(" {}", SHADES[lvl].repeat(cell_w - 1))
            };
            spans.push(Span::styled(text, th.heat(lvl)));
        }
        spans.push(Span::raw(" ".repeat(more_w)));
        spans.push(Span::styled(
            format!("{:>EGRESS_W$}", val(egress[i])),
            th.tx,
        ));
        if let Some(r) = ratios.as_ref().and_then(|r| r.get(i))
            && *r >= app.warning_config.skew_ratio
        {
            spans.push(Span::styled(format!(" ◀ {r:.2}×"), th.warn));
        }
        lines.push(Line::from(spans));
    }
    let mut foot = vec![Span::styled(format!(" {:<label_w$}", "▼ ingress"), hdr)];
    if numeric {
        // A column that receives ≥ the skew ratio × the mean is marked like a hot egress row.
        for (j, v) in ingress.iter().enumerate().skip(col0).take(fit_cols) {
            let hot = ratios_in
                .as_ref()
                .and_then(|r| r.get(j))
                .is_some_and(|r| *r >= app.warning_config.skew_ratio);
            foot.push(Span::styled(
                format!("{:>cell_w$}", val(*v)),
                if hot { th.warn } else { th.rx },
            ));
        }
    } else {
        foot.push(Span::styled(
            " (values need a wider terminal; column sums are in the Nodes tab)",
            th.dim,
        ));
    }
    lines.push(Line::from(foot));
    // Legend: shade characters and ramp colours together.
    let mut legend = vec![Span::styled(" heat ", th.dim)];
    let steps = ["0", "<25%", "<50%", "<75%", "≥75%"];
    for (lvl, s) in steps.iter().enumerate() {
        legend.push(Span::styled(SHADES[lvl], th.heat(lvl)));
        legend.push(Span::styled(format!(" {s}  "), th.dim));
    }
    legend.push(Span::styled(format!("of max {}", val(max)), th.dim));
    if n > offset + rows_h {
        legend.push(Span::styled(
            format!(" · rows {}-{} of {n}", offset + 1, offset + rows_h),
            th.dim,
        ));
    }
    lines.push(Line::from(legend));
    frame.render_widget(Paragraph::new(lines), inner);
}

// ---------------------------------------------------------------- Doorbells

fn pct_spans(app: &App, s: &DoorbellSeries, short: bool) -> Vec<Span<'static>> {
    let th = &app.theme;
    let mut v = Vec::new();
    match &s.interval_ns {
        Some(p) => {
            v.push(Span::styled(
                if short {
                    "interval "
                } else {
                    "inter-doorbell "
                },
                th.dim,
            ));
            let gap = if short { " " } else { "  " };
            v.push(Span::raw(format!(
                "p50 {}{gap}p90 {}{gap}p99 {}{gap}max {}",
                fmt::nanos(p.p50),
                fmt::nanos(p.p90),
                fmt::nanos(p.p99),
                fmt::nanos(p.max)
            )));
        }
        None => v.push(Span::styled("interval —", th.dim)),
    }
    if let Some(p) = &s.rate_percentiles {
        let gap = if short { " " } else { "  " };
        v.push(Span::styled(format!("{gap}│ db/s "), th.dim));
        v.push(Span::raw(format!(
            "p50 {}{gap}p99 {}",
            fmt::si(p.p50),
            fmt::si(p.p99)
        )));
    }
    v
}

/// One line for a doorbell series: label, sparkline, rate now, and (when `pct`) percentiles.
fn series_line(app: &App, s: &DoorbellSeries, width: usize, pct: bool) -> Line<'static> {
    let th = &app.theme;
    let label = format!(" {:<12}", truncate(&s.label, 12));
    let now = format!(" {:>7}/s ", fmt::si(s.rate_now));
    let pct_spans = if pct {
        pct_spans(app, s, false)
    } else {
        vec![]
    };
    let pct_w: usize = pct_spans.iter().map(|s| s.width()).sum();
    let fixed = label.width() + 5 + now.width() + pct_w + 1;
    let spark_w = width
        .saturating_sub(fixed)
        .clamp(8, 60)
        .min(s.rate_history.len().max(8));
    let max = s.rate_history.iter().copied().fold(0.0, f64::max);
    let mut v = vec![
        Span::styled(label, th.title),
        Span::styled("db/s ", th.dim),
        Span::styled(spark(&s.rate_history, max, spark_w), th.tx),
        Span::styled(now, th.text),
    ];
    v.extend(pct_spans);
    Line::from(v)
}

fn doorbell_cols() -> Vec<Col<DoorbellRecord>> {
    vec![
        Col {
            title: "time s".into(),
            prio: 0,
            right: true,
            max: 14,
            mid: false,
            cell: |r, _| num(format!("{:.9}", r.time_s)),
            key: |r| Key::Num(r.time_s),
        },
        Col {
            title: "host".into(),
            prio: 6,
            right: false,
            max: 12,
            mid: false,
            cell: |r, _| Span::raw(r.host.clone()),
            key: |r| Key::Str(&r.host),
        },
        Col {
            title: "gpu".into(),
            prio: 0,
            right: true,
            max: 3,
            mid: false,
            cell: |r, _| num(r.gpu.to_string()),
            key: |r| Key::Num(f64::from(r.gpu)),
        },
        Col {
            title: "qpn".into(),
            prio: 0,
            right: false,
            max: 8,
            mid: false,
            cell: |r, _| Span::raw(format!("0x{:x}", r.qpn)),
            key: |r| Key::Num(f64::from(r.qpn)),
        },
        Col {
            title: "pi".into(),
            prio: 2,
            right: false,
            max: 6,
            mid: false,
            cell: |r, _| Span::raw(format!("0x{:04x}", r.pi)),
            key: |r| Key::Num(f64::from(r.pi)),
        },
        Col {
            title: "opcode".into(),
            prio: 0,
            right: false,
            max: 14,
            mid: false,
            cell: |r, c| {
                if r.opcode == "?" {
                    styled("? unparsable".into(), c.th.warn)
                } else {
                    Span::raw(r.opcode.clone())
                }
            },
            key: |r| Key::Str(&r.opcode),
        },
        Col {
            title: "len B".into(),
            prio: 1,
            right: true,
            max: 10,
            mid: false,
            cell: |r, _| num(r.bytes.to_string()),
            key: |r| Key::Num(r.bytes as f64),
        },
        Col {
            title: "raddr".into(),
            prio: 3,
            right: false,
            max: 22,
            mid: false,
            cell: |r, _| Span::raw(fmt::addr(r.raddr)),
            key: |r| Key::Num(r.raddr as f64),
        },
        Col {
            title: "rkey".into(),
            prio: 4,
            right: false,
            max: 10,
            mid: false,
            cell: |r, _| Span::raw(format!("0x{:x}", r.rkey)),
            key: |r| Key::Num(f64::from(r.rkey)),
        },
        Col {
            title: "WQEs".into(),
            prio: 1,
            right: true,
            max: 5,
            mid: false,
            cell: |r, _| num(r.wqes.to_string()),
            key: |r| Key::Num(f64::from(r.wqes)),
        },
    ]
}

fn doorbells(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Doorbells.index();
    let series: Vec<&DoorbellSeries> = vm
        .doorbells
        .series
        .iter()
        .filter(|s| filter.series(s))
        .collect();
    let mut recent: Vec<&DoorbellRecord> = vm
        .doorbells
        .recent
        .iter()
        .filter(|r| filter.doorbell(r))
        .collect();
    recent.reverse(); // newest first
    if vm.doorbells.series.is_empty() && vm.doorbells.recent.is_empty() {
        app.seen(0, 1);
        let block = section(th, Line::from(Span::styled(" Doorbells ", th.title)));
        let inner = block.inner(area);
        frame.render_widget(block, area);
        frame.render_widget(
            Paragraph::new(if gpu_layers_on(vm) {
                vec![
                    Line::from(Span::styled(" no GPU-initiated doorbells seen", th.dim)),
                    Line::from(Span::styled(
                        " the mlx5 and cuda layers are on, but no GPU rang a doorbell: this",
                        th.dim,
                    )),
                    Line::from(Span::styled(
                        " job posts its work from CPUs (see 2 QPs); GPU-initiated transports",
                        th.dim,
                    )),
                    Line::from(Span::styled(" are e.g. NVSHMEM with IBGDA", th.dim)),
                ]
            } else {
                vec![
                    Line::from(Span::styled(" no GPU-initiated doorbells seen", th.dim)),
                    Line::from(Span::styled(
                        " (needs the mlx5 and cuda layers and a GPU-initiated transport,",
                        th.dim,
                    )),
                    Line::from(Span::styled(" e.g. NVSHMEM with IBGDA)", th.dim)),
                ]
            }),
            inner,
        );
        return;
    }
    let wide = area.width >= 150;
    let per = if wide { 1 } else { 2 };
    let want = (series.len() * per) as u16 + 1;
    let series_h = want.min(area.height / 2).max(2);
    let [top, bottom] =
        Layout::vertical([Constraint::Length(series_h), Constraint::Min(3)]).areas(area);
    let block = section(
        th,
        Line::from(vec![
            Span::styled(" Doorbell rate ", th.title),
            Span::styled(
                format!(
                    "per GPU/QP · percentiles over {} · coalesced {} ",
                    app.window.label(),
                    fmt::count(vm.status.coalesced_doorbells)
                ),
                th.dim,
            ),
        ]),
    );
    let inner = block.inner(top);
    frame.render_widget(block, top);
    let mut lines = Vec::new();
    for s in &series {
        if wide {
            lines.push(series_line(app, s, inner.width as usize, true));
        } else {
            lines.push(series_line(app, s, inner.width as usize, false));
            let mut l = vec![Span::raw("   ")];
            l.extend(pct_spans(app, s, true));
            lines.push(Line::from(l));
        }
    }
    if series.is_empty() {
        lines.push(Line::from(Span::styled(
            " no series match the filter",
            th.dim,
        )));
    }
    frame.render_widget(Paragraph::new(lines), inner);

    let block = section(
        th,
        title_line(
            th,
            "Latest doorbells",
            recent.len(),
            vm.doorbells.recent.len(),
            "decoded WQEs, newest first",
        ),
    );
    let inner = block.inner(bottom);
    frame.render_widget(block, bottom);
    let c = ctx(app);
    render_table(
        frame,
        inner,
        &c,
        &doorbell_cols(),
        &recent,
        None,
        Some(app.selected[t]),
        true,
    );
}
