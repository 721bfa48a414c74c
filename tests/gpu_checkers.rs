//! The GPU checkers' WQE recovery contract (tests/gpu/recovery.py, issue 41), which the GPU runs'
//! checkers (nvshmem_check.py, gin_check.py, run_device.sh) apply and CI can only reach here:
//! its own cases (an exact recovery, a loss the copier counted, a silent loss, a wrong field,
//! out of order, twice, a tail slot never reused and not reported, counters without a loss, a
//! WQE never posted, a stats line that disagrees) must each come out as the contract says, and
//! the command line form that run_device.sh uses must pass a counted loss and fail a silent one.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/recovery.py")
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(common::require("python3"));
    cmd.arg(script()).args(args);
    let o = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    (
        o.status.code(),
        format!("{}{}", common::stdout_of(&o), common::stderr_of(&o)),
    )
}

#[test]
fn the_recovery_contract_judges_each_case_as_it_says() {
    let (rc, out) = run(&["--self-test"]);
    assert_eq!(rc, Some(0), "{out}");
    assert!(out.contains("11 of 11 cases as expected"), "{out}");
}

#[test]
fn a_counted_loss_passes_and_a_silent_one_fails() {
    let dir = common::scratch("gpu-checkers");
    let posted = dir.join("list.txt");
    // C's %#x (the workload's list) writes 0 as "0"; the preload's log writes "0x0".
    std::fs::write(
        &posted,
        "wqe qpn=0x10 idx=0 opcode=0x8 bytes=8 raddr=0 rkey=0x5\n\
         wqe qpn=0x10 idx=1 opcode=0x8 bytes=8 raddr=0x8 rkey=0x5\n\
         wqe qpn=0x10 idx=2 opcode=0x8 bytes=8 raddr=0x10 rkey=0x5\n",
    )
    .expect("list");
    let log = dir.join("wlog");
    std::fs::write(
        &log,
        "wqe qpn=0x10 idx=0 opcode=0x8 opmod=0x0 bytes=8 raddr=0x0 rkey=0x5 signaled=0\n\
         wqe qpn=0x10 idx=2 opcode=0x8 opmod=0x0 bytes=8 raddr=0x10 rkey=0x5 signaled=1\n",
    )
    .expect("log");
    let stats = |name: &str, overwritten: u32| {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!("sigmatop-gpu: hijacks=1 wqes=2 overwritten_slots={overwritten} torn_slots=0 dropped_wqebbs=0\n"),
        )
        .expect("err");
        p.display().to_string()
    };
    let (l, p) = (log.display().to_string(), posted.display().to_string());
    let (rc, out) = run(&[&l, &p, &stats("counted", 1)]);
    assert_eq!(rc, Some(0), "{out}");
    assert!(out.contains("recovered all but 1 WQEs, counted"), "{out}");
    let (rc, out) = run(&[&l, &p, &stats("silent", 0)]);
    assert_eq!(rc, Some(1), "{out}");
    assert!(out.contains("a silent loss"), "{out}");
}
