//! NCCL collectives across the processes of the model, live: each process's latest
//! `Frame::Nccl` (`nccl::live::NcclLive`) grouped by communicator (NCCL's `commId`, the same on
//! every rank): rows per collective, the ranks' arrival at the latest collectives (spread, the
//! last rank to arrive), and the hung collective: the oldest collective a rank started that has
//! not completed after the threshold, with the ranks it waits for. Pure over (model, view time).

use std::collections::BTreeMap;

use super::Model;
use super::model::ProcessState;
use crate::nccl::format::{self, ALGOS, FUNCS, PROTOS, state};
use crate::nccl::live::{CommLive, CommWaits, NcclLive, OpWait};

/// A collective open longer than this on some rank is reported as hung.
pub const HANG_NS: u64 = 2_000_000_000;

/// CLOCK_REALTIME now, ns: the view time of a live front end.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One process of a communicator, as its latest frame says.
#[derive(Clone, Debug, PartialEq)]
pub struct RankView {
    pub host: String,
    pub pid: u32,
    pub rank: u32,
    pub started: u64,
    pub completed: u64,
    /// Sequence number of the newest collective started / completed.
    pub last_started: Option<u64>,
    pub last_completed: Option<u64>,
    /// The oldest open collective: (sequence number, function, ns open at the view time).
    pub oldest_open: Option<(u64, String, u64)>,
    /// Among the latest collectives every rank started: how often this rank came last, and its
    /// mean lag behind the first rank to arrive.
    pub last_arrivals: u64,
    /// How often its kernel started last on the GPU (KernelCh events).
    pub gpu_last_arrivals: u64,
    pub mean_lag_ns: u64,
    /// Its process sent nothing for longer than the threshold (stopped, or gone without a
    /// goodbye) and has not exited.
    pub silent_ns: Option<u64>,
    pub exited: bool,
    /// Where its oldest open call waits, per proxy operation (channel, side, peer), from NCCL's
    /// proxy-step states: what the Collectives view lists.
    pub waits: Vec<WaitView>,
}

/// One proxy operation of a rank's oldest open call, and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitView {
    pub rank: u32,
    pub channel: u8,
    pub send: bool,
    /// The rank it sends to or receives from.
    pub peer: u32,
    /// What it waits for.
    pub what: WaitKind,
    /// How long it has been in that state at the view time.
    pub for_ns: u64,
    /// The QP its last work request went to, when known: (QPN, send WRs outstanding while a
    /// signaled one is awaited (0 otherwise), none completed for ns).
    pub qp: Option<(u32, u64, u64)>,
    pub steps_done: u32,
    pub steps: u32,
}

/// Where a proxy operation waits, from its oldest unfinished step's state; the order is how
/// close each is to the cause of a hang (the network first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WaitKind {
    /// SendWait with its QP's work outstanding: posted, the network does not complete it.
    Network,
    /// SendWait, nothing known outstanding on its QP.
    SendCompletion,
    /// SendGPUWait: the local GPU has not produced the data.
    GpuProduce,
    /// RecvGPUWait / RecvFlushWait: the local GPU has not consumed (or the flush not completed).
    GpuConsume,
    /// SendPeerWait: the peer has not granted credit (posted its receive buffer).
    PeerCredit,
    /// RecvWait: no data from the peer.
    Data,
    /// No step in flight.
    Idle,
}

impl WaitView {
    /// "r2→r3 ch1 waits on the network (QP 0x2a1: 3 WRs, none completed 4.1s)".
    pub fn text(&self) -> String {
        let edge = if self.send {
            format!("r{}→r{} ch{}", self.rank, self.peer, self.channel)
        } else {
            format!("r{}←r{} ch{}", self.rank, self.peer, self.channel)
        };
        let what = match self.what {
            WaitKind::Network => match self.qp {
                Some((qpn, n, ns)) => format!(
                    "waits on the network (QP 0x{qpn:x}: {} WR{}, none completed {:.1}s)",
                    super::count_text(n),
                    if n == 1 { "" } else { "s" },
                    ns as f64 / 1e9
                ),
                None => "waits on the network".into(),
            },
            WaitKind::SendCompletion => "waits for its send to complete".into(),
            WaitKind::GpuProduce => format!("waits for r{}'s GPU to produce", self.rank),
            WaitKind::GpuConsume => format!("waits for r{}'s GPU to consume", self.rank),
            WaitKind::PeerCredit => format!("waits for r{}'s credit", self.peer),
            WaitKind::Data => format!("waits for data from r{}", self.peer),
            WaitKind::Idle => "has no step in flight".into(),
        };
        format!("{edge} {what}")
    }

