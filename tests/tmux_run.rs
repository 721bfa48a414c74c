//! Ctrl-C in `sigmatop run`'s dashboard, end to end in tmux (issue 16, item 5): a real traced
//! program (a ucx_perftest tag_bw client against an untraced server, over tcp) started by
//! `sigmatop run`, the dashboard in a detached tmux session, keys sent with `send-keys`.
//!
//! 1. Ctrl-C stops the program as a shell's Ctrl-C would (SIGINT to its process group): the
//!    program dies of SIGINT, the dashboard closes, sigmatop says so and exits 130 (128 + 2).
//! 2. `q` leaves the dashboard with the program running: sigmatop says it waits and that Ctrl-C
//!    stops it; the terminal's Ctrl-C (the terminal is out of raw mode now) then stops it, 130.
//! 3. A program that ignores SIGINT: the dashboard stays, and its status line says the SIGINT
//!    was sent and what the keys do now; `q` leaves it running.
//! 4. A hangup ends the dashboard.
//! 5. A program that ends within milliseconds (tests/programs/ucx_life.c, `child N`: one UCP
//!    context, N tagged messages of 64 B over shared memory) leaves its final totals on the
//!    dashboard and, after `q`, in the summary sigmatop prints; so does a headless run.

mod common;

use std::path::Path;
use std::time::Duration;

use common::tmux::Tmux;
use common::*;

const LIMIT: Duration = Duration::from_secs(40);

/// An untraced ucx_perftest server over tcp; its port.
fn server() -> (Proc, u16) {
    ucx_perftest_server("tcp", |_| {})
}

/// The shell line that runs `sigmatop run -- PROGRAM...` in `dir`. The wrapping shell catches
/// SIGINT itself, so the terminal's Ctrl-C reaches sigmatop and the shell lives on to print
/// sigmatop's exit status.
fn run_line(dir: &Path, program: &str) -> String {
    format!(
        "trap 'true' INT; SIGMATOP_SOCKET_DIR={} UCX_TLS=tcp {} run -- {program}",
        dir.join("sock").display(),
        sigmatop_bin().display()
    )
}

fn client(port: u16) -> String {
    format!(
        "{} 127.0.0.1 -p {port} -t tag_bw -n 100000000 -s 4096 -w 1",
        require("ucx_perftest").display()
    )
}

/// The pid in "NAME running (pid N)".
fn running_pid(screen: &str, name: &str) -> u32 {
    let at = screen
        .find(&format!("{name} running (pid "))
        .unwrap_or_else(|| panic!("no running note:\n{screen}"));
    screen[at..]
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pid in the note:\n{screen}"))
}

