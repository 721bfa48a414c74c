//! Proves that the UCX layer traces a real UCP program exactly: ucx_perftest server and client on
//! loopback, over the tcp, posix and sysv transports, for tag_bw, ucp_put_bw, ucp_get, stream_bw
//! and ucp_am_bw, in aggregate, simple and full mode:
//! - both sides exit 0 and print output of the same shape as an untraced run;
//! - the operations and bytes sigmatop counts per operation kind (hence per direction) equal what
//!   the benchmark moved: (iterations + warm-up) × size, plus the benchmark's own extra operations,
//!   each derived below from ucx_perftest's source (UCX 1.13, src/tools/perf/lib/); a receive is
//!   counted when it completes, with the bytes that arrived, and its buffer as posted (every
//!   posted receive here completes: posted = received), and nothing is refused;
//! - the traffic sits on the endpoint whose peer hash is the other process's own worker address;
//! - in simple/full mode every counted operation has exactly one event on disk (full mode: every
//!   progress call is counted, and the progress events on disk add up to the same completions).
//!
//! Warm-up: `ucx_perf_do_warmup` (libperf.c) runs rounds of 1, 2, 4, ... iterations while the
//! total is below `-w` and 100 ms have not passed. With `-w 1` that is exactly one round of one
//! iteration, whatever the timing, so every figure is (n + 1) × size, plus:
//! - ucp_put_bw: `send_last_iter` (ucp_tests.cc) issues one more put per run (2 runs: +2);
//! - every run ends in `flush()` = blocking `ucp_worker_flush`, and endpoint setup flushes once
//!   more (`ucp_perf_test_setup_endpoints`): 3 worker flushes per side.
//!
//! No double counting: stream_bw's receiver calls the legacy `ucp_stream_recv_nb`, which calls
//! `ucp_stream_recv_nbx` through libucp's PLT, i.e. through our hook as well; it is counted once.
//! stream_bw uses 4096-byte messages, below every transport's 8 KiB segment, so each message
//! arrives in one piece and each receive takes one message. tag_bw's receiver posts with a
//! callback and without `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`, so most receives complete inside the call
//! (the message was already there), where UCX 1.13 reports no length: the exact bytes prove the
//! probe (preload/src/ucx/recv.rs). ucp_am_bw's receiver gets every message in its AM handler
//! (counted there, with its length); rendezvous messages are then received into a buffer with
//! `ucp_am_recv_data_nbx`, counted as posted.
mod common;

use std::process::Command;
use std::time::Duration;

use common::{Totals, Trace};
use sigmatop::event::Op;
use sigmatop::trace::reader::ProcessRecording;

const LIMIT: Duration = Duration::from_secs(60);

struct Side {
    stdout: String,
    stderr: String,
    rec: Option<(ProcessRecording, Totals)>,
}

struct Pair {
    server: Side,
    client: Side,
}

/// Runs one ucx_perftest pair, traced in `mode` (None = untraced).
fn run_pair(tls: &str, test: &str, n: u64, size: u64, mode: Option<&'static str>) -> Pair {
    let bin = common::require("ucx_perftest");
    let dir = common::scratch(&format!("ucx-{test}-{}", tls.replace(',', "_")));
    let traces = mode.map(|m| {
        (
            Trace::new(m, &dir.join("server")),
            Trace::new(m, &dir.join("client")),
        )
    });
    let (s, port) = common::ucx_perftest_server(tls, |server| {
        server.env("UCX_RNDV_THRESH", rndv_thresh(size));
        if let Some((s, _)) = &traces {
            s.apply(server);
        }
    });
    let mut client = Command::new(&bin);
    client
        .args(["127.0.0.1", "-p", &port.to_string(), "-t", test])
        .args(["-n", &n.to_string(), "-s", &size.to_string(), "-w", "1"])
        .env("UCX_TLS", tls);
    client.env("UCX_RNDV_THRESH", rndv_thresh(size));
    if let Some((_, c)) = &traces {
        c.apply(&mut client);
    }
    let c = common::spawn(&mut client);
    let co = common::wait_timeout(c, LIMIT);
    let so = common::wait_timeout(s, LIMIT);
    let ctx = format!("{test} over {tls}, mode {mode:?}");
    for (who, o) in [("server", &so), ("client", &co)] {
        assert!(
            o.status.success(),
            "{ctx}: {who} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
            o.status,
            common::stdout_of(o),
            common::stderr_of(o)
        );
        assert!(
            !common::stderr_of(o).contains("sigmatop"),
            "{ctx}: {who} printed a sigmatop warning:\n{}",
            common::stderr_of(o)
        );
    }
    let read = |t: &Trace| {
        let mut ps = common::processes(t);
        assert_eq!(ps.len(), 1, "{ctx}: one traced process per side");
        let p = ps.remove(0);
        let tot = common::totals(&p);
        assert!(!tot.cut, "{ctx}: the record ends cleanly");
        (p, tot)
    };
    Pair {
        server: Side {
            stdout: common::stdout_of(&so),
            stderr: common::stderr_of(&so),
            rec: traces.as_ref().map(|(s, _)| read(s)),
        },
        client: Side {
            stdout: common::stdout_of(&co),
            stderr: common::stderr_of(&co),
            rec: traces.as_ref().map(|(_, c)| read(c)),
        },
    }
}