    /// The state's short name, as the Collectives view prints it.
    pub fn state_name(&self) -> &'static str {
        match self.what {
            WaitKind::Network => "network",
            WaitKind::SendCompletion => "send done",
            WaitKind::GpuProduce => "GPU produce",
            WaitKind::GpuConsume => "GPU consume",
            WaitKind::PeerCredit => "peer credit",
            WaitKind::Data => "data",
            WaitKind::Idle => "idle",
        }
    }
}

/// One row per (communicator, collective, algorithm, protocol): the figures of the rank that
/// completed the most (count, bytes), the slowest rank's time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollRowView {
    pub func: String,
    pub algo: String,
    pub proto: String,
    pub channels: u32,
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    pub busbw_gbs: f64,
    /// Calls open now, summed over the ranks.
    pub open: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommView {
    pub comm_id: u64,
    pub name: String,
    pub nranks: u32,
    pub rows: Vec<CollRowView>,
    pub ranks: Vec<RankView>,
    /// Over the latest collectives every rank reported a start of: how many, the median and
    /// largest spread between the first and the last rank, the last rank at the largest.
    pub arrivals: u64,
    pub median_spread_ns: u64,
    pub max_spread_ns: u64,
    pub max_spread_last_rank: Option<u32>,
    /// The same from the GPU's view (each rank's first kernel start of a collective, NCCL's
    /// KernelCh events); 0 / none: no kernel events.
    pub gpu_arrivals: u64,
    pub gpu_median_spread_ns: u64,
    pub gpu_max_spread_ns: u64,
    pub gpu_max_spread_last_rank: Option<u32>,
}

/// A collective some rank started and that has not completed after the threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct Hung {
    pub comm_id: u64,
    pub func: String,
    pub seq: u64,
    pub nranks: u32,
    /// How long it has waited (since the later of its host call and the previous completion)
    /// on the rank that waited longest for it.
    pub open_ns: u64,
    /// The ranks it waits for: those that have not started it (or of which nothing is known),
    /// and those whose process went silent; `silent` says which of them are silent.
    pub waiting_for: Vec<u32>,
    pub silent: Vec<u32>,
    /// The ranks that started it and have not completed it.
    pub incomplete: Vec<u32>,
    /// A point-to-point call (Send, Recv; AlltoAll's parts): `seq` is its number among the
    /// rank's calls of that function to `peer`.
    pub p2p: Option<P2pHang>,
    /// When every rank is in it and reports: where it waits, the wait closest to the cause
    /// first (`WaitKind` order), from each rank's proxy-step states.
    pub wheres: Vec<WaitView>,
}

/// The ranks of a hung point-to-point call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pHang {
    pub rank: u32,
    pub peer: u32,
    pub send: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectivesView {
    pub comms: Vec<CommView>,
    pub hung: Vec<Hung>,
    /// Summed over the processes: records the plugin could not keep, events of types it does
    /// not read, events naming calls it never saw start.
    pub dropped_records: u64,
    pub unknown_events: u64,
    pub untracked: u64,
}

struct Member<'m> {
    host: &'m str,
    pid: u32,
    last_ns: u64,
    exited: bool,
    c: &'m CommLive,
    /// Where it waits (NCCL's proxy-step states), when its preload sends it.
    w: Option<&'m CommWaits>,
    /// Its calls as the user made them and its kernels' GPU starts (protocol 6).
    k: Option<&'m crate::nccl::live::CommCalls>,
    p: &'m ProcessState,
}

