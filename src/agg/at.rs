//! The whole model at one view time: every visible process with its totals and rates, every
//! endpoint with its peer, and what follows from them (node and rank rows, the rank, node and
//! GPU matrices, GPU rows). Live, replay, the dashboard and the warnings all read this one state.

use std::collections::BTreeMap;

use super::matrix::{GpuKey, Groups, UNTRACED_LABEL, gpu_side_label, gpu_sides};
use super::model::Model;
use super::peers::{EndpointPeer, Peers};
use super::window::{ProcAt, Sums, Window, per_s, view_time};
use crate::event::{EndpointDef, EndpointKind, Layer, Op, UNATTRIBUTED_EP};

/// What to look at: the view time and the window.
#[derive(Clone, Copy, Debug, Default)]
pub struct AtOptions {
    pub window: Window,
    /// View time (ns, CLOCK_REALTIME); None = the newest data.
    pub at: Option<u64>,
    /// Wall clock (ns, CLOCK_REALTIME) of a live view: when every process has gone quiet, the view
    /// time still moves on, so "now" rates fall to zero instead of freezing at their last value.
    pub now_ns: Option<u64>,
}

/// One endpoint at the view time, with its peer and rates.
#[derive(Clone, Debug)]
pub struct EndpointAt<'m> {
    /// Index of its process in `ModelAt::procs`.
    pub proc: u32,
    pub ep: u32,
    pub def: Option<&'m EndpointDef>,
    pub peer: EndpointPeer,
    pub tot: Sums,
    pub win: Sums,
    /// Bytes/s between the last two snapshots.
    pub tx_bps: f64,
    pub rx_bps: f64,
    /// Bytes/s of one-sided reads (from the peer to this endpoint) between the last two snapshots.
    pub read_bps: f64,
    pub tx_bps_window: f64,
    pub rx_bps_window: f64,
    pub ops_per_s: f64,
    pub doorbells_per_s: f64,
}

impl EndpointAt<'_> {
    /// The unattributed row of its process (operations on handles sigmatop never saw created).
    pub fn unattributed(&self) -> bool {
        self.ep == UNATTRIBUTED_EP
    }

    /// A QP driven by a GPU (devx, or one that names its GPU).
    pub fn is_gpu_qp(&self) -> bool {
        self.def
            .is_some_and(|d| d.kind == EndpointKind::DevxQp || d.gpu.is_some())
    }
}

/// Rates and totals of one process at the view time.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcRates {
    pub tx_bps: f64,
    pub rx_bps: f64,
    pub ops_per_s: f64,
    pub tx_bps_window: f64,
    pub rx_bps_window: f64,
    pub tot: Sums,
}

/// Egress and ingress of one node or rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupRates {
    /// Host name, or the rank.
    pub host: String,
    pub rank: Option<u32>,
    pub egress_bps: f64,
    pub ingress_bps: f64,
    pub egress_bytes: u64,
    pub ingress_bytes: u64,
}

/// A square matrix over the window: bytes moved and the rate now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateMatrix {
    pub labels: Vec<String>,
    pub bytes: Vec<Vec<f64>>,
    pub rates: Vec<Vec<f64>>,
    /// The last row and column are the untraced peers.
    pub untraced: bool,
}

impl RateMatrix {
    /// Removes the last row and column when nothing moved through them.
    fn drop_empty_last(&mut self) {
        let Some(n) = self.labels.len().checked_sub(1) else {
            return;
        };
        let empty = (0..=n).all(|k| {
            self.bytes[n][k] == 0.0
                && self.bytes[k][n] == 0.0
                && self.rates[n][k] == 0.0
                && self.rates[k][n] == 0.0
        });
        self.untraced = !empty;
        if empty {
            self.labels.pop();
            self.bytes.pop();
            self.rates.pop();
            for row in self.bytes.iter_mut().chain(self.rates.iter_mut()) {
                row.pop();
            }
        }
    }

    fn square(labels: Vec<String>) -> RateMatrix {
        let n = labels.len();
        RateMatrix {
            labels,
            bytes: vec![vec![0.0; n]; n],
            rates: vec![vec![0.0; n]; n],
            untraced: false,
        }
    }
}

