//! NVIDIA's NVSHMEM 3.4.5, unmodified, over the software mlx5 NIC (tests/testnic), untraced and
//! under sigmatop (issue 11, items 3-5):
//! - `harness_lets_only_the_nic_uar_through` (CPU, runs everywhere): the GPU harness
//!   (tests/gpu/nvshmem_harness.c) with the stand-in libcuda (tests/gpu/fake_cuda.c), which refuses
//!   IoMemory on RAM as CUDA does: NVSHMEM's registration of the NIC's UAR is refused without the
//!   harness, goes through with it, an ordinary RAM page with IoMemory is still refused; under
//!   sigmatop + harness sigmatop hijacks the registration itself (hijacks=1) and the harness is
//!   never reached (lookups_wrapped=0).
//! - `nvshmem_perftests_on_the_software_nic` (GPU machine, root): runs
//!   `bash tests/gpu/nvshmem_device.sh OUT proof` (NVIDIA's perftests with two PEs on one GPU, IBGDA
//!   only, NIC queues in GPU and host memory, untraced and traced; tests/gpu/nvshmem_check.py
//!   compares every WQE, byte count, matrix cell and peer) and then the record check below over
//!   every test and placement of the proof (all of them required). Without a GPU it is skipped
//!   visibly (tests/common `skip_gpu_test`), the one skip allowed on CI (CI has no GPU); with a
//!   GPU, anything else missing (nvcc, mpirun, root, the perftest sources) is a failure.
//! - `nvshmem_fixture_records_match_the_nic` (runs everywhere): the record check below over the
//!   committed recording of one such run (fixtures/nvshmem, shmem_put_bw, NIC queues in GPU memory).
//! - `nvshmem_records_match_the_nic`: the record check alone over the runs in `$NVSHMEM_RESULTS`
//!   (the device script runs it with a built copy of this test binary); without it, on a GPU
//!   machine, over the runs of the proof above (run once for both tests), and skipped visibly
//!   only where there is no GPU. Each traced process's GPU
//!   WQE events (bytes, remote address, the whole 32-bit rkey in schema-2 records, its low 16 bits in the schema-1 fixture)
//!   equal the NIC's log as multisets, sigmatop's WQE log (SIGMATOP_WQE_LOG, all 32 bits of the
//!   rkey) equals it QP by QP in order, and each RC devx QP that carried WQEs has an RTR peer with
//!   the NIC's GID and a QPN of the other process, mutually (the real device context's branch: an
//!   emulated context yields no GID).
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use sigmatop::event::{EndpointKind, Op};
use sigmatop::trace::reader::Recording;

/// The software NIC's port GID: ::ffff:127.0.0.1.
const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn nic_lib() -> PathBuf {
    let o = Command::new("bash")
        .arg(root().join("scripts/with-testnic.sh"))
        .arg("true")
        .output_bounded()
        .expect("scripts/with-testnic.sh");
    assert!(o.status.success(), "NIC build: {}", stderr_of(&o));
    root().join("target/testnic/lib")
}

fn gcc(dir: &Path, args: &[&str]) {
    let out = Command::new(require("gcc"))
        .current_dir(dir)
        .args(["-O2", "-Wall"])
        .args(args)
        .output_bounded()
        .expect("run gcc");
    assert!(out.status.success(), "gcc {args:?}: {}", stderr_of(&out));
}

fn field(text: &str, key: &str) -> Option<u64> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

