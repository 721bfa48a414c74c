//! What a first-time user meets on the command line (issue 16, items 5, 7, 8 and 9), with real
//! programs (ucx_perftest over tcp, Open MPI, fi_pingpong) under the real preload:
//!
//! - stopping and statuses: a record cut by Ctrl-C says why its operations and events differ
//!   (exact figures from the record); `attach --once` does not call running processes cut;
//!   `attach` of a missing or untraced PID, and a headless attach with nothing to show, say so;
//!   stale sockets of killed processes are removed by the next attach;
//! - layers and launchers: `--layers -cuda` as the README spells it, `--layers foo` an error with
//!   the valid names, a switched-off layer named at the end of a run, Open MPI's ob1 PML named
//!   with `--mca pml ucx` as the fix;
//! - output scripts can use: `run --json FILE`, `run --json` with stdout holding the JSON only,
//!   `export --json` saying what it wrote;
//! - paths: a missing one is "no such file or directory", a recording nothing of which can be
//!   read fails with the reason first and writes no file; `--help` documents the flags.
//!
//! ucx_perftest's figures: with `-w 1` the warm-up is one iteration, so a tag_bw client of `-n N`
//! posts exactly N + 1 tagged sends of `-s` bytes (tests/ucx_perftest.rs derives this).
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(90);
const SIZE: u64 = 4096;

/// A ucx_perftest server over tcp, traced into `sock` (live only) when `traced`.
fn server(sock: &Path, traced: bool) -> (Child, u16) {
    let port = port();
    let mut cmd = Command::new(require("ucx_perftest"));
    cmd.args(["-p", &port.to_string()]).env("UCX_TLS", "tcp");
    if traced {
        cmd.env("LD_PRELOAD", preload())
            .env("SIGMATOP_MODE", "simple")
            .env("SIGMATOP_SOCKET_DIR", sock)
            .env_remove("SIGMATOP_RECORD");
    }
    let child = spawn(&mut cmd);
    wait_listening(port, Duration::from_secs(20));
    (child, port)
}

/// The arguments of a tag_bw client of `n` iterations.
fn client_args(port: u16, n: u64) -> Vec<String> {
    [
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "tag_bw",
        "-n",
        &n.to_string(),
        "-s",
        &SIZE.to_string(),
        "-w",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `sigmatop ARGS... -- ucx_perftest CLIENT` with its sockets in `sock`.
fn sigmatop_client(sock: &Path, args: &[&str], port: u16, n: u64) -> Command {
    let mut cmd = Command::new(sigmatop_bin());
    cmd.args(args)
        .arg("--")
        .arg(require("ucx_perftest"))
        .args(client_args(port, n))
        .env("UCX_TLS", "tcp")
        .env("SIGMATOP_SOCKET_DIR", sock);
    cmd
}

fn sigmatop(args: &[&str]) -> Output {
    Command::new(sigmatop_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("sigmatop runs")
}

fn finish(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// A pid that no process has: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().expect("spawn true");
    let pid = c.id();
    c.wait().expect("wait");
    pid
}

/// "total: ▲ 1.23 MB in 301 ops, ..." → 301.
fn total_tx_ops(summary: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with("total: ▲"))
        .unwrap_or_else(|| panic!("no total line in:\n{summary}"));
    let after = line.split(" in ").nth(1).expect("' in N ops'");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no op count in {line:?}"))
}

/// A real recording of a ucx_perftest pair (both sides recorded), `n` iterations.
fn recorded_pair(name: &str, n: u64) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let trace = Trace::new("simple", &dir);
    let mut s = Command::new(require("ucx_perftest"));
    let port = port();
    s.args(["-p", &port.to_string()]).env("UCX_TLS", "tcp");
    trace.apply(&mut s);
    let srv = spawn(&mut s);
    wait_listening(port, Duration::from_secs(20));
    let mut c = Command::new(require("ucx_perftest"));
    c.args(client_args(port, n)).env("UCX_TLS", "tcp");
    trace.apply(&mut c);
    assert!(wait_timeout(spawn(&mut c), LIMIT).status.success());
    assert!(wait_timeout(srv, LIMIT).status.success());
    (dir, trace.record)
}

// ---- Item 9: paths, recordings, help ----

#[test]
fn missing_paths_and_unreadable_recordings_fail_with_the_reason_first() {
    let (dir, rec) = recorded_pair("export-unreadable", 50);
    let json = dir.join("agg.json");
    std::fs::write(&json, b"{}").expect("a file");
    // A missing path is missing, a file is not a directory.
    let missing = dir.join("no-such-dir");
    let out = sigmatop(&[
        "export",
        missing.to_str().expect("utf-8"),
        "--json",
        "x.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr_of(&out),
        format!(
            "sigmatop: {}: no such file or directory: pass the directory given to --record\n",
            missing.display()
        )
    );
    let out = sigmatop(&["report", json.to_str().expect("utf-8")]);
    assert!(
        stderr_of(&out).contains("not a directory"),
        "{}",
        stderr_of(&out)
    );

    // Every process record unreadable: exit non-zero, the reason first, no file written.
    let mut garbled = 0;
    for host in std::fs::read_dir(&rec).expect("record dir").flatten() {
        for p in std::fs::read_dir(host.path()).expect("host dir").flatten() {
            std::fs::write(p.path().join("process.stp"), b"not a sigmatop record").expect("garble");
            garbled += 1;
        }
    }
    assert_eq!(garbled, 2);
    let trace = dir.join("t.pftrace");
    let out = sigmatop(&[
        "export",
        rec.to_str().expect("utf-8"),
        "--perfetto",
        trace.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_of(&out);
    assert!(
        err.starts_with("sigmatop: nothing could be read: ")
            && err.contains("process.stp: at byte 0: not a sigmatop record file (bad magic) (and 1 more unreadable process record)"),
        "{err}"
    );
    assert!(!trace.exists(), "no empty trace written");
}

#[test]
fn help_documents_the_flags_and_directories() {
    let h = |args: &[&str]| stdout_of(&sigmatop(args));
    let replay = h(&["replay", "--help"]);
    for want in [
        "--speed <X>",
        "0 = no playback",
        "--theme <THEME>",
        "dark (default), light, mono",
        "<DIR>",
        "what --record was given",
    ] {
        assert!(
            replay.contains(want),
            "replay --help lacks {want:?}:\n{replay}"
        );
    }
    let run = h(&["run", "--help"]);
    assert!(run.contains("--theme <THEME>"), "{run}");
    let export = h(&["export", "--help"]);
    assert!(
        export.contains("<DIR>...") && export.contains("one process's directory"),
        "{export}"
    );
    let attach = h(&["attach", "--help"]);
    assert!(attach.contains("Stale sockets"), "{attach}");
    // Speeds that mean nothing are errors, not a silent 1×.
    let out = sigmatop(&["demo", "--headless", "--speed", "-2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("is no speed"),
        "{}",
        stderr_of(&out)
    );
}
