//! `sigmatop demo` as a user types it: the bundled recordings replay from any directory, headless
//! with their exact figures, and in the dashboard in tmux. `sigmatop demo` (mpi) is the 4-rank
//! Open MPI MoE-style exchange of fixtures/src/moe_demo.c, recorded by fixtures/make-demo.sh with
//! 120 steps: its figures here are computed from that program's `tokens()` (rank src sends
//! tokens(src, dst, step) 4-byte tokens to dst at each step), not read from the recording.
//! `sigmatop demo gpu` is NVIDIA's
//! NVSHMEM shmem_put_bw with 2 PEs on an H200 over the software mlx5 NIC
//! (fixtures/nvshmem/put_bw.gpumem.traced: 150 RDMA writes per QP on two QPs, 2,150,400 bytes,
//! as its NIC log says and tests/gpu_nvshmem.rs checks), and its doorbell view shows them.
mod common;

use std::process::Command;
use std::time::Duration;

use common::tmux::Tmux;
use common::{summary_bytes, summary_times, words};

/// fixtures/src/moe_demo.c's tokens(): how many 4-byte tokens rank `src` sends to `dst` at `step`.
fn tokens(src: u64, dst: u64, step: u64) -> u64 {
    let base = 2048 + 512 * ((src + step) % 4);
    let wave = if step % 40 < 20 {
        (step % 20) * 256
    } else {
        (20 - step % 20) * 256
    };
    (base + wave) * if dst == 2 { 3 } else { 1 }
}

/// fixtures/make-demo.sh ran it with 4 ranks and 120 steps.
const RANKS: u64 = 4;
const STEPS: u64 = 120;

/// Bytes rank `src` sent rank `dst` over the whole run.
fn pair(src: u64, dst: u64) -> u64 {
    if src == dst {
        return 0;
    }
    (0..STEPS).map(|s| 4 * tokens(src, dst, s)).sum()
}

fn egress(r: u64) -> u64 {
    (0..RANKS).map(|d| pair(r, d)).sum()
}

fn ingress(r: u64) -> u64 {
    (0..RANKS).map(|s| pair(s, r)).sum()
}

#[test]
fn demo_headless_has_the_moe_workloads_figures() {
    let o = Command::new(common::sigmatop_bin())
        .args(["demo", "--headless"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("sigmatop demo");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    let out = common::stdout_of(&o);
    let lines: Vec<&str> = out.lines().collect();
    let posts = (STEPS * (RANKS - 1)).to_string();
    for r in 0..RANKS {
        // host pid rank program tx rx tx-ops rx-ops lost: one MPI_Isend and one MPI_Irecv per
        // peer per step.
        let at = lines
            .iter()
            .position(|l| {
                let w = words(l);
                w.len() > 3 && w[2] == r.to_string() && w[3] == "moe_demo"
            })
            .unwrap_or_else(|| panic!("no row for rank {r}:\n{out}"));
        let w = words(lines[at]).join(" ");
        assert!(
            w.ends_with(&format!(
                "moe_demo {} {} {posts} {posts} 0",
                summary_bytes(egress(r)),
                summary_bytes(ingress(r))
            )),
            "rank {r}: {w}"
        );
        let block: Vec<String> = lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("    "))
            .map(|l| words(l).join(" "))
            .collect();
        for d in (0..RANKS).filter(|&d| d != r) {
            let want = format!("r{d} tag_send {}", summary_times(STEPS, pair(r, d)));
            assert!(
                block.iter().any(|l| l.ends_with(&want)),
                "rank {r}: {want:?} in {block:?}"
            );
        }
        let want = format!(
            "tag_recv {}",
            summary_times(STEPS * (RANKS - 1), ingress(r))
        );
        assert!(
            block.iter().any(|l| l.ends_with(&want)),
            "rank {r}: {want:?}"
        );
    }
    let all: u64 = (0..RANKS).map(egress).sum();
    let ops = STEPS * (RANKS - 1) * RANKS;
    let total = format!(
        "total: ▲ {b} in {ops} ops, ▼ {b} in {ops} ops; events lost 0",
        b = summary_bytes(all)
    );
    assert!(out.contains(&total), "{total:?}:\n{out}");
    // The rank × rank matrix of the summary, row by row, with each row's egress.
    for r in 0..RANKS {
        let row = lines
            .iter()
            .find(|l| words(l).first() == Some(&format!("r{r}")))
            .unwrap_or_else(|| panic!("no matrix row r{r}:\n{out}"));
        let mut want = vec![format!("r{r}")];
        for d in 0..RANKS {
            if d == r {
                want.push("·".into());
            } else {
                want.extend(summary_bytes(pair(r, d)).split(' ').map(str::to_string));
            }
        }
        want.extend(summary_bytes(egress(r)).split(' ').map(str::to_string));
        assert_eq!(words(row), want, "matrix row r{r}");
    }
}

#[test]
fn demo_as_typed_replays_to_the_moe_workloads_figures() {
    // `sigmatop demo`, at the recorded speed: 6 s of replay.
    let cmd = format!("{} demo", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-typed", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(40);
    t.wait_for("the replay to finish", limit, |s| {
        s.contains("replay finished")
    });
    t.keys(&["5"]);
    let m = t.wait_for("the matrix", limit, |s| s.contains("rank × rank"));
    let matrix: Vec<Vec<u64>> = (0..RANKS)
        .map(|r| (0..RANKS).map(|d| pair(r, d)).collect())
        .collect();
    common::assert_rank_matrix(&m, &matrix);
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

#[test]
fn demo_gpu_headless_has_the_perftests_figures() {
    let o = Command::new(common::sigmatop_bin())
        .args(["demo", "gpu", "--headless"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("sigmatop demo gpu");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    let out = common::stdout_of(&o);
    let pe0 = out
        .lines()
        .find(|l| l.contains("shmem_put_bw") && l.contains(" 0 "))
        .unwrap_or_else(|| panic!("PE 0's row:\n{out}"));
    assert!(pe0.contains("2.15 MB"), "{pe0}");
    assert_eq!(
        out.matches("RDMA_WRITE 150×7.17 kB = 1.08 MB").count(),
        2,
        "two QPs, 150 writes of 7168 B each:\n{out}"
    );
    assert!(
        out.contains("→ vm pid 595 r1"),
        "PE 0's QPs reach PE 1:\n{out}"
    );
}

#[test]
fn demo_gpu_doorbells_in_the_dashboard() {
    let cmd = format!("{} demo gpu --speed 0", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-gpu", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard", limit, |s| s.contains("demo gpu"));
    t.keys(&["d"]);
    let s = t.wait_for("GPU doorbells", limit, |s| {
        s.contains("GPU0") && s.contains("RDMA_WRITE")
    });
    assert!(!s.contains("no GPU-initiated doorbells"), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

#[test]
fn the_cpu_demo_points_at_the_gpu_one() {
    let cmd = format!("{} demo --speed 0", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-cpu", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard", limit, |s| s.contains("demo"));
    t.keys(&["d"]);
    t.wait_for("the hint", limit, |s| {
        s.contains("`sigmatop demo gpu` replays GPU doorbells")
    });
    t.keys(&["q"]);
}
