//! Where is it stuck (issue 36, items 1, 2 and 5): rdma-core's own programs on the software NIC
//! across simulated hosts, one edge stalled by the NIC (`TESTNIC_STALL`, docs/TESTNIC.md), or one
//! work request failed (`TESTNIC_FAIL`):
//! - `ib_write_bw` client (host 2, traced by `sigmatop run --hang-after 1s`) to an untraced server
//!   (host 1), its sends held after 3000 for 6 s: `run` says the stalled edge (the client's pid,
//!   its QP, the work outstanding) no sooner than the threshold after the NIC's stall and within
//!   the threshold and an interval (plus slack for a loaded machine), `attach --json --once` shows
//!   the QP's queue mid-stall within the bounds the program's tx depth and CQ moderation set, and
//!   `run` says it moves again at the lift; the summary's queue then has exactly the 20,000 WRs
//!   posted and completed.
//! - Two `ibv_rc_pingpong` pairs over four hosts, all traced, one client held: the one stalled
//!   edge named is that client → its own server, none of the other three processes.
//! - `TESTNIC_FAIL=50` on a pingpong client: its QP is in error with one "transport retry
//!   exceeded" completion, and no stall is reported.
//!
//! Every wait is for a condition (a line of the NIC, of sigmatop, a JSON state) with a deadline.
mod common;
#[path = "common/testnic.rs"]
mod testnic;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{PipeReader, Proc};
use testnic::{build_nic, hex, monotonic_ns, with_testnic};

const LIMIT: Duration = Duration::from_secs(40);
/// sigmatop's interval (the preload's snapshots).
const INTERVAL_S: f64 = 0.25;
/// Slack for a loaded 2-core machine on top of "threshold + one interval".
const SLACK_S: f64 = 0.75;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn socket_dir(name: &str) -> PathBuf {
    let d = common::scratch(name).join("sock");
    std::fs::create_dir_all(&d).expect("socket dir");
    // The live socket's directory must be private (docs/WIRE.md).
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    d
}

/// `with-testnic.sh env VARS... PROG ARGS...`, stdout and stderr piped.
fn nic(vars: &[String], prog: &str, args: &[String]) -> Command {
    let mut a: Vec<String> = vec!["env".into()];
    a.extend(vars.iter().cloned());
    a.push(prog.into());
    a.extend(args.iter().cloned());
    let mut c = with_testnic(&a);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// An untraced server of `prog ARGS -p PORT` on host 1, listening.
fn server(prog: &str, args: &[String], vars: &[String]) -> (Proc, u16) {
    common::require(prog);
    let mut v = vec!["TESTNIC_HOST=1".to_string()];
    v.extend(vars.iter().cloned());
    common::start_server(
        |port| {
            let mut a = args.to_vec();
            a.extend(["-p".into(), port.to_string()]);
            nic(&v, prog, &a)
        },
        Duration::from_secs(20),
    )
}

/// The NIC's stall line `testnic: pid P stall: QP 0xQ ... t=SECONDS`: (pid, QPN, CLOCK_MONOTONIC
/// ns).
fn stall_line(text: &str, what: &str) -> (u32, u32, u64) {
    let line = text
        .lines()
        .find(|l| l.starts_with("testnic: pid ") && l.contains(what))
        .unwrap_or_else(|| panic!("no NIC line {what:?} in:\n{text}"));
    let pid: u32 = line["testnic: pid ".len()..]
        .split(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("pid in {line:?}"));
    let qpn = line
        .split("QP 0x")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .map(|h| hex(&format!("0x{h}")) as u32)
        .unwrap_or_else(|| panic!("QPN in {line:?}"));
    let t = line
        .rsplit("t=")
        .next()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("t= in {line:?}"));
    (pid, qpn, (t * 1e9) as u64)
}

/// Waits for `what` in `r`'s text and returns CLOCK_MONOTONIC ns when it was seen (within the
/// reader's 20 ms poll) and the line.
fn seen(r: &PipeReader, what: &str, limit: Duration) -> (u64, String) {
    let text = r.wait_for(what, limit);
    let at = monotonic_ns();
    let line = text
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_default()
        .to_string();
    (at, line)
}

