//! The ibverbs layer on the real rdma-core stack over soft-RoCE (rdma_rxe), in a software-emulated
//! guest (reference/workloads.md, Tier 2). One guest boot runs tests/guest/verbs_batch.sh: every
//! workload untraced and under the preload in aggregate, simple and full mode (ibv_rc_pingpong,
//! ib_read_bw, ib_send_lat, UCT put_bw over rc_verbs, ib_write_bw -R, rping, fi_pingpong -p verbs,
//! UCT am_lat over rc_verbs, UCX io_demo over rc_verbs). Here, on the host, for each traced run:
//! - exit statuses and the shape of the output equal the untraced run's;
//! - the WRs and bytes per QP and opcode equal what the program reports it did, with the
//!   documented extras of each program (rules next to each check, from the programs' sources);
//! - every QP that carried traffic is matched to its peer QP: its RTR peer (QPN, GID) names a QP of
//!   the other process whose peer is this QP, and the peer hash is one of that process's own
//!   addresses;
//! - full mode counts the completions the programs polled (exact where the program polls every
//!   completion it caused).
//!
//! When the guest cannot boot (no virtme-ng, QEMU or kernel image) the test fails naming what is
//! missing; with SIGMATOP_SKIP_GUEST=1 it prints a loud SKIPPED line instead.

mod common;
#[path = "export_util.rs"]
mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::*;
use sigmatop::event::{EndpointKind, Op, flags};
use sigmatop::trace::reader::{ProcessRecording, Recording};

const MODES: [&str; 3] = ["aggregate", "simple", "full"];
const WORKLOADS: [&str; 9] = [
    "rc_pingpong",
    "read_bw",
    "send_lat",
    "put_bw",
    "write_bw",
    "rping",
    "fi_pingpong",
    "am_lat",
    "io_demo",
];

/// virtme-ng and a kernel to boot, or what is missing.
pub fn guest_tools() -> Result<(PathBuf, String), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join("target/vng-venv/bin");
    let vng = if venv.join("vng").is_file() {
        venv.join("vng")
    } else {
        std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|d| Path::new(d).join("vng"))
            .find(|p| p.is_file())
            .ok_or("virtme-ng (`vng`) is not installed: scripts/test.sh installs virtme-ng==1.42 into target/vng-venv")?
    };
    if !Path::new("/usr/bin/qemu-system-x86_64").is_file() {
        return Err(
            "qemu-system-x86_64 is missing: apt-get install qemu-system-x86 (scripts/test.sh does)"
                .into(),
        );
    }
    let mut kernels: Vec<String> = std::fs::read_dir("/lib/modules")
        .map_err(|_| "no /lib/modules: apt-get install linux-image-amd64 (scripts/test.sh does)")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|k| k.ends_with("-amd64") && Path::new(&format!("/boot/vmlinuz-{k}")).is_file())
        .collect();
    kernels.sort();
    let k = kernels
        .pop()
        .ok_or("no /boot/vmlinuz-*-amd64 with modules: apt-get install linux-image-amd64 (scripts/test.sh does)")?;
    Ok((vng, k))
}

/// Boots the guest once and runs `script` with `args`; returns the guest's console output.
pub fn boot(vng: &Path, kernel: &str, out: &Path, script: &str, args: &[&str]) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/guest").join(script);
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let exec = format!("bash {} {}", script.display(), quoted.join(" "));
    let path = format!(
        "{}:{}",
        vng.parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    // `| cat`: vng loses the guest output when its stdout is a file (workloads.md).
    let cmd = format!(
        "timeout 900 '{}' --disable-kvm --run /boot/vmlinuz-{kernel} --cpus 2 -m 2G --rwdir='{}' --exec \"{exec}\" 2>&1 | cat",
        vng.display(),
        out.display()
    );
    let start = Instant::now();
    let o = Command::new("bash")
        .arg("-c")
        .arg(&cmd)
        .env("PATH", path)
        .output()
        .expect("run vng");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!("guest ran {:?}", start.elapsed());
    text
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Output shape: hex numbers, timestamps and pointers become '#', then digits (common shape).
/// Lines that only report progress over time (ucx_perftest's periodic rows) are dropped.
fn shape(text: &str) -> Vec<String> {
    let mut cleaned = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        // ucx_perftest's "[thread 0] ..." rows are printed once per elapsed second: how many
        // appear depends on timing (in the emulated guest, on every run), not on sigmatop.
        if t.starts_with("[thread ") {
            continue;
        }
        if t.starts_with(|c: char| c.is_ascii_digit())
            && line.starts_with(' ')
            && !t.contains("bytes")
        {
            // ucx_perftest periodic progress rows: "   1234   ..." (time-driven, count varies)
            if t.split_whitespace().count() >= 8 && !line.contains(':') {
                continue;
            }
        }
        let mut out = String::new();
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'0' && i + 1 < b.len() && (b[i + 1] == b'x' || b[i + 1] == b'X') {
                i += 2;
                while i < b.len() && b[i].is_ascii_hexdigit() {
                    i += 1;
                }
                out.push('#');
            } else {
                out.push(b[i] as char);
                i += 1;
            }
        }
        cleaned.push_str(&out);
        cleaned.push('\n');
    }
    output_shape(&cleaned)
}

