//! Shared by tests/devx_*.rs and tests/gpu_*.rs: run a doorbell workload with and without the
//! preload and check what sigmatop recorded against what the workload says it did.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use sigmatop::event::{EndpointKind, Op, flags};
use sigmatop::trace::reader::Recording;

use crate::common::{preload, spawn, stderr_of, stdout_of, wait_timeout};

/// One WQE as the workload wrote it / as sigmatop recovered it (the common fields).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WqeLine {
    pub qpn: u32,
    pub idx: u16,
    pub opcode: u8,
    pub bytes: u64,
    pub raddr: u64,
    pub rkey: u32,
}

fn field(l: &str, key: &str) -> Option<u64> {
    let v = l.split_whitespace().find_map(|f| f.strip_prefix(key))?;
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Parses "wqe qpn=.. idx=.. opcode=.. bytes=.. raddr=.. rkey=.." lines (both formats).
pub fn parse_wqes(text: &str) -> Vec<WqeLine> {
    text.lines()
        .filter(|l| l.starts_with("wqe "))
        .map(|l| WqeLine {
            qpn: field(l, "qpn=").expect("qpn") as u32,
            idx: field(l, "idx=").expect("idx") as u16,
            opcode: field(l, "opcode=").expect("opcode") as u8,
            bytes: field(l, "bytes=").expect("bytes"),
            raddr: field(l, "raddr=").expect("raddr"),
            rkey: field(l, "rkey=").expect("rkey") as u32,
        })
        .collect()
}

/// The WQEs of each QP in posting order (QPs are parsed independently, so only per-QP order is
/// defined across them).
pub fn per_qp(mut v: Vec<WqeLine>) -> Vec<WqeLine> {
    v.sort_by_key(|w| w.qpn); // stable: keeps each QP's order
    v
}

pub fn value(out: &str, key: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("workload printed no {key:?} line:\n{out}"))
}

pub struct Run {
    pub out: Output,
    pub list: Vec<WqeLine>,
}

/// Runs `cmd` (with `args`, the WQE list file appended) and returns its output and WQE list.
pub fn run(mut cmd: Command, dir: &Path, name: &str, env: &[(&str, String)], traced: bool) -> Run {
    let list = dir.join(format!("{name}.list"));
    cmd.arg(&list);
    for (k, v) in env {
        cmd.env(k, v);
    }
    if traced {
        cmd.env("LD_PRELOAD", preload())
            .env("SIGMATOP_SOCKET_DIR", dir.join("sock"));
    } else {
        cmd.env_remove("LD_PRELOAD");
    }
    let child = spawn(&mut cmd);
    let out = wait_timeout(child, Duration::from_secs(240));
    assert!(
        out.status.success(),
        "{name}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout_of(&out),
        stderr_of(&out)
    );
    let list = parse_wqes(&std::fs::read_to_string(&list).expect("WQE list"));
    Run { out, list }
}

/// Checks a traced run against the baseline: identical results, every doorbell recorded, every
/// WQE recovered with its opcode, bytes, remote address and rkey.
pub fn check_traced(base: &Run, traced: &Run, record: &Path, wqe_log: Option<&Path>, mode: &str) {
    let (b, t) = (stdout_of(&base.out), stdout_of(&traced.out));
    // A fork child's exit time (DEVX_CPU_FORK) is the one line that is not a result.
    let results = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with("FORK "))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        results(&b),
        results(&t),
        "results differ with sigmatop\nstderr:\n{}",
        stderr_of(&traced.out)
    );
    let doorbells = value(&t, "DOORBELLS ");
    let wqes = value(&t, "WQES ");
    assert_eq!(traced.list.len() as u64, wqes);

    let rec = Recording::open(&[record.to_path_buf()]).expect("open record");
    assert!(
        rec.problems.is_empty(),
        "record problems: {:?}",
        rec.problems
    );
    let p = rec
        .processes
        .iter()
        .find(|p| p.endpoints.iter().any(|e| e.kind == EndpointKind::DevxQp))
        .unwrap_or_else(|| panic!("no process with devx QPs in {}", record.display()));
    // The QPs, by the QPN CREATE_QP returned.
    let mut qpns: Vec<u32> = traced.list.iter().map(|w| w.qpn).collect();
    qpns.sort();
    qpns.dedup();
    let eps: Vec<_> = p
        .endpoints
        .iter()
        .filter(|e| e.kind == EndpointKind::DevxQp)
        .collect();
    for q in &qpns {
        assert!(
            eps.iter().any(|e| e.qpn == Some(*q) && e.transport == "RC"),
            "QP {q:#x} not defined: {eps:?}"
        );
    }
    let snap = p.last_snapshot().expect("a snapshot");
    let count = |op: Op| -> (u64, u64) {
        snap.counts
            .iter()
            .filter(|c| c.op == op as u8)
            .fold((0, 0), |a, c| (a.0 + c.ops, a.1 + c.bytes))
    };
    assert_eq!(count(Op::GpuDoorbell).0, doorbells, "doorbells recorded");
    let (end_drops, _) = (p.end.map(|e| e.1), ());
    let drops = end_drops.unwrap_or(snap.drops);
    assert_eq!(drops.unparsable_wqes, 0, "unparsable WQEs: {drops:?}");
    let recovering = wqe_log.is_some();
    if recovering {
        let ops = count(Op::GpuWrite).0 + count(Op::GpuRead).0 + count(Op::GpuAtomic).0;
        assert_eq!(ops, wqes, "WQEs recovered");
        let bytes = count(Op::GpuWrite).1 + count(Op::GpuRead).1 + count(Op::GpuAtomic).1;
        assert_eq!(bytes, traced.list.iter().map(|w| w.bytes).sum::<u64>());
        let want_w = traced.list.iter().filter(|w| w.opcode == 0x08).count() as u64;
        let want_r = traced.list.iter().filter(|w| w.opcode == 0x10).count() as u64;
        assert_eq!(count(Op::GpuWrite).0, want_w);
        assert_eq!(count(Op::GpuRead).0, want_r);
    } else {
        assert_eq!(count(Op::GpuWrite).0, 0);
    }
    if let Some(log) = wqe_log {
        let got = per_qp(parse_wqes(&std::fs::read_to_string(log).expect("WQE log")));
        let want = per_qp(traced.list.clone());
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "recovered WQE differs from what the workload wrote");
        }
    }
    if mode != "aggregate" {
        let mut probs = Vec::new();
        let evs = p.read_all_events(&mut probs);
        assert!(probs.is_empty(), "{probs:?}");
        let dbs = evs.iter().filter(|e| e.op == Op::GpuDoorbell as u8).count() as u64;
        assert_eq!(dbs, doorbells, "doorbell events");
        if recovering {
            // Every WQE event carries bytes, raddr and the whole rkey; compare as multisets.
            let mut got: Vec<(u64, u64, u32)> = evs
                .iter()
                .filter(|e| {
                    [Op::GpuWrite, Op::GpuRead, Op::GpuAtomic]
                        .iter()
                        .any(|o| *o as u8 == e.op)
                })
                .map(|e| (e.bytes, e.addr, e.aux))
                .collect();
            let mut want: Vec<(u64, u64, u32)> = traced
                .list
                .iter()
                .map(|w| (w.bytes, w.raddr, w.rkey))
                .collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "WQE events");
            let inline = evs.iter().filter(|e| e.flags & flags::INLINE != 0).count();
            assert!(inline >= 4, "inline writes flagged: {inline}");
        }
    }
}

pub fn scratch_dir(name: &str) -> PathBuf {
    crate::common::scratch(name)
}
