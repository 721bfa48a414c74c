//! The model as Prometheus / OpenMetrics counters (`sigmatop serve`'s `/metrics`): names in base
//! units with `_total`, labels kept small (per host, rank and program, and layer; per-QP series
//! only when asked), and node_exporter's `device` / `port` label names on QP series so that a
//! user can divide sigmatop's bytes by the port's own counters (reference §12). Encoded with the
//! `prometheus-client` crate.
//!
//! Series are per host, rank and program by default (issue 39, item 6): a series per process
//! (`pid`) made every job new series, and Prometheus's series without bound. Processes of one
//! (host, rank, program) share a series; a counter is the sum of their counters plus what those
//! that left the model had counted ([`Retired`]), so it only grows as processes come and go.
//! `--per-process` gives a series per process instead (docs/METRICS.md says why it is opt-in).

use std::collections::BTreeMap;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::agg::matrix::UNTRACED;
use crate::agg::{Model, ProcKey, ProcessState};
use crate::event::{Dir, EndpointKind, Layer, Op, layer_names};

use super::series::Labels;
pub use super::series::{MetricsOptions, Series};

/// What processes that left the model (`serve --retention` after their exit) had counted, in
/// their series (host, rank, program): `sigmatop serve` keeps it so that those counters go on
/// growing when the next job's processes take the series over. Its size is the number of such
/// series ever seen on the node, not of processes. Gauges (work outstanding now, processes now)
/// are not kept: a process that left has none. Per QP series (`--qp-metrics`) are not kept
/// either: each job's QPs are series of their own, which go stale with it.
///
/// It also remembers whom each endpoint's peer was: a process's cells of the process matrix stay
/// in the series of that peer after the peer has left the model (they would fall to `untraced`,
/// and the peer's series would seem to reset).
#[derive(Clone, Debug, Default)]
pub struct Retired {
    s: Series,
    peers: PeerMemo,
}

/// Whom an endpoint's peer is, as its series name it.
#[derive(Clone, Debug, PartialEq)]
struct Who {
    host: String,
    pid: u32,
    rank: Option<u32>,
    exe: String,
}

impl Who {
    fn of(k: &ProcKey, p: &ProcessState) -> Who {
        Who {
            host: k.host.clone(),
            pid: k.pid,
            rank: p.identity.rank,
            exe: p.identity.exe.clone(),
        }
    }
}

/// (process, endpoint) → its traced peer, once resolved.
type PeerMemo = std::collections::HashMap<(ProcKey, u32), Who>;

impl Retired {
    /// Keeps the counters of processes `gone` of `model` (before they are removed from it).
    pub fn retire(&mut self, model: &Model, gone: &[ProcKey], opts: MetricsOptions) {
        if gone.is_empty() {
            return;
        }
        if opts.per_process {
            self.peers.retain(|(k, _), _| !gone.contains(k));
            return;
        }
        let opts = MetricsOptions {
            qp_metrics: false,
            ..opts
        };
        for (k, s) in process_series(model, opts, &mut self.peers) {
            if gone.contains(&k) {
                for (key, v) in s.counters {
                    *self.s.counters.entry(key).or_default() += v;
                }
                for (key, v) in s.fcounters {
                    *self.s.fcounters.entry(key).or_default() += v;
                }
            }
        }
        self.peers.retain(|(k, _), _| !gone.contains(k));
    }
}