#[derive(Default, Debug, Clone)]
struct Run {
    client_rc: String,
    server_rc: String,
    client_out: String,
    server_out: String,
    dir: PathBuf,
}

fn load(out: &Path, w: &str, mode: &str) -> Run {
    let dir = out.join(w).join(mode);
    Run {
        client_rc: read(&dir.join("client.rc")).trim().to_string(),
        server_rc: read(&dir.join("server.rc")).trim().to_string(),
        client_out: read(&dir.join("client.out")),
        server_out: read(&dir.join("server.out")),
        dir,
    }
}

/// (ops, bytes) per op name, per QP label, of one process.
type QpOps = BTreeMap<String, BTreeMap<&'static str, (u64, u64)>>;

fn qp_ops(p: &ProcessRecording) -> QpOps {
    let mut m = QpOps::new();
    let Some(s) = p.last_snapshot() else { return m };
    for c in &s.counts {
        let Some(def) = p.endpoints.iter().find(|e| e.id == c.ep) else {
            continue;
        };
        let Some(op) = Op::from_u8(c.op) else {
            continue;
        };
        let e = m
            .entry(def.label.clone())
            .or_default()
            .entry(op.name())
            .or_default();
        e.0 += c.ops;
        e.1 += c.bytes;
    }
    m
}

fn op_of(m: &QpOps, label_prefix: &str, op: Op) -> (u64, u64) {
    m.iter()
        .filter(|(l, _)| l.starts_with(label_prefix))
        .filter_map(|(_, ops)| ops.get(op.name()))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// The QP (label) that carried `op`, with its counts: exactly one must.
fn qp_with(m: &QpOps, op: Op) -> Vec<(String, (u64, u64))> {
    m.iter()
        .filter(|(l, _)| l.starts_with("qp "))
        .filter_map(|(l, ops)| ops.get(op.name()).map(|v| (l.clone(), *v)))
        .collect()
}

/// Completions polled (full mode): sum of the poll_cq event `bytes` over all CQs.
fn completions(p: &ProcessRecording) -> u64 {
    let Some(s) = p.last_snapshot() else { return 0 };
    s.counts
        .iter()
        .filter(|c| c.op == Op::VerbsPollCq as u8)
        .map(|c| c.bytes)
        .sum()
}

/// Every QP of `a` that carried traffic has an RTR peer (QPN, GID) that is a QP of `b` whose own
/// peer is that QP, and the peer hash is one of `b`'s own addresses.
fn check_matched(ctx: &str, a: &ProcessRecording, b: &ProcessRecording) {
    let busy: Vec<u32> = a
        .last_snapshot()
        .map(|s| s.counts.iter().map(|c| c.ep).collect())
        .unwrap_or_default();
    for qp in a
        .endpoints
        .iter()
        .filter(|e| e.kind == EndpointKind::VerbsQp && busy.contains(&e.id))
    {
        let rtr = a
            .updates
            .iter()
            .rfind(|u| u.id == qp.id && u.state == "RTR")
            .and_then(|u| u.peer.clone())
            .unwrap_or_else(|| {
                panic!(
                    "{ctx}: {} of pid {} carried traffic but has no RTR peer",
                    qp.label, a.identity.pid
                )
            });
        let pq = rtr.qpn.expect("peer qpn");
        assert!(rtr.gid.is_some(), "{ctx}: {} has no peer GID", qp.label);
        let other = b
            .endpoints
            .iter()
            .find(|e| e.kind == EndpointKind::VerbsQp && e.qpn == Some(pq))
            .unwrap_or_else(|| {
                panic!(
                    "{ctx}: peer QPN 0x{pq:x} of {} is no QP of pid {}",
                    qp.label, b.identity.pid
                )
            });
        let back = b
            .updates
            .iter()
            .rfind(|u| u.id == other.id && u.state == "RTR")
            .and_then(|u| u.peer.clone())
            .unwrap_or_else(|| panic!("{ctx}: peer {} has no RTR", other.label));
        assert_eq!(
            back.qpn, qp.qpn,
            "{ctx}: {} ↔ {} not mutual",
            qp.label, other.label
        );
        assert!(
            b.identity.own_addr_hashes.contains(&rtr.addr_hash),
            "{ctx}: {}'s peer hash is not an own address of pid {} ({})",
            qp.label,
            b.identity.pid,
            rtr.text
        );
    }
}

/// Numbers in the row that follows the perftest results header ("#bytes #iterations ...").
fn perftest_row(out: &str) -> (u64, u64) {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains("#bytes") && l.contains("#iterations") {
            let row = lines.next().unwrap_or_default();
            let v: Vec<u64> = row
                .split_whitespace()
                .take(2)
                .filter_map(|t| t.parse().ok())
                .collect();
            if v.len() == 2 {
                return (v[0], v[1]);
            }
        }
    }
    panic!("no perftest result row in:\n{out}");
}

