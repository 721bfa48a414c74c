//! The Matrix tab: traffic between ranks, GPUs or nodes as a heat map (row = source, column =
//! destination), with row and column sums and the hot rows marked.

use crate::app::{App, MatrixKind, Tab};
use crate::model::ViewModel;
use crate::units;
use crate::warnings::ratios_to_mean;
use crate::widgets::bar::{SHADES, heat_level};
use crate::widgets::section::section;
use crate::widgets::text::truncate;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use unicode_width::UnicodeWidthStr;

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App, vm: &ViewModel) {
    let th = &app.theme;
    let t = Tab::Matrix.index();
    let kind = app.matrix_kind_for(
        vm.matrices.node.labels.len(),
        vm.matrices.rank.labels.len(),
        vm.matrices.gpu.labels.len(),
    );
    // Endpoints with several peers are in no rank or node cell (never GPU ones).
    let left_out = match kind {
        MatrixKind::Gpu => 0,
        MatrixKind::Rank | MatrixKind::Node => vm.matrices.left_out_endpoints,
    };
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
        // "yet" only where one can still come: a job whose processes have no rank gets no
        // rank matrix, however long one waits.
        let no_ranks = !vm.processes.is_empty() && vm.processes.iter().all(|p| p.rank.is_none());
        let msg = if kind == "rank" && no_ranks {
            " no rank matrix: no traced process has an MPI/NCCL rank (m shows the GPU and node matrices)"
                .to_string()
        } else {
            format!(" no {kind} matrix yet")
        };
        frame.render_widget(
            Paragraph::new(Span::styled(truncate(&msg, inner.width as usize), th.dim)),
            inner,
        );
        return;
    }
    let val = |v: f64| match app.matrix_rate {
        true => units::rate(v, app.units),
        false => units::volume(v, app.units),
    };
    let max = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| cell(i, j))
        .fold(0.0, f64::max);
    let egress: Vec<f64> = (0..n).map(|i| (0..n).map(|j| cell(i, j)).sum()).collect();
    let ingress: Vec<f64> = (0..n).map(|j| (0..n).map(|i| cell(i, j)).sum()).collect();
    // The untraced peers' row and column are no node or rank of the job: they take no part in
    // its skew.
    let traced = if m.untraced { n - 1 } else { n };
    let ratios = ratios_to_mean(&egress[..traced]);
    let ratios_in = ratios_to_mean(&ingress[..traced]);

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

    // Header, ingress, legend, and the left-out line when there is one (not in the rate view,
    // whose cells are rates).
    let left_out_line = left_out > 0 && !app.matrix_rate;
    let rows_h = (inner.height as usize).saturating_sub(3 + usize::from(left_out_line));
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
    if left_out_line {
        // An empty or thin matrix must not read as "nothing moved": say what is not in it.
        let msg = format!(
            " ⚠ {} on {left_out} endpoint{} with several peers not in the matrix (their counters \
             do not say which peer; a --record in simple mode has each operation's peer)",
            val(vm.matrices.left_out_bytes),
            units::plural(u64::from(left_out)),
        );
        lines.push(Line::from(Span::styled(
            truncate(&msg, inner.width as usize),
            th.warn,
        )));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}
