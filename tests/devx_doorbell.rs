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
//! with memcpy. And a "GPU" that stops ringing (DEVX_CPU_STOP, issue 40 item 3): said by `run
//! --hang-after`, in `attach --json`'s gpu_stops[] and on the doorbell view in tmux, its return
//! said once.

#[path = "gpu/check.rs"]
mod check;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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

/// The tests of this file one at a time: each spins CPU threads (the "GPU", the NIC, sigmatop's
/// poller), and two at once on a 2-core machine starve what one of them times (a fork child's
/// exit).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn cmd(exe: &Path, dir: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("LD_LIBRARY_PATH", dir);
    c
}

#[test]
fn cpu_played_gpu_doorbells_are_forwarded_and_recovered() {
    let _one = one_at_a_time();
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

/// A GPU kernel that stops putting (issue 40 item 3), seen live: devx_cpu's "GPU" rings its
/// single scenario, then stops (DEVX_CPU_STOP) while the process and its QPs go on, under
/// `sigmatop run --hang-after 1s`. sigmatop says the GPU stopped, naming the process, GPU0 and a
/// QP it saw rung, once its doorbells stood still for the threshold (not before, within the
/// threshold, an interval and slack of the program's "STOPPED"); when the "kernel" rings again it
/// says so, once; and the program ends as it does untraced.
#[test]
fn a_gpu_that_stops_ringing_is_named_and_its_return_said() {
    let _one = one_at_a_time();
    let dir = check::scratch_dir("devx-gpu-stop");
    let exe = build(&dir);
    let flag = dir.join("go");
    let done = dir.join("go.done");
    let mut c = Command::new(sigmatop_bin());
    c.args(["run", "--hang-after", "1s", "--"])
        .arg(&exe)
        .arg(dir.join("stop.list"))
        .env("LD_LIBRARY_PATH", &dir)
        .env("DEVX_CPU_STOP", &flag)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env_remove("LD_PRELOAD")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = spawn(&mut c).into_child();
    let out = PipeReader::new(child.stdout.take().expect("stdout"));
    let err = PipeReader::new(child.stderr.take().expect("stderr"));
    let child = guard(child);
    let limit = Duration::from_secs(60);
    out.wait_for("STOPPED", limit);
    let stopped = Instant::now();
    let warn = err.wait_for("sigmatop: ⚠ no GPU doorbell from ", limit);
    let after = stopped.elapsed().as_secs_f64();
    let line = warn
        .lines()
        .find(|l| l.contains("⚠ no GPU doorbell from "))
        .unwrap_or_default()
        .to_string();
    // At least the threshold after its last doorbell, which came before "STOPPED"; at most the
    // threshold, one 250 ms snapshot, the 100 ms check and a loaded machine's slack after it.
    assert!(
        after <= 1.0 + 0.25 + 0.1 + 1.5,
        "warned {after:.2}s after STOPPED: {line}"
    );
    assert!(
        line.contains(" GPU") && line.contains("(QP 0x") && line.contains("s ("),
        "{line}"
    );
    eprintln!("{after:.2}s after STOPPED: {line}");
    // The same stop in `attach --json --once`, collecting 2 s (what it saw is all it knows: the
    // quiet time is at least those 2 s) with a 1 s threshold: the one GPU, both QPs, the
    // warning's words.
    let sock = dir.join("sock");
    let v = wait_until("the stopped GPU in attach's gpu_stops[]", limit, || {
        let mut c = Command::new(sigmatop_bin());
        c.args(["attach", "--json", "--once", "--interval-ms", "2000"])
            .args(["--hang-after", "1s"])
            .env("SIGMATOP_SOCKET_DIR", &sock)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let o = wait_timeout(spawn(&mut c), Duration::from_secs(20));
        let text = stdout_of(&o);
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) if v["gpu_stops"].as_array().is_some_and(|a| !a.is_empty()) => Ok(v),
            _ => Err(text),
        }
    });
    let g = &v["gpu_stops"][0];
    assert_eq!((&g["gpu"], &g["qps"]), (&0.into(), &2.into()), "{g:#}");
    assert!(g["quiet_s"].as_f64().unwrap_or(0.0) >= 1.0, "{g:#}");
    assert!(
        g["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("no GPU doorbell from ")),
        "{g:#}"
    );
    std::fs::write(&flag, b"").expect("flag");
    out.wait_for("RESUMED", limit);
    // (A loaded machine may starve the process's collector for a second: its silence is said
    // too, and the GPU's stop stands through it.)
    let back = err.wait_for(" GPU0: doorbells again after ", limit);
    let back = back
        .lines()
        .find(|l| l.contains(" GPU0: doorbells again after "))
        .unwrap_or_default()
        .to_string();
    assert!(
        !err.text().contains(": no longer judged"),
        "the stop ended otherwise:\n{}",
        err.text()
    );
    eprintln!("{back}");
    std::fs::write(&done, b"").expect("done flag");
    let o = child.finish(limit);
    let text = err.finish();
    assert!(o.status.success(), "exit {:?}\n{text}", o.status);
    // Said once each: one stop, one return.
    assert_eq!(text.matches("⚠ no GPU doorbell from ").count(), 1, "{text}");
    assert_eq!(
        text.matches(": doorbells again after ").count(),
        1,
        "{text}"
    );
    let o = out.finish();
    assert!(o.contains(" bad=0"), "{o}");
}

