//! Proves sigmatop never breaks the traced program and never loses data silently:
//! - every injected fault (init, hook, ring full, collector death, socket error, disk full) leaves a
//!   real program's (fi_pingpong's) exit status and output shape identical to an untraced run, and
//!   sigmatop says once, on stderr, what it stopped doing;
//! - 64 threads posting concurrently and exiting while their rings hold events: counts exact,
//!   every event on disk;
//! - fork (child traced with its own record), exec (the new image traced again);
//! - SIGTERM, SIGKILL, abort, exit from a signal handler: the record reads back, cut or complete;
//!   the program's own signal handlers run untouched;
//! - the socket directory is 0700 and the socket 0600; another uid cannot connect.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::Trace;
use sigmatop::trace::reader::Recording;

const LIMIT: Duration = Duration::from_secs(60);

fn probe() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = common::scratch("probe-bin").join("runtime_probe");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/runtime_probe.c");
        let st = Command::new(common::require("gcc"))
            .args(["-O2", "-pthread", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-ldl")
            .status()
            .unwrap();
        assert!(st.success(), "compiling {}", src.display());
        out
    })
    .clone()
}

/// One fi_pingpong pair over tcp; returns (server, client) outputs.
fn pingpong(
    trace: Option<&Trace>,
    env: &[(&str, &str)],
    iters: u32,
) -> (std::process::Output, std::process::Output) {
    let bin = common::require("fi_pingpong");
    let port = common::port();
    let args = [
        "-p",
        "tcp",
        "-e",
        "msg",
        "-I",
        &iters.to_string(),
        "-S",
        "1024",
    ];
    let mut server = Command::new(&bin);
    server.args(["-B", &port.to_string()]).args(args);
    let mut client = Command::new(&bin);
    client
        .args(["-P", &port.to_string()])
        .args(args)
        .arg("127.0.0.1");
    for c in [&mut server, &mut client] {
        if let Some(t) = trace {
            t.apply(c);
        }
        for (k, v) in env {
            c.env(k, v);
        }
    }
    let s = common::spawn(&mut server);
    common::wait_listening(port, Duration::from_secs(20));
    let c = common::wait_timeout(common::spawn(&mut client), LIMIT);
    let s = common::wait_timeout(s, LIMIT);
    (s, c)
}

fn check_fault(fault: &str, message: &str, iters: u32) {
    let (base_s, base_c) = pingpong(None, &[], iters);
    assert!(base_s.status.success() && base_c.status.success());
    let dir = common::scratch(&format!("fault-{fault}"));
    let trace = Trace::new("simple", &dir);
    let (s, c) = pingpong(Some(&trace), &[("SIGMATOP_TEST_FAULT", fault)], iters);
    for (base, got, side) in [(&base_s, &s, "server"), (&base_c, &c, "client")] {
        assert_eq!(
            got.status.code(),
            base.status.code(),
            "{fault}: {side} exit status"
        );
        assert_eq!(
            common::output_shape(&common::stdout_of(got)),
            common::output_shape(&common::stdout_of(base)),
            "{fault}: {side} output"
        );
        let err = common::stderr_of(got);
        assert_eq!(
            err.matches(message).count(),
            1,
            "{fault}: {side} says once what stopped ({message}): {err}"
        );
        assert!(
            !err.contains("panicked"),
            "{fault}: no raw panic text: {err}"
        );
    }
}

#[test]
fn fault_init() {
    check_fault("init", "initialisation failed", 500);
}

#[test]
fn fault_hook() {
    check_fault("hook", "internal error in a hook", 500);
}

#[test]
fn fault_ring_full() {
    // 40k iterations make 80k send+receive events per side: more than a 64Ki-event ring.
    check_fault("ring", "events were not kept", 40_000);
}

#[test]
fn fault_collector() {
    check_fault("collector", "collector failed", 3000);
}

#[test]
fn fault_socket() {
    check_fault("socket", "live view disabled", 500);
}

#[test]
fn fault_disk_full() {
    check_fault("disk", "stopped: No space left on device", 20_000);
}

fn run_probe(trace: &Trace, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(probe());
    cmd.args(args);
    trace.apply(&mut cmd);
    common::wait_timeout(common::spawn(&mut cmd), LIMIT)
}

#[test]
fn sixty_four_threads_exact_and_nothing_lost() {
    let dir = common::scratch("threads");
    let trace = Trace::new("simple", &dir);
    let per = 20_000u64;
    let out = run_probe(&trace, &["threads", "64", &per.to_string()]);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let t = common::totals(&procs[0]);
    let (ops, bytes) = common::op(&t, "tag_send");
    assert_eq!(ops, 64 * per);
    assert_eq!(bytes, per * (1..=64).sum::<u64>());
    assert_eq!(
        t.events_on_disk,
        64 * per,
        "threads that exited with events in their rings lost none"
    );
    let drops = procs[0].end.expect("clean end").1;
    assert_eq!(drops.total_events_lost(), 0);
    assert_eq!(
        procs[0].thread_ends.len(),
        64,
        "every worker closed its event file"
    );
}

