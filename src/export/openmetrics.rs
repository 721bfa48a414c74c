//! The model as Prometheus / OpenMetrics counters (`sigmatop serve`'s `/metrics`): names in base
//! units with `_total`, labels kept small (per process and layer; per-QP series only when asked),
//! and node_exporter's `device` / `port` label names on QP series so that a user can divide
//! sigmatop's bytes by the port's own counters (reference §12). Encoded with the
//! `prometheus-client` crate. Counters are cumulative since each process started; a process is a
//! series of its own (`pid`), so a restarted rank starts new series instead of resetting one.

use std::collections::BTreeMap;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::agg::matrix::UNTRACED;
use crate::agg::{Model, ProcKey, ProcessState};
use crate::event::{Dir, EndpointKind, Layer, Op, layer_names};

/// What to expose.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsOptions {
    /// Also one series per QP (`sigmatop_qp_*`): many series on a large job.
    pub qp_metrics: bool,
}

type Labels = Vec<(String, String)>;

fn counters() -> Family<Labels, Counter> {
    Family::default()
}

/// `host, pid, rank, exe` of a process (no `rank` label without one: no `rank=""` outside MPI).
fn process_labels(k: &ProcKey, p: &ProcessState) -> Labels {
    let mut l: Labels = vec![
        ("host".into(), k.host.clone()),
        ("pid".into(), k.pid.to_string()),
    ];
    if let Some(r) = p.identity.rank {
        l.push(("rank".into(), r.to_string()));
    }
    l.push(("exe".into(), p.identity.exe.clone()));
    l
}

fn with(mut l: Labels, more: &[(&str, String)]) -> Labels {
    l.extend(more.iter().map(|(k, v)| (k.to_string(), v.clone())));
    l
}

/// `local DEV:PORT` from the text of a verbs QP's RTR update ("… | local mlx5_0:1 guid …").
fn device_port(peer_text: &str) -> (String, String) {
    let Some(rest) = peer_text.split("local ").nth(1) else {
        return (String::new(), String::new());
    };
    let word = rest.split_whitespace().next().unwrap_or("");
    match word.rsplit_once(':') {
        Some((d, p)) => (d.to_string(), p.to_string()),
        None => (word.to_string(), String::new()),
    }
}

