//! NCCL collectives, live: what the preload's NCCL plugin streams over the live socket
//! (`wire::Frame::Nccl`, docs/WIRE.md) and the tracker that computes it from the plugin's
//! records as they are drained (off NCCL's threads, in the plugin's writer thread). Pure: the
//! tracker reads records (`format::Rec`) and nothing else, so the record's files replay through
//! it exactly as the live process did (tests/nccl_join.rs checks it against `model`).
//!
//! Per communicator: rows per (collective, algorithm, protocol) with count, bytes, channels and
//! time (as `model` computes them); the collectives started and completed, the oldest one not
//! completed (what a hung job waits on), and the start times of the latest [`RECENT`]
//! collectives, from which a reader computes the ranks' arrival spread. A call completes when
//! NCCL stopped it and every proxy operation it started has stopped; a call that started none
//! completes [`NO_OP_GRACE_NS`] after its stop (no network transport, a send to itself).

use std::collections::{BTreeMap, HashMap};

use super::format::{DATATYPES, Rec, etype, kind, state};
use crate::event::{ClockSample, TscClock};

/// Collectives per communicator whose start times each frame carries.
pub const RECENT: usize = 64;
/// Calls (and proxy operations) followed at once; more are counted in `untracked`.
pub const MAX_OPEN: usize = 1 << 16;
/// Proxy operations of one open call a frame carries at most (channels × peers × 2 sides).
pub const WAITS_MAX: usize = 512;
/// A call that started no proxy operation completes this long after NCCL stopped it.
pub const NO_OP_GRACE_NS: u64 = 200_000_000;
mod frames;
pub use frames::*;

#[derive(Clone, Debug, Default)]
struct Call {
    comm: u64,
    p2p: bool,
    peer: u32,
    seq: u64,
    func: u8,
    algo: u8,
    proto: u8,
    bytes: u64,
    start: u64,
    stop: Option<u64>,
    ops_open: u32,
    ops_seen: u32,
    last_op_stop: u64,
    /// A point-to-point call's number in its lane (from 1).
    lane_n: u64,
    /// The API group it is a part of (0: none).
    group: u64,
    /// Its kernel's first start and last stop on the GPU (globaltimer ns).
    gpu: Option<(u64, u64)>,
}

/// An API group (GroupApi) whose point-to-point API calls may make one call (AlltoAll...).
#[derive(Clone, Debug, Default)]
struct Group {
    comm: u64,
    depth: u64,
    start: u64,
    stopped: bool,
    /// Counts of its P2pApi calls: Sends, Recvs; the datatype size.
    sends: Vec<u64>,
    recvs: Vec<u64>,
    esize: u64,
    /// Its P2pApi event ids (forgotten with it).
    apis: Vec<u64>,
    parts_started: u64,
    parts_done: u64,
    last_end: u64,
    sent: u64,
    /// Named when its first part starts (every P2pApi came before).
    func: Option<u8>,
    gpu: Option<(u64, u64)>,
    all_gpu: bool,
}

/// A proxy operation being followed: its call, where it goes, its steps.
#[derive(Clone, Debug, Default)]
struct OpState {
    call: u64,
    channel: u8,
    peer: u32,
    send: bool,
    steps: u32,
    done: u32,
    /// The endpoint of the last work request posted before one of its steps was posted.
    ep: u32,
    /// Open steps by step number: (state, since tsc).
    open: BTreeMap<u32, (u8, u64)>,
    /// When it started (tsc): its wait while no step is in flight.
    start: u64,
    /// The tsc of its last step's stop.
    last_stop: u64,
}

/// A communicator as the tracker keeps it: `live` holds TSC values where the frame has ns
/// (starts, and rows' time in ticks), converted by [`Tracker::live`] with the newest clock.
#[derive(Clone, Debug, Default)]
struct Comm {
    live: CommLive,
    /// Open collectives by sequence number → call id.
    open: BTreeMap<u64, u64>,
    recent: std::collections::VecDeque<(u64, u64)>,
}

type RowKey = (u8, u8, u8, bool);

