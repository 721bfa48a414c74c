//! The devx / IBGDA host path and the NIC's error completions, on the CPU (no GPU):
//! - `ibgda_host` (tests/testnic/ibgda_host.c): two processes run NVSHMEM 3.4.5's IBGDA host
//!   sequence against the software NIC and post NVSHMEM's device WQE shapes from the CPU. The
//!   program checks every byte itself; here the NIC's own log must hold exactly the WQEs it posted
//!   (index, opcode, opmod, length, remote address and all 32 bits of the rkey), and under the
//!   preload (every mode) sigmatop's mlx5 layer must define each devx QP with its QPN and match
//!   the two QPs across the processes by GID + QPN (RTR peers, own-address hashes, JSON peers).
//!   Each process also makes NVSHMEM's DC objects (a DC target through mlx5dv_create_qp, a devx
//!   DCI) and writes and fetch-adds through the peer's target: the NIC log has those WQEs too.
//!   The CPU rings its UAR directly, so no doorbell reaches sigmatop's GPU doorbell path here:
//!   WQE recovery against this log is the GPU run's job (docs/TESTNIC.md).
//! - `verbs_faults` (tests/testnic/verbs_faults.c): error completions with the syndromes mlx5
//!   hardware gives (bad rkey, bounds, missing right, too-long send, RNR, bad lkey, malformed WQE,
//!   peer death within 5 s); the program sees the same statuses with and without sigmatop, the
//!   NIC logs the refused WQEs with their syndrome, and the records stay readable.
mod common;
#[path = "common/testnic.rs"]
mod testnic;

use std::collections::BTreeMap;
use std::process::{Command, Output};

use common::Bounded;
use common::Trace;
use sigmatop::event::EndpointKind;
use sigmatop::trace::reader::ProcessRecording;
use testnic::{GID, MODES, NicWqe, build_nic, hex, nic_log, nic_program, run_one};

/// One "ibgda_host role=... " summary line.
#[derive(Debug)]
struct Role {
    role: u32,
    pid: u32,
    qpn: u32,
    peer_qpn: u32,
    peer_rkey: u32,
    peer_addr: u64,
    dci_qpn: u32,
    /// Where the DCI's four WQEs start (the AV's size, 48 or 16 bytes, sets their WQEBBs).
    dci_idx: [u32; 4],
    /// The loopback QPs (each connected to itself): the verbs one, the bytes its writes and its
    /// read moved, its buffer and rkey; the devx one.
    loop_qpn: u32,
    loop_bytes: u64,
    loop_addr: u64,
    loop_rkey: u32,
    dx_loop_qpn: u32,
}

fn roles(out: &Output) -> Vec<Role> {
    let text = common::stdout_of(out);
    let mut v: Vec<Role> = text
        .lines()
        .filter(|l| l.starts_with("ibgda_host role="))
        .map(|l| {
            assert!(l.ends_with(" ok"), "not ok: {l}");
            Role {
                role: testnic::field(l, "role").parse().expect("role"),
                pid: testnic::field(l, "pid").parse().expect("pid"),
                qpn: hex(testnic::field(l, "qpn")) as u32,
                peer_qpn: hex(testnic::field(l, "peer_qpn")) as u32,
                peer_rkey: hex(testnic::field(l, "peer_rkey")) as u32,
                peer_addr: hex(testnic::field(l, "peer_addr")),
                dci_qpn: hex(testnic::field(l, "dci_qpn")) as u32,
                dci_idx: {
                    let v: Vec<u32> = testnic::field(l, "dci_idx")
                        .split(',')
                        .map(|x| x.parse().expect("dci_idx"))
                        .collect();
                    v.try_into().expect("four dci_idx")
                },
                loop_qpn: hex(testnic::field(l, "loop_qpn")) as u32,
                loop_bytes: testnic::field(l, "loop_bytes").parse().expect("loop_bytes"),
                loop_addr: hex(testnic::field(l, "loop_addr")),
                loop_rkey: hex(testnic::field(l, "loop_rkey")) as u32,
                dx_loop_qpn: hex(testnic::field(l, "dx_loop_qpn")) as u32,
            }
        })
        .collect();
    v.sort_by_key(|r| r.role);
    assert_eq!(v.len(), 2, "two summary lines in:\n{text}");
    assert_eq!(v[0].qpn, v[1].peer_qpn, "QPNs exchanged");
    assert_eq!(v[1].qpn, v[0].peer_qpn, "QPNs exchanged");
    v
}

