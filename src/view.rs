//! From the aggregation `Model` to the dashboard's `ViewModel`: a pure function of the model, the
//! time window and the history position. Live, replay and demo all go through `build_view`.
//!
//! Rates come from differences of cumulative snapshots:
//! - "now": the last two snapshots of each process at or before the view time;
//! - window (1 s / 10 s / 60 s / all): the snapshot at or before `t - window` (or zero at the
//!   process start when it started inside the window) to the snapshot at or before `t`;
//! - totals: the snapshot at or before `t` itself (cumulative since the process started).
//!
//! History positions follow the reference timeline: the snapshot times of the process with the
//! longest kept history. `ViewOptions::at` is a time (ns, CLOCK_REALTIME) on that timeline, or
//! None for the newest data.
//!
//! GPU-initiated doorbells (op `doorbell` of the mlx5 layer) are read from the sampled events with
//! this layout: a `doorbell` event carries the producer index in `aux`; the WQE events that follow
//! it on the same endpoint (`RDMA_WRITE`, `RDMA_READ`, `ATOMIC`, `SEND`, `OTHER` of the mlx5 layer)
//! carry their bytes, remote address in `addr` and rkey in `aux`. Without such events the doorbell
//! view stays empty.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sigmatop_tui::{
    DoorbellModel, DoorbellRecord, DoorbellSeries, EndpointRow, GpuRow, Header, Matrices, Matrix,
    NodeRow, Percentiles, ProcessRow, RankRow, StatusCounters, ViewModel, Window,
};

use crate::agg::{Model, ProcKey, ProcessState};
use crate::correlate::FxMap;
use crate::correlate::gpu::{self, GpuKey};
use crate::correlate::mr::toward_peer;
use crate::correlate::topology::QpIndex;
use crate::event::{
    Dir, DropCounters, EndpointKind, Event, Layer, Op, Snapshot, UNATTRIBUTED_EP, layer_names,
};

/// Samples shown in the bandwidth sparkline and the doorbell rate history.
pub const SPARK_SAMPLES: usize = 120;
/// Latest decoded doorbells kept in the view.
pub const DOORBELL_RECORDS: usize = 200;
/// A process whose newest snapshot is older than this (relative to the view time) has a "now"
/// rate of zero (it exited or stopped reporting).
const STALE_NS: u64 = 2_000_000_000;

/// How the header clock is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockStyle {
    /// Local wall time "12:04:18" (live).
    #[default]
    Wall,
    /// Seconds since the earliest process start, "t+12.004s" (replay).
    SinceStart,
}

/// What to show: the window, the history position and labels.
#[derive(Clone, Debug, Default)]
pub struct ViewOptions {
    pub window: Window,
    /// View time (ns, CLOCK_REALTIME); None = the newest data.
    pub at: Option<u64>,
    /// "live", "replay out/", "demo".
    pub source: String,
    pub clock: ClockStyle,
    /// Wall clock (ns, CLOCK_REALTIME) of a live view: when every process has gone quiet, the view
    /// time still moves on, so "now" rates fall to zero instead of freezing at their last value.
    pub now_ns: Option<u64>,
}

/// The process whose kept history is the longest: its snapshot times are the history positions.
pub fn reference(model: &Model) -> Option<&ProcessState> {
    model
        .processes
        .values()
        .max_by_key(|p| (p.history.len(), std::cmp::Reverse(p.identity.start_ns)))
}

/// Index of the last snapshot at or before `t`.
fn idx_at(hist: &std::collections::VecDeque<Snapshot>, t: u64) -> Option<usize> {
    hist.partition_point(|s| s.at_ns <= t).checked_sub(1)
}

/// The view time for `at`.
pub fn view_time(model: &Model, at: Option<u64>) -> u64 {
    at.unwrap_or_else(|| model.latest_ns())
}

/// Moves `at` by `d` samples on the reference timeline. Returns None when the step lands on the
/// newest sample (back to live).
pub fn step(model: &Model, at: Option<u64>, d: i32) -> Option<u64> {
    let r = reference(model)?;
    let len = r.history.len();
    if len == 0 {
        return None;
    }
    let pos = match at {
        None => len - 1,
        Some(t) => idx_at(&r.history, t).unwrap_or(0),
    };
    let new = (pos as i64 + d as i64).clamp(0, len as i64 - 1) as usize;
    if new + 1 == len {
        None
    } else {
        Some(r.history[new].at_ns)
    }
}

/// (tx bytes, rx bytes, data ops) of a cumulative op table.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    tx: u64,
    rx: u64,
    /// Bytes of one-sided reads (also in `rx`): they move from the peer to this endpoint.
    rx1: u64,
    ops: u64,
    doorbells: u64,
}

impl Sums {
    fn add(&mut self, op: u8, n: u64, b: u64) {
        match Op::from_u8(op) {
            Some(Op::GpuDoorbell) => self.doorbells += n,
            Some(o) => match o.dir() {
                Dir::Tx => {
                    self.tx += b;
                    self.ops += n;
                }
                Dir::Rx => {
                    self.rx += b;
                    if toward_peer(o) == Some(false) {
                        self.rx1 += b;
                    }
                    self.ops += n;
                }
                Dir::None => {}
            },
            None => {}
        }
    }
}

impl Sums {
    fn sub(&mut self, op: u8, n: u64, b: u64) {
        match Op::from_u8(op) {
            Some(Op::GpuDoorbell) => self.doorbells = self.doorbells.saturating_sub(n),
            Some(o) => match o.dir() {
                Dir::Tx => {
                    self.tx = self.tx.saturating_sub(b);
                    self.ops = self.ops.saturating_sub(n);
                }
                Dir::Rx => {
                    self.rx = self.rx.saturating_sub(b);
                    if toward_peer(o) == Some(false) {
                        self.rx1 = self.rx1.saturating_sub(b);
                    }
                    self.ops = self.ops.saturating_sub(n);
                }
                Dir::None => {}
            },
            None => {}
        }
    }
}

fn snapshot_sums(s: &Snapshot) -> Sums {
    let mut out = Sums::default();
    for c in &s.counts {
        out.add(c.op, c.ops, c.bytes);
    }
    out
}

fn per_s(bytes: u64, dt_ns: u64) -> f64 {
    if dt_ns == 0 {
        0.0
    } else {
        bytes as f64 * 1e9 / dt_ns as f64
    }
}

