//! Proves the core pipeline around real programs: the CLI spellings (`run`, `--record DIR -- CMD`,
//! `attach --json --once`, `export --json`), exit status pass-through, a recording cut by SIGKILL
//! reading back up to its last flushed chunk, and every kind of bad input (bogus mode, unwritable
//! record directory, a socket directory owned by someone else, a program without any RDMA library)
//! giving one clear warning while the program runs unaffected.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::{Bounded, Trace};

const LIMIT: Duration = Duration::from_secs(60);

/// Starts a ucx_perftest server traced with `trace` (if given) and returns it with its port.
fn perftest_server(trace: Option<&Trace>, extra_env: &[(&str, &str)]) -> (common::Proc, u16) {
    common::ucx_perftest_server("tcp", |cmd| {
        if let Some(t) = trace {
            t.apply(cmd);
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
    })
}

fn perftest_client(port: u16, n: u64) -> Command {
    let mut cmd = Command::new(common::require("ucx_perftest"));
    cmd.args([
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "tag_bw",
        "-n",
        &n.to_string(),
        "-s",
        "4096",
        "-w",
        "1",
    ])
    .env("UCX_TLS", "tcp");
    cmd
}

#[test]
fn record_spelling_traces_children_and_passes_exit_status() {
    let dir = common::scratch("card-spelling");
    let rec = dir.join("out");
    // A shell that runs a traced server/client pair would need two processes; the card's spelling
    // is exercised on the client side, with the server traced by hand.
    let (server, port) = perftest_server(None, &[]);
    let mut cmd = Command::new(common::sigmatop_bin());
    cmd.arg("--record")
        .arg(&rec)
        .arg("--")
        .arg(common::require("ucx_perftest"));
    cmd.args([
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "tag_bw",
        "-n",
        "500",
        "-s",
        "4096",
        "-w",
        "1",
    ])
    .env("UCX_TLS", "tcp")
    .env("SIGMATOP_SOCKET_DIR", dir.join("sock"));
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    let _ = common::wait_timeout(server, LIMIT);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let err = common::stderr_of(&out);
    assert!(
        err.contains("tag_send"),
        "summary lists the operations: {err}"
    );
    let recording = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&rec)).unwrap();
    assert_eq!(recording.processes.len(), 1);
    let t = common::totals(&recording.processes[0]);
    assert_eq!(common::op(&t, "tag_send"), (501, 501 * 4096));
    assert!(!t.cut, "a normal exit ends the record cleanly");
    // Record directories are private.
    let mode = std::fs::metadata(&rec).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    // Exit status goes through, also for a program that traces nothing.
    let out = Command::new(common::sigmatop_bin())
        .args(["--record"])
        .arg(dir.join("out2"))
        .args(["--", "sh", "-c", "exit 3"])
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = common::stderr_of(&out);
    // It failed (status 3): what was seen is said, and that the empty record directory went
    // (issue 25, item 13), no more.
    assert_eq!(
        err.trim_end(),
        format!(
            "sigmatop: nothing was traced: sh exited with status 3, not seen loading a library sigmatop traces (UCX, libfabric, ibverbs, mlx5)\nsigmatop: nothing was recorded; removed the empty record directory {}",
            dir.join("out2").display()
        ),
        "one clear warning for a program without RDMA"
    );
}

#[test]
fn export_json_matches_the_record() {
    let dir = common::scratch("export-json");
    let trace = Trace::new("simple", &dir);
    let (server, port) = perftest_server(Some(&trace), &[]);
    let mut client = perftest_client(port, 300);
    trace.apply(&mut client);
    let out = common::wait_timeout(common::spawn(&mut client), LIMIT);
    assert!(out.status.success());
    assert!(common::wait_timeout(server, LIMIT).status.success());
    let json = dir.join("agg.json");
    let st = Command::new(common::sigmatop_bin())
        .arg("export")
        .arg(&trace.record)
        .arg("--json")
        .arg(&json)
        .status_bounded()
        .unwrap();
    assert!(st.success());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2);
    let tx: u64 = procs.iter().map(|p| p["tx_bytes"].as_u64().unwrap()).sum();
    let rx: u64 = procs.iter().map(|p| p["rx_bytes"].as_u64().unwrap()).sum();
    assert_eq!(tx, 301 * 4096, "sender bytes");
    assert_eq!(rx, 301 * 4096, "receiver bytes");
    // Each side's endpoint names the other process as its peer.
    for p in procs {
        let pid = p["pid"].as_u64().unwrap();
        let eps = p["endpoints"].as_array().unwrap();
        let peer = eps
            .iter()
            .find_map(|e| e["peer"]["pid"].as_u64())
            .expect("an endpoint with a resolved peer");
        assert_ne!(peer, pid);
    }
    assert_eq!(
        v["node_matrix"]["bytes"][0][0].as_u64().unwrap(),
        301 * 4096,
        "the client's sends to the server, both on this one node"
    );
}

