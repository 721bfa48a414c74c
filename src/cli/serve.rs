//! `sigmatop serve`: one per node, long-running. Follows that node's traced processes as `attach`
//! does (same sockets, same ownership checks) and serves their counters on `/metrics`: in the
//! OpenMetrics text format to a scraper that asks for it (Prometheus does), else in Prometheus's
//! text format 0.0.4 (`Accept: text/plain;version=0.0.4`, `*/*`, none). Counters only: it accepts no command, and it listens on
//! loopback unless told otherwise.
//!
//! A process that exits keeps its final counters for `--retention` seconds, so that the last
//! scrape sees its tail; then it leaves the model. By default its counters stay in its series
//! (host, rank, program: `openmetrics::Retired`), which the next job's processes go on counting
//! in; with `--per-process` its series go.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{CliResult, ServeArgs};
use crate::agg::{Model, ProcKey};
use crate::export::openmetrics::{
    Format, MetricsOptions, Retired, encode_with, to_prometheus_text,
};
use crate::live::{LiveSource, ProcessFilter, default_socket_dir};

/// How often the sockets are drained.
const POLL: Duration = Duration::from_millis(50);

/// The processes followed and what those that left had counted.
#[derive(Default)]
struct State {
    model: Model,
    retired: Retired,
}

/// Drops processes that exited more than `retention` ago, their counters kept in `retired`.
/// `gone` remembers when each was first seen exited.
fn prune(
    state: &mut State,
    gone: &mut HashMap<ProcKey, Instant>,
    retention: Duration,
    opts: MetricsOptions,
) {
    let model = &mut state.model;
    let now = Instant::now();
    for (k, p) in &model.processes {
        if p.exited {
            gone.entry(k.clone()).or_insert(now);
        }
    }
    let old: Vec<ProcKey> = gone
        .iter()
        .filter(|(_, t)| now.duration_since(**t) >= retention)
        .map(|(k, _)| k.clone())
        .collect();
    state.retired.retire(model, &old, opts);
    for k in old {
        gone.remove(&k);
        model.processes.remove(&k);
    }
    // Messages are for a person at a terminal; keep a bounded tail.
    let n = model.messages.len();
    if n > 100 {
        model.messages.drain(..n - 100);
    }
}

pub fn serve(args: &ServeArgs) -> CliResult {
    let addr: SocketAddr = args.listen.parse().map_err(|e| {
        format!(
            "--listen {}: {e}: give ADDR:PORT, e.g. 127.0.0.1:9464",
            args.listen
        )
    })?;
    let server = tiny_http::Server::http(addr).map_err(|e| {
        format!(
            "cannot listen on {addr}: {e} (is another sigmatop serve or exporter on that port?)"
        )
    })?;
    if !addr.ip().is_loopback() {
        eprintln!(
            "sigmatop: warning: serving metrics on {addr}, reachable from other hosts; they are counters only, but restrict access with a firewall if that matters"
        );
    }
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    eprintln!(
        "sigmatop: serving http://{addr}/metrics for the traced processes in {}",
        dir.display()
    );
    let state = Arc::new(Mutex::new(State::default()));
    let retention = Duration::from_secs(args.retention_s);
    let opts = MetricsOptions {
        qp_metrics: args.qp_metrics,
        per_process: args.per_process,
    };
    {
        let state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("sigmatop-collect".into())
            .spawn(move || {
                let mut live = LiveSource::new(dir, ProcessFilter::All);
                // Short-lived ranks must be found before they exit: look for new sockets often
                // (a directory read every POLL).
                live.scan_every = POLL;
                let mut gone = HashMap::new();
                loop {
                    if let Ok(mut st) = state.lock() {
                        live.poll(&mut st.model);
                        prune(&mut st, &mut gone, retention, opts);
                    }
                    std::thread::sleep(POLL);
                }
            })
            .map_err(|e| format!("cannot start the collector thread: {e}"))?;
    }
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let resp = match (req.method(), path) {
            (tiny_http::Method::Get, "/metrics") => {
                let accept = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Accept"))
                    .map(|h| h.value.as_str());
                let format = Format::from_accept(accept);
                let text = match state.lock() {
                    Ok(mut st) => {
                        let State { model, retired } = &mut *st;
                        encode_with(model, retired, opts).map_err(|e| e.to_string())
                    }
                    Err(_) => Err("model lock poisoned".to_string()),
                };
                match text {
                    Ok(t) => {
                        let t = match format {
                            Format::OpenMetrics => t,
                            Format::PrometheusText => to_prometheus_text(&t),
                        };
                        let r = tiny_http::Response::from_string(t);
                        match tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            format.content_type().as_bytes(),
                        ) {
                            Ok(h) => r.with_header(h),
                            Err(()) => r,
                        }
                    }
                    Err(e) => tiny_http::Response::from_string(format!("error: {e}\n"))
                        .with_status_code(500),
                }
            }
            (tiny_http::Method::Get, "/") => tiny_http::Response::from_string(
                "sigmatop serve: counters of this node's traced processes at /metrics\n",
            ),
            _ => tiny_http::Response::from_string("not found: this server has /metrics only\n")
                .with_status_code(404),
        };
        let _ = req.respond(resp);
    }
    Ok(0)
}