/// Operations by code, without allocating for the usual handful of codes per endpoint.
#[derive(Clone, Debug, Default)]
struct OpTally {
    len: usize,
    inline: [(u8, u64); 6],
    spill: Vec<(u8, u64)>,
}

impl OpTally {
    fn add(&mut self, op: u8, n: u64) {
        if let Some(x) = self.inline[..self.len].iter_mut().find(|(o, _)| *o == op) {
            x.1 += n;
        } else if let Some(x) = self.spill.iter_mut().find(|(o, _)| *o == op) {
            x.1 += n;
        } else if self.len < self.inline.len() {
            self.inline[self.len] = (op, n);
            self.len += 1;
        } else {
            self.spill.push((op, n));
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        self.inline[..self.len]
            .iter()
            .chain(self.spill.iter())
            .copied()
    }

    fn count(&self) -> usize {
        self.len + self.spill.len()
    }
}

/// One endpoint's sums at the view time: since the start, over the window, between the last two
/// snapshots; and its operations by code since the start.
#[derive(Clone, Debug, Default)]
struct EpSums {
    tot: Sums,
    win: Sums,
    now: Sums,
    ops: OpTally,
}

/// Endpoint → sums, kept sorted by endpoint id in a vector: snapshots list their counts grouped by
/// endpoint, so nearly every insert is an append or a hit on the last entry.
#[derive(Default)]
struct EpMap(Vec<(u32, EpSums)>);

impl EpMap {
    fn pos(&self, ep: u32) -> Result<usize, usize> {
        match self.0.last() {
            Some((last, _)) if *last == ep => Ok(self.0.len() - 1),
            Some((last, _)) if *last < ep => Err(self.0.len()),
            _ => self.0.binary_search_by_key(&ep, |e| e.0),
        }
    }

