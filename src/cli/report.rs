//! `sigmatop report`: the figures of an `Export` as plain-text tables.

use std::fmt::Write;

use super::table::{self, human_bytes};
use super::{CliResult, ReportArgs};
use crate::agg::Model;
use crate::export::json::{Export, Skew};

fn ns(v: u64) -> String {
    if v >= 1_000_000_000 {
        format!("{:.3} s", v as f64 / 1e9)
    } else if v >= 1_000_000 {
        format!("{:.3} ms", v as f64 / 1e6)
    } else if v >= 1_000 {
        format!("{:.1} µs", v as f64 / 1e3)
    } else {
        format!("{v} ns")
    }
}

fn skew_line(s: &mut String, what: &str, k: &Skew) {
    if k.labels.is_empty() {
        let _ = writeln!(s, "  {what:<10} (none)");
        return;
    }
    if k.labels.len() < crate::agg::warnings::SKEW_MIN_MEMBERS {
        // Two parties: max/mean says which way the traffic went (a one-way benchmark's sender
        // reads 2.00×), not that one is a hot spot among its peers.
        let _ = writeln!(
            s,
            "  {what:<10} not judged among {} (skew needs 3 or more: with two, max/mean only says which way the traffic went)",
            k.labels.len(),
        );
        return;
    }
    let _ = writeln!(
        s,
        "  {what:<10} ▲ egress max/mean {:.2}×  (max {} = {}, mean {}){}",
        k.ratio,
        k.max_label,
        human_bytes(k.max_bytes as f64),
        human_bytes(k.mean_bytes),
        if k.flagged {
            "  ⚠ SKEWED (≥ 1.5×)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  {:<10} ▼ ingress max/mean {:.2}×  (max {}){}",
        "",
        k.ingress_ratio,
        k.ingress_max_label,
        if k.ingress_flagged {
            "  ⚠ SKEWED (≥ 1.5×)"
        } else {
            ""
        }
    );
}

/// The whole report.
pub fn render(e: &Export, limit: Option<usize>) -> String {
    let mut s = String::new();
    s.push_str(&table::render(&e.report, None, limit));
    s.push_str(&table::render_matrix(
        "rank × rank",
        &e.report.rank_matrix,
        limit,
    ));
    s.push_str(&table::render_matrix(
        "node × node",
        &e.report.node_matrix,
        limit,
    ));
    if !e.gpu_matrix.labels.is_empty() {
        s.push_str(&table::render_matrix("GPU × GPU", &e.gpu_matrix, limit));
        if e.gpu_unresolved_bytes > 0 {
            let _ = writeln!(
                s,
                "GPU bytes to untraced peers: {}",
                human_bytes(e.gpu_unresolved_bytes as f64)
            );
        }
    }
    let _ = writeln!(s, "matrices: {}", e.matrices_source);

    let _ = writeln!(s, "\ntop talkers (process → process):");
    if e.top_talkers.is_empty() {
        let _ = writeln!(s, "  (no traffic between traced processes)");
    }
    for t in &e.top_talkers {
        let _ = writeln!(
            s,
            "  {:>12}  {} → {}",
            human_bytes(t.bytes as f64),
            t.from,
            t.to
        );
    }

    let _ = writeln!(
        s,
        "\nskew (egress: a row's sum in the matrices above, ingress: a column's; over the whole record):"
    );
    skew_line(&mut s, "nodes", &e.skew.nodes);
    skew_line(&mut s, "ranks", &e.skew.ranks);
    skew_line(&mut s, "processes", &e.skew.processes);

    let p = &e.phases;
    let _ = writeln!(
        s,
        "\nphases (bursts separated by ≥ {} of quiet, per process):",
        ns(p.gap_ns)
    );
    for (who, n) in &p.per_process {
        let _ = writeln!(s, "  {n:>6} phases  {who}");
    }
    if !p.phases.is_empty() {
        let _ = writeln!(
            s,
            "  barrier spread of phase starts: max {}, median {}{}",
            ns(p.max_start_spread_ns),
            ns(p.median_start_spread_ns),
            if p.aligned {
                ""
            } else {
                "  (processes found different numbers of phases: matched by nearest start)"
            }
        );
        let mut worst: Vec<_> = p.phases.iter().collect();
        worst.sort_by_key(|p| std::cmp::Reverse(p.start_spread_ns));
        for ph in worst.iter().take(5) {
            let _ = writeln!(
                s,
                "    phase {:>5}: start spread {:>10}, end spread {:>10}, last to start: {}",
                ph.index,
                ns(ph.start_spread_ns),
                ns(ph.end_spread_ns),
                ph.last_process
            );
        }
    }

    quiet_lines(&mut s, e);
    where_lines(&mut s, e);

    let c = &e.clocks;
    let b = |v: Option<u64>| v.map(ns).unwrap_or_else(|| "unknown".into());
    let _ = writeln!(
        s,
        "\nclocks ({}): within a host ±{}, across hosts ±{} + the hosts' own REALTIME sync; causality violations {}",
        c.timebase,
        b(c.within_host_bound_ns),
        b(c.cross_host_bound_ns),
        c.causality_violations
    );
    for pc in &c.processes {
        if let Some(n) = &pc.note {
            let _ = writeln!(s, "  {} pid {}: {n}", pc.host, pc.pid);
        }
    }
    let f = &e.flows;
    let _ = writeln!(
        s,
        "sends ↔ receives: {} paired; unmatched: {} sends, {} receives; {} sends to untraced or unresolved peers",
        f.paired, f.sends_unmatched, f.recvs_unmatched, f.sends_unresolved
    );
    doorbell_lines(&mut s, e);
    one_sided_lines(&mut s, e);
    if let Some(n) = &e.nccl {
        s.push_str(&crate::nccl::model::render(n));
    }
    let cut = e.report.processes.iter().filter(|p| !p.clean_exit).count();
    if cut == 0 {
        let _ = writeln!(s, "events: {}", e.events);
    } else {
        // The operation totals above come from each process's last snapshot; a process that did
        // not exit cleanly has events on disk past it, so the two counts differ by design.
        let _ = writeln!(
            s,
            "events: {} in the record; {cut} process{} ended without a clean exit, so {} operation totals above stop at {} last snapshot while {} events go on to {} last flushed chunk",
            e.events,
            if cut == 1 { "" } else { "es" },
            if cut == 1 { "its" } else { "their" },
            if cut == 1 { "its" } else { "each one's" },
            if cut == 1 { "its" } else { "their" },
            if cut == 1 { "its" } else { "each one's" },
        );
    }
    if e.skipped.is_empty() {
        let _ = writeln!(s, "skipped: nothing");
    } else {
        let _ = writeln!(s, "skipped (everything before these points was used):");
        for k in &e.skipped {
            let _ = writeln!(s, "  {}: at byte {}: {}", k.file, k.offset, k.what);
        }
    }
    s
}

/// Where the record ends waiting (issue 36): the stalled edges (each process as it ended) and the
/// NCCL calls open past the threshold, with who they wait for or where each rank waits.
fn where_lines(s: &mut String, e: &Export) {
    let r = &e.report;
    if r.stalls.is_empty() && r.nccl_hung.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "
where it waits at the end of the record:"
    );
    for st in &r.stalls {
        let _ = writeln!(s, "  {}", st.text);
    }
    for h in &r.nccl_hung {
        let _ = writeln!(s, "  {}", h.text);
        for w in h.wheres.iter().skip(1).take(8) {
            let _ = writeln!(s, "      also {} ({:.1}s)", w.text, w.for_s);
        }
        if h.wheres.len() > 9 {
            let _ = writeln!(s, "      … {} more waits", h.wheres.len() - 9);
        }
    }
}

