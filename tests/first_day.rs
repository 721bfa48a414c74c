//! What a first-time user meets on the command line (issue 16, items 5, 7, 8 and 9), with real
//! programs (ucx_perftest over tcp, Open MPI, fi_pingpong) under the real preload:
//!
//! - stopping and statuses: a record cut by Ctrl-C says why its operations and events differ
//!   (exact figures from the record); `attach --once` does not call running processes cut;
//!   `attach` of a missing or untraced PID, and a headless attach with nothing to show, say so;
//!   stale sockets of killed processes are removed by the next attach;
//! - layers and launchers: `--layers -cuda` as the README spells it, `--layers foo` an error with
//!   the valid names, a switched-off layer named at the end of a run, Open MPI's ob1 PML named
//!   with `--mca pml ucx` as the fix;
//! - output scripts can use: `run --json FILE`, `run --json` with stdout holding the JSON only,
//!   `export --json` saying what it wrote;
//! - paths: a missing one is "no such file or directory", a recording nothing of which can be
//!   read fails with the reason first and writes no file; `--help` documents the flags.
//!
//! ucx_perftest's figures: with `-w 1` the warm-up is one iteration, so a tag_bw client of `-n N`
//! posts exactly N + 1 tagged sends of `-s` bytes (tests/ucx_perftest.rs derives this).
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(90);
const SIZE: u64 = 4096;

/// A ucx_perftest server over tcp, traced into `sock` (live only) when `traced`.
fn server(sock: &Path, traced: bool) -> (Proc, u16) {
    ucx_perftest_server("tcp", |cmd| {
        if traced {
            cmd.env("LD_PRELOAD", preload())
                .env("SIGMATOP_MODE", "simple")
                .env("SIGMATOP_SOCKET_DIR", sock)
                .env_remove("SIGMATOP_RECORD");
        }
    })
}

/// The arguments of a tag_bw client of `n` iterations.
fn client_args(port: u16, n: u64) -> Vec<String> {
    [
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "tag_bw",
        "-n",
        &n.to_string(),
        "-s",
        &SIZE.to_string(),
        "-w",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `sigmatop ARGS... -- ucx_perftest CLIENT` with its sockets in `sock`.
fn sigmatop_client(sock: &Path, args: &[&str], port: u16, n: u64) -> Command {
    let mut cmd = Command::new(sigmatop_bin());
    cmd.args(args)
        .arg("--")
        .arg(require("ucx_perftest"))
        .args(client_args(port, n))
        .env("UCX_TLS", "tcp")
        .env("SIGMATOP_SOCKET_DIR", sock);
    cmd
}

fn sigmatop(args: &[&str]) -> Output {
    Command::new(sigmatop_bin())
        .args(args)
        .stdin(Stdio::null())
        .output_bounded()
        .expect("sigmatop runs")
}

/// Ends a process the test started (and all it started).
fn finish(c: Proc) {
    drop(c);
}

/// A pid that no process has: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let c = spawn(&mut Command::new("true"));
    let pid = c.id();
    wait_timeout(c, LIMIT);
    pid
}

/// "total: ▲ 1.23 MB in 301 ops, ..." → 301.
fn total_tx_ops(summary: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with("total: ▲"))
        .unwrap_or_else(|| panic!("no total line in:\n{summary}"));
    let after = line.split(" in ").nth(1).expect("' in N ops'");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no op count in {line:?}"))
}

// ---- Item 5: stopping and statuses ----