    fn entry(&mut self, ep: u32) -> &mut EpSums {
        let i = match self.pos(ep) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (ep, EpSums::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    fn get(&self, ep: u32) -> Option<&EpSums> {
        self.pos(ep).ok().map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, ep: u32) -> Option<&mut EpSums> {
        self.pos(ep).ok().map(|i| &mut self.0[i].1)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut EpSums> {
        self.0.iter_mut().map(|e| &mut e.1)
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &EpSums)> {
        self.0.iter().map(|e| (e.0, &e.1))
    }
}

/// Where one process stands at the view time.
struct ProcAt<'a> {
    key: &'a ProcKey,
    p: &'a ProcessState,
    eps: EpMap,
    /// The snapshot at the view time and the window's base (None: zero at the process start).
    s1: Option<&'a Snapshot>,
    base: Option<&'a Snapshot>,
    window_ns: u64,
    /// Distance of the last two snapshots (0: no "now" rate).
    now_ns: u64,
    drops: DropCounters,
    /// The process has a snapshot at or before the view time.
    has_data: bool,
}

impl ProcAt<'_> {
    /// Operations by code over the window for one endpoint (GPU opcode mix).
    fn window_ops(&self, ep: u32) -> Vec<(u8, u64)> {
        let mut out: Vec<(u8, u64)> = Vec::new();
        let Some(s1) = self.s1 else {
            return out;
        };
        for c in s1.counts.iter().filter(|c| c.ep == ep) {
            match out.iter_mut().find(|(o, _)| *o == c.op) {
                Some(e) => e.1 += c.ops,
                None => out.push((c.op, c.ops)),
            }
        }
        if let Some(b) = self.base {
            for c in b.counts.iter().filter(|c| c.ep == ep) {
                if let Some(e) = out.iter_mut().find(|(o, _)| *o == c.op) {
                    e.1 = e.1.saturating_sub(c.ops);
                }
            }
        }
        out
    }
}

fn proc_at<'a>(key: &'a ProcKey, p: &'a ProcessState, t: u64, window: Window) -> ProcAt<'a> {
    let mut out = ProcAt {
        key,
        p,
        eps: EpMap(Vec::with_capacity(p.endpoints.len() + 1)),
        s1: None,
        base: None,
        window_ns: 0,
        now_ns: 0,
        drops: DropCounters::default(),
        has_data: false,
    };
    let Some(i1) = idx_at(&p.history, t) else {
        return out;
    };
    let s1 = &p.history[i1];
    out.s1 = Some(s1);
    out.has_data = true;
    out.drops = s1.drops;
    for c in &s1.counts {
        let e = out.eps.entry(c.ep);
        e.tot.add(c.op, c.ops, c.bytes);
        if c.ops > 0 {
            e.ops.add(c.op, c.ops);
        }
    }
    let prev = i1.checked_sub(1).map(|i| &p.history[i]);
    let stale = t.saturating_sub(s1.at_ns) > STALE_NS;
    if let Some(s0) = prev
        && !stale
        && s1.at_ns > s0.at_ns
    {
        for e in out.eps.values_mut() {
            e.now = e.tot;
        }
        for c in &s0.counts {
            if let Some(e) = out.eps.get_mut(c.ep) {
                e.now.sub(c.op, c.ops, c.bytes);
            }
        }
        out.now_ns = s1.at_ns - s0.at_ns;
    }
    let end_ns = if stale { t } else { s1.at_ns };
    let start = p.identity.start_ns;
    let from = window
        .seconds()
        .map(|s| t.saturating_sub(s * 1_000_000_000));
    // The baseline: zero at the process start when it started inside the window, else the
    // snapshot at or before the window's start (the oldest kept one when none is that old).
    let zero_base = start > 0 && start < s1.at_ns && from.is_none_or(|f| f <= start);
    if zero_base {
        for e in out.eps.values_mut() {
            e.win = e.tot;
        }
        out.window_ns = end_ns.saturating_sub(start);
    } else {
        let j = from.and_then(|f| idx_at(&p.history, f)).unwrap_or(0);
        let base = &p.history[j.min(i1)];
        if base.at_ns < end_ns {
            for e in out.eps.values_mut() {
                e.win = e.tot;
            }
            for c in &base.counts {
                if let Some(e) = out.eps.get_mut(c.ep) {
                    e.win.sub(c.op, c.ops, c.bytes);
                }
            }
            out.base = Some(base);
            out.window_ns = end_ns - base.at_ns;
        }
    }
    out
}

fn op_name(op: u8) -> String {
    let mut s = String::new();
    op_name_into(&mut s, op);
    s
}

/// Sets `dst` to `src`, keeping its buffer (no allocation when it is already large enough).
fn set_str(dst: &mut String, src: &str) {
    if dst != src {
        dst.clear();
        dst.push_str(src);
    }
}

/// Sets `dst` to formatted text, keeping its buffer.
fn set_fmt(dst: &mut String, args: std::fmt::Arguments) {
    use std::fmt::Write;
    dst.clear();
    let _ = dst.write_fmt(args);
}

fn op_name_into(dst: &mut String, op: u8) {
    match Op::from_u8(op) {
        Some(o) => set_str(dst, o.name()),
        None => set_fmt(dst, format_args!("op{op}")),
    }
}

fn local_id_into(dst: &mut String, p: &ProcessState, ep: u32) {
    if ep == UNATTRIBUTED_EP {
        return set_str(dst, "(unattributed)");
    }
    match p.endpoints.get(&ep) {
        Some(d) => match d.qpn {
            Some(q) => set_fmt(dst, format_args!("0x{q:x}")),
            None if !d.label.is_empty() => set_str(dst, &d.label),
            None => set_fmt(dst, format_args!("ep#{ep}")),
        },
        None => set_fmt(dst, format_args!("ep#{ep}")),
    }
}

/// Sums of snapshots already seen, so that the sparkline does not re-add every kept snapshot on
/// each frame. Transparent: a view built with a cache equals one built without.
#[derive(Default)]
pub struct ViewCache {
    /// Per process (host hash, pid): its snapshots' sums, in history order.
    sums: HashMap<(u64, u32), SnapSums>,
}

/// (seq, at_ns, tx bytes, rx bytes) of snapshots.
type SnapSums = std::collections::VecDeque<(u64, u64, u64, u64)>;

/// Doorbell series key (host, GPU, QPN when per QP) → the endpoints that ring.
type DoorbellGroups<'a> = BTreeMap<(String, Option<u32>, Option<u32>), Vec<(&'a ProcKey, u32)>>;

impl ViewCache {
    /// Cumulative (tx, rx) of `p.history[i]`, from the cache when it was seen before. `cur` is a
    /// cursor into `list` for snapshots asked for in ascending time (one walk, no searches).
    fn totals(list: &mut SnapSums, cur: &mut usize, s: &Snapshot) -> (u64, u64) {
        while *cur < list.len() && list[*cur].1 < s.at_ns {
            *cur += 1;
        }
        let found = *cur;
        if let Some(e) = list.get(found)
            && e.0 == s.seq
            && e.1 == s.at_ns
        {
            return (e.2, e.3);
        }
        let x = snapshot_sums(s);
        if found == list.len() {
            list.push_back((s.seq, s.at_ns, x.tx, x.rx));
        }
        (x.tx, x.rx)
    }
}

/// Builds the whole view model. Pure: the same model and options give the same view.
pub fn build_view(model: &Model, opts: &ViewOptions) -> ViewModel {
    build_view_cached(model, opts, &mut ViewCache::default())
}

/// `build_view` with a cache kept between frames.
pub fn build_view_cached(model: &Model, opts: &ViewOptions, cache: &mut ViewCache) -> ViewModel {
    let mut vm = ViewModel::default();
    build_view_into(model, opts, cache, &mut vm);
    vm
}

/// `build_view_cached` into the view model of the previous frame (the dashboard's 4 Hz loop): the
/// result equals a fresh build, but the endpoint rows (thousands on a large job) reuse their
/// buffers instead of being freed and allocated again.
pub fn build_view_into(
    model: &Model,
    opts: &ViewOptions,
    cache: &mut ViewCache,
    vm: &mut ViewModel,
) {
    let t = match (opts.at, opts.now_ns) {
        (None, Some(now)) => view_time(model, None).max(now),
        (at, _) => view_time(model, at),
    };
    // Processes visible at t: every one that had started by then (all of them when live).
    let procs: Vec<ProcAt> = model
        .processes
        .iter()
        .filter(|(_, p)| opts.at.is_none() || p.identity.start_ns == 0 || p.identity.start_ns <= t)
        .map(|(k, p)| proc_at(k, p, t, opts.window))
        .collect();

    let mut n_rows = 0usize;
    vm.processes.clear();
    let mut status = StatusCounters::default();
    let mut drops = DropCounters::default();

    let ranks: BTreeSet<u32> = procs.iter().filter_map(|a| a.p.identity.rank).collect();
    let hosts: BTreeSet<&str> = procs.iter().map(|a| a.key.host.as_str()).collect();
    let rank_pos: FxMap<u32, usize> = ranks.iter().enumerate().map(|(i, r)| (*r, i)).collect();
    let host_pos: HashMap<&str, usize> = hosts.iter().enumerate().map(|(i, h)| (*h, i)).collect();
    // Address hash → (owning process, its rank, its host's matrix index).
    let owners: FxMap<u64, (&ProcKey, Option<u32>, Option<usize>)> = model
        .processes
        .iter()
        .flat_map(|(k, p)| {
            let rank = p.identity.rank;
            let hi = host_pos.get(k.host.as_str()).copied();
            p.identity
                .own_addr_hashes
                .iter()
                .map(move |h| (*h, (k, rank, hi)))
        })
        .filter(|(h, _)| *h != 0)
        .collect();
    // QPs by number: the peer QP of devx QPs (no address hash) and of every QP for the GPU
    // matrix. Built only when some QP lacks a resolvable hash or names a GPU.
    let mut qps = QpIndex::default();
    let mut key_pos: HashMap<&ProcKey, u32> = HashMap::new();
    let need_qps = procs.iter().any(|a| {
        a.p.endpoints.values().any(|d| {
            d.qpn.is_some() && (d.gpu.is_some() || !owners.contains_key(&d.peer.addr_hash))
        })
    });
    if need_qps {
        key_pos = procs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.key, i as u32))
            .collect();
        for (i, a) in procs.iter().enumerate() {
            for d in a.p.endpoints.values() {
                if let Some(q) = d.qpn {
                    qps.add(i as u32, d.id, q, d.peer.qpn);
                }
            }
        }
    }
    // GPU matrix cells: (process, GPU or host memory) pairs → (window bytes, rate now).
    let mut gpu_cells: GpuCells = BTreeMap::new();
    let mut eps: Vec<u32> = Vec::new();
    let square = |n: usize| vec![vec![0.0f64; n]; n];
    let mut rank_m = (square(ranks.len()), square(ranks.len()));
    let mut node_m = (square(hosts.len()), square(hosts.len()));
    let mut node_rows: BTreeMap<&str, NodeRow> = BTreeMap::new();
    let mut rank_rows: BTreeMap<u32, RankRow> = BTreeMap::new();
    let mut gpus: BTreeMap<(String, u32, u32), GpuRow> = BTreeMap::new();
    let mut modes: BTreeSet<&str> = BTreeSet::new();
    let (mut tx_now, mut rx_now) = (0.0, 0.0);

    for (pi, a) in procs.iter().enumerate() {
        let pi = pi as u32;
        let p = a.p;
        drops.add(&a.drops);
        modes.insert(p.identity.mode().name());
        let tot = a
            .eps
            .iter()
            .map(|(_, e)| e.tot)
            .fold(Sums::default(), |x, y| Sums {
                tx: x.tx + y.tx,
                rx: x.rx + y.rx,
                rx1: x.rx1 + y.rx1,
                ops: x.ops + y.ops,
                doorbells: x.doorbells + y.doorbells,
            });
        let mut prow = ProcessRow {
            host: a.key.host.clone(),
            pid: a.key.pid,
            rank: p.identity.rank,
            mode: p.identity.mode().name().to_string(),
            layers: layer_names(p.identity.layers)
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            drops: a.drops.total_events_lost(),
            exited: p.exited,
            ..Default::default()
        };
        let (mut win_tx, mut win_rx) = (0u64, 0u64);

        // Every endpoint with traffic, defined QPs/endpoints that have none yet (idle), and the
        // unattributed row of every reporting process, even when it is zero: totals never hide it.
        eps.clear();
        eps.extend(a.eps.iter().map(|(ep, _)| ep));
        if a.has_data {
            eps.push(UNATTRIBUTED_EP);
        }
        for (id, d) in &p.endpoints {
            if matches!(
                d.kind,
                EndpointKind::UcpEp
                    | EndpointKind::FiEp
                    | EndpointKind::VerbsQp
                    | EndpointKind::DevxQp
            ) {
                eps.push(*id);
            }
        }
        eps.sort_unstable();
        eps.dedup();
        let host_i = host_pos.get(a.key.host.as_str()).copied();
        let rank_i = p.identity.rank.and_then(|r| rank_pos.get(&r).copied());
        for &ep in &eps {
            let def = p.endpoints.get(&ep);
            let empty = EpSums::default();
            let es = a.eps.get(ep).unwrap_or(&empty);
            let (ts, ws, ns) = (es.tot, es.win, es.now);
            win_tx += ws.tx;
            win_rx += ws.rx;
            let hash_peer = def.and_then(|d| owners.get(&d.peer.addr_hash).copied());
            let peer_ep = if need_qps {
                def.and_then(|d| Some((d.qpn?, d.peer.qpn?)))
                    .and_then(|(l, r)| {
                        let known = hash_peer.and_then(|x| key_pos.get(x.0).copied());
                        qps.resolve(pi, l, r, known)
                    })
            } else {
                None
            };
            let peer_of = hash_peer.or_else(|| {
                let (pp, _) = peer_ep?;
                let pa = procs.get(pp as usize)?;
                let hi = host_pos.get(pa.key.host.as_str()).copied();
                Some((pa.key, pa.p.identity.rank, hi))
            });
            let peer_key = peer_of.map(|x| x.0);
            let peer_rank = peer_of.and_then(|x| x.1);
            // The row of the previous build is overwritten in place: its strings and vectors keep
            // their buffers, so a steady view allocates nothing per row.
            if n_rows == vm.endpoints.len() {
                vm.endpoints.push(EndpointRow::default());
            }
            let row = &mut vm.endpoints[n_rows];
            n_rows += 1;
            row.peer.id.clear();
            row.peer.host.clear();
            row.peer.rank = None;
            if let Some(d) = def {
                match d.peer.qpn {
                    Some(q) => set_fmt(&mut row.peer.id, format_args!("0x{q:x}")),
                    None if peer_key.is_none() => set_str(&mut row.peer.id, &d.peer.text),
                    None => {}
                }
            }
            if let Some(pk) = peer_key {
                set_str(&mut row.peer.host, &pk.host);
                row.peer.rank = peer_rank;
                if peer_rank.is_none() {
                    set_fmt(&mut row.peer.id, format_args!("pid {}", pk.pid));
                }
            }
            // Operations by code, most first (ties by name).
            let n_ops = es.ops.count();
            row.ops_by_opcode.truncate(n_ops);
            while row.ops_by_opcode.len() < n_ops {
                row.ops_by_opcode.push((String::new(), 0));
            }
            for (slot, (op, n)) in row.ops_by_opcode.iter_mut().zip(es.ops.iter()) {
                op_name_into(&mut slot.0, op);
                slot.1 = n;
            }
            row.ops_by_opcode
                .sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
            let is_gpu_qp = def.is_some_and(|d| d.kind == EndpointKind::DevxQp || d.gpu.is_some());
            set_str(&mut row.host, &a.key.host);
            row.rank = p.identity.rank;
            row.pid = a.key.pid;
            set_str(&mut row.layer, def.map_or("", |d| d.layer.short()));
            local_id_into(&mut row.local_id, p, ep);
            set_str(&mut row.transport, def.map_or("", |d| d.transport.as_str()));
            match p.ep_state.get(&ep) {
                Some(st) if !st.is_empty() => set_str(&mut row.state, st),
                _ if p.exited => set_str(&mut row.state, "exited"),
                _ => row.state.clear(),
            }
            row.tx_bps = per_s(ns.tx, a.now_ns);
            row.rx_bps = per_s(ns.rx, a.now_ns);
            row.tx_bps_window = per_s(ws.tx, a.window_ns);
            row.rx_bps_window = per_s(ws.rx, a.window_ns);
            row.tx_bytes = ts.tx;
            row.rx_bytes = ts.rx;
            row.ops_per_s = per_s(ns.ops, a.now_ns);
            row.doorbells_per_s =
                (is_gpu_qp || ts.doorbells > 0).then(|| per_s(ns.doorbells, a.now_ns));
            row.posted = None;
            row.unattributed = ep == UNATTRIBUTED_EP;
            let row = &vm.endpoints[n_rows - 1];
            prow.tx_bps += row.tx_bps;
            prow.rx_bps += row.rx_bps;
            prow.ops_per_s += row.ops_per_s;

            // Matrices: bytes in the window and rate now, from this endpoint to its peer (sends,
            // writes) and from the peer to it (one-sided reads).
            let read_bps = per_s(ns.rx1, a.now_ns);
            if let Some((_, _, peer_host_i)) = peer_of {
                if let (Some(i), Some(dr)) = (rank_i, peer_rank)
                    && let Some(&j) = rank_pos.get(&dr)
                {
                    rank_m.0[i][j] += ws.tx as f64;
                    rank_m.1[i][j] += row.tx_bps;
                    rank_m.0[j][i] += ws.rx1 as f64;
                    rank_m.1[j][i] += read_bps;
                }
                if let (Some(i), Some(j)) = (host_i, peer_host_i) {
                    node_m.0[i][j] += ws.tx as f64;
                    node_m.1[i][j] += row.tx_bps;
                    node_m.0[j][i] += ws.rx1 as f64;
                    node_m.1[j][i] += read_bps;
                }
            }
            if let Some((pp, pe)) = peer_ep {
                let mine = def.and_then(|d| d.gpu);
                let theirs = procs
                    .get(pp as usize)
                    .and_then(|x| x.p.endpoints.get(&pe))
                    .and_then(|d| d.gpu);
                if mine.is_some() || theirs.is_some() {
                    let me = GpuKey {
                        process: pi,
                        gpu: mine,
                    };
                    let them = GpuKey {
                        process: pp,
                        gpu: theirs,
                    };
                    if ws.tx > 0 || row.tx_bps > 0.0 {
                        let c = gpu_cells.entry((me, them)).or_default();
                        c.0 += ws.tx as f64;
                        c.1 += row.tx_bps;
                    }
                    if ws.rx1 > 0 || read_bps > 0.0 {
                        let c = gpu_cells.entry((them, me)).or_default();
                        c.0 += ws.rx1 as f64;
                        c.1 += read_bps;
                    }
                }
            }

            if let Some(g) = def.and_then(|d| d.gpu) {
                let gr = gpus
                    .entry((a.key.host.clone(), a.key.pid, g))
                    .or_insert_with(|| GpuRow {
                        host: a.key.host.clone(),
                        pid: a.key.pid,
                        rank: p.identity.rank,
                        gpu: g,
                        ..Default::default()
                    });
                gr.bytes_per_s += row.tx_bps + row.rx_bps;
                gr.doorbells_per_s += per_s(ns.doorbells, a.now_ns);
                for (op, n) in &a.window_ops(ep) {
                    if is_gpu_wqe(*op) && *n > 0 {
                        let name = op_name(*op);
                        match gr.opcode_mix.iter_mut().find(|(k, _)| *k == name) {
                            Some(e) => e.1 += n,
                            None => gr.opcode_mix.push((name, *n)),
                        }
                    }
                }
            }
        }
        let win_tx_bps = per_s(win_tx, a.window_ns);
        let win_rx_bps = per_s(win_rx, a.window_ns);
        tx_now += prow.tx_bps;
        rx_now += prow.rx_bps;

        let n = node_rows
            .entry(a.key.host.as_str())
            .or_insert_with(|| NodeRow {
                host: a.key.host.clone(),
                ..Default::default()
            });
        n.egress_bps += win_tx_bps;
        n.ingress_bps += win_rx_bps;
        n.egress_bytes += tot.tx;
        n.ingress_bytes += tot.rx;
        if let Some(r) = p.identity.rank {
            let rr = rank_rows.entry(r).or_insert_with(|| RankRow {
                rank: r,
                host: a.key.host.clone(),
                ..Default::default()
            });
            rr.egress_bps += win_tx_bps;
            rr.ingress_bps += win_rx_bps;
            rr.egress_bytes += tot.tx;
            rr.ingress_bytes += tot.rx;
        }
        vm.processes.push(prow);
    }

    vm.endpoints.truncate(n_rows);
    vm.nodes = node_rows.into_values().collect();
    vm.ranks = rank_rows.into_values().collect();
    vm.gpus = gpus.into_values().collect();
    vm.matrices = Matrices {
        rank: Matrix {
            labels: ranks.iter().map(|r| format!("r{r}")).collect(),
            bytes: rank_m.0,
            rates: rank_m.1,
        },
        node: Matrix {
            labels: hosts.iter().map(|h| h.to_string()).collect(),
            bytes: node_m.0,
            rates: node_m.1,
        },
        gpu: gpu_matrix(&procs, &gpu_cells),
    };

    let (bw, times) = bandwidth_history(model, t, cache);
    vm.bandwidth_history = bw;
    vm.doorbells = doorbell_model(model, &procs, t, &times, opts.window);

    status.dropped_events = drops.total_events_lost();
    status.coalesced_doorbells = drops.coalesced_doorbells;
    status.unparsable_wqes = drops.unparsable_wqes;
    status.frames_lost = model
        .processes
        .values()
        .filter(|p| p.problem.is_some() && !p.said_bye)
        .count() as u64;
    status.message = model.messages.last().cloned().or_else(|| {
        model
            .processes
            .values()
            .rev()
            .find_map(|p| p.problem.clone())
    });
    vm.status = status;

    let reference = reference(model);
    vm.history_len = reference.map_or(0, |r| r.history.len());
    vm.history_pos = match (reference, opts.at) {
        (Some(r), Some(at)) => idx_at(&r.history, at).unwrap_or(0),
        _ => vm.history_len.saturating_sub(1),
    };

    let start = model
        .processes
        .values()
        .map(|p| p.identity.start_ns)
        .filter(|s| *s > 0)
        .min()
        .unwrap_or(0);
    vm.header = Header {
        source: opts.source.clone(),
        mode: match modes.len() {
            0 => String::new(),
            1 => modes
                .iter()
                .next()
                .map(|m| m.to_string())
                .unwrap_or_default(),
            _ => "mixed".into(),
        },
        nodes: hosts.len() as u32,
        ranks: ranks.len() as u32,
        processes: procs.len() as u32,
        qps: vm.endpoints.iter().filter(|e| !e.unattributed).count() as u32,
        tx_bps: tx_now,
        rx_bps: rx_now,
        window: opts.window.label().to_string(),
        clock: match opts.clock {
            ClockStyle::Wall if t > 0 => wall_clock(t),
            ClockStyle::Wall => String::new(),
            ClockStyle::SinceStart => {
                format!("t+{:.3}s", t.saturating_sub(start) as f64 / 1e9)
            }
        },
    };
}

