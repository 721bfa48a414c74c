//! The end of a run, as a person sees it (issue 25, items 3, 4, 8, 9): real programs under
//! `sigmatop run`, the dashboard in tmux (80×24 and 200×60), the summary and `--json`.

mod common;

use std::time::Duration;

use common::tmux::Tmux;
use common::*;

const LIMIT: Duration = Duration::from_secs(40);

/// tests/programs/ucx_life.c.
fn ucx_life() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| build_program("gcc", "ucx_life.c", "ucx_life", &["-lucp", "-lucs"]))
        .clone()
}

/// The header's clock, "hh:mm:ss" at the end of the second line.
fn clock(screen: &str) -> String {
    screen
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_default()
        .to_string()
}

/// Resizes the session's window (tmux starts it at 120×40).
fn resize(t: &Tmux, w: u16, h: u16) {
    t.tmux(&[
        "resize-window",
        "-t",
        "main",
        "-x",
        &w.to_string(),
        "-y",
        &h.to_string(),
    ]);
}

/// 3. After every traced process has exited, the live dashboard says "ended", its rates are
///    0 B/s and its clock moves on (before: "live ▲ 84.3 MB/s" 22 s later, the clock still).
///    `ucx_life paced 40 50`: 40 tagged messages of 64 B, one every 50 ms.
#[test]
fn after_the_end_the_dashboard_says_ended_with_zero_rates_and_a_moving_clock() {
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let dir = scratch(&format!("run-end-{w}"));
        let line = format!(
            "SIGMATOP_SOCKET_DIR={} UCX_TLS=sm,self {} run -- {} paced 40 50",
            dir.join("sock").display(),
            sigmatop_bin().display(),
            ucx_life().display()
        );
        let Some(t) = Tmux::start_in(&format!("run-end-{w}"), &line, Some(&dir)) else {
            return;
        };
        resize(&t, w, h);
        let first = t.wait_for("the header of an ended run", LIMIT, |s| {
            let head = s.lines().next().unwrap_or_default();
            head.contains(" ended") && head.contains("▲ 0 B/s") && head.contains("▼ 0 B/s")
        });
        assert!(first.contains("ucx_life exited (status"), "{first}");
        // The clock (80 columns have no room for it on the tab line).
        let later = if w >= 120 {
            let c0 = clock(&first);
            assert!(c0.len() == 8 && c0.as_bytes()[2] == b':', "{first}");
            t.wait_for("the clock to move on", Duration::from_secs(5), |s| {
                clock(s) != c0
            })
        } else {
            first
        };
        let head = later.lines().next().unwrap_or_default();
        assert!(
            head.contains(" ended") && head.contains("▲ 0 B/s"),
            "{later}"
        );
        // The totals stay: 40 × 64 B each way.
        assert!(later.contains("2.56k"), "{later}");
        t.keys(&["q"]);
        let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
        assert!(done.contains("SIGMATOP-EXIT=0"), "{done}");
    }
}

/// What `sigmatop run -- true` says: it loads nothing sigmatop traces.
const TRUE_ADVICE: &str =
    "true used no RDMA library sigmatop traces (UCX, libfabric, ibverbs, mlx5): nothing was traced";