/// `sigmatop --record out -- ucx_perftest` stopped by Ctrl-C: the terminal sends SIGINT to the
/// whole job (here: the process group sigmatop leads); sigmatop outlives the program and reports.
#[test]
fn a_record_cut_by_ctrl_c_says_why_operations_and_events_differ() {
    let dir = scratch("ctrl-c-record");
    let sock = dir.join("sock");
    let rec = dir.join("out");
    let (srv, port) = server(&sock, false);
    let mut cmd = sigmatop_client(
        &sock,
        &["--record", rec.to_str().expect("utf-8 path")],
        port,
        100_000_000,
    );
    cmd.process_group(0);
    let job = spawn(&mut cmd);
    // Until the record on disk holds a snapshot of more than 1,000 sends (several snapshots and
    // flushed chunks in).
    wait_until(
        "a snapshot of more than 1,000 tag sends in the record",
        LIMIT,
        || {
            let seen = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&rec))
                .map_err(|e| format!("the record does not open yet: {e}"))?
                .processes
                .iter()
                .filter_map(|p| p.last_snapshot())
                .flat_map(|s| s.counts.iter())
                .filter(|c| c.op == sigmatop::event::Op::UcxTagSend as u8)
                .map(|c| c.ops)
                .sum::<u64>();
            if seen > 1000 {
                Ok(())
            } else {
                Err(format!("{seen} tag sends"))
            }
        },
    );
    // SAFETY: kill(2) of the process group of a child this test started.
    unsafe {
        libc::kill(-(job.id() as i32), libc::SIGINT);
    }
    let out = wait_timeout(job, LIMIT);
    finish(srv);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(130), "128 + SIGINT:\n{err}");

    // The record: cut, with the counters of its last snapshot and events up to its last flush.
    let recording = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&rec))
        .expect("the cut record opens");
    assert_eq!(recording.processes.len(), 1);
    let p = &recording.processes[0];
    assert!(p.is_cut());
    let snap_ops: u64 = p
        .last_snapshot()
        .expect("snapshots were written")
        .counts
        .iter()
        .filter(|c| c.op == sigmatop::event::Op::UcxTagSend as u8)
        .map(|c| c.ops)
        .sum();
    let mut probs = Vec::new();
    let on_disk = p.read_all_events(&mut probs).len() as u64;
    assert!(
        probs.iter().all(|p| p.what.contains("cut inside")),
        "{probs:?}"
    );
    // Both stop where the program was stopped, at different points: the last snapshot (every
    // 250 ms) and the last flushed chunk (every 100 ms), either of which can be the later one
    // (measured here: events 1,800 behind the snapshot's sends when stopped at 0.5 s, 12,000
    // ahead at 2 s).
    assert!(
        snap_ops > 1000 && on_disk > 1000,
        "sends in the last snapshot {snap_ops}, events on disk {on_disk}"
    );

    // The summary: the snapshot's figure, labelled as such.
    assert_eq!(total_tx_ops(&err), snap_ops, "{err}");
    assert!(
        err.contains("(no clean exit: counted up to its last snapshot)"),
        "{err}"
    );
    assert!(
        err.contains("1 process ended without a clean exit (killed, Ctrl-C, a crash): its figures are those of its last snapshot"),
        "{err}"
    );
    // The report: the events on disk, and why they are more.
    let rep = sigmatop(&["report", rec.to_str().expect("utf-8")]);
    assert!(rep.status.success(), "{}", stderr_of(&rep));
    let text = stdout_of(&rep);
    let line = text
        .lines()
        .find(|l| l.starts_with("events: "))
        .unwrap_or_else(|| panic!("no events line:\n{text}"));
    assert_eq!(
        line,
        format!(
            "events: {on_disk} in the record; 1 process ended without a clean exit, so its operation totals above stop at its last snapshot while its events go on to its last flushed chunk"
        )
    );
}