/// Sample times of the reference timeline that end at `t` (at most SPARK_SAMPLES + 1).
fn sample_times(model: &Model, t: u64) -> Vec<u64> {
    let Some(r) = reference(model) else {
        return Vec::new();
    };
    let Some(end) = idx_at(&r.history, t) else {
        return Vec::new();
    };
    let begin = end.saturating_sub(SPARK_SAMPLES);
    r.history.range(begin..=end).map(|s| s.at_ns).collect()
}

/// Total (tx, rx) bytes/s per sample of the reference timeline up to `t`, oldest first.
fn bandwidth_history(model: &Model, t: u64, cache: &mut ViewCache) -> (Vec<(f64, f64)>, Vec<u64>) {
    let times = sample_times(model, t);
    if times.len() < 2 {
        return (Vec::new(), times);
    }
    let mut cum = vec![(0u64, 0u64); times.len()];
    let mut keep = HashMap::with_capacity(model.processes.len());
    for (k, p) in &model.processes {
        let host = crate::event::fnv1a64(k.host.as_bytes());
        let mut list = cache.sums.remove(&(host, k.pid)).unwrap_or_default();
        // Walk the sample times and the history together (both ascending).
        let mut i = idx_at(&p.history, times[0]).unwrap_or(0);
        let mut last: Option<(usize, (u64, u64))> = None;
        let mut cur = 0usize;
        for (j, tj) in times.iter().enumerate() {
            while i + 1 < p.history.len() && p.history[i + 1].at_ns <= *tj {
                i += 1;
            }
            let Some(snap) = p.history.get(i).filter(|s| s.at_ns <= *tj) else {
                continue;
            };
            let s = match last {
                Some((li, s)) if li == i => s,
                _ => ViewCache::totals(&mut list, &mut cur, snap),
            };
            last = Some((i, s));
            cum[j].0 += s.0;
            cum[j].1 += s.1;
        }
        // Forget what fell out of the sample range.
        while list.front().is_some_and(|e| e.1 < times[0]) {
            list.pop_front();
        }
        keep.insert((host, k.pid), list);
    }
    cache.sums = keep;
    let out = (1..times.len())
        .map(|j| {
            let dt = times[j].saturating_sub(times[j - 1]);
            (
                per_s(cum[j].0.saturating_sub(cum[j - 1].0), dt),
                per_s(cum[j].1.saturating_sub(cum[j - 1].1), dt),
            )
        })
        .collect();
    (out, times)
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

/// (source, destination) → (window bytes, rate now).
type GpuCells = BTreeMap<(GpuKey, GpuKey), (f64, f64)>;

/// The GPU × GPU matrix over the window (see `correlate::gpu`, which builds the recorded one):
/// a row and column per (process, GPU) of every GPU endpoint, and per process host memory that
/// a GPU endpoint talks to. GPU ordinals are the process's own (CUDA_VISIBLE_DEVICES renumbers).
fn gpu_matrix(procs: &[ProcAt], cells: &GpuCells) -> Matrix {
    let keys = gpu::sides(
        cells.keys(),
        procs.iter().enumerate().flat_map(|(i, a)| {
            a.p.endpoints.values().filter_map(move |d| {
                d.gpu.map(|g| GpuKey {
                    process: i as u32,
                    gpu: Some(g),
                })
            })
        }),
    );
    if keys.is_empty() {
        return Matrix::default();
    }
    let n = keys.len();
    let mut bytes = vec![vec![0.0; n]; n];
    let mut rates = vec![vec![0.0; n]; n];
    let pos = |k: &GpuKey| keys.binary_search(k).unwrap_or(0);
    for ((a, b), (w, r)) in cells {
        bytes[pos(a)][pos(b)] += w;
        rates[pos(a)][pos(b)] += r;
    }
    let labels = keys
        .iter()
        .map(|k| {
            procs.get(k.process as usize).map_or_else(String::new, |a| {
                gpu::side_label(a.p.identity.rank, a.key.pid, &a.key.host, k.gpu)
            })
        })
        .collect();
    Matrix {
        labels,
        bytes,
        rates,
    }
}

fn is_gpu_wqe(op: u8) -> bool {
    Op::from_u8(op).is_some_and(|o| o.layer() == Layer::Mlx5 && o != Op::GpuDoorbell)
}

/// Doorbell series per GPU (or per QP when the QP has no GPU) and the latest decoded doorbells.
fn doorbell_model(
    model: &Model,
    procs: &[ProcAt],
    t: u64,
    times: &[u64],
    window: Window,
) -> DoorbellModel {
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
    let mut out = DoorbellModel::default();
    if groups.is_empty() {
        return out;
    }
    let window_from = window
        .seconds()
        .map(|s| t.saturating_sub(s * 1_000_000_000));
    for ((host, gpu, qpn), members) in groups {
        // Cumulative doorbells at each sample time.
        let mut cum = vec![0u64; times.len()];
        let mut intervals = hdrhistogram::Histogram::<u64>::new(3).ok();
        for (key, ep) in &members {
            let Some(p) = model.processes.get(*key) else {
                continue;
            };
            for (j, tj) in times.iter().enumerate() {
                if let Some(i) = idx_at(&p.history, *tj) {
                    cum[j] += p.history[i]
                        .counts
                        .iter()
                        .filter(|c| c.ep == *ep && c.op == db)
                        .map(|c| c.ops)
                        .sum::<u64>();
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
        let rate_history: Vec<f64> = (1..times.len())
            .map(|j| {
                per_s(
                    cum[j].saturating_sub(cum[j - 1]),
                    times[j].saturating_sub(times[j - 1]),
                )
            })
            .collect();
        let mut rates = hdrhistogram::Histogram::<u64>::new(3).ok();
        if let Some(h) = rates.as_mut() {
            for j in 1..times.len() {
                if window_from.is_none_or(|f| times[j] > f) {
                    let _ = h.record(rate_history[j - 1].round() as u64);
                }
            }
        }
        let label = match (gpu, qpn) {
            (Some(g), _) => format!("{host} GPU{g}"),
            (None, Some(q)) => format!("QP 0x{q:x}"),
            _ => host.clone(),
        };
        out.series.push(DoorbellSeries {
            label,
            host,
            gpu,
            qpn,
            rate_now: rate_history.last().copied().unwrap_or(0.0),
            rate_history,
            interval_ns: intervals.as_ref().and_then(percentiles),
            rate_percentiles: rates.as_ref().and_then(percentiles),
        });
    }
    out.recent = recent_doorbells(model, procs, t);
    out
}

/// The latest decoded doorbells (with the WQE events after each) at or before `t`, oldest first.
fn recent_doorbells(model: &Model, procs: &[ProcAt], t: u64) -> Vec<DoorbellRecord> {
    let start = model
        .processes
        .values()
        .map(|p| p.identity.start_ns)
        .filter(|s| *s > 0)
        .min()
        .unwrap_or(0);
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
                    pi: e.aux as u32,
                    // No WQE seen for it (yet): recovery off, not sampled, or still batched.
                    opcode: "—".into(),
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
        r.opcode = op_name(e.op);
        r.raddr = e.addr;
        r.rkey = e.aux as u32;
    }
    r.wqes += 1;
    r.bytes += e.bytes;
}

/// Local time of day for a CLOCK_REALTIME ns value, "HH:MM:SS".
fn wall_clock(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as libc::time_t;
    // SAFETY: `tm` is plain old data; localtime_r writes it and only reads `secs`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call; localtime_r is thread-safe.
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if ok {
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    } else {
        let s = secs.rem_euclid(86_400);
        format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EndpointDef, Identity, Layer, OpCount, Peer as EvPeer};
    use crate::wire::Frame;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_700_000_000 * S;

    fn ident(pid: u32, rank: u32, host: &str, own: u64) -> Identity {
        Identity {
            host: host.into(),
            pid,
            rank: Some(rank),
            mode: 1,
            layers: Layer::Ucx.bit(),
            own_addr_hashes: vec![own],
            start_ns: T0,
            ..Default::default()
        }
    }

    fn ep(id: u32, peer_hash: u64) -> EndpointDef {
        EndpointDef {
            id,
            layer: Layer::Ucx,
            kind: EndpointKind::UcpEp,
            label: format!("ep#{id}"),
            transport: "tcp".into(),
            peer: EvPeer {
                addr_hash: peer_hash,
                ..Default::default()
            },
            qpn: None,
            gpu: None,
            created_ns: T0,
        }
    }

    fn snap(at: u64, seq: u64, counts: &[(u32, Op, u64, u64)]) -> Snapshot {
        Snapshot {
            at_ns: at,
            seq,
            counts: counts
                .iter()
                .map(|(ep, op, ops, bytes)| OpCount {
                    ep: *ep,
                    op: *op as u8,
                    ops: *ops,
                    bytes: *bytes,
                    errors: 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Two ranks on two hosts; rank 0 sends 1 MB/s to rank 1 for 20 s, then 3 MB/s; rank 1 has
    /// some unattributed receives.
    fn model() -> Model {
        let mut m = Model::new();
        let a = ProcKey {
            host: "n0".into(),
            pid: 10,
        };
        let b = ProcKey {
            host: "n1".into(),
            pid: 20,
        };
        m.apply(&a, Frame::hello(ident(10, 0, "n0", 0xa)));
        m.apply(&b, Frame::hello(ident(20, 1, "n1", 0xb)));
        m.apply(&a, Frame::Endpoints(vec![ep(1, 0xb)]));
        m.apply(&b, Frame::Endpoints(vec![ep(1, 0xa)]));
        let mut tx = 0u64;
        for i in 1..=30u64 {
            tx += if i <= 20 { 1_000_000 } else { 3_000_000 };
            m.apply(
                &a,
                Frame::Snapshot(snap(T0 + i * S, i, &[(1, Op::UcxTagSend, i, tx)])),
            );
            m.apply(
                &b,
                Frame::Snapshot(snap(
                    T0 + i * S,
                    i,
                    &[(1, Op::UcxTagRecv, i, tx), (0, Op::UcxTagRecv, i, 100 * i)],
                )),
            );
        }
        m
    }

    fn opts(window: Window, at: Option<u64>) -> ViewOptions {
        ViewOptions {
            window,
            at,
            source: "test".into(),
            clock: ClockStyle::SinceStart,
            now_ns: None,
        }
    }

    #[test]
    fn rates_now_window_total() {
        let m = model();
        let vm = build_view(&m, &opts(Window::S10, None));
        let e = vm
            .endpoints
            .iter()
            .find(|e| e.pid == 10 && e.local_id == "ep#1")
            .expect("rank 0 endpoint");
        assert_eq!(e.tx_bps, 3e6);
        assert_eq!(e.tx_bps_window, 3e6);
        assert_eq!(e.tx_bytes, 20_000_000 + 30_000_000);
        assert_eq!(e.peer.host, "n1");
        assert_eq!(e.peer.rank, Some(1));
        assert_eq!(e.ops_by_opcode, vec![("tag_send".to_string(), 30)]);
        let all = build_view(&m, &opts(Window::All, None));
        let e = all
            .endpoints
            .iter()
            .find(|e| e.pid == 10 && !e.unattributed)
            .expect("row");
        assert!((e.tx_bps_window - 50e6 / 30.0).abs() < 1.0);
        assert_eq!(vm.header.tx_bps, 3e6);
        assert_eq!(vm.header.clock, "t+30.000s");
        assert_eq!(vm.header.ranks, 2);
        assert_eq!(vm.header.qps, 2);
        assert_eq!(vm.history_len, 30);
        assert_eq!(vm.history_pos, 29);
    }

    #[test]
    fn building_into_a_previous_view_equals_a_fresh_build() {
        let m = model();
        let mut cache = ViewCache::default();
        let mut vm = ViewModel::default();
        // A bigger view first (doorbells, GPU rows, more endpoints), then smaller ones into it.
        let mut big = model();
        let k = ProcKey {
            host: "n2".into(),
            pid: 30,
        };
        big.apply(&k, Frame::hello(ident(30, 2, "n2", 0xc)));
        big.apply(&k, Frame::Endpoints((1..=5).map(|i| ep(i, 0xa)).collect()));
        build_view_into(&big, &opts(Window::All, None), &mut cache, &mut vm);
        assert!(vm.endpoints.len() > 4);
        for (w, at) in [
            (Window::S10, None),
            (Window::S1, Some(T0 + 15 * S)),
            (Window::All, None),
        ] {
            build_view_into(&m, &opts(w, at), &mut cache, &mut vm);
            assert_eq!(vm, build_view(&m, &opts(w, at)), "{w:?} {at:?}");
        }
    }

    #[test]
    fn unattributed_row_and_matrices() {
        let m = model();
        let vm = build_view(&m, &opts(Window::S10, None));
        let u = vm
            .endpoints
            .iter()
            .find(|e| e.unattributed && e.pid == 20)
            .expect("unattributed row");
        assert_eq!(u.pid, 20);
        assert_eq!(u.local_id, "(unattributed)");
        assert_eq!(u.rx_bps, 100.0);
        assert_eq!(vm.matrices.rank.labels, vec!["r0", "r1"]);
        assert_eq!(vm.matrices.rank.bytes[0][1], 30e6);
        assert_eq!(vm.matrices.rank.rates[0][1], 3e6);
        assert_eq!(vm.matrices.node.labels, vec!["n0", "n1"]);
        assert_eq!(vm.matrices.node.bytes[0][1], 30e6);
        assert!(vm.matrices.gpu.labels.is_empty());
        assert_eq!(vm.nodes.len(), 2);
        assert_eq!(vm.ranks[0].egress_bps, 3e6);
        assert_eq!(vm.ranks[1].ingress_bps, 3e6 + 100.0);
        assert!(vm.doorbells.series.is_empty());
    }

    #[test]
    fn history_positions_and_sparkline() {
        let m = model();
        let at = step(&m, None, -15);
        assert_eq!(at, Some(T0 + 15 * S));
        let vm = build_view(&m, &opts(Window::S1, at));
        assert_eq!(vm.history_pos, 14);
        let e = vm
            .endpoints
            .iter()
            .find(|e| e.pid == 10 && !e.unattributed)
            .expect("row");
        assert_eq!(e.tx_bps, 1e6);
        assert_eq!(e.tx_bytes, 15_000_000);
        assert_eq!(
            step(&m, at, 100),
            None,
            "stepping past the end returns to live"
        );
        assert_eq!(step(&m, at, -100), Some(T0 + S));
        let live = build_view(&m, &opts(Window::S10, None));
        assert_eq!(live.bandwidth_history.len(), 29);
        assert_eq!(live.bandwidth_history[0].0, 1e6);
        assert_eq!(live.bandwidth_history[28].0, 3e6);
    }

    #[test]
    fn exited_process_keeps_totals_and_goes_quiet() {
        let mut m = model();
        let a = ProcKey {
            host: "n0".into(),
            pid: 10,
        };
        m.apply(&a, Frame::Bye { at_ns: T0 + 30 * S });
        // The other process reports for 5 more seconds.
        let b = ProcKey {
            host: "n1".into(),
            pid: 20,
        };
        for i in 31..=35u64 {
            m.apply(&b, Frame::Snapshot(snap(T0 + i * S, i, &[])));
        }
        let vm = build_view(&m, &opts(Window::S10, None));
        let p = vm.processes.iter().find(|p| p.pid == 10).expect("row");
        assert!(p.exited);
        assert_eq!(p.tx_bps, 0.0);
        let e = vm
            .endpoints
            .iter()
            .find(|e| e.pid == 10 && !e.unattributed)
            .expect("row");
        assert_eq!(e.tx_bytes, 50_000_000);
        assert_eq!(e.state, "exited");
    }

    #[test]
    fn live_now_rates_fall_to_zero_when_everyone_is_quiet() {
        let m = model();
        let mut o = opts(Window::S10, None);
        o.now_ns = Some(T0 + 40 * S);
        let vm = build_view(&m, &o);
        assert_eq!(vm.header.tx_bps, 0.0);
        let e = vm
            .endpoints
            .iter()
            .find(|e| e.pid == 10 && !e.unattributed)
            .expect("row");
        assert_eq!(e.tx_bytes, 50_000_000, "totals kept");
        assert_eq!(e.tx_bps_window, 0.0, "nothing in the last 10 s");
    }

    #[test]
    fn doorbells_from_sampled_events() {
        let mut m = Model::new();
        let k = ProcKey {
            host: "g".into(),
            pid: 1,
        };
        m.apply(&k, Frame::hello(ident(1, 0, "g", 0)));
        let mut d = ep(5, 0);
        d.layer = Layer::Mlx5;
        d.kind = EndpointKind::DevxQp;
        d.qpn = Some(0x2a40);
        d.gpu = Some(0);
        m.apply(&k, Frame::Endpoints(vec![d]));
        for i in 1..=4u64 {
            m.apply(
                &k,
                Frame::Snapshot(snap(
                    T0 + i * S,
                    i,
                    &[
                        (5, Op::GpuDoorbell, 1000 * i, 0),
                        (5, Op::GpuWrite, 1000 * i, 65536 * 1000 * i),
                    ],
                )),
            );
        }
        // No clock samples: tsc is read as ns.
        let evs: Vec<Event> = (0..10u64)
            .flat_map(|i| {
                let tsc = T0 + 3 * S + i * 1000;
                [
                    Event {
                        tsc,
                        ep: 5,
                        op: Op::GpuDoorbell as u8,
                        aux: i as u16,
                        ..Default::default()
                    },
                    Event {
                        tsc,
                        ep: 5,
                        op: Op::GpuWrite as u8,
                        bytes: 65536,
                        addr: 0x7f00_0000,
                        aux: 0x1a2b,
                        ..Default::default()
                    },
                ]
            })
            .collect();
        m.apply(&k, Frame::Events(evs));
        let vm = build_view(&m, &opts(Window::S10, None));
        assert_eq!(vm.doorbells.series.len(), 1);
        let s = &vm.doorbells.series[0];
        assert_eq!(s.gpu, Some(0));
        assert_eq!(s.rate_now, 1000.0);
        let iv = s.interval_ns.expect("intervals");
        assert!((iv.p50 - 1000.0).abs() < 10.0, "{iv:?}");
        assert_eq!(vm.doorbells.recent.len(), 10);
        let r = &vm.doorbells.recent[9];
        assert_eq!((r.qpn, r.pi, r.wqes, r.bytes), (0x2a40, 9, 1, 65536));
        assert_eq!(r.opcode, "RDMA_WRITE");
        assert_eq!(vm.gpus.len(), 1);
        assert_eq!(vm.gpus[0].doorbells_per_s, 1000.0);
        assert!(
            vm.endpoints[0].unattributed,
            "a zero unattributed row is still shown"
        );
        let e = &vm.endpoints[1];
        assert_eq!(e.local_id, "0x2a40");
        assert_eq!(e.doorbells_per_s, Some(1000.0));
    }
}
