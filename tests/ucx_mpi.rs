//! Proves that sigmatop attributes real MPI traffic to the right peers: an Open MPI program of our
//! own (tests/programs/mpi_pattern.c, a known uneven pattern, rank i sends (i+1)·(j+2)·1000 bytes
//! to rank j), run with 2 and 4 ranks over UCX (pml ucx) on the tcp and shared-memory transports,
//! in each mode. From the records alone, the rank×rank byte matrix is rebuilt — each sender
//! endpoint's peer hash is looked up among every process's own worker-address hashes, which gives
//! the receiving rank — and it equals the pattern exactly; every rank's posted receive bytes equal
//! its column; in simple/full mode the tagged events carry the program's MPI tag.
//!
//! MPI_Init and MPI_Finalize with pml ucx make no tagged sends of their own here (Open MPI 4.1's
//! init and finalize synchronise through PMIx, not through the PML), so the whole tag_send count
//! is the pattern's: one per ordered pair. The test asserts that too (ops = size·(size−1)), so a
//! future Open MPI that adds traffic of its own would be noticed here, not silently absorbed.
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

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
    BIN.get_or_init(|| common::build_program("mpicc", "mpi_pattern.c", "mpi_pattern", &[]))
        .clone()
}

fn run(np: usize, tls: &str, mode: &'static str) {
    let ctx = format!("{np} ranks over UCX_TLS={tls}, {mode} mode");
    let dir = common::scratch(&format!("mpi-{np}-{}", tls.replace(',', "_")));
    let trace = Trace::new(mode, &dir);
    let mut cmd = Command::new(common::require("mpirun"));
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
    ])
    .args(["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any"])
    .args(["--mca", "pml_ucx_devices", "any", "--mca", "osc", "ucx"])
    .args([
        "-x",
        "LD_PRELOAD",
        "-x",
        "SIGMATOP_MODE",
        "-x",
        "SIGMATOP_RECORD",
    ])
    .args(["-x", "SIGMATOP_SOCKET_DIR", "-x", "UCX_TLS"])
    .arg(program())
    .env("UCX_TLS", tls);
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{ctx}: mpirun failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        common::stdout_of(&out),
        common::stderr_of(&out)
    );
    assert_eq!(
        common::stdout_of(&out).trim(),
        format!("mpi_pattern: {np} ranks done"),
        "{ctx}: program output"
    );
    assert!(
        !common::stderr_of(&out).contains("sigmatop"),
        "{ctx}: a sigmatop warning:\n{}",
        common::stderr_of(&out)
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
    assert_eq!(recv, col, "{ctx}: bytes each rank posted to receive");
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
