//! GPU-driven QPs that stopped ringing (issue 40 item 3): a GPU kernel that stops putting shows
//! no error anywhere (no call fails, NCCL's and NVSHMEM's host side see nothing), only its QPs'
//! doorbells standing still while the process goes on. sigmatop counts every doorbell, so it can
//! say, per process and GPU, since when none rang, and which GPU stopped first.
//!
//! A GPU's QPs are stopped when every QP of it that rang doorbells (and is not destroyed, closed
//! or in error: the failed-operations and QP-failed warnings say those) has rung none for at
//! least the threshold, while its process still reports. The time of the last doorbell is the
//! snapshot in which its counter last rose (refined by a sampled doorbell event of that QP when
//! there is one inside that snapshot's interval), so the first GPU to stop is told apart from
//! those that stopped waiting for it one snapshot later.
//!
//! A fact, not a verdict: a kernel that finished its work and a kernel that waits forever look
//! alike from the doorbells alone (the completions are polled by the GPU). The warning says how
//! long and which GPU first; the user's program, NCCL's own state and the other warnings say why.

use std::collections::BTreeMap;

use super::at::ModelAt;
pub use super::gpu_stop::GpuStop;
use super::window::idx_at;
use crate::event::Op;

/// The warnings' texts for `stops` (as [`gpu_stops`] orders them, the first to stop first):
/// "no GPU doorbell from softhost1 r1 GPU0 in 4.1s (QP 0x1a +3): the first GPU to stop" for the
/// first when it stopped strictly before every other, "... in 3.9s (QP 0x12 +3): 0.2s after
/// softhost1 r1 GPU0" for the others then. Stops that cannot be told apart (their last doorbells
/// in one snapshot, none sampled) claim no order. Each pairs with its short form for a status
/// line.
pub fn texts(stops: &[GpuStop]) -> Vec<(String, String)> {
    let Some(first) = stops.first() else {
        return Vec::new();
    };
    let ordered = stops.len() > 1 && stops[1..].iter().all(|s| s.last_ns > first.last_ns);
    stops
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let head = format!(
                "no GPU doorbell from {} in {}{:.1}s ({})",
                s.who(),
                if s.at_least { "over " } else { "" },
                s.quiet_ns as f64 / 1e9,
                s.qps_text()
            );
            let long = if !ordered {
                head
            } else if i == 0 {
                format!("{head}: the first GPU to stop")
            } else {
                format!(
                    "{head}: {:.1}s after {}",
                    s.last_ns.saturating_sub(first.last_ns) as f64 / 1e9,
                    first.who()
                )
            };
            let short = format!(
                "GPU doorbells stopped {} {:.1}s{}",
                s.who(),
                s.quiet_ns as f64 / 1e9,
                if i == 0 && ordered { " (first)" } else { "" }
            );
            (long, short)
        })
        .collect()
}

/// A QP state that takes it out of the judgement: gone, or failed (said elsewhere).
fn out_of_play(state: Option<&String>) -> bool {
    state.is_some_and(|s| {
        s == "destroyed" || s == "closed" || s.starts_with("ERR") || s.starts_with("SQE")
    })
}

/// How far back the last doorbell is looked for, in snapshots, at most (17 minutes at the default
/// 250 ms; then the QP counts as having stopped at the oldest snapshot searched, and the text
/// says "over": a lower bound on how long it is quiet).
const SEARCH_BACK: usize = 1 << 12;

/// [`gpu_stops`], computed once per view time for the first threshold asked (the warning and the
/// doorbell view of one frame read the same), again for another.
pub fn gpu_stops_cached<'a>(at: &'a ModelAt, threshold_ns: u64) -> std::borrow::Cow<'a, [GpuStop]> {
    use std::borrow::Cow;
    let (ns, v) = at
        .gpu_stops_memo
        .get_or_init(|| (threshold_ns, gpu_stops(at, threshold_ns)));
    if *ns == threshold_ns {
        Cow::Borrowed(v.as_slice())
    } else {
        Cow::Owned(gpu_stops(at, threshold_ns))
    }
}