/// Follows one process's records (`push`), then says what it knows (`live`).
#[derive(Debug, Default)]
pub struct Tracker {
    clock: TscClock,
    comms: HashMap<u64, Comm>,
    rows: HashMap<(u64, RowKey), usize>,
    calls: HashMap<u64, Call>,
    /// Proxy operations by id.
    ops: HashMap<u64, OpState>,
    /// Proxy steps by id → (operation id, step number).
    steps: HashMap<u64, (u64, u32)>,
    /// Per (communicator, function, peer): point-to-point calls started, completed.
    lanes: BTreeMap<(u64, u8, u32), (u64, u64)>,
    /// Per communicator: point-to-point calls started, completed.
    p2p: HashMap<u64, (u64, u64)>,
    /// Lane → end tsc of its last completed call.
    prev_end: HashMap<(u64, bool, u8, u32), u64>,
    newest_tsc: u64,
    untracked: u64,
    dropped: u64,
    unknown: u64,
    /// Calls stopped with no proxy operation yet, by id (checked for the grace on each push).
    waiting: Vec<u64>,
    /// API groups by id; P2pApi event id → its group.
    groups: HashMap<u64, Group>,
    p2p_api: HashMap<u64, u64>,
    /// Groups whose parts all completed but fewer than their API calls (a rank's part to
    /// itself may come with no event): finished after the grace.
    groups_waiting: Vec<u64>,
    /// Kernel channel event id → call id.
    kernels: HashMap<u64, u64>,
    /// Per communicator: calls made of parts, size rows, recent GPU and API starts.
    calls_live: HashMap<u64, CallsComm>,
    /// Calls made of parts per (communicator, function): numbered from 1.
    api_n: HashMap<(u64, u8), u64>,
    /// Host minus GPU clock (ns), the smallest seen: converts kernel timestamps.
    gpu_offset: Option<i128>,
}

/// What `NcclCalls` says of one communicator, as the tracker keeps it (GPU times raw).
#[derive(Clone, Debug, Default)]
struct CallsComm {
    api_rows: Vec<ApiRow>,
    sizes: BTreeMap<(u8, u64), SizeLive>,
    gpu_recent: std::collections::VecDeque<(u64, u64)>,
    api_recent: std::collections::VecDeque<(u8, u64, u64)>,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// The tracker after every record of a process's NCCL file (`nccl-<pid>.stn` beside its
    /// record directory), in the file's order; None when it has none or it cannot be read (a
    /// record's problems are `report`'s to say).
    pub fn of_file(pr: &crate::trace::reader::ProcessRecording) -> Option<Tracker> {
        let path = pr
            .dir
            .parent()?
            .join(format!("nccl-{}.stn", pr.identity.pid));
        let bytes = std::fs::read(path).ok()?;
        let d = super::format::decode(&bytes);
        if d.recs.is_empty() {
            return None;
        }
        let mut t = Tracker::new();
        for r in &d.recs {
            t.push(r);
        }
        t.end();
        Some(t)
    }

    /// The plugin's counters of records it could not keep and events it does not read.
    pub fn set_losses(&mut self, dropped: u64, unknown: u64) {
        self.dropped = dropped;
        self.unknown = unknown;
    }

    /// A clock sample (the preload adds one per drain, so conversions stay current).
    pub fn clock(&mut self, s: ClockSample) {
        let first = self.clock.samples().first().copied();
        self.clock = TscClock::new(first.into_iter().chain([s]).collect());
    }

