//! `sigmatop export --perfetto/--json` of real recordings, validated with Perfetto's official
//! schema (tests/tools/check_perfetto.py: no unknown fields, tracks defined before use, slices
//! balanced, every flow with both ends, one operation instant per recorded event), and the flows
//! checked against what the benchmarks exchanged:
//! - fi_pingpong over `tcp;ofi_rxm` RDM (peers resolved through the AV updates): each side posts
//!   ITERS + 1 receives and sends ITERS + 1 messages (see tests/ofi_pingpong.rs), so 2 (ITERS + 1)
//!   pairs, nothing left unmatched, and the process matrix holds ITERS × SIZE + 4 each way;
//! - ucx_perftest tag_bw over tcp (peers by worker-address hash): the client sends n + 1 tagged
//!   messages (`-w 1`), the server posts n + 1 receives: n + 1 pairs.
mod common;
#[path = "export_util.rs"]
mod util;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

const ITERS: u64 = 200;
const SIZE: u64 = 1024;

fn record_pingpong(dir: &std::path::Path) -> Trace {
    let t = Trace::new("simple", dir);
    let (iters, size) = (ITERS.to_string(), SIZE.to_string());
    let pp = fi_pingpong(
        &["-p", "tcp", "-e", "rdm", "-I", &iters, "-S", &size],
        |c| t.apply(c),
        Duration::from_secs(60),
    );
    for o in [&pp.server, &pp.client] {
        assert!(o.status.success(), "fi_pingpong failed: {}", stderr_of(o));
    }
    t
}

#[test]
fn fi_pingpong_rdm_exports_valid_perfetto_with_paired_flows() {
    let dir = scratch("export-fi");
    let t = record_pingpong(&dir);
    let dirs = vec![t.record.clone()];
    let events = util::readable_events(&dirs);
    assert!(events > 0);
    let (j, _) = util::export(&dirs, &dir);
    let sum = util::check_perfetto(&dir.join("trace.pftrace"), events);
    let pairs = 2 * (ITERS + 1);
    assert_eq!(j["flows"]["paired"], pairs, "{}", j["flows"]);
    assert_eq!(j["flows"]["sends_unmatched"], 0, "{}", j["flows"]);
    assert_eq!(j["flows"]["recvs_unmatched"], 0, "{}", j["flows"]);
    assert_eq!(sum["flows"], pairs, "{sum}");
    assert_eq!(j["perfetto"]["flows_outside_window"], 0);
    assert_eq!(j["events"], events);
    // Both directions resolved through the AV: ITERS × SIZE + 4 ("fin") each way.
    let m = &j["process_matrix"]["bytes"];
    assert_eq!(m[0][1], ITERS * SIZE + 4, "{m}");
    assert_eq!(m[1][0], ITERS * SIZE + 4, "{m}");
    assert_eq!(j["skipped"].as_array().map(|a| a.len()), Some(0));
    // Counter tracks exist (snapshots) and phases were found.
    assert!(sum["counters"].as_u64().unwrap_or(0) > 0, "{sum}");
    assert!(sum["slices"].as_u64().unwrap_or(0) > 0, "{sum}");
}

