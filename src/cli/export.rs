//! `sigmatop export`: record directories correlated into JSON aggregates (docs/JSON.md) and
//! Perfetto traces.

use super::{CliResult, ExportArgs};
use crate::agg::Model;

pub fn export(args: &ExportArgs) -> CliResult {
    if args.json.is_none() && args.perfetto.is_none() {
        return Err("nothing to export: give --json FILE and/or --perfetto FILE".into());
    }
    let rec = super::runs::open_one(&args.dirs, args.run)?;
    for p in &rec.problems {
        eprintln!("sigmatop: skipped {p}");
    }
    for p in &rec.processes {
        if p.is_cut() {
            eprintln!(
                "sigmatop: {}: record cut (the process did not exit cleanly); exported up to its last flushed chunk",
                p.dir.display()
            );
        }
    }
    let corr = crate::correlate::Correlation::new(&rec);
    let opts = crate::correlate::RunOptions::default();
    let nccl = crate::nccl::model::load(&rec);
    let (analysis, pstats) = match &args.perfetto {
        Some(path) => {
            let f = std::fs::File::create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            // The sink gathers packets into large writes itself.
            let mut sink = crate::export::perfetto::PerfettoSink::new(f);
            if let Some(n) = &nccl {
                sink.set_nccl(n.clone());
            }
            let a = corr.run(&opts, &mut sink);
            let stats = sink.stats.clone();
            sink.into_inner()
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            (a, Some(stats))
        }
        None => (corr.run(&opts, &mut crate::correlate::NoSink), None),
    };
    for p in &analysis.problems {
        eprintln!("sigmatop: skipped {p}");
    }
    if let Some(st) = &pstats
        && let Some(path) = &args.perfetto
    {
        eprintln!(
            "sigmatop: wrote {} ({} operations, {} flows, {} bytes)",
            path.display(),
            st.op_instants,
            st.flows,
            st.bytes
        );
        if st.nccl_calls > 0 {
            eprintln!(
                "sigmatop: NCCL: {} calls, {} slices (calls, proxy operations, steps), {} flows to their work requests",
                st.nccl_calls, st.nccl_slices, st.nccl_flows
            );
        }
        if let Some(note) = large_trace_note(path, st.bytes) {
            eprintln!("sigmatop: {note}");
        }
    }
    if let Some(path) = &args.json {
        let model = Model::from_recording(&rec);
        let mut ex = crate::export::json::build(&corr, &analysis, model.report());
        ex.quiet = model.quiet_report();
        ex.perfetto = pstats;
        ex.nccl = nccl;
        let s = serde_json::to_string_pretty(&ex).map_err(|e| e.to_string())?;
        if path.as_os_str() == "-" {
            println!("{s}");
        } else {
            let bytes = s.len() + 1;
            std::fs::write(path, s + "\n")
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            let endpoints: usize = ex.report.processes.iter().map(|p| p.endpoints.len()).sum();
            eprintln!(
                "sigmatop: wrote {} (JSON aggregates: {} process{}, {endpoints} endpoints, {} events, {bytes} bytes)",
                path.display(),
                ex.report.processes.len(),
                if ex.report.processes.len() == 1 {
                    ""
                } else {
                    "es"
                },
                ex.events,
            );
        }
    }
    Ok(0)
}

/// Above this size a Perfetto trace is announced with what to do about it: the Perfetto UI runs
/// in a browser, which typically gives a page about 2 GB, and its in-memory form of a trace is
/// 2–4 times the file (perfetto.dev, "Visualising large traces").
pub const LARGE_TRACE_BYTES: u64 = 1 << 30;

/// What to do with a trace of `bytes` bytes, when it is large.
pub fn large_trace_note(path: &std::path::Path, bytes: u64) -> Option<String> {
    if bytes <= LARGE_TRACE_BYTES {
        return None;
    }
    Some(format!(
        "{} is {} ({bytes} bytes): too large for the Perfetto UI alone in a browser; open it through `trace_processor --httpd {}` and then ui.perfetto.dev.          To make it smaller: export fewer processes (give `DIR/<host>` or `DIR/<host>/<pid>` instead of DIR), or record again with `--mode aggregate` (no timeline) or `--layers` (fewer layers);          export itself has no time-window or sampling option yet",
        path.display(),
        super::table::human_bytes(bytes as f64),
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_traces_are_announced_with_their_size() {
        let p = std::path::Path::new("t.pftrace");
        assert_eq!(large_trace_note(p, LARGE_TRACE_BYTES), None);
        let n = large_trace_note(p, 1_500_000_000).expect("announced");
        assert!(
            n.starts_with("t.pftrace is 1.50 GB (1500000000 bytes)"),
            "{n}"
        );
        assert!(
            n.contains("--mode aggregate") && n.contains("--layers"),
            "{n}"
        );
        assert!(n.contains("no time-window or sampling option"), "{n}");
    }
}
