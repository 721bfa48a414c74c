//! Signals and hangups of `sigmatop run` (issue 25, items 1–2), with real signals, a real
//! terminal hangup (`tmux kill-window`, what an ssh drop does to the programs in the terminal) and
//! real programs (sleep; a traced ucx_perftest client against an untraced server, over tcp).
//!
//! What holds in every case: the program gets the signal, sigmatop reaps it, prints the summary
//! and exits with the program's status (128 + the signal); it never spins and never leaves the
//! program behind. Before the fix a hangup left sigmatop reading the dead terminal 7,612 times a
//! second with its child `<defunct>`, and SIGTERM or SIGHUP to a headless run killed sigmatop
//! and left the program running.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A `sleep` argument no other process on the machine has (so that the test can find the
/// program it started, and only it): 300.<test pid><n> seconds.
fn unique_sleep() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "300.{}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live (not zombie) processes whose command line has `word` as one of its arguments.
fn with_argument(word: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline
            .split(|b| *b == 0)
            .any(|a| String::from_utf8_lossy(a).contains(word))
            && alive(pid)
        {
            found.push(pid);
        }
    }
    found
}

fn alive(pid: u32) -> bool {
    sigmatop::live::process_exists(pid)
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// The parent of `pid` (from /proc/PID/stat).
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .and_then(|r| r.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no parent in /proc/{pid}/stat: {stat:?}"))
}

/// Waits until `cond` holds, panicking with `what` after `limit`.
fn wait_until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "waited {limit:?} for {what}: not so at any look (every 20 ms)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Everything a test started that has `word` in its command line (the program, the shell tmux
/// ran) and the children it holds: killed and reaped when the test ends, panics included.
struct Leftovers {
    word: String,
    children: Vec<Child>,
    /// Process groups (the programs sigmatop started lead theirs).
    groups: Vec<u32>,
}

impl Leftovers {
    fn new(word: &str) -> Leftovers {
        Leftovers {
            word: word.to_string(),
            children: Vec::new(),
            groups: Vec::new(),
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for g in &self.groups {
            // SAFETY: kill(2) of a process group a program this test started leads.
            unsafe { libc::kill(-(*g as i32), libc::SIGKILL) };
        }
        for c in &mut self.children {
            kill_tree(c.id());
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in with_argument(&self.word) {
            // SAFETY: kill(2) of a process this test started (its command line has the test's
            // unique word).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// 1. The tmux window of `sigmatop run -- sleep N` is killed. With a plain shell the shell dies
///    of the hangup and the kernel sends SIGHUP on to sigmatop; with a shell that survives it
///    (`trap … HUP`) no signal comes at all and sigmatop must see the dead terminal itself. Either
///    way: sigmatop exits, the program got SIGHUP and was reaped, and the summary is in the log
///    (no terminal is left to print it on); the surviving shell reads 129.
#[test]
fn a_terminal_hangup_ends_the_run_and_the_program() {
    for trap in [false, true] {
        let dir = scratch(&format!("signals-hangup-{trap}"));
        let secs = unique_sleep();
        let _left = Leftovers::new(&secs);
        let line = format!(
            "{}SIGMATOP_SOCKET_DIR={} {} run -- sleep {secs}; echo $? > {}",
            if trap { "trap 'true' HUP; " } else { "" },
            dir.join("sock").display(),
            sigmatop_bin().display(),
            dir.join("status").display()
        );
        let Some(t) = Tmux::start_in(&format!("hangup-{trap}"), &line, Some(&dir)) else {
            return;
        };
        let screen = t.wait_for("the dashboard with the program running", LIMIT, |s| {
            s.contains("sleep running (pid")
        });
        let sleep = with_argument(&secs)
            .into_iter()
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() == "sleep\n"
            })
            .unwrap_or_else(|| panic!("no sleep {secs}:\n{screen}"));
        let sigmatop = parent(sleep);
        t.tmux(&["kill-window", "-t", "main"]);
        wait_until(
            "sigmatop to exit after the hangup",
            Duration::from_secs(10),
            || !alive(sigmatop),
        );
        assert!(!alive(sleep), "the program outlived the hangup");
        let path = dir.join(format!("state/sigmatop/sigmatop-run-{sigmatop}.log"));
        let log = std::fs::read_to_string(&path).expect("the program's log");
        // The exit line, then (sleep traces nothing) the advice.
        let exit = format!(
            "sigmatop: sleep exited (signal 1); its output is in {} (the terminal hung up)",
            path.display()
        );
        assert!(log.lines().any(|l| l == exit), "trap {trap}: {log}");
        if trap {
            wait_until("the shell to write the status", LIMIT, || {
                dir.join("status").exists()
            });
            let st = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            assert_eq!(st.trim(), "129", "128 + SIGHUP");
        }
    }
}

/// An untraced ucx_perftest server over tcp; its port.
fn server(left: &mut Leftovers) -> u16 {
    let (s, port) = ucx_perftest_server("tcp", |_| {});
    left.children.push(s.into_child());
    port
}

/// The first `*.sock` in `dir`: a traced process is up.
fn has_socket(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".sock"))
    })
}

