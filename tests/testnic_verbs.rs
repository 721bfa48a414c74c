//! rdma-core's own programs on the software mlx5 NIC (tests/testnic, docs/TESTNIC.md), two
//! processes on this host, untraced and under the preload in aggregate, simple and full mode:
//! `ibv_rc_pingpong` (4 KiB sends; 16-byte inline sends with completion events) and perftest's
//! `ib_write_bw` / `ib_read_bw`. Every program runs through `scripts/with-testnic.sh`, which builds
//! the NIC. For every run:
//! - both sides exit 0 and report the iterations and sizes they were asked for;
//! - the NIC's own log (TESTNIC_LOG, written by the NIC thread, not by sigmatop) has exactly the
//!   WQEs the parameters imply, on the QPN each program printed, with consecutive WQE indices;
//! - sigmatop's per-QP counts equal the same figures (and the NIC log), computed from the
//!   programs' parameters and posting patterns (below), in every mode;
//! - the two QPs are matched across the processes by GID + QPN: each QP's RTR peer is the other
//!   process's QP (mutually), the peer hash is an own address of the other process, and the
//!   exported JSON names the other process as the endpoint's peer and puts the bytes in its
//!   process matrix.
//!
//! Posting patterns (rdma-core 44 libibverbs/examples/rc_pingpong.c; perftest 4.5):
//! - rc_pingpong: each side sends n messages of -s bytes (signaled; inline when the QP's
//!   max_inline_data covers -s) and posts -r receives up front, then tops the receive queue up
//!   with (r - 1) more each time only one is left: r + floor(n / (r - 1)) * (r - 1) receive
//!   buffers of -s bytes posted, n of them completed (the peer's n messages, each work
//!   completion's byte_len what arrived). Every completion is polled: 2n per side.
//! - ib_write_bw / ib_read_bw: the client posts exactly -n WRs of -s bytes on its one QP (one in
//!   100 signaled: CQ moderation), the server posts nothing on it.
//!
//! A missing program fails the test (scripts/test.sh installs them); nothing is skipped.
mod common;
#[path = "common/testnic.rs"]
mod testnic;
#[path = "export_util.rs"]
mod util;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use common::Bounded;
use common::{Trace, number_before, perftest_row};
use sigmatop::event::{EndpointKind, Op};
use sigmatop::trace::reader::ProcessRecording;

use testnic::{GID, LIMIT, MODES, NicWqe, build_nic, hex, nic_log, with_testnic};

struct Side {
    out: Output,
    pid: u32,
}

struct Run {
    server: Side,
    client: Side,
    nic: Vec<NicWqe>,
    trace: Option<Trace>,
    dir: PathBuf,
}

/// Runs `prog ARGS` as server and `prog ARGS 127.0.0.1` as client on the NIC, traced in `mode`.
fn run_pair(prog: &str, args: &[String], mode: Option<&'static str>) -> Run {
    run_pair_on(prog, args, mode, &Port::roce())
}

/// The NIC's port as each side sees it: `env` (VAR=value) for the server and the client.
struct Port {
    env: [Vec<String>; 2],
    /// What stands in for each side's GID in the other's peer (server's, client's).
    gids: [[u8; 16]; 2],
}

impl Port {
    fn roce() -> Port {
        Port {
            env: [Vec::new(), Vec::new()],
            gids: [GID, GID],
        }
    }

    /// InfiniBand (TESTNIC_PORT=ib), the server on simulated host 11 (LID 12), the client on
    /// host 12 (LID 13): fresh devices, so both number their QPs alike (QPNs collide).
    fn ib_two_hosts() -> Port {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        for h in [11, 12] {
            let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{h}"));
        }
        let side = |h: u8| vec!["TESTNIC_PORT=ib".to_string(), format!("TESTNIC_HOST={h}")];
        let lid = |l: u8| {
            let mut g = [0u8; 16];
            g[15] = l;
            g
        };
        Port {
            env: [side(11), side(12)],
            gids: [lid(12), lid(13)],
        }
    }
}

