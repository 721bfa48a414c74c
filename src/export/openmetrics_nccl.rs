//! The NCCL collectives of the live model as OpenMetrics series (`sigmatop serve`), in base
//! units: per process, communicator and collective (function, algorithm, protocol) the
//! collectives completed, their bytes and seconds, and those open now; per process what the NCCL
//! plugin could not keep. Kept apart from `openmetrics` (which registers them with the rest) so
//! that the verbs series and these change independently.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::agg::Model;
use crate::nccl::format::{self, ALGOS, FUNCS, PROTOS};

type Labels = Vec<(String, String)>;

/// Registers the NCCL series of `model` (none when no process reported NCCL collectives).
pub fn register(model: &Model, reg: &mut Registry) {
    if !model.processes.values().any(|p| p.nccl.is_some()) {
        return;
    }
    let count = Family::<Labels, Counter>::default();
    let bytes = Family::<Labels, Counter>::default();
    let seconds = Family::<Labels, Counter<f64>>::default();
    let open = Family::<Labels, Gauge>::default();
    let lost = Family::<Labels, Counter>::default();
    let size_count = Family::<Labels, Counter>::default();
    let size_bytes = Family::<Labels, Counter>::default();
    let size_seconds = Family::<Labels, Counter<f64>>::default();
    for (k, p) in &model.processes {
        let Some(n) = &p.nccl else { continue };
        let proc_labels = |more: &[(&str, String)]| -> Labels {
            let mut l: Labels = vec![
                ("host".into(), k.host.clone()),
                ("pid".into(), k.pid.to_string()),
            ];
            l.extend(more.iter().map(|(a, b)| (a.to_string(), b.clone())));
            l
        };
        for (reason, v) in [
            ("queue_full", n.dropped_records),
            ("event_type_not_read", n.unknown_events),
            ("untracked", n.untracked),
        ] {
            lost.get_or_create(&proc_labels(&[("reason", reason.into())]))
                .inc_by(v);
        }
        for c in &n.comms {
            for r in &c.rows {
                let p2p = r.algo == 255 && r.proto == 255;
                let mut func = format::name(FUNCS, r.func).to_string();
                if r.to_self {
                    func.push_str(" (self)");
                }
                let l = proc_labels(&[
                    ("rank", c.rank.to_string()),
                    ("nranks", c.nranks.to_string()),
                    ("comm", format!("{:016x}", c.comm_id)),
                    ("collective", func),
                    (
                        "algo",
                        if p2p { "" } else { format::name(ALGOS, r.algo) }.into(),
                    ),
                    (
                        "proto",
                        if p2p {
                            ""
                        } else {
                            format::name(PROTOS, r.proto)
                        }
                        .into(),
                    ),
                ]);
                count.get_or_create(&l).inc_by(r.count);
                bytes.get_or_create(&l).inc_by(r.bytes);
                seconds.get_or_create(&l).inc_by(r.time_ns as f64 / 1e9);
                open.get_or_create(&l).set(r.open as i64);
            }
            let Some(k) = p.nccl_calls.as_ref().and_then(|k| {
                k.comms
                    .iter()
                    .find(|x| x.comm_id == c.comm_id && x.rank == c.rank)
            }) else {
                continue;
            };
            let comm_labels = |call: &str, more: &[(&str, String)]| {
                let mut v = vec![
                    ("rank", c.rank.to_string()),
                    ("nranks", c.nranks.to_string()),
                    ("comm", format!("{:016x}", c.comm_id)),
                    ("collective", call.to_string()),
                ];
                v.extend(more.iter().cloned());
                proc_labels(&v)
            };
            // Calls NCCL made of point-to-point parts (AlltoAll, Gather, Scatter, Group).
            for r in &k.api_rows {
                let l = comm_labels(
                    format::func_name(r.func),
                    &[("algo", String::new()), ("proto", String::new())],
                );
                count.get_or_create(&l).inc_by(r.count);
                bytes.get_or_create(&l).inc_by(r.bytes);
                seconds.get_or_create(&l).inc_by(r.time_ns as f64 / 1e9);
                open.get_or_create(&l).set(r.open as i64);
            }
            for z in &k.sizes {
                let l = comm_labels(format::func_name(z.func), &[("size", z.bucket.to_string())]);
                size_count.get_or_create(&l).inc_by(z.count);
                size_bytes.get_or_create(&l).inc_by(z.bytes);
                size_seconds
                    .get_or_create(&l)
                    .inc_by(z.time_ns as f64 / 1e9);
            }
        }
    }
    reg.register(
        "sigmatop_nccl_collectives",
        "NCCL collectives and point-to-point calls completed, per process, communicator and collective (function, algorithm, protocol)",
        count,
    );
    reg.register(
        "sigmatop_nccl_collective_bytes",
        "Bytes of the NCCL calls completed (NCCL's count times the datatype size)",
        bytes,
    );
    reg.register(
        "sigmatop_nccl_collective_seconds",
        "Seconds in the NCCL calls completed (from the host call, or the previous call's end when later, to the last proxy operation's end)",
        seconds,
    );
    reg.register(
        "sigmatop_nccl_collectives_open",
        "NCCL calls started and not completed now",
        open,
    );
    reg.register(
        "sigmatop_nccl_calls_by_size",
        "NCCL calls completed as the user made them, per process, communicator, call and message size (size: the power of two at or above the call's bytes)",
        size_count,
    );
    reg.register(
        "sigmatop_nccl_call_bytes_by_size",
        "Bytes of those calls (NCCL's count times the datatype size)",
        size_bytes,
    );
    reg.register(
        "sigmatop_nccl_call_seconds_by_size",
        "Seconds in those calls (from the host call, or the previous call's end when later, to the last proxy operation's end)",
        size_seconds,
    );
    reg.register(
        "sigmatop_nccl_events_lost",
        "NCCL profiler records the plugin could not keep (queue full), events of types it does not read, events naming calls it never saw start",
        lost,
    );
}