    /// One record, in the order of the file.
    pub fn push(&mut self, r: &Rec) {
        self.newest_tsc = self.newest_tsc.max(r.tsc());
        match (r.kind(), r.etype()) {
            (kind::CLOCK, _) => self.clock(ClockSample {
                tsc: r.tsc(),
                mono_ns: r.p(0),
                real_ns: r.p(1),
            }),
            (kind::TOTALS, _) => {
                self.dropped = self.dropped.max(r.p(0));
                self.unknown = self.unknown.max(r.p(1));
            }
            (kind::COUNTS, _) => {
                // Aggregate mode's counted host calls (written at exit): completed as made.
                let func = r.p(0) as u8;
                let p2p = matches!(
                    super::format::name(super::format::FUNCS, func),
                    "Send" | "Recv"
                );
                let key = (func, 255, 255, false);
                let c = self.comms.entry(r.comm()).or_default();
                let i = row_index(&mut self.rows, c, r.comm(), key);
                c.live.rows[i].count = r.p(1);
                c.live.rows[i].bytes = r.p(2);
                if !p2p {
                    c.live.started += r.p(1);
                    c.live.completed += r.p(1);
                }
            }
            (kind::INIT, _) => {
                let c = self.comms.entry(r.comm()).or_default();
                c.live.comm_id = r.p(0);
                c.live.nranks = r.p(1) as u32;
                c.live.rank = r.p(3) as u32;
                c.live.name = super::format::unpack_name(&r.0[10..14]);
            }
            (kind::START, etype::GROUP_API) => {
                if self.groups.len() >= MAX_OPEN {
                    self.untracked += 1;
                    return;
                }
                self.groups.insert(
                    r.id(),
                    Group {
                        comm: r.comm(),
                        depth: r.p(0),
                        start: r.tsc(),
                        all_gpu: true,
                        ..Default::default()
                    },
                );
            }
            (kind::START, etype::P2P_API) => {
                if let Some(g) = self.groups.get_mut(&r.parent()) {
                    let (func, dtype, ..) = super::format::unpack_coll(r.p(2));
                    if super::format::name(super::format::FUNCS, func) == "Send" {
                        g.sends.push(r.p(1));
                    } else {
                        g.recvs.push(r.p(1));
                    }
                    g.esize = DATATYPES.get(dtype as usize).map_or(1, |d| d.1);
                    g.apis.push(r.id());
                    self.p2p_api.insert(r.id(), r.parent());
                }
            }
            (kind::STOP, etype::GROUP_API) => {
                if let Some(g) = self.groups.get_mut(&r.id()) {
                    g.stopped = true;
                    self.try_finish_group(r.id());
                }
            }
            (kind::START, etype::KERNEL_CH) => {
                if let Some(c) = self.calls.get_mut(&r.parent()) {
                    self.kernels.insert(r.id(), r.parent());
                    let g = r.p(1);
                    if g != 0 {
                        c.gpu = Some(c.gpu.map_or((g, 0), |(a, b)| (a.min(g), b)));
                        self.note_gpu(r.tsc(), g);
                    }
                }
            }
            (kind::STATE, etype::KERNEL_CH) if r.state() == state::KERNEL_CH_STOP => {
                let g = r.p(0);
                if let Some(c) = self
                    .kernels
                    .get(&r.id())
                    .and_then(|c| self.calls.get_mut(c))
                    && g != 0
                {
                    c.gpu = Some(c.gpu.map_or((g, g), |(a, b)| (a, b.max(g))));
                    self.note_gpu(r.tsc(), g);
                }
            }
            (kind::STOP, etype::KERNEL_CH) => {
                self.kernels.remove(&r.id());
            }
            (kind::START, t @ (etype::COLL | etype::P2P)) => {
                if self.calls.len() >= MAX_OPEN {
                    self.untracked += 1;
                    return;
                }
                let (func, dtype, algo, proto, channels, _) = super::format::unpack_coll(r.p(2));
                let esize = DATATYPES.get(dtype as usize).map_or(1, |d| d.1);
                let p2p = t == etype::P2P;
                let call = Call {
                    comm: r.comm(),
                    p2p,
                    peer: r.p(3) as u32,
                    seq: r.p(0),
                    func,
                    algo: if p2p { 255 } else { algo },
                    proto: if p2p { 255 } else { proto },
                    bytes: r.p(1).saturating_mul(esize),
                    start: r.tsc(),
                    ..Default::default()
                };
                let start_tsc = r.tsc();
                let key = self.row_key(&call);
                let c = self.comms.entry(call.comm).or_default();
                let i = row_index(&mut self.rows, c, call.comm, key);
                c.live.rows[i].open += 1;
                c.live.rows[i].channels = channels;
                let mut call = call;
                if p2p {
                    let lane = self.lanes.entry((call.comm, func, call.peer)).or_default();
                    lane.0 += 1;
                    call.lane_n = lane.0;
                    self.p2p.entry(call.comm).or_default().0 += 1;
                    if let Some(&gid) = self.p2p_api.get(&r.parent()) {
                        call.group = gid;
                        self.group_part_started(gid);
                    }
                } else {
                    c.live.started += 1;
                    let at = CollAt {
                        seq: call.seq,
                        func,
                        start_ns: start_tsc,
                    };
                    c.live.last_started = Some(at);
                    c.open.insert(call.seq, r.id());
                    c.recent.push_back((call.seq, start_tsc));
                    if c.recent.len() > RECENT {
                        c.recent.pop_front();
                    }
                }
                self.calls.insert(r.id(), call);
            }
            (kind::START, etype::PROXY_OP) => match self.calls.get_mut(&r.parent()) {
                Some(c) if self.ops.len() < MAX_OPEN => {
                    c.ops_open += 1;
                    c.ops_seen += 1;
                    self.ops.insert(
                        r.id(),
                        OpState {
                            call: r.parent(),
                            channel: r.p(1) as u8,
                            peer: r.p(2) as u32,
                            steps: r.p(3) as u32,
                            send: r.p(5) != 0,
                            start: r.tsc(),
                            ..Default::default()
                        },
                    );
                }
                _ => self.untracked += 1,
            },
            (kind::START, etype::PROXY_STEP) => match self.ops.get_mut(&r.parent()) {
                Some(o) if self.steps.len() < MAX_OPEN => {
                    let n = r.p(0) as u32;
                    o.open.insert(n, (0, r.tsc()));
                    self.steps.insert(r.id(), (r.parent(), n));
                }
                // Steps of operations not followed: nothing to place them in (their operation
                // was counted as untracked already).
                _ => {}
            },
            (kind::STATE, etype::PROXY_STEP) => {
                if let Some(&(op, n)) = self.steps.get(&r.id())
                    && let Some(o) = self.ops.get_mut(&op)
                {
                    let st = r.state();
                    if let Some(e) = o.open.get_mut(&n)
                        && e.0 != st
                    {
                        *e = (st, r.tsc());
                    }
                    // The work request its proxy posted right before: the step's QP.
                    if matches!(st, state::SEND_WAIT | state::RECV_WAIT) && r.p(1) != 0 {
                        o.ep = r.p(1) as u32;
                    }
                }
            }
            (kind::STOP, etype::PROXY_STEP) => {
                if let Some((op, n)) = self.steps.remove(&r.id())
                    && let Some(o) = self.ops.get_mut(&op)
                {
                    o.open.remove(&n);
                    o.done += 1;
                    o.last_stop = r.tsc();
                }
            }
            (kind::STOP, etype::COLL | etype::P2P) => match self.calls.get_mut(&r.id()) {
                Some(c) => {
                    c.stop = Some(r.tsc());
                    if c.ops_seen == 0 {
                        self.waiting.push(r.id());
                    } else {
                        self.try_complete(r.id());
                    }
                }
                None => self.untracked += 1,
            },
            (kind::STOP, etype::PROXY_OP) => match self.ops.remove(&r.id()).map(|o| o.call) {
                Some(call) => {
                    let id = r.id();
                    self.steps.retain(|_, (op, _)| *op != id);
                    if let Some(c) = self.calls.get_mut(&call) {
                        c.ops_open = c.ops_open.saturating_sub(1);
                        c.last_op_stop = c.last_op_stop.max(r.tsc());
                        self.try_complete(call);
                    } else {
                        self.untracked += 1;
                    }
                }
                None => self.untracked += 1,
            },
            _ => {}
        }
        self.check_waiting();
    }

