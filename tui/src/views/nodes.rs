//! The Nodes tab: egress and ingress per node and per rank, with the skew (max/mean) of each.
//! Under `attach HOST...` it is the home of multi-host: one row per host, with the state of its
//! link (up / connecting / lost: the reason) and its number of processes, hosts that cannot be
//! reached included.

use super::{Totals, WindowRates, ctx, num};
use crate::app::{App, Tab};
use crate::model::{NodeRow, RankRow, ViewModel};
use crate::warnings::skew;
use crate::widgets::bar::bar;
use crate::widgets::section::{section, title_line};
use crate::widgets::table::{Col, Ctx, Key, render_table, sort_rows};
use crate::widgets::text::styled;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

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

super::traffic!(
    NodeRow,
    totals(egress_bytes, ingress_bytes),
    window(egress_bps, ingress_bps)
);
super::traffic!(
    RankRow,
    totals(egress_bytes, ingress_bytes),
    window(egress_bps, ingress_bps)
);

/// The columns the node and rank tables share, in this order: rate out and its ratio to the mean,
/// rate in and its ratio (so that a ◀ stands right after the figure it flags), totals out and
/// in, and a bar of the rate out. On a narrow terminal the bar goes first (it repeats the rate
/// out), then the totals (issue 39, item 3).
///
/// The rates are over the window, titled as the QPs tab's window columns ("▲ 10s B/s": ▲ egress,
/// ▼ ingress, as the skew lines above the tables say), not the header's "now": skew is read on
/// them, and a node's rate then does not jump with every snapshot.
fn flow_cols<R: WindowRates + Totals>(app: &App) -> Vec<Col<R>> {
    let [tx_window, rx_window] = super::window_rate_cols(app, 0);
    let [sent_total, received_total] = super::total_cols(app, 2);
    vec![
        tx_window,
        Col::right(
            "▲ ×mean",
            0,
            8,
            |r, c| ratio_cell(r.tx_window(), c),
            |r| Key::Num(r.tx_window()),
        ),
        rx_window,
        Col::right(
            "▼ ×mean",
            0,
            8,
            |r, c| ratio_in_cell(r.rx_window(), c),
            |r| Key::Num(r.rx_window()),
        ),
        sent_total,
        received_total,
        Col::left(
            "▲ egress",
            3,
            BAR_W as u16,
            |r, c| styled(bar(r.tx_window() / c.max.max(1e-9), BAR_W), c.th.tx),
            |r| Key::Num(r.tx_window()),
        ),
    ]
}

/// The link state, coloured: up (ok), connecting (dim), lost (error).
fn state_cell(r: &NodeRow, c: &Ctx) -> Span<'static> {
    let style = if r.state == "up" {
        c.th.ok
    } else if r.state.starts_with("lost") {
        c.th.error
    } else {
        c.th.dim
    };
    styled(r.state.clone(), style)
}

/// The node table's columns; `links`: sigmatop follows remote hosts, so each row has a state and
/// the state column comes right after the name (its reason is the widest cell, so it is last to
/// be cut).
fn node_cols(app: &App, links: bool) -> Vec<Col<NodeRow>> {
    let mut cols: Vec<Col<NodeRow>> = vec![Col::left(
        "node",
        0,
        16,
        |r, _| Span::raw(r.host.clone()),
        |r| Key::Str(&r.host),
    )];
    if links {
        cols.push(Col::left("state", 0, 44, state_cell, |r| {
            Key::Str(&r.state)
        }));
        cols.push(Col::right(
            "procs",
            0,
            5,
            |r, _| num(r.processes.to_string()),
            |r| Key::Num(f64::from(r.processes)),
        ));
    }
    cols.extend(flow_cols(app));
    cols
}