/// The collectives of every process at view time `t` (CLOCK_REALTIME ns), hung after
/// `hang_ns`.
pub fn collectives(model: &Model, t: u64, hang_ns: u64) -> CollectivesView {
    let mut v = CollectivesView::default();
    let mut by_comm: BTreeMap<u64, Vec<Member>> = BTreeMap::new();
    for (key, p) in &model.processes {
        let Some(n) = p.nccl.as_ref() else { continue };
        add_losses(&mut v, n);
        let last_ns = p
            .history
            .last_head()
            .map_or(n.at_ns, |s| s.at_ns)
            .max(n.at_ns);
        for c in &n.comms {
            let w = p.nccl_waits.as_ref().and_then(|w| {
                w.comms
                    .iter()
                    .find(|x| x.comm_id == c.comm_id && x.rank == c.rank)
            });
            let k = p.nccl_calls.as_ref().and_then(|k| {
                k.comms
                    .iter()
                    .find(|x| x.comm_id == c.comm_id && x.rank == c.rank)
            });
            by_comm.entry(c.comm_id).or_default().push(Member {
                host: &key.host,
                pid: key.pid,
                last_ns,
                exited: p.exited,
                c,
                w,
                k,
                p,
            });
        }
    }
    for (comm_id, mut ms) in by_comm {
        ms.sort_by_key(|m| m.c.rank);
        v.comms.push(comm_view(comm_id, &ms, t, hang_ns));
        if let Some(h) = hung(comm_id, &ms, t, hang_ns) {
            v.hung.push(h);
        }
        if let Some(h) = hung_p2p(comm_id, &ms, t, hang_ns) {
            v.hung.push(h);
        }
    }
    v
}

fn add_losses(v: &mut CollectivesView, n: &NcclLive) {
    v.dropped_records += n.dropped_records;
    v.unknown_events += n.unknown_events;
    v.untracked += n.untracked;
}

fn silent(m: &Member, t: u64, hang_ns: u64) -> Option<u64> {
    let quiet = t.saturating_sub(m.last_ns);
    (!m.exited && quiet > hang_ns).then_some(quiet)
}