/// A WQE the program posted: (idx, opcode, opmod, len, offset in the peer's buffer, rkey xor,
/// signaled).
type Wqe = (u32, u32, u32, u64, u64, u32, bool);

/// What ibgda_host.c posts on its RC QP; process 0 adds the wrong-rkey write.
fn expected_wqes(role: u32) -> Vec<Wqe> {
    let mut v = vec![
        (0, 0x08, 0x00, 64, 0, 0, false),
        (1, 0x08, 0x00, 8, 64, 0, false),
        (2, 0x10, 0x00, 128, 256, 0, false),
        (3, 0x12, 0x00, 8, 512, 0, false),
        (4, 0x15, 0x08, 4, 520, 0, false),
        (5, 0x14, 0x09, 8, 528, 0, false),
        (7, 0x14, 0x08, 4, 536, 0, false),
        (8, 0x00, 0x00, 0, 0, 0, true),
        // The NOP that waited for its own doorbell (the strict-doorbell step).
        (9, 0x00, 0x00, 0, 0, 0, true),
    ];
    if role == 0 {
        v.push((10, 0x08, 0x00, 8, 0, 0x5a5a00, true));
    }
    v
}

/// The DCI's WQEs through the peer's DC target, starting at `idx` (on RoCE the 48-byte AV makes
/// a write 2 WQEBBs: 0, 2, 4, 5; on InfiniBand the 16-byte one 1: 0, 1, 3, 4): a write and a
/// fetch-add, then the NOP whose doorbell went to the RC QP's register and the write rung on its
/// own register.
fn dci_wqes(idx: [u32; 4]) -> [Wqe; 4] {
    [
        (idx[0], 0x08, 0x00, 32, 1536, 0, false),
        (idx[1], 0x12, 0x00, 8, 544, 0, true),
        (idx[2], 0x00, 0x00, 0, 0, 0, false),
        (idx[3], 0x08, 0x00, 32, 1600, 0, true),
    ]
}

/// The NIC's exit line about doorbells it did not act on, per pid: the "foreign=" count.
fn foreign_doorbells(out: &Output) -> BTreeMap<u32, u64> {
    common::stderr_of(out)
        .lines()
        .filter_map(|l| l.strip_prefix("testnic: pid "))
        .filter(|l| l.contains(" doorbells not acted on: "))
        .map(|l| {
            let pid = l.split(' ').next().unwrap_or("").parse().expect("pid");
            (pid, testnic::field(l, "foreign").parse().expect("foreign="))
        })
        .collect()
}

fn check_wqes(ctx: &str, r: &Role, qpn: u32, nic: &[NicWqe], want: &[Wqe]) -> usize {
    let mine: Vec<&NicWqe> = nic
        .iter()
        .filter(|w| w.pid == r.pid && w.qpn == qpn)
        .collect();
    assert_eq!(
        mine.len(),
        want.len(),
        "{ctx}: WQEs of QP 0x{qpn:x}: {mine:?}"
    );
    for (w, e) in mine.iter().zip(want) {
        let (idx, opcode, opmod, len, off, rkey_xor, signaled) = *e;
        let (raddr, rkey) = if opcode == 0 {
            (0, 0)
        } else {
            (r.peer_addr + off, r.peer_rkey ^ rkey_xor)
        };
        assert_eq!(
            (
                w.qpn, w.idx, w.opcode, w.opmod, w.len, w.raddr, w.rkey, w.signaled, w.status
            ),
            (qpn, idx, opcode, opmod, len, raddr, rkey, signaled, 0),
            "{ctx}: NIC log of pid {} (qpn, idx, opcode, opmod, len, raddr, rkey, signaled, status)",
            r.pid
        );
    }
    mine.len()
}

/// A WQE line as compared: (qpn, idx, op, len, raddr, rkey, signaled, status, peer qpn, peer pid).
type LoggedWqe = (u32, u32, String, u64, u64, u32, bool, u32, u32, u32);

