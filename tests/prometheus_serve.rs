//! `sigmatop serve` scraped by a real Prometheus server (Debian's `prometheus`) while real
//! programs run: a traced ucx_perftest tag_bw pair and a 3-rank Open MPI job over UCX
//! (tests/programs/mpi_pattern.c: rank i sends (i+1)·(j+2)·1000 bytes to rank j). After they end,
//! Prometheus's HTTP query API answers with exact totals: the client's bytes and operations
//! ((n + 1) × size, n + 1 sends: tests/ucx_perftest.rs explains the warm-up), the server's
//! receive count, and every cell of the MPI job's rank matrix
//! (`sigmatop_peer_tx_bytes_total{rank, peer_rank}`). The exited processes' counters are still
//! there: `serve` keeps them for its retention window. The same `/metrics` in Prometheus's text
//! format 0.0.4 (asked with `Accept: text/plain;version=0.0.4`, or no Accept) passes Prometheus's
//! `promtool check metrics` with the same exact totals. That test runs `serve --per-process` (a
//! series per process: it tells the pair's client and server apart by pid); by default series are
//! per host, rank and program, and two MPI jobs in a row make no new series in Prometheus while
//! their counters go on (issue 39, item 6: `two_jobs_in_a_row_make_no_new_series`).
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Bounded;
use common::Trace;

const N: u64 = 3000;
const SIZE: u64 = 16384;
const RANKS: u64 = 3;

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The single value of an instant query, None when the query has no result (yet).
fn query(port: u16, q: &str) -> Option<u64> {
    let body = http_get(port, &format!("/api/v1/query?query={}", urlencode(q)))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let r = v["data"]["result"].as_array()?;
    if r.len() != 1 {
        return None;
    }
    r[0]["value"][1]
        .as_str()?
        .parse::<f64>()
        .ok()
        .map(|f| f as u64)
}

/// Polls `q` until it equals `want` (Prometheus scrapes every second); the last value seen on
/// failure.
fn wait_for(port: u16, q: &str, want: u64) -> Result<(), Option<u64>> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(30) {
        last = query(port, q);
        if last == Some(want) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(last)
}

fn mpi_program(dir: &Path) -> PathBuf {
    let out = dir.join("mpi_pattern");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/mpi_pattern.c");
    let o = Command::new(common::require("mpicc"))
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .output_bounded()
        .expect("mpicc");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    out
}

#[test]
fn prometheus_scrapes_exact_totals_and_the_rank_matrix() {
    let prometheus = common::require("prometheus");
    let perftest = common::require("ucx_perftest");
    common::require("mpirun"); // before anything starts: a missing prerequisite fails at once
    let dir = common::scratch("prometheus");
    let trace = Trace::new("aggregate", &dir);
    let (serve, serve_port) = common::start_server(
        |port| {
            let mut c = Command::new(common::sigmatop_bin());
            c.args([
                "serve",
                "--per-process",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("--socket-dir")
            .arg(&trace.socket_dir);
            c
        },
        Duration::from_secs(10),
    );
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sigmatop\n    static_configs:\n      - targets: ['127.0.0.1:{serve_port}']\n"
        ),
    )
    .expect("config");
    let (prom, prom_port) = common::start_server(
        |port| {
            let mut c = Command::new(&prometheus);
            c.arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
            c
        },
        Duration::from_secs(30),
    );

    // The UCX pair.
    let (s, ucx_port) = common::ucx_perftest_server("tcp", |s| trace.apply(s));
    let mut client = Command::new(&perftest);
    client
        .args(["127.0.0.1", "-p", &ucx_port.to_string(), "-t", "tag_bw"])
        .args(["-n", &N.to_string(), "-s", &SIZE.to_string(), "-w", "1"])
        .env("UCX_TLS", "tcp");
    trace.apply(&mut client);
    let c = common::spawn(&mut client);
    let (co, so) = (
        common::wait_timeout(c, Duration::from_secs(60)),
        common::wait_timeout(s, Duration::from_secs(60)),
    );
    assert!(
        co.status.success() && so.status.success(),
        "ucx_perftest failed"
    );
    let client_pid = co_pid(&trace, "tag_send");

    // The MPI job.
    common::mpirun_traced(
        &trace,
        RANKS as usize,
        common::MPI_OVER_UCX,
        Some("tcp,self"),
        &mpi_program(&dir),
        "the MPI job",
    );

    let sent = (N + 1) * SIZE;
    let checks: Vec<(String, u64)> = {
        let mut v = vec![
            (
                format!("sigmatop_tx_bytes_total{{pid=\"{client_pid}\",layer=\"ucx\"}}"),
                sent,
            ),
            (
                format!("sigmatop_tx_ops_total{{pid=\"{client_pid}\",layer=\"ucx\"}}"),
                N + 1,
            ),
        ];
        for i in 0..RANKS {
            for j in 0..RANKS {
                if i != j {
                    v.push((
                        format!("sigmatop_peer_tx_bytes_total{{rank=\"{i}\",peer_rank=\"{j}\"}}"),
                        (i + 1) * (j + 2) * 1000,
                    ));
                }
            }
        }
        v.push((
            "count(sigmatop_process_info{exe=\"mpi_pattern\"})".into(),
            RANKS,
        ));
        v
    };
    let mut failed = Vec::new();
    for (q, want) in &checks {
        if let Err(got) = wait_for(prom_port, q, *want) {
            failed.push(format!("{q}: want {want}, Prometheus says {got:?}"));
        }
    }
    drop(prom);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let server_pid = co_pid(&trace, "tag_recv");
    check_text_format(serve_port, [client_pid, server_pid], sent, N + 1);
    drop(serve);
}

