//! The right peer, always (issue 36, item 0): a verbs QP's peer is resolved by its address
//! (port address and QPN), never by the QPN alone, and a peer that is not traced is named by its
//! address, never as a process.
//!
//! perftest's `ib_write_bw -d mlx5_0 -s 4096 -n 1000` on the software NIC (tests/testnic), its
//! server and its client on two simulated hosts (`TESTNIC_HOST`): each host numbers its QPs from
//! the same start, so both QPs have the same number, as on a cluster. The client runs under
//! `sigmatop run --record DIR --json FILE` (the record and the live summary of one run); the
//! server is untraced, or traced too. On a RoCE port (GIDs `::ffff:10.0.N.1`, `-x 0`) and on an
//! InfiniBand port without a GRH (`TESTNIC_PORT=ib`, no `-x`: LID = host + 1).
//!
//! The figures: the client posts exactly -n RDMA writes of -s bytes on its one QP (perftest 4.5's
//! write_bw has no warm-up: tests/testnic_verbs.rs checks the same against the NIC's log), the
//! server posts nothing; here the NIC's own log (TESTNIC_LOG) must say so too. So the client's
//! 4,096,000 bytes go to the server: with the server untraced, to the `untraced` column of every
//! matrix, its peer named `10.0.21.1 qp 0x100` (`lid 22 qp 0x100`) in the export's JSON, the text
//! report, the live summary and the dashboard's QP row; with both traced, to the server's pid.
//! Before the fix the client's QP, numbered like the server's, was taken for its own peer: the
//! bytes sat on the matrix's diagonal and the JSON named the client itself. Live too: `sigmatop
//! attach --json --once` while a timed client (`-D`) runs names the same address.
mod common;
#[path = "common/testnic.rs"]
mod testnic;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::Bounded;
use serde_json::{Value, json};
use sigmatop::agg::Model;
use sigmatop::cli::view_model::{ClockStyle, ViewOptions, build_view};
use sigmatop::trace::reader::Recording;
use sigmatop_tui::Window;
use testnic::{LIMIT, NicWqe, build_nic, hex, nic_log, with_testnic};

const N: u64 = 1000;
const SIZE: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fabric {
    Roce,
    Ib,
}