#[test]
fn attach_once_does_not_call_running_processes_cut_and_removes_stale_sockets() {
    let dir = scratch("attach-once-status");
    let sock = dir.join("sock");
    let (mut srv, port) = server(&sock, true);
    let mut client = Command::new(require("ucx_perftest"));
    client
        .args(client_args(port, 100_000_000))
        .env("UCX_TLS", "tcp")
        .env("LD_PRELOAD", preload())
        .env("SIGMATOP_SOCKET_DIR", &sock)
        .env_remove("SIGMATOP_RECORD");
    let mut client = spawn(&mut client);
    // Until both serve their live sockets.
    for pid in [srv.id(), client.id()] {
        let s = sock.join(format!("{}-{pid}.sock", sigmatop::live::socket_host()));
        wait_until(&format!("pid {pid}'s live socket"), LIMIT, || {
            std::os::unix::net::UnixStream::connect(&s)
                .map(drop)
                .map_err(|e| format!("{}: {e}", s.display()))
        });
    }
    let sock_arg = sock.to_str().expect("utf-8");
    let out = sigmatop(&[
        "attach",
        "--once",
        "--interval-ms",
        "600",
        "--socket-dir",
        sock_arg,
    ]);
    let text = stdout_of(&out);
    assert!(out.status.success(), "{}", stderr_of(&out));
    for pid in [srv.id(), client.id()] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("pid {pid} listed:\n{text}"));
        assert!(!row.contains("clean exit"), "running, not cut: {row}");
    }
    assert!(!text.contains("ended without a clean exit"), "{text}");

    // SIGKILL leaves both sockets behind; the next attach removes them and says so.
    let names: Vec<PathBuf> = [srv.id(), client.id()]
        .iter()
        .map(|pid| sock.join(format!("{}-{pid}.sock", sigmatop::live::socket_host())))
        .collect();
    for c in [&mut client, &mut srv] {
        let _ = c.kill();
        let _ = c.wait();
    }
    for n in &names {
        assert!(n.exists(), "{} left behind by SIGKILL", n.display());
    }
    let out = sigmatop(&[
        "attach",
        "--once",
        "--interval-ms",
        "200",
        "--socket-dir",
        sock_arg,
    ]);
    let err = stderr_of(&out);
    for n in &names {
        assert!(!n.exists(), "{} removed", n.display());
        assert!(
            err.contains(&format!(
                "removed stale socket {} (its process is gone)",
                n.display()
            )),
            "{err}"
        );
    }
    // Nothing else is running there: said, and a failure for --once.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no traced process found in"), "{err}");
}

#[test]
fn attach_to_a_missing_or_an_untraced_pid_says_so() {
    let dir = scratch("attach-pid");
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).expect("socket dir");
    let sock_arg = sock.to_str().expect("utf-8");
    let gone = dead_pid();
    for extra in [&["--once"][..], &[]] {
        let mut args = vec!["attach", "--socket-dir", sock_arg];
        args.extend_from_slice(extra);
        let gone_s = gone.to_string();
        args.push(&gone_s);
        let out = sigmatop(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            stderr_of(&out),
            format!("sigmatop: no process with pid {gone} on this host\n")
        );
    }
    // Running but not traced: --once says so; without --once, once it exits, sigmatop stops.
    let mut sleeper = guard(Command::new("sleep").arg("2").spawn().expect("sleep"));
    let pid = sleeper.id().to_string();
    let out = sigmatop(&["attach", "--once", "--socket-dir", sock_arg, &pid]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).starts_with(&format!(
            "sigmatop: pid {pid} is running but not traced: no socket in {sock_arg}"
        )),
        "{}",
        stderr_of(&out)
    );
    let start = Instant::now();
    let follow = spawn(Command::new(sigmatop_bin()).args([
        "attach",
        "--interval-ms",
        "100",
        "--socket-dir",
        sock_arg,
        &pid,
    ]));
    wait_until("the untraced sleep 2 to end", LIMIT, || {
        match sleeper.try_wait() {
            Ok(Some(_)) => Ok(()),
            _ => Err("still running".into()),
        }
    });
    let out = wait_timeout(follow, Duration::from_secs(20));
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout_of(&out), "", "no empty tables");
    let err = stderr_of(&out);
    assert_eq!(
        err.matches("waiting for one").count(),
        1,
        "said once: {err}"
    );
    assert!(
        err.ends_with(&format!(
            "sigmatop: pid {pid} exited without being traced\n"
        )),
        "{err}"
    );
}

#[test]
fn headless_attach_with_nothing_traced_says_so_once_and_prints_no_tables() {
    let dir = scratch("attach-nothing");
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).expect("socket dir");
    let mut attach = spawn(
        Command::new(sigmatop_bin())
            .args(["attach", "--interval-ms", "100", "--socket-dir"])
            .arg(&sock),
    );
    let want = format!(
        "sigmatop: no traced process found in {} (start one with `sigmatop run -- CMD`, or set --socket-dir); waiting for one (Ctrl-C stops)\n",
        sock.display()
    );
    // The line, once it has come (however slow the machine), then a second (ten looks of
    // 100 ms) that must add nothing: no empty table, no second line.
    let err = PipeReader::new(attach.stderr.take().expect("stderr"));
    let out = PipeReader::new(attach.stdout.take().expect("stdout"));
    err.wait_for(&want, LIMIT);
    holds_for(
        "nothing more on stdout or stderr",
        Duration::from_millis(1000),
        || {
            let (o, e) = (out.text(), err.text());
            if o.is_empty() && e == want {
                Ok(())
            } else {
                Err(format!("stdout {o:?}, stderr {e:?}"))
            }
        },
    );
    let _ = attach.kill();
    let _ = attach.wait();
    assert_eq!(out.finish(), "", "no empty tables");
    assert_eq!(err.finish(), want);
}

