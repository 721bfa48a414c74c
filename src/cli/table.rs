//! Plain-text tables of a `Report`, for summaries, `attach --once` and `report`.

use std::fmt::Write;

pub use sigmatop_tui::units::human_bytes;

use crate::agg::{Model, ProcessReport, Report};

/// Was this process cut (it ended without its clean shutdown)? Live (`model` given), a process
/// still running is not; from a recording, every process has ended.
/// `n` operations of `bytes` in all, as a person reads a product: "15×100 kB = 1.50 MB" (each
/// the same size), "15×~98.3 kB = 1.47 MB" (sizes differ: the mean), "1×640 B", "3×0 B". Not
/// "15×1.50 MB", which reads as 22.5 MB (issue 25, item 10).
fn times(n: u64, bytes: u64) -> String {
    if n <= 1 || bytes == 0 {
        return format!("{n}×{}", human_bytes(bytes as f64));
    }
    let each = human_bytes(bytes as f64 / n as f64);
    let approx = if bytes.is_multiple_of(n) { "" } else { "~" };
    format!("{n}×{approx}{each} = {}", human_bytes(bytes as f64))
}

fn cut(p: &ProcessReport, live: Option<&Model>) -> bool {
    match live {
        // The latest image of that pid (a program that exec'd has two).
        Some(m) => m
            .processes
            .iter()
            .rfind(|(k, _)| k.host == p.host && k.pid == p.pid)
            .is_some_and(|(_, s)| s.exited && !s.said_bye),
        None => !p.clean_exit,
    }
}

fn rank_str(r: Option<u32>) -> String {
    r.map(|r| r.to_string()).unwrap_or_else(|| "-".into())
}

/// How wide printed text may be: where it goes to a terminal (`to_terminal`), `COLUMNS` when
/// it is set, else the terminal's width; elsewhere no limit (a pipe or a file keeps whole lines,
/// for the scripts that read them).
pub fn width_for(to_terminal: bool) -> Option<usize> {
    if !to_terminal {
        return None;
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| {
            crossterm::terminal::size()
                .ok()
                .map(|(w, _)| w as usize)
                .filter(|&w| w > 0)
        })
}

/// Columns of text (every character these tables print is one column wide).
fn cols(s: &str) -> usize {
    s.chars().count()
}

/// The process table's columns: header, its short form, left-aligned, width when nothing is cut.
const PROC_COLS: [(&str, &str, bool, usize); 9] = [
    ("host", "host", true, 16),
    ("pid", "pid", false, 8),
    ("rank", "rank", false, 5),
    ("program", "program", true, 14),
    ("▲ tx bytes", "▲ tx", false, 12),
    ("▼ rx bytes", "▼ rx", false, 12),
    ("tx ops", "tx ops", false, 10),
    ("rx ops", "rx ops", false, 10),
    ("lost", "lost", false, 8),
];

/// How the process table is laid out at a width: each column's width (None: left out) and
/// header.
struct Layout {
    width: [Option<usize>; 9],
    head: [&'static str; 9],
    /// The table fits as it is printed without a limit (note after the row, full widths).
    full: bool,
}

impl Layout {
    /// The full table when it fits `limit`; else the columns as wide as what they hold, then
    /// short headers, then (widest first among those a person needs least) the operation counts
    /// and a `lost` column of zeros left out, then host and program names cut (issue 39, item 7:
    /// at 80 columns the summary wrapped mid-column).
    fn fit(rows: &[[String; 9]], notes: usize, limit: Option<usize>) -> Layout {
        let full_w: usize = PROC_COLS.iter().map(|c| c.3).sum::<usize>() + PROC_COLS.len() - 1;
        let full = Layout {
            width: PROC_COLS.map(|c| Some(c.3)),
            head: PROC_COLS.map(|c| c.0),
            full: true,
        };
        let Some(limit) = limit else { return full };
        if full_w + notes <= limit {
            return full;
        }
        let held = |i: usize| rows.iter().map(|r| cols(&r[i])).max().unwrap_or(0);
        let mut l = Layout {
            width: [None; 9],
            head: PROC_COLS.map(|c| c.0),
            full: false,
        };
        let total = |l: &Layout| -> usize {
            let shown: Vec<usize> = l.width.iter().flatten().copied().collect();
            shown.iter().sum::<usize>() + shown.len().saturating_sub(1)
        };
        let set = |l: &mut Layout, short: bool| {
            for (i, c) in PROC_COLS.iter().enumerate() {
                if l.width[i].is_some() || !short {
                    let head = if short { c.1 } else { c.0 };
                    l.head[i] = head;
                    l.width[i] = Some(held(i).min(c.3).max(cols(head)));
                }
            }
        };
        set(&mut l, false);
        if total(&l) > limit {
            set(&mut l, true);
        }
        // rx ops, tx ops, then lost when it says 0 for every process (the total line says it).
        let zeros = rows.iter().all(|r| r[8] == "0");
        for i in [7, 6, 8] {
            if total(&l) <= limit {
                break;
            }
            if i != 8 || zeros {
                l.width[i] = None;
            }
        }
        // Names cut, the wider first, down to 8 columns each.
        while total(&l) > limit {
            let (h, p) = (l.width[0].unwrap_or(0), l.width[3].unwrap_or(0));
            let i = if h >= p { 0 } else { 3 };
            match l.width[i] {
                Some(w) if w > 8 => l.width[i] = Some(w - 1),
                _ => break,
            }
        }
        l
    }