/// The loopback QPs' WQEs (ibgda_host.c `loopback`): the verbs QP's three writes (1000, 1500,
/// 2000 + 8 × role bytes) and its 256-byte read, all at its buffer + 4096, signaled; the devx QP's
/// signaled 64-byte write at + 12288. Each names its own QP and process as its peer.
fn check_loopback_log(ctx: &str, r: &Role, nic: &[NicWqe]) -> usize {
    let lens = [1000, 1500, 2000 + 8 * u64::from(r.role), 256];
    let want: Vec<LoggedWqe> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let op = if i == 3 { "RDMA_READ" } else { "RDMA_WRITE" };
            let q = r.loop_qpn;
            let a = r.loop_addr + 4096;
            (
                q,
                i as u32,
                op.into(),
                len,
                a,
                r.loop_rkey,
                true,
                0,
                q,
                r.pid,
            )
        })
        .chain(std::iter::once((
            r.dx_loop_qpn,
            0,
            "RDMA_WRITE".into(),
            64,
            r.loop_addr + 12288,
            r.loop_rkey,
            true,
            0,
            r.dx_loop_qpn,
            r.pid,
        )))
        .collect();
    let got: Vec<_> = nic
        .iter()
        .filter(|w| w.pid == r.pid && (w.qpn == r.loop_qpn || w.qpn == r.dx_loop_qpn))
        .map(|w| {
            let x = w.clone();
            (
                x.qpn, x.idx, x.op, x.len, x.raddr, x.rkey, x.signaled, x.status, x.rqpn, x.rpid,
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "{ctx}: NIC log of pid {}'s loopback QPs (qpn, idx, op, len, raddr, rkey, signaled, \
         status, peer qpn, peer pid)",
        r.pid
    );
    got.len()
}

fn check_nic_log(ctx: &str, nic: &[NicWqe], r: &Role) {
    let n = check_wqes(ctx, r, r.qpn, nic, &expected_wqes(r.role))
        + check_wqes(ctx, r, r.dci_qpn, nic, &dci_wqes(r.dci_idx))
        + check_loopback_log(ctx, r, nic);
    assert_eq!(
        nic.iter().filter(|w| w.pid == r.pid).count(),
        n,
        "{ctx}: pid {} logged WQEs of other QPs",
        r.pid
    );
}

fn devx_peer(ctx: &str, p: &ProcessRecording, qpn: u32) -> sigmatop::event::Peer {
    let ep = p
        .endpoints
        .iter()
        .find(|e| e.kind == EndpointKind::DevxQp && e.qpn == Some(qpn))
        .unwrap_or_else(|| panic!("{ctx}: pid {} has no devx QP 0x{qpn:x}", p.identity.pid));
    assert_eq!(ep.transport, "RC", "{ctx}: transport of 0x{qpn:x}");
    p.updates
        .iter()
        .rfind(|u| u.id == ep.id && u.state == "RTR")
        .and_then(|u| u.peer.clone())
        .unwrap_or_else(|| panic!("{ctx}: devx QP 0x{qpn:x} has no RTR peer"))
}

/// The GID of simulated host `h` (TESTNIC_HOST; 0: the default port GID) on RoCE, or on an
/// InfiniBand port (fe80::2c9:300:0:LID, LID = host + 1).
fn host_gid(h: u8, ib: bool) -> [u8; 16] {
    if ib {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[8..12].copy_from_slice(&[0x02, 0xc9, 0x03, 0x00]);
        g[15] = h + 1;
        return g;
    }
    if h == 0 {
        return GID;
    }
    let mut g = GID;
    g[12..16].copy_from_slice(&[10, 0, h, 1]);
    g
}

fn check_record(ctx: &str, t: &Trace, rs: &[Role], gids: [[u8; 16]; 2]) {
    let procs: BTreeMap<u32, ProcessRecording> = common::processes(t)
        .into_iter()
        .map(|p| (p.identity.pid, p))
        .collect();
    for (i, r) in rs.iter().enumerate() {
        let other = &rs[1 - i];
        let p = procs
            .get(&r.pid)
            .unwrap_or_else(|| panic!("{ctx}: pid {} not recorded", r.pid));
        let o = procs.get(&other.pid).expect("other recorded");
        let dci = p
            .endpoints
            .iter()
            .find(|e| e.kind == EndpointKind::DevxQp && e.qpn == Some(r.dci_qpn))
            .unwrap_or_else(|| panic!("{ctx}: pid {} has no devx DCI 0x{:x}", r.pid, r.dci_qpn));
        assert_eq!(dci.transport, "DCI", "{ctx}: transport of the DCI");
        let peer = devx_peer(ctx, p, r.qpn);
        assert_eq!(
            peer.qpn,
            Some(other.qpn),
            "{ctx}: peer QPN of 0x{:x}",
            r.qpn
        );
        assert_eq!(
            peer.gid,
            Some(gids[1 - i]),
            "{ctx}: peer GID of 0x{:x}",
            r.qpn
        );
        assert_eq!(
            devx_peer(ctx, o, other.qpn).qpn,
            Some(r.qpn),
            "{ctx}: peers not mutual"
        );
        assert!(
            o.identity.own_addr_hashes.contains(&peer.addr_hash),
            "{ctx}: the peer hash of 0x{:x} is no own address of pid {}",
            r.qpn,
            other.pid
        );
    }
    // The exported JSON resolves each devx QP's peer to the other process.
    let out = t.record.parent().expect("dir").join("agg.json");
    let o = Command::new(common::sigmatop_bin())
        .arg("export")
        .arg(&t.record)
        .arg("--json")
        .arg(&out)
        .output_bounded()
        .expect("sigmatop export");
    assert!(
        o.status.success(),
        "{ctx}: export: {}",
        common::stderr_of(&o)
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("json")).expect("JSON");
    for (i, r) in rs.iter().enumerate() {
        let p = j["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .find(|p| p["pid"].as_u64() == Some(r.pid as u64))
            .unwrap_or_else(|| panic!("{ctx}: pid {} not in JSON", r.pid));
        let label = format!("devx qp {:#x}", r.qpn);
        let ep = p["endpoints"]
            .as_array()
            .expect("endpoints")
            .iter()
            .find(|e| e["label"].as_str() == Some(label.as_str()))
            .unwrap_or_else(|| panic!("{ctx}: no '{label}' in {p}"));
        assert_eq!(
            ep["peer"]["pid"].as_u64(),
            Some(rs[1 - i].pid as u64),
            "{ctx}: JSON peer of {label}"
        );
        let address = format!(
            "{} qp {:#x}",
            sigmatop::event::port_addr_text(&gids[1 - i]),
            rs[1 - i].qpn
        );
        assert_eq!(
            ep["peer"]["address"].as_str(),
            Some(address.as_str()),
            "{ctx}: JSON peer address of {label}"
        );
        // The loopback QPs: each its own process's, at its own address (issue 40 item 6).
        for label in [
            format!("qp {:#x}", r.loop_qpn),
            format!("devx qp {:#x}", r.dx_loop_qpn),
        ] {
            let ep = p["endpoints"]
                .as_array()
                .expect("endpoints")
                .iter()
                .find(|e| e["label"].as_str() == Some(label.as_str()))
                .unwrap_or_else(|| panic!("{ctx}: no '{label}' in {p}"));
            assert_eq!(
                ep["peer"]["pid"].as_u64(),
                Some(r.pid as u64),
                "{ctx}: the loopback {label} of pid {} is its own peer: {}",
                r.pid,
                ep["peer"]
            );
        }
    }
    // The process matrix: each process's loopback bytes on itself, exactly (the verbs QP's
    // writes and read; on the CPU nothing else of ibgda_host is counted: its devx QPs ring
    // their UARs directly), nothing between the two and no `untraced` row or column.
    let pm = &j["process_matrix"];
    let labels: Vec<&str> = pm["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| l.as_str().expect("label"))
        .collect();
    assert_eq!(labels.len(), 2, "{ctx}: process matrix labels {labels:?}");
    let at = |pid: u32| {
        labels
            .iter()
            .position(|l| l.contains(&format!(" {pid}@")))
            .unwrap_or_else(|| panic!("{ctx}: pid {pid} not in {labels:?}"))
    };
    let mut want = vec![vec![0u64; 2]; 2];
    for r in rs {
        want[at(r.pid)][at(r.pid)] = r.loop_bytes;
    }
    let got: Vec<Vec<u64>> = pm["bytes"]
        .as_array()
        .expect("bytes")
        .iter()
        .map(|row| {
            row.as_array()
                .expect("row")
                .iter()
                .map(|b| b.as_f64().expect("bytes") as u64)
                .collect()
        })
        .collect();
    assert_eq!(got, want, "{ctx}: process matrix {labels:?}");
}

/// ibgda_host on one host with NVSHMEM's INIT2RTR (grh bit 0), then its two processes on two
/// simulated hosts (TESTNIC_HOST 1 and 2: the same QPNs on both, each QP's peer has its own
/// QPN), with the grh bit 0 and 1; untraced and in every mode.
#[test]
fn ibgda_host_sequence_on_the_nic_and_under_sigmatop() {
    build_nic();
    let prog = nic_program("ibgda_host").display().to_string();
    let configs: [(&str, [u8; 2], &str, &str); 5] = [
        (
            "one host, grh 0",
            [0, 0],
            "IBGDA_GRH=0",
            "TESTNIC_PORT=roce",
        ),
        (
            "hosts 1 and 2, grh 0",
            [1, 2],
            "IBGDA_GRH=0",
            "TESTNIC_PORT=roce",
        ),
        (
            "hosts 1 and 2, grh 1",
            [1, 2],
            "IBGDA_GRH=1",
            "TESTNIC_PORT=roce",
        ),
        // InfiniBand: RC by LID (grh 0) or by GID (grh 1), DC by the 16-byte AV.
        (
            "IB, hosts 1 and 2, grh 0",
            [1, 2],
            "IBGDA_GRH=0",
            "TESTNIC_PORT=ib",
        ),
        (
            "IB, hosts 1 and 2, grh 1",
            [1, 2],
            "IBGDA_GRH=1",
            "TESTNIC_PORT=ib",
        ),
    ];
    for ((what, hosts, grh, port), mode) in configs
        .iter()
        .flat_map(|c| MODES.iter().map(move |m| (c, *m)))
    {
        let dir = common::scratch("testnic-ibgda");
        let log = dir.join("nic-log");
        std::fs::create_dir_all(&log).expect("log dir");
        let trace = mode.map(|m| Trace::new(m, &dir));
        let split = format!("IBGDA_HOSTS={},{}", hosts[0], hosts[1]);
        // Fresh devices for hosts 1 and 2 (no other test uses them): both number from 0x100,
        // so the two ends get the same QPNs whatever ran before.
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        for h in hosts.iter().filter(|h| **h != 0) {
            let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{h}"));
        }
        let out = run_one(
            std::path::Path::new("env"),
            &[grh, port, &split, &prog],
            &log,
            trace.as_ref(),
        );
        let ctx = format!("ibgda_host {what}, mode {mode:?}");
        assert!(
            out.status.success(),
            "{ctx} failed:\n{}\n{}",
            common::stdout_of(&out),
            common::stderr_of(&out)
        );
        let rs = roles(&out);
        if hosts[0] != hosts[1] {
            assert_eq!(rs[0].qpn, rs[1].qpn, "{ctx}: QPNs repeat across hosts");
        }
        let nic = nic_log(&log);
        for r in &rs {
            check_nic_log(&ctx, &nic, r);
        }
        // Each process wrote one doorbell naming a QP not bound to the register: counted.
        let foreign = foreign_doorbells(&out);
        for r in &rs {
            assert_eq!(
                foreign.get(&r.pid),
                Some(&1),
                "{ctx}: foreign doorbells of pid {}:\n{}",
                r.pid,
                common::stderr_of(&out)
            );
        }
        if let Some(t) = &trace {
            let ib = *port == "TESTNIC_PORT=ib";
            // The address each path routes by: on InfiniBand without a GRH the LID (host + 1),
            // which the preload records in the peer's GID field, as verbs does.
            let routed = |h: u8| {
                if ib && *grh == "IBGDA_GRH=0" {
                    sigmatop::event::lid_as_gid(u16::from(h) + 1)
                } else {
                    host_gid(h, ib)
                }
            };
            check_record(&ctx, t, &rs, [routed(hosts[0]), routed(hosts[1])]);
        }
    }
}

/// The lenient NIC (TESTNIC_LENIENT=1, the behaviour before the strict one) runs a QP from its
/// doorbell record when its register carries another QP's doorbell: ibgda_host's strict-doorbell
/// step sees the RC QP's NOP complete without a doorbell naming it, and fails saying so.
#[test]
fn a_doorbell_naming_another_qp_rings_nothing_unless_lenient() {
    build_nic();
    let prog = nic_program("ibgda_host");
    let dir = common::scratch("testnic-lenient");
    let log = dir.join("nic-log");
    std::fs::create_dir_all(&log).expect("log dir");
    let prog_s = prog.display().to_string();
    let out = run_one(
        std::path::Path::new("env"),
        &["TESTNIC_LENIENT=1", &prog_s],
        &log,
        None,
    );
    let err = common::stderr_of(&out);
    assert!(
        !out.status.success() && err.contains("ran without a doorbell naming it"),
        "lenient NIC: ibgda_host should fail at the strict-doorbell step:\n{}\n{err}",
        common::stdout_of(&out)
    );
}

/// (case, status, vendor_err) of every "verbs_faults ... ok" line.
fn fault_lines(out: &Output) -> Vec<(String, String, String)> {
    common::stdout_of(out)
        .lines()
        .filter(|l| l.starts_with("verbs_faults ") && l.ends_with(" ok"))
        .map(|l| {
            let name = l.split_whitespace().nth(1).unwrap_or_default().to_string();
            (
                name,
                testnic::field(l, "status").to_string(),
                testnic::field(l, "vendor_err").to_string(),
            )
        })
        .collect()
}

#[test]
fn error_completions_with_and_without_sigmatop() {
    build_nic();
    let prog = nic_program("verbs_faults");
    let mut baseline = None;
    for mode in MODES {
        let dir = common::scratch("testnic-faults");
        let log = dir.join("nic-log");
        std::fs::create_dir_all(&log).expect("log dir");
        let trace = mode.map(|m| Trace::new(m, &dir));
        let out = run_one(&prog, &[], &log, trace.as_ref());
        let ctx = format!("verbs_faults mode {mode:?}");
        assert!(
            out.status.success(),
            "{ctx} failed:\n{}\n{}",
            common::stdout_of(&out),
            common::stderr_of(&out)
        );
        let mut lines = fault_lines(&out);
        lines.sort();
        let names: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
        for case in [
            "bad_rkey",
            "flush_after_error",
            "bounds",
            "no_right",
            "atomics",
            "write_imm_and_short_send",
            "write_imm_and_short_send_receiver",
            "too_long",
            "too_long_receiver",
            "rnr",
            "bad_lkey",
            "dmabuf",
            "malformed",
            "flush_on_modify_err",
            "chain_full",
            "chain_full_receiver",
            "peer_death",
        ] {
            assert!(
                names.contains(&case),
                "{ctx}: case {case} missing: {lines:?}"
            );
        }
        match &baseline {
            None => baseline = Some(lines),
            Some(b) => assert_eq!(&lines, b, "{ctx}: statuses differ from the untraced run"),
        }
        // The NIC refused the two bad WQEs itself, with their syndromes.
        let nic = nic_log(&log);
        assert!(
            nic.iter().any(|w| w.opcode == 0x3f && w.status == 0x02),
            "{ctx}: the malformed WQE is logged with syndrome 0x02"
        );
        assert!(
            nic.iter().any(|w| w.op == "RDMA_WRITE" && w.status == 0x04),
            "{ctx}: the bad-lkey write is logged with syndrome 0x04"
        );
        if let Some(t) = &trace {
            // The record of the process that died without cleanup still reads.
            let procs = common::processes(t);
            assert!(!procs.is_empty(), "{ctx}: nothing recorded");
            check_error_counts(&ctx, &procs);
            check_refused_chains(&ctx, &procs, &common::stdout_of(&out));
            // What `report` says of them, and the JSON's totals.
            let out = std::process::Command::new(common::sigmatop_bin())
                .arg("report")
                .arg(&t.record)
                .output_bounded()
                .expect("sigmatop report");
            let text = common::stdout_of(&out);
            for n in [8, 1] {
                assert!(
                    text.contains(&format!("    failed: {n} (error completions")),
                    "{ctx}: report:\n{text}"
                );
            }
            assert!(
                text.contains("failed: 9 operations reported an error in all"),
                "{ctx}: {text}"
            );
            // The warnings (the dashboard's, printed by `replay --headless`): one per failing QP.
            let out = std::process::Command::new(common::sigmatop_bin())
                .args(["replay", "--headless"])
                .arg(&t.record)
                .output_bounded()
                .expect("sigmatop replay --headless");
            let text = common::stdout_of(&out);
            let failing = text
                .lines()
                .filter(|l| l.starts_with("warning: QP 0x") && l.ends_with(": 1 failed operation"))
                .count();
            assert_eq!(failing, 9, "{ctx}: {text}");
        }
    }
}

/// The chains the NIC refused part of (case chain_full): A's chain of writes, of which the
/// first `accepted` (the send queue's room, printed by the program) were posted and the next
/// refused with ENOMEM; B's chain of receives, likewise. Exactly those on the QP of each: the
/// accepted WRs as operations (posted receives), one refused post, nothing else refused.
fn check_refused_chains(ctx: &str, procs: &[sigmatop::trace::reader::ProcessRecording], out: &str) {
    use sigmatop::event::Op;
    let accepted = |what: &str| -> u64 {
        let l = out
            .lines()
            .find(|l| l.starts_with(&format!("verbs_faults {what} ")))
            .unwrap_or_else(|| panic!("{ctx}: no '{what}' line:\n{out}"));
        testnic::field(l, "accepted")
            .parse()
            .unwrap_or_else(|e| panic!("{ctx}: {l}: {e}"))
    };
    let (sends, recvs) = (accepted("chain"), accepted("chain_receiver"));
    let mut refused = Vec::new();
    for p in procs {
        let Some(last) = p.snapshots.last() else {
            continue;
        };
        for c in last.counts.iter().filter(|c| c.refused > 0) {
            refused.push((c.op, c.ops, c.bytes, c.posted, c.posted_bytes, c.refused));
        }
    }
    refused.sort();
    let mut want = vec![
        (Op::VerbsWrite as u8, sends, 8 * sends, 0, 0, 1),
        (Op::VerbsRecv as u8, 0, 0, recvs, 8 * recvs, 1),
    ];
    want.sort();
    assert_eq!(
        refused, want,
        "{ctx}: (op, ops, bytes, posted, posted bytes, refused) of every refused post"
    );
}

/// The errors counted, from each process's last snapshot: A (the parent) polled 8 error
/// completions (bad_rkey, bounds, no_right, too_long, rnr, bad_lkey, malformed, peer_death) and
/// 1 flush; B polled 1 (too_long_receiver) and 3 flushes. A flush is not an error; each error
/// counts once, on the QP it names (every case has a QP of its own), and is no operation.
fn check_error_counts(ctx: &str, procs: &[sigmatop::trace::reader::ProcessRecording]) {
    let mut totals = Vec::new();
    for p in procs {
        let Some(last) = p.snapshots.last() else {
            continue;
        };
        let mut per_ep = std::collections::BTreeMap::<u32, u64>::new();
        for c in last.counts.iter().filter(|c| c.errors > 0) {
            *per_ep.entry(c.ep).or_default() += c.errors;
            assert_eq!(c.op, sigmatop::event::Op::VerbsOther as u8, "{ctx}: {c:?}");
            assert_eq!(
                c.ops, 0,
                "{ctx}: an error completion is no operation: {c:?}"
            );
        }
        for (ep, n) in &per_ep {
            let def = p.endpoints.iter().find(|d| d.id == *ep);
            assert!(
                *n == 1 && def.is_some_and(|d| d.kind == sigmatop::event::EndpointKind::VerbsQp),
                "{ctx}: endpoint {ep} ({def:?}) has {n} errors, want 1 on a QP"
            );
        }
        totals.push(per_ep.values().sum::<u64>());
    }
    totals.sort();
    assert_eq!(totals, [1, 8], "{ctx}: errors per process");
}

/// A WQE line as compared: (qpn, idx, op, len, signaled, status, peer qpn, peer pid).
type SentWqe = (u32, u32, String, u64, bool, u32, u32, u32);

/// The fields of the "gdaki_host STEP qp=X ..." line for `step` and QP `qp`.
fn gdaki_line<'a>(text: &'a str, step: &str, qp: &str) -> &'a str {
    let head = format!("gdaki_host {step} qp={qp} ");
    text.lines()
        .find(|l| l.starts_with(&head) && l.ends_with(" ok"))
        .unwrap_or_else(|| panic!("no '{head}... ok' line in:\n{text}"))
}

/// NCCL 2.28's GIN error query on the NIC (issue 40, items 1 and 5): `gdaki_host`
/// (tests/testnic/gdaki_host.c) builds two devx RC QPs with DOCA GPUNetIO's commands in DOCA's
/// order and queries them with QUERY_QP through `mlx5dv_devx_obj_query`, as
/// `doca_gpu_verbs_query_last_error` does. A healthy QP says RTS with the PSNs, remote QPN and
/// path it was given (one write later: both PSNs one further); the QP the NIC put in error
/// (a wrong rkey) says ERR, NCCL's `has_error`; the program's 2ERR / 2RST show; a query naming
/// another QPN, a short output box and QUERY_CQ are refused; the NIC's exit line counts the
/// queries it answered and those that said ERR. Untraced and in every mode (the
/// preload lets the query through untouched); the NIC log holds A's two writes, peer B; under
/// sigmatop both devx QPs are recorded, each the other's peer in the same process.
#[test]
fn gdaki_qp_error_query_on_a_healthy_and_an_errored_qp() {
    build_nic();
    let prog = nic_program("gdaki_host");
    for mode in MODES {
        let dir = common::scratch("testnic-gdaki");
        let log = dir.join("nic-log");
        std::fs::create_dir_all(&log).expect("log dir");
        let trace = mode.map(|m| Trace::new(m, &dir));
        let out = run_one(&prog, &[], &log, trace.as_ref());
        let ctx = format!("gdaki_host mode {mode:?}");
        let text = common::stdout_of(&out);
        assert!(
            out.status.success(),
            "{ctx} failed:\n{text}\n{}",
            common::stderr_of(&out)
        );
        let created = text
            .lines()
            .find(|l| l.starts_with("gdaki_host created "))
            .unwrap_or_else(|| panic!("{ctx}: no 'created' line:\n{text}"));
        let pid: u32 = testnic::field(created, "pid").parse().expect("pid");
        let qa = hex(testnic::field(created, "qpn_a")) as u32;
        let qb = hex(testnic::field(created, "qpn_b")) as u32;
        // (step, qp, state, has_error, sq_psn, rq_psn, remote QPN)
        let want = [
            ("healthy", "A", "RTS", "0", 0x1234, 0x5678, qb),
            ("healthy", "B", "RTS", "0", 0x5678, 0x1234, qa),
            ("after_write", "A", "RTS", "0", 0x1235, 0x5678, qb),
            ("after_write", "B", "RTS", "0", 0x5678, 0x1235, qa),
        ];
        for (step, qp, state, err, sq, rq, remote) in want {
            let l = gdaki_line(&text, step, qp);
            assert_eq!(
                (
                    testnic::field(l, "state"),
                    testnic::field(l, "has_error"),
                    hex(testnic::field(l, "sq_psn")),
                    hex(testnic::field(l, "rq_psn")),
                    hex(testnic::field(l, "remote_qpn")) as u32,
                ),
                (state, err, sq, rq, remote),
                "{ctx}: {l}"
            );
        }
        let l = gdaki_line(&text, "errored", "A");
        assert_eq!(
            (testnic::field(l, "state"), testnic::field(l, "has_error")),
            ("ERR", "1"),
            "{ctx}: {l}"
        );
        gdaki_line(&text, "transitions", "B");
        // The NIC's exit line: the seven queries it answered (2 healthy, 2 after the write, A in
        // error, B after 2ERR and after 2RST; the refused ones are not answers), two in ERR.
        let err = common::stderr_of(&out);
        let want_line = format!("testnic: pid {pid} QUERY_QP answered 7 times, 2 in ERR");
        assert!(
            err.lines().any(|l| l == want_line),
            "{ctx}: no '{want_line}' on stderr:\n{err}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("gdaki_host refused ") && l.ends_with(" ok")),
            "{ctx}: {text}"
        );
        // The NIC log: A's good write (64 B) and the wrong-rkey one (8 B; a remote error is in
        // the CQE, not the log), both to B; B sent nothing.
        let nic = nic_log(&log);
        let got: Vec<SentWqe> = nic
            .iter()
            .filter(|w| w.pid == pid)
            .map(|w| {
                (
                    w.qpn,
                    w.idx,
                    w.op.clone(),
                    w.len,
                    w.signaled,
                    w.status,
                    w.rqpn,
                    w.rpid,
                )
            })
            .collect();
        let w = |idx, len| (qa, idx, "RDMA_WRITE".to_string(), len, true, 0, qb, pid);
        assert_eq!(
            got,
            vec![w(0, 64), w(1, 8)],
            "{ctx}: NIC log (qpn, idx, op, len, signaled, status, peer qpn, peer pid)"
        );
        if let Some(t) = &trace {
            let procs = common::processes(t);
            let p = procs
                .iter()
                .find(|p| p.identity.pid == pid)
                .unwrap_or_else(|| panic!("{ctx}: pid {pid} not recorded"));
            for (me, other) in [(qa, qb), (qb, qa)] {
                let peer = devx_peer(&ctx, p, me);
                assert_eq!(peer.qpn, Some(other), "{ctx}: peer of devx QP 0x{me:x}");
                assert!(
                    p.identity.own_addr_hashes.contains(&peer.addr_hash),
                    "{ctx}: the peer of 0x{me:x} is no own address of the process"
                );
            }
        }
    }
}
