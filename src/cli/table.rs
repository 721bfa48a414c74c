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

/// Per-process and per-endpoint totals. `live` is the model of live processes the report was
/// made from (None for recordings): a process still running is not marked as cut.
pub fn render(report: &Report, live: Option<&Model>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:>8} {:>5} {:<14} {:>12} {:>12} {:>10} {:>10} {:>8}",
        "host", "pid", "rank", "program", "▲ tx bytes", "▼ rx bytes", "tx ops", "rx ops", "lost"
    );
    // The peer column fits the longest peer name (an IPv6 GID), within reason.
    let peer_w = report
        .processes
        .iter()
        .flat_map(|p| &p.endpoints)
        .filter_map(|e| e.peer.as_ref())
        .map(|pr| pr.label().chars().count() + 2)
        .max()
        .unwrap_or(0)
        .clamp(22, 48);
    for p in &report.processes {
        let _ = writeln!(
            s,
            "{:<16} {:>8} {:>5} {:<14} {:>12} {:>12} {:>10} {:>10} {:>8}{}",
            trunc(&p.host, 16),
            p.pid,
            match (p.rank, p.child_of_rank) {
                (None, Some(parent)) => format!("↳{parent}"),
                (r, _) => rank_str(r),
            },
            trunc(&p.exe, 14),
            human_bytes(p.flow.tx_bytes as f64),
            human_bytes(p.flow.rx_bytes as f64),
            p.flow.tx_ops,
            p.flow.rx_ops,
            p.drops.total_events_lost(),
            match (&p.problem, p.exit_signal, p.exit_code) {
                (Some(what), Some(_), _) => {
                    format!("  (no clean exit: counted up to its last snapshot) {what}")
                }
                (_, None, Some(code)) if cut(p, live) => format!(
                    "  (no clean exit: counted up to its last snapshot) exited with status {code}"
                ),
                _ if cut(p, live) => "  (no clean exit: counted up to its last snapshot)".into(),
                (_, None, Some(code)) => format!("  exited with status {code}"),
                _ => String::new(),
            }
        );
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
            let _ = writeln!(
                s,
                "    {:<6} {:<14} {:<peer_w$} {}",
                e.layer,
                trunc(&e.label, 14),
                trunc(&peer, peer_w),
                ops.join(", ")
            );
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

/// A byte matrix as a table.
pub fn render_matrix(title: &str, m: &crate::agg::Matrix) -> String {
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
    if hot.is_empty() {
        let _ = writeln!(s);
    } else {
        let _ = writeln!(s, " {:>w$}  {}", "", hot.join(", "));
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
    use super::times;

    #[test]
    fn counts_times_sizes_read_as_products() {
        assert_eq!(times(15, 1_500_000), "15×100.00 kB = 1.50 MB");
        assert_eq!(times(3, 1000), "3×~333 B = 1.00 kB");
        assert_eq!(times(1, 640), "1×640 B");
        assert_eq!(times(4, 0), "4×0 B");
        assert_eq!(times(0, 0), "0×0 B");
    }
}