struct Pair {
    ctx: String,
    dir: PathBuf,
    /// The client's record directory, and the server's when it is traced.
    records: Vec<PathBuf>,
    /// `sigmatop run --json`: the live summary of the client's run.
    live: Value,
    server_pid: u32,
    nic: Vec<NicWqe>,
    /// The QPNs perftest printed on the client: (its own, the server's).
    qpns: (u32, u32),
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

/// ib_write_bw's server on simulated host `hosts[0]` (traced into `DIR/rec-server` when
/// `server_traced`) and its client on host `hosts[1]` under `sigmatop run --record DIR/rec
/// --json` (`run` wants a record directory of its own).
fn write_bw(fabric: Fabric, hosts: [u8; 2], server_traced: bool) -> Pair {
    build_nic();
    common::require("ib_write_bw");
    let ctx = format!("ib_write_bw {fabric:?} hosts {hosts:?} server traced {server_traced}");
    let dir = common::scratch("peer-address");
    let log = dir.join("nic-log");
    std::fs::create_dir_all(&log).expect("log dir");
    let record = dir.join("rec");
    let server_record = dir.join("rec-server");
    let sock = dir.join("sock");
    let live_json = dir.join("live.json");
    // Fresh devices on both hosts: both number their first QP alike.
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for h in hosts {
        let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{h}"));
    }
    let mut args: Vec<String> = [
        "-d",
        "mlx5_0",
        "-s",
        &SIZE.to_string(),
        "-n",
        &N.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if fabric == Fabric::Roce {
        // RoCE needs a GRH: GID index 0. On InfiniBand, no -x: the path is LID-routed.
        args.extend(["-x".into(), "0".into()]);
    }
    let env = |h: u8| {
        let mut e = vec![
            "env".to_string(),
            format!("TESTNIC_LOG={}", log.display()),
            format!("TESTNIC_HOST={h}"),
            format!("SIGMATOP_SOCKET_DIR={}", sock.display()),
        ];
        if fabric == Fabric::Ib {
            e.push("TESTNIC_PORT=ib".into());
        }
        e
    };
    let (s, port) = common::start_server(
        |port| {
            let mut a = env(hosts[0]);
            if server_traced {
                a.push(format!("LD_PRELOAD={}", common::preload().display()));
                a.push(format!("SIGMATOP_RECORD={}", server_record.display()));
            }
            a.push("ib_write_bw".into());
            a.extend(args.iter().cloned());
            a.extend(["-p".into(), port.to_string()]);
            with_testnic(&a)
        },
        LIMIT,
    );
    let server_pid = s.id();
    let mut a = env(hosts[1]);
    a.push(common::sigmatop_bin().display().to_string());
    a.extend([
        "run".into(),
        "--record".into(),
        record.display().to_string(),
    ]);
    a.extend([
        "--json".into(),
        live_json.display().to_string(),
        "--".into(),
    ]);
    a.push("ib_write_bw".into());
    a.extend(args.iter().cloned());
    a.extend(["-p".into(), port.to_string(), "127.0.0.1".into()]);
    let mut client = with_testnic(&a);
    client.stdin(std::process::Stdio::null());
    let c = common::spawn(&mut client);
    let client_out = common::wait_timeout(c, LIMIT);
    let check = |who: &str, o: &Output| {
        assert!(
            o.status.success(),
            "{ctx}: {who} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
            o.status,
            common::stdout_of(o),
            common::stderr_of(o)
        );
    };
    // A failed client leaves the server waiting: the server is ended with the test.
    check("client", &client_out);
    check("server", &common::wait_timeout(s, LIMIT));
    let cout = common::stdout_of(&client_out);
    assert_eq!(common::perftest_row(&cout), (SIZE, N), "{ctx}: result row");
    let qpns = (
        perftest_qpn(&cout, "local address"),
        perftest_qpn(&cout, "remote address"),
    );
    let live = serde_json::from_slice(
        &std::fs::read(&live_json).unwrap_or_else(|e| panic!("{ctx}: live summary: {e}")),
    )
    .expect("the live summary is JSON");
    let mut records = vec![record];
    if server_traced {
        records.push(server_record);
    }
    Pair {
        ctx,
        dir,
        records,
        live,
        server_pid,
        nic: nic_log(&log),
        qpns,
    }
}

/// The NIC executed exactly the client's -n writes of -s bytes, on its QP, and nothing of the
/// server's; returns the client's pid as the NIC logged it.
fn check_nic(p: &Pair) -> u32 {
    let (cq, _) = p.qpns;
    let client: Vec<&NicWqe> = p.nic.iter().filter(|w| w.pid != p.server_pid).collect();
    assert_eq!(
        p.nic.len(),
        client.len(),
        "{}: the server posted WQEs",
        p.ctx
    );
    let pid = client.first().map(|w| w.pid).expect("client WQEs");
    assert!(
        client.iter().all(|w| w.pid == pid
            && w.qpn == cq
            && w.op == "RDMA_WRITE"
            && w.len == SIZE
            && w.status == 0),
        "{}: the NIC log has other WQEs than the client's writes on 0x{cq:x}",
        p.ctx
    );
    assert_eq!(client.len() as u64, N, "{}: writes in the NIC log", p.ctx);
    pid
}

/// `sigmatop export DIRS --json -`, which must succeed.
fn export_json(p: &Pair) -> Value {
    let o = Command::new(common::sigmatop_bin())
        .arg("export")
        .args(&p.records)
        .args(["--json", "-"])
        .output_bounded()
        .expect("sigmatop export");
    assert!(
        o.status.success(),
        "{}: export: {}",
        p.ctx,
        common::stderr_of(&o)
    );
    serde_json::from_slice(&o.stdout).expect("export JSON")
}

/// The endpoint `qp 0x..` of process `pid` in a report's JSON (`processes[].endpoints[]`).
fn qp_endpoint<'a>(ctx: &str, j: &'a Value, pid: u32, qpn: u32) -> &'a Value {
    let label = format!("qp 0x{qpn:x}");
    let p = j["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid as u64))
        .unwrap_or_else(|| panic!("{ctx}: pid {pid} not in {j}"));
    p["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|e| e["label"].as_str() == Some(label.as_str()))
        .unwrap_or_else(|| panic!("{ctx}: no endpoint '{label}' in {p}"))
}

/// What the peer's address reads as: `10.0.H.1` on RoCE, `lid H+1` on InfiniBand.
fn address(fabric: Fabric, host: u8, qpn: u32) -> String {
    match fabric {
        Fabric::Roce => format!("10.0.{host}.1 qp 0x{qpn:x}"),
        Fabric::Ib => format!("lid {} qp 0x{qpn:x}", host + 1),
    }
}

fn untraced_server(fabric: Fabric, hosts: [u8; 2]) {
    let p = write_bw(fabric, hosts, false);
    let ctx = &p.ctx;
    let (cq, sq) = p.qpns;
    assert_eq!(
        cq, sq,
        "{ctx}: the two hosts number their QPs alike (what this test is about)"
    );
    let client = check_nic(&p);
    let sent = N * SIZE;
    let want_peer =
        json!({"rank": null, "traced": false, "address": address(fabric, hosts[0], sq)});

    // The export's JSON: the peer by its address, the bytes to `untraced`, none on the diagonal.
    let j = export_json(&p);
    assert_eq!(
        j["processes"].as_array().map(Vec::len),
        Some(1),
        "{ctx}: only the client is traced"
    );
    assert_eq!(
        qp_endpoint(ctx, &j, client, cq)["peer"],
        want_peer,
        "{ctx}: export's peer"
    );
    let pm = &j["process_matrix"];
    assert_eq!(pm["labels"][1], "untraced", "{ctx}: {pm}");
    assert_eq!(
        pm["bytes"],
        json!([[0, sent], [0, 0]]),
        "{ctx}: process matrix"
    );
    let host = j["nodes"][0]["host"].as_str().expect("a node").to_string();
    assert_eq!(
        j["node_matrix"]["labels"],
        json!([host, "untraced"]),
        "{ctx}"
    );
    assert_eq!(
        j["node_matrix"]["bytes"],
        json!([[0, sent], [0, 0]]),
        "{ctx}"
    );
    assert_eq!(j["top_talkers"][0]["to"], "untraced", "{ctx}");
    assert_eq!(j["top_talkers"][0]["bytes"], sent, "{ctx}");

    // The live summary of the same run (`run --json`): the same peer, the same matrix.
    assert_eq!(
        qp_endpoint(ctx, &p.live, client, cq)["peer"],
        want_peer,
        "{ctx}: live summary's peer"
    );
    assert_eq!(
        p.live["node_matrix"]["bytes"],
        json!([[0, sent], [0, 0]]),
        "{ctx}: live node matrix"
    );

    // `sigmatop report`: the QP's line names the address.
    let o = Command::new(common::sigmatop_bin())
        .arg("report")
        .args(&p.records)
        .output_bounded()
        .expect("sigmatop report");
    assert!(o.status.success(), "{ctx}: {}", common::stderr_of(&o));
    let text = common::stdout_of(&o);
    let line = text
        .lines()
        .find(|l| l.contains(&format!("qp 0x{cq:x} ")))
        .unwrap_or_else(|| panic!("{ctx}: no QP line in the report:\n{text}"));
    assert!(
        line.contains(&format!("→ {}", address(fabric, hosts[0], sq)))
            && !line.contains(&format!("pid {client}")),
        "{ctx}: the report's QP line: {line}"
    );

    // The dashboard over the whole run: the QP row's peer, the node matrix.
    let rec = Recording::open(&p.records).expect("record");
    let vm = build_view(
        &Model::from_recording(&rec),
        &ViewOptions {
            window: Window::All,
            clock: ClockStyle::SinceStart,
            ..Default::default()
        },
    );
    let row = vm
        .endpoints
        .iter()
        .find(|e| e.pid == client && e.local_id == format!("0x{cq:x}"))
        .unwrap_or_else(|| panic!("{ctx}: no QP row 0x{cq:x}"));
    assert_eq!(
        row.peer.label(),
        address(fabric, hosts[0], sq),
        "{ctx}: QPs view"
    );
    assert_eq!(vm.matrices.node.labels, vec![host, "untraced".into()]);
    assert_eq!(vm.matrices.node.bytes[0], vec![0.0, sent as f64], "{ctx}");
    let _ = std::fs::remove_dir_all(&p.dir);
}

fn both_traced(fabric: Fabric, hosts: [u8; 2]) {
    let p = write_bw(fabric, hosts, true);
    let ctx = &p.ctx;
    let (cq, sq) = p.qpns;
    assert_eq!(cq, sq, "{ctx}: the two hosts number their QPs alike");
    let client = check_nic(&p);
    let sent = N * SIZE;
    let j = export_json(&p);
    for (pid, qpn, peer, peer_host) in [
        (client, cq, p.server_pid, hosts[0]),
        (p.server_pid, sq, client, hosts[1]),
    ] {
        let e = qp_endpoint(ctx, &j, pid, qpn);
        assert_eq!(
            e["peer"]["pid"].as_u64(),
            Some(peer as u64),
            "{ctx}: peer of pid {pid}'s QP"
        );
        assert_eq!(e["peer"]["traced"], true, "{ctx}");
        assert_eq!(
            e["peer"]["address"],
            address(fabric, peer_host, qpn),
            "{ctx}: peer address of pid {pid}'s QP"
        );
    }
    let labels: Vec<String> = j["process_matrix"]["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| l.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(labels.len(), 2, "{ctx}: no untraced column: {labels:?}");
    let at = |pid: u32| {
        labels
            .iter()
            .position(|l| l.contains(&format!(" {pid}@")))
            .unwrap_or_else(|| panic!("{ctx}: pid {pid} not in {labels:?}"))
    };
    let (ci, si) = (at(client), at(p.server_pid));
    let m = &j["process_matrix"]["bytes"];
    assert_eq!(m[ci][si], sent, "{ctx}: client -> server");
    assert_eq!(
        (m[ci][ci].as_u64(), m[si][si].as_u64(), m[si][ci].as_u64()),
        (Some(0), Some(0), Some(0)),
        "{ctx}: {m}"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// The case: RoCE, the server untraced on host 21, the client on host 22.
#[test]
fn untraced_server_on_roce_is_named_by_its_gid() {
    untraced_server(Fabric::Roce, [21, 22]);
}

/// InfiniBand without a GRH: the server untraced (LID 24), the client on LID 25.
#[test]
fn untraced_server_on_infiniband_is_named_by_its_lid() {
    untraced_server(Fabric::Ib, [23, 24]);
}

/// Both traced, QPNs equal at both ends: each QP's peer is the other process.
#[test]
fn both_traced_across_hosts_with_equal_qpns() {
    both_traced(Fabric::Roce, [25, 26]);
    both_traced(Fabric::Ib, [27, 28]);
}

/// Live: a timed client (`ib_write_bw -D 5`) traced, its server untraced on another host with
/// the same QPN; `sigmatop attach --json --once` during the run names the server by its address,
/// as the record does, and counts nothing on the diagonal.
#[test]
fn attach_once_names_the_untraced_peer_live() {
    build_nic();
    common::require("ib_write_bw");
    let hosts = [29u8, 30];
    let dir = common::scratch("peer-address-live");
    let sock = dir.join("sock");
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for h in hosts {
        let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{h}"));
    }
    let args = [
        "ib_write_bw",
        "-d",
        "mlx5_0",
        "-x",
        "0",
        "-s",
        "4096",
        "-D",
        "5",
    ];
    let (s, port) = common::start_server(
        |port| {
            let mut a: Vec<String> = vec!["env".into(), format!("TESTNIC_HOST={}", hosts[0])];
            a.extend(args.iter().map(|s| s.to_string()));
            a.extend(["-p".into(), port.to_string()]);
            with_testnic(&a)
        },
        LIMIT,
    );
    let mut a: Vec<String> = vec![
        "env".into(),
        format!("TESTNIC_HOST={}", hosts[1]),
        format!("LD_PRELOAD={}", common::preload().display()),
        format!("SIGMATOP_SOCKET_DIR={}", sock.display()),
    ];
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["-p".into(), port.to_string(), "127.0.0.1".into()]);
    let c = common::spawn(&mut with_testnic(&a));
    let cpid = c.id();
    // Wait for the condition: the client's QP is connected and has moved bytes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (ep, matrix) = loop {
        let o = Command::new(common::sigmatop_bin())
            .args([
                "attach",
                "--json",
                "--once",
                "--interval-ms",
                "300",
                "--socket-dir",
            ])
            .arg(&sock)
            .output_bounded()
            .expect("sigmatop attach");
        let j: Option<Value> = serde_json::from_slice(&o.stdout).ok();
        let found = j.as_ref().and_then(|j| {
            let p = j["processes"]
                .as_array()?
                .iter()
                .find(|p| p["pid"].as_u64() == Some(cpid as u64))?;
            let ep = p["endpoints"]
                .as_array()?
                .iter()
                .find(|e| e["kind"] == "qp" && e["tx_bytes"].as_u64() > Some(0))?;
            Some((ep.clone(), j["node_matrix"].clone()))
        });
        if let Some(f) = found {
            break f;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no QP of pid {cpid} with bytes in `attach --json --once` within 30 s; last:\n{}\n{}",
            common::stdout_of(&o),
            common::stderr_of(&o)
        );
    };
    let out = common::wait_timeout(c, LIMIT);
    assert!(out.status.success(), "client: {}", common::stderr_of(&out));
    assert!(
        common::wait_timeout(s, LIMIT).status.success(),
        "the server failed"
    );
    let cout = common::stdout_of(&out);
    let (cq, sq) = (
        perftest_qpn(&cout, "local address"),
        perftest_qpn(&cout, "remote address"),
    );
    assert_eq!(cq, sq, "the two hosts number their QPs alike");
    assert_eq!(ep["label"], format!("qp 0x{cq:x}"));
    assert_eq!(
        ep["peer"],
        json!({"rank": null, "traced": false, "address": address(Fabric::Roce, hosts[0], sq)}),
        "attach's peer"
    );
    assert_eq!(matrix["labels"][1], "untraced", "{matrix}");
    assert_eq!(
        matrix["bytes"][0][0], 0,
        "nothing on the diagonal: {matrix}"
    );
    assert!(
        matrix["bytes"][0][1].as_u64() > Some(0),
        "the bytes go to the untraced peer: {matrix}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