    fn row_key(&self, c: &Call) -> RowKey {
        let to_self = c.p2p
            && self
                .comms
                .get(&c.comm)
                .is_some_and(|m| m.live.rank == c.peer);
        (c.func, c.algo, c.proto, to_self)
    }

    /// Completes the calls that stopped with no proxy operation, once the grace has passed
    /// (measured on the records' own clock: the newest record read).
    fn check_waiting(&mut self) {
        if !self.groups_waiting.is_empty() {
            let grace = (NO_OP_GRACE_NS as f64 * self.clock.ticks_per_ns()) as u64;
            let due: Vec<u64> = self
                .groups_waiting
                .iter()
                .copied()
                .filter(|g| {
                    self.groups
                        .get(g)
                        .is_none_or(|x| self.newest_tsc.saturating_sub(x.last_end) >= grace)
                })
                .collect();
            for g in due {
                self.finish_group(g);
            }
        }
        if self.waiting.is_empty() {
            return;
        }
        let grace = (NO_OP_GRACE_NS as f64 * self.clock.ticks_per_ns()) as u64;
        let now = self.newest_tsc;
        let mut w = std::mem::take(&mut self.waiting);
        w.retain(|id| {
            let Some(c) = self.calls.get(id) else {
                return false;
            };
            if c.ops_seen > 0 {
                self.try_complete(*id);
                return false;
            }
            if c.stop.is_some_and(|s| now.saturating_sub(s) >= grace) {
                self.try_complete(*id);
                return false;
            }
            true
        });
        self.waiting = w;
    }

