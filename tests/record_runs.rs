//! One run per record directory (issue 16, item 3), with a real program: two ucx_perftest
//! tag_bw pairs recorded by hand into the same directory one after the other (100 then 300
//! iterations of 4 KiB) are found as two runs; `report` reports them apart, `export` refuses to
//! merge them and exports the one `--run N` names, with the exact bytes of that run; and
//! `sigmatop --record DIR -- CMD` refuses a directory that already holds a recording.
mod common;

use std::process::Command;
use std::time::Duration;

use common::Bounded;
use common::Trace;

const SIZE: u64 = 4096;

/// One traced ucx_perftest tag_bw pair over tcp with `n` iterations (+1 warm-up), recorded into
/// `trace`'s directory.
fn pair(trace: &Trace, n: u64) {
    let bin = common::require("ucx_perftest");
    let (s, port) = common::ucx_perftest_server("tcp", |server| trace.apply(server));
    let mut client = Command::new(&bin);
    client
        .args(["127.0.0.1", "-p", &port.to_string(), "-t", "tag_bw"])
        .args(["-n", &n.to_string(), "-s", &SIZE.to_string(), "-w", "1"])
        .env("UCX_TLS", "tcp");
    trace.apply(&mut client);
    let c = common::spawn(&mut client);
    for o in [
        common::wait_timeout(c, Duration::from_secs(60)),
        common::wait_timeout(s, Duration::from_secs(60)),
    ] {
        assert!(o.status.success(), "{}", common::stderr_of(&o));
    }
}

fn sigmatop(args: &[&str]) -> std::process::Output {
    Command::new(common::sigmatop_bin())
        .args(args)
        .output_bounded()
        .expect("sigmatop runs")
}

/// The client's tag_send bytes in an exported JSON (the process with tag_send traffic).
fn sent(json: &serde_json::Value) -> Vec<u64> {
    let mut v: Vec<u64> = json["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .flat_map(|p| p["endpoints"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["ops"]["tag_send"]["bytes"].as_u64())
        .filter(|b| *b > 0)
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn two_runs_in_one_directory_are_kept_apart() {
    let dir = common::scratch("record-runs");
    let trace = Trace::new("aggregate", &dir);
    pair(&trace, 100);
    // Until the gap that separates runs has passed since the first run's end (as its record
    // says): the second pair then starts a run of its own.
    let end = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&trace.record))
        .expect("the first run's record")
        .runs()
        .last()
        .expect("a run")
        .end_ns;
    let after = end + sigmatop::trace::runs::RUN_GAP_NS;
    common::wait_until(
        "the gap between runs to pass",
        Duration::from_secs(10),
        || match common::now_ns() {
            now if now > after => Ok(()),
            now => Err(format!("{} ms to go", (after - now) / 1_000_000)),
        },
    );
    pair(&trace, 300);
    let rec = trace.record.to_str().expect("utf-8 path");

    let report = sigmatop(&["report", rec]);
    assert!(report.status.success(), "{}", common::stderr_of(&report));
    let text = common::stdout_of(&report);
    assert!(
        text.contains("2 runs recorded one after the other"),
        "{text}"
    );
    assert!(text.contains("run 1: 2 processes (ucx_perftest)"), "{text}");
    assert!(text.contains("=== run 2 of 2 ==="), "{text}");

    let json = dir.join("all.json");
    let refused = sigmatop(&["export", rec, "--json", json.to_str().expect("path")]);
    assert_eq!(refused.status.code(), Some(2));
    let err = common::stderr_of(&refused);
    assert!(
        err.contains("holds 2 runs") && err.contains("--run N"),
        "{err}"
    );
    assert!(
        !json.exists(),
        "nothing is written when the runs would be merged"
    );

    for (run, n) in [("1", 100u64), ("2", 300)] {
        let out = dir.join(format!("run{run}.json"));
        let o = sigmatop(&[
            "export",
            rec,
            "--run",
            run,
            "--json",
            out.to_str().expect("path"),
        ]);
        assert!(o.status.success(), "{}", common::stderr_of(&o));
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).expect("json written")).expect("json");
        assert_eq!(v["processes"].as_array().map(|a| a.len()), Some(2));
        assert_eq!(sent(&v), vec![(n + 1) * SIZE], "run {run}");
    }
    let o = sigmatop(&["export", rec, "--run", "3", "--json", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr_of(&o).contains("give 1 to 2"));
}

#[test]
fn record_refuses_a_directory_that_holds_a_run() {
    let dir = common::scratch("record-refuse");
    let rec = dir.join("out");
    std::fs::create_dir_all(rec.join("node/123")).expect("mkdir");
    let o = sigmatop(&["--record", rec.to_str().expect("path"), "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    let err = common::stderr_of(&o);
    assert!(err.contains("is not empty"), "{err}");
    // An empty directory is fine.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let o = sigmatop(&["--record", empty.to_str().expect("path"), "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
}
