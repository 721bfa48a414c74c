//! Choosing a run when a record directory holds several (`--run N` of export, report, replay):
//! runs are never merged into one job silently (see `trace::runs`).

use std::path::PathBuf;

use crate::trace::reader::Recording;
use crate::trace::runs::Run;

/// Opens `dirs` and keeps the run asked for: all of it when it holds one run, run `run`
/// (1-based) when given, else an error that lists the runs and says how to choose.
pub fn open_one(dirs: &[PathBuf], run: Option<usize>) -> Result<Recording, String> {
    let rec = Recording::open(dirs)?;
    let runs = rec.runs();
    match (run, runs.len()) {
        (None, 0 | 1) => Ok(rec),
        (Some(n), len) if n >= 1 && n <= len.max(1) => match runs.get(n - 1) {
            Some(r) => Ok(rec.only(r)),
            None => Ok(rec),
        },
        (Some(n), len) => Err(format!(
            "--run {n}: {} holds {} run{}; give 1 to {}",
            dirs_label(dirs),
            len.max(1),
            sigmatop_tui::units::plural(len as u64),
            len.max(1)
        )),
        (None, len) => Err(format!(
            "{} holds {len} runs recorded one after the other; choose one with --run N:\n{}",
            dirs_label(dirs),
            list(&rec, &runs)
        )),
    }
}

/// Opens `dirs` and splits it into its runs (one recording per run, in time order).
pub fn open_all(dirs: &[PathBuf]) -> Result<(Vec<Recording>, String), String> {
    let rec = Recording::open(dirs)?;
    let runs = rec.runs();
    if runs.len() <= 1 {
        return Ok((vec![rec], String::new()));
    }
    let listing = list(&rec, &runs);
    let parts = runs.iter().map(|r| rec_clone_only(&rec, r)).collect();
    Ok((parts, listing))
}

fn rec_clone_only(rec: &Recording, run: &Run) -> Recording {
    Recording {
        processes: rec.processes.clone(),
        problems: rec.problems.clone(),
    }
    .only(run)
}

fn dirs_label(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line per run: "  run 1: 4 processes (moe_demo), started 12:04:18 UTC, 6.2 s".
pub fn list(rec: &Recording, runs: &[Run]) -> String {
    let mut out = String::new();
    for (i, r) in runs.iter().enumerate() {
        let mut exes: Vec<&str> = r
            .processes
            .iter()
            .filter_map(|&p| rec.processes.get(p))
            .map(|p| p.identity.exe.as_str())
            .collect();
        exes.sort_unstable();
        exes.dedup();
        let secs = r.start_ns / 1_000_000_000 % 86_400;
        out.push_str(&format!(
            "  run {}: {} process{} ({}), started {:02}:{:02}:{:02} UTC, {:.1} s\n",
            i + 1,
            r.processes.len(),
            if r.processes.len() == 1 { "" } else { "es" },
            exes.join(", "),
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            r.end_ns.saturating_sub(r.start_ns) as f64 / 1e9
        ));
    }
    out
}