    /// The record ended (its last record was read): what waits only for the grace completes
    /// now (calls NCCL stopped with no proxy operation, calls made of parts whose last part
    /// came); what waits for NCCL stays open.
    pub fn end(&mut self) {
        let grace = (NO_OP_GRACE_NS as f64 * self.clock.ticks_per_ns()) as u64;
        self.newest_tsc = self.newest_tsc.saturating_add(grace);
        self.check_waiting();
    }

    /// The reader's clock moved on with no record (the preload, at each drain): the grace of
    /// calls with no proxy operation is measured to it.
    pub fn advance(&mut self, tsc: u64) {
        self.newest_tsc = self.newest_tsc.max(tsc);
        self.check_waiting();
    }

    /// A kernel timestamp seen by the host at `tsc`: the smallest host-minus-GPU difference
    /// converts the GPU's clock (the one the proxy saw soonest).
    fn note_gpu(&mut self, tsc: u64, gpu: u64) {
        let d = self.clock.to_real_ns(tsc) as i128 - gpu as i128;
        self.gpu_offset = Some(self.gpu_offset.map_or(d, |o| o.min(d)));
    }

    /// A GPU timestamp on the record's clock (CLOCK_REALTIME ns).
    fn gpu_real(&self, g: u64) -> u64 {
        (g as i128 + self.gpu_offset.unwrap_or(0)).max(0) as u64
    }

    /// The first part of group `gid` started: every API call of it came before, so it is named
    /// now (AlltoAll, Gather, Scatter, Group; none: a lone Send or Recv).
    fn group_part_started(&mut self, gid: u64) {
        let Some(g) = self.groups.get_mut(&gid) else {
            return;
        };
        if g.parts_started == 0 {
            let nranks = self.comms.get(&g.comm).map_or(0, |c| c.live.nranks);
            g.func = super::format::group_func(g.depth, &g.sends, &g.recvs, nranks);
            if let Some(f) = g.func {
                let k = self.calls_live.entry(g.comm).or_default();
                api_row(&mut k.api_rows, f).open += 1;
            }
        }
        g.parts_started += 1;
        // A part started after the others completed: not finished yet.
        self.groups_waiting.retain(|x| *x != gid);
    }

    fn group_part_done(&mut self, gid: u64, end: u64, c: &Call, gpu: Option<(u64, u64)>) {
        let Some(g) = self.groups.get_mut(&gid) else {
            return;
        };
        g.parts_done += 1;
        g.last_end = g.last_end.max(end);
        if super::format::name(super::format::FUNCS, c.func) == "Send" {
            g.sent += c.bytes;
        }
        match gpu {
            Some((a, b)) => g.gpu = Some(g.gpu.map_or((a, b), |(x, y)| (x.min(a), y.max(b)))),
            None => g.all_gpu = false,
        }
        self.try_finish_group(gid);
    }