    fn line(&self, cells: &[String; 9]) -> String {
        let mut out = Vec::new();
        for (i, c) in PROC_COLS.iter().enumerate() {
            let Some(w) = self.width[i] else { continue };
            let v = trunc(&cells[i], w);
            out.push(if c.2 {
                format!("{v:<w$}")
            } else {
                format!("{v:>w$}")
            });
        }
        let mut s = out.join(" ");
        if !self.full {
            s.truncate(s.trim_end().len());
        }
        s
    }

    /// The columns left out, for a line that says so.
    fn left_out(&self) -> Vec<&'static str> {
        PROC_COLS
            .iter()
            .zip(&self.width)
            .filter(|(_, w)| w.is_none())
            .map(|(c, _)| c.0)
            .collect()
    }
}

/// `line` cut at spaces into lines of at most `limit` columns, the continuation lines indented
/// by `indent`; a word longer than a line stays whole (the terminal wraps it).
fn wrap(line: &str, limit: usize, indent: usize) -> Vec<String> {
    if cols(line) <= limit {
        return vec![line.to_string()];
    }
    let lead = line.len() - line.trim_start_matches(' ').len();
    let mut out = Vec::new();
    let mut cur = " ".repeat(lead);
    let mut empty = true;
    for word in line[lead..].split(' ') {
        if !empty && cols(&cur) + 1 + cols(word) > limit {
            out.push(std::mem::take(&mut cur));
            cur = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            cur.push(' ');
        }
        cur.push_str(word);
        empty = false;
    }
    out.push(cur);
    out
}

/// `prefix` then `items` joined with ", ", broken between items into lines of at most `limit`
/// columns (an item is never cut): the lines they go on to are aligned under the first item where
/// every item fits there, else indented by 8; where not even the first fits after `prefix`, the
/// items start on the next line.
fn wrap_items(prefix: &str, items: &[String], limit: usize) -> Vec<String> {
    let pieces: Vec<String> = items
        .iter()
        .enumerate()
        .map(|(n, it)| {
            if n + 1 < items.len() {
                format!("{it},")
            } else {
                it.clone()
            }
        })
        .collect();
    let longest = pieces.iter().map(|p| cols(p)).max().unwrap_or(0);
    let indent = if cols(prefix) + longest <= limit {
        cols(prefix)
    } else {
        8
    };
    let mut out = Vec::new();
    let mut cur = prefix.to_string();
    let mut empty = true;
    for piece in &pieces {
        let sep = usize::from(!empty);
        if cols(&cur) + sep + cols(piece) > limit && (!empty || !cur.trim().is_empty()) {
            out.push(cur.trim_end().to_string());
            cur = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            cur.push(' ');
        }
        cur.push_str(piece);
        empty = false;
    }
    out.push(cur.trim_end().to_string());
    out
}

/// Per-process and per-endpoint totals. `live` is the model of live processes the report was
/// made from (None for recordings): a process still running is not marked as cut. `limit`: the
/// columns the text may take (`width_for`); None prints whole lines.
pub fn render(report: &Report, live: Option<&Model>, limit: Option<usize>) -> String {
    fit_lines(&render_lines(report, live, limit), limit)
}

/// Each line of `text` wider than `limit` cut at spaces (never mid-word, as the terminal
/// would), the lines it goes on to indented 2 more than it.
pub fn fit_lines(text: &str, limit: Option<usize>) -> String {
    let Some(limit) = limit else {
        return text.to_string();
    };
    let mut s = String::with_capacity(text.len());
    for line in text.lines() {
        let lead = line.len() - line.trim_start_matches(' ').len();
        for l in wrap(line, limit, lead + 2) {
            s.push_str(&l);
            s.push('\n');
        }
    }
    s
}

