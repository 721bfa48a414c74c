//! Proves sigmatop never breaks the traced program and never loses data silently, with real
//! programs making real RDMA-library calls (UCX's UCP and libfabric; nothing of sigmatop is called
//! directly, so the collector starts the lazy way, on the program's first library call):
//! - every injected fault (init, hook, ring full, collector death, socket error, disk full) leaves a
//!   real program's (fi_pingpong's) exit status and output shape identical to an untraced run, and
//!   sigmatop says once, on stderr, what it stopped doing;
//! - 64 threads, each with its own UCP context, workers and endpoint, sending tagged messages over
//!   shared memory (tests/programs/ucx_life.c), and 64 threads, each with its own libfabric
//!   domain and RDM endpoints, sending messages and tagged messages over the shm provider
//!   (tests/programs/ofi_threads.c), all exiting right after: counts exact per endpoint, every
//!   event on disk;
//! - fork (child traced with its own record), exec (the new image traced again), vfork + exec, a
//!   daemon, processes started by Python's multiprocessing (spawn: fork + exec of python3) over a
//!   ctypes binding (tests/programs/ucx_binding.py), processes that exit microseconds after their
//!   calls;
//! - SIGTERM, SIGKILL, abort, exit from a signal handler: the record reads back, cut or complete;
//!   the program's own signal handlers run untouched;
//! - live readers that stall or vanish mid-frame never block the program; what each received;
//! - the socket directory is 0700 and the socket 0600; a process of another uid that is given a
//!   path to the socket is refused by sigmatop's credential check (SO_PEERCRED).
//!
//! Every expected figure is computed from what the program was asked to do (its arguments), not
//! from what it printed.
mod common;

use std::io::{BufRead, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::Trace;
use sigmatop::event::Op;
use sigmatop::trace::reader::{ProcessRecording, Recording};
use sigmatop::wire::{Decoder, Frame};

/// A traced run that takes longer than this has hung. Generous: on a 2-core machine shared with
/// builds, 40,000 fi_pingpong iterations over tcp took 85 s untraced.
const LIMIT: Duration = Duration::from_secs(240);

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
    let mut s = common::spawn(&mut server);
    common::wait_server(&mut s, port, Duration::from_secs(20));
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

// ---- The real programs ----

fn programs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// Compiles `tests/programs/<src>` with gcc into `out` (a file name), once per test process.
fn gcc(cell: &'static OnceLock<PathBuf>, src: &str, out: &str, flags: &[&str]) -> PathBuf {
    cell.get_or_init(|| common::build_program("gcc", src, out, flags))
        .clone()
}

/// tests/programs/ucx_life.c: UCP tagged messages between two workers of one context.
fn ucx_life() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    gcc(&BIN, "ucx_life.c", "ucx_life", &["-lucp", "-lucs"])
}

/// The same source as a library for the ctypes binding (tests/programs/ucx_binding.py).
fn ucx_life_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    gcc(
        &LIB,
        "ucx_life.c",
        "libucx_life.so",
        &["-shared", "-fPIC", "-DUCX_LIFE_LIBRARY", "-lucp", "-lucs"],
    )
}

/// tests/programs/ofi_threads.c: libfabric RDM messages, one domain per thread.
fn ofi_threads() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    gcc(&BIN, "ofi_threads.c", "ofi_threads", &["-lfabric"])
}

fn fork_locks() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    gcc(&BIN, "fork_locks.c", "fork_locks", &["-ldl"])
}

/// `ucx_life ARGS` traced with `trace`, UCX over `tls`.
fn ucx_cmd(trace: &Trace, tls: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(ucx_life());
    cmd.args(args).env("UCX_TLS", tls);
    trace.apply(&mut cmd);
    cmd
}

fn run_ucx(trace: &Trace, tls: &str, args: &[&str]) -> std::process::Output {
    let out = common::wait_timeout(common::spawn(&mut ucx_cmd(trace, tls, args)), LIMIT);
    assert!(
        out.status.success() || !args.is_empty() && args[0] == "handler-exit",
        "ucx_life {args:?}: {:?}\n{}",
        out.status,
        common::stderr_of(&out)
    );
    out
}

/// (ops, bytes) of `op` in a process's last snapshot, calls that returned an error left out, and
/// the number of those error calls.
/// Of `op` in the last snapshot: (operations that succeeded, their bytes), operations that
/// failed, and posts the library refused (not operations: docs/COUNTS.md).
fn ok_failed_refused(p: &ProcessRecording, op: Op) -> ((u64, u64), u64, u64) {
    let s = p.last_snapshot().expect("a snapshot");
    let mut ok = (0, 0);
    let (mut failed, mut refused) = (0, 0);
    for c in s.counts.iter().filter(|c| c.op == op as u8) {
        ok.0 += c.ops - c.errors;
        ok.1 += c.bytes;
        failed += c.errors;
        refused += c.refused;
    }
    (ok, failed, refused)
}

/// The (ops, bytes) of `op` on each endpoint that made any, sorted: a per-endpoint multiset.
fn per_endpoint(p: &ProcessRecording, op: Op) -> Vec<(u64, u64)> {
    let s = p.last_snapshot().expect("a snapshot");
    let mut v: Vec<(u64, u64)> = s
        .counts
        .iter()
        .filter(|c| c.op == op as u8)
        .map(|c| (c.ops - c.errors, c.bytes))
        .collect();
    v.sort();
    v
}