/// GET `path` with `Accept: accept` (none when None): (Content-Type, body) of a 200 answer.
fn get_accept(port: u16, path: &str, accept: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to serve");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("answer");
    let (head, body) = out.split_once("\r\n\r\n").expect("HTTP answer");
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or_default()
        .to_string();
    (ctype, body.to_string())
}

/// Issue 25, item 14: `Accept: text/plain;version=0.0.4` (or none) gets Prometheus's text format,
/// which Prometheus's own `promtool check metrics` accepts, with the client's exact totals; the
/// Accept header Prometheus sends gets OpenMetrics. ucx_perftest has no rank: no `rank` label
/// (not `rank=""`). Two scrapes of the same state are the same text (series in a stable order).
/// Per operation: the client's `tag_send` calls, the server's posted `tag_recv` buffers (n + 1
/// each, all completed).
fn check_text_format(port: u16, [client_pid, server_pid]: [u32; 2], sent: u64, ops: u64) {
    let promtool = common::require("promtool");
    let (ctype, body) = get_accept(port, "/metrics", Some("text/plain;version=0.0.4"));
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert!(
        !body.contains("# EOF") && !body.contains("rank=\"\""),
        "{body}"
    );
    assert!(
        body.contains("# TYPE sigmatop_tx_bytes_total counter\n"),
        "{body}"
    );
    let line_of = |name: &str, pid: u32, op: &str| {
        body.lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{"))
                    && l.contains(&format!("pid=\"{pid}\""))
                    && l.contains("layer=\"ucx\"")
                    && (op.is_empty() || l.contains(&format!("op=\"{op}\"")))
            })
            .unwrap_or_else(|| panic!("no {name} {op} of pid {pid}:\n{body}"))
            .to_string()
    };
    let line = |name: &str| line_of(name, client_pid, "");
    assert!(line("sigmatop_tx_bytes_total").ends_with(&format!(" {sent}")));
    assert!(line("sigmatop_tx_ops_total").ends_with(&format!(" {ops}")));
    let calls = line_of("sigmatop_op_calls_total", client_pid, "tag_send");
    assert!(calls.ends_with(&format!(" {ops}")), "{calls}");
    let bytes = line_of("sigmatop_op_bytes_total", client_pid, "tag_send");
    assert!(bytes.ends_with(&format!(" {sent}")), "{bytes}");
    let posted = line_of("sigmatop_posted_receives_total", server_pid, "tag_recv");
    assert!(posted.ends_with(&format!(" {ops}")), "{posted}");
    let done = line_of("sigmatop_op_calls_total", server_pid, "tag_recv");
    assert!(done.ends_with(&format!(" {ops}")), "{done}");
    let mut check = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("to promtool");
    let out = common::wait_timeout(check, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        common::stdout_of(&out),
        common::stderr_of(&out)
    );
    let (_, none) = get_accept(port, "/metrics", None);
    assert_eq!(
        none, body,
        "no Accept header: the text format, in the same order"
    );
    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (ctype, om) = get_accept(port, "/metrics", Some(prometheus_accept));
    assert_eq!(
        ctype,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
}

/// The pid of the traced process whose record has `op` traffic.
fn co_pid(trace: &Trace, op: &str) -> u32 {
    common::processes(trace)
        .iter()
        .find(|p| common::op(&common::totals(p), op).0 > 0)
        .map(|p| p.identity.pid)
        .expect("a process with that traffic")
}

/// The sigmatop series Prometheus holds, stale ones too (`/api/v1/series` over all of its data:
/// every series it scraped since it started), by name and labels; None when it does not answer.
fn sigmatop_series(port: u16) -> Option<Vec<String>> {
    let body = http_get(
        port,
        &format!(
            "/api/v1/series?match[]={}&start=0",
            urlencode("{__name__=~\"sigmatop_.+\"}")
        ),
    )?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut out: Vec<String> = v["data"]
        .as_array()?
        .iter()
        .map(|s| s.to_string())
        .collect();
    out.sort();
    Some(out)
}

