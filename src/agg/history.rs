//! Series over the reference timeline up to a view time: total bandwidth per sample, and GPU
//! doorbell rates with their distributions and the latest decoded doorbells.
//!
//! GPU-initiated doorbells (op `doorbell` of the mlx5 layer) are read from the sampled events with
//! this layout: a `doorbell` event carries the producer index in `aux`; the WQE events that follow
//! it on the same endpoint (`RDMA_WRITE`, `RDMA_READ`, `ATOMIC`, `SEND`, `OTHER` of the mlx5 layer)
//! carry their bytes, remote address in `addr` and rkey in `aux`. Without such events the doorbell
//! series have no interval distribution and no decoded doorbells.

use std::collections::{BTreeMap, HashMap};

use super::at::is_gpu_wqe;
use super::model::{Model, ProcKey};
use super::window::{ProcAt, Window, idx_at, per_s, reference};
use crate::event::{Event, Op};

/// Samples in the bandwidth history and the doorbell rate history.
pub const SPARK_SAMPLES: usize = 120;
/// Latest decoded doorbells kept.
pub const DOORBELL_RECORDS: usize = 200;

/// Sample times of the reference timeline that end at `t` (at most SPARK_SAMPLES + 1).
pub fn sample_times(model: &Model, t: u64) -> Vec<u64> {
    let Some(r) = reference(model) else {
        return Vec::new();
    };
    let Some(end) = idx_at(&r.history, t) else {
        return Vec::new();
    };
    let begin = end.saturating_sub(SPARK_SAMPLES);
    r.history.times(begin..end + 1).collect()
}

/// Total (tx, rx) bytes/s between consecutive `times`, oldest first.
pub fn bandwidth(model: &Model, times: &[u64]) -> Vec<(f64, f64)> {
    if times.len() < 2 {
        return Vec::new();
    }
    let mut cum = vec![(0u64, 0u64); times.len()];
    for p in model.processes.values() {
        let h = &p.history;
        // Walk the sample times and the history together (both ascending).
        let mut i = idx_at(h, times[0]).unwrap_or(0);
        let mut seen = false;
        for (j, tj) in times.iter().enumerate() {
            while i + 1 < h.len() && h.at_ns(i + 1) <= *tj {
                i += 1;
            }
            if i >= h.len() || h.at_ns(i) > *tj {
                continue;
            }
            let s = h.tx_rx(i);
            // The first sample of a process seen from its start (snapshot 0) counts from zero; one
            // first seen later (an attach to a running process) counts from itself: the bytes
            // before it moved over an interval nobody observed, and would make a spike.
            if !seen && h.seq(i) != 0 {
                for c in &mut cum[..j] {
                    c.0 += s.0;
                    c.1 += s.1;
                }
            }
            seen = true;
            cum[j].0 += s.0;
            cum[j].1 += s.1;
        }
    }
    (1..times.len())
        .map(|j| {
            let dt = times[j].saturating_sub(times[j - 1]);
            (
                per_s(cum[j].0.saturating_sub(cum[j - 1].0), dt),
                per_s(cum[j].1.saturating_sub(cum[j - 1].1), dt),
            )
        })
        .collect()
}

/// p50 / p90 / p99 / max of a distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

fn percentiles(h: &hdrhistogram::Histogram<u64>) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    Some(Percentiles {
        p50: h.value_at_quantile(0.5) as f64,
        p90: h.value_at_quantile(0.9) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        max: h.max() as f64,
    })
}

/// The doorbells of one GPU (or of one QP that names no GPU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DoorbellSeries {
    pub host: String,
    pub gpu: Option<u32>,
    /// The QP, when the series is per QP.
    pub qpn: Option<u32>,
    /// Doorbells/s between consecutive sample times, oldest first.
    pub rate_history: Vec<f64>,
    pub rate_now: f64,
    /// Time between consecutive sampled doorbells, ns.
    pub interval_ns: Option<Percentiles>,
    /// Distribution of the per-sample rates inside the window.
    pub rate_percentiles: Option<Percentiles>,
}

