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
    pub name: String,
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
        // The stats line says what recovery lost and why (`Recovery`).
        cmd.env("LD_PRELOAD", preload())
            .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
            .env("SIGMATOP_GPU_STATS", "1");
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
    Run {
        name: name.to_string(),
        out,
        list,
    }
}

/// The send queue's slots in the workloads (tests/gpu/host.h `LOG_SQ`).
pub fn sq_cnt() -> usize {
    let h =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/host.h"))
            .expect("tests/gpu/host.h");
    let log: u32 = h
        .lines()
        .find_map(|l| l.strip_prefix("#define LOG_SQ "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("#define LOG_SQ in tests/gpu/host.h");
    1 << log
}

/// A counter of sigmatop's stats line (SIGMATOP_GPU_STATS) on the run's stderr.
pub fn stat(out: &Output, key: &str) -> u64 {
    let err = stderr_of(out);
    let line = err
        .lines()
        .find(|l| l.starts_with("sigmatop-gpu: "))
        .unwrap_or_else(|| panic!("no sigmatop-gpu stats line:\n{err}"));
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

/// What WQE recovery did in a traced run, checked against what the workload posted.
pub struct Recovery {
    pub posted: u64,
    pub recovered: Vec<WqeLine>,
    pub overwritten: u64,
    pub dropped: u64,
    /// WQEs whose send-queue slot the workload never reused (must all be recovered).
    pub never_reused: u64,
}

/// The recovery contract (issue 41): WQEs are copied off the doorbell's path, so a slot the
/// workload reuses before the copy read it loses its WQE; that loss is detected from the WQE's
/// own index and counted, never reported wrong. Asserted, every WQE being one WQEBB here:
///   - recovered + overwritten_slots + dropped_wqebbs == posted, exactly;
///   - every recovered WQE is the one the workload wrote at its (QPN, index), QP by QP in the
///     order posted, each once;
///   - every WQE whose slot the workload never reused (no later WQE of its QP took it) is
///     recovered: a copy can be late, never wrong or missing where nothing overwrote it (the
///     floor that fails when the copier stops working);
///   - the drop counter the dashboard shows (`unparsable`) is overwritten + dropped, and the
///     stats line's `wqes` is what the log holds.
pub fn check_recovery(traced: &Run, wqe_log: &Path, what: &str) -> Recovery {
    let got = parse_wqes(&std::fs::read_to_string(wqe_log).expect("WQE log"));
    let posted = &traced.list;
    let mut pos: std::collections::HashMap<(u32, u16), usize> = Default::default();
    for (i, w) in posted.iter().enumerate() {
        assert!(
            pos.insert((w.qpn, w.idx), i).is_none(),
            "{what}: (QPN, index) names one WQE"
        );
    }
    let mut last: std::collections::HashMap<u32, usize> = Default::default();
    for g in &got {
        let i = *pos
            .get(&(g.qpn, g.idx))
            .unwrap_or_else(|| panic!("{what}: recovered a WQE the workload never posted: {g:?}"));
        assert_eq!(
            g, &posted[i],
            "{what}: recovered WQE differs from what the workload wrote at its index"
        );
        if let Some(&prev) = last.get(&g.qpn) {
            assert!(
                i > prev,
                "{what}: QP {:#x}'s WQEs recovered out of posting order (or twice) at index {}",
                g.qpn,
                g.idx
            );
        }
        last.insert(g.qpn, i);
    }
    // Never reused: fewer than sq_cnt WQEs of its QP were posted after it.
    let cnt = sq_cnt();
    let mut n_of: std::collections::HashMap<u32, usize> = Default::default();
    for w in posted {
        *n_of.entry(w.qpn).or_default() += 1;
    }
    let mut seen: std::collections::HashMap<u32, usize> = Default::default();
    let recovered: std::collections::HashSet<(u32, u16)> =
        got.iter().map(|g| (g.qpn, g.idx)).collect();
    let mut never_reused = 0u64;
    for w in posted {
        let k = seen.entry(w.qpn).or_default();
        let after = n_of[&w.qpn] - *k - 1;
        *k += 1;
        if after < cnt {
            never_reused += 1;
            assert!(
                recovered.contains(&(w.qpn, w.idx)),
                "{what}: QP {:#x} index {} was never overwritten ({after} WQEs of its QP after it, {cnt} slots) and is not recovered",
                w.qpn,
                w.idx
            );
        }
    }
    let overwritten = stat(&traced.out, "overwritten_slots");
    let dropped = stat(&traced.out, "dropped_wqebbs");
    let r = Recovery {
        posted: posted.len() as u64,
        recovered: got,
        overwritten,
        dropped,
        never_reused,
    };
    eprintln!(
        "{what}: {} WQEs posted, {} recovered, {overwritten} overwritten before the copy, {dropped} dropped ({} never overwritten, all recovered)",
        r.posted,
        r.recovered.len(),
        never_reused
    );
    assert_eq!(
        r.recovered.len() as u64 + overwritten + dropped,
        r.posted,
        "{what}: every WQE (one WQEBB each) recovered or counted"
    );
    assert_eq!(
        stat(&traced.out, "wqes"),
        r.recovered.len() as u64,
        "{what}: stats wqes"
    );
    assert_eq!(
        stat(&traced.out, "unparsable"),
        overwritten + dropped,
        "{what}: unparsable counts exactly the WQEBBs lost"
    );
    r
}

/// Checks a traced run against the baseline: identical results, every doorbell recorded (but
/// `merged`: up to that many doorbells may be seen as one with the next, see
/// tests/devx_doorbell.rs's shared register), and, with a WQE log, the recovery contract
/// ([`check_recovery`]) with the record's counts and events equal to what was recovered.
pub fn check_traced(
    base: &Run,
    traced: &Run,
    record: &Path,
    wqe_log: Option<&Path>,
    mode: &str,
    merged: u64,
) -> Option<Recovery> {
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
    let recovery = wqe_log.map(|l| check_recovery(traced, l, &traced.name));

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
    let recorded = count(Op::GpuDoorbell).0;
    assert!(
        recorded <= doorbells && recorded + merged >= doorbells,
        "doorbells recorded: {recorded} of {doorbells} rung ({merged} may merge)"
    );
    let (end_drops, _) = (p.end.map(|e| e.1), ());
    let drops = end_drops.unwrap_or(snap.drops);
    let lost = recovery.as_ref().map_or(0, |r| r.overwritten + r.dropped);
    assert_eq!(drops.unparsable_wqes, lost, "unparsable WQEs: {drops:?}");
    if let Some(r) = &recovery {
        let got = &r.recovered;
        let ops = count(Op::GpuWrite).0 + count(Op::GpuRead).0 + count(Op::GpuAtomic).0;
        assert_eq!(ops, got.len() as u64, "WQEs recorded");
        let bytes = count(Op::GpuWrite).1 + count(Op::GpuRead).1 + count(Op::GpuAtomic).1;
        assert_eq!(bytes, got.iter().map(|w| w.bytes).sum::<u64>());
        let want_w = got.iter().filter(|w| w.opcode == 0x08).count() as u64;
        let want_r = got.iter().filter(|w| w.opcode == 0x10).count() as u64;
        assert_eq!(count(Op::GpuWrite).0, want_w);
        assert_eq!(count(Op::GpuRead).0, want_r);
    } else {
        assert_eq!(count(Op::GpuWrite).0, 0);
    }
    if mode != "aggregate" {
        let mut probs = Vec::new();
        let evs = p.read_all_events(&mut probs);
        assert!(probs.is_empty(), "{probs:?}");
        let dbs = evs.iter().filter(|e| e.op == Op::GpuDoorbell as u8).count() as u64;
        assert_eq!(dbs, recorded, "doorbell events");
        if let Some(r) = &recovery {
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
            let mut want: Vec<(u64, u64, u32)> = r
                .recovered
                .iter()
                .map(|w| (w.bytes, w.raddr, w.rkey))
                .collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "WQE events");
            // The four inline writes are on QP 0, whose slots are never reused: recovered.
            let inline = evs.iter().filter(|e| e.flags & flags::INLINE != 0).count();
            assert!(inline >= 4, "inline writes flagged: {inline}");
        }
    }
    recovery
}

pub fn scratch_dir(name: &str) -> PathBuf {
    crate::common::scratch(name)
}
