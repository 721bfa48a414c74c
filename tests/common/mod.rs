//! Shared helpers for the integration tests: find the built preload and CLI, run real programs
//! under the preload, and read what sigmatop recorded about them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use sigmatop::event::{EndpointDef, Op};
use sigmatop::trace::reader::{ProcessRecording, Recording};

pub mod netns;
pub mod tmux;

/// target/<profile>/ of the running test binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(|p| p.parent())
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// The preload library built beside the tests. Panics with the command to run when it is missing.
pub fn preload() -> PathBuf {
    let p = target_dir().join("libsigmatop_preload.so");
    assert!(
        p.is_file(),
        "{} is missing: build it first with `cargo build --workspace` (the README's test command does)",
        p.display()
    );
    p
}

/// The sigmatop binary built beside the tests.
pub fn sigmatop_bin() -> PathBuf {
    let p = target_dir().join("sigmatop");
    assert!(
        p.is_file(),
        "{} is missing: build it first with `cargo build --workspace`",
        p.display()
    );
    p
}

/// True under CI (`CI=true`, which CI sets and scripts/test.sh exports): a missing prerequisite
/// must then fail the test, never let it pass.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// The file, under target/, where skipped tests write why; scripts/test.sh prints it at the end
/// of the run ("N tests skipped: ...") and empties it before.
pub fn skips_file() -> PathBuf {
    target_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(target_dir)
        .join("test-skips.txt")
}

/// "binary::test" of the running test (libtest names each test's thread after it).
fn test_name() -> String {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // test binaries are named `<test>-<hash>`.
    let bin = bin
        .rsplit_once('-')
        .map(|(b, _)| b.to_string())
        .unwrap_or(bin);
    let thread = std::thread::current();
    format!("{bin}::{}", thread.name().unwrap_or("?"))
}

fn record_skip(line: &str) {
    use std::io::Write;
    // Past libtest's capture (it takes `print!`/`eprint!` only), so the line shows in any run.
    let _ = std::io::stderr().write_all(format!("\n!!!!!!!! {line} !!!!!!!!\n").as_bytes());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skips_file())
    {
        // One write of one line: appends of concurrent tests do not interleave.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// A prerequisite of the running test is missing. Under CI (`CI=true`) this is a failure whose
/// message is `reason` (which must say what to install or how to run). Elsewhere the test may
/// return after this call: the skip is printed past libtest's capture and written to
/// [`skips_file`], which scripts/test.sh prints in its summary.
pub fn skip(reason: &str) {
    let name = test_name();
    assert!(
        !ci(),
        "{name}: a prerequisite is missing under CI=true (a test never passes by skipping there): {reason}"
    );
    record_skip(&format!("SKIPPED {name}: {reason}"));
}

/// A run the test repeated (a third-party program's own race): listed with the skips, so the
/// suite's summary shows it even when the test passes.
pub fn note_retry(what: &str) {
    record_skip(&format!("RETRIED in {}: {what}", test_name()));
}

/// The one skip allowed under CI: tests that need a GPU, on a machine without one (CI has none).
/// Visible like [`skip`] (stderr and the summary of scripts/test.sh), and the test passes. On a
/// machine with a GPU ([`gpu_here`]) it is a failure whose message is `reason`: a GPU test
/// never passes by skipping where it could run (what else it needs must be installed).
pub fn skip_gpu_test(reason: &str) {
    let name = test_name();
    if let Some(gpu) = gpu_here() {
        panic!("{name}: a GPU is here ({gpu}), so this GPU test may not skip: {reason}");
    }
    record_skip(&format!(
        "SKIPPED {name} (a GPU test, no GPU here: the one skip allowed on CI): {reason}"
    ));
}

/// How this machine shows an NVIDIA GPU, if it has one: a device node `/dev/nvidia<N>` (the
/// driver is loaded), or a `GPU <n>:` line of `nvidia-smi -L`. None: no GPU here.
pub fn gpu_here() -> Option<String> {
    if let Ok(rd) = std::fs::read_dir("/dev") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.strip_prefix("nvidia")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            {
                return Some(format!("/dev/{n}"));
            }
        }
    }
    let o = Command::new("nvidia-smi")
        .arg("-L")
        .output_within(Duration::from_secs(60))
        .ok()?;
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("GPU "))?;
    (o.status.success()).then(|| format!("nvidia-smi -L: {line}"))
}

