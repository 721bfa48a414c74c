//! Collectives read back from the NCCL plugin's files (`nccl-<pid>.stn`) and joined to the verbs
//! work requests the same process posted: per communicator and collective the count, bytes,
//! algorithm, protocol, channels, time and bus bandwidth; per rank the arrival at each
//! collective (the last rank to arrive); the work requests of each collective. Pure functions
//! over records and events (`build`), plus the loader for a record directory (`load`).
//!
//! The join (docs/NCCL.md): NCCL's IB transport starts a net-plugin event `{qpNum, wr_id,
//! length}` on the proxy thread right before each `ibv_post_send` / `ibv_post_recv` of a proxy
//! step, so a QP event joins the first post on the same thread and QP at or after it. Posts with
//! no QP event (the receiver's FIFO write, the GPU Direct flush read, or an NCCL that emits no QP
//! events) join through the proxy step instead: the first step state "posted" (SendWait,
//! RecvWait, RecvFlushWait) recorded on that thread at or after the post is the step whose
//! `isend` / `irecv` / `iflush` made it. Whatever joins nothing is counted, never dropped.

use std::collections::{BTreeMap, HashMap};

use super::format::{self, ALGOS, DATATYPES, FUNCS, PROTOS, etype, index_of, kind, state};
use crate::event::{ClockSample, TscClock};

mod report;
pub use report::*;

pub use super::format::{GROUP_FUNC, func_name, group_func, size_bucket};

#[derive(Clone, Debug, Default)]
struct Call {
    comm: u64,
    is_p2p: bool,
    /// Send/Recv: the peer rank.
    peer: u32,
    seq: u64,
    count: u64,
    func: u8,
    dtype: u8,
    algo: u8,
    proto: u8,
    channels: u8,
    /// Its API event (CollApi / P2pApi; 0: none).
    api: u64,
    start: u64,
    stop: Option<u64>,
    last_op_stop: u64,
    ops_open: i64,
    wrs: u64,
    wr_bytes: u64,
    /// Its kernel's first start and last stop (GPU globaltimer ns) over its channels.
    gpu: Option<(u64, u64)>,
    /// Index in the timeline's calls.
    tl: usize,
}

/// An API event (GroupApi, CollApi, P2pApi).
#[derive(Clone, Debug, Default)]
struct Api {
    etype: u8,
    parent: u64,
    depth: u64,
    func: u8,
    count: u64,
    start: u64,
}

#[derive(Clone, Debug, Default)]
struct Comm {
    id: u64,
    name: String,
    nranks: u32,
    rank: u32,
}

/// nccl-tests' "size" of one call (the bytes its bus bandwidth is computed over) and its bus
/// factor.
fn size_and_factor(func: &str, bytes: u64, n: u64) -> (u64, f64) {
    let n = n.max(1);
    let nf = n as f64;
    match func {
        "AllReduce" => (bytes, 2.0 * (nf - 1.0) / nf),
        "AllGather" | "ReduceScatter" | "AlltoAll" => (bytes * n, (nf - 1.0) / nf),
        _ => (bytes, 1.0),
    }
}

/// Communicator id → (function, sequence number) → each rank's start of it.
type Starts = BTreeMap<u64, BTreeMap<(String, u64), Vec<Start>>>;

#[derive(Clone, Debug)]
struct Start {
    rank: u32,
    nranks: u32,
    func: String,
    real_ns: u64,
    /// Its kernel's first start on the GPU (record clock), when known.
    gpu_ns: Option<u64>,
    completed: bool,
}

/// Calls compared, median and max spread, the rank last at the max; rank → times last.
type Spreads = (u64, u64, u64, u32, BTreeMap<u32, u64>);

/// The spreads of per-call (rank, start) lists.
fn spreads_of<'a>(calls: impl Iterator<Item = Vec<(u32, u64)>> + 'a) -> Option<Spreads> {
    let mut spreads = Vec::new();
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut worst = (0u64, 0u32);
    for v in calls {
        if v.len() < 2 {
            continue;
        }
        let lo = v.iter().map(|x| x.1).min().unwrap_or(0);
        let (lr, hi) = v.iter().copied().max_by_key(|x| x.1).unwrap_or((0, 0));
        spreads.push(hi - lo);
        if hi - lo >= worst.0 {
            worst = (hi - lo, lr);
        }
        *last.entry(lr).or_default() += 1;
    }
    if spreads.is_empty() {
        return None;
    }
    spreads.sort_unstable();
    Some((
        spreads.len() as u64,
        spreads[spreads.len() / 2],
        spreads[spreads.len() - 1],
        worst.1,
        last,
    ))
}

