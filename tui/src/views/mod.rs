//! The views, one file each, and what they share: which view draws the body of which tab, the
//! table context, and small cell helpers. Each view is a function of (area, App, ViewModel).
//!
//! - `overview`: processes, bandwidth over time, warnings
//! - `qps`: QPs and endpoints, the selected one in detail
//! - `gpus`: GPU-initiated RDMA per GPU
//! - `nodes`: egress and ingress per node and per rank, with skew
//! - `matrix`: rank / GPU / node traffic matrix as a heat map
//! - `doorbells`: doorbell rates and the latest decoded doorbells
//! - `collectives`: NCCL collectives per communicator and rank, arrival spread
//! - `help`: the help overlay

mod collectives;
mod doorbells;
mod gpus;
mod help;
mod matrix;
mod nodes;
mod overview;
mod qps;

pub(crate) use help::draw_help;

use crate::app::{App, Tab};
use crate::model::ViewModel;
use crate::units;
use crate::warnings::Warning;
use crate::widgets::table::{Col, Ctx, Key};
use crate::widgets::text::styled;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Span;

/// Draws the body of the current tab into `area`.
pub(crate) fn draw_body(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    vm: &ViewModel,
    warns: &[Warning],
) {
    match app.tab {
        Tab::Overview => overview::draw(frame, area, app, vm, warns),
        Tab::Qps => qps::draw(frame, area, app, vm),
        Tab::Gpus => gpus::draw(frame, area, app, vm),
        Tab::Nodes => nodes::draw(frame, area, app, vm),
        Tab::Matrix => matrix::draw(frame, area, app, vm),
        Tab::Doorbells => doorbells::draw(frame, area, app, vm),
        Tab::Collectives => collectives::draw(frame, area, app, vm),
    }
}

/// What a table row has moved since the start, sent and received (a process, an endpoint, a node,
/// a rank): what the two "total" columns read.
pub(super) trait Totals {
    fn sent(&self) -> u64;
    fn received(&self) -> u64;
}

/// A row's rates "now" (between the last two snapshots): the "▲ tx" / "▼ rx" columns.
pub(super) trait NowRates {
    fn tx_now(&self) -> f64;
    fn rx_now(&self) -> f64;
}

/// A row's rates over the window: the "▲ 10s" / "▼ 10s" columns.
pub(super) trait WindowRates {
    fn tx_window(&self) -> f64;
    fn rx_window(&self) -> f64;
}

/// Implements [`Totals`], and [`NowRates`] / [`WindowRates`] where named, from a row's fields.
macro_rules! traffic {
    ($row:ty, totals($sent:ident, $received:ident) $(, now($tx:ident, $rx:ident))? $(, window($wtx:ident, $wrx:ident))?) => {
        impl $crate::views::Totals for $row {
            fn sent(&self) -> u64 {
                self.$sent
            }
            fn received(&self) -> u64 {
                self.$received
            }
        }
        $(impl $crate::views::NowRates for $row {
            fn tx_now(&self) -> f64 {
                self.$tx
            }
            fn rx_now(&self) -> f64 {
                self.$rx
            }
        })?
        $(impl $crate::views::WindowRates for $row {
            fn tx_window(&self) -> f64 {
                self.$wtx
            }
            fn rx_window(&self) -> f64 {
                self.$wrx
            }
        })?
    };
}
pub(super) use traffic;

/// The "▲ tx" and "▼ rx" columns: rates now, never dropped.
pub(super) fn now_rate_cols<R: NowRates>(app: &App) -> [Col<R>; 2] {
    let u = app.units.rate();
    [
        Col::right(
            format!("▲ tx {u}"),
            0,
            10,
            |r, c| styled(units::rate(r.tx_now(), c.app.units), c.th.tx),
            |r| Key::Num(r.tx_now()),
        ),
        Col::right(
            format!("▼ rx {u}"),
            0,
            10,
            |r, c| styled(units::rate(r.rx_now(), c.app.units), c.th.rx),
            |r| Key::Num(r.rx_now()),
        ),
    ]
}

/// The "▲ 10s" and "▼ 10s" columns (the window's label): rates over the window, at `prio`.
pub(super) fn window_rate_cols<R: WindowRates>(app: &App, prio: u8) -> [Col<R>; 2] {
    let u = app.units.rate();
    let w = app.window.label();
    [
        Col::right(
            format!("▲ {w} {u}"),
            prio,
            11,
            |r, c| styled(units::rate(r.tx_window(), c.app.units), c.th.tx),
            |r| Key::Num(r.tx_window()),
        ),
        Col::right(
            format!("▼ {w} {u}"),
            prio,
            11,
            |r, c| styled(units::rate(r.rx_window(), c.app.units), c.th.rx),
            |r| Key::Num(r.rx_window()),
        ),
    ]
}

/// The "▲ total" and "▼ total" columns of every table that has them, both at priority `prio`.
pub(super) fn total_cols<R: Totals>(app: &App, prio: u8) -> [Col<R>; 2] {
    let v = app.units.volume();
    [
        Col::right(
            format!("▲ total {v}"),
            prio,
            10,
            |r, c| num(units::volume(r.sent() as f64, c.app.units)),
            |r| Key::Num(r.sent() as f64),
        ),
        Col::right(
            format!("▼ total {v}"),
            prio,
            10,
            |r, c| num(units::volume(r.received() as f64, c.app.units)),
            |r| Key::Num(r.received() as f64),
        ),
    ]
}

pub(super) fn ctx(app: &App) -> Ctx<'_> {
    Ctx {
        th: &app.theme,
        app,
        mean: 0.0,
        mean_in: 0.0,
        max: 0.0,
    }
}

/// "silent 6.2s" (seconds since a process's last frame), "silent 123s" from 100 s on.
pub(super) fn silent_label(s: f64) -> String {
    if s < 99.95 {
        format!("silent {s:.1}s")
    } else {
        format!("silent {s:.0}s")
    }
}

pub(super) fn opt_rank(r: Option<u32>) -> String {
    r.map(|r| r.to_string()).unwrap_or_else(|| "—".into())
}

pub(super) fn num(s: String) -> Span<'static> {
    Span::raw(s)
}

pub(super) fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "—".into()
    } else {
        s.to_string()
    }
}

/// Some traced process has the layers that see GPU-initiated RDMA (so an empty GPU or doorbell
/// view means the GPUs rang nothing, not that sigmatop could not see them).
pub(super) fn gpu_layers_on(vm: &ViewModel) -> bool {
    vm.processes
        .iter()
        .any(|p| p.layers.iter().any(|l| l == "mlx5") && p.layers.iter().any(|l| l == "cuda"))
}