/// Events on disk of `op`.
fn events_of(p: &ProcessRecording, op: Op) -> u64 {
    let mut probs = Vec::new();
    let n = p
        .read_all_events(&mut probs)
        .iter()
        .filter(|e| e.op == op as u8)
        .count() as u64;
    assert!(probs.is_empty() || p.is_cut(), "record problems: {probs:?}");
    n
}

/// Checks one process that sent `n` UCX messages of `size` bytes: tag_send and tag_recv exact,
/// both events of each message on disk.
fn assert_ucx_messages(p: &ProcessRecording, n: u64, size: u64, what: &str) {
    let t = common::totals(p);
    assert_eq!(common::op(&t, "tag_send"), (n, n * size), "{what}: sends");
    assert_eq!(
        common::op(&t, "tag_recv"),
        (n, n * size),
        "{what}: receives"
    );
    assert_eq!(t.events_on_disk, 2 * n, "{what}: every event on disk");
}

// ---- Threads ----

#[test]
fn sixty_four_ucx_threads_exact_and_nothing_lost() {
    // 2,000 messages a thread: 4,000 events, under the 64 Ki-event ring, so nothing may be lost.
    let (threads, n) = (64u64, 2000u64);
    let dir = common::scratch("ucx-threads");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(
        &trace,
        "sm,self",
        &["threads", &threads.to_string(), &n.to_string()],
    );
    assert_eq!(
        common::stdout_of(&out).trim(),
        format!("threads {threads} messages {n} each")
    );
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    // Thread i sent n messages of (i+1)·32 bytes on its own endpoint, received on its own worker.
    let want: Vec<(u64, u64)> = (1..=threads).map(|i| (n, n * i * 32)).collect();
    assert_eq!(per_endpoint(p, Op::UcxTagSend), want, "sends per endpoint");
    assert_eq!(per_endpoint(p, Op::UcxTagRecv), want, "receives per worker");
    let all = n * 32 * (1..=threads).sum::<u64>();
    assert_ucx_messages(p, threads * n, all / (threads * n), "64 threads");
    assert_eq!(common::op(&common::totals(p), "tag_send").1, all);
    let drops = p.end.expect("clean end").1;
    assert_eq!(drops.total_events_lost(), 0);
    assert_eq!(
        p.thread_ends.len() as u64,
        threads,
        "every sender closed its event file"
    );
    for (tid, events) in &p.thread_ends {
        assert_eq!(
            *events,
            2 * n,
            "thread {tid}: one event per send and per receive"
        );
    }
}

#[test]
fn sixty_four_libfabric_threads_exact_and_nothing_lost() {
    let (threads, n) = (64u64, 1000u64);
    let dir = common::scratch("ofi-threads");
    let trace = Trace::new("simple", &dir);
    let mut cmd = Command::new(ofi_threads());
    cmd.args(["shm", &threads.to_string(), &n.to_string()]);
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    // "... eagain send X recv Y tsend Z trecv W": calls the provider refused with -FI_EAGAIN
    // (retried); sigmatop counts them as refused, apart from the operations.
    let line = common::stdout_of(&out);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words[..6],
        [
            "threads",
            &threads.to_string(),
            "messages",
            &n.to_string(),
            "each",
            "eagain"
        ],
        "{line}"
    );
    let eagain = |name: &str| -> u64 {
        let at = words.iter().position(|w| *w == name).expect("count");
        words[at + 1].parse().expect("number")
    };
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    // Thread i: n sends, n receives, n tagged sends, n tagged receives of (i+1)·16 bytes.
    let want: Vec<(u64, u64)> = (1..=threads).map(|i| (n, n * i * 16)).collect();
    let bytes = n * 16 * (1..=threads).sum::<u64>();
    let mut events = 0;
    for (op, name) in [
        (Op::OfiSend, "send"),
        (Op::OfiRecv, "recv"),
        (Op::OfiTSend, "tsend"),
        (Op::OfiTRecv, "trecv"),
    ] {
        assert_eq!(per_endpoint(p, op), want, "{name} per endpoint");
        let (ok, failed, refused) = ok_failed_refused(p, op);
        assert_eq!(ok, (threads * n, bytes), "{name}");
        assert_eq!(failed, 0, "{name}: failed operations");
        assert_eq!(refused, eagain(name), "{name}: -FI_EAGAIN returns");
        events += threads * n + refused;
    }
    let t = common::totals(p);
    assert_eq!(
        t.events_on_disk, events,
        "one event per call, refused ones too"
    );
    assert_eq!(p.end.expect("clean end").1.total_events_lost(), 0);
    assert_eq!(p.thread_ends.len() as u64, threads);
}

// ---- Processes: fork, exec, vfork, daemons, multiprocessing, short lives ----