fn l(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// The labels of a process's series: `host, pid, rank, exe` with `--per-process`, else `host,
/// rank, exe` (no `rank` label without one: no `rank=""` outside MPI).
fn process_labels(k: &ProcKey, p: &ProcessState, opts: MetricsOptions) -> Labels {
    let mut v: Labels = vec![("host".into(), k.host.clone())];
    if opts.per_process {
        v.push(("pid".into(), k.pid.to_string()));
    }
    if let Some(r) = p.identity.rank {
        v.push(("rank".into(), r.to_string()));
    }
    v.push(("exe".into(), p.identity.exe.clone()));
    v
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

/// Each process's samples, in model order: what its own counters and state say. `peers`
/// remembers each endpoint's resolved peer (see [`Retired`]).
fn process_series(
    model: &Model,
    opts: MetricsOptions,
    peers: &mut PeerMemo,
) -> Vec<(ProcKey, Series)> {
    let now = crate::agg::nccl::wall_ns();
    let hang = crate::agg::warnings::hang_ns();
    let traffic = model.traffic();
    let mut out = Vec::with_capacity(traffic.procs.len());
    for (pi, (k, p)) in traffic.procs.iter().enumerate() {
        let mut s = Series::default();
        let base = process_labels(k, p, opts);
        s.gauge(
            "sigmatop_process_info",
            with(
                base.clone(),
                &[
                    ("mode", p.identity.mode().name().to_string()),
                    ("layers", layer_names(p.identity.layers)),
                    ("version", p.identity.version.clone()),
                ],
            ),
            1,
        );
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
                    let lq = with(base.clone(), &[("qpn", format!("0x{qpn:x}"))]);
                    for (queue, n) in [
                        ("send", q.sq_outstanding()),
                        ("receive", q.rq_outstanding()),
                    ] {
                        s.gauge(
                            "sigmatop_qp_outstanding_wrs",
                            with(lq.clone(), &[("queue", queue.into())]),
                            n as i64,
                        );
                    }
                    s.fgauge(
                        "sigmatop_qp_stalled_seconds",
                        lq,
                        q.sq_stalled_ns as f64 / 1e9,
                    );
                }
            }
            for (queue, n) in [("send", sq), ("receive", rq)] {
                s.gauge(
                    "sigmatop_outstanding_wrs",
                    with(base.clone(), &[("queue", queue.into())]),
                    n as i64,
                );
            }
            s.gauge("sigmatop_stalled_qps", base.clone(), stalled);
            for (st, n) in by_status {
                s.count(
                    "sigmatop_error_completions",
                    with(
                        base.clone(),
                        &[("status", crate::queue::status_name(st).to_string())],
                    ),
                    n,
                );
            }
        }
        if let Some(last) = p.last() {
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
                    let lg = with(base.clone(), &[("gpu", gpu)]);
                    if op == Op::GpuDoorbell {
                        s.count("sigmatop_gpu_doorbells", lg, c.ops);
                    } else {
                        s.count(
                            "sigmatop_gpu_wqes",
                            with(lg.clone(), &[("opcode", op.name().to_string())]),
                            c.ops,
                        );
                        s.count("sigmatop_gpu_wqe_bytes", lg, c.bytes);
                    }
                }
                if opts.qp_metrics
                    && let Some(d) = def
                    && matches!(d.kind, EndpointKind::VerbsQp | EndpointKind::DevxQp)
                    && let Some(qpn) = d.qpn
                {
                    let (device, port) = device_port(&d.peer.text);
                    let lq = with(
                        base.clone(),
                        &[
                            ("device", device),
                            ("port", port),
                            ("qpn", format!("0x{qpn:x}")),
                        ],
                    );
                    match op.dir() {
                        Dir::Tx => s.count("sigmatop_qp_tx_bytes", lq, c.bytes),
                        Dir::Rx => s.count("sigmatop_qp_rx_bytes", lq, c.bytes),
                        Dir::None => {}
                    }
                }
                // The process matrix: sends and writes from this process to the endpoint's
                // peer, one-sided reads from the peer to it (what `Model::traffic` counts),
                // in the series of the process whose counters they are.
                if let Some(toward) = op.toward_peer() {
                    let other = match def {
                        Some(d) => {
                            let x = traffic.peers.of(pi as u32, d, p.av_of(c.ep));
                            if x.several {
                                continue;
                            }
                            x.process.unwrap_or(UNTRACED)
                        }
                        None => UNTRACED,
                    };
                    let memo_key = ((*k).clone(), c.ep);
                    let other = match traffic
                        .procs
                        .get(other as usize)
                        .filter(|_| other != UNTRACED)
                    {
                        Some((ok, op_)) => {
                            let w = Who::of(ok, op_);
                            peers.insert(memo_key, w.clone());
                            Some(w)
                        }
                        // A peer that left the model is still who it was.
                        None => peers.get(&memo_key).cloned(),
                    };
                    let me = Who::of(k, p);
                    let lp = if toward {
                        cell_labels(Some(&me), other.as_ref(), opts)
                    } else {
                        cell_labels(other.as_ref(), Some(&me), opts)
                    };
                    if let Some(lp) = lp {
                        s.count("sigmatop_peer_tx_bytes", lp, c.bytes);
                    }
                }
            }
            for ((layer, op), [n, b, pn, pb]) in per_op {
                let lo = with(
                    base.clone(),
                    &[("layer", layer.to_string()), ("op", op.to_string())],
                );
                if n > 0 || b > 0 {
                    s.count("sigmatop_op_calls", lo.clone(), n);
                    s.count("sigmatop_op_bytes", lo.clone(), b);
                }
                // Receives the program posted (buffers handed to the library), apart from
                // those that completed (`sigmatop_op_calls`).
                if pn > 0 {
                    s.count("sigmatop_posted_receives", lo.clone(), pn);
                    s.count("sigmatop_posted_receive_bytes", lo, pb);
                }
            }
            for (layer, [tb, rb, to, ro, er]) in per_layer {
                let ll = with(base.clone(), &[("layer", layer.to_string())]);
                s.count("sigmatop_tx_bytes", ll.clone(), tb);
                s.count("sigmatop_rx_bytes", ll.clone(), rb);
                s.count("sigmatop_tx_ops", ll.clone(), to);
                s.count("sigmatop_rx_ops", ll.clone(), ro);
                s.count("sigmatop_errors", ll, er);
            }
            let d = &last.drops;
            // Per process: host, pid and the reason, as before; else the process's series.
            let ld = if opts.per_process {
                vec![
                    ("host".to_string(), k.host.clone()),
                    ("pid".into(), k.pid.to_string()),
                ]
            } else {
                base.clone()
            };
            for (reason, n) in [
                ("ring_full", d.ring_full),
                ("record_lost", d.record_lost),
                ("live_not_sent", d.live_not_sent),
                ("unparsable_wqes", d.unparsable_wqes),
                ("coalesced_doorbells", d.coalesced_doorbells),
                ("hook_failures", d.hook_failures),
            ] {
                s.count(
                    "sigmatop_events_dropped",
                    with(ld.clone(), &[("reason", reason.into())]),
                    n,
                );
            }
        }
        super::openmetrics_nccl::process_series(k, p, opts, &mut s);
        out.push(((*k).clone(), s));
    }
    out
}