fn render_lines(report: &Report, live: Option<&Model>, limit: Option<usize>) -> String {
    let mut s = String::new();
    let rows: Vec<[String; 9]> = report
        .processes
        .iter()
        .map(|p| {
            [
                p.host.clone(),
                p.pid.to_string(),
                match (p.rank, p.child_of_rank) {
                    (None, Some(parent)) => format!("↳{parent}"),
                    (r, _) => rank_str(r),
                },
                p.exe.clone(),
                human_bytes(p.flow.tx_bytes as f64),
                human_bytes(p.flow.rx_bytes as f64),
                p.flow.tx_ops.to_string(),
                p.flow.rx_ops.to_string(),
                p.drops.total_events_lost().to_string(),
            ]
        })
        .collect();
    let notes: Vec<String> = report
        .processes
        .iter()
        .map(|p| match (&p.problem, p.exit_signal, p.exit_code) {
            (Some(what), Some(_), _) => {
                format!("  (no clean exit: counted up to its last snapshot) {what}")
            }
            (_, None, Some(code)) if cut(p, live) => format!(
                "  (no clean exit: counted up to its last snapshot) exited with status {code}"
            ),
            _ if cut(p, live) => "  (no clean exit: counted up to its last snapshot)".into(),
            (_, None, Some(code)) => format!("  exited with status {code}"),
            _ => String::new(),
        })
        .collect();
    let longest_note = notes.iter().map(|n| cols(n)).max().unwrap_or(0);
    let layout = Layout::fit(&rows, longest_note, limit);
    let head: [String; 9] = layout.head.map(String::from);
    let _ = writeln!(s, "{}", layout.line(&head));
    let out = layout.left_out();
    if !out.is_empty() {
        let _ = writeln!(
            s,
            "    ({} left out at {} columns: a wider terminal shows them)",
            out.join(", "),
            limit.unwrap_or(0)
        );
    }
    // The peer column fits the longest peer name (an IPv6 GID), within reason.
    let mut peer_w = report
        .processes
        .iter()
        .flat_map(|p| &p.endpoints)
        .filter_map(|e| e.peer.as_ref())
        .map(|pr| pr.label().chars().count() + 2)
        .max()
        .unwrap_or(0)
        .clamp(22, 48);
    if let Some(limit) = limit.filter(|_| !layout.full) {
        // Room for an operation after the endpoint's names.
        peer_w = peer_w.min(limit.saturating_sub(4 + 7 + 15 + 24)).max(12);
    }
    for ((p, row), note) in report.processes.iter().zip(&rows).zip(&notes) {
        if layout.full {
            let _ = writeln!(s, "{}{note}", layout.line(row));
        } else {
            let _ = writeln!(s, "{}", layout.line(row));
            if !note.is_empty() {
                let _ = writeln!(s, "   {note}");
            }
        }
        match (p.state, p.silent_s) {
            ("silent", Some(secs)) => {
                let _ = writeln!(
                    s,
                    "    silent {secs:.1}s: no frame since (stopped, or hung so hard that its collector does not run); its figures are those of its last snapshot"
                );
            }
            ("not answering", Some(secs)) => {
                let _ = writeln!(
                    s,
                    "    silent {secs:.1}s: {}",
                    p.problem
                        .as_deref()
                        .unwrap_or("traced (its socket is there) but not answering")
                );
            }
            _ => {}
        }
        if p.flow.refused > 0 {
            let _ = writeln!(
                s,
                "    provider busy: {} refused (posts the library turned away and the program retried; not counted as operations)",
                p.flow.refused
            );
        }
        if p.flow.errors > 0 {
            let _ = writeln!(
                s,
                "    failed: {} (error completions, failed calls and endpoints; flushed work requests and cancelled receives are not counted)",
                p.flow.errors
            );
        }
        for e in &p.endpoints {
            let peer = match &e.peer {
                Some(pr) => format!("→ {}", pr.label()),
                None if !e.peer_text.is_empty() => format!("→ {}", e.peer_text),
                None => String::new(),
            };
            let ops: Vec<String> = e
                .ops
                .iter()
                .map(|(k, v)| {
                    if v.ops == 0 && v.bytes == 0 && v.posted == 0 && v.refused == 0 {
                        // Error completions alone (verbs: their opcode is not defined).
                        return format!("{} failed", v.errors);
                    }
                    let mut t = format!("{k} {}", times(v.ops, v.bytes));
                    if v.posted > 0 {
                        let _ = write!(t, " (posted {})", times(v.posted, v.posted_bytes));
                    }
                    if v.refused > 0 {
                        let _ = write!(t, " ({} refused)", v.refused);
                    }
                    if v.errors > 0 {
                        let _ = write!(t, " ({} failed)", v.errors);
                    }
                    t
                })
                .collect();
            let prefix = format!(
                "    {:<6} {:<14} {:<peer_w$} ",
                e.layer,
                trunc(&e.label, 14),
                trunc(&peer, peer_w),
            );
            match limit {
                Some(limit) if cols(&prefix) + cols(&ops.join(", ")) > limit => {
                    for l in wrap_items(&prefix, &ops, limit) {
                        let _ = writeln!(s, "{l}");
                    }
                }
                Some(_) if !layout.full => {
                    let _ = writeln!(s, "{}", format!("{prefix}{}", ops.join(", ")).trim_end());
                }
                _ => {
                    let _ = writeln!(s, "{prefix}{}", ops.join(", "));
                }
            }
        }
    }
    let d = &report.drops;
    let _ = writeln!(
        s,
        "total: ▲ {} in {} ops, ▼ {} in {} ops; events lost {} (ring full {}, record {}), unattributed ops {}",
        human_bytes(report.totals.tx_bytes as f64),
        report.totals.tx_ops,
        human_bytes(report.totals.rx_bytes as f64),
        report.totals.rx_ops,
        d.total_events_lost(),
        d.ring_full,
        d.record_lost,
        d.unattributed_ops
    );
    let m = &report.live_missed;
    if !m.is_zero() {
        let _ = writeln!(
            s,
            "live view: {} frames ({} sampled events) were not sent to this view, which read too slowly; totals are exact (snapshots are cumulative)",
            m.frames, m.events
        );
    }
    if report.totals.refused > 0 {
        let _ = writeln!(
            s,
            "provider busy: {} refused in all (not operations: each was retried or given up)",
            report.totals.refused
        );
    }
    if report.totals.errors > 0 {
        let _ = writeln!(
            s,
            "failed: {} operations reported an error in all (see each process above)",
            report.totals.errors
        );
    }
    for w in &report.waits {
        let _ = writeln!(s, "⚠ {}", w.text);
    }
    let n_cut = report.processes.iter().filter(|p| cut(p, live)).count();
    if n_cut > 0 {
        let _ = writeln!(
            s,
            "{n_cut} process{} ended without a clean exit (killed, Ctrl-C, a crash): {} figures are those of {} last snapshot; a record holds its events up to its last flush after that, so `sigmatop report` and exports count more events than these operations",
            if n_cut == 1 { "" } else { "es" },
            if n_cut == 1 { "its" } else { "their" },
            if n_cut == 1 { "its" } else { "each one's" },
        );
    }
    s
}

