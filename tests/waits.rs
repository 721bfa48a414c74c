//! Who the others wait for (issue 36, item 3), on real programs, each case ending in the right
//! process, never the waiter:
//! - `ibv_rc_pingpong` across two simulated hosts of the software NIC (`TESTNIC_HOST=1` / `2`),
//!   the server SIGSTOPped: it is `silent` in its row (rates 0), in `attach --json` (a stream
//!   started before: `"state": "silent"`; one started during the stop: `"not answering"`), in
//!   `attach PID`; one warning names it and the client waiting on it (`pid S (host) silent 1.2s —
//!   waited on by pid C (QP 0x…: N receives posted)`), `run --headless` prints a line when it
//!   starts and one when it clears (SIGCONT), and `report` names the server as the straggler.
//! - `ucx_perftest` (tag_bw over tcp), the server SIGSTOPped: the same warning (the client's
//!   endpoint moves nothing), the server's rows marked `silent`, no `idle` mark anywhere (the
//!   marks and the warnings follow one rule).
//! - A 4-rank token ring over UCX (`tests/programs/mpi_ring.c`, `mpirun --mca pml ucx`) whose
//!   rank 3 sleeps before its send: every rank 0 B/s, r3 reports; the warning names r3 (r0
//!   waits on it, r1 and r2 behind), clears when r3 sends, and `report` shows the quiet period
//!   and r3 as the straggler.
//!
//! Everything is seen by condition (a line, a frame), with bounded deadlines; the dashboard is
//! read from the live sockets through the same view model the dashboard draws (`build_view`),
//! and drawn with a TestBackend at 80×24 and 200×60.
mod common;
#[path = "common/testnic.rs"]
mod testnic;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Bounded, PipeReader, Proc};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use sigmatop::agg::Model;
use sigmatop::cli::view_model::{ViewOptions, build_view};
use sigmatop::live::{LiveSource, ProcessFilter};
use sigmatop_tui::{App, Theme, ViewModel, WarningKind};

/// How long a warning may take after the stop that causes it: the silent threshold (1 s) or the
/// wait threshold (2 s), the 250 ms checks, and a loaded 2-core machine.
const SAY_WITHIN: Duration = Duration::from_secs(8);

fn now_ns() -> u64 {
    common::now_ns()
}

/// A private socket directory (the preload refuses one others can read).
fn socket_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let s = dir.join("sock");
    std::fs::create_dir_all(&s).expect("socket dir");
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    s
}

/// The live sockets of `dir` read into a model, and the dashboard's view of it.
struct Observer {
    live: LiveSource,
    model: Model,
}

impl Observer {
    fn new(sock: &Path) -> Observer {
        Observer {
            live: LiveSource::new(sock.to_path_buf(), ProcessFilter::All),
            model: Model::new(),
        }
    }

    fn view(&self) -> ViewModel {
        build_view(
            &self.model,
            &ViewOptions {
                source: "live".into(),
                now_ns: Some(now_ns()),
                ..Default::default()
            },
        )
    }