/// The labels of a cell of the process matrix: the sending process's, and its peer's
/// (`peer_host="untraced"` for one that is not traced). With `--per-process` the peer is
/// `peer_host, peer_pid, peer_rank`, else `peer_host, peer_rank, peer_exe`. None for a cell whose
/// sender is not traced.
fn cell_labels(from: Option<&Who>, to: Option<&Who>, opts: MetricsOptions) -> Option<Labels> {
    let f = from?;
    let mut v: Labels = vec![("host".into(), f.host.clone())];
    if opts.per_process {
        v.push(("pid".into(), f.pid.to_string()));
    }
    if let Some(r) = f.rank {
        v.push(("rank".into(), r.to_string()));
    }
    if !opts.per_process {
        v.push(("exe".into(), f.exe.clone()));
    }
    // Labels without a value are left out (Prometheus reads an empty label as absent).
    v.extend(match to {
        Some(t) => {
            let rank = t.rank.map(|r| r.to_string()).unwrap_or_default();
            if opts.per_process {
                l(&[
                    ("peer_host", t.host.clone()),
                    ("peer_pid", t.pid.to_string()),
                    ("peer_rank", rank),
                ])
            } else {
                l(&[
                    ("peer_host", t.host.clone()),
                    ("peer_rank", rank),
                    ("peer_exe", t.exe.clone()),
                ])
            }
        }
        None => l(&[("peer_host", "untraced".into())]),
    });
    Some(v)
}