/// (posts, bytes) of receive buffers posted with one op, by op name.
type PostedByOp = Vec<(String, (u64, u64))>;

/// Receive buffers posted on one side, by op name, and the refusals.
fn posted(p: &ProcessRecording) -> (PostedByOp, u64) {
    let mut by: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let mut refused = 0;
    for c in p
        .last_snapshot()
        .map(|s| s.counts.as_slice())
        .unwrap_or(&[])
    {
        refused += c.refused;
        if c.posted > 0 {
            let e = by
                .entry(Op::from_u8(c.op).expect("op").name().to_string())
                .or_default();
            e.0 += c.posted;
            e.1 += c.posted_bytes;
        }
    }
    (by.into_iter().collect(), refused)
}

/// What each side posts (op, posts, bytes): every receive of `expect` posted its message's size,
/// except active messages, of which only rendezvous ones (16 KiB and more, `rndv_thresh`) are
/// received into a posted buffer.
fn expected_posted(expect: &[(Op, u64, u64)], size: u64) -> Vec<(String, (u64, u64))> {
    let mut v: Vec<(String, (u64, u64))> = expect
        .iter()
        .filter(|(o, _, _)| o.is_receive())
        .filter(|(o, _, _)| *o != Op::UcxAmRecvData || rndv_thresh(size) != "inf")
        .map(|(o, n, b)| (o.name().to_string(), (*n, *b)))
        .collect();
    v.sort();
    v
}

/// Every op the record counted, except progress: (ops, bytes) by name.
fn data_ops(t: &Totals) -> Vec<(String, (u64, u64))> {
    t.by_op
        .iter()
        .filter(|(k, _)| k.as_str() != Op::UcxProgress.name())
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn check_side(
    ctx: &str,
    mode: &str,
    side: &Side,
    peer: &ProcessRecording,
    expect: &[(Op, u64, u64)],
    size: u64,
) {
    let (p, t) = side.rec.as_ref().expect("traced");
    assert_eq!(
        posted(p),
        (expected_posted(expect, size), 0),
        "{ctx}: receive buffers posted, and nothing refused"
    );
    let mut want: Vec<(String, (u64, u64))> = expect
        .iter()
        .map(|(o, n, b)| (o.name().to_string(), (*n, *b)))
        .collect();
    want.sort();
    let got = data_ops(t);
    if std::env::var_os("DEBUG_SIGMATOP_TEST").is_some() {
        eprintln!(
            "{ctx}: {got:?} progress {:?} events {}",
            t.by_op.get("progress"),
            t.events_on_disk
        );
    }
    assert_eq!(
        got, want,
        "{ctx}: counted operations\nendpoints: {:#?}\nstdout:\n{}\nstderr:\n{}",
        t.endpoints, side.stdout, side.stderr
    );
    // Traffic on endpoints sits on the one endpoint whose peer is the other process.
    let peer_hashes = &peer.identity.own_addr_hashes;
    assert!(
        !peer_hashes.is_empty(),
        "{ctx}: the peer announced its address"
    );
    for ((ep, op), (n, _)) in &t.per_ep {
        let def = t.endpoints.iter().find(|d| d.id == *ep);
        let def = def.unwrap_or_else(|| panic!("{ctx}: {n} {op} on undefined endpoint {ep}"));
        if def.kind == sigmatop::event::EndpointKind::UcpEp {
            assert!(
                peer_hashes.contains(&def.peer.addr_hash),
                "{ctx}: {op} on {} whose peer {:#x} is not the other process {:x?}",
                def.label,
                def.peer.addr_hash,
                peer_hashes
            );
        }
    }
    let progress = t.by_op.get(Op::UcxProgress.name()).copied();
    // One event per call: an operation's, a receive's post (its completion is counted, not an
    // event), a refusal's.
    let data_total: u64 = p
        .last_snapshot()
        .map(|s| s.counts.as_slice())
        .unwrap_or(&[])
        .iter()
        .filter(|c| c.op != Op::UcxProgress as u8)
        .map(|c| {
            let posts = if Op::from_u8(c.op).is_some_and(Op::is_receive) {
                c.posted
            } else {
                c.ops
            };
            posts + c.refused
        })
        .sum();
    let mut probs = Vec::new();
    let events = p.read_all_events(&mut probs);
    let prog_events: Vec<_> = events
        .iter()
        .filter(|e| e.op == Op::UcxProgress as u8)
        .collect();
    let data_events = events.len() - prog_events.len();
    match mode {
        "aggregate" => {
            assert_eq!(events.len(), 0, "{ctx}: no events in aggregate mode");
            assert_eq!(progress, None, "{ctx}: progress is not traced");
        }
        "simple" => {
            assert_eq!(data_events as u64, data_total, "{ctx}: one event per call");
            assert_eq!(progress, None, "{ctx}: progress is not traced");
        }
        _ => {
            assert_eq!(data_events as u64, data_total, "{ctx}: one event per call");
            let (pn, pb) = progress.unwrap_or_else(|| panic!("{ctx}: full mode counts progress"));
            assert!(pn > 0 && pn >= prog_events.len() as u64);
            let ev_bytes: u64 = prog_events.iter().map(|e| e.bytes).sum();
            assert_eq!(
                ev_bytes, pb,
                "{ctx}: progress events carry every completion"
            );
            assert!(prog_events.iter().all(|e| e.bytes > 0));
        }
    }
    assert_eq!(t.events_on_disk, events.len() as u64);
}

/// Pins the protocol: messages of 16 KiB and more go rendezvous, smaller ones eager, on every
/// transport. It matters for ucp_am_bw, whose receiver calls `ucp_am_recv_data_nbx` (from its AM
/// handler, inside `ucp_worker_progress`) only for rendezvous messages.
fn rndv_thresh(size: u64) -> &'static str {
    if size >= 16384 { "8192" } else { "inf" }
}