/// perftest's own failure to calibrate its CPU clock on a loaded machine ("Correlation
/// coefficient r^2 < 0.9 ... Can't produce a report"): nothing of the NIC's or sigmatop's; the pair
/// is run again (at most twice more), the retry listed in the suite's summary.
const PERFTEST_CALIBRATION: &str = "Can't produce a report";

fn run_pair_on(prog: &str, args: &[String], mode: Option<&'static str>, port_: &Port) -> Run {
    for attempt in 1.. {
        match run_pair_once(prog, args, mode, port_) {
            Ok(run) => return run,
            Err(why) if attempt < 3 => {
                common::note_retry(&format!("{prog} {args:?} mode {mode:?}: {why}"))
            }
            Err(why) => panic!("{prog} {args:?} mode {mode:?}: three runs, each: {why}"),
        }
    }
    unreachable!("the loop returns or panics")
}

/// One run of the pair; Err only for perftest's calibration failure (see [`PERFTEST_CALIBRATION`]).
fn run_pair_once(
    prog: &str,
    args: &[String],
    mode: Option<&'static str>,
    port_: &Port,
) -> Result<Run, String> {
    common::require(prog);
    let dir = common::scratch(&format!("testnic-{prog}"));
    let log = dir.join("nic-log");
    std::fs::create_dir_all(&log).expect("log dir");
    let trace = mode.map(|m| Trace::new(m, &dir));
    let side = |client: bool, port: u16| {
        let mut a: Vec<String> = vec!["env".into(), format!("TESTNIC_LOG={}", log.display())];
        a.extend(port_.env[usize::from(client)].iter().cloned());
        if let Some(t) = &trace {
            a.push(format!("LD_PRELOAD={}", common::preload().display()));
            a.push(format!("SIGMATOP_MODE={}", t.mode));
            a.push(format!("SIGMATOP_RECORD={}", t.record.display()));
            a.push(format!("SIGMATOP_SOCKET_DIR={}", t.socket_dir.display()));
        }
        a.push(prog.into());
        a.extend(args.iter().cloned());
        a.extend(["-p".into(), port.to_string()]);
        if client {
            a.push("127.0.0.1".into());
        }
        with_testnic(&a)
    };
    let (s, port) = common::start_server(|port| side(false, port), Duration::from_secs(30));
    let c = common::spawn(&mut side(true, port));
    let (cpid, spid) = (c.id(), s.id());
    let co = common::wait_timeout(c, LIMIT);
    let so = common::wait_timeout(s, LIMIT);
    let ctx = format!("{prog} {args:?} mode {mode:?}");
    // A side that failed on perftest's calibration takes the other down with it (the server then
    // cannot exchange its results): either side saying it is the retry.
    for (who, o) in [("server", &so), ("client", &co)] {
        let said = format!("{}{}", common::stdout_of(o), common::stderr_of(o));
        if !o.status.success() && said.contains(PERFTEST_CALIBRATION) {
            return Err(format!(
                "the {who} said perftest's \"{PERFTEST_CALIBRATION}\""
            ));
        }
    }
    for (who, o) in [("server", &so), ("client", &co)] {
        assert!(
            o.status.success(),
            "{ctx}: {who} failed ({:?})\nserver stdout:\n{}\nserver stderr:\n{}\nclient stdout:\n{}\nclient stderr:\n{}",
            o.status,
            common::stdout_of(&so),
            common::stderr_of(&so),
            common::stdout_of(&co),
            common::stderr_of(&co)
        );
    }
    Ok(Run {
        server: Side { out: so, pid: spid },
        client: Side { out: co, pid: cpid },
        nic: nic_log(&log),
        trace,
        dir,
    })
}

/// "QPN 0x000113" after `which` ("local address" / "remote address") in rc_pingpong's output.
fn pingpong_qpn(out: &str, which: &str) -> u32 {
    out.lines()
        .find(|l| l.contains(which))
        .and_then(|l| l.split("QPN ").nth(1))
        .and_then(|r| r.split(',').next())
        .map(|q| hex(q) as u32)
        .unwrap_or_else(|| panic!("no '{which} ... QPN' in:\n{out}"))
}