/// ucx_perftest's iterations: the second column of its "Final:" row.
fn ucx_perftest_iterations(out: &str) -> u64 {
    out.lines()
        .find(|l| l.trim_start().starts_with("Final:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no Final row in:\n{out}"))
}

/// rping -v: one "ping data:" line per ping.
fn rping_pings(out: &str) -> u64 {
    out.lines().filter(|l| l.contains("ping data:")).count() as u64
}

fn number_before(out: &str, word: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.iter()
                .position(|w| *w == word)
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| t[i].parse().ok())
        })
        .unwrap_or_else(|| panic!("no '<n> {word}' in:\n{out}"))
}

/// Checks one traced run of workload `w`. `srv` and `cli` are the processes of its record.
fn check_counts(w: &str, mode: &str, run: &Run, srv: &ProcessRecording, cli: &ProcessRecording) {
    let ctx = format!("{w}/{mode}");
    let (s, c) = (qp_ops(srv), qp_ops(cli));
    let full = mode == "full";
    match w {
        "rc_pingpong" => {
            // rdma-core libibverbs/examples/rc_pingpong.c: "<2·n·size> bytes in ..." and
            // "<n> iters in ..."; each side sends n messages of `size` and posts rx_depth (500)
            // receives of `size` up front (reposting only once fewer than 2 remain).
            let bytes = number_before(&run.client_out, "bytes");
            let iters = number_before(&run.client_out, "iters");
            for (side, m, p) in [("server", &s, srv), ("client", &c, cli)] {
                assert_eq!(
                    op_of(m, "qp ", Op::VerbsSend),
                    (iters, bytes / 2),
                    "{ctx} {side} SEND"
                );
                assert_eq!(
                    op_of(m, "qp ", Op::VerbsRecv),
                    (500, 500 * bytes / 2 / iters),
                    "{ctx} {side} RECV"
                );
                if full {
                    assert_eq!(
                        completions(p),
                        2 * iters,
                        "{ctx} {side}: n send + n recv completions"
                    );
                }
            }
        }
        "read_bw" => {
            // perftest read_bw: the client posts #iterations RDMA reads of #bytes; the server posts
            // nothing on the data QP (keys are exchanged over TCP).
            let (size, iters) = perftest_row(&run.client_out);
            let q = qp_with(&c, Op::VerbsRead);
            assert_eq!(q.len(), 1, "{ctx}: one QP reads: {c:?}");
            assert_eq!(q[0].1, (iters, iters * size), "{ctx} RDMA_READ");
            assert!(
                qp_with(&s, Op::VerbsRead).is_empty() && op_of(&s, "qp ", Op::VerbsSend).0 == 0,
                "{ctx}: server idle: {s:?}"
            );
            if full {
                // Signaled every CQ-moderation (100) reads: n / 100 completions.
                assert_eq!(completions(cli), iters / 100, "{ctx} completions");
            }
        }
        "send_lat" => {
            // perftest send_lat: n ping-pong sends of #bytes each way; each side posts
            // rx_depth = min(512, n) receives of #bytes (rounded up to even), never reposted.
            let (size, iters) = perftest_row(&run.client_out);
            let rx = iters.min(512).div_ceil(2) * 2;
            for (side, m, p) in [("server", &s, srv), ("client", &c, cli)] {
                assert_eq!(
                    op_of(m, "qp ", Op::VerbsSend),
                    (iters, iters * size),
                    "{ctx} {side} SEND"
                );
                assert_eq!(
                    op_of(m, "qp ", Op::VerbsRecv),
                    (rx, rx * size),
                    "{ctx} {side} RECV"
                );
                if full {
                    assert_eq!(
                        completions(p),
                        2 * iters,
                        "{ctx} {side}: every send and receive completes"
                    );
                }
            }
        }
        "put_bw" | "am_lat" => {
            // ucx_perftest UCT (-w 0: no warm-up): "Final: <n> ..."; put_bw: n + 1 RDMA writes of
            // -s bytes (put_short, inline; the last is the sentinel); am_lat: n active messages each way of -s bytes plus the
            // 1-byte rc_verbs AM header (uct_rc_hdr_t). UCX also posts 0-byte RDMA writes as
            // flush/fence markers, which carry no payload.
            let iters = ucx_perftest_iterations(&run.client_out);
            if w == "put_bw" {
                let q = qp_with(&c, Op::VerbsWrite);
                assert_eq!(q.len(), 1, "{ctx}: {c:?}");
                // uct_tests.cc send_stream_req_uni: without flow control, one "sentinel" put of the
                // same length follows the n iterations.
                assert_eq!(
                    q[0].1,
                    (iters + 1, (iters + 1) * 64),
                    "{ctx} client RDMA_WRITE"
                );
                assert_eq!(
                    op_of(&s, "qp ", Op::VerbsWrite).1,
                    0,
                    "{ctx}: server writes no payload"
                );
            } else {
                for (side, m) in [("server", &s), ("client", &c)] {
                    assert_eq!(
                        op_of(m, "qp ", Op::VerbsSend),
                        (iters, iters * 65),
                        "{ctx} {side} SEND"
                    );
                    assert_eq!(
                        op_of(m, "qp ", Op::VerbsWrite).1,
                        0,
                        "{ctx} {side}: only 0-byte writes"
                    );
                }
            }
            for (side, m) in [("server", &s), ("client", &c)] {
                assert!(
                    op_of(m, "srq", Op::VerbsSrqRecv).0 > 0,
                    "{ctx} {side}: UCX receives through an SRQ"
                );
            }
        }
        "write_bw" => {
            // perftest write_bw -R: #iterations RDMA writes of #bytes on the data QP (rdma_cm
            // connected); the server posts nothing there. The other QP pair is the rdma_cm
            // exchange channel: SEND/RECV only.
            let (size, iters) = perftest_row(&run.client_out);
            let q = qp_with(&c, Op::VerbsWrite);
            assert_eq!(q.len(), 1, "{ctx}: {c:?}");
            assert_eq!(q[0].1, (iters, iters * size), "{ctx} RDMA_WRITE");
            assert!(qp_with(&s, Op::VerbsWrite).is_empty(), "{ctx}: {s:?}");
            for m in [&s, &c] {
                for (l, ops) in m
                    .iter()
                    .filter(|(l, _)| l.starts_with("qp ") && **l != q[0].0)
                {
                    assert!(
                        ops.keys().all(|k| *k == "SEND" || *k == "RECV"),
                        "{ctx}: exchange QP {l}: {ops:?}"
                    );
                }
            }
        }
        "rping" => {
            // librdmacm examples/rping.c, -C n, size 64: the client sends 2n rping_rdma_info
            // (16 bytes) advertisements, the server answers each; both post 1 + 2n receives of
            // 16 bytes (one up front, one repost per completion); the server RDMA-reads the
            // client's 64-byte buffer and RDMA-writes it back n times each.
            let n = rping_pings(&run.client_out);
            assert!(n > 0, "{ctx}: no ping data lines");
            for (side, m) in [("server", &s), ("client", &c)] {
                assert_eq!(
                    op_of(m, "qp ", Op::VerbsSend),
                    (2 * n, 2 * n * 16),
                    "{ctx} {side} SEND"
                );
                assert_eq!(
                    op_of(m, "qp ", Op::VerbsRecv),
                    (2 * n + 1, (2 * n + 1) * 16),
                    "{ctx} {side} RECV"
                );
            }
            assert_eq!(
                op_of(&s, "qp ", Op::VerbsRead),
                (n, n * 64),
                "{ctx} server RDMA_READ"
            );
            assert_eq!(
                op_of(&s, "qp ", Op::VerbsWrite),
                (n, n * 64),
                "{ctx} server RDMA_WRITE"
            );
            if full {
                // Every WR completes (the last posted receive is flushed at disconnect).
                assert_eq!(
                    completions(srv),
                    2 * n + 2 * n + 2 * n + 1,
                    "{ctx} server completions"
                );
                assert_eq!(
                    completions(cli),
                    2 * n + 2 * n + 1,
                    "{ctx} client completions"
                );
            }
        }
        "fi_pingpong" => {
            // libfabric util/pingpong.c over verbs msg endpoints: "#sent" transfers of -S bytes
            // each way plus one short sync message before them; each side keeps one receive
            // posted ahead (n + 1 in all).
            let row = run
                .client_out
                .lines()
                .find(|l| l.contains('='))
                .unwrap_or_else(|| panic!("{ctx}: no result row:\n{}", run.client_out));
            let sent: u64 = row
                .split_whitespace()
                .nth(1)
                .and_then(|t| t.parse().ok())
                .expect("#sent");
            for (side, m) in [("server", &s), ("client", &c)] {
                let (n, b) = op_of(m, "qp ", Op::VerbsSend);
                assert_eq!(n, sent + 1, "{ctx} {side} SEND count (n + 1 sync)");
                assert_eq!(b / 4096, sent, "{ctx} {side} SEND bytes {b}");
                let (rn, _) = op_of(m, "qp ", Op::VerbsRecv);
                assert_eq!(rn, sent + 1, "{ctx} {side} RECV count");
                // The libfabric layer (every layer is on) counts the same fi_send / fi_recv.
                let (fn_, fb) = op_of(m, "ep#", Op::OfiSend);
                assert_eq!(fn_, sent + 1, "{ctx} {side} fi_send count (n + 1 sync)");
                assert_eq!(fb / 4096, sent, "{ctx} {side} fi_send bytes {fb}");
                let (frn, _) = op_of(m, "ep#", Op::OfiRecv);
                assert_eq!(frn, sent + 1, "{ctx} {side} fi_recv count");
            }
        }
        "io_demo" => {
            // UCP over rc_verbs: the payload travels in UCP protocol messages (eager sends, RDMA
            // for rendezvous) whose exact count depends on random I/O sizes; check the client
            // sent and received something on a matched QP.
            let (n, b) = op_of(&c, "qp ", Op::VerbsSend);
            assert!(n > 0 && b > 0, "{ctx}: {c:?}");
        }
        _ => unreachable!(),
    }
}