/// Builds the report of several processes (their files and posts).
pub fn build(inputs: &[ProcessInput]) -> NcclReport {
    let mut rep = NcclReport::default();
    // (comm id, (func, seq)) → [(rank, start real ns)], for arrivals.
    let mut starts: Starts = BTreeMap::new();
    for p in inputs {
        if let Some(pr) = &p.problem {
            rep.problems.push(format!("{} pid {}: {pr}", p.host, p.pid));
        }
        build_one(p, &mut rep, &mut starts);
    }
    for (comm, seqs) in starts {
        for ((func, seq), v) in &seqs {
            if rep.stalled.iter().all(|x| x.comm != format!("{comm:016x}"))
                && let Some(mut st) = stalled(comm, func, *seq, v)
            {
                for ((f2, s2), v2) in &seqs {
                    if f2 != func {
                        continue;
                    }
                    for x in v2.iter().filter(|x| x.completed) {
                        let e = st.last_completed.entry(x.rank).or_default();
                        *e = (*e).max(*s2);
                    }
                }
                rep.stalled.push(st);
            }
        }
        let host = spreads_of(
            seqs.values()
                .map(|v| v.iter().map(|x| (x.rank, x.real_ns)).collect()),
        );
        let Some((collectives, median, max, max_last, last_rank)) = host else {
            continue;
        };
        let mut a = Arrivals {
            comm: format!("{comm:016x}"),
            collectives,
            max_spread_ns: max,
            median_spread_ns: median,
            max_spread_last_rank: max_last,
            last_rank,
            ..Default::default()
        };
        // From the GPU's view: calls whose kernel start every reporting rank knows.
        let gpu = spreads_of(seqs.values().filter_map(|v| {
            v.iter()
                .map(|x| x.gpu_ns.map(|g| (x.rank, g)))
                .collect::<Option<Vec<_>>>()
        }));
        if let Some((n, median, max, max_last, last_rank)) = gpu {
            a.gpu_collectives = n;
            a.gpu_median_spread_ns = median;
            a.gpu_max_spread_ns = max;
            a.gpu_max_spread_last_rank = max_last;
            a.gpu_last_rank = last_rank;
        }
        rep.arrivals.push(a);
    }
    rep
}

/// The collective `seq` of `comm`, when some rank started it and it did not complete on every
/// rank of the communicator.
fn stalled(comm: u64, func: &str, seq: u64, v: &[Start]) -> Option<Stalled> {
    let nranks = v.iter().map(|x| x.nranks).max().unwrap_or(0);
    let started: Vec<u32> = v.iter().map(|x| x.rank).collect();
    let incomplete: Vec<u32> = v.iter().filter(|x| !x.completed).map(|x| x.rank).collect();
    let waiting_for: Vec<u32> = (0..nranks).filter(|r| !started.contains(r)).collect();
    if incomplete.is_empty() && waiting_for.is_empty() {
        return None;
    }
    let mut st = Stalled {
        comm: format!("{comm:016x}"),
        func: v
            .first()
            .map_or_else(|| func.to_string(), |x| x.func.clone()),
        seq,
        nranks,
        started,
        incomplete,
        waiting_for,
        last_completed: BTreeMap::new(),
    };
    st.started.sort_unstable();
    st.incomplete.sort_unstable();
    Some(st)
}

