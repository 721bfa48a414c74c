//! Proves that sigmatop attributes real MPI traffic to the right peers: an Open MPI program of our
//! own (tests/programs/mpi_pattern.c, a known uneven pattern, rank i sends (i+1)·(j+2)·1000 bytes
//! to rank j), run with 2 and 4 ranks over UCX (pml ucx) on the tcp and shared-memory transports,
//! in each mode. From the records alone, the rank×rank byte matrix is rebuilt — each sender
//! endpoint's peer hash is looked up among every process's own worker-address hashes, which gives
//! the receiving rank — and it equals the pattern exactly; every rank's posted receive bytes equal
//! its column; in simple/full mode the tagged events carry the program's MPI tag.
//!
//! `mpi_larger_receives` is issue 16's case: an MPI program of our own
//! (tests/programs/mpi_larger_recv.c) posts every receive with a 13,312-byte buffer for smaller
//! messages, through MPI_Irecv (completed by UCX's callback) and MPI_Recv (mostly completed inside
//! the call); each rank's received bytes must be exactly the bytes its peers sent it (= its
//! column of the rank matrix, = its ingress in the JSON report), its posted buffers apart.
//!
//! MPI_Init and MPI_Finalize with pml ucx make no tagged sends of their own here (Open MPI 4.1's
//! init and finalize synchronise through PMIx, not through the PML), so the whole tag_send count
//! is the pattern's: one per ordered pair. The test asserts that too (ops = size·(size−1)), so a
//! future Open MPI that adds traffic of its own would be noticed here, not silently absorbed.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::Trace;
use sigmatop::event::{EndpointKind, Op};

const PATTERN_TAG: u64 = 4242;
/// Open MPI 4.1 pml ucx packs the MPI tag above 20 bits of source rank and 20 of context id.
const OMPI_TAG_SHIFT: u32 = 40;

fn pattern(src: usize, dst: usize) -> u64 {
    ((src + 1) * (dst + 2) * 1000) as u64
}

/// Compiles the MPI program once per test process.
fn program() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| compile("mpi_pattern")).clone()
}

/// Compiles tests/programs/`name`.c with mpicc.
fn compile(name: &str) -> PathBuf {
    common::build_program("mpicc", &format!("{name}.c"), name, &[])
}

/// Runs `prog` on `np` ranks over pml ucx with `tls`, traced in `mode`; returns its stdout.
fn mpirun(prog: &Path, np: usize, tls: &str, trace: &Trace, ctx: &str) -> String {
    let out = common::mpirun_traced(trace, np, common::MPI_OVER_UCX, Some(tls), prog, ctx);
    assert!(
        !common::stderr_of(&out).contains("sigmatop"),
        "{ctx}: a sigmatop warning:\n{}",
        common::stderr_of(&out)
    );
    common::stdout_of(&out)
}

fn run(np: usize, tls: &str, mode: &'static str) {
    let ctx = format!("{np} ranks over UCX_TLS={tls}, {mode} mode");
    let dir = common::scratch(&format!("mpi-{np}-{}", tls.replace(',', "_")));
    let trace = Trace::new(mode, &dir);
    let out = mpirun(&program(), np, tls, &trace, &ctx);
    assert_eq!(
        out.trim(),
        format!("mpi_pattern: {np} ranks done"),
        "{ctx}: program output"
    );

    let procs = common::processes(&trace);
    assert_eq!(procs.len(), np, "{ctx}: one traced process per rank");
    // Which rank owns which worker-address hash.
    let mut owner: BTreeMap<u64, usize> = BTreeMap::new();
    for p in &procs {
        let rank = p.identity.rank.expect("rank from OMPI_COMM_WORLD_RANK") as usize;
        assert!(
            !p.identity.own_addr_hashes.is_empty(),
            "{ctx}: rank {rank} has no address"
        );
        for h in &p.identity.own_addr_hashes {
            assert_eq!(
                owner.insert(*h, rank),
                None,
                "{ctx}: address hash {h:#x} owned twice"
            );
        }
    }
    let mut matrix = vec![vec![0u64; np]; np];
    let mut recv = vec![0u64; np];
    for p in &procs {
        let me = p.identity.rank.expect("rank") as usize;
        let t = common::totals(p);
        assert!(!t.cut, "{ctx}: rank {me}'s record ends cleanly");
        let (sends, _) = common::op(&t, Op::UcxTagSend.name());
        assert_eq!(
            sends as usize,
            np - 1,
            "{ctx}: rank {me} made one MPI_Send per peer"
        );
        recv[me] = common::op(&t, Op::UcxTagRecv.name()).1;
        for ((ep, op), (_, bytes)) in &t.per_ep {
            if op != Op::UcxTagSend.name() {
                continue;
            }
            let def = t
                .endpoints
                .iter()
                .find(|d| d.id == *ep)
                .unwrap_or_else(|| panic!("{ctx}: rank {me} sent on undefined endpoint {ep}"));
            assert_eq!(def.kind, EndpointKind::UcpEp);
            let peer = *owner.get(&def.peer.addr_hash).unwrap_or_else(|| {
                panic!(
                    "{ctx}: rank {me}'s {} peer {:#x} is no traced process",
                    def.label, def.peer.addr_hash
                )
            });
            matrix[me][peer] += bytes;
        }
        if mode != "aggregate" {
            // The tagged events carry Open MPI's 64-bit tag, the MPI tag in its top bits.
            let mut probs = Vec::new();
            let evs = p.read_all_events(&mut probs);
            let sent: u64 = evs
                .iter()
                .filter(|e| e.op == Op::UcxTagSend as u8)
                .map(|e| {
                    assert_eq!(e.addr >> OMPI_TAG_SHIFT, PATTERN_TAG, "{ctx}: tag of {e:?}");
                    e.bytes
                })
                .sum();
            assert_eq!(
                sent,
                (0..np)
                    .filter(|&j| j != me)
                    .map(|j| pattern(me, j))
                    .sum::<u64>()
            );
        }
    }
    let want: Vec<Vec<u64>> = (0..np)
        .map(|i| {
            (0..np)
                .map(|j| if i == j { 0 } else { pattern(i, j) })
                .collect()
        })
        .collect();
    assert_eq!(matrix, want, "{ctx}: rank×rank bytes");
    let col: Vec<u64> = (0..np)
        .map(|j| (0..np).filter(|&i| i != j).map(|i| pattern(i, j)).sum())
        .collect();
    assert_eq!(recv, col, "{ctx}: bytes each rank received");
}

