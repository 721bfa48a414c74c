//! The whole model at one view time: every visible process with its totals and rates, every
//! endpoint with its peer, and what follows from them (node and rank rows, the rank, node and
//! GPU matrices, GPU rows). Live, replay, the dashboard and the warnings all read this one state.

use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// Which endpoints to list.
    pub detail: Detail,
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
            ..Default::default()
        }
    }
}

/// The rank, node and GPU matrices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matrices {
    pub rank: RateMatrix,
    pub node: RateMatrix,
    pub gpu: RateMatrix,
    /// Bytes (tx and rx, in the window) of endpoints that talk to several traced processes and
    /// count them together (libfabric RDM endpoints): no cell of the rank or node matrix can
    /// hold them.
    pub left_out_bytes: f64,
    /// How many such endpoints moved bytes in the window.
    pub left_out_endpoints: u32,
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
    /// Every endpoint shown, grouped by process in process order, by endpoint id within one
    /// (with `Detail::Processes`, only those of the processes that need them, without peers).
    pub endpoints: Vec<EndpointAt<'m>>,
    pub peers: Arc<Peers>,
    pub groups: Arc<Groups>,
    pub detail: Detail,
    /// Endpoint rows other than the unattributed ones (every process, whatever `detail`).
    pub qps: usize,
    /// The same rows by kind (`RowKind`, in its order): what the header names, so that a UCX job
    /// reads "16 endpoints · 4 workers", not "20 QPs".
    pub row_kinds: [usize; RowKind::COUNT],
    /// Per process: how long it has been silent (ns: no frame for longer than
    /// `waits::silent_after`, and it has not exited), None while it reports (`agg::waits`).
    pub silent: Vec<Option<u64>>,
    /// The wall clock of a live view at its newest data (None: a replay, or a view of the past).
    pub live_now: Option<u64>,
    /// `waits::waits` of this view time, for one threshold: its rule, the row marks and the
    /// idle rule all read it (`waits::waits_cached`).
    pub(crate) waits_memo: std::cell::OnceCell<(u64, super::silence::Waits)>,
    /// `gpu_stops::gpu_stops` of this view time, for one threshold: the warning and the doorbell
    /// view of one frame read it (`gpu_stops::gpu_stops_cached`).
    pub(crate) gpu_stops_memo: std::cell::OnceCell<(u64, Vec<super::gpu_stop::GpuStop>)>,
}

/// What an endpoint row is, as the header counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// A verbs or devx queue pair.
    Qp,
    /// A UCX or libfabric endpoint.
    Endpoint,
    /// A UCX worker (its receives name no endpoint).
    Worker,
    /// A verbs or libfabric completion queue.
    Cq,
    /// A verbs shared receive queue.
    Srq,
    /// An id sigmatop saw used but never saw created.
    Other,
}

impl RowKind {
    pub const COUNT: usize = 6;
    pub const ALL: [RowKind; RowKind::COUNT] = [
        RowKind::Qp,
        RowKind::Endpoint,
        RowKind::Worker,
        RowKind::Cq,
        RowKind::Srq,
        RowKind::Other,
    ];

    pub fn of(def: Option<&EndpointDef>) -> RowKind {
        match def.map(|d| d.kind) {
            Some(EndpointKind::VerbsQp | EndpointKind::DevxQp) => RowKind::Qp,
            Some(EndpointKind::UcpEp | EndpointKind::FiEp) => RowKind::Endpoint,
            Some(EndpointKind::UcpWorker) => RowKind::Worker,
            Some(EndpointKind::VerbsCq | EndpointKind::FiCq) => RowKind::Cq,
            Some(EndpointKind::VerbsSrq) => RowKind::Srq,
            _ => RowKind::Other,
        }
    }

    /// "QP" / "QPs", "endpoint" / "endpoints"...
    pub fn noun(self, n: usize) -> &'static str {
        let (one, many) = match self {
            RowKind::Qp => ("QP", "QPs"),
            RowKind::Endpoint => ("endpoint", "endpoints"),
            RowKind::Worker => ("worker", "workers"),
            RowKind::Cq => ("CQ", "CQs"),
            RowKind::Srq => ("SRQ", "SRQs"),
            RowKind::Other => ("other", "others"),
        };
        if n == 1 { one } else { many }
    }
}