/// Whether this process runs as root; tests that need it call [`skip`] otherwise.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails loudly when a program the test needs is not installed (the README's test command
/// installs every one of them).
pub fn require(program: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{program} is not installed: run the README's test command, which installs it (see scripts/test.sh)"
    );
}

/// Compiles `tests/programs/<src>` with `compiler` (gcc, mpicc) into a scratch directory as
/// `out`, with `flags` after the source (libraries), and returns the program's path. The
/// compilers and headers come from the packages scripts/test.sh installs.
pub fn build_program(compiler: &str, src: &str, out: &str, flags: &[&str]) -> PathBuf {
    let dest = scratch(&format!("{out}-build")).join(out);
    let o = Command::new(require(compiler))
        .args(["-O2", "-pthread", "-o"])
        .arg(&dest)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/programs")
                .join(src),
        )
        .args(flags)
        .output_bounded()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        o.status.success(),
        "{compiler} {src} (scripts/test.sh installs the compilers and headers):\n{}",
        stderr_of(&o)
    );
    dest
}

/// A fresh scratch directory under target/.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicU16 = AtomicU16::new(0);
    let d = target_dir().join("test-scratch").join(format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// A TCP port that is free now, below the kernel's ephemeral range (so no client socket of another
/// test can be sitting on it), never handed out twice by one test process, and checked with a
/// bind *without* SO_REUSEADDR (so a port in TIME_WAIT, which a server that does not set it could
/// not bind, is skipped).
pub fn port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000; // 10000..32000, under 32768 where Linux's ephemeral ports start
    let start = (std::process::id() % 550) * 40;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) as u32;
        let p = (LOW + (start + n) % SPAN) as u16;
        if port_is_free(p) {
            return p;
        }
    }
    panic!("no free TCP port in {LOW}..{}", LOW + SPAN);
}

fn port_is_free(port: u16) -> bool {
    // SAFETY: a plain socket, bound once and closed; all pointers are to locals.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return false;
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: 0 },
            sin_zero: [0; 8],
        };
        let ok = libc::bind(
            fd,
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) == 0;
        libc::close(fd);
        ok
    }
}

/// How a command is traced.
#[derive(Clone, Debug)]
pub struct Trace {
    pub mode: &'static str,
    pub record: PathBuf,
    pub socket_dir: PathBuf,
}

impl Trace {
    pub fn new(mode: &'static str, dir: &Path) -> Trace {
        Trace {
            mode,
            record: dir.join("rec"),
            socket_dir: dir.join("sock"),
        }
    }
    /// Adds the preload environment to `cmd`.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env("LD_PRELOAD", preload())
            .env("SIGMATOP_MODE", self.mode)
            .env("SIGMATOP_RECORD", &self.record)
            .env("SIGMATOP_SOCKET_DIR", &self.socket_dir);
    }
}

/// A process this test started, ended when the guard is dropped (the test's end, a panic, an
/// early return): SIGKILL to its process group when it leads one ([`spawn`]'s do), to every
/// process below it (a daemon that left the group, an MPI rank), then reaped. Derefs to the
/// [`Child`], so `id()`, `try_wait()`, `stdout.take()` work as on a child.
pub struct Proc(Option<Child>);

impl Proc {
    /// The child, no longer guarded: the caller ends it.
    pub fn into_child(mut self) -> Child {
        self.0
            .take()
            .expect("a guard holds its child until dropped")
    }

    /// Waits for it with a timeout; see [`wait_timeout`].
    pub fn finish(self, limit: Duration) -> Output {
        wait_timeout(self, limit)
    }
}

impl From<Child> for Proc {
    fn from(c: Child) -> Proc {
        Proc(Some(c))
    }
}

impl std::ops::Deref for Proc {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0
            .as_ref()
            .expect("a guard holds its child until dropped")
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Child {
        self.0
            .as_mut()
            .expect("a guard holds its child until dropped")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            end(&mut c);
        }
    }
}