#[test]
fn fork_and_exec_are_traced_separately() {
    let dir = common::scratch("fork");
    let trace = Trace::new("simple", &dir);
    let out = run_probe(&trace, &["fork", "1000"]);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 3, "parent, forked child, exec'd image");
    let mut by_bytes: Vec<(u64, u64)> = procs
        .iter()
        .map(|p| common::op(&common::totals(p), "tag_send"))
        .collect();
    by_bytes.sort();
    assert_eq!(
        by_bytes,
        vec![(1000, 100_000), (2000, 400_000), (3000, 900_000)]
    );
    let names: Vec<String> = procs
        .iter()
        .map(|p| p.dir.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with(".1")),
        "exec'd image recorded beside: {names:?}"
    );
    assert!(procs.iter().all(|p| !p.is_cut()));
}

#[test]
fn signals_and_exits_leave_readable_records() {
    for (sig, name) in [
        (libc::SIGTERM, "sigterm"),
        (libc::SIGKILL, "sigkill"),
        (libc::SIGABRT, "abort"),
    ] {
        let dir = common::scratch(name);
        let trace = Trace::new("full", &dir);
        let mut cmd = Command::new(probe());
        cmd.args(["stay", "5000"]);
        trace.apply(&mut cmd);
        let child = common::spawn(&mut cmd);
        // Past the first flush (100 ms) and snapshot (250 ms).
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let out = common::wait_timeout(child, LIMIT);
        assert!(!out.status.success());
        let procs = common::processes(&trace);
        assert_eq!(procs.len(), 1, "{name}");
        assert!(procs[0].is_cut(), "{name}: marked as cut");
        let t = common::totals(&procs[0]);
        assert_eq!(common::op(&t, "tag_send").0, 5000, "{name}");
        assert_eq!(
            t.events_on_disk, 5000,
            "{name}: everything flushed reads back"
        );
    }
    // exit() from inside a signal handler runs the normal exit path: a complete record.
    let dir = common::scratch("handler-exit");
    let trace = Trace::new("simple", &dir);
    let out = run_probe(&trace, &["handler-exit", "3000"]);
    assert_eq!(out.status.code(), Some(7));
    let procs = common::processes(&trace);
    assert!(!procs[0].is_cut());
    assert_eq!(common::totals(&procs[0]).events_on_disk, 3000);
    // The program's own handlers are untouched.
    let dir = common::scratch("own-handler");
    let out = run_probe(&Trace::new("simple", &dir), &["own-handler", "10"]);
    assert!(out.status.success());
    assert!(common::stdout_of(&out).contains("handler ran 1"));
}

/// Starts a traced probe that stays alive, and returns it with its live socket once it exists.
/// The caller kills and reaps it (the lint cannot see through the return).
#[allow(clippy::zombie_processes)]
fn staying_probe(trace: &Trace) -> (std::process::Child, PathBuf) {
    let mut cmd = Command::new(probe());
    cmd.args(["stay", "10"]);
    trace.apply(&mut cmd);
    let mut child = common::spawn(&mut cmd);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let found = std::fs::read_dir(&trace.socket_dir).ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "sock"))
        });
        if let Some(s) = found {
            return (child, s);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no socket appeared");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn socket_is_private() {
    let dir = common::scratch("socket-private");
    let trace = Trace::new("aggregate", &dir);
    let (mut child, sock) = staying_probe(&trace);
    let dmode = std::fs::metadata(&trace.socket_dir)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    let smode = std::fs::symlink_metadata(&sock)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dmode, 0o700);
    assert_eq!(smode, 0o600);
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 {
        // Another uid cannot even reach it.
        let script = format!(
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n  s.connect({:?}); print('connected')\nexcept OSError as e: print('refused', e.errno)",
            sock.display().to_string()
        );
        use std::os::unix::process::CommandExt;
        let out = Command::new("python3")
            .arg("-c")
            .arg(&script)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let o = common::stdout_of(&out);
        assert!(o.starts_with("refused"), "{o} {}", common::stderr_of(&out));
    } else {
        common::skip(
            "the other-uid connection check needs root (to run a process as uid 65534): run the suite as root (CI does)",
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    // The record of an unrelated dir stays readable.
    let _ = Recording::open(std::slice::from_ref(&trace.record));
}

#[test]
fn short_lived_processes_are_recorded_completely() {
    // Exits a few microseconds after its calls, often before the collector thread has even been
    // scheduled: the exit path must still start it and flush everything.
    for i in 0..8 {
        let dir = common::scratch(&format!("short-lived-{i}"));
        let trace = Trace::new("simple", &dir);
        let out = run_probe(&trace, &["threads", "1", "100"]);
        assert!(out.status.success());
        let procs = common::processes(&trace);
        assert_eq!(procs.len(), 1, "run {i}");
        assert!(!procs[0].is_cut(), "run {i}");
        let t = common::totals(&procs[0]);
        assert_eq!(common::op(&t, "tag_send").0, 100, "run {i}");
        assert_eq!(t.events_on_disk, 100, "run {i}");
    }
}

fn lifecycle() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = common::scratch("lifecycle-bin").join("lifecycle");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/lifecycle.c");
        let st = Command::new(common::require("gcc"))
            .args(["-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-ldl")
            .status()
            .unwrap();
        assert!(st.success(), "compiling {}", src.display());
        out
    })
    .clone()
}