/// 9. The "nothing was traced, here is why" advice was the headless run's alone: the dashboard
///    showed `Processes 0 (none yet)` to the end and `q` printed only "exited (status 0)". Now
///    the empty process table says it once the program has ended (the status line keeps the
///    exit and "q to leave"), and so does the summary.
#[test]
fn the_dashboard_says_why_nothing_was_traced() {
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let dir = scratch(&format!("run-nothing-{w}"));
        let line = format!(
            "SIGMATOP_SOCKET_DIR={} {} run -- true",
            dir.join("sock").display(),
            sigmatop_bin().display(),
        );
        let Some(t) = Tmux::start_in(&format!("run-nothing-{w}"), &line, Some(&dir)) else {
            return;
        };
        resize(&t, w, h);
        // At 80 columns the line is cut: its start.
        let shown: String = format!("  (none: {TRUE_ADVICE})")
            .chars()
            .take(if w < 120 { 70 } else { usize::MAX })
            .collect();
        // The whole screen: the advice, the table's title and the status line (a capture taken
        // while the terminal redraws after the resize can hold the first without the last).
        let screen = t.wait_for("the advice on the dashboard", LIMIT, |s| {
            s.contains(&shown) && s.contains("Processes 0") && s.contains("» true exited (status")
        });
        assert!(!screen.contains("(none yet)"), "{screen}");
        t.keys(&["q"]);
        let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
        let done = done.replace('\n', "");
        assert!(done.contains(&format!("sigmatop: {TRUE_ADVICE}")), "{done}");
        assert!(done.contains("SIGMATOP-EXIT=0"), "{done}");
    }
}

/// 9, `--json`: the summary of a run that traced nothing had `"messages": []`.
#[test]
fn the_json_of_a_run_that_traced_nothing_says_why() {
    let dir = scratch("run-nothing-json");
    let out = std::process::Command::new(sigmatop_bin())
        .args(["run", "--json", "-", "--", "true"])
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .output_bounded()
        .expect("sigmatop run --json");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["messages"], serde_json::json!([TRUE_ADVICE]));
    assert_eq!(v["processes"], serde_json::json!([]));
}