/// The longest quiet period and who was waiting on whom at its end: the straggler is the one
/// the others waited for.
fn quiet_lines(s: &mut String, e: &Export) {
    let Some(q) = &e.quiet else {
        return;
    };
    let start = e.first_ns.min(q.from_ns);
    let since = |t: u64| t.saturating_sub(start) as f64 / 1e9;
    let _ = writeln!(
        s,
        "\nlongest quiet period: {} (t+{:.3}s → t+{:.3}s), no traced process received a byte",
        ns(q.to_ns - q.from_ns),
        since(q.from_ns),
        since(q.to_ns)
    );
    if q.waits.is_empty() {
        let _ = writeln!(s, "  nobody was waiting on anybody at its end");
    }
    for w in &q.waits {
        let _ = writeln!(s, "  {}", w.text);
    }
    if let Some(p) = &q.straggler {
        let _ = writeln!(
            s,
            "  straggler: {} (the one the others waited for)",
            match p.rank {
                Some(r) => format!("r{r} ({} pid {})", p.host, p.pid),
                None => format!("pid {} ({})", p.pid, p.host),
            }
        );
    }
}

fn doorbell_lines(s: &mut String, e: &Export) {
    let d = &e.doorbells;
    if d.doorbells == 0 && d.wqes == 0 {
        return;
    }
    let w = &d.wqes_per_doorbell;
    let _ = writeln!(
        s,
        "doorbells → WQEs: {} doorbells, {} of {} WQEs associated, WQEs per doorbell min {} / median {} / max {}; mismatches {} (PI range {}, more WQEs than WQEBBs {}, WQEs without doorbell {}); without WQEs {}, duplicates {}, behind {}, overruns {}, unknown QP {}",
        d.doorbells,
        d.wqes_associated,
        d.wqes,
        w.min,
        w.median,
        w.max,
        d.mismatches,
        d.pi_mismatches,
        d.too_many_wqes,
        d.orphan_wqes,
        d.without_wqes,
        d.duplicates,
        d.behind,
        d.overruns,
        d.unknown_qp
    );
    for q in &d.qps {
        let w = &q.wqes_per_doorbell;
        let _ = writeln!(
            s,
            "  {:<28} {:<16} qpn {:>8}  {:>8} doorbells {:>9} WQEBBs {:>9} WQEs  per doorbell {}/{}/{}  mismatches {}  without WQEs {}  dup {}  behind {}  overrun {}",
            q.process_label,
            q.endpoint,
            q.qpn.map_or("-".to_string(), |n| format!("{n:#x}")),
            q.doorbells,
            q.wqebbs,
            q.wqes,
            w.min,
            w.median,
            w.max,
            q.pi_mismatches + q.too_many_wqes,
            q.without_wqes,
            q.duplicates,
            q.behind,
            q.overruns
        );
    }
}