/// The one-sided operations of a traced run, attributed by the correlator to the process whose
/// memory region they hit (`ibv_reg_mr` records: address range and rkey), against what each
/// program did:
/// - ib_write_bw -R: the client's #iterations RDMA writes of #bytes land in the server's buffer;
/// - ib_read_bw: the client's #iterations RDMA reads of #bytes read the server's buffer;
/// - rping: the server RDMA-reads the client's 64-byte buffer and RDMA-writes it back n times;
/// - ucx_perftest put_bw over rc_verbs: the client's n + 1 puts of 64 bytes hit the server's
///   registered receive buffer.
///
/// Every one-sided operation is attributed (none without a region, none ambiguous), through the
/// QP's peer, and the process matrix carries the bytes in the direction they moved: writes from
/// the issuer to the region's owner, reads from the owner to the issuer, on top of the SENDs.
fn check_one_sided(w: &str, mode: &str, run: &Run) {
    use sigmatop::correlate::{Correlation, NoSink, RunOptions};
    if !matches!(w, "write_bw" | "read_bw" | "rping" | "put_bw") {
        return;
    }
    let ctx = format!("{w}/{mode} one-sided");
    let rec = Recording::open(&[run.dir.join("rec")]).expect("open record");
    let corr = Correlation::new(&rec);
    let an = corr.run(&RunOptions::default(), &mut NoSink);
    let o = &an.one_sided;
    if mode == "aggregate" {
        // No events on disk: nothing to attribute per operation.
        assert_eq!(o.ops, 0, "{ctx}: {o:?}");
        return;
    }
    let mut by_pid: Vec<(u32, u32)> = rec
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.identity.pid, i as u32))
        .collect();
    by_pid.sort();
    let (srv, cli) = (by_pid[0].1, by_pid[1].1);
    let qp = |p: u32| qp_ops(&rec.processes[p as usize]);
    let (s, c) = (qp(srv), qp(cli));
    // (issuer, target, one-sided ops, their bytes): what the program did.
    let (issuer, target, ops, bytes) = match w {
        "write_bw" => {
            let (size, iters) = perftest_row(&run.client_out);
            (cli, srv, iters, iters * size)
        }
        "read_bw" => {
            let (size, iters) = perftest_row(&run.client_out);
            (cli, srv, iters, iters * size)
        }
        "rping" => {
            let n = rping_pings(&run.client_out);
            (srv, cli, 2 * n, 2 * n * 64)
        }
        _ => {
            let iters = ucx_perftest_iterations(&run.client_out);
            (cli, srv, iters + 1, (iters + 1) * 64)
        }
    };
    assert_eq!((o.ops, o.bytes), (ops, bytes), "{ctx}: {o:?}");
    assert_eq!(
        (o.attributed_ops, o.attributed_bytes, o.via_qp_peer_ops),
        (ops, bytes, ops),
        "{ctx}: every one-sided operation attributed through its QP's peer: {o:?}"
    );
    assert_eq!((o.no_region_ops, o.ambiguous_ops), (0, 0), "{ctx}: {o:?}");
    for e in &o.endpoints {
        assert_eq!(
            e.process, issuer,
            "{ctx}: only the issuer does one-sided ops: {e:?}"
        );
        assert_eq!(e.by_proc.len(), 1, "{ctx}: one target: {e:?}");
        assert_eq!(e.by_proc.get(&target), Some(&e.bytes), "{ctx}: {e:?}");
        assert_eq!(e.unattributed_bytes, 0, "{ctx}: {e:?}");
    }
    // The regions hit are the target's, and they took every byte.
    let hit: u64 = an
        .mrs
        .entries
        .iter()
        .filter(|m| m.ops > 0)
        .inspect(|m| assert_eq!(m.process, target, "{ctx}: region of the issuer hit: {m:?}"))
        .map(|m| m.bytes)
        .sum();
    assert_eq!(hit, bytes, "{ctx}: bytes into regions");
    // Process matrix (JSON export): one-sided bytes in the direction they moved, plus SENDs.
    let ex = sigmatop::export::json::build(
        &corr,
        &an,
        sigmatop::agg::Model::from_recording(&rec).report(),
    );
    // The JSON names the target per endpoint.
    let target_label = corr.proc_label(target);
    for e in &ex.one_sided.endpoints {
        assert_eq!(
            e.target.as_deref(),
            Some(target_label.as_str()),
            "{ctx}: {e:?}"
        );
    }
    let pm = &ex.process_matrix.bytes;
    let bytes_of = |m: &QpOps, ops: &[Op]| ops.iter().map(|&op| op_of(m, "qp ", op).1).sum::<u64>();
    // a → b: a's SENDs and writes/atomics (all into b, as checked above), and b's reads of a.
    let moved = |a: &QpOps, b: &QpOps| {
        bytes_of(
            a,
            &[
                Op::VerbsSend,
                Op::VerbsSendImm,
                Op::VerbsWrite,
                Op::VerbsWriteImm,
                Op::VerbsAtomicCas,
                Op::VerbsAtomicFa,
            ],
        ) + bytes_of(b, &[Op::VerbsRead])
    };
    let (srv_u, cli_u) = (srv as usize, cli as usize);
    let (want_sc, want_cs) = (moved(&s, &c), moved(&c, &s));
    assert_eq!(
        (pm[srv_u][cli_u], pm[cli_u][srv_u]),
        (want_sc, want_cs),
        "{ctx}: process matrix (server→client, client→server) {:?}",
        ex.process_matrix
    );
}