/// Every process's GPU whose doorbells stopped for at least `threshold_ns` at the view time, the
/// first to stop first.
pub fn gpu_stops(at: &ModelAt, threshold_ns: u64) -> Vec<GpuStop> {
    let db = Op::GpuDoorbell as u8;
    // Per (process, GPU or QP): the QPs that rang, and whether any rings now.
    #[derive(Default)]
    struct Group {
        ringing: bool,
        quiet: Vec<u32>,
    }
    let mut groups: BTreeMap<(u32, Option<u32>, Option<u32>), Group> = BTreeMap::new();
    for e in &at.endpoints {
        if e.tot.doorbells == 0 || !e.is_gpu_qp() {
            continue;
        }
        let a = &at.procs[e.proc as usize];
        if !super::stalls::reporting(at, e.proc as usize) || out_of_play(a.p.ep_state.get(&e.ep)) {
            continue;
        }
        let gpu = e.def.and_then(|d| d.gpu);
        let qpn = if gpu.is_none() {
            Some(e.def.and_then(|d| d.qpn).unwrap_or(e.ep))
        } else {
            None
        };
        let g = groups.entry((e.proc, gpu, qpn)).or_default();
        if e.doorbells_per_s > 0.0 {
            g.ringing = true;
        } else {
            g.quiet.push(e.ep);
        }
    }
    groups.retain(|_, g| !g.ringing && !g.quiet.is_empty());
    if groups.is_empty() {
        return Vec::new();
    }
    // The last doorbell of each quiet QP, one search per process.
    let mut by_proc: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for ((pi, _, _), g) in &groups {
        by_proc.entry(*pi).or_default().extend(&g.quiet);
    }
    let mut last: BTreeMap<(u32, u32), (u64, bool)> = BTreeMap::new();
    for (pi, eps) in by_proc {
        let p = at.procs[pi as usize].p;
        for (ep, ns, exact) in last_doorbells(p, &eps, db, at.t) {
            last.insert((pi, ep), (ns, exact));
        }
    }
    let mut out = Vec::new();
    for ((pi, gpu, _), g) in groups {
        let a = &at.procs[pi as usize];
        // The QP that rang last: the GPU stopped when it did.
        let Some((ep, (last_ns, exact))) = g
            .quiet
            .iter()
            .filter_map(|ep| last.get(&(pi, *ep)).map(|v| (*ep, *v)))
            .max_by(|x, y| {
                x.1.0.cmp(&y.1.0).then_with(|| {
                    let q = |ep: u32| a.p.endpoints.get(&ep).and_then(|d| d.qpn);
                    q(y.0).cmp(&q(x.0))
                })
            })
        else {
            continue;
        };
        let quiet_ns = at.t.saturating_sub(last_ns);
        if quiet_ns < threshold_ns {
            continue;
        }
        out.push(GpuStop {
            proc: pi,
            host: a.key.host.clone(),
            rank: a.p.identity.rank,
            pid: a.key.pid,
            gpu,
            qpn: a.p.endpoints.get(&ep).and_then(|d| d.qpn),
            ep,
            qps: g.quiet.len() as u32,
            last_ns,
            quiet_ns,
            at_least: !exact,
        });
    }
    out.sort_by(|x, y| x.last_ns.cmp(&y.last_ns).then(x.proc.cmp(&y.proc)));
    out
}