/// The children of `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

/// A channel that gets ucx_perftest's progress rows (iterations so far first) from `out`;
/// the rest is read and dropped, so that the program never blocks on a full pipe.
fn first_progress_line(out: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            // "[thread 0]             90595      1.924 ..." (the iterations so far).
            let row = line.split_once(']').map_or(line.as_str(), |(_, r)| r);
            let first = row.split_whitespace().next().unwrap_or_default();
            if first.parse::<u64>().is_ok_and(|n| n > 0) {
                let _ = tx.send(line);
            }
        }
    });
    rx
}

/// True while any process is in process group `pgid`.
fn group_alive(pgid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the group exists.
    unsafe { libc::kill(-(pgid as i32), 0) == 0 }
}

/// `sigmatop run --headless -- ucx_perftest CLIENT` outside a terminal, its stderr read on a
/// thread (the traced client holds it too, so a read to its end could outlast sigmatop).
struct HeadlessClient {
    sigmatop: u32,
    client: u32,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl HeadlessClient {
    fn start(left: &mut Leftovers, dir: &Path) -> HeadlessClient {
        let port = server(left);
        let sock = dir.join("sock");
        let mut run = default_signals(&mut Command::new(sigmatop_bin()))
            .args(["run", "--headless", "--", "ucx_perftest", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .args(["-t", "tag_bw", "-n", "100000000", "-s", "4096", "-w", "1"])
            .env("SIGMATOP_SOCKET_DIR", &sock)
            .env("UCX_TLS", "tcp")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sigmatop run --headless");
        let sigmatop = run.id();
        let progress = first_progress_line(run.stdout.take().expect("stdout"));
        let mut err = run.stderr.take().expect("stderr");
        let (tx, stderr) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            let _ = tx.send(s);
        });
        left.children.push(run);
        wait_until("the traced client's socket", LIMIT, || has_socket(&sock));
        let client = children(sigmatop)
            .into_iter()
            .next()
            .expect("the client under sigmatop");
        left.groups.push(client);
        // Traffic flows: ucx_perftest prints its first progress row after its first second.
        progress
            .recv_timeout(LIMIT)
            .expect("ucx_perftest's first progress row");
        HeadlessClient {
            sigmatop,
            client,
            stderr,
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) of the sigmatop this test started.
        unsafe { libc::kill(self.sigmatop as i32, sig) };
    }

    /// sigmatop's exit code (it exits; it is not killed) and its stderr.
    fn finish(self, left: &mut Leftovers) -> (i32, String) {
        let run = left
            .children
            .iter_mut()
            .find(|c| c.id() == self.sigmatop)
            .expect("sigmatop");
        let start = Instant::now();
        let status = loop {
            if let Some(st) = run.try_wait().expect("wait") {
                break st;
            }
            assert!(
                start.elapsed() < LIMIT,
                "sigmatop still runs after {LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self.stderr.recv_timeout(LIMIT).unwrap_or_default();
        assert!(!alive(self.client), "the client outlived sigmatop:\n{err}");
        assert!(
            !group_alive(self.client),
            "the client's group outlived sigmatop"
        );
        let code = status
            .code()
            .unwrap_or_else(|| panic!("sigmatop was killed ({status:?}):\n{err}"));
        (code, err)
    }
}

/// The summary's total line shows the client's traffic.
fn assert_summary(err: &str) {
    assert!(
        err.lines()
            .any(|l| l.starts_with("total: ▲ ") && !l.starts_with("total: ▲ 0 B")),
        "no summary with traffic:\n{err}"
    );
    assert!(err.contains("tag_send "), "{err}");
}

/// 2. SIGTERM and SIGINT to `sigmatop run --headless` outside a terminal (what `timeout` and
///    Slurm send): the traced ucx_perftest client gets the signal in its process group and dies
///    of it, sigmatop prints the summary of its traffic and exits with 128 + the signal.
#[test]
fn signals_to_a_headless_run_reach_the_program_and_end_in_a_summary() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let dir = scratch(&format!("signals-headless-{sig}"));
        let mut left = Leftovers::new(&format!("signals-headless-{sig}"));
        let run = HeadlessClient::start(&mut left, &dir);
        run.signal(sig);
        let (code, err) = run.finish(&mut left);
        assert_eq!(code, 128 + sig, "signal {sig}:\n{err}");
        assert_summary(&err);
        assert!(
            err.contains(&format!(
                "sigmatop: ucx_perftest exited (signal {sig}) after sigmatop passed {} on to it",
                if sig == libc::SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                }
            )),
            "{err}"
        );
    }
}