fn build_one(p: &ProcessInput, rep: &mut NcclReport, starts: &mut Starts) {
    let mut recs = p.recs.clone();
    // Records of several threads interleave in the file in queue order; the join wants time.
    recs.sort_by_key(|r| r.tsc());
    let clocks: Vec<ClockSample> = recs
        .iter()
        .filter(|r| r.kind() == kind::CLOCK)
        .map(|r| ClockSample {
            tsc: r.tsc(),
            mono_ns: r.p(0),
            real_ns: r.p(1),
        })
        .collect();
    let clock = TscClock::new(clocks);
    let mut tl = Timeline {
        host: p.host.clone(),
        pid: p.pid,
        ..Default::default()
    };
    let mut comms: HashMap<u64, Comm> = HashMap::new();
    let mut calls: BTreeMap<u64, Call> = BTreeMap::new();
    let mut apis: HashMap<u64, Api> = HashMap::new();
    // proxy op id → (call id, timeline op); step id → (op id, timeline step).
    let mut op_call: HashMap<u64, (u64, usize)> = HashMap::new();
    let mut step_op: HashMap<u64, (u64, usize)> = HashMap::new();
    // Kernel channel event id → call id.
    let mut kernel_call: HashMap<u64, u64> = HashMap::new();
    // Host real ns minus GPU globaltimer, over every kernel timestamp: the smallest is the one
    // the proxy saw soonest.
    let mut gpu_offset: Option<i128> = None;
    // QP events: (tsc, tid, qpn, length, step id).
    let mut qp_events: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    // "posted" step states per thread: (tsc, step id).
    let mut posted: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    let j = &mut rep.join;
    // Proxy ops / steps of the timeline, filled in as their records come.
    let mut tl_ops: Vec<(u64, TlOp)> = Vec::new();
    // Aggregate mode's counted host calls: (communicator, function, calls, bytes).
    let mut counted: Vec<(u64, u8, u64, u64)> = Vec::new();
    let note_gpu = |host_tsc: u64, gpu: u64, off: &mut Option<i128>| {
        if gpu != 0 {
            let d = clock.to_real_ns(host_tsc) as i128 - gpu as i128;
            *off = Some(off.map_or(d, |o| o.min(d)));
        }
    };
    for r in &recs {
        match (r.kind(), r.etype()) {
            (kind::INIT, _) => {
                j.profiler_version = j.profiler_version.max(r.0[14]);
                comms.insert(
                    r.comm(),
                    Comm {
                        id: r.p(0),
                        nranks: r.p(1) as u32,
                        rank: r.p(3) as u32,
                        name: format::unpack_name(&r.0[10..14]),
                    },
                );
            }
            (kind::TOTALS, _) => {
                j.dropped_records += r.p(0);
                j.unknown_events += r.p(1);
            }
            (kind::COUNTS, _) => counted.push((r.comm(), r.p(0) as u8, r.p(1), r.p(2))),
            (kind::START, t @ (etype::GROUP_API | etype::COLL_API | etype::P2P_API)) => {
                let (func, ..) = format::unpack_coll(r.p(2));
                apis.insert(
                    r.id(),
                    Api {
                        etype: t,
                        parent: r.parent(),
                        depth: r.p(0),
                        func,
                        count: r.p(1),
                        start: r.tsc(),
                    },
                );
            }
            (kind::START, t @ (etype::COLL | etype::P2P)) => {
                let (func, dtype, algo, proto, channels, _) = format::unpack_coll(r.p(2));
                calls.insert(
                    r.id(),
                    Call {
                        comm: r.comm(),
                        is_p2p: t == etype::P2P,
                        peer: r.p(3) as u32,
                        seq: r.p(0),
                        count: r.p(1),
                        func,
                        dtype,
                        algo,
                        proto,
                        channels,
                        api: r.parent(),
                        start: r.tsc(),
                        ..Default::default()
                    },
                );
            }
            (kind::START, etype::PROXY_OP) => {
                if let Some(c) = calls.get_mut(&r.parent()) {
                    c.ops_open += 1;
                    op_call.insert(r.id(), (r.parent(), tl_ops.len()));
                    tl_ops.push((
                        r.parent(),
                        TlOp {
                            call: 0,
                            channel: r.p(1) as u8,
                            peer: r.p(2) as u32,
                            steps: r.p(3) as u32,
                            send: r.p(5) != 0,
                            start: r.tsc(),
                            stop: None,
                        },
                    ));
                }
            }
            (kind::START, etype::PROXY_STEP) => {
                j.proxy_steps += 1;
                let op_tl = op_call.get(&r.parent()).map(|x| x.1);
                if let Some(op) = op_tl {
                    step_op.insert(r.id(), (r.parent(), tl.steps.len()));
                    tl.steps.push(TlStep {
                        op,
                        step: r.p(0) as u32,
                        start: r.tsc(),
                        ..Default::default()
                    });
                } else {
                    step_op.insert(r.id(), (r.parent(), usize::MAX));
                }
            }
            (kind::START, etype::KERNEL_CH) => {
                if let Some(c) = calls.get_mut(&r.parent()) {
                    kernel_call.insert(r.id(), r.parent());
                    let g = r.p(1);
                    if g != 0 {
                        c.gpu = Some(c.gpu.map_or((g, 0), |(a, b)| (a.min(g), b)));
                        note_gpu(r.tsc(), g, &mut gpu_offset);
                    }
                }
            }
            (kind::STATE, etype::KERNEL_CH) if r.state() == state::KERNEL_CH_STOP => {
                if let Some(c) = kernel_call.get(&r.id()).and_then(|c| calls.get_mut(c)) {
                    let g = r.p(0);
                    if g != 0 {
                        c.gpu = Some(c.gpu.map_or((g, g), |(a, b)| (a, b.max(g))));
                        note_gpu(r.tsc(), g, &mut gpu_offset);
                    }
                }
            }
            (kind::START, etype::NET_PLUGIN) => {
                let typ = r.p(0) & format::NET_TYPE_MASK;
                if typ == format::NET_TYPE_IB {
                    j.qp_events += 1;
                    if r.parent() == 0 {
                        j.qp_events_without_step += 1;
                    }
                    qp_events.push((r.tsc(), r.tid(), r.p(5) as u32, r.p(6), r.parent()));
                } else if typ == format::NET_TYPE_SOCK {
                    j.socket_events += 1;
                }
            }
            (kind::STATE, etype::PROXY_STEP) => {
                if matches!(
                    r.state(),
                    state::SEND_WAIT | state::RECV_WAIT | state::RECV_FLUSH_WAIT
                ) {
                    posted.entry(r.tid()).or_default().push((r.tsc(), r.id()));
                }
                if let Some(s) = step_op.get(&r.id()).and_then(|x| tl.steps.get_mut(x.1))
                    && r.p(0) != 0
                {
                    s.bytes = r.p(0);
                }
            }
            (kind::STOP, etype::PROXY_STEP) => {
                if let Some(s) = step_op.get(&r.id()).and_then(|x| tl.steps.get_mut(x.1)) {
                    s.stop = Some(r.tsc());
                }
            }
            (kind::STOP, etype::COLL | etype::P2P) => {
                if let Some(c) = calls.get_mut(&r.id()) {
                    c.stop = Some(r.tsc());
                }
            }
            (kind::STOP, etype::PROXY_OP) => {
                if let Some(&(c, o)) = op_call.get(&r.id()) {
                    tl_ops[o].1.stop = Some(r.tsc());
                    if let Some(c) = calls.get_mut(&c) {
                        c.ops_open -= 1;
                        c.last_op_stop = c.last_op_stop.max(r.tsc());
                    }
                }
            }
            _ => {}
        }
    }
    // The join. Posts per (tid, qpn) in time order; a cursor each.
    let mut posts = p.posts.clone();
    posts.sort_by_key(|x| x.tsc);
    j.wrs += posts.len() as u64;
    let mut by_q: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
    for (i, x) in posts.iter().enumerate() {
        by_q.entry((x.tid, x.qpn)).or_default().push(i);
    }
    let mut cursor: HashMap<(u32, u32), usize> = HashMap::new();
    let mut post_step: Vec<Option<u64>> = vec![None; posts.len()];
    let mut via_qp = vec![false; posts.len()];
    for &(tsc, tid, qpn, len, step) in &qp_events {
        let list = by_q.get(&(tid, qpn));
        let cur = cursor.entry((tid, qpn)).or_insert(0);
        let found = list.and_then(|l| {
            while *cur < l.len() && posts[l[*cur]].tsc < tsc {
                *cur += 1;
            }
            let i = *l.get(*cur)?;
            *cur += 1;
            Some(i)
        });
        match found {
            Some(i) => {
                j.qp_events_joined += 1;
                if posts[i].bytes != len
                    && !crate::event::Op::from_u8(posts[i].op).is_some_and(|o| o.is_receive())
                {
                    j.qp_length_mismatches += 1;
                }
                via_qp[i] = true;
                post_step[i] = Some(step);
            }
            None => j.qp_events_unjoined += 1,
        }
    }
    for v in posted.values_mut() {
        v.sort_unstable();
    }
    for (i, x) in posts.iter().enumerate() {
        if post_step[i].is_some_and(|s| s != 0) {
            j.wrs_via_qp_event += 1;
            continue;
        }
        let step = posted.get(&x.tid).and_then(|v| {
            let k = v.partition_point(|e| e.0 < x.tsc);
            v.get(k).map(|e| e.1)
        });
        match step {
            Some(s) => {
                post_step[i] = Some(s);
                if via_qp[i] {
                    j.wrs_via_qp_event += 1;
                } else {
                    j.wrs_via_step += 1;
                }
            }
            None => {
                j.wrs_unjoined += 1;
                post_step[i] = None;
            }
        }
    }
    let joined: std::collections::HashSet<u64> = post_step.iter().flatten().copied().collect();
    let posted_steps: std::collections::HashSet<u64> =
        posted.values().flatten().map(|e| e.1).collect();
    j.steps_without_wr += posted_steps.difference(&joined).count() as u64;
    // Work requests per call (by call id), for the timeline.
    let mut wr_of: Vec<(u64, Post)> = Vec::new();
    for (i, x) in posts.iter().enumerate() {
        let call = post_step[i]
            .and_then(|s| step_op.get(&s))
            .and_then(|o| op_call.get(&o.0))
            .map(|c| c.0);
        if let Some(id) = call
            && let Some(c) = calls.get_mut(&id)
        {
            c.wrs += 1;
            c.wr_bytes += x.bytes;
            wr_of.push((id, *x));
        }
    }
    let gpu_real = |g: u64| -> u64 {
        let off = gpu_offset.unwrap_or(0);
        (g as i128 + off).max(0) as u64
    };
    if gpu_offset.is_some() && rep.gpu_clock.is_empty() {
        rep.gpu_clock = GPU_CLOCK.to_string();
    }

    // The calls as the user made them: groups of point-to-point API calls named by their shape.
    // Group API event id → (P2pApi counts of Sends, of Recvs), for the point-to-point calls.
    let send_f = index_of(FUNCS, b"Send");
    let mut groups: BTreeMap<u64, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for a in apis.values().filter(|a| a.etype == etype::P2P_API) {
        let g = groups.entry(a.parent).or_default();
        if a.func == send_f {
            g.0.push(a.count);
        } else {
            g.1.push(a.count);
        }
    }
    // Each call's group (by the call's P2pApi's parent), and each named group's function.
    let group_of = |c: &Call| -> Option<u64> {
        if !c.is_p2p {
            return None;
        }
        let a = apis.get(&c.api)?;
        (a.etype == etype::P2P_API && a.parent != 0).then_some(a.parent)
    };
    // Group id → (function, comm, start tsc, count, dtype).
    let mut named: BTreeMap<u64, (u8, u64, u64, u64, u8)> = BTreeMap::new();
    for c in calls.values() {
        let Some(g) = group_of(c) else { continue };
        if named.contains_key(&g) {
            continue;
        }
        let Some(ga) = apis.get(&g) else { continue };
        let nranks = comms.get(&c.comm).map_or(0, |m| m.nranks);
        let (sends, recvs) = groups.get(&g).cloned().unwrap_or_default();
        if let Some(f) = group_func(ga.depth, &sends, &recvs, nranks) {
            let count = sends.first().or(recvs.first()).copied().unwrap_or(0);
            named.insert(g, (f, c.comm, ga.start, count, c.dtype));
        }
    }

    // Every call in start order (a group before its parts: it started first).
    enum Entry {
        Task(u64),
        Group(u64),
    }
    let mut order: Vec<(u64, u8, u64, Entry)> = Vec::new();
    for (&id, c) in &calls {
        order.push((c.start, 1, id, Entry::Task(id)));
    }
    for (&g, n) in &named {
        order.push((n.2, 0, g, Entry::Group(g)));
    }
    order.sort_by_key(|x| (x.0, x.1, x.2));
    let base = rep.calls.len();
    let mut group_index: HashMap<u64, usize> = HashMap::new();
    let mut api_seq: HashMap<(u64, u8), u64> = HashMap::new();
    let mut lane_n: HashMap<(u64, u8, u32), u64> = HashMap::new();
    // A program enqueues calls ahead of the GPU, so a call's own time starts when the one before
    // it on the same stream of work ended: collectives serialised per communicator,
    // point-to-point calls per (communicator, direction, peer), calls made of parts per
    // (communicator, function).
    let mut prev_end: HashMap<(u64, u8, u8, u32), u64> = HashMap::new();
    let mut task_end: HashMap<u64, Option<u64>> = HashMap::new();
    for (_, _, _, e) in &order {
        match e {
            Entry::Task(id) => {
                let Some(c) = calls.get(id) else { continue };
                let comm = comms.get(&c.comm).cloned().unwrap_or_default();
                let mut func = format::name(FUNCS, c.func).to_string();
                // A rank's send to or receive from itself (AlltoAll's own part) moves no
                // network data.
                if c.is_p2p && c.peer == comm.rank {
                    func.push_str(" (self)");
                }
                let esize = DATATYPES.get(c.dtype as usize).map_or(1, |d| d.1);
                let end = match c.stop {
                    Some(s) if c.ops_open <= 0 => Some(s.max(c.last_op_stop)),
                    _ => None,
                };
                task_end.insert(*id, end);
                let parent = group_of(c).and_then(|g| group_index.get(&g).copied());
                let lane = if c.is_p2p {
                    (c.comm, 1, c.func, c.peer)
                } else {
                    (c.comm, 0, 0, 0)
                };
                let own = own_time(&mut prev_end, lane, c.start, end, &clock);
                let seq = if c.is_p2p {
                    let n = lane_n.entry((c.comm, c.func, c.peer)).or_default();
                    *n += 1;
                    *n
                } else {
                    c.seq
                };
                let gpu = c.gpu.filter(|g| g.1 >= g.0 && g.1 != 0);
                let rec = CallRec {
                    host: p.host.clone(),
                    pid: p.pid,
                    rank: comm.rank,
                    nranks: comm.nranks,
                    comm: format!("{:016x}", comm.id),
                    kind: if c.is_p2p { "p2p" } else { "collective" },
                    seq,
                    func,
                    parent: parent.map(|i| base + i),
                    peer: c.is_p2p.then_some(c.peer),
                    count: c.count,
                    dtype_size: esize,
                    bytes: c.count * esize,
                    size_bucket: size_bucket(c.count * esize),
                    algo: (!c.is_p2p).then(|| format::name(ALGOS, c.algo)),
                    proto: (!c.is_p2p).then(|| format::name(PROTOS, c.proto)),
                    channels: c.channels as u32,
                    host_call_ns: clock.to_real_ns(c.start),
                    end_ns: end.map(|e| clock.to_real_ns(e)),
                    time_ns: own,
                    gpu_start_ns: gpu.map(|g| gpu_real(g.0)),
                    gpu_end_ns: gpu.map(|g| gpu_real(g.1)),
                    wrs: c.wrs,
                    wr_bytes: c.wr_bytes,
                };
                let i = rep.calls.len() - base;
                let start = c.start;
                if let Some(c) = calls.get_mut(id) {
                    c.tl = i;
                }
                tl.calls.push(TlCall {
                    comm_id: comm.id,
                    comm_name: comm.name.clone(),
                    rank: comm.rank,
                    nranks: comm.nranks,
                    start,
                    end,
                    rec: base + i,
                    parent,
                });
                rep.calls.push(rec);
            }
            Entry::Group(g) => {
                let Some(&(f, comm_key, start, count, dtype)) = named.get(g) else {
                    continue;
                };
                let comm = comms.get(&comm_key).cloned().unwrap_or_default();
                let esize = DATATYPES.get(dtype as usize).map_or(1, |d| d.1);
                let seq = api_seq.entry((comm_key, f)).or_default();
                *seq += 1;
                let i = rep.calls.len() - base;
                group_index.insert(*g, i);
                let bytes = if f == GROUP_FUNC { 0 } else { count * esize };
                rep.calls.push(CallRec {
                    host: p.host.clone(),
                    pid: p.pid,
                    rank: comm.rank,
                    nranks: comm.nranks,
                    comm: format!("{:016x}", comm.id),
                    kind: "api",
                    seq: *seq,
                    func: func_name(f).to_string(),
                    count: if f == GROUP_FUNC { 0 } else { count },
                    dtype_size: esize,
                    bytes,
                    size_bucket: size_bucket(bytes),
                    host_call_ns: clock.to_real_ns(start),
                    ..Default::default()
                });
                tl.calls.push(TlCall {
                    comm_id: comm.id,
                    comm_name: comm.name.clone(),
                    rank: comm.rank,
                    nranks: comm.nranks,
                    start,
                    end: None,
                    rec: base + i,
                    parent: None,
                });
            }
        }
    }
    // A call made of parts: its end is its last part's (once every part ended), its work
    // requests and GPU time theirs; a Group's bytes its Sends'.
    let mut parts: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, c) in tl.calls.iter().enumerate() {
        if let Some(p) = c.parent {
            parts.entry(p).or_default().push(i);
        }
    }
    let mut group_order: Vec<usize> = parts.keys().copied().collect();
    group_order.sort_by_key(|&i| tl.calls[i].start);
    for gi in group_order {
        let v = &parts[&gi];
        let mut end = Some(0u64);
        let (mut wrs, mut wr_bytes, mut sent, mut channels) = (0, 0, 0, 0);
        let mut gpu: Option<(u64, u64)> = None;
        let mut all_gpu = true;
        for &k in v {
            let part = &rep.calls[base + k];
            end = match (end, tl.calls[k].end) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
            wrs += part.wrs;
            wr_bytes += part.wr_bytes;
            channels = channels.max(part.channels);
            if part.func.starts_with("Send") {
                sent += part.bytes;
            }
            match (part.gpu_start_ns, part.gpu_end_ns) {
                (Some(a), Some(b)) => {
                    gpu = Some(gpu.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
                }
                _ => all_gpu = false,
            }
        }
        let start = tl.calls[gi].start;
        let end = end.map(|e| e.max(start));
        tl.calls[gi].end = end;
        let r = &rep.calls[base + gi];
        let f = if r.func == "Group" {
            GROUP_FUNC
        } else {
            index_of(FUNCS, r.func.as_bytes())
        };
        let comm_key = named.iter().find(|(g, _)| group_index.get(*g) == Some(&gi));
        let lane = (comm_key.map_or(0, |x| x.1.1), 2, f, 0);
        let own = own_time(&mut prev_end, lane, start, end, &clock);
        let r = &mut rep.calls[base + gi];
        r.end_ns = end.map(|e| clock.to_real_ns(e));
        r.time_ns = own;
        r.wrs = wrs;
        r.wr_bytes = wr_bytes;
        r.channels = channels;
        if f == GROUP_FUNC {
            r.bytes = sent;
            r.size_bucket = size_bucket(sent);
        }
        if all_gpu && let Some((a, b)) = gpu {
            r.gpu_start_ns = Some(a);
            r.gpu_end_ns = Some(b);
        }
    }
    // The timeline's operations and work requests, by timeline call.
    for (call, mut op) in tl_ops {
        if let Some(c) = calls.get(&call) {
            op.call = c.tl;
            tl.ops.push(op);
        } else {
            tl.ops.push(TlOp {
                call: usize::MAX,
                ..op
            });
        }
    }
    for (id, x) in wr_of {
        if let Some(c) = calls.get(&id) {
            tl.wrs.push(TlWr {
                tid: x.tid,
                tsc: x.tsc,
                op: x.op,
                bytes: x.bytes,
                call: c.tl,
            });
        }
    }
    // Rows: per (communicator, function, algorithm, protocol), parts under their call's
    // function; per (communicator, function, size bucket), calls as the user made them.
    let mut rows: BTreeMap<(u64, String, String, String, String), CollRow> = BTreeMap::new();
    let mut sizes: BTreeMap<(u64, String, u64), SizeRow> = BTreeMap::new();
    for (k, t) in tl.calls.iter().enumerate() {
        let r = &rep.calls[base + k];
        let part_of = t
            .parent
            .map(|p| rep.calls[base + p].func.clone())
            .unwrap_or_default();
        let algo = r.algo.unwrap_or("-").to_string();
        let proto = r.proto.unwrap_or("-").to_string();
        let key = if part_of.is_empty() {
            (
                t.comm_id,
                r.func.clone(),
                String::new(),
                algo.clone(),
                proto.clone(),
            )
        } else {
            (
                t.comm_id,
                part_of.clone(),
                r.func.clone(),
                algo.clone(),
                proto.clone(),
            )
        };
        let row = rows.entry(key).or_insert_with(|| CollRow {
            host: p.host.clone(),
            pid: p.pid,
            rank: t.rank,
            nranks: t.nranks,
            comm: r.comm.clone(),
            comm_name: t.comm_name.clone(),
            func: r.func.clone(),
            part_of: part_of.clone(),
            algo,
            proto,
            ..Default::default()
        });
        row.count += 1;
        row.bytes += r.bytes;
        row.channels = r.channels;
        row.wrs += r.wrs;
        row.wr_bytes += r.wr_bytes;
        match r.time_ns {
            Some(ns) => row.time_ns += ns,
            None => row.incomplete += 1,
        }
        if let (Some(a), Some(b), Some(_)) = (r.gpu_start_ns, r.gpu_end_ns, r.end_ns) {
            row.gpu_calls += 1;
            row.gpu_time_ns += b.saturating_sub(a);
        }
        if !part_of.is_empty() {
            continue;
        }
        let s = sizes
            .entry((t.comm_id, r.func.clone(), r.size_bucket))
            .or_insert_with(|| SizeRow {
                host: p.host.clone(),
                pid: p.pid,
                rank: t.rank,
                nranks: t.nranks,
                comm: r.comm.clone(),
                func: r.func.clone(),
                size_bucket: r.size_bucket,
                ..Default::default()
            });
        s.count += 1;
        s.bytes += r.bytes;
        if let Some(ns) = r.time_ns {
            s.time_ns += ns;
        }
        if let (Some(a), Some(b), Some(_)) = (r.gpu_start_ns, r.gpu_end_ns, r.end_ns) {
            s.gpu_time_ns += b.saturating_sub(a);
        }
        // Arrivals: collectives and calls made of parts, by (function, sequence number).
        if r.kind != "p2p" {
            starts
                .entry(t.comm_id)
                .or_default()
                .entry((r.func.clone(), r.seq))
                .or_default()
                .push(Start {
                    rank: t.rank,
                    nranks: t.nranks,
                    func: r.func.clone(),
                    real_ns: r.host_call_ns,
                    gpu_ns: r.gpu_start_ns,
                    completed: r.end_ns.is_some(),
                });
        }
    }
    // Aggregate mode: the calls counted, per communicator and function (no time, no algorithm).
    for (c, func, n, bytes) in counted {
        let comm = comms.get(&c).cloned().unwrap_or_default();
        let name = func_name(func).to_string();
        let row = rows
            .entry((comm.id, name.clone(), String::new(), "-".into(), "-".into()))
            .or_insert_with(|| CollRow {
                host: p.host.clone(),
                pid: p.pid,
                rank: comm.rank,
                nranks: comm.nranks,
                comm: format!("{:016x}", comm.id),
                comm_name: comm.name.clone(),
                func: name,
                algo: "-".into(),
                proto: "-".into(),
                ..Default::default()
            });
        row.count += n;
        row.bytes += bytes;
    }
    for mut row in rows.into_values() {
        let (size, factor) = size_and_factor(&row.func, row.bytes, row.nranks as u64);
        if row.time_ns > 0 {
            row.busbw_gbs = size as f64 * factor / row.time_ns as f64;
        }
        if row.gpu_time_ns > 0 && row.count > 0 {
            // Over the calls the GPU times cover: their share of the bytes.
            let bytes = size as f64 * row.gpu_calls as f64 / row.count as f64;
            row.gpu_busbw_gbs = bytes * factor / row.gpu_time_ns as f64;
        }
        rep.collectives.push(row);
    }
    for mut s in sizes.into_values() {
        let (size, factor) = size_and_factor(&s.func, s.bytes, s.nranks as u64);
        if s.time_ns > 0 {
            s.busbw_gbs = size as f64 * factor / s.time_ns as f64;
        }
        if s.gpu_time_ns > 0 {
            s.gpu_busbw_gbs = size as f64 * factor / s.gpu_time_ns as f64;
        }
        rep.by_size.push(s);
    }
    rep.timelines.push(tl);
}

