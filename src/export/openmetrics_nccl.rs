//! The NCCL collectives of the live model as OpenMetrics series (`sigmatop serve`), in base
//! units: per host, program and rank in the communicator (per process and communicator with
//! `--per-process`) and collective (function, algorithm, protocol) the collectives completed,
//! their bytes and seconds, and those open now; what the NCCL plugin could not keep. Kept apart from `openmetrics` (which registers them with the rest) so
//! that the verbs series and these change independently.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::series::{Labels, MetricsOptions, Series};
use crate::agg::{ProcKey, ProcessState};
use crate::nccl::format::{self, ALGOS, FUNCS, PROTOS};

/// The NCCL samples of one process into `s`: per communicator and collective with
/// `--per-process` (`host, pid, rank, nranks, comm, ...`), else per host, program and rank in the
/// communicator (`host, exe, rank, nranks, ...`: a communicator's id, like a pid, is new in every
/// job).
pub fn process_series(k: &ProcKey, p: &ProcessState, opts: MetricsOptions, s: &mut Series) {
    let Some(n) = &p.nccl else { return };
    let proc_labels = |more: &[(&str, String)]| -> Labels {
        let mut l: Labels = vec![("host".into(), k.host.clone())];
        if opts.per_process {
            l.push(("pid".into(), k.pid.to_string()));
        } else {
            l.push(("exe".into(), p.identity.exe.clone()));
        }
        l.extend(more.iter().map(|(a, b)| (a.to_string(), b.clone())));
        l
    };
    for (reason, v) in [
        ("queue_full", n.dropped_records),
        ("event_type_not_read", n.unknown_events),
        ("untracked", n.untracked),
    ] {
        s.count(
            "sigmatop_nccl_events_lost",
            proc_labels(&[("reason", reason.into())]),
            v,
        );
    }
    for c in &n.comms {
        for r in &c.rows {
            let p2p = r.algo == 255 && r.proto == 255;
            let mut func = format::name(FUNCS, r.func).to_string();
            if r.to_self {
                func.push_str(" (self)");
            }
            let mut more = vec![
                ("rank", c.rank.to_string()),
                ("nranks", c.nranks.to_string()),
            ];
            if opts.per_process {
                more.push(("comm", format!("{:016x}", c.comm_id)));
            }
            more.extend([
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
            let l = proc_labels(&more);
            s.count("sigmatop_nccl_collectives", l.clone(), r.count);
            s.count("sigmatop_nccl_collective_bytes", l.clone(), r.bytes);
            s.fcount(
                "sigmatop_nccl_collective_seconds",
                l.clone(),
                r.time_ns as f64 / 1e9,
            );
            s.gauge("sigmatop_nccl_collectives_open", l, r.open as i64);
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
            ];
            if opts.per_process {
                v.push(("comm", format!("{:016x}", c.comm_id)));
            }
            v.push(("collective", call.to_string()));
            v.extend(more.iter().cloned());
            proc_labels(&v)
        };
        // Calls NCCL made of point-to-point parts (AlltoAll, Gather, Scatter, Group).
        for r in &k.api_rows {
            let l = comm_labels(
                format::func_name(r.func),
                &[("algo", String::new()), ("proto", String::new())],
            );
            s.count("sigmatop_nccl_collectives", l.clone(), r.count);
            s.count("sigmatop_nccl_collective_bytes", l.clone(), r.bytes);
            s.fcount(
                "sigmatop_nccl_collective_seconds",
                l.clone(),
                r.time_ns as f64 / 1e9,
            );
            s.gauge("sigmatop_nccl_collectives_open", l, r.open as i64);
        }
        for z in &k.sizes {
            let l = comm_labels(format::func_name(z.func), &[("size", z.bucket.to_string())]);
            s.count("sigmatop_nccl_calls_by_size", l.clone(), z.count);
            s.count("sigmatop_nccl_call_bytes_by_size", l.clone(), z.bytes);
            s.fcount(
                "sigmatop_nccl_call_seconds_by_size",
                l,
                z.time_ns as f64 / 1e9,
            );
        }
    }
}

/// Registers the NCCL series of `all` (none when no process reported NCCL collectives).
pub fn register(all: &Series, reg: &mut Registry, any: bool) {
    if !any {
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
    for (l, v) in all.counters_of("sigmatop_nccl_collectives") {
        count.get_or_create(l).inc_by(v);
    }
    for (l, v) in all.counters_of("sigmatop_nccl_collective_bytes") {
        bytes.get_or_create(l).inc_by(v);
    }
    for (l, v) in all.fcounters_of("sigmatop_nccl_collective_seconds") {
        seconds.get_or_create(l).inc_by(v);
    }
    for (l, v) in all.gauges_of("sigmatop_nccl_collectives_open") {
        open.get_or_create(l).set(v);
    }
    for (l, v) in all.counters_of("sigmatop_nccl_events_lost") {
        lost.get_or_create(l).inc_by(v);
    }
    for (l, v) in all.counters_of("sigmatop_nccl_calls_by_size") {
        size_count.get_or_create(l).inc_by(v);
    }
    for (l, v) in all.counters_of("sigmatop_nccl_call_bytes_by_size") {
        size_bytes.get_or_create(l).inc_by(v);
    }
    for (l, v) in all.fcounters_of("sigmatop_nccl_call_seconds_by_size") {
        size_seconds.get_or_create(l).inc_by(v);
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