fn alive(pid: u32) -> bool {
    sigmatop::live::process_exists(pid)
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Ends a process the test started (and all it started).
fn stop(c: Proc) {
    drop(c);
}

#[test]
fn ctrl_c_in_the_dashboard_stops_the_program_like_a_shell() {
    let dir = scratch("tmux-run-ctrl-c");
    let (srv, port) = server();
    let Some(t) = Tmux::start_in("run-ctrl-c", &run_line(&dir, &client(port)), Some(&dir)) else {
        return stop(srv);
    };
    let screen = t.wait_for("the dashboard with the program running", LIMIT, |s| {
        s.contains("ucx_perftest running (pid") && s.contains("^C stop ucx_perftest")
    });
    let pid = running_pid(&screen, "ucx_perftest");
    assert!(alive(pid));
    t.keys(&["C-c"]);
    let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
    stop(srv);
    assert!(done.contains("SIGMATOP-EXIT=130"), "{done}");
    // The line can be longer than the window: compare without whitespace (tmux wraps it).
    let bare = |s: &str| s.split_whitespace().collect::<String>();
    assert!(
        bare(&done).contains(&bare(&format!(
            "sigmatop: ucx_perftest exited (signal 2); its output is in {}/sigmatop-run-",
            dir.join("state/sigmatop").display()
        ))),
        "{done}"
    );
    assert!(!alive(pid), "the program is gone");
}

#[test]
fn q_leaves_the_program_running_and_says_how_to_stop_it() {
    let dir = scratch("tmux-run-q");
    let (srv, port) = server();
    let Some(t) = Tmux::start_in("run-q", &run_line(&dir, &client(port)), Some(&dir)) else {
        return stop(srv);
    };
    let screen = t.wait_for("the dashboard with the program running", LIMIT, |s| {
        s.contains("ucx_perftest running (pid")
    });
    let pid = running_pid(&screen, "ucx_perftest");
    t.keys(&["q"]);
    let waiting = t.wait_for("the waiting line", LIMIT, |s| {
        s.contains("stopped watching; waiting for ucx_perftest")
    });
    // The line is longer than the 120-column window, and tmux drops the space it wrapped at:
    // compare without whitespace.
    let bare = |s: &str| s.split_whitespace().collect::<String>();
    let unwrapped = bare(&waiting);
    assert!(
        unwrapped.contains(&bare(&format!(
            "waiting for ucx_perftest (pid {pid}) to exit"
        ))) && unwrapped.contains(&bare("Ctrl-C sends it SIGINT")),
        "{waiting}"
    );
    holds_for(
        "q leaves the program running",
        Duration::from_millis(500),
        || {
            if alive(pid) {
                Ok(())
            } else {
                Err(format!("pid {pid} is gone"))
            }
        },
    );
    t.keys(&["C-c"]);
    let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
    stop(srv);
    assert!(done.contains("SIGMATOP-EXIT=130"), "{done}");
    assert!(done.contains("ucx_perftest exited (signal 2)"), "{done}");
    assert!(!alive(pid));
}

#[test]
fn a_program_that_ignores_sigint_is_told_on_screen() {
    let dir = scratch("tmux-run-ignore");
    let (srv, port) = server();
    // The shell ignores SIGINT, and so does the client it starts (an ignored signal stays
    // ignored across exec).
    let program = format!("sh -c \"trap '' INT; exec {}\"", client(port));
    let Some(t) = Tmux::start_in("run-ignore", &run_line(&dir, &program), Some(&dir)) else {
        return stop(srv);
    };
    let screen = t.wait_for("the dashboard with the program running", LIMIT, |s| {
        s.contains("sh running (pid")
    });
    let pid = running_pid(&screen, "sh");
    t.keys(&["C-c"]);
    let told = t.wait_for("the SIGINT notice", LIMIT, |s| {
        s.contains("SIGINT sent to sh")
    });
    assert!(
        told.contains(&format!(
            "SIGINT sent to sh (pid {pid}): waiting for it to exit"
        )),
        "{told}"
    );
    t.keys(&["C-c"]);
    t.wait_for("the second SIGINT counted", LIMIT, |s| {
        s.contains("SIGINT ×2 sent to sh")
    });
    assert!(alive(pid), "SIGINT is ignored by this program");
    t.keys(&["q"]);
    t.wait_for("the waiting line", LIMIT, |s| {
        s.contains(&format!("waiting for sh (pid {pid}) to exit"))
    });
    // SAFETY: kill(2) of the program's process group (sigmatop made it a group of its own).
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
    let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
    stop(srv);
    assert!(done.contains("SIGMATOP-EXIT=137"), "128 + SIGKILL:\n{done}");
}

/// 4. The terminal goes away (an ssh connection drops: SIGHUP) while the dashboard shows a program
///    that has already exited: sigmatop ends too, with the program's status, instead of reading
///    a dead terminal forever.
#[test]
fn a_hangup_ends_the_dashboard() {
    let dir = scratch("run-hangup");
    // The tmux pane's shell becomes sigmatop (exec): the pane's pid is sigmatop's.
    let line = format!(
        "exec env SIGMATOP_SOCKET_DIR={} {} run -- sleep 1",
        dir.join("sock").display(),
        sigmatop_bin().display()
    );
    let Some(t) = Tmux::start_in("run-hangup", &line, Some(&dir)) else {
        return;
    };
    t.wait_for("the program's end", LIMIT, |s| s.contains("sleep exited"));
    let shown = t.tmux(&["display-message", "-p", "-t", "main", "#{pane_pid}"]);
    let pid: u32 = shown
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no pane pid: {shown:?}"));
    // SAFETY: kill(2) on the test's own sigmatop process; no memory is involved.
    unsafe {
        libc::kill(pid as i32, libc::SIGHUP);
    }
    let start = std::time::Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "sigmatop still runs 10 s after the hangup");
}