#[test]
fn ucx_perftest_tag_bw_exports_valid_perfetto_with_paired_flows() {
    let bin = require("ucx_perftest");
    let dir = scratch("export-ucx");
    let t = Trace::new("simple", &dir);
    let n: u64 = 3000;
    let size: u64 = 4096;
    let (server, port) = ucx_perftest_server("tcp", |s| t.apply(s));
    let mut c = Command::new(&bin);
    c.args(["127.0.0.1", "-p", &port.to_string(), "-t", "tag_bw"])
        .args(["-n", &n.to_string(), "-s", &size.to_string(), "-w", "1"])
        .env("UCX_TLS", "tcp");
    t.apply(&mut c);
    let client = wait_timeout(spawn(&mut c), Duration::from_secs(60));
    let server = wait_timeout(server, Duration::from_secs(60));
    for o in [&server, &client] {
        assert!(o.status.success(), "ucx_perftest failed: {}", stderr_of(o));
    }
    let dirs: Vec<PathBuf> = vec![t.record.clone()];
    let events = util::readable_events(&dirs);
    let (j, _) = util::export(&dirs, &dir);
    let sum = util::check_perfetto(&dir.join("trace.pftrace"), events);
    assert_eq!(j["flows"]["paired"], n + 1, "{}", j["flows"]);
    assert_eq!(j["flows"]["sends_unmatched"], 0, "{}", j["flows"]);
    assert_eq!(sum["flows"], n + 1, "{sum}");
    assert_eq!(sum["ops_by_name"]["ucx.tag_send"], n + 1, "{sum}");
    // Client → server bytes, resolved by worker address.
    let total: u64 = j["process_matrix"]["bytes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r.as_array().into_iter().flatten())
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(total, (n + 1) * size);
}

/// The committed NCCL fixture (NVIDIA's all_reduce_perf, 2 ranks, NCCL 2.28.9 on the H200, GPU
/// Direct RDMA over the software NIC; docs/NCCL.md) exported to Perfetto: per rank each call a
/// slice on its communicator's track, each proxy operation and step a slice under it, and one
/// flow from a call to each verbs work request joined to it. Counted against the fixture's own
/// NCCL files (calls, their proxy operations, their steps) and the NIC's log (the work
/// requests it executed: every one joined).
#[test]
fn nccl_fixture_exports_calls_operations_steps_and_flows_to_work_requests() {
    use sigmatop::nccl::format::{self, etype, kind};
    use std::collections::HashSet;
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/all_reduce_np2");
    let dirs = vec![fx.join("rec")];
    let dir = scratch("export-nccl");
    let (j, stderr) = util::export(&dirs, &dir);
    let (mut calls, mut ops, mut steps) = (0u64, 0u64, 0u64);
    let rec = sigmatop::trace::reader::Recording::open(&dirs).expect("fixture record");
    for p in &rec.processes {
        let path = p
            .dir
            .parent()
            .expect("host dir")
            .join(format!("nccl-{}.stn", p.identity.pid));
        let d = format::decode(&std::fs::read(path).expect("NCCL file"));
        let starts = |t: u8| {
            d.recs
                .iter()
                .filter(move |r| r.kind() == kind::START && r.etype() == t)
        };
        let call_ids: HashSet<u64> = starts(etype::COLL)
            .chain(starts(etype::P2P))
            .map(|r| r.id())
            .collect();
        let op_ids: HashSet<u64> = starts(etype::PROXY_OP)
            .filter(|r| call_ids.contains(&r.parent()))
            .map(|r| r.id())
            .collect();
        calls += call_ids.len() as u64;
        ops += op_ids.len() as u64;
        steps += starts(etype::PROXY_STEP)
            .filter(|r| op_ids.contains(&r.parent()))
            .count() as u64;
    }
    // Every line of the NIC's logs is one send-queue work request it executed; each write with
    // immediate consumed one receive its peer posted.
    let wrs: u64 = std::fs::read_dir(fx.join("nic"))
        .expect("nic logs")
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).expect("nic log");
            let lines = text.lines().filter(|l| !l.trim().is_empty());
            lines
                .map(|l| 1 + l.contains(" op=RDMA_WRITE_IMM ") as u64)
                .sum::<u64>()
        })
        .sum();
    assert_eq!(
        (calls, wrs),
        (40, 576),
        "the fixture: 20 AllReduce per rank, 288 WRs each"
    );
    let events = util::readable_events(&dirs);
    let sum = util::check_perfetto(&dir.join("trace.pftrace"), events);
    assert_eq!(
        sum["slices_by_category"]["nccl"],
        calls + ops + steps,
        "{sum}"
    );
    assert_eq!(sum["nccl_by_name"]["AllReduce"], calls, "{sum}");
    assert_eq!(
        sum["nccl_by_name"]["send"].as_u64().unwrap_or(0)
            + sum["nccl_by_name"]["recv"].as_u64().unwrap_or(0),
        ops,
        "{sum}"
    );
    assert_eq!(sum["nccl_by_name"]["step"], steps, "{sum}");
    assert_eq!(sum["flows_by_category"]["nccl"], wrs, "{sum}");
    assert!(sum["nccl_comm_tracks"].as_u64().unwrap_or(0) >= 2, "{sum}");
    assert_eq!(j["perfetto"]["nccl_calls"], calls);
    assert_eq!(j["perfetto"]["nccl_flows"], wrs);
    assert_eq!(j["perfetto"]["nccl_flows_skipped"], 0);
    assert!(stderr.contains(&format!("NCCL: {calls} calls")), "{stderr}");
    // The operation flows (send → receive) are still there beside them.
    assert!(sum["flows"].as_u64().unwrap_or(0) > wrs, "{sum}");
}