/// What each family is: its name (without `_total`), its help, and whether it is a counter.
const FAMILIES: &[(&str, &str, bool)] = &[
    (
        "sigmatop_tx_bytes",
        "Payload bytes the process sent (sends, writes, atomics), per RDMA layer",
        true,
    ),
    (
        "sigmatop_rx_bytes",
        "Payload bytes the process received or read, per RDMA layer",
        true,
    ),
    (
        "sigmatop_tx_ops",
        "Send-side operations the provider accepted, per RDMA layer",
        true,
    ),
    (
        "sigmatop_rx_ops",
        "Receive-side operations (receives, reads), per RDMA layer",
        true,
    ),
    (
        "sigmatop_errors",
        "Operations that failed (error completions other than flushes, failed calls), per RDMA layer",
        true,
    ),
    (
        "sigmatop_op_calls",
        "Operations per layer and operation name (tag_send, RDMA_WRITE...); receives count when they complete",
        true,
    ),
    (
        "sigmatop_op_bytes",
        "Payload bytes per layer and operation name (receives: the bytes that arrived)",
        true,
    ),
    (
        "sigmatop_posted_receives",
        "Receive buffers the program posted (tag_recv, RECV, fi_recv...), completed or not",
        true,
    ),
    (
        "sigmatop_posted_receive_bytes",
        "Capacity of the receive buffers the program posted",
        true,
    ),
    (
        "sigmatop_peer_tx_bytes",
        "Bytes the process moved to each peer process (the process matrix; peer_host=\"untraced\" for peers that are not traced)",
        true,
    ),
    (
        "sigmatop_gpu_doorbells",
        "Doorbells rung by GPU kernels (mlx5 devx QPs), per process and CUDA device",
        true,
    ),
    (
        "sigmatop_gpu_wqes",
        "WQEs recovered behind GPU doorbells, per opcode",
        true,
    ),
    (
        "sigmatop_gpu_wqe_bytes",
        "Payload bytes of the WQEs recovered behind GPU doorbells",
        true,
    ),
    (
        "sigmatop_events_dropped",
        "Events or observations sigmatop could not keep, per reason",
        true,
    ),
    (
        "sigmatop_process_info",
        "Traced processes of this host, rank and program (one per process with --per-process): their collection mode, enabled layers and sigmatop version",
        false,
    ),
    (
        "sigmatop_outstanding_wrs",
        "Work requests posted on the process's verbs QPs and not completed, per queue (send, receive)",
        false,
    ),
    (
        "sigmatop_stalled_qps",
        "Verbs QPs with signaled send work outstanding and no completion past the hang threshold (--hang-after)",
        false,
    ),
    (
        "sigmatop_error_completions",
        "Work completions with an error status on the process's verbs QPs, per status (flushed included)",
        true,
    ),
    (
        "sigmatop_qp_outstanding_wrs",
        "Work requests outstanding per QP and queue (send, receive)",
        false,
    ),
    (
        "sigmatop_qp_stalled_seconds",
        "Seconds a QP's send queue has had signaled work outstanding and no completion",
        false,
    ),
    (
        "sigmatop_qp_tx_bytes",
        "Payload bytes sent per QP (device and port as node_exporter names them)",
        true,
    ),
    (
        "sigmatop_qp_rx_bytes",
        "Payload bytes received or read per QP",
        true,
    ),
];

/// The OpenMetrics text of the model (and, by default, what processes that left it counted).
pub fn encode_model(model: &Model, opts: MetricsOptions) -> Result<String, std::fmt::Error> {
    encode_with(model, &mut Retired::default(), opts)
}

/// `encode_model` with the counters of processes that left the model and the peers of those
/// that are in it (`sigmatop serve`).
pub fn encode_with(
    model: &Model,
    retired: &mut Retired,
    opts: MetricsOptions,
) -> Result<String, std::fmt::Error> {
    let mut all = Series::default();
    if !opts.per_process {
        all.add(&retired.s);
    }
    for (_, s) in process_series(model, opts, &mut retired.peers) {
        all.add(&s);
    }
    let mut reg = <Registry>::default();
    for (name, help, counter) in FAMILIES {
        if name.starts_with("sigmatop_qp_") && !opts.qp_metrics {
            continue;
        }
        if *counter {
            let f = Family::<Labels, Counter>::default();
            for (lab, v) in all.counters_of(name) {
                f.get_or_create(lab).inc_by(v);
            }
            reg.register(*name, *help, f);
        } else if *name == "sigmatop_qp_stalled_seconds" {
            let f = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
            for ((n, lab), v) in &all.fgauges {
                if n == name {
                    f.get_or_create(lab).set(*v);
                }
            }
            reg.register(*name, *help, f);
        } else {
            let f = Family::<Labels, Gauge>::default();
            for (lab, v) in all.gauges_of(name) {
                f.get_or_create(lab).set(v);
            }
            reg.register(*name, *help, f);
        }
    }
    super::openmetrics_nccl::register(&all, &mut reg, model_has_nccl(model, &*retired));
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(sorted_series(&out))
}

/// Some process, live or retired, reported NCCL collectives.
fn model_has_nccl(model: &Model, retired: &Retired) -> bool {
    model.processes.values().any(|p| p.nccl.is_some())
        || retired
            .s
            .counters
            .keys()
            .any(|(n, _)| n.starts_with("sigmatop_nccl_"))
}