/// The OpenMetrics text of the model.
pub fn encode_model(model: &Model, opts: MetricsOptions) -> Result<String, std::fmt::Error> {
    let tx_bytes = counters();
    let rx_bytes = counters();
    let tx_ops = counters();
    let rx_ops = counters();
    let errors = counters();
    let peer_tx = counters();
    let doorbells = counters();
    let wqes = counters();
    let wqe_bytes = counters();
    let dropped = counters();
    let info = Family::<Labels, Gauge>::default();
    let qp_tx = counters();
    let qp_rx = counters();
    let op_calls = counters();
    let op_bytes = counters();
    let posted = counters();
    let posted_bytes = counters();
    let q_out = Family::<Labels, Gauge>::default();
    let q_stalled = Family::<Labels, Gauge>::default();
    let q_errors = counters();
    let qp_out = Family::<Labels, Gauge>::default();
    let qp_stalled_s = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let now = crate::agg::nccl::wall_ns();
    let hang = crate::agg::warnings::hang_ns();

    let traffic = model.traffic();
    for (k, p) in &traffic.procs {
        let base = process_labels(k, p);
        info.get_or_create(&with(
            base.clone(),
            &[
                ("mode", p.identity.mode().name().to_string()),
                ("layers", layer_names(p.identity.layers)),
                ("version", p.identity.version.clone()),
            ],
        ))
        .set(1);
        // Outstanding work of its verbs QPs (docs/COUNTS.md, "Outstanding work per QP"), at
        // the scrape: send and receive WRs outstanding, QPs stalled at the hang threshold,
        // error completions by status.
        if let Some(qs) = &p.queues {
            let (mut sq, mut rq, mut stalled) = (0u64, 0u64, 0i64);
            let mut by_status: BTreeMap<u8, u64> = BTreeMap::new();
            for q in &qs.queues {
                let q = crate::agg::stalls::queue_at(q, qs.at_ns, now.max(qs.at_ns));
                sq += q.sq_outstanding();
                rq += q.rq_outstanding();
                let is_stalled = q.stalled(hang) && !p.exited;
                stalled += i64::from(is_stalled);
                for &(st, n) in &q.errors {
                    *by_status.entry(st).or_default() += n;
                }
                if opts.qp_metrics
                    && let Some(qpn) = p.endpoints.get(&q.ep).and_then(|d| d.qpn)
                {
                    let l = with(base.clone(), &[("qpn", format!("0x{qpn:x}"))]);
                    qp_out
                        .get_or_create(&with(l.clone(), &[("queue", "send".into())]))
                        .set(q.sq_outstanding() as i64);
                    qp_out
                        .get_or_create(&with(l.clone(), &[("queue", "receive".into())]))
                        .set(q.rq_outstanding() as i64);
                    qp_stalled_s
                        .get_or_create(&l)
                        .set(q.sq_stalled_ns as f64 / 1e9);
                }
            }
            for (queue, n) in [("send", sq), ("receive", rq)] {
                q_out
                    .get_or_create(&with(base.clone(), &[("queue", queue.into())]))
                    .set(n as i64);
            }
            q_stalled.get_or_create(&base).set(stalled);
            for (st, n) in by_status {
                q_errors
                    .get_or_create(&with(
                        base.clone(),
                        &[("status", crate::queue::status_name(st).to_string())],
                    ))
                    .inc_by(n);
            }
        }
        let Some(last) = p.last() else { continue };
        // Per layer: the layer of each operation.
        let mut per_layer: BTreeMap<&str, [u64; 5]> = BTreeMap::new();
        // Per operation (summed over endpoints): a bounded set of names per layer.
        let mut per_op: BTreeMap<(&str, &str), [u64; 4]> = BTreeMap::new();
        for c in &last.counts {
            let Some(op) = Op::from_u8(c.op) else {
                continue;
            };
            let o = per_op.entry((op.layer().name(), op.name())).or_default();
            o[0] += c.ops;
            o[1] += c.bytes;
            o[2] += c.posted;
            o[3] += c.posted_bytes;
            let e = per_layer.entry(op.layer().name()).or_default();
            e[4] += c.errors;
            match op.dir() {
                Dir::Tx => {
                    e[0] += c.bytes;
                    e[2] += c.ops;
                }
                Dir::Rx => {
                    e[1] += c.bytes;
                    e[3] += c.ops;
                }
                Dir::None => {}
            }
            let def = p.endpoints.get(&c.ep);
            if op.layer() == Layer::Mlx5 {
                let gpu = def
                    .and_then(|d| d.gpu)
                    .map(|g| g.to_string())
                    .unwrap_or_default();
                let l = with(base.clone(), &[("gpu", gpu)]);
                if op == Op::GpuDoorbell {
                    doorbells.get_or_create(&l).inc_by(c.ops);
                } else {
                    wqes.get_or_create(&with(l.clone(), &[("opcode", op.name().to_string())]))
                        .inc_by(c.ops);
                    wqe_bytes.get_or_create(&l).inc_by(c.bytes);
                }
            }
            if opts.qp_metrics
                && let Some(d) = def
                && matches!(d.kind, EndpointKind::VerbsQp | EndpointKind::DevxQp)
                && let Some(qpn) = d.qpn
            {
                let (device, port) = device_port(&d.peer.text);
                let l = with(
                    base.clone(),
                    &[
                        ("device", device),
                        ("port", port),
                        ("qpn", format!("0x{qpn:x}")),
                    ],
                );
                match op.dir() {
                    Dir::Tx => qp_tx.get_or_create(&l).inc_by(c.bytes),
                    Dir::Rx => qp_rx.get_or_create(&l).inc_by(c.bytes),
                    Dir::None => 0,
                };
            }
        }
        for ((layer, op), [n, b, pn, pb]) in per_op {
            let l = with(
                base.clone(),
                &[("layer", layer.to_string()), ("op", op.to_string())],
            );
            if n > 0 || b > 0 {
                op_calls.get_or_create(&l).inc_by(n);
                op_bytes.get_or_create(&l).inc_by(b);
            }
            // Receives the program posted (buffers handed to the library), apart from those
            // that completed (`sigmatop_op_calls`).
            if pn > 0 {
                posted.get_or_create(&l).inc_by(pn);
                posted_bytes.get_or_create(&l).inc_by(pb);
            }
        }
        for (layer, [tb, rb, to, ro, er]) in per_layer {
            let l = with(base.clone(), &[("layer", layer.to_string())]);
            tx_bytes.get_or_create(&l).inc_by(tb);
            rx_bytes.get_or_create(&l).inc_by(rb);
            tx_ops.get_or_create(&l).inc_by(to);
            rx_ops.get_or_create(&l).inc_by(ro);
            errors.get_or_create(&l).inc_by(er);
        }
        let d = &last.drops;
        for (reason, n) in [
            ("ring_full", d.ring_full),
            ("record_lost", d.record_lost),
            ("live_not_sent", d.live_not_sent),
            ("unparsable_wqes", d.unparsable_wqes),
            ("coalesced_doorbells", d.coalesced_doorbells),
            ("hook_failures", d.hook_failures),
        ] {
            let l = vec![
                ("host".to_string(), k.host.clone()),
                ("pid".into(), k.pid.to_string()),
                ("reason".into(), reason.to_string()),
            ];
            dropped.get_or_create(&l).inc_by(n);
        }
    }
    // The live process matrix; a peer that is not traced has peer_host="untraced".
    for (&(from, to), &bytes) in &traffic.cells {
        let (Some((fk, fp)), peer) = (
            traffic.procs.get(from as usize),
            traffic.procs.get(to as usize),
        ) else {
            continue;
        };
        let (ph, pp, pr) = match peer {
            Some((pk, pps)) if to != UNTRACED => (
                pk.host.clone(),
                pk.pid.to_string(),
                pps.identity.rank.map(|r| r.to_string()).unwrap_or_default(),
            ),
            _ => ("untraced".into(), String::new(), String::new()),
        };
        let mut l = vec![
            ("host".to_string(), fk.host.clone()),
            ("pid".into(), fk.pid.to_string()),
        ];
        if let Some(r) = fp.identity.rank {
            l.push(("rank".into(), r.to_string()));
        }
        // Labels without a value are left out (Prometheus reads an empty label as absent).
        l.extend(
            [("peer_host", ph), ("peer_pid", pp), ("peer_rank", pr)]
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v)),
        );
        peer_tx.get_or_create(&l).inc_by(bytes);
    }

    let mut reg = <Registry>::default();
    reg.register(
        "sigmatop_tx_bytes",
        "Payload bytes the process sent (sends, writes, atomics), per RDMA layer",
        tx_bytes,
    );
    reg.register(
        "sigmatop_rx_bytes",
        "Payload bytes the process received or read, per RDMA layer",
        rx_bytes,
    );
    reg.register(
        "sigmatop_tx_ops",
        "Send-side operations the provider accepted, per RDMA layer",
        tx_ops,
    );
    reg.register(
        "sigmatop_rx_ops",
        "Receive-side operations (receives, reads), per RDMA layer",
        rx_ops,
    );
    reg.register(
        "sigmatop_errors",
        "Operations that failed (error completions other than flushes, failed calls), per RDMA layer",
        errors,
    );
    reg.register(
        "sigmatop_op_calls",
        "Operations per layer and operation name (tag_send, RDMA_WRITE...); receives count when they complete",
        op_calls,
    );
    reg.register(
        "sigmatop_op_bytes",
        "Payload bytes per layer and operation name (receives: the bytes that arrived)",
        op_bytes,
    );
    reg.register(
        "sigmatop_posted_receives",
        "Receive buffers the program posted (tag_recv, RECV, fi_recv...), completed or not",
        posted,
    );
    reg.register(
        "sigmatop_posted_receive_bytes",
        "Capacity of the receive buffers the program posted",
        posted_bytes,
    );
    reg.register(
        "sigmatop_peer_tx_bytes",
        "Bytes the process moved to each peer process (the process matrix; peer_host=\"untraced\" for peers that are not traced)",
        peer_tx,
    );
    reg.register(
        "sigmatop_gpu_doorbells",
        "Doorbells rung by GPU kernels (mlx5 devx QPs), per process and CUDA device",
        doorbells,
    );
    reg.register(
        "sigmatop_gpu_wqes",
        "WQEs recovered behind GPU doorbells, per opcode",
        wqes,
    );
    reg.register(
        "sigmatop_gpu_wqe_bytes",
        "Payload bytes of the WQEs recovered behind GPU doorbells",
        wqe_bytes,
    );
    reg.register(
        "sigmatop_events_dropped",
        "Events or observations sigmatop could not keep, per reason",
        dropped,
    );
    reg.register(
        "sigmatop_process_info",
        "A traced process: its program, rank, collection mode, enabled layers and sigmatop version",
        info,
    );
    reg.register(
        "sigmatop_outstanding_wrs",
        "Work requests posted on the process's verbs QPs and not completed, per queue (send, receive)",
        q_out,
    );
    reg.register(
        "sigmatop_stalled_qps",
        "Verbs QPs with signaled send work outstanding and no completion past the hang threshold (--hang-after)",
        q_stalled,
    );
    reg.register(
        "sigmatop_error_completions",
        "Work completions with an error status on the process's verbs QPs, per status (flushed included)",
        q_errors,
    );
    if opts.qp_metrics {
        reg.register(
            "sigmatop_qp_outstanding_wrs",
            "Work requests outstanding per QP and queue (send, receive)",
            qp_out,
        );
        reg.register(
            "sigmatop_qp_stalled_seconds",
            "Seconds a QP's send queue has had signaled work outstanding and no completion",
            qp_stalled_s,
        );
        reg.register(
            "sigmatop_qp_tx_bytes",
            "Payload bytes sent per QP (device and port as node_exporter names them)",
            qp_tx,
        );
        reg.register(
            "sigmatop_qp_rx_bytes",
            "Payload bytes received or read per QP",
            qp_rx,
        );
    }
    super::openmetrics_nccl::register(model, &mut reg);
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(sorted_series(&out))
}

