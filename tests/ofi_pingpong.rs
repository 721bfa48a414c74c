//! fi_pingpong (libfabric's packaged ping-pong benchmark, unmodified) traced by the preload over
//! `tcp` msg, `tcp;ofi_rxm` rdm and `shm` rdm, in aggregate, simple and full mode. Proves that:
//! both sides exit 0 and print the same output shape and the same transfer figures as an untraced
//! run; the sends, receives and bytes sigmatop counts on each side equal exactly what fi_pingpong
//! moved (rule below); the recorded events agree with the counters; full mode counts exactly the
//! completions fi_pingpong reaped; and each side's endpoint names the other process as its peer
//! (connected endpoints by address, RDM endpoints by the fi_addr → address updates of the AV).
//!
//! What fi_pingpong moves through libfabric (libfabric v1.17.0 util/pingpong.c; its control
//! messages travel over a separate plain TCP socket and are not libfabric traffic; message
//! prefixes are 0 for these providers, and the default `-m msg` uses fi_send/fi_recv):
//! - `pp_init_ep` posts one receive of `MAX(size, 64)` bytes (PP_MAX_CTRL_MSG = 64);
//! - with `-S size -I iters` there is no warm-up: `pingpong()` does `iters` iterations, each one
//!   transmit of `size` bytes (`fi_inject` when size < the provider's inject_size, which has no
//!   completion, else `fi_send`) and one `pp_rx`, which waits for a receive completion and posts
//!   the next receive, again of `MAX(size, 64)` bytes;
//! - `pp_finalize` sends "fin\0" with `fi_sendmsg` (one 4-byte iov, FI_TRANSMIT_COMPLETE) and
//!   waits for its completion and for the peer's "fin".
//!
//! So on each side: sends = iters + 1 and send bytes = iters × size + 4; receives posted =
//! iters + 1 of MAX(size, 64) bytes each; receives completed = iters + 1 with the bytes that
//! arrived, the peer's iters × size + 4 (read from the completion queue's entries: fi_pingpong
//! opens it with FI_CQ_FORMAT_CONTEXT, which sigmatop opens as FI_CQ_FORMAT_MSG); completions
//! read (one per fi_cq_read call) = iters + 1 receives + every send that was not an inject. Calls
//! that returned -FI_EAGAIN (retried by fi_pingpong's PP_POST) are refusals, counted apart from
//! the operations, each with an event flagged ERROR.
//!
//! `tcp_rdm_larger_receives` is issue 16's run: `-p tcp -e rdm` without `-S`, so every receive
//! is posted with fi_pingpong's largest buffer (PP_MAX_DATA_MSG, 6 MiB) while the messages are
//! its default sizes, 64 B to 1 MiB: received bytes must be what arrived, the client's sends
//! what the server received and what the correlator paired, and the busy provider's refusals
//! apart.

mod common;

use std::process::Output;
use std::time::Duration;

use common::*;
use sigmatop::event::{Op, flags};
use sigmatop::trace::reader::ProcessRecording;

const SIZE: u64 = 4096;
const ITERS: u64 = 300;

struct Run {
    server: Output,
    client: Output,
    server_pid: u32,
    client_pid: u32,
}

fn pingpong(prov: &str, ep: &str, trace: Option<&Trace>) -> Run {
    let (iters, size) = (ITERS.to_string(), SIZE.to_string());
    let pp = fi_pingpong(
        &["-p", prov, "-e", ep, "-I", &iters, "-S", &size],
        |c| {
            if let Some(t) = trace {
                t.apply(c);
            }
        },
        Duration::from_secs(60),
    );
    Run {
        server: pp.server,
        client: pp.client,
        server_pid: pp.server_pid,
        client_pid: pp.client_pid,
    }
}

/// (operations, their bytes, refusals) of `op` in the last snapshot.
fn counted(p: &ProcessRecording, op: Op) -> (u64, u64, u64) {
    let s = p.last_snapshot().expect("a snapshot");
    let mut r = (0, 0, 0);
    for c in s.counts.iter().filter(|c| c.op == op as u8) {
        r.0 += c.ops;
        r.1 += c.bytes;
        r.2 += c.refused;
    }
    r
}

/// (receives posted, their bytes, failed operations) of `op` in the last snapshot.
fn posted(p: &ProcessRecording, op: Op) -> (u64, u64, u64) {
    let s = p.last_snapshot().expect("a snapshot");
    let mut r = (0, 0, 0);
    for c in s.counts.iter().filter(|c| c.op == op as u8) {
        r.0 += c.posted;
        r.1 += c.posted_bytes;
        r.2 += c.errors;
    }
    r
}