fn comm_view(comm_id: u64, ms: &[Member], t: u64, hang_ns: u64) -> CommView {
    let nranks = ms.iter().map(|m| m.c.nranks).max().unwrap_or(0);
    let mut rows: BTreeMap<(u8, u8, u8, bool), CollRowView> = BTreeMap::new();
    for m in ms {
        for r in &m.c.rows {
            let mut func = format::name(FUNCS, r.func).to_string();
            if r.to_self {
                func.push_str(" (self)");
            }
            let p2p = r.algo == 255 && r.proto == 255;
            let row = rows
                .entry((r.func, r.algo, r.proto, r.to_self))
                .or_insert_with(|| CollRowView {
                    func,
                    algo: if p2p {
                        "-"
                    } else {
                        format::name(ALGOS, r.algo)
                    }
                    .into(),
                    proto: if p2p {
                        "-"
                    } else {
                        format::name(PROTOS, r.proto)
                    }
                    .into(),
                    ..Default::default()
                });
            row.channels = row.channels.max(r.channels as u32);
            if r.count > row.count || (r.count == row.count && r.bytes > row.bytes) {
                row.count = r.count;
                row.bytes = r.bytes;
            }
            row.time_ns = row.time_ns.max(r.time_ns);
            row.open += r.open;
        }
    }
    // Calls NCCL made of point-to-point parts (AlltoAll, Gather, Scatter, a user's Group): their
    // own rows, before the Send/Recv rows of their parts.
    let mut api: BTreeMap<u8, CollRowView> = BTreeMap::new();
    for m in ms {
        for r in m.k.map(|k| k.api_rows.as_slice()).unwrap_or(&[]) {
            let row = api.entry(r.func).or_insert_with(|| CollRowView {
                func: format::func_name(r.func).to_string(),
                algo: "-".into(),
                proto: "-".into(),
                ..Default::default()
            });
            if r.count > row.count || (r.count == row.count && r.bytes > row.bytes) {
                row.count = r.count;
                row.bytes = r.bytes;
            }
            row.time_ns = row.time_ns.max(r.time_ns);
            row.open += r.open;
        }
    }
    let rows: Vec<CollRowView> = api
        .into_values()
        .chain(rows.into_values())
        .map(|mut r| {
            let (size, factor) = bus(&r.func, r.bytes, nranks as u64);
            if r.time_ns > 0 {
                r.busbw_gbs = size as f64 * factor / r.time_ns as f64;
            }
            r
        })
        .collect();
    // Arrivals: the sequence numbers every rank of the communicator reported a start of.
    // Collectives by sequence number, calls made of parts (AlltoAll...) by function and number.
    let mut starts: BTreeMap<(u8, u64), Vec<(u32, u64)>> = BTreeMap::new();
    let mut gpu_starts: BTreeMap<u64, Vec<(u32, u64)>> = BTreeMap::new();
    for m in ms {
        for &(seq, ns) in &m.c.recent {
            starts.entry((255, seq)).or_default().push((m.c.rank, ns));
        }
        if let Some(k) = m.k {
            for &(f, n, ns) in &k.api_recent {
                starts.entry((f, n)).or_default().push((m.c.rank, ns));
            }
            for &(seq, ns) in &k.gpu_recent {
                gpu_starts.entry(seq).or_default().push((m.c.rank, ns));
            }
        }
    }
    let full = ms.len() as u32 >= nranks.max(2);
    let mut spreads = Vec::new();
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut lag: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut worst: Option<(u64, u32)> = None;
    for v in starts.values().filter(|v| full && v.len() as u32 >= nranks) {
        let lo = v.iter().map(|x| x.1).min().unwrap_or(0);
        let Some(&(lr, hi)) = v.iter().max_by_key(|x| x.1) else {
            continue;
        };
        spreads.push(hi - lo);
        *last.entry(lr).or_default() += 1;
        for &(r, ns) in v {
            let e = lag.entry(r).or_default();
            e.0 += ns - lo;
            e.1 += 1;
        }
        if worst.is_none_or(|w| hi - lo >= w.0) {
            worst = Some((hi - lo, lr));
        }
    }
    spreads.sort_unstable();
    // From the GPU's view: the first kernel start of each collective every rank reported.
    let mut gpu_spreads = Vec::new();
    let mut gpu_last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut gpu_worst: Option<(u64, u32)> = None;
    for v in gpu_starts
        .values()
        .filter(|v| full && v.len() as u32 >= nranks)
    {
        let lo = v.iter().map(|x| x.1).min().unwrap_or(0);
        let Some(&(lr, hi)) = v.iter().max_by_key(|x| x.1) else {
            continue;
        };
        gpu_spreads.push(hi - lo);
        *gpu_last.entry(lr).or_default() += 1;
        if gpu_worst.is_none_or(|w| hi - lo >= w.0) {
            gpu_worst = Some((hi - lo, lr));
        }
    }
    gpu_spreads.sort_unstable();
    let ranks = ms
        .iter()
        .map(|m| RankView {
            host: m.host.to_string(),
            pid: m.pid,
            rank: m.c.rank,
            started: m.c.started,
            completed: m.c.completed,
            last_started: m.c.last_started.map(|a| a.seq),
            last_completed: m.c.last_completed,
            oldest_open: m.c.oldest_open.map(|a| {
                (
                    a.seq,
                    format::name(FUNCS, a.func).to_string(),
                    t.saturating_sub(waited_since(m.c, a.start_ns)),
                )
            }),
            last_arrivals: last.get(&m.c.rank).copied().unwrap_or(0),
            gpu_last_arrivals: gpu_last.get(&m.c.rank).copied().unwrap_or(0),
            mean_lag_ns: lag
                .get(&m.c.rank)
                .map_or(0, |(s, n)| if *n > 0 { s / n } else { 0 }),
            silent_ns: silent(m, t, hang_ns),
            exited: m.exited,
            waits: waits_of(m, t),
        })
        .collect();
    CommView {
        comm_id,
        name: ms.first().map(|m| m.c.name.clone()).unwrap_or_default(),
        nranks,
        rows,
        ranks,
        arrivals: spreads.len() as u64,
        median_spread_ns: spreads.get(spreads.len() / 2).copied().unwrap_or(0),
        max_spread_ns: spreads.last().copied().unwrap_or(0),
        max_spread_last_rank: worst.map(|w| w.1),
        gpu_arrivals: gpu_spreads.len() as u64,
        gpu_median_spread_ns: gpu_spreads.get(gpu_spreads.len() / 2).copied().unwrap_or(0),
        gpu_max_spread_ns: gpu_spreads.last().copied().unwrap_or(0),
        gpu_max_spread_last_rank: gpu_worst.map(|w| w.1),
    }
}