/// tests/programs/mpi_larger_recv.c: its rounds, receive buffer, and message sizes.
const ROUNDS: u64 = 8;
const RECV_BYTES: u64 = 13_312;

fn msg_bytes(src: usize, dst: usize, round: u64) -> u64 {
    1024 * (src as u64 + 1) + 512 * dst as u64 + 8 * round
}

fn larger_receives(np: usize, tls: &str, mode: &'static str) {
    let ctx = format!("mpi_larger_recv, {np} ranks over UCX_TLS={tls}, {mode} mode");
    let dir = common::scratch(&format!("mpi-larger-{np}-{}", tls.replace(',', "_")));
    let trace = Trace::new(mode, &dir);
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let prog = BIN.get_or_init(|| compile("mpi_larger_recv"));
    let out = mpirun(prog, np, tls, &trace, &ctx);
    assert_eq!(
        out.trim(),
        format!("mpi_larger_recv: {np} ranks, {ROUNDS} rounds done"),
        "{ctx}: program output"
    );
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), np, "{ctx}: one traced process per rank");
    let peers = (np - 1) as u64;
    // Data messages of every round plus, in even rounds, an empty READY message from each peer.
    let ready = ROUNDS.div_ceil(2) * peers;
    for p in &procs {
        let me = p.identity.rank.expect("rank") as usize;
        let others = || (0..np).filter(move |&j| j != me);
        let got: u64 = others()
            .flat_map(|j| (0..ROUNDS).map(move |r| msg_bytes(j, me, r)))
            .sum();
        let sent: u64 = others()
            .flat_map(|j| (0..ROUNDS).map(move |r| msg_bytes(me, j, r)))
            .sum();
        let snap = p.last_snapshot().expect("a snapshot");
        let sum = |op: Op| {
            snap.counts.iter().filter(|c| c.op == op as u8).fold(
                sigmatop::event::OpCount::default(),
                |mut a, c| {
                    a.ops += c.ops;
                    a.bytes += c.bytes;
                    a.errors += c.errors;
                    a.refused += c.refused;
                    a.posted += c.posted;
                    a.posted_bytes += c.posted_bytes;
                    a
                },
            )
        };
        let (recv, send) = (sum(Op::UcxTagRecv), sum(Op::UcxTagSend));
        assert_eq!(
            (send.ops, send.bytes, send.refused),
            (ROUNDS * peers + ready, sent, 0),
            "{ctx}: rank {me} sends"
        );
        assert_eq!(
            (recv.ops, recv.bytes, recv.errors),
            (ROUNDS * peers + ready, got, 0),
            "{ctx}: rank {me} received exactly what its peers sent it"
        );
        assert_eq!(
            (recv.posted, recv.posted_bytes, recv.refused),
            (ROUNDS * peers + ready, ROUNDS * peers * RECV_BYTES, 0),
            "{ctx}: rank {me} posted 13,312-byte buffers (and empty ones for READY)"
        );
    }
    // The JSON report says the same: each rank's rx_bytes is its ingress from the other ranks.
    let v = common::export_json(&trace.record, &ctx);
    // The layers each rank used (issue 12 item 7a): UCX alone, though every layer was enabled.
    for p in v["processes"].as_array().expect("processes") {
        assert_eq!(p["layers"], "ucx", "{ctx}: layers used: {}", p["pid"]);
        assert_eq!(
            p["layers_enabled"], "ucx,libfabric,ibverbs,mlx5,cuda",
            "{ctx}: layers enabled"
        );
    }
    let ranks = v["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), np, "{ctx}: {ranks:?}");
    for r in ranks {
        assert_eq!(
            r["rx_bytes"], r["ingress_bytes"],
            "{ctx}: rx_bytes = ingress: {r}"
        );
        assert_eq!(
            r["tx_bytes"], r["egress_bytes"],
            "{ctx}: tx_bytes = egress: {r}"
        );
    }
}

#[test]
fn mpi_larger_receives() {
    larger_receives(4, "tcp,self", "aggregate");
    larger_receives(4, "sm,self", "simple");
    larger_receives(3, "tcp,self", "full");
}

#[test]
fn mpi_pattern_tcp() {
    run(2, "tcp,self", "aggregate");
    run(4, "tcp,self", "simple");
}

#[test]
fn mpi_pattern_shm() {
    run(2, "sm,self", "full");
    run(4, "sm,self", "simple");
}
