//! Open MPI over libfabric (`--mca pml cm --mca mtl ofi`, provider `tcp;ofi_rxm`), the path of
//! clusters whose NICs libfabric drives (EFA, Slingshot, Omni-Path), traced without a rebuild:
//! tests/programs/mpi_pattern.c on 3 ranks sends (i+1)·(j+2)·1000 bytes from rank i to rank j,
//! one blocking message per ordered pair.
//!
//! - Simple mode with a record: each rank made 2 tagged sends and 2 tagged receives with exactly
//!   the pattern's bytes (the sends the provider turned away with -FI_EAGAIN and Open MPI retried
//!   are refusals, not operations); the rank × rank matrix of `sigmatop export --json` is the
//!   pattern, from each operation's `fi_addr` and the address vector.
//! - Aggregate mode: every rank's totals are as exact, but a libfabric RDM endpoint talks to both
//!   other ranks and its counters cannot say which got what: the matrix has no cell for them, and
//!   export, report and the dashboard's matrix say how many bytes on how many endpoints were left
//!   out (34,000 B on 3 endpoints), instead of showing an empty matrix as if nothing moved.
mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::Bounded;
use common::Trace;
use common::tmux::Tmux;
use sigmatop::event::Op;

const NP: usize = 3;

fn pattern(src: usize, dst: usize) -> u64 {
    ((src + 1) * (dst + 2) * 1000) as u64
}

fn want_matrix() -> Vec<Vec<u64>> {
    (0..NP)
        .map(|i| {
            (0..NP)
                .map(|j| if i == j { 0 } else { pattern(i, j) })
                .collect()
        })
        .collect()
}

/// Runs mpi_pattern on NP ranks over pml cm / mtl ofi (tcp;ofi_rxm), traced as `trace` says.
fn mpirun(trace: &Trace, ctx: &str) {
    let prog = common::build_program("mpicc", "mpi_pattern.c", "mpi_pattern", &[]);
    let mca = [
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        "tcp;ofi_rxm",
        "--mca",
        "osc",
        "pt2pt",
    ];
    let out = common::mpirun_traced(trace, NP, &mca, None, &prog, ctx);
    assert_eq!(
        common::stdout_of(&out).trim(),
        format!("mpi_pattern: {NP} ranks done"),
        "{ctx}: program output"
    );
}

/// Each rank's tagged sends and receives in the record: 2 of each, the pattern's bytes.
fn check_rank_totals(trace: &Trace, ctx: &str) {
    let procs = common::processes(trace);
    assert_eq!(procs.len(), NP, "{ctx}: one traced process per rank");
    for p in &procs {
        let me = p.identity.rank.expect("rank from OMPI_COMM_WORLD_RANK") as usize;
        let t = common::totals(p);
        let sent: u64 = (0..NP).filter(|&j| j != me).map(|j| pattern(me, j)).sum();
        let got: u64 = (0..NP).filter(|&i| i != me).map(|i| pattern(i, me)).sum();
        assert_eq!(
            common::op(&t, Op::OfiTSend.name()),
            (NP as u64 - 1, sent),
            "{ctx}: rank {me}'s tagged sends"
        );
        assert_eq!(
            common::op(&t, Op::OfiTRecv.name()),
            (NP as u64 - 1, got),
            "{ctx}: rank {me}'s tagged receives"
        );
    }
}

/// mpi_pattern traced in `mode` (in a scratch directory of its own), its ranks' totals checked:
/// the directory and the trace.
fn traced_pattern(mode: &'static str, ctx: &str) -> (PathBuf, Trace) {
    let dir = common::scratch(&format!("ofi-mpi-{mode}"));
    let trace = Trace::new(mode, &dir);
    mpirun(&trace, ctx);
    check_rank_totals(&trace, ctx);
    (dir, trace)
}

fn rank_matrix(v: &serde_json::Value) -> Vec<Vec<u64>> {
    serde_json::from_value(v["rank_matrix"]["bytes"].clone()).expect("rank_matrix.bytes")
}

#[test]
fn mpi_over_libfabric_exact_per_rank_and_in_the_matrix() {
    let ctx = "simple mode with a record";
    let (_, trace) = traced_pattern("simple", ctx);
    let v = common::export_json(&trace.record, ctx);
    assert_eq!(rank_matrix(&v), want_matrix(), "{ctx}: rank × rank bytes");
    assert_eq!(v["matrix_left_out_bytes"], 0, "{ctx}: nothing left out");
    for p in v["processes"].as_array().expect("processes") {
        assert_eq!(p["layers"], "libfabric", "{ctx}: layers used: {}", p["pid"]);
    }
}

#[test]
fn aggregate_mode_says_what_its_matrix_leaves_out() {
    let ctx = "aggregate mode";
    let (dir, trace) = traced_pattern("aggregate", ctx);
    let total: u64 = want_matrix().iter().flatten().sum();
    let v = common::export_json(&trace.record, ctx);
    assert_eq!(
        rank_matrix(&v),
        vec![vec![0; NP]; NP],
        "{ctx}: no cell for an endpoint with two peers"
    );
    assert_eq!(v["matrix_left_out_bytes"], total, "{ctx}: bytes left out");
    assert_eq!(
        v["matrix_left_out_endpoints"], NP,
        "{ctx}: endpoints left out"
    );
    let report = Command::new(common::sigmatop_bin())
        .args(["report", &trace.record.display().to_string()])
        .output_bounded()
        .expect("sigmatop report");
    let text = common::stdout_of(&report);
    assert!(
        text.contains(&format!(
            "{total} B on {NP} endpoint(s) with several peers left out"
        )),
        "{ctx}: the report says what the matrix leaves out:\n{text}"
    );

    // The dashboard's matrix, replayed as a person would look at it: the same, on screen.
    let line = format!(
        "{} replay {}",
        common::sigmatop_bin().display(),
        trace.record.display()
    );
    let Some(t) = Tmux::start_in("ofi-mpi-replay", &line, Some(&dir)) else {
        return;
    };
    let limit = Duration::from_secs(60);
    t.wait_for("the replay to finish", limit, |s| {
        s.contains("replay finished")
    });
    t.keys(&["5"]);
    let want = format!(
        "⚠ {} on {NP} endpoints with several peers not in the matrix",
        sigmatop_tui::units::volume(total as f64, sigmatop_tui::units::Units::default())
    );
    let screen = t.wait_for("the rank matrix", limit, |s| s.contains("rank × rank"));
    assert!(
        screen.contains(&want),
        "{ctx}: the matrix view says {want:?}:\n{screen}"
    );
}