/// nccl-tests' size of one call and its bus factor (as `nccl::model`).
fn bus(func: &str, bytes: u64, n: u64) -> (u64, f64) {
    let n = n.max(1);
    let nf = n as f64;
    match func {
        "AllReduce" => (bytes, 2.0 * (nf - 1.0) / nf),
        "AllGather" | "ReduceScatter" | "AlltoAll" => (bytes * n, (nf - 1.0) / nf),
        _ => (bytes, 1.0),
    }
}

/// Since when the oldest open collective of a rank has waited: the later of its host call and
/// the end of the collective completed last (collectives enqueued ahead of the GPU wait their
/// turn; a rank that completes collectives is not stuck).
fn waited_since(c: &CommLive, start_ns: u64) -> u64 {
    start_ns.max(c.last_completed_ns)
}

/// The hung collective of a communicator: the lowest sequence number that some rank has waited
/// on for longer than `hang_ns` with nothing completing.
fn hung(comm_id: u64, ms: &[Member], t: u64, hang_ns: u64) -> Option<Hung> {
    let (seq, func, since) = ms
        .iter()
        .filter_map(|m| m.c.oldest_open.map(|a| (a, waited_since(m.c, a.start_ns))))
        .filter(|(_, since)| t.saturating_sub(*since) > hang_ns)
        .map(|(a, since)| (a.seq, a.func, since))
        .min()?;
    let nranks = ms.iter().map(|m| m.c.nranks).max().unwrap_or(0);
    let mut waiting_for = Vec::new();
    let mut silent_ranks = Vec::new();
    let mut incomplete = Vec::new();
    for r in 0..nranks {
        let Some(m) = ms.iter().find(|m| m.c.rank == r) else {
            waiting_for.push(r);
            continue;
        };
        let started = m.c.last_started.is_some_and(|a| a.seq >= seq);
        let done = m.c.last_completed.is_some_and(|s| s >= seq)
            && m.c.oldest_open.is_none_or(|a| a.seq > seq);
        let quiet = silent(m, t, hang_ns).is_some();
        if quiet {
            silent_ranks.push(r);
        }
        if !started || (quiet && !done) {
            waiting_for.push(r);
        } else if !done {
            incomplete.push(r);
        }
    }
    // Every rank in it and reporting: where it waits, from the ranks' proxy steps.
    let wheres = if waiting_for.is_empty() {
        located(
            ms.iter().filter(|m| {
                m.w.and_then(|w| w.call)
                    .is_some_and(|c| !c.p2p && c.seq == seq)
            }),
            t,
        )
    } else {
        Vec::new()
    };
    Some(Hung {
        comm_id,
        func: format::name(FUNCS, func).to_string(),
        seq,
        nranks,
        open_ns: t.saturating_sub(since),
        waiting_for,
        silent: silent_ranks,
        incomplete,
        p2p: None,
        wheres,
    })
}

/// `format::FUNCS` indexes of Send and Recv.
const SEND: u8 = 10;
const RECV: u8 = 5;

/// The hung point-to-point call of a communicator: the oldest Send or Recv some rank has had
/// open for longer than `hang_ns` (since the later of its host call and the lane's previous
/// completion is not known: since its host call), with the rank it waits for (the peer, when the
/// peer has not started its side: the k-th Send of a to b meets the k-th Recv of b from a).
fn hung_p2p(comm_id: u64, ms: &[Member], t: u64, hang_ns: u64) -> Option<Hung> {
    let nranks = ms.iter().map(|m| m.c.nranks).max().unwrap_or(0);
    let (since, m, lane) = ms
        .iter()
        .filter_map(|m| m.w.map(|w| (m, w)))
        .flat_map(|(m, w)| w.lanes.iter().map(move |l| (m, l)))
        .filter(|(_, l)| {
            l.oldest_open_ns > 0 && matches!(l.func, SEND | RECV) && l.peer != u32::MAX
        })
        .filter(|(m, l)| l.peer != m.c.rank && t.saturating_sub(l.oldest_open_ns) > hang_ns)
        .map(|(m, l)| (l.oldest_open_ns, m, l))
        .min_by_key(|(since, m, l)| (*since, m.c.rank, l.peer))?;
    let n = lane.completed + 1;
    let send = lane.func == SEND;
    let peer = lane.peer;
    let other = ms.iter().find(|x| x.c.rank == peer);
    // The peer's side of the same call: its lane of the other function to this rank.
    let other_started = other
        .and_then(|x| x.w)
        .and_then(|w| {
            w.lanes
                .iter()
                .find(|l| l.func == if send { RECV } else { SEND } && l.peer == m.c.rank)
        })
        .map_or(0, |l| l.started);
    let peer_silent = other.is_none_or(|x| silent(x, t, hang_ns).is_some());
    let mut waiting_for = Vec::new();
    let mut silent_ranks = Vec::new();
    if other.is_some_and(|x| silent(x, t, hang_ns).is_some()) {
        silent_ranks.push(peer);
    }
    if other_started < n || peer_silent {
        waiting_for.push(peer);
    }
    let wheres = if waiting_for.is_empty() {
        located(
            ms.iter()
                .filter(|x| x.c.rank == m.c.rank || x.c.rank == peer)
                .filter(|x| x.w.and_then(|w| w.call).is_some_and(|c| c.p2p)),
            t,
        )
    } else {
        Vec::new()
    };
    Some(Hung {
        comm_id,
        func: format::name(FUNCS, lane.func).to_string(),
        seq: n,
        nranks,
        open_ns: t.saturating_sub(since),
        waiting_for,
        silent: silent_ranks,
        incomplete: vec![m.c.rank],
        p2p: Some(P2pHang {
            rank: m.c.rank,
            peer,
            send,
        }),
        wheres,
    })
}

