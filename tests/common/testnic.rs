//! Helpers of the software-NIC tests (tests/testnic_*.rs, included with `#[path]`, beside `mod
//! common`): running programs through scripts/with-testnic.sh and
//! reading the NIC's own WQE log (TESTNIC_LOG), which is written by the NIC thread, never by
//! sigmatop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const LIMIT: Duration = Duration::from_secs(120);
pub const MODES: [Option<&str>; 4] = [None, Some("aggregate"), Some("simple"), Some("full")];
/// The NIC's port GID: ::ffff:127.0.0.1.
pub const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `bash scripts/with-testnic.sh ARGS...`
pub fn with_testnic(args: &[String]) -> Command {
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/with-testnic.sh")).args(args);
    c
}

/// Builds the NIC (once per test binary is enough; the script itself skips fresh builds).
pub fn build_nic() {
    for tool in ["gcc", "make", "flock"] {
        crate::common::require(tool);
    }
    let o = crate::common::Bounded::output_bounded(&mut with_testnic(&["true".into()]))
        .expect("run scripts/with-testnic.sh");
    assert!(
        o.status.success(),
        "building the software NIC failed:\n{}",
        crate::common::stderr_of(&o)
    );
}

/// One WQE line of the NIC log.
#[derive(Debug, Clone)]
pub struct NicWqe {
    pub pid: u32,
    pub qpn: u32,
    pub idx: u32,
    pub opcode: u32,
    pub opmod: u32,
    pub op: String,
    pub len: u64,
    pub raddr: u64,
    pub rkey: u32,
    pub signaled: bool,
    pub status: u32,
    /// The connected peer QP and its process (0: not known).
    pub rqpn: u32,
    pub rpid: u32,
}

impl NicWqe {
    /// One `testnic pid=...` line.
    pub fn parse(l: &str) -> NicWqe {
        NicWqe {
            pid: field(l, "pid").parse().expect("pid"),
            qpn: hex(field(l, "qpn")) as u32,
            idx: field(l, "idx").parse().expect("idx"),
            opcode: hex(field(l, "opcode")) as u32,
            opmod: hex(field(l, "opmod")) as u32,
            op: field(l, "op").to_string(),
            len: field(l, "len").parse().expect("len"),
            raddr: hex(field(l, "raddr")),
            rkey: hex(field(l, "rkey")) as u32,
            signaled: field(l, "signaled") == "1",
            status: hex(field(l, "status")) as u32,
            rqpn: hex(field(l, "rqpn")) as u32,
            rpid: field(l, "rpid").parse().expect("rpid"),
        }
    }
}

pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("NIC log line without {key}=: {line}"))
}

pub fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Every WQE the NIC logged in `dir` (one file per process). The event lines of
/// TESTNIC_STALL / TESTNIC_FAIL (`testnic-event ...`, [`nic_events`]) are left out.
pub fn nic_log(dir: &Path) -> Vec<NicWqe> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("NIC log dir").flatten() {
        let text = std::fs::read_to_string(e.path()).expect("read NIC log");
        for l in text.lines().filter(|l| l.starts_with("testnic pid=")) {
            out.push(NicWqe::parse(l));
        }
    }
    out
}

/// Runs `bash scripts/with-testnic.sh env VARS... PROG ARGS`, traced in `trace` when given, with
/// the NIC log in `log`; returns the output after the program exits.
pub fn run_one(
    prog: &Path,
    args: &[&str],
    log: &Path,
    trace: Option<&crate::common::Trace>,
) -> std::process::Output {
    let mut a: Vec<String> = vec!["env".into(), format!("TESTNIC_LOG={}", log.display())];
    if let Some(t) = trace {
        a.push(format!("LD_PRELOAD={}", crate::common::preload().display()));
        a.push(format!("SIGMATOP_MODE={}", t.mode));
        a.push(format!("SIGMATOP_RECORD={}", t.record.display()));
        a.push(format!("SIGMATOP_SOCKET_DIR={}", t.socket_dir.display()));
    }
    a.push(prog.display().to_string());
    a.extend(args.iter().map(|s| s.to_string()));
    let child = crate::common::spawn(&mut with_testnic(&a));
    crate::common::wait_timeout(child, LIMIT)
}

/// A test program of the NIC (tests/testnic/*.c), built by scripts/with-testnic.sh.
pub fn nic_program(name: &str) -> PathBuf {
    let p = root().join("target/testnic/bin").join(name);
    assert!(p.is_file(), "{} missing after the NIC build", p.display());
    p
}

/// One line of a process's NIC log file, in the order the NIC wrote it: a WQE it took, or an
/// event of TESTNIC_STALL / TESTNIC_FAIL (`testnic-event pid=P event=stall|lift|fail ...`).
#[derive(Debug, Clone)]
pub enum NicLine {
    Wqe(NicWqe),
    /// The event's name and its `key=value` fields (pid included).
    Event(String, std::collections::BTreeMap<String, String>),
}

/// The lines of process `pid`'s NIC log in `dir` (`testnic-<pid>.log`), in order.
pub fn nic_lines(dir: &Path, pid: u32) -> Vec<NicLine> {
    let path = dir.join(format!("testnic-{pid}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut out = Vec::new();
    for l in text.lines() {
        if l.starts_with("testnic-event ") {
            let kv: std::collections::BTreeMap<String, String> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let name = kv.get("event").cloned().unwrap_or_default();
            out.push(NicLine::Event(name, kv));
        } else if l.starts_with("testnic pid=") {
            out.push(NicLine::Wqe(NicWqe::parse(l)));
        }
        // A line cut short at the end (the NIC is writing it) is read next time.
    }
    out
}

/// CLOCK_MONOTONIC now, in ns: the clock of the NIC's own timestamps (`t=` on its stderr lines,
/// `t_ns=` in the log; every simulated host shares this machine's clock).
pub fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain old data, filled by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the call; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
