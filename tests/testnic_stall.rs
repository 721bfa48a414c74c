//! The software NIC's injected faults (docs/TESTNIC.md, "Stalls and injected failures"), on
//! rdma-core's own programs, unmodified, across two simulated hosts (server `TESTNIC_HOST=1`,
//! client `TESTNIC_HOST=2`):
//! - `TESTNIC_STALL=200:1500` on an `ib_write_bw -s 4096 -n 1000` client: the run completes with
//!   its exact bytes; its NIC log holds exactly 200 WQEs, the stall, the lift (≥ 1500 ms later by
//!   the NIC's own clock), then the other 800; its run lasts at least the stall.
//! - `TESTNIC_STALL=100:0` (for good) on an `ibv_rc_pingpong -n 500` client, with a 1 s
//!   transport timeout on both sides: after 2 s of stall both processes are alive, the client's NIC
//!   executed exactly 100 WQEs and the server's 100 (none timed out), then the guards end them.
//! - `TESTNIC_FAIL=50` on an `ibv_rc_pingpong` client: the program reports its failed completion
//!   (rdma-core's own words) and exits non-zero; the NIC's line and log name WR 50.
//! - `verbs_faults fail` under `TESTNIC_FAIL=3`: the statuses and vendor syndromes of the failed
//!   WR, the flushed later, unsignaled and receive WRs, `ibv_query_qp` = ERR, nothing of the
//!   failed WR on the wire.
//! - The narrower forms: `TESTNIC_STALL_PEER=H` and `TESTNIC_STALL=N:MS:QPN` stall only what they
//!   name.
//!
//! Stalls are seen by condition (the NIC's stderr line, its log, its CLOCK_MONOTONIC timestamps),
//! never by sleeping a guessed time.
mod common;
#[path = "common/testnic.rs"]
mod testnic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{PipeReader, Proc, perftest_row};
use testnic::{NicLine, NicWqe, build_nic, hex, monotonic_ns, nic_lines, with_testnic};

const LIMIT: Duration = Duration::from_secs(30);

/// `bash scripts/with-testnic.sh env TESTNIC_LOG=LOG VARS... PROG ARGS...`
fn nic_cmd(log: &Path, vars: &[String], prog: &str, args: &[String]) -> Command {
    let mut a: Vec<String> = vec!["env".into(), format!("TESTNIC_LOG={}", log.display())];
    a.extend(vars.iter().cloned());
    a.push(prog.into());
    a.extend(args.iter().cloned());
    with_testnic(&a)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A server (`prog ARGS -p PORT` on host 1) listening, and its client (`... 127.0.0.1` on host 2
/// with `client_vars`) started: (server, client, port).
fn start_pair(
    log: &Path,
    prog: &str,
    args: &[String],
    server_vars: &[String],
    client_vars: &[String],
) -> (Proc, Proc) {
    common::require(prog);
    let mut sv = vec!["TESTNIC_HOST=1".to_string()];
    sv.extend(server_vars.iter().cloned());
    let (server, port) = common::start_server(
        |port| {
            let mut a = args.to_vec();
            a.extend(["-p".into(), port.to_string()]);
            nic_cmd(log, &sv, prog, &a)
        },
        Duration::from_secs(20),
    );
    let mut cv = vec!["TESTNIC_HOST=2".to_string()];
    cv.extend(client_vars.iter().cloned());
    let mut a = args.to_vec();
    a.extend(["-p".into(), port.to_string(), "127.0.0.1".into()]);
    let client = common::spawn(&mut nic_cmd(log, &cv, prog, &a));
    (server, client)
}

fn log_dir(name: &str) -> (PathBuf, PathBuf) {
    let dir = common::scratch(name);
    let log = dir.join("nic-log");
    std::fs::create_dir_all(&log).expect("log dir");
    (dir, log)
}

/// The WQE lines among `lines`.
fn wqes(lines: &[NicLine]) -> Vec<&NicWqe> {
    lines
        .iter()
        .filter_map(|l| match l {
            NicLine::Wqe(w) => Some(w),
            NicLine::Event(..) => None,
        })
        .collect()
}

/// The one event `name` among `lines`: (its position among all lines, its fields).
fn event<'a>(ctx: &str, lines: &'a [NicLine], name: &str) -> (usize, &'a BTreeMap<String, String>) {
    let found: Vec<(usize, &BTreeMap<String, String>)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match l {
            NicLine::Event(n, kv) if n == name => Some((i, kv)),
            _ => None,
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{ctx}: want one '{name}' event in the NIC log, found {found:?}"
    );
    found[0]
}

fn num(ctx: &str, kv: &BTreeMap<String, String>, key: &str) -> u64 {
    let v = kv
        .get(key)
        .unwrap_or_else(|| panic!("{ctx}: event without {key}: {kv:?}"));
    if v.starts_with("0x") {
        hex(v)
    } else {
        v.parse()
            .unwrap_or_else(|e| panic!("{ctx}: {key}={v}: {e}"))
    }
}

/// The stderr lines of the NIC of process `pid` that start with `what` ("stall:", "stall
/// lifted:", "fail:").
fn nic_lines_of<'a>(err: &'a str, pid: u32, what: &str) -> Vec<&'a str> {
    let head = format!("testnic: pid {pid} {what}");
    err.lines().filter(|l| l.starts_with(&head)).collect()
}