// ---- Item 7: layers and launchers ----

#[test]
fn layers_as_the_readme_spells_them() {
    let dir = scratch("layers");
    let sock = dir.join("sock");
    let json = dir.join("sum.json");
    let (srv, port) = server(&sock, false);
    // Long enough (~0.2 s) to be seen live; --record keeps it whatever the timing.
    let n = 20_000;
    let rec = dir.join("rec");
    let out = sigmatop_client(
        &sock,
        &[
            "run",
            "--layers",
            "-cuda",
            "--record",
            rec.to_str().expect("utf-8"),
            "--json",
            json.to_str().expect("utf-8"),
        ],
        port,
        n,
    )
    .stdin(Stdio::null())
    .output_bounded()
    .expect("run");
    finish(srv);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary written")).expect("JSON");
    let p = &v["processes"][0];
    // `layers` is what the process used, `layers_enabled` what --layers left on.
    assert_eq!(p["layers"], "ucx", "used");
    assert_eq!(
        p["layers_enabled"], "ucx,libfabric,ibverbs,mlx5",
        "all but cuda"
    );
    assert_eq!(p["tx_ops"].as_u64(), Some(n + 1));
    assert_eq!(p["tx_bytes"].as_u64(), Some((n + 1) * SIZE));

    let help = stdout_of(&sigmatop(&["run", "--help"]));
    assert!(
        help.contains("--layers <LAYERS>") && help.contains("`-cuda` traces all but one"),
        "{help}"
    );

    // An unknown layer is an error before anything runs, with the valid names on one line.
    for bad in ["foo", "ucx,-foo"] {
        let out = sigmatop(&["run", "--layers", bad, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "--layers {bad}");
        let err = stderr_of(&out);
        let first = err.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!(
                "error: invalid value '{bad}' for '--layers <LAYERS>': unknown layer 'foo'; valid layers: ucx, libfabric, ibverbs, mlx5, cuda (also all, none, and -NAME to leave one out: --layers -cuda)"
            )
        );
    }
}

#[test]
fn a_switched_off_layer_is_named_at_the_end_of_the_run() {
    let dir = scratch("layer-off");
    let sock = dir.join("sock");
    let (srv, port) = server(&sock, false);
    let out = sigmatop_client(
        &sock,
        &["run", "--headless", "--layers", "libfabric"],
        port,
        // Short: a program may end between two of run's looks at its libraries (every 100 ms);
        // the list of loaded objects it leaves at exit still names the library.
        100,
    )
    .stdin(Stdio::null())
    .output_bounded()
    .expect("run");
    finish(srv);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("sigmatop: "))
        .unwrap_or_else(|| panic!("no message:\n{err}"));
    // UCX's libraries carry their version in the file name (libucp.so.0...).
    assert!(
        line.starts_with("sigmatop: nothing was traced: ucx_perftest loaded libucp.so"),
        "{line}"
    );
    assert!(
        line.ends_with(
            "(layer ucx), but --layers libfabric switched that layer off; add ucx to --layers, or leave --layers out"
        ),
        "{line}"
    );
    assert!(!err.contains("used no RDMA library"), "{err}");

    // `ucx_info -v` loads UCX and ends within milliseconds, before run's first look at its
    // libraries: what it loaded comes from the list its process left at exit.
    for _ in 0..3 {
        let out = sigmatop(&[
            "run",
            "--headless",
            "--layers",
            "libfabric",
            "--",
            require("ucx_info").to_str().unwrap_or("ucx_info"),
            "-v",
        ]);
        assert!(out.status.success(), "{}", stderr_of(&out));
        let err = stderr_of(&out);
        assert!(
            err.lines().any(|l| l
                .starts_with("sigmatop: nothing was traced: ucx_info loaded libucp.so")
                && l.ends_with(
                    "switched that layer off; add ucx to --layers, or leave --layers out"
                )),
            "{err}"
        );
    }
}

