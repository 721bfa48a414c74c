//! The Doorbells tab: the doorbell rate and inter-doorbell time per GPU/QP series, and the latest
//! doorbells with the WQEs decoded behind them.

use super::{ctx, gpu_layers_on, num};
use crate::app::{App, Tab};
use crate::model::{DoorbellRecord, DoorbellSeries, ViewModel};
use crate::units;
use crate::widgets::section::{section, title_line};
use crate::widgets::sparkline::spark;
use crate::widgets::table::{Col, Key, render_table};
use crate::widgets::text::{styled, truncate};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use unicode_width::UnicodeWidthStr;

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
                units::nanos(p.p50),
                units::nanos(p.p90),
                units::nanos(p.p99),
                units::nanos(p.max)
            )));
        }
        None => v.push(Span::styled("interval —", th.dim)),
    }
    if let Some(p) = &s.rate_percentiles {
        let gap = if short { " " } else { "  " };
        v.push(Span::styled(format!("{gap}│ db/s "), th.dim));
        v.push(Span::raw(format!(
            "p50 {}{gap}p99 {}",
            units::si(p.p50),
            units::si(p.p99)
        )));
    }
    v
}

/// One line for a doorbell series: label, sparkline, rate now, and (when `pct`) percentiles.
pub(super) fn series_line(app: &App, s: &DoorbellSeries, width: usize, pct: bool) -> Line<'static> {
    let th = &app.theme;
    let label = format!(" {:<12}", truncate(&s.label, 12));
    let (now, now_style) = match s.stopped_s {
        // The same width as a rate: "stopped 4.1s" where "  1.2k/s" stands.
        Some(q) => (
            format!(" {:>9} ", format!("stop {}", units::secs(q))),
            th.warn,
        ),
        None => (format!(" {:>7}/s ", units::si(s.rate_now)), th.text),
    };
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
        Span::styled(now, now_style),
    ];
    v.extend(pct_spans);
    Line::from(v)
}

fn doorbell_cols() -> Vec<Col<DoorbellRecord>> {
    vec![
        Col::right(
            "time s",
            0,
            14,
            |r, _| num(format!("{:.9}", r.time_s)),
            |r| Key::Num(r.time_s),
        ),
        Col::left(
            "host",
            6,
            12,
            |r, _| Span::raw(r.host.clone()),
            |r| Key::Str(&r.host),
        ),
        Col::right(
            "gpu",
            0,
            3,
            |r, _| num(r.gpu.to_string()),
            |r| Key::Num(f64::from(r.gpu)),
        ),
        Col::left(
            "qpn",
            0,
            8,
            |r, _| Span::raw(format!("0x{:x}", r.qpn)),
            |r| Key::Num(f64::from(r.qpn)),
        ),
        Col::left(
            "pi",
            2,
            6,
            |r, _| Span::raw(format!("0x{:04x}", r.pi)),
            |r| Key::Num(f64::from(r.pi)),
        ),
        Col::left(
            "opcode",
            0,
            14,
            |r, c| {
                if r.opcode == "?" {
                    styled("? unparsable".into(), c.th.warn)
                } else {
                    Span::raw(r.opcode.clone())
                }
            },
            |r| Key::Str(&r.opcode),
        ),
        Col::right(
            "len B",
            1,
            10,
            |r, _| num(r.bytes.to_string()),
            |r| Key::Num(r.bytes as f64),
        ),
        Col::left(
            "raddr",
            3,
            22,
            |r, _| Span::raw(units::addr(r.raddr)),
            |r| Key::Num(r.raddr as f64),
        ),
        Col::left(
            "rkey",
            4,
            10,
            |r, _| Span::raw(format!("0x{:x}", r.rkey)),
            |r| Key::Num(f64::from(r.rkey)),
        ),
        Col::right(
            "WQEs",
            1,
            5,
            |r, _| num(r.wqes.to_string()),
            |r| Key::Num(f64::from(r.wqes)),
        ),
    ]
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
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
                .into_iter()
                .chain(demo_hint(vm, th))
                .collect::<Vec<_>>()
            } else {
                vec![
                    Line::from(Span::styled(" no GPU-initiated doorbells seen", th.dim)),
                    Line::from(Span::styled(
                        " (needs the mlx5 and cuda layers and a GPU-initiated transport,",
                        th.dim,
                    )),
                    Line::from(Span::styled(" e.g. NVSHMEM with IBGDA)", th.dim)),
                ]
                .into_iter()
                .chain(demo_hint(vm, th))
                .collect::<Vec<_>>()
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
                    units::count(vm.status.coalesced_doorbells)
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

/// In the CPU demo: where the GPU one is.
fn demo_hint(vm: &ViewModel, th: &crate::theme::Theme) -> Option<Line<'static>> {
    (vm.header.source == "demo").then(|| {
        Line::from(Span::styled(
            " `sigmatop demo gpu` replays GPU doorbells: NVIDIA NVSHMEM, 2 PEs on an H200",
            th.dim,
        ))
    })
}