    /// Reads the sockets until `cond` holds of the view; panics after `limit` with `what` and
    /// the last view's rows and warnings.
    fn until(
        &mut self,
        what: &str,
        limit: Duration,
        cond: impl Fn(&ViewModel) -> bool,
    ) -> ViewModel {
        let start = Instant::now();
        loop {
            self.live.poll(&mut self.model);
            let vm = self.view();
            if cond(&vm) {
                return vm;
            }
            assert!(
                start.elapsed() < limit,
                "waited {limit:?} for {what}; the view has:\n{}",
                describe(&vm)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The rows and warnings of a view, for a failure message.
fn describe(vm: &ViewModel) -> String {
    let mut s = String::new();
    for p in &vm.processes {
        s.push_str(&format!(
            "  process pid {} rank {:?}: tx {} B/s rx {} B/s silent {:?} exited {}\n",
            p.pid, p.rank, p.tx_bps, p.rx_bps, p.silent_s, p.exited
        ));
    }
    for e in &vm.endpoints {
        s.push_str(&format!(
            "  endpoint pid {} {} → {}: posted {:?} mark '{}' waits on '{}'\n",
            e.pid,
            e.local_id,
            e.peer.label(),
            e.posted,
            e.mark,
            e.waits_on
        ));
    }
    for w in &vm.warnings {
        s.push_str(&format!("  warning {:?}: {}\n", w.kind, w.message));
    }
    s
}

fn screen(vm: &ViewModel, tab: char, w: u16, h: u16) -> String {
    let mut app = App::new(Theme::dark());
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    term.draw(|f| sigmatop_tui::draw(f, &app, vm))
        .expect("draw");
    app.handle_key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char(tab),
        crossterm::event::KeyModifiers::NONE,
    ));
    term.draw(|f| sigmatop_tui::draw(f, &app, vm))
        .expect("draw");
    let b = term.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..b.area.height {
        for x in 0..b.area.width {
            out.push_str(b[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) of a process this test started (through its script).
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Waits for a file holding a pid.
fn pid_file(path: &Path, limit: Duration) -> u32 {
    let start = Instant::now();
    loop {
        if let Some(p) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        assert!(
            start.elapsed() < limit,
            "no pid in {} after {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server and its client started by one script under `sigmatop run --headless --record`: the
/// script starts the server, waits for the test's go (the server listens), starts the client.
struct Pair {
    dir: PathBuf,
    sock: PathBuf,
    rec: PathBuf,
    run: Proc,
    err: PipeReader,
    server: u32,
    client: u32,
}

fn quote(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts the pair `make(port)` gives (server and client command lines) on a port free when
/// looked at: once the server listens on it itself (tests/common `wait_listening`), the client
/// is let go. A server that ends saying its port was taken meanwhile (another process bound it
/// first) is started again, with its client, on another port (at most 8 times); any other early
/// end fails with what it printed.
fn start_pair(
    name: &str,
    make: impl Fn(u16) -> (Vec<String>, Vec<String>),
    env: &[(&str, &str)],
) -> Pair {
    let mut last = String::new();
    for _ in 0..8 {
        let port = common::port();
        let (server, client) = make(port);
        match try_pair(name, &server, &client, port, env) {
            Ok(p) => return p,
            Err(why) if common::in_use(&why) => last = why,
            Err(why) => panic!("{why}"),
        }
    }
    panic!("8 ports were taken between the look and the server's bind; the last:\n{last}");
}

fn try_pair(
    name: &str,
    server: &[String],
    client: &[String],
    port: u16,
    env: &[(&str, &str)],
) -> Result<Pair, String> {
    let dir = common::scratch(name);
    let sock = socket_dir(&dir);
    let rec = dir.join("rec");
    let script = dir.join("pair.sh");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            "{} & echo $! > {d}/server.pid\n\
             while [ ! -e {d}/go ]; do sleep 0.02; done\n\
             {} & echo $! > {d}/client.pid\n\
             wait\n",
            quote(server),
            quote(client)
        ),
    )
    .expect("script");
    let mut cmd = Command::new(common::sigmatop_bin());
    cmd.args(["run", "--headless", "--record"])
        .arg(&rec)
        .arg("--")
        .arg("bash")
        .arg(&script)
        .env("SIGMATOP_SOCKET_DIR", &sock);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut run = common::spawn(&mut cmd);
    let err = PipeReader::new(run.stderr.take().expect("stderr"));
    let out = PipeReader::new(run.stdout.take().expect("stdout"));
    let server_pid = pid_file(&dir.join("server.pid"), Duration::from_secs(30));
    // The server listens on the port itself, or ends (its words are in the run's output).
    let up = common::wait_until(
        &format!("the server (pid {server_pid}) to listen on port {port} or end"),
        Duration::from_secs(30),
        || {
            let l = common::listener_inodes("/proc/net", port);
            if !l.is_empty() && common::holds_any(server_pid, &l) {
                Ok(true)
            } else if !Path::new(&format!("/proc/{server_pid}")).exists() {
                Ok(false)
            } else {
                Err(format!("listeners on the port: socket inodes {l:?}"))
            }
        },
    );
    if !up {
        drop(run);
        return Err(format!(
            "the server ended before it listened on port {port}:\n{}\n{}",
            out.text(),
            err.text()
        ));
    }
    std::fs::write(dir.join("go"), "").expect("go");
    let client_pid = pid_file(&dir.join("client.pid"), Duration::from_secs(30));
    Ok(Pair {
        dir,
        sock,
        rec,
        run,
        err,
        server: server_pid,
        client: client_pid,
    })
}

/// The line of `text` that holds `what`.
fn line_with<'a>(text: &'a str, what: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?} in:\n{text}"))
}

/// JSON lines of a streaming `attach --json`, parsed (the last one may be cut: skipped).
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn process(v: &serde_json::Value, pid: u32) -> Option<&serde_json::Value> {
    v["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
}

/// The checks both stopped-server cases share, from the stop to the end: the view, the JSON,
/// `attach` during the stop, the headless lines, the clearing, the report. `waiter` is how the
/// warning says what the client waits with ("QP 0x", "ep@").
fn stopped_server(p: Pair, waiter: &str) {
    let host = sigmatop::live::hostname();
    let (s, c) = (p.server, p.client);
    let ctx = format!("server pid {s}, client pid {c}");
    // A JSON stream that follows both from before the stop.
    let mut stream = common::spawn(
        Command::new(common::sigmatop_bin())
            .args(["attach", "--json", "--interval-ms", "250", "--socket-dir"])
            .arg(&p.sock),
    );
    let json = PipeReader::new(stream.stdout.take().expect("stdout"));
    let mut obs = Observer::new(&p.sock);
    // Both report and move data.
    let moving = |vm: &ViewModel| {
        [s, c].iter().all(|pid| {
            vm.processes
                .iter()
                .any(|r| r.pid == *pid && r.rx_bps + r.tx_bps > 0.0)
        })
    };
    obs.until("both sides moving data", Duration::from_secs(60), moving);
    // The stream follows both before the stop (a snapshot of it lists each).
    let start = Instant::now();
    while !json_lines(&json.text())
        .iter()
        .any(|v| process(v, s).is_some() && process(v, c).is_some())
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{ctx}: the JSON stream does not list both:\n{}",
            json.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    signal(s, libc::SIGSTOP);
    let stopped = Instant::now();
    let named = format!("pid {s} ({host}) silent");
    let by = format!("— waited on by pid {c} ({waiter}");
    let vm = obs.until(
        &format!("the warning naming the stopped server ({ctx})"),
        SAY_WITHIN,
        |vm| {
            vm.warnings
                .first()
                .is_some_and(|w| w.message.starts_with(&named) && w.message.contains(&by))
        },
    );
    let took = stopped.elapsed();
    let all = describe(&vm);
    // One warning about the pair: the stopped server, with its waiter; none about the waiter.
    let w = &vm.warnings[0];
    assert_eq!(w.kind, WarningKind::Silent, "{ctx}:\n{all}");
    // (Its sends to the stopped server do not complete either: not a stalled edge of its own,
    // for its peer is silent.)
    assert!(
        !vm.warnings.iter().any(|w| {
            w.message.starts_with(&format!("pid {c} "))
                || matches!(
                    w.kind,
                    WarningKind::IdleWithPosted | WarningKind::StalledEdge
                )
        }),
        "{ctx}: a warning about the waiter:\n{all}"
    );
    // Its row: silent, its rates 0 (not its last ones); the client's: up.
    let row = vm
        .processes
        .iter()
        .find(|r| r.pid == s)
        .expect("server row");
    assert!(row.silent_s.is_some_and(|x| x >= 1.0), "{ctx}:\n{all}");
    assert_eq!(
        (row.tx_bps, row.rx_bps, row.ops_per_s),
        (0.0, 0.0, 0.0),
        "{ctx}:\n{all}"
    );
    let crow = vm
        .processes
        .iter()
        .find(|r| r.pid == c)
        .expect("client row");
    assert_eq!(crow.silent_s, None, "{ctx}:\n{all}");
    // Marks follow the rule: the server's rows silent, the client's waiting one `waits`, no
    // `idle` anywhere.
    for e in vm.endpoints.iter().filter(|e| !e.unattributed) {
        if e.pid == s {
            assert_eq!(e.mark, "silent", "{ctx}:\n{all}");
        }
        assert_ne!(e.mark, "idle", "{ctx}:\n{all}");
    }
    assert!(
        vm.endpoints.iter().any(|e| e.pid == c
            && e.mark == "waits"
            && e.waits_on.starts_with(&format!("pid {s} "))),
        "{ctx}: the client's waiting endpoint is marked:\n{all}"
    );
    // Drawn: the row says so, the warning names it, the QPs view marks the rows.
    let big = screen(&vm, '1', 200, 60);
    let srow = line_with(&big, &format!(" {s} "));
    assert!(srow.contains("silent "), "{ctx}: {srow}\n{big}");
    assert!(big.contains(&format!("⚠ {named}")), "{big}");
    let small = screen(&vm, '1', 80, 24);
    assert!(small.contains(&format!("⚠ {named}")), "{small}");
    let qps = screen(&vm, '2', 200, 60);
    assert!(qps.contains("⚠ silent") && qps.contains("⚠ waits"), "{qps}");
    assert!(!qps.contains("⚠ idle"), "{qps}");

    // `run --headless`: one line as it starts, naming the server and its waiter.
    let err = p.err.wait_for(&format!("sigmatop: ⚠ {named}"), SAY_WITHIN);
    let l = line_with(&err, &format!("sigmatop: ⚠ {named}"));
    assert!(l.contains(&by), "{ctx}: {l}");
    // The JSON stream: the server silent, with its waiter.
    let start = Instant::now();
    let silent = loop {
        let found = json_lines(&json.text()).into_iter().find(|v| {
            process(v, s).is_some_and(|x| x["state"] == "silent")
                && v["waits"][0]["process"]["pid"].as_u64() == Some(u64::from(s))
        });
        if let Some(v) = found {
            break v;
        }
        assert!(
            start.elapsed() < SAY_WITHIN,
            "{ctx}: no JSON frame with the server silent:\n{}",
            json.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        process(&silent, s).unwrap()["silent_s"]
            .as_f64()
            .unwrap_or(0.0)
            >= 1.0
    );
    assert_eq!(process(&silent, c).unwrap()["state"], "running");
    let by0 = &silent["waits"][0]["waited_on_by"][0];
    assert_eq!(
        by0["process"]["pid"].as_u64(),
        Some(u64::from(c)),
        "{silent}"
    );

    // A snapshot taken during the stop lists the server, not answering, and the client.
    let once = Command::new(common::sigmatop_bin())
        .args(["attach", "--json", "--once", "--socket-dir"])
        .arg(&p.sock)
        .output_bounded()
        .expect("attach --once");
    assert!(once.status.success(), "{}", common::stderr_of(&once));
    let v: serde_json::Value = serde_json::from_slice(&once.stdout).expect("JSON");
    assert_eq!(
        process(&v, s).map(|x| &x["state"]),
        Some(&"not answering".into()),
        "{v}"
    );
    assert_eq!(
        process(&v, c).map(|x| &x["state"]),
        Some(&"running".into()),
        "{v}"
    );
    // `attach PID` of the stopped one: traced, not answering, stopped.
    let one = Command::new(common::sigmatop_bin())
        .args(["attach", &s.to_string(), "--once", "--socket-dir"])
        .arg(&p.sock)
        .output_bounded()
        .expect("attach PID");
    let text = common::stdout_of(&one);
    assert!(one.status.success(), "{text}{}", common::stderr_of(&one));
    assert!(
        text.contains("traced (its socket is there) but not answering") && text.contains("stopped"),
        "{text}"
    );
    assert!(took < SAY_WITHIN, "{ctx}: said after {took:?}");

    // Continued: the line that clears it, and the view without it.
    signal(s, libc::SIGCONT);
    let resumed = now_ns();
    p.err.wait_for(
        &format!("sigmatop: ✓ pid {s} ({host}) answers again, after"),
        SAY_WITHIN,
    );
    obs.until("the server answering again", SAY_WITHIN, |vm| {
        vm.processes
            .iter()
            .any(|r| r.pid == s && r.silent_s.is_none())
            && !vm.warnings.iter().any(|w| w.kind == WarningKind::Silent)
    });
    // Its record holds what it received after the stop (the collector flushes it every 100 ms:
    // a live snapshot 500 ms after the resume is on disk with what came before it) before the
    // test ends it.
    let newest = |m: &Model| {
        m.processes
            .iter()
            .rfind(|(k, _)| k.pid == s)
            .and_then(|(_, p)| p.last())
            .map_or((0, 0), |x| {
                (x.at_ns, x.counts.iter().map(|c| c.bytes).sum::<u64>())
            })
    };
    let (_, before) = newest(&obs.model);
    let start = Instant::now();
    loop {
        obs.live.poll(&mut obs.model);
        let (at, bytes) = newest(&obs.model);
        if at >= resumed + 500_000_000 && bytes > before {
            break;
        }
        assert!(
            start.elapsed() < SAY_WITHIN,
            "{ctx}: the server moved no data after the resume"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stream);
    // The end: the programs stopped by the test; the record names the server as the one waited
    // for in its longest quiet period.
    signal(c, libc::SIGKILL);
    signal(s, libc::SIGKILL);
    // Killed, the programs make `run` exit non-zero: its summary is not what is checked here.
    let _ = p.run.finish(Duration::from_secs(60));
    let report = Command::new(common::sigmatop_bin())
        .arg("report")
        .arg(&p.rec)
        .output_bounded()
        .expect("report");
    let r = common::stdout_of(&report);
    assert!(report.status.success(), "{r}{}", common::stderr_of(&report));
    let q = line_with(&r, "longest quiet period:");
    assert!(q.contains(" s (t+"), "{q}");
    assert!(
        r.contains(&format!("straggler: pid {s} ({host})")),
        "{ctx}: report:\n{r}"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

#[test]
fn a_stopped_verbs_server_is_silent_and_named_with_its_waiting_client() {
    testnic::build_nic();
    common::require("ibv_rc_pingpong");
    let nic = testnic::root().join("scripts/with-testnic.sh");
    let side = |host: &str, client: bool, port: u16| {
        let mut a: Vec<String> = vec![
            "env".into(),
            format!("TESTNIC_HOST={host}"),
            // The stopped server's NIC answers nothing: no "transport retry exceeded" in the
            // client while the test runs.
            "TESTNIC_TIMEOUT_MS=600000".into(),
            "bash".into(),
            nic.display().to_string(),
            "ibv_rc_pingpong".into(),
            "-g".into(),
            "0".into(),
            "-p".into(),
            port.to_string(),
            "-n".into(),
            "100000000".into(),
        ];
        if client {
            a.push("127.0.0.1".into());
        }
        a
    };
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for h in [1, 2] {
        let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{h}"));
    }
    let p = start_pair(
        "waits-verbs",
        |port| (side("1", false, port), side("2", true, port)),
        &[],
    );
    stopped_server(p, "QP 0x");
}

#[test]
fn a_stopped_ucx_server_is_silent_and_no_row_says_idle() {
    let bin = common::require("ucx_perftest").display().to_string();
    let pair = |port: u16| {
        let server: Vec<String> = vec![bin.clone(), "-p".into(), port.to_string()];
        let client: Vec<String> = [
            bin.as_str(),
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "tag_bw",
            "-s",
            "4096",
            "-n",
            "1000000000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        (server, client)
    };
    let p = start_pair("waits-ucx", pair, &[("UCX_TLS", "tcp")]);
    stopped_server(p, "ep@");
}

#[test]
fn a_late_rank_in_a_ring_is_the_one_named_not_its_waiters() {
    let prog = common::build_program("mpicc", "mpi_ring.c", "mpi_ring", &[]);
    let dir = common::scratch("waits-ring");
    let sock = socket_dir(&dir);
    let rec = dir.join("rec");
    const SLEEP_S: u64 = 8;
    let mut cmd = Command::new(common::sigmatop_bin());
    cmd.arg("--record")
        .arg(&rec)
        .arg("--")
        .arg(common::require("mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .args(common::MPI_OVER_UCX)
        .args(["-x", "UCX_TLS", "-x", "MPI_RING_SLEEP_S"])
        .arg(&prog)
        .env("SIGMATOP_SOCKET_DIR", &sock)
        .env("UCX_TLS", "tcp")
        .env("MPI_RING_SLEEP_S", SLEEP_S.to_string())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let mut run = common::spawn(&mut cmd);
    let err = PipeReader::new(run.stderr.take().expect("stderr"));
    let _out = PipeReader::new(run.stdout.take().expect("stdout"));
    let mut obs = Observer::new(&sock);
    err.wait_for("mpi_ring: rank 3 sleeps", Duration::from_secs(90));
    let slept = Instant::now();
    // The view: r3 named, r0 waiting on it directly, r1 and r2 behind (each joins the chain
    // once its own wait is 2 s old: r1 and r2 got their token a little after r0 sent it);
    // nobody silent.
    let vm = obs.until(
        "the warning naming r3",
        Duration::from_secs(2) + SAY_WITHIN,
        |vm| {
            vm.warnings.first().is_some_and(|w| {
                w.kind == WarningKind::WaitedOn
                    && w.message.starts_with("r3 (")
                    && w.message.contains("behind it r1, r2")
            })
        },
    );
    let all = describe(&vm);
    assert!(
        slept.elapsed() < Duration::from_secs(SLEEP_S),
        "named before r3 woke:\n{all}"
    );
    let w = &vm.warnings[0].message;
    assert!(
        w.contains("— waited on by r0 (ucp_worker: 1 receive posted); behind it r1, r2"),
        "{w}\n{all}"
    );
    assert_eq!(
        vm.warnings
            .iter()
            .filter(|w| matches!(w.kind, WarningKind::WaitedOn | WarningKind::Silent))
            .count(),
        1,
        "{all}"
    );
    assert!(vm.processes.iter().all(|r| r.silent_s.is_none()), "{all}");
    let r3 = vm.processes.iter().find(|r| r.rank == Some(3)).expect("r3");
    assert!(
        w.starts_with(&format!("r3 ({} pid {})", r3.host, r3.pid)),
        "{w}"
    );
    // Every rank moves nothing.
    assert!(vm.processes.iter().all(|r| r.tx_bps == 0.0), "{all}");
    // `run --headless`: the line as it starts (r0 waits on r3; the ranks behind it join as
    // their waits grow old), and as it clears when r3 sends.
    let line = format!("sigmatop: ⚠ r3 ({} pid {}) sent nothing", r3.host, r3.pid);
    let e = err.wait_for(&line, SAY_WITHIN);
    assert!(
        line_with(&e, &line).contains("waited on by r0 (ucp_worker: 1 receive posted)"),
        "{e}"
    );
    assert_eq!(
        e.matches("sigmatop: ⚠").count(),
        1,
        "one line as it starts:\n{e}"
    );
    err.wait_for(
        &format!(
            "sigmatop: ✓ r3 ({} pid {}): no longer waited on, after",
            r3.host, r3.pid
        ),
        Duration::from_secs(SLEEP_S) + SAY_WITHIN,
    );
    let out = run.finish(Duration::from_secs(120));
    assert!(out.status.success(), "{}", err.finish());
    // The record: the longest quiet period is the sleep, and r3 the straggler.
    let report = Command::new(common::sigmatop_bin())
        .arg("report")
        .arg(&rec)
        .output_bounded()
        .expect("report");
    let r = common::stdout_of(&report);
    assert!(report.status.success(), "{r}");
    let q = line_with(&r, "longest quiet period:");
    let secs: f64 = q
        .split_whitespace()
        .nth(3)
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("{q}"));
    assert!(
        secs >= (SLEEP_S - 2) as f64 && secs <= (SLEEP_S + 1) as f64,
        "the quiet period is r3's sleep of {SLEEP_S} s: {q}"
    );
    assert!(
        r.contains(&format!("straggler: r3 ({} pid {})", r3.host, r3.pid)),
        "report:\n{r}"
    );
    let json = common::export_json(&rec, "mpi ring");
    assert_eq!(json["quiet"]["straggler"]["rank"], 3, "{}", json["quiet"]);
    assert_eq!(
        json["quiet"]["waits"][0]["behind"].as_array().map(Vec::len),
        Some(2)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