/// Blocking `ibv_get_cq_event` calls (rping waits on a completion channel in its CQ thread):
/// counted in every mode; in simple and full mode one event per call, with the time it waited
/// (`Op::blocks`), and drawn as one slice each on the thread's "blocking calls" track of the
/// Perfetto export, which the official schema accepts with balanced slices.
fn check_blocking(w: &str, mode: &str, run: &Run) {
    let ctx = format!("{w}/{mode} blocking");
    let rec = Recording::open(&[run.dir.join("rec")]).expect("open record");
    let mut events_total = 0u64;
    for p in &rec.processes {
        let counted: u64 = p
            .last_snapshot()
            .map(|s| {
                s.counts
                    .iter()
                    .filter(|c| c.op == Op::VerbsCqEvent as u8)
                    .map(|c| c.ops)
                    .sum()
            })
            .unwrap_or(0);
        let mut probs = Vec::new();
        let all = p.read_all_events(&mut probs);
        // Every call that blocked becomes a slice (UCX's blocking flushes too).
        let blocked = all
            .iter()
            .filter(|e| e.addr > 0 && Op::from_u8(e.op).is_some_and(Op::blocks))
            .count() as u64;
        let evs: Vec<_> = all
            .into_iter()
            .filter(|e| e.op == Op::VerbsCqEvent as u8)
            .collect();
        if w == "rping" {
            assert!(
                counted > 0,
                "{ctx}: pid {} waited on no CQ event",
                p.identity.pid
            );
        }
        if mode == "aggregate" {
            assert!(evs.is_empty(), "{ctx}: events in aggregate mode");
            continue;
        }
        assert_eq!(evs.len() as u64, counted, "{ctx}: one event per call");
        // A call that returned an event carries the time it blocked; a failed one (EAGAIN on a
        // non-blocking channel, as UCX uses it) none, and is drawn as no slice.
        assert!(
            evs.iter()
                .all(|e| (e.addr > 0) == (e.flags & flags::ERROR == 0)),
            "{ctx}: the time blocked, on the calls that returned an event"
        );
        events_total += blocked;
    }
    if mode == "aggregate" || events_total == 0 {
        return;
    }
    let out = run.dir.join("export");
    let _ = std::fs::create_dir_all(&out);
    let (j, _) = util::export(&[run.dir.join("rec")], &out);
    assert_eq!(
        j["perfetto"]["blocking_slices"], events_total,
        "{ctx}: a slice per blocking call: {}",
        j["perfetto"]
    );
    let sum = util::check_perfetto(
        &out.join("trace.pftrace"),
        j["events"].as_u64().unwrap_or(0),
    );
    assert_eq!(sum["errors"], 0, "{ctx}: {sum}");
    assert_eq!(
        sum["slices"].as_u64(),
        Some(
            j["perfetto"]["blocking_slices"].as_u64().unwrap_or(0)
                + j["perfetto"]["phase_slices"].as_u64().unwrap_or(0)
        ),
        "{ctx}: {sum}"
    );
}