/// Ends `c` and everything it started: its process group when it leads one, every process
/// below it, then reaps it. A child that already exited is only reaped (its pid, and so its
/// group id, may not be reused before that).
fn end(c: &mut Child) {
    let pid = c.id() as libc::pid_t;
    // SAFETY: getpgid(2) of this test's child; it is not reaped before the call below, so its
    // pid is its own (a zombie keeps it).
    let leads = unsafe { libc::getpgid(pid) } == pid;
    if let Ok(Some(_)) = c.try_wait() {
        // Reaped now: what it left in the group it led (the group id is not reused while any
        // member lives).
        if leads {
            // SAFETY: kill(2) of the group this test's child led; ESRCH when empty.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        return;
    }
    // Below it first (while the links to it still exist), then its group, then it.
    kill_tree(c.id());
    if leads {
        // SAFETY: kill(2) of the group this test's child leads (never the test's own group).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// Waits for a child with a timeout, killing it when the time is up: its whole process group when
/// it leads one ([`spawn`]'s children do), and every process below it. Its output pipes are read
/// meanwhile (on threads of their own), so a child that prints more than a pipe holds never
/// blocks. Whatever it started and left in its group (a server it forked) is ended too, on
/// success as well. A child that exited while a process it started outside its group (a daemon,
/// `setsid`) still holds its output open fails the test at `limit`, saying so.
pub fn wait_timeout(child: impl Into<Proc>, limit: Duration) -> Output {
    let mut p: Proc = child.into();
    let start = Instant::now();
    let pid = p.id() as libc::pid_t;
    // SAFETY: getpgid(2) of this test's child, not reaped yet (its pid is its own).
    let leads = unsafe { libc::getpgid(pid) } == pid;
    let out = p.stdout.take().map(PipeReader::new);
    let err = p.stderr.take().map(PipeReader::new);
    let collect = |r: Option<PipeReader>, until: Instant| -> Result<Vec<u8>, Vec<u8>> {
        match r {
            None => Ok(Vec::new()),
            Some(r) => r.finish_by(until),
        }
    };
    loop {
        match p.try_wait() {
            Ok(Some(status)) => {
                // Reaped by try_wait: this returns its status at once.
                let _ = p.into_child().wait();
                // What it left in its group (a process that went on): the group id is not
                // reused while any member lives.
                if leads {
                    // SAFETY: kill(2) of the group this test's child led; ESRCH when empty.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                }
                let until = (start + limit).max(Instant::now() + Duration::from_secs(2));
                match (collect(out, until), collect(err, until)) {
                    (Ok(stdout), Ok(stderr)) => {
                        return Output {
                            status,
                            stdout,
                            stderr,
                        };
                    }
                    (o, e) => panic!(
                        "the command exited ({status}), but something it started outside its \
                         process group still held its output open after {limit:?}\nstdout:\n{}\n\
                         stderr:\n{}",
                        String::from_utf8_lossy(&o.unwrap_or_else(|b| b)),
                        String::from_utf8_lossy(&e.unwrap_or_else(|b| b))
                    ),
                }
            }
            Ok(None) if start.elapsed() > limit => {
                // Dropping the guard kills everything below it and its group, then reaps it.
                drop(p);
                let until = Instant::now() + Duration::from_secs(2);
                let o = collect(out, until).unwrap_or_else(|b| b);
                let e = collect(err, until).unwrap_or_else(|b| b);
                panic!(
                    "command timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&o),
                    String::from_utf8_lossy(&e)
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("wait failed: {e}"),
        }
    }
}

/// The longest one program a test runs through [`Bounded`] may take: a program past it hangs (the
/// slowest of them, on a loaded 2-core machine, take a minute).
pub const PROGRAM_LIMIT: Duration = Duration::from_secs(300);

/// `Command::output` and `Command::status` with a time limit, so that no program a test runs
/// can keep it waiting forever: the program is started as [`spawn`] does (a process group of
/// its own, stdin from /dev/null, signals at their default) and waited for with
/// [`wait_timeout`]: past the limit it is killed with all it started and the test fails with
/// what it printed.
pub trait Bounded {
    /// Its output, within `limit`. Err only when it cannot be started.
    fn output_within(&mut self, limit: Duration) -> std::io::Result<Output>;
    /// Its output, within [`PROGRAM_LIMIT`].
    fn output_bounded(&mut self) -> std::io::Result<Output> {
        self.output_within(PROGRAM_LIMIT)
    }
    /// Its exit status, within [`PROGRAM_LIMIT`], its output discarded (stdout and stderr to
    /// /dev/null: a daemon it starts, such as tmux's server, may keep them), and nothing it leaves
    /// running ended (the daemon is the point).
    fn status_bounded(&mut self) -> std::io::Result<std::process::ExitStatus>;
}

impl Bounded for Command {
    fn output_within(&mut self, limit: Duration) -> std::io::Result<Output> {
        use std::os::unix::process::CommandExt;
        let child = default_signals(self)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        Ok(wait_timeout(child, limit))
    }

    fn status_bounded(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let mut c = default_signals(self)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let start = Instant::now();
        loop {
            if let Some(st) = c.try_wait()? {
                return Ok(st);
            }
            if start.elapsed() > PROGRAM_LIMIT {
                kill_tree(c.id());
                let _ = c.wait();
                panic!("{self:?} still ran after {PROGRAM_LIMIT:?}: killed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// SIGINT, SIGQUIT, SIGHUP and SIGTERM at their default in what `cmd` starts, as in a job a shell
/// starts in the foreground, whatever the test runner inherited: a suite started in the
/// background by a non-interactive shell ignores the first two, one started under nohup ignores
/// SIGHUP, an ignored signal stays ignored across exec, and
/// `sigmatop run` rightly passes an ignored-at-start signal on as ignored (nohup) — a test that
/// sends one would then wait for a program that never stops.
pub fn default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and calls only signal(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// Starts `cmd` with its output piped, in a process group of its own (see [`wait_timeout`]),
/// guarded: dropped, it is ended with all it started. The signals are at their default
/// in it, as in a job a shell starts in the foreground, whatever the test runner inherited (a
/// suite started in the background by a non-interactive shell ignores both, and an ignored
/// signal stays ignored across exec: a test's Ctrl-C would then stop nothing).
pub fn spawn(cmd: &mut Command) -> Proc {
    use std::os::unix::process::CommandExt;
    default_signals(cmd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Proc::from)
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// Guards a child started otherwise (its own stdio, no group of its own): see [`Proc`].
pub fn guard(c: Child) -> Proc {
    Proc::from(c)
}

/// Totals of one process's record: (endpoint label or "unattributed", op name) -> (ops, bytes),
/// from the last cumulative snapshot.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub by_op: BTreeMap<String, (u64, u64)>,
    pub per_ep: BTreeMap<(u32, String), (u64, u64)>,
    pub endpoints: Vec<EndpointDef>,
    pub events: u64,
    pub events_on_disk: u64,
    pub cut: bool,
}

pub fn totals(p: &ProcessRecording) -> Totals {
    let mut t = Totals {
        endpoints: p.endpoints.clone(),
        cut: p.is_cut(),
        ..Default::default()
    };
    if let Some(s) = p.last_snapshot() {
        t.events = s.events;
        for c in &s.counts {
            let name = Op::from_u8(c.op)
                .map(|o| o.name().to_string())
                .unwrap_or_else(|| format!("op{}", c.op));
            let e = t.by_op.entry(name.clone()).or_default();
            e.0 += c.ops;
            e.1 += c.bytes;
            let e = t.per_ep.entry((c.ep, name)).or_default();
            e.0 += c.ops;
            e.1 += c.bytes;
        }
    }
    let mut probs = Vec::new();
    t.events_on_disk = p.read_all_events(&mut probs).len() as u64;
    assert!(probs.is_empty(), "record problems: {probs:?}");
    t
}

/// Opens the record under `trace.record` and returns each process that traced anything, keyed
/// by program name.
pub fn processes(trace: &Trace) -> Vec<ProcessRecording> {
    let rec = Recording::open(std::slice::from_ref(&trace.record))
        .unwrap_or_else(|e| panic!("reading the record: {e}"));
    assert!(
        rec.problems.is_empty(),
        "record problems: {:?}",
        rec.problems
    );
    rec.processes
}

/// (ops, bytes) of `op` in `t`, zero if absent.
pub fn op(t: &Totals, name: &str) -> (u64, u64) {
    t.by_op.get(name).copied().unwrap_or((0, 0))
}

pub fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits until `server`, a server this test started, listens on `port` itself (see [`listened`]):
/// when it ends before it listens, the panic says so at once, with its exit status and what it
/// printed (instead of a bare timeout).
pub fn wait_server(server: &mut Child, port: u16, limit: Duration) {
    if let Err(why) = listened(server, port, limit) {
        panic!("{why}");
    }
}

/// Waits until `server` (or a process below it) listens on TCP `port`: a listening socket on the
/// port held open by one of their file descriptors, so that another program's listener on the
/// port (the server lost its port to it) never counts as the server's. Err with its exit status
/// and output when it ends first. Panics after `limit`, naming what listens on the port.
pub fn listened(server: &mut Child, port: u16, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let listeners = listener_inodes("/proc/net", port);
        if !listeners.is_empty() && holds_any(server.id(), &listeners) {
            return Ok(());
        }
        if let Ok(Some(status)) = server.try_wait() {
            let mut text = String::new();
            for pipe in [
                server
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read>),
                server
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read>),
            ]
            .into_iter()
            .flatten()
            {
                let mut pipe = pipe;
                let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            }
            return Err(format!(
                "the server ended ({status}) before it listened on port {port}:\n{text}"
            ));
        }
        assert!(
            start.elapsed() < limit,
            "pid {} does not listen on port {port} after {limit:?} ({})",
            server.id(),
            if listeners.is_empty() {
                "nothing listens there".to_string()
            } else {
                format!("a listener of another process does: socket inodes {listeners:?}")
            }
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The socket inodes of the TCP listeners on `port` in `net` (`/proc/net`, or `/proc/PID/net`
/// for the network namespace of PID), IPv4 and IPv6.
pub fn listener_inodes(net: &str, port: u16) -> Vec<u64> {
    let want = format!(":{port:04X}");
    let mut v = Vec::new();
    for f in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("{net}/{f}")).unwrap_or_default();
        // Columns: sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode;
        // st 0A = LISTEN.
        for l in text.lines().skip(1) {
            let c: Vec<&str> = l.split_whitespace().collect();
            if c.len() > 9
                && c[1].ends_with(&want)
                && c[3] == "0A"
                && let Ok(i) = c[9].parse()
            {
                v.push(i);
            }
        }
    }
    v
}

/// `root` and every process below it (from each process's parent in /proc).
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut v = vec![root];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                && pid != root
                && sigmatop::live::descends_from(pid, root)
            {
                v.push(pid);
            }
        }
    }
    v
}

/// Whether `root` or a process below it holds one of the sockets `inodes` open.
pub fn holds_any(root: u32, inodes: &[u64]) -> bool {
    let want: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    process_tree(root).into_iter().any(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| want.iter().any(|w| l.as_os_str() == w.as_str()))
            })
        })
    })
}

/// Waits until `pid` (or a process below it) listens on TCP `port` (see [`listened`]); panics
/// after `limit`, or when it is gone.
pub fn wait_listening(pid: u32, port: u16, limit: Duration) {
    wait_until(
        &format!("pid {pid} (or a process below it) to listen on port {port}"),
        limit,
        || {
            let l = listener_inodes("/proc/net", port);
            if !l.is_empty() && holds_any(pid, &l) {
                return Ok(());
            }
            assert!(
                std::path::Path::new(&format!("/proc/{pid}")).exists(),
                "pid {pid} ended before it listened on port {port}"
            );
            Err(format!("listeners on the port: socket inodes {l:?}"))
        },
    );
}

/// A TCP port of 127.0.0.1 that refuses connections for as long as the returned descriptor is
/// open: the kernel picks it (a bind to port 0) and the socket holds it, bound but not listening,
/// so a connection to it is refused and no other process can take it meanwhile.
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain socket bound to port 0 and asked its address; every pointer is to a local
    // of the right size, and the descriptor is owned by the OwnedFd from here on.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let mut len = core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(
            libc::bind(
                fd,
                &addr as *const libc::sockaddr_in as *const libc::sockaddr,
                len
            ),
            0,
            "bind 127.0.0.1:0: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(
            libc::getsockname(
                fd,
                &mut addr as *mut libc::sockaddr_in as *mut libc::sockaddr,
                &mut len
            ),
            0,
            "getsockname: {}",
            std::io::Error::last_os_error()
        );
        (owned, u16::from_be(addr.sin_port))
    }
}