/// The rank table's columns; `silent`: some rank is silent, so each row says whether it is
/// (right after the rank: it is what to look at).
fn rank_cols(app: &App, silent: bool) -> Vec<Col<RankRow>> {
    let mut cols: Vec<Col<RankRow>> = vec![Col::right(
        "rank",
        0,
        6,
        |r, _| num(r.rank.to_string()),
        |r| Key::Num(f64::from(r.rank)),
    )];
    if silent {
        cols.push(Col::left(
            "state",
            0,
            12,
            |r, c| match r.silent_s {
                Some(s) => styled(super::silent_label(s), c.th.warn),
                None => styled("up".into(), c.th.ok),
            },
            |r| Key::Num(r.silent_s.unwrap_or(-1.0)),
        ));
    }
    cols.extend(flow_cols(app));
    cols.push(Col::left(
        "host",
        1,
        16,
        |r, _| Span::raw(r.host.clone()),
        |r| Key::Str(&r.host),
    ));
    cols
}

/// The mean (0 among fewer than `SKEW_MIN_MEMBERS`: no "× mean" to read, as no skew is judged)
/// and the max of `v`.
fn mean_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let max = v.iter().copied().fold(0.0, f64::max);
    if v.len() < crate::warnings::SKEW_MIN_MEMBERS {
        return (0.0, max);
    }
    (v.iter().sum::<f64>() / v.len() as f64, max)
}

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let filter = app.parsed_filter();
    let t = Tab::Nodes.index();
    let (col, desc) = (app.sort[t].column, app.sort[t].descending);

    // Skew summary over all rows (not the filtered ones: skew is a property of the job), less the
    // hosts that were never reached: they have no traffic to compare.
    let nodes: Vec<&NodeRow> = vm
        .nodes
        .iter()
        .filter(|n| n.state.is_empty() || n.processes > 0)
        .collect();
    let node_e: Vec<f64> = nodes.iter().map(|n| n.egress_bps).collect();
    let rank_e: Vec<f64> = vm.ranks.iter().map(|n| n.egress_bps).collect();
    let node_i: Vec<f64> = nodes.iter().map(|n| n.ingress_bps).collect();
    let rank_i: Vec<f64> = vm.ranks.iter().map(|n| n.ingress_bps).collect();
    let node_name = |s: Option<(usize, f64)>| {
        s.and_then(|(i, _)| nodes.get(i))
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

    let links = vm.nodes.iter().any(|n| !n.state.is_empty());
    let ncols = node_cols(app, links);
    let mut nrows: Vec<&NodeRow> = vm.nodes.iter().filter(|r| filter.node(r)).collect();
    sort_rows(&mut nrows, &ncols, col, desc);
    let rcols = rank_cols(app, vm.ranks.iter().any(|r| r.silent_s.is_some()));
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
    let lost = vm
        .nodes
        .iter()
        .filter(|n| n.state.starts_with("lost"))
        .count();
    let silent: u32 = vm.nodes.iter().map(|n| n.silent).sum();
    let mut notes: Vec<String> = Vec::new();
    if lost > 0 {
        notes.push(format!("{lost} lost"));
    }
    if silent > 0 {
        let on: Vec<&str> = vm
            .nodes
            .iter()
            .filter(|n| n.silent > 0)
            .map(|n| n.host.as_str())
            .collect();
        notes.push(format!(
            "{silent} silent process{} on {}",
            if silent == 1 { "" } else { "es" },
            on.join(", ")
        ));
    }
    let note = notes.join(" · ");
    let block = section(
        th,
        title_line(th, "Nodes", nrows.len(), vm.nodes.len(), &note),
    );
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
    let silent_ranks: Vec<String> = vm
        .ranks
        .iter()
        .filter(|r| r.silent_s.is_some())
        .map(|r| format!("r{}", r.rank))
        .collect();
    let rank_note = if silent_ranks.is_empty() {
        String::new()
    } else {
        format!("silent: {}", silent_ranks.join(", "))
    };
    let block = section(
        th,
        title_line(th, "Ranks", rrows.len(), vm.ranks.len(), &rank_note),
    );
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
