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
    let (analysis, pstats) = match &args.perfetto {
        Some(path) => {
            let f = std::fs::File::create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            // The sink gathers packets into large writes itself.
            let mut sink = crate::export::perfetto::PerfettoSink::new(f);
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
    }
    if let Some(path) = &args.json {
        let mut ex =
            crate::export::json::build(&corr, &analysis, Model::from_recording(&rec).report());
        ex.perfetto = pstats;
        let s = serde_json::to_string_pretty(&ex).map_err(|e| e.to_string())?;
        if path.as_os_str() == "-" {
            println!("{s}");
        } else {
            std::fs::write(path, s + "\n")
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
    }
    Ok(0)
}