/// The rank, node and GPU matrices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matrices {
    pub rank: RateMatrix,
    pub node: RateMatrix,
    pub gpu: RateMatrix,
}

/// One GPU of one process that drives QPs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuAt {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
    pub gpu: u32,
    pub bytes_per_s: f64,
    pub doorbells_per_s: f64,
    /// WQEs by opcode over the window, in the order first seen.
    pub opcode_mix: Vec<(u8, u64)>,
}

/// The model at one view time.
pub struct ModelAt<'m> {
    pub model: &'m Model,
    /// The view time (ns, CLOCK_REALTIME).
    pub t: u64,
    /// The processes visible at `t`: every one that had started by then (all of them when live).
    pub procs: Vec<ProcAt<'m>>,
    /// Per process: its rates and totals.
    pub rates: Vec<ProcRates>,
    /// Every endpoint shown, grouped by process in process order, by endpoint id within one.
    pub endpoints: Vec<EndpointAt<'m>>,
    pub peers: Peers,
    pub groups: Groups,
}

impl<'m> ModelAt<'m> {
    pub fn new(model: &'m Model, opts: &AtOptions) -> ModelAt<'m> {
        let t = match (opts.at, opts.now_ns) {
            // A live view moves on with the wall clock while a process runs; once every process
            // has ended (the run is over) it stays on the last data, so that the views keep the
            // last window's rates and the totals (issue 12, item 7b).
            (None, Some(now)) if model.processes.values().any(|p| !p.exited) => {
                view_time(model, None).max(now)
            }
            (at, _) => view_time(model, at),
        };
        let procs: Vec<ProcAt> = model
            .processes
            .iter()
            .filter(|(_, p)| {
                opts.at.is_none() || p.identity.start_ns == 0 || p.identity.start_ns <= t
            })
            .map(|(k, p)| ProcAt::new(k, p, t, opts.window))
            .collect();
        let peers = Peers::build(
            procs
                .iter()
                .map(|a| (&a.p.identity, a.p.endpoints.values())),
        );
        let groups = Groups::new(
            procs
                .iter()
                .map(|a| (a.p.identity.rank, a.key.host.as_str())),
        );
        let mut endpoints = Vec::new();
        let mut rates = Vec::with_capacity(procs.len());
        let mut ids: Vec<u32> = Vec::new();
        for (pi, a) in procs.iter().enumerate() {
            let p = a.p;
            // Every endpoint with traffic, defined QPs/endpoints that have none yet (idle), and the
            // unattributed row of every reporting process, even when it is zero: totals never
            // hide it.
            ids.clear();
            ids.extend(a.eps.iter().map(|(ep, _)| ep));
            if a.has_data {
                ids.push(UNATTRIBUTED_EP);
            }
            for (id, d) in &p.endpoints {
                if matches!(
                    d.kind,
                    EndpointKind::UcpEp
                        | EndpointKind::FiEp
                        | EndpointKind::VerbsQp
                        | EndpointKind::DevxQp
                ) {
                    ids.push(*id);
                }
            }
            ids.sort_unstable();
            ids.dedup();
            let mut r = ProcRates {
                tot: a.totals(),
                ..Default::default()
            };
            let (mut win_tx, mut win_rx) = (0u64, 0u64);
            for &ep in &ids {
                let def = p.endpoints.get(&ep);
                let (tot, win, now) = a
                    .eps
                    .get(ep)
                    .map_or_else(Default::default, |s| (s.tot, s.win, s.now));
                win_tx += win.tx;
                win_rx += win.rx;
                let e = EndpointAt {
                    proc: pi as u32,
                    ep,
                    def,
                    peer: def.map_or_else(EndpointPeer::default, |d| {
                        peers.of(pi as u32, d, p.av_of(ep))
                    }),
                    tot,
                    win,
                    tx_bps: per_s(now.tx, a.now_ns),
                    rx_bps: per_s(now.rx, a.now_ns),
                    read_bps: per_s(now.rx1, a.now_ns),
                    tx_bps_window: per_s(win.tx, a.window_ns),
                    rx_bps_window: per_s(win.rx, a.window_ns),
                    ops_per_s: per_s(now.ops, a.now_ns),
                    doorbells_per_s: per_s(now.doorbells, a.now_ns),
                };
                r.tx_bps += e.tx_bps;
                r.rx_bps += e.rx_bps;
                r.ops_per_s += e.ops_per_s;
                endpoints.push(e);
            }
            r.tx_bps_window = per_s(win_tx, a.window_ns);
            r.rx_bps_window = per_s(win_rx, a.window_ns);
            rates.push(r);
        }
        ModelAt {
            model,
            t,
            procs,
            rates,
            endpoints,
            peers,
            groups,
        }
    }

    /// Total egress and ingress now, bytes/s.
    pub fn rates_now(&self) -> (f64, f64) {
        self.rates
            .iter()
            .fold((0.0, 0.0), |(tx, rx), r| (tx + r.tx_bps, rx + r.rx_bps))
    }

    /// One row per node, sorted by host: window rates and totals.
    pub fn nodes(&self) -> Vec<GroupRates> {
        let mut rows: Vec<GroupRates> = self
            .groups
            .hosts
            .iter()
            .map(|h| GroupRates {
                host: h.clone(),
                ..Default::default()
            })
            .collect();
        for (pi, r) in self.rates.iter().enumerate() {
            if let Some(row) = self.groups.host_of(pi as u32).and_then(|i| rows.get_mut(i)) {
                row.add(r);
            }
        }
        rows
    }

    /// One row per rank, sorted by rank, with the host of its first process.
    pub fn ranks(&self) -> Vec<GroupRates> {
        let mut rows: BTreeMap<u32, GroupRates> = BTreeMap::new();
        for (a, r) in self.procs.iter().zip(&self.rates) {
            if let Some(rank) = a.p.identity.rank {
                rows.entry(rank)
                    .or_insert_with(|| GroupRates {
                        host: a.key.host.clone(),
                        rank: Some(rank),
                        ..Default::default()
                    })
                    .add(r);
            }
        }
        rows.into_values().collect()
    }

    /// The rank, node and GPU matrices over the window (bytes) and now (rates): from each
    /// endpoint to its peer (sends, writes) and from the peer to it (one-sided reads).
    pub fn matrices(&self) -> Matrices {
        let g = &self.groups;
        // The last row and column: peers that are not traced (dropped again when empty).
        let with_untraced = |mut l: Vec<String>| {
            l.push(UNTRACED_LABEL.into());
            l
        };
        let mut rank = RateMatrix::square(with_untraced(g.rank_labels()));
        let mut node = RateMatrix::square(with_untraced(g.hosts.clone()));
        let (ur, un) = (g.ranks.len(), g.hosts.len());
        let mut gpu_cells: BTreeMap<(GpuKey, GpuKey), (f64, f64)> = BTreeMap::new();
        for e in &self.endpoints {
            // A multi-peer endpoint's counters cannot say which peer got what: no cell.
            let other = match e.peer.process {
                Some(pp) => Some((g.rank_of(pp), g.host_of(pp))),
                None if e.peer.several => None,
                None => Some((Some(ur), Some(un))),
            };
            if let Some((peer_rank, peer_host)) = other {
                for (m, i, j) in [
                    (&mut rank, g.rank_of(e.proc), peer_rank),
                    (&mut node, g.host_of(e.proc), peer_host),
                ] {
                    if let (Some(i), Some(j)) = (i, j) {
                        m.bytes[i][j] += e.win.tx as f64;
                        m.rates[i][j] += e.tx_bps;
                        m.bytes[j][i] += e.win.rx1 as f64;
                        m.rates[j][i] += e.read_bps;
                    }
                }
            }
            if let Some((pp, pe)) = e.peer.qp {
                let me = GpuKey {
                    process: e.proc,
                    gpu: e.def.and_then(|d| d.gpu),
                };
                let them = GpuKey {
                    process: pp,
                    gpu: self
                        .procs
                        .get(pp as usize)
                        .and_then(|x| x.p.endpoints.get(&pe))
                        .and_then(|d| d.gpu),
                };
                if let Some(cell) = GpuKey::cell(me, them) {
                    if e.win.tx > 0 || e.tx_bps > 0.0 {
                        let c = gpu_cells.entry(cell).or_default();
                        c.0 += e.win.tx as f64;
                        c.1 += e.tx_bps;
                    }
                    if e.win.rx1 > 0 || e.read_bps > 0.0 {
                        let c = gpu_cells.entry((them, me)).or_default();
                        c.0 += e.win.rx1 as f64;
                        c.1 += e.read_bps;
                    }
                }
            }
        }
        rank.drop_empty_last();
        node.drop_empty_last();
        Matrices {
            rank,
            node,
            gpu: self.gpu_matrix(&gpu_cells),
        }
    }

    /// The GPU × GPU matrix: a row and column per (process, GPU) of every GPU endpoint, and per
    /// process host memory that a GPU endpoint talks to.
    fn gpu_matrix(&self, cells: &BTreeMap<(GpuKey, GpuKey), (f64, f64)>) -> RateMatrix {
        let keys = gpu_sides(
            cells.keys(),
            self.procs.iter().enumerate().flat_map(|(i, a)| {
                a.p.endpoints.values().filter_map(move |d| {
                    d.gpu.map(|g| GpuKey {
                        process: i as u32,
                        gpu: Some(g),
                    })
                })
            }),
        );
        if keys.is_empty() {
            return RateMatrix::default();
        }
        let labels = keys
            .iter()
            .map(|k| {
                self.procs
                    .get(k.process as usize)
                    .map_or_else(String::new, |a| {
                        gpu_side_label(a.p.identity.rank, a.key.pid, &a.key.host, k.gpu)
                    })
            })
            .collect();
        let mut m = RateMatrix::square(labels);
        let pos = |k: &GpuKey| keys.binary_search(k).unwrap_or(0);
        for ((a, b), (w, r)) in cells {
            m.bytes[pos(a)][pos(b)] += w;
            m.rates[pos(a)][pos(b)] += r;
        }
        m
    }

    /// One row per GPU of each process (CUDA ordinals are per process), sorted by host, pid, GPU.
    pub fn gpus(&self) -> Vec<GpuAt> {
        let mut rows: BTreeMap<(&str, u32, u32), GpuAt> = BTreeMap::new();
        for e in &self.endpoints {
            let Some(g) = e.def.and_then(|d| d.gpu) else {
                continue;
            };
            let a = &self.procs[e.proc as usize];
            let row = rows
                .entry((a.key.host.as_str(), a.key.pid, g))
                .or_insert_with(|| GpuAt {
                    host: a.key.host.clone(),
                    pid: a.key.pid,
                    rank: a.p.identity.rank,
                    gpu: g,
                    ..Default::default()
                });
            row.bytes_per_s += e.tx_bps + e.rx_bps;
            row.doorbells_per_s += e.doorbells_per_s;
            for (op, n) in a.window_ops(e.ep) {
                if is_gpu_wqe(op) && n > 0 {
                    match row.opcode_mix.iter_mut().find(|(k, _)| *k == op) {
                        Some(x) => x.1 += n,
                        None => row.opcode_mix.push((op, n)),
                    }
                }
            }
        }
        rows.into_values().collect()
    }
}

impl GroupRates {
    fn add(&mut self, r: &ProcRates) {
        self.egress_bps += r.tx_bps_window;
        self.ingress_bps += r.rx_bps_window;
        self.egress_bytes += r.tot.tx;
        self.ingress_bytes += r.tot.rx;
    }
}

/// A WQE recovered behind a GPU doorbell (an mlx5-layer operation other than the doorbell).
pub fn is_gpu_wqe(op: u8) -> bool {
    Op::from_u8(op).is_some_and(|o| o.layer() == Layer::Mlx5 && o != Op::GpuDoorbell)
}

/// Writes the local name of endpoint `ep` into `dst` (keeping its buffer): its QPN, else its
/// label, else "ep#N"; "(unattributed)" for the unattributed row.
pub fn write_local_id(dst: &mut String, def: Option<&EndpointDef>, ep: u32) {
    use std::fmt::Write;
    dst.clear();
    if ep == UNATTRIBUTED_EP {
        dst.push_str("(unattributed)");
        return;
    }
    let _ = match def {
        Some(d) => match d.qpn {
            Some(q) => write!(dst, "0x{q:x}"),
            None if !d.label.is_empty() => dst.write_str(&d.label),
            None => write!(dst, "ep#{ep}"),
        },
        None => write!(dst, "ep#{ep}"),
    };
}
