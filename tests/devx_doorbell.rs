//! The GPU doorbell path without a GPU (CI): the test-only devx emulation (tests/gpu/devx_emu.c),
//! a stand-in libcuda (tests/gpu/fake_cuda.c, resolved like cudart: dlsym cuGetProcAddress_v2 and
//! its self-lookup) and CPU threads playing the GPU (tests/gpu/devx_cpu.c) that build WQEs in
//! NVSHMEM's formats and ring doorbells through the pointer cuMemHostGetDevicePointer returned,
//! while a NIC thread executes them from the real UAR page. The same hijack, forwarding, decoding
//! and batching code as on the GPU runs here. Asserted: results identical with and without
//! sigmatop; every doorbell recorded; the recovery contract of tests/gpu/check.rs
//! (`check_recovery`: recovered + overwritten + dropped == posted, every recovered WQE's opcode,
//! bytes, remote address and rkey exactly what was posted at its index, every WQE in a slot never
//! reused recovered); 1 to 1024 WQEs in flight per doorbell; QPs torn down and their queues freed while a WQE copy
//! is still in flight; forward-only, batched copies, a small batch threshold,
//! a fork child that exits at once (without waiting for its parent's poller), and the CUDA layer
//! switched off (nothing hijacked, nothing broken). Each devx QP names the GPU
//! that drives it: the GPU of its send queue's memory, or, with the queues in host memory
//! registered with CUDA (NVSHMEM's NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem), the GPU of the
//! CUDA context that registered them (here the stand-in's device 3), whose WQEs are then read
//! with memcpy.

#[path = "gpu/check.rs"]
mod check;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn build(dir: &Path) -> PathBuf {
    let gcc = require("gcc");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu");
    let cc = |args: &[&str]| {
        let out = Command::new(&gcc)
            .current_dir(dir)
            .args(["-O2", "-Wall", "-I"])
            .arg(&src)
            .args(args)
            .output_bounded()
            .expect("run gcc");
        assert!(out.status.success(), "gcc {args:?}: {}", stderr_of(&out));
    };
    let s = |f: &str| src.join(f).to_string_lossy().into_owned();
    cc(&["-shared", "-fPIC", "-o", "libmlx5emu.so", &s("devx_emu.c")]);
    // -Bsymbolic: like the real driver, the fake's own table never points at interposed names.
    cc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcuda.so.1",
        "-Wl,-Bsymbolic",
        "-o",
        "libcuda.so.1",
        &s("fake_cuda.c"),
    ]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(&[
        "-o",
        "devx_cpu",
        &s("devx_cpu.c"),
        "-L.",
        "-lmlx5emu",
        &rpath,
        "-ldl",
        "-lpthread",
    ]);
    dir.join("devx_cpu")
}

fn cmd(exe: &Path, dir: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("LD_LIBRARY_PATH", dir);
    c
}

