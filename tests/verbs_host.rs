//! ibverbs layer on the host, where there is no RDMA device:
//! - `ibv_devices` under the preload (every mode) prints exactly what it prints untraced
//!   ("Failed to get IB devices list: Function not implemented") and exits with the same status;
//! - a fake provider (tests/guest/verbs_fake.c: a real `struct verbs_context` whose ops and
//!   `create_qp_ex` are stubs) driven through the inline verbs.h calls: the record holds exactly
//!   the WRs the stub accepted, per QP and opcode, with their bytes, remote addresses, rkeys and
//!   INLINE / SIGNALED flags; a chain the provider refuses at its second WR records the first, the
//!   refused one as a refusal (not an operation) and nothing of the garbage after it; a NULL list
//!   passes through and is counted as untraced; `ibv_qp_ex` batches are recorded on wr_complete,
//!   dropped on wr_abort, recorded as refusals when wr_complete fails; the two receive WRs count
//!   as posted, and the failed receive completion the stub returns is no receive (a failed
//!   completion's opcode is undefined); full mode adds the poll_cq call that returned
//!   completions (2, one failed) and the req_notify_cq call. The program's output is unchanged by
//!   the preload.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use sigmatop::event::{EndpointKind, Op, flags};

#[test]
fn ibv_devices_without_device_is_untouched() {
    let exe = require("ibv_devices");
    let plain = wait_timeout(spawn(&mut Command::new(&exe)), Duration::from_secs(30));
    assert!(
        stderr_of(&plain).contains("Failed to get IB devices list"),
        "this host has an RDMA device? ibv_devices said: {}{}",
        stdout_of(&plain),
        stderr_of(&plain)
    );
    for mode in ["aggregate", "simple", "full"] {
        let dir = scratch(&format!("verbs-nodev-{mode}"));
        let t = Trace::new(mode, &dir);
        let mut c = Command::new(&exe);
        t.apply(&mut c);
        let out = wait_timeout(spawn(&mut c), Duration::from_secs(30));
        assert_eq!(
            out.status.code(),
            plain.status.code(),
            "{mode}: exit status"
        );
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{mode}: stdout");
        assert_eq!(stderr_of(&out), stderr_of(&plain), "{mode}: stderr");
    }
}

fn build_fake() -> PathBuf {
    let gcc = require("gcc");
    let dir = scratch("verbs-fake-build");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guest/verbs_fake.c");
    let exe = dir.join("verbs_fake");
    let out = Command::new(gcc)
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-libverbs", "-ldl"])
        .output_bounded()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc verbs_fake.c (libibverbs-dev installed?): {}",
        stderr_of(&out)
    );
    exe
}