/// 2, SIGHUP (an ssh drop): passed on like the others; UCX catches SIGHUP (UCX_DEBUG_SIGNO) and
/// the client runs on, and so does sigmatop, as a shell would wait for it: the run ends with the
/// SIGTERM that follows, 143, with the summary.
#[test]
fn a_hangup_a_ucx_program_survives_leaves_the_run_going() {
    let dir = scratch("signals-headless-hup");
    let mut left = Leftovers::new("signals-headless-hup");
    let run = HeadlessClient::start(&mut left, &dir);
    run.signal(libc::SIGHUP);
    run.signal(libc::SIGTERM);
    let (code, err) = run.finish(&mut left);
    assert_eq!(code, 143, "{err}");
    assert_summary(&err);
}

/// 2, each signal with a program that dies of it (sleep, which nothing traces): sigmatop exits
/// with 128 + the signal and says what happened.
#[test]
fn each_signal_reaches_a_headless_program() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        let secs = unique_sleep();
        let mut left = Leftovers::new(&secs);
        let mut run = default_signals(&mut Command::new(sigmatop_bin()))
            .args(["run", "--headless", "--", "sleep", &secs])
            .env("SIGMATOP_SOCKET_DIR", scratch("signals-sleep").join("sock"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sigmatop run");
        let spid = run.id();
        let err = run.stderr.take().expect("stderr");
        left.children.push(run);
        wait_until("the program", LIMIT, || !children(spid).is_empty());
        // SAFETY: kill(2) of the sigmatop this test started.
        unsafe { libc::kill(spid as i32, sig) };
        let run = left.children.pop().expect("sigmatop");
        let mut run = run;
        run.stderr = Some(err);
        let out = wait_timeout(run, LIMIT);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(128 + sig), "{sig}: {err}");
        assert!(
            err.contains(&format!("sleep exited with signal {sig}")),
            "{sig}: {err}"
        );
    }
}

/// 2, on a terminal: a headless run in the terminal's foreground shares the shell's process
/// group (the terminal's Ctrl-C reaches the program once, as from a shell), and a SIGTERM sent to
/// sigmatop alone is passed on to the program.
#[test]
fn a_headless_run_on_a_terminal_passes_a_kill_on_and_takes_ctrl_c_once() {
    for (how, code) in [("kill", 143), ("ctrl-c", 130)] {
        let dir = scratch(&format!("signals-fg-{how}"));
        let secs = unique_sleep();
        let _left = Leftovers::new(&secs);
        let line = format!(
            "trap 'true' INT; SIGMATOP_SOCKET_DIR={} {} run --headless -- sleep {secs}",
            dir.join("sock").display(),
            sigmatop_bin().display()
        );
        let Some(t) = Tmux::start_in(&format!("fg-{how}"), &line, Some(&dir)) else {
            return;
        };
        wait_until("the program", LIMIT, || {
            with_argument(&secs).iter().any(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() == "sleep\n"
            })
        });
        let sleep = with_argument(&secs)
            .into_iter()
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() == "sleep\n"
            })
            .expect("sleep");
        let sigmatop = parent(sleep);
        if how == "kill" {
            // SAFETY: kill(2) of the sigmatop this test started.
            unsafe { libc::kill(sigmatop as i32, libc::SIGTERM) };
        } else {
            t.keys(&["C-c"]);
        }
        let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
        assert!(
            done.contains(&format!("SIGMATOP-EXIT={code}")),
            "{how}:\n{done}"
        );
        assert!(!alive(sleep), "{how}: the program outlived sigmatop");
    }
}