/// For each of `eps` of process `p`: when its doorbell counter last rose at or before `t` (the
/// snapshot's time, or a sampled doorbell event of it inside that snapshot's interval, which is
/// closer), and whether that is the time (false: it rose before the oldest snapshot searched,
/// whose time is then a bound). Searches back from `t` in growing steps, so a recent stop costs a
/// few snapshots.
fn last_doorbells(p: &super::ProcessState, eps: &[u32], db: u8, t: u64) -> Vec<(u32, u64, bool)> {
    let h = &p.history;
    let Some(hi) = idx_at(h, t) else {
        return Vec::new();
    };
    let count = |counts: &[crate::event::OpCount], ep: u32| -> u64 {
        counts
            .iter()
            .filter(|c| c.ep == ep && c.op == db)
            .map(|c| c.ops)
            .sum()
    };
    // The snapshot index at which each QP's counter last rose (None: not found yet).
    let mut found: Vec<Option<usize>> = vec![None; eps.len()];
    let mut span = 16usize;
    let mut lo = hi;
    while lo > 0 && found.iter().any(Option::is_none) && hi - lo < SEARCH_BACK {
        let from = hi.saturating_sub(span).max(hi.saturating_sub(SEARCH_BACK));
        let mut series: Vec<Vec<u64>> = vec![Vec::with_capacity(lo - from + 1); eps.len()];
        h.walk(from, lo, |_, counts| {
            for (k, ep) in eps.iter().enumerate() {
                series[k].push(count(counts, *ep));
            }
        });
        for (k, s) in series.iter().enumerate() {
            if found[k].is_some() {
                continue;
            }
            // The last rise inside [from, lo]: index j with s[j] > s[j-1].
            if let Some(j) = (1..s.len()).rev().find(|&j| s[j] > s[j - 1]) {
                found[k] = Some(from + j);
            }
        }
        lo = from;
        span *= 4;
    }
    let floor = h.at_ns(lo);
    eps.iter()
        .zip(found)
        .map(|(ep, j)| {
            match j {
                Some(j) => {
                    let (before, after) = (h.at_ns(j - 1), h.at_ns(j));
                    // A sampled doorbell inside (before, after] says when, closer.
                    let ns = p
                        .recent
                        .iter()
                        .filter(|e| e.ep == *ep && e.op == db)
                        .map(|e| p.clock.to_real_ns(e.tsc))
                        .filter(|ns| *ns > before && *ns <= after)
                        .max()
                        .unwrap_or(after);
                    (*ep, ns, true)
                }
                // It rang before the oldest snapshot searched (or before the first one).
                None => (*ep, floor, false),
            }
        })
        .collect()
}

/// A stopped GPU as the log keys it: (host, pid, GPU, QPN when it names no GPU).
type StopKey = (String, u32, Option<u32>, Option<u32>);

/// Says GPUs whose doorbells stop as they stop and again when they ring, for a log (`sigmatop
/// run --headless`): one line when a GPU stops, one when it rings again.
#[derive(Debug, Default)]
pub struct GpuStopWatch {
    /// Each stopped GPU → (who, its last doorbell ns).
    shown: BTreeMap<StopKey, (String, u64)>,
}