/// Whether a server's words say its port was taken ("bind(): Address already in use", Go's
/// "bind: address already in use", EADDRINUSE, rdma-core's pingpong examples' "Couldn't listen
/// to port N").
pub fn in_use(words: &str) -> bool {
    let w = words.to_ascii_lowercase();
    w.contains("address already in use")
        || w.contains("couldn't listen to port")
        || words.contains("EADDRINUSE")
}

/// Starts the server `make(port)` builds on a port from [`port`] and waits until it listens.
/// A port is free when [`port`] looks, but any process may bind it before the server does:
/// a server that ends saying the address is in use is started again on another port (at most
/// 8 times); any other early end fails the test with the server's words.
pub fn start_server(mut make: impl FnMut(u16) -> Command, limit: Duration) -> (Proc, u16) {
    let mut last = String::new();
    for _ in 0..8 {
        let port = port();
        let mut s = spawn(&mut make(port));
        match listened(&mut s, port, limit) {
            Ok(()) => return (s, port),
            Err(why) if in_use(&why) => last = why,
            Err(why) => panic!("{why}"),
        }
    }
    panic!("8 ports were taken between the look and the server's bind; the last:\n{last}");
}

/// Open MPI's point-to-point layer over UCX, any transport (`UCX_TLS` chooses): the flags a host
/// without an RDMA NIC needs (../shared/reference/workloads.md).
pub const MPI_OVER_UCX: &[&str] = &[
    "--mca",
    "pml",
    "ucx",
    "--mca",
    "pml_ucx_tls",
    "any",
    "--mca",
    "pml_ucx_devices",
    "any",
    "--mca",
    "osc",
    "ucx",
];

