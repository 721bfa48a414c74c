//! The GPU doorbell path on a real GPU (tests/gpu/gpu_workload.cu): NVSHMEM IBGDA's host set-up
//! through cudart against the devx emulation, kernels that build WQEs in GPU memory in NVSHMEM's
//! formats (RC write, read, inline write, fetch-add, compare-swap, DOCA's double ring, a 64-byte
//! BlueFlame write by 8 lanes, a sweep of 1 to 1024 WQEs per doorbell, a 32-thread batch under one
//! doorbell) and the test NIC thread. Asserted as for the CPU-played GPU (tests/devx_doorbell.rs).
//! Needs a GPU and nvcc. Without a GPU it is skipped, visibly (tests/common `skip_gpu_test`:
//! stderr and the summary of scripts/test.sh), the one skip allowed on CI (CI has no GPU); on a
//! machine with a GPU, a missing nvcc is a failure.
//! On a GPU machine the same proof plus the benchmark: `bash tests/gpu/run_device.sh OUTDIR`.

#[path = "gpu/check.rs"]
mod check;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn have(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .output_bounded()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn build(dir: &Path) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu");
    let out = Command::new("gcc")
        .current_dir(dir)
        .args(["-O2", "-shared", "-fPIC", "-o", "libmlx5emu.so"])
        .arg(src.join("devx_emu.c"))
        .output_bounded()
        .expect("gcc");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let out = Command::new("nvcc")
        .current_dir(dir)
        .args(["-O2", "-arch=sm_90", "-I"])
        .arg(&src)
        .args(["-o", "gpu_workload"])
        .arg(src.join("gpu_workload.cu"))
        .args(["-L.", "-lmlx5emu", "-Xlinker"])
        .arg(format!("-rpath,{}", dir.display()))
        .output_bounded()
        .expect("nvcc");
    assert!(out.status.success(), "nvcc: {}", stderr_of(&out));
    dir.join("gpu_workload")
}

#[test]
fn gpu_doorbells_are_forwarded_and_recovered() {
    if gpu_here().is_none() {
        skip_gpu_test("no GPU here (run it on a GPU machine; see BENCHMARKS.md \"GPU doorbells\")");
        return;
    }
    assert!(
        have("nvcc", &["--version"]),
        "a GPU is here but nvcc is not on PATH: install the CUDA toolkit (nvcc builds tests/gpu/gpu_workload.cu)"
    );
    let dir = check::scratch_dir("gpu-doorbell");
    let exe = build(&dir);
    let cmd = || {
        let mut c = Command::new(&exe);
        c.arg("test");
        c
    };
    let base = check::run(cmd(), &dir, "base", &[], false);
    let rec = dir.join("rec");
    let log = dir.join("wqe.log");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
    ];
    let t = check::run(cmd(), &dir, "traced", &env, true);
    check::check_traced(&base, &t, &rec, Some(&log), "simple", 0);
    let rec = dir.join("rec-fwd");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_MODE", "aggregate".to_string()),
        ("SIGMATOP_GPU_WQE", "off".to_string()),
    ];
    let t = check::run(cmd(), &dir, "fwd", &env, true);
    check::check_traced(&base, &t, &rec, None, "aggregate", 0);
}