/// Each process of a record with its record directory's name.
fn by_dir(procs: &[ProcessRecording]) -> Vec<(String, &ProcessRecording)> {
    let mut v: Vec<(String, &ProcessRecording)> = procs
        .iter()
        .map(|p| (p.dir.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    v.sort_by_key(|(d, _)| d.clone());
    v
}

#[test]
fn fork_and_exec_are_traced_separately() {
    let n = 1000u64;
    let dir = common::scratch("fork");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(&trace, "tcp", &["fork", &n.to_string()]);
    let text = common::stdout_of(&out);
    let parent = out_pid(&text, "parent ");
    let child = out_pid(&text, "child ");
    let procs = common::processes(&trace);
    let got = by_dir(&procs);
    let names: Vec<&str> = got.iter().map(|(d, _)| d.as_str()).collect();
    let (p, c, e) = (parent.to_string(), child.to_string(), format!("{child}.1"));
    let mut want = vec![p.as_str(), c.as_str(), e.as_str()];
    want.sort();
    assert_eq!(
        names, want,
        "parent, forked child, and the child's exec'd image"
    );
    for (d, rec) in &got {
        assert!(!rec.is_cut(), "{d}: complete");
        let (msgs, size) = if *d == p {
            (n, 100)
        } else if *d == c {
            (2 * n, 200)
        } else {
            (3 * n, 300)
        };
        assert_ucx_messages(rec, msgs, size, d);
    }
}

/// `sigmatop export --json` of the same run: three processes with their own totals. The model
/// keys processes by host, pid and trace start (src/agg/model.rs `ProcKey`), so `<child>` and
/// `<child>.1` (the image after exec) stay two processes.
#[test]
fn fork_and_exec_stay_separate_in_the_export() {
    let n = 1000u64;
    let dir = common::scratch("fork-export");
    let trace = Trace::new("simple", &dir);
    run_ucx(&trace, "tcp", &["fork", &n.to_string()]);
    let out = Command::new(common::sigmatop_bin())
        .arg("export")
        .arg(&trace.record)
        .args(["--json", "-"])
        .output()
        .expect("sigmatop export");
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut got: Vec<(u64, u64)> = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| {
            (
                p["tx_ops"].as_u64().unwrap(),
                p["tx_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(n, n * 100), (2 * n, 2 * n * 200), (3 * n, 3 * n * 300)],
        "parent, forked child, exec'd image"
    );
}

/// The pid after `key` in the program's output ("parent 123 child 124 ...").
fn out_pid(text: &str, key: &str) -> u32 {
    text.split(key)
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key:?} in {text:?}"))
}

#[test]
fn a_fork_never_leaves_the_child_a_lock_held_by_another_thread() {
    // Four threads define endpoints and take every other lock of the preload's (the registry's,
    // the doorbell state, the devx, verbs, libfabric and CUDA tables, the warnings: taken and
    // released thousands of times) while the main thread forks 300 times; each child takes every
    // lock, defines one endpoint and exits. Before the registry's locks were held across fork()
    // (pthread_atfork), a child forked while one of them was held waited forever (seen in
    // `fork_and_exec_stay_separate_in_the_export`: about one child in 200-300 here hung); the
    // other layers' locks were held across it only later (preload/src/fork.rs). The program
    // reports a child that has not exited within 10 s as hung, and how many locks the preload
    // holds across a fork: 15 (registry 5, verbs 4, devx 2, doorbell, libfabric, CUDA, warnings),
    // no verbs context being open.
    let dir = common::scratch("fork-locks");
    let trace = Trace::new("aggregate", &dir);
    let mut cmd = Command::new(fork_locks());
    cmd.arg("300");
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    let stdout = common::stdout_of(&out);
    assert!(
        out.status.success() && stdout.contains("locks=15 forks=300 hung=0"),
        "{stdout}{}",
        common::stderr_of(&out)
    );
}

#[test]
fn vfork_and_daemonised_children_are_traced() {
    let dir = common::scratch("vfork");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(&trace, "sm,self", &["vfork", "700"]);
    let child = out_pid(&common::stdout_of(&out), "vfork child ");
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1, "only the exec'd child traced anything");
    assert_eq!(procs[0].identity.pid, child);
    assert!(!procs[0].is_cut());
    assert_ucx_messages(&procs[0], 700, 64, "vfork + exec");

    let dir = common::scratch("daemon");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(&trace, "sm,self", &["daemon", "900"]);
    assert_eq!(common::stdout_of(&out).trim(), "daemon started");
    // The daemon outlives its launcher: wait for its record to end.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = Recording::open(std::slice::from_ref(&trace.record))
            .map(|r| r.processes.iter().any(|p| !p.is_cut()))
            .unwrap_or(false);
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "the daemon's record never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let procs = common::processes(&trace);
    assert_eq!(
        procs.len(),
        1,
        "the launcher and the middle process traced nothing"
    );
    assert_ucx_messages(&procs[0], 900, 64, "daemon");
}

/// `python3 -c` running multiprocessing with `method` over the ctypes binding: 3 processes,
/// process i sends 100·(i+1) messages of 64·(i+1) bytes; the parent interpreter sends nothing.
fn python_multiprocessing(method: &str) {
    let dir = common::scratch(&format!("python-{method}"));
    let trace = Trace::new("simple", &dir);
    let script = format!(
        "import sys; sys.path.insert(0, {:?}); import ucx_binding; ucx_binding.run({:?}, {method:?}, 3)",
        programs_dir().display().to_string(),
        ucx_life_lib().display().to_string()
    );
    let mut cmd = Command::new(common::require("python3"));
    cmd.arg("-c").arg(&script).env("UCX_TLS", "sm,self");
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let text = common::stdout_of(&out);
    let mut want = Vec::new();
    for i in 0..3u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("proc {i} ")))
            .unwrap_or_else(|| panic!("no line for process {i}: {text}"));
        want.push((out_pid(line, " pid "), 100 * (i + 1), 64 * (i + 1)));
    }
    let procs = common::processes(&trace);
    assert_eq!(
        procs.len(),
        3,
        "{method}: the three workers, nothing for the parent interpreter or Python's helpers"
    );
    for (pid, n, size) in want {
        let p = procs
            .iter()
            .find(|p| p.identity.pid == pid)
            .unwrap_or_else(|| panic!("{method}: no record of pid {pid}"));
        assert!(!p.is_cut(), "{method}: pid {pid} complete");
        assert_ucx_messages(p, n, size, &format!("{method}: pid {pid}"));
    }
}

#[test]
fn python_multiprocessing_spawn_over_a_ctypes_binding() {
    python_multiprocessing("spawn");
}