fn check_side(p: &ProcessRecording, mode: &str, what: &str) {
    let rx_len = SIZE.max(64);
    let send = counted(p, Op::OfiSend);
    let recv = counted(p, Op::OfiRecv);
    assert_eq!(
        (send.0, send.1),
        (ITERS + 1, ITERS * SIZE + 4),
        "{what}: sends (operations, bytes)"
    );
    assert_eq!(
        (recv.0, recv.1),
        (ITERS + 1, ITERS * SIZE + 4),
        "{what}: receives completed, bytes that arrived"
    );
    assert_eq!(
        posted(p, Op::OfiRecv),
        (ITERS + 1, (ITERS + 1) * rx_len, 0),
        "{what}: receives posted (buffers, bytes), none failed"
    );
    for op in [Op::OfiRead, Op::OfiWrite, Op::OfiTSend, Op::OfiTRecv] {
        assert_eq!(counted(p, op), (0, 0, 0), "{what}: no {op:?}");
    }
    let t = totals(p);
    assert!(!t.cut, "{what}: record cut");
    let mut probs = Vec::new();
    let events = p.read_all_events(&mut probs);
    assert!(probs.is_empty(), "{what}: {probs:?}");
    if mode == "aggregate" {
        assert_eq!(events.len(), 0, "{what}: aggregate mode records no events");
        assert_eq!(counted(p, Op::OfiCqRead), (0, 0, 0), "{what}: cq reads");
        return;
    }
    assert_eq!(t.events_on_disk, t.events, "{what}: every event on disk");
    let ok = |op: Op| {
        events
            .iter()
            .filter(move |e| e.op == op as u8 && e.flags & flags::ERROR == 0)
    };
    let sends: Vec<_> = ok(Op::OfiSend).collect();
    assert_eq!(sends.len() as u64, ITERS + 1, "{what}: send events");
    assert_eq!(
        sends.iter().map(|e| e.bytes).sum::<u64>(),
        ITERS * SIZE + 4,
        "{what}: send event bytes"
    );
    assert_eq!(
        sends.iter().filter(|e| e.bytes == 4).count(),
        1,
        "{what}: one 4-byte fin"
    );
    let recvs: Vec<_> = ok(Op::OfiRecv).collect();
    assert_eq!(
        recvs.len() as u64,
        ITERS + 1,
        "{what}: receive events (its posts)"
    );
    assert!(
        recvs.iter().all(|e| e.bytes == rx_len),
        "{what}: every receive posts {rx_len} bytes"
    );
    let failed = events
        .iter()
        .filter(|e| {
            e.flags & flags::ERROR != 0 && (e.op == Op::OfiSend as u8 || e.op == Op::OfiRecv as u8)
        })
        .count() as u64;
    assert_eq!(failed, send.2 + recv.2, "{what}: refused calls as events");
    let cq = counted(p, Op::OfiCqRead);
    if mode == "full" {
        let not_injected = sends
            .iter()
            .filter(|e| e.flags & flags::INLINE == 0)
            .count() as u64;
        let want = (ITERS + 1) + not_injected;
        assert_eq!(cq.1, want, "{what}: completions read");
        assert_eq!(
            cq.0, want,
            "{what}: fi_pingpong reads one completion per call"
        );
        assert_eq!(cq.2, 0, "{what}: no cq errors");
    } else {
        assert_eq!(cq, (0, 0, 0), "{what}: cq reads only in full mode");
    }
}

/// The figure line's first four columns: bytes, #sent, #ack, total.
fn figures(o: &Output) -> Vec<String> {
    let out = stdout_of(o);
    let line = out.lines().nth(1).unwrap_or_default();
    line.split_whitespace().take(4).map(String::from).collect()
}

fn check_peers(server: &ProcessRecording, client: &ProcessRecording, rdm: bool, what: &str) {
    for (me, other, who) in [(server, client, "server"), (client, server, "client")] {
        let own = &other.identity.own_addr_hashes;
        assert!(
            !own.is_empty(),
            "{what}: {who}'s peer announced its address"
        );
        let eps: Vec<_> = me
            .endpoints
            .iter()
            .filter(|e| e.kind == sigmatop::event::EndpointKind::FiEp)
            .collect();
        assert_eq!(eps.len(), 1, "{what}: {who} has one endpoint: {eps:?}");
        let ep = eps[0];
        if rdm {
            let av: Vec<_> = me
                .updates
                .iter()
                .filter(|u| u.id == ep.id && u.state == "av")
                .filter_map(|u| u.peer.as_ref())
                .collect();
            assert_eq!(av.len(), 1, "{what}: {who} inserted one address: {av:?}");
            assert_eq!(av[0].text, "fi_addr 0", "{what}: {who}");
            assert!(
                own.contains(&av[0].addr_hash),
                "{what}: {who}'s fi_addr 0 is the other process ({av:?} vs {own:?})"
            );
        } else {
            let peer = me
                .updates
                .iter()
                .rev()
                .filter(|u| u.id == ep.id)
                .find_map(|u| u.peer.clone())
                .unwrap_or_else(|| ep.peer.clone());
            assert!(
                own.contains(&peer.addr_hash),
                "{what}: {who}'s peer {peer:?} is the other process ({own:?})"
            );
        }
    }
}