/// Counts the rows `ids` of a process (the unattributed one left out) by kind.
fn count_kinds(ids: &[u32], p: &super::model::ProcessState) -> [usize; RowKind::COUNT] {
    let mut k = [0; RowKind::COUNT];
    for &ep in ids.iter().filter(|&&ep| ep != UNATTRIBUTED_EP) {
        k[RowKind::of(p.endpoints.get(&ep)) as usize] += 1;
    }
    k
}

/// Which endpoints `ModelAt` lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Detail {
    /// Every endpoint of every process, with its peer: the QP rows, the matrices.
    #[default]
    Endpoints,
    /// The processes' own figures (rates, totals, node and rank rows) and only the endpoints the
    /// warnings and GPU rows read (processes with GPU QPs, doorbells or posted receives), without
    /// peers: what the Overview and Nodes views show, without a pass over every endpoint of a
    /// large job.
    Processes,
}

/// What `ModelAt` keeps between view times of one model: the node and rank rows, the owners of
/// addresses and the endpoint lists change only when identities or endpoints do (the model's
/// topology generation), not with every snapshot. Transparent: a `ModelAt` built with a cache
/// equals one built without.
#[derive(Default)]
pub struct AtCache {
    topo: Option<Topology>,
}

/// The derived tables of one list of processes at one topology generation.
struct Topology {
    generation: u64,
    /// Processes in the model, and the positions of those listed (all of them when live).
    total: usize,
    included: Vec<u32>,
    groups: Arc<Groups>,
    /// Built when first needed.
    peers: Option<Arc<Peers>>,
    /// Per process: it has a GPU-driven QP.
    gpu: Vec<bool>,
    /// Per process: the endpoints defined with a row of their own (QPs, UCX and libfabric
    /// endpoints), sorted.
    defined: Vec<Vec<u32>>,
    /// Per process: (layout generation of its newest snapshot, its endpoint rows less the
    /// unattributed one, by kind).
    rows: Vec<Option<(u64, [usize; RowKind::COUNT])>>,
}

impl Topology {
    fn new(model: &Model, included: Vec<u32>, procs: &[ProcAt]) -> Topology {
        let groups = Groups::new(
            procs
                .iter()
                .map(|a| (a.p.identity.rank, a.key.host.as_str())),
        );
        Topology {
            generation: model.topology_generation(),
            total: model.processes.len(),
            included,
            groups: Arc::new(groups),
            peers: None,
            gpu: procs
                .iter()
                .map(|a| {
                    a.p.endpoints
                        .values()
                        .any(|d| d.kind == EndpointKind::DevxQp || d.gpu.is_some())
                })
                .collect(),
            defined: procs
                .iter()
                .map(|a| {
                    a.p.endpoints
                        .iter()
                        .filter(|(_, d)| has_row(d))
                        .map(|(id, _)| *id)
                        .collect()
                })
                .collect(),
            rows: vec![None; procs.len()],
        }
    }

    /// The same processes, identities and endpoints: the generation moves with every process
    /// added and every identity or endpoint change, the count with every process removed.
    fn fits(&self, model: &Model, included: &[u32]) -> bool {
        self.generation == model.topology_generation()
            && self.total == model.processes.len()
            && self.included == included
    }

    fn peers(&mut self, procs: &[ProcAt]) -> Arc<Peers> {
        self.peers
            .get_or_insert_with(|| {
                Arc::new(Peers::build(
                    procs
                        .iter()
                        .map(|a| (&a.p.identity, a.p.endpoints_with_ports())),
                ))
            })
            .clone()
    }
}

/// An endpoint of this kind has a row even before it moves anything.
fn has_row(d: &EndpointDef) -> bool {
    matches!(
        d.kind,
        EndpointKind::UcpEp | EndpointKind::FiEp | EndpointKind::VerbsQp | EndpointKind::DevxQp
    )
}

/// The endpoint rows of one process: every endpoint with traffic (`with_data`, sorted: its
/// unattributed row among them when it counted something there) and its defined QPs/endpoints
/// that have none yet (idle). A process with nothing unattributed has no row of zeros for it
/// (issue 39, item 7: one in every QPs view); the QPs view's title says "none unattributed".
fn row_ids(ids: &mut Vec<u32>, with_data: impl Iterator<Item = u32>, defined: &[u32]) {
    ids.clear();
    ids.extend(with_data);
    ids.extend_from_slice(defined);
    ids.sort_unstable();
    ids.dedup();
}