/// Python's fork start method ends each child with os._exit(), which runs no exit handler and no
/// destructor: without the preload's `_exit` hook a child that lives less than one flush (100 ms)
/// left a cut record with nothing in it (measured before the hook: 3 records, 0 of 600 messages).
#[test]
fn python_multiprocessing_fork_over_a_ctypes_binding() {
    python_multiprocessing("fork");
}

/// A C program that ends with `_exit(0)` or `_Exit(0)` microseconds after its last UCX call,
/// nothing closed: the record is complete and exact. Five runs of each, since the collector
/// thread the first call started may not even have run yet when the program exits.
#[test]
fn exit_without_handlers_is_recorded_completely() {
    for which in ["_exit", "_Exit"] {
        for i in 0..5u64 {
            let n = 100 + 10 * i;
            let dir = common::scratch(&format!("exit-{which}-{i}"));
            let trace = Trace::new("simple", &dir);
            let out = run_ucx(&trace, "sm,self", &[which, &n.to_string()]);
            let pid = out_pid(&common::stdout_of(&out), &format!("{which} "));
            let procs = common::processes(&trace);
            assert_eq!(procs.len(), 1, "{which} run {i}");
            assert_eq!(procs[0].identity.pid, pid, "{which} run {i}");
            assert!(
                !procs[0].is_cut(),
                "{which} run {i}: the record ends cleanly"
            );
            assert_ucx_messages(&procs[0], n, 64, &format!("{which} run {i}"));
        }
    }
}

/// A traced process that vforks twice mid-traffic: one child execs a traced program, the other's
/// exec fails and it calls `_exit(127)`. A vfork child shares its parent's memory, so the exec
/// and `_exit` hooks must leave the parent's collector alone: the parent's record holds all 2N
/// messages and ends cleanly, the exec'd child has its own record of N.
#[test]
fn vfork_children_that_exec_or_exit_leave_the_parents_tracing_alone() {
    let n = 400u64;
    let dir = common::scratch("vfork-amid");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(&trace, "sm,self", &["vfork-amid", &n.to_string()]);
    let text = common::stdout_of(&out);
    let parent = out_pid(&text, "vfork-amid ");
    let child = out_pid(&text, " child ");
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 2, "the parent and its exec'd child: {text}");
    for (pid, want, what) in [(parent, 2 * n, "parent"), (child, n, "exec'd child")] {
        let p = procs
            .iter()
            .find(|p| p.identity.pid == pid)
            .unwrap_or_else(|| panic!("no record of the {what} (pid {pid})"));
        assert!(!p.is_cut(), "{what}: the record ends cleanly");
        assert_ucx_messages(p, want, 64, what);
    }
}

#[test]
fn short_lived_processes_are_recorded_completely() {
    // They exit a few microseconds after their last call, often before the collector thread that
    // their first library call started has even been scheduled: the exit path must still start
    // it and flush everything. UCX (nothing closed before exit) and libfabric in turn.
    for i in 0..8 {
        let dir = common::scratch(&format!("short-lived-{i}"));
        let trace = Trace::new("simple", &dir);
        if i % 2 == 0 {
            run_ucx(&trace, "sm,self", &["short", "100"]);
            let procs = common::processes(&trace);
            assert_eq!(procs.len(), 1, "run {i}");
            assert!(!procs[0].is_cut(), "run {i}");
            assert_ucx_messages(&procs[0], 100, 64, &format!("run {i}"));
        } else {
            let mut cmd = Command::new(ofi_threads());
            cmd.args(["shm", "1", "50"]);
            trace.apply(&mut cmd);
            let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
            assert!(out.status.success(), "{}", common::stderr_of(&out));
            let procs = common::processes(&trace);
            assert_eq!(procs.len(), 1, "run {i}");
            assert!(!procs[0].is_cut(), "run {i}");
            for op in [Op::OfiSend, Op::OfiRecv, Op::OfiTSend, Op::OfiTRecv] {
                assert_eq!(
                    ok_failed_refused(&procs[0], op).0,
                    (50, 50 * 16),
                    "run {i} {op:?}"
                );
                assert_eq!(
                    events_of(&procs[0], op),
                    50 + ok_failed_refused(&procs[0], op).2,
                    "run {i} {op:?}: events"
                );
            }
        }
    }
}

// ---- Signals and exits ----

/// A child killed and reaped when dropped, so a failing test leaves no process behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `ucx_life stay N` (traced) and returns it once it printed "ready" (all N messages
/// done), its stdout drained by a thread so the pipe never fills.
fn staying(trace: &Trace, n: u64) -> Reaped {
    let mut cmd = ucx_cmd(trace, "tcp", &["stay", &n.to_string()]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().expect("start ucx_life");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let child = Reaped(child);
    match rx.recv_timeout(LIMIT) {
        Ok(l) if l == "ready" => child,
        other => panic!("ucx_life stay: {other:?}"),
    }
}

#[test]
fn signals_and_exits_leave_readable_records() {
    let n = 5000u64;
    for (sig, name) in [
        (libc::SIGTERM, "sigterm"),
        (libc::SIGKILL, "sigkill"),
        (libc::SIGABRT, "abort"),
    ] {
        let dir = common::scratch(name);
        let trace = Trace::new("simple", &dir);
        let mut child = staying(&trace, n);
        // Past the next flush (every 100 ms) and snapshot (every 250 ms) after the last message.
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.0.id() as i32, sig) };
        let st = child.0.wait().expect("wait");
        assert!(!st.success(), "{name}");
        let procs = common::processes(&trace);
        assert_eq!(procs.len(), 1, "{name}");
        assert!(procs[0].is_cut(), "{name}: marked as cut");
        assert_ucx_messages(&procs[0], n, 64, name);
    }
    // exit() from inside a signal handler runs the normal exit path: a complete record.
    let dir = common::scratch("handler-exit");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(&trace, "tcp", &["handler-exit", "3000"]);
    assert_eq!(out.status.code(), Some(7));
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    assert!(!procs[0].is_cut());
    assert_ucx_messages(&procs[0], 3000, 64, "exit from a handler");
    // The program's own handlers are untouched.
    let dir = common::scratch("own-handler");
    let out = run_ucx(&Trace::new("simple", &dir), "tcp", &["own-handler", "10"]);
    assert_eq!(common::stdout_of(&out).trim(), "handler ran 1");
}