/// What one proxy operation waits for, from its step's state and its QP's queue.
fn wait_kind(w: &OpWait, qp: Option<(u32, u64, u64)>) -> WaitKind {
    match w.state {
        state::SEND_WAIT if qp.is_some_and(|q| q.1 > 0) => WaitKind::Network,
        state::SEND_WAIT => WaitKind::SendCompletion,
        state::SEND_GPU_WAIT => WaitKind::GpuProduce,
        state::RECV_GPU_WAIT | state::RECV_FLUSH_WAIT => WaitKind::GpuConsume,
        state::SEND_PEER_WAIT => WaitKind::PeerCredit,
        state::RECV_WAIT => WaitKind::Data,
        _ => WaitKind::Idle,
    }
}

/// The waits of a member's oldest open call, at view time `t`.
fn waits_of(m: &Member, t: u64) -> Vec<WaitView> {
    let Some(cw) = m.w else { return Vec::new() };
    cw.waits
        .iter()
        .map(|w| {
            let qp = (w.ep != 0)
                .then(|| {
                    let qpn = m.p.endpoints.get(&w.ep)?.qpn?;
                    let (out, stalled) = m.p.queues.as_ref().map_or((0, 0), |qs| {
                        qs.get(w.ep).map_or((0, 0), |q| {
                            let q = q.at(qs.at_ns, t.max(qs.at_ns));
                            // Work is awaited only where a signaled request is outstanding
                            // (unsignaled ones after the last signaled one wait for nothing).
                            if q.sq_signaled_outstanding > 0 {
                                (q.sq_outstanding(), q.sq_stalled_ns)
                            } else {
                                (0, 0)
                            }
                        })
                    });
                    Some((qpn, out, stalled))
                })
                .flatten();
            WaitView {
                rank: cw.rank,
                channel: w.channel,
                send: w.send,
                peer: w.peer,
                what: wait_kind(w, qp),
                for_ns: t.saturating_sub(w.since_ns),
                qp,
                steps_done: w.steps_done,
                steps: w.steps,
            }
        })
        .collect()
}

/// Every wait of the members given, the one closest to a hang's cause first: by kind, then the
/// longest.
fn located<'m>(ms: impl Iterator<Item = &'m Member<'m>>, t: u64) -> Vec<WaitView> {
    let mut v: Vec<WaitView> = ms.flat_map(|m| waits_of(m, t)).collect();
    v.sort_by(|a, b| {
        a.what
            .cmp(&b.what)
            .then(b.for_ns.cmp(&a.for_ns))
            .then((a.rank, a.channel).cmp(&(b.rank, b.channel)))
    });
    v
}