#[test]
fn harness_lets_only_the_nic_uar_through() {
    let dir = scratch("nvshmem-harness");
    let lib = nic_lib();
    let src = root().join("tests/gpu");
    let s = |f: &str| src.join(f).to_string_lossy().into_owned();
    gcc(
        &dir,
        &[
            "-shared",
            "-fPIC",
            "-o",
            "libnvshmem_harness.so",
            &s("nvshmem_harness.c"),
            "-ldl",
        ],
    );
    gcc(
        &dir,
        &[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-Wl,-Bsymbolic",
            "-o",
            "libcuda.so.1",
            &s("fake_cuda.c"),
        ],
    );
    let l = format!("-L{}", lib.display());
    gcc(
        &dir,
        &[
            "-o",
            "harness_cpu",
            &s("harness_cpu.c"),
            &l,
            "-l:libmlx5.so.1",
            "-l:libibverbs.so.1",
            "-ldl",
        ],
    );
    let harness = dir.join("libnvshmem_harness.so").display().to_string();
    let run = |preload: Option<String>| {
        let mut c = Command::new(dir.join("harness_cpu"));
        c.env(
            "LD_LIBRARY_PATH",
            format!("{}:{}", lib.display(), dir.display()),
        )
        .env("SIGMATOP_GPU_STATS", "1")
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"));
        match preload {
            Some(p) => c.env("LD_PRELOAD", p),
            None => c.env_remove("LD_PRELOAD"),
        };
        let o = wait_timeout(spawn(&mut c), Duration::from_secs(60));
        assert!(
            o.status.success(),
            "harness_cpu: {}\n{}",
            stdout_of(&o),
            stderr_of(&o)
        );
        (stdout_of(&o), stderr_of(&o))
    };
    let line = |out: &str| -> (u64, u64, u64) {
        let l = out
            .lines()
            .find(|l| l.starts_with("harness_cpu "))
            .unwrap_or_else(|| panic!("no result line in {out}"));
        (
            field(l, "uar_register").expect("uar_register"),
            field(l, "uar_dptr").expect("uar_dptr"),
            field(l, "ram_iomem").expect("ram_iomem"),
        )
    };
    // The driver (stand-in) refuses IoMemory on the NIC's RAM UAR: CUDA_ERROR_INVALID_VALUE.
    let (out, _) = run(None);
    assert_eq!(line(&out), (1, 1, 1), "without the harness: {out}");
    // The harness lets exactly the UAR through, and nothing else.
    let (out, err) = run(Some(harness.clone()));
    assert_eq!(line(&out), (0, 0, 1), "with the harness: {out}\n{err}");
    assert_eq!(field(&err, "uar_retries"), Some(1), "{err}");
    assert_eq!(field(&err, "other_refusals"), Some(1), "{err}");
    // Under sigmatop first: sigmatop sees IoMemory and registers its shadow page; the harness's
    // dlsym is never reached.
    let (out, err) = run(Some(format!("{}:{harness}", preload().display())));
    assert_eq!(line(&out), (0, 0, 1), "under sigmatop: {out}\n{err}");
    assert_eq!(field(&err, "hijacks"), Some(1), "{err}");
    assert_eq!(field(&err, "hijack_failed"), Some(0), "{err}");
    assert_eq!(field(&err, "lookups_wrapped"), Some(0), "{err}");
    assert_eq!(field(&err, "uar_retries"), Some(0), "{err}");
}

/// One WQE of the NIC's log (tests/testnic/log.c).
#[derive(Debug)]
struct NicWqe {
    pid: u32,
    qpn: u32,
    idx: u32,
    opcode: u32,
    opmod: u32,
    len: u64,
    raddr: u64,
    rkey: u32,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn nic_log(dir: &Path) -> Vec<NicWqe> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("NIC log dir").flatten() {
        let text = std::fs::read_to_string(e.path()).expect("NIC log");
        // WQE lines only (TESTNIC_STALL / TESTNIC_FAIL add `testnic-event` lines).
        for l in text.lines().filter(|l| l.starts_with("testnic pid=")) {
            let f = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("NIC log line without {k}: {l}"))
            };
            out.push(NicWqe {
                pid: f("pid").parse().expect("pid"),
                qpn: hex(f("qpn")) as u32,
                idx: f("idx").parse().expect("idx"),
                opcode: hex(f("opcode")) as u32,
                opmod: hex(f("opmod")) as u32,
                len: f("len").parse().expect("len"),
                raddr: hex(f("raddr")),
                rkey: hex(f("rkey")) as u32,
            });
        }
    }
    out
}