/// tests/programs/ucx_life.c.
fn ucx_life() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| build_program("gcc", "ucx_life.c", "ucx_life", &["-lucp", "-lucs"]))
        .clone()
}

/// (messages, their 64-B volume as the dashboard's columns write it, and as the summary does).
const SHORT_RUNS: [(u64, &str, &str); 3] = [
    (100, "6.40k", "6.40 kB"),
    (150, "9.60k", "9.60 kB"),
    (200, "12.8k", "12.80 kB"),
];

/// 5. Before, 2 of 3 such runs showed "(none yet)": the program had ended before the dashboard's
///    next scan of the socket directory, and `q` printed no summary.
#[test]
fn a_short_program_leaves_its_totals_on_the_dashboard_and_in_the_summary() {
    for (i, (n, column, human)) in SHORT_RUNS.into_iter().enumerate() {
        let dir = scratch(&format!("run-short-{i}"));
        let line = format!(
            "SIGMATOP_SOCKET_DIR={} UCX_TLS=sm,self {} run -- {} child {n}",
            dir.join("sock").display(),
            sigmatop_bin().display(),
            ucx_life().display()
        );
        let Some(t) = Tmux::start_in(&format!("run-short-{i}"), &line, Some(&dir)) else {
            return;
        };
        // The process row: sent and received totals, exited.
        let screen = t.wait_for("the program's totals after its end", LIMIT, |s| {
            s.contains("ucx_life exited (status 0)")
                && s.lines().any(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.windows(2).any(|p| p == [column, column]) && w.last() == Some(&"exited")
                })
        });
        assert!(screen.contains("▲ total B ▼ total B"), "{screen}");
        t.keys(&["q"]);
        let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
        assert!(done.contains("SIGMATOP-EXIT=0"), "{done}");
        // n messages of 64 B: "100×64 B = 6.40 kB".
        let times = summary_times(n, 64 * n);
        assert!(done.contains(&format!("tag_send {times}")), "{done}");
        assert!(
            done.contains(&format!("tag_recv {times} (posted {times})")),
            "{done}"
        );
        assert!(
            done.contains(&format!(
                "total: ▲ {human} in {n} ops, ▼ {human} in {n} ops; events lost 0"
            )),
            "{done}"
        );
        // Nothing is left in the socket directory: no socket, no final state, no run directory.
        let left: Vec<_> = std::fs::read_dir(dir.join("sock"))
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

/// 5, headless: `ucx_life short N` (the same messages, then exit at once, nothing closed: its
/// socket lives only during the final flush), `sigmatop run --headless`: the summary has them
/// whole. The headless loop scans every 20 ms and usually connected in time before final states
/// existed (5 of 5 runs here); the final state makes it certain.
#[test]
fn a_short_program_run_headless_has_its_summary() {
    for (i, (n, _, human)) in SHORT_RUNS.into_iter().enumerate() {
        let dir = scratch(&format!("run-short-headless-{i}"));
        let out = std::process::Command::new(sigmatop_bin())
            .args(["run", "--headless", "--"])
            .arg(ucx_life())
            .args(["short", &n.to_string()])
            .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
            .env("UCX_TLS", "sm,self")
            .current_dir(&dir)
            .output_bounded()
            .expect("sigmatop run --headless");
        let err = stderr_of(&out);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "total: ▲ {human} in {n} ops, ▼ {human} in {n} ops; events lost 0"
            )),
            "{err}"
        );
    }
}