/// What each side of `test` does, per ucx_perftest's source (see the top of this file).
/// (op, calls, bytes) expected on one side.
type Expect = Vec<(Op, u64, u64)>;

fn expected(test: &str, n: u64, s: u64) -> (Expect, Expect) {
    let it = n + 1; // + the one warm-up iteration
    let flush = (Op::UcxWorkerFlush, 3, 0);
    match test {
        "tag_bw" => (
            vec![(Op::UcxTagRecv, it, it * s), flush],
            vec![(Op::UcxTagSend, it, it * s), flush],
        ),
        "ucp_put_bw" => (vec![flush], vec![(Op::UcxPut, it + 2, (it + 2) * s), flush]),
        "ucp_get" => (vec![flush], vec![(Op::UcxGet, it, it * s), flush]),
        "stream_bw" => (
            vec![(Op::UcxStreamRecv, it, it * s), flush],
            vec![(Op::UcxStreamSend, it, it * s), flush],
        ),
        "ucp_am_bw" => (
            vec![(Op::UcxAmRecvData, it, it * s), flush],
            vec![(Op::UcxAmSend, it, it * s), flush],
        ),
        _ => unreachable!(),
    }
}

/// The output's shape without the periodic "[thread 0] ..." lines: ucx_perftest prints one per
/// elapsed report interval (1 s), so their number follows the wall-clock time of the run.
fn shape(stdout: &str) -> Vec<String> {
    common::output_shape(stdout)
        .into_iter()
        .filter(|l| !l.starts_with("[thread #]"))
        .collect()
}

fn run_transport(tls: &str, cases: &[(&str, u64, u64)]) {
    for &(test, n, size) in cases {
        let base = run_pair(tls, test, n, size, None);
        for mode in ["aggregate", "simple", "full"] {
            let ctx = format!("{test} -n {n} -s {size} over UCX_TLS={tls}, {mode} mode");
            let pair = run_pair(tls, test, n, size, Some(mode));
            for (who, a, b) in [
                ("server", &base.server, &pair.server),
                ("client", &base.client, &pair.client),
            ] {
                assert_eq!(
                    shape(&a.stdout),
                    shape(&b.stdout),
                    "{ctx}: {who} output differs in shape from the untraced run"
                );
            }
            let (srv_want, cli_want) = expected(test, n, size);
            let srv = &pair.server.rec.as_ref().expect("traced").0;
            let cli = &pair.client.rec.as_ref().expect("traced").0;
            check_side(
                &format!("{ctx}, server"),
                mode,
                &pair.server,
                cli,
                &srv_want,
                size,
            );
            check_side(
                &format!("{ctx}, client"),
                mode,
                &pair.client,
                srv,
                &cli_want,
                size,
            );
        }
    }
}

#[test]
fn perftest_tcp() {
    run_transport(
        "tcp",
        &[
            ("tag_bw", 2000, 4096),
            ("ucp_put_bw", 2000, 65536),
            ("ucp_get", 200, 4096),
            ("stream_bw", 1000, 4096),
            ("ucp_am_bw", 1000, 4096),
            ("ucp_am_bw", 500, 65536),
        ],
    );
}

#[test]
fn perftest_posix() {
    run_transport(
        "posix,self",
        &[
            ("tag_bw", 2000, 65536),
            ("ucp_put_bw", 2000, 4096),
            ("ucp_get", 1000, 65536),
            ("stream_bw", 1000, 4096),
            ("ucp_am_bw", 1000, 65536),
        ],
    );
}

#[test]
fn perftest_sysv() {
    run_transport(
        "sysv,self",
        &[
            ("tag_bw", 1000, 4096),
            ("ucp_put_bw", 1000, 65536),
            ("ucp_get", 1000, 4096),
            ("stream_bw", 1000, 4096),
            ("ucp_am_bw", 1000, 4096),
        ],
    );
}
