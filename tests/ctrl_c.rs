//! Ctrl-C at any moment (issue 37, item 2): a real traced program, a ucx_perftest tag_bw client
//! (over tcp, against an untraced server), started by sigmatop, and SIGINT to the job as a
//! terminal sends it, at 0, 5, 10, 20, 50, 200, 500, 1,000 and 2,500 ms after sigmatop started:
//!
//! 1. `sigmatop --record DIR -- ucx_perftest ...` and `sigmatop run --headless --record DIR --
//!    ucx_perftest ...`, each leading a process group of its own (a shell's job): SIGINT to that
//!    group.
//! 2. `sigmatop run --record DIR -- ucx_perftest ...` with its dashboard in tmux: Ctrl-C typed
//!    (`send-keys C-c`): before the dashboard holds the terminal, the terminal's SIGINT to the
//!    foreground group; after, a key the dashboard answers with SIGINT to the program's group.
//!
//! Every time: no process of the job is left (every process of it carries a marker in its
//! environment, looked for in /proc/*/environ), the shell's status is 130 (128 + SIGINT), and
//! what is on disk is one of exactly three things, each said:
//! - sigmatop had not yet started anything (the signal ended it before it caught signals, as it
//!   ends any program then): nothing said, no record directory;
//! - the program was stopped before it traced anything: sigmatop says how the program ended and
//!   that it removed the empty record directory, which is gone;
//! - the program was stopped while traced: sigmatop says how it ended, and the record is
//!   readable: `sigmatop report DIR` succeeds and the reader finds no problem but a cut at the
//!   end of a chunk.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::*;

const LIMIT: Duration = Duration::from_secs(60);
const MOMENTS_MS: [u64; 9] = [0, 5, 10, 20, 50, 200, 500, 1000, 2500];

/// A marker no other process has: `NAME=VALUE` for the job's environment.
fn marker(tag: &str) -> (String, String) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    (
        "SIGMATOP_CTRL_C_TEST".to_string(),
        format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ),
    )
}