/// `mpirun` of `prog` on `np` ranks with `mca` (and `UCX_TLS=tls` when given), traced as `trace`
/// says: its variables reach every rank (`-x`). Fails with mpirun's status and output unless it
/// ended well within 120 s; returns its output.
pub fn mpirun_traced(
    trace: &Trace,
    np: usize,
    mca: &[&str],
    tls: Option<&str>,
    prog: &Path,
    ctx: &str,
) -> Output {
    let mut cmd = Command::new(require("mpirun"));
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
    ])
    .args(mca)
    .args([
        "-x",
        "LD_PRELOAD",
        "-x",
        "SIGMATOP_MODE",
        "-x",
        "SIGMATOP_RECORD",
    ])
    .args(["-x", "SIGMATOP_SOCKET_DIR"]);
    if let Some(tls) = tls {
        cmd.args(["-x", "UCX_TLS"]).env("UCX_TLS", tls);
    }
    cmd.arg(prog);
    trace.apply(&mut cmd);
    let out = wait_timeout(spawn(&mut cmd), Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{ctx}: mpirun failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout_of(&out),
        stderr_of(&out)
    );
    out
}

/// `sigmatop export RECORD --json -`: the recording's JSON export, which must succeed.
pub fn export_json(record: &Path, ctx: &str) -> serde_json::Value {
    let out = Command::new(sigmatop_bin())
        .args(["export", &record.display().to_string(), "--json", "-"])
        .output_bounded()
        .expect("sigmatop export");
    assert!(out.status.success(), "{ctx}: export: {}", stderr_of(&out));
    serde_json::from_slice(&out.stdout).expect("export JSON")
}