/// The `t=SECONDS.NANOS` of a NIC stderr line, in ns.
fn line_t(ctx: &str, line: &str) -> u64 {
    let t = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("t="))
        .unwrap_or_else(|| panic!("{ctx}: no t= in {line}"));
    let (s, ns) = t
        .split_once('.')
        .unwrap_or_else(|| panic!("{ctx}: t={t} is not S.NNNNNNNNN"));
    let s: u64 = s.parse().unwrap_or_else(|e| panic!("{ctx}: t={t}: {e}"));
    let ns: u64 = ns.parse().unwrap_or_else(|e| panic!("{ctx}: t={t}: {e}"));
    s * 1_000_000_000 + ns
}

/// perftest: "local address: LID 0000 QPN 0x0107 ..."
fn perftest_qpn(ctx: &str, out: &str) -> u32 {
    out.lines()
        .find(|l| l.trim_start().starts_with("local address"))
        .and_then(|l| l.split("QPN ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .map(|q| hex(q) as u32)
        .unwrap_or_else(|| panic!("{ctx}: no 'local address ... QPN' in:\n{out}"))
}

/// rc_pingpong: "  local address:  LID 0x0000, QPN 0x000103, ..."
fn pingpong_qpn(ctx: &str, out: &str) -> u32 {
    out.lines()
        .find(|l| l.contains("local address"))
        .and_then(|l| l.split("QPN ").nth(1))
        .and_then(|r| r.split(',').next())
        .map(|q| hex(q) as u32)
        .unwrap_or_else(|| panic!("{ctx}: no 'local address ... QPN' in:\n{out}"))
}

fn assert_ok(ctx: &str, who: &str, o: &Output) {
    assert!(
        o.status.success(),
        "{ctx}: {who} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status,
        common::stdout_of(o),
        common::stderr_of(o)
    );
}

/// Polls `cond` every 20 ms until it holds; panics after `limit` with `what` and the last thing
/// it saw.
fn wait_until<T>(limit: Duration, what: &str, mut cond: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match cond() {
            Ok(v) => return v,
            Err(seen) => assert!(
                start.elapsed() < limit,
                "waited {limit:?} for {what}; last seen: {seen}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (a) A 1.5 s stall after 200 of ib_write_bw's 1000 writes: the run completes, every byte
/// arrives, and the NIC's log says where the stall fell and how long it lasted.
#[test]
fn ib_write_bw_stalled_after_200_writes_for_1500_ms_completes_exact() {
    build_nic();
    let (n, size, after, ms) = (1000u64, 4096u64, 200usize, 1500u64);
    let ctx = format!("ib_write_bw -n {n} -s {size}, client TESTNIC_STALL={after}:{ms}");
    let (_dir, log) = log_dir("testnic-stall-write-bw");
    let args = strings(&[
        "-d",
        "mlx5_0",
        "-x",
        "0",
        "-s",
        &size.to_string(),
        "-n",
        &n.to_string(),
    ]);
    // perftest's own CPU-clock calibration can fail on a loaded machine ("Correlation
    // coefficient r^2 < 0.9 ... Can't produce a report"): nothing of the NIC's; the pair is run
    // again, at most twice more, the retry listed in the suite's summary.
    let mut attempt = 0;
    let (spid, cpid, co, so, ran) = loop {
        attempt += 1;
        let (server, client) = start_pair(
            &log,
            "ib_write_bw",
            &args,
            &[],
            &[format!("TESTNIC_STALL={after}:{ms}")],
        );
        let t0 = Instant::now(); // the client was started just before: its run is longer than this
        let (spid, cpid) = (server.id(), client.id());
        let co = common::wait_timeout(client, LIMIT);
        let ran = t0.elapsed();
        let so = common::wait_timeout(server, LIMIT);
        let calibration = [&co, &so].iter().any(|o| {
            !o.status.success()
                && format!("{}{}", common::stdout_of(o), common::stderr_of(o))
                    .contains("Can't produce a report")
        });
        if calibration && attempt < 3 {
            common::note_retry(&format!("{ctx}: perftest's \"Can't produce a report\""));
            continue;
        }
        break (spid, cpid, co, so, ran);
    };
    assert_ok(&ctx, "client", &co);
    assert_ok(&ctx, "server", &so);
    let cout = common::stdout_of(&co);
    assert_eq!(perftest_row(&cout), (size, n), "{ctx}: result row");
    let qpn = perftest_qpn(&ctx, &cout);

    // The NIC's log of the client, in order: 200 writes, the stall, the lift, 800 writes.
    let lines = nic_lines(&log, cpid);
    let (at_stall, stall) = event(&ctx, &lines, "stall");
    let (at_lift, lift) = event(&ctx, &lines, "lift");
    assert_eq!(
        (at_stall, at_lift),
        (after, after + 1),
        "{ctx}: the stall after exactly {after} WQEs, the lift next"
    );
    let all = wqes(&lines);
    assert_eq!(all.len() as u64, n, "{ctx}: WQEs the client's NIC executed");
    for (i, w) in all.iter().enumerate() {
        assert_eq!(
            (w.qpn, w.op.as_str(), w.len, w.status, w.idx),
            (qpn, "RDMA_WRITE", size, 0, i as u32),
            "{ctx}: WQE {i}"
        );
    }
    let bytes: u64 = all.iter().map(|w| w.len).sum();
    assert_eq!(bytes, n * size, "{ctx}: bytes written");
    assert_eq!(
        all.iter().filter(|w| w.signaled).count() as u64,
        n / 100,
        "{ctx}: CQ moderation 100"
    );
    assert!(
        nic_lines(&log, spid).is_empty(),
        "{ctx}: the server posts nothing"
    );
    for (kv, key, want) in [
        (stall, "wr", after as u64 + 1),
        (stall, "executed", after as u64),
        (stall, "ms", ms),
        (stall, "idx", after as u64),
        (stall, "qpn", qpn as u64),
        (lift, "wr", after as u64 + 1),
        (lift, "qpn", qpn as u64),
    ] {
        assert_eq!(num(&ctx, kv, key), want, "{ctx}: {key} of {kv:?}");
    }
    let (t_stall, t_lift) = (num(&ctx, stall, "t_ns"), num(&ctx, lift, "t_ns"));
    assert!(
        t_lift >= t_stall + ms * 1_000_000,
        "{ctx}: lifted {} ms after it started, by the NIC's clock",
        (t_lift - t_stall) / 1_000_000
    );
    assert!(
        num(&ctx, lift, "stalled_ms") >= ms,
        "{ctx}: stalled_ms {lift:?}"
    );
    assert!(
        ran >= Duration::from_millis(ms),
        "{ctx}: the client ran {ran:?}, less than the stall"
    );

    // Its stderr: one line when the stall starts, one when it lifts, naming pid, QP and WR.
    let err = common::stderr_of(&co);
    let started = nic_lines_of(&err, cpid, "stall:");
    let lifted = nic_lines_of(&err, cpid, "stall lifted:");
    assert_eq!(
        (started.len(), lifted.len()),
        (1, 1),
        "{ctx}: stderr:\n{err}"
    );
    let want = format!(
        "testnic: pid {cpid} stall: QP {qpn:#x} holds WR {} (idx {after}, RDMA_WRITE) after {after} executed, for {ms} ms (TESTNIC_STALL={after}:{ms}) t=",
        after + 1
    );
    assert!(
        started[0].starts_with(&want),
        "{ctx}: {}\nwant {want}",
        started[0]
    );
    let want = format!(
        "testnic: pid {cpid} stall lifted: QP {qpn:#x} resumes at WR {} (idx {after}) after ",
        after + 1
    );
    assert!(
        lifted[0].starts_with(&want),
        "{ctx}: {}\nwant {want}",
        lifted[0]
    );
    assert_eq!(
        line_t(&ctx, started[0]),
        t_stall,
        "{ctx}: stderr and log agree"
    );
    assert_eq!(
        line_t(&ctx, lifted[0]),
        t_lift,
        "{ctx}: stderr and log agree"
    );
    assert!(
        !err.contains("retry exceeded"),
        "{ctx}: nothing timed out:\n{err}"
    );
}

/// (b) A stall for good after 100 of ibv_rc_pingpong's 500 messages, with a 1 s transport
/// timeout on both sides: for 2 s of the NIC's time the client executes nothing more, neither
/// side times out, both stay alive; then the guards end them.
#[test]
fn rc_pingpong_stalled_for_good_holds_without_timeouts() {
    build_nic();
    let after = 100usize;
    let ctx = format!("ibv_rc_pingpong -n 500, client TESTNIC_STALL={after}:0");
    let (_dir, log) = log_dir("testnic-stall-pingpong");
    let args = strings(&["-g", "0", "-n", "500"]);
    // Half the time the test holds the stall: a held QP whose timers ran would fail within it.
    let timeout = "TESTNIC_TIMEOUT_MS=1000".to_string();
    let (mut server, mut client) = start_pair(
        &log,
        "ibv_rc_pingpong",
        &args,
        std::slice::from_ref(&timeout),
        &[format!("TESTNIC_STALL={after}:0"), timeout.clone()],
    );
    let (spid, cpid) = (server.id(), client.id());
    let cerr = PipeReader::new(client.stderr.take().expect("client stderr"));
    let _cout = PipeReader::new(client.stdout.take().expect("client stdout"));
    let serr = PipeReader::new(server.stderr.take().expect("server stderr"));
    let _sout = PipeReader::new(server.stdout.take().expect("server stdout"));
    let head = format!("testnic: pid {cpid} stall: ");
    let err = cerr.wait_for(&head, Duration::from_secs(20));
    let line = err
        .lines()
        .find(|l| l.starts_with(&head))
        .expect("the stall line")
        .to_string();
    let t_stall = line_t(&ctx, &line);
    assert!(
        line.contains(&format!(
            "holds WR {} (idx {after}, SEND) after {after} executed, for good (TESTNIC_STALL={after}:0)",
            after + 1
        )),
        "{ctx}: {line}"
    );
    // (rc_pingpong's stdout is a full buffer until it exits: its QPN comes from the NIC's log.)
    let qpn = wqes(&nic_lines(&log, cpid))
        .first()
        .map(|w| w.qpn)
        .unwrap_or_else(|| panic!("{ctx}: the stall line came before any WQE was logged"));
    assert!(
        line.contains(&format!("QP {qpn:#x} holds")),
        "{ctx}: {line} names QP {qpn:#x}"
    );

    // Held: for 2 s of NIC time after the stall began, both alive and nothing new executed.
    let counts = |pid: u32| {
        let l = nic_lines(&log, pid);
        (
            wqes(&l).len(),
            l.iter().filter(|x| matches!(x, NicLine::Event(..))).count(),
        )
    };
    let held_for = 2_000_000_000u64;
    wait_until(
        Duration::from_secs(10),
        "2 s of stall with both processes alive and no WQE past the 100th",
        || {
            for (who, p) in [("client", &mut client), ("server", &mut server)] {
                if let Ok(Some(st)) = p.try_wait() {
                    panic!(
                        "{ctx}: the {who} ended ({st}) during the stall\nclient stderr:\n{}\nserver stderr:\n{}",
                        cerr.text(),
                        serr.text()
                    );
                }
            }
            let (c, s) = (counts(cpid), counts(spid));
            assert!(
                c.0 <= after && s.0 <= after,
                "{ctx}: WQEs executed past the stall: client {c:?}, server {s:?}"
            );
            let now = monotonic_ns();
            if now >= t_stall + held_for && c == (after, 1) && s == (after, 0) {
                Ok(())
            } else {
                Err(format!(
                    "{} ms of stall; client (WQEs, events) {c:?}, server {s:?}",
                    now.saturating_sub(t_stall) / 1_000_000
                ))
            }
        },
    );
    for (who, text) in [("client", cerr.text()), ("server", serr.text())] {
        assert!(
            !text.contains("retry exceeded") && !text.contains("Failed status"),
            "{ctx}: the {who} timed out during the stall:\n{text}"
        );
    }
    let l = nic_lines(&log, cpid);
    let (at, ev) = event(&ctx, &l, "stall");
    assert_eq!(at, after, "{ctx}: the stall event after {after} WQEs");
    assert_eq!(num(&ctx, ev, "ms"), 0, "{ctx}: for good");
    // `client` and `server` are guards: dropped here, both are killed.
}

/// (c) TESTNIC_FAIL=50 on a pingpong client: rdma-core's own error line, a non-zero exit, and
/// the NIC's line and log naming WR 50; the server received 49 messages.
#[test]
fn rc_pingpong_with_injected_failure_reports_retry_exceeded() {
    build_nic();
    let nth = 50usize;
    let ctx = format!("ibv_rc_pingpong -n 500, client TESTNIC_FAIL={nth}");
    let (_dir, log) = log_dir("testnic-fail-pingpong");
    let args = strings(&["-g", "0", "-n", "500"]);
    let (server, client) = start_pair(
        &log,
        "ibv_rc_pingpong",
        &args,
        &[],
        &[format!("TESTNIC_FAIL={nth}")],
    );
    let (spid, cpid) = (server.id(), client.id());
    let co = common::wait_timeout(client, LIMIT);
    let err = common::stderr_of(&co);
    assert!(
        !co.status.success(),
        "{ctx}: the client should fail\n{}\n{err}",
        common::stdout_of(&co)
    );
    // rc_pingpong.c: "Failed status %s (%d) for wr_id %d", PINGPONG_SEND_WRID = 2.
    assert!(
        err.contains("Failed status transport retry counter exceeded (12) for wr_id 2"),
        "{ctx}: the program's own words:\n{err}"
    );
    let qpn = pingpong_qpn(&ctx, &common::stdout_of(&co));
    let fail = nic_lines_of(&err, cpid, "fail:");
    let want = format!(
        "testnic: pid {cpid} fail: QP {qpn:#x} WR {nth} (idx {}, SEND) completes with transport retry exceeded (syndrome 0x15, vendor 0x81), then the QP goes to error (TESTNIC_FAIL={nth}) t=",
        nth - 1
    );
    assert!(
        fail.len() == 1 && fail[0].starts_with(&want),
        "{ctx}: want one line '{want}...':\n{err}"
    );
    let lines = nic_lines(&log, cpid);
    let all = wqes(&lines);
    assert_eq!(all.len(), nth, "{ctx}: WQEs taken by the client's NIC");
    for (i, w) in all.iter().enumerate() {
        let status = if i + 1 == nth { 0x15 } else { 0 };
        assert_eq!(
            (w.qpn, w.op.as_str(), w.idx, w.status),
            (qpn, "SEND", i as u32, status),
            "{ctx}: WQE {i}"
        );
    }
    let (_, ev) = event(&ctx, &lines, "fail");
    assert_eq!(
        (
            num(&ctx, ev, "wr"),
            num(&ctx, ev, "idx"),
            num(&ctx, ev, "status")
        ),
        (nth as u64, nth as u64 - 1, 0x15),
        "{ctx}: {ev:?}"
    );
    // The server got the 49 messages before it and answered them; the 50th never left.
    let mut server = server;
    wait_until(
        Duration::from_secs(10),
        "the server's NIC log to show its 49 answers",
        || {
            let s = wqes(&nic_lines(&log, spid)).len();
            if s == nth - 1 {
                Ok(())
            } else {
                Err(format!("{s} WQEs"))
            }
        },
    );
    assert!(
        matches!(server.try_wait(), Ok(None)),
        "{ctx}: the server still waits for message {nth}"
    );
}

/// (d) What TESTNIC_FAIL does to one QP, through plain verbs (tests/testnic/verbs_faults.c, mode
/// `fail`): the failed WR, the flushed ones (unsignaled, later, receives), the QP's state.
#[test]
fn injected_failure_flushes_the_qp_as_hardware_does() {
    build_nic();
    let (_dir, log) = log_dir("testnic-fail-faults");
    let prog = testnic::nic_program("verbs_faults");
    let child = common::spawn(&mut nic_cmd(
        &log,
        &["TESTNIC_FAIL=3".to_string()],
        &prog.display().to_string(),
        &["fail".to_string()],
    ));
    let pid = child.id();
    let o = common::wait_timeout(child, LIMIT);
    let ctx = "verbs_faults fail, TESTNIC_FAIL=3";
    assert_ok(ctx, "verbs_faults", &o);
    let out = common::stdout_of(&o);
    for (case, status, vendor) in [
        ("fail_first_runs", 0, "0x0"),
        ("fail_retry_exceeded", 12, "0x81"),
        ("fail_flush_unsignaled", 5, "0xf9"),
        ("fail_flush_signaled", 5, "0xf9"),
        ("fail_flush_receives", 5, "0xf9"),
        ("fail_flush_later", 5, "0xf9"),
        ("fail_qp_state", 0, "0x0"),
        ("fail_not_sent", 0, "0x0"),
    ] {
        let want = format!("verbs_faults {case} status={status} vendor_err={vendor} ");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&want) && l.ends_with(" ok")),
            "{ctx}: no '{want}... ok' in:\n{out}"
        );
    }
    // The acting process (the parent): two writes ran, the third failed, nothing more was taken.
    let lines = nic_lines(&log, pid);
    let w: Vec<(String, u32, bool)> = wqes(&lines)
        .iter()
        .map(|w| (w.op.clone(), w.status, w.signaled))
        .collect();
    assert_eq!(
        w,
        [
            ("RDMA_WRITE".to_string(), 0, true),
            ("RDMA_WRITE".to_string(), 0, false),
            ("RDMA_WRITE".to_string(), 0x15, true)
        ],
        "{ctx}: the NIC log of pid {pid}"
    );
    let (_, ev) = event(ctx, &lines, "fail");
    assert_eq!(num(ctx, ev, "wr"), 3, "{ctx}: {ev:?}");
}

/// A pingpong pair (50 messages) whose client has `vars`: (client output, client pid).
fn pingpong_with(log: &Path, vars: &[String], client_host: Option<u8>) -> (Output, u32) {
    let args = strings(&["-g", "0", "-n", "50"]);
    let mut cv = vars.to_vec();
    if let Some(h) = client_host {
        cv.push(format!("TESTNIC_HOST={h}"));
    }
    let (server, client) = start_pair(log, "ibv_rc_pingpong", &args, &[], &cv);
    let cpid = client.id();
    let co = common::wait_timeout(client, LIMIT);
    let so = common::wait_timeout(server, LIMIT);
    assert_ok(&format!("{vars:?}"), "server", &so);
    (co, cpid)
}

/// The narrower forms: TESTNIC_STALL_PEER names the peer's host, TESTNIC_STALL=N:MS:QPN one QP;
/// a stall that names another host or QP never starts, one that names this edge does (and lifts).
#[test]
fn stall_limited_to_a_peer_host_or_a_qp() {
    build_nic();
    let (_dir, log) = log_dir("testnic-stall-forms");
    // The client's own host, fresh, so that its first QP is 0x100 (hosts number alike).
    let host = 43u8;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let cases: [(&str, Vec<String>, bool); 4] = [
        (
            "peer host 1 (the server's)",
            strings(&["TESTNIC_STALL=10:300", "TESTNIC_STALL_PEER=1"]),
            true,
        ),
        (
            "peer host 3 (nobody's)",
            strings(&["TESTNIC_STALL=10:300", "TESTNIC_STALL_PEER=3"]),
            false,
        ),
        (
            "QP 0x100 (its own)",
            strings(&["TESTNIC_STALL=10:300:0x100"]),
            true,
        ),
        (
            "QP 0xfff (another)",
            strings(&["TESTNIC_STALL=10:300:0xfff"]),
            false,
        ),
    ];
    for (what, vars, stalls) in cases {
        let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{host}"));
        let ctx = format!("pingpong client {vars:?} ({what})");
        let (co, cpid) = pingpong_with(&log, &vars, Some(host));
        assert_ok(&ctx, "client", &co);
        let err = common::stderr_of(&co);
        let qpn = pingpong_qpn(&ctx, &common::stdout_of(&co));
        assert_eq!(qpn, 0x100, "{ctx}: the first QP of a fresh host");
        let (s, l) = (
            nic_lines_of(&err, cpid, "stall:").len(),
            nic_lines_of(&err, cpid, "stall lifted:").len(),
        );
        let lines = nic_lines(&log, cpid);
        assert_eq!(wqes(&lines).len(), 50, "{ctx}: every message sent");
        if stalls {
            assert_eq!((s, l), (1, 1), "{ctx}: stall and lift lines:\n{err}");
            let (at, _) = event(&ctx, &lines, "stall");
            assert_eq!(at, 10, "{ctx}: stalled after 10 WQEs");
        } else {
            assert_eq!((s, l), (0, 0), "{ctx}: no stall:\n{err}");
            assert!(
                lines.iter().all(|x| matches!(x, NicLine::Wqe(_))),
                "{ctx}: no events in the log"
            );
        }
    }
    let _ = std::fs::remove_file(format!("/dev/shm/testnic-v1-{uid}-h{host}"));
}
