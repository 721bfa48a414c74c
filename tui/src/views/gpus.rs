//! The GPUs tab: GPU-initiated RDMA per GPU (the doorbells it rang and the WQEs behind them), and
//! the doorbell rate of each GPU's series.

use super::doorbells::series_line;
use super::{ctx, gpu_layers_on, num};
use crate::app::{App, Tab};
use crate::model::{DoorbellSeries, GpuRow, ViewModel};
use crate::units;
use crate::widgets::section::{section, title_line};
use crate::widgets::table::{Col, Key, render_table, sort_rows};
use crate::widgets::text::styled;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

fn gpu_cols(app: &App) -> Vec<Col<GpuRow>> {
    let u = app.units.rate();
    let v = app.units.volume();
    vec![
        Col::left(
            "host",
            0,
            16,
            |r, _| Span::raw(r.host.clone()),
            |r| Key::Str(&r.host),
        ),
        Col::left(
            "proc",
            1,
            10,
            |r, _| Span::raw(r.process_label()),
            |r| Key::Num(r.rank.map_or(1e12 + f64::from(r.pid), f64::from)),
        ),
        Col::right(
            "GPU",
            0,
            4,
            |r, _| num(r.gpu.to_string()),
            |r| Key::Num(f64::from(r.gpu)),
        ),
        Col::right(
            format!("▲▼ WQE {u}"),
            0,
            12,
            |r, c| styled(units::rate(r.bytes_per_s, c.app.units), c.th.tx),
            |r| Key::Num(r.bytes_per_s),
        ),
        Col::right(
            "db/s",
            0,
            8,
            |r, _| num(units::si(r.doorbells_per_s)),
            |r| Key::Num(r.doorbells_per_s),
        ),
        Col::right(
            format!("{v}/db"),
            3,
            8,
            |r, c| {
                num(if r.doorbells_per_s > 0.0 {
                    units::volume(r.bytes_per_s / r.doorbells_per_s, c.app.units)
                } else {
                    "—".into()
                })
            },
            |r| Key::Num(r.bytes_per_s / r.doorbells_per_s.max(1e-9)),
        ),
        Col::right(
            "in-flight WQE",
            1,
            13,
            |r, _| num(units::count(r.inflight_wqes)),
            |r| Key::Num(r.inflight_wqes as f64),
        ),
        Col::left(
            "WQE opcode mix",
            2,
            40,
            |r, _| Span::raw(units::mix(&r.opcode_mix, 4)),
            |r| {
                let top = r.opcode_mix.iter().max_by_key(|o| o.1);
                Key::Text(top.map(|o| o.0.clone()).unwrap_or_default())
            },
        ),
    ]
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
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