/// The summary in the pane (its history too, up to what sigmatop says after it), and whether the
/// terminal wrapped any of its lines: tmux's
/// `capture-pane -J` joins the lines it wrapped, so the two captures differ exactly when a line
/// was wider than the pane.
fn whole_pane(t: &Tmux) -> (String, bool) {
    let trim = |s: String| -> String {
        s.lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
            .trim_end()
            .to_string()
    };
    // What sigmatop says after the summary (`its output is in PATH`: a path is not cut) is not
    // the summary's.
    let summary = |s: String| -> String {
        let s = trim(s);
        match s.find("\nsigmatop: ") {
            Some(at) => s[..at].to_string(),
            None => s,
        }
    };
    let plain = summary(t.tmux(&["capture-pane", "-p", "-S", "-", "-t", "main"]));
    let joined = summary(t.tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", "main"]));
    let wrapped = plain != joined;
    (plain, wrapped)
}

/// Issue 39, item 7: at 80 columns the end-of-run summary wrapped mid-column (its header alone is
/// 103 columns). In an 80×24 terminal (the ssh case) and a 200×60 one, `sigmatop run` of a short
/// program and `sigmatop demo --headless` (the demo recording's 4 processes and 60 endpoints)
/// print summaries that the terminal never wraps; the figures are all there, the totals line's
/// words in order; at 200 columns the table is whole (its operation counts too).
#[test]
fn the_end_of_run_summary_fits_the_terminal() {
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let dir = scratch(&format!("run-summary-{w}"));
        let n = 100;
        let line = format!(
            "SIGMATOP_SOCKET_DIR={} UCX_TLS=sm,self {} run -- {} child {n}",
            dir.join("sock").display(),
            sigmatop_bin().display(),
            ucx_life().display()
        );
        let Some(t) = Tmux::start_sized(&format!("run-summary-{w}"), &line, Some(&dir), w, h)
        else {
            return;
        };
        t.wait_for("the program's end on the dashboard", LIMIT, |s| {
            s.contains("ucx_life exited (status 0)")
        });
        t.keys(&["q"]);
        t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT=0"));
        let (pane, wrapped) = whole_pane(&t);
        assert!(
            !wrapped,
            "the terminal wrapped a line at {w} columns:\n{pane}"
        );
        let words: Vec<&str> = pane.split_whitespace().collect();
        let want = format!("total: ▲ 6.40 kB in {n} ops, ▼ 6.40 kB in {n} ops; events lost 0");
        let want: Vec<&str> = want.split_whitespace().collect();
        assert!(
            words.windows(want.len()).any(|x| x == want.as_slice()),
            "{want:?} in\n{pane}"
        );
        assert!(
            pane.contains(&format!("tag_send {}", summary_times(n, 64 * n))),
            "{pane}"
        );
        assert!(pane.contains("▲ tx bytes"), "{pane}");
        assert!(pane.contains("tx ops") || w < 200, "{pane}");

        let Some(t) = Tmux::start_sized(
            &format!("demo-summary-{w}"),
            &format!("{} demo --headless", sigmatop_bin().display()),
            Some(&dir),
            w,
            h,
        ) else {
            return;
        };
        t.wait_for("the demo's summary", LIMIT, |s| {
            s.contains("SIGMATOP-EXIT=0")
        });
        let (pane, wrapped) = whole_pane(&t);
        assert!(
            !wrapped,
            "the terminal wrapped a line at {w} columns:\n{pane}"
        );
        for figure in ["73.24 MB", "RDMA_WRITE_IMM 261×~118.00 kB = 30.80 MB"] {
            assert!(pane.contains(figure), "{figure} in\n{pane}");
        }
        assert!(pane.contains("tx ops") || w < 200, "{pane}");
    }
}