#[test]
fn sigkill_mid_run_reads_back_and_says_it_was_cut() {
    let dir = common::scratch("sigkill");
    let trace = Trace::new("full", &dir);
    let (mut server, port) = perftest_server(Some(&trace), &[]);
    let mut client = perftest_client(port, 100_000_000);
    trace.apply(&mut client);
    let mut child = common::spawn(&mut client);
    // Until both records on disk hold a snapshot and flushed events.
    common::wait_until(
        "a snapshot and flushed events in both records",
        LIMIT,
        || {
            let rec = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&trace.record))
                .map_err(|e| format!("the record does not open yet: {e}"))?;
            let seen: Vec<(u64, usize)> = rec
                .processes
                .iter()
                .map(|p| {
                    let mut probs = Vec::new();
                    (
                        p.last_snapshot().map_or(0, |s| s.events),
                        p.read_all_events(&mut probs).len(),
                    )
                })
                .collect();
            if seen.len() == 2 && seen.iter().all(|&(snap, disk)| snap > 0 && disk > 0) {
                Ok(())
            } else {
                Err(format!(
                    "(events in the last snapshot, on disk) per process: {seen:?}"
                ))
            }
        },
    );
    // SAFETY: plain kill(2) of our own children.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
        libc::kill(server.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
    let _ = server.wait();
    let rec =
        sigmatop::trace::reader::Recording::open(std::slice::from_ref(&trace.record)).unwrap();
    assert_eq!(rec.processes.len(), 2);
    for p in &rec.processes {
        assert!(p.is_cut(), "{} must be marked as cut", p.dir.display());
        // Whatever was flushed reads back; a chunk cut mid-write is reported with its offset.
        let mut probs = Vec::new();
        let events = p.read_all_events(&mut probs);
        assert!(!events.is_empty(), "events up to the last flush");
        for pr in probs.iter().chain(&p.problems) {
            assert!(
                pr.what.contains("cut inside"),
                "only a cut at the end: {pr}"
            );
        }
        let snap = p.last_snapshot().expect("snapshots were flushed");
        assert!(snap.events > 0);
    }
    // The CLI exports it and says it was cut.
    let out = Command::new(common::sigmatop_bin())
        .arg("export")
        .arg(&trace.record)
        .args(["--json", "-"])
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    assert!(common::stderr_of(&out).contains("record cut"));
}

/// Runs a traced perftest pair with one side's environment changed, and returns the client's
/// stderr after checking the program was unaffected.
fn pair_with_env(name: &str, env: &[(&str, String)]) -> (String, Trace) {
    let dir = common::scratch(name);
    let trace = Trace::new("simple", &dir);
    let (server, port) = perftest_server(None, &[]);
    let mut client = perftest_client(port, 200);
    trace.apply(&mut client);
    for (k, v) in env {
        client.env(k, v);
    }
    let out = common::wait_timeout(common::spawn(&mut client), LIMIT);
    assert!(common::wait_timeout(server, LIMIT).status.success());
    assert!(
        out.status.success(),
        "the program runs unaffected: {}",
        common::stderr_of(&out)
    );
    assert!(common::stdout_of(&out).contains("Final:"), "output intact");
    (common::stderr_of(&out), trace)
}

#[test]
fn bogus_mode_warns_once_and_traces_in_simple_mode() {
    let (err, trace) = pair_with_env("bogus-mode", &[("SIGMATOP_MODE", "bogus".into())]);
    assert_eq!(err.matches("SIGMATOP_MODE=bogus").count(), 1, "{err}");
    let procs = common::processes(&trace);
    assert_eq!(procs[0].identity.mode, sigmatop::event::Mode::Simple as u8);
    assert_eq!(common::op(&common::totals(&procs[0]), "tag_send").0, 201);
}