/// 4. A rank's `fork()` child was a second rank of the same number (`3 procs` for `-np 2`, two
///    rank-0 processes in the JSON). `mpirun -np 2 ucx_life fork 10`: each rank sends 10
///    messages, forks a child that sends 20 in a context of its own and then execs `ucx_life
///    execd 30` (the same pid: a second record). The two ranks stay ranks 0 and 1; the child's
///    two records are children of their rank (`child_of_rank`, `rank` null; `↳0` in the
///    summary).
#[test]
fn a_ranks_fork_child_is_its_child_not_a_second_rank() {
    let dir = scratch("run-fork-child");
    let json = dir.join("summary.json");
    let out = std::process::Command::new(sigmatop_bin())
        .args(["run", "--json"])
        .arg(&json)
        .arg("--")
        .arg(require("mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(ucx_life())
        .args(["fork", "10"])
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env("UCX_TLS", "sm,self")
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .output_bounded()
        .expect("sigmatop run");
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("JSON");
    let mut seen: Vec<(serde_json::Value, serde_json::Value, u64)> = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| {
            (
                p["rank"].clone(),
                p["child_of_rank"].clone(),
                p["tx_ops"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    seen.sort_by_key(|(r, c, n)| (r.as_u64(), c.as_u64(), *n));
    let null = serde_json::Value::Null;
    assert_eq!(
        seen,
        vec![
            (null.clone(), 0.into(), 20),
            (null.clone(), 0.into(), 30),
            (null.clone(), 1.into(), 20),
            (null.clone(), 1.into(), 30),
            (0.into(), null.clone(), 10),
            (1.into(), null.clone(), 10),
        ],
        "{v:#}"
    );
}

/// `sigmatop run [--json FILE] -- ucx_life stay 5` (5 tagged messages, "ready", then it
/// sleeps), the program killed with `sig` once ready; sigmatop's exit code and stderr.
fn killed_run(dir: &std::path::Path, json: Option<&std::path::Path>, sig: i32) -> (i32, String) {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(sigmatop_bin());
    cmd.arg("run");
    match json {
        Some(j) => cmd.arg("--json").arg(j),
        None => cmd.arg("--headless"),
    };
    let child = cmd
        .arg("--")
        .arg(ucx_life())
        .args(["stay", "5"])
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env("UCX_TLS", "sm,self")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sigmatop run");
    let mut procs = Procs(vec![child]);
    let sigmatop = procs.0[0].id();
    let out = procs.0[0].stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(out).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("ready"))),
        "ucx_life never said ready"
    );
    let program: u32 =
        std::fs::read_to_string(format!("/proc/{sigmatop}/task/{sigmatop}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the program under sigmatop");
    // sigmatop follows it live before it is killed: its socket has a connection accepted (an
    // accepted socket is listed under the path too), however slow the machine.
    let sock = dir
        .join("sock")
        .join(format!("{}-{program}.sock", sigmatop::live::socket_host()));
    let sock = sock.display().to_string();
    let start = std::time::Instant::now();
    while !accepted_by(program, &sock) {
        assert!(
            start.elapsed() < LIMIT,
            "sigmatop never connected to {sock}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill(2) of the program this test started (through sigmatop).
    unsafe { libc::kill(program as i32, sig) };
    let child = procs.0.pop().expect("sigmatop");
    let out = wait_timeout(child, LIMIT);
    (out.status.code().unwrap_or(-1), stderr_of(&out))
}

/// 8. A segfaulting program showed as `exited` like the others, with no exit status in the JSON
///    (`problem: null`), and the summary said "(killed, Ctrl-C)". The program `sigmatop run`
///    started (and reaped) carries its signal: JSON `exit_signal` 11 and `problem` "killed by
///    SIGSEGV (signal 11)", the summary's row says so, sigmatop exits 139.
#[test]
fn a_segfaulting_program_says_so_in_the_json_and_the_summary() {
    let dir = scratch("run-segv-json");
    let json = dir.join("summary.json");
    let (code, err) = killed_run(&dir, Some(&json), libc::SIGSEGV);
    assert_eq!(code, 139, "{err}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("JSON");
    let p = &v["processes"][0];
    assert_eq!(p["exit_signal"], 11, "{v:#}");
    assert_eq!(p["problem"], "killed by SIGSEGV (signal 11)", "{v:#}");
    assert_eq!(p["clean_exit"], false, "{v:#}");

    let dir = scratch("run-segv-summary");
    let (code, err) = killed_run(&dir, None, libc::SIGSEGV);
    assert_eq!(code, 139, "{err}");
    let row = err
        .lines()
        .find(|l| l.contains(" ucx_life "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        row.ends_with(
            "  (no clean exit: counted up to its last snapshot) killed by SIGSEGV (signal 11)"
        ),
        "{row}"
    );
    assert!(
        err.contains("sigmatop: ucx_life exited (signal 11)"),
        "{err}"
    );
}

/// True once `pid` holds an accepted connection of its live socket `path`: its collector took
/// sigmatop's connection off the listener's queue (an entry of `path` in /proc/net/unix that is
/// not the listener, whose inode is one of `pid`'s open files), and so has sent it the process's
/// identity. (A connection only queued on the listener is listed too, before the collector
/// accepts it: a program killed then would never be seen.)
fn accepted_by(pid: u32, path: &str) -> bool {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    // Num RefCount Protocol Flags Type St Inode Path; St 01 is the listener (unconnected).
    let inodes: Vec<String> = table
        .lines()
        .filter(|l| l.ends_with(path))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[5] == "03").then(|| format!("socket:[{}]", f[6]))
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|e| {
        std::fs::read_link(e.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.to_string_lossy() == i.as_str()))
    })
}

/// `sigmatop run ARGS -- mpirun -np 2 ucx_life segv 10 1` in `dir`: both ranks send 10 tagged
/// messages; rank 0 exits 0, rank 1 then dies of SIGSEGV (a store through NULL; UCX's and Open
/// MPI's own handlers print their backtraces and re-raise it). sigmatop's output.
fn mpirun_segv(dir: &std::path::Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let life = dir.join("life");
    std::fs::create_dir_all(&life).expect("life dir");
    let mut cmd = std::process::Command::new(sigmatop_bin());
    cmd.arg("run")
        .args(args)
        .arg("--")
        .arg(require("mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(ucx_life())
        .args(["segv", "10", "1"])
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env("LIFE_DIR", &life)
        .env("UCX_TLS", "sm,self")
        .current_dir(dir)
        .stdin(std::process::Stdio::null());
    let out = wait_timeout(spawn(&mut cmd), Duration::from_secs(120));
    assert!(
        !out.status.success(),
        "mpirun passes on the rank's crash: {}",
        stderr_of(&out)
    );
    out
}

/// The JSON's two ranks: rank 0 ended cleanly with its 10 sends; rank 1 carries signal 11.
fn check_segv_ranks(ctx: &str, v: &serde_json::Value) {
    let procs = v["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 2, "{ctx}: {v:#}");
    let rank = |r: u64| {
        procs
            .iter()
            .find(|p| p["rank"].as_u64() == Some(r))
            .unwrap_or_else(|| panic!("{ctx}: no rank {r}: {v:#}"))
    };
    let r0 = rank(0);
    assert_eq!(r0["clean_exit"], true, "{ctx}: {r0:#}");
    assert_eq!(r0["exit_signal"], serde_json::Value::Null, "{ctx}: {r0:#}");
    assert_eq!(r0["problem"], serde_json::Value::Null, "{ctx}: {r0:#}");
    assert_eq!(r0["tx_ops"], 10, "{ctx}: {r0:#}");
    let r1 = rank(1);
    assert_eq!(r1["exit_signal"], 11, "{ctx}: {r1:#}");
    assert_eq!(
        r1["problem"], "killed by SIGSEGV (signal 11)",
        "{ctx}: {r1:#}"
    );
    assert_eq!(r1["clean_exit"], false, "{ctx}: {r1:#}");
}

/// 8, under `mpirun`: a rank that segfaults is not `exited` like the others. Its parent (mpirun,
/// under the preload too) reaps it and says how it ended, so `run --json` (live), the summary,
/// the record and `export --json` all carry JSON `exit_signal` 11 and `problem` "killed by
/// SIGSEGV (signal 11)" for rank 1, and nothing of the kind for rank 0, which exited cleanly.
#[test]
fn a_segfaulting_rank_under_mpirun_says_so_live_and_in_the_record() {
    let dir = scratch("run-mpirun-segv-live");
    let json = dir.join("summary.json");
    let out = mpirun_segv(&dir, &["--json".as_ref(), json.as_os_str()]);
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&json).unwrap_or_else(|e| panic!("summary: {e}: {}", stderr_of(&out))),
    )
    .expect("JSON");
    check_segv_ranks("run --json", &v);

    let dir = scratch("run-mpirun-segv-record");
    let rec = dir.join("rec");
    let out = mpirun_segv(
        &dir,
        &["--headless".as_ref(), "--record".as_ref(), rec.as_os_str()],
    );
    let err = stderr_of(&out);
    let v = export_json(&rec, "export --json");
    check_segv_ranks("export --json", &v);
    let pid_of = |r: u64| {
        v["processes"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["rank"].as_u64() == Some(r)))
            .and_then(|p| p["pid"].as_u64())
            .unwrap_or_else(|| panic!("rank {r}: {v:#}"))
    };
    let row = |pid: u64| {
        err.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(pid.to_string().as_str()))
            .unwrap_or_else(|| panic!("no summary row of pid {pid}:\n{err}"))
            .to_string()
    };
    let r1 = row(pid_of(1));
    assert!(
        r1.ends_with(
            "  (no clean exit: counted up to its last snapshot) killed by SIGSEGV (signal 11)"
        ),
        "{r1}"
    );
    let r0 = row(pid_of(0));
    assert!(r0.ends_with(" 0"), "rank 0 ended cleanly: {r0}");
}

/// 4, in `export --json`: a rank's fork child is labelled as its child ("child of r0") in the
/// process matrix and the top talkers, and the node lists each rank once (`ranks` [0, 1], not
/// [0, 0, 0, 1, 1, 1]). `mpirun -np 2 ucx_life fork 10` as above, recorded.
#[test]
fn a_ranks_fork_child_is_its_child_in_export_json() {
    let dir = scratch("run-fork-child-export");
    let rec = dir.join("rec");
    let mut cmd = std::process::Command::new(sigmatop_bin());
    cmd.args(["run", "--headless", "--record"])
        .arg(&rec)
        .arg("--")
        .arg(require("mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(ucx_life())
        .args(["fork", "10"])
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env("UCX_TLS", "sm,self")
        .current_dir(&dir)
        .stdin(std::process::Stdio::null());
    let out = wait_timeout(spawn(&mut cmd), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v = export_json(&rec, "export --json");
    let procs = v["processes"].as_array().expect("processes");
    let mut labels: Vec<String> = v["process_matrix"]["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .filter_map(|l| l.as_str())
        .filter(|l| *l != "untraced")
        .map(|l| {
            // "ucx_life r0 4021@vm" → "r0"; "ucx_life child of r0 4022@vm" → "child of r0".
            let words: Vec<&str> = l.split(' ').collect();
            words[1..words.len() - 1].join(" ")
        })
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        [
            "child of r0",
            "child of r0",
            "child of r1",
            "child of r1",
            "r0",
            "r1"
        ],
        "{v:#}"
    );
    assert_eq!(procs.len(), 6, "{v:#}");
    assert_eq!(v["nodes"][0]["ranks"], serde_json::json!([0, 1]), "{v:#}");
    for t in v["top_talkers"].as_array().expect("top talkers") {
        let from = t["from"].as_str().unwrap_or_default();
        let pid = from.rsplit(' ').next().unwrap_or_default();
        let child = procs.iter().any(|p| {
            p["child_of_rank"].is_u64()
                && format!("{}@{}", p["pid"], p["host"].as_str().unwrap_or_default()) == pid
        });
        assert_eq!(from.contains("child of r"), child, "{t}");
    }
}

/// 8, on the dashboard at 80×24 as over ssh: `sigmatop run -- mpirun -np 2 ucx_life segv 10 1`;
/// once both ranks ended, rank 1's row says `SIGSEGV` in its state column (rank 0's `exited`),
/// and `q` prints the summary row "killed by SIGSEGV (signal 11)".
#[test]
fn a_segfaulting_rank_says_sigsegv_on_the_dashboard() {
    let dir = scratch("run-mpirun-segv-tmux");
    let life = dir.join("life");
    std::fs::create_dir_all(&life).expect("life dir");
    let line = format!(
        "SIGMATOP_SOCKET_DIR={} LIFE_DIR={} UCX_TLS=sm,self {} run -- {} --allow-run-as-root --oversubscribe -np 2 {} segv 10 1",
        dir.join("sock").display(),
        life.display(),
        sigmatop_bin().display(),
        require("mpirun").display(),
        ucx_life().display()
    );
    let Some(t) = Tmux::start_in("run-mpirun-segv", &line, Some(&dir)) else {
        return;
    };
    resize(&t, 80, 24);
    // Process rows: "host pid rank ... state"; rank in the third column.
    let row = |s: &str, rank: &str| {
        s.lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().filter(|w| *w != "▸").collect();
                w.len() > 3 && w[2] == rank && w[1].parse::<u32>().is_ok()
            })
            .map(str::to_string)
    };
    let screen = t.wait_for("rank 1 killed, rank 0 exited", LIMIT, |s| {
        row(s, "1").is_some_and(|r| r.trim_end().ends_with("SIGSEGV"))
            && row(s, "0").is_some_and(|r| r.trim_end().ends_with("exited"))
    });
    assert!(screen.contains("killed by SIGSEGV (signal 11)"), "{screen}");
    t.keys(&["q"]);
    let done = t.wait_for("sigmatop to exit", LIMIT, |s| s.contains("SIGMATOP-EXIT="));
    // The summary fits the terminal (issue 39, item 7): its lines may break at a space.
    let flat = done.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("killed by SIGSEGV (signal 11)"),
        "the summary row: {done}"
    );
    assert!(!flat.contains("SIGMATOP-EXIT=0"), "mpirun's status: {done}");
}
