//! `sigmatop demo` as a user types it: the bundled recordings replay from any directory, headless
//! with their exact figures, and in the dashboard in tmux. `sigmatop demo gpu` is NVIDIA's
//! NVSHMEM shmem_put_bw with 2 PEs on an H200 over the software mlx5 NIC
//! (fixtures/nvshmem/put_bw.gpumem.traced: 150 RDMA writes per QP on two QPs, 2,150,400 bytes,
//! as its NIC log says and tests/gpu_nvshmem.rs checks), and its doorbell view shows them.
mod common;

use std::process::Command;
use std::time::Duration;

use common::tmux::Tmux;

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
        out.matches("RDMA_WRITE 150×1.08 MB").count(),
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