// ---- The live socket: privacy, credentials, readers ----

/// The live socket of a traced process, once it exists.
fn socket_of(trace: &Trace, child: &mut Child) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(&trace.socket_dir).ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "sock"))
        });
        if let Some(s) = found {
            return s;
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            panic!("no socket appeared in {}", trace.socket_dir.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Decodes a byte stream of frames; the stream may end inside a frame (a reader that stopped).
fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut d = Decoder::new();
    d.push(bytes);
    let mut out = Vec::new();
    while let Some(f) = d.next_frame().expect("a valid sigmatop stream") {
        out.push(f);
    }
    out
}

/// Checks, without sigmatop's decoder, that `bytes` open with a hello frame: a 4-byte
/// little-endian length, then postcard's variant index 0 (Hello) and the magic "sigmatop".
fn opens_with_hello(bytes: &[u8]) -> bool {
    bytes.len() >= 13 && bytes[4] == 0 && &bytes[5..13] == b"sigmatop"
}

/// The frames a reader received from process `pid`: a hello of that process first (checked on
/// the bytes, then decoded), then whole frames.
fn stream_of(pid: u32, bytes: &[u8], who: &str) -> Vec<Frame> {
    assert!(opens_with_hello(bytes), "{who}: a hello first");
    let f = frames(bytes);
    match &f[0] {
        Frame::Hello { identity, .. } => assert_eq!(identity.pid, pid, "{who}"),
        other => panic!("{who}: first frame {other:?}"),
    }
    f
}

/// Reads until EOF or `limit`.
fn read_all(s: &mut UnixStream, limit: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    v
}

#[test]
fn socket_is_private_and_other_uids_are_refused_by_their_credentials() {
    if !common::is_root() {
        return common::skip(
            "needs root (to run a process as uid 65534 and to open the socket's path to it): run the suite as root (CI does)",
        );
    }
    let dir = common::scratch("socket-private");
    let trace = Trace::new("aggregate", &dir);
    let mut child = staying(&trace, 10);
    let sock = socket_of(&trace, &mut child.0);
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&trace.socket_dir), 0o700);
    assert_eq!(mode(&sock), 0o600);
    // A process of uid 65534 tries to connect and read: "refused ERRNO" when connect() fails,
    // else "connected N" with N the bytes it read before the server closed the connection.
    let foreign = || {
        // Started as root, it drops to uid/gid 65534 (no supplementary groups) before it
        // touches the socket; everything it needs is imported first.
        let script = format!(
            "import os, socket\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\nassert os.getuid() == 65534 and os.geteuid() == 65534\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(10)\ntry:\n  s.connect({:?})\nexcept OSError as e:\n  print('refused', e.errno); raise SystemExit\nn=0\nwhile True:\n  b=s.recv(65536)\n  if not b: break\n  n+=len(b)\nprint('connected', n)",
            sock.display().to_string()
        );
        let out = Command::new(common::require("python3"))
            .arg("-c")
            .arg(&script)
            .output()
            .expect("python3");
        format!(
            "{}{}",
            common::stdout_of(&out).trim(),
            common::stderr_of(&out)
        )
    };
    // As created, the file system keeps it out: the directory is 0700 (EACCES).
    assert_eq!(foreign(), format!("refused {}", libc::EACCES));
    // Given a path (a directory it may traverse, a socket anyone may write to), it connects,
    // and sigmatop's SO_PEERCRED check closes the connection without sending a byte...
    std::fs::set_permissions(&trace.socket_dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(foreign(), "connected 0", "refused by the credential check");
    // ...while its own user, through the same path, is welcome: the hello, with this pid.
    let mut own = UnixStream::connect(&sock).expect("connect as the owner");
    own.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 13];
    own.read_exact(&mut head)
        .expect("the owner reads the hello");
    assert!(opens_with_hello(&head), "{head:?}");
    drop(own);
    drop(child);
}

/// What a reader that never reads can hold: the kernel's buffer for the socket, whose size the
/// preload asks for (4 MiB, SO_SNDBUF) and the kernel caps at net.core.wmem_max, then doubles.
fn stalled_reader_capacity() -> usize {
    let max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4 << 20);
    2 * max.min(4 << 20)
}

/// A real UCX program for the live-reader tests: one thread, rounds of `n` tagged messages over
/// shared memory, every event sent live (`SIGMATOP_SAMPLE=1`) every 10 ms; it waits for the file
/// `go` once its collector listens, and ends after its current round once `stop` exists.
struct LiveUcx {
    n: u64,
    trace: Trace,
    go: PathBuf,
    stop: PathBuf,
    child: Reaped,
}