/// The GPU op an mlx5 opcode becomes in sigmatop's events (write, read, atomic), if any.
fn op_of(opcode: u32) -> Option<Op> {
    match opcode {
        0x08 | 0x09 => Some(Op::GpuWrite),
        0x10 => Some(Op::GpuRead),
        0x11 | 0x12 | 0x14 | 0x15 => Some(Op::GpuAtomic),
        _ => None,
    }
}

/// Checks every traced run under `work` (TEST.MEM.traced directories of nvshmem_device.sh);
/// returns the number of runs checked.
fn check_records(work: &Path) -> usize {
    let mut checked = 0;
    let mut runs: Vec<PathBuf> = std::fs::read_dir(work)
        .expect("results dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".traced") && !n.starts_with("fig4"))
        })
        .collect();
    runs.sort();
    for run in runs {
        let ctx = run.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        if !run.join("rec").is_dir() {
            panic!("{ctx}: no record");
        }
        let rec = Recording::open(&[run.join("rec")]).expect("open record");
        assert!(rec.problems.is_empty(), "{ctx}: {:?}", rec.problems);
        let nic = nic_log(&run.join("nic"));
        let pid_of = |r: u32| -> u32 {
            std::fs::read_to_string(run.join(format!("pid.{r}")))
                .expect("pid file")
                .trim()
                .parse()
                .expect("pid")
        };
        let pids = [pid_of(0), pid_of(1)];
        // QPN -> owning pid, from the NIC log.
        let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
        for w in &nic {
            owner.insert(w.qpn, w.pid);
        }
        for (rank, &pid) in pids.iter().enumerate() {
            let p = rec
                .processes
                .iter()
                .find(|p| p.identity.pid == pid)
                .unwrap_or_else(|| panic!("{ctx}: PE{rank} (pid {pid}) not recorded"));
            let mut probs = Vec::new();
            let evs = p.read_all_events(&mut probs);
            assert!(probs.is_empty(), "{ctx}: {probs:?}");
            // Schema 1 (the committed fixture) kept the rkey's low 16 bits, schema 2 all of them.
            let rkey_mask = if p.schema >= 2 { u32::MAX } else { 0xffff };
            let mut got: Vec<(u8, u64, u64, u32)> = evs
                .iter()
                .filter(|e| {
                    [Op::GpuWrite, Op::GpuRead, Op::GpuAtomic]
                        .iter()
                        .any(|o| *o as u8 == e.op)
                })
                .map(|e| (e.op, e.bytes, e.addr, e.aux))
                .collect();
            let mut want: Vec<(u8, u64, u64, u32)> = nic
                .iter()
                .filter(|w| w.pid == pid)
                .filter_map(|w| {
                    op_of(w.opcode).map(|o| (o as u8, w.len, w.raddr, w.rkey & rkey_mask))
                })
                .collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(
                got.len(),
                want.len(),
                "{ctx}: PE{rank} WQE events vs the NIC log"
            );
            assert!(
                got == want,
                "{ctx}: PE{rank} WQE events (op, bytes, raddr, rkey) differ from the NIC log"
            );
            // Every RC devx QP that carried WQEs: an RTR peer with the NIC's GID and a QPN of the
            // other process, mutual.
            let mine: Vec<u32> = owner
                .iter()
                .filter(|(_, o)| **o == pid)
                .map(|(q, _)| *q)
                .collect();
            for q in mine {
                let Some(ep) = p
                    .endpoints
                    .iter()
                    .find(|e| e.kind == EndpointKind::DevxQp && e.qpn == Some(q))
                else {
                    panic!("{ctx}: PE{rank} QP {q:#x} is no devx QP of the record");
                };
                if ep.transport != "RC" {
                    continue;
                }
                let peer = p
                    .updates
                    .iter()
                    .rfind(|u| u.id == ep.id && u.state == "RTR")
                    .and_then(|u| u.peer.clone())
                    .unwrap_or_else(|| panic!("{ctx}: PE{rank} QP {q:#x} has no RTR peer"));
                assert_eq!(peer.gid, Some(GID), "{ctx}: PE{rank} QP {q:#x} peer GID");
                let other = pids[1 - rank];
                let pq = peer.qpn.expect("peer QPN");
                let o = rec
                    .processes
                    .iter()
                    .find(|p| p.identity.pid == other)
                    .expect("other PE recorded");
                let oep = o
                    .endpoints
                    .iter()
                    .find(|e| e.kind == EndpointKind::DevxQp && e.qpn == Some(pq))
                    .unwrap_or_else(|| {
                        panic!("{ctx}: PE{rank} QP {q:#x}'s peer {pq:#x} is no QP of the other PE")
                    });
                let back = o
                    .updates
                    .iter()
                    .rfind(|u| u.id == oep.id && u.state == "RTR")
                    .and_then(|u| u.peer.clone())
                    .and_then(|p| p.qpn);
                assert_eq!(
                    back,
                    Some(q),
                    "{ctx}: peers of {q:#x} and {pq:#x} not mutual"
                );
            }
            // sigmatop's WQE log (SIGMATOP_WQE_LOG; every traced run keeps one): every WQE with
            // all 32 bits of the rkey, QP by QP in order, = the NIC's.
            let wlog = run.join(format!("wqe.{rank}.log"));
            {
                let text = std::fs::read_to_string(&wlog).unwrap_or_else(|e| {
                    panic!(
                        "{ctx}: PE{rank}: sigmatop's WQE log {}: {e}",
                        wlog.display()
                    )
                });
                let key = |w: &str| -> u64 {
                    let v = w.split_whitespace().next().unwrap_or_default();
                    if let Some(h) = v.strip_prefix("0x") {
                        u64::from_str_radix(h, 16).unwrap_or_else(|e| panic!("{v}: {e}"))
                    } else {
                        v.parse().unwrap_or_else(|e| panic!("{v}: {e}"))
                    }
                };
                let mut got: BTreeMap<u32, Vec<[u64; 6]>> = BTreeMap::new();
                for l in text.lines().filter(|l| l.starts_with("wqe ")) {
                    let f = |k: &str| {
                        key(l
                            .split_whitespace()
                            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
                            .unwrap_or_else(|| panic!("WQE log line without {k}: {l}")))
                    };
                    got.entry(f("qpn") as u32).or_default().push([
                        f("idx"),
                        f("opcode"),
                        f("opmod"),
                        f("bytes"),
                        f("raddr"),
                        f("rkey"),
                    ]);
                }
                let mut want: BTreeMap<u32, Vec<[u64; 6]>> = BTreeMap::new();
                for w in nic.iter().filter(|w| w.pid == pid) {
                    want.entry(w.qpn).or_default().push([
                        u64::from(w.idx),
                        u64::from(w.opcode),
                        u64::from(w.opmod),
                        w.len,
                        w.raddr,
                        u64::from(w.rkey),
                    ]);
                }
                assert!(
                    got == want,
                    "{ctx}: PE{rank} sigmatop's WQE log (idx, opcode, opmod, bytes, raddr, 32-bit rkey per QP) differs from the NIC log"
                );
            }
            eprintln!(
                "{ctx}: PE{rank}: {} GPU WQE events = NIC log (op, bytes, raddr, rkey {}); WQE log = NIC log (32-bit rkey); RC peers matched with GID",
                got.len(),
                if rkey_mask == u32::MAX {
                    "all 32 bits"
                } else {
                    "low 16 bits (schema 1)"
                }
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn nvshmem_records_match_the_nic() {
    let n = match std::env::var_os("NVSHMEM_RESULTS") {
        Some(dir) => {
            let n = check_records(Path::new(&dir));
            assert!(n > 0, "no traced runs in {}", dir.to_string_lossy());
            n
        }
        None if gpu_here().is_none() => {
            skip_gpu_test(
                "no GPU and no NVSHMEM_RESULTS (the runs of tests/gpu/nvshmem_device.sh on a GPU machine)",
            );
            return;
        }
        // A GPU is here: the runs it checks are made (the proof, once for both tests).
        None => check_records(proof_runs()),
    };
    eprintln!("{n} traced runs checked");
}

/// The committed recording of NVIDIA's shmem_put_bw, two PEs on an H200 over the software NIC
/// (fixtures/README.md), against the NIC log of the same run: runs everywhere.
#[test]
fn nvshmem_fixture_records_match_the_nic() {
    assert_eq!(check_records(&root().join("fixtures/nvshmem")), 1);
}

/// The proof's perftests and queue placements, all required.
const PROOF_TESTS: [&str; 5] = ["put_bw", "get_bw", "p_latency", "put_latency", "atomic_bw"];
const PROOF_MEMS: [&str; 2] = ["gpumem", "hostmem"];

fn have(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .output_bounded()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The proof's runs on this GPU machine (`bash tests/gpu/nvshmem_device.sh OUT proof`), made once
/// per test binary for the tests that need them: its work directory. Fails with what is missing
/// (nvcc, mpirun, root, the perftest sources) or what the script printed.
fn proof_runs() -> &'static Path {
    static RUNS: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let made = RUNS.get_or_init(|| {
        let src = std::env::var_os("PERFTEST_SRC")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join(".device/perftest"));
        // SAFETY: geteuid has no preconditions.
        let root_user = unsafe { libc::geteuid() } == 0;
        let missing = [
            (!have("nvcc", &["--version"]), "no nvcc"),
            (!have("mpirun", &["--version"]), "no mpirun"),
            (
                !root_user,
                "not root (the NIC's sysfs entry needs a mount namespace)",
            ),
            (
                !src.join("device/pt-to-pt/shmem_put_bw.cu").is_file(),
                "no NVSHMEM v3.4.5 perftest sources (PERFTEST_SRC)",
            ),
        ];
        let missing: Vec<&str> = missing.iter().filter(|m| m.0).map(|m| m.1).collect();
        if !missing.is_empty() {
            return Err(format!(
                "a GPU is here but the NVSHMEM proof cannot run: {} (tests/gpu/nvshmem_device.sh says what it needs)",
                missing.join(", ")
            ));
        }
        let out = scratch("nvshmem-device");
        let work = out.join("work");
        let o = Command::new("bash")
            .current_dir(root())
            .arg("tests/gpu/nvshmem_device.sh")
            .arg(&out)
            .arg("proof")
            .env("NVT_WORK", &work)
            .env("NVT_TESTS", PROOF_TESTS.join(" "))
            .env("NVT_MEMS", PROOF_MEMS.join(" "))
            .env("PERFTEST_SRC", &src)
            .env("PRE", preload())
            .env("SIGMATOP", sigmatop_bin())
            .env("TESTNIC_LIB", nic_lib())
            // It builds NVSHMEM's perftests with nvcc, then runs ten of them traced.
            .output_within(std::time::Duration::from_secs(3600))
            .map_err(|e| format!("cannot run nvshmem_device.sh: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "nvshmem_device.sh failed:\n{}\n{}",
                stdout_of(&o),
                stderr_of(&o)
            ));
        }
        Ok(work)
    });
    match made {
        Ok(w) => w,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn nvshmem_perftests_on_the_software_nic() {
    if gpu_here().is_none() {
        skip_gpu_test(
            "no GPU (run it on a GPU machine: bash tests/gpu/nvshmem_device.sh OUT proof; see BENCHMARKS.md \"GPU doorbells\")",
        );
        return;
    }
    // Every test of the proof in both placements (nvshmem_device.sh's TESTS × MEMS).
    assert_eq!(
        check_records(proof_runs()),
        PROOF_TESTS.len() * PROOF_MEMS.len(),
        "traced runs checked"
    );
}