#[test]
fn fake_provider_is_traced_exactly() {
    let exe = build_fake();
    let plain = wait_timeout(spawn(&mut Command::new(&exe)), Duration::from_secs(30));
    assert!(plain.status.success(), "{}", stderr_of(&plain));
    for mode in ["aggregate", "simple", "full"] {
        let dir = scratch(&format!("verbs-fake-{mode}"));
        let t = Trace::new(mode, &dir);
        let mut c = Command::new(&exe);
        t.apply(&mut c);
        let out = wait_timeout(spawn(&mut c), Duration::from_secs(30));
        assert!(out.status.success(), "{mode}: {}", stderr_of(&out));
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{mode}: output changed");
        assert_eq!(stderr_of(&out), stderr_of(&plain), "{mode}: stderr changed");

        let procs = processes(&t);
        assert_eq!(procs.len(), 1, "{mode}: one process");
        let p = &procs[0];
        let tot = totals(p);
        let ep = |label: &str| {
            p.endpoints
                .iter()
                .find(|e| e.label.starts_with(label))
                .unwrap_or_else(|| panic!("{mode}: no endpoint {label}: {:?}", p.endpoints))
                .id
        };
        let (qp, qx) = (ep("qp bench"), ep("qp 0x42"));
        let cq = p
            .endpoints
            .iter()
            .find(|e| e.kind == EndpointKind::VerbsCq)
            .expect("cq endpoint")
            .id;
        let qxdef = p.endpoints.iter().find(|e| e.id == qx).expect("qp 0x42");
        assert_eq!(qxdef.qpn, Some(0x42));
        assert_eq!(qxdef.transport, "RC");
        let get = |e: u32, op: Op| tot.per_ep.get(&(e, op.name().to_string())).copied();
        assert_eq!(get(qp, Op::VerbsWrite), Some((2, 128 + 512)), "{mode}");
        assert_eq!(get(qp, Op::VerbsSend), Some((1, 64)), "{mode}");
        assert_eq!(get(qp, Op::VerbsRead), Some((1, 4096)), "{mode}");
        assert_eq!(get(qp, Op::VerbsOther), Some((0, 0)), "{mode}: refused WR");
        assert_eq!(
            get(qp, Op::VerbsRecv),
            Some((0, 0)),
            "{mode}: no receive completed"
        );
        assert_eq!(get(qx, Op::VerbsWrite), Some((1, 256)), "{mode}");
        assert_eq!(get(qx, Op::VerbsSend), Some((1, 32)), "{mode}");
        assert_eq!(get(qx, Op::VerbsRead), Some((0, 0)), "{mode}: failed batch");
        let snap = p.last_snapshot().expect("snapshot");
        let count = |e: u32, op: Op| {
            snap.counts
                .iter()
                .find(|c| c.ep == e && c.op == op as u8)
                .copied()
                .unwrap_or_default()
        };
        let (other, recv, batch) = (
            count(qp, Op::VerbsOther),
            count(qp, Op::VerbsRecv),
            count(qx, Op::VerbsRead),
        );
        assert_eq!((other.refused, other.errors), (1, 0), "{mode}: refused WR");
        assert_eq!(
            (batch.refused, batch.errors),
            (1, 0),
            "{mode}: failed batch"
        );
        assert_eq!(
            (recv.posted, recv.posted_bytes, recv.ops),
            (2, 8192, 0),
            "{mode}: two receive WRs posted, none completed"
        );
        let errors: u64 = snap
            .counts
            .iter()
            .filter(|c| c.ep == qp || c.ep == qx)
            .map(|c| c.errors)
            .sum();
        assert_eq!(errors, 0, "{mode}: refusals are not failed operations");
        assert_eq!(
            snap.drops.hook_failures, 1,
            "{mode}: the NULL list counted as untraced"
        );
        if mode == "full" {
            assert_eq!(get(cq, Op::VerbsPollCq), Some((1, 2)), "{mode}");
            assert_eq!(get(cq, Op::VerbsOther), Some((1, 0)), "{mode}: notify");
        } else {
            assert_eq!(get(cq, Op::VerbsPollCq), None, "{mode}");
        }
        let mut probs = Vec::new();
        let evs = p.read_all_events(&mut probs);
        assert!(probs.is_empty(), "{probs:?}");
        if mode == "aggregate" {
            assert!(evs.is_empty(), "aggregate mode keeps no events");
            continue;
        }
        let want_events = 10 + if mode == "full" { 2 } else { 0 };
        assert_eq!(evs.len(), want_events, "{mode}: {evs:?}");
        let w0 = evs[0];
        assert_eq!(
            (w0.ep, w0.op, w0.bytes, w0.addr, w0.aux),
            (qp, Op::VerbsWrite as u8, 128, 0x1000, 0x77)
        );
        assert!(w0.flags & flags::SIGNALED != 0 && w0.flags & flags::INLINE == 0);
        assert!(evs[1].flags & flags::INLINE != 0, "inline send");
        assert_eq!(
            (evs[2].op, evs[2].addr, evs[2].aux),
            (Op::VerbsRead as u8, 0x2000, 0x78)
        );
        assert_eq!((evs[3].addr, evs[3].bytes), (0x3000, 512));
        assert!(evs[4].flags & flags::ERROR != 0 && evs[4].bytes == 0);
        let xs: Vec<_> = evs.iter().filter(|e| e.ep == qx).collect();
        assert_eq!(xs.len(), 3);
        assert_eq!(
            (xs[0].op, xs[0].addr, xs[0].aux),
            (Op::VerbsWrite as u8, 0x5000, 5)
        );
        assert!(xs[0].flags & flags::SIGNALED != 0);
        assert!(xs[1].flags & flags::INLINE != 0);
        assert!(xs[2].flags & flags::ERROR != 0);
        if mode == "full" {
            let poll = evs
                .iter()
                .find(|e| e.op == Op::VerbsPollCq as u8)
                .expect("poll event");
            assert_eq!((poll.ep, poll.bytes, poll.addr), (cq, 2, 64));
            assert_eq!(poll.aux & 0xff, 1, "one failed completion");
            assert!(poll.flags & flags::ERROR != 0);
        }
    }
}