/// The warning's text: "AllReduce #225 waits for r1 (silent) 3.1s · comm 7773728f" (the
/// communicator's first 8 hex digits), or, when every rank started it and reports, the ranks
/// where it is not completed.
pub fn hung_text(h: &Hung) -> String {
    let who = ranks_text(h);
    let open = h.open_ns as f64 / 1e9;
    let comm = h.comm_id >> 32;
    let call = match h.p2p {
        Some(p) if p.send => format!("{} #{} r{}→r{}", h.func, h.seq, p.rank, p.peer),
        Some(p) => format!("{} #{} r{}←r{}", h.func, h.seq, p.rank, p.peer),
        None => format!("{} #{}", h.func, h.seq),
    };
    if who.is_empty()
        && let Some(w) = h.wheres.first()
    {
        let all = match h.p2p {
            Some(_) => "both ranks in it".to_string(),
            None => format!("all {} ranks in it", h.nranks),
        };
        return format!("{call}: {all} {open:.1}s; {} · comm {comm:08x}", w.text());
    }
    if h.p2p.is_some() {
        return if who.is_empty() {
            format!("{call} not completed {open:.1}s · comm {comm:08x}")
        } else {
            format!("{call} waits for {who} {open:.1}s · comm {comm:08x}")
        };
    }
    if who.is_empty() {
        let on: Vec<String> = h.incomplete.iter().map(|r| format!("r{r}")).collect();
        format!(
            "{} #{} not completed on {} {open:.1}s · comm {comm:08x}",
            h.func,
            h.seq,
            on.join(", ")
        )
    } else {
        format!(
            "{} #{} waits for {who} {open:.1}s · comm {comm:08x}",
            h.func, h.seq
        )
    }
}

/// Follows the hung collectives of a live model for a front end that prints lines (`run
/// --headless`): a line when a collective becomes hung or the ranks it waits for change, and one
/// when it completes.
#[derive(Debug, Default)]
pub struct HungWatch {
    /// (communicator, sequence number, function) → (waiting for, open since ns, the call's name).
    shown: BTreeMap<HungKey, Said>,
    /// Hung collectives that name no rank to wait for (every rank started it and reports), seen
    /// at the previous check: such a one is said once it holds over two checks, since a rank
    /// that just resumed reports before its tracker read its progress (the H200 stall run).
    unnamed: std::collections::BTreeSet<HungKey>,
}

/// (communicator, sequence number, function) of a hung call.
type HungKey = (u64, u64, String);
/// What was said of it: (the ranks it waits for and where, open since ns, the call's name).
type Said = (Vec<u32>, u64, String);

impl HungWatch {
    /// The lines to print at view time `t`.
    pub fn check(&mut self, model: &Model, t: u64, hang_ns: u64) -> Vec<String> {
        let mut lines = Vec::new();
        if !model.processes.values().any(|p| p.nccl.is_some()) {
            return lines;
        }
        let v = collectives(model, t, hang_ns);
        let mut now: BTreeMap<HungKey, Said> = BTreeMap::new();
        let mut unnamed = std::collections::BTreeSet::new();
        for h in &v.hung {
            let key = (h.comm_id, h.seq, h.func.clone());
            if h.waiting_for.is_empty() && !self.shown.contains_key(&key) {
                unnamed.insert(key.clone());
                if !self.unnamed.contains(&key) {
                    continue;
                }
            }
            // Said again when the ranks it waits for, or where it waits, change.
            let mut said = h.waiting_for.clone();
            if let Some(w) = h.wheres.first() {
                said.extend([u32::MAX, w.rank, w.peer, w.channel as u32, w.what as u32]);
            }
            let val = (said, t.saturating_sub(h.open_ns), h.func.clone());
            if self.shown.get(&key).map(|x| &x.0) != Some(&val.0) {
                lines.push(format!("⚠ {}", hung_text(h)));
            }
            now.insert(key, val);
        }
        for (key, (_, since, func)) in &self.shown {
            let (comm, seq) = (key.0, key.1);
            if !now.contains_key(key) {
                lines.push(format!(
                    "✓ {func} #{seq} · comm {:08x}: no longer hung, after {:.1}s open",
                    comm >> 32,
                    t.saturating_sub(*since) as f64 / 1e9
                ));
            }
        }
        self.shown = now;
        self.unnamed = unnamed;
        lines
    }
}

/// The ranks as the warning writes them: "r1 (silent), r3".
pub fn ranks_text(h: &Hung) -> String {
    if h.waiting_for.is_empty() {
        return String::new();
    }
    h.waiting_for
        .iter()
        .map(|r| {
            if h.silent.contains(r) {
                format!("r{r} (silent)")
            } else {
                format!("r{r}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
