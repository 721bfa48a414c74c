//! The help overlay (`?`): every key, what the columns and counters mean, and the warning rules
//! with their thresholds.

use crate::app::App;
use crate::units;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

pub(crate) fn draw_help(frame: &mut Frame, area: Rect, app: &App) {
    let th = &app.theme;
    let cfg = &app.warning_config;
    let k = |s: &str| Span::styled(format!("{s:<10}"), th.title);
    let t = |s: String| Span::raw(s);
    let lines: Vec<Line> = vec![
        Line::from(vec![
            k("Views"),
            t("1 Overview 2 QPs 3 GPUs 4 Nodes 5 Matrix d Doorbells".into()),
        ]),
        Line::from(vec![
            k(""),
            t("c Collectives: NCCL per communicator and rank, arrival".into()),
        ]),
        Line::from(vec![
            k(""),
            t("Tab / Shift-Tab next / previous view".into()),
        ]),
        Line::from(vec![
            k("Move"),
            t("j/k or ↑/↓ row · PgUp/PgDn page · g/G first/last".into()),
        ]),
        Line::from(vec![
            k("Sort"),
            t("s next column on screen · S reverse (↓ desc, ↑ asc)".into()),
        ]),
        Line::from(vec![
            k("Filter"),
            t("/ then rank=3 host=node2 qpn=0x2a40 layer=ucx op=write".into()),
        ]),
        Line::from(vec![
            k(""),
            t("key=v exact, key~v substring, or any text; all must match".into()),
        ]),
        Line::from(vec![
            k(""),
            t(format!("keys: {}", crate::query::KEYS.join(" "))),
        ]),
        Line::from(vec![
            k(""),
            t("Enter keeps, Esc cancels; Esc later clears the filter".into()),
        ]),
        Line::from(vec![
            k("Time"),
            t("space pause view (collection goes on) · ←/→ w window".into()),
        ]),
        Line::from(vec![
            k(""),
            t("[ ] step back/forward in history ({ } by 10) · +/- speed".into()),
        ]),
        Line::from(vec![
            k("Display"),
            t(format!(
                "u bits/bytes · t theme (now {}) · m matrix kind · r rate",
                th.name
            )),
        ]),
        Line::from(vec![
            k(""),
            t("< > or h l scroll matrix columns that do not fit".into()),
        ]),
        Line::from(vec![
            k("Quit"),
            t("q · Ctrl-C (under `sigmatop run`: SIGINT to the program)".into()),
        ]),
        Line::from(vec![
            k("Columns"),
            t("▲ tx = sent by this row (egress), ▼ rx = received".into()),
        ]),
        Line::from(vec![
            k(""),
            t("B/s bytes per second, SI prefixes (k = 1000); b/s bits".into()),
        ]),
        Line::from(vec![
            k(""),
            t("db/s doorbells · posted receives · WRs out sends pending".into()),
        ]),
        Line::from(vec![
            k("Counters"),
            t("drops: events, ring full · frames lost: this view too slow".into()),
        ]),
        Line::from(vec![
            k(""),
            t("coalesced: doorbells seen as one · unparsable: bad WQEs".into()),
        ]),
        Line::from(vec![
            k("Warnings"),
            t(format!(
                "▲/▼ skew ≥ {:.1}× mean · idle QP with posted WR · ≥ {} db/s",
                cfg.skew_ratio,
                units::si(cfg.doorbell_storm_per_s)
            )),
        ]),
        Line::from(vec![
            k(""),
            t(format!(
                "NCCL collective open > {:.1}s: hung, names the ranks it waits for",
                cfg.collective_hang_s
            )),
        ]),
        Line::from(vec![
            k(""),
            t("silent: no frame for 1 s · waits: the one the others wait on".into()),
        ]),
    ];
    let want_w = 72u16;
    let want_h = lines.len() as u16 + 2;
    let w = want_w.min(area.width.saturating_sub(2));
    let h = want_h.min(area.height.saturating_sub(2));
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, r);
    let block = Block::bordered()
        .border_style(th.title)
        .style(th.text)
        .title(Span::styled(" sigmatop help ", th.title))
        .title_bottom(Line::from(Span::styled(" Esc or ? closes ", th.dim)).right_aligned());
    frame.render_widget(Paragraph::new(lines).block(block), r);
}