/// Busy-polling pairs on a 2-core machine: one pair at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn provider(prov: &str, ep: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = pingpong(prov, ep, None);
    for o in [&base.server, &base.client] {
        assert!(o.status.success(), "untraced {prov}: {}", stderr_of(o));
    }
    for mode in ["aggregate", "simple", "full"] {
        let what = format!("{prov} {ep} {mode}");
        let dir = scratch(&format!("ofi-pp-{}-{mode}", prov.replace(';', "-")));
        let trace = Trace::new(mode, &dir);
        let run = pingpong(prov, ep, Some(&trace));
        for (o, b, side) in [
            (&run.server, &base.server, "server"),
            (&run.client, &base.client, "client"),
        ] {
            assert!(
                o.status.success(),
                "{what} {side}: {}\n{}",
                stdout_of(o),
                stderr_of(o)
            );
            assert_eq!(
                output_shape(&stdout_of(o)),
                output_shape(&stdout_of(b)),
                "{what} {side}: output shape"
            );
            assert_eq!(figures(o), figures(b), "{what} {side}: figures");
            assert_eq!(
                stderr_of(o),
                stderr_of(b),
                "{what} {side}: nothing new on stderr"
            );
        }
        let procs = processes(&trace);
        let find = |pid: u32| {
            procs
                .iter()
                .find(|p| p.identity.pid == pid)
                .unwrap_or_else(|| panic!("{what}: no record of pid {pid}"))
        };
        let (s, c) = (find(run.server_pid), find(run.client_pid));
        for e in s.endpoints.iter().chain(c.endpoints.iter()) {
            if e.kind == sigmatop::event::EndpointKind::FiEp {
                assert_eq!(e.transport, prov, "{what}: endpoint transport");
            }
        }
        check_side(s, mode, &format!("{what} server"));
        check_side(c, mode, &format!("{what} client"));
        check_peers(s, c, ep == "rdm", &what);
    }
}

#[test]
fn tcp_msg() {
    provider("tcp", "msg");
}

#[test]
fn tcp_rxm_rdm() {
    provider("tcp;ofi_rxm", "rdm");
}

#[test]
fn shm_rdm() {
    provider("shm", "rdm");
}

/// fi_pingpong's default message sizes (util/pingpong.c `defaults`), all below its 6 MiB buffer.
const DEFAULT_SIZES: [u64; 6] = [64, 256, 1024, 4096, 65536, 1 << 20];
/// PP_MAX_DATA_MSG: every receive fi_pingpong posts without `-S`.
const MAX_DATA_MSG: u64 = (1 << 22) + (1 << 21);

#[test]
fn tcp_rdm_larger_receives() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let iters: u64 = 100;
    let dir = scratch("ofi-pp-issue16");
    let trace = Trace::new("simple", &dir);
    let pp = fi_pingpong(
        &["-p", "tcp", "-e", "rdm", "-I", &iters.to_string()],
        |c| trace.apply(c),
        Duration::from_secs(240),
    );
    let (so, co, server_pid, client_pid) = (pp.server, pp.client, pp.server_pid, pp.client_pid);
    for (o, who) in [(&so, "server"), (&co, "client")] {
        assert!(
            o.status.success(),
            "{who}: {}\n{}",
            stdout_of(o),
            stderr_of(o)
        );
    }
    let procs = processes(&trace);
    let find = |pid: u32| {
        procs
            .iter()
            .find(|p| p.identity.pid == pid)
            .unwrap_or_else(|| panic!("no record of pid {pid}"))
    };
    let (srv, cli) = (find(server_pid), find(client_pid));
    // Each side sends iters messages of every default size and the 4-byte fin, and posts one
    // 6 MiB receive for each message it gets.
    let messages = iters * DEFAULT_SIZES.len() as u64 + 1;
    let bytes = iters * DEFAULT_SIZES.iter().sum::<u64>() + 4;
    let mut refused = 0;
    for (p, who) in [(srv, "server"), (cli, "client")] {
        let send = counted(p, Op::OfiSend);
        let recv = counted(p, Op::OfiRecv);
        assert_eq!((send.0, send.1), (messages, bytes), "{who}: sends accepted");
        assert_eq!(
            (recv.0, recv.1),
            (messages, bytes),
            "{who}: receives completed with the bytes that arrived"
        );
        assert_eq!(
            posted(p, Op::OfiRecv),
            (messages, messages * MAX_DATA_MSG, 0),
            "{who}: 6 MiB receive buffers posted"
        );
        assert_eq!(recv.2, 0, "{who}: no receive refused");
        refused += send.2;
        eprintln!("{who}: {} sends refused (-FI_EAGAIN), retried", send.2);
    }
    assert!(
        refused > 0,
        "the busy provider refused some sends (-FI_EAGAIN); none seen in this run"
    );
    // The client's sends are the server's receives, and the correlator pairs every one.
    let json = export_json(&trace.record, "tcp rdm");
    let flows = &json["flows"];
    assert_eq!(flows["sends"], 2 * messages, "sends of both sides: {flows}");
    assert_eq!(
        flows["paired"],
        2 * messages,
        "every send paired with its receive: {flows}"
    );
    let refused_json: u64 = json["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["refused"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        refused_json, refused,
        "the JSON report shows the refusals apart"
    );
}