fn processes_of(dir: &Path) -> Vec<ProcessRecording> {
    let rec = Recording::open(&[dir.join("rec")])
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    assert!(
        rec.problems.is_empty(),
        "record problems: {:?}",
        rec.problems
    );
    let mut p = rec.processes;
    // The server is started first: the lower pid (tracing starts at first RDMA use, not at exec,
    // so start times do not order them).
    p.sort_by_key(|p| p.identity.pid);
    p
}

#[test]
fn soft_roce_guest_workloads() {
    let (vng, kernel) = match guest_tools() {
        Ok(t) => t,
        Err(what) if std::env::var("SIGMATOP_SKIP_GUEST").as_deref() == Ok("1") => {
            assert!(
                !ci(),
                "SIGMATOP_SKIP_GUEST=1 is a development shortcut, refused under CI=true; the soft-RoCE guest cannot boot: {what} (scripts/test.sh installs virtme-ng and the kernel)"
            );
            return skip(&format!(
                "the soft-RoCE guest cannot boot: {what} (SIGMATOP_SKIP_GUEST=1)"
            ));
        }
        Err(what) => {
            panic!("the soft-RoCE guest cannot boot: {what} (set SIGMATOP_SKIP_GUEST=1 to skip)")
        }
    };
    let pre = preload();
    // SIGMATOP_GUEST_REUSE=DIR re-checks the files of an earlier boot (a developer's shortcut
    // while changing the host-side checks; the preload is not re-run).
    if let Ok(dir) = std::env::var("SIGMATOP_GUEST_REUSE") {
        assert!(
            !ci(),
            "SIGMATOP_GUEST_REUSE is a development shortcut (it re-checks the files of an old boot without booting), refused under CI=true"
        );
        eprintln!("*** re-checking the guest files under {dir} without booting ***");
        return check_all(Path::new(&dir), String::new());
    }
    let out = scratch("verbs-guest");
    let modes = format!("none {}", MODES.join(" "));
    let console = boot(
        &vng,
        &kernel,
        &out,
        "verbs_batch.sh",
        &[
            &out.display().to_string(),
            &pre.display().to_string(),
            &modes,
            &WORKLOADS.join(" "),
        ],
    );
    check_all(&out, console);
}