/// The same stop on the dashboard, as a person over ssh sees it (tmux, 80×24 and 200×60):
/// `sigmatop run --hang-after 1s` of devx_cpu stopped with DEVX_CPU_STOP; `d` opens the doorbell
/// view, whose GPU0 row reads "stop" and how long where its rate stands; when the "kernel"
/// rings again the row shows a rate, and the program ends with status 0.
#[test]
fn the_doorbell_view_marks_a_gpu_that_stopped() {
    let _one = one_at_a_time();
    let dir = check::scratch_dir("devx-gpu-stop-tmux");
    let exe = build(&dir);
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let flag = dir.join(format!("go-{w}"));
        let line = format!(
            "env LD_LIBRARY_PATH={d} DEVX_CPU_STOP={f} SIGMATOP_SOCKET_DIR={d}/sock-{w} {s} run --hang-after 1s -- {e} {d}/tmux-{w}.list",
            d = dir.display(),
            f = flag.display(),
            s = sigmatop_bin().display(),
            e = exe.display(),
        );
        let Some(t) =
            common::tmux::Tmux::start_sized(&format!("gpu-stop-{w}"), &line, Some(&dir), w, h)
        else {
            return;
        };
        let limit = Duration::from_secs(60);
        t.wait_for("the dashboard", limit, |s| s.contains("devx_cpu running"));
        t.keys(&["d"]);
        let row = |s: &str| -> Option<String> {
            s.lines()
                .find(|l| l.contains(" GPU0 ") && l.contains("db/s"))
                .map(str::to_string)
        };
        let screen = t.wait_for("GPU0's row marked stopped", limit, |s| {
            row(s).is_some_and(|r| r.contains(" stop "))
        });
        let r = row(&screen).unwrap_or_default();
        // "stop 1.2s": how long, where the rate stands.
        let age = r
            .split(" stop ")
            .nth(1)
            .and_then(|x| x.split_whitespace().next())
            .unwrap_or_default();
        assert!(
            age.ends_with('s') && age.trim_end_matches('s').parse::<f64>().is_ok(),
            "{w}x{h}: {r}\n{screen}"
        );
        std::fs::write(&flag, b"").expect("flag");
        t.wait_for("GPU0's row with a rate again", limit, |s| {
            row(s).is_some_and(|r| r.contains("/s") && !r.contains(" stop "))
        });
        std::fs::write(dir.join(format!("go-{w}.done")), b"").expect("done flag");
        t.wait_for("the program to end", limit, |s| {
            s.contains("devx_cpu exited")
        });
        t.keys(&["q"]);
        let done = t.wait_for("sigmatop to exit", limit, |s| s.contains("SIGMATOP-EXIT="));
        assert!(done.contains("SIGMATOP-EXIT=0"), "{w}x{h}: {done}");
    }
}
