//! Counter tracks and samples computed from the recorded snapshots: payload bytes/s per endpoint
//! and per GPU, egress bytes/s per node.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use super::PerfettoSink;
use super::late::Late;
use crate::correlate::Correlation;
use crate::event::{Dir, Op, Snapshot};

impl<W: Write> PerfettoSink<W> {
    /// Counter samples from the snapshots: payload bytes/s per endpoint, egress bytes/s per node.
    pub(super) fn write_counters(&mut self, c: &Correlation) {
        // Per host: (ts, proc, tx rate) for the node counter.
        let mut node_pts: Vec<Vec<(u64, u32, i64)>> = vec![Vec::new(); c.hosts.len()];
        for (pi, p) in c.rec.processes.iter().enumerate() {
            let mut prev: Option<&Snapshot> = None;
            let mut ep_tracks: HashMap<u32, u64> = HashMap::new();
            let mut gpu_tracks: BTreeMap<u32, u64> = BTreeMap::new();
            for s in &p.snapshots {
                let cur = per_ep(s);
                let prev_map = prev.map(per_ep).unwrap_or_default();
                // The first snapshot's rates run from the start of the process's trace.
                let since = prev.map_or(p.identity.start_ns, |q| q.at_ns);
                let dt = if since > 0 {
                    s.at_ns.saturating_sub(since)
                } else {
                    0
                };
                let mut tx_sum = 0i64;
                // Per GPU of this process: the payload rate of its endpoints.
                let mut gpu_sum: BTreeMap<u32, i64> = BTreeMap::new();
                for (ep, (tx, rx)) in &cur {
                    let (ptx, prx) = prev_map.get(ep).copied().unwrap_or((0, 0));
                    let rate = |a: u64, b: u64| -> i64 {
                        if dt == 0 {
                            0
                        } else {
                            (a.saturating_sub(b) as f64 * 1e9 / dt as f64) as i64
                        }
                    };
                    tx_sum += rate(*tx, ptx);
                    let track = match ep_tracks.get(ep) {
                        Some(&t) => t,
                        None => {
                            let parent = self.proc_uuid[pi];
                            let name = format!(
                                "{} bytes/s",
                                self.ep_label
                                    .get(&(pi as u32, *ep))
                                    .cloned()
                                    .unwrap_or_else(|| format!("ep#{ep}"))
                            );
                            let t = self.counter_track(Some(parent), &name);
                            ep_tracks.insert(*ep, t);
                            t
                        }
                    };
                    let value = rate(*tx, ptx) + rate(*rx, prx);
                    if let Some(&g) = self.ep_gpu.get(&(pi as u32, *ep)) {
                        *gpu_sum.entry(g).or_default() += value;
                    }
                    self.push_late(s.at_ns, Late::Counter { track, value });
                }
                for (g, value) in gpu_sum {
                    let track = match gpu_tracks.get(&g) {
                        Some(&t) => t,
                        None => {
                            let parent = self.gpu_track(pi as u32, g);
                            let t = self.counter_track(Some(parent), &format!("GPU {g} bytes/s"));
                            gpu_tracks.insert(g, t);
                            t
                        }
                    };
                    self.push_late(s.at_ns, Late::Counter { track, value });
                }
                if let Some(h) = c.host_of.get(pi) {
                    node_pts[*h as usize].push((s.at_ns, pi as u32, tx_sum));
                }
                prev = Some(s);
            }
        }
        for (h, mut pts) in node_pts.into_iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            pts.sort_unstable();
            let t = self.counter_track(None, &format!("node {} egress bytes/s", c.hosts[h]));
            let mut latest: HashMap<u32, i64> = HashMap::new();
            for (ts, proc, v) in pts {
                latest.insert(proc, v);
                let sum = latest.values().sum();
                self.push_late(
                    ts,
                    Late::Counter {
                        track: t,
                        value: sum,
                    },
                );
            }
        }
    }
}

/// (tx, rx) payload bytes per endpoint in a cumulative snapshot.
fn per_ep(s: &Snapshot) -> BTreeMap<u32, (u64, u64)> {
    let mut m: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for c in &s.counts {
        let e = m.entry(c.ep).or_default();
        match Op::from_u8(c.op).map(|o| o.dir()) {
            Some(Dir::Tx) => e.0 += c.bytes,
            Some(Dir::Rx) => e.1 += c.bytes,
            _ => {}
        }
    }
    m
}
