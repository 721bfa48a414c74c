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
}

pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("NIC log line without {key}=: {line}"))
}

pub fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Every WQE the NIC logged in `dir` (one file per process).
pub fn nic_log(dir: &Path) -> Vec<NicWqe> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("NIC log dir").flatten() {
        let text = std::fs::read_to_string(e.path()).expect("read NIC log");
        for l in text.lines() {
            out.push(NicWqe {
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
            });
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