    /// Finishes group `gid` once NCCL stopped it and every part it started completed (with
    /// fewer parts than API calls, after the grace: a rank's own part may come with no event);
    /// forgets a group that made no point-to-point call (a collective's).
    fn try_finish_group(&mut self, gid: u64) {
        let Some(g) = self.groups.get(&gid) else {
            return;
        };
        if !g.stopped {
            return;
        }
        if g.parts_started == 0 {
            if g.apis.is_empty() {
                self.groups.remove(&gid);
            }
            return;
        }
        if g.parts_done < g.parts_started {
            return;
        }
        if (g.parts_started as usize) < g.sends.len() + g.recvs.len() {
            if !self.groups_waiting.contains(&gid) {
                self.groups_waiting.push(gid);
            }
            return;
        }
        self.finish_group(gid);
    }

    fn finish_group(&mut self, gid: u64) {
        self.groups_waiting.retain(|x| *x != gid);
        let Some(g) = self.groups.remove(&gid) else {
            return;
        };
        for a in &g.apis {
            self.p2p_api.remove(a);
        }
        let Some(f) = g.func else { return };
        let lane = (g.comm, false, f, u32::MAX);
        let from = self
            .prev_end
            .get(&lane)
            .map_or(g.start, |&p| p.max(g.start));
        self.prev_end.insert(lane, g.last_end);
        let dt = self
            .clock
            .to_real_ns(g.last_end)
            .saturating_sub(self.clock.to_real_ns(from));
        let bytes = if f == super::format::GROUP_FUNC {
            g.sent
        } else {
            g.sends.first().or(g.recvs.first()).copied().unwrap_or(0) * g.esize
        };
        let n = self.api_n.entry((g.comm, f)).or_default();
        *n += 1;
        let n = *n;
        let k = self.calls_live.entry(g.comm).or_default();
        let row = api_row(&mut k.api_rows, f);
        row.open = row.open.saturating_sub(1);
        row.count += 1;
        row.bytes += bytes;
        row.time_ns += dt;
        row.parts += g.parts_started;
        let b = super::format::size_bucket(bytes);
        let z = k.sizes.entry((f, b)).or_insert_with(|| SizeLive {
            func: f,
            bucket: b,
            ..Default::default()
        });
        z.count += 1;
        z.bytes += bytes;
        z.time_ns += dt;
        if g.all_gpu
            && let Some((a, e)) = g.gpu
        {
            z.gpu_time_ns += e.saturating_sub(a);
        }
        k.api_recent.push_back((f, n, g.start));
        if k.api_recent.len() > RECENT {
            k.api_recent.pop_front();
        }
    }

    /// The calls as the user made them, by size and from the GPU's view (TSC and GPU values
    /// converted with the newest clock sample and the GPU offset).
    pub fn calls(&self) -> NcclCalls {
        let mut comms: Vec<CommCalls> = self
            .comms
            .iter()
            .map(|(comm, c)| {
                let k = self.calls_live.get(comm).cloned().unwrap_or_default();
                CommCalls {
                    comm_id: c.live.comm_id,
                    rank: c.live.rank,
                    api_rows: k.api_rows,
                    sizes: k.sizes.into_values().collect(),
                    gpu_recent: k
                        .gpu_recent
                        .iter()
                        .map(|&(s, g)| (s, self.gpu_real(g)))
                        .collect(),
                    api_recent: k
                        .api_recent
                        .iter()
                        .map(|&(f, n, t)| (f, n, self.clock.to_real_ns(t)))
                        .collect(),
                }
            })
            .collect();
        comms.sort_by_key(|c| (c.comm_id, c.rank));
        NcclCalls {
            at_ns: self.clock.to_real_ns(self.newest_tsc),
            comms,
        }
    }