impl<'m> ModelAt<'m> {
    pub fn new(model: &'m Model, opts: &AtOptions) -> ModelAt<'m> {
        ModelAt::with_cache(model, opts, &mut AtCache::default())
    }

    /// `new`, with the tables kept from the previous view time of the same model.
    pub fn with_cache(model: &'m Model, opts: &AtOptions, cache: &mut AtCache) -> ModelAt<'m> {
        let t = match (opts.at, opts.now_ns) {
            // A live view moves on with the wall clock, also once every process has ended: the
            // clock goes on, "now" rates are 0 (issue 25, item 3: they froze at their last value
            // and the clock stood still), and an ended process's windowed figures cover the last
            // window of its life (issue 12, item 7b: they are not dropped to 0).
            (None, Some(now)) => view_time(model, None).max(now),
            (at, _) => view_time(model, at),
        };
        let every = opts.detail == Detail::Endpoints;
        let first_ns = model.first_start_ns();
        let mut included: Vec<u32> = Vec::with_capacity(model.processes.len());
        let mut procs: Vec<ProcAt> = Vec::with_capacity(model.processes.len());
        for (i, (k, p)) in model.processes.iter().enumerate() {
            if opts.at.is_none() || p.identity.start_ns == 0 || p.identity.start_ns <= t {
                included.push(i as u32);
                procs.push(ProcAt::new(k, p, t, opts.window, every, first_ns));
            }
        }
        // Who stopped reporting: their "now" is not known (0, never their last rates).
        let live_now = if opts.at.is_none() { opts.now_ns } else { None };
        let silent: Vec<Option<u64>> = procs
            .iter()
            .map(|a| super::silence::silent_ns(a.p, t, live_now))
            .collect();
        for (a, s) in procs.iter_mut().zip(&silent) {
            if s.is_some() {
                a.forget_now();
            }
        }
        let any_silent = silent.iter().any(Option::is_some);
        if !cache
            .topo
            .as_ref()
            .is_some_and(|c| c.fits(model, &included))
        {
            cache.topo = None;
        }
        let topo = cache
            .topo
            .get_or_insert_with(|| Topology::new(model, included, &procs));
        // While some process is silent, who waits on it is read from the endpoints whose peer
        // it is (`agg::waits`): their processes list them.
        let talks_to_silent: Vec<bool> = if any_silent && !every {
            let peers = topo.peers(&procs);
            procs
                .iter()
                .enumerate()
                .map(|(pi, a)| {
                    a.p.endpoints.values().any(|d| {
                        peers
                            .of(pi as u32, d, a.p.av_of(d.id))
                            .process
                            .is_some_and(|q| q as usize != pi && silent[q as usize].is_some())
                    })
                })
                .collect()
        } else {
            vec![false; procs.len()]
        };
        // Which processes list their endpoints.
        let listed: Vec<bool> = procs
            .iter()
            .zip(&topo.gpu)
            .zip(&talks_to_silent)
            .map(|((a, gpu), t)| {
                every || *t || *gpu || a.sums.tot.doorbells > 0 || a.sums.tot.posted > 0
            })
            .collect();
        for ((a, l), s) in procs.iter_mut().zip(&listed).zip(&silent) {
            if *l && !a.detailed {
                *a = ProcAt::new(a.key, a.p, t, opts.window, true, first_ns);
                if s.is_some() {
                    a.forget_now();
                }
            }
        }
        // Peers are resolved for every endpoint listed when the waits need them (receives
        // outstanding somewhere, or a silent process): cached with the topology.
        let with_peers = every
            || any_silent
            || procs
                .iter()
                .zip(&listed)
                .any(|(a, l)| *l && a.sums.tot.outstanding().is_some_and(|n| n > 0));
        let peers = if with_peers {
            topo.peers(&procs)
        } else {
            Arc::new(Peers::default())
        };
        let mut endpoints = Vec::new();
        let mut rates = Vec::with_capacity(procs.len());
        let mut ids: Vec<u32> = Vec::new();
        let mut row_kinds = [0usize; RowKind::COUNT];
        for (pi, a) in procs.iter().enumerate() {
            let p = a.p;
            rates.push(ProcRates {
                tx_bps: a.sums.tx_bps,
                rx_bps: a.sums.rx_bps,
                ops_per_s: a.sums.ops_per_s,
                tx_bps_window: per_s(a.sums.win_tx, a.window_ns),
                rx_bps_window: per_s(a.sums.win_rx, a.window_ns),
                tot: a.sums.tot,
            });
            if !a.detailed {
                // Rows of the newest snapshot: known while its list of counters stays.
                let layout = p.history.layout_generation();
                let k = match topo.rows[pi] {
                    Some((l, k)) if l == layout => k,
                    _ => {
                        let eps = p.history.last_keys().map(|(ep, _)| ep);
                        row_ids(&mut ids, eps, &topo.defined[pi]);
                        let k = count_kinds(&ids, p);
                        topo.rows[pi] = Some((layout, k));
                        k
                    }
                };
                for (a, b) in row_kinds.iter_mut().zip(k) {
                    *a += b;
                }
                continue;
            }
            row_ids(&mut ids, a.eps.iter().map(|(ep, _)| ep), &topo.defined[pi]);
            for (a, b) in row_kinds.iter_mut().zip(count_kinds(&ids, p)) {
                *a += b;
            }
            if !listed[pi] {
                continue;
            }
            for &ep in &ids {
                let def = p.endpoints.get(&ep);
                let (tot, win, now) = a
                    .eps
                    .get(ep)
                    .map_or_else(Default::default, |s| (s.tot, s.win, s.now));
                endpoints.push(EndpointAt {
                    proc: pi as u32,
                    ep,
                    def,
                    peer: match def {
                        Some(d) if with_peers => peers.of(pi as u32, d, p.av_of(ep)),
                        _ => EndpointPeer::default(),
                    },
                    tot,
                    win,
                    tx_bps: per_s(now.tx, a.now_ns),
                    rx_bps: per_s(now.rx, a.now_ns),
                    read_bps: per_s(now.rx1, a.now_ns),
                    tx_bps_window: per_s(win.tx, a.window_ns),
                    rx_bps_window: per_s(win.rx, a.window_ns),
                    ops_per_s: per_s(now.ops, a.now_ns),
                    doorbells_per_s: per_s(now.doorbells, a.now_ns),
                });
            }
        }
        ModelAt {
            model,
            t,
            procs,
            rates,
            endpoints,
            peers,
            groups: topo.groups.clone(),
            detail: opts.detail,
            qps: row_kinds.iter().sum(),
            row_kinds,
            silent,
            live_now,
            waits_memo: std::cell::OnceCell::new(),
            gpu_stops_memo: std::cell::OnceCell::new(),
        }
    }

    /// How long process `proc` (its index in `procs`) has been silent, None while it reports.
    pub fn silent_ns(&self, proc: u32) -> Option<u64> {
        self.silent.get(proc as usize).copied().flatten()
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
        self.rank_rows(true)
    }

    /// `ranks`, the host names left empty unless `hosts` (the skew rule needs none of them).
    pub(crate) fn rank_rows(&self, hosts: bool) -> Vec<GroupRates> {
        let mut rows: Vec<GroupRates> = self
            .groups
            .ranks
            .iter()
            .map(|&r| GroupRates {
                rank: Some(r),
                ..Default::default()
            })
            .collect();
        let mut named = vec![false; rows.len()];
        for (pi, (a, r)) in self.procs.iter().zip(&self.rates).enumerate() {
            let Some(i) = self.groups.rank_of(pi as u32) else {
                continue;
            };
            if hosts && !named[i] {
                rows[i].host = a.key.host.clone();
                named[i] = true;
            }
            rows[i].add(r);
        }
        rows
    }

    /// The rank, node and GPU matrices over the window (bytes) and now (rates): from each
    /// endpoint to its peer (sends, writes) and from the peer to it (one-sided reads).
    pub fn matrices(&self) -> Matrices {
        debug_assert!(
            self.detail == Detail::Endpoints,
            "matrices need every endpoint"
        );
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
        let (mut left_out_bytes, mut left_out_endpoints) = (0.0, 0u32);
        for e in &self.endpoints {
            // A multi-peer endpoint's counters cannot say which peer got what: no cell, but
            // counted as left out, so that an empty matrix is not read as "nothing moved".
            let other = match e.peer.process {
                Some(pp) => Some((g.rank_of(pp), g.host_of(pp))),
                None if e.peer.several => {
                    let b = (e.win.tx + e.win.rx1) as f64;
                    if b > 0.0 {
                        left_out_bytes += b;
                        left_out_endpoints += 1;
                    }
                    None
                }
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
            left_out_bytes,
            left_out_endpoints,
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