/// `sigmatop run --json FILE -- PROGRAM ARGS` in `dir` (sockets in `dir/sock`, UCX over tcp):
/// the run's output and the summary it wrote, which must be valid JSON.
pub fn run_json(dir: &Path, program: &Path, args: &[&str]) -> (Output, serde_json::Value) {
    let json = dir.join("summary.json");
    let out = Command::new(sigmatop_bin())
        .arg("run")
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(program)
        .args(args)
        .env("UCX_TLS", "tcp")
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .output_within(Duration::from_secs(120))
        .expect("sigmatop run");
    assert!(
        out.status.success(),
        "{}\n{}",
        stdout_of(&out),
        stderr_of(&out)
    );
    let bytes = std::fs::read(&json)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", json.display(), stderr_of(&out)));
    let v = serde_json::from_slice(&bytes).expect("the summary is JSON");
    (out, v)
}

/// The shape of a program's output: every run of digits (with '.' and ',' inside numbers)
/// becomes '#' and runs of spaces one space, so runs that differ only in figures compare equal.
pub fn output_shape(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let mut out = String::new();
            let mut in_num = false;
            for ch in l.chars() {
                if ch.is_ascii_digit() || (in_num && (ch == '.' || ch == ',')) {
                    if !in_num {
                        out.push('#');
                        in_num = true;
                    }
                } else {
                    in_num = false;
                    out.push(ch);
                }
            }
            // A rate over no measurable time prints as inf (or nan): a number all the same
            // (ucx_perftest's "Final:" line of a fast untraced run).
            out.split_whitespace()
                .map(|w| match w {
                    "inf" | "-inf" | "nan" | "-nan" => "#",
                    w => w,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `v` divided by 1000 until under 1000 (at most to the last unit), with the unit reached.
fn scaled(v: u64, units: [&'static str; 5]) -> (f64, &'static str) {
    let mut x = v as f64;
    let mut unit = units[0];
    for u in &units[1..] {
        if x < 1000.0 {
            break;
        }
        x /= 1000.0;
        unit = u;
    }
    (x, unit)
}

/// Bytes as sigmatop's summaries print them, written here from the figures a person reads
/// ("640 B", "3.00 kB", "12.90 MB": powers of 1000, two decimals), so a test can compare what the
/// CLI printed with a value computed from the workload's parameters.
/// `n` operations of `b` bytes in all as the summary prints them: "15×100.00 kB = 1.50 MB"
/// (count × size = total; "~" before a mean size when the sizes differ), "1×640 B".
pub fn summary_times(n: u64, b: u64) -> String {
    if n <= 1 || b == 0 {
        return format!("{n}×{}", summary_bytes(b));
    }
    let approx = if b.is_multiple_of(n) { "" } else { "~" };
    let each = sigmatop_tui::units::human_bytes(b as f64 / n as f64);
    format!("{n}×{approx}{each} = {}", summary_bytes(b))
}

pub fn summary_bytes(b: u64) -> String {
    if b < 1000 {
        return format!("{b} B");
    }
    let (x, unit) = scaled(b, ["B", "kB", "MB", "GB", "TB"]);
    format!("{x:.2} {unit}")
}

/// A number as the dashboard's tables print it: three significant digits with k, M, G
/// ("640", "3.00k", "12.0k", "885k", "2.58M").
pub fn table_si(v: u64) -> String {
    if v < 1000 {
        return v.to_string();
    }
    let (x, unit) = scaled(v, ["", "k", "M", "G", "T"]);
    if x < 10.0 {
        format!("{x:.2}{unit}")
    } else if x < 100.0 {
        format!("{x:.1}{unit}")
    } else {
        format!("{x:.0}{unit}")
    }
}

/// Checks the dashboard's rank × rank matrix on `screen` (view 5) against `bytes[src][dst]`:
/// each row `rI` with its cells and egress, and the ingress row, as the table prints them.
pub fn assert_rank_matrix(screen: &str, bytes: &[Vec<u64>]) {
    let n = bytes.len();
    for (i, row_bytes) in bytes.iter().enumerate() {
        let row = screen
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("r{i} ")))
            .unwrap_or_else(|| panic!("no matrix row r{i}:\n{screen}"));
        let mut want = vec![format!("r{i}")];
        want.extend((0..n).map(|j| {
            if i == j {
                "·".to_string()
            } else {
                table_si(row_bytes[j])
            }
        }));
        want.push(table_si(row_bytes.iter().sum()));
        assert_eq!(words(row), want, "matrix row r{i}");
    }
    let ingress = screen
        .lines()
        .find(|l| l.contains("▼ ingress"))
        .unwrap_or_else(|| panic!("no ingress row:\n{screen}"));
    let mut want = vec!["▼".to_string(), "ingress".to_string()];
    want.extend((0..n).map(|j| table_si(bytes.iter().map(|r| r[j]).sum())));
    assert_eq!(words(ingress), want, "ingress row");
}

/// The whitespace-separated words of `line`, without the heat-map shading characters the
/// dashboard puts before matrix cells.
pub fn words(line: &str) -> Vec<String> {
    line.split_whitespace()
        .filter(|w| !["░", "▒", "▓", "█"].contains(w))
        .map(str::to_string)
        .collect()
}

/// Wall clock now (ns since the epoch, CLOCK_REALTIME), as snapshots carry it.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// (user + system CPU seconds, max RSS in KiB) of `who` (RUSAGE_SELF or RUSAGE_THREAD).
pub fn rusage(who: libc::c_int) -> (f64, i64) {
    // SAFETY: rusage is plain old data, filled by getrusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the call.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime) + t(ru.ru_stime), ru.ru_maxrss)
}

/// Processes started for the test, each ended (with everything below it) when it ends.
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            end(c);
        }
    }
}