/// The processes whose environment holds `name=value`.
fn with_marker(name: &str, value: &str) -> Vec<u32> {
    let want = format!("{name}={value}");
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/environ"))
                        .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The tag_bw client sigmatop starts: 100,000,000 iterations of 4 kB (it runs until stopped).
fn client(port: u16) -> Vec<String> {
    [
        require("ucx_perftest").display().to_string(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-t".into(),
        "tag_bw".into(),
        "-n".into(),
        "100000000".into(),
        "-s".into(),
        "4096".into(),
        "-w".into(),
        "1".into(),
    ]
    .to_vec()
}

/// How the job ended, checked as the module says. `killed`: whether sigmatop itself died of the
/// signal (None where only the shell's status is known, in tmux). `said`: what sigmatop printed;
/// `ran`: the line that says how the program ended after it was traced. Returns which of the
/// three endings it was.
fn check_end(
    ctx: &str,
    rec: &Path,
    shell_status: i32,
    killed: Option<bool>,
    said: &str,
    ran: &str,
    mark: &(String, String),
) -> &'static str {
    wait_until(
        &format!("{ctx}: no process of the job left"),
        LIMIT,
        || match with_marker(&mark.0, &mark.1) {
            left if left.is_empty() => Ok(()),
            left => Err(format!("still running: {left:?}")),
        },
    );
    assert_eq!(
        shell_status, 130,
        "{ctx}: the shell's status for SIGINT:\n{said}"
    );
    if !said.contains("sigmatop:") {
        // sigmatop never got to the program: nothing made, nothing to say.
        assert_ne!(killed, Some(false), "{ctx}: exited 130 without a word");
        assert!(!rec.exists(), "{ctx}: {} left behind", rec.display());
        return "sigmatop stopped before it started anything";
    }
    assert_ne!(killed, Some(true), "{ctx}: killed, yet it said:\n{said}");
    // tmux wraps long lines: compare without whitespace.
    let bare = |s: &str| s.split_whitespace().collect::<String>();
    if !rec.exists() {
        let removed = format!(
            "sigmatop: nothing was recorded; removed the empty record directory {}",
            rec.display()
        );
        assert!(
            bare(said).contains(&bare(&removed)),
            "{ctx}: the record directory is gone and sigmatop did not say so:\n{said}"
        );
        // How the program ended: the line of a traced run, or the advice of a run that traced
        // nothing, which names the signal.
        assert!(
            bare(said).contains(&bare(ran))
                || said.lines().any(|l| {
                    l.starts_with("sigmatop: nothing was traced: ucx_perftest")
                        && l.contains("signal 2")
                }),
            "{ctx}: how the program ended is not said:\n{said}"
        );
        return "program stopped before it traced anything; the empty record removed, said";
    }
    assert!(
        bare(said).contains(&bare(ran)),
        "{ctx}: how the program ended is not said:\n{said}"
    );
    let rep = Command::new(sigmatop_bin())
        .arg("report")
        .arg(rec)
        .output_within(LIMIT)
        .expect("sigmatop report");
    assert!(
        rep.status.success(),
        "{ctx}: sigmatop report {}: {}",
        rec.display(),
        stderr_of(&rep)
    );
    let r = sigmatop::trace::reader::Recording::open(&[rec.to_path_buf()])
        .unwrap_or_else(|e| panic!("{ctx}: the record does not open: {e}"));
    assert!(r.problems.is_empty(), "{ctx}: {:?}", r.problems);
    assert!(!r.processes.is_empty(), "{ctx}: a record of no process");
    for p in &r.processes {
        let mut probs = Vec::new();
        p.read_all_events(&mut probs);
        for pr in probs.iter().chain(&p.problems) {
            assert!(
                pr.what.contains("cut inside"),
                "{ctx}: only a cut at the end: {pr}"
            );
        }
    }
    "program stopped while traced; the record readable"
}

/// 1. `sigmatop ARGS -- ucx_perftest ...` in a process group of its own, SIGINT to the group at
///    each moment.
#[test]
fn ctrl_c_to_a_recording_job_at_any_moment() {
    let mut seen = Vec::new();
    for (spelling, args) in [
        ("--record", &["--record"][..]),
        (
            "run --headless --record",
            &["run", "--headless", "--record"][..],
        ),
    ] {
        for ms in MOMENTS_MS {
            let ctx = format!("sigmatop {spelling} DIR, SIGINT at {ms} ms");
            let dir = scratch(&format!("ctrl-c-{ms}"));
            let rec = dir.join("rec");
            let (srv, port) = ucx_perftest_server("tcp", |_| {});
            let mark = marker("record");
            let mut cmd = Command::new(sigmatop_bin());
            cmd.args(args)
                .arg(&rec)
                .arg("--")
                .args(client(port))
                .env("UCX_TLS", "tcp")
                .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
                .env(&mark.0, &mark.1);
            // A group of its own (spawn), as a shell's job.
            let job = spawn(&mut cmd);
            let at = Instant::now() + Duration::from_millis(ms);
            // The moment is the stimulus: time is what this test varies.
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            // SAFETY: kill(2) of the process group of a child this test started.
            unsafe {
                libc::kill(-(job.id() as i32), libc::SIGINT);
            }
            let out = wait_timeout(job, LIMIT);
            drop(srv);
            let killed = out.status.signal() == Some(libc::SIGINT);
            let shell = out
                .status
                .code()
                .or(out.status.signal().map(|s| 128 + s))
                .unwrap_or(-1);
            let said = stderr_of(&out);
            let how = check_end(
                &ctx,
                &rec,
                shell,
                Some(killed),
                &said,
                "sigmatop: ucx_perftest exited (signal 2) after sigmatop passed SIGINT on to it",
                &mark,
            );
            if how.contains("while traced") {
                assert!(
                    said.contains(&format!("sigmatop: record written to {}", rec.display())),
                    "{ctx}:\n{said}"
                );
            }
            seen.push(format!("{ctx}: {how}"));
        }
    }
    eprintln!("ctrl_c: {} runs\n  {}", seen.len(), seen.join("\n  "));
}

/// 2. `sigmatop run --record DIR -- ucx_perftest ...` with its dashboard in tmux, Ctrl-C typed at
///    each moment after sigmatop started.
#[test]
fn ctrl_c_in_the_dashboard_at_any_moment() {
    let mut seen = Vec::new();
    for ms in MOMENTS_MS {
        let ctx = format!("sigmatop run --record DIR (dashboard), Ctrl-C at {ms} ms");
        let dir = scratch(&format!("ctrl-c-dash-{ms}"));
        let rec = dir.join("rec");
        let (srv, port) = ucx_perftest_server("tcp", |_| {});
        let mark = marker("dash");
        // The shell catches SIGINT itself (a trap that runs a command leaves the default in what
        // it starts), so that it lives on to print sigmatop's status.
        let line = format!(
            "trap 'true' INT; env {}={} SIGMATOP_SOCKET_DIR={} UCX_TLS=tcp {} run --record {} -- {}",
            mark.0,
            mark.1,
            dir.join("sock").display(),
            sigmatop_bin().display(),
            rec.display(),
            client(port).join(" ")
        );
        let Some(t) = Tmux::start_in(&format!("ctrl-c-{ms}"), &line, Some(&dir)) else {
            return;
        };
        // The moment counts from sigmatop's start: its process, the pane shell's child.
        let shell: u32 = t
            .tmux(&["display-message", "-p", "-t", "main", "#{pane_pid}"])
            .trim()
            .parse()
            .expect("the pane's pid");
        let bin = sigmatop_bin();
        let started = wait_until(&format!("{ctx}: sigmatop started"), LIMIT, || {
            let kids = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
                .unwrap_or_default();
            kids.split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok())
                .find(|k| std::fs::read_link(format!("/proc/{k}/exe")).is_ok_and(|e| e == bin))
                .map(|_| Instant::now())
                .ok_or(format!("the pane shell's children: {kids:?}"))
        });
        // The moment is the stimulus: time is what this test varies.
        std::thread::sleep(
            (started + Duration::from_millis(ms)).saturating_duration_since(Instant::now()),
        );
        t.keys(&["C-c"]);
        let screen = t.wait_for(&format!("{ctx}: sigmatop's exit"), LIMIT, |s| {
            s.contains("SIGMATOP-EXIT=")
        });
        drop(srv);
        let status: i32 = screen
            .split("SIGMATOP-EXIT=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1);
        let how = check_end(
            &ctx,
            &rec,
            status,
            None,
            &screen,
            "sigmatop: ucx_perftest exited (signal 2); its output is in",
            &mark,
        );
        seen.push(format!("{ctx}: {how}"));
    }
    eprintln!("ctrl_c: {} runs\n  {}", seen.len(), seen.join("\n  "));
}