#[test]
fn dlclose_and_reload_of_a_traced_library() {
    // libfabric loaded with local scope, resolved with dlsym (sigmatop hands out its hook), closed,
    // loaded again: the hook must follow the library to its new address.
    let dir = common::scratch("dlcycle");
    let untraced = Command::new(lifecycle()).arg("dlcycle").output().unwrap();
    let mut cmd = Command::new(lifecycle());
    cmd.arg("dlcycle");
    Trace::new("full", &dir).apply(&mut cmd);
    let traced = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    assert_eq!(
        traced.status.code(),
        untraced.status.code(),
        "{}",
        common::stderr_of(&traced)
    );
    assert_eq!(common::stdout_of(&traced), common::stdout_of(&untraced));
    assert!(common::stdout_of(&traced).contains("round 1 fi_getinfo 0"));
}

#[test]
fn vfork_and_daemonised_children_are_traced() {
    let dir = common::scratch("vfork");
    let trace = Trace::new("simple", &dir);
    let mut cmd = Command::new(lifecycle());
    cmd.args(["vfork", "700"]);
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1, "only the exec'd child traced anything");
    assert_eq!(common::op(&common::totals(&procs[0]), "tag_send").0, 700);

    let dir = common::scratch("daemon");
    let trace = Trace::new("simple", &dir);
    let mut cmd = Command::new(lifecycle());
    cmd.args(["daemon", "900"]);
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    assert!(out.status.success());
    // The daemon outlives its launcher: wait for its record to end.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let done = Recording::open(std::slice::from_ref(&trace.record))
            .map(|r| r.processes.iter().any(|p| !p.is_cut()))
            .unwrap_or(false);
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon's record never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    assert_eq!(common::op(&common::totals(&procs[0]), "tag_send").0, 900);
}

#[test]
fn stalled_and_vanishing_readers_never_block_the_program() {
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    let dir = common::scratch("stalled-reader");
    let trace = Trace::new("simple", &dir);
    // A long-running traced process...
    let (mut stay, sock) = staying_probe(&trace);
    // ...with one reader that never reads and one that leaves in the middle of a frame.
    let stalled = UnixStream::connect(&sock).unwrap();
    let mut vanishing = UnixStream::connect(&sock).unwrap();
    let mut some = [0u8; 7];
    vanishing.read_exact(&mut some).unwrap();
    drop(vanishing);
    std::thread::sleep(Duration::from_millis(600));
    let _ = stay.kill();
    let _ = stay.wait();
    drop(stalled);
    // A busy program under the same conditions runs to completion at full speed.
    let dir = common::scratch("stalled-reader-busy");
    let trace = Trace::new("simple", &dir);
    std::fs::create_dir_all(&trace.socket_dir).unwrap();
    std::fs::set_permissions(&trace.socket_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut cmd = Command::new(probe());
    cmd.args(["threads", "4", "200000"]);
    trace.apply(&mut cmd);
    let mut child = common::spawn(&mut cmd);
    let mut readers = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while readers.is_empty() && std::time::Instant::now() < deadline {
        if let Ok(rd) = std::fs::read_dir(&trace.socket_dir) {
            for e in rd.flatten() {
                if let Ok(s) = UnixStream::connect(e.path()) {
                    readers.push(s); // never read from
                }
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = common::wait_timeout(child, LIMIT);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let procs = common::processes(&trace);
    let t = common::totals(&procs[0]);
    assert_eq!(common::op(&t, "tag_send").0, 800_000, "counters exact");
    // A tight loop of 4 threads outruns the 5 ms drain: what the rings could not hold is
    // counted, never silently lost, and the readers changed nothing about it.
    let drops = procs[0].end.expect("clean end").1;
    assert_eq!(
        t.events_on_disk + drops.ring_full,
        800_000,
        "every event is on disk or counted as lost"
    );
}

#[test]
fn attach_refuses_sockets_it_does_not_own() {
    if !common::is_root() {
        return common::skip(
            "needs root to chown a socket to another uid: run the suite as root (CI does; scripts/test.sh installs as root)",
        );
    }
    let dir = common::scratch("foreign-socket");
    let sockdir = dir.join("sock");
    std::fs::create_dir_all(&sockdir).unwrap();
    std::fs::set_permissions(&sockdir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = sockdir.join("otherhost-4242.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let out = Command::new(common::sigmatop_bin())
        .args([
            "attach",
            "--json",
            "--once",
            "--interval-ms",
            "300",
            "--socket-dir",
        ])
        .arg(&sockdir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "nothing to attach to");
    let err = common::stderr_of(&out);
    assert!(
        err.contains("owned by uid 65534, not you; not attaching"),
        "{err}"
    );
    assert!(err.contains("no traced process found"), "{err}");
}
