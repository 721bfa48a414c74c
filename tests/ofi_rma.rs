//! A libfabric RMA program of our own (tests/programs/fi_rma.c, built here with gcc) over
//! "tcp;ofi_rxm": two RDM endpoints in one process; fi_write / fi_writev / fi_writemsg /
//! fi_inject_write and fi_read / fi_readv / fi_readmsg from A into B's registered buffer, then
//! fi_send and fi_tsend from A to B's posted fi_recv / fi_trecv. It prints one line per data call.
//! Proves, in aggregate, simple and full mode, that: its output is unchanged by the preload; the
//! writes, reads, sends, receives and tagged operations sigmatop counts, and their bytes, equal
//! exactly what it printed; in the events each RMA carries the remote address it named and each
//! tagged operation its tag, in program order, with the inject flagged INLINE; the endpoints'
//! AV updates map fi_addr 0 to the other endpoint's own address; full mode counts exactly the
//! completions the program read.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use sigmatop::event::{EndpointKind, Op, flags};
use sigmatop::trace::reader::ProcessRecording;

const PROV: &str = "tcp;ofi_rxm";

fn build(defines: &[&str]) -> PathBuf {
    let gcc = require("gcc");
    let dir = scratch("ofi-rma-build");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/fi_rma.c");
    let exe = dir.join("fi_rma");
    let out = Command::new(gcc)
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .args(defines)
        .arg(&src)
        .args(["-lfabric", "-ldl"])
        .output_bounded()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc fi_rma.c (libfabric-dev installed?): {}",
        stderr_of(&out)
    );
    exe
}

fn run(exe: &PathBuf, trace: Option<&Trace>) -> (Output, u32) {
    let mut c = Command::new(exe);
    c.arg(PROV);
    if let Some(t) = trace {
        t.apply(&mut c);
    }
    let child = spawn(&mut c);
    let pid = child.id();
    let out = wait_timeout(child, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "fi_rma: {}\n{}",
        stdout_of(&out),
        stderr_of(&out)
    );
    (out, pid)
}

/// What the program printed: (kind letter, bytes, offset or tag) per data call, and the base.
fn parse(out: &str) -> (u64, Vec<(char, u64, u64)>) {
    let mut base = None;
    let mut ops = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["base", b] => base = Some(b.parse::<u64>().expect("base")),
            [k, n, rest @ ..] if k.len() == 1 && "WRSVTU".contains(*k) => {
                let n = n.parse::<u64>().expect("bytes");
                let x = rest
                    .first()
                    .map_or(0, |s| s.parse::<u64>().expect("offset/tag"));
                ops.push((k.chars().next().unwrap_or('?'), n, x));
            }
            _ => {}
        }
    }
    (base.expect("a base line"), ops)
}

fn printed(ops: &[(char, u64, u64)], k: char) -> Vec<(u64, u64)> {
    ops.iter()
        .filter(|o| o.0 == k)
        .map(|o| (o.1, o.2))
        .collect()
}

/// (successful calls, bytes, failed calls) of `op` in the last snapshot.
fn counted(p: &ProcessRecording, op: Op) -> (u64, u64, u64) {
    let s = p.last_snapshot().expect("a snapshot");
    let mut r = (0, 0, 0);
    for c in s.counts.iter().filter(|c| c.op == op as u8) {
        r.0 += c.ops - c.errors;
        r.1 += c.bytes;
        r.2 += c.errors;
    }
    r
}