/// 2, the dashboard: SIGTERM, SIGINT or SIGHUP sent to `sigmatop run` (the terminal alive)
/// closes the dashboard once the program, which got the signal, has exited; the exit line is on
/// the terminal and sigmatop's status is the program's.
#[test]
fn signals_to_the_dashboard_reach_the_program_and_end_the_run() {
    for (sig, code) in [
        (libc::SIGTERM, 143),
        (libc::SIGINT, 130),
        (libc::SIGHUP, 129),
    ] {
        let dir = scratch(&format!("signals-dash-{sig}"));
        let secs = unique_sleep();
        let _left = Leftovers::new(&secs);
        let line = format!(
            "SIGMATOP_SOCKET_DIR={} {} run -- sleep {secs}",
            dir.join("sock").display(),
            sigmatop_bin().display()
        );
        let Some(t) = Tmux::start_in(&format!("dash-{sig}"), &line, Some(&dir)) else {
            return;
        };
        t.wait_for("the dashboard with the program running", LIMIT, |s| {
            s.contains("sleep running (pid")
        });
        let sleep = with_argument(&secs)
            .into_iter()
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() == "sleep\n"
            })
            .expect("sleep");
        let sigmatop = parent(sleep);
        // SAFETY: kill(2) of the sigmatop this test started.
        unsafe { libc::kill(sigmatop as i32, sig) };
        let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
        assert!(
            done.contains(&format!("SIGMATOP-EXIT={code}")),
            "{sig}:\n{done}"
        );
        assert!(
            done.contains(&format!(
                "sigmatop: sleep exited (signal {sig}); its output is in"
            )),
            "{done}"
        );
        assert!(!alive(sleep), "the program outlived sigmatop");
    }
}

/// 2, the start: a SIGTERM sent the moment `sigmatop run` starts (0 ms on, 30 times) either
/// kills sigmatop before it has started anything or reaches the program; never is the program
/// left running without sigmatop. Before, a signal after the start and before the handler
/// (which came after it) killed sigmatop and orphaned the program.
#[test]
fn a_signal_while_the_program_starts_leaves_nothing_behind() {
    let secs = unique_sleep();
    let _left = Leftovers::new(&secs);
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..30 {
        let child = default_signals(&mut Command::new(sigmatop_bin()))
            .args(["run", "--headless", "--", "sleep", &secs])
            .env("SIGMATOP_SOCKET_DIR", scratch("signals-start").join("sock"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sigmatop run");
        // SAFETY: kill(2) of the sigmatop just started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = wait_timeout(child, LIMIT);
        let how = match (
            out.status.code(),
            std::os::unix::process::ExitStatusExt::signal(&out.status),
        ) {
            (Some(143), _) => "exit 143".to_string(),
            (None, Some(15)) => "killed before the start".to_string(),
            other => panic!("sigmatop ended with {other:?}"),
        };
        *outcomes.entry(how).or_default() += 1;
        common::wait_until("no program left running", Duration::from_secs(5), || {
            let left = with_argument(&secs);
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still running: pids {left:?}"))
            }
        });
    }
    eprintln!("outcomes: {outcomes:?}");
}

/// 2, SIGKILL: sigmatop cannot pass that one on, and the program must not run on with nobody
/// to report on it: it gets SIGTERM (the parent-death signal sigmatop sets in it).
#[test]
fn a_killed_sigmatop_takes_its_program_down() {
    let secs = unique_sleep();
    let mut left = Leftovers::new(&secs);
    let child = default_signals(&mut Command::new(sigmatop_bin()))
        .args(["run", "--headless", "--", "sleep", &secs])
        .env("SIGMATOP_SOCKET_DIR", scratch("signals-kill9").join("sock"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sigmatop run");
    let spid = child.id();
    left.children.push(child);
    wait_until("the program", LIMIT, || !children(spid).is_empty());
    let sleep = children(spid)[0];
    // SAFETY: kill(2) of the sigmatop this test started.
    unsafe { libc::kill(spid as i32, libc::SIGKILL) };
    wait_until("the program to end", Duration::from_secs(5), || {
        !alive(sleep)
    });
}