/// The exposition formats `/metrics` speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// Prometheus's text format, `text/plain; version=0.0.4`.
    PrometheusText,
}

impl Format {
    /// What a scraper's `Accept` header asks for: OpenMetrics when it names it (Prometheus does,
    /// first), else the Prometheus text format (what `text/plain;version=0.0.4`, `*/*` and no
    /// header at all get, as from client_golang's exporters).
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Each metric family's samples sorted (the encoder writes them in hash order): the same model
/// gives the same text, and series of one process stay together.
fn sorted_series(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut samples: Vec<&str> = Vec::new();
    let flush = |samples: &mut Vec<&str>, out: &mut String| {
        samples.sort_unstable();
        for s in samples.drain(..) {
            out.push_str(s);
            out.push('\n');
        }
    };
    for line in om.lines() {
        if line.starts_with('#') {
            flush(&mut samples, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            samples.push(line);
        }
    }
    flush(&mut samples, &mut out);
    out
}

/// The OpenMetrics text of `encode_model` in Prometheus's text format 0.0.4: a counter family
/// is named as its samples (`sigmatop_tx_bytes_total`), no `# UNIT` and no `# EOF`, and HELP
/// keeps only the escapes that format has (`\\`, `\n`).
pub fn to_prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    // Family name → its samples' name when it is a counter.
    let mut counters = std::collections::HashSet::new();
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            counters.insert(name.to_string());
        }
    }
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(p);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                if p == "# HELP " {
                    out.push_str(&tail.replace("\\\"", "\""));
                } else {
                    out.push_str(tail);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_and_port_from_the_rtr_text() {
        assert_eq!(
            device_port("qpn 0x11 gid ::1 lid 0 | local mlx5_0:1 guid 00 qpn 0x12 gid - mtu 1024"),
            ("mlx5_0".into(), "1".into())
        );
        assert_eq!(device_port("tcp 10.0.0.1"), (String::new(), String::new()));
    }

    #[test]
    fn the_demo_recording_as_metrics() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe");
        let rec = crate::trace::reader::Recording::open(&[dir]).expect("fixture");
        let m = Model::from_recording(&rec);
        let text = encode_model(&m, MetricsOptions::default()).expect("encodes");
        assert!(text.ends_with("# EOF\n"));
        // Rank 2 receives three times what the others get: 7.74 MB of tag_send from each of the
        // three others (demo: 120 steps).
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("no {needle} in\n{text}"))
                .to_string()
        };
        assert!(line("sigmatop_tx_bytes_total{host=\"vm\",pid=\"6548\",rank=\"0\",exe=\"moe_demo\",layer=\"ucx\"}").ends_with(" 12902400"));
        assert!(line("sigmatop_peer_tx_bytes_total{host=\"vm\",pid=\"6548\",rank=\"0\",peer_host=\"vm\",peer_pid=\"6550\",peer_rank=\"2\"}").ends_with(" 7741440"));
        assert!(text.contains("sigmatop_process_info{host=\"vm\",pid=\"6550\",rank=\"2\",exe=\"moe_demo\",mode=\"simple\""));
        assert!(
            !text.contains("sigmatop_qp_tx_bytes"),
            "per-QP series only when asked"
        );
        // The same model, the same text (samples sorted within each family).
        for _ in 0..5 {
            assert_eq!(
                encode_model(&m, MetricsOptions::default()).expect("encodes"),
                text
            );
        }
        let plain = to_prometheus_text(&text);
        assert!(
            plain.contains("# TYPE sigmatop_tx_bytes_total counter\n"),
            "{plain}"
        );
        assert!(
            !plain.contains("# EOF") && !plain.contains("# UNIT"),
            "{plain}"
        );
        assert_eq!(
            plain.lines().filter(|l| !l.starts_with('#')).count(),
            text.lines().filter(|l| !l.starts_with('#')).count()
        );
    }

    #[test]
    fn accept_headers_pick_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        for a in [Some("text/plain;version=0.0.4"), Some("*/*"), None] {
            assert_eq!(Format::from_accept(a), Format::PrometheusText, "{a:?}");
        }
    }
}