fn without_base(out: &str) -> String {
    out.lines()
        .filter(|l| !l.starts_with("base "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn rma_traced_exactly() {
    check(&build(&[]), &["aggregate", "simple", "full"]);
}

/// The same program resolving fi_getinfo / fi_fabric with dlopen(RTLD_LOCAL) + dlsym: sigmatop's
/// dlsym hands out its hooks, so the traffic is counted all the same.
#[test]
fn rma_through_dlsym() {
    check(&build(&["-DFI_RMA_DLSYM"]), &["simple"]);
}

fn check(exe: &PathBuf, modes: &[&'static str]) {
    let (plain, _) = run(exe, None);
    let plain_out = stdout_of(&plain);
    let (_, plain_ops) = parse(&plain_out);
    assert!(plain_out.contains("verify ok"), "{plain_out}");
    for &mode in modes {
        let dir = scratch(&format!("ofi-rma-{mode}"));
        let trace = Trace::new(mode, &dir);
        let (out, pid) = run(exe, Some(&trace));
        let text = stdout_of(&out);
        assert_eq!(
            without_base(&text),
            without_base(&plain_out),
            "{mode}: output unchanged"
        );
        assert_eq!(
            stderr_of(&out),
            stderr_of(&plain),
            "{mode}: stderr unchanged"
        );
        let (base, ops) = parse(&text);
        assert_eq!(ops.len(), plain_ops.len());

        let procs = processes(&trace);
        let p = procs
            .iter()
            .find(|p| p.identity.pid == pid)
            .unwrap_or_else(|| panic!("{mode}: no record of pid {pid}"));
        let eps: Vec<_> = p
            .endpoints
            .iter()
            .filter(|e| e.kind == EndpointKind::FiEp)
            .collect();
        assert_eq!(eps.len(), 2, "{mode}: two endpoints: {eps:?}");
        assert!(eps.iter().all(|e| e.transport == PROV), "{eps:?}");

        // Counters: calls and bytes per kind, exactly as printed.
        for (k, op) in [
            ('W', Op::OfiWrite),
            ('R', Op::OfiRead),
            ('S', Op::OfiSend),
            ('V', Op::OfiRecv),
            ('T', Op::OfiTSend),
            ('U', Op::OfiTRecv),
        ] {
            let want = printed(&ops, k);
            let got = counted(p, op);
            assert_eq!(
                (got.0, got.1),
                (want.len() as u64, want.iter().map(|w| w.0).sum::<u64>()),
                "{mode}: {op:?} (calls, bytes)"
            );
        }
        assert_eq!(counted(p, Op::OfiAtomic), (0, 0, 0));

        // AV: each endpoint's fi_addr 0 is the other endpoint's own address.
        let own = &p.identity.own_addr_hashes;
        let mut av_hashes = Vec::new();
        for e in &eps {
            let av: Vec<_> = p
                .updates
                .iter()
                .filter(|u| u.id == e.id && u.state == "av")
                .filter_map(|u| u.peer.as_ref())
                .collect();
            assert_eq!(av.len(), 1, "{mode}: {} av updates {av:?}", e.label);
            assert_eq!(av[0].text, "fi_addr 0");
            assert!(own.contains(&av[0].addr_hash), "{mode}: {av:?} vs {own:?}");
            av_hashes.push(av[0].addr_hash);
        }
        assert_ne!(av_hashes[0], av_hashes[1], "{mode}: two distinct peers");

        let mut probs = Vec::new();
        let events = p.read_all_events(&mut probs);
        assert!(probs.is_empty(), "{probs:?}");
        if mode == "aggregate" {
            assert!(events.is_empty());
            assert_eq!(counted(p, Op::OfiCqRead), (0, 0, 0));
            continue;
        }
        let ok = |op: Op| -> Vec<_> {
            events
                .iter()
                .filter(|e| e.op == op as u8 && e.flags & flags::ERROR == 0)
                .collect()
        };
        // RMA events: remote address = base + printed offset, in program order, on endpoint A.
        let writes = ok(Op::OfiWrite);
        let want_w: Vec<(u64, u64)> = printed(&ops, 'W')
            .iter()
            .map(|&(n, off)| (n, base + off))
            .collect();
        let got_w: Vec<(u64, u64)> = writes.iter().map(|e| (e.bytes, e.addr)).collect();
        assert_eq!(got_w, want_w, "{mode}: writes (bytes, remote address)");
        let injects = writes
            .iter()
            .filter(|e| e.flags & flags::INLINE != 0)
            .count();
        assert_eq!(injects, 1, "{mode}: the fi_inject_write is INLINE");
        assert_eq!(
            writes.last().map(|e| e.flags & flags::INLINE),
            Some(flags::INLINE)
        );
        let reads = ok(Op::OfiRead);
        let want_r: Vec<(u64, u64)> = printed(&ops, 'R')
            .iter()
            .map(|&(n, off)| (n, base + off))
            .collect();
        let got_r: Vec<(u64, u64)> = reads.iter().map(|e| (e.bytes, e.addr)).collect();
        assert_eq!(got_r, want_r, "{mode}: reads (bytes, remote address)");
        let a = writes[0].ep;
        assert!(
            writes
                .iter()
                .chain(reads.iter())
                .all(|e| e.ep == a && e.aux == 0)
        );
        // Tagged events carry the tag.
        for (k, op) in [('T', Op::OfiTSend), ('U', Op::OfiTRecv)] {
            let got: Vec<(u64, u64)> = ok(op).iter().map(|e| (e.bytes, e.addr)).collect();
            assert_eq!(got, printed(&ops, k), "{mode}: {op:?} (bytes, tag)");
        }
        // Sends name fi_addr 0 (B in A's AV) and leave from A; receives are posted on B.
        let sends = ok(Op::OfiSend);
        assert!(sends.iter().all(|e| e.ep == a && e.addr == 0 && e.aux == 0));
        let recvs = ok(Op::OfiRecv);
        assert!(recvs.iter().all(|e| e.ep != a));

        let cq = counted(p, Op::OfiCqRead);
        if mode == "full" {
            let want = (printed(&ops, 'W').len() - injects
                + printed(&ops, 'R').len()
                + printed(&ops, 'S').len()
                + printed(&ops, 'T').len()
                + printed(&ops, 'V').len()
                + printed(&ops, 'U').len()) as u64;
            assert_eq!(cq.1, want, "{mode}: completions read");
            assert_eq!(cq.2, 0);
            let cqs = p
                .endpoints
                .iter()
                .filter(|e| e.kind == EndpointKind::FiCq)
                .count();
            assert_eq!(cqs, 2, "{mode}: two completion queues");
        } else {
            assert_eq!(cq, (0, 0, 0));
        }
    }
}