/// perftest: "local address: LID 0000 QPN 0x0107 ..."
fn perftest_qpn(out: &str, which: &str) -> u32 {
    out.lines()
        .find(|l| l.trim_start().starts_with(which))
        .and_then(|l| l.split("QPN ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .map(|q| hex(q) as u32)
        .unwrap_or_else(|| panic!("no '{which} ... QPN' in:\n{out}"))
}

/// NIC-logged WQEs of one process: per (qpn, op): (count, bytes); checks consecutive indices.
fn nic_counts(ctx: &str, nic: &[NicWqe], pid: u32) -> BTreeMap<(u32, String), (u64, u64)> {
    let mut m: BTreeMap<(u32, String), (u64, u64)> = BTreeMap::new();
    let mut next_idx: BTreeMap<u32, u32> = BTreeMap::new();
    for w in nic.iter().filter(|w| w.pid == pid) {
        assert_eq!(w.status, 0, "{ctx}: the NIC refused a WQE: {w:?}");
        let e = next_idx.entry(w.qpn).or_insert(0);
        assert_eq!(
            w.idx, *e,
            "{ctx}: WQE indices of QP {:#x} not consecutive",
            w.qpn
        );
        *e = (*e + 1) & 0xffff;
        let c = m.entry((w.qpn, w.op.clone())).or_default();
        c.0 += 1;
        c.1 += w.len;
    }
    m
}

/// The recorded processes of a traced run: (server, client) by pid.
fn recorded(ctx: &str, run: &Run) -> (ProcessRecording, ProcessRecording) {
    let t = run.trace.as_ref().expect("traced run");
    let procs = common::processes(t);
    let mut by_pid: BTreeMap<u32, ProcessRecording> =
        procs.into_iter().map(|p| (p.identity.pid, p)).collect();
    let s = by_pid.remove(&run.server.pid);
    let c = by_pid.remove(&run.client.pid);
    match (s, c) {
        (Some(s), Some(c)) => (s, c),
        _ => panic!(
            "{ctx}: record lacks server {} or client {}",
            run.server.pid, run.client.pid
        ),
    }
}

/// (ops, bytes) of `op` on the QP endpoint with QPN `qpn`.
fn qp_op(p: &ProcessRecording, qpn: u32, op: Op) -> (u64, u64) {
    let c = qp_count(p, qpn, op);
    (c.ops, c.bytes)
}

/// Every counter of `op` on the QP endpoint with QPN `qpn`.
fn qp_count(p: &ProcessRecording, qpn: u32, op: Op) -> sigmatop::event::OpCount {
    let ids: Vec<u32> = p
        .endpoints
        .iter()
        .filter(|e| e.kind == EndpointKind::VerbsQp && e.qpn == Some(qpn))
        .map(|e| e.id)
        .collect();
    assert!(
        !ids.is_empty(),
        "pid {}: no QP endpoint 0x{qpn:x}",
        p.identity.pid
    );
    let mut sum = sigmatop::event::OpCount::default();
    let Some(s) = p.last_snapshot() else {
        return sum;
    };
    for c in s
        .counts
        .iter()
        .filter(|c| ids.contains(&c.ep) && c.op == op as u8)
    {
        sum.ops += c.ops;
        sum.bytes += c.bytes;
        sum.errors += c.errors;
        sum.refused += c.refused;
        sum.posted += c.posted;
        sum.posted_bytes += c.posted_bytes;
    }
    sum
}

/// Completions polled (full mode): the poll_cq events' `bytes`.
fn completions(p: &ProcessRecording) -> u64 {
    p.last_snapshot()
        .map(|s| {
            s.counts
                .iter()
                .filter(|c| c.op == Op::VerbsPollCq as u8)
                .map(|c| c.bytes)
                .sum()
        })
        .unwrap_or(0)
}

/// `a`'s QP `qpn` has the RTR peer (GID, `peer_qpn`) naming `b`'s QP `peer_qpn`, whose own peer is
/// `qpn`, and the peer hash is one of `b`'s own addresses.
fn check_peer(
    ctx: &str,
    a: &ProcessRecording,
    qpn: u32,
    b: &ProcessRecording,
    peer_qpn: u32,
    b_gid: [u8; 16],
) {
    let rtr_peer = |p: &ProcessRecording, q: u32| {
        let ep = p
            .endpoints
            .iter()
            .find(|e| e.kind == EndpointKind::VerbsQp && e.qpn == Some(q))
            .unwrap_or_else(|| panic!("{ctx}: pid {} has no QP 0x{q:x}", p.identity.pid));
        p.updates
            .iter()
            .rfind(|u| u.id == ep.id && u.state == "RTR")
            .and_then(|u| u.peer.clone())
            .unwrap_or_else(|| {
                panic!(
                    "{ctx}: QP 0x{q:x} of pid {} has no RTR peer",
                    p.identity.pid
                )
            })
    };
    let pa = rtr_peer(a, qpn);
    assert_eq!(pa.qpn, Some(peer_qpn), "{ctx}: peer QPN of 0x{qpn:x}");
    assert_eq!(pa.gid, Some(b_gid), "{ctx}: peer GID of 0x{qpn:x}");
    let pb = rtr_peer(b, peer_qpn);
    assert_eq!(
        pb.qpn,
        Some(qpn),
        "{ctx}: 0x{qpn:x} <-> 0x{peer_qpn:x} not mutual"
    );
    assert!(
        b.identity.own_addr_hashes.contains(&pa.addr_hash),
        "{ctx}: peer hash of 0x{qpn:x} ({}) is no own address of pid {}",
        pa.text,
        b.identity.pid
    );
}

/// The exported JSON: each process's QP names the other process as its peer, and the process
/// matrix carries `sent[i]` bytes from process i to the other.
fn check_json(ctx: &str, run: &Run, qpns: [(u32, u32); 2], sent: [u64; 2]) {
    let t = run.trace.as_ref().expect("traced");
    let out = run.dir.join("agg.json");
    let o = Command::new(common::sigmatop_bin())
        .arg("export")
        .arg(&t.record)
        .arg("--json")
        .arg(&out)
        .output_bounded()
        .expect("run sigmatop export");
    assert!(
        o.status.success(),
        "{ctx}: export failed: {}",
        common::stderr_of(&o)
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("agg.json")).expect("JSON");
    let pids = [run.server.pid, run.client.pid];
    for (i, (qpn, _)) in qpns.iter().enumerate() {
        let p = j["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .find(|p| p["pid"].as_u64() == Some(pids[i] as u64))
            .unwrap_or_else(|| panic!("{ctx}: pid {} not in the JSON", pids[i]));
        let label = format!("qp 0x{qpn:x}");
        let ep = p["endpoints"]
            .as_array()
            .expect("endpoints")
            .iter()
            .find(|e| e["label"].as_str() == Some(label.as_str()))
            .unwrap_or_else(|| panic!("{ctx}: no endpoint '{label}' in {p}"));
        assert_eq!(
            ep["peer"]["pid"].as_u64(),
            Some(pids[1 - i] as u64),
            "{ctx}: JSON peer of {label}"
        );
    }
    let labels: Vec<String> = j["process_matrix"]["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| l.as_str().unwrap_or_default().to_string())
        .collect();
    let at = |pid: u32| {
        labels
            .iter()
            .position(|l| l.contains(&format!(" {pid}@")))
            .unwrap_or_else(|| panic!("{ctx}: pid {pid} not in the matrix {labels:?}"))
    };
    let (si, ci) = (at(pids[0]), at(pids[1]));
    let m = &j["process_matrix"]["bytes"];
    assert_eq!(
        m[si][ci].as_u64(),
        Some(sent[0]),
        "{ctx}: matrix server -> client"
    );
    assert_eq!(
        m[ci][si].as_u64(),
        Some(sent[1]),
        "{ctx}: matrix client -> server"
    );
}

// ---------------------------------------------------------------------------------------------

fn pingpong(n: u64, size: u64, rx: u64, events: bool) {
    pingpong_on(n, size, rx, events, false)
}

/// `ib`: on an InfiniBand port, LID-routed (no `-g`: no GRH), the two sides on two simulated
/// hosts whose QPNs collide.
fn pingpong_on(n: u64, size: u64, rx: u64, events: bool, ib: bool) {
    build_nic();
    let mut args: Vec<String> = ["-g", "0", "-n", &n.to_string(), "-s", &size.to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if ib {
        args.drain(..2);
    }
    args.extend(["-r".into(), rx.to_string()]);
    if events {
        args.push("-e".into());
    }
    let recvs = rx + n / (rx - 1) * (rx - 1);
    for mode in MODES {
        let port = if ib {
            Port::ib_two_hosts()
        } else {
            Port::roce()
        };
        let run = run_pair_on("ibv_rc_pingpong", &args, mode, &port);
        let ctx = format!("ibv_rc_pingpong {args:?} ib {ib} mode {mode:?}");
        let sides = [&run.server, &run.client];
        let mut qpns = [(0u32, 0u32); 2];
        for (i, side) in sides.iter().enumerate() {
            let out = common::stdout_of(&side.out);
            assert_eq!(number_before(&out, "iters"), n, "{ctx}: iterations");
            assert_eq!(number_before(&out, "bytes"), 2 * n * size, "{ctx}: bytes");
            qpns[i] = (
                pingpong_qpn(&out, "local address"),
                pingpong_qpn(&out, "remote address"),
            );
            let nic = nic_counts(&ctx, &run.nic, side.pid);
            let want: BTreeMap<(u32, String), (u64, u64)> =
                [((qpns[i].0, "SEND".to_string()), (n, n * size))].into();
            assert_eq!(nic, want, "{ctx}: NIC log of pid {}", side.pid);
            assert!(
                run.nic
                    .iter()
                    .filter(|w| w.pid == side.pid)
                    .all(|w| w.signaled),
                "{ctx}: rc_pingpong signals every send"
            );
        }
        assert_eq!(
            qpns[0].0, qpns[1].1,
            "{ctx}: the client's peer is the server's QP"
        );
        assert_eq!(
            qpns[1].0, qpns[0].1,
            "{ctx}: the server's peer is the client's QP"
        );
        if run.trace.is_none() {
            continue;
        }
        let (srv, cli) = recorded(&ctx, &run);
        for (i, p) in [&srv, &cli].into_iter().enumerate() {
            let q = qpns[i].0;
            assert_eq!(
                qp_op(p, q, Op::VerbsSend),
                (n, n * size),
                "{ctx}: SEND of 0x{q:x}"
            );
            let recv = qp_count(p, q, Op::VerbsRecv);
            assert_eq!(
                (recv.ops, recv.bytes, recv.errors),
                (n, n * size, 0),
                "{ctx}: RECV of 0x{q:x}: the peer's messages, as their completions say"
            );
            assert_eq!(
                (recv.posted, recv.posted_bytes, recv.refused),
                (recvs, recvs * size, 0),
                "{ctx}: receive WRs posted on 0x{q:x}"
            );
            if mode == Some("full") {
                assert_eq!(
                    completions(p),
                    2 * n,
                    "{ctx}: completions polled by pid {}",
                    p.identity.pid
                );
            }
        }
        if ib {
            assert_eq!(qpns[0].0, qpns[1].0, "{ctx}: QPNs collide across the hosts");
        }
        check_peer(&ctx, &srv, qpns[0].0, &cli, qpns[1].0, port.gids[1]);
        check_peer(&ctx, &cli, qpns[1].0, &srv, qpns[0].0, port.gids[0]);
        check_json(&ctx, &run, qpns, [n * size, n * size]);
        if mode != Some("aggregate") {
            check_flows(&ctx, &run, n, recvs);
        }
    }
}

/// Sends paired with receives (JSON `flows`, the report's line, Perfetto flows): each side's n
/// SENDs consume the oldest receives posted on the other side's QP, so 2n pairs; of the `recvs`
/// receive buffers each side posted, the `recvs - n` still posted at the end stay unmatched.
fn check_flows(ctx: &str, run: &Run, n: u64, recvs: u64) {
    let t = run.trace.as_ref().expect("traced");
    let dirs = vec![t.record.clone()];
    let out = run.dir.join("export");
    std::fs::create_dir_all(&out).expect("export dir");
    let (j, _) = util::export(&dirs, &out);
    let f = &j["flows"];
    assert_eq!(f["paired"], 2 * n, "{ctx}: pairs {f}");
    assert_eq!(f["sends_unmatched"], 0, "{ctx}: {f}");
    assert_eq!(f["sends_unresolved"], 0, "{ctx}: {f}");
    assert_eq!(f["recvs_unmatched"], 2 * (recvs - n), "{ctx}: {f}");
    let events = util::readable_events(&dirs);
    let sum = util::check_perfetto(&out.join("trace.pftrace"), events);
    assert_eq!(sum["flows"], 2 * n, "{ctx}: Perfetto flows {sum}");
    let (ok, report, err) = util::sigmatop(&["report".as_ref(), t.record.as_os_str()]);
    assert!(ok, "{ctx}: report failed: {err}");
    let want = format!(
        "sends ↔ receives: {} paired; unmatched: 0 sends, {} receives; 0 sends to",
        2 * n,
        2 * (recvs - n)
    );
    assert!(
        report.contains(&want),
        "{ctx}: report lacks '{want}':\n{report}"
    );
}

/// InfiniBand, no GRH, the two processes on two hosts with the same QPN: peers by LID + QPN,
/// each side's peer hash one of the other's own addresses (before: no own address was kept
/// without a GRH, and peers fell back to the QPN alone, which names both processes here).
#[test]
fn rc_pingpong_lid_routed_on_infiniband_across_hosts() {
    pingpong_on(100, 4096, 50, false, true);
}

#[test]
fn rc_pingpong_4k_sends_with_reposted_receives() {
    pingpong(300, 4096, 100, false);
}

#[test]
fn rc_pingpong_inline_sends_with_completion_events() {
    pingpong(200, 16, 50, true);
}

fn perftest(prog: &str, op: Op, nic_op: &str) {
    build_nic();
    let (n, size) = (1000u64, 4096u64);
    let args: Vec<String> = [
        "-d",
        "mlx5_0",
        "-x",
        "0",
        "-n",
        &n.to_string(),
        "-s",
        &size.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for mode in MODES {
        let run = run_pair(prog, &args, mode);
        let ctx = format!("{prog} mode {mode:?}");
        let cout = common::stdout_of(&run.client.out);
        assert_eq!(perftest_row(&cout), (size, n), "{ctx}: result row");
        let (cq, sq) = (
            perftest_qpn(&cout, "local address"),
            perftest_qpn(&cout, "remote address"),
        );
        let nic = nic_counts(&ctx, &run.nic, run.client.pid);
        let want: BTreeMap<(u32, String), (u64, u64)> =
            [((cq, nic_op.to_string()), (n, n * size))].into();
        assert_eq!(nic, want, "{ctx}: NIC log of the client");
        assert!(
            nic_counts(&ctx, &run.nic, run.server.pid).is_empty(),
            "{ctx}: the server posts nothing"
        );
        let signaled = run
            .nic
            .iter()
            .filter(|w| w.pid == run.client.pid && w.signaled)
            .count() as u64;
        assert_eq!(signaled, n / 100, "{ctx}: CQ moderation 100");
        if run.trace.is_none() {
            continue;
        }
        let (srv, cli) = recorded(&ctx, &run);
        assert_eq!(qp_op(&cli, cq, op), (n, n * size), "{ctx}: client {op:?}");
        assert_eq!(qp_op(&srv, sq, op), (0, 0), "{ctx}: server {op:?}");
        if mode == Some("full") {
            assert_eq!(completions(&cli), n / 100, "{ctx}: completions polled");
        }
        check_peer(&ctx, &cli, cq, &srv, sq, GID);
        check_peer(&ctx, &srv, sq, &cli, cq, GID);
        // Writes move bytes client -> server; reads server -> client (target -> issuer).
        let sent = if op == Op::VerbsWrite {
            [0, n * size]
        } else {
            [n * size, 0]
        };
        check_json(&ctx, &run, [(sq, cq), (cq, sq)], sent);
    }
}

#[test]
fn ib_write_bw_exact_bytes() {
    perftest("ib_write_bw", Op::VerbsWrite, "RDMA_WRITE");
}

#[test]
fn ib_read_bw_exact_bytes() {
    perftest("ib_read_bw", Op::VerbsRead, "RDMA_READ");
}

/// tests/programs/verbs_larger_recv.c built against the system libibverbs (the NIC's takes its
/// place at run time through scripts/with-testnic.sh).
fn larger_recv_program() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let dir = common::scratch("verbs-larger-build");
        let exe = dir.join("verbs_larger_recv");
        let src = testnic::root().join("tests/programs/verbs_larger_recv.c");
        let o = Command::new(common::require("gcc"))
            .args(["-O1", "-Wall", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg("-libverbs")
            .output_bounded()
            .expect("run gcc");
        assert!(o.status.success(), "gcc: {}", common::stderr_of(&o));
        exe
    })
    .clone()
}

/// Issue 16 over verbs: receive WRs of 13,312 bytes filled by smaller SENDs, on a QP's own
/// receive queue and on an SRQ. What each work completion's byte_len says arrived is what
/// sigmatop counts (on the QP, and on the SRQ where those WRs were posted); the buffers count as
/// posted. The program's own sums of byte_len are the ground truth beside the parameters.
#[test]
fn larger_receives_on_a_queue_and_an_srq() {
    build_nic();
    let n = 60u64;
    let sum: u64 = (0..n).map(|i| 100 + 37 * i).sum();
    let prog = larger_recv_program();
    for mode in MODES {
        let ctx = format!("verbs_larger_recv {n} mode {mode:?}");
        let dir = common::scratch("testnic-larger");
        let log = dir.join("nic-log");
        std::fs::create_dir_all(&log).expect("log dir");
        let trace = mode.map(|m| Trace::new(m, &dir));
        let out = testnic::run_one(&prog, &[&n.to_string()], &log, trace.as_ref());
        assert!(
            out.status.success(),
            "{ctx}: {}\n{}",
            common::stdout_of(&out),
            common::stderr_of(&out)
        );
        let text = common::stdout_of(&out);
        assert!(
            text.contains(&format!("recv b: {n} completions, {sum} bytes"))
                && text.contains(&format!("recv srq: {n} completions, {sum} bytes")),
            "{ctx}: the program's own completions: {text}"
        );
        let Some(trace) = trace else { continue };
        let qpn = |name: &str| {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .map(|q| hex(q) as u32)
                .unwrap_or_else(|| panic!("{ctx}: no QPN {name} in {text}"))
        };
        let procs = common::processes(&trace);
        assert_eq!(procs.len(), 1, "{ctx}: one process");
        let p = &procs[0];
        for q in ["a", "c"] {
            let s = qp_count(p, qpn(q), Op::VerbsSend);
            assert_eq!(
                (s.ops, s.bytes, s.refused),
                (n, sum, 0),
                "{ctx}: SEND of {q}"
            );
        }
        let b = qp_count(p, qpn("b"), Op::VerbsRecv);
        assert_eq!(
            (b.ops, b.bytes, b.posted, b.posted_bytes),
            (n, sum, n, n * 13_312),
            "{ctx}: RECV of b: arrived, and posted apart"
        );
        let d = qp_count(p, qpn("d"), Op::VerbsRecv);
        assert_eq!(
            (d.ops, d.posted),
            (0, 0),
            "{ctx}: d's receives are its SRQ's"
        );
        let srq: Vec<u32> = p
            .endpoints
            .iter()
            .filter(|e| e.kind == EndpointKind::VerbsSrq)
            .map(|e| e.id)
            .collect();
        assert_eq!(srq.len(), 1, "{ctx}: one SRQ endpoint");
        let snap = p.last_snapshot().expect("a snapshot");
        let c = snap
            .counts
            .iter()
            .find(|c| c.ep == srq[0] && c.op == Op::VerbsSrqRecv as u8)
            .copied()
            .unwrap_or_default();
        assert_eq!(
            (c.ops, c.bytes, c.posted, c.posted_bytes),
            (n, sum, n, n * 13_312),
            "{ctx}: SRQ_RECV on the SRQ: arrived, and posted apart"
        );
    }
}