/// SIGKILL to `root` and every process below it.
pub fn kill_tree(root: u32) {
    for p in process_tree(root) {
        // SAFETY: kill(2) with a pid of a process this test started (or one below it).
        unsafe {
            libc::kill(p as i32, libc::SIGKILL);
        }
    }
}

/// The number printed just before `word` on the first line that has one ("24 pings", "... 3000
/// iterations"), for the tests of programs that print their progress (perftest, rping).
pub fn number_before(out: &str, word: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let i = t.iter().position(|w| *w == word)?;
            t.get(i.checked_sub(1)?)?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no '<n> {word}' in:\n{out}"))
}

/// perftest's result row after the "#bytes #iterations" header: (bytes, iterations).
pub fn perftest_row(out: &str) -> (u64, u64) {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains("#bytes") && l.contains("#iterations") {
            let v: Vec<u64> = lines
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .take(2)
                .filter_map(|t| t.parse().ok())
                .collect();
            if v.len() == 2 {
                return (v[0], v[1]);
            }
        }
    }
    panic!("no perftest result row in:\n{out}");
}

/// A ucx_perftest server over `tls` (`UCX_TLS`), set up further by `with` (a trace, variables),
/// listening: see [`start_server`]. Returns it with its port.
pub fn ucx_perftest_server(tls: &str, with: impl Fn(&mut Command)) -> (Proc, u16) {
    let bin = require("ucx_perftest");
    start_server(
        |port| {
            let mut c = Command::new(&bin);
            c.args(["-p", &port.to_string()]).env("UCX_TLS", tls);
            with(&mut c);
            c
        },
        Duration::from_secs(20),
    )
}

