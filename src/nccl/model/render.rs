//! The NCCL report as text (`sigmatop report`, `replay --headless`): rows, the join, arrivals,
//! calls and sizes. Reads the report only.

use super::*;

/// The report's text (`sigmatop report`): one line per collective row, the join, arrivals.
pub fn render(r: &NcclReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "NCCL collectives (per rank, communicator, collective):");
    // From the GPU's view beside the host's, when kernel events came (KernelCh).
    let gpu = r.collectives.iter().any(|c| c.gpu_calls > 0);
    let _ = writeln!(
        s,
        "  {:<12} {:>5} {:<16} {:<13} {:<6} {:<6} {:>3} {:>7} {:>14} {:>11} {:>9} {:>8} {:>13}{}",
        "host",
        "rank",
        "comm",
        "collective",
        "algo",
        "proto",
        "ch",
        "count",
        "bytes",
        "time ms",
        "busbw GB/s",
        "WRs",
        "WR bytes",
        if gpu {
            format!(" {:>10} {:>10}", "GPU ms", "GPU GB/s")
        } else {
            String::new()
        }
    );
    for c in &r.collectives {
        let func = if c.part_of.is_empty() {
            c.func.clone()
        } else {
            format!("└ {}", c.func)
        };
        let _ = writeln!(
            s,
            "  {:<12} {:>2}/{:<2} {:<16} {:<13} {:<6} {:<6} {:>3} {:>7} {:>14} {:>11.3} {:>9.3} {:>8} {:>13}{}{}",
            c.host,
            c.rank,
            c.nranks,
            c.comm,
            func,
            c.algo,
            c.proto,
            c.channels,
            c.count,
            c.bytes,
            c.time_ns as f64 / 1e6,
            c.busbw_gbs,
            c.wrs,
            c.wr_bytes,
            match (gpu, c.gpu_calls) {
                (false, _) => String::new(),
                (true, 0) => format!(" {:>10} {:>10}", "-", "-"),
                (true, _) => format!(
                    " {:>10.3} {:>10.3}",
                    c.gpu_time_ns as f64 / 1e6,
                    c.gpu_busbw_gbs
                ),
            },
            if c.incomplete > 0 {
                format!("  ⚠ {} not completed", c.incomplete)
            } else {
                String::new()
            }
        );
    }
    if r.collectives.iter().any(|c| !c.part_of.is_empty()) {
        let _ = writeln!(
            s,
            "  (└: the Send/Recv parts NCCL made of the call above, counted there too)"
        );
    }
    if !r.by_size.is_empty() {
        let _ = writeln!(
            s,
            "NCCL calls by message size (per rank, communicator, call; bytes ≤ the power of two):"
        );
        let _ = writeln!(
            s,
            "  {:<12} {:>5} {:<16} {:<13} {:>10} {:>7} {:>11} {:>10} {:>11} {:>10}",
            "host",
            "rank",
            "comm",
            "call",
            "size ≤",
            "count",
            "time ms",
            "busbw GB/s",
            "GPU ms",
            "GPU GB/s"
        );
        for z in &r.by_size {
            let _ = writeln!(
                s,
                "  {:<12} {:>2}/{:<2} {:<16} {:<13} {:>10} {:>7} {:>11.3} {:>10.3} {:>11} {:>10}",
                z.host,
                z.rank,
                z.nranks,
                z.comm,
                z.func,
                z.size_bucket,
                z.count,
                z.time_ns as f64 / 1e6,
                z.busbw_gbs,
                if z.gpu_time_ns > 0 {
                    format!("{:.3}", z.gpu_time_ns as f64 / 1e6)
                } else {
                    "-".into()
                },
                if z.gpu_time_ns > 0 {
                    format!("{:.3}", z.gpu_busbw_gbs)
                } else {
                    "-".into()
                },
            );
        }
    }
    let j = &r.join;
    let _ = writeln!(
        s,
        "NCCL ↔ verbs: {} WRs: {} joined by IB QP events, {} by proxy step, {} not joined; {} QP events ({} without a step, {} joined, {} not, {} length mismatches); {} socket events; {} proxy steps, {} that posted with no WR seen",
        j.wrs,
        j.wrs_via_qp_event,
        j.wrs_via_step,
        j.wrs_unjoined,
        j.qp_events,
        j.qp_events_without_step,
        j.qp_events_joined,
        j.qp_events_unjoined,
        j.qp_length_mismatches,
        j.socket_events,
        j.proxy_steps,
        j.steps_without_wr
    );
    if j.profiler_version > 0 {
        let _ = writeln!(
            s,
            "  NCCL events read through profiler interface v{} (the newest sigmatop reads; an NCCL that offers a newer one drives this one)",
            j.profiler_version
        );
    }
    // A warning only for what is lost; events of the types the plugin does not read are not
    // (issue 39, item 7: "⚠ 0 records dropped, 80 events of types not read" warned of nothing
    // and did not say what the 80 were).
    if j.dropped_records > 0 {
        let _ = writeln!(
            s,
            "  ⚠ NCCL plugin: {} records dropped (its queue was full): the collectives above miss them",
            j.dropped_records
        );
    }
    if j.unknown_events > 0 {
        let _ = writeln!(
            s,
            "  NCCL plugin: {} events of types it does not read (docs/NCCL.md), counted and set aside: no figure here comes from them",
            j.unknown_events
        );
    }
    for a in &r.arrivals {
        let last: Vec<String> = a
            .last_rank
            .iter()
            .map(|(r, n)| format!("r{r}×{n}"))
            .collect();
        let _ = writeln!(
            s,
            "  comm {}: {} collectives, arrival spread (host calls) median {:.3} ms, max {:.3} ms (r{} last); last to arrive: {}",
            a.comm,
            a.collectives,
            a.median_spread_ns as f64 / 1e6,
            a.max_spread_ns as f64 / 1e6,
            a.max_spread_last_rank,
            last.join(" ")
        );
        if a.gpu_collectives > 0 {
            let last: Vec<String> = a
                .gpu_last_rank
                .iter()
                .map(|(r, n)| format!("r{r}×{n}"))
                .collect();
            let _ = writeln!(
                s,
                "  comm {}: {} collectives, arrival spread (GPU kernel starts) median {:.3} ms, max {:.3} ms (r{} last); last to arrive: {}",
                a.comm,
                a.gpu_collectives,
                a.gpu_median_spread_ns as f64 / 1e6,
                a.gpu_max_spread_ns as f64 / 1e6,
                a.gpu_max_spread_last_rank,
                last.join(" ")
            );
        }
    }
    for x in &r.stalled {
        let _ = writeln!(
            s,
            "  ⚠ comm {}: {} #{} did not complete: started by ranks {:?}, not completed on {:?}, waiting for ranks {:?}; last completed: {}",
            x.comm,
            x.func,
            x.seq,
            x.started,
            x.incomplete,
            x.waiting_for,
            x.last_completed
                .iter()
                .map(|(r, s)| format!("r{r} #{s}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for p in &r.problems {
        let _ = writeln!(s, "  ⚠ {p}");
    }
    s
}

/// `report --calls`: every call of every rank, one line each, in each rank's order.
pub fn render_calls(r: &NcclReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "NCCL calls ({}; times ms from each rank's first call; └: a part of the call it follows):",
        r.calls.len()
    );
    let _ = writeln!(
        s,
        "  {:<12} {:>5} {:<16} {:>6} {:<16} {:>12} {:<6} {:<6} {:>3} {:>10} {:>9} {:>9} {:>9} {:>6} {:>10}",
        "host",
        "rank",
        "comm",
        "seq",
        "call",
        "bytes",
        "algo",
        "proto",
        "ch",
        "host call",
        "time",
        "GPU start",
        "GPU time",
        "WRs",
        "WR bytes"
    );
    let mut first: HashMap<(String, u32), u64> = HashMap::new();
    for c in &r.calls {
        let t0 = *first
            .entry((c.host.clone(), c.pid))
            .or_insert(c.host_call_ns);
        let ms = |ns: u64| format!("{:.3}", ns.saturating_sub(t0) as f64 / 1e6);
        let mut func = match c.peer {
            Some(p) => format!(
                "{} {} r{p}",
                c.func,
                if c.func.starts_with("Send") {
                    "→"
                } else {
                    "←"
                }
            ),
            None => c.func.clone(),
        };
        if c.parent.is_some() {
            func = format!("└ {func}");
        }
        let _ = writeln!(
            s,
            "  {:<12} {:>2}/{:<2} {:<16} {:>6} {:<16} {:>12} {:<6} {:<6} {:>3} {:>10} {:>9} {:>9} {:>9} {:>6} {:>10}",
            c.host,
            c.rank,
            c.nranks,
            c.comm,
            c.seq,
            func,
            c.bytes,
            c.algo.unwrap_or("-"),
            c.proto.unwrap_or("-"),
            c.channels,
            ms(c.host_call_ns),
            c.time_ns
                .map_or("open".into(), |t| format!("{:.3}", t as f64 / 1e6)),
            c.gpu_start_ns.map_or("-".into(), ms),
            match (c.gpu_start_ns, c.gpu_end_ns) {
                (Some(a), Some(b)) => format!("{:.3}", b.saturating_sub(a) as f64 / 1e6),
                _ => "-".into(),
            },
            c.wrs,
            c.wr_bytes
        );
    }
    s
}