/// One decoded doorbell with the WQEs recovered behind it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DoorbellRecord {
    /// Seconds since the earliest process start.
    pub time_s: f64,
    pub host: String,
    pub gpu: u32,
    pub qpn: u32,
    /// Producer index the doorbell announced.
    pub pi: u32,
    /// Opcode of the first WQE (None: no WQE seen for it yet: recovery off, not sampled, or
    /// still batched).
    pub op: Option<u8>,
    pub bytes: u64,
    pub raddr: u64,
    pub rkey: u32,
    pub wqes: u32,
}

/// Doorbell series key (host, GPU, QPN when per QP) → the endpoints that ring.
type DoorbellGroups<'a> = BTreeMap<(String, Option<u32>, Option<u32>), Vec<(&'a ProcKey, u32)>>;

/// Doorbell series per GPU (or per QP when the QP has no GPU) over `times`.
pub fn doorbell_series(
    model: &Model,
    procs: &[ProcAt],
    t: u64,
    times: &[u64],
    window: Window,
) -> Vec<DoorbellSeries> {
    let db = Op::GpuDoorbell as u8;
    // Which endpoints ring doorbells, grouped by series.
    let mut groups: DoorbellGroups = BTreeMap::new();
    for a in procs {
        for (ep, es) in a.eps.iter() {
            if es.tot.doorbells > 0 {
                let def = a.p.endpoints.get(&ep);
                let gpu = def.and_then(|d| d.gpu);
                let qpn = if gpu.is_none() {
                    Some(def.and_then(|d| d.qpn).unwrap_or(ep))
                } else {
                    None
                };
                groups
                    .entry((a.key.host.clone(), gpu, qpn))
                    .or_default()
                    .push((a.key, ep));
            }
        }
    }
    let window_from = window
        .seconds()
        .map(|s| t.saturating_sub(s * 1_000_000_000));
    let mut out = Vec::with_capacity(groups.len());
    for ((host, gpu, qpn), members) in groups {
        // Cumulative doorbells at each sample time.
        let mut cum = vec![0u64; times.len()];
        // When a relay sends the counters every few ticks (entries known by their totals
        // alone), the counters at a sample are those of the whole snapshot before it: the time
        // of that snapshot at each sample (the latest among the members), and whether any
        // member was read so.
        let mut whole_ns = vec![0u64; times.len()];
        let mut reduced = false;
        let mut intervals = hdrhistogram::Histogram::<u64>::new(3).ok();
        for (key, ep) in &members {
            let Some(p) = model.processes.get(*key) else {
                continue;
            };
            // The snapshot at each sample time, and the doorbells counted in each of those (one
            // walk through the history).
            let at: Vec<Option<usize>> = times.iter().map(|tj| idx_at(&p.history, *tj)).collect();
            let (lo, hi) = at
                .iter()
                .flatten()
                .fold((usize::MAX, 0), |(lo, hi), &i| (lo.min(i), hi.max(i)));
            let mut rung = vec![0u64; hi.saturating_sub(lo) + 1];
            if lo <= hi {
                p.history.walk(lo, hi, |i, counts| {
                    rung[i - lo] = counts
                        .iter()
                        .filter(|c| c.ep == *ep && c.op == db)
                        .map(|c| c.ops)
                        .sum::<u64>();
                });
            }
            for (c, i) in cum.iter_mut().zip(&at) {
                if let Some(i) = i {
                    *c += rung[i - lo];
                }
            }
            for (w, i) in whole_ns.iter_mut().zip(&at) {
                if let Some(i) = *i {
                    reduced |= !p.history.is_full(i);
                    if let Some(f) = p.history.full_at(i) {
                        *w = (*w).max(p.history.at_ns(f));
                    }
                }
            }
            // Inter-doorbell intervals from the sampled events (at or before t).
            let mut prev: Option<u64> = None;
            for e in p.recent.iter().filter(|e| e.ep == *ep && e.op == db) {
                let ns = p.clock.to_real_ns(e.tsc);
                if ns > t {
                    break;
                }
                if let (Some(pv), Some(h)) = (prev, intervals.as_mut())
                    && ns >= pv
                {
                    let _ = h.record((ns - pv).max(1));
                }
                prev = Some(ns);
            }
        }
        let rate_history: Vec<f64> = if reduced {
            // The rate over each step between whole snapshots, held until the next one (not
            // nothing, then all of it in one sample).
            let mut last = 0.0;
            (1..times.len())
                .map(|j| {
                    if whole_ns[j] > whole_ns[j - 1] {
                        last = per_s(
                            cum[j].saturating_sub(cum[j - 1]),
                            whole_ns[j] - whole_ns[j - 1],
                        );
                    }
                    last
                })
                .collect()
        } else {
            (1..times.len())
                .map(|j| {
                    per_s(
                        cum[j].saturating_sub(cum[j - 1]),
                        times[j].saturating_sub(times[j - 1]),
                    )
                })
                .collect()
        };
        let mut rates = hdrhistogram::Histogram::<u64>::new(3).ok();
        if let Some(h) = rates.as_mut() {
            for j in 1..times.len() {
                if window_from.is_none_or(|f| times[j] > f) {
                    let _ = h.record(rate_history[j - 1].round() as u64);
                }
            }
        }
        out.push(DoorbellSeries {
            host,
            gpu,
            qpn,
            rate_now: rate_history.last().copied().unwrap_or(0.0),
            rate_history,
            interval_ns: intervals.as_ref().and_then(percentiles),
            rate_percentiles: rates.as_ref().and_then(percentiles),
        });
    }
    out
}