/// A byte matrix as a table. `limit` (`width_for`): the columns the ingress row's marks may
/// reach before they go on a line of their own.
pub fn render_matrix(title: &str, m: &crate::agg::Matrix, limit: Option<usize>) -> String {
    let mut s = String::new();
    if m.labels.is_empty() {
        return s;
    }
    let _ = writeln!(s, "{title} (bytes sent, row → column)");
    // Columns as wide as the longest label, within 10..=16.
    let w = m
        .labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(10, 16);
    let _ = write!(s, "{:>w$}", "src\\dst");
    for l in &m.labels {
        let _ = write!(s, " {:>w$}", trunc(l, w));
    }
    let _ = writeln!(s, " {:>w$}", "egress");
    let egress: Vec<u64> = m.bytes.iter().map(|r| r.iter().sum()).collect();
    // The ◀ is the skew warning's figure (`warnings::matrix_skew`): each traced row's egress
    // against their mean, the `untraced` row no member, among three or more.
    let cfg = crate::agg::warnings::WarningConfig::default();
    let ratios = crate::agg::warnings::ratios_to_mean(&crate::agg::warnings::margins(m).0)
        .unwrap_or_default();
    for (i, row) in m.bytes.iter().enumerate() {
        let _ = write!(s, "{:>w$}", trunc(&m.labels[i], w));
        for (j, v) in row.iter().enumerate() {
            if i == j && *v == 0 {
                let _ = write!(s, " {:>w$}", "·");
            } else {
                let _ = write!(s, " {:>w$}", human_bytes(*v as f64));
            }
        }
        let mark = match ratios.get(i) {
            Some(&skew) if skew >= cfg.skew_ratio => format!("  ◀ {skew:.2}× mean"),
            _ => String::new(),
        };
        let _ = writeln!(s, " {:>w$}{mark}", human_bytes(egress[i] as f64));
    }
    // The column sums, and the columns whose ingress the skew warnings name (the same figure).
    let ingress = crate::agg::warnings::margins(m).1;
    let _ = write!(s, "{:>w$}", "ingress");
    for j in 0..m.labels.len() {
        let v: u64 = m.bytes.iter().map(|r| r.get(j).copied().unwrap_or(0)).sum();
        let _ = write!(s, " {:>w$}", human_bytes(v as f64));
    }
    let hot: Vec<String> = crate::agg::warnings::ratios_to_mean(&ingress)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .filter(|(_, r)| **r >= cfg.skew_ratio)
        .map(|(j, r)| format!("◀ {} {r:.2}× mean", m.labels[j]))
        .collect();
    let marks = format!(" {:>w$}  {}", "", hot.join(", "));
    let row = (m.labels.len() + 2) * (w + 1) - 1;
    if hot.is_empty() {
        let _ = writeln!(s);
    } else if limit.is_some_and(|l| row + cols(&marks) > l) {
        let _ = writeln!(s);
        for l in wrap(
            &format!("{:>w$}  {}", "", hot.join(", ")),
            limit.unwrap_or(usize::MAX),
            w + 4,
        ) {
            let _ = writeln!(s, "{l}");
        }
    } else {
        let _ = writeln!(s, "{marks}");
    }
    s
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::{cols, render, times};
    use crate::agg::Model;

    /// Issue 39, item 7: at 80 columns the end-of-run summary of the demo recording wrapped
    /// mid-column. Fitted, every line holds in 80 columns; each process's row keeps whose it is
    /// and its bytes on one line; what is not a row is the same words in the same order, broken
    /// only at spaces, an endpoint's operations only between two of them (a line an endpoint's
    /// operations go on from ends with a comma).
    #[test]
    fn the_summary_fits_80_columns_and_cuts_no_figure() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe");
        let rec = crate::trace::reader::Recording::open(&[dir]).expect("fixture");
        let m = Model::from_recording(&rec);
        let r = m.report();
        let whole = render(&r, None, None);
        assert!(
            whole.lines().any(|l| cols(l) > 80),
            "the case: the whole summary is wider than 80 columns"
        );
        assert_eq!(render(&r, None, Some(400)), whole, "what fits is as it was");
        let fit = render(&r, None, Some(80));
        let wide: Vec<&str> = fit.lines().filter(|l| cols(l) > 80).collect();
        assert!(
            wide.is_empty(),
            "lines over 80 columns:\n{}",
            wide.join("\n")
        );
        let head = fit.lines().next().unwrap_or_default();
        for w in ["host", "pid", "rank", "program", "▲ tx bytes", "▼ rx bytes"] {
            assert!(head.contains(w), "{w} in the header: {head}");
        }
        for p in &r.processes {
            let row = fit
                .lines()
                .find(|l| l.starts_with(&p.host) && l.contains(&format!(" {} ", p.pid)))
                .unwrap_or_else(|| panic!("no row of {} {} in\n{fit}", p.host, p.pid));
            let tx = super::human_bytes(p.flow.tx_bytes as f64);
            let rx = super::human_bytes(p.flow.rx_bytes as f64);
            let (at_tx, at_rx) = (row.find(&tx), row.rfind(&rx));
            assert!(
                row.contains(&p.exe) && at_tx.is_some() && at_tx < at_rx,
                "{} then {tx} then {rx} in: {row}",
                p.exe
            );
        }
        // Rows start at column 0, everything else is indented or free text.
        let words = |t: &str| -> Vec<String> {
            t.lines()
                .skip(1)
                .filter(|l| l.starts_with("    ") && !l.contains("left out at"))
                .flat_map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
                .collect()
        };
        assert_eq!(
            words(&fit),
            words(&whole),
            "the same words in the same order"
        );
        let lines: Vec<&str> = fit.lines().collect();
        for w in lines.windows(2) {
            let endpoint = w[0].starts_with("    ") && w[0].contains('→');
            let goes_on = w[1].starts_with("        ") && !w[1].contains('→');
            if endpoint && goes_on {
                assert!(
                    w[0].ends_with(','),
                    "cut inside an operation:\n{}\n{}",
                    w[0],
                    w[1]
                );
            }
        }
    }

    #[test]
    fn counts_times_sizes_read_as_products() {
        assert_eq!(times(15, 1_500_000), "15×100.00 kB = 1.50 MB");
        assert_eq!(times(3, 1000), "3×~333 B = 1.00 kB");
        assert_eq!(times(1, 640), "1×640 B");
        assert_eq!(times(4, 0), "4×0 B");
        assert_eq!(times(0, 0), "0×0 B");
    }
}