impl Series {
    pub(crate) fn counters_of<'a>(
        &'a self,
        family: &'a str,
    ) -> impl Iterator<Item = (&'a Labels, u64)> + 'a {
        self.counters
            .iter()
            .filter(move |((n, _), _)| *n == family)
            .map(|((_, l), v)| (l, *v))
    }
    pub(crate) fn fcounters_of<'a>(
        &'a self,
        family: &'a str,
    ) -> impl Iterator<Item = (&'a Labels, f64)> + 'a {
        self.fcounters
            .iter()
            .filter(move |((n, _), _)| *n == family)
            .map(|((_, l), v)| (l, *v))
    }
    pub(crate) fn gauges_of<'a>(
        &'a self,
        family: &'a str,
    ) -> impl Iterator<Item = (&'a Labels, i64)> + 'a {
        self.gauges
            .iter()
            .filter(move |((n, _), _)| *n == family)
            .map(|((_, l), v)| (l, *v))
    }
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
        // By default per host, rank and program: no pid.
        assert!(
            line("sigmatop_tx_bytes_total{host=\"vm\",rank=\"0\",exe=\"moe_demo\",layer=\"ucx\"}")
                .ends_with(" 12902400")
        );
        assert!(line("sigmatop_peer_tx_bytes_total{host=\"vm\",rank=\"0\",exe=\"moe_demo\",peer_host=\"vm\",peer_rank=\"2\",peer_exe=\"moe_demo\"}").ends_with(" 7741440"));
        assert!(text.contains(
            "sigmatop_process_info{host=\"vm\",rank=\"2\",exe=\"moe_demo\",mode=\"simple\""
        ));
        assert!(!text.contains("pid=\""), "{text}");
        // --per-process: a series per process, as before.
        let per = encode_model(
            &m,
            MetricsOptions {
                per_process: true,
                ..Default::default()
            },
        )
        .expect("encodes");
        assert!(per.contains("sigmatop_tx_bytes_total{host=\"vm\",pid=\"6548\",rank=\"0\",exe=\"moe_demo\",layer=\"ucx\"} 12902400"));
        assert!(per.contains("sigmatop_peer_tx_bytes_total{host=\"vm\",pid=\"6548\",rank=\"0\",peer_host=\"vm\",peer_pid=\"6550\",peer_rank=\"2\"} 7741440"));
        assert!(per.contains("sigmatop_process_info{host=\"vm\",pid=\"6550\",rank=\"2\",exe=\"moe_demo\",mode=\"simple\""));
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

    /// Two jobs of the demo in a row on one node: the second's series are the first's, and its
    /// counters go on from the first's (the first's processes left the model, their counters
    /// kept in `Retired`); with `--per-process` each job has series of its own.
    #[test]
    fn a_second_job_counts_on_in_the_first_ones_series() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe");
        let rec = crate::trace::reader::Recording::open(&[dir]).expect("fixture");
        let first = Model::from_recording(&rec);
        let opts = MetricsOptions::default();
        let one = encode_model(&first, opts).expect("encodes");
        // The first job leaves; the second (the same program, new pids) runs.
        let mut retired = Retired::default();
        let keys: Vec<ProcKey> = first.processes.keys().cloned().collect();
        retired.retire(&first, &keys, opts);
        let gap = encode_with(&Model::new(), &mut retired, opts).expect("encodes");
        let mut second = Model::new();
        for (k, p) in &first.processes {
            let mut k2 = k.clone();
            k2.pid += 1000;
            let mut p2 = p.clone();
            p2.identity.pid += 1000;
            second.processes.insert(k2, p2);
        }
        let two = encode_with(&second, &mut retired, opts).expect("encodes");
        let samples = |t: &str| -> Vec<(String, f64)> {
            t.lines()
                .filter(|l| l.starts_with("sigmatop_") && l.contains("_total{"))
                .filter_map(|l| {
                    let (k, v) = l.rsplit_once(' ')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect()
        };
        let (s1, s2) = (samples(&one), samples(&two));
        assert_eq!(
            s1.iter().map(|x| &x.0).collect::<Vec<_>>(),
            s2.iter().map(|x| &x.0).collect::<Vec<_>>(),
            "the same series"
        );
        for ((k, a), (_, b)) in s1.iter().zip(&s2) {
            assert_eq!(*b, 2.0 * a, "{k}: the second job counts on");
        }
        // Between the jobs the counters stand (no fall, which Prometheus reads as a reset).
        let sg = samples(&gap);
        assert_eq!(sg, s1);
        // --per-process: the second job's series are new ones.
        let per = MetricsOptions {
            per_process: true,
            ..Default::default()
        };
        let p1 = encode_model(&first, per).expect("encodes");
        let p2 = encode_model(&second, per).expect("encodes");
        assert!(samples(&p1).iter().all(|(k, _)| !p2.contains(k.as_str())));
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