/// The latest decoded doorbells (with the WQE events after each) at or before `t`, oldest first.
pub fn recent_doorbells(model: &Model, procs: &[ProcAt], t: u64) -> Vec<DoorbellRecord> {
    let start = model.first_start_ns();
    let mut recs: Vec<DoorbellRecord> = Vec::new();
    for a in procs {
        let p = a.p;
        // The preload stamps the WQEs it recovers for a doorbell with that doorbell's time and
        // endpoint, and emits them in batches after later doorbells: (endpoint, tsc) is the key.
        let mut by_doorbell: HashMap<(u32, u64), usize> = HashMap::new();
        for e in p.recent.iter() {
            let ns = p.clock.to_real_ns(e.tsc);
            if ns > t {
                continue;
            }
            if e.op == Op::GpuDoorbell as u8 {
                let def = p.endpoints.get(&e.ep);
                by_doorbell.insert((e.ep, e.tsc), recs.len());
                recs.push(DoorbellRecord {
                    time_s: ns.saturating_sub(start) as f64 / 1e9,
                    host: a.key.host.clone(),
                    gpu: def.and_then(|d| d.gpu).unwrap_or(0),
                    qpn: def.and_then(|d| d.qpn).unwrap_or(e.ep),
                    pi: e.aux,
                    ..Default::default()
                });
            } else if is_gpu_wqe(e.op)
                && let Some(&i) = by_doorbell.get(&(e.ep, e.tsc))
            {
                add_wqe(&mut recs[i], e);
            }
        }
    }
    recs.sort_by(|x, y| x.time_s.total_cmp(&y.time_s));
    let drop = recs.len().saturating_sub(DOORBELL_RECORDS);
    recs.drain(..drop);
    recs
}

fn add_wqe(r: &mut DoorbellRecord, e: &Event) {
    if r.wqes == 0 {
        r.op = Some(e.op);
        r.raddr = e.addr;
        r.rkey = e.aux;
    }
    r.wqes += 1;
    r.bytes += e.bytes;
}