#[test]
fn cpu_played_gpu_doorbells_are_forwarded_and_recovered() {
    let dir = check::scratch_dir("devx-doorbell");
    let exe = build(&dir);
    let base = check::run(cmd(&exe, &dir), &dir, "base", &[], false);
    let out = stdout_of(&base.out);
    assert!(out.contains(" bad=0"), "{out}");
    assert_eq!(check::value(&out, "WQES "), base.list.len() as u64);

    // Simple mode, WQE recovery with one async copy per doorbell (the default).
    let rec = dir.join("rec-simple");
    let log = dir.join("wqe-simple.log");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "simple", &env, true);
    check::check_traced(&base, &t, &rec, Some(&log), "simple", 0);

    // Full mode, one copy per batch, a small batch threshold (many batch flushes, wrap).
    let rec = dir.join("rec-batch");
    let log = dir.join("wqe-batch.log");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "full".to_string()),
        ("SIGMATOP_WQE_COPY", "batch".to_string()),
        ("SIGMATOP_WQE_BATCH", "7".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "batch", &env, true);
    check::check_traced(&base, &t, &rec, Some(&log), "full", 0);

    // Two QPs bound to one UAR ring its one register back to back, 200 rounds: between two
    // reads of the poller QP 1's doorbell hides QP 0's. Every doorbell must still be forwarded
    // and every WQE of both QPs recovered (before: QP 0's doorbell was lost whenever hidden, its
    // WQEs unrecovered, and on hardware the QP would not have run). QP 0's doorbell record is in
    // GPU memory: the copier thread reads it and the poller forwards QP 0's doorbell when the
    // answer comes. This NIC, unlike hardware, runs a hidden QP's WQEs from its record at once
    // (tests/gpu/host.h), so the program may ring the next round before that answer: two of QP
    // 0's rings are then one doorbell (up to one per round, 200). QP 0's ring never wraps, so
    // had a hidden doorbell never been forwarded its WQEs would be missing (check_recovery).
    let shared = [("DEVX_CPU_SHARED_UAR", "1".to_string())];
    let base_sh = check::run(cmd(&exe, &dir), &dir, "base-shared", &shared, false);
    let rec = dir.join("rec-shared");
    let log = dir.join("wqe-shared.log");
    let env = [
        shared[0].clone(),
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "shared", &env, true);
    check::check_traced(&base_sh, &t, &rec, Some(&log), "simple", 200);
    // The poller applies each registration 300 ms late (SIGMATOP_TEST_FAULT=poller_late): the
    // program's first doorbell, rung right after its last registration, is in the shadow page
    // before the poller watches it. It is forwarded then (before: taken for the page's starting
    // value, never forwarded, and the program waited for its completion for ever; seen once in
    // 36 runs of this shared-register set-up without the fault, where the poller started its
    // copier thread before its first look).
    let rec_late = dir.join("rec-late");
    let log_late = dir.join("wqe-late.log");
    let env_late = [
        shared[0].clone(),
        ("SIGMATOP_RECORD", rec_late.display().to_string()),
        ("SIGMATOP_WQE_LOG", log_late.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
        ("SIGMATOP_TEST_FAULT", "poller_late".to_string()),
    ];
    let late = check::run(cmd(&exe, &dir), &dir, "late", &env_late, true);
    check::check_traced(&base_sh, &late, &rec_late, Some(&log_late), "simple", 200);
    eprintln!(
        "shared register: {} of {} doorbells made up from the record",
        check::stat(&t.out, "shared_register"),
        check::value(&stdout_of(&t.out), "DOORBELLS ")
    );

    // Slots reused before sigmatop's copy read them: 4 rounds of a whole ring (1024 WQEs) under
    // one doorbell each, the copies held 50 ms (the stand-in's slow copy engine), so each round
    // rewrites every slot of the previous one before its copy runs. Recovery cannot be exact
    // then; it must never be wrong: the recovery contract holds (every WQE reported is the one
    // the workload wrote at that index, every slot not read in time counted), and at least one
    // round was overwritten.
    let rec = dir.join("rec-reuse");
    let log = dir.join("wqe-reuse.log");
    let env = [
        ("DEVX_CPU_REUSE", "4".to_string()),
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "reuse", &env, true);
    let r = check::check_recovery(&t, &log, "reuse");
    assert!(
        r.overwritten >= 1024,
        "at least one round overwritten before its copy: {} overwritten",
        r.overwritten
    );

    // Teardown while the last WQE copy is in flight (the stand-in's copies wait 1.5 s for the
    // poller's synchronize): the program destroys the QPs and frees their send queues; sigmatop
    // must hold each destroy until the poller has finished with that queue (it gave up after
    // 200 ms, and the copy then read an unmapped queue: SIGSEGV). Every WQE still recovered.
    let rec = dir.join("rec-teardown");
    let log = dir.join("wqe-teardown.log");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
        ("DEVX_CPU_SLOW_TEARDOWN", "1500".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "teardown", &env, true);
    check::check_traced(&base, &t, &rec, Some(&log), "simple", 0);

    // Aggregate mode, forward only: doorbells counted, no WQE read.
    let rec = dir.join("rec-fwd");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_MODE", "aggregate".to_string()),
        ("SIGMATOP_GPU_WQE", "off".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "fwd", &env, true);
    check::check_traced(&base, &t, &rec, None, "aggregate", 0);

    // Every devx QP's GPU is the device of its queue's memory (the stand-in's device 0), even
    // though the CUDA context's device is another one.
    let gpus = |rec: &Path| -> Vec<Option<u32>> {
        let procs = sigmatop::trace::reader::Recording::open(&[rec.to_path_buf()])
            .expect("record")
            .processes;
        procs[0]
            .endpoints
            .iter()
            .filter(|e| e.kind == sigmatop::event::EndpointKind::DevxQp)
            .map(|e| e.gpu)
            .collect()
    };
    let rec = dir.join("rec-devq");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_MODE", "aggregate".to_string()),
        ("SIGMATOP_GPU_WQE", "off".to_string()),
        ("FAKE_CUDA_DEVICE", "3".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "devq", &env, true);
    check::check_traced(&base, &t, &rec, None, "aggregate", 0);
    let g = gpus(&rec);
    assert!(
        !g.is_empty() && g.iter().all(|g| *g == Some(0)),
        "queues in GPU memory: {g:?}"
    );

    // Send queues in host memory registered with CUDA: the QPs are driven by the GPU of the CUDA
    // context (device 3), and their WQEs are still recovered, by memcpy.
    let host = |name: &str| {
        let mut c = cmd(&exe, &dir);
        c.env("DEVX_CPU_HOST_QUEUES", "1");
        check::run(c, &dir, name, &[], false)
    };
    let base_host = host("base-host");
    assert!(stdout_of(&base_host.out).contains(" bad=0"));
    let rec = dir.join("rec-hostq");
    let log = dir.join("wqe-hostq.log");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
        ("FAKE_CUDA_DEVICE", "3".to_string()),
        ("DEVX_CPU_HOST_QUEUES", "1".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "hostq", &env, true);
    check::check_traced(&base_host, &t, &rec, Some(&log), "simple", 0);
    let g = gpus(&rec);
    assert!(
        !g.is_empty() && g.iter().all(|g| *g == Some(3)),
        "host-resident queues: {g:?}"
    );

    // A fork child of the traced program (its doorbell poller running) that exits at once: the
    // poller is the parent's, so the child's exit does not wait for it. Before, the child
    // believed the poller ran in it too and waited 500 ms for it to stop, at every exit of a
    // forked worker; now it takes milliseconds (300 ms leaves a margin of ~100x for a loaded
    // machine, and is still under the 500 ms the child waited). The parent's results and record
    // are those of the simple run above.
    let rec = dir.join("rec-fork");
    let log = dir.join("wqe-fork.log");
    let env = [
        ("SIGMATOP_RECORD", rec.display().to_string()),
        ("SIGMATOP_WQE_LOG", log.display().to_string()),
        ("SIGMATOP_MODE", "simple".to_string()),
        ("DEVX_CPU_FORK", "1".to_string()),
    ];
    let t = check::run(cmd(&exe, &dir), &dir, "fork", &env, true);
    let ms = check::value(&stdout_of(&t.out), "FORK child_exit_ms=");
    assert!(ms < 300, "the fork child took {ms} ms to exit");
    check::check_traced(&base, &t, &rec, Some(&log), "simple", 0);

    // The CUDA layer off: nothing is hijacked and the program is unchanged.
    let env = [("SIGMATOP_LAYERS", "-cuda".to_string())];
    let t = check::run(cmd(&exe, &dir), &dir, "nocuda", &env, true);
    assert_eq!(stdout_of(&base.out), stdout_of(&t.out));
}