fn check_all(out: &Path, console: String) {
    assert!(
        read(&out.join("batch.log")).contains("BATCH_DONE"),
        "guest batch did not finish:\n{console}\n{}",
        read(&out.join("batch.log"))
    );
    let mut failures = Vec::new();
    for w in WORKLOADS {
        let base = load(out, w, "none");
        if base.client_rc != "0" {
            failures.push(format!(
                "{w}: untraced client failed ({}): {}",
                base.client_rc,
                read(&base.dir.join("client.err"))
            ));
            continue;
        }
        for mode in MODES {
            let run = load(out, w, mode);
            let r = std::panic::catch_unwind(|| {
                assert_eq!(
                    run.client_rc,
                    base.client_rc,
                    "{w}/{mode}: client exit status; stderr: {}",
                    read(&run.dir.join("client.err"))
                );
                assert_eq!(
                    run.server_rc,
                    base.server_rc,
                    "{w}/{mode}: server exit status; stderr: {}",
                    read(&run.dir.join("server.err"))
                );
                if w == "io_demo" {
                    assert!(
                        run.client_out.contains("Client exit with status 'OK'"),
                        "{w}/{mode}: {}",
                        run.client_out
                    );
                } else {
                    assert_eq!(
                        shape(&run.client_out),
                        shape(&base.client_out),
                        "{w}/{mode}: client output shape"
                    );
                    assert_eq!(
                        shape(&run.server_out),
                        shape(&base.server_out),
                        "{w}/{mode}: server output shape"
                    );
                }
                let procs = processes_of(&run.dir);
                assert_eq!(procs.len(), 2, "{w}/{mode}: server and client recorded");
                let (srv, cli) = (&procs[0], &procs[1]);
                check_matched(&format!("{w}/{mode}"), srv, cli);
                check_matched(&format!("{w}/{mode}"), cli, srv);
                check_counts(w, mode, &run, srv, cli);
                check_one_sided(w, mode, &run);
                check_blocking(w, mode, &run);
                if mode != "full" {
                    assert_eq!(
                        completions(srv) + completions(cli),
                        0,
                        "{w}/{mode}: poll_cq only in full mode"
                    );
                }
                if mode == "simple" || mode == "full" {
                    let mut probs = Vec::new();
                    let evs = cli.read_all_events(&mut probs);
                    let data = evs
                        .iter()
                        .filter(|e| {
                            e.op != Op::VerbsPollCq as u8
                                && e.op != Op::VerbsOther as u8
                                && Op::from_u8(e.op).map(|o| o.layer())
                                    == Some(sigmatop::event::Layer::Ibverbs)
                        })
                        .count() as u64;
                    let counted: u64 = cli
                        .last_snapshot()
                        .map(|s| {
                            s.counts
                                .iter()
                                .filter(|c| {
                                    c.op != Op::VerbsPollCq as u8
                                        && c.op != Op::VerbsOther as u8
                                        && Op::from_u8(c.op).map(|o| o.layer())
                                            == Some(sigmatop::event::Layer::Ibverbs)
                                })
                                .map(|c| c.ops)
                                .sum()
                        })
                        .unwrap_or(0);
                    assert_eq!(data, counted, "{w}/{mode}: one event per counted WR");
                    assert!(
                        evs.iter().all(|e| e.flags & flags::ERROR == 0
                            || e.op == Op::VerbsPollCq as u8
                            || e.op == Op::VerbsCqEvent as u8),
                        // (UCX reads its completion channel non-blocking: EAGAIN is normal.)
                        "{w}/{mode}: no failed post"
                    );
                }
            });
            if let Err(e) = r {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(msg);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "guest failures ({} of them; guest files under {}):\n{}",
        failures.len(),
        out.display(),
        failures.join("\n---\n")
    );
}