/// Every fall of a sigmatop counter between two scrapes that Prometheus stored (the range query
/// `{__name__=~"sigmatop_.+_total"}[1h]`: each series's samples in time order), one line each;
/// None when Prometheus does not answer. A fall is what Prometheus reads as a counter reset.
fn counter_falls(port: u16) -> Option<Vec<String>> {
    let q = "{__name__=~\"sigmatop_.+_total\"}[1h]";
    let body = http_get(port, &format!("/api/v1/query?query={}", urlencode(q)))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut falls = Vec::new();
    let mut samples = 0;
    for s in v["data"]["result"].as_array()? {
        let vals: Vec<f64> = s["values"]
            .as_array()?
            .iter()
            .filter_map(|p| p[1].as_str()?.parse().ok())
            .collect();
        samples += vals.len();
        for w in vals.windows(2) {
            if w[1] < w[0] {
                falls.push(format!("{}: {} then {}", s["metric"], w[0], w[1]));
            }
        }
    }
    // A query that matched nothing proves nothing.
    (samples > 0).then_some(falls)
}

/// Issue 39, item 6: by default `serve`'s series are per host, rank and program, not per process.
/// A real Prometheus (scraping every second) scrapes two runs of the same 3-rank MPI job one after
/// the other (`serve --retention 2`: the first job's processes leave the model before the second
/// starts): after the second, every cell of the rank matrix counts both jobs (2 × (i+1)·(j+2)·1000)
/// in the same series; Prometheus holds as many sigmatop series after the second job as after the
/// first (with a `pid` label each job made new ones: unbounded cardinality), and no sigmatop
/// counter ever fell in any sample Prometheus stored (a counter that fell when a job's processes
/// left would read as a reset, and `rate()` would be wrong).
#[test]
fn two_jobs_in_a_row_make_no_new_series() {
    let prometheus = common::require("prometheus");
    common::require("mpirun");
    let dir = common::scratch("prometheus-jobs");
    let trace = Trace::new("aggregate", &dir);
    let (serve, serve_port) = common::start_server(
        |port| {
            let mut c = Command::new(common::sigmatop_bin());
            c.args(["serve", "--retention", "2"])
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .arg("--socket-dir")
                .arg(&trace.socket_dir);
            c
        },
        Duration::from_secs(10),
    );
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sigmatop\n    static_configs:\n      - targets: ['127.0.0.1:{serve_port}']\n"
        ),
    )
    .expect("config");
    let (prom, prom_port) = common::start_server(
        |port| {
            let mut c = Command::new(&prometheus);
            c.arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
            c
        },
        Duration::from_secs(30),
    );
    let prog = mpi_program(&dir);
    // Prometheus scrapes serve before the first job starts.
    if let Err(got) = wait_for(prom_port, "up{job=\"sigmatop\"}", 1) {
        panic!("Prometheus does not scrape serve: up = {got:?}");
    }
    let mut series: Vec<Vec<String>> = Vec::new();
    let mut failed = Vec::new();
    for job in 1..=2u64 {
        common::mpirun_traced(
            &trace,
            RANKS as usize,
            common::MPI_OVER_UCX,
            Some("tcp,self"),
            &prog,
            &format!("MPI job {job}"),
        );
        for i in 0..RANKS {
            for j in (0..RANKS).filter(|&j| j != i) {
                let q = format!(
                    "sigmatop_peer_tx_bytes_total{{exe=\"mpi_pattern\",rank=\"{i}\",peer_rank=\"{j}\"}}"
                );
                if let Err(got) = wait_for(prom_port, &q, job * (i + 1) * (j + 2) * 1000) {
                    failed.push(format!(
                        "job {job}: {q}: Prometheus says {got:?}; serve's /metrics:\n{}",
                        http_get(serve_port, "/metrics").unwrap_or_default()
                    ));
                }
            }
        }
        // Its processes, while serve keeps them (--retention).
        let info = "count(sigmatop_process_info{exe=\"mpi_pattern\"})";
        if let Err(got) = wait_for(prom_port, info, RANKS) {
            failed.push(format!("job {job}: {info}: Prometheus says {got:?}"));
        }
        // No series of a process: no pid label anywhere.
        let m = http_get(serve_port, "/metrics").unwrap_or_default();
        if m.contains("pid=\"") {
            failed.push(format!("job {job}: a pid label in\n{m}"));
        }
        // The job's processes leave the model (--retention 2) before the next one starts:
        // their `sigmatop_process_info` goes stale in Prometheus.
        let left = Instant::now();
        while query(prom_port, info).is_some() && left.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(n) = query(prom_port, info) {
            failed.push(format!(
                "job {job}: {info} is still {n} 30 s after the job ended (--retention 2)"
            ));
        }
        series.push(sigmatop_series(prom_port).unwrap_or_default());
    }
    // No counter fell at any scrape: every sample Prometheus stored of every sigmatop counter,
    // series by series, in scrape order.
    let falls = counter_falls(prom_port);
    drop(prom);
    drop(serve);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    match falls {
        Some(f) => assert!(
            f.is_empty(),
            "sigmatop counters fell between scrapes:\n{}",
            f.join("\n")
        ),
        None => panic!("Prometheus did not answer the range query of the sigmatop counters"),
    }
    let (first, second) = (&series[0], &series[1]);
    assert!(
        !first.is_empty() && first.len() == second.len(),
        "sigmatop series in Prometheus after the first job: {}, after the second: {}\nnew with the second:\n{}",
        first.len(),
        second.len(),
        second
            .iter()
            .filter(|s| !first.contains(s))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