/// What an fi_pingpong pair printed, and who they were.
pub struct Pingpong {
    pub server: Output,
    pub client: Output,
    pub server_pid: u32,
    pub client_pid: u32,
}

/// An fi_pingpong pair on 127.0.0.1 with `args` (provider, endpoint, iterations...), each side
/// set up further by `with` (a trace, variables): the server with `-B PORT` (see
/// [`start_server`]), once it listens the client with `-P PORT 127.0.0.1`; `limit` for each.
pub fn fi_pingpong(args: &[&str], with: impl Fn(&mut Command), limit: Duration) -> Pingpong {
    let bin = require("fi_pingpong");
    let (server, port) = start_server(
        |port| {
            let mut s = Command::new(&bin);
            s.args(args).args(["-B", &port.to_string()]);
            with(&mut s);
            s
        },
        Duration::from_secs(20),
    );
    let mut c = Command::new(&bin);
    c.args(args).args(["-P", &port.to_string(), "127.0.0.1"]);
    with(&mut c);
    let client = spawn(&mut c);
    let (server_pid, client_pid) = (server.id(), client.id());
    let client = wait_timeout(client, limit);
    let server = wait_timeout(server, limit);
    Pingpong {
        server,
        client,
        server_pid,
        client_pid,
    }
}

/// A child's pipe read on a thread of its own, so a test can wait for a line without a guess at
/// how long the program takes to print it (and a child never blocks on a full pipe).
pub struct PipeReader {
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    thread: std::thread::JoinHandle<()>,
}

impl PipeReader {
    pub fn new(pipe: impl std::io::Read + Send + 'static) -> PipeReader {
        let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = bytes.clone();
        let thread = std::thread::spawn(move || {
            let mut pipe = pipe;
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&buf[..n]);
            }
        });
        PipeReader { bytes, thread }
    }

    fn raw(&self) -> Vec<u8> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What came so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw()).into_owned()
    }

    /// Waits until what came holds `what`; panics with it after `limit`.
    pub fn wait_for(&self, what: &str, limit: Duration) -> String {
        wait_until(&format!("{what:?} on the pipe"), limit, || {
            let t = self.text();
            if t.contains(what) { Ok(t) } else { Err(t) }
        })
    }

    /// Everything, once the writer closed the pipe (call after the process ended).
    pub fn finish(self) -> String {
        let PipeReader { bytes, thread } = self;
        let _ = thread.join();
        let b = bytes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&b).into_owned()
    }

    /// Everything, once every writer closed the pipe, if that happens by `until`; else Err with
    /// what came so far (the thread is left to end with the last writer).
    pub fn finish_by(self, until: Instant) -> Result<Vec<u8>, Vec<u8>> {
        while !self.thread.is_finished() {
            if Instant::now() >= until {
                return Err(self.raw());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.thread.join();
        Ok(std::mem::take(
            &mut *self.bytes.lock().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}

/// Polls `look` (every 20 ms) until it returns Ok, and returns what it gave. After `limit`, the
/// test fails naming `what` it waited for and what `look` saw last (its Err).
pub fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut look: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match look() {
            Ok(v) => return v,
            Err(seen) => {
                assert!(
                    start.elapsed() < limit,
                    "waited {limit:?} for {what}; last seen: {seen}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that `look` holds (returns Ok) over the whole `window`, looking every 20 ms: the one
/// kind of wait that is for time, since a thing that must *not* happen (a program that must keep
/// running, a screen that must not change) can only be watched for a stated while. Fails at the
/// first look that does not hold, naming `what` and what it saw.
pub fn holds_for(what: &str, window: Duration, mut look: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    loop {
        if let Err(seen) = look() {
            panic!(
                "{what} held for {:?} only (of {window:?}); then: {seen}",
                start.elapsed()
            );
        }
        if start.elapsed() >= window {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