    fn try_complete(&mut self, id: u64) {
        let Some(c) = self.calls.get(&id) else {
            return;
        };
        let Some(stop) = c.stop else { return };
        if c.ops_open > 0 {
            return;
        }
        let Some(c) = self.calls.remove(&id) else {
            return;
        };
        let end = stop.max(c.last_op_stop);
        let lane = (
            c.comm,
            c.p2p,
            if c.p2p { c.func } else { 0 },
            if c.p2p { c.peer } else { 0 },
        );
        let from = self
            .prev_end
            .get(&lane)
            .map_or(c.start, |&p| p.max(c.start));
        self.prev_end.insert(lane, end);
        let dt = self
            .clock
            .to_real_ns(end)
            .saturating_sub(self.clock.to_real_ns(from));
        let key = self.row_key(&c);
        let m = self.comms.entry(c.comm).or_default();
        let i = row_index(&mut self.rows, m, c.comm, key);
        let row = &mut m.live.rows[i];
        row.open = row.open.saturating_sub(1);
        row.count += 1;
        row.bytes += c.bytes;
        row.time_ns += dt;
        let gpu = c.gpu.filter(|g| g.1 >= g.0 && g.0 != 0);
        let named = c.group != 0 && self.groups.get(&c.group).is_some_and(|g| g.func.is_some());
        if !named {
            let k = self.calls_live.entry(c.comm).or_default();
            let z = k
                .sizes
                .entry((c.func, super::format::size_bucket(c.bytes)))
                .or_insert_with(|| SizeLive {
                    func: c.func,
                    bucket: super::format::size_bucket(c.bytes),
                    ..Default::default()
                });
            z.count += 1;
            z.bytes += c.bytes;
            z.time_ns += dt;
            if let Some((a, b)) = gpu {
                z.gpu_time_ns += b - a;
            }
        }
        if !c.p2p
            && let Some((a, _)) = gpu
        {
            let k = self.calls_live.entry(c.comm).or_default();
            k.gpu_recent.push_back((c.seq, a));
            if k.gpu_recent.len() > RECENT {
                k.gpu_recent.pop_front();
            }
        }
        if c.group != 0 {
            self.group_part_done(c.group, end, &c, gpu);
        }
        let m = self.comms.entry(c.comm).or_default();
        if c.p2p {
            if let Some(l) = self.lanes.get_mut(&(c.comm, c.func, c.peer)) {
                l.1 += 1;
            }
            self.p2p.entry(c.comm).or_default().1 += 1;
        } else {
            m.live.completed += 1;
            // In ticks here; `live` converts.
            m.live.last_completed_ns = m.live.last_completed_ns.max(end);
            m.open.remove(&c.seq);
            m.live.last_completed = Some(m.live.last_completed.map_or(c.seq, |s| s.max(c.seq)));
        }
    }

