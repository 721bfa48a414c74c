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
#[path = "../common/mod.rs"]
mod common;
mod live_socket;
mod processes;
mod signals;
mod threads;

use std::io::{BufRead, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Bounded, Trace};
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
    let iters = iters.to_string();
    let pp = common::fi_pingpong(
        &["-p", "tcp", "-e", "msg", "-I", &iters, "-S", "1024"],
        |c| {
            if let Some(t) = trace {
                t.apply(c);
            }
            for (k, v) in env {
                c.env(k, v);
            }
        },
        LIMIT,
    );
    (pp.server, pp.client)
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

/// A child ended (with all it started) and reaped when dropped, so a failing test leaves no
/// process behind.
struct Reaped(common::Proc);

impl Reaped {
    /// Waits for the program to end (failing past `limit`): its status, stdout and stderr.
    fn finish(&mut self, limit: Duration) -> (std::process::ExitStatus, String, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(st) = self.0.try_wait().expect("wait") {
                break st;
            }
            assert!(start.elapsed() < limit, "the program did not finish");
            std::thread::sleep(Duration::from_millis(10));
        };
        let (mut text, mut err) = (String::new(), String::new());
        if let Some(mut o) = self.0.stdout.take() {
            let _ = o.read_to_string(&mut text);
        }
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status, text, err)
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
    let child = Reaped(common::guard(child));
    match rx.recv_timeout(LIMIT) {
        Ok(l) if l == "ready" => child,
        other => panic!("ucx_life stay: {other:?}"),
    }
}