fn live_ucx(name: &str) -> LiveUcx {
    let n = 100_000u64;
    let dir = common::scratch(name);
    let trace = Trace::new("simple", &dir);
    let (go, stop) = (dir.join("go"), dir.join("stop"));
    let mut cmd = ucx_cmd(&trace, "sm,self", &["threads", "1", &n.to_string()]);
    cmd.env("LIFE_GO", &go)
        .env("LIFE_STOP", &stop)
        .env("SIGMATOP_SAMPLE", "1")
        .env("SIGMATOP_INTERVAL_MS", "10");
    let child = Reaped(common::spawn(&mut cmd));
    LiveUcx {
        n,
        trace,
        go,
        stop,
        child,
    }
}

#[test]
fn stalled_and_vanishing_readers_never_block_the_program() {
    // A real UCX program, one thread sending rounds of 100,000 tagged messages over shared
    // memory, every event sent live (SIGMATOP_SAMPLE=1) every 10 ms. Three readers connect
    // before it sends: one never reads, one leaves after 7 bytes (inside the hello frame), one
    // reads everything. The program is told to stop (after its current round) once the stream
    // has outgrown what the stalled reader can hold by 1 MiB: from then on the collector could
    // only have gone on by not waiting for that reader.
    let LiveUcx {
        n,
        trace,
        go,
        stop,
        mut child,
    } = live_ucx("stalled-reader");
    // The program's thread opened its context (so the collector started and listens) and waits
    // for `go`: connect the readers first.
    let sock = socket_of(&trace, &mut child.0);
    let mut stalled = UnixStream::connect(&sock).expect("the stalled reader connects");
    let mut vanishing = UnixStream::connect(&sock).expect("the vanishing reader connects");
    let mut healthy = UnixStream::connect(&sock).expect("the healthy reader connects");
    let enough = stalled_reader_capacity() + (1 << 20);
    let stop_at = stop.clone();
    let reader = std::thread::spawn(move || {
        healthy
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match healthy.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => all.extend_from_slice(&buf[..k]),
            }
            if all.len() > enough && !stop_at.exists() {
                std::fs::write(&stop_at, b"stop").unwrap();
            }
        }
        all
    });
    let mut part = [0u8; 7];
    vanishing
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    vanishing
        .read_exact(&mut part)
        .expect("the vanishing reader reads 7 bytes");
    drop(vanishing);
    std::fs::write(&go, b"go").unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.0.try_wait().expect("wait") {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the program did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = start.elapsed();
    let mut text = String::new();
    let mut err = String::new();
    let _ = child
        .0
        .stdout
        .take()
        .map(|mut o| o.read_to_string(&mut text));
    let _ = child
        .0
        .stderr
        .take()
        .map(|mut e| e.read_to_string(&mut err));
    assert!(status.success(), "{status:?}: {err}");
    // Only now, with the program gone, does the stalled reader read what it was sent.
    let stalled_bytes = read_all(&mut stalled, Duration::from_secs(10));
    let healthy_bytes = reader.join().expect("healthy reader");
    let rounds: u64 = text
        .trim()
        .strip_prefix(&format!("threads 1 messages {n} each rounds "))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("output: {text:?}"));
    assert!(stop.exists(), "stopped by the test, not by itself");

    // The program: every message counted, every event on disk or counted as lost.
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    let pid = p.identity.pid;
    let (msgs, bytes) = (rounds * n, rounds * n * 32);
    let t = common::totals(p);
    assert_eq!(common::op(&t, "tag_send"), (msgs, bytes), "sends");
    assert_eq!(common::op(&t, "tag_recv"), (msgs, bytes), "receives");
    let drops = p.end.expect("clean end").1;
    assert_eq!(
        t.events_on_disk + drops.ring_full,
        2 * msgs,
        "every event is on disk or counted as lost to a full ring"
    );

    // The healthy reader: the whole stream, from the hello to the goodbye, its last snapshot
    // holding the exact totals.
    let hf = stream_of(pid, &healthy_bytes, "healthy reader");
    assert!(
        matches!(hf.last(), Some(Frame::Bye { .. })),
        "the healthy reader got the goodbye"
    );
    let snapshots = |fs: &[Frame]| -> Vec<sigmatop::event::Snapshot> {
        fs.iter()
            .filter_map(|f| match f {
                Frame::Snapshot(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    };
    let sent = |s: &sigmatop::event::Snapshot| -> (u64, u64) {
        s.counts
            .iter()
            .filter(|c| c.op == Op::UcxTagSend as u8)
            .fold((0, 0), |a, c| (a.0 + c.ops, a.1 + c.bytes))
    };
    let hs = snapshots(&hf);
    assert_eq!(
        sent(hs.last().expect("snapshots")),
        (msgs, bytes),
        "the live totals are exact"
    );

    // The vanishing reader got the first 7 bytes of that same hello.
    assert_eq!(
        part[..],
        healthy_bytes[..7],
        "the vanishing reader's 7 bytes"
    );

    // The stalled reader connected and was sent the beginning of the stream: a hello of this
    // process, then whole frames (the last one possibly cut when the program exited); its
    // snapshots are ones the healthy reader got too, identical. It got less than the healthy
    // reader by more than 1 MiB: the collector went on without it, and the program finished.
    let sf = stream_of(pid, &stalled_bytes, "stalled reader");
    let ss = snapshots(&sf);
    assert!(!ss.is_empty(), "the stalled reader was sent snapshots");
    for s in &ss {
        let same = hs
            .iter()
            .find(|h| h.seq == s.seq)
            .expect("the same snapshot");
        assert_eq!(same.counts, s.counts, "snapshot {}", s.seq);
    }
    assert!(
        sent(ss.last().unwrap()).0 < msgs,
        "the stalled reader did not get the final totals"
    );
    assert!(
        stalled_bytes.len() + (1 << 20) < healthy_bytes.len(),
        "the stream ({} B) outgrew what the stalled reader held ({} B)",
        healthy_bytes.len(),
        stalled_bytes.len()
    );
    eprintln!(
        "stalled readers: program ran {took:?} ({rounds} rounds of {n} messages); healthy reader {} B in {} frames, stalled reader {} B in {} frames; ring full {}",
        healthy_bytes.len(),
        hf.len(),
        stalled_bytes.len(),
        sf.len(),
        drops.ring_full
    );
}

/// Broadcast frames of a stream after the snapshot of sequence `seq` (up to the end), leaving
/// out `Missed` frames: (frames, sampled events in their `Events` frames), and the last `Missed`
/// count of the whole stream ((0, 0) when none came).
fn after_snapshot(fs: &[Frame], seq: u64, who: &str) -> ((u64, u64), (u64, u64)) {
    let start = fs
        .iter()
        .position(|f| matches!(f, Frame::Snapshot(s) if s.seq == seq))
        .unwrap_or_else(|| panic!("{who}: no snapshot {seq}"));
    let mut n = (0u64, 0u64);
    for f in &fs[start + 1..] {
        match f {
            Frame::Missed { .. } => {}
            Frame::Events(e) => n = (n.0 + 1, n.1 + e.len() as u64),
            _ => n.0 += 1,
        }
    }
    let missed = fs
        .iter()
        .rev()
        .find_map(|f| match f {
            Frame::Missed { frames, events } => Some((*frames, *events)),
            _ => None,
        })
        .unwrap_or((0, 0));
    (n, missed)
}

/// The sequence number of the second snapshot of a stream: the first one is the copy a reader
/// gets on connecting, the second one was broadcast to every reader.
fn second_snapshot(fs: &[Frame], who: &str) -> u64 {
    fs.iter()
        .filter_map(|f| match f {
            Frame::Snapshot(s) => Some(s.seq),
            _ => None,
        })
        .nth(1)
        .unwrap_or_else(|| panic!("{who}: fewer than two snapshots"))
}

/// Sums `ops` of operation `name` over a JSON report's process (`attach --json`).
fn json_ops(process: &serde_json::Value, name: &str) -> (u64, u64) {
    let mut t = (0, 0);
    for e in process["endpoints"].as_array().into_iter().flatten() {
        if let Some(o) = e["ops"].get(name) {
            t.0 += o["ops"].as_u64().unwrap_or(0);
            t.1 += o["bytes"].as_u64().unwrap_or(0);
        }
    }
    t
}

#[test]
fn frames_dropped_for_a_slow_reader_reach_that_reader() {
    // A real UCX program (one thread, rounds of 100,000 tagged messages over shared memory),
    // every event sent live every 10 ms. Three readers connect before it sends: a healthy one
    // that reads everything, a raw one that stops reading, and `sigmatop attach --json`, which
    // the test suspends (SIGSTOP, as a dashboard put in the background or descheduled). Once
    // the stream has outgrown what a stopped reader can hold (the kernel's socket buffer and the
    // 8 MiB queue for it in the process) by 1 MiB, both resume; the program is stopped after 2
    // more MiB. Frames dropped for them must reach them (`Frame::Missed`), exactly: what the raw
    // reader received and what it was told it missed add up to what the healthy reader received;
    // `attach --json` shows the count, and the dashboard's status line shows it.
    let LiveUcx {
        n,
        trace,
        go,
        stop,
        mut child,
    } = live_ucx("slow-reader-told");
    let sock = socket_of(&trace, &mut child.0);
    let pid = child.0.id();

    // sigmatop attach --json, printing a report every 100 ms; connected once it printed one.
    let mut attach = Command::new(common::sigmatop_bin());
    attach
        .args(["attach", "--json", "--interval-ms", "100", "--socket-dir"])
        .arg(&trace.socket_dir)
        .arg(pid.to_string());
    let mut attach = Reaped(common::spawn(&mut attach));
    let attach_pid = attach.0.id() as libc::pid_t;
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let out = attach.0.stdout.take().expect("attach's stdout");
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("attach printed a report");
    assert!(first.contains(&format!("\"pid\":{pid}")), "{first}");

    let mut stalled = UnixStream::connect(&sock).expect("the raw slow reader connects");
    let mut healthy = UnixStream::connect(&sock).expect("the healthy reader connects");
    let resume_at = stalled_reader_capacity() + (8 << 20) + (1 << 20);
    let stop_at = resume_at + (2 << 20);
    let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
    let stop_file = stop.clone();
    let reader = std::thread::spawn(move || {
        healthy
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut resumed = false;
        loop {
            match healthy.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => all.extend_from_slice(&buf[..k]),
            }
            if all.len() > resume_at && !resumed {
                resumed = true;
                let _ = resume_tx.send(());
            }
            if all.len() > stop_at && !stop_file.exists() {
                std::fs::write(&stop_file, b"stop").unwrap();
            }
        }
        all
    });
    // SAFETY: a signal to the attach process this test started (still a child, not reaped).
    assert_eq!(unsafe { libc::kill(attach_pid, libc::SIGSTOP) }, 0);
    std::fs::write(&go, b"go").unwrap();
    resume_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the stream outgrew a stopped reader");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(attach_pid, libc::SIGCONT) }, 0);
    let stalled_bytes = read_all(&mut stalled, Duration::from_secs(120));
    let healthy_bytes = reader.join().expect("healthy reader");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.0.try_wait().expect("wait") {
            break st;
        }
        assert!(start.elapsed() < LIMIT, "the program did not finish");
        std::thread::sleep(Duration::from_millis(10));
    };
    let (mut text, mut err) = (String::new(), String::new());
    let _ = child
        .0
        .stdout
        .take()
        .map(|mut o| o.read_to_string(&mut text));
    let _ = child
        .0
        .stderr
        .take()
        .map(|mut e| e.read_to_string(&mut err));
    assert!(status.success(), "{status:?}: {err}");
    let rounds: u64 = text
        .trim()
        .strip_prefix(&format!("threads 1 messages {n} each rounds "))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("output: {text:?}"));
    let (msgs, bytes) = (rounds * n, rounds * n * 32);

    // The raw reader: received + told it missed = what the healthy reader received, frames and
    // sampled events, from a snapshot both got on.
    let hf = stream_of(pid, &healthy_bytes, "healthy reader");
    let sf = stream_of(pid, &stalled_bytes, "slow reader");
    for (fs, who) in [(&hf, "healthy reader"), (&sf, "slow reader")] {
        assert!(
            matches!(fs.last(), Some(Frame::Bye { .. })),
            "{who}: the stream ends with the goodbye"
        );
    }
    let seq = second_snapshot(&hf, "healthy").max(second_snapshot(&sf, "slow"));
    let (h, h_missed) = after_snapshot(&hf, seq, "healthy reader");
    let (s, s_missed) = after_snapshot(&sf, seq, "slow reader");
    assert_eq!(h_missed, (0, 0), "the healthy reader missed nothing");
    assert!(s_missed.0 > 0, "frames were dropped for the slow reader");
    assert!(s_missed.1 > 0, "sampled events were in them");
    assert_eq!(
        (s.0 + s_missed.0, s.1 + s_missed.1),
        h,
        "slow reader: received {s:?} + missed {s_missed:?} = healthy reader's {h:?}"
    );
    // Totals survive the drops: the slow reader's last snapshot is the healthy reader's and
    // the record's.
    let last = |fs: &[Frame]| {
        fs.iter()
            .rev()
            .find_map(|f| match f {
                Frame::Snapshot(s) => Some(s.clone()),
                _ => None,
            })
            .expect("a snapshot")
    };
    assert_eq!(last(&sf), last(&hf), "the same final snapshot");
    let procs = common::processes(&trace);
    let t = common::totals(&procs[0]);
    assert_eq!(common::op(&t, "tag_send"), (msgs, bytes), "record: sends");
    let live_sends = last(&sf)
        .counts
        .iter()
        .filter(|c| c.op == Op::UcxTagSend as u8)
        .fold((0, 0), |a, c| (a.0 + c.ops, a.1 + c.bytes));
    assert_eq!(live_sends, (msgs, bytes), "live: sends");

    // The dashboard fed the slow reader's frames shows the count on its status line.
    let mut model = sigmatop::agg::Model::new();
    let key = sigmatop::agg::ProcKey {
        host: procs[0].identity.host.clone(),
        pid,
        start_ns: procs[0].identity.start_ns,
    };
    for f in sf.iter().cloned() {
        model.apply(&key, f);
    }
    let vm = sigmatop::cli::view_model::build_view(
        &model,
        &sigmatop::cli::view_model::ViewOptions {
            window: sigmatop_tui::Window::S10,
            at: None,
            source: "test".into(),
            clock: sigmatop::cli::view_model::ClockStyle::SinceStart,
            now_ns: None,
        },
    );
    assert_eq!(vm.status.frames_lost, s_missed.0, "the view model's count");
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 60)).unwrap();
    term.draw(|f| sigmatop_tui::draw(f, &sigmatop_tui::App::new(sigmatop_tui::Theme::dark()), &vm))
        .unwrap();
    let screen: String = term
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect();
    let shown = format!("frames lost {}", sigmatop_tui::units::count(s_missed.0));
    assert!(screen.contains(&shown), "the status line shows {shown:?}");

    // attach --json: its last report (the process said goodbye) has the exact totals and says
    // what it missed. (It was stopped with SIGSTOP and has a backlog to read: generous on a
    // loaded machine.)
    let deadline = Instant::now() + Duration::from_secs(120);
    let report = loop {
        let l = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("attach reports the process's end");
        let v: serde_json::Value = serde_json::from_str(&l).expect("a JSON report");
        if v["processes"][0]["clean_exit"] == true {
            break v;
        }
    };
    drop(attach);
    let p = &report["processes"][0];
    assert_eq!(json_ops(p, "tag_send"), (msgs, bytes), "attach: sends");
    let frames = report["live_missed"]["frames"].as_u64().unwrap_or(0);
    let events = report["live_missed"]["events"].as_u64().unwrap_or(0);
    assert!(
        frames > 0 && events > 0,
        "attach was told it missed frames: {report}"
    );
    assert_eq!(p["live_missed"], report["live_missed"], "one process");
    assert!(frames <= h.0 && events <= h.1, "no more than there were");
    eprintln!(
        "slow readers: {rounds} rounds of {n} messages; healthy reader {} B, {h:?} (frames, events) after snapshot {seq}; raw slow reader {} B, received {s:?}, missed {s_missed:?}; attach missed {frames} frames, {events} events",
        healthy_bytes.len(),
        stalled_bytes.len()
    );
}

/// tests/programs/lifecycle.c: libfabric through dlopen(RTLD_LOCAL) + dlsym, closed, reloaded.
fn lifecycle() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    gcc(&BIN, "lifecycle.c", "lifecycle", &["-ldl"])
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