/// `sigmatop attach --json --once` over `sock`, until `ok` holds of its JSON (each try bounded).
fn attach_until(
    sock: &Path,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < LIMIT {
        let mut c = Command::new(common::sigmatop_bin());
        c.args(["attach", "--json", "--once"])
            .env("SIGMATOP_SOCKET_DIR", sock)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let o = common::wait_timeout(common::spawn(&mut c), Duration::from_secs(20));
        last = format!("{}\n{}", common::stdout_of(&o), common::stderr_of(&o));
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&common::stdout_of(&o))
            && ok(&v)
        {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("waited {LIMIT:?} for {what}; the last attach said:\n{last}");
}

/// The endpoint labelled `qp 0x{qpn}` of process `pid` in a report.
fn qp(v: &serde_json::Value, pid: u32, qpn: u32) -> &serde_json::Value {
    let label = format!("qp 0x{qpn:x}");
    v["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["pid"] == pid)
        .flat_map(|p| p["endpoints"].as_array().into_iter().flatten())
        .find(|e| e["label"] == label.as_str())
        .unwrap_or_else(|| panic!("no {label} of pid {pid} in {v:#}"))
}

#[test]
fn a_stalled_write_stream_is_named_in_time_and_cleared_at_the_lift() {
    build_nic();
    let (n, size, after, ms) = (20_000u64, 4096u64, 3000u64, 6000u64);
    let hang_s = 1.0;
    let ctx = format!(
        "ib_write_bw -n {n} -s {size}, client TESTNIC_STALL={after}:{ms}, --hang-after {hang_s}s"
    );
    let dir = common::scratch("stalled-write-bw");
    let sock = socket_dir("stalled-write-bw");
    let json = dir.join("summary.json");
    let args = strings(&["-d", "mlx5_0", "-x", "0", "-s", "4096", "-n", "20000"]);
    let (srv, port) = server("ib_write_bw", &args, &[]);
    let mut cargs = vec![
        common::sigmatop_bin().display().to_string(),
        "run".into(),
        "--hang-after".into(),
        "1s".into(),
        "--json".into(),
        json.display().to_string(),
        "--".into(),
        "ib_write_bw".into(),
    ];
    cargs.extend(args.iter().cloned());
    cargs.extend(["-p".into(), port.to_string(), "127.0.0.1".into()]);
    let vars = vec![
        "TESTNIC_HOST=2".to_string(),
        format!("TESTNIC_STALL={after}:{ms}"),
        format!("SIGMATOP_SOCKET_DIR={}", sock.display()),
    ];
    let mut cmd = nic(&vars, "env", &cargs);
    let mut client = common::spawn(&mut cmd).into_child();
    let err = PipeReader::new(client.stderr.take().expect("stderr"));
    let client = common::guard(client);

    // The NIC holds WR 3001; sigmatop names the edge: not before the threshold, within the
    // threshold and an interval (and the slack).
    let text = err.wait_for(" stall: QP 0x", LIMIT);
    let (pid, qpn, t_stall) = stall_line(&text, " stall: QP 0x");
    let (t_warn, warn) = seen(&err, "sigmatop: ⚠ stalled", LIMIT);
    let after_s = t_warn.saturating_sub(t_stall) as f64 / 1e9;
    assert!(
        after_s >= hang_s && after_s <= hang_s + INTERVAL_S + SLACK_S,
        "{ctx}: warned {after_s:.3}s after the NIC's stall:\n{warn}"
    );
    let want = format!("sigmatop: ⚠ stalled QP 0x{qpn:x} ");
    assert!(warn.starts_with(&want), "{ctx}: {warn:?} is not {want:?}…");
    // The peer is the untraced server, named by its address (host 1's GID), never a process.
    assert!(
        warn.contains(&format!(" pid {pid} → 10.0.1.1 qp 0x")),
        "{ctx}: the client (pid {pid}) waits on the server at 10.0.1.1: {warn:?}"
    );

    // Mid-stall, the QP's queue as `attach --json --once` reads it: completions stopped at or
    // within one CQ moderation (100) of the 3000 the NIC executed, at most the tx depth (128)
    // outstanding, stalled, and the one stalled edge is this QP's.
    let v = attach_until(&sock, "the stalled QP in attach's JSON", |v| {
        v["stalls"].as_array().is_some_and(|s| !s.is_empty())
    });
    let q = &qp(&v, pid, qpn)["queue"];
    let done = q["sq_completed"].as_u64().expect("sq_completed");
    let out = q["sq_outstanding"].as_u64().expect("sq_outstanding");
    assert!(
        (after - 100..=after).contains(&done) && (1..=128).contains(&out),
        "{ctx}: mid-stall queue {q:#}"
    );
    assert_eq!(q["sq_posted"].as_u64(), Some(done + out), "{ctx}: {q:#}");
    assert_eq!(
        (&q["stalled"], &q["health"]),
        (&true.into(), &"live".into())
    );
    assert!(q["sq_stalled_s"].as_f64().unwrap_or(0.0) >= hang_s, "{q:#}");
    let stalls = v["stalls"].as_array().expect("stalls");
    assert_eq!(stalls.len(), 1, "{ctx}: one stalled edge: {stalls:#?}");
    assert_eq!(
        (&stalls[0]["pid"], &stalls[0]["qpn"]),
        (&pid.into(), &qpn.into())
    );

    // The lift: it moves again, and says how long it stood still.
    let lift = err.wait_for(" stall lifted: ", LIMIT);
    let (_, _, t_lift) = stall_line(&lift, " stall lifted: ");
    let (t_clear, clear) = seen(&err, "sigmatop: ✓ ", LIMIT);
    assert!(
        clear.contains(&format!("QP 0x{qpn:x}: moving again after ")),
        "{ctx}: {clear:?}"
    );
    assert!(
        t_clear >= t_lift && (t_clear - t_lift) as f64 / 1e9 <= INTERVAL_S + SLACK_S,
        "{ctx}: cleared {:.3}s after the lift",
        (t_clear as f64 - t_lift as f64) / 1e9
    );
    let o = client.finish(LIMIT);
    assert!(o.status.success(), "{ctx}: {}", err.finish());
    let so = srv.finish(LIMIT);
    assert!(
        so.status.success(),
        "{ctx}: server {}",
        common::stderr_of(&so)
    );

    // The summary: every WR posted completed, nothing stalled at the end.
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary written")).expect("json");
    let q = &qp(&v, pid, qpn)["queue"];
    assert_eq!(
        (&q["sq_posted"], &q["sq_completed"], &q["sq_outstanding"]),
        (&n.into(), &n.into(), &0.into()),
        "{ctx}: {q:#}"
    );
    assert!(v.get("stalls").is_none(), "{ctx}: {:#}", v["stalls"]);
}

/// `with-testnic.sh env VARS... ibv_rc_pingpong -g 0 -n N ARGS`, traced into `sock` when `traced`.
fn pingpong(host: u8, n: u64, extra: &[String], traced: Option<&Path>, more: &[String]) -> Command {
    let mut vars = vec![format!("TESTNIC_HOST={host}")];
    if let Some(sock) = traced {
        vars.push(format!("LD_PRELOAD={}", common::preload().display()));
        vars.push(format!("SIGMATOP_SOCKET_DIR={}", sock.display()));
    }
    vars.extend(more.iter().cloned());
    let mut a = strings(&["-g", "0", "-n"]);
    a.push(n.to_string());
    a.extend(extra.iter().cloned());
    nic(&vars, "ibv_rc_pingpong", &a)
}

#[test]
fn of_two_pairs_on_four_hosts_the_held_edge_alone_is_named() {
    build_nic();
    common::require("ibv_rc_pingpong");
    let sock = socket_dir("stalled-four-hosts");
    let n = 10_000_000u64;
    let ctx = "two ibv_rc_pingpong pairs (hosts 1↔2, 3↔4), client on host 4 TESTNIC_STALL=100:0";
    let mut pairs = Vec::new();
    for (s_host, c_host, held) in [(1u8, 2u8, false), (3, 4, true)] {
        let (srv, port) = common::start_server(
            |port| {
                pingpong(
                    s_host,
                    n,
                    &["-p".into(), port.to_string()],
                    Some(&sock),
                    &[],
                )
            },
            Duration::from_secs(20),
        );
        let more: Vec<String> = if held {
            vec!["TESTNIC_STALL=100:0".into()]
        } else {
            vec![]
        };
        let mut cmd = pingpong(
            c_host,
            n,
            &["-p".into(), port.to_string(), "127.0.0.1".into()],
            Some(&sock),
            &more,
        );
        let mut c = common::spawn(&mut cmd).into_child();
        let err = PipeReader::new(c.stderr.take().expect("stderr"));
        pairs.push((srv, common::guard(c), err));
    }
    let text = pairs[1].2.wait_for(" stall: QP 0x", LIMIT);
    let (pid, qpn, _) = stall_line(&text, " stall: QP 0x");
    let v = attach_until(&sock, "a stalled edge in attach's JSON", |v| {
        v["stalls"].as_array().is_some_and(|s| !s.is_empty())
    });
    let stalls = v["stalls"].as_array().expect("stalls");
    assert_eq!(stalls.len(), 1, "{ctx}: one edge: {stalls:#?}");
    let s = &stalls[0];
    assert_eq!(
        (&s["pid"], &s["qpn"]),
        (&pid.into(), &qpn.into()),
        "{ctx}: {s:#}"
    );
    // The peer is the held client's own server, a traced process (by its QP's address; the
    // NIC's wrapper execs the program, so the server's pid is its guard's).
    let server_pid = pairs[1].0.id();
    let want = format!("{} pid {server_pid}", host_of(&v, server_pid));
    assert_eq!(s["peer"].as_str(), Some(want.as_str()), "{ctx}: {s:#}");
    assert!(
        s["text"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("pid {pid} → {want}: "))),
        "{ctx}: {s:#}"
    );
    // All four processes report; the other three have no stalled queue.
    let procs = v["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 4, "{ctx}: {v:#}");
    let stalled_qps: Vec<(u64, String)> = procs
        .iter()
        .flat_map(|p| {
            p["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["queue"]["stalled"] == true)
                .map(move |e| (p["pid"].as_u64().unwrap_or(0), e["label"].to_string()))
        })
        .collect();
    assert_eq!(
        stalled_qps,
        vec![(pid as u64, format!("\"qp 0x{qpn:x}\""))],
        "{ctx}"
    );
    drop(pairs);
}

fn host_of(v: &serde_json::Value, pid: u32) -> String {
    v["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["pid"] == pid)
        .and_then(|p| p["host"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_failed_work_request_shows_its_status_and_is_no_stall() {
    build_nic();
    common::require("ibv_rc_pingpong");
    let dir = common::scratch("stalled-failed");
    let sock = socket_dir("stalled-failed");
    let json = dir.join("summary.json");
    let ctx =
        "ibv_rc_pingpong -n 500, client TESTNIC_FAIL=50 under sigmatop run --hang-after 500ms";
    let (srv, port) = common::start_server(
        |port| pingpong(1, 500, &["-p".into(), port.to_string()], None, &[]),
        Duration::from_secs(20),
    );
    let mut cargs = vec![
        common::sigmatop_bin().display().to_string(),
        "run".into(),
        "--hang-after".into(),
        "500ms".into(),
        "--json".into(),
        json.display().to_string(),
        "--".into(),
        "ibv_rc_pingpong".into(),
    ];
    cargs.extend(strings(&["-g", "0", "-n", "500", "-p"]));
    cargs.extend([port.to_string(), "127.0.0.1".into()]);
    let vars = vec![
        "TESTNIC_HOST=2".to_string(),
        "TESTNIC_FAIL=50".to_string(),
        format!("SIGMATOP_SOCKET_DIR={}", sock.display()),
    ];
    let o = common::spawn(&mut nic(&vars, "env", &cargs)).finish(LIMIT);
    let err = common::stderr_of(&o);
    assert!(!o.status.success(), "{ctx}: the client fails:\n{err}");
    assert!(
        err.contains("Failed status transport retry counter exceeded (12)"),
        "{ctx}: rdma-core's own words:\n{err}"
    );
    let (pid, qpn, _) = stall_line(&err, " fail: QP 0x");
    assert!(!err.contains("⚠ stalled"), "{ctx}: no stall:\n{err}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary written")).expect("json");
    let q = &qp(&v, pid, qpn)["queue"];
    assert_eq!(q["health"], "error", "{ctx}: {q:#}");
    assert_eq!(q["errors"]["transport retry exceeded"], 1, "{ctx}: {q:#}");
    assert_eq!(q["stalled"], false, "{ctx}: {q:#}");
    assert!(v.get("stalls").is_none(), "{ctx}: {v:#}");
    drop(srv);
}