/// A call's own time on its stream of work (`lane`): from the later of its start and the end of
/// the call before it there, to its end; none when it did not complete.
fn own_time(
    prev_end: &mut HashMap<(u64, u8, u8, u32), u64>,
    lane: (u64, u8, u8, u32),
    start: u64,
    end: Option<u64>,
    clock: &TscClock,
) -> Option<u64> {
    let e = end?;
    let from = prev_end.get(&lane).map_or(start, |&p| p.max(start));
    prev_end.insert(lane, e);
    Some(clock.to_real_ns(e).saturating_sub(clock.to_real_ns(from)))
}

/// How GPU timestamps are put on the record's clock (the report's `gpu_clock`).
pub const GPU_CLOCK: &str = "GPU globaltimer + per-process offset (the smallest host-minus-GPU difference over the kernel events: the one the proxy saw soonest); GPU-relative times exact, absolute ones late by at most the proxy's polling delay";

/// The NCCL file of each process of a recording (`nccl-<pid>.stn` beside its directory) with
/// the verbs posts of its record. None when no process has one.
pub fn load(recording: &crate::trace::reader::Recording) -> Option<NcclReport> {
    let mut inputs = Vec::new();
    for pr in &recording.processes {
        let pid = pr.identity.pid;
        let Some(path) = pr.dir.parent().map(|h| h.join(format!("nccl-{pid}.stn"))) else {
            continue;
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                inputs.push(ProcessInput {
                    host: pr.identity.host.clone(),
                    pid,
                    problem: Some(format!("{}: {e}", path.display())),
                    ..Default::default()
                });
                continue;
            }
        };
        let d = format::decode(&bytes);
        inputs.push(ProcessInput {
            host: pr.identity.host.clone(),
            pid,
            recs: d.recs,
            posts: posts_of(pr),
            problem: d.problem.map(|p| format!("{}: {p}", path.display())),
        });
    }
    (!inputs.is_empty()).then(|| build(&inputs))
}

/// The verbs posts of one process record: send-queue work requests and receives, with the QPN of
/// their endpoint.
pub fn posts_of(pr: &crate::trace::reader::ProcessRecording) -> Vec<Post> {
    use crate::event::{Layer, Op};
    let qpn: HashMap<u32, u32> = pr
        .endpoints
        .iter()
        .filter_map(|e| e.qpn.map(|q| (e.id, q)))
        .collect();
    let mut problems = Vec::new();
    pr.read_all_events(&mut problems)
        .into_iter()
        .filter_map(|e| {
            let op = Op::from_u8(e.op)?;
            if op.layer() != Layer::Ibverbs || matches!(op, Op::VerbsPollCq | Op::VerbsCqEvent) {
                return None;
            }
            Some(Post {
                tsc: e.tsc,
                tid: e.tid,
                qpn: *qpn.get(&e.ep)?,
                op: e.op,
                bytes: e.bytes,
            })
        })
        .collect()
}

mod render;
pub use render::{render, render_calls};

#[cfg(test)]
mod calls_tests;
#[cfg(test)]
mod tests;