/// The GPU doorbell path's variables warn on bad values like every other one (issue 14.6): each
/// once, naming the variable, its value and what is used instead; the program runs unaffected and
/// is traced as usual (no GPU is involved, so the defaults change nothing here).
#[test]
fn bogus_gpu_settings_warn_once_each() {
    let (err, trace) = pair_with_env(
        "bogus-gpu",
        &[
            ("SIGMATOP_GPU_WQE", "maybe".into()),
            ("SIGMATOP_WQE_BATCH", "0".into()),
            ("SIGMATOP_WQE_COPY", "never".into()),
        ],
    );
    for warning in [
        "SIGMATOP_GPU_WQE=maybe is not one of on, off; recovering WQEs",
        "SIGMATOP_WQE_BATCH=0 is not a positive integer; using 128",
        "SIGMATOP_WQE_COPY=never is not one of doorbell, batch; copying per doorbell",
    ] {
        assert_eq!(err.matches(warning).count(), 1, "{warning}: {err}");
    }
    let procs = common::processes(&trace);
    assert_eq!(common::op(&common::totals(&procs[0]), "tag_send").0, 201);
}

#[test]
fn unwritable_record_dir_warns_and_keeps_running() {
    let dir = common::scratch("unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    // A record directory below a regular file cannot be created, even by root.
    let (err, _) = pair_with_env(
        "unwritable-run",
        &[("SIGMATOP_RECORD", file.join("rec").display().to_string())],
    );
    assert_eq!(err.matches("cannot record to").count(), 1, "{err}");
}

#[test]
fn foreign_socket_dir_is_refused() {
    let dir = common::scratch("foreign-sock");
    let sock = dir.join("theirs");
    std::fs::create_dir(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o700)).unwrap();
    if !common::is_root() {
        return common::skip(
            "needs root to chown a directory to another uid: run the suite as root (CI does)",
        );
    }
    std::os::unix::fs::chown(&sock, Some(65534), Some(65534)).unwrap();
    let (err, _) = pair_with_env(
        "foreign-run",
        &[("SIGMATOP_SOCKET_DIR", sock.display().to_string())],
    );
    assert_eq!(err.matches("owned by uid 65534").count(), 1, "{err}");
    assert!(err.contains("live view disabled"));
}

#[test]
fn untraced_programs_stay_silent() {
    // A program with no RDMA library, preloaded directly: no output of ours, no socket, no record.
    let dir = common::scratch("silent");
    let trace = Trace::new("full", &dir);
    let mut cmd = Command::new("ls");
    cmd.arg("/");
    trace.apply(&mut cmd);
    let out = cmd.output_bounded().unwrap();
    assert!(out.status.success());
    assert_eq!(common::stderr_of(&out), "");
    assert!(
        !trace.record.exists(),
        "nothing recorded for a program that used no RDMA"
    );
    assert!(!trace.socket_dir.exists());
}

#[test]
fn attach_once_json_sees_a_running_program() {
    let dir = common::scratch("attach-once");
    let trace = Trace::new("simple", &dir);
    let (server, port) = perftest_server(Some(&trace), &[]);
    let mut client = perftest_client(port, 2_000_000);
    trace.apply(&mut client);
    let mut child = common::spawn(&mut client);
    // Until the client has sent (its record says so) and both serve their live sockets.
    common::wait_until("the client's first sends in its record", LIMIT, || {
        let rec = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&trace.record))
            .map_err(|e| format!("the record does not open yet: {e}"))?;
        let sends: u64 = rec
            .processes
            .iter()
            .filter(|p| p.identity.pid == child.id())
            .filter_map(|p| p.last_snapshot())
            .flat_map(|s| s.counts.iter())
            .filter(|c| c.op == sigmatop::event::Op::UcxTagSend as u8)
            .map(|c| c.ops)
            .sum();
        if sends > 0 {
            Ok(())
        } else {
            Err("no send yet".into())
        }
    });
    for pid in [server.id(), child.id()] {
        let s = trace
            .socket_dir
            .join(format!("{}-{pid}.sock", sigmatop::live::socket_host()));
        common::wait_until(&format!("pid {pid}'s live socket"), LIMIT, || {
            std::os::unix::net::UnixStream::connect(&s)
                .map(drop)
                .map_err(|e| format!("{}: {e}", s.display()))
        });
    }
    let out = Command::new(common::sigmatop_bin())
        .args([
            "attach",
            "--json",
            "--once",
            "--interval-ms",
            "700",
            "--socket-dir",
        ])
        .arg(&trace.socket_dir)
        .output_bounded()
        .unwrap();
    let mut server = server;
    for c in [&mut child, &mut server] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "server and client: {v}");
    let sends: u64 = procs
        .iter()
        .flat_map(|p| p["endpoints"].as_array().unwrap())
        .filter_map(|e| e["ops"]["tag_send"]["ops"].as_u64())
        .sum();
    assert!(sends > 0, "live snapshot shows the traffic");
    // The socket directory and sockets are private.
    let mode = std::fs::metadata(&trace.socket_dir)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}