    /// Where each communicator waits now (TSC values converted with the newest clock sample): its
    /// point-to-point lanes, and the proxy operations of its oldest open call (at most
    /// [`WAITS_MAX`]).
    pub fn waits(&self) -> NcclWaits {
        let real = |tsc: u64| self.clock.to_real_ns(tsc);
        let mut comms: Vec<CommWaits> = self
            .comms
            .iter()
            .map(|(&comm, c)| {
                let (p2p_started, p2p_completed) = self.p2p.get(&comm).copied().unwrap_or((0, 0));
                // The oldest open call of this communicator (by its host call).
                let oldest = self
                    .calls
                    .iter()
                    .filter(|(_, k)| k.comm == comm)
                    .min_by_key(|(id, k)| (k.start, **id));
                let mut lanes: Vec<Lane> = self
                    .lanes
                    .range((comm, 0, 0)..=(comm, u8::MAX, u32::MAX))
                    .map(|(&(_, func, peer), &(started, completed))| Lane {
                        func,
                        peer,
                        started,
                        completed,
                        oldest_open_ns: 0,
                    })
                    .collect();
                for k in self.calls.values().filter(|k| k.comm == comm && k.p2p) {
                    if let Some(l) = lanes
                        .iter_mut()
                        .find(|l| l.func == k.func && l.peer == k.peer)
                    {
                        let ns = real(k.start);
                        if l.oldest_open_ns == 0 || ns < l.oldest_open_ns {
                            l.oldest_open_ns = ns;
                        }
                    }
                }
                let mut waits: Vec<OpWait> = Vec::new();
                if let Some((&id, _)) = oldest {
                    for o in self.ops.values().filter(|o| o.call == id) {
                        let (state, since) = match o.open.iter().next() {
                            Some((_, &(st, since))) => (st, since),
                            None => (0, o.last_stop.max(o.start)),
                        };
                        waits.push(OpWait {
                            channel: o.channel,
                            peer: o.peer,
                            send: o.send,
                            state,
                            since_ns: real(since),
                            ep: o.ep,
                            steps_done: o.done,
                            steps: o.steps,
                        });
                    }
                }
                waits.sort_by_key(|w| (w.channel, !w.send, w.peer));
                waits.truncate(WAITS_MAX);
                CommWaits {
                    comm_id: c.live.comm_id,
                    rank: c.live.rank,
                    p2p_started,
                    p2p_completed,
                    lanes,
                    call: oldest.map(|(_, k)| OpenCall {
                        p2p: k.p2p,
                        func: k.func,
                        seq: if k.p2p { k.lane_n } else { k.seq },
                        peer: if k.p2p { k.peer } else { 0 },
                        start_ns: real(k.start),
                    }),
                    waits,
                }
            })
            .collect();
        comms.sort_by_key(|c| (c.comm_id, c.rank));
        NcclWaits {
            at_ns: self.clock.to_real_ns(self.newest_tsc),
            comms,
        }
    }

    /// What the tracker knows now (TSC values converted with the newest clock sample).
    pub fn live(&self) -> NcclLive {
        let real = |tsc: u64| self.clock.to_real_ns(tsc);
        let per_ns = self.clock.ticks_per_ns().max(1e-9);
        let mut comms: Vec<CommLive> = self
            .comms
            .values()
            .map(|c| {
                let mut l = c.live.clone();
                if let Some(a) = l.last_started.as_mut() {
                    a.start_ns = real(a.start_ns);
                }
                if l.last_completed_ns > 0 {
                    l.last_completed_ns = real(l.last_completed_ns);
                }
                for r in &mut l.rows {
                    r.time_ns = (r.time_ns as f64 / per_ns).round() as u64;
                }
                l.oldest_open = c.open.iter().next().and_then(|(seq, id)| {
                    let call = self.calls.get(id)?;
                    Some(CollAt {
                        seq: *seq,
                        func: call.func,
                        start_ns: real(call.start),
                    })
                });
                l.recent = c.recent.iter().map(|&(s, t)| (s, real(t))).collect();
                l
            })
            .collect();
        comms.sort_by_key(|c| (c.comm_id, c.rank));
        NcclLive {
            at_ns: self.clock.to_real_ns(self.newest_tsc),
            comms,
            dropped_records: self.dropped,
            unknown_events: self.unknown,
            untracked: self.untracked,
        }
    }
}

/// The row of function `f` among `rows`, made when missing.
fn api_row(rows: &mut Vec<ApiRow>, f: u8) -> &mut ApiRow {
    let i = match rows.iter().position(|r| r.func == f) {
        Some(i) => i,
        None => {
            rows.push(ApiRow {
                func: f,
                ..Default::default()
            });
            rows.len() - 1
        }
    };
    &mut rows[i]
}

fn row_index(
    rows: &mut HashMap<(u64, RowKey), usize>,
    c: &mut Comm,
    comm: u64,
    key: RowKey,
) -> usize {
    *rows.entry((comm, key)).or_insert_with(|| {
        c.live.rows.push(RowLive {
            func: key.0,
            algo: key.1,
            proto: key.2,
            to_self: key.3,
            ..Default::default()
        });
        c.live.rows.len() - 1
    })
}

#[cfg(test)]
mod calls_tests;
#[cfg(test)]
mod tests;