impl GpuStopWatch {
    /// The lines to print at view time `at.t`.
    pub fn check(&mut self, at: &ModelAt, threshold_ns: u64) -> Vec<String> {
        let stops = gpu_stops_cached(at, threshold_ns);
        let mut lines = Vec::new();
        let mut now = BTreeMap::new();
        for (s, (text, _)) in stops.iter().zip(texts(&stops)) {
            let key: StopKey = (
                s.host.clone(),
                s.pid,
                s.gpu,
                if s.gpu.is_none() { s.qpn } else { None },
            );
            match self.shown.remove(&key) {
                Some(v) => {
                    now.insert(key, v);
                }
                None => {
                    lines.push(format!("⚠ {text}"));
                    now.insert(key, (s.who(), s.last_ns));
                }
            }
        }
        for (key, (who, last)) in std::mem::take(&mut self.shown) {
            let (host, pid, gpu, qpn) = &key;
            let on = |e: &&super::at::EndpointAt| {
                let a = &at.procs[e.proc as usize];
                a.key.host == *host
                    && a.key.pid == *pid
                    && match gpu {
                        Some(g) => e.def.and_then(|d| d.gpu) == Some(*g),
                        None => e.def.and_then(|d| d.qpn) == *qpn,
                    }
            };
            let proc = at
                .procs
                .iter()
                .position(|a| a.key.host == *host && a.key.pid == *pid);
            // A process that stopped reporting for a while (a loaded machine, a stopped process)
            // says nothing of its GPU: the stop stands until it is heard from again.
            if proc.is_some_and(|i| !at.procs[i].p.exited && at.silent_ns(i as u32).is_some()) {
                now.insert(key, (who, last));
                continue;
            }
            let rings = at
                .endpoints
                .iter()
                .filter(on)
                .any(|e| e.doorbells_per_s > 0.0);
            lines.push(if rings {
                format!(
                    "✓ {who}: doorbells again after {:.1}s",
                    at.t.saturating_sub(last) as f64 / 1e9
                )
            } else {
                format!("✓ {who}: no longer judged (its QPs ended or failed, or its process did)")
            });
        }
        self.shown = now;
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::{AtOptions, Model, ProcKey};
    use crate::event::{
        EndpointDef, EndpointKind, EndpointUpdate, Identity, Layer, OpCount, Snapshot,
    };
    use crate::wire::Frame;

    const S: u64 = 1_000_000_000;
    const Q: u64 = S / 4;
    const T0: u64 = 1_700_000_000 * S;

    /// Process `rank` on host `node{rank}` with two devx QPs on GPU0 (QPNs 0x10*rank+1, +2) and
    /// 250 ms snapshots for 12 s; QP k rings 100 doorbells a snapshot while `rings(k, s)` (s the
    /// snapshot, 1..=48).
    fn rank(m: &mut Model, rank: u32, rings: impl Fn(u32, u64) -> bool) -> ProcKey {
        let k = ProcKey {
            host: format!("node{rank}"),
            pid: 100 + rank,
            start_ns: 0,
        };
        m.apply(
            &k,
            Frame::hello(Identity {
                host: k.host.clone(),
                pid: k.pid,
                rank: Some(rank),
                start_ns: T0,
                ..Default::default()
            }),
        );
        m.apply(
            &k,
            Frame::Endpoints(
                (1..=2)
                    .map(|id| EndpointDef {
                        id,
                        layer: Layer::Mlx5,
                        kind: EndpointKind::DevxQp,
                        label: format!("qp {id}"),
                        transport: "RC".into(),
                        peer: Default::default(),
                        qpn: Some(0x10 * rank + id),
                        gpu: Some(0),
                        created_ns: T0,
                    })
                    .collect(),
            ),
        );
        let mut n = [0u64; 3];
        for s in 1..=48u64 {
            for id in 1..=2u32 {
                if rings(id, s) {
                    n[id as usize] += 100;
                }
            }
            m.apply(
                &k,
                Frame::Snapshot(Snapshot {
                    at_ns: T0 + s * Q,
                    seq: s,
                    counts: (1..=2u32)
                        .map(|id| OpCount {
                            ep: id,
                            op: Op::GpuDoorbell as u8,
                            ops: n[id as usize],
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }),
            );
        }
        k
    }

    fn at(m: &Model, t: u64) -> ModelAt<'_> {
        ModelAt::new(
            m,
            &AtOptions {
                at: Some(t),
                ..Default::default()
            },
        )
    }

    /// r1's kernel stops putting after 3 s; r0's QPs ring until 4 s (waiting for r1), then
    /// stop too; r2 rings throughout. Judged at 2 s: r1 first, r0 one second later, r2 never.
    #[test]
    fn the_first_gpu_to_stop_is_named_first() {
        let mut m = Model::new();
        rank(&mut m, 0, |_, s| s <= 16);
        rank(&mut m, 1, |_, s| s <= 12);
        rank(&mut m, 2, |_, _| true);
        let v = at(&m, T0 + 10 * S);
        let stops = gpu_stops(&v, 2 * S);
        let who: Vec<(String, u64, u32)> =
            stops.iter().map(|s| (s.who(), s.quiet_ns, s.qps)).collect();
        assert_eq!(
            who,
            [
                ("node1 r1 GPU0".to_string(), 7 * S, 2),
                ("node0 r0 GPU0".to_string(), 6 * S, 2)
            ]
        );
        // The QP that rang last (both did: the lower QPN) is named.
        assert_eq!(stops[0].qpn, Some(0x11));
        let t = texts(&stops);
        assert_eq!(
            t[0].0,
            "no GPU doorbell from node1 r1 GPU0 in 7.0s (QP 0x11 +1): the first GPU to stop"
        );
        assert_eq!(
            t[1].0,
            "no GPU doorbell from node0 r0 GPU0 in 6.0s (QP 0x1 +1): 1.0s after node1 r1 GPU0"
        );
        assert_eq!(t[0].1, "GPU doorbells stopped node1 r1 GPU0 7.0s (first)");
        // Below the threshold: nothing; at 5.5 s r1 alone (2.5 s), r0 only 1.5 s quiet.
        assert!(gpu_stops(&at(&m, T0 + 4 * S), 2 * S).is_empty());
        let early = gpu_stops(&at(&m, T0 + 11 * S / 2), 2 * S);
        assert_eq!(early.len(), 1, "{early:?}");
        assert_eq!(early[0].quiet_ns, 5 * S / 2);
        assert_eq!(
            texts(&early)[0].0,
            "no GPU doorbell from node1 r1 GPU0 in 2.5s (QP 0x11 +1)"
        );
    }

    /// A GPU whose doorbells all came before the first snapshot kept: quiet at least since it,
    /// said "over".
    #[test]
    fn a_stop_older_than_the_history_is_a_bound() {
        let mut m = Model::new();
        rank(&mut m, 3, |_, s| s == 1);
        let stops = gpu_stops(&at(&m, T0 + 10 * S), 2 * S);
        assert_eq!(stops.len(), 1);
        assert!(stops[0].at_least);
        assert_eq!(stops[0].quiet_ns, 10 * S - Q);
        assert_eq!(
            texts(&stops)[0].0,
            "no GPU doorbell from node3 r3 GPU0 in over 9.8s (QP 0x31 +1)"
        );
    }

    /// Two GPUs whose last doorbells fell in one snapshot (none sampled): no order is claimed.
    #[test]
    fn stops_that_cannot_be_told_apart_claim_no_order() {
        let mut m = Model::new();
        rank(&mut m, 0, |_, s| s <= 12);
        rank(&mut m, 1, |_, s| s <= 12);
        let stops = gpu_stops(&at(&m, T0 + 10 * S), 2 * S);
        assert_eq!(stops.len(), 2);
        let t = texts(&stops);
        assert_eq!(
            t.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
            [
                "no GPU doorbell from node0 r0 GPU0 in 7.0s (QP 0x1 +1)",
                "no GPU doorbell from node1 r1 GPU0 in 7.0s (QP 0x11 +1)"
            ]
        );
        assert!(!t[0].1.contains("first"), "{}", t[0].1);
    }

    /// A GPU one of whose QPs still rings is not stopped; a destroyed QP and one in error are not
    /// judged (the others' warnings say those), so a GPU whose only quiet QP is gone is not.
    #[test]
    fn a_gpu_that_still_rings_or_whose_qps_are_gone_is_not_stopped() {
        let mut m = Model::new();
        // QP 1 stops at 2 s, QP 2 rings on.
        rank(&mut m, 0, |id, s| id == 2 || s <= 8);
        let k = rank(&mut m, 1, |_, s| s <= 8);
        assert!(
            gpu_stops(&at(&m, T0 + 12 * S), 2 * S)
                .iter()
                .all(|s| s.rank == Some(1))
        );
        m.apply(
            &k,
            Frame::Updates(vec![
                EndpointUpdate {
                    id: 1,
                    state: "destroyed".into(),
                    peer: None,
                    at_ns: T0 + 11 * S,
                },
                EndpointUpdate {
                    id: 2,
                    state: "ERR by the NIC".into(),
                    peer: None,
                    at_ns: T0 + 11 * S,
                },
            ]),
        );
        assert!(gpu_stops(&at(&m, T0 + 12 * S), 2 * S).is_empty());
    }

    /// The log's lines: one when a GPU stops, one when it rings again.
    #[test]
    fn the_watch_says_a_stop_once_and_its_end() {
        let mut m = Model::new();
        // Quiet from 3 s to 8 s.
        rank(&mut m, 1, |_, s| s <= 12 || s > 32);
        let mut w = GpuStopWatch::default();
        assert!(w.check(&at(&m, T0 + 4 * S), 2 * S).is_empty());
        assert_eq!(
            w.check(&at(&m, T0 + 5 * S), 2 * S),
            ["⚠ no GPU doorbell from node1 r1 GPU0 in 2.0s (QP 0x11 +1)"]
        );
        assert!(w.check(&at(&m, T0 + 7 * S), 2 * S).is_empty());
        assert_eq!(
            w.check(&at(&m, T0 + 9 * S), 2 * S),
            ["✓ node1 r1 GPU0: doorbells again after 6.0s"]
        );
        assert!(w.check(&at(&m, T0 + 10 * S), 2 * S).is_empty());
    }
}