/// Compiles tests/programs/mpi_pattern.c (as tests/ucx_mpi.rs does).
fn mpi_program() -> PathBuf {
    build_program("mpicc", "mpi_pattern.c", "mpi_pattern", &[])
}

#[test]
fn mpirun_over_ob1_says_why_nothing_was_traced_and_what_to_do() {
    let prog = mpi_program();
    let dir = scratch("mpi-ob1");
    let rec = dir.join("out");
    let base = ["--allow-run-as-root", "--oversubscribe", "-np", "2"];
    let run = |extra: &[&str]| {
        Command::new(sigmatop_bin())
            .arg("--record")
            .arg(&rec)
            .arg("--")
            .arg(require("mpirun"))
            .args(base)
            .args(extra)
            .arg(&prog)
            .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
            .env_remove("OMPI_MCA_pml")
            .stdin(Stdio::null())
            .output_bounded()
            .expect("sigmatop --record -- mpirun")
    };
    // Open MPI's defaults here (no RDMA NIC; Debian's openmpi-mca-params.conf has pml = ^ucx).
    let out = run(&[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "mpi_pattern: 2 ranks done");
    let err = stderr_of(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("sigmatop: "))
        .unwrap_or_else(|| panic!("no message:\n{err}"));
    assert!(
        line.starts_with("sigmatop: no MPI traffic was traced: "),
        "{line}"
    );
    assert!(line.contains("ob1 PML"), "{line}");
    assert!(
        line.contains("`mpirun --mca pml ucx ...`; on a host without an RDMA NIC also `--mca pml_ucx_tls any --mca pml_ucx_devices any`"),
        "{line}"
    );
    assert!(!err.contains("used no RDMA library"), "{err}");

    // What the message says to do works: the ranks are traced, and no hint is given.
    let _ = std::fs::remove_dir_all(&rec);
    let out = run(&[
        "--mca",
        "pml",
        "ucx",
        "--mca",
        "pml_ucx_tls",
        "any",
        "--mca",
        "pml_ucx_devices",
        "any",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(!err.contains("no MPI traffic was traced"), "{err}");
    let recording =
        sigmatop::trace::reader::Recording::open(std::slice::from_ref(&rec)).expect("record");
    assert_eq!(recording.processes.len(), 2, "both ranks traced");
    // mpi_pattern: rank i sends (i+1)(j+2)·1000 bytes to rank j; with 2 ranks, 3000 + 4000.
    let sent: u64 = recording
        .processes
        .iter()
        .map(|p| op(&totals(p), "tag_send").1)
        .sum();
    assert_eq!(sent, 3000 + 4000);
}

/// `sigmatop run --headless -- mpirun ARGS...` with Open MPI's defaults here; `env` for the ranks
/// (passed on with `-x`). Returns the output and its one `sigmatop:` line.
fn run_mpirun(args: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let dir = scratch("mpi-fails");
    let mut cmd = Command::new(sigmatop_bin());
    cmd.args(["run", "--headless", "--"])
        .arg(require("mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe"]);
    for (k, v) in env {
        cmd.args(["-x", k]).env(k, v);
    }
    let out = cmd
        .args(args)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env_remove("OMPI_MCA_pml")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output_bounded()
        .expect("sigmatop run -- mpirun");
    let err = stderr_of(&out);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sigmatop: "))
        .collect();
    assert_eq!(lines.len(), 1, "one message:\n{err}");
    let line = lines[0].to_string();
    (out, line)
}

/// A launcher that failed, or ran programs that are not MPI programs, is not blamed on Open MPI's
/// ob1 PML (it was, in each case below, before): what sigmatop says is what it saw.
#[test]
fn a_failing_or_non_mpi_mpirun_is_not_blamed_on_ob1() {
    let ob1_note = "add `--mca pml ucx`: Open MPI's default here, its ob1 PML, moves MPI messages where sigmatop does not see them";
    // Programs that are not MPI programs, one failing, one not.
    let (out, line) = run_mpirun(&["-np", "2", "false"], &[]);
    assert_eq!(out.status.code(), Some(1), "mpirun's status, passed on");
    assert_eq!(
        line,
        format!(
            "sigmatop: nothing was traced: mpirun exited with status 1 and no rank was seen loading an MPI library or a library sigmatop traces; its output says why; when it runs, {ob1_note}"
        )
    );
    let (out, line) = run_mpirun(&["-np", "2", "hostname"], &[]);
    assert!(out.status.success());
    assert_eq!(
        line,
        format!(
            "sigmatop: nothing was traced: the programs mpirun started were not seen loading an MPI library or a library sigmatop traces (UCX, libfabric, ibverbs, mlx5); if they are MPI programs, {ob1_note}"
        )
    );
    // An MPI program over UCX whose ranks give up (status 4) right after MPI_Init: traced, sent
    // nothing, and the failure is theirs.
    let prog = mpi_program();
    let prog = prog.to_str().expect("a UTF-8 path");
    let ucx = [
        "--mca",
        "pml",
        "ucx",
        "--mca",
        "pml_ucx_tls",
        "any",
        "--mca",
        "pml_ucx_devices",
        "any",
    ];
    let mut args = vec!["-np", "2"];
    args.extend(ucx);
    args.push(prog);
    let (out, line) = run_mpirun(&args, &[("MPI_PATTERN_EXIT", "4")]);
    assert_eq!(out.status.code(), Some(4), "mpirun's status, passed on");
    assert_eq!(
        line,
        "sigmatop: no MPI traffic was traced: mpirun exited with status 4 and its ranks were traced (ucx) but sent nothing; its output says why"
    );
    let err = stderr_of(&out);
    assert!(
        err.contains("total: ▲ 0 B in 0 ops, ▼ 0 B in 0 ops"),
        "both ranks in the summary, nothing sent:\n{err}"
    );
    // The same over Open MPI's defaults (ob1): whatever was seen of the ranks, the failure is
    // said, and ob1 is named as the reason only if a rank loaded it.
    let (out, line) = run_mpirun(&["-np", "2", prog], &[("MPI_PATTERN_EXIT", "4")]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        line.contains("mpirun") && line.contains("status 4"),
        "{line}"
    );
    assert!(line.contains("its output says why"), "{line}");
    assert!(
        !line.contains("Open MPI chose its ob1 PML"),
        "no guess about a run that failed: {line}"
    );
}

/// A program that fails before any call sigmatop traces (a ucx_perftest client with no server:
/// its own TCP connect is refused) is said to have failed, not to use no RDMA library.
#[test]
fn a_program_that_fails_before_tracing_is_said_to_have_failed() {
    let dir = scratch("fails-early");
    // A port the kernel gave this test and holds without listening: the connection is refused.
    let (_held, port) = refusing_port();
    let out = Command::new(sigmatop_bin())
        .args(["run", "--headless", "--"])
        .arg(require("ucx_perftest"))
        .args(["127.0.0.1", "-p", &port.to_string(), "-t", "tag_bw"])
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env("UCX_TLS", "tcp")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output_bounded()
        .expect("sigmatop run -- ucx_perftest");
    // ucx_perftest exits with status 255 (-1) when its connection is refused.
    assert_eq!(
        out.status.code(),
        Some(255),
        "ucx_perftest's status, passed on"
    );
    let err = stderr_of(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("sigmatop: "))
        .unwrap_or_else(|| panic!("no message:\n{err}"));
    // Whether sigmatop saw it map libucp before it ended is a matter of milliseconds.
    assert!(
        line == "sigmatop: nothing was traced: ucx_perftest exited with status 255, not seen loading a library sigmatop traces (UCX, libfabric, ibverbs, mlx5)"
            || line.starts_with("sigmatop: nothing was traced: ucx_perftest loaded libucp.so")
                && line.ends_with("(layer ucx) but exited with status 255 before a call sigmatop traces; its output says why"),
        "{line}"
    );
}

// ---- Item 8: output scripts can use ----

#[test]
fn run_json_goes_to_a_file_or_alone_to_stdout() {
    let dir = scratch("run-json");
    let sock = dir.join("sock");
    // Long enough (~0.2 s) for the live view to connect: no --record here.
    let n = 20_000;
    let check = |v: &serde_json::Value| {
        let p = &v["processes"][0];
        assert_eq!(p["exe"], "ucx_perftest");
        assert_eq!(p["tx_ops"].as_u64(), Some(n + 1), "{v}");
        assert_eq!(p["tx_bytes"].as_u64(), Some((n + 1) * SIZE));
    };
    // --json FILE: the file holds the JSON, stdout the program's own output, stderr says so.
    let file = dir.join("summary.json");
    let (srv, port) = server(&sock, false);
    let out = sigmatop_client(
        &sock,
        &["run", "--json", file.to_str().expect("utf-8")],
        port,
        n,
    )
    .stdin(Stdio::null())
    .output_bounded()
    .expect("run");
    finish(srv);
    assert!(out.status.success(), "{}", stderr_of(&out));
    check(&serde_json::from_slice(&std::fs::read(&file).expect("written")).expect("valid JSON"));
    assert!(stdout_of(&out).contains("Final:"), "the program's output");
    assert!(
        stderr_of(&out).contains(&format!(
            "sigmatop: wrote {} (summary of 1 process, JSON)",
            file.display()
        )),
        "{}",
        stderr_of(&out)
    );
    // --json alone: stdout is exactly the JSON (`> f.json` is valid JSON); the program's output
    // went to stderr.
    let (srv, port) = server(&sock, false);
    let out = sigmatop_client(&sock, &["run", "--json"], port, n)
        .stdin(Stdio::null())
        .output_bounded()
        .expect("run");
    finish(srv);
    assert!(out.status.success(), "{}", stderr_of(&out));
    check(&serde_json::from_slice(&out.stdout).expect("stdout is JSON alone"));
    assert!(stderr_of(&out).contains("Final:"), "{}", stderr_of(&out));
    let help = stdout_of(&sigmatop(&["run", "--help"]));
    assert!(
        help.contains("--json [<FILE>]") && help.contains("stdout holds the JSON only"),
        "{help}"
    );
    // A --json file that cannot be written fails before the program runs.
    let out = sigmatop(&["run", "--json", "/nonexistent/dir/s.json", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).starts_with("sigmatop: --json /nonexistent/dir/s.json: cannot create it"),
        "{}",
        stderr_of(&out)
    );
}

/// A real recording of a ucx_perftest pair (both sides recorded), `n` iterations.
fn recorded_pair(name: &str, n: u64) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let trace = Trace::new("simple", &dir);
    let (srv, port) = ucx_perftest_server("tcp", |s| trace.apply(s));
    let mut c = Command::new(require("ucx_perftest"));
    c.args(client_args(port, n)).env("UCX_TLS", "tcp");
    trace.apply(&mut c);
    assert!(wait_timeout(spawn(&mut c), LIMIT).status.success());
    assert!(wait_timeout(srv, LIMIT).status.success());
    (dir, trace.record)
}

#[test]
fn export_json_says_what_it_wrote() {
    let n = 200;
    let (dir, rec) = recorded_pair("export-say", n);
    let json = dir.join("agg.json");
    let out = sigmatop(&[
        "export",
        rec.to_str().expect("utf-8"),
        "--json",
        json.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("written")).expect("JSON");
    let bytes = std::fs::metadata(&json).expect("stat").len();
    let endpoints: usize = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["endpoints"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(
        stderr_of(&out),
        format!(
            "sigmatop: wrote {} (JSON aggregates: 2 processes, {endpoints} endpoints, {} events, {bytes} bytes)\n",
            json.display(),
            v["events"]
        )
    );
}

// ---- Item 9: paths, recordings, help ----

#[test]
fn missing_paths_and_unreadable_recordings_fail_with_the_reason_first() {
    let (dir, rec) = recorded_pair("export-unreadable", 50);
    let json = dir.join("agg.json");
    std::fs::write(&json, b"{}").expect("a file");
    // A missing path is missing, a file is not a directory.
    let missing = dir.join("no-such-dir");
    let out = sigmatop(&[
        "export",
        missing.to_str().expect("utf-8"),
        "--json",
        "x.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr_of(&out),
        format!(
            "sigmatop: {}: no such file or directory: pass the directory given to --record\n",
            missing.display()
        )
    );
    let out = sigmatop(&["report", json.to_str().expect("utf-8")]);
    assert!(
        stderr_of(&out).contains("not a directory"),
        "{}",
        stderr_of(&out)
    );

    // Every process record unreadable: exit non-zero, the reason first, no file written.
    let mut garbled = 0;
    for host in std::fs::read_dir(&rec).expect("record dir").flatten() {
        for p in std::fs::read_dir(host.path()).expect("host dir").flatten() {
            std::fs::write(p.path().join("process.stp"), b"not a sigmatop record").expect("garble");
            garbled += 1;
        }
    }
    assert_eq!(garbled, 2);
    let trace = dir.join("t.pftrace");
    let out = sigmatop(&[
        "export",
        rec.to_str().expect("utf-8"),
        "--perfetto",
        trace.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_of(&out);
    assert!(
        err.starts_with("sigmatop: nothing could be read: ")
            && err.contains("process.stp: at byte 0: not a sigmatop record file (bad magic) (and 1 more unreadable process record)"),
        "{err}"
    );
    assert!(!trace.exists(), "no empty trace written");
}

#[test]
fn help_documents_the_flags_and_directories() {
    let h = |args: &[&str]| stdout_of(&sigmatop(args));
    let replay = h(&["replay", "--help"]);
    for want in [
        "--speed <X>",
        "0 = no playback",
        "--theme <THEME>",
        "dark (default), light, mono",
        "<DIR>",
        "what --record was given",
    ] {
        assert!(
            replay.contains(want),
            "replay --help lacks {want:?}:\n{replay}"
        );
    }
    let run = h(&["run", "--help"]);
    assert!(run.contains("--theme <THEME>"), "{run}");
    let export = h(&["export", "--help"]);
    assert!(
        export.contains("<DIR>...") && export.contains("one process's directory"),
        "{export}"
    );
    let attach = h(&["attach", "--help"]);
    assert!(
        attach.contains("[PID|HOST]...")
            && attach.contains("a PID that does not exist is an error")
            && attach.contains("hostlist syntax"),
        "{attach}"
    );
    assert!(attach.contains("Stale sockets"), "{attach}");
    // Speeds that mean nothing are errors, not a silent 1×.
    let out = sigmatop(&["demo", "--headless", "--speed", "-2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("is no speed"),
        "{}",
        stderr_of(&out)
    );
}

/// Issue 39, item 4: advice under `--layers`. UCX loads verbs for its device discovery, so a UCX
/// program run with `--layers -ucx` is traced (ibverbs) and moves nothing there: ucx_perftest
/// got no word at the end, and an MPI job over UCX was told to pick UCX, the layer it had
/// switched off. Both are now told which layer they used and that --layers switched it off.
#[test]
fn advice_under_layers_names_the_switched_off_layer_the_program_used() {
    let dir = scratch("layers-idle");
    let sock = dir.join("sock");
    let (srv, port) = server(&sock, false);
    let out = sigmatop_client(
        &sock,
        &["run", "--headless", "--layers", "-ucx"],
        port,
        // Long enough (over TCP) for run's library watch to see it load libucp before it ends
        // (every 100 ms): with 2,000 iterations it could end first on a loaded machine, and
        // the advice rested on the final state's loaded objects alone.
        20_000,
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    finish(srv);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("sigmatop: nothing"))
        .unwrap_or_else(|| panic!("no advice:\n{err}"));
    assert!(line.contains("ucx_perftest loaded libuc"), "{line}");
    assert!(
        line.ends_with(
            "(layer ucx), but --layers -ucx switched that layer off; add ucx to --layers, or leave --layers out"
        ),
        "{line}"
    );

    // An MPI job over UCX: the same, not "pick the MPI library's UCX transport".
    let prog = mpi_program();
    let out = Command::new(sigmatop_bin())
        .args(["run", "--headless", "--layers", "-ucx", "--"])
        .arg(require("mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any"])
        .args(["--mca", "pml_ucx_devices", "any"])
        .arg(&prog)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock-mpi"))
        .env_remove("OMPI_MCA_pml")
        .stdin(Stdio::null())
        .output()
        .expect("sigmatop run -- mpirun");
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "mpi_pattern: 2 ranks done");
    let err = stderr_of(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("sigmatop: "))
        .unwrap_or_else(|| panic!("no advice:\n{err}"));
    assert!(
        line.contains("(layer ucx), but --layers -ucx switched that layer off"),
        "{line}"
    );
    assert!(!err.contains("pick the MPI library"), "{err}");
}