fn one_sided_lines(s: &mut String, e: &Export) {
    let o = &e.one_sided;
    if o.ops == 0 && o.regions == 0 {
        return;
    }
    let _ = writeln!(
        s,
        "one-sided bytes attributed to targets: {} of {} ({} of {} ops; {} via the QP's peer, {} by search; not attributed: {} ops with no matching region, {} ambiguous); {} memory regions recorded",
        human_bytes(o.attributed_bytes as f64),
        human_bytes(o.bytes as f64),
        o.attributed_ops,
        o.ops,
        o.via_qp_peer_ops,
        o.via_search_ops,
        o.no_region_ops,
        o.ambiguous_ops,
        o.regions
    );
    for ep in o
        .endpoints
        .iter()
        .filter(|x| !x.targets.is_empty())
        .take(20)
    {
        let targets: Vec<String> = ep
            .targets
            .iter()
            .map(|(t, b)| format!("{t} {}", human_bytes(*b as f64)))
            .collect();
        let _ = writeln!(
            s,
            "  {:<28} {:<16} → {}{}",
            ep.process_label,
            ep.endpoint,
            targets.join(", "),
            if ep.unattributed_bytes > 0 {
                format!(
                    " (+{} not attributed)",
                    human_bytes(ep.unattributed_bytes as f64)
                )
            } else {
                String::new()
            }
        );
    }
}

/// `sigmatop report DIR...`: the text report of the correlated recordings.
pub fn report(args: &ReportArgs) -> CliResult {
    let (runs, listing) = match args.run {
        Some(n) => (
            vec![super::runs::open_one(&args.dirs, Some(n))?],
            String::new(),
        ),
        None => super::runs::open_all(&args.dirs)?,
    };
    if runs.len() > 1 {
        println!(
            "{} runs recorded one after the other, reported apart (choose one with --run N):\n{listing}",
            runs.len()
        );
    }
    for (i, rec) in runs.iter().enumerate() {
        if runs.len() > 1 {
            println!("=== run {} of {} ===", i + 1, runs.len());
        }
        let corr = crate::correlate::Correlation::new(rec);
        let analysis = corr.run(
            &crate::correlate::RunOptions::default(),
            &mut crate::correlate::NoSink,
        );
        let model = Model::from_recording(rec);
        let mut ex = crate::export::json::build(&corr, &analysis, model.report());
        ex.quiet = model.quiet_report();
        ex.nccl = crate::nccl::model::load(rec);
        let limit = table::width_for(std::io::IsTerminal::is_terminal(&std::io::stdout()));
        print!("{}", table::fit_lines(&render(&ex, limit), limit));
        if args.calls {
            match &ex.nccl {
                Some(n) => print!(
                    "{}",
                    table::fit_lines(&crate::nccl::model::render_calls(n), limit)
                ),
                None => println!(
                    "--calls: this record holds no NCCL profiler events (docs/NCCL.md: sigmatop is NCCL's profiler plugin when NCCL_PROFILER_PLUGIN names it)"
                ),
            }
        }
    }
    Ok(0)
}
